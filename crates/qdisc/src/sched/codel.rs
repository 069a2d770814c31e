//! CoDel — the shared Controlled-Delay core (include/net/codel.h, codel_impl.h)
//! and the `codel` qdisc built on it (net/sched/sch_codel.c, tc/q_codel.c);
//! §10.6 and §11 of docs/kernel-notes.md. fq_codel runs the same core once per bucket.
//!
//! Theory (RFC 8289, Linux flavour): CoDel watches the *sojourn time* of the packet
//! at the head of its queue. While that delay stays below `target`, nothing
//! happens. Once it has stayed at or above `target` for a whole `interval` (and
//! the queue holds more than one MTU), CoDel enters the dropping state: it drops
//! (or ECN-marks) one packet and schedules the next drop at `interval/√count`
//! later, so the drop rate rises as the square root of the number of drops until
//! the delay falls below `target` again. If the queue becomes bad again soon after
//! (within 16 intervals) the old drop rate is resumed instead of restarting at 1.
//!
//! Everything is done the kernel's way:
//! * time is kept in **CoDel units** of 1024 ns (`ns >> 10`) in a u32, compared
//!   with wrap-safe signed differences (`codel_time_after` …);
//! * `1/√count` is kept as a u16 in Q0.16 (`rec_inv_sqrt`) and refined by one
//!   Newton step per drop (`codel_Newton_step`), with the kernel's exact
//!   fixed-point truncations; the control law multiplies by it with
//!   `reciprocal_scale` instead of dividing.
//!
//! `CODEL_MAX_DROPS_PER_DEQUEUE` (256, "cap on drops per dequeue call, resync when
//! exceeded") appears in the newest include/net/codel.h, but no codel_impl.h that
//! could be read (torvalds/linux @ 0cfa80d3…, 02d8f11d…) uses it, and the 6.12
//! codel_impl.h predates it; it is therefore not implemented: one dequeue may
//! drop as many packets as the control law asks for.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{peek_dequeued, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::stats::{Reduce, Stats};
use crate::tc::{units, Args, Out, TcError};
use crate::time::Instant;

// ---- CoDel time ---------------------------------------------------------------------

/// `codel_time_t`: nanoseconds >> CODEL_SHIFT, wrapping u32.
pub type CodelTime = u32;
/// CODEL_SHIFT.
pub const CODEL_SHIFT: u32 = 10;
/// CODEL_DISABLED_THRESHOLD (INT_MAX): ce_threshold not set.
pub const CODEL_DISABLED_THRESHOLD: CodelTime = i32::MAX as u32;
/// REC_INV_SQRT_SHIFT: a u16 Q0.16 shifted to Q0.32.
const REC_INV_SQRT_SHIFT: u32 = 16;

/// `codel_get_time` at `now`.
pub fn codel_time(now: Instant) -> CodelTime {
    (now.as_nanos() >> CODEL_SHIFT) as u32
}
/// `codel_time_after(a, b)`.
pub fn time_after(a: CodelTime, b: CodelTime) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
/// `codel_time_after_eq(a, b)`.
pub fn time_after_eq(a: CodelTime, b: CodelTime) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}
/// `codel_time_before(a, b)`.
pub fn time_before(a: CodelTime, b: CodelTime) -> bool {
    time_after(b, a)
}
/// What `*_change` stores for a time given by tc in µs: `(us * NSEC_PER_USEC) >> CODEL_SHIFT`.
pub fn us_to_codel(us: u32) -> CodelTime {
    ((us as u64 * 1000) >> CODEL_SHIFT) as u32
}
/// `codel_time_to_us`: what the dump sends back (5 ms → 4999 µs).
pub fn codel_time_to_us(v: CodelTime) -> u32 {
    (((v as u64) << CODEL_SHIFT) / 1000) as u32
}
/// `reciprocal_scale(val, ep_ro)`: ⌊val × ep_ro / 2^32⌋.
pub fn reciprocal_scale(val: u32, ep_ro: u32) -> u32 {
    ((val as u64 * ep_ro as u64) >> 32) as u32
}

// ---- state ------------------------------------------------------------------------

/// `struct codel_params`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodelParams {
    pub target: CodelTime,
    pub ce_threshold: CodelTime,
    pub interval: CodelTime,
    /// Bytes: a queue holding at most this much is never dropped from.
    pub mtu: u32,
    pub ecn: bool,
    pub ce_threshold_selector: u8,
    pub ce_threshold_mask: u8,
}

impl CodelParams {
    /// `codel_params_init` plus `mtu`: target 5 ms, interval 100 ms, ce_threshold
    /// disabled, ECN off.
    pub fn new(mtu: u32) -> Self {
        CodelParams {
            target: ((5 * 1_000_000u64) >> CODEL_SHIFT) as u32,
            ce_threshold: CODEL_DISABLED_THRESHOLD,
            interval: ((100 * 1_000_000u64) >> CODEL_SHIFT) as u32,
            mtu,
            ecn: false,
            ce_threshold_selector: 0,
            ce_threshold_mask: 0,
        }
    }
}

/// The `mtu` both qdiscs derive at init (`codel_init`, `fq_codel_init`): psched_mtu,
/// clamped to [256, 2^20] where [`KernelVersion::quantum_bounds`] (6.12.117; not
/// 6.18.44, whose source uses psched_mtu as it is).
///
/// [`KernelVersion::quantum_bounds`]: crate::tree::KernelVersion::quantum_bounds
pub fn codel_mtu(dev: &DevInfo) -> u32 {
    if dev.kernel.quantum_bounds() {
        dev.psched_mtu().clamp(256, 1 << 20)
    } else {
        dev.psched_mtu()
    }
}

/// `struct codel_vars` (all zero after `codel_vars_init`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodelVars {
    /// Drops (or marks) since entering the dropping state (plus fq_codel's batch drops).
    pub count: u32,
    /// `count` when the dropping state was last entered.
    pub lastcount: u32,
    pub dropping: bool,
    /// ≈ 1/√count in Q0.16.
    pub rec_inv_sqrt: u16,
    /// When the delay will have been above target for a whole interval (0 = below).
    pub first_above_time: CodelTime,
    /// Next drop time in the dropping state (or the last one).
    pub drop_next: CodelTime,
    /// Sojourn time of the last packet looked at.
    pub ldelay: CodelTime,
}

