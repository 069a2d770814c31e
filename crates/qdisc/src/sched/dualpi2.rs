//! dualpi2 — the coupled dual-queue AQM of RFC 9332 (DualPI2, "PI Improved with a
//! Square"). Mirrors net/sched/sch_dualpi2.c of Linux 6.18 (the first release with
//! it) and tc/q_dualpi2.c of iproute2 6.18 (likewise). Registered only for kernels
//! that have it ([`OPS`]`.since`): under 6.12 the kind is unknown to tc (6.15) and to
//! the kernel, as golden dualpi2-nokernel (kernel-6.12) records.
//!
//! Theory: two FIFOs share one limit (`limit` packets, `memlimit` bytes of truesize).
//! A packet whose ECN field matches `ecn_mask` (ECT(1) and CE by default — the L4S
//! identifier of RFC 9331), or that `skb->priority` (`<handle>:1`/`:2`) or a filter
//! (`classid :1`/`:2`) puts there, goes to the L-queue; the rest to the C-queue.
//! One PI controller, run every `tupdate`, moves a base probability p by
//! α·(delay − target) + β·(delay − previous delay), the delay being the older of the
//! two queue heads' sojourn times. The queues see p differently (the coupling):
//! a classic packet is dropped (or, if ECT, marked) with probability p², an L4S one
//! marked with probability `coupling_factor`·p; when that exceeds 1 (overload) L4S
//! packets get the classic treatment too (`drop_on_overload`) or are only marked
//! (`overflow`). Marks and drops happen at dequeue (`drop_dequeue`) or enqueue
//! (`drop_enqueue`), never with less than two MTUs queued. On top, the L-queue has a
//! step AQM: an L4S packet whose sojourn time (or the L-queue length, for a threshold
//! in packets) exceeds `step_thresh` is marked — dropped if not ECT. Class `:2`
//! (the "LLLL" class) skips all of it. Dequeue is a weighted round robin that
//! favours the L-queue but gives the C-queue `classic_protection` % of the bytes
//! while both have packets: a credit that the L-queue's packets raise by wc·len and
//! the C-queue's lower by wl·len (wc + wl = 100), the C-queue going when it is > 0.
//! `split_gso` (default) cuts a GSO packet into its segments at enqueue.
//!
//! Units as the kernel keeps them: p is a u32 with U32_MAX standing for 1; α and β
//! travel in Hz·256 and are kept as p-units per 64 ns of delay; times in ns (the
//! netlink values are µs; a change saturates tupdate and a time step threshold at
//! U32_MAX ns).
//!
//! The classes: dualpi2 has `walk` (two entries), `tcf_block` (the qdisc's own) and
//! `find` (always 0) but no `dump`, so each walked class is dumped with the qdisc's
//! handle and parent: [`Classful::class_minors`] answers minor 0 twice. Filters
//! attach to the qdisc; a class cannot take a filter or a child.
//!
//! Differences from the kernel, all deliberate:
//! * **Randomness**: `get_random_u32` is a splitmix64 generator seeded from the qdisc
//!   handle (or [`DualPi2::set_seed`]).
//! * **Timer**: the hrtimer fires `tupdate` after init and then `tupdate` after each
//!   run; here each update runs at the first operation at or after its deadline,
//!   with the queue heads of that moment and the deadline as "now"; deadlines follow
//!   each other exactly (the kernel's drift by its own latency is not modelled). Once
//!   an update leaves p and the last delay as it found them (both queues empty), the
//!   remaining deadlines up to `now` are skipped. `tc -s` shows the state and the
//!   head delays as of the last operation.
//! * **truesize**: `memory_used` sums the packets' `truesize` (an AF_PACKET frame's
//!   is [`crate::packet::packet_snd_truesize`]: 2304 bytes for 1000, as the kernel's).
//! * **ECN**: every packet counts as IP, its ECN field the low bits of `tos`
//!   (`dualpi2_read_ect` treats non-IP as Not-ECT, which tos 0 is).
//! * The head timestamps use 0 for "no packet", as the kernel does; a packet enqueued
//!   at `Instant::ZERO` therefore looks like none (the kernel's clock is never 0).
//! * **Which 6.18**: the later 6.18.y of this project's CI host (6.18.44). Debian's
//!   6.18.15 with the module added (goldens/kernel-6.18-vm, scripts/build-kernel-deb.sh)
//!   matches it except in `dualpi2_change`'s trim loop, which there takes only the
//!   parked packet and the C-queue, decrements the backlog twice for each, and
//!   dereferences NULL when only L-queue packets are left to drop (golden
//!   dualpi2-hold-change); and 6.18.15's module has no `net-sch-dualpi2` alias, so the
//!   kernel cannot autoload it.

use std::collections::VecDeque;

use crate::classify::{Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::sfq::SplitMix64;
use crate::stats::Stats;
use crate::tc::{units, Args, Out, TcError};
use crate::time::{Duration, Instant};
use crate::tree::KernelVersion;

/// MAX_PROB: probability 1.
pub const MAX_PROB: u32 = u32::MAX;
/// ALPHA_BETA_MAX of the kernel's policy: 2^31 − 1 (Hz·256).
const ALPHA_BETA_MAX: u32 = (1 << 31) - 1;
/// ALPHA_BETA_SHIFT − ALPHA_BETA_GRANULARITY: netlink's 1/256 Hz to internal 64 ns.
const ALPHA_BETA_SCALING: u32 = 8 - 6;
/// ALPHA_BETA_GRANULARITY: the internal α/β unit is 2^6 ns.
const ALPHA_BETA_GRANULARITY: u32 = 6;
/// MAX_WC: the weights are percentages.
const MAX_WC: u8 = 100;
/// q_dualpi2.c's ALPHA_BETA_MAX ((2 << 23) − 1, Hz) and ALPHA_BETA_SCALE.
const TC_ALPHA_BETA_MAX: f32 = ((2 << 23) - 1) as f32;
const TC_ALPHA_BETA_SCALE: f32 = 256.0;
/// q_dualpi2.c's RTT_TYP_TO_MAX.
const RTT_TYP_TO_MAX: u32 = 6;

/// TC_DUALPI2_ECN_MASK_L4S_ECT / _ANY_ECT.
pub const ECN_MASK_L4S_ECT: u8 = 1;
pub const ECN_MASK_ANY_ECT: u8 = 3;

/// `enum dualpi2_classification_results`.
const C_CLASSIC: u8 = 0;
const C_L4S: u8 = 1;
const C_LLLL: u8 = 2;
const C_MAX: u32 = 3;

/// The default seed of the generator of a dualpi2 qdisc with handle `handle`.
fn default_seed(handle: u32) -> u64 {
    0x4450_4932_0000_0000 ^ handle as u64
}

/// `dualpi2_scale_alpha_beta`: Hz·256 to p-units per 64 ns.
pub fn scale_alpha_beta(param: u32) -> u32 {
    ((((param as u64) * MAX_PROB as u64) >> ALPHA_BETA_SCALING) / 1_000_000_000) as u32
}

/// `dualpi2_unscale_alpha_beta`: back to Hz·256, as dumps send it.
pub fn unscale_alpha_beta(param: u32) -> u32 {
    ((((param as u64) * 1_000_000_000) << ALPHA_BETA_SCALING) / MAX_PROB as u64) as u32
}

/// `convert_us_to_nsec`: saturating at U32_MAX.
fn us_to_ns(us: u32) -> u32 {
    u32::try_from(us as u64 * 1000).unwrap_or(u32::MAX)
}

/// `convert_ns_to_usec`: saturating at U32_MAX.
fn ns_to_us(ns: u64) -> u32 {
    u32::try_from(ns / 1000).unwrap_or(u32::MAX)
}

// ---- tc side ----------------------------------------------------------------------

/// The step threshold as tc sends it: TCA_DUALPI2_STEP_THRESH_PKTS or _US.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Packets(u32),
    Us(u32),
}

/// What tc sends for dualpi2: a TCA_OPTIONS nest (always, possibly empty), with each
/// attribute only when given (and, for the numbers, non-zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DualPi2Opt {
    pub limit: Option<u32>,
    /// Bytes.
    pub memory_limit: Option<u32>,
    /// µs.
    pub target: Option<u32>,
    /// µs.
    pub tupdate: Option<u32>,
    /// Hz·256.
    pub alpha: Option<u32>,
    pub beta: Option<u32>,
    pub step: Option<Step>,
    pub min_qlen_step: Option<u32>,
    pub coupling: Option<u8>,
    pub drop_overload: Option<bool>,
    pub drop_early: Option<bool>,
    /// Percent of the bytes for the C-queue.
    pub c_protection: Option<u8>,
    pub ecn_mask: Option<u8>,
    pub split_gso: Option<bool>,
}

