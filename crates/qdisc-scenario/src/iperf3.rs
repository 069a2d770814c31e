//! One tcp/udp traffic entry of a [`RunResult`] as the JSON `iperf3 -c … -J` (3.12)
//! prints, so tools written for iperf3's output read any backend's results.
//!
//! The shape follows iperf 3.12's client output (`iperf_json_start`,
//! `iperf_print_intervals`, `iperf_print_results` in esnet/iperf `src/iperf_api.c`):
//!
//! ```text
//! { "start":     { connected[], version, system_info, timestamp, connecting_to, cookie,
//!                  tcp_mss_default (tcp), target_bitrate, sock_bufsize, sndbuf_actual,
//!                  rcvbuf_actual, test_start{protocol, num_streams,
//!                  blksize, omit, duration, bytes, blocks, reverse, tos, target_bitrate} },
//!   "intervals": [ { streams[{socket, start, end, seconds, bytes, bits_per_second,
//!                             retransmits, snd_cwnd, snd_wnd, rtt, rttvar, pmtu |
//!                             packets, omitted, sender}],
//!                    sum{…} } ],
//!   "end":       { streams[{sender{…}, receiver{…}} | {udp{…}}], sum (udp),
//!                  sum_sent, sum_received, cpu_utilization_percent{host_*, remote_*},
//!                  sender_tcp_congestion, receiver_tcp_congestion (tcp) },
//!   "extra_data": "qdisc-lab …" }
//! ```
//!
//! Every key iperf3 3.12's client writes is present with a value of its type, so
//! readers that index them (the PyPI `iperf3` package's `TestResult`) read any
//! backend's file; `crates/qdisc-lab/tests/iperf3_json.rs` checks the key set and
//! types against real 3.12 output, `tests/consumers.rs` reads the files with
//! `iperf3.TestResult`. What each value is (docs/run-result.md, "iperf3 JSON"):
//!
//! * measured (from the result): intervals' and totals' times, bytes, rates,
//!   retransmits, `snd_cwnd`, `rtt`, UDP datagrams, loss and jitter, `tcp_mss_default`,
//!   `sender_tcp_congestion`; `max_snd_cwnd`, `max_rtt`, `min_rtt`, `mean_rtt` derived
//!   from the interval samples exactly as iperf3 derives them (`stream_max_rtt`,
//!   `stream_sum_rtt / stream_count_rtt`); UDP `blksize` = the sender's bytes per
//!   datagram.
//! * `cpu_utilization_percent`: measured by iperf3 where the entry has its figures
//!   (host and vm backends); else modelled, from the result's `cpu` section (the
//!   simulator's CPU model): the whole sending host's CPU time as `host_*`, the
//!   receiving host's as `remote_*` — not an iperf3 process's.
//! * synthetic (the result does not hold them): `timestamp` = the wall-clock start of
//!   the entry, or the Unix epoch plus the entry's start for a backend without a wall
//!   clock (the simulator; so the bytes are deterministic); `cookie` from the scenario's
//!   sha256 and the entry index; ports — the server's is 5201 + the entry index (what
//!   the host backend uses), the client's 0; `blksize` for TCP = iperf3's default
//!   128 KiB; `duration` = the sender's seconds rounded; a UDP `target_bitrate` = the
//!   sender's mean rate; `receiver_tcp_congestion` = the sender's algorithm. Where
//!   iperf3 itself writes 0 for a value it could not read (no `tcp_info`), 0 stands for
//!   what the result lacks: `snd_wnd`, `rttvar`, `pmtu`, `max_snd_wnd`,
//!   `sock_bufsize`, `sndbuf_actual`, `rcvbuf_actual`, UDP `out_of_order`, and
//!   `rtt`/`snd_cwnd`/CPU figures where the result has none.
//!
//! Times are relative to the entry's own start, as iperf3's are (the result's are on
//! the scenario clock). `version` is the iperf3 the backend ran
//! (`metadata.tools.iperf3`), else "qdisc-lab V (B backend)"; `system_info` is
//! "Linux KERNEL (qdisc-lab B backend)".
//!
//! UDP as 3.12 prints it: the per-stream `udp` block holds the sender's bytes and
//! datagrams with the receiver's loss and jitter, and the receiver's bytes are only in
//! `sum_received` — so a stream's receiver datagram count is the sender's, as it is in
//! a result read from real iperf3.
//!
//! The host backend reads iperf3's JSON with `qdisc_kernel::host::tools::parse_iperf3`;
//! reading this module's JSON with it gives back the same intervals and summaries
//! (tested in `crates/qdisc-lab/tests/iperf3_json.rs`).

