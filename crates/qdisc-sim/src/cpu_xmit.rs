//! The transmit path on hosts with CPUs (docs/cpu-model.md): the steps of `xmit.rs`
//! run by a CPU in virtual time, with the locks the kernel takes on the way.
//!
//! ```text
//! Pick (netdev_pick_tx: socket queue / XPS / skb_tx_hash)
//!  ├─ noqueue ──────────────────────────────────────────────┐
//!  ├─ NOLOCK (pfifo_fast): producer lock, enqueue, trylock ─┤
//!  └─ [busylock if running] root lock, enqueue or bypass ───┤ owner (RUNNING) only:
//!                                                           ▼
//!     Dequeue ─► drop root lock ─► _xmit_lock, ndo_start_xmit ─► retake root lock ─┐
//!        ▲   (quota 64 spent: __netif_schedule → NET_TX of this CPU)              │
//!        └────────────────────────────────────────────────────────────────────────┘
//!     Finish: qdisc_run_end (NOLOCK: MISSED → run again), unlock
//! ```
//!
//! Each stage is a step of an [`XmitTask`] on its CPU: its effect happens when the
//! step starts, its cost follows; a lock held elsewhere parks the CPU in the lock's
//! FIFO until handed over. TX completion (the driver's TX poll) is here too: BQL, the
//! freed skbs, a stopped queue woken.

use qdisc::{Dequeued, Instant, Packet};

use crate::cpu::{Func, Step, Work};
use crate::event::Ev;
use crate::world::Sim;

/// After an xmit: what the thread that sent the packet does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Nothing,
    /// A UDP sender's thread: its next datagram, if it has one to send now.
    UdpNext(u32),
    /// A receive poll forwarded (or answered) a packet: the CPU goes on with the work
    /// it put aside (`Cpu::resume`).
    Resume,
}

