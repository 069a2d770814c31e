#!/usr/bin/env bash
# capture-goldens-vm.sh — capture goldens/cases/*.tc on a REAL Debian 13
# kernel 6.12 (booted under qemu) with the same iproute2 6.15 `tc`, into
# goldens/kernel-6.12/<case>.json (same format as scripts/capture-goldens.sh,
# which captures on the host's own kernel into goldens/kernel/).
# With QDL_VM_PROFILE=6.18, for dualpi2's goldens: a Debian 6.18 kernel from
# trixie-backports and iproute2 6.18's tc (the first with q_dualpi2.c, built by
# scripts/build-iproute2.sh), into goldens/kernel-6.18-vm/. The kernel must have
# sch_dualpi2: Debian's 6.18.15 is built with `# CONFIG_NET_SCH_DUALPI2 is not set`,
# so the script stops at its module check unless QDL_VM_KDEB names a package that has
# it (scripts/build-kernel-deb.sh makes one: Debian's package plus the module).
#
# Usage: scripts/capture-goldens-vm.sh [CASE_NAME...]
#   (no args: every goldens/cases/*.tc). Boots the VM once for all cases.
#
# Environment:
#   QDL_CACHE     cache dir (default: $HOME/.cache/qdisc-lab); VM bits in $QDL_CACHE/vm
#   QDL_VM_PROFILE 6.12 (default) or 6.18: which kernel, suite, tc and output dir
#   QDL_VM_KPKG   kernel package (default: what trixie's linux-image-amd64 depends on,
#                 i.e. linux-image-6.12.<N>+deb13-amd64; with profile 6.18 the newest
#                 linux-image-6.18.<N>+deb13-amd64 of trixie-backports)
#   QDL_VM_KDEB   a kernel package file instead (e.g. scripts/build-kernel-deb.sh's);
#                 cached under its release and a hash of the file
#   QDL_VM_OUT    output dir (default: goldens/kernel-6.12, or goldens/kernel-6.18-vm)
#   QDL_VM_ACCEL  tcg (default) or kvm; QDL_VM_TIMEOUT seconds (default 1800)
#
# How it works (everything cached and rebuilt only when an input changes):
#   1. iproute2 6.15: the very same bookworm-backports build the host script
#      uses (logic copied from scripts/capture-goldens.sh), so a difference
#      between goldens/kernel/ and goldens/kernel-6.12/ is the kernel's.
#      It sits at the SAME absolute path inside the guest, so tc's argv[0]
#      and TC_LIB_DIR are byte-identical to the host run.
#   2. kernel: `apt-get download` of one linux-image .deb from trixie via a
#      private apt config (host apt state untouched); unpacked, not installed.
#   3. initramfs: static busybox (+ /sbin/modprobe for module autoload), the
#      kernel's net/sched modules + ifb/veth/dummy/virtio (decompressed:
#      busybox can't load .ko.xz), tc/ip + the shared libs ldd names, a static
#      AF_PACKET frame sender (scripts/lib/qdl-sendraw.c) for `# send`, and
#      scripts/lib/vm-guest-init.sh as /init.
#   4. scripts/lib/vm_capture.py turns the cases into a shell plan, appended
#      to the initramfs as a second cpio; the guest runs it (fresh netns per
#      case, same device realisation and auto-handle priming as the host
#      script) and writes raw per-step outputs as a tar onto a virtio disk;
#      vm_capture.py assembles the JSON on the host.
# Why TCG: this machine's /dev/kvm is a PVM backend that can't run a stock
# kernel (found while prototyping the kernel lab).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIB="$REPO_ROOT/scripts/lib"
CASES_DIR="$REPO_ROOT/goldens/cases"
PROFILE="${QDL_VM_PROFILE:-6.12}"
CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"
VM="$CACHE/vm"
case $PROFILE in
    6.12) SUITE=trixie; KAPT="$VM/apt"; DEF_OUT=kernel-6.12 ;;
    6.18) SUITE=trixie-backports; KAPT="$VM/apt-trixie-backports"; DEF_OUT=kernel-6.18-vm ;;
    *) echo "capture-goldens-vm: QDL_VM_PROFILE must be 6.12 or 6.18" >&2; exit 1 ;;
