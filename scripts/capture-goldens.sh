#!/usr/bin/env bash
# capture-goldens.sh — record what the REAL kernel + iproute2 6.15 `tc` print,
# so qdisc-lab's userspace `tc` can be diffed against it byte for byte.
#
# Usage: scripts/capture-goldens.sh [CASE_NAME...]
#   (no args: every goldens/cases/*.tc; must run as root: it creates netns)
#
# Environment:
#   QDL_CACHE   cache dir (default: $HOME/.cache/qdisc-lab)
#   QDL_TC      use this tc binary instead of the cached iproute2 6.15 one
#
# Why a private iproute2: the host ships iproute2 6.1, but goldens must come
# from 6.15 (output formats drift between releases). bookworm-backports has
# 6.15 built against bookworm's libs, so we fetch just that .deb with a
# private apt config and unpack it — nothing on the host is installed or
# upgraded, and the host's apt state is untouched.
#
# Why each case gets a fresh netns: every case starts from the kernel's
# default qdisc state (pfifo_fast / mq / noqueue) regardless of what previous
# cases did, and nothing leaks onto the host's real interfaces.
#
# '# sysctl net.core.default_qdisc=KIND' in a case: that key is kernel-global
# (it exists in the init netns only), so it is set on the HOST for as short a
# time as possible -- from just before the case's devices come up (if the line
# comes before the first step) or from that step, to the end of the case -- and
# the host's value is put back after every case, on failure too: by the Python
# code, by this script's exit trap, and, should this script be killed, by a
# detached guard that restores it once this script is gone. Devices other
# people bring up on this machine during such a window get that default.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CASES_DIR="$REPO_ROOT/goldens/cases"
OUT_DIR="$REPO_ROOT/goldens/kernel"
CACHE="${QDL_CACHE:-$HOME/.cache/qdisc-lab}"

