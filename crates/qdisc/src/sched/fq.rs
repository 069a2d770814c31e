//! fq — Fair Queue packet scheduler with per-flow pacing. Mirrors net/sched/sch_fq.c
//! as shipped in Linux 6.12 (kernel side) and tc/q_fq.c of iproute2 6.15 (tc side);
//! §9 of docs/kernel-notes.md.
//!
//! Theory. Every socket (or, for socket-less traffic, every masked flow hash) is a
//! *flow* with its own time-ordered packet queue. Flows are served deficit round
//! robin: a flow spends `credit` bytes per turn and is refilled by `quantum` when
//! it runs dry; a flow that becomes active is put on the `new_flows` list, which is
//! served before `old_flows`, and a new flow starts with `initial_quantum` of credit.
//! On top of that, three priority bands (chosen by `skb->priority` through a
//! priomap) are served weighted round robin: each band has a byte credit refilled
//! by its weight. Pacing: a flow may not send before `time_next_packet`, computed
//! from the socket pacing rate (or `maxrate`) after each quantum (or after every
//! packet below `low_rate_threshold`), or from the packet's EDT timestamp. A flow
//! that must wait is *throttled* (kept in a time-ordered tree); the qdisc answers
//! `Dequeued::Throttled { until }` when nothing is eligible (the kernel's watchdog).
//! An idle qdisc hands packets through a FIFO "fast path" queue (`internal`).
//!
//! Modelling choices (all deterministic, no hashing of Rust collections):
//! * Flow lookup: `2^buckets_log` ordered maps keyed by the flow's *pseudo pointer*.
//!   For an orphan (socket-less, listener, unconnected) flow that is the kernel's own
//!   key `((hash & orphan_mask) << 1) | 1`; for a socket it is
//!   `splitmix64(socket id)` with bit 0 cleared (a word-aligned "pointer"; two
//!   sockets alias only if their mixes differ in bit 0 alone). The bucket index is the
//!   kernel's `hash_ptr(key, buckets_log)` (`hash_64`, golden-ratio multiply).
//! * Garbage collection happens, as in `fq_gc`, only for flows met on the search path
//!   inside the bucket. The kernel's path follows its red-black tree; ours follows a
//!   perfectly balanced binary search over the bucket's ordered keys. With the usual
//!   0–2 flows per bucket the two visit the same flows (except which of two is the
//!   root); with deeper buckets an old detached flow may be collected on a different
//!   lookup than in the kernel. Rehash (`buckets` change) collects every candidate, as
//!   in the kernel.
//! * jiffies = now / (1 s / [`HZ`]) for the gc age (3 s) and `refill_delay`.
//! * `next_packet_delay` is computed at the last time the qdisc saw (dumps take no
//!   time argument); with no throttled flow it is never printed (in the kernel the
//!   value is then negative because `ktime_get_ns()` is always far above timer_slack).

use std::collections::{BTreeMap, VecDeque};

use crate::packet::{Packet, SockState};
use crate::qdisc::{dequeue_internal, peek_dequeued, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::tc::units::{get_integer10, get_unsigned10};
use crate::tc::{units, Args, Errno, Out, TcError};
use crate::time::{jiffies_to_usecs, time_after, usecs_to_jiffies, Instant, HZ};

/// FQ_BANDS.
pub const FQ_BANDS: usize = 3;
/// FQ_MIN_WEIGHT (uapi pkt_sched.h).
pub const FQ_MIN_WEIGHT: i32 = 16384;
/// The quantum bounds of 6.12.117's `fq_init`/`fq_change` (see
/// [`crate::tree::KernelVersion::quantum_bounds`]); 2^20 is also the quantum's
/// upper limit before them.
const FQ_MIN_QUANTUM: u32 = 256;
const FQ_MAX_QUANTUM: u32 = 1 << 20;
/// `sch_default_prio2band`, fq's default priomap.
pub const DEFAULT_PRIOMAP: [u8; 16] = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
/// Default band weights: 9·2^16, 3·2^16, 2^16 (`fq_init`).
pub const DEFAULT_WEIGHTS: [i32; 3] = [9 << 16, 3 << 16, 1 << 16];
/// FQ_GC_AGE: a detached flow older than this many jiffies is freed (3 s).
const FQ_GC_AGE: u64 = 3 * HZ;
/// Linux 6.12 has no TCA_FQ_OFFLOAD_HORIZON (added in 6.13): the attribute is
/// ignored when sent and never dumped. Set to true to model 6.13+.
const HAS_OFFLOAD_HORIZON: bool = false;
const NSEC_PER_SEC: u64 = 1_000_000_000;
const NSEC_PER_USEC: u64 = 1_000;
/// `~0UL`: no rate limit.
const NO_RATE: u64 = u64::MAX;

// ------------------------------------------------------------------------------------
// tc side

/// The attributes tc sends for fq (TCA_FQ_*), each only when given on the command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FqOpt {
    /// TCA_FQ_PLIMIT (packets, per band).
    pub limit: Option<u32>,
    /// TCA_FQ_FLOW_PLIMIT.
    pub flow_limit: Option<u32>,
    /// TCA_FQ_QUANTUM (bytes).
    pub quantum: Option<u32>,
    /// TCA_FQ_INITIAL_QUANTUM (bytes).
    pub initial_quantum: Option<u32>,
    /// TCA_FQ_RATE_ENABLE: 1 `pacing`, 0 `nopacing`.
    pub pacing: Option<u32>,
    /// TCA_FQ_FLOW_MAX_RATE (bytes/s; ~0 = unlimited).
    pub maxrate: Option<u32>,
    /// TCA_FQ_FLOW_DEFAULT_RATE: obsolete, ignored by the kernel.
    pub defrate: Option<u32>,
    /// TCA_FQ_LOW_RATE_THRESHOLD (bytes/s).
    pub low_rate_threshold: Option<u32>,
    /// TCA_FQ_BUCKETS_LOG: tc sends ceil(log2(buckets)).
    pub buckets_log: Option<u32>,
    /// TCA_FQ_FLOW_REFILL_DELAY (µs).
    pub refill_delay: Option<u32>,
    /// TCA_FQ_ORPHAN_MASK.
    pub orphan_mask: Option<u32>,
    /// TCA_FQ_CE_THRESHOLD (µs).
    pub ce_threshold: Option<u32>,
    /// TCA_FQ_TIMER_SLACK (ns).
    pub timer_slack: Option<u32>,
    /// TCA_FQ_HORIZON (µs).
    pub horizon: Option<u32>,
    /// TCA_FQ_HORIZON_DROP: 1 `horizon_drop`, 0 `horizon_cap`.
    pub horizon_drop: Option<u8>,
    /// TCA_FQ_PRIOMAP (`struct tc_prio_qopt`: bands, priomap).
    pub priomap: Option<(i32, [u8; 16])>,
    /// TCA_FQ_WEIGHTS (3 × s32).
    pub weights: Option<[i32; 3]>,
    /// TCA_FQ_OFFLOAD_HORIZON (µs); ignored by 6.12 kernels.
    pub offload_horizon: Option<u32>,
}

/// q_fq.c `explain`.
const USAGE: &str = "Usage: ... fq\t[ limit PACKETS ] [ flow_limit PACKETS ]\n\
\t\t[ quantum BYTES ] [ initial_quantum BYTES ]\n\
\t\t[ maxrate RATE ] [ buckets NUMBER ]\n\
\t\t[ [no]pacing ] [ refill_delay TIME ]\n\
\t\t[ bands 3 priomap P0 P1 ... P14 P15 ]\n\
\t\t[ weights W1 W2 W3 ]\n\
\t\t[ low_rate_threshold RATE ]\n\
\t\t[ orphan_mask MASK]\n\
\t\t[ timer_slack TIME]\n\
\t\t[ ce_threshold TIME ]\n\
\t\t[ horizon TIME ]\n\
\t\t[ horizon_{cap|drop} ]\n\
\t\t[ offload_horizon TIME ]\n";

fn illegal(what: &str) -> TcError {
    TcError::tc(format!("Illegal \"{what}\"\n"))
}

/// q_fq.c `ilog2`: the number of bits of `val - 1`, i.e. ceil(log2(val)).
fn tc_ilog2(val: u32) -> u32 {
    32 - val.wrapping_sub(1).leading_zeros()
}

