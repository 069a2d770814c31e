//! The non-tc lines of a host's script on the real kernel: `sysctl -w KEY=VALUE`,
//! `echo MASK > /sys/class/net/DEV/queues/tx-N/xps_cpus` and `…/rx-N/rps_cpus`,
//! `ethtool -K`, `ip link set … mtu/txqueuelen`, and the CPU pins of traffic.
//!
//! ## What the lab cannot do
//!
//! Its interfaces are veths (every link kind): a veth has no interrupt coalescing and
//! no rings (`veth_ethtool_ops` has neither `set_coalesce` nor `set_ringparam`), so
//! `ethtool -C` and `ethtool -G` lines are refused before anything changes, as is a
//! link's `veth_bql` other than "off": no released kernel has BQL on veth (the patch
//! series of seed 004). Nor does the lab drive pktgen or run its applications in a
//! net_cls cgroup (a traffic entry's `net_cls_classid`). See [`unsupported`].
//!
//! ## Which sysctls a network namespace has
//!
//! Of the keys a scenario may set ([`SYSCTL_KEYS`]) the `net.ipv4` ones
//! (`tcp_congestion_control`, `tcp_syn_retries`, …) are per network namespace
//! (`ipv4_sysctl_init_net` registers them in every namespace, which starts with
//! `init_net`'s values): the lab writes them in the host's namespace
//! ([`set_netns_sysctl`]), and every traffic entry also passes its resolved `cc` to
//! iperf3 (`-C`). None of the `net.core` keys is per network namespace, on
//! 6.12 as on 6.18. net/core/sysctl_net_core.c has two tables: `net_core_table`
//! (`dev_weight`, `dev_weight_rx_bias`, `dev_weight_tx_bias`, `netdev_max_backlog`,
//! `netdev_budget`, `netdev_budget_usecs`, `default_qdisc`, `skb_defer_max`,
//! `gro_normal_batch`, …), which
//! `sysctl_core_init` registers for `init_net` only, and `netns_core_table`
//! (`somaxconn`, `optmem_max`, `txrehash`, `tstamp_allow_data`, `rps_default_mask`, and
//! read-only copies of `[rw]mem_{max,default}`), which `sysctl_core_net_init`
//! registers in every namespace. The values behind the first table are plain globals
//! (`weight_p`, `net_hotdata.*`), and `set_default_qdisc` → `qdisc_set_default`
//! (net/sched/sch_api.c) sets the global `default_qdisc_ops`. A child namespace has no
//! `/proc/sys/net/core/dev_weight` at all: `ip netns exec NS sysctl -w
//! net.core.dev_weight=32` fails with "cannot stat".
//!
//! So the lab sets them where they are, in the initial namespace's /proc/sys, and puts
//! every value back ([`GlobalSysctls`]):
//!
//! * `net.core.default_qdisc` only matters when the kernel attaches a default qdisc: a
//!   device coming up, a root deleted (`tc qdisc del dev D root`), the tx queues of an
//!   mq/mqprio added later. It is set where it stands in the host's script and put back
//!   as soon as that host's script has run — so that host's later tc lines get exactly
//!   what the kernel gives them, and no other host (nor anything else on the machine)
//!   sees it. The lab's interfaces already exist when scripts run, so their roots stay
//!   what the kernel gave them (a veth is IFF_NO_QUEUE: noqueue), exactly as on a host
//!   where the sysctl is typed after boot; replacing the roots would not be the
//!   kernel's result.
//! * the others act while packets flow (NAPI and qdisc dequeue quotas, backlog length):
//!   they are set at their place in the script and stay set until the run ends, for the
//!   whole kernel — every host and the wire. Hosts that set one differently cannot run
//!   on one kernel (refused before anything changes).
//!
//! Values are put back on every way out of a run: its end, an error, a first Ctrl-C or
//! a SIGTERM/SIGHUP (both then stop the run as a Ctrl-C does), a second signal
//! ([`crate::proc::emergency_cleanup`]); and after a SIGKILL or a crash, by the next run
//! (the originals are recorded in `/run/qdisc-lab/global-sysctls` before anything is
//! changed, and a machine-wide lock says whether their writer still lives).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