die() { echo "capture-goldens: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces)"
command -v ip >/dev/null || die "need iproute2's ip (any version) to build devices"
command -v python3 >/dev/null || die "need python3"

# iproute2 6.15, private copy (see scripts/install-iproute2.sh for why).

if [[ -n ${QDL_TC:-} ]]; then
    TC="$QDL_TC"
else
    IPROUTE_DIR="$("$REPO_ROOT/scripts/install-iproute2.sh")"
    TC="$IPROUTE_DIR/sbin/tc"
fi

# Namespaces are named with our PID so concurrent runs can't collide and the
# trap only ever removes what this run created.
NS_PREFIX="qdl-$$-"
# net.core.default_qdisc: the host's value, and a state file holding the value
# this run last set there (empty once it is restored).
DQ_FILE=/proc/sys/net/core/default_qdisc
DQ_ORIG="$(cat "$DQ_FILE" 2>/dev/null || true)"   # empty: not in the init netns
DQ_STATE="$(mktemp /tmp/qdl-default-qdisc.XXXXXX)"
# Put the host's value back if it is still the one this run set.
restore_default_qdisc() {
    local set_by_us
    set_by_us="$(cat "$DQ_STATE" 2>/dev/null || true)"
    if [[ -n $set_by_us && -n $DQ_ORIG && "$(cat "$DQ_FILE")" == "$set_by_us" ]]; then
        echo "$DQ_ORIG" >"$DQ_FILE"
    fi
    : >"$DQ_STATE"
}
cleanup() {
    local ns
    restore_default_qdisc
    rm -f "$DQ_STATE"
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        [[ $ns == "$NS_PREFIX"* ]] && ip netns del "$ns" 2>/dev/null || true
    done
}
trap cleanup EXIT INT TERM HUP
# The guard: outlives a SIGKILL of this script, then does what cleanup does.
setsid sh -c '
    while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
    set_by_us="$(cat "$2" 2>/dev/null)"
    if [ -n "$set_by_us" ] && [ "$(cat "$3")" = "$set_by_us" ]; then echo "$4" >"$3"; fi
    rm -f "$2"
' qdl-default-qdisc-guard "$$" "$DQ_STATE" "$DQ_FILE" "$DQ_ORIG" </dev/null >/dev/null 2>&1 &

mkdir -p "$OUT_DIR"

{
    echo "uname -r: $(uname -r)"
    echo "tc -V: $("$TC" -V)"
    echo "tc binary: $TC"
    echo "ip (device setup only): $(ip -V)"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "default_qdisc (host): $(cat /proc/sys/net/core/default_qdisc 2>/dev/null || echo n/a)"
    echo "sysctl -V: $(sysctl -V)"
    echo
    echo "notes:"
    echo "- kind=eth devices are ifb (no IFF_NO_QUEUE -> pfifo_fast, or mq when txqueues>1)."
    echo "- kind=ifb devices are ifb too, with ifb_setup's txqueuelen 32 unless the case names one."
    echo "- kind=veth devices are veth with peer NAME-peer left DOWN in the same netns,"
    echo "  so the peer (noop qdisc) is not listed by a dev-less 'qdisc show'."
    echo "- lo exists in every netns but is left DOWN; its noop qdisc is not listed"
    echo "  by a dev-less 'qdisc show' (see multi-device cases)."
    echo "- IPv6 is disabled in each netns so no autoconf/MLD/DAD packets reach qdiscs."
    echo "- '# send DEV LEN COUNT' steps inject COUNT exact LEN-byte AF_PACKET frames."
    echo "  ifb discards them after dequeue, so qdisc counters are deterministic."
    echo "  '# send DEV LEN COUNT GAP_US' paces them GAP_US apart (rate estimators):"
    echo "  what then depends on where the kernel's jiffy ticks fell is compared within"
    echo "  a tolerance (RATE_TOLERANCE in crates/qdisc/tests/golden.rs)."
    echo "  Only use kind=eth for traffic: a veth whose peer is down has no carrier,"
    echo "  so its frames hit the kernel's noop qdisc and are never counted."
    echo "- Auto handles come from one kernel-global counter; before every case the"
    echo "  script cycles it so the case's first auto handle is 8001: (as after boot)."
    echo "- '# sysctl net.core.default_qdisc=KIND' before a case's first step is set on"
    echo "  the host just before its devices come up (as if booted with it) and listed"
    echo "  under \"sysctl\"; after a step it is a step itself, run as 'sysctl -w' in the"
    echo "  host netns (the key exists in the init netns only). The host's value is"
    echo "  restored after every case."
} >"$OUT_DIR/VERSIONS.txt"

export TC CASES_DIR OUT_DIR NS_PREFIX DQ_FILE DQ_ORIG DQ_STATE
exec_status=0
python3 - "$@" <<'PYEOF' || exec_status=$?
"""Run each case file in a fresh netns and dump byte-exact tc output as JSON."""
import json
import os
import subprocess
import sys

TC = os.environ["TC"]
CASES_DIR = os.environ["CASES_DIR"]
OUT_DIR = os.environ["OUT_DIR"]
NS_PREFIX = os.environ["NS_PREFIX"]
DQ_FILE = os.environ["DQ_FILE"]
DQ_ORIG = os.environ["DQ_ORIG"]
DQ_STATE = os.environ["DQ_STATE"]
# The one sysctl a case may set (kernel-global, restored after every case).
DQ_KEY = "net.core.default_qdisc"

# Pin the locale: number formatting and error texts must not depend on the
# caller's environment. TC_LIB_DIR points at the bpo package's own data dir.
RUN_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "LC_ALL": "C",
    "LANG": "C",
    "TC_LIB_DIR": os.path.join(os.path.dirname(os.path.dirname(TC)),
                               "usr/lib/x86_64-linux-gnu/tc"),
}

DEV_DEFAULTS = {"kind": "eth", "txqueues": "1", "mtu": "1500", "txqueuelen": "1000"}


def sh(*args):
    subprocess.run(args, check=True, env=RUN_ENV, stdout=subprocess.DEVNULL)


