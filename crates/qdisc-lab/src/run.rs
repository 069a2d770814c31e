//! `qdisc-lab run [--backend sim|host|vm [--kernel K]] SCENARIO [--json FILE]`: run a
//! scenario in the simulator (the default) or on a real kernel and print what people
//! already read — iperf3-like interval lines and totals, ping-like RTT statistics (with percentiles), `tc -s qdisc show` of each
//! device, and where the backend gives CPU figures a short block per host (busy time,
//! contended locks, `perf top`-like functions, rx discards; [`cpu_report`]) — and optionally the whole [`RunResult`] as JSON, plots and iperf3 JSON
//! (`--plot DIR`, `--iperf3-json DIR`: outputs.rs).
//!
//! Exit status: 0 done; 1 the run failed (a tc line, a tool) or its report could not be
//! written; 2 it cannot run here (invalid scenario, the backend or kernel lacks
//! something, usage); 128 + the signal when SIGINT (Ctrl-C, 130), SIGTERM (143) or
//! SIGHUP (129) stopped it (after an orderly teardown; [`stop_on_signals`]). With stdout
//! a closed pipe it dies of SIGPIPE after writing its files, as `cat` does (out.rs).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use qdisc_kernel::vm::{KernelChoice, VmBackend};
use qdisc_kernel::HostBackend;
use qdisc_scenario::overrides::{self, Override};
use qdisc_scenario::result::{CpuTime, HostCpu, Interval, TrafficResult};
use qdisc_scenario::{Backend, Progress, RunError, RunOptions, RunResult, Scenario};

/// The backend called `name` (as in `--backend NAME`): the one place where backends
/// are registered, used by `run` and `compare`. An error says why it cannot be used.
pub fn backend_by_name(name: &str) -> Result<Box<dyn Backend>, String> {
    match name {
        "sim" => Ok(Box::new(qdisc_sim::SimBackend::default())),
        "host" => Ok(Box::new(HostBackend)),
        "vm" => vm_backend(None),
        other => {
            let known: Vec<String> = BackendName::value_variants()
                .iter()
                .filter_map(|v| Some(v.to_possible_value()?.get_name().to_string()))
                .collect();
            Err(format!("unknown backend {other:?} (known: {})", known.join(", ")))
        }
    }
}

/// The VM backend booting `kernel` (`--kernel`: 6.12, the default, 6.1, a package or a
/// .deb); its guest runs this very program as its init (`qdisc-lab vm-guest`) — or,
/// when this library runs inside another program (Python), the standalone binary
/// [`GUEST_EXE`] finds.
pub fn vm_backend(kernel: Option<&str>) -> Result<Box<dyn Backend>, String> {
    let kernel = kernel.map(KernelChoice::parse).unwrap_or_else(|| Ok(KernelChoice::default()))?;
    let exe = match GUEST_EXE.get() {
        Some(find) => find()?,
        None => std::env::current_exe().map_err(|e| format!("cannot find this program's executable: {e}"))?,
    };
    Ok(Box::new(VmBackend::new(kernel, exe)))
}

