//! red — Random Early Detection. The RED arithmetic shared with sfq's per-flow RED
//! (include/net/red.h, tc/tc_red.c) and the `red` qdisc built on it
//! (net/sched/sch_red.c, tc/q_red.c); §19 of docs/kernel-notes.md.
//!
//! Theory (Floyd & Jacobson 1993, the kernel's division-free form): at every
//! enqueue the average backlog is updated as an EWMA with weight 2^−Wlog, kept in
//! fixed point with the point at Wlog (`qavg += backlog − qavg >> Wlog`). Below
//! `min` packets pass; at or above `max` every packet is marked or dropped (a
//! "forced" action); in between the probability rises linearly from 0 to `max_P`,
//! and RED spreads the marks by counting packets since the last one (`qcount`)
//! against a random threshold `qR` drawn uniformly in [0, 2^32/(max_P/Δ)).
//! While the queue is empty the average keeps decaying as if packets of `avpkt`
//! bytes left at `bandwidth`: tc precomputes a table (`Stab`) of the shift that
//! applies after so many µs of idle time (`red_calc_qavg_from_idle_time`).
//! Adaptive RED moves `max_P` every 500 ms towards keeping the average between
//! 40% and 60% of the way from `min` to `max`.
//!
//! The red qdisc holds its packets in one child qdisc, class `<handle>:1`: a bfifo
//! of `limit` bytes made anew by every init/change with a non-zero limit (hidden
//! from dumps), or whatever is grafted there; without one it is noop.
//!
//! Differences from the kernel, all deliberate:
//! * **Randomness**: `red_random` draws `prandom_u32()`; here a splitmix64
//!   generator seeded from the qdisc handle ([`default_seed`]) or by
//!   [`Red::set_seed`] — same seed, same marks.
//! * **Time**: `ktime_get()` is the `now` passed in; an idle period starts at the
//!   dequeue that finds the child empty, as in the kernel.
//! * **Adaptive timer**: the kernel's `adapt_timer` fires every HZ/2 jiffies (500 ms
//!   at Debian's HZ = 250). It runs here at the first enqueue/dequeue/peek at or
//!   after each deadline, once per deadline passed, each firing seeing the idle time
//!   as of its own deadline; a run of firings that can no longer change anything is
//!   skipped. Like 6.12's `__red_change`, the timer is armed only when the
//!   *`tc_red_qopt.flags`* carry TC_RED_ADAPTATIVE — iproute2 6.15 sends the flags in
//!   TCA_RED_FLAGS instead and leaves those zero, so `tc … red adaptive` shows
//!   `adaptive` but never adapts, on the kernel as here.
//! * **qevents** (`qevent early_drop|mark block IDX`): tc's parsing is mirrored, but
//!   a command that names a block is refused (tc side, before anything changes):
//!   shared blocks bound to qevents are not modelled.

use crate::packet::Packet;
use crate::qdisc::{
    tc_h_make, Child, Dequeued, DevInfo, Enqueued, Flags, Node, OneClass, Ops, Opts, Parse, Qdisc, Sch,
};
use crate::sched::fifo::{fifo_create_dflt, FifoKind};
use crate::sched::noqueue::Noop;
use crate::sched::sfq::SplitMix64;
use crate::tc::units::{self, c_double_to_u32};
use crate::tc::{Args, Out, TcError};
use crate::time::{Duration, Instant};

// ---- the shared RED arithmetic (include/net/red.h, tc/tc_red.c) --------------------------

/// TC_RED_ECN.
pub const TC_RED_ECN: u8 = 1;
/// TC_RED_HARDDROP.
pub const TC_RED_HARDDROP: u8 = 2;
/// TC_RED_ADAPTATIVE.
pub const TC_RED_ADAPTATIVE: u8 = 4;
/// TC_RED_NODROP.
pub const TC_RED_NODROP: u8 = 8;
/// TC_RED_HISTORIC_FLAGS: the bits `tc_red_qopt.flags` may carry.
pub const TC_RED_HISTORIC_FLAGS: u8 = TC_RED_ECN | TC_RED_HARDDROP | TC_RED_ADAPTATIVE;
/// TC_RED_SUPPORTED_FLAGS of sch_red.c.
pub const TC_RED_SUPPORTED_FLAGS: u8 = TC_RED_HISTORIC_FLAGS | TC_RED_NODROP;
/// RED_STAB_SIZE.
pub const RED_STAB_SIZE: usize = 256;
/// RED_ONE_PERCENT: 2^32/100 rounded to nearest.
const RED_ONE_PERCENT: u32 = (((1u64 << 32) + 50) / 100) as u32;
/// MAX_P_MIN, MAX_P_MAX: adaptive RED keeps max_P within [1%, 50%].
const MAX_P_MIN: u32 = RED_ONE_PERCENT;
const MAX_P_MAX: u32 = 50 * RED_ONE_PERCENT;

/// `sscanf(s, "%lg", &d) == 1`: the longest prefix (after white space) that strtod reads.
pub(crate) fn scan_lg(s: &str) -> Option<f64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let b = t.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let lower = t[i..].to_ascii_lowercase();
    for (word, v) in [("infinity", f64::INFINITY), ("inf", f64::INFINITY), ("nan", f64::NAN)] {
        if lower.starts_with(word) {
            return Some(if b.first() == Some(&b'-') { -v } else { v });
        }
    }
    let start_digits = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut mant = i - start_digits;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let f = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        mant += i - f;
    }
    if mant == 0 {
        return None;
    }
    let mut end = i;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let d = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > d {
            end = j;
        }
    }
    t[..end].parse().ok()
}

