//! fq_codel — Fair Queuing with CoDel. Mirrors net/sched/sch_fq_codel.c (kernel
//! side) and tc/q_fq_codel.c (iproute2 side); §10 of docs/kernel-notes.md, RFC 8290.
//!
//! Theory: packets are hashed into `flows` buckets (stochastically: several flows
//! may share one). Each bucket is a FIFO with its own CoDel state
//! ([`super::codel`]); CoDel's "more than one MTU queued" test looks at the whole
//! qdisc's backlog. Buckets with packets sit on one of two round-robin lists:
//! a bucket that becomes active joins **new_flows** with a deficit of one
//! `quantum`, and new flows are always served before **old_flows**, which gives
//! sparse flows (DNS, ACKs, the first packets of a connection) priority. Service
//! is deficit round robin: a bucket sends while its deficit is positive, then gets
//! another quantum and moves to the tail of old_flows. A bucket found empty leaves
//! the lists — except that an emptied *new* bucket first goes to old_flows when
//! old_flows is non-empty, so new flows cannot starve old ones by coming and going.
//!
//! When the qdisc holds more than `limit` packets or `memory_limit` bytes of skb
//! truesize, enqueue drops from the head of the fattest bucket (largest byte
//! backlog, first one on ties): up to `drop_batch` packets or until half its
//! backlog is gone, and tells that bucket's CoDel to be harsher (`count` += drops).

use super::codel::{
    codel_dequeue, codel_mtu, codel_time_to_us, drop_next_us, print_drop_next, print_time_opt, reciprocal_scale,
    us_to_codel, CodelParams, CodelQueue, CodelStats, CodelVars, CODEL_DISABLED_THRESHOLD,
};
use crate::packet::Packet;
use crate::qdisc::{
    dequeue_internal, peek_dequeued, tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts,
    Parse, Qdisc, Sch,
};
use crate::stats::Stats;
use crate::tc::{units, Args, Out, TcError};
use crate::time::Instant;

/// FQ_CODEL_QUANTUM_MAX.
pub const FQ_CODEL_QUANTUM_MAX: u32 = 1 << 20;
/// Default `limit` (packets).
pub const DEFAULT_LIMIT: u32 = 10 * 1024;
/// Default number of buckets.
pub const DEFAULT_FLOWS: u32 = 1024;
/// Default `memory_limit`: 32 MiB on x86_64 (the build Debian's 6.12 kernel is);
/// other architectures' kernels use 4 MiB.
pub const DEFAULT_MEMORY_LIMIT: u32 = 32 << 20;
/// Default `drop_batch`.
pub const DEFAULT_DROP_BATCH: u32 = 64;

/// What tc sends for fq_codel: TCA_OPTIONS is always sent, each attribute only
/// when given (limit/flows/quantum/target/interval/drop_batch only when non-zero,
/// ce_threshold and memory_limit unless ~0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FqCodelOpt {
    /// TCA_FQ_CODEL_LIMIT, packets.
    pub limit: Option<u32>,
    /// TCA_FQ_CODEL_FLOWS.
    pub flows: Option<u32>,
    /// TCA_FQ_CODEL_QUANTUM, bytes.
    pub quantum: Option<u32>,
    /// TCA_FQ_CODEL_TARGET, µs.
    pub target: Option<u32>,
    /// TCA_FQ_CODEL_INTERVAL, µs.
    pub interval: Option<u32>,
    /// TCA_FQ_CODEL_ECN.
    pub ecn: Option<u32>,
    /// TCA_FQ_CODEL_CE_THRESHOLD, µs.
    pub ce_threshold: Option<u32>,
    /// TCA_FQ_CODEL_CE_THRESHOLD_SELECTOR and _MASK: (value, mask).
    pub ce_threshold_selector: Option<(u8, u8)>,
    /// TCA_FQ_CODEL_MEMORY_LIMIT, bytes.
    pub memory_limit: Option<u32>,
    /// TCA_FQ_CODEL_DROP_BATCH_SIZE, packets.
    pub drop_batch: Option<u32>,
}

/// q_fq_codel.c `explain` (the continuation lines carry no indentation: the tabs
/// in the source sit outside the string literals).
const USAGE: &str = "Usage: ... fq_codel\t[ limit PACKETS ] [ flows NUMBER ]\n\
[ memory_limit BYTES ]\n\
[ target TIME ] [ interval TIME ]\n\
[ quantum BYTES ] [ [no]ecn ]\n\
[ ce_threshold TIME ]\n\
[ ce_threshold_selector VALUE/MASK ]\n\
[ drop_batch SIZE ]\n";

/// iproute2 `get_u8(…, 0)`.
fn get_u8(s: &str) -> Option<u8> {
    units::parse_c_integer(s).and_then(|v| u8::try_from(v).ok())
}

/// tc side: mirrors `fq_codel_parse_opt` in tc/q_fq_codel.c (keywords matched exactly).
pub fn parse(args: &mut Args) -> Result<FqCodelOpt, TcError> {
    let (mut limit, mut flows, mut quantum, mut drop_batch) = (0u32, 0u32, 0u32, 0u32);
    let (mut target, mut interval) = (0u32, 0u32);
    let mut ce_threshold = u32::MAX;
    let mut memory = u32::MAX;
    let (mut sel, mut mask) = (0xFFu8, 0u8);
    let mut ecn: Option<u32> = None;
    let ill = |w: &str| TcError::tc(format!("Illegal \"{w}\"\n"));
    while let Some(a) = args.next() {
        match a {
            "limit" => limit = units::get_u32(args.value()?).ok_or_else(|| ill("limit"))?,
            "flows" => flows = units::get_u32(args.value()?).ok_or_else(|| ill("flows"))?,
            "quantum" => quantum = units::get_u32(args.value()?).ok_or_else(|| ill("quantum"))?,
            "drop_batch" => drop_batch = units::get_u32(args.value()?).ok_or_else(|| ill("drop_batch"))?,
            "target" => target = units::get_time(args.value()?).ok_or_else(|| ill("target"))?,
            "ce_threshold" => ce_threshold = units::get_time(args.value()?).ok_or_else(|| ill("ce_threshold"))?,
            "ce_threshold_selector" => {
                let v = args.value()?;
                let Some((value, m)) = v.split_once('/') else {
                    return Err(TcError::tc("Missing mask for \"ce_threshold_selector\"\n"));
                };
                mask = get_u8(m).ok_or_else(|| TcError::tc("Illegal mask for \"ce_threshold_selector\"\n"))?;
                sel = get_u8(value).ok_or_else(|| ill("ce_threshold_selector"))?;
            }
            "memory_limit" => memory = units::get_size(args.value()?).ok_or_else(|| ill("memory_limit"))?,
            "interval" => interval = units::get_time(args.value()?).ok_or_else(|| ill("interval"))?,
            "ecn" => ecn = Some(1),
            "noecn" => ecn = Some(0),
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    let nz = |v: u32| (v != 0).then_some(v);
    Ok(FqCodelOpt {
        limit: nz(limit),
        flows: nz(flows),
        quantum: nz(quantum),
        target: nz(target),
        interval: nz(interval),
        ecn,
        ce_threshold: (ce_threshold != u32::MAX).then_some(ce_threshold),
        // A selector of 0xff (the "unset" marker) is not sent, whatever the mask.
        ce_threshold_selector: (sel != 0xFF).then_some((sel, mask)),
        memory_limit: (memory != u32::MAX).then_some(memory),
        drop_batch: nz(drop_batch),
    })
}

/// Which round-robin list a bucket is on (`flowchain`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum List {
    #[default]
    None,
    New,
    Old,
}

/// No slot / no flow.
const NIL: u32 = u32::MAX;

/// A bucket's packet FIFO: the head and tail slots of a chain through the
/// qdisc's [`Slab`] (the kernel's `head`/`tail` skb pointers), and the bytes queued
/// (the kernel's `backlogs[]` entry, kept with the flow so both share a line).
#[derive(Clone, Copy)]
struct FlowQueue {
    head: u32,
    tail: u32,
    backlog: u32,
}

/// `struct fq_codel_flow` (48 bytes). Buckets are materialised on first use:
/// [`FqCodel::index`] maps a bucket to its flow, and a bucket never used reads as
/// the all-zero flow the kernel's `kvcalloc` leaves.
#[derive(Clone, Copy)]
struct Flow {
    q: FlowQueue,
    deficit: i32,
    cvars: CodelVars,
    /// The next flow on the same round-robin list (`flowchain.next`).
    next: u32,
    /// The bucket index (0-based; buckets ≤ 65536).
    bucket: u16,
    list: List,
}

impl Flow {
    const EMPTY: Flow = Flow {
        q: FlowQueue { head: NIL, tail: NIL, backlog: 0 },
        deficit: 0,
        cvars: CodelVars {
            count: 0,
            lastcount: 0,
            dropping: false,
            rec_inv_sqrt: 0,
            first_above_time: 0,
            drop_next: 0,
            ldelay: 0,
        },
        next: NIL,
        bucket: 0,
        list: List::None,
    };
}

/// Packet slots kept inline in the qdisc: a leaf of a big htb holds a packet or
/// three, and keeping them in the qdisc's own allocation saves cold lines (and
/// pointer chases) per packet. A vacant slot is `None`: taking a packet out
/// writes only the discriminant.
const INLINE: usize = 4;

/// The slots past the inline ones.
#[derive(Default)]
struct Spill {
    pkts: Vec<Option<Packet>>,
    next: Vec<u32>,
}

/// The packets of all buckets, chained per bucket (`skb->next`): slots
/// `0..INLINE` live in the qdisc, the rest in [`Spill`]; slots are reused
/// last-freed first (a packet dequeued and enqueued again lands in the line it
/// left). A view over the qdisc's fields, which sit in different cache lines.
struct Slab<'a> {
    /// The head of the free list.
    free: &'a mut u32,
    /// The next slot of the same bucket (or of the free list), inline slots.
    next: &'a mut [u32; INLINE],
    pkts: &'a mut [Option<Packet>; INLINE],
    spill: &'a mut Spill,
}

