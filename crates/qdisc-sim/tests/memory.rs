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
