//! Seed 001's finding from the bundled scenarios (docs/reproductions/seed-001.md): a
//! 48-core router forwards several times more through mq than through any single
//! root qdisc; a single root lock does not scale with cores; at 48 cores most cycles
//! are spent waiting for it. Runs 150 ms of each scenario and measures the router's
//! forwarding rate from 50 to 150 ms (its egress root qdisc's Sent counter), after
//! BQL's limits have grown.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

const MS: u64 = 1_000_000;

fn run(kind: &str, router_cpus: Option<u32>) -> RunResult {
    let path = format!("{}/../../scenarios/seed-001-{kind}.toml", env!("CARGO_MANIFEST_DIR"));
    let mut s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    s.duration = 150 * MS;
    for t in &mut s.traffic {
        t.duration = s.duration;
    }
    if let Some(n) = router_cpus {
        s.hosts.iter_mut().find(|h| h.name == "router").unwrap().cpus = n;
    }
    let opts = RunOptions { snapshot_interval: std::time::Duration::from_millis(50), ..Default::default() };
    simulate(&s, &opts, &mut NoProgress).unwrap_or_else(|e| panic!("{e}")).0
}

/// Packets per second the router's egress root qdisc sent from 50 to 150 ms.
fn pps(r: &RunResult) -> f64 {
    let sent = |t: f64| {
        let snap = r.tc.periodic.iter().find(|s| (s.t - t).abs() < 1e-9).unwrap();
        let dev = snap.devices.iter().find(|d| d.host == "router" && d.dev == "eth1").unwrap();
        let root = dev.qdisc.as_array().unwrap().iter().find(|q| q["root"] == true).unwrap().clone();
        root["packets"].as_u64().unwrap()
    };
    (sent(0.15) - sent(0.05)) as f64 / 0.1
}

fn spin_share(r: &RunResult) -> f64 {
    let router = r.cpu.iter().find(|h| h.host == "router").unwrap();
    router.functions.iter().find(|f| f.symbol == "native_queued_spin_lock_slowpath").map_or(0.0, |f| f.share)
}

#[test]
fn mq_scales_where_one_root_lock_collapses() {
    let mq = run("mq", None);
    let mq_pps = pps(&mq);
    assert!(mq_pps > 14e6, "mq forwards {mq_pps} pps");
    for kind in ["pfifo", "sfq", "htb"] {
        let r = run(kind, None);
        let p = pps(&r);
        assert!(mq_pps >= 4.0 * p, "mq {mq_pps} vs {kind} {p} pps");
        assert!(spin_share(&r) >= 70.0, "{kind}: spinlock {}%", spin_share(&r));
    }
    assert!(spin_share(&mq) < 1.0, "mq: spinlock {}%", spin_share(&mq));
    // A single lock does not scale: 8 and 48 cores forward about the same.
    let (p8, p48) = (pps(&run("pfifo", Some(8))), pps(&run("pfifo", None)));
    assert!((p8 / p48 - 1.0).abs() <= 0.25, "pfifo: 8 cores {p8} pps, 48 cores {p48} pps");
}
