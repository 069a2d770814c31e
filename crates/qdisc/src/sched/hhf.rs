//! hhf — Heavy-Hitter Filter. Mirrors net/sched/sch_hhf.c (Linux 6.12) and
//! tc/q_hhf.c (iproute2 6.15); §29 of docs/kernel-notes.md.
//!
//! Theory (Estan and Varghese's multi-stage filter, SIGCOMM 2002): every flow starts
//! as a non-heavy-hitter. Its keyed hash picks one counter in each of four arrays of
//! 1024 (three 10-bit slices of the hash, the fourth their XOR with the top bits);
//! a packet adds its length to them conservatively (each counter rises at most to
//! the smallest one plus the length). When even the smallest would pass
//! `admit_bytes`, the flow is a heavy hitter: it gets an entry in an exact-match
//! table of 1024 chains (at most `hh_limit` entries), and from then on its packets
//! skip the filter ("shielding") and go to the heavy-hitter bucket, until it has
//! been idle for `evict_timeout`. The counters are forgotten every `reset_timeout`.
//! Two buckets — heavy hitters and the rest — are served by weighted deficit round
//! robin with fq_codel's new/old lists: the rest with `non_hh_weight` quanta and as a
//! "new" bucket whenever it wakes up, the heavy hitters with one quantum, always
//! "old". At `limit` packets the head of the heavy-hitter bucket is dropped (of the
//! other if that one is empty).
//!
//! Differences from the kernel, all deliberate:
//! * **Hash**: `skb_get_hash_perturb` is sfq's SipHash stand-in ([`super::sfq`]),
//!   keyed from a generator seeded per qdisc (the handle): same seed ⇒ same arrays.
//! * **Jiffies** are the passed-in time at HZ 250 ([`crate::time::HZ`]), kept in
//!   32 bits as `hhf_time_stamp` does.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{dequeue_internal, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::sfq::{default_seed, flow_hash, SplitMix64};
use crate::tc::units::{fmt_time, get_time, get_u32};
use crate::tc::{Args, Out, TcError};
use crate::time::{jiffies_to_usecs, usecs_to_jiffies, Instant, HZ};

/// HH_FLOWS_CNT: chains of the exact-match table.
const HH_FLOWS_CNT: usize = 1024;
/// HHF_ARRAYS_CNT, HHF_ARRAYS_LEN: the multi-stage filter.
const HHF_ARRAYS_CNT: usize = 4;
const HHF_ARRAYS_LEN: usize = 1024;
const HHF_BIT_MASK_LEN: u32 = 10;
const HHF_BIT_MASK: u32 = 0x3FF;
/// WDRR_BUCKET_FOR_HH, WDRR_BUCKET_FOR_NON_HH.
const HH: usize = 0;
const NON_HH: usize = 1;

/// What tc sends: only the values given and non-zero (each its own attribute).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HhfOpt {
    /// TCA_HHF_BACKLOG_LIMIT, packets.
    pub limit: Option<u32>,
    pub quantum: Option<u32>,
    pub hh_limit: Option<u32>,
    /// µs.
    pub reset_timeout: Option<u32>,
    pub admit_bytes: Option<u32>,
    /// µs.
    pub evict_timeout: Option<u32>,
    pub non_hh_weight: Option<u32>,
}

/// `struct tc_hhf_xstats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HhfStats {
    pub drop_overlimit: u32,
    pub hh_overlimit: u32,
    pub hh_tot_count: u32,
    pub hh_cur_count: u32,
}

/// `struct hh_flow_state`.
#[derive(Clone, Copy, Debug)]
struct HhFlow {
    hash_id: u32,
    hit_timestamp: u32,
}

/// `struct wdrr_bucket`.
#[derive(Debug, Default)]
struct Bucket {
    q: VecDeque<Packet>,
    deficit: i32,
    /// On `new_buckets` or `old_buckets`.
    linked: bool,
}

/// `hhf_time_before`: 32-bit jiffies, wrap-safe.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