impl DualPi2Opt {
    /// An empty nest (`nla_len(opt) == 0`).
    fn is_empty(&self) -> bool {
        *self == DualPi2Opt::default()
    }
}

/// q_dualpi2.c `explain`.
const USAGE: &str = "Usage: ... dualpi2\n\
\x20              [limit PACKETS]\n\
\x20              [memlimit BYTES]\n\
\x20              [coupling_factor NUMBER]\n\
\x20              [step_thresh TIME|PACKETS]\n\
\x20              [min_qlen_step PACKETS]\n\
\x20              [drop_on_overload|overflow]\n\
\x20              [drop_enqueue|drop_dequeue]\n\
\x20              [classic_protection PERCENTAGE]\n\
\x20              [max_rtt TIME [typical_rtt TIME]]\n\
\x20              [target TIME] [tupdate TIME]\n\
\x20              [alpha ALPHA] [beta BETA]\n\
\x20              [split_gso|no_split_gso]\n";

/// q_dualpi2.c `get_packets`: `strtoul` base 10 (blanks, a sign), then exactly a
/// packet suffix; at most 2^32 − 1.
fn get_packets(s: &str) -> Option<u32> {
    let lead = s.len() - s.trim_start_matches([' ', '\t', '\n', '\u{b}', '\u{c}', '\r']).len();
    let signed = s[lead..].strip_prefix(['+', '-']).map_or(0, |_| 1);
    let digits = s[lead + signed..].len() - s[lead + signed..].trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (n, suffix) = s.split_at(lead + signed + digits);
    if digits == 0 || !["p", "pkt", "pkts", "packet", "packets"].contains(&suffix) {
        return None;
    }
    units::get_u64_base10(n).and_then(|v| u32::try_from(v).ok())
}

/// q_dualpi2.c `parse_alpha_beta`: a float in [0, 2^24 − 1] Hz, sent ×256 (with a
/// warning when that rounds to 0).
fn parse_alpha_beta(name: &str, v: &str, notes: &mut String) -> Result<u32, TcError> {
    let f = units::get_float_min_max(v, 0.0, TC_ALPHA_BETA_MAX)
        .ok_or_else(|| TcError::tc(format!("Illegal \"{name}\"\n")))?;
    if f < 1.0 / TC_ALPHA_BETA_SCALE {
        notes.push_str(&format!("Warning: \"{name}\" is too small and will be rounded to zero.\n"));
    }
    Ok((f * TC_ALPHA_BETA_SCALE) as u32)
}

/// A C double stored into a `uint32_t` (x86-64 converts through a 64-bit integer).
fn c_u32(x: f64) -> u32 {
    (x as i64) as u32
}

/// tc side: q_dualpi2.c `dualpi2_parse_opt`. Notes (warnings, the auto-configuration
/// line) go to `args.notes`.
pub fn parse(args: &mut Args) -> Result<DualPi2Opt, TcError> {
    let ill = |what: &str| TcError::tc(format!("Illegal \"{what}\"\n"));
    let nz = |v: u32| (v != 0).then_some(v);
    let mut o = DualPi2Opt::default();
    let (mut alpha, mut beta): (Option<u32>, Option<u32>) = (None, None);
    let (mut target, mut tupdate) = (0u32, 0u32);
    let (mut rtt_max, mut rtt_typ) = (0u32, 0u32);
    let mut step: Option<Step> = None;
    let mut notes = String::new();
    while let Some(a) = args.next() {
        match a {
            // get_u32(…, 10) for the counts.
            "limit" => o.limit = nz(units::get_unsigned10(args.value()?).ok_or_else(|| ill("limit"))?),
            "memlimit" => o.memory_limit = nz(units::get_unsigned10(args.value()?).ok_or_else(|| ill("memlimit"))?),
            "target" => target = units::get_time(args.value()?).ok_or_else(|| ill("target"))?,
            "tupdate" => tupdate = units::get_time(args.value()?).ok_or_else(|| ill("tupdate"))?,
            "alpha" => alpha = Some(parse_alpha_beta("alpha", args.value()?, &mut notes)?),
            "beta" => beta = Some(parse_alpha_beta("beta", args.value()?, &mut notes)?),
            "coupling_factor" => {
                let v = units::get_integer(args.value()?).filter(|v| (0..=255).contains(v));
                o.coupling = Some(v.ok_or_else(|| ill("coupling_factor"))? as u8);
            }
            "l4s_ect" => o.ecn_mask = Some(ECN_MASK_L4S_ECT),
            "any_ect" => o.ecn_mask = Some(ECN_MASK_ANY_ECT),
            "step_thresh" => {
                // A time first, then a packet count.
                let v = args.value()?;
                step = Some(match units::get_time(v) {
                    Some(us) => Step::Us(us),
                    None => Step::Packets(get_packets(v).ok_or_else(|| ill("step_thresh"))?),
                });
            }
            "min_qlen_step" => {
                o.min_qlen_step = Some(units::get_unsigned10(args.value()?).ok_or_else(|| ill("min_qlen_step"))?)
            }
            "overflow" => o.drop_overload = Some(false),
            "drop_on_overload" => o.drop_overload = Some(true),
            "drop_enqueue" => o.drop_early = Some(true),
            "drop_dequeue" => o.drop_early = Some(false),
            "split_gso" => o.split_gso = Some(true),
            "no_split_gso" => o.split_gso = Some(false),
            "classic_protection" => {
                let v = units::parse_percent(args.value()?).map(|p| (p * 100.0).round_ties_even() as i32);
                o.c_protection =
                    Some(v.filter(|v| (0..=100).contains(v)).ok_or_else(|| ill("classic_protection"))? as u8);
            }
            "max_rtt" => rtt_max = units::get_time(args.value()?).ok_or_else(|| ill("max_rtt"))?,
            "typical_rtt" => rtt_typ = units::get_time(args.value()?).ok_or_else(|| ill("typical_rtt"))?,
            "help" => {
                args.notes.push_str(&notes);
                return Err(TcError::tc(USAGE));
            }
            _ => {
                args.notes.push_str(&notes);
                return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}")));
            }
        }
    }
    args.notes.push_str(&notes);
    if rtt_max != 0 || rtt_typ != 0 {
        auto_config(&mut rtt_max, &mut rtt_typ, &mut alpha, &mut beta, &mut target, &mut tupdate, &mut args.notes)?;
    }
    o.target = nz(target);
    o.tupdate = nz(tupdate);
    (o.alpha, o.beta) = (alpha, beta);
    o.step = step.filter(|s| !matches!(s, Step::Packets(0) | Step::Us(0)));
    Ok(o)
}

/// The `max_rtt`/`typical_rtt` block of `dualpi2_parse_opt`: target, tupdate, α and
/// β from the RTTs (in f64 with q_dualpi2.c's float constants), printed to stderr.
fn auto_config(
    rtt_max: &mut u32,
    rtt_typ: &mut u32,
    alpha: &mut Option<u32>,
    beta: &mut Option<u32>,
    target: &mut u32,
    tupdate: &mut u32,
    notes: &mut String,
) -> Result<(), TcError> {
    if *rtt_typ == 0 {
        *rtt_typ = (*rtt_max / RTT_TYP_TO_MAX).max(1);
    } else if *rtt_max == 0 {
        *rtt_max = rtt_typ.wrapping_mul(RTT_TYP_TO_MAX);
    } else if *rtt_typ > *rtt_max {
        return Err(TcError::tc("typical_rtt must be <= max_rtt!\n"));
    }
    if alpha.is_some() || beta.is_some() || *tupdate != 0 || *target != 0 {
        notes.push_str("rtt_max is specified, ignore alpha/beta/tupdate/target\n");
    }
    let (max, typ) = (*rtt_max as f64, *rtt_typ as f64);
    *target = *rtt_typ;
    *tupdate = if typ < max / 3.0 { *rtt_typ } else { c_u32(max / 3.0) };
    *tupdate = (*tupdate).max(1);
    let alpha_f = *tupdate as f64 / max / max * 1e6 * 0.1f32 as f64;
    let beta_f = 0.3f32 as f64 / max * 1e6;
    let t = units::fmt_time;
    if beta_f > TC_ALPHA_BETA_MAX as f64 {
        return Err(TcError::tc(format!("max_rtt={} is too low and cause beta to overflow!\n", t(*rtt_max))));
    }
    let min = (1.0f32 / TC_ALPHA_BETA_SCALE) as f64;
    if alpha_f < min || beta_f < min {
        return Err(TcError::tc(format!(
            "Large max_rtt={} rounds down alpha={alpha_f:.6} and/or beta={beta_f:.6}!\n",
            t(*rtt_max)
        )));
    }
    notes.push_str(&format!(
        "Auto-config [max_rtt: {}, typical_rtt: {}]: target={} tupdate={} alpha={alpha_f:.6} beta={beta_f:.6}\n",
        t(*rtt_max),
        t(*rtt_typ),
        t(*target),
        t(*tupdate)
    ));
    *alpha = Some(c_u32(alpha_f * 256.0));
    *beta = Some(c_u32(beta_f * 256.0));
    Ok(())
}

