//! Memory bounded by the work, not the duration: the periodic tc snapshots — most of a
//! result — are spilled as they are taken, whatever the run's length, and read back to
//! exactly the JSON they were; what a result does keep per interval is what
//! `Scenario::retained_figures` (the loader's ceiling) counts, no more.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::result::Periodic;
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

const BUFFERBLOAT: &str = include_str!("../../../scenarios/bufferbloat-fq_codel.toml");

fn run(duration: &str) -> (Scenario, RunResult) {
    let text = BUFFERBLOAT.replacen("duration = \"10s\"", &format!("duration = \"{duration}\""), 1);
    let s = Scenario::from_bytes(text.as_bytes(), "bufferbloat.toml").unwrap_or_else(|e| panic!("{e}"));
    let r = simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0;
    (s, r)
}

/// The figures a result keeps per interval, and per ping reply.
fn kept(r: &RunResult) -> usize {
    let traffic: usize =
        r.throughput.iter().map(|t| t.sum.len() + t.streams.iter().map(|s| s.intervals.len()).sum::<usize>()).sum();
    let cpu: usize = r.cpu.iter().map(|h| h.intervals.iter().map(|i| i.cpus.len()).sum::<usize>()).sum();
    let bql: usize = r.cpu.iter().flat_map(|h| &h.net.bql).map(|q| q.samples.len()).sum();
    let pings: usize = r.rtt.iter().map(|p| p.samples.len()).sum();
    traffic + r.total.len() + cpu + bql + pings
}

#[test]
fn snapshots_are_not_kept_in_memory_whatever_the_duration() {
    for (duration, snapshots) in [("1s", 11), ("3s", 31)] {
        let (s, r) = run(duration);
        // One snapshot per 100 ms from t = 0, none of them in memory.
        assert_eq!(r.tc.periodic.len(), snapshots, "{duration}");
        assert_eq!(r.tc.periodic.in_memory(), 0, "{duration}");
        let times: Vec<f64> = r.tc.periodic.iter().map(|x| x.t).collect();
        assert_eq!(times, (0..snapshots).map(|k| k as f64 / 10.0).collect::<Vec<_>>());
        // Read back, they are the JSON an in-memory list gives, and a result written
        // and read again is the same result.
        let copy = Periodic::from(r.tc.periodic.iter().collect::<Vec<_>>());
        assert_eq!(copy.in_memory(), snapshots);
        assert_eq!(serde_json::to_string_pretty(&r.tc.periodic).unwrap(), serde_json::to_string_pretty(&copy).unwrap());
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<RunResult>(&json).unwrap(), r);
        // What grows with the run is what the loader's ceiling counts.
        // (Every ping is answered here: the count is exact.)
        assert_eq!(kept(&r) as u64, s.retained_figures(), "{duration}");
    }
}

/// The metas of the packets alive at the end of `duration` of a run whose qdiscs drop
/// in every way no enqueue answer reports (fq_codel's drops at dequeue and from its
/// fattest flow, netem's losses, a head-dropping fifo), and those drops.
fn live_after(duration: &str) -> (usize, u64) {
    let text = format!(
        r#"
name = "drops"
duration = "{duration}"
seed = 3
[[host]]
name = "client"
[[host]]
name = "server"
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "20mbit"
delay = "5ms"
[tc.client]
script = "qdisc add dev eth0 root fq_codel limit 40 target 2ms"
[tc.server]
script = "qdisc add dev eth0 root netem loss 5%"
[[traffic]]
kind = "tcp"
from = "client"
to = "server"
flows = 6
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "30mbit"
size = "1200"
"#
    );
    let s = Scenario::from_bytes(text.as_bytes(), "drops.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut sim = qdisc_sim::Sim::new(&s, qdisc::tree::KernelVersion(6, 12)).unwrap();
    sim.run(|_| {}).unwrap();
    let live = sim.metas.iter().filter(|m| m.is_some()).count();
    let drops = (0..sim.ifaces.len() as u32).map(|i| sim.device(i).root.stats().drops as u64).sum();
    (live, drops)
}

#[test]
fn dropped_packets_leave_nothing_behind() {
    let (live_short, drops_short) = live_after("2s");
    let (live_long, drops_long) = live_after("8s");
    // Each unreported drop used to keep its meta: the long run would hold thousands more.
    assert!(drops_long - drops_short > 4 * live_short as u64, "drops {drops_short} -> {drops_long}");
    assert!(live_long < live_short + live_short / 2, "live metas {live_short} -> {live_long}");
}
