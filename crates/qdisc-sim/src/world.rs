//! The simulated network: hosts with their qdisc trees, interfaces, links, routes, the
//! packets in flight, and the event loop that moves time forward.
//!
//! Every host owns an in-memory `tc` ([`qdisc::tc::Tc`]) whose devices are the host's
//! link interfaces (plus `lo`); the host's scenario script is run through it line by
//! line, exactly as the kernel lab runs it through real tc. Interfaces are NICs
//! (`kind eth`): a wire at the link's rate, tx queues with a driver ring and BQL
//! (see `xmit.rs`); or veth pairs through a bridge (`kind veth`), built as the kernel
//! lab builds them — a pseudo-host `link[i]` holds the two bridge ports `l<i>a` and
//! `l<i>b`, whose tbf realises the link's rate. Every hop is a one-way direction: a
//! FIFO of frames with their arrival times, so frames never travel through the
//! event heap.
//!
//! Packets carry only what the qdiscs read (`qdisc::Packet`); what the endpoints need
//! (TCP sequence numbers, ping sequence …) lives in a side table indexed by the
//! packet's `id`. A packet dropped inside a qdisc leaves its entry behind; entries
//! are small and the table is freed with the run.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use qdisc::dql::Dql;
use qdisc::tc::{Tc, TcOpts};
use qdisc::tree::{DevKind, DevSpec, KernelVersion};
use qdisc::{FlowKey, Instant, Packet, Socket};
use qdisc_scenario::backend::RunError;
use qdisc_scenario::scenario::{LinkKind, Scenario, TrafficKind};

use crate::apps::{PingApp, TcpFlow, UdpApp};
use crate::cpu::{HostCpus, Work};
use crate::event::{Ev, Events};
use crate::rng::Rng;
use crate::tcp;

/// Bytes a frame occupies on an Ethernet wire beyond what the qdisc counts
/// (preamble + start delimiter 8, FCS 4, inter-frame gap 12).
pub const ETH_WIRE_OVERHEAD: u32 = 24;
/// Descriptors of a driver's tx ring (per tx queue); BQL normally stops the queue
/// long before the ring fills.
pub const TX_RING: u32 = 1024;
/// `dev_tx_weight`: packets one `__qdisc_run` may send before yielding.
pub const QDISC_QUOTA: u32 = 64;
/// Descriptors of a NIC's rx ring per queue: what arrives while it is full is
/// dropped by the NIC (`rx_discards_phy`).
pub const RX_RING: u32 = 1024;
/// Events at one instant after which the run is declared a livelock.
pub const LIVELOCK_EVENTS: u64 = 10_000_000;

/// What a packet is, for its endpoints.
#[derive(Clone, Debug)]
pub enum Payload {
    Tcp { flow: u32, seg: tcp::Segment },
    TcpAck { flow: u32, ack: tcp::Ack },
    Udp { app: u32, seq: u64, sent_at: Instant },
    Ping { app: u32, seq: u64, sent_at: Instant, reply: bool },
}

#[derive(Clone, Debug)]
pub struct Meta {
    pub src: u32,
    pub dst: u32,
    pub payload: Payload,
}

pub struct Host {
    pub name: String,
    pub tc: Tc,
    /// Interface index (into `Sim::ifaces`) per device of `tc`, `None` for `lo`.
    pub ifaces: Vec<Option<u32>>,
    /// Next-hop interface towards each host (by host index); `None` for itself.
    pub route: Vec<Option<u32>>,
    /// Its CPUs (scenario hosts); `None` for the kernel lab's wire, which is not
    /// part of either host and moves packets at no CPU cost.
    pub cpu: Option<HostCpus>,
}

pub struct TxQueue {
    pub dql: Dql,
    /// Stopped by BQL (`__QUEUE_STATE_STACK_XOFF`).
    pub stopped: bool,
    /// Descriptors in use in the ring.
    pub in_ring: u32,
    /// A watchdog event is pending for this instant.
    pub watchdog: Option<Instant>,
    /// A NET_TX softirq run is pending.
    pub net_tx: bool,
    /// The qdisc of this queue (queue 0 for a shared root): `__QDISC_STATE_RUNNING`,
    /// `__QDISC_STATE_MISSED` and its locks (on hosts with CPUs).
    pub running: bool,
    pub missed: bool,
    pub root_lock: u32,
    pub busylock: u32,
    /// pfifo_fast's band ring producer lock (`TCQ_F_NOLOCK`).
    pub producer_lock: u32,
    /// The tx queue's `_xmit_lock`.
    pub xmit_lock: u32,
    /// Cache lines: the qdisc's state word (RUNNING/MISSED of a NOLOCK qdisc, read by
    /// every sender) and pfifo_fast's band rings.
    pub state_line: u32,
    pub ring_line: u32,
    /// The CPU that armed the watchdog (its hrtimer fires there).
    pub last_cpu: u32,
    /// Frames off the wire whose completion the driver has not processed yet, and
    /// whether its TX poll is scheduled (hosts with CPUs).
    pub completed: VecDeque<Packet>,
    pub tx_poll: bool,
    /// The function rows and costs of this queue's qdisc (`Funcs::kind`), found at
    /// first use: the tree does not change while traffic runs.
    pub qcost: Option<(u16, u16, u64, u64)>,
    /// A packet a shared root dequeued for a stopped tx queue, sent first when it
    /// wakes (`dev_requeue_skb`; not counted in the qdisc's stats here).
    pub requeued: Option<Packet>,
}

