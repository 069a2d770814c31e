//! The Linux transmit path of one interface (§2–3 of the reference):
//!
//! ```text
//! dev_queue_xmit ─► tx queue (skb_tx_hash) ─► __dev_xmit_skb ─┬─ bypass (empty, idle) ─┐
//!                                                             └─ qdisc enqueue          │
//!        __qdisc_run: dequeue while the txq runs, ≤ 64 per run ─► driver ring ◄─────────┘
//!        BQL: dql_queued on hand-over, XOFF when over the limit; the wire serialises
//!        the ring in order; TX completion → dql_completed → XON → __qdisc_run again
//! ```
//!
//! * A qdisc that answers `Throttled { until }` gets a watchdog event at `until`
//!   (`qdisc_watchdog_schedule_ns`).
//! * When the quota of 64 packets is used up the queue is run again at the same instant
//!   after already-scheduled events (the NET_TX softirq).
//! * A GSO skb is one ring entry and one BQL charge; the NIC segments it (TSO): its
//!   segments leave back to back and arrive one by one — at a router, which forwards
//!   them one by one. At their final destination the receiving NIC merges them again
//!   (GRO) and the train is delivered as one skb when its last segment is in (on a
//!   lossless link; with random loss every segment travels alone).
//! * TX completion happens when the frame leaves the wire (no interrupt coalescing);
//!   freeing the skb gives its truesize back to the socket (TSQ) and the sender may
//!   send more.
//!
//! Simplifications: with several tx queues but a root qdisc other than mq, all
//! queues share txq 0's BQL state; no XPS; no requeues (BQL stops a queue long before
//! its ring is full).

use qdisc::tree::Xmit;
use qdisc::{Dequeued, Enqueued, Instant, Packet};

use crate::event::Ev;
use crate::world::{Meta, Payload, Sim, ETH_WIRE_OVERHEAD, QDISC_QUOTA, TX_RING};

impl Sim {
    /// `dev_queue_xmit` on interface `iface`: the qdisc's verdict for the packet.
    pub fn dev_queue_xmit(&mut self, iface: u32, pkt: Packet) -> Enqueued {
        self.packets += 1;
        let now = self.now;
        let dev = self.device(iface);
        let txq = if dev.per_txq_qdiscs() { dev.txq_of(&pkt) as u32 } else { 0 };
        let idle = self.txq_can_take(iface, txq);
        match self.device(iface).xmit(pkt, now, idle) {
            Xmit::Direct(p) => {
                self.to_driver(iface, txq, p);
                Enqueued::Success
            }
            Xmit::Queued(v) => {
                self.qdisc_run(iface, txq);
                v
            }
        }
    }

    /// The driver would take a packet on this queue now.
    fn txq_can_take(&self, iface: u32, txq: u32) -> bool {
        let q = &self.ifaces[iface as usize].txqs[txq as usize];
        !q.stopped && q.in_ring < TX_RING
    }

    /// `__qdisc_run` for one tx queue.
    pub fn qdisc_run(&mut self, iface: u32, txq: u32) {
        let now = self.now;
        for _ in 0..QDISC_QUOTA {
            if !self.txq_can_take(iface, txq) {
                return;
            }
            match self.device(iface).dequeue_txq(txq as usize, now) {
                Dequeued::Packet(p) => self.to_driver(iface, txq, p),
                Dequeued::Empty => return,
                Dequeued::Throttled { until } => {
                    let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
                    if q.watchdog.is_none_or(|w| until < w || w < now) {
                        q.watchdog = Some(until);
                        self.events.at(until.max(now), Ev::Watchdog { iface, txq });
                    }
                    return;
                }
            }
        }
        let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
        if !q.net_tx {
            q.net_tx = true;
            self.events.at(now, Ev::NetTx { iface, txq });
        }
    }

