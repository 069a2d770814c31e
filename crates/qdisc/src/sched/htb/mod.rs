//! htb — Hierarchical Token Bucket. Mirrors net/sched/sch_htb.c (kernel side) and
//! tc/q_htb.c (iproute2 side); §14 of docs/kernel-notes.md.
//!
//! Theory: a tree of classes, each with two token buckets kept as *time* (ns of
//! transmission credit, see [`crate::rate`]): the rate bucket (`tokens`, at most
//! `buffer`) and the ceil bucket (`ctokens`, at most `cbuffer`). Credit grows with
//! elapsed time; sending `len` bytes costs `l2t(len)`. A class is in one of three
//! modes: CAN_SEND (rate credit ≥ 0), MAY_BORROW (rate exhausted, ceil credit ≥ 0:
//! it may use credit of an ancestor), CANT_SEND (ceil exhausted). Buckets never fall
//! below −`mbuffer` (60 s).
//!
//! Leaves (level 0) hold packets in a child qdisc; inner classes have a level one
//! below their parent (a class without a parent is at level 7). Scheduling state:
//!
//! * per level and priority, a **row**: the CAN_SEND classes of that level that have
//!   active leaves below (or are active leaves) at that priority;
//! * per inner class and priority, a **feed**: its MAY_BORROW children that are
//!   active at that priority — an active leaf that may borrow hangs in its parent's
//!   feed, and so on up to the first ancestor that can send, which sits in a row;
//! * per level, a **wait queue** of the classes that are not CAN_SEND, keyed by the
//!   time their mode will next change (`pq_key`).
//!
//! Dequeue serves the direct queue first, then levels 0..7, and within a level the
//! priorities lowest first; rows and feeds are served round robin in classid order
//! with a per-leaf deficit (`quantum` bytes per turn). The level a packet is found
//! at is the level it borrows from: classes at or above it are charged their rate
//! bucket ("lended" at exactly that level), classes below only their ceil bucket
//! ("borrowed"). When nothing can send, the answer is the nearest wait-queue event
//! (`Throttled { until }`), as the kernel arms its watchdog.
//!
//! Data structures for scale: classes live inline in pages of 64 consecutive minors
//! (a tree built from consecutive classids is consecutive memory); rows and feeds are
//! [`MinorSet`]s (ordered sets of minors as a three-level bitmap: insert, remove and
//! successor in a few word operations, no allocation once warm) with a saved DRR
//! position; wait queues ([`WaitQueue`]) are radix heaps over ~1 µs blocks of the
//! event time with a binary heap for the nearest block, ordered by
//! `(pq_key, insertion)` — the order the kernel's rb-tree gives equal keys — so the
//! long waits of thousands of borrowing leaves are queued and erased in O(1). The
//! kernel's class hash (which fixes the order `tc class show` lists classes in) is
//! simulated bucket by bucket. Nothing on the datapath scans all classes.
//!
//! Files: this one (the classes and the scheduler), `parse.rs` (tc's side),
//! `pages.rs` (class pages, the class hash, [`MinorSet`]), `wait.rs` (the wait
//! queues), `tests.rs`.

use std::collections::VecDeque;

use crate::classify::{Binds, Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::rate::{LinkLayer, PschedRatecfg, RateSpec};
use crate::sched::fifo::pfifo_dflt;
use crate::stats::Stats;
use crate::tc::units::{calc_xmitsize, calc_xmittime, ns2ticks, ticks2ns};
use crate::tc::{matches, units, Args, Errno, Out, TcError};
use crate::time::Instant;

mod pages;
mod parse;
#[cfg(test)]
mod tests;
mod wait;

use crate::class_hash::ClassHash;
use pages::{ClassPage, MinorSet, PAGE};
pub use parse::{parse, parse_class, HtbClassOpt, HtbOpt};
use wait::{WaitEntry, WaitQueue};

/// TC_HTB_MAXDEPTH: levels 0..=7.
pub const TC_HTB_MAXDEPTH: usize = 8;
/// TC_HTB_NUMPRIO: priorities 0..=7.
pub const TC_HTB_NUMPRIO: usize = 8;
/// TC_HTB_PROTOVER: the version tc must send.
pub const TC_HTB_PROTOVER: u32 = 3;
/// HTB_VER (0x30011) as the kernel dumps it: `ver 3.17`.
const HTB_VER: u32 = 0x30011;
/// `cl->mbuffer`: the deepest a bucket may go into debt, ns (60 s).
const MBUFFER_NS: i64 = 60_000_000_000;
const NSEC_PER_SEC: i64 = 1_000_000_000;

// ---------------------------------------------------------------------------------
// Kernel side

/// `enum htb_cmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// HTB_CANT_SEND: neither its own rate nor borrowing (ceil exhausted).
    CantSend,
    /// HTB_MAY_BORROW: own rate exhausted, may borrow from an ancestor.
    MayBorrow,
    /// HTB_CAN_SEND: within its own rate.
    CanSend,
}

/// `struct htb_prio`: a row (per level) or a feed (per inner class) for one
/// priority: the member classes ordered by classid, the DRR position, and the
/// classid to resume from when the position was invalidated.
#[derive(Clone, Debug, Default)]
struct HPrio {
    set: MinorSet,
    ptr: Option<u32>,
    last_ptr_id: Option<u32>,
}

/// `struct htb_level`.
#[derive(Clone, Debug, Default)]
struct Level {
    /// The wait queue: (pq_key, insertion number, minor), smallest first. Equal keys
    /// keep insertion order, as the kernel's rb-tree insert sends equal keys right.
    wait_pq: WaitQueue,
    hprio: [HPrio; TC_HTB_NUMPRIO],
}