/// Set by a host program embedding this library: where the `qdisc-lab` binary that
/// the VM guest boots as its init is (the host program itself cannot be).
pub static GUEST_EXE: std::sync::OnceLock<fn() -> Result<PathBuf, String>> = std::sync::OnceLock::new();

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendName {
    /// The simulator: the engine's qdiscs in a virtual-time network (deterministic).
    Sim,
    /// The running kernel, in network namespaces (needs root).
    Host,
    /// A Debian kernel booted under qemu (--kernel picks which).
    Vm,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Where to run it.
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendName,
    /// Write the full result (docs/run-result.md) to this file as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// With --backend sim: the kernel to model, 6.12 (the default) or 6.18. With --backend vm: the Debian kernel to boot: 6.12 (Debian 13, the default), 6.1
    /// (Debian 12), a linux-image-* package name, or a .deb file.
    #[arg(long, value_name = "KERNEL")]
    pub kernel: Option<String>,
    /// The tc binary of the host backend (default: iproute2 6.15 from
    /// scripts/install-iproute2.sh if present, else tc from PATH).
    #[arg(long, value_name = "PATH")]
    pub tc: Option<PathBuf>,
    /// Run with this seed instead of the scenario's `seed` (what differs between boots
    /// — ephemeral ports and so every flow hash, where threads and NAPI threads land —
    /// follows it: loop over seeds to see a result's distribution).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Change the scenario before it runs: PATH=VALUE, e.g. `link[1].rate=10mbit`,
    /// `traffic[0].flows=4`, `tc.router.script='qdisc replace dev eth1 root pfifo'`
    /// (repeatable, applied in order; `host`, `link`, `traffic` are 0-based arrays).
    /// VALUE is a TOML literal if it is one (`4`, `true`, `"4"`), else a string.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// The scenario file (docs/scenarios.md).
    pub scenario: PathBuf,
    /// --plot DIR, --iperf3-json DIR (outputs.rs).
    #[command(flatten)]
    pub outputs: crate::outputs::OutputArgs,
}

/// A one-line progress display on stderr (only when stderr is a terminal).
pub struct LineProgress {
    on: bool,
    phase: String,
}

impl LineProgress {
    pub fn new() -> LineProgress {
        LineProgress { on: std::io::stderr().is_terminal(), phase: String::new() }
    }
}

/// SIGINT (Ctrl-C), SIGTERM and SIGHUP: the first asks the run to stop (it tears down
/// in order, then the command exits with 128 + the signal: [`exit_code`]); a second
/// kills and deletes whatever is left, now, and exits so too
/// ([`qdisc_kernel::proc::stop_on_signals`]).
pub fn stop_on_signals(opts: &RunOptions) {
    qdisc_kernel::proc::stop_on_signals(opts.cancel.clone());
}

/// The exit status for a run that failed: 128 + the signal for one a signal stopped.
pub fn exit_code(e: &RunError) -> u8 {
    match (e, qdisc_kernel::proc::stop_signal()) {
        (RunError::Interrupted, Some(sig)) => (128 + sig) as u8,
        _ => e.exit_code(),
    }
}

/// What a run's error says, naming the signal that stopped it if not Ctrl-C.
pub fn error_text(e: &RunError) -> String {
    match (e, qdisc_kernel::proc::stop_signal()) {
        (RunError::Interrupted, Some(libc::SIGTERM)) => format!("{e} (SIGTERM)"),
        (RunError::Interrupted, Some(libc::SIGHUP)) => format!("{e} (SIGHUP)"),
        _ => e.to_string(),
    }
}

/// A progress line on stderr; never panics (a terminal gone after SIGHUP).
fn progress_line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

impl Progress for LineProgress {
    fn phase(&mut self, name: &str) {
        self.phase = name.to_string();
        if self.on {
            progress_line(&format!("\r\x1b[K[{name}]"));
        }
    }
    fn running(&mut self, elapsed: f64, total: f64) {
        if self.on {
            let w = 30;
            let filled = ((elapsed / total.max(1e-9)) * w as f64).round().clamp(0.0, w as f64) as usize;
            progress_line(&format!(
                "\r\x1b[K[{}] {:>6.1}/{:.1} s [{}{}]",
                self.phase,
                elapsed,
                total,
                "#".repeat(filled),
                " ".repeat(w - filled)
            ));
        }
    }
    fn finish(&mut self) {
        if self.on {
            progress_line("\r\x1b[K");
        }
    }
}