    /// `ndo_start_xmit` + `netdev_tx_sent_queue`.
    fn to_driver(&mut self, iface: u32, txq: u32, p: Packet) {
        let i = &mut self.ifaces[iface as usize];
        let q = &mut i.txqs[txq as usize];
        q.in_ring += 1;
        if i.rate.is_some() && q.dql.queued(p.len) {
            q.stopped = true;
        }
        i.ring.push_back((txq, p));
        if i.on_wire.is_none() {
            self.start_wire(iface);
        }
    }

    /// Put the next ring entry on the wire.
    fn start_wire(&mut self, iface: u32) {
        let now = self.now;
        let i = &mut self.ifaces[iface as usize];
        let Some((txq, p)) = i.ring.pop_front() else { return };
        let ns = match i.rate {
            Some(rate) => wire_ns(p.len as u64 + framing(i.veth) * p.gso_segs as u64, rate),
            None => 0,
        };
        i.on_wire = Some((txq, p, now));
        self.events.at(now + qdisc::Duration(ns), Ev::TxDone { iface });
    }

    /// The frame on the wire is out: its segments fly, the driver completes it.
    pub fn tx_done(&mut self, iface: u32) {
        let now = self.now;
        let Some((txq, mut p, began)) = self.ifaces[iface as usize].on_wire.take() else { return };
        let i = &self.ifaces[iface as usize];
        let (out, rate, veth) = (i.out, i.rate, i.veth);
        self.emit_segments(out, rate, &p, began, veth);
        let h = self.ifaces[iface as usize].host;
        if let Some(cpus) = self.hosts[h as usize].cpu.as_ref().map(|c| c.cpus.len() as u32) {
            // The completion interrupt of queue i is affine to CPU i mod cpus.
            if !self.ifaces[iface as usize].ring.is_empty() {
                self.start_wire(iface);
            }
            let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
            q.completed.push_back(p);
            if !q.tx_poll {
                q.tx_poll = true;
                self.give(h, txq % cpus, crate::cpu::Work::TxPoll { iface, txq }, true);
            }
            return;
        }
        // TX completion: BQL, then free the skb (TSQ credit back to its socket).
        let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
        q.in_ring -= 1;
        if rate.is_some() {
            q.dql.completed(p.len, now);
            if q.stopped && q.dql.avail() >= 0 {
                q.stopped = false;
            }
        }
        let owner = if p.orphan() { p.sk.as_ref().map(|s| s.id) } else { None };
        drop(p);
        if !self.ifaces[iface as usize].ring.is_empty() {
            self.start_wire(iface);
        }
        self.qdisc_run(iface, txq);
        if let Some(id) = owner {
            self.socket_released(id);
        }
    }

    /// Segment a (GSO) skb into wire frames and put them on link direction `out`.
    fn emit_segments(&mut self, out: u32, rate: Option<u64>, p: &Packet, began: Instant, veth: bool) {
        let d = &self.dirs[out as usize];
        let last_hop = self.metas.get(p.id as usize).and_then(|m| m.as_ref()).map(|m| m.dst)
            == Some(self.ifaces[d.to as usize].host);
        // A veth hands the GSO skb over whole. A NIC segments it (TSO), but at the
        // destination GRO merges the train again: deliver it as one skb when its last
        // byte is in (on a lossless hop; otherwise every segment takes its chance).
        if p.gso_segs > 1 && (veth || (last_hop && d.loss == 0.0)) {
            if d.loss > 0.0 && self.rng.next_f64() < d.loss {
                self.dirs[out as usize].lost += 1;
                self.take_meta(p.id);
                return;
            }
            let ns = rate.map_or(0, |r| wire_ns(p.len as u64 + framing(veth) * p.gso_segs as u64, r));
            let arrive = began + qdisc::Duration(ns + d.delay);
            self.fly(out, arrive, onward(p, p.id, p.len, p.gso_segs, !last_hop));
            return;
        }
        let frames: Vec<(u32, u64)> = if p.gso_segs <= 1 {
            vec![(p.len, p.id)]
        } else {
            // Only TCP builds GSO skbs: TSO cuts its payload into MSS-sized segments.
            let meta = self.metas[p.id as usize].clone().expect("a GSO skb has its meta");
            let Payload::Tcp { flow, seg } = &meta.payload else { unreachable!("GSO is TCP only") };
            let mss = self.tcp[*flow as usize].mss;
            let frames = seg
                .split(mss)
                .map(|s| {
                    let len = s.wire_len();
                    let m = Meta { payload: Payload::Tcp { flow: *flow, seg: s }, ..meta.clone() };
                    (len, self.new_meta(m))
                })
                .collect();
            self.take_meta(p.id);
            frames
        };
        let delay = self.dirs[out as usize].delay;
        let mut t = began;
        for (len, id) in frames {
            if let Some(rate) = rate {
                t = t + qdisc::Duration(wire_ns(len as u64 + framing(veth), rate));
            }
            let d = &self.dirs[out as usize];
            if d.loss > 0.0 && self.rng.next_f64() < d.loss {
                self.dirs[out as usize].lost += 1;
                self.take_meta(id);
                continue;
            }
            // Emitted at the end of the skb's serialisation: a segment that would be in
            // already (no propagation delay) arrives now, never in the past.
            let arrive = (t + qdisc::Duration(delay)).max(self.now);
            self.fly(out, arrive, onward(p, id, len, 1, !last_hop));
        }
    }
}

