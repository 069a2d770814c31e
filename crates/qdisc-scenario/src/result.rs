//! [`RunResult`]: what every backend gives back, serialised as JSON.
//!
//! The JSON Schema is generated from these types (`RunResult::json_schema()`), checked
//! in as `docs/run-result.schema.json` (a test keeps the two equal) and described in
//! `docs/run-result.md`. Field docs below become the schema's descriptions.
//!
//! Conventions: times are seconds (f64) on the scenario's clock (0 = when traffic may
//! start, i.e. after setup); rates are bits per second; byte counts are bytes. What a
//! backend cannot know is `null`, never a made-up 0. Facts that differ between two runs
//! of the same scenario on the same machine for reasons other than the measurement
//! (wall-clock start, setup time) live only in `wallclock`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::periodic::{parse_tc_json, Periodic};

/// The format identifier written in every result.
pub const FORMAT: &str = "qdisc-lab/run-result/1";

/// The result of running one scenario on one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    /// Always "qdisc-lab/run-result/1".
    pub format: String,
    pub scenario: ScenarioInfo,
    pub metadata: Metadata,
    /// Wall-clock facts of this run; null for backends without a wall clock.
    pub wallclock: Option<Wallclock>,
    /// One entry per tcp/udp `[[traffic]]` entry, in file order.
    pub throughput: Vec<TrafficResult>,
    /// All tcp/udp traffic summed per reporting interval, on the scenario clock: entry k
    /// covers [k·interval_s, (k+1)·interval_s) and sums the interval reports that start
    /// in it (receiver-agnostic: these are sender-side byte counts, as iperf3 reports
    /// intervals).
    pub total: Vec<Interval>,
    /// One entry per ping `[[traffic]]` entry, in file order.
    pub rtt: Vec<RttResult>,
    pub tc: TcResult,
    /// CPU time per host: per CPU, per lock, per kernel function. The simulator's
    /// figures come from its CPU model (`source` = "model"); empty where a backend
    /// does not measure CPU time.
    #[serde(default)]
    pub cpu: Vec<HostCpu>,
    /// Things the reader should know (e.g. a fidelity limit that applied to this run).
    pub warnings: Vec<String>,
}

/// Which scenario ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioInfo {
    pub name: String,
    /// The file as given on the command line.
    pub file: String,
    /// sha256 of the scenario file's bytes, lowercase hex.
    pub sha256: String,
    pub seed: u64,
    /// The scenario's duration, seconds.
    pub duration_s: f64,
}

/// Where and with what it ran (deterministic for a given machine and scenario).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// "host", "vm" or "sim".
    pub backend: String,
    /// Kernel release (`uname -r`) the scenario ran on.
    pub kernel: String,
    /// `tc -V` of the tc that applied the scripts.
    pub iproute2: String,
    /// Other tools and their versions (e.g. "iperf3": "iperf 3.12 (cJSON 1.7.15)").
    pub tools: BTreeMap<String, String>,
    /// Version of qdisc-lab itself.
    pub qdisc_lab: String,
    /// Reporting interval of throughput, seconds.
    pub interval_s: f64,
    /// Interval of the periodic tc snapshots, seconds.
    pub snapshot_interval_s: f64,
    /// How each link was realised.
    pub links: Vec<LinkInfo>,
}

/// One `[[link]]` as the backend built it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkInfo {
    /// The two endpoints, "host:iface".
    pub between: [String; 2],
    /// Their IPv4 addresses with prefix length.
    pub addresses: [String; 2],
    /// What realises the link's rate/delay/loss, in words (e.g. the tc commands).
    pub realised_by: String,
}

/// Wall-clock facts (differ between runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wallclock {
    /// When traffic started, RFC 3339 UTC.
    pub started_at: String,
    /// Seconds spent building the topology and applying the tc scripts.
    pub setup_s: f64,
    /// Seconds from the start of traffic to the final snapshot.
    pub run_s: f64,
    /// Seconds spent tearing down.
    pub teardown_s: f64,
}

/// Measured throughput of one tcp/udp traffic entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrafficResult {
    /// Index of the `[[traffic]]` entry in the file (0-based).
    pub traffic: usize,
    /// "tcp" or "udp".
    pub kind: String,
    pub from: String,
    pub to: String,
    /// Destination address.
    pub dst: String,
    /// When it started on the scenario clock, seconds.
    pub start_s: f64,
    /// Parallel flows (tcp) or 1 (udp).
    pub flows: u32,
    /// Congestion control actually used by the sender (tcp).
    pub cc: Option<String>,
    /// TCP maximum segment size (payload bytes per segment), when known.
    pub tcp_mss: Option<u32>,
    /// Per flow.
    pub streams: Vec<StreamResult>,
    /// All flows of this entry summed, per interval.
    pub sum: Vec<Interval>,
    /// Totals as the sender counted them.
    pub sender: Summary,
    /// Totals as the receiver counted them (goodput).
    pub receiver: Summary,
    /// iperf3's own CPU figures for this entry (host and vm backends: as iperf3
    /// measured them); absent where no iperf3 ran (the simulator: its CPU model is in
    /// `cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_utilization_percent: Option<CpuUtilization>,
}