// ---- kernel side ------------------------------------------------------------------

/// Registered from Linux 6.18 on; `dualpi2_init` works without options.
pub static OPS: Ops = Ops {
    id: "dualpi2",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| {
        let mut q = DualPi2::new(c.dev, c.handle, c.now);
        if let Some(o) = c.opts {
            q.apply(o.of()?, c.dev)?;
        }
        q.next_update = c.now + Duration::from_nanos(q.tupdate as u64);
        Ok(Box::new(q))
    },
    parse_class: None,
    flags: Flags::NONE,
    since: Some(KernelVersion::V6_18),
};

/// A queued packet and its `dualpi2_skb_cb`.
struct Entry {
    pkt: Packet,
    /// `classified`: [`C_CLASSIC`], [`C_L4S`] or [`C_LLLL`].
    class: u8,
    apply_step: bool,
}

/// Kernel side: `struct dualpi2_sched_data`, with the C-queue (`sch->q`) and the
/// L-queue (an internal pfifo whose own counters nothing dumps).
pub struct DualPi2 {
    handle: u32,
    c_queue: VecDeque<Entry>,
    l_queue: VecDeque<Entry>,
    block: Block,
    // PI2
    /// ns.
    target: u64,
    /// ns.
    tupdate: u32,
    prob: u32,
    /// Internal units (see [`scale_alpha_beta`]).
    alpha: u32,
    beta: u32,
    // step AQM
    /// ns, or packets.
    step_thresh: u32,
    step_in_packets: bool,
    // C-queue protection
    credit: i32,
    credit_init: i32,
    wc: u8,
    wl: u8,
    // general
    limit: u32,
    memory_limit: u32,
    coupling: u8,
    ecn_mask: u8,
    min_qlen_step: u32,
    drop_early: bool,
    drop_overload: bool,
    split_gso: bool,
    // state and statistics
    /// Enqueue times (ns) of the queue heads, 0 for none.
    c_head_ts: u64,
    l_head_ts: u64,
    last_qdelay: u64,
    packets_in_c: u32,
    packets_in_l: u32,
    maxq: u32,
    ecn_mark: u32,
    step_marks: u32,
    memory_used: u32,
    max_memory_used: u32,
    /// `psched_mtu(qdisc_dev(sch))`.
    mtu: u32,
    rng: SplitMix64,
    /// The timer's next expiry.
    next_update: Instant,
    /// The time of the last operation, for the head delays `tc -s` shows.
    last_now: Instant,
}

impl DualPi2 {
    /// `dualpi2_init` before its options: `dualpi2_reset_default`. The caller applies
    /// the options and arms the timer.
    pub fn new(dev: &DevInfo, handle: u32, now: Instant) -> DualPi2 {
        let mtu = dev.psched_mtu();
        let mut q = DualPi2 {
            handle,
            c_queue: VecDeque::new(),
            l_queue: VecDeque::new(),
            block: Block::new(handle),
            target: 15_000_000,
            tupdate: 16_000_000,
            prob: 0,
            alpha: scale_alpha_beta(41),
            beta: scale_alpha_beta(819),
            step_thresh: 1_000_000,
            step_in_packets: false,
            credit: 0,
            credit_init: 0,
            wc: 0,
            wl: 0,
            limit: 10_000,
            memory_limit: memory_limit_for(10_000, mtu),
            coupling: 2,
            ecn_mask: ECN_MASK_L4S_ECT,
            min_qlen_step: 0,
            drop_early: false,
            drop_overload: true,
            split_gso: true,
            c_head_ts: 0,
            l_head_ts: 0,
            last_qdelay: 0,
            packets_in_c: 0,
            packets_in_l: 0,
            maxq: 0,
            ecn_mark: 0,
            step_marks: 0,
            memory_used: 0,
            max_memory_used: 0,
            mtu,
            rng: SplitMix64(default_seed(handle)),
            next_update: now,
            last_now: now,
        };
        q.set_c_protection(10);
        q
    }

