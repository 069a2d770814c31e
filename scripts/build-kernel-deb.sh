#!/usr/bin/env bash
# build-kernel-deb.sh — Debian's 6.18 kernel package WITH sch_dualpi2, as a .deb for
# scripts/capture-goldens-vm.sh (QDL_VM_PROFILE=6.18 QDL_VM_KDEB=FILE.deb).
#
# Debian's 6.18 kernels (trixie-backports) are built with
# `# CONFIG_NET_SCH_DUALPI2 is not set`. Debian's 6.18 config has no MODVERSIONS and
# does not force module signatures, so a module built from the very same source with
# the very same config and release string loads into Debian's own kernel binary (its
# vermagic, "<release> SMP preempt mod_unload ", is all the loader compares; a module
# built from another 6.18 tree does not load). So this script builds sch_dualpi2.ko
# alone, and adds it to Debian's package — the kernel itself is Debian's, untouched:
#   1. downloads linux-source-6.18 (Debian's source, its patches applied) and
#      linux-image-<release>-unsigned (the kernel and modules; the signed
#      linux-image-<release> is the same build, signed) from the archive's pool;
#   2. takes that package's /boot/config-<release>, sets CONFIG_NET_SCH_DUALPI2=m,
#      `make olddefconfig modules_prepare` with KERNELRELEASE=<release>, and builds
#      net/sched/sch_dualpi2.c as a module (nice -n 19, make -j$QDL_KJOBS);
#   3. repacks the image package: + kernel/net/sched/sch_dualpi2.ko.xz (debug info
#      stripped, as Debian's), its line in modules.order, CONFIG_NET_SCH_DUALPI2=m in
#      /boot/config-<release>, version <debian version>+qdl1.
# The module is unsigned and out of tree: loading it taints the kernel (E, O), which
# changes nothing it does. Compiler: this machine's gcc (Debian built with gcc-14);
# the config differences that makes (compiler versions and capabilities only) are
# written next to the .deb as <deb>.config-changes (scripts/diffconfig).
#
# Usage: scripts/build-kernel-deb.sh            (prints the .deb's path last)
# Environment:
#   QDL_CACHE          cache dir (default: $HOME/.cache/qdisc-lab); work in
#                      $QDL_CACHE/vm/kbuild/, the .deb in $QDL_CACHE/vm/kdeb/
#   QDL_KVERSION       Debian version to rebuild (default 6.18.15-1~bpo13+1, the newest
#                      6.18 trixie-backports lists)
#   QDL_DEBIAN_MIRROR  (default http://deb.debian.org/debian)
#   QDL_KJOBS          make -j (default 2)
# Needs: gcc make bc flex bison perl libelf-dev libssl-dev dpkg-dev xz-utils curl kmod binutils,
# pahole (dwarves; Debian's config has DEBUG_INFO_BTF, which olddefconfig drops
# without it, and with it SCHED_CLASS_EXT, which changes struct layouts).
set -euo pipefail

