//! The scenario format (TOML) and its one loader.
//!
//! A file is read in two passes. First into raw structs that mirror the TOML exactly
//! (`deny_unknown_fields`, every value [`Spanned`] so its position is known); syntax
//! and type errors come from the `toml` crate with a byte span, which is turned into a
//! line, a column and the dotted path of the field that holds it. Then the raw values
//! are validated into a [`Scenario`]: rates, times and sizes are read with tc's own
//! units (`qdisc::tc::units`), names are checked against each other, and every error
//! points at the value it is about.
//!
//! Errors read `FILE:LINE:COL: FIELD: message`, e.g.
//! `bad.toml:12:8: link[0].rate: invalid rate "100mbps2" (tc units, e.g. "100mbit", "1gbit", "500kbit")`.
//! The format itself is documented in `docs/scenarios.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::Path;

use qdisc::tc::makeargs;
use qdisc::tc::units::{get_percent, get_rate64, get_size, get_time64};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::profile::Profile;

/// A validated scenario: what every backend runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The file it was read from, as given.
    pub file: String,
    /// sha256 of the file's bytes, lowercase hex.
    pub sha256: String,
    pub name: String,
    /// Nanoseconds, > 0.
    pub duration: u64,
    pub seed: u64,
    pub hosts: Vec<Host>,
    pub links: Vec<Link>,
    /// tc scripts, in the order of `hosts`.
    pub tc: Vec<TcScript>,
    pub traffic: Vec<Traffic>,
}

/// Cores of a host whose `[[host]]` entry does not say.
pub const DEFAULT_CPUS: u32 = 4;

/// The `sysctl` keys a script may set (`sysctl -w KEY=VALUE`), in the order the errors
/// list them. All of them are global to a kernel, none per network namespace (see
/// docs/scenarios.md, "Settings").
pub const SYSCTL_KEYS: [&str; 7] = [
    "net.core.default_qdisc",
    "net.core.dev_weight",
    "net.core.dev_weight_tx_bias",
    "net.core.dev_weight_rx_bias",
    "net.core.netdev_budget",
    "net.core.netdev_budget_usecs",
    "net.core.netdev_max_backlog",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// Cores of the host, 1..=4096 (default: [`DEFAULT_CPUS`] = 4).
    pub cpus: u32,
    /// CPU cost profile: what `profile = "..."` named — "default" (bundled) or a file
    /// path, resolved relative to the scenario file's directory.
    pub profile: crate::profile::Profile,
}

impl Host {
    /// "4 cpus (0-3)", "1 cpu (0)": how errors name a host's cores.
    pub fn cpus_phrase(&self) -> String {
        cpus_phrase(self.cpus)
    }
}

fn cpus_phrase(n: u32) -> String {
    match n {
        1 => "1 cpu (0)".into(),
        n => format!("{n} cpus (0-{})", n - 1),
    }
}

/// `host:iface`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub iface: String,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.iface)
    }
}

/// A point-to-point link. Link `i` (0-based) carries the subnet `10.(i+1).0.0/24`:
/// `a` is `.1`, `b` is `.2`.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub a: Endpoint,
    pub b: Endpoint,
    /// What the two interfaces are (the simulator models both; the kernel lab always
    /// builds veth pairs through a wire namespace).
    pub kind: LinkKind,
    /// Transmit queues of each of the two interfaces (a NIC with several gets mq with
    /// a pfifo_fast per queue as its default root).
    pub txqueues: u32,
    /// Wire rate in bytes per second, the same in both directions; `None`: no limit of
    /// its own (as fast as the machine moves packets).
    pub rate: Option<u64>,
    /// One-way propagation delay, nanoseconds, each direction.
    pub delay: u64,
    /// Random loss, percent (0–100), each direction.
    pub loss: f64,
    /// Line of the `[[link]]` entry in the file.
    pub line: usize,
}

/// The devices at the two ends of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkKind {
    /// NICs: the link's rate is their wire rate, with tx queues, a driver ring and BQL.
    #[default]
    Eth,
    /// A veth pair through a bridge, as the kernel lab builds it: the interfaces have
    /// no rate and no backpressure of their own; the link's rate is a tbf on the
    /// bridge port facing the receiver (`tbf rate R burst max(R·1ms, 3028) latency 50ms`).
    Veth,
}

impl Link {
    /// How the kernel lab's wire shapes this link, and the simulator's veth links with
    /// it: netem (for delay or loss) or else tbf (for a rate alone).
    pub fn wire_needs_netem(&self) -> bool {
        self.delay > 0 || self.loss > 0.0
    }

    /// The wire's tbf burst: 1 ms at the rate, at least two full-sized frames.
    pub fn wire_tbf_burst(&self) -> u64 {
        (self.rate.unwrap_or(0) / 1000).max(2 * 1514)
    }

    /// The wire's netem limit: everything in flight over the delay line plus 50 ms of
    /// queue, twice, in 1500-byte packets (no rate: 10 Gbit/s), at least 1000.
    pub fn wire_netem_limit(&self) -> u64 {
        let bps = self.rate.unwrap_or(1_250_000_000) as f64;
        ((bps * (self.delay as f64 / 1e9 + 0.05) / 1500.0 * 2.0).ceil() as u64).max(1000)
    }

    /// The IPv4 address of endpoint `b_side` (false: a, true: b) of link `index`.
    pub fn address(index: usize, b_side: bool) -> String {
        format!("10.{}.0.{}", index + 1, if b_side { 2 } else { 1 })
    }
}

/// A host's script, exactly as written (one command per line): its tc commands and,
/// in the same order in the file, its settings (`sysctl`, `echo … > …/xps_cpus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcScript {
    pub host: String,
    /// tc commands, in script order.
    pub lines: Vec<TcLine>,
    /// The other lines, in script order; `line` interleaves them with `lines`.
    pub settings: Vec<Setting>,
}

