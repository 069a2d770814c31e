//! `qdisc_lab._native`: the Rust side of the Python package (python/qdisc_lab). Thin:
//! each function hands its arguments to the crate that owns the work — the engine's
//! `Tc` and devices (`qdisc`), overrides and the loader (`qdisc_scenario`), the
//! backends, plots and the command line (`qdisc_lab`) — and the Python modules shape
//! what comes back (DataFrames, exceptions, sweeps). The GIL is released while a run,
//! a plot or a command executes, so threads (and Dask's threaded workers) run
//! concurrently.
//!
//! Errors are raised as the package's own exceptions (`qdisc_lab.errors`):
//! `ScenarioError` with the loader's located message, `TcError(message, exit_code)` in
//! tc's words, `RunError(message, exit_code)` with a run's error and the status
//! `qdisc-lab run` would exit with.

mod summary;

use std::net::IpAddr;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use qdisc::tc::{makeargs_checked, parse_global, TcLib, TcOpts};
use qdisc::tree::{KernelVersion, Xmit};
use qdisc::{Dequeued, Enqueued, FlowKey, Instant, Packet};
use qdisc_scenario::overrides::{self, Override};
use qdisc_scenario::{NoProgress, RunOptions, RunResult};
use toml_edit::Value;

/// An exception of `qdisc_lab.errors`, built with `args`.
fn error<'py>(py: Python<'py>, name: &str, args: impl pyo3::call::PyCallArgs<'py>) -> PyErr {
    let made = py.import("qdisc_lab.errors").and_then(|m| m.getattr(name)).and_then(|cls| cls.call1(args));
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

fn scenario_error(py: Python<'_>, msg: String) -> PyErr {
    error(py, "ScenarioError", (msg,))
}

