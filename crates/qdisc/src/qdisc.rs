//! The `Qdisc` trait (the kernel's `Qdisc_ops`), `Classful` (its `Qdisc_class_ops`)
//! and `Node` (its `struct Qdisc`).
//!
//! Differences from the kernel, all deliberate:
//! * time is an argument; a shaper that cannot send answers `Dequeued::Throttled { until }`
//!   instead of arming `qdisc_watchdog_schedule` (§1.5 of docs/kernel-notes.md);
//! * children are owned by their parent (`Node`s holding `Box<dyn Qdisc>`); what the
//!   kernel's `qdisc_tree_reduce_backlog` pushes up the parent chain is handed up
//!   instead: a child records it in its [`Sch`] and the parent collects it after the
//!   call (see [`Child`]), which walks the same ancestors in the same order.

use std::any::Any;

use crate::packet::Packet;
use crate::stats::{Reduce, Stats};
use crate::tc::{Args, Out, TcError};
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
    /// `real_num_tx_queues`: the tx queues in use (≤ `num_tx_queues`).
    pub real_tx_queues: u32,
    /// The link speed in Mbit/s that sysfs `speed` and ethtool report, if the device
    /// has one (veth: 10000; a dummy: none).
    pub speed: Option<u32>,
    /// `dev->max_mtu`: 0 for the ifb that realises an `eth` device in the captures
    /// (`ifb_setup` clears it), ETH_MAX_MTU for veth.
    pub max_mtu: u32,
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
            real_tx_queues: 1,
            speed: None,
            max_mtu: 0,
            kernel: Default::default(),
        }
    }

    /// `psched_mtu`: MTU plus link-layer header, 1514 on standard Ethernet.
    pub fn psched_mtu(&self) -> u32 {
        self.mtu + self.hard_header_len
    }
}

/// One kind's registration: `struct Qdisc_ops` (id, init, static flags) and
/// `struct qdisc_util` (parse_qopt, parse_copt).
pub struct Ops {
    /// `ops->id`, the name tc and dumps use.
    pub id: &'static str,
    /// How tc parses the kind's options.
    pub parse: Parse,
    /// `qdisc_create` → `ops->init` (see [`Create`]).
    pub create: fn(&Create) -> Result<Box<dyn Qdisc>, TcError>,
    /// `parse_copt`, for kinds whose classes take options (htb).
    pub parse_class: Option<ClassParse>,
    pub flags: Flags,
    /// The first kernel version that has the kind (`register_qdisc` in a module that
    /// version ships), None for every version this engine follows. Older kernels —
    /// and the iproute2 their goldens pair with — do not know the kind at all.
    pub since: Option<crate::tree::KernelVersion>,
}

/// iproute2's `parse_copt`: a class command's options.
pub type ClassParse = fn(&mut Args) -> Result<Opts, TcError>;

/// iproute2's side of a kind.
pub enum Parse {
    /// tc/q_KIND.c's `parse_qopt`: `Ok(None)` means tc sends no TCA_OPTIONS at all.
    Qopt(fn(&mut Args) -> Result<Option<Opts>, TcError>),
    /// q_KIND.c registers the kind for printing only and refuses options (pfifo_fast).
    PrintOnly,
    /// iproute2 has no q_KIND.c (mq, noqueue): its fallback refuses any option.
    Generic,
}

/// What the core of the kernel does differently for a kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// TCQ_F_INGRESS: attached only at ffff:fff1 (ingress, clsact).
    pub ingress: bool,
    /// `ops->attach`: gives each tx queue a child of its own (mq); the device's
    /// queues hold the children, not the qdisc, and nothing travels up from them.
    pub per_txq: bool,
    /// No `enqueue` (noqueue): the device transmits directly.
    pub no_enqueue: bool,
    /// TCQ_F_BUILTIN: the static noop qdisc, never hashed, never a "real" qdisc.
    pub builtin: bool,
    /// `ops->dump` sends no TCA_OPTIONS (noqueue, mq).
    pub no_options: bool,
    /// How many of TCA_INGRESS_BLOCK and TCA_EGRESS_BLOCK the kind takes
    /// (`ops->ingress_block_set`, `ops->egress_block_set`): ingress 1, clsact 2.
    pub shared_blocks: u8,
}

