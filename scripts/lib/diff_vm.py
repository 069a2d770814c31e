#!/usr/bin/env python3
"""Host side of scripts/diff-kernel-vm.sh.

  plan DIFF_DIR LAB_DIR MANIFEST_JSON SCENARIO...
      read DIFF_DIR/<scenario>.scenario.json and write the guest's inputs
      LAB_DIR/diff/<idx>/{name,steps.sh,schedule.txt,capture.args}
      (read by scripts/lib/diff-guest-init.sh), plus a manifest.
  assemble MANIFEST_JSON RESULTS_DIR DIFF_DIR OUT_DIR COMMAND
      turn the guest's raw files into OUT_DIR/<scenario>.kernel.json (scenarios
      read from DIFF_DIR).

Scenario file (goldens/diff/<name>.scenario.json):
  setup    tc command lines for device a0 (the sender's veth), as typed after `tc`
  flows    [{name, sport, dport, tos, priority, max_pacing_rate}]: one connected
           UDP socket each, 10.99.0.1:sport -> 10.99.0.2:dport
  bursts   [{t_us, flow, count, len}]: `count` datagrams whose Ethernet frames are
           `len` bytes, sent back to back at t_us; packet ids are 1, 2, ... in the
           order the bursts are listed (the order they are sent)
  capture  {idle_ms, max_ms}: when the peer's capture stops
  txqueues number of tx (and rx) queues of the veth pair (default 1). A veth made
           without numtxqueues gets num_possible_cpus() queues; with more than one
           the root qdisc is not TCQ_F_ONETXQUEUE and dequeue_skb() bulk-dequeues
           (try_bulk_dequeue_skb_slow: up to 8 more ->dequeue calls per packet).
The expansion into packets is the same here and in crates/qdisc/tests/kernel_diff.rs.
"""
import json
import os
import shlex
import sys

SRC, DST = "10.99.0.1", "10.99.0.2"


def expand(sc):
    flows = {f["name"]: i for i, f in enumerate(sc["flows"])}
    pkts, pid = [], 0
    for b in sc["bursts"]:
        for _ in range(b["count"]):
            pid += 1
            pkts.append({"id": pid, "t_us": b["t_us"], "flow": flows[b["flow"]], "len": b["len"]})
    return pkts


def cmd_plan(diff_dir, lab_dir, manifest, names):
    out = []
    for idx, name in enumerate(names):
        with open(os.path.join(diff_dir, name + ".scenario.json"), encoding="utf-8") as f:
            sc = json.load(f)
        d = os.path.join(lab_dir, "diff", f"{idx:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "name"), "w") as f:
            f.write(name + "\n")
        with open(os.path.join(d, "steps.sh"), "w") as f:
            for s, line in enumerate(sc["setup"]):
                f.write(f"step {s} " + " ".join(shlex.quote(a) for a in line.split()) + "\n")
        with open(os.path.join(d, "schedule.txt"), "w") as f:
            f.write(f"src {SRC}\ndst {DST}\n")
            for i, fl in enumerate(sc["flows"]):
                f.write(f"flow {i} {fl['sport']} {fl['dport']} {fl.get('tos', 0)} "
                        f"{fl.get('priority', 0)} {fl.get('max_pacing_rate', 0)}\n")
            for p in expand(sc):
                f.write(f"pkt {p['id']} {p['t_us']} {p['flow']} {p['len']}\n")
        with open(os.path.join(d, "device.args"), "w") as f:
            f.write(f"{sc.get('txqueues', 1)}\n")
        cap = sc.get("capture", {})
        with open(os.path.join(d, "capture.args"), "w") as f:
            f.write(f"{cap.get('idle_ms', 3000)} {cap.get('max_ms', 60000)}\n")
        out.append({"idx": f"{idx:03d}", "scenario": name})
    with open(manifest, "w") as f:
        json.dump(out, f, indent=1)


def read(path, default=None):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "surrogateescape")
    except OSError:
        if default is None:
            raise
        return default


def jload(text):
    try:
        return json.loads(text)
    except ValueError:
        return {"unparsed": text}