/// A non-tc line of a host's script: a setting the user would type on a real host.
/// One line may give several (`sysctl -w A=1 B=2`): each has the line's number and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Line number in the scenario file (1-based).
    pub line: usize,
    /// The line as written (trimmed).
    pub text: String,
    pub kind: SettingKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingKind {
    /// `sysctl -w KEY=VALUE` (also `sysctl KEY=VALUE`, and `echo VALUE >
    /// /proc/sys/net/core/NAME`): one of [`SYSCTL_KEYS`], with a value the kernel
    /// accepts. `key` is dotted (`net.core.dev_weight`); an integer `value` is in
    /// canonical decimal form, `default_qdisc`'s as written.
    Sysctl { key: String, value: String },
    /// `echo MASK > /sys/class/net/DEV/queues/tx-N/xps_cpus`: the CPUs (sorted,
    /// deduplicated) of the hex cpumask (kernel bitmap format: hex groups of 32 bits
    /// separated by commas, e.g. "ffff,ffffffff"; "0" = no XPS for that queue).
    XpsCpus { dev: String, txq: u32, cpus: Vec<u32> },
}

impl TcScript {
    /// Every line of the script in file order: tc commands and settings interleaved.
    pub fn in_order(&self) -> Vec<ScriptItem<'_>> {
        let mut v: Vec<ScriptItem<'_>> = self.lines.iter().map(ScriptItem::Tc).collect();
        v.extend(self.settings.iter().map(ScriptItem::Setting));
        // Stable: the settings of one line keep their order.
        v.sort_by_key(|i| i.line());
        v
    }
}

/// One line of a [`TcScript`], see [`TcScript::in_order`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptItem<'a> {
    Tc(&'a TcLine),
    Setting(&'a Setting),
}

impl ScriptItem<'_> {
    pub fn line(&self) -> usize {
        match self {
            ScriptItem::Tc(t) => t.line,
            ScriptItem::Setting(s) => s.line,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcLine {
    /// Line number in the scenario file (1-based).
    pub line: usize,
    /// The line as written (trimmed).
    pub text: String,
    /// tc's argv (without a leading `tc`), split as `tc -batch` splits a line.
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    pub kind: TrafficKind,
    pub from: String,
    pub to: String,
    /// Nanoseconds after the scenario starts.
    pub start: u64,
    /// Nanoseconds.
    pub duration: u64,
    /// Line of the `[[traffic]]` entry in the file.
    pub line: usize,
    /// `sender_cpus = "0-47"` (taskset -c cpulist syntax), sorted and deduplicated: the
    /// sending threads run on these CPUs of `from` — thread/flow k of the entry on the
    /// k-th CPU of the list, round robin. `None`: free (the simulator places them).
    pub sender_cpus: Option<Vec<u32>>,
    /// `receiver_cpus`: the same for the receiving threads on `to` (tcp and udp only:
    /// a ping is answered by the kernel, with no thread to place).
    pub receiver_cpus: Option<Vec<u32>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TrafficKind {
    /// Bulk TCP, `flows` parallel connections with congestion control `cc`.
    Tcp { flows: u32, cc: String },
    /// Constant-bitrate UDP: `flows` streams of `size`-byte payloads, each at `rate`
    /// bytes/s (iperf3's `-b` is per stream); `None`: `rate = "unlimited"`, as fast as
    /// the sender can (iperf3 `-b 0`).
    Udp { rate: Option<u64>, size: u32, flows: u32 },
    /// ICMP echo every `interval` nanoseconds.
    Ping { interval: u64 },
}

impl TrafficKind {
    pub fn name(&self) -> &'static str {
        match self {
            TrafficKind::Tcp { .. } => "tcp",
            TrafficKind::Udp { .. } => "udp",
            TrafficKind::Ping { .. } => "ping",
        }
    }
}

impl Scenario {
    /// Read and validate a scenario file.
    pub fn load(path: impl AsRef<Path>) -> Result<Scenario, LoadError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| LoadError::whole(&file, format!("cannot read: {e}")))?;
        Scenario::from_bytes(&bytes, &file)
    }

    /// Validate a scenario from its bytes; `file` names it in errors.
    pub fn from_bytes(bytes: &[u8], file: &str) -> Result<Scenario, LoadError> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let off = e.valid_up_to();
            let (line, col) = line_col(&String::from_utf8_lossy(&bytes[..off]), off);
            LoadError { file: file.into(), pos: Some((line, col)), field: String::new(), message: "not UTF-8".into() }
        })?;
        let sha256 = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
        let cx = Cx { file, text };
        // Syntax first: its errors have the best spans, and the spanned tree maps later
        // type errors to field paths.
        let doc = DeTable::parse(text).map_err(|e| cx.toml_error(&e, None))?;
        let raw: RawScenario = toml::from_str(text).map_err(|e| cx.toml_error(&e, Some(doc.get_ref())))?;
        validate(&cx, raw, sha256)
    }

    /// The `[[link]]` joining two hosts directly, if any (the first one).
    pub fn link_between(&self, x: &str, y: &str) -> Option<(usize, &Link)> {
        self.links
            .iter()
            .enumerate()
            .find(|(_, l)| (l.a.host == x && l.b.host == y) || (l.a.host == y && l.b.host == x))
    }

    /// The route from `from` to `to`: the links crossed, in order, each with whether it
    /// is crossed from its `b` end (false: from `a` to `b`). Shortest in hops; among
    /// equally short routes the one using earlier links first. `None`: not connected.
    pub fn path(&self, from: &str, to: &str) -> Option<Vec<(usize, bool)>> {
        path(&self.links, from, to)
    }

    /// The address traffic from `from` to `to` is sent to: `to`'s address on the
    /// last link of the route.
    pub fn dst_address(&self, from: &str, to: &str) -> Option<String> {
        let p = self.path(from, to)?;
        let &(li, _) = p.last()?;
        Some(self.address_on(li, to))
    }

    /// The address of `host` on link `index`.
    pub fn address_on(&self, index: usize, host: &str) -> String {
        Link::address(index, self.links[index].b.host == host)
    }

    /// The interfaces of a host, in link order.
    pub fn ifaces(&self, host: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for l in &self.links {
            for e in [&l.a, &l.b] {
                if e.host == host {
                    out.push(e.iface.as_str());
                }
            }
        }
        out
    }

    /// The tc script of a host, if it has one.
    pub fn tc_of(&self, host: &str) -> Option<&TcScript> {
        self.tc.iter().find(|t| t.host == host)
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }
}