pub struct Iface {
    pub host: u32,
    pub name: String,
    /// Index of the device in the host's `tc`.
    pub dev: usize,
    /// Link direction it transmits onto.
    pub out: u32,
    /// Wire rate, bytes per second; `None`: no rate of its own.
    pub rate: Option<u64>,
    /// A veth: no TSO split (GSO skbs cross whole), no Ethernet framing on its "wire".
    pub veth: bool,
    /// A bridge port: what arrives here leaves through this other port.
    pub bridge: Option<u32>,
    pub txqs: Vec<TxQueue>,
    /// Frames handed to the driver, in order, with their tx queue.
    pub ring: VecDeque<(u32, Packet)>,
    /// The frame on the wire and when its serialisation began.
    pub on_wire: Option<(u32, Packet, Instant)>,
    /// XPS: the tx queues of each CPU of the host (empty: no map for that CPU).
    pub xps: Vec<Vec<u32>>,
    /// Each rx queue's ring: packets waiting for NAPI (hosts with CPUs), and whether
    /// its NAPI poll is scheduled.
    pub rx_ring: Vec<(VecDeque<Packet>, bool)>,
    /// Frames the NIC dropped because the ring was full (`rx_discards_phy`).
    pub rx_discards: u64,
}

/// One direction of a link.
pub struct LinkDir {
    pub to: u32,
    pub delay: u64,
    /// Loss probability (0–1).
    pub loss: f64,
    pub frames: VecDeque<(Instant, Packet)>,
    /// Frames lost on this direction.
    pub lost: u64,
}

pub struct Sim {
    pub now: Instant,
    pub end: Instant,
    pub events: Events,
    pub hosts: Vec<Host>,
    pub ifaces: Vec<Iface>,
    pub dirs: Vec<LinkDir>,
    pub metas: Vec<Option<Meta>>,
    free_metas: Vec<u64>,
    pub rng: Rng,
    pub tcp: Vec<TcpFlow>,
    pub udp: Vec<UdpApp>,
    pub ping: Vec<PingApp>,
    /// tc's warnings while applying the scripts.
    pub warnings: Vec<String>,
    /// Packets that went through any interface's transmit path.
    pub packets: u64,
    /// The CPU whose work is executing (host, cpu), while a CPU runs a step.
    pub on_cpu: Option<(u32, u32)>,
    /// CPU time spent by synchronous work inside the running step (TCP output).
    pub inline_ns: u64,
    /// `sk_tx_queue_get`: the tx queue cached in a socket, per (socket, interface).
    pub sk_txq: HashMap<(u64, u32), u32>,
    /// Idle CPUs given work at the current instant: they run when the current event
    /// has been handled (`Sim::run`).
    pub ready: Vec<(u32, u32)>,
}

/// The address of `host` on the interfaces of link `li` (see `Scenario::address_on`),
/// as an IPv4-mapped IPv6 address (the engine's flow-key format).
pub fn addr(s: &Scenario, li: usize, host: &str) -> [u8; 16] {
    let v4: Vec<u8> = s.address_on(li, host).split('.').map(|x| x.parse().expect("dotted quad")).collect();
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&v4);
    a
}

/// The qdisc of a veth link's bridge port, as the kernel lab sets it
/// (`qdisc_kernel::host::lab::wire_qdisc`): tbf at the rate, or — where the lab uses
/// netem for delay/loss — a pfifo of netem's limit (twice the packets in flight at the
/// rate over the delay + 50 ms, at least 1000) in front of a port serialising at the rate.
fn wire_qdisc(l: &qdisc_scenario::scenario::Link, dev: &str) -> Vec<String> {
    let mut a: Vec<String> = ["qdisc", "add", "dev", dev, "root", "handle", "1:"].map(String::from).to_vec();
    if l.wire_needs_netem() {
        a.extend(["pfifo".into(), "limit".into(), l.wire_netem_limit().to_string()]);
    } else {
        let rate = l.rate.unwrap_or(0);
        a.extend(["tbf".into(), "rate".into(), format!("{}bit", rate * 8), "burst".into()]);
        a.extend([l.wire_tbf_burst().to_string(), "latency".into(), "50ms".into()]);
    }
    a
}

/// The `net.core.default_qdisc` a host's script sets before its first tc command (the
/// last such line), as if set at boot: the host's devices come up with it. With the
/// error to report if the engine refuses it.
fn default_qdisc<'a>(s: &'a Scenario, host: &str) -> Option<(&'a str, impl FnOnce(String) -> RunError + 'a)> {
    use qdisc_scenario::scenario::SettingKind;
    let script = s.tc_of(host)?;
    let st = script.settings.iter().rev().find(|st| {
        at_boot(script, st) && matches!(&st.kind, SettingKind::Sysctl { key, .. } if key == "net.core.default_qdisc")
    })?;
    let SettingKind::Sysctl { value, .. } = &st.kind else { unreachable!() };
    Some((value.as_str(), move |e: String| RunError::TcScript {
        at: format!("{}:{}", s.file, st.line),
        host: script.host.clone(),
        command: st.text.clone(),
        stderr: e,
        hint: None,
    }))
}