/// `struct htb_class`. Laid out in order (`repr(C)`) in 64-byte groups so that a
/// packet touches as few lines of a cold class as possible: the first is all that
/// classification and enqueue read (the leaf qdisc, level, activity); the next three
/// are what dequeue and `htb_charge_class` read and write (buckets, deficits, rates,
/// bstats); configuration and counters read only by dumps follow. (With 10,000
/// leaves every packet meets a class that is not in cache.)
#[repr(C)]
struct Class {
    // group 0
    /// Level 0: the leaf qdisc.
    leaf: Option<Node>,
    level: usize,
    /// The parent's minor (None = a root class).
    parent: Option<u32>,
    /// Bit per priority at which this class is active.
    prio_activity: u32,
    cmode: Mode,
    /// Queued in the wait queue of this level (`pq_node` linked); the entry's place
    /// is `Htb::pq_pos[minor]`.
    pq: Option<u8>,
    /// Leaf: the priority it is served at (0..=7), read when it becomes active.
    prio: u8,
    // group 1
    t_c: i64,
    tokens: i64,
    ctokens: i64,
    /// Level 0: the per-level deficits.
    deficit: [i32; TC_HTB_MAXDEPTH],
    quantum: i32,
    lends: u32,
    // group 2
    buffer: i64,
    cbuffer: i64,
    rate: PschedRatecfg,
    borrows: u32,
    overlimits: u32,
    // group 3
    ceil: PschedRatecfg,
    /// bstats (bytes/packets only).
    bstats: Stats,
    // cold
    classid: u32,
    children: u32,
    giants: u32,
    drops: u32,
    /// Filters bound to this class (`filter_cnt`, `qdisc_class_in_use`).
    filter_cnt: u32,
    /// Level > 0: the feeds, one per priority.
    inner: Option<Box<[HPrio; TC_HTB_NUMPRIO]>>,
    /// `cl->block`: the class's own filters (`tcf_block_get` at creation), consulted
    /// when a filter (or `skb->priority`) selects this class while it is inner.
    block: Block,
}

impl Class {
    /// An empty slot of a [`ClassPage`] (and the defaults a new class starts from).
    fn vacant() -> Class {
        Class {
            leaf: None,
            level: 0,
            parent: None,
            prio_activity: 0,
            cmode: Mode::CanSend,
            pq: None,
            t_c: 0,
            tokens: 0,
            ctokens: 0,
            deficit: [0; TC_HTB_MAXDEPTH],
            quantum: 0,
            lends: 0,
            buffer: 0,
            cbuffer: 0,
            rate: PschedRatecfg::default(),
            borrows: 0,
            overlimits: 0,
            ceil: PschedRatecfg::default(),
            bstats: Stats::default(),
            prio: 0,
            classid: 0,
            children: 0,
            giants: 0,
            drops: 0,
            filter_cnt: 0,
            inner: None,
            block: Block::new(0),
        }
    }
}

/// Where a packet goes (`htb_classify`'s answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// HTB_DIRECT: the unshaped direct queue.
    Direct,
    /// A leaf class, by minor.
    Class(u32),
    /// Classification gave up: the filters chain inner classes in a cycle, where the
    /// kernel's `htb_classify` would loop forever (see [`Htb::classify`]), or a filter
    /// action answered TC_ACT_SHOT. Dropped and counted as a qdisc drop
    /// (`__NET_XMIT_BYPASS`).
    Drop,
    /// A filter action took the packet (STOLEN/QUEUED/TRAP): gone, not a drop.
    Stolen,
}

/// Which row or feed a DRR walk is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PRef {
    Row(usize),
    Feed(u32),
}

/// One htb qdisc: `struct htb_sched` plus the qdisc's own counters.
pub struct Htb {
    handle: u32,
    /// `q->block`: the qdisc's own filters.
    block: Block,
    defcls: u32,
    rate2quantum: u32,
    direct_qlen: u32,
    direct: VecDeque<Packet>,
    direct_pkts: u32,
    /// Classes by minor, in pages of [`PAGE`] consecutive minors ([`ClassPage`]).
    classes: Vec<Option<Box<ClassPage>>>,
    /// Wait-queue heap slot of each queued class, by minor (see [`WaitQueue`]).
    pq_pos: Vec<u32>,
    hash: ClassHash,
    levels: [Level; TC_HTB_MAXDEPTH],
    near_ev_cache: [i64; TC_HTB_MAXDEPTH],
    row_mask: [u32; TC_HTB_MAXDEPTH],
    /// `q->now`: the time of the current (or last) dequeue.
    now: i64,
    pq_seq: u64,
    /// The device as last seen (for default leaf qdiscs created by a delete).
    dev: DevInfo,
    watchdog: Option<Instant>,
    /// Earliest wake-up of a throttled leaf seen during the current dequeue.
    child_wake: Option<Instant>,
}

/// q_htb.c always sends TCA_OPTIONS; `htb_init` wants them (EINVAL without).
pub static OPS: Ops = Ops {
    id: "htb",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Htb::new(c.required()?, c.dev, c.handle, c.parent, c.now)?)),
    parse_class: Some(|a| Ok(Opts::new(parse_class(a)?))),
    flags: Flags::NONE,
    since: None,
};

impl Htb {
    /// Mirrors `htb_init`. Offload needs hardware (`ndo_setup_tc`), which no device
    /// here has, so it is refused as the kernel refuses it on such a device.
    pub fn new(o: &HtbOpt, dev: &DevInfo, handle: u32, parent: u32, now: Instant) -> Result<Htb, TcError> {
        if o.version != TC_HTB_PROTOVER {
            return Err(TcError::invalid());
        }
        if o.offload {
            if parent != TC_H_ROOT {
                return Err(TcError::with_errno("HTB must be the root qdisc to use offload", Errno::EOPNOTSUPP));
            }
            return Err(TcError::with_errno("hw-tc-offload ethtool feature flag must be on", Errno::EOPNOTSUPP));
        }
        // `rate2quantum` is an int in the kernel: anything below 1 (including values
        // that wrap negative) becomes 1.
        let r2q = if (o.rate2quantum as i32) < 1 { 1 } else { o.rate2quantum };
        Ok(Htb {
            handle,
            block: Block::new(handle),
            defcls: o.defcls,
            rate2quantum: r2q,
            direct_qlen: o.direct_qlen.unwrap_or(dev.tx_queue_len),
            direct: VecDeque::new(),
            direct_pkts: 0,
            classes: Vec::new(),
            pq_pos: Vec::new(),
            hash: ClassHash::new(),
            levels: Default::default(),
            near_ev_cache: [0; TC_HTB_MAXDEPTH],
            row_mask: [0; TC_HTB_MAXDEPTH],
            now: now.as_nanos() as i64,
            pq_seq: 0,
            dev: dev.clone(),
            watchdog: None,
            child_wake: None,
        })
    }

    // ---- lookups -------------------------------------------------------------------