/// A CPU set in the kernel's bitmap format (`%*pb`, what `xps_cpus` reads back without
/// leading zero groups): hex groups of 32 CPUs separated by commas, the last group
/// CPUs 0–31; "0" for none.
pub fn cpumask_string(cpus: &[u32]) -> String {
    let Some(&max) = cpus.iter().max() else { return "0".into() };
    let mut groups = vec![0u32; max as usize / 32 + 1];
    for &c in cpus {
        groups[c as usize / 32] |= 1 << (c % 32);
    }
    let mut out = String::new();
    for (i, g) in groups.iter().rev().enumerate() {
        if i == 0 {
            out.push_str(&format!("{g:x}"));
        } else {
            out.push_str(&format!(",{g:08x}"));
        }
    }
    out
}

/// A cpulist as `taskset -c` reads it (util-linux `cpulist_parse`): `N`, `N-M` or
/// `N-M:STRIDE`, separated by commas. Sorted, deduplicated.
pub fn parse_cpulist(s: &str) -> Result<Vec<u32>, String> {
    let bad = || format!("invalid cpu list {s:?} (taskset -c syntax, e.g. \"0-3\", \"0,2\", \"0-47:2\")");
    let num = |t: &str| -> Result<u32, String> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse::<u32>().map_err(|_| bad())
    };
    let mut out = BTreeSet::new();
    for item in s.split(',') {
        let (range, stride) = match item.split_once(':') {
            Some((r, st)) => (r, num(st)?),
            None => (item, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None if stride == 1 && !item.contains(':') => {
                let n = num(range)?;
                (n, n)
            }
            None => return Err(bad()),
        };
        if a > b || stride == 0 {
            return Err(bad());
        }
        if b >= 1 << 16 {
            return Err(format!("cpu {b} in {s:?} is beyond any machine (at most 4096 cpus)"));
        }
        out.extend((a..=b).step_by(stride as usize));
    }
    Ok(out.into_iter().collect())
}

/// A hex cpumask as the kernel's `bitmap_parse` reads it (e.g. `xps_cpus`): groups of
/// 1–8 hex digits separated by commas, the last group CPUs 0–31. Returns the CPUs
/// (sorted) and the number of groups.
pub fn parse_cpumask(s: &str) -> Result<(Vec<u32>, usize), String> {
    let bad = || {
        format!(
            "invalid xps mask {s:?} (hex groups of up to 32 bits separated by commas, e.g. \"f\" or \"ffff,ffffffff\"; \"0\" = no XPS)"
        )
    };
    let groups: Vec<&str> = s.split(',').collect();
    if groups.len() > 128 {
        return Err(bad());
    }
    let mut cpus = Vec::new();
    for (i, g) in groups.iter().rev().enumerate() {
        if g.is_empty() || g.len() > 8 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let v = u32::from_str_radix(g, 16).map_err(|_| bad())?;
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                cpus.push(i as u32 * 32 + bit);
            }
        }
    }
    Ok((cpus, groups.len()))
}

/// Breadth-first search over the links (in file order, so ties are deterministic).
fn path(links: &[Link], from: &str, to: &str) -> Option<Vec<(usize, bool)>> {
    let mut prev: BTreeMap<&str, (usize, bool, &str)> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::from([from]);
    let mut frontier = vec![from];
    while !frontier.is_empty() && !seen.contains(to) {
        let mut next = Vec::new();
        for h in frontier {
            for (i, l) in links.iter().enumerate() {
                for (reverse, (x, y)) in [(false, (&l.a.host, &l.b.host)), (true, (&l.b.host, &l.a.host))] {
                    if x == h && seen.insert(y.as_str()) {
                        prev.insert(y.as_str(), (i, reverse, h));
                        next.push(y.as_str());
                    }
                }
            }
        }
        frontier = next;
    }
    if !seen.contains(to) {
        return None;
    }
    let mut out = Vec::new();
    let mut at = to;
    while at != from {
        let (i, reverse, p) = prev[at];
        out.push((i, reverse));
        at = p;
    }
    out.reverse();
    Some(out)
}

/// A scenario that could not be loaded: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub file: String,
    /// 1-based line and column (in characters), when the error has a place.
    pub pos: Option<(usize, usize)>,
    /// Dotted path of the field, e.g. `link[0].rate`; empty when not about one field.
    pub field: String,
    pub message: String,
}

