//! `qdisc-lab plot`, `qdisc-lab compare` and `run --plot/--iperf3-json` from the
//! command line, on checked-in results of a small scenario (tests/fixtures: two host
//! runs of small.toml, `qdisc-lab run --backend host … --json`, kernel 6.18).

use std::path::{Path, PathBuf};
use std::process::Command;

use qdisc_scenario::RunResult;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn qdisc_lab(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qdisc-lab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn read_result(p: &Path) -> RunResult {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// `qdisc-lab flent RESULT --out FILE`: the library's bytes; a missing result exits 2,
/// a run flent cannot show exits 1, both with the file in the message.
#[test]
fn flent_of_a_saved_result() {
    let dir = tmp("flent-saved");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("run.flent.gz");
    let (code, stdout, err) = qdisc_lab(&["flent", &fixture("small-host-a.json"), "--out", out.to_str().unwrap()]);
    assert_eq!((code, stdout.as_str(), err.as_str()), (0, "", ""));
    let r = read_result(Path::new(&fixture("small-host-a.json")));
    assert_eq!(std::fs::read(&out).unwrap(), qdisc_scenario::flent::to_flent_gz(&r).unwrap());

    let missing = dir.join("missing.json");
    let (code, _, err) = qdisc_lab(&["flent", missing.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(
        (code, err),
        (2, format!("qdisc-lab flent: cannot read {}: No such file or directory (os error 2)\n", missing.display()))
    );
    let mut udp_only = r.clone();
    udp_only.throughput[0].kind = "udp".into();
    udp_only.rtt.clear();
    let saved = dir.join("udp.json");
    std::fs::write(&saved, serde_json::to_string(&udp_only).unwrap()).unwrap();
    let (code, _, err) = qdisc_lab(&["flent", saved.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(
        (code, err),
        (1, format!("qdisc-lab flent: {}: no tcp or ping traffic: nothing a flent test shows\n", out.display()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plot_a_saved_result() {
    let dir = tmp("plot");
    let (code, out, err) = qdisc_lab(&["plot", &fixture("small-host-a.json"), "--out", dir.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""));
    let names: Vec<String> =
        out.lines().map(|l| Path::new(l).file_name().unwrap().to_string_lossy().into_owned()).collect();
    let mut expected = Vec::new();
    for f in [
        "throughput",
        "rtt",
        "rtt-cdf",
        "qdisc-client-eth0",
        "qdisc-server-eth0",
        "qdisc-link-0-l0a",
        "qdisc-link-0-l0b",
    ] {
        expected.push(format!("{f}.svg"));
        expected.push(format!("{f}.png"));
    }
    assert_eq!(names, expected);
    for l in out.lines() {
        assert!(std::fs::metadata(l).unwrap().len() > 1000, "{l}");
    }
    let svg = std::fs::read_to_string(dir.join("throughput.svg")).unwrap();
    for label in ["tcp client→server flow 5", "tcp client→server flow 7", "total", "throughput (Mbit/s, per 0.1 s)"]
    {
        assert!(svg.contains(label), "{label}");
    }
    let svg = std::fs::read_to_string(dir.join("qdisc-client-eth0.svg")).unwrap();
    assert!(svg.contains("bfifo 10: parent 1:10") && svg.contains("drops (packets, cumulative)"));
    std::fs::remove_dir_all(&dir).unwrap();

    let (code, _, err) = qdisc_lab(&["plot", &fixture("small.toml"), "--out", dir.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.starts_with("qdisc-lab plot: ") && err.contains("small.toml: not a qdisc-lab run result"), "{err}");
}

#[test]
fn compare_two_saved_results() {
    let (a, b) = (fixture("small-host-a.json"), fixture("small-host-b.json"));
    let json = tmp("compare").with_extension("json");
    let (code, out, err) = qdisc_lab(&["compare", "--results", &a, &b, "--json", json.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, std::fs::read_to_string(fixture("compare-small-host.txt")).unwrap());
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(j["format"], "qdisc-lab/compare/1");
    assert_eq!((j["a"].as_str(), j["b"].as_str()), (Some("host"), Some("host")));
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), out.lines().filter(|l| l.contains("  ")).count() - 1);
    assert_eq!(rows[0]["metric"], "throughput, all traffic");
    let (ra, rb) = (read_result(Path::new(&a)), read_result(Path::new(&b)));
    let rel = (rb.throughput[0].receiver.bits_per_second - ra.throughput[0].receiver.bits_per_second)
        / ra.throughput[0].receiver.bits_per_second;
    assert_eq!(rows[0]["relative_difference"].as_f64(), Some(rel));
    assert_eq!(serde_json::from_value::<RunResult>(j["results"][0].clone()).unwrap(), ra);
    assert_eq!(serde_json::from_value::<RunResult>(j["results"][1].clone()).unwrap(), rb);
}

#[test]
fn compare_usage_errors() {
    let s = fixture("small.toml");
    let cases: [(&[&str], &str); 5] = [
        (&["compare"], "give a scenario and --backends A,B, or --results A.json B.json"),
        (&["compare", &s], "give the backends to compare: --backends A,B (e.g. sim,host)"),
        (&["compare", &s, "--backends", "host"], "--backends host: give two backends, A,B (e.g. sim,host)"),
        (&["compare", &s, "--backends", "host,nope"], "unknown backend \"nope\" (known: sim, host, vm)"),
        (
            &["compare", &s, "--results", &fixture("small-host-a.json"), &fixture("small-host-b.json")],
            "either a scenario with --backends A,B, or --results A.json B.json, not both",
        ),
    ];
    for (args, msg) in cases {
        let (code, out, err) = qdisc_lab(args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (2, "", format!("qdisc-lab compare: {msg}\n").as_str()),
            "{args:?}"
        );
    }
}

/// `plot` and `compare` read a result only in the format they know
/// ("qdisc-lab/run-result/1"), and say what is wrong with anything else, file first.
#[test]
fn results_of_another_format_are_refused() {
    let dir = tmp("formats");
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(fixture("small-host-a.json")).unwrap();
    let format = r#""format":"qdisc-lab/run-result/1""#;
    assert!(good.contains(format));
    let cases = [
        (
            "v2.json",
            good.replace(format, r#""format":"qdisc-lab/run-result/2""#),
            "result format \"qdisc-lab/run-result/2\" is not one this qdisc-lab reads (it reads \"qdisc-lab/run-result/1\")",
        ),
        (
            "none.json",
            good.replace(&format!("{format},"), ""),
            "not a qdisc-lab run result: no \"format\" (\"qdisc-lab/run-result/1\")",
        ),
        (
            "other.json",
            good.replace(format, r#""format":"qdisc-lab/compare/1""#),
            "not a qdisc-lab run result: \"format\" is \"qdisc-lab/compare/1\", not \"qdisc-lab/run-result/1\"",
        ),
        (
            "number.json",
            good.replace(format, r#""format":1"#),
            "not a qdisc-lab run result: \"format\" is 1, not \"qdisc-lab/run-result/1\"",
        ),
        ("array.json", "[1, 2]".into(), "not a qdisc-lab run result: a JSON array, not an object"),
        ("string.json", "\"x\"".into(), "not a qdisc-lab run result: \"x\", not an object"),
        ("syntax.json", "{\n\"format\": }".into(), "not a qdisc-lab run result: expected value at line 2 column 11"),
        (
            "broken.json",
            good.replace(r#""seed":1,"#, r#""seed":-1,"#),
            "not a qdisc-lab run result: invalid value: integer `-1`, expected u64 at line 1 column 244",
        ),
    ];
    for (name, text, msg) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap();
        let (code, out, err) = qdisc_lab(&["plot", p, "--out", dir.join("plots").to_str().unwrap()]);
        assert_eq!((code, out.as_str(), err), (2, "", format!("qdisc-lab plot: {p}: {msg}\n")), "{name}");
        let (code, out, err) = qdisc_lab(&["compare", "--results", &fixture("small-host-a.json"), p]);
        assert_eq!((code, out.as_str(), err), (2, "", format!("qdisc-lab compare: {p}: {msg}\n")), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On the running kernel (root, network namespaces): `run --plot --iperf3-json`, and
/// `compare --backends host,host`.
#[test]
fn run_and_compare_on_the_host() {
    if std::env::var_os("QDISC_LAB_NO_KERNEL").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_KERNEL is set (needs root and network namespaces)");
        return;
    }
    let dir = tmp("run-outputs");
    std::fs::create_dir_all(&dir).unwrap();
    let (plots, iperf) = (dir.join("plots"), dir.join("iperf3"));
    let result = dir.join("result.json");
    let (code, _, err) = qdisc_lab(&[
        "run",
        "--backend",
        "host",
        &fixture("small.toml"),
        "--json",
        &format!("{}", result.display()),
        "--plot",
        plots.to_str().unwrap(),
        "--iperf3-json",
        iperf.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(plots.join("throughput.png").exists() && plots.join("qdisc-client-eth0.svg").exists());
    let files: Vec<String> =
        std::fs::read_dir(&iperf).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(files, ["traffic-0.json"]);
    let r = read_result(&result);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(iperf.join("traffic-0.json")).unwrap()).unwrap();
    assert_eq!(j["end"]["sum_sent"]["bytes"], r.throughput[0].sender.bytes);
    assert_eq!(j["start"]["test_start"]["num_streams"], 2);

    let json = dir.join("compare.json");
    let (code, out, err) =
        qdisc_lab(&["compare", &fixture("small.toml"), "--backends", "host,host", "--json", json.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("qdisc-lab compare: A: running on host\n")
            && err.contains("qdisc-lab compare: B: running on host\n")
    );
    assert!(out.contains("\nmetric ") && out.contains("client/eth0 qdisc bfifo 10: drops"), "{out}");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["results"].as_array().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CPU figures of one host, as the simulator's model gives them: `cpus` CPUs, three
/// intervals of 0.1 s, cpu c busy 10·(c+1) %.
fn model_cpu(host: &str, cpus: u32) -> qdisc_scenario::result::HostCpu {
    use qdisc_scenario::result::{CpuInterval, CpuTime, FunctionShare, HostCpu, LockStats};
    let split = |c: u32| {
        let busy = 10.0 * (c + 1) as f64;
        CpuTime { cpu: c, user: 0.0, sys: 0.0, softirq: busy, idle: 100.0 - busy }
    };
    HostCpu {
        host: host.into(),
        cpus,
        source: "model".into(),
        profile: "default".into(),
        total: (0..cpus).map(split).collect(),
        intervals: (0..3)
            .map(|k| CpuInterval {
                start: k as f64 * 0.1,
                end: (k + 1) as f64 * 0.1,
                cpus: (0..cpus).map(split).collect(),
            })
            .collect(),
        locks: vec![LockStats {
            name: "eth0 tx-0 qdisc root lock".into(),
            acquisitions: 400,
            contended: 100,
            wait_s: 0.25,
        }],
        functions: vec![FunctionShare { symbol: "htb_dequeue".into(), seconds: 0.01, share: 55.5 }],
        rx_discards: [("eth0".to_string(), 7)].into(),
        net: Default::default(),
    }
}

/// A saved result with CPU figures: the plot of its host, and compare's CPU table
/// against a result without any.
#[test]
fn cpu_figures_of_a_saved_result() {
    let dir = tmp("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = read_result(Path::new(&fixture("small-host-a.json")));
    r.metadata.backend = "sim".into();
    r.cpu = vec![model_cpu("client", 2)];
    let saved = dir.join("with-cpu.json");
    std::fs::write(&saved, serde_json::to_string(&r).unwrap()).unwrap();

    let plots = dir.join("plots");
    let (code, out, err) = qdisc_lab(&["plot", saved.to_str().unwrap(), "--out", plots.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""));
    let names: Vec<String> =
        out.lines().map(|l| Path::new(l).file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names[names.len() - 2..], ["cpu-client.svg", "cpu-client.png"]);
    let svg = std::fs::read_to_string(plots.join("cpu-client.svg")).unwrap();
    for text in ["CPU of client (model, sim backend)", "not a measurement", "cpu 0", "cpu 1", "busy % per cpu (model)"]
    {
        assert!(svg.contains(text), "{text}");
    }

    let json = dir.join("compare.json");
    let (code, out, err) = qdisc_lab(&[
        "compare",
        "--results",
        saved.to_str().unwrap(),
        &fixture("small-host-b.json"),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    // The table of compare-small-host.txt with A now a sim result, then the CPU table.
    let main = std::fs::read_to_string(fixture("compare-small-host.txt"))
        .unwrap()
        .replace("A: backend host", "A: backend sim")
        .replace("A: host", "    sim")
        .replace("B: host", "   host");
    let cpu = "\ncpu: A (sim): the simulator's CPU model (profile default), not a measurement; \
               B (host): not measured by backend host\n\
               metric                                               sim          host  (B−A)/A\n\
               client busy, mean of 2 cpus                       15.00%  not measured      n/a\n\
               client lock eth0 tx-0 qdisc root lock contended   25.00%  not measured      n/a\n\
               client lock eth0 tx-0 qdisc root lock wait       0.250 s  not measured      n/a\n\
               client perf top htb_dequeue                       55.50%  not measured      n/a\n";
    assert_eq!(out, main + cpu);
    // --json: the CPU rows after the others, B's values null (not 0).
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), out.lines().filter(|l| l.contains("  ")).count() - 2);
    let busy = &rows[rows.len() - 4];
    assert_eq!(busy["metric"], "client busy, mean of 2 cpus");
    assert_eq!((busy["unit"].as_str(), busy["a"].as_f64(), busy["b"].is_null()), (Some("percent"), Some(15.0), true));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// In the simulator: `run` prints a CPU block per host, saying the figures are a
/// model, and `--plot` draws each host's CPU.
#[test]
fn run_in_the_simulator_reports_and_plots_cpu() {
    let dir = tmp("sim-cpu");
    let plots = dir.join("plots");
    let (code, out, err) =
        qdisc_lab(&["run", "scenarios/bufferbloat-fq_codel.toml", "--plot", plots.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("\nCPU figures marked \"model\" come from the simulator's CPU model, not a measurement.\n"),
        "{out}"
    );
    for host in ["client", "server"] {
        assert!(out.contains(&format!("\ncpu {host} (4 cpus, model, profile default): busy ")), "{out}");
        let svg = std::fs::read_to_string(plots.join(format!("cpu-{host}.svg"))).unwrap();
        assert!(svg.contains(&format!("CPU of {host} (model, sim backend)")) && svg.contains("not a measurement"));
        assert!(plots.join(format!("cpu-{host}.png")).exists());
    }
    assert!(out.contains("\n  perf top (model): "), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
