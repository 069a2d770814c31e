#!/usr/bin/env bash
# diff-kernel-vm.sh — run crafted packet sequences through the REAL kernel qdiscs
# (Debian 13's 6.12 kernel under qemu, the VM of scripts/capture-goldens-vm.sh) and
# record what left the qdisc as fixtures for crates/qdisc/tests/kernel_diff.rs.
#
# Usage: scripts/diff-kernel-vm.sh [SCENARIO...]
#   (no args: every goldens/diff/*.scenario.json). One boot for all scenarios.
#   Writes goldens/diff/<scenario>.kernel.json.
#
# Per scenario (see scripts/lib/diff-guest-init.sh): a veth pair between two
# netns; the scenario's tc script on the sender's a0 (a slow tbf/htb with fq or
# fq_codel under it, so a queue builds); scripts/lib/qdl-inject.c sends the packet
# sequence from one connected UDP socket per flow with the scheduled timing;
# scripts/lib/qdl-capture.c records, on the peer b0, every frame's id and kernel
# receive time in arrival order; `tc -s -j qdisc show` at the end.
#
# Reuses, from ${QDL_CACHE:-~/.cache/qdisc-lab}/vm, the kernel and the base
# initramfs that scripts/capture-goldens-vm.sh builds (it is run once for one
# cheap case if they are missing); this script appends an overlay cpio with its own
# /init and helpers. Environment: QDL_CACHE, QDL_VM_ACCEL (tcg|kvm),
# QDL_VM_TIMEOUT (s, default 900), QDL_DIFF_OUT (default goldens/diff).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIB="$REPO_ROOT/scripts/lib"
DIFF_DIR="$REPO_ROOT/goldens/diff"
OUT_DIR="${QDL_DIFF_OUT:-$DIFF_DIR}"
CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"
VM="$CACHE/vm"
ACCEL="${QDL_VM_ACCEL:-tcg}"
TIMEOUT="${QDL_VM_TIMEOUT:-900}"
die() { echo "diff-kernel-vm: $*" >&2; exit 1; }
log() { printf '[%s] diff-kernel-vm: %s\n' "$(date +%T)" "$*" >&2; }

for t in qemu-system-x86_64 cpio gcc python3 gzip; do
    command -v "$t" >/dev/null || die "need $t"
done

base_initramfs() { ls -1t "$VM"/initramfs-6.12.*.cpio.gz 2>/dev/null | head -n1; }
BASE=$(base_initramfs || true)
if [[ -z $BASE ]]; then
    log "no cached VM: building it with scripts/capture-goldens-vm.sh (one case, to a scratch dir)"
    scratch=$(mktemp -d)
    QDL_VM_OUT="$scratch" "$REPO_ROOT/scripts/capture-goldens-vm.sh" noqueue-default
    rm -rf "$scratch"
    BASE=$(base_initramfs)
fi
KV=$(basename "$BASE"); KV=${KV#initramfs-}; KV=${KV%.cpio.gz}
VMLINUX="$VM/kernel-$KV/vmlinux"
[[ -f $VMLINUX ]] || die "missing $VMLINUX (run scripts/capture-goldens-vm.sh once)"

if [[ $# -eq 0 ]]; then
    mapfile -t NAMES < <(cd "$DIFF_DIR" && ls -1 -- *.scenario.json | sed 's/\.scenario\.json$//')
else
    NAMES=("$@")
fi
for n in "${NAMES[@]}"; do
    [[ -f $DIFF_DIR/$n.scenario.json ]] || die "no such scenario: $DIFF_DIR/$n.scenario.json"
done

for p in qdl-inject qdl-capture; do
    if [[ ! -x $VM/$p || $LIB/$p.c -nt $VM/$p ]]; then
        log "building $p (static)"
        gcc -static -O2 -Wall -o "$VM/$p.tmp.$$" "$LIB/$p.c"
        mv -f "$VM/$p.tmp.$$" "$VM/$p"
    fi
done

RUN="$VM/diff.$(date +%Y%m%d-%H%M%S).$$"
mkdir -p "$RUN/in/lab" "$RUN/results"
python3 "$LIB/diff_vm.py" plan "$DIFF_DIR" "$RUN/in/lab" "$RUN/manifest.json" "${NAMES[@]}"
cp "$VM/qdl-inject" "$VM/qdl-capture" "$RUN/in/lab/"
cp "$LIB/diff-guest-init.sh" "$RUN/in/init"; chmod +x "$RUN/in/init"
(cd "$RUN/in" && find init lab | cpio -o -H newc --quiet | gzip -1) >"$RUN/overlay.cpio.gz"
cat "$BASE" "$RUN/overlay.cpio.gz" >"$RUN/initrd.cpio.gz"   # the later /init wins
truncate -s 64M "$RUN/out.img"
case $ACCEL in
    tcg) ACC=(-accel tcg,thread=multi -cpu max) ;;
    kvm) ACC=(-enable-kvm -cpu host) ;;
    *) die "QDL_VM_ACCEL must be tcg or kvm" ;;
esac
QEMU=(qemu-system-x86_64 "${ACC[@]}" -smp 2 -m 2048 -nodefaults -display none
      -serial stdio -no-reboot -kernel "$VMLINUX" -initrd "$RUN/initrd.cpio.gz"
      -drive "file=$RUN/out.img,format=raw,if=virtio"
      -append "console=ttyS0 quiet nokaslr panic=-1")
log "booting $KV under qemu ($ACCEL) for ${#NAMES[@]} scenario(s); console: $RUN/console.log"
t0=$(date +%s)
set +e
timeout "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/console.log" 2>&1
rc=$?
set -e
log "qemu exited rc=$rc after $(($(date +%s) - t0))s"
grep -q '^@@QDL:RESULTS-WRITTEN' "$RUN/console.log" ||
    { tail -n 30 "$RUN/console.log" >&2; die "guest did not write its results (see $RUN/console.log)"; }
grep '^@@QDL:\(FAILED\|SCENARIO\)' "$RUN/console.log" >&2 || true
tar -xf "$RUN/out.img" -C "$RUN/results"
mkdir -p "$OUT_DIR"
python3 "$LIB/diff_vm.py" assemble "$RUN/manifest.json" "$RUN/results" "$DIFF_DIR" "$OUT_DIR" \
    "scripts/diff-kernel-vm.sh ${NAMES[*]}"
log "done: run dir $RUN"
