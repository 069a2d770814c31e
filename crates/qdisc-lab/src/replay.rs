//! `qdisc-lab replay`: what does this tc config do to this traffic?
//!
//! Theory. A device is a qdisc tree in front of a wire. Packets arrive — at a pcap's
//! timestamps, or as generated constant-bit-rate flows — and are enqueued at their
//! arrival time; whenever the wire is idle the device dequeues one packet and the wire
//! stays busy for its serialization time, `(len + overhead) · 8 / rate`. That is the
//! kernel's `qdisc_run` over a NIC whose own tx ring is always full (BQL at its limit):
//! every backlog lives in the qdiscs, which is what the user is asking about.
//!
//! Everything runs in virtual time (ns), driven by three kinds of event: the next
//! arrival, the wire becoming free, and a shaper's wake-up (`Dequeued::Throttled
//! { until }`, standing in for the qdisc watchdog). No clock is read and all state is
//! ordered, so a report is a pure function of the inputs and the seed.
//!
//! Accounting. A packet's id is its index in the arrival list. It is delivered when the
//! tree hands it out; its queueing delay is dequeue time − arrival time (its own
//! serialization not included). A packet neither delivered nor still queued at the end
//! was dropped — at enqueue (NET_XMIT_DROP), to make room for another (NET_XMIT_CN
//! does not say which packet went), or later inside the tree. Counting by absence makes
//! per-flow drops exact without asking each qdisc which packet it dropped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv6Addr;

use clap::{ArgGroup, Args};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::TsResolution;
use qdisc::packet::rt_tos2priority;
use qdisc::tc::units::{fmt_rate, fmt_time64, get_size, get_time64, get_u32};
use qdisc::tc::{Tc, TcLib, TcOpts};
use qdisc::tree::{Device, Xmit};
use qdisc::{Dequeued, FlowKey, Instant, Packet};
use serde::Serialize;

/// `qdisc-lab replay` options.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).multiple(false).args(["pcap", "flow"])))]
pub struct ReplayArgs {
    /// A device: NAME[,kind=veth|eth|ifb][,txqueues=N][,mtu=N][,txqueuelen=N] (default: eth0).
    /// Repeatable; the traffic goes through the FIRST device.
    #[arg(long = "dev", value_name = "SPEC")]
    pub dev: Vec<String>,
    /// A tc batch file applied before any traffic, lines exactly as for `tc -batch`.
    #[arg(long = "tc", value_name = "FILE")]
    pub tc: Option<String>,
    /// Wire rate in tc syntax (e.g. 100mbit, 1gbit, 64kbit).
    #[arg(long, value_name = "RATE")]
    pub rate: String,
    /// Replay this capture (pcap or pcapng; Ethernet, raw IP or Linux cooked frames).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<String>,
    /// Generated traffic, repeatable:
    /// RATE[,size=BYTES][,prio=N][,count=N][,start=TIME][,stop=TIME][,tos=N][,mark=N][,proto=udp|tcp][,dport=N]
    /// e.g. `--flow 60mbit,count=4 --flow 2mbit,size=200,prio=6`.
    #[arg(long = "flow", value_name = "SPEC")]
    pub flow: Vec<String>,
    /// How long generated flows send (tc time syntax) [default: 10s].
    #[arg(long, value_name = "TIME", conflicts_with = "pcap")]
    pub duration: Option<String>,
    /// Seed for the start phases of generated flows.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Per-packet wire overhead beyond the packet length (24 for preamble+IFG+FCS).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub overhead: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How long the run may go on after the last arrival before it is stopped (a shaper
/// far slower than the traffic would otherwise take hours of virtual time to drain).
const DRAIN_CAP_NS: u64 = 60_000_000_000;
/// Generated traffic is materialized up front; keep it within a sane memory budget.
const MAX_PACKETS: u64 = 10_000_000;
/// Generated flows get source ports 10000 + index, so the index must fit.
const MAX_FLOWS: u64 = 10_000;
const NS_PER_SEC: u128 = 1_000_000_000;

pub fn run(a: &ReplayArgs) -> Result<String, String> {
    let rate = positive_rate(&a.rate).ok_or_else(|| format!("invalid rate \"{}\" {RATE_RANGE}", a.rate))?;
    let specs = crate::devices(&a.dev)?;
    let traffic = match &a.pcap {
        Some(path) => read_pcap(path)?,
        None => {
            let dur = a.duration.as_deref().unwrap_or("10s");
            let ns = time_ns(dur)
                .filter(|&ns| ns > 0)
                .ok_or_else(|| format!("invalid duration \"{dur}\" (a time above 0, tc syntax: 10s, 500ms, 250us)"))?;
            let flows = a.flow.iter().map(|s| FlowSpec::parse(s)).collect::<Result<Vec<_>, _>>()?;
            generate(&flows, ns, a.seed)?
        }
    };
    if traffic.arrivals.is_empty() {
        return Err(format!("{}: no packets to replay", traffic.source_name()));
    }

    let mut tc = Tc::new(&specs);
    tc.lib = TcLib::from_env();
    if let Some(file) = &a.tc {
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read tc batch \"{file}\": {e}"))?;
        let out = tc.batch(&text, file, TcOpts::default(), false);
        if out.code != 0 {
            return Err(format!("tc batch \"{file}\" failed:\n{}", out.stderr.trim_end()));
        }
    }
    if tc.has_mirred() {
        // Replay drives one device; a packet mirred hands to another would vanish.
        return Err("mirred actions need more than one device: use the simulator (qdisc-lab run)".into());
    }
    let dev_name = specs[0].name.clone();
    let dev = tc.device_mut(&dev_name).expect("the first --dev exists");
    let mut sim = simulate(dev, &traffic, rate, a.overhead)?;

    // The tree as it stands when the run ends, before anything below touches it.
    let show = |tc: &mut Tc, obj: &str, json: bool| {
        let argv: Vec<String> = [obj, "show", "dev", &dev_name].iter().map(|s| s.to_string()).collect();
        tc.exec(&argv, TcOpts { stats: 1, json, ..TcOpts::default() }).stdout
    };
    let tc_qdisc = show(&mut tc, "qdisc", false);
    let tc_class = show(&mut tc, "class", false);
    let tc_qdisc_json = if a.json { serde_json::from_str(&show(&mut tc, "qdisc", true)).ok() } else { None };
    if sim.cap_hit {
        let dev = tc.device_mut(&dev_name).expect("the first --dev exists");
        mark_still_queued(dev, &mut sim);
    }

    let report = Report::build(a, &dev_name, rate, &traffic, &sim, tc_qdisc, tc_class, tc_qdisc_json);
    Ok(if a.json { serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n" } else { report.text() })
}

// ---- traffic -------------------------------------------------------------------

/// One packet of offered traffic.
struct Arrival {
    /// Virtual time, ns from the start of the replay.
    at: u64,
    /// Bytes as the qdisc counts them (`qdisc_pkt_len`: the frame without FCS).
    len: u32,
    /// Index into `Traffic::flows`.
    flow: u32,
    priority: u32,
    mark: u32,
    tos: u8,
    /// A non-IP frame's head, in `Traffic::heads` ([`NO_HEAD`]: an IP packet, whose
    /// headers the classifiers read from its 5-tuple).
    head: u32,
}

/// `Arrival::head` of a packet that carries no frame head.
const NO_HEAD: u32 = u32::MAX;

/// What a flow is, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FlowId {
    Ip(FlowKey),
    /// A non-IP frame type; all frames of one ethertype make one flow.
    Ether(u16),
}