pub struct Hhf {
    limit: u32,
    quantum: u32,
    non_hh_weight: u32,
    hh_flows_limit: u32,
    /// Jiffies.
    reset_timeout: u32,
    evict_timeout: u32,
    admit_bytes: u32,
    perturbation: (u64, u64),
    buckets: [Bucket; 2],
    new_buckets: VecDeque<usize>,
    old_buckets: VecDeque<usize>,
    /// Table T.
    hh_flows: Vec<Vec<HhFlow>>,
    /// Filter F, with a valid bit per counter (a stale counter reads as 0).
    arrays: [[u32; HHF_ARRAYS_LEN]; HHF_ARRAYS_CNT],
    valid: [[bool; HHF_ARRAYS_LEN]; HHF_ARRAYS_CNT],
    arrays_reset_timestamp: u32,
    stats: HhfStats,
}

/// tc always sends TCA_OPTIONS (possibly empty); `hhf_change` wants it.
pub static OPS: Ops = Ops {
    id: "hhf",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Hhf::new(c.opts::<HhfOpt>()?, c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Hhf {
    /// `hhf_init`: the defaults (at most 2 × 1024 heavy hitters), then `hhf_change`
    /// with the options. (Upstream's later init sets the table's limit after the
    /// change; 6.12's keeps a given `hh_limit`, as goldens/kernel-6.12/hhf-params
    /// shows.)
    pub fn new(o: Option<&HhfOpt>, dev: &DevInfo, handle: u32, now: Instant) -> Result<Hhf, TcError> {
        let mut rng = SplitMix64(default_seed(handle));
        let mut quantum = dev.psched_mtu();
        if (quantum as i32) <= 0 || quantum as u64 * 2 > i32::MAX as u64 {
            quantum = 256;
        }
        let mut q = Hhf {
            limit: 1000,
            quantum,
            non_hh_weight: 2,
            hh_flows_limit: 2 * HH_FLOWS_CNT as u32,
            reset_timeout: (HZ / 25) as u32,
            evict_timeout: HZ as u32,
            admit_bytes: 131072,
            perturbation: (rng.next_u64(), rng.next_u64()),
            buckets: Default::default(),
            new_buckets: VecDeque::with_capacity(2),
            old_buckets: VecDeque::with_capacity(2),
            hh_flows: vec![Vec::new(); HH_FLOWS_CNT],
            arrays: [[0; HHF_ARRAYS_LEN]; HHF_ARRAYS_CNT],
            valid: [[false; HHF_ARRAYS_LEN]; HHF_ARRAYS_CNT],
            arrays_reset_timestamp: 0,
            stats: HhfStats::default(),
        };
        if let Some(o) = o {
            q.apply(&mut Sch::default(), o, now)?;
        }
        q.arrays_reset_timestamp = Self::stamp(now);
        Ok(q)
    }

    /// `hhf_time_stamp`: jiffies in 32 bits.
    fn stamp(now: Instant) -> u32 {
        now.jiffies() as u32
    }

    /// `hhf_change`: `hh_limit` at most 2048 and the quantum × weight product in
    /// (0, INT_MAX]; then the
    /// values given; a queue over a lowered limit is dequeued (as sent) to it.
    fn apply(&mut self, sch: &mut Sch, o: &HhfOpt, now: Instant) -> Result<(), TcError> {
        // The netlink policy (a 2025 stable fix, in 6.12.117): hh_limit within the
        // table's cap of 2 × 1024.
        if o.hh_limit.is_some_and(|l| l > 2 * HH_FLOWS_CNT as u32) {
            return Err(TcError::kernel("integer out of range"));
        }
        let quantum = o.quantum.unwrap_or(self.quantum);
        let weight = o.non_hh_weight.unwrap_or(self.non_hh_weight);
        let non_hh_quantum = quantum as u64 * weight as u64;
        if non_hh_quantum == 0 || non_hh_quantum > i32::MAX as u64 {
            return Err(TcError::invalid());
        }
        if let Some(l) = o.limit {
            self.limit = l;
        }
        self.quantum = quantum;
        self.non_hh_weight = weight;
        if let Some(l) = o.hh_limit {
            self.hh_flows_limit = l;
        }
        if let Some(us) = o.reset_timeout {
            self.reset_timeout = usecs_to_jiffies(us);
        }
        if let Some(b) = o.admit_bytes {
            self.admit_bytes = b;
        }
        if let Some(us) = o.evict_timeout {
            self.evict_timeout = usecs_to_jiffies(us);
        }
        let (qlen, backlog) = (sch.stats.qlen, sch.stats.backlog);
        while sch.stats.qlen > self.limit {
            let Some(p) = dequeue_internal(self, sch, now).packet() else { break };
            p.kfree_skb();
        }
        sch.reduce((qlen - sch.stats.qlen) as i32, backlog as i64 - sch.stats.backlog as i64);
        Ok(())
    }

    /// `seek_list`: the live entry of `hash` in its chain. Expired entries met on
    /// the way are freed, except the chain's last (kept for reuse).
    fn seek(&mut self, hash: u32, now: u32) -> Option<&mut HhFlow> {
        let chain = &mut self.hh_flows[(hash & HHF_BIT_MASK) as usize];
        let mut i = 0;
        while i < chain.len() {
            let f = chain[i];
            if before(f.hit_timestamp.wrapping_add(self.evict_timeout), now) {
                if i + 1 == chain.len() {
                    return None;
                }
                chain.remove(i);
                self.stats.hh_cur_count -= 1;
            } else if f.hash_id == hash {
                return Some(&mut chain[i]);
            } else {
                i += 1;
            }
        }
        None
    }

    /// `alloc_new_hh`: an expired entry of the chain, else a new one within
    /// `hh_limit` (else counted as an overlimit: None).
    fn alloc(&mut self, chain: usize, now: u32) -> Option<&mut HhFlow> {
        let evict = self.evict_timeout;
        let c = &mut self.hh_flows[chain];
        if let Some(i) = c.iter().position(|f| before(f.hit_timestamp.wrapping_add(evict), now)) {
            return Some(&mut c[i]);
        }
        if self.stats.hh_cur_count >= self.hh_flows_limit {
            self.stats.hh_overlimit += 1;
            return None;
        }
        self.stats.hh_cur_count += 1;
        c.push(HhFlow { hash_id: 0, hit_timestamp: 0 });
        c.last_mut()
    }

    /// `hhf_classify`: which bucket the packet goes to.
    fn classify(&mut self, pkt: &Packet, now: Instant) -> usize {
        let now = Self::stamp(now);
        if before(self.arrays_reset_timestamp.wrapping_add(self.reset_timeout), now) {
            self.valid = [[false; HHF_ARRAYS_LEN]; HHF_ARRAYS_CNT];
            self.arrays_reset_timestamp = now;
        }
        let hash = flow_hash(self.perturbation, pkt);
        if let Some(f) = self.seek(hash, now) {
            f.hit_timestamp = now;
            return HH;
        }
        // Three 10-bit slices, the fourth their XOR with what is left.
        let mut pos = [0usize; HHF_ARRAYS_CNT];
        let (mut tmp, mut xorsum) = (hash, 0u32);
        for p in pos.iter_mut().take(HHF_ARRAYS_CNT - 1) {
            *p = (tmp & HHF_BIT_MASK) as usize;
            xorsum ^= *p as u32;
            tmp >>= HHF_BIT_MASK_LEN;
        }
        pos[HHF_ARRAYS_CNT - 1] = (xorsum ^ tmp) as usize;
        let mut min = u32::MAX;
        for (i, &p) in pos.iter().enumerate() {
            if !self.valid[i][p] {
                self.arrays[i][p] = 0;
                self.valid[i][p] = true;
            }
            min = min.min(self.arrays[i][p].wrapping_add(pkt.len));
        }
        if min > self.admit_bytes {
            // A new heavy hitter; its bytes stay out of the counters (shielding).
            let Some(f) = self.alloc((hash & HHF_BIT_MASK) as usize, now) else { return NON_HH };
            *f = HhFlow { hash_id: hash, hit_timestamp: now };
            self.stats.hh_tot_count += 1;
            return HH;
        }
        for (i, &p) in pos.iter().enumerate() {
            self.arrays[i][p] = self.arrays[i][p].max(min);
        }
        NON_HH
    }

    fn weight(&self, b: usize) -> u32 {
        if b == HH {
            1
        } else {
            self.non_hh_weight
        }
    }

    /// `hhf_drop`: the head of the heavy hitters' bucket, else of the other; which
    /// bucket it tried.
    fn drop_one(&mut self, sch: &mut Sch) -> usize {
        let b = if self.buckets[HH].q.is_empty() { NON_HH } else { HH };
        if let Some(p) = self.buckets[b].q.pop_front() {
            sch.stats.unqueued(p.len);
            sch.stats.dropped();
            p.kfree_skb();
        }
        b
    }

    /// Forget the heavy hitters and the filter (`hhf_reset_classifier`).
    fn reset_classifier(&mut self, now: Instant) {
        for c in &mut self.hh_flows {
            c.clear();
        }
        self.stats.hh_cur_count = 0;
        self.valid = [[false; HHF_ARRAYS_LEN]; HHF_ARRAYS_CNT];
        self.arrays_reset_timestamp = Self::stamp(now);
    }

    pub fn hhf_stats(&self) -> HhfStats {
        self.stats
    }

    /// Packets queued in the heavy hitters' and the other bucket (tests).
    pub fn bucket_lens(&self) -> (usize, usize) {
        (self.buckets[HH].q.len(), self.buckets[NON_HH].q.len())
    }
}

impl Qdisc for Hhf {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `hhf_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        let idx = self.classify(&pkt, now);
        sch.stats.queued(pkt.len);
        self.buckets[idx].q.push_back(pkt);
        if !self.buckets[idx].linked {
            // As fq_codel's new flows: a waking non-HH bucket goes first.
            if idx == HH {
                self.old_buckets.push_back(idx);
            } else {
                self.new_buckets.push_back(idx);
            }
            let deficit = self.weight(idx).wrapping_mul(self.quantum) as i32;
            let b = &mut self.buckets[idx];
            b.linked = true;
            b.deficit = deficit;
        }
        if sch.stats.qlen <= self.limit {
            return Enqueued::Success;
        }
        let prev_backlog = sch.stats.backlog;
        self.stats.drop_overlimit += 1;
        if self.drop_one(sch) == idx {
            return Enqueued::Congested;
        }
        sch.reduce(1, prev_backlog as i64 - sch.stats.backlog as i64);
        Enqueued::Success
    }

    /// Mirrors `hhf_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, _now: Instant) -> Dequeued {
        loop {
            let from_new = !self.new_buckets.is_empty();
            let quanta = [self.quantum, self.weight(NON_HH).wrapping_mul(self.quantum)];
            let list = if from_new { &mut self.new_buckets } else { &mut self.old_buckets };
            let Some(&b) = list.front() else { return Dequeued::Empty };
            if self.buckets[b].deficit <= 0 {
                self.buckets[b].deficit += quanta[b] as i32;
                list.pop_front();
                self.old_buckets.push_back(b);
                continue;
            }
            let Some(p) = self.buckets[b].q.pop_front() else {
                // Empty: one pass through the old list first, to prevent starvation.
                list.pop_front();
                if from_new && !self.old_buckets.is_empty() {
                    self.old_buckets.push_back(b);
                } else {
                    self.buckets[b].linked = false;
                }
                continue;
            };
            sch.stats.unqueued(p.len);
            sch.stats.sent(&p);
            self.buckets[b].deficit -= p.len as i32;
            return Dequeued::Packet(p);
        }
    }

    /// `hhf_reset`: every packet dequeued (and counted as sent, as the kernel's
    /// `hhf_dequeue` does), then the classifier forgotten.
    fn reset(&mut self, sch: &mut Sch, now: Instant) {
        while self.dequeue(sch, now).packet().is_some() {}
        self.reset_classifier(now);
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.apply(sch, opts.of()?, now)
    }

    /// What `hhf_dump` sends (all seven), printed by q_hhf.c `hhf_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        out.size("quantum", "quantum ", self.quantum, " ");
        out.uint("hh_limit", format_args!("hh_limit {} ", self.hh_flows_limit), self.hh_flows_limit as u64);
        let reset = jiffies_to_usecs(self.reset_timeout as u64);
        out.uint("reset_timeout", format_args!("reset_timeout {} ", fmt_time(reset)), reset as u64);
        out.size("admit_bytes", "admit_bytes ", self.admit_bytes, " ");
        let evict = jiffies_to_usecs(self.evict_timeout as u64);
        out.uint("evict_timeout", format_args!("evict_timeout {} ", fmt_time(evict)), evict as u64);
        let w = self.non_hh_weight;
        out.uint("non_hh_weight", format_args!("non_hh_weight {w} "), w as u64);
    }

    /// `hhf_dump_stats`, printed by `hhf_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let s = &self.stats;
        out.uint("drop_overlimit", format_args!("  drop_overlimit {}", s.drop_overlimit), s.drop_overlimit as u64);
        out.uint("hh_overlimit", format_args!(" hh_overlimit {}", s.hh_overlimit), s.hh_overlimit as u64);
        out.uint("tot_hh", format_args!(" tot_hh {}", s.hh_tot_count), s.hh_tot_count as u64);
        out.uint("cur_hh", format_args!(" cur_hh {}", s.hh_cur_count), s.hh_cur_count as u64);
    }
}

