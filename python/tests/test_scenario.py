"""Scenarios from Python: overrides, validation, dict round trips."""

import pytest

from qdisc_lab import Scenario, ScenarioError

from conftest import BUFFERBLOAT


def test_set_edits_in_place():
    s = Scenario.load(BUFFERBLOAT)
    t = s.set("link[0].rate", "10mbit")
    assert t.to_dict()["link"][0]["rate"] == "10mbit"
    # One line differs, the rest keep their text and numbers.
    a, b = s.to_toml().splitlines(), t.to_toml().splitlines()
    assert len(a) == len(b)
    assert [(x, y) for x, y in zip(a, b) if x != y] == [('rate = "1gbit"', 'rate = "10mbit"')]
    u = s.with_({"traffic[0].flows": 8, "tc.client.script": "qdisc add dev eth0 root pfifo"}, seed=9)
    d = u.to_dict()
    assert (d["traffic"][0]["flows"], d["seed"], d["tc"]["client"]["script"]) == (8, 9, "qdisc add dev eth0 root pfifo")
    assert s.to_dict()["seed"] == 1  # immutable


def test_located_errors_name_the_override():
    s = Scenario.load(BUFFERBLOAT)
    with pytest.raises(ScenarioError) as e:
        s.set("link[0].rate", "fast")
    assert str(e.value) == (f'override link[0].rate="fast": {BUFFERBLOAT}:21:8: link[0].rate: invalid rate "fast" '
                            '(tc units, e.g. "100mbit", "1gbit", "500kbit")')
    with pytest.raises(ScenarioError) as e:
        s.set("traffic[0].flows", "many")
    assert str(e.value).startswith(f'override traffic[0].flows="many": {BUFFERBLOAT}:')
    with pytest.raises(ScenarioError) as e:
        s.set("link[1].rate", "1mbit")
    assert str(e.value) == ('override link[1].rate="1mbit": link[1].rate: index 1 out of range: '
                            'the scenario has 1 link entries (link[0]..link[0])')
    with pytest.raises(ScenarioError) as e:
        s.set("host[0].colour", "red")
    assert "unknown field `colour`" in str(e.value) and "cpus" in str(e.value)


def test_validate_and_dicts():
    bad = Scenario.from_toml('duration = "10s"\n[[host]]\nname = "a"\n[[traffic]]\nkind = "tcp"\nfrom = "a"\nto = "z"\n',
                             "bad.toml")
    with pytest.raises(ScenarioError) as e:
        bad.validate()
    assert str(e.value) == 'bad.toml:7:6: traffic[0].to: unknown host "z" (hosts: a)'
    s = Scenario.load(BUFFERBLOAT)
    again = Scenario.from_dict(s.to_dict()).validate()
    assert again.to_dict() == s.to_dict()
    with pytest.raises(ScenarioError):
        Scenario.load("/nonexistent.toml")
