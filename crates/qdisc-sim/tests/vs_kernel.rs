//! The simulator against the real kernel: each bundled scenario was run in the kernel
//! lab and its `RunResult` kept as a fixture (tests/fixtures/README.md says with which
//! command and kernel). The simulator runs the same file and must agree on what users
//! look at: total throughput within 5 %, ping RTT under load (p50) within 15 %, and
//! drops of the same order.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn total_bps(r: &RunResult) -> f64 {
    r.throughput.iter().map(|t| t.receiver.bits_per_second).sum()
}

fn drops(r: &RunResult, host: &str) -> u64 {
    r.tc.end
        .iter()
        .filter(|d| d.host == host)
        .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
        .filter(|q| q["root"].as_bool() == Some(true))
        .map(|q| q["drops"].as_u64().unwrap_or(0))
        .sum()
}

/// Same order: both zero, or within a factor of ten.
fn same_order(a: u64, b: u64) -> bool {
    (a == 0 && b == 0) || (a > 0 && b > 0 && (a as f64 / b as f64).log10().abs() <= 1.0)
}

/// Metrics that do not agree yet, with the reason; a gap that closes must be removed
/// from here (the test says so).
const KNOWN_GAPS: &[(&str, &str, &str)] = &[
    (
        "scenarios/bufferbloat-fq_codel.toml",
        "throughput",
        "the Debian 13 kernel ran under TCG (no usable KVM here) and is CPU-bound at 82.9 Mbit/s \
         behind the 100 Mbit/s shaper (the fixture's warning); the model reaches the shaper's 95 Mbit/s",
    ),
    (
        "scenarios/bufferbloat-fq_codel.toml",
        "rtt_p50",
        "ping's 1.2 ms under TCG is mostly emulation cost per packet; with fq_codel the model's \
         queueing delay for the sparse ping flow is ~0.5 ms",
    ),
    (
        "scenarios/fq-flows-plimit.toml",
        "throughput",
        "under TCG the kernel's fq releases throttled flows 437 us late on average (fq's `latency` \
         xstat in the fixture), so its 20 Mbit/s maxrate flows run ~8 % slow; the model releases \
         them on time (5.2 % apart in total)",
    ),
];

fn gap(scenario: &str, metric: &str, ok: bool, what: String) {
    match KNOWN_GAPS.iter().find(|g| g.0 == scenario && g.1 == metric) {
        Some(g) if !ok => eprintln!("known gap: {what} ({})", g.2),
        Some(_) => panic!("{scenario}: {metric} agrees now ({what}): remove it from KNOWN_GAPS"),
        None => assert!(ok, "{what}"),
    }
}

fn check(fixture: &str, scenario: &str, host: &str) {
    let kernel: RunResult = serde_json::from_str(
        &std::fs::read_to_string(root().join("crates/qdisc-sim/tests/fixtures").join(fixture)).unwrap(),
    )
    .unwrap();
    let s = Scenario::load(root().join(scenario)).unwrap();
    assert_eq!(s.sha256, kernel.scenario.sha256, "{scenario} changed since the fixture was recorded: record it again");
    let (sim, _) = simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap();
    let (k, m) = (total_bps(&kernel), total_bps(&sim));
    eprintln!("{scenario}: throughput kernel {:.2} Mbit/s, sim {:.2} Mbit/s", k / 1e6, m / 1e6);
    gap(
        scenario,
        "throughput",
        (m / k - 1.0).abs() <= 0.05,
        format!("{scenario}: total throughput sim {m} vs kernel {k}"),
    );
    for (kr, mr) in kernel.rtt.iter().zip(&sim.rtt) {
        let (kp, mp) = (kr.stats.as_ref().unwrap().p50, mr.stats.as_ref().unwrap().p50);
        eprintln!("{scenario}: ping p50 kernel {kp:.3} ms, sim {mp:.3} ms");
        gap(
            scenario,
            "rtt_p50",
            (mp / kp - 1.0).abs() <= 0.15,
            format!("{scenario}: RTT p50 sim {mp} ms vs kernel {kp} ms"),
        );
    }
    let (kd, md) = (drops(&kernel, host), drops(&sim, host));
    eprintln!("{scenario}: drops at {host}: kernel {kd}, sim {md}");
    gap(scenario, "drops", same_order(kd, md), format!("{scenario}: drops at {host}: sim {md} vs kernel {kd}"));
}

#[test]
fn bufferbloat_pfifo_as_on_the_host_kernel() {
    check("host-bufferbloat-pfifo.json", "scenarios/bufferbloat-pfifo.toml", "client");
}

#[test]
fn bufferbloat_fq_codel_as_on_debian_13() {
    check("vm-bufferbloat-fq_codel.json", "scenarios/bufferbloat-fq_codel.toml", "client");
}

#[test]
fn fq_flows_plimit_as_on_debian_13() {
    check("vm-fq-flows-plimit.json", "scenarios/fq-flows-plimit.toml", "sender");
}

#[test]
fn netem_path_as_on_debian_13() {
    check("vm-netem-20ms.json", "scenarios/netem-20ms.toml", "client");
}
