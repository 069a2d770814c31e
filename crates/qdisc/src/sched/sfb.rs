//! sfb — Stochastic Fair Blue. Mirrors net/sched/sch_sfb.c (Linux 6.12) and
//! tc/q_sfb.c (iproute2 6.15); §28 of docs/kernel-notes.md.
//!
//! Theory (Feng, Kandlur, Saha, Shin: "Blue", 1999, with the SFB extension): a
//! flow's 32-bit hash is cut into eight 4-bit digits, each naming one of 16 bins on
//! its level (8 × 16 virtual queues). A bin counts the packets of every flow hashing
//! to it and carries a marking probability `p_mark` (Q0.16): raised by `increment`
//! when an arriving packet finds the bin at `target` (`bin_size`) or more, lowered by
//! `decrement` when it finds it empty. A packet is marked (ECN) or dropped with the
//! *smallest* probability of its eight bins, so a well-behaved flow sharing one bin
//! with a hog escapes through its other bins; a flow whose every bin is at 1.0 is
//! "inelastic" and only gets `penalty_rate` packets/s (burst `penalty_burst`). A
//! packet whose every bin already holds `max` packets is dropped (bucketdrop); the
//! qdisc as a whole holds `limit` packets in its child (a pfifo made at each change).
//! Every `rehash` the hash key changes: for the last `db` before that the packets
//! are also counted in the bins of the next key ("double buffering"), which then
//! take over warmed up.
//!
//! Differences from the kernel, all deliberate:
//! * **Hash**: `skb_get_hash_perturb` and `siphash_1u32(salt)` are sfq's SipHash
//!   stand-ins ([`super::sfq`]), keyed from a seeded generator, as is
//!   `get_random_u16`: same seed ⇒ same bins and marks.
//! * **The two hashes a packet carries** live where the kernel keeps them, in the
//!   qdisc's private control block (`sfb_skb_cb` in `qdisc_skb_cb(skb)->data`), which
//!   here is [`Packet::enqueued_at`]: a child that keeps its own time stamp there
//!   (codel, pie, fq_codel…) overwrites them, as the kernel's children overwrite the
//!   kernel's, and the dequeue then decrements the bins the overwritten words name.
//! * **Jiffies** are the passed-in time at HZ 250 ([`crate::time::HZ`]).

use crate::classify::{Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_make, Child, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch,
};
use crate::sched::fifo::{fifo_create_dflt, FifoKind};
use crate::sched::noqueue::Noop;
use crate::sched::red::scan_lg;
use crate::sched::sfq::{default_seed, flow_hash, siphash24_u32, SplitMix64};
use crate::stats::Stats;
use crate::tc::units::{c_double_to_u32, fmt_g, fmt_time, get_u32};
use crate::tc::{Args, Errno, Out, TcError};
use crate::time::{jiffies_to_msecs, msecs_to_jiffies, time_after, Instant, HZ};

/// SFB_BUCKET_SHIFT: 4 bits of the hash per level.
const BUCKET_SHIFT: u32 = 4;
/// SFB_NUMBUCKETS: bins per level.
const NUMBUCKETS: usize = 1 << BUCKET_SHIFT;
const BUCKET_MASK: u32 = NUMBUCKETS as u32 - 1;
/// SFB_LEVELS: 32 / 4.
const LEVELS: usize = 32 / BUCKET_SHIFT as usize;
/// SFB_MAX_PROB: probabilities are Q0.16, 0xFFFF standing for (almost) 1.
pub const SFB_MAX_PROB: u32 = 0xFFFF;

/// `struct tc_sfb_qopt` (TCA_SFB_PARMS): times in ms, probabilities Q0.16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SfbOpt {
    pub rehash_interval: u32,
    pub warmup_time: u32,
    pub limit: u32,
    pub max: u32,
    pub bin_size: u32,
    pub increment: u32,
    pub decrement: u32,
    pub penalty_rate: u32,
    pub penalty_burst: u32,
}

