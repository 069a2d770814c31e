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

use qdisc::tc::makeargs_checked;
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

/// The most figures a run's result may keep that grow with its duration (see
/// [`Scenario::retained_figures`]): about 800 MB of memory. A longer run is refused
/// when the file is loaded rather than ended by the OOM killer.
pub const MAX_RETAINED_FIGURES: u64 = 10_000_000;

/// Cores of a host whose `[[host]]` entry does not say.
pub const DEFAULT_CPUS: u32 = 4;

/// The `sysctl` keys a script may set (`sysctl -w KEY=VALUE`), in the order the errors
/// list them. The `net.core` ones are global to a kernel, the `net.ipv4` ones per
/// network namespace (see docs/scenarios.md, "Settings", and [`per_netns_sysctl`]).
pub const SYSCTL_KEYS: [&str; 18] = [
    "net.core.default_qdisc",
    "net.core.dev_weight",
    "net.core.dev_weight_tx_bias",
    "net.core.dev_weight_rx_bias",
    "net.core.netdev_budget",
    "net.core.netdev_budget_usecs",
    "net.core.netdev_max_backlog",
    "net.core.skb_defer_max",
    "net.core.gro_normal_batch",
    "net.core.rps_sock_flow_entries",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_syn_retries",
    "net.ipv4.tcp_synack_retries",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_notsent_lowat",
    "net.ipv4.tcp_ecn",
];

/// The TCP congestion controls a scenario may name (`cc`, and `sysctl -w
/// net.ipv4.tcp_congestion_control=…`), spelled as the kernel spells them: the ones the
/// simulator models.
pub const CONGESTION_CONTROLS: [&str; 4] = ["cubic", "reno", "bbr", "dctcp"];

/// A traffic entry's congestion control when neither it nor its sender's script says.
pub const DEFAULT_CONGESTION_CONTROL: &str = "cubic";

/// Whether a [`SYSCTL_KEYS`] key is per network namespace (`net.ipv4.*`, registered by
/// `ipv4_sysctl_init_net` for every namespace) rather than a kernel global.
pub fn per_netns_sysctl(key: &str) -> bool {
    key.starts_with("net.ipv4.")
}

/// The error for a congestion control name the simulator does not model.
fn unknown_cc(name: &str) -> String {
    format!("unknown congestion control {name:?} (the simulator models {})", CONGESTION_CONTROLS.join(", "))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// Cores of the host, 1..=4096 (default: [`DEFAULT_CPUS`] = 4).
    pub cpus: u32,
    /// CPU cost profile: what `profile = "..."` named — "default" (bundled) or a file
    /// path, resolved relative to the scenario file's directory.
    pub profile: crate::profile::Profile,
    /// `ifb = ["ifb0", …]`: ifb devices the host has besides its link interfaces
    /// (`ip link add NAME type ifb`, up), for its scripts to shape ingress with.
    pub ifb: Vec<String>,
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
    /// What the two interfaces are (the simulator models every kind; the kernel lab
    /// builds veth pairs, through a wire namespace unless the kind is `VethPair`).
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
    /// `veth_bql = "off" | "bytes" | "time"` (`kind = "veth-pair"` only; `Off` for every
    /// other kind).
    pub veth_bql: VethBql,
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
    /// The two interfaces are the two ends of one veth pair, with no bridge between
    /// them (no rate, delay or loss of its own). Hosts joined by one are network
    /// namespaces of one kernel: they share their CPUs (same `cpus` and `profile`).
    VethPair,
}

/// Byte queue limits on a veth's tx queue: not in any released kernel (the patch
/// series of seed 004, net-next 2026), so only the simulator models it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VethBql {
    /// Mainline: no BQL on veth.
    #[default]
    Off,
    /// v5 of the series: completions reported per NAPI poll of the peer (≤ 64 packets).
    Bytes,
    /// The time-based revision: completions accumulate across polls and are reported
    /// every `tx-usecs` (default 100 µs), or when the ring empties while BQL stops the queue.
    Time,
}

impl LinkKind {
    /// The kind as a scenario names it (`kind = "…"`).
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Eth => "eth",
            LinkKind::Veth => "veth",
            LinkKind::VethPair => "veth-pair",
        }
    }
}

impl VethBql {
    /// The value as a scenario names it (`veth_bql = "…"`).
    pub fn name(self) -> &'static str {
        match self {
            VethBql::Off => "off",
            VethBql::Bytes => "bytes",
            VethBql::Time => "time",
        }
    }
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

    /// The tc command (without "tc -n NS") realising the link's direction on `dev`,
    /// the wire port whose egress carries it; `None` when there is nothing to realise.
    /// The kernel lab runs it, and the simulator runs it on its own wire (plus a seed).
    pub fn wire_qdisc(&self, dev: &str) -> Option<Vec<String>> {
        let mut a: Vec<String> = ["qdisc", "add", "dev", dev, "root", "handle", "1:"].map(String::from).to_vec();
        if self.wire_needs_netem() {
            a.extend(["netem".into(), "delay".into(), exact_time(self.delay)]);
            if self.loss > 0.0 {
                a.extend(["loss".into(), "random".into(), format!("{}%", self.loss)]);
            }
            if let Some(r) = self.rate {
                a.extend(["rate".into(), format!("{}bit", r * 8)]);
            }
            a.extend(["limit".into(), self.wire_netem_limit().to_string()]);
        } else {
            let r = self.rate?;
            a.extend(["tbf".into(), "rate".into(), format!("{}bit", r * 8), "burst".into()]);
            a.extend([self.wire_tbf_burst().to_string(), "latency".into(), "50ms".into()]);
        }
        Some(a)
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
    /// `echo MASK > /sys/class/net/DEV/queues/rx-N/rps_cpus` (RPS): the CPUs of the
    /// mask, as for `XpsCpus` ("0": RPS off for that queue). `dev` may be `lo` (rx-0).
    RpsCpus { dev: String, rxq: u32, cpus: Vec<u32> },
    /// `echo N > /sys/class/net/DEV/queues/rx-N/rps_flow_cnt`: RFS's flow table of an
    /// rx queue (0: none); with `net.core.rps_sock_flow_entries` it steers a flow to
    /// the CPU its socket's reader runs on.
    RpsFlowCnt { dev: String, rxq: u32, count: u32 },
    /// `echo 0|1 > /sys/class/net/DEV/threaded`: the device's NAPI polls run in
    /// kernel threads (`napi/DEV-N`) that the scheduler places, instead of in the
    /// softirq of the CPU that raised them.
    Threaded { dev: String, on: bool },
    /// `ethtool -C DEV rx-usecs N tx-usecs N` (interrupt coalescing; either or both).
    Coalesce { dev: String, rx_usecs: Option<u32>, tx_usecs: Option<u32> },
    /// `ethtool -G DEV rx N tx N` (descriptors per ring; either or both).
    Rings { dev: String, rx: Option<u32>, tx: Option<u32> },
    /// `ethtool -K DEV tso on|off gso on|off gro on|off` (any of them, in any order).
    Features { dev: String, tso: Option<bool>, gso: Option<bool>, gro: Option<bool> },
    /// `ip link set [dev] DEV mtu N` / `txqueuelen N` (either or both on one line).
    IpLink { dev: String, mtu: Option<u32>, txqueuelen: Option<u32> },
    /// `ip route change|replace 10.N.0.0/24 [via GW] dev DEV realms [FROM/]TO`: the
    /// realms (RTA_FLOW: FROM in the high 16 bits, TO in the low) of the host's route
    /// to link `link`'s subnet, restated exactly as the host has it ([`host_route`]).
    IpRoute { link: usize, realms: u32 },
}

