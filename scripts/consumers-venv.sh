#!/usr/bin/env bash
# consumers-venv.sh — a Python venv with the third-party readers of our output files
# (flent 2.3.0 and its plotter, the PyPI `iperf3` package), pinned, under
# ${QDL_CACHE:-~/.cache/qdisc-lab}/consumers-venv; prints the venv's directory.
#
# Usage: venv=$(scripts/consumers-venv.sh)   # then $venv/bin/flent, $venv/bin/python
#
# Used by crates/qdisc-lab/tests/consumers.rs. Idempotent: the venv is reused while its
# stamp names the same pins. Needs python3 with venv and network access to PyPI once.
set -euo pipefail

CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"
VENV="$CACHE/consumers-venv"
PINS=(flent==2.3.0 iperf3==0.1.11 matplotlib==3.9.4)

# Tests run in parallel: one installs, the others wait for it.
mkdir -p "$CACHE"
exec 9>"$CACHE/consumers-venv.lock"
flock 9
if [[ -x $VENV/bin/python && "$(cat "$VENV/pins" 2>/dev/null)" == "${PINS[*]}" ]]; then
    echo "$VENV"
    exit 0
fi
echo "consumers-venv: installing ${PINS[*]} into $VENV" >&2
rm -rf "$VENV"
python3 -m venv "$VENV" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check "${PINS[@]}" >&2
echo "${PINS[*]}" >"$VENV/pins"
echo "$VENV"