/// The [`Slab`] view of an [`FqCodel`]'s fields (a macro so that the borrows
/// stay disjoint from the flows and counters).
macro_rules! slab {
    ($q:expr) => {
        Slab { free: &mut $q.free, next: &mut $q.next, pkts: &mut $q.pkts, spill: &mut $q.spill }
    };
}

/// The free list of an empty slab: the inline slots in order.
const INLINE_FREE: [u32; INLINE] = {
    let mut n = [NIL; INLINE];
    let mut i = 0;
    while i + 1 < INLINE {
        n[i] = i as u32 + 1;
        i += 1;
    }
    n
};

impl Slab<'_> {
    #[inline]
    fn link(&mut self, s: u32) -> &mut u32 {
        match self.next.get_mut(s as usize) {
            Some(n) => n,
            None => &mut self.spill.next[s as usize - INLINE],
        }
    }
    #[inline]
    fn slot(&mut self, s: u32) -> &mut Option<Packet> {
        match self.pkts.get_mut(s as usize) {
            Some(p) => p,
            None => &mut self.spill.pkts[s as usize - INLINE],
        }
    }
    /// Queue `pkt` stamped `enqueued_at = now`. (Stamped in its slot, not before:
    /// copying a packet right after an 8-byte store into it stalls store forwarding.)
    #[inline]
    fn push_back(&mut self, q: &mut FlowQueue, pkt: Packet, now: Instant) {
        let s = *self.free;
        let s = if s != NIL {
            *self.free = *self.link(s);
            let slot = self.slot(s);
            debug_assert!(slot.is_none(), "a free slot holds no packet");
            // Written without dropping what was there (nothing): the drop would read
            // the slot's line first, a cache miss on a cold leaf.
            std::mem::forget(std::mem::replace(slot, Some(pkt)));
            if let Some(p) = slot {
                p.enqueued_at = now;
            }
            *self.link(s) = NIL;
            s
        } else {
            self.spill.pkts.push(None);
            self.spill.pkts.last_mut().expect("pushed").insert(pkt).enqueued_at = now;
            self.spill.next.push(NIL);
            (INLINE + self.spill.pkts.len() - 1) as u32
        };
        if q.tail == NIL {
            q.head = s;
        } else {
            *self.link(q.tail) = s;
        }
        q.tail = s;
    }
    #[inline]
    fn pop_front(&mut self, q: &mut FlowQueue) -> Option<Packet> {
        let s = q.head;
        if s == NIL {
            return None;
        }
        let free = *self.free;
        let link = self.link(s);
        q.head = *link;
        *link = free;
        *self.free = s;
        if q.head == NIL {
            q.tail = NIL;
        }
        self.slot(s).take()
    }
}

/// Packets in one bucket (walks its chain; dumps and tests only).
fn chain_len(next: &[u32; INLINE], spill: &Spill, q: &FlowQueue) -> usize {
    let (mut n, mut s) = (0, q.head);
    while s != NIL {
        n += 1;
        s = next.get(s as usize).copied().unwrap_or_else(|| spill.next[s as usize - INLINE]);
    }
    n
}

/// Bucket → position in `more` for the buckets used so far beyond the first (whose
/// flow is inline and checked directly): an open-addressing table (linear
/// probing, at most half full, never shrunk: a used bucket keeps its state as it does
/// in the kernel's table), so an instance's memory follows the buckets it has seen
/// rather than `flows` — 10,000 idle-ish fq_codel leaves do not each carry a 4 kB
/// array (and a single-flow instance allocates none). An entry holds position + 1
/// (0: empty); the bucket it stands for is read from the flow itself, which the
/// caller is about to touch anyway.
#[derive(Default)]
struct BucketIndex {
    table: Box<[u32]>,
}

impl BucketIndex {
    /// Home position of `bucket`: Fibonacci hashing, scaled to the (power of two)
    /// table. Buckets picked by `skb->priority` are consecutive, so they are spread.
    #[inline]
    fn home(&self, bucket: usize) -> usize {
        let h = (bucket as u32).wrapping_mul(0x9E37_79B9);
        ((h as u64 * self.table.len() as u64) >> 32) as usize
    }

    #[inline]
    fn get(&self, bucket: usize, flows: &[Flow]) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let mask = self.table.len() - 1;
        let mut i = self.home(bucket);
        loop {
            let e = self.table[i];
            if e == 0 {
                return None;
            }
            let s = e as usize - 1;
            if flows[s].bucket as usize == bucket {
                return Some(s);
            }
            i = (i + 1) & mask;
        }
    }

    /// Record the newest flow (`flows.last()`), growing the table past half full.
    fn push(&mut self, flows: &[Flow]) {
        let n = flows.len();
        if n * 2 > self.table.len() {
            self.table = vec![0u32; (self.table.len() * 2).max(8)].into_boxed_slice();
            for (s, f) in flows[..n - 1].iter().enumerate() {
                self.place(f.bucket as usize, s);
            }
        }
        self.place(flows[n - 1].bucket as usize, n - 1);
    }

    fn place(&mut self, bucket: usize, slot: usize) {
        let mask = self.table.len() - 1;
        let mut i = self.home(bucket);
        while self.table[i] != 0 {
            i = (i + 1) & mask;
        }
        self.table[i] = slot as u32 + 1;
    }

    fn bytes(&self) -> usize {
        self.table.len() * std::mem::size_of::<u32>()
    }
}

/// The flows by slot: slot 0 is stored in the qdisc itself (`first`, beside the
/// other hot fields), slot s ≥ 1 at `more[s - 1]`.
struct FlowsMut<'a> {
    first: &'a mut Flow,
    more: &'a mut [Flow],
}

/// The [`FlowsMut`] view of an [`FqCodel`]'s fields.
macro_rules! flows {
    ($q:expr) => {
        FlowsMut { first: &mut $q.first, more: &mut $q.more }
    };
}

#[inline]
fn flow_mut<'a>(first: &'a mut Flow, more: &'a mut [Flow], s: u32) -> &'a mut Flow {
    match (s as usize).checked_sub(1) {
        None => first,
        Some(i) => &mut more[i],
    }
}

impl FlowsMut<'_> {
    #[inline]
    fn at(&mut self, s: u32) -> &mut Flow {
        flow_mut(self.first, self.more, s)
    }
}

/// A round-robin list of flows (by flow slot), linked through [`Flow::next`].
#[derive(Clone, Copy)]
struct FlowList {
    head: u32,
    tail: u32,
    len: u32,
}

impl FlowList {
    const EMPTY: FlowList = FlowList { head: NIL, tail: NIL, len: 0 };
    #[inline]
    fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }
    fn is_empty(&self) -> bool {
        self.head == NIL
    }
    #[inline]
    fn push_back(&mut self, flows: &mut FlowsMut, i: u32) {
        flows.at(i).next = NIL;
        if self.tail == NIL {
            self.head = i;
        } else {
            flows.at(self.tail).next = i;
        }
        self.tail = i;
        self.len += 1;
    }
    /// Remove the head (which must exist).
    #[inline]
    fn pop_front(&mut self, flows: &mut FlowsMut) {
        self.head = flows.at(self.head).next;
        if self.head == NIL {
            self.tail = NIL;
        }
        self.len -= 1;
    }
    /// The buckets on the list, head first.
    fn buckets(&self, q: &FqCodel) -> Vec<u32> {
        let (mut v, mut i) = (Vec::new(), self.head);
        while i != NIL {
            let f = q.flow_at(i);
            v.push(f.bucket as u32);
            i = f.next;
        }
        v
    }
}

/// The CoDel callbacks over one bucket (`dequeue_func`/`drop_func` in sch_fq_codel.c).
struct Bucket<'a> {
    queue: &'a mut FlowQueue,
    slab: Slab<'a>,
    memory_usage: &'a mut u32,
    stats: &'a mut Stats,
}

impl CodelQueue for Bucket<'_> {
    #[inline]
    fn dequeue(&mut self) -> Option<Packet> {
        // The Option is passed on whole: unwrapping and rewrapping it copies the packet
        // piecewise, and the next whole copy then stalls on store forwarding.
        let p = self.slab.pop_front(self.queue);
        if let Some(p) = &p {
            self.queue.backlog = self.queue.backlog.wrapping_sub(p.len);
            *self.memory_usage = self.memory_usage.wrapping_sub(p.truesize);
            self.stats.unqueued(p.len);
        }
        p
    }
    fn drop(&mut self, pkt: Packet) {
        self.stats.dropped();
        pkt.kfree_skb();
    }
    /// The whole qdisc's backlog.
    fn backlog(&self) -> u32 {
        self.stats.backlog
    }
}

