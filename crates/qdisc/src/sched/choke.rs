//! choke — CHOose and Keep/Kill. Mirrors net/sched/sch_choke.c (kernel side) and
//! tc/q_choke.c (iproute2 side); §27 of docs/kernel-notes.md.
//!
//! Theory: RED on the queue's length in packets, plus one step. When the average is
//! above `min`, a packet already queued is drawn at random; if it belongs to the
//! arriving packet's flow, both are dropped (`matched`). Otherwise RED decides as
//! usual — always mark or drop above `max`, with growing probability between. The
//! queue is a ring whose dropped entries become holes, skipped at the ends. RED's
//! arithmetic is [`crate::sched::red`]'s; the draws come from a seeded generator
//! (the kernel's `get_random_u32` cannot be reproduced), as sfq's and red's do.

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::codel::reciprocal_scale;
use crate::sched::red::{
    print_red_details, print_red_flags, red_calc_qavg, red_check_params, red_eval_stab, red_eval_wlog_plog,
    red_mark_probability, red_random, scan_lg, RedParms, RedStats, RedVars, RED_STAB_SIZE, TC_RED_ECN, TC_RED_HARDDROP,
};
use crate::sched::sfq::SplitMix64;
use crate::tc::units::{c_double_to_u32, get_u32};
use crate::tc::{units, Args, Out, TcError};
use crate::time::Instant;

