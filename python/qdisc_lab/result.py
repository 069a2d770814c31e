"""One run: :func:`run` and its :class:`Result` — the RunResult
(docs/run-result.md) as tidy pandas DataFrames. Columns are documented in
docs/python.md and on each method."""

import json as _json
import os

import pandas as pd

from . import _native
from .scenario import as_scenario


def run(scenario, backend="sim", seed=None, kernel=None):
    """Run ``scenario`` (a :class:`Scenario`, a path or a dict) on ``backend``:
    "sim" (the simulator, deterministic), "host" (the running kernel in network
    namespaces; root) or "vm" (a Debian kernel under qemu, ``kernel`` picks which;
    it boots a standalone ``qdisc-lab`` binary: ``$QDISC_LAB_BIN`` or PATH).
    ``seed`` replaces the scenario's. Raises ScenarioError or RunError."""
    s = as_scenario(scenario)
    native = _native.run(s.to_toml(), s.file, backend, seed, kernel)
    return Result(native)


def _frame(rows, columns):
    return pd.DataFrame(rows, columns=columns)


class Result:
    """A run's result. ``json`` is the whole RunResult as a dict."""

    def __init__(self, native):
        self._native = native
        self._json = None

    @property
    def json(self):
        if self._json is None:
            self._json = _json.loads(self._native.json())
        return self._json

    def summary(self):
        """One row of headline metrics (crates/qdisc-py/src/summary.rs):
        throughput_mbps, retransmits, ping_{avg,p50,p90,p99,max}_ms, ping_loss_pct,
        qdisc_drops, qdisc_overlimits, qdisc_requeues, cpu_busy_pct (those the run
        has)."""
        return pd.DataFrame([dict(self._native.summary())])

    def throughput(self):
        """Per flow per reporting interval (sender side, as iperf3's intervals):
        traffic (entry index), kind, from, to, stream (flow id), start, end (s),
        bytes, bits_per_second, retransmits, tcp_rtt_us, snd_cwnd, packets."""
        cols = ["traffic", "kind", "from", "to", "stream", "start", "end", "bytes", "bits_per_second",
                "retransmits", "tcp_rtt_us", "snd_cwnd", "packets"]
        rows = []
        for t in self.json["throughput"]:
            for s in t["streams"]:
                for iv in s["intervals"]:
                    rows.append([t["traffic"], t["kind"], t["from"], t["to"], s["id"], iv["start"], iv["end"],
                                 iv["bytes"], iv["bits_per_second"], iv.get("retransmits"), iv.get("tcp_rtt_us"),
                                 iv.get("snd_cwnd"), iv.get("packets")])
        return _frame(rows, cols)

    def intervals(self):
        """All tcp/udp traffic summed per reporting interval (the result's
        ``total``): start, end (s), bytes, bits_per_second, retransmits."""
        cols = ["start", "end", "bytes", "bits_per_second", "retransmits"]
        return _frame([[iv["start"], iv["end"], iv["bytes"], iv["bits_per_second"], iv.get("retransmits")]
                       for iv in self.json["total"]], cols)

    def rtt(self):
        """Every ping reply: traffic (entry index), from, to, seq, t (arrival, s),
        rtt_ms."""
        cols = ["traffic", "from", "to", "seq", "t", "rtt_ms"]
        return _frame([[e["traffic"], e["from"], e["to"], s["seq"], s["t"], s["rtt_ms"]]
                       for e in self.json["rtt"] for s in e["samples"]], cols)

    def qdisc(self):
        """Every qdisc of every device at every periodic snapshot and at the end
        (``final`` True, t = the scenario's duration): t (s), final, host (or "link[i]" for a device realising a link),
        dev, kind, handle, parent ("root" for the root), bytes, packets, drops,
        overlimits, requeues, backlog (bytes), qlen (packets)."""
        cols = ["t", "final", "host", "dev", "kind", "handle", "parent", "bytes", "packets", "drops",
                "overlimits", "requeues", "backlog", "qlen"]
        rows = []
        snaps = [(s["t"], False, s["devices"]) for s in self.json["tc"]["periodic"]]
        snaps.append((self.json["scenario"]["duration_s"], True, self.json["tc"]["end"]))
        for t, final, devices in snaps:
            for d in devices:
                for q in d["qdisc"] or []:
                    parent = "root" if q.get("root") else q.get("parent")
                    rows.append([t, final, d["host"], d["dev"], q.get("kind"), q.get("handle"), parent,
                                 q.get("bytes"), q.get("packets"), q.get("drops"), q.get("overlimits"),
                                 q.get("requeues"), q.get("backlog"), q.get("qlen")])
        return _frame(rows, cols)

    def cpu(self):
        """CPU time per host, CPU and reporting interval, percent of the interval
        (the simulator's CPU model: ``source`` "model"): host, source, cpu, start,
        end, user, sys, softirq, idle."""
        cols = ["host", "source", "cpu", "start", "end", "user", "sys", "softirq", "idle"]
        return _frame([[h["host"], h["source"], c["cpu"], iv["start"], iv["end"], c["user"], c["sys"],
                        c["softirq"], c["idle"]]
                       for h in self.json["cpu"] for iv in h["intervals"] for c in iv["cpus"]], cols)

    def plot(self, dir):
        """Write the plots of ``qdisc-lab plot`` (PNG and SVG) into ``dir``; returns
        the files written."""
        return [str(p) for p in self._native.plot(os.fspath(dir))]

    def to_flent(self, path):
        """Write the result as a flent data file (``.flent.gz``, flent 2.3's format:
        ``flent -i FILE -p totals`` plots it; docs/flent.md has the mapping)."""
        self._native.to_flent(os.fspath(path))

    def iperf3_json(self):
        """Each tcp/udp traffic entry as ``iperf3 -J`` output: {entry index: dict}."""
        return {i: _json.loads(text) for i, text in self._native.iperf3_json()}

    def __repr__(self):
        s = self.json["scenario"] if self._json is not None else None
        return f"Result({s['name']!r}, seed {s['seed']})" if s else "Result(...)"
