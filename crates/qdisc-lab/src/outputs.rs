//! Files a run can write besides its `--json` result: `--plot DIR` (PNG and SVG,
//! plot.rs), `--iperf3-json DIR` (one `iperf3 -J`-shaped file per tcp/udp traffic
//! entry, `qdisc_scenario::iperf3`) and `--flent FILE` (a flent data file,
//! `qdisc_scenario::flent`); and `qdisc-lab plot RESULT.json --out DIR` and
//! `qdisc-lab flent RESULT.json --out FILE`, the same for a saved result.

use std::path::{Path, PathBuf};

use clap::Args;
use qdisc_scenario::result::FORMAT;
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
    /// Write the run as a flent data file here (gzip-compressed flent 2.3 format, read
    /// by `flent -i FILE`; docs/flent.md says how the traffic maps onto flent's tests).
    #[arg(long, value_name = "FILE")]
    pub flent: Option<PathBuf>,
}

/// Write what `a` asks for.
pub fn write(a: &OutputArgs, r: &RunResult) -> Result<(), String> {
    if let Some(dir) = &a.iperf3_json {
        write_iperf3(r, dir)?;
    }
    if let Some(file) = &a.flent {
        write_flent(r, file).map_err(|e| format!("--flent {e}"))?;
    }
    if let Some(dir) = &a.plot {
        crate::plot::write_all(r, dir)?;
    }
    Ok(())
}

/// `r` as a `.flent.gz` file; errors start with the file's name.
pub fn write_flent(r: &RunResult, file: &Path) -> Result<(), String> {
    let bytes = qdisc_scenario::flent::to_flent_gz(r).map_err(|e| format!("{}: {e}", file.display()))?;
    std::fs::write(file, bytes).map_err(|e| format!("cannot write {}: {e}", file.display()))
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

#[derive(Args, Debug)]
pub struct FlentArgs {
    /// A result written by `qdisc-lab run --json FILE`.
    pub result: PathBuf,
    /// The flent data file to write (gzip-compressed, e.g. `run.flent.gz`).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// `qdisc-lab flent RESULT.json --out FILE`.
pub fn flent(a: &FlentArgs) -> u8 {
    match read_result(&a.result) {
        Ok(r) => match write_flent(&r, &a.out) {
            Ok(()) => 0,
            Err(e) => {
                errln!("qdisc-lab flent: {e}");
                1
            }
        },
        Err(e) => {
            errln!("qdisc-lab flent: {e}");
            2
        }
    }
}

/// Read a saved result.
pub fn read_result(path: &Path) -> Result<RunResult, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_result(&bytes, &path.display().to_string())
}

/// A saved result's bytes; `name` starts every error. The format is checked first, so
/// a result of another version is refused as such rather than by its first field this
/// version does not know.
pub fn parse_result(bytes: &[u8], name: &str) -> Result<RunResult, String> {
    use serde_json::Value;
    let not_a_result = |why: String| format!("{name}: not a qdisc-lab run result: {why}");
    let v: Value = serde_json::from_slice(bytes).map_err(|e| not_a_result(e.to_string()))?;
    let what = match &v {
        Value::Object(o) => match o.get("format") {
            Some(Value::String(f)) if f == FORMAT => None,
            Some(Value::String(f)) if f.starts_with("qdisc-lab/run-result/") => {
                return Err(format!(
                    "{name}: result format \"{f}\" is not one this qdisc-lab reads (it reads \"{FORMAT}\")"
                ))
            }
            Some(f) => Some(format!("\"format\" is {f}, not \"{FORMAT}\"")),
            None => Some(format!("no \"format\" (\"{FORMAT}\")")),
        },
        Value::Array(_) => Some("a JSON array, not an object".into()),
        other => Some(format!("{other}, not an object")),
    };
    if let Some(why) = what {
        return Err(not_a_result(why));
    }
    serde_json::from_slice(bytes).map_err(|e| not_a_result(e.to_string()))
}

/// `qdisc-lab plot RESULT.json --out DIR`: prints the files it wrote.
pub fn plot(a: &PlotArgs) -> u8 {
    let r = match read_result(&a.result) {
        Ok(r) => r,
        Err(e) => {
            errln!("qdisc-lab plot: {e}");
            return 2;
        }
    };
    match crate::plot::write_all(&r, &a.out) {
        Ok(files) => {
            let list: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
            let mut stdout = crate::out::Stdout::new("qdisc-lab plot");
            stdout.write("the list of files", &list);
            stdout.status(0)
        }
        Err(e) => {
            errln!("qdisc-lab plot: {e}");
            1
        }
    }
}