/// A setting before its script's first tc command: the simulator applies it as set
/// at boot (see [`default_qdisc`]).
fn at_boot(script: &qdisc_scenario::scenario::TcScript, st: &qdisc_scenario::scenario::Setting) -> bool {
    script.lines.first().is_none_or(|l| st.line < l.line)
}

/// The smallest round trip between two hosts, as a handshake would measure it:
/// propagation both ways plus the serialisation of a SYN-sized frame on every hop
/// (at least 1 µs).
pub fn path_rtt(s: &Scenario, from: &str, to: &str) -> u64 {
    let path = s.path(from, to).expect("validated route");
    path.iter()
        .map(|&(li, _)| {
            let l = &s.links[li];
            2 * (l.delay + l.rate.map_or(0, |r| crate::xmit::wire_ns(74 + ETH_WIRE_OVERHEAD as u64, r)))
        })
        .sum::<u64>()
        .max(1000)
}

/// Hosts, interfaces and link directions while a network is put together.
#[derive(Default)]
struct Builder {
    names: Vec<String>,
    specs: Vec<Vec<DevSpec>>,
    map: Vec<Vec<Option<u32>>>,
    ifaces: Vec<Iface>,
    dirs: Vec<LinkDir>,
}

impl Builder {
    fn host(&mut self, name: &str) -> u32 {
        self.names.push(name.into());
        self.specs.push(Vec::new());
        self.map.push(Vec::new());
        self.names.len() as u32 - 1
    }

    /// An interface of host `h`: `rate` is its wire rate, `speed` what sysfs reports.
    fn iface(&mut self, h: u32, name: &str, veth: bool, rate: Option<u64>, speed: Option<u64>) -> u32 {
        let mut d = DevSpec::new(name);
        d.kind = if veth { DevKind::Veth } else { DevKind::Eth };
        d.speed = if veth { Some(10_000) } else { speed.map(|r| (r * 8 / 1_000_000).min(u32::MAX as u64) as u32) };
        let specs = &mut self.specs[h as usize];
        specs.push(d);
        let id = self.ifaces.len() as u32;
        self.map[h as usize].push(Some(id));
        self.ifaces.push(Iface {
            host: h,
            name: name.into(),
            dev: specs.len() - 1,
            out: u32::MAX,
            rate,
            veth,
            bridge: None,
            txqs: Vec::new(),
            ring: VecDeque::new(),
            on_wire: None,
            xps: Vec::new(),
            rx_ring: Vec::new(),
            rx_discards: 0,
        });
        id
    }

    /// Frames sent by `from` reach `to` after `delay`, each lost with probability `loss`.
    fn connect(&mut self, from: u32, to: u32, delay: u64, loss: f64) {
        self.ifaces[from as usize].out = self.dirs.len() as u32;
        self.dirs.push(LinkDir { to, delay, loss, frames: VecDeque::new(), lost: 0 });
    }
}

