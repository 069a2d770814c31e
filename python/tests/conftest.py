import pathlib

import pytest

import qdisc_lab

REPO = pathlib.Path(__file__).resolve().parents[2]
BUFFERBLOAT = REPO / "scenarios" / "bufferbloat-fq_codel.toml"


@pytest.fixture
def short():
    """The bundled bufferbloat scenario cut to 1 s (runs in tens of ms)."""
    return qdisc_lab.Scenario.load(BUFFERBLOAT).set("duration", "1s")