def parse_case(path):
    devices, sysctls, steps = [], [], []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("#"):
                body = stripped[1:].strip()
                word = body.split(None, 1)[0] if body else ""
                if word == "dev":
                    spec = body.split(None, 1)[1].strip()
                    name, *opts = spec.split(",")
                    dev = dict(DEV_DEFAULTS, name=name)
                    for opt in opts:
                        k, v = opt.split("=", 1)
                        if k not in DEV_DEFAULTS:
                            raise ValueError(f"{path}: unknown device option {k}")
                        dev[k] = v
                    if dev["kind"] not in ("eth", "veth", "ifb"):
                        raise ValueError(f"{path}: unknown device kind {dev['kind']}")
                    # An ifb as `ip link add … type ifb` leaves it: ifb_setup's
                    # txqueuelen (TX_Q_LIMIT, 32) unless the case names one.
                    if dev["kind"] == "ifb" and not any(o.startswith("txqueuelen=") for o in opts):
                        dev["txqueuelen"] = "32"
                    devices.append(dev)
                elif word == "send":
                    steps.append(("send", stripped, body.split()[1:]))
                elif word == "sysctl":
                    setting = body.split(None, 1)[1].strip()
                    if steps:
                        steps.append(("sysctl", stripped, [setting]))
                    else:
                        sysctls.append(setting)
                continue
            steps.append(("tc", stripped, stripped.split()))
    return devices, sysctls, steps


def dev_spec(d):
    return f"{d['name']},kind={d['kind']},txqueues={d['txqueues']},mtu={d['mtu']},txqueuelen={d['txqueuelen']}"


def setup_devices(ns, devices):
    # Disable IPv6 before any device exists so no link-local traffic is ever
    # generated; stray packets would perturb qdisc counters.
    for knob in ("all", "default"):
        sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
           f"net.ipv6.conf.{knob}.disable_ipv6=1")
    for d in devices:
        n, q = d["name"], d["txqueues"]
        if d["kind"] in ("eth", "ifb"):
            sh("ip", "-n", ns, "link", "add", n, "numtxqueues", q, "numrxqueues", q, "type", "ifb")
        else:
            # Peer stays down: veth NAME still gets its default noqueue once up,
            # and a dev-less `qdisc show` doesn't list the peer.
            sh("ip", "-n", ns, "link", "add", n, "numtxqueues", q, "numrxqueues", q,
               "type", "veth", "peer", "name", f"{n}-peer")
        sh("ip", "-n", ns, "link", "set", n, "mtu", d["mtu"], "txqueuelen", d["txqueuelen"])
        # The default root qdisc is attached on the transition to up, after
        # txqueuelen is final (pfifo_fast/pfifo defaults derive from it).
        sh("ip", "-n", ns, "link", "set", n, "up")


def sysctl_path(setting):
    """The /proc/sys file `sysctl -w SETTING` writes, or None when it writes nothing
    (no '='). procps' slashdot: a key whose first separator is '/' is a path as it
    stands; otherwise every '.' and '/' swap."""
    if "=" not in setting:
        return None
    key = setting.split("=", 1)[0].strip()
    seps = [c for c in key if c in "./"]
    if seps and seps[0] == ".":
        key = key.translate(str.maketrans("./", "/."))
    return "/proc/sys/" + key


def check_sysctls(path, settings):
    """Only net.core.default_qdisc may be written: it is the one restored."""
    if settings and not DQ_ORIG:
        raise ValueError(f"{path}: has '# sysctl' lines, but {DQ_FILE} cannot be read (not the init netns?)")
    for s in settings:
        p = sysctl_path(s)
        if p is not None and p != DQ_FILE and os.path.exists(p):
            raise ValueError(f"{path}: '# sysctl {s}': only {DQ_KEY} may be set (or a key that does not exist)")


def sysctl_w(setting, check):
    """`sysctl -w SETTING` on the host (init netns), noting in the state file what it
    left in net.core.default_qdisc for the restore paths."""
    with open(DQ_STATE, "w") as f:
        f.write(setting.split("=", 1)[-1].strip())
    p = subprocess.run(["sysctl", "-w", setting], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, env=RUN_ENV)
    with open(DQ_FILE) as f:
        now = f.read().strip()
    with open(DQ_STATE, "w") as f:
        f.write(now if now != DQ_ORIG else "")
    if check and p.returncode:
        raise RuntimeError(f"sysctl -w {setting} failed: {p.stderr.decode()}")
    return p


