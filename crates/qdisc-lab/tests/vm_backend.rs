//! The VM backend end to end: Debian 13's kernel booted under qemu, the scenario run
//! inside by this crate's own `qdisc-lab` binary (the guest's init).
//!
//! A cold cache downloads the kernel and the guest's Debian packages and builds the
//! initramfs first (a minute or two); warm, each run costs the scenario's duration plus
//! a few seconds of boot. `scripts/test.sh` installs qemu and the tools the image build
//! needs. QDISC_LAB_NO_VM=1 skips these tests. They run one at a time: two VMs on a
//! 2-CPU machine would disturb each other's timing.

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use qdisc_kernel::proc::live_children;
use qdisc_kernel::vm::{KernelChoice, VmBackend};
use qdisc_scenario::{Backend, NoProgress, Progress, RunError, RunOptions, RunResult, Scenario};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");

static SERIAL: Mutex<()> = Mutex::new(());

fn skip() -> bool {
    if std::env::var_os("QDISC_LAB_NO_VM").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_VM is set");
        return true;
    }
    false
}

/// 3 s of one TCP flow and a ping every 20 ms, fq_codel on the client, 10 ms each way.
const SMOKE: &str = r#"name = "vm smoke: fq_codel on the client, 10 ms each way"
duration = "3s"
seed = 1

[[host]]
name = "client"
[[host]]
name = "server"

[[link]]
between = ["client:eth0", "server:eth0"]
delay = "10ms"

[tc.client]
script = """
qdisc add dev eth0 root fq_codel
"""

[[traffic]]
kind = "tcp"
from = "client"
to = "server"

[[traffic]]
kind = "ping"
from = "client"
to = "server"
interval = "20ms"
"#;

fn backend() -> VmBackend {
    VmBackend::new(KernelChoice::parse("6.12").unwrap(), BIN.into())
}

/// qemu processes whose command line names a run directory of process `pid`.
fn qemus_of(pid: u32) -> Vec<String> {
    let needle = format!("/qdl-{pid}-vm");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("qemu-system") && c.contains(&needle))
        .collect()
}

fn run_dirs_of(pid: u32) -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("qdl-{pid}-vm")))
        .collect()
}

fn assert_clean(pid: u32) {
    assert_eq!(qemus_of(pid), Vec::<String>::new(), "qemu left running");
    assert_eq!(run_dirs_of(pid), Vec::<String>::new(), "run directories left behind");
}

