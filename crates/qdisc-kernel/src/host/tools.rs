//! Reading what iperf3 (`-J`) and ping print into the result model.

use qdisc_scenario::result::{Interval, RttResult, RttSample, RttStats, StreamResult, Summary, TrafficResult};
use serde_json::Value;

/// What a tcp/udp traffic entry was, for the result.
pub struct TrafficMeta {
    pub traffic: usize,
    pub kind: &'static str,
    pub from: String,
    pub to: String,
    pub dst: String,
    pub start_s: f64,
    pub flows: u32,
}

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

fn interval(v: &Value, offset: f64, tcp: bool) -> Interval {
    Interval {
        start: offset + f(v, "start"),
        end: offset + f(v, "end"),
        bytes: u(v, "bytes").unwrap_or(0),
        bits_per_second: f(v, "bits_per_second"),
        retransmits: if tcp { u(v, "retransmits") } else { None },
        tcp_rtt_us: if tcp { u(v, "rtt") } else { None },
        snd_cwnd: if tcp { u(v, "snd_cwnd") } else { None },
        packets: if tcp { None } else { u(v, "packets") },
    }
}

fn summary(v: &Value, tcp: bool, receiver: bool) -> Summary {
    Summary {
        seconds: f(v, "seconds"),
        bytes: u(v, "bytes").unwrap_or(0),
        bits_per_second: f(v, "bits_per_second"),
        retransmits: if tcp && !receiver { u(v, "retransmits") } else { None },
        packets: if tcp { None } else { u(v, "packets") },
        lost_packets: if tcp || !receiver { None } else { u(v, "lost_packets") },
        jitter_ms: if tcp || !receiver { None } else { v.get("jitter_ms").and_then(Value::as_f64) },
    }
}

/// The JSON an iperf3 client printed with `-J` (3.12's shape), or iperf3's own error.
pub fn parse_iperf3(json: &str, meta: TrafficMeta) -> Result<TrafficResult, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("iperf3 -J output does not parse: {e}"))?;
    if let Some(err) = v.get("error").and_then(Value::as_str) {
        return Err(format!("iperf3: {err}"));
    }
    let tcp = meta.kind == "tcp";
    let off = meta.start_s;
    let mut streams: Vec<StreamResult> = Vec::new();
    let mut sum = Vec::new();
    for iv in v["intervals"].as_array().into_iter().flatten() {
        for s in iv["streams"].as_array().into_iter().flatten() {
            let id = u(s, "socket").unwrap_or(0) as u32;
            let pos = match streams.iter().position(|x| x.id == id) {
                Some(p) => p,
                None => {
                    streams.push(StreamResult {
                        id,
                        intervals: Vec::new(),
                        sender: summary(&Value::Null, tcp, false),
                        receiver: summary(&Value::Null, tcp, true),
                    });
                    streams.len() - 1
                }
            };
            streams[pos].intervals.push(interval(s, off, tcp));
        }
        sum.push(interval(&iv["sum"], off, tcp));
    }
    let end = &v["end"];
    for s in end["streams"].as_array().into_iter().flatten() {
        let (snd, rcv) = if tcp { (&s["sender"], &s["receiver"]) } else { (&s["udp"], &s["udp"]) };
        let id = u(snd, "socket").unwrap_or(0) as u32;
        if let Some(st) = streams.iter_mut().find(|x| x.id == id) {
            st.sender = summary(snd, tcp, false);
            st.receiver = summary(rcv, tcp, true);
            if !tcp {
                // The per-stream udp block is the sender's bytes with the receiver's
                // loss and jitter; received bytes are the entry's sum_received.
                st.receiver.bytes = u(&end["sum_received"], "bytes").unwrap_or(st.receiver.bytes);
                st.receiver.bits_per_second = f(&end["sum_received"], "bits_per_second");
                st.receiver.seconds = f(&end["sum_received"], "seconds");
            }
        }
    }
    let sender = summary(&end["sum_sent"], tcp, false);
    let mut receiver = summary(&end["sum_received"], tcp, true);
    if !tcp {
        // 3.12 puts loss and jitter in end.sum (sum_received's jitter is the receiver's).
        receiver.lost_packets = u(&end["sum"], "lost_packets").or(receiver.lost_packets);
    }
    let cc = end.get("sender_tcp_congestion").and_then(Value::as_str).map(String::from);
    let tcp_mss = if tcp { v["start"].get("tcp_mss_default").and_then(Value::as_u64).map(|m| m as u32) } else { None };
    let cpu_utilization_percent = serde_json::from_value(end["cpu_utilization_percent"].clone()).ok();
    Ok(TrafficResult {
        traffic: meta.traffic,
        kind: meta.kind.into(),
        from: meta.from,
        to: meta.to,
        dst: meta.dst,
        start_s: off,
        flows: meta.flows,
        cc,
        tcp_mss,
        streams,
        sum,
        sender,
        receiver,
        cpu_utilization_percent,
    })
}

/// A ping entry, for the result.
pub struct PingMeta {
    pub traffic: usize,
    pub from: String,
    pub to: String,
    pub dst: String,
    pub start_s: f64,
    pub interval_s: f64,
    /// The scenario clock's 0 as a Unix time (seconds), to place `ping -D` stamps.
    pub t0_unix: f64,
}

