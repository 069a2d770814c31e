//! `qdisc-lab compare SCENARIO --backends A,B [--json FILE]` runs one scenario on two
//! backends; `qdisc-lab compare --results A.json B.json [--json FILE]` takes two saved
//! results. Both print one table — metric, A, B, relative difference — for:
//!
//! * throughput: all tcp/udp traffic, each entry (when there are several) and each
//!   flow, as the receivers counted it (iperf3's "receiver" lines); flows are matched by
//!   their position in the entry (flow ids are per-backend socket numbers);
//! * TCP retransmits (the senders'), in total and per flow; UDP datagrams lost;
//! * RTT p50/p90/p99 of every ping entry (nearest rank, as the text report prints them);
//! * per qdisc, matched by host, device and handle (and parent where one device has
//!   several qdiscs with the same handle, e.g. mq's children `0:`): drops, overlimits,
//!   requeues and packets sent, from the final `tc -s` snapshot.
//!
//! Below the table, where either result has CPU figures ([`compare_cpu`]), a second
//! table in the same layout, per host: busy % (100 − idle, averaged over its CPUs), the
//! most waited-for contended locks (contended %, wait) and the largest `perf top`
//! functions (share of busy time) of either side. A line above it says where each
//! side's figures come from — the simulator's CPU model is not a measurement — and a
//! host one side has no figures of reads "not measured" there, not 0. `--json` lists
//! these rows after the others.
//!
//! The relative difference is (B − A) / A, printed like "+3.2%"; "n/a" when A is 0 or
//! either value is missing. The comparison itself ([`compare`]) is a pure function of
//! two [`RunResult`]s.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use qdisc_scenario::result::{HostCpu, StreamResult, Summary, TrafficResult};
use qdisc_scenario::{RunOptions, RunResult, Scenario};
use serde::Serialize;
use serde_json::Value;

/// The format identifier of `compare --json`.
pub const FORMAT: &str = "qdisc-lab/compare/1";

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The scenario to run on both backends (docs/scenarios.md).
    pub scenario: Option<PathBuf>,
    /// The two backends, "A,B" (e.g. sim,host); B is compared with A.
    #[arg(long, value_name = "A,B")]
    pub backends: Option<String>,
    /// Compare two saved results (`qdisc-lab run --json`) instead of running.
    #[arg(long, num_args = 2, value_names = ["A.json", "B.json"])]
    pub results: Vec<PathBuf>,
    /// Also write the comparison, with both results, to this file as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The tc binary the kernel backends use (as for `run`).
    #[arg(long, value_name = "PATH")]
    pub tc: Option<PathBuf>,
}

/// What a row's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    BitsPerSecond,
    Packets,
    Milliseconds,
    Percent,
    Seconds,
}

/// One metric of the two results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub metric: String,
    pub unit: Unit,
    pub a: Option<f64>,
    pub b: Option<f64>,
}

impl Row {
    fn new(metric: impl Into<String>, unit: Unit, a: Option<f64>, b: Option<f64>) -> Row {
        Row { metric: metric.into(), unit, a, b }
    }

    /// (B − A) / A; `None` when A is 0 or either is missing.
    pub fn rel(&self) -> Option<f64> {
        match (self.a, self.b) {
            (Some(a), Some(b)) if a != 0.0 => Some((b - a) / a),
            _ => None,
        }
    }
}

/// A relative difference as printed: "+3.2%", "-0.5%", "n/a".
pub fn rel_text(rel: Option<f64>) -> String {
    match rel {
        Some(r) => format!("{:+.1}%", r * 100.0),
        None => "n/a".into(),
    }
}

/// A value as printed ("-" when missing).
pub fn value_text(v: Option<f64>, unit: Unit) -> String {
    match v {
        None => "-".into(),
        Some(v) => match unit {
            Unit::BitsPerSecond => crate::run::bitrate(v).trim_start().to_string(),
            Unit::Packets => format!("{v}"),
            Unit::Milliseconds => format!("{v:.3} ms"),
            Unit::Percent => format!("{v:.2}%"),
            Unit::Seconds => format!("{v:.3} s"),
        },
    }
}

fn sum_opt(it: impl Iterator<Item = Option<u64>>) -> Option<f64> {
    it.fold(None, |acc, x| match (acc, x) {
        (acc, None) => acc,
        (None, Some(x)) => Some(x as f64),
        (Some(a), Some(x)) => Some(a + x as f64),
    })
}

fn entry(r: &RunResult, traffic: usize) -> Option<&TrafficResult> {
    r.throughput.iter().find(|t| t.traffic == traffic)
}

/// A qdisc's identity on its device, and what to call it.
struct QdiscRef<'a> {
    host: &'a str,
    dev: &'a str,
    handle: String,
    parent: String,
    kind: String,
    q: &'a Value,
}

fn qdiscs(r: &RunResult) -> Vec<QdiscRef<'_>> {
    let mut out = Vec::new();
    for d in &r.tc.end {
        for q in d.qdisc.as_array().into_iter().flatten() {
            let s = |k: &str| q.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let parent = if q.get("root").and_then(Value::as_bool) == Some(true) { "root".into() } else { s("parent") };
            out.push(QdiscRef { host: &d.host, dev: &d.dev, handle: s("handle"), parent, kind: s("kind"), q });
        }
    }
    out
}