use qdisc::tc::strerror;
use qdisc_scenario::scenario::{cpumask_string, parse_cpulist, Scenario, SettingKind, TrafficKind, VethBql};
pub use qdisc_scenario::scenario::{per_netns_sysctl, SYSCTL_KEYS};

use crate::proc;

/// Where the machine-wide lock and the record of changed sysctls live.
pub const STATE_DIR: &str = "/run/qdisc-lab";

/// Keys that only matter while the kernel attaches default qdiscs (set for the rest of
/// one host's script).
pub fn scoped_to_script(key: &str) -> bool {
    key == "net.core.default_qdisc"
}

/// The /proc/sys file of a dotted key.
fn proc_path(root: &Path, key: &str) -> PathBuf {
    root.join(key.replace('.', "/"))
}

/// The signal handler's way to stop the run: the run's cancel flag.
static CANCEL: AtomicPtr<AtomicBool> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_term(_sig: libc::c_int) {
    let p = CANCEL.load(Ordering::SeqCst);
    if !p.is_null() {
        // SAFETY: the pointer is an Arc's AtomicBool that GlobalSysctls keeps alive until
        // it has cleared CANCEL; an atomic store is async-signal-safe.
        unsafe { (*p).store(true, Ordering::SeqCst) };
    }
}

/// The kernel's global sysctls this run changed, and how to put them back.
pub struct GlobalSysctls {
    proc_sys: PathBuf,
    state_dir: PathBuf,
    /// The machine-wide lock, while held.
    lock: Option<File>,
    /// (key, value before the run), in the order first changed.
    saved: Vec<(String, String)>,
    cancel: Arc<AtomicBool>,
    /// SIGTERM and SIGHUP as they were before this run caught them.
    old_actions: Vec<(libc::c_int, libc::sigaction)>,
    /// Whether this instance is the one the signal handler and the emergency cleanup know.
    registered: bool,
}

impl GlobalSysctls {
    /// For a run that stops when `cancel` is set: /proc/sys and [`STATE_DIR`].
    pub fn new(cancel: Arc<AtomicBool>) -> GlobalSysctls {
        GlobalSysctls::with_paths("/proc/sys".into(), STATE_DIR.into(), cancel)
    }

    /// With other places for /proc/sys and the state (tests).
    pub fn with_paths(proc_sys: PathBuf, state_dir: PathBuf, cancel: Arc<AtomicBool>) -> GlobalSysctls {
        GlobalSysctls {
            proc_sys,
            state_dir,
            lock: None,
            saved: Vec::new(),
            cancel,
            old_actions: Vec::new(),
            registered: false,
        }
    }

    fn record(&self) -> PathBuf {
        self.state_dir.join("global-sysctls")
    }