impl LoadError {
    fn whole(file: &str, message: String) -> LoadError {
        LoadError { file: file.into(), pos: None, field: String::new(), message }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((l, c)) = self.pos {
            write!(f, ":{l}:{c}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for LoadError {}

// ---------------------------------------------------------------------------------
// Raw TOML.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<Spanned<String>>,
    duration: Option<Spanned<String>>,
    seed: Option<Spanned<i64>>,
    #[serde(default)]
    host: Vec<Spanned<RawHost>>,
    #[serde(default)]
    link: Vec<Spanned<RawLink>>,
    #[serde(default)]
    tc: BTreeMap<String, Spanned<RawTc>>,
    #[serde(default)]
    traffic: Vec<Spanned<RawTraffic>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Spanned<String>,
    cpus: Option<Spanned<i64>>,
    profile: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    between: Spanned<Vec<Spanned<String>>>,
    kind: Option<Spanned<String>>,
    txqueues: Option<Spanned<i64>>,
    rate: Option<Spanned<String>>,
    delay: Option<Spanned<String>>,
    loss: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTc {
    script: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraffic {
    kind: Spanned<String>,
    from: Spanned<String>,
    to: Spanned<String>,
    start: Option<Spanned<String>>,
    duration: Option<Spanned<String>>,
    flows: Option<Spanned<i64>>,
    cc: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    size: Option<Spanned<String>>,
    interval: Option<Spanned<String>>,
    sender_cpus: Option<Spanned<String>>,
    receiver_cpus: Option<Spanned<String>>,
}

// ---------------------------------------------------------------------------------
// Positions.

struct Cx<'a> {
    file: &'a str,
    text: &'a str,
}

/// 1-based line and column (characters) of a byte offset.
fn line_col(text: &str, off: usize) -> (usize, usize) {
    let mut off = off.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

impl Cx<'_> {
    fn at(&self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        LoadError {
            file: self.file.into(),
            pos: Some(line_col(self.text, span.start)),
            field: field.into(),
            message: message.into(),
        }
    }

    fn line_of(&self, span: &Range<usize>) -> usize {
        line_col(self.text, span.start).0
    }

    /// A `toml` error: its span gives the place, the spanned tree (when the syntax was
    /// fine) gives the field holding that place.
    fn toml_error(&self, e: &toml::de::Error, doc: Option<&DeTable<'_>>) -> LoadError {
        let span = e.span().unwrap_or(0..0);
        let field = doc.map(|d| field_at(d, &span)).unwrap_or_default();
        let message = e.message().trim_end().replace('\n', " ");
        LoadError { file: self.file.into(), pos: e.span().map(|s| line_col(self.text, s.start)), field, message }
    }
}

/// The dotted path of the innermost key or value whose span holds `span`.
fn field_at(doc: &DeTable<'_>, span: &Range<usize>) -> String {
    fn holds(outer: &Range<usize>, inner: &Range<usize>) -> bool {
        outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
    }
    fn walk_table(t: &DeTable<'_>, span: &Range<usize>, path: &mut String) -> bool {
        for (k, v) in t.iter() {
            if holds(&k.span(), span) {
                push_key(path, k.get_ref());
                return true;
            }
            if holds(&v.span(), span) || contains(v.get_ref(), span) {
                push_key(path, k.get_ref());
                walk_value(v.get_ref(), span, path);
                return true;
            }
        }
        false
    }
    fn walk_value(v: &DeValue<'_>, span: &Range<usize>, path: &mut String) {
        match v {
            DeValue::Table(t) => {
                walk_table(t, span, path);
            }
            DeValue::Array(a) => {
                for (i, item) in a.iter().enumerate() {
                    if holds(&item.span(), span) || contains(item.get_ref(), span) {
                        path.push_str(&format!("[{i}]"));
                        walk_value(item.get_ref(), span, path);
                        return;
                    }
                }
            }
            _ => {}
        }
    }
    /// Tables of `[[x]]` arrays are spanned by their header only: look inside.
    fn contains(v: &DeValue<'_>, span: &Range<usize>) -> bool {
        match v {
            DeValue::Table(t) => {
                t.iter().any(|(k, v)| holds(&k.span(), span) || holds(&v.span(), span) || contains(v.get_ref(), span))
            }
            DeValue::Array(a) => a.iter().any(|i| holds(&i.span(), span) || contains(i.get_ref(), span)),
            _ => false,
        }
    }
    fn push_key(path: &mut String, k: &str) {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(k);
    }
    let mut path = String::new();
    walk_table(doc, span, &mut path);
    path
}

// ---------------------------------------------------------------------------------
// Validation.

const RATE_HINT: &str = "(tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\")";
const TIME_HINT: &str = "(tc units, e.g. \"10s\", \"250ms\", \"100us\")";
const SIZE_HINT: &str = "(tc units, e.g. \"1400\", \"1400b\", \"64kb\")";

fn parse_rate(cx: &Cx, v: &Spanned<String>, field: &str) -> Result<u64, LoadError> {
    let s = v.get_ref().trim();
    match get_rate64(s) {
        Some(r) if !s.starts_with('-') && r > 0 => Ok(r),
        Some(_) if !s.starts_with('-') => Err(cx.at(v.span(), field, "a rate must be greater than 0")),
        _ => Err(cx.at(v.span(), field, format!("invalid rate {:?} {RATE_HINT}", v.get_ref()))),
    }
}

fn parse_time(cx: &Cx, v: &Spanned<String>, field: &str) -> Result<u64, LoadError> {
    let s = v.get_ref().trim();
    if s.starts_with('-') {
        return Err(cx.at(v.span(), field, format!("a time cannot be negative: {:?}", v.get_ref())));
    }
    get_time64(s).ok_or_else(|| cx.at(v.span(), field, format!("invalid time {:?} {TIME_HINT}", v.get_ref())))
}

fn parse_size(cx: &Cx, v: &Spanned<String>, field: &str) -> Result<u32, LoadError> {
    get_size(v.get_ref().trim())
        .ok_or_else(|| cx.at(v.span(), field, format!("invalid size {:?} {SIZE_HINT}", v.get_ref())))
}

fn fmt_ns(ns: u64) -> String {
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1000) {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}

fn valid_host_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
}

/// Linux interface names: 1–15 bytes, no '/', ':', whitespace; we also keep to a
/// portable character set.
fn valid_iface(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && s != "."
        && s != ".."
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

fn validate(cx: &Cx, raw: RawScenario, sha256: String) -> Result<Scenario, LoadError> {
    let top = |field: &str, msg: &str| LoadError {
        file: cx.file.into(),
        pos: Some((1, 1)),
        field: field.into(),
        message: msg.into(),
    };
    let name = match &raw.name {
        Some(n) if n.get_ref().trim().is_empty() => return Err(cx.at(n.span(), "name", "must not be empty")),
        Some(n) => n.get_ref().clone(),
        None => Path::new(cx.file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    let Some(dur) = &raw.duration else {
        return Err(top("duration", "missing (the length of the run, e.g. duration = \"10s\")"));
    };
    let duration = parse_time(cx, dur, "duration")?;
    if duration == 0 {
        return Err(cx.at(dur.span(), "duration", "must be greater than 0"));
    }
    let seed = match &raw.seed {
        Some(s) if *s.get_ref() < 0 => return Err(cx.at(s.span(), "seed", "must not be negative")),
        Some(s) => *s.get_ref() as u64,
        None => 0,
    };

    // Hosts.
    if raw.host.is_empty() {
        return Err(top("host", "no hosts (add [[host]] entries with a name)"));
    }
    let mut hosts = Vec::new();
    let mut seen = BTreeSet::new();
    // Profiles are read once per name; relative names are relative to the file.
    let mut profiles: BTreeMap<String, Profile> = BTreeMap::new();
    let scenario_dir = Path::new(cx.file).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for (i, h) in raw.host.iter().enumerate() {
        let n = &h.get_ref().name;
        let field = format!("host[{i}].name");
        if !valid_host_name(n.get_ref()) {
            return Err(cx.at(
                n.span(),
                field,
                format!(
                    "invalid host name {:?} (1–32 of A-Z a-z 0-9 _ -, starting with a letter or digit)",
                    n.get_ref()
                ),
            ));
        }
        if !seen.insert(n.get_ref().clone()) {
            return Err(cx.at(n.span(), field, format!("host {:?} is declared twice", n.get_ref())));
        }
        let cpus = match &h.get_ref().cpus {
            None => DEFAULT_CPUS,
            Some(v) => match u32::try_from(*v.get_ref()) {
                Ok(n) if (1..=4096).contains(&n) => n,
                _ => return Err(cx.at(v.span(), format!("host[{i}].cpus"), "cpus must be 1..4096")),
            },
        };
        let spec = h.get_ref().profile.as_ref().map_or("default", |p| p.get_ref().as_str());
        let profile = match profiles.get(spec) {
            Some(p) => Profile::clone(p),
            None => {
                let p = Profile::load(spec, scenario_dir).map_err(|e| {
                    let span = h.get_ref().profile.as_ref().map_or(h.span(), |p| p.span());
                    cx.at(span, format!("host[{i}].profile"), e)
                })?;
                profiles.insert(spec.to_string(), p.clone());
                p
            }
        };
        hosts.push(Host { name: n.get_ref().clone(), cpus, profile });
    }
    let host_list = || hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>().join(", ");

    // Links.
    let mut links = Vec::new();
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for (i, l) in raw.link.iter().enumerate() {
        let r = l.get_ref();
        let field = format!("link[{i}].between");
        let ends = r.between.get_ref();
        if ends.len() != 2 {
            return Err(cx.at(
                r.between.span(),
                field,
                format!("a link joins exactly two \"host:iface\" endpoints, not {}", ends.len()),
            ));
        }
        let mut eps = Vec::new();
        for (j, e) in ends.iter().enumerate() {
            let f = format!("link[{i}].between[{j}]");
            let Some((h, ifc)) = e.get_ref().split_once(':') else {
                return Err(cx.at(e.span(), f, format!("{:?} is not \"host:iface\"", e.get_ref())));
            };
            if !seen.contains(h) {
                return Err(cx.at(e.span(), f, format!("unknown host {h:?} (hosts: {})", host_list())));
            }
            if !valid_iface(ifc) {
                return Err(cx.at(e.span(), f, format!("invalid interface name {ifc:?} (1–15 of A-Z a-z 0-9 _ - .)")));
            }
            if ifc == "lo" {
                return Err(cx.at(e.span(), f, "\"lo\" is the loopback device; name the link's interface otherwise"));
            }
            if !used.insert((h.to_string(), ifc.to_string())) {
                return Err(cx.at(e.span(), f, format!("interface {h}:{ifc} is already used by another link")));
            }
            eps.push(Endpoint { host: h.into(), iface: ifc.into() });
        }
        if eps[0].host == eps[1].host {
            return Err(cx.at(r.between.span(), field, "a link joins two different hosts"));
        }
        let rate = r.rate.as_ref().map(|v| parse_rate(cx, v, &format!("link[{i}].rate"))).transpose()?;
        let delay = r.delay.as_ref().map(|v| parse_time(cx, v, &format!("link[{i}].delay"))).transpose()?.unwrap_or(0);
        let loss = match &r.loss {
            None => 0.0,
            Some(v) => {
                let f = format!("link[{i}].loss");
                let t = v.get_ref().trim();
                let plain = !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '%');
                let p = get_percent(t).filter(|_| plain).ok_or_else(|| {
                    cx.at(v.span(), &f, format!("invalid loss {:?} (a percentage, e.g. \"0.5%\")", v.get_ref()))
                })? * 100.0;
                if !(0.0..=100.0).contains(&p) {
                    return Err(cx.at(v.span(), f, "loss must be between 0% and 100%"));
                }
                p
            }
        };
        let kind = match r.kind.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "eth")) => LinkKind::Eth,
            Some((_, "veth")) => LinkKind::Veth,
            Some((v, other)) => {
                return Err(cx.at(v.span(), format!("link[{i}].kind"), format!("unknown kind {other:?} (eth or veth)")))
            }
        };
        let txqueues = match &r.txqueues {
            None => 1,
            Some(v) => match u32::try_from(*v.get_ref()) {
                Ok(n) if (1..=4096).contains(&n) => n,
                _ => return Err(cx.at(v.span(), format!("link[{i}].txqueues"), "txqueues must be 1..4096")),
            },
        };
        let b = eps.pop().unwrap();
        let a = eps.pop().unwrap();
        links.push(Link { a, b, kind, txqueues, rate, delay, loss, line: cx.line_of(&l.span()) });
    }
    if links.len() > 254 {
        return Err(top("link", "at most 254 links (link i uses the subnet 10.(i+1).0.0/24)"));
    }

    // tc scripts.
    let mut tc = Vec::new();
    for (host, t) in &raw.tc {
        let script = &t.get_ref().script;
        let field = format!("tc.{host}.script");
        if !seen.contains(host.as_str()) {
            return Err(cx.at(
                t.span(),
                format!("tc.{host}"),
                format!("unknown host {host:?} (hosts: {})", host_list()),
            ));
        }
        let mut ifaces: Vec<(String, u32, usize)> = links
            .iter()
            .enumerate()
            .flat_map(|(li, l)| [(li, l, &l.a), (li, l, &l.b)])
            .filter(|(_, _, e)| &e.host == host)
            .map(|(li, l, e)| (e.iface.clone(), l.txqueues, li))
            .collect();
        ifaces.sort();
        let h = hosts.iter().find(|h| &h.name == host).expect("checked above");
        let (lines, settings) = script_lines(cx, script, &field, h, &ifaces)?;
        tc.push(TcScript { host: host.clone(), lines, settings });
    }
    tc.sort_by_key(|s| hosts.iter().position(|h| h.name == s.host));

    // Traffic.
    let mut traffic = Vec::new();
    for (i, t) in raw.traffic.iter().enumerate() {
        let r = t.get_ref();
        let f = |name: &str| format!("traffic[{i}].{name}");
        let kind = r.kind.get_ref().as_str();
        let takes: &[&str] = match kind {
            "tcp" => &["flows", "cc", "sender_cpus", "receiver_cpus"],
            "udp" => &["rate", "size", "flows", "sender_cpus", "receiver_cpus"],
            "ping" => &["interval", "sender_cpus"],
            _ => {
                return Err(cx.at(
                    r.kind.span(),
                    f("kind"),
                    format!("unknown traffic kind {kind:?} (expected \"tcp\", \"udp\" or \"ping\")"),
                ))
            }
        };
        let optional: [(&str, Option<Range<usize>>); 7] = [
            ("flows", r.flows.as_ref().map(|v| v.span())),
            ("cc", r.cc.as_ref().map(|v| v.span())),
            ("rate", r.rate.as_ref().map(|v| v.span())),
            ("size", r.size.as_ref().map(|v| v.span())),
            ("interval", r.interval.as_ref().map(|v| v.span())),
            ("sender_cpus", r.sender_cpus.as_ref().map(|v| v.span())),
            ("receiver_cpus", r.receiver_cpus.as_ref().map(|v| v.span())),
        ];
        for (name, span) in optional {
            if let Some(span) = span {
                if !takes.contains(&name) {
                    return Err(cx.at(
                        span,
                        f(name),
                        format!(
                            "does not apply to kind {kind:?} ({kind} takes: from, to, start, duration, {})",
                            takes.join(", ")
                        ),
                    ));
                }
            }
        }
        for (name, v) in [("from", &r.from), ("to", &r.to)] {
            if !seen.contains(v.get_ref().as_str()) {
                return Err(cx.at(
                    v.span(),
                    f(name),
                    format!("unknown host {:?} (hosts: {})", v.get_ref(), host_list()),
                ));
            }
        }
        let (from, to) = (r.from.get_ref().clone(), r.to.get_ref().clone());
        if from == to {
            return Err(cx.at(r.to.span(), f("to"), "traffic goes between two different hosts"));
        }
        if path(&links, &from, &to).is_none() {
            return Err(cx.at(r.to.span(), f("to"), format!("no path of [[link]]s joins {from:?} and {to:?}")));
        }
        let start = r.start.as_ref().map(|v| parse_time(cx, v, &f("start"))).transpose()?.unwrap_or(0);
        if start >= duration {
            let span = r.start.as_ref().unwrap().span();
            return Err(cx.at(
                span,
                f("start"),
                format!("starts at {} but the scenario lasts {}", fmt_ns(start), fmt_ns(duration)),
            ));
        }
        let tdur = match &r.duration {
            None => duration - start,
            Some(v) => {
                let d = parse_time(cx, v, &f("duration"))?;
                if d == 0 {
                    return Err(cx.at(v.span(), f("duration"), "must be greater than 0"));
                }
                if start + d > duration {
                    return Err(cx.at(
                        v.span(),
                        f("duration"),
                        format!("ends at {} but the scenario lasts {}", fmt_ns(start + d), fmt_ns(duration)),
                    ));
                }
                d
            }
        };
        let flows = match &r.flows {
            None => 1,
            Some(v) if (1..=128).contains(v.get_ref()) => *v.get_ref() as u32,
            Some(v) => return Err(cx.at(v.span(), f("flows"), "must be between 1 and 128")),
        };
        let pins = |v: &Option<Spanned<String>>, name: &str, host: &str| -> Result<Option<Vec<u32>>, LoadError> {
            let Some(v) = v else { return Ok(None) };
            let cpus = parse_cpulist(v.get_ref().trim()).map_err(|e| cx.at(v.span(), f(name), e))?;
            let h = hosts.iter().find(|h| h.name == host).expect("checked above");
            if let Some(&c) = cpus.iter().find(|&&c| c >= h.cpus) {
                return Err(cx.at(
                    v.span(),
                    f(name),
                    format!("host {host} has {}: cpu {c} does not exist", h.cpus_phrase()),
                ));
            }
            Ok(Some(cpus))
        };
        let sender_cpus = pins(&r.sender_cpus, "sender_cpus", &from)?;
        let receiver_cpus = pins(&r.receiver_cpus, "receiver_cpus", &to)?;
        let kind = match kind {
            "tcp" => {
                let cc = match &r.cc {
                    None => "cubic".to_string(),
                    Some(v) => {
                        let s = v.get_ref();
                        if s.is_empty() || s.len() > 15 || !s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
                            return Err(cx.at(
                                v.span(),
                                f("cc"),
                                format!("invalid congestion control name {s:?} (e.g. \"cubic\", \"bbr\", \"reno\")"),
                            ));
                        }
                        s.clone()
                    }
                };
                TrafficKind::Tcp { flows, cc }
            }
            "udp" => {
                let Some(rv) = &r.rate else {
                    return Err(cx.at(
                        t.span(),
                        f("rate"),
                        "missing: udp traffic needs a rate per flow (e.g. rate = \"50mbit\", or \"unlimited\")",
                    ));
                };
                let rate = if rv.get_ref().trim() == "unlimited" {
                    None
                } else if get_rate64(rv.get_ref().trim()).is_none() {
                    return Err(cx.at(
                        rv.span(),
                        f("rate"),
                        format!(
                            "invalid rate {:?} (tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\", or \"unlimited\")",
                            rv.get_ref()
                        ),
                    ));
                } else {
                    Some(parse_rate(cx, rv, &f("rate"))?)
                };
                let size = match &r.size {
                    None => 1400,
                    Some(v) => {
                        let s = parse_size(cx, v, &f("size"))?;
                        if !(1..=65507).contains(&s) {
                            return Err(cx.at(v.span(), f("size"), "a UDP payload is 1 to 65507 bytes"));
                        }
                        s
                    }
                };
                TrafficKind::Udp { rate, size, flows }
            }
            _ => {
                let interval = match &r.interval {
                    None => 1_000_000_000,
                    Some(v) => {
                        let iv = parse_time(cx, v, &f("interval"))?;
                        if iv == 0 {
                            return Err(cx.at(v.span(), f("interval"), "must be greater than 0"));
                        }
                        iv
                    }
                };
                TrafficKind::Ping { interval }
            }
        };
        traffic.push(Traffic {
            kind,
            from,
            to,
            start,
            duration: tdur,
            line: cx.line_of(&t.span()),
            sender_cpus,
            receiver_cpus,
        });
    }

    Ok(Scenario { file: cx.file.into(), sha256, name, duration, seed, hosts, links, tc, traffic })
}

/// Split a script into tc command lines and settings, each with its line number in the
/// file, and check what can be checked without a kernel: the devices it names are the
/// host's, settings are ones the kernel would take on a host like this one.
/// `ifaces`: the host's interfaces (sorted by name), each with its tx queues and link.
fn script_lines(
    cx: &Cx,
    script: &Spanned<String>,
    field: &str,
    host: &Host,
    ifaces: &[(String, u32, usize)],
) -> Result<(Vec<TcLine>, Vec<Setting>), LoadError> {
    // Where each line of the (decoded) string sits in the file: find its text in the
    // raw string, in order. Escapes could make a line unfindable; it then gets the
    // string's own position.
    let span = script.span();
    let raw = cx.text.get(span.clone()).unwrap_or("");
    let mut cursor = 0usize;
    let mut out = Vec::new();
    let mut settings = Vec::new();
    let names: Vec<&str> = ifaces.iter().map(|(n, _, _)| n.as_str()).collect();
    let not_ours = |d: &str| {
        let has = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        format!("device {d:?} is not an interface of host {:?} (its interfaces: {has})", host.name)
    };
    for (k, line) in script.get_ref().lines().enumerate() {
        let text = line.trim();
        let offset = if text.is_empty() {
            None
        } else {
            raw.get(cursor..).and_then(|r| r.find(text)).map(|p| {
                cursor += p + text.len();
                span.start + cursor - text.len()
            })
        };
        let mut args = makeargs(text);
        if args.is_empty() {
            continue; // blank line or comment
        }
        let at = offset.unwrap_or(span.start);
        let here = |msg: String| cx.at(at..at, field, format!("script line {}: {msg}", k + 1));
        let line_no = line_col(cx.text, at).0;
        if args[0] == "sysctl" || args[0] == "echo" {
            let kinds = if args[0] == "sysctl" {
                sysctl_line(&args[1..]).map_err(here)?
            } else {
                vec![echo_line(&args[1..], host, ifaces, &not_ours).map_err(here)?]
            };
            settings.extend(kinds.into_iter().map(|kind| Setting { line: line_no, text: text.to_string(), kind }));
            continue;
        }
        if args[0] == "tc" {
            args.remove(0);
            if args.is_empty() {
                return Err(here("\"tc\" alone is not a command".into()));
            }
        }
        for (j, a) in args.iter().enumerate() {
            if matches!(a.as_str(), "-n" | "-netns" | "-b" | "-batch")
                || (a.starts_with("-n") && a.len() > 2 && "-netns".starts_with(a.as_str()))
            {
                return Err(here(format!("option {a:?} is not allowed: each script runs in its host's namespace")));
            }
            if a == "dev" {
                let Some(d) = args.get(j + 1) else {
                    return Err(here("\"dev\" without a device name".into()));
                };
                if !names.contains(&d.as_str()) && d != "lo" {
                    return Err(here(not_ours(d)));
                }
            }
        }
        out.push(TcLine { line: line_no, text: text.to_string(), args });
    }
    // Settings and tc lines are put in order by their line in the file: one line of the
    // file cannot hold both (a "\n" escape in a one-line string would).
    if let Some(st) = settings.iter().find(|st| out.iter().any(|t| t.line == st.line)) {
        return Err(cx.at(
            script.span(),
            field,
            format!(
                "line {}: {:?} shares its line of the file with a tc command; give each setting a line of its own \
                 (a multi-line string, \"\"\"…\"\"\")",
                st.line, st.text
            ),
        ));
    }
    Ok((out, settings))
}

/// `sysctl [-w] [-q] KEY=VALUE…` (the words after `sysctl`).
fn sysctl_line(args: &[String]) -> Result<Vec<SettingKind>, String> {
    let mut out = Vec::new();
    for a in args {
        if a.starts_with('-') {
            if a != "-w" && a != "-q" {
                return Err(format!("sysctl option {a:?} is not supported (write settings as sysctl -w KEY=VALUE)"));
            }
            continue;
        }
        let Some((key, value)) = a.split_once('=') else {
            return Err(format!("sysctl {a}: reading a setting changes nothing; write it as sysctl -w {a}=VALUE"));
        };
        out.push(sysctl_setting(key, value)?);
    }
    if out.is_empty() {
        return Err("sysctl without KEY=VALUE (e.g. sysctl -w net.core.dev_weight=64)".into());
    }
    Ok(out)
}

/// One `KEY=VALUE`, checked as the kernel checks it (net/core/sysctl_net_core.c).
fn sysctl_setting(key: &str, value: &str) -> Result<SettingKind, String> {
    // procps takes `/` as well as `.` between the parts of a key.
    let key = key.trim().replace('/', ".");
    if !SYSCTL_KEYS.contains(&key.as_str()) {
        return Err(format!("unknown sysctl key {key:?} (supported: {})", SYSCTL_KEYS.join(", ")));
    }
    let value = value.trim();
    if key == "net.core.default_qdisc" {
        qdisc::tree::check_default_qdisc(value).map_err(|e| format!("{key} = {value:?} is refused: {e}"))?;
        return Ok(SettingKind::Sysctl { key, value: value.to_string() });
    }
    let (min, max, why) = sysctl_range(&key).expect("an integer key");
    let Some(n) = parse_c_int(value) else {
        return Err(format!("{key} = {value:?}: not an integer"));
    };
    let n = Some(n).filter(|n| (min..=max).contains(n));
    let Some(n) = n else {
        return Err(format!("{key} = {value} is out of range: the kernel takes {min} to {max}{why}"));
    };
    Ok(SettingKind::Sysctl { key, value: n.to_string() })
}

/// An integer as `proc_dointvec` reads it (`proc_get_long`: an optional `-`, then
/// `strtoul` with base 0: `0x` hex, a leading `0` octal, else decimal). `None`: not
/// one, or beyond 64 bits.
fn parse_c_int(s: &str) -> Option<i64> {
    let (neg, t) = match s.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, s),
    };
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i64::try_from(u64::from_str_radix(digits, radix).ok()?).ok()?;
    Some(if neg { -v } else { v })
}