/// A Python value as a TOML value: bool, int, float, str, lists and dicts of them.
fn to_toml(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    if v.is_instance_of::<PyBool>() {
        return Ok(Value::from(v.extract::<bool>()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(Value::from(v.extract::<i64>()?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(Value::from(v.extract::<f64>()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(Value::from(v.extract::<String>()?));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut t = toml_edit::InlineTable::new();
        for (k, x) in d.iter() {
            t.insert(&k.extract::<String>()?, to_toml(&x)?);
        }
        return Ok(Value::InlineTable(t));
    }
    if let Ok(seq) = v.try_iter() {
        let mut a = toml_edit::Array::new();
        for x in seq {
            a.push(to_toml(&x?)?);
        }
        return Ok(Value::Array(a));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "{}: not a TOML value (bool, int, float, str, list, dict)",
        v.repr()?
    )))
}

/// `text` (a scenario's TOML; `file` names it in errors) with `overrides` — pairs of
/// a path and a Python value, or a path and a command-line string when `cli` — applied
/// and validated. Returns the edited text; raises `ScenarioError`.
#[pyfunction]
#[pyo3(signature = (text, file, overrides, cli=false))]
fn load_scenario(
    py: Python<'_>,
    text: &str,
    file: &str,
    overrides: Vec<(String, Bound<'_, PyAny>)>,
    cli: bool,
) -> PyResult<String> {
    let mut list = Vec::with_capacity(overrides.len());
    for (path, v) in &overrides {
        let value = if cli { overrides::literal(&v.extract::<String>()?) } else { to_toml(v)? };
        list.push(Override { path: path.clone(), value });
    }
    overrides::load(text, file, &list).map(|(_, edited)| edited).map_err(|e| scenario_error(py, e))
}

/// A command-line value (`--set PATH=VALUE`) as JSON text: a TOML literal if it is
/// one, else the string (qdisc_scenario::overrides::literal).
#[pyfunction]
fn literal_json(text: &str) -> PyResult<String> {
    let doc = format!("v = {}", overrides::literal(text));
    let t: toml::Table = toml::from_str(&doc).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    serde_json::to_string(&t["v"]).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// A scenario's TOML as JSON text (for `Scenario.to_dict`).
#[pyfunction]
fn toml_to_json(py: Python<'_>, text: &str, file: &str) -> PyResult<String> {
    let v: toml::Value = toml::from_str(text).map_err(|e| {
        let msg = qdisc_scenario::Scenario::from_bytes(text.as_bytes(), file)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| e.to_string());
        scenario_error(py, msg)
    })?;
    serde_json::to_string(&v).map_err(|e| scenario_error(py, e.to_string()))
}

/// A scenario as TOML text from its JSON form (for `Scenario.from_dict`).
#[pyfunction]
fn json_to_toml(py: Python<'_>, json: &str) -> PyResult<String> {
    let v: toml::Value = serde_json::from_str(json).map_err(|e| scenario_error(py, format!("not a scenario: {e}")))?;
    toml::to_string(&v).map_err(|e| scenario_error(py, format!("not a scenario: {e}")))
}

/// A standalone `qdisc-lab` binary for the VM guest's init: `$QDISC_LAB_BIN`, else the
/// first `qdisc-lab` on PATH that is an ELF executable (the package's own console
/// script is Python, which cannot be an init).
fn guest_binary() -> Result<PathBuf, String> {
    let is_elf = |p: &std::path::Path| {
        use std::io::Read;
        let mut magic = [0u8; 4];
        std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"\x7fELF"
    };
    let how = "build one with `cargo build --release -p qdisc-lab` in the repository and set \
               QDISC_LAB_BIN=target/release/qdisc-lab (or put it on PATH)";
    if let Some(p) = std::env::var_os("QDISC_LAB_BIN") {
        let p = PathBuf::from(p);
        return if is_elf(&p) {
            Ok(p)
        } else {
            Err(format!("QDISC_LAB_BIN={}: not a qdisc-lab executable; {how}", p.display()))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("qdisc-lab")).find(|p| is_elf(p)).ok_or_else(|| {
        format!("the VM backend boots a standalone qdisc-lab binary as the guest's init, and none was found; {how}")
    })
}

/// A run's result, kept in Rust: the Python `Result` asks for what it shows.
#[pyclass(frozen, module = "qdisc_lab._native")]
struct NativeResult {
    r: RunResult,
}

#[pymethods]
impl NativeResult {
    /// The whole result as JSON text (docs/run-result.md).
    fn json(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| serde_json::to_string(&self.r)).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    }
    /// The headline metrics: (name, value) pairs (summary.rs).
    fn summary(&self) -> Vec<(String, f64)> {
        summary::summary(&self.r)
    }
    /// Write the plots of `qdisc-lab plot` into `dir`; the files written.
    fn plot(&self, py: Python<'_>, dir: PathBuf) -> PyResult<Vec<PathBuf>> {
        py.detach(|| qdisc_lab::plot::write_all(&self.r, &dir)).map_err(|e| error(py, "RunError", (e, 1)))
    }
    /// Write the result as a flent data file (`qdisc-lab flent`'s `.flent.gz`).
    fn to_flent(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| qdisc_lab::outputs::write_flent(&self.r, &path)).map_err(|e| error(py, "RunError", (e, 1)))
    }
    /// Each tcp/udp traffic entry as `iperf3 -J` JSON text: (traffic index, text).
    fn iperf3_json(&self) -> Vec<(usize, String)> {
        self.r.throughput.iter().map(|t| (t.traffic, qdisc_scenario::iperf3::to_iperf3_json(&self.r, t))).collect()
    }
}

/// Run a scenario (validated TOML text) on a backend; the GIL is released meanwhile.
fn run_native(
    py: Python<'_>,
    text: &str,
    file: &str,
    backend: &str,
    seed: Option<u64>,
    kernel: Option<&str>,
) -> PyResult<RunResult> {
    let mut scenario =
        qdisc_scenario::Scenario::from_bytes(text.as_bytes(), file).map_err(|e| scenario_error(py, e.to_string()))?;
    if let Some(s) = seed {
        scenario.seed = s;
    }
    let _ = qdisc_lab::run::GUEST_EXE.set(guest_binary);
    py.detach(|| {
        let b = match (backend, kernel) {
            ("vm", k) => qdisc_lab::run::vm_backend(k),
            (_, Some(_)) => Err("kernel= chooses the kernel of backend=\"vm\"".to_string()),
            (name, None) => qdisc_lab::run::backend_by_name(name),
        }
        .map_err(|e| (e, 2))?;
        b.run(&scenario, &RunOptions::default(), &mut NoProgress).map_err(|e| (e.to_string(), e.exit_code()))
    })
    .map_err(|e| error(py, "RunError", e))
}

#[pyfunction]
#[pyo3(signature = (text, file, backend="sim", seed=None, kernel=None))]
fn run(
    py: Python<'_>,
    text: &str,
    file: &str,
    backend: &str,
    seed: Option<u64>,
    kernel: Option<&str>,
) -> PyResult<NativeResult> {
    run_native(py, text, file, backend, seed, kernel).map(|r| NativeResult { r })
}

/// A run's headline metrics only (what a sweep's worker sends back).
#[pyfunction]
#[pyo3(signature = (text, file, backend="sim", seed=None, kernel=None))]
fn run_summary(
    py: Python<'_>,
    text: &str,
    file: &str,
    backend: &str,
    seed: Option<u64>,
    kernel: Option<&str>,
) -> PyResult<Vec<(String, f64)>> {
    run_native(py, text, file, backend, seed, kernel).map(|r| summary::summary(&r))
}

/// The `qdisc-lab` command in-process (argv without the program name); its exit status.
#[pyfunction]
fn main(py: Python<'_>, args: Vec<String>) -> u8 {
    let _ = qdisc_lab::run::GUEST_EXE.set(guest_binary);
    py.detach(|| qdisc_lab::main_with_args(std::iter::once("qdisc-lab".to_string()).chain(args)))
}

/// The engine's tc over in-memory devices, and packet stepping with explicit times.
#[pyclass(unsendable, module = "qdisc_lab._native")]
struct Tc {
    tc: qdisc::tc::Tc,
    next_id: u64,
    /// When the last dequeue that found packets it may not send yet may try again.
    #[pyo3(get)]
    watchdog: Option<u64>,
}

impl Tc {
    fn dev_index(&self, dev: &str) -> PyResult<usize> {
        self.tc.devices.iter().position(|d| d.info.name == dev).ok_or_else(|| {
            let names: Vec<&str> = self.tc.devices.iter().map(|d| d.info.name.as_str()).collect();
            pyo3::exceptions::PyKeyError::new_err(format!("no device {dev:?} (devices: {})", names.join(", ")))
        })
    }
}

fn out3(o: qdisc::tc::Output) -> (String, String, i32) {
    (o.stdout, o.stderr, o.code)
}

#[pymethods]
impl Tc {
    #[new]
    #[pyo3(signature = (devs=None, kernel=None, sysctl=None))]
    fn new(
        py: Python<'_>,
        devs: Option<Vec<String>>,
        kernel: Option<&str>,
        sysctl: Option<Vec<String>>,
    ) -> PyResult<Tc> {
        let specs = qdisc_lab::devices(&devs.unwrap_or_default()).map_err(|e| error(py, "TcError", (e, 2)))?;
        let k = match kernel {
            None => KernelVersion::default(),
            Some(k) => KernelVersion::parse(k)
                .ok_or_else(|| error(py, "TcError", (format!("kernel {k:?}: not a kernel version like 6.12"), 2)))?,
        };
        let mut tc = qdisc::tc::Tc::with_kernel(&[], k);
        tc.lib = TcLib::from_env();
        for s in sysctl.unwrap_or_default() {
            tc.sysctl_w(&s).map_err(|e| error(py, "TcError", (e, 1)))?;
        }
        for d in &specs {
            tc.add_device(d).map_err(|e| error(py, "TcError", (format!("device {}: {e}", d.name), 2)))?;
        }
        Ok(Tc { tc, next_id: 0, watchdog: None })
    }

    /// One tc command line (with tc's global options, e.g. `-s -j qdisc show`), at
    /// virtual time `t_ns` if given: (stdout, stderr, exit code).
    #[pyo3(signature = (line, t_ns=None))]
    fn run(&mut self, line: &str, t_ns: Option<u64>) -> (String, String, i32) {
        if let Some(t) = t_ns {
            self.tc.now = Instant::from_nanos(t);
        }
        let argv = match makeargs_checked(line) {
            Ok(a) => a,
            Err(e) => return (String::new(), format!("{e}\n"), 1),
        };
        match parse_global(&argv) {
            Ok(g) if g.batch.is_some() => (String::new(), "-batch: use Tc.batch(text)\n".into(), 1),
            Ok(g) => out3(self.tc.exec(&argv[g.rest..], g.opts)),
            Err(e) => (String::new(), e.msg, e.code),
        }
    }

    /// `tc -batch` of `text` (`name` stands for the file in "Command failed" lines).
    #[pyo3(signature = (text, force=false, name="-", stats=0, details=false, json=false))]
    fn batch(
        &mut self,
        text: &str,
        force: bool,
        name: &str,
        stats: u32,
        details: bool,
        json: bool,
    ) -> (String, String, i32) {
        let o = TcOpts { stats, details, json, ..TcOpts::default() };
        out3(self.tc.batch(text, name, o, force))
    }

    /// Offer a packet to device `dev` at `t_ns` (`__dev_xmit_skb`): "queued",
    /// "congested", "dropped", "stolen" (NET_XMIT_*), or "direct" when it went straight
    /// to the driver (noqueue, or a bypass with `driver_idle`). `frame`: the frame's
    /// bytes from its Ethernet header on, which the classifiers read when the packet
    /// has no addresses (`Packet::frame`).
    #[pyo3(signature = (dev, t_ns, length=1000, src=None, dst=None, sport=0, dport=0, proto=6,
                        priority=0, mark=0, tos=0, hash=None, id=None, driver_idle=false, frame=None))]
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        dev: &str,
        t_ns: u64,
        length: u32,
        src: Option<&str>,
        dst: Option<&str>,
        sport: u16,
        dport: u16,
        proto: u8,
        priority: u32,
        mark: u32,
        tos: u8,
        hash: Option<u32>,
        id: Option<u64>,
        driver_idle: bool,
        frame: Option<&[u8]>,
    ) -> PyResult<&'static str> {
        let i = self.dev_index(dev)?;
        let addr = |a: Option<&str>| -> PyResult<[u8; 16]> {
            match a {
                None => Ok([0; 16]),
                Some(s) => match s.parse::<IpAddr>() {
                    Ok(IpAddr::V4(v4)) => Ok(v4.to_ipv6_mapped().octets()),
                    Ok(IpAddr::V6(v6)) => Ok(v6.octets()),
                    Err(_) => Err(pyo3::exceptions::PyValueError::new_err(format!("{s:?}: not an IP address"))),
                },
            }
        };
        let id = id.unwrap_or(self.next_id);
        self.next_id = self.next_id.max(id + 1);
        let mut pkt = Packet::new(id, length);
        if src.is_some() || dst.is_some() || sport != 0 || dport != 0 {
            pkt = pkt.with_flow(FlowKey { src: addr(src)?, dst: addr(dst)?, sport, dport, proto });
        }
        if let Some(f) = frame {
            pkt.set_frame(Some(f));
        }
        if let Some(h) = hash {
            pkt.hash = h;
        }
        pkt.priority = priority;
        pkt.mark = mark;
        pkt.tos = tos;
        Ok(match self.tc.devices[i].xmit(pkt, Instant::from_nanos(t_ns), driver_idle) {
            Xmit::Direct(_) => "direct",
            Xmit::Queued(Enqueued::Success) => "queued",
            Xmit::Queued(Enqueued::Congested) => "congested",
            Xmit::Queued(Enqueued::Dropped) => "dropped",
            Xmit::Queued(Enqueued::Stolen) => "stolen",
        })
    }

    /// Ask device `dev` (tx queue `txq` under mq) for a packet at `t_ns`: a dict, or
    /// None when it has none to send now (then `watchdog` says when a shaper may send
    /// again, or is None when it is empty).
    #[pyo3(signature = (dev, t_ns, txq=0))]
    fn dequeue<'py>(
        &mut self,
        py: Python<'py>,
        dev: &str,
        t_ns: u64,
        txq: usize,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let i = self.dev_index(dev)?;
        self.watchdog = None;
        match self.tc.devices[i].dequeue_txq(txq, Instant::from_nanos(t_ns)) {
            Dequeued::Packet(p) => {
                let d = PyDict::new(py);
                d.set_item("id", p.id)?;
                d.set_item("length", p.len)?;
                d.set_item("priority", p.priority)?;
                d.set_item("mark", p.mark)?;
                d.set_item("tos", p.tos)?;
                d.set_item("hash", p.hash)?;
                d.set_item("enqueued_at_ns", p.enqueued_at.as_nanos())?;
                d.set_item("ce", p.ecn() == 3)?;
                if let Some(f) = p.flow() {
                    let ip = |b: [u8; 16]| {
                        let v6 = std::net::Ipv6Addr::from(b);
                        v6.to_ipv4_mapped().map(|v4| v4.to_string()).unwrap_or_else(|| v6.to_string())
                    };
                    d.set_item("src", ip(f.src))?;
                    d.set_item("dst", ip(f.dst))?;
                    d.set_item("sport", f.sport)?;
                    d.set_item("dport", f.dport)?;
                    d.set_item("proto", f.proto)?;
                }
                Ok(Some(d))
            }
            Dequeued::Throttled { until } => {
                self.watchdog = Some(until.as_nanos());
                Ok(None)
            }
            Dequeued::Empty => Ok(None),
        }
    }

    /// The devices' names.
    fn devices(&self) -> Vec<String> {
        self.tc.devices.iter().map(|d| d.info.name.clone()).collect()
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(toml_to_json, m)?)?;
    m.add_function(wrap_pyfunction!(literal_json, m)?)?;
    m.add_function(wrap_pyfunction!(json_to_toml, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(run_summary, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_class::<Tc>()?;
    m.add_class::<NativeResult>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
