//! Hosts have CPUs: cores that execute the packet path's work in virtual time, with
//! costs from the host's profile (`qdisc_scenario::profile`), and the spinlocks the
//! kernel takes on the way (docs/cpu-model.md).
//!
//! ```text
//!  event ─► work on a CPU's queue ─► the CPU runs it: effects at its start, then busy
//!           (softirq before process;   for its cost; a lock held elsewhere parks the CPU
//!            netdev_budget fairness)  in the lock's FIFO (spinning: its time is burnt)
//! ```
//!
//! * A CPU runs one work item at a time. Softirq work (NAPI receive, TX completion,
//!   NET_TX) runs before process work (application threads); after `netdev_budget`
//!   softirq items (or `netdev_budget_usecs`) in a row with process work waiting,
//!   process work runs for one scheduler slice (the
//!   kernel hands the rest of a long softirq run to ksoftirqd, a normal thread).
//! * A thread woken on an idle CPU runs after `wakeup_latency` (idle exit, scheduler
//!   wake-up); softirq work raised on an idle CPU runs at once; a busy CPU queues
//!   either.
//! * Locks are queued spinlocks (`native_queued_spin_lock_slowpath`): FIFO; an
//!   uncontended acquire costs `lock.uncontended` (plus `lock.transfer` when another
//!   CPU held it last); a handover to a waiter costs `lock.transfer` plus
//!   `lock.per_waiter` for every other CPU still waiting (up to `waiters_cap`).
//!   Waiting CPUs spin: their time counts as busy, in the spinlock's row.
//! * Shared lines outside locks (a qdisc's state word, pfifo_fast's rings) cost
//!   `lock.transfer` when another CPU touched them last.
//! * Accounting: per CPU, busy nanoseconds by class (user, sys, softirq); per host,
//!   nanoseconds by kernel function (the rows of `perf top`); per lock,
//!   acquisitions, contended acquisitions and the time spent waiting.
//!
//! Everything here is a model: the constants are the profile's, and reports say so.

use std::collections::{BTreeMap, VecDeque};

use qdisc::Instant;
use qdisc_scenario::profile::Profile;

use crate::event::Ev;
use crate::world::Sim;

/// What a CPU's time is spent as (`/proc/stat`'s columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    User = 0,
    Sys = 1,
    Softirq = 2,
}

/// Kernel functions (and the application) that CPU time is charged to. Qdisc kinds
/// get their `<kind>_enqueue`/`<kind>_dequeue` rows at run time (see [`Funcs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Spin,
    Lock,
    App,
    UdpSendmsg,
    TcpSendmsg,
    Copy,
    TcpTransmitSkb,
    DevQueueXmit,
    SchDirectXmit,
    NdoStartXmit,
    VethXmit,
    NapiConsumeSkb,
    NapiGroReceive,
    IpRcv,
    IpForward,
    UdpRcv,
    TcpV4Rcv,
    IcmpRcv,
    Recvmsg,
    LoopbackXmit,
    NetifRx,
    ProcessBacklog,
    Ipi,
    KfreeSkb,
    SkbSegment,
    PktgenXmit,
}

const FIXED: [&str; 26] = [
    "native_queued_spin_lock_slowpath",
    "_raw_spin_lock",
    "[user] application",
    "udp_sendmsg",
    "tcp_sendmsg",
    "copy_user_generic",
    "__tcp_transmit_skb",
    "__dev_queue_xmit",
    "sch_direct_xmit",
    "ndo_start_xmit",
    "veth_xmit",
    "napi_consume_skb",
    "napi_gro_receive",
    "ip_rcv",
    "ip_forward",
    "udp_rcv",
    "tcp_v4_rcv",
    "icmp_rcv",
    "recvmsg",
    "loopback_xmit",
    "enqueue_to_backlog",
    "process_backlog",
    "smp_call_function_single_async",
    "skb_release_data",
    "skb_segment",
    "pktgen_xmit",
];

