//! The receive side on hosts with CPUs (docs/cpu-model.md, "Receive"), and the two
//! drivers whose transmit is a receive on the same machine: `lo` and a veth pair.
//!
//! ```text
//!  NIC: frame ─► RSS rx queue ─► ring (ethtool -G rx; full: rx_discards)
//!        └─► interrupt (now, or rx-usecs after the first frame) ─► NAPI poll on CPU
//!            (rx queue mod cpus): ≤ 64 packets, GRO merges a run of one flow's
//!            consecutive segments, gro_normal_batch packets go up the stack at once
//!  lo:   loopback_xmit ─► netif_rx ─► backlog of the RPS CPU, else of this CPU
//!  veth: veth_xmit ─► peer has GRO and this end no TSO: the peer's NAPI ring (256
//!        per rx queue), polled on the CPU that scheduled it; full: the tx queue stops
//!        when it has a qdisc (6.16, 6.12.61), noqueue drops (tx_dropped). Otherwise
//!        netif_rx, like lo.
//!  backlog: netdev_max_backlog per CPU (beyond: dropped), process_backlog 64 a poll
//!  up: the device's ingress qdisc (sch_handle_ingress: its filters, mirred to an
//!        ifb, which gives the packet back here unclassified), then ip_rcv
//!  socket: the application reads on its CPU; the skb is freed there, or deferred to
//!        the CPU that allocated it (skb_attempt_defer_free), which frees its list at
//!        its next net_rx_action, or at once when the list reaches skb_defer_max / 2.
//! ```
//!
//! Mirrors: `netif_receive_skb_internal`/`get_rps_cpu`/`enqueue_to_backlog`/
//! `process_backlog` (net/core/dev.c), `napi_gro_receive`/`gro_normal_list`
//! (net/core/gro.c, dev.c), `loopback_xmit` (drivers/net/loopback.c), `veth_xmit`/
//! `veth_xdp_rcv` (drivers/net/veth.c), `skb_attempt_defer_free` (net/core/skbuff.c).
//! BQL on veth follows the patch series of seed 004 (not in any released kernel).
//! Simplification: GRO keeps one list of up to 8 flows per rx queue (the kernel hashes
//! flows into 8 buckets of 8).

use std::collections::VecDeque;

use qdisc::{Instant, Packet};
use qdisc_scenario::scenario::VethBql;

use crate::cpu::{Class, Func, Step, Work};
use crate::event::Ev;
use crate::world::{Payload, Sim};

/// `NAPI_POLL_WEIGHT`: packets per NAPI poll (and per backlog poll, `dev_rx_weight`).
pub const NAPI_WEIGHT: u32 = 64;
/// `VETH_RING_SIZE`: the ptr_ring of each rx queue of a veth in NAPI mode.
pub const VETH_RING: u32 = 256;
/// The time-based BQL revision's default completion interval (`VETH_BQL_COAL_TX_USECS`).
pub const VETH_BQL_TX_USECS: u32 = 100;
/// Largest GRO skb (`gro_max_size` default, `GRO_LEGACY_MAX_SIZE`).
const GRO_MAX: u32 = 65536;
/// Flows GRO holds at once (`MAX_GRO_SKBS`, per bucket; one bucket here).
pub const MAX_GRO_SKBS: usize = 8;

/// Where a receive poll takes its packets from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxSrc {
    /// The NAPI ring of an interface's rx queue (a NIC's, or a veth's in NAPI mode).
    Ring { iface: u32, rxq: u32 },
    /// This CPU's backlog (`process_backlog`).
    Backlog,
}

/// One rx queue of an interface.
pub struct RxQueue {
    pub ring: VecDeque<Packet>,
    /// Its NAPI poll is scheduled (or its interrupt is pending).
    pub scheduled: bool,
    /// RPS: the CPUs of `rps_cpus` (empty: off).
    pub rps: Vec<u32>,
    /// Threaded NAPI (`/sys/class/net/DEV/threaded`): the CPU of its kernel thread.
    pub thread: Option<u32>,
    /// RFS: the queue has a flow table (`rps_flow_cnt` > 0).
    pub rfs: bool,
    /// GRO's list (`napi->gro`): up to [`MAX_GRO_SKBS`] flows' skbs being merged,
    /// oldest first; flushed up the stack when a poll ends.
    pub held: Vec<Packet>,
    /// BQL on veth (time-based): completions not yet reported, and since when.
    pub bql_pkts: u32,
    pub bql_bytes: u32,
    pub bql_since: Instant,
}