/// The route a host has to link `link`'s subnet `10.(link+1).0.0/24`, as every backend
/// installs it: the connected route of its interface on that link, or (the link is
/// elsewhere) a route via the next hop on the first link of the shortest path to the
/// nearer end of that link. `None`: not connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoute {
    /// The host's interface the route leaves by.
    pub dev: String,
    /// The gateway's address (`None`: the connected route).
    pub via: Option<String>,
    /// The first link crossed (the route's own link for the connected route).
    pub first_link: usize,
}

/// See [`HostRoute`].
pub fn host_route(links: &[Link], host: &str, link: usize) -> Option<HostRoute> {
    let l = links.get(link)?;
    for e in [&l.a, &l.b] {
        if e.host == host {
            return Some(HostRoute { dev: e.iface.clone(), via: None, first_link: link });
        }
    }
    let (pa, pb) = (path(links, host, &l.a.host), path(links, host, &l.b.host));
    let p = [pa, pb].into_iter().flatten().min_by_key(|p| p.len())?;
    let (first, from_b) = p[0];
    let fl = &links[first];
    let (me, next) = if from_b { (&fl.b, &fl.a) } else { (&fl.a, &fl.b) };
    Some(HostRoute {
        dev: me.iface.clone(),
        via: Some(Link::address(first, fl.b.host == next.host)),
        first_link: first,
    })
}

/// The link whose subnet (`10.(i+1).0.0/24`) holds an IPv4 address, if any.
pub fn link_of_address(a: [u8; 4], links: usize) -> Option<usize> {
    let i = a[1] as usize;
    (a[0] == 10 && a[2] == 0 && i >= 1 && i <= links).then(|| i - 1)
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
    /// `net_cls_classid = "1:10"` (tcp, udp, ping): the sending application runs in a
    /// net_cls cgroup with this `net_cls.classid` (0x00010010 here), which its sockets
    /// carry and the cgroup classifier reads; 0: none (the root cgroup's).
    pub net_cls_classid: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TrafficKind {
    /// TCP, `flows` parallel connections with congestion control `cc`: bulk, or each
    /// stream held to `rate` bytes/s on average by its writer (iperf3's `-b` with TCP:
    /// a block is written while the average since the test began is below it).
    Tcp { flows: u32, cc: String, rate: Option<u64> },
    /// Constant-bitrate UDP: `flows` streams of `size`-byte payloads, each at `rate`
    /// bytes/s (iperf3's `-b` is per stream); `None`: `rate = "unlimited"`, as fast as
    /// the sender can (iperf3 `-b 0`). `tos`: the sockets' IP_TOS (iperf3 `--tos`), the
    /// whole byte — DSCP and the ECN field, which a UDP socket keeps (`__ip_sock_set_tos`
    /// masks it for TCP only): 1 sends ECT(1), 2 ECT(0); its `rt_tos2priority` becomes
    /// `sk_priority`, every datagram's `skb->priority`.
    Udp { rate: Option<u64>, size: u32, flows: u32, tos: u8 },
    /// ICMP echo every `interval` nanoseconds.
    Ping { interval: u64 },
    /// The kernel's packet generator (pktgen, `xmit_mode queue_xmit`: through the
    /// qdisc): `flows` kernel threads sending UDP frames of `size` bytes (`pkt_size`:
    /// Ethernet, IP and UDP headers included, no FCS) to the discard port, each at
    /// `rate` bytes/s of frames, or (`None`) as fast as its CPU goes. No socket, no
    /// receiving application: the far host's UDP drops them (counted as received).
    Pktgen { rate: Option<u64>, size: u32, flows: u32 },
}

impl TrafficKind {
    pub fn name(&self) -> &'static str {
        match self {
            TrafficKind::Tcp { .. } => "tcp",
            TrafficKind::Udp { .. } => "udp",
            TrafficKind::Pktgen { .. } => "pktgen",
            TrafficKind::Ping { .. } => "ping",
        }
    }
}

impl Scenario {
    /// The figures a run keeps that grow with its duration, at most: per 100 ms
    /// reporting interval, one per tcp/udp/pktgen flow, one per such entry (its sum),
    /// one for the total, one per host CPU (the simulator's CPU model) and one per veth
    /// BQL queue; and one per ping request. (The periodic tc snapshots, the largest part,
    /// do not count: they are kept on disk.)
    pub fn retained_figures(&self) -> u64 {
        const INTERVAL: u64 = 100_000_000;
        let per_interval: u64 = 1
            + self
                .traffic
                .iter()
                .map(|t| match t.kind {
                    TrafficKind::Tcp { flows, .. }
                    | TrafficKind::Udp { flows, .. }
                    | TrafficKind::Pktgen { flows, .. } => flows as u64 + 1,
                    TrafficKind::Ping { .. } => 0,
                })
                .sum::<u64>()
            + self.hosts.iter().map(|h| h.cpus as u64).sum::<u64>()
            + self.links.iter().filter(|l| l.veth_bql != VethBql::Off).map(|l| 2 * l.txqueues as u64).sum::<u64>();
        let pings: u64 = self
            .traffic
            .iter()
            .map(|t| match t.kind {
                TrafficKind::Ping { interval } => t.duration.div_ceil(interval),
                _ => 0,
            })
            .sum();
        self.duration.div_ceil(INTERVAL).saturating_mul(per_interval).saturating_add(pings)
    }

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
    /// From a host to itself: `Some(vec![])` (local traffic, over `lo`).
    pub fn path(&self, from: &str, to: &str) -> Option<Vec<(usize, bool)>> {
        path(&self.links, from, to)
    }