impl Sim {
    /// A frame on link direction `out`, arriving at `arrive` (frames of one direction
    /// arrive in order, so only the head has an event).
    fn fly(&mut self, out: u32, arrive: Instant, f: Packet) {
        let d = &mut self.dirs[out as usize];
        if d.frames.is_empty() {
            self.events.at(arrive, Ev::Arrive { dir: out });
        }
        d.frames.push_back((arrive, f));
    }
}

/// The skb the next hop builds for `p`'s bytes: `len` bytes in `segs` segments, the
/// same dsfield and flow hash, no socket; the 5-tuple only where a qdisc may classify
/// it again (`keep_flow`: not at the destination, which needs only the meta `id`).
pub fn onward(p: &Packet, id: u64, len: u32, segs: u16, keep_flow: bool) -> Packet {
    let mut f = Packet::new(id, len);
    f.gso_segs = segs;
    f.tos = p.tos;
    f.hash = p.hash;
    if keep_flow {
        f.flow = p.flow.clone();
    }
    f
}

/// Bytes a frame takes on the wire beyond its length: Ethernet framing on a NIC,
/// nothing on a shaped veth port (tbf and netem count the skb's length).
fn framing(veth: bool) -> u64 {
    if veth {
        0
    } else {
        ETH_WIRE_OVERHEAD as u64
    }
}

/// Nanoseconds to serialise `bytes` at `rate` bytes/s, rounded up.
pub fn wire_ns(bytes: u64, rate: u64) -> u64 {
    ((bytes as u128 * 1_000_000_000).div_ceil(rate as u128)) as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn serialisation_time() {
        // 1538 wire bytes at 1 Gbit/s (125 MB/s) = 12.304 µs.
        assert_eq!(super::wire_ns(1538, 125_000_000), 12_304);
        assert_eq!(super::wire_ns(1, 3), 333_333_334);
    }
}

// ---------------------------------------------------------------------------------
// The transmit path on hosts with CPUs (docs/cpu-model.md): the same steps as above,
// run by a CPU in virtual time, with the locks the kernel takes.

use crate::cpu::{Func, Step, Work};

/// After an xmit: what the thread that sent the packet does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Nothing,
    /// An unlimited UDP sender loops: its next datagram.
    UdpNext(u32),
    /// A NAPI poll forwarded (or answered) a packet: it goes on with the rest.
    Napi {
        iface: u32,
        rxq: u32,
        done: u32,
    },
}