impl RxQueue {
    pub fn new() -> RxQueue {
        RxQueue {
            ring: VecDeque::new(),
            scheduled: false,
            rps: Vec::new(),
            thread: None,
            rfs: false,
            held: Vec::new(),
            bql_pkts: 0,
            bql_bytes: 0,
            bql_since: Instant::ZERO,
        }
    }
}

impl Default for RxQueue {
    fn default() -> Self {
        RxQueue::new()
    }
}

impl Sim {
    /// A frame off the wire at NIC `to`: RSS picks the rx queue by flow hash; a full
    /// ring drops it; an idle queue raises its interrupt, at once or `rx-usecs` later.
    pub(crate) fn nic_rx(&mut self, to: u32, pkt: Packet) {
        let i = &mut self.ifaces[to as usize];
        let n = i.rx.len() as u64;
        let rxq = ((pkt.hash as u64 * n) >> 32) as usize;
        let q = &mut i.rx[rxq];
        if q.ring.len() >= i.rx_ring_size as usize {
            i.rx_discards += 1;
            self.take_meta(pkt.id);
            return;
        }
        q.ring.push_back(pkt);
        if !q.scheduled {
            q.scheduled = true;
            match i.rx_usecs {
                0 => self.rx_irq(to, rxq as u32),
                us => {
                    let at = self.now + qdisc::Duration(us as u64 * 1000);
                    self.events.at(at, Ev::RxIrq { iface: to, rxq: rxq as u32 });
                }
            }
        }
    }

    /// The interrupt of `iface`'s rx queue `rxq`: its NAPI poll runs on the CPU the
    /// interrupt is affine to (queue i → CPU i mod cpus, as drivers spread them).
    pub(crate) fn rx_irq(&mut self, iface: u32, rxq: u32) {
        let h = self.ifaces[iface as usize].host;
        let cpus = self.cpus(h).cpus.len() as u32;
        self.napi_schedule(h, rxq % cpus, iface, rxq);
    }

    /// `napi_schedule` from CPU `c`: the poll runs in that CPU's softirq, or — threaded
    /// NAPI — in its kernel thread, wherever the scheduler put it.
    fn napi_schedule(&mut self, h: u32, c: u32, iface: u32, rxq: u32) {
        let w = Work::Poll { src: RxSrc::Ring { iface, rxq }, done: 0 };
        match self.ifaces[iface as usize].rx[rxq as usize].thread {
            Some(t) => self.give(h, t, w, false),
            None => self.give(h, c, w, true),
        }
    }