    /// Re-seed the generator behind `get_random_u32`.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
    }

    /// `dualpi2_calculate_c_protection`: the weights and the credit's reset value
    /// (which the credit takes at once).
    fn set_c_protection(&mut self, wc: u8) {
        self.wc = wc;
        self.wl = MAX_WC - wc;
        self.credit_init = (self.mtu as i32).wrapping_mul(wc as i32 - self.wl as i32);
        self.credit = self.credit_init;
    }

    /// The parameter part of `dualpi2_change` (the policy checks first: nothing is
    /// applied when one fails).
    fn apply(&mut self, o: &DualPi2Opt, dev: &DevInfo) -> Result<(), TcError> {
        let range = || TcError::kernel("integer out of range");
        // nla_parse_nested: the policy, attribute by attribute in tc's order.
        if o.alpha.is_some_and(|a| a == 0 || a > ALPHA_BETA_MAX) || o.beta.is_some_and(|b| b == 0 || b > ALPHA_BETA_MAX)
        {
            return Err(range());
        }
        if o.coupling == Some(0) {
            return Err(range());
        }
        self.mtu = dev.psched_mtu();
        if let Some(l) = o.limit {
            self.limit = l;
            self.memory_limit = memory_limit_for(l, self.mtu);
        }
        if let Some(m) = o.memory_limit {
            self.memory_limit = m;
        }
        if let Some(t) = o.target {
            self.target = t as u64 * 1000;
        }
        if let Some(t) = o.tupdate {
            self.tupdate = us_to_ns(t);
        }
        if let Some(a) = o.alpha {
            self.alpha = scale_alpha_beta(a);
        }
        if let Some(b) = o.beta {
            self.beta = scale_alpha_beta(b);
        }
        match o.step {
            Some(Step::Packets(n)) => (self.step_in_packets, self.step_thresh) = (true, n),
            Some(Step::Us(us)) => (self.step_in_packets, self.step_thresh) = (false, us_to_ns(us)),
            None => {}
        }
        if let Some(n) = o.min_qlen_step {
            self.min_qlen_step = n;
        }
        if let Some(c) = o.coupling {
            self.coupling = c;
        }
        if let Some(v) = o.drop_overload {
            self.drop_overload = v;
        }
        if let Some(v) = o.drop_early {
            self.drop_early = v;
        }
        if let Some(wc) = o.c_protection {
            self.set_c_protection(wc);
        }
        if let Some(m) = o.ecn_mask {
            self.ecn_mask = m;
        }
        if let Some(v) = o.split_gso {
            self.split_gso = v;
        }
        Ok(())
    }

    /// `get_random_u32() <= prob`.
    fn roll(&mut self, prob: u32) -> bool {
        self.rng.next_u32() <= prob
    }

    /// `dualpi2_mark`: CE on an ECT packet, counted.
    fn mark(&mut self, pkt: &mut Packet) -> bool {
        let marked = pkt.set_ce();
        if marked {
            self.ecn_mark = self.ecn_mark.wrapping_add(1);
        }
        marked
    }

    /// `must_drop`: the PI2 decision for a packet of class `class` with `backlog`
    /// bytes queued (`dualpi2_classic_marking` / `dualpi2_scalable_marking`); may
    /// mark the packet instead.
    fn must_drop(&mut self, backlog: u32, class: u8, pkt: &mut Packet) -> bool {
        if (backlog as u64) < 2 * self.mtu as u64 {
            return false;
        }
        let prob = self.prob;
        let local_l_prob = prob as u64 * self.coupling as u64;
        let overload = local_l_prob > MAX_PROB as u64;
        let not_ect = pkt.ecn() == 0;
        match class {
            C_LLLL => false,
            C_L4S => {
                if overload {
                    // Classic drops first if configured to trade loss for latency.
                    if self.drop_overload && self.roll(prob) && self.roll(prob) {
                        return true;
                    }
                    self.mark(pkt);
                } else if self.roll(local_l_prob as u32) {
                    // Non-ECT packets may have been put here by a filter.
                    if not_ect {
                        return true;
                    }
                    self.mark(pkt);
                }
                false
            }
            _ => {
                if self.roll(prob) && self.roll(prob) {
                    if overload || not_ect {
                        return true;
                    }
                    self.mark(pkt);
                }
                false
            }
        }
    }

    /// `dualpi2_skb_classify`: the class, or the answer for a packet a filter took.
    fn classify(&self, pkt: &mut Packet, now: Instant) -> Result<u8, Enqueued> {
        if pkt.ecn() & self.ecn_mask != 0 {
            return Ok(C_L4S);
        }
        if tc_h_maj(pkt.priority) == self.handle && tc_h_min(pkt.priority) < C_MAX {
            return Ok(tc_h_min(pkt.priority) as u8);
        }
        match self.block.classify(pkt, now) {
            None => Ok(C_CLASSIC),
            Some(Verdict::Class(r)) => {
                Ok(if tc_h_min(r.classid) < C_MAX { tc_h_min(r.classid) as u8 } else { C_CLASSIC })
            }
            Some(Verdict::Stolen) => Err(Enqueued::Stolen),
            Some(Verdict::Shot) => Err(Enqueued::Dropped),
        }
    }

    /// `dualpi2_enqueue_skb`: one (segment of a) packet into its queue.
    fn enqueue_one(&mut self, sch: &mut Sch, mut pkt: Packet, class: u8, now: Instant) -> Enqueued {
        let in_l = class != C_CLASSIC;
        if sch.stats.qlen >= self.limit || self.memory_used as u64 + pkt.truesize as u64 > self.memory_limit as u64 {
            sch.stats.overlimit();
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        if self.drop_early && self.must_drop(sch.stats.backlog, class, &mut pkt) {
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        let ts = now.as_nanos();
        pkt.enqueued_at = now;
        self.memory_used = self.memory_used.wrapping_add(pkt.truesize);
        self.max_memory_used = self.max_memory_used.max(self.memory_used);
        self.maxq = self.maxq.max(sch.stats.qlen);
        sch.stats.queued(pkt.len);
        if in_l {
            let apply_step = class == C_L4S && self.l_queue.len() as u32 >= self.min_qlen_step;
            self.packets_in_l = self.packets_in_l.wrapping_add(1);
            if self.l_head_ts == 0 {
                self.l_head_ts = ts;
            }
            self.l_queue.push_back(Entry { pkt, class, apply_step });
        } else {
            self.packets_in_c = self.packets_in_c.wrapping_add(1);
            if self.c_head_ts == 0 {
                self.c_head_ts = ts;
            }
            self.c_queue.push_back(Entry { pkt, class, apply_step: false });
        }
        Enqueued::Success
    }

    /// `dequeue_packet`: the WRR pick, with the credit change it would make.
    fn dequeue_packet(&mut self, sch: &mut Sch) -> Option<(Entry, i32)> {
        let l_len = self.l_queue.len();
        let c_len = self.c_queue.len();
        let (e, change) = if l_len > 0 && (c_len == 0 || self.credit <= 0) {
            let e = self.l_queue.pop_front()?;
            self.l_head_ts = self.l_queue.front().map_or(0, |h| h.pkt.enqueued_at.as_nanos());
            (e, if c_len > 0 { self.wc as i32 } else { 0 })
        } else if c_len > 0 {
            let e = self.c_queue.pop_front()?;
            self.c_head_ts = self.c_queue.front().map_or(0, |h| h.pkt.enqueued_at.as_nanos());
            (e, if l_len > 0 { -(self.wl as i32) } else { 0 })
        } else {
            self.credit = self.credit_init;
            return None;
        };
        self.memory_used = self.memory_used.wrapping_sub(e.pkt.truesize);
        sch.stats.unqueued(e.pkt.len);
        let change = change.wrapping_mul(e.pkt.len as i32);
        Some((e, change))
    }

    /// `do_step_aqm` for an L-queue packet leaving at `now`: true to drop it.
    fn step_aqm(&mut self, e: &mut Entry, now: Instant) -> bool {
        let qdelay = if self.step_in_packets {
            self.l_queue.len() as u64
        } else {
            now.as_nanos().wrapping_sub(e.pkt.enqueued_at.as_nanos())
        };
        if e.apply_step && qdelay > self.step_thresh as u64 {
            if e.pkt.ecn() == 0 {
                return true;
            }
            if self.mark(&mut e.pkt) {
                self.step_marks = self.step_marks.wrapping_add(1);
            }
        }
        false
    }

    /// The head delays (`get_queue_delays`) at `now`: (C, L) in ns.
    fn queue_delays(&self, now: Instant) -> (u64, u64) {
        let d = |ts: u64| if ts == 0 { 0 } else { now.as_nanos().wrapping_sub(ts) };
        (d(self.c_head_ts), d(self.l_head_ts))
    }

    /// `calculate_probability` at `now`.
    fn calculate_probability(&mut self, now: Instant) -> u32 {
        let (qc, ql) = self.queue_delays(now);
        let qdelay = qc.max(ql);
        let mut delta = (qdelay as i64).wrapping_sub(self.target as i64).wrapping_mul(self.alpha as i64);
        delta =
            delta.wrapping_add((qdelay as i64).wrapping_sub(self.last_qdelay as i64).wrapping_mul(self.beta as i64));
        self.last_qdelay = qdelay;
        // __scale_delta: u64 division by 64, then u32 arithmetic on the probability.
        let new_prob = if delta > 0 {
            let p = ((delta as u64 >> ALPHA_BETA_GRANULARITY) as u32).wrapping_add(self.prob);
            if p < self.prob {
                MAX_PROB
            } else {
                p
            }
        } else {
            let p = self.prob.wrapping_sub((delta.wrapping_neg() as u64 >> ALPHA_BETA_GRANULARITY) as u32);
            if p > self.prob {
                0
            } else {
                p
            }
        };
        if !self.drop_overload {
            return new_prob.min(MAX_PROB / self.coupling as u32);
        }
        new_prob
    }

    /// `dualpi2_timer` for every deadline up to `now`.
    fn run_timer(&mut self, now: Instant) {
        while self.next_update <= now {
            let at = self.next_update;
            let before = (self.prob, self.last_qdelay);
            self.prob = self.calculate_probability(at);
            let period = self.tupdate as u64;
            if period == 0 {
                // Only a destroyed qdisc has tupdate 0; the timer stops.
                self.next_update = Instant::from_nanos(u64::MAX);
                break;
            }
            if before == (self.prob, self.last_qdelay) && at + Duration::from_nanos(period) <= now {
                // A fixed point (both queues empty): later runs up to `now` change nothing.
                let n = (now - at).as_nanos() / period;
                self.next_update = at + Duration::from_nanos(n * period);
            }
            self.next_update += Duration::from_nanos(period);
        }
        self.last_now = now;
    }

    // ---- accessors (tests) ----------------------------------------------------------

    pub fn prob(&self) -> u32 {
        self.prob
    }
    pub fn credit(&self) -> i32 {
        self.credit
    }
    /// (ecn_mark, step_marks, packets_in_c, packets_in_l, maxq).
    pub fn counters(&self) -> (u32, u32, u32, u32, u32) {
        (self.ecn_mark, self.step_marks, self.packets_in_c, self.packets_in_l, self.maxq)
    }
    pub fn memory(&self) -> (u32, u32, u32) {
        (self.memory_used, self.max_memory_used, self.memory_limit)
    }
    pub fn queue_lens(&self) -> (usize, usize) {
        (self.c_queue.len(), self.l_queue.len())
    }
}

/// `get_memory_limit`: limit × 2 MTUs, saturating at U32_MAX.
fn memory_limit_for(limit: u32, mtu: u32) -> u32 {
    u32::try_from(limit as u64 * 2 * mtu as u64).unwrap_or(u32::MAX)
}

impl Qdisc for DualPi2 {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    crate::classful!();

    /// `dualpi2_qdisc_enqueue`: classify, then the packet or its GSO segments.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.run_timer(now);
        let class = match self.classify(&mut pkt, now) {
            Ok(c) => c,
            Err(e) => return sch.unclassified(e),
        };
        if !(self.split_gso && pkt.gso_segs > 1) {
            return self.enqueue_one(sch, pkt, class, now);
        }
        let orig_len = pkt.len;
        let (mut cnt, mut bytes, mut last) = (0i32, 0u32, Enqueued::Dropped);
        let mut lost = Vec::new();
        for seg in pkt.gso_segments() {
            let (len, id) = (seg.len, seg.id);
            last = self.enqueue_one(sch, seg, class, now);
            if last == Enqueued::Success {
                cnt += 1;
                bytes += len;
            } else {
                lost.push(id);
            }
        }
        if cnt == 0 {
            return last;
        }
        // The skb is answered NET_XMIT_SUCCESS: the segments that were not are freed.
        lost.into_iter().for_each(crate::drops::freed);
        // The parents count one packet of orig_len: correct them to what went in.
        sch.reduce(1 - cnt, orig_len as i64 - bytes as i64);
        Enqueued::Success
    }

    /// `dualpi2_qdisc_dequeue`: the WRR pick, the PI2 drop (`drop_dequeue`) and the
    /// L-queue's step AQM, retried until a packet may leave; the drops are reported
    /// up at the end (`dualpi2_dequeue_drop`).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.run_timer(now);
        let (mut dropped, mut dropped_len) = (0i32, 0i64);
        let out = loop {
            let Some((mut e, change)) = self.dequeue_packet(sch) else { break Dequeued::Empty };
            let drop = (!self.drop_early && self.must_drop(sch.stats.backlog, e.class, &mut e.pkt))
                || (e.class != C_CLASSIC && self.step_aqm(&mut e, now));
            if drop {
                dropped += 1;
                dropped_len += e.pkt.len as i64;
                sch.stats.dropped();
                e.pkt.kfree_skb();
                continue;
            }
            self.credit = self.credit.wrapping_add(change);
            sch.stats.sent(&e.pkt);
            break Dequeued::Packet(e.pkt);
        };
        if dropped > 0 {
            sch.reduce(dropped, dropped_len);
        }
        out
    }

    // peek: qdisc_peek_dequeued (the default), as dualpi2_peek.

    /// `dualpi2_reset`: both queues, the counters, p and the credit; the
    /// configuration stays.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.run_timer(now);
        self.c_queue.clear();
        self.l_queue.clear();
        self.c_head_ts = 0;
        self.l_head_ts = 0;
        self.prob = 0;
        self.packets_in_c = 0;
        self.packets_in_l = 0;
        self.maxq = 0;
        self.ecn_mark = 0;
        self.step_marks = 0;
        self.memory_used = 0;
        self.max_memory_used = 0;
        self.credit = self.credit_init;
    }

    /// `dualpi2_change`: the parameters, then packets beyond the limits leave as
    /// drops — the C-queue's head first (the parked packet before it), then the
    /// L-queue's — reported up.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        let o: &DualPi2Opt = opts.of()?;
        self.run_timer(now);
        if o.is_empty() {
            return Err(TcError::kernel("sch_dualpi2: Dualpi2 options are required"));
        }
        self.apply(o, dev)?;
        let (old_qlen, old_backlog) = (sch.stats.qlen as i32, sch.stats.backlog as i64);
        while sch.stats.qlen > self.limit || self.memory_used > self.memory_limit {
            let p = if sch.stats.qlen as usize > self.l_queue.len() {
                // qdisc_dequeue_internal(sch, true): the parked packet, else the C head.
                match sch.take_parked() {
                    Some(p) => p,
                    None => {
                        let Some(e) = self.c_queue.pop_front() else { break };
                        sch.stats.unqueued(e.pkt.len);
                        e.pkt
                    }
                }
            } else {
                let Some(e) = self.l_queue.pop_front() else { break };
                sch.stats.unqueued(e.pkt.len);
                e.pkt
            };
            self.memory_used = self.memory_used.wrapping_sub(p.truesize);
            sch.stats.dropped();
            p.kfree_skb();
        }
        sch.reduce(old_qlen - sch.stats.qlen as i32, old_backlog - sch.stats.backlog as i64);
        Ok(())
    }

    /// `dualpi2_dump` printed by `dualpi2_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        let m = self.memory_limit;
        out.uint("memory-limit", format_args!("memlimit {m}B "), m as u64);
        print_time(out, "target", ns_to_us(self.target));
        print_time(out, "tupdate", ns_to_us(self.tupdate as u64));
        print_alpha_beta(out, "alpha", unscale_alpha_beta(self.alpha));
        print_alpha_beta(out, "beta", unscale_alpha_beta(self.beta));
        if self.step_in_packets {
            let s = self.step_thresh;
            out.uint("step-thresh-pkts", format_args!("step_thresh {s}p "), s as u64);
        } else {
            let us = ns_to_us(self.step_thresh as u64);
            out.uint("step-thresh-us", format_args!(""), us as u64);
            out.fp(format_args!("step_thresh {} ", units::fmt_time(us)));
        }
        let n = self.min_qlen_step;
        out.uint("min-qlen-step", format_args!("min_qlen_step {n}p "), n as u64);
        let c = self.coupling;
        out.uint("coupling", format_args!("coupling_factor {c} "), c as u64);
        out.fp(format_args!("{} ", if self.drop_overload { "drop_on_overload" } else { "overflow" }));
        out.string("drop-overload", format_args!(""), if self.drop_overload { "drop" } else { "overflow" });
        out.fp(format_args!("{} ", if self.drop_early { "drop_enqueue" } else { "drop_dequeue" }));
        out.string("drop-early", format_args!(""), if self.drop_early { "drop-enqueue" } else { "drop-dequeue" });
        let wc = self.wc;
        out.uint("c-protection", format_args!("classic_protection {wc}% "), wc as u64);
        // get_ecn_type: the policy lets only 1..=3 through; 2 prints as any_ect.
        let l4s = self.ecn_mask & ECN_MASK_ANY_ECT == ECN_MASK_L4S_ECT;
        out.fp(format_args!("{} ", if l4s { "l4s_ect" } else { "any_ect" }));
        out.string("ecn-mask", format_args!(""), if l4s { "l4s-ect" } else { "any-ect" });
        out.fp(format_args!("{}split_gso ", if self.split_gso { "" } else { "no_" }));
        if self.split_gso {
            out.null("split-gso", format_args!(""));
        }
    }

    /// `dualpi2_dump_stats` printed by `dualpi2_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let prob = self.prob as f64 / MAX_PROB as f64;
        out.float("prob", format_args!("prob {prob:.6} "), &units::fmt_g(prob, 6));
        let (qc, ql) = self.queue_delays(self.last_now);
        let (dc, dl) = (ns_to_us(qc), ns_to_us(ql));
        out.uint("delay-c", format_args!("delay_c {dc}us "), dc as u64);
        out.uint("delay-l", format_args!("delay_l {dl}us"), dl as u64);
        out.nl();
        let (c, l, maxq) = (self.packets_in_c, self.packets_in_l, self.maxq);
        out.uint("pkts-in-c", format_args!("pkts_in_c {c} "), c as u64);
        out.uint("pkts-in-l", format_args!("pkts_in_l {l} "), l as u64);
        out.uint("maxq", format_args!("maxq {maxq}"), maxq as u64);
        out.nl();
        let (e, s) = (self.ecn_mark, self.step_marks);
        out.uint("ecn-mark", format_args!("ecn_mark {e} "), e as u64);
        out.uint("step-mark", format_args!("step_mark {s}"), s as u64);
        out.nl();
        let cr = self.credit;
        out.int("credit", format_args!("credit {cr} "), cr as i64);
        out.fp(format_args!("({})", if cr > 0 { "C-queue" } else { "L-queue" }));
        out.nl();
        let (u, m, lim) = (self.memory_used, self.max_memory_used, self.memory_limit);
        out.uint("memory-used", format_args!("memory_used {u} "), u as u64);
        out.uint("max-memory-used", format_args!("(max {m}) "), m as u64);
        out.uint("memory-limit", format_args!("of memory limit {lim}"), lim as u64);
        out.nl();
    }
}

