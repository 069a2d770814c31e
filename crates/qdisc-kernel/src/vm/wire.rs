//! What crosses the VM boundary, and how.
//!
//! * **In** (host → guest): `/lab/run.json` in a small cpio appended to the initramfs —
//!   the [`Scenario`] exactly as loaded on the host (file name, sha256 and line numbers
//!   included, so a failing tc line is reported as `FILE:LINE` of the user's file) and
//!   the run's options.
//! * **Progress** (guest → host, live): marker lines on the serial console,
//!   `@@QDL:INIT <uptime> <kernel>`, `@@QDL:PHASE <name>`, `@@QDL:RUN <elapsed> <total>`.
//!   The console is slow (about 250 kB/s under TCG) but always there, and it is also
//!   where a kernel panic shows up.
//! * **Out** (guest → host): the [`Envelope`] (a [`RunResult`] or the error) as JSON on a
//!   virtio-serial port named [`RESULT_PORT`], backed by a file on the host, framed as
//!   `QDL-RESULT 1 <length>\n<json>`. If the guest has no such port it falls back to the
//!   console: `@@QDL:RESULT-B64 <chunk>` lines between `@@QDL:RESULT-BEGIN <length>` and
//!   `@@QDL:RESULT-END`.

use qdisc_scenario::profile::Profile;
use qdisc_scenario::scenario::{
    Endpoint, Host, Link, LinkKind, Scenario, Setting, SettingKind, TcLine, TcScript, Traffic, TrafficKind, VethBql,
};
use qdisc_scenario::{RunError, RunResult};
use serde::{Deserialize, Serialize};

/// The virtio-serial port the guest writes its result to.
pub const RESULT_PORT: &str = "org.qdisc-lab.result";
/// Format of `/lab/run.json`.
pub const RUN_FORMAT: &str = "qdisc-lab/vm-run/3";
/// Format of the guest's [`Envelope`].
pub const ENVELOPE_FORMAT: &str = "qdisc-lab/vm-guest/1";
/// Start of every console marker line.
pub const MARK: &str = "@@QDL:";

/// What the guest is asked to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestRun {
    pub format: String,
    pub scenario: WireScenario,
    pub interval_ns: u64,
    pub snapshot_interval_ns: u64,
}

/// [`Scenario`], field for field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireScenario {
    pub file: String,
    pub sha256: String,
    pub name: String,
    pub duration: u64,
    pub seed: u64,
    pub hosts: Vec<WireHost>,
    pub links: Vec<WireLink>,
    pub tc: Vec<WireTc>,
    pub traffic: Vec<WireTraffic>,
}

/// A host. Its CPU profile crosses as the text of its file (the guest has no copy of
/// it, and does not model CPU costs anyway): `None` for the bundled default, or when
/// the file can no longer be read (the guest then keeps the default's costs under the
/// file's name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireHost {
    pub name: String,
    pub cpus: u32,
    pub profile: String,
    pub profile_text: Option<String>,
    /// Its ifb devices (absent in older formats: none).
    #[serde(default)]
    pub ifb: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireLink {
    pub a: [String; 2],
    pub b: [String; 2],
    /// `"eth"`, `"veth"` or `"veth-pair"` (format 3; format 2 had `veth: bool`).
    pub kind: WireLinkKind,
    pub txqueues: u32,
    pub rate: Option<u64>,
    pub delay: u64,
    pub loss: f64,
    /// `"off"`, `"bytes"` or `"time"`.
    pub veth_bql: WireVethBql,
    pub line: usize,
}

/// [`LinkKind`], named as the scenario names it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireLinkKind {
    Eth,
    Veth,
    VethPair,
}

