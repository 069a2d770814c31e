#!/usr/bin/env bash
# The test command: everything in `cargo test --workspace --release`, after making sure
# what the kernel differential tests compare against is here (iproute2 6.15's tc, a
# private copy; python3 and ip come with the machine). Needs root for the network
# namespaces of those tests (QDISC_LAB_NO_KERNEL=1 skips them, and says so). The host
# backend's end-to-end tests (crates/qdisc-kernel) drive real iperf3 and ping: installed
# from Debian here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z ${QDISC_LAB_NO_KERNEL:-} ]]; then
    command -v ip >/dev/null || { apt-get update -q && apt-get install -y -q iproute2; }
    missing=()
    command -v iperf3 >/dev/null || missing+=(iperf3)
    command -v ping >/dev/null || missing+=(iputils-ping)
    if ((${#missing[@]})); then
        apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
    fi
    scripts/install-iproute2.sh >/dev/null
fi
exec cargo test --workspace --release "$@"
