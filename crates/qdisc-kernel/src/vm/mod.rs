//! The VM backend: a scenario on a chosen Debian kernel, booted under qemu.
//!
//! ```text
//! host                                                 guest (qemu, ≤ 64 vCPUs, 1 GiB)
//! ─────────────────────────────────────────────        ─────────────────────────────────────────
//! kernel::fetch     Debian kernel .deb → cache          PID 1 = the qdisc-lab binary (guest::main)
//! image::base       modules + Debian userland → cpio     mounts /proc /sys /dev /run /tmp
//! image::program    this binary + its libs → cpio        HostBackend.run(scenario) — namespaces,
//! image::assemble   + /lab/run.json → initrd               wire, tc, iperf3, ping, snapshots
//! qemu (PVH boot)   ─── serial console: progress ──►      @@QDL:PHASE / RUN markers
//!                   ◄── virtio-serial port: result ──     Envelope (RunResult or error) as JSON
//!                   qemu exits when the guest powers off
//! ```
//!
//! 1. **Kernel** ([`kernel`]): `--kernel 6.12|6.1|PACKAGE|FILE.deb`, downloaded once with a
//!    private apt configuration ([`apt`]), unpacked, indexed with depmod, the ELF image
//!    extracted for qemu's direct PVH entry (no firmware, no in-guest decompression).
//! 2. **Initramfs** ([`image`]): built from Debian packages and cached, keyed by its
//!    inputs; the running qdisc-lab binary goes in as the guest's init, so the guest runs
//!    the scenario with the host backend's code — link realisation, tool drivers and the
//!    [`RunResult`] are the same as `--backend host`, only the kernel differs.
//! 3. **Boot** ([`qemu`]): KVM when a VMX/SVM KVM is there, else TCG; the console is
//!    followed live for progress; results come back on a virtio-serial port ([`wire`]).
//! 4. **Result**: `metadata.backend = "vm"`, `metadata.kernel` the guest's `uname -r`,
//!    the kernel package and qemu in `metadata.tools`; `wallclock.setup_s` counts from
//!    the call to the first packet (preparing and booting the VM included) and
//!    `teardown_s` until qemu has exited. Errors keep their kind: a tc line that fails in
//!    the guest is [`RunError::TcScript`] with the scenario's `FILE:LINE`.
//!
//! qemu always dies with the run: it is a [`Proc`] (killed on drop, registered for
//! [`crate::proc::emergency_cleanup`]), the run's scratch directory is removed on drop,
//! cancellation ([`RunOptions::cancel`]) and timeouts kill it at once.
//!
//! The cache is `${QDL_CACHE:-~/.cache/qdisc-lab}/vm`. Environment knobs: `QDL_VM_ACCEL`
//! (kvm|tcg), `QDL_VM_REFRESH=1` (ask the archive again instead of reusing cached
//! choices), `QDL_VM_KEEP=1` (keep the run directory: console log, initrd, result),
//! `QDL_VM_APPEND` (more kernel parameters, e.g. `ignore_loglevel`), `QDL_VM_TIMING=1`
//! (print where the time went), `QDL_DEBIAN_MIRROR`, `QDL_VM_TC` (a tc built for this
//! machine that the guest runs instead of its Debian iproute2's — e.g.
//! scripts/build-iproute2.sh's 6.18, the first that knows dualpi2; with its libraries).

pub mod apt;
pub mod guest;
pub mod image;
pub mod kernel;
pub mod qemu;
pub mod wire;

use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use qdisc_scenario::{Backend, Progress, RunError, RunOptions, RunResult, Scenario};

use crate::proc::Proc;
pub use kernel::KernelChoice;
use qemu::{Accel, Console, QemuSpec};
use wire::{Envelope, GuestRun, Marker, ENVELOPE_FORMAT, RUN_FORMAT};

/// Where the guest program sits in the image.
pub const GUEST_INIT: &str = "usr/bin/qdisc-lab";
/// Where a tc given with `QDL_VM_TC` sits in the image (the guest prefers it).
pub const GUEST_TC: &str = "usr/local/sbin/tc";
/// The argument that makes the guest program act as the guest's init
/// (`qdisc-lab vm-guest`, which calls [`guest::main`]).
pub const GUEST_ARG: &str = "vm-guest";