/// iperf3's `end.cpu_utilization_percent`: CPU time of the iperf3 client (`host_*`) and
/// server (`remote_*`) processes over the test, per cent of one CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuUtilization {
    pub host_total: f64,
    pub host_user: f64,
    pub host_system: f64,
    pub remote_total: f64,
    pub remote_user: f64,
    pub remote_system: f64,
}

/// One flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamResult {
    /// Flow id (iperf3's socket number).
    pub id: u32,
    pub intervals: Vec<Interval>,
    pub sender: Summary,
    pub receiver: Summary,
}

/// One reporting interval (sender side).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Interval {
    /// Start, seconds on the scenario clock.
    pub start: f64,
    /// End, seconds on the scenario clock.
    pub end: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    /// TCP retransmitted segments in the interval.
    pub retransmits: Option<u64>,
    /// The sender's smoothed RTT estimate at the end of the interval, microseconds (tcp).
    pub tcp_rtt_us: Option<u64>,
    /// Congestion window at the end of the interval, bytes (tcp).
    pub snd_cwnd: Option<u64>,
    /// Datagrams sent in the interval (udp).
    pub packets: Option<u64>,
}

/// Totals over a flow's whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub seconds: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    /// TCP retransmitted segments (sender).
    pub retransmits: Option<u64>,
    /// UDP datagrams (receiver: as counted by the receiver).
    pub packets: Option<u64>,
    /// UDP datagrams lost (receiver).
    pub lost_packets: Option<u64>,
    /// UDP jitter, milliseconds (receiver).
    pub jitter_ms: Option<f64>,
}

/// Round-trip times of one ping traffic entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RttResult {
    pub traffic: usize,
    pub from: String,
    pub to: String,
    pub dst: String,
    pub start_s: f64,
    pub interval_s: f64,
    /// Requests sent (ping's count).
    pub transmitted: u64,
    /// Replies received.
    pub received: u64,
    /// Requests sent after the last reply that came back, when ping was stopped at the
    /// entry's end: still in flight, not counted as lost.
    pub in_flight_at_end: u64,
    /// Every reply: sequence number, arrival time on the scenario clock, RTT.
    pub samples: Vec<RttSample>,
    /// Statistics over `samples`; null when no reply came back.
    pub stats: Option<RttStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RttSample {
    pub seq: u64,
    /// When the reply arrived, seconds on the scenario clock.
    pub t: f64,
    pub rtt_ms: f64,
}

/// ping's min/avg/max/mdev plus nearest-rank percentiles, milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RttStats {
    pub min: f64,
    pub avg: f64,
    pub max: f64,
    /// sqrt(mean(rtt²) − mean(rtt)²), as ping computes it.
    pub mdev: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl RttStats {
    /// Statistics of a set of RTTs (ms); `None` when empty.
    pub fn of(rtts: &[f64]) -> Option<RttStats> {
        if rtts.is_empty() {
            return None;
        }
        let mut s = rtts.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len() as f64;
        let avg = s.iter().sum::<f64>() / n;
        let sq = s.iter().map(|x| x * x).sum::<f64>() / n;
        Some(RttStats {
            min: s[0],
            avg,
            max: s[s.len() - 1],
            mdev: (sq - avg * avg).max(0.0).sqrt(),
            p50: percentile(&s, 50.0),
            p90: percentile(&s, 90.0),
            p99: percentile(&s, 99.0),
        })
    }
}

/// Nearest-rank percentile of sorted values: the smallest value with at least p % of
/// the values at or below it.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Where one host's CPU time went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostCpu {
    pub host: String,
    /// Cores of the host.
    pub cpus: u32,
    /// "model": the simulator's CPU model with the profile named below (not a
    /// measurement); "measured": read from the kernel.
    pub source: String,
    /// The cost profile ("default" or its file).
    pub profile: String,
    /// Per CPU over the whole run.
    pub total: Vec<CpuTime>,
    /// Per reporting interval: every CPU's split of that interval.
    pub intervals: Vec<CpuInterval>,
    /// Spinlocks with at least one acquisition, most waited-for first.
    pub locks: Vec<LockStats>,
    /// Where the busy time went, by kernel function (`perf top`'s rows), largest first.
    pub functions: Vec<FunctionShare>,
    /// Frames each NIC dropped because its rx ring was full (`rx_discards_phy`).
    pub rx_discards: BTreeMap<String, u64>,
    /// The receive side's drops and BQL on veth (omitted when there is nothing to say).
    #[serde(default, skip_serializing_if = "NetStats::is_empty")]
    pub net: NetStats,
}

