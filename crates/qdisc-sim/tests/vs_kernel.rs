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
fn ifb_download_shaping_as_on_the_host_kernel() {
    check("host-ifb-download-htb.json", "scenarios/ifb-download-htb.toml", "client");
    // The simulator's own figures, pinned (same file and seed: same result): the
    // download shaped to 19.05 Mbit/s by htb on ifb0 (the kernel: 19.07), and the
    // ping through the 100 kB bfifo at p50 39.56 ms, p99 50.00 ms (kernel 39.0, 47.6).
    let s = Scenario::load(root().join("scenarios/ifb-download-htb.toml")).unwrap();
    let (sim, _) = simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap();
    assert_eq!(total_bps(&sim).round(), 19_052_205.0);
    let st = sim.rtt[0].stats.as_ref().unwrap();
    assert_eq!(((st.p50 * 1e3).round(), (st.p99 * 1e3).round()), (39_559.0, 50_001.0));
    // Every received packet met eth0's ingress filter and went through ifb0's htb.
    let q = |dev: &str, kind: &str| {
        sim.tc
            .end
            .iter()
            .filter(|d| d.host == "client" && d.dev == dev)
            .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
            .find(|q| q["kind"] == kind)
            .unwrap()
    };
    let (ingress, htb) = (q("eth0", "ingress"), q("ifb0", "htb"));
    assert_eq!(ingress["packets"].as_u64(), Some(18115));
    assert_eq!((htb["packets"].as_u64(), htb["drops"].as_u64()), (Some(17447), Some(102)));
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

/// Retransmitted segments of every tcp entry (iperf3's Retr).
fn retransmits(r: &RunResult) -> u64 {
    r.throughput.iter().filter_map(|t| t.sender.retransmits).sum()
}

/// The targets for a congestion control compared with the kernel: total
/// throughput within 3 %, ping p50 within 10 % and p99 within 15 %, drops within 25 %,
/// retransmits of the same order. A metric the model misses is pinned at the
/// simulator's value today (with why); one that meets its target must not be pinned.
fn check_targets(fixture: &str, scenario: &str, host: &str, pinned: &[(&str, f64, &str)]) {
    let kernel: RunResult = serde_json::from_str(
        &std::fs::read_to_string(root().join("crates/qdisc-sim/tests/fixtures").join(fixture)).unwrap(),
    )
    .unwrap();
    let s = Scenario::load(root().join(scenario)).unwrap();
    assert_eq!(s.sha256, kernel.scenario.sha256, "{scenario} changed since the fixture was recorded: record it again");
    let (sim, _) = simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap();
    let within = |m: f64, k: f64, tol: f64| if k == 0.0 { m == 0.0 } else { (m / k - 1.0).abs() <= tol };
    let (kr, mr) = (kernel.rtt[0].stats.as_ref().unwrap(), sim.rtt[0].stats.as_ref().unwrap());
    let (kd, md) = (drops(&kernel, host) as f64, drops(&sim, host) as f64);
    let (kx, mx) = (retransmits(&kernel), retransmits(&sim));
    let rows = [
        (
            "throughput",
            total_bps(&kernel) / 1e6,
            total_bps(&sim) / 1e6,
            within(total_bps(&sim), total_bps(&kernel), 0.03),
        ),
        ("rtt_p50", kr.p50, mr.p50, within(mr.p50, kr.p50, 0.10)),
        ("rtt_p99", kr.p99, mr.p99, within(mr.p99, kr.p99, 0.15)),
        ("drops", kd, md, within(md, kd, 0.25)),
        ("retransmits", kx as f64, mx as f64, same_order(kx, mx)),
    ];
    for (metric, k, m, ok) in rows {
        eprintln!("{scenario}: {metric}: kernel {k:.3}, sim {m:.3}{}", if ok { "" } else { " (outside the target)" });
        match pinned.iter().find(|p| p.0 == metric) {
            Some(_) if ok => panic!("{scenario}: {metric} meets its target now (sim {m}, kernel {k}): unpin it"),
            Some(p) => assert!(
                (m - p.1).abs() < 5e-4,
                "{scenario}: {metric} moved: sim {m}, pinned {} ({}); re-examine and pin again",
                p.1,
                p.2
            ),
            None => assert!(ok, "{scenario}: {metric}: sim {m} vs kernel {k} misses the target"),
        }
    }
}

/// BBR on this project's CI host (6.18, tcp_bbr built in) against the model.
#[test]
fn bbr_htb_as_on_the_host_kernel() {
    check_targets("host-bbr-htb.json", "scenarios/bbr-htb.toml", "client", BBR_HTB_PINNED);
}

/// What the model misses on bbr-htb.toml, at its value today.
const BBR_HTB_PINNED: &[(&str, f64, &str)] = &[
    (
        "rtt_p50",
        18.529711,
        "kernel 16.5 ms (15.6–17.0 over three runs), model 18.5 ms, +12 %: in PROBE_BW the model's \
         two flows keep about 2 ms (8 packets) more standing queue (p50 past 1.5 s: kernel 16.0, \
         model 18.2 ms); not traced yet — candidates are the ACK-aggregation allowance, which the \
         model's GRO and delayed-ACK pattern on veth feeds, and min_rtt as the unmodelled handshake \
         would have measured it",
    ),
    (
        "rtt_p99",
        70.666376,
        "the 1 % largest samples all come from the STARTUP/DRAIN transient of the first 0.5 s, \
         where the kernel's queue peaks at 99 ms and the model's at 80 ms (the kernel's iperf3 \
         connects its two flows one after the other, the model starts both at 0 with no \
         handshake); past 1.5 s the p99 are 25.9 ms (kernel) and 21.4 ms (model)",
    ),
];