/// Guest size: vCPUs at most (see [`guest_cpus`]), memory.
const MAX_CPUS: u32 = 64;
const MEMORY_MIB: u32 = 1024;
/// From starting qemu to the guest's init, at most.
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// From the guest's init to its end, beyond the scenario's duration.
const RUN_SLACK: Duration = Duration::from_secs(120);

static RUNS: AtomicU32 = AtomicU32::new(0);

/// `${QDL_CACHE:-~/.cache/qdisc-lab}/vm`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("QDL_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/qdisc-lab")
    });
    base.join("vm")
}

/// The guest's vCPUs (`-smp`): the largest host's `cpus`, but no more than this
/// machine's online CPUs (more vCPUs than cores only slow an emulated guest down, and
/// distort a KVM one's timing) nor [`MAX_CPUS`]. Hosts with more cores than that run on
/// fewer, and the guest's result says so.
pub fn guest_cpus(s: &Scenario) -> u32 {
    let want = s.hosts.iter().map(|h| h.cpus).max().unwrap_or(1);
    let machine = crate::host::settings::machine_cpus().len() as u32;
    want.min(machine).clamp(1, MAX_CPUS)
}

/// Timings of the last run, for measurements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmTiming {
    pub accel: String,
    /// Preparing: kernel, initramfs, the run's initrd.
    pub prepare_s: f64,
    /// qemu started → the guest's init printed its first line.
    pub qemu_to_init_s: Option<f64>,
    /// qemu started → traffic started in the guest ("boot to first packet").
    pub qemu_to_traffic_s: Option<f64>,
    /// The guest's uptime when its init started.
    pub guest_init_uptime_s: Option<f64>,
    /// qemu started → qemu exited.
    pub qemu_s: f64,
    /// The whole run (the `Backend::run` call).
    pub total_s: f64,
}

/// The VM backend.
#[derive(Debug)]
pub struct VmBackend {
    pub kernel: KernelChoice,
    /// The program the guest runs as its init with [`GUEST_ARG`]: a qdisc-lab binary
    /// (the command line passes its own executable).
    pub guest_program: PathBuf,
    /// More kernel parameters (after the backend's own, so they can override them);
    /// `QDL_VM_APPEND` by default.
    pub kernel_args: String,
    /// The guest's tc instead of Debian's (`QDL_VM_TC` by default).
    pub tc: Option<PathBuf>,
    timing: Mutex<Option<VmTiming>>,
}

impl VmBackend {
    pub fn new(kernel: KernelChoice, guest_program: PathBuf) -> VmBackend {
        let kernel_args = std::env::var("QDL_VM_APPEND").unwrap_or_default();
        let tc = std::env::var_os("QDL_VM_TC").map(PathBuf::from);
        VmBackend { kernel, guest_program, kernel_args, tc, timing: Mutex::new(None) }
    }

