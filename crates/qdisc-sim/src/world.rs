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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use qdisc::dql::Dql;
use qdisc::tc::{Tc, TcLib, TcOpts};
use qdisc::tree::{DevKind, DevSpec, KernelVersion};
use qdisc::{FlowKey, Instant, Packet, Socket};
use qdisc_scenario::backend::RunError;
use qdisc_scenario::scenario::{LinkKind, Scenario, SettingKind, TrafficKind};

use crate::apps::{Conn, PingApp, TcpFlow, UdpApp};
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
/// Events between two reclaims of what the qdiscs dropped ([`Sim::reclaim_dropped`]):
/// the ids wait in the drop monitor meanwhile, so memory stays bounded by the drops
/// of this many events.
const RECLAIM_EVERY: u32 = 4096;

/// What a packet is, for its endpoints.
#[derive(Clone, Debug)]
pub enum Payload {
    Tcp {
        flow: u32,
        seg: tcp::Segment,
    },
    /// A SYN, SYN-ACK or the handshake's ACK of connection `conn`.
    Hs {
        conn: u32,
        seg: tcp::handshake::HsSeg,
    },
    TcpAck {
        flow: u32,
        ack: tcp::Ack,
    },
    Udp {
        app: u32,
        seq: u64,
        sent_at: Instant,
    },
    Ping {
        app: u32,
        seq: u64,
        sent_at: Instant,
        reply: bool,
    },
}

#[derive(Clone, Debug)]
pub struct Meta {
    pub src: u32,
    pub dst: u32,
    pub payload: Payload,
    /// The CPU that allocated the skb (`skb->alloc_cpu`; `u32::MAX`: none).
    pub alloc: u32,
}

pub struct Host {
    pub name: String,
    pub tc: Tc,
    /// Interface index (into `Sim::ifaces`) per device of `tc`.
    pub ifaces: Vec<Option<u32>>,
    /// Next-hop interface towards each host (by host index); `None` for itself.
    pub route: Vec<Option<u32>>,
    /// Its CPUs (scenario hosts); `None` for the kernel lab's wire, which is not
    /// part of either host and moves packets at no CPU cost, and for a namespace that
    /// shares the CPUs of another host of its machine (`machine`).
    pub cpu: Option<HostCpus>,
    /// The host whose CPUs this one runs on: itself, or the first host of the machine
    /// it shares with (hosts joined by a veth pair are namespaces of one kernel).
    pub machine: u32,
    /// Times one of its sockets' cached tx queue changed (`ooo_okay` let XPS move it).
    pub txq_changes: u64,
    /// The realms (`nh_tclassid`) of its route to each link's subnet, by link index
    /// (`ip route … realms`; 0: none). Empty for the wire, which routes nothing.
    pub realms: Vec<u32>,
    /// For traffic from host S to host D that this host forwards: the ifindex of the
    /// interface it arrives on (`skb->skb_iif`), by (S, D).
    pub iif: HashMap<(u32, u32), u32>,
}

pub struct TxQueue {
    pub dql: Dql,
    /// Stopped by BQL (`__QUEUE_STATE_STACK_XOFF`).
    pub stopped: bool,
    /// Stopped by the driver (`__QUEUE_STATE_DRV_XOFF`: a veth peer's full ring).
    pub drv_stopped: bool,
    /// BQL on veth: the most bytes in flight since the last report sample.
    pub bql_peak: u32,
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
    /// Rx queues: rings waiting for NAPI (hosts with CPUs), RPS maps.
    pub rx: Vec<crate::rx::RxQueue>,
    /// Descriptors per rx ring of a NIC (`ethtool -G rx`; a veth pair's NAPI ring is
    /// `rx::VETH_RING`).
    pub rx_ring_size: u32,
    /// Descriptors per tx ring (`ethtool -G tx`).
    pub tx_ring_size: u32,
    /// Interrupt coalescing (`ethtool -C`): µs from the first frame to the interrupt.
    /// `tx_usecs` on a veth with time-based BQL: its completion interval.
    pub rx_usecs: u32,
    pub tx_usecs: Option<u32>,
    /// `ethtool -K` tso/gso/gro.
    pub tso: bool,
    pub gso: bool,
    pub gro: bool,
    pub mtu: u32,
    /// The other end of a veth pair (no bridge between them).
    pub peer: Option<u32>,
    /// The host's loopback device.
    pub lo: bool,
    /// An ifb device (the scenario host's `ifb`): its xmit hands each packet back to
    /// the device mirred took it from (rx.rs, `local_xmit`).
    pub ifb: bool,
    /// BQL on this veth's tx queues (patch series of seed 004).
    pub veth_bql: qdisc_scenario::scenario::VethBql,
    /// Frames the NIC dropped because the ring was full (`rx_discards_phy`).
    pub rx_discards: u64,
    /// Packets the driver dropped (a veth peer's full ring on kernels without backpressure).
    pub tx_dropped: u64,
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
    /// Segments of a GSO skb that a qdisc cut (`Packet::part`) yet to leave their
    /// qdisc, per skb meta id: the skb's meta goes when the last one is out.
    parts: HashMap<u64, u32>,
    /// Ids the drop monitor reported, being reclaimed ([`Sim::reclaim_dropped`]).
    pub(crate) dropped_ids: Vec<u64>,
    /// Packets alive beside the one whose id they carry (netem's duplicates), per id;
    /// the ids the drop monitor reported cloned, being counted in.
    copies: HashMap<u64, u32>,
    cloned_ids: Vec<u64>,
    pub rng: Rng,
    pub tcp: Vec<TcpFlow>,
    /// The TCP connections' handshakes (iperf3's control connections and its streams).
    pub conns: Vec<Conn>,
    pub udp: Vec<UdpApp>,
    /// How many UDP senders sleep for room in their send buffer.
    pub udp_blocked: u32,
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
    /// The kernel whose behaviour is simulated (where versions differ).
    pub kernel: KernelVersion,
    /// Packets mirred redirected to an ifb, by id: the interface whose hook or qdisc
    /// sent them (`skb_iif`), where the ifb gives them back, and whether that was its
    /// ingress (`skb->from_ingress`: back up its receive path, else to its
    /// `dev_queue_xmit`).
    pub ifb_from: HashMap<u64, (u32, bool)>,
    /// Packets an ifb gave back: their next ingress skips classification
    /// (`tc_skip_classify`).
    pub skip_ingress: HashSet<u64>,
    /// Packets mirred put on a device's transmit path (not an ifb's): their frame still
    /// carries the destination MAC of the path they were taken from, so the host that
    /// receives them takes them as PACKET_OTHERHOST — its ingress hook sees them, and
    /// `ip_rcv` drops them.
    pub otherhost: HashSet<u64>,
    /// `skb->tc_depth` of packets mirred sent into a receive path (absent: 0), which
    /// its loop guard reads ([`qdisc::classify::action::MirredNest`]).
    pub tc_depth: HashMap<u64, u8>,
    /// Packets `netif_rx` queued on a host without CPUs (a mirred from egress into a
    /// receive path), received in order, each at an event of its own (`Ev::NetifRx`):
    /// the deferral that ends the mirred nesting, as the backlog does on the kernel.
    pub rx_later: VecDeque<(u32, Packet)>,
    /// Something the run cannot go on with (what the simulator does not model),
    /// reported when the current event is done.
    pub fatal: Option<String>,
}