#[derive(Debug)]
enum Stage {
    /// `netdev_core_pick_tx` and the checks before the qdisc.
    Pick,
    /// Queue on `q->busylock` (the qdisc was running: contended), then take the root
    /// lock.
    TakeBusylock,
    /// Take the root lock, then enqueue.
    TakeRoot,
    /// Holding the root lock (NOLOCK: taking, then holding, the band ring's producer
    /// lock): enqueue or bypass, and try to become the owner.
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
    /// Holding `q->busylock` (NOLOCK: the producer lock, while enqueuing).
    busylock: bool,
    /// Packets this owner may still send (`dev_tx_weight`); `u32::MAX` marks a CPU
    /// that is not the owner and only unlocks.
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
    pub(crate) fn pick_tx(&mut self, iface: u32, c: u32, pkt: &Packet) -> u32 {
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
            if self.sk_txq.insert((id, iface), q).is_some_and(|old| old != q) {
                // sk_tx_queue_set with a new queue: the flow moved.
                let h = self.ifaces[iface as usize].host;
                self.hosts[h as usize].txq_changes += 1;
            }
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

    /// The driver's `ndo_start_xmit` on `iface`: its function row and cost (a NIC's,
    /// `veth_xmit` or `loopback_xmit`).
    pub(crate) fn ndo_cost(&mut self, h: u32, iface: u32) -> (Func, u64) {
        let i = &self.ifaces[iface as usize];
        let (veth, lo) = (i.veth, i.lo);
        let c = &self.cpus(h).costs;
        if lo {
            (Func::LoopbackXmit, c.loopback_xmit)
        } else if veth {
            (Func::VethXmit, c.veth_xmit)
        } else {
            (Func::NdoStartXmit, c.ndo_start_xmit)
        }
    }

    /// Software GSO (`validate_xmit_skb` → `skb_segment`) of a GSO skb for a device
    /// without TSO: charged on CPU `c`, returned.
    pub(crate) fn gso_cost(&mut self, h: u32, c: u32, iface: u32, p: &Packet) -> u64 {
        let i = &self.ifaces[iface as usize];
        if i.tso || p.gso_segs <= 1 || i.local() {
            return 0;
        }
        let hc = self.cpus(h);
        let ns = hc.costs.skb_segment * p.gso_segs as u64;
        let class = hc.cpus[c as usize].cur_class;
        hc.charge(c, class, Func::SkbSegment as u16, ns);
        ns
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
                // Parked on the next lock (the busylock holder queuing for the root
                // lock): the acquisition is charged and spent first of the wait.
                Step::Wait => {
                    self.cpus(h).cpus[c as usize].owed_ns += ns;
                    Step::Wait
                }
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
                if let Some(p) = t.pkt.take() {
                    // sch_handle_egress, before the queue is picked; what it stole,
                    // dropped or redirected ends the xmit here.
                    let id = p.id;
                    match self.egress_hook(iface, p) {
                        Ok(p) => t.pkt = Some(p),
                        Err(v) => {
                            self.packets += 1;
                            if v == qdisc::Enqueued::Dropped {
                                self.take_meta(id);
                            }
                            return self.xmit_done(h, c, &t, 0);
                        }
                    }
                }
                let kind = self.device(iface).root.kind();
                let mq = kind == "mq";
                if let Some(p) = t.pkt.as_ref() {
                    self.packets += 1;
                    t.txq = self.pick_tx(iface, c, p);
                    t.qd = if mq { t.txq } else { 0 };
                }
                // Every path reads the qdisc's state (qdisc_is_running, the NOLOCK
                // checks): a line other CPUs write.
                let state = self.qd(iface, t.qd).state_line;
                let cost = if kind == "noqueue" { 0 } else { self.cpus(h).touch(state, c, Func::DevQueueXmit as u16) };
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
                        // A running qdisc means contention: queue on the busylock first.
                        t.busylock = self.qd(iface, t.qd).running && !t.nolock;
                        match (t.busylock, t.nolock) {
                            (true, _) => Stage::TakeBusylock,
                            (false, true) => Stage::Enqueue,
                            (false, false) => Stage::TakeRoot,
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
                    None => Stage::TakeRoot,
                };
                self.cont(h, c, t, cost)
            }
            Stage::TakeBusylock => {
                // Holding it, the task goes on to take the root lock.
                let l = self.qd(iface, qd).busylock;
                t.stage = Stage::TakeRoot;
                self.take(h, c, l, t)
            }
            Stage::TakeRoot => {
                let l = self.qd(iface, qd).root_lock;
                t.stage = Stage::Enqueue;
                self.take(h, c, l, t)
            }
            Stage::Enqueue => {
                let (enq_f, _, mut enq_ns, _) = self.qdisc_costs(h, iface, qd);
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
                let route = self.route_of(iface, &pkt);
                let id = pkt.id;
                self.mirred_sees(id);
                let r = self.device(iface).xmit_routed(pkt, txq, now, idle, route);
                self.after_qdisc_filters(iface, id, &r);
                self.cpus(h).charge(c, class, enq_f, enq_ns);
                if t.nolock {
                    t.busylock = false;
                    self.give_back(h, c, producer);
                }
                if t.nolock {
                    // A queued packet is written into the band ring's slot (the
                    // consumer's dequeue reads it), then qdisc_run_begin's trylock (or
                    // setting MISSED) touches the state line.
                    let (ring, state) = (self.qd(iface, qd).ring_line, self.qd(iface, qd).state_line);
                    if matches!(r, qdisc::tree::Xmit::Queued(_)) {
                        enq_ns += self.cpus(h).touch(ring, c, enq_f);
                    }
                    enq_ns += self.cpus(h).touch(state, c, enq_f);
                }
                let q = self.qd(iface, qd);
                let was_running = q.running;
                match r {
                    qdisc::tree::Xmit::Direct(p) => {
                        q.running = true;
                        self.release_busylock(h, c, &mut t);
                        t.stage = Stage::Driver(p);
                    }
                    // A UDP or ping sender does not hear of a qdisc drop (iperf3 does not
                    // see it; the datagram is lost).
                    qdisc::tree::Xmit::Queued(_) => {
                        if was_running {
                            if t.nolock {
                                self.qd(iface, qd).missed = true;
                                return self.xmit_done(h, c, &t, enq_ns);
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
                // A packet the driver gave back (a stopped queue of a shared root, a
                // veth's full ring) goes first, once its queue can take it
                // (dev_requeue_skb).
                if let Some(p) = self.qd(iface, qd).requeued.take() {
                    let txq = if shared { self.driver_txq(iface, &p) } else { qd };
                    if self.txq_can_take(iface, txq) {
                        t.stage = Stage::Driver(p);
                    } else {
                        self.qd(iface, qd).requeued = Some(p);
                        t.stage = Stage::Finish;
                    }
                    return self.cont(h, c, t, 0);
                }
                if !shared && !self.txq_can_take(iface, qd) {
                    t.stage = Stage::Finish;
                    return self.cont(h, c, t, 0);
                }
                let (_, deq_f, _, mut deq_ns) = self.qdisc_costs(h, iface, qd);
                self.cpus(h).charge(c, class, deq_f, deq_ns);
                if t.nolock {
                    // pfifo_fast's consumer reads slots its producers wrote.
                    let ring = self.qd(iface, qd).ring_line;
                    deq_ns += self.cpus(h).touch(ring, c, deq_f);
                }
                match self.device(iface).dequeue_txq(qd as usize, now) {
                    Dequeued::Packet(p) => {
                        let p = self.own_part(p);
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
                // Dequeue drops free skbs: sleeping UDP senders may go on.
                self.udp_write_space();
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
                // sch_direct_xmit's bookkeeping is charged to the driver's row here.
                let (f, ndo) = self.ndo_cost(h, iface);
                let mut ns = self.cpus(h).costs.sch_direct_xmit + ndo;
                self.cpus(h).charge(c, class, f as u16, ns);
                ns += self.gso_cost(h, c, iface, &p);
                self.to_driver(iface, txq, p);
                t.stage = Stage::Sent(txq);
                self.cont(h, c, t, ns)
            }
            Stage::Sent(txq) => {
                let l = self.ifaces[iface as usize].txqs[txq as usize].xmit_lock;
                self.give_back(h, c, l);
                if self.device(iface).root.kind() == "noqueue" {
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
                let mut ns = 0;
                if t.nolock {
                    // qdisc_run_end of a NOLOCK qdisc: a CPU that lost the trylock
                    // meanwhile set MISSED; run again rather than strand its packet.
                    if owner {
                        let state = self.qd(iface, qd).state_line;
                        ns = self.cpus(h).touch(state, c, Func::SchDirectXmit as u16);
                    }
                    if missed && owner {
                        self.net_tx_schedule(h, c, iface, qd);
                    }
                } else {
                    let root = self.qd(iface, qd).root_lock;
                    self.give_back(h, c, root);
                    self.release_busylock(h, c, &mut t);
                }
                self.xmit_done(h, c, &t, ns)
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
            Then::UdpNext(app) => self.udp_after_send(h, c, app),
            Then::Resume => {
                let cpu = &mut self.cpus(h).cpus[c as usize];
                if let Some(w) = cpu.resume.take() {
                    cpu.cur = Some(w);
                    return Step::Busy(ns);
                }
            }
            Then::Nothing => {}
        }
        Step::Done(ns)
    }

    /// The qdisc queue serving driver tx queue `txq`: its own under mq, else the
    /// shared root's (0).
    pub(crate) fn qdisc_queue(&mut self, iface: u32, txq: u32) -> u32 {
        if self.device(iface).per_txq_qdiscs() {
            txq
        } else {
            0
        }
    }

    /// `netif_tx_wake_queue` from CPU `c`: the qdisc feeding tx queue `txq` runs again
    /// from this CPU's NET_TX softirq.
    pub(crate) fn wake_txq(&mut self, h: u32, c: u32, iface: u32, txq: u32) {
        let qd = self.qdisc_queue(iface, txq);
        self.net_tx_schedule(h, c, iface, qd);
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
        dev.root.q.as_classful().and_then(|c| c.leaf(qd + 1)).map(|n| n.kind()).unwrap_or("noqueue")
    }

    /// Rows and costs of the enqueue/dequeue of the qdisc serving queue `qd`.
    pub fn qdisc_costs(&mut self, h: u32, iface: u32, qd: u32) -> (u16, u16, u64, u64) {
        if let Some(k) = self.qd(iface, qd).qcost {
            return k;
        }
        let kind = if self.device(iface).per_txq_qdiscs() {
            self.mq_child_kind(iface, qd)
        } else {
            self.device(iface).root.kind()
        };
        let hc = self.cpus(h);
        let k = hc.funcs.kind(&hc.profile, kind);
        self.qd(iface, qd).qcost = Some(k);
        k
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

    /// The driver's TX poll of queue `txq` on CPU `c`: every completed frame is
    /// freed, then BQL hears of them in one `netdev_tx_completed_queue` (its limit
    /// adapts to what one poll completes), and a stopped queue is woken: its qdisc
    /// runs again from this CPU's NET_TX softirq.
    pub fn tx_poll(&mut self, h: u32, c: u32, iface: u32, txq: u32) -> u64 {
        let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
        q.tx_poll = false;
        let (n, bytes) = (q.completed.len() as u32, q.completed.iter().map(|p| p.len).sum::<u32>());
        if self.tx_completed(iface, txq, n, bytes) {
            self.wake_txq(h, c, iface, txq);
        }
        for _ in 0..n {
            let mut p = self.ifaces[iface as usize].txqs[txq as usize].completed.pop_front().expect("counted");
            self.orphan(&mut p);
        }
        let ns = n as u64 * self.cpus(h).costs.napi_consume_skb;
        let class = self.cpus(h).cpus[c as usize].cur_class;
        self.cpus(h).charge(c, class, Func::NapiConsumeSkb as u16, ns);
        ns
    }
}
