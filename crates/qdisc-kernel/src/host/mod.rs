//! The host backend: a scenario on the running kernel, in network namespaces.
//!
//! 1. **Preflight** (changes nothing that outlives it): root, tools (`ip`, tc, iperf3,
//!    ping, ethtool for `ethtool -K` lines), whole-second iperf3 durations, what the lab
//!    cannot do on any kernel ([`settings::unsupported`]: `veth_bql`, `ethtool -C`/`-G`,
//!    pktgen, `net_cls_classid`),
//!    and what the kernel must have — every qdisc
//!    kind the tc scripts add and the links need (netem for delay/loss, tbf for a rate)
//!    is tried in a scratch namespace; a missing one, or a missing congestion control,
//!    is [`RunError::Unsupported`] naming `--backend vm`.
//! 2. **Setup**: namespaces, veths, the wire (see [`lab`]), the user's tc scripts with
//!    the real tc, one `iperf3 -s` per tcp/udp entry in the receiver's namespace.
//! 3. **Traffic**: `iperf3 -c … -J -i 0.1` and `ping` started at their `start`; a
//!    thread takes `tc -s -j` snapshots of every device every 100 ms.
//! 4. **End**: a final snapshot (JSON and text), teardown, the [`RunResult`].
//!
//! Teardown is by drop: children ([`crate::proc::Proc`]) are killed and reaped, then
//! the namespaces deleted ([`lab::Lab`]), on success, error, panic or cancellation.
//!
//! The tc used is iproute2 6.15 when available (`QDL_TC`, else
//! `${QDL_CACHE:-~/.cache/qdisc-lab}/iproute2-6.15/sbin/tc`, which `scripts/install-iproute2.sh`
//! provides), else `tc` from PATH — with a warning in the result: iproute2 before 6.x
//! ignores `-j` for `-s class show`.

pub mod lab;
pub mod settings;
pub mod tc;
pub mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use qdisc_scenario::result::{self, LinkInfo, Metadata, Periodic, ScenarioInfo, TcResult, TcSample, Wallclock};
use qdisc_scenario::scenario::{per_netns_sysctl, Scenario, ScriptItem, SettingKind, TrafficKind};
use qdisc_scenario::{Backend, Progress, RunError, RunOptions, RunResult};

use crate::proc::Proc;
use lab::{has_wire, port_name, Lab};
use settings::GlobalSysctls;
use tc::Target;

/// Runs of this process so far (namespace names must differ between concurrent runs).
static RUNS: AtomicU32 = AtomicU32::new(0);

/// First port of the iperf3 servers (one per tcp/udp entry).
const IPERF_PORT: u16 = 5201;

/// The host backend.
#[derive(Debug, Default, Clone)]
pub struct HostBackend;

/// The tc to use (see the module docs) and whether it is iproute2 6.15.
pub fn default_tc() -> PathBuf {
    if let Some(t) = std::env::var_os("QDL_TC") {
        return PathBuf::from(t);
    }
    let cache = std::env::var("QDL_CACHE")
        .unwrap_or_else(|_| format!("{}/.cache/qdisc-lab", std::env::var("HOME").unwrap_or_else(|_| "/root".into())));
    let tc = PathBuf::from(format!("{cache}/iproute2-6.15/sbin/tc"));
    if tc.exists() {
        tc
    } else {
        PathBuf::from("tc")
    }
}

fn version_of(cmd: &Path, arg: &str) -> Option<String> {
    let out = Command::new(cmd).arg(arg).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The pid in a name `qdl-<pid>-<rest>` (a namespace or scratch directory of a run).
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix("qdl-")?.split_once('-')?;
    (!rest.is_empty()).then_some(())?;
    pid.parse().ok().filter(|&p| p > 0)
}