/// Drops and queue limits of a machine's devices (interfaces of another namespace of
/// the machine are named `HOST:DEV`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetStats {
    /// Other hosts (network namespaces) running on these CPUs: joined by veth pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Packets a driver dropped (a veth whose peer's ring was full and that has no
    /// qdisc to push back into: `tx_dropped`), by device; only devices with drops.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tx_dropped: BTreeMap<String, u64>,
    /// Packets dropped because a CPU's backlog held `netdev_max_backlog` already
    /// (`/proc/net/softnet_stat`'s second column, summed over CPUs).
    #[serde(default)]
    pub backlog_dropped: u64,
    /// Times a socket's cached tx queue changed (`sk_tx_queue_set` with another queue:
    /// TCP's `ooo_okay` let XPS move the flow to its sending CPU's queue).
    #[serde(default)]
    pub tx_queue_changes: u64,
    /// BQL on veth tx queues (the patch series of seed 004; a model).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bql: Vec<BqlQueue>,
}

impl NetStats {
    pub fn is_empty(&self) -> bool {
        self == &NetStats::default()
    }
}

/// One tx queue's byte queue limit over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BqlQueue {
    pub dev: String,
    pub txq: u32,
    /// "bytes" (v5: completions per NAPI poll) or "time" (completions every tx-usecs).
    pub variant: String,
    /// At the end of every reporting interval.
    pub samples: Vec<BqlSample>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BqlSample {
    /// Seconds since the start.
    pub t: f64,
    /// DQL's limit, bytes (`byte_queue_limits/limit`).
    pub limit: u32,
    /// Bytes queued and not yet completed, at `t` (`byte_queue_limits/inflight`).
    pub inflight: u32,
    /// The most bytes in flight during the interval ending at `t`.
    pub inflight_max: u32,
}

/// One CPU's time split, percent of the span (user + sys + softirq + idle = 100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuTime {
    pub cpu: u32,
    pub user: f64,
    pub sys: f64,
    pub softirq: f64,
    pub idle: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuInterval {
    /// Seconds on the scenario clock.
    pub start: f64,
    pub end: f64,
    pub cpus: Vec<CpuTime>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockStats {
    /// What it guards, e.g. "eth0 tx-0 qdisc root lock".
    pub name: String,
    pub acquisitions: u64,
    /// Acquisitions that found it held and waited.
    pub contended: u64,
    /// Total time CPUs spent waiting (spinning) for it, seconds.
    pub wait_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionShare {
    /// Kernel symbol (or "[user] application").
    pub symbol: String,
    /// CPU seconds, summed over the host's CPUs.
    pub seconds: f64,
    /// Percent of the host's busy time (`perf top`'s Overhead).
    pub share: f64,
}

/// tc statistics of every device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcResult {
    /// After the traffic ended.
    pub end: Vec<DeviceSnapshot>,
    /// Periodic snapshots while traffic ran (every `metadata.snapshot_interval_s`).
    #[schemars(with = "Vec<TcSample>")]
    pub periodic: Periodic,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcSample {
    /// When it was taken, seconds on the scenario clock.
    pub t: f64,
    pub devices: Vec<DeviceSnapshot>,
}

/// One device's `tc -s -j qdisc show` and `tc -s -j class show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceSnapshot {
    /// The scenario host owning the device, or "link[i]" for a device the backend added
    /// to realise link i.
    pub host: String,
    pub dev: String,
    /// `tc -s -j qdisc show dev DEV`, as parsed JSON (an array).
    pub qdisc: serde_json::Value,
    /// `tc -s -j class show dev DEV`, as parsed JSON (an array).
    pub class: serde_json::Value,
    /// `tc -s qdisc show dev DEV` text (final snapshot only).
    pub qdisc_text: Option<String>,
    /// `tc -s class show dev DEV` text (final snapshot only).
    pub class_text: Option<String>,
}

impl RunResult {
    /// The JSON Schema of the result (draft 2020-12), pretty-printed.
    pub fn json_schema() -> String {
        let schema = schemars::schema_for!(RunResult);
        serde_json::to_string_pretty(&schema).expect("schema serialises") + "\n"
    }

    /// Sum interval reports onto the scenario's interval grid (see `total`).
    pub fn totals(results: &[TrafficResult], interval_s: f64) -> Vec<Interval> {
        let mut grid: BTreeMap<u64, u64> = BTreeMap::new();
        for r in results {
            for iv in &r.sum {
                let k = (iv.start / interval_s + 1e-6).floor().max(0.0) as u64;
                *grid.entry(k).or_default() += iv.bytes;
            }
        }
        grid.into_iter()
            .map(|(k, bytes)| Interval {
                start: k as f64 * interval_s,
                end: (k + 1) as f64 * interval_s,
                bytes,
                bits_per_second: bytes as f64 * 8.0 / interval_s,
                retransmits: None,
                tcp_rtt_us: None,
                snd_cwnd: None,
                packets: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_like_ping() {
        let s = RttStats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.min, s.avg, s.max), (1.0, 2.5, 4.0));
        assert!((s.mdev - 1.118).abs() < 1e-3);
        assert_eq!((s.p50, s.p90, s.p99), (2.0, 4.0, 4.0));
        assert!(RttStats::of(&[]).is_none());
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
    }
}