def restore_default_qdisc():
    with open(DQ_STATE) as f:
        set_by_us = f.read().strip()
    if set_by_us:
        with open(DQ_FILE) as f:
            if f.read().strip() == set_by_us:
                with open(DQ_FILE, "w") as w:
                    w.write(DQ_ORIG + "\n")
        with open(DQ_STATE, "w"):
            pass


def send_frames(ns, dev, length, count, gap_us=0, tos=None):
    """Inject `count` broadcast Ethernet frames of exactly `length` bytes; with
    `gap_us`, frame i leaves at start + i*gap_us and the step ends at start +
    count*gap_us (an absolute schedule on CLOCK_MONOTONIC: no drift); with `tos`,
    IPv4 frames with that TOS byte (as scripts/lib/qdl-sendraw.c makes them)."""
    # setns() in a child so the parent stays in the host namespace.
    code = (
        "import errno,socket,struct,sys,time\n"
        "dev,ln,cnt,gap=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]),int(sys.argv[4])*1000\n"
        "tos=int(sys.argv[5],0) if len(sys.argv)>5 else None\n"
        "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n"
        "s.bind((dev,0))\n"
        "hdr=b'\\xff'*6+b'\\x02\\x00\\x00\\x00\\x00\\x01'\n"
        "if tos is None: hdr+=b'\\x88\\xb5'\n"
        "else:\n"
        "    ip=struct.pack('!BBHHHBBH4s4s',0x45,tos,ln-14,0,0x4000,64,253,0,bytes([10,0,0,1]),bytes([10,0,0,2]))\n"
        "    c=sum(struct.unpack('!10H',ip)); c=(c&0xffff)+(c>>16); c=(c&0xffff)+(c>>16)\n"
        "    hdr+=b'\\x08\\x00'+ip[:10]+struct.pack('!H',~c&0xffff)+ip[12:]\n"
        "t0=time.monotonic_ns()\n"
        "def until(t):\n"
        "    while True:\n"
        "        d=t-time.monotonic_ns()\n"
        "        if d<=0: return\n"
        "        time.sleep(d/1e9)\n"
        "for i in range(cnt):\n"
        "    until(t0+i*gap)\n"
        "    try: s.send(hdr+b'\\x00'*(ln-len(hdr)))\n"
        "    except OSError as e:\n"
        # ENOBUFS just means the qdisc dropped it -- which a case may want.
        "        if e.errno != errno.ENOBUFS: raise\n"
        "until(t0+cnt*gap)\n"
    )
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code,
                    dev, str(length), str(count), str(gap_us)] + ([] if tos is None else [tos]),
                   check=True, env=RUN_ENV)


# Auto-allocated qdisc handles (8001:, 8002:, ...) come from ONE counter that
# is global to the running kernel, not per netns or per device. To make
# goldens reproducible -- and to match what a freshly booted kernel prints --
# we walk that counter round until the next allocation is 8001: again.
# The counter cycles 8001..fffe, then 8000:, then 8001: (period 0x7fff).
PRIME_NS = f"{NS_PREFIX}prime"
PRIME_DEV = "prime0"


def prime_ns_setup():
    subprocess.run(["ip", "netns", "add", PRIME_NS], check=True, env=RUN_ENV)
    sh("ip", "-n", PRIME_NS, "link", "add", PRIME_DEV, "type", "ifb")
    sh("ip", "-n", PRIME_NS, "link", "set", PRIME_DEV, "up")


def prime_tc(*args, batch=None):
    p = subprocess.run(["ip", "netns", "exec", PRIME_NS, TC, *args],
                       input=batch, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=RUN_ENV, text=True)
    return p


