//! netem — the network emulator. Mirrors net/sched/sch_netem.c (kernel side, 6.12
//! with its stable fixes) and tc/q_netem.c (iproute2 6.15 side); §17 of
//! docs/kernel-notes.md.
//!
//! Theory: every packet is given a time to send (`time_to_send`) at enqueue and
//! waits in a time-ordered queue (the "tfifo") until then. Enqueue decides, in the
//! kernel's order and drawing from the same generator in the same order:
//! 1. duplicate? (`duplicate` percent, correlated) — a copy is enqueued at the root
//!    first, marked so that no netem duplicates it again;
//! 2. lost? — `loss random` (correlated), the 4-state Markov model (`loss state`) or
//!    Gilbert-Elliott (`loss gemodel`); with `ecn` an ECN-capable packet is marked
//!    CE instead (and counted as a drop, as the kernel does);
//! 3. corrupted? (`corrupt` percent) — one bit flipped; a GSO packet is segmented
//!    first and only the first segment corrupted;
//! 4. over `limit` packets? — dropped;
//! 5. reordered? — with `reorder`/`gap`, every gap-th packet (or a random share)
//!    skips the delay and goes to the head of the queue (counted as a requeue);
//!    the others get `delay` ± `jitter` drawn from a distribution table (uniform
//!    without one), correlated, plus with `rate` the serialisation time of the
//!    packet after the last queued one (`packet_time_ns`: overhead, cells).
//!
//! Dequeue hands out reordered packets first, then the earliest tfifo packet once
//! its time has come and the current `slot` (if any) is open and has packet/byte
//! budget; otherwise it answers "not before" (the kernel's watchdog). A child
//! qdisc grafted on class 1 receives the due packets and is dequeued instead.
//!
//! Randomness: the kernel's generator is `prandom_u32_state` (a Tausworthe
//! lfsr113), seeded by `seed` or else at random; it is reproduced here bit for
//! bit, so with `seed N` the loss, duplicate, corrupt, reorder and delay decisions
//! are the kernel's own. Without `seed` the seed comes from the qdisc's handle
//! (or [`Netem::set_seed`], which the simulator drives from the scenario's seed).
//! The few draws the kernel takes from `get_random_u32` (a correlated generator's
//! first `last` value, the uniform slot delay) come from a second generator
//! seeded the same way; those cannot match the kernel's.
//!
//! Known deviations: the duplicate is enqueued into this netem itself rather than
//! at the root — the same when netem is the root or when the root's classifier
//! brings the copy back here, as in every usual setup; time before the first
//! packet's delay is clamped at 0 (the kernel's clock never starts at 0).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use crate::packet::Packet;
use crate::qdisc::{Child, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::sfq::SplitMix64;
use crate::stats::Stats;
use crate::tc::{matches, units, Args, Out, TcError};
use crate::time::Instant;

/// `NETEM_DIST_SCALE`: distribution table values are in units of σ/8192.
const DIST_SCALE: i64 = 8192;
/// `NETEM_DIST_MAX` (kernel) and `MAX_DIST` (tc): most values in a table.
pub const DIST_MAX: usize = 16384;

/// `struct tc_netem_corr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Corr {
    pub delay: u32,
    pub loss: u32,
    pub dup: u32,
}

/// `struct tc_netem_rate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetemRate {
    /// Bytes per second (TCA_NETEM_RATE64 when it does not fit 32 bits).
    pub rate: u64,
    pub packet_overhead: i32,
    pub cell_size: u32,
    pub cell_overhead: i32,
}

/// `struct tc_netem_slot` (times in ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    pub min_delay: i64,
    pub max_delay: i64,
    pub max_packets: i32,
    pub max_bytes: i32,
    pub dist_delay: i64,
    pub dist_jitter: i64,
}

/// The correlated loss models (TCA_NETEM_LOSS), probabilities scaled to u32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossModel {
    /// `struct tc_netem_gimodel`: the 4-state Markov chain.
    State { p13: u32, p31: u32, p32: u32, p14: u32, p23: u32 },
    /// `struct tc_netem_gemodel`: Gilbert-Elliott (`h` as the kernel takes it, not 1-h).
    Ge { p: u32, r: u32, h: u32, k1: u32 },
}

/// What tc sends for netem: `struct tc_netem_qopt` and the attributes q_netem.c adds.
/// `None` = the attribute is not sent (the kernel then keeps its current value).
#[derive(Clone, Debug, PartialEq)]
pub struct NetemOpt {
    pub limit: u32,
    pub loss: u32,
    pub gap: u32,
    pub duplicate: u32,
    /// TCA_NETEM_LATENCY64 / TCA_NETEM_JITTER64, ns.
    pub latency: Option<i64>,
    pub jitter: Option<i64>,
    pub corr: Option<Corr>,
    /// (probability, correlation).
    pub reorder: Option<(u32, u32)>,
    pub corrupt: Option<(u32, u32)>,
    pub ecn: bool,
    pub loss_model: Option<LossModel>,
    pub rate: Option<NetemRate>,
    pub slot: Option<Slot>,
    pub seed: Option<u64>,
    pub delay_dist: Option<Arc<[i16]>>,
    pub slot_dist: Option<Arc<[i16]>>,
}

impl Default for NetemOpt {
    fn default() -> Self {
        NetemOpt {
            limit: 1000,
            loss: 0,
            gap: 0,
            duplicate: 0,
            latency: None,
            jitter: None,
            corr: None,
            reorder: None,
            corrupt: None,
            ecn: false,
            loss_model: None,
            rate: None,
            slot: None,
            seed: None,
            delay_dist: None,
            slot_dist: None,
        }
    }
}

// ---- iproute2 side ---------------------------------------------------------------------

fn illegal(what: &str) -> TcError {
    TcError::tc(format!("Illegal \"{what}\"\n"))
}

const USAGE: &str = "Usage: ... netem [ limit PACKETS ]
                 [ delay TIME [ JITTER [ CORRELATION ] ] ]
                 [ distribution {uniform|normal|pareto|paretonormal} ]
                 [ corrupt PERCENT [ CORRELATION ] ]
                 [ duplicate PERCENT [ CORRELATION ] ]
                 [ loss random PERCENT [ CORRELATION ] ]
                 [ loss state P13 [ P31 [ P32 [ P23 [ P14 ] ] ] ] ]
                 [ loss gemodel PERCENT [ R [ 1-H [ 1-K ] ] ] ]
                 [ seed SEED ]
                 [ ecn ]
                 [ reorder PERCENT [ CORRELATION ] [ gap DISTANCE ] ]
                 [ rate RATE [ PACKETOVERHEAD ] [ CELLSIZE ] [ CELLOVERHEAD ] ]
                 [ slot MIN_DELAY [ MAX_DELAY ] [ packets MAX_PACKETS ] [ bytes MAX_BYTES ] ]
                 [ slot distribution {uniform|normal|pareto|paretonormal|custom}
                   DELAY JITTER [ packets MAX_PACKETS ] [ bytes MAX_BYTES ] ]
";

/// `set_percent`: a fraction scaled to u32 through C's double → unsigned conversion.
fn scale_percent(f: f64) -> u32 {
    (f * u32::MAX as f64).round_ties_even() as i64 as u32
}

/// q_netem.c `get_percent`: `parse_percent` then scale.
fn percent(s: &str) -> Option<u32> {
    units::parse_percent(s).map(scale_percent)
}

/// `NEXT_IS_NUMBER()` / `NEXT_IS_SIGNED_NUMBER()`.
fn next_is_number(args: &Args, signed: bool) -> bool {
    args.peek().and_then(|a| a.bytes().next()).is_some_and(|c| c.is_ascii_digit() || (signed && c == b'-'))
}