    /// Take the machine-wide lock (without waiting). A record left by a run that died
    /// is put back first; what was restored is returned, to be said in the result.
    /// Err: another live run holds the lock.
    pub fn acquire(&mut self) -> Result<Vec<String>, String> {
        if self.lock.is_some() {
            return Ok(Vec::new());
        }
        std::fs::create_dir_all(&self.state_dir).map_err(|e| format!("{}: {e}", self.state_dir.display()))?;
        let path = self.state_dir.join("global-sysctls.lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let holder = std::fs::read_to_string(self.record())
                .ok()
                .and_then(|r| r.lines().next().and_then(|l| l.strip_prefix("pid ")).map(str::to_string))
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            return Err(format!(
                "another qdisc-lab run{holder} has changed the kernel's global sysctls and holds {}: \
                 a scenario with sysctl lines waits until it has finished",
                path.display()
            ));
        }
        let mut notes = Vec::new();
        if let Ok(text) = std::fs::read_to_string(self.record()) {
            let mut lines = text.lines();
            let pid = lines.next().and_then(|l| l.strip_prefix("pid ")).unwrap_or("?").to_string();
            let entries: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(' ')).collect();
            for (key, value) in entries.iter().rev() {
                match std::fs::write(proc_path(&self.proc_sys, key), value) {
                    Ok(()) => notes.push(format!(
                        "{key} was left changed by a qdisc-lab run that died (pid {pid}); it was put back to {value} first"
                    )),
                    Err(e) => {
                        return Err(format!(
                            "{key} was left changed by a qdisc-lab run that died (pid {pid}) and cannot be put back to {value}: {}",
                            strerror(&e)
                        ))
                    }
                }
            }
            let _ = std::fs::remove_file(self.record());
        }
        self.lock = Some(f);
        self.write_record()?;
        self.register();
        Ok(notes)
    }

    /// Catch SIGTERM and SIGHUP (they stop the run, which then puts everything back),
    /// and tell the emergency cleanup. Not when the program already stops its runs on
    /// those signals ([`proc::stop_on_signals`], as `qdisc-lab run` does).
    fn register(&mut self) {
        if self.proc_sys != Path::new("/proc/sys") || self.registered {
            return;
        }
        self.registered = true;
        if proc::stops_on_signals() {
            return;
        }
        CANCEL.store(Arc::as_ptr(&self.cancel).cast_mut(), Ordering::SeqCst);
        for sig in [libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installing a handler that only does an atomic store; the old action
            // is kept to be reinstalled.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_term as *const () as libc::sighandler_t;
                new.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &new, &mut old) == 0 {
                    self.old_actions.push((sig, old));
                }
            }
        }
    }

    fn unregister(&mut self) {
        if !self.registered {
            return;
        }
        for (sig, old) in self.old_actions.drain(..) {
            // SAFETY: reinstalling the action saved by `register`.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
        CANCEL.store(std::ptr::null_mut(), Ordering::SeqCst);
        self.registered = false;
    }

    /// The record: who holds the lock, and every original value (before any change).
    fn write_record(&self) -> Result<(), String> {
        let mut text = format!("pid {}\n", std::process::id());
        for (k, v) in &self.saved {
            text.push_str(&format!("{k} {v}\n"));
        }
        let tmp = self.state_dir.join("global-sysctls.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, self.record())
        };
        write().map_err(|e| format!("{}: {e}", self.record().display()))
    }

    /// The value a key had before this run changed it, if it did.
    pub fn original(&self, key: &str) -> Option<&str> {
        self.saved.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The current value of a key.
    pub fn read(&self, key: &str) -> Result<String, String> {
        let path = proc_path(&self.proc_sys, key);
        std::fs::read_to_string(&path)
            .map(|v| v.trim_end_matches('\n').to_string())
            .map_err(|e| format!("sysctl: cannot stat {}: {}", path.display(), strerror(&e)))
    }

    /// `sysctl -w KEY=VALUE` in the initial network namespace, the original recorded
    /// first. The error is worded as procps' sysctl words it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.acquire()?;
        if self.original(key).is_none() {
            let before = self.read(key)?;
            self.saved.push((key.to_string(), before.clone()));
            self.write_record()?;
            if self.registered {
                proc::register_sysctl(&proc_path(&self.proc_sys, key), &before);
            }
        }
        let path = proc_path(&self.proc_sys, key);
        // O_TRUNC, as a shell's `>`: nothing to procfs, needed by a plain file.
        let mut f = File::options()
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("sysctl: cannot stat {}: {}", path.display(), strerror(&e)))?;
        f.write_all(value.as_bytes()).map_err(|e| format!("sysctl: setting key \"{key}\": {}", strerror(&e)))
    }

    /// Put one key back (if this run changed it).
    pub fn restore(&mut self, key: &str) -> Result<(), String> {
        let Some(i) = self.saved.iter().position(|(k, _)| k == key) else { return Ok(()) };
        let (k, v) = self.saved[i].clone();
        let path = proc_path(&self.proc_sys, &k);
        std::fs::write(&path, &v).map_err(|e| format!("putting {k} back to {v}: {}", strerror(&e)))?;
        self.saved.remove(i);
        if self.registered {
            proc::forget_sysctl(&path);
        }
        self.write_record()
    }

    /// Put everything back (last changed first), drop the record and the lock.
    pub fn restore_all(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        while let Some((k, _)) = self.saved.last().cloned() {
            if let Err(e) = self.restore(&k) {
                errors.push(e);
                // Keep it in the record: the next run puts it back.
                break;
            }
        }
        if errors.is_empty() && self.lock.is_some() {
            let _ = std::fs::remove_file(self.record());
        }
        self.lock = None;
        self.unregister();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl Drop for GlobalSysctls {
    fn drop(&mut self) {
        let _ = self.restore_all();
    }
}

/// `echo MASK > /sys/class/net/DEV/queues/tx-N/xps_cpus` in namespace `ns` (its own
/// sysfs: `ip netns exec` mounts one), the mask in the kernel's bitmap format.
pub fn set_xps(ns: &str, dev: &str, txq: u32, cpus: &[u32]) -> Result<(), String> {
    write_queue_mask(ns, &format!("/sys/class/net/{dev}/queues/tx-{txq}/xps_cpus"), cpus)
}

/// `echo MASK > /sys/class/net/DEV/queues/rx-N/rps_cpus` in namespace `ns`, as
/// [`set_xps`] (`lo` too: every namespace has its own, with one rx queue).
pub fn set_rps(ns: &str, dev: &str, rxq: u32, cpus: &[u32]) -> Result<(), String> {
    write_queue_mask(ns, &format!("/sys/class/net/{dev}/queues/rx-{rxq}/rps_cpus"), cpus)
}

/// `echo N > /sys/class/net/DEV/queues/rx-N/rps_flow_cnt` in namespace `ns`.
pub fn set_rps_flow_cnt(ns: &str, dev: &str, rxq: u32, count: u32) -> Result<(), String> {
    write_sys(ns, &format!("/sys/class/net/{dev}/queues/rx-{rxq}/rps_flow_cnt"), &count.to_string())
}

/// `echo 0|1 > /sys/class/net/DEV/threaded` in namespace `ns`.
pub fn set_threaded(ns: &str, dev: &str, on: bool) -> Result<(), String> {
    write_sys(ns, &format!("/sys/class/net/{dev}/threaded"), if on { "1" } else { "0" })
}

fn write_queue_mask(ns: &str, path: &str, cpus: &[u32]) -> Result<(), String> {
    write_sys(ns, path, &cpumask_string(cpus))
}

/// A per-namespace sysctl (`net.ipv4.*`): written in the host's
/// namespace, whose `/proc/sys/net` is its own; nothing to put back (the namespace goes).
pub fn set_netns_sysctl(ns: &str, key: &str, value: &str) -> Result<(), String> {
    write_sys(ns, &format!("/proc/sys/{}", key.replace('.', "/")), value)
}

fn write_sys(ns: &str, path: &str, value: &str) -> Result<(), String> {
    let script = format!("echo {value} > {path}");
    super::lab::run(Command::new("ip").args(["netns", "exec", ns, "sh", "-c", &script]))
        .map(|_| ())
        .map_err(|e| e.trim().to_string())
}

/// The argv after `ethtool` of an `ethtool -K` setting: the features in a fixed order
/// (tso, gso, gro), as `ethtool -K DEV tso off gro on` would set them.
pub fn features_args(dev: &str, tso: Option<bool>, gso: Option<bool>, gro: Option<bool>) -> Vec<String> {
    let mut a = vec!["-K".to_string(), dev.to_string()];
    for (name, v) in [("tso", tso), ("gso", gso), ("gro", gro)] {
        if let Some(on) = v {
            a.push(name.into());
            a.push(if on { "on" } else { "off" }.into());
        }
    }
    a
}

/// `ethtool -K DEV …` in namespace `ns` (`ip netns exec NS ethtool …`).
pub fn set_features(
    ethtool: &Path,
    ns: &str,
    dev: &str,
    tso: Option<bool>,
    gso: Option<bool>,
    gro: Option<bool>,
) -> Result<(), String> {
    super::lab::run(Command::new("ip").args(["netns", "exec", ns]).arg(ethtool).args(features_args(dev, tso, gso, gro)))
        .map(|_| ())
        .map_err(|e| e.trim().to_string())
}

/// The argv after `ip -n NS` of an `ip link set` setting.
pub fn ip_link_args(dev: &str, mtu: Option<u32>, txqueuelen: Option<u32>) -> Vec<String> {
    let mut a: Vec<String> = ["link", "set", "dev", dev].map(String::from).to_vec();
    if let Some(m) = mtu {
        a.extend(["mtu".into(), m.to_string()]);
    }
    if let Some(q) = txqueuelen {
        a.extend(["txqueuelen".into(), q.to_string()]);
    }
    a
}

/// `ip -n NS link set dev DEV mtu N txqueuelen N`.
pub fn set_ip_link(ns: &str, dev: &str, mtu: Option<u32>, txqueuelen: Option<u32>) -> Result<(), String> {
    super::lab::run(Command::new("ip").args(["-n", ns]).args(ip_link_args(dev, mtu, txqueuelen)))
        .map(|_| ())
        .map_err(|e| e.trim().to_string())
}

/// An `ip route change … realms …` line (validated by the loader: it restates the
/// route the lab installed, with realms) run as written in the host's namespace.
pub fn set_ip_route(ns: &str, line: &str) -> Result<(), String> {
    let args = qdisc::tc::makeargs(line);
    super::lab::run(Command::new("ip").args(["-n", ns]).args(&args[1..])).map(|_| ()).map_err(|e| e.trim().to_string())
}

/// [`unsupported`] as the error of a run (before anything changes; the host and the
/// VM backend both refuse with it).
pub fn refuse_unsupported(s: &Scenario) -> Result<(), qdisc_scenario::RunError> {
    let never = unsupported(s);
    if never.is_empty() {
        return Ok(());
    }
    Err(qdisc_scenario::RunError::Unsupported(format!(
        "the kernel lab cannot run this scenario (on any kernel):\n  {}\nThe simulator models it: --backend sim \
         (the default).",
        never.join("\n  ")
    )))
}

/// What the kernel lab cannot do on any kernel, whatever the machine: each with its
/// place in the scenario. `veth_bql` other than "off" (no released kernel has BQL on
/// veth), `ethtool -C` and `ethtool -G` (the lab's interfaces are veths).
pub fn unsupported(s: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    for (i, l) in s.links.iter().enumerate() {
        if l.veth_bql != VethBql::Off {
            out.push(format!(
                "{}:{}: link[{i}] {} — {}: veth_bql = {:?}: no released kernel has BQL on veth: the patch series \
                 of seed 004",
                s.file,
                l.line,
                l.a,
                l.b,
                l.veth_bql.name()
            ));
        }
    }
    for t in &s.tc {
        for st in &t.settings {
            let what = match st.kind {
                SettingKind::Coalesce { .. } => "no interrupt coalescing",
                SettingKind::Rings { .. } => "no rings to size",
                _ => continue,
            };
            out.push(format!(
                "{}:{}: tc.{}: {}: the kernel lab's interfaces are veths (whatever the link's kind): {what} \
                 (ethtool: Operation not supported)",
                s.file, st.line, t.host, st.text
            ));
        }
    }
    for (i, t) in s.traffic.iter().enumerate() {
        if matches!(t.kind, TrafficKind::Pktgen { .. }) {
            out.push(format!(
                "{}:{}: traffic[{i}]: kind = \"pktgen\": the kernel lab does not drive the kernel's pktgen \
                 (its module, /proc/net/pktgen) yet",
                s.file, t.line
            ));
        }
        if t.net_cls_classid != 0 {
            out.push(format!(
                "{}:{}: traffic[{i}]: net_cls_classid: the kernel lab does not run its iperf3 and ping in a \
                 net_cls cgroup (a cgroup v1 net_cls hierarchy's net_cls.classid) yet, so the kernel's cgroup \
                 classifier would see classid 0 for this traffic",
                s.file, t.line
            ));
        }
    }
    out
}

/// The CPUs of this machine that are online (`/sys/devices/system/cpu/online`).
pub fn machine_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpulist(t.trim()).ok())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
            (0..n).collect()
        })
}

