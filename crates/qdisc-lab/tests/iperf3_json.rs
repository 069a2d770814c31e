//! `qdisc_scenario::iperf3` writes a traffic entry as `iperf3 -J` JSON; reading that
//! back with the host backend's own iperf3 reader (`parse_iperf3`) must give the entry
//! back, and every key it writes must be one real iperf3 3.12 writes at that place.

use qdisc_kernel::host::tools::{parse_iperf3, TrafficMeta};
use qdisc_scenario::iperf3::to_iperf3_json;
use qdisc_scenario::result::{CpuUtilization, Interval, StreamResult, Summary, TrafficResult};
use qdisc_scenario::RunResult;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
}

fn run_result() -> RunResult {
    serde_json::from_str(&fixture("small-host-a.json")).unwrap()
}

fn meta(t: &TrafficResult) -> TrafficMeta {
    TrafficMeta {
        traffic: t.traffic,
        kind: if t.kind == "tcp" { "tcp" } else { "udp" },
        from: t.from.clone(),
        to: t.to.clone(),
        dst: t.dst.clone(),
        start_s: t.start_s,
        flows: t.flows,
    }
}

/// iperf3's CPU figures as the host backend keeps them (small-host-a.json predates them).
fn measured_cpu() -> Option<CpuUtilization> {
    Some(CpuUtilization {
        host_total: 95.82691519298203,
        host_user: 0.0,
        host_system: 95.82691519298203,
        remote_total: 53.45375547733136,
        remote_user: 1.99648291092607,
        remote_system: 51.4571725922986,
    })
}

fn round_trip(r: &RunResult, t: &TrafficResult) -> TrafficResult {
    parse_iperf3(&to_iperf3_json(r, t), meta(t)).unwrap()
}

#[test]
fn a_host_result_round_trips_through_parse_iperf3() {
    let r = run_result();
    let mut t = r.throughput[0].clone();
    assert_eq!(t.streams.len(), 2);
    t.cpu_utilization_percent = measured_cpu();
    assert_eq!(round_trip(&r, &t), t);
}

#[test]
fn times_are_relative_to_the_entry_and_shift_back_exactly() {
    let r = run_result();
    // The same entry starting 1.3 s into the scenario (times on the scenario clock).
    let mut t = r.throughput[0].clone();
    t.cpu_utilization_percent = measured_cpu();
    t.start_s = 1.3;
    let shift = |iv: &mut Interval| {
        iv.start += 1.3;
        iv.end += 1.3;
    };
    t.sum.iter_mut().for_each(shift);
    t.streams.iter_mut().flat_map(|s| &mut s.intervals).for_each(shift);
    let json: Value = serde_json::from_str(&to_iperf3_json(&r, &t)).unwrap();
    assert_eq!(json["intervals"][0]["sum"]["start"], 0.0);
    assert_eq!(round_trip(&r, &t), t);
}

#[test]
fn what_the_result_knows_and_does_not() {
    let r = run_result();
    let t = &r.throughput[0];
    let j: Value = serde_json::from_str(&to_iperf3_json(&r, t)).unwrap();
    let s = &j["start"];
    assert_eq!(s["version"], "iperf 3.12");
    assert_eq!(s["connected"][0]["socket"], t.streams[0].id);
    assert_eq!(s["connected"][0]["local_host"], "10.1.0.1");
    assert_eq!(s["connected"][0]["remote_host"], "10.1.0.2");
    // Synthetic: the client's port unknown (0), the server's the host backend's 5201 + i.
    assert_eq!(s["connected"][0]["local_port"], 0);
    assert_eq!(s["connecting_to"], serde_json::json!({"host": "10.1.0.2", "port": 5201}));
    assert_eq!(s["cookie"].as_str().unwrap().len(), 36);
    assert_eq!(s["test_start"]["protocol"], "TCP");
    assert_eq!(s["test_start"]["num_streams"], 2);
    assert_eq!(s["test_start"]["duration"], 2);
    assert_eq!(s["test_start"]["blksize"], 131072);
    // The wall-clock start 2026-11-22T13:16:38.xZ plus the entry's start.
    assert!(s["timestamp"]["time"].as_str().unwrap().ends_with(" GMT"));
    // This result predates the entry's iperf3 CPU figures and has no `cpu` section: 0,
    // as iperf3 prints what it cannot read; the figures iperf3 measured when present.
    assert_eq!(j["end"]["cpu_utilization_percent"]["host_total"], 0.0);
    let mut t = t.clone();
    t.cpu_utilization_percent = measured_cpu();
    let j: Value = serde_json::from_str(&to_iperf3_json(&r, &t)).unwrap();
    assert_eq!(j["end"]["cpu_utilization_percent"]["remote_user"], 1.99648291092607);
    assert_eq!(j["end"]["sender_tcp_congestion"], "cubic");
    assert_eq!(j["end"]["receiver_tcp_congestion"], "cubic");
    // iperf3's per-stream RTT summary over its interval samples.
    let rtts: Vec<u64> = t.streams[0].intervals.iter().map(|iv| iv.tcp_rtt_us.unwrap()).collect();
    let snd = &j["end"]["streams"][0]["sender"];
    assert_eq!(snd["max_rtt"], *rtts.iter().max().unwrap());
    assert_eq!(snd["min_rtt"], *rtts.iter().min().unwrap());
    assert_eq!(snd["mean_rtt"], rtts.iter().sum::<u64>() / rtts.len() as u64);
    assert!(j["extra_data"].as_str().unwrap().contains("host backend"));
}