/// `netem_parse_opt`.
pub fn parse(args: &mut Args) -> Result<NetemOpt, TcError> {
    let mut o = NetemOpt::default();
    let mut corr = Corr::default();
    let mut corr_present = false;
    let mut reorder = (0u32, 0u32);
    let mut corrupt = (0u32, 0u32);
    let mut rate = NetemRate::default();
    let mut slot = Slot::default();
    // The value after a keyword when `cond` holds (NEXT_ARG after a NEXT_IS_NUMBER test).
    fn opt_num<'a>(args: &mut Args<'a>, signed: bool) -> Option<&'a str> {
        if next_is_number(args, signed) {
            args.next()
        } else {
            None
        }
    }
    while let Some(a) = args.next() {
        if matches(a, "limit") {
            o.limit = units::get_size(args.value()?).ok_or_else(|| illegal("limit"))?;
        } else if matches(a, "latency") || matches(a, "delay") {
            let v = args.value()?;
            o.latency = Some(units::get_stime64(v).ok_or_else(|| illegal("latency"))?);
            if let Some(v) = opt_num(args, false) {
                o.jitter = Some(units::get_stime64(v).ok_or_else(|| illegal("latency"))?);
                if let Some(v) = opt_num(args, false) {
                    corr_present = true;
                    corr.delay = percent(v).ok_or_else(|| illegal("latency"))?;
                }
            }
        } else if matches(a, "loss") || matches(a, "drop") {
            if o.loss > 0 || o.loss_model.is_some() {
                return Err(illegal("duplicate loss argument\n"));
            }
            let mut v = args.value()?;
            if !v.as_bytes().first().is_some_and(|c| c.is_ascii_digit()) {
                match v {
                    "random" => v = args.value()?,
                    "state" => {
                        o.loss_model = Some(parse_state(args)?);
                        continue;
                    }
                    "gemodel" => {
                        o.loss_model = Some(parse_gemodel(args)?);
                        continue;
                    }
                    _ => return Err(TcError::tc(format!("Unknown loss parameter: {v}\n"))),
                }
            }
            o.loss = percent(v).ok_or_else(|| illegal("loss percent"))?;
            if let Some(v) = opt_num(args, false) {
                corr_present = true;
                corr.loss = percent(v).ok_or_else(|| illegal("loss correlation"))?;
            }
        } else if matches(a, "seed") {
            let v = args.value()?;
            o.seed = Some(units::get_u64_base10(v).ok_or_else(|| illegal("seed"))?);
        } else if matches(a, "ecn") {
            o.ecn = true;
        } else if matches(a, "reorder") {
            reorder.0 = percent(args.value()?).ok_or_else(|| illegal("reorder"))?;
            o.reorder = Some(reorder);
            if let Some(v) = opt_num(args, false) {
                corr_present = true;
                reorder.1 = percent(v).ok_or_else(|| illegal("reorder"))?;
                o.reorder = Some(reorder);
            }
        } else if matches(a, "corrupt") {
            corrupt.0 = percent(args.value()?).ok_or_else(|| illegal("corrupt"))?;
            o.corrupt = Some(corrupt);
            if let Some(v) = opt_num(args, false) {
                corr_present = true;
                corrupt.1 = percent(v).ok_or_else(|| illegal("corrupt"))?;
                o.corrupt = Some(corrupt);
            }
        } else if matches(a, "gap") {
            o.gap = units::get_u32(args.value()?).ok_or_else(|| illegal("gap"))?;
        } else if matches(a, "duplicate") {
            o.duplicate = percent(args.value()?).ok_or_else(|| illegal("duplicate"))?;
            // q_netem.c fills dup_corr here without marking TCA_NETEM_CORR present.
            if let Some(v) = opt_num(args, false) {
                corr.dup = percent(v).ok_or_else(|| illegal("duplicate"))?;
            }
        } else if matches(a, "distribution") {
            let name = args.value()?;
            o.delay_dist = Some(args.dist_table(name)?.into());
        } else if matches(a, "rate") {
            let v = args.value()?;
            rate.rate = args.rate64(v).ok_or_else(|| illegal("rate"))?;
            if let Some(v) = opt_num(args, true) {
                rate.packet_overhead = units::get_integer(v).ok_or_else(|| illegal("rate"))?;
            }
            if let Some(v) = opt_num(args, false) {
                rate.cell_size = units::get_u32(v).ok_or_else(|| illegal("rate"))?;
            }
            if let Some(v) = opt_num(args, true) {
                rate.cell_overhead = units::get_integer(v).ok_or_else(|| illegal("rate"))?;
            }
            o.rate = Some(rate);
        } else if matches(a, "slot") {
            if let Some(v) = opt_num(args, false) {
                slot.min_delay = units::get_stime64(v).ok_or_else(|| illegal("slot min_delay"))?;
                slot.max_delay = match opt_num(args, false) {
                    Some(v) => match units::get_stime64(v) {
                        Some(m) if m >= slot.min_delay => m,
                        _ => return Err(illegal("slot max_delay")),
                    },
                    None => slot.min_delay,
                };
            } else {
                let v = args.value()?;
                if v != "distribution" {
                    return Err(TcError::tc(format!("Unknown slot parameter: {v}\n")));
                }
                let name = args.value()?;
                o.slot_dist = Some(args.dist_table(name)?.into());
                slot.dist_delay = units::get_stime64(args.value()?).ok_or_else(|| illegal("slot delay"))?;
                slot.dist_jitter = units::get_stime64(args.value()?).ok_or_else(|| illegal("slot jitter"))?;
                if slot.dist_jitter <= 0 {
                    return Err(TcError::tc("Non-positive jitter\n"));
                }
            }
            if args.peek().is_some_and(|k| matches(k, "packets")) {
                args.next();
                slot.max_packets = args.peek().and_then(units::get_integer).ok_or_else(|| illegal("slot packets"))?;
                args.next();
            }
            if args.peek().is_some_and(|k| matches(k, "bytes")) {
                args.next();
                slot.max_bytes = args.peek().and_then(units::get_size).ok_or_else(|| illegal("slot bytes"))? as i32;
                args.next();
            }
            o.slot = Some(slot);
        } else {
            let mut msg = String::new();
            if a != "help" {
                msg = format!("What is \"{a}\"?\n");
            }
            return Err(TcError::tc(msg + USAGE));
        }
    }
    if reorder.0 != 0 {
        if o.latency.unwrap_or(0) == 0 {
            return Err(TcError::tc(format!("reordering not possible without specifying some delay\n{USAGE}")));
        }
        if o.gap == 0 {
            o.gap = 1;
        }
    } else if o.gap > 0 {
        return Err(TcError::tc(format!("gap specified without reorder probability\n{USAGE}")));
    }
    if o.ecn && o.loss == 0 && o.loss_model.is_none() {
        return Err(TcError::tc(format!("ecn requested without loss model\n{USAGE}")));
    }
    if o.delay_dist.is_some() && (o.latency.unwrap_or(0) == 0 || o.jitter.unwrap_or(0) == 0) {
        return Err(TcError::tc(format!("distribution specified but no latency and jitter values\n{USAGE}")));
    }
    if corr_present {
        o.corr = Some(corr);
    }
    Ok(o)
}

/// `loss state P13 [P31 [P32 [P23 [P14]]]]`.
fn parse_state(args: &mut Args) -> Result<LossModel, TcError> {
    let p13 = units::parse_percent(args.value()?).ok_or_else(|| illegal("loss p13"))?;
    let mut v = [scale_percent(p13), scale_percent(1. - p13), 0, scale_percent(1.), 0];
    for (slot, what) in v.iter_mut().skip(1).zip(["loss p31", "loss p32", "loss p23", "loss p14"]) {
        if !next_is_number(args, false) {
            break;
        }
        *slot = percent(args.next().unwrap()).ok_or_else(|| illegal(what))?;
    }
    let [p13, p31, p32, p23, p14] = v;
    Ok(LossModel::State { p13, p31, p32, p14, p23 })
}

/// `loss gemodel P [R [1-H [1-K]]]`: the kernel takes h, tc reads 1-h.
fn parse_gemodel(args: &mut Args) -> Result<LossModel, TcError> {
    let p = units::parse_percent(args.value()?).ok_or_else(|| illegal("loss gemodel p"))?;
    let mut v = [scale_percent(p), scale_percent(1. - p), 0, 0];
    for (i, what) in ["loss gemodel r", "loss gemodel h", "loss gemodel k"].into_iter().enumerate() {
        if !next_is_number(args, false) {
            break;
        }
        v[i + 1] = percent(args.next().unwrap()).ok_or_else(|| illegal(what))?;
        if i == 1 {
            v[2] = u32::MAX - v[2];
        }
    }
    let [p, r, h, k1] = v;
    Ok(LossModel::Ge { p, r, h, k1 })
}

/// q_netem.c `get_distribution`'s reading of a `.dist` file: lines starting with
/// `#` or empty are skipped; every other line is read as C integers (`strtol` base
/// 0) until one does not parse; each is stored as a 16-bit value.
pub fn parse_dist(text: &[u8], name: &str) -> Result<Vec<i16>, TcError> {
    let mut data = Vec::new();
    for line in text.split_inclusive(|&b| b == b'\n') {
        if line.first().is_none_or(|&b| b == b'\n' || b == b'#') {
            continue;
        }
        let mut rest = line;
        while let Some((x, used)) = units::strtol0_prefix(rest) {
            if data.len() >= DIST_MAX {
                return Err(TcError::tc(format!("{name}: too much data\n")));
            }
            data.push(x as i16);
            rest = &rest[used..];
        }
    }
    Ok(data)
}

// ---- kernel side: randomness --------------------------------------------------------------

