//! A run's headline metrics: the one row per run that `Result.summary()` shows and a
//! sweep's workers send back (a few numbers instead of a megabyte of result).
//!
//! | metric | what |
//! |---|---|
//! | `throughput_mbps` | goodput of all tcp/udp entries, summed: receiver bits/s ÷ 10⁶ |
//! | `retransmits` | TCP retransmitted segments, all tcp entries (sender) |
//! | `ping_avg_ms`, `ping_p50_ms`, `ping_p90_ms`, `ping_p99_ms`, `ping_max_ms` | RTT over every reply of every ping entry (nearest-rank percentiles, as `RttStats`) |
//! | `ping_loss_pct` | requests without a reply, of those not still in flight at the end |
//! | `qdisc_drops`, `qdisc_overlimits`, `qdisc_requeues` | the root qdiscs of the scenario's hosts' devices at the end (not the devices a backend adds to realise links) |
//! | `cpu_busy_pct` | mean over every CPU of every host of 100 − idle (the simulator's CPU model; absent where a backend has no CPU figures) |
//!
//! A metric a run has nothing for (no ping entry, no tcp entry) is left out.

use qdisc_scenario::result::RttStats;
use qdisc_scenario::RunResult;

pub fn summary(r: &RunResult) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let mut put = |k: &str, v: f64| out.push((k.to_string(), v));
    if !r.throughput.is_empty() {
        put("throughput_mbps", r.throughput.iter().map(|t| t.receiver.bits_per_second).sum::<f64>() / 1e6);
        let retrans: Vec<u64> = r.throughput.iter().filter_map(|t| t.sender.retransmits).collect();
        if !retrans.is_empty() {
            put("retransmits", retrans.iter().sum::<u64>() as f64);
        }
    }
    if !r.rtt.is_empty() {
        let rtts: Vec<f64> = r.rtt.iter().flat_map(|e| e.samples.iter().map(|s| s.rtt_ms)).collect();
        if let Some(s) = RttStats::of(&rtts) {
            put("ping_avg_ms", s.avg);
            put("ping_p50_ms", s.p50);
            put("ping_p90_ms", s.p90);
            put("ping_p99_ms", s.p99);
            put("ping_max_ms", s.max);
        }
        let answerable: u64 = r.rtt.iter().map(|e| e.transmitted - e.in_flight_at_end).sum();
        let received: u64 = r.rtt.iter().map(|e| e.received).sum();
        if answerable > 0 {
            put("ping_loss_pct", 100.0 * answerable.saturating_sub(received) as f64 / answerable as f64);
        }
    }
    let roots =
        r.tc.end
            .iter()
            .filter(|d| !d.host.starts_with("link["))
            .filter_map(|d| d.qdisc.as_array())
            .flatten()
            .filter(|q| q["root"].as_bool() == Some(true));
    let (mut drops, mut overlimits, mut requeues) = (0u64, 0u64, 0u64);
    for q in roots {
        drops += q["drops"].as_u64().unwrap_or(0);
        overlimits += q["overlimits"].as_u64().unwrap_or(0);
        requeues += q["requeues"].as_u64().unwrap_or(0);
    }
    put("qdisc_drops", drops as f64);
    put("qdisc_overlimits", overlimits as f64);
    put("qdisc_requeues", requeues as f64);
    let cpus: Vec<f64> = r.cpu.iter().flat_map(|h| h.total.iter().map(|c| 100.0 - c.idle)).collect();
    if !cpus.is_empty() {
        put("cpu_busy_pct", cpus.iter().sum::<f64>() / cpus.len() as f64);
    }
    out
}