impl Flags {
    /// A kind the core treats like any other.
    pub const NONE: Flags = Flags {
        ingress: false,
        per_txq: false,
        no_enqueue: false,
        builtin: false,
        no_options: false,
        shared_blocks: 0,
    };
}

/// The arguments of `ops->init`: options (if tc sent any), the device, the new
/// qdisc's handle (children it creates hang below it), where it is attached, and
/// `net.core.default_qdisc` (only mq reads it, for its tx queues' qdiscs).
pub struct Create<'a> {
    pub opts: Option<&'a Opts>,
    pub dev: &'a DevInfo,
    pub handle: u32,
    pub parent: u32,
    pub now: Instant,
    pub default_qdisc: &'a str,
}

impl Create<'_> {
    /// The options as the kind's own type: EINVAL if they are some other kind's (what
    /// the kernel's nla_parse of a foreign attribute set comes to).
    pub fn opts<T: Any>(&self) -> Result<Option<&T>, TcError> {
        self.opts.map(Opts::of).transpose()
    }
    /// Options the kind cannot do without (tbf, htb, prio, netem): EINVAL if absent.
    pub fn required<T: Any>(&self) -> Result<&T, TcError> {
        self.opts.ok_or_else(TcError::invalid)?.of()
    }
}

/// The options tc sends for a kind (`TCA_OPTIONS`) or a class, already parsed into
/// the kind's own type.
pub struct Opts(Box<dyn Any + Send + Sync>);

impl Opts {
    pub fn new<T: Any + Send + Sync>(v: T) -> Self {
        Opts(Box::new(v))
    }
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
    /// The kind's own type, or EINVAL.
    pub fn of<T: Any>(&self) -> Result<&T, TcError> {
        self.get().ok_or_else(TcError::invalid)
    }
}

impl std::fmt::Debug for Opts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Opts(..)")
    }
}

/// One queueing discipline: the kind's own part of the kernel's `Qdisc_ops`. What
/// `struct Qdisc` holds for every kind (counters, the parked packet, the reduction to
/// hand up) is the [`Sch`] in the tree's [`Node`], passed in as the kernel passes
/// `struct Qdisc *sch`; callers go through [`Node`]'s methods.
pub trait Qdisc: Send {
    /// The kind's registration (`sch->ops`): its name, parser, constructor, flags.
    fn ops(&self) -> &'static Ops;

    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued;
    /// `ops->dequeue` proper: [`Node::dequeue`] hands out a parked packet first
    /// (`qdisc_dequeue_peeked`).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued;
    /// `ops->peek`: the packet the next dequeue would return. The default is
    /// `qdisc_peek_dequeued`, what non-work-conserving qdiscs use: dequeue it and park
    /// it in `sch` (it still counts in qlen/backlog, and was already counted as sent).
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        peek_dequeued(self, sch, now)
    }
    /// `ops->reset`: drop every queued packet without counting drops; time-based
    /// state restarts at `now`. [`Node::reset`] then clears what `qdisc_reset` does
    /// (the parked packet, qlen, backlog).
    fn reset(&mut self, sch: &mut Sch, now: Instant);

    /// `ops->change` with the options tc would send (the kind's own type, see
    /// [`Opts::get`]). `Err` leaves the qdisc untouched. The default is a kind whose
    /// `change` op is NULL (drr, qfq, htb, sfq, etf, mq, …): `qdisc_change` refuses.
    fn change(&mut self, _sch: &mut Sch, _opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        Err(TcError::kernel("Change operation not supported by specified qdisc"))
    }
    /// Whether [`Qdisc::change`] is the kind's own (`ops->change` is not NULL):
    /// false for exactly the kinds that keep the default. `qdisc_change` refuses a
    /// kind without one before it looks at anything else the request carries.
    fn has_change(&self) -> bool {
        true
    }

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
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        None
    }
    /// The device's traffic classes as a root qdisc set them (`netdev_set_num_tc`,
    /// `netdev_set_tc_queue`, `netdev_set_prio_tc_map`: mqprio): the tx queues, as
    /// (offset, count), that `skb_tx_hash` spreads a packet of priority `prio` over.
    /// None: the device has no traffic classes.
    fn tc_txqs(&self, _prio: u32) -> Option<(u32, u32)> {
        None
    }
    /// The extack message a successful init or change left (`NL_SET_ERR_MSG` on a
    /// request that succeeds), which tc prints as a warning; taken once.
    fn take_warning(&mut self) -> Option<&'static str> {
        None
    }
    /// Bring dump-time counters up to date (mq sums its children in `mq_dump`).
    fn sync_stats(&mut self, _sch: &mut Sch) {
        if let Some(c) = self.as_classful_mut() {
            for m in c.class_minors() {
                if let Some(n) = c.leaf_mut(m) {
                    n.sync_stats();
                }
            }
        }
    }
}