/// `struct rnd_state` with `prandom_seed_state` and `prandom_u32_state`
/// (include/linux/prandom.h, lib/random32.c): a combined Tausworthe generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prandom([u32; 4]);

impl Prandom {
    /// `prandom_seed_state`.
    pub fn seeded(seed: u64) -> Self {
        let i = ((seed >> 32) ^ (seed << 10) ^ seed) as u32;
        // `__seed`: each component must exceed the minimum its recurrence needs.
        let min = |m: u32| if i < m { i.wrapping_add(m) } else { i };
        Prandom([min(2), min(8), min(16), min(128)])
    }
    /// `prandom_u32_state`.
    pub fn next_u32(&mut self) -> u32 {
        fn step(s: u32, a: u32, b: u32, c: u32, d: u32) -> u32 {
            ((s & c) << d) ^ (((s << a) ^ s) >> b)
        }
        let s = &mut self.0;
        s[0] = step(s[0], 6, 13, 4294967294, 18);
        s[1] = step(s[1], 2, 27, 4294967288, 2);
        s[2] = step(s[2], 13, 21, 4294967280, 7);
        s[3] = step(s[3], 3, 12, 4294967168, 13);
        s[0] ^ s[1] ^ s[2] ^ s[3]
    }
}

/// `struct crndstate`: a correlated random source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Crnd {
    last: u32,
    rho: u32,
}

/// `get_crandom`: with correlation ρ, the next value leans towards the last one.
fn get_crandom(state: Option<&mut Crnd>, prng: &mut Prandom) -> u32 {
    let value = prng.next_u32() as u64;
    let Some(st) = state.filter(|s| s.rho != 0) else {
        return value as u32;
    };
    let rho = st.rho as u64 + 1;
    let answer = (value * ((1u64 << 32) - rho) + st.last as u64 * rho) >> 32;
    st.last = answer as u32;
    answer as u32
}

/// `tabledist`: a value of mean `mu` and spread `sigma`, uniform without a table.
fn tabledist(mu: i64, sigma: i32, state: Option<&mut Crnd>, prng: &mut Prandom, dist: Option<&[i16]>) -> i64 {
    if sigma == 0 {
        return mu;
    }
    let rnd = get_crandom(state, prng);
    let Some(table) = dist else {
        return (rnd % (2 * sigma as u32)) as i64 + mu - sigma as i64;
    };
    let t = table[rnd as usize % table.len()] as i64;
    let mut x = (sigma as i64 % DIST_SCALE) * t;
    x += if x >= 0 { DIST_SCALE / 2 } else { -DIST_SCALE / 2 };
    x / DIST_SCALE + (sigma as i64 / DIST_SCALE) * t + mu
}

/// The loss generator's state (`loss_model` + `struct clgstate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clg {
    Random,
    /// 4-state chain: 1 = transmit in gap, 2 = transmit in burst, 3 = lost in gap,
    /// 4 = lost in burst (the kernel's numbering).
    State {
        state: u8,
        m: LossModel,
    },
    /// Gilbert-Elliott: `bad` is the state.
    Ge {
        bad: bool,
        m: LossModel,
    },
}

// ---- kernel side: the qdisc ------------------------------------------------------------------

/// The kernel's rbtree of packets due before the tfifo's tail, ordered by the key
/// (time_to_send, arrival): equal times leave in arrival order, as inserting to the
/// right of equal keys makes them in the rbtree.
///
/// A radix heap (Ahuja, Mehlhorn, Orlin, Tarjan 1990) over a slab of packets, suited
/// to netem's near-monotone keys. Every key of the radix part is above `last` (the
/// latest minimum) and sits in the bucket named by the level of the highest
/// `RADIX_BITS`-bit digit where it differs from `last` and its own digit there: all keys
/// of a lower level, or of a lower digit on the same level, are smaller. A push is one
/// bucket append; a pop takes the top (the minimum, held apart) and re-files the
/// lowest bucket around its minimum, the new top, into lower levels. A key moves down
/// a few times in all (about 3 at 10,000 packets of 10 ms ± 5 ms) in sequential,
/// predictable work, where a binary heap's sift takes ~13 unpredictable branches.
/// A key below `last` (a delay shorter than a packet already sent: jitter beyond the
/// delay) goes to `late`, a binary heap whose keys are all below every radix key, so
/// it is emptied first. Only the (key, slot) entries move; packets stay in the slab.
#[derive(Default)]
struct TimeHeap {
    /// The radix part's minimum, held apart (bucket 0); Some when the part is not empty.
    top: Option<Entry>,
    /// The key of `top`, or of the last one popped: every radix key is above it.
    last: u128,
    /// The buckets, `RADIX` per level, and which of them are not empty.
    buckets: Vec<Vec<Entry>>,
    digits: [u64; LEVELS],
    levels: u64,
    late: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slab: Vec<Option<Packet>>,
    free: Vec<u32>,
    arrivals: u64,
    /// The latest time held (`skb_rb_last`): only the earliest ever leaves, so the
    /// latest stays until the heap is empty.
    max: Option<u64>,
}

/// Bits of the key per level of buckets: fewer levels, fewer moves per key (simulated
/// at 10,000 packets: 7.8 moves a packet with 1 bit, 4.3 with 4, 3.2 with 6; a level's
/// occupancy is one u64).
const RADIX_BITS: u32 = 6;
const RADIX: usize = 1 << RADIX_BITS;
const LEVELS: usize = 128usize.div_ceil(RADIX_BITS as usize);

#[derive(Clone, Copy)]
struct Entry {
    t: u64,
    seq: u64,
    slot: u32,
}

impl Entry {
    fn key(&self) -> u128 {
        (self.t as u128) << 64 | self.seq as u128
    }
}

impl TimeHeap {
    fn push(&mut self, t: u64, p: Packet) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(p);
                i
            }
            None => {
                self.slab.push(Some(p));
                self.slab.len() as u32 - 1
            }
        };
        self.arrivals += 1;
        let e = Entry { t, seq: self.arrivals, slot };
        self.max = self.max.max(Some(t));
        let key = e.key();
        if self.top.is_none() && (key > self.last || self.late.is_empty()) {
            // The radix part is empty: it may start again from any key above `late`'s.
            self.last = key;
            self.top = Some(e);
        } else if key < self.last {
            self.late.push(Reverse((t, e.seq, slot)));
        } else {
            self.file(e);
        }
    }
    /// Put `e` (key above `last`) in its bucket: the level of the highest bit where the
    /// key differs from `last`, and the key's digit at that level. Inlined: out of line,
    /// the entry is passed through memory, stored word by word and loaded as a block
    /// (a store-forwarding stall per push and per move).
    #[inline(always)]
    fn file(&mut self, e: Entry) {
        let key = e.key();
        let level = (127 - (key ^ self.last).leading_zeros()) / RADIX_BITS;
        let digit = (key >> (level * RADIX_BITS)) as usize & (RADIX - 1);
        if self.buckets.is_empty() {
            self.buckets.resize_with(LEVELS * RADIX, Vec::new);
        }
        self.buckets[level as usize * RADIX + digit].push(e);
        self.digits[level as usize] |= 1 << digit;
        self.levels |= 1 << level;
    }
    fn first(&self) -> Option<u64> {
        match self.late.peek() {
            Some(Reverse((t, _, _))) => Some(*t),
            None => self.top.map(|e| e.t),
        }
    }
    /// The packet `pop` returns next.
    fn first_packet(&self) -> &Packet {
        let slot = match self.late.peek() {
            Some(Reverse((_, _, slot))) => *slot,
            None => self.top.as_ref().expect("a non-empty tfifo tree").slot,
        };
        self.slab[slot as usize].as_ref().expect("a queued packet")
    }
    /// The earliest packet (Some: the tree is not empty).
    fn pop(&mut self) -> Option<Packet> {
        let slot = match self.late.pop() {
            Some(Reverse((_, _, slot))) => slot,
            None => {
                let e = self.top.take()?;
                self.refill();
                e.slot
            }
        };
        if self.top.is_none() && self.late.is_empty() {
            self.max = None;
        }
        self.free.push(slot);
        self.slab[slot as usize].take()
    }
    /// After the top left: the lowest non-empty bucket's minimum becomes the top and
    /// `last`, and the bucket's other entries move to lower buckets.
    fn refill(&mut self) {
        if self.levels == 0 {
            return;
        }
        let level = self.levels.trailing_zeros() as usize;
        let digit = self.digits[level].trailing_zeros() as usize;
        self.digits[level] &= !(1 << digit);
        if self.digits[level] == 0 {
            self.levels &= !(1 << level);
        }
        let b = level * RADIX + digit;
        // Moved out and back whole: swapped with another Vec field, its three words are
        // stored one by one and then loaded as a block, which stalls on store forwarding.
        let mut spare = std::mem::take(&mut self.buckets[b]);
        let mut min = 0;
        for (i, e) in spare.iter().enumerate() {
            if e.key() < spare[min].key() {
                min = i;
            }
        }
        let top = spare.swap_remove(min);
        self.last = top.key();
        self.top = Some(top);
        for e in spare.drain(..) {
            self.file(e);
        }
        self.buckets[b] = spare;
    }
    fn clear(&mut self) {
        *self = TimeHeap::default();
    }
}