/// `struct fq_codel_sched_data` (the counters are the node's [`Sch`]). Laid out in
/// order (`repr(C)`) so that a packet to a cold instance with one flow and a few
/// packets — each leaf of a big htb — touches few lines, all at fixed offsets from
/// the qdisc (no pointer to chase): what enqueue alone reads, then what both
/// directions touch (the inline slots' links, the first flow), then what dequeue
/// alone reads, so that each direction's fields are one contiguous span (108 and
/// 148 bytes: two to four lines, whatever the allocation's offset in a line); then
/// its packet slot; the rest only dumps, drops, and more flows or packets use. The `layout` test pins this. (Forcing 64-byte alignment, so
/// that the spans and slots start on a line, measured slower both times it was
/// tried: on a round robin over 10,000 leaves the allocator's padding spreads
/// the instances, and hurts more than the saved lines help.)
#[repr(C)]
pub struct FqCodel {
    // enqueue
    /// `sch->limit`, packets.
    limit: u32,
    memory_limit: u32,
    /// The number of buckets (`flows_cnt`).
    flows_cnt: u32,
    /// `sch->handle`, for classification by skb->priority.
    handle: u32,
    /// The last bucket looked up and its flow slot (NIL: none yet): consecutive
    /// packets of one flow skip the index. A slot never moves, so this never goes stale.
    last_bucket: u32,
    last_slot: u32,
    // both
    /// The latest time the qdisc was called with, standing in for `codel_get_time()`
    /// when class xstats compute `drop_next`.
    last_now: Instant,
    memory_usage: u32,
    /// The head of the slab's free list.
    free: u32,
    quantum: u32,
    /// The inline slots' links (see [`Slab`]).
    next: [u32; INLINE],
    /// Flow slot 0 (see [`FlowsMut`]).
    first: Flow,
    // dequeue
    new_flows: FlowList,
    old_flows: FlowList,
    cparams: CodelParams,
    cstats: CodelStats,
    // the rest
    new_flow_count: u32,
    /// The number of flows materialised (slot 0 plus `more`).
    nflows: u32,
    drop_batch_size: u32,
    drop_overlimit: u32,
    drop_overmemory: u32,
    /// TCQ_F_CAN_BYPASS as decided at init.
    bypass: bool,
    pkts: [Option<Packet>; INLINE],
    /// Flow slots 1…, in order of first use.
    more: Vec<Flow>,
    spill: Spill,
    /// Bucket → position in `more`.
    index: BucketIndex,
}

