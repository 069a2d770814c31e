//! Congestion control in the simulated network: the bundled bbr and dctcp scenarios do
//! what the modules are for (relations with margins, not timings), and stay
//! deterministic.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

fn scenario_text(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name);
    std::fs::read_to_string(path).unwrap()
}

fn run(text: &str) -> RunResult {
    let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0
}

fn p50(r: &RunResult) -> f64 {
    r.rtt[0].stats.as_ref().unwrap().p50
}

fn tcp_bps(r: &RunResult) -> f64 {
    r.throughput[0].receiver.bits_per_second
}

fn retransmits(r: &RunResult) -> u64 {
    r.throughput[0].sender.retransmits.unwrap()
}

/// The client's qdisc of `kind` at the end.
fn end_qdisc(r: &RunResult, kind: &str) -> serde_json::Value {
    r.tc.end
        .iter()
        .filter(|d| d.host == "client" && d.dev == "eth0")
        .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
        .find(|q| q["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// Mean backlog (bytes) of the client's qdisc of `kind` over the snapshots after `from` s.
fn mean_backlog(r: &RunResult, kind: &str, from: f64) -> f64 {
    let v: Vec<f64> =
        r.tc.periodic
            .iter()
            .filter(|s| s.t >= from)
            .flat_map(|s| s.devices.into_iter().filter(|d| d.host == "client" && d.dev == "eth0"))
            .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
            .filter(|q| q["kind"] == kind)
            .map(|q| q["backlog"].as_f64().unwrap())
            .collect();
    assert!(!v.is_empty());
    v.iter().sum::<f64>() / v.len() as f64
}

/// bbr-htb.toml: 2 flows (bbr from the client's sysctl) behind htb 50 Mbit/s and a
/// 1000-packet pfifo. Both modules fill the shaper; bbr keeps a far shorter queue.
#[test]
fn bbr_keeps_a_far_smaller_standing_queue_than_cubic() {
    let text = scenario_text("bbr-htb.toml");
    let bbr = run(&text);
    assert_eq!(bbr.throughput[0].cc.as_deref(), Some("bbr"), "the sysctl default");
    let cubic_text = text.replace("flows = 2\n", "flows = 2\ncc = \"cubic\"\n");
    let cubic = run(&cubic_text);
    assert_eq!(cubic.throughput[0].cc.as_deref(), Some("cubic"));
    // 50 Mbit/s of wire bytes is 47.9 Mbit/s of goodput.
    for r in [&bbr, &cubic] {
        assert!(tcp_bps(r) >= 0.95 * 50e6 * 1448.0 / 1514.0, "{}", tcp_bps(r));
    }
    let (b, c) = (p50(&bbr), p50(&cubic));
    eprintln!("ping p50: bbr {b:.2} ms, cubic {c:.2} ms");
    assert!(b * 2.0 < c, "bbr p50 {b} ms, cubic {c} ms");
    let (qb, qc) = (mean_backlog(&bbr, "pfifo", 2.0), mean_backlog(&cubic, "pfifo", 2.0));
    eprintln!("pfifo backlog: bbr {qb:.0} B, cubic {qc:.0} B");
    assert!(qb * 2.0 < qc, "bbr {qb} B, cubic {qc} B");
    assert_eq!(end_qdisc(&bbr, "pfifo")["drops"], 0);
    assert_eq!(retransmits(&bbr), 0);
}

/// dctcp-fq_codel-ce.toml: DCTCP through fq_codel `ce_threshold 1ms` keeps about a
/// millisecond of queue at full rate with no drops; cubic (no ECN) in its place is
/// dropped by CoDel and queues longer.
#[test]
fn dctcp_holds_the_queue_near_the_ce_threshold_without_drops() {
    let text = scenario_text("dctcp-fq_codel-ce.toml");
    let dctcp = run(&text);
    assert_eq!(dctcp.throughput[0].cc.as_deref(), Some("dctcp"));
    let q = end_qdisc(&dctcp, "fq_codel");
    assert_eq!(q["drops"], 0, "{q}");
    assert!(q["ce_mark"].as_u64().unwrap() > 1000, "{q}");
    assert_eq!(retransmits(&dctcp), 0);
    assert!(tcp_bps(&dctcp) >= 0.95 * 100e6 * 1448.0 / 1514.0, "{}", tcp_bps(&dctcp));
    // 1 ms of 100 Mbit/s is 12.5 kB: the mean backlog stays within 0.25–3 ms of it.
    let backlog = mean_backlog(&dctcp, "fq_codel", 1.0);
    eprintln!("fq_codel backlog: dctcp {backlog:.0} B");
    assert!((3_125.0..=37_500.0).contains(&backlog), "{backlog}");

    let cubic = run(&text.replace("cc = \"dctcp\"", "cc = \"cubic\""));
    let qc = end_qdisc(&cubic, "fq_codel");
    assert!(qc["drops"].as_u64().unwrap() > 0, "{qc}");
    // Not ECN-capable, so never marked: CoDel drops instead (tc prints no ce_mark at 0).
    assert_eq!(qc["ce_mark"].as_u64().unwrap_or(0), 0, "{qc}");
    let backlog_cubic = mean_backlog(&cubic, "fq_codel", 1.0);
    eprintln!("fq_codel backlog: cubic {backlog_cubic:.0} B");
    assert!(backlog * 2.0 < backlog_cubic, "dctcp {backlog} B, cubic {backlog_cubic} B");

    // Without the client's dctcp default the SYN asks for no ECN, and iperf3's -C dctcp
    // then gives dctcp-reno (as the Debian 6.12 kernel reports it): nothing is marked.
    let reno = run(&text.replace("sysctl -w net.ipv4.tcp_congestion_control=dctcp\n", ""));
    assert_eq!(reno.throughput[0].cc.as_deref(), Some("dctcp-reno"));
    let qr = end_qdisc(&reno, "fq_codel");
    assert_eq!(qr["ce_mark"].as_u64().unwrap_or(0), 0, "{qr}");
    assert!(qr["drops"].as_u64().unwrap() > 0, "{qr}");
}

/// Same scenario and seed ⇒ byte-identical results, for bbr (whose gain cycle starts at
/// a random phase from the seeded generator) and dctcp.
#[test]
fn bbr_and_dctcp_runs_are_byte_identical() {
    for name in ["bbr-htb.toml", "dctcp-fq_codel-ce.toml"] {
        let s = Scenario::from_bytes(scenario_text(name).as_bytes(), name).unwrap();
        let json = || serde_json::to_string(&simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0).unwrap();
        let (a, b) = (json(), json());
        assert!(a == b, "{name}: two runs differ");
    }
}