/// `struct netem_sched_data` plus the qdisc's counters.
pub struct Netem {
    /// `sch->limit` (= `q->limit`).
    limit: u32,
    latency: i64,
    jitter: i64,
    loss: u32,
    ecn: bool,
    counter: u32,
    gap: u32,
    duplicate: u32,
    reorder: u32,
    corrupt: u32,
    rate: NetemRate,
    delay_cor: Crnd,
    loss_cor: Crnd,
    dup_cor: Crnd,
    reorder_cor: Crnd,
    corrupt_cor: Crnd,
    seed: u64,
    prng: Prandom,
    /// `get_random_u32` for the draws the kernel does not take from `prng`.
    entropy: SplitMix64,
    delay_dist: Option<Arc<[i16]>>,
    slot_dist: Option<Arc<[i16]>>,
    clg: Clg,
    slot_config: Slot,
    /// `q->slot`: when the next slot opens (None: no slots; the kernel's 0) and its budget.
    slot_next: Option<u64>,
    packets_left: i32,
    bytes_left: i32,
    /// `sch->q`: reordered packets, sent first (time_to_send, packet).
    head: VecDeque<(u64, Packet)>,
    /// The tfifo: the in-order tail (`t_head`…`t_tail`) …
    /// (times and packets apart: a (time, packet) pair is built on the stack and copied
    /// in blocks that straddle its stores, a store-forwarding stall per packet) …
    linear: VecDeque<Packet>,
    linear_t: VecDeque<u64>,
    /// … and the rbtree for packets due before the tail.
    tree: TimeHeap,
    /// `q->qdisc`: the child on class 1, if one is grafted.
    child: Option<Node>,
    watchdog: Option<Instant>,
}

/// The seed a netem without `seed` starts from (the kernel draws one at random).
pub fn default_seed(handle: u32) -> u64 {
    0x4e45_5445_4d00_0000 ^ handle as u64
}