/// q_fq_codel.c always sends TCA_OPTIONS (possibly empty).
pub static OPS: Ops = Ops {
    id: "fq_codel",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(FqCodel::new(c.opts()?.unwrap_or(&FqCodelOpt::default()), c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl FqCodel {
    /// `fq_codel_init`: defaults, `fq_codel_change`, then the bucket table.
    pub fn new(o: &FqCodelOpt, dev: &DevInfo, handle: u32, now: Instant) -> Result<FqCodel, TcError> {
        let mtu = codel_mtu(dev);
        let mut cparams = CodelParams::new(mtu);
        cparams.ecn = true;
        let mut q = FqCodel {
            last_now: now,
            memory_usage: 0,
            free: 0,
            quantum: mtu,
            next: INLINE_FREE,
            first: Flow::EMPTY,
            new_flows: FlowList::EMPTY,
            old_flows: FlowList::EMPTY,
            cparams,
            cstats: CodelStats::default(),
            limit: DEFAULT_LIMIT,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            flows_cnt: 0,
            handle,
            last_bucket: NIL,
            last_slot: NIL,
            nflows: 0,
            new_flow_count: 0,
            drop_batch_size: DEFAULT_DROP_BATCH,
            drop_overlimit: 0,
            drop_overmemory: 0,
            bypass: false,
            pkts: Default::default(),
            more: Vec::new(),
            spill: Spill::default(),
            index: BucketIndex::default(),
        };
        // Nothing is queued yet: the counters are not needed.
        let flows = q.apply(&mut Sch::default(), o, DEFAULT_FLOWS, now)?;
        // All buckets read as zeroed flows; a bucket's state (and, past the first,
        // its index entry) is allocated on its first packet.
        q.flows_cnt = flows;
        q.bypass = q.limit >= 1;
        Ok(q)
    }

    /// Mirrors `fq_codel_change`; returns the bucket count (only settable before
    /// the table exists: afterwards `flows` is refused with EINVAL).
    fn apply(&mut self, sch: &mut Sch, o: &FqCodelOpt, flows_cnt: u32, now: Instant) -> Result<u32, TcError> {
        let mut flows_cnt = flows_cnt;
        if let Some(f) = o.flows {
            if self.flows_cnt != 0 || !(1..=65536).contains(&f) {
                return Err(TcError::invalid());
            }
            flows_cnt = f;
        }
        let quantum = match o.quantum {
            Some(v) => {
                let v = v.max(256);
                if v > FQ_CODEL_QUANTUM_MAX {
                    return Err(TcError::kernel("Invalid quantum"));
                }
                v
            }
            None => 0,
        };
        if let Some(t) = o.target {
            self.cparams.target = us_to_codel(t);
        }
        if let Some(t) = o.ce_threshold {
            self.cparams.ce_threshold = us_to_codel(t);
        }
        if let Some((sel, mask)) = o.ce_threshold_selector {
            self.cparams.ce_threshold_selector = sel;
            self.cparams.ce_threshold_mask = mask;
        }
        if let Some(t) = o.interval {
            self.cparams.interval = us_to_codel(t);
        }
        if let Some(l) = o.limit {
            self.limit = l;
        }
        if let Some(e) = o.ecn {
            self.cparams.ecn = e != 0;
        }
        if quantum != 0 {
            self.quantum = quantum;
        }
        if let Some(b) = o.drop_batch {
            self.drop_batch_size = b.max(1);
        }
        if let Some(m) = o.memory_limit {
            self.memory_limit = m.min(1 << 31);
        }
        // Over the new limits: dequeue (through CoDel, counted as sent!) and free,
        // telling only the parents (`qdisc_dequeue_internal(sch, false)`).
        let (mut n, mut bytes) = (0i32, 0i64);
        while self.flows_cnt != 0 && (sch.stats.qlen > self.limit || self.memory_usage > self.memory_limit) {
            let p = dequeue_internal(self, sch, now).packet();
            let Some(p) = p else { break };
            n += 1;
            bytes += p.len as i64;
            p.kfree_skb();
        }
        sch.reduce(n, bytes);
        Ok(flows_cnt)
    }

    // ---- accessors (tests, simulator) -------------------------------------------

    pub fn flows_cnt(&self) -> u32 {
        self.flows_cnt
    }
    pub fn quantum(&self) -> u32 {
        self.quantum
    }
    pub fn limit(&self) -> u32 {
        self.limit
    }
    pub fn memory_limit(&self) -> u32 {
        self.memory_limit
    }
    pub fn drop_batch(&self) -> u32 {
        self.drop_batch_size
    }
    pub fn params(&self) -> &CodelParams {
        &self.cparams
    }
    pub fn codel_stats(&self) -> &CodelStats {
        &self.cstats
    }
    pub fn memory_usage(&self) -> u32 {
        self.memory_usage
    }
    pub fn drop_overlimit(&self) -> u32 {
        self.drop_overlimit
    }
    pub fn drop_overmemory(&self) -> u32 {
        self.drop_overmemory
    }
    pub fn new_flow_count(&self) -> u32 {
        self.new_flow_count
    }
    /// Bucket indices on new_flows / old_flows, head first.
    pub fn lists(&self) -> (Vec<u32>, Vec<u32>) {
        (self.new_flows.buckets(self), self.old_flows.buckets(self))
    }
    /// (deficit, packets, bytes, CoDel vars) of bucket `idx` (0-based).
    pub fn bucket(&self, idx: usize) -> (i32, usize, u32, CodelVars) {
        let f = self.flow(idx).expect("bucket index in range");
        (f.deficit, self.queued(f), f.q.backlog, f.cvars)
    }
    /// Memory per used bucket, at most: the flow state plus its index entries (the
    /// index is at most a quarter full right after it grows; the kernel's
    /// `struct fq_codel_flow` is 64 bytes plus a 4-byte backlog, for every bucket).
    pub fn bytes_per_flow() -> usize {
        std::mem::size_of::<Flow>() + 4 * std::mem::size_of::<u32>()
    }
    /// Bytes this instance holds: itself (with its first flow and first packet
    /// slots), its other flows, its index and its other packet slots (not what the
    /// packets point to).
    pub fn memory_footprint(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.more.capacity() * std::mem::size_of::<Flow>()
            + self.index.bytes()
            + self.spill.pkts.capacity() * std::mem::size_of::<Option<Packet>>()
            + self.spill.next.capacity() * std::mem::size_of::<u32>()
    }

    /// The materialised flows, in slot order.
    fn flows(&self) -> impl Iterator<Item = &Flow> {
        std::iter::once(&self.first).take(self.nflows.min(1) as usize).chain(&self.more)
    }

    /// The flow in slot `s`.
    fn flow_at(&self, s: u32) -> &Flow {
        match (s as usize).checked_sub(1) {
            None => &self.first,
            Some(i) => &self.more[i],
        }
    }

    /// Packets queued in flow `f` (walks its chain; dumps and tests only).
    fn queued(&self, f: &Flow) -> usize {
        chain_len(&self.next, &self.spill, &f.q)
    }

    /// The slot of bucket `idx`'s flow, if it was ever used.
    fn find_slot(&self, idx: usize) -> Option<u32> {
        if self.nflows > 0 && self.first.bucket as usize == idx {
            return Some(0);
        }
        self.index.get(idx, &self.more).map(|i| i as u32 + 1)
    }

    /// Bucket `idx`'s flow (the zeroed flow if never used), None out of range.
    fn flow(&self, idx: usize) -> Option<&Flow> {
        if idx >= self.flows_cnt as usize {
            return None;
        }
        Some(self.find_slot(idx).map_or(&Flow::EMPTY, |s| self.flow_at(s)))
    }

    /// The flow slot of bucket `idx`, materialising it on first use.
    #[inline]
    fn flow_slot(&mut self, idx: usize) -> u32 {
        if idx as u32 == self.last_bucket {
            return self.last_slot;
        }
        self.lookup_slot(idx)
    }

    fn lookup_slot(&mut self, idx: usize) -> u32 {
        let s = match self.find_slot(idx) {
            Some(s) => s,
            None => self.new_flow_slot(idx),
        };
        self.last_bucket = idx as u32;
        self.last_slot = s;
        s
    }

    #[cold]
    fn new_flow_slot(&mut self, idx: usize) -> u32 {
        let flow = Flow { bucket: idx as u16, ..Flow::EMPTY };
        self.nflows += 1;
        if self.nflows == 1 {
            self.first = flow;
            return 0;
        }
        let n = self.more.len();
        if n == self.more.capacity() {
            // Grow without overshooting the bucket count (memory per flow stays
            // bounded by the flow size).
            let more = n.max(4).min(self.flows_cnt as usize - 1 - n);
            self.more.reserve_exact(more);
        }
        self.more.push(flow);
        self.index.push(&self.more);
        n as u32 + 1
    }

    /// The qdiscs' `*_dequeue_drop`: this call's CoDel drops go to the parents.
    #[inline]
    fn flush_drops(&mut self, sch: &mut Sch) {
        if self.cstats.drop_count != 0 {
            self.cstats.flush_drops(&mut sch.reduce);
        }
    }

    // ---- the algorithm ----------------------------------------------------------

    /// `fq_codel_classify` without filters: the 0-based bucket. A priority whose
    /// major is our handle and whose minor is 1..=flows picks bucket minor − 1
    /// (with handle 0 that includes plain priorities 1..=flows); otherwise
    /// `reciprocal_scale(skb hash, flows)`.
    ///
    /// Filters are not implemented; when they are, they run where the hash is taken:
    /// STOLEN/QUEUED/TRAP consume (success), SHOT drops, a classid minor 1..=flows
    /// picks its bucket, anything else drops with drops+1.
    pub fn classify(&self, pkt: &Packet) -> usize {
        let n = self.flows_cnt;
        let min = tc_h_min(pkt.priority);
        if tc_h_maj(pkt.priority) == self.handle && min > 0 && min <= n {
            return (min - 1) as usize;
        }
        reciprocal_scale(pkt.hash, n) as usize
    }

    /// `fq_codel_drop`: drop from the head of the fattest bucket (first maximum),
    /// up to `max_packets` or until half its backlog is gone; returns its index.
    fn drop_fat(&mut self, sch: &mut Sch, max_packets: u32) -> usize {
        // The first bucket (in bucket order) with the largest backlog; bucket 0
        // when all are empty.
        let (mut maxbacklog, mut idx) = (0u32, 0usize);
        for f in self.flows() {
            let (b, i) = (f.q.backlog, f.bucket as usize);
            if b > maxbacklog || (b == maxbacklog && b != 0 && i < idx) {
                maxbacklog = b;
                idx = i;
            }
        }
        let threshold = maxbacklog >> 1;
        let Some(s) = self.find_slot(idx) else {
            // A never-used bucket: nothing to drop.
            return idx;
        };
        let flow = flow_mut(&mut self.first, &mut self.more, s);
        let mut slab = slab!(self);
        let (mut len, mut mem, mut i) = (0u32, 0u32, 0u32);
        while let Some(p) = slab.pop_front(&mut flow.q) {
            len = len.wrapping_add(p.len);
            mem = mem.wrapping_add(p.truesize);
            i += 1;
            p.kfree_skb();
            if !(i < max_packets && len < threshold) {
                break;
            }
        }
        // Tell CoDel to signal harder on this flow.
        flow.cvars.count = flow.cvars.count.wrapping_add(i);
        flow.q.backlog = flow.q.backlog.wrapping_sub(len);
        self.memory_usage = self.memory_usage.wrapping_sub(mem);
        sch.stats.drops = sch.stats.drops.wrapping_add(i);
        sch.stats.backlog = sch.stats.backlog.wrapping_sub(len);
        sch.stats.qlen = sch.stats.qlen.wrapping_sub(i);
        idx
    }

    /// Take the head flow off new_flows (`from_new`) or old_flows, and put it at
    /// the tail of old_flows if `to_old`.
    #[inline]
    fn leave_list(&mut self, from_new: bool, to_old: bool) {
        let mut flows = flows!(self);
        let list = if from_new { &mut self.new_flows } else { &mut self.old_flows };
        let idx = list.head;
        list.pop_front(&mut flows);
        if to_old {
            self.old_flows.push_back(&mut flows, idx);
        }
    }

    /// `__fq_codel_dequeue`: DRR over new_flows then old_flows, CoDel per bucket;
    /// then `fq_codel_dequeue`'s report of this call's CoDel drops to the parents.
    /// (The answer is built here, not converted by the caller: copying a packet
    /// just written piecewise stalls on store forwarding.)
    fn dequeue_inner(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        loop {
            let (from_new, idx) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(i), _) => (true, i),
                (None, Some(i)) => (false, i),
                (None, None) => {
                    self.flush_drops(sch);
                    return Dequeued::Empty;
                }
            };
            let flow = flow_mut(&mut self.first, &mut self.more, idx);
            if flow.deficit <= 0 {
                flow.deficit = flow.deficit.wrapping_add(self.quantum as i32);
                flow.list = List::Old;
                self.leave_list(from_new, true);
                continue;
            }
            let mut b = Bucket {
                queue: &mut flow.q,
                slab: slab!(self),
                memory_usage: &mut self.memory_usage,
                stats: &mut sch.stats,
            };
            match codel_dequeue(&mut b, &self.cparams, &mut flow.cvars, &mut self.cstats, now) {
                None => {
                    // Force a pass through old_flows so new flows cannot starve them.
                    let to_old = from_new && !self.old_flows.is_empty();
                    flow.list = if to_old { List::Old } else { List::None };
                    self.leave_list(from_new, to_old);
                }
                Some(p) => {
                    sch.stats.sent(&p);
                    flow.deficit = flow.deficit.wrapping_sub(p.len as i32);
                    self.flush_drops(sch);
                    return Dequeued::Packet(p);
                }
            }
        }
    }
}

impl Qdisc for FqCodel {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `fq_codel_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        self.last_now = now;
        let idx = self.classify(&pkt);
        let (len, truesize) = (pkt.len, pkt.truesize);
        let slot = self.flow_slot(idx);
        let flow = flow_mut(&mut self.first, &mut self.more, slot);
        slab!(self).push_back(&mut flow.q, pkt, now);
        flow.q.backlog = flow.q.backlog.wrapping_add(len);
        sch.stats.backlog = sch.stats.backlog.wrapping_add(len);
        if flow.list == List::None {
            flow.list = List::New;
            flow.deficit = self.quantum as i32;
            self.new_flows.push_back(&mut flows!(self), slot);
            self.new_flow_count = self.new_flow_count.wrapping_add(1);
        }
        self.memory_usage = self.memory_usage.wrapping_add(truesize);
        let memory_limited = self.memory_usage > self.memory_limit;
        sch.stats.qlen += 1;
        if sch.stats.qlen <= self.limit && !memory_limited {
            return Enqueued::Success;
        }
        let (prev_backlog, prev_qlen) = (sch.stats.backlog, sch.stats.qlen);
        let ret = self.drop_fat(sch, self.drop_batch_size);
        let dropped = prev_qlen - sch.stats.qlen;
        let dropped_bytes = prev_backlog.wrapping_sub(sch.stats.backlog);
        self.drop_overlimit = self.drop_overlimit.wrapping_add(dropped);
        if memory_limited {
            self.drop_overmemory = self.drop_overmemory.wrapping_add(dropped);
        }
        if ret == idx {
            // Our parents never counted this packet (we answer CN), so they are
            // told one packet and `len` bytes less than what left.
            sch.reduce(dropped as i32 - 1, dropped_bytes as i32 as i64 - len as i64);
            return Enqueued::Congested;
        }
        sch.reduce(dropped as i32, dropped_bytes as i64);
        Enqueued::Success
    }

    /// `fq_codel_dequeue` (+ `fq_codel_dequeue_drop`).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.last_now = now;
        self.dequeue_inner(sch, now)
    }

    /// `fq_codel_peek`: dequeue and park (still counted in qlen/backlog).
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        self.last_now = now;
        peek_dequeued(self, sch, now)
    }

    /// `fq_codel_reset` (+ the generic qdisc_reset): lists and buckets emptied,
    /// CoDel state cleared; deficits and statistics kept.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.last_now = now;
        self.new_flows = FlowList::EMPTY;
        self.old_flows = FlowList::EMPTY;
        let first = std::iter::once(&mut self.first).take(self.nflows.min(1) as usize);
        for f in first.chain(&mut self.more) {
            f.q = FlowQueue { head: NIL, tail: NIL, backlog: 0 };
            f.list = List::None;
            f.cvars = CodelVars::default();
        }
        self.pkts = Default::default();
        self.next = INLINE_FREE;
        self.free = 0;
        self.spill = Spill::default();
        self.memory_usage = 0;
    }

    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        let o = opts.of()?;
        self.last_now = now;
        let n = self.flows_cnt;
        self.apply(sch, o, n, now).map(|_| ())
    }

    /// `fq_codel_dump` printed by q_fq_codel.c `fq_codel_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("limit", format_args!("limit {}p ", self.limit), self.limit as u64);
        let flows = self.flows_cnt as u64;
        out.uint("flows", format_args!("flows {flows} "), flows);
        out.uint("quantum", format_args!("quantum {} ", self.quantum), self.quantum as u64);
        print_time_opt(out, "target", codel_time_to_us(self.cparams.target));
        if self.cparams.ce_threshold != CODEL_DISABLED_THRESHOLD {
            print_time_opt(out, "ce_threshold", codel_time_to_us(self.cparams.ce_threshold));
            let (sel, mask) = (self.cparams.ce_threshold_selector, self.cparams.ce_threshold_mask);
            if sel != 0 || mask != 0 {
                out.uint("ce_threshold_selector", format_args!("ce_threshold_selector {}", c_hash_x(sel)), sel as u64);
                out.uint("ce_threshold_mask", format_args!("/{} ", c_hash_x(mask)), mask as u64);
            }
        }
        print_time_opt(out, "interval", codel_time_to_us(self.cparams.interval));
        out.size("memory_limit", "memory_limit ", self.memory_limit, " ");
        if self.cparams.ecn {
            out.boolean("ecn", format_args!("ecn "), true);
        }
        if self.drop_batch_size != 0 {
            let b = self.drop_batch_size;
            out.uint("drop_batch", format_args!("drop_batch {b} "), b as u64);
        }
    }

    /// `fq_codel_dump_stats` (type QDISC) printed by `fq_codel_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let s = &self.cstats;
        out.uint("maxpacket", format_args!("  maxpacket {}", s.maxpacket), s.maxpacket as u64);
        let d = self.drop_overlimit;
        out.uint("drop_overlimit", format_args!(" drop_overlimit {d}"), d as u64);
        let n = self.new_flow_count;
        out.uint("new_flow_count", format_args!(" new_flow_count {n}"), n as u64);
        out.uint("ecn_mark", format_args!(" ecn_mark {}", s.ecn_mark), s.ecn_mark as u64);
        if s.ce_mark != 0 {
            out.uint("ce_mark", format_args!(" ce_mark {}", s.ce_mark), s.ce_mark as u64);
        }
        if self.memory_usage != 0 {
            let m = self.memory_usage;
            out.uint("memory_used", format_args!(" memory_used {m}"), m as u64);
        }
        if self.drop_overmemory != 0 {
            let m = self.drop_overmemory;
            out.uint("drop_overmemory", format_args!(" drop_overmemory {m}"), m as u64);
        }
        out.nl();
        let (nl, ol) = (self.new_flows.len as u64, self.old_flows.len as u64);
        out.uint("new_flows_len", format_args!("  new_flows_len {nl}"), nl);
        out.uint("old_flows_len", format_args!(" old_flows_len {ol}"), ol);
    }

    fn can_bypass(&self) -> bool {
        self.bypass
    }
    crate::classful!();
}