/// tc/tc_red.c `tc_red_eval_ewma`: the smallest Wlog whose EWMA absorbs `burst`
/// packets of `avpkt` above `qmin`. `Err` carries the message tc prints.
pub fn tc_red_eval_ewma(qmin: u32, burst: u32, avpkt: u32) -> Result<i32, String> {
    let a = burst as f64 + 1.0 - qmin as f64 / avpkt as f64;
    if a < 1.0 {
        // C integer division by zero would trap; avpkt 0 is refused before.
        return Err(format!(
            "tc_red_eval_ewma() burst {burst} is too small ? Try burst {}\n",
            1u32.wrapping_add(qmin / avpkt.max(1))
        ));
    }
    let mut w = 0.5f64;
    for wlog in 1..32 {
        if a <= (1.0 - (1.0 - w).powf(burst as f64)) / w {
            return Ok(wlog);
        }
        w /= 2.0;
    }
    Ok(-1)
}

/// tc/tc_red.c `tc_red_eval_P`: Plog with max_P/(qmax − qmin) ≈ 2^−Plog.
pub fn tc_red_eval_p(qmin: u32, qmax: u32, prob: f64) -> i32 {
    let i = qmax.wrapping_sub(qmin) as i32;
    if i == 0 {
        return 0;
    }
    if i < 0 {
        return -1;
    }
    let mut prob = prob / i as f64;
    for i in 0..32 {
        if prob > 1.0 {
            return i;
        }
        prob *= 2.0;
    }
    -1
}

/// tc/tc_red.c `tc_red_eval_idle_damping`: Scell_log and the table of shifts
/// (`Stab[t >> Scell_log] ≈ −log2-ish decay after t µs idle`, capped at 31), for
/// packets of `avpkt` bytes at `bps` bytes/s. None where tc fails.
pub fn tc_red_eval_idle_damping(wlog: i32, avpkt: u32, bps: u32) -> Option<(u8, [u8; RED_STAB_SIZE])> {
    let xmit_time = units::calc_xmittime(bps as u64, avpkt) as f64;
    let lw = -(1.0 - 1.0 / (1u32 << wlog) as f64).ln() / xmit_time;
    let maxtime = 31.0 / lw;
    // `1 << clog` is a C int: at 31 it is INT_MIN, and the quotient (negative) ends the search.
    let clog = (0..32u32).find(|&c| maxtime / (1i32.wrapping_shl(c) as f64) < 512.0)?;
    let mut sbuf = [0u8; RED_STAB_SIZE];
    for (i, s) in sbuf.iter_mut().enumerate().take(255).skip(1) {
        // `sbuf[i] = double`: x86-64 converts through a 32-bit cvttsd2si (INT_MIN
        // when out of range) and keeps the low byte.
        let v = (i as i32).wrapping_shl(clog) as f64 * lw;
        let iv = if v.is_nan() || !(-2147483648.0..2147483648.0).contains(&v) { i32::MIN } else { v as i32 };
        *s = (iv as u8).min(31);
    }
    sbuf[255] = 31;
    Some((clog as u8, sbuf))
}

/// The Wlog and Plog steps as q_red.c, q_choke.c and q_sfq.c chain them, their
/// messages prefixed `who` ("RED", "CHOKE", "SFQ"): an EWMA that cannot be had
/// fails, a Wlog of 10 or more only warns (tc goes on), then the probability.
pub fn red_eval_wlog_plog(
    who: &str,
    args: &mut Args,
    (qmin, qmax): (u32, u32),
    burst: u32,
    avpkt: u32,
    probability: f64,
) -> Result<(u8, u8), TcError> {
    let wlog = match tc_red_eval_ewma(qmin, burst, avpkt) {
        Ok(w) if w >= 0 => w,
        Ok(_) => return Err(TcError::tc(format!("{who}: failed to calculate EWMA constant.\n"))),
        Err(m) => return Err(TcError::tc(format!("{m}{who}: failed to calculate EWMA constant.\n"))),
    };
    if wlog >= 10 {
        args.notes.push_str(&format!("{who}: WARNING. Burst {burst} seems to be too large.\n"));
    }
    let plog = tc_red_eval_p(qmin, qmax, probability);
    if plog < 0 {
        return Err(TcError::tc(format!("{who}: failed to calculate probability.\n")));
    }
    Ok((wlog as u8, plog as u8))
}

/// The idle-damping step of q_red.c and q_choke.c, its failure prefixed `who`.
pub fn red_eval_stab(who: &str, wlog: u8, avpkt: u32, rate: u32) -> Result<(u8, [u8; RED_STAB_SIZE]), TcError> {
    tc_red_eval_idle_damping(wlog as i32, avpkt, rate)
        .ok_or_else(|| TcError::tc(format!("{who}: failed to calculate idle damping table.\n")))
}

/// `struct reciprocal_value` (lib/reciprocal_div.c).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reciprocal {
    m: u32,
    sh1: u8,
    sh2: u8,
}

impl Reciprocal {
    /// `reciprocal_value(d)`, d ≥ 1.
    pub(crate) fn new(d: u32) -> Self {
        let l = 32 - (d - 1).leading_zeros(); // fls(d - 1)
        let m = ((1u64 << 32) * ((1u64 << l) - d as u64)) / d as u64 + 1;
        Reciprocal { m: m as u32, sh1: l.min(1) as u8, sh2: l.saturating_sub(1) as u8 }
    }
    /// `reciprocal_divide(a, R)`.
    pub(crate) fn divide(self, a: u32) -> u32 {
        let t = ((a as u64 * self.m as u64) >> 32) as u32;
        (t + ((a - t) >> self.sh1)) >> self.sh2
    }
}

/// `struct red_parms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedParms {
    /// Thresholds, Wlog-scaled.
    pub qth_min: u32,
    pub qth_max: u32,
    pub scell_max: u32,
    /// Probability at `max`, 2^32-scaled.
    pub max_p: u32,
    pub(crate) max_p_reciprocal: Reciprocal,
    /// max − min (at least 1).
    pub qth_delta: u32,
    /// Adaptive RED's band for the average: min + 0.4·Δ … min + 0.6·Δ.
    pub target_min: u32,
    pub target_max: u32,
    pub scell_log: u8,
    pub wlog: u8,
    pub plog: u8,
    pub stab: [u8; RED_STAB_SIZE],
}