impl Sim {
    /// Build the network of a scenario and apply every host's tc script.
    pub fn new(s: &Scenario, kernel: KernelVersion) -> Result<Sim, RunError> {
        let host_ix = |name: &str| s.hosts.iter().position(|h| h.name == name).expect("validated host") as u32;
        let mut net = Builder::default();
        // Every scenario host, its link interfaces in link order, then lo.
        for h in &s.hosts {
            let hi = net.host(&h.name);
            for l in &s.links {
                for ep in [&l.a, &l.b] {
                    if ep.host == h.name {
                        let veth = l.kind == LinkKind::Veth;
                        // A NIC's wire rate is the link's; a veth has none.
                        net.iface(hi, &ep.iface, veth, if veth { None } else { l.rate }, l.rate);
                        net.specs[hi as usize].last_mut().expect("just added").txqueues = l.txqueues;
                    }
                }
            }
            net.specs[hi as usize].push(DevSpec { kind: DevKind::Veth, ..DevSpec::new("lo") });
            net.map[hi as usize].push(None);
        }
        let find = |net: &Builder, host: &str, iface: &str| {
            let h = host_ix(host);
            net.ifaces.iter().position(|i| i.host == h && i.name == iface).unwrap() as u32
        };
        let mut wires = Vec::new();
        for (li, l) in s.links.iter().enumerate() {
            let (a, b) = (find(&net, &l.a.host, &l.a.iface), find(&net, &l.b.host, &l.b.iface));
            let loss = l.loss / 100.0;
            match l.kind {
                LinkKind::Eth => {
                    net.connect(a, b, l.delay, loss);
                    net.connect(b, a, l.delay, loss);
                }
                LinkKind::Veth => {
                    // As the kernel lab builds it: each veth's peer is a port of a bridge
                    // in a wire namespace; the port facing the receiver shapes and the
                    // propagation delay and loss follow it. Without delay or loss the
                    // lab shapes with tbf; with them, netem's rate and packet limit
                    // (netem is not in the engine yet: a pfifo of netem's limit on a
                    // port that serialises at the rate, without framing overhead).
                    let w = net.host(&format!("link[{li}]"));
                    let netem = l.wire_needs_netem();
                    let port_rate = if netem { l.rate } else { None };
                    let (pa, pb) = (
                        net.iface(w, &format!("l{li}a"), true, port_rate, None),
                        net.iface(w, &format!("l{li}b"), true, port_rate, None),
                    );
                    // The wire namespace's bridge forwards on some CPU of the machine:
                    // a latency of the sending host's profile (it is no host's CPU here).
                    let bridge = |host: &str| s.host(host).map_or(0, |h| h.profile.cost.bridge_forward.ns);
                    net.connect(a, pa, bridge(&l.a.host), 0.0);
                    net.connect(b, pb, bridge(&l.b.host), 0.0);
                    net.connect(pb, b, l.delay, loss);
                    net.connect(pa, a, l.delay, loss);
                    net.ifaces[pa as usize].bridge = Some(pb);
                    net.ifaces[pb as usize].bridge = Some(pa);
                    if l.rate.is_some() || netem {
                        wires.push((w, li, l));
                    }
                }
            }
        }
        let mut hosts: Vec<Host> = Vec::new();
        for (hi, name) in net.names.iter().enumerate() {
            let tc = match default_qdisc(s, name) {
                // As on a host that booted with the sysctl set (its devices came up after).
                Some((kind, fail)) => Tc::with_default_qdisc(&net.specs[hi], kernel, kind).map_err(fail)?,
                None => Tc::with_kernel(&net.specs[hi], kernel),
            };
            let cpu = s.hosts.get(hi).map(|h| HostCpus::new(h.cpus, &h.profile));
            hosts.push(Host { name: name.clone(), tc, ifaces: net.map[hi].clone(), route: Vec::new(), cpu });
        }
        for (w, li, l) in wires {
            for port in [format!("l{li}a"), format!("l{li}b")] {
                let args = wire_qdisc(l, &port);
                let out = hosts[w as usize].tc.exec(&args, TcOpts::default());
                if out.code != 0 {
                    return Err(RunError::Failed(format!("link[{li}]: tc {}: {}", args.join(" "), out.stderr)));
                }
            }
        }
        let (ifaces, dirs) = (net.ifaces, net.dirs);
        // Routes: the first link of the scenario's shortest path.
        for (hi, h) in s.hosts.iter().enumerate() {
            let mut route = Vec::new();
            for other in &s.hosts {
                route.push(s.path(&h.name, &other.name).and_then(|p| p.first().copied()).map(|(li, from_b)| {
                    let ep = if from_b { &s.links[li].b } else { &s.links[li].a };
                    ifaces.iter().position(|i| i.host == hi as u32 && i.name == ep.iface).unwrap() as u32
                }));
            }
            hosts[hi].route = route;
        }
        let mut sim = Sim {
            now: Instant::ZERO,
            end: Instant::from_nanos(s.duration),
            events: Events::default(),
            hosts,
            ifaces,
            dirs,
            metas: Vec::new(),
            free_metas: Vec::new(),
            rng: Rng::new(s.seed),
            tcp: Vec::new(),
            udp: Vec::new(),
            ping: Vec::new(),
            warnings: Vec::new(),
            packets: 0,
            on_cpu: None,
            inline_ns: 0,
            sk_txq: HashMap::new(),
            ready: Vec::new(),
        };
        sim.apply_scripts(s)?;
        for i in 0..sim.ifaces.len() {
            let n = sim.device(i as u32).info.num_tx_queues.max(1);
            let h = sim.ifaces[i].host;
            let name = sim.ifaces[i].name.clone();
            let cpu = &mut sim.hosts[h as usize].cpu;
            let mut new_lines: Vec<u32> = Vec::new();
            if let Some(c) = cpu.as_mut() {
                new_lines = (0..2 * n).map(|_| c.line()).collect();
            }
            let mut next_line = new_lines.into_iter();
            let mut line = || next_line.next().unwrap_or(0);
            let mut lock = |what: String| sim.hosts[h as usize].cpu.as_mut().map_or(0, |c| c.lock(what));
            let txqs: Vec<TxQueue> = (0..n)
                .map(|q| TxQueue {
                    dql: Dql::new(Instant::ZERO),
                    stopped: false,
                    in_ring: 0,
                    watchdog: None,
                    net_tx: false,
                    running: false,
                    missed: false,
                    root_lock: lock(format!("{name} tx-{q} qdisc root lock")),
                    busylock: lock(format!("{name} tx-{q} qdisc busylock")),
                    producer_lock: lock(format!("{name} tx-{q} pfifo_fast producer lock")),
                    xmit_lock: lock(format!("{name} tx-{q} _xmit_lock")),
                    state_line: line(),
                    ring_line: line(),
                    last_cpu: 0,
                    requeued: None,
                    completed: VecDeque::new(),
                    tx_poll: false,
                    qcost: None,
                })
                .collect();
            sim.ifaces[i].txqs = txqs;
            sim.ifaces[i].rx_ring = (0..n).map(|_| (VecDeque::new(), false)).collect();
        }
        sim.default_xps(s);
        sim.add_traffic(s, &host_ix)?;
        sim.events.at(Instant::ZERO, Ev::Sample);
        Ok(sim)
    }