esac
OUT_DIR="${QDL_VM_OUT:-$REPO_ROOT/goldens/$DEF_OUT}"
ACCEL="${QDL_VM_ACCEL:-tcg}"
TIMEOUT="${QDL_VM_TIMEOUT:-1800}"

die() { echo "capture-goldens-vm: $*" >&2; exit 1; }
log() { printf '[%s] capture-goldens-vm: %s\n' "$(date +%T)" "$*" >&2; }

for t in qemu-system-x86_64 cpio depmod modprobe gcc python3 xz zstd dpkg-deb apt-get sha256sum; do
    command -v "$t" >/dev/null || die "need $t (apt-get install qemu-system-x86 busybox-static cpio kmod gcc xz-utils zstd)"
done
BUSYBOX=/bin/busybox
[[ -x $BUSYBOX ]] && ! ldd "$BUSYBOX" >/dev/null 2>&1 || die "need a static $BUSYBOX (apt-get install busybox-static)"

# ------------------------------------------------------------ 1. iproute2 6.15
# iproute2 6.15, private copy (see scripts/install-iproute2.sh for why); for the
# 6.18 profile, iproute2 6.18's tc (scripts/build-iproute2.sh) beside 6.15's ip.
if [[ $PROFILE == 6.18 ]]; then
    IPROUTE_DIR="$("$REPO_ROOT/scripts/build-iproute2.sh")"
else
    IPROUTE_DIR="$("$REPO_ROOT/scripts/install-iproute2.sh")"
fi
TC="$IPROUTE_DIR/sbin/tc"
IP="$IPROUTE_DIR/bin/ip"

# ------------------------------------------------------------ 2. kernel
kapt_opts=(
    -o "Dir::Etc::SourceList=$KAPT/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$KAPT/lists"
    -o "Dir::Cache::Archives=$KAPT/archives"
    -o "APT::Sandbox::User=root"
)
kapt_update() {
    mkdir -p "$KAPT/lists/partial" "$KAPT/archives/partial" "$VM/dl"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SUITE main" \
        >"$KAPT/sources.list"
    apt-get "${kapt_opts[@]}" -q update >&2
}
KPKG="${QDL_VM_KPKG:-}"
KDEB="${QDL_VM_KDEB:-}"
if [[ -n $KDEB ]]; then
    [[ -f $KDEB ]] || die "QDL_VM_KDEB=$KDEB: no such file"
    KDEB=$(cd "$(dirname "$KDEB")" && pwd)/$(basename "$KDEB")
    KPKG=$(dpkg-deb -f "$KDEB" Package)
    KV=$(dpkg-deb -c "$KDEB" | awk '{print $6}' | sed -n 's|^\./\(usr/\)\{0,1\}lib/modules/\([^/]*\)/$|\2|p' | head -n1)
    [[ -n $KV ]] || die "$KDEB has no lib/modules/<release>/"
    # Not under the release alone: Debian's own package of that release may be cached.
    KID=$KV-$(sha256sum "$KDEB" | cut -c1-12)
elif [[ -z $KPKG ]]; then
    # Reuse the newest cached kernel of the profile; consult the suite only when none is.
    cached=$(ls -1 "$VM"/dl/linux-image-"$PROFILE".*+deb13-amd64_*.deb 2>/dev/null | sort -V | tail -n1 || true)
    if [[ -n $cached ]]; then
        KPKG=$(basename "$cached"); KPKG=${KPKG%%_*}
    elif [[ $PROFILE == 6.12 ]]; then
        kapt_update
        KPKG=$(apt-cache "${kapt_opts[@]}" depends linux-image-amd64 |
               awk '/Depends: linux-image-6\.12\..*\+deb13-amd64/{print $2; exit}')
        [[ -n $KPKG ]] || die "no linux-image-6.12.*+deb13-amd64 in trixie"
    else
        # trixie-backports' linux-image-amd64 has moved past 6.18: take the
        # newest 6.18 image it still carries.
        kapt_update
        KPKG=$(apt-cache "${kapt_opts[@]}" search --names-only '^linux-image-6\.18\.[0-9]+\+deb13-amd64$' |
               awk '{print $1}' | sort -V | tail -n1)
        [[ -n $KPKG ]] || die "no linux-image-6.18.*+deb13-amd64 in $SUITE"
    fi
