//! The `Qdisc` trait (the kernel's `Qdisc_ops`) and `Classful` (its `Qdisc_class_ops`).
//!
//! Differences from the kernel, all deliberate:
//! * time is an argument; a shaper that cannot send answers `Dequeued::Throttled { until }`
//!   instead of arming `qdisc_watchdog_schedule` (§1.5 of docs/kernel-notes.md);
//! * children are owned by their parent (`Box<dyn Qdisc>`); what the kernel's
//!   `qdisc_tree_reduce_backlog` pushes up the parent chain is handed up instead:
//!   a child records it (`Stats`-side `Reduce`) and the parent collects it after the call
//!   (see [`Child`]), which walks the same ancestors in the same order.

use crate::packet::Packet;
use crate::stats::{Reduce, Stats};
use crate::tc::{Out, TcError};
use crate::time::Instant;

/// What enqueue did with the packet: the kernel's NET_XMIT_* codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// NET_XMIT_SUCCESS: queued.
    Success,
    /// NET_XMIT_CN: this packet or another one was dropped to make room
    /// (pfifo_head_drop, fq_codel's batch drop of the same flow).
    Congested,
    /// NET_XMIT_DROP: this packet was dropped.
    Dropped,
    /// `__NET_XMIT_STOLEN`: consumed by a classifier action; not a drop.
    Stolen,
}

impl Enqueued {
    /// `net_xmit_drop_count`: does the parent count this as one of its drops?
    pub fn counts_as_drop(self) -> bool {
        matches!(self, Enqueued::Congested | Enqueued::Dropped)
    }
}

/// What dequeue returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Dequeued {
    Packet(Packet),
    /// Nothing queued (or nothing a work-conserving qdisc could send).
    Empty,
    /// Packets are queued but none may leave before `until` (the watchdog time).
    Throttled {
        until: Instant,
    },
}

impl Dequeued {
    pub fn packet(self) -> Option<Packet> {
        match self {
            Dequeued::Packet(p) => Some(p),
            _ => None,
        }
    }
    /// Merge "nothing now" answers of several children: the earliest wake-up wins.
    pub fn earliest(a: Dequeued, b: Dequeued) -> Dequeued {
        match (a, b) {
            (Dequeued::Throttled { until: x }, Dequeued::Throttled { until: y }) => {
                Dequeued::Throttled { until: x.min(y) }
            }
            (t @ Dequeued::Throttled { .. }, _) | (_, t @ Dequeued::Throttled { .. }) => t,
            _ => Dequeued::Empty,
        }
    }
}

/// The device facts a qdisc needs at init (`qdisc_dev(sch)`), and what tc reads from sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevInfo {
    pub name: String,
    pub mtu: u32,
    /// `dev->hard_header_len` (14 for Ethernet).
    pub hard_header_len: u32,
    pub tx_queue_len: u32,
    pub num_tx_queues: u32,
    /// The kernel whose behaviour the device follows (its `Device::kernel`), for the
    /// init/change code that differs between versions.
    pub kernel: crate::tree::KernelVersion,
}

impl DevInfo {
    /// A standard Ethernet `eth0` (MTU 1500, txqueuelen 1000, one tx queue) on the
    /// default kernel: what most tests, benches and examples start from.
    pub fn eth0() -> Self {
        DevInfo {
            name: "eth0".into(),
            mtu: 1500,
            hard_header_len: 14,
            tx_queue_len: 1000,
            num_tx_queues: 1,
            kernel: Default::default(),
        }
    }

    /// `psched_mtu`: MTU plus link-layer header, 1514 on standard Ethernet.
    pub fn psched_mtu(&self) -> u32 {
        self.mtu + self.hard_header_len
    }
}

/// One queueing discipline.
pub trait Qdisc: Send {
    /// The kernel's `ops->id`, e.g. `"pfifo"`.
    fn kind(&self) -> &'static str;

