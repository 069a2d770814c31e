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
# through /sbin/modprobe on first use, exactly as on a normal system).
for m in virtio_pci virtio_blk ifb veth dummy; do
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
# Auto handles (8001:, 8002:, ...) come from ONE kernel-global counter that
# cycles 8001..fffe, 8000, 8001 (period 0x7fff). Before each case (but the
# first: nothing has allocated one since boot) walk it round until the next
# allocation is 8001: again, as capture-goldens.sh does.
$IP netns add $PRIME_NS
$IP -n $PRIME_NS link add $PRIME_DEV type ifb
$IP -n $PRIME_NS link set $PRIME_DEV up
ptc() { nsrun $PRIME_NS $TC "$@"; }
prime_handle() { h=$(ptc qdisc show dev $PRIME_DEV | $BB awk 'NR==1{print $3}'); echo $((0x${h%:})); }
PRIMED_ONCE=
prime() {
    if [ -z "$PRIMED_ONCE" ]; then PRIMED_ONCE=1; return 0; fi
    ptc qdisc del dev $PRIME_DEV root >/dev/null 2>&1
    ptc qdisc add dev $PRIME_DEV root pfifo || { say "PRIME-FAILED add"; return 1; }
    cur=$(prime_handle)
    if [ "$cur" -eq $((0x8000)) ]; then need=0; else need=$((0xfffe - cur + 1)); fi
    # Replacing the root with a different kind and no handle always
    # allocates a fresh auto handle; alternate kinds to force that.
    if [ $need -gt 0 ]; then
        $BB awk -v n=$need -v d=$PRIME_DEV 'BEGIN{for(i=0;i<n;i++) printf "qdisc replace dev %s root %s\n", d, (i%2 ? "pfifo" : "bfifo")}' |
            ptc -b - >/dev/null || { say "PRIME-FAILED batch"; return 1; }
    fi
    got=$(prime_handle)
    [ "$got" -eq $((0x8000)) ] || { say "PRIME-FAILED ended at $got"; return 1; }
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
    if [ "$2" = eth ]; then
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
step() {         # STEP# tc-args...   (`ip netns exec`, not `tc -n`: same argv as the host)
    s=$1; shift
    nsrun $CASE_NS $TC "$@" >$CASE_DIR/$s.out 2>$CASE_DIR/$s.err </dev/null
    echo $? >$CASE_DIR/$s.rc
}
send() {         # STEP# DEV LEN COUNT
    s=$1; shift
    nsrun $CASE_NS $SENDRAW "$@" >$CASE_DIR/$s.out 2>$CASE_DIR/$s.err </dev/null
    rc=$?; echo $rc >$CASE_DIR/$s.rc
    [ $rc -eq 0 ] || echo "send $s" >>$CASE_DIR/failed
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
