//! Files a run can write besides its `--json` result: `--plot DIR` (PNG and SVG,
//! plot.rs) and `--iperf3-json DIR` (one `iperf3 -J`-shaped file per tcp/udp traffic
//! entry, `qdisc_scenario::iperf3`); and `qdisc-lab plot RESULT.json --out DIR`, which
//! plots a saved result.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use qdisc_scenario::RunResult;

#[derive(Args, Debug, Default)]
pub struct OutputArgs {
    /// Write plots here (PNG and SVG): throughput per flow, RTT over time and its CDF,
    /// each device's qdisc backlog and drops over time, and each host's CPU time
    /// (`cpu-HOST`: the simulator's CPU model).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Write each tcp/udp traffic entry as iperf3 -J JSON here (DIR/traffic-<i>.json,
    /// i = the entry's index in the scenario).
    #[arg(long = "iperf3-json", value_name = "DIR")]
    pub iperf3_json: Option<PathBuf>,
}

/// Write what `a` asks for.
pub fn write(a: &OutputArgs, r: &RunResult) -> Result<(), String> {
    if let Some(dir) = &a.iperf3_json {
        write_iperf3(r, dir)?;
    }
    if let Some(dir) = &a.plot {
        crate::plot::write_all(r, dir)?;
    }
    Ok(())
}

/// `DIR/traffic-<i>.json` for every tcp/udp entry; returns the files written.
pub fn write_iperf3(r: &RunResult, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for t in &r.throughput {
        let path = dir.join(format!("traffic-{}.json", t.traffic));
        std::fs::write(&path, qdisc_scenario::iperf3::to_iperf3_json(r, t))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// A result written by `qdisc-lab run --json FILE`.
    pub result: PathBuf,
    /// Where to write the plots (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Read a saved result.
pub fn read_result(path: &Path) -> Result<RunResult, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not a qdisc-lab run result: {e}", path.display()))
}

/// `qdisc-lab plot RESULT.json --out DIR`: prints the files it wrote.
pub fn plot(a: &PlotArgs) -> ExitCode {
    let r = match read_result(&a.result) {
        Ok(r) => r,
        Err(e) => {
            errln!("qdisc-lab plot: {e}");
            return ExitCode::from(2);
        }
    };
    match crate::plot::write_all(&r, &a.out) {
        Ok(files) => {
            let list: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
            let mut stdout = crate::out::Stdout::new("qdisc-lab plot");
            stdout.write("the list of files", &list);
            stdout.status(ExitCode::SUCCESS)
        }
        Err(e) => {
            errln!("qdisc-lab plot: {e}");
            ExitCode::from(1)
        }
    }
}
