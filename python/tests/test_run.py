"""run() and Result: determinism, DataFrames, plots, iperf3 JSON, the VM binary."""

import gzip
import json
import os

import pytest

import qdisc_lab
from qdisc_lab import RunError


def test_same_seed_same_numbers(short):
    a, b = qdisc_lab.run(short, seed=3), qdisc_lab.run(short, seed=3)
    assert a.json == b.json
    assert a.summary().equals(b.summary())
    c = qdisc_lab.run(short, seed=4)
    assert c.json["scenario"]["seed"] == 4 and c.json != a.json


def test_frames(short):
    r = qdisc_lab.run(short)
    s = r.summary()
    assert len(s) == 1
    assert list(s.columns) == ["throughput_mbps", "retransmits", "ping_avg_ms", "ping_p50_ms", "ping_p90_ms",
                               "ping_p99_ms", "ping_max_ms", "ping_loss_pct", "qdisc_drops", "qdisc_overlimits",
                               "qdisc_requeues", "cpu_busy_pct"]
    j = r.json
    assert s["throughput_mbps"][0] == j["throughput"][0]["receiver"]["bits_per_second"] / 1e6
    assert s["ping_p99_ms"][0] == j["rtt"][0]["stats"]["p99"]
    th = r.throughput()
    assert list(th.columns[:7]) == ["traffic", "kind", "from", "to", "stream", "start", "end"]
    assert th["stream"].nunique() == 4  # 4 flows
    rtt = r.rtt()
    assert len(rtt) == len(j["rtt"][0]["samples"]) and rtt["rtt_ms"].max() == j["rtt"][0]["stats"]["max"]
    q = r.qdisc()
    end = q[q["final"] & (q["host"] == "client") & (q["parent"] == "root")]
    assert end["kind"].tolist() == ["htb"] and end["drops"].iloc[0] == s["qdisc_drops"][0]
    assert len(r.intervals()) == len(j["total"])
    cpu = r.cpu()
    assert set(cpu["host"]) == {"client", "server"} and (cpu["source"] == "model").all()


def test_plot_and_iperf3(short, tmp_path):
    r = qdisc_lab.run(short)
    files = r.plot(tmp_path)
    assert files and all(os.path.getsize(f) > 0 for f in files)
    assert any(f.endswith(".png") for f in files)
    ip = r.iperf3_json()
    assert list(ip) == [0] and ip[0]["end"]["sum_received"]["bytes"] == r.json["throughput"][0]["receiver"]["bytes"]
    # flent's data file: gzip'd JSON whose upload series are our streams' intervals.
    r.to_flent(tmp_path / "run.flent.gz")
    with gzip.open(tmp_path / "run.flent.gz", "rt") as f:
        fl = json.load(f)
    assert fl["metadata"]["NAME"] == "tcp_nup"
    flows = r.json["throughput"][0]["flows"]
    assert sorted(k for k in fl["raw_values"] if k.startswith("TCP upload::")) == sorted(
        f"TCP upload::{i}" for i in range(1, flows + 1))


def test_run_errors(short, tmp_path, monkeypatch):
    with pytest.raises(RunError) as e:
        qdisc_lab.run(short.set("tc.client.script", "qdisc add dev eth0 root pfifo limit nope"))
    assert e.value.exit_code == 1 and 'pfifo: Illegal value for "limit": "nope"' in e.value.message
    with pytest.raises(RunError) as e:
        qdisc_lab.run(short, backend="warp")
    assert e.value.exit_code == 2 and "unknown backend" in e.value.message
    # The VM guest's init must be a standalone binary, not Python.
    fake = tmp_path / "qdisc-lab"
    fake.write_text("#!/usr/bin/env python3\n")
    monkeypatch.setenv("QDISC_LAB_BIN", str(fake))
    with pytest.raises(RunError) as e:
        qdisc_lab.run(short, backend="vm")
    assert "not a qdisc-lab executable" in e.value.message and "cargo build --release -p qdisc-lab" in e.value.message
