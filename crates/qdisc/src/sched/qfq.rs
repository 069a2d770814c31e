//! qfq — Quick Fair Queueing Plus. Mirrors net/sched/sch_qfq.c (kernel side) and
//! tc/q_qfq.c (iproute2 side); §qfq of docs/kernel-notes.md.
//!
//! Theory: classes made with `tc class add … qfq [weight W] [maxpkt L]` (weight 1 to
//! 1024, default 1; maxpkt 512 to 65536 bytes, default `psched_mtu`), each with a
//! child qdisc (a pfifo until one is grafted), reached through `skb->priority` or the
//! qdisc's filters. Classes with the same (maxpkt, weight) share an *aggregate* of at
//! most 8 classes (fewer when txqueuelen is small) served among themselves by DRR
//! with quantum maxpkt. Aggregates are scheduled by virtual time in fixed point (30
//! fractional bits): an aggregate with n classes has weight n·W and budget n·L; it
//! is stamped with a start S and a finish F = S + budget/weight, and V, the system's
//! virtual time, advances by len/Σweights per packet sent. To find the aggregate
//! with the smallest eligible F in constant time, aggregates sit in one of 25
//! *groups* by the size of their budget/weight (group i's slots are
//! 2^(min_slot_shift + i) wide), each group a ring of 32 slots of aggregates by
//! rounded S, and four bitmaps of groups (eligible/ineligible × ready/blocked)
//! say which group to serve: the lowest-indexed eligible-ready one. The aggregate in service keeps sending
//! until its budget cannot cover its next packet, then is charged what it used and
//! rescheduled. A packet longer than its class's maxpkt raises it (the class moves to
//! an aggregate of that maxpkt); above 65536 bytes it is dropped. Every comparison of
//! timestamps is modulo 2^64 as the kernel's `qfq_gt`, and the bit tricks are the
//! kernel's (including `qfq_make_eligible`'s 32-bit `fls`), so the order of service
//! is the kernel's packet for packet. The qdisc has no options of its own, dumps
//! none and cannot be changed.
//!
//! One deliberate difference: enqueue to an already active class peeks its child
//! only when the class heads its aggregate's list without deficit for the packet
//! (the kernel peeks first, then tests those). The decision is the same; a child
//! whose peek dequeues (tbf, netem: `qdisc_peek_dequeued`) is asked less often,
//! and the packet's identity is its `id`. Checking the class first keeps enqueue
//! from touching the aggregate and the child's head (the 10,000-class bench).

use crate::class_hash::ClassHash;
use crate::classify::{Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::sched::fifo::pfifo_dflt;
use crate::stats::Stats;
use crate::tc::{matches, units, Args, Errno, Out, TcError};
use crate::time::Instant;

/// `qfq_init_qdisc` takes no options (tc sends none), and there is no `change` op.
pub static OPS: Ops = Ops {
    id: "qfq",
    parse: Parse::Qopt(|a| parse(a).map(|()| None)),
    create: |c| Ok(Box::new(Qfq::new(c.handle, c.dev))),
    parse_class: Some(|a| Ok(Opts::new(parse_class(a)?))),
    flags: Flags { no_options: true, ..Flags::NONE },
    since: None,
};

/// q_qfq.c `explain` and `explain_class`.
const USAGE: &str = "Usage: ... qfq\n";
const CLASS_USAGE: &str = "Usage: ... qfq weight NUMBER maxpkt BYTES\n";

/// tc side: q_qfq.c `qfq_parse_opt` — no option at all; an abbreviation of `help`
/// gets the usage alone.
pub fn parse(args: &mut Args) -> Result<(), TcError> {
    match args.next() {
        None => Ok(()),
        Some(a) if matches(a, "help") => Err(TcError::tc(USAGE)),
        Some(a) => Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}"))),
    }
}

/// What tc sends for `tc class … qfq`: always a TCA_OPTIONS nest, with
/// TCA_QFQ_WEIGHT and TCA_QFQ_LMAX when given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QfqClassOpt {
    pub weight: Option<u32>,
    /// `maxpkt`, bytes.
    pub lmax: Option<u32>,
}

/// tc side: q_qfq.c `qfq_parse_class_opt`.
pub fn parse_class(args: &mut Args) -> Result<QfqClassOpt, TcError> {
    let mut o = QfqClassOpt::default();
    while let Some(a) = args.next() {
        if matches(a, "weight") {
            o.weight = Some(units::get_unsigned10(args.value()?).ok_or_else(|| TcError::tc("Illegal \"weight\"\n"))?);
        } else if matches(a, "maxpkt") {
            o.lmax = Some(units::get_unsigned10(args.value()?).ok_or_else(|| TcError::tc("Illegal \"maxpkt\"\n"))?);
        } else if a == "help" {
            return Err(TcError::tc(CLASS_USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\n{CLASS_USAGE}")));
        }
    }
    Ok(o)
}

/// Slots per group (QFQ_MAX_SLOTS).
const MAX_SLOTS: u32 = 32;
/// The highest group index (QFQ_MAX_INDEX).
const MAX_INDEX: usize = 24;
/// QFQ_MAX_WEIGHT and QFQ_MAX_WSUM.
const MAX_WEIGHT: u32 = 1 << 10;
const MAX_WSUM: u32 = 64 * MAX_WEIGHT;
/// Fixed point: FRAC_BITS fractional bits, ONE_FP = 1.0.
const FRAC_BITS: u32 = 30;
const ONE_FP: u64 = 1 << FRAC_BITS;
/// QFQ_MTU_SHIFT, QFQ_MIN_LMAX, QFQ_MAX_LMAX.
const MTU_SHIFT: u32 = 16;
const MIN_LMAX: u32 = 512;
const MAX_LMAX: u32 = 1 << MTU_SHIFT;
/// QFQ_MAX_AGG_CLASSES.
const MAX_AGG_CLASSES: u32 = 8;

/// The group bitmaps (`enum qfq_state`): eligible/ineligible, ready/blocked.
const ER: usize = 0;
const IR: usize = 1;
const EB: usize = 2;
const IB: usize = 3;

/// Why an aggregate's timestamps are updated (`enum update_reason`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reason {
    Enqueue,
    Requeue,
}

/// `qfq_gt`: a > b modulo 2^64.
fn gt(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) > 0
}

/// `qfq_round_down`.
fn round_down(ts: u64, shift: u32) -> u64 {
    ts & !((1u64 << shift) - 1)
}

/// `mask_from`: the bits of `bitmap` from `from` up.
fn mask_from(bitmap: u64, from: u32) -> u64 {
    bitmap & !((1u64 << from) - 1)
}

/// `__ffs` of a non-zero bitmap.
fn ffs(bitmap: u64) -> usize {
    bitmap.trailing_zeros() as usize
}

/// `qfq_calc_index`: the group of an aggregate, about log2(maxlen/weight) scaled so
/// that the largest budget with weight 1 lands in the last group.
fn calc_index(inv_w: u32, maxlen: u32, min_slot_shift: u32) -> usize {
    let slot_size = maxlen as u64 * inv_w as u64;
    let size_map = slot_size >> min_slot_shift;
    if size_map == 0 {
        return 0;
    }
    let mut index = (64 - size_map.leading_zeros()) as i64;
    // An exact power of two belongs one group lower.
    index -= (slot_size == 1u64 << (index as u32 + min_slot_shift - 1)) as i64;
    index.max(0) as usize
}