#[derive(Debug)]
enum Stage {
    /// `netdev_core_pick_tx` and the checks before the qdisc.
    Pick,
    /// Queue on `q->busylock` (the qdisc was running: contended).
    TakeBusylock,
    /// Take the root lock, then enqueue.
    TakeRoot,
    /// Waiting for / holding `q->busylock` (the qdisc was running: contended).
    Busylock,
    /// Holding the root lock: enqueue (or bypass) and try to become the owner.
    Enqueue,
    /// The owner, holding the root lock (none for NOLOCK/noqueue): dequeue.
    Dequeue,
    /// Drop the root lock, take the tx queue's `_xmit_lock`.
    Driver(Packet),
    /// Holding the `_xmit_lock`: `ndo_start_xmit`.
    Start(u32, Packet),
    /// Release the `_xmit_lock`, retake the root lock.
    Sent(u32),
    /// Holding the root lock again after a send.
    Retaken,
    /// `qdisc_run_end` and unlock.
    Finish,
}

/// A `dev_queue_xmit` (or, without a packet, a NET_TX run of a qdisc) in progress on
/// a CPU.
pub struct XmitTask {
    pub iface: u32,
    /// The tx queue picked for the packet; the qdisc's queue (0 unless mq) is `qd`.
    txq: u32,
    qd: u32,
    pkt: Option<Packet>,
    stage: Stage,
    busylock: bool,
    quota: u32,
    /// `TCQ_F_NOLOCK` (pfifo_fast) or noqueue: no root lock.
    nolock: bool,
    pub then: Then,
}

impl XmitTask {
    /// The caller's step includes `dev_queue_xmit`'s cost ([`Sim::xmit_cost`]).
    pub fn send(iface: u32, pkt: Packet, then: Then) -> Box<XmitTask> {
        Box::new(XmitTask {
            iface,
            txq: 0,
            qd: 0,
            pkt: Some(pkt),
            stage: Stage::Pick,
            busylock: false,
            quota: 0,
            nolock: false,
            then,
        })
    }

    /// The NET_TX softirq's run of the qdisc of `iface`'s tx queue `qd`.
    pub fn net_tx(iface: u32, qd: u32) -> Box<XmitTask> {
        let mut t = XmitTask::send(iface, Packet::new(0, 0), Then::Nothing);
        t.pkt = None;
        t.qd = qd;
        t.txq = qd;
        t
    }
}

impl Sim {
    /// The qdisc state of `iface`'s queue `qd` lives in its [`TxQueue`].
    fn qd(&mut self, iface: u32, qd: u32) -> &mut crate::world::TxQueue {
        &mut self.ifaces[iface as usize].txqs[qd as usize]
    }

    /// `netdev_pick_tx` for a packet sent from CPU `c`: the socket's cached queue
    /// unless `ooo_okay` (TCP with nothing of the socket queued in the host), then the
    /// XPS map of the sending CPU, else `skb_tx_hash`; the choice is cached in the socket.
    fn pick_tx(&mut self, iface: u32, c: u32, pkt: &Packet) -> u32 {
        let n = self.ifaces[iface as usize].txqs.len() as u32;
        if n <= 1 {
            return 0;
        }
        let sk = pkt.sk.as_ref().map(|s| (s.id, s.tcp && s.wmem_alloc() <= pkt.truesize as u64));
        if let Some((id, ooo_okay)) = sk {
            if let Some(&q) = self.sk_txq.get(&(id, iface)) {
                if !ooo_okay && q < n {
                    return q;
                }
            }
        }
        let xps = &self.ifaces[iface as usize].xps;
        let q = match xps.get(c as usize).filter(|m| !m.is_empty()) {
            // Several queues for one CPU: the flow hash picks among them.
            Some(m) => m[((pkt.hash as u64 * m.len() as u64) >> 32) as usize],
            None => self.device(iface).txq_of(pkt) as u32,
        };
        if let Some((id, _)) = sk {
            self.sk_txq.insert((id, iface), q);
        }
        q
    }