    /// The address traffic from `from` to `to` is sent to: `to`'s address on the
    /// last link of the route; `127.0.0.1` when `from` is `to` (local traffic, over `lo`).
    pub fn dst_address(&self, from: &str, to: &str) -> Option<String> {
        if from == to {
            return Some("127.0.0.1".into());
        }
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

/// A `net_cls_classid`: `MAJ:MIN` in hexadecimal, as tc writes a class (not 0, not
/// `root`); the value `net_cls.classid` takes (`0xMMMMmmmm`).
fn parse_net_cls_classid(s: &str) -> Option<u32> {
    let c = qdisc::tc::get_tc_classid(s)?;
    (s.contains(':') && c != 0 && c != u32::MAX).then_some(c)
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
    cpumask(s, "xps")
}

/// [`parse_cpumask`] with errors naming the file's mask: `what` is "xps" or "rps".
fn cpumask(s: &str, what: &str) -> Result<(Vec<u32>, usize), String> {
    let bad = || {
        format!(
            "invalid {what} mask {s:?} (hex groups of up to 32 bits separated by commas, e.g. \"f\" or \"ffff,ffffffff\"; \"0\" = no {})",
            what.to_uppercase()
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
    ifb: Option<Vec<Spanned<String>>>,
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
    veth_bql: Option<Spanned<String>>,
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
    net_cls_classid: Option<Spanned<String>>,
    tos: Option<Spanned<i64>>,
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
    let msg = match checked_rate(v.get_ref().trim()) {
        Ok(r) => return Ok(r),
        Err(RateProblem::TooLarge) => {
            format!("rate {:?} is too large: at most 2^61 - 1 bytes (about 18.4 Ebit) per second", v.get_ref())
        }
        Err(RateProblem::BelowByte) => {
            format!("rate {:?} is less than one byte per second: the smallest rate is 8bit", v.get_ref())
        }
        Err(RateProblem::Zero) => "a rate must be greater than 0".into(),
        Err(RateProblem::Invalid) => format!("invalid rate {:?} {RATE_HINT}", v.get_ref()),
    };
    Err(cx.at(v.span(), field, msg))
}

/// A traffic entry's `rate`: a tc rate, or "unlimited" (`None`: iperf3's `-b 0`).
fn parse_rate_or_unlimited(cx: &Cx, v: &Spanned<String>, field: &str) -> Result<Option<u64>, LoadError> {
    let text = v.get_ref().trim();
    if text == "unlimited" {
        return Ok(None);
    }
    if get_rate64(text).is_none() {
        let msg = format!(
            "invalid rate {:?} (tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\", or \"unlimited\")",
            v.get_ref()
        );
        return Err(cx.at(v.span(), field, msg));
    }
    parse_rate(cx, v, field).map(Some)
}

/// Why [`checked_rate`] refuses a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateProblem {
    /// Not a rate in tc syntax, or negative (tc's `get_rate64` would wrap it).
    Invalid,
    /// Its number is 0.
    Zero,
    /// Not 0 but under one byte per second ("1bit": 0 bytes/s once rounded).
    BelowByte,
    /// More bytes per second than fit 64 bits once counted in bits (2^61 - 1).
    TooLarge,
}

/// A rate in tc syntax as qdisc-lab's own inputs take it (a link's, a flow's, replay's
/// wire): bytes per second, from 1 (8bit) to 2^61 - 1, never wrapped.
pub fn checked_rate(s: &str) -> Result<u64, RateProblem> {
    let r = get_rate64(s).filter(|_| !s.starts_with('-')).ok_or(RateProblem::Invalid)?;
    // A rate whose number is 0 ("0", "0mbit", "0.0kbit").
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    match r {
        0 if digits.parse::<f64>().is_ok_and(|v| v == 0.0) => Err(RateProblem::Zero),
        0 => Err(RateProblem::BelowByte),
        r if r > u64::MAX / 8 => Err(RateProblem::TooLarge),
        r => Ok(r),
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
        let mut ifb: Vec<String> = Vec::new();
        for (j, d) in h.get_ref().ifb.iter().flatten().enumerate() {
            let f = format!("host[{i}].ifb[{j}]");
            let name = d.get_ref();
            if !valid_iface(name) {
                return Err(cx.at(d.span(), f, format!("invalid interface name {name:?} (1–15 of A-Z a-z 0-9 _ - .)")));
            }
            if name == "lo" {
                return Err(cx.at(d.span(), f, "\"lo\" is the loopback device; name the ifb device otherwise"));
            }
            if ifb.contains(name) {
                return Err(cx.at(d.span(), f, format!("ifb device {name:?} is declared twice")));
            }
            ifb.push(name.clone());
        }
        hosts.push(Host { name: n.get_ref().clone(), cpus, profile, ifb });
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
            if hosts.iter().any(|x| x.name == h && x.ifb.iter().any(|d| d == ifc)) {
                return Err(cx.at(e.span(), f, format!("interface {h}:{ifc} is one of the host's ifb devices")));
            }
            eps.push(Endpoint { host: h.into(), iface: ifc.into() });
        }
        if eps[0].host == eps[1].host {
            return Err(cx.at(r.between.span(), field, "a link joins two different hosts"));
        }
        let kind = match r.kind.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "eth")) => LinkKind::Eth,
            Some((_, "veth")) => LinkKind::Veth,
            Some((_, "veth-pair")) => LinkKind::VethPair,
            Some((v, other)) => {
                return Err(cx.at(
                    v.span(),
                    format!("link[{i}].kind"),
                    format!("unknown kind {other:?} (eth, veth or veth-pair)"),
                ))
            }
        };
        if kind == LinkKind::VethPair {
            // One veth pair: nothing between the two ends to give a rate, delay or loss.
            for (name, v) in [("rate", &r.rate), ("delay", &r.delay), ("loss", &r.loss)] {
                if let Some(v) = v {
                    return Err(cx.at(
                        v.span(),
                        format!("link[{i}].{name}"),
                        "a veth pair has no rate, delay or loss of its own (kind = \"veth-pair\": the two \
                         interfaces are the two ends of one veth, no bridge between them); use kind = \"veth\" \
                         for a link with a wire, or a qdisc on the interface",
                    ));
                }
            }
            // Two namespaces of one kernel: the same CPUs, the same costs.
            let span = r.kind.as_ref().expect("the kind was given").span();
            let (ha, hb) = (&eps[0].host, &eps[1].host);
            let (x, y) = (
                hosts.iter().find(|h| &h.name == ha).expect("checked above"),
                hosts.iter().find(|h| &h.name == hb).expect("checked above"),
            );
            let joins = "a veth pair joins two network namespaces of one kernel, which share its CPUs";
            if x.cpus != y.cpus {
                return Err(cx.at(
                    span,
                    format!("link[{i}].kind"),
                    format!(
                        "{joins}: host {ha} has {}, host {hb} has {}; give both the same cpus",
                        x.cpus_phrase(),
                        y.cpus_phrase()
                    ),
                ));
            }
            if x.profile.origin != y.profile.origin {
                return Err(cx.at(
                    span,
                    format!("link[{i}].kind"),
                    format!(
                        "{joins}: host {ha} has profile {:?}, host {hb} has profile {:?}; give both the same profile",
                        x.profile.origin, y.profile.origin
                    ),
                ));
            }
        }
        let veth_bql = match &r.veth_bql {
            None => VethBql::Off,
            Some(v) => {
                let f = format!("link[{i}].veth_bql");
                let b = match v.get_ref().as_str() {
                    "off" => VethBql::Off,
                    "bytes" => VethBql::Bytes,
                    "time" => VethBql::Time,
                    other => {
                        return Err(cx.at(v.span(), f, format!("unknown veth_bql {other:?} (off, bytes or time)")))
                    }
                };
                if kind != LinkKind::VethPair {
                    return Err(cx.at(
                        v.span(),
                        f,
                        format!(
                            "only a kind = \"veth-pair\" link has veth_bql (BQL on its veth's tx queues); \
                             this link is kind = \"{}\"",
                            kind.name()
                        ),
                    ));
                }
                b
            }
        };
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
        let txqueues = match &r.txqueues {
            None => 1,
            Some(v) => match u32::try_from(*v.get_ref()) {
                Ok(n) if (1..=4096).contains(&n) => n,
                _ => return Err(cx.at(v.span(), format!("link[{i}].txqueues"), "txqueues must be 1..4096")),
            },
        };
        let b = eps.pop().unwrap();
        let a = eps.pop().unwrap();
        links.push(Link { a, b, kind, txqueues, rate, delay, loss, veth_bql, line: cx.line_of(&l.span()) });
    }
    if let Some(l) = raw.link.get(254) {
        return Err(cx.at(
            l.span(),
            "link[254]",
            format!("at most 254 links (link i uses the subnet 10.(i+1).0.0/24); this file has {}", raw.link.len()),
        ));
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
        let (lines, settings) = script_lines(cx, script, &field, h, &ifaces, &links)?;
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
            "tcp" => &["flows", "cc", "rate", "sender_cpus", "receiver_cpus", "net_cls_classid"],
            "udp" => &["rate", "size", "flows", "sender_cpus", "receiver_cpus", "net_cls_classid", "tos"],
            "pktgen" => &["rate", "size", "flows", "sender_cpus"],
            "ping" => &["interval", "sender_cpus", "net_cls_classid"],
            _ => {
                return Err(cx.at(
                    r.kind.span(),
                    f("kind"),
                    format!("unknown traffic kind {kind:?} (expected \"tcp\", \"udp\", \"pktgen\" or \"ping\")"),
                ))
            }
        };
        let optional: [(&str, Option<Range<usize>>); 9] = [
            ("flows", r.flows.as_ref().map(|v| v.span())),
            ("cc", r.cc.as_ref().map(|v| v.span())),
            ("rate", r.rate.as_ref().map(|v| v.span())),
            ("size", r.size.as_ref().map(|v| v.span())),
            ("interval", r.interval.as_ref().map(|v| v.span())),
            ("sender_cpus", r.sender_cpus.as_ref().map(|v| v.span())),
            ("receiver_cpus", r.receiver_cpus.as_ref().map(|v| v.span())),
            ("net_cls_classid", r.net_cls_classid.as_ref().map(|v| v.span())),
            ("tos", r.tos.as_ref().map(|v| v.span())),
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
        let net_cls_classid = match &r.net_cls_classid {
            None => 0,
            Some(v) => parse_net_cls_classid(v.get_ref().trim()).ok_or_else(|| {
                cx.at(
                    v.span(),
                    f("net_cls_classid"),
                    format!("{:?} is not a class id MAJ:MIN (hexadecimal, as tc writes it: \"1:10\")", v.get_ref()),
                )
            })?,
        };
        let kind = match kind {
            "tcp" => {
                let cc = match &r.cc {
                    // The sender's net.ipv4.tcp_congestion_control when its script sets it
                    // (the last value: sockets are created after the scripts ran).
                    None => tc
                        .iter()
                        .filter(|s: &&TcScript| s.host == from)
                        .flat_map(|s| &s.settings)
                        .filter_map(|st| match &st.kind {
                            SettingKind::Sysctl { key, value } if key == "net.ipv4.tcp_congestion_control" => {
                                Some(value.clone())
                            }
                            _ => None,
                        })
                        .last()
                        .unwrap_or_else(|| DEFAULT_CONGESTION_CONTROL.to_string()),
                    Some(v) => {
                        let s = v.get_ref();
                        if !CONGESTION_CONTROLS.contains(&s.as_str()) {
                            return Err(cx.at(v.span(), f("cc"), unknown_cc(s)));
                        }
                        s.clone()
                    }
                };
                // iperf3 -b: per stream; unlimited (bulk) unless given.
                let rate = match &r.rate {
                    None => None,
                    Some(rv) => parse_rate_or_unlimited(cx, rv, &f("rate"))?,
                };
                TrafficKind::Tcp { flows, cc, rate }
            }
            "udp" => {
                let Some(rv) = &r.rate else {
                    return Err(cx.at(
                        t.span(),
                        f("rate"),
                        "missing: udp traffic needs a rate per flow (e.g. rate = \"50mbit\", or \"unlimited\")",
                    ));
                };
                let rate = parse_rate_or_unlimited(cx, rv, &f("rate"))?;
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
                let tos = match &r.tos {
                    None => 0,
                    Some(v) => u8::try_from(*v.get_ref()).map_err(|_| {
                        cx.at(
                            v.span(),
                            f("tos"),
                            "the IP TOS byte is 0 to 255 (the ECN field its low two bits: 1 = ECT(1), 2 = ECT(0))",
                        )
                    })?,
                };
                TrafficKind::Udp { rate, size, flows, tos }
            }
            "pktgen" => {
                let rate = match &r.rate {
                    Some(rv) if rv.get_ref().trim() != "unlimited" => {
                        if get_rate64(rv.get_ref().trim()).is_none() {
                            return Err(cx.at(
                                rv.span(),
                                f("rate"),
                                format!("invalid rate {:?} (tc units, e.g. \"1gbit\", or \"unlimited\")", rv.get_ref()),
                            ));
                        }
                        Some(parse_rate(cx, rv, &f("rate"))?)
                    }
                    _ => None,
                };
                let size = match &r.size {
                    None => 60,
                    Some(v) => {
                        let s = parse_size(cx, v, &f("size"))?;
                        if !(42..=65535).contains(&s) {
                            return Err(cx.at(
                                v.span(),
                                f("size"),
                                "a pktgen frame (pkt_size) is 42 (Ethernet, IPv4 and UDP headers) to 65535 bytes",
                            ));
                        }
                        s
                    }
                };
                TrafficKind::Pktgen { rate, size, flows }
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
            net_cls_classid,
        });
    }

    let s = Scenario { file: cx.file.into(), sha256, name, duration, seed, hosts, links, tc, traffic };
    let figures = s.retained_figures();
    if figures > MAX_RETAINED_FIGURES {
        return Err(cx.at(
            dur.span(),
            "duration",
            format!(
                "{} would keep {figures} figures that grow with the run (per 100 ms: each flow's interval, each \
                 entry's sum, each host CPU's split, each veth BQL queue; each ping request), more than the {} a \
                 result may hold (about 80 bytes each in memory): shorten the run, or use fewer flows, CPUs or \
                 ping requests",
                fmt_ns(duration),
                MAX_RETAINED_FIGURES
            ),
        ));
    }
    Ok(s)
}

