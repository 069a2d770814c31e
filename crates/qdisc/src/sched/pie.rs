//! PIE — Proportional Integral controller Enhanced (RFC 8033): the controller shared
//! with fq_pie (include/net/pie.h and the exported functions of net/sched/sch_pie.c)
//! and the `pie` qdisc (net/sched/sch_pie.c, tc/q_pie.c); §20 of
//! docs/kernel-notes.md.
//!
//! Theory: PIE drops (or ECN-marks) at *enqueue* with a probability `prob` that a
//! periodic update (every `tupdate`) moves by α·(delay − target) + β·(delay −
//! previous delay): proportional to how far the queueing delay is from the target,
//! plus a term for its trend. The delay is the head packet's sojourn time measured
//! at dequeue (timestamps, the default) or, with `dq_rate_estimator`, the backlog
//! divided by a measured drain rate. α and β are scaled down while `prob` is small
//! (the "auto-tuning" of RFC 8033), a delay above 250 ms adds 2% at once, and two
//! updates with zero delay decay `prob` by 1/64. New queues get a burst allowance
//! (150 ms) during which nothing is dropped early; early drops are also skipped
//! while the delay is under half the target with `prob` < 20%, or with less than two
//! MTUs queued. The drop decision de-randomises with an accumulated probability:
//! never below 0.85, always from 8.5.
//!
//! Everything is the kernel's fixed point: `prob` is a u64 with MAX_PROB = 2^56 − 1
//! standing for 1, delays are PSCHED ticks (64 ns), the drain rate bytes per tick
//! scaled by 2^8.
//!
//! Differences from the kernel, all deliberate:
//! * **Randomness**: `get_random_bytes` in `pie_drop_early` draws from a splitmix64
//!   generator seeded from the qdisc handle (or [`Pie::set_seed`]).
//! * **Timer**: the kernel's `adapt_timer` first fires HZ/2 jiffies after init, then
//!   every `tupdate` jiffies (Debian's HZ = 250: 4 ms per jiffy). Time is passed in
//!   here: the update runs at the first enqueue/dequeue/peek/change at or after each
//!   deadline, once per deadline, all with the backlog of that moment (nothing else
//!   changes between two of them); once an update leaves the state as it found it,
//!   the remaining deadlines up to `now` are skipped. Deadlines count from the init
//!   instant, not from jiffy boundaries. State shown by `tc -s` is as of the last
//!   operation.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::codel::print_time_opt;
use crate::sched::sfq::SplitMix64;
use crate::tc::{units, Args, Out, TcError};
use crate::time::{Duration, Instant, HZ};

/// MAX_PROB: probability 1.
pub const MAX_PROB: u64 = u64::MAX >> 8;
/// DTIME_INVALID.
const DTIME_INVALID: u64 = u64::MAX;
/// QUEUE_THRESHOLD, bytes.
const QUEUE_THRESHOLD: u32 = 16384;
/// DQCOUNT_INVALID.
const DQCOUNT_INVALID: u64 = u64::MAX;
/// PIE_SCALE.
const PIE_SCALE: u32 = 8;
/// PSCHED_SHIFT and PSCHED_TICKS_PER_SEC.
const PSCHED_SHIFT: u32 = 6;
const PSCHED_TICKS_PER_SEC: u64 = 1_000_000_000 >> PSCHED_SHIFT;
/// One jiffy, in µs.
const JIFFY_US: u32 = (1_000_000 / HZ) as u32;
/// The first timer expiry after init, HZ/2 jiffies.
pub const FIRST_UPDATE: Duration = Duration::from_millis(500);

/// `psched_get_time` at `now`.
pub fn psched_time(now: Instant) -> u64 {
    now.as_nanos() >> PSCHED_SHIFT
}
/// `PSCHED_NS2TICKS(us * NSEC_PER_USEC)`: what a change stores for a time in µs.
pub fn us_to_ticks(us: u32) -> u64 {
    (us as u64 * 1000) >> PSCHED_SHIFT
}
/// `(u32)PSCHED_TICKS2NS(t) / NSEC_PER_USEC`: what the dumps send back.
pub fn ticks_to_us(t: u64) -> u32 {
    (t << PSCHED_SHIFT) as u32 / 1000
}
/// `usecs_to_jiffies` at HZ = 250 (u32 arithmetic, as the kernel's for this HZ).
pub fn usecs_to_jiffies(us: u32) -> u32 {
    us.wrapping_add(JIFFY_US - 1) / JIFFY_US
}
/// `jiffies_to_usecs` at HZ = 250.
pub fn jiffies_to_usecs(j: u32) -> u32 {
    j.wrapping_mul(JIFFY_US)
}
/// The timer period of `tupdate` jiffies.
pub fn tupdate_period(tupdate: u32) -> Duration {
    Duration::from_micros(tupdate as u64 * JIFFY_US as u64)
}

