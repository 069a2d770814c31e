#!/usr/bin/env bash
# Record the kernel fixtures the simulator is checked against (crates/qdisc-sim/tests/
# fixtures/matrix): each NAME.toml runs on a real kernel, the host's for host fixtures
# and Debian 6.12 under qemu for vm-* ones, and leaves NAME.json (the RunResult) and
# NAME.txt (the report as printed: command, kernel, iperf3 and ping output, tc -s).
# A kernel's figures vary from run to run: `--run K` (K ≥ 2) records a further run as
# NAME.K.json and NAME.K.txt, and tests/vs_kernel.rs compares with the median of the runs.
# Usage: scripts/record-fixtures.sh [--run K] [NAME...]   (default: every fixture; needs root)
# Record on an otherwise idle machine: the kernel's figures are only as good as the CPU
# time it gets.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=crates/qdisc-sim/tests/fixtures/matrix
cargo build --release -q -p qdisc-lab
suffix=
if [ "${1:-}" = --run ]; then
    [ "$2" -ge 2 ] || { echo "--run K: K is 2 or more (run 1 is NAME.json)" >&2; exit 2; }
    suffix=".$2"
    shift 2
fi
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$dir"/*.toml; do names+=("$(basename "$f" .toml)"); done
fi
for n in "${names[@]}"; do
    backend=host
    case "$n" in vm-*) backend=vm ;; esac
    echo "== $n ($backend, load $(cut -d' ' -f1 /proc/loadavg))" >&2
    target/release/qdisc-lab run --backend "$backend" "$dir/$n.toml" --json "$dir/$n$suffix.json" >"$dir/$n$suffix.txt"
done