/// tc side: mirrors `fq_parse_opt` in tc/q_fq.c (iproute2 6.15). Keywords are
/// compared exactly. iproute2 6.15 has a bug in `weights`: it skips the word right
/// after the keyword before reading the three weights (fixed in 6.16), so
/// `weights 589824 196608 65536` fails with "Not enough elements in weights"; that is
/// reproduced here.
///
/// Not modelled: `maxrate N%` / `defrate N%` read the device speed from sysfs; our
/// devices have none, so tc's messages are approximated (see the report).
pub fn parse(args: &mut Args) -> Result<FqOpt, TcError> {
    let mut o = FqOpt::default();
    let mut buckets: u32 = 0;
    while let Some(a) = args.next() {
        match a {
            "limit" => o.limit = Some(units::get_u32(args.value()?).ok_or_else(|| illegal("limit"))?),
            "flow_limit" => o.flow_limit = Some(units::get_u32(args.value()?).ok_or_else(|| illegal("flow_limit"))?),
            "buckets" => buckets = units::get_u32(args.value()?).ok_or_else(|| illegal("buckets"))?,
            "maxrate" => {
                o.maxrate = Some({
                    let v = args.value()?;
                    rate_arg(args, v, "maxrate")?
                })
            }
            "low_rate_threshold" => {
                o.low_rate_threshold = {
                    let v = args.value()?;
                    Some(args.rate(v).ok_or_else(|| illegal("low_rate_threshold"))?)
                }
            }
            "ce_threshold" => {
                o.ce_threshold = Some(units::get_time(args.value()?).ok_or_else(|| illegal("ce_threshold"))?)
            }
            "timer_slack" => {
                let t = units::get_time64(args.value()?).ok_or_else(|| illegal("timer_slack"))?;
                let v = u32::try_from(t).map_err(|_| TcError::tc("Illegal (out of range) \"timer_slack\"\n"))?;
                o.timer_slack = Some(v);
            }
            "horizon_drop" => o.horizon_drop = Some(1),
            "horizon_cap" => o.horizon_drop = Some(0),
            "horizon" => o.horizon = Some(units::get_time(args.value()?).ok_or_else(|| illegal("horizon"))?),
            "offload_horizon" => {
                o.offload_horizon = Some(units::get_time(args.value()?).ok_or_else(|| illegal("offload_horizon"))?)
            }
            "defrate" => {
                o.defrate = Some({
                    let v = args.value()?;
                    rate_arg(args, v, "defrate")?
                })
            }
            "quantum" => o.quantum = Some(units::get_u32(args.value()?).ok_or_else(|| illegal("quantum"))?),
            "initial_quantum" => {
                o.initial_quantum = Some(units::get_u32(args.value()?).ok_or_else(|| illegal("initial_quantum"))?)
            }
            // sic: q_fq.c reports a bad orphan_mask as "initial_quantum".
            "orphan_mask" => {
                o.orphan_mask = Some(units::get_u32(args.value()?).ok_or_else(|| illegal("initial_quantum"))?)
            }
            "refill_delay" => {
                o.refill_delay = Some(units::get_time(args.value()?).ok_or_else(|| illegal("refill_delay"))?)
            }
            "pacing" => o.pacing = Some(1),
            "nopacing" => o.pacing = Some(0),
            "bands" => {
                if o.priomap.is_some() {
                    return Err(TcError::tc("Duplicate \"bands\"\n"));
                }
                let bands = get_integer10(args.value()?).ok_or_else(|| illegal("bands"))?;
                if bands != FQ_BANDS as i32 {
                    return Err(TcError::tc("\"bands\" must be 3\n"));
                }
                if args.value()? != "priomap" {
                    return Err(TcError::tc("\"priomap\" expected\n"));
                }
                let mut map = [0u8; 16];
                for m in map.iter_mut() {
                    if args.peek().is_none() {
                        return Err(TcError::tc("Not enough elements in priomap\n"));
                    }
                    let v = args.value()?;
                    let band = get_unsigned10(v).ok_or_else(|| {
                        TcError::tc(format!("Illegal \"priomap\" element, number in [0..{}] expected\n", bands - 1))
                    })?;
                    if band >= bands as u32 {
                        return Err(TcError::tc(format!("\"priomap\" element {band} too big\n")));
                    }
                    *m = band as u8;
                }
                o.priomap = Some((bands, map));
            }
            "weights" => {
                if o.weights.is_some() {
                    return Err(TcError::tc("Duplicate \"weights\"\n"));
                }
                // iproute2 6.15's extra NEXT_ARG(): the first word is skipped unchecked.
                args.value()?;
                let mut w = [0i32; 3];
                for x in w.iter_mut() {
                    if args.peek().is_none() {
                        return Err(TcError::tc("Not enough elements in weights\n"));
                    }
                    let v = get_integer10(args.value()?)
                        .ok_or_else(|| TcError::tc("Illegal \"weights\" element, positive number expected\n"))?;
                    if v < FQ_MIN_WEIGHT {
                        return Err(TcError::tc(format!("\"weight\" element {v} too small\n")));
                    }
                    *x = v;
                }
                o.weights = Some(w);
            }
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    if buckets != 0 {
        o.buckets_log = Some(tc_ilog2(buckets));
    }
    Ok(o)
}

/// `maxrate`/`defrate`: `get_rate` (32 bits), or `get_percent_rate` with a '%'.
fn rate_arg(args: &mut Args, v: &str, what: &str) -> Result<u32, TcError> {
    args.rate(v).ok_or_else(|| illegal(what))
}

// ------------------------------------------------------------------------------------
// kernel side: data structures

/// `fq_skb_cb` plus the skb: a queued packet with its departure time and band.
#[derive(Debug)]
struct Item {
    time_to_send: u64,
    band: u8,
    pkt: Packet,
}

/// A flow's packets: a FIFO while departure times do not decrease, plus an ordered
/// tree for out-of-order EDT packets (`flow_queue_add`, `fq_peek`).
#[derive(Default, Debug)]
struct FlowQueue {
    list: VecDeque<Item>,
    /// Keyed by (time_to_send, insertion number): equal times go after earlier ones,
    /// as the kernel's rb-tree insert sends them right.
    tree: BTreeMap<(u64, u64), Item>,
}

impl FlowQueue {
    /// Mirrors `flow_queue_add`.
    fn add(&mut self, item: Item, seq: u64) {
        match self.list.back() {
            Some(tail) if item.time_to_send < tail.time_to_send => {
                self.tree.insert((item.time_to_send, seq), item);
            }
            _ => self.list.push_back(item),
        }
    }
    /// Mirrors `fq_peek`: the earlier of the list head and the tree's first (the list
    /// head on a tie).
    fn peek(&self) -> Option<&Item> {
        match (self.list.front(), self.tree.first_key_value()) {
            (h, None) => h,
            (None, Some((_, t))) => Some(t),
            (Some(h), Some((_, t))) => Some(if t.time_to_send < h.time_to_send { t } else { h }),
        }
    }
    /// Mirrors `fq_erase_head` on what `peek` returned.
    fn pop(&mut self) -> Option<Item> {
        let from_tree = match (self.list.front(), self.tree.first_key_value()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(h), Some((_, t))) => t.time_to_send < h.time_to_send,
        };
        if from_tree {
            self.tree.pop_first().map(|(_, i)| i)
        } else {
            self.list.pop_front()
        }
    }
    fn drain(&mut self) -> impl Iterator<Item = Item> + '_ {
        self.list.drain(..).chain(std::mem::take(&mut self.tree).into_values())
    }
}

/// One `fq_root[]` tree: the (pseudo pointer, flow slot) pairs of a bucket in key
/// order. A bucket holds at most one flow almost always; that one is kept inline
/// (no allocation, no pointer to follow on lookup).
#[derive(Clone, Debug)]
enum FlowBucket {
    /// Zero or one flow (`slot == NO_SLOT`: empty).
    One((u64, u32)),
    /// Two or more, sorted by key. (Boxed so that a bucket stays 24 bytes.)
    #[allow(clippy::box_collection)]
    Many(Box<Vec<(u64, u32)>>),
}

/// The slot of an empty [`FlowBucket::One`].
const NO_SLOT: u32 = u32::MAX;

impl Default for FlowBucket {
    fn default() -> Self {
        FlowBucket::One((0, NO_SLOT))
    }
}

impl FlowBucket {
    /// The pairs in key order.
    #[inline]
    fn pairs(&self) -> &[(u64, u32)] {
        match self {
            FlowBucket::One(p) if p.1 == NO_SLOT => &[],
            FlowBucket::One(p) => std::slice::from_ref(p),
            FlowBucket::Many(v) => v,
        }
    }
    #[inline]
    fn get(&self, key: u64) -> Option<u32> {
        match self {
            FlowBucket::One((k, i)) => (*i != NO_SLOT && *k == key).then_some(*i),
            FlowBucket::Many(v) => v.binary_search_by_key(&key, |p| p.0).ok().map(|j| v[j].1),
        }
    }
    fn insert(&mut self, key: u64, idx: u32) {
        match self {
            FlowBucket::One(p) if p.1 == NO_SLOT || p.0 == key => *p = (key, idx),
            FlowBucket::One(p) => {
                let old = *p;
                let v = if old.0 < key { vec![old, (key, idx)] } else { vec![(key, idx), old] };
                *self = FlowBucket::Many(Box::new(v));
            }
            FlowBucket::Many(v) => match v.binary_search_by_key(&key, |p| p.0) {
                Ok(j) => v[j].1 = idx,
                Err(j) => v.insert(j, (key, idx)),
            },
        }
    }
    fn remove(&mut self, key: u64) {
        match self {
            FlowBucket::One(p) => {
                if p.1 != NO_SLOT && p.0 == key {
                    *self = FlowBucket::default();
                }
            }
            FlowBucket::Many(v) => {
                if let Ok(j) = v.binary_search_by_key(&key, |p| p.0) {
                    v.remove(j);
                }
                if v.len() <= 1 {
                    *self = FlowBucket::One(v.first().copied().unwrap_or((0, NO_SLOT)));
                }
            }
        }
    }
}

/// Where a flow is linked: the kernel encodes this in `f->next` (throttled marker) and
/// the low bit of `f->age`/`f->tail` (detached).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// On no list and not throttled; the jiffies value (`| 1`) at which it was detached.
    Detached(u64),
    /// On a band's new or old list.
    Listed,
    /// In the delayed tree under this key.
    Throttled((u64, u64)),
}

/// `struct fq_flow`.
#[derive(Debug)]
struct Flow {
    q: FlowQueue,
    link: Link,
    time_next_packet: u64,
    socket_hash: u32,
    qlen: u32,
    credit: i32,
    band: u8,
}

/// `struct fq_perband_flows`.
#[derive(Default, Debug)]
struct Band {
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    credit: i32,
    /// The band weight.
    quantum: i32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    New,
    Old,
}

/// The xstats (`struct tc_fq_qd_stats`) counters kept by the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FqStats {
    pub gc_flows: u64,
    pub fastpath_packets: u64,
    pub throttled: u64,
    pub flows_plimit: u64,
    pub pkts_too_long: u64,
    pub allocation_errors: u64,
    pub ce_mark: u64,
    pub horizon_drops: u64,
    pub horizon_caps: u64,
    pub band_drops: [u64; 3],
}

/// The fq qdisc: `struct fq_sched_data` plus the qdisc's counters.
pub struct Fq {
    // --- configuration
    limit: u32,
    flow_plimit: u32,
    quantum: u32,
    initial_quantum: u32,
    /// [`KernelVersion::quantum_bounds`] of the device's kernel: `fq_change` clamps
    /// `quantum` and caps `initial_quantum` at 2^20 (the policy).
    ///
    /// [`KernelVersion::quantum_bounds`]: crate::tree::KernelVersion::quantum_bounds
    quantum_bounds: bool,
    /// jiffies.
    flow_refill_delay: u32,
    /// bytes/s, `NO_RATE` = none.
    flow_max_rate: u64,
    /// ns.
    ce_threshold: u64,
    /// ns.
    horizon: u64,
    orphan_mask: u32,
    low_rate_threshold: u32,
    rate_enable: bool,
    fq_trees_log: u8,
    horizon_drop: u8,
    prio2band: [u8; 16],
    /// ns.
    timer_slack: u32,
    // --- state
    band_nr: usize,
    bands: [Band; FQ_BANDS],
    /// The fast path queue (`q->internal`).
    internal: FlowQueue,
    internal_qlen: u32,
    /// Throttled flows by (time_next_packet, insertion number).
    delayed: BTreeMap<(u64, u64), u32>,
    time_next_delayed_flow: u64,
    unthrottle_latency_ns: u64,
    band_pkt_count: [u32; FQ_BANDS],
    flows: u32,
    inactive_flows: u32,
    throttled_flows: u32,
    xs: FqStats,
    /// `fq_root[]`: per bucket, pseudo pointer → flow slot.
    buckets: Vec<FlowBucket>,
    slab: Vec<Option<Flow>>,
    free: Vec<u32>,
    seq: u64,
    watchdog: Option<Instant>,
    /// The latest time seen (for `next_packet_delay` in dumps).
    last_now: u64,
}

/// `hash_64`: multiply by GOLDEN_RATIO_64 and keep the top `bits` bits.
fn hash_64(val: u64, bits: u8) -> usize {
    (val.wrapping_mul(0x61C8_8646_80B5_83EB) >> (64 - bits as u32)) as usize
}

/// splitmix64's finaliser: a bijective mix standing in for the socket's address.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The pseudo pointer of a socket (even, like an aligned `struct sock *`).
pub fn socket_key(id: u64) -> u64 {
    mix64(id) & !1
}

