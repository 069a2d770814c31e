//! `qdisc-lab run`: exit statuses and messages of what cannot run (the host backend's
//! end-to-end runs are tested in crates/qdisc-kernel/tests/host_backend.rs).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");
const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).arg("run").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn kernel_choices_are_checked_before_anything_runs() {
    let scenario = format!("{SCENARIOS}/netem-20ms.toml");
    let (code, out, err) = run(&["--backend", "vm", "--kernel", "6.13", &scenario]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "qdisc-lab run: --kernel \"6.13\": use 6.12 (Debian 13), 6.1 (Debian 12), a package name like \
         linux-image-6.12.57+deb13-amd64, or a .deb file\n"
    );
    let (code, _, err) = run(&["--backend", "host", "--kernel", "6.12", &scenario]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "qdisc-lab run: --kernel chooses the kernel of --backend vm or sim (the host backend runs this machine's)\n"
    );
    let (code, _, err) = run(&["--backend", "sim", "--kernel", "6.1", &scenario]);
    assert_eq!(code, 2);
    assert_eq!(err, "qdisc-lab run: the simulator models kernels 6.12 (the default) and 6.18, not \"6.1\"\n");
}

#[test]
fn an_invalid_scenario_is_named_precisely() {
    let dir = std::env::temp_dir().join(format!("qdl-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "duration = \"10s\"\n[[host]]\nname = \"a\"\n[[traffic]]\nkind = \"tcp\"\nfrom = \"a\"\nto = \"z\"\n",
    )
    .unwrap();
    let (code, _, err) = run(&[f.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, 2);
    assert_eq!(err, format!("qdisc-lab run: {}:7:6: traffic[0].to: unknown host \"z\" (hosts: a)\n", f.display()));
}

#[test]
fn the_host_backend_refuses_fq_on_a_kernel_without_it() {
    if std::env::var_os("QDISC_LAB_NO_KERNEL").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_KERNEL is set");
        return;
    }
    let (code, out, err) = run(&["--backend", "host", "../../scenarios/fq-flows-plimit.toml"]);
    if code == 0 {
        eprintln!("this kernel has sch_fq: nothing to check");
        return;
    }
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.starts_with("qdisc-lab run: the running kernel ("), "{err}");
    assert!(err.contains("no sch_fq, needed by:\n    ../../scenarios/fq-flows-plimit.toml:24: tc.sender: qdisc add dev eth0 root handle 1: fq maxrate 20mbit flow_limit 10\n"), "{err}");
    assert!(err.ends_with("Run it on a kernel that has them: --backend vm (a Debian kernel under qemu).\n"), "{err}");
}

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// `qdisc-lab ARGS` with stdout to `stdout`; (status, stderr).
fn with_stdout(args: &[&str], stdout: std::process::Stdio) -> (std::process::ExitStatus, String) {
    let out = Command::new(BIN).args(args).current_dir(REPO).stdout(stdout).output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into())
}

/// A pipe whose reading end is already closed (`| head` that has exited).
fn closed_pipe() -> std::process::Stdio {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer.into()
}