/// `struct codel_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodelStats {
    /// Largest packet seen at dequeue.
    pub maxpacket: u32,
    /// Drops during the current dequeue call, to report to the parents.
    pub drop_count: u32,
    pub drop_len: u32,
    /// Packets CE-marked instead of dropped.
    pub ecn_mark: u32,
    /// Packets CE-marked because their sojourn exceeded ce_threshold.
    pub ce_mark: u32,
}

impl CodelStats {
    /// The qdiscs' `*_dequeue_drop`: hand this call's drops to `qdisc_tree_reduce_backlog`.
    pub fn flush_drops(&mut self, reduce: &mut Reduce) {
        if self.drop_count != 0 {
            reduce.add(self.drop_count as i32, self.drop_len as i64);
            self.drop_count = 0;
            self.drop_len = 0;
        }
    }
}

/// The queue CoDel works on: the kernel's `dequeue_func`/`drop_func` callbacks and
/// the `backlog` pointer.
pub trait CodelQueue {
    /// Take the head packet out of the queue, updating the qdisc's qlen/backlog
    /// (and whatever else the owner keeps per packet).
    fn dequeue(&mut self) -> Option<Packet>;
    /// Free a packet CoDel decided to drop, counting it in the qdisc's drops.
    fn drop(&mut self, pkt: Packet);
    /// The backlog in bytes compared with `mtu` (the whole qdisc's, for fq_codel).
    fn backlog(&self) -> u32;
}

/// `codel_Newton_step`: x ← x·(3 − count·x²)/2 in fixed point.
pub fn newton_step(vars: &mut CodelVars) {
    let invsqrt = (vars.rec_inv_sqrt as u32) << REC_INV_SQRT_SHIFT;
    let invsqrt2 = ((invsqrt as u64 * invsqrt as u64) >> 32) as u32;
    let mut val = (3u64 << 32).wrapping_sub(vars.count as u64 * invsqrt2 as u64);
    val >>= 2;
    val = val.wrapping_mul(invsqrt as u64) >> (32 - 2 + 1);
    vars.rec_inv_sqrt = (val >> REC_INV_SQRT_SHIFT) as u16;
}

/// `codel_control_law`: t + interval/√count, as t + reciprocal_scale(interval, 1/√count).
pub fn control_law(t: CodelTime, interval: CodelTime, rec_inv_sqrt: u16) -> CodelTime {
    t.wrapping_add(reciprocal_scale(interval, (rec_inv_sqrt as u32) << REC_INV_SQRT_SHIFT))
}

/// `codel_should_drop`. `backlog` is read after the packet left the queue.
pub fn should_drop(
    pkt: Option<&Packet>,
    vars: &mut CodelVars,
    params: &CodelParams,
    stats: &mut CodelStats,
    backlog: u32,
    now: CodelTime,
) -> bool {
    let Some(pkt) = pkt else {
        vars.first_above_time = 0;
        return false;
    };
    vars.ldelay = now.wrapping_sub(codel_time(pkt.enqueued_at));
    if pkt.len > stats.maxpacket {
        stats.maxpacket = pkt.len;
    }
    if time_before(vars.ldelay, params.target) || backlog <= params.mtu {
        vars.first_above_time = 0;
        return false;
    }
    if vars.first_above_time == 0 {
        vars.first_above_time = now.wrapping_add(params.interval);
        false
    } else {
        time_after(now, vars.first_above_time)
    }
}

/// Drop `pkt` through the queue's drop callback, accounting it for the parents.
fn codel_drop(q: &mut impl CodelQueue, stats: &mut CodelStats, pkt: Packet) {
    stats.drop_len = stats.drop_len.wrapping_add(pkt.len);
    q.drop(pkt);
    stats.drop_count = stats.drop_count.wrapping_add(1);
}

/// `codel_dequeue`: the next packet to send from `q`, after whatever drops or
/// marks the control law asks for at `now`.
#[inline]
pub fn codel_dequeue(
    q: &mut impl CodelQueue,
    params: &CodelParams,
    vars: &mut CodelVars,
    stats: &mut CodelStats,
    now: Instant,
) -> Option<Packet> {
    // Kept as the Option it came in (unwrapping and rewrapping a packet copies it
    // piecewise, which stalls the next whole copy on store forwarding).
    let mut skb = q.dequeue();
    if skb.is_none() {
        vars.dropping = false;
        return None;
    }
    let now = codel_time(now);
    let mut drop = should_drop(skb.as_ref(), vars, params, stats, q.backlog(), now);
    'end: {
        if vars.dropping {
            if !drop {
                // Sojourn time below target: leave the dropping state.
                vars.dropping = false;
            } else if time_after_eq(now, vars.drop_next) {
                // Time for the next drop(s); a large backlog may call for several now.
                while vars.dropping && time_after_eq(now, vars.drop_next) {
                    vars.count = vars.count.wrapping_add(1);
                    newton_step(vars);
                    let p = skb.as_mut().expect("dropping with a packet in hand");
                    if params.ecn && p.set_ce() {
                        stats.ecn_mark = stats.ecn_mark.wrapping_add(1);
                        vars.drop_next = control_law(vars.drop_next, params.interval, vars.rec_inv_sqrt);
                        break 'end;
                    }
                    codel_drop(q, stats, skb.take().expect("packet"));
                    skb = q.dequeue();
                    if !should_drop(skb.as_ref(), vars, params, stats, q.backlog(), now) {
                        vars.dropping = false;
                    } else {
                        vars.drop_next = control_law(vars.drop_next, params.interval, vars.rec_inv_sqrt);
                    }
                }
            }
        } else if drop {
            let p = skb.as_mut().expect("packet");
            if params.ecn && p.set_ce() {
                stats.ecn_mark = stats.ecn_mark.wrapping_add(1);
            } else {
                codel_drop(q, stats, skb.take().expect("packet"));
                skb = q.dequeue();
                drop = should_drop(skb.as_ref(), vars, params, stats, q.backlog(), now);
            }
            let _ = drop; // recomputed for its side effects only, as in the kernel
            vars.dropping = true;
            // Re-entering soon after the last episode: resume near its drop rate.
            let delta = vars.count.wrapping_sub(vars.lastcount);
            if delta > 1 && time_before(now.wrapping_sub(vars.drop_next), params.interval.wrapping_mul(16)) {
                vars.count = delta;
                newton_step(vars);
            } else {
                vars.count = 1;
                vars.rec_inv_sqrt = (!0u32 >> REC_INV_SQRT_SHIFT) as u16;
            }
            vars.lastcount = vars.count;
            vars.drop_next = control_law(now, params.interval, vars.rec_inv_sqrt);
        }
    }
    if let Some(p) = skb.as_mut() {
        if time_after(vars.ldelay, params.ce_threshold) {
            let selected =
                params.ce_threshold_mask == 0 || (p.tos & params.ce_threshold_mask) == params.ce_threshold_selector;
            if selected && p.set_ce() {
                stats.ce_mark = stats.ce_mark.wrapping_add(1);
            }
        }
    }
    skb
}