impl RedParms {
    /// `red_set_parms(p, qth_min, qth_max, Wlog, Plog, Scell_log, stab, max_P)`
    /// on a zeroed `red_parms` (no stab: an all-zero table, as sfq has).
    pub fn new(
        qth_min: u32,
        qth_max: u32,
        wlog: u8,
        plog: u8,
        scell_log: u8,
        stab: Option<&[u8; RED_STAB_SIZE]>,
        max_p: u32,
    ) -> Self {
        let mut delta = qth_max.wrapping_sub(qth_min) as i32;
        if delta <= 0 {
            delta = 1;
        }
        let max_p = if max_p == 0 {
            let m = if plog < 32 { u32::MAX >> plog } else { u32::MAX };
            m.wrapping_mul(delta as u32)
        } else {
            max_p
        };
        let max_p_delta = (max_p / delta as u32).max(1);
        let d5 = delta / 5;
        RedParms {
            qth_min: qth_min.wrapping_shl(wlog as u32),
            qth_max: qth_max.wrapping_shl(wlog as u32),
            scell_max: 255u32.wrapping_shl(scell_log as u32),
            max_p,
            max_p_reciprocal: Reciprocal::new(max_p_delta),
            qth_delta: delta as u32,
            target_min: qth_min.wrapping_add(2u32.wrapping_mul(d5 as u32)),
            target_max: qth_min.wrapping_add(3u32.wrapping_mul(d5 as u32)),
            scell_log,
            wlog,
            plog,
            stab: stab.copied().unwrap_or([0; RED_STAB_SIZE]),
        }
    }
}

/// `red_check_params(qth_min, qth_max, Wlog, Scell_log, stab)`.
pub fn red_check_params(
    qth_min: u32,
    qth_max: u32,
    wlog: u8,
    scell_log: u8,
    stab: Option<&[u8; RED_STAB_SIZE]>,
) -> bool {
    let fls = |x: u32| 32 - x.leading_zeros();
    fls(qth_min) + (wlog as u32) < 32
        && fls(qth_max) + (wlog as u32) < 32
        && scell_log < 32
        && qth_max >= qth_min
        && stab.is_none_or(|s| s.iter().all(|&v| v < 32))
}

/// `struct red_vars`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedVars {
    /// Packets since the last mark (−1: below min or just marked at max).
    pub qcount: i32,
    /// The cached random threshold.
    pub qr: u32,
    /// Average backlog in bytes, fixed point at Wlog (`unsigned long`).
    pub qavg: u64,
    /// `qidlestart`: when the current idle period began (None: not idling).
    pub qidlestart: Option<Instant>,
}

impl RedVars {
    /// `red_set_vars` (the idle start is left alone).
    pub fn reset(&mut self) {
        self.qavg = 0;
        self.qcount = -1;
    }
    /// `red_restart`.
    pub fn restart(&mut self) {
        self.qidlestart = None;
        self.reset();
    }
}

/// `red_calc_qavg_no_idle_time`: qavg += backlog − qavg/2^Wlog (unsigned long arithmetic).
pub fn red_calc_qavg_no_idle_time(p: &RedParms, v: &RedVars, backlog: u32) -> u64 {
    v.qavg.wrapping_add((backlog as u64).wrapping_sub(v.qavg >> p.wlog))
}

/// `red_calc_qavg_from_idle_time` at `now`: the average decayed over the idle time
/// (µs, capped at Scell_max) by the tabulated shift, or linearly while the table
/// says 0.
pub fn red_calc_qavg_from_idle_time(p: &RedParms, v: &RedVars, now: Instant) -> u64 {
    let start = v.qidlestart.map_or(0, |s| s.as_nanos() as i64);
    // ktime_us_delta: signed ns difference divided (towards zero) by 1000.
    let delta = (now.as_nanos() as i64).wrapping_sub(start) / 1000;
    let us_idle = delta.min(p.scell_max as i64);
    let shift = p.stab[((us_idle >> p.scell_log) as usize) & (RED_STAB_SIZE - 1)];
    if shift != 0 {
        v.qavg >> shift
    } else {
        let lin = v.qavg.wrapping_mul(us_idle as u64) >> p.scell_log;
        if lin < v.qavg >> 1 {
            v.qavg - lin
        } else {
            v.qavg >> 1
        }
    }
}

/// `red_calc_qavg`: the idle-time decay while idling, else the EWMA step.
pub fn red_calc_qavg(p: &RedParms, v: &RedVars, backlog: u32, now: Instant) -> u64 {
    if v.qidlestart.is_none() {
        red_calc_qavg_no_idle_time(p, v, backlog)
    } else {
        red_calc_qavg_from_idle_time(p, v, now)
    }
}

/// What `red_action` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedAction {
    /// RED_DONT_MARK.
    Pass,
    /// RED_PROB_MARK.
    Prob,
    /// RED_HARD_MARK.
    Hard,
}

/// `red_action`; `random` is `prandom_u32` (scaled here as `red_random` does).
pub fn red_action(p: &RedParms, v: &mut RedVars, qavg: u64, mut random: impl FnMut() -> u32) -> RedAction {
    if qavg < p.qth_min as u64 {
        v.qcount = -1;
        RedAction::Pass
    } else if qavg >= p.qth_max as u64 {
        v.qcount = -1;
        RedAction::Hard
    } else {
        v.qcount = v.qcount.wrapping_add(1);
        if v.qcount != 0 {
            if red_mark_probability(p, v, qavg) {
                v.qcount = 0;
                v.qr = red_random(p, random());
                return RedAction::Prob;
            }
        } else {
            v.qr = red_random(p, random());
        }
        RedAction::Pass
    }
}

/// `red_mark_probability` for an average at or above `qth_min`:
/// !(((qavg − qth_min) >> Wlog) · qcount < qR).
pub fn red_mark_probability(p: &RedParms, v: &RedVars, qavg: u64) -> bool {
    let lhs = ((qavg - p.qth_min as u64) >> p.wlog).wrapping_mul(v.qcount as i64 as u64);
    lhs >= v.qr as u64
}