/// Whether process `pid` exists (in this pid namespace).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Delete what qdisc-lab processes that no longer exist (killed with SIGKILL, or a
/// crashed machine's /run surviving) left: namespaces `qdl-<pid>-*` — after killing
/// the processes still in them (their iperf3 and ping) — and the host backend's
/// scratch directories `$TMPDIR/qdl-<pid>-<run>`. A name whose pid is alive is never
/// touched (it may be another run going on right now).
pub fn reap_stale() {
    use std::os::unix::fs::MetadataExt;
    if let Ok(dir) = std::fs::read_dir("/run/netns") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = owner_pid(&name) else { continue };
            if alive(pid) {
                continue;
            }
            if let Ok(ns) = std::fs::metadata(e.path()) {
                for p in pids_in_netns(ns.dev(), ns.ino()) {
                    // SAFETY: kill(2); the process is in a namespace of a dead run.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
            let _ = Command::new("ip").args(["netns", "del", &name]).stderr(std::process::Stdio::null()).status();
        }
    }
    if let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // Only the host backend's `qdl-<pid>-<run>` (a VM run's directory
            // `qdl-<pid>-vm<run>` may have been kept on purpose: QDL_VM_KEEP).
            let run = name.splitn(3, '-').nth(2).unwrap_or("");
            let ours = !run.is_empty() && run.bytes().all(|b| b.is_ascii_digit());
            if ours && owner_pid(&name).is_some_and(|p| !alive(p)) && e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// The processes whose network namespace is the one at (dev, ino).
fn pids_in_netns(dev: u64, ino: u64) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(proc) = std::fs::read_dir("/proc") else { return Vec::new() };
    proc.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| std::fs::metadata(format!("/proc/{p}/ns/net")).is_ok_and(|m| m.dev() == dev && m.ino() == ino))
        .collect()
}

/// Namespaces of this process still present (for tests: none after a run).
pub fn own_namespaces() -> Vec<String> {
    let prefix = format!("qdl-{}-", std::process::id());
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.retain(|n| n.starts_with(&prefix));
    v
}