/// `struct pie_params`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieParams {
    /// PSCHED ticks.
    pub target: u64,
    /// Jiffies.
    pub tupdate: u32,
    pub limit: u32,
    pub alpha: u32,
    pub beta: u32,
    /// u8 in the kernel (the netlink u32 is truncated).
    pub ecn: u8,
    pub bytemode: u8,
    pub dq_rate_estimator: u8,
}

impl Default for PieParams {
    /// `pie_params_init`: target 15 ms, tupdate 15 ms (4 jiffies), limit 1000,
    /// α 2, β 20.
    fn default() -> Self {
        PieParams {
            target: us_to_ticks(15_000),
            tupdate: usecs_to_jiffies(15_000),
            limit: 1000,
            alpha: 2,
            beta: 20,
            ecn: 0,
            bytemode: 0,
            dq_rate_estimator: 0,
        }
    }
}

/// `struct pie_vars`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieVars {
    /// PSCHED ticks.
    pub qdelay: u64,
    pub qdelay_old: u64,
    pub burst_time: u64,
    pub dq_tstamp: u64,
    /// MAX_PROB-scaled.
    pub prob: u64,
    pub accu_prob: u64,
    pub dq_count: u64,
    /// Bytes per tick, 2^8-scaled.
    pub avg_dq_rate: u32,
    pub backlog_old: u32,
}

impl Default for PieVars {
    /// A zeroed `pie_vars` after `pie_vars_init`.
    fn default() -> Self {
        let mut v = PieVars {
            qdelay: 0,
            qdelay_old: 0,
            burst_time: 0,
            dq_tstamp: 0,
            prob: 0,
            accu_prob: 0,
            dq_count: 0,
            avg_dq_rate: 0,
            backlog_old: 0,
        };
        v.init();
        v
    }
}

impl PieVars {
    /// `pie_vars_init` (prob and the delays are left as they are).
    pub fn init(&mut self) {
        self.burst_time = us_to_ticks(150_000);
        self.dq_tstamp = DTIME_INVALID;
        self.accu_prob = 0;
        self.dq_count = DQCOUNT_INVALID;
        self.avg_dq_rate = 0;
    }
}

/// `struct pie_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PieStats {
    pub packets_in: u32,
    pub dropped: u32,
    pub overlimit: u32,
    pub maxq: u32,
    pub ecn_mark: u32,
}

/// `pie_drop_early`: should a packet of `packet_size` bytes arriving on `backlog`
/// bytes be dropped (or marked)? `mtu` is `psched_mtu` of the device, `random`
/// `get_random_bytes` of 8 bytes.
pub fn pie_drop_early(
    params: &PieParams,
    vars: &mut PieVars,
    backlog: u32,
    packet_size: u32,
    mtu: u32,
    random: impl FnOnce() -> u64,
) -> bool {
    if vars.burst_time > 0 {
        return false;
    }
    if vars.qdelay < params.target / 2 && vars.prob < MAX_PROB / 5 {
        return false;
    }
    if (backlog as u64) < 2 * mtu as u64 {
        return false;
    }
    let local_prob = if params.bytemode != 0 && packet_size <= mtu {
        (packet_size as u64).wrapping_mul(vars.prob / mtu as u64)
    } else {
        vars.prob
    };
    if local_prob == 0 {
        vars.accu_prob = 0;
    } else {
        vars.accu_prob = vars.accu_prob.wrapping_add(local_prob);
    }
    if vars.accu_prob < (MAX_PROB / 100) * 85 {
        return false;
    }
    if vars.accu_prob >= (MAX_PROB / 2) * 17 {
        return true;
    }
    if (random() >> 8) < local_prob {
        vars.accu_prob = 0;
        return true;
    }
    false
}