/// `struct qfq_class`. Fields in declaration order (`repr(C)`): what enqueue and
/// dequeue read — the DRR state, the counters, then the child node's kind and
/// counters ([`Node`] puts them first) — is the first 114 bytes, two or three cache
/// lines; with 10,000 classes each packet's class is a cache miss per line, and the
/// default layout spread it over four or five. (Aligning the class to a line made
/// the simulated misses fewer but the bench slower: a larger footprint.)
#[repr(C)]
struct Class {
    /// DRR deficit within the aggregate (an `int`, compared unsigned as the kernel's).
    deficit: i32,
    /// The aggregate's lmax and class weight (fixed for an aggregate's life), kept
    /// here for enqueue's check without a visit to the aggregate.
    lmax: u32,
    weight: u32,
    /// On its aggregate's active list (`cl_is_active`).
    active: bool,
    /// The aggregate it belongs to (an index into `Qfq::aggs`).
    agg: usize,
    /// `bstats`, counted at enqueue as `qfq_enqueue` does.
    bytes: u64,
    packets: u64,
    leaf: Node,
    classid: u32,
    /// Filters whose result names this class (`qdisc_class_get` by `qfq_bind_tcf`).
    filter_cnt: u32,
}

// What every packet reads of its class (up to its child's counters and parked flag,
// which follow `schedule`) is at most two cache lines' worth of bytes.
const _: () = assert!(
    std::mem::offset_of!(Class, leaf) + std::mem::offset_of!(Node, sch) + std::mem::offset_of!(Sch, schedule) + 2
        <= 128
);

/// `struct qfq_aggregate`.
#[derive(Default)]
struct Agg {
    s: u64,
    f: u64,
    /// Its group, fixed when it gets its first class.
    grp: Option<usize>,
    class_weight: u32,
    lmax: u32,
    inv_w: u32,
    budgetmax: u32,
    initial_budget: u32,
    budget: u32,
    num_classes: u32,
    /// The DRR list of its active classes, by minor.
    active: Drr8,
}

/// An aggregate's DRR list (`agg->active`): at most QFQ_MAX_AGG_CLASSES minors,
/// kept inline so that serving an aggregate touches no other memory.
#[derive(Default)]
struct Drr8 {
    ring: [u32; MAX_AGG_CLASSES as usize],
    head: u8,
    len: u8,
}

impl Drr8 {
    const N: u8 = MAX_AGG_CLASSES as u8;
    fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn front(&self) -> Option<&u32> {
        (self.len > 0).then(|| &self.ring[self.head as usize])
    }
    fn push_back(&mut self, m: u32) {
        debug_assert!(self.len < Self::N, "an aggregate holds at most 8 classes");
        self.ring[((self.head + self.len) % Self::N) as usize] = m;
        self.len += 1;
    }
    fn pop_front(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) % Self::N;
            self.len -= 1;
        }
    }
    /// `list_del_init` of `m`, wherever it is; the others keep their order.
    fn remove(&mut self, m: u32) {
        let old = std::mem::take(self);
        for i in 0..old.len {
            let x = old.ring[((old.head + i) % Self::N) as usize];
            if x != m {
                self.push_back(x);
            }
        }
    }
}

/// `struct qfq_group`. Each slot is an hlist of aggregates; its head is the last
/// element here (`hlist_add_head` pushes).
#[derive(Default)]
struct Group {
    s: u64,
    f: u64,
    slot_shift: u32,
    index: u32,
    front: u32,
    full_slots: u64,
    slots: [Vec<usize>; MAX_SLOTS as usize],
}

/// `struct qfq_sched`.
pub struct Qfq {
    handle: u32,
    /// Classes by minor.
    classes: Vec<Option<Box<Class>>>,
    /// `q->clhash`: the order `qfq_walk` lists classes in.
    hash: ClassHash,
    block: Block,
    old_v: u64,
    v: u64,
    in_serv: Option<usize>,
    wsum: u32,
    iwsum: u32,
    bitmaps: [u64; 4],
    groups: Vec<Group>,
    min_slot_shift: u32,
    max_agg_classes: u32,
    /// Aggregates by index; `None` once destroyed (the slot is reused).
    aggs: Vec<Option<Agg>>,
    /// `q->nonfull_aggs`, head last.
    nonfull: Vec<usize>,
    /// The wake-up a throttled head class's qdisc reported at the last dequeue.
    watchdog: Option<Instant>,
}

impl Qfq {
    /// `qfq_init_qdisc`: at most txqueuelen + 1 (up to 8, rounded down to a power of
    /// two) classes per aggregate, which fixes the groups' slot sizes.
    pub fn new(handle: u32, dev: &DevInfo) -> Qfq {
        let max_classes = (dev.tx_queue_len as u64 + 1).min(MAX_AGG_CLASSES as u64);
        let max_cl_shift = 63 - max_classes.leading_zeros();
        let min_slot_shift = FRAC_BITS + MTU_SHIFT + max_cl_shift - MAX_INDEX as u32;
        let groups = (0..=MAX_INDEX as u32)
            .map(|i| Group { index: i, slot_shift: min_slot_shift + i, ..Group::default() })
            .collect();
        Qfq {
            handle,
            classes: Vec::new(),
            hash: ClassHash::new(),
            block: Block::new(handle),
            old_v: 0,
            v: 0,
            in_serv: None,
            wsum: 0,
            iwsum: 0,
            bitmaps: [0; 4],
            groups,
            min_slot_shift,
            max_agg_classes: 1 << max_cl_shift,
            aggs: Vec::new(),
            nonfull: Vec::new(),
            watchdog: None,
        }
    }

    fn get(&self, m: u32) -> Option<&Class> {
        self.classes.get(m as usize).and_then(|c| c.as_deref())
    }
    fn cl(&self, m: u32) -> &Class {
        self.get(m).expect("class exists")
    }
    fn cl_mut(&mut self, m: u32) -> &mut Class {
        self.classes[m as usize].as_deref_mut().expect("class exists")
    }
    fn agg(&self, a: usize) -> &Agg {
        self.aggs[a].as_ref().expect("live aggregate")
    }
    fn agg_mut(&mut self, a: usize) -> &mut Agg {
        self.aggs[a].as_mut().expect("live aggregate")
    }
    fn grp_of(&self, a: usize) -> usize {
        self.agg(a).grp.expect("aggregate with classes has a group")
    }

    /// `qfq_find_class` by full classid.
    fn find(&self, classid: u32) -> Option<u32> {
        (tc_h_maj(classid) == self.handle && self.get(tc_h_min(classid)).is_some()).then(|| tc_h_min(classid))
    }