struct Tools {
    tc: PathBuf,
    /// `tc -V`.
    tc_version: String,
    iperf3: Option<PathBuf>,
    ping: Option<PathBuf>,
    /// For `ethtool -K` lines.
    ethtool: Option<PathBuf>,
    warnings: Vec<String>,
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

impl HostBackend {
    fn preflight(&self, s: &Scenario, opts: &RunOptions, prefix: &str) -> Result<Tools, RunError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(RunError::Unsupported(
                "the host backend needs root (it creates network namespaces); run it as root, or use --backend vm"
                    .into(),
            ));
        }
        if which("ip").is_none() {
            return Err(RunError::Unsupported("`ip` (iproute2) is not installed".into()));
        }
        // What no kernel the lab can boot would do.
        settings::refuse_unsupported(s)?;
        let tc = opts.tc.clone().unwrap_or_else(default_tc);
        let tc_version = version_of(&tc, "-V").ok_or_else(|| {
            RunError::Unsupported(format!("cannot run tc ({}): is iproute2 installed?", tc.display()))
        })?;
        let mut warnings = Vec::new();
        if !tc_version.contains("iproute2-6.15") {
            warnings.push(format!(
                "tc is {tc_version}, not iproute2 6.15 (scripts/install-iproute2.sh): older tc ignores -j for `-s class show`"
            ));
        }
        let needs = |k: &str| s.traffic.iter().any(|t| t.kind.name() == k);
        let iperf3 = which("iperf3");
        if (needs("tcp") || needs("udp")) && iperf3.is_none() {
            return Err(RunError::Unsupported("tcp/udp traffic needs iperf3 (apt-get install iperf3)".into()));
        }
        let ping = which("ping");
        if needs("ping") && ping.is_none() {
            return Err(RunError::Unsupported("ping traffic needs ping (apt-get install iputils-ping)".into()));
        }
        let ethtool_lines: Vec<String> =
            s.tc.iter()
                .flat_map(|t| t.settings.iter().map(move |st| (t, st)))
                .filter(|(_, st)| matches!(st.kind, SettingKind::Features { .. }))
                .map(|(t, st)| format!("{}:{}: tc.{}: {}", s.file, st.line, t.host, st.text))
                .collect();
        let ethtool = which("ethtool");
        if !ethtool_lines.is_empty() && ethtool.is_none() {
            return Err(RunError::Unsupported(format!(
                "ethtool is not installed (apt-get install ethtool), needed by:\n    {}",
                ethtool_lines.join("\n    ")
            )));
        }
        for (i, t) in s.traffic.iter().enumerate() {
            if !matches!(t.kind, TrafficKind::Ping { .. }) && t.duration % 1_000_000_000 != 0 {
                return Err(RunError::Unsupported(format!(
                    "{}:{}: traffic[{i}]: duration {}s: iperf3 runs whole seconds; give this traffic a whole number of seconds",
                    s.file,
                    t.line,
                    secs(t.duration)
                )));
            }
        }
        // Pins, XPS masks and global sysctls this machine can honour.
        let (setting_problems, setting_warnings) = settings::preflight(s);
        if !setting_problems.is_empty() {
            return Err(RunError::Unsupported(format!(
                "the kernel lab cannot run this scenario on this machine:\n  {}",
                setting_problems.join("\n  ")
            )));
        }
        warnings.extend(setting_warnings);
        // What the kernel must have.
        let kernel = kernel_release();
        let mut problems = Vec::new();
        let need = tc::needed_qdiscs(s);
        let kinds: Vec<&str> = need.keys().map(String::as_str).collect();
        let missing = tc::missing_qdiscs(&tc, &format!("{prefix}_probe"), &kinds).map_err(RunError::Failed)?;
        for kind in &missing {
            let mut p = format!("no sch_{kind}, needed by:");
            for why in &need[kind] {
                p.push_str(&format!("\n    {why}"));
            }
            problems.push(p);
        }
        // Congestion controls: each traffic entry's, and each host's sysctl default.
        let mut need_cc: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for (i, t) in s.traffic.iter().enumerate() {
            if let TrafficKind::Tcp { cc, .. } = &t.kind {
                need_cc.entry(cc).or_default().push(format!("{}:{}: traffic[{i}]", s.file, t.line));
            }
        }
        for script in &s.tc {
            for st in &script.settings {
                if let SettingKind::Sysctl { key, value } = &st.kind {
                    if key == "net.ipv4.tcp_congestion_control" {
                        need_cc
                            .entry(value)
                            .or_default()
                            .push(format!("{}:{}: tc.{}: {}", s.file, st.line, script.host, st.text));
                    }
                }
            }
        }
        for (cc, why) in &need_cc {
            if !tc::cc_available(cc) {
                problems.push(format!(
                    "no TCP congestion control {cc:?} (tcp_{cc}), needed by:\n    {}",
                    why.join("\n    ")
                ));
            }
        }
        if !problems.is_empty() {
            return Err(RunError::Unsupported(format!(
                "the running kernel ({kernel}) cannot run this scenario:\n  {}\nRun it on a kernel that has them: --backend vm (a Debian kernel under qemu).",
                problems.join("\n  ")
            )));
        }
        Ok(Tools { tc, tc_version, iperf3, ping, ethtool, warnings })
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Every device of the run: the hosts' link interfaces (and `lo` of a host with local
/// traffic: its traffic's only device) and the wire ports.
fn targets(s: &Scenario, lab: &Lab) -> Vec<Target> {
    let mut t: Vec<Target> = s
        .hosts
        .iter()
        .map(|h| {
            let mut devs: Vec<(String, String)> =
                s.ifaces(&h.name).into_iter().map(|d| (h.name.clone(), d.to_string())).collect();
            devs.extend(h.ifb.iter().map(|d| (h.name.clone(), d.clone())));
            if s.traffic.iter().any(|t| t.from == h.name && t.to == h.name) {
                devs.push((h.name.clone(), "lo".into()));
            }
            Target { ns: lab.host_ns(&h.name), devs }
        })
        .filter(|t| !t.devs.is_empty())
        .collect();
    let devs: Vec<(String, String)> = (0..s.links.len())
        .filter(|&i| has_wire(&s.links[i]))
        .flat_map(|i| [(format!("link[{i}]"), port_name(i, false)), (format!("link[{i}]"), port_name(i, true))])
        .collect();
    if !devs.is_empty() {
        t.push(Target { ns: lab.wire_ns(), devs });
    }
    t
}

/// Wait until a process listens on TCP `port` (seen in its own namespace's /proc/PID/net/tcp).
fn wait_listening(p: &mut Proc, port: u16, timeout: Duration) -> Result<(), String> {
    let needle = format!(":{port:04X} 00000000:0000 0A");
    let t = Instant::now();
    while t.elapsed() < timeout {
        if let Some(st) = p.exited() {
            return Err(format!("{} exited ({st}): {}", p.label, p.read_stderr().trim()));
        }
        let tcp = std::fs::read_to_string(format!("/proc/{}/net/tcp", p.pid())).unwrap_or_default();
        if tcp.contains(&needle) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(format!("{} did not listen on port {port} within {timeout:?}", p.label))
}

/// RFC 3339 UTC of a system time (civil-from-days, Howard Hinnant's algorithm).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (year, month, day) = qdisc_scenario::iperf3::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// One traffic entry while it runs.
struct Running {
    index: usize,
    proc: Option<Proc>,
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn run(&self, s: &Scenario, opts: &RunOptions, progress: &mut dyn Progress) -> Result<RunResult, RunError> {
        let r = self.run_inner(s, opts, progress);
        progress.finish();
        r
    }
}

impl HostBackend {
    fn run_inner(&self, s: &Scenario, opts: &RunOptions, progress: &mut dyn Progress) -> Result<RunResult, RunError> {
        reap_stale();
        let prefix = format!("qdl-{}-{}-", std::process::id(), RUNS.fetch_add(1, Ordering::SeqCst));
        progress.phase("preflight");
        let tools = self.preflight(s, opts, &prefix)?;
        let mut warnings = tools.warnings.clone();
        let cancelled = || if opts.cancelled() { Err(RunError::Interrupted) } else { Ok(()) };
        cancelled()?;
        // The kernel's global sysctls the scripts set: one run at a time changes them,
        // and they are put back whatever happens (`sysctls` drops last).
        let mut sysctls = GlobalSysctls::new(opts.cancel.clone());
        let has_sysctls =
            s.tc.iter()
                .flat_map(|t| &t.settings)
                .any(|st| matches!(&st.kind, SettingKind::Sysctl { key, .. } if !per_netns_sysctl(key)));
        if has_sysctls {
            warnings.extend(sysctls.acquire().map_err(RunError::Unsupported)?);
        }

        // Setup. From here on `lab` (and the Procs, declared after it so they drop
        // first) tear everything down whatever happens.
        progress.phase("setup");
        let t_setup = Instant::now();
        let mut lab =
            Lab::new(prefix, tools.tc.clone()).map_err(|e| RunError::Failed(format!("scratch directory: {e}")))?;
        lab.build(s).map_err(|e| RunError::Failed(format!("building the topology: {e}")))?;
        // Global sysctls set for the whole run: (value, host, line), the last of each.
        let mut global: std::collections::BTreeMap<String, (String, String, usize)> = Default::default();
        for script in &s.tc {
            let ns = lab.host_ns(&script.host);
            let mut scoped = Vec::new();
            for item in script.in_order() {
                cancelled()?;
                let line = match item {
                    ScriptItem::Tc(line) => line,
                    ScriptItem::Setting(st) => {
                        let r = match &st.kind {
                            // Per namespace: written in the host's own /proc/sys. A namespace
                            // other than the initial one may only default to a module of
                            // tcp_allowed_congestion_control (tcp_set_default_congestion_control
                            // refuses a restricted one such as dctcp: EPERM), so the run
                            // allows it there first; the list is put back afterwards. That
                            // list takes loaded modules only (tcp_ca_find): one not loaded
                            // yet is loaded by making it the initial namespace's default for
                            // a moment (tcp_ca_find_autoload), then the default goes back.
                            SettingKind::Sysctl { key, value } if key == "net.ipv4.tcp_congestion_control" => {
                                const ALLOWED: &str = "net.ipv4.tcp_allowed_congestion_control";
                                let proc = |name: &str| {
                                    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).unwrap_or_default()
                                };
                                let allowed = proc("tcp_allowed_congestion_control");
                                let has = |list: &str| list.split_whitespace().any(|c| c == value);
                                let mut r = Ok(());
                                if !has(&allowed) {
                                    if !has(&proc("tcp_available_congestion_control")) {
                                        r = sysctls.set(key, value).and_then(|()| sysctls.restore(key));
                                    }
                                    r = r.and_then(|()| {
                                        sysctls.set(ALLOWED, format!("{} {value}", allowed.trim()).trim())
                                    });
                                }
                                r.and_then(|()| settings::set_netns_sysctl(&ns, key, value))
                            }
                            SettingKind::Sysctl { key, value } if per_netns_sysctl(key) => {
                                settings::set_netns_sysctl(&ns, key, value)
                            }
                            SettingKind::Sysctl { key, value } => {
                                let r = sysctls.set(key, value);
                                if r.is_ok() {
                                    if settings::scoped_to_script(key) {
                                        scoped.push((key.clone(), value.clone(), st.line));
                                    } else {
                                        global.insert(key.clone(), (value.clone(), script.host.clone(), st.line));
                                    }
                                }
                                r
                            }
                            SettingKind::XpsCpus { dev, txq, cpus } => settings::set_xps(&ns, dev, *txq, cpus),
                            SettingKind::RpsCpus { dev, rxq, cpus } => settings::set_rps(&ns, dev, *rxq, cpus),
                            SettingKind::Threaded { dev, on } => settings::set_threaded(&ns, dev, *on),
                            SettingKind::RpsFlowCnt { dev, rxq, count } => {
                                settings::set_rps_flow_cnt(&ns, dev, *rxq, *count)
                            }
                            SettingKind::Features { dev, tso, gso, gro } => {
                                let ethtool = tools.ethtool.as_deref().expect("preflight: ethtool is there");
                                settings::set_features(ethtool, &ns, dev, *tso, *gso, *gro)
                            }
                            SettingKind::IpLink { dev, mtu, txqueuelen } => {
                                settings::set_ip_link(&ns, dev, *mtu, *txqueuelen)
                            }
                            SettingKind::IpRoute { .. } => settings::set_ip_route(&ns, &st.text),
                            // Refused by preflight (settings::unsupported); never reached.
                            SettingKind::Coalesce { .. } | SettingKind::Rings { .. } => {
                                Err("the kernel lab's interfaces are veths: no coalescing or rings \
                                     (ethtool: Operation not supported)"
                                    .to_string())
                            }
                        };
                        if let Err(stderr) = r {
                            return Err(RunError::TcScript {
                                at: format!("{}:{}", s.file, st.line),
                                host: script.host.clone(),
                                command: st.text.clone(),
                                stderr,
                                hint: None,
                            });
                        }
                        continue;
                    }
                };
                let out = Command::new(&tools.tc)
                    .arg("-n")
                    .arg(&ns)
                    .args(&line.args)
                    .output()
                    .map_err(|e| RunError::Failed(format!("{}: {e}", tools.tc.display())))?;
                if !out.status.success() {
                    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                    let hint = ["kind is unknown", "Unknown filter", "Failed to load TC action module", "classifier not found"]
                        .iter()
                        .any(|m| stderr.contains(m))
                        .then(|| {
                            format!(
                                "The running kernel ({}) lacks what this line needs; run it with --backend vm (a Debian kernel under qemu).",
                                kernel_release()
                            )
                        });
                    return Err(RunError::TcScript {
                        at: format!("{}:{}", s.file, line.line),
                        host: script.host.clone(),
                        command: line.args.join(" "),
                        stderr,
                        hint,
                    });
                }
            }
            // default_qdisc acts when the kernel attaches qdiscs: this host's later lines
            // saw it; nothing else does.
            for (key, value, line) in scoped {
                let before = sysctls.original(&key).map(str::to_string);
                sysctls.restore(&key).map_err(|e| RunError::Failed(format!("host {}: {e}", script.host)))?;
                if let Some(before) = before.filter(|b| *b != value) {
                    warnings.push(format!(
                        "{key} = {value} (host {}, {}:{line}) is global to the kernel, not per network namespace: \
                         it was set only while the rest of host {}'s script ran, then put back to {before}",
                        script.host, s.file, script.host
                    ));
                }
            }
        }
        for (key, (value, host, line)) in &global {
            if let Some(before) = sysctls.original(key).filter(|b| b != value) {
                warnings.push(format!(
                    "{key} = {value} (host {host}, {}:{line}) is global to the kernel, not per network namespace: \
                     the whole kernel ran with it (every host and the wire) until the run ended, then it was put back \
                     to {before}",
                    s.file
                ));
            }
        }
        let mut servers = Vec::new();
        for (i, t) in s.traffic.iter().enumerate() {
            if matches!(t.kind, TrafficKind::Ping { .. }) {
                continue;
            }
            let dst = s.dst_address(&t.from, &t.to).expect("validated: a route joins them");
            let port = (IPERF_PORT + i as u16).to_string();
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &lab.host_ns(&t.to)]).arg(tools.iperf3.as_ref().unwrap());
            cmd.args(["-s", "-1", "-B", &dst, "-p", &port]);
            if let Some(cpus) = &t.receiver_cpus {
                settings::pin(&mut cmd, cpus);
            }
            let label = format!("iperf3 server of traffic[{i}] on {}", t.to);
            let mut p = Proc::spawn(cmd, &label, lab.dir(), &format!("server{i}"))
                .map_err(|e| RunError::Failed(format!("{label}: {e}")))?;
            wait_listening(&mut p, IPERF_PORT + i as u16, Duration::from_secs(5)).map_err(RunError::Failed)?;
            servers.push(p);
        }
        let setup_s = t_setup.elapsed().as_secs_f64();
        cancelled()?;

