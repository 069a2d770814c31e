//! fq_pie — Flow Queue PIE. Mirrors net/sched/sch_fq_pie.c (Linux 6.12 as Debian
//! ships it, 6.12.117) and tc/q_fq_pie.c; §21 of docs/kernel-notes.md.
//!
//! Theory: packets are hashed into `flows` buckets; each bucket is a FIFO with its
//! own PIE controller (the [`crate::sched::pie`] core: early drop or ECN mark at
//! enqueue on the bucket's backlog, the delay measured at dequeue). Buckets with
//! packets sit on two round-robin lists served by deficit round robin with
//! `quantum` bytes of credit per round, as in fq_codel: a bucket that becomes
//! active joins `new_flows`, served first; a bucket that spends its credit moves to
//! the tail of `old_flows`; an empty bucket found at the head of `new_flows` moves
//! to `old_flows` (if that list has anything, so old flows are not starved) or
//! leaves the lists. The periodic update computes every bucket's probability,
//! 2048 buckets per timer run. `memory_limit` only counts (`overmemory`): a packet
//! is never refused for memory. Drops happen at enqueue only.
//!
//! fq_pie has no class operations in 6.12: no classes, no filters (the kernel's
//! `tcf_block` is allocated but cannot be reached without `cl_ops`), so a packet's
//! bucket is its `skb->priority` (major = our handle, minor 1..=flows) or its hash.
//!
//! Differences from the kernel, all deliberate:
//! * **Randomness**: as for pie, `get_random_bytes` is a seeded splitmix64
//!   ([`FqPie::set_seed`]).
//! * **Timer**: as for pie (first run HZ/2 after init, then every `tupdate`
//!   jiffies, run at the next operation at or after each deadline). A round over
//!   more than 2048 buckets re-arms for "now", which the kernel runs at the next
//!   tick: one jiffy (4 ms) later here. A whole round that changed nothing lets the
//!   catch-up skip the rounds up to `now`.
//! * `fq_pie_reset` leaves `memory_usage` as it was, in the kernel as here.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{
    dequeue_internal, tc_h_maj, tc_h_min, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch,
};
use crate::sched::codel::reciprocal_scale;
use crate::sched::pie::{
    apply_params, default_seed, parse_common, pie_admit, pie_calculate_probability, pie_process_dequeue, pie_refuse,
    print_flags, print_times, psched_time, tupdate_period, PieOpt, PieParams, PieStats, PieVars, FIRST_UPDATE,
    MAX_PROB,
};
use crate::sched::sfq::SplitMix64;
use crate::tc::{units, Args, Out, TcError};
use crate::time::{Duration, Instant, HZ};

/// Buckets `fq_pie_timer` updates per run.
const TIMER_BATCH: usize = 2048;
/// One jiffy.
const JIFFY: Duration = Duration::from_nanos(1_000_000_000 / HZ);
/// The largest `flows`.
const MAX_FLOWS: u32 = 65536;
/// `fq_pie_q_range`: quantum's netlink policy.
const QUANTUM_MAX: u32 = 1 << 20;

/// What tc sends for fq_pie: each attribute only when given (non-zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FqPieOpt {
    /// limit, target, tupdate, alpha, beta, ecn, bytemode, dq_rate_estimator.
    pub pie: PieOpt,
    pub flows: Option<u32>,
    pub quantum: Option<u32>,
    pub memory_limit: Option<u32>,
    pub ecn_prob: Option<u32>,
}

/// q_fq_pie.c `explain`.
const USAGE: &str = "Usage: ... fq_pie [ limit PACKETS ] [ flows NUMBER ]\n\
\x20                 [ target TIME ] [ tupdate TIME ]\n\
\x20                 [ alpha NUMBER ] [ beta NUMBER ]\n\
\x20                 [ quantum BYTES ] [ memory_limit BYTES ]\n\
\x20                 [ ecn_prob PERCENTAGE ] [ [no]ecn ]\n\
\x20                 [ [no]bytemode ] [ [no_]dq_rate_estimator ]\n";