/// [`VethBql`], named as the scenario names it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireVethBql {
    Off,
    Bytes,
    Time,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireTc {
    pub host: String,
    /// (line, text, args)
    pub lines: Vec<(usize, String, Vec<String>)>,
    pub settings: Vec<WireSetting>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSetting {
    pub line: usize,
    pub text: String,
    pub kind: WireSettingKind,
}

/// [`SettingKind`], variant for variant (`"kind": "sysctl" | "xps_cpus" | "rps_cpus" |
/// "rps_flow_cnt" | "threaded" | "coalesce" | "rings" | "features" | "ip_link" | "ip_route"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireSettingKind {
    Sysctl { key: String, value: String },
    XpsCpus { dev: String, txq: u32, cpus: Vec<u32> },
    RpsCpus { dev: String, rxq: u32, cpus: Vec<u32> },
    RpsFlowCnt { dev: String, rxq: u32, count: u32 },
    Threaded { dev: String, on: bool },
    Coalesce { dev: String, rx_usecs: Option<u32>, tx_usecs: Option<u32> },
    Rings { dev: String, rx: Option<u32>, tx: Option<u32> },
    Features { dev: String, tso: Option<bool>, gso: Option<bool>, gro: Option<bool> },
    IpLink { dev: String, mtu: Option<u32>, txqueuelen: Option<u32> },
    IpRoute { link: usize, realms: u32 },
}

impl From<&SettingKind> for WireSettingKind {
    fn from(k: &SettingKind) -> Self {
        match k.clone() {
            SettingKind::Sysctl { key, value } => WireSettingKind::Sysctl { key, value },
            SettingKind::XpsCpus { dev, txq, cpus } => WireSettingKind::XpsCpus { dev, txq, cpus },
            SettingKind::RpsCpus { dev, rxq, cpus } => WireSettingKind::RpsCpus { dev, rxq, cpus },
            SettingKind::RpsFlowCnt { dev, rxq, count } => WireSettingKind::RpsFlowCnt { dev, rxq, count },
            SettingKind::Threaded { dev, on } => WireSettingKind::Threaded { dev, on },
            SettingKind::Coalesce { dev, rx_usecs, tx_usecs } => WireSettingKind::Coalesce { dev, rx_usecs, tx_usecs },
            SettingKind::Rings { dev, rx, tx } => WireSettingKind::Rings { dev, rx, tx },
            SettingKind::Features { dev, tso, gso, gro } => WireSettingKind::Features { dev, tso, gso, gro },
            SettingKind::IpLink { dev, mtu, txqueuelen } => WireSettingKind::IpLink { dev, mtu, txqueuelen },
            SettingKind::IpRoute { link, realms } => WireSettingKind::IpRoute { link, realms },
        }
    }
}

