#!/bin/sh
# /init of the differential runs of scripts/diff-kernel-vm.sh (busybox ash).
# It replaces scripts/lib/vm-guest-init.sh in an overlay cpio appended to the
# initramfs that scripts/capture-goldens-vm.sh builds (busybox, iproute2 6.15 at
# its host path, the net/sched modules, /lab/env.sh).
#
# Per scenario /lab/diff/<idx>/ (written by scripts/lib/diff_vm.py plan):
#   name, steps.sh (tc steps: `step N ARGS...`), schedule.txt (qdl-inject input),
#   capture.args (IDLE_MS MAX_MS), device.args (number of tx/rx queues of the veths)
# the guest builds two fresh netns joined by a veth pair:
#   qdl-snd: a0 10.99.0.1/24 — the device under test; the scenario's tc steps
#            set its qdiscs; a PERMANENT neighbour entry for 10.99.0.2 with a MAC
#            nobody has (02:00:00:00:00:99), so no ARP frame ever enters the qdisc
#            and the peer's IP layer drops the frames as PACKET_OTHERHOST (no ICMP
#            port-unreachable comes back to error the connected UDP sockets).
#   qdl-rcv: b0 (peer), no address; qdl-capture records what arrives.
# IPv6 is disabled in both before the devices exist (no MLD/ND/DAD frames).
# Raw results go to /tmp/out/<idx>/ and leave the VM as a tar on virtio disk vda.
BB=/bin/busybox
. /lab/env.sh
IP=$IPROUTE_DIR/bin/ip
TC=$IPROUTE_DIR/sbin/tc
OUT=/tmp/out
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
for m in virtio_pci virtio_blk veth; do
    $BB modprobe $m || say "MODPROBE-FAILED $m"
done
echo pfifo_fast >/proc/sys/net/core/default_qdisc || say "DEFAULT-QDISC-FAILED"
RUN_ENV="PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C LANG=C TC_LIB_DIR=$IPROUTE_DIR/usr/lib/x86_64-linux-gnu/tc"
nsrun() { ns=$1; shift; $BB env -i $RUN_ENV $IP netns exec "$ns" "$@"; }
{
    echo "uname -r: $($BB uname -r)"
    echo "uname -v: $($BB uname -v)"
    echo "tc -V: $($TC -V)"
    echo "nproc: $($BB nproc)"
} >$OUT/versions.txt

S=qdl-snd
R=qdl-rcv
run_one() {      # SCENARIO_DIR OUT_DIR
    d=$1; o=$2
    name=$($BB cat $d/name)
    $BB mkdir -p $o
    fail() { echo "$*" >>$o/failed; say "FAILED $name: $*"; }
    $IP netns add $S && $IP netns add $R || fail netns
    for ns in $S $R; do
        nsrun $ns $BB sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 &&
            nsrun $ns $BB sysctl -q -w net.ipv6.conf.default.disable_ipv6=1 || fail sysctl
    done
    read txq <$d/device.args
    $IP -n $S link add a0 numtxqueues $txq numrxqueues $txq type veth \
        peer name b0 numtxqueues $txq numrxqueues $txq netns $R || fail veth
    $IP -n $S addr add 10.99.0.1/24 dev a0 || fail addr
    $IP -n $R link set b0 up || fail b0 up
    $IP -n $S link set a0 up || fail a0 up
    $IP -n $S neigh replace 10.99.0.2 lladdr 02:00:00:00:00:99 dev a0 nud permanent || fail neigh
    # The scenario's tc steps (same environment as the golden captures).
    nsrun $S $BB sh -c "
        step() { s=\$1; shift; $TC \"\$@\" >$o/step\$s.out 2>$o/step\$s.err </dev/null; echo \$? >$o/step\$s.rc; }
        . $d/steps.sh" || fail steps
    nsrun $S $TC -s -j qdisc show dev a0 >$o/before.json 2>&1
    read idle max <$d/capture.args
    nsrun $R /lab/qdl-capture b0 $o/capture.txt $idle $max 2>$o/capture.err &
    cpid=$!
    i=0
    while [ ! -e $o/capture.txt.ready ] && [ $i -lt 200 ]; do $BB usleep 10000; i=$((i + 1)); done
    [ -e $o/capture.txt.ready ] || fail "capture not ready"
    $BB usleep 200000      # let the system settle (modules loaded, timers idle)
    nsrun $S /lab/qdl-inject $d/schedule.txt $o/inject.log 2>$o/inject.err || fail "inject rc=$?"
    wait $cpid || fail "capture rc=$?"
    nsrun $S $TC -s -j qdisc show dev a0 >$o/stats.json 2>&1
    nsrun $S $TC -s qdisc show dev a0 >$o/stats.txt 2>&1
    nsrun $S $TC -s -j class show dev a0 >$o/class.json 2>&1
    nsrun $S $TC -s class show dev a0 >$o/class.txt 2>&1
    $IP netns del $S
    $IP netns del $R
    echo done >$o/done
}
# Warm-up: under TCG the first run of a kernel path is translated first (the
# first UDP send of a boot took 6 ms, the next ones ~0.1 ms). Run the first
# scenario once, unrecorded, so every recorded one meets warm code and its
# bursts land well inside the shaper's gaps.
first=$($BB ls -d /lab/diff/*/ | $BB head -n1)
say "WARMUP $($BB cat $first/name) t=$(now)"
run_one $first /tmp/warmup
for d in /lab/diff/*/; do
    idx=$($BB basename $d)
    say "SCENARIO $idx $($BB cat $d/name) t=$(now)"
    run_one $d $OUT/$idx
    say "SCENARIO-END $idx t=$(now)"
done
echo "date: $($BB date -u +%Y-%m-%dT%H:%M:%SZ)" >>$OUT/versions.txt
$BB tar -cf /dev/vda -C $OUT . && $BB sync && say "RESULTS-WRITTEN"
say "DONE uptime=$(now)"
$BB reboot -f
