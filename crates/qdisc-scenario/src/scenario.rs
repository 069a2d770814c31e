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

#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub name: String,
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

/// A host's tc commands, exactly as written (one command per line).
#[derive(Debug, Clone, PartialEq)]
pub struct TcScript {
    pub host: String,
    pub lines: Vec<TcLine>,
}

#[derive(Debug, Clone, PartialEq)]
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
}

#[derive(Debug, Clone, PartialEq)]
pub enum TrafficKind {
    /// Bulk TCP, `flows` parallel connections with congestion control `cc`.
    Tcp { flows: u32, cc: String },
    /// Constant-bitrate UDP: `rate` bytes/s of `size`-byte payloads.
    Udp { rate: u64, size: u32 },
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
        hosts.push(Host { name: n.get_ref().clone() });
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
        let ifaces: Vec<String> = used.iter().filter(|(h, _)| h == host).map(|(_, i)| i.clone()).collect();
        let lines = script_lines(cx, script, &field, host, &ifaces)?;
        tc.push(TcScript { host: host.clone(), lines });
    }
    tc.sort_by_key(|s| hosts.iter().position(|h| h.name == s.host));

    // Traffic.
    let mut traffic = Vec::new();
    for (i, t) in raw.traffic.iter().enumerate() {
        let r = t.get_ref();
        let f = |name: &str| format!("traffic[{i}].{name}");
        let kind = r.kind.get_ref().as_str();
        let takes: &[&str] = match kind {
            "tcp" => &["flows", "cc"],
            "udp" => &["rate", "size"],
            "ping" => &["interval"],
            _ => {
                return Err(cx.at(
                    r.kind.span(),
                    f("kind"),
                    format!("unknown traffic kind {kind:?} (expected \"tcp\", \"udp\" or \"ping\")"),
                ))
            }
        };
        let optional: [(&str, Option<Range<usize>>); 6] = [
            ("flows", r.flows.as_ref().map(|v| v.span())),
            ("cc", r.cc.as_ref().map(|v| v.span())),
            ("rate", r.rate.as_ref().map(|v| v.span())),
            ("size", r.size.as_ref().map(|v| v.span())),
            ("interval", r.interval.as_ref().map(|v| v.span())),
            ("", None),
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
        let kind = match kind {
            "tcp" => {
                let flows = match &r.flows {
                    None => 1,
                    Some(v) if (1..=128).contains(v.get_ref()) => *v.get_ref() as u32,
                    Some(v) => return Err(cx.at(v.span(), f("flows"), "must be between 1 and 128")),
                };
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
                        "missing: udp traffic needs a rate (e.g. rate = \"50mbit\")",
                    ));
                };
                let rate = parse_rate(cx, rv, &f("rate"))?;
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
                TrafficKind::Udp { rate, size }
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
        traffic.push(Traffic { kind, from, to, start, duration: tdur, line: cx.line_of(&t.span()) });
    }

    Ok(Scenario { file: cx.file.into(), sha256, name, duration, seed, hosts, links, tc, traffic })
}

/// Split a script into tc command lines, each with its line number in the file, and
/// check what can be checked without a kernel: the devices it names are the host's.
fn script_lines(
    cx: &Cx,
    script: &Spanned<String>,
    field: &str,
    host: &str,
    ifaces: &[String],
) -> Result<Vec<TcLine>, LoadError> {
    // Where each line of the (decoded) string sits in the file: find its text in the
    // raw string, in order. Escapes could make a line unfindable; it then gets the
    // string's own position.
    let span = script.span();
    let raw = cx.text.get(span.clone()).unwrap_or("");
    let mut cursor = 0usize;
    let mut out = Vec::new();
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
                if !ifaces.iter().any(|i| i == d) && d != "lo" {
                    let has = if ifaces.is_empty() { "none".to_string() } else { ifaces.join(", ") };
                    return Err(here(format!(
                        "device {d:?} is not an interface of host {host:?} (its interfaces: {has})"
                    )));
                }
            }
        }
        out.push(TcLine { line: line_col(cx.text, at).0, text: text.to_string(), args });
    }
    Ok(out)
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