/// stdout on a full disk: one line saying so, exit status 1, never a panic (it was
/// "failed printing to stdout", exit status 101); the other outputs are still written.
#[test]
fn a_full_stdout_is_one_error_line_and_status_1() {
    let dir = std::env::temp_dir().join(format!("qdl-cli-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let a = format!("{REPO}/crates/qdisc-lab/tests/fixtures/small-host-a.json");
    let b = format!("{REPO}/crates/qdisc-lab/tests/fixtures/small-host-b.json");
    let cases: [(&[&str], &str); 4] = [
        (
            &["run", "scenarios/bufferbloat-fq_codel.toml", "--json", json.to_str().unwrap()],
            "qdisc-lab run: writing the report",
        ),
        (&["tc", "qdisc", "show"], "qdisc-lab tc: writing the output"),
        (&["compare", "--results", &a, &b], "qdisc-lab compare: writing the table"),
        (
            &["replay", "--rate", "10mbit", "--flow", "5mbit", "--duration", "1s"],
            "qdisc-lab replay: writing the report",
        ),
    ];
    for (args, what) in cases {
        let full = std::fs::File::options().write(true).open("/dev/full").unwrap();
        let (status, err) = with_stdout(args, full.into());
        assert_eq!(status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err, format!("{what}: No space left on device (os error 28)\n"), "{args:?}");
    }
    assert!(std::fs::metadata(&json).unwrap().len() > 1000, "--json is written all the same");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `qdisc-lab run … | head -1`: the reader has gone, so the process ends as `cat` does
/// (killed by SIGPIPE: a shell says 141), quietly, after writing its files.
#[test]
fn a_closed_stdout_ends_quietly_as_sigpipe() {
    use std::os::unix::process::ExitStatusExt;
    let dir = std::env::temp_dir().join(format!("qdl-cli-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let a = format!("{REPO}/crates/qdisc-lab/tests/fixtures/small-host-a.json");
    let b = format!("{REPO}/crates/qdisc-lab/tests/fixtures/small-host-b.json");
    let cases: [&[&str]; 4] = [
        &["run", "scenarios/bufferbloat-fq_codel.toml", "--json", json.to_str().unwrap()],
        &["tc", "qdisc", "show"],
        &["compare", "--results", &a, &b],
        &["replay", "--rate", "10mbit", "--flow", "5mbit", "--duration", "1s"],
    ];
    for args in cases {
        let (status, err) = with_stdout(args, closed_pipe());
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!((status.signal(), err.as_str()), (Some(libc::SIGPIPE), ""), "{args:?}: {status:?}");
    }
    assert!(std::fs::metadata(&json).unwrap().len() > 1000, "--json is written all the same");

    // A reader that takes one line and goes (the report is smaller than a pipe's
    // buffer, so the write may well succeed): whatever happens, no panic.
    let mut child = Command::new(BIN)
        .args(["run", "scenarios/bufferbloat-fq_codel.toml"])
        .current_dir(REPO)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
    assert!(first.starts_with("qdisc-lab run: "), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success() || out.status.signal() == Some(libc::SIGPIPE), "{:?}", out.status);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The children of `pid` (from /proc/*/stat): (pid, command name).
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // "PID (COMM) STATE PPID …"; COMM may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let ppid = stat[close + 1..].split_whitespace().nth(1).and_then(|x| x.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push((p, stat[open + 1..close].to_string()));
        }
    }
    out
}

/// Whether `pid` is still an iperf3 or ping (not reaped, or reaped and reused).
fn still_a_tool(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    matches!(comm.trim(), "iperf3" | "ping")
}

/// SIGTERM (as `kill`, systemd or `timeout` send it) mid-run stops a host run as
/// Ctrl-C does: teardown in order, exit status 128 + 15, no namespace `qdl-<pid>-*`,
/// no iperf3 or ping, no scratch directory left. (Before, the default action killed
/// the process and left all of them.)
#[test]
fn sigterm_mid_run_tears_the_kernel_lab_down() {
    use std::time::{Duration, Instant};
    if std::env::var_os("QDISC_LAB_NO_KERNEL").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_KERNEL is set (needs root, iperf3 and ping)");
        return;
    }
    let mut child = Command::new(BIN)
        .args(["run", "--backend", "host", "scenarios/bufferbloat-pfifo.toml"])
        .current_dir(REPO)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Until its traffic runs (iperf3 server and client, ping), at least 2 s.
    let t = Instant::now();
    let mut tools = Vec::new();
    while t.elapsed() < Duration::from_secs(8) {
        tools = children_of(pid).into_iter().filter(|(_, c)| c == "iperf3" || c == "ping").collect();
        if tools.len() >= 3 && t.elapsed() >= Duration::from_secs(2) {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!("the run ended by itself ({st}): {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ours = |n: &String| n.starts_with(&format!("qdl-{pid}-"));
    let namespaces = || -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    assert!(tools.len() >= 3, "iperf3 -s, iperf3 -c and ping not all running: {tools:?}");
    assert!(namespaces().iter().any(ours), "no namespace qdl-{pid}-*: {:?}", namespaces());

    // SAFETY: kill(2) on the child we started and have not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("still running 5 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}: {err}");
    assert_eq!(err, "qdisc-lab run: interrupted (SIGTERM)\n");
    assert_eq!(out.stdout, b"");
    let left: Vec<String> = namespaces().into_iter().filter(ours).collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    let alive: Vec<&(u32, String)> = tools.iter().filter(|(p, _)| still_a_tool(*p)).collect();
    assert!(alive.is_empty(), "children left behind: {alive:?}");
    let scratch: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(ours)
        .collect();
    assert!(scratch.is_empty(), "scratch directories left behind: {scratch:?}");
}

#[test]
fn set_overrides_the_scenario_and_names_a_bad_value() {
    let scenario = format!("{SCENARIOS}/bufferbloat-fq_codel.toml");
    let (code, out, err) = run(&["--set", "link[0].rate=fast", &scenario]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        format!(
            "qdisc-lab run: override link[0].rate=\"fast\": {scenario}:21:8: link[0].rate: invalid rate \"fast\" \
             (tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\")\n"
        )
    );
    let (code, _, err) = run(&["--set", "link[1].rate=1mbit", &scenario]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "qdisc-lab run: override link[1].rate=\"1mbit\": link[1].rate: index 1 out of range: the scenario has 1 \
         link entries (link[0]..link[0])\n"
    );
    // Applied: a 1 s run at seed 7, its result says so.
    let dir = std::env::temp_dir().join(format!("qdl-set-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let (code, _, err) = run(&["--set", "duration=1s", "--set", "seed=7", "--json", json.to_str().unwrap(), &scenario]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(r["scenario"]["duration_s"], 1.0);
    assert_eq!(r["scenario"]["seed"], 7);
}