struct FlowInfo {
    id: FlowId,
    /// Generated flows: which `--flow` (0-based) made it.
    spec: Option<usize>,
    /// Of the flow's first packet (a pcap flow may change them midway).
    priority: u32,
    tos: u8,
}

enum Source {
    Pcap { file: String },
    Flows { specs: Vec<String>, duration_ns: u64, seed: u64 },
}

struct Traffic {
    source: Source,
    flows: Vec<FlowInfo>,
    /// Sorted by time; ties keep their capture/generation order.
    arrivals: Vec<Arrival>,
    /// The heads of the captured non-IP frames (`qdisc::packet::FRAME_HEAD` bytes at
    /// most, from the Ethernet header on), which u32, the ematches and flower read.
    heads: Vec<Box<[u8]>>,
}

impl Traffic {
    fn source_name(&self) -> String {
        match &self.source {
            Source::Pcap { file } => file.clone(),
            Source::Flows { .. } => "--flow".into(),
        }
    }
}

/// One `--flow` argument.
#[derive(Clone, Debug)]
struct FlowSpec {
    text: String,
    /// Bytes per second.
    rate: u64,
    size: u32,
    priority: u32,
    count: u32,
    /// ns; `stop` None = until the end of the duration.
    start: u64,
    stop: Option<u64>,
    tos: u8,
    mark: u32,
    proto: u8,
    /// Destination port (default 5201 for TCP, 5001 for UDP), for port-matching filters.
    dport: Option<u16>,
}

/// The rates replay takes: tc syntax, from 8bit (one byte a second) to 2^61 - 1 bytes a
/// second (tc itself wraps a negative rate and rounds 1bit to 0).
const RATE_RANGE: &str = "(tc syntax, 8bit to about 18.4Ebit, e.g. 100mbit)";

fn positive_rate(s: &str) -> Option<u64> {
    qdisc_scenario::scenario::checked_rate(s).ok()
}

/// A time in tc syntax (no unit: microseconds, as `get_time`), in nanoseconds; unlike
/// tc's `get_time` it neither wraps at 2^32 µs nor takes a negative value.
fn time_ns(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.starts_with('-') {
        return None;
    }
    let unitless = s.ends_with(|c: char| c.is_ascii_digit() || c == '.');
    get_time64(&if unitless { format!("{s}us") } else { s.to_string() })
}

/// A capture record claiming more than any frame carries (a corrupt orig_len).
fn too_long(path: &str, n: usize, orig_len: u32) -> Result<(), String> {
    if orig_len > MAX_FRAME {
        return Err(format!(
            "{path}: packet {n}: its original length {orig_len} is more than any frame carries (at most {MAX_FRAME} bytes)"
        ));
    }
    Ok(())
}

/// The longest frame a capture record may claim: an IP packet of 65535 bytes and the
/// largest link header replay reads (Linux cooked v2, 20 bytes), with room for VLAN tags.
const MAX_FRAME: u32 = 65535 + 64;

impl FlowSpec {
    fn parse(s: &str) -> Result<FlowSpec, String> {
        let bad = |what: String| format!("--flow {s}: {what}");
        let mut parts = s.split(',');
        let rate_s = parts.next().unwrap_or("");
        let rate = positive_rate(rate_s).ok_or_else(|| bad(format!("invalid rate \"{rate_s}\" {RATE_RANGE}")))?;
        let mut f = FlowSpec {
            text: s.to_string(),
            rate,
            size: 1514,
            priority: 0,
            count: 1,
            start: 0,
            stop: None,
            tos: 0,
            mark: 0,
            proto: 17,
            dport: None,
        };
        let mut prio_given = false;
        for p in parts {
            let (k, v) = p.split_once('=').ok_or_else(|| bad(format!("\"{p}\" is not KEY=VALUE")))?;
            let num =
                |max: u32| get_u32(v).filter(|&n| n <= max).ok_or_else(|| bad(format!("{k}: invalid value \"{v}\"")));
            let time =
                || time_ns(v).ok_or_else(|| bad(format!("{k}: invalid time \"{v}\" (0 or more, tc syntax: 1s, 20ms)")));
            match k {
                "size" => {
                    f.size = get_size(v)
                        .filter(|n| (1..=65535).contains(n))
                        .ok_or_else(|| bad(format!("size: invalid value \"{v}\" (1..65535 bytes)")))?
                }
                "prio" => {
                    f.priority = num(u32::MAX)?;
                    prio_given = true;
                }
                "count" => {
                    f.count = num(MAX_FLOWS as u32).and_then(|n| {
                        if n == 0 {
                            Err(bad("count: must be at least 1".into()))
                        } else {
                            Ok(n)
                        }
                    })?
                }
                "start" => f.start = time()?,
                "stop" => f.stop = Some(time()?),
                "tos" => f.tos = num(255)? as u8,
                "mark" => f.mark = num(u32::MAX)?,
                "dport" => f.dport = Some(num(65535)? as u16),
                "proto" => {
                    f.proto = match v {
                        "udp" => 17,
                        "tcp" => 6,
                        _ => return Err(bad(format!("proto: \"{v}\" is not udp or tcp"))),
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "unknown key \"{k}\" (size, prio, count, start, stop, tos, mark, proto, dport)"
                    )))
                }
            }
        }
        // Like a forwarded packet, a flow with a TOS but no explicit priority gets
        // the priority ip_forward would give it.
        if !prio_given {
            f.priority = rt_tos2priority(f.tos);
        }
        if f.stop.is_some_and(|stop| stop <= f.start) {
            return Err(bad("stop must be after start".into()));
        }
        Ok(f)
    }
}

