#!/usr/bin/env python3
"""Summarize a cpu.sh JSONL run as Markdown tables of medians over repetitions.

usage: scripts/calibrate/summarize.py crates/qdisc-scenario/profiles/calibration/cpu-DATE.jsonl
"""
import json
import statistics
import sys
from collections import OrderedDict


def med(xs):
    xs = [x for x in xs if x is not None and x >= 0]
    return statistics.median(xs) if xs else float("nan")


def main(path):
    udp = OrderedDict()
    ping = OrderedDict()
    notes = []
    header = None
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        o = json.loads(line)
        t = o.get("type")
        if t == "header":
            header = o
        elif t == "udp":
            udp.setdefault((o["case"], o["senders"]), []).append(o)
        elif t == "ping":
            ping.setdefault((o["path"], o.get("tool", "")), []).append(o)
        elif t == "note":
            notes.append(o)

    if header:
        print(f"kernel {header['uname_r']}, {header['nproc']} CPUs ({header['cpu_model']}), "
              f"{header['date']}, xmit device {header['xmit_dev']}, {header['duration_s']} s x {header['reps']} reps, "
              f"{header['frame_len']}-byte frames\n")
    print("| case | senders | pps (device) | CPU ns/pkt (all CPUs busy) | sender ns/pkt (rusage) "
          "| CPU0 usr/sys/softirq % | CPU1 usr/sys/softirq % | root requeues | load1 before |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (case, n), rs in udp.items():
        def cpu_split(idx):
            parts = []
            for k in ("user", "system", "softirq"):
                vals = []
                for r in rs:
                    pc = r["monitor"]["per_cpu"]
                    if idx < len(pc) and pc[idx]["total"] > 0:
                        vals.append(100.0 * pc[idx][k] / pc[idx]["total"])
                parts.append(f"{med(vals):.0f}")
            return "/".join(parts)

        print(f"| {case} | {n} | {med([r['pps_dev'] for r in rs]):,.0f} | {med([r['ns_per_pkt_cpu'] for r in rs]):.0f} "
              f"| {med([r['ns_per_pkt_sender'] for r in rs]):.0f} | {cpu_split(0)} | {cpu_split(1)} "
              f"| {med([r['qdisc_root_requeues'] for r in rs]):.0f} | {med([r['loadavg1_before'] for r in rs]):.2f} |")
    print()
    print("| ping path | tool | reps | min us | p50 us | p90 us | p99 us | max us | (medians over reps) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (p, tool), rs in ping.items():
        st = [r["ping"].get("rtt_us", {}) for r in rs]
        cols = [f"{med([s.get(k, -1) for s in st]):.1f}" for k in ("min", "p50", "p90", "p99", "max")]
        print(f"| {p} | {tool} | {len(rs)} | " + " | ".join(cols) + " | |")
    print()
    print("Ping RTTs on this VM are bimodal (a ~2-5 us mode and a ~30-60 us mode whose share changes from run")
    print("to run), so the pooled distribution and the two modes (split at 20 us) are given too:\n")
    print("| ping path | tool | samples | pooled p50 us | pooled p90 us | share < 20 us | p50 of < 20 us | p50 of >= 20 us |")
    print("|---|---|---|---|---|---|---|---|")
    for (p, tool), rs in ping.items():
        xs = [x for r in rs for x in r["ping"].get("rtt_seq_us", [])]
        if not xs:
            continue
        xs.sort()
        fast = [x for x in xs if x < 20]
        slow = [x for x in xs if x >= 20]
        p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
        print(f"| {p} | {tool} | {len(xs)} | {med(xs):.1f} | {p90:.1f} | {100.0 * len(fast) / len(xs):.0f}% "
              f"| {med(fast):.1f} | {med(slow):.1f} |")
    for n in notes:
        print(f"\nnote: {json.dumps(n)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")