    /// Mirrors `qfq_classify`: `skb->priority` naming one of our classes, else the
    /// filters' class. `Err` is the answer for the packet.
    fn classify(&self, pkt: &mut Packet, now: Instant) -> Result<u32, Enqueued> {
        if tc_h_maj(pkt.priority ^ self.handle) == 0 {
            if let Some(m) = self.find(pkt.priority) {
                return Ok(m);
            }
        }
        match self.block.classify(pkt, now) {
            Some(Verdict::Class(r)) => r.class.or_else(|| self.find(r.classid)).ok_or(Enqueued::Dropped),
            Some(Verdict::Stolen) => Err(Enqueued::Stolen),
            Some(Verdict::Shot) | None => Err(Enqueued::Dropped),
        }
    }

    // ---- aggregates and classes ------------------------------------------------

    /// `qfq_init_agg` (after `kzalloc`): a new aggregate on the non-full list.
    fn init_agg(&mut self, lmax: u32, weight: u32) -> usize {
        let agg = Agg { lmax, class_weight: weight, ..Agg::default() };
        let a = match self.aggs.iter().position(Option::is_none) {
            Some(i) => {
                self.aggs[i] = Some(agg);
                i
            }
            None => {
                self.aggs.push(Some(agg));
                self.aggs.len() - 1
            }
        };
        self.nonfull.push(a);
        a
    }

    /// `qfq_find_agg`: the first non-full aggregate with these parameters.
    fn find_agg(&self, lmax: u32, weight: u32) -> Option<usize> {
        self.nonfull.iter().rev().copied().find(|&a| {
            let g = self.agg(a);
            g.lmax == lmax && g.class_weight == weight
        })
    }

    /// `qfq_update_agg`: budget, weight, group (once) and the weight sum for
    /// `n` classes.
    fn update_agg(&mut self, a: usize, n: u32) {
        let (max, mss) = (self.max_agg_classes, self.min_slot_shift);
        let old_n = self.agg(a).num_classes;
        if n == max {
            self.nonfull.retain(|&x| x != a);
        }
        if old_n > n && n == max - 1 {
            self.nonfull.push(a);
        }
        let g = self.agg_mut(a);
        g.budgetmax = n * g.lmax;
        g.inv_w = (ONE_FP / (g.class_weight * n) as u64) as u32;
        if g.grp.is_none() {
            g.grp = Some(calc_index(g.inv_w, g.budgetmax, mss));
        }
        let delta = (g.class_weight as i32).wrapping_mul(n as i32 - old_n as i32);
        g.num_classes = n;
        self.wsum = self.wsum.wrapping_add(delta as u32);
        self.iwsum = (ONE_FP / self.wsum as u64) as u32;
    }

    /// `qfq_add_to_agg`: an active class joining an idle aggregate activates it.
    fn add_to_agg(&mut self, a: usize, m: u32) {
        let (lmax, weight) = (self.agg(a).lmax, self.agg(a).class_weight);
        let c = self.cl_mut(m);
        (c.agg, c.lmax, c.weight) = (a, lmax, weight);
        let n = self.agg(a).num_classes + 1;
        self.update_agg(a, n);
        if self.cl(m).leaf.stats().qlen > 0 {
            self.cl_mut(m).active = true;
            let g = self.agg_mut(a);
            g.active.push_back(m);
            if g.active.front() == Some(&m) && self.in_serv != Some(a) {
                self.activate_agg(a, Reason::Enqueue);
            }
        }
    }

    /// `qfq_destroy_agg`.
    fn destroy_agg(&mut self, a: usize) {
        self.nonfull.retain(|&x| x != a);
        self.wsum = self.wsum.wrapping_sub(self.agg(a).class_weight);
        if self.wsum != 0 {
            self.iwsum = (ONE_FP / self.wsum as u64) as u32;
        }
        if self.in_serv == Some(a) {
            self.in_serv = self.choose_next_agg();
        }
        self.aggs[a] = None;
    }

    /// `qfq_deactivate_class`: off its aggregate's list; an aggregate left without
    /// active classes is descheduled.
    fn deactivate_class(&mut self, m: u32) {
        let c = self.cl_mut(m);
        c.active = false;
        let a = c.agg;
        let g = self.agg_mut(a);
        g.active.remove(m);
        if g.active.is_empty() {
            self.deactivate_agg(a);
        }
    }

    /// `qfq_rm_from_agg`: the last class's departure destroys the aggregate.
    fn rm_from_agg(&mut self, m: u32) {
        let a = self.cl(m).agg;
        let n = self.agg(a).num_classes;
        if n == 1 {
            self.destroy_agg(a);
        } else {
            self.update_agg(a, n - 1);
        }
    }

    /// `qfq_deact_rm_from_agg`.
    fn deact_rm_from_agg(&mut self, m: u32) {
        if self.cl(m).active {
            self.deactivate_class(m);
        }
        self.rm_from_agg(m);
    }

    /// `qfq_change_agg`: move a class to an aggregate of (lmax, weight); EINVAL above
    /// QFQ_MAX_LMAX.
    fn change_agg(&mut self, m: u32, weight: u32, lmax: u32) -> Result<(), TcError> {
        if lmax > MAX_LMAX {
            return Err(TcError::invalid());
        }
        let a = match self.find_agg(lmax, weight) {
            Some(a) => a,
            None => self.init_agg(lmax, weight),
        };
        self.deact_rm_from_agg(m);
        self.add_to_agg(a, m);
        Ok(())
    }

    /// A child call's reduction reached us: our counters, the report upwards, and
    /// `qfq_qlen_notify` when it emptied an active class.
    fn collect(&mut self, sch: &mut Sch, m: u32) {
        let c = self.cl_mut(m);
        if c.leaf.sch.reduce.is_zero() {
            return;
        }
        sch.child_reduced(c.leaf.take_reduce());
        if c.leaf.stats().qlen == 0 && c.active {
            self.deactivate_class(m);
        }
    }

    // ---- groups, slots and bitmaps ---------------------------------------------

    /// `qfq_calc_state`: ineligible if S > V; blocked if a lower eligible-ready group
    /// finishes earlier.
    fn calc_state(&self, g: usize) -> usize {
        let grp = &self.groups[g];
        let mut state = gt(grp.s, self.v) as usize;
        let mask = mask_from(self.bitmaps[ER], grp.index);
        if mask != 0 && gt(grp.f, self.groups[ffs(mask)].f) {
            state |= EB;
        }
        state
    }

    /// `qfq_move_groups`.
    fn move_groups(&mut self, mask: u64, src: usize, dst: usize) {
        self.bitmaps[dst] |= self.bitmaps[src] & mask;
        self.bitmaps[src] &= !mask;
    }

    /// `qfq_unblock_groups`.
    fn unblock_groups(&mut self, index: u32, old_f: u64) {
        let mask = mask_from(self.bitmaps[ER], index + 1);
        if mask != 0 && !gt(self.groups[ffs(mask)].f, old_f) {
            return;
        }
        let mask = (1u64 << index) - 1;
        self.move_groups(mask, EB, ER);
        self.move_groups(mask, IB, IR);
    }