/// q_netem.c always sends TCA_OPTIONS; `netem_init` wants them (EINVAL without).
pub static OPS: Ops = Ops {
    id: "netem",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Netem::new(c.required()?, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Netem {
    /// `netem_init`: random loss model, a seeded generator, then `netem_change`.
    pub fn new(o: &NetemOpt, handle: u32, now: Instant) -> Result<Netem, TcError> {
        let seed = default_seed(handle);
        let mut q = Netem {
            limit: 0,
            latency: 0,
            jitter: 0,
            loss: 0,
            ecn: false,
            counter: 0,
            gap: 0,
            duplicate: 0,
            reorder: 0,
            corrupt: 0,
            rate: NetemRate::default(),
            delay_cor: Crnd::default(),
            loss_cor: Crnd::default(),
            dup_cor: Crnd::default(),
            reorder_cor: Crnd::default(),
            corrupt_cor: Crnd::default(),
            seed,
            prng: Prandom::seeded(seed),
            entropy: SplitMix64(seed),
            delay_dist: None,
            slot_dist: None,
            clg: Clg::Random,
            slot_config: Slot::default(),
            slot_next: None,
            packets_left: 0,
            bytes_left: 0,
            head: VecDeque::new(),
            linear: VecDeque::new(),
            linear_t: VecDeque::new(),
            tree: TimeHeap::default(),
            child: None,
            watchdog: None,
        };
        q.apply(o, now)?;
        Ok(q)
    }

    /// Re-seed as `seed N` would (the simulator gives each netem the scenario's seed).
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.prng = Prandom::seeded(seed);
        self.entropy = SplitMix64(seed);
    }

    /// `init_crandom`: the correlation, and a first value from `get_random_u32`.
    fn crandom(&mut self, rho: u32) -> Crnd {
        Crnd { last: self.entropy.next_u32(), rho }
    }

    /// `netem_change`: validation first, then every attribute in the kernel's order.
    fn apply(&mut self, o: &NetemOpt, now: Instant) -> Result<(), TcError> {
        for d in [&o.delay_dist, &o.slot_dist].into_iter().flatten() {
            if d.is_empty() || d.len() > DIST_MAX {
                return Err(TcError::invalid());
            }
        }
        if let Some(s) = &o.slot {
            let err = if s.min_delay < 0 || s.max_delay < 0 {
                "negative slot delay"
            } else if s.min_delay > s.max_delay {
                "slot min delay greater than max delay"
            } else if s.dist_delay < 0 || s.dist_jitter < 0 {
                "negative dist delay"
            } else if s.max_packets < 0 || s.max_bytes < 0 {
                "negative slot limit"
            } else {
                ""
            };
            if !err.is_empty() {
                return Err(TcError::kernel(err));
            }
        }
        if o.latency.is_some_and(|l| l < 0) {
            return Err(TcError::kernel("negative latency"));
        }
        if o.jitter.is_some_and(|j| j < 0) {
            return Err(TcError::kernel("negative jitter"));
        }
        self.clg = match o.loss_model {
            None => Clg::Random,
            Some(m @ LossModel::State { .. }) => Clg::State { state: 1, m },
            Some(m @ LossModel::Ge { .. }) => Clg::Ge { bad: false, m },
        };
        if let Some(d) = &o.delay_dist {
            self.delay_dist = Some(d.clone());
        }
        if let Some(d) = &o.slot_dist {
            self.slot_dist = Some(d.clone());
        }
        self.limit = o.limit;
        // tc never fills the old 32-bit tick fields: without the 64-bit ones, 0.
        self.latency = 0;
        self.jitter = 0;
        self.gap = o.gap;
        self.counter = 0;
        self.loss = o.loss;
        self.duplicate = o.duplicate;
        if self.gap != 0 {
            self.reorder = u32::MAX;
        }
        if let Some(c) = o.corr {
            self.delay_cor = self.crandom(c.delay);
            self.loss_cor = self.crandom(c.loss);
            self.dup_cor = self.crandom(c.dup);
        }
        if let Some((p, c)) = o.reorder {
            self.reorder = p;
            self.reorder_cor = self.crandom(c);
        }
        if let Some((p, c)) = o.corrupt {
            self.corrupt = p;
            self.corrupt_cor = self.crandom(c);
        }
        if let Some(r) = o.rate {
            self.rate = r;
        }
        if let Some(l) = o.latency {
            self.latency = l;
        }
        if let Some(j) = o.jitter {
            self.jitter = j;
        }
        if o.ecn {
            self.ecn = true;
        }
        if let Some(s) = o.slot {
            self.slot_config = s;
            if s.max_packets == 0 {
                self.slot_config.max_packets = i32::MAX;
            }
            if s.max_bytes == 0 {
                self.slot_config.max_bytes = i32::MAX;
            }
            self.slot_config.dist_jitter = s.dist_jitter.abs().min(i32::MAX as i64);
            self.packets_left = self.slot_config.max_packets;
            self.bytes_left = self.slot_config.max_bytes;
            let c = &self.slot_config;
            self.slot_next = (c.min_delay | c.max_delay | c.dist_jitter != 0).then_some(now.as_nanos());
        }
        self.jitter = self.jitter.abs().min(i32::MAX as i64);
        if let Some(s) = o.seed {
            self.set_seed(s);
        }
        Ok(())
    }

    /// `loss_4state` / `loss_gilb_ell` / the random model.
    fn loss_event(&mut self) -> bool {
        match &mut self.clg {
            Clg::Random => self.loss != 0 && self.loss >= get_crandom(Some(&mut self.loss_cor), &mut self.prng),
            Clg::State { state, m: LossModel::State { p13, p31, p32, p14, p23 } } => {
                let rnd = self.prng.next_u32();
                let (p13, p31, p32, p14, p23) = (*p13, *p31, *p32, *p14, *p23);
                let (next, lost) = match *state {
                    1 if rnd < p14 => (3, true),
                    1 if rnd < p13.wrapping_add(p14) => (4, true),
                    1 => (1, false),
                    2 if rnd < p23 => (4, true),
                    2 => (2, false),
                    4 if rnd < p32 => (2, false),
                    4 if rnd < p31.wrapping_add(p32) => (1, false),
                    4 => (4, true),
                    _ => (1, false),
                };
                *state = next;
                lost
            }
            Clg::Ge { bad, m: LossModel::Ge { p, r, h, k1 } } => {
                if !*bad {
                    if self.prng.next_u32() < *p {
                        *bad = true;
                    }
                    self.prng.next_u32() < *k1
                } else {
                    if self.prng.next_u32() < *r {
                        *bad = false;
                    }
                    self.prng.next_u32() > *h
                }
            }
            _ => unreachable!("the loss state always carries its own model"),
        }
    }

    /// `packet_time_ns`: serialisation time at `rate`, with overhead and cells.
    fn packet_time_ns(&self, len: u64) -> u64 {
        let r = &self.rate;
        let mut len = len.wrapping_add(r.packet_overhead as i64 as u64);
        if r.cell_size != 0 {
            // reciprocal_divide works on the low 32 bits.
            let mut cells = (len as u32) / r.cell_size;
            if len > cells.wrapping_mul(r.cell_size) as u64 {
                cells += 1;
            }
            len = cells.wrapping_mul(r.cell_size.wrapping_add(r.cell_overhead as u32)) as u64;
        }
        len.wrapping_mul(1_000_000_000) / r.rate
    }

    /// The latest time_to_send queued anywhere (reorder tail, tfifo), for `rate`.
    fn last_time_to_send(&self) -> Option<u64> {
        let a = self.head.back().map(|(t, _)| *t);
        let b = self.tree.max;
        let c = self.linear_t.back().copied();
        [a, b, c].into_iter().flatten().reduce(|x, y| if y > x { y } else { x })
    }

    /// `tfifo_enqueue`: append when not earlier than the tail, else into the tree.
    fn tfifo_enqueue(&mut self, sch: &mut Sch, t: u64, pkt: Packet) {
        if self.linear_t.back().is_none_or(|tail| t >= *tail) {
            self.linear_t.push_back(t);
            self.linear.push_back(pkt);
        } else {
            self.tree.push(t, pkt);
        }
        sch.stats.qlen += 1;
    }

    /// `netem_peek`: the earlier of the tree's first and the linear head (the head on a
    /// tie), with whether it is the tree's.
    fn tfifo_peek(&self) -> Option<(u64, bool)> {
        let lin = self.linear_t.front().copied();
        match (self.tree.first(), lin) {
            (Some(a), b) if b.is_none_or(|b| a < b) => Some((a, true)),
            (_, b) => b.map(|b| (b, false)),
        }
    }

    /// `get_slot_next`.
    fn get_slot_next(&mut self, now: u64) {
        let c = self.slot_config;
        let next_delay = match &self.slot_dist {
            None => {
                c.min_delay
                    + (((c.max_delay - c.min_delay) as u64 as u128 * self.entropy.next_u32() as u128) >> 32) as i64
            }
            Some(d) => tabledist(c.dist_delay, c.dist_jitter as i32, None, &mut self.prng, Some(d)),
        };
        self.slot_next = Some(now.wrapping_add(next_delay as u64));
        self.packets_left = c.max_packets;
        self.bytes_left = c.max_bytes;
    }

    /// `netem_enqueue`.
    fn enqueue_one(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let prev_len = pkt.len;
        let mut count = 1;
        if self.duplicate != 0
            && !pkt.netem_dup()
            && self.duplicate >= get_crandom(Some(&mut self.dup_cor), &mut self.prng)
        {
            count += 1;
        }
        if self.loss_event() {
            if self.ecn && pkt.set_ce() {
                sch.stats.dropped();
            } else {
                count -= 1;
            }
        }
        if count == 0 {
            sch.stats.dropped();
            // NET_XMIT_SUCCESS | __NET_XMIT_BYPASS: the parents count neither, and
            // the answer does not say the packet is gone.
            pkt.kfree_skb();
            return Enqueued::Stolen;
        }
        if self.latency != 0 || self.jitter != 0 || self.rate.rate != 0 {
            // skb_orphan_partial: the socket's send budget is not held during the delay.
            pkt.orphan();
        }
        let dup = (count > 1).then(|| pkt.clone());
        let mut segs = Vec::new();
        if self.corrupt != 0 && self.corrupt >= get_crandom(Some(&mut self.corrupt_cor), &mut self.prng) {
            if pkt.gso_segs > 1 {
                let mut all = pkt.gso_segments();
                let first = all.next().unwrap();
                segs = all.collect();
                pkt = first;
            }
            pkt.set_corrupted();
        }
        if sch.stats.qlen >= self.limit {
            // qdisc_drop_all: one drop for the packet and its segments.
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        if let Some(mut d) = dup {
            // The copy goes to the root first (see the module notes); ancestors count it.
            d.set_netem_dup();
            crate::drops::cloned(d.id);
            let (len, id) = (d.len, d.id);
            match self.enqueue_one(sch, d, now) {
                Enqueued::Success => sch.reduce(-1, -(len as i64)),
                // The copy is gone, and only we saw the answer.
                Enqueued::Dropped => crate::drops::freed(id),
                _ => {}
            }
        }
        let len = pkt.len;
        sch.stats.backlog = sch.stats.backlog.wrapping_add(len);
        let now_ns = now.as_nanos();
        if self.gap == 0
            || self.counter < self.gap - 1
            || self.reorder < get_crandom(Some(&mut self.reorder_cor), &mut self.prng)
        {
            let mut delay = tabledist(
                self.latency,
                self.jitter as i32,
                Some(&mut self.delay_cor),
                &mut self.prng,
                self.delay_dist.as_deref(),
            );
            let mut from = now_ns as i64;
            if self.rate.rate != 0 {
                if let Some(last) = self.last_time_to_send() {
                    delay = (delay - (last as i64 - from)).max(0);
                    from = last as i64;
                }
                delay += self.packet_time_ns(len as u64) as i64;
            }
            self.counter += 1;
            self.tfifo_enqueue(sch, (from + delay).max(0) as u64, pkt);
        } else {
            self.counter = 0;
            self.head.push_front((now_ns, pkt));
            sch.stats.qlen += 1;
            sch.stats.requeues += 1;
        }
        if !segs.is_empty() {
            let (mut nb, mut total) = (1i32, len as i64);
            for seg in segs {
                let (l, id) = (seg.len, seg.id);
                match self.enqueue_one(sch, seg, now) {
                    Enqueued::Success => {
                        nb += 1;
                        total += l as i64;
                    }
                    r if r.counts_as_drop() => {
                        sch.stats.dropped();
                        if r == Enqueued::Dropped {
                            crate::drops::freed(id);
                        }
                    }
                    _ => {}
                }
            }
            sch.reduce(-(nb - 1), -(total - prev_len as i64));
        }
        Enqueued::Success
    }

    /// `netem_dequeue` (without the parked slot).
    fn dequeue_inner(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        loop {
            if let Some((_, p)) = self.head.pop_front() {
                return self.deliver(sch, p);
            }
            let Some((t, from_tree)) = self.tfifo_peek() else { break };
            let now_ns = now.as_nanos();
            if self.slot_next.is_some_and(|s| s < t) {
                self.get_slot_next(now_ns);
            }
            if t <= now_ns && self.slot_next.is_none_or(|s| s <= now_ns) {
                // Counted from the queued packet, which then moves out whole (see
                // fifo.rs): read after the move, it would stall on store forwarding.
                let head = if from_tree { self.tree.first_packet() } else { &self.linear[0] };
                let len = head.len;
                if self.child.is_none() {
                    sch.stats.unqueued(len);
                    sch.stats.sent(head);
                }
                if self.slot_next.is_some() {
                    self.packets_left -= 1;
                    self.bytes_left = self.bytes_left.wrapping_sub(len as i32);
                    if self.packets_left <= 0 || self.bytes_left <= 0 {
                        self.get_slot_next(now_ns);
                    }
                }
                let Some(child) = self.child.as_mut() else {
                    self.watchdog = None;
                    // Option<Packet> straight into Dequeued: unwrapped on the way, the
                    // packet is copied in pieces that its next block load stalls on.
                    return match from_tree {
                        true => self.tree.pop(),
                        false => {
                            self.linear_t.pop_front();
                            self.linear.pop_front()
                        }
                    }
                    .map_or(Dequeued::Empty, Dequeued::Packet);
                };
                let p = if from_tree {
                    self.tree.pop()
                } else {
                    self.linear_t.pop_front();
                    self.linear.pop_front()
                };
                let p = p.expect("the packet just peeked");
                let id = (!p.netem_dup()).then_some(p.id);
                let r = child.enqueue(p, now);
                Child::collect(child, sch);
                if r != Enqueued::Success {
                    if r.counts_as_drop() {
                        sch.stats.dropped();
                    }
                    // Dropped by the child at our dequeue: no answer reports it.
                    if let Some(id) = id.filter(|_| r == Enqueued::Dropped) {
                        crate::drops::freed(id);
                    }
                    sch.stats.unqueued(len);
                    sch.reduce(1, len as i64);
                }
                continue;
            }
            if let Some(d) = self.child_dequeue(sch, now) {
                return d;
            }
            let until = Instant::from_nanos(t.max(self.slot_next.unwrap_or(0)));
            self.watchdog = Some(until);
            return Dequeued::Throttled { until };
        }
        self.child_dequeue(sch, now).unwrap_or(Dequeued::Empty)
    }

    /// The child's next packet, delivered as ours; None when it has none.
    fn child_dequeue(&mut self, sch: &mut Sch, now: Instant) -> Option<Dequeued> {
        let child = self.child.as_mut()?;
        let d = child.dequeue(now);
        Child::collect(child, sch);
        match d {
            Dequeued::Packet(p) => Some(self.deliver(sch, p)),
            _ => None,
        }
    }

    fn deliver(&mut self, sch: &mut Sch, p: Packet) -> Dequeued {
        sch.stats.unqueued(p.len);
        sch.stats.sent(&p);
        self.watchdog = None;
        Dequeued::Packet(p)
    }

    /// The generator's seed (dumped as TCA_NETEM_PRNG_SEED).
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl Qdisc for Netem {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        self.enqueue_one(sch, pkt, now)
    }

    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.dequeue_inner(sch, now)
    }

    // peek: `qdisc_peek_dequeued` (the default).

    /// `netem_reset`: both queues, the child, the watchdog.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.head.clear();
        self.linear.clear();
        self.linear_t.clear();
        self.tree.clear();
        if let Some(c) = self.child.as_mut() {
            c.reset(now);
        }
        self.watchdog = None;
    }

    fn change(&mut self, _sch: &mut Sch, opts: &Opts, _dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.apply(opts.of()?, now)
    }

    /// What `netem_dump` sends, printed as q_netem.c `netem_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let pct = |out: &mut Out, key: &str, label: &str, v: u32| {
            let text = units::fmt_g(100. * v as f64 / u32::MAX as f64, 6);
            let json = units::fmt_g(v as f64 / u32::MAX as f64, 6);
            out.float(key, format_args!("{label} {text}%"), &json);
        };
        // print_corr: the bare value in text when present, always in JSON.
        let corr = |out: &mut Out, present: bool, v: u32| {
            if out.is_json() || present {
                pct(out, "correlation", "", v);
            }
        };
        let secs = |ns: i64| units::fmt_g(ns as f64 / 1e9, 6);
        out.uint("limit", format_args!("limit {}", self.limit as i32), self.limit as u64);
        if self.latency != 0 {
            out.open_object(Some("delay"));
            out.float("delay", format_args!(" delay {}", units::fmt_time64(self.latency)), &secs(self.latency));
            let jtext = if self.jitter != 0 { format!("  {}", units::fmt_time64(self.jitter)) } else { String::new() };
            out.float("jitter", format_args!("{jtext}"), &secs(self.jitter));
            corr(out, self.jitter != 0 && self.delay_cor.rho != 0, self.delay_cor.rho);
            out.close_object();
        }
        if self.loss != 0 {
            out.open_object(Some("loss-random"));
            pct(out, "loss", " loss", self.loss);
            corr(out, self.loss_cor.rho != 0, self.loss_cor.rho);
            out.close_object();
        }
        match self.clg {
            Clg::State { m: LossModel::State { p13, p31, p32, p14, p23 }, .. } => {
                out.open_object(Some("loss-state"));
                pct(out, "p13", " loss state p13", p13);
                pct(out, "p31", " p31", p31);
                pct(out, "p32", " p32", p32);
                pct(out, "p23", " p23", p23);
                pct(out, "p14", " p14", p14);
                out.close_object();
            }
            Clg::Ge { m: LossModel::Ge { p, r, h, k1 }, .. } => {
                out.open_object(Some("loss-gemodel"));
                pct(out, "p", " loss gemodel p", p);
                pct(out, "r", " r", r);
                pct(out, "1-h", " 1-h", u32::MAX - h);
                pct(out, "1-k", " 1-k", k1);
                out.close_object();
            }
            _ => {}
        }
        if self.duplicate != 0 {
            out.open_object(Some("duplicate"));
            pct(out, "duplicate", " duplicate", self.duplicate);
            corr(out, self.dup_cor.rho != 0, self.dup_cor.rho);
            out.close_object();
        }
        if self.reorder != 0 {
            out.open_object(Some("reorder"));
            pct(out, "reorder", " reorder", self.reorder);
            corr(out, self.reorder_cor.rho != 0, self.reorder_cor.rho);
            out.close_object();
        }
        if self.corrupt != 0 {
            out.open_object(Some("corrupt"));
            pct(out, "corrupt", " corrupt", self.corrupt);
            corr(out, self.corrupt_cor.rho != 0, self.corrupt_cor.rho);
            out.close_object();
        }
        if self.rate.rate != 0 {
            let r = &self.rate;
            out.open_object(Some("rate"));
            out.rate("rate", " rate ", r.rate, "");
            let opt_int = |out: &mut Out, key: &str, v: i32| {
                let text = if v != 0 { format!(" {key} {v}") } else { String::new() };
                out.int(key, format_args!("{text}"), v as i64);
            };
            opt_int(out, "packetoverhead", r.packet_overhead);
            let cs = if r.cell_size != 0 { format!(" cellsize {}", r.cell_size) } else { String::new() };
            out.uint("cellsize", format_args!("{cs}"), r.cell_size as u64);
            opt_int(out, "celloverhead", r.cell_overhead);
            out.close_object();
        }
        let c = &self.slot_config;
        if c.min_delay | c.max_delay | c.dist_jitter != 0 {
            out.open_object(Some("slot"));
            let time = |out: &mut Out, key: &str, label: &str, ns: i64| {
                out.float(key, format_args!("{label} {}", units::fmt_time64(ns)), &secs(ns));
            };
            if c.dist_jitter > 0 {
                time(out, "distribution", " slot distribution", c.dist_delay);
                time(out, "jitter", "", c.dist_jitter);
            } else {
                time(out, "min-delay", " slot", c.min_delay);
                time(out, "max-delay", "", c.max_delay);
            }
            // The kernel dumps "no limit" (INT_MAX) as 0.
            for (key, v) in [("packets", c.max_packets), ("bytes", c.max_bytes)] {
                let v = if v == i32::MAX { 0 } else { v };
                let text = if v != 0 { format!(" {key} {v}") } else { String::new() };
                out.int(key, format_args!("{text}"), v as i64);
            }
            out.close_object();
        }
        out.uint("seed", format_args!(" seed {}", self.seed), self.seed);
        out.boolean("ecn", format_args!("{}", if self.ecn { " ecn " } else { "" }), self.ecn);
        let gap = if self.gap != 0 { format!(" gap {}", self.gap) } else { String::new() };
        out.uint("gap", format_args!("{gap}"), self.gap as u64);
    }

    crate::classful!();
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

