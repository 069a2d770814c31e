#!/usr/bin/env bash
# run-dualpi2-vm.sh — the kernel side of the dualpi2 differential run (docs/vs-kernel-sched.md):
# scenarios/dualpi2-l4s.toml three times on Debian's 6.18.15 with sch_dualpi2 under qemu,
# into crates/qdisc-sim/tests/fixtures/sched/dualpi2-l4s{,.2,.3}.{json,txt}, which
# crates/qdisc-sim/tests/vs_kernel_sched.rs compares with the simulator.
#
# The kernel package is scripts/build-kernel-deb.sh's (built when $QDL_CACHE/vm/kdeb/ has
# none: long), the guest's tc scripts/build-iproute2.sh's 6.18 (the guest's Debian
# iproute2 6.15 cannot print dualpi2), passed as QDL_VM_TC. Each run holds
# /work/tmp/vm.lock (or $QDL_VM_LOCK) while qemu runs; qemu is not niced: under TCG a
# starved guest's shaper falls short of its rate and its AQM sees delays the scenario
# does not make (the page says what that does).
#
# Usage: scripts/run-dualpi2-vm.sh [RUNS]   (default 3; writes the fixtures)
# Environment: QDL_CACHE, QDL_VM_LOCK, QDISC_LAB (the qdisc-lab binary; default
# target/release/qdisc-lab, built if missing).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"
LOCK="${QDL_VM_LOCK:-/work/tmp/vm.lock}"
RUNS="${1:-3}"
OUT=crates/qdisc-sim/tests/fixtures/sched
die() { echo "run-dualpi2-vm: $*" >&2; exit 1; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive number, not $RUNS"

deb=$(ls -1t "$CACHE"/vm/kdeb/linux-image-6.18.*+qdl1_amd64.deb 2>/dev/null | head -n1 || true)
[[ -n $deb ]] || deb=$(scripts/build-kernel-deb.sh | tail -n1)
[[ -f $deb ]] || die "no kernel package: $deb"
tc="$(scripts/build-iproute2.sh | tail -n1)/sbin/tc"
[[ -x $tc ]] || die "no tc 6.18: $tc"
bin="${QDISC_LAB:-target/release/qdisc-lab}"
[[ -x $bin ]] || nice -n 19 cargo build --release -p qdisc-lab
mkdir -p "$(dirname "$LOCK")"

for ((k = 1; k <= RUNS; k++)); do
    n=$([[ $k == 1 ]] && echo "" || echo ".$k")
    echo "run-dualpi2-vm: run $k of $RUNS -> $OUT/dualpi2-l4s$n.json" >&2
    QDL_VM_TC="$tc" flock "$LOCK" "$bin" run --backend vm --kernel "$deb" scenarios/dualpi2-l4s.toml \
        --json "$OUT/dualpi2-l4s$n.json" >"$OUT/dualpi2-l4s$n.txt"
done
echo "run-dualpi2-vm: now: QDISC_LAB_BLESS=1 cargo test --release -p qdisc-sim --test vs_kernel_sched" >&2
