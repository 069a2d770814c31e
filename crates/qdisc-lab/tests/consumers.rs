//! Real third-party readers on our output files: flent 2.3.0 (its loader, CSV writer
//! and plotter) on `--flent` files, and the PyPI `iperf3` package's
//! `iperf3.TestResult` on `--iperf3-json` files, for the simulator and (root, real
//! iperf3) the host backend. flent has no iperf3 JSON parser (it runs iperf 2 in CSV
//! mode), so only the `iperf3` package reads those.
//!
//! The readers live in a venv that `scripts/consumers-venv.sh` creates once under
//! ~/.cache/qdisc-lab (pinned versions from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;

use qdisc_scenario::RunResult;
use serde_json::Value;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn venv() -> PathBuf {
    let out = Command::new(format!("{ROOT}/scripts/consumers-venv.sh")).output().expect("runs consumers-venv.sh");
    assert!(out.status.success(), "consumers-venv.sh: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qdisc-lab-consumers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run a command; its stdout, or a panic with its stderr.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?}: {}\n{err}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

fn qdisc_lab(args: &[&str]) -> String {
    run(Command::new(env!("CARGO_BIN_EXE_qdisc-lab")).args(args))
}

fn read_result(p: &Path) -> RunResult {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// flent's CSV (`flent -i FILE -f csv`) of test `name`: the header and the rows, empty
/// cells as None (flent logs "Starting Flent …" to stdout first).
fn flent_csv(venv: &Path, file: &Path, name: &str) -> (Vec<String>, Vec<Vec<Option<f64>>>) {
    let csv = run(Command::new(venv.join("bin/flent")).arg("-i").arg(file).args(["-f", "csv"]));
    let mut lines = csv.lines().skip_while(|l| !l.starts_with(&format!("{name},")));
    let header: Vec<String> = lines.next().expect("a header").split(',').map(|s| s.to_string()).collect();
    let rows =
        lines.map(|l| l.split(',').map(|c| (!c.is_empty()).then(|| c.parse::<f64>().unwrap())).collect()).collect();
    (header, rows)
}

/// flent's own `TimeseriesAggregator` fed the raw values of our file: prints whether it
/// gives the x values and results we wrote (differences on stderr).
const REAGGREGATE: &str = r#"
# flent's own TimeseriesAggregator over the raw values of our file: must give the
# x values and results we wrote.
import gzip, json, sys, types
from flent import aggregators, resultset
d = json.load(gzip.open(sys.argv[1], "rt"))
m = d["metadata"]
settings = types.SimpleNamespace(STEP_SIZE=m["STEP_SIZE"], TOTAL_LENGTH=m["TOTAL_LENGTH"])
agg = aggregators.TimeseriesAggregator(settings)
measurements = {k: [[r["t"], r["val"]] for r in v] for k, v in d["raw_values"].items()}
agg.collect = lambda: (measurements, {"series": {}, "test_parameters": {}}, d["raw_values"])
res = resultset.ResultSet(NAME=m["NAME"], TEST_PARAMETERS={})
res = agg.aggregate(res)
out = {"x_values": res.x_values, "results": {k: res.series(k) for k in d["results"]}}
print(json.dumps(out == {"x_values": d["x_values"], "results": d["results"]}))
if out["x_values"] != d["x_values"]:
    print("x differ", len(out["x_values"]), len(d["x_values"]), file=sys.stderr)
for k in d["results"]:
    if out["results"][k] != d["results"][k]:
        bad = [(i, a, b) for i, (a, b) in enumerate(zip(out["results"][k], d["results"][k])) if a != b]
        print(k, bad[:5], file=sys.stderr)
"#;

/// flent loads our file, its CSV holds our x values and every series' values exactly
/// (and the sum flent computes itself is the sum of ours), and it draws the plots of
/// the test we named.
fn check_flent(venv: &Path, dir: &Path, file: &Path, r: &RunResult, plots: &[&str]) {
    let ours: Value = serde_json::from_str(&qdisc_scenario::flent::to_flent_json(r).unwrap()).unwrap();
    let name = ours["metadata"]["NAME"].as_str().unwrap();
    let (header, rows) = flent_csv(venv, file, name);
    assert_eq!(header[0], name);
    let x: Vec<f64> = ours["x_values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(rows.len(), x.len());
    assert!(x.len() > 10, "{} steps", x.len());
    for (row, x) in rows.iter().zip(&x) {
        assert_eq!(row[0], Some(*x));
    }
    let results = ours["results"].as_object().unwrap();
    let mut checked = 0;
    for (col, series) in header.iter().enumerate().skip(1) {
        let Some(values) = results.get(series) else { continue };
        let values: Vec<Option<f64>> = values.as_array().unwrap().iter().map(Value::as_f64).collect();
        let csv: Vec<Option<f64>> = rows.iter().map(|r| r[col]).collect();
        assert_eq!(csv, values, "{series}");
        assert!(values.iter().filter(|v| v.is_some()).count() > x.len() / 2, "{series} is mostly empty");
        checked += 1;
    }
    assert_eq!(checked, results.len(), "{header:?} lacks some of {:?}", results.keys());
    // The sum flent computes (its `sum` runner) from our streams: 0 stream values → no sum.
    for dir_ in ["upload", "download"] {
        let Some(col) = header.iter().position(|h| h == &format!("TCP {dir_} sum")) else { continue };
        let streams: Vec<usize> = (1..header.len())
            .filter(|&c| header[c].starts_with(&format!("TCP {dir_}")) && header[c].contains("::"))
            .collect();
        assert!(!streams.is_empty());
        for row in &rows {
            let vals: Vec<f64> = streams.iter().filter_map(|&c| row[c]).collect();
            match row[col] {
                Some(sum) => assert!((sum - vals.iter().sum::<f64>()).abs() < 1e-9 * sum.max(1.0), "{row:?}"),
                None => assert!(vals.is_empty(), "{row:?}"),
            }
        }
    }
    // Our results are what flent's aggregation makes of our raw values.
    let out = run(Command::new(venv.join("bin/python")).args(["-c", REAGGREGATE]).arg(file));
    assert_eq!(out, "true\n", "flent aggregates our raw values differently");
    for p in plots {
        let png = dir.join(format!("{name}-{p}.png"));
        let out =
            Command::new(venv.join("bin/flent")).arg("-i").arg(file).args(["-p", p, "-o"]).arg(&png).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !err.contains("ERROR"), "flent -p {p}: {err}");
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}\n{err}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{}: {} bytes", png.display(), bytes.len());
    }
}

/// The bundled bufferbloat scenario in the simulator: 4 tcp uploads and a ping, flent's
/// `tcp_nup`; `run --flent` and `flent RESULT.json` give the same bytes.
#[test]
fn flent_reads_and_plots_a_simulated_run() {
    let venv = venv();
    let dir = tmp("flent-sim");
    let (json, file, again) = (dir.join("r.json"), dir.join("run.flent.gz"), dir.join("again.flent.gz"));
    let scenario = format!("{ROOT}/scenarios/bufferbloat-fq_codel.toml");
    qdisc_lab(&["run", &scenario, "--json", json.to_str().unwrap(), "--flent", file.to_str().unwrap()]);
    qdisc_lab(&["flent", json.to_str().unwrap(), "--out", again.to_str().unwrap()]);
    let r = read_result(&json);
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes, std::fs::read(&again).unwrap());
    assert_eq!(bytes, qdisc_scenario::flent::to_flent_gz(&r).unwrap());
    check_flent(&venv, &dir, &file, &r, &["totals", "ping_cdf", "upload"]);
    // Deterministic: a second run of the same scenario and seed gives the same file.
    let second = dir.join("second.flent.gz");
    qdisc_lab(&["run", &scenario, "--flent", second.to_str().unwrap()]);
    assert_eq!(bytes, std::fs::read(&second).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Uploads, a download, udp and a ping between two hosts: flent's `rrul_be_nflows`
/// (the udp entry is left out and named in NOTE) and both iperf3 shapes.
const MIXED: &str = r#"
name = "consumers: tcp both ways, udp, ping"
duration = "2s"
seed = 3

[[host]]
name = "client"

[[host]]
name = "server"

[[link]]
between = ["client:eth0", "server:eth0"]
rate = "100mbit"

[[traffic]]
kind = "tcp"
from = "client"
to = "server"
flows = 2
cc = "cubic"

[[traffic]]
kind = "tcp"
from = "server"
to = "client"
cc = "cubic"

[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "5mbit"
size = "1200"

[[traffic]]
kind = "ping"
from = "client"
to = "server"
interval = "20ms"
"#;

/// What `iperf3.TestResult` (PyPI `iperf3`) reads from each of our files, as JSON.
fn iperf3_package(venv: &Path, files: &[PathBuf]) -> Vec<Value> {
    const READ: &str = r#"
import json, sys, iperf3
out = []
for f in sys.argv[1:]:
    r = iperf3.TestResult(open(f).read())
    keys = ["error", "time", "timesecs", "system_info", "version", "local_host", "local_port",
            "remote_host", "remote_port", "protocol", "num_streams", "blksize", "omit",
            "duration", "local_cpu_total", "local_cpu_user", "local_cpu_system",
            "remote_cpu_total", "remote_cpu_user", "remote_cpu_system"]
    if r.protocol == "TCP":
        keys += ["tcp_mss_default", "sent_bytes", "sent_bps", "received_bytes", "received_bps",
                 "retransmits"]
    else:
        keys += ["bytes", "bps", "jitter_ms", "packets", "lost_packets", "lost_percent", "seconds"]
    out.append({k: getattr(r, k) for k in keys})
print(json.dumps(out))
"#;
    let out = run(Command::new(venv.join("bin/python")).args(["-c", READ]).args(files));
    serde_json::from_str(&out).unwrap()
}

/// Run MIXED on `backend` with every output; check what flent and the `iperf3` package
/// read.
fn mixed_run(backend: &str) {
    let venv = venv();
    let dir = tmp(&format!("mixed-{backend}"));
    let scenario = dir.join("mixed.toml");
    std::fs::write(&scenario, MIXED).unwrap();
    let (json, file, iperf) = (dir.join("r.json"), dir.join("run.flent.gz"), dir.join("iperf3"));
    qdisc_lab(&[
        "run",
        "--backend",
        backend,
        scenario.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--flent",
        file.to_str().unwrap(),
        "--iperf3-json",
        iperf.to_str().unwrap(),
    ]);
    let r = read_result(&json);
    let ours: Value = serde_json::from_str(&qdisc_scenario::flent::to_flent_json(&r).unwrap()).unwrap();
    assert_eq!(ours["metadata"]["NAME"], "rrul_be_nflows");
    assert_eq!(
        ours["metadata"]["TEST_PARAMETERS"],
        serde_json::json!({"upload_streams": "2", "download_streams": "1"})
    );
    assert!(ours["metadata"]["NOTE"].as_str().unwrap().contains("traffic[2] (udp client -> server)"));
    check_flent(&venv, &dir, &file, &r, &["all_scaled", "ping_cdf"]);

    let files: Vec<PathBuf> = r.throughput.iter().map(|t| iperf.join(format!("traffic-{}.json", t.traffic))).collect();
    let read = iperf3_package(&venv, &files);
    for (t, got) in r.throughput.iter().zip(&read) {
        let what = format!("traffic[{}] {got}", t.traffic);
        assert_eq!(got["error"], Value::Null, "{what}");
        assert_eq!(got["remote_host"], t.dst.as_str(), "{what}");
        assert_eq!(got["num_streams"], t.streams.len(), "{what}");
        assert_eq!(got["duration"], 2, "{what}");
        assert!(got["time"].as_str().unwrap().ends_with(" GMT"), "{what}");
        let cpu = |host: &str| -> f64 {
            r.cpu.iter().filter(|c| c.host == host).flat_map(|c| &c.total).map(|x| x.user + x.sys + x.softirq).sum()
        };
        // iperf3's own figures (host), else the CPU model's (sim).
        match &t.cpu_utilization_percent {
            Some(c) => {
                assert_eq!(backend, "host");
                assert!(c.host_total > 0.0 && c.remote_total > 0.0, "{what}");
                assert_eq!(got["local_cpu_total"].as_f64().unwrap(), c.host_total, "{what}");
                assert_eq!(got["remote_cpu_system"].as_f64().unwrap(), c.remote_system, "{what}");
            }
            None => {
                assert_eq!(backend, "sim");
                assert!(cpu(&t.from) > 0.0 && cpu(&t.to) > 0.0, "{what}");
                assert_eq!(got["local_cpu_total"].as_f64().unwrap(), cpu(&t.from), "{what}");
                assert_eq!(got["remote_cpu_total"].as_f64().unwrap(), cpu(&t.to), "{what}");
            }
        }
        if t.kind == "tcp" {
            assert_eq!(got["protocol"], "TCP");
            assert_eq!(got["sent_bytes"], t.sender.bytes, "{what}");
            assert_eq!(got["sent_bps"].as_f64().unwrap(), t.sender.bits_per_second, "{what}");
            assert_eq!(got["received_bytes"], t.receiver.bytes, "{what}");
            assert_eq!(got["received_bps"].as_f64().unwrap(), t.receiver.bits_per_second, "{what}");
            assert_eq!(got["retransmits"], t.sender.retransmits.unwrap(), "{what}");
            assert_eq!(got["tcp_mss_default"], t.tcp_mss.unwrap(), "{what}");
        } else {
            assert_eq!(got["protocol"], "UDP");
            assert_eq!(got["bytes"], t.sender.bytes, "{what}");
            assert_eq!(got["packets"], t.sender.packets.unwrap(), "{what}");
            assert_eq!(got["lost_packets"], t.receiver.lost_packets.unwrap(), "{what}");
            assert_eq!(got["jitter_ms"].as_f64().unwrap(), t.receiver.jitter_ms.unwrap(), "{what}");
            assert_eq!(got["blksize"], 1200, "{what}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flent_and_the_iperf3_package_read_a_simulated_mixed_run() {
    mixed_run("sim");
}

/// The host backend: root, network namespaces, real iperf3 and ping (what
/// scripts/test.sh installs).
#[test]
fn flent_and_the_iperf3_package_read_a_host_run() {
    if std::env::var_os("QDISC_LAB_NO_KERNEL").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_KERNEL is set (needs root and network namespaces)");
        return;
    }
    if euid() != 0 {
        eprintln!("skipped: the host backend needs root");
        return;
    }
    mixed_run("host");
}

/// The effective user id, from /proc (no libc in this test).
fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}
