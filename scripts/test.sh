#!/usr/bin/env bash
# The test command: everything in `cargo test --workspace --release`, after making sure
# what the kernel differential tests compare against is here (iproute2 6.15's tc, a
# private copy; python3 and ip come with the machine). Needs root for the network
# namespaces of those tests (QDISC_LAB_NO_KERNEL=1 skips them, and says so). The host
# backend's end-to-end tests (crates/qdisc-kernel) drive real iperf3, ping and ethtool
# (a script's `ethtool -K` lines): installed from Debian here when missing. The VM
# backend's tests (crates/qdisc-lab/tests/vm_backend.rs) boot Debian 13's kernel under
# qemu with an initramfs built from Debian packages (fetched once into
# ~/.cache/qdisc-lab/vm by the tests themselves): they need qemu, and to build the image
# depmod (kmod), xz and zstd (Debian's compressed modules and kernel), objcopy
# (binutils; optional, it strips the guest's copy of qdisc-lab), apt-get and dpkg-deb.
# QDISC_LAB_NO_VM=1 skips them (and installs none of that). Then the Python package's
# tests and example sweep (scripts/test-python.sh; QDISC_LAB_NO_PYTHON=1 skips them);
# the exit status is cargo's if it failed, else the Python tests'.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z ${QDISC_LAB_NO_VM:-} ]]; then
    missing=()
    command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
    command -v depmod >/dev/null || missing+=(kmod)
    command -v xz >/dev/null || missing+=(xz-utils)
    command -v zstd >/dev/null || missing+=(zstd)
    command -v objcopy >/dev/null || missing+=(binutils)
    [[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
    if ((${#missing[@]})); then
        apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    fi
fi
if [[ -z ${QDISC_LAB_NO_KERNEL:-} ]]; then
    command -v ip >/dev/null || { apt-get update -q && apt-get install -y -q iproute2; }
    missing=()
    command -v iperf3 >/dev/null || missing+=(iperf3)
    command -v ping >/dev/null || missing+=(iputils-ping)
    command -v ethtool >/dev/null || missing+=(ethtool)
    if ((${#missing[@]})); then
        apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
    fi
    scripts/install-iproute2.sh >/dev/null
fi
# The consumers test (crates/qdisc-lab/tests/consumers.rs) reads our flent and iperf3
# files with flent 2.3.0 and the PyPI iperf3 package, pinned in a venv that
# scripts/consumers-venv.sh makes once (network to PyPI the first time): python3 with
# venv and ensurepip.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv >&2
fi
status=0
cargo test --workspace --release "$@" || status=$?
if [[ -z ${QDISC_LAB_NO_PYTHON:-} ]]; then
    scripts/test-python.sh || { rc=$?; ((status)) || status=$rc; }
else
    echo "Python tests skipped: QDISC_LAB_NO_PYTHON is set" >&2
fi
exit "$status"