/// What iputils ping printed (`ping -D -n`): replies, each stamped with its arrival as
/// a Unix time, and the "transmitted" summary line.
pub fn parse_ping(text: &str, meta: PingMeta) -> RttResult {
    let mut samples = Vec::new();
    let (mut transmitted, mut received) = (0, 0);
    for line in text.lines() {
        if let (Some(seq), Some(time)) = (field(line, "icmp_seq="), field(line, "time=")) {
            if let (Ok(seq), Ok(rtt_ms)) = (seq.parse::<u64>(), time.parse::<f64>()) {
                let stamp =
                    line.strip_prefix('[').and_then(|l| l.split(']').next()).and_then(|t| t.parse::<f64>().ok());
                let t = match stamp {
                    Some(unix) => unix - meta.t0_unix,
                    None => meta.start_s + (seq.max(1) - 1) as f64 * meta.interval_s,
                };
                samples.push(RttSample { seq, t, rtt_ms });
            }
        } else if line.contains("packets transmitted") {
            let nums: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            if nums.len() >= 2 {
                (transmitted, received) = (nums[0], nums[1]);
            }
        }
    }
    if transmitted == 0 {
        // Killed before its summary: count what we saw.
        transmitted = samples.iter().map(|s| s.seq).max().unwrap_or(0);
        received = samples.len() as u64;
    }
    let last = samples.iter().map(|s| s.seq).max().unwrap_or(0);
    let in_flight_at_end = transmitted.saturating_sub(last);
    let rtts: Vec<f64> = samples.iter().map(|s| s.rtt_ms).collect();
    RttResult {
        traffic: meta.traffic,
        from: meta.from,
        to: meta.to,
        dst: meta.dst,
        start_s: meta.start_s,
        interval_s: meta.interval_s,
        transmitted,
        received,
        in_flight_at_end,
        stats: RttStats::of(&rtts),
        samples,
    }
}

/// The word after `key` in a line (`time=0.045` → "0.045").
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(key)? + key.len()..];
    Some(rest.split_whitespace().next().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_output() {
        let text = "PING 10.1.0.2 (10.1.0.2) 56(84) bytes of data.
[1700000001.000100] 64 bytes from 10.1.0.2: icmp_seq=1 ttl=64 time=0.178 ms
[1700000001.020100] 64 bytes from 10.1.0.2: icmp_seq=3 ttl=64 time=0.042 ms

--- 10.1.0.2 ping statistics ---
4 packets transmitted, 2 received, 50% packet loss, time 31ms
rtt min/avg/max/mdev = 0.042/0.110/0.178/0.068 ms
";
        let meta = PingMeta {
            traffic: 1,
            from: "a".into(),
            to: "b".into(),
            dst: "10.1.0.2".into(),
            start_s: 1.0,
            interval_s: 0.01,
            t0_unix: 1700000000.0,
        };
        let r = parse_ping(text, meta);
        assert_eq!((r.transmitted, r.received, r.in_flight_at_end), (4, 2, 1));
        assert_eq!((r.samples[1].seq, r.samples[1].rtt_ms), (3, 0.042));
        assert!((r.samples[1].t - 1.0201).abs() < 1e-6, "{}", r.samples[1].t);
        let s = r.stats.unwrap();
        assert_eq!((s.min, s.max), (0.042, 0.178));
        assert!((s.mdev - 0.068).abs() < 1e-9, "ping's mdev: {}", s.mdev);
    }

    #[test]
    fn iperf3_tcp_json() {
        let json = r#"{"start":{"tcp_mss_default":1448},
          "intervals":[{"streams":[{"socket":5,"start":0,"end":0.1,"bytes":1000,"bits_per_second":80000,"retransmits":1,"rtt":120,"snd_cwnd":14480}],
                        "sum":{"start":0,"end":0.1,"bytes":1000,"bits_per_second":80000,"retransmits":1}}],
          "end":{"streams":[{"sender":{"socket":5,"seconds":1,"bytes":1000,"bits_per_second":8000,"retransmits":1},
                             "receiver":{"socket":5,"seconds":1,"bytes":900,"bits_per_second":7200}}],
                 "sum_sent":{"seconds":1,"bytes":1000,"bits_per_second":8000,"retransmits":1},
                 "sum_received":{"seconds":1,"bytes":900,"bits_per_second":7200},
                 "sender_tcp_congestion":"cubic"}}"#;
        let meta = TrafficMeta {
            traffic: 0,
            kind: "tcp",
            from: "a".into(),
            to: "b".into(),
            dst: "x".into(),
            start_s: 2.0,
            flows: 1,
        };
        let r = parse_iperf3(json, meta).unwrap();
        assert_eq!(r.tcp_mss, Some(1448));
        assert_eq!(r.cc.as_deref(), Some("cubic"));
        assert_eq!(r.streams[0].intervals[0].start, 2.0);
        assert_eq!(r.streams[0].intervals[0].tcp_rtt_us, Some(120));
        assert_eq!(r.streams[0].receiver.bytes, 900);
        assert_eq!(r.receiver.bytes, 900);
        assert_eq!(r.sender.retransmits, Some(1));
        let meta = TrafficMeta {
            traffic: 0,
            kind: "tcp",
            from: "a".into(),
            to: "b".into(),
            dst: "x".into(),
            start_s: 0.0,
            flows: 1,
        };
        assert_eq!(parse_iperf3(r#"{"error":"unable to connect"}"#, meta).unwrap_err(), "iperf3: unable to connect");
    }
}