/// The xstats `drop_next` field: µs from `now` to `drop_next`, signed (0 unless dropping).
pub fn drop_next_us(vars: &CodelVars, now: Instant) -> i32 {
    if !vars.dropping {
        return 0;
    }
    let delta = vars.drop_next.wrapping_sub(codel_time(now)) as i32;
    if delta >= 0 {
        codel_time_to_us(delta as u32) as i32
    } else {
        (codel_time_to_us(delta.unsigned_abs()) as i32).wrapping_neg()
    }
}

/// Text ` drop_next [-]<time>` as q_codel.c / q_fq_codel.c print it, plus the JSON int.
pub fn print_drop_next(out: &mut Out, drop_next: i32) {
    out.int("drop_next", format_args!(""), drop_next as i64);
    if drop_next < 0 {
        out.fp(format_args!(" drop_next -{}", units::fmt_time(drop_next.wrapping_neg() as u32)));
    } else {
        out.fp(format_args!(" drop_next {}", units::fmt_time(drop_next as u32)));
    }
}

/// A time option as q_codel.c / q_fq_codel.c print it: µs in JSON, `sprint_time` in text.
pub fn print_time_opt(out: &mut Out, key: &str, us: u32) {
    out.uint(key, format_args!("{key} {} ", units::fmt_time(us)), us as u64);
}

// ---- the codel qdisc --------------------------------------------------------------

/// DEFAULT_CODEL_LIMIT.
pub const DEFAULT_CODEL_LIMIT: u32 = 1000;

/// What tc sends for codel (TCA_OPTIONS is always sent; each attribute only when
/// given with a non-zero value, ce_threshold unless it is ~0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodelOpt {
    /// TCA_CODEL_LIMIT, packets.
    pub limit: Option<u32>,
    /// TCA_CODEL_TARGET, µs.
    pub target: Option<u32>,
    /// TCA_CODEL_INTERVAL, µs.
    pub interval: Option<u32>,
    /// TCA_CODEL_ECN.
    pub ecn: Option<u32>,
    /// TCA_CODEL_CE_THRESHOLD, µs.
    pub ce_threshold: Option<u32>,
}

/// q_codel.c `explain`.
const USAGE: &str = "Usage: ... codel [ limit PACKETS ] [ target TIME ]\n\t\t [ interval TIME ] [ ecn | noecn ]\n\t\t [ ce_threshold TIME ]\n";

/// tc side: mirrors `codel_parse_opt` in tc/q_codel.c (keywords matched exactly).
pub fn parse(args: &mut Args) -> Result<CodelOpt, TcError> {
    let (mut limit, mut target, mut interval) = (0u32, 0u32, 0u32);
    let mut ce_threshold = u32::MAX;
    let mut ecn: Option<u32> = None;
    while let Some(a) = args.next() {
        match a {
            "limit" => {
                limit = units::get_u32(args.value()?).ok_or_else(|| TcError::tc("Illegal \"limit\"\n"))?;
            }
            "target" => {
                target = units::get_time(args.value()?).ok_or_else(|| TcError::tc("Illegal \"target\"\n"))?;
            }
            "ce_threshold" => {
                ce_threshold =
                    units::get_time(args.value()?).ok_or_else(|| TcError::tc("Illegal \"ce_threshold\"\n"))?;
            }
            "interval" => {
                interval = units::get_time(args.value()?).ok_or_else(|| TcError::tc("Illegal \"interval\"\n"))?;
            }
            "ecn" => ecn = Some(1),
            "noecn" => ecn = Some(0),
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    let nz = |v: u32| (v != 0).then_some(v);
    Ok(CodelOpt {
        limit: nz(limit),
        target: nz(target),
        interval: nz(interval),
        ecn,
        ce_threshold: (ce_threshold != u32::MAX).then_some(ce_threshold),
    })
}

/// The CoDel callbacks over sch_codel's single FIFO.
struct Fifo<'a> {
    q: &'a mut VecDeque<Packet>,
    stats: &'a mut Stats,
}

impl CodelQueue for Fifo<'_> {
    /// sch_codel `dequeue_func`: `__qdisc_dequeue_head` (qlen−1) and backlog − len.
    fn dequeue(&mut self) -> Option<Packet> {
        let p = self.q.pop_front()?;
        self.stats.unqueued(p.len);
        Some(p)
    }
    /// sch_codel `drop_func`: free and count a drop.
    fn drop(&mut self, pkt: Packet) {
        self.stats.dropped();
        pkt.kfree_skb();
    }
    fn backlog(&self) -> u32 {
        self.stats.backlog
    }
}