/// splitmix64: a tiny, well-mixed, seedable generator (the start phases need only
/// determinism and a spread, not cryptographic quality).
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// IPv4 address in the IPv4-mapped IPv6 form FlowKey holds.
fn mapped(v4: [u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[10] = 0xFF;
    a[11] = 0xFF;
    a[12..].copy_from_slice(&v4);
    a
}

/// Constant-bit-rate packets for every flow of every spec. The k-th packet of a flow
/// leaves at `start + phase + ⌊k·size/rate⌋` (exact integer arithmetic: no drift over
/// long runs); `phase` is a seeded offset within one packet interval, so flows of the
/// same rate do not arrive in lock-step.
fn generate(specs: &[FlowSpec], duration: u64, seed: u64) -> Result<Traffic, String> {
    let total_flows: u64 = specs.iter().map(|f| f.count as u64).sum();
    if total_flows > MAX_FLOWS {
        return Err(format!("too many flows ({total_flows}; at most {MAX_FLOWS})"));
    }
    // Check the packet budget before materializing anything.
    let mut estimate: u64 = 0;
    for f in specs {
        let end = f.stop.unwrap_or(duration).min(duration);
        if f.start >= end {
            return Err(format!(
                "--flow {}: sends nothing (start is not before the {} duration)",
                f.text,
                fmt_time64(duration as i64)
            ));
        }
        let per_flow = (end - f.start) as u128 * f.rate as u128 / (f.size as u128 * NS_PER_SEC) + 1;
        estimate = estimate.saturating_add((per_flow * f.count as u128).min(u64::MAX as u128) as u64);
    }
    if estimate > MAX_PACKETS {
        return Err(format!(
            "the flows would generate about {estimate} packets (at most {MAX_PACKETS}); lower a rate or the duration"
        ));
    }

    let mut rng = seed;
    let mut flows = Vec::new();
    let mut arrivals = Vec::with_capacity(estimate as usize);
    for (si, f) in specs.iter().enumerate() {
        let end = f.stop.unwrap_or(duration).min(duration);
        let interval = (f.size as u128 * NS_PER_SEC / f.rate as u128).max(1) as u64;
        for _ in 0..f.count {
            let j = flows.len() as u32;
            let key = FlowKey {
                src: mapped([10, 1, (j / 250) as u8, (j % 250 + 1) as u8]),
                dst: mapped([10, 2, 0, 1]),
                sport: 10000 + j as u16,
                dport: f.dport.unwrap_or(if f.proto == 6 { 5201 } else { 5001 }),
                proto: f.proto,
            };
            flows.push(FlowInfo { id: FlowId::Ip(key), spec: Some(si), priority: f.priority, tos: f.tos });
            let phase = splitmix64(&mut rng) % interval;
            for k in 0u128.. {
                let at = f.start + phase + (k * f.size as u128 * NS_PER_SEC / f.rate as u128) as u64;
                if at >= end {
                    break;
                }
                arrivals.push(Arrival {
                    at,
                    len: f.size,
                    flow: j,
                    priority: f.priority,
                    mark: f.mark,
                    tos: f.tos,
                    head: NO_HEAD,
                });
            }
        }
    }
    arrivals.sort_by_key(|a| a.at); // stable: ties stay in flow order
    Ok(Traffic {
        source: Source::Flows { specs: specs.iter().map(|f| f.text.clone()).collect(), duration_ns: duration, seed },
        flows,
        arrivals,
        heads: Vec::new(),
    })
}

/// The link layers we can take frames from, and how to find the network header.
#[derive(Clone, Copy)]
enum Link {
    Ethernet,
    /// LINKTYPE_RAW / IPV4 / IPV6: the frame starts with the IP header.
    RawIp,
    /// Linux cooked capture v1 (16-byte header) or v2 (20 bytes): protocol at `proto_at`.
    Sll {
        header: usize,
        proto_at: usize,
    },
}

impl Link {
    fn from_linktype(lt: u32) -> Option<Link> {
        match lt {
            1 => Some(Link::Ethernet),
            101 | 228 | 229 => Some(Link::RawIp),
            113 => Some(Link::Sll { header: 16, proto_at: 14 }),
            276 => Some(Link::Sll { header: 20, proto_at: 0 }),
            _ => None,
        }
    }

    /// (flow, tos, skb priority, qdisc length) of a captured frame. The device is
    /// Ethernet, so frames captured without an Ethernet header are counted as if they
    /// had one (14 bytes) — that is what the qdisc would see when forwarding them.
    fn classify(self, data: &[u8], orig_len: u32) -> (FlowId, u8, u32, u32) {
        let (ethertype, l3, len) = match self {
            Link::Ethernet => {
                let mut et = be16(data, 12);
                let mut off = 14;
                // 802.1Q / 802.1ad tags (at most two: QinQ).
                for _ in 0..2 {
                    if matches!(et, Some(0x8100 | 0x88A8 | 0x9100)) {
                        et = be16(data, off + 2);
                        off += 4;
                    }
                }
                (et.unwrap_or(0), data.get(off..).unwrap_or(&[]), orig_len)
            }
            Link::RawIp => {
                let et = match data.first().map(|b| b >> 4) {
                    Some(6) => 0x86DD,
                    _ => 0x0800,
                };
                (et, data, orig_len.saturating_add(14))
            }
            Link::Sll { header, proto_at } => (
                be16(data, proto_at).unwrap_or(0),
                data.get(header..).unwrap_or(&[]),
                orig_len.saturating_add(14).saturating_sub(header as u32),
            ),
        };
        let parsed = match ethertype {
            0x0800 => parse_ipv4(l3).map(|(k, tos)| (k, tos, rt_tos2priority(tos))),
            // ip6_forward leaves skb->priority alone: forwarded IPv6 is priority 0
            // whatever its traffic class.
            0x86DD => parse_ipv6(l3).map(|(k, tc)| (k, tc, 0)),
            _ => None,
        };
        match parsed {
            Some((k, tos, prio)) => (FlowId::Ip(k), tos, prio, len),
            None => (FlowId::Ether(ethertype), 0, 0, len),
        }
    }
}

impl Link {
    /// A captured non-IP frame's head as the device would send it, from the Ethernet
    /// header on (at most [`qdisc::packet::FRAME_HEAD`] bytes): an Ethernet capture's
    /// own bytes; a header-less capture's behind zero MACs and its ethertype.
    fn frame_head(self, data: &[u8]) -> Box<[u8]> {
        let (mut head, rest) = match self {
            Link::Ethernet => (Vec::new(), data),
            Link::RawIp => {
                let mut h = vec![0; 14];
                h[12] = if data.first().map(|b| b >> 4) == Some(6) { 0x86 } else { 0x08 };
                h[13] = if h[12] == 0x86 { 0xdd } else { 0 };
                (h, data)
            }
            Link::Sll { header, proto_at } => {
                let mut h = vec![0; 14];
                h[12..].copy_from_slice(&be16(data, proto_at).unwrap_or(0).to_be_bytes());
                (h, data.get(header..).unwrap_or(&[]))
            }
        };
        let take = qdisc::packet::FRAME_HEAD.saturating_sub(head.len()).min(rest.len());
        head.extend_from_slice(&rest[..take]);
        head.into()
    }
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

/// Ports of a transport header, for the protocols that have them (TCP, UDP, SCTP, UDP-Lite).
fn ports(proto: u8, l4: &[u8]) -> (u16, u16) {
    match proto {
        6 | 17 | 132 | 136 => (be16(l4, 0).unwrap_or(0), be16(l4, 2).unwrap_or(0)),
        _ => (0, 0),
    }
}

fn parse_ipv4(b: &[u8]) -> Option<(FlowKey, u8)> {
    if b.len() < 20 || b[0] >> 4 != 4 {
        return None;
    }
    let ihl = (b[0] & 0x0F) as usize * 4;
    let proto = b[9];
    let mut k = FlowKey {
        src: mapped(b[12..16].try_into().ok()?),
        dst: mapped(b[16..20].try_into().ok()?),
        proto,
        ..FlowKey::default()
    };
    // Only the first fragment carries the transport header.
    let frag_off = be16(b, 6)? & 0x1FFF;
    if ihl >= 20 && frag_off == 0 {
        (k.sport, k.dport) = ports(proto, b.get(ihl..).unwrap_or(&[]));
    }
    Some((k, b[1]))
}

fn parse_ipv6(b: &[u8]) -> Option<(FlowKey, u8)> {
    if b.len() < 40 || b[0] >> 4 != 6 {
        return None;
    }
    let tclass = (b[0] << 4) | (b[1] >> 4);
    let mut nh = b[6];
    let mut off = 40;
    let mut first_fragment = true;
    // Walk the extension headers to the transport header (a few at most).
    for _ in 0..8 {
        match nh {
            0 | 43 | 60 => {
                let (Some(&n), Some(&l)) = (b.get(off), b.get(off + 1)) else { break };
                nh = n;
                off += (l as usize + 1) * 8;
            }
            44 => {
                let (Some(&n), Some(fo)) = (b.get(off), be16(b, off + 2)) else { break };
                nh = n;
                off += 8;
                first_fragment = fo >> 3 == 0;
            }
            51 => {
                let (Some(&n), Some(&l)) = (b.get(off), b.get(off + 1)) else { break };
                nh = n;
                off += (l as usize + 2) * 4;
            }
            _ => break,
        }
    }
    let mut k =
        FlowKey { src: b[8..24].try_into().ok()?, dst: b[24..40].try_into().ok()?, proto: nh, ..FlowKey::default() };
    if first_fragment {
        (k.sport, k.dport) = ports(nh, b.get(off..).unwrap_or(&[]));
    }
    Some((k, tclass))
}

/// pcap-file's errors, with the common one (a capture cut short) said plainly.
fn pcap_err(e: pcap_file::PcapError) -> String {
    match e {
        pcap_file::PcapError::IncompleteBuffer => "the file ends in the middle of a record (truncated capture)".into(),
        pcap_file::PcapError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the file ends in the middle of a record (truncated capture)".into()
        }
        e => e.to_string(),
    }
}

/// Read a pcap or pcapng file into arrivals, one flow per 5-tuple (in order of first
/// appearance), times relative to the earliest packet.
fn read_pcap(path: &str) -> Result<Traffic, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read \"{path}\": {e}"))?;
    let err = |e: pcap_file::PcapError| format!("{path}: {}", pcap_err(e));
    // (timestamp ns, flow id, tos, priority, len)
    let mut frames: Vec<(u64, FlowId, u8, u32, u32)> = Vec::new();
    // The heads of the non-IP frames, by their index in `frames`.
    let mut heads: BTreeMap<usize, Box<[u8]>> = BTreeMap::new();
    const PCAP_MAGICS: [[u8; 4]; 4] =
        [[0xD4, 0xC3, 0xB2, 0xA1], [0xA1, 0xB2, 0xC3, 0xD4], [0x4D, 0x3C, 0xB2, 0xA1], [0xA1, 0xB2, 0x3C, 0x4D]];
    let pcapng = data.starts_with(&[0x0A, 0x0D, 0x0D, 0x0A]);
    if !pcapng && !PCAP_MAGICS.iter().any(|m| data.starts_with(m)) {
        return Err(format!("{path}: not a pcap or pcapng file"));
    }
    let unsupported =
        |lt: u32| format!("{path}: unsupported link type {lt} (Ethernet, raw IP and Linux cooked captures are)");
    if pcapng {
        let mut r = PcapNgReader::new(&data[..]).map_err(err)?;
        // Per interface: link and timestamp units (ns per tick numerator/denominator).
        let mut ifaces: Vec<(Option<Link>, u32, u128, u128)> = Vec::new();
        while let Some(block) = r.next_block() {
            match block.map_err(|e| format!("{path}: after packet {}: {}", frames.len(), pcap_err(e)))? {
                Block::SectionHeader(_) => ifaces.clear(),
                Block::InterfaceDescription(idb) => {
                    // if_tsresol: 10^-v s, or 2^-v s with the high bit set; default µs.
                    let (num, den) = idb
                        .options
                        .iter()
                        .find_map(|o| match o {
                            InterfaceDescriptionOption::IfTsResol(v) if v & 0x80 != 0 => {
                                Some((NS_PER_SEC, 1u128 << (v & 0x7F).min(63)))
                            }
                            InterfaceDescriptionOption::IfTsResol(v) => {
                                Some((NS_PER_SEC, 10u128.pow((*v).min(30) as u32)))
                            }
                            _ => None,
                        })
                        .unwrap_or((1000, 1));
                    let lt = u32::from(idb.linktype);
                    ifaces.push((Link::from_linktype(lt), lt, num, den));
                }
                Block::EnhancedPacket(p) => {
                    let &(link, lt, num, den) = ifaces
                        .get(p.interface_id as usize)
                        .ok_or_else(|| format!("{path}: packet on undeclared interface {}", p.interface_id))?;
                    let link = link.ok_or_else(|| unsupported(lt))?;
                    // pcap-file hands the raw tick count over as "nanoseconds".
                    let ticks = p.timestamp.as_nanos();
                    let ns = (ticks * num / den).min(u64::MAX as u128) as u64;
                    let (id, tos, prio, len) = link.classify(&p.data, p.original_len);
                    too_long(path, frames.len() + 1, p.original_len)?;
                    if let FlowId::Ether(_) = id {
                        heads.insert(frames.len(), link.frame_head(&p.data));
                    }
                    frames.push((ns, id, tos, prio, len));
                }
                Block::SimplePacket(_) | Block::Packet(_) => {
                    return Err(format!(
                        "{path}: pcapng simple/obsolete packet blocks are not supported (no usable timestamps)"
                    ))
                }
                _ => {}
            }
        }
    } else {
        let mut r = PcapReader::new(&data[..]).map_err(err)?;
        let lt = u32::from(r.header().datalink);
        let link = Link::from_linktype(lt).ok_or_else(|| unsupported(lt))?;
        let frac_ns: u64 = if r.header().ts_resolution == TsResolution::NanoSecond { 1 } else { 1000 };
        // Raw packets: pcap-file 2.0's validated reader refuses orig_len > snaplen,
        // i.e. every truncated capture (`tcpdump -s 96`), which is exactly what a
        // replay wants (courvoif/pcap-file#36, fixed only after 2.0).
        while let Some(p) = r.next_raw_packet() {
            let p = p.map_err(|e| format!("{path}: packet {}: {}", frames.len() + 1, pcap_err(e)))?;
            if p.incl_len > p.orig_len {
                return Err(format!(
                    "{path}: a packet has more captured bytes ({}) than its length ({})",
                    p.incl_len, p.orig_len
                ));
            }
            let ns = p.ts_sec as u64 * 1_000_000_000 + p.ts_frac as u64 * frac_ns;
            let (id, tos, prio, len) = link.classify(&p.data, p.orig_len);
            too_long(path, frames.len() + 1, p.orig_len)?;
            if let FlowId::Ether(_) = id {
                heads.insert(frames.len(), link.frame_head(&p.data));
            }
            frames.push((ns, id, tos, prio, len));
        }
    }

    let t0 = frames.iter().map(|f| f.0).min().unwrap_or(0);
    let mut index: BTreeMap<FlowId, u32> = BTreeMap::new();
    let mut flows = Vec::new();
    let mut arrivals = Vec::with_capacity(frames.len());
    let mut kept = Vec::with_capacity(heads.len());
    for (i, (ns, id, tos, priority, len)) in frames.into_iter().enumerate() {
        let flow = *index.entry(id).or_insert_with(|| {
            flows.push(FlowInfo { id, spec: None, priority, tos });
            flows.len() as u32 - 1
        });
        let head = match heads.remove(&i) {
            Some(h) => {
                kept.push(h);
                kept.len() as u32 - 1
            }
            None => NO_HEAD,
        };
        arrivals.push(Arrival { at: ns - t0, len, flow, priority, mark: 0, tos, head });
    }
    arrivals.sort_by_key(|a| a.at); // stable: captures are nearly sorted; ties keep file order
    Ok(Traffic { source: Source::Pcap { file: path.to_string() }, flows, arrivals, heads: kept })
}