/// The profile's costs as the model reads them, per packet, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Costs {
    pub app_send: u64,
    pub udp_sendmsg: u64,
    pub tcp_sendmsg: u64,
    pub copy_per_kib: u64,
    pub tcp_transmit_skb: u64,
    pub dev_queue_xmit: u64,
    pub sch_direct_xmit: u64,
    pub ndo_start_xmit: u64,
    pub veth_xmit: u64,
    pub napi_consume_skb: u64,
    pub napi_gro_receive: u64,
    pub ip_rcv: u64,
    pub ip_forward: u64,
    pub udp_rcv: u64,
    pub tcp_v4_rcv: u64,
    pub icmp_rcv: u64,
    pub recvmsg: u64,
    pub loopback_xmit: u64,
    pub netif_rx: u64,
    pub ipi: u64,
    pub kfree_skb: u64,
    pub page_free: u64,
    pub skb_segment: u64,
    pub pktgen_xmit: u64,
    pub wakeup_latency: u64,
    pub bridge_forward: u64,
    pub lock_uncontended: u64,
    pub lock_transfer: u64,
    pub lock_per_waiter: u64,
    pub lock_waiters_cap: u32,
}

impl Costs {
    pub fn of(p: &Profile) -> Costs {
        let c = &p.cost;
        Costs {
            app_send: c.app_send.ns,
            udp_sendmsg: c.udp_sendmsg.ns,
            tcp_sendmsg: c.tcp_sendmsg.ns,
            copy_per_kib: c.copy_per_kib.ns,
            tcp_transmit_skb: c.tcp_transmit_skb.ns,
            dev_queue_xmit: c.dev_queue_xmit.ns,
            sch_direct_xmit: c.sch_direct_xmit.ns,
            ndo_start_xmit: c.ndo_start_xmit.ns,
            veth_xmit: c.veth_xmit.ns,
            napi_consume_skb: c.napi_consume_skb.ns,
            napi_gro_receive: c.napi_gro_receive.ns,
            ip_rcv: c.ip_rcv.ns,
            ip_forward: c.ip_forward.ns,
            udp_rcv: c.udp_rcv.ns,
            tcp_v4_rcv: c.tcp_v4_rcv.ns,
            icmp_rcv: c.icmp_rcv.ns,
            recvmsg: c.recvmsg.ns,
            loopback_xmit: c.loopback_xmit.ns,
            netif_rx: c.netif_rx.ns,
            ipi: c.ipi.ns,
            kfree_skb: c.kfree_skb.ns,
            page_free: c.page_free.ns,
            skb_segment: c.skb_segment.ns,
            pktgen_xmit: c.pktgen_xmit.ns,
            wakeup_latency: c.wakeup_latency.ns,
            bridge_forward: c.bridge_forward.ns,
            lock_uncontended: p.lock.uncontended.ns,
            lock_transfer: p.lock.transfer.ns,
            lock_per_waiter: p.lock.per_waiter.ns,
            lock_waiters_cap: p.lock.waiters_cap,
        }
    }

    /// Copying `bytes` between user and kernel memory.
    pub fn copy(&self, bytes: u64) -> u64 {
        bytes * self.copy_per_kib / 1024
    }

    /// Freeing a received skb of `bytes` payload (its head and its pages).
    pub fn free(&self, bytes: u64) -> u64 {
        self.kfree_skb + bytes.div_ceil(4096) * self.page_free
    }
}

/// Nanoseconds per function row of one host.
pub struct Funcs {
    pub names: Vec<String>,
    pub ns: Vec<u64>,
    /// Qdisc kind → (enqueue row, dequeue row, enqueue ns, dequeue ns).
    kinds: BTreeMap<String, (u16, u16, u64, u64)>,
}

impl Funcs {
    fn new() -> Funcs {
        Funcs { names: FIXED.iter().map(|s| s.to_string()).collect(), ns: vec![0; FIXED.len()], kinds: BTreeMap::new() }
    }

