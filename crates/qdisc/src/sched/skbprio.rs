//! skbprio — SKB Priority Queue. Mirrors net/sched/sch_skbprio.c (kernel side) and
//! tc/q_skbprio.c (iproute2 side); §24 of docs/kernel-notes.md.
//!
//! Theory: 64 FIFOs, one per `skb->priority` (capped at 63; higher is better).
//! Dequeue always takes the head of the highest non-empty priority. Below `limit`
//! packets (default 64) every packet is queued; at the limit a packet whose priority
//! is at or below the lowest queued one is dropped, and otherwise it is queued and
//! the newest packet of the lowest queued priority is dropped in its place. Each
//! priority keeps its own backlog, drops and overlimits, dumped as the queue
//! counters of classes `<handle>:1` … `<handle>:40` (hex), which have no qdisc.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Classful, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::stats::Stats;
use crate::tc::units::get_size;
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// SKBPRIO_MAX_PRIORITY.
pub const SKBPRIO_MAX_PRIORITY: usize = 64;

/// tc sends options only when `limit` is given; `skbprio_init` then starts at 64.
pub static OPS: Ops = Ops {
    id: "skbprio",
    parse: Parse::Qopt(|a| Ok(parse(a)?.map(Opts::new))),
    create: |c| Ok(Box::new(Skbprio::new(c.opts::<SkbprioOpt>()?))),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// q_skbprio.c `explain`.
const USAGE: &str = "Usage: ... <skbprio> [ limit NUMBER ]\n";

/// `struct tc_skbprio_qopt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkbprioOpt {
    /// Packets.
    pub limit: u32,
}

/// tc side: mirrors `skbprio_parse_opt` in tc/q_skbprio.c (the limit is read with
/// `get_size`, so `2k` is 2048 packets). `None`: tc sends no options.
pub fn parse(args: &mut Args) -> Result<Option<SkbprioOpt>, TcError> {
    let mut o = None;
    while let Some(a) = args.next() {
        match a {
            "limit" => {
                let v = args.value()?;
                let limit =
                    get_size(v).ok_or_else(|| TcError::tc(format!("skbprio: Illegal \"limit\" value:\"{v}\"\n")))?;
                o = Some(SkbprioOpt { limit });
            }
            "help" => return Err(TcError::tc(USAGE)),
            w => return Err(TcError::tc(format!("skbprio: unknown parameter \"{w}\"\n{USAGE}"))),
        }
    }
    Ok(o)
}

/// `struct skbprio_sched_data` plus `sch->limit`.
pub struct Skbprio {
    limit: u32,
    /// `qdiscs[prio]`.
    queues: Vec<VecDeque<Packet>>,
    /// `qstats[prio]`: backlog, drops and overlimits (qlen stays 0, as in the kernel).
    qstats: Vec<Stats>,
    highest_prio: usize,
    lowest_prio: usize,
}

impl Skbprio {
    /// `skbprio_init`: 64 packets unless options say otherwise.
    pub fn new(o: Option<&SkbprioOpt>) -> Skbprio {
        Skbprio {
            limit: o.map_or(64, |o| o.limit),
            queues: vec![VecDeque::new(); SKBPRIO_MAX_PRIORITY],
            qstats: vec![Stats::default(); SKBPRIO_MAX_PRIORITY],
            highest_prio: 0,
            lowest_prio: SKBPRIO_MAX_PRIORITY - 1,
        }
    }

    /// `calc_new_high_prio`: the next non-empty priority below the highest, else 0.
    fn new_high_prio(&self) -> usize {
        (self.lowest_prio..self.highest_prio).rev().find(|&p| !self.queues[p].is_empty()).unwrap_or(0)
    }

    /// `calc_new_low_prio`: the next non-empty priority above the lowest, else 63.
    fn new_low_prio(&self) -> usize {
        (self.lowest_prio + 1..=self.highest_prio)
            .find(|&p| !self.queues[p].is_empty())
            .unwrap_or(SKBPRIO_MAX_PRIORITY - 1)
    }
}