/// `choke_init` is `choke_change`, which wants options; tc always sends them.
pub static OPS: Ops = Ops {
    id: "choke",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Choke::new(c.required()?, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// CHOKE_MAX_QUEUE: the largest limit (packets).
const MAX_QUEUE: u32 = 128 * 1024 - 1;

/// q_choke.c `explain`.
const USAGE: &str =
    "Usage: ... choke limit PACKETS bandwidth KBPS [ecn]\n\t\t [ min PACKETS ] [ max PACKETS ] [ burst PACKETS ]\n";

/// What tc sends: TCA_CHOKE_PARMS (`struct tc_red_qopt`, thresholds in packets),
/// TCA_CHOKE_STAB and TCA_CHOKE_MAX_P.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChokeOpt {
    /// Packets.
    pub limit: u32,
    pub qth_min: u32,
    pub qth_max: u32,
    pub wlog: u8,
    pub plog: u8,
    pub scell_log: u8,
    /// TC_RED_ECN, TC_RED_HARDDROP (tc sets only ECN).
    pub flags: u8,
    pub stab: [u8; RED_STAB_SIZE],
    pub max_p: u32,
}

/// tc side: q_choke.c `choke_parse_opt`. The EWMA and probability are computed on
/// thresholds times `avpkt` (bytes) though the kernel gets packets.
pub fn parse(args: &mut Args) -> Result<ChokeOpt, TcError> {
    let (mut limit, mut qth_min, mut qth_max, mut burst) = (0u32, 0u32, 0u32, 0u32);
    let mut avpkt = 1000u32;
    let mut probability = 0.02f64;
    let mut rate = 0u32;
    let mut ecn = false;
    let ill = |what: &str| TcError::tc(format!("Illegal \"{what}\"\n"));
    while let Some(a) = args.next() {
        match a {
            "limit" => limit = get_u32(args.value()?).ok_or_else(|| ill("limit"))?,
            "bandwidth" => {
                let v = args.value()?;
                rate = args.rate(v).ok_or_else(|| ill("bandwidth"))?;
            }
            "ecn" => ecn = true,
            "min" => qth_min = get_u32(args.value()?).ok_or_else(|| ill("min"))?,
            "max" => qth_max = get_u32(args.value()?).ok_or_else(|| ill("max"))?,
            "burst" => burst = get_u32(args.value()?).ok_or_else(|| ill("burst"))?,
            "avpkt" => avpkt = units::get_size(args.value()?).ok_or_else(|| ill("avpkt"))?,
            "probability" => probability = scan_lg(args.value()?).ok_or_else(|| ill("probability"))?,
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    if rate == 0 || limit == 0 {
        return Err(TcError::tc("Required parameter (bandwidth, limit) is missing\n"));
    }
    if qth_max == 0 {
        qth_max = limit / 4;
    }
    if qth_min == 0 {
        qth_min = qth_max / 3;
    }
    if burst == 0 {
        burst = qth_min.wrapping_mul(2).wrapping_add(qth_max) / 3;
    }
    if qth_max > limit {
        return Err(TcError::tc("\"max\" is larger than \"limit\"\n"));
    }
    if qth_min >= qth_max {
        return Err(TcError::tc("\"min\" is not smaller than \"max\"\n"));
    }
    let bytes = (qth_min.wrapping_mul(avpkt), qth_max.wrapping_mul(avpkt));
    let (wlog, plog) = red_eval_wlog_plog("CHOKE", args, bytes, burst, avpkt, probability)?;
    let (scell_log, stab) = red_eval_stab("CHOKE", wlog, avpkt, rate)?;
    Ok(ChokeOpt {
        limit,
        qth_min,
        qth_max,
        wlog,
        plog,
        scell_log,
        flags: if ecn { TC_RED_ECN } else { 0 },
        stab,
        max_p: c_double_to_u32(probability * 4294967296.0),
    })
}

/// `q->stats` of sch_choke.c: red's counters (`pdrop` is choke's own tail drops)
/// and the flow matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChokeStats {
    pub red: RedStats,
    pub matched: u32,
}

/// The default seed of a choke with handle `handle`.
pub fn default_seed(handle: u32) -> u64 {
    0x4348_4f4b_4500_0000 ^ handle as u64
}

/// `struct choke_sched_data`.
pub struct Choke {
    limit: u32,
    flags: u8,
    parms: RedParms,
    vars: RedVars,
    stats: ChokeStats,
    /// The ring (`tab`, `tab_mask + 1` slots; None is a hole) and its ends.
    tab: Vec<Option<Packet>>,
    head: usize,
    tail: usize,
    rng: SplitMix64,
}

impl Choke {
    /// `choke_init` → `choke_change`.
    pub fn new(o: &ChokeOpt, handle: u32, now: Instant) -> Result<Choke, TcError> {
        let mut q = Choke {
            limit: 0,
            flags: 0,
            parms: RedParms::new(0, 0, 0, 0, 0, None, 0),
            vars: RedVars::default(),
            stats: ChokeStats::default(),
            tab: Vec::new(),
            head: 0,
            tail: 0,
            rng: SplitMix64(default_seed(handle)),
        };
        // Nothing is queued yet: the counters are not needed.
        q.apply(&mut Sch::default(), o, now)?;
        Ok(q)
    }

    /// Re-seed the generator of the random draws.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
    }

    pub fn choke_stats(&self) -> ChokeStats {
        self.stats
    }

    fn mask(&self) -> usize {
        self.tab.len().wrapping_sub(1)
    }

    /// `choke_len`: entries between the ends, holes included.
    fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head) & self.mask()
    }

    /// Mirrors `choke_change`: a new ring when the size changes (what no longer fits
    /// is dropped and reported up), then the RED parameters; an empty queue ends
    /// any idle period.
    fn apply(&mut self, sch: &mut Sch, o: &ChokeOpt, now: Instant) -> Result<(), TcError> {
        if !red_check_params(o.qth_min, o.qth_max, o.wlog, o.scell_log, Some(&o.stab)) || o.limit > MAX_QUEUE {
            return Err(TcError::invalid());
        }
        let size = (o.limit as usize + 1).next_power_of_two();
        if size != self.tab.len() {
            let mut ntab: Vec<Option<Packet>> = (0..size).map(|_| None).collect();
            let (oqlen, mut dropped, mut tail) = (sch.stats.qlen, 0i64, 0usize);
            while !self.tab.is_empty() && self.head != self.tail {
                let skb = self.tab[self.head].take();
                self.head = (self.head + 1) & self.mask();
                let Some(skb) = skb else { continue };
                if tail < size - 1 {
                    ntab[tail] = Some(skb);
                    tail += 1;
                    continue;
                }
                dropped += skb.len as i64;
                sch.stats.unqueued(skb.len);
                sch.stats.dropped();
                skb.kfree_skb();
            }
            sch.reduce((oqlen - sch.stats.qlen) as i32, dropped);
            self.tab = ntab;
            self.head = 0;
            self.tail = tail;
        }
        self.flags = o.flags;
        self.limit = o.limit;
        self.parms = RedParms::new(o.qth_min, o.qth_max, o.wlog, o.plog, o.scell_log, Some(&o.stab), o.max_p);
        self.vars.reset();
        if self.head == self.tail {
            self.vars.qidlestart = None;
        }
        let _ = now;
        Ok(())
    }

    /// `choke_zap_head_holes`.
    fn zap_head_holes(&mut self) {
        loop {
            self.head = (self.head + 1) & self.mask();
            if self.head == self.tail || self.tab[self.head].is_some() {
                break;
            }
        }
    }

    /// `choke_zap_tail_holes`.
    fn zap_tail_holes(&mut self) {
        loop {
            self.tail = self.tail.wrapping_sub(1) & self.mask();
            if self.head == self.tail || self.tab[self.tail].is_some() {
                break;
            }
        }
    }

    /// `choke_drop_by_idx`: a hole where the packet was; counted as a drop here and
    /// reported up.
    fn drop_by_idx(&mut self, sch: &mut Sch, idx: usize) {
        let skb = self.tab[idx].take().expect("a packet at idx");
        if idx == self.head {
            self.zap_head_holes();
        }
        if idx == self.tail {
            self.zap_tail_holes();
        }
        sch.stats.unqueued(skb.len);
        sch.reduce(1, skb.len as i64);
        sch.stats.dropped();
        skb.kfree_skb();
    }

    /// `choke_peek_random`: three tries at a random slot, else the head.
    fn peek_random(&mut self) -> usize {
        for _ in 0..3 {
            let r = reciprocal_scale(self.rng.next_u32(), self.len() as u32) as usize;
            let idx = (self.head + r) & self.mask();
            if self.tab[idx].is_some() {
                return idx;
            }
        }
        self.head
    }

    /// `choke_match_random`: a random queued packet of the same flow (both without
    /// a 5-tuple count as one flow, as the kernel's dissector sees two frames it
    /// cannot parse), or None.
    fn match_random(&mut self, pkt: &Packet) -> Option<usize> {
        if self.head == self.tail {
            return None;
        }
        let idx = self.peek_random();
        (self.tab[idx].as_ref().map(|o| o.flow()) == Some(pkt.flow())).then_some(idx)
    }
}

