//! `qdisc-lab`: the Linux packet scheduler in userspace. The command is this library's
//! [`main_with_args`], called by the thin `main.rs` and, in-process, by the Python
//! package's `qdisc-lab` console script (crates/qdisc-py).
//!
//! * `qdisc-lab tc [--dev SPEC]... [--sysctl KEY=VALUE]... [tc options] OBJECT COMMAND …` —
//!   tc over in-memory devices, printing exactly what iproute2 prints; `--sysctl
//!   net.core.default_qdisc=KIND` brings the devices up as a host booted with it.
//! * `qdisc-lab tc [--dev SPEC]... -batch FILE [-force]` — a tc batch file (`-` = stdin).
//! * `qdisc-lab replay …` — push a pcap or generated traffic through a device's qdisc
//!   tree at a wire rate in virtual time and report what happened.
//! * `qdisc-lab run [--backend sim|host|vm [--kernel K]] SCENARIO [--json FILE]` — run a scenario in the simulator or on a
//!   real kernel (docs/scenarios.md).
//! * `qdisc-lab plot RESULT.json --out DIR` — plots of a saved result (PNG and SVG).
//! * `qdisc-lab flent RESULT.json --out FILE` — a saved result as a flent data file.
//! * `qdisc-lab compare SCENARIO --backends A,B` / `--results A.json B.json` — one
//!   table of two runs, with the relative difference per metric.
//! * `qdisc-lab sweep …` — a parameter sweep: the Python package's (`python3 -m
//!   qdisc_lab sweep`), run from here when it is installed.

/// `eprintln!` that never panics (stderr closed, or a terminal gone after SIGHUP): a
/// message that cannot be written is dropped.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod compare;
#[cfg(test)]
mod fuzz;
mod out;
pub mod outputs;
pub mod plot;
mod replay;
pub mod run;
mod sweep;

use std::io::{Read, Write};

use clap::{Parser, Subcommand};
use qdisc::tc::{parse_global, Tc, TcLib};
use qdisc::tree::{DevSpec, KernelVersion};

