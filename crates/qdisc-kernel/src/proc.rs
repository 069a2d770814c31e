//! Child processes and namespaces that must not outlive a run.
//!
//! Every long-running child (iperf3, ping) is a [`Proc`]: started in its own process
//! group (so a terminal's Ctrl-C reaches qdisc-lab, which then stops them in order),
//! its output going to files (a pipe could fill up and stall it), killed and reaped on
//! drop. Every namespace and scratch directory a run creates is registered too, and so
//! is every global sysctl a run changed (with its value before). [`emergency_cleanup`]
//! kills, deletes and puts back whatever is registered — for a second signal, when an
//! orderly teardown is not waited for.
//!
//! [`stop_on_signals`] is how a command-line program stops its runs: SIGINT, SIGTERM
//! and SIGHUP alike ask the run to stop (it tears down in order), a second one cleans
//! up at once and exits; [`stop_signal`] says which signal it was (exit status 128 +
//! signal).

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static PIDS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static NAMESPACES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static DIRS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
/// (/proc/sys file, value before the run), in the order changed.
static SYSCTLS: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

/// A running child with its output in files.
pub struct Proc {
    child: Child,
    pub label: String,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    status: Option<std::process::ExitStatus>,
}

impl Proc {
    /// Start `cmd`, stdout and stderr to `dir/NAME.out` and `dir/NAME.err`.
    pub fn spawn(mut cmd: Command, label: &str, dir: &Path, name: &str) -> std::io::Result<Proc> {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        cmd.stdin(Stdio::null()).stdout(File::create(&stdout)?).stderr(File::create(&stderr)?).process_group(0);
        let mut pids = PIDS.lock().unwrap_or_else(|e| e.into_inner());
        let child = cmd.spawn()?;
        pids.insert(child.id() as i32);
        Ok(Proc { child, label: label.into(), stdout, stderr, status: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Exited yet? (Reaps it if so.)
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
                unregister(self.child.id());
            }
        }
        self.status
    }

    /// SIGINT (ping then prints its summary and exits).
    pub fn interrupt(&mut self) {
        if self.exited().is_none() {
            signal(self.child.id() as i32, libc::SIGINT);
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; reaps.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        signal(self.child.id() as i32, libc::SIGTERM);
        let t = Instant::now();
        while t.elapsed() < grace {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        if let Ok(st) = self.child.wait() {
            self.status = Some(st);
        }
        unregister(self.child.id());
    }

    pub fn read_stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn read_stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_millis(200));
    }
}

fn unregister(pid: u32) {
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).remove(&(pid as i32));
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid we started and have not reaped yet (registered).
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Remember a namespace until [`forget_netns`].
pub fn register_netns(name: &str) {
    NAMESPACES.lock().unwrap_or_else(|e| e.into_inner()).insert(name.into());
}

pub fn forget_netns(name: &str) {
    NAMESPACES.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
}

/// Remember a run's scratch directory until [`forget_dir`].
pub fn register_dir(path: &Path) {
    DIRS.lock().unwrap_or_else(|e| e.into_inner()).insert(path.to_path_buf());
}

pub fn forget_dir(path: &Path) {
    DIRS.lock().unwrap_or_else(|e| e.into_inner()).remove(path);
}

/// Remember a global sysctl's value before a run changed it, until [`forget_sysctl`].
pub fn register_sysctl(path: &Path, original: &str) {
    SYSCTLS.lock().unwrap_or_else(|e| e.into_inner()).push((path.to_path_buf(), original.to_string()));
}

pub fn forget_sysctl(path: &Path) {
    SYSCTLS.lock().unwrap_or_else(|e| e.into_inner()).retain(|(p, _)| p != path);
}

/// Kill every registered child, delete every registered namespace and scratch
/// directory and put every registered sysctl back, now. For a signal handler's last
/// resort (a second signal: [`stop_on_signals`]); normal runs clean up by drop.
pub fn emergency_cleanup() {
    let sysctls: Vec<(PathBuf, String)> = std::mem::take(&mut *SYSCTLS.lock().unwrap_or_else(|e| e.into_inner()));
    let mut restored = true;
    for (path, value) in sysctls.iter().rev() {
        restored &= std::fs::write(path, value).is_ok();
    }
    if !sysctls.is_empty() && restored {
        let _ = std::fs::remove_file(Path::new(crate::host::settings::STATE_DIR).join("global-sysctls"));
    }
    let pids: Vec<i32> = PIDS.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
    for p in pids {
        signal(p, libc::SIGKILL);
    }
    let names: Vec<String> = NAMESPACES.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
    for n in names {
        let _ = Command::new("ip").args(["netns", "del", &n]).stderr(Stdio::null()).status();
    }
    let dirs: Vec<PathBuf> = std::mem::take(&mut *DIRS.lock().unwrap_or_else(|e| e.into_inner())).into_iter().collect();
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The signals that stop a run.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The first stop signal received (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The write end of the pipe from the signal handler to the thread that acts on it
/// (-1: [`stop_on_signals`] not called).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// The cancel flags of the runs the signals stop.
static CANCELS: Mutex<Vec<Arc<AtomicBool>>> = Mutex::new(Vec::new());

extern "C" fn on_stop_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
    // SAFETY: write(2) is async-signal-safe; errno is saved and restored around it.
    unsafe {
        let errno = *libc::__errno_location();
        let _ = libc::write(fd, (&(sig as u8) as *const u8).cast(), 1);
        *libc::__errno_location() = errno;
    }
}

/// From now on SIGINT, SIGTERM and SIGHUP stop the run whose cancel flag is `cancel`
/// (for a command-line program; called again, the flag is added). The first signal
/// sets the flag (the run tears down in order and returns
/// `RunError::Interrupted`; [`stop_signal`] then says which signal it was); a second
/// one runs [`emergency_cleanup`] and exits with status 128 + that signal. The work is
/// done on a thread of its own: the handler only writes the signal's number to a pipe.
pub fn stop_on_signals(cancel: Arc<AtomicBool>) {
    CANCELS.lock().unwrap_or_else(|e| e.into_inner()).push(cancel);
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two descriptors it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return;
        }
        // The reading end blocks.
        // SAFETY: fcntl on a descriptor just created.
        unsafe { libc::fcntl(fds[0], libc::F_SETFL, 0) };
        SIGNAL_PIPE.store(fds[1], Ordering::SeqCst);
        let read_fd = fds[0];
        let spawned = std::thread::Builder::new().name("qdl-signals".into()).spawn(move || loop {
            let mut b = 0u8;
            // SAFETY: reading one byte into a byte we own.
            let n = unsafe { libc::read(read_fd, (&mut b as *mut u8).cast(), 1) };
            if n != 1 {
                if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            let sig = libc::c_int::from(b);
            if STOP_SIGNAL.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                for c in CANCELS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    c.store(true, Ordering::SeqCst);
                }
            } else {
                emergency_cleanup();
                std::process::exit(128 + sig);
            }
        });
        if spawned.is_err() {
            return;
        }
        for sig in STOP_SIGNALS {
            // SAFETY: installing a handler that only writes to a pipe.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    });
}

/// Whether [`stop_on_signals`] has been called: the signals are then this module's.
pub fn stops_on_signals() -> bool {
    SIGNAL_PIPE.load(Ordering::SeqCst) >= 0
}

/// The signal that asked the run to stop, if one did.
pub fn stop_signal() -> Option<i32> {
    Some(STOP_SIGNAL.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// Children still registered (for tests: a finished run leaves none).
pub fn live_children() -> usize {
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).len()
}