/// q_codel.c always sends TCA_OPTIONS (possibly empty).
pub static OPS: Ops = Ops {
    id: "codel",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Codel::new(c.opts()?.unwrap_or(&CodelOpt::default()), c.dev, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// The codel qdisc: `struct codel_sched_data` plus the qdisc's queue and counters.
pub struct Codel {
    params: CodelParams,
    vars: CodelVars,
    cstats: CodelStats,
    /// `sch->limit`, packets.
    limit: u32,
    drop_overlimit: u32,
    /// TCQ_F_CAN_BYPASS as decided at init (a later change does not update it).
    bypass: bool,
    q: VecDeque<Packet>,
    /// The latest time the qdisc was called with, standing in for `codel_get_time()`
    /// at dump time (xstats `drop_next` is relative to it).
    last_now: Instant,
}

impl Codel {
    /// `codel_init`: defaults, mtu from the device, then `codel_change`.
    pub fn new(o: &CodelOpt, dev: &DevInfo, now: Instant) -> Result<Codel, TcError> {
        let mut c = Codel {
            params: CodelParams::new(codel_mtu(dev)),
            vars: CodelVars::default(),
            cstats: CodelStats::default(),
            limit: DEFAULT_CODEL_LIMIT,
            drop_overlimit: 0,
            bypass: false,
            q: VecDeque::new(),
            last_now: now,
        };
        // Nothing is queued yet: the counters are not needed.
        c.apply(&mut Sch::default(), o);
        c.bypass = c.limit >= 1;
        Ok(c)
    }

    /// Mirrors `codel_change` (it validates nothing beyond the attribute types).
    fn apply(&mut self, sch: &mut Sch, o: &CodelOpt) {
        if let Some(t) = o.target {
            self.params.target = us_to_codel(t);
        }
        if let Some(t) = o.ce_threshold {
            self.params.ce_threshold = us_to_codel(t);
        }
        if let Some(t) = o.interval {
            self.params.interval = us_to_codel(t);
        }
        if let Some(l) = o.limit {
            self.limit = l;
        }
        if let Some(e) = o.ecn {
            self.params.ecn = e != 0;
        }
        // Shrink to the new limit from the head (the parked packet first), counting
        // drops here and reporting them up.
        let (mut n, mut bytes) = (0i32, 0i64);
        while sch.stats.qlen > self.limit {
            let Some(p) = sch.take_parked().or_else(|| self.q.pop_front().inspect(|p| sch.stats.unqueued(p.len)))
            else {
                break;
            };
            sch.stats.dropped();
            n += 1;
            bytes += p.len as i64;
            p.kfree_skb();
        }
        sch.reduce(n, bytes);
    }

    pub fn params(&self) -> &CodelParams {
        &self.params
    }
    pub fn vars(&self) -> &CodelVars {
        &self.vars
    }
    pub fn codel_stats(&self) -> &CodelStats {
        &self.cstats
    }
    pub fn limit(&self) -> u32 {
        self.limit
    }
    pub fn drop_overlimit(&self) -> u32 {
        self.drop_overlimit
    }

    /// `__codel_qdisc_dequeue`: CoDel on the FIFO, bstats for what leaves.
    fn dequeue_inner(&mut self, sch: &mut Sch, now: Instant) -> Option<Packet> {
        let mut fifo = Fifo { q: &mut self.q, stats: &mut sch.stats };
        let p = codel_dequeue(&mut fifo, &self.params, &mut self.vars, &mut self.cstats, now)?;
        sch.stats.sent(&p);
        Some(p)
    }
}

impl Qdisc for Codel {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `codel_qdisc_enqueue`: tail-append below the limit, else drop (drop_overlimit).
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.last_now = now;
        if sch.stats.qlen < self.limit {
            pkt.enqueued_at = now;
            sch.stats.queued(pkt.len);
            self.q.push_back(pkt);
            return Enqueued::Success;
        }
        self.drop_overlimit = self.drop_overlimit.wrapping_add(1);
        sch.stats.dropped();
        Enqueued::Dropped
    }

    /// `codel_qdisc_dequeue` (+ `codel_dequeue_drop`).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.last_now = now;
        let p = self.dequeue_inner(sch, now);
        self.cstats.flush_drops(&mut sch.reduce);
        p.map_or(Dequeued::Empty, Dequeued::Packet)
    }

    /// `codel_peek`: dequeue through CoDel and park the packet (still counted as queued).
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        self.last_now = now;
        peek_dequeued(self, sch, now)
    }

    /// `codel_reset`: empty the queue, CoDel state back to zero (stats kept).
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.last_now = now;
        self.q.clear();
        self.vars = CodelVars::default();
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        let o = opts.of()?;
        self.last_now = now;
        self.apply(sch, o);
        Ok(())
    }

    /// `codel_dump` printed by q_codel.c `codel_print_opt`:
    /// `limit <N>p target <t> [ce_threshold <t> ]interval <t> [ecn ]`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        print_time_opt(out, "target", codel_time_to_us(self.params.target));
        if self.params.ce_threshold != CODEL_DISABLED_THRESHOLD {
            print_time_opt(out, "ce_threshold", codel_time_to_us(self.params.ce_threshold));
        }
        print_time_opt(out, "interval", codel_time_to_us(self.params.interval));
        if self.params.ecn {
            out.boolean("ecn", format_args!("ecn "), true);
        }
    }

    /// `codel_dump_stats` printed by `codel_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let v = &self.vars;
        let ldelay = codel_time_to_us(v.ldelay);
        out.uint("count", format_args!("  count {}", v.count), v.count as u64);
        out.uint("lastcount", format_args!(" lastcount {}", v.lastcount), v.lastcount as u64);
        out.uint("ldelay", format_args!(" ldelay {}", units::fmt_time(ldelay)), ldelay as u64);
        if v.dropping {
            out.boolean("dropping", format_args!(" dropping"), true);
        }
        print_drop_next(out, drop_next_us(v, self.last_now));
        out.nl();
        let s = &self.cstats;
        out.uint("maxpacket", format_args!("  maxpacket {}", s.maxpacket), s.maxpacket as u64);
        out.uint("ecn_mark", format_args!(" ecn_mark {}", s.ecn_mark), s.ecn_mark as u64);
        out.uint("drop_overlimit", format_args!(" drop_overlimit {}", self.drop_overlimit), self.drop_overlimit as u64);
        if s.ce_mark != 0 {
            out.uint("ce_mark", format_args!(" ce_mark {}", s.ce_mark), s.ce_mark as u64);
        }
    }

    fn can_bypass(&self) -> bool {
        self.bypass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::stats::Reduce;
    use crate::testing::{argv, dev, held, t};

    /// The instant at which CoDel's clock reads `c` (its first nanosecond).
    fn at(c: CodelTime) -> Instant {
        Instant::from_nanos((c as u64) << CODEL_SHIFT)
    }
    fn p(s: &str) -> Result<CodelOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn codel(s: &str) -> Node<Codel> {
        held(Codel::new(&p(s).unwrap(), &dev(), t(0)).unwrap())
    }

    /// `codel_init`'s mtu: psched_mtu clamped to [256, 2^20] on 6.12.117, as it is on
    /// 6.18.44.
    #[test]
    fn init_mtu_bounds_by_kernel() {
        let d = |mtu: u32, kernel| DevInfo { mtu, kernel, ..dev() };
        let (k12, k18) = (crate::tree::KernelVersion::V6_12, crate::tree::KernelVersion::V6_18);
        assert_eq!(codel_mtu(&d(68, k12)), 256);
        assert_eq!(codel_mtu(&d(1500, k12)), 1514);
        assert_eq!(codel_mtu(&d(2_000_000, k12)), 1 << 20);
        assert_eq!(codel_mtu(&d(68, k18)), 82);
        assert_eq!(codel_mtu(&d(2_000_000, k18)), 2_000_014);
        assert_eq!(Codel::new(&p("").unwrap(), &d(68, k12), t(0)).unwrap().params().mtu, 256);
        assert_eq!(Codel::new(&p("").unwrap(), &d(68, k18), t(0)).unwrap().params().mtu, 82);
    }
    fn show(q: &Codel, json: bool) -> String {
        let mut o = if json { Out::json(false) } else { Out::text() };
        if json {
            o.open_object(None);
        }
        q.dump(&mut o, &dev());
        if json {
            o.close_object();
        }
        o.into_string()
    }
    fn xstats(q: &Codel, json: bool) -> String {
        let mut o = if json { Out::json(false) } else { Out::text() };
        if json {
            o.open_object(None);
        }
        q.dump_xstats(&mut o);
        if json {
            o.close_object();
        }
        o.into_string()
    }
    /// Dequeue and tell what happened: the id sent and how many drops it took.
    fn deq(q: &mut Node<Codel>, now: Instant) -> (Option<u64>, u32) {
        let before = q.stats().drops;
        let id = q.dequeue(now).packet().map(|p| p.id);
        (id, q.stats().drops - before)
    }

    // ---- the fixed-point core ----------------------------------------------------

    #[test]
    fn time_units_and_wraparound() {
        assert_eq!(CodelParams::new(1514).target, 4882);
        assert_eq!(CodelParams::new(1514).interval, 97656);
        assert_eq!(codel_time_to_us(4882), 4999);
        assert_eq!(codel_time_to_us(97656), 99999);
        assert_eq!(us_to_codel(5000), 4882);
        assert!(time_after(5, u32::MAX - 5), "wrap-safe");
        assert!(time_before(u32::MAX - 5, 5));
        assert!(time_after_eq(7, 7) && !time_after(7, 7));
        assert_eq!(codel_time(t(1023)), 0);
        assert_eq!(codel_time(t(1024)), 1);
        assert_eq!(reciprocal_scale(0xFFFF_FFFF, 1024), 1023);
    }

    /// rec_inv_sqrt after each Newton step stays within 1% of 65536/√count once the
    /// iteration has settled, and is computed with the kernel's exact truncations
    /// (values checked against an independent arbitrary-precision evaluation of
    /// the same fixed-point formulas).
    #[test]
    fn newton_steps_track_inverse_sqrt() {
        let mut v = CodelVars { count: 1, rec_inv_sqrt: 0xFFFF, ..Default::default() };
        let mut seen = Vec::new();
        for _ in 0..9 {
            v.count += 1;
            newton_step(&mut v);
            seen.push(v.rec_inv_sqrt);
        }
        // From count 1 (x = 1.0) the first step lands on 0.5, not 1/√2: the kernel's
        // estimate is coarse for small counts and converges within a few drops.
        assert_eq!(seen, [32769, 36864, 31968, 28935, 26481, 24588, 23037, 21746, 20647]);
        for _ in 0..200 {
            v.count += 1;
            newton_step(&mut v);
        }
        let ideal = 65536.0 / (v.count as f64).sqrt();
        assert!((v.rec_inv_sqrt as f64 - ideal).abs() / ideal < 0.01, "{} vs {ideal}", v.rec_inv_sqrt);
        // control law with count 1: interval × 0xFFFF/0x10000, truncated.
        assert_eq!(control_law(1000, 97656, 0xFFFF), 1000 + 97654);
        assert_eq!(control_law(u32::MAX, 97656, 0xFFFF), 97653, "wraps");
    }

    // ---- the control law on a real queue -----------------------------------------

    /// 400 packets of 1000 bytes queued at t = 0; the delay is above target from
    /// the first dequeue on. Drops follow the control law to the CoDel tick:
    /// the first exactly one tick after `first_above_time`, then at
    /// drop_next = previous + interval × rec_inv_sqrt(count).
    #[test]
    fn drop_times_follow_the_control_law() {
        let mut q = codel("limit 1000");
        for i in 0..400 {
            assert_eq!(q.enqueue(Packet::new(i, 1000), t(0)), Enqueued::Success);
        }
        // First look at the queue at 10 ms: above target, start the interval.
        let t0 = codel_time(t(10_000_000));
        assert_eq!(deq(&mut q, t(10_000_000)), (Some(0), 0));
        let fat = t0 + 97656;
        assert_eq!(q.vars().first_above_time, fat);
        // At first_above_time itself: not yet after it.
        assert_eq!(deq(&mut q, at(fat)), (Some(1), 0));
        assert_eq!(deq(&mut q, t(((fat as u64 + 1) << 10) - 1)), (Some(2), 0));
        // One tick later: the first drop, count 1, next drop one interval later.
        assert_eq!(deq(&mut q, at(fat + 1)), (Some(4), 1));
        assert!(q.vars().dropping);
        assert_eq!((q.vars().count, q.vars().lastcount, q.vars().rec_inv_sqrt), (1, 1, 0xFFFF));
        let mut drop_next = fat + 1 + 97654;
        assert_eq!(q.vars().drop_next, drop_next);
        // Independently computed schedule: interval × rec_inv_sqrt / 2^16 after the
        // previous drop, with rec_inv_sqrt from the table above.
        let steps = [32769u64, 36864, 31968, 28935, 26481];
        let mut next_id = 5;
        for (k, &r) in steps.iter().enumerate() {
            // One tick before drop_next: no drop.
            assert_eq!(deq(&mut q, at(drop_next - 1)), (Some(next_id), 0), "before drop {}", k + 2);
            // At drop_next: one drop, the next packet leaves.
            assert_eq!(deq(&mut q, at(drop_next)), (Some(next_id + 2), 1), "drop {}", k + 2);
            next_id += 3;
            assert_eq!(q.vars().count, k as u32 + 2);
            let gap = (97656u64 * (r << 16)) >> 32;
            drop_next += gap as u32;
            assert_eq!(q.vars().drop_next, drop_next);
        }
        assert_eq!(q.codel_stats().maxpacket, 1000);
        assert_eq!(q.stats().drops, 6);
    }

    /// A late dequeue owes several drops: the while loop drops until drop_next
    /// passes `now`, in one call; the parents learn all of them through Reduce.
    #[test]
    fn several_drops_in_one_dequeue_are_reported_up() {
        let mut q = codel("");
        for i in 0..400 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        q.dequeue(t(10_000_000));
        let fat = q.vars().first_above_time;
        assert_eq!(deq(&mut q, at(fat + 1)), (Some(2), 1));
        assert_eq!(q.take_reduce(), Reduce::new(1, 1000));
        let dn = q.vars().drop_next;
        // 3 intervals late: drops at count 2, 3, … until drop_next > now.
        let late = dn + 3 * 97656;
        let (id, drops) = deq(&mut q, at(late));
        let mut v = CodelVars { count: 1, rec_inv_sqrt: 0xFFFF, drop_next: dn, dropping: true, ..Default::default() };
        let mut expect = 0;
        while time_after_eq(late, v.drop_next) {
            v.count += 1;
            newton_step(&mut v);
            v.drop_next = control_law(v.drop_next, 97656, v.rec_inv_sqrt);
            expect += 1;
        }
        assert_eq!(drops, expect);
        assert_eq!(id, Some(3 + expect as u64));
        assert_eq!(q.vars().drop_next, v.drop_next);
        assert_eq!(q.take_reduce(), Reduce::new(expect as i32, 1000 * expect as i64));
        assert_eq!((q.codel_stats().drop_count, q.codel_stats().drop_len), (0, 0));
    }

    /// backlog ≤ mtu after the head leaves: never a drop, whatever the delay.
    #[test]
    fn mtu_exemption() {
        let mut q = codel("");
        q.enqueue(Packet::new(0, 1000), t(0));
        q.enqueue(Packet::new(1, 1514), t(0));
        q.enqueue(Packet::new(2, 1514), t(0));
        // Head leaves at 1 s: backlog 3028 > 1514 → the interval starts.
        assert_eq!(deq(&mut q, t(1_000_000_000)), (Some(0), 0));
        assert_ne!(q.vars().first_above_time, 0);
        // 2 s later: backlog after removing packet 1 is 1514 ≤ mtu → no drop.
        assert_eq!(deq(&mut q, t(3_000_000_000)), (Some(1), 0));
        assert_eq!(q.vars().first_above_time, 0);
        assert_eq!(deq(&mut q, t(4_000_000_000)), (Some(2), 0));
        assert!(!q.vars().dropping);
        assert_eq!(q.codel_stats().maxpacket, 1514);
        assert_eq!(codel_time_to_us(q.vars().ldelay), 4_000_000);
    }

    #[test]
    fn ecn_marks_instead_of_dropping() {
        let mut q = codel("ecn");
        for i in 0..100 {
            let mut pk = Packet::new(i, 1000);
            pk.tos = if i % 2 == 0 { 0x02 } else { 0x00 }; // ECT(0) / Not-ECT
            q.enqueue(pk, t(0));
        }
        q.dequeue(t(10_000_000));
        let fat = q.vars().first_above_time;
        // Packet 1 is Not-ECT: dropped; packet 2 (ECT) goes out unmarked (the mark
        // happens only on the packet the decision was made for).
        let pk = q.dequeue(at(fat + 1)).packet().unwrap();
        assert_eq!((pk.id, pk.tos, q.stats().drops), (2, 0x02, 1));
        // Next drop time: packet 3 (Not-ECT) is dropped, 4 is looked at: ECT but the
        // loop moves drop_next on rather than marking it.
        let dn = q.vars().drop_next;
        let pk = q.dequeue(at(dn)).packet().unwrap();
        assert_eq!((pk.id, q.stats().drops, q.codel_stats().ecn_mark), (4, 2, 0));
        // At the following drop time the head (5, Not-ECT) is dropped; then at the
        // next one the head is ECT and is marked CE instead of dropped.
        let dn = q.vars().drop_next;
        q.dequeue(at(dn)); // drops 5, sends 6
        let dn = q.vars().drop_next;
        // Line the queue up so an ECT packet is at the head at drop time.
        let q2_sent = vec![q.dequeue(at(dn - 1)).packet().unwrap().id]; // 7, no drop
        let pk = q.dequeue(at(dn)).packet().unwrap();
        assert_eq!((pk.id, pk.tos), (8, 0x03), "marked CE");
        assert_eq!((q.codel_stats().ecn_mark, q.stats().drops), (1, 3));
        assert_eq!(q2_sent, [7]);
        // xstats show it.
        assert!(xstats(&q, false).contains("ecn_mark 1 drop_overlimit 0"));
    }

    #[test]
    fn ce_threshold_marks_late_packets() {
        let mut q = codel("ce_threshold 1ms");
        for (i, tos) in [0x01u8, 0x00, 0x02].iter().enumerate() {
            let mut pk = Packet::new(i as u64, 100);
            pk.tos = *tos;
            q.enqueue(pk, t(0));
        }
        // 0.9 ms: below the threshold (in CoDel ticks: 878 < 976).
        assert_eq!(q.dequeue(t(900_000)).packet().unwrap().tos, 0x01);
        // 2 ms: above: Not-ECT cannot be marked, ECT(0) is.
        assert_eq!(q.dequeue(t(2_000_000)).packet().unwrap().tos, 0x00);
        assert_eq!(q.dequeue(t(2_000_000)).packet().unwrap().tos, 0x03);
        assert_eq!(q.codel_stats().ce_mark, 1);
        assert_eq!(q.stats().drops, 0);
        assert_eq!(
            xstats(&q, false),
            "  count 0 lastcount 0 ldelay 2ms drop_next 0us\n  maxpacket 100 ecn_mark 0 drop_overlimit 0 ce_mark 1"
        );
    }

    /// Leaving the dropping state and coming back within 16 intervals resumes at
    /// count − lastcount (when > 1) instead of 1.
    #[test]
    fn count_resumes_after_a_short_pause() {
        let mut q = codel("limit 10000");
        for i in 0..2000 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        q.dequeue(t(10_000_000));
        let fat = q.vars().first_above_time;
        q.dequeue(at(fat + 1)); // first drop, count 1
        for _ in 0..4 {
            let dn = q.vars().drop_next;
            q.dequeue(at(dn)); // counts 2..5
        }
        assert_eq!((q.vars().count, q.vars().lastcount), (5, 1));
        let dn = q.vars().drop_next;
        // Drain the old packets and queue fresh ones: the delay falls below target.
        let now = at(dn - 1);
        reset_queue_only(&mut q, now);
        for i in 0..100 {
            q.enqueue(Packet::new(10_000 + i, 1000), now);
        }
        q.dequeue(now + crate::time::Duration::from_millis(1));
        assert!(!q.vars().dropping);
        // The delay grows again; after an interval above target, drop: delta = 4.
        let later = now + crate::time::Duration::from_millis(10);
        q.dequeue(later);
        let fat = q.vars().first_above_time;
        let before = q.stats().drops;
        q.dequeue(at(fat + 1));
        assert_eq!(q.stats().drops - before, 1);
        let mut v = CodelVars { count: 4, rec_inv_sqrt: q_rec_after(5), ..Default::default() };
        newton_step(&mut v);
        assert_eq!((q.vars().count, q.vars().lastcount, q.vars().rec_inv_sqrt), (4, 4, v.rec_inv_sqrt));
        assert_eq!(q.vars().drop_next, control_law(fat + 1, 97656, v.rec_inv_sqrt));
    }

    /// rec_inv_sqrt after `n` drops of one episode starting at count 1.
    fn q_rec_after(n: u32) -> u16 {
        let mut v = CodelVars { count: 1, rec_inv_sqrt: 0xFFFF, ..Default::default() };
        while v.count < n {
            v.count += 1;
            newton_step(&mut v);
        }
        v.rec_inv_sqrt
    }

    /// Drop the queued packets without touching CoDel's state.
    fn reset_queue_only(q: &mut Node<Codel>, now: Instant) {
        let vars = q.vars;
        q.reset(now);
        q.vars = vars;
    }

    #[test]
    fn a_long_pause_restarts_at_count_one() {
        let mut q = codel("limit 10000");
        for i in 0..2000 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        q.dequeue(t(10_000_000));
        let fat = q.vars().first_above_time;
        q.dequeue(at(fat + 1));
        for _ in 0..4 {
            let dn = q.vars().drop_next;
            q.dequeue(at(dn));
        }
        let dn = q.vars().drop_next;
        let now = at(dn + 16 * 97656);
        reset_queue_only(&mut q, now);
        for i in 0..100 {
            q.enqueue(Packet::new(10_000 + i, 1000), now);
        }
        q.dequeue(now + crate::time::Duration::from_millis(1));
        assert!(!q.vars().dropping);
        q.dequeue(now + crate::time::Duration::from_millis(10));
        let fat = q.vars().first_above_time;
        q.dequeue(at(fat + 1));
        assert_eq!((q.vars().count, q.vars().lastcount, q.vars().rec_inv_sqrt), (1, 1, 0xFFFF));
    }

    // ---- the qdisc ----------------------------------------------------------------

    #[test]
    fn limit_drops_at_enqueue() {
        let mut q = codel("limit 2");
        assert_eq!(q.enqueue(Packet::new(0, 100), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(1, 100), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 100), t(0)), Enqueued::Dropped);
        assert_eq!((q.drop_overlimit(), q.stats().drops, q.stats().qlen), (1, 1, 2));
        assert!(xstats(&q, false).ends_with("drop_overlimit 1"));
        // Shrinking the limit drops from the head, counted here and reported up.
        q.change(&Opts::new(p("limit 1").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.stats().qlen, q.stats().drops), (1, 2));
        assert_eq!(q.take_reduce(), Reduce::new(1, 100));
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
    }

    #[test]
    fn peek_parks_and_reports_drops() {
        let mut q = codel("");
        for i in 0..300 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        q.dequeue(t(10_000_000));
        let fat = q.vars().first_above_time;
        assert_eq!(q.peek(at(fat + 1)).unwrap().id, 2);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().packets), (298, 298_000, 2));
        assert_eq!(q.take_reduce(), Reduce::new(1, 1000));
        assert_eq!(q.dequeue(at(fat + 2)).packet().unwrap().id, 2);
        assert_eq!((q.stats().qlen, q.stats().packets), (297, 2));
    }

    #[test]
    fn parse_and_dump_like_tc() {
        let o = p("").unwrap();
        assert_eq!(o, CodelOpt::default());
        let q = codel("");
        assert_eq!(show(&q, false), "limit 1000p target 5ms interval 100ms ");
        assert_eq!(show(&q, true), r#"{"limit":1000,"target":4999,"interval":99999}"#);
        assert!(!q.params().ecn && q.can_bypass());
        let q = codel("limit 50 target 2ms interval 30ms ecn ce_threshold 1500us");
        assert_eq!(show(&q, false), "limit 50p target 2ms ce_threshold 1.5ms interval 30ms ecn ");
        assert_eq!(show(&q, true), r#"{"limit":50,"target":1999,"ce_threshold":1499,"interval":29999,"ecn":true}"#);
        // 1 s is stored as 976562 ticks and dumped as 999999 µs, which sprint_time's
        // %.3g prints as "1e+03ms".
        assert_eq!(show(&codel("target 1us interval 1s"), false), "limit 1000p target 0us interval 1e+03ms ");
        assert_eq!(show(&codel("ecn noecn"), false), "limit 1000p target 5ms interval 100ms ");
        // limit 0 is not sent by tc; ce_threshold 0 is.
        assert_eq!(p("limit 0 ce_threshold 0").unwrap(), CodelOpt { ce_threshold: Some(0), ..Default::default() });
        assert_eq!(
            xstats(&q, false),
            "  count 0 lastcount 0 ldelay 0us drop_next 0us\n  maxpacket 0 ecn_mark 0 drop_overlimit 0"
        );
        assert_eq!(
            xstats(&q, true),
            r#"{"count":0,"lastcount":0,"ldelay":0,"drop_next":0,"maxpacket":0,"ecn_mark":0,"drop_overlimit":0}"#
        );
        // limit 0 at init: no bypass, every packet dropped.
        let mut z = held(Codel::new(&CodelOpt { limit: Some(0), ..Default::default() }, &dev(), t(0)).unwrap());
        assert!(!z.can_bypass());
        assert_eq!(z.enqueue(Packet::new(0, 1), t(0)), Enqueued::Dropped);
    }

    #[test]
    fn parse_errors_match_tc() {
        assert_eq!(p("help").unwrap_err(), TcError::tc(USAGE));
        assert_eq!(p("limit").unwrap_err(), TcError::incomplete());
        assert_eq!(p("limit x").unwrap_err(), TcError::tc("Illegal \"limit\"\n"));
        assert_eq!(p("limit -1").unwrap_err(), TcError::tc("Illegal \"limit\"\n"));
        assert_eq!(p("target 5parsecs").unwrap_err(), TcError::tc("Illegal \"target\"\n"));
        assert_eq!(p("interval x").unwrap_err(), TcError::tc("Illegal \"interval\"\n"));
        assert_eq!(p("ce_threshold x").unwrap_err(), TcError::tc("Illegal \"ce_threshold\"\n"));
        assert_eq!(p("quantum 1").unwrap_err(), TcError::tc(format!("What is \"quantum\"?\n{USAGE}")));
        assert_eq!(p("lim 5").unwrap_err(), TcError::tc(format!("What is \"lim\"?\n{USAGE}")));
    }

    #[test]
    fn dropping_state_in_xstats() {
        let mut q = codel("");
        for i in 0..300 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        q.dequeue(t(10_000_000));
        let fat = q.vars().first_above_time;
        q.dequeue(at(fat + 1));
        let x = xstats(&q, false);
        // drop_next is one interval (97654 ticks ≈ 99.997 ms) ahead of the last call.
        assert_eq!(
            x,
            "  count 1 lastcount 1 ldelay 110ms dropping drop_next 100ms\n  maxpacket 1000 ecn_mark 0 drop_overlimit 0"
        );
        let mut q2 = codel("");
        for i in 0..300 {
            q2.enqueue(Packet::new(i, 1000), t(0));
        }
        q2.dequeue(t(10_000_000));
        let fat = q2.vars().first_above_time;
        q2.dequeue(at(fat + 1));
        q2.last_now = at(q2.vars().drop_next + 2000);
        assert!(xstats(&q2, false).contains("dropping drop_next -2.05ms"));
        assert!(xstats(&q2, true).contains(r#""dropping":true,"drop_next":-2048"#));
    }

    /// Random traffic: every packet is sent, dropped or still queued, bytes too; the
    /// reductions reported up equal the drops made at dequeue.
    #[test]
    fn conservation() {
        let mut q = codel("limit 300 target 2ms interval 20ms");
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let (mut in_p, mut in_b, mut out_p, mut out_b) = (0u64, 0u64, 0u64, 0u64);
        let (mut enq_drops, mut red_p, mut red_b) = (0u64, 0i64, 0i64);
        let mut now = 0u64;
        for id in 0..50_000u64 {
            now += (rnd() % 200_000) as u64;
            let len = 64 + rnd() % 1450;
            in_p += 1;
            in_b += len as u64;
            if q.enqueue(Packet::new(id, len), t(now)) == Enqueued::Dropped {
                enq_drops += 1;
                in_b -= len as u64;
                in_p -= 1;
            }
            if rnd() % 3 != 0 {
                if rnd() % 5 == 0 {
                    q.peek(t(now));
                }
                if let Dequeued::Packet(pk) = q.dequeue(t(now)) {
                    out_p += 1;
                    out_b += pk.len as u64;
                }
                let r = q.take_reduce();
                red_p += r.pkts as i64;
                red_b += r.bytes;
            }
        }
        let s = q.stats().clone();
        assert_eq!((s.packets, s.bytes), (out_p, out_b));
        assert_eq!(in_p, out_p + red_p as u64 + s.qlen as u64);
        assert_eq!(in_b, out_b + red_b as u64 + s.backlog as u64);
        assert_eq!(s.drops as u64, enq_drops + red_p as u64);
        assert!(red_p > 0 && enq_drops > 0);
    }
}
