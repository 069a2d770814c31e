#!/usr/bin/env bash
# install-iproute2.sh — make iproute2 6.15 available without touching the host's
# packages, and print the directory it lives in.
#
# Usage: dir=$(scripts/install-iproute2.sh)   # then $dir/sbin/tc, $dir/bin/ip
#
# Why: goldens and differential tests compare against iproute2 6.15 (output formats
# drift between releases), while Debian 12 ships 6.1. bookworm-backports has 6.15
# built against bookworm's libraries, so we fetch just that .deb with a private apt
# configuration and unpack it under ${QDL_CACHE:-~/.cache/qdisc-lab}. Idempotent.
set -euo pipefail

CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"
WANT_VERSION="6.15"
IPROUTE_DIR="$CACHE/iproute2-$WANT_VERSION"
APT_DIR="$CACHE/apt"

die() { echo "install-iproute2: $*" >&2; exit 1; }
tc_is_wanted() { "$1" -V 2>/dev/null | grep -q "iproute2-$WANT_VERSION"; }

tc_bin="$IPROUTE_DIR/sbin/tc"
if [[ -x $tc_bin ]] && tc_is_wanted "$tc_bin"; then
    echo "$IPROUTE_DIR"
    exit 0
fi
echo "install-iproute2: fetching iproute2 $WANT_VERSION from bookworm-backports" >&2
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/archives/partial"
# Only backports in this list, so the candidate is unambiguous; the archive keyring
# is the stock Debian one the host already trusts.
cat >"$APT_DIR/sources.list" <<'LIST'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
LIST
apt_opts=(
    -o "Dir::Etc::SourceList=$APT_DIR/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$APT_DIR/lists"
    -o "Dir::Cache::Archives=$APT_DIR/archives"
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_opts[@]}" -q update >&2
ver=$(apt-cache "${apt_opts[@]}" madison iproute2 |
      awk -F'|' -v w="$WANT_VERSION" '$2 ~ "^ *"w {gsub(/ /,"",$2); print $2; exit}')
[[ -n $ver ]] || die "iproute2 $WANT_VERSION not found in bookworm-backports"
# apt-get download writes into the cwd; a subshell keeps ours.
(cd "$APT_DIR/archives" && apt-get "${apt_opts[@]}" -q download "iproute2=$ver" >&2)
deb=$(ls -1 "$APT_DIR/archives"/iproute2_"${ver//:/%3a}"_*.deb | head -n1)
rm -rf "$IPROUTE_DIR.tmp"
mkdir -p "$IPROUTE_DIR.tmp"
dpkg-deb -x "$deb" "$IPROUTE_DIR.tmp"
rm -rf "$IPROUTE_DIR"
mv "$IPROUTE_DIR.tmp" "$IPROUTE_DIR"
# The bpo build links against bookworm's libbpf/libelf/libmnl/libcap; fail loudly here
# rather than with a confusing error later.
if ldd "$tc_bin" | grep -q 'not found'; then
    ldd "$tc_bin" >&2
    die "extracted tc has unresolved shared libraries"
fi
tc_is_wanted "$tc_bin" || die "extracted tc is not $WANT_VERSION: $("$tc_bin" -V)"
echo "$IPROUTE_DIR"