/// One class, `<handle>:1`, which exists for any classid (`netem_find`) but is
/// dumped only while a child is grafted (`netem_dump_class`); no class counters.
impl Classful for Netem {
    fn class_minors(&self) -> Vec<u32> {
        if self.child.is_some() {
            vec![1]
        } else {
            vec![]
        }
    }
    fn find(&self, _minor: u32) -> bool {
        true
    }
    fn leaf(&self, _minor: u32) -> Option<&Node> {
        self.child.as_ref()
    }
    fn leaf_mut(&mut self, _minor: u32) -> Option<&mut Node> {
        self.child.as_mut()
    }
    /// `netem_graft`: `qdisc_replace`, None detaches the child.
    fn graft(
        &mut self,
        _sch: &mut Sch,
        _minor: u32,
        new: Option<Node>,
        _dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        Ok(std::mem::replace(&mut self.child, new))
    }
    fn class_stats(&self, _minor: u32) -> Option<Stats> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::fifo::{Fifo, FifoKind, FifoOpt};
    use crate::stats::Reduce;
    use crate::testing::{dev, held, ms};

    fn p(s: &str) -> Result<NetemOpt, TcError> {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(&mut Args::new(&v))
    }
    fn netem(s: &str) -> Node<Netem> {
        held(Netem::new(&p(s).unwrap(), 0x10000, ms(0)).unwrap())
    }
    fn text(q: &Netem) -> String {
        let mut out = Out::text();
        q.dump(&mut out, &dev());
        out.into_string()
    }
    /// Dequeue everything due at `now`; the ids in order.
    fn drain(q: &mut Node<Netem>, now: Instant) -> Vec<u64> {
        let mut ids = vec![];
        while let Dequeued::Packet(p) = q.dequeue(now) {
            ids.push(p.id);
        }
        ids
    }

