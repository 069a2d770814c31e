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

use std::collections::VecDeque;
use std::sync::Arc;

use qdisc::dql::Dql;
use qdisc::tc::{Tc, TcOpts};
use qdisc::tree::{DevKind, DevSpec, KernelVersion};
use qdisc::{FlowKey, Instant, Packet, Socket};
use qdisc_scenario::backend::RunError;
use qdisc_scenario::scenario::{LinkKind, Scenario, TrafficKind};

use crate::apps::{PingApp, TcpFlow, UdpApp};
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
                    net.connect(a, pa, 0, 0.0);
                    net.connect(b, pb, 0, 0.0);
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
            let tc = Tc::with_kernel(&net.specs[hi], kernel);
            hosts.push(Host { name: name.clone(), tc, ifaces: net.map[hi].clone(), route: Vec::new() });
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
        };
        sim.apply_scripts(s)?;
        for i in 0..sim.ifaces.len() {
            let n = sim.device(i as u32).info.num_tx_queues.max(1);
            sim.ifaces[i].txqs = (0..n)
                .map(|_| TxQueue {
                    dql: Dql::new(Instant::ZERO),
                    stopped: false,
                    in_ring: 0,
                    watchdog: None,
                    net_tx: false,
                })
                .collect();
        }
        sim.add_traffic(s, &host_ix)?;
        sim.events.at(Instant::ZERO, Ev::Sample);
        Ok(sim)
    }

    fn apply_scripts(&mut self, s: &Scenario) -> Result<(), RunError> {
        for script in &s.tc {
            let h = self.hosts.iter().position(|h| h.name == script.host).expect("validated host");
            for line in &script.lines {
                let out = self.hosts[h].tc.exec(&line.args, TcOpts::default());
                if out.code != 0 {
                    return Err(RunError::TcScript {
                        at: format!("{}:{}", s.file, line.line),
                        host: script.host.clone(),
                        command: line.text.clone(),
                        stderr: out.stderr,
                        hint: None,
                    });
                }
                for w in out.stderr.lines().filter(|l| !l.trim().is_empty()) {
                    self.warnings
                        .push(format!("{}:{}: host {}: tc {}: {w}", s.file, line.line, script.host, line.text));
                }
            }
        }
        Ok(())
    }

    fn add_traffic(&mut self, s: &Scenario, host_ix: &dyn Fn(&str) -> u32) -> Result<(), RunError> {
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
                    // What the handshake would measure: propagation both ways plus the
                    // serialisation of a SYN-sized frame on every hop.
                    let base_rtt = path
                        .iter()
                        .map(|&(li, _)| {
                            let l = &s.links[li];
                            2 * (l.delay + l.rate.map_or(0, |r| crate::xmit::wire_ns(74 + ETH_WIRE_OVERHEAD as u64, r)))
                        })
                        .sum::<u64>()
                        .max(1000);
                    for stream in 0..*flows {
                        let id = self.tcp.len() as u32;
                        // iperf3: the client's ephemeral ports count up, one server port per entry.
                        let k = key(40000 + id as u16, 5201 + ti as u16, 6);
                        let rtt = qdisc::Duration(base_rtt);
                        self.tcp.push(TcpFlow::new(ti, stream, src, dst, k, cc, rtt, start, end, id));
                        self.events.at(start, Ev::TcpStart { flow: id });
                    }
                }
                TrafficKind::Udp { rate, size } => {
                    let id = self.udp.len() as u32;
                    let k = key(50000 + id as u16, 5201 + ti as u16, 17);
                    self.udp.push(UdpApp::new(ti, src, dst, k, *rate, *size, start, end, id));
                    self.events.at(start, Ev::Udp { app: id });
                }
                TrafficKind::Ping { interval } => {
                    let id = self.ping.len() as u32;
                    let k = key(0, 0, 1);
                    self.ping.push(PingApp::new(ti, src, dst, k, *interval, start, end, id));
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
    pub fn send(&mut self, h: u32, dst: u32, pkt: Packet) -> Option<qdisc::Enqueued> {
        let iface = self.hosts[h as usize].route[dst as usize]?;
        Some(self.dev_queue_xmit(iface, pkt))
    }

    /// Run the scenario to its end.
    pub fn run(&mut self, mut on_sample: impl FnMut(&mut Sim)) {
        while let Some((at, ev)) = self.events.pop_until(self.end) {
            assert!(at >= self.now, "event {ev:?} at {at} scheduled before now ({})", self.now);
            self.now = at;
            match ev {
                Ev::Arrive { dir } => self.arrive(dir),
                Ev::TxDone { iface } => self.tx_done(iface),
                Ev::Watchdog { iface, txq } => {
                    let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
                    if q.watchdog == Some(at) {
                        q.watchdog = None;
                        self.qdisc_run(iface, txq);
                    }
                }
                Ev::NetTx { iface, txq } => {
                    self.ifaces[iface as usize].txqs[txq as usize].net_tx = false;
                    self.qdisc_run(iface, txq);
                }
                Ev::TcpStart { flow } => self.tcp_start(flow),
                Ev::TcpSender { flow } => self.tcp_sender_timer(flow),
                Ev::TcpReceiver { flow } => self.tcp_receiver_timer(flow),
                Ev::Udp { app } => self.udp_send(app),
                Ev::Ping { app } => self.ping_send(app),
                Ev::Sample => on_sample(self),
            }
        }
        self.now = self.end;
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
        self.receive(host, pkt);
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