    fn get(&self, minor: u32) -> Option<&Class> {
        self.classes.get(minor as usize / PAGE)?.as_ref()?.get(minor as usize % PAGE)
    }
    fn get_mut(&mut self, minor: u32) -> Option<&mut Class> {
        find_mut(&mut self.classes, minor)
    }
    fn has(&self, minor: u32) -> bool {
        self.get(minor).is_some()
    }
    fn cl(&self, minor: u32) -> &Class {
        self.get(minor).expect("class exists")
    }
    fn cl_mut(&mut self, minor: u32) -> &mut Class {
        class_mut(&mut self.classes, minor)
    }
    /// `htb_find`: the class with this full classid, by minor.
    fn find_classid(&self, classid: u32) -> Option<u32> {
        (classid != 0 && tc_h_maj(classid) == self.handle && self.has(tc_h_min(classid))).then(|| tc_h_min(classid))
    }
    fn hp(&mut self, r: PRef, prio: usize) -> &mut HPrio {
        match r {
            PRef::Row(l) => &mut self.levels[l].hprio[prio],
            PRef::Feed(m) => &mut self.cl_mut(m).inner.as_mut().expect("inner class")[prio],
        }
    }

    /// The qdisc's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// Number of classes.
    pub fn class_count(&self) -> usize {
        self.hash.elems
    }
    /// (tokens, ctokens) of class `minor` in ns, for tests and tracing.
    pub fn tokens(&self, minor: u32) -> Option<(i64, i64)> {
        self.has(minor).then(|| (self.cl(minor).tokens, self.cl(minor).ctokens))
    }
    /// The mode of class `minor`.
    pub fn mode(&self, minor: u32) -> Option<Mode> {
        self.has(minor).then(|| self.cl(minor).cmode)
    }
    /// The level of class `minor`.
    pub fn level(&self, minor: u32) -> Option<usize> {
        self.has(minor).then(|| self.cl(minor).level)
    }
    /// (lends, borrows) of class `minor`.
    pub fn lends_borrows(&self, minor: u32) -> Option<(u32, u32)> {
        self.has(minor).then(|| (self.cl(minor).lends, self.cl(minor).borrows))
    }
    /// The quantum of class `minor`.
    pub fn quantum(&self, minor: u32) -> Option<i32> {
        self.has(minor).then(|| self.cl(minor).quantum)
    }
    /// `direct_packets_stat`.
    pub fn direct_packets(&self) -> u32 {
        self.direct_pkts
    }