/// `sfb_default_ops`: the kernel's defaults when no options come (a default qdisc).
/// tc always sends its own, which differ in `increment` and `decrement`.
pub const KERNEL_DEFAULTS: SfbOpt = SfbOpt {
    rehash_interval: 600 * 1000,
    warmup_time: 60 * 1000,
    limit: 0,
    max: 25,
    bin_size: 20,
    increment: (SFB_MAX_PROB + 500) / 1000,
    decrement: (SFB_MAX_PROB + 3000) / 6000,
    penalty_rate: 10,
    penalty_burst: 20,
};

/// The counters of `struct tc_sfb_xstats` that sfb keeps (`q->stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SfbStats {
    pub earlydrop: u32,
    pub penaltydrop: u32,
    pub bucketdrop: u32,
    pub queuedrop: u32,
    pub childdrop: u32,
    pub marked: u32,
}

/// `struct sfb_bucket`: a virtual queue.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    qlen: u16,
    p_mark: u16,
}

/// `struct sfb_bins`: one hash key and its 8 × 16 bins.
#[derive(Clone, Debug, Default)]
struct Bins {
    perturbation: (u64, u64),
    bins: [[Bucket; NUMBUCKETS]; LEVELS],
}

impl Bins {
    /// Count a queued packet in its bins (`increment_one_qlen`).
    fn add(&mut self, hash: u32) {
        self.each(hash, |b| b.qlen = b.qlen.saturating_add(1));
    }
    /// `decrement_one_qlen`.
    fn remove(&mut self, hash: u32) {
        self.each(hash, |b| b.qlen = b.qlen.saturating_sub(1));
    }
    /// The bin of each level the hash names, level 0 from the low digit.
    fn each(&mut self, mut hash: u32, mut f: impl FnMut(&mut Bucket)) {
        for level in &mut self.bins {
            f(&mut level[(hash & BUCKET_MASK) as usize]);
            hash >>= BUCKET_SHIFT;
        }
    }
}

pub struct Sfb {
    handle: u32,
    /// The class's qdisc: the pfifo of the last change, a grafted one, or noop.
    child: Node,
    /// The qdisc's filters: their class minor salts the hash (`sfb_classify`).
    block: Block,
    /// Jiffies.
    rehash_interval: u64,
    warmup_time: u64,
    rehash_time: u64,
    token_time: u64,
    limit: u32,
    max: u32,
    bin_size: u32,
    increment: u32,
    decrement: u32,
    penalty_rate: u32,
    penalty_burst: u32,
    tokens_avail: u32,
    /// Which of `bins` is current.
    slot: usize,
    double_buffering: bool,
    bins: [Bins; 2],
    stats: SfbStats,
    rng: SplitMix64,
}