/// What both PIE qdiscs' enqueue decide for a packet within the limit: no early
/// drop, or a drop turned into a CE mark (ecn on, prob ≤ `mark_below`, an ECT
/// packet). An admitted packet is stamped (without the estimator) and counted in
/// `packets_in`; a refused one must then go through [`pie_refuse`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn pie_admit(
    params: &PieParams,
    vars: &mut PieVars,
    stats: &mut PieStats,
    backlog: u32,
    pkt: &mut Packet,
    mtu: u32,
    mark_below: u64,
    rng: &mut SplitMix64,
    now: Instant,
) -> bool {
    if pie_drop_early(params, vars, backlog, pkt.len, mtu, || rng.next_u64()) {
        if !(params.ecn != 0 && vars.prob <= mark_below && pkt.set_ce()) {
            return false;
        }
        stats.ecn_mark = stats.ecn_mark.wrapping_add(1);
    }
    if params.dq_rate_estimator == 0 {
        pkt.enqueued_at = now;
    }
    stats.packets_in = stats.packets_in.wrapping_add(1);
    true
}

/// The drop path of both enqueues (`out:`): dropped + 1, the accumulated
/// probability cleared, the qdisc's drops + 1.
pub fn pie_refuse(stats: &mut PieStats, vars: &mut PieVars, sch: &mut Sch) {
    stats.dropped = stats.dropped.wrapping_add(1);
    vars.accu_prob = 0;
    sch.stats.dropped();
}

/// `pie_process_dequeue` for a packet of `len` bytes stamped `enqueued` (PSCHED
/// ticks), leaving `backlog` bytes behind, at `now`.
pub fn pie_process_dequeue(params: &PieParams, vars: &mut PieVars, len: u32, enqueued: u64, backlog: u32, now: u64) {
    let mut dtime: u32 = 0;
    if params.dq_rate_estimator == 0 {
        vars.qdelay = now.wrapping_sub(enqueued);
        if vars.dq_tstamp != DTIME_INVALID {
            dtime = now.wrapping_sub(vars.dq_tstamp) as u32;
        }
        vars.dq_tstamp = now;
        if backlog == 0 {
            vars.qdelay = 0;
        }
        if dtime == 0 {
            return;
        }
    } else {
        if backlog >= QUEUE_THRESHOLD && vars.dq_count == DQCOUNT_INVALID {
            vars.dq_tstamp = now;
            vars.dq_count = 0;
        }
        if vars.dq_count == DQCOUNT_INVALID {
            return;
        }
        vars.dq_count = vars.dq_count.wrapping_add(len as u64);
        if vars.dq_count < QUEUE_THRESHOLD as u64 {
            return;
        }
        let count = (vars.dq_count << PIE_SCALE) as u32;
        dtime = now.wrapping_sub(vars.dq_tstamp) as u32;
        if dtime == 0 {
            return;
        }
        let count = count / dtime;
        vars.avg_dq_rate = if vars.avg_dq_rate == 0 {
            count
        } else {
            (vars.avg_dq_rate - (vars.avg_dq_rate >> 3)).wrapping_add(count >> 3)
        };
        if backlog < QUEUE_THRESHOLD {
            vars.dq_count = DQCOUNT_INVALID;
        } else {
            vars.dq_count = 0;
            vars.dq_tstamp = now;
        }
    }
    // burst_allowance_reduction
    if vars.burst_time > 0 {
        vars.burst_time = vars.burst_time.saturating_sub(dtime as u64);
    }
}