    /// `qfq_make_eligible`: groups whose slot V has crossed become eligible. `fls`
    /// takes an `unsigned int`: only the low 32 bits of the flip count.
    fn make_eligible(&mut self) {
        let vslot = self.v >> self.min_slot_shift;
        let old_vslot = self.old_v >> self.min_slot_shift;
        if vslot != old_vslot {
            let last_flip_pos = 32 - ((vslot ^ old_vslot) as u32).leading_zeros();
            let mask = if last_flip_pos > 31 { !0u64 } else { (1u64 << last_flip_pos) - 1 };
            self.move_groups(mask, IR, ER);
            self.move_groups(mask, IB, EB);
        }
    }

    /// `qfq_slot_insert`: at most QFQ_MAX_SLOTS - 2 slots ahead of the group's S; an
    /// aggregate further ahead has its timestamps shifted back.
    fn slot_insert(&mut self, g: usize, a: usize, rounded_s: u64) {
        let (gs, shift) = (self.groups[g].s, self.groups[g].slot_shift);
        let mut slot = rounded_s.wrapping_sub(gs) >> shift;
        if slot > (MAX_SLOTS - 2) as u64 {
            let delta = rounded_s.wrapping_sub(gs).wrapping_sub(((MAX_SLOTS - 2) as u64) << shift);
            let agg = self.agg_mut(a);
            agg.s = agg.s.wrapping_sub(delta);
            agg.f = agg.f.wrapping_sub(delta);
            slot = (MAX_SLOTS - 2) as u64;
        }
        let grp = &mut self.groups[g];
        let i = ((grp.front as u64 + slot) % MAX_SLOTS as u64) as usize;
        grp.slots[i].push(a);
        grp.full_slots |= 1u64 << slot;
    }

    /// `qfq_slot_head`.
    fn slot_head(&self, g: usize) -> usize {
        let grp = &self.groups[g];
        *grp.slots[grp.front as usize].last().expect("front slot holds an aggregate")
    }

    /// `qfq_front_slot_remove`.
    fn front_slot_remove(&mut self, g: usize) {
        let grp = &mut self.groups[g];
        let front = grp.front as usize;
        grp.slots[front].pop();
        if grp.slots[front].is_empty() {
            grp.full_slots &= !1;
        }
    }

    /// `qfq_slot_scan`: the head of the first non-empty slot, which becomes the front.
    fn slot_scan(&mut self, g: usize) -> Option<usize> {
        let grp = &mut self.groups[g];
        if grp.full_slots == 0 {
            return None;
        }
        let i = grp.full_slots.trailing_zeros();
        if i > 0 {
            grp.front = (grp.front + i) % MAX_SLOTS;
            grp.full_slots >>= i;
        }
        Some(self.slot_head(g))
    }

    /// `qfq_slot_rotate`: the group's S moves back to `rounded_s`; the ring turns
    /// instead of the aggregates moving.
    fn slot_rotate(&mut self, g: usize, rounded_s: u64) {
        let grp = &mut self.groups[g];
        let i = (grp.s.wrapping_sub(rounded_s) >> grp.slot_shift) as u32;
        grp.full_slots = grp.full_slots.checked_shl(i).unwrap_or(0);
        grp.front = grp.front.wrapping_sub(i) % MAX_SLOTS;
    }

    /// `qfq_update_eligible`: with no eligible group, V jumps to the first ineligible
    /// group's S.
    fn update_eligible(&mut self) {
        let ineligible = self.bitmaps[IR] | self.bitmaps[IB];
        if ineligible != 0 {
            if self.bitmaps[ER] == 0 {
                let s = self.groups[ffs(ineligible)].s;
                if gt(s, self.v) {
                    self.v = s;
                }
            }
            self.make_eligible();
        }
    }

    /// `charge_actual_service`: F from the service actually received.
    fn charge_actual_service(&mut self, a: usize) {
        let g = self.agg_mut(a);
        let received = g.budgetmax.min(g.initial_budget.wrapping_sub(g.budget));
        g.f = g.s.wrapping_add(received as u64 * g.inv_w as u64);
    }

    /// `qfq_update_start`: a new start for an aggregate becoming active: its old F if
    /// still valid, else V — or the F of the group that would block it.
    fn update_start(&mut self, a: usize) {
        let g = self.grp_of(a);
        let (shift, index) = (self.groups[g].slot_shift, self.groups[g].index);
        let f = self.agg(a).f;
        let rounded_f = round_down(f, shift);
        let limit = round_down(self.v, shift).wrapping_add(1u64 << shift);
        let s = if !gt(f, self.v) || gt(rounded_f, limit) {
            let mask = mask_from(self.bitmaps[ER], index);
            let next_f = (mask != 0).then(|| self.groups[ffs(mask)].f);
            match next_f {
                Some(nf) if gt(rounded_f, nf) => {
                    if gt(limit, nf) {
                        nf
                    } else {
                        limit
                    }
                }
                _ => self.v,
            }
        } else {
            f
        };
        self.agg_mut(a).s = s;
    }

    /// `qfq_update_agg_ts`: S (new, or the old F on a requeue), then F for a full
    /// budget.
    fn update_agg_ts(&mut self, a: usize, reason: Reason) {
        if reason == Reason::Enqueue {
            self.update_start(a);
        } else {
            let g = self.agg_mut(a);
            g.s = g.f;
        }
        let g = self.agg_mut(a);
        g.f = g.s.wrapping_add(g.budgetmax as u64 * g.inv_w as u64);
    }

    /// `qfq_schedule_agg`: into its group's slot; a group whose S decreases (or that
    /// was empty) gets its state recomputed.
    fn schedule_agg(&mut self, a: usize) {
        let g = self.grp_of(a);
        let agg_s = self.agg(a).s;
        let rounded_s = round_down(agg_s, self.groups[g].slot_shift);
        let index = self.groups[g].index;
        if self.groups[g].full_slots != 0 {
            if !gt(self.groups[g].s, agg_s) {
                self.slot_insert(g, a, rounded_s);
                return;
            }
            self.slot_rotate(g, rounded_s);
            self.bitmaps[IR] &= !(1u64 << index);
            self.bitmaps[IB] &= !(1u64 << index);
        } else if self.bitmaps[ER] == 0 && gt(rounded_s, self.v) && self.in_serv.is_none() {
            self.v = rounded_s;
        }
        let grp = &mut self.groups[g];
        grp.s = rounded_s;
        grp.f = rounded_s.wrapping_add(2u64 << grp.slot_shift);
        let s = self.calc_state(g);
        self.bitmaps[s] |= 1u64 << index;
        self.slot_insert(g, a, rounded_s);
    }

    /// `qfq_activate_agg`: recharge, stamp, and serve at once if nothing is in
    /// service (V jumps to its S), else schedule.
    fn activate_agg(&mut self, a: usize, reason: Reason) {
        let g = self.agg_mut(a);
        g.budget = g.budgetmax;
        g.initial_budget = g.budgetmax;
        self.update_agg_ts(a, reason);
        match self.in_serv {
            None => {
                self.in_serv = Some(a);
                self.v = self.agg(a).s;
                self.old_v = self.v;
            }
            Some(x) if x != a => self.schedule_agg(a),
            Some(_) => {}
        }
    }