/// `sfb_init` takes the kernel's defaults without options (tc always sends some).
pub static OPS: Ops = Ops {
    id: "sfb",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Sfb::new(c.opts::<SfbOpt>()?, c.dev, c.handle, c.now))),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Sfb {
    /// `sfb_init`: class 1 starts at noop, then `sfb_change`.
    pub fn new(o: Option<&SfbOpt>, dev: &DevInfo, handle: u32, now: Instant) -> Sfb {
        let mut q = Sfb {
            handle,
            child: Noop::node(tc_h_make(handle, 1)),
            block: Block::new(handle),
            rehash_interval: 0,
            warmup_time: 0,
            rehash_time: 0,
            token_time: 0,
            limit: 0,
            max: 0,
            bin_size: 0,
            increment: 0,
            decrement: 0,
            penalty_rate: 0,
            penalty_burst: 0,
            tokens_avail: 0,
            slot: 0,
            double_buffering: false,
            bins: Default::default(),
            stats: SfbStats::default(),
            rng: SplitMix64(default_seed(handle)),
        };
        q.apply(&mut Sch::default(), o.unwrap_or(&KERNEL_DEFAULTS), dev, now);
        q
    }

    /// Re-seed the generator behind the hash keys and `get_random_u16` (and draw
    /// new keys).
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
        self.init_perturbation(0);
        self.init_perturbation(1);
    }

    /// `sfb_change`: a new pfifo child of `limit` packets (the old one purged), the
    /// parameters, and every bin cleared under fresh keys. Nothing is refused.
    fn apply(&mut self, sch: &mut Sch, o: &SfbOpt, dev: &DevInfo, now: Instant) {
        let limit = if o.limit == 0 { dev.tx_queue_len } else { o.limit };
        let new = fifo_create_dflt(FifoKind::Pfifo, limit, self.handle, dev);
        let mut old = std::mem::replace(&mut self.child, new);
        sch.child_purged(old.stats());
        old.reset(now);
        let j = now.jiffies();
        self.rehash_interval = msecs_to_jiffies(o.rehash_interval);
        self.warmup_time = msecs_to_jiffies(o.warmup_time);
        self.rehash_time = j;
        self.limit = limit;
        self.increment = o.increment;
        self.decrement = o.decrement;
        self.max = o.max;
        self.bin_size = o.bin_size;
        self.penalty_rate = o.penalty_rate;
        self.penalty_burst = o.penalty_burst;
        self.tokens_avail = o.penalty_burst;
        self.token_time = j;
        self.slot = 0;
        self.double_buffering = false;
        self.zero_all_buckets();
        self.init_perturbation(0);
        self.init_perturbation(1);
    }

    fn zero_all_buckets(&mut self) {
        for b in &mut self.bins {
            b.bins = Default::default();
        }
    }

    /// `sfb_init_perturbation`: a new random key for `slot`.
    fn init_perturbation(&mut self, slot: usize) {
        self.bins[slot].perturbation = (self.rng.next_u64(), self.rng.next_u64());
    }

    /// `sfb_swap_slot`: the current key is renewed and the other bins take over.
    fn swap_slot(&mut self) {
        self.init_perturbation(self.slot);
        self.slot ^= 1;
        self.double_buffering = false;
    }

    /// Raise or lower the probabilities of the bins of `hash` in `slot` as the
    /// arriving packet finds them; the smallest queue and probability seen.
    fn update_bins(&mut self, slot: usize, hash: u32) -> (u32, u32) {
        let (inc, dec, bin_size) = (self.increment, self.decrement, self.bin_size);
        let (mut minqlen, mut p_min) = (u32::MAX, u32::MAX);
        self.bins[slot].each(hash, |b| {
            if b.qlen == 0 {
                b.p_mark = (b.p_mark as u32).saturating_sub(dec) as u16;
            } else if b.qlen as u32 >= bin_size {
                b.p_mark = (b.p_mark as u32 + inc).min(SFB_MAX_PROB) as u16;
            }
            minqlen = minqlen.min(b.qlen as u32);
            p_min = p_min.min(b.p_mark as u32);
        });
        (minqlen, p_min)
    }

    /// `sfb_rate_limit`: true when an inelastic flow's packet must go (no token).
    fn rate_limited(&mut self, j: u64) -> bool {
        if self.penalty_rate == 0 || self.penalty_burst == 0 {
            return true;
        }
        if self.tokens_avail < 1 {
            let age = (10 * HZ).min(j.wrapping_sub(self.token_time));
            self.tokens_avail = (age * self.penalty_rate as u64 / HZ) as u32;
            self.tokens_avail = self.tokens_avail.min(self.penalty_burst);
            self.token_time = j;
            if self.tokens_avail < 1 {
                return true;
            }
        }
        self.tokens_avail -= 1;
        false
    }

    /// The two bin hashes a queued packet carries (0: not counted in that slot).
    fn cb(pkt: &Packet) -> [u32; 2] {
        let v = pkt.enqueued_at.0;
        [v as u32, (v >> 32) as u32]
    }
    fn set_cb(pkt: &mut Packet, hashes: [u32; 2]) {
        pkt.enqueued_at = Instant(hashes[0] as u64 | (hashes[1] as u64) << 32);
    }

    /// Count a queued packet's hashes in their bins (`increment_qlen`), or take
    /// them out (`decrement_qlen`).
    fn account(&mut self, hashes: [u32; 2], add: bool) {
        for (slot, &h) in hashes.iter().enumerate() {
            if h != 0 {
                if add {
                    self.bins[slot].add(h);
                } else {
                    self.bins[slot].remove(h);
                }
            }
        }
    }

    /// `sfb_compute_qlen`: the largest bin, the largest and the mean probability of
    /// the current bins.
    fn compute_qlen(&self) -> (u32, u32, u32) {
        let (mut qlen, mut prob, mut total) = (0u32, 0u32, 0u32);
        for b in self.bins[self.slot].bins.iter().flatten() {
            qlen = qlen.max(b.qlen as u32);
            prob = prob.max(b.p_mark as u32);
            total += b.p_mark as u32;
        }
        (qlen, prob, total / (LEVELS * NUMBUCKETS) as u32)
    }

    pub fn sfb_stats(&self) -> SfbStats {
        self.stats
    }

    /// `qdisc_drop` of an enqueue: counted, NET_XMIT_CN.
    fn drop(sch: &mut Sch) -> Enqueued {
        sch.stats.dropped();
        Enqueued::Congested
    }
}