    /// `ndo_start_xmit` of `lo` or of one end of a veth pair, on the CPU running the
    /// xmit. `Err`: the peer's ring is full and the queue stopped (`NETDEV_TX_BUSY`):
    /// the packet goes back to the qdisc.
    pub(crate) fn local_xmit(&mut self, iface: u32, txq: u32, mut p: Packet) -> Result<(), Packet> {
        let h = self.ifaces[iface as usize].host;
        let c = self.on_cpu.map_or(0, |x| x.1);
        if self.ifaces[iface as usize].ifb {
            // ifb_xmit → ifb_ri_tasklet: a packet mirred redirected here goes back to
            // the device it came from — up its receive path, its ingress hook skipped,
            // if taken at ingress, else to its transmit path; one that was not
            // redirected (a mirror's copy, a packet routed here) is dropped.
            let id = p.id;
            let Some((from, from_ingress)) = self.ifb_from.remove(&id) else {
                self.ifaces[iface as usize].tx_dropped += 1;
                self.take_meta(p.id);
                return Ok(());
            };
            // The tasklet runs outside any mirred nesting.
            let nest = qdisc::classify::action::mirred_nest();
            qdisc::classify::action::set_mirred_nest(Default::default());
            if !from_ingress {
                // Back to the sending device's dev_queue_xmit (its filters' actions
                // skipped once); the tasklet's hop costs no CPU time in the model.
                let v = self.dev_queue_xmit_skb(from, p, true);
                if v == qdisc::Enqueued::Dropped {
                    self.take_meta(id);
                }
                qdisc::classify::action::set_mirred_nest(nest);
                return Ok(());
            }
            self.skip_ingress.insert(p.id);
            if self.has_cpus(h) {
                self.netif_rx(h, c, from, 0, p);
            } else if let Some(p) = self.ingress_hook(from, p) {
                self.ip_rcv(h, p);
            }
            qdisc::classify::action::set_mirred_nest(nest);
            return Ok(());
        }
        let Some(peer) = self.ifaces[iface as usize].peer else {
            // loopback_xmit: the skb leaves its socket's accounting, then __netif_rx.
            self.orphan(&mut p);
            self.netif_rx(h, c, iface, 0, p);
            return Ok(());
        };
        let nrx = self.ifaces[peer as usize].rx.len() as u32;
        // The peer's rx queue of the same index; none: the backlog.
        let rxq = (txq < nrx).then_some(txq);
        // veth_skb_is_eligible_for_gro: the peer's NAPI ring only when the peer has GRO
        // on and this end does not do TSO (UDP's fraglist GRO and XDP: not modelled).
        let napi = self.ifaces[peer as usize].gro && !self.ifaces[iface as usize].tso;
        let Some(rxq) = rxq.filter(|_| napi) else {
            // veth_forward_skb without NAPI: __netif_rx on this CPU.
            self.orphan(&mut p);
            self.netif_rx(h, c, peer, txq.min(nrx.saturating_sub(1)), p);
            return Ok(());
        };
        let full = self.ifaces[peer as usize].rx[rxq as usize].ring.len() >= VETH_RING as usize;
        if full {
            // 6.16 and 6.12.61 on ("veth: apply qdisc backpressure on full ptr_ring"):
            // a tx queue with a qdisc stops and the packet is requeued; noqueue drops.
            if self.device(iface).root.kind() != "noqueue" {
                self.ifaces[iface as usize].txqs[txq as usize].drv_stopped = true;
                return Err(p);
            }
            self.ifaces[iface as usize].tx_dropped += 1;
            self.take_meta(p.id);
            return Ok(());
        }
        let len = p.len;
        self.orphan(&mut p);
        let i = &mut self.ifaces[iface as usize];
        if i.veth_bql != VethBql::Off {
            let tq = &mut i.txqs[txq as usize];
            if tq.dql.queued(len) {
                tq.stopped = true;
            }
            tq.bql_peak = tq.bql_peak.max(tq.dql.inflight());
        }
        let q = &mut self.ifaces[peer as usize].rx[rxq as usize];
        q.ring.push_back(p);
        if !q.scheduled {
            // __veth_xdp_flush → napi_schedule: the poll runs on this CPU (or its thread).
            q.scheduled = true;
            self.napi_schedule(h, c, peer, rxq);
        }
        Ok(())
    }

    /// `skb_orphan`: the socket gets its send-buffer credit back (TSQ).
    pub(crate) fn orphan(&mut self, p: &mut Packet) {
        if p.orphan() {
            if let Some(id) = p.sk.as_ref().map(|s| s.id) {
                self.socket_released(id);
            }
        }
    }

    /// `netif_rx` of a packet received by `iface` on rx queue `rxq`, on CPU `c`: RPS
    /// picks the CPU whose backlog takes it (by flow hash among `rps_cpus`), else this one.
    pub(crate) fn netif_rx(&mut self, h: u32, c: u32, iface: u32, rxq: u32, p: Packet) {
        let target = self.rps_cpu(h, iface, rxq, &p).unwrap_or(c);
        self.enqueue_to_backlog(h, c, target, iface, p);
    }

    /// `get_rps_cpu`: with RFS (the global socket flow table and the queue's flow
    /// table set) the CPU the flow's socket was last used on — its thread's; else the
    /// RPS map's CPU for the flow hash; `None`: neither applies. (RFS's wait for the old
    /// CPU's backlog to drain before a flow moves is not modelled: threads do not move.)
    fn rps_cpu(&mut self, h: u32, iface: u32, rxq: u32, p: &Packet) -> Option<u32> {
        let q = &self.ifaces[iface as usize].rx[rxq as usize];
        if q.rfs && self.cpus(h).rfs {
            if let Some(cpu) = self.socket_cpu(self.ifaces[iface as usize].host, p.id) {
                return Some(cpu);
            }
        }
        let rps = &self.ifaces[iface as usize].rx[rxq as usize].rps;
        (!rps.is_empty()).then(|| rps[((p.hash as u64 * rps.len() as u64) >> 32) as usize])
    }