    /// The rows and costs of a qdisc kind's enqueue and dequeue.
    pub fn kind(&mut self, profile: &Profile, kind: &str) -> (u16, u16, u64, u64) {
        if let Some(k) = self.kinds.get(kind) {
            return *k;
        }
        let c = profile.qdisc_cost(kind);
        let e = self.names.len() as u16;
        self.names.push(format!("{kind}_enqueue"));
        self.names.push(format!("{kind}_dequeue"));
        self.ns.extend([0, 0]);
        let k = (e, e + 1, c.enqueue, c.dequeue);
        self.kinds.insert(kind.to_string(), k);
        k
    }
}

/// A spinlock of a host.
pub struct Lock {
    pub name: String,
    pub holder: Option<u32>,
    /// The CPU that held it last (its line is in that CPU's cache).
    last: Option<u32>,
    pub waiters: VecDeque<(u32, Instant)>,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: u64,
}

/// Work a CPU can be given.
pub enum Work {
    /// `dev_queue_xmit` of a packet, or (`pkt: None`) a NET_TX run of a qdisc.
    Xmit(Box<crate::cpu_xmit::XmitTask>),
    /// A receive poll: NAPI of an rx queue, or this CPU's backlog; `done` packets so
    /// far in this poll (it goes on after a packet it forwarded or answered).
    Poll { src: crate::rx::RxSrc, done: u32 },
    /// Packets a poll took, delivered when their batch's cost has been spent
    /// (`gro_normal_batch`).
    Deliver { src: crate::rx::RxSrc, done: u32, batch: Vec<(u32, qdisc::Packet)>, last: bool },
    /// Free the skbs other CPUs deferred to this one (`skb_defer_free_flush`).
    DeferFlush,
    /// The driver's TX completion poll of `iface`'s tx queue `txq`.
    TxPoll { iface: u32, txq: u32 },
    /// A UDP sender thread's next datagram.
    UdpSend { app: u32 },
    /// A ping's echo request.
    PingSend { app: u32 },
    /// A ping's echo reply reached its socket: the process reads it.
    PingRecv { app: u32, seq: u64, sent_at: Instant },
    /// A TCP sender's application writes into its socket.
    TcpWrite { flow: u32 },
    /// A TCP timer (the sender's, or with `rcv` the receiver's) due at `at`, in the
    /// timer softirq.
    TcpTimer { flow: u32, rcv: bool, at: Instant },
    /// CPU time already charged to its functions (work done synchronously at a
    /// timer's instant) that still occupies the CPU.
    Occupy { ns: u64 },
    /// CPU time with no effect of its own (a receiver's copy, an application's loop).
    Burn { func: Func, class: Class, ns: u64 },
    /// A receiving thread's `recvmsg` calls (syscall and copy) and the frees of the
    /// skbs they consumed on this CPU (sys time); of TCP connection `flow`
    /// (`u32::MAX`: UDP), whose pending ACK the read may send (`tcp_cleanup_rbuf`).
    Recv { flow: u32, recv: u64, free: u64 },
}

/// What a work item left to do after a step.
pub enum Step {
    /// Busy for this long, then continue (`cur` stays).
    Busy(u64),
    /// Parked on a lock; the lock's release wakes the CPU.
    Wait,
    /// Finished after this long.
    Done(u64),
}

pub struct Cpu {
    /// Running (or parked on a lock); when false, the CPU is idle.
    pub busy: bool,
    /// A CPU event is pending for this instant.
    pub scheduled: Option<Instant>,
    /// The work item in progress across steps (an xmit waiting for a lock …).
    pub cur: Option<Work>,
    /// Work put aside while a packet it forwarded is sent (`Then::Resume`).
    pub resume: Option<Work>,
    /// CPU time charged to a step that then parked on a lock (the acquisition before
    /// it): spent from the spinning that follows, not on top of it.
    pub owed_ns: u64,
    pub cur_class: Class,
    pub softirq: VecDeque<Work>,
    pub process: VecDeque<Work>,
    /// Softirq items run in a row while process work waited.
    softirq_run: u32,
    /// Busy nanoseconds by class (user, sys, softirq).
    pub acct: [u64; 3],
    /// When the last work item ends: until then the CPU is still busy (new work
    /// starts then, without a wake-up); after it, it is idle.
    pub free_at: Instant,
    /// Softirq time in a row while process work waited (`netdev_budget_usecs`).
    softirq_ns: u64,
    /// Process time left in the slice process work got from ksoftirqd (0: none).
    slice_left: u64,
    /// The per-CPU backlog (`softnet_data.input_pkt_queue`): (interface, packet), and
    /// whether its poll is scheduled.
    pub backlog: VecDeque<(u32, qdisc::Packet)>,
    pub backlog_scheduled: bool,
    /// skbs other CPUs deferred to this one (`sd->defer_count`) and the cost of
    /// freeing them.
    pub defer_count: u32,
    pub defer_ns: u64,
}

