#!/bin/sh
# /init of the initramfs built by scripts/capture-goldens-vm.sh (busybox ash).
#
# Runs /lab/plan.sh (generated on the host by scripts/lib/vm_capture.py from
# goldens/cases/*.tc), which only calls the functions below, and writes every
# step's raw stdout/stderr/exit status into /tmp/out/<case#>/<step#>.{out,err,rc}.
# The host assembles the JSON goldens, since python is too heavy to carry here.
# Results leave the VM as a plain tar written onto the raw virtio disk vda.
#
# This is the in-guest twin of the python in scripts/capture-goldens.sh;
# keep the device realisation, environment and auto-handle priming in sync.
#
# Every tool is called by absolute path: busybox ash runs its own applets
# before $PATH, and busybox's ip/tc must never be used by accident.
BB=/bin/busybox
. /lab/env.sh            # IPROUTE_DIR (same absolute path as on the host)
IP=$IPROUTE_DIR/bin/ip
TC=$IPROUTE_DIR/sbin/tc
SENDRAW=/lab/qdl-sendraw
OUT=/tmp/out
PRIME_NS=qdl-prime
PRIME_DEV=prime0

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
$BB mount -t proc proc /proc
$BB mount -t sysfs sys /sys
$BB mount -t devtmpfs dev /dev
$BB mount -t tmpfs tmpfs /run
$BB mount -t tmpfs tmpfs /tmp
$BB mkdir -p $OUT
say() { echo "@@QDL:$*"; }
now() { $BB cut -d' ' -f1 /proc/uptime; }
say "INIT uptime=$(now) kernel=$($BB uname -r)"

# Load up front what device setup needs (the kernel autoloads sch_* itself
# through /sbin/modprobe on first use, exactly as on a normal system), and
# PRELOAD (env.sh): modules the kernel cannot autoload.
for m in virtio_pci virtio_blk ifb veth dummy $PRELOAD; do
    $BB modprobe $m || say "MODPROBE-FAILED $m"
done

# Debian builds its kernel with CONFIG_DEFAULT_NET_SCH="fq_codel"; the host
# that captured goldens/kernel/ runs with pfifo_fast (the upstream default).
# Match the host, so only the kernel version differs.
echo pfifo_fast >/proc/sys/net/core/default_qdisc || say "DEFAULT-QDISC-FAILED"

# The same environment the host script gives tc (scripts/capture-goldens.sh).
RUN_ENV="PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C LANG=C TC_LIB_DIR=$IPROUTE_DIR/usr/lib/x86_64-linux-gnu/tc"
nsrun() { ns=$1; shift; $BB env -i $RUN_ENV $IP netns exec "$ns" "$@"; }

{
    echo "uname -r: $($BB uname -r)"
    echo "uname -v: $($BB uname -v)"
    echo "tc -V: $($TC -V)"
    echo "tc binary: $TC"
    echo "ip (device setup only): $($IP -V)"
    echo "default_qdisc: $($BB cat /proc/sys/net/core/default_qdisc 2>/dev/null || echo n/a)"
} >$OUT/versions.txt

# ---------------------------------------------------------------- priming
# Auto handles (8001:, 8002:, ...) come from ONE kernel-global counter
# (qdisc_alloc_handle() in net/sched/sch_api.c) that cycles 8001..fffe, 8000,
# 8001 (period 0x7fff). Before every case, walk it round until the next
# allocation is 8001: again, as after boot -- like capture-goldens.sh.
# That script does it with up to ~32k `tc qdisc replace`, ~20 s per case under
# TCG; here qdl-autohandle (scripts/lib/qdl-autohandle.c) advances the counter
# with failing creates batched in a few netlink sends, and a real `tc qdisc
# add` then proves the counter ended where it must (the add gets 8000:).
$IP netns add $PRIME_NS
$IP -n $PRIME_NS link add $PRIME_DEV type ifb
$IP -n $PRIME_NS link set $PRIME_DEV up
ptc() { nsrun $PRIME_NS $TC "$@"; }
# Allocate one auto handle with a real root pfifo; print it (decimal).
prime_probe() {
    ptc qdisc add dev $PRIME_DEV root pfifo || return 1
    h=$(ptc qdisc show dev $PRIME_DEV | $BB awk 'NR==1{print $3}')
    ptc qdisc del dev $PRIME_DEV root || return 1
    echo $((0x${h%:}))
}
prime() {
    cur=$(prime_probe) || { say "PRIME-FAILED probe"; return 1; }
    [ "$cur" -eq $((0x8000)) ] && return 0
    # Take the counter to fffe:, then one real allocation must wrap to 8000:.
    nsrun $PRIME_NS /lab/qdl-autohandle $PRIME_DEV $((0xfffe - cur)) ||
        { say "PRIME-FAILED qdl-autohandle"; return 1; }
    got=$(prime_probe) || { say "PRIME-FAILED verify"; return 1; }
    [ "$got" -eq $((0x8000)) ] || { say "PRIME-FAILED: ended at $got, not 8000:"; return 1; }
}

# ---------------------------------------------------------------- plan API
CASE_NS=
case_begin() {   # IDX NAME
    CASE_DIR=$OUT/$1; $BB mkdir -p $CASE_DIR
    CASE_NS=qdl-case-$1
    say "CASE $1 $2 t=$(now)"
    prime || echo prime >>$CASE_DIR/failed
    $IP netns add $CASE_NS || echo netns >>$CASE_DIR/failed
    # IPv6 off before any device exists: no autoconf/MLD/DAD packets.
    nsrun $CASE_NS $BB sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 &&
        nsrun $CASE_NS $BB sysctl -q -w net.ipv6.conf.default.disable_ipv6=1 ||
        echo sysctl >>$CASE_DIR/failed
}
dev() {          # NAME KIND TXQ MTU TXQLEN
    if [ "$2" = eth ] || [ "$2" = ifb ]; then
        $IP -n $CASE_NS link add "$1" numtxqueues "$3" numrxqueues "$3" type ifb
    else
        # Peer stays down, so a dev-less `qdisc show` doesn't list it.
        $IP -n $CASE_NS link add "$1" numtxqueues "$3" numrxqueues "$3" type veth peer name "$1-peer"
    fi || echo "dev $1 add" >>$CASE_DIR/failed
    # The default root qdisc is attached on the transition to up, after
    # txqueuelen is final (pfifo_fast/pfifo defaults derive from it).
    $IP -n $CASE_NS link set "$1" mtu "$4" txqueuelen "$5" || echo "dev $1 set" >>$CASE_DIR/failed
    $IP -n $CASE_NS link set "$1" up || echo "dev $1 up" >>$CASE_DIR/failed
}
run_steps() {    # IDX: the case's steps, all in ONE `ip netns exec` (cheaper under TCG)
    nsrun $CASE_NS $BB sh /lab/run-steps.sh $CASE_DIR /lab/case-$1.sh ||
        echo "run-steps rc=$?" >>$CASE_DIR/failed
}
case_end() {
    $IP netns del $CASE_NS
    echo done >$CASE_DIR/done
}

say "PLAN-BEGIN t=$(now)"
. /lab/plan.sh
say "PLAN-END t=$(now)"
echo "date: $($BB date -u +%Y-%m-%dT%H:%M:%SZ)" >>$OUT/versions.txt
$BB tar -cf /dev/vda -C $OUT . && $BB sync && say "RESULTS-WRITTEN"
say "DONE uptime=$(now)"
$BB reboot -f      # qemu runs with -no-reboot: a reboot ends qemu