impl Qdisc for Skbprio {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `skbprio_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, _now: Instant) -> Enqueued {
        let prio = (pkt.priority as usize).min(SKBPRIO_MAX_PRIORITY - 1);
        let len = pkt.len;
        if sch.stats.qlen < self.limit {
            self.queues[prio].push_back(pkt);
            sch.stats.queued(len);
            self.qstats[prio].backlog += len;
            self.highest_prio = self.highest_prio.max(prio);
            self.lowest_prio = self.lowest_prio.min(prio);
            return Enqueued::Success;
        }
        // Full: the packet itself goes if nothing queued is of lower priority.
        let lp = self.lowest_prio;
        if prio <= lp {
            self.qstats[prio].drops += 1;
            self.qstats[prio].overlimits += 1;
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        self.queues[prio].push_back(pkt);
        self.qstats[prio].backlog += len;
        // The newest packet of the lowest priority makes room (qlen is unchanged).
        let gone = self.queues[lp].pop_back().expect("the lowest priority holds a packet");
        sch.stats.backlog = sch.stats.backlog + len - gone.len;
        sch.stats.dropped();
        self.qstats[lp].backlog -= gone.len;
        self.qstats[lp].drops += 1;
        self.qstats[lp].overlimits += 1;
        gone.kfree_skb();
        if self.queues[lp].is_empty() {
            if self.lowest_prio == self.highest_prio {
                // Only the new packet is left.
                self.lowest_prio = prio;
                self.highest_prio = prio;
            } else {
                self.lowest_prio = self.new_low_prio();
            }
        }
        self.highest_prio = self.highest_prio.max(prio);
        Enqueued::Congested
    }

    /// Mirrors `skbprio_dequeue`: the head of the highest priority.
    fn dequeue(&mut self, sch: &mut Sch, _now: Instant) -> Dequeued {
        let hp = self.highest_prio;
        let Some(pkt) = self.queues[hp].pop_front() else { return Dequeued::Empty };
        sch.stats.unqueued(pkt.len);
        sch.stats.sent(&pkt);
        self.qstats[hp].backlog -= pkt.len;
        if self.queues[hp].is_empty() {
            if self.lowest_prio == self.highest_prio {
                self.highest_prio = 0;
                self.lowest_prio = SKBPRIO_MAX_PRIORITY - 1;
            } else {
                self.highest_prio = self.new_high_prio();
            }
        }
        Dequeued::Packet(pkt)
    }

    /// Mirrors `skbprio_reset`: queues and per-priority counters cleared.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        *self = Skbprio::new(Some(&SkbprioOpt { limit: self.limit }));
    }

    /// Mirrors `skbprio_change`: only the limit (nothing is dropped at once).
    fn change(&mut self, _sch: &mut Sch, opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        let o: &SkbprioOpt = opts.of()?;
        self.limit = o.limit;
        Ok(())
    }

    /// `skbprio_dump`, printed by q_skbprio.c: `limit N `.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("limit", format_args!("limit {} ", self.limit), self.limit as u64);
    }

    crate::classful!();
}

impl Classful for Skbprio {
    /// `skbprio_walk`: one class per priority, minors 1..=64.
    fn class_minors(&self) -> Vec<u32> {
        (1..=SKBPRIO_MAX_PRIORITY as u32).collect()
    }
    // find, leaf and graft: the defaults (`skbprio_find` finds nothing, no class
    // has a qdisc, there is no graft op).

    /// `skbprio_dump_class_stats`: the priority's queue counters only.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let s = self.qstats.get((minor as usize).checked_sub(1)?)?;
        Some(Stats { backlog: s.backlog, drops: s.drops, overlimits: s.overlimits, ..Stats::default() })
    }
    fn class_has_basic_stats(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{argv, held, t};

    fn p(s: &str) -> Result<Option<SkbprioOpt>, TcError> {
        parse(&mut Args::new(&argv(s)))
    }
    fn pkt(id: u64, prio: u32) -> Packet {
        Packet::new(id, 100 + id as u32).with_priority(prio)
    }

    #[test]
    fn parser_matches_q_skbprio() {
        assert_eq!(p(""), Ok(None));
        assert_eq!(p("limit 2k"), Ok(Some(SkbprioOpt { limit: 2048 })));
        assert_eq!(p("limit x").unwrap_err().msg, "skbprio: Illegal \"limit\" value:\"x\"\n");
        assert_eq!(p("foo").unwrap_err().msg, format!("skbprio: unknown parameter \"foo\"\n{USAGE}"));
        assert_eq!(p("limit").unwrap_err(), TcError::incomplete());
        assert_eq!(Skbprio::new(None).limit, 64);
    }

    #[test]
    fn highest_priority_first_fifo_within_one() {
        let mut q = held(Skbprio::new(None));
        for (id, prio) in [(1, 3), (2, 7), (3, 3), (4, 200), (5, 0)] {
            assert_eq!(q.enqueue(pkt(id, prio), t(0)), Enqueued::Success);
        }
        // Priority 200 is capped at 63.
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect();
        assert_eq!(order, vec![4, 2, 1, 3, 5]);
        assert_eq!((q.highest_prio, q.lowest_prio), (0, 63));
    }

    #[test]
    fn at_the_limit_the_lowest_priority_pays() {
        let mut q = held(Skbprio::new(Some(&SkbprioOpt { limit: 3 })));
        q.enqueue(pkt(1, 2), t(0));
        q.enqueue(pkt(2, 2), t(0));
        q.enqueue(pkt(3, 5), t(0));
        // Not above the lowest queued priority (2): dropped itself.
        assert_eq!(q.enqueue(pkt(4, 2), t(0)), Enqueued::Dropped);
        // Above it: queued, and the newest priority-2 packet (id 2) goes.
        assert_eq!(q.enqueue(pkt(5, 9), t(0)), Enqueued::Congested);
        let s = q.stats().clone();
        assert_eq!((s.qlen, s.backlog, s.drops), (3, 101 + 103 + 105, 2));
        let c = q.class_stats(3).unwrap();
        assert_eq!((c.backlog, c.drops, c.overlimits, c.qlen), (101, 2, 2, 0));
        // Again: id 1 goes, and priority 2 is empty, so 5 becomes the lowest.
        assert_eq!(q.enqueue(pkt(6, 7), t(0)), Enqueued::Congested);
        assert_eq!((q.lowest_prio, q.highest_prio), (5, 9));
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect();
        assert_eq!(order, vec![5, 6, 3]);
    }

    #[test]
    fn limit_zero_drops_everything() {
        let mut q = held(Skbprio::new(Some(&SkbprioOpt { limit: 0 })));
        assert_eq!(q.enqueue(pkt(1, 63), t(0)), Enqueued::Dropped);
        assert_eq!(q.enqueue(pkt(2, 0), t(0)), Enqueued::Dropped);
        assert_eq!(q.stats().drops, 2);
        assert_eq!(q.class_stats(64).unwrap().overlimits, 1);
    }
}