/// Every key path of `ours` exists in `real` (arrays: their first element), with the
/// same JSON type unless ours is null.
fn keys_within(ours: &Value, real: &Value, path: &str, bad: &mut Vec<String>) {
    match (ours, real) {
        (Value::Object(o), Value::Object(r)) => {
            for (k, v) in o {
                match r.get(k) {
                    Some(rv) => keys_within(v, rv, &format!("{path}.{k}"), bad),
                    None => bad.push(format!("{path}.{k}: not in iperf3's output")),
                }
            }
        }
        (Value::Array(o), Value::Array(r)) => {
            if let (Some(o), Some(r)) = (o.first(), r.first()) {
                keys_within(o, r, &format!("{path}[]"), bad);
            }
        }
        (Value::Null, _) => {}
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (o, r) => bad.push(format!("{path}: {o} where iperf3 has {r}")),
    }
}

/// Real `iperf3 -c 127.0.0.1 -t 1 -i 0.5 -P 2 -C cubic -J` and `-u -b 10000000 -l 1200`
/// output of iperf 3.12 (Debian 13), read with parse_iperf3, written again.
#[test]
fn real_iperf3_output_round_trips_and_bounds_our_keys() {
    let r = run_result();
    for (file, kind, flows) in [("iperf3-3.12-tcp.json", "tcp", 2), ("iperf3-3.12-udp.json", "udp", 1)] {
        let real_text = fixture(file);
        let m = TrafficMeta {
            traffic: 0,
            kind,
            from: "client".into(),
            to: "server".into(),
            dst: "127.0.0.1".into(),
            start_s: 0.0,
            flows,
        };
        let t = parse_iperf3(&real_text, m).unwrap();
        let ours = to_iperf3_json(&r, &t);
        assert_eq!(round_trip(&r, &t), t, "{file}");
        let (ours, real): (Value, Value) =
            (serde_json::from_str(&ours).unwrap(), serde_json::from_str(&real_text).unwrap());
        let mut ours_known = ours.clone();
        ours_known.as_object_mut().unwrap().remove("extra_data"); // iperf3 --extra-data
        let mut bad = Vec::new();
        keys_within(&ours_known, &real, "", &mut bad);
        assert!(bad.is_empty(), "{file}: {bad:#?}");
        // And every key iperf3 writes is ours too, with its type (null nowhere).
        let mut real_known = real.clone();
        real_known.as_object_mut().unwrap().remove("extra_data");
        keys_within(&real_known, &ours_known, "", &mut bad);
        assert!(bad.is_empty(), "{file}: ours lacks {bad:#?}");
        assert!(!ours.to_string().contains("null"), "{file}: {ours}");
        // And the numbers iperf3 printed are the numbers we print.
        for k in ["bytes", "bits_per_second", "seconds"] {
            assert_eq!(ours["end"]["sum_sent"][k], real["end"]["sum_sent"][k], "{file}: sum_sent.{k}");
            assert_eq!(ours["end"]["sum_received"][k], real["end"]["sum_received"][k], "{file}: sum_received.{k}");
        }
        assert_eq!(ours["intervals"][1]["streams"][0]["bytes"], real["intervals"][1]["streams"][0]["bytes"]);
        assert_eq!(ours["intervals"][1]["sum"]["end"], real["intervals"][1]["sum"]["end"]);
    }
}

#[test]
fn udp_round_trips() {
    let r = run_result();
    let sender = Summary {
        seconds: 2.0,
        bytes: 2_500_000,
        bits_per_second: 10e6,
        retransmits: None,
        packets: Some(2084),
        lost_packets: None,
        jitter_ms: None,
    };
    let receiver = Summary {
        seconds: 2.01,
        bytes: 2_400_000,
        bits_per_second: 9.55e6,
        packets: Some(2084),
        lost_packets: Some(84),
        jitter_ms: Some(0.25),
        retransmits: None,
    };
    let iv = |k: u32| Interval {
        start: 0.5 + k as f64 * 0.1,
        end: 0.5 + (k + 1) as f64 * 0.1,
        bytes: 125_000,
        bits_per_second: 10e6,
        retransmits: None,
        tcp_rtt_us: None,
        snd_cwnd: None,
        packets: Some(104),
    };
    let t = TrafficResult {
        traffic: 2,
        kind: "udp".into(),
        from: "client".into(),
        to: "server".into(),
        dst: "10.1.0.2".into(),
        start_s: 0.5,
        flows: 1,
        cc: None,
        tcp_mss: None,
        streams: vec![StreamResult {
            id: 5,
            intervals: (0..20).map(iv).collect(),
            sender: sender.clone(),
            receiver: receiver.clone(),
        }],
        sum: (0..20).map(iv).collect(),
        sender,
        receiver,
        cpu_utilization_percent: measured_cpu(),
    };
    assert_eq!(round_trip(&r, &t), t);
    let j: Value = serde_json::from_str(&to_iperf3_json(&r, &t)).unwrap();
    assert_eq!(j["start"]["test_start"]["protocol"], "UDP");
    assert_eq!(j["end"]["sum_received"]["lost_percent"], 84.0 * 100.0 / 2084.0);
    assert_eq!(j["end"]["streams"][0]["udp"]["jitter_ms"], 0.25);
}