    /// Each host's script in file order: tc commands through the host's tc, and the
    /// settings the simulator models — sysctls (`net.core.default_qdisc` as on a
    /// running kernel: for qdiscs attached from then on; before the script's first tc
    /// command it acts as set at boot, see [`default_qdisc`]) and XPS maps
    /// ([`Sim::default_xps`] reads those).
    fn apply_scripts(&mut self, s: &Scenario) -> Result<(), RunError> {
        use qdisc_scenario::scenario::{ScriptItem, SettingKind};
        for script in &s.tc {
            let h = self.hosts.iter().position(|h| h.name == script.host).expect("validated host");
            for item in script.in_order() {
                let (line, text, result) = match item {
                    ScriptItem::Tc(line) => {
                        let out = self.hosts[h].tc.exec(&line.args, TcOpts::default());
                        for w in out.stderr.lines().filter(|l| !l.trim().is_empty() && out.code == 0) {
                            self.warnings
                                .push(format!("{}:{}: host {}: tc {}: {w}", s.file, line.line, script.host, line.text));
                        }
                        (line.line, &line.text, if out.code == 0 { Ok(()) } else { Err(out.stderr) })
                    }
                    ScriptItem::Setting(st) => {
                        let r = match &st.kind {
                            SettingKind::Sysctl { key, value } => {
                                let boot = at_boot(script, st);
                                self.apply_sysctl(h, key, value, boot)
                            }
                            SettingKind::XpsCpus { .. } => Ok(()),
                        };
                        (st.line, &st.text, r)
                    }
                };
                if let Err(stderr) = result {
                    return Err(RunError::TcScript {
                        at: format!("{}:{}", s.file, line),
                        host: script.host.clone(),
                        command: text.clone(),
                        stderr,
                        hint: None,
                    });
                }
            }
        }
        Ok(())
    }

    /// A sysctl of host `h` the simulator models (the loader accepts only known keys
    /// with values in the kernel's ranges).
    fn apply_sysctl(&mut self, h: usize, key: &str, value: &str, boot: bool) -> Result<(), String> {
        let host = &mut self.hosts[h];
        let cpu = host.cpu.as_mut().expect("scenario hosts have CPUs");
        let int = || value.parse::<i64>().map_err(|e| format!("{value}: {e}"));
        match key {
            // Set at boot, it was applied when the host's devices were built.
            "net.core.default_qdisc" if boot => {}
            "net.core.default_qdisc" => host.tc.set_default_qdisc(value)?,
            "net.core.dev_weight" => cpu.dev_weight = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.dev_weight_tx_bias" => cpu.tx_bias = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.netdev_budget" => cpu.budget = int()?.clamp(1, u32::MAX as i64) as u32,
            // netdev_budget_usecs, netdev_max_backlog, dev_weight_rx_bias: the receive
            // side they bound is not modelled at that grain yet.
            _ => {}
        }
        // dev_tx_weight = dev_weight × dev_weight_tx_bias (proc_do_dev_weight).
        cpu.tx_quota = cpu.dev_weight.saturating_mul(cpu.tx_bias).max(1);
        Ok(())
    }

    fn add_traffic(&mut self, s: &Scenario, host_ix: &dyn Fn(&str) -> u32) -> Result<(), RunError> {
        // Where the scheduler puts threads that are not pinned: round robin over the
        // host's CPUs from a place that follows the scenario's seed.
        let mut free: Vec<u64> =
            (0..self.hosts.len() as u64).map(|h| Rng::new(s.seed ^ (h << 32)).next_u64()).collect();
        let mut place = |sim: &Sim, h: u32, pins: &Option<Vec<u32>>, k: usize| -> u32 {
            let n = sim.hosts[h as usize].cpu.as_ref().map_or(1, |c| c.cpus.len()) as u64;
            match pins {
                Some(list) if !list.is_empty() => list[k % list.len()],
                _ => {
                    free[h as usize] += 1;
                    (free[h as usize] % n) as u32
                }
            }
        };
        for (ti, t) in s.traffic.iter().enumerate() {
            let (src, dst) = (host_ix(&t.from), host_ix(&t.to));
            let path = s.path(&t.from, &t.to).expect("validated route");
            let key = |sport: u16, dport: u16, proto: u8| FlowKey {
                src: addr(s, path[0].0, &t.from),
                dst: addr(s, path[path.len() - 1].0, &t.to),
                sport,
                dport,
                proto,
            };
            let start = Instant::from_nanos(t.start);
            let end = Instant::from_nanos(t.start + t.duration);
            match &t.kind {
                TrafficKind::Tcp { flows, cc } => {
                    let cc = match cc.as_str() {
                        "cubic" => tcp::CongestionControl::Cubic,
                        "reno" => tcp::CongestionControl::Reno,
                        other => {
                            return Err(RunError::Unsupported(format!(
                                "traffic[{ti}]: the simulator models cubic and reno, not {other:?} (use --backend host or vm)"
                            )))
                        }
                    };
                    let base_rtt = path_rtt(s, &t.from, &t.to);
                    for stream in 0..*flows {
                        let id = self.tcp.len() as u32;
                        // iperf3: the client's ephemeral ports count up, one server port per entry.
                        let k = key(40000 + id as u16, 5201 + ti as u16, 6);
                        let rtt = qdisc::Duration(base_rtt);
                        let mut f = TcpFlow::new(ti, stream, src, dst, k, cc, rtt, start, end, id);
                        f.snd_cpu = place(self, src, &t.sender_cpus, stream as usize);
                        f.rcv_cpu = place(self, dst, &t.receiver_cpus, stream as usize);
                        self.tcp.push(f);
                        self.events.at(start, Ev::TcpStart { flow: id });
                    }
                }
                TrafficKind::Udp { rate, size, flows } => {
                    for stream in 0..*flows as usize {
                        let id = self.udp.len() as u32;
                        let k = key(50000 + id as u16, 5201 + ti as u16, 17);
                        let mut u = UdpApp::new(ti, src, dst, k, *rate, *size, start, end, id);
                        u.cpu = place(self, src, &t.sender_cpus, stream);
                        u.rcv_cpu = place(self, dst, &t.receiver_cpus, stream);
                        self.udp.push(u);
                        self.events.at(start, Ev::Udp { app: id });
                    }
                }
                TrafficKind::Ping { interval } => {
                    let id = self.ping.len() as u32;
                    let k = key(0, 0, 1);
                    let mut p = PingApp::new(ti, src, dst, k, *interval, start, end, id);
                    p.cpu = place(self, src, &t.sender_cpus, 0);
                    self.ping.push(p);
                    self.events.at(start, Ev::Ping { app: id });
                }
            }
        }
        Ok(())
    }