/// "2 CPUs (0-1)".
fn machine_phrase(cpus: &[u32]) -> String {
    let list = match (cpus.first(), cpus.last()) {
        (Some(a), Some(b)) if (b - a) as usize + 1 == cpus.len() && a != b => format!("{a}-{b}"),
        _ => cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
    };
    format!("{} CPU{} ({list})", cpus.len(), if cpus.len() == 1 { "" } else { "s" })
}

/// Run the child on these CPUs only, as `taskset -c LIST` does (`sched_setaffinity`
/// before exec; `ip netns exec` and then iperf3 or ping inherit it).
pub fn pin(cmd: &mut Command, cpus: &[u32]) {
    use std::os::unix::process::CommandExt;
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays within it (cpus are
    // checked against the machine's, far below CPU_SETSIZE).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| (c as usize) < libc::CPU_SETSIZE as usize) {
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    // SAFETY: sched_setaffinity is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// What the settings and pins of a scenario need of this machine, checked before
/// anything changes: problems (the run cannot go on here) and warnings (it can, and
/// the result should say how it differs).
pub fn preflight(s: &Scenario) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let machine = machine_cpus();
    let phrase = machine_phrase(&machine);
    let missing = |cpus: &[u32]| cpus.iter().copied().find(|c| !machine.contains(c));
    for (i, t) in s.traffic.iter().enumerate() {
        for (name, pins) in [("sender_cpus", &t.sender_cpus), ("receiver_cpus", &t.receiver_cpus)] {
            if let Some(c) = pins.as_deref().and_then(missing) {
                problems.push(format!(
                    "{}:{}: traffic[{i}].{name} names cpu {c}, but this machine has {phrase}: a namespace has no CPUs of its own",
                    s.file, t.line
                ));
            }
        }
    }
    // Per global key, what each host leaves it at.
    let mut finals: std::collections::BTreeMap<&str, Vec<(&str, &str, usize)>> = Default::default();
    for t in &s.tc {
        let mut last: std::collections::BTreeMap<&str, (&str, usize)> = Default::default();
        for st in &t.settings {
            match &st.kind {
                SettingKind::XpsCpus { cpus, .. } | SettingKind::RpsCpus { cpus, .. } => {
                    if let Some(c) = missing(cpus) {
                        problems.push(format!(
                            "{}:{}: tc.{}: {}: cpu {c} is not one of this machine's {phrase}",
                            s.file, st.line, t.host, st.text
                        ));
                    }
                }
                SettingKind::Sysctl { key, value } if !scoped_to_script(key) && !per_netns_sysctl(key) => {
                    last.insert(key, (value, st.line));
                }
                SettingKind::Sysctl { .. }
                | SettingKind::Threaded { .. }
                | SettingKind::RpsFlowCnt { .. }
                | SettingKind::Coalesce { .. }
                | SettingKind::Rings { .. }
                | SettingKind::Features { .. }
                | SettingKind::IpLink { .. }
                | SettingKind::IpRoute { .. } => {}
            }
        }
        for (k, (v, line)) in last {
            finals.entry(k).or_default().push((&t.host, v, line));
        }
    }
    for (key, hosts) in &finals {
        if hosts.iter().any(|(_, v, _)| *v != hosts[0].1) {
            let each: Vec<String> =
                hosts.iter().map(|(h, v, line)| format!("{h} sets {v} ({}:{line})", s.file)).collect();
            problems.push(format!(
                "{key} is global to a kernel (not per network namespace) and the hosts set it differently: {}",
                each.join(", ")
            ));
        }
    }
    let n = machine.len() as u32;
    let differ: Vec<String> =
        s.hosts.iter().filter(|h| h.cpus != n).map(|h| format!("{} has {}", h.name, h.cpus)).collect();
    if !differ.is_empty() {
        warnings.push(format!(
            "CPUs: in the scenario {}; the kernel lab cannot give a namespace CPUs of its own, so every host \
             ran on this machine's {phrase}",
            differ.join(", ")
        ));
    }
    (problems, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("qdl-settings-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proc/net/core")).unwrap();
        std::fs::write(d.join("proc/net/core/dev_weight"), "64\n").unwrap();
        std::fs::write(d.join("proc/net/core/default_qdisc"), "pfifo_fast\n").unwrap();
        d
    }

    fn get(d: &Path, key: &str) -> String {
        std::fs::read_to_string(d.join("proc/net/core").join(key)).unwrap().trim().to_string()
    }

    fn sysctls(d: &Path) -> GlobalSysctls {
        GlobalSysctls::with_paths(d.join("proc"), d.join("state"), Arc::new(AtomicBool::new(false)))
    }

    #[test]
    fn values_come_back_on_drop_and_on_restore() {
        let d = scratch("drop");
        {
            let mut g = sysctls(&d);
            g.set("net.core.dev_weight", "32").unwrap();
            g.set("net.core.default_qdisc", "fq").unwrap();
            g.set("net.core.dev_weight", "16").unwrap();
            assert_eq!((get(&d, "dev_weight"), get(&d, "default_qdisc")), ("16".into(), "fq".into()));
            assert_eq!(g.original("net.core.dev_weight"), Some("64"));
            // The record holds the originals before anything changed.
            let rec = std::fs::read_to_string(d.join("state/global-sysctls")).unwrap();
            assert_eq!(
                rec,
                format!("pid {}\nnet.core.dev_weight 64\nnet.core.default_qdisc pfifo_fast\n", std::process::id())
            );
            g.restore("net.core.default_qdisc").unwrap();
            assert_eq!(get(&d, "default_qdisc"), "pfifo_fast");
            assert_eq!(g.original("net.core.default_qdisc"), None);
            // A key the machine lacks: sysctl's words.
            let e = g.set("net.core.nope", "1").unwrap_err();
            assert!(e.starts_with("sysctl: cannot stat ") && e.ends_with("No such file or directory"), "{e}");
        }
        assert_eq!(get(&d, "dev_weight"), "64");
        assert!(!d.join("state/global-sysctls").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn one_run_at_a_time_and_a_dead_run_is_undone() {
        let d = scratch("lock");
        let mut a = sysctls(&d);
        a.set("net.core.dev_weight", "32").unwrap();
        let mut b = sysctls(&d);
        let e = b.acquire().unwrap_err();
        assert!(e.contains(&format!("(pid {})", std::process::id())), "{e}");
        // `a` dies without restoring: its lock goes with it, its record stays.
        a.saved.clear();
        a.lock = None;
        drop(a);
        assert_eq!(get(&d, "dev_weight"), "32");
        let notes = b.acquire().unwrap();
        assert_eq!(get(&d, "dev_weight"), "64");
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("net.core.dev_weight was left changed by a qdisc-lab run that died"), "{notes:?}");
        drop(b);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn what_no_kernel_does_is_named_with_its_line() {
        let text = "duration = \"1s\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[host]]\nname = \"c\"\n\
                    [[link]]\nbetween = [\"a:eth0\", \"b:eth0\"]\nkind = \"veth-pair\"\nveth_bql = \"bytes\"\n\
                    [[link]]\nbetween = [\"a:eth1\", \"c:eth0\"]\n\
                    [tc.a]\nscript = \"\"\"\nethtool -K eth1 gro off\nethtool -C eth1 rx-usecs 8\nethtool -G eth1 tx 512\n\"\"\"\n\
                    [[traffic]]\nkind = \"pktgen\"\nfrom = \"a\"\nto = \"c\"\n\
                    [[traffic]]\nkind = \"ping\"\nfrom = \"a\"\nto = \"c\"\nnet_cls_classid = \"1:10\"\n";
        let s = Scenario::from_bytes(text.as_bytes(), "u.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            unsupported(&s),
            [
                "u.toml:8: link[0] a:eth0 — b:eth0: veth_bql = \"bytes\": no released kernel has BQL on veth: the patch \
                 series of seed 004",
                "u.toml:17: tc.a: ethtool -C eth1 rx-usecs 8: the kernel lab's interfaces are veths (whatever the \
                 link's kind): no interrupt coalescing (ethtool: Operation not supported)",
                "u.toml:18: tc.a: ethtool -G eth1 tx 512: the kernel lab's interfaces are veths (whatever the link's \
                 kind): no rings to size (ethtool: Operation not supported)",
                "u.toml:20: traffic[0]: kind = \"pktgen\": the kernel lab does not drive the kernel's pktgen (its \
                 module, /proc/net/pktgen) yet",
                "u.toml:24: traffic[1]: net_cls_classid: the kernel lab does not run its iperf3 and ping in a net_cls \
                 cgroup (a cgroup v1 net_cls hierarchy's net_cls.classid) yet, so the kernel's cgroup classifier would \
                 see classid 0 for this traffic",
            ]
        );
        let e = refuse_unsupported(&s).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().starts_with("the kernel lab cannot run this scenario (on any kernel):\n  u.toml:8: "));
        assert!(e.to_string().ends_with("\nThe simulator models it: --backend sim (the default)."));
        // Without them: nothing to refuse.
        let fine = text
            .replace("veth_bql = \"bytes\"\n", "")
            .replace("ethtool -C eth1 rx-usecs 8\nethtool -G eth1 tx 512\n", "")
            .replace("kind = \"pktgen\"", "kind = \"ping\"")
            .replace("net_cls_classid = \"1:10\"\n", "");
        let s = Scenario::from_bytes(fine.as_bytes(), "u.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(unsupported(&s), Vec::<String>::new());
        assert_eq!(refuse_unsupported(&s), Ok(()));
    }

    #[test]
    fn rps_masks_name_cpus_the_machine_has() {
        let text = "duration = \"1s\"\n[[host]]\nname = \"a\"\ncpus = 4096\n\
                    [tc.a]\nscript = \"echo 80000000,00000000 > /sys/class/net/lo/queues/rx-0/rps_cpus\"\n";
        let s = Scenario::from_bytes(text.as_bytes(), "r.toml").unwrap_or_else(|e| panic!("{e}"));
        let (problems, _) = preflight(&s);
        let want =
            "r.toml:6: tc.a: echo 80000000,00000000 > /sys/class/net/lo/queues/rx-0/rps_cpus: cpu 63 is not one of \
                    this machine's ";
        if machine_cpus().contains(&63) {
            assert!(problems.is_empty(), "{problems:?}");
        } else {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].starts_with(want), "{problems:?}");
        }
    }

    #[test]
    fn ethtool_and_ip_argv() {
        assert_eq!(features_args("eth0", Some(false), None, Some(true)), ["-K", "eth0", "tso", "off", "gro", "on"]);
        assert_eq!(features_args("lo", None, Some(true), None), ["-K", "lo", "gso", "on"]);
        assert_eq!(
            ip_link_args("eth0", Some(9000), Some(0)),
            ["link", "set", "dev", "eth0", "mtu", "9000", "txqueuelen", "0"]
        );
        assert_eq!(ip_link_args("lo", None, Some(5)), ["link", "set", "dev", "lo", "txqueuelen", "5"]);
    }

    #[test]
    fn machine_phrases() {
        assert_eq!(machine_phrase(&[0, 1]), "2 CPUs (0-1)");
        assert_eq!(machine_phrase(&[0]), "1 CPU (0)");
        assert_eq!(machine_phrase(&[0, 2]), "2 CPUs (0,2)");
        assert!(!machine_cpus().is_empty());
    }
}