pub fn run(a: &RunArgs) -> u8 {
    let backend = match (a.backend, a.kernel.as_deref()) {
        (BackendName::Vm, Some(k)) => vm_backend(Some(k)),
        (BackendName::Sim, Some(k)) => {
            qdisc_sim::SimBackend::for_kernel(k).map(|b| Box::new(b) as Box<dyn qdisc_scenario::Backend>)
        }
        (_, Some(_)) => {
            Err("--kernel chooses the kernel of --backend vm or sim (the host backend runs this machine's)".into())
        }
        (b, None) => backend_by_name(b.to_possible_value().expect("not skipped").get_name()),
    };
    let backend = match backend {
        Ok(b) => b,
        Err(e) => {
            errln!("qdisc-lab run: {e}");
            return 2;
        }
    };
    let mut scenario = match load(&a.scenario, &a.set) {
        Ok(s) => s,
        Err(e) => {
            errln!("qdisc-lab run: {e}");
            return 2;
        }
    };
    if let Some(seed) = a.seed {
        scenario.seed = seed;
    }
    let opts = RunOptions { tc: a.tc.clone(), ..RunOptions::default() };
    stop_on_signals(&opts);
    let mut progress = LineProgress::new();
    match backend.run(&scenario, &opts, &mut progress) {
        Ok(result) => {
            // The run is over and torn down: an error writing the report changes nothing
            // but the exit status, after the files below are written.
            let mut stdout = crate::out::Stdout::new("qdisc-lab run");
            stdout.write("the report", &report(&result));
            if let Some(path) = &a.json {
                if let Err(e) = crate::out::write_json(path, &result) {
                    errln!("qdisc-lab run: cannot write {}: {e}", path.display());
                    return 1;
                }
            }
            if let Err(e) = crate::outputs::write(&a.outputs, &result) {
                errln!("qdisc-lab run: {e}");
                return 1;
            }
            stdout.status(0)
        }
        Err(e) => {
            errln!("qdisc-lab run: {}", error_text(&e));
            exit_code(&e)
        }
    }
}

/// A scenario file with `--set` overrides applied (qdisc_scenario::overrides).
fn load(path: &std::path::Path, sets: &[String]) -> Result<Scenario, String> {
    if sets.is_empty() {
        return Scenario::load(path).map_err(|e| e.to_string());
    }
    let overrides =
        sets.iter().map(|s| Override::parse(s).map_err(|e| format!("--set {e}"))).collect::<Result<Vec<_>, _>>()?;
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("{file}: cannot read: {e}"))?;
    let text = String::from_utf8(bytes.clone())
        .map_err(|_| Scenario::from_bytes(&bytes, &file).err().map(|e| e.to_string()).unwrap_or_default())?;
    overrides::load(&text, &file, &overrides).map(|(s, _)| s)
}

/// iperf3's `unit_snprintf` number: 2 decimals below 10, 1 below 100, else none.
fn num(v: f64) -> String {
    if v < 9.995 {
        format!("{v:4.2}")
    } else if v < 99.95 {
        format!("{v:4.1}")
    } else {
        format!("{v:4.0}")
    }
}

/// Bytes as iperf3 prints them (1024-based: KBytes, MBytes, GBytes).
pub fn bytes(b: u64) -> String {
    let v = b as f64;
    let k = 1024.0;
    if v >= k * k * k {
        format!("{} GBytes", num(v / (k * k * k)))
    } else if v >= k * k {
        format!("{} MBytes", num(v / (k * k)))
    } else if v >= k {
        format!("{} KBytes", num(v / k))
    } else {
        format!("{} Bytes", num(v))
    }
}

/// Bits per second as iperf3 prints them (1000-based).
pub fn bitrate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{} Gbits/sec", num(bps / 1e9))
    } else if bps >= 1e6 {
        format!("{} Mbits/sec", num(bps / 1e6))
    } else if bps >= 1e3 {
        format!("{} Kbits/sec", num(bps / 1e3))
    } else {
        format!("{} bits/sec", num(bps))
    }
}