    /// The radix heap against a sorted reference: (time, arrival) order, with keys
    /// below the last minimum (`late`), ties, emptying and refilling.
    #[test]
    fn time_heap_order() {
        let mut rng = SplitMix64(7);
        for round in 0..200u64 {
            let mut h = TimeHeap::default();
            let mut reference = std::collections::BTreeMap::new();
            let (mut arrival, mut now) = (0u64, 1_000_000u64);
            for _ in 0..2000 {
                let r = rng.next_u32() as u64;
                if !r.is_multiple_of(3) || reference.is_empty() {
                    // Mostly ahead of `now`, sometimes behind it, sometimes equal times.
                    let span = [16, 1 << 12, 1 << 24, 1 << 40][(round % 4) as usize];
                    let t = match r % 7 {
                        0 => now.saturating_sub(r % span),
                        1 => reference.keys().next().map_or(now, |&(t, _)| t),
                        _ => now + (r >> 3) % span,
                    };
                    arrival += 1;
                    reference.insert((t, arrival), arrival);
                    h.push(t, Packet::new(arrival, 100));
                } else {
                    let (&(t, _), &id) = reference.iter().next().unwrap();
                    assert_eq!(h.first(), Some(t));
                    assert_eq!(h.first_packet().id, id);
                    assert_eq!(h.pop().map(|p| p.id), Some(id));
                    reference.pop_first();
                    now = now.max(t) + r % 64;
                }
                assert_eq!(h.max, reference.keys().map(|&(t, _)| t).max());
            }
            while let Some(((t, _), id)) = reference.pop_first() {
                assert_eq!(h.first(), Some(t));
                assert_eq!(h.pop().map(|p| p.id), Some(id));
            }
            assert_eq!(h.first(), None);
            assert!(h.pop().is_none());
        }
    }

    #[test]
    fn prandom_seeding_and_first_values() {
        // __seed lifts a small mixed seed above each component's minimum.
        assert_eq!(Prandom::seeded(0).0, [2, 8, 16, 128]);
        let i = ((7u64 << 10) ^ 7) as u32;
        assert_eq!(Prandom::seeded(7).0, [i, i, i, i]);
        // Every component's recurrence by hand for the zero seed's first step.
        let mut r = Prandom::seeded(0);
        let s1 = ((2u32 & 4294967294) << 18) ^ (((2u32 << 6) ^ 2) >> 13);
        let s2 = ((8u32 & 4294967288) << 2) ^ (((8u32 << 2) ^ 8) >> 27);
        let s3 = ((16u32 & 4294967280) << 7) ^ (((16u32 << 13) ^ 16) >> 21);
        let s4 = ((128u32 & 4294967168) << 13) ^ (((128u32 << 3) ^ 128) >> 12);
        assert_eq!(r.next_u32(), s1 ^ s2 ^ s3 ^ s4);
    }

    #[test]
    fn correlated_values_lean_on_the_last() {
        let mut prng = Prandom::seeded(1);
        let mut c = Crnd { last: 1000, rho: u32::MAX };
        // ρ = 2^32: the answer is the last value whatever the draw.
        assert_eq!(get_crandom(Some(&mut c), &mut prng), 1000);
        let mut c = Crnd { last: 0, rho: 0 };
        let mut a = Prandom::seeded(9);
        let mut b = Prandom::seeded(9);
        assert_eq!(get_crandom(Some(&mut c), &mut a), b.next_u32());
    }

    #[test]
    fn tabledist_uniform_and_table() {
        let mut prng = Prandom::seeded(3);
        assert_eq!(tabledist(500, 0, None, &mut prng, None), 500);
        let mut a = Prandom::seeded(3);
        let rnd = a.next_u32();
        assert_eq!(tabledist(1000, 100, None, &mut prng, None), (rnd % 200) as i64 + 1000 - 100);
        // Table value t at σ = 10000: t·(10000 mod 8192)/8192 rounded + t·1 + µ.
        let table = [4096i16];
        let x: i64 = 1808 * 4096 + 4096;
        assert_eq!(tabledist(0, 10000, None, &mut prng, Some(&table)), x / 8192 + 4096);
        let table = [-4096i16];
        let x: i64 = -1808 * 4096 - 4096;
        assert_eq!(tabledist(0, 10000, None, &mut prng, Some(&table)), x / 8192 - 4096);
    }

    #[test]
    fn parse_dist_reads_c_integers_per_line() {
        let t = parse_dist(b"# comment\n 1 2 -3\n\n0x10 010 junk 5\n#9\n7", "x.dist").unwrap();
        assert_eq!(t, vec![1, 2, -3, 16, 8, 7]);
        // Values wider than 16 bits keep their low 16 bits, as the C assignment does.
        assert_eq!(parse_dist(b"70000\n", "x").unwrap(), vec![70000u32 as i16]);
        let big = "1 ".repeat(DIST_MAX + 1);
        assert_eq!(
            parse_dist(big.as_bytes(), "/lib/tc/big.dist").unwrap_err().msg,
            "/lib/tc/big.dist: too much data\n"
        );
    }

    #[test]
    fn parse_fills_what_tc_sends() {
        let o = p("delay 10ms 2ms 25% loss 1% 30% reorder 5% gap 3 rate 10mbit 20 100 -5 seed 42").unwrap();
        assert_eq!((o.latency, o.jitter), (Some(10_000_000), Some(2_000_000)));
        assert_eq!(o.corr, Some(Corr { delay: scale_percent(0.25), loss: scale_percent(0.3), dup: 0 }));
        assert_eq!(o.loss, scale_percent(0.01));
        assert_eq!((o.reorder, o.gap), (Some((scale_percent(0.05), 0)), 3));
        assert_eq!(o.rate, Some(NetemRate { rate: 1_250_000, packet_overhead: 20, cell_size: 100, cell_overhead: -5 }));
        assert_eq!((o.seed, o.limit), (Some(42), 1000));
        // reorder without gap: gap 1.
        assert_eq!(p("delay 1ms reorder 10%").unwrap().gap, 1);
        // gemodel: 1-h as typed, h as sent.
        let o = p("loss gemodel 1% 10% 70% 5%").unwrap();
        assert_eq!(
            o.loss_model,
            Some(LossModel::Ge {
                p: scale_percent(0.01),
                r: scale_percent(0.1),
                h: u32::MAX - scale_percent(0.7),
                k1: scale_percent(0.05)
            })
        );
        assert_eq!(p("loss 1% loss 2%").unwrap_err().msg, "Illegal \"duplicate loss argument\n\"\n");
        assert_eq!(p("slot 1ms packets -5").unwrap().slot.unwrap().max_packets, -5);
    }

    #[test]
    fn missing_distribution_is_tc_s_error() {
        let v: Vec<String> = "delay 10ms 1ms distribution normal".split_whitespace().map(String::from).collect();
        let mut a = Args::new(&v);
        a.set_lib(crate::tc::TcLib { dir: "/nonexistent/tc".into(), read: Some(Arc::new(|p: &str| std::fs::read(p))) });
        assert_eq!(
            parse(&mut a).unwrap_err().msg,
            "No distribution data for normal (/nonexistent/tc/normal.dist: No such file or directory)\n"
        );
        let mut a = Args::new(&v);
        a.set_lib(crate::tc::TcLib {
            dir: "/t".into(),
            read: Some(Arc::new(|_: &str| Ok(b"# only\n1 -1\n".to_vec()))),
        });
        assert_eq!(parse(&mut a).unwrap().delay_dist.as_deref(), Some(&[1i16, -1][..]));
    }

    #[test]
    fn kernel_validation_words() {
        let err = |s: &str| Netem::new(&p(s).unwrap(), 0x10000, ms(0)).err().unwrap().msg;
        assert_eq!(err("delay -5ms"), "Error: negative latency.\n");
        assert_eq!(err("slot 1ms packets -1"), "Error: negative slot limit.\n");
        let mut o = p("slot 1ms").unwrap();
        o.slot.as_mut().unwrap().min_delay = 5;
        o.slot.as_mut().unwrap().max_delay = 4;
        assert_eq!(Netem::new(&o, 1, ms(0)).err().unwrap().msg, "Error: slot min delay greater than max delay.\n");
    }