impl Qdisc for Sfb {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `sfb_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        if sch.stats.qlen >= self.limit {
            sch.stats.overlimit();
            self.stats.queuedrop += 1;
            return Self::drop(sch);
        }
        let j = now.jiffies();
        if self.rehash_interval > 0 {
            let limit = self.rehash_time.wrapping_add(self.rehash_interval);
            if time_after(j, limit) {
                self.swap_slot();
                self.rehash_time = j;
            } else if !self.double_buffering
                && self.warmup_time > 0
                && time_after(j, limit.wrapping_sub(self.warmup_time))
            {
                self.double_buffering = true;
            }
        }
        let mut slot = self.slot;
        let key = self.bins[slot].perturbation;
        let mut hash = if self.block.is_empty() {
            flow_hash(key, &pkt)
        } else {
            // sfb_classify: the class minor salts the hash; SHOT or no match drops
            // (counted), STOLEN consumes.
            match self.block.classify(&mut pkt, now) {
                Some(Verdict::Class(r)) => siphash24_u32(key.0, key.1, r.classid & 0xFFFF) as u32,
                Some(Verdict::Stolen) => return sch.unclassified(Enqueued::Stolen),
                Some(Verdict::Shot) | None => return sch.unclassified(Enqueued::Dropped),
            }
        };
        if hash == 0 {
            hash = 1;
        }
        let mut hashes = [0u32; 2];
        hashes[slot] = hash;
        let (minqlen, p_min) = self.update_bins(slot, hash);
        slot ^= 1;
        if minqlen >= self.max {
            sch.stats.overlimit();
            self.stats.bucketdrop += 1;
            return Self::drop(sch);
        }
        if p_min >= SFB_MAX_PROB {
            // An inelastic flow: counted in the warming bins too (by the flow hash
            // even with filters, as the kernel does), then rate limited.
            if self.double_buffering {
                let mut h = flow_hash(self.bins[slot].perturbation, &pkt);
                if h == 0 {
                    h = 1;
                }
                hashes[slot] = h;
                self.update_bins(slot, h);
            }
            if self.rate_limited(j) {
                sch.stats.overlimit();
                self.stats.penaltydrop += 1;
                return Self::drop(sch);
            }
        } else {
            let r = self.rng.next_u32() & SFB_MAX_PROB;
            if r < p_min {
                // Marking that much: an unresponsive flow or heavy congestion;
                // drop with the excess over one half, twice.
                if p_min > SFB_MAX_PROB / 2 && r < (p_min - SFB_MAX_PROB / 2) * 2 {
                    self.stats.earlydrop += 1;
                    return Self::drop(sch);
                }
                if pkt.set_ce() {
                    self.stats.marked += 1;
                } else {
                    self.stats.earlydrop += 1;
                    return Self::drop(sch);
                }
            }
        }
        Self::set_cb(&mut pkt, hashes);
        let r = Child::enqueue(&mut self.child, pkt, now, sch);
        if r == Enqueued::Success {
            self.account(hashes, true);
        } else if r.counts_as_drop() {
            self.stats.childdrop += 1;
        }
        r
    }

    /// `sfb_dequeue`: the bins the packet's control block names lose it.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let d = Child::dequeue(&mut self.child, now, sch);
        if let Dequeued::Packet(p) = &d {
            self.account(Self::cb(p), false);
        }
        d
    }

    /// `sfb_peek`: the child's own peek.
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        Child::peek(&mut self.child, now, sch)
    }

    /// `sfb_reset`.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.child.reset(now);
        self.slot = 0;
        self.double_buffering = false;
        self.zero_all_buckets();
        self.init_perturbation(0);
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.apply(sch, opts.of()?, dev, now);
        Ok(())
    }

    /// What `sfb_dump` sends, printed as q_sfb.c `sfb_print_opt` prints it (its µs
    /// products in `unsigned int`).
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let rehash = jiffies_to_msecs(self.rehash_interval).wrapping_mul(1000);
        let db = jiffies_to_msecs(self.warmup_time).wrapping_mul(1000);
        out.uint("rehash", format_args!("rehash {} ", fmt_time(rehash)), rehash as u64);
        out.uint("db", format_args!("db {} ", fmt_time(db)), db as u64);
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        out.uint("max", format_args!("max {}p ", self.max), self.max as u64);
        out.uint("target", format_args!("target {}p ", self.bin_size), self.bin_size as u64);
        let inc = fmt_g(self.increment as f64 / SFB_MAX_PROB as f64, 6);
        out.float("increment", format_args!("increment {inc} "), &inc);
        let dec = fmt_g(self.decrement as f64 / SFB_MAX_PROB as f64, 6);
        out.float("decrement", format_args!("decrement {dec} "), &dec);
        out.uint("penalty_rate", format_args!("penalty_rate {}pps ", self.penalty_rate), self.penalty_rate as u64);
        out.uint("penalty_burst", format_args!("penalty_burst {}p ", self.penalty_burst), self.penalty_burst as u64);
    }

    /// `sfb_dump_stats`, printed by `sfb_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let s = &self.stats;
        out.uint("earlydrop", format_args!("  earlydrop {}", s.earlydrop), s.earlydrop as u64);
        out.uint("penaltydrop", format_args!(" penaltydrop {}", s.penaltydrop), s.penaltydrop as u64);
        out.uint("bucketdrop", format_args!(" bucketdrop {}", s.bucketdrop), s.bucketdrop as u64);
        out.uint("queuedrop", format_args!(" queuedrop {}", s.queuedrop), s.queuedrop as u64);
        out.uint("childdrop", format_args!(" childdrop {}", s.childdrop), s.childdrop as u64);
        out.uint("marked", format_args!(" marked {}", s.marked), s.marked as u64);
        out.nl();
        let (maxqlen, maxprob, avgprob) = self.compute_qlen();
        out.uint("maxqlen", format_args!("  maxqlen {maxqlen}"), maxqlen as u64);
        let g = fmt_g(maxprob as f64 / SFB_MAX_PROB as f64, 6);
        out.float("maxprob", format_args!(" maxprob {g}"), &g);
        let g = fmt_g(avgprob as f64 / SFB_MAX_PROB as f64, 6);
        out.float("avgprob", format_args!(" avgprob {g}"), &g);
    }

    crate::classful!();

    /// A throttled child's wake-up time is ours.
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        Child::watchdog(&self.child)
    }
}