/// Whole-second groups of 100 ms intervals (on the traffic's own clock, like iperf3 -i 1).
fn per_second(ivs: &[Interval], start: f64) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::new();
    for iv in ivs {
        let k = ((iv.start - start) + 1e-6).floor();
        let s = start + k;
        match out.last_mut() {
            Some(last) if (last.start - s).abs() < 1e-9 => {
                last.end = iv.end;
                last.bytes += iv.bytes;
                last.retransmits = match (last.retransmits, iv.retransmits) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                last.packets = match (last.packets, iv.packets) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
            }
            _ => out.push(Interval { start: s, ..iv.clone() }),
        }
    }
    for iv in &mut out {
        iv.bits_per_second = iv.bytes as f64 * 8.0 / (iv.end - iv.start).max(1e-9);
    }
    out
}

fn interval_line(out: &mut String, id: &str, iv: &Interval, tcp: bool) {
    let _ = write!(
        out,
        "[{id:>3}] {:6.2}-{:<6.2} sec  {}  {}",
        iv.start,
        iv.end,
        bytes(iv.bytes),
        bitrate(iv.bits_per_second)
    );
    if tcp {
        let _ = write!(out, "  {:>4}", iv.retransmits.map(|r| r.to_string()).unwrap_or_default());
    } else if let Some(p) = iv.packets {
        let _ = write!(out, "  {p}");
    }
    out.push('\n');
}

fn traffic_report(out: &mut String, t: &TrafficResult, r: &RunResult) {
    let tcp = t.kind == "tcp";
    let _ = write!(out, "\ntraffic[{}]: {} {} → {} ({})", t.traffic, t.kind, t.from, t.to, t.dst);
    if tcp {
        let _ = write!(out, ", {} flow{}", t.flows, if t.flows == 1 { "" } else { "s" });
        if let Some(cc) = &t.cc {
            let _ = write!(out, ", {cc}");
        }
    }
    let _ = writeln!(out, " (intervals of 1 s here; {} s in the JSON)", r.metadata.interval_s);
    let header = if tcp {
        "[ ID] Interval           Transfer     Bitrate         Retr\n"
    } else {
        "[ ID] Interval           Transfer     Bitrate         Total Datagrams\n"
    };
    out.push_str(header);
    let per: Vec<Vec<Interval>> = t.streams.iter().map(|s| per_second(&s.intervals, t.start_s)).collect();
    let sum = per_second(&t.sum, t.start_s);
    for (k, s) in sum.iter().enumerate() {
        for (st, ivs) in t.streams.iter().zip(&per) {
            if let Some(iv) = ivs.get(k) {
                interval_line(out, &st.id.to_string(), iv, tcp);
            }
        }
        if t.streams.len() > 1 {
            interval_line(out, "SUM", s, tcp);
        }
    }
    out.push_str("- - - - - - - - - - - - - - - - - - - - - - - - -\n");
    if tcp {
        out.push_str(header);
    } else {
        out.push_str("[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n");
    }
    let mut totals: Vec<(String, &qdisc_scenario::result::Summary, &qdisc_scenario::result::Summary)> =
        t.streams.iter().map(|s| (s.id.to_string(), &s.sender, &s.receiver)).collect();
    if t.streams.len() > 1 {
        totals.push(("SUM".into(), &t.sender, &t.receiver));
    }
    for (id, snd, rcv) in totals {
        let (a, b) = (t.start_s, t.start_s + snd.seconds);
        if tcp {
            let _ = writeln!(
                out,
                "[{id:>3}] {a:6.2}-{b:<6.2} sec  {}  {}  {:>4}             sender",
                bytes(snd.bytes),
                bitrate(snd.bits_per_second),
                snd.retransmits.unwrap_or(0)
            );
            let _ = writeln!(
                out,
                "[{id:>3}] {a:6.2}-{:<6.2} sec  {}  {}                  receiver",
                t.start_s + rcv.seconds,
                bytes(rcv.bytes),
                bitrate(rcv.bits_per_second)
            );
        } else {
            let _ = writeln!(
                out,
                "[{id:>3}] {a:6.2}-{b:<6.2} sec  {}  {}  {:.3} ms  0/{} (0%)  sender",
                bytes(snd.bytes),
                bitrate(snd.bits_per_second),
                0.0,
                snd.packets.unwrap_or(0)
            );
            let (lost, total) = (rcv.lost_packets.unwrap_or(0), rcv.packets.unwrap_or(0));
            let pct = if total > 0 { lost as f64 * 100.0 / total as f64 } else { 0.0 };
            let _ = writeln!(
                out,
                "[{id:>3}] {a:6.2}-{:<6.2} sec  {}  {}  {:.3} ms  {lost}/{total} ({})  receiver",
                t.start_s + rcv.seconds,
                bytes(rcv.bytes),
                bitrate(rcv.bits_per_second),
                rcv.jitter_ms.unwrap_or(0.0),
                qdisc::tc::units::fmt_g(pct, 2) + "%"
            );
        }
    }
}