/// The rows comparing `b` with `a`.
pub fn compare(a: &RunResult, b: &RunResult) -> Vec<Row> {
    let mut rows = Vec::new();
    let bps = |s: &Summary| Some(s.bits_per_second);
    // Throughput and retransmits.
    if !(a.throughput.is_empty() && b.throughput.is_empty()) {
        let total = |r: &RunResult| Some(r.throughput.iter().map(|t| t.receiver.bits_per_second).sum::<f64>());
        rows.push(Row::new("throughput, all traffic", Unit::BitsPerSecond, total(a), total(b)));
        let retr = |r: &RunResult| sum_opt(r.throughput.iter().map(|t| t.sender.retransmits));
        if retr(a).is_some() || retr(b).is_some() {
            rows.push(Row::new("retransmits, all traffic", Unit::Packets, retr(a), retr(b)));
        }
    }
    let mut entries: Vec<usize> = a.throughput.iter().chain(&b.throughput).map(|t| t.traffic).collect();
    entries.sort_unstable();
    entries.dedup();
    for i in entries {
        let (ta, tb) = (entry(a, i), entry(b, i));
        let t = ta.or(tb).expect("in one of them");
        let name = format!("traffic[{i}] {} {}→{}", t.kind, t.from, t.to);
        if entries_len(a, b) > 1 {
            rows.push(Row::new(
                format!("{name} throughput"),
                Unit::BitsPerSecond,
                ta.and_then(|t| bps(&t.receiver)),
                tb.and_then(|t| bps(&t.receiver)),
            ));
        }
        let flows = ta.map_or(0, |t| t.streams.len()).max(tb.map_or(0, |t| t.streams.len()));
        for k in 0..flows {
            let (sa, sb) = (ta.and_then(|t| t.streams.get(k)), tb.and_then(|t| t.streams.get(k)));
            let flow = if flows > 1 { format!("{name} flow {}", k + 1) } else { name.clone() };
            if flows > 1 {
                rows.push(Row::new(
                    format!("{flow} throughput"),
                    Unit::BitsPerSecond,
                    sa.and_then(|s| bps(&s.receiver)),
                    sb.and_then(|s| bps(&s.receiver)),
                ));
            }
            if t.kind == "tcp" {
                let retr = |s: Option<&StreamResult>| s.and_then(|s| s.sender.retransmits).map(|x| x as f64);
                rows.push(Row::new(format!("{flow} retransmits"), Unit::Packets, retr(sa), retr(sb)));
            }
        }
        if t.kind == "udp" {
            let lost = |t: Option<&TrafficResult>| t.and_then(|t| t.receiver.lost_packets).map(|x| x as f64);
            rows.push(Row::new(format!("{name} datagrams lost"), Unit::Packets, lost(ta), lost(tb)));
        }
    }
    // RTT.
    let mut pings: Vec<usize> = a.rtt.iter().chain(&b.rtt).map(|p| p.traffic).collect();
    pings.sort_unstable();
    pings.dedup();
    for i in pings {
        let (pa, pb) = (a.rtt.iter().find(|p| p.traffic == i), b.rtt.iter().find(|p| p.traffic == i));
        let p = pa.or(pb).expect("in one of them");
        let sa = pa.and_then(|p| p.stats.as_ref());
        let sb = pb.and_then(|p| p.stats.as_ref());
        for (q, f) in [("p50", 0), ("p90", 1), ("p99", 2)] {
            let pick = |s: &qdisc_scenario::result::RttStats| [s.p50, s.p90, s.p99][f];
            rows.push(Row::new(
                format!("traffic[{i}] ping {}→{} RTT {q}", p.from, p.to),
                Unit::Milliseconds,
                sa.map(pick),
                sb.map(pick),
            ));
        }
    }
    // Qdiscs: A's in order, then those only B has.
    let (qa, qb) = (qdiscs(a), qdiscs(b));
    let same_place = |x: &QdiscRef, y: &QdiscRef| x.host == y.host && x.dev == y.dev && x.handle == y.handle;
    let matches = |x: &QdiscRef, y: &QdiscRef, ys: &[QdiscRef]| {
        same_place(x, y) && (ys.iter().filter(|z| same_place(x, z)).count() == 1 || x.parent == y.parent)
    };
    let mut pairs: Vec<(Option<&QdiscRef>, Option<&QdiscRef>)> = Vec::new();
    for x in &qa {
        pairs.push((Some(x), qb.iter().find(|y| matches(x, y, &qb))));
    }
    for y in &qb {
        if !qa.iter().any(|x| matches(x, y, &qb)) {
            pairs.push((None, Some(y)));
        }
    }
    for (x, y) in pairs {
        let q = x.or(y).expect("one of them");
        let twins = qa.iter().filter(|z| same_place(q, z)).count().max(qb.iter().filter(|z| same_place(q, z)).count());
        let mut name = format!("{}/{} qdisc {} {}", q.host, q.dev, q.kind, q.handle);
        if twins > 1 {
            let _ =
                write!(name, " ({})", if q.parent == "root" { "root".into() } else { format!("parent {}", q.parent) });
        }
        for (field, what) in
            [("drops", "drops"), ("overlimits", "overlimits"), ("requeues", "requeues"), ("packets", "sent packets")]
        {
            let v = |q: Option<&QdiscRef>| q.and_then(|q| q.q.get(field)).and_then(Value::as_f64);
            rows.push(Row::new(format!("{name} {what}"), Unit::Packets, v(x), v(y)));
        }
    }
    rows
}