// ---- the run -------------------------------------------------------------------

const NOT_DELIVERED: u64 = u64::MAX;

struct Sim {
    /// Per packet: when the tree handed it to the wire (NOT_DELIVERED if it never did).
    dequeued_at: Vec<u64>,
    /// Per packet: still in the tree when the run was stopped (only if `cap_hit`).
    still_queued: Vec<bool>,
    /// Per packet: when its last bit left the wire.
    tx_end: Vec<u64>,
    /// When the run ended: the wire idle and the tree empty, or the cap.
    end: u64,
    cap_hit: bool,
}

/// Serialization time of `bytes` at `rate` bytes/s, rounded up to whole ns.
fn tx_time(bytes: u64, rate: u64) -> u64 {
    (bytes as u128 * NS_PER_SEC).div_ceil(rate as u128).min(u64::MAX as u128) as u64
}

fn simulate(dev: &mut Device, t: &Traffic, rate: u64, overhead: u32) -> Result<Sim, String> {
    let n = t.arrivals.len();
    let mut sim = Sim {
        dequeued_at: vec![NOT_DELIVERED; n],
        still_queued: vec![false; n],
        tx_end: vec![0; n],
        end: 0,
        cap_hit: false,
    };
    let cap = t.arrivals.last().map_or(0, |a| a.at) + DRAIN_CAP_NS;
    // The next arrival; until when the wire is busy; when to ask the tree for a
    // packet next (None: it said Empty, wait for an arrival).
    let mut next = 0;
    let mut wire_free = 0u64;
    let mut poll: Option<u64> = None;
    // A packet goes on the wire at `now`; returns when the wire is free again.
    let send = |sim: &mut Sim, p: Packet, now: u64| -> Result<u64, String> {
        let i = p.id as usize;
        if i >= n || sim.dequeued_at[i] != NOT_DELIVERED {
            return Err(format!("engine bug: the qdisc tree dequeued packet {} twice or out of nowhere", p.id));
        }
        sim.dequeued_at[i] = now;
        let free = now + tx_time(p.len as u64 + overhead as u64, rate);
        sim.tx_end[i] = free;
        sim.end = free;
        Ok(free)
    };
    loop {
        let arrival = t.arrivals.get(next).map(|a| a.at);
        let now = match (arrival, poll) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(p)) => p,
            (Some(a), Some(p)) => a.min(p),
        };
        if now > cap {
            sim.cap_hit = true;
            sim.end = cap;
            return Ok(sim);
        }
        if arrival == Some(now) {
            // Arrivals go first at a tie, so a packet reaching an idle wire leaves at
            // once. Its fate (queued / dropped) is read off later: see the top comment.
            let a = &t.arrivals[next];
            let mut pkt = Packet::new(next as u64, a.len);
            if let FlowId::Ip(k) = t.flows[a.flow as usize].id {
                pkt = pkt.with_flow(k);
            } else if a.head != NO_HEAD {
                pkt = pkt.with_frame(&t.heads[a.head as usize]);
            }
            pkt.priority = a.priority;
            pkt.mark = a.mark;
            pkt.tos = a.tos;
            next += 1;
            // __dev_xmit_skb: an idle wire takes the packet straight from an empty
            // bypass-capable qdisc (or noqueue); otherwise the qdisc queues it.
            match dev.xmit(pkt, Instant::from_nanos(now), wire_free <= now) {
                Xmit::Direct(p) => {
                    wire_free = send(&mut sim, p, now)?;
                    poll = Some(poll.map_or(wire_free, |x| x.min(wire_free)));
                }
                Xmit::Queued(_) => {
                    // The qdisc runs right after an enqueue; if the wire is busy the
                    // poll at wire_free (already set) comes first. This also re-asks a
                    // throttled shaper, as the kernel does on every enqueue.
                    let at = now.max(wire_free);
                    poll = Some(poll.map_or(at, |p| p.min(at)));
                }
            }
            continue;
        }
        poll = None;
        match dev.dequeue(Instant::from_nanos(now)) {
            Dequeued::Packet(p) => {
                wire_free = send(&mut sim, p, now)?;
                poll = Some(wire_free);
            }
            // The watchdog: try again when the shaper says. (`max` guards a shaper
            // that answers with the present, which would otherwise spin.)
            Dequeued::Throttled { until } => poll = Some(until.as_nanos().max(now + 1)),
            Dequeued::Empty => {}
        }
    }
    sim.end = sim.end.max(t.arrivals.last().map_or(0, |a| a.at));
    Ok(sim)
}