    /// The filter hook's half of `bind_tcf`: a filter whose result is class
    /// `classid` holds it (`qdisc_class_get`), so the class cannot be deleted
    /// ("HTB class in use"). Returns false when no such class exists (the kernel's
    /// bind then yields no class).
    pub fn bind_filter(&mut self, classid: u32) -> bool {
        match self.find_classid(classid) {
            Some(m) => {
                self.cl_mut(m).filter_cnt += 1;
                true
            }
            None => false,
        }
    }
    /// `unbind_tcf`: the filter no longer points at class `classid`.
    pub fn unbind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find_classid(classid) {
            let c = self.cl_mut(m);
            c.filter_cnt = c.filter_cnt.saturating_sub(1);
        }
    }

    /// Mirrors `htb_classify`:
    /// 1. `skb->priority` equal to the qdisc handle (`X:0`) → the direct queue;
    /// 2. `skb->priority` naming a leaf → that leaf; naming an inner class → start
    ///    with that class's filters, otherwise with the qdisc's own;
    /// 3. run the block (`tcf_classify`); its classid `X:0` → the direct queue; a
    ///    class of this qdisc that is a leaf → done; an inner class → continue with
    ///    that class's block; no match, an empty block or a classid that names no
    ///    class of this qdisc → step 4;
    /// 4. the class `X:default` if it exists and is a leaf, else the direct queue.
    ///
    /// A filter verdict of SHOT answers [`Target::Drop`], STOLEN/QUEUED/TRAP
    /// [`Target::Stolen`] (`htb_classify`'s CONFIG_NET_CLS_ACT switch).
    /// The kernel's loop has no bound: filters that lead from inner class to inner
    /// class in a cycle make it spin forever in softirq. Here a walk longer than the
    /// number of classes (which only a cycle can produce) answers [`Target::Drop`].
    pub fn classify(&self, pkt: &mut Packet, now: Instant) -> Target {
        if pkt.priority == self.handle {
            return Target::Direct;
        }
        let mut block = &self.block;
        if let Some(m) = self.find_classid(pkt.priority) {
            let c = self.cl(m);
            if c.level == 0 {
                return Target::Class(m);
            }
            block = &c.block;
        }
        let mut hops = 0usize;
        while let Some(v) = block.classify(pkt, now) {
            let res = match v {
                Verdict::Class(r) => r,
                Verdict::Shot => return Target::Drop,
                Verdict::Stolen => return Target::Stolen,
            };
            // A bound result's class, else the lookup (X:0: the direct queue).
            let m = match res.class {
                Some(m) => m,
                None if res.classid == self.handle => return Target::Direct,
                None => {
                    let Some(m) = self.find_classid(res.classid) else { break };
                    m
                }
            };
            let c = self.cl(m);
            if c.level == 0 {
                return Target::Class(m);
            }
            hops += 1;
            if hops > self.hash.elems {
                return Target::Drop;
            }
            block = &c.block;
        }
        match self.find_classid(self.handle | tc_h_min(self.defcls)) {
            Some(m) if self.cl(m).level == 0 => Target::Class(m),
            _ => Target::Direct,
        }
    }

    /// `tcf_block_put(cl->block)` of a deleted class: its protos are destroyed, and
    /// every filter result they held is unbound (`tcf_unbind_filter`). A u32 proto
    /// takes its root table's key nodes with it (all tables of the qdisc's u32 state
    /// when it was the last u32 proto).
    fn put_block(&mut self, block: Block) {
        let mut binds = Binds::default();
        block.put(&mut self.block, &mut binds);
        for c in binds.split().0 {
            self.unbind_filter(c);
        }
    }

    // ---- rows, feeds and the wait queue ------------------------------------------------

    /// `htb_add_class_to_row`: class `m` of `level`.
    fn add_class_to_row(&mut self, m: u32, level: usize, mask: u32) {
        self.row_mask[level] |= mask;
        for prio in bits(mask) {
            self.levels[level].hprio[prio].set.insert(m);
        }
    }

    /// `htb_remove_class_from_row`: a DRR position on the class moves to the next one.
    fn remove_class_from_row(&mut self, m: u32, level: usize, mask: u32) {
        let mut emptied = 0;
        for prio in bits(mask) {
            let hp = &mut self.levels[level].hprio[prio];
            if hp.ptr == Some(m) {
                hp.ptr = hp.set.next_after(m);
            }
            hp.set.remove(m);
            if hp.set.is_empty() {
                emptied |= 1 << prio;
            }
        }
        self.row_mask[level] &= !emptied;
    }

    /// `htb_activate_prios`: link the class into its parent's feeds while it may
    /// borrow, walking up; the first ancestor that can send goes into its row.
    fn activate_prios(&mut self, m: u32) {
        let c = self.cl(m);
        let (mut cl, mut mask, mut mode, mut level, mut parent) = (m, c.prio_activity, c.cmode, c.level, c.parent);
        while mode == Mode::MayBorrow && mask != 0 {
            let Some(p) = parent else { break };
            let pc = class_mut(&mut self.classes, p);
            let feeds = pc.inner.as_mut().expect("inner class");
            for prio in bits(mask) {
                let feed = &mut feeds[prio];
                if !feed.set.is_empty() {
                    // The parent is already active at this priority.
                    mask &= !(1 << prio);
                }
                feed.set.insert(cl);
            }
            pc.prio_activity |= mask;
            (cl, mode, level, parent) = (p, pc.cmode, pc.level, pc.parent);
        }
        if mode == Mode::CanSend && mask != 0 {
            self.add_class_to_row(cl, level, mask);
        }
    }

    /// `htb_deactivate_prios`: the reverse walk; a feed position on the class is
    /// forgotten (its classid kept to resume from).
    fn deactivate_prios(&mut self, m: u32) {
        let c = self.cl(m);
        let (mut cl, mut mask, mut mode, mut level, mut parent) = (m, c.prio_activity, c.cmode, c.level, c.parent);
        while mode == Mode::MayBorrow && mask != 0 {
            let Some(p) = parent else { break };
            let pc = class_mut(&mut self.classes, p);
            let feeds = pc.inner.as_mut().expect("inner class");
            let mm = mask;
            mask = 0;
            for prio in bits(mm) {
                let feed = &mut feeds[prio];
                if feed.ptr == Some(cl) {
                    feed.last_ptr_id = Some(cl);
                    feed.ptr = None;
                }
                feed.set.remove(cl);
                if feed.set.is_empty() {
                    mask |= 1 << prio;
                }
            }
            pc.prio_activity &= !mask;
            (cl, mode, level, parent) = (p, pc.cmode, pc.level, pc.parent);
        }
        if mode == Mode::CanSend && mask != 0 {
            self.remove_class_from_row(cl, level, mask);
        }
    }

    /// `htb_class_mode` (no hysteresis): the mode `diff` ns after the checkpoint, and
    /// for a mode other than CAN_SEND the time until it changes.
    fn class_mode(c: &Class, diff: i64) -> (Mode, i64) {
        let toks = c.ctokens + diff;
        if toks < 0 {
            return (Mode::CantSend, -toks);
        }
        let toks = c.tokens + diff;
        if toks >= 0 {
            return (Mode::CanSend, diff);
        }
        (Mode::MayBorrow, -toks)
    }

    /// The second half of `htb_change_class_mode` (the first is [`Htb::class_mode`]):
    /// class `m` goes from mode `old` to `new`, moving between feeds and rows if it
    /// is active.
    fn set_mode(&mut self, sch: &mut Sch, m: u32, old: Mode, new: Mode) {
        let c = class_mut(&mut self.classes, m);
        if new == Mode::CantSend {
            c.overlimits = c.overlimits.wrapping_add(1);
            sch.stats.overlimit();
        }
        if c.prio_activity == 0 {
            c.cmode = new;
            return;
        }
        if old != Mode::CantSend {
            self.deactivate_prios(m);
        }
        self.cl_mut(m).cmode = new;
        if new != Mode::CantSend {
            self.activate_prios(m);
        }
    }

    /// `htb_add_to_wait_tree`.
    fn add_to_wait_tree(&mut self, m: u32, delay: i64) {
        let now = self.now;
        let c = class_mut(&mut self.classes, m);
        let level = c.level;
        c.pq = Some(level as u8);
        let mut key = now + delay;
        if key == now {
            key += 1;
        }
        if self.near_ev_cache[level] > key {
            self.near_ev_cache[level] = key;
        }
        self.pq_seq += 1;
        self.levels[level].wait_pq.push(WaitEntry::new(key, self.pq_seq, m), &mut self.pq_pos);
    }

    fn erase_from_wait_tree(&mut self, m: u32) {
        if let Some(level) = self.cl_mut(m).pq.take() {
            let level = level as usize;
            let Htb { levels, pq_pos, .. } = self;
            levels[level].wait_pq.remove(m, pq_pos);
        }
    }

    /// `htb_activate`: a leaf with packets joins the schedule at its priority.
    fn activate(&mut self, m: u32) {
        let c = self.cl_mut(m);
        if c.prio_activity == 0 {
            c.prio_activity = 1 << c.prio;
            self.activate_prios(m);
        }
    }

    /// `htb_deactivate`.
    fn deactivate(&mut self, m: u32) {
        if self.cl(m).prio_activity == 0 {
            return;
        }
        self.deactivate_prios(m);
        self.cl_mut(m).prio_activity = 0;
    }

    // ---- accounting ---------------------------------------------------------------------

    /// `htb_charge_class`: charge `len` bytes found at `level` to leaf `m` and its
    /// ancestors.
    fn charge_class(&mut self, sch: &mut Sch, m: u32, level: usize, pkt: &Packet) {
        let now = self.now;
        let len = pkt.len;
        let mut x = m;
        loop {
            let c = class_mut(&mut self.classes, x);
            let diff = (now - c.t_c).min(MBUFFER_NS);
            if c.level >= level {
                if c.level == level {
                    c.lends = c.lends.wrapping_add(1);
                }
                // htb_accnt_tokens
                let mut toks = (diff + c.tokens).min(c.buffer);
                toks -= c.rate.l2t_ns(len) as i64;
                if toks <= -MBUFFER_NS {
                    toks = 1 - MBUFFER_NS;
                }
                c.tokens = toks;
            } else {
                c.borrows = c.borrows.wrapping_add(1);
                c.tokens += diff;
            }
            // htb_accnt_ctokens
            let mut toks = (diff + c.ctokens).min(c.cbuffer);
            toks -= c.ceil.l2t_ns(len) as i64;
            if toks <= -MBUFFER_NS {
                toks = 1 - MBUFFER_NS;
            }
            c.ctokens = toks;
            c.t_c = now;
            if c.level != 0 {
                c.bstats.sent(pkt);
            }
            let (old, parent) = (c.cmode, c.parent);
            let (new, delay) = Self::class_mode(c, 0);
            if old != new {
                self.set_mode(sch, x, old, new);
                if old != Mode::CanSend {
                    self.erase_from_wait_tree(x);
                }
                if new != Mode::CanSend {
                    self.add_to_wait_tree(x, delay);
                }
            }
            match parent {
                Some(p) => x = p,
                None => return,
            }
        }
    }

    /// `htb_do_events`: apply the mode changes due at this level; the next pending
    /// event time, or 0 when the queue is empty. (The kernel also stops after two
    /// jiffies of work; virtual time never runs out.)
    fn do_events(&mut self, sch: &mut Sch, level: usize) -> i64 {
        loop {
            let Htb { levels, pq_pos, now, classes, .. } = self;
            let Some(e) = levels[level].wait_pq.first(pq_pos) else { return 0 };
            if e.key > *now {
                return e.key;
            }
            let m = e.minor() as u32;
            levels[level].wait_pq.remove(m, pq_pos);
            let c = class_mut(classes, m);
            c.pq = None;
            let diff = (*now - c.t_c).min(MBUFFER_NS);
            let (old, (new, delay)) = (c.cmode, Self::class_mode(c, diff));
            if new != old {
                self.set_mode(sch, m, old, new);
            }
            if new != Mode::CanSend {
                self.add_to_wait_tree(m, delay);
            }
        }
    }

    // ---- dequeue ----------------------------------------------------------------------

    /// `htb_lookup_leaf`: follow the saved DRR positions from the row down through
    /// the feeds to a leaf.
    fn lookup_leaf(&mut self, level: usize, prio: usize) -> Option<u32> {
        if self.levels[level].hprio[prio].set.is_empty() {
            return None;
        }
        // The usual case first: every position on the way down is valid (none was
        // invalidated, none is past the end), so the walk only reads.
        let mut hp = &self.levels[level].hprio[prio];
        for _ in 0..TC_HTB_MAXDEPTH {
            let (Some(c), None) = (hp.ptr, hp.last_ptr_id) else { break };
            let cls = self.cl(c);
            match (cls.level, &cls.inner) {
                (0, _) => return Some(c),
                (_, Some(feeds)) => hp = &feeds[prio],
                _ => break,
            }
        }
        let mut stk = [PRef::Row(level); TC_HTB_MAXDEPTH + 1];
        let mut sp = 0usize;
        for _ in 0..65535 {
            let hp = self.hp(stk[sp], prio);
            if hp.ptr.is_none() {
                if let Some(id) = hp.last_ptr_id {
                    // Resume at the remembered class or the next one after it.
                    hp.ptr = hp.set.ceil(id);
                }
            }
            hp.last_ptr_id = None;
            match hp.ptr {
                None => {
                    // Past the end: rewind, and move the level above one step on.
                    hp.ptr = hp.set.first();
                    if sp > 0 {
                        sp -= 1;
                        let up = self.hp(stk[sp], prio);
                        let p = up.ptr?;
                        up.ptr = up.set.next_after(p);
                    }
                }
                Some(c) => {
                    if self.cl(c).level == 0 {
                        return Some(c);
                    }
                    sp += 1;
                    if sp >= stk.len() {
                        return None;
                    }
                    stk[sp] = PRef::Feed(c);
                }
            }
        }
        None
    }

    /// `htb_next_rb_node` on the DRR position that led to leaf `c` at `level`.
    fn advance(&mut self, level: usize, prio: usize, c: u32) {
        let hp = if level > 0 {
            let Some(p) = self.cl(c).parent else { return };
            self.hp(PRef::Feed(p), prio)
        } else {
            &mut self.levels[0].hprio[prio]
        };
        if let Some(x) = hp.ptr {
            hp.ptr = hp.set.next_after(x);
        }
    }

    /// Leaf `m`'s qdisc.
    fn leaf_q(&mut self, m: u32) -> &mut Node {
        class_mut(&mut self.classes, m).leaf.as_mut().expect("leaf")
    }

    /// After an operation on leaf `m`'s qdisc, take its pending backlog reduction
    /// (`qdisc_tree_reduce_backlog` from the leaf): our qlen/backlog/drops, the report
    /// upwards, and `htb_qlen_notify` (deactivate) when the leaf became empty.
    /// Returns the leaf's qlen.
    fn leaf_reduced(&mut self, sch: &mut Sch, m: u32) -> u32 {
        let leaf = self.leaf_q(m);
        let r = leaf.take_reduce();
        let qlen = leaf.stats().qlen;
        if !r.is_zero() {
            sch.child_reduced(r);
            if qlen == 0 {
                self.deactivate(m);
            }
        }
        qlen
    }

    fn leaf_qlen(&self, m: u32) -> u32 {
        self.cl(m).leaf.as_ref().map_or(0, |n| n.stats().qlen)
    }

    /// `htb_dequeue_tree`: one packet at (prio, level), round robin over the leaves;
    /// `Empty` when none can send. (The leaf's answer is passed on as it came, never
    /// unpacked and rebuilt: each copy of a packet just written is a store-forwarding
    /// stall.)
    fn dequeue_tree(&mut self, sch: &mut Sch, prio: usize, level: usize, now: Instant) -> Dequeued {
        let mut cl = self.lookup_leaf(level, prio);
        let mut start = cl;
        loop {
            let Some(c) = cl else { return Dequeued::Empty };
            if self.leaf_qlen(c) == 0 {
                // An empty active leaf (its qdisc dropped, or was replaced): skip it.
                self.deactivate(c);
                if self.row_mask[level] & (1 << prio) == 0 {
                    return Dequeued::Empty;
                }
                let next = self.lookup_leaf(level, prio);
                if cl == start {
                    start = next;
                }
                cl = next;
                continue;
            }
            let d = self.leaf_q(c).dequeue(now);
            let qlen = self.leaf_reduced(sch, c);
            match &d {
                Dequeued::Packet(pkt) => {
                    let cls = self.cl_mut(c);
                    cls.bstats.sent(pkt);
                    cls.deficit[level] = cls.deficit[level].wrapping_sub(pkt.len as i32);
                    if cls.deficit[level] < 0 {
                        cls.deficit[level] = cls.deficit[level].wrapping_add(cls.quantum);
                        self.advance(level, prio, c);
                    }
                    if qlen == 0 {
                        self.deactivate(c);
                    }
                    self.charge_class(sch, c, level, pkt);
                    return d;
                }
                Dequeued::Throttled { until } => {
                    // A non-work-conserving leaf: its own watchdog wakes the device.
                    let until = *until;
                    self.child_wake = Some(self.child_wake.map_or(until, |w| w.min(until)));
                }
                Dequeued::Empty => {}
            }
            self.advance(level, prio, c);
            cl = self.lookup_leaf(level, prio);
            if cl == start {
                return Dequeued::Empty;
            }
        }
    }

    /// `htb_dequeue`.
    fn dequeue_htb(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        if let Some(p) = self.direct.pop_front() {
            sch.stats.sent(&p);
            sch.stats.unqueued(p.len);
            self.watchdog = None;
            return Dequeued::Packet(p);
        }
        if sch.stats.qlen == 0 {
            self.watchdog = None;
            return Dequeued::Empty;
        }
        self.now = now.as_nanos() as i64;
        self.child_wake = None;
        let mut next_event = self.now + 5 * NSEC_PER_SEC;
        for level in 0..TC_HTB_MAXDEPTH {
            let mut event = self.near_ev_cache[level];
            if self.now >= event {
                event = self.do_events(sch, level);
                if event == 0 {
                    event = self.now + NSEC_PER_SEC;
                }
                self.near_ev_cache[level] = event;
            }
            next_event = next_event.min(event);
            let mask = self.row_mask[level];
            for prio in bits(mask) {
                let d = self.dequeue_tree(sch, prio, level, now);
                if let Dequeued::Packet(p) = &d {
                    sch.stats.sent(p);
                    sch.stats.unqueued(p.len);
                    self.watchdog = None;
                    return d;
                }
            }
        }
        let mut until = Instant::from_nanos(next_event.max(0) as u64);
        if let Some(w) = self.child_wake {
            until = until.min(w);
        }
        self.watchdog = Some(until);
        Dequeued::Throttled { until }
    }

    // ---- class management ---------------------------------------------------------------

    /// A fresh default leaf qdisc for class `classid`: `qdisc_create_dflt(pfifo)`,
    /// handle 0, hashed invisible.

    /// `qdisc_purge_queue` of leaf `m`'s qdisc: reset it and report what it held
    /// (`qdisc_tree_reduce_backlog`: our qlen/backlog fall, drops rise).
    fn purge_leaf(&mut self, sch: &mut Sch, m: u32, now: Instant) {
        let Some(leaf) = self.cl_mut(m).leaf.as_mut() else { return };
        sch.child_purged(leaf.stats());
        leaf.reset(now);
        let _ = leaf.take_reduce();
    }

    /// Mirrors `htb_change_class`.
    #[allow(clippy::too_many_arguments)]
    fn change_class_impl(
        &mut self,
        sch: &mut Sch,
        classid: u32,
        parentid: u32,
        exists: bool,
        o: &HtbClassOpt,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        self.dev = dev.clone();
        let parent = if parentid == TC_H_ROOT { None } else { self.find_classid(parentid) };
        if o.rate.rate == 0 || o.ceil.rate == 0 {
            return Err(TcError::invalid());
        }
        let m = tc_h_min(classid);
        if !exists {
            if classid == 0 || tc_h_maj(classid ^ self.handle) != 0 || self.has(m) {
                return Err(TcError::invalid());
            }
            if let Some(p) = parent {
                if let Some(gp) = self.cl(p).parent {
                    if self.cl(gp).level < 2 {
                        return Err(TcError::kernel("sch_htb: tree is too deep"));
                    }
                }
            }
            let leaf = pfifo_dflt(classid, dev).invisible();
            if let Some(p) = parent.filter(|&p| self.cl(p).level == 0) {
                // The parent stops being a leaf: its queue is purged and its qdisc goes.
                self.purge_leaf(sch, p, now);
                self.deactivate(p);
                if self.cl(p).cmode != Mode::CanSend {
                    self.erase_from_wait_tree(p);
                    self.cl_mut(p).cmode = Mode::CanSend;
                }
                let plevel = self.cl(p).parent.map_or(TC_HTB_MAXDEPTH, |gp| self.cl(gp).level) - 1;
                let pc = self.cl_mut(p);
                pc.level = plevel;
                pc.leaf = None;
                pc.deficit = [0; TC_HTB_MAXDEPTH];
                pc.inner = Some(Box::default());
            }
            let c = Class {
                classid,
                parent,
                tokens: ticks2ns(o.buffer),
                ctokens: ticks2ns(o.cbuffer),
                t_c: now.as_nanos() as i64,
                leaf: Some(leaf),
                block: Block::new(self.handle),
                ..Class::vacant()
            };
            if self.pq_pos.len() <= m as usize {
                self.classes.resize_with(m as usize / PAGE + 1, || None);
                self.pq_pos.resize(m as usize + 1, 0);
            }
            let page = self.classes[m as usize / PAGE].get_or_insert_with(ClassPage::new);
            page.slots[m as usize % PAGE] = c;
            page.present |= 1 << (m as usize % PAGE);
            self.hash.insert(classid);
            if let Some(p) = parent {
                self.cl_mut(p).children += 1;
            }
        }
        let r2q = self.rate2quantum as u64;
        let c = self.cl_mut(m);
        c.rate = PschedRatecfg::from_spec(&o.rate, o.rate64.unwrap_or(0));
        c.ceil = PschedRatecfg::from_spec(&o.ceil, o.ceil64.unwrap_or(0));
        let mut warn = 0;
        if c.level == 0 {
            c.quantum = (c.rate.rate_bytes_ps / r2q).min(i32::MAX as u64) as i32;
            if o.quantum == 0 && c.quantum < 1000 {
                warn = -1;
                c.quantum = 1000;
            }
            if o.quantum == 0 && c.quantum > 200_000 {
                warn = 1;
                c.quantum = 200_000;
            }
            if o.quantum != 0 {
                c.quantum = o.quantum as i32;
            }
            c.prio = o.prio.min(TC_HTB_NUMPRIO as u32 - 1) as u8;
        }
        c.buffer = ticks2ns(o.buffer);
        c.cbuffer = ticks2ns(o.cbuffer);
        self.hash.grow();
        Ok((warn != 0).then(|| {
            format!(
                "sch_htb: quantum of class {:X} is {}. Consider r2q change.",
                classid,
                if warn == -1 { "small" } else { "big" }
            )
        }))
    }

    /// Mirrors `htb_delete`.
    fn delete_impl(&mut self, sch: &mut Sch, m: u32, now: Instant) -> Result<(), TcError> {
        if !self.has(m) {
            return Err(TcError::errno(Errno::ENOENT));
        }
        let (children, filters, level, parent) = {
            let c = self.cl(m);
            (c.children, c.filter_cnt, c.level, c.parent)
        };
        if children > 0 || filters > 0 {
            return Err(TcError::with_errno("HTB class in use", Errno::EBUSY));
        }
        let last_child = level == 0 && parent.is_some_and(|p| self.cl(p).children <= 1);
        let new_q = last_child.then(|| {
            let p = parent.expect("last child has a parent");
            // htb_parent_to_leaf's qdisc is never qdisc_hash_add()ed: dumps skip it.
            pfifo_dflt(self.cl(p).classid, &self.dev).invisible().unhashed()
        });
        if level == 0 {
            self.purge_leaf(sch, m, now);
        }
        let classid = self.cl(m).classid;
        self.hash.remove(classid);
        if let Some(p) = parent {
            self.cl_mut(p).children -= 1;
        }
        self.deactivate(m);
        if self.cl(m).cmode != Mode::CanSend {
            self.erase_from_wait_tree(m);
        }
        if let (Some(p), Some(q)) = (parent, new_q) {
            // htb_parent_to_leaf: back to a leaf with full buckets.
            if self.cl(p).cmode != Mode::CanSend {
                self.erase_from_wait_tree(p);
            }
            let pc = self.cl_mut(p);
            pc.level = 0;
            pc.inner = None;
            pc.deficit = [0; TC_HTB_MAXDEPTH];
            pc.leaf = Some(q);
            pc.tokens = pc.buffer;
            pc.ctokens = pc.cbuffer;
            pc.t_c = now.as_nanos() as i64;
            pc.cmode = Mode::CanSend;
        }
        // htb_destroy_class: the class's filters go with it.
        let page = self.classes[m as usize / PAGE].as_mut().expect("class exists");
        page.present &= !(1 << (m as usize % PAGE));
        let gone = std::mem::replace(&mut page.slots[m as usize % PAGE], Class::vacant());
        self.put_block(gone.block);
        Ok(())
    }
}