    /// Charge `__dev_queue_xmit`'s own cost to CPU `c` (the steps before the
    /// qdisc) and return it, for the step that hands a packet to an [`XmitTask`].
    pub fn xmit_cost(&mut self, h: u32, c: u32) -> u64 {
        let hc = self.cpus(h);
        let ns = hc.costs.dev_queue_xmit;
        let class = hc.cpus[c as usize].cur_class;
        hc.charge(c, class, Func::DevQueueXmit as u16, ns);
        ns
    }

    fn ndo_cost(&mut self, h: u32, iface: u32) -> (Func, u64) {
        let veth = self.ifaces[iface as usize].veth;
        let c = &self.cpus(h).costs;
        if veth {
            (Func::VethXmit, c.sch_direct_xmit + c.veth_xmit)
        } else {
            (Func::NdoStartXmit, c.sch_direct_xmit + c.ndo_start_xmit)
        }
    }

    /// Take lock `l` for the task and go on with its next stage (the acquisition's
    /// cost counts into that stage's critical section), or park the CPU until a
    /// handover.
    fn take(&mut self, h: u32, c: u32, l: u32, t: Box<XmitTask>) -> Step {
        let now = self.now;
        match self.cpus(h).acquire(l, c, now) {
            Some(ns) => match self.xmit_step(h, c, t) {
                Step::Busy(x) => Step::Busy(x + ns),
                Step::Done(x) => Step::Done(x + ns),
                // Parked on the next lock: the time spent so far still passes first.
                Step::Wait => Step::Wait,
            },
            None => {
                self.cpus(h).cpus[c as usize].cur = Some(Work::Xmit(t));
                Step::Wait
            }
        }
    }

    fn give_back(&mut self, h: u32, c: u32, l: u32) {
        let now = self.now;
        if let Some((next, at)) = self.cpus(h).release(l, c, now) {
            self.lock_granted(h, next, at);
        }
    }

    fn cont(&mut self, h: u32, c: u32, t: Box<XmitTask>, ns: u64) -> Step {
        self.cpus(h).cpus[c as usize].cur = Some(Work::Xmit(t));
        Step::Busy(ns)
    }