    /// The qdisc device behind an interface.
    pub fn device(&mut self, iface: u32) -> &mut qdisc::tree::Device {
        let i = &self.ifaces[iface as usize];
        &mut self.hosts[i.host as usize].tc.devices[i.dev]
    }

    /// Store a packet's endpoint data; returns its id.
    pub fn new_meta(&mut self, m: Meta) -> u64 {
        if let Some(id) = self.free_metas.pop() {
            self.metas[id as usize] = Some(m);
            id
        } else {
            self.metas.push(Some(m));
            self.metas.len() as u64 - 1
        }
    }

    pub fn take_meta(&mut self, id: u64) -> Option<Meta> {
        let m = self.metas.get_mut(id as usize)?.take();
        if m.is_some() {
            self.free_metas.push(id);
        }
        m
    }

    /// A packet of `len` bytes from a local socket of host `src` to host `dst`.
    pub fn packet(&mut self, len: u32, segs: u16, key: &FlowKey, meta: Meta) -> Packet {
        let id = self.new_meta(meta);
        let mut p = Packet::new(id, len).with_flow(*key);
        p.gso_segs = segs;
        p
    }

    /// Send a packet from host `h` towards its destination (`ip_output` → `dev_queue_xmit`).
    /// Returns the qdisc's verdict (`None`: no route, dropped).
    ///
    /// This is the synchronous path (TCP's output needs the qdisc's verdict at once):
    /// on a host with CPUs its cost is charged to the CPU running the step, but it
    /// takes no locks (docs/cpu-model.md).
    pub fn send(&mut self, h: u32, dst: u32, pkt: Packet) -> Option<qdisc::Enqueued> {
        let iface = self.hosts[h as usize].route[dst as usize]?;
        if let Some((ch, c)) = self.on_cpu.filter(|&(ch, _)| ch == h) {
            use crate::cpu::Func;
            let (enq_f, deq_f, enq, deq) = self.qdisc_costs(ch, iface, 0);
            let (ndo_f, ndo) = self.ndo_cost(ch, iface);
            let hc = self.cpus(ch);
            let k = &hc.costs;
            let (tx, dq, sd) = (k.tcp_transmit_skb, k.dev_queue_xmit, k.sch_direct_xmit);
            let class = hc.cpus[c as usize].cur_class;
            let mut spent = 0;
            for (f, ns) in [
                (Func::TcpTransmitSkb as u16, tx),
                (Func::DevQueueXmit as u16, dq),
                (enq_f, enq),
                (deq_f, deq),
                (Func::SchDirectXmit as u16, sd),
                (ndo_f as u16, ndo),
            ] {
                hc.charge(c, class, f, ns);
                spent += ns;
            }
            self.inline_ns += spent;
        }
        Some(self.dev_queue_xmit(iface, pkt))
    }

