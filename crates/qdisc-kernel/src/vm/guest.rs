//! Inside the VM: the guest's init (PID 1) is the qdisc-lab binary itself
//! (`rdinit=/usr/bin/qdisc-lab -- vm-guest`). It mounts what the host backend needs,
//! runs the scenario from `/lab/run.json` with [`HostBackend`] — the same namespaces,
//! wire, tc, iperf3 and ping code as `--backend host` — reports progress on the console,
//! sends the [`Envelope`] out through the result port and powers the machine off.

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qdisc_scenario::{Backend, Progress, RunOptions, Scenario};

use super::wire::{self, Envelope, GuestRun, Outcome, ENVELOPE_FORMAT, MARK, RESULT_PORT, RUN_FORMAT};
use crate::host::HostBackend;

fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|u| u.parse().ok()))
        .unwrap_or(0.0)
}

fn mount(src: &str, target: &str, fstype: &str, data: &str) -> Result<(), String> {
    let _ = std::fs::create_dir_all(target);
    let c = |s: &str| CString::new(s).unwrap();
    let (s, t, f, d) = (c(src), c(target), c(fstype), c(data));
    // SAFETY: valid NUL-terminated strings that outlive the call.
    let r = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), 0, d.as_ptr().cast()) };
    if r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
        Ok(())
    } else {
        Err(format!("mount {fstype} on {target}: {}", std::io::Error::last_os_error()))
    }
}

/// Progress as console markers (the host turns them back into progress).
struct ConsoleProgress {
    last: Option<Instant>,
}

impl Progress for ConsoleProgress {
    fn phase(&mut self, name: &str) {
        println!("{MARK}PHASE {name} t={:.2}", uptime());
    }
    fn running(&mut self, elapsed: f64, total: f64) {
        // The console costs guest CPU under TCG: four updates a second are plenty.
        if self.last.is_none_or(|t| t.elapsed() >= Duration::from_millis(250)) {
            self.last = Some(Instant::now());
            println!("{MARK}RUN {elapsed:.2} {total:.2}");
        }
    }
}

/// Whether the kernel has found the result port (Debian 13 builds virtio_pci and
/// virtio_console in; 12 has them as modules, loaded at init: see [`main`]).
fn ports_present() -> bool {
    Path::new("/sys/class/virtio-ports").exists()
}