/// One class, `<handle>:1`, found by every classid (`sfb_find`), whose dump fails
/// (`sfb_dump_class`: ENOSYS) and which cannot be changed or deleted; filters attach
/// to the qdisc only.
impl Classful for Sfb {
    fn class_minors(&self) -> Vec<u32> {
        vec![1]
    }
    fn find(&self, _minor: u32) -> bool {
        true
    }
    fn leaf(&self, _minor: u32) -> Option<&Node> {
        Some(&self.child)
    }
    fn leaf_mut(&mut self, _minor: u32) -> Option<&mut Node> {
        Some(&mut self.child)
    }
    /// `sfb_graft`: None means noop.
    fn graft(
        &mut self,
        _sch: &mut Sch,
        _minor: u32,
        new: Option<Node>,
        _dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        let new = new.unwrap_or_else(|| Noop::node(tc_h_make(self.handle, 1)));
        Ok(Some(std::mem::replace(&mut self.child, new)))
    }
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
        Err(TcError::errno(Errno::ENOSYS))
    }
    fn delete_class(&mut self, _sch: &mut Sch, _minor: u32, _now: Instant) -> Result<(), TcError> {
        Err(TcError::errno(Errno::ENOSYS))
    }
    fn class_stats(&self, _minor: u32) -> Option<Stats> {
        None
    }
    fn class_dump_fails(&self) -> bool {
        true
    }
    /// `sfb_tcf_block`: the qdisc's block; the class has none.
    fn block(&self, minor: u32) -> Option<&Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        (minor == 0).then_some(&mut self.block)
    }
}