/// The human report of a result.
pub fn report(r: &RunResult) -> String {
    let mut out = String::new();
    let m = &r.metadata;
    let _ = writeln!(out, "qdisc-lab run: {} ({})", r.scenario.name, r.scenario.file);
    let _ = write!(out, "backend {}, kernel {}, {}", m.backend, m.kernel, m.iproute2);
    for (k, v) in &m.tools {
        if k != "tc" {
            let _ = write!(out, ", {v}");
        }
    }
    out.push('\n');
    if let Some(w) = &r.wallclock {
        let _ = writeln!(out, "setup {:.2} s, traffic {:.2} s, teardown {:.2} s", w.setup_s, w.run_s, w.teardown_s);
    }
    for l in &m.links {
        let _ = writeln!(
            out,
            "link {} ({}) — {} ({}): {}",
            l.between[0], l.addresses[0], l.between[1], l.addresses[1], l.realised_by
        );
    }
    for t in &r.throughput {
        traffic_report(&mut out, t, r);
    }
    for p in &r.rtt {
        let _ = writeln!(
            out,
            "\n--- traffic[{}]: ping {} → {} ({}) every {} ms ---",
            p.traffic,
            p.from,
            p.to,
            p.dst,
            qdisc::tc::units::fmt_g(p.interval_s * 1e3, 6)
        );
        // Requests still in flight when ping was stopped are not losses.
        let sent = p.transmitted - p.in_flight_at_end.min(p.transmitted);
        let loss = if sent > 0 { sent.saturating_sub(p.received) as f64 * 100.0 / sent as f64 } else { 0.0 };
        let _ = writeln!(
            out,
            "{} packets transmitted, {} received, {}% packet loss ({} still in flight at the end, not counted)",
            sent,
            p.received,
            qdisc::tc::units::fmt_g(loss, 6),
            p.in_flight_at_end
        );
        if let Some(s) = &p.stats {
            let _ = writeln!(out, "rtt min/avg/max/mdev = {:.3}/{:.3}/{:.3}/{:.3} ms", s.min, s.avg, s.max, s.mdev);
            let _ = writeln!(out, "rtt p50/p90/p99 = {:.3}/{:.3}/{:.3} ms", s.p50, s.p90, s.p99);
        }
    }
    for d in &r.tc.end {
        let who =
            if d.host.starts_with("link[") { format!("the wire of {}", d.host) } else { format!("host {}", d.host) };
        let _ = writeln!(out, "\n--- tc -s qdisc show dev {} ({who}) ---", d.dev);
        out.push_str(d.qdisc_text.as_deref().unwrap_or(""));
        // The wire's tbf/netem have a dummy class of no interest; the hosts' classes are.
        let wire = d.host.starts_with("link[");
        if let Some(c) = d.class_text.as_deref().filter(|c| !c.trim().is_empty() && !wire) {
            let _ = writeln!(out, "--- tc -s class show dev {} ({who}) ---", d.dev);
            out.push_str(c);
        }
    }
    cpu_report(&mut out, &r.cpu);
    for w in &r.warnings {
        let _ = writeln!(out, "\nwarning: {w}");
    }
    out
}