    /// XPS: what drivers install at init (CPU c → queue c mod queues, for devices with
    /// several queues), replaced per device by the scenario's `xps_cpus` lines.
    fn default_xps(&mut self, s: &Scenario) {
        use qdisc_scenario::scenario::SettingKind;
        for i in 0..self.ifaces.len() {
            let h = self.ifaces[i].host as usize;
            let Some(cpus) = self.hosts[h].cpu.as_ref().map(|c| c.cpus.len()) else { continue };
            let n = self.ifaces[i].txqs.len();
            let mut xps: Vec<Vec<u32>> = vec![Vec::new(); cpus];
            let lines: Vec<(u32, Vec<u32>)> =
                s.tc.iter()
                    .filter(|t| t.host == self.hosts[h].name)
                    .flat_map(|t| &t.settings)
                    .filter_map(|st| match &st.kind {
                        SettingKind::XpsCpus { dev, txq, cpus } if *dev == self.ifaces[i].name => {
                            Some((*txq, cpus.clone()))
                        }
                        _ => None,
                    })
                    .collect();
            if lines.is_empty() {
                if n > 1 {
                    for (c, m) in xps.iter_mut().enumerate() {
                        m.push((c % n) as u32);
                    }
                }
            } else {
                // Later lines for the same queue replace earlier ones, as writes to sysfs do.
                let mut per_q: Vec<Vec<u32>> = vec![Vec::new(); n];
                for (q, cs) in lines {
                    per_q[q as usize] = cs;
                }
                for (q, cs) in per_q.iter().enumerate() {
                    for &c in cs {
                        xps[c as usize].push(q as u32);
                    }
                }
            }
            self.ifaces[i].xps = xps;
        }
    }

    /// Run the scenario to its end; an error if time stops advancing (a livelock:
    /// endless work at one instant, e.g. traffic on a path that costs no time).
    pub fn run(&mut self, mut on_sample: impl FnMut(&mut Sim)) -> Result<(), RunError> {
        let mut same = (self.now, 0u64);
        while let Some((at, ev)) = self.events.pop_until(self.end) {
            assert!(at >= self.now, "event {ev:?} at {at} scheduled before now ({})", self.now);
            if at == same.0 {
                same.1 += 1;
                if same.1 > LIVELOCK_EVENTS {
                    return Err(RunError::Failed(format!(
                        "the simulation stopped advancing at t={}: {} events at one instant (the last: {ev:?}); \
                         a path with no rate, no delay and no CPU cost?",
                        at, same.1
                    )));
                }
            } else {
                same = (at, 0);
            }
            self.now = at;
            match ev {
                Ev::Sample => on_sample(self),
                ev => self.handle(ev),
            }
            // CPUs given work at this instant while they were idle.
            while !self.ready.is_empty() {
                for (h, c) in std::mem::take(&mut self.ready) {
                    self.cpu_run(h, c);
                }
            }
        }
        self.now = self.end;
        Ok(())
    }

    /// Handle an event. On hosts with CPUs, timers and softirqs become work on a CPU.
    pub fn handle(&mut self, ev: Ev) {
        let at = self.now;
        match ev {
            Ev::Arrive { dir } => self.arrive(dir),
            Ev::TxDone { iface } => self.tx_done(iface),
            Ev::Watchdog { iface, txq } => {
                let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
                if q.watchdog == Some(at) {
                    q.watchdog = None;
                    let c = q.last_cpu;
                    let h = self.ifaces[iface as usize].host;
                    if self.hosts[h as usize].cpu.is_some() {
                        self.net_tx_schedule(h, c, iface, txq);
                    } else {
                        self.qdisc_run(iface, txq);
                    }
                }
            }
            Ev::NetTx { iface, txq } => {
                self.ifaces[iface as usize].txqs[txq as usize].net_tx = false;
                self.qdisc_run(iface, txq);
            }
            Ev::TcpStart { flow } | Ev::TcpSender { flow } | Ev::TcpReceiver { flow } if self.on_cpu.is_none() => {
                // TCP's timers fire at their instant (the timer softirq of the
                // thread's CPU); what they send occupies that CPU afterwards.
                let f = &self.tcp[flow as usize];
                let (h, c) = if matches!(ev, Ev::TcpReceiver { .. }) { (f.dst, f.rcv_cpu) } else { (f.src, f.snd_cpu) };
                self.on_cpu = Some((h, c));
                self.handle(ev);
                self.on_cpu = None;
                let ns = std::mem::take(&mut self.inline_ns);
                if ns > 0 {
                    self.give(h, c, Work::Occupy { ns }, true);
                }
            }
            Ev::TcpStart { flow } => self.tcp_start(flow),
            Ev::TcpSender { flow } => self.tcp_sender_timer(flow),
            Ev::TcpReceiver { flow } => self.tcp_receiver_timer(flow),
            Ev::Udp { app } => self.udp_due(app),
            Ev::Ping { app } => self.ping_due(app),
            Ev::Cpu { host, cpu } => self.cpu_run(host, cpu),
            Ev::Sample => {}
        }
    }

    /// A frame reaches the far end of link direction `dir`.
    fn arrive(&mut self, dir: u32) {
        let d = &mut self.dirs[dir as usize];
        let Some((_, pkt)) = d.frames.pop_front() else { return };
        if let Some(&(next, _)) = d.frames.front() {
            self.events.at(next, Ev::Arrive { dir });
        }
        let to = d.to;
        if let Some(port) = self.ifaces[to as usize].bridge {
            self.dev_queue_xmit(port, pkt);
            return;
        }
        let host = self.ifaces[to as usize].host;
        if self.hosts[host as usize].cpu.is_none() {
            self.receive(host, pkt);
            return;
        }
        // RSS: the rx queue by flow hash; NAPI runs on the CPU its interrupt is
        // affine to (queue i → CPU i mod cpus, as drivers spread them).
        let i = &mut self.ifaces[to as usize];
        let n = i.rx_ring.len() as u64;
        let rxq = ((pkt.hash as u64 * n) >> 32) as usize;
        let (ring, scheduled) = &mut i.rx_ring[rxq];
        if ring.len() >= RX_RING as usize {
            i.rx_discards += 1;
            self.take_meta(pkt.id);
            return;
        }
        ring.push_back(pkt);
        if !*scheduled {
            *scheduled = true;
            let cpus = self.cpus(host).cpus.len() as u32;
            self.give(host, rxq as u32 % cpus, Work::Napi { iface: to, rxq: rxq as u32 }, true);
        }
    }