    /// The CPU of the thread whose socket on host `host` takes packet `id`
    /// (`sock_rps_record_flow`: its last recvmsg or sendmsg), if it has one.
    fn socket_cpu(&self, host: u32, id: u64) -> Option<u32> {
        let m = self.metas.get(id as usize)?.as_ref()?;
        if m.dst != host {
            return None;
        }
        match &m.payload {
            Payload::Tcp { flow, .. } => Some(self.tcp[*flow as usize].rcv_cpu),
            Payload::TcpAck { flow, .. } => Some(self.tcp[*flow as usize].snd_cpu),
            Payload::Hs { conn, .. } => Some(self.conns[*conn as usize].cpu_of(host)),
            Payload::Udp { app, .. } => {
                Some(self.udp[*app as usize].rcv_cpu).filter(|_| !self.udp[*app as usize].pktgen)
            }
            Payload::Ping { app, reply: true, .. } => Some(self.ping[*app as usize].cpu),
            Payload::Ping { reply: false, .. } => None,
        }
    }

    /// `enqueue_to_backlog` from CPU `c` to CPU `target`'s backlog: beyond
    /// `netdev_max_backlog` the packet is dropped; another CPU's idle backlog gets an IPI.
    fn enqueue_to_backlog(&mut self, h: u32, c: u32, target: u32, iface: u32, p: Packet) {
        let hc = self.cpus(h);
        let (max, cost, ipi) = (hc.max_backlog, hc.costs.netif_rx, hc.costs.ipi);
        let class = hc.cpus[c as usize].cur_class;
        hc.charge(c, class, Func::NetifRx as u16, cost);
        self.inline_ns += cost;
        // The kernel runs a thread's own CPU's backlog at each local_bh_enable on the
        // way back from the xmit: what a thread queues to its own CPU never piles up.
        let inline = target == c && class != Class::Softirq;
        let t = &mut self.cpus(h).cpus[target as usize];
        if t.backlog.len() > max as usize && !inline {
            self.cpus(h).backlog_dropped += 1;
            self.take_meta(p.id);
            return;
        }
        t.backlog.push_back((iface, p));
        if !std::mem::replace(&mut t.backlog_scheduled, true) {
            if target != c {
                self.cpus(h).charge(c, class, Func::Ipi as u16, ipi);
                self.inline_ns += ipi;
            }
            self.give(h, target, Work::Poll { src: RxSrc::Backlog, done: 0 }, true);
        }
    }