/// tc side: q_fq_pie.c `fq_pie_parse_opt`.
pub fn parse(args: &mut Args) -> Result<FqPieOpt, TcError> {
    let mut o = FqPieOpt::default();
    let ill = |what: &str| TcError::tc(format!("Illegal \"{what}\"\n"));
    let nz = |v: u32| (v != 0).then_some(v);
    while let Some(a) = args.next() {
        if parse_common(a, args, &mut o.pie)? {
            continue;
        }
        match a {
            "flows" => o.flows = nz(units::get_u32(args.value()?).ok_or_else(|| ill("flows"))?),
            "quantum" => o.quantum = nz(units::get_size(args.value()?).ok_or_else(|| ill("quantum"))?),
            "memory_limit" => o.memory_limit = nz(units::get_size(args.value()?).ok_or_else(|| ill("memory_limit"))?),
            "ecn_prob" => {
                let v = units::get_u32(args.value()?).filter(|&v| v < 100).ok_or_else(|| ill("ecn_prob"))?;
                o.ecn_prob = nz(v);
            }
            "help" => return Err(TcError::tc(USAGE)),
            _ => return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}"))),
        }
    }
    Ok(o)
}

/// `struct fq_pie_flow`.
#[derive(Clone, Debug, Default)]
struct Flow {
    vars: PieVars,
    deficit: i32,
    backlog: u32,
    qlen: u32,
    /// On `new_flows` or `old_flows` (`!list_empty(&flowchain)`).
    listed: bool,
    q: VecDeque<Packet>,
}

/// Kernel side: `struct fq_pie_sched_data`.
pub struct FqPie {
    handle: u32,
    flows: Vec<Flow>,
    /// `flows_cnt` (the buckets exist from init on).
    flows_cnt: u32,
    old_flows: VecDeque<u32>,
    new_flows: VecDeque<u32>,
    params: PieParams,
    ecn_prob: u32,
    flows_cursor: usize,
    quantum: u32,
    memory_limit: u32,
    new_flow_count: u32,
    memory_usage: u32,
    overmemory: u32,
    stats: PieStats,
    /// [`crate::tree::KernelVersion::quantum_bounds`]: 6.12.117 keeps the quantum in
    /// [256, 2^20].
    quantum_bounds: bool,
    mtu: u32,
    rng: SplitMix64,
    next_update: Instant,
}