impl From<WireSettingKind> for SettingKind {
    fn from(k: WireSettingKind) -> Self {
        match k {
            WireSettingKind::Sysctl { key, value } => SettingKind::Sysctl { key, value },
            WireSettingKind::XpsCpus { dev, txq, cpus } => SettingKind::XpsCpus { dev, txq, cpus },
            WireSettingKind::RpsCpus { dev, rxq, cpus } => SettingKind::RpsCpus { dev, rxq, cpus },
            WireSettingKind::RpsFlowCnt { dev, rxq, count } => SettingKind::RpsFlowCnt { dev, rxq, count },
            WireSettingKind::Threaded { dev, on } => SettingKind::Threaded { dev, on },
            WireSettingKind::Coalesce { dev, rx_usecs, tx_usecs } => SettingKind::Coalesce { dev, rx_usecs, tx_usecs },
            WireSettingKind::Rings { dev, rx, tx } => SettingKind::Rings { dev, rx, tx },
            WireSettingKind::Features { dev, tso, gso, gro } => SettingKind::Features { dev, tso, gso, gro },
            WireSettingKind::IpLink { dev, mtu, txqueuelen } => SettingKind::IpLink { dev, mtu, txqueuelen },
            WireSettingKind::IpRoute { link, realms } => SettingKind::IpRoute { link, realms },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireTraffic {
    pub kind: WireKind,
    pub from: String,
    pub to: String,
    pub start: u64,
    pub duration: u64,
    pub line: usize,
    pub sender_cpus: Option<Vec<u32>>,
    pub receiver_cpus: Option<Vec<u32>>,
    pub net_cls_classid: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireKind {
    Tcp { flows: u32, cc: String, rate: Option<u64> },
    Udp { rate: Option<u64>, size: u32, flows: u32, tos: u8 },
    Pktgen { rate: Option<u64>, size: u32, flows: u32 },
    Ping { interval: u64 },
}

impl From<&Scenario> for WireScenario {
    fn from(s: &Scenario) -> Self {
        WireScenario {
            file: s.file.clone(),
            sha256: s.sha256.clone(),
            name: s.name.clone(),
            duration: s.duration,
            seed: s.seed,
            hosts: s
                .hosts
                .iter()
                .map(|h| WireHost {
                    name: h.name.clone(),
                    cpus: h.cpus,
                    profile: h.profile.origin.clone(),
                    profile_text: (h.profile.origin != "default")
                        .then(|| std::fs::read_to_string(&h.profile.origin).ok())
                        .flatten(),
                    ifb: h.ifb.clone(),
                })
                .collect(),
            links: s
                .links
                .iter()
                .map(|l| WireLink {
                    a: [l.a.host.clone(), l.a.iface.clone()],
                    b: [l.b.host.clone(), l.b.iface.clone()],
                    kind: match l.kind {
                        LinkKind::Eth => WireLinkKind::Eth,
                        LinkKind::Veth => WireLinkKind::Veth,
                        LinkKind::VethPair => WireLinkKind::VethPair,
                    },
                    txqueues: l.txqueues,
                    rate: l.rate,
                    delay: l.delay,
                    loss: l.loss,
                    veth_bql: match l.veth_bql {
                        VethBql::Off => WireVethBql::Off,
                        VethBql::Bytes => WireVethBql::Bytes,
                        VethBql::Time => WireVethBql::Time,
                    },
                    line: l.line,
                })
                .collect(),
            tc: s
                .tc
                .iter()
                .map(|t| WireTc {
                    host: t.host.clone(),
                    lines: t.lines.iter().map(|l| (l.line, l.text.clone(), l.args.clone())).collect(),
                    settings: t
                        .settings
                        .iter()
                        .map(|st| WireSetting {
                            line: st.line,
                            text: st.text.clone(),
                            kind: WireSettingKind::from(&st.kind),
                        })
                        .collect(),
                })
                .collect(),
            traffic: s
                .traffic
                .iter()
                .map(|t| WireTraffic {
                    kind: match &t.kind {
                        TrafficKind::Tcp { flows, cc, rate } => {
                            WireKind::Tcp { flows: *flows, cc: cc.clone(), rate: *rate }
                        }
                        TrafficKind::Udp { rate, size, flows, tos } => {
                            WireKind::Udp { rate: *rate, size: *size, flows: *flows, tos: *tos }
                        }
                        TrafficKind::Pktgen { rate, size, flows } => {
                            WireKind::Pktgen { rate: *rate, size: *size, flows: *flows }
                        }
                        TrafficKind::Ping { interval } => WireKind::Ping { interval: *interval },
                    },
                    from: t.from.clone(),
                    to: t.to.clone(),
                    start: t.start,
                    duration: t.duration,
                    line: t.line,
                    sender_cpus: t.sender_cpus.clone(),
                    receiver_cpus: t.receiver_cpus.clone(),
                    net_cls_classid: t.net_cls_classid,
                })
                .collect(),
        }
    }
}

impl From<WireScenario> for Scenario {
    fn from(w: WireScenario) -> Self {
        let ep = |[host, iface]: [String; 2]| Endpoint { host, iface };
        Scenario {
            file: w.file,
            sha256: w.sha256,
            name: w.name,
            duration: w.duration,
            seed: w.seed,
            hosts: w
                .hosts
                .into_iter()
                .map(|h| {
                    let profile = match &h.profile_text {
                        Some(text) => Profile::parse(text, &h.profile).unwrap_or_else(|_| Profile::default_profile()),
                        None => Profile::default_profile(),
                    };
                    let profile = Profile { origin: h.profile, ..profile };
                    Host { name: h.name, cpus: h.cpus, profile, ifb: h.ifb }
                })
                .collect(),
            links: w
                .links
                .into_iter()
                .map(|l| Link {
                    a: ep(l.a),
                    b: ep(l.b),
                    kind: match l.kind {
                        WireLinkKind::Eth => LinkKind::Eth,
                        WireLinkKind::Veth => LinkKind::Veth,
                        WireLinkKind::VethPair => LinkKind::VethPair,
                    },
                    txqueues: l.txqueues,
                    rate: l.rate,
                    delay: l.delay,
                    loss: l.loss,
                    veth_bql: match l.veth_bql {
                        WireVethBql::Off => VethBql::Off,
                        WireVethBql::Bytes => VethBql::Bytes,
                        WireVethBql::Time => VethBql::Time,
                    },
                    line: l.line,
                })
                .collect(),
            tc: w
                .tc
                .into_iter()
                .map(|t| TcScript {
                    host: t.host,
                    lines: t.lines.into_iter().map(|(line, text, args)| TcLine { line, text, args }).collect(),
                    settings: t
                        .settings
                        .into_iter()
                        .map(|st| Setting { line: st.line, text: st.text, kind: SettingKind::from(st.kind) })
                        .collect(),
                })
                .collect(),
            traffic: w
                .traffic
                .into_iter()
                .map(|t| Traffic {
                    kind: match t.kind {
                        WireKind::Tcp { flows, cc, rate } => TrafficKind::Tcp { flows, cc, rate },
                        WireKind::Udp { rate, size, flows, tos } => TrafficKind::Udp { rate, size, flows, tos },
                        WireKind::Pktgen { rate, size, flows } => TrafficKind::Pktgen { rate, size, flows },
                        WireKind::Ping { interval } => TrafficKind::Ping { interval },
                    },
                    from: t.from,
                    to: t.to,
                    start: t.start,
                    duration: t.duration,
                    line: t.line,
                    sender_cpus: t.sender_cpus,
                    receiver_cpus: t.receiver_cpus,
                    net_cls_classid: t.net_cls_classid,
                })
                .collect(),
        }
    }
}

/// What the guest gives back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub format: String,
    /// Guest uptime (s) when its init started, and when the run ended.
    pub uptime_init_s: f64,
    pub uptime_end_s: f64,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Result { result: Box<RunResult> },
    Unsupported { message: String },
    TcScript { at: String, host: String, command: String, stderr: String, hint: Option<String> },
    Failed { message: String },
    Interrupted,
}

impl Outcome {
    pub fn from_run(r: Result<RunResult, RunError>) -> Outcome {
        match r {
            Ok(result) => Outcome::Result { result: Box::new(result) },
            Err(RunError::Unsupported(message)) => Outcome::Unsupported { message },
            Err(RunError::TcScript { at, host, command, stderr, hint }) => {
                Outcome::TcScript { at, host, command, stderr, hint }
            }
            Err(RunError::Failed(message)) => Outcome::Failed { message },
            Err(RunError::Interrupted) => Outcome::Interrupted,
        }
    }

    pub fn into_run(self) -> Result<RunResult, RunError> {
        match self {
            Outcome::Result { result } => Ok(*result),
            Outcome::Unsupported { message } => Err(RunError::Unsupported(message)),
            Outcome::TcScript { at, host, command, stderr, hint } => {
                Err(RunError::TcScript { at, host, command, stderr, hint })
            }
            Outcome::Failed { message } => Err(RunError::Failed(message)),
            Outcome::Interrupted => Err(RunError::Interrupted),
        }
    }
}

/// The envelope framed for the result port.
pub fn frame(json: &[u8]) -> Vec<u8> {
    let mut out = format!("QDL-RESULT 1 {}\n", json.len()).into_bytes();
    out.extend_from_slice(json);
    out
}

/// The envelope JSON out of what the result port received; `None` when nothing (or
/// not all of it) arrived.
pub fn unframe(bytes: &[u8]) -> Option<&[u8]> {
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..nl]).ok()?;
    let len: usize = header.strip_prefix("QDL-RESULT 1 ")?.trim().parse().ok()?;
    bytes.get(nl + 1..nl + 1 + len)
}

/// A console marker line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Marker {
    Init { uptime: f64, kernel: String },
    Phase(String),
    Running { elapsed: f64, total: f64 },
    Other(String),
}