/// The CPUs of one host and what they share.
pub struct HostCpus {
    pub cpus: Vec<Cpu>,
    pub profile: Profile,
    pub costs: Costs,
    pub funcs: Funcs,
    pub locks: Vec<Lock>,
    /// Shared cache lines outside locks (a qdisc's state word, pfifo_fast's rings):
    /// the CPU that touched each last.
    pub lines: Vec<Option<u32>>,
    /// `dev_tx_weight` (`dev_weight` × `dev_weight_tx_bias`): the quota of a qdisc run.
    pub tx_quota: u32,
    /// `netdev_budget`: softirq items before process work gets a turn.
    pub budget: u32,
    /// `net.core.dev_weight` and `dev_weight_tx_bias` (their product is `tx_quota`).
    pub dev_weight: u32,
    pub tx_bias: u32,
    /// `dev_weight_rx_bias`, and `dev_rx_weight` (their product): process_backlog's quota.
    pub rx_bias: u32,
    pub rx_quota: u32,
    /// `netdev_budget_usecs` in nanoseconds: softirq time before process work gets a turn.
    pub budget_ns: u64,
    /// The scheduler's slice (EEVDF `sysctl_sched_base_slice`: 0.75 ms × (1 +
    /// log2(min(cpus, 8)))): how long process work runs once softirq work went to
    /// ksoftirqd, which then competes with it as a thread.
    pub slice_ns: u64,
    /// `netdev_max_backlog`, `skb_defer_max`, `gro_normal_batch`.
    pub max_backlog: u32,
    pub defer_max: u32,
    pub gro_batch: u32,
    /// Packets dropped because a backlog was full (`softnet_stat`'s dropped column).
    pub backlog_dropped: u64,
    /// RFS's global socket flow table is set (`net.core.rps_sock_flow_entries` > 0).
    pub rfs: bool,
}

impl HostCpus {
    pub fn new(n: u32, profile: &Profile) -> HostCpus {
        HostCpus {
            cpus: (0..n)
                .map(|_| Cpu {
                    busy: false,
                    scheduled: None,
                    cur: None,
                    resume: None,
                    owed_ns: 0,
                    cur_class: Class::Sys,
                    softirq: VecDeque::new(),
                    process: VecDeque::new(),
                    softirq_run: 0,
                    acct: [0; 3],
                    free_at: Instant::ZERO,
                    softirq_ns: 0,
                    slice_left: 0,
                    backlog: VecDeque::new(),
                    backlog_scheduled: false,
                    defer_count: 0,
                    defer_ns: 0,
                })
                .collect(),
            costs: Costs::of(profile),
            profile: profile.clone(),
            funcs: Funcs::new(),
            locks: Vec::new(),
            lines: Vec::new(),
            tx_quota: 64,
            budget: 300,
            dev_weight: 64,
            tx_bias: 1,
            rx_bias: 1,
            rx_quota: 64,
            // 2 · USEC_PER_SEC / HZ at HZ=250.
            budget_ns: 8_000_000,
            slice_ns: 750_000 * (1 + n.clamp(1, 8).ilog2() as u64),
            max_backlog: 1000,
            defer_max: 64,
            gro_batch: 8,
            backlog_dropped: 0,
            rfs: false,
        }
    }

    pub fn lock(&mut self, name: String) -> u32 {
        self.locks.push(Lock {
            name,
            holder: None,
            last: None,
            waiters: VecDeque::new(),
            acquisitions: 0,
            contended: 0,
            wait_ns: 0,
        });
        self.locks.len() as u32 - 1
    }