impl Qdisc for Choke {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `choke_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.vars.qavg = red_calc_qavg(&self.parms, &self.vars, sch.stats.qlen, now);
        // red_end_of_idle_period
        self.vars.qidlestart = None;
        let (qth_min, qth_max) = (self.parms.qth_min as u64, self.parms.qth_max as u64);
        let congestion = if self.vars.qavg <= qth_min {
            self.vars.qcount = -1;
            false
        } else if let Some(idx) = self.match_random(&pkt) {
            self.stats.matched = self.stats.matched.wrapping_add(1);
            self.drop_by_idx(sch, idx);
            true
        } else if self.vars.qavg > qth_max {
            self.vars.qcount = -1;
            sch.stats.overlimit();
            if self.flags & TC_RED_HARDDROP != 0 || self.flags & TC_RED_ECN == 0 || !pkt.set_ce() {
                self.stats.red.forced_drop = self.stats.red.forced_drop.wrapping_add(1);
                true
            } else {
                self.stats.red.forced_mark = self.stats.red.forced_mark.wrapping_add(1);
                false
            }
        } else {
            self.vars.qcount = self.vars.qcount.wrapping_add(1);
            if self.vars.qcount != 0 {
                if red_mark_probability(&self.parms, &self.vars, self.vars.qavg) {
                    self.vars.qcount = 0;
                    self.vars.qr = red_random(&self.parms, self.rng.next_u32());
                    sch.stats.overlimit();
                    if self.flags & TC_RED_ECN == 0 || !pkt.set_ce() {
                        self.stats.red.prob_drop = self.stats.red.prob_drop.wrapping_add(1);
                        true
                    } else {
                        self.stats.red.prob_mark = self.stats.red.prob_mark.wrapping_add(1);
                        false
                    }
                } else {
                    false
                }
            } else {
                self.vars.qr = red_random(&self.parms, self.rng.next_u32());
                false
            }
        };
        if congestion {
            // congestion_drop: the packet is freed, yet answered NET_XMIT_CN.
            sch.stats.dropped();
            pkt.kfree_skb();
            return Enqueued::Congested;
        }
        if sch.stats.qlen < self.limit {
            pkt.enqueued_at = now;
            sch.stats.queued(pkt.len);
            let tail = self.tail;
            self.tab[tail] = Some(pkt);
            self.tail = (tail + 1) & self.mask();
            return Enqueued::Success;
        }
        self.stats.red.pdrop = self.stats.red.pdrop.wrapping_add(1);
        sch.stats.dropped();
        Enqueued::Dropped
    }

    /// Mirrors `choke_dequeue`: the head; an empty queue starts an idle period.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        if self.head == self.tail {
            if self.vars.qidlestart.is_none() {
                self.vars.qidlestart = Some(now);
            }
            return Dequeued::Empty;
        }
        let head = self.head;
        let skb = self.tab[head].take().expect("the head holds a packet");
        self.zap_head_holes();
        sch.stats.unqueued(skb.len);
        sch.stats.sent(&skb);
        Dequeued::Packet(skb)
    }

    /// `choke_peek_head`.
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        if self.head == self.tail {
            None
        } else {
            self.tab[self.head].as_ref()
        }
    }

    /// Mirrors `choke_reset`: the ring emptied, RED restarted.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.tab.iter_mut().for_each(|s| *s = None);
        self.head = 0;
        self.tail = 0;
        self.vars.restart();
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.apply(sch, opts.of()?, now)
    }

    /// What `choke_dump` sends, printed by q_choke.c `choke_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let p = &self.parms;
        let (min, max) = (p.qth_min >> p.wlog, p.qth_max >> p.wlog);
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        out.uint("min", format_args!("min {min}p "), min as u64);
        out.uint("max", format_args!("max {max}p "), max as u64);
        print_red_flags(out, self.flags as u32);
        print_red_details(out, p);
    }

    /// `choke_dump_stats` printed by `choke_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let s = &self.stats;
        let marked = s.red.prob_mark.wrapping_add(s.red.forced_mark);
        let early = s.red.prob_drop.wrapping_add(s.red.forced_drop);
        out.uint("marked", format_args!("  marked {marked}"), marked as u64);
        out.uint("early", format_args!(" early {early}"), early as u64);
        out.uint("pdrop", format_args!(" pdrop {}", s.red.pdrop), s.red.pdrop as u64);
        out.uint("other", format_args!(" other 0"), 0);
        out.uint("matched", format_args!(" matched {}", s.matched), s.matched as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::testing::{argv, held, t};

    fn p(s: &str) -> Result<ChokeOpt, TcError> {
        parse(&mut Args::new(&argv(s)))
    }
    fn choke(s: &str) -> Node<Choke> {
        held(Choke::new(&p(s).unwrap(), 0x1_0000, t(0)).unwrap())
    }

    #[test]
    fn parse_defaults_and_errors_match_tc() {
        let o = p("limit 1000 bandwidth 10mbit").unwrap();
        // max = limit/4, min = max/3, burst = (2·min + max)/3.
        assert_eq!((o.limit, o.qth_min, o.qth_max, o.flags), (1000, 83, 250, 0));
        assert_eq!(o.max_p, 85899345);
        assert_eq!(p("bandwidth 10mbit").unwrap_err().msg, "Required parameter (bandwidth, limit) is missing\n");
        assert_eq!(p("limit 100 bandwidth 1mbit max 200").unwrap_err().msg, "\"max\" is larger than \"limit\"\n");
        assert_eq!(
            p("limit 100 bandwidth 1mbit min 30 max 30").unwrap_err().msg,
            "\"min\" is not smaller than \"max\"\n"
        );
        assert_eq!(p("limit x").unwrap_err().msg, "Illegal \"limit\"\n");
        assert!(p("foo").unwrap_err().msg.starts_with("What is \"foo\"?\nUsage: ... choke limit PACKETS"));
        assert_eq!(p("limit 100 bandwidth 1mbit ecn").unwrap().flags, TC_RED_ECN);
        assert_eq!(p("limit 10 bandwidth 1mbit").unwrap_err().msg, "CHOKE: failed to calculate EWMA constant.\n");
    }

    /// A packet of its own flow.
    fn own(id: u64) -> Packet {
        let f = crate::packet::FlowKey { sport: id as u16, dport: 80, proto: 17, ..Default::default() };
        Packet::new(id, 100).with_flow(f)
    }

    #[test]
    fn below_min_every_packet_is_admitted_up_to_the_limit() {
        // burst 3 gives Wlog 1: the average (×2) at each arrival is 0, 1, 3, 5 — at
        // most min (3×2) — then 7: above min, a draw finds another flow, and RED's
        // first count only draws qR; the ring is full, so a tail drop.
        let mut q = choke("limit 4 bandwidth 10mbit min 3 max 4 burst 3");
        assert_eq!(q.parms.wlog, 1);
        for i in 0..5 {
            q.enqueue(own(i), t(i));
        }
        let s = q.stats().clone();
        assert_eq!((s.qlen, s.backlog, s.drops, s.overlimits), (4, 400, 1, 0));
        assert_eq!(q.choke_stats(), ChokeStats { red: RedStats { pdrop: 1, ..Default::default() }, matched: 0 });
        assert_eq!(q.vars.qavg, 7);
        let ids: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(9)).packet().map(|p| p.id)).collect();
        assert_eq!(ids, vec![0, 1, 2, 3]);
    }

    #[test]
    fn above_min_a_packet_of_the_same_flow_goes_with_the_new_one() {
        // The same averages; the fifth packet finds one of its flow (all are of the
        // one unknown flow here): both go, the parents learn of the queued one.
        let mut q = choke("limit 4 bandwidth 10mbit min 3 max 4 burst 3");
        for i in 0..4 {
            assert_eq!(q.enqueue(Packet::new(i, 100), t(0)), Enqueued::Success);
        }
        assert_eq!(q.enqueue(Packet::new(4, 100), t(0)), Enqueued::Congested);
        let s = q.stats().clone();
        assert_eq!((s.qlen, s.backlog, s.drops), (3, 300, 2));
        assert_eq!(q.choke_stats().matched, 1);
        assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 100));
        let mut out = 0;
        while q.dequeue(t(1)).packet().is_some() {
            out += 1;
        }
        assert_eq!(out, 3);
    }

    #[test]
    fn holes_are_skipped_at_both_ends() {
        let mut q = choke("limit 7 bandwidth 10mbit min 3 max 4 burst 3");
        for i in 0..4 {
            q.enqueue(Packet::new(i, 10), t(0));
        }
        let Node { q: c, sch, .. } = &mut q;
        // The last packet: a hole. The kernel zaps the tail only when the index is
        // the tail itself — the free slot after the last packet — so never here.
        c.drop_by_idx(sch, 3);
        assert_eq!(c.tail, 4);
        c.drop_by_idx(sch, 1); // a hole in the middle
        assert_eq!(c.len(), 4);
        c.drop_by_idx(sch, 0); // the head: it skips the hole to 2
        assert_eq!(c.head, 2);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 2);
        assert_eq!(q.dequeue(t(0)), Dequeued::Empty);
        assert_eq!(q.stats().drops, 3);
    }

    #[test]
    fn xstats_and_dump_print_as_tc() {
        let q = choke("limit 1000 bandwidth 10mbit ecn");
        let mut o = Out::text();
        q.dump(&mut o, &crate::testing::dev());
        assert_eq!(o.into_string(), "limit 1000p min 83p max 250p ecn ");
        let mut o = Out::text();
        q.dump_xstats(&mut o);
        assert_eq!(o.into_string(), "  marked 0 early 0 pdrop 0 other 0 matched 0");
    }
}