/// Parse one console line (`\r` and kernel noise before the marker tolerated).
pub fn parse_marker(line: &str) -> Option<Marker> {
    let at = line.find(MARK)?;
    let rest = line[at + MARK.len()..].trim_end_matches(['\r', '\n']);
    let (word, args) = rest.split_once(' ').unwrap_or((rest, ""));
    let mut nums = args.split_whitespace().map(|w| w.parse::<f64>());
    Some(match word {
        "INIT" => {
            let mut w = args.split_whitespace();
            Marker::Init {
                uptime: w.next().and_then(|u| u.parse().ok()).unwrap_or(0.0),
                kernel: w.next().unwrap_or("").to_string(),
            }
        }
        // `PHASE NAME [t=UPTIME]`
        "PHASE" => {
            let a = args.trim();
            let name = match a.rsplit_once(' ') {
                Some((n, t)) if t.starts_with("t=") => n,
                _ => a,
            };
            Marker::Phase(name.to_string())
        }
        "RUN" => match (nums.next(), nums.next()) {
            (Some(Ok(elapsed)), Some(Ok(total))) => Marker::Running { elapsed, total },
            _ => Marker::Other(rest.to_string()),
        },
        _ => Marker::Other(rest.to_string()),
    })
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (the console fallback).
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for ch in text.bytes().filter(|b| !b.is_ascii_whitespace()) {
        if ch == b'=' {
            break;
        }
        let v = B64.iter().position(|&b| b == ch)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The console fallback's lines for an envelope.
pub fn console_result_lines(json: &[u8]) -> Vec<String> {
    let b = base64_encode(json);
    let mut lines = vec![format!("{MARK}RESULT-BEGIN {}", json.len())];
    for chunk in b.as_bytes().chunks(96) {
        lines.push(format!("{MARK}RESULT-B64 {}", std::str::from_utf8(chunk).unwrap()));
    }
    lines.push(format!("{MARK}RESULT-END"));
    lines
}

/// The envelope JSON out of a console log (the fallback), if it is there whole.
pub fn result_from_console(console: &str) -> Option<Vec<u8>> {
    let mut len = None;
    let mut b64 = String::new();
    for line in console.lines() {
        match parse_marker(line) {
            Some(Marker::Other(rest)) => {
                if let Some(n) = rest.strip_prefix("RESULT-BEGIN ") {
                    len = n.trim().parse::<usize>().ok();
                    b64.clear();
                } else if let Some(c) = rest.strip_prefix("RESULT-B64 ") {
                    b64.push_str(c.trim());
                } else if rest == "RESULT-END" {
                    let data = base64_decode(&b64)?;
                    return (Some(data.len()) == len).then_some(data);
                }
            }
            _ => continue,
        }
    }
    None
}

/// Lines that name a kernel oops report (`die()`, `__warn()`, the page-fault and
/// general-protection handlers print one of these first, a warning after [`CUT_HERE`]).
const OOPS_OPENERS: [&str; 6] =
    ["BUG:", "Oops:", "general protection fault", "invalid opcode", "Unable to handle", "WARNING:"];
const CUT_HERE: &str = "------------[ cut here ]------------";

fn console_lines(console: &str) -> Vec<&str> {
    console.lines().map(|l| l.trim_end_matches('\r')).collect()
}

/// The line naming the oops report that ends at `lines[at]`, if there is one within the
/// 150 lines before it (a report with its call trace and module list runs 40–80 lines).
fn oops_opener(lines: &[&str], at: usize) -> Option<usize> {
    (at.saturating_sub(150)..at).rev().find(|&i| OOPS_OPENERS.iter().any(|o| lines[i].contains(o)))
}

/// A kernel panic in a console log: from the oops report that caused it (or a few lines
/// before "Kernel panic" when there is none) to two lines after it, at most `max` lines
/// (the middle is elided, the opening and the panic line stay).
pub fn panic_excerpt(console: &str, max: usize) -> Option<String> {
    let lines = console_lines(console);
    let at = lines.iter().position(|l| l.contains("Kernel panic - not syncing"))?;
    let from = match oops_opener(&lines, at) {
        Some(i) if i > 0 && lines[i - 1].contains(CUT_HERE) => i - 1,
        Some(i) => i,
        None => at.saturating_sub(8),
    };
    let shown = &lines[from..(at + 3).min(lines.len())];
    let tail = 3.min(shown.len());
    if shown.len() <= max || max <= tail + 1 {
        return Some(shown.join("\n"));
    }
    let head = max - tail - 1;
    let gap = format!("[… {} lines …]", shown.len() - head - tail);
    Some(
        shown[..head]
            .iter()
            .chain([&gap.as_str()])
            .chain(&shown[shown.len() - tail..])
            .copied()
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// A kernel crash (an oops the kernel could not survive: `panic("Fatal exception…")`)
/// in a console log, named by the oops report's first line.
pub fn kernel_crash(console: &str) -> Option<String> {
    let lines = console_lines(console);
    let at = lines.iter().position(|l| l.contains("Kernel panic - not syncing: Fatal exception"))?;
    Some(strip_timestamp(lines[oops_opener(&lines, at).unwrap_or(at)]).to_string())
}

/// A console line without its `[    1.372269] ` printk timestamp.
fn strip_timestamp(line: &str) -> &str {
    match line.trim_start().strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((t, rest)) if t.trim().parse::<f64>().is_ok() => rest,
        _ => line,
    }
}

/// The last `n` non-empty lines of a console log, marker lines included.
pub fn console_tail(console: &str, n: usize) -> String {
    let mut lines = console_lines(console);
    lines.retain(|l| !l.trim().is_empty());
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trips_and_rejects_short_writes() {
        let f = frame(b"{\"a\":1}");
        assert_eq!(f, b"QDL-RESULT 1 7\n{\"a\":1}");
        assert_eq!(unframe(&f), Some(&b"{\"a\":1}"[..]));
        assert_eq!(unframe(&f[..f.len() - 1]), None, "truncated");
        assert_eq!(unframe(b""), None);
        assert_eq!(unframe(b"garbage\n{}"), None);
    }

    #[test]
    fn markers() {
        assert_eq!(
            parse_marker("@@QDL:INIT 2.51 6.12.107+deb13-amd64\r"),
            Some(Marker::Init { uptime: 2.51, kernel: "6.12.107+deb13-amd64".into() })
        );
        assert_eq!(parse_marker("[    3.1] x @@QDL:PHASE setup"), Some(Marker::Phase("setup".into())));
        assert_eq!(parse_marker("@@QDL:PHASE traffic t=5.21\r"), Some(Marker::Phase("traffic".into())));
        assert_eq!(parse_marker("@@QDL:RUN 1.50 3.00"), Some(Marker::Running { elapsed: 1.5, total: 3.0 }));
        assert_eq!(parse_marker("@@QDL:DONE"), Some(Marker::Other("DONE".into())));
        assert_eq!(parse_marker("[    0.000000] Linux version 6.12"), None);
    }

    #[test]
    fn base64_like_coreutils() {
        for (raw, enc) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")] {
            assert_eq!(base64_encode(raw.as_bytes()), enc);
            assert_eq!(base64_decode(enc).unwrap(), raw.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)).unwrap(), all);
        assert_eq!(base64_decode("Zm9v!"), None);
    }

    #[test]
    fn result_from_the_console_fallback() {
        let json = br#"{"format":"x","pad":"0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"}"#;
        let mut console = String::from("[    2.0] booting\n@@QDL:INIT 2.0 6.12\n");
        for l in console_result_lines(json) {
            console.push_str(&l);
            console.push_str("\r\n");
        }
        console.push_str("[    9.0] reboot: Power down\n");
        assert_eq!(result_from_console(&console).unwrap(), json);
        // A truncated transfer is no result.
        let cut = console.replace("@@QDL:RESULT-END", "");
        assert_eq!(result_from_console(&cut), None);
    }

    #[test]
    fn panic_excerpts() {
        // A panic without an oops: a few lines of context before it, two after.
        let console = "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n\
                       [ 1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n[ 1.1] CPU: 0\nc\nd\n";
        let e = panic_excerpt(console, 40).unwrap();
        assert_eq!(
            e,
            "2\n3\n4\n5\n6\n7\n8\n9\n[ 1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n[ 1.1] CPU: 0\nc"
        );
        assert_eq!(panic_excerpt("all fine\n", 10), None);
        assert_eq!(kernel_crash(console), None, "a configuration panic is not a crash");

        // A crash: the excerpt opens with the oops report, however long; the middle is
        // elided to fit `max`, the panic line stays.
        let mut console = String::from(
            "[    1.0] booting\n[    1.3] BUG: kernel NULL pointer dereference, address: 0000000000000008\n",
        );
        console.push_str("[    1.3] #PF: supervisor read access in kernel mode\n");
        for i in 0..30 {
            console.push_str(&format!("[    1.3]  trace_{i}+0x1/0x2\n"));
        }
        console.push_str(
            "[    1.37] Kernel panic - not syncing: Fatal exception in interrupt\n[    1.37] Kernel Offset: disabled\n",
        );
        let e = panic_excerpt(&console, 10).unwrap();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 10);
        assert_eq!(lines[0], "[    1.3] BUG: kernel NULL pointer dereference, address: 0000000000000008");
        assert_eq!(lines[6], "[… 25 lines …]");
        assert_eq!(lines[8], "[    1.37] Kernel panic - not syncing: Fatal exception in interrupt");
        assert_eq!(lines[9], "[    1.37] Kernel Offset: disabled");
        assert_eq!(panic_excerpt(&console, 100).unwrap().lines().count(), 34);
        assert_eq!(
            kernel_crash(&console).as_deref(),
            Some("BUG: kernel NULL pointer dereference, address: 0000000000000008")
        );
        // A warning's "cut here" rule opens the excerpt, the line after it names the crash.
        let warn = "[ 2.0] ------------[ cut here ]------------\n[ 2.0] WARNING: CPU: 1 at net/core/dev.c:1 f\n\
                    [ 2.1] Kernel panic - not syncing: Fatal exception\n";
        assert!(panic_excerpt(warn, 40).unwrap().starts_with("[ 2.0] ------------[ cut here ]"));
        assert_eq!(kernel_crash(warn).as_deref(), Some("WARNING: CPU: 1 at net/core/dev.c:1 f"));
        assert_eq!(console_tail("1\n\n2\r\n3\n", 2), "2\n3");
    }

    #[test]
    fn scenarios_cross_unchanged() {
        let text = "name = \"t\"\nduration = \"2s\"\n[[host]]\nname = \"a\"\ncpus = 8\n[[host]]\nname = \"b\"\n\
                    [[link]]\nbetween = [\"a:eth0\", \"b:eth0\"]\nrate = \"10mbit\"\ndelay = \"5ms\"\nloss = \"1%\"\n\
                    [tc.a]\nscript = \"\"\"\nsysctl -w net.core.dev_weight=32\nqdisc add dev eth0 root fq_codel\n\
                    echo 3 > /sys/class/net/eth0/queues/tx-0/xps_cpus\n\"\"\"\n\
                    [[traffic]]\nkind = \"tcp\"\nfrom = \"a\"\nto = \"b\"\nflows = 2\n\
                    [[traffic]]\nkind = \"udp\"\nfrom = \"a\"\nto = \"b\"\nrate = \"1mbit\"\nsize = \"1000\"\n\
                    [[traffic]]\nkind = \"udp\"\nfrom = \"a\"\nto = \"b\"\nrate = \"unlimited\"\nflows = 3\n\
                    sender_cpus = \"0-1\"\nreceiver_cpus = \"1\"\n\
                    [[traffic]]\nkind = \"ping\"\nfrom = \"a\"\nto = \"b\"\ninterval = \"20ms\"\n";
        let s = Scenario::from_bytes(text.as_bytes(), "dir/t.toml").unwrap_or_else(|e| panic!("{e}"));
        let run = GuestRun {
            format: RUN_FORMAT.into(),
            scenario: WireScenario::from(&s),
            interval_ns: 100_000_000,
            snapshot_interval_ns: 100_000_000,
        };
        let json = serde_json::to_string(&run).unwrap();
        let back: GuestRun = serde_json::from_str(&json).unwrap();
        assert_eq!(Scenario::from(back.scenario), s);
        assert_eq!(s.hosts[0].cpus, 8);
        assert_eq!(s.tc[0].settings.len(), 2);
        // A profile from a file crosses as its text.
        let dir = std::env::temp_dir().join(format!("qdl-wire-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prof = qdisc_scenario::profile::DEFAULT.replace("name = \"default\"", "name = \"mine\"");
        std::fs::write(dir.join("mine.toml"), prof).unwrap();
        let file = dir.join("t.toml");
        std::fs::write(&file, text.replace("cpus = 8\n", "cpus = 8\nprofile = \"mine.toml\"\n")).unwrap();
        let s = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let json = serde_json::to_string(&WireScenario::from(&s)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let back = Scenario::from(serde_json::from_str::<WireScenario>(&json).unwrap());
        assert_eq!(back.hosts[0].profile.name, "mine");
        assert_eq!(back, s);
    }

    #[test]
    fn every_setting_and_link_kind_crosses_unchanged() {
        let text = r#"duration = "2s"
[[host]]
name = "a"
[[host]]
name = "b"
[[host]]
name = "c"
[[link]]
between = ["a:eth0", "b:eth0"]
kind = "veth-pair"
veth_bql = "time"
txqueues = 2
[[link]]
between = ["a:eth1", "c:eth0"]
kind = "veth"
rate = "1gbit"
[[link]]
between = ["b:eth1", "c:eth1"]
[tc.a]
script = """
echo 3 > /sys/class/net/lo/queues/rx-0/rps_cpus
ethtool -C eth0 tx-usecs 50
ethtool -K eth0 tso off gro on
ip link set eth0 mtu 9000 txqueuelen 100
sysctl -w net.core.skb_defer_max=0 net.core.gro_normal_batch=4
"""
[tc.c]
script = """
ethtool -G eth1 rx 512
ethtool -C eth1 rx-usecs 8
"""
[[traffic]]
kind = "tcp"
from = "a"
to = "a"
"#;
        let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let w = WireScenario::from(&s);
        let json = serde_json::to_value(&w).unwrap();
        // The format's words for the link kinds and veth BQL.
        let kinds: Vec<&str> = json["links"].as_array().unwrap().iter().map(|l| l["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["veth-pair", "veth", "eth"]);
        assert_eq!(json["links"][0]["veth_bql"], "time");
        assert_eq!(json["links"][1]["veth_bql"], "off");
        // And for each setting.
        let a = &json["tc"][0]["settings"];
        assert_eq!(a[0]["kind"], serde_json::json!({"kind": "rps_cpus", "dev": "lo", "rxq": 0, "cpus": [0, 1]}));
        assert_eq!(
            a[1]["kind"],
            serde_json::json!({"kind": "coalesce", "dev": "eth0", "rx_usecs": null, "tx_usecs": 50})
        );
        assert_eq!(
            a[2]["kind"],
            serde_json::json!({"kind": "features", "dev": "eth0", "tso": false, "gso": null, "gro": true})
        );
        assert_eq!(a[3]["kind"], serde_json::json!({"kind": "ip_link", "dev": "eth0", "mtu": 9000, "txqueuelen": 100}));
        assert_eq!(a[4]["kind"], serde_json::json!({"kind": "sysctl", "key": "net.core.skb_defer_max", "value": "0"}));
        let c = &json["tc"][1]["settings"];
        assert_eq!(c[0]["kind"], serde_json::json!({"kind": "rings", "dev": "eth1", "rx": 512, "tx": null}));
        assert_eq!(c[1]["kind"]["kind"], "coalesce");
        // Back: the same scenario.
        let run = GuestRun {
            format: RUN_FORMAT.into(),
            scenario: w,
            interval_ns: 100_000_000,
            snapshot_interval_ns: 100_000_000,
        };
        let back: GuestRun = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
        assert_eq!(Scenario::from(back.scenario), s);
        assert_eq!(RUN_FORMAT, "qdisc-lab/vm-run/3");
    }

    #[test]
    fn outcomes_cross_unchanged() {
        let e = RunError::TcScript {
            at: "f.toml:3".into(),
            host: "a".into(),
            command: "qdisc add".into(),
            stderr: "Error".into(),
            hint: None,
        };
        let env = Envelope {
            format: ENVELOPE_FORMAT.into(),
            uptime_init_s: 1.0,
            uptime_end_s: 2.0,
            outcome: Outcome::from_run(Err(e.clone())),
        };
        let back: Envelope = serde_json::from_str(&serde_json::to_string(&env).unwrap()).unwrap();
        assert_eq!(back.outcome.into_run(), Err(e));
        for e in [RunError::Unsupported("u".into()), RunError::Failed("f".into()), RunError::Interrupted] {
            assert_eq!(Outcome::from_run(Err(e.clone())).into_run(), Err(e));
        }
    }
}