/// After a capped run: which packets are still in the tree? Dequeue them all (as if
/// the wire were infinitely fast) — the tree's final `tc -s` output is taken before.
fn mark_still_queued(dev: &mut Device, sim: &mut Sim) {
    let mut now = sim.end;
    // Bounded: a tree that never empties must not hang the report.
    for _ in 0..sim.dequeued_at.len() * 4 + 1024 {
        match dev.dequeue(Instant::from_nanos(now)) {
            Dequeued::Packet(p) => {
                if let Some(q) = sim.still_queued.get_mut(p.id as usize) {
                    *q = true;
                }
            }
            Dequeued::Throttled { until } => now = until.as_nanos().max(now + 1),
            Dequeued::Empty => break,
        }
    }
}

// ---- the report ----------------------------------------------------------------

/// Queueing delay percentiles, ns.
#[derive(Serialize, Clone, Copy)]
struct Delay {
    p50: u64,
    p90: u64,
    p99: u64,
    max: u64,
}

impl Delay {
    /// Nearest-rank percentiles: the smallest sample with at least p% at or below it.
    fn of(samples: &mut [u64]) -> Option<Delay> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let rank = |p: usize| samples[(p * n).div_ceil(100).max(1) - 1];
        Some(Delay { p50: rank(50), p90: rank(90), p99: rank(99), max: samples[n - 1] })
    }
}