use serde::Serialize;

use crate::result::{CpuUtilization, Interval, RunResult, Summary, TrafficResult};

/// The iperf3 `-J` document of one tcp/udp traffic entry, pretty-printed, with a
/// trailing newline.
pub fn to_iperf3_json(r: &RunResult, t: &TrafficResult) -> String {
    serde_json::to_string_pretty(&document(r, t)).expect("serialises") + "\n"
}

#[derive(Serialize)]
struct Doc {
    start: Start,
    intervals: Vec<IntervalOut>,
    end: End,
    /// iperf3's `--extra-data`: who produced this document.
    extra_data: String,
}

#[derive(Serialize)]
struct Start {
    connected: Vec<Connected>,
    version: String,
    system_info: String,
    timestamp: Timestamp,
    connecting_to: ConnectingTo,
    cookie: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss_default: Option<u32>,
    target_bitrate: u64,
    sock_bufsize: u64,
    sndbuf_actual: u64,
    rcvbuf_actual: u64,
    test_start: TestStart,
}

#[derive(Serialize)]
struct Connected {
    socket: u32,
    local_host: String,
    local_port: u16,
    remote_host: String,
    remote_port: u16,
}

#[derive(Serialize)]
struct Timestamp {
    time: String,
    timesecs: i64,
}

#[derive(Serialize)]
struct ConnectingTo {
    host: String,
    port: u16,
}

#[derive(Serialize)]
struct TestStart {
    protocol: &'static str,
    num_streams: usize,
    blksize: u64,
    omit: u32,
    duration: u64,
    bytes: u64,
    blocks: u64,
    reverse: u32,
    tos: u32,
    target_bitrate: u64,
}

#[derive(Serialize)]
struct IntervalOut {
    streams: Vec<IntervalStream>,
    sum: IntervalStream,
}

/// One interval report (a stream's or the sum).
#[derive(Serialize)]
struct IntervalStream {
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<u32>,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retransmits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snd_cwnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snd_wnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rttvar: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pmtu: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packets: Option<u64>,
    omitted: bool,
    sender: bool,
}

#[derive(Serialize)]
struct End {
    streams: Vec<EndStream>,
    /// UDP only: the receiver's loss and jitter (3.12 puts them here).
    #[serde(skip_serializing_if = "Option::is_none")]
    sum: Option<Total>,
    sum_sent: Total,
    sum_received: Total,
    cpu_utilization_percent: CpuUtilization,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender_tcp_congestion: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver_tcp_congestion: Option<String>,
}

// Built once per stream only to be serialised: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize)]
#[serde(untagged)]
enum EndStream {
    Tcp { sender: Total, receiver: Total },
    Udp { udp: Total },
}

/// A summary over the whole test (a stream's or a sum).
#[derive(Serialize, Default)]
struct Total {
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<u32>,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out_of_order: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retransmits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_snd_cwnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_snd_wnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mean_rtt: Option<u64>,
    sender: bool,
}