    /// A shared cache line (see `lines`).
    pub fn line(&mut self) -> u32 {
        self.lines.push(None);
        self.lines.len() as u32 - 1
    }

    /// CPU `c` reads or writes line `l`: a transfer if another CPU touched it last,
    /// charged to `func`; returns the cost.
    pub fn touch(&mut self, l: u32, c: u32, func: u16) -> u64 {
        let last = self.lines[l as usize].replace(c);
        if last.is_some_and(|x| x != c) {
            let ns = self.costs.lock_transfer;
            let class = self.cpus[c as usize].cur_class;
            self.charge(c, class, func, ns);
            ns
        } else {
            0
        }
    }

    /// Charge `ns` of CPU `c`'s time to a function row.
    pub fn charge(&mut self, c: u32, class: Class, func: u16, ns: u64) {
        self.cpus[c as usize].acct[class as usize] += ns;
        self.funcs.ns[func as usize] += ns;
    }

    /// Try to take lock `l` for CPU `c`: `Some(cost)` if it is free (taken now), `None`
    /// if the CPU queues behind the holder.
    pub fn acquire(&mut self, l: u32, c: u32, now: Instant) -> Option<u64> {
        let (unc, transfer) = (self.costs.lock_uncontended, self.costs.lock_transfer);
        let lk = &mut self.locks[l as usize];
        lk.acquisitions += 1;
        if lk.holder.is_none() {
            lk.holder = Some(c);
            let cost = unc + if lk.last.is_some_and(|x| x != c) { transfer } else { 0 };
            let class = self.cpus[c as usize].cur_class;
            self.charge(c, class, Func::Lock as u16, cost);
            return Some(cost);
        }
        lk.contended += 1;
        lk.waiters.push_back((c, now));
        None
    }

    /// Release lock `l` held by CPU `c`; the next waiter (if any) gets it after the
    /// handover: returns that CPU and when it holds the lock.
    pub fn release(&mut self, l: u32, c: u32, now: Instant) -> Option<(u32, Instant)> {
        let costs = &self.costs;
        let lk = &mut self.locks[l as usize];
        debug_assert_eq!(lk.holder, Some(c), "{} released by a CPU that does not hold it", lk.name);
        lk.holder = None;
        lk.last = Some(c);
        let (next, since) = lk.waiters.pop_front()?;
        let others = (lk.waiters.len() as u64).min(costs.lock_waiters_cap as u64);
        let at = now + qdisc::Duration(costs.lock_transfer + costs.lock_per_waiter * others);
        lk.holder = Some(next);
        let waited = (at - since).as_nanos();
        lk.wait_ns += waited;
        let owed = std::mem::take(&mut self.cpus[next as usize].owed_ns);
        let class = self.cpus[next as usize].cur_class;
        self.charge(next, class, Func::Spin as u16, waited.saturating_sub(owed));
        Some((next, at))
    }
}

impl Sim {
    /// The CPUs of host `h` (scenario hosts have them, shared by the namespaces of one
    /// machine; the kernel lab's wire has none).
    pub fn cpus(&mut self, h: u32) -> &mut HostCpus {
        let m = self.hosts[h as usize].machine;
        self.hosts[m as usize].cpu.as_mut().expect("a host with CPUs")
    }

    /// The host whose CPUs host `h` runs on (itself, or the first namespace of its machine).
    pub fn machine(&self, h: u32) -> u32 {
        self.hosts[h as usize].machine
    }

    pub fn has_cpus(&self, h: u32) -> bool {
        self.hosts[self.machine(h) as usize].cpu.is_some()
    }