    #[test]
    fn delay_holds_packets_until_due() {
        let mut q = netem("delay 10ms");
        assert_eq!(q.enqueue(Packet::new(1, 1000), ms(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 1000), ms(3)), Enqueued::Success);
        assert_eq!(q.dequeue(ms(5)), Dequeued::Throttled { until: ms(10) });
        assert_eq!(drain(&mut q, ms(10)), vec![1]);
        assert_eq!(q.dequeue(ms(12)), Dequeued::Throttled { until: ms(13) });
        assert_eq!(drain(&mut q, ms(13)), vec![2]);
        assert_eq!((q.stats().packets, q.stats().bytes, q.stats().qlen, q.stats().backlog), (2, 2000, 0, 0));
    }

    #[test]
    fn jitter_reorders_through_the_tree() {
        // Uniform ±9ms around 10ms: departures are in time_to_send order, not arrival order.
        let mut q = netem("delay 10ms 9ms seed 5");
        let mut prng = Prandom::seeded(5);
        let mut due = vec![];
        for id in 0..20u64 {
            let t = ms(id);
            q.enqueue(Packet::new(id, 100), t);
            let d = tabledist(10_000_000, 9_000_000, None, &mut prng, None);
            due.push((t.as_nanos() as i64 + d, id));
        }
        due.sort();
        assert_eq!(drain(&mut q, ms(1000)), due.iter().map(|(_, id)| *id).collect::<Vec<_>>());
    }

    #[test]
    fn rate_serialises_after_the_last_packet() {
        // 1 Mbit/s: 1250 bytes take 10 ms; the second waits for the first.
        let mut q = netem("rate 1mbit");
        q.enqueue(Packet::new(1, 1250), ms(0));
        q.enqueue(Packet::new(2, 1250), ms(0));
        assert_eq!(q.dequeue(ms(0)), Dequeued::Throttled { until: ms(10) });
        assert_eq!(drain(&mut q, ms(10)), vec![1]);
        assert_eq!(q.dequeue(ms(10)), Dequeued::Throttled { until: ms(20) });
        // Overhead and cells: 100 + 20 = 120 bytes → 3 cells of 53+5 = 174 bytes.
        let q = netem("rate 1mbit 20 53 5");
        assert_eq!(q.packet_time_ns(100), 174 * 1_000_000_000 / 125_000);
        let q = netem("rate 1mbit -100 53 5");
        assert_eq!(q.packet_time_ns(100), 0);
    }

    #[test]
    fn reorder_gap_sends_every_nth_at_once() {
        let mut q = netem("delay 10ms reorder 100% gap 3");
        for id in 1..=6 {
            q.enqueue(Packet::new(id, 100), ms(0));
        }
        // Packets 3 and 6 skip the delay (counted as requeues).
        assert_eq!(drain(&mut q, ms(0)), vec![6, 3]);
        assert_eq!(q.stats().requeues, 2);
        assert_eq!(drain(&mut q, ms(10)), vec![1, 2, 4, 5]);
    }

    #[test]
    fn limit_loss_and_ecn() {
        let mut q = netem("delay 1s limit 2");
        assert_eq!(q.enqueue(Packet::new(1, 100), ms(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 100), ms(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(3, 100), ms(0)), Enqueued::Dropped);
        assert_eq!((q.stats().qlen, q.stats().drops), (2, 1));

        let mut q = netem("loss 100%");
        assert_eq!(q.enqueue(Packet::new(1, 100), ms(0)), Enqueued::Stolen);
        assert_eq!((q.stats().qlen, q.stats().drops), (0, 1));

        // With ecn an ECN-capable packet is marked instead — and still counted as a drop.
        let mut q = netem("loss 100% ecn");
        let mut ect = Packet::new(1, 100);
        ect.tos = 0b10;
        assert_eq!(q.enqueue(ect, ms(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 100), ms(0)), Enqueued::Stolen);
        let Dequeued::Packet(out) = q.dequeue(ms(0)) else { panic!("the marked packet leaves") };
        assert_eq!((out.id, out.ecn()), (1, 0b11));
        assert_eq!(q.stats().drops, 2);
    }

    #[test]
    fn duplicates_are_counted_for_the_parents_and_never_duplicated_again() {
        let mut q = netem("duplicate 100%");
        assert_eq!(q.enqueue(Packet::new(7, 300), ms(0)), Enqueued::Success);
        assert_eq!(q.stats().qlen, 2);
        // The parents were told of one more packet than they handed over.
        assert_eq!(q.take_reduce(), Reduce::new(-1, -300));
        let out: Vec<Packet> = std::iter::from_fn(|| q.dequeue(ms(0)).packet()).collect();
        assert_eq!(out.iter().map(|p| (p.id, p.netem_dup())).collect::<Vec<_>>(), vec![(7, true), (7, false)]);
    }

    #[test]
    fn corrupting_a_gso_packet_segments_it() {
        let mut q = netem("corrupt 100%");
        let mut gso = Packet::new(1, 4000);
        gso.gso_segs = 4;
        assert_eq!(q.enqueue(gso, ms(0)), Enqueued::Success);
        assert_eq!(q.take_reduce(), Reduce::new(-3, 0));
        let out: Vec<Packet> = std::iter::from_fn(|| q.dequeue(ms(0)).packet()).collect();
        assert_eq!(out.iter().map(|p| (p.len, p.gso_segs)).collect::<Vec<_>>(), vec![(1000, 1); 4]);
        assert!(out.iter().all(|p| p.corrupted()), "every segment went through corrupt again at 100%");
    }

    #[test]
    fn slots_release_bursts() {
        // A slot opens every 10 ms and lets 2 packets through.
        let mut q = netem("slot 10ms packets 2");
        for id in 1..=5 {
            q.enqueue(Packet::new(id, 100), ms(0));
        }
        assert_eq!(drain(&mut q, ms(0)), vec![1, 2]);
        assert_eq!(q.dequeue(ms(1)), Dequeued::Throttled { until: ms(10) });
        assert_eq!(drain(&mut q, ms(10)), vec![3, 4]);
        assert_eq!(drain(&mut q, ms(20)), vec![5]);
    }

    #[test]
    fn child_gets_due_packets_and_its_drops_reach_the_parents() {
        let mut q = netem("delay 10ms");
        let child = Fifo::new(FifoKind::Pfifo, Some(FifoOpt { limit: 1 }), &dev());
        assert!(q.graft(1, Some(Node::new(0x20000, 0x10001, Box::new(child))), &dev()).unwrap().is_none());
        assert_eq!(q.class_minors(), vec![1]);
        for id in 1..=3 {
            q.enqueue(Packet::new(id, 100), ms(0));
        }
        let _ = q.take_reduce();
        // At 10 ms all three are due and all move to the child at once: the pfifo
        // of 1 keeps the first and drops two, which the parents learn of.
        assert_eq!(drain(&mut q, ms(10)), vec![1]);
        assert_eq!((q.stats().drops, q.stats().qlen, q.stats().backlog), (2, 0, 0));
        assert_eq!(q.take_reduce(), Reduce::new(2, 200));
        let old = q.graft(1, None, &dev()).unwrap();
        assert!(old.is_some());
        assert!(q.class_minors().is_empty());
    }

    #[test]
    fn change_keeps_what_is_not_sent() {
        let mut q = netem("delay 10ms 1ms 50% reorder 10% ecn loss 1% rate 1mbit seed 3");
        q.change(&Opts::new(p("delay 20ms").unwrap()), &dev(), ms(0)).unwrap();
        // Correlations, reorder probability, ecn, rate and the generator stay; loss is sent (0).
        assert_eq!(text(&q), "limit 1000 delay 20ms reorder 10% rate 1Mbit seed 3 ecn ");
    }

    #[test]
    fn conservation_under_everything() {
        for opts in [
            "delay 5ms 4ms 30% loss 10% 20% corrupt 5% reorder 20% gap 2 limit 50 seed 99",
            "delay 5ms 4ms duplicate 30% 20% corrupt 5% reorder 20% gap 2 rate 2mbit seed 98",
        ] {
            conserves(opts);
        }
    }

    fn conserves(opts: &str) {
        let mut q = netem(opts);
        let (mut given, mut extra) = (0i64, 0i64);
        let mut sent = 0i64;
        for i in 0..2000u64 {
            let now = Instant::from_micros(i * 500);
            given += 1;
            q.enqueue(Packet::new(i, 100 + (i % 7) as u32), now);
            extra -= q.take_reduce().pkts as i64;
            sent += drain(&mut q, now).len() as i64;
        }
        sent += drain(&mut q, ms(10_000)).len() as i64;
        let s = q.stats();
        assert_eq!(s.qlen, 0);
        assert_eq!(s.backlog, 0);
        // Every packet given, plus every duplicate, was sent or dropped (an ECN mark
        // would count as a drop without one: none here, the packets are not ECT).
        assert_eq!(given + extra, sent + s.drops as i64);
        assert_eq!(s.packets as i64, sent);
    }
}