fn entries_len(a: &RunResult, b: &RunResult) -> usize {
    a.throughput.len().max(b.throughput.len())
}

/// Contended locks compared per host: the most waited-for of each side.
const CPU_LOCKS: usize = 3;
/// `perf top` functions compared per host: the largest of each side.
const CPU_FUNCTIONS: usize = 5;

/// The CPU rows of one host.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuRows {
    pub host: String,
    /// Whether A, B have CPU figures of this host (a side without reads "not measured").
    pub in_a: bool,
    pub in_b: bool,
    pub rows: Vec<Row>,
}

/// Names in `a`'s order, then those only in `b`.
fn union(a: Vec<String>, b: Vec<String>) -> Vec<String> {
    let mut out = a;
    for n in b {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Per host that either result has CPU figures of (A's order, then B's): busy %, the
/// top contended locks (contended %, wait) and the top functions of either side.
pub fn compare_cpu(a: &RunResult, b: &RunResult) -> Vec<CpuRows> {
    let hosts = union(a.cpu.iter().map(|h| h.host.clone()).collect(), b.cpu.iter().map(|h| h.host.clone()).collect());
    let find = |r: &'_ RunResult, host: &str| -> Option<HostCpu> { r.cpu.iter().find(|h| h.host == host).cloned() };
    let mut out = Vec::new();
    for host in hosts {
        let (ha, hb) = (find(a, &host), find(b, &host));
        let mut rows = Vec::new();
        let busy = |h: &Option<HostCpu>| h.as_ref().and_then(|h| crate::run::cpu_mean(&h.total)).map(|m| m[3]);
        let cpus = match (&ha, &hb) {
            (Some(x), Some(y)) if x.cpus != y.cpus => format!("{} (A) / {} (B) cpus", x.cpus, y.cpus),
            (Some(h), _) | (_, Some(h)) => format!("{} cpu{}", h.cpus, if h.cpus == 1 { "" } else { "s" }),
            (None, None) => unreachable!("the host is in one of them"),
        };
        rows.push(Row::new(format!("{host} busy, mean of {cpus}"), Unit::Percent, busy(&ha), busy(&hb)));
        let locks = |h: &Option<HostCpu>| {
            h.as_ref().map_or(Vec::new(), |h| {
                crate::run::contended_locks(h, CPU_LOCKS).into_iter().map(|l| l.name.clone()).collect()
            })
        };
        for name in union(locks(&ha), locks(&hb)) {
            let lock = |h: &Option<HostCpu>| {
                h.as_ref().and_then(|h| h.locks.iter().find(|l| l.name == name).cloned()).filter(|l| l.acquisitions > 0)
            };
            let (la, lb) = (lock(&ha), lock(&hb));
            let pct = |l: &Option<qdisc_scenario::result::LockStats>| {
                l.as_ref().map(|l| l.contended as f64 * 100.0 / l.acquisitions as f64)
            };
            rows.push(Row::new(format!("{host} lock {name} contended"), Unit::Percent, pct(&la), pct(&lb)));
            let wait = |l: &Option<qdisc_scenario::result::LockStats>| l.as_ref().map(|l| l.wait_s);
            rows.push(Row::new(format!("{host} lock {name} wait"), Unit::Seconds, wait(&la), wait(&lb)));
        }
        let functions = |h: &Option<HostCpu>| {
            h.as_ref().map_or(Vec::new(), |h| {
                crate::run::top_functions(h, CPU_FUNCTIONS).into_iter().map(|f| f.symbol.clone()).collect()
            })
        };
        for symbol in union(functions(&ha), functions(&hb)) {
            let share = |h: &Option<HostCpu>| {
                h.as_ref().and_then(|h| h.functions.iter().find(|f| f.symbol == symbol)).map(|f| f.share)
            };
            rows.push(Row::new(format!("{host} perf top {symbol}"), Unit::Percent, share(&ha), share(&hb)));
        }
        out.push(CpuRows { host, in_a: ha.is_some(), in_b: hb.is_some(), rows });
    }
    out
}

/// Where one side's CPU figures come from, in words.
fn cpu_origin(r: &RunResult) -> String {
    if r.cpu.is_empty() {
        return format!("not measured by backend {}", r.metadata.backend);
    }
    let (mut profiles, mut others): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for h in &r.cpu {
        let (list, what) = if h.source == "model" { (&mut profiles, &h.profile) } else { (&mut others, &h.source) };
        if !list.contains(&what.as_str()) {
            list.push(what);
        }
    }
    let mut parts: Vec<String> = Vec::new();
    if !profiles.is_empty() {
        let s = if profiles.len() == 1 { "" } else { "s" };
        parts.push(format!("the simulator's CPU model (profile{s} {}), not a measurement", profiles.join(", ")));
    }
    parts.extend(others.iter().map(|o| o.to_string()));
    parts.join(", ")
}

/// Column headers for the two results: their backends, or "A: host"/"B: host" when
/// both ran on the same kind of backend.
fn headers(a: &RunResult, b: &RunResult) -> (String, String) {
    let (x, y) = (&a.metadata.backend, &b.metadata.backend);
    if x == y {
        (format!("A: {x}"), format!("B: {y}"))
    } else {
        (x.clone(), y.clone())
    }
}

/// The table as printed.
pub fn table(a: &RunResult, b: &RunResult, rows: &[Row]) -> String {
    let (ha, hb) = headers(a, b);
    let mut out = String::new();
    let _ = writeln!(out, "qdisc-lab compare: {} ({})", a.scenario.name, a.scenario.file);
    for (tag, r) in [("A", a), ("B", b)] {
        let _ = write!(out, "{tag}: backend {}, kernel {}", r.metadata.backend, r.metadata.kernel);
        if let Some(w) = &r.wallclock {
            let _ = write!(out, ", started {}", w.started_at);
        }
        out.push('\n');
    }
    if a.scenario.sha256 != b.scenario.sha256 {
        let _ = writeln!(
            out,
            "note: A and B ran different scenario files ({} is {}…, {} is {}…)",
            a.scenario.file,
            &a.scenario.sha256[..a.scenario.sha256.len().min(12)],
            b.scenario.file,
            &b.scenario.sha256[..b.scenario.sha256.len().min(12)]
        );
    }
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|r| [r.metric.clone(), value_text(r.a, r.unit), value_text(r.b, r.unit), rel_text(r.rel())])
        .collect();
    out.push('\n');
    aligned(&mut out, [ha, hb], &cells);
    out
}

/// The CPU table as printed below the main one (nothing when neither result has CPU
/// figures): a line saying where each side's figures come from, then the rows.
pub fn cpu_table(a: &RunResult, b: &RunResult, hosts: &[CpuRows]) -> String {
    let mut out = String::new();
    if hosts.is_empty() {
        return out;
    }
    let (ha, hb) = headers(a, b);
    let _ = writeln!(
        out,
        "\ncpu: A ({}): {}; B ({}): {}",
        a.metadata.backend,
        cpu_origin(a),
        b.metadata.backend,
        cpu_origin(b)
    );
    let mut cells: Vec<[String; 4]> = Vec::new();
    for h in hosts {
        for r in &h.rows {
            let cell = |measured: bool, v| if measured { value_text(v, r.unit) } else { "not measured".into() };
            cells.push([r.metric.clone(), cell(h.in_a, r.a), cell(h.in_b, r.b), rel_text(r.rel())]);
        }
    }
    aligned(&mut out, [ha, hb], &cells);
    out
}

/// The header (metric, the two results' headers, (B−A)/A) and `cells`, metric left
/// aligned, the rest right aligned, two spaces between columns.
fn aligned(out: &mut String, [ha, hb]: [String; 2], cells: &[[String; 4]]) {
    let head = ["metric".to_string(), ha, hb, "(B−A)/A".to_string()];
    let w = |i: usize| cells.iter().map(|c| c[i].chars().count()).chain([head[i].chars().count()]).max().unwrap_or(0);
    let widths = [w(0), w(1), w(2), w(3)];
    for c in std::iter::once(&head).chain(cells) {
        let pad = |s: &str, n: usize| " ".repeat(n.saturating_sub(s.chars().count()));
        let _ = writeln!(
            out,
            "{}{}  {}{}  {}{}  {}{}",
            c[0],
            pad(&c[0], widths[0]),
            pad(&c[1], widths[1]),
            c[1],
            pad(&c[2], widths[2]),
            c[2],
            pad(&c[3], widths[3]),
            c[3]
        );
    }
}

#[derive(Serialize)]
struct JsonRow<'a> {
    metric: &'a str,
    unit: Unit,
    a: Option<f64>,
    b: Option<f64>,
    /// (b − a) / a, null when a is 0 or either is missing.
    relative_difference: Option<f64>,
}