/// `x − off` such that adding `off` back gives exactly `x` (so that a reader that
/// shifts iperf3's relative times onto the scenario clock recovers the result's
/// numbers bit for bit).
fn rel(x: f64, off: f64) -> f64 {
    let d = x - off;
    if d + off == x {
        return d;
    }
    let (mut up, mut down) = (d, d);
    for _ in 0..4 {
        up = f64::from_bits(if up >= 0.0 { up.to_bits() + 1 } else { up.to_bits() - 1 });
        if up + off == x {
            return up;
        }
        down = f64::from_bits(if down > 0.0 { down.to_bits() - 1 } else { down.to_bits() + 1 });
        if down + off == x {
            return down;
        }
    }
    d
}

fn interval(iv: &Interval, off: f64, socket: Option<u32>, tcp: bool) -> IntervalStream {
    let (start, end) = (rel(iv.start, off), rel(iv.end, off));
    IntervalStream {
        socket,
        start,
        end,
        seconds: end - start,
        bytes: iv.bytes,
        bits_per_second: iv.bits_per_second,
        retransmits: tcp.then(|| iv.retransmits.unwrap_or(0)),
        snd_cwnd: (tcp && socket.is_some()).then(|| iv.snd_cwnd.unwrap_or(0)),
        snd_wnd: (tcp && socket.is_some()).then_some(0),
        rtt: (tcp && socket.is_some()).then(|| iv.tcp_rtt_us.unwrap_or(0)),
        rttvar: (tcp && socket.is_some()).then_some(0),
        pmtu: (tcp && socket.is_some()).then_some(0),
        packets: if tcp { None } else { Some(iv.packets.unwrap_or(0)) },
        omitted: false,
        sender: true,
    }
}

fn total(s: &Summary, socket: Option<u32>) -> Total {
    Total {
        socket,
        start: 0.0,
        end: s.seconds,
        seconds: s.seconds,
        bytes: s.bytes,
        bits_per_second: s.bits_per_second,
        sender: true,
        ..Total::default()
    }
}

fn lost_percent(lost: Option<u64>, packets: Option<u64>) -> Option<f64> {
    match (lost, packets) {
        (Some(l), Some(p)) if p > 0 => Some(l as f64 * 100.0 / p as f64),
        _ => None,
    }
}

/// iperf3's per-stream maxima and mean over its interval samples (`None` unless every
/// interval has one).
fn sampled(ivs: &[Interval], f: impl Fn(&Interval) -> Option<u64>) -> Option<Vec<u64>> {
    if ivs.is_empty() {
        return None;
    }
    ivs.iter().map(f).collect()
}

