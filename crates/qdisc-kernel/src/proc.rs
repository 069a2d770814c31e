//! Child processes and namespaces that must not outlive a run.
//!
//! Every long-running child (iperf3, ping) is a [`Proc`]: started in its own process
//! group (so a terminal's Ctrl-C reaches qdisc-lab, which then stops them in order),
//! its output going to files (a pipe could fill up and stall it), killed and reaped on
//! drop. Every namespace a run creates is registered too, and so is every global
//! sysctl a run changed (with its value before). [`emergency_cleanup`] kills, deletes
//! and puts back whatever is registered — for a second Ctrl-C, when an orderly teardown
//! is not waited for.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static PIDS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static NAMESPACES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
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

/// Remember a global sysctl's value before a run changed it, until [`forget_sysctl`].
pub fn register_sysctl(path: &Path, original: &str) {
    SYSCTLS.lock().unwrap_or_else(|e| e.into_inner()).push((path.to_path_buf(), original.to_string()));
}

pub fn forget_sysctl(path: &Path) {
    SYSCTLS.lock().unwrap_or_else(|e| e.into_inner()).retain(|(p, _)| p != path);
}

/// Kill every registered child, delete every registered namespace and put every
/// registered sysctl back, now. For a signal handler's last resort (a second Ctrl-C);
/// normal runs clean up by drop.
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
}

/// Children still registered (for tests: a finished run leaves none).
pub fn live_children() -> usize {
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).len()
}
