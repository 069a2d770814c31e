//! The interface between a scenario and whatever runs it.
//!
//! A backend takes a validated [`Scenario`], runs it, and returns a [`RunResult`] —
//! or a [`RunError`] that says whether it *cannot* run this scenario here
//! ([`RunError::Unsupported`]: nothing was changed, another backend may) or *failed*
//! while running it. Backends must leave nothing behind in either case.
//!
//! Implementations: `qdisc_kernel::host::HostBackend` (network namespaces on the
//! running kernel). A VM backend (a Debian kernel under qemu) and the simulator
//! implement the same trait; the host backend's link realisation and tool drivers
//! are written to be reused inside a guest.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::result::RunResult;
use crate::scenario::Scenario;

/// A way of running scenarios.
pub trait Backend {
    /// Its name as in `--backend NAME` and `metadata.backend`.
    fn name(&self) -> &'static str;
    /// Run the scenario; always leaves the machine as it found it.
    fn run(&self, scenario: &Scenario, opts: &RunOptions, progress: &mut dyn Progress) -> Result<RunResult, RunError>;
}

/// Knobs of a run that are not part of the scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Throughput reporting interval (iperf3 `-i`).
    pub interval: Duration,
    /// tc snapshot interval.
    pub snapshot_interval: Duration,
    /// The `tc` binary to apply scripts and take snapshots with; `None`: the backend
    /// picks (the host backend prefers iproute2 6.15, see its docs).
    pub tc: Option<PathBuf>,
    /// Set to stop a run early (Ctrl-C): the backend tears down and returns
    /// [`RunError::Interrupted`].
    pub cancel: Arc<AtomicBool>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            interval: Duration::from_millis(100),
            snapshot_interval: Duration::from_millis(100),
            tc: None,
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl RunOptions {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

/// Progress of a run, for a user watching it.
pub trait Progress {
    /// A phase begins ("setup", "traffic", "teardown" …).
    fn phase(&mut self, _name: &str) {}
    /// Traffic is running: `elapsed` of `total` seconds.
    fn running(&mut self, _elapsed: f64, _total: f64) {}
    /// The run is over (success or not): clear any display.
    fn finish(&mut self) {}
}

/// Progress that shows nothing.
pub struct NoProgress;

impl Progress for NoProgress {}

/// Why a run did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub enum RunError {
    /// This backend cannot run this scenario here (the kernel lacks a qdisc or netem,
    /// a tool is missing, no privileges …). Nothing was changed. The message says what
    /// is missing and what to use instead.
    Unsupported(String),
    /// A line of a host's tc script failed: a tc command, or a setting (`sysctl`,
    /// `echo … > …/xps_cpus`, `ethtool -K`, `ip link set`, whose `command` is the line
    /// as written).
    TcScript {
        /// `FILE:LINE` of the command in the scenario.
        at: String,
        host: String,
        command: String,
        /// What tc printed.
        stderr: String,
        /// A hint (e.g. the kernel lacks the module: use --backend vm).
        hint: Option<String>,
    },
    /// Setup, a tool, or teardown failed.
    Failed(String),
    /// Stopped by the user.
    Interrupted,
}

impl RunError {
    /// The exit status a command-line program should use: 2 = cannot run this here,
    /// 1 = the run failed, 130 = interrupted (like a shell after SIGINT).
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Unsupported(_) => 2,
            RunError::TcScript { .. } | RunError::Failed(_) => 1,
            RunError::Interrupted => 130,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Unsupported(m) | RunError::Failed(m) => write!(f, "{m}"),
            RunError::TcScript { at, host, command, stderr, hint } => {
                // A setting line (sysctl, echo, ethtool, ip) is shown as written; a tc
                // line without its program name.
                let setting = ["sysctl", "echo", "ethtool", "ip "].iter().any(|p| command.starts_with(p));
                let tc = if setting { "" } else { "tc " };
                write!(f, "{at}: tc script of host {host:?} failed: {tc}{command}")?;
                for l in stderr.lines().filter(|l| !l.trim().is_empty()) {
                    write!(f, "\n  {l}")?;
                }
                if let Some(h) = hint {
                    write!(f, "\n{h}")?;
                }
                Ok(())
            }
            RunError::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for RunError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_lines_are_shown_as_written() {
        let e = |command: &str| RunError::TcScript {
            at: "s.toml:3".into(),
            host: "a".into(),
            command: command.into(),
            stderr: "Cannot find device \"eth0\"\n".into(),
            hint: None,
        };
        for setting in ["ethtool -K eth0 tso off", "ip link set eth0 mtu 9000", "sysctl -w net.core.dev_weight=1"] {
            assert_eq!(
                e(setting).to_string(),
                format!("s.toml:3: tc script of host \"a\" failed: {setting}\n  Cannot find device \"eth0\"")
            );
        }
        assert_eq!(
            e("qdisc add dev eth0 root fq").to_string(),
            "s.toml:3: tc script of host \"a\" failed: tc qdisc add dev eth0 root fq\n  Cannot find device \"eth0\""
        );
    }
}