/// `pie_calculate_probability` with `backlog` bytes queued.
pub fn pie_calculate_probability(params: &PieParams, vars: &mut PieVars, backlog: u32) {
    let (qdelay, qdelay_old);
    if params.dq_rate_estimator != 0 {
        qdelay_old = vars.qdelay;
        vars.qdelay_old = vars.qdelay;
        qdelay = if vars.avg_dq_rate > 0 { (backlog << PIE_SCALE) as u64 / vars.avg_dq_rate as u64 } else { 0 };
    } else {
        qdelay = vars.qdelay;
        qdelay_old = vars.qdelay_old;
    }
    // Zero delay with a backlog: too little queued to tell; no decay this round.
    let mut update_prob = !(qdelay == 0 && backlog != 0);

    let mut alpha = (params.alpha as u64).wrapping_mul(MAX_PROB / PSCHED_TICKS_PER_SEC) >> 4;
    let mut beta = (params.beta as u64).wrapping_mul(MAX_PROB / PSCHED_TICKS_PER_SEC) >> 4;
    if vars.prob < MAX_PROB / 10 {
        alpha >>= 1;
        beta >>= 1;
        let mut power: u32 = 100;
        while vars.prob < MAX_PROB / power as u64 && power <= 1_000_000 {
            alpha >>= 2;
            beta >>= 2;
            power *= 10;
        }
    }
    let mut delta: i64 = 0;
    delta = delta.wrapping_add(alpha.wrapping_mul(qdelay.wrapping_sub(params.target)) as i64);
    delta = delta.wrapping_add(beta.wrapping_mul(qdelay.wrapping_sub(qdelay_old)) as i64);
    let oldprob = vars.prob;
    if delta > (MAX_PROB / 50) as i64 && vars.prob >= MAX_PROB / 10 {
        delta = ((MAX_PROB / 100) * 2) as i64;
    }
    if qdelay > us_to_ticks(250_000) {
        delta = delta.wrapping_add((MAX_PROB / 50) as i64);
    }
    vars.prob = vars.prob.wrapping_add(delta as u64);
    if delta > 0 {
        if vars.prob < oldprob {
            vars.prob = MAX_PROB;
            update_prob = false;
        }
    } else if vars.prob > oldprob {
        vars.prob = 0;
    }
    if qdelay == 0 && qdelay_old == 0 && update_prob {
        vars.prob -= vars.prob / 64;
    }
    vars.qdelay = qdelay;
    vars.backlog_old = backlog;
    if vars.qdelay < params.target / 2
        && vars.qdelay_old < params.target / 2
        && vars.prob == 0
        && (params.dq_rate_estimator == 0 || vars.avg_dq_rate > 0)
    {
        vars.init();
    }
    if params.dq_rate_estimator == 0 {
        vars.qdelay_old = qdelay;
    }
}

/// q_pie.c / q_fq_pie.c: target and tupdate (µs in JSON, sprint_time in text).
pub fn print_times(out: &mut Out, p: &PieParams) {
    print_time_opt(out, "target", ticks_to_us(p.target));
    print_time_opt(out, "tupdate", jiffies_to_usecs(p.tupdate));
}

/// q_pie.c / q_fq_pie.c: `ecn`, `bytemode`, `dq_rate_estimator` when non-zero.
pub fn print_flags(out: &mut Out, p: &PieParams) {
    for (v, name) in [(p.ecn, "ecn"), (p.bytemode, "bytemode"), (p.dq_rate_estimator, "dq_rate_estimator")] {
        if v != 0 {
            out.boolean(name, format_args!("{name} "), true);
        }
    }
}

/// The default seed of the generator of a PIE qdisc with handle `handle`.
pub fn default_seed(handle: u32) -> u64 {
    0x5049_4521_0000_0000 ^ handle as u64
}

// ---- the pie qdisc ------------------------------------------------------------------------

/// What tc sends for pie: TCA_OPTIONS always, each attribute only when given (a
/// zero limit/target/tupdate/alpha/beta is not sent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PieOpt {
    pub limit: Option<u32>,
    /// µs.
    pub target: Option<u32>,
    /// µs.
    pub tupdate: Option<u32>,
    pub alpha: Option<u32>,
    pub beta: Option<u32>,
    pub ecn: Option<u32>,
    pub bytemode: Option<u32>,
    pub dq_rate_estimator: Option<u32>,
}

/// ALPHA_MAX / BETA_MAX of q_pie.c and q_fq_pie.c.
pub const ALPHA_MAX: u32 = 32;

/// q_pie.c `explain`.
const USAGE: &str = "Usage: ... pie [ limit PACKETS ] [ target TIME ]\n\
\x20              [ tupdate TIME ] [ alpha ALPHA ] [ beta BETA ]\n\
\x20              [ bytemode | nobytemode ] [ ecn | noecn ]\n\
\x20              [ dq_rate_estimator | no_dq_rate_estimator ]\n";