CACHE=${QDL_CACHE:-$HOME/.cache/qdisc-lab}
VM=$CACHE/vm
KVER=${QDL_KVERSION:-6.18.15-1~bpo13+1}
UPSTREAM=${KVER%%-*}          # 6.18.15
SERIES=${UPSTREAM%.*}         # 6.18
MIRROR=${QDL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOBS=${QDL_KJOBS:-2}
REL=$UPSTREAM+deb13-amd64     # Debian's release string (uname -r)
WORK=$VM/kbuild
OUT=$VM/kdeb
SRC=$WORK/linux-source-$SERIES
MOD=$WORK/mod-dualpi2

die() { echo "build-kernel-deb.sh: $*" >&2; exit 1; }
for t in gcc make bc flex bison perl pahole dpkg-deb xz curl strip; do
	command -v "$t" >/dev/null || die "$t is missing"
done
for h in /usr/include/gelf.h /usr/include/openssl/ssl.h; do
	[ -e "$h" ] || die "$h is missing (libelf-dev, libssl-dev)"
done
mkdir -p "$WORK" "$OUT"

# 1. The two packages, by their pool names (once trixie-backports moved on to 7.x its
#    package lists no longer name them; the pool keeps them).
fetch() {
	[ -s "$WORK/$1" ] && return 0
	echo "== downloading $1" >&2
	curl -fsS --retry 3 -o "$WORK/$1.part" "$MIRROR/pool/main/l/linux/$1"
	mv "$WORK/$1.part" "$WORK/$1"
}
SRCDEB=linux-source-${SERIES}_${KVER}_all.deb
IMGDEB=linux-image-${REL}-unsigned_${KVER}_amd64.deb
fetch "$SRCDEB"
fetch "$IMGDEB"

if [ ! -e "$SRC/.unpacked-$KVER" ]; then
	echo "== unpacking $SRCDEB" >&2
	rm -rf "$SRC" "$WORK/srcdeb"
	dpkg-deb -x "$WORK/$SRCDEB" "$WORK/srcdeb"
	tar -C "$WORK" -xf "$WORK/srcdeb/usr/src/linux-source-$SERIES.tar.xz"
	rm -rf "$WORK/srcdeb"
	touch "$SRC/.unpacked-$KVER"
fi

# 2. The config and the module.
REPACK=$WORK/repack
rm -rf "$REPACK"
dpkg-deb -R "$WORK/$IMGDEB" "$REPACK"
DEBCONFIG=$REPACK/boot/config-$REL
[ -s "$DEBCONFIG" ] || die "$IMGDEB has no boot/config-$REL"
grep -qx '# CONFIG_NET_SCH_DUALPI2 is not set' "$DEBCONFIG" || die "$IMGDEB: CONFIG_NET_SCH_DUALPI2 is not '# ... is not set'"
cd "$SRC"
export KBUILD_BUILD_USER=qdisc-lab KBUILD_BUILD_HOST=qdisc-lab
make -s mrproper
cp "$DEBCONFIG" .config
scripts/config --module NET_SCH_DUALPI2 --disable MODULE_SIG_ALL
make -s KERNELRELEASE="$REL" olddefconfig
grep -qx 'CONFIG_NET_SCH_DUALPI2=m' .config || die "CONFIG_NET_SCH_DUALPI2=m did not stick"
CHANGES=$WORK/config-changes
scripts/diffconfig "$DEBCONFIG" .config >"$CHANGES" || true
echo "== building sch_dualpi2.ko for $REL (nice -n 19 make -j$JOBS modules_prepare, then the module)" >&2
start=$(date +%s)
nice -n 19 make -s -j"$JOBS" KERNELRELEASE="$REL" modules_prepare >"$WORK/build.log" 2>&1 ||
	{ tail -20 "$WORK/build.log" >&2; die "modules_prepare failed ($WORK/build.log)"; }
rm -rf "$MOD"
mkdir -p "$MOD"
cp net/sched/sch_dualpi2.c "$MOD/"
echo 'obj-m := sch_dualpi2.o' >"$MOD/Kbuild"
# No Module.symvers (no vmlinux built): modpost cannot see the kernel's exports, which
# without MODVERSIONS only the loader resolves, by name.
nice -n 19 make -j"$JOBS" KERNELRELEASE="$REL" KBUILD_MODPOST_WARN=1 M="$MOD" modules >>"$WORK/build.log" 2>&1 ||
	{ tail -20 "$WORK/build.log" >&2; die "the module did not build ($WORK/build.log)"; }
echo "== built in $(($(date +%s) - start)) s" >&2
ko=$MOD/sch_dualpi2.ko
[ "$(modinfo -F vermagic "$ko")" = "$REL SMP preempt mod_unload " ] || die "$ko: vermagic $(modinfo -F vermagic "$ko")"

# 3. The package.
MODDIR=$REPACK/usr/lib/modules/$REL
strip --strip-debug -o "$MODDIR/kernel/net/sched/sch_dualpi2.ko" "$ko"
xz --check=crc32 --lzma2=dict=1MiB -f "$MODDIR/kernel/net/sched/sch_dualpi2.ko"
echo "kernel/net/sched/sch_dualpi2.ko" >>"$MODDIR/modules.order"
sed -i 's/^# CONFIG_NET_SCH_DUALPI2 is not set$/CONFIG_NET_SCH_DUALPI2=m/' "$DEBCONFIG"
sed -i "s/^Version: .*/Version: $KVER+qdl1/" "$REPACK/DEBIAN/control"
# Description is the control file's last field: its last lines.
printf ' .\n With sch_dualpi2 added by qdisc-lab (scripts/build-kernel-deb.sh).\n' >>"$REPACK/DEBIAN/control"
(cd "$REPACK" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' md5sum >DEBIAN/md5sums)
deb=$OUT/linux-image-${REL}-unsigned_${KVER}+qdl1_amd64.deb
dpkg-deb --root-owner-group -Zxz -z1 -b "$REPACK" "$deb" >/dev/null
cp "$CHANGES" "$deb.config-changes"
rm -rf "$REPACK"
echo "$deb"