#[derive(Serialize)]
struct JsonOut<'a> {
    format: &'static str,
    a: &'a str,
    b: &'a str,
    rows: Vec<JsonRow<'a>>,
    results: [&'a RunResult; 2],
}

/// The comparison as JSON (`--json`): rows and both results.
pub fn json_out<'a>(a: &'a RunResult, b: &'a RunResult, rows: &'a [Row]) -> impl Serialize + 'a {
    JsonOut {
        format: FORMAT,
        a: &a.metadata.backend,
        b: &b.metadata.backend,
        rows: rows
            .iter()
            .map(|r| JsonRow { metric: &r.metric, unit: r.unit, a: r.a, b: r.b, relative_difference: r.rel() })
            .collect(),
        results: [a, b],
    }
}

/// Run the scenario on both backends (A first); prints each run's progress on stderr.
fn run_both(
    scenario: &std::path::Path,
    backends: &str,
    tc: Option<PathBuf>,
) -> Result<(RunResult, RunResult), (String, u8)> {
    let names: Vec<&str> = backends.split(',').map(str::trim).collect();
    let [na, nb] = names[..] else {
        return Err((format!("--backends {backends}: give two backends, A,B (e.g. sim,host)"), 2));
    };
    // Both must be usable before either runs.
    let ba = crate::run::backend_by_name(na).map_err(|e| (e, 2))?;
    let bb = crate::run::backend_by_name(nb).map_err(|e| (e, 2))?;
    let s = Scenario::load(scenario).map_err(|e| (e.to_string(), 2))?;
    let opts = RunOptions { tc, ..RunOptions::default() };
    crate::run::stop_on_signals(&opts);
    let mut results = Vec::new();
    for (tag, name, backend) in [("A", na, ba), ("B", nb, bb)] {
        errln!("qdisc-lab compare: {tag}: running on {name}");
        let mut progress = crate::run::LineProgress::new();
        let r = backend
            .run(&s, &opts, &mut progress)
            .map_err(|e| (format!("{tag} ({name}): {}", crate::run::error_text(&e)), crate::run::exit_code(&e)))?;
        results.push(r);
    }
    let b = results.pop().expect("two");
    let a = results.pop().expect("two");
    Ok((a, b))
}