/// 127.0.0.1 as an IPv4-mapped IPv6 address.
const LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];

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

/// The qdisc of a veth link's bridge port: what the kernel lab puts there
/// ([`qdisc_scenario::scenario::Link::wire_qdisc`]: tbf at the rate, or netem for the
/// delay, loss and rate), with netem's generator seeded from the run's seed.
fn wire_qdisc(l: &qdisc_scenario::scenario::Link, dev: &str, seed: u64) -> Option<Vec<String>> {
    let mut a = l.wire_qdisc(dev)?;
    if l.wire_needs_netem() {
        a.extend(["seed".into(), seed.to_string()]);
    }
    Some(a)
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
            rx: Vec::new(),
            rx_ring_size: RX_RING,
            tx_ring_size: TX_RING,
            rx_usecs: 0,
            tx_usecs: None,
            tso: true,
            gso: true,
            // A veth comes up without GRO (no NAPI: netif_rx); a NIC with it.
            gro: !veth,
            mtu: 1500,
            peer: None,
            lo: false,
            ifb: false,
            veth_bql: Default::default(),
            rx_discards: 0,
            tx_dropped: 0,
        });
        id
    }

    /// Frames sent by `from` reach `to` after `delay`, each lost with probability `loss`.
    fn connect(&mut self, from: u32, to: u32, delay: u64, loss: f64) {
        self.ifaces[from as usize].out = self.dirs.len() as u32;
        self.dirs.push(LinkDir { to, delay, loss, frames: VecDeque::new(), lost: 0 });
    }
}