    /// One step of an xmit on CPU `c` of host `h` (see [`Stage`]).
    pub fn xmit_step(&mut self, h: u32, c: u32, mut t: Box<XmitTask>) -> Step {
        let now = self.now;
        let class = self.cpus(h).cpus[c as usize].cur_class;
        let (iface, qd) = (t.iface, t.qd);
        match std::mem::replace(&mut t.stage, Stage::Finish) {
            Stage::Pick => {
                // Its cost (`dev_queue_xmit` in the profile) is in the step that led
                // here (see `XmitTask::send`).
                let kind = self.device(iface).root.q.kind();
                let mq = kind == "mq";
                let cost = 0;
                if let Some(p) = t.pkt.as_ref() {
                    self.packets += 1;
                    t.txq = self.pick_tx(iface, c, p);
                    t.qd = if mq { t.txq } else { 0 };
                }
                if t.pkt.is_none() {
                    // net_tx_action clears __QDISC_STATE_SCHED before running the qdisc.
                    self.qd(iface, t.qd).net_tx = false;
                }
                let leaf = if mq { self.mq_child_kind(iface, t.qd) } else { kind };
                t.nolock = kind == "noqueue" || leaf == "pfifo_fast";
                t.quota = self.cpus(h).tx_quota;
                t.stage = match t.pkt.take() {
                    // noqueue: straight to the driver under its xmit lock.
                    Some(p) if kind == "noqueue" => Stage::Driver(p),
                    Some(p) => {
                        t.pkt = Some(p);
                        let q = self.qd(iface, t.qd);
                        // A running qdisc means contention: queue on the busylock first.
                        t.busylock = q.running && !t.nolock;
                        if t.busylock {
                            Stage::Busylock
                        } else {
                            Stage::Enqueue
                        }
                    }
                    None if t.nolock => {
                        // NET_TX of a NOLOCK qdisc: qdisc_run_begin is a trylock.
                        let q = self.qd(iface, t.qd);
                        if q.running {
                            q.missed = true;
                            return Step::Done(cost);
                        }
                        q.running = true;
                        Stage::Dequeue
                    }
                    None => Stage::Enqueue,
                };
                if t.busylock {
                    // Taken after the cost above (Stage::Busylock is entered holding it).
                    t.stage = Stage::TakeBusylock;
                } else if !t.nolock {
                    t.stage = Stage::TakeRoot;
                }
                self.cont(h, c, t, cost)
            }
            Stage::TakeBusylock => {
                let l = self.qd(iface, qd).busylock;
                t.stage = Stage::Busylock;
                self.take(h, c, l, t)
            }
            Stage::TakeRoot => {
                let l = self.qd(iface, qd).root_lock;
                t.stage = Stage::Enqueue;
                self.take(h, c, l, t)
            }
            Stage::Busylock => {
                let root = self.qd(iface, qd).root_lock;
                t.stage = Stage::Enqueue;
                self.take(h, c, root, t)
            }
            Stage::Enqueue => {
                let (enq_f, _, enq_ns, _) = self.qdisc_costs(h, iface, qd);
                let Some(pkt) = t.pkt.take() else {
                    // NET_TX: become the owner unless someone runs the qdisc.
                    let q = self.qd(iface, qd);
                    if q.running {
                        t.stage = Stage::Finish;
                        t.quota = u32::MAX; // not the owner: only unlock
                        return self.cont(h, c, t, 0);
                    }
                    q.running = true;
                    t.stage = Stage::Dequeue;
                    return self.cont(h, c, t, 0);
                };
                let running = self.qd(iface, qd).running;
                let idle = !running && self.txq_can_take(iface, t.txq);
                let producer = self.qd(iface, qd).producer_lock;
                if t.nolock && !t.busylock {
                    // pfifo_fast's enqueue takes its band ring's producer lock.
                    t.busylock = true;
                    t.pkt = Some(pkt);
                    t.stage = Stage::Enqueue;
                    return self.take(h, c, producer, t);
                }
                let txq = t.txq as usize;
                let r = self.device(iface).xmit_on(pkt, txq, now, idle);
                self.cpus(h).charge(c, class, enq_f, enq_ns);
                if t.nolock {
                    t.busylock = false;
                    self.give_back(h, c, producer);
                }
                let q = self.qd(iface, qd);
                let was_running = q.running;
                match r {
                    qdisc::tree::Xmit::Direct(p) => {
                        q.running = true;
                        self.release_busylock(h, c, &mut t);
                        t.stage = Stage::Driver(p);
                    }
                    qdisc::tree::Xmit::Queued(v) => {
                        self.local_verdict(&v);
                        if was_running {
                            if t.nolock {
                                self.qd(iface, qd).missed = true;
                                return Step::Done(enq_ns);
                            }
                            t.quota = u32::MAX; // not the owner: only unlock
                            t.stage = Stage::Finish;
                        } else {
                            self.qd(iface, qd).running = true;
                            self.release_busylock(h, c, &mut t);
                            t.stage = Stage::Dequeue;
                        }
                    }
                }
                self.cont(h, c, t, enq_ns)
            }
            Stage::Dequeue => {
                let shared = !self.device(iface).per_txq_qdiscs() && self.ifaces[iface as usize].txqs.len() > 1;
                if shared {
                    // A shared root feeds every tx queue: the packet's own queue decides
                    // (a stopped one holds it back, as dev_requeue_skb does).
                    if let Some(p) = self.qd(iface, qd).requeued.take() {
                        let txq = self.driver_txq(iface, &p);
                        if self.txq_can_take(iface, txq) {
                            t.stage = Stage::Driver(p);
                        } else {
                            self.qd(iface, qd).requeued = Some(p);
                            t.stage = Stage::Finish;
                        }
                        return self.cont(h, c, t, 0);
                    }
                } else if !self.txq_can_take(iface, qd) {
                    t.stage = Stage::Finish;
                    return self.cont(h, c, t, 0);
                }
                let (_, deq_f, _, deq_ns) = self.qdisc_costs(h, iface, qd);
                self.cpus(h).charge(c, class, deq_f, deq_ns);
                match self.device(iface).dequeue_txq(qd as usize, now) {
                    Dequeued::Packet(p) => {
                        let txq = if shared { self.driver_txq(iface, &p) } else { qd };
                        if shared && !self.txq_can_take(iface, txq) {
                            self.qd(iface, qd).requeued = Some(p);
                            t.stage = Stage::Finish;
                        } else {
                            t.stage = Stage::Driver(p);
                        }
                    }
                    Dequeued::Empty => t.stage = Stage::Finish,
                    Dequeued::Throttled { until } => {
                        self.arm_watchdog(iface, qd, until, c);
                        t.stage = Stage::Finish;
                    }
                }
                self.cont(h, c, t, deq_ns)
            }
            Stage::Driver(p) => {
                if !t.nolock {
                    let root = self.qd(iface, qd).root_lock;
                    self.give_back(h, c, root);
                }
                let txq = if self.device(iface).per_txq_qdiscs() { qd } else { self.driver_txq(iface, &p) };
                let l = self.ifaces[iface as usize].txqs[txq as usize].xmit_lock;
                t.stage = Stage::Start(txq, p);
                self.take(h, c, l, t)
            }
            Stage::Start(txq, p) => {
                let (f, ns) = self.ndo_cost(h, iface);
                self.cpus(h).charge(c, class, f as u16, ns);
                self.to_driver(iface, txq, p);
                t.stage = Stage::Sent(txq);
                self.cont(h, c, t, ns)
            }
            Stage::Sent(txq) => {
                let l = self.ifaces[iface as usize].txqs[txq as usize].xmit_lock;
                self.give_back(h, c, l);
                if self.device(iface).root.q.kind() == "noqueue" {
                    return self.xmit_done(h, c, &t, 0);
                }
                t.quota = t.quota.saturating_sub(1);
                t.stage = Stage::Retaken;
                if t.nolock {
                    return self.cont(h, c, t, 0);
                }
                let root = self.qd(iface, qd).root_lock;
                self.take(h, c, root, t)
            }
            Stage::Retaken => {
                if t.quota == 0 {
                    // Quota spent: __netif_schedule, the NET_TX softirq runs it again.
                    self.net_tx_schedule(h, c, iface, qd);
                    t.stage = Stage::Finish;
                } else {
                    t.stage = Stage::Dequeue;
                }
                self.cont(h, c, t, 0)
            }
            Stage::Finish => {
                let owner = t.quota != u32::MAX;
                let q = self.qd(iface, qd);
                if owner {
                    q.running = false;
                }
                let missed = std::mem::take(&mut q.missed);
                if t.nolock {
                    // qdisc_run_end of a NOLOCK qdisc: a CPU that lost the trylock
                    // meanwhile set MISSED; run again rather than strand its packet.
                    if missed && owner {
                        self.net_tx_schedule(h, c, iface, qd);
                    }
                } else {
                    let root = self.qd(iface, qd).root_lock;
                    self.give_back(h, c, root);
                    self.release_busylock(h, c, &mut t);
                }
                self.xmit_done(h, c, &t, 0)
            }
        }
    }