        // Traffic.
        progress.phase("traffic");
        let targets = targets(s, &lab);
        let now = SystemTime::now();
        let started_at = rfc3339(now);
        let t0_unix = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        // Kept on disk as they come (Periodic): an hour is 36,000 of them.
        let samples: Arc<Mutex<(Periodic, Option<String>)>> = Arc::new(Mutex::new((Periodic::spilled(), None)));
        let snapper = {
            let (stop, samples, targets, tc) = (stop.clone(), samples.clone(), targets.clone(), tools.tc.clone());
            let every = opts.snapshot_interval;
            std::thread::spawn(move || {
                let mut k = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let due = t0 + every * k;
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep((due - now).min(Duration::from_millis(20)));
                        continue;
                    }
                    let t = t0.elapsed().as_secs_f64();
                    let snap = tc::snapshot(&tc, &targets, false);
                    let mut g = samples.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(e) =
                        snap.and_then(|devices| g.0.push(TcSample { t, devices }).map_err(|e| e.to_string()))
                    {
                        g.1.get_or_insert(e);
                    }
                    // Skip instants already missed rather than bunching up.
                    k = (t0.elapsed().as_secs_f64() / every.as_secs_f64()).floor() as u32 + 1;
                }
            })
        };
        // A guard so the snapshot thread stops on every exit path.
        struct StopOnDrop(Arc<AtomicBool>);
        impl Drop for StopOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let stop_guard = StopOnDrop(stop.clone());

        let mut running: Vec<Running> = (0..s.traffic.len()).map(|index| Running { index, proc: None }).collect();
        let total = secs(s.duration);
        let deadline = Duration::from_nanos(s.duration) + Duration::from_secs(15);
        loop {
            cancelled()?;
            let elapsed = t0.elapsed();
            progress.running(elapsed.as_secs_f64().min(total), total);
            for r in running.iter_mut().filter(|r| r.proc.is_none()) {
                let t = &s.traffic[r.index];
                if elapsed < Duration::from_nanos(t.start) {
                    continue;
                }
                let dst = s.dst_address(&t.from, &t.to).expect("validated");
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", &lab.host_ns(&t.from)]);
                let label = format!("traffic[{}] ({} {} → {})", r.index, t.kind.name(), t.from, t.to);
                if let Some(cpus) = &t.sender_cpus {
                    settings::pin(&mut cmd, cpus);
                }
                match &t.kind {
                    TrafficKind::Ping { interval } => {
                        // Sends until we interrupt it at the entry's end (ping's own -c
                        // pacing drifts; -w takes whole seconds only, so it is a backstop).
                        cmd.arg(tools.ping.as_ref().unwrap()).args(["-D", "-n"]);
                        cmd.args(["-i", &format!("{:.6}", secs(*interval))]);
                        cmd.args(["-w", &(t.duration.div_ceil(1_000_000_000) + 2).to_string(), &dst]);
                    }
                    kind => {
                        cmd.arg(tools.iperf3.as_ref().unwrap());
                        cmd.args(["-c", &dst, "-p", &(IPERF_PORT + r.index as u16).to_string()]);
                        cmd.args(["-t", &(t.duration / 1_000_000_000).to_string()]);
                        cmd.args(["-i", &format!("{}", opts.interval.as_secs_f64()), "-J"]);
                        match kind {
                            TrafficKind::Tcp { flows, cc, rate } => {
                                cmd.args(["-P", &flows.to_string(), "-C", cc]);
                                // -b is per stream (iperf3's TCP default is unlimited).
                                if let Some(r) = rate {
                                    cmd.args(["-b", &(r * 8).to_string()]);
                                }
                            }
                            TrafficKind::Udp { rate, size, flows, tos } => {
                                // -b is per stream; 0: unlimited.
                                let bits = rate.map_or(0, |r| r * 8);
                                cmd.args(["-u", "-b", &bits.to_string(), "-l", &size.to_string()]);
                                cmd.args(["-P", &flows.to_string()]);
                                // IP_TOS on the data sockets; a UDP socket keeps the ECN bits.
                                if *tos != 0 {
                                    cmd.args(["--tos", &tos.to_string()]);
                                }
                            }
                            // Refused before the run (settings::unsupported).
                            TrafficKind::Ping { .. } | TrafficKind::Pktgen { .. } => unreachable!(),
                        }
                    }
                }
                let p = Proc::spawn(cmd, &label, lab.dir(), &format!("traffic{}", r.index))
                    .map_err(|e| RunError::Failed(format!("{label}: {e}")))?;
                r.proc = Some(p);
            }
            let mut done = true;
            for r in running.iter_mut() {
                let t = &s.traffic[r.index];
                if let (TrafficKind::Ping { .. }, Some(p)) = (&t.kind, &mut r.proc) {
                    if elapsed >= Duration::from_nanos(t.start + t.duration) {
                        p.interrupt();
                    }
                }
                match &mut r.proc {
                    None => done = false,
                    Some(p) => match p.exited() {
                        None => done = false,
                        Some(st) if !st.success() && !matches!(s.traffic[r.index].kind, TrafficKind::Ping { .. }) => {
                            let why = tools::parse_iperf3(&p.read_stdout(), self.meta(s, r.index, t0))
                                .err()
                                .unwrap_or_else(|| p.read_stderr().trim().to_string());
                            return Err(RunError::Failed(format!("{}: {why}", p.label)));
                        }
                        Some(_) => {}
                    },
                }
            }
            if done {
                break;
            }
            if elapsed > deadline {
                return Err(RunError::Failed(format!(
                    "traffic still running {}s after the scenario's end; stopped",
                    (elapsed - Duration::from_nanos(s.duration)).as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(stop_guard);
        let _ = snapper.join();
        let end = tc::snapshot(&tools.tc, &targets, true).map_err(RunError::Failed)?;
        let run_s = t0.elapsed().as_secs_f64();

        // Results.
        let mut throughput = Vec::new();
        let mut rtt = Vec::new();
        for r in &running {
            let p = r.proc.as_ref().expect("all started");
            let t = &s.traffic[r.index];
            if let TrafficKind::Ping { interval } = t.kind {
                let dst = s.dst_address(&t.from, &t.to).expect("validated");
                rtt.push(tools::parse_ping(
                    &p.read_stdout(),
                    tools::PingMeta {
                        traffic: r.index,
                        from: t.from.clone(),
                        to: t.to.clone(),
                        dst,
                        start_s: secs(t.start),
                        interval_s: secs(interval),
                        t0_unix,
                    },
                ));
            } else {
                let res = tools::parse_iperf3(&p.read_stdout(), self.meta(s, r.index, t0))
                    .map_err(|e| RunError::Failed(format!("{}: {e}", p.label)))?;
                throughput.push(res);
            }
        }
        let (periodic, snap_err) = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(e) = snap_err {
            warnings.push(format!("some periodic tc snapshots failed: {e}"));
        }
        let links = s
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| LinkInfo {
                between: [l.a.to_string(), l.b.to_string()],
                addresses: [format!("{}/24", s.address_on(i, &l.a.host)), format!("{}/24", s.address_on(i, &l.b.host))],
                realised_by: lab::describe(l, i),
            })
            .collect();
        let mut tools_v = std::collections::BTreeMap::new();
        // Both at once (each is a process start, slow under a VM's emulated CPU).
        let (iperf3_v, ping_v) = std::thread::scope(|sc| {
            let i = sc.spawn(|| tools.iperf3.as_ref().map(|p| version_of(p, "-v").unwrap_or_default()));
            let p = tools.ping.as_ref().map(|p| version_of(p, "-V").unwrap_or_default());
            (i.join().unwrap_or_default(), p)
        });
        if let Some(v) = iperf3_v {
            tools_v.insert("iperf3".to_string(), v);
        }
        if let Some(v) = ping_v {
            tools_v.insert("ping".to_string(), v);
        }
        if s.tc.iter().flat_map(|t| &t.settings).any(|st| matches!(st.kind, SettingKind::Features { .. })) {
            if let Some(e) = &tools.ethtool {
                tools_v.insert("ethtool".to_string(), version_of(e, "--version").unwrap_or_default());
            }
        }
        tools_v.insert("tc".to_string(), tools.tc.display().to_string());

        // Teardown (children first, then namespaces).
        progress.phase("teardown");
        let t_down = Instant::now();
        for r in running.iter_mut() {
            r.proc.take();
        }
        drop(servers);
        lab.teardown().map_err(|e| RunError::Failed(format!("teardown: {e}")))?;
        sysctls.restore_all().map_err(|e| RunError::Failed(format!("teardown: global sysctls: {e}")))?;
        let teardown_s = t_down.elapsed().as_secs_f64();

        let interval_s = opts.interval.as_secs_f64();
        Ok(RunResult {
            format: result::FORMAT.into(),
            scenario: ScenarioInfo {
                name: s.name.clone(),
                file: s.file.clone(),
                sha256: s.sha256.clone(),
                seed: s.seed,
                duration_s: secs(s.duration),
            },
            metadata: Metadata {
                backend: "host".into(),
                kernel: kernel_release(),
                iproute2: tools.tc_version.clone(),
                tools: tools_v,
                qdisc_lab: env!("CARGO_PKG_VERSION").into(),
                interval_s,
                snapshot_interval_s: opts.snapshot_interval.as_secs_f64(),
                links,
            },
            wallclock: Some(Wallclock { started_at, setup_s, run_s, teardown_s }),
            total: RunResult::totals(&throughput, interval_s),
            throughput,
            rtt,
            tc: TcResult { end, periodic },
            cpu: Vec::new(),
            warnings,
        })
    }

    fn meta(&self, s: &Scenario, i: usize, _t0: Instant) -> tools::TrafficMeta {
        let t = &s.traffic[i];
        let dst = s.dst_address(&t.from, &t.to).expect("validated");
        tools::TrafficMeta {
            traffic: i,
            kind: t.kind.name(),
            from: t.from.clone(),
            to: t.to.clone(),
            dst,
            start_s: secs(t.start),
            flows: match t.kind {
                TrafficKind::Tcp { flows, .. } | TrafficKind::Udp { flows, .. } | TrafficKind::Pktgen { flows, .. } => {
                    flows
                }
                _ => 1,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_of_names() {
        assert_eq!(owner_pid("qdl-1234-0-client"), Some(1234));
        assert_eq!(owner_pid("qdl-1234-0-_wire"), Some(1234));
        assert_eq!(owner_pid("qdl-1234-0"), Some(1234));
        assert_eq!(owner_pid("qdl-1234-"), None);
        assert_eq!(owner_pid("qdl-1234"), None);
        assert_eq!(owner_pid("qdl-0-0-a"), None);
        assert_eq!(owner_pid("qdl-diff7-a"), None);
        assert_eq!(owner_pid("qdl-settings-1234-drop"), None);
        assert_eq!(owner_pid("other-1234-0-a"), None);
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_709_251_199_123); // 2024-02-29T23:59:59.123Z
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.123Z");
    }
}