    fn enqueue(&mut self, pkt: Packet, now: Instant) -> Enqueued;
    fn dequeue(&mut self, now: Instant) -> Dequeued;
    /// The packet the next dequeue would return. Non-work-conserving qdiscs do
    /// what `qdisc_peek_dequeued` does: dequeue it and park it (it still counts in
    /// qlen/backlog, and was already counted as sent).
    fn peek(&mut self, now: Instant) -> Option<&Packet>;
    /// `ops->reset`: drop every queued packet without counting drops; time-based
    /// state restarts at `now`.
    fn reset(&mut self, now: Instant);

    fn stats(&self) -> &Stats;
    fn stats_mut(&mut self) -> &mut Stats;
    /// Backlog reductions to report to the parent (`qdisc_tree_reduce_backlog`).
    fn take_reduce(&mut self) -> Reduce {
        Reduce::default()
    }

    /// `ops->change` with the options tc would send. `Err` leaves the qdisc untouched.
    fn change(&mut self, opts: &crate::sched::Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError>;

    /// Print the options as iproute2's `print_qopt` prints what the kernel dumps.
    fn dump(&self, out: &mut Out, dev: &DevInfo);
    /// Print the xstats as iproute2's `print_xstats` does (`-s` only).
    fn dump_xstats(&self, _out: &mut Out) {}

    /// TCQ_F_CAN_BYPASS (§2.3): an idle, empty qdisc may hand packets straight to the driver.
    fn can_bypass(&self) -> bool {
        false
    }
    fn as_classful(&self) -> Option<&dyn Classful> {
        None
    }
    fn as_classful_mut(&mut self) -> Option<&mut dyn Classful> {
        None
    }
    /// When a throttled qdisc will next be able to send (its armed watchdog), if any.
    fn watchdog(&self) -> Option<Instant> {
        None
    }
    /// Whether `dump` sends a TCA_OPTIONS attribute at all (noqueue and mq do not).
    fn has_options(&self) -> bool {
        true
    }
    /// Bring dump-time counters up to date (mq sums its children in `mq_dump`).
    fn sync_stats(&mut self) {
        if let Some(c) = self.as_classful_mut() {
            for m in c.class_minors() {
                if let Some(n) = c.leaf_mut(m) {
                    n.q.sync_stats();
                }
            }
        }
    }
}

/// A classful qdisc's classes (the kernel's `Qdisc_class_ops`).
pub trait Classful {
    /// The minors of the classes, in the order the kernel walks them.
    fn class_minors(&self) -> Vec<u32>;
    /// `cops->find`: does class `minor` exist? (tbf answers yes for any minor.)
    fn find(&self, minor: u32) -> bool {
        self.leaf(minor).is_some()
    }
    /// The qdisc attached to class `minor`, if the class exists and has one.
    fn leaf(&self, minor: u32) -> Option<&Node>;
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node>;
    /// `cops->graft`: attach `new` to class `minor` (None = back to the default
    /// child), returning the old child. The parent's qlen/backlog drop by what the
    /// old child held (`qdisc_purge_queue` + `qdisc_tree_reduce_backlog`).
    fn graft(&mut self, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError>;
    /// `cops->change`: create class `classid` below `parent` (`exists` false) or
    /// change it. `Ok(Some(w))` succeeds with a kernel warning (tc prints
    /// "Warning: w."). Purged leaves are reported through the qdisc's `take_reduce`.
    fn change_class(
        &mut self,
        _classid: u32,
        _parent: u32,
        _exists: bool,
        _opts: Option<&crate::sched::ClassOpts>,
        _dev: &DevInfo,
        _now: Instant,
    ) -> Result<Option<String>, TcError> {
        Err(TcError::errno(crate::tc::Errno::EOPNOTSUPP))
    }
    /// `cops->delete`: remove class `minor` (its leaf's packets are purged and
    /// reported through `take_reduce`).
    fn delete_class(&mut self, _minor: u32, _now: Instant) -> Result<(), TcError> {
        Err(TcError::errno(crate::tc::Errno::EOPNOTSUPP))
    }
    /// Class stats (`cops->dump_stats`): by default the leaf's counters; None for
    /// kinds without `dump_stats` (tbf), whose classes print no counters.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        Some(self.leaf(minor).map(|n| n.q.stats().clone()).unwrap_or_default())
    }
    /// Whether `cops->dump_stats` copies the basic counters (TCA_STATS_BASIC); sfq's
    /// does not, so tc prints no `Sent … pkt` for its classes.
    fn class_has_basic_stats(&self) -> bool {
        true
    }
    /// Print the class options (`print_copt`); most classes have none.
    fn dump_class(&self, _minor: u32, _out: &mut Out) {}
    /// Print the class xstats (`print_cxstats`, `-s` only); most classes have none.
    fn dump_class_xstats(&self, _minor: u32, _out: &mut Out) {}
    /// `cops->tcf_block`: the filter block of class `minor`, or of the qdisc itself
    /// for minor 0. `None` for minor 0 means the kind has no `tcf_block` op (tc gets
    /// "Class doesn't support blocks"); `None` for a class means the op returned NULL
    /// (EINVAL), as prio's does for its bands. See [`crate::classify`].
    fn block(&self, _minor: u32) -> Option<&crate::classify::Block> {
        None
    }
    fn block_mut(&mut self, _minor: u32) -> Option<&mut crate::classify::Block> {
        None
    }
    /// Whether `cops->tcf_block` gives a block for class `minor` of a request (clsact
    /// gives none for its minor 0, whose [`Classful::block`] holds shared state).
    fn hook_block(&self, minor: u32) -> bool {
        self.block(minor).is_some()
    }
    /// `cops->bind_tcf`: a filter's result now names class `classid` (htb counts it
    /// in `filter_cnt`, so the class cannot be deleted while filters point at it).
    fn bind_filter(&mut self, _classid: u32) {}
    /// `cops->unbind_tcf`: a filter no longer names class `classid`.
    fn unbind_filter(&mut self, _classid: u32) {}
    /// The kind printed on `class <kind>` lines.
    fn class_kind(&self) -> &'static str;
    /// Classes dumped with parent TC_H_ROOT (mq's per-txq classes) rather than the qdisc.
    fn class_parent_is_root(&self) -> bool {
        false
    }
    /// The parent dumped for class `minor` (`tcm_parent` of `cops->dump`) when it is
    /// per class (htb: the parent class, or TC_H_ROOT); None = the qdisc-wide rule above.
    fn class_parent(&self, _minor: u32) -> Option<u32> {
        None
    }
}

/// A qdisc in a device's tree: the qdisc plus the tree facts the kernel keeps in
/// `struct Qdisc` (handle, parent, refcount, invisibility).
pub struct Node {
    /// `major << 16`, minor 0.
    pub handle: u32,
    /// Parent classid, or TC_H_ROOT.
    pub parent: u32,
    /// `refcnt` as printed (tcm_info).
    pub refcnt: u32,
    /// TCQ_F_INVISIBLE: hidden from `tc qdisc show` unless `invisible` is given.
    pub invisible: bool,
    /// Creation order. A qdisc enters its device's hash (`qdisc_hash_add`) when it
    /// is created below a class, and dumps list a hash bucket newest first; the
    /// order of creation is that order.
    pub seq: u64,
    /// Kept out of the device's qdisc hash although below a class (htb's leaf made
    /// when an inner class loses its last child is never `qdisc_hash_add`ed), so
    /// dumps do not list it.
    pub unhashed: bool,
    pub q: Box<dyn Qdisc>,
}

/// Creation counter for [`Node::seq`]. Only the relative order of one device's nodes
/// matters, which creation order fixes whatever else runs in the process.
static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Node {
    pub fn new(handle: u32, parent: u32, q: Box<dyn Qdisc>) -> Self {
        let seq = CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Node { handle, parent, refcnt: 1, invisible: false, seq, unhashed: false, q }
    }
    /// Is this qdisc in the device's hash? Root and ingress qdiscs are dumped on their
    /// own, and the builtin noop never is.
    pub fn hashed(&self) -> bool {
        !self.unhashed && self.parent != TC_H_ROOT && self.parent != 0xFFFF_FFF1 && self.q.kind() != "noop"
    }
    /// Mark as not in the device's qdisc hash (see [`Node::unhashed`]).
    pub fn unhashed(mut self) -> Self {
        self.unhashed = true;
        self
    }
    pub fn invisible(mut self) -> Self {
        self.invisible = true;
        self
    }
}

/// A classful qdisc's handle on one child: the parent-side bookkeeping of the
/// kernel's child calls (qlen/backlog, drop counting, reduce propagation).
pub struct Child;

impl Child {
    /// Enqueue to `child` and account in `parent` as the kernel's classful qdiscs do
    /// (e.g. `prio_enqueue`): success → qlen+1, backlog+len; a drop code → drops+1.
    /// Reductions reported by the child are applied to `parent` and recorded in
    /// `up` to be reported further up.
    pub fn enqueue(child: &mut Node, pkt: Packet, now: Instant, parent: &mut Stats, up: &mut Reduce) -> Enqueued {
        let len = pkt.len;
        let r = child.q.enqueue(pkt, now);
        Self::collect(child, parent, up);
        match r {
            Enqueued::Success => parent.queued(len),
            r if r.counts_as_drop() => parent.dropped(),
            _ => {}
        }
        r
    }