#[derive(Parser)]
#[command(name = "qdisc-lab", version, about = "The Linux packet scheduler (tc and its qdiscs) in userspace")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// tc over in-memory devices: `qdisc-lab tc [--dev SPEC]... [--sysctl KEY=VALUE]... [-s] [-d] [-j] [-p]
    /// OBJECT COMMAND ...` or `-batch FILE [-force]`. In a batch, a line may start with its own -s/-d/-j/-p.
    #[command(allow_hyphen_values = true, disable_help_flag = true)]
    Tc {
        /// A device: NAME[,kind=veth|eth|ifb][,txqueues=N][,realtxqueues=N][,mtu=N][,txqueuelen=N][,speed=MBIT]
        /// (default: one eth0, kind eth, 1 tx queue, all real, mtu 1500, txqueuelen 1000).
        #[arg(long = "dev", value_name = "SPEC")]
        dev: Vec<String>,
        /// Follow this kernel where versions differ (checked: 6.12, 6.18).
        #[arg(long = "kernel", value_name = "VERSION", default_value = "6.12")]
        kernel: String,
        /// `sysctl -w KEY=VALUE` before the devices come up, as on a host booted with it
        /// (repeatable, applied in order). Only net.core.default_qdisc=KIND: every device
        /// then comes up with KIND as its root qdisc (mq with KIND per tx queue when it has
        /// several; veth keeps noqueue; kinds that need options, like htb, give noqueue),
        /// and KIND is what a deleted root or a new mq gets. Default pfifo_fast; Debian 13
        /// boots with fq_codel. A key or value sysctl would refuse: its message, exit 1.
        #[arg(long = "sysctl", value_name = "KEY=VALUE")]
        sysctl: Vec<String>,
        /// tc's own arguments, exactly as for tc.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Replay a pcap or generated flows through a qdisc tree at a wire rate (virtual time).
    Replay(replay::ReplayArgs),
    /// Run a scenario (TOML) in the simulator or on a real kernel: iperf3-like throughput, ping-like RTT,
    /// tc -s of every device, CPU time per host (the simulator's CPU model); --json FILE writes the full result.
    Run(run::RunArgs),
    /// Plot a saved result (`run --json FILE`): throughput, RTT and its CDF, qdisc
    /// backlog and drops, CPU time per host, as PNG and SVG.
    Plot(outputs::PlotArgs),
    /// Write a saved result (`run --json FILE`) as a flent data file (`.flent.gz`, flent
    /// 2.3's format: `flent -i FILE -p totals` plots it).
    Flent(outputs::FlentArgs),
    /// Run a scenario on two backends (or take two saved results) and print one table:
    /// metric, A, B, (B−A)/A.
    Compare(compare::CompareArgs),
    /// A parameter sweep over a scenario (grid × seeds → one table): the Python
    /// package's `qdisc-lab sweep`, run as `python3 -m qdisc_lab sweep ARGS` (see
    /// `qdisc-lab sweep --help` once it is installed: `pip install .` in the repository).
    #[command(disable_help_flag = true)]
    Sweep {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// The init of `run --backend vm`'s guest (PID 1 inside the VM only).
    #[command(name = "vm-guest", hide = true)]
    VmGuest,
}

/// Parse `--dev` specs (default: eth0).
pub fn devices(specs: &[String]) -> Result<Vec<DevSpec>, String> {
    if specs.is_empty() {
        return Ok(vec![DevSpec::new("eth0")]);
    }
    let mut out: Vec<DevSpec> = Vec::new();
    for s in specs {
        let d = DevSpec::parse(s).map_err(|e| format!("--dev {s}: {e}"))?;
        if out.iter().any(|o| o.name == d.name) {
            return Err(format!("--dev {s}: device \"{}\" declared twice", d.name));
        }
        out.push(d);
    }
    Ok(out)
}

fn run_tc(dev: &[String], kernel: &str, sysctls: &[String], args: &[String]) -> u8 {
    let specs = match devices(dev) {
        Ok(s) => s,
        Err(e) => {
            errln!("qdisc-lab: {e}");
            return 2;
        }
    };
    let Some(kernel) = KernelVersion::parse(kernel) else {
        errln!("qdisc-lab: --kernel {kernel}: not a kernel version like 6.12");
        return 2;
    };
    // Boot: the sysctls (as sysctl.d applies them), then the devices come up.
    let mut tc = Tc::with_kernel(&[], kernel);
    tc.lib = TcLib::from_env();
    for s in sysctls {
        if let Err(e) = tc.sysctl_w(s) {
            errln!("{e}");
            return 1;
        }
    }
    for d in &specs {
        if let Err(e) = tc.add_device(d) {
            errln!("qdisc-lab: --dev {}: {e}", d.name);
            return 2;
        }
    }
    let g = match parse_global(args) {
        Ok(g) => g,
        Err(e) => {
            let _ = std::io::stderr().write_all(e.msg.as_bytes());
            return e.code as u8;
        }
    };
    // What tc prints goes through out::Stdout: a closed pipe ends the command quietly,
    // another write error is said and exits 1 (iproute2's tc ignores both).
    let mut stdout = out::Stdout::new("qdisc-lab tc");
    if g.version {
        stdout
            .write("the version", &format!("tc utility, iproute2-6.15.0 (qdisc-lab {})\n", env!("CARGO_PKG_VERSION")));
        return stdout.status(0);
    }
    let out = match &g.batch {
        Some(file) => {
            let mut bytes = Vec::new();
            let read = if file == "-" {
                std::io::stdin().read_to_end(&mut bytes).map(|_| ())
            } else {
                std::fs::read(file).map(|b| bytes = b)
            };
            if let Err(e) = read {
                errln!("Cannot open file \"{file}\" for reading: {}", qdisc::tc::strerror(&e));
                return 1;
            }
            // tc reads bytes: a byte that is not UTF-8 (in a comment, say) must not
            // refuse the file.
            tc.batch(&String::from_utf8_lossy(&bytes), file, g.opts, g.force)
        }
        None => tc.exec(&args[g.rest..], g.opts),
    };
    stdout.write("the output", &out.stdout);
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    stdout.status(out.code as u8)
}

/// The command: `args` as a process's argv (the program name first); returns the exit
/// status. Clap's usage errors print and return 2 (`--help`, `--version`: 0).
pub fn main_with_args<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code() as u8;
        }
    };
    match cli.cmd {
        Cmd::Tc { dev, kernel, sysctl, args } => run_tc(&dev, &kernel, &sysctl, &args),
        Cmd::Run(a) => run::run(&a),
        Cmd::Plot(a) => outputs::plot(&a),
        Cmd::Flent(a) => outputs::flent(&a),
        Cmd::Compare(a) => compare::run(&a),
        Cmd::VmGuest => qdisc_kernel::vm::guest::main(),
        Cmd::Sweep { args } => sweep::run(&args),
        Cmd::Replay(a) => match replay::run(&a) {
            Ok(report) => {
                let mut stdout = out::Stdout::new("qdisc-lab replay");
                stdout.write("the report", &report);
                stdout.status(0)
            }
            Err(e) => {
                errln!("qdisc-lab replay: {e}");
                1
            }
        },
    }
}