    /// A receive poll on CPU `c` of machine `h`: NAPI of a ring (≤ 64 packets, GRO,
    /// batches of `gro_normal_batch` delivered together) or this CPU's backlog (≤ 64,
    /// one at a time). A poll with packets left after 64 is queued again behind the
    /// other softirq work. `net_rx_action` first frees the skbs deferred to this CPU.
    pub fn rx_poll(&mut self, h: u32, c: u32, src: RxSrc, mut done: u32) -> Step {
        let mut ns = if done == 0 { self.defer_flush(h, c) } else { 0 };
        let (gro_cost, batch_max, weight) = {
            let hc = self.cpus(h);
            match src {
                RxSrc::Ring { .. } => (hc.costs.napi_gro_receive, hc.gro_batch, NAPI_WEIGHT),
                RxSrc::Backlog => (hc.costs.napi_gro_receive, 1, hc.rx_quota),
            }
        };
        let mut batch: VecDeque<(u32, Packet)> = VecDeque::new();
        let mut last = false;
        if let RxSrc::Ring { iface, rxq } = src {
            self.veth_bql_due(h, c, iface, rxq);
        }
        loop {
            if batch.len() as u32 >= batch_max {
                break;
            }
            if done >= weight {
                // Budget spent: with packets left, polled again later.
                if self.rx_pending(h, c, src) {
                    match src {
                        RxSrc::Ring { iface, rxq } => self.napi_schedule(h, c, iface, rxq),
                        RxSrc::Backlog => self.give(h, c, Work::Poll { src, done: 0 }, true),
                    }
                    if let RxSrc::Ring { iface, rxq } = src {
                        self.veth_poll_end(h, c, iface, rxq);
                    }
                } else {
                    self.rx_idle(h, c, src);
                }
                last = true;
                break;
            }
            let Some((iface, pkt)) = self.rx_take(h, c, src) else {
                self.rx_idle(h, c, src);
                last = true;
                break;
            };
            done += 1;
            let (func, calls) = match src {
                // A NIC receives a train a hop delivered whole frame by frame: one
                // napi_gro_receive (and one of the budget) per segment; a veth's ring
                // holds skbs.
                RxSrc::Ring { iface, .. } if self.ifaces[iface as usize].peer.is_none() => {
                    (Func::NapiGroReceive, pkt.gso_segs.max(1) as u32)
                }
                RxSrc::Ring { .. } => (Func::NapiGroReceive, 1),
                RxSrc::Backlog => (Func::ProcessBacklog, 1),
            };
            done += calls - 1;
            let cost = gro_cost * calls as u64;
            self.cpus(h).charge(c, Class::Softirq, func as u16, cost);
            ns += cost;
            let RxSrc::Ring { iface: ri, rxq } = src else {
                batch.push_back((iface, pkt));
                continue;
            };
            if self.ifaces[ri as usize].peer.is_none() {
                // A NIC's skb is built on the polling CPU (a veth's is the sender's).
                if let Some(m) = self.metas.get_mut(pkt.id as usize).and_then(|m| m.as_mut()) {
                    m.alloc = c;
                }
            }
            self.veth_bql_consumed(h, c, ri, rxq, pkt.len);
            ns += std::mem::take(&mut self.inline_ns);
            let up = if self.ifaces[ri as usize].gro { self.gro_receive(ri, rxq, pkt) } else { Some(pkt) };
            if let Some(p) = up {
                ns += self.netif_receive(h, c, ri, rxq, p, &mut batch);
            }
        }
        if let (true, RxSrc::Ring { iface, rxq }) = (last, src) {
            // The poll is over (napi_complete_done, or its budget spent with HZ < 1000):
            // GRO flushes every flow it holds.
            for p in std::mem::take(&mut self.ifaces[iface as usize].rx[rxq as usize].held) {
                ns += self.netif_receive(h, c, iface, rxq, p, &mut batch);
            }
        }
        if batch.is_empty() {
            return if last { Step::Done(ns) } else { self.cont_poll(h, c, src, done, ns) };
        }
        self.cpus(h).cpus[c as usize].cur = Some(Work::Deliver { src, done, batch: batch.into(), last });
        Step::Busy(ns)
    }

    fn cont_poll(&mut self, h: u32, c: u32, src: RxSrc, done: u32, ns: u64) -> Step {
        self.cpus(h).cpus[c as usize].cur = Some(Work::Poll { src, done });
        Step::Busy(ns)
    }

    /// The next packet of a poll's source, with the interface that received it.
    fn rx_take(&mut self, h: u32, c: u32, src: RxSrc) -> Option<(u32, Packet)> {
        match src {
            RxSrc::Ring { iface, rxq } => {
                self.ifaces[iface as usize].rx[rxq as usize].ring.pop_front().map(|p| (iface, p))
            }
            RxSrc::Backlog => self.cpus(h).cpus[c as usize].backlog.pop_front(),
        }
    }

    fn rx_pending(&mut self, h: u32, c: u32, src: RxSrc) -> bool {
        match src {
            RxSrc::Ring { iface, rxq } => !self.ifaces[iface as usize].rx[rxq as usize].ring.is_empty(),
            RxSrc::Backlog => !self.cpus(h).cpus[c as usize].backlog.is_empty(),
        }
    }

    /// The source is empty: `napi_complete_done` (a veth's end of poll: BQL
    /// completions, a queue stopped on a full ring woken).
    fn rx_idle(&mut self, h: u32, c: u32, src: RxSrc) {
        match src {
            RxSrc::Ring { iface, rxq } => {
                self.ifaces[iface as usize].rx[rxq as usize].scheduled = false;
                self.veth_poll_end(h, c, iface, rxq);
            }
            RxSrc::Backlog => self.cpus(h).cpus[c as usize].backlog_scheduled = false,
        }
    }