fn document(r: &RunResult, t: &TrafficResult) -> Doc {
    let tcp = t.kind == "tcp";
    let off = t.start_s;
    let m = &r.metadata;
    // Local traffic (a host to itself) runs over lo: both ends are 127.0.0.1.
    let local = (t.from == t.to).then(|| t.dst.clone());
    let local_host = local
        .or_else(|| {
            m.links.iter().find_map(|l| {
                let host = |i: usize| l.between[i].split(':').next().unwrap_or("");
                let addr = |i: usize| l.addresses[i].split('/').next().unwrap_or("").to_string();
                (0..2).find(|&i| host(i) == t.from && host(1 - i) == t.to && addr(1 - i) == t.dst).map(addr)
            })
        })
        // Routed traffic: the sender's first address (its route to dst is not in the result).
        .or_else(|| {
            m.links.iter().find_map(|l| {
                (0..2)
                    .find(|&i| l.between[i].split(':').next() == Some(t.from.as_str()))
                    .map(|i| l.addresses[i].split('/').next().unwrap_or("").to_string())
            })
        })
        .unwrap_or_default();
    // The host backend's server of entry i listens on iperf3's default port + i.
    let port = IPERF3_PORT + t.traffic as u16;
    let version = match m.tools.get("iperf3") {
        // "iperf 3.12 (cJSON 1.7.15)" → "iperf 3.12", as iperf3 writes its version.
        Some(v) if !v.is_empty() => v.split(" (").next().unwrap_or(v).to_string(),
        _ => format!("qdisc-lab {} ({} backend)", m.qdisc_lab, m.backend),
    };
    // Without a wall clock (the simulator) the run starts at the Unix epoch.
    let t0 = r.wallclock.as_ref().and_then(|w| unix_of_rfc3339(&w.started_at)).unwrap_or(0.0);
    let secs = (t0 + off).floor() as i64;
    let timestamp = Timestamp { time: http_date(secs), timesecs: secs };
    // iperf3 runs whole seconds (-t N): the sender's time to the nearest second.
    let duration = t.sender.seconds.round() as u64;
    // UDP: every datagram carries blksize bytes, so the sender's bytes per datagram
    // are the blksize; TCP: iperf3's default write size (the host backend gives no -l).
    let blksize = match t.sender.packets {
        Some(p) if !tcp && p > 0 => t.sender.bytes / p,
        _ => DEFAULT_TCP_BLKSIZE,
    };
    // TCP entries have no rate of their own (0 = unlimited, as iperf3 says); a UDP
    // entry's rate is in the scenario, not the result: the sender's mean rate.
    let target_bitrate = if tcp { 0 } else { t.sender.bits_per_second.round() as u64 };
    let start = Start {
        connected: t
            .streams
            .iter()
            .map(|s| Connected {
                socket: s.id,
                local_host: local_host.clone(),
                local_port: 0,
                remote_host: t.dst.clone(),
                remote_port: port,
            })
            .collect(),
        version,
        system_info: format!("Linux {} (qdisc-lab {} backend)", m.kernel, m.backend),
        timestamp,
        connecting_to: ConnectingTo { host: t.dst.clone(), port },
        cookie: cookie(r, t),
        tcp_mss_default: if tcp { t.tcp_mss } else { None },
        target_bitrate,
        sock_bufsize: 0,
        sndbuf_actual: 0,
        rcvbuf_actual: 0,
        test_start: TestStart {
            protocol: if tcp { "TCP" } else { "UDP" },
            num_streams: t.streams.len(),
            blksize,
            omit: 0,
            duration,
            bytes: 0,
            blocks: 0,
            reverse: 0,
            tos: 0,
            target_bitrate,
        },
    };
    let n = t.streams.iter().map(|s| s.intervals.len()).max().unwrap_or(0).max(t.sum.len());
    let intervals = (0..n)
        .map(|k| IntervalOut {
            streams: t
                .streams
                .iter()
                .filter_map(|s| s.intervals.get(k).map(|iv| interval(iv, off, Some(s.id), tcp)))
                .collect(),
            sum: match t.sum.get(k) {
                Some(iv) => interval(iv, off, None, tcp),
                None => interval(&empty_interval(), 0.0, None, tcp),
            },
        })
        .collect();
    let end = if tcp {
        End {
            streams: t
                .streams
                .iter()
                .map(|s| {
                    let rtts = sampled(&s.intervals, |iv| iv.tcp_rtt_us);
                    let cwnds = sampled(&s.intervals, |iv| iv.snd_cwnd);
                    EndStream::Tcp {
                        sender: Total {
                            retransmits: Some(s.sender.retransmits.unwrap_or(0)),
                            max_snd_cwnd: Some(cwnds.as_ref().and_then(|c| c.iter().copied().max()).unwrap_or(0)),
                            max_snd_wnd: Some(0),
                            max_rtt: Some(rtts.as_ref().and_then(|v| v.iter().copied().max()).unwrap_or(0)),
                            // iperf3 takes a minimum of 0 as "no sample yet".
                            min_rtt: Some(
                                rtts.as_ref()
                                    .map_or(0, |v| v.iter().fold(0, |m, &x| if m == 0 || x < m { x } else { m })),
                            ),
                            mean_rtt: Some(rtts.as_ref().map_or(0, |v| v.iter().sum::<u64>() / v.len() as u64)),
                            ..total(&s.sender, Some(s.id))
                        },
                        receiver: total(&s.receiver, Some(s.id)),
                    }
                })
                .collect(),
            sum: None,
            sum_sent: Total { retransmits: Some(t.sender.retransmits.unwrap_or(0)), ..total(&t.sender, None) },
            sum_received: total(&t.receiver, None),
            cpu_utilization_percent: cpu_utilization(r, t),
            sender_tcp_congestion: t.cc.clone(),
            receiver_tcp_congestion: t.cc.clone(),
        }
    } else {
        let rcv = &t.receiver;
        let received = Total {
            jitter_ms: Some(rcv.jitter_ms.unwrap_or(0.0)),
            lost_packets: Some(rcv.lost_packets.unwrap_or(0)),
            packets: Some(rcv.packets.unwrap_or(0)),
            lost_percent: Some(lost_percent(rcv.lost_packets, rcv.packets).unwrap_or(0.0)),
            ..total(rcv, None)
        };
        End {
            streams: t
                .streams
                .iter()
                .map(|s| {
                    // 3.12's per-stream udp block: the sender's bytes and datagrams with
                    // the receiver's loss and jitter.
                    let packets = s.sender.packets.or(s.receiver.packets);
                    EndStream::Udp {
                        udp: Total {
                            jitter_ms: Some(s.receiver.jitter_ms.unwrap_or(0.0)),
                            lost_packets: Some(s.receiver.lost_packets.unwrap_or(0)),
                            packets: Some(packets.unwrap_or(0)),
                            lost_percent: Some(lost_percent(s.receiver.lost_packets, packets).unwrap_or(0.0)),
                            out_of_order: Some(0),
                            ..total(&s.sender, Some(s.id))
                        },
                    }
                })
                .collect(),
            sum: Some(Total {
                jitter_ms: Some(rcv.jitter_ms.unwrap_or(0.0)),
                lost_packets: Some(rcv.lost_packets.unwrap_or(0)),
                packets: Some(t.sender.packets.or(rcv.packets).unwrap_or(0)),
                lost_percent: Some(lost_percent(rcv.lost_packets, t.sender.packets.or(rcv.packets)).unwrap_or(0.0)),
                ..total(&t.sender, None)
            }),
            // 3.12 writes the sender's sum with the receiver's keys, zeroed.
            sum_sent: Total {
                jitter_ms: Some(0.0),
                lost_packets: Some(0),
                packets: Some(t.sender.packets.unwrap_or(0)),
                lost_percent: Some(0.0),
                ..total(&t.sender, None)
            },
            sum_received: Total { sender: false, ..received },
            cpu_utilization_percent: cpu_utilization(r, t),
            sender_tcp_congestion: None,
            receiver_tcp_congestion: None,
        }
    };
    Doc {
        start,
        intervals,
        end,
        extra_data: format!(
            "qdisc-lab {}: traffic[{}] of scenario {:?}, {} backend",
            m.qdisc_lab, t.traffic, r.scenario.name, m.backend
        ),
    }
}