    /// A NAPI poll of `iface`'s rx queue `rxq` on CPU `c`: up to 64 packets (the
    /// driver's weight), each through the driver and IP, delivered on the way; a packet
    /// to forward ends the step, its xmit runs next and the poll goes on after it.
    /// With packets left after 64 the poll is queued again behind other softirq work.
    pub fn napi_poll(&mut self, h: u32, c: u32, iface: u32, rxq: u32, mut done: u32) -> crate::cpu::Step {
        use crate::cpu::{Class, Func, Step};
        const NAPI_WEIGHT: u32 = 64;
        let k = &self.cpus(h).costs;
        let (rx, ip, fwd, tcp_rcv, udp_rcv, icmp_rcv) =
            (k.napi_gro_receive, k.ip_rcv, k.ip_forward, k.tcp_v4_rcv, k.udp_rcv, k.icmp_rcv);
        let mut ns = 0;
        loop {
            let (ring, scheduled) = &mut self.ifaces[iface as usize].rx_ring[rxq as usize];
            if done == NAPI_WEIGHT && !ring.is_empty() {
                self.give(h, c, Work::Napi { iface, rxq }, true);
                return Step::Done(ns);
            }
            let Some(pkt) = ring.pop_front() else {
                *scheduled = false;
                return Step::Done(ns);
            };
            done += 1;
            let hc = self.cpus(h);
            hc.charge(c, Class::Softirq, Func::NapiGroReceive as u16, rx);
            hc.charge(c, Class::Softirq, Func::IpRcv as u16, ip);
            ns += rx + ip;
            let Some(meta) = self.metas.get(pkt.id as usize).and_then(|m| m.as_ref()) else { continue };
            if meta.dst != h {
                let dst = meta.dst;
                self.cpus(h).charge(c, Class::Softirq, Func::IpForward as u16, fwd);
                ns += fwd;
                let Some(out) = self.hosts[h as usize].route[dst as usize] else { continue };
                let p = crate::xmit::onward(&pkt, pkt.id, pkt.len, pkt.gso_segs, true);
                let t = crate::cpu_xmit::XmitTask::send(out, p, crate::cpu_xmit::Then::Napi { iface, rxq, done });
                self.cpus(h).cpus[c as usize].cur = Some(Work::Xmit(t));
                return Step::Busy(ns + self.xmit_cost(h, c));
            }
            let (f, cost) = match meta.payload {
                Payload::Tcp { .. } | Payload::TcpAck { .. } => (Func::TcpV4Rcv, tcp_rcv),
                Payload::Udp { .. } => (Func::UdpRcv, udp_rcv),
                Payload::Ping { reply: false, .. } => (Func::IcmpRcv, icmp_rcv),
                Payload::Ping { reply: true, .. } => (Func::UdpRcv, udp_rcv),
            };
            self.cpus(h).charge(c, Class::Softirq, f as u16, cost);
            ns += cost;
            self.receive(h, pkt);
            if let Some(Work::Xmit(t)) = self.cpus(h).cpus[c as usize].cur.as_mut() {
                // An echo reply leaves from here; the poll goes on after it.
                t.then = crate::cpu_xmit::Then::Napi { iface, rxq, done };
                return Step::Busy(ns);
            }
        }
    }

    /// `ip_rcv`: deliver locally or forward.
    fn receive(&mut self, h: u32, pkt: Packet) {
        let Some(meta) = self.metas.get(pkt.id as usize).and_then(|m| m.as_ref()) else { return };
        if meta.dst != h {
            // Forwarding: the same bytes leave on the next hop (a GSO skb that crossed a
            // veth whole stays one).
            let dst = meta.dst;
            self.send(h, dst, crate::xmit::onward(&pkt, pkt.id, pkt.len, pkt.gso_segs, true));
            return;
        }
        let meta = self.take_meta(pkt.id).expect("present");
        let ce = pkt.ecn() == 0b11;
        match meta.payload {
            Payload::Tcp { flow, seg } => self.tcp_data(flow, seg, ce),
            Payload::TcpAck { flow, ack } => self.tcp_ack(flow, ack),
            Payload::Udp { app, seq, sent_at } => self.udp_receive(app, seq, sent_at),
            Payload::Ping { app, seq, sent_at, reply } => self.ping_receive(app, seq, sent_at, reply, meta.src),
        }
    }

    /// A socket for a local endpoint.
    pub fn socket(id: u64, hash: u32, tcp: bool) -> Arc<Socket> {
        Arc::new(Socket { id, hash, tcp, ..Default::default() })
    }
}