/// Mean over CPUs of (user, sys, softirq, busy = 100 − idle), percent; `None` without
/// CPUs.
pub fn cpu_mean(cpus: &[CpuTime]) -> Option<[f64; 4]> {
    if cpus.is_empty() {
        return None;
    }
    let n = cpus.len() as f64;
    let mean = |f: fn(&CpuTime) -> f64| cpus.iter().map(f).sum::<f64>() / n;
    Some([mean(|c| c.user), mean(|c| c.sys), mean(|c| c.softirq), mean(|c| 100.0 - c.idle)])
}

/// How a host's CPU figures were obtained, as the reports name it: "model" (the
/// simulator's CPU model with its profile) or what else `source` says.
pub fn cpu_source(h: &HostCpu) -> String {
    if h.profile.is_empty() {
        h.source.clone()
    } else {
        format!("{}, profile {}", h.source, h.profile)
    }
}

/// Locks shown in reports: at most `n` that were contended, most waited-for first.
pub fn contended_locks(h: &HostCpu, n: usize) -> Vec<&qdisc_scenario::result::LockStats> {
    let mut locks: Vec<_> = h.locks.iter().filter(|l| l.contended > 0).collect();
    locks.sort_by(|x, y| y.wait_s.total_cmp(&x.wait_s));
    locks.truncate(n);
    locks
}

/// Functions shown in reports: the `n` largest shares, leaving out those that would
/// read 0.00%.
pub fn top_functions(h: &HostCpu, n: usize) -> Vec<&qdisc_scenario::result::FunctionShare> {
    let mut f: Vec<_> = h.functions.iter().filter(|f| f.share >= 0.005).collect();
    f.sort_by(|x, y| y.share.total_cmp(&x.share));
    f.truncate(n);
    f
}

/// The CPU block of every host with CPU figures (nothing when there are none), after a
/// line saying that "model" figures are the simulator's CPU model, not a measurement:
///
/// ```text
/// cpu router (48 cpus, model, profile default): busy 13.1% (user 0.0 sys 0.0 softirq 13.1), per cpu 0.0–96.2%
///   lock eth1 tx-0 qdisc busylock: 4381192 acquisitions, 58.6% contended, waited 2.262 s
///   perf top (model):  27.62% native_queued_spin_lock_slowpath
///                      18.11% ip_forward
///   rx_discards: eth0 559994
/// ```
///
/// Busy time is 100 − idle, averaged over the host's CPUs (the range over its CPUs
/// after it); then the three most waited-for contended locks (or how many locks none of
/// which was contended), the eight largest functions and the NICs that discarded frames.
pub fn cpu_report(out: &mut String, hosts: &[HostCpu]) {
    if hosts.is_empty() {
        return;
    }
    out.push('\n');
    if hosts.iter().any(|h| h.source == "model") {
        out.push_str("CPU figures marked \"model\" come from the simulator's CPU model, not a measurement.\n");
    }
    for h in hosts {
        let model = h.source == "model";
        let _ = write!(out, "cpu {} ({} cpu{}, {})", h.host, h.cpus, if h.cpus == 1 { "" } else { "s" }, cpu_source(h));
        if let Some([user, sys, softirq, busy]) = cpu_mean(&h.total) {
            let _ = write!(out, ": busy {busy:.1}% (user {user:.1} sys {sys:.1} softirq {softirq:.1})");
            if h.total.len() > 1 {
                let busy = h.total.iter().map(|c| 100.0 - c.idle);
                let (lo, hi) = busy.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), b| (lo.min(b), hi.max(b)));
                let _ = write!(out, ", per cpu {lo:.1}–{hi:.1}%");
            }
        }
        out.push('\n');
        let locks = contended_locks(h, 3);
        if locks.is_empty() && !h.locks.is_empty() {
            let n = h.locks.len();
            let _ = writeln!(out, "  locks: none contended ({n} lock{})", if n == 1 { "" } else { "s" });
        }
        for l in locks {
            let _ = writeln!(
                out,
                "  lock {}: {} acquisitions, {:.1}% contended, waited {:.3} s",
                l.name,
                l.acquisitions,
                l.contended as f64 * 100.0 / l.acquisitions.max(1) as f64,
                l.wait_s
            );
        }
        let head = if model { "  perf top (model): " } else { "  perf top: " };
        for (i, f) in top_functions(h, 8).into_iter().enumerate() {
            let lead = if i == 0 { head.to_string() } else { " ".repeat(head.chars().count()) };
            let _ = writeln!(out, "{lead}{:6.2}% {}", f.share, f.symbol);
        }
        let discards: Vec<String> =
            h.rx_discards.iter().filter(|(_, &n)| n > 0).map(|(dev, n)| format!("{dev} {n}")).collect();
        if !discards.is_empty() {
            let _ = writeln!(out, "  rx_discards: {}", discards.join(", "));
        }
        net_lines(out, &h.net);
    }
}