/// iperf3's default server port (`PORT` in src/iperf.h).
const IPERF3_PORT: u16 = 5201;
/// iperf3's default TCP write size (`DEFAULT_TCP_BLKSIZE` in src/iperf_api.h).
const DEFAULT_TCP_BLKSIZE: u64 = 128 * 1024;

/// iperf3's cookie (36 characters of `[a-z2-7]`, random per test): here the first 180
/// bits of sha256(scenario sha256, traffic index), so the same result gives the same
/// document.
fn cookie(r: &RunResult, t: &TrafficResult) -> String {
    use sha2::{Digest, Sha256};
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let d = Sha256::digest(format!("{}:{}", r.scenario.sha256, t.traffic));
    (0..36)
        .map(|i| {
            let bit = i * 5;
            let word = u16::from_be_bytes([d[bit / 8], d[bit / 8 + 1]]);
            ALPHABET[((word >> (11 - bit % 8)) & 31) as usize] as char
        })
        .collect()
}

/// `cpu_utilization_percent`: iperf3's own where the entry has them (host and vm
/// backends), else from the result's `cpu` section (the simulator's CPU model): the
/// whole sending host's busy time (every CPU, in per cent of one CPU, the unit iperf3
/// uses) as `host_*`, the receiving host's as `remote_*`; system time is sys +
/// softirq. 0 where the result has no CPU figures for a host.
fn cpu_utilization(r: &RunResult, t: &TrafficResult) -> CpuUtilization {
    if let Some(c) = &t.cpu_utilization_percent {
        return c.clone();
    }
    let of = |host: &str| {
        r.cpu.iter().find(|c| c.host == host).map_or((0.0, 0.0, 0.0), |c| {
            let user: f64 = c.total.iter().map(|x| x.user).sum();
            let system: f64 = c.total.iter().map(|x| x.sys + x.softirq).sum();
            (user + system, user, system)
        })
    };
    let (host_total, host_user, host_system) = of(&t.from);
    let (remote_total, remote_user, remote_system) = of(&t.to);
    CpuUtilization { host_total, host_user, host_system, remote_total, remote_user, remote_system }
}