/// `red_random`: the next qR from a 32-bit draw.
pub fn red_random(p: &RedParms, draw: u32) -> u32 {
    p.max_p_reciprocal.divide(draw)
}

/// `red_adaptative_algo` at `now` (the idle decay is taken as of `now`).
pub fn red_adaptative_algo(p: &mut RedParms, v: &RedVars, now: Instant) {
    let mut qavg = v.qavg;
    if v.qidlestart.is_some() {
        qavg = red_calc_qavg_from_idle_time(p, v, now);
    }
    qavg >>= p.wlog;
    if qavg > p.target_max as u64 && p.max_p <= MAX_P_MAX {
        p.max_p += MAX_P_MIN.min(p.max_p / 4);
    } else if qavg < p.target_min as u64 && p.max_p >= MAX_P_MIN {
        p.max_p = (p.max_p / 10) * 9;
    }
    // DIV_ROUND_CLOSEST on unsigned values.
    let max_p_delta = ((p.max_p as u64 + (p.qth_delta / 2) as u64) / p.qth_delta as u64) as u32;
    p.max_p_reciprocal = Reciprocal::new(max_p_delta.max(1));
}

/// tc/tc_red.c `tc_red_print_flags`: each flag's word when set; JSON gets all four.
pub fn print_red_flags(out: &mut Out, flags: u32) {
    for (bit, name) in
        [(TC_RED_ECN, "ecn"), (TC_RED_HARDDROP, "harddrop"), (TC_RED_ADAPTATIVE, "adaptive"), (TC_RED_NODROP, "nodrop")]
    {
        if flags & bit as u32 != 0 {
            out.boolean(name, format_args!("{name} "), true);
        } else {
            out.boolean(name, format_args!(""), false);
        }
    }
}

/// What q_red.c and q_choke.c print with `-d` after the flags: `ewma W`, the
/// probability (or `Plog` when max_P is 0) and `Scell_log`.
pub fn print_red_details(out: &mut Out, p: &RedParms) {
    if out.details() {
        out.uint("ewma", format_args!("ewma {} ", p.wlog), p.wlog as u64);
        if p.max_p != 0 {
            let g = units::fmt_g(p.max_p as f64 / 4294967296.0, 6);
            out.float("probability", format_args!("probability {g} "), &g);
        } else {
            out.uint("Plog", format_args!("Plog {} ", p.plog), p.plog as u64);
        }
        out.uint("Scell_log", format_args!("Scell_log {}", p.scell_log), p.scell_log as u64);
    }
}

/// The default seed of the RED generator of a qdisc with handle `handle`.
pub fn default_seed(handle: u32) -> u64 {
    0x5245_4421_0000_0000 ^ handle as u64
}

// ---- the red qdisc --------------------------------------------------------------------

/// What tc sends for red (q_red.c always sends all of it): TCA_RED_PARMS (`struct
/// tc_red_qopt`), TCA_RED_STAB, TCA_RED_MAX_P and TCA_RED_FLAGS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedOpt {
    /// Bytes: the default bfifo's limit (0 = keep the child).
    pub limit: u32,
    /// Thresholds, bytes.
    pub qth_min: u32,
    pub qth_max: u32,
    pub wlog: u8,
    pub plog: u8,
    pub scell_log: u8,
    /// `tc_red_qopt.flags`: iproute2 6.15 leaves it 0 (the flags go in `flags`).
    pub qopt_flags: u8,
    pub stab: [u8; RED_STAB_SIZE],
    /// TCA_RED_MAX_P.
    pub max_p: Option<u32>,
    /// TCA_RED_FLAGS as (value, selector).
    pub flags: Option<(u32, u32)>,
}

/// q_red.c `explain`.
const USAGE: &str = "Usage: ... red\tlimit BYTES [min BYTES] [max BYTES] avpkt BYTES [burst PACKETS]\n\
\t\t[adaptive] [probability PROBABILITY] [bandwidth KBPS]\n\
\t\t[ecn] [harddrop] [nodrop]\n\
\t\t[qevent early_drop block IDX] [qevent mark block IDX]\n";

/// tc/tc_qevent.c `qevent_parse` + `qevent_parse_plain` for red's two qevents:
/// the block index of `early_drop` (0) or `mark` (1) set in `blocks`. Stops at the
/// first word that is not `block`, which red's loop reads next.
fn parse_qevent(args: &mut Args, blocks: &mut [u32; 2]) -> Result<(), TcError> {
    let name = args.value()?;
    let i = match name {
        "early_drop" => 0,
        "mark" => 1,
        _ => return Err(TcError::tc(format!("Unknown qevent `{name}'\n"))),
    };
    if args.peek().is_none() {
        return Err(TcError::incomplete());
    }
    if blocks[i] != 0 {
        return Err(TcError::tc("Duplicate qevent\n"));
    }
    while args.peek() == Some("block") {
        args.next();
        let v = args.value()?;
        if blocks[i] != 0 {
            return Err(TcError::tc("Qevent block index already specified\n"));
        }
        match units::get_unsigned10(v) {
            Some(b) if b != 0 => blocks[i] = b,
            _ => return Err(TcError::tc("Illegal qevent block index\n")),
        }
    }
    if blocks[i] == 0 {
        return Err(TcError::tc("Unspecified qevent block index\n"));
    }
    Ok(())
}