/// The device of the result port, if the guest has one.
fn result_port() -> Option<PathBuf> {
    let find = || {
        std::fs::read_dir("/sys/class/virtio-ports").ok()?.flatten().find_map(|e| {
            let name = std::fs::read_to_string(e.path().join("name")).ok()?;
            (name.trim() == RESULT_PORT).then(|| Path::new("/dev").join(e.file_name()))
        })
    };
    if let Some(p) = find() {
        return Some(p);
    }
    let _ = std::process::Command::new("/sbin/modprobe").args(["-a", "-q", "virtio_pci", "virtio_console"]).status();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        if let Some(p) = find().filter(|p| p.exists()) {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Load the modules the scenario needs — veth, bridge (links), its qdiscs' — one by
/// one, before anything runs: the kernel's autoloader would load most of them, but
/// only for kinds with a `net-sch-KIND` alias (6.18.15's sch_dualpi2 has none), and a
/// load racing the command that needs it can lose (`ip link add … type bridge`:
/// "Unknown device type" while a background modprobe still loads bridge). An error
/// names the module. The host checked before booting that the kernel has every
/// qdisc's module (`refuse_lacking_modules`): one not in `modules.dep` is built in.
fn load_modules(s: &Scenario) -> Result<(), String> {
    let mut want = vec![("veth".to_string(), "veth pairs".to_string())];
    if !s.links.is_empty() {
        want.push(("bridge".into(), "links".into()));
    }
    for kind in crate::host::tc::needed_qdiscs(s).keys() {
        if let Some(m) = crate::host::tc::qdisc_module(kind) {
            want.push((m, format!("the {kind} qdisc")));
        }
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let dep = std::fs::read_to_string(Path::new("/usr/lib/modules").join(release.trim()).join("modules.dep"))
        .map_err(|e| format!("guest: modules.dep of {}: {e}", release.trim()))?;
    let modules = super::image::parse_modules_dep(&dep);
    for (m, what) in want.iter().filter(|(m, _)| modules.contains_key(m)) {
        let out = std::process::Command::new("/sbin/modprobe")
            .arg(m)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("guest: modprobe {m}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "guest: modprobe {m} (for {what}) failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

fn run() -> Outcome {
    let text = match std::fs::read("/lab/run.json") {
        Ok(t) => t,
        Err(e) => return Outcome::Failed { message: format!("guest: /lab/run.json: {e}") },
    };
    let run: GuestRun = match serde_json::from_slice(&text) {
        Ok(r) => r,
        Err(e) => return Outcome::Failed { message: format!("guest: /lab/run.json does not parse: {e}") },
    };
    if run.format != RUN_FORMAT {
        return Outcome::Failed { message: format!("guest: run format {:?}, expected {RUN_FORMAT:?}", run.format) };
    }
    let scenario = Scenario::from(run.scenario);
    if let Err(message) = load_modules(&scenario) {
        return Outcome::Failed { message };
    }
    let tc = [&format!("/{}", super::GUEST_TC), "/usr/sbin/tc", "/usr/bin/tc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    let opts = RunOptions {
        interval: Duration::from_nanos(run.interval_ns),
        snapshot_interval: Duration::from_nanos(run.snapshot_interval_ns),
        tc,
        ..RunOptions::default()
    };
    Outcome::from_run(HostBackend.run(&scenario, &opts, &mut ConsoleProgress { last: None }))
}

/// End the VM: a reboot, which qemu (`-no-reboot`) turns into its exit — with or
/// without ACPI, unlike a power-off.
fn power_off() -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: sync and reboot have no memory-safety preconditions; we are PID 1.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_AUTOBOOT);
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The guest's init. Refuses to do anything unless it is PID 1 of a qdisc-lab guest.
pub fn main() -> ! {
    if std::process::id() != 1 || !Path::new("/lab/run.json").exists() {
        eprintln!("qdisc-lab vm-guest: the init of qdisc-lab's VM guest; not a command to run");
        std::process::exit(2);
    }
    let mut problems = Vec::new();
    for (src, target, fstype, data) in [
        ("proc", "/proc", "proc", ""),
        ("sysfs", "/sys", "sysfs", ""),
        ("devtmpfs", "/dev", "devtmpfs", ""),
        ("tmpfs", "/run", "tmpfs", "mode=0755"),
        ("tmpfs", "/tmp", "tmpfs", "mode=1777"),
    ] {
        if let Err(e) = mount(src, target, fstype, data) {
            problems.push(e);
        }
    }
    std::env::set_var("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    std::env::set_var("HOME", "/root");
    std::env::set_var("TMPDIR", "/tmp");
    std::env::set_var("LC_ALL", "C");
    if problems.is_empty() && !ports_present() {
        // In the background: the result port is needed only at the end.
        let _ = std::process::Command::new("/sbin/modprobe")
            .args(["-a", "-q", "virtio_pci", "virtio_console"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let init_s = uptime();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("{MARK}INIT {init_s:.2} {}", release.trim());
    let outcome = if problems.is_empty() {
        std::panic::catch_unwind(run).unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Failed { message: format!("the guest program panicked: {what}") }
        })
    } else {
        Outcome::Failed { message: format!("guest setup: {}", problems.join("; ")) }
    };
    let env = Envelope { format: ENVELOPE_FORMAT.into(), uptime_init_s: init_s, uptime_end_s: uptime(), outcome };
    let json = serde_json::to_vec(&env).expect("an envelope serialises");
    let sent = result_port().and_then(|p| {
        let mut f = std::fs::OpenOptions::new().write(true).open(p).ok()?;
        f.write_all(&wire::frame(&json)).ok()?;
        f.flush().ok()
    });
    if sent.is_none() {
        for l in wire::console_result_lines(&json) {
            println!("{l}");
        }
    }
    println!("{MARK}DONE {:.2}", uptime());
    power_off()
}