/// q_fq.c always sends TCA_OPTIONS (possibly empty).
pub static OPS: Ops = Ops {
    id: "fq",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Fq::new(c.opts()?.unwrap_or(&FqOpt::default()), c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Fq {
    /// `fq_init`: the defaults, then `fq_change` with what tc sent.
    pub fn new(o: &FqOpt, dev: &DevInfo, _handle: u32, now: Instant) -> Result<Fq, TcError> {
        let bounds = dev.kernel.quantum_bounds();
        // 6.12.117's fq_init bounds what it derives from the MTU; 6.18.44 does not.
        let (quantum, initial_quantum) = if bounds {
            let mtu = dev.psched_mtu().clamp(1, FQ_MAX_QUANTUM);
            ((2 * mtu).clamp(FQ_MIN_QUANTUM, FQ_MAX_QUANTUM), (10 * mtu).min(FQ_MAX_QUANTUM))
        } else {
            (2 * dev.psched_mtu(), 10 * dev.psched_mtu())
        };
        let mut q = Fq {
            limit: 10000,
            flow_plimit: 100,
            quantum,
            initial_quantum,
            quantum_bounds: bounds,
            flow_refill_delay: usecs_to_jiffies(40_000),
            flow_max_rate: NO_RATE,
            ce_threshold: NSEC_PER_USEC * u32::MAX as u64,
            horizon: 10 * NSEC_PER_SEC,
            orphan_mask: 1023,
            low_rate_threshold: 550_000 / 8,
            rate_enable: true,
            fq_trees_log: 10,
            horizon_drop: 1,
            prio2band: DEFAULT_PRIOMAP,
            timer_slack: 10_000,
            band_nr: 0,
            bands: Default::default(),
            internal: FlowQueue::default(),
            internal_qlen: 0,
            delayed: BTreeMap::new(),
            time_next_delayed_flow: u64::MAX,
            unthrottle_latency_ns: 0,
            band_pkt_count: [0; 3],
            flows: 0,
            inactive_flows: 0,
            throttled_flows: 0,
            xs: FqStats::default(),
            buckets: Vec::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
            watchdog: None,
            last_now: now.as_nanos(),
        };
        for (b, w) in q.bands.iter_mut().zip(DEFAULT_WEIGHTS) {
            b.quantum = w;
        }
        // Nothing is queued yet: the counters are not needed.
        q.apply(&mut Sch::default(), o, now)?;
        Ok(q)
    }

    /// Mirrors `fq_change`. Like the kernel it is not transactional: attributes are
    /// applied in the kernel's order, a bad one only records the error (priomap,
    /// weights and the bucket resize are skipped once an error is recorded), and the
    /// queue is trimmed to `limit` in any case.
    fn apply(&mut self, sch: &mut Sch, o: &FqOpt, now: Instant) -> Result<(), TcError> {
        // Policy validation (nla_parse without extack): nothing is applied.
        // TCA_FQ_INITIAL_QUANTUM's range is [0, INT_MAX], [0, 2^20] on 6.12.117.
        let iq_max = if self.quantum_bounds { FQ_MAX_QUANTUM } else { i32::MAX as u32 };
        if o.initial_quantum.is_some_and(|v| v > iq_max) {
            return Err(TcError { msg: "RTNETLINK answers: Numerical result out of range\n".into(), code: 2 });
        }
        let mut err: Option<TcError> = None;
        let mut fq_log = self.fq_trees_log;
        if let Some(n) = o.buckets_log {
            if (1..=18).contains(&n) {
                fq_log = n as u8;
            } else {
                err = Some(TcError::errno(Errno::EINVAL));
            }
        }
        if let Some(v) = o.limit {
            self.limit = v;
        }
        if let Some(v) = o.flow_limit {
            self.flow_plimit = v;
        }
        if let Some(v) = o.quantum {
            if self.quantum_bounds {
                // 6.12.117: clamped, never refused.
                self.quantum = v.clamp(FQ_MIN_QUANTUM, FQ_MAX_QUANTUM);
            } else if v > 0 && v <= FQ_MAX_QUANTUM {
                self.quantum = v;
            } else {
                err = Some(TcError::kernel("sch_fq: invalid quantum"));
            }
        }
        if let Some(v) = o.initial_quantum {
            self.initial_quantum = v;
        }
        // TCA_FQ_FLOW_DEFAULT_RATE: "defrate ignored" (a log line only).
        if let Some(v) = o.maxrate {
            self.flow_max_rate = if v == u32::MAX { NO_RATE } else { v as u64 };
        }
        if let Some(v) = o.low_rate_threshold {
            self.low_rate_threshold = v;
        }
        if let Some(v) = o.pacing {
            if v <= 1 {
                self.rate_enable = v == 1;
            } else {
                err = Some(TcError::errno(Errno::EINVAL));
            }
        }
        if let Some(v) = o.refill_delay {
            self.flow_refill_delay = usecs_to_jiffies(v);
        }
        if err.is_none() {
            if let Some((bands, map)) = o.priomap {
                if bands != FQ_BANDS as i32 {
                    err = Some(TcError::kernel("sch_fq: FQ only supports 3 bands"));
                } else if let Some(i) = map.iter().position(|&b| b as usize >= FQ_BANDS) {
                    err = Some(TcError::kernel(&format!(
                        "sch_fq: FQ priomap field {i} maps to a too high band {}",
                        map[i]
                    )));
                } else {
                    self.prio2band = map;
                }
            }
        }
        if err.is_none() {
            if let Some(w) = o.weights {
                if let Some(&bad) = w.iter().find(|&&x| x < FQ_MIN_WEIGHT) {
                    // sic: "less that"
                    err = Some(TcError::kernel(&format!(
                        "sch_fq: Weight {bad} less that minimum allowed {FQ_MIN_WEIGHT}"
                    )));
                } else {
                    for (b, x) in self.bands.iter_mut().zip(w) {
                        b.quantum = x;
                    }
                }
            }
        }
        if let Some(v) = o.orphan_mask {
            self.orphan_mask = v;
        }
        if let Some(v) = o.ce_threshold {
            self.ce_threshold = NSEC_PER_USEC * v as u64;
        }
        if let Some(v) = o.timer_slack {
            self.timer_slack = v;
        }
        if let Some(v) = o.horizon {
            self.horizon = NSEC_PER_USEC * v as u64;
        }
        if let Some(v) = o.horizon_drop {
            self.horizon_drop = v;
        }
        // TCA_FQ_OFFLOAD_HORIZON: unknown to 6.12, silently ignored (HAS_OFFLOAD_HORIZON).
        if err.is_none() {
            self.resize(fq_log, now);
        }
        // Trim to the (total) limit by dequeueing: the packets count as sent here and
        // as drops in the ancestors (qdisc_tree_reduce_backlog).
        let (mut n, mut bytes) = (0i32, 0i64);
        while sch.stats.qlen > self.limit {
            match dequeue_internal(self, sch, now) {
                Dequeued::Packet(p) => {
                    n += 1;
                    bytes += p.len as i64;
                    p.kfree_skb();
                }
                _ => break,
            }
        }
        sch.reduce(n, bytes);
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Mirrors `fq_resize` + `fq_rehash`: re-bucket every flow, freeing gc candidates.
    fn resize(&mut self, log: u8, now: Instant) {
        if !self.buckets.is_empty() && log == self.fq_trees_log {
            return;
        }
        let old = std::mem::take(&mut self.buckets);
        self.buckets = vec![FlowBucket::default(); 1 << log];
        self.fq_trees_log = log;
        let jiffies = now.jiffies();
        let mut fcnt = 0u32;
        for bucket in old {
            // The kernel walks each tree from rb_first (its largest key).
            for &(key, idx) in bucket.pairs().iter().rev() {
                if self.gc_candidate(idx, jiffies) {
                    self.free_flow(idx);
                    fcnt += 1;
                    continue;
                }
                self.buckets[hash_64(key, log)].insert(key, idx);
            }
        }
        self.flows -= fcnt;
        self.inactive_flows -= fcnt;
        self.xs.gc_flows += fcnt as u64;
    }

    fn flow(&self, idx: u32) -> &Flow {
        self.slab[idx as usize].as_ref().expect("live flow")
    }
    fn flow_mut(&mut self, idx: u32) -> &mut Flow {
        self.slab[idx as usize].as_mut().expect("live flow")
    }
    fn free_flow(&mut self, idx: u32) {
        self.slab[idx as usize] = None;
        self.free.push(idx);
    }
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// `fq_gc_candidate`.
    fn gc_candidate(&self, idx: u32, jiffies: u64) -> bool {
        matches!(self.flow(idx).link, Link::Detached(age) if time_after(jiffies, age.wrapping_add(FQ_GC_AGE)))
    }

    /// `fq_flow_add_tail`: on the band the flow records (`f->band`).
    fn add_tail(&mut self, idx: u32, which: Which) {
        let f = self.flow_mut(idx);
        f.link = Link::Listed;
        let band = f.band as usize;
        match which {
            Which::New => self.bands[band].new_flows.push_back(idx),
            Which::Old => self.bands[band].old_flows.push_back(idx),
        }
    }

    /// `fq_flow_set_throttled`.
    fn set_throttled(&mut self, idx: u32) {
        let seq = self.next_seq();
        let f = self.flow_mut(idx);
        let key = (f.time_next_packet, seq);
        f.link = Link::Throttled(key);
        self.delayed.insert(key, idx);
        self.throttled_flows += 1;
        self.xs.throttled += 1;
        self.time_next_delayed_flow = self.time_next_delayed_flow.min(key.0);
    }

    /// `fq_flow_unset_throttled`.
    fn unset_throttled(&mut self, idx: u32) {
        if let Link::Throttled(key) = self.flow(idx).link {
            self.delayed.remove(&key);
            self.throttled_flows -= 1;
            self.add_tail(idx, Which::Old);
        }
    }

    /// `fq_gc` on the search path for `key` in `bucket`.
    fn gc(&mut self, bucket: usize, key: u64, now: Instant) {
        let keys = self.buckets[bucket].pairs();
        if keys.is_empty() {
            return;
        }
        let jiffies = now.jiffies();
        let (mut lo, mut hi) = (0usize, keys.len());
        let mut tofree = Vec::new();
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (k, idx) = keys[mid];
            if k == key {
                break;
            }
            if self.gc_candidate(idx, jiffies) {
                tofree.push((k, idx));
            }
            if key < k {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if tofree.is_empty() {
            return;
        }
        let n = tofree.len() as u32;
        for (k, idx) in tofree {
            self.buckets[bucket].remove(k);
            self.free_flow(idx);
        }
        self.flows -= n;
        self.inactive_flows -= n;
        self.xs.gc_flows += n as u64;
    }

    /// `fq_fastpath_check`.
    fn fastpath_ok(&self, sch: &Sch, pkt: &Packet, time_to_send: u64, now: u64) -> bool {
        if time_to_send > now {
            return false;
        }
        if sch.stats.qlen != 0 {
            if self.flows != self.inactive_flows + self.throttled_flows {
                return false;
            }
            if self.internal_qlen >= 8 {
                return false;
            }
            if self.time_next_delayed_flow <= now {
                return false;
            }
        }
        if let Some(sk) = pkt.sk.as_deref() {
            if sk.state != SockState::Listener && !sk.tcp && sk.max_pacing_rate != u64::MAX {
                return false;
            }
        }
        self.flow_max_rate == NO_RATE
    }

    /// Mirrors `fq_classify`: the flow slot, or None for the fast path queue.
    fn classify(&mut self, sch: &Sch, pkt: &mut Packet, time_to_send: u64, now: Instant) -> Option<u32> {
        let orphan = |hash: u32, mask: u32| (((hash & mask) as u64) << 1) | 1;
        let (key, own_sk) = match pkt.sk.as_deref().map(|s| (s.state, s.id, s.hash)) {
            None => (orphan(pkt.hash, self.orphan_mask), None),
            Some((SockState::Listener, _, _)) => {
                pkt.sk = None; // skb_orphan
                (orphan(pkt.hash, self.orphan_mask), None)
            }
            Some((SockState::Close, _, _)) => (orphan(pkt.hash, self.orphan_mask), None),
            Some((SockState::Connected, id, hash)) => (socket_key(id), Some(hash)),
        };
        if self.fastpath_ok(sch, pkt, time_to_send, now.as_nanos()) {
            self.xs.fastpath_packets += 1;
            return None;
        }
        let bucket = hash_64(key, self.fq_trees_log);
        self.gc(bucket, key, now);
        if let Some(idx) = self.buckets[bucket].get(key) {
            if let Some(h) = own_sk {
                if self.flow(idx).socket_hash != h {
                    // The socket was reused for another connection.
                    let iq = self.initial_quantum as i32;
                    let f = self.flow_mut(idx);
                    f.credit = iq;
                    f.socket_hash = h;
                    if matches!(f.link, Link::Throttled(_)) {
                        self.unset_throttled(idx);
                    }
                    self.flow_mut(idx).time_next_packet = 0;
                }
            }
            return Some(idx);
        }
        let f = Flow {
            q: FlowQueue::default(),
            link: Link::Detached(now.jiffies() | 1),
            time_next_packet: 0,
            socket_hash: own_sk.unwrap_or(0),
            qlen: 0,
            credit: self.initial_quantum as i32,
            band: 0,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(f);
                i
            }
            None => {
                self.slab.push(Some(f));
                (self.slab.len() - 1) as u32
            }
        };
        self.buckets[bucket].insert(key, idx);
        self.flows += 1;
        self.inactive_flows += 1;
        Some(idx)
    }

    /// Mirrors `fq_check_throttled` (6.12: the latency sample is taken even when 0).
    fn check_throttled(&mut self, now: u64) {
        if self.time_next_delayed_flow > now {
            return;
        }
        let sample = now.wrapping_sub(self.time_next_delayed_flow);
        self.unthrottle_latency_ns -= self.unthrottle_latency_ns >> 3;
        self.unthrottle_latency_ns = self.unthrottle_latency_ns.wrapping_add(sample >> 3);
        self.time_next_delayed_flow = u64::MAX;
        while let Some((&(t, _), &idx)) = self.delayed.first_key_value() {
            if t > now {
                self.time_next_delayed_flow = t;
                break;
            }
            self.unset_throttled(idx);
        }
    }

    /// `fq_pband_head_select`.
    fn head_select(&self, band: usize) -> Option<Which> {
        let b = &self.bands[band];
        if b.credit <= 0 {
            None
        } else if !b.new_flows.is_empty() {
            Some(Which::New)
        } else if !b.old_flows.is_empty() {
            Some(Which::Old)
        } else {
            None
        }
    }

    fn list_mut(&mut self, band: usize, which: Which) -> &mut VecDeque<u32> {
        match which {
            Which::New => &mut self.bands[band].new_flows,
            Which::Old => &mut self.bands[band].old_flows,
        }
    }

    /// Mirrors `fq_dequeue`.
    fn dequeue_fq(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.last_now = self.last_now.max(now.as_nanos());
        if sch.stats.qlen == 0 {
            return Dequeued::Empty;
        }
        if let Some(item) = self.internal.pop() {
            self.internal_qlen -= 1;
            sch.stats.unqueued(item.pkt.len);
            sch.stats.sent(&item.pkt);
            self.watchdog = None;
            return Dequeued::Packet(item.pkt);
        }
        let now_ns = now.as_nanos();
        self.check_throttled(now_ns);
        let mut retry = 0;
        let mut pband = self.band_nr;
        let (idx, pkt, tstamp_was_zero) = loop {
            let Some(which) = self.head_select(pband) else {
                let mut found = false;
                loop {
                    retry += 1;
                    if retry > FQ_BANDS {
                        break;
                    }
                    self.band_nr = (self.band_nr + 1) % FQ_BANDS;
                    pband = self.band_nr;
                    let b = &mut self.bands[pband];
                    b.credit = b.credit.wrapping_add(b.quantum).min(b.quantum);
                    if b.credit > 0 {
                        found = true;
                        break;
                    }
                    retry = 0;
                }
                if found {
                    continue;
                }
                if self.time_next_delayed_flow != u64::MAX {
                    let until = Instant::from_nanos(self.time_next_delayed_flow);
                    self.watchdog = Some(until);
                    return Dequeued::Throttled { until };
                }
                return Dequeued::Empty;
            };
            let idx = *self.list_mut(pband, which).front().expect("selected list is non-empty");
            retry = 0;
            let quantum = self.quantum as i32;
            let f = self.flow_mut(idx);
            if f.credit <= 0 {
                f.credit = f.credit.wrapping_add(quantum);
                self.list_mut(pband, which).pop_front();
                self.add_tail(idx, Which::Old);
                continue;
            }
            let head = f.q.peek().map(|i| i.time_to_send);
            match head {
                Some(tts) => {
                    let tnp = tts.max(f.time_next_packet);
                    if now_ns < tnp {
                        f.time_next_packet = tnp;
                        self.list_mut(pband, which).pop_front();
                        self.set_throttled(idx);
                        continue;
                    }
                    let item = f.q.pop().expect("peeked");
                    f.qlen -= 1;
                    let emptied = f.qlen == 0;
                    let mut pkt = item.pkt;
                    sch.stats.unqueued(pkt.len);
                    sch.stats.sent(&pkt);
                    if (now_ns.wrapping_sub(tnp).wrapping_sub(self.ce_threshold) as i64) > 0 {
                        pkt.set_ce();
                        self.xs.ce_mark += 1;
                    }
                    if emptied {
                        self.inactive_flows += 1;
                    }
                    self.band_pkt_count[item.band as usize] -= 1;
                    let zero = pkt.tstamp == Instant::ZERO;
                    break (idx, pkt, zero);
                }
                None => {
                    self.list_mut(pband, which).pop_front();
                    if which == Which::New {
                        self.add_tail(idx, Which::Old);
                    } else {
                        self.flow_mut(idx).link = Link::Detached(now.jiffies() | 1);
                    }
                    continue;
                }
            }
        };
        self.watchdog = None;
        let mut plen = pkt.len;
        let f = self.slab[idx as usize].as_mut().expect("live flow");
        f.credit = f.credit.wrapping_sub(plen as i32);
        self.bands[pband].credit = self.bands[pband].credit.wrapping_sub(plen as i32);
        if !self.rate_enable {
            return Dequeued::Packet(pkt);
        }
        let mut rate = self.flow_max_rate;
        if tstamp_was_zero {
            if let Some(sk) = pkt.sk.as_deref() {
                rate = rate.min(sk.pacing_rate());
            }
            if rate <= self.low_rate_threshold as u64 {
                f.credit = 0;
            } else {
                plen = plen.max(self.quantum);
                if f.credit > 0 {
                    return Dequeued::Packet(pkt);
                }
            }
        }
        if rate != NO_RATE {
            // With rate 0 the division is skipped (and the result clamped below).
            let mut len = plen as u64 * NSEC_PER_SEC;
            len = len.checked_div(rate).unwrap_or(len);
            if len > NSEC_PER_SEC {
                len = NSEC_PER_SEC;
                self.xs.pkts_too_long += 1;
            }
            if f.time_next_packet != 0 {
                len -= (len / 2).min(now_ns.wrapping_sub(f.time_next_packet));
            }
            f.time_next_packet = now_ns + len;
        }
        Dequeued::Packet(pkt)
    }

    // ---- accessors (tests, simulator) ---------------------------------------------

    /// The xstats counters.
    pub fn xstats(&self) -> &FqStats {
        &self.xs
    }
    /// (flows, inactive, throttled) as dumped.
    pub fn flow_counts(&self) -> (u32, u32, u32) {
        (self.flows, self.inactive_flows, self.throttled_flows)
    }
    /// Packets queued per band (fast path excluded).
    pub fn band_pkt_count(&self) -> [u32; 3] {
        self.band_pkt_count
    }
    /// The earliest throttled flow's release time (None when no flow is throttled).
    pub fn time_next_delayed_flow(&self) -> Option<Instant> {
        (self.time_next_delayed_flow != u64::MAX).then(|| Instant::from_nanos(self.time_next_delayed_flow))
    }
    /// The unthrottle latency EWMA, ns.
    pub fn unthrottle_latency_ns(&self) -> u64 {
        self.unthrottle_latency_ns
    }
    /// The credit of the flow of socket `id`, if it exists.
    pub fn socket_flow_credit(&self, id: u64) -> Option<i32> {
        let key = socket_key(id);
        let b = hash_64(key, self.fq_trees_log);
        self.buckets[b].get(key).map(|i| self.flow(i).credit)
    }
    /// Number of buckets (2^buckets_log).
    pub fn buckets(&self) -> usize {
        1 << self.fq_trees_log
    }
    /// Band weights and credits (for tests).
    pub fn band_credits(&self) -> [i32; 3] {
        [self.bands[0].credit, self.bands[1].credit, self.bands[2].credit]
    }
}

impl Qdisc for Fq {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `fq_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let now_ns = now.as_nanos();
        self.last_now = self.last_now.max(now_ns);
        let band = self.prio2band[(pkt.priority & 15) as usize];
        if self.band_pkt_count[band as usize] >= self.limit {
            self.xs.band_drops[band as usize] += 1;
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        let time_to_send = if pkt.tstamp == Instant::ZERO {
            now_ns
        } else {
            if (pkt.tstamp.as_nanos() as i64) > (now_ns.wrapping_add(self.horizon) as i64) {
                if self.horizon_drop != 0 {
                    self.xs.horizon_drops += 1;
                    sch.stats.dropped();
                    return Enqueued::Dropped;
                }
                self.xs.horizon_caps += 1;
                pkt.tstamp = Instant::from_nanos(now_ns.wrapping_add(self.horizon));
            }
            pkt.tstamp.as_nanos()
        };
        pkt.enqueued_at = now;
        let len = pkt.len;
        let seq = self.next_seq();
        match self.classify(sch, &mut pkt, time_to_send, now) {
            None => {
                self.internal_qlen += 1;
                self.internal.add(Item { time_to_send, band, pkt }, seq);
            }
            Some(idx) => {
                if self.flow(idx).qlen >= self.flow_plimit {
                    self.xs.flows_plimit += 1;
                    sch.stats.dropped();
                    return Enqueued::Dropped;
                }
                if let Link::Detached(age) = self.flow(idx).link {
                    // Linked on the band the flow last had (0 for a new flow), before
                    // f->band is updated below — as the kernel does.
                    self.add_tail(idx, Which::New);
                    let (quantum, delay) = (self.quantum, self.flow_refill_delay as u64);
                    if time_after(now.jiffies(), age.wrapping_add(delay)) {
                        let f = self.flow_mut(idx);
                        f.credit = (f.credit as u32).max(quantum) as i32;
                    }
                }
                let f = self.flow_mut(idx);
                f.band = band;
                let was_empty = f.qlen == 0;
                f.qlen += 1;
                f.q.add(Item { time_to_send, band, pkt }, seq);
                self.band_pkt_count[band as usize] += 1;
                if was_empty {
                    self.inactive_flows -= 1;
                }
            }
        }
        sch.stats.queued(len);
        Enqueued::Success
    }

    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.dequeue_fq(sch, now)
    }

    /// `qdisc_peek_dequeued`: dequeue (pacing state and bstats move) and park.
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        peek_dequeued(self, sch, now)
    }

    /// Mirrors `fq_reset` (with the stable fix that also zeroes band_pkt_count).
    /// Flows are freed without counting as gc; band credits, the unthrottle EWMA and
    /// `time_next_delayed_flow` are left as they are, as in the kernel.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.last_now = self.last_now.max(now.as_nanos());
        self.internal.drain().for_each(drop);
        self.internal_qlen = 0;
        for b in self.buckets.iter_mut() {
            *b = FlowBucket::default();
        }
        self.slab.clear();
        self.free.clear();
        for b in self.bands.iter_mut() {
            b.new_flows.clear();
            b.old_flows.clear();
        }
        self.band_pkt_count = [0; 3];
        self.delayed.clear();
        self.flows = 0;
        self.inactive_flows = 0;
        self.throttled_flows = 0;
        self.watchdog = None;
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.apply(sch, opts.of()?, now)
    }

    /// What `fq_dump` sends, printed as q_fq.c `fq_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        out.uint("flow_limit", format_args!("flow_limit {}p ", self.flow_plimit), self.flow_plimit as u64);
        let buckets = 1u64 << self.fq_trees_log;
        out.uint("buckets", format_args!("buckets {buckets} "), buckets);
        out.uint("orphan_mask", format_args!("orphan_mask {} ", self.orphan_mask), self.orphan_mask as u64);
        if !self.rate_enable {
            out.boolean("pacing", format_args!("nopacing "), false);
        }
        out.uint("bands", format_args!("bands {FQ_BANDS} "), FQ_BANDS as u64);
        out.open_array("priomap ", "priomap ");
        for &b in &self.prio2band {
            out.array_uint(format_args!("{b} "), b as u64);
        }
        out.close_array("");
        out.open_array("weights ", "weights ");
        for b in &self.bands {
            // print_uint of an int: JSON shows it as unsigned.
            out.array_uint(format_args!("{} ", b.quantum), b.quantum as u32 as u64);
        }
        out.close_array("");
        out.size("quantum", "quantum ", self.quantum, " ");
        out.size("initial_quantum", "initial_quantum ", self.initial_quantum, " ");
        let maxrate = self.flow_max_rate.min(u32::MAX as u64);
        if maxrate != u32::MAX as u64 {
            out.rate("maxrate", "maxrate ", maxrate, " ");
        }
        if self.low_rate_threshold != 0 {
            out.rate("low_rate_threshold", "low_rate_threshold ", self.low_rate_threshold as u64, " ");
        }
        let refill = jiffies_to_usecs(self.flow_refill_delay as u64);
        out.uint("refill_delay", format_args!("refill_delay {} ", units::fmt_time(refill)), refill as u64);
        let ce = (self.ce_threshold / NSEC_PER_USEC) as u32;
        if ce != u32::MAX {
            out.uint("ce_threshold", format_args!("ce_threshold {} ", units::fmt_time(ce)), ce as u64);
        }
        let slack = self.timer_slack;
        out.uint("timer_slack", format_args!("timer_slack {} ", units::fmt_time64(slack as i64)), slack as u64);
        let horizon = (self.horizon / NSEC_PER_USEC) as u32;
        out.uint("horizon", format_args!("horizon {} ", units::fmt_time(horizon)), horizon as u64);
        if self.horizon_drop == 0 {
            out.null("horizon_cap", format_args!("horizon_cap "));
        } else {
            out.null("horizon_drop", format_args!("horizon_drop "));
        }
        if HAS_OFFLOAD_HORIZON {
            out.uint("offload_horizon", format_args!("offload_horizon {} ", units::fmt_time(0)), 0);
        }
    }

    /// What `fq_dump_stats` sends, printed as q_fq.c `fq_print_xstats` prints it.
    fn dump_xstats(&self, out: &mut Out) {
        let x = &self.xs;
        out.uint("flows", format_args!("  flows {}", self.flows), self.flows as u64);
        out.uint("inactive", format_args!(" (inactive {}", self.inactive_flows), self.inactive_flows as u64);
        out.uint("throttled", format_args!(" throttled {})", self.throttled_flows), self.throttled_flows as u64);
        for (i, c) in self.band_pkt_count.iter().enumerate() {
            out.uint(&format!("band{i}_pkts"), format_args!(" band{i}_pkts {c}"), *c as u64);
        }
        if self.time_next_delayed_flow != u64::MAX {
            let d =
                self.time_next_delayed_flow.wrapping_add(self.timer_slack as u64).wrapping_sub(self.last_now) as i64;
            if d > 0 {
                out.uint("next_packet_delay", format_args!(" next_packet_delay {}", units::fmt_time64(d)), d as u64);
            }
        }
        out.nl();
        out.uint("gc", format_args!("  gc {}", x.gc_flows), x.gc_flows);
        out.uint("highprio", format_args!(" highprio 0"), 0);
        if x.fastpath_packets != 0 {
            out.uint("fastpath", format_args!(" fastpath {}", x.fastpath_packets), x.fastpath_packets);
        }
        out.uint("throttled", format_args!(" throttled {}", x.throttled), x.throttled);
        let lat = self.unthrottle_latency_ns.min(u32::MAX as u64);
        if lat != 0 {
            out.uint("latency", format_args!(" latency {}", units::fmt_time64(lat as i64)), lat);
        }
        if x.ce_mark != 0 {
            out.uint("ce_mark", format_args!(" ce_mark {}", x.ce_mark), x.ce_mark);
        }
        if x.flows_plimit != 0 {
            out.uint("flows_plimit", format_args!(" flows_plimit {}", x.flows_plimit), x.flows_plimit);
        }
        if x.pkts_too_long != 0
            || x.allocation_errors != 0
            || x.horizon_drops != 0
            || x.horizon_caps != 0
            || x.band_drops.iter().any(|&d| d != 0)
        {
            out.nl();
            if x.pkts_too_long != 0 {
                out.uint("pkts_too_long", format_args!(" pkts_too_long {}", x.pkts_too_long), x.pkts_too_long);
            }
            if x.allocation_errors != 0 {
                out.uint("alloc_errors", format_args!(" alloc_errors {}", x.allocation_errors), x.allocation_errors);
            }
            if x.horizon_drops != 0 {
                out.uint("horizon_drops", format_args!(" horizon_drops {}", x.horizon_drops), x.horizon_drops);
            }
            if x.horizon_caps != 0 {
                out.uint("horizon_caps", format_args!("  horizon_caps {}", x.horizon_caps), x.horizon_caps);
            }
            for (i, d) in x.band_drops.iter().enumerate() {
                if *d != 0 {
                    out.uint(&format!("band{i}_drops"), format_args!(" band{i}_drops {d}"), *d);
                }
            }
        }
    }

    fn watchdog(&self, sch: &Sch) -> Option<Instant> {
        if sch.stats.qlen == 0 {
            None
        } else {
            self.watchdog
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Socket;
    use crate::qdisc::Node;
    use crate::stats::Reduce;
    use crate::testing::{argv, dev, held, t};
    use crate::tree::KernelVersion;
    use std::sync::Arc;

    const MS: u64 = 1_000_000;
    fn p(s: &str) -> Result<FqOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn fq(s: &str) -> Node<Fq> {
        held(Fq::new(&p(s).unwrap(), &dev(), 0x80010000, t(0)).unwrap())
    }
    /// An orphan (socket-less) packet of flow hash `h`.
    fn op(id: u64, len: u32, h: u32) -> Packet {
        Packet::new(id, len).with_hash(h)
    }
    /// A connected socket; `tcp == false` with a max pacing rate refuses the fast path.
    fn sock(id: u64, rate: u64, tcp: bool) -> Arc<Socket> {
        Arc::new(
            Socket {
                id,
                hash: 77,
                max_pacing_rate: if tcp { u64::MAX } else { rate },
                state: SockState::Connected,
                tcp,
                ..Default::default()
            }
            .with_pacing_rate(rate),
        )
    }
    fn sp(id: u64, len: u32, s: &Arc<Socket>) -> Packet {
        Packet::new(id, len).with_socket(s.clone())
    }
    fn deq_id(q: &mut Node<Fq>, now: u64) -> Option<u64> {
        q.dequeue(t(now)).packet().map(|p| p.id)
    }
    fn drain(q: &mut Node<Fq>, now: u64) -> Vec<u64> {
        std::iter::from_fn(|| deq_id(q, now)).collect()
    }
    fn show(q: &Fq, json: bool) -> String {
        let mut out = if json { Out::json(false) } else { Out::text() };
        out.open_object(None);
        q.dump(&mut out, &dev());
        out.close_object();
        out.into_string()
    }
    fn xstats(q: &Fq, json: bool) -> String {
        let mut out = if json { Out::json(false) } else { Out::text() };
        out.open_object(None);
        q.dump_xstats(&mut out);
        out.close_object();
        out.into_string()
    }
    /// Every priority maps to band 0 (keeps DRR tests to one band).
    const ONE_BAND: &str = "bands 3 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";

    // ---- scheduling ------------------------------------------------------------------

    #[test]
    fn drr_order_with_quantum() {
        // maxrate disables the fast path; nopacing keeps time out of it.
        let mut q = fq(&format!("nopacing maxrate 1gbit quantum 1000 initial_quantum 1000 {ONE_BAND}"));
        for (id, h) in [(1, 1), (2, 1), (3, 1), (11, 2), (12, 2), (13, 2)] {
            assert_eq!(q.enqueue(op(id, 600, h), t(0)), Enqueued::Success);
        }
        assert_eq!(q.flow_counts(), (2, 0, 0));
        // A spends 1000 of credit on two packets (to −200), then B; refilled by 1000.
        assert_eq!(drain(&mut q, 0), vec![1, 2, 11, 12, 3, 13]);
        assert_eq!(q.flow_counts(), (2, 2, 0));
        assert_eq!(q.dequeue(t(0)), Dequeued::Empty);
    }

    #[test]
    fn new_flows_go_first() {
        let mut q = fq(&format!("nopacing maxrate 1gbit quantum 1000 initial_quantum 1000 {ONE_BAND}"));
        for id in 1..=6 {
            q.enqueue(op(id, 500, 1), t(0));
        }
        assert_eq!((deq_id(&mut q, 0), deq_id(&mut q, 0), deq_id(&mut q, 0)), (Some(1), Some(2), Some(3)));
        // A is on old_flows now; a new flow C jumps ahead of it, then goes through
        // old_flows once (behind A) before it is detached.
        q.enqueue(op(100, 500, 9), t(0));
        assert_eq!(drain(&mut q, 0), vec![100, 4, 5, 6]);
    }

    #[test]
    fn initial_quantum_burst_then_pacing() {
        // A connected UDP socket paced at 1 MB/s (SO_MAX_PACING_RATE: no fast path).
        let s = sock(7, 1_000_000, false);
        let mut q = fq("");
        for id in 1..=12 {
            q.enqueue(sp(id, 1514, &s), t(0));
        }
        assert_eq!(q.xstats().fastpath_packets, 0);
        // initial_quantum 15140 = 10 packets at once; the 10th empties the credit and
        // sets time_next_packet = quantum 3028 B at 1 MB/s = 3.028 ms.
        assert_eq!(drain(&mut q, 0), (1..=10).collect::<Vec<_>>());
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(3_028_000) });
        assert_eq!(q.watchdog(), Some(t(3_028_000)));
        assert_eq!(q.flow_counts(), (1, 0, 1));
        assert_eq!(q.dequeue(t(3_027_999)), Dequeued::Throttled { until: t(3_028_000) });
        // Refilled by one quantum: two more packets.
        assert_eq!(drain(&mut q, 3_028_000), vec![11, 12]);
        assert_eq!(q.xstats().throttled, 1);
        assert_eq!(q.unthrottle_latency_ns(), 0);
    }

    #[test]
    fn maxrate_paces_orphans_per_quantum() {
        let mut q = fq("maxrate 1mbit");
        for id in 1..=20 {
            q.enqueue(op(id, 1000, 3), t(0));
        }
        // 15140 B of initial credit: 16 packets (the 16th takes it to −860), then
        // max(len, quantum) = 3028 B at 125000 B/s = 24.224 ms.
        assert_eq!(drain(&mut q, 0).len(), 16);
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(24_224_000) });
        // Released 1 ms late: the EWMA learns 1 ms / 8.
        assert_eq!(drain(&mut q, 25_224_000), vec![17, 18, 19]);
        assert_eq!(q.unthrottle_latency_ns(), 125_000);
        // Credit 2168 → 3 packets (to −832); the next wait is shortened by the
        // lateness: 24.224 ms − min(12.112 ms, 1 ms).
        assert_eq!(q.dequeue(t(25_224_000)), Dequeued::Throttled { until: t(25_224_000 + 23_224_000) });
    }

    #[test]
    fn low_rate_threshold_paces_every_packet() {
        let s = sock(9, 50_000, false);
        let mut q = fq("");
        for id in 1..=4 {
            q.enqueue(sp(id, 1000, &s), t(0));
        }
        // Below 550 kbit: credit is zeroed after each packet and the delay is len/rate.
        assert_eq!(deq_id(&mut q, 0), Some(1));
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(20 * MS) });
        assert_eq!(deq_id(&mut q, 20 * MS), Some(2));
        assert_eq!(q.dequeue(t(20 * MS)), Dequeued::Throttled { until: t(40 * MS) });
        // 5 ms late: the next gap is shortened by 5 ms (at most half of it).
        assert_eq!(deq_id(&mut q, 45 * MS), Some(3));
        assert_eq!(q.dequeue(t(45 * MS)), Dequeued::Throttled { until: t(60 * MS) });
        assert_eq!(deq_id(&mut q, 60 * MS), Some(4));
        assert_eq!(q.xstats().throttled, 3);
        assert_eq!(q.xstats().pkts_too_long, 0);
    }

    #[test]
    fn delays_clamped_to_one_second() {
        let s = sock(9, 1000, false); // 1000 B/s: 1514 B would take 1.514 s
        let mut q = fq("");
        q.enqueue(sp(1, 1514, &s), t(0));
        q.enqueue(sp(2, 1514, &s), t(0));
        assert_eq!(deq_id(&mut q, 0), Some(1));
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(1_000_000_000) });
        assert_eq!(q.xstats().pkts_too_long, 1);
    }

    #[test]
    fn flow_limit_drops() {
        let mut q = fq("flow_limit 3 maxrate 1gbit nopacing");
        let r: Vec<_> = (1..=5).map(|id| q.enqueue(op(id, 100, 4), t(0))).collect();
        assert_eq!(r[2..], [Enqueued::Success, Enqueued::Dropped, Enqueued::Dropped]);
        assert_eq!((q.xstats().flows_plimit, q.stats().drops, q.stats().qlen), (2, 2, 3));
        assert_eq!(q.enqueue(op(6, 100, 5), t(0)), Enqueued::Success, "another flow is fine");
        assert!(xstats(&q, false).ends_with(" throttled 0 flows_plimit 2"));
    }

    #[test]
    fn band_limit_drops() {
        let mut q = fq("limit 2 maxrate 1gbit nopacing");
        // priority 0 → band 1, priority 6 → band 0.
        let r: Vec<_> = (1..=3).map(|id| q.enqueue(op(id, 100, id as u32), t(0))).collect();
        assert_eq!(r, [Enqueued::Success, Enqueued::Success, Enqueued::Dropped]);
        assert_eq!(q.enqueue(op(4, 100, 9).with_priority(6), t(0)), Enqueued::Success);
        assert_eq!(q.band_pkt_count(), [1, 2, 0]);
        assert_eq!((q.xstats().band_drops, q.stats().drops), ([0, 1, 0], 1));
        assert_eq!(
            xstats(&q, false),
            "  flows 3 (inactive 0 throttled 0) band0_pkts 1 band1_pkts 2 band2_pkts 0\n  gc 0 highprio 0 throttled 0\n band1_drops 1"
        );
    }

    #[test]
    fn horizon_drop_and_cap() {
        let mut q = fq("horizon 1s");
        let mut pk = op(1, 100, 1);
        pk.tstamp = t(5 * MS + 1_000_000_001);
        assert_eq!(q.enqueue(pk.clone(), t(5 * MS)), Enqueued::Dropped);
        assert_eq!((q.xstats().horizon_drops, q.stats().drops), (1, 1));
        pk.tstamp = t(5 * MS + 1_000_000_000); // exactly at the horizon: accepted
        assert_eq!(q.enqueue(pk.clone(), t(5 * MS)), Enqueued::Success);
        assert_eq!(q.dequeue(t(5 * MS)), Dequeued::Throttled { until: t(1_005_000_000) });

        let mut q = fq("horizon 1s horizon_cap");
        pk.tstamp = t(9_000_000_000);
        assert_eq!(q.enqueue(pk, t(0)), Enqueued::Success);
        assert_eq!(q.xstats().horizon_caps, 1);
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(1_000_000_000) });
        let p = q.dequeue(t(1_000_000_000)).packet().unwrap();
        assert_eq!(p.tstamp, t(1_000_000_000), "the timestamp itself is capped");
        assert!(xstats(&q, false).ends_with("\n  horizon_caps 1"));
    }

    #[test]
    fn edt_timestamps_order_a_flow() {
        let mut q = fq("");
        let at = |id, ts| {
            let mut p = op(id, 100, 1);
            p.tstamp = t(ts);
            p
        };
        for (id, ts) in [(1, 30), (2, 10), (3, 20), (4, 20)] {
            q.enqueue(at(id, ts * MS), t(0));
        }
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(10 * MS) });
        assert_eq!(drain(&mut q, 10 * MS), vec![2]);
        // 5 ms late for the 20 ms packets: EWMA 0 → 625 µs.
        assert_eq!(drain(&mut q, 25 * MS), vec![3, 4]);
        assert_eq!(q.unthrottle_latency_ns(), 625_000);
        assert_eq!(q.dequeue(t(25 * MS)), Dequeued::Throttled { until: t(30 * MS) });
        assert_eq!(drain(&mut q, 30 * MS), vec![1]);
        // On time: the 6.12 EWMA still decays with a zero sample.
        assert_eq!(q.unthrottle_latency_ns(), 625_000 - 78_125);
    }

    #[test]
    fn fast_path_conditions() {
        let mut q = fq("");
        for id in 0..8 {
            q.enqueue(op(id, 100, id as u32), t(0));
        }
        assert_eq!((q.xstats().fastpath_packets, q.flow_counts()), (8, (0, 0, 0)));
        // The ninth finds 8 packets in the fast path queue: a real flow.
        q.enqueue(op(8, 100, 8), t(0));
        assert_eq!((q.xstats().fastpath_packets, q.flow_counts()), (8, (1, 0, 0)));
        // Now a flow is eligible: no fast path even with room.
        assert_eq!(deq_id(&mut q, 0), Some(0));
        q.enqueue(op(9, 100, 9), t(0));
        assert_eq!(q.xstats().fastpath_packets, 8);
        assert_eq!(drain(&mut q, 0), vec![1, 2, 3, 4, 5, 6, 7, 8, 9], "fast path first");

        // A future EDT time, a paced non-TCP socket and maxrate all refuse it; a
        // TCP socket with a max pacing rate does not.
        let mut q = fq("");
        let mut future = op(1, 100, 1);
        future.tstamp = t(MS);
        q.enqueue(future, t(0));
        assert_eq!(q.xstats().fastpath_packets, 0);
        let mut q = fq("");
        q.enqueue(sp(1, 100, &sock(1, 1_000_000, false)), t(0));
        assert_eq!(q.xstats().fastpath_packets, 0);
        let mut q = fq("");
        let tcp = Arc::new(Socket { max_pacing_rate: 1000, ..Socket::clone(&sock(1, 1_000_000, true)) });
        q.enqueue(sp(1, 100, &tcp), t(0));
        assert_eq!(q.xstats().fastpath_packets, 1);
        let mut q = fq("maxrate 10mbit");
        q.enqueue(op(1, 100, 1), t(0));
        assert_eq!(q.xstats().fastpath_packets, 0);
    }

    #[test]
    fn band_wrr_follows_weights() {
        // Band 0 (priority 6) weighs 3× band 1 (priority 0).
        let mut q =
            fq("flow_limit 5000 nopacing maxrate 1gbit quantum 2000 initial_quantum 2000 weights x 49152 16384 16384");
        for i in 0..2000u64 {
            q.enqueue(op(i, 1000, 1).with_priority(6), t(0));
            q.enqueue(op(10_000 + i, 1000, 2), t(0));
        }
        // Let both flows settle on their own band's old list.
        for _ in 0..400 {
            q.dequeue(t(0));
        }
        let (mut b0, mut b1) = (0i64, 0i64);
        for _ in 0..1300 {
            match q.dequeue(t(0)).packet().unwrap().id {
                id if id < 10_000 => b0 += 1,
                _ => b1 += 1,
            }
        }
        assert!((b0 - 3 * b1).abs() <= 70, "band 0 {b0}, band 1 {b1}");
    }

    #[test]
    fn new_flow_is_linked_on_its_previous_band() {
        // fq_enqueue links a detached flow before recording the packet's band, so a
        // brand-new flow (band 0 after allocation) starts on band 0's new list.
        let mut q = fq("nopacing maxrate 1gbit");
        q.enqueue(op(1, 100, 1).with_priority(2), t(0)); // band 2
        assert_eq!(q.bands[0].new_flows.len(), 1);
        assert_eq!(q.bands[2].new_flows.len(), 0);
        assert_eq!(q.band_pkt_count(), [0, 0, 1]);
    }

    #[test]
    fn ce_threshold_marks_late_packets() {
        let mut q = fq("ce_threshold 1ms maxrate 1gbit nopacing");
        let ect = |id, h| {
            let mut p = op(id, 100, h);
            p.tos = 0x02;
            p
        };
        q.enqueue(ect(1, 1), t(0));
        q.enqueue(ect(2, 2), t(0));
        q.enqueue(op(3, 100, 3), t(0)); // Not-ECT
        let p = q.dequeue(t(MS)).packet().unwrap();
        assert_eq!((p.id, p.tos), (1, 0x02), "exactly 1 ms late: not beyond the threshold");
        let p = q.dequeue(t(MS + 1)).packet().unwrap();
        assert_eq!((p.id, p.tos), (2, 0x03));
        let p = q.dequeue(t(MS + 1)).packet().unwrap();
        assert_eq!((p.id, p.tos), (3, 0x00), "Not-ECT is left alone but still counted");
        assert_eq!(q.xstats().ce_mark, 2);
        assert!(xstats(&q, false).contains(" throttled 0 ce_mark 2"));
    }

    #[test]
    fn gc_after_three_seconds_detached() {
        let key = |h: u32| ((h as u64 & 1023) << 1) | 1;
        let a = 1u32;
        let b = (2..1000u32).find(|&h| hash_64(key(h), 1) == hash_64(key(a), 1)).unwrap();
        let c = (2..1000u32).find(|&h| hash_64(key(h), 1) != hash_64(key(a), 1)).unwrap();
        // Flow A alone in its bucket gets detached at jiffy 0; C (other bucket) drives it.
        let setup = || {
            let mut q = fq(&format!("nopacing maxrate 1gbit buckets 2 quantum 1000 initial_quantum 1000 {ONE_BAND}"));
            for id in 1..=3 {
                q.enqueue(op(id, 600, a), t(0));
            }
            // A runs out of credit after two packets and sends the third from old_flows.
            assert_eq!(drain(&mut q, 0), vec![1, 2, 3]);
            // C's second packet is for later: C gets throttled, which lets dequeue reach
            // A on old_flows, find it empty and detach it.
            q.enqueue(op(4, 600, c), t(0));
            let mut later = op(5, 600, c);
            later.tstamp = t(MS);
            q.enqueue(later, t(0));
            assert_eq!(drain(&mut q, 0), vec![4]);
            let ia = q.buckets[hash_64(key(a), 1)].get(key(a)).unwrap();
            assert_eq!(q.flow(ia).link, Link::Detached(1));
            assert_eq!(q.flow_counts(), (2, 1, 1));
            q
        };
        // Age 1: a gc candidate once jiffies > 1 + 3 s; B's lookup passes A.
        let jiffy = NSEC_PER_SEC / HZ;
        let mut q = setup();
        q.enqueue(op(6, 600, b), t((1 + FQ_GC_AGE) * jiffy));
        assert_eq!((q.xstats().gc_flows, q.flow_counts().0), (0, 3));
        let mut q = setup();
        q.enqueue(op(6, 600, b), t((2 + FQ_GC_AGE) * jiffy));
        assert_eq!((q.xstats().gc_flows, q.flow_counts()), (1, (2, 0, 1)));
        assert!(xstats(&q, false).contains("  gc 1 highprio 0"));
        // A's own lookup never frees it.
        let mut q = setup();
        q.enqueue(op(6, 600, a), t(100 * NSEC_PER_SEC));
        assert_eq!((q.xstats().gc_flows, q.flow_counts().0), (0, 2));
    }

    #[test]
    fn refill_delay_tops_up_idle_flows() {
        let mut q = fq(&format!("nopacing maxrate 1gbit quantum 1000 initial_quantum 1000 {ONE_BAND}"));
        let s = sock(5, u64::MAX, true);
        q.enqueue(sp(1, 600, &s), t(0));
        q.enqueue(op(9, 600, 1), t(0));
        assert_eq!(drain(&mut q, 0), vec![1, 9]);
        q.enqueue(op(10, 600, 1), t(0));
        assert_eq!(drain(&mut q, 0), vec![10]);
        q.enqueue(op(11, 600, 1), t(0));
        assert_eq!(drain(&mut q, 0), vec![11]);
        assert_eq!(q.socket_flow_credit(5), Some(400));
        // Detached at jiffy 0; back within refill_delay: credit untouched.
        q.enqueue(sp(2, 600, &s), t(40 * MS));
        assert_eq!(q.socket_flow_credit(5), Some(400));
        assert_eq!(drain(&mut q, 40 * MS), vec![2]);
        assert_eq!(q.socket_flow_credit(5), Some(-200));
        // S is refilled (−200 + 1000) on its way to old_flows and detached at 40 ms.
        q.enqueue(op(12, 600, 1), t(40 * MS));
        assert_eq!(drain(&mut q, 40 * MS), vec![12]);
        q.enqueue(op(13, 600, 1), t(40 * MS));
        assert_eq!(drain(&mut q, 40 * MS), vec![13]);
        assert_eq!(q.socket_flow_credit(5), Some(800));
        // Back after more than refill_delay (10 jiffies): credit = max(credit, quantum).
        q.enqueue(sp(3, 600, &s), t(200 * MS));
        assert_eq!(q.socket_flow_credit(5), Some(1000));
    }

    #[test]
    fn socket_reuse_resets_credit() {
        let mut q = fq("nopacing maxrate 1gbit initial_quantum 5000");
        let s = sock(5, u64::MAX, true);
        q.enqueue(sp(1, 1000, &s), t(0));
        drain(&mut q, 0);
        assert_eq!(q.socket_flow_credit(5), Some(4000));
        let reused = Arc::new(Socket { hash: 78, ..Socket::clone(&s) });
        q.enqueue(sp(2, 1000, &reused), t(0));
        assert_eq!(q.socket_flow_credit(5), Some(5000));
    }

    #[test]
    fn listeners_are_orphaned() {
        let mut q = fq("");
        let l = Arc::new(Socket { state: SockState::Listener, ..Socket::clone(&sock(1, 10, false)) });
        q.enqueue(sp(1, 100, &l), t(0));
        let p = q.dequeue(t(0)).packet().unwrap();
        assert!(p.sk.is_none(), "skb_orphan");
        assert_eq!(q.xstats().fastpath_packets, 1);
    }

    #[test]
    fn peek_parks_and_reset_clears() {
        let mut q = fq("maxrate 1gbit nopacing");
        q.enqueue(op(1, 100, 1), t(0));
        q.enqueue(op(2, 200, 2), t(0));
        assert_eq!(q.peek(t(0)).unwrap().id, 1);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.packets, s.bytes), (2, 300, 1, 100));
        assert_eq!(deq_id(&mut q, 0), Some(1));
        assert_eq!((q.stats().qlen, q.stats().packets), (1, 1));
        q.reset(t(0));
        assert_eq!((q.stats().qlen, q.stats().backlog, q.flow_counts(), q.band_pkt_count()), (0, 0, (0, 0, 0), [0; 3]));
        assert_eq!(q.dequeue(t(0)), Dequeued::Empty);
    }

    /// Random traffic over every path: packets in = out + dropped + queued, bytes too.
    #[test]
    fn conservation() {
        let mut q = fq("limit 20 flow_limit 12 quantum 1514 horizon 50ms ce_threshold 100us buckets 4");
        let socks: Vec<_> = (0..6).map(|i| sock(i, 50_000 + 400_000 * i, i % 2 == 0)).collect();
        let mut seed = 42u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let (mut in_p, mut in_b, mut out_p, mut out_b, mut drop_p, mut drop_b) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let mut now = 0u64;
        for id in 0..20_000u64 {
            now += (rnd() % 300_000) as u64;
            let len = 60 + rnd() % 1455;
            let mut pk = match rnd() % 3 {
                0 => op(id, len, rnd() % 50),
                _ => sp(id, len, &socks[(rnd() % 6) as usize]),
            };
            pk.priority = rnd() % 8;
            if rnd() % 5 == 0 {
                pk.tstamp = t(now + (rnd() % 80) as u64 * MS);
            }
            in_p += 1;
            in_b += len as u64;
            if q.enqueue(pk, t(now)) == Enqueued::Dropped {
                drop_p += 1;
                drop_b += len as u64;
            }
            if rnd() % 4 == 0 {
                q.peek(t(now));
            }
            if rnd() % 997 == 0 {
                // Shrinking the limit trims by dequeueing (sent here, dropped above).
                q.change(&Opts::new(p("limit 10").unwrap()), &dev(), t(now)).unwrap();
                let r = q.take_reduce();
                drop_p += r.pkts as u64;
                drop_b += r.bytes as u64;
                q.change(&Opts::new(p("limit 20").unwrap()), &dev(), t(now)).unwrap();
            }
            loop {
                match q.dequeue(t(now)) {
                    Dequeued::Packet(p) => {
                        out_p += 1;
                        out_b += p.len as u64;
                    }
                    Dequeued::Throttled { until } => {
                        assert!(until.as_nanos() > now);
                        break;
                    }
                    Dequeued::Empty => break,
                }
            }
            let (f, i, th) = q.flow_counts();
            assert!(i + th <= f);
        }
        let s = q.stats().clone();
        assert_eq!(s.drops as u64 + (drop_p - s.drops as u64), drop_p);
        assert_eq!(in_p, out_p + drop_p + s.qlen as u64, "packets");
        assert_eq!(in_b, out_b + drop_b + s.backlog as u64, "bytes");
        // bstats also count the packets the limit trim dequeued.
        assert_eq!(s.packets + s.drops as u64, out_p + drop_p);
        assert_eq!(q.band_pkt_count().iter().sum::<u32>() + q.internal_qlen + q.sch.parked().is_some() as u32, s.qlen);
        let x = q.xstats();
        assert!(x.throttled > 0 && x.ce_mark > 0 && x.flows_plimit > 0 && x.horizon_drops > 0, "{x:?}");
        assert!(x.band_drops.iter().sum::<u64>() > 0 && x.fastpath_packets > 0, "{x:?}");
    }

    // ---- configuration ---------------------------------------------------------------

    #[test]
    fn change_is_not_transactional() {
        // 6.18.44 still refuses quantum 0 (6.12.117 clamps it: quantum_bounds_6_12_117).
        let dev = DevInfo { kernel: KernelVersion::V6_18, ..dev() };
        let mut q = held(Fq::new(&FqOpt::default(), &dev, 0, t(0)).unwrap());
        let e = q.change(&Opts::new(p("limit 200 quantum 0 flow_limit 9").unwrap()), &dev, t(0)).unwrap_err();
        assert_eq!(e.msg, "Error: sch_fq: invalid quantum.\n");
        assert_eq!((q.limit, q.flow_plimit, q.quantum), (200, 9, 3028));
        let e = q.change(&Opts::new(p("buckets 1 limit 300 weights x 20000 20000 20000").unwrap()), &dev, t(0));
        assert_eq!(e.unwrap_err().msg, "RTNETLINK answers: Invalid argument\n");
        assert_eq!((q.limit, q.bands[0].quantum), (300, 9 << 16), "weights skipped after an error");
        let e = q.change(&Opts::new(p("initial_quantum 2147483648 limit 5").unwrap()), &dev, t(0));
        assert_eq!(e.unwrap_err().msg, "RTNETLINK answers: Numerical result out of range\n");
        assert_eq!(q.limit, 300, "policy errors apply nothing");
        let o = FqOpt { weights: Some([20000, 100, 20000]), ..FqOpt::default() };
        assert_eq!(
            q.change(&Opts::new(o), &dev, t(0)).unwrap_err().msg,
            "Error: sch_fq: Weight 100 less that minimum allowed 16384.\n"
        );
    }

    /// 6.12.117 (goldens fq-quantum-bounds, fq-change, fq-errors, fq-params):
    /// `fq_change` clamps quantum to [256, 2^20]; initial_quantum's policy maximum is
    /// 2^20; `fq_init` bounds its MTU-derived defaults.
    #[test]
    fn quantum_bounds_6_12_117() {
        let mut q = fq("");
        let set = |q: &mut Node<Fq>, s: &str| q.change(&Opts::new(p(s).unwrap()), &dev(), t(0));
        for (v, want) in [(0, 256), (1, 256), (255, 256), (256, 256), (3000, 3000), (1 << 20, 1 << 20)] {
            set(&mut q, &format!("quantum {v}")).unwrap();
            assert_eq!(q.quantum, want, "quantum {v}");
        }
        for v in [1048577u32, 2000000, u32::MAX] {
            set(&mut q, "quantum 3000 limit 7").unwrap();
            set(&mut q, &format!("quantum {v}")).unwrap();
            assert_eq!(q.quantum, 1 << 20, "quantum {v}");
        }
        set(&mut q, "initial_quantum 1048576").unwrap();
        assert_eq!(q.initial_quantum, 1 << 20);
        set(&mut q, "initial_quantum 0").unwrap();
        assert_eq!(q.initial_quantum, 0);
        for v in [1048577u32, 2147483647, u32::MAX] {
            let e = set(&mut q, &format!("limit 9 quantum 100 initial_quantum {v}")).unwrap_err();
            assert_eq!(e, TcError { msg: "RTNETLINK answers: Numerical result out of range\n".into(), code: 2 });
            assert_eq!(
                (q.limit, q.quantum, q.initial_quantum),
                (7, 1 << 20, 0),
                "initial_quantum {v}: nothing applied"
            );
        }
        // fq_init: quantum = clamp(2 * mtu, 256, 2^20), initial_quantum = min(10 * mtu, 2^20).
        let q = Fq::new(&FqOpt::default(), &DevInfo { mtu: 68, ..dev() }, 0, t(0)).unwrap();
        assert_eq!((q.quantum, q.initial_quantum), (256, 820));
        let q = Fq::new(&FqOpt::default(), &DevInfo { mtu: 65535, ..dev() }, 0, t(0)).unwrap();
        assert_eq!((q.quantum, q.initial_quantum), (131098, 655490));
        let q = Fq::new(&FqOpt::default(), &DevInfo { mtu: 200_000, ..dev() }, 0, t(0)).unwrap();
        assert_eq!((q.quantum, q.initial_quantum), (400028, 1 << 20));
        let q = Fq::new(&FqOpt::default(), &DevInfo { mtu: 1 << 20, ..dev() }, 0, t(0)).unwrap();
        assert_eq!((q.quantum, q.initial_quantum), (1 << 20, 1 << 20));
    }

    /// 6.18.44 (the CI host; its sch_fq.c predates the bounds): quantum 0 and > 2^20
    /// are refused, initial_quantum goes up to INT_MAX, fq_init takes 2 and 10 MTUs.
    #[test]
    fn quantum_bounds_not_in_6_18_44() {
        let dev = DevInfo { kernel: KernelVersion::V6_18, ..dev() };
        let mut q = held(Fq::new(&FqOpt::default(), &dev, 0, t(0)).unwrap());
        let mut set = |s: &str| q.change(&Opts::new(p(s).unwrap()), &dev, t(0));
        for v in [0u32, 1048577, u32::MAX] {
            assert_eq!(set(&format!("quantum {v}")).unwrap_err().msg, "Error: sch_fq: invalid quantum.\n");
        }
        set("quantum 1").unwrap();
        set("initial_quantum 2147483647").unwrap();
        let e = set("initial_quantum 2147483648").unwrap_err();
        assert_eq!(e.msg, "RTNETLINK answers: Numerical result out of range\n");
        assert_eq!((q.quantum, q.initial_quantum), (1, 2147483647));
        let q = Fq::new(&FqOpt::default(), &DevInfo { mtu: 68, ..dev.clone() }, 0, t(0)).unwrap();
        assert_eq!((q.quantum, q.initial_quantum), (164, 820));
        let q = Fq::new(&FqOpt::default(), &DevInfo { mtu: 200_000, ..dev }, 0, t(0)).unwrap();
        assert_eq!((q.quantum, q.initial_quantum), (400028, 2000140));
    }

    #[test]
    fn change_trims_to_limit_by_dequeueing() {
        let mut q = fq("maxrate 1gbit nopacing");
        for id in 0..6 {
            q.enqueue(op(id, 100, id as u32), t(0));
        }
        q.change(&Opts::new(p("limit 2").unwrap()), &dev(), t(0)).unwrap();
        let s = q.stats();
        // The kernel trims with fq_dequeue: the packets show up as sent here and as
        // drops in the parents (qdisc_tree_reduce_backlog).
        assert_eq!((s.qlen, s.backlog, s.packets, s.drops), (2, 200, 4, 0));
        assert_eq!(q.take_reduce(), Reduce::new(4, 400));
    }

    #[test]
    fn buckets_change_rehashes() {
        let mut q = fq("maxrate 1gbit nopacing");
        for id in 0..20 {
            q.enqueue(op(id, 100, id as u32), t(0));
        }
        q.change(&Opts::new(p("buckets 16").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.buckets(), q.flow_counts().0), (16, 20));
        assert_eq!(drain(&mut q, 0).len(), 20);
    }

    #[test]
    fn refill_delay_is_kept_in_jiffies() {
        // HZ=250: 4 ms jiffies, rounded up.
        assert_eq!(usecs_to_jiffies(1), 1);
        assert_eq!(usecs_to_jiffies(50_000), 13);
        assert_eq!(jiffies_to_usecs(13), 52_000);
        assert_eq!(usecs_to_jiffies(u32::MAX), 0xFFFF_FFFE);
        assert_eq!(jiffies_to_usecs(0xFFFF_FFFE), 4_294_959_296);
    }

    // ---- tc side -----------------------------------------------------------------------

    #[test]
    fn parse_all_keywords() {
        let o = p("limit 5000 flow_limit 50 quantum 1514 initial_quantum 20000 maxrate 100mbit buckets 256 nopacing \
                   refill_delay 50ms low_rate_threshold 1mbit orphan_mask 511 timer_slack 20us ce_threshold 5ms \
                   horizon 2s horizon_cap bands 3 priomap 0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 weights 0 100000 50000 16384 \
                   defrate 1mbit offload_horizon 1ms")
        .unwrap();
        assert_eq!(
            o,
            FqOpt {
                limit: Some(5000),
                flow_limit: Some(50),
                quantum: Some(1514),
                initial_quantum: Some(20000),
                pacing: Some(0),
                maxrate: Some(12_500_000),
                defrate: Some(125_000),
                low_rate_threshold: Some(125_000),
                buckets_log: Some(8),
                refill_delay: Some(50_000),
                orphan_mask: Some(511),
                ce_threshold: Some(5000),
                timer_slack: Some(20_000),
                horizon: Some(2_000_000),
                horizon_drop: Some(0),
                priomap: Some((3, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0])),
                weights: Some([100_000, 50_000, 16384]),
                offload_horizon: Some(1000),
            }
        );
        assert_eq!(p("buckets 1000").unwrap().buckets_log, Some(10));
        assert_eq!(p("buckets 1").unwrap().buckets_log, Some(0));
        assert_eq!(p("buckets 0").unwrap().buckets_log, None);
        assert_eq!(p("buckets 4294967295").unwrap().buckets_log, Some(32));
        assert_eq!(p("limit 0x10 flow_limit 010").unwrap().flow_limit, Some(8));
    }

    #[test]
    fn parse_errors_as_q_fq() {
        let e = |s: &str| p(s).unwrap_err();
        assert_eq!(e("limit"), TcError::incomplete());
        assert_eq!(e("limit -1").msg, "Illegal \"limit\"\n");
        assert_eq!(e("orphan_mask q").msg, "Illegal \"initial_quantum\"\n");
        assert_eq!(e("maxrate 100gbit").msg, "Illegal \"maxrate\"\n");
        assert_eq!(e("timer_slack 5s").msg, "Illegal (out of range) \"timer_slack\"\n");
        assert_eq!(e("bands 4").msg, "\"bands\" must be 3\n");
        assert_eq!(e("bands 3"), TcError::incomplete());
        assert_eq!(e("bands 3 prio 1").msg, "\"priomap\" expected\n");
        assert_eq!(e("bands 3 priomap 1 2").msg, "Not enough elements in priomap\n");
        assert_eq!(
            e("bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 x").msg,
            "Illegal \"priomap\" element, number in [0..2] expected\n"
        );
        assert_eq!(e("bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 3").msg, "\"priomap\" element 3 too big\n");
        assert_eq!(e("bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1 bands 3").msg, "Duplicate \"bands\"\n");
        // iproute2 6.15 skips the first weight.
        assert_eq!(e("weights 589824 196608 65536").msg, "Not enough elements in weights\n");
        assert_eq!(e("weights 1 20000 x nopacing").msg, "Illegal \"weights\" element, positive number expected\n");
        assert_eq!(e("weights 0 20000 16383 20000").msg, "\"weight\" element 16383 too small\n");
        assert_eq!(e("weights 0 20000 20000 20000 weights").msg, "Duplicate \"weights\"\n");
        assert_eq!(e("weights"), TcError::incomplete());
        assert_eq!(e("help").msg, USAGE);
        assert_eq!(e("foo").msg, format!("What is \"foo\"?\n{USAGE}"));
        assert_eq!(e("foo").code, 1);
    }

    // ---- printing ----------------------------------------------------------------------

    #[test]
    fn default_dump() {
        let q = fq("");
        assert_eq!(
            show(&q, false),
            "limit 10000p flow_limit 100p buckets 1024 orphan_mask 1023 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1 \
             weights 589824 196608 65536 quantum 3028b initial_quantum 15140b low_rate_threshold 550Kbit \
             refill_delay 40ms timer_slack 10us horizon 10s horizon_drop "
        );
        assert_eq!(
            show(&q, true),
            r#"{"limit":10000,"flow_limit":100,"buckets":1024,"orphan_mask":1023,"bands":3,"priomap ":[1,2,2,2,1,2,0,0,1,1,1,1,1,1,1,1],"weights ":[589824,196608,65536],"quantum":3028,"initial_quantum":15140,"low_rate_threshold":68750,"refill_delay":40000,"timer_slack":10000,"horizon":10000000,"horizon_drop":null}"#
        );
        assert_eq!(
            xstats(&q, false),
            "  flows 0 (inactive 0 throttled 0) band0_pkts 0 band1_pkts 0 band2_pkts 0\n  gc 0 highprio 0 throttled 0"
        );
        assert_eq!(
            xstats(&q, true),
            r#"{"flows":0,"inactive":0,"throttled":0,"band0_pkts":0,"band1_pkts":0,"band2_pkts":0,"gc":0,"highprio":0,"throttled":0}"#
        );
        let jumbo = DevInfo { mtu: 9000, ..dev() };
        let q = Fq::new(&FqOpt::default(), &jumbo, 0, t(0)).unwrap();
        assert!(show(&q, false).contains(" quantum 18028b initial_quantum 90140b "));
    }

    #[test]
    fn non_default_dump() {
        let q = fq("limit 5000 flow_limit 50 quantum 1514 initial_quantum 20000 maxrate 100mbit buckets 256 nopacing \
                    refill_delay 50ms low_rate_threshold 1mbit orphan_mask 511 timer_slack 20us ce_threshold 5ms \
                    horizon 2s horizon_cap bands 3 priomap 0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 weights 0 100000 50000 16384");
        assert_eq!(
            show(&q, false),
            "limit 5000p flow_limit 50p buckets 256 orphan_mask 511 nopacing bands 3 priomap 0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 \
             weights 100000 50000 16384 quantum 1514b initial_quantum 20000b maxrate 100Mbit low_rate_threshold 1Mbit \
             refill_delay 52ms ce_threshold 5ms timer_slack 20us horizon 2s horizon_cap "
        );
        assert_eq!(
            show(&q, true),
            r#"{"limit":5000,"flow_limit":50,"buckets":256,"orphan_mask":511,"pacing":false,"bands":3,"priomap ":[0,1,2,0,1,2,0,1,2,0,1,2,0,1,2,0],"weights ":[100000,50000,16384],"quantum":1514,"initial_quantum":20000,"maxrate":12500000,"low_rate_threshold":125000,"refill_delay":52000,"ce_threshold":5000,"timer_slack":20000,"horizon":2000000,"horizon_cap":null}"#
        );
        let q = fq("low_rate_threshold 0 refill_delay 0 quantum 4096 timer_slack 0 horizon 0 ce_threshold 0");
        assert!(show(&q, false).contains(
            " quantum 4Kb initial_quantum 15140b refill_delay 0us ce_threshold 0us timer_slack 0ns horizon 0us "
        ));
    }

    #[test]
    fn busy_xstats() {
        let s = sock(7, 1_000_000, false);
        let mut q = fq("");
        q.enqueue(op(100, 100, 1), t(0)); // fast path
        for id in 1..=12 {
            q.enqueue(sp(id, 1514, &s), t(0));
        }
        drain(&mut q, 0);
        // next_packet_delay = 3.028 ms + 10 µs of slack − now.
        assert_eq!(
            xstats(&q, false),
            "  flows 1 (inactive 0 throttled 1) band0_pkts 0 band1_pkts 2 band2_pkts 0 next_packet_delay 3.04ms\n  \
             gc 0 highprio 0 fastpath 1 throttled 1"
        );
        drain(&mut q, 4 * MS);
        assert_eq!(
            xstats(&q, true),
            r#"{"flows":1,"inactive":1,"throttled":0,"band0_pkts":0,"band1_pkts":0,"band2_pkts":0,"gc":0,"highprio":0,"fastpath":1,"throttled":1,"latency":121500}"#
        );
        assert!(xstats(&q, false).ends_with(" throttled 1 latency 122us"));
    }

    #[test]
    fn flow_struct_size() {
        eprintln!("size_of::<Flow>() = {}", std::mem::size_of::<Flow>());
        assert!(std::mem::size_of::<Flow>() <= 112);
    }
}