    fn release_busylock(&mut self, h: u32, c: u32, t: &mut XmitTask) {
        if std::mem::take(&mut t.busylock) && !t.nolock {
            let l = self.qd(t.iface, t.qd).busylock;
            self.give_back(h, c, l);
        }
    }

    fn xmit_done(&mut self, h: u32, c: u32, t: &XmitTask, ns: u64) -> Step {
        match t.then {
            Then::UdpNext(app) => self.give(h, c, Work::UdpSend { app }, false),
            Then::Napi { iface, rxq, done } => {
                self.cpus(h).cpus[c as usize].cur = Some(Work::NapiFrom { iface, rxq, done });
                return Step::Busy(ns);
            }
            Then::Nothing => {}
        }
        Step::Done(ns)
    }

    /// `__netif_schedule`: the NET_TX softirq of CPU `c` will run the qdisc.
    pub fn net_tx_schedule(&mut self, h: u32, c: u32, iface: u32, qd: u32) {
        let q = self.qd(iface, qd);
        if q.net_tx {
            return;
        }
        q.net_tx = true;
        self.give(h, c, Work::Xmit(XmitTask::net_tx(iface, qd)), true);
    }

    /// The kind of the qdisc of mq's queue `qd`.
    fn mq_child_kind(&mut self, iface: u32, qd: u32) -> &'static str {
        let dev = self.device(iface);
        dev.root.q.as_classful().and_then(|c| c.leaf(qd + 1)).map(|n| n.q.kind()).unwrap_or("noqueue")
    }

    /// Rows and costs of the enqueue/dequeue of the qdisc serving queue `qd`.
    pub fn qdisc_costs(&mut self, h: u32, iface: u32, qd: u32) -> (u16, u16, u64, u64) {
        let kind = if self.device(iface).per_txq_qdiscs() {
            self.mq_child_kind(iface, qd)
        } else {
            self.device(iface).root.q.kind()
        };
        let hc = self.cpus(h);
        hc.funcs.kind(&hc.profile, kind)
    }

    /// The driver queue a packet dequeued from a shared (non-mq) root goes to.
    fn driver_txq(&mut self, iface: u32, p: &Packet) -> u32 {
        self.device(iface).txq_of(p) as u32
    }

    fn arm_watchdog(&mut self, iface: u32, qd: u32, until: Instant, c: u32) {
        let now = self.now;
        let q = self.qd(iface, qd);
        q.last_cpu = c;
        if q.watchdog.is_none_or(|w| until < w || w < now) {
            q.watchdog = Some(until);
            self.events.at(until.max(now), Ev::Watchdog { iface, txq: qd });
        }
    }

    /// The verdict of a local enqueue goes back to a UDP/ping sender: nothing to do
    /// (iperf3 does not see qdisc drops of UDP; the datagram is lost).
    fn local_verdict(&mut self, _v: &Enqueued) {}

    /// The driver's TX poll of queue `txq` on CPU `c`: every completed frame is
    /// freed, then BQL hears of them in one `netdev_tx_completed_queue` (its limit
    /// adapts to what one poll completes), and a stopped queue is woken: its qdisc
    /// runs again from this CPU's NET_TX softirq.
    pub fn tx_poll(&mut self, h: u32, c: u32, iface: u32, txq: u32) -> u64 {
        let now = self.now;
        let rate = self.ifaces[iface as usize].rate;
        let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
        q.tx_poll = false;
        let frames = std::mem::take(&mut q.completed);
        let (n, bytes) = (frames.len() as u32, frames.iter().map(|p| p.len).sum::<u32>());
        let mut woke = q.in_ring >= TX_RING;
        q.in_ring -= n;
        if rate.is_some() {
            q.dql.completed(bytes, now);
            if q.stopped && q.dql.avail() >= 0 {
                q.stopped = false;
                woke = true;
            }
        }
        if woke {
            let qd = if self.device(iface).per_txq_qdiscs() { txq } else { 0 };
            self.net_tx_schedule(h, c, iface, qd);
        }
        for mut p in frames {
            let owner = if p.orphan() { p.sk.as_ref().map(|s| s.id) } else { None };
            drop(p);
            if let Some(id) = owner {
                self.socket_released(id);
            }
        }
        let ns = n as u64 * self.cpus(h).costs.napi_consume_skb;
        let class = self.cpus(h).cpus[c as usize].cur_class;
        self.cpus(h).charge(c, class, Func::NapiConsumeSkb as u16, ns);
        ns
    }
}