/// The values the kernel accepts for an integer key of [`SYSCTL_KEYS`] (6.12 and 6.18,
/// net/core/sysctl_net_core.c, `net_core_table`): `proc_dointvec` takes any `int`;
/// the dev_weight family is `proc_dointvec_minmax` with `extra1 = SYSCTL_ONE`;
/// netdev_budget_usecs has `extra1 = netdev_budget_usecs_min`, 2 jiffies
/// (`2 * USEC_PER_SEC / HZ`, 8000 with Debian's and this project's HZ=250). With the
/// reason printed after a range error.
pub fn sysctl_range(key: &str) -> Option<(i64, i64, &'static str)> {
    let int = (i32::MIN as i64, i32::MAX as i64, "");
    match key {
        "net.core.dev_weight" | "net.core.dev_weight_tx_bias" | "net.core.dev_weight_rx_bias" => {
            Some((1, i32::MAX as i64, ""))
        }
        "net.core.netdev_budget_usecs" => Some((8000, i32::MAX as i64, " (at least 2 jiffies: 8000 µs at HZ=250)")),
        "net.core.netdev_budget" | "net.core.netdev_max_backlog" => Some(int),
        _ => None,
    }
}

/// `echo [-n] VALUE > PATH` (the words after `echo`): an xps_cpus mask, or a sysctl
/// through /proc/sys.
fn echo_line(
    args: &[String],
    host: &Host,
    ifaces: &[(String, u32, usize)],
    not_ours: &dyn Fn(&str) -> String,
) -> Result<SettingKind, String> {
    const FORM: &str = "expected echo MASK > /sys/class/net/DEV/queues/tx-N/xps_cpus";
    let args: Vec<&str> = args.iter().map(String::as_str).skip_while(|a| *a == "-n").collect();
    let joined = args.join(" ");
    let Some((value, path)) = joined.split_once('>') else {
        return Err(format!("{FORM} (an echo without \">\" sets nothing)"));
    };
    let (value, path) = (value.trim(), path.trim());
    if path.starts_with('>') || value.is_empty() || path.is_empty() || value.contains(' ') || path.contains(' ') {
        return Err(FORM.into());
    }
    if let Some(name) = path.strip_prefix("/proc/sys/") {
        return sysctl_setting(name, value);
    }
    let parts: Vec<&str> = path.strip_prefix("/sys/class/net/").map(|r| r.split('/').collect()).unwrap_or_default();
    let [dev, "queues", q, "xps_cpus"] = parts[..] else {
        return Err(format!(
            "echo to {path:?} is not supported: the only /sys file a script can write is \
             /sys/class/net/DEV/queues/tx-N/xps_cpus (XPS)"
        ));
    };
    let Some((_, txqueues, link)) = ifaces.iter().find(|(n, _, _)| n == dev) else {
        return Err(not_ours(dev));
    };
    let txq = q
        .strip_prefix("tx-")
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| format!("{q:?} is not a tx queue (tx-0, tx-1, …)"))?;
    if txq >= *txqueues {
        let has = if *txqueues == 1 {
            "1 tx queue (tx-0)".to_string()
        } else {
            format!("{txqueues} tx queues (tx-0 to tx-{})", txqueues - 1)
        };
        return Err(format!(
            "{dev} of host {} has {has}, as link[{link}].txqueues says: tx-{txq} does not exist",
            host.name
        ));
    }
    let (cpus, groups) = parse_cpumask(value)?;
    if let Some(&c) = cpus.iter().find(|&&c| c >= host.cpus) {
        return Err(format!("host {} has {}: cpu {c} does not exist", host.name, host.cpus_phrase()));
    }
    let most = host.cpus.div_ceil(32) as usize;
    if groups > most {
        return Err(format!(
            "xps mask {value:?} has {groups} groups of 32 cpus; host {} has {}: the kernel takes at most {most}",
            host.name,
            host.cpus_phrase()
        ));
    }
    Ok(SettingKind::XpsCpus { dev: dev.to_string(), txq, cpus })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
    }

    #[test]
    fn ns_formatting() {
        assert_eq!(fmt_ns(10_000_000_000), "10s");
        assert_eq!(fmt_ns(2_500_000), "2500us");
        assert_eq!(fmt_ns(20_000_000), "20ms");
    }
}