/// Split a script into tc command lines and settings, each with its line number in the
/// file, and check what can be checked without a kernel: the devices it names are the
/// host's, settings are ones the kernel would take on a host like this one.
/// `ifaces`: the host's interfaces (sorted by name), each with its tx queues and link
/// (an index into `links`).
fn script_lines(
    cx: &Cx,
    script: &Spanned<String>,
    field: &str,
    host: &Host,
    ifaces: &[(String, u32, usize)],
    links: &[Link],
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
    // Line numbers counted on from the previous line's (offsets only grow), not from
    // the file's start: setup stays linear in the script's length.
    let start_line = line_col(cx.text, span.start).0;
    let mut last = (span.start, start_line);
    let mut line_of = |at: usize| {
        if at == span.start {
            return start_line;
        }
        last = (at, last.1 + cx.text.get(last.0..at).map_or(0, |t| t.matches('\n').count()));
        last.1
    };
    let not_ours = |d: &str| {
        let all: Vec<&str> = names.iter().copied().chain(host.ifb.iter().map(String::as_str)).collect();
        let has = if all.is_empty() { "none".to_string() } else { all.join(", ") };
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
        let at = offset.unwrap_or(span.start);
        let here = |msg: String| cx.at(at..at, field, format!("script line {}: {msg}", k + 1));
        let mut args = makeargs_checked(text).map_err(here)?;
        if args.is_empty() {
            continue; // blank line or comment
        }
        let line_no = line_of(at);
        if ["sysctl", "echo", "ethtool", "ip"].contains(&args[0].as_str()) {
            let devs = Devs { host, ifaces, links, not_ours: &not_ours };
            let kinds = match args[0].as_str() {
                "sysctl" => sysctl_line(&args[1..]).map_err(here)?,
                "echo" => vec![echo_line(&args[1..], &devs).map_err(here)?],
                "ethtool" => vec![ethtool_line(&args[1..], &devs).map_err(here)?],
                _ => vec![ip_line(&args[1..], &devs).map_err(here)?],
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
                if !names.contains(&d.as_str()) && d != "lo" && !host.ifb.iter().any(|i| i == d) {
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
    if key == "net.ipv4.tcp_congestion_control" {
        if !CONGESTION_CONTROLS.contains(&value) {
            return Err(format!("{key} = {value:?} is refused: {}", unknown_cc(value)));
        }
        return Ok(SettingKind::Sysctl { key, value: value.to_string() });
    }
    if key == "net.core.default_qdisc" {
        qdisc::tree::check_default_qdisc(value).map_err(|e| format!("{key} = {value:?} is refused: {e}"))?;
        return Ok(SettingKind::Sysctl { key, value: value.to_string() });
    }
    if let Some(n) = sysctl_vector_len(&key) {
        return sysctl_vector(&key, value, n);
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

/// How many integers a vector key holds (`net.ipv4.tcp_rmem`, `tcp_wmem`: min, default, max).
pub fn sysctl_vector_len(key: &str) -> Option<usize> {
    match key {
        "net.ipv4.tcp_rmem" | "net.ipv4.tcp_wmem" => Some(3),
        _ => None,
    }
}

/// A vector key's value as `proc_dointvec_minmax` with `extra1 = SYSCTL_ONE` takes it
/// (net/ipv4/sysctl_net_ipv4.c, `tcp_rmem` and `tcp_wmem`): up to `n` integers, each at least 1; a
/// shorter list sets the first ones and keeps the rest.
fn sysctl_vector(key: &str, value: &str, n: usize) -> Result<SettingKind, String> {
    if value.contains(['"', '\'']) {
        // The script's words split as tc's makeargs does: a quote opens a word only at its start.
        return Err(format!(
            "{key}: quote the whole setting, as in sysctl -w \"{key}=4096 131072 6291456\" (a quote inside a word is kept)"
        ));
    }
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.is_empty() {
        return Err(format!("{key} = {value:?}: not an integer"));
    }
    if words.len() > n {
        return Err(format!("{key} = {value:?}: the kernel takes at most {n} integers (min default max)"));
    }
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        let Some(v) = parse_c_int(w) else {
            return Err(format!("{key} = {value:?}: {w:?} is not an integer"));
        };
        if !(1..=i32::MAX as i64).contains(&v) {
            return Err(format!("{key} = {value:?}: {v} is out of range: the kernel takes 1 to {}", i32::MAX));
        }
        out.push(v.to_string());
    }
    Ok(SettingKind::Sysctl { key: key.to_string(), value: out.join(" ") })
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
/// the dev_weight family and gro_normal_batch are `proc_dointvec_minmax` with
/// `extra1 = SYSCTL_ONE`, skb_defer_max with `extra1 = SYSCTL_ZERO` (no `extra2`: up
/// to `INT_MAX`); netdev_budget_usecs has `extra1 = netdev_budget_usecs_min`, 2 jiffies
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
        "net.core.skb_defer_max" => Some((0, i32::MAX as i64, "")),
        "net.core.gro_normal_batch" => Some((1, i32::MAX as i64, "")),
        // rps_sock_flow_sysctl: more than 2^29 entries is refused (overflow guard).
        "net.core.rps_sock_flow_entries" => Some((0, 1 << 29, "")),
        // proc_dou8vec_minmax (net/ipv4/sysctl_net_ipv4.c): a u8, tcp_syn_retries
        // between tcp_syn_retries_min and MAX_TCP_SYNCNT.
        "net.ipv4.tcp_syn_retries" => Some((1, 127, "")),
        "net.ipv4.tcp_synack_retries" | "net.ipv4.tcp_slow_start_after_idle" => Some((0, 255, "")),
        // proc_douintvec: an unsigned int (no minus sign).
        "net.ipv4.tcp_notsent_lowat" => Some((0, u32::MAX as i64, "")),
        // proc_dou8vec_minmax up to SYSCTL_TWO in 6.12; 6.18's AccECN modes (3 to 5) are
        // not modelled.
        "net.ipv4.tcp_ecn" => Some((0, 2, " (6.18's AccECN modes 3 to 5 are not modelled)")),
        _ => None,
    }
}

/// What a script's setting lines may name: the host, its interfaces (name, tx queues,
/// link index; sorted by name), the links, and the error for a device it does not have.
struct Devs<'a> {
    host: &'a Host,
    ifaces: &'a [(String, u32, usize)],
    links: &'a [Link],
    not_ours: &'a dyn Fn(&str) -> String,
}

/// A device a setting line names.
#[derive(Clone, Copy)]
enum Dev<'a> {
    /// The loopback device (every host has one: one rx and one tx queue).
    Lo,
    /// A link interface: its queues (tx and rx: `txqueues`), its link's index and link.
    Link { queues: u32, index: usize, link: &'a Link },
}

impl<'a> Devs<'a> {
    /// `dev` as one of the host's devices (`lo` included), or the error naming them.
    fn get(&self, dev: &str) -> Result<Dev<'a>, String> {
        if dev == "lo" {
            return Ok(Dev::Lo);
        }
        let Some((_, queues, index)) = self.ifaces.iter().find(|(n, _, _)| n == dev) else {
            return Err((self.not_ours)(dev));
        };
        Ok(Dev::Link { queues: *queues, index: *index, link: &self.links[*index] })
    }
}

/// "eth0 is a veth (link[0] kind = \"veth-pair\")": how errors name a veth interface.
fn veth_phrase(dev: &str, index: usize, link: &Link) -> String {
    format!("{dev} is a veth (link[{index}] kind = {:?})", link.kind.name())
}

/// "1 tx queue (tx-0)", "4 rx queues (rx-0 to rx-3)".
fn queues_phrase(n: u32, dir: &str) -> String {
    if n == 1 {
        format!("1 {dir} queue ({dir}-0)")
    } else {
        format!("{n} {dir} queues ({dir}-0 to {dir}-{})", n - 1)
    }
}

/// `echo 0|1 > /sys/class/net/DEV/threaded` (`threaded_store`: 0 or 1; lo has no
/// NAPI of its own).
fn threaded_line(dev: &str, value: &str, devs: &Devs) -> Result<SettingKind, String> {
    if matches!(devs.get(dev)?, Dev::Lo) {
        return Err("lo has no NAPI to thread (its packets go through the per-CPU backlog)".into());
    }
    let on = match value {
        "0" => false,
        "1" => true,
        _ => {
            return Err(format!(
                "/sys/class/net/{dev}/threaded takes 0 or 1, not {value:?} (write error: Invalid argument)"
            ))
        }
    };
    Ok(SettingKind::Threaded { dev: dev.to_string(), on })
}

/// `echo [-n] VALUE > PATH` (the words after `echo`): an xps_cpus or rps_cpus mask, or
/// a sysctl through /proc/sys.
fn echo_line(args: &[String], devs: &Devs) -> Result<SettingKind, String> {
    const FORM: &str =
        "expected echo MASK > /sys/class/net/DEV/queues/tx-N/xps_cpus or /sys/class/net/DEV/queues/rx-N/rps_cpus";
    let host = devs.host;
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
    let (dev, q, rps) = match parts[..] {
        [dev, "queues", q, "xps_cpus"] => (dev, q, false),
        [dev, "queues", q, "rps_cpus"] => (dev, q, true),
        [dev, "queues", q, "rps_flow_cnt"] => {
            // store_rps_dev_flow_table_cnt: kstrtoul, its power of two − 1 fits 32 bits.
            let count = value.parse::<u32>().map_err(|_| {
                format!("rps_flow_cnt takes a count of 0 to 4294967295, not {value:?} (write error: Invalid argument)")
            })?;
            let SettingKind::RpsCpus { dev, rxq, .. } = echo_line(
                &["0".to_string(), ">".to_string(), format!("/sys/class/net/{dev}/queues/{q}/rps_cpus")],
                devs,
            )?
            else {
                unreachable!("an rps_cpus line")
            };
            return Ok(SettingKind::RpsFlowCnt { dev, rxq, count });
        }
        [dev, "threaded"] => return threaded_line(dev, value, devs),
        _ => {
            return Err(format!(
                "echo to {path:?} is not supported: the only /sys files a script can write are \
                 /sys/class/net/DEV/queues/tx-N/xps_cpus (XPS), /sys/class/net/DEV/queues/rx-N/rps_cpus (RPS), \
                 /sys/class/net/DEV/queues/rx-N/rps_flow_cnt (RFS) and /sys/class/net/DEV/threaded (threaded NAPI)"
            ))
        }
    };
    let (dir, what) = if rps { ("rx", "rps") } else { ("tx", "xps") };
    // XPS: the host's link interfaces; RPS: lo too (one rx queue).
    let dev_is = if rps {
        devs.get(dev)?
    } else {
        devs.get(dev).ok().filter(|d| !matches!(d, Dev::Lo)).ok_or_else(|| (devs.not_ours)(dev))?
    };
    let n = q
        .strip_prefix(&format!("{dir}-"))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| format!("{q:?} is not {} {dir} queue ({dir}-0, {dir}-1, …)", if rps { "an" } else { "a" }))?;
    match dev_is {
        Dev::Lo if n >= 1 => {
            return Err(format!("lo of host {} has {}: {dir}-{n} does not exist", host.name, queues_phrase(1, dir)))
        }
        Dev::Link { queues, index, .. } if n >= queues => {
            return Err(format!(
                "{dev} of host {} has {}, as link[{index}].txqueues says: {dir}-{n} does not exist",
                host.name,
                queues_phrase(queues, dir)
            ))
        }
        _ => {}
    }
    let (cpus, groups) = cpumask(value, what)?;
    if let Some(&c) = cpus.iter().find(|&&c| c >= host.cpus) {
        return Err(format!("host {} has {}: cpu {c} does not exist", host.name, host.cpus_phrase()));
    }
    let most = host.cpus.div_ceil(32) as usize;
    if groups > most {
        return Err(format!(
            "{what} mask {value:?} has {groups} groups of 32 cpus; host {} has {}: the kernel takes at most {most}",
            host.name,
            host.cpus_phrase()
        ));
    }
    let dev = dev.to_string();
    Ok(if rps { SettingKind::RpsCpus { dev, rxq: n, cpus } } else { SettingKind::XpsCpus { dev, txq: n, cpus } })
}

/// The parameters of `ethtool -C` (ethtool 6.x, netlink/coalesce.c) other than the two
/// modelled ones: refused by name.
const ETHTOOL_C_OTHERS: [&str; 27] = [
    "adaptive-rx",
    "adaptive-tx",
    "sample-interval",
    "stats-block-usecs",
    "pkt-rate-low",
    "pkt-rate-high",
    "rx-frames",
    "rx-usecs-irq",
    "rx-frames-irq",
    "tx-frames",
    "tx-usecs-irq",
    "tx-frames-irq",
    "rx-usecs-low",
    "rx-frames-low",
    "tx-usecs-low",
    "tx-frames-low",
    "rx-usecs-high",
    "rx-frames-high",
    "tx-usecs-high",
    "tx-frames-high",
    "cqe-mode-rx",
    "cqe-mode-tx",
    "tx-aggr-max-bytes",
    "tx-aggr-max-frames",
    "tx-aggr-time-usecs",
    "rx-profile",
    "tx-profile",
];

/// The parameters of `ethtool -G` (netlink/rings.c) other than `rx` and `tx`.
const ETHTOOL_G_OTHERS: [&str; 9] = [
    "rx-mini",
    "rx-jumbo",
    "rx-buf-len",
    "cqe-size",
    "tx-push",
    "rx-push",
    "tx-push-buf-len",
    "tcp-data-split",
    "hds-thresh",
];

/// Descriptors per ring the simulated NIC takes (`ethtool -G`).
pub const RING_RANGE: (u32, u32) = (64, 8192);

/// `ethtool -C|-G|-K DEV …` (the words after `ethtool`), checked as ethtool and the
/// driver would check them; errors in ethtool's words where it has them.
fn ethtool_line(args: &[String], devs: &Devs) -> Result<SettingKind, String> {
    let Some(opt) = args.first().map(String::as_str) else {
        return Err(
            "ethtool: bad command line argument(s) (a script's ethtool lines are ethtool -C, -G or -K DEV …)".into()
        );
    };
    let (short, modelled) = match opt {
        "-C" | "--coalesce" => ("-C", "rx-usecs and tx-usecs are"),
        "-G" | "--set-ring" => ("-G", "rx and tx are"),
        "-K" | "--features" | "--offload" => ("-K", "tso, gso and gro are"),
        _ => return Err(format!("ethtool {opt}: not modelled (ethtool -C, -G and -K are)")),
    };
    let Some(dev) = args.get(1).map(String::as_str) else {
        return Err(format!("ethtool {opt} without a device (ethtool: bad command line argument(s))"));
    };
    let what = devs.get(dev)?;
    let params = &args[2..];
    let mut i = 0;
    // (the name as written, what it sets, its value)
    let mut got: Vec<(&str, &str, u64)> = Vec::new();
    while i < params.len() {
        let name = params[i].as_str();
        let key = match (short, name) {
            ("-C", "rx-usecs" | "tx-usecs") | ("-G", "rx" | "tx") => name,
            ("-K", "tso" | "tcp-segmentation-offload") => "tso",
            ("-K", "gso" | "generic-segmentation-offload") => "gso",
            ("-K", "gro" | "generic-receive-offload") => "gro",
            ("-C", n) if ETHTOOL_C_OTHERS.contains(&n) => {
                return Err(format!("ethtool {short} {dev} {n}: not modelled ({modelled})"))
            }
            ("-G", n) if ETHTOOL_G_OTHERS.contains(&n) => {
                return Err(format!("ethtool {short} {dev} {n}: not modelled ({modelled})"))
            }
            ("-K", n) => return Err(format!("ethtool {short} {dev} {n}: not modelled ({modelled})")),
            (_, n) => return Err(format!("ethtool ({short}): unknown parameter '{n}'")),
        };
        let value = params.get(i + 1).map(String::as_str);
        let v = if short == "-K" {
            match value {
                Some("on") => 1,
                Some("off") => 0,
                Some(v) => {
                    return Err(format!(
                        "ethtool ({short}): flag '{v}' for parameter '{name}' is not followed by 'on' or 'off'"
                    ))
                }
                None => return Err(format!("ethtool ({short}): parameter '{name}' is not followed by 'on' or 'off'")),
            }
        } else {
            let Some(v) = value else {
                return Err(format!("ethtool ({short}): no value for parameter '{name}'"));
            };
            // ethtool reads a u32 with strtoul's base 0 (0x… hex, a leading 0 octal).
            parse_c_int(v)
                .filter(|n| (0..=u32::MAX as i64).contains(n) && !v.starts_with('-'))
                .ok_or_else(|| format!("ethtool ({short}): invalid value '{v}' for parameter '{name}'"))?
                as u64
        };
        if got.iter().any(|(_, k, _)| *k == key) {
            return Err(format!("ethtool {short} {dev} {name}: {key} is given twice"));
        }
        got.push((name, key, v));
        i += 2;
    }
    if got.is_empty() {
        let takes = match short {
            "-C" => "rx-usecs N, tx-usecs N",
            "-G" => "rx N, tx N",
            _ => "tso, gso, gro on|off",
        };
        return Err(format!("ethtool {short} {dev}: nothing to set ({takes})"));
    }
    let get = |k: &str| got.iter().find(|(_, key, _)| *key == k).map(|(_, _, v)| *v);
    let dev_s = dev.to_string();
    match short {
        "-C" => {
            let unsupported = match what {
                Dev::Lo => Some("lo has no interrupt coalescing (ethtool: Operation not supported)".to_string()),
                Dev::Link { index, link, .. } => match (link.kind, link.veth_bql) {
                    (LinkKind::Eth, _) => None,
                    (LinkKind::VethPair, VethBql::Time) => {
                        if get("rx-usecs").is_some() {
                            return Err(format!(
                                "ethtool -C {dev} rx-usecs: {}, veth_bql = \"time\": it takes tx-usecs only (the BQL \
                                 series' completion interval, VETH_BQL_COAL_TX_USECS); veth has no rx coalescing",
                                veth_phrase(dev, index, link)
                            ));
                        }
                        None
                    }
                    (LinkKind::VethPair, bql) => Some(format!(
                        "{}, veth_bql = {:?}: veth has no interrupt coalescing (ethtool: Operation not supported); \
                         only veth_bql = \"time\" gives it tx-usecs",
                        veth_phrase(dev, index, link),
                        bql.name()
                    )),
                    (LinkKind::Veth, _) => Some(format!(
                        "{}: veth has no interrupt coalescing (ethtool: Operation not supported)",
                        veth_phrase(dev, index, link)
                    )),
                },
            };
            if let Some(why) = unsupported {
                return Err(format!("ethtool -C {dev}: {why}"));
            }
            let u = |k| get(k).map(|v| v as u32);
            Ok(SettingKind::Coalesce { dev: dev_s, rx_usecs: u("rx-usecs"), tx_usecs: u("tx-usecs") })
        }
        "-G" => {
            match what {
                Dev::Lo => return Err(format!("ethtool -G {dev}: lo has no rings (ethtool: Operation not supported)")),
                Dev::Link { index, link, .. } if link.kind != LinkKind::Eth => {
                    return Err(format!(
                        "ethtool -G {dev}: {}: veth has no rings to size (ethtool: Operation not supported)",
                        veth_phrase(dev, index, link)
                    ))
                }
                Dev::Link { .. } => {}
            }
            let (lo, hi) = RING_RANGE;
            for (name, _, v) in &got {
                if !(lo as u64..=hi as u64).contains(v) {
                    return Err(format!(
                        "ethtool -G {dev} {name} {v}: the simulated NIC's rings take {lo} to {hi} descriptors"
                    ));
                }
            }
            let u = |k| get(k).map(|v| v as u32);
            Ok(SettingKind::Rings { dev: dev_s, rx: u("rx"), tx: u("tx") })
        }
        _ => {
            let b = |k| get(k).map(|v| v == 1);
            Ok(SettingKind::Features { dev: dev_s, tso: b("tso"), gso: b("gso"), gro: b("gro") })
        }
    }
}

/// Words of `ip link set` (iproute2 6.15, ip/iplink.c `iplink_parse`) other than `dev`,
/// `mtu` and the queue length: refused by name.
const IP_LINK_OTHERS: [&str; 38] = [
    "up",
    "down",
    "name",
    "index",
    "link",
    "address",
    "broadcast",
    "brd",
    "peer",
    "netns",
    "link-netns",
    "link-netnsid",
    "arp",
    "multicast",
    "allmulticast",
    "promisc",
    "trailers",
    "dynamic",
    "carrier",
    "alias",
    "vf",
    "master",
    "nomaster",
    "vrf",
    "mode",
    "state",
    "group",
    "type",
    "xdp",
    "numtxqueues",
    "numrxqueues",
    "addrgenmode",
    "protodown",
    "protodown_reason",
    "gso_max_size",
    "gso_max_segs",
    "gro_max_size",
    "parentdev",
];

/// `ip link set [dev] DEV mtu N txqueuelen N` (the words after `ip`), parsed as iproute2
/// parses it: `set` or `change`, and the object and verbs by prefix (`ip l s`); `dev`
/// by prefix; the queue length as `txqueuelen` or a prefix of it, `txqlen` or `qlen`.
/// Errors in ip's words where it has them.
fn ip_line(args: &[String], devs: &Devs) -> Result<SettingKind, String> {
    const FORM: &str = "a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX \
                        [via GW] dev DEV realms [FROM/]TO";
    let prefix_of = |w: &str, word: &str| !w.is_empty() && word.starts_with(w);
    let Some(obj) = args.first().map(String::as_str) else {
        return Err(format!("ip without a command ({FORM})"));
    };
    if obj.starts_with('-') {
        if matches!(obj, "-n" | "-b" | "-batch") || prefix_of(obj.trim_start_matches('-'), "netns") {
            return Err(format!("option {obj:?} is not allowed: each script runs in its host's namespace"));
        }
        return Err(format!("ip option {obj:?} is not supported ({FORM})"));
    }
    if prefix_of(obj, "route") {
        return ip_route_line(&args[1..], devs);
    }
    if prefix_of(obj, "rule") {
        return Err(format!(
            "ip {obj}: not modelled: policy routing (and the realms an `ip rule … realms` gives) has no \
             counterpart here; an ip route line sets a route's realms ({FORM})"
        ));
    }
    if !prefix_of(obj, "link") {
        return Err(format!("ip {obj}: not modelled ({FORM})"));
    }
    let Some(verb) = args.get(1).map(String::as_str) else {
        return Err(format!("ip {obj} without a command ({FORM})"));
    };
    if !(prefix_of(verb, "set") || prefix_of(verb, "change")) {
        return Err(format!("ip link {verb}: not modelled ({FORM})"));
    }
    let words = &args[2..];
    // The mtu as read (an int) and as written.
    let (mut dev, mut mtu, mut qlen): (Option<&str>, Option<(i64, &str)>, Option<u32>) = (None, None, None);
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let value = |at: usize| {
            words
                .get(at)
                .map(String::as_str)
                .ok_or_else(|| "Command line is not complete. Try option \"help\"".to_string())
        };
        if w == "mtu" {
            let v = value(i + 1)?;
            if mtu.is_some() {
                return Err(format!("Error: duplicate \"mtu\": \"{v}\" is the second value."));
            }
            // get_integer(…, 0): an int, strtol's base 0.
            let n = parse_c_int(v)
                .filter(|n| (i32::MIN as i64..=i32::MAX as i64).contains(n))
                .ok_or_else(|| format!("Error: argument \"{v}\" is wrong: Invalid \"mtu\" value"))?;
            mtu = Some((n, v));
            i += 2;
        } else if prefix_of(w, "txqueuelen") || w == "qlen" || prefix_of(w, "txqlen") {
            let v = value(i + 1)?;
            if qlen.is_some() {
                return Err(format!("Error: duplicate \"txqueuelen\": \"{v}\" is the second value."));
            }
            let n = parse_c_int(v).filter(|n| (0..=i32::MAX as i64).contains(n)).ok_or_else(|| {
                format!("Error: argument \"{v}\" is wrong: Invalid \"txqueuelen\" value (ip takes 0 to 2147483647)")
            })?;
            qlen = Some(n as u32);
            i += 2;
        } else if IP_LINK_OTHERS.contains(&w) || w.starts_with("xdp") || w.starts_with("gso_") || w.starts_with("gro_")
        {
            let d = dev.map(|d| format!(" {d}")).unwrap_or_default();
            return Err(format!("ip link set{d} {w}: not modelled (mtu and txqueuelen are)"));
        } else {
            let name = if prefix_of(w, "dev") {
                i += 1;
                value(i)?
            } else {
                w
            };
            if dev.is_some() {
                return Err(format!("Error: either \"dev\" is duplicate, or \"{name}\" is a garbage."));
            }
            dev = Some(name);
            i += 1;
        }
    }
    let Some(dev) = dev else {
        return Err("Not enough information: \"dev\" argument is required.".into());
    };
    let what = devs.get(dev)?;
    if mtu.is_none() && qlen.is_none() {
        return Err(format!("ip link set {dev}: nothing to set (mtu N, txqueuelen N)"));
    }
    if let Some((n, v)) = mtu {
        if !(68..=65535).contains(&n) {
            // A veth's and an Ethernet NIC's min_mtu/max_mtu: ETH_MIN_MTU, ETH_MAX_MTU
            // (the kernel's extack: "mtu less than device minimum").
            let why = match what {
                Dev::Lo => "the scenario takes 68 to 65535 for lo too (below 68 lo would lose IPv4)",
                Dev::Link { .. } if n < 68 => "mtu less than device minimum (the kernel takes 68 to 65535)",
                Dev::Link { .. } => "mtu greater than device maximum (the kernel takes 68 to 65535)",
            };
            return Err(format!("ip link set {dev} mtu {v}: {why}"));
        }
    }
    let mtu = mtu.map(|(n, _)| n as u32);
    Ok(SettingKind::IpLink { dev: dev.to_string(), mtu, txqueuelen: qlen })
}