/// q_dualpi2.c: a time as µs in JSON, sprint_time in text.
fn print_time(out: &mut Out, key: &str, us: u32) {
    out.uint(key, format_args!(""), us as u64);
    out.fp(format_args!("{key} {} ", units::fmt_time(us)));
}

/// q_dualpi2.c `get_scaled_alpha_beta` printed with `%f` (text) / `%g` (JSON): a
/// float, Hz·256 ÷ 256.
fn print_alpha_beta(out: &mut Out, key: &str, v: u32) {
    let f = (v as f32 / TC_ALPHA_BETA_SCALE) as f64;
    out.float(key, format_args!("{key} {f:.6} "), &units::fmt_g(f, 6));
}

impl Classful for DualPi2 {
    /// `dualpi2_walk`: two entries; without a `dump` op each is dumped with the
    /// qdisc's own handle (minor 0).
    fn class_minors(&self) -> Vec<u32> {
        vec![0, 0]
    }
    /// `dualpi2_find` answers 0 for every classid.
    fn find(&self, _minor: u32) -> bool {
        false
    }
    /// No `dump_stats`: the classes print no counters.
    fn class_stats(&self, _minor: u32) -> Option<Stats> {
        None
    }
    fn dumps_leaf(&self, _minor: u32) -> bool {
        false
    }
    /// `dualpi2_tcf_block`: the qdisc's block; classes have none.
    fn block(&self, minor: u32) -> Option<&Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        (minor == 0).then_some(&mut self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::stats::Reduce;
    use crate::tc::{makeargs, Tc};
    use crate::testing::{argv, dev, held, ms, t};
    use crate::tree::DevSpec;

    /// ECN codepoints in `tos`.
    const ECT1: u8 = 0b01;
    const ECT0: u8 = 0b10;
    const CE: u8 = 0b11;

    fn p(s: &str) -> Result<DualPi2Opt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    /// dualpi2 `1:` with options `s`, made at 1 ms (the kernel's clock is never 0).
    fn q(s: &str) -> Node<DualPi2> {
        let mut q = DualPi2::new(&dev(), 0x10000, ms(1));
        q.apply(&p(s).unwrap(), &dev()).unwrap();
        q.next_update = ms(1) + Duration::from_nanos(q.tupdate as u64);
        held(q)
    }
    fn pkt(id: u64, len: u32, tos: u8) -> Packet {
        let mut p = Packet::new(id, len);
        p.tos = tos;
        p
    }
    fn run(tc: &mut Tc, cmd: &str) -> (String, String, i32) {
        let o = tc.run(&makeargs(cmd));
        (o.stdout, o.stderr, o.code)
    }

    #[test]
    fn defaults_and_units() {
        // α 41 and β 819 (Hz·256) become 44 and 879 per 64 ns of delay; dumps send
        // back 40 and 818 (the round trip truncates twice).
        assert_eq!((scale_alpha_beta(41), scale_alpha_beta(819)), (44, 879));
        assert_eq!((unscale_alpha_beta(44), unscale_alpha_beta(879)), (40, 818));
        let q = q("");
        assert_eq!((q.limit, q.memory_limit, q.target, q.tupdate), (10_000, 30_280_000, 15_000_000, 16_000_000));
        assert_eq!((q.step_thresh, q.step_in_packets, q.coupling, q.ecn_mask), (1_000_000, false, 2, 1));
        // wc 10 %, wl 90 %: the credit starts at 1514 · (10 − 90), the L-queue's turn.
        assert_eq!((q.wc, q.wl, q.credit), (10, 90, -121_120));
        assert!(q.drop_overload && !q.drop_early && q.split_gso);
        assert_eq!(q.next_update, ms(17), "the timer fires tupdate after init");
        // Saturation: a limit of 2^32 − 1 packets caps memlimit; 5 s of tupdate or
        // step threshold cap at U32_MAX ns; target is a u64.
        let q2 = self::q("limit 4294967295 tupdate 5s step_thresh 5s target 5s");
        assert_eq!(
            (q2.memory_limit, q2.tupdate, q2.step_thresh, q2.target),
            (u32::MAX, u32::MAX, u32::MAX, 5e9 as u64)
        );
        assert_eq!((ns_to_us(q2.tupdate as u64), ns_to_us(q2.target)), (4_294_967, 5_000_000));
    }

    #[test]
    fn tc_parses_like_q_dualpi2() {
        let o = p("limit 100 memlimit 200000 target 20ms tupdate 10ms alpha 0.5 beta 4 coupling_factor 0x3 \
                   step_thresh 2ms min_qlen_step 2 overflow drop_enqueue classic_protection 20 any_ect no_split_gso")
        .unwrap();
        let want = DualPi2Opt {
            limit: Some(100),
            memory_limit: Some(200_000),
            target: Some(20_000),
            tupdate: Some(10_000),
            alpha: Some(128),
            beta: Some(1024),
            step: Some(Step::Us(2000)),
            min_qlen_step: Some(2),
            coupling: Some(3),
            drop_overload: Some(false),
            drop_early: Some(true),
            c_protection: Some(20),
            ecn_mask: Some(3),
            split_gso: Some(false),
        };
        assert_eq!(o, want);
        // A bare number is a time (µs); packets need a suffix.
        assert_eq!(p("step_thresh 5").unwrap().step, Some(Step::Us(5)));
        assert_eq!(p("step_thresh 7packets").unwrap().step, Some(Step::Packets(7)));
        assert_eq!(p("step_thresh +08pkt").unwrap().step, Some(Step::Packets(8)));
        // Zeros are not sent (min_qlen_step is, once given); rint(55.5) is 56.
        assert_eq!(p("limit 0 memlimit 0 target 0 tupdate 0 step_thresh 0p").unwrap(), DualPi2Opt::default());
        assert_eq!(p("min_qlen_step 0").unwrap().min_qlen_step, Some(0));
        assert_eq!(p("classic_protection 55.5%").unwrap().c_protection, Some(56));
        // α below 1/256 Hz is sent as 0 (the kernel then refuses it), with a warning.
        let v = argv("alpha 0.001");
        let mut a = Args::new(&v);
        assert_eq!(parse(&mut a).unwrap().alpha, Some(0));
        assert_eq!(a.notes, "Warning: \"alpha\" is too small and will be rounded to zero.\n");
        let ill = |w: &str| TcError::tc(format!("Illegal \"{w}\"\n"));
        for (args, what) in [
            ("limit x", "limit"),
            ("limit 0x10", "limit"),
            ("memlimit -1", "memlimit"),
            ("min_qlen_step 1p", "min_qlen_step"),
            ("step_thresh -1p", "step_thresh"),
            ("alpha 16777216", "alpha"),
            ("alpha -1", "alpha"),
            ("beta 1x", "beta"),
            ("coupling_factor 256", "coupling_factor"),
            ("coupling_factor -1", "coupling_factor"),
            ("step_thresh 10q", "step_thresh"),
            ("step_thresh 0x10p", "step_thresh"),
            ("step_thresh 4294967296p", "step_thresh"),
            ("classic_protection 101", "classic_protection"),
            ("classic_protection -1", "classic_protection"),
            ("max_rtt 100ns", "max_rtt"),
        ] {
            assert_eq!(p(args), Err(ill(what)), "{args}");
        }
        assert_eq!(p("foo"), Err(TcError::tc(format!("What is \"foo\"?\n{USAGE}"))));
        assert_eq!(p("limit"), Err(TcError::incomplete()));
    }

    /// max_rtt/typical_rtt: target = typical, tupdate = min(typical, max/3),
    /// α = 0.1·tupdate/max², β = 0.3/max (Hz), in q_dualpi2.c's float constants.
    #[test]
    fn auto_configuration() {
        let v = argv("max_rtt 100ms alpha 2");
        let mut a = Args::new(&v);
        let o = parse(&mut a).unwrap();
        // typical = 100 ms / 6 = 16666 µs; α = 0.16666000248 Hz (·256 = 42.66),
        // β = 0.3000000119 / 0.1 s (·256 = 768.00003).
        assert_eq!((o.target, o.tupdate, o.alpha, o.beta), (Some(16_666), Some(16_666), Some(42), Some(768)));
        assert_eq!(
            a.notes,
            "rtt_max is specified, ignore alpha/beta/tupdate/target\n\
             Auto-config [max_rtt: 100ms, typical_rtt: 16.7ms]: target=16.7ms tupdate=16.7ms alpha=0.166660 beta=3.000000\n"
        );
        // typical alone: max = 6 × typical; tupdate = max/3 when typical is larger.
        let o = p("typical_rtt 5ms").unwrap();
        assert_eq!((o.target, o.tupdate), (Some(5000), Some(5000)));
        let o = p("max_rtt 30ms typical_rtt 20ms").unwrap();
        assert_eq!((o.target, o.tupdate), (Some(20_000), Some(10_000)));
        assert_eq!(p("max_rtt 10ms typical_rtt 20ms"), Err(TcError::tc("typical_rtt must be <= max_rtt!\n")));
        assert_eq!(
            p("max_rtt 100s"),
            Err(TcError::tc("Large max_rtt=100s rounds down alpha=0.000167 and/or beta=0.003000!\n"))
        );
    }

    /// The kernel's netlink policy: α, β in [1, 2^31 − 1], coupling ≥ 1; nothing
    /// applied when one fails. An empty change is refused.
    #[test]
    fn kernel_policy_and_empty_change() {
        let mut q = q("");
        for s in ["alpha 0", "beta 8388608", "coupling_factor 0 limit 5"] {
            let e = q.change(&Opts::new(p(s).unwrap()), &dev(), ms(1));
            assert_eq!(e, Err(TcError::kernel("integer out of range")), "{s}");
        }
        assert_eq!(q.limit, 10_000);
        let e = q.change(&Opts::new(DualPi2Opt::default()), &dev(), ms(1));
        assert_eq!(e, Err(TcError::kernel("sch_dualpi2: Dualpi2 options are required")));
        q.change(&Opts::new(p("alpha 8388607 coupling_factor 255").unwrap()), &dev(), ms(1)).unwrap();
        assert_eq!((unscale_alpha_beta(q.alpha), q.coupling), (2_147_483_391, 255));
    }

    /// PI2 by hand: one classic packet waits from 2 ms; the updates at 17 ms and
    /// 33 ms see 15 ms and 31 ms of delay (target 15 ms, α 44, β 879 per 64 ns).
    #[test]
    fn probability_updates_by_hand() {
        let mut q = q("");
        q.enqueue(pkt(0, 1000, 0), ms(2));
        q.enqueue(pkt(1, 1000, 0), ms(16));
        assert_eq!(q.prob(), 0, "no update before 17 ms");
        q.enqueue(pkt(2, 1000, 0), ms(17));
        // (15 − 15) ms · 44 + (15 − 0) ms · 879 = 13 185 000 000; ÷ 64.
        assert_eq!((q.prob(), q.last_qdelay), (206_015_625, 15_000_000));
        q.peek(ms(40));
        // 33 ms: (31 − 15) ms · 44 + (31 − 15) ms · 879 = 14 768 000 000; ÷ 64.
        assert_eq!(q.prob(), 206_015_625 + 230_750_000);
        // The next update is at 49 ms: packet 0 left (parked), so the head is packet
        // 1, enqueued at 16 ms: 33 ms; (33 − 15) ms · 44 + (33 − 31) ms · 879.
        let before = q.prob();
        q.enqueue(pkt(3, 1000, 0), ms(49));
        assert_eq!(q.prob(), before + ((18_000_000u64 * 44 + 2_000_000 * 879) / 64) as u32);
        // Empty queues: the delay falls to 0 and pulls p down, to 0 and no further.
        while q.dequeue(ms(50)).packet().is_some() {}
        q.enqueue(pkt(4, 100, 0), ms(2000));
        assert_eq!((q.prob(), q.last_qdelay), (0, 0));
    }

    /// With `overflow`, p is capped so that coupling · p stays ≤ 1; with
    /// `drop_on_overload` it may reach 1 (and saturates there).
    #[test]
    fn coupling_cap_and_saturation() {
        for (opts, cap) in [("overflow coupling_factor 3", MAX_PROB / 3), ("drop_on_overload", MAX_PROB)] {
            let mut q = q(opts);
            q.enqueue(pkt(0, 1000, 0), ms(2));
            q.enqueue(pkt(1, 1000, 0), ms(60_000)); // every update up to 60 s, the head at 2 ms
            assert_eq!(q.prob(), cap, "{opts}");
        }
    }

    /// Skipping quiet deadlines changes nothing: one late operation ends where an
    /// operation at every deadline does.
    #[test]
    fn catch_up_matches_stepping() {
        let (mut a, mut b) = (q(""), q(""));
        for q in [&mut a, &mut b] {
            q.enqueue(pkt(0, 1000, 0), ms(2));
            q.dequeue(ms(300));
        }
        for k in 19..200 {
            a.peek(ms(16 * k + 1));
        }
        b.peek(ms(16 * 199 + 1));
        assert_eq!((a.prob(), a.last_qdelay, a.next_update), (b.prob(), b.last_qdelay, b.next_update));
    }

    /// ECN and priority classification, and what each class gets.
    #[test]
    fn classification() {
        let mut q = q("");
        q.enqueue(pkt(0, 100, ECT1), ms(2));
        q.enqueue(pkt(1, 100, CE), ms(2));
        q.enqueue(pkt(2, 100, ECT0), ms(2));
        q.enqueue(pkt(3, 100, 0), ms(2));
        q.enqueue(pkt(4, 100, 0).with_priority(0x1_0002), ms(2));
        q.enqueue(pkt(5, 100, 0).with_priority(0x1_0003), ms(2));
        q.enqueue(pkt(6, 100, 0).with_priority(0x2_0001), ms(2));
        assert_eq!(q.queue_lens(), (4, 3), "ECT(1), CE, 1:2 in L; ECT(0), Not-ECT, 1:3, 2:1 in C");
        let l: Vec<u8> = q.l_queue.iter().map(|e| e.class).collect();
        assert_eq!(l, [C_L4S, C_L4S, C_LLLL]);
        let mut any = self::q("any_ect");
        any.enqueue(pkt(0, 100, ECT0), ms(2));
        assert_eq!(any.queue_lens(), (0, 1));
        let (_, _, c, l, maxq) = q.counters();
        assert_eq!((c, l, maxq), (4, 3, 6));
    }

    /// The step AQM on time: an L4S packet that waited more than 1 ms is marked
    /// (counted twice: ecn_mark and step_mark); a Not-ECT one that a classid put in
    /// the L4S class is dropped; class :2 is exempt.
    #[test]
    fn step_threshold_in_time() {
        let mut q = q("");
        q.enqueue(pkt(0, 100, ECT1), ms(2));
        q.enqueue(pkt(1, 100, ECT1), ms(3));
        q.enqueue(pkt(2, 100, 0).with_priority(0x1_0001), ms(3));
        q.enqueue(pkt(3, 100, 0).with_priority(0x1_0002), ms(3));
        // At 4 ms: packet 0 waited 2 ms (marked), packet 1 exactly 1 ms (not above).
        let p0 = q.dequeue(ms(4)).packet().unwrap();
        assert_eq!((p0.id, p0.ecn()), (0, CE));
        let p1 = q.dequeue(ms(4)).packet().unwrap();
        assert_eq!((p1.id, p1.ecn()), (1, ECT1));
        // Packet 2 is dropped and the dequeue goes on to packet 3 (no step for :2).
        let p3 = q.dequeue(ms(10)).packet().unwrap();
        assert_eq!(p3.id, 3);
        let (ecn, step, ..) = q.counters();
        assert_eq!((ecn, step, q.stats().drops), (1, 1, 1));
        assert_eq!(q.take_reduce(), Reduce::new(1, 100));
    }

    /// The step AQM in packets: the L-queue's length after the dequeue must exceed
    /// the threshold; `min_qlen_step` exempts packets that arrived to a short queue.
    #[test]
    fn step_threshold_in_packets() {
        let mut q = q("step_thresh 1p min_qlen_step 1");
        for i in 0..4 {
            q.enqueue(pkt(i, 100, ECT1), ms(2));
        }
        // Packet 0 arrived to an empty L-queue: never stepped. Packet 1 leaves 2
        // behind (> 1): marked. Packet 2 leaves 1: not.
        let ecn: Vec<u8> = (0..4).map(|_| q.dequeue(ms(2)).packet().unwrap().ecn()).collect();
        assert_eq!(ecn, [ECT1, CE, ECT1, ECT1]);
        assert_eq!(q.counters().1, 1);
    }

    /// Both queues busy: the credit alternates them by bytes (wc = wl = 50 %, credit
    /// 0: the L-queue first); with one queue empty the credit stands, and an empty
    /// dequeue resets it.
    #[test]
    fn weighted_round_robin() {
        let mut q = q("classic_protection 50");
        for i in 0..3 {
            q.enqueue(pkt(i, 1000, 0), ms(2));
            q.enqueue(pkt(10 + i, 1000, ECT1), ms(2));
        }
        let order: Vec<u64> = (0..6).map(|_| q.dequeue(ms(2)).packet().unwrap().id).collect();
        assert_eq!(order, [10, 0, 11, 1, 12, 2]);
        // The last C packet left with the L-queue empty: credit unchanged at 50 000.
        assert_eq!(q.credit(), 50_000);
        assert_eq!(q.dequeue(ms(2)), Dequeued::Empty);
        assert_eq!(q.credit(), 0);
        // Default weights: 13 L packets of 1000 bytes lift −121 120 above 0.
        let mut q = self::q("");
        for i in 0..15 {
            q.enqueue(pkt(i, 1000, ECT1), ms(2));
        }
        q.enqueue(pkt(100, 1000, 0), ms(2));
        let order: Vec<u64> = (0..16).map(|_| q.dequeue(ms(2)).packet().unwrap().id).collect();
        assert_eq!(order[13], 100, "{order:?}");
    }

    /// PI2 drops and marks with p = 1 (every roll succeeds), never with less than
    /// two MTUs queued; coupling 2 makes that an overload, where ECT stops
    /// protecting from drops.
    #[test]
    fn marking_and_dropping() {
        let mut q = q("coupling_factor 1");
        q.prob = MAX_PROB;
        let mut e = pkt(0, 100, ECT0);
        assert!(!q.must_drop(3027, C_CLASSIC, &mut e), "under two MTUs");
        assert!(q.must_drop(3028, C_CLASSIC, &mut pkt(0, 100, 0)));
        assert!(!q.must_drop(3028, C_CLASSIC, &mut e));
        assert_eq!((e.ecn(), q.ecn_mark), (CE, 1));
        // p_L = p: a Not-ECT L4S packet (a classid put it there) is dropped.
        assert!(q.must_drop(3028, C_L4S, &mut pkt(0, 100, 0)));
        // Overload: classic ECT packets are dropped; L4S ones too with
        // drop_on_overload …
        q.coupling = 2;
        assert!(q.must_drop(3028, C_CLASSIC, &mut pkt(0, 100, ECT0)));
        assert!(q.must_drop(3028, C_L4S, &mut pkt(0, 100, ECT1)));
        assert!(!q.must_drop(3028, C_LLLL, &mut pkt(0, 100, 0)));
        // … and only marked with overflow.
        q.drop_overload = false;
        let mut l = pkt(0, 100, ECT1);
        assert!(!q.must_drop(3028, C_L4S, &mut l));
        assert_eq!((l.ecn(), q.ecn_mark), (CE, 2));
        // At dequeue (the default): the drop is counted and reported up.
        let mut q = self::q("");
        for i in 0..4 {
            q.enqueue(pkt(i, 1514, 0), ms(2));
        }
        q.prob = MAX_PROB;
        // Backlog after taking packet 0 is 3 · 1514 ≥ 3028: dropped; likewise 1;
        // packet 2 leaves 1514 behind: sent.
        assert_eq!(q.dequeue(ms(2)).packet().unwrap().id, 2);
        assert_eq!((q.stats().drops, q.take_reduce()), (2, Reduce::new(2, 3028)));
        // At enqueue (drop_enqueue): refused before it is queued.
        let mut q = self::q("drop_enqueue");
        for i in 0..2 {
            q.enqueue(pkt(i, 1514, 0), ms(2));
        }
        q.prob = MAX_PROB;
        assert_eq!(q.enqueue(pkt(2, 1514, 0), ms(2)), Enqueued::Dropped);
        assert_eq!((q.stats().qlen, q.stats().drops, q.counters().2), (2, 1, 2));
    }

    /// limit and memlimit refuse at enqueue (overlimits and drops); a change below
    /// them drops from the C-queue's head, then the L-queue's.
    #[test]
    fn limits() {
        let mut q = q("limit 3");
        for i in 0..4 {
            let tos = if i % 2 == 0 { 0 } else { ECT1 };
            let want = if i < 3 { Enqueued::Success } else { Enqueued::Dropped };
            assert_eq!(q.enqueue(pkt(i, 1000, tos), ms(2)), want);
        }
        assert_eq!((q.stats().overlimits, q.stats().drops), (1, 1));
        assert_eq!(q.memory(), (3 * 2304, 3 * 2304, 3 * 2 * 1514));
        q.change(&Opts::new(p("limit 1").unwrap()), &dev(), ms(3)).unwrap();
        // C holds 0 and 2, L holds 1: 0 and 2 go, then qlen 1 = limit.
        assert_eq!(q.queue_lens(), (0, 1));
        assert_eq!((q.stats().drops, q.take_reduce()), (3, Reduce::new(2, 2000)));
        // memlimit alone: a packet whose truesize would pass it is refused.
        let mut q = self::q("memlimit 3000");
        assert_eq!(q.enqueue(pkt(0, 1000, 0), ms(2)), Enqueued::Success);
        assert_eq!(q.enqueue(pkt(1, 1000, 0), ms(2)), Enqueued::Dropped);
        q.change(&Opts::new(p("memlimit 100").unwrap()), &dev(), ms(2)).unwrap();
        assert_eq!((q.stats().qlen, q.memory().0), (0, 0));
    }

    /// GSO: split into segments (each enqueued and counted on its own, the parents
    /// corrected), or kept whole with no_split_gso.
    #[test]
    fn gso_split() {
        let mut big = Packet::new(0, 3000);
        big.gso_segs = 3;
        let mut q = q("");
        assert_eq!(q.enqueue(big.clone(), ms(2)), Enqueued::Success);
        assert_eq!((q.stats().qlen, q.counters().2), (3, 3));
        assert_eq!(q.take_reduce(), Reduce::new(-2, 0));
        let mut q = self::q("no_split_gso");
        q.enqueue(big, ms(2));
        assert_eq!((q.stats().qlen, q.counters().2), (1, 1));
        assert_eq!(q.dequeue(ms(2)).packet().unwrap().gso_segs, 3);
    }

    /// Conservation under mixed traffic with random marks and drops: every packet in
    /// is sent, dropped or still queued, and memory_used is what is queued.
    #[test]
    fn conservation() {
        let mut q = q("limit 40 step_thresh 3p classic_protection 30");
        let mut rng = SplitMix64(7);
        let (mut sent, mut sent_bytes, mut in_pkts, mut in_bytes) = (0u64, 0u64, 0u64, 0u64);
        for i in 0..20_000u64 {
            let now = ms(2) + Duration::from_micros(i * 50);
            let r = rng.next_u32();
            if r % 3 != 0 {
                let len = 64 + r % 1450;
                in_pkts += 1;
                in_bytes += len as u64;
                q.enqueue(pkt(i, len, (r >> 16) as u8 & 3), now);
            }
            if r % 5 < 2 {
                if let Some(p) = q.dequeue(now).packet() {
                    sent += 1;
                    sent_bytes += p.len as u64;
                }
            }
        }
        let (c, l) = q.queue_lens();
        let s = q.stats().clone();
        assert_eq!(s.qlen as usize, c + l);
        let queued_bytes: u64 = q.c_queue.iter().chain(&q.l_queue).map(|e| e.pkt.len as u64).sum();
        let queued_mem: u32 = q.c_queue.iter().chain(&q.l_queue).map(|e| e.pkt.truesize).sum();
        assert_eq!(s.backlog as u64, queued_bytes);
        assert_eq!(q.memory().0, queued_mem);
        assert_eq!((s.packets, s.bytes), (sent, sent_bytes));
        let dropped_bytes = in_bytes - sent_bytes - queued_bytes;
        assert_eq!(in_pkts, sent + s.drops as u64 + s.qlen as u64);
        assert!(s.drops > 0 && q.counters().0 > 0 && q.prob() > 0, "the run exercises the AQM");
        assert!(dropped_bytes > 0);
    }

    /// Through tc: the dump, the statistics and the classes as iproute2 6.18 prints
    /// them, filters steering into the L-queue, and 6.12 not knowing the kind.
    #[test]
    fn tc_end_to_end() {
        let mut tc = Tc::with_kernel(&[DevSpec::new("eth0")], KernelVersion::V6_18);
        run(&mut tc, "qdisc add dev eth0 root handle 1: dualpi2");
        let (out, _, _) = run(&mut tc, "-s qdisc show dev eth0");
        assert_eq!(
            out,
            "qdisc dualpi2 1: root refcnt 2 limit 10000p memlimit 30280000B target 15ms tupdate 16ms alpha 0.156250 \
             beta 3.195312 step_thresh 1ms min_qlen_step 0p coupling_factor 2 drop_on_overload drop_dequeue \
             classic_protection 10% l4s_ect split_gso \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n \
             backlog 0b 0p requeues 0\nprob 0.000000 delay_c 0us delay_l 0us\npkts_in_c 0 pkts_in_l 0 maxq 0\n\
             ecn_mark 0 step_mark 0\ncredit -121120 (L-queue)\nmemory_used 0 (max 0) of memory limit 30280000\n\n"
        );
        let (out, _, _) = run(&mut tc, "-j qdisc show dev eth0");
        assert!(out.contains(
            "\"options\":{\"limit\":10000,\"memory-limit\":30280000,\"target\":15000,\"tupdate\":16000,\"alpha\":0.15625,\
             \"beta\":3.19531,\"step-thresh-us\":1000,\"min-qlen-step\":0,\"coupling\":2,\"drop-overload\":\"drop\",\
             \"drop-early\":\"drop-dequeue\",\"c-protection\":10,\"ecn-mask\":\"l4s-ect\",\"split-gso\":null}"
        ));
        assert_eq!(run(&mut tc, "class show dev eth0").0, "class dualpi2 1: parent 1: \n".repeat(2));
        run(&mut tc, "filter add dev eth0 parent 1: protocol all prio 1 matchall classid 1:2");
        let d = tc.device_mut("eth0").unwrap();
        for i in 0..3 {
            let _ = d.xmit(Packet::new(i, 500), t(1_000_000), true);
        }
        let (out, _, _) = run(&mut tc, "-s qdisc show dev eth0");
        assert!(out.contains("pkts_in_c 0 pkts_in_l 3 maxq 2\n"), "{out}");
        let change = "qdisc change dev eth0 root dualpi2 step_thresh 5p overflow drop_enqueue any_ect no_split_gso";
        run(&mut tc, change);
        let (out, _, _) = run(&mut tc, "qdisc show dev eth0");
        assert!(out.contains(
            "step_thresh 5p min_qlen_step 0p coupling_factor 2 overflow drop_enqueue \
                              classic_protection 10% any_ect no_split_gso \n"
        ));
        let (out, _, _) = run(&mut tc, "-j qdisc show dev eth0");
        assert!(out.contains("\"step-thresh-pkts\":5,") && !out.contains("split-gso"), "{out}");
        // Kernel 6.12 with iproute2 6.15: golden dualpi2-nokernel.
        let mut tc = Tc::with_kernel(&[DevSpec::new("eth0")], KernelVersion::V6_12);
        assert_eq!(run(&mut tc, "qdisc add dev eth0 root dualpi2").1, "Error: Specified qdisc kind is unknown.\n");
        assert_eq!(
            run(&mut tc, "qdisc add dev eth0 root dualpi2 limit 1"),
            (String::new(), "Unknown qdisc \"dualpi2\", hence option \"limit\" is unparsable\n".into(), 1)
        );
        assert!(tc.set_default_qdisc("dualpi2").is_err());
    }
}