/// The whole path a user takes: `qdisc-lab run --backend vm --json FILE`.
#[test]
fn fq_codel_over_a_10ms_link_on_debian_13() {
    if skip() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("qdl-vm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (scenario, json) = (dir.join("vm-smoke.toml"), dir.join("result.json"));
    std::fs::write(&scenario, SMOKE).unwrap();
    let t = Instant::now();
    let child = Command::new(BIN)
        .args(["run", "--backend", "vm", "--kernel", "6.12", "--json"])
        .arg(&json)
        .arg(&scenario)
        .env("QDL_VM_TIMING", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let child = child.wait_with_output().unwrap();
    let wall = t.elapsed();
    let (stdout, stderr) = (String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    eprintln!("{stderr}");
    assert!(child.status.success(), "qdisc-lab run --backend vm failed ({}):\n{stderr}\n{stdout}", child.status);
    let text = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let r: RunResult = serde_json::from_str(&text).unwrap();
    let schema: Value = serde_json::from_str(&RunResult::json_schema()).unwrap();
    qdisc_scenario::schema::check(&schema, &serde_json::from_str(&text).unwrap()).unwrap();

    assert_eq!(r.metadata.backend, "vm");
    assert!(r.metadata.kernel.starts_with("6.12"), "kernel {}", r.metadata.kernel);
    assert!(r.metadata.iproute2.contains("iproute2-"), "{}", r.metadata.iproute2);
    assert!(r.metadata.tools["kernel-package"].starts_with("linux-image-6.12"), "{:?}", r.metadata.tools);
    assert!(stdout.contains("backend vm, kernel 6.12"), "{stdout}");

    // fq_codel on the client carried the traffic.
    let client = r.tc.end.iter().find(|d| d.host == "client" && d.dev == "eth0").expect("client eth0");
    let fq = client.qdisc.as_array().unwrap().iter().find(|q| q["kind"] == "fq_codel").expect("an fq_codel");
    let (bytes, packets) = (fq["bytes"].as_u64().unwrap(), fq["packets"].as_u64().unwrap());
    assert!(bytes > 1_000_000 && packets > 1000, "fq_codel Sent {bytes} bytes {packets} pkt");
    assert!(client.qdisc_text.as_deref().unwrap().starts_with("qdisc fq_codel "), "{:?}", client.qdisc_text);
    let t = &r.throughput[0];
    assert!(t.receiver.bytes > 0 && t.sum.len() >= 25, "tcp: {} bytes, {} intervals", t.receiver.bytes, t.sum.len());

    // RTT: two crossings of the 10 ms wire, plus what an emulated CPU adds.
    let ping = &r.rtt[0];
    let st = ping.stats.as_ref().expect("ping replies");
    assert!(ping.received >= 50, "{} replies to a ping every 20 ms for 3 s", ping.received);
    assert!(st.min >= 20.0, "min RTT {} ms below 2 × 10 ms", st.min);
    assert!(st.p50 >= 20.0 && st.p50 < 20.0 + 25.0, "p50 RTT {} ms, want 20 ms + < 25 ms", st.p50);

    let w = r.wallclock.as_ref().unwrap();
    eprintln!(
        "vm run: wall {:.2} s for a {:.0} s scenario (overhead {:.2} s): setup incl. boot {:.2} s, traffic {:.2} s, \
         teardown {:.2} s; ping p50 {:.1} ms; fq_codel Sent {bytes} bytes {packets} pkt",
        wall.as_secs_f64(),
        r.scenario.duration_s,
        wall.as_secs_f64() - r.scenario.duration_s,
        w.setup_s,
        w.run_s,
        w.teardown_s,
        st.p50
    );
    assert_clean(pid);
}

/// A tc line that fails inside the guest is the same error as on the host backend:
/// `RunError::TcScript` at the scenario's FILE:LINE, and the VM is gone.
#[test]
fn a_tc_script_failing_midway_in_the_guest_leaves_nothing() {
    if skip() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let text = SMOKE.replace(
        "qdisc add dev eth0 root fq_codel\n",
        "qdisc add dev eth0 root handle 1: htb default 10\nqdisc add dev eth0 parent 1:99 handle 10: fq_codel\n",
    );
    let s = Scenario::from_bytes(text.as_bytes(), "broken.toml").unwrap_or_else(|e| panic!("{e}"));
    let e = backend().run(&s, &RunOptions::default(), &mut NoProgress).unwrap_err();
    assert_clean(std::process::id());
    assert_eq!(live_children(), 0, "child processes left behind");
    assert_eq!(e.exit_code(), 1);
    let RunError::TcScript { at, host, command, stderr, .. } = &e else { panic!("{e}") };
    assert_eq!((at.as_str(), host.as_str()), ("broken.toml:17", "client"));
    assert_eq!(command, "qdisc add dev eth0 parent 1:99 handle 10: fq_codel");
    assert!(!stderr.trim().is_empty(), "tc's own message is kept");
    assert!(e
        .to_string()
        .starts_with("broken.toml:17: tc script of host \"client\" failed: tc qdisc add dev eth0 parent 1:99"));
}

/// Progress that records phases and cancels the run once the guest has booted.
struct CancelWhenBooted {
    cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
    phases: Vec<String>,
}

impl Progress for CancelWhenBooted {
    fn phase(&mut self, name: &str) {
        self.phases.push(name.to_string());
        if name == "setup" {
            self.cancel.store(true, Ordering::SeqCst);
        }
    }
}

/// Ctrl-C while the guest runs: qemu is killed at once, nothing is left.
#[test]
fn cancelling_kills_qemu_and_leaves_nothing() {
    if skip() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scenario::from_bytes(SMOKE.replace("duration = \"3s\"", "duration = \"30s\"").as_bytes(), "long.toml")
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions::default();
    let mut p = CancelWhenBooted { cancel: opts.cancel.clone(), phases: Vec::new() };
    let t = Instant::now();
    let e = backend().run(&s, &opts, &mut p).unwrap_err();
    assert_eq!(e, RunError::Interrupted, "phases: {:?}", p.phases);
    assert!(p.phases.iter().any(|x| x == "booting") && p.phases.iter().any(|x| x == "setup"), "{:?}", p.phases);
    assert!(t.elapsed() < Duration::from_secs(120), "a 30 s scenario cancelled at setup took {:?}", t.elapsed());
    assert_clean(std::process::id());
    assert_eq!(live_children(), 0);
}

/// A guest kernel that panics (here: its init cannot be found) is a failed run quoting
/// the panic from the console, and qemu is gone.
#[test]
fn a_guest_kernel_panic_is_quoted() {
    if skip() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scenario::from_bytes(SMOKE.as_bytes(), "vm-smoke.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut b = backend();
    b.kernel_args = "rdinit=/no/such/init".into();
    let t = Instant::now();
    let e = b.run(&s, &RunOptions::default(), &mut NoProgress).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(120), "took {:?}", t.elapsed());
    assert_clean(std::process::id());
    let RunError::Failed(m) = &e else { panic!("{e}") };
    assert!(m.starts_with("the guest kernel (6.12"), "{m}");
    assert!(
        m.contains(") panicked:\n") && m.contains("Kernel panic - not syncing: VFS: Unable to mount root fs"),
        "{m}"
    );
}

/// A `veth-pair` link, local traffic (to 127.0.0.1 over lo) and the receive-side and
/// interface settings in the guest: RPS masks, `ethtool -K` (the guest's ethtool),
/// `ip link set … mtu/txqueuelen`, the two new global sysctls. Any of them failing in the
/// guest fails the run; what the lab cannot do on any kernel is refused before booting.
#[test]
fn veth_pairs_local_traffic_and_settings_in_the_guest() {
    if skip() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let text = r#"duration = "2s"
[[host]]
name = "a"
cpus = 2
[[host]]
name = "b"
cpus = 2
[[link]]
between = ["a:eth0", "b:eth0"]
kind = "veth-pair"
txqueues = 2
[tc.a]
script = """
echo 1 > /sys/class/net/eth0/queues/rx-1/rps_cpus
echo 1 > /sys/class/net/lo/queues/rx-0/rps_cpus
ethtool -K eth0 tso off gro on
ethtool -K lo gso off
ip link set eth0 mtu 9000 txqueuelen 500
sysctl -w net.core.skb_defer_max=32 net.core.gro_normal_batch=4
qdisc add dev eth0 root handle 1: mq
"""
[tc.b]
script = "ip link set dev eth0 mtu 9000"
[[traffic]]
kind = "tcp"
from = "a"
to = "b"
[[traffic]]
kind = "ping"
from = "a"
to = "a"
interval = "100ms"
"#;
    let s = Scenario::from_bytes(text.as_bytes(), "pair.toml").unwrap_or_else(|e| panic!("{e}"));
    let r = backend().run(&s, &RunOptions::default(), &mut NoProgress).unwrap_or_else(|e| panic!("{e}"));
    assert_clean(std::process::id());
    let devs: Vec<(&str, &str)> = r.tc.end.iter().map(|d| (d.host.as_str(), d.dev.as_str())).collect();
    assert_eq!(devs, [("a", "eth0"), ("a", "lo"), ("b", "eth0")], "no wire ports for a veth pair");
    let a_eth0 = r.tc.end.iter().find(|d| d.host == "a" && d.dev == "eth0").unwrap();
    assert_eq!(a_eth0.qdisc.as_array().unwrap().len(), 3, "mq and one child per tx queue: {:?}", a_eth0.qdisc_text);
    assert!(r.metadata.links[0].realised_by.starts_with("one veth pair"), "{}", r.metadata.links[0].realised_by);
    assert!(r.throughput[0].receiver.bytes > 0);
    assert_eq!(r.rtt[0].dst, "127.0.0.1");
    assert!(r.rtt[0].received >= 5, "{} replies over lo", r.rtt[0].received);
    assert!(
        r.metadata.tools.get("ethtool").is_some_and(|v| v.starts_with("ethtool version")),
        "{:?}",
        r.metadata.tools
    );
    let w = r.warnings.join("\n");
    assert!(w.contains("net.core.skb_defer_max = 32 (host a, pair.toml:19) is global"), "{w}");
    assert!(w.contains("net.core.gro_normal_batch = 4 (host a, pair.toml:19) is global"), "{w}");

    // BQL on veth: no kernel to boot has it.
    let bql = text.replace("txqueues = 2\n", "txqueues = 2\nveth_bql = \"time\"\n");
    let s = Scenario::from_bytes(bql.as_bytes(), "pair.toml").unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let e = backend().run(&s, &RunOptions::default(), &mut NoProgress).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5), "refused after {:?}: it booted", t.elapsed());
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string().contains(
            "pair.toml:8: link[0] a:eth0 — b:eth0: veth_bql = \"time\": no released kernel has BQL on veth: the \
             patch series of seed 004"
        ),
        "{e}"
    );
    assert_clean(std::process::id());
}