fn empty_interval() -> Interval {
    Interval {
        start: 0.0,
        end: 0.0,
        bytes: 0,
        bits_per_second: 0.0,
        retransmits: None,
        tcp_rtt_us: None,
        snd_cwnd: None,
        packets: None,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month 1–12, day 1–31) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Unix time (seconds) of "YYYY-MM-DDTHH:MM:SS[.fff]Z".
pub(crate) fn unix_of_rfc3339(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>());
    let (y, mo, da) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.splitn(3, ':');
    let (h, mi) = (t.next()?.parse::<i64>().ok()?, t.next()?.parse::<i64>().ok()?);
    let sec: f64 = t.next()?.parse().ok()?;
    Some((days_from_civil(y, mo, da) * 86400 + h * 3600 + mi * 60) as f64 + sec)
}

/// iperf3's timestamp text: `strftime("%a, %d %b %Y %H:%M:%S %Z", gmtime(...))`.
fn http_date(secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_as_iperf3_prints_them() {
        // From a real `iperf3 -J` (3.12): "Sun, 22 Nov 2026 13:16:38 GMT", 1795353398.
        assert_eq!(http_date(1_795_353_398), "Sun, 22 Nov 2026 13:16:38 GMT");
        assert_eq!(unix_of_rfc3339("2026-11-22T13:16:38.250Z"), Some(1_795_353_398.25));
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(unix_of_rfc3339("2024-02-29T23:59:59.000Z"), Some(1_709_251_199.0));
        assert_eq!(http_date(1_709_251_199), "Thu, 29 Feb 2024 23:59:59 GMT");
        assert_eq!(unix_of_rfc3339("yesterday"), None);
    }

    #[test]
    fn local_traffic_is_from_and_to_127_0_0_1() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../qdisc-lab/tests/fixtures/small-host-a.json"
        ))
        .unwrap();
        let r: RunResult = serde_json::from_str(&text).unwrap();
        let local_host = |t: &TrafficResult| -> serde_json::Value {
            let j: serde_json::Value = serde_json::from_str(&to_iperf3_json(&r, t)).unwrap();
            j["start"]["connected"][0]["local_host"].clone()
        };
        let mut t = r.throughput[0].clone();
        assert_eq!(local_host(&t), "10.1.0.1");
        t.to = t.from.clone();
        t.dst = "127.0.0.1".into();
        assert_eq!(local_host(&t), "127.0.0.1");
    }

    #[test]
    fn relative_times_shift_back_exactly() {
        for off in [0.0, 0.1, 1.0, 2.0, 2.5, 3.3, 7.0] {
            for k in 0..200 {
                let x = off + k as f64 * 0.1;
                assert_eq!(rel(x, off) + off, x, "{x} - {off}");
            }
        }
    }
}