/// Counters of a flow or of all traffic.
#[derive(Serialize)]
struct Counts {
    sent_pkts: u64,
    sent_bytes: u64,
    delivered_pkts: u64,
    delivered_bytes: u64,
    dropped_pkts: u64,
    /// Still in the tree when the run was stopped (0 unless the drain cap was hit).
    queued_pkts: u64,
    drop_pct: f64,
    /// Delivered bytes over the time from the first arrival to the last delivered
    /// bit leaving the wire, bits/s.
    throughput_bps: u64,
    delay_ns: Option<Delay>,
}

#[derive(Default)]
struct Acc {
    sent_pkts: u64,
    sent_bytes: u64,
    delivered_pkts: u64,
    delivered_bytes: u64,
    queued_pkts: u64,
    first_arrival: Option<u64>,
    last_tx_end: u64,
    delays: Vec<u64>,
}

impl Acc {
    fn add(&mut self, a: &Arrival, i: usize, sim: &Sim) {
        self.sent_pkts += 1;
        self.sent_bytes += a.len as u64;
        self.first_arrival.get_or_insert(a.at);
        if sim.dequeued_at[i] != NOT_DELIVERED {
            self.delivered_pkts += 1;
            self.delivered_bytes += a.len as u64;
            self.delays.push(sim.dequeued_at[i] - a.at);
            self.last_tx_end = self.last_tx_end.max(sim.tx_end[i]);
        } else if sim.still_queued[i] {
            self.queued_pkts += 1;
        }
    }

    fn counts(mut self) -> Counts {
        let dropped = self.sent_pkts - self.delivered_pkts - self.queued_pkts;
        // Measured to the last delivered bit, not the last arrival: a backlog drained
        // after the sender stopped still counts, and a flow never beats the wire.
        let span = self.last_tx_end.saturating_sub(self.first_arrival.unwrap_or(0));
        let throughput =
            if span == 0 { 0 } else { (self.delivered_bytes as u128 * 8 * NS_PER_SEC / span as u128) as u64 };
        Counts {
            sent_pkts: self.sent_pkts,
            sent_bytes: self.sent_bytes,
            delivered_pkts: self.delivered_pkts,
            delivered_bytes: self.delivered_bytes,
            dropped_pkts: dropped,
            queued_pkts: self.queued_pkts,
            drop_pct: if self.sent_pkts == 0 { 0.0 } else { dropped as f64 * 100.0 / self.sent_pkts as f64 },
            throughput_bps: throughput,
            delay_ns: Delay::of(&mut self.delays),
        }
    }
}

#[derive(Serialize)]
struct KeyJson {
    proto: u8,
    src: String,
    dst: String,
    sport: u16,
    dport: u16,
}

#[derive(Serialize)]
struct FlowReport {
    /// 1-based, in order of first appearance (pcap) or of the --flow arguments.
    id: usize,
    flow: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<KeyJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ethertype: Option<u16>,
    priority: u32,
    tos: u8,
    #[serde(flatten)]
    counts: Counts,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum SourceJson {
    Pcap { file: String },
    Flows { specs: Vec<String>, duration_ns: u64, seed: u64 },
}

#[derive(Serialize)]
struct Report {
    dev: String,
    wire_rate_bps: u64,
    overhead: u32,
    tc_file: Option<String>,
    source: SourceJson,
    packets: usize,
    /// First to last arrival, ns.
    traffic_ns: u64,
    /// When the last packet left the wire (or the cap), ns.
    end_ns: u64,
    cap_hit: bool,
    flows: Vec<FlowReport>,
    total: Counts,
    /// `tc -s qdisc show dev DEV` / `tc -s class show dev DEV` at the end of the run.
    tc_qdisc: String,
    tc_class: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tc_qdisc_json: Option<serde_json::Value>,
}

fn ip_str(a: &[u8; 16]) -> String {
    let ip = Ipv6Addr::from(*a);
    match ip.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => ip.to_string(),
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmp6".into(),
        132 => "sctp".into(),
        136 => "udplite".into(),
        _ => format!("proto {p}"),
    }
}