fi
if [[ -z $KDEB ]]; then
    [[ $KPKG == linux-image-"$PROFILE".*+deb13-amd64 ]] || log "WARNING: $KPKG is not a $PROFILE Debian 13 kernel"
    KV=${KPKG#linux-image-}
    KID=$KV
    if ! ls "$VM"/dl/"$KPKG"_*.deb >/dev/null 2>&1; then
        [[ -f $KAPT/sources.list ]] || kapt_update
        log "apt-get download $KPKG ($SUITE)"
        (cd "$VM/dl" && { apt-get "${kapt_opts[@]}" -q download "$KPKG" >&2 ||
                          { kapt_update && apt-get "${kapt_opts[@]}" -q download "$KPKG" >&2; }; })
    fi
    KDEB=$(ls -1 "$VM"/dl/"$KPKG"_*.deb | head -n1)
fi
KROOT="$VM/kernel-$KID"
if [[ ! -f $KROOT/.complete ]]; then
    log "unpacking $KDEB"
    rm -rf "$KROOT"; mkdir -p "$KROOT/root"
    dpkg-deb -x "$KDEB" "$KROOT/root"
    [[ -e $KROOT/root/lib ]] || ln -s usr/lib "$KROOT/root/lib"   # merged-/usr kernel
    depmod -b "$KROOT/root" "$KV"     # the .deb has no modules.dep (postinst runs depmod)
    # Uncompressed ELF vmlinux for qemu's PVH entry (CONFIG_PVH=y): skips
    # real-mode setup and the in-guest decompressor. Debian 13 uses zstd.
    python3 - "$KROOT/root/boot/vmlinuz-$KV" "$KROOT/vmlinux" <<'PY'
import lzma, subprocess, sys, zlib
src, dst = sys.argv[1:]
d = open(src, 'rb').read()
def try_write(out):
    if out[:4] == b'\x7fELF':
        open(dst, 'wb').write(out); sys.exit(0)
i = d.find(b'\x28\xb5\x2f\xfd')
while i >= 0:
    try_write(subprocess.run(['zstd', '-dc'], input=d[i:], capture_output=True).stdout)
    i = d.find(b'\x28\xb5\x2f\xfd', i + 1)
for magic, fn in ((b'\xfd7zXZ\x00', lambda b: lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(b)),
                  (b'\x1f\x8b\x08', lambda b: zlib.decompressobj(31).decompress(b))):
    i = d.find(magic)
    while i >= 0:
        try:
            try_write(fn(d[i:]))
        except (lzma.LZMAError, zlib.error):
            pass
        i = d.find(magic, i + 1)
sys.exit('could not extract vmlinux from ' + src)
PY
    touch "$KROOT/.complete"
fi
MODDIR="$KROOT/root/lib/modules/$KV"

# ------------------------------------------------------------ 3. initramfs
# Static helpers for the guest (no libc there but the one tc/ip need).
build_static() {   # NAME -> $VM/NAME from $LIB/NAME.c
    local bin="$VM/$1" src="$LIB/$1.c"
    if [[ ! -x $bin || $src -nt $bin ]]; then
        log "building $1 (static)"
        gcc -static -O2 -Wall -o "$bin.tmp.$$" "$src"
        mv -f "$bin.tmp.$$" "$bin"
    fi
}
build_static qdl-sendraw
build_static qdl-autohandle
SENDRAW="$VM/qdl-sendraw"
AUTOHANDLE="$VM/qdl-autohandle"
BASE="$VM/initramfs-$KID.cpio.gz"
stamp=$( { echo "$KID"; sha256sum "$TC" "$IP" "$BUSYBOX" "$SENDRAW" "$AUTOHANDLE" "$LIB/vm-guest-init.sh" "$LIB/vm-guest-steps.sh" "$0"; } | sha256sum | cut -c1-16)
if [[ ! -f $BASE || $(cat "$BASE.stamp" 2>/dev/null) != "$stamp" ]]; then
    log "building initramfs for $KV"
    IR="$VM/initramfs.$$"     # private staging dir: concurrent runs may share the cache
    rm -rf "$IR"
    mkdir -p "$IR"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,lab,etc,var}
    ln -s ../run "$IR/var/run"
    cp "$BUSYBOX" "$IR/bin/busybox"
    # Only sh + a few names as symlinks; /init calls busybox explicitly.
    for a in sh modprobe insmod; do ln -s busybox "$IR/bin/$a"; done
    # The kernel's module autoloader execs /sbin/modprobe.
    ln -s ../bin/busybox "$IR/sbin/modprobe"
    # iproute2 at the same absolute path as on the host.
    mkdir -p "$IR$IPROUTE_DIR"/{bin,sbin,usr/lib/x86_64-linux-gnu,usr/share}
    cp -p "$TC" "$IR$IPROUTE_DIR/sbin/tc"
    cp -p "$IP" "$IR$IPROUTE_DIR/bin/ip"
    cp -r "$IPROUTE_DIR/usr/lib/x86_64-linux-gnu/tc" "$IR$IPROUTE_DIR/usr/lib/x86_64-linux-gnu/"
    [[ -d $IPROUTE_DIR/usr/share/iproute2 ]] && cp -r "$IPROUTE_DIR/usr/share/iproute2" "$IR$IPROUTE_DIR/usr/share/"
    [[ -d /etc/iproute2 ]] && cp -r /etc/iproute2 "$IR/etc/"
    # Shared libs as ldd names them, keeping symlinks as symlinks: tc -V
    # prints libbpf's version from the real file name (libbpf.so.1.1.2).
    copy_path() {
        local p=$1
        while [[ -n $p && ! -e $IR$p && ! -L $IR$p ]]; do
            mkdir -p "$IR$(dirname "$p")"
            if [[ -L $p ]]; then
                cp -P "$p" "$IR$p"
                local t; t=$(readlink "$p")
                [[ $t == /* ]] || t="$(dirname "$p")/$t"
                p=$t
            else
                cp "$p" "$IR$p"; p=
            fi
        done
    }
    for b in "$TC" "$IP"; do
        for l in $(ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
            copy_path "$l"
        done
    done
    printf 'root:x:0:0:root:/:/bin/sh\n' >"$IR/etc/passwd"
    printf 'root:x:0:\n' >"$IR/etc/group"
    cp "$SENDRAW" "$AUTOHANDLE" "$IR/lab/"
    printf 'IPROUTE_DIR=%q\n' "$IPROUTE_DIR" >"$IR/lab/env.sh"
    # 6.18.15's sch_dualpi2.c has no MODULE_ALIAS_NET_SCH("dualpi2") (added in a
    # later 6.18 stable release), so the kernel cannot autoload it: tc's add answers
    # "Specified qdisc kind is unknown" until it is loaded. The guest loads it first.
    [[ $PROFILE == 6.18 ]] && printf 'PRELOAD=sch_dualpi2\n' >>"$IR/lab/env.sh"
    cp "$LIB/vm-guest-init.sh" "$IR/init"; chmod +x "$IR/init"
    cp "$LIB/vm-guest-steps.sh" "$IR/lab/run-steps.sh"
    # Modules: all of net/sched + device/virtio drivers, with their deps.
    want="$(cd "$MODDIR/kernel/net/sched" && ls -- *.ko* | sed 's/\.ko.*//') ifb veth dummy virtio_pci virtio_blk"
    for m in $want; do
        modprobe -d "$KROOT/root" -S "$KV" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'
    done | sort -u | while read -r f; do
        rel=${f#*/lib/modules/$KV/}
        mkdir -p "$IR/lib/modules/$KV/$(dirname "$rel")"
        cp "$f" "$IR/lib/modules/$KV/$rel"
    done
    # (sch_mq is not checked: it is always built in, obj-y in net/sched/Makefile.)
    need="sch_prio sch_tbf sch_ingress ifb veth dummy"
    # The 6.18 profile is for dualpi2: a kernel without it (Debian's 6.18.15 has
    # `# CONFIG_NET_SCH_DUALPI2 is not set`) cannot give its goldens.
    [[ $PROFILE == 6.18 ]] && need="$need sch_dualpi2"
    for m in $need; do
        [[ -n $(find "$IR/lib/modules/$KV" -name "$m.ko*" -print -quit) ]] || grep -q "/$m.ko" "$MODDIR/modules.builtin" ||
            die "module $m neither in the initramfs nor built in"
    done
    cp "$MODDIR"/modules.{builtin,builtin.modinfo,order} "$IR/lib/modules/$KV/"
    # busybox modprobe/insmod can't read compressed modules: store them plain.
    find "$IR/lib/modules/$KV" -name '*.ko.xz' -exec xz -d {} +
    find "$IR/lib/modules/$KV" -name '*.ko.zst' -exec zstd -q -d --rm {} +
    depmod -b "$IR" "$KV"
    (cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) >"$BASE.tmp.$$"
    rm -rf "$IR"
    mv -f "$BASE.tmp.$$" "$BASE"
    echo "$stamp" >"$BASE.stamp"
    log "initramfs: $(du -h "$BASE" | cut -f1)"
fi

# ------------------------------------------------------------ 4. run
RUN="$VM/run.$(date +%Y%m%d-%H%M%S).$$"
mkdir -p "$RUN/in/lab" "$RUN/results"
python3 "$LIB/vm_capture.py" plan "$CASES_DIR" "$RUN/in/lab" "$RUN/manifest.json" "$@"
ncases=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$RUN/manifest.json")
(cd "$RUN/in" && find lab | cpio -o -H newc --quiet | gzip -1) >"$RUN/plan.cpio.gz"
cat "$BASE" "$RUN/plan.cpio.gz" >"$RUN/initrd.cpio.gz"   # Linux unpacks concatenated cpios
truncate -s 64M "$RUN/out.img"
case $ACCEL in
    tcg) ACC=(-accel tcg,thread=multi -cpu max) ;;
    kvm) ACC=(-enable-kvm -cpu host) ;;
    *) die "QDL_VM_ACCEL must be tcg or kvm" ;;
esac
QEMU=(qemu-system-x86_64 "${ACC[@]}" -smp 2 -m 2048 -nodefaults -display none
      -serial stdio -no-reboot -kernel "$KROOT/vmlinux" -initrd "$RUN/initrd.cpio.gz"
      -drive "file=$RUN/out.img,format=raw,if=virtio"
      -append "console=ttyS0 quiet nokaslr panic=-1")
printf '%q ' "${QEMU[@]}" >"$RUN/cmdline.txt"
log "booting $KV under qemu ($ACCEL) for $ncases case(s); console: $RUN/console.log"
t0=$(date +%s)
set +e
timeout "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/console.log" 2>&1
rc=$?
set -e
t1=$(date +%s)
log "qemu exited rc=$rc after $((t1 - t0))s"
grep -q '^@@QDL:RESULTS-WRITTEN' "$RUN/console.log" ||
    { tail -n 30 "$RUN/console.log" >&2; die "guest did not write its results (see $RUN/console.log)"; }
grep '^@@QDL:.*FAILED' "$RUN/console.log" >&2 || true
tar -xf "$RUN/out.img" -C "$RUN/results"

mkdir -p "$OUT_DIR"
status=0
python3 "$LIB/vm_capture.py" assemble "$RUN/manifest.json" "$RUN/results" "$OUT_DIR" || status=$?
{
    cat "$RUN/results/versions.txt"
    echo "host date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [[ -n ${QDL_VM_KDEB:-} ]]; then
        echo "kernel package: $(basename "$KDEB") (a file, QDL_VM_KDEB)"
        [[ $PROFILE == 6.18 ]] && echo "  = Debian's linux-image-$KV-unsigned $(dpkg-deb -f "$KDEB" Version | sed 's/+qdl1$//') (trixie-backports) plus" &&
            echo "  sch_dualpi2.ko, built by scripts/build-kernel-deb.sh from Debian's linux-source-6.18 of that version" &&
            echo "  with that package's /boot/config + CONFIG_NET_SCH_DUALPI2=m (Debian: not set); its /boot/config says"
        echo "  $(grep -x 'CONFIG_NET_SCH_DUALPI2=.*' "$KROOT/root/boot/config-$KV" || echo 'no CONFIG_NET_SCH_DUALPI2')"
    else
        echo "kernel package: $(basename "$KDEB") (Debian $SUITE)"
    fi
    echo "qemu: $(qemu-system-x86_64 --version | head -n1), accel=$ACCEL, PVH boot of vmlinux, 2 vCPUs, 2 GiB"
    echo "captured by: scripts/capture-goldens-vm.sh"
    echo
    echo "notes:"
    if [[ $PROFILE == 6.18 ]]; then
        echo "- tc is iproute2 6.18.0 (the first release with q_dualpi2.c), built from the"
        echo "  upstream tag by scripts/build-iproute2.sh against bookworm's libraries, no"
        echo "  libbpf/libmnl/libcap/selinux; ip (device setup only) and the tc distribution"
        echo "  tables are the bookworm-backports iproute2 6.15's."
    else
        echo "- Same iproute2 6.15 tc binary (bookworm-backports build) and same absolute"
        echo "  tc path / TC_LIB_DIR / environment as goldens/kernel/ (scripts/capture-goldens.sh)."
    fi
    echo "- kind=eth devices are ifb (no IFF_NO_QUEUE -> pfifo_fast, or mq when txqueues>1)."
    echo "- kind=ifb devices are ifb too, with ifb_setup's txqueuelen 32 unless the case names one."
    echo "- kind=veth devices are veth with peer NAME-peer left DOWN in the same netns,"
    echo "  so the peer (noop qdisc) is not listed by a dev-less 'qdisc show'."
    echo "- lo exists in every netns but is left DOWN; IPv6 is disabled in each netns."
    echo "- '# send DEV LEN COUNT' steps inject COUNT exact LEN-byte AF_PACKET frames with"
    echo "  a static C sender (scripts/lib/qdl-sendraw.c; skb->priority 0); with 'tos TOS'"
    echo "  they are IPv4 frames with that TOS byte (its low bits the ECN field)."
    echo "  On a multiqueue dev the tx queue comes from the skb flow hash, whose seed is"
    echo "  random per boot: which mq class gets the frames (traffic-mq) varies per boot."
    echo "- All cases run in ONE boot, each in a fresh netns. Auto handles come from one"
    echo "  kernel-global counter: before every case it is walked round so the case's"
    echo "  first auto handle is 8001:, as after boot (failing pfifo creates batched by"
    echo "  scripts/lib/qdl-autohandle.c, then a real add verified to get 8000:)."
    echo "- net.core.default_qdisc is set to pfifo_fast in the guest before any device"
    echo "  exists, like the host of goldens/kernel/. Debian's kernel is built with"
    echo "  CONFIG_DEFAULT_NET_SCH=\"fq_codel\" (and systemd sets fq_codel too), so a stock"
    echo "  Debian 13 system would show fq_codel where these goldens show pfifo_fast/mq children."
    echo "- sch_* modules are autoloaded by the kernel via /sbin/modprobe (busybox)."
    if [[ $PROFILE == 6.18 ]]; then
        echo "  Except sch_dualpi2, which the guest's init loads first: 6.18.15's"
        echo "  sch_dualpi2.c has no MODULE_ALIAS_NET_SCH(\"dualpi2\") (a later 6.18 stable"
        echo "  release adds it), so the kernel cannot autoload it and tc's add answers"
        echo "  \"Specified qdisc kind is unknown\" until it is loaded. Loading it (unsigned,"
        echo "  out of tree) taints the kernel (E, O); it was compiled with this machine's"
        echo "  gcc 12 where Debian's kernel was with gcc 14."
    fi
} >"$OUT_DIR/VERSIONS.txt"
log "done: run dir $RUN"
exit "$status"