/// The options q_pie.c and q_fq_pie.c share, parsed into `o`; `Ok(false)` when `a`
/// is not one of them.
pub fn parse_common(a: &str, args: &mut Args, o: &mut PieOpt) -> Result<bool, TcError> {
    let ill = |what: &str| TcError::tc(format!("Illegal \"{what}\"\n"));
    let nz = |v: u32| (v != 0).then_some(v);
    match a {
        "limit" => o.limit = nz(units::get_u32(args.value()?).ok_or_else(|| ill("limit"))?),
        "target" => o.target = nz(units::get_time(args.value()?).ok_or_else(|| ill("target"))?),
        "tupdate" => o.tupdate = nz(units::get_time(args.value()?).ok_or_else(|| ill("tupdate"))?),
        "alpha" => {
            let v = units::get_u32(args.value()?).filter(|&v| v <= ALPHA_MAX).ok_or_else(|| ill("alpha"))?;
            o.alpha = nz(v);
        }
        "beta" => {
            let v = units::get_u32(args.value()?).filter(|&v| v <= ALPHA_MAX).ok_or_else(|| ill("beta"))?;
            o.beta = nz(v);
        }
        "ecn" => o.ecn = Some(1),
        "noecn" => o.ecn = Some(0),
        "bytemode" => o.bytemode = Some(1),
        "nobytemode" => o.bytemode = Some(0),
        "dq_rate_estimator" => o.dq_rate_estimator = Some(1),
        "no_dq_rate_estimator" => o.dq_rate_estimator = Some(0),
        _ => return Ok(false),
    }
    Ok(true)
}

/// tc side: q_pie.c `pie_parse_opt`.
pub fn parse(args: &mut Args) -> Result<PieOpt, TcError> {
    let mut o = PieOpt::default();
    while let Some(a) = args.next() {
        if parse_common(a, args, &mut o)? {
            continue;
        }
        if a == "help" {
            return Err(TcError::tc(USAGE));
        }
        return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}")));
    }
    Ok(o)
}

/// The parameters a change sets (`pie_change`, and the same part of `fq_pie_change`).
pub fn apply_params(p: &mut PieParams, o: &PieOpt) {
    if let Some(t) = o.target {
        p.target = us_to_ticks(t);
    }
    if let Some(t) = o.tupdate {
        p.tupdate = usecs_to_jiffies(t);
    }
    if let Some(l) = o.limit {
        p.limit = l;
    }
    if let Some(a) = o.alpha {
        p.alpha = a;
    }
    if let Some(b) = o.beta {
        p.beta = b;
    }
    if let Some(v) = o.ecn {
        p.ecn = v as u8;
    }
    if let Some(v) = o.bytemode {
        p.bytemode = v as u8;
    }
    if let Some(v) = o.dq_rate_estimator {
        p.dq_rate_estimator = v as u8;
    }
}

/// Kernel side: `struct pie_sched_data` plus the queue (`sch->q`).
pub struct Pie {
    params: PieParams,
    vars: PieVars,
    stats: PieStats,
    q: VecDeque<Packet>,
    /// `psched_mtu(qdisc_dev(sch))`.
    mtu: u32,
    rng: SplitMix64,
    /// The adaptive timer's next expiry.
    next_update: Instant,
}

/// `pie_init` works without options.
pub static OPS: Ops = Ops {
    id: "pie",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Pie::new(c.opts()?, c.dev, c.handle, c.now))),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Pie {
    /// `pie_init`: defaults, then `pie_change` with the options, then the timer.
    pub fn new(o: Option<&PieOpt>, dev: &DevInfo, handle: u32, now: Instant) -> Pie {
        let mut q = Pie {
            params: PieParams::default(),
            vars: PieVars::default(),
            stats: PieStats::default(),
            q: VecDeque::new(),
            mtu: dev.psched_mtu(),
            rng: SplitMix64(default_seed(handle)),
            next_update: now + FIRST_UPDATE,
        };
        if let Some(o) = o {
            apply_params(&mut q.params, o);
        }
        q
    }

    /// Re-seed the generator behind `get_random_bytes`.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
    }

    /// `pie_timer` for every deadline up to `now`.
    fn run_timer(&mut self, sch: &Sch, now: Instant) {
        while self.next_update <= now {
            let before = self.vars;
            pie_calculate_probability(&self.params, &mut self.vars, sch.stats.backlog);
            let period = tupdate_period(self.params.tupdate);
            if before == self.vars && period.as_nanos() > 0 {
                // A fixed point: the later updates up to `now` change nothing.
                let n = (now - self.next_update).as_nanos() / period.as_nanos();
                self.next_update += Duration::from_nanos(n * period.as_nanos());
            }
            self.next_update += period;
            if period.as_nanos() == 0 {
                // tupdate 0 (only from a raw netlink user) stops the timer.
                self.next_update = Instant::from_nanos(u64::MAX);
            }
        }
    }

    // ---- accessors (tests) ----------------------------------------------------------

    pub fn params(&self) -> &PieParams {
        &self.params
    }
    pub fn vars(&self) -> &PieVars {
        &self.vars
    }
    pub fn pie_stats(&self) -> PieStats {
        self.stats
    }
}