/// C `printf("%#x", v)`: `0` for zero, else `0x…`.
fn c_hash_x(v: u8) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// The buckets as classes `<handle>:<bucket+1>`: only dumpable (`fq_codel_find`
/// answers "no such class" to everything else, and there are no leaf qdiscs).
impl Classful for FqCodel {
    /// `fq_codel_walk`: buckets on either list (even if momentarily empty), in index order.
    fn class_minors(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.flows().filter(|f| f.list != List::None).map(|f| f.bucket as u32 + 1).collect();
        v.sort_unstable();
        v
    }
    fn find(&self, _minor: u32) -> bool {
        false
    }
    fn graft(
        &mut self,
        _sch: &mut Sch,
        _minor: u32,
        _new: Option<Node>,
        _dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        Err(TcError::kernel("Specified class not found"))
    }
    /// `fq_codel_dump_class_stats`: the bucket's packet count and backlog only.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let f = self.flow((minor as usize).checked_sub(1)?)?;
        Some(Stats { qlen: self.queued(f) as u32, backlog: f.q.backlog, ..Default::default() })
    }
    /// No TCA_STATS_BASIC in fq_codel's class dump.
    fn class_has_basic_stats(&self) -> bool {
        false
    }
    /// Type CLASS xstats: `  deficit <d> count <u> lastcount <u> ldelay <t>[ dropping drop_next [-]<t>]`.
    fn dump_class_xstats(&self, minor: u32, out: &mut Out) {
        let Some(f) = (minor as usize).checked_sub(1).and_then(|i| self.flow(i)) else { return };
        let v = &f.cvars;
        out.int("deficit", format_args!("  deficit {}", f.deficit), f.deficit as i64);
        out.uint("count", format_args!(" count {}", v.count), v.count as u64);
        out.uint("lastcount", format_args!(" lastcount {}", v.lastcount), v.lastcount as u64);
        let ldelay = codel_time_to_us(v.ldelay);
        out.uint("ldelay", format_args!(" ldelay {}", units::fmt_time(ldelay)), ldelay as u64);
        if v.dropping {
            out.boolean("dropping", format_args!(" dropping"), true);
            print_drop_next(out, drop_next_us(v, self.last_now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::codel::{codel_time, control_law, CODEL_SHIFT};
    use crate::stats::Reduce;
    use crate::testing::{argv, dev, held, t};

    const H: u32 = 0x8001_0000;
    fn p(s: &str) -> Result<FqCodelOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn fq(s: &str) -> Node<FqCodel> {
        held(FqCodel::new(&p(s).unwrap(), &dev(), H, t(0)).unwrap())
    }
    fn out(json: bool, f: impl FnOnce(&mut Out)) -> String {
        let mut o = if json { Out::json(false) } else { Out::text() };
        if json {
            o.open_object(None);
        }
        f(&mut o);
        if json {
            o.close_object();
        }
        o.into_string()
    }
    /// A packet of `len` bytes for bucket `b` (0-based) of a qdisc with `flows`
    /// buckets: the smallest hash that reciprocal_scale maps there.
    fn pk(id: u64, len: u32, b: u32, flows: u32) -> Packet {
        let hash = ((b as u64) << 32).div_ceil(flows as u64) as u32;
        assert_eq!(reciprocal_scale(hash, flows), b);
        Packet::new(id, len).with_hash(hash)
    }
    fn ids(q: &mut Node<FqCodel>, now: Instant, n: usize) -> Vec<u64> {
        (0..n).filter_map(|_| q.dequeue(now).packet().map(|p| p.id)).collect()
    }

    // ---- parameters and printing --------------------------------------------------

    #[test]
    fn defaults_dump_like_iproute2() {
        let q = fq("");
        assert_eq!(
            out(false, |o| q.dump(o, &dev())),
            "limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 "
        );
        assert_eq!(
            out(true, |o| q.dump(o, &dev())),
            r#"{"limit":10240,"flows":1024,"quantum":1514,"target":4999,"interval":99999,"memory_limit":33554432,"ecn":true,"drop_batch":64}"#
        );
        assert_eq!(
            out(false, |o| q.dump_xstats(o)),
            "  maxpacket 0 drop_overlimit 0 new_flow_count 0 ecn_mark 0\n  new_flows_len 0 old_flows_len 0"
        );
        assert_eq!(
            out(true, |o| q.dump_xstats(o)),
            r#"{"maxpacket":0,"drop_overlimit":0,"new_flow_count":0,"ecn_mark":0,"new_flows_len":0,"old_flows_len":0}"#
        );
        assert!(q.can_bypass());
        assert_eq!(q.params().mtu, 1514);
    }

    #[test]
    fn every_parameter() {
        let q = fq("limit 100 flows 16 quantum 300 target 2ms interval 50ms noecn ce_threshold 1ms \
                    ce_threshold_selector 0x1/0x3 memory_limit 1m drop_batch 8");
        assert_eq!(
            out(false, |o| q.dump(o, &dev())),
            "limit 100p flows 16 quantum 300 target 2ms ce_threshold 999us ce_threshold_selector 0x1/0x3 \
             interval 50ms memory_limit 1Mb drop_batch 8 "
        );
        assert_eq!(
            out(true, |o| q.dump(o, &dev())),
            r#"{"limit":100,"flows":16,"quantum":300,"target":1999,"ce_threshold":999,"ce_threshold_selector":1,"ce_threshold_mask":3,"interval":49999,"memory_limit":1048576,"drop_batch":8}"#
        );
        // Kernel clamps: quantum < 256 raised, memory_limit capped at 2^31, drop_batch ≥ 1.
        assert_eq!(fq("quantum 1").quantum(), 256);
        assert_eq!(fq("memory_limit 3000000000").memory_limit(), 1 << 31);
        assert_eq!(fq("flows 65536").flows_cnt(), 65536);
        // The selector is dumped only with a ce_threshold; 0/0 prints nothing.
        let q = fq("ce_threshold_selector 0x1/0x3");
        assert!(!out(false, |o| q.dump(o, &dev())).contains("selector"));
        let q = fq("ce_threshold 2ms ce_threshold_selector 0/0xfc");
        assert!(out(false, |o| q.dump(o, &dev())).contains("ce_threshold 2ms ce_threshold_selector 0/0xfc interval"));
        let q = fq("ce_threshold 2ms ce_threshold_selector 0/0");
        assert!(out(false, |o| q.dump(o, &dev())).contains("ce_threshold 2ms interval"));
    }

    /// `fq_codel_init`'s mtu (default quantum and CoDel mtu): psched_mtu clamped to
    /// [256, 2^20] on 6.12.117 (golden fq_codel-quantum-bounds: 256 on an MTU 68
    /// device), psched_mtu itself on 6.18.44. A given quantum is raised to 256 on both.
    #[test]
    fn init_mtu_bounds_by_kernel() {
        let small = DevInfo { mtu: 68, ..dev() };
        let q = FqCodel::new(&p("").unwrap(), &small, H, t(0)).unwrap();
        assert_eq!((q.quantum(), q.params().mtu), (256, 256));
        let small = DevInfo { kernel: crate::tree::KernelVersion::V6_18, ..small };
        let q = FqCodel::new(&p("").unwrap(), &small, H, t(0)).unwrap();
        assert_eq!((q.quantum(), q.params().mtu), (82, 82));
        let q = FqCodel::new(&p("quantum 1").unwrap(), &small, H, t(0)).unwrap();
        assert_eq!(q.quantum(), 256);
    }

    #[test]
    fn kernel_validation() {
        let new = |s: &str| FqCodel::new(&p(s).unwrap(), &dev(), H, t(0)).err();
        assert_eq!(new("flows 65537"), Some(TcError::invalid()));
        assert_eq!(new("quantum 1048576"), None);
        assert_eq!(new("quantum 1048577"), Some(TcError::kernel("Invalid quantum")));
        assert_eq!(new("quantum 1048577").unwrap().msg, "Error: Invalid quantum.\n");
        // flows only at creation: any flows attribute on change is EINVAL, nothing changes.
        let mut q = fq("");
        let e = q.change(&Opts::new(p("flows 1024 limit 5").unwrap()), &dev(), t(0));
        assert_eq!(e, Err(TcError::invalid()));
        assert_eq!((q.flows_cnt(), q.limit()), (1024, 10240));
        // flows is checked before quantum.
        let e = q.change(&Opts::new(p("flows 8 quantum 2000000").unwrap()), &dev(), t(0));
        assert_eq!(e, Err(TcError::invalid()));
        let e = q.change(&Opts::new(p("quantum 2000000 limit 5").unwrap()), &dev(), t(0));
        assert_eq!(e, Err(TcError::kernel("Invalid quantum")));
        assert_eq!(q.limit(), 10240);
        q.change(&Opts::new(p("limit 5 quantum 100 noecn").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.limit(), q.quantum(), q.params().ecn), (5, 256, false));
        // A change keeps what it does not mention.
        q.change(&Opts::new(p("").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.limit(), q.quantum(), q.flows_cnt()), (5, 256, 1024));
    }

    #[test]
    fn parse_errors_match_tc() {
        assert_eq!(p("").unwrap(), FqCodelOpt::default());
        assert_eq!(p("help").unwrap_err(), TcError::tc(USAGE));
        assert_eq!(p("flows").unwrap_err(), TcError::incomplete());
        assert_eq!(p("ce_threshold_selector").unwrap_err(), TcError::incomplete());
        assert_eq!(p("limit x").unwrap_err(), TcError::tc("Illegal \"limit\"\n"));
        assert_eq!(p("flows -1").unwrap_err(), TcError::tc("Illegal \"flows\"\n"));
        assert_eq!(p("quantum 1.5").unwrap_err(), TcError::tc("Illegal \"quantum\"\n"));
        assert_eq!(p("drop_batch y").unwrap_err(), TcError::tc("Illegal \"drop_batch\"\n"));
        assert_eq!(p("memory_limit 1x").unwrap_err(), TcError::tc("Illegal \"memory_limit\"\n"));
        assert_eq!(p("memory_limit 4g").unwrap_err(), TcError::tc("Illegal \"memory_limit\"\n"));
        assert_eq!(p("target 1h").unwrap_err(), TcError::tc("Illegal \"target\"\n"));
        assert_eq!(
            p("ce_threshold_selector 1").unwrap_err(),
            TcError::tc("Missing mask for \"ce_threshold_selector\"\n")
        );
        assert_eq!(
            p("ce_threshold_selector 1/256").unwrap_err(),
            TcError::tc("Illegal mask for \"ce_threshold_selector\"\n")
        );
        assert_eq!(p("ce_threshold_selector x/1").unwrap_err(), TcError::tc("Illegal \"ce_threshold_selector\"\n"));
        assert_eq!(p("ce_threshold_selector 0xff/1").unwrap().ce_threshold_selector, None);
        assert_eq!(p("bogus").unwrap_err(), TcError::tc(format!("What is \"bogus\"?\n{USAGE}")));
        // Zero values are not sent at all (the kernel keeps its defaults).
        assert_eq!(p("limit 0 flows 0 quantum 0 drop_batch 0 target 0").unwrap(), FqCodelOpt::default());
        assert_eq!(
            p("ecn ce_threshold 0 memory_limit 0").unwrap(),
            FqCodelOpt { ecn: Some(1), ce_threshold: Some(0), memory_limit: Some(0), ..Default::default() }
        );
    }

    // ---- classification ---------------------------------------------------------

    #[test]
    fn classification() {
        let q = fq("flows 16");
        // reciprocal_scale(hash, 16) = hash >> 28.
        assert_eq!(q.classify(&Packet::new(0, 1).with_hash(0x0000_0000)), 0);
        assert_eq!(q.classify(&Packet::new(0, 1).with_hash(0xF000_0000)), 15);
        assert_eq!(q.classify(&Packet::new(0, 1).with_hash(0x7FFF_FFFF)), 7);
        // skb->priority naming one of our classes picks that bucket.
        assert_eq!(q.classify(&Packet::new(0, 1).with_priority(H | 3).with_hash(0xF000_0000)), 2);
        assert_eq!(q.classify(&Packet::new(0, 1).with_priority(H | 16)), 15);
        // Minor 0 or > flows, or another major: the hash decides.
        assert_eq!(q.classify(&Packet::new(0, 1).with_priority(H | 17).with_hash(0x1000_0000)), 1);
        assert_eq!(q.classify(&Packet::new(0, 1).with_priority(H).with_hash(0x1000_0000)), 1);
        assert_eq!(q.classify(&Packet::new(0, 1).with_priority(0x1_0003).with_hash(0x1000_0000)), 1);
        // Handle 0 (a default root qdisc): plain priorities 1..=flows pick buckets.
        let z = FqCodel::new(&p("flows 16").unwrap(), &dev(), 0, t(0)).unwrap();
        assert_eq!(z.classify(&Packet::new(0, 1).with_priority(6).with_hash(0xF000_0000)), 5);
        assert_eq!(z.classify(&Packet::new(0, 1).with_priority(0).with_hash(0xF000_0000)), 15);
    }

    // ---- DRR and the flow lists ----------------------------------------------------

    #[test]
    fn drr_with_deficits() {
        let mut q = fq("flows 16");
        for i in 0..3 {
            q.enqueue(pk(10 + i, 1000, 1, 16), t(0));
        }
        for i in 0..3 {
            q.enqueue(pk(20 + i, 1000, 2, 16), t(0));
        }
        assert_eq!(q.lists(), (vec![1, 2], vec![]));
        assert_eq!(q.new_flow_count(), 2);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 10);
        assert_eq!(q.bucket(1).0, 514);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 11);
        assert_eq!(q.bucket(1).0, -486);
        // Bucket 1 is out of credit: +quantum, to old_flows; bucket 2 is served.
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 20);
        assert_eq!(q.lists(), (vec![2], vec![1]));
        assert_eq!(q.bucket(1).0, 1028);
        assert_eq!(ids(&mut q, t(0), 10), [21, 12, 22]);
        // Both emptied from old_flows: off every list.
        assert_eq!(q.lists(), (vec![], vec![]));
        assert_eq!((q.bucket(1).0, q.bucket(2).0), (28, 28));
        assert_eq!(q.stats().packets, 6);
    }

    #[test]
    fn new_flows_first_and_the_old_list_rule() {
        let mut q = fq("flows 16");
        // An empty new flow with old_flows empty leaves the lists: it comes back new.
        q.enqueue(pk(1, 100, 3, 16), t(0));
        assert_eq!(ids(&mut q, t(0), 2), [1]);
        assert_eq!(q.lists(), (vec![], vec![]));
        q.enqueue(pk(2, 100, 3, 16), t(0));
        assert_eq!((q.lists(), q.new_flow_count()), ((vec![3], vec![]), 2));
        assert_eq!(ids(&mut q, t(0), 1), [2]);
        // Bucket 3 stays on new_flows while empty until a dequeue notices it; with
        // old_flows empty it then leaves the lists in the same call.
        assert_eq!(q.lists(), (vec![3], vec![]));
        for i in 0..3 {
            q.enqueue(pk(50 + i, 1500, 5, 16), t(0));
        }
        assert_eq!(ids(&mut q, t(0), 1), [50]);
        assert_eq!(q.lists(), (vec![5], vec![]));
        assert_eq!(ids(&mut q, t(0), 1), [51]);
        // A new sparse flow: bucket 5 (out of credit) moves to old_flows, 7 is served.
        q.enqueue(pk(7, 64, 7, 16), t(0));
        assert_eq!(ids(&mut q, t(0), 1), [7]);
        assert_eq!(q.lists(), (vec![7], vec![5]));
        // Bucket 7 empties while old_flows is not empty: it goes to old_flows.
        assert_eq!(ids(&mut q, t(0), 1), [52]);
        assert_eq!(q.lists(), (vec![], vec![5, 7]));
        // The walk lists buckets on either list, empty or not.
        assert_eq!(q.class_minors(), [6, 8]);
        assert_eq!(ids(&mut q, t(0), 3), Vec::<u64>::new());
        assert_eq!(q.lists(), (vec![], vec![]));
        assert!(q.class_minors().is_empty());
    }

    // ---- overlimit: batch drop from the fattest flow ---------------------------------

    #[test]
    fn batch_drop_from_the_fat_flow() {
        let mut q = fq("flows 16 limit 10");
        for i in 0..8 {
            assert_eq!(q.enqueue(pk(i, 1000, 4, 16), t(0)), Enqueued::Success);
        }
        for i in 0..2 {
            assert_eq!(q.enqueue(pk(100 + i, 100, 9, 16), t(0)), Enqueued::Success);
        }
        assert_eq!(q.take_reduce(), Reduce::default());
        // 11th packet, for the small flow: bucket 4 (8000 bytes) loses half its
        // backlog: 4 packets (4000 ≥ 4000 stops the batch).
        assert_eq!(q.enqueue(pk(102, 100, 9, 16), t(0)), Enqueued::Success);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (7, 4300, 4));
        assert_eq!((q.drop_overlimit(), q.drop_overmemory()), (4, 0));
        assert_eq!(q.take_reduce(), Reduce::new(4, 4000));
        let (_, n, b, v) = q.bucket(4);
        assert_eq!((n, b, v.count), (4, 4000, 4), "CoDel count raised by the drops");
        // packet_snd_truesize: 1000 bytes → 2304, 100 bytes → the small head's 960.
        assert_eq!(q.memory_usage(), 4 * 2304 + 3 * 960);
        // Fill to the limit again, then overflow from the fat flow itself: CN, and
        // the parents hear one packet fewer (they never counted the new one).
        for i in 0..3 {
            q.enqueue(pk(200 + i, 1000, 4, 16), t(0));
        }
        assert_eq!(q.stats().qlen, 10);
        assert_eq!(q.enqueue(pk(300, 1000, 4, 16), t(0)), Enqueued::Congested);
        // Bucket 4 held 8 × 1000: drops 4 from its head (ids 4..7).
        assert_eq!(q.take_reduce(), Reduce::new(3, 3000));
        assert_eq!((q.stats().qlen, q.stats().drops, q.drop_overlimit()), (7, 8, 8));
        assert_eq!(ids(&mut q, t(0), 20), [200, 201, 100, 101, 102, 202, 300]);
    }

    #[test]
    fn batch_drop_respects_drop_batch_and_the_first_maximum() {
        let mut q = fq("flows 16 limit 6 drop_batch 2");
        for i in 0..3 {
            q.enqueue(pk(i, 500, 2, 16), t(0));
            q.enqueue(pk(10 + i, 500, 6, 16), t(0));
        }
        // Tie at 1500 bytes: the lower bucket index is the fat one. drop_batch 2 →
        // 2 packets (1000 bytes, below half? 1000 ≥ 750 stops after 2 anyway).
        q.enqueue(pk(20, 64, 11, 16), t(0));
        assert_eq!(q.bucket(2).1, 1, "threshold 750: 2 packets");
        assert_eq!(q.bucket(6).1, 3);
        assert_eq!(q.take_reduce(), Reduce::new(2, 1000));
        let mut q = fq("flows 16 limit 10 drop_batch 2");
        for i in 0..10 {
            q.enqueue(pk(i, 100, 2, 16), t(0));
        }
        // Half of 1000 bytes would be 5 packets; drop_batch caps it at 2.
        assert_eq!(q.enqueue(pk(10, 100, 2, 16), t(0)), Enqueued::Congested);
        assert_eq!(q.take_reduce(), Reduce::new(1, 100));
        assert_eq!(q.stats().drops, 2);
        // When only one (older, larger) packet leaves for a small new one, the
        // parents' backlog still balances: −1 packet +… bytes as the kernel reports.
        let mut q = fq("flows 16 limit 2");
        q.enqueue(pk(0, 1500, 3, 16), t(0));
        q.enqueue(pk(1, 100, 3, 16), t(0));
        assert_eq!(q.enqueue(pk(2, 100, 3, 16), t(0)), Enqueued::Congested);
        assert_eq!(q.take_reduce(), Reduce::new(0, 1400));
    }

    #[test]
    fn memory_limit_drops_count_as_overmemory() {
        // truesize of a 1000-byte AF_PACKET frame: 1016 → 1024 + 320 → the 2048 bucket
        // + 256 = 2304; two fit 5000 (4608), three exceed it.
        let mut q = fq("flows 16 memory_limit 5000");
        q.enqueue(pk(0, 1000, 1, 16), t(0));
        q.enqueue(pk(1, 1000, 1, 16), t(0));
        assert_eq!(q.memory_usage(), 4608);
        assert_eq!(q.enqueue(pk(2, 1000, 2, 16), t(0)), Enqueued::Success);
        // Fat flow 1 (2000 bytes): one packet reaches half its backlog.
        assert_eq!((q.drop_overlimit(), q.drop_overmemory(), q.stats().drops), (1, 1, 1));
        assert_eq!(q.take_reduce(), Reduce::new(1, 1000));
        assert_eq!(q.memory_usage(), 4608);
        assert_eq!(
            out(false, |o| q.dump_xstats(o)),
            "  maxpacket 0 drop_overlimit 1 new_flow_count 2 ecn_mark 0 memory_used 4608 drop_overmemory 1\n  new_flows_len 2 old_flows_len 0"
        );
        // A lower memory_limit on change dequeues (and counts as sent) until under it:
        // one of the two (2304 ≤ 2500).
        q.change(&Opts::new(p("memory_limit 2500").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!((q.stats().qlen, q.stats().packets, q.stats().drops), (1, 1, 1));
        assert_eq!(q.take_reduce(), Reduce::new(1, 1000));
    }

    // ---- CoDel per bucket --------------------------------------------------------------

    /// CoDel runs per bucket, with the *qdisc's* backlog in the mtu test; its first
    /// drop comes one tick after first_above_time, as in codel. Non-ECT packets are
    /// dropped even with ecn on; the drop reaches the parents through Reduce.
    #[test]
    fn codel_per_bucket() {
        let mut q = fq("flows 16");
        for i in 0..50 {
            q.enqueue(pk(i, 1000, 3, 16), t(0));
        }
        let t0 = 10_000_000u64;
        assert_eq!(q.dequeue(t(t0)).packet().unwrap().id, 0);
        let fat = q.bucket(3).3.first_above_time;
        assert_eq!(fat, codel_time(t(t0)) + 97656);
        let at = |c: u32| t((c as u64) << CODEL_SHIFT);
        assert_eq!(q.dequeue(at(fat)).packet().unwrap().id, 1);
        assert_eq!(q.dequeue(at(fat + 1)).packet().unwrap().id, 3);
        let v = q.bucket(3).3;
        assert_eq!((v.dropping, v.count, v.drop_next), (true, 1, control_law(fat + 1, 97656, 0xFFFF)));
        assert_eq!(q.take_reduce(), Reduce::new(1, 1000));
        assert_eq!(q.stats().drops, 1);
        // The class view of the bucket.
        let x = out(false, |o| q.dump_class_xstats(4, o));
        assert_eq!(x, "  deficit 28 count 1 lastcount 1 ldelay 110ms dropping drop_next 100ms");
        assert_eq!(q.class_stats(4), Some(Stats { qlen: 46, backlog: 46_000, ..Default::default() }));
        assert_eq!(
            out(true, |o| q.dump_class_xstats(4, o)),
            r#"{"deficit":28,"count":1,"lastcount":1,"ldelay":110000,"dropping":true,"drop_next":99997}"#
        );
        // Two flows: the mtu test looks at the whole qdisc. Bucket 5 alone holds one
        // packet but the qdisc holds more than an MTU, so it can be dropped from.
        let mut q = fq("flows 16");
        q.enqueue(pk(0, 1000, 5, 16), t(0));
        q.enqueue(pk(1, 1000, 5, 16), t(0));
        for i in 0..10 {
            q.enqueue(pk(10 + i, 1000, 6, 16), t(0));
        }
        q.dequeue(t(t0));
        assert_ne!(q.bucket(5).3.first_above_time, 0);
    }

    #[test]
    fn ecn_and_ce_threshold_marks() {
        let mut q = fq("flows 16 ce_threshold 1ms ce_threshold_selector 0x1/0x3");
        let mut a = pk(0, 100, 1, 16);
        a.tos = 0x01; // ECT(1): selected
        let mut b = pk(1, 100, 1, 16);
        b.tos = 0x02; // ECT(0): not selected by value 1 / mask 3
        q.enqueue(a, t(0));
        q.enqueue(b, t(0));
        assert_eq!(q.dequeue(t(2_000_000)).packet().unwrap().tos, 0x03);
        assert_eq!(q.dequeue(t(2_000_000)).packet().unwrap().tos, 0x02);
        assert_eq!(q.codel_stats().ce_mark, 1);
        assert!(out(false, |o| q.dump_xstats(o)).contains("ecn_mark 0 ce_mark 1\n"));
    }

    // ---- classes, reset, peek, conservation --------------------------------------------

    #[test]
    fn classes_are_the_active_buckets() {
        let mut q = fq("flows 8");
        q.enqueue(pk(0, 300, 6, 8), t(0));
        q.enqueue(pk(1, 200, 2, 8), t(0));
        q.enqueue(pk(2, 200, 2, 8), t(0));
        assert_eq!(q.class_minors(), [3, 7]);
        assert!(!q.find(3) && q.leaf(3).is_none() && !q.class_has_basic_stats());
        assert_eq!(q.class_stats(3), Some(Stats { qlen: 2, backlog: 400, ..Default::default() }));
        assert_eq!(out(false, |o| q.dump_class_xstats(3, o)), "  deficit 1514 count 0 lastcount 0 ldelay 0us");
        assert!(q.graft(3, None, &dev()).is_err());
        q.reset(t(5));
        assert!(q.class_minors().is_empty());
        assert_eq!((q.stats().qlen, q.stats().backlog, q.memory_usage()), (0, 0, 0));
        assert_eq!(q.dequeue(t(6)), Dequeued::Empty);
    }

    #[test]
    fn peek_parks_the_packet() {
        let mut q = fq("flows 8");
        q.enqueue(pk(0, 300, 1, 8), t(0));
        q.enqueue(pk(1, 300, 1, 8), t(0));
        assert_eq!(q.peek(t(1)).unwrap().id, 0);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().packets), (2, 600, 1));
        assert_eq!(q.peek(t(1)).unwrap().id, 0);
        assert_eq!(q.dequeue(t(2)).packet().unwrap().id, 0);
        assert_eq!((q.stats().qlen, q.stats().packets), (1, 1));
        assert_eq!(q.dequeue(t(2)).packet().unwrap().id, 1);
    }

    /// Random traffic over many flows with limits, peeks and changes: packets and
    /// bytes in = sent + dropped (reported up or refused) + queued.
    #[test]
    fn conservation() {
        let mut q = fq("flows 64 limit 200 memory_limit 300000 target 1ms interval 10ms quantum 600");
        let mut seed = 99u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let (mut in_p, mut in_b, mut out_p, mut out_b) = (0i64, 0i64, 0i64, 0i64);
        let (mut red_p, mut red_b, mut change_p, mut change_b) = (0i64, 0i64, 0i64, 0i64);
        let mut now = 0u64;
        for id in 0..60_000u64 {
            now += (rnd() % 50_000) as u64;
            let len = 64 + rnd() % 1450;
            let hash = rnd().wrapping_mul(2654435761) & 0xF800_0000;
            match q.enqueue(Packet::new(id, len).with_hash(hash), t(now)) {
                Enqueued::Success => {
                    in_p += 1;
                    in_b += len as i64;
                }
                Enqueued::Congested => {} // the parents never count it
                r => panic!("{r:?}"),
            }
            let r = q.take_reduce();
            red_p += r.pkts as i64;
            red_b += r.bytes;
            if rnd() % 2 == 0 {
                if rnd() % 7 == 0 {
                    q.peek(t(now));
                }
                if let Dequeued::Packet(pk) = q.dequeue(t(now)) {
                    out_p += 1;
                    out_b += pk.len as i64;
                }
                let r = q.take_reduce();
                red_p += r.pkts as i64;
                red_b += r.bytes;
            }
            if id % 20_000 == 19_999 {
                // A lower limit dequeues the excess (bstats count it as sent) and
                // reports it to the parents as dropped.
                let before = (q.stats().packets, q.stats().bytes);
                q.change(&Opts::new(p("limit 50").unwrap()), &dev(), t(now)).unwrap();
                change_p += (q.stats().packets - before.0) as i64;
                change_b += (q.stats().bytes - before.1) as i64;
                let r = q.take_reduce();
                red_p += r.pkts as i64;
                red_b += r.bytes;
                assert_eq!(q.stats().qlen, 50);
                q.change(&Opts::new(p("limit 200").unwrap()), &dev(), t(now)).unwrap();
            }
        }
        let s = q.stats().clone();
        assert_eq!((s.packets as i64, s.bytes as i64), (out_p + change_p, out_b + change_b));
        assert_eq!(in_p, out_p + red_p + s.qlen as i64);
        assert_eq!(in_b, out_b + red_b + s.backlog as i64);
        assert!(q.drop_overlimit() > 0 && q.drop_overmemory() > 0 && s.drops > 0);
        // Per-bucket backlogs and memory agree with the queue.
        let total: u64 = (0..64).map(|i| q.bucket(i).2 as u64).sum();
        assert_eq!(total + q.sch.parked().map_or(0, |p| p.len as u64), s.backlog as u64);
    }

    /// The bucket index finds every used bucket through its growth steps, leaves
    /// unused ones reading as zeroed, and memory follows the buckets used.
    #[test]
    fn bucket_index_tracks_used_buckets_only() {
        let mut q = fq("flows 65536");
        let idle = q.memory_footprint();
        let mut used = Vec::new();
        let mut b = 7u32;
        for i in 0..3000u64 {
            b = b.wrapping_mul(1103515245).wrapping_add(12345) % 65536;
            q.enqueue(pk(i, 100, b, 65536), t(0));
            used.push(b);
        }
        for &b in &used {
            let n = used.iter().filter(|&&x| x == b).count();
            assert_eq!(q.bucket(b as usize).1, n);
        }
        let distinct = {
            let mut u = used.clone();
            u.sort_unstable();
            u.dedup();
            u.len()
        };
        assert_eq!(q.nflows as usize, distinct);
        let unused = (0..65536).find(|b| !used.contains(b)).unwrap();
        assert_eq!(q.bucket(unused as usize).0, 0);
        // Flows grow by doubling (up to twice the buckets used), the index likewise.
        let grown = q.memory_footprint() - idle - q.spill.pkts.capacity() * 64 - q.spill.next.capacity() * 4;
        assert!(grown <= 2 * distinct * FqCodel::bytes_per_flow(), "{grown} for {distinct} buckets");
        eprintln!("fq_codel: idle {idle} bytes, +{grown} for {distinct} buckets");
    }

    /// Each direction's fields are one span, as the struct's comment says.
    #[test]
    fn layout() {
        use std::mem::{offset_of, size_of};
        macro_rules! end {
            ($f:ident, $t:ty) => {
                offset_of!(FqCodel, $f) + size_of::<$t>()
            };
        }
        assert_eq!(offset_of!(FqCodel, limit), 0);
        let both = offset_of!(FqCodel, last_now);
        assert!(end!(last_slot, u32) <= both);
        assert_eq!(both, 24);
        assert_eq!(end!(first, Flow), both + 84);
        let deq = offset_of!(FqCodel, new_flows);
        assert_eq!(deq, both + 84);
        assert_eq!(end!(cstats, CodelStats), deq + 64);
        assert_eq!(end!(cparams, CodelParams), deq + 44);
        assert_eq!(size_of::<Option<Packet>>(), 64);
        eprintln!("fq_codel: {} bytes", size_of::<FqCodel>());
    }

    #[test]
    fn per_flow_memory_is_small() {
        let per_flow = FqCodel::bytes_per_flow();
        eprintln!("fq_codel per-flow memory: {per_flow} bytes (Flow {} + index ≤ 16)", std::mem::size_of::<Flow>());
        // The kernel's struct fq_codel_flow is 64 bytes.
        assert!(per_flow <= 64, "{per_flow}");
    }
}