/// `fq_pie_init` works without options.
pub static OPS: Ops = Ops {
    id: "fq_pie",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(FqPie::new(c.opts()?, c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl FqPie {
    /// `fq_pie_init`: defaults (limit 10240, 1024 flows, quantum = MTU, 32 MB,
    /// ecn_prob 10%), the change, then the buckets and the timer.
    pub fn new(o: Option<&FqPieOpt>, dev: &DevInfo, handle: u32, now: Instant) -> Result<FqPie, TcError> {
        let quantum_bounds = dev.kernel.quantum_bounds();
        let mtu = dev.psched_mtu();
        let mut q = FqPie {
            handle,
            flows: Vec::new(),
            flows_cnt: 1024,
            old_flows: VecDeque::new(),
            new_flows: VecDeque::new(),
            params: PieParams { limit: 10 * 1024, ..PieParams::default() },
            ecn_prob: 10,
            flows_cursor: 0,
            quantum: if quantum_bounds { mtu.clamp(256, QUANTUM_MAX) } else { mtu },
            memory_limit: 32 << 20,
            new_flow_count: 0,
            memory_usage: 0,
            overmemory: 0,
            stats: PieStats::default(),
            quantum_bounds,
            mtu,
            rng: SplitMix64(default_seed(handle)),
            next_update: now + FIRST_UPDATE,
        };
        if let Some(o) = o {
            let mut sch = Sch::default();
            q.apply(&mut sch, o, dev, now)?;
        }
        q.flows = vec![Flow::default(); q.flows_cnt as usize];
        Ok(q)
    }

    /// Re-seed the generator behind `get_random_bytes`.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
    }

    /// `fq_pie_change` (at init `flows` is empty: the bucket count may be set).
    fn apply(&mut self, sch: &mut Sch, o: &FqPieOpt, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        // The netlink policy comes first.
        if o.quantum.is_some_and(|v| !(1..=QUANTUM_MAX).contains(&v)) {
            return Err(TcError::kernel("integer out of range"));
        }
        if let Some(l) = o.pie.limit {
            // Set before the flows check, and kept if that fails, as in the kernel.
            self.params.limit = l;
        }
        if let Some(f) = o.flows {
            if !self.flows.is_empty() {
                return Err(TcError::kernel("sch_fq_pie: Number of flows cannot be changed"));
            }
            if f == 0 || f > MAX_FLOWS {
                return Err(TcError::kernel("sch_fq_pie: Number of flows must range in [1..65536]"));
            }
            self.flows_cnt = f;
        }
        apply_params(&mut self.params, &o.pie);
        if let Some(v) = o.quantum {
            self.quantum = if self.quantum_bounds { v.max(256) } else { v };
        }
        if let Some(v) = o.memory_limit {
            self.memory_limit = v;
        }
        if let Some(v) = o.ecn_prob {
            self.ecn_prob = v;
        }
        self.mtu = dev.psched_mtu();
        // Over a lower limit: dequeue (counted as sent) and free, telling the parents.
        let (mut n, mut bytes) = (0i32, 0i64);
        while sch.stats.qlen > self.params.limit {
            let Some(p) = dequeue_internal(self, sch, now).packet() else { break };
            n += 1;
            bytes += p.len as i64;
            p.kfree_skb();
        }
        sch.reduce(n, bytes);
        Ok(())
    }

    /// `fq_pie_classify` without filters: the 0-based bucket.
    fn classify(&self, pkt: &Packet) -> usize {
        let min = tc_h_min(pkt.priority);
        if tc_h_maj(pkt.priority) == self.handle && min > 0 && min <= self.flows_cnt {
            return (min - 1) as usize;
        }
        reciprocal_scale(pkt.hash, self.flows_cnt) as usize
    }

    /// `fq_pie_timer` for every deadline up to `now`.
    fn run_timer(&mut self, now: Instant) {
        let n = self.flows.len();
        let period = tupdate_period(self.params.tupdate);
        // Some(true) while a round that began in this catch-up has changed nothing.
        let mut quiet = None;
        while self.next_update <= now {
            if self.flows_cursor == 0 {
                quiet = Some(true);
            }
            let end = (self.flows_cursor + TIMER_BATCH).min(n);
            for f in &mut self.flows[self.flows_cursor..end] {
                let before = f.vars;
                pie_calculate_probability(&self.params, &mut f.vars, f.backlog);
                if f.vars != before {
                    quiet = quiet.map(|_| false);
                }
            }
            self.flows_cursor = end;
            if self.flows_cursor < n {
                self.next_update += JIFFY;
                continue;
            }
            self.flows_cursor = 0;
            if period.as_nanos() == 0 {
                self.next_update = Instant::from_nanos(u64::MAX);
                break;
            }
            self.next_update += period;
            if quiet == Some(true) && self.next_update <= now {
                // Every later round up to `now` would change nothing: go to the
                // last round that starts by `now`.
                let chunks = n.div_ceil(TIMER_BATCH).max(1) as u64;
                let round = period.as_nanos() + (chunks - 1) * JIFFY.as_nanos();
                let k = (now - self.next_update).as_nanos() / round;
                self.next_update += Duration::from_nanos(k * round);
            }
        }
    }

    // ---- accessors (tests) ----------------------------------------------------------

    pub fn flows_cnt(&self) -> u32 {
        self.flows_cnt
    }
    pub fn flow_vars(&self, i: usize) -> &PieVars {
        &self.flows[i].vars
    }
    pub fn pie_stats(&self) -> PieStats {
        self.stats
    }
    pub fn memory_usage(&self) -> u32 {
        self.memory_usage
    }
}

impl Qdisc for FqPie {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `fq_pie_qdisc_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.run_timer(now);
        let idx = self.classify(&pkt);
        let memory_limited = self.memory_usage > self.memory_limit.wrapping_add(pkt.truesize);
        if sch.stats.qlen >= self.params.limit {
            self.stats.overlimit = self.stats.overlimit.wrapping_add(1);
        } else {
            if memory_limited {
                self.overmemory = self.overmemory.wrapping_add(1);
            }
            let flow = &mut self.flows[idx];
            let mark_below = (MAX_PROB / 100).wrapping_mul(self.ecn_prob as u64);
            let (p, st) = (&self.params, &mut self.stats);
            if pie_admit(p, &mut flow.vars, st, flow.backlog, &mut pkt, self.mtu, mark_below, &mut self.rng, now) {
                let len = pkt.len;
                self.memory_usage = self.memory_usage.wrapping_add(pkt.truesize);
                sch.stats.queued(len);
                flow.q.push_back(pkt);
                if !flow.listed {
                    flow.listed = true;
                    self.new_flows.push_back(idx as u32);
                    self.new_flow_count = self.new_flow_count.wrapping_add(1);
                    flow.deficit = self.quantum as i32;
                    flow.qlen = 0;
                    flow.backlog = 0;
                }
                flow.qlen += 1;
                flow.backlog = flow.backlog.wrapping_add(len);
                return Enqueued::Success;
            }
        }
        pie_refuse(&mut self.stats, &mut self.flows[idx].vars, sch);
        Enqueued::Congested
    }

    /// `fq_pie_qdisc_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.run_timer(now);
        loop {
            let from_new = !self.new_flows.is_empty();
            let head = if from_new { &mut self.new_flows } else { &mut self.old_flows };
            let Some(&idx) = head.front() else { return Dequeued::Empty };
            let flow = &mut self.flows[idx as usize];
            if flow.deficit <= 0 {
                flow.deficit += self.quantum as i32;
                head.pop_front();
                self.old_flows.push_back(idx);
                continue;
            }
            let Some(p) = flow.q.pop_front() else {
                // Empty: old flows get a pass before a new flow is forgotten.
                head.pop_front();
                if from_new && !self.old_flows.is_empty() {
                    self.old_flows.push_back(idx);
                } else {
                    flow.listed = false;
                }
                continue;
            };
            sch.stats.unqueued(p.len);
            sch.stats.sent(&p);
            flow.qlen -= 1;
            flow.deficit -= p.len as i32;
            flow.backlog = flow.backlog.wrapping_sub(p.len);
            self.memory_usage = self.memory_usage.wrapping_sub(p.truesize);
            let enq = psched_time(p.enqueued_at);
            pie_process_dequeue(&self.params, &mut flow.vars, p.len, enq, flow.backlog, psched_time(now));
            return Dequeued::Packet(p);
        }
    }

    // peek: qdisc_peek_dequeued (the default).

    /// `fq_pie_reset`: the lists and every bucket's packets and PIE state go;
    /// `memory_usage` stays.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.new_flows.clear();
        self.old_flows.clear();
        for f in &mut self.flows {
            f.q.clear();
            f.listed = false;
            f.vars.init();
        }
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.run_timer(now);
        self.apply(sch, opts.of()?, dev, now)
    }

    /// `fq_pie_dump` printed by `fq_pie_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let p = &self.params;
        out.uint("limit", format_args!("limit {}p ", p.limit), p.limit as u64);
        out.uint("flows", format_args!("flows {} ", self.flows_cnt), self.flows_cnt as u64);
        print_times(out, p);
        out.uint("alpha", format_args!("alpha {} ", p.alpha), p.alpha as u64);
        out.uint("beta", format_args!("beta {} ", p.beta), p.beta as u64);
        out.size("quantum", "quantum ", self.quantum, " ");
        out.size("memory_limit", "memory_limit ", self.memory_limit, " ");
        out.uint("ecn_prob", format_args!("ecn_prob {} ", self.ecn_prob), self.ecn_prob as u64);
        print_flags(out, p);
    }

    /// `fq_pie_dump_stats` printed by `fq_pie_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let s = &self.stats;
        out.uint("pkts_in", format_args!("  pkts_in {}", s.packets_in), s.packets_in as u64);
        out.uint("overlimit", format_args!(" overlimit {}", s.overlimit), s.overlimit as u64);
        out.uint("overmemory", format_args!(" overmemory {}", self.overmemory), self.overmemory as u64);
        out.uint("dropped", format_args!(" dropped {}", s.dropped), s.dropped as u64);
        out.uint("ecn_mark", format_args!(" ecn_mark {}", s.ecn_mark), s.ecn_mark as u64);
        out.nl();
        let (nf, nl, ol) = (self.new_flow_count, self.new_flows.len() as u64, self.old_flows.len() as u64);
        out.uint("new_flow_count", format_args!("  new_flow_count {nf}"), nf as u64);
        out.uint("new_flows_len", format_args!(" new_flows_len {nl}"), nl);
        out.uint("old_flows_len", format_args!(" old_flows_len {ol}"), ol);
        out.uint("memory_used", format_args!(" memory_used {}", self.memory_usage), self.memory_usage as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::testing::{argv, dev, held, ms, t};

    fn p(s: &str) -> Result<FqPieOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn fq_pie(s: &str) -> Node<FqPie> {
        held(FqPie::new(Some(&p(s).unwrap()), &dev(), 0x10000, t(0)).unwrap())
    }
    /// A packet for bucket `minor - 1` (skb->priority = our handle's major : minor).
    fn to(id: u64, minor: u32, len: u32) -> Packet {
        Packet::new(id, len).with_priority(0x10000 | minor)
    }

    #[test]
    fn defaults_and_checks() {
        let q = fq_pie("");
        assert_eq!(
            (q.flows_cnt(), q.params.limit, q.quantum, q.memory_limit, q.ecn_prob),
            (1024, 10240, 1514, 32 << 20, 10)
        );
        assert_eq!(p("ecn_prob 100").unwrap_err(), TcError::tc("Illegal \"ecn_prob\"\n"));
        let e = |s: &str| FqPie::new(Some(&p(s).unwrap()), &dev(), 0x10000, t(0)).err().unwrap();
        assert_eq!(e("flows 65537"), TcError::kernel("sch_fq_pie: Number of flows must range in [1..65536]"));
        assert_eq!(e("quantum 1048577"), TcError::kernel("integer out of range"));
        let mut q = fq_pie("flows 8");
        let r = q.change(&Opts::new(p("flows 8 limit 5").unwrap()), &dev(), t(0));
        assert_eq!(r.unwrap_err(), TcError::kernel("sch_fq_pie: Number of flows cannot be changed"));
        assert_eq!(q.params.limit, 5, "the limit before the flows check stays changed");
        q.change(&Opts::new(p("quantum 1").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!(q.quantum, 256, "6.12.117's floor");
    }

    /// Deficit round robin: new flows first, a flow that spends its quantum goes to
    /// the tail of the old flows, an empty old flow leaves.
    #[test]
    fn drr_over_new_and_old_flows() {
        let mut q = fq_pie("");
        for i in 0..3 {
            q.enqueue(to(i, 1, 1000), t(0));
        }
        for i in 10..13 {
            q.enqueue(to(i, 2, 1000), t(0));
        }
        assert_eq!((q.new_flows.len(), q.new_flow_count), (2, 2));
        let order: Vec<u64> = (0..6).map(|_| q.dequeue(ms(1)).packet().unwrap().id).collect();
        assert_eq!(order, [0, 1, 10, 11, 2, 12]);
        assert_eq!(q.dequeue(ms(1)), Dequeued::Empty);
        assert!(q.new_flows.is_empty() && q.old_flows.is_empty());
        assert!(q.flows.iter().all(|f| !f.listed));
        assert_eq!((q.stats().packets, q.memory_usage()), (6, 0));
    }

    #[test]
    fn limit_memory_and_trim() {
        let mut q = fq_pie("limit 3 memory_limit 1");
        let ts = Packet::new(0, 1000).truesize;
        let r: Vec<_> = (0..5).map(|i| q.enqueue(to(i, 3, 1000), t(0))).collect();
        use Enqueued::*;
        assert_eq!(r, [Success, Success, Success, Congested, Congested]);
        // Over memory from the third packet on (usage > limit + truesize), counted only.
        assert_eq!((q.overmemory, q.memory_usage(), q.pie_stats().overlimit), (1, 3 * ts, 2));
        assert_eq!((q.stats().drops, q.pie_stats().dropped, q.pie_stats().packets_in), (2, 2, 3));
        // A lower limit dequeues (counted as sent) and reports the rest up.
        q.change(&Opts::new(p("limit 1").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.stats().qlen, q.stats().packets, q.memory_usage()), (1, 2, ts));
        assert_eq!(q.take_reduce(), crate::stats::Reduce::new(2, 2000));
    }

    /// The timer updates 2048 buckets per run: with 4096, the second half one jiffy
    /// after the first.
    #[test]
    fn timer_batches() {
        let mut q = fq_pie("flows 4096");
        for i in 0..3 {
            q.enqueue(to(i, 3001, 1000), t(0));
        }
        q.dequeue(ms(300)); // bucket 3000 measures 300 ms, two packets left
        assert_eq!(q.flow_vars(3000).qdelay, 300_000_000 >> 6);
        q.enqueue(to(9, 1, 100), ms(500));
        assert_eq!(q.flow_vars(3000).prob, 0, "not reached in the first run");
        q.enqueue(to(10, 1, 100), ms(504));
        let mut v = PieVars { qdelay: 300_000_000 >> 6, ..Default::default() };
        (v.burst_time, v.dq_tstamp) = (q.flow_vars(3000).burst_time, q.flow_vars(3000).dq_tstamp);
        pie_calculate_probability(&PieParams { limit: 10240, ..Default::default() }, &mut v, 2000);
        assert_eq!(q.flow_vars(3000).prob, v.prob);
        assert!(v.prob > MAX_PROB / 50);
        // An hour idle: the catch-up stops at the first round that changes nothing and
        // keeps the phase: rounds of 20 ms (first half at 500 ms + k·20 ms, the
        // second half a jiffy later).
        let mut q = fq_pie("flows 4096");
        q.enqueue(to(11, 1, 100), t(3_600_000_000_000));
        let next = q.next_update.as_nanos();
        assert!(next > 3_600_000_000_000 && next <= 3_600_020_000_000);
        assert!([0, 4_000_000].contains(&((next - 500_000_000) % 20_000_000)));
    }

    #[test]
    fn ecn_marks_under_ecn_prob() {
        let mut q = fq_pie("ecn ecn_prob 50");
        let f = &mut q.flows[0];
        f.vars = PieVars {
            burst_time: 0,
            qdelay: 1 << 20,
            prob: MAX_PROB / 4,
            accu_prob: 9 * MAX_PROB,
            ..Default::default()
        };
        f.backlog = 10_000;
        let mut pk = to(0, 1, 1000);
        pk.tos = 0x01;
        assert_eq!(q.enqueue(pk, t(0)), Enqueued::Success);
        assert_eq!(q.pie_stats().ecn_mark, 1);
        // (Joining the list reset the bucket's backlog to this packet's.)
        (q.flows[0].vars.accu_prob, q.flows[0].backlog) = (9 * MAX_PROB, 10_000);
        assert_eq!(q.enqueue(to(1, 1, 1000), t(0)), Enqueued::Congested, "Not-ECT is dropped");
        assert_eq!(q.flows[0].vars.accu_prob, 0);
    }
}