def prime_root_handle():
    out = prime_tc("-j", "qdisc", "show", "dev", PRIME_DEV).stdout
    return int(json.loads(out)[0]["handle"].rstrip(":"), 16)


def prime_autohandle():
    # One allocation to learn where the counter is now.
    prime_tc("qdisc", "del", "dev", PRIME_DEV, "root")
    if prime_tc("qdisc", "add", "dev", PRIME_DEV, "root", "pfifo").returncode:
        raise RuntimeError("autohandle priming: initial add failed")
    cur = prime_root_handle()
    need = 0 if cur == 0x8000 else (0xfffe - cur) + 1
    # Replacing the root with a *different* kind and no handle always
    # allocates a fresh auto handle; alternate kinds to force that.
    lines = []
    kinds = ("bfifo", "pfifo")
    for i in range(need):
        lines.append(f"qdisc replace dev {PRIME_DEV} root {kinds[i % 2]}\n")
    if lines:
        p = prime_tc("-b", "-", batch="".join(lines))
        if p.returncode:
            raise RuntimeError(f"autohandle priming batch failed: {p.stderr}")
    got = prime_root_handle()
    if got != 0x8000:
        raise RuntimeError(f"autohandle priming ended at {got:x}:, expected 8000: "
                           "(is something else creating qdiscs concurrently?)")


def run_case(name, path, idx):
    devices, sysctls, steps = parse_case(path)
    check_sysctls(path, sysctls + [a[0] for k, _, a in steps if k == "sysctl"])
    ns = f"{NS_PREFIX}{idx}"
    prime_autohandle()
    subprocess.run(["ip", "netns", "add", ns], check=True, env=RUN_ENV)
    try:
        # As if booted with them: set right before the devices come up.
        for s in sysctls:
            sysctl_w(s, check=True)
        setup_devices(ns, devices)
        out_steps = []
        for kind, line, args in steps:
            if kind == "sysctl":
                p = sysctl_w(args[0], check=False)
                out_steps.append({
                    "cmd": line,
                    "stdout": p.stdout.decode("utf-8", "surrogateescape"),
                    "stderr": p.stderr.decode("utf-8", "surrogateescape"),
                    "exit": p.returncode,
                })
                continue
            if kind == "send":
                words, tos = (args[:-2], args[-1]) if len(args) >= 5 and args[-2] == "tos" else (args, None)
                send_frames(ns, words[0], int(words[1]), int(words[2]),
                            int(words[3]) if len(words) > 3 else 0, tos)
                out_steps.append({"cmd": line, "stdout": "", "stderr": "", "exit": 0})
                continue
            # `ip netns exec` rather than `tc -n`: -n would change argv and
            # could in principle alter what tc prints.
            p = subprocess.run(["ip", "netns", "exec", ns, TC, *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, env=RUN_ENV)
            out_steps.append({
                "cmd": line,
                "stdout": p.stdout.decode("utf-8", "surrogateescape"),
                "stderr": p.stderr.decode("utf-8", "surrogateescape"),
                "exit": p.returncode,
            })
    finally:
        restore_default_qdisc()
        subprocess.run(["ip", "netns", "del", ns], env=RUN_ENV)
    result = {"case": name, "devices": [dev_spec(d) for d in devices]}
    if sysctls:
        result["sysctl"] = sysctls
    result["steps"] = out_steps
    with open(os.path.join(OUT_DIR, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main():
    wanted = sys.argv[1:]
    names = sorted(f[:-3] for f in os.listdir(CASES_DIR) if f.endswith(".tc"))
    if wanted:
        missing = [w for w in wanted if w not in names]
        if missing:
            sys.exit(f"capture-goldens: no such case(s): {' '.join(missing)}")
        names = wanted
    prime_ns_setup()
    for i, name in enumerate(names):
        run_case(name, os.path.join(CASES_DIR, name + ".tc"), i)
        print(f"captured {name}", file=sys.stderr)
    print(f"capture-goldens: {len(names)} case(s) -> {OUT_DIR}", file=sys.stderr)


main()
PYEOF
exit "$exec_status"