    /// How long the last run's steps took.
    pub fn last_timing(&self) -> Option<VmTiming> {
        self.timing.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The run's scratch directory, removed on drop (unless `QDL_VM_KEEP` is set).
struct RunDir(PathBuf);

impl RunDir {
    /// Removed on drop, and by [`crate::proc::emergency_cleanup`] (unless kept).
    fn new(dir: PathBuf) -> RunDir {
        if std::env::var_os("QDL_VM_KEEP").is_none() {
            crate::proc::register_dir(&dir);
        }
        RunDir(dir)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::env::var_os("QDL_VM_KEEP").is_some() {
            // (not eprintln!: a closed terminal must not make a drop panic)
            let _ = writeln!(std::io::stderr(), "qdisc-lab: kept the VM run directory {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
            crate::proc::forget_dir(&self.0);
        }
    }
}

/// An exclusive lock on the cache while it is filled (concurrent runs wait).
struct CacheLock(std::fs::File);

impl CacheLock {
    fn take(vm: &Path) -> Result<CacheLock, String> {
        std::fs::create_dir_all(vm).map_err(|e| format!("{}: {e}", vm.display()))?;
        let f = std::fs::File::create(vm.join(".lock")).map_err(|e| format!("{}: {e}", vm.display()))?;
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!("locking {}: {}", vm.display(), std::io::Error::last_os_error()));
        }
        Ok(CacheLock(f))
    }
}

impl Drop for CacheLock {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn qemu_version(qemu: &Path) -> String {
    Command::new(qemu)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_default()
}

/// The end of a console log for an error message (a panic if there is one).
fn console_report(text: &str) -> String {
    if let Some(p) = wire::panic_excerpt(text, 40) {
        return format!("the guest kernel panicked:\n{p}");
    }
    let tail = wire::console_tail(text, 25);
    if tail.is_empty() {
        "its console stayed empty (the kernel boots `quiet`: QDL_VM_APPEND=ignore_loglevel shows everything)".into()
    } else {
        format!("its console ends:\n{tail}")
    }
}

/// Why a boot that gave no result is run again: a crash before the guest's init ran
/// (once), or under TCG an `Oops: int3` at any time (twice at most); with the crash's
/// first line.
#[derive(Debug, PartialEq, Eq)]
enum Rerun {
    Early(String),
    Int3(String),
}

fn rerun(
    console: &str,
    got_result: bool,
    init_ran: bool,
    tcg: bool,
    early_done: bool,
    int3_done: usize,
) -> Option<Rerun> {
    if got_result {
        return None;
    }
    let oops = wire::kernel_crash(console)?;
    if !init_ran && !early_done {
        Some(Rerun::Early(oops))
    } else if tcg && oops.contains("Oops: int3") && int3_done < 2 {
        Some(Rerun::Int3(oops))
    } else {
        None
    }
}

/// One boot of the guest, followed to qemu's exit.
struct Boot {
    qemu: Proc,
    status: std::process::ExitStatus,
    console: String,
    /// The guest's envelope (from the result port, else the console).
    json: Option<Vec<u8>>,
    t_qemu: Instant,
    /// qemu started → the guest's init printed its first line, and the guest's uptime then.
    init: Option<(Duration, f64)>,
    /// qemu started → traffic started in the guest, and the wall clock then.
    t_traffic: Option<Duration>,
    traffic_wall: Option<SystemTime>,
    t_exit: Instant,
}

/// Start qemu and follow its console (progress, cancellation, timeouts) until it exits.
fn boot_guest(
    qemu_bin: &Path,
    args: &[String],
    dir: &Path,
    result_file: &Path,
    duration: Duration,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<Boot, RunError> {
    progress.phase("booting");
    let mut cmd = Command::new(qemu_bin);
    cmd.args(args);
    let t_qemu = Instant::now();
    let mut qemu = Proc::spawn(cmd, "qemu", dir, "console")
        .map_err(|e| RunError::Failed(format!("starting {}: {e}", qemu_bin.display())))?;
    let mut console = Console::new(qemu.stdout.clone());
    let (mut init, mut t_traffic, mut traffic_wall) = (None, None, None);
    let limit = duration + RUN_SLACK;
    let fail = |what: String, console: &Console, qemu: &mut Proc| {
        qemu.stop(Duration::from_millis(100));
        RunError::Failed(format!("{what}; {}", console_report(&console.all())))
    };
    let status = loop {
        if opts.cancelled() {
            qemu.stop(Duration::from_millis(100));
            return Err(RunError::Interrupted);
        }
        for line in console.poll() {
            match wire::parse_marker(&line) {
                Some(Marker::Init { uptime, .. }) => init = Some((t_qemu.elapsed(), uptime)),
                Some(Marker::Phase(p)) => {
                    if p == "traffic" && t_traffic.is_none() {
                        t_traffic = Some(t_qemu.elapsed());
                        traffic_wall = Some(SystemTime::now());
                    }
                    progress.phase(&p);
                }
                Some(Marker::Running { elapsed, total }) => progress.running(elapsed, total),
                _ => {}
            }
        }
        if let Some(st) = qemu.exited() {
            console.poll();
            break st;
        }
        let now = t_qemu.elapsed();
        match init {
            None if now > BOOT_TIMEOUT => {
                return Err(fail(
                    format!("the guest did not start within {} s", BOOT_TIMEOUT.as_secs()),
                    &console,
                    &mut qemu,
                ))
            }
            Some((ti, _)) if now > ti + limit => {
                return Err(fail(
                    format!("the guest was still running {} s after the scenario's end", RUN_SLACK.as_secs()),
                    &console,
                    &mut qemu,
                ))
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let t_exit = Instant::now();
    let text = console.all();
    let port = std::fs::read(result_file).unwrap_or_default();
    let json = wire::unframe(&port).map(<[u8]>::to_vec).or_else(|| wire::result_from_console(&text));
    Ok(Boot { qemu, status, console: text, json, t_qemu, init, t_traffic, traffic_wall, t_exit })
}

/// What the guest reported about a scenario the kernel cannot run, said for a VM.
fn vm_wording(message: &str) -> String {
    message.replace("the running kernel (", "the guest kernel (").replace(
        "Run it on a kernel that has them: --backend vm (a Debian kernel under qemu).",
        "Choose a kernel that has them: --kernel 6.12, 6.1 or a linux-image package.",
    )
}

/// Turn the guest's envelope into the run's outcome, for a VM.
pub fn outcome_for_vm(env: Envelope, release: &str) -> Result<RunResult, RunError> {
    match env.outcome.into_run() {
        Err(RunError::Unsupported(m)) => Err(RunError::Unsupported(vm_wording(&m))),
        Err(RunError::Failed(m)) => Err(RunError::Failed(vm_wording(&m))),
        Err(RunError::TcScript { at, host, command, stderr, hint }) => Err(RunError::TcScript {
            at,
            host,
            command,
            stderr,
            hint: hint.map(|_| {
                format!("Debian's kernel {release} lacks what this line needs; try another --kernel (6.12, 6.1 or a linux-image package).")
            }),
        }),
        other => other,
    }
}

/// A qdisc kind the scenario adds whose module the kernel has neither as a module nor
/// built in: refused before booting, with the lines that need it (the guest loads the
/// others before its tc scripts run: [`guest`]).
fn refuse_lacking_modules(s: &Scenario, k: &kernel::Kernel) -> Result<(), RunError> {
    let read = |n: &str| std::fs::read_to_string(k.modules.join(n)).unwrap_or_default();
    let need = crate::host::tc::needed_qdiscs(s);
    let modules: Vec<(String, &Vec<String>)> =
        need.iter().filter_map(|(kind, why)| Some((crate::host::tc::qdisc_module(kind)?, why))).collect();
    let lacking =
        image::lacking_modules(&read("modules.dep"), &read("modules.builtin"), modules.iter().map(|m| m.0.as_str()));
    if lacking.is_empty() {
        return Ok(());
    }
    let mut msg = format!("the guest kernel ({}, {}) cannot run this scenario:", k.release, k.package);
    for (m, why) in modules.iter().filter(|m| lacking.contains(&m.0.as_str())) {
        msg.push_str(&format!("\n  no {m} module, and not built in; needed by:"));
        for w in why.iter() {
            msg.push_str(&format!("\n    {w}"));
        }
    }
    msg.push_str(
        "\nChoose a kernel that has them: --kernel 6.12, 6.1, a linux-image package or a .deb file \
         (scripts/build-kernel-deb.sh builds Debian's 6.18 with sch_dualpi2).",
    );
    Err(RunError::Unsupported(msg))
}

impl Backend for VmBackend {
    fn name(&self) -> &'static str {
        "vm"
    }

    fn run(&self, s: &Scenario, opts: &RunOptions, progress: &mut dyn Progress) -> Result<RunResult, RunError> {
        let r = self.run_inner(s, opts, progress);
        progress.finish();
        r
    }
}

impl VmBackend {
    fn run_inner(&self, s: &Scenario, opts: &RunOptions, progress: &mut dyn Progress) -> Result<RunResult, RunError> {
        let t_call = Instant::now();
        let mut timing = VmTiming::default();
        let cancelled = || if opts.cancelled() { Err(RunError::Interrupted) } else { Ok(()) };
        // What no kernel would do (the guest refuses it too): before booting one.
        crate::host::settings::refuse_unsupported(s)?;
        if std::env::consts::ARCH != "x86_64" {
            return Err(RunError::Unsupported(format!(
                "the vm backend boots amd64 Debian kernels with this machine's amd64 packages; this is {}",
                std::env::consts::ARCH
            )));
        }
        let qemu_bin = which("qemu-system-x86_64").ok_or_else(|| {
            RunError::Unsupported("the vm backend needs qemu-system-x86_64 (apt-get install qemu-system-x86)".into())
        })?;
        let accel = qemu::detect_accel().map_err(RunError::Unsupported)?;
        timing.accel = accel.name().into();
        if !self.guest_program.is_file() {
            return Err(RunError::Failed(format!("the guest program {} does not exist", self.guest_program.display())));
        }

        // Kernel and initramfs (cached; one process at a time fills the cache).
        let vm = cache_dir();
        // A Ctrl-C also reaches apt-get and friends (same process group): their failure
        // is then the interruption.
        let prep = |e: String| {
            if opts.cancelled() {
                RunError::Interrupted
            } else {
                RunError::Failed(format!("preparing the VM: {e}"))
            }
        };
        let (kernel, base, program) = {
            let _lock = CacheLock::take(&vm).map_err(prep)?;
            progress.phase("fetching kernel");
            let mut say = |m: &str| progress.phase(m);
            let kernel = kernel::fetch(&vm, &self.kernel, &mut say).map_err(prep)?;
            refuse_lacking_modules(s, &kernel)?;
            cancelled()?;
            let debs = image::fetch_userland(&vm, &mut say).map_err(prep)?;
            cancelled()?;
            let base = image::base(&vm, &kernel, &debs, &mut say).map_err(prep)?;
            let program = image::program(&vm, &self.guest_program, self.tc.as_deref(), &base).map_err(prep)?;
            (kernel, base, program)
        };
        cancelled()?;

        // The run's directory: initrd, console log, result.
        let dir =
            std::env::temp_dir().join(format!("qdl-{}-vm{}", std::process::id(), RUNS.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&dir).map_err(|e| RunError::Failed(format!("{}: {e}", dir.display())))?;
        let dir = RunDir::new(dir);
        let run = GuestRun {
            format: RUN_FORMAT.into(),
            scenario: s.into(),
            interval_ns: opts.interval.as_nanos() as u64,
            snapshot_interval_ns: opts.snapshot_interval.as_nanos() as u64,
        };
        let run_json = serde_json::to_vec(&run).expect("a run serialises");
        let initrd = dir.0.join("initrd.cpio");
        image::assemble(&initrd, &base, &program, &run_json).map_err(RunError::Failed)?;
        let result_file = dir.0.join("result");
        let spec = QemuSpec {
            accel,
            cpus: guest_cpus(s),
            memory_mib: MEMORY_MIB,
            kernel: kernel.vmlinux.clone().unwrap_or_else(|| kernel.vmlinuz.clone()),
            initrd,
            result: result_file.clone(),
            append: qemu::kernel_cmdline(&format!("/{GUEST_INIT}"), &[GUEST_ARG], &self.kernel_args),
        };
        let args = qemu::qemu_args(&spec);
        let _ = std::fs::write(dir.0.join("cmdline.txt"), format!("{} {}\n", qemu_bin.display(), args.join(" ")));
        timing.prepare_s = t_call.elapsed().as_secs_f64();
        cancelled()?;

        // Boot. A kernel crash before the guest's init ran cannot depend on the scenario
        // (seen once in about 170 TCG boots here: an oops in interrupt context at
        // 1.4 s): that boot is tried once more, and the result says so.
        let boot_once = |progress: &mut dyn Progress| {
            boot_guest(&qemu_bin, &args, &dir.0, &result_file, Duration::from_nanos(s.duration), opts, progress)
        };
        // Under TCG a crash of another kind recurs too: an `Oops: int3` at any time.
        // The kernel flips static keys (RPS, timestamps, tc's ingress/egress hooks …)
        // by patching code with an int3 first (`text_poke_bp`); multi-threaded TCG can
        // run a translated block that still holds that int3 after the patch is done
        // and its handler is gone (`poke_int3_handler` no longer claims it): an oops
        // in whatever ran there. It depends on the host's thread timing, not on the
        // scenario: the scenario is run again (twice at most), and the result says so.
        let mut boot = boot_once(progress)?;
        let mut crashed = None;
        let mut int3_reruns = Vec::new();
        loop {
            let tcg = accel == Accel::Tcg;
            let why = rerun(
                &boot.console,
                boot.json.is_some(),
                boot.init.is_some(),
                tcg,
                crashed.is_some(),
                int3_reruns.len(),
            );
            let Some(why) = why else { break };
            let n = int3_reruns.len() + usize::from(crashed.is_some());
            let _ = std::fs::rename(dir.0.join("console.out"), dir.0.join(format!("console-crashed-{n}.out")));
            let _ = std::fs::remove_file(&result_file);
            match why {
                Rerun::Early(oops) => crashed = Some(oops),
                Rerun::Int3(oops) => int3_reruns.push(oops),
            }
            cancelled()?;
            boot = boot_once(progress)?;
        }
        let Boot { qemu, status, console: text, json, t_qemu, init, t_traffic, traffic_wall, t_exit } = boot;
        timing.qemu_s = t_exit.duration_since(t_qemu).as_secs_f64();
        timing.qemu_to_init_s = init.map(|(t, _)| t.as_secs_f64());
        timing.guest_init_uptime_s = init.map(|(_, uptime)| uptime);
        timing.qemu_to_traffic_s = t_traffic.map(|t| t.as_secs_f64());

        // The guest's answer.
        let Some(json) = json else {
            let stderr = qemu.read_stderr();
            let what = if let Some(p) = wire::panic_excerpt(&text, 40) {
                format!("the guest kernel ({}) panicked:\n{p}", kernel.release)
            } else if !status.success() {
                format!("qemu exited with {status}: {}\n{}", stderr.trim(), console_report(&text))
            } else {
                format!("the guest ended without a result; {}", console_report(&text))
            };
            let again =
                crashed.map(|c| format!(" (on a second boot: the first crashed with \"{c}\")")).unwrap_or_default();
            return Err(RunError::Failed(format!("{what}{again}")));
        };
        let env: Envelope = serde_json::from_slice(&json)
            .map_err(|e| RunError::Failed(format!("the guest's result does not parse: {e}")))?;
        if env.format != ENVELOPE_FORMAT {
            return Err(RunError::Failed(format!(
                "the guest's result is {:?}, expected {ENVELOPE_FORMAT:?}",
                env.format
            )));
        }
        drop(qemu);
        let mut r = outcome_for_vm(env, &kernel.release)?;

        // Say where it ran.
        r.metadata.backend = "vm".into();
        r.metadata.tools.insert("kernel-package".into(), kernel.package.clone());
        r.metadata.tools.insert(
            "qemu".into(),
            format!("{} ({}, {} vCPUs, {MEMORY_MIB} MiB)", qemu_version(&qemu_bin), accel.name(), spec.cpus),
        );
        if let Some(oops) = crashed {
            r.warnings.push(format!(
                "the guest kernel crashed while booting, before the scenario began (\"{oops}\"); it ran on a second boot"
            ));
        }
        for (k, oops) in int3_reruns.iter().enumerate() {
            r.warnings.push(format!(
                "run {} of the scenario was lost to a guest kernel crash (\"{oops}\": TCG and the kernel's int3 \
                 code patching, not the scenario); this result is from run {}",
                k + 1,
                k + 2
            ));
        }
        if accel == Accel::Tcg {
            r.warnings.push(format!(
                "the VM ran under TCG (software emulation, no usable KVM here): packet rates are far below a real \
                 machine's and every tool shares {} emulated CPU{}",
                spec.cpus,
                if spec.cpus == 1 { "" } else { "s" }
            ));
        }
        timing.total_s = t_call.elapsed().as_secs_f64();
        if let (Some(w), Some(tt)) = (r.wallclock.as_mut(), t_traffic) {
            w.setup_s = (t_qemu - t_call).as_secs_f64() + tt.as_secs_f64();
            let traffic_end = t_qemu + tt + Duration::from_secs_f64(w.run_s);
            w.teardown_s = t_exit.saturating_duration_since(traffic_end).as_secs_f64();
            if let Some(wall) = traffic_wall {
                w.started_at = crate::host::rfc3339(wall);
            }
        }
        if std::env::var_os("QDL_VM_TIMING").is_some() {
            eprintln!("qdisc-lab: vm timing: {timing:?}");
        }
        *self.timing.lock().unwrap_or_else(|e| e.into_inner()) = Some(timing);
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Outcome;

    #[test]
    fn a_tcg_int3_oops_reruns_the_scenario_twice_at_most() {
        // The crash seen in CI (6.12.117 under TCG, traffic running).
        let int3 = "[    4.546574] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI\n\
                    [    4.546635] RIP: 0010:__netif_receive_skb_core.constprop.0+0x3d/0x1080\n\
                    [    4.560000] Kernel panic - not syncing: Fatal exception in interrupt\n";
        let first = "Oops: int3: 0000 [#2] PREEMPT SMP NOPTI".to_string();
        assert_eq!(rerun(int3, false, true, true, false, 0), Some(Rerun::Int3(first.clone())));
        assert_eq!(rerun(int3, false, true, true, false, 1), Some(Rerun::Int3(first.clone())));
        assert_eq!(rerun(int3, false, true, true, false, 2), None);
        // With KVM the race cannot happen: the crash is the run's.
        assert_eq!(rerun(int3, false, true, false, false, 0), None);
        // A result came back: nothing to rerun.
        assert_eq!(rerun(int3, true, true, true, false, 0), None);
        // Another oops after init is the scenario's; before init, one more boot.
        let gp = int3.replace("Oops: int3", "Oops: general protection fault");
        assert_eq!(rerun(&gp, false, true, true, false, 0), None);
        let early = "Oops: general protection fault: 0000 [#2] PREEMPT SMP NOPTI".to_string();
        assert_eq!(rerun(&gp, false, false, true, false, 0), Some(Rerun::Early(early)));
        assert_eq!(rerun(&gp, false, false, true, true, 0), None);
        // No crash, no rerun.
        assert_eq!(rerun("[    1.0] booted\n", false, true, true, false, 0), None);
    }

    /// A qdisc module the kernel lacks is refused before booting, with the lines that
    /// need it; one built in is not.
    #[test]
    fn a_kernel_without_a_scenarios_qdisc_module_is_refused() {
        let dir = std::env::temp_dir().join(format!("qdl-vm-modules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("modules.dep"), "kernel/net/sched/sch_tbf.ko.xz:\n").unwrap();
        std::fs::write(dir.join("modules.builtin"), "").unwrap();
        let k = kernel::Kernel {
            release: "6.18.15+deb13-amd64".into(),
            dir: dir.clone(),
            modules: dir.clone(),
            vmlinux: None,
            vmlinuz: dir.join("vmlinuz"),
            package: "linux-image-6.18.15+deb13-amd64 6.18.15-1~bpo13+1".into(),
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let s = Scenario::load(root.join("scenarios/dualpi2-l4s.toml")).unwrap();
        let RunError::Unsupported(m) = refuse_lacking_modules(&s, &k).unwrap_err() else { panic!() };
        let file = &s.file;
        assert_eq!(
            m,
            format!(
                "the guest kernel (6.18.15+deb13-amd64, linux-image-6.18.15+deb13-amd64 6.18.15-1~bpo13+1) cannot run \
                 this scenario:\n  no sch_dualpi2 module, and not built in; needed by:\n    {file}:32: tc.client: qdisc \
                 add dev eth0 parent 1:1 handle 2: dualpi2\nChoose a kernel that has them: --kernel 6.12, 6.1, a \
                 linux-image package or a .deb file (scripts/build-kernel-deb.sh builds Debian's 6.18 with sch_dualpi2)."
            )
        );
        std::fs::write(dir.join("modules.builtin"), "kernel/net/sched/sch_dualpi2.ko\n").unwrap();
        assert_eq!(refuse_lacking_modules(&s, &k), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn guest_errors_are_worded_for_a_vm() {
        let env = |outcome| Envelope { format: ENVELOPE_FORMAT.into(), uptime_init_s: 1.0, uptime_end_s: 2.0, outcome };
        let e = outcome_for_vm(
            env(Outcome::Unsupported {
                message: "the running kernel (6.1.0-37-amd64) cannot run this scenario:\n  no sch_x\n\
                          Run it on a kernel that has them: --backend vm (a Debian kernel under qemu)."
                    .into(),
            }),
            "6.1.0-37-amd64",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the guest kernel (6.1.0-37-amd64) cannot run this scenario:\n  no sch_x\n\
             Choose a kernel that has them: --kernel 6.12, 6.1 or a linux-image package."
        );
        let e = outcome_for_vm(
            env(Outcome::TcScript {
                at: "s.toml:12".into(),
                host: "a".into(),
                command: "qdisc add dev eth0 root foo".into(),
                stderr: "Error: Specified qdisc kind is unknown.".into(),
                hint: Some("The running kernel (x) lacks …; run it with --backend vm".into()),
            }),
            "6.12.107+deb13-amd64",
        )
        .unwrap_err();
        let RunError::TcScript { at, hint, .. } = &e else { panic!("{e}") };
        assert_eq!(at, "s.toml:12");
        assert!(hint.as_deref().unwrap().starts_with("Debian's kernel 6.12.107+deb13-amd64 lacks"), "{hint:?}");
        assert_eq!(outcome_for_vm(env(Outcome::Interrupted), "x"), Err(RunError::Interrupted));
    }
}