fn flow_label(id: &FlowId) -> String {
    match id {
        FlowId::Ether(et) => format!("ethertype 0x{et:04x}"),
        FlowId::Ip(k) => {
            let v6 = Ipv6Addr::from(k.src).to_ipv4_mapped().is_none();
            let (s, d) = (ip_str(&k.src), ip_str(&k.dst));
            if matches!(k.proto, 6 | 17 | 132 | 136) {
                let br = |a: String| if v6 { format!("[{a}]") } else { a };
                format!("{} {}:{} > {}:{}", proto_name(k.proto), br(s), k.sport, br(d), k.dport)
            } else {
                format!("{} {s} > {d}", proto_name(k.proto))
            }
        }
    }
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    fn build(
        a: &ReplayArgs,
        dev: &str,
        rate: u64,
        t: &Traffic,
        sim: &Sim,
        tc_qdisc: String,
        tc_class: String,
        tc_qdisc_json: Option<serde_json::Value>,
    ) -> Report {
        let mut per_flow: Vec<Acc> = t.flows.iter().map(|_| Acc::default()).collect();
        let mut all = Acc::default();
        for (i, arr) in t.arrivals.iter().enumerate() {
            per_flow[arr.flow as usize].add(arr, i, sim);
            all.add(arr, i, sim);
        }
        let flows = t
            .flows
            .iter()
            .zip(per_flow)
            .enumerate()
            .map(|(i, (f, acc))| FlowReport {
                id: i + 1,
                flow: flow_label(&f.id),
                spec: f.spec.map(|s| s + 1),
                key: match f.id {
                    FlowId::Ip(k) => Some(KeyJson {
                        proto: k.proto,
                        src: ip_str(&k.src),
                        dst: ip_str(&k.dst),
                        sport: k.sport,
                        dport: k.dport,
                    }),
                    FlowId::Ether(_) => None,
                },
                ethertype: match f.id {
                    FlowId::Ether(et) => Some(et),
                    FlowId::Ip(_) => None,
                },
                priority: f.priority,
                tos: f.tos,
                counts: acc.counts(),
            })
            .collect();
        let first = t.arrivals.first().map_or(0, |a| a.at);
        let last = t.arrivals.last().map_or(0, |a| a.at);
        Report {
            dev: dev.to_string(),
            wire_rate_bps: rate.saturating_mul(8),
            overhead: a.overhead,
            tc_file: a.tc.clone(),
            source: match &t.source {
                Source::Pcap { file } => SourceJson::Pcap { file: file.clone() },
                Source::Flows { specs, duration_ns, seed } => {
                    SourceJson::Flows { specs: specs.clone(), duration_ns: *duration_ns, seed: *seed }
                }
            },
            packets: t.arrivals.len(),
            traffic_ns: match &t.source {
                Source::Flows { duration_ns, .. } => *duration_ns,
                Source::Pcap { .. } => last - first,
            },
            end_ns: sim.end,
            cap_hit: sim.cap_hit,
            flows,
            total: all.counts(),
            tc_qdisc,
            tc_class,
            tc_qdisc_json,
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        let t = |ns: u64| fmt_time64(ns.min(i64::MAX as u64) as i64);
        let _ = write!(s, "replay: dev {}, wire {}", self.dev, fmt_rate(self.wire_rate_bps / 8, false));
        if self.overhead > 0 {
            let _ = write!(s, " + {} bytes/packet", self.overhead);
        }
        if let Some(f) = &self.tc_file {
            let _ = write!(s, ", tc batch {f}");
        }
        s.push('\n');
        let nflows = match self.flows.len() {
            1 => "1 flow".to_string(),
            n => format!("{n} flows"),
        };
        match &self.source {
            SourceJson::Pcap { file } => {
                let _ =
                    writeln!(s, "source: {file}: {} packets in {} over {}", self.packets, nflows, t(self.traffic_ns));
            }
            SourceJson::Flows { specs, duration_ns, seed } => {
                let _ = writeln!(
                    s,
                    "source: --flow {}: {} packets in {} over {} (seed {seed})",
                    specs.join(" --flow "),
                    self.packets,
                    nflows,
                    t(*duration_ns)
                );
            }
        }
        if self.cap_hit {
            let _ = writeln!(
                s,
                "STOPPED at {} (last arrival + {}) with {} packets still queued",
                t(self.end_ns),
                t(DRAIN_CAP_NS),
                self.total.queued_pkts
            );
        } else {
            let _ = writeln!(s, "drained: last packet off the wire at {}", t(self.end_ns));
        }
        s.push('\n');

        // The table: computed as cells first so every column fits its widest entry.
        let mut head = vec!["#", "flow", "prio", "tos", "sent", "delivered", "dropped"];
        if self.cap_hit {
            head.push("queued");
        }
        head.extend(["drop%", "throughput", "delay p50", "p90", "p99", "max"]);
        let row = |id: String, flow: &str, prio: String, tos: String, c: &Counts| {
            let mut r = vec![
                id,
                flow.to_string(),
                prio,
                tos,
                c.sent_pkts.to_string(),
                c.delivered_pkts.to_string(),
                c.dropped_pkts.to_string(),
            ];
            if self.cap_hit {
                r.push(c.queued_pkts.to_string());
            }
            r.push(format!("{:.2}%", c.drop_pct));
            r.push(fmt_rate(c.throughput_bps / 8, false));
            match c.delay_ns {
                Some(d) => r.extend([d.p50, d.p90, d.p99, d.max].map(t)),
                None => r.extend(["-"; 4].map(String::from)),
            }
            r
        };
        let mut rows: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
        for f in &self.flows {
            rows.push(row(f.id.to_string(), &f.flow, f.priority.to_string(), format!("0x{:02x}", f.tos), &f.counts));
        }
        rows.push(row(String::new(), "total", String::new(), String::new(), &self.total));
        let widths: Vec<usize> =
            (0..head.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        for r in &rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                // The flow column reads left to right; numbers line up on the right.
                if c == 1 {
                    let _ = write!(line, "{cell:<w$}", w = widths[c]);
                } else {
                    let _ = write!(line, "{cell:>w$}", w = widths[c]);
                }
            }
            s.push_str(line.trim_end());
            s.push('\n');
        }

        let _ = write!(s, "\ntc -s qdisc show dev {}\n{}", self.dev, self.tc_qdisc);
        if !self.tc_class.is_empty() {
            let _ = write!(s, "\ntc -s class show dev {}\n{}", self.dev, self.tc_class);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let d = Delay::of(&mut v).unwrap();
        assert_eq!((d.p50, d.p90, d.p99, d.max), (50, 90, 99, 100));
        let d = Delay::of(&mut [7]).unwrap();
        assert_eq!((d.p50, d.p99, d.max), (7, 7, 7));
        assert!(Delay::of(&mut []).is_none());
    }

    #[test]
    fn flow_specs() {
        let f = FlowSpec::parse("2mbit,size=200,prio=6,count=3,start=1s,stop=2s,tos=0xb8,mark=7,proto=tcp").unwrap();
        assert_eq!(
            (f.rate, f.size, f.priority, f.count, f.start, f.stop),
            (250_000, 200, 6, 3, 1_000_000_000, Some(2_000_000_000))
        );
        assert_eq!((f.tos, f.mark, f.proto), (0xB8, 7, 6));
        // No prio: the priority ip_forward would give the TOS.
        assert_eq!(FlowSpec::parse("1mbit,tos=0x10").unwrap().priority, 6);
        for bad in [
            "",
            "fast",
            "1mbit,size=0",
            "1mbit,colour=red",
            "1mbit,count=0",
            "1mbit,proto=icmp",
            "1mbit,start=2s,stop=1s",
            "1mbit,x",
        ] {
            let e = FlowSpec::parse(bad).unwrap_err();
            assert!(e.starts_with(&format!("--flow {bad}:")), "{e}");
        }
    }

    #[test]
    fn generated_cbr_is_exact_and_seeded() {
        let f = FlowSpec::parse("12mbit,size=1500,count=2").unwrap();
        let t = generate(std::slice::from_ref(&f), 1_000_000_000, 1).unwrap();
        // 12 Mbit/s of 1500-byte packets = 1000 packets/s per flow.
        assert_eq!(t.arrivals.len(), 2000);
        assert!(t.arrivals.windows(2).all(|w| w[0].at <= w[1].at));
        let t2 = generate(std::slice::from_ref(&f), 1_000_000_000, 2).unwrap();
        assert_ne!(t.arrivals[0].at, t2.arrivals[0].at);
    }

    #[test]
    fn reads_pcapng_with_its_timestamp_resolution() {
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        use pcap_file::pcapng::PcapNgWriter;
        use pcap_file::DataLink;
        use std::borrow::Cow;
        use std::time::Duration;

        let mut frame = vec![0u8; 12];
        frame.extend([
            0x08, 0x00, 0x45, 0x10, 0, 46, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 22, 0x9C, 0x40,
        ]);
        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        // Interface 0: default resolution (µs); interface 1: if_tsresol 9 (ns).
        w.write_pcapng_block(InterfaceDescriptionBlock { linktype: DataLink::ETHERNET, snaplen: 96, options: vec![] })
            .unwrap();
        let ns_opts = vec![InterfaceDescriptionOption::IfTsResol(9)];
        w.write_pcapng_block(InterfaceDescriptionBlock { linktype: DataLink::ETHERNET, snaplen: 96, options: ns_opts })
            .unwrap();
        // pcap-file writes the Duration's nanoseconds as the raw tick count.
        for (iface, ticks, len) in [(0, 1_000_000u64, 1514u32), (0, 1_000_500, 60), (1, 1_002_000_000, 100)] {
            let data = Cow::Borrowed(&frame[..]);
            let epb = EnhancedPacketBlock {
                interface_id: iface,
                timestamp: Duration::from_nanos(ticks),
                original_len: len,
                data,
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        let path = std::env::temp_dir().join(format!("qdisc-lab-replay-{}.pcapng", std::process::id()));
        std::fs::write(&path, w.into_inner()).unwrap();
        let t = read_pcap(path.to_str().unwrap());
        let _ = std::fs::remove_file(&path);
        let t = t.unwrap();
        let at: Vec<(u64, u32)> = t.arrivals.iter().map(|a| (a.at, a.len)).collect();
        assert_eq!(at, vec![(0, 1514), (500_000, 60), (2_000_000, 100)]);
        assert_eq!(t.flows.len(), 1);
        assert_eq!((t.flows[0].tos, t.flows[0].priority), (0x10, 6));
    }

    #[test]
    fn parses_headers() {
        // Ethernet + VLAN + IPv4/UDP, TOS 0xb8.
        let mut f = vec![0u8; 12];
        f.extend([0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        f.extend([0x45, 0xB8, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend([0x40, 0x00, 0x00, 0x35, 0, 8, 0, 0]);
        let (id, tos, prio, len) = Link::Ethernet.classify(&f, 1000);
        assert_eq!((tos, prio, len), (0xB8, 4, 1000));
        assert_eq!(flow_label(&id), "udp 10.0.0.1:16384 > 10.0.0.2:53");
        // ARP: one flow per ethertype.
        let mut arp = vec![0u8; 12];
        arp.extend([0x08, 0x06, 0, 1]);
        assert_eq!(Link::Ethernet.classify(&arp, 60).0, FlowId::Ether(0x0806));
        // Raw IPv6/TCP: priority stays 0 (ip6_forward does not set it); +14 for Ethernet.
        let mut v6 = vec![0x6B, 0x80, 0, 0, 0, 20, 6, 64];
        v6.extend([0x20, 0x01, 0x0D, 0xB8].iter().chain(&[0; 11]).chain(&[1]));
        v6.extend([0x20, 0x01, 0x0D, 0xB8].iter().chain(&[0; 11]).chain(&[2]));
        v6.extend([0, 22, 0xC0, 0x00]);
        let (id, tos, prio, len) = Link::RawIp.classify(&v6, 60);
        assert_eq!((tos, prio, len), (0xB8, 0, 74));
        assert_eq!(flow_label(&id), "tcp [2001:db8::1]:22 > [2001:db8::2]:49152");
    }
}