    /// Give CPU `c` of host `h` work: softirq (interrupt-driven) or process context.
    pub fn give(&mut self, h: u32, c: u32, w: Work, softirq: bool) {
        let now = self.now;
        let h = self.machine(h);
        let own = self.on_cpu == Some((h, c));
        let hc = self.cpus(h);
        let lat = hc.costs.wakeup_latency;
        let cpu = &mut hc.cpus[c as usize];
        if softirq && own && cpu.cur_class != Class::Softirq {
            // Raised by the thread running here: it runs at the thread's next
            // local_bh_enable, ksoftirqd or not (do_softirq).
            cpu.slice_left = 0;
            cpu.softirq_run = 0;
            cpu.softirq_ns = 0;
        }
        if matches!(w, Work::TxPoll { .. }) {
            // Drivers poll the TX completion queue first in every NAPI poll, before
            // up to 64 received packets: completions do not wait behind the rx ring.
            cpu.softirq.push_front(w);
        } else if softirq {
            cpu.softirq.push_back(w);
        } else if let (Work::Recv { flow, recv, free }, Some(Work::Recv { flow: fl, recv: r, free: f })) =
            (&w, cpu.process.back_mut())
        {
            // A receiver's queued reads add up, however far behind it falls.
            if flow == fl {
                *r += recv;
                *f += free;
            } else {
                cpu.process.push_back(w);
            }
        } else if let (Work::Burn { func, class, ns }, Some(Work::Burn { func: f, class: k, ns: n })) =
            (&w, cpu.process.back_mut())
        {
            // A thread's queued syscalls of one kind add up (the queue stays bounded
            // however far behind the thread falls).
            if (*func, *class) == (*f, *k) {
                *n += ns;
            } else {
                cpu.process.push_back(w);
            }
        } else {
            cpu.process.push_back(w);
        }
        if !cpu.busy && cpu.scheduled.is_none() {
            // Still finishing its last item: then. Idle: an interrupt's softirq runs at
            // once; a sleeping thread runs after the wake-up latency.
            let at = if cpu.free_at > now {
                cpu.free_at
            } else if softirq {
                now
            } else {
                now + qdisc::Duration(lat)
            };
            cpu.scheduled = Some(at);
            if at == now {
                // Runs as soon as the current event is handled (no trip through the
                // event queue: an interrupt on an idle CPU is the common case).
                self.ready.push((h, c));
            } else {
                self.events.at(at, Ev::Cpu { host: h, cpu: c });
            }
        }
    }

    /// The next item of CPU `c`: softirq first; once softirq work has run for
    /// `netdev_budget` items or `netdev_budget_usecs` in a row while process work
    /// waited, the rest of it is ksoftirqd's, a thread: process work gets a scheduler
    /// slice before softirq work runs again.
    fn next_work(&mut self, h: u32, c: u32) -> Option<(Work, Class)> {
        let (budget, budget_ns, slice) = (self.cpus(h).budget, self.cpus(h).budget_ns, self.cpus(h).slice_ns);
        let cpu = &mut self.cpus(h).cpus[c as usize];
        if cpu.process.is_empty() {
            cpu.slice_left = 0;
        } else if cpu.slice_left == 0 && (cpu.softirq_run >= budget || cpu.softirq_ns >= budget_ns) {
            cpu.slice_left = slice;
        }
        if cpu.slice_left == 0 {
            if let Some(w) = cpu.softirq.pop_front() {
                if !cpu.process.is_empty() {
                    cpu.softirq_run += 1;
                }
                return Some((w, Class::Softirq));
            }
        }
        cpu.softirq_run = 0;
        cpu.softirq_ns = 0;
        let w = cpu.process.pop_front()?;
        let class = if matches!(w, Work::Burn { class: Class::User, .. }) { Class::User } else { Class::Sys };
        Some((w, class))
    }