    /// `qfq_slot_remove`.
    fn slot_remove(&mut self, g: usize, a: usize) {
        let rounded_s = round_down(self.agg(a).s, self.groups[g].slot_shift);
        let grp = &mut self.groups[g];
        let offset = (rounded_s.wrapping_sub(grp.s) >> grp.slot_shift) as u32;
        let i = (grp.front.wrapping_add(offset) % MAX_SLOTS) as usize;
        // hlist_del unlinks the aggregate from whichever slot holds it.
        for slot in std::iter::once(i).chain(0..MAX_SLOTS as usize) {
            if let Some(p) = grp.slots[slot].iter().position(|&x| x == a) {
                grp.slots[slot].remove(p);
                break;
            }
        }
        if grp.slots[i].is_empty() {
            grp.full_slots &= !1u64.checked_shl(offset).unwrap_or(0);
        }
    }

    /// `qfq_deactivate_agg`: deschedule an aggregate; the one in service is charged
    /// and the next chosen.
    fn deactivate_agg(&mut self, a: usize) {
        if self.in_serv == Some(a) {
            self.charge_actual_service(a);
            self.in_serv = self.choose_next_agg();
            return;
        }
        let g = self.grp_of(a);
        let agg = self.agg_mut(a);
        agg.f = agg.s;
        self.slot_remove(g, a);
        let index = self.groups[g].index;
        let bit = 1u64 << index;
        if self.groups[g].full_slots == 0 {
            self.bitmaps[IR] &= !bit;
            self.bitmaps[EB] &= !bit;
            self.bitmaps[IB] &= !bit;
            if self.bitmaps[ER] & bit != 0 && self.bitmaps[ER] & !(bit - 1) & !bit == 0 {
                let lower = self.bitmaps[ER] & (bit - 1);
                let mask = if lower != 0 { !((1u64 << (63 - lower.leading_zeros())) - 1) } else { !0 };
                self.move_groups(mask, EB, ER);
                self.move_groups(mask, IB, IR);
            }
            self.bitmaps[ER] &= !bit;
        } else if self.groups[g].slots[self.groups[g].front as usize].is_empty() {
            let head = self.slot_scan(g).expect("group has full slots");
            let rounded_s = round_down(self.agg(head).s, self.groups[g].slot_shift);
            if self.groups[g].s != rounded_s {
                for b in &mut self.bitmaps {
                    *b &= !bit;
                }
                let grp = &mut self.groups[g];
                grp.s = rounded_s;
                grp.f = rounded_s.wrapping_add(2u64 << grp.slot_shift);
                let s = self.calc_state(g);
                self.bitmaps[s] |= bit;
            }
        }
    }

    /// `qfq_choose_next_agg`: the head aggregate of the first eligible-ready group.
    fn choose_next_agg(&mut self) -> Option<usize> {
        self.update_eligible();
        self.old_v = self.v;
        if self.bitmaps[ER] == 0 {
            return None;
        }
        let g = ffs(self.bitmaps[ER]);
        let old_f = self.groups[g].f;
        let index = self.groups[g].index;
        let a = self.slot_head(g);
        self.front_slot_remove(g);
        match self.slot_scan(g) {
            None => self.bitmaps[ER] &= !(1u64 << index),
            Some(front) => {
                let rounded_s = round_down(self.agg(front).s, self.groups[g].slot_shift);
                if self.groups[g].s == rounded_s {
                    return Some(a);
                }
                let grp = &mut self.groups[g];
                grp.s = rounded_s;
                grp.f = rounded_s.wrapping_add(2u64 << grp.slot_shift);
                self.bitmaps[ER] &= !(1u64 << index);
                let s = self.calc_state(g);
                self.bitmaps[s] |= 1u64 << index;
            }
        }
        self.unblock_groups(index, old_f);
        Some(a)
    }

    /// `qfq_peek_skb`: the head class of the aggregate and the length of its next
    /// packet (None: its qdisc would not give one).
    fn peek_head(&mut self, sch: &mut Sch, a: usize, now: Instant) -> (u32, Option<u32>) {
        let m = *self.agg(a).active.front().expect("active aggregate has classes");
        let c = self.cl_mut(m);
        let len = c.leaf.peek(now).map(|p| p.len);
        if !c.leaf.sch.reduce.is_zero() {
            self.collect(sch, m);
        }
        (m, len)
    }
}