impl Qdisc for Pie {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `pie_qdisc_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.run_timer(sch, now);
        if sch.stats.qlen >= self.params.limit {
            self.stats.overlimit = self.stats.overlimit.wrapping_add(1);
        } else {
            let backlog = sch.stats.backlog;
            let (v, st) = (&mut self.vars, &mut self.stats);
            if pie_admit(&self.params, v, st, backlog, &mut pkt, self.mtu, MAX_PROB / 10, &mut self.rng, now) {
                if sch.stats.qlen > self.stats.maxq {
                    self.stats.maxq = sch.stats.qlen;
                }
                sch.stats.queued(pkt.len);
                self.q.push_back(pkt);
                return Enqueued::Success;
            }
        }
        pie_refuse(&mut self.stats, &mut self.vars, sch);
        Enqueued::Dropped
    }

    /// `pie_qdisc_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.run_timer(sch, now);
        let Some(p) = self.q.pop_front() else { return Dequeued::Empty };
        sch.stats.unqueued(p.len);
        sch.stats.sent(&p);
        let enq = psched_time(p.enqueued_at);
        pie_process_dequeue(&self.params, &mut self.vars, p.len, enq, sch.stats.backlog, psched_time(now));
        Dequeued::Packet(p)
    }

    // peek: qdisc_peek_dequeued (the default).

    /// `pie_reset`.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.q.clear();
        self.vars.init();
    }

    /// `pie_change`: the parameters, then packets beyond a lower limit leave from the
    /// head (the parked one first) as drops, reported up.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        let o: &PieOpt = opts.of()?;
        self.run_timer(sch, now);
        apply_params(&mut self.params, o);
        self.mtu = dev.psched_mtu();
        let (mut n, mut bytes) = (0i32, 0i64);
        while sch.stats.qlen > self.params.limit {
            let Some(p) = sch.take_parked().or_else(|| {
                let p = self.q.pop_front()?;
                sch.stats.unqueued(p.len);
                Some(p)
            }) else {
                break;
            };
            sch.stats.dropped();
            n += 1;
            bytes += p.len as i64;
            p.kfree_skb();
        }
        sch.reduce(n, bytes);
        Ok(())
    }

    /// `pie_dump` printed by `pie_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let p = &self.params;
        out.uint("limit", format_args!("limit {}p ", p.limit), p.limit as u64);
        print_times(out, p);
        out.uint("alpha", format_args!("alpha {} ", p.alpha), p.alpha as u64);
        out.uint("beta", format_args!("beta {} ", p.beta), p.beta as u64);
        print_flags(out, p);
    }

    /// `pie_dump_stats` printed by `pie_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let prob = (self.vars.prob << 8) as f64 / u64::MAX as f64;
        let g = units::fmt_g(prob, 6);
        out.float("prob", format_args!("  prob {g}"), &g);
        let delay = ticks_to_us(self.vars.qdelay);
        out.uint("delay", format_args!(" delay {}", units::fmt_time(delay)), delay as u64);
        if self.params.dq_rate_estimator != 0 {
            let rate = ((self.vars.avg_dq_rate as u64 * PSCHED_TICKS_PER_SEC) >> PIE_SCALE) as u32;
            out.uint("avg_dq_rate", format_args!(" avg_dq_rate {rate}"), rate as u64);
        }
        out.nl();
        let s = &self.stats;
        out.uint("pkts_in", format_args!("  pkts_in {}", s.packets_in), s.packets_in as u64);
        out.uint("overlimit", format_args!(" overlimit {}", s.overlimit), s.overlimit as u64);
        out.uint("dropped", format_args!(" dropped {}", s.dropped), s.dropped as u64);
        out.uint("maxq", format_args!(" maxq {}", s.maxq), s.maxq as u64);
        out.uint("ecn_mark", format_args!(" ecn_mark {}", s.ecn_mark), s.ecn_mark as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::testing::{argv, dev, held, ms, t};

    fn p(s: &str) -> Result<PieOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn pie(s: &str) -> Node<Pie> {
        held(Pie::new(Some(&p(s).unwrap()), &dev(), 0x10000, t(0)))
    }
    fn ticks_ms(n: u64) -> u64 {
        (n * 1_000_000) >> PSCHED_SHIFT
    }

    #[test]
    fn units_as_the_kernel_keeps_them() {
        let d = PieParams::default();
        assert_eq!((d.target, d.tupdate, d.limit, d.alpha, d.beta), (234375, 4, 1000, 2, 20));
        // Dumped: 15 ms and 4 jiffies = 16 ms; 5 s wraps the u32 ns (705 ms).
        assert_eq!((ticks_to_us(d.target), jiffies_to_usecs(d.tupdate)), (15000, 16000));
        assert_eq!(ticks_to_us(us_to_ticks(5_000_000)), 705032);
        assert_eq!((usecs_to_jiffies(1), usecs_to_jiffies(30_000), usecs_to_jiffies(1_000_000)), (1, 8, 250));
        let v = PieVars::default();
        assert_eq!((v.burst_time, v.dq_tstamp, v.dq_count), (2343750, DTIME_INVALID, DQCOUNT_INVALID));
        assert_eq!(p("alpha 0 beta 0 limit 0").unwrap(), PieOpt::default(), "zeros are not sent");
        assert_eq!(p("alpha 33").unwrap_err(), TcError::tc("Illegal \"alpha\"\n"));
    }

    /// Four updates at a steady 30 ms delay (target 15 ms, α 2, β 20): α and β are
    /// halved, then quartered while prob < 1%, 0.1%, … (RFC 8033's auto-tuning).
    #[test]
    fn drop_probability_after_n_updates() {
        let params = PieParams::default();
        let mut v = PieVars { qdelay: ticks_ms(30), ..Default::default() };
        let mut probs = Vec::new();
        for _ in 0..4 {
            pie_calculate_probability(&params, &mut v, 10_000);
            probs.push(v.prob);
        }
        // 1st: α' = 281474, β' = 2814749: α'·15 ms + β'·30 ms (in ticks).
        assert_eq!(probs[0], 281474 * 234375 + 2814749 * 468750);
        assert_eq!(probs, [1385384062500, 2440915078125, 3496446093750, 4551977109375]);
        assert_eq!((v.qdelay_old, v.backlog_old), (ticks_ms(30), 10_000));
        // Above 250 ms: +2% at once.
        let mut v = PieVars { qdelay: ticks_ms(300), ..Default::default() };
        pie_calculate_probability(&params, &mut v, 10_000);
        assert_eq!(v.prob, 1455599455602308);
        assert!(v.prob > MAX_PROB / 50);
        // No delay: α·(0 − target) takes a small prob to 0 (no underflow) …
        let mut v = PieVars { prob: 6400, burst_time: 0, ..Default::default() };
        pie_calculate_probability(&params, &mut v, 0);
        assert_eq!(v.prob, 0);
        // … and with nothing to move it (target 0), two zero delays decay it by 1/64.
        let mut v = PieVars { prob: 6400, burst_time: 0, ..Default::default() };
        pie_calculate_probability(&PieParams { target: 0, ..params }, &mut v, 0);
        assert_eq!(v.prob, 6300);
        // At 0 with both delays under target/2 the measurement cycle restarts.
        let mut v = PieVars { prob: 1, burst_time: 0, dq_count: 5, ..Default::default() };
        pie_calculate_probability(&params, &mut v, 0);
        assert_eq!((v.prob, v.burst_time, v.dq_count), (0, 2343750, DQCOUNT_INVALID));
    }

    /// The burst allowance shrinks by the time between dequeues.
    #[test]
    fn burst_allowance() {
        let params = PieParams::default();
        let mut v = PieVars::default();
        pie_process_dequeue(&params, &mut v, 1000, ticks_ms(5), 5000, ticks_ms(10));
        assert_eq!((v.qdelay, v.dq_tstamp, v.burst_time), (ticks_ms(5), ticks_ms(10), 2343750));
        pie_process_dequeue(&params, &mut v, 1000, ticks_ms(5), 5000, ticks_ms(20));
        assert_eq!((v.qdelay, v.burst_time), (ticks_ms(15), 2343750 - 156250));
        pie_process_dequeue(&params, &mut v, 1000, ticks_ms(5), 0, ticks_ms(200));
        assert_eq!((v.qdelay, v.burst_time), (0, 0), "empty: no delay; allowance spent");
        // With no allowance and delay ≥ target/2, drops accumulate to 8.5 then are certain.
        let mut v = PieVars { burst_time: 0, qdelay: ticks_ms(10), prob: MAX_PROB / 2, ..Default::default() };
        let drops: Vec<bool> =
            (0..17).map(|_| pie_drop_early(&params, &mut v, 4000, 1000, 1514, || u64::MAX)).collect();
        assert_eq!(drops.iter().filter(|&&d| d).count(), 1);
        assert!(drops[16]);
        assert!(!pie_drop_early(&params, &mut v, 3000, 1000, 1514, || 0), "fewer than two MTUs queued");
    }

    /// dq_rate_estimator: 16 KiB drained in 1 ms is 268 bytes/tick·2^8, dumped as
    /// bytes/s.
    #[test]
    fn dq_rate_estimation() {
        let params = PieParams { dq_rate_estimator: 1, ..PieParams::default() };
        let mut v = PieVars::default();
        pie_process_dequeue(&params, &mut v, 1000, 0, 20_000, ticks_ms(10));
        assert_eq!((v.dq_count, v.dq_tstamp), (1000, ticks_ms(10)));
        pie_process_dequeue(&params, &mut v, 15_384, 0, 10_000, ticks_ms(11));
        assert_eq!((v.avg_dq_rate, v.dq_count), (268, DQCOUNT_INVALID));
        assert_eq!((v.avg_dq_rate as u64 * PSCHED_TICKS_PER_SEC) >> PIE_SCALE, 16357421);
        // The estimated delay: backlog·2^8 / rate.
        pie_calculate_probability(&params, &mut v, 20_000);
        assert_eq!(v.qdelay, (20_000u64 << 8) / 268);
    }

    /// The timer: first 500 ms after init, then every tupdate (16 ms), each run
    /// with the backlog of the moment.
    #[test]
    fn timer_on_passed_in_time() {
        let mut q = pie("limit 100");
        for i in 0..10 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        // A dequeue at 300 ms measures 300 ms of delay.
        q.dequeue(ms(300));
        assert_eq!(q.vars().qdelay, ticks_ms(300));
        assert_eq!(q.vars().prob, 0);
        q.enqueue(Packet::new(10, 1000), ms(499));
        assert_eq!(q.vars().prob, 0);
        q.enqueue(Packet::new(11, 1000), ms(500));
        let mut v = PieVars { qdelay: ticks_ms(300), ..Default::default() };
        v.burst_time = q.vars().burst_time;
        v.dq_tstamp = q.vars().dq_tstamp;
        pie_calculate_probability(&PieParams { limit: 100, ..Default::default() }, &mut v, 10_000);
        assert_eq!(q.vars().prob, v.prob);
        q.enqueue(Packet::new(12, 1000), ms(531)); // the 516 ms deadline; 532 ms is ahead
        pie_calculate_probability(&PieParams { limit: 100, ..Default::default() }, &mut v, 11_000);
        assert_eq!(q.vars().prob, v.prob);
        let st = q.pie_stats();
        assert_eq!((st.packets_in, st.maxq), (13, 11));
    }

    #[test]
    fn limit_and_lower_limit() {
        let mut q = pie("limit 2");
        assert_eq!(q.enqueue(Packet::new(0, 100), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(1, 100), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 100), t(0)), Enqueued::Dropped);
        assert_eq!((q.pie_stats().overlimit, q.pie_stats().dropped, q.stats().drops), (1, 1, 1));
        q.peek(t(0));
        q.change(&Opts::new(p("limit 1").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (1, 100, 2));
        assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 100));
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1, "the parked head went first");
    }
}