pub fn run(c: &CompareArgs) -> u8 {
    let fail = |msg: String, code: u8| {
        errln!("qdisc-lab compare: {msg}");
        code
    };
    let (a, b) = match (&c.scenario, c.results.as_slice(), &c.backends) {
        (None, [ra, rb], None) => {
            let read = |p| crate::outputs::read_result(p);
            match (read(ra), read(rb)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => return fail(e, 2),
            }
        }
        (Some(s), [], Some(backends)) => match run_both(s, backends, c.tc.clone()) {
            Ok(ab) => ab,
            Err((e, code)) => return fail(e, code),
        },
        (Some(_), [], None) => return fail("give the backends to compare: --backends A,B (e.g. sim,host)".into(), 2),
        (None, [], _) => {
            return fail("give a scenario and --backends A,B, or --results A.json B.json".into(), 2);
        }
        _ => return fail("either a scenario with --backends A,B, or --results A.json B.json, not both".into(), 2),
    };
    let mut rows = compare(&a, &b);
    let cpu = compare_cpu(&a, &b);
    let mut text = table(&a, &b, &rows) + &cpu_table(&a, &b, &cpu);
    rows.extend(cpu.into_iter().flat_map(|h| h.rows));
    for (tag, r) in [("A", &a), ("B", &b)] {
        for w in &r.warnings {
            text.push_str(&format!("warning ({tag}): {w}\n"));
        }
    }
    let mut stdout = crate::out::Stdout::new("qdisc-lab compare");
    stdout.write("the table", &text);
    if let Some(path) = &c.json {
        if let Err(e) = crate::out::write_json(path, &json_out(&a, &b, &rows)) {
            return fail(format!("cannot write {}: {e}", path.display()), 1);
        }
    }
    stdout.status(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdisc_scenario::result::{DeviceSnapshot, Interval, Metadata, RttResult, RttStats, ScenarioInfo, TcResult};
    use serde_json::json;

    fn summary(bps: f64, retransmits: Option<u64>) -> Summary {
        Summary {
            seconds: 10.0,
            bytes: (bps * 10.0 / 8.0) as u64,
            bits_per_second: bps,
            retransmits,
            packets: None,
            lost_packets: None,
            jitter_ms: None,
        }
    }

    fn stream(id: u32, bps: f64, retr: u64) -> StreamResult {
        StreamResult {
            id,
            intervals: Vec::<Interval>::new(),
            sender: summary(bps, Some(retr)),
            receiver: summary(bps * 0.99, None),
        }
    }

    /// A hand-made result: one tcp entry of two flows, one ping entry, an htb root with
    /// a fifo leaf on client/eth0.
    fn result(backend: &str, flows: [(u32, f64, u64); 2], p50: f64, drops: u64) -> RunResult {
        let streams: Vec<StreamResult> = flows.iter().map(|&(id, bps, r)| stream(id, bps, r)).collect();
        let total: f64 = flows.iter().map(|f| f.1).sum();
        let retr: u64 = flows.iter().map(|f| f.2).sum();
        RunResult {
            format: qdisc_scenario::result::FORMAT.into(),
            scenario: ScenarioInfo {
                name: "t".into(),
                file: "t.toml".into(),
                sha256: "ab".repeat(32),
                seed: 1,
                duration_s: 10.0,
            },
            metadata: Metadata {
                backend: backend.into(),
                kernel: "6.12".into(),
                iproute2: "tc".into(),
                tools: Default::default(),
                qdisc_lab: "0.1.0".into(),
                interval_s: 0.1,
                snapshot_interval_s: 0.1,
                links: vec![],
            },
            wallclock: None,
            throughput: vec![TrafficResult {
                traffic: 0,
                kind: "tcp".into(),
                from: "client".into(),
                to: "server".into(),
                dst: "10.1.0.2".into(),
                start_s: 0.0,
                flows: 2,
                cc: Some("cubic".into()),
                tcp_mss: Some(1448),
                streams,
                sum: vec![],
                sender: summary(total, Some(retr)),
                receiver: summary(total * 0.99, None),
                cpu_utilization_percent: None,
            }],
            total: vec![],
            rtt: vec![RttResult {
                traffic: 1,
                from: "client".into(),
                to: "server".into(),
                dst: "10.1.0.2".into(),
                start_s: 0.0,
                interval_s: 0.01,
                transmitted: 3,
                received: 3,
                in_flight_at_end: 0,
                samples: vec![],
                stats: Some(RttStats { min: 1.0, avg: 2.0, max: 4.0, mdev: 0.5, p50, p90: 3.0, p99: 4.0 }),
            }],
            tc: TcResult {
                end: vec![DeviceSnapshot {
                    host: "client".into(),
                    dev: "eth0".into(),
                    qdisc: json!([
                        {"kind": "htb", "handle": "1:", "root": true, "drops": drops, "overlimits": 100,
                         "requeues": 0, "packets": 1000, "backlog": 0, "qlen": 0},
                        {"kind": "pfifo", "handle": "10:", "parent": "1:10", "drops": drops, "overlimits": 0,
                         "requeues": 0, "packets": 1000, "backlog": 0, "qlen": 0}
                    ]),
                    class: json!([]),
                    qdisc_text: None,
                    class_text: None,
                }],
                periodic: Default::default(),
            },
            cpu: Vec::new(),
            warnings: vec![],
        }
    }

    fn row(metric: &str, unit: Unit, a: Option<f64>, b: Option<f64>) -> Row {
        Row::new(metric, unit, a, b)
    }

    #[test]
    fn rows_of_two_results() {
        let a = result("sim", [(1, 50e6, 0), (2, 40e6, 10)], 20.0, 0);
        let b = result("host", [(5, 60e6, 3), (7, 30e6, 10)], 22.0, 30);
        let rows = compare(&a, &b);
        use Unit::*;
        let bps = BitsPerSecond;
        let t = "traffic[0] tcp client→server";
        let expected = vec![
            row("throughput, all traffic", bps, Some(90e6 * 0.99), Some(90e6 * 0.99)),
            row("retransmits, all traffic", Packets, Some(10.0), Some(13.0)),
            row(&format!("{t} flow 1 throughput"), bps, Some(50e6 * 0.99), Some(60e6 * 0.99)),
            row(&format!("{t} flow 1 retransmits"), Packets, Some(0.0), Some(3.0)),
            row(&format!("{t} flow 2 throughput"), bps, Some(40e6 * 0.99), Some(30e6 * 0.99)),
            row(&format!("{t} flow 2 retransmits"), Packets, Some(10.0), Some(10.0)),
            row("traffic[1] ping client→server RTT p50", Milliseconds, Some(20.0), Some(22.0)),
            row("traffic[1] ping client→server RTT p90", Milliseconds, Some(3.0), Some(3.0)),
            row("traffic[1] ping client→server RTT p99", Milliseconds, Some(4.0), Some(4.0)),
            row("client/eth0 qdisc htb 1: drops", Packets, Some(0.0), Some(30.0)),
            row("client/eth0 qdisc htb 1: overlimits", Packets, Some(100.0), Some(100.0)),
            row("client/eth0 qdisc htb 1: requeues", Packets, Some(0.0), Some(0.0)),
            row("client/eth0 qdisc htb 1: sent packets", Packets, Some(1000.0), Some(1000.0)),
            row("client/eth0 qdisc pfifo 10: drops", Packets, Some(0.0), Some(30.0)),
            row("client/eth0 qdisc pfifo 10: overlimits", Packets, Some(0.0), Some(0.0)),
            row("client/eth0 qdisc pfifo 10: requeues", Packets, Some(0.0), Some(0.0)),
            row("client/eth0 qdisc pfifo 10: sent packets", Packets, Some(1000.0), Some(1000.0)),
        ];
        assert_eq!(rows, expected);
        let rel: Vec<String> = rows.iter().map(|r| rel_text(r.rel())).collect();
        assert_eq!(
            rel,
            [
                "+0.0%", "+30.0%", "+20.0%", "n/a", "-25.0%", "+0.0%", "+10.0%", "+0.0%", "+0.0%", "n/a", "+0.0%",
                "n/a", "+0.0%", "n/a", "n/a", "n/a", "+0.0%"
            ]
        );
    }

    #[test]
    fn relative_difference() {
        let r = |a, b| rel_text(row("x", Unit::Packets, a, b).rel());
        assert_eq!(r(Some(100.0), Some(103.2)), "+3.2%");
        assert_eq!(r(Some(100.0), Some(99.5)), "-0.5%");
        assert_eq!(r(Some(0.0), Some(5.0)), "n/a");
        assert_eq!(r(None, Some(5.0)), "n/a");
        assert_eq!(r(Some(5.0), None), "n/a");
        assert_eq!(value_text(Some(94_100_000.0), Unit::BitsPerSecond), "94.1 Mbits/sec");
        assert_eq!(value_text(Some(25.0), Unit::Packets), "25");
        assert_eq!(value_text(Some(8.19), Unit::Milliseconds), "8.190 ms");
        assert_eq!(value_text(None, Unit::Milliseconds), "-");
    }

    #[test]
    fn qdiscs_only_one_side_has_and_twin_handles() {
        let a = result("sim", [(1, 50e6, 0), (2, 40e6, 10)], 20.0, 0);
        let mut b = result("host", [(5, 60e6, 3), (7, 30e6, 10)], 22.0, 30);
        // B: an mq root with two "0:" children instead of the htb tree.
        b.tc.end[0].qdisc = json!([
            {"kind": "mq", "handle": "0:", "root": true, "drops": 0, "overlimits": 0, "requeues": 0, "packets": 7},
            {"kind": "pfifo_fast", "handle": "0:", "parent": ":1", "drops": 1, "overlimits": 0, "requeues": 2, "packets": 3},
            {"kind": "pfifo_fast", "handle": "0:", "parent": ":2", "drops": 0, "overlimits": 0, "requeues": 0, "packets": 4}
        ]);
        b.throughput.clear();
        b.rtt.clear();
        let rows = compare(&a, &b);
        let names: Vec<(&str, Option<f64>, Option<f64>)> = rows
            .iter()
            .filter(|r| r.metric.ends_with("drops") || r.metric.contains("flow 1 through"))
            .map(|r| (r.metric.as_str(), r.a, r.b))
            .collect();
        assert_eq!(
            names,
            [
                ("traffic[0] tcp client→server flow 1 throughput", Some(50e6 * 0.99), None),
                ("client/eth0 qdisc htb 1: drops", Some(0.0), None),
                ("client/eth0 qdisc pfifo 10: drops", Some(0.0), None),
                ("client/eth0 qdisc mq 0: (root) drops", None, Some(0.0)),
                ("client/eth0 qdisc pfifo_fast 0: (parent :1) drops", None, Some(1.0)),
                ("client/eth0 qdisc pfifo_fast 0: (parent :2) drops", None, Some(0.0)),
            ]
        );
        // Total throughput of B, which has no tcp/udp traffic, is 0 bit/s, not missing.
        assert_eq!((rows[0].a, rows[0].b), (Some(90e6 * 0.99), Some(0.0)));
    }

    /// CPU figures of one host: per CPU its busy % (all softirq), the locks (name,
    /// acquisitions, contended, wait_s) and the functions (symbol, share).
    fn host_cpu(host: &str, busy: &[f64], locks: &[(&str, u64, u64, f64)], functions: &[(&str, f64)]) -> HostCpu {
        use qdisc_scenario::result::{CpuTime, FunctionShare, LockStats};
        HostCpu {
            host: host.into(),
            cpus: busy.len() as u32,
            source: "model".into(),
            profile: "default".into(),
            total: busy
                .iter()
                .enumerate()
                .map(|(i, &b)| CpuTime { cpu: i as u32, user: 0.0, sys: 0.0, softirq: b, idle: 100.0 - b })
                .collect(),
            intervals: vec![],
            locks: locks
                .iter()
                .map(|&(name, acquisitions, contended, wait_s)| LockStats {
                    name: name.into(),
                    acquisitions,
                    contended,
                    wait_s,
                })
                .collect(),
            functions: functions
                .iter()
                .map(|&(symbol, share)| FunctionShare { symbol: symbol.into(), seconds: share / 100.0, share })
                .collect(),
            rx_discards: Default::default(),
            net: Default::default(),
        }
    }

    fn router_cpu() -> HostCpu {
        host_cpu(
            "router",
            &[98.0, 99.0],
            &[
                ("eth1 tx-0 qdisc busylock", 1000, 1000, 3.994),
                ("eth1 tx-0 qdisc root lock", 2000, 500, 0.5),
                ("eth1 tx-0 _xmit_lock", 900, 0, 0.0),
            ],
            &[
                ("native_queued_spin_lock_slowpath", 91.64),
                ("ip_forward", 1.76),
                ("fq_codel_enqueue", 1.5),
                ("ip_rcv", 1.2),
                ("napi_gro_receive", 1.1),
                ("__dev_queue_xmit", 1.0),
            ],
        )
    }

    #[test]
    fn cpu_of_one_side_only_is_not_measured_on_the_other() {
        let mut a = result("sim", [(1, 50e6, 0), (2, 40e6, 10)], 20.0, 0);
        let b = result("host", [(5, 60e6, 3), (7, 30e6, 10)], 22.0, 30);
        a.cpu = vec![router_cpu()];
        let cpu = compare_cpu(&a, &b);
        assert_eq!(
            cpu_table(&a, &b, &cpu),
            "\ncpu: A (sim): the simulator's CPU model (profile default), not a measurement; \
             B (host): not measured by backend host\n\
             metric                                                sim          host  (B−A)/A\n\
             router busy, mean of 2 cpus                        98.50%  not measured      n/a\n\
             router lock eth1 tx-0 qdisc busylock contended    100.00%  not measured      n/a\n\
             router lock eth1 tx-0 qdisc busylock wait         3.994 s  not measured      n/a\n\
             router lock eth1 tx-0 qdisc root lock contended    25.00%  not measured      n/a\n\
             router lock eth1 tx-0 qdisc root lock wait        0.500 s  not measured      n/a\n\
             router perf top native_queued_spin_lock_slowpath   91.64%  not measured      n/a\n\
             router perf top ip_forward                          1.76%  not measured      n/a\n\
             router perf top fq_codel_enqueue                    1.50%  not measured      n/a\n\
             router perf top ip_rcv                              1.20%  not measured      n/a\n\
             router perf top napi_gro_receive                    1.10%  not measured      n/a\n"
        );
        // Not zeros: the side without figures has no values.
        assert!(cpu.iter().flat_map(|h| &h.rows).all(|r| r.a.is_some() && r.b.is_none()));
        // The same the other way round.
        let t = cpu_table(&b, &a, &compare_cpu(&b, &a));
        assert!(t.starts_with(
            "\ncpu: A (host): not measured by backend host; B (sim): the simulator's CPU model (profile default), \
             not a measurement\n"
        ));
        assert!(
            t.contains("router busy, mean of 2 cpus                       not measured   98.50%      n/a\n"),
            "{t}"
        );
        // Neither has CPU figures: no CPU table at all.
        a.cpu.clear();
        assert!(compare_cpu(&a, &b).is_empty());
        assert_eq!(cpu_table(&a, &b, &[]), "");
    }

    #[test]
    fn cpu_of_both_sides() {
        let mut a = result("sim", [(1, 50e6, 0), (2, 40e6, 10)], 20.0, 0);
        let mut b = result("sim", [(5, 60e6, 3), (7, 30e6, 10)], 22.0, 30);
        a.cpu = vec![router_cpu(), host_cpu("client", &[10.0], &[("eth0 tx-0 _xmit_lock", 10, 0, 0.0)], &[])];
        // B: the busylock no longer contended, another function in its top 5, 4 cpus, a
        // host A does not have.
        let mut r = router_cpu();
        r.total.extend(r.total.clone());
        r.cpus = 4;
        r.locks[0].contended = 0;
        r.functions[1].share = 0.5;
        r.functions.sort_by(|x, y| y.share.total_cmp(&x.share));
        b.cpu = vec![host_cpu("server", &[5.0, 15.0], &[], &[("recvmsg", 60.0)]), r];
        let cpu = compare_cpu(&a, &b);
        let hosts: Vec<(&str, bool, bool)> = cpu.iter().map(|h| (h.host.as_str(), h.in_a, h.in_b)).collect();
        assert_eq!(hosts, [("router", true, true), ("client", true, false), ("server", false, true)]);
        assert_eq!(
            cpu_table(&a, &b, &cpu),
            "\ncpu: A (sim): the simulator's CPU model (profile default), not a measurement; \
             B (sim): the simulator's CPU model (profile default), not a measurement\n\
             metric                                                  A: sim        B: sim  (B−A)/A\n\
             router busy, mean of 2 (A) / 4 (B) cpus                 98.50%        98.50%    +0.0%\n\
             router lock eth1 tx-0 qdisc busylock contended         100.00%         0.00%  -100.0%\n\
             router lock eth1 tx-0 qdisc busylock wait              3.994 s       3.994 s    +0.0%\n\
             router lock eth1 tx-0 qdisc root lock contended         25.00%        25.00%    +0.0%\n\
             router lock eth1 tx-0 qdisc root lock wait             0.500 s       0.500 s    +0.0%\n\
             router perf top native_queued_spin_lock_slowpath        91.64%        91.64%    +0.0%\n\
             router perf top ip_forward                               1.76%         0.50%   -71.6%\n\
             router perf top fq_codel_enqueue                         1.50%         1.50%    +0.0%\n\
             router perf top ip_rcv                                   1.20%         1.20%    +0.0%\n\
             router perf top napi_gro_receive                         1.10%         1.10%    +0.0%\n\
             router perf top __dev_queue_xmit                         1.00%         1.00%    +0.0%\n\
             client busy, mean of 1 cpu                              10.00%  not measured      n/a\n\
             server busy, mean of 2 cpus                       not measured        10.00%      n/a\n\
             server perf top recvmsg                           not measured        60.00%      n/a\n"
        );
        // The JSON lists the CPU rows after the others, a side without figures as null.
        let mut rows = compare(&a, &b);
        let n = rows.len();
        rows.extend(cpu.into_iter().flat_map(|h| h.rows));
        let j = serde_json::to_value(json_out(&a, &b, &rows)).unwrap();
        let server = &j["rows"][n + 12];
        assert_eq!(server["metric"], "server busy, mean of 2 cpus");
        assert_eq!(
            (server["unit"].as_str(), server["a"].is_null(), server["b"].as_f64()),
            (Some("percent"), true, Some(10.0))
        );
        assert_eq!(j["rows"][n + 2]["unit"], "seconds");
    }

    #[test]
    fn the_table_lines_up() {
        let a = result("sim", [(1, 50e6, 0), (2, 40e6, 10)], 20.0, 0);
        let b = result("host", [(5, 60e6, 3), (7, 30e6, 10)], 22.0, 30);
        let rows = compare(&a, &b);
        let t = table(&a, &b, &rows[..3]);
        assert_eq!(
            t,
            "qdisc-lab compare: t (t.toml)\n\
             A: backend sim, kernel 6.12\n\
             B: backend host, kernel 6.12\n\
             \n\
             metric                                                     sim            host  (B−A)/A\n\
             throughput, all traffic                         89.1 Mbits/sec  89.1 Mbits/sec    +0.0%\n\
             retransmits, all traffic                                    10              13   +30.0%\n\
             traffic[0] tcp client→server flow 1 throughput  49.5 Mbits/sec  59.4 Mbits/sec   +20.0%\n"
        );
    }
}
