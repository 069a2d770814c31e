#!/usr/bin/env bash
# Record the kernel fixtures the simulator is checked against (crates/qdisc-sim/tests/
# fixtures/matrix): each NAME.toml runs on a real kernel, the host's for host fixtures
# and Debian 6.12 under qemu for vm-* ones, and leaves NAME.json (the RunResult) and
# NAME.txt (the report as printed: command, kernel, iperf3 and ping output, tc -s).
# Usage: scripts/record-fixtures.sh [NAME...]   (default: every fixture; needs root)
# Record on an otherwise idle machine: the kernel's figures are only as good as the CPU
# time it gets.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=crates/qdisc-sim/tests/fixtures/matrix
cargo build --release -q -p qdisc-lab
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$dir"/*.toml; do names+=("$(basename "$f" .toml)"); done
fi
for n in "${names[@]}"; do
    backend=host
    case "$n" in vm-*) backend=vm ;; esac
    echo "== $n ($backend, load $(cut -d' ' -f1 /proc/loadavg))" >&2
    target/release/qdisc-lab run --backend "$backend" "$dir/$n.toml" --json "$dir/$n.json" >"$dir/$n.txt"
done
