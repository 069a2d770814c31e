//! TCP in the simulated network: expectations a user of iperf3 would derive by hand,
//! and determinism of whole runs.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

fn run(text: &str) -> RunResult {
    let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0
}

/// Goodput of a full link: 1448 payload bytes per 1538 wire bytes.
fn goodput(rate: f64) -> f64 {
    rate * 1448.0 / 1538.0
}

fn link(rate: &str, delay: &str, flows: u32, duration: &str, tc: &str) -> String {
    format!(
        r#"
duration = "{duration}"
[[host]]
name = "client"
[[host]]
name = "server"
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "{rate}"
delay = "{delay}"
[tc.client]
script = """
{tc}
"""
[[traffic]]
kind = "tcp"
from = "client"
to = "server"
flows = {flows}
"#
    )
}

#[test]
fn one_flow_fills_an_idle_100mbit_20ms_path_within_2s() {
    let r = run(&link("100mbit", "10ms", 1, "3s", ""));
    let ivs = &r.throughput[0].streams[0].intervals;
    // The 100 ms interval ending at 2 s.
    let iv = ivs.iter().find(|iv| (iv.end - 2.0).abs() < 1e-9).unwrap();
    assert!(iv.bits_per_second >= 0.95 * goodput(100e6), "{iv:?}");
    // And it never exceeds the link.
    for iv in ivs {
        assert!(iv.bits_per_second <= goodput(100e6) * 1.02, "{iv:?}");
    }
    let rtt = ivs[5].tcp_rtt_us.unwrap();
    assert!(rtt >= 20_000, "srtt {rtt} µs below the path's 20 ms");
}

#[test]
fn four_flows_share_fq_codel_fairly() {
    let r = run(&link("100mbit", "10ms", 4, "10s", "qdisc add dev eth0 root fq_codel"));
    let bytes: Vec<f64> = r.throughput[0].streams.iter().map(|s| s.receiver.bytes as f64).collect();
    let jain = bytes.iter().sum::<f64>().powi(2) / (bytes.len() as f64 * bytes.iter().map(|b| b * b).sum::<f64>());
    assert!(jain >= 0.98, "Jain's index {jain} of {bytes:?}");
    let total = r.throughput[0].receiver.bits_per_second;
    assert!(total >= 0.9 * goodput(100e6), "{total}");
}

#[test]
fn same_scenario_and_seed_give_byte_identical_results() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/bufferbloat-fq_codel.toml");
    let s = Scenario::load(path).unwrap();
    let json = || serde_json::to_string(&simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0).unwrap();
    let (a, b) = (json(), json());
    assert!(a == b, "two runs differ");
    assert!(a.contains("\"backend\":\"sim\""));
}

/// A qdisc that cuts GSO skbs into segments (tbf whose burst is smaller than the skb:
/// tbf_segment) passes on only the segments it queued, each with its own bytes: what
/// the receivers get is at most what tbf sent. On a veth link (GSO skbs of up to 64 KB
/// reach the qdisc whole) with bbr, tbf drops segments of most skbs.
#[test]
fn segments_cut_by_tbf_carry_only_their_own_bytes() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/matrix/tbf50-32k-lat50-bbr4.toml");
    let text = std::fs::read_to_string(file).unwrap().replace("duration = \"10s\"", "duration = \"2s\"");
    let r = run(&text);
    let received: u64 = r.throughput[0].receiver.bytes;
    let tbf = r.tc.end.iter().find(|d| d.host == "client" && d.dev == "eth0").unwrap();
    let q = &tbf.qdisc.as_array().unwrap()[0];
    assert_eq!(q["kind"], "tbf");
    let (sent, drops) = (q["bytes"].as_u64().unwrap(), q["drops"].as_u64().unwrap());
    // Payload is 1448 of every 1500 bytes tbf counts (it counts IP and TCP headers too).
    assert!(received <= sent * 1448 / 1500, "received {received} B, tbf sent {sent} B");
    assert!(received as f64 >= 0.8 * 2.0 * 50e6 / 8.0 * 1448.0 / 1500.0, "{received} B");
    assert!(drops > 100, "{drops} segments dropped");
}