    /// CPU `c` of host `h` is free at `now` (its step ended or a lock was handed to it):
    /// run work until it must wait.
    pub fn cpu_run(&mut self, h: u32, c: u32) {
        {
            let now = self.now;
            let cpu = &mut self.cpus(h).cpus[c as usize];
            if cpu.scheduled != Some(now) {
                return;
            }
            cpu.scheduled = None;
            cpu.busy = true;
        }
        loop {
            let cur = self.cpus(h).cpus[c as usize].cur.take();
            let w = match cur {
                Some(w) => w,
                None => match self.next_work(h, c) {
                    Some((w, class)) => {
                        self.cpus(h).cpus[c as usize].cur_class = class;
                        w
                    }
                    None => {
                        let cpu = &mut self.cpus(h).cpus[c as usize];
                        cpu.busy = false;
                        return;
                    }
                },
            };
            let (ns, done) = match self.step(h, c, w) {
                Step::Wait => return,
                Step::Busy(ns) => (ns, false),
                Step::Done(ns) => (ns, true),
            };
            if ns == 0 {
                continue;
            }
            let at = self.now + qdisc::Duration(ns);
            let cpu = &mut self.cpus(h).cpus[c as usize];
            if cpu.cur_class == Class::Softirq && !cpu.process.is_empty() {
                cpu.softirq_ns += ns;
            } else if cpu.cur_class != Class::Softirq {
                cpu.slice_left = cpu.slice_left.saturating_sub(ns.max(1));
            }
            if done && cpu.cur.is_none() && cpu.softirq.is_empty() && cpu.process.is_empty() {
                // Nothing queued behind it: no event for its end (see `give`).
                cpu.busy = false;
                cpu.free_at = at;
                return;
            }
            // Nothing else can happen before `at` (no event, no other CPU just given
            // work): go on without the event queue.
            if self.events.none_before(at) && self.ready.is_empty() && at <= self.end {
                self.now = at;
                continue;
            }
            self.cpus(h).cpus[c as usize].scheduled = Some(at);
            self.events.at(at, Ev::Cpu { host: h, cpu: c });
            return;
        }
    }

    /// A lock was handed to CPU `c` at `at`: it goes on from there.
    pub fn lock_granted(&mut self, h: u32, c: u32, at: Instant) {
        self.cpus(h).cpus[c as usize].scheduled = Some(at);
        self.events.at(at, Ev::Cpu { host: h, cpu: c });
    }

    /// Run one step of a work item on CPU `c` at `now`. Synchronous work inside it
    /// (TCP's output) adds its cost.
    fn step(&mut self, h: u32, c: u32, w: Work) -> Step {
        self.on_cpu = Some((h, c));
        let s = self.step_inner(h, c, w);
        self.on_cpu = None;
        let extra = std::mem::take(&mut self.inline_ns);
        match s {
            Step::Busy(ns) => Step::Busy(ns + extra),
            Step::Done(ns) => Step::Done(ns + extra),
            Step::Wait => Step::Wait,
        }
    }

    fn step_inner(&mut self, h: u32, c: u32, w: Work) -> Step {
        match w {
            Work::Xmit(t) => self.xmit_step(h, c, t),
            Work::Burn { func, class, ns } => {
                self.cpus(h).charge(c, class, func as u16, ns);
                Step::Done(ns)
            }
            Work::Recv { flow, recv, free } => {
                self.cpus(h).charge(c, Class::Sys, Func::Recvmsg as u16, recv);
                self.cpus(h).charge(c, Class::Sys, Func::KfreeSkb as u16, free);
                self.tcp_read(flow);
                Step::Done(recv + free)
            }
            Work::Poll { src, done } => self.rx_poll(h, c, src, done),
            Work::Deliver { src, done, batch, last } => self.rx_deliver(h, c, src, done, batch, last),
            Work::DeferFlush => Step::Done(self.defer_flush(h, c)),
            Work::TxPoll { iface, txq } => Step::Done(self.tx_poll(h, c, iface, txq)),
            Work::UdpSend { app } => self.udp_send_on(h, c, app),
            Work::PingSend { app } => self.ping_send_on(h, c, app),
            Work::PingRecv { app, seq, sent_at } => {
                let ns = self.cpus(h).costs.recvmsg;
                self.cpus(h).charge(c, Class::Sys, Func::Recvmsg as u16, ns);
                self.ping_record(app, seq, sent_at, ns);
                Step::Done(ns)
            }
            Work::Occupy { ns } => Step::Done(ns),
            Work::TcpWrite { flow } => self.tcp_write_on(h, c, flow),
            Work::TcpTimer { flow, rcv: false, at } => {
                self.tcp_sender_timer(flow, at);
                Step::Done(0)
            }
            Work::TcpTimer { flow, rcv: true, at } => {
                self.tcp_receiver_timer(flow, at);
                Step::Done(0)
            }
        }
    }
}
