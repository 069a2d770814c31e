//! `qdisc-lab sweep …`: sweeps live in the Python package (python/qdisc_lab/sweep.py:
//! process pools, Dask, DataFrames, Parquet), which also installs a `qdisc-lab` command
//! of its own that handles `sweep` itself. This binary passes the arguments to it as
//! `python3 -m qdisc_lab sweep ARGS` when it is importable, and otherwise says how to
//! install it (exit 2: it cannot run here).

use std::process::Command;

/// The line that installs the package, from a clone of the repository.
pub const INSTALL: &str = "pip install \".[dask,parquet]\"  (in a clone of the qdisc-lab repository)";

pub fn run(args: &[String]) -> u8 {
    let python = std::env::var_os("QDISC_LAB_PYTHON").unwrap_or_else(|| "python3".into());
    let importable = Command::new(&python)
        .args(["-c", "import qdisc_lab"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !importable {
        errln!(
            "qdisc-lab sweep: sweeps need the Python package qdisc_lab, which {} cannot import; install it with: {INSTALL}",
            std::path::Path::new(&python).display()
        );
        return 2;
    }
    match Command::new(&python).args(["-m", "qdisc_lab", "sweep"]).args(args).status() {
        Ok(s) => match s.code() {
            Some(c) => c as u8,
            // Killed by a signal: the shell's convention.
            None => {
                use std::os::unix::process::ExitStatusExt;
                128u8.wrapping_add(s.signal().unwrap_or(0) as u8)
            }
        },
        Err(e) => {
            errln!("qdisc-lab sweep: cannot run {}: {e}", std::path::Path::new(&python).display());
            2
        }
    }
}