/// `qdisc_peek_dequeued`: the parked packet, or dequeue one and park it.
pub fn peek_dequeued<'a, Q: Qdisc + ?Sized>(q: &'a mut Q, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
    if sch.parked.is_none() {
        if let Dequeued::Packet(p) = q.dequeue(sch, now) {
            sch.park(p);
        }
    }
    sch.parked.as_ref()
}

/// `qdisc_dequeue_internal(sch, false)`: the parked packet first, else the kind's
/// dequeue — how a change trims a queue to a new limit.
pub fn dequeue_internal<Q: Qdisc + ?Sized>(q: &mut Q, sch: &mut Sch, now: Instant) -> Dequeued {
    match sch.take_parked() {
        Some(p) => Dequeued::Packet(p),
        None => q.dequeue(sch, now),
    }
}

/// Inside a classful kind's `impl Qdisc`: its `as_classful` and `as_classful_mut`
/// (the kind's `Qdisc_ops.cl_ops`).
#[macro_export]
macro_rules! classful {
    () => {
        fn as_classful(&self) -> Option<&dyn $crate::qdisc::Classful> {
            Some(self)
        }
        fn as_classful_mut(&mut self) -> Option<&mut dyn $crate::qdisc::Classful> {
            Some(self)
        }
    };
}

/// The state the kernel keeps in `struct Qdisc` for every kind, kept in the tree's
/// [`Node`] and handed to the kind's operations.
///
/// In declaration order (`repr(C)`): what every enqueue and dequeue writes first, the
/// parked packet, read only when `is_parked` says there is one, after; see [`Node`].
#[derive(Default)]
#[repr(C)]
pub struct Sch {
    /// bstats + qstats, qlen and backlog included.
    pub stats: Stats,
    /// Backlog reductions to report to the parent (`qdisc_tree_reduce_backlog`),
    /// collected by the parent after the call (see [`Child`]).
    pub reduce: Reduce,
    /// `netif_schedule_queue`: the qdisc asked, outside a dequeue, that its device
    /// run its queue (plug's release); taken by [`crate::tree::Device::take_scheduled`].
    pub schedule: bool,
    /// `parked.is_some()`, for [`Node::dequeue`]'s test on every packet: the
    /// option's tag is the packet's last byte, a cache line further on.
    is_parked: bool,
    /// `sch->gso_skb` as `qdisc_peek_dequeued` uses it (§1.4): a packet dequeued by a
    /// peek, still counted in qlen/backlog until dequeued.
    parked: Option<Packet>,
}