// ---- tc side: q_hhf.c -----------------------------------------------------------------

const USAGE: &str = "Usage: ... hhf	[ limit PACKETS ] [ quantum BYTES]
		[ hh_limit NUMBER ]
		[ reset_timeout TIME ]
		[ admit_bytes BYTES ]
		[ evict_timeout TIME ]
		[ non_hh_weight NUMBER ]
";

/// `hhf_parse_opt`: exact keywords; counts with `get_unsigned` (any base), times
/// with `get_time`; a value of 0 is not sent (the kernel keeps its own).
pub fn parse(a: &mut Args) -> Result<HhfOpt, TcError> {
    let mut o = HhfOpt::default();
    while let Some(w) = a.next() {
        let (field, time): (&mut Option<u32>, bool) = match w {
            "limit" => (&mut o.limit, false),
            "quantum" => (&mut o.quantum, false),
            "hh_limit" => (&mut o.hh_limit, false),
            "reset_timeout" => (&mut o.reset_timeout, true),
            "admit_bytes" => (&mut o.admit_bytes, false),
            "evict_timeout" => (&mut o.evict_timeout, true),
            "non_hh_weight" => (&mut o.non_hh_weight, false),
            "help" => return Err(TcError::tc(USAGE)),
            _ => return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}"))),
        };
        let v = a.value()?;
        let v = if time { get_time(v) } else { get_u32(v) }.ok_or_else(|| TcError::tc(format!("Illegal \"{w}\"\n")))?;
        *field = (v != 0).then_some(v);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{argv, dev, held, ms, t};
    use crate::Node;

    fn p(s: &str) -> Result<HhfOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn hhf(s: &str) -> Node<Hhf> {
        held(Hhf::new(Some(&p(s).unwrap()), &dev(), 0x10000, t(0)).unwrap())
    }
    fn pkt(i: u64, flow: u32, len: u32) -> Packet {
        Packet::new(i, len).with_hash(flow)
    }

    #[test]
    fn tc_sends_only_what_is_given_and_not_zero() {
        assert_eq!(p("").unwrap(), HhfOpt::default());
        let o = p("limit 0 quantum 0x100 reset_timeout 20ms evict_timeout 2s").unwrap();
        assert_eq!(
            (o.limit, o.quantum, o.reset_timeout, o.evict_timeout),
            (None, Some(256), Some(20_000), Some(2_000_000))
        );
        assert_eq!(p("admit_bytes 1k").unwrap_err(), TcError::tc("Illegal \"admit_bytes\"\n"));
        assert_eq!(p("hh_limit").unwrap_err(), TcError::incomplete());
        assert_eq!(p("help").unwrap_err(), TcError::tc(USAGE));
        assert!(p("Limit 1").unwrap_err().msg.starts_with("What is \"Limit\"?\n"));
    }

    #[test]
    fn init_defaults_and_options() {
        let q = hhf("hh_limit 10 non_hh_weight 3");
        let q = &q.q;
        assert_eq!((q.limit, q.quantum, q.hh_flows_limit, q.non_hh_weight), (1000, 1514, 10, 3));
        assert_eq!(hhf("").q.hh_flows_limit, 2048);
        let over = Hhf::new(Some(&p("hh_limit 2049").unwrap()), &dev(), 1 << 16, t(0));
        assert_eq!(over.err(), Some(TcError::kernel("integer out of range")));
        assert_eq!((q.reset_timeout, q.evict_timeout, q.admit_bytes), (10, 250, 131072));
        // quantum × weight past INT_MAX, or 0: EINVAL.
        assert_eq!(
            Hhf::new(Some(&p("quantum 1073741824").unwrap()), &dev(), 1 << 16, t(0)).err(),
            Some(TcError::invalid())
        );
    }

    /// A flow sending more than admit_bytes within a reset period becomes a heavy
    /// hitter: the packet that would push its smallest counter past the threshold is
    /// the first in the heavy-hitter bucket; its later packets follow it there.
    #[test]
    fn heavy_hitters_are_caught_at_admit_bytes() {
        let mut q = hhf("admit_bytes 10000");
        for i in 0..6 {
            q.enqueue(pkt(i, 7, 2000), ms(0));
        }
        // 5 × 2000 = 10000 is not past 10000; the 6th would be.
        assert_eq!(q.q.bucket_lens(), (1, 5));
        assert_eq!(q.q.hhf_stats(), HhfStats { hh_tot_count: 1, hh_cur_count: 1, ..Default::default() });
        q.enqueue(pkt(6, 7, 100), ms(1));
        assert_eq!(q.q.bucket_lens(), (2, 5));
        // Another flow is not caught.
        q.enqueue(pkt(7, 8, 2000), ms(1));
        assert_eq!(q.q.bucket_lens(), (2, 6));
    }

    /// The counters are forgotten after reset_timeout (10 jiffies = 40 ms), and a
    /// heavy hitter idle for evict_timeout (250 jiffies) is one no more.
    #[test]
    fn counters_reset_and_heavy_hitters_expire() {
        let mut q = hhf("admit_bytes 10000");
        for i in 0..5 {
            q.enqueue(pkt(i, 7, 2000), ms(0));
        }
        // 44 ms later (11 jiffies, past 10): the counters start from 0 again.
        q.enqueue(pkt(5, 7, 2000), ms(44));
        assert_eq!(q.q.bucket_lens(), (0, 6));
        for i in 6..10 {
            q.enqueue(pkt(i, 7, 2000), ms(44));
        }
        assert_eq!(q.q.bucket_lens(), (0, 10));
        q.enqueue(pkt(10, 7, 2000), ms(44));
        assert_eq!(q.q.bucket_lens(), (1, 10));
        // Seen at 44 ms (jiffy 11); at jiffy 11 + 250 it is still live, one later not:
        // the expired entry is the chain's last, so it stays (and is reused).
        q.enqueue(pkt(11, 7, 100), t(261 * 4_000_000));
        assert_eq!(q.q.bucket_lens(), (2, 10));
        q.enqueue(pkt(12, 7, 100), t(513 * 4_000_000));
        assert_eq!(q.q.bucket_lens(), (2, 11));
        assert_eq!(q.q.hhf_stats().hh_cur_count, 1);
    }

    /// Weighted DRR: with both buckets backlogged the other bucket gets two quanta
    /// per heavy hitters' one; over the limit the heavy hitters lose their head.
    #[test]
    fn wdrr_shares_and_drops_from_heavy_hitters() {
        let mut q = hhf("admit_bytes 1 quantum 1000 limit 8");
        // Flow 1's first packet is already a heavy hitter (1000 > 1).
        for i in 0..4 {
            q.enqueue(pkt(i, 1, 1000), ms(0));
        }
        assert_eq!(q.q.bucket_lens(), (4, 0));
        // Every other flow's first packet too: make the rest by resetting the filter
        // with a large admit_bytes.
        q.q.admit_bytes = 1 << 30;
        for i in 10..14 {
            q.enqueue(pkt(i, 2, 1000), ms(0));
        }
        assert_eq!(q.q.bucket_lens(), (4, 4));
        let order: Vec<u64> = (0..8).map(|_| q.dequeue(ms(1)).packet().unwrap().id).collect();
        // The non-HH bucket woke up as "new": it goes first with 2 quanta; the HH
        // bucket then sends 1 per round, the other 2.
        assert_eq!(order, [10, 11, 0, 12, 13, 1, 2, 3]);
        // The limit: 9 packets for 8 places drops the heavy hitters' head.
        for i in 20..28 {
            q.enqueue(pkt(i, 1, 1000), ms(2));
        }
        assert_eq!(q.enqueue(pkt(30, 2, 1000), ms(2)), Enqueued::Success);
        assert_eq!((q.stats().qlen, q.stats().drops, q.q.hhf_stats().drop_overlimit), (8, 1, 1));
        assert_eq!(q.q.bucket_lens(), (7, 1));
        assert_eq!(q.enqueue(pkt(31, 1, 1000), ms(2)), Enqueued::Congested);
    }

    #[test]
    fn a_lower_limit_dequeues_to_it_as_sent() {
        let mut q = hhf("");
        for i in 0..10 {
            q.enqueue(pkt(i, i as u32, 100), ms(0));
        }
        let o = Opts::new(p("limit 4").unwrap());
        q.change(&o, &dev(), ms(1)).unwrap();
        assert_eq!((q.stats().qlen, q.stats().packets, q.stats().drops), (4, 6, 0));
        assert_eq!(q.take_reduce().pkts, 6);
    }
}