/// tc side: q_red.c `red_parse_opt`.
pub fn parse(args: &mut Args) -> Result<RedOpt, TcError> {
    let (mut limit, mut qth_min, mut qth_max) = (0u32, 0u32, 0u32);
    let (mut burst, mut avpkt) = (0u32, 0u32);
    let mut probability = 0.02f64;
    let mut rate: u32 = 0;
    let mut flags: u32 = 0;
    let mut blocks = [0u32; 2];
    let ill = |what: &str| TcError::tc(format!("Illegal \"{what}\"\n"));
    while let Some(a) = args.next() {
        match a {
            "limit" => limit = units::get_size(args.value()?).ok_or_else(|| ill("limit"))?,
            "min" => qth_min = units::get_size(args.value()?).ok_or_else(|| ill("min"))?,
            "max" => qth_max = units::get_size(args.value()?).ok_or_else(|| ill("max"))?,
            "burst" => burst = units::get_u32(args.value()?).ok_or_else(|| ill("burst"))?,
            "avpkt" => avpkt = units::get_size(args.value()?).ok_or_else(|| ill("avpkt"))?,
            "probability" => probability = scan_lg(args.value()?).ok_or_else(|| ill("probability"))?,
            "bandwidth" => {
                let v = args.value()?;
                rate = args.rate(v).ok_or_else(|| ill("bandwidth"))?;
            }
            "ecn" => flags |= TC_RED_ECN as u32,
            "harddrop" => flags |= TC_RED_HARDDROP as u32,
            "nodrop" => flags |= TC_RED_NODROP as u32,
            "adaptative" | "adaptive" => flags |= TC_RED_ADAPTATIVE as u32,
            a if crate::tc::matches(a, "qevent") => parse_qevent(args, &mut blocks)?,
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    if limit == 0 || avpkt == 0 {
        return Err(TcError::tc("RED: Required parameter (limit, avpkt) is missing\n"));
    }
    // Floyd's recommendations, in tc's unsigned arithmetic.
    if qth_max == 0 {
        qth_max = if qth_min != 0 { qth_min.wrapping_mul(3) } else { limit / 4 };
    }
    if qth_min == 0 {
        qth_min = qth_max / 3;
    }
    if burst == 0 {
        burst = qth_min.wrapping_mul(2).wrapping_add(qth_max) / avpkt.wrapping_mul(3).max(1);
    }
    if rate == 0 {
        rate = units::get_rate("10Mbit").expect("a valid rate");
        args.notes.push_str("RED: set bandwidth to 10Mbit\n");
    }
    let (wlog, plog) = red_eval_wlog_plog("RED", args, (qth_min, qth_max), burst, avpkt, probability)?;
    let (scell_log, stab) = red_eval_stab("RED", wlog, avpkt, rate)?;
    if blocks.iter().any(|&b| b != 0) {
        return Err(TcError::tc("RED: qevents (qevent early_drop|mark block IDX) are not supported by this engine\n"));
    }
    Ok(RedOpt {
        limit,
        qth_min,
        qth_max,
        wlog,
        plog,
        scell_log,
        qopt_flags: 0,
        stab,
        max_p: Some(c_double_to_u32(probability * 4294967296.0)),
        flags: Some((flags, TC_RED_SUPPORTED_FLAGS as u32)),
    })
}

/// `struct red_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedStats {
    pub prob_drop: u32,
    pub prob_mark: u32,
    pub forced_drop: u32,
    pub forced_mark: u32,
    /// Drops by the child (its limit).
    pub pdrop: u32,
}

/// The adaptive timer's period, HZ/2 jiffies at HZ = 250.
const ADAPT_PERIOD: Duration = Duration::from_millis(500);

/// Kernel side: `struct red_sched_data`.
pub struct Red {
    handle: u32,
    limit: u32,
    /// TC_RED_* as the kernel keeps them (`q->flags`).
    flags: u8,
    /// Non-flag bits of `tc_red_qopt.flags`, dumped back.
    userbits: u8,
    parms: RedParms,
    vars: RedVars,
    stats: RedStats,
    /// Class 1's qdisc: the bfifo made at init/change, a grafted one, or noop.
    child: Node,
    rng: SplitMix64,
    /// The armed adaptive timer's next expiry.
    adapt_next: Option<Instant>,
}

/// `red_init` wants options (EINVAL without); tc always sends them.
pub static OPS: Ops = Ops {
    id: "red",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Red::new(c.required()?, c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Red {
    /// `red_init`: class 1 starts at noop, then `__red_change`.
    pub fn new(o: &RedOpt, dev: &DevInfo, handle: u32, now: Instant) -> Result<Red, TcError> {
        let mut q = Red {
            handle,
            limit: 0,
            flags: 0,
            userbits: 0,
            parms: RedParms::new(0, 0, 0, 0, 0, None, 0),
            vars: RedVars::default(),
            stats: RedStats::default(),
            child: Noop::node(tc_h_make(handle, 1)),
            rng: SplitMix64(default_seed(handle)),
            adapt_next: None,
        };
        let mut sch = Sch::default();
        q.apply(&mut sch, o, dev, now)?;
        Ok(q)
    }

    /// Re-seed the generator behind `prandom_u32`.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
    }

    /// `__red_change`. Everything is checked before anything changes.
    fn apply(&mut self, sch: &mut Sch, o: &RedOpt, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        if !red_check_params(o.qth_min, o.qth_max, o.wlog, o.scell_log, Some(&o.stab)) {
            return Err(TcError::invalid());
        }
        // red_get_flags
        if o.qopt_flags != 0 && o.flags.is_some() {
            return Err(TcError::kernel(
                "sch_red: flags should be passed either through qopt, or through a dedicated attribute",
            ));
        }
        // The netlink policy: NLA_POLICY_BITFIELD32(TC_RED_SUPPORTED_FLAGS).
        if let Some((value, selector)) = o.flags {
            let unsupported = !(TC_RED_SUPPORTED_FLAGS as u32);
            if selector & unsupported != 0 || value & unsupported != 0 || value & !selector != 0 {
                return Err(TcError::invalid());
            }
        }
        let (value, selector) = o
            .flags
            .map(|(v, s)| (v as u8, s as u8))
            .unwrap_or((o.qopt_flags & TC_RED_HISTORIC_FLAGS, TC_RED_HISTORIC_FLAGS));
        let userbits = o.qopt_flags & !TC_RED_HISTORIC_FLAGS;
        let flags = (self.flags & !selector) | value;
        if flags & TC_RED_NODROP != 0 && flags & TC_RED_ECN == 0 {
            return Err(TcError::kernel("sch_red: nodrop mode is only meaningful with ECN"));
        }
        self.flags = flags;
        self.userbits = userbits;
        self.limit = o.limit;
        if o.limit > 0 {
            // fifo_create_dflt + qdisc_hash_add(child, true); the old child is purged.
            let new = fifo_create_dflt(FifoKind::Bfifo, o.limit, self.handle, dev);
            let mut old = std::mem::replace(&mut self.child, new);
            sch.child_purged(old.stats());
            old.reset(now);
        }
        self.parms =
            RedParms::new(o.qth_min, o.qth_max, o.wlog, o.plog, o.scell_log, Some(&o.stab), o.max_p.unwrap_or(0));
        self.vars.reset();
        self.adapt_next = (o.qopt_flags & TC_RED_ADAPTATIVE != 0).then(|| now + ADAPT_PERIOD);
        if self.child.stats().qlen == 0 {
            self.vars.qidlestart = Some(now);
        }
        Ok(())
    }

    /// Run the adaptive timer for every deadline up to `now` (`red_adaptative_timer`).
    fn run_timer(&mut self, now: Instant) {
        while let Some(t) = self.adapt_next {
            if t > now {
                break;
            }
            let before = self.parms.max_p;
            red_adaptative_algo(&mut self.parms, &self.vars, t);
            let idle_settled = match self.vars.qidlestart {
                None => true,
                Some(s) => t.saturating_since(s).as_nanos() / 1000 >= self.parms.scell_max as u64,
            };
            if before == self.parms.max_p && idle_settled {
                // Nothing can change before `now`: skip to the last deadline passed.
                let n = (now - t).as_nanos() / ADAPT_PERIOD.as_nanos();
                self.adapt_next = Some(t + Duration::from_nanos((n + 1) * ADAPT_PERIOD.as_nanos()));
                break;
            }
            self.adapt_next = Some(t + ADAPT_PERIOD);
        }
    }

    // ---- accessors (tests) ----------------------------------------------------------

    pub fn parms(&self) -> &RedParms {
        &self.parms
    }
    pub fn vars(&self) -> &RedVars {
        &self.vars
    }
    pub fn red_stats(&self) -> RedStats {
        self.stats
    }
    pub fn child(&self) -> &Node {
        &self.child
    }
}

impl Qdisc for Red {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `red_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.run_timer(now);
        self.vars.qavg = red_calc_qavg(&self.parms, &self.vars, self.child.stats().backlog, now);
        self.vars.qidlestart = None;
        let rng = &mut self.rng;
        let ecn = self.flags & TC_RED_ECN != 0;
        let nodrop = self.flags & TC_RED_NODROP != 0;
        let qavg = self.vars.qavg;
        let congestion = match red_action(&self.parms, &mut self.vars, qavg, || rng.next_u32()) {
            RedAction::Pass => false,
            RedAction::Prob => {
                sch.stats.overlimit();
                if ecn && pkt.set_ce() {
                    self.stats.prob_mark += 1;
                    false
                } else if !ecn || !nodrop {
                    self.stats.prob_drop += 1;
                    true
                } else {
                    false // Not-ECT in nodrop mode: queued.
                }
            }
            RedAction::Hard => {
                sch.stats.overlimit();
                if self.flags & TC_RED_HARDDROP != 0 || !ecn {
                    self.stats.forced_drop += 1;
                    true
                } else if pkt.set_ce() {
                    self.stats.forced_mark += 1;
                    false
                } else if !nodrop {
                    self.stats.forced_drop += 1;
                    true
                } else {
                    false
                }
            }
        };
        if congestion {
            sch.stats.dropped();
            return Enqueued::Congested;
        }
        let r = Child::enqueue(&mut self.child, pkt, now, sch);
        if r != Enqueued::Success && r.counts_as_drop() {
            self.stats.pdrop += 1;
        }
        r
    }

    /// `red_dequeue`: an empty child starts an idle period.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.run_timer(now);
        let d = Child::dequeue(&mut self.child, now, sch);
        if !matches!(d, Dequeued::Packet(_)) && self.vars.qidlestart.is_none() {
            self.vars.qidlestart = Some(now);
        }
        d
    }

    /// `red_peek`: the child's own peek.
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        self.run_timer(now);
        Child::peek(&mut self.child, now, sch)
    }

    /// `red_reset`.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.child.reset(now);
        self.vars.restart();
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.run_timer(now);
        self.apply(sch, opts.of()?, dev, now)
    }

    /// What `red_dump` sends, printed as q_red.c `red_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let p = &self.parms;
        out.size("limit", "limit ", self.limit, " ");
        out.size("min", "min ", p.qth_min >> p.wlog, " ");
        out.size("max", "max ", p.qth_max >> p.wlog, " ");
        print_red_flags(out, self.flags as u32);
        print_red_details(out, p);
    }

    /// `red_dump_stats` (`other` is always 0), printed by `red_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let s = &self.stats;
        let marked = s.prob_mark.wrapping_add(s.forced_mark);
        let early = s.prob_drop.wrapping_add(s.forced_drop);
        out.uint("marked", format_args!("  marked {marked} "), marked as u64);
        out.uint("early", format_args!("early {early} "), early as u64);
        out.uint("pdrop", format_args!("pdrop {} ", s.pdrop), s.pdrop as u64);
        out.uint("other", format_args!("other 0 "), 0);
    }

    crate::classful!();

    /// A throttled child's wake-up time is ours.
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        Child::watchdog(&self.child)
    }
}