impl Sch {
    /// `qdisc_peek_dequeued`: park a packet the qdisc just dequeued; it stays counted
    /// in qlen/backlog until taken.
    pub fn park(&mut self, p: Packet) {
        self.stats.queued(p.len);
        self.parked = Some(p);
        self.is_parked = true;
    }
    /// `qdisc_dequeue_peeked`'s first step: the parked packet leaves the queue (it was
    /// counted as sent when it was parked).
    pub fn take_parked(&mut self) -> Option<Packet> {
        self.is_parked = false;
        let p = self.parked.take()?;
        self.stats.unqueued(p.len);
        Some(p)
    }
    pub fn parked(&self) -> Option<&Packet> {
        self.parked.as_ref()
    }
    /// A classful qdisc's classification gave no class (`NET_XMIT_SUCCESS |
    /// __NET_XMIT_BYPASS` for a drop, `__NET_XMIT_STOLEN` for a consumed packet):
    /// a drop is counted here (`qdisc_qstats_drop`). Returns the answer for the
    /// packet.
    pub fn unclassified(&mut self, e: Enqueued) -> Enqueued {
        if e == Enqueued::Dropped {
            self.stats.dropped();
        }
        e
    }
    /// Record a reduction for the parent.
    pub fn reduce(&mut self, pkts: i32, bytes: i64) {
        self.reduce.add(pkts, bytes);
    }
    /// `qdisc_tree_reduce_backlog` reaching this qdisc from a child: our qlen and
    /// backlog fall (drops rise), and the reduction travels on up.
    pub fn child_reduced(&mut self, r: Reduce) {
        if !r.is_zero() {
            r.apply(&mut self.stats);
            self.reduce.merge(r);
        }
    }
    /// A child's queue was purged (`qdisc_purge_queue`): what it held is reduced here
    /// and above.
    pub fn child_purged(&mut self, child: &Stats) {
        self.child_reduced(Reduce::new(child.qlen as i32, child.backlog as i64));
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
    /// The qdisc attached to class `minor`, if the class exists and has one. The
    /// default: classes without qdiscs (no `leaf` op, or one answering NULL).
    fn leaf(&self, _minor: u32) -> Option<&Node> {
        None
    }
    fn leaf_mut(&mut self, _minor: u32) -> Option<&mut Node> {
        None
    }
    /// `cops->graft`: attach `new` to class `minor` (None = back to the default
    /// child), returning the old child. The parent's qlen/backlog drop by what the
    /// old child held (`qdisc_purge_queue` + `qdisc_tree_reduce_backlog`).
    /// `sch` is the qdisc's own [`Sch`] (the classes' parent). The default is a kind
    /// without a `graft` op: EOPNOTSUPP.
    fn graft(
        &mut self,
        _sch: &mut Sch,
        _minor: u32,
        _new: Option<Node>,
        _dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        Err(TcError::errno(crate::tc::Errno::EOPNOTSUPP))
    }
    /// `cops->change`: create class `classid` below `parent` (`exists` false) or
    /// change it. `Ok(Some(w))` succeeds with a kernel warning (tc prints
    /// "Warning: w."). Purged leaves are reported through `sch.reduce`.
    #[allow(clippy::too_many_arguments)]
    fn change_class(
        &mut self,
        _sch: &mut Sch,
        _classid: u32,
        _parent: u32,
        _exists: bool,
        _opts: Option<&Opts>,
        _dev: &DevInfo,
        _now: Instant,
    ) -> Result<Option<String>, TcError> {
        Err(TcError::errno(crate::tc::Errno::EOPNOTSUPP))
    }
    /// `cops->delete`: remove class `minor` (its leaf's packets are purged and
    /// reported through `sch.reduce`).
    fn delete_class(&mut self, _sch: &mut Sch, _minor: u32, _now: Instant) -> Result<(), TcError> {
        Err(TcError::errno(crate::tc::Errno::EOPNOTSUPP))
    }
    /// Whether `cops->change` gives a class the rate estimator TCA_RATE asks for
    /// (`gen_new_estimator`/`gen_replace_estimator` on `cl->rate_est`: htb, hfsc,
    /// drr, qfq); the other kinds ignore the attribute.
    fn class_takes_estimator(&self) -> bool {
        false
    }
    /// Class stats (`cops->dump_stats`): by default the leaf's counters; None for
    /// kinds without `dump_stats` (tbf), whose classes print no counters.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        Some(self.leaf(minor).map(|n| n.stats().clone()).unwrap_or_default())
    }
    /// Whether `cops->dump_stats` copies the basic counters (TCA_STATS_BASIC); sfq's
    /// does not, so tc prints no `Sent … pkt` for its classes.
    fn class_has_basic_stats(&self) -> bool {
        true
    }
    /// `cops->dump` fails for this kind's classes (sfb's answers ENOSYS): a class
    /// dump ends where it reaches them, so they and every class after them in the
    /// walk go unlisted.
    fn class_dump_fails(&self) -> bool {
        false
    }
    /// Whether `cops->dump` names class `minor`'s qdisc (`tcm_info`, tc's `leaf X:`)
    /// — hfsc's does only for leaves, though its inner classes keep one.
    fn dumps_leaf(&self, _minor: u32) -> bool {
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
    /// The extack `cops->tcf_block` gives when it refuses a class's block (EINVAL
    /// either way); None: no message.
    fn no_block_extack(&self) -> Option<&'static str> {
        None
    }
    /// The index of the shared block `cops->tcf_block` gives for class `minor`
    /// (`tcf_block_shared`), 0 for a block of the qdisc's own. A shared block lives
    /// in the netns ([`crate::classify::SharedBlocks`]); [`Classful::block`] then
    /// answers an unused block of the qdisc's own, which nothing reads.
    fn block_index(&self, _minor: u32) -> u32 {
        0
    }
    /// `ops->ingress_block_get` and `ops->egress_block_get` (0: none), for the dump.
    fn block_indexes(&self) -> [u32; 2] {
        [0, 0]
    }
    /// `ops->ingress_block_set` / `egress_block_set` before `ops->init` binds them:
    /// only the kinds whose [`Flags::shared_blocks`] allows it are asked.
    fn set_block_indexes(&mut self, _indexes: [u32; 2]) {}
    /// `cops->bind_tcf`'s answer for a filter in class `base`'s block (0: the
    /// qdisc's own block; the caller has lifted the block out of the qdisc) naming
    /// `classid`: the class its result is bound to (`res.class`, as this kind names
    /// its classes), or None (res.class 0). [`Classful::bind_filter`] then counts
    /// it. The default is for the kinds whose classify reads only `res.classid`
    /// (prio, ets, multiq, ingress, sfq, …: whatever their bind answers is never
    /// read, and they count no filters).
    fn bind_tcf(&self, _base: u32, _classid: u32) -> Option<u32> {
        None
    }
    /// Run `f` on class `minor`'s block (0: the qdisc's own) with this qdisc's
    /// [`Classful::bind_tcf`] for it: the block is lifted out while `f` runs (a
    /// filter's `change` holds the block while its binds ask the qdisc). False when
    /// there is no such block.
    fn with_block(
        &mut self,
        minor: u32,
        f: &mut dyn FnMut(&mut crate::classify::Block, &crate::classify::BindTcf<'_>),
    ) -> bool {
        let Some(b) = self.block_mut(minor) else { return false };
        let mut block = std::mem::replace(b, crate::classify::Block::new(0));
        f(&mut block, &|classid| self.bind_tcf(minor, classid));
        *self.block_mut(minor).expect("the block is back where it was") = block;
        true
    }
    /// `cops->bind_tcf`'s count: a filter's result is now bound to class `classid`
    /// (htb and hfsc count it in `filter_cnt`, so the class cannot be deleted while
    /// filters are bound to it).
    fn bind_filter(&mut self, _classid: u32) {}
    /// `cops->unbind_tcf`: a filter no longer names class `classid`.
    fn unbind_filter(&mut self, _classid: u32) {}
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

/// A qdisc with a single class, `<handle>:1`, which every classid finds (`*_find`
/// answers 1 whatever the minor), holding one child — by default noop once none is
/// grafted — and without class counters (no `dump_stats` class op): tbf's, red's and
/// cbs's class ops.
pub trait OneClass {
    /// Our handle: the class is `<handle>:1`, noop's parent.
    fn class_handle(&self) -> u32;
    fn one_child(&self) -> &Node;
    fn one_child_mut(&mut self) -> &mut Node;
    /// What grafting nothing puts in the class: noop (tbf, red), or a new default
    /// child (cbs's pfifo).
    fn graft_default(&self, _dev: &DevInfo) -> Node {
        crate::sched::noqueue::Noop::node(tc_h_make(self.class_handle(), 1))
    }
}

impl<T: OneClass> Classful for T {
    fn class_minors(&self) -> Vec<u32> {
        vec![1]
    }
    fn leaf(&self, _minor: u32) -> Option<&Node> {
        Some(self.one_child())
    }
    fn leaf_mut(&mut self, _minor: u32) -> Option<&mut Node> {
        Some(self.one_child_mut())
    }
    /// `*_graft`: None means noop. The tree purges the old child and reduces the
    /// ancestors (us included).
    fn graft(
        &mut self,
        _sch: &mut Sch,
        _minor: u32,
        new: Option<Node>,
        dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        let new = new.unwrap_or_else(|| self.graft_default(dev));
        Ok(Some(std::mem::replace(self.one_child_mut(), new)))
    }
    fn class_stats(&self, _minor: u32) -> Option<Stats> {
        None
    }
}

/// A qdisc in a device's tree — the kernel's `struct Qdisc`: the kind's own state
/// (`q`), the state every kind has ([`Sch`]) and the tree facts (handle, parent,
/// refcount, invisibility). Generic so that a kind's unit tests can hold a concrete
/// qdisc (`Node<Tbf>`); the tree holds `Node<dyn Qdisc>`.
///
/// Fields in declaration order (`repr(C)`): the kind and the counters every packet
/// touches come first, in the node's first two cache lines, so that a class holding
/// its node (qfq's, with 10,000 of them) is reached in as few lines as the kernel's
/// `struct Qdisc`; the tree facts follow.
#[repr(C)]
pub struct Node<Q: ?Sized + Qdisc = dyn Qdisc> {
    pub q: Box<Q>,
    pub sch: Sch,
    /// `major << 16`, minor 0.
    pub handle: u32,
    /// Parent classid, or TC_H_ROOT.
    pub parent: u32,
    /// `refcnt` as printed (tcm_info).
    pub refcnt: u32,
    /// TCQ_F_INVISIBLE: hidden from `tc qdisc show` unless `invisible` is given.
    pub invisible: bool,
    /// Kept out of the device's qdisc hash although below a class (htb's leaf made
    /// when an inner class loses its last child is never `qdisc_hash_add`ed), so
    /// dumps do not list it.
    pub unhashed: bool,
    /// Creation order. A qdisc enters its device's hash (`qdisc_hash_add`) when it
    /// is created below a class, and dumps list a hash bucket newest first; the
    /// order of creation is that order.
    pub seq: u64,
    /// `sch->stab`: the size table given with the qdisc (crate::stab).
    pub stab: Option<std::sync::Arc<crate::stab::SizeTable>>,
    /// The rate estimators of the qdisc and its classes (`estimator …`), ticked by
    /// the device ([`crate::estimator`]).
    pub est: Option<Box<crate::estimator::QdiscEst>>,
}

/// Creation counter for [`Node::seq`]. Only the relative order of one device's nodes
/// matters, which creation order fixes whatever else runs in the process.
static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Node {
    pub fn new(handle: u32, parent: u32, q: Box<dyn Qdisc>) -> Self {
        Node::typed(handle, parent, q)
    }
}

impl<Q: ?Sized + Qdisc> Node<Q> {
    /// A node holding a qdisc of a known type (what a kind's unit tests use).
    pub fn typed(handle: u32, parent: u32, q: Box<Q>) -> Self {
        let seq = CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Node {
            handle,
            parent,
            refcnt: 1,
            invisible: false,
            unhashed: false,
            seq,
            stab: None,
            est: None,
            sch: Sch::default(),
            q,
        }
    }
    /// The kind's name (`sch->ops->id`).
    pub fn kind(&self) -> &'static str {
        self.q.ops().id
    }
    /// The kind's flags (`sch->ops->static_flags` and friends).
    pub fn flags(&self) -> Flags {
        self.q.ops().flags
    }
    /// Is this qdisc in the device's hash? Root and ingress qdiscs are dumped on their
    /// own, and the builtin noop never is.
    pub fn hashed(&self) -> bool {
        !self.unhashed && self.parent != TC_H_ROOT && self.parent != 0xFFFF_FFF1 && !self.flags().builtin
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

    #[inline]
    pub fn enqueue(&mut self, pkt: Packet, now: Instant) -> Enqueued {
        self.q.enqueue(&mut self.sch, pkt, now)
    }
    /// `qdisc_dequeue_peeked`: a packet parked by a peek first, else `ops->dequeue`.
    #[inline]
    pub fn dequeue(&mut self, now: Instant) -> Dequeued {
        if self.sch.is_parked {
            return self.dequeue_parked();
        }
        self.q.dequeue(&mut self.sch, now)
    }
    /// Out of line: merged into [`Node::dequeue`], the parked packet's path makes the
    /// caller copy every dequeued packet field by field, whose next load as a block
    /// then stalls on store forwarding.
    #[cold]
    #[inline(never)]
    fn dequeue_parked(&mut self) -> Dequeued {
        self.sch.take_parked().map_or(Dequeued::Empty, Dequeued::Packet)
    }
    pub fn peek(&mut self, now: Instant) -> Option<&Packet> {
        self.q.peek(&mut self.sch, now)
    }
    /// `qdisc_reset`: `ops->reset`, then the parked packet, qlen and backlog go.
    pub fn reset(&mut self, now: Instant) {
        self.q.reset(&mut self.sch, now);
        self.sch.parked = None;
        self.sch.is_parked = false;
        self.sch.stats.qlen = 0;
        self.sch.stats.backlog = 0;
    }
    pub fn change(&mut self, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.q.change(&mut self.sch, opts, dev, now)
    }
    pub fn stats(&self) -> &Stats {
        &self.sch.stats
    }
    pub fn stats_mut(&mut self) -> &mut Stats {
        &mut self.sch.stats
    }
    /// The reductions recorded since the last call, for the parent.
    pub fn take_reduce(&mut self) -> Reduce {
        std::mem::take(&mut self.sch.reduce)
    }
    /// When a throttled qdisc will next be able to send ([`Qdisc::watchdog`]).
    pub fn watchdog(&self) -> Option<Instant> {
        self.q.watchdog(&self.sch)
    }
    /// Bring dump-time counters up to date ([`Qdisc::sync_stats`]).
    pub fn sync_stats(&mut self) {
        self.q.sync_stats(&mut self.sch)
    }

    /// [`Classful::graft`] with this qdisc's own state (EOPNOTSUPP if classless).
    pub fn graft(&mut self, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        let c = self.q.as_classful_mut().ok_or_else(|| TcError::errno(crate::tc::Errno::EOPNOTSUPP))?;
        c.graft(&mut self.sch, minor, new, dev)
    }
    /// [`Classful::change_class`] with this qdisc's own state (EINVAL if classless).
    pub fn change_class(
        &mut self,
        classid: u32,
        parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        let c = self.q.as_classful_mut().ok_or_else(|| TcError::errno(crate::tc::Errno::EINVAL))?;
        let r = c.change_class(&mut self.sch, classid, parent, exists, opts, dev, now);
        if r.is_ok() && !exists {
            // tc_ctl_tclass: "a new class, reverse binding".
            bind_tclass(c, classid, true);
        }
        r
    }
    /// [`Classful::delete_class`] with this qdisc's own state (EINVAL if classless),
    /// then tc_ctl_tclass's unbinding of the filters naming the class, which
    /// follows the delete whether it succeeded or not: a class a filter holds
    /// refuses one delete ("… class in use") and lets the next take it.
    pub fn delete_class(&mut self, minor: u32, now: Instant) -> Result<(), TcError> {
        let c = self.q.as_classful_mut().ok_or_else(|| TcError::errno(crate::tc::Errno::EINVAL))?;
        let found = c.find(minor);
        let r = c.delete_class(&mut self.sch, minor, now);
        if found {
            bind_tclass(c, tc_h_maj(self.handle) | minor, false);
        }
        r
    }
}

/// `tc_bind_tclass`: every class's block (`cl_ops->walk`, each class's
/// `tcf_block`; not the qdisc's own block unless a class owns it, as hfsc's root
/// does) has its results naming `classid` bound to the class (`bind`: the qdisc's
/// [`Classful::bind_tcf`] for that block) or unbound; the qdisc's counts follow.
fn bind_tclass(c: &mut dyn Classful, classid: u32, bind: bool) {
    let mut binds = crate::classify::Binds::default();
    for minor in c.class_minors() {
        if c.block(minor).is_none_or(|b| b.is_empty()) {
            continue;
        }
        c.with_block(minor, &mut |b, bind_tcf| {
            let class = if bind { bind_tcf(classid) } else { None };
            b.bind_class(classid, class, &mut binds);
        });
    }
    let (unbound, bound) = binds.split();
    for x in unbound {
        c.unbind_filter(x);
    }
    for y in bound {
        c.bind_filter(y);
    }
}

/// Unit tests reach a concrete qdisc's fields through its node.
#[cfg(test)]
impl<Q: Qdisc> std::ops::Deref for Node<Q> {
    type Target = Q;
    fn deref(&self) -> &Q {
        &self.q
    }
}
#[cfg(test)]
impl<Q: Qdisc> std::ops::DerefMut for Node<Q> {
    fn deref_mut(&mut self) -> &mut Q {
        &mut self.q
    }
}

/// A classful qdisc's handle on one child: the parent-side bookkeeping of the
/// kernel's child calls (qlen/backlog, drop counting, reduce propagation).
pub struct Child;

impl Child {
    /// Enqueue to `child` and account in `parent` as the kernel's classful qdiscs do
    /// (e.g. `prio_enqueue`): success → qlen+1, backlog+len; a drop code → drops+1.
    /// Reductions reported by the child are applied to `parent` and recorded in its
    /// `reduce` to be reported further up.
    pub fn enqueue(child: &mut Node, pkt: Packet, now: Instant, parent: &mut Sch) -> Enqueued {
        let len = pkt.len;
        let r = child.enqueue(pkt, now);
        Self::collect(child, parent);
        match r {
            Enqueued::Success => parent.stats.queued(len),
            r if r.counts_as_drop() => parent.stats.dropped(),
            _ => {}
        }
        r
    }

    /// Dequeue from `child` (`qdisc_dequeue_peeked`); on a packet, the parent's
    /// qlen/backlog fall and its bstats rise.
    pub fn dequeue(child: &mut Node, now: Instant, parent: &mut Sch) -> Dequeued {
        let d = child.dequeue(now);
        Self::collect(child, parent);
        if let Dequeued::Packet(p) = &d {
            parent.stats.unqueued(p.len);
            parent.stats.sent(p);
        }
        d
    }

    /// The child's own peek (`red_peek`, `sfb_peek`); what it reports is collected
    /// into `parent`.
    pub fn peek<'a>(child: &'a mut Node, now: Instant, parent: &mut Sch) -> Option<&'a Packet> {
        let has = child.peek(now).is_some();
        Self::collect(child, parent);
        if !has {
            return None;
        }
        // A second peek returns the same packet (parked or at the head).
        child.peek(now)
    }

    /// A throttled child's wake-up time, while it holds packets: a one-child
    /// qdisc's own.
    pub fn watchdog(child: &Node) -> Option<Instant> {
        child.watchdog().filter(|_| child.stats().qlen > 0)
    }

    /// The packet of the first of `children`, taken in `order`, whose peek has one
    /// (`prio_peek`, `multiq_peek`); what the peeks report is collected into `parent`.
    pub fn peek_first<'a>(
        children: &'a mut [Node],
        order: impl IntoIterator<Item = usize>,
        now: Instant,
        parent: &mut Sch,
    ) -> Option<&'a Packet> {
        let mut found = None;
        for i in order {
            let child = &mut children[i];
            let has = child.peek(now).is_some();
            Self::collect(child, parent);
            if has {
                found = Some(i);
                break;
            }
        }
        // A second peek returns the same packet (parked or at the head).
        children[found?].peek(now)
    }

    /// Apply the child's pending reduction to the parent and pass it on.
    pub fn collect(child: &mut Node, parent: &mut Sch) {
        if !child.sch.reduce.is_zero() {
            parent.child_reduced(child.take_reduce());
        }
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