/// `ip route change|replace PREFIX [via GW] dev DEV realms [FROM/]TO` (the words
/// after `ip route`), as ip/iproute.c's `iproute_modify` reads them (`realm` and other
/// prefixes of `realms`; the value by `get_rt_realms_or_raw`), restating a route the
/// host has ([`host_route`]) with realms: routes themselves are the scenario's.
fn ip_route_line(args: &[String], devs: &Devs) -> Result<SettingKind, String> {
    const FORM: &str = "ip route change PREFIX [via GW] dev DEV realms [FROM/]TO, restating a route the host has";
    let prefix_of = |w: &str, word: &str| !w.is_empty() && word.starts_with(w);
    let Some(verb) = args.first().map(String::as_str) else {
        return Err(format!("ip route without a command ({FORM})"));
    };
    if !(prefix_of(verb, "change") || verb == "chg" || prefix_of(verb, "replace")) {
        return Err(format!(
            "ip route {verb}: not modelled: the routes are the scenario's shortest paths; only their realms can be \
             set ({FORM})"
        ));
    }
    let (mut prefix, mut via, mut dev, mut realms) = (None, None, None, None);
    let mut i = 1;
    while i < args.len() {
        let w = args[i].as_str();
        let value = || {
            args.get(i + 1)
                .map(String::as_str)
                .ok_or_else(|| "Command line is not complete. Try option \"help\"".to_string())
        };
        if w == "via" {
            via = Some(value()?);
        } else if w == "dev" || w == "oif" {
            dev = Some(value()?);
        } else if prefix_of(w, "realms") {
            let v = value()?;
            realms = Some(rt_realms_or_raw(v).ok_or_else(|| {
                format!("Error: argument \"{v}\" is wrong: \"realm\" value is invalid\n").trim_end().to_string()
            })?);
        } else if prefix.is_none() && !w.starts_with('-') && w.contains('.') {
            prefix = Some(w);
            i += 1;
            continue;
        } else {
            return Err(format!("ip route {verb} {w}: not modelled ({FORM})"));
        }
        i += 2;
    }
    let Some(prefix) = prefix else { return Err(format!("ip route {verb}: no prefix ({FORM})")) };
    let link = (0..devs.links.len()).find(|&l| format!("10.{}.0.0/24", l + 1) == prefix).ok_or_else(|| {
        format!("ip route {verb} {prefix}: not a route of this host: its routes are to the links' subnets 10.N.0.0/24")
    })?;
    let r = host_route(devs.links, &devs.host.name, link)
        .ok_or_else(|| format!("ip route {verb} {prefix}: host {} has no route there", devs.host.name))?;
    let Some(dev) = dev else { return Err(format!("ip route {verb} {prefix}: give its dev ({FORM})")) };
    let has = match &r.via {
        Some(gw) => format!("{prefix} via {gw} dev {}", r.dev),
        None => format!("{prefix} dev {} (connected)", r.dev),
    };
    if dev != r.dev || via != r.via.as_deref() {
        return Err(format!(
            "ip route {verb} {prefix}: the host's route is {has}: a line may only add realms to it, not move it"
        ));
    }
    let Some(realms) = realms else { return Err(format!("ip route {verb} {prefix}: no realms to set ({FORM})")) };
    Ok(SettingKind::IpRoute { link, realms })
}

/// iproute2's `get_rt_realms_or_raw`: `[FROM/]TO` by realm names or numbers (0–255),
/// else a raw 32-bit number (base 0).
fn rt_realms_or_raw(v: &str) -> Option<u32> {
    use qdisc::classify::route::realm_parse;
    let realms = match v.split_once('/') {
        Some((f, t)) => {
            realm_parse(f).and_then(|f| if t.is_empty() { Some(f << 16) } else { Some(f << 16 | realm_parse(t)?) })
        }
        None if v.is_empty() => Some(0),
        None => realm_parse(v),
    };
    realms.or_else(|| qdisc::tc::units::get_u32(v))
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

/// A time in tc units without rounding.
fn exact_time(ns: u64) -> String {
    if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1000) {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}