    /// Dequeue from `child` (`qdisc_dequeue_peeked` semantics live in the child's own
    /// parked slot); on a packet, the parent's qlen/backlog fall and its bstats rise.
    pub fn dequeue(child: &mut Node, now: Instant, parent: &mut Stats, up: &mut Reduce) -> Dequeued {
        let d = child.q.dequeue(now);
        Self::collect(child, parent, up);
        if let Dequeued::Packet(p) = &d {
            parent.unqueued(p.len);
            parent.sent(p);
        }
        d
    }

    /// Apply the child's pending reduction to the parent and pass it on.
    pub fn collect(child: &mut Node, parent: &mut Stats, up: &mut Reduce) {
        let r = child.q.take_reduce();
        if !r.is_zero() {
            r.apply(parent);
            up.add(r.pkts, r.bytes);
        }
    }
}

/// `qdisc_peek_dequeued`'s parking slot for non-work-conserving qdiscs (§1.4).
#[derive(Default)]
pub struct Parked(pub Option<Packet>);

impl Parked {
    /// `qdisc_dequeue_peeked`'s first step: the parked packet leaves the queue (it was
    /// counted as sent when it was parked).
    pub fn take(&mut self, stats: &mut Stats) -> Option<Packet> {
        let p = self.0.take()?;
        stats.unqueued(p.len);
        Some(p)
    }
    /// `qdisc_peek_dequeued`: park a packet the qdisc just dequeued; it stays counted
    /// in qlen/backlog until taken.
    pub fn park(&mut self, p: Packet, stats: &mut Stats) {
        stats.queued(p.len);
        self.0 = Some(p);
    }
}

/// TC_H_ROOT.
pub const TC_H_ROOT: u32 = 0xFFFF_FFFF;
/// TC_H_UNSPEC.
pub const TC_H_UNSPEC: u32 = 0;

pub fn tc_h_maj(h: u32) -> u32 {
    h & 0xFFFF_0000
}
pub fn tc_h_min(h: u32) -> u32 {
    h & 0x0000_FFFF
}
pub fn tc_h_make(maj: u32, min: u32) -> u32 {
    tc_h_maj(maj) | tc_h_min(min)
}