def cmd_assemble(manifest, results, diff_dir, out_dir, command):
    with open(manifest) as f:
        cases = json.load(f)
    versions = dict(l.split(": ", 1) for l in read(os.path.join(results, "versions.txt")).splitlines() if ": " in l)
    bad = 0
    for c in cases:
        name, r = c["scenario"], os.path.join(results, c["idx"])
        problems = []
        if not os.path.exists(os.path.join(r, "done")):
            problems.append("did not finish")
        if os.path.exists(os.path.join(r, "failed")):
            problems.append("failed: " + read(os.path.join(r, "failed")).strip().replace("\n", ", "))
        with open(os.path.join(diff_dir, name + ".scenario.json"), encoding="utf-8") as f:
            sc = json.load(f)
        steps = []
        for s, line in enumerate(sc["setup"]):
            try:
                steps.append({"cmd": line, "stdout": read(os.path.join(r, f"step{s}.out")),
                              "stderr": read(os.path.join(r, f"step{s}.err")),
                              "exit": int(read(os.path.join(r, f"step{s}.rc")).strip())})
            except (OSError, ValueError) as e:
                problems.append(f"step {s}: {e}")
                break
        if any(s["exit"] != 0 for s in steps):
            problems.append("a tc step failed")
        if problems:
            bad += 1
            print(f"diff-kernel-vm: {name}: NOT written: {'; '.join(problems)}", file=sys.stderr)
            for s in steps:
                if s["exit"]:
                    print(f"  tc {s['cmd']}: {s['stderr'].strip()}", file=sys.stderr)
            continue
        log = read(os.path.join(r, "inject.log")).split("\n")
        t0 = int(log[0].split()[1])
        sent = []
        for l in log[1:]:
            if l.strip():
                i, b, a, ret, err = l.split()
                sent.append({"id": int(i), "before_ns": int(b) - t0, "after_ns": int(a) - t0,
                             "ret": int(ret), "errno": int(err)})
        deps, other = [], []
        for l in read(os.path.join(r, "capture.txt")).splitlines():
            w = l.split()
            if w[0] == "other":
                other.append({"t_ns": int(w[1]) - t0, "len": int(w[2]), "ethertype": w[3]})
            else:
                deps.append({"id": int(w[0]), "t_ns": int(w[1]) - t0, "len": int(w[2]), "tos": int(w[3])})
        ids = {p["id"] for p in expand(sc)}
        order = [d["id"] for d in deps]
        if len(set(order)) != len(order):
            print(f"diff-kernel-vm: {name}: WARNING: a packet arrived twice", file=sys.stderr)
        dropped = sorted(ids - set(order))
        result = {
            "scenario": name,
            "command": command,
            "kernel": versions.get("uname -r", "?"),
            "kernel_build": versions.get("uname -v", "?"),
            "tc": versions.get("tc -V", "?"),
            "vcpus": versions.get("nproc", "?"),
            "date": versions.get("date", "?"),
            "device": f"veth a0 (peer b0 in another netns), numtxqueues {sc.get('txqueues', 1)}",
            "setup": steps,
            "order": order,
            "dropped": dropped,
            "qdisc_stats": jload(read(os.path.join(r, "stats.json"), "")),
            "qdisc_show": read(os.path.join(r, "stats.txt"), ""),
            "class_stats": jload(read(os.path.join(r, "class.json"), "")),
            "departures": deps,
            "sent": sent,
            "other_frames": other,
        }
        with open(os.path.join(out_dir, name + ".kernel.json"), "w", encoding="utf-8") as f:
            f.write(dump(result))
        span = (sent[-1]["after_ns"] - sent[0]["before_ns"]) / 1e6 if sent else 0
        print(f"diff-kernel-vm: {name}: {len(order)} delivered, {len(dropped)} dropped, "
              f"{len(other)} other frames, injection span {span:.1f} ms", file=sys.stderr)
    return 1 if bad else 0


def dump(obj):
    """JSON with one line per list element of the long per-packet lists."""
    def enc(o, ind):
        pad = "  " * ind
        if isinstance(o, dict):
            if not o:
                return "{}"
            items = [f'{pad}  {json.dumps(k)}: {enc(v, ind + 1)}' for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(o, list):
            if not o:
                return "[]"
            if all(isinstance(x, (int, float, str)) for x in o):
                return json.dumps(o)
            items = [pad + "  " + (json.dumps(x) if isinstance(x, dict) and all(
                not isinstance(v, (dict, list)) for v in x.values()) else enc(x, ind + 1)) for x in o]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        return json.dumps(o, ensure_ascii=False)
    return enc(obj, 0) + "\n"


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "plan":
        cmd_plan(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    elif len(sys.argv) == 7 and sys.argv[1] == "assemble":
        sys.exit(cmd_assemble(*sys.argv[2:7]))
    else:
        sys.exit(__doc__)