/// Class `m` by minor, if it exists, borrowing only the class table (so the caller
/// may touch the qdisc's other fields meanwhile).
fn find_mut(classes: &mut [Option<Box<ClassPage>>], m: u32) -> Option<&mut Class> {
    classes.get_mut(m as usize / PAGE)?.as_mut()?.get_mut(m as usize % PAGE)
}

/// Class `m`, which exists (see [`find_mut`]).
fn class_mut(classes: &mut [Option<Box<ClassPage>>], m: u32) -> &mut Class {
    find_mut(classes, m).expect("class exists")
}

/// The set bits of a priority mask, lowest first (`ffz(~mask)` loops).
fn bits(mask: u32) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        (m != 0).then(|| {
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            b
        })
    })
}

impl Qdisc for Htb {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `htb_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let len = pkt.len;
        match self.classify(&mut pkt, now) {
            Target::Direct => {
                if (self.direct.len() as u64) < self.direct_qlen as u64 {
                    self.direct.push_back(pkt);
                    self.direct_pkts = self.direct_pkts.wrapping_add(1);
                } else {
                    sch.stats.dropped();
                    return Enqueued::Dropped;
                }
            }
            Target::Drop => {
                sch.stats.dropped();
                return Enqueued::Dropped;
            }
            Target::Stolen => return Enqueued::Stolen,
            Target::Class(m) => {
                let r = self.leaf_q(m).enqueue(pkt, now);
                self.leaf_reduced(sch, m);
                if r != Enqueued::Success {
                    if r.counts_as_drop() {
                        sch.stats.dropped();
                        let c = self.cl_mut(m);
                        c.drops = c.drops.wrapping_add(1);
                    }
                    return r;
                }
                self.activate(m);
            }
        }
        sch.stats.queued(len);
        Enqueued::Success
    }

    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.dequeue_htb(sch, now)
    }

    // peek: `qdisc_peek_dequeued` (the default).

    /// Mirrors `htb_reset`: leaves reset, every class CAN_SEND and inactive, rows,
    /// feeds and wait queues emptied; buckets and the event cache are kept.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for c in self.classes.iter_mut().flatten().flat_map(|p| p.iter_mut()) {
            if c.level > 0 {
                c.inner = Some(Box::default());
            } else if let Some(l) = c.leaf.as_mut() {
                l.reset(now);
                let _ = l.take_reduce();
            }
            c.prio_activity = 0;
            c.cmode = Mode::CanSend;
            c.pq = None;
        }
        self.direct.clear();
        self.levels = Default::default();
        self.row_mask = [0; TC_HTB_MAXDEPTH];
        self.watchdog = None;
    }

    /// What `htb_dump` sends, printed by q_htb.c `htb_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.int("r2q", format_args!("r2q {}", self.rate2quantum as i32), self.rate2quantum as i32 as i64);
        let def = if self.defcls == 0 { "0".to_string() } else { format!("{:#x}", self.defcls) };
        out.string("default", format_args!(" default {def}"), &def);
        out.uint(
            "direct_packets_stat",
            format_args!(" direct_packets_stat {}", self.direct_pkts),
            self.direct_pkts as u64,
        );
        if out.details() {
            let v = format!("{}.{}", HTB_VER >> 16, HTB_VER & 0xffff);
            out.string("ver", format_args!(" ver {v}"), &v);
        }
        out.uint("direct_qlen", format_args!(" direct_qlen {}", self.direct_qlen), self.direct_qlen as u64);
    }

    crate::classful!();

    /// When the kernel's watchdog would fire after the last dequeue that found
    /// nothing sendable (None once a packet was sent, or when empty).
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