/// One class, `<handle>:1`, as tbf's: `red_find` maps every classid to it, a graft
/// of nothing puts noop there, and it has no counters.
impl OneClass for Red {
    fn class_handle(&self) -> u32 {
        self.handle
    }
    fn one_child(&self) -> &Node {
        &self.child
    }
    fn one_child_mut(&mut self) -> &mut Node {
        &mut self.child
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Classful;
    use crate::testing::{argv, dev, held, ms, t};

    fn p(s: &str) -> Result<RedOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn red(s: &str) -> Node<Red> {
        held(Red::new(&p(s).unwrap(), &dev(), 0x10000, t(0)).unwrap())
    }
    /// Parameters with a hand-made table: Scell_log 10 (1024 µs cells), shift 1 for
    /// the second cell, 3 for the third, 31 from the last.
    fn parms_with_stab() -> RedParms {
        let mut stab = [0u8; RED_STAB_SIZE];
        stab[1] = 1;
        stab[2] = 3;
        stab[255] = 31;
        RedParms::new(1000, 3000, 0, 0, 10, Some(&stab), 1 << 31)
    }

    #[test]
    fn tc_computes_floyds_defaults() {
        let v = argv("limit 400000 avpkt 1000");
        let mut a = Args::new(&v);
        let o = parse(&mut a).unwrap();
        assert_eq!(a.notes, "RED: set bandwidth to 10Mbit\n");
        // max = limit/4, min = max/3, burst = (2·min + max)/(3·avpkt) = 55.
        assert_eq!((o.limit, o.qth_min, o.qth_max, o.wlog, o.scell_log), (400000, 33333, 100000, 5, 15));
        assert_eq!((o.max_p, o.flags, o.qopt_flags), (Some(85899345), Some((0, 15)), 0));
        assert_eq!(o.plog, tc_red_eval_p(33333, 100000, 0.02) as u8);
        // min alone: max = 3·min.
        let o = p("limit 1M avpkt 1000 min 1000 ecn nodrop").unwrap();
        assert_eq!((o.qth_min, o.qth_max, o.flags), (1000, 3000, Some((9, 15))));
        assert_eq!(p("limit 1M").unwrap_err(), TcError::tc("RED: Required parameter (limit, avpkt) is missing\n"));
        assert_eq!(p("limit 1M avpkt 1000 qevent mark block 7").unwrap_err().code, 1);
        assert_eq!(
            p("limit 1M avpkt 1000 qevent mark blk 7").unwrap_err(),
            TcError::tc("Unspecified qevent block index\n")
        );
    }

    #[test]
    fn idle_damping_table_as_tc_builds_it() {
        // Wlog 5, 1000-byte packets at 10 Mbit/s: 800 µs each = 12800 ticks.
        let (clog, stab) = tc_red_eval_idle_damping(5, 1000, 1_250_000).unwrap();
        let lw = -(1.0f64 - 1.0 / 32.0).ln() / 12800.0;
        assert_eq!(clog, 15);
        assert_eq!(stab[0], 0);
        assert_eq!(stab[1], ((1u64 << 15) as f64 * lw) as u8);
        assert_eq!(stab[255], 31);
        assert!(stab.windows(2).all(|w| w[0] <= w[1]) && stab.iter().all(|&s| s <= 31));
    }

    /// The average after a known idle time: linear below the first tabulated
    /// shift, then the table's shift, capped at Scell_max µs.
    #[test]
    fn queue_average_after_idle_time() {
        let p = parms_with_stab();
        let v = RedVars { qavg: 1 << 20, qidlestart: Some(ms(100)), ..Default::default() };
        // 500 µs: cell 0, shift 0: qavg − qavg·500/1024 = 1048576 − 512000.
        assert_eq!(red_calc_qavg_from_idle_time(&p, &v, ms(100) + Duration::from_micros(500)), 536576);
        // 700 µs: the linear part (716800) passes qavg/2: qavg/2.
        assert_eq!(red_calc_qavg_from_idle_time(&p, &v, ms(100) + Duration::from_micros(700)), 524288);
        // 1500 µs: cell 1, shift 1; 3000 µs: cell 2, shift 3.
        assert_eq!(red_calc_qavg_from_idle_time(&p, &v, ms(101) + Duration::from_micros(500)), 524288);
        assert_eq!(red_calc_qavg_from_idle_time(&p, &v, ms(103)), 131072);
        // An hour: capped at Scell_max = 255 << 10 µs, cell 255, shift 31.
        assert_eq!(red_calc_qavg_from_idle_time(&p, &v, t(3_600_000_000_000)), 0);
        assert_eq!(red_calc_qavg(&p, &v, 5000, ms(103)), 131072, "idling: the backlog is not used");
        let busy = RedVars { qidlestart: None, ..v };
        assert_eq!(red_calc_qavg(&p, &busy, 5000, ms(103)), (1 << 20) + 5000 - (1 << 20));
    }

    /// qR = rnd / (max_P/Δ) by reciprocal division; a mark when
    /// (qavg − min)·qcount reaches it.
    #[test]
    fn probability_marks_count_against_the_random_threshold() {
        let p = parms_with_stab(); // min 1000, max 3000, Wlog 0, max_P 0.5
        assert_eq!(p.max_p_reciprocal.divide(u32::MAX), 4000);
        let mut v = RedVars { qcount: -1, ..Default::default() };
        let acts: Vec<RedAction> = (0..6).map(|_| red_action(&p, &mut v, 2000, || u32::MAX)).collect();
        use RedAction::*;
        assert_eq!(acts, [Pass, Pass, Pass, Pass, Prob, Pass]);
        assert_eq!((v.qcount, v.qr), (1, 4000));
        assert_eq!(red_action(&p, &mut v, 3000, || 0), Hard);
        assert_eq!(v.qcount, -1);
        assert_eq!(red_action(&p, &mut v, 999, || 0), Pass);
    }

    /// The EWMA at each enqueue with Wlog 1 (burst 1), as red-traffic's golden shows
    /// it: the last two are forced drops.
    #[test]
    fn ewma_and_forced_drops() {
        let mut q = red("limit 10000 avpkt 1000 min 1000 max 2000 burst 1");
        assert_eq!(q.parms().wlog, 1);
        let mut avgs = Vec::new();
        let mut rets = Vec::new();
        for i in 0..5 {
            rets.push(q.enqueue(Packet::new(i, 1000), ms(1)));
            avgs.push(q.vars().qavg);
        }
        assert_eq!(avgs, [0, 1000, 2500, 4250, 5125]);
        use Enqueued::*;
        assert_eq!(rets, [Success, Success, Success, Congested, Congested]);
        let s = q.red_stats();
        assert_eq!((s.forced_drop, s.prob_drop, s.pdrop), (2, 0, 0));
        assert_eq!((q.stats().drops, q.stats().overlimits, q.stats().qlen), (2, 2, 3));
        // Draining: the dequeue that finds the child empty starts an idle period.
        for _ in 0..3 {
            assert!(q.dequeue(ms(2)).packet().is_some());
        }
        assert_eq!(q.vars().qidlestart, None);
        assert_eq!(q.dequeue(ms(3)), Dequeued::Empty);
        assert_eq!(q.vars().qidlestart, Some(ms(3)));
        // 100 ms later: the table of 10 Mbit/s, 1000-byte packets decays 5125.
        q.enqueue(Packet::new(9, 1000), ms(103));
        let mut v = RedVars { qavg: 5125, ..Default::default() };
        v.qidlestart = Some(ms(3));
        assert_eq!(q.vars().qavg, red_calc_qavg_from_idle_time(q.parms(), &v, ms(103)));
        assert_eq!(q.vars().qidlestart, None);
    }

    #[test]
    fn ecn_marks_and_nodrop() {
        let mut q = red("limit 10000 avpkt 1000 min 1000 max 2000 burst 1 ecn");
        for i in 0..3 {
            q.enqueue(Packet::new(i, 1000), ms(1));
        }
        let mut ect = Packet::new(3, 1000);
        ect.tos = 0x02;
        assert_eq!(q.enqueue(ect, ms(1)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(4, 1000), ms(1)), Enqueued::Congested, "Not-ECT is dropped");
        assert_eq!((q.red_stats().forced_mark, q.red_stats().forced_drop), (1, 1));
        let mut q = red("limit 10000 avpkt 1000 min 1000 max 2000 burst 1 ecn nodrop");
        for i in 0..5 {
            assert_eq!(q.enqueue(Packet::new(i, 1000), ms(1)), Enqueued::Success);
        }
        assert_eq!((q.red_stats().forced_drop, q.stats().overlimits), (0, 2));
        // harddrop drops even ECT packets above max.
        let mut q = red("limit 10000 avpkt 1000 min 1000 max 2000 burst 1 ecn harddrop");
        for i in 0..5 {
            let mut pk = Packet::new(i, 1000);
            pk.tos = 0x02;
            q.enqueue(pk, ms(1));
        }
        assert_eq!((q.red_stats().forced_drop, q.red_stats().forced_mark), (2, 0));
        // The child's byte limit: pdrop.
        let mut q = red("limit 2500 avpkt 1000 min 10000 max 20000 burst 20");
        let r: Vec<_> = (0..3).map(|i| q.enqueue(Packet::new(i, 1000), ms(1))).collect();
        assert_eq!(r[2], Enqueued::Dropped);
        assert_eq!((q.red_stats().pdrop, q.stats().drops), (1, 1));
    }

    #[test]
    fn kernel_checks() {
        let e = Red::new(&p("limit 1M avpkt 1000 nodrop").unwrap(), &dev(), 0x10000, t(0)).err().unwrap();
        assert_eq!(e, TcError::kernel("sch_red: nodrop mode is only meaningful with ECN"));
        let mut o = p("limit 1M avpkt 1000").unwrap();
        o.qopt_flags = TC_RED_ECN;
        assert_eq!(Red::new(&o, &dev(), 0x10000, t(0)).err().unwrap().code, 2);
        o.qth_min = 1 << 30;
        o.flags = None;
        assert_eq!(Red::new(&o, &dev(), 0x10000, t(0)).err().unwrap(), TcError::invalid());
    }

    /// Adaptive RED moves max_P by ×0.9 every 500 ms while the average is below the
    /// target band, down to under 1%; armed only by the qopt flags (not by tc 6.15).
    #[test]
    fn adaptive_timer_on_passed_in_time() {
        let mut o = p("limit 1M avpkt 1000 min 10000 max 30000").unwrap();
        assert_eq!(o.max_p, Some(85899345));
        let mut q = held(Red::new(&o, &dev(), 0x10000, t(0)).unwrap());
        q.enqueue(Packet::new(0, 100), t(10_000_000_000));
        assert_eq!(q.parms().max_p, 85899345, "tc's flags attribute arms no timer");
        o.flags = None;
        o.qopt_flags = TC_RED_ADAPTATIVE;
        let mut q = held(Red::new(&o, &dev(), 0x10000, t(0)).unwrap());
        q.enqueue(Packet::new(0, 100), ms(499));
        assert_eq!(q.parms().max_p, 85899345);
        q.dequeue(ms(1000)); // deadlines at 500 and 1000 ms
        assert_eq!(q.parms().max_p, 69578460);
        // ×0.9 down to under MAX_P_MIN (42949673), then it stays.
        q.dequeue(t(1_000_000_000_000));
        assert_eq!(q.parms().max_p, 41085369);
        assert_eq!(q.parms().max_p_reciprocal, Reciprocal::new(((41085369u64 + 10000) / 20000) as u32));
        let mut pp = RedParms::new(10000, 30000, 0, 0, 0, None, 85899345);
        let v = RedVars { qavg: 25000, ..Default::default() }; // above target_max 22000
        red_adaptative_algo(&mut pp, &v, t(0));
        assert_eq!(pp.max_p, 85899345 + 21474836);
    }

    #[test]
    fn class_and_child_like_tbf() {
        let mut q = red("limit 10000 avpkt 1000 min 1000 max 2000 burst 1");
        assert_eq!(q.class_minors(), [1]);
        assert_eq!(q.child().kind(), "bfifo");
        q.enqueue(Packet::new(0, 1000), ms(1));
        // A change makes a new bfifo: the old one's packet is purged and reported.
        let o = Opts::new(p("limit 20000 avpkt 1000 min 1000 max 2000 burst 1").unwrap());
        q.change(&o, &dev(), ms(2)).unwrap();
        assert_eq!((q.stats().qlen, q.stats().drops), (0, 1));
        assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 1000));
        assert_eq!(q.vars().qidlestart, Some(ms(2)));
        assert!(q.class_stats(1).is_none());
    }
}