// ---- tc side: q_sfb.c ---------------------------------------------------------------

const USAGE: &str = "Usage: ... sfb [ rehash SECS ] [ db SECS ]
	    [ limit PACKETS ] [ max PACKETS ] [ target PACKETS ]
	    [ increment FLOAT ] [ decrement FLOAT ]
	    [ penalty_rate PPS ] [ penalty_burst PACKETS ]
";

/// q_sfb.c `get_prob`: a number in [0, 1] (strtod: a prefix will do) as Q0.16.
fn get_prob(s: &str) -> Option<u32> {
    let d = scan_lg(s)?;
    if d < 0.0 || d > 1.0 {
        return None;
    }
    Some(c_double_to_u32(d * SFB_MAX_PROB as f64 + 0.5))
}

/// `sfb_parse_opt`: keywords compared exactly; `max` and `target` derived from each
/// other when left 0.
pub fn parse(a: &mut Args) -> Result<SfbOpt, TcError> {
    let mut o = SfbOpt {
        rehash_interval: 600 * 1000,
        warmup_time: 60 * 1000,
        limit: 0,
        max: 0,
        bin_size: 0,
        increment: (SFB_MAX_PROB + 1000) / 2000,
        decrement: (SFB_MAX_PROB + 10000) / 20000,
        penalty_rate: 10,
        penalty_burst: 20,
    };
    while let Some(w) = a.next() {
        let (field, prob): (&mut u32, bool) = match w {
            "rehash" => (&mut o.rehash_interval, false),
            "db" => (&mut o.warmup_time, false),
            "limit" => (&mut o.limit, false),
            "max" => (&mut o.max, false),
            "target" => (&mut o.bin_size, false),
            "increment" => (&mut o.increment, true),
            "decrement" => (&mut o.decrement, true),
            "penalty_rate" => (&mut o.penalty_rate, false),
            "penalty_burst" => (&mut o.penalty_burst, false),
            _ => return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}"))),
        };
        let v = a.value()?;
        *field =
            if prob { get_prob(v) } else { get_u32(v) }.ok_or_else(|| TcError::tc(format!("Illegal \"{w}\"\n")))?;
    }
    if o.max == 0 {
        o.max = if o.bin_size >= 1 { (o.bin_size * 5 + 1) / 4 } else { 25 };
    }
    if o.bin_size == 0 {
        o.bin_size = (o.max * 4 + 3) / 5;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Classful;
    use crate::testing::{argv, dev, held, ms, t};

    fn p(s: &str) -> Result<SfbOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn sfb(s: &str) -> Node<Sfb> {
        held(Sfb::new(Some(&p(s).unwrap()), &dev(), 0x10000, t(0)))
    }
    fn flow(i: u64, hash: u32) -> Packet {
        Packet::new(i, 100).with_hash(hash)
    }
    /// The current slot's bins of a packet, level 0 first.
    fn bins_of(q: &Node<Sfb>, pkt: &Packet) -> Vec<Bucket> {
        let b = &q.q.bins[q.q.slot];
        let mut h = flow_hash(b.perturbation, pkt);
        (0..LEVELS)
            .map(|l| {
                let x = b.bins[l][(h & BUCKET_MASK) as usize];
                h >>= BUCKET_SHIFT;
                x
            })
            .collect()
    }

    #[test]
    fn tc_derives_max_and_target_from_each_other() {
        let o = p("").unwrap();
        assert_eq!((o.max, o.bin_size, o.increment, o.decrement), (25, 20, 33, 3));
        assert_eq!((p("target 8").unwrap().max, p("max 7").unwrap().bin_size), (10, 6));
        assert_eq!(p("increment 0.5").unwrap().increment, 32768);
        assert_eq!(p("decrement 0.5x").unwrap().decrement, 32768, "strtod: a prefix will do");
        assert_eq!(p("increment 1.5").unwrap_err(), TcError::tc("Illegal \"increment\"\n"));
        assert_eq!(p("db -1").unwrap_err(), TcError::tc("Illegal \"db\"\n"));
        assert_eq!(p("limit").unwrap_err(), TcError::incomplete());
        assert!(p("Limit 5").unwrap_err().msg.starts_with("What is \"Limit\"?\nUsage: ... sfb"));
    }

    #[test]
    fn times_go_through_jiffies() {
        assert_eq!((msecs_to_jiffies(1), msecs_to_jiffies(5), msecs_to_jiffies(600_000)), (1, 2, 150_000));
        assert_eq!(jiffies_to_msecs(msecs_to_jiffies(5)), 8);
        // 2^32 − 1 ms is negative as an int: saturated, and wrapped on the way back.
        assert_eq!(jiffies_to_msecs(msecs_to_jiffies(u32::MAX)), 4_294_967_288);
    }

    /// One flow (one hash: the same bin on every level) with target 2: each arrival
    /// that finds 2 or more queued raises the probability by `increment`; at `max`
    /// queued every bin is full and the packet is a bucket drop.
    #[test]
    fn bins_count_a_flow_and_raise_its_probability() {
        let mut q = sfb("limit 100 target 2 max 4 increment 0.25");
        let inc = 16384;
        let mut rets = Vec::new();
        for i in 0..5 {
            rets.push(q.enqueue(flow(i, 0x1234_5678), ms(1)));
        }
        use Enqueued::*;
        // Arrivals find 0, 1, 2, 3 queued; the 3rd and 4th raise p to 0.25 then 0.5,
        // which the deterministic draw may turn into marks (not ECT: early drops).
        let s = q.q.sfb_stats();
        let queued = rets.iter().filter(|r| **r == Success).count() as u32;
        assert_eq!(queued + s.earlydrop + s.bucketdrop, 5);
        assert_eq!(q.stats().qlen, queued);
        for b in bins_of(&q, &flow(0, 0x1234_5678)) {
            assert_eq!(b.qlen as u32, queued, "each of the flow's bins counts the queue");
            assert!(b.p_mark as u32 >= inc);
        }
        // Dequeueing takes them out of the bins again.
        while q.dequeue(ms(2)).packet().is_some() {}
        assert_eq!(q.q.bins[q.q.slot].bins.iter().flatten().map(|b| b.qlen as u32).sum::<u32>(), 0);
    }

    /// The hard limits: `limit` packets in all (queuedrop), `max` in every bin of a
    /// flow (bucketdrop), each counted as an overlimit and a drop.
    #[test]
    fn queue_and_bucket_drops() {
        let mut q = sfb("limit 3 target 100 max 100 increment 0");
        for i in 0..4 {
            q.enqueue(flow(i, 7), ms(1));
        }
        assert_eq!(q.q.sfb_stats().queuedrop, 1);
        assert_eq!((q.stats().qlen, q.stats().drops, q.stats().overlimits), (3, 1, 1));
        let mut q = sfb("limit 100 target 100 max 2 increment 0");
        let rets: Vec<Enqueued> = (0..3).map(|i| q.enqueue(flow(i, 7), ms(1))).collect();
        assert_eq!(rets, [Enqueued::Success, Enqueued::Success, Enqueued::Congested]);
        assert_eq!(q.q.sfb_stats().bucketdrop, 1);
        // Another flow sharing no bin with it still gets in.
        assert_eq!(q.enqueue(flow(9, 0x1111_1111 * 9), ms(1)), Enqueued::Success);
        assert_eq!(q.stats().qlen, 3);
    }

    /// A flow at probability 1 is inelastic: `penalty_burst` packets, then
    /// `penalty_rate` per second from the token clock (jiffies).
    #[test]
    fn inelastic_flows_are_rate_limited() {
        let mut q = sfb("limit 1000 target 1 max 1000 increment 1 penalty_rate 250 penalty_burst 2");
        // Two packets bring every bin of the flow to p = 1.
        q.enqueue(flow(0, 42), ms(0));
        q.enqueue(flow(1, 42), ms(0));
        assert!(bins_of(&q, &flow(0, 42)).iter().all(|b| b.p_mark == 0xFFFF));
        // The second packet was already inelastic and took one of the burst's 2
        // tokens; the other goes to the next, then nothing at the same jiffy.
        let rets: Vec<Enqueued> = (2..6).map(|i| q.enqueue(flow(i, 42), ms(0))).collect();
        use Enqueued::*;
        assert_eq!(rets, [Success, Congested, Congested, Congested]);
        assert_eq!(q.stats().qlen, 3);
        assert_eq!(q.q.sfb_stats().penaltydrop, 3);
        // 8 ms = 2 jiffies later at 250 pps: 2 jiffies × 250 / 250 = 2 tokens.
        let rets: Vec<Enqueued> = (6..9).map(|i| q.enqueue(flow(i, 42), ms(8))).collect();
        assert_eq!(rets, [Success, Success, Congested]);
        // No penalty rate: every inelastic packet goes.
        let mut q = sfb("limit 1000 target 1 max 1000 increment 1 penalty_rate 0");
        q.enqueue(flow(0, 42), ms(0));
        q.enqueue(flow(1, 42), ms(0));
        assert_eq!(q.enqueue(flow(2, 42), ms(0)), Congested);
    }

    /// ECT packets are marked where others would be dropped; a probability past one
    /// half drops some even so.
    fn ect(mut p: Packet) -> Packet {
        p.tos = 0x02;
        p
    }

    #[test]
    fn ecn_capable_packets_are_marked() {
        let mut q = sfb("limit 1000 target 1 max 1000 increment 0.2 penalty_rate 0");
        let mut n = 0;
        for i in 0..200 {
            let r = q.enqueue(ect(flow(i, 5)), ms(0));
            n += (r == Enqueued::Success) as u32;
            q.dequeue(ms(0));
            q.enqueue(ect(flow(1000 + i, 5)), ms(0));
        }
        let s = q.q.sfb_stats();
        assert!(s.marked > 0, "{s:?}");
        assert!(n > 0);
        assert_eq!(q.stats().drops, (s.earlydrop + s.penaltydrop + s.bucketdrop + s.queuedrop));
    }

    /// Conservation over random traffic: in = out + drops + queued, and the bins of
    /// the current and warming slots hold exactly what is queued once drained.
    #[test]
    fn conservation_with_rehash_and_double_buffering() {
        let mut q = sfb("limit 50 target 3 max 6 rehash 100 db 40");
        let mut x = 1u32;
        let (mut sent, mut offered) = (0u64, 0u64);
        for i in 0..5000u64 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let now = t(i * 100_000);
            if x % 3 != 0 {
                offered += 1;
                q.enqueue(flow(i, x >> 24), now);
            } else if q.dequeue(now).packet().is_some() {
                sent += 1;
            }
        }
        let s = q.stats().clone();
        assert_eq!(offered, sent + s.drops as u64 + s.qlen as u64);
        while q.dequeue(t(1_000_000_000)).packet().is_some() {}
        for b in &q.q.bins {
            assert!(b.bins.iter().flatten().all(|b| b.qlen == 0));
        }
    }

    #[test]
    fn one_class_that_cannot_be_changed_or_deleted() {
        let mut q = sfb("limit 7");
        assert!(q.q.find(9) && q.q.class_dump_fails());
        assert_eq!(q.q.leaf(1).unwrap().stats().qlen, 0);
        let mut sch = Sch::default();
        assert_eq!(q.q.delete_class(&mut sch, 1, t(0)), Err(TcError::errno(Errno::ENOSYS)));
        let old = q.q.graft(&mut sch, 1, None, &dev()).unwrap().unwrap();
        assert_eq!(old.kind(), "pfifo");
        assert_eq!(q.q.leaf(1).unwrap().kind(), "noop");
    }
}
