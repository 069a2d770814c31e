#!/usr/bin/env bash
# The Python package's tests (python/tests) and the example sweep: a venv under
# ~/.cache/qdisc-lab/venv (created once, reused), this repository pip-installed into
# it with the dask and parquet extras (the README's line), pytest and matplotlib —
# pinned versions from PyPI. Building the package compiles crates/qdisc-py with cargo
# (release, sharing target/ with the workspace).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${QDISC_LAB_VENV:-$HOME/.cache/qdisc-lab/venv}
if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv" || {
        apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2
        python3 -m venv "$venv"
    }
fi
# maturin's build backend runs the `maturin` program: the venv's bin first on PATH.
export PATH="$venv/bin:$PATH"
"$venv/bin/pip" install -q maturin==1.16.0 pandas==2.3.3 "dask[distributed]==2026.8.0" distributed==2026.8.0 \
    pyarrow==26.0.1 pytest==9.2.0 matplotlib==3.11.2
# The README's install line (no build isolation: the pinned maturin above builds it).
"$venv/bin/pip" install -q --no-build-isolation ".[dask,parquet]"
# Tests run against the installed wheel, not the source tree.
(cd python/tests && "$venv/bin/python" -m pytest -q -p no:cacheprovider .)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venv/bin/python" examples/sweep_bufferbloat.py --small --out "$out"