    /// `napi_gro_receive` of `p` by `iface`'s rx queue `rxq`: a TCP data segment that
    /// continues the payload of a flow GRO holds (next sequence number, no larger than
    /// the held skb's segments, which are all full-sized; same dsfield and millisecond
    /// timestamp; no CWR; up to 64 KiB) is merged into it, and a short one ends it
    /// (flushed: PSH-like); one that does not continue it flushes the held skb and is
    /// held instead; a new flow is held, the oldest flushed when 8 are. Anything else
    /// goes up at once. Returns what goes up the stack now.
    fn gro_receive(&mut self, iface: u32, rxq: u32, p: Packet) -> Option<Packet> {
        let tcp_seg = |sim: &Sim, id: u64| match sim.metas.get(id as usize) {
            Some(Some(crate::world::Meta { payload: Payload::Tcp { flow, seg }, .. })) if seg.len > 0 => {
                Some((*flow, seg.clone()))
            }
            _ => None,
        };
        let Some((flow, s)) = tcp_seg(self, p.id).filter(|(_, s)| !s.cwr) else { return Some(p) };
        let held_at = self.ifaces[iface as usize].rx[rxq as usize]
            .held
            .iter()
            .position(|h| tcp_seg(self, h.id).is_some_and(|(f, _)| f == flow));
        let Some(i) = held_at else {
            let held = &mut self.ifaces[iface as usize].rx[rxq as usize].held;
            let out = (held.len() >= MAX_GRO_SKBS).then(|| held.remove(0));
            held.push(p);
            return out;
        };
        let hp = &self.ifaces[iface as usize].rx[rxq as usize].held[i];
        let (_, mut seg) = tcp_seg(self, hp.id).expect("held TCP");
        let size = seg.len / seg.segs.max(1) as u32;
        let fits = s.seq == seg.end()
            && seg.len % size == 0
            && s.len.div_ceil(s.segs.max(1) as u32) <= size
            && p.tos == hp.tos
            && s.sent_at.as_nanos() / 1_000_000 == seg.sent_at.as_nanos() / 1_000_000
            && hp.len + p.len <= GRO_MAX;
        let held = &mut self.ifaces[iface as usize].rx[rxq as usize].held;
        if !fits {
            // Not the next part of the held skb: it goes up, the new one is held.
            let old = held.remove(i);
            held.push(p);
            return Some(old);
        }
        let mut merged = held.remove(i);
        let short = s.len < size * s.segs.max(1) as u32;
        seg.len += s.len;
        seg.segs += s.segs;
        seg.retransmit |= s.retransmit;
        merged.len += p.len;
        merged.gso_segs += p.gso_segs.max(1);
        self.take_meta(p.id);
        if let Some(Some(m)) = self.metas.get_mut(merged.id as usize) {
            m.payload = Payload::Tcp { flow, seg };
        }
        if short {
            return Some(merged);
        }
        self.ifaces[iface as usize].rx[rxq as usize].held.insert(i, merged);
        None
    }

    /// A packet off rx queue `rxq` of `iface` goes up: to the RPS/RFS CPU's backlog
    /// (even this one's), or into this poll's batch. Returns the cost spent here.
    fn netif_receive(
        &mut self,
        h: u32,
        c: u32,
        iface: u32,
        rxq: u32,
        p: Packet,
        batch: &mut VecDeque<(u32, Packet)>,
    ) -> u64 {
        match self.rps_cpu(h, iface, rxq, &p) {
            Some(target) => {
                self.enqueue_to_backlog(h, c, target, iface, p);
                std::mem::take(&mut self.inline_ns)
            }
            None => {
                batch.push_back((iface, p));
                0
            }
        }
    }