impl Qdisc for Qfq {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `qfq_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let m = match self.classify(&mut pkt, now) {
            Ok(m) => m,
            Err(e) => return sch.unclassified(e),
        };
        let (len, segs, id) = (pkt.len, pkt.gso_segs, pkt.id);
        let c = self.cl(m);
        if c.lmax < len && self.change_agg(m, c.weight, len).is_err() {
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        let c = self.cl_mut(m);
        let r = c.leaf.enqueue(pkt, now);
        // (The class is looked up again only after a reduction, which may move it.)
        let c = if c.leaf.sch.reduce.is_zero() {
            c
        } else {
            self.collect(sch, m);
            self.cl_mut(m)
        };
        if r != Enqueued::Success {
            if r.counts_as_drop() {
                sch.stats.dropped();
            }
            return r;
        }
        c.bytes += len as u64;
        c.packets += segs.max(1) as u64;
        sch.stats.queued(len);
        let a = c.agg;
        if c.active {
            // The new packet at the head of a class already at the head of the DRR
            // list without deficit for it: to the tail (a reordering child's case).
            // The kernel peeks the child first; the class's own fields are tested
            // first here (the same decision; a non-work-conserving child is peeked
            // less often — see the theory above).
            if (c.deficit as u32) < len
                && self.agg(a).active.front() == Some(&m)
                && self.cl_mut(m).leaf.peek(now).is_some_and(|p| p.id == id)
            {
                let g = self.agg_mut(a);
                g.active.pop_front();
                g.active.push_back(m);
            }
            return r;
        }
        let lmax = self.agg(a).lmax;
        let c = self.cl_mut(m);
        c.deficit = lmax as i32;
        c.active = true;
        let g = self.agg_mut(a);
        g.active.push_back(m);
        if g.active.front() != Some(&m) || self.in_serv == Some(a) {
            return r;
        }
        self.activate_agg(a, Reason::Enqueue);
        r
    }

    /// Mirrors `qfq_dequeue` (and `agg_dequeue`).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.watchdog = None;
        let Some(mut a) = self.in_serv else { return Dequeued::Empty };
        let mut head = None;
        if !self.agg(a).active.is_empty() {
            let (m, len) = self.peek_head(sch, a, now);
            head = len.map(|l| (m, l));
        }
        let need_next = match head {
            None => true,
            Some((_, len)) => self.agg(a).budget < len,
        };
        if need_next {
            self.charge_actual_service(a);
            let g = self.agg_mut(a);
            g.budget = g.budgetmax;
            g.initial_budget = g.budgetmax;
            if !self.agg(a).active.is_empty() {
                self.update_agg_ts(a, Reason::Requeue);
                self.schedule_agg(a);
            } else if sch.stats.qlen == 0 {
                self.in_serv = None;
                return Dequeued::Empty;
            }
            self.in_serv = self.choose_next_agg();
            let Some(next) = self.in_serv else { return Dequeued::Empty };
            a = next;
            let (m, len) = self.peek_head(sch, a, now);
            head = len.map(|l| (m, l));
        }
        let Some((m, len)) = head else {
            // qdisc_warn_nonwc: the head class's qdisc is throttled; its watchdog
            // wakes the device.
            let m = *self.agg(a).active.front().expect("head class");
            let c = &self.cl(m);
            self.watchdog = c.leaf.watchdog().filter(|_| c.leaf.stats().qlen > 0);
            return self.watchdog.map_or(Dequeued::Empty, |until| Dequeued::Throttled { until });
        };
        let c = self.cl_mut(m);
        let d = c.leaf.dequeue(now);
        let c = if c.leaf.sch.reduce.is_zero() {
            c
        } else {
            self.collect(sch, m);
            self.cl_mut(m)
        };
        let Dequeued::Packet(p) = d else { return Dequeued::Empty };
        sch.stats.unqueued(p.len);
        sch.stats.sent(&p);
        // agg_dequeue: charge the class; an empty class leaves the list, one whose
        // deficit no longer covers its next packet gets lmax more and goes last.
        c.deficit = c.deficit.wrapping_sub(len as i32);
        let head = |g: &mut Agg| {
            // The class served is the head, unless a reduction above moved it.
            if g.active.front() == Some(&m) {
                g.active.pop_front();
            } else {
                g.active.remove(m);
            }
        };
        if c.leaf.stats().qlen == 0 {
            if c.active {
                c.active = false;
                head(self.agg_mut(a));
            }
        } else {
            let next = c.leaf.peek(now).map_or(0, |p| p.len);
            let reduced = !c.leaf.sch.reduce.is_zero();
            if (c.deficit as u32) < next {
                c.deficit = c.deficit.wrapping_add(c.lmax as i32);
                let g = self.agg_mut(a);
                head(g);
                g.active.push_back(m);
            }
            if reduced {
                self.collect(sch, m);
            }
        }
        let g = self.agg_mut(a);
        g.budget = g.budget.saturating_sub(len);
        self.v = self.v.wrapping_add(len as u64 * self.iwsum as u64);
        Dequeued::Packet(p)
    }

    /// Mirrors `qfq_reset_qdisc`: every active class is descheduled (in the hash's
    /// order) and its qdisc reset.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for id in self.hash.walk().collect::<Vec<_>>() {
            let m = tc_h_min(id);
            if self.cl(m).active {
                self.deactivate_class(m);
            }
            let c = self.cl_mut(m);
            c.leaf.reset(now);
            let _ = c.leaf.take_reduce();
        }
        self.watchdog = None;
    }

    /// qfq has no `dump` op: no options.
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}

    crate::classful!();
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

impl Classful for Qfq {
    /// `qfq_change_class` takes TCA_RATE.
    fn class_takes_estimator(&self) -> bool {
        true
    }
    /// `qfq_walk`: the class hash, bucket by bucket.
    fn class_minors(&self) -> Vec<u32> {
        self.hash.walk().map(tc_h_min).collect()
    }
    fn find(&self, minor: u32) -> bool {
        self.get(minor).is_some()
    }
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.get(minor).map(|c| &c.leaf)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.classes.get_mut(minor as usize).and_then(|c| c.as_deref_mut()).map(|c| &mut c.leaf)
    }

    /// Mirrors `qfq_graft_class`: None means a fresh default pfifo, which
    /// `qfq_graft_class` never hashes (dumps do not list it). The caller purges the
    /// old qdisc, whose emptying is `qfq_qlen_notify`.
    fn graft(&mut self, _sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        let c = self
            .classes
            .get_mut(minor as usize)
            .and_then(|c| c.as_deref_mut())
            .ok_or_else(|| TcError::kernel("Specified class not found"))?;
        let new = new.unwrap_or_else(|| pfifo_dflt(c.classid, dev).invisible().unhashed());
        let old = std::mem::replace(&mut c.leaf, new);
        if old.stats().qlen > 0 && c.active {
            self.deactivate_class(minor);
        }
        Ok(Some(old))
    }

    /// Mirrors `qfq_change_class`.
    fn change_class(
        &mut self,
        _sch: &mut Sch,
        classid: u32,
        _parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        dev: &DevInfo,
        _now: Instant,
    ) -> Result<Option<String>, TcError> {
        let Some(o) = opts else {
            // NL_REQ_ATTR_CHECK reports the missing TCA_OPTIONS (type 2) first.
            let mut e = TcError::kernel("sch_qfq: missing options");
            e.msg.insert_str(0, "Missing required attribute type 2\n");
            return Err(e);
        };
        let o: &QfqClassOpt = o.of()?;
        // qfq_policy: NLA_POLICY_RANGE on both attributes.
        if o.weight.is_some_and(|w| !(1..=MAX_WEIGHT).contains(&w))
            || o.lmax.is_some_and(|l| !(MIN_LMAX..=MAX_LMAX).contains(&l))
        {
            return Err(TcError::kernel("integer out of range"));
        }
        let lmax = match o.lmax {
            Some(l) => l,
            None => {
                let l = dev.psched_mtu();
                if !(MIN_LMAX..=MAX_LMAX).contains(&l) {
                    return Err(TcError::kernel("sch_qfq: MTU size out of bounds for qfq"));
                }
                l
            }
        };
        let inv_w = ONE_FP / o.weight.unwrap_or(1) as u64;
        let weight = (ONE_FP / inv_w) as u32;
        let m = tc_h_min(classid);
        let old = exists.then(|| self.agg(self.cl(m).agg)).map(|g| (g.class_weight, g.lmax));
        if old == Some((weight, lmax)) {
            return Ok(None);
        }
        let delta_w = weight as i32 - old.map_or(0, |(w, _)| w as i32);
        if self.wsum.wrapping_add(delta_w as u32) > MAX_WSUM {
            // The format ends in a newline, which tc prints before the final period.
            return Err(TcError::kernel(&format!("sch_qfq: total weight out of range ({delta_w} + {})\n", self.wsum)));
        }
        if !exists {
            let leaf = pfifo_dflt(classid, dev).invisible();
            let c = Class {
                classid,
                agg: usize::MAX,
                lmax,
                weight,
                deficit: lmax as i32,
                active: false,
                bytes: 0,
                packets: 0,
                filter_cnt: 0,
                leaf,
            };
            if self.classes.len() <= m as usize {
                self.classes.resize_with(m as usize + 1, || None);
            }
            self.classes[m as usize] = Some(Box::new(c));
        }
        let a = match self.find_agg(lmax, weight) {
            Some(a) => a,
            None => self.init_agg(lmax, weight),
        };
        if exists {
            self.deact_rm_from_agg(m);
        } else {
            self.hash.insert(classid);
            // tc_bind_tclass walks the classes' blocks, and qfq_tcf_block has none for
            // a class: filters made before the class never bind it.
        }
        self.add_to_agg(a, m);
        self.hash.grow();
        Ok(None)
    }

    /// Mirrors `qfq_delete_class`: refused while filters name the class; its queue is
    /// purged and reported up.
    fn delete_class(&mut self, sch: &mut Sch, minor: u32, now: Instant) -> Result<(), TcError> {
        let c = self.get(minor).ok_or_else(|| TcError::errno(Errno::ENOENT))?;
        if c.filter_cnt > 0 {
            return Err(TcError::with_errno("sch_qfq: QFQ class in use", Errno::EBUSY));
        }
        let classid = c.classid;
        // qdisc_purge_queue: the reduction empties the class (qfq_qlen_notify).
        let held = c.leaf.stats().clone();
        if held.qlen > 0 || held.backlog > 0 {
            sch.child_purged(&held);
            if self.cl(minor).active {
                self.deactivate_class(minor);
            }
        }
        self.cl_mut(minor).leaf.reset(now);
        self.hash.remove(classid);
        self.rm_from_agg(minor);
        self.classes[minor as usize] = None;
        Ok(())
    }

    /// Mirrors `qfq_dump_class_stats`: the class's bstats (counted at enqueue); qlen,
    /// backlog and drops are its qdisc's.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let Some(c) = self.get(minor) else { return Some(Stats::default()) };
        Some(Stats { bytes: c.bytes, packets: c.packets, ..c.leaf.stats().clone() })
    }

    /// q_qfq.c `qfq_print_opt` on `qfq_dump_class`'s attributes: a plain fprintf, so
    /// inside `-j` output too.
    fn dump_class(&self, minor: u32, out: &mut Out) {
        if let Some(c) = self.get(minor) {
            let g = self.agg(c.agg);
            out.fprintf(format_args!("weight {} maxpkt {} ", g.class_weight, g.lmax));
        }
    }

    /// `qfq_tcf_block`: the qdisc's block; classes have none (EINVAL, no message).
    fn block(&self, minor: u32) -> Option<&Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        (minor == 0).then_some(&mut self.block)
    }
    /// `qfq_bind_tcf`: the class named, wherever the filter is.
    fn bind_tcf(&self, _base: u32, classid: u32) -> Option<u32> {
        self.find(classid)
    }
    /// `qfq_bind_tcf`'s `qdisc_class_get`.
    fn bind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find(classid) {
            self.cl_mut(m).filter_cnt += 1;
        }
    }
    /// `qfq_unbind_tcf`.
    fn unbind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find(classid) {
            let c = self.cl_mut(m);
            c.filter_cnt = c.filter_cnt.saturating_sub(1);
        }
    }
    /// `qfq_dump_class` sets `tcm_parent` to TC_H_ROOT.
    fn class_parent(&self, _minor: u32) -> Option<u32> {
        Some(TC_H_ROOT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{argv, dev, held, t};

    const H: u32 = 0x1_0000;

    fn class(q: &mut Node<Qfq>, minor: u32, opts: &str) -> Result<Option<String>, TcError> {
        let o = parse_class(&mut Args::new(&argv(opts)))?;
        let exists = q.get(minor).is_some();
        q.change_class(H | minor, H, exists, Some(&Opts::new(o)), &dev(), t(0))
    }

    fn qfq(classes: &[(u32, &str)]) -> Node<Qfq> {
        let mut q = held(Qfq::new(H, &dev()));
        for &(m, o) in classes {
            class(&mut q, m, o).unwrap();
        }
        q
    }

    fn pkt(id: u64, len: u32, minor: u32) -> Packet {
        Packet::new(id, len).with_priority(H | minor)
    }

    fn weight_lmax(q: &Node<Qfq>, m: u32) -> (u32, u32) {
        let g = q.agg(q.cl(m).agg);
        (g.class_weight, g.lmax)
    }

    #[test]
    fn parsers_match_tc() {
        let p = |s: &str| parse(&mut Args::new(&argv(s)));
        assert_eq!(p(""), Ok(()));
        assert_eq!(p("he").unwrap_err().msg, "Usage: ... qfq\n");
        assert_eq!(p("weight 1").unwrap_err().msg, "What is \"weight\"?\nUsage: ... qfq\n");
        let c = |s: &str| parse_class(&mut Args::new(&argv(s)));
        assert_eq!(c("w 7 max 3000").unwrap(), QfqClassOpt { weight: Some(7), lmax: Some(3000) });
        assert_eq!(c("").unwrap(), QfqClassOpt::default());
        assert_eq!(c("weight x").unwrap_err().msg, "Illegal \"weight\"\n");
        assert_eq!(c("maxpkt -1").unwrap_err().msg, "Illegal \"maxpkt\"\n");
        assert_eq!(c("foo").unwrap_err().msg, "What is \"foo\"?\nUsage: ... qfq weight NUMBER maxpkt BYTES\n");
        assert_eq!(c("help").unwrap_err().msg, "Usage: ... qfq weight NUMBER maxpkt BYTES\n");
    }

    #[test]
    fn class_defaults_ranges_and_a_change_resetting_what_it_omits() {
        let mut q = qfq(&[(1, ""), (2, "weight 10 maxpkt 512")]);
        assert_eq!(weight_lmax(&q, 1), (1, 1514));
        assert_eq!(weight_lmax(&q, 2), (10, 512));
        for bad in ["weight 0", "weight 1025", "maxpkt 511", "maxpkt 65537"] {
            assert_eq!(class(&mut q, 3, bad).unwrap_err(), TcError::kernel("integer out of range"), "{bad}");
        }
        // A change names a weight only: maxpkt goes back to psched_mtu.
        class(&mut q, 2, "weight 20").unwrap();
        assert_eq!(weight_lmax(&q, 2), (20, 1514));
        assert_eq!(q.wsum, 21);
        let e = q.change_class(H | 4, H, false, None, &dev(), t(0)).unwrap_err();
        assert_eq!(e.msg, "Missing required attribute type 2\nError: sch_qfq: missing options.\n");
        let mut small = dev();
        small.mtu = 256;
        let o = Opts::new(QfqClassOpt::default());
        let e = q.change_class(H | 4, H, false, Some(&o), &small, t(0)).unwrap_err();
        assert_eq!(e.msg, "Error: sch_qfq: MTU size out of bounds for qfq.\n");
    }

    #[test]
    fn eight_classes_share_an_aggregate_and_the_weight_sum_is_bounded() {
        let mut q = qfq(&[]);
        for m in 1..=9 {
            class(&mut q, m, "weight 2").unwrap();
        }
        let (a, b) = (q.cl(1).agg, q.cl(9).agg);
        assert_eq!((q.agg(a).num_classes, q.agg(b).num_classes), (8, 1));
        assert!((2..=8).all(|m| q.cl(m).agg == a));
        // 8 classes of weight 2 and 1514 bytes: budget 12112, weight 16.
        assert_eq!((q.agg(a).budgetmax, q.agg(a).inv_w), (12112, (ONE_FP / 16) as u32));
        assert_eq!(q.wsum, 18);
        // Deleting one makes room: the next class joins the first aggregate again
        // (the non-full list's head).
        q.delete_class(3, t(0)).unwrap();
        class(&mut q, 10, "weight 2").unwrap();
        assert_eq!(q.cl(10).agg, a);
        // 63 classes of 1024 more would pass 65536.
        let mut q = qfq(&[]);
        for m in 1..=64 {
            class(&mut q, m, "weight 1024").unwrap();
        }
        let e = class(&mut q, 65, "weight 1").unwrap_err();
        assert_eq!(e.msg, "Error: sch_qfq: total weight out of range (1 + 65536)\n.\n");
        class(&mut q, 64, "weight 1000").unwrap();
        assert_eq!(q.wsum, 65536 - 24);
    }

    #[test]
    fn group_index_follows_budget_over_weight() {
        // min_slot_shift = 30 + 16 + 3 - 24 = 25 with txqueuelen 1000.
        let q = qfq(&[]);
        assert_eq!(q.min_slot_shift, 25);
        assert_eq!(calc_index((ONE_FP) as u32, 1000, 25), 15);
        assert_eq!(calc_index((ONE_FP / 2) as u32, 1000, 25), 14);
        // The largest budget at weight 1, 8 × 65536 = 2^19: exactly 2^24 slots, group 24.
        assert_eq!(calc_index(ONE_FP as u32, 8 << 16, 25), 24);
        // 1 byte at weight 1 is 2^30 = 2^5 slots of group 0: an exact power, group 5.
        assert_eq!(calc_index(ONE_FP as u32, 1, 25), 5);
        assert_eq!(calc_index(ONE_FP as u32, 1, 31), 0);
    }

    #[test]
    fn service_order_by_virtual_time() {
        // A (weight 1) and B (weight 2), maxpkt 1000, three 1000-byte packets each.
        // A is served first (it arrived to an idle qdisc: V = S = 0) and uses its
        // budget; then B (group 14, F 2^39·2) goes before A (group 15, F 2^40·2) three
        // times: each time B's requeued S still rounds to an eligible slot whose F is
        // below A's group's; A finishes once B is empty.
        let mut q = qfq(&[(1, "weight 1 maxpkt 1000"), (2, "weight 2 maxpkt 1000")]);
        for i in 0..3 {
            assert_eq!(q.enqueue(pkt(10 + i, 1000, 1), t(0)), Enqueued::Success);
        }
        for i in 0..3 {
            assert_eq!(q.enqueue(pkt(20 + i, 1000, 2), t(0)), Enqueued::Success);
        }
        let (ga, gb) = (q.grp_of(q.cl(1).agg), q.grp_of(q.cl(2).agg));
        assert_eq!((ga, gb), (15, 14));
        let mut ids = vec![];
        let mut vs = vec![];
        while let Some(p) = q.dequeue(t(1)).packet() {
            ids.push(p.id);
            vs.push(q.v);
        }
        assert_eq!(ids, vec![10, 20, 21, 22, 11, 12]);
        // iwsum = 2^30 / 3 = 357913941; V grows by 1000 · iwsum per packet.
        assert_eq!(q.iwsum, 357_913_941);
        assert_eq!(vs, (1..=6).map(|k| k * 357_913_941_000u64).collect::<Vec<_>>());
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.packets, s.bytes), (0, 0, 6, 6000));
        assert!(q.dequeue(t(2)).packet().is_none());
        assert_eq!(q.in_serv, None);
    }

    #[test]
    fn drr_inside_an_aggregate() {
        // Two classes of one aggregate (same weight and maxpkt): a 600-byte class and
        // a 300-byte class with quantum 1000 alternate by deficit.
        let mut q = qfq(&[(1, "maxpkt 1000"), (2, "maxpkt 1000")]);
        assert_eq!(q.cl(1).agg, q.cl(2).agg);
        for i in 0..4 {
            q.enqueue(pkt(10 + i, 600, 1), t(0));
            q.enqueue(pkt(20 + i, 300, 2), t(0));
        }
        let ids: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect();
        // 1: 1000 → 400 (< 600: +1000, tail); 2: 1000 → 700 → 400 → 100 (< 300: +1000,
        // tail); 1: 1400 → 800 → 200 (tail, 1200); 2: 1100 → 800 (empty);
        // 1: 1200 → 600 (empty). The aggregate's budget (2000) is recharged between.
        assert_eq!(ids, vec![10, 20, 21, 22, 11, 12, 23, 13]);
    }

    #[test]
    fn a_long_packet_raises_maxpkt_and_an_oversized_one_is_dropped() {
        let mut q = qfq(&[(1, "weight 10 maxpkt 512")]);
        assert_eq!(q.enqueue(pkt(1, 1000, 1), t(0)), Enqueued::Success);
        assert_eq!(weight_lmax(&q, 1), (10, 1000));
        assert_eq!(q.wsum, 10);
        assert_eq!(q.enqueue(pkt(2, 70_000, 1), t(0)), Enqueued::Dropped);
        let s = q.stats();
        assert_eq!((s.qlen, s.drops), (1, 1));
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
        let cs = q.class_stats(1).unwrap();
        assert_eq!((cs.packets, cs.bytes, cs.qlen), (1, 1000, 0));
    }

    #[test]
    fn unclassified_drops_delete_purges_and_filters_pin_classes() {
        let mut q = qfq(&[(1, ""), (2, "")]);
        assert_eq!(q.enqueue(Packet::new(1, 100), t(0)), Enqueued::Dropped);
        assert_eq!(q.enqueue(pkt(2, 100, 7), t(0)), Enqueued::Dropped);
        assert_eq!(q.stats().drops, 2);
        q.enqueue(pkt(3, 300, 1), t(0));
        q.enqueue(pkt(4, 200, 2), t(0));
        q.delete_class(1, t(0)).unwrap();
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops), (1, 200, 3));
        assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 300));
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 4);
        q.bind_filter(H | 2);
        assert_eq!(q.delete_class(2, t(0)).unwrap_err().msg, "Error: sch_qfq: QFQ class in use.\n");
        q.unbind_filter(H | 2);
        q.delete_class(2, t(0)).unwrap();
        assert_eq!((q.wsum, q.aggs.iter().flatten().count()), (0, 0));
        assert_eq!(q.delete_class(9, t(0)).unwrap_err(), TcError::errno(Errno::ENOENT));
    }

    #[test]
    fn reset_and_graft_deschedule() {
        let mut q = qfq(&[(1, ""), (2, "weight 3")]);
        q.enqueue(pkt(1, 500, 1), t(0));
        q.enqueue(pkt(2, 500, 2), t(0));
        let old = q.graft(2, None, &dev()).unwrap().unwrap();
        assert_eq!(old.stats().qlen, 1);
        assert!(!q.cl(2).active);
        q.reset(t(0));
        assert!(q.classes.iter().flatten().all(|c| !c.active && c.leaf.stats().qlen == 0));
        assert_eq!((q.in_serv, q.bitmaps), (None, [0; 4]));
        q.enqueue(pkt(3, 500, 2), t(1));
        assert_eq!(q.dequeue(t(1)).packet().unwrap().id, 3);
    }

    #[test]
    fn class_dump_is_tc_fprintf() {
        let q = qfq(&[(1, "weight 100 maxpkt 2000")]);
        for mut o in [Out::text(), Out::json(false)] {
            q.dump_class(1, &mut o);
            assert_eq!(o.into_string(), "weight 100 maxpkt 2000 ");
        }
    }
}
