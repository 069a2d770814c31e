#!/usr/bin/env bash
# build-iproute2.sh — build iproute2's tc at an upstream tag (default v6.18.0, the
# first release with tc/q_dualpi2.c) and print the directory it lives in, laid out
# as scripts/install-iproute2.sh lays out 6.15 (sbin/tc, bin/ip, the tc
# distribution tables), so scripts/capture-goldens-vm.sh can use either.
#
# Usage: dir=$(scripts/build-iproute2.sh)     # then $dir/sbin/tc
#
# Why built: no Debian suite this host can run has an iproute2 that knows dualpi2
# (bookworm-backports stops at 6.15; sid's 7.x is linked against sid's glibc), so
# the tag is built here against the host's libraries (no libbpf/libmnl/selinux:
# qdisc parsing and printing do not use them). `ip` and the distribution tables are
# copied from the 6.15 install (device setup only; the tables are data).
#
# Environment:
#   QDL_CACHE            cache dir (default: $HOME/.cache/qdisc-lab)
#   QDL_IPROUTE2_GIT     an iproute2 git repository (default: a clone of
#                        https://git.kernel.org/pub/scm/network/iproute2/iproute2.git
#                        into the cache)
#   QDL_IPROUTE2_TAG     the tag to build (default v6.18.0)
# Needs: git gcc make bison flex pkg-config. Idempotent.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"
TAG="${QDL_IPROUTE2_TAG:-v6.18.0}"
VER=${TAG#v}; VER=${VER%.0}              # v6.18.0 -> 6.18
OUT="$CACHE/iproute2-$VER"

die() { echo "build-iproute2: $*" >&2; exit 1; }

if [[ -x $OUT/sbin/tc ]] && "$OUT/sbin/tc" -V 2>/dev/null | grep -q "iproute2-${TAG#v}"; then
    echo "$OUT"
    exit 0
fi
for t in git gcc make bison flex pkg-config; do
    command -v "$t" >/dev/null || die "need $t (apt-get install git gcc make bison flex pkg-config)"
done
BASE="$("$REPO_ROOT/scripts/install-iproute2.sh")"

GIT="${QDL_IPROUTE2_GIT:-$CACHE/iproute2.git}"
if [[ ! -d $GIT ]]; then
    echo "build-iproute2: cloning iproute2 into $GIT" >&2
    git clone --bare -q https://git.kernel.org/pub/scm/network/iproute2/iproute2.git "$GIT"
fi
git --git-dir="$GIT" rev-parse -q --verify "$TAG^{commit}" >/dev/null || die "no tag $TAG in $GIT"

SRC="$CACHE/iproute2-$VER.src.$$"
rm -rf "$SRC" "$OUT.tmp"
mkdir -p "$SRC"
git --git-dir="$GIT" archive "$TAG" | tar -x -C "$SRC"
echo "build-iproute2: building tc from $TAG" >&2
(
    cd "$SRC"
    # No optional libraries: tc's qdisc code needs none of them.
    ./configure --libbpf_force off >&2
    sed -i -e '/^HAVE_MNL/d' -e '/^HAVE_SELINUX/d' -e '/^HAVE_ELF/d' -e '/^HAVE_CAP/d' config.mk
    make -s -j2 SUBDIRS="lib tc" >&2
)
mkdir -p "$OUT.tmp/sbin" "$OUT.tmp/bin"
cp "$SRC/tc/tc" "$OUT.tmp/sbin/tc"
cp -p "$BASE/bin/ip" "$OUT.tmp/bin/ip"
mkdir -p "$OUT.tmp/usr/lib/x86_64-linux-gnu"
cp -r "$BASE/usr/lib/x86_64-linux-gnu/tc" "$OUT.tmp/usr/lib/x86_64-linux-gnu/"
[[ -d $BASE/usr/share/iproute2 ]] && { mkdir -p "$OUT.tmp/usr/share"; cp -r "$BASE/usr/share/iproute2" "$OUT.tmp/usr/share/"; }
rm -rf "$SRC" "$OUT"
mv "$OUT.tmp" "$OUT"
"$OUT/sbin/tc" -V | grep -q "iproute2-${TAG#v}" || die "built tc is not ${TAG#v}: $("$OUT/sbin/tc" -V)"
echo "$OUT"