    /// Packets a poll took go up the stack (`gro_normal_list` / `__netif_receive_skb`):
    /// `ip_rcv`, then forwarding (the xmit runs next on this CPU, the batch after it)
    /// or the protocol's receive into its socket.
    pub fn rx_deliver(
        &mut self,
        h: u32,
        c: u32,
        src: RxSrc,
        done: u32,
        mut batch: Vec<(u32, Packet)>,
        last: bool,
    ) -> Step {
        let k = &self.cpus(h).costs;
        let (ip, fwd, tcp_rcv, udp_rcv, icmp_rcv) = (k.ip_rcv, k.ip_forward, k.tcp_v4_rcv, k.udp_rcv, k.icmp_rcv);
        let mut ns = 0;
        batch.reverse();
        while let Some((iface, pkt)) = batch.pop() {
            let Some(pkt) = self.ingress_hook(iface, pkt) else { continue };
            let host = self.ifaces[iface as usize].host;
            self.cpus(h).charge(c, Class::Softirq, Func::IpRcv as u16, ip);
            ns += ip;
            if self.otherhost_dropped(pkt.id) {
                continue;
            }
            let Some(meta) = self.metas.get(pkt.id as usize).and_then(|m| m.as_ref()) else { continue };
            let rest = |mut batch: Vec<(u32, Packet)>| {
                if batch.is_empty() {
                    if last {
                        None
                    } else {
                        Some(Work::Poll { src, done })
                    }
                } else {
                    batch.reverse();
                    Some(Work::Deliver { src, done, batch, last })
                }
            };
            if meta.dst != host {
                let dst = meta.dst;
                self.cpus(h).charge(c, Class::Softirq, Func::IpForward as u16, fwd);
                ns += fwd;
                let Some(out) = self.hosts[host as usize].route[dst as usize] else { continue };
                let p = crate::xmit::onward(&pkt, pkt.id, pkt.len, pkt.gso_segs, true);
                let t = crate::cpu_xmit::XmitTask::send(out, p, crate::cpu_xmit::Then::Resume);
                let cpu = &mut self.cpus(h).cpus[c as usize];
                cpu.resume = rest(batch);
                cpu.cur = Some(Work::Xmit(t));
                return Step::Busy(ns + self.xmit_cost(h, c));
            }
            let (f, cost) = match meta.payload {
                Payload::Tcp { .. } | Payload::TcpAck { .. } | Payload::Hs { .. } => (Func::TcpV4Rcv, tcp_rcv),
                Payload::Udp { .. } => (Func::UdpRcv, udp_rcv),
                Payload::Ping { reply: false, .. } => (Func::IcmpRcv, icmp_rcv),
                Payload::Ping { reply: true, .. } => (Func::UdpRcv, udp_rcv),
            };
            self.cpus(h).charge(c, Class::Softirq, f as u16, cost);
            ns += cost;
            self.receive(host, pkt);
            ns += std::mem::take(&mut self.inline_ns);
            if let Some(Work::Xmit(t)) = self.cpus(h).cpus[c as usize].cur.as_mut() {
                // An echo reply leaves from here; the batch goes on after it.
                t.then = crate::cpu_xmit::Then::Resume;
                let r = rest(batch);
                self.cpus(h).cpus[c as usize].resume = r;
                return Step::Busy(ns);
            }
        }
        if last {
            Step::Done(ns)
        } else {
            self.cont_poll(h, c, src, done, ns)
        }
    }

    /// A socket's reader on CPU `c` consumed a received skb of `bytes` payload that
    /// CPU `alloc` allocated: `skb_attempt_defer_free` — freed by the reader when it
    /// was allocated on its CPU (or deferral is off, or the allocating CPU's list is
    /// full), else put on that CPU's list, which is kicked (an IPI raising its NET_RX)
    /// when it passes `skb_defer_max / 2`. Returns the reader's cost: (free, IPI).
    pub(crate) fn skb_consumed(&mut self, h: u32, c: u32, alloc: u32, bytes: u64) -> (u64, u64) {
        let hc = self.cpus(h);
        let cost = hc.costs.free(bytes);
        let (max, ipi) = (hc.defer_max, hc.costs.ipi);
        if alloc == c || alloc as usize >= hc.cpus.len() || hc.cpus[alloc as usize].defer_count >= max {
            return (cost, 0);
        }
        let owner = &mut hc.cpus[alloc as usize];
        let kick = owner.defer_count == max / 2;
        owner.defer_count += 1;
        owner.defer_ns += cost;
        if kick {
            self.give(h, alloc, Work::DeferFlush, true);
            return (0, ipi);
        }
        (0, 0)
    }

    /// `skb_defer_free_flush` on CPU `c`: the skbs other CPUs deferred to it are freed.
    pub fn defer_flush(&mut self, h: u32, c: u32) -> u64 {
        let hc = self.cpus(h);
        let cpu = &mut hc.cpus[c as usize];
        cpu.defer_count = 0;
        let ns = std::mem::take(&mut cpu.defer_ns);
        hc.charge(c, Class::Softirq, Func::KfreeSkb as u16, ns);
        ns
    }