impl Iface {
    /// Its xmit is a receive on the same machine (lo, a veth pair's end): no wire.
    pub fn local(&self) -> bool {
        self.lo || self.peer.is_some() || self.ifb
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
                        let veth = l.kind != LinkKind::Eth;
                        // A NIC's wire rate is the link's; a veth has none.
                        net.iface(hi, &ep.iface, veth, if veth { None } else { l.rate }, l.rate);
                        net.specs[hi as usize].last_mut().expect("just added").txqueues = l.txqueues;
                    }
                }
            }
            // lo: its xmit is a receive on the sending CPU (rx.rs), mtu 65536.
            let lo = net.iface(hi, "lo", true, None, None);
            net.specs[hi as usize].last_mut().expect("just added").speed = None;
            net.ifaces[lo as usize].mtu = 65536;
            net.ifaces[lo as usize].lo = true;
            // The host's ifb devices: no link, ifb_setup's txqueuelen 32, pfifo_fast.
            for d in &h.ifb {
                let i = net.iface(hi, d, false, None, None);
                let spec = net.specs[hi as usize].last_mut().expect("just added");
                (spec.kind, spec.txqueuelen) = (DevKind::Ifb, 32);
                net.ifaces[i as usize].ifb = true;
                net.ifaces[i as usize].gro = false;
            }
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
                LinkKind::VethPair => {
                    // One veth pair: each end's xmit is its peer's receive (rx.rs).
                    net.ifaces[a as usize].peer = Some(b);
                    net.ifaces[b as usize].peer = Some(a);
                    net.ifaces[a as usize].veth_bql = l.veth_bql;
                    net.ifaces[b as usize].veth_bql = l.veth_bql;
                }
                LinkKind::Eth => {
                    net.connect(a, b, l.delay, loss);
                    net.connect(b, a, l.delay, loss);
                }
                LinkKind::Veth => {
                    // As the kernel lab builds it: each veth's peer is a port of a bridge
                    // in a wire namespace, and the port facing the receiver realises the
                    // link with its qdisc — tbf at the rate, or netem, which holds each
                    // packet for the delay (after serialising it at the rate) and loses
                    // some. The port itself has no rate, the wire no delay or loss.
                    let w = net.host(&format!("link[{li}]"));
                    let (pa, pb) = (
                        net.iface(w, &format!("l{li}a"), true, None, None),
                        net.iface(w, &format!("l{li}b"), true, None, None),
                    );
                    // The wire namespace's bridge forwards on some CPU of the machine:
                    // a latency of the sending host's profile (it is no host's CPU here).
                    let bridge = |host: &str| s.host(host).map_or(0, |h| h.profile.cost.bridge_forward.ns);
                    net.connect(a, pa, bridge(&l.a.host), 0.0);
                    net.connect(b, pb, bridge(&l.b.host), 0.0);
                    net.connect(pb, b, 0, 0.0);
                    net.connect(pa, a, 0, 0.0);
                    net.ifaces[pa as usize].bridge = Some(pb);
                    net.ifaces[pb as usize].bridge = Some(pa);
                    wires.push((w, li, l));
                }
            }
        }
        // Hosts joined by veth pairs are namespaces of one machine: the first one's CPUs.
        let mut machine: Vec<u32> = (0..net.names.len() as u32).collect();
        loop {
            let mut changed = false;
            for l in s.links.iter().filter(|l| l.kind == LinkKind::VethPair) {
                let (x, y) = (host_ix(&l.a.host) as usize, host_ix(&l.b.host) as usize);
                let m = machine[x].min(machine[y]);
                if machine[x] != m || machine[y] != m {
                    (machine[x], machine[y]) = (m, m);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // `ip link set` lines before a script's first tc command: as if set before the
        // devices came up (their default qdiscs see the new txqueuelen).
        for (hi, name) in net.names.iter().enumerate() {
            let Some(script) = s.tc_of(name) else { continue };
            for st in script.settings.iter().filter(|st| at_boot(script, st)) {
                if let SettingKind::IpLink { dev, mtu, txqueuelen } = &st.kind {
                    let spec = net.specs[hi].iter_mut().find(|d| &d.name == dev).expect("validated device");
                    if let Some(m) = mtu {
                        spec.mtu = *m;
                    }
                    if let Some(q) = txqueuelen {
                        spec.txqueuelen = *q;
                    }
                }
            }
        }
        let mut hosts: Vec<Host> = Vec::new();
        for (hi, name) in net.names.iter().enumerate() {
            let mut tc = match default_qdisc(s, name) {
                // As on a host that booted with the sysctl set (its devices came up after).
                Some((kind, fail)) => Tc::with_default_qdisc(&net.specs[hi], kernel, kind).map_err(fail)?,
                None => Tc::with_kernel(&net.specs[hi], kernel),
            };
            tc.lib = TcLib::from_env();
            let m = machine[hi];
            let cpu = s.hosts.get(hi).filter(|_| m == hi as u32).map(|h| HostCpus::new(h.cpus, &h.profile));
            hosts.push(Host {
                name: name.clone(),
                tc,
                ifaces: net.map[hi].clone(),
                route: Vec::new(),
                cpu,
                machine: m,
                txq_changes: 0,
                realms: if hi < s.hosts.len() { vec![0; s.links.len()] } else { Vec::new() },
                iif: HashMap::new(),
            });
        }
        for (w, li, l) in wires {
            for (side, port) in [format!("l{li}a"), format!("l{li}b")].into_iter().enumerate() {
                let seed = Rng::new(s.seed ^ 0x7769_7265 ^ ((li as u64) << 32) ^ side as u64).next_u64();
                let Some(args) = wire_qdisc(l, &port, seed) else { continue };
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
                let iface =
                    |name: &str| ifaces.iter().position(|i| i.host == hi as u32 && i.name == name).unwrap() as u32;
                if other.name == h.name {
                    // Local traffic goes over lo.
                    route.push(Some(iface("lo")));
                    continue;
                }
                route.push(s.path(&h.name, &other.name).and_then(|p| p.first().copied()).map(|(li, from_b)| {
                    let ep = if from_b { &s.links[li].b } else { &s.links[li].a };
                    iface(&ep.iface)
                }));
            }
            hosts[hi].route = route;
        }
        // The interface each forwarding host receives a pair's packets on: the walk
        // the routes above make from the sender, hop by hop.
        let end = |li: usize, b: bool| if b { &s.links[li].b } else { &s.links[li].a };
        for (si, src) in s.hosts.iter().enumerate() {
            for (di, dst) in s.hosts.iter().enumerate() {
                let mut x = src.name.as_str();
                while x != dst.name {
                    let Some(&(li, from_b)) = s.path(x, &dst.name).as_ref().and_then(|p| p.first()) else { break };
                    let next = end(li, !from_b);
                    x = next.host.as_str();
                    if x != dst.name {
                        let hx = host_ix(x) as usize;
                        let ifindex = hosts[hx].tc.link_names().iter().position(|n| *n == next.iface).unwrap() + 1;
                        hosts[hx].iif.insert((si as u32, di as u32), ifindex as u32);
                    }
                }
            }
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
            parts: HashMap::new(),
            dropped_ids: Vec::new(),
            copies: HashMap::new(),
            cloned_ids: Vec::new(),
            rng: Rng::new(s.seed),
            tcp: Vec::new(),
            conns: Vec::new(),
            udp: Vec::new(),
            udp_blocked: 0,
            ping: Vec::new(),
            warnings: Vec::new(),
            packets: 0,
            on_cpu: None,
            inline_ns: 0,
            sk_txq: HashMap::new(),
            ready: Vec::new(),
            kernel,
            ifb_from: HashMap::new(),
            skip_ingress: HashSet::new(),
            otherhost: HashSet::new(),
            tc_depth: HashMap::new(),
            rx_later: VecDeque::new(),
            fatal: None,
        };
        sim.apply_scripts(s)?;
        for i in 0..sim.ifaces.len() {
            let n = sim.device(i as u32).info.num_tx_queues.max(1);
            let h = sim.ifaces[i].host;
            let name = sim.ifaces[i].name.clone();
            let m = sim.hosts[h as usize].machine as usize;
            let host = sim.hosts[h as usize].name.clone();
            let cpu = &mut sim.hosts[m].cpu;
            let mut new_lines: Vec<u32> = Vec::new();
            if let Some(c) = cpu.as_mut() {
                new_lines = (0..2 * n).map(|_| c.line()).collect();
            }
            let mut next_line = new_lines.into_iter();
            let mut line = || next_line.next().unwrap_or(0);
            // Locks of a namespace sharing another's CPUs are named with its host.
            let name = if m == h as usize { name } else { format!("{host}:{name}") };
            let mut lock = |what: String| sim.hosts[m].cpu.as_mut().map_or(0, |c| c.lock(what));
            let txqs: Vec<TxQueue> = (0..n)
                .map(|q| TxQueue {
                    dql: Dql::new(Instant::ZERO),
                    stopped: false,
                    drv_stopped: false,
                    bql_peak: 0,
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
            sim.ifaces[i].rx = (0..n).map(|_| crate::rx::RxQueue::new()).collect();
        }
        sim.apply_iface_settings(s)?;
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
                            SettingKind::IpLink { dev, mtu, txqueuelen } if !at_boot(script, st) => {
                                // On a running device: qdiscs attached from now on see it.
                                let d = self.hosts[h].tc.devices.iter_mut().find(|d| &d.info.name == dev);
                                let d = d.expect("validated device");
                                if let Some(m) = mtu {
                                    d.info.mtu = *m;
                                }
                                if let Some(q) = txqueuelen {
                                    d.info.tx_queue_len = *q;
                                }
                                Ok(())
                            }
                            SettingKind::IpRoute { link, realms } => {
                                self.hosts[h].realms[*link] = *realms;
                                Ok(())
                            }
                            // Interface settings: applied once the interfaces are built
                            // (apply_iface_settings), XPS by default_xps.
                            _ => Ok(()),
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
        // skbedit's queue_mapping picks the tx queue from a clsact egress hook
        // (`netdev_xmit_skip_txqueue`); the engine's packets carry no queue mapping.
        use qdisc::sched::ingress::TC_H_MIN_EGRESS;
        for h in &mut self.hosts {
            let hook = |d: &qdisc::tree::Device| {
                let c = d.ingress.as_ref().filter(|q| q.kind() == "clsact").and_then(|q| q.q.as_classful());
                c.is_some_and(|c| {
                    c.block_index(TC_H_MIN_EGRESS) != 0 || c.block(TC_H_MIN_EGRESS).is_some_and(|b| !b.is_empty())
                })
            };
            if h.tc.devices.iter().any(hook) && h.tc.sets_queue_mapping() {
                return Err(RunError::Unsupported(format!(
                    "host {}: skbedit queue_mapping on a clsact egress hook is not modelled by the simulator \
                     (it does not move packets between tx queues); use --backend host or vm",
                    h.name
                )));
            }
        }
        Ok(())
    }

    /// A sysctl of host `h` the simulator models (the loader accepts only known keys
    /// with values in the kernel's ranges).
    fn apply_sysctl(&mut self, h: usize, key: &str, value: &str, boot: bool) -> Result<(), String> {
        let m = self.hosts[h].machine as usize;
        if key == "net.core.default_qdisc" {
            if !boot {
                self.hosts[h].tc.set_default_qdisc(value)?;
            }
            return Ok(());
        }
        if key.starts_with("net.ipv4.") {
            // Read by the TCP connections when they are built (`Sim::traffic`); the
            // loader has already made tcp_congestion_control the `cc` of every tcp entry
            // this host sends without one.
            return Ok(());
        }
        let cpu = self.hosts[m].cpu.as_mut().expect("scenario hosts have CPUs");
        let int = || value.parse::<i64>().map_err(|e| format!("{value}: {e}"));
        match key {
            "net.core.dev_weight" => cpu.dev_weight = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.dev_weight_tx_bias" => cpu.tx_bias = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.netdev_budget" => cpu.budget = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.netdev_budget_usecs" => cpu.budget_ns = int()?.max(0) as u64 * 1000,
            "net.core.netdev_max_backlog" => cpu.max_backlog = int()?.clamp(0, u32::MAX as i64) as u32,
            "net.core.dev_weight_rx_bias" => cpu.rx_bias = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.skb_defer_max" => cpu.defer_max = int()?.clamp(0, u32::MAX as i64) as u32,
            "net.core.gro_normal_batch" => cpu.gro_batch = int()?.clamp(1, u32::MAX as i64) as u32,
            "net.core.rps_sock_flow_entries" => cpu.rfs = int()? > 0,
            other => return Err(format!("sysctl {other} is not modelled by the simulator")),
        }
        // dev_rx_weight = dev_weight × dev_weight_rx_bias: process_backlog's quota.
        cpu.rx_quota = cpu.dev_weight.saturating_mul(cpu.rx_bias).max(1);
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
            let m = sim.hosts[h as usize].machine as usize;
            let n = sim.hosts[m].cpu.as_ref().map_or(1, |c| c.cpus.len()) as u64;
            match pins {
                Some(list) if !list.is_empty() => list[k % list.len()],
                _ => {
                    free[h as usize] += 1;
                    (free[h as usize] % n) as u32
                }
            }
        };
        // Ephemeral ports (ip_local_port_range 32768–60999; connect() takes even ports
        // from a per-boot random offset): they follow the scenario's seed, and with them
        // every flow hash (RSS, skb_tx_hash, the qdiscs' hashing).
        let mut ports = Rng::new(s.seed ^ 0x706f_7274);
        let mut ephemeral = |n: u32| -> u16 {
            let span = (60999 - 32768 - 2 * n as u64).max(2);
            (32768 + (ports.next_u64() % span) / 2 * 2) as u16
        };
        for (ti, t) in s.traffic.iter().enumerate() {
            let (src, dst) = (host_ix(&t.from), host_ix(&t.to));
            let path = s.path(&t.from, &t.to).expect("validated route");
            // Local traffic (from = to) goes to 127.0.0.1 over lo.
            let local = |li: Option<&(usize, bool)>, host: &str| li.map_or(LOOPBACK, |&(li, _)| addr(s, li, host));
            let (sa, da) = (local(path.first(), &t.from), local(path.last(), &t.to));
            let key = |sport: u16, dport: u16, proto: u8| FlowKey { src: sa, dst: da, sport, dport, proto };
            // The MSS follows the smallest MTU on the way (as path MTU discovery finds
            // it); TCP builds GSO skbs when the first hop does TSO or GSO.
            let first = self.hosts[src as usize].route[dst as usize].expect("validated route");
            let mut mtu = self.ifaces[first as usize].mtu;
            for &(li, _) in &path {
                for ep in [&s.links[li].a, &s.links[li].b] {
                    let h = host_ix(&ep.host);
                    if let Some(i) = self.ifaces.iter().find(|i| i.host == h && i.name == ep.iface) {
                        mtu = mtu.min(i.mtu);
                    }
                }
            }
            let gso = self.ifaces[first as usize].tso || self.ifaces[first as usize].gso;
            let start = Instant::from_nanos(t.start);
            let end = Instant::from_nanos(t.start + t.duration);
            match &t.kind {
                TrafficKind::Tcp { flows, cc, rate } => {
                    let Some(cc) = tcp::CongestionControl::from_name(cc) else {
                        let names: Vec<&str> = tcp::CongestionControl::ALL.iter().map(|c| c.name()).collect();
                        return Err(RunError::Unsupported(format!(
                            "traffic[{ti}]: the simulator models {}, not {cc:?} (use --backend host or vm)",
                            names.join(", ")
                        )));
                    };
                    // A host's sysctl KEY: the last value its script sets.
                    let sysctl = |host: &str, key: &str| {
                        s.tc.iter()
                            .filter(|script| script.host == host)
                            .flat_map(|script| &script.settings)
                            .filter_map(|st| match &st.kind {
                                SettingKind::Sysctl { key: k, value } if k == key => Some(value.as_str()),
                                _ => None,
                            })
                            .last()
                    };
                    let default_cc = |host: &str| sysctl(host, "net.ipv4.tcp_congestion_control");
                    let int = |host: &str, key: &str, default: u32| {
                        sysctl(host, key).and_then(|v| v.parse().ok()).unwrap_or(default)
                    };
                    let base = ephemeral(*flows);
                    let first = self.tcp.len() as u32;
                    let streams = first..first + *flows;
                    let first_conn = self.conns.len() as u32;
                    for stream in 0..*flows {
                        let id = self.tcp.len() as u32;
                        // iperf3: one server port per entry; the client's ports are the
                        // kernel's ephemeral ones (what differs from run to run).
                        let k = key(base + 2 * stream as u16, 5201 + ti as u16, 6);
                        let mut f = TcpFlow::new(ti, stream, src, dst, k, cc, start, end, id);
                        // The socket's own randomness (BBR's first gain-cycle phase).
                        f.cfg.seed = Rng::new(s.seed ^ 0x7463_705f ^ ((id as u64) << 32)).next_u64();
                        f.cfg.defer_until_expected_ack = self.kernel >= KernelVersion(6, 18);
                        f.cfg.comp_sack_rtt_percent = (self.kernel >= KernelVersion(6, 18)).then_some(33);
                        // ECN is negotiated only between two dctcp defaults: iperf3 sets -C
                        // on the connected socket, so the SYN went out with the client's
                        // default module, and only dctcp (TCP_CONG_NEEDS_ECN) asks with
                        // tcp_ecn = 2 — in an ECT SYN, which tcp_ecn_create_request accepts
                        // only when the server's listener needs ECN too. A dctcp socket
                        // without ECN is dctcp-reno; other modules send no ECT after
                        // TCP_CONGESTION (INET_ECN_dontxmit), as if not negotiated.
                        // Or the client asks for it with `tcp_ecn` = 1 (tcp_ecn_send_syn),
                        // in a SYN that is not ECT unless its module needs ECN, which a
                        // server with `tcp_ecn` not 0 accepts (tcp_ecn_create_request);
                        // then every new data segment is ECT(0) (tcp_ecn_send).
                        let ecn_sysctl = |host: &str| int(host, "net.ipv4.tcp_ecn", 2);
                        f.cfg.ecn = (cc == tcp::CongestionControl::Dctcp
                            && default_cc(&t.from) == Some("dctcp")
                            && default_cc(&t.to) == Some("dctcp"))
                            || (ecn_sysctl(&t.from) == 1
                                && default_cc(&t.from) != Some("dctcp")
                                && ecn_sysctl(&t.to) != 0);
                        f.cfg.syn_retries = int(&t.from, "net.ipv4.tcp_syn_retries", f.cfg.syn_retries);
                        f.cfg.synack_retries = int(&t.to, "net.ipv4.tcp_synack_retries", f.cfg.synack_retries);
                        f.cfg.slow_start_after_idle = int(&t.from, "net.ipv4.tcp_slow_start_after_idle", 1) != 0;
                        // The receiving host's buffer (a shorter list keeps the rest).
                        if let Some(v) = sysctl(&t.to, "net.ipv4.tcp_rmem") {
                            for (slot, w) in f.cfg.rmem.iter_mut().zip(v.split_whitespace()) {
                                *slot = w.parse().unwrap_or(*slot);
                            }
                        }
                        // The sending host's send buffer (tcp_init_sock, tcp_stream_memory_free).
                        if let Some(v) = sysctl(&t.from, "net.ipv4.tcp_wmem") {
                            for (slot, w) in f.cfg.wmem.iter_mut().zip(v.split_whitespace()) {
                                *slot = w.parse().unwrap_or(*slot);
                            }
                        }
                        f.cfg.notsent_lowat = int(&t.from, "net.ipv4.tcp_notsent_lowat", f.cfg.notsent_lowat);
                        f.rate = *rate;
                        f.set_path(mtu, gso);
                        f.snd_cpu = place(self, src, &t.sender_cpus, stream as usize);
                        f.rcv_cpu = place(self, dst, &t.receiver_cpus, stream as usize);
                        // The stream's connection; each opens once the one before it has.
                        let conn = self.conns.len() as u32;
                        f.conn = conn;
                        let mut c =
                            Conn::new(Some(id), src, dst, k, conn, (f.snd_cpu, f.rcv_cpu), streams.clone(), &f.cfg);
                        c.next = (stream + 1 < *flows).then_some(conn + 1);
                        in_net_cls(&mut f.sk, t.net_cls_classid);
                        in_net_cls(&mut c.sk, t.net_cls_classid);
                        self.conns.push(c);
                        self.tcp.push(f);
                    }
                    // iperf3's control connection (same server port, the next client port,
                    // the first stream's threads) opens first, at the entry's start.
                    let ctrl = self.conns.len() as u32;
                    let k = key(base + 2 * *flows as u16, 5201 + ti as u16, 6);
                    let f = &self.tcp[first as usize];
                    let mut c =
                        Conn::new(None, src, dst, k, ctrl, (f.snd_cpu, f.rcv_cpu), streams.clone(), &f.cfg.clone());
                    c.next = (*flows > 0).then_some(first_conn);
                    in_net_cls(&mut c.sk, t.net_cls_classid);
                    self.conns.push(c);
                    self.events.at(start, Ev::Connect { conn: ctrl });
                }
                TrafficKind::Udp { rate, size, flows, tos } => {
                    let base = ephemeral(*flows);
                    for stream in 0..*flows as usize {
                        let id = self.udp.len() as u32;
                        let k = key(base + 2 * stream as u16, 5201 + ti as u16, 17);
                        let mut u = UdpApp::new(ti, src, dst, k, *rate, *size, start, end, id);
                        u.tos = *tos;
                        u.cpu = place(self, src, &t.sender_cpus, stream);
                        u.rcv_cpu = place(self, dst, &t.receiver_cpus, stream);
                        in_net_cls(&mut u.sk, t.net_cls_classid);
                        self.udp.push(u);
                        self.events.at(start, Ev::Udp { app: id });
                    }
                }
                TrafficKind::Pktgen { rate, size, flows } => {
                    // pktgen's UDP ports: 9 (discard) on both ends; its threads differ by
                    // their kpktgend_N CPU only.
                    for stream in 0..*flows as usize {
                        let id = self.udp.len() as u32;
                        let mut u = UdpApp::new(ti, src, dst, key(9, 9, 17), *rate, *size, start, end, id);
                        u.pktgen = true;
                        u.cpu = place(self, src, &t.sender_cpus, stream);
                        self.udp.push(u);
                        self.events.at(start, Ev::Udp { app: id });
                    }
                }
                TrafficKind::Ping { interval } => {
                    let id = self.ping.len() as u32;
                    let k = key(0, 0, 1);
                    let mut p = PingApp::new(ti, src, dst, k, *interval, start, end, id);
                    p.cpu = place(self, src, &t.sender_cpus, 0);
                    in_net_cls(&mut p.sk, t.net_cls_classid);
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
        // netem's duplicates carry their original's id: the meta stays while a copy
        // is alive (checked only when a qdisc has made copies).
        qdisc::drops::take_cloned(&mut self.cloned_ids);
        if !self.cloned_ids.is_empty() {
            for id in self.cloned_ids.drain(..) {
                *self.copies.entry(id).or_insert(0) += 1;
            }
        }
        if !self.copies.is_empty() {
            if let Some(n) = self.copies.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    self.copies.remove(&id);
                }
                return self.metas.get(id as usize)?.clone();
            }
        }
        let m = self.metas.get_mut(id as usize)?.take();
        if m.is_some() {
            self.free_metas.push(id);
            self.forget(id);
        }
        m
    }

    /// A packet leaving a qdisc. One a qdisc cut out of a GSO skb (tbf_segment, cake's
    /// split_gso, netem's corrupt path: `Packet::part` k ≥ 1) shares the skb's meta: it
    /// gets a meta of its own, the k-th MSS-sized piece of the skb's payload (TSO's cut;
    /// the engine shares `len` evenly, so the wire length follows the piece).
    pub fn own_part(&mut self, mut p: Packet) -> Packet {
        let k = p.part();
        if k == 0 {
            return p;
        }
        let whole = p.whole_id();
        let meta = self.metas[whole as usize].clone().expect("a cut skb keeps its meta until its last piece");
        let Payload::Tcp { flow, seg } = &meta.payload else { unreachable!("GSO is TCP only") };
        let mss = self.tcp[*flow as usize].mss;
        let n = seg.pieces(mss);
        let piece = seg.piece(mss, u32::from(k) - 1);
        p.len = piece.wire_len();
        p.id = self.new_meta(Meta { payload: Payload::Tcp { flow: *flow, seg: piece }, ..meta });
        // Each segment keeps the skb's input interface (skb_segment copies skb_iif):
        // one cut on an ifb (cake's split-gso) goes back where the whole came in.
        if let Some(&from) = self.ifb_from.get(&whole) {
            self.ifb_from.insert(p.id, from);
        }
        self.piece_gone(whole, n);
        p
    }

    /// One of the `n` pieces cut out of skb `whole` left its qdisc or was dropped:
    /// the skb's meta goes with the last.
    fn piece_gone(&mut self, whole: u64, n: u32) {
        let left = self.parts.entry(whole).or_insert(n);
        *left -= 1;
        if *left == 0 {
            self.parts.remove(&whole);
            self.take_meta(whole);
        }
    }

    /// Free the metas of packets the qdiscs dropped with no answer saying so
    /// ([`qdisc::drops`]: head drops, AQM drops at dequeue, netem's losses, expired
    /// packets): without this a run's memory would grow with its drops.
    fn reclaim_dropped(&mut self) {
        let mut ids = std::mem::take(&mut self.dropped_ids);
        qdisc::drops::take_freed(&mut ids);
        for &id in &ids {
            let whole = id & ((1 << qdisc::packet::PART_SHIFT) - 1);
            if whole == id {
                self.take_meta(id);
                continue;
            }
            // A piece still shares its skb's meta (see own_part).
            let Some(Meta { payload: Payload::Tcp { flow, seg }, .. }) = self.metas[whole as usize].as_ref() else {
                unreachable!("a cut skb keeps its meta until its last piece")
            };
            let n = seg.pieces(self.tcp[*flow as usize].mss);
            self.piece_gone(whole, n);
        }
        ids.clear();
        self.dropped_ids = ids;
    }

    /// A packet of `len` bytes from a local socket of host `src` to host `dst`.
    /// Built on the CPU running the current step, if any (its `alloc_cpu`).
    pub fn packet(&mut self, len: u32, segs: u16, key: &FlowKey, mut meta: Meta) -> Packet {
        if let Some((_, c)) = self.on_cpu {
            meta.alloc = c;
        }
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
        let m = self.machine(h);
        if let Some((ch, c)) = self.on_cpu.filter(|&(ch, _)| ch == m) {
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
            if !self.has_cpus(h as u32) {
                continue;
            }
            let cpus = self.cpus(h as u32).cpus.len();
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

    /// Where the scheduler puts a NAPI kernel thread of host `h`: an idle CPU of its
    /// machine (one no application thread is pinned to) if there is one, else any.
    fn napi_thread_cpus(&self, s: &Scenario, h: u32) -> Vec<u32> {
        let m = self.machine(h);
        let ncpu = self.hosts[m as usize].cpu.as_ref().map_or(1, |c| c.cpus.len()) as u32;
        let on_machine =
            |name: &str| self.hosts.iter().position(|x| x.name == name).is_some_and(|x| self.hosts[x].machine == m);
        let pinned: Vec<u32> = s
            .traffic
            .iter()
            .flat_map(|t| {
                let snd = t.sender_cpus.iter().flatten().filter(|_| on_machine(&t.from));
                snd.chain(t.receiver_cpus.iter().flatten().filter(|_| on_machine(&t.to)))
            })
            .copied()
            .collect();
        let idle: Vec<u32> = (0..ncpu).filter(|c| !pinned.contains(c)).collect();
        if idle.is_empty() {
            (0..ncpu).collect()
        } else {
            idle
        }
    }

    /// The interface lines of the scripts (`ethtool -C/-G/-K`, `ip link set`, RPS
    /// masks), in file order (a later line overrides an earlier one).
    fn apply_iface_settings(&mut self, s: &Scenario) -> Result<(), RunError> {
        for script in &s.tc {
            let h = self.hosts.iter().position(|h| h.name == script.host).expect("validated host") as u32;
            for st in &script.settings {
                let dev = match &st.kind {
                    SettingKind::RpsCpus { dev, .. }
                    | SettingKind::RpsFlowCnt { dev, .. }
                    | SettingKind::Threaded { dev, .. }
                    | SettingKind::Coalesce { dev, .. }
                    | SettingKind::Rings { dev, .. }
                    | SettingKind::Features { dev, .. }
                    | SettingKind::IpLink { dev, .. } => dev,
                    SettingKind::Sysctl { .. } | SettingKind::XpsCpus { .. } | SettingKind::IpRoute { .. } => continue,
                };
                let Some(i) = self.ifaces.iter().position(|i| i.host == h && &i.name == dev) else {
                    return Err(RunError::TcScript {
                        at: format!("{}:{}", s.file, st.line),
                        host: script.host.clone(),
                        command: st.text.clone(),
                        stderr: format!("Cannot find device \"{dev}\""),
                        hint: None,
                    });
                };
                let k = i;
                let pool = matches!(st.kind, SettingKind::Threaded { .. }).then(|| self.napi_thread_cpus(s, h));
                let i = &mut self.ifaces[i];
                match &st.kind {
                    SettingKind::RpsCpus { rxq, cpus, .. } => i.rx[*rxq as usize].rps = cpus.clone(),
                    SettingKind::RpsFlowCnt { rxq, count, .. } => i.rx[*rxq as usize].rfs = *count > 0,
                    SettingKind::Threaded { on, .. } => {
                        // Each NAPI's kernel thread: one of those CPUs, following the seed.
                        let pool = pool.as_ref().expect("computed for threaded");
                        for (q, rx) in i.rx.iter_mut().enumerate() {
                            let mut r = Rng::new(s.seed ^ ((k as u64) << 32) ^ ((q as u64) << 16) ^ 0x6e617069);
                            rx.thread = on.then(|| pool[(r.next_u64() % pool.len() as u64) as usize]);
                        }
                    }
                    SettingKind::Coalesce { rx_usecs, tx_usecs, .. } => {
                        i.rx_usecs = rx_usecs.unwrap_or(i.rx_usecs);
                        i.tx_usecs = tx_usecs.or(i.tx_usecs);
                    }
                    SettingKind::Rings { rx, tx, .. } => {
                        i.rx_ring_size = rx.unwrap_or(i.rx_ring_size);
                        i.tx_ring_size = tx.unwrap_or(i.tx_ring_size);
                    }
                    SettingKind::Features { tso, gso, gro, .. } => {
                        i.tso = tso.unwrap_or(i.tso);
                        i.gso = gso.unwrap_or(i.gso);
                        i.gro = gro.unwrap_or(i.gro);
                    }
                    SettingKind::IpLink { mtu, .. } => i.mtu = mtu.unwrap_or(i.mtu),
                    SettingKind::Sysctl { .. } | SettingKind::XpsCpus { .. } | SettingKind::IpRoute { .. } => {}
                }
            }
        }
        Ok(())
    }

    /// Run the scenario to its end; an error if time stops advancing (a livelock:
    /// endless work at one instant, e.g. traffic on a path that costs no time).
    pub fn run(&mut self, mut on_sample: impl FnMut(&mut Sim)) -> Result<(), RunError> {
        let mut same = (self.now, 0u64);
        let _drops = qdisc::drops::watch();
        let mut n = 0u32;
        while let Some((at, ev)) = self.events.pop_until(self.end) {
            n = n.wrapping_add(1);
            if n % RECLAIM_EVERY == 0 {
                self.reclaim_dropped();
            }
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
            if let Some(e) = self.fatal.take() {
                return Err(RunError::Unsupported(e));
            }
            // CPUs given work at this instant while they were idle.
            while !self.ready.is_empty() {
                for (h, c) in std::mem::take(&mut self.ready) {
                    self.cpu_run(h, c);
                }
            }
        }
        self.reclaim_dropped();
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
                    if self.has_cpus(h) {
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
            Ev::TcpSender { flow } | Ev::TcpReceiver { flow } if self.on_cpu.is_none() => {
                // TCP's timers run in the timer softirq of the thread's CPU, after what
                // that CPU is doing (a socket its thread owns defers them: the ACKs
                // already on their way get in first).
                let f = &self.tcp[flow as usize];
                let rcv = matches!(ev, Ev::TcpReceiver { .. });
                let (h, c) = if rcv { (f.dst, f.rcv_cpu) } else { (f.src, f.snd_cpu) };
                self.give(h, c, Work::TcpTimer { flow, rcv, at }, true);
            }
            Ev::Connect { conn } if self.on_cpu.is_none() => {
                // The connection starts at its instant; what it sends occupies the
                // thread's CPU afterwards.
                let c = &self.conns[conn as usize];
                let (h, c) = (c.src, c.cpu_of(c.src));
                let h = self.machine(h);
                self.on_cpu = Some((h, c));
                self.handle(ev);
                self.on_cpu = None;
                let ns = std::mem::take(&mut self.inline_ns);
                if ns > 0 {
                    self.give(h, c, Work::Occupy { ns }, true);
                }
            }
            Ev::Connect { conn } => self.tcp_connect(conn),
            Ev::TcpWrite { flow } => {
                let f = &self.tcp[flow as usize];
                let (h, c) = (f.src, f.snd_cpu);
                self.give(h, c, Work::TcpWrite { flow }, false);
            }
            Ev::Conn { conn, server } => self.conn_timer(conn, server, at),
            Ev::TcpSender { flow } => self.tcp_sender_timer(flow, at),
            Ev::TcpReceiver { flow } => self.tcp_receiver_timer(flow, at),
            Ev::Udp { app } => self.udp_due(app),
            Ev::Ping { app } => self.ping_due(app),
            Ev::Cpu { host, cpu } => self.cpu_run(host, cpu),
            Ev::RxIrq { iface, rxq } => self.rx_irq(iface, rxq),
            Ev::TxIrq { iface, txq } => self.tx_irq(iface, txq),
            Ev::NetifRx => self.netif_rx_later(),
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
        if !self.has_cpus(host) {
            if let Some(pkt) = self.ingress_hook(to, pkt) {
                self.ip_rcv(host, pkt);
            }
            return;
        }
        self.nic_rx(to, pkt);
    }

    /// `sch_handle_ingress` on a packet `iface` received (after RPS, before `ip_rcv`),
    /// then what its filters' mirred actions handed on. `None`: it went no further
    /// up this path (dropped, stolen or redirected).
    pub(crate) fn ingress_hook(&mut self, iface: u32, pkt: Packet) -> Option<Packet> {
        self.ingress_verdict(iface, pkt).ok()
    }

    /// [`Sim::ingress_hook`], telling a drop (`Err(true)`: NET_RX_DROP) from a packet
    /// stolen or redirected (`Err(false)`: NET_RX_SUCCESS).
    fn ingress_verdict(&mut self, iface: u32, pkt: Packet) -> Result<Packet, bool> {
        if self.skip_ingress.remove(&pkt.id) {
            return Ok(pkt);
        }
        let (now, id) = (self.now, pkt.id);
        self.mirred_sees(id);
        let i = &self.ifaces[iface as usize];
        let r = self.hosts[i.host as usize].tc.ingress(i.dev, pkt, now);
        let dropped = matches!(r, qdisc::tree::Ingress::Dropped);
        let (p, kept) = self.after_hook(iface, true, id, r);
        p.ok_or_else(|| {
            if !kept {
                self.take_meta(id);
            }
            dropped
        })
    }

    /// `sch_handle_egress` at the start of `iface`'s `dev_queue_xmit`, then what its
    /// filters' mirred actions handed on. `Err`: it goes no further, with the NET_XMIT
    /// code the stack sees (DROP for a filter's `drop`, SUCCESS for what was stolen or
    /// redirected). A dropped packet's meta is the caller's to free, as for a qdisc's
    /// refusal; a stolen one's is freed here unless a redirect took it on.
    pub(crate) fn egress_hook(&mut self, iface: u32, pkt: Packet) -> Result<Packet, qdisc::Enqueued> {
        let (now, id) = (self.now, pkt.id);
        self.mirred_sees(id);
        let i = &self.ifaces[iface as usize];
        let r = self.hosts[i.host as usize].tc.egress(i.dev, pkt, now);
        let dropped = matches!(r, qdisc::tree::Ingress::Dropped);
        match self.after_hook(iface, false, id, r) {
            (Some(p), _) => Ok(p),
            (None, _) if dropped => Err(qdisc::Enqueued::Dropped),
            (None, kept) => {
                if !kept {
                    self.take_meta(id);
                }
                Err(qdisc::Enqueued::Success)
            }
        }
    }

    /// A hook's verdict, after forwarding what its mirred actions handed on; `true`:
    /// a redirect took the packet on with its id (its meta stays).
    fn after_hook(&mut self, iface: u32, at_ingress: bool, id: u64, r: qdisc::tree::Ingress) -> (Option<Packet>, bool) {
        let consumed = matches!(r, qdisc::tree::Ingress::Stolen).then_some(id);
        let kept = self.forward_mirrored(iface, at_ingress, consumed);
        match r {
            qdisc::tree::Ingress::Pass(p) => (Some(p), kept),
            _ => (None, kept),
        }
    }

    /// The simulator's records of packet `id` beyond its meta.
    fn forget(&mut self, id: u64) {
        self.ifb_from.remove(&id);
        self.otherhost.remove(&id);
        self.tc_depth.remove(&id);
    }

    /// Before the engine classifies packet `id`: mirred's loop guards see its
    /// `tc_depth`.
    pub(crate) fn mirred_sees(&self, id: u64) {
        use qdisc::classify::action::{mirred_nest, set_mirred_nest};
        let depth = if self.tc_depth.is_empty() { 0 } else { self.tc_depth.get(&id).copied().unwrap_or(0) };
        set_mirred_nest(mirred_nest().with_depth(depth));
    }

    /// `tcf_mirred_to_dev` → `tcf_mirred_forward` for what the filters run on `from`'s
    /// ingress hook (`at_ingress`), egress hook or qdiscs handed on, in order. A mirror
    /// is a clone (`skb_clone`): a packet of its own, with a copy of the meta; a
    /// redirect of a packet its filters consumed (`consumed`) goes on as that packet.
    /// To the target's transmit path (`dev_queue_xmit`: its egress hook, then its
    /// qdisc, in place, inside mirred's nest of transmit targets) or receive path — in
    /// place from an ingress hook (`netif_receive_skb`: the target's ingress hook, then
    /// the stack), deferred from egress (`netif_rx`), the packet's `tc_depth` one more
    /// ([`qdisc::classify::action::MirredNest`]). A target that does not take the
    /// packet counts an overlimit on the action. `true`: a redirect
    /// took the consumed packet on.
    pub(crate) fn forward_mirrored(&mut self, from: u32, at_ingress: bool, mut consumed: Option<u64>) -> bool {
        use qdisc::classify::action::{mirred_nest, set_mirred_nest};
        let h = self.ifaces[from as usize].host;
        let nest = mirred_nest();
        let mut kept = false;
        for m in self.hosts[h as usize].tc.take_mirrored() {
            let tc = &self.hosts[h as usize].tc;
            let Some(t) = tc.device_by_ifindex(m.ifindex).and_then(|d| self.hosts[h as usize].ifaces[d]) else {
                self.fatal = Some(format!(
                    "host {}: mirred to a device the simulator does not run is not modelled",
                    self.hosts[h as usize].name
                ));
                continue;
            };
            let (redirect, ingress, m_ifindex) = (m.redirect, m.ingress, m.ifindex);
            let (mut pkt, refusal) = m.split();
            if redirect && consumed == Some(pkt.id) {
                consumed = None;
                kept = true;
            } else {
                let whole = pkt.whole_id();
                let Some(meta) = self.metas.get(whole as usize).and_then(|m| m.clone()).filter(|_| whole == pkt.id)
                else {
                    self.fatal = Some(format!(
                        "host {}: mirred of a segment a qdisc cut from a GSO skb is not modelled by the simulator",
                        self.hosts[h as usize].name
                    ));
                    continue;
                };
                pkt.id = self.new_meta(meta);
                if nest.depth > 0 {
                    self.tc_depth.insert(pkt.id, nest.depth);
                }
            }
            let id = pkt.id;
            if ingress {
                self.tc_depth.insert(id, nest.depth + 1);
            }
            let ok = if !ingress {
                // skb_set_redirected: only a redirect reaches an ifb's tasklet
                // (`ifb_xmit` drops the rest); anything else leaves as a frame
                // addressed to where it was going.
                if self.ifaces[t as usize].ifb {
                    if redirect {
                        self.ifb_from.insert(id, (from, at_ingress));
                    }
                } else {
                    self.otherhost.insert(id);
                }
                set_mirred_nest(nest.enter(m_ifindex));
                let v = self.dev_queue_xmit(t, pkt);
                set_mirred_nest(nest);
                if v == qdisc::Enqueued::Dropped {
                    self.take_meta(id);
                }
                v == qdisc::Enqueued::Success
            } else if at_ingress {
                let ok = match self.ingress_verdict(t, pkt) {
                    Ok(p) => self.ip_rcv(self.ifaces[t as usize].host, p),
                    Err(dropped) => !dropped,
                };
                set_mirred_nest(nest);
                ok
            } else {
                self.netif_rx_from_egress(t, pkt)
            };
            if !ok {
                refusal.failed();
            }
        }
        kept
    }

    /// `netif_rx` of a packet mirred sent from an egress into `iface`'s receive path:
    /// queued (a CPU's backlog, or [`Sim::rx_later`]) and received later, outside the
    /// mirred nesting. `false`: the backlog was full (NET_RX_DROP).
    fn netif_rx_from_egress(&mut self, iface: u32, pkt: Packet) -> bool {
        let h = self.ifaces[iface as usize].host;
        if !self.has_cpus(h) {
            self.rx_later.push_back((iface, pkt));
            self.events.at(self.now, Ev::NetifRx);
            return true;
        }
        let m = self.machine(h);
        let before = self.cpus(m).backlog_dropped;
        let c = self.on_cpu.filter(|&(x, _)| x == m).map_or(0, |x| x.1);
        self.netif_rx(h, c, iface, 0, pkt);
        self.cpus(m).backlog_dropped == before
    }

    /// The packet `netif_rx` queued first on a host without CPUs goes up.
    fn netif_rx_later(&mut self) {
        let Some((iface, pkt)) = self.rx_later.pop_front() else { return };
        if let Some(p) = self.ingress_hook(iface, pkt) {
            self.ip_rcv(self.ifaces[iface as usize].host, p);
        }
    }

    /// `ip_rcv` on host `h`: a frame addressed elsewhere (PACKET_OTHERHOST) is
    /// dropped, the rest delivered or forwarded ([`Sim::receive`]). `false`: dropped.
    pub(crate) fn ip_rcv(&mut self, h: u32, pkt: Packet) -> bool {
        if self.otherhost_dropped(pkt.id) {
            return false;
        }
        self.receive(h, pkt);
        true
    }

    /// `ip_rcv`'s drop of a frame addressed elsewhere ([`Sim::otherhost`]): `true` if
    /// packet `id` was one (its meta is freed).
    pub(crate) fn otherhost_dropped(&mut self, id: u64) -> bool {
        if !self.otherhost.remove(&id) {
            return false;
        }
        self.take_meta(id);
        true
    }

    /// `ip_rcv`: deliver locally or forward.
    pub(crate) fn receive(&mut self, h: u32, pkt: Packet) {
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
        let alloc = meta.alloc;
        match meta.payload {
            Payload::Tcp { flow, seg } => self.tcp_data(flow, seg, ce, alloc),
            Payload::TcpAck { flow, ack } => self.tcp_ack(flow, ack),
            Payload::Hs { conn, seg } => self.hs_receive(conn, seg),
            Payload::Udp { app, seq, sent_at } => self.udp_receive(app, seq, sent_at, alloc),
            Payload::Ping { app, seq, sent_at, reply } => self.ping_receive(app, seq, sent_at, reply, meta.src),
        }
    }

    /// The route a packet leaving by `iface` took (`skb_dst`), for the classifiers of
    /// its qdiscs: the host's route to the packet's destination address, with that
    /// route's realms (`rt_set_nexthop`), and for a packet the host forwards the
    /// interface it came in on and, where the route has no FROM realm, the TO realm of
    /// the route back to its source (`fib_validate_source` → `fib_combine_itag`,
    /// `set_class_tag`). Local traffic (127.0.0.1) takes a local route without realms.
    /// None where the kernel's skb has no route: pktgen's frames (`dev_queue_xmit`
    /// straight from the generator), an ifb's and the wire's packets (received ones,
    /// never routed there).
    pub(crate) fn route_of(&self, iface: u32, pkt: &Packet) -> Option<qdisc::classify::Dst> {
        use qdisc_scenario::scenario::link_of_address;
        let i = &self.ifaces[iface as usize];
        let host = &self.hosts[i.host as usize];
        if i.ifb || host.realms.is_empty() {
            return None;
        }
        let meta = self.metas.get(pkt.id as usize)?.as_ref()?;
        if let Payload::Udp { app, .. } = meta.payload {
            if self.udp[app as usize].pktgen {
                return None;
            }
        }
        let f = pkt.flow()?;
        let v4 = |a: &[u8; 16]| -> [u8; 4] { a[12..].try_into().expect("4 bytes") };
        let realm_to = |a: &[u8; 16]| link_of_address(v4(a), host.realms.len()).map_or(0, |l| host.realms[l]);
        let mut dst = qdisc::classify::Dst { tclassid: realm_to(&f.dst), iif: 0 };
        if meta.src != i.host {
            dst.iif = *host.iif.get(&(meta.src, meta.dst))?;
            dst.set_class_tag(realm_to(&f.src) << 16);
        }
        Some(dst)
    }

    /// A socket for a local endpoint (in the root cgroup: net_cls classid 0).
    pub fn socket(id: u64, hash: u32, tcp: bool) -> Arc<Socket> {
        Arc::new(Socket { id, hash, tcp, ..Default::default() })
    }
}

/// The sending application of a traffic entry runs in a net_cls cgroup
/// (`net_cls_classid`): its sockets, new, take the cgroup's classid
/// (`sock_update_classid`); 0 leaves them in the root cgroup's.
fn in_net_cls(sk: &mut Arc<Socket>, classid: u32) {
    Arc::get_mut(sk).expect("a socket no packet holds yet").net_cls_classid = classid;
}
