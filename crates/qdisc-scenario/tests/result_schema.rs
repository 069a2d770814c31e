//! RunResult: JSON round trip, the checked-in schema is the generated one, and results
//! (a sample here; real host runs in qdisc-kernel's tests) conform to it.

use std::collections::BTreeMap;

use qdisc_scenario::result::*;
use qdisc_scenario::schema;
use serde_json::{json, Value};

const SCHEMA_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/run-result.schema.json");

fn iv(start: f64, bytes: u64) -> Interval {
    Interval {
        start,
        end: start + 0.1,
        bytes,
        bits_per_second: bytes as f64 * 80.0,
        retransmits: Some(0),
        tcp_rtt_us: Some(120),
        snd_cwnd: Some(14480),
        packets: None,
    }
}

fn summary(bytes: u64) -> Summary {
    Summary {
        seconds: 1.0,
        bytes,
        bits_per_second: bytes as f64 * 8.0,
        retransmits: Some(2),
        packets: None,
        lost_packets: None,
        jitter_ms: None,
    }
}

pub fn sample() -> RunResult {
    let t = TrafficResult {
        traffic: 0,
        kind: "tcp".into(),
        from: "client".into(),
        to: "server".into(),
        dst: "10.1.0.2".into(),
        start_s: 0.0,
        flows: 1,
        cc: Some("cubic".into()),
        tcp_mss: Some(1448),
        streams: vec![StreamResult {
            id: 5,
            intervals: vec![iv(0.0, 1000), iv(0.1, 2000)],
            sender: summary(3000),
            receiver: summary(2900),
        }],
        sum: vec![iv(0.0, 1000), iv(0.1, 2000)],
        sender: summary(3000),
        receiver: summary(2900),
        cpu_utilization_percent: Some(CpuUtilization {
            host_total: 95.8,
            host_user: 0.0,
            host_system: 95.8,
            remote_total: 53.5,
            remote_user: 2.0,
            remote_system: 51.5,
        }),
    };
    let dev = DeviceSnapshot {
        host: "client".into(),
        dev: "eth0".into(),
        qdisc: json!([{"kind": "pfifo", "handle": "10:", "bytes": 3000}]),
        class: json!([]),
        qdisc_text: Some("qdisc pfifo 10: root refcnt 2 limit 1000p\n".into()),
        class_text: Some(String::new()),
    };
    RunResult {
        format: FORMAT.into(),
        scenario: ScenarioInfo {
            name: "t".into(),
            file: "t.toml".into(),
            sha256: "00".repeat(32),
            seed: 1,
            duration_s: 1.0,
        },
        metadata: Metadata {
            backend: "host".into(),
            kernel: "6.18.0".into(),
            iproute2: "tc utility, iproute2-6.15.0".into(),
            tools: BTreeMap::from([("iperf3".to_string(), "iperf 3.12".to_string())]),
            qdisc_lab: "0.1.0".into(),
            interval_s: 0.1,
            snapshot_interval_s: 0.1,
            links: vec![LinkInfo {
                between: ["client:eth0".into(), "server:eth0".into()],
                addresses: ["10.1.0.1/24".into(), "10.1.0.2/24".into()],
                realised_by: "tbf".into(),
            }],
        },
        wallclock: Some(Wallclock {
            started_at: "2026-01-01T00:00:00.000Z".into(),
            setup_s: 0.2,
            run_s: 1.0,
            teardown_s: 0.05,
        }),
        total: RunResult::totals(std::slice::from_ref(&t), 0.1),
        throughput: vec![t],
        rtt: vec![RttResult {
            traffic: 1,
            from: "client".into(),
            to: "server".into(),
            dst: "10.1.0.2".into(),
            start_s: 0.0,
            interval_s: 0.01,
            transmitted: 2,
            received: 2,
            in_flight_at_end: 0,
            samples: vec![RttSample { seq: 1, t: 0.0, rtt_ms: 0.05 }, RttSample { seq: 2, t: 0.01, rtt_ms: 0.07 }],
            stats: RttStats::of(&[0.05, 0.07]),
        }],
        tc: TcResult {
            end: vec![dev.clone()],
            periodic: vec![TcSample {
                t: 0.0,
                devices: vec![DeviceSnapshot { qdisc_text: None, class_text: None, ..dev }],
            }]
            .into(),
        },
        cpu: vec![HostCpu {
            host: "client".into(),
            cpus: 2,
            source: "model".into(),
            profile: "default".into(),
            total: vec![
                CpuTime { cpu: 0, user: 1.5, sys: 20.25, softirq: 3.0, idle: 75.25 },
                CpuTime { cpu: 1, user: 0.0, sys: 0.0, softirq: 0.0, idle: 100.0 },
            ],
            intervals: vec![CpuInterval {
                start: 0.0,
                end: 0.1,
                cpus: vec![CpuTime { cpu: 0, user: 0.0, sys: 50.0, softirq: 0.0, idle: 50.0 }],
            }],
            locks: vec![LockStats {
                name: "eth0 tx-0 qdisc root lock".into(),
                acquisitions: 10,
                contended: 2,
                wait_s: 1e-6,
            }],
            functions: vec![FunctionShare { symbol: "udp_sendmsg".into(), seconds: 0.01, share: 61.5 }],
            rx_discards: [("eth0".to_string(), 3u64)].into_iter().collect(),
            net: NetStats {
                namespaces: vec!["consumer".into()],
                tx_dropped: [("veth0".to_string(), 5u64)].into_iter().collect(),
                backlog_dropped: 2,
                tx_queue_changes: 7,
                bql: vec![BqlQueue {
                    dev: "veth0".into(),
                    txq: 0,
                    variant: "bytes".into(),
                    samples: vec![BqlSample { t: 0.1, limit: 3028, inflight: 1514, inflight_max: 4542 }],
                }],
            },
        }],
        warnings: vec![],
    }
}

#[test]
fn checked_in_schema_is_the_generated_one() {
    let generated = RunResult::json_schema();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(SCHEMA_FILE, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(SCHEMA_FILE).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/run-result.schema.json is stale: run `UPDATE_SCHEMA=1 cargo test -p qdisc-scenario --test result_schema`"
    );
}

#[test]
fn json_round_trip_and_schema() {
    let r = sample();
    let text = serde_json::to_string_pretty(&r).unwrap();
    let back: RunResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
    let schema: Value = serde_json::from_str(&RunResult::json_schema()).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    schema::check(&schema, &v).unwrap();
    assert_eq!(v["total"][1]["bytes"], 2000);
    // The checker does catch what is wrong.
    let mut bad = v.clone();
    bad["metadata"]["extra"] = json!(1);
    assert_eq!(schema::check(&schema, &bad).unwrap_err(), "$.metadata: property \"extra\" is not allowed");
    let mut bad = v.clone();
    bad["throughput"][0]["streams"][0]["intervals"][0]["bytes"] = json!(-1);
    assert!(schema::check(&schema, &bad).unwrap_err().starts_with("$.throughput[0].streams[0].intervals[0].bytes: "));
    let mut bad = v.clone();
    bad["rtt"][0].as_object_mut().unwrap().remove("samples");
    assert_eq!(schema::check(&schema, &bad).unwrap_err(), "$.rtt[0]: missing required property \"samples\"");
    let mut bad = v;
    bad["metadata"]["links"][0]["between"] = json!(["a"]);
    assert!(schema::check(&schema, &bad).is_err());
    // Unknown fields are refused when reading too.
    assert!(serde_json::from_str::<RunResult>(&text.replacen("\"format\"", "\"extra\": 1, \"format\"", 1)).is_err());
}