    /// BQL on a veth (patch series, seed 004): the peer's NAPI consumed a packet of
    /// `len` bytes sent by the tx queue feeding rx queue `rxq` of `iface`.
    fn veth_bql_consumed(&mut self, h: u32, c: u32, iface: u32, rxq: u32, len: u32) {
        let Some(peer) = self.ifaces[iface as usize].peer else { return };
        if self.ifaces[peer as usize].veth_bql == VethBql::Off {
            return;
        }
        let now = self.now;
        let q = &mut self.ifaces[iface as usize].rx[rxq as usize];
        if q.bql_pkts == 0 {
            q.bql_since = now;
        }
        q.bql_pkts += 1;
        q.bql_bytes += len;
        if self.ifaces[peer as usize].veth_bql == VethBql::Time {
            self.veth_bql_due(h, c, iface, rxq);
        }
    }

    /// Time-based BQL: report the completions gathered once `tx-usecs` have passed
    /// since the first of them (BQL's bookkeeping costs nothing of its own: it is in
    /// the poll's per-packet cost).
    fn veth_bql_due(&mut self, h: u32, c: u32, iface: u32, rxq: u32) {
        let Some(peer) = self.ifaces[iface as usize].peer else { return };
        if self.ifaces[peer as usize].veth_bql != VethBql::Time {
            return;
        }
        let us = self.ifaces[iface as usize].tx_usecs.unwrap_or(VETH_BQL_TX_USECS) as u64;
        let q = &self.ifaces[iface as usize].rx[rxq as usize];
        if q.bql_pkts > 0 && self.now.as_nanos() >= q.bql_since.as_nanos() + us * 1000 {
            self.veth_bql_report(h, c, iface, rxq);
        }
    }

    /// The peer's tx queue that feeds rx queue `rxq` of veth end `iface` (veth_xmit
    /// puts tx queue i's packets on rx queue i).
    fn feeding_txq(&self, iface: u32, rxq: u32) -> (u32, u32) {
        let peer = self.ifaces[iface as usize].peer.expect("a veth pair");
        (peer, rxq % (self.ifaces[peer as usize].txqs.len() as u32).max(1))
    }

    /// `netdev_tx_completed_queue` on the peer's tx queue for what rx queue `rxq`
    /// consumed; a queue BQL stopped is woken when the limit allows.
    fn veth_bql_report(&mut self, h: u32, c: u32, iface: u32, rxq: u32) {
        let (peer, txq) = self.feeding_txq(iface, rxq);
        let now = self.now;
        let q = &mut self.ifaces[iface as usize].rx[rxq as usize];
        let bytes = std::mem::take(&mut q.bql_bytes);
        q.bql_pkts = 0;
        let tq = &mut self.ifaces[peer as usize].txqs[txq as usize];
        tq.dql.completed(bytes, now);
        if tq.stopped && tq.dql.avail() >= 0 {
            tq.stopped = false;
            self.wake_txq(h, c, peer, txq);
        }
    }

    /// The end of a veth NAPI poll: v5 BQL reports what the poll consumed; the
    /// time-based revision reports early only when the ring is empty while BQL
    /// stopped the queue (no later poll would); a queue stopped on a full ring is woken.
    fn veth_poll_end(&mut self, h: u32, c: u32, iface: u32, rxq: u32) {
        if self.ifaces[iface as usize].peer.is_none() {
            return;
        }
        let (peer, txq) = self.feeding_txq(iface, rxq);
        let q = &self.ifaces[iface as usize].rx[rxq as usize];
        let (pending, empty) = (q.bql_pkts > 0, q.ring.is_empty());
        match self.ifaces[peer as usize].veth_bql {
            VethBql::Bytes if pending => self.veth_bql_report(h, c, iface, rxq),
            VethBql::Time if pending && empty && self.ifaces[peer as usize].txqs[txq as usize].stopped => {
                self.veth_bql_report(h, c, iface, rxq)
            }
            _ => {}
        }
        let tq = &mut self.ifaces[peer as usize].txqs[txq as usize];
        if tq.drv_stopped {
            tq.drv_stopped = false;
            self.wake_txq(h, c, peer, txq);
        }
    }
}