impl Classful for Htb {
    /// `htb_change_class` takes TCA_RATE.
    fn class_takes_estimator(&self) -> bool {
        true
    }
    /// `htb_walk`: the class hash, bucket by bucket.
    fn class_minors(&self) -> Vec<u32> {
        self.hash.walk().map(tc_h_min).collect()
    }
    fn find(&self, minor: u32) -> bool {
        self.has(minor)
    }
    /// `htb_leaf`: inner classes have none.
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.get(minor)?.leaf.as_ref()
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.get_mut(minor)?.leaf.as_mut()
    }

    /// Mirrors `htb_graft`: only leaves take a qdisc (EINVAL otherwise); None means a
    /// fresh default pfifo. The old qdisc is returned for the caller to purge; the
    /// class, whose new qdisc is empty, leaves the schedule (`htb_qlen_notify`).
    fn graft(&mut self, _sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        if !self.has(minor) {
            return Err(TcError::kernel("Specified class not found"));
        }
        if self.cl(minor).level > 0 {
            return Err(TcError::invalid());
        }
        self.dev = dev.clone();
        let classid = self.cl(minor).classid;
        let new = new.unwrap_or_else(|| pfifo_dflt(classid, dev).invisible());
        let old = self.cl_mut(minor).leaf.replace(new);
        self.deactivate(minor);
        Ok(old)
    }

    fn change_class(
        &mut self,
        sch: &mut Sch,
        classid: u32,
        parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        let o = opts.ok_or_else(TcError::invalid)?.of()?;
        self.change_class_impl(sch, classid, parent, exists, o, dev, now)
    }

    fn delete_class(&mut self, sch: &mut Sch, minor: u32, now: Instant) -> Result<(), TcError> {
        self.delete_impl(sch, minor, now)
    }

    /// Mirrors `htb_dump_class_stats`: the class's own bstats, drops and
    /// overlimits; qlen/backlog from the leaf qdisc.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        if !self.has(minor) {
            return Some(Stats::default());
        }
        let c = self.cl(minor);
        let (qlen, backlog) = c.leaf.as_ref().map_or((0, 0), |n| (n.stats().qlen, n.stats().backlog));
        Some(Stats {
            bytes: c.bstats.bytes,
            packets: c.bstats.packets,
            qlen,
            backlog,
            drops: c.drops,
            requeues: 0,
            overlimits: c.overlimits,
        })
    }

    /// What `htb_dump_class` sends, printed by q_htb.c `htb_print_opt`.
    fn dump_class(&self, minor: u32, out: &mut Out) {
        if !self.has(minor) {
            return;
        }
        let c = self.cl(minor);
        let (details, raw) = (out.details(), out.raw());
        let rspec = c.rate.getrate();
        let cspec = c.ceil.getrate();
        let (rate64, ceil64) = (c.rate.rate_bytes_ps, c.ceil.rate_bytes_ps);
        let (bticks, cticks) = (ns2ticks(c.buffer) as u32, ns2ticks(c.cbuffer) as u32);
        if c.level == 0 {
            out.int("prio", format_args!("prio {} ", c.prio as i32), c.prio as i32 as i64);
            if details {
                out.int("quantum", format_args!("quantum {} ", c.quantum), c.quantum as i64);
            }
        }
        out.rate("rate", "rate ", rate64, " ");
        if rspec.overhead != 0 {
            out.uint("overhead", format_args!("overhead {} ", rspec.overhead), rspec.overhead as u64);
        }
        let buffer = calc_xmitsize(rate64, bticks);
        out.rate("ceil", "ceil ", ceil64, " ");
        let cbuffer = calc_xmitsize(ceil64, cticks);
        if rspec.linklayer != LinkLayer::Ethernet || details {
            out.string("linklayer", format_args!("linklayer {} ", rspec.linklayer.name()), rspec.linklayer.name());
        }
        if details {
            out.size("burst", "burst ", buffer, "/");
            let cell = 1u32 << rspec.cell_log;
            out.uint("burst_cell", format_args!("{cell}"), cell as u64);
            out.size("mpu_rate", "mpu ", rspec.mpu as u32, " ");
            out.size("cburst", "cburst ", cbuffer, "/");
            let ccell = 1u32 << cspec.cell_log;
            out.uint("cburst_cell", format_args!("{ccell}"), ccell as u64);
            out.size("mpu_ceil", "mpu ", cspec.mpu as u32, " ");
            out.int("level", format_args!("level {} ", c.level), c.level as i64);
        } else {
            out.size("burst", "burst ", buffer, " ");
            out.size("cburst", "cburst ", cbuffer, "");
        }
        if raw {
            out.fp(format_args!("buffer [{bticks:08x}] cbuffer [{cticks:08x}] "));
        }
    }

    /// `struct tc_htb_xstats` as q_htb.c `htb_print_xstats` prints it; tokens in
    /// ticks, clamped to int.
    fn dump_class_xstats(&self, minor: u32, out: &mut Out) {
        if !self.has(minor) {
            return;
        }
        let c = self.cl(minor);
        let clamp = |ns: i64| ns2ticks(ns).clamp(i32::MIN as i64, i32::MAX as i64);
        out.uint("lended", format_args!(" lended: {} ", c.lends), c.lends as u64);
        out.uint("borrowed", format_args!("borrowed: {} ", c.borrows), c.borrows as u64);
        out.uint("giants", format_args!("giants: {}", c.giants), c.giants as u64);
        out.nl();
        let (t, ct) = (clamp(c.tokens), clamp(c.ctokens));
        out.int("tokens", format_args!(" tokens: {t} "), t);
        out.int("ctokens", format_args!("ctokens: {ct}"), ct);
        out.nl();
    }

    /// `htb_tcf_block`: the qdisc's block for minor 0, else the class's.
    fn block(&self, minor: u32) -> Option<&Block> {
        if minor == 0 {
            return Some(&self.block);
        }
        self.get(minor).map(|c| &c.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        if minor == 0 {
            return Some(&mut self.block);
        }
        self.get_mut(minor).map(|c| &mut c.block)
    }
    /// `htb_bind_filter`: the class named, wherever the filter is (X:0, the direct
    /// queue, is no class: its results stay unbound).
    fn bind_tcf(&self, _base: u32, classid: u32) -> Option<u32> {
        self.find_classid(classid)
    }
    /// `htb_bind_filter`'s `qdisc_class_get`.
    fn bind_filter(&mut self, classid: u32) {
        Htb::bind_filter(self, classid);
    }
    /// `htb_unbind_filter`.
    fn unbind_filter(&mut self, classid: u32) {
        Htb::unbind_filter(self, classid);
    }

    /// `tcm_parent` of `htb_dump_class`: the parent class, or TC_H_ROOT.
    fn class_parent(&self, minor: u32) -> Option<u32> {
        let c = self.get(minor)?;
        Some(c.parent.map_or(TC_H_ROOT, |p| self.cl(p).classid))
    }
}