/// The receive side's drops and veth BQL of a CPU block (only what is not zero).
fn net_lines(out: &mut String, n: &qdisc_scenario::result::NetStats) {
    if !n.namespaces.is_empty() {
        let _ = writeln!(out, "  namespaces on these CPUs: {}", n.namespaces.join(", "));
    }
    if !n.tx_dropped.is_empty() {
        let d: Vec<String> = n.tx_dropped.iter().map(|(dev, k)| format!("{dev} {k}")).collect();
        let _ = writeln!(out, "  tx_dropped: {}", d.join(", "));
    }
    if n.backlog_dropped > 0 {
        let _ = writeln!(out, "  backlog drops (netdev_max_backlog): {}", n.backlog_dropped);
    }
    if n.tx_queue_changes > 0 {
        let _ = writeln!(out, "  socket tx queue changes (ooo_okay + XPS): {}", n.tx_queue_changes);
    }
    for q in n.bql.iter().filter(|q| q.samples.iter().any(|s| s.inflight_max > 0)) {
        let last = q.samples.last().map_or(0, |s| s.limit);
        let most = q.samples.iter().map(|s| s.inflight_max).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "  bql {} tx-{} ({}): limit {last} B at the end, at most {most} B in flight",
            q.dev, q.txq, q.variant
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_units() {
        assert_eq!(bytes(11_744_051), "11.2 MBytes");
        assert_eq!(bytes(1_048_576 * 120), " 120 MBytes");
        assert_eq!(bytes(5 * 1024 * 1024 * 1024 / 2), "2.50 GBytes");
        assert_eq!(bitrate(94_100_000.0), "94.1 Mbits/sec");
        assert_eq!(bitrate(9_650_000_000.0), "9.65 Gbits/sec");
    }

    fn cpu_time(cpu: u32, user: f64, sys: f64, softirq: f64) -> CpuTime {
        CpuTime { cpu, user, sys, softirq, idle: 100.0 - user - sys - softirq }
    }

    /// A 4-cpu router of the model with contended locks, nine functions and rx
    /// discards, and a 1-cpu host whose locks were never contended.
    fn hosts() -> Vec<HostCpu> {
        use qdisc_scenario::result::{FunctionShare, LockStats};
        let lock = |name: &str, acquisitions, contended, wait_s| LockStats {
            name: name.into(),
            acquisitions,
            contended,
            wait_s,
        };
        let f = |symbol: &str, share| FunctionShare { symbol: symbol.into(), seconds: share / 10.0, share };
        vec![
            HostCpu {
                host: "router".into(),
                cpus: 4,
                source: "model".into(),
                profile: "default".into(),
                total: vec![
                    cpu_time(0, 0.0, 1.0, 99.0),
                    cpu_time(1, 0.0, 0.0, 97.2),
                    cpu_time(2, 0.0, 0.2, 98.0),
                    cpu_time(3, 0.0, 0.0, 95.8),
                ],
                intervals: vec![],
                locks: vec![
                    lock("eth1 tx-0 qdisc busylock", 190_791, 190_791, 3.994),
                    lock("eth1 tx-0 _xmit_lock", 90_000, 0, 0.0),
                    lock("eth1 tx-0 qdisc root lock", 381_582, 95_000, 0.25),
                    lock("eth0 rx napi lock", 1000, 1, 0.000001),
                    lock("eth0 tx-0 qdisc root lock", 1000, 2, 0.00002),
                ],
                functions: vec![
                    f("native_queued_spin_lock_slowpath", 91.64),
                    f("ip_forward", 1.76),
                    f("fq_codel_enqueue", 1.5),
                    f("ip_rcv", 1.2),
                    f("napi_gro_receive", 1.1),
                    f("__dev_queue_xmit", 1.0),
                    f("fq_codel_dequeue", 0.9),
                    f("sch_direct_xmit", 0.5),
                    f("mlx5e_xmit", 0.4),
                ],
                rx_discards: [("eth0".to_string(), 1_850_899), ("eth1".to_string(), 0)].into(),
                net: Default::default(),
            },
            HostCpu {
                host: "client".into(),
                cpus: 1,
                source: "measured".into(),
                profile: String::new(),
                total: vec![cpu_time(0, 2.0, 3.0, 5.04)],
                intervals: vec![],
                locks: vec![lock("eth0 tx-0 _xmit_lock", 10, 0, 0.0)],
                // A share that would read 0.00% is left out.
                functions: vec![f("[user] application", 99.996), f("icmp_rcv", 0.004)],
                rx_discards: Default::default(),
                net: Default::default(),
            },
        ]
    }

    #[test]
    fn cpu_blocks() {
        let mut out = String::new();
        cpu_report(&mut out, &hosts());
        assert_eq!(
            out,
            "\n\
             CPU figures marked \"model\" come from the simulator's CPU model, not a measurement.\n\
             cpu router (4 cpus, model, profile default): busy 97.8% (user 0.0 sys 0.3 softirq 97.5), per cpu 95.8–100.0%\n\
             \x20 lock eth1 tx-0 qdisc busylock: 190791 acquisitions, 100.0% contended, waited 3.994 s\n\
             \x20 lock eth1 tx-0 qdisc root lock: 381582 acquisitions, 24.9% contended, waited 0.250 s\n\
             \x20 lock eth0 tx-0 qdisc root lock: 1000 acquisitions, 0.2% contended, waited 0.000 s\n\
             \x20 perf top (model):  91.64% native_queued_spin_lock_slowpath\n\
             \x20                     1.76% ip_forward\n\
             \x20                     1.50% fq_codel_enqueue\n\
             \x20                     1.20% ip_rcv\n\
             \x20                     1.10% napi_gro_receive\n\
             \x20                     1.00% __dev_queue_xmit\n\
             \x20                     0.90% fq_codel_dequeue\n\
             \x20                     0.50% sch_direct_xmit\n\
             \x20 rx_discards: eth0 1850899\n\
             cpu client (1 cpu, measured): busy 10.0% (user 2.0 sys 3.0 softirq 5.0)\n\
             \x20 locks: none contended (1 lock)\n\
             \x20 perf top: 100.00% [user] application\n"
        );
        // No CPU figures (the kernel backends): no block at all.
        let mut out = String::new();
        cpu_report(&mut out, &[]);
        assert_eq!(out, "");
    }
}
