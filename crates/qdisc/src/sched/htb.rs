//! htb — Hierarchical Token Bucket. Mirrors net/sched/sch_htb.c (kernel side) and
//! tc/q_htb.c (iproute2 side); §14 of docs/kernel-notes.md.
//!
//! Theory: a tree of classes, each with two token buckets kept as *time* (ns of
//! transmission credit, see [`crate::rate`]): the rate bucket (`tokens`, at most
//! `buffer`) and the ceil bucket (`ctokens`, at most `cbuffer`). Credit grows with
//! elapsed time; sending `len` bytes costs `l2t(len)`. A class is in one of three
//! modes: CAN_SEND (rate credit ≥ 0), MAY_BORROW (rate exhausted, ceil credit ≥ 0:
//! it may use credit of an ancestor), CANT_SEND (ceil exhausted). Buckets never fall
//! below −`mbuffer` (60 s).
//!
//! Leaves (level 0) hold packets in a child qdisc; inner classes have a level one
//! below their parent (a class without a parent is at level 7). Scheduling state:
//!
//! * per level and priority, a **row**: the CAN_SEND classes of that level that have
//!   active leaves below (or are active leaves) at that priority;
//! * per inner class and priority, a **feed**: its MAY_BORROW children that are
//!   active at that priority — an active leaf that may borrow hangs in its parent's
//!   feed, and so on up to the first ancestor that can send, which sits in a row;
//! * per level, a **wait queue** of the classes that are not CAN_SEND, keyed by the
//!   time their mode will next change (`pq_key`).
//!
//! Dequeue serves the direct queue first, then levels 0..7, and within a level the
//! priorities lowest first; rows and feeds are served round robin in classid order
//! with a per-leaf deficit (`quantum` bytes per turn). The level a packet is found
//! at is the level it borrows from: classes at or above it are charged their rate
//! bucket ("lended" at exactly that level), classes below only their ceil bucket
//! ("borrowed"). When nothing can send, the answer is the nearest wait-queue event
//! (`Throttled { until }`), as the kernel arms its watchdog.
//!
//! Data structures for scale: classes live inline in pages of 64 consecutive minors
//! (a tree built from consecutive classids is consecutive memory); rows and feeds are
//! [`MinorSet`]s (ordered sets of minors as a three-level bitmap: insert, remove and
//! successor in a few word operations, no allocation once warm) with a saved DRR
//! position; wait queues ([`WaitQueue`]) are radix heaps over ~1 µs blocks of the
//! event time with a binary heap for the nearest block, ordered by
//! `(pq_key, insertion)` — the order the kernel's rb-tree gives equal keys — so the
//! long waits of thousands of borrowing leaves are queued and erased in O(1). The
//! kernel's class hash (which fixes the order `tc class show` lists classes in) is
//! simulated bucket by bucket. Nothing on the datapath scans all classes.

use std::collections::VecDeque;

use crate::classify::{Binds, Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::rate::{LinkLayer, PschedRatecfg, RateSpec};
use crate::sched::fifo::{Fifo, FifoKind};
use crate::stats::Stats;
use crate::tc::units::{calc_xmitsize, calc_xmittime, ns2ticks, ticks2ns};
use crate::tc::{matches, units, Args, Errno, Out, TcError};
use crate::time::Instant;

/// TC_HTB_MAXDEPTH: levels 0..=7.
pub const TC_HTB_MAXDEPTH: usize = 8;
/// TC_HTB_NUMPRIO: priorities 0..=7.
pub const TC_HTB_NUMPRIO: usize = 8;
/// TC_HTB_PROTOVER: the version tc must send.
pub const TC_HTB_PROTOVER: u32 = 3;
/// HTB_VER (0x30011) as the kernel dumps it: `ver 3.17`.
const HTB_VER: u32 = 0x30011;
/// `cl->mbuffer`: the deepest a bucket may go into debt, ns (60 s).
const MBUFFER_NS: i64 = 60_000_000_000;
const NSEC_PER_SEC: i64 = 1_000_000_000;

// ---------------------------------------------------------------------------------
// tc side (q_htb.c)

/// What tc sends for `qdisc add … htb`: `struct tc_htb_glob` (TCA_HTB_INIT) plus the
/// optional TCA_HTB_DIRECT_QLEN and TCA_HTB_OFFLOAD attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HtbOpt {
    /// Always 3 from tc.
    pub version: u32,
    pub rate2quantum: u32,
    /// Minor of the default class (`default`, parsed as hex).
    pub defcls: u32,
    /// `debug`: accepted and ignored by the kernel.
    pub debug: u32,
    /// TCA_HTB_DIRECT_QLEN, sent only when given.
    pub direct_qlen: Option<u32>,
    /// TCA_HTB_OFFLOAD.
    pub offload: bool,
}

impl Default for HtbOpt {
    fn default() -> Self {
        HtbOpt { version: TC_HTB_PROTOVER, rate2quantum: 10, defcls: 0, debug: 0, direct_qlen: None, offload: false }
    }
}

/// What tc sends for `class add|change … htb`: `struct tc_htb_opt` (TCA_HTB_PARMS)
/// plus TCA_HTB_RATE64/CEIL64 for rates that do not fit 32 bits. (The rate tables
/// only matter to the kernel for link-layer detection when the ratespec says
/// "unaware", which tc never sends.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HtbClassOpt {
    pub rate: RateSpec,
    pub ceil: RateSpec,
    /// Rate bucket size in ticks (`tc_calc_xmittime(rate, burst)`).
    pub buffer: u32,
    /// Ceil bucket size in ticks.
    pub cbuffer: u32,
    /// 0 = computed by the kernel from rate / r2q.
    pub quantum: u32,
    pub prio: u32,
    pub rate64: Option<u64>,
    pub ceil64: Option<u64>,
}

/// q_htb.c `explain`.
const USAGE: &str = "Usage: ... qdisc add ... htb [default N] [r2q N]
                      [direct_qlen P] [offload]
 default  minor id of class to which unclassified packets are sent {0}
 r2q      DRR quantums are computed as rate in Bps/r2q {10}
 debug    string of 16 numbers each 0-3 {0}

 direct_qlen  Limit of the direct queue {in packets}
 offload  enable hardware offload
... class add ... htb rate R1 [burst B1] [mpu B] [overhead O]
                      [prio P] [slot S] [pslot PS]
                      [ceil R2] [cburst B2] [mtu MTU] [quantum Q]
 rate     rate allocated to this class (class can still borrow)
 burst    max bytes burst which can be accumulated during idle period {computed}
 mpu      minimum packet size used in rate computations
 overhead per-packet size overhead used in rate computations
 linklay  adapting to a linklayer e.g. atm
 ceil     definite upper class rate (no borrows) {rate}
 cburst   burst but for ceil {computed}
 mtu      max packet size we create rate map for {1600}
 prio     priority of leaf; lower are served first {0}
 quantum  how much bytes to serve from leaf at once {use r2q}

TC HTB version 3.3
";

/// q_htb.c `explain1`.
fn explain1(what: &str) -> TcError {
    TcError::tc(format!("Illegal \"{what}\"\n{USAGE}"))
}

/// C `strtoul(s, &end, base)` for base 10 or 16 with iproute2's `get_u32`/`get_u16`
/// checks: the whole string must be consumed and the value fit `max`.
fn get_unsigned(s: &str, base: u32, max: u64) -> Option<u64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, mut body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if base == 16 {
        if let Some(b) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            if b.starts_with(|c: char| c.is_ascii_hexdigit()) {
                body = b;
            }
        }
    }
    if body.is_empty() || !body.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    // strtoul saturates at ULONG_MAX (ERANGE → get_u32 fails) and negates after a '-'.
    let v = u64::from_str_radix(body, base).ok()?;
    let v = if neg { v.wrapping_neg() } else { v };
    (v <= max).then_some(v)
}

fn get_u32(s: &str, base: u32) -> Option<u32> {
    get_unsigned(s, base, u32::MAX as u64).map(|v| v as u32)
}
fn get_u16(s: &str) -> Option<u16> {
    get_unsigned(s, 10, u16::MAX as u64).map(|v| v as u16)
}

/// tc side: mirrors `htb_parse_opt` in tc/q_htb.c.
pub fn parse(args: &mut Args) -> Result<HtbOpt, TcError> {
    let mut opt = HtbOpt::default();
    while let Some(a) = args.next() {
        if matches(a, "r2q") {
            let v = args.value()?;
            opt.rate2quantum = get_u32(v, 10).ok_or_else(|| explain1("r2q"))?;
        } else if matches(a, "default") {
            let v = args.value()?;
            opt.defcls = get_u32(v, 16).ok_or_else(|| explain1("default"))?;
        } else if matches(a, "debug") {
            let v = args.value()?;
            for (i, c) in v.bytes().take(16).enumerate() {
                if !(b'0'..=b'3').contains(&c) {
                    break;
                }
                opt.debug |= ((c - b'0') as u32) << (2 * i);
            }
        } else if matches(a, "direct_qlen") {
            let v = args.value()?;
            opt.direct_qlen = Some(get_u32(v, 10).ok_or_else(|| explain1("direct_qlen"))?);
        } else if matches(a, "offload") {
            opt.offload = true;
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}")));
        }
    }
    // ~0U means "not given" in q_htb.c: `direct_qlen 4294967295` is not sent.
    if opt.direct_qlen == Some(u32::MAX) {
        opt.direct_qlen = None;
    }
    Ok(opt)
}

/// `get_hz()` on a kernel with high-resolution timers (/proc/net/psched word 4).
const TC_HZ: u64 = 1_000_000_000;

/// tc side: mirrors `htb_parse_class_opt` in tc/q_htb.c.
pub fn parse_class(args: &mut Args) -> Result<HtbClassOpt, TcError> {
    let mut opt = HtbClassOpt::default();
    let (mut buffer, mut cbuffer) = (0u32, 0u32);
    let (mut cell_log, mut ccell_log): (Option<u8>, Option<u8>) = (None, None);
    let mut mtu: u32 = 1600;
    let mut mpu: u16 = 0;
    let mut overhead: u16 = 0;
    let mut linklayer = LinkLayer::Ethernet;
    let (mut rate64, mut ceil64) = (0u64, 0u64);
    while let Some(a) = args.next() {
        if matches(a, "prio") {
            let v = args.value()?;
            opt.prio = get_u32(v, 10).ok_or_else(|| explain1("prio"))?;
        } else if matches(a, "mtu") {
            let v = args.value()?;
            mtu = get_u32(v, 10).ok_or_else(|| explain1("mtu"))?;
        } else if matches(a, "mpu") {
            let v = args.value()?;
            mpu = get_u16(v).ok_or_else(|| explain1("mpu"))?;
        } else if matches(a, "overhead") {
            let v = args.value()?;
            overhead = get_u16(v).ok_or_else(|| explain1("overhead"))?;
        } else if matches(a, "linklayer") {
            let v = args.value()?;
            linklayer = LinkLayer::parse(v).ok_or_else(|| explain1("linklayer"))?;
        } else if matches(a, "quantum") {
            let v = args.value()?;
            opt.quantum = get_u32(v, 10).ok_or_else(|| explain1("quantum"))?;
        } else if matches(a, "burst") || a == "buffer" || a == "maxburst" {
            let v = args.value()?;
            let (b, c) = units::get_size_and_cell(v).ok_or_else(|| explain1(a))?;
            buffer = b;
            if c.is_some() {
                cell_log = c;
            }
        } else if matches(a, "cburst") || a == "cbuffer" || a == "cmaxburst" {
            let v = args.value()?;
            let (b, c) = units::get_size_and_cell(v).ok_or_else(|| explain1(a))?;
            cbuffer = b;
            if c.is_some() {
                ccell_log = c;
            }
        } else if a == "ceil" {
            let v = args.value()?;
            if ceil64 != 0 {
                return Err(TcError::tc("Double \"ceil\" spec\n"));
            }
            ceil64 = args.rate64(v).ok_or_else(|| explain1("ceil"))?;
        } else if a == "rate" {
            let v = args.value()?;
            if rate64 != 0 {
                return Err(TcError::tc("Double \"rate\" spec\n"));
            }
            rate64 = args.rate64(v).ok_or_else(|| explain1("rate"))?;
        } else if a == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}")));
        }
    }
    if rate64 == 0 {
        return Err(TcError::tc("\"rate\" is required.\n"));
    }
    if ceil64 == 0 {
        ceil64 = rate64;
    }
    opt.rate.rate = if rate64 >= 1 << 32 { u32::MAX } else { rate64 as u32 };
    opt.ceil.rate = if ceil64 >= 1 << 32 { u32::MAX } else { ceil64 as u32 };
    // The smallest sensible burst: what the rate sends in one timer tick, plus an MTU.
    if buffer == 0 {
        buffer = (rate64 / TC_HZ).wrapping_add(mtu as u64) as u32;
    }
    if cbuffer == 0 {
        cbuffer = (ceil64 / TC_HZ).wrapping_add(mtu as u64) as u32;
    }
    opt.rate.overhead = overhead;
    opt.ceil.overhead = overhead;
    opt.rate.mpu = mpu;
    opt.ceil.mpu = mpu;
    opt.rate.calc_rtable(cell_log, mtu, linklayer);
    opt.buffer = calc_xmittime(rate64, buffer);
    opt.ceil.calc_rtable(ccell_log, mtu, linklayer);
    opt.cbuffer = calc_xmittime(ceil64, cbuffer);
    if rate64 >= 1 << 32 {
        opt.rate64 = Some(rate64);
    }
    if ceil64 >= 1 << 32 {
        opt.ceil64 = Some(ceil64);
    }
    Ok(opt)
}

// ---------------------------------------------------------------------------------
// Kernel side

/// `enum htb_cmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// HTB_CANT_SEND: neither its own rate nor borrowing (ceil exhausted).
    CantSend,
    /// HTB_MAY_BORROW: own rate exhausted, may borrow from an ancestor.
    MayBorrow,
    /// HTB_CAN_SEND: within its own rate.
    CanSend,
}

/// `struct htb_prio`: a row (per level) or a feed (per inner class) for one
/// priority: the member classes ordered by classid, the DRR position, and the
/// classid to resume from when the position was invalidated.
#[derive(Clone, Debug, Default)]
struct HPrio {
    set: MinorSet,
    ptr: Option<u32>,
    last_ptr_id: Option<u32>,
}

/// `struct htb_level`.
#[derive(Clone, Debug, Default)]
struct Level {
    /// The wait queue: (pq_key, insertion number, minor), smallest first. Equal keys
    /// keep insertion order, as the kernel's rb-tree insert sends equal keys right.
    wait_pq: WaitQueue,
    hprio: [HPrio; TC_HTB_NUMPRIO],
}

/// `struct htb_class`. Laid out in order (`repr(C)`) in 64-byte groups so that a
/// packet touches as few lines of a cold class as possible: the first is all that
/// classification and enqueue read (the leaf qdisc, level, activity); the next three
/// are what dequeue and `htb_charge_class` read and write (buckets, deficits, rates,
/// bstats); configuration and counters read only by dumps follow. (With 10,000
/// leaves every packet meets a class that is not in cache.)
#[repr(C)]
struct Class {
    // group 0
    /// Level 0: the leaf qdisc.
    leaf: Option<Node>,
    level: usize,
    /// The parent's minor (None = a root class).
    parent: Option<u32>,
    /// Bit per priority at which this class is active.
    prio_activity: u32,
    cmode: Mode,
    /// Queued in the wait queue of this level (`pq_node` linked); the entry's place
    /// is `Htb::pq_pos[minor]`.
    pq: Option<u8>,
    /// Leaf: the priority it is served at (0..=7), read when it becomes active.
    prio: u8,
    // group 1
    t_c: i64,
    tokens: i64,
    ctokens: i64,
    /// Level 0: the per-level deficits.
    deficit: [i32; TC_HTB_MAXDEPTH],
    quantum: i32,
    lends: u32,
    // group 2
    buffer: i64,
    cbuffer: i64,
    rate: PschedRatecfg,
    borrows: u32,
    overlimits: u32,
    // group 3
    ceil: PschedRatecfg,
    /// bstats (bytes/packets only).
    bstats: Stats,
    // cold
    classid: u32,
    children: u32,
    giants: u32,
    drops: u32,
    /// Filters bound to this class (`filter_cnt`, `qdisc_class_in_use`).
    filter_cnt: u32,
    /// Level > 0: the feeds, one per priority.
    inner: Option<Box<[HPrio; TC_HTB_NUMPRIO]>>,
    /// `cl->block`: the class's own filters (`tcf_block_get` at creation), consulted
    /// when a filter (or `skb->priority`) selects this class while it is inner.
    block: Block,
}

impl Class {
    /// An empty slot of a [`ClassPage`] (and the defaults a new class starts from).
    fn vacant() -> Class {
        Class {
            leaf: None,
            level: 0,
            parent: None,
            prio_activity: 0,
            cmode: Mode::CanSend,
            pq: None,
            t_c: 0,
            tokens: 0,
            ctokens: 0,
            deficit: [0; TC_HTB_MAXDEPTH],
            quantum: 0,
            lends: 0,
            buffer: 0,
            cbuffer: 0,
            rate: PschedRatecfg::default(),
            borrows: 0,
            overlimits: 0,
            ceil: PschedRatecfg::default(),
            bstats: Stats::default(),
            prio: 0,
            classid: 0,
            children: 0,
            giants: 0,
            drops: 0,
            filter_cnt: 0,
            inner: None,
            block: Block::new(0),
        }
    }
}

/// Classes are stored inline in pages of this many consecutive minors, allocated
/// when a class first uses them: a tree of consecutive classids is consecutive
/// memory, which the prefetcher follows as the round robin walks it, and a lone
/// class at a high minor costs one page, not a table of every minor.
const PAGE: usize = 64;

/// A page of classes: a bit per slot that holds one, and the slots (vacant ones hold
/// [`Class::vacant`]). Presence is a bit in the page's first line, not a niche the
/// compiler would put in some cold field of every class.
struct ClassPage {
    present: u64,
    slots: [Class; PAGE],
}

impl ClassPage {
    fn new() -> Box<ClassPage> {
        Box::new(ClassPage { present: 0, slots: std::array::from_fn(|_| Class::vacant()) })
    }
    fn get(&self, i: usize) -> Option<&Class> {
        (self.present >> i & 1 != 0).then(|| &self.slots[i])
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut Class> {
        (self.present >> i & 1 != 0).then(|| &mut self.slots[i])
    }
    /// The classes held.
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Class> {
        let present = self.present;
        self.slots.iter_mut().enumerate().filter(move |(i, _)| present >> i & 1 != 0).map(|(_, c)| c)
    }
}

/// The kernel's `Qdisc_class_hash` as far as its iteration order goes: buckets of
/// classids, newest first within a bucket, doubling when the load passes 3/4.
#[derive(Clone, Debug)]
struct ClassHash {
    buckets: Vec<Vec<u32>>,
    elems: usize,
}

impl ClassHash {
    /// `qdisc_class_hash_init`: four buckets.
    fn new() -> Self {
        ClassHash { buckets: vec![Vec::new(); 4], elems: 0 }
    }
    /// `qdisc_class_hash`.
    fn hash(id: u32, mask: u32) -> usize {
        let mut id = id;
        id ^= id >> 8;
        id ^= id >> 4;
        (id & mask) as usize
    }
    fn mask(&self) -> u32 {
        self.buckets.len() as u32 - 1
    }
    /// `qdisc_class_hash_insert`: at the head of its bucket.
    fn insert(&mut self, id: u32) {
        let b = Self::hash(id, self.mask());
        self.buckets[b].insert(0, id);
        self.elems += 1;
    }
    fn remove(&mut self, id: u32) {
        let b = Self::hash(id, self.mask());
        if let Some(i) = self.buckets[b].iter().position(|&x| x == id) {
            self.buckets[b].remove(i);
            self.elems -= 1;
        }
    }
    /// `qdisc_class_hash_grow`: old buckets in order, each chain head first, every
    /// entry pushed onto the head of its new bucket.
    fn grow(&mut self) {
        if self.elems * 4 <= self.buckets.len() * 3 {
            return;
        }
        let nsize = self.buckets.len() * 2;
        let nmask = nsize as u32 - 1;
        let mut nb: Vec<Vec<u32>> = vec![Vec::new(); nsize];
        for b in &self.buckets {
            for &id in b {
                nb[Self::hash(id, nmask)].push(id);
            }
        }
        for b in nb.iter_mut() {
            b.reverse();
        }
        self.buckets = nb;
    }
    fn walk(&self) -> impl Iterator<Item = u32> + '_ {
        self.buckets.iter().flatten().copied()
    }
}

/// Where a packet goes (`htb_classify`'s answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// HTB_DIRECT: the unshaped direct queue.
    Direct,
    /// A leaf class, by minor.
    Class(u32),
    /// Classification gave up: the filters chain inner classes in a cycle, where the
    /// kernel's `htb_classify` would loop forever (see [`Htb::classify`]), or a filter
    /// action answered TC_ACT_SHOT. Dropped and counted as a qdisc drop
    /// (`__NET_XMIT_BYPASS`).
    Drop,
    /// A filter action took the packet (STOLEN/QUEUED/TRAP): gone, not a drop.
    Stolen,
}

/// Which row or feed a DRR walk is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PRef {
    Row(usize),
    Feed(u32),
}

/// One htb qdisc: `struct htb_sched` plus the qdisc's own counters.
pub struct Htb {
    handle: u32,
    /// `q->block`: the qdisc's own filters.
    block: Block,
    defcls: u32,
    rate2quantum: u32,
    direct_qlen: u32,
    direct: VecDeque<Packet>,
    direct_pkts: u32,
    /// Classes by minor, in pages of [`PAGE`] consecutive minors ([`ClassPage`]).
    classes: Vec<Option<Box<ClassPage>>>,
    /// Wait-queue heap slot of each queued class, by minor (see [`WaitQueue`]).
    pq_pos: Vec<u32>,
    hash: ClassHash,
    levels: [Level; TC_HTB_MAXDEPTH],
    near_ev_cache: [i64; TC_HTB_MAXDEPTH],
    row_mask: [u32; TC_HTB_MAXDEPTH],
    /// `q->now`: the time of the current (or last) dequeue.
    now: i64,
    pq_seq: u64,
    /// The device as last seen (for default leaf qdiscs created by a delete).
    dev: DevInfo,
    watchdog: Option<Instant>,
    /// Earliest wake-up of a throttled leaf seen during the current dequeue.
    child_wake: Option<Instant>,
}

/// q_htb.c always sends TCA_OPTIONS; `htb_init` wants them (EINVAL without).
pub static OPS: Ops = Ops {
    id: "htb",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Htb::new(c.required()?, c.dev, c.handle, c.parent, c.now)?)),
    parse_class: Some(|a| Ok(Opts::new(parse_class(a)?))),
    flags: Flags::NONE,
};

impl Htb {
    /// Mirrors `htb_init`. Offload needs hardware (`ndo_setup_tc`), which no device
    /// here has, so it is refused as the kernel refuses it on such a device.
    pub fn new(o: &HtbOpt, dev: &DevInfo, handle: u32, parent: u32, now: Instant) -> Result<Htb, TcError> {
        if o.version != TC_HTB_PROTOVER {
            return Err(TcError::invalid());
        }
        if o.offload {
            if parent != TC_H_ROOT {
                return Err(TcError::with_errno("HTB must be the root qdisc to use offload", Errno::EOPNOTSUPP));
            }
            return Err(TcError::with_errno("hw-tc-offload ethtool feature flag must be on", Errno::EOPNOTSUPP));
        }
        // `rate2quantum` is an int in the kernel: anything below 1 (including values
        // that wrap negative) becomes 1.
        let r2q = if (o.rate2quantum as i32) < 1 { 1 } else { o.rate2quantum };
        Ok(Htb {
            handle,
            block: Block::new(handle),
            defcls: o.defcls,
            rate2quantum: r2q,
            direct_qlen: o.direct_qlen.unwrap_or(dev.tx_queue_len),
            direct: VecDeque::new(),
            direct_pkts: 0,
            classes: Vec::new(),
            pq_pos: Vec::new(),
            hash: ClassHash::new(),
            levels: Default::default(),
            near_ev_cache: [0; TC_HTB_MAXDEPTH],
            row_mask: [0; TC_HTB_MAXDEPTH],
            now: now.as_nanos() as i64,
            pq_seq: 0,
            dev: dev.clone(),
            watchdog: None,
            child_wake: None,
        })
    }

    // ---- lookups -------------------------------------------------------------------

    fn get(&self, minor: u32) -> Option<&Class> {
        self.classes.get(minor as usize / PAGE)?.as_ref()?.get(minor as usize % PAGE)
    }
    fn get_mut(&mut self, minor: u32) -> Option<&mut Class> {
        find_mut(&mut self.classes, minor)
    }
    fn has(&self, minor: u32) -> bool {
        self.get(minor).is_some()
    }
    fn cl(&self, minor: u32) -> &Class {
        self.get(minor).expect("class exists")
    }
    fn cl_mut(&mut self, minor: u32) -> &mut Class {
        class_mut(&mut self.classes, minor)
    }
    /// `htb_find`: the class with this full classid, by minor.
    fn find_classid(&self, classid: u32) -> Option<u32> {
        (classid != 0 && tc_h_maj(classid) == self.handle && self.has(tc_h_min(classid))).then(|| tc_h_min(classid))
    }
    fn hp(&mut self, r: PRef, prio: usize) -> &mut HPrio {
        match r {
            PRef::Row(l) => &mut self.levels[l].hprio[prio],
            PRef::Feed(m) => &mut self.cl_mut(m).inner.as_mut().expect("inner class")[prio],
        }
    }

    /// The qdisc's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// Number of classes.
    pub fn class_count(&self) -> usize {
        self.hash.elems
    }
    /// (tokens, ctokens) of class `minor` in ns, for tests and tracing.
    pub fn tokens(&self, minor: u32) -> Option<(i64, i64)> {
        self.has(minor).then(|| (self.cl(minor).tokens, self.cl(minor).ctokens))
    }
    /// The mode of class `minor`.
    pub fn mode(&self, minor: u32) -> Option<Mode> {
        self.has(minor).then(|| self.cl(minor).cmode)
    }
    /// The level of class `minor`.
    pub fn level(&self, minor: u32) -> Option<usize> {
        self.has(minor).then(|| self.cl(minor).level)
    }
    /// (lends, borrows) of class `minor`.
    pub fn lends_borrows(&self, minor: u32) -> Option<(u32, u32)> {
        self.has(minor).then(|| (self.cl(minor).lends, self.cl(minor).borrows))
    }
    /// The quantum of class `minor`.
    pub fn quantum(&self, minor: u32) -> Option<i32> {
        self.has(minor).then(|| self.cl(minor).quantum)
    }
    /// `direct_packets_stat`.
    pub fn direct_packets(&self) -> u32 {
        self.direct_pkts
    }

    /// The filter hook's half of `bind_tcf`: a filter whose result is class
    /// `classid` holds it (`qdisc_class_get`), so the class cannot be deleted
    /// ("HTB class in use"). Returns false when no such class exists (the kernel's
    /// bind then yields no class).
    pub fn bind_filter(&mut self, classid: u32) -> bool {
        match self.find_classid(classid) {
            Some(m) => {
                self.cl_mut(m).filter_cnt += 1;
                true
            }
            None => false,
        }
    }
    /// `unbind_tcf`: the filter no longer points at class `classid`.
    pub fn unbind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find_classid(classid) {
            let c = self.cl_mut(m);
            c.filter_cnt = c.filter_cnt.saturating_sub(1);
        }
    }

    /// Mirrors `htb_classify`:
    /// 1. `skb->priority` equal to the qdisc handle (`X:0`) → the direct queue;
    /// 2. `skb->priority` naming a leaf → that leaf; naming an inner class → start
    ///    with that class's filters, otherwise with the qdisc's own;
    /// 3. run the block (`tcf_classify`); its classid `X:0` → the direct queue; a
    ///    class of this qdisc that is a leaf → done; an inner class → continue with
    ///    that class's block; no match, an empty block or a classid that names no
    ///    class of this qdisc → step 4;
    /// 4. the class `X:default` if it exists and is a leaf, else the direct queue.
    ///
    /// A filter verdict of SHOT answers [`Target::Drop`], STOLEN/QUEUED/TRAP
    /// [`Target::Stolen`] (`htb_classify`'s CONFIG_NET_CLS_ACT switch).
    /// The kernel's loop has no bound: filters that lead from inner class to inner
    /// class in a cycle make it spin forever in softirq. Here a walk longer than the
    /// number of classes (which only a cycle can produce) answers [`Target::Drop`].
    pub fn classify(&self, pkt: &Packet, now: Instant) -> Target {
        if pkt.priority == self.handle {
            return Target::Direct;
        }
        let mut block = &self.block;
        if let Some(m) = self.find_classid(pkt.priority) {
            let c = self.cl(m);
            if c.level == 0 {
                return Target::Class(m);
            }
            block = &c.block;
        }
        let mut hops = 0usize;
        while let Some(v) = block.classify(pkt, now) {
            let res = match v {
                Verdict::Class(r) => r,
                Verdict::Shot => return Target::Drop,
                Verdict::Stolen => return Target::Stolen,
            };
            if res.classid == self.handle {
                return Target::Direct;
            }
            let Some(m) = self.find_classid(res.classid) else { break };
            let c = self.cl(m);
            if c.level == 0 {
                return Target::Class(m);
            }
            hops += 1;
            if hops > self.hash.elems {
                return Target::Drop;
            }
            block = &c.block;
        }
        match self.find_classid(self.handle | tc_h_min(self.defcls)) {
            Some(m) if self.cl(m).level == 0 => Target::Class(m),
            _ => Target::Direct,
        }
    }

    /// `tc_bind_tclass(q, …, classid, new_cl)` after a class was created: the filters
    /// of the qdisc's own block (u32: every key node of the tables with that proto's
    /// pref, as `u32_walk` visits them) that name `classid` now bind it.
    fn reverse_bind(&mut self, m: u32) {
        let classid = self.cl(m).classid;
        let mut n = 0u32;
        self.block.for_each_classid(&mut |c| n += (c == classid) as u32);
        let c = self.cl_mut(m);
        c.filter_cnt = c.filter_cnt.wrapping_add(n);
    }

    /// `tcf_block_put(cl->block)` of a deleted class: its protos are destroyed, and
    /// every filter result they held is unbound (`tcf_unbind_filter`). A u32 proto
    /// takes its root table's key nodes with it (all tables of the qdisc's u32 state
    /// when it was the last u32 proto).
    fn put_block(&mut self, block: Block) {
        let mut binds = Binds::default();
        block.put(&mut self.block, &mut binds);
        for c in binds.split().0 {
            self.unbind_filter(c);
        }
    }

    // ---- rows, feeds and the wait queue ------------------------------------------------

    /// `htb_add_class_to_row`: class `m` of `level`.
    fn add_class_to_row(&mut self, m: u32, level: usize, mask: u32) {
        self.row_mask[level] |= mask;
        for prio in bits(mask) {
            self.levels[level].hprio[prio].set.insert(m);
        }
    }

    /// `htb_remove_class_from_row`: a DRR position on the class moves to the next one.
    fn remove_class_from_row(&mut self, m: u32, level: usize, mask: u32) {
        let mut emptied = 0;
        for prio in bits(mask) {
            let hp = &mut self.levels[level].hprio[prio];
            if hp.ptr == Some(m) {
                hp.ptr = hp.set.next_after(m);
            }
            hp.set.remove(m);
            if hp.set.is_empty() {
                emptied |= 1 << prio;
            }
        }
        self.row_mask[level] &= !emptied;
    }

    /// `htb_activate_prios`: link the class into its parent's feeds while it may
    /// borrow, walking up; the first ancestor that can send goes into its row.
    fn activate_prios(&mut self, m: u32) {
        let c = self.cl(m);
        let (mut cl, mut mask, mut mode, mut level, mut parent) = (m, c.prio_activity, c.cmode, c.level, c.parent);
        while mode == Mode::MayBorrow && mask != 0 {
            let Some(p) = parent else { break };
            let pc = class_mut(&mut self.classes, p);
            let feeds = pc.inner.as_mut().expect("inner class");
            for prio in bits(mask) {
                let feed = &mut feeds[prio];
                if !feed.set.is_empty() {
                    // The parent is already active at this priority.
                    mask &= !(1 << prio);
                }
                feed.set.insert(cl);
            }
            pc.prio_activity |= mask;
            (cl, mode, level, parent) = (p, pc.cmode, pc.level, pc.parent);
        }
        if mode == Mode::CanSend && mask != 0 {
            self.add_class_to_row(cl, level, mask);
        }
    }

    /// `htb_deactivate_prios`: the reverse walk; a feed position on the class is
    /// forgotten (its classid kept to resume from).
    fn deactivate_prios(&mut self, m: u32) {
        let c = self.cl(m);
        let (mut cl, mut mask, mut mode, mut level, mut parent) = (m, c.prio_activity, c.cmode, c.level, c.parent);
        while mode == Mode::MayBorrow && mask != 0 {
            let Some(p) = parent else { break };
            let pc = class_mut(&mut self.classes, p);
            let feeds = pc.inner.as_mut().expect("inner class");
            let mm = mask;
            mask = 0;
            for prio in bits(mm) {
                let feed = &mut feeds[prio];
                if feed.ptr == Some(cl) {
                    feed.last_ptr_id = Some(cl);
                    feed.ptr = None;
                }
                feed.set.remove(cl);
                if feed.set.is_empty() {
                    mask |= 1 << prio;
                }
            }
            pc.prio_activity &= !mask;
            (cl, mode, level, parent) = (p, pc.cmode, pc.level, pc.parent);
        }
        if mode == Mode::CanSend && mask != 0 {
            self.remove_class_from_row(cl, level, mask);
        }
    }

    /// `htb_class_mode` (no hysteresis): the mode `diff` ns after the checkpoint, and
    /// for a mode other than CAN_SEND the time until it changes.
    fn class_mode(c: &Class, diff: i64) -> (Mode, i64) {
        let toks = c.ctokens + diff;
        if toks < 0 {
            return (Mode::CantSend, -toks);
        }
        let toks = c.tokens + diff;
        if toks >= 0 {
            return (Mode::CanSend, diff);
        }
        (Mode::MayBorrow, -toks)
    }

    /// The second half of `htb_change_class_mode` (the first is [`Htb::class_mode`]):
    /// class `m` goes from mode `old` to `new`, moving between feeds and rows if it
    /// is active.
    fn set_mode(&mut self, sch: &mut Sch, m: u32, old: Mode, new: Mode) {
        let c = class_mut(&mut self.classes, m);
        if new == Mode::CantSend {
            c.overlimits = c.overlimits.wrapping_add(1);
            sch.stats.overlimit();
        }
        if c.prio_activity == 0 {
            c.cmode = new;
            return;
        }
        if old != Mode::CantSend {
            self.deactivate_prios(m);
        }
        self.cl_mut(m).cmode = new;
        if new != Mode::CantSend {
            self.activate_prios(m);
        }
    }

    /// `htb_add_to_wait_tree`.
    fn add_to_wait_tree(&mut self, m: u32, delay: i64) {
        let now = self.now;
        let c = class_mut(&mut self.classes, m);
        let level = c.level;
        c.pq = Some(level as u8);
        let mut key = now + delay;
        if key == now {
            key += 1;
        }
        if self.near_ev_cache[level] > key {
            self.near_ev_cache[level] = key;
        }
        self.pq_seq += 1;
        self.levels[level].wait_pq.push(WaitEntry::new(key, self.pq_seq, m), &mut self.pq_pos);
    }

    fn erase_from_wait_tree(&mut self, m: u32) {
        if let Some(level) = self.cl_mut(m).pq.take() {
            let level = level as usize;
            let Htb { levels, pq_pos, .. } = self;
            levels[level].wait_pq.remove(m, pq_pos);
        }
    }

    /// `htb_activate`: a leaf with packets joins the schedule at its priority.
    fn activate(&mut self, m: u32) {
        let c = self.cl_mut(m);
        if c.prio_activity == 0 {
            c.prio_activity = 1 << c.prio;
            self.activate_prios(m);
        }
    }

    /// `htb_deactivate`.
    fn deactivate(&mut self, m: u32) {
        if self.cl(m).prio_activity == 0 {
            return;
        }
        self.deactivate_prios(m);
        self.cl_mut(m).prio_activity = 0;
    }

    // ---- accounting ---------------------------------------------------------------------

    /// `htb_charge_class`: charge `len` bytes found at `level` to leaf `m` and its
    /// ancestors.
    fn charge_class(&mut self, sch: &mut Sch, m: u32, level: usize, pkt: &Packet) {
        let now = self.now;
        let len = pkt.len;
        let mut x = m;
        loop {
            let c = class_mut(&mut self.classes, x);
            let diff = (now - c.t_c).min(MBUFFER_NS);
            if c.level >= level {
                if c.level == level {
                    c.lends = c.lends.wrapping_add(1);
                }
                // htb_accnt_tokens
                let mut toks = (diff + c.tokens).min(c.buffer);
                toks -= c.rate.l2t_ns(len) as i64;
                if toks <= -MBUFFER_NS {
                    toks = 1 - MBUFFER_NS;
                }
                c.tokens = toks;
            } else {
                c.borrows = c.borrows.wrapping_add(1);
                c.tokens += diff;
            }
            // htb_accnt_ctokens
            let mut toks = (diff + c.ctokens).min(c.cbuffer);
            toks -= c.ceil.l2t_ns(len) as i64;
            if toks <= -MBUFFER_NS {
                toks = 1 - MBUFFER_NS;
            }
            c.ctokens = toks;
            c.t_c = now;
            if c.level != 0 {
                c.bstats.sent(pkt);
            }
            let (old, parent) = (c.cmode, c.parent);
            let (new, delay) = Self::class_mode(c, 0);
            if old != new {
                self.set_mode(sch, x, old, new);
                if old != Mode::CanSend {
                    self.erase_from_wait_tree(x);
                }
                if new != Mode::CanSend {
                    self.add_to_wait_tree(x, delay);
                }
            }
            match parent {
                Some(p) => x = p,
                None => return,
            }
        }
    }

    /// `htb_do_events`: apply the mode changes due at this level; the next pending
    /// event time, or 0 when the queue is empty. (The kernel also stops after two
    /// jiffies of work; virtual time never runs out.)
    fn do_events(&mut self, sch: &mut Sch, level: usize) -> i64 {
        loop {
            let Htb { levels, pq_pos, now, classes, .. } = self;
            let Some(e) = levels[level].wait_pq.first(pq_pos) else { return 0 };
            if e.key > *now {
                return e.key;
            }
            let m = e.minor() as u32;
            levels[level].wait_pq.remove(m, pq_pos);
            let c = class_mut(classes, m);
            c.pq = None;
            let diff = (*now - c.t_c).min(MBUFFER_NS);
            let (old, (new, delay)) = (c.cmode, Self::class_mode(c, diff));
            if new != old {
                self.set_mode(sch, m, old, new);
            }
            if new != Mode::CanSend {
                self.add_to_wait_tree(m, delay);
            }
        }
    }

    // ---- dequeue ----------------------------------------------------------------------

    /// `htb_lookup_leaf`: follow the saved DRR positions from the row down through
    /// the feeds to a leaf.
    fn lookup_leaf(&mut self, level: usize, prio: usize) -> Option<u32> {
        if self.levels[level].hprio[prio].set.is_empty() {
            return None;
        }
        // The usual case first: every position on the way down is valid (none was
        // invalidated, none is past the end), so the walk only reads.
        let mut hp = &self.levels[level].hprio[prio];
        for _ in 0..TC_HTB_MAXDEPTH {
            let (Some(c), None) = (hp.ptr, hp.last_ptr_id) else { break };
            let cls = self.cl(c);
            match (cls.level, &cls.inner) {
                (0, _) => return Some(c),
                (_, Some(feeds)) => hp = &feeds[prio],
                _ => break,
            }
        }
        let mut stk = [PRef::Row(level); TC_HTB_MAXDEPTH + 1];
        let mut sp = 0usize;
        for _ in 0..65535 {
            let hp = self.hp(stk[sp], prio);
            if hp.ptr.is_none() {
                if let Some(id) = hp.last_ptr_id {
                    // Resume at the remembered class or the next one after it.
                    hp.ptr = hp.set.ceil(id);
                }
            }
            hp.last_ptr_id = None;
            match hp.ptr {
                None => {
                    // Past the end: rewind, and move the level above one step on.
                    hp.ptr = hp.set.first();
                    if sp > 0 {
                        sp -= 1;
                        let up = self.hp(stk[sp], prio);
                        let p = up.ptr?;
                        up.ptr = up.set.next_after(p);
                    }
                }
                Some(c) => {
                    if self.cl(c).level == 0 {
                        return Some(c);
                    }
                    sp += 1;
                    if sp >= stk.len() {
                        return None;
                    }
                    stk[sp] = PRef::Feed(c);
                }
            }
        }
        None
    }

    /// `htb_next_rb_node` on the DRR position that led to leaf `c` at `level`.
    fn advance(&mut self, level: usize, prio: usize, c: u32) {
        let hp = if level > 0 {
            let Some(p) = self.cl(c).parent else { return };
            self.hp(PRef::Feed(p), prio)
        } else {
            &mut self.levels[0].hprio[prio]
        };
        if let Some(x) = hp.ptr {
            hp.ptr = hp.set.next_after(x);
        }
    }

    /// Leaf `m`'s qdisc.
    fn leaf_q(&mut self, m: u32) -> &mut Node {
        class_mut(&mut self.classes, m).leaf.as_mut().expect("leaf")
    }

    /// After an operation on leaf `m`'s qdisc, take its pending backlog reduction
    /// (`qdisc_tree_reduce_backlog` from the leaf): our qlen/backlog/drops, the report
    /// upwards, and `htb_qlen_notify` (deactivate) when the leaf became empty.
    /// Returns the leaf's qlen.
    fn leaf_reduced(&mut self, sch: &mut Sch, m: u32) -> u32 {
        let leaf = self.leaf_q(m);
        let r = leaf.take_reduce();
        let qlen = leaf.stats().qlen;
        if !r.is_zero() {
            sch.child_reduced(r);
            if qlen == 0 {
                self.deactivate(m);
            }
        }
        qlen
    }

    fn leaf_qlen(&self, m: u32) -> u32 {
        self.cl(m).leaf.as_ref().map_or(0, |n| n.stats().qlen)
    }

    /// `htb_dequeue_tree`: one packet at (prio, level), round robin over the leaves;
    /// `Empty` when none can send. (The leaf's answer is passed on as it came, never
    /// unpacked and rebuilt: each copy of a packet just written is a store-forwarding
    /// stall.)
    fn dequeue_tree(&mut self, sch: &mut Sch, prio: usize, level: usize, now: Instant) -> Dequeued {
        let mut cl = self.lookup_leaf(level, prio);
        let mut start = cl;
        loop {
            let Some(c) = cl else { return Dequeued::Empty };
            if self.leaf_qlen(c) == 0 {
                // An empty active leaf (its qdisc dropped, or was replaced): skip it.
                self.deactivate(c);
                if self.row_mask[level] & (1 << prio) == 0 {
                    return Dequeued::Empty;
                }
                let next = self.lookup_leaf(level, prio);
                if cl == start {
                    start = next;
                }
                cl = next;
                continue;
            }
            let d = self.leaf_q(c).dequeue(now);
            let qlen = self.leaf_reduced(sch, c);
            match &d {
                Dequeued::Packet(pkt) => {
                    let cls = self.cl_mut(c);
                    cls.bstats.sent(pkt);
                    cls.deficit[level] = cls.deficit[level].wrapping_sub(pkt.len as i32);
                    if cls.deficit[level] < 0 {
                        cls.deficit[level] = cls.deficit[level].wrapping_add(cls.quantum);
                        self.advance(level, prio, c);
                    }
                    if qlen == 0 {
                        self.deactivate(c);
                    }
                    self.charge_class(sch, c, level, pkt);
                    return d;
                }
                Dequeued::Throttled { until } => {
                    // A non-work-conserving leaf: its own watchdog wakes the device.
                    let until = *until;
                    self.child_wake = Some(self.child_wake.map_or(until, |w| w.min(until)));
                }
                Dequeued::Empty => {}
            }
            self.advance(level, prio, c);
            cl = self.lookup_leaf(level, prio);
            if cl == start {
                return Dequeued::Empty;
            }
        }
    }

    /// `htb_dequeue`.
    fn dequeue_htb(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        if let Some(p) = self.direct.pop_front() {
            sch.stats.sent(&p);
            sch.stats.unqueued(p.len);
            self.watchdog = None;
            return Dequeued::Packet(p);
        }
        if sch.stats.qlen == 0 {
            self.watchdog = None;
            return Dequeued::Empty;
        }
        self.now = now.as_nanos() as i64;
        self.child_wake = None;
        let mut next_event = self.now + 5 * NSEC_PER_SEC;
        for level in 0..TC_HTB_MAXDEPTH {
            let mut event = self.near_ev_cache[level];
            if self.now >= event {
                event = self.do_events(sch, level);
                if event == 0 {
                    event = self.now + NSEC_PER_SEC;
                }
                self.near_ev_cache[level] = event;
            }
            next_event = next_event.min(event);
            let mask = self.row_mask[level];
            for prio in bits(mask) {
                let d = self.dequeue_tree(sch, prio, level, now);
                if let Dequeued::Packet(p) = &d {
                    sch.stats.sent(p);
                    sch.stats.unqueued(p.len);
                    self.watchdog = None;
                    return d;
                }
            }
        }
        let mut until = Instant::from_nanos(next_event.max(0) as u64);
        if let Some(w) = self.child_wake {
            until = until.min(w);
        }
        self.watchdog = Some(until);
        Dequeued::Throttled { until }
    }

    // ---- class management ---------------------------------------------------------------

    /// A fresh default leaf qdisc for class `classid`: `qdisc_create_dflt(pfifo)`,
    /// handle 0, hashed invisible.
    fn default_leaf(classid: u32, dev: &DevInfo) -> Node {
        Node::new(0, classid, Box::new(Fifo::new(FifoKind::Pfifo, None, dev))).invisible()
    }

    /// `qdisc_purge_queue` of leaf `m`'s qdisc: reset it and report what it held
    /// (`qdisc_tree_reduce_backlog`: our qlen/backlog fall, drops rise).
    fn purge_leaf(&mut self, sch: &mut Sch, m: u32, now: Instant) {
        let Some(leaf) = self.cl_mut(m).leaf.as_mut() else { return };
        sch.child_purged(leaf.stats());
        leaf.reset(now);
        let _ = leaf.take_reduce();
    }

    /// Mirrors `htb_change_class`.
    #[allow(clippy::too_many_arguments)]
    fn change_class_impl(
        &mut self,
        sch: &mut Sch,
        classid: u32,
        parentid: u32,
        exists: bool,
        o: &HtbClassOpt,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        self.dev = dev.clone();
        let parent = if parentid == TC_H_ROOT { None } else { self.find_classid(parentid) };
        if o.rate.rate == 0 || o.ceil.rate == 0 {
            return Err(TcError::invalid());
        }
        let m = tc_h_min(classid);
        if !exists {
            if classid == 0 || tc_h_maj(classid ^ self.handle) != 0 || self.has(m) {
                return Err(TcError::invalid());
            }
            if let Some(p) = parent {
                if let Some(gp) = self.cl(p).parent {
                    if self.cl(gp).level < 2 {
                        return Err(TcError::kernel("sch_htb: tree is too deep"));
                    }
                }
            }
            let leaf = Self::default_leaf(classid, dev);
            if let Some(p) = parent.filter(|&p| self.cl(p).level == 0) {
                // The parent stops being a leaf: its queue is purged and its qdisc goes.
                self.purge_leaf(sch, p, now);
                self.deactivate(p);
                if self.cl(p).cmode != Mode::CanSend {
                    self.erase_from_wait_tree(p);
                    self.cl_mut(p).cmode = Mode::CanSend;
                }
                let plevel = self.cl(p).parent.map_or(TC_HTB_MAXDEPTH, |gp| self.cl(gp).level) - 1;
                let pc = self.cl_mut(p);
                pc.level = plevel;
                pc.leaf = None;
                pc.deficit = [0; TC_HTB_MAXDEPTH];
                pc.inner = Some(Box::default());
            }
            let c = Class {
                classid,
                parent,
                tokens: ticks2ns(o.buffer),
                ctokens: ticks2ns(o.cbuffer),
                t_c: now.as_nanos() as i64,
                leaf: Some(leaf),
                block: Block::new(self.handle),
                ..Class::vacant()
            };
            if self.pq_pos.len() <= m as usize {
                self.classes.resize_with(m as usize / PAGE + 1, || None);
                self.pq_pos.resize(m as usize + 1, 0);
            }
            let page = self.classes[m as usize / PAGE].get_or_insert_with(ClassPage::new);
            page.slots[m as usize % PAGE] = c;
            page.present |= 1 << (m as usize % PAGE);
            self.hash.insert(classid);
            if let Some(p) = parent {
                self.cl_mut(p).children += 1;
            }
            // tc_ctl_tclass: a new class is reverse-bound to the filters naming it.
            self.reverse_bind(m);
        }
        let r2q = self.rate2quantum as u64;
        let c = self.cl_mut(m);
        c.rate = PschedRatecfg::from_spec(&o.rate, o.rate64.unwrap_or(0));
        c.ceil = PschedRatecfg::from_spec(&o.ceil, o.ceil64.unwrap_or(0));
        let mut warn = 0;
        if c.level == 0 {
            c.quantum = (c.rate.rate_bytes_ps / r2q).min(i32::MAX as u64) as i32;
            if o.quantum == 0 && c.quantum < 1000 {
                warn = -1;
                c.quantum = 1000;
            }
            if o.quantum == 0 && c.quantum > 200_000 {
                warn = 1;
                c.quantum = 200_000;
            }
            if o.quantum != 0 {
                c.quantum = o.quantum as i32;
            }
            c.prio = o.prio.min(TC_HTB_NUMPRIO as u32 - 1) as u8;
        }
        c.buffer = ticks2ns(o.buffer);
        c.cbuffer = ticks2ns(o.cbuffer);
        self.hash.grow();
        Ok((warn != 0).then(|| {
            format!(
                "sch_htb: quantum of class {:X} is {}. Consider r2q change.",
                classid,
                if warn == -1 { "small" } else { "big" }
            )
        }))
    }

    /// Mirrors `htb_delete`.
    fn delete_impl(&mut self, sch: &mut Sch, m: u32, now: Instant) -> Result<(), TcError> {
        if !self.has(m) {
            return Err(TcError::errno(Errno::ENOENT));
        }
        let (children, filters, level, parent) = {
            let c = self.cl(m);
            (c.children, c.filter_cnt, c.level, c.parent)
        };
        if children > 0 || filters > 0 {
            return Err(TcError::with_errno("HTB class in use", Errno::EBUSY));
        }
        let last_child = level == 0 && parent.is_some_and(|p| self.cl(p).children <= 1);
        let new_q = last_child.then(|| {
            let p = parent.expect("last child has a parent");
            // htb_parent_to_leaf's qdisc is never qdisc_hash_add()ed: dumps skip it.
            Self::default_leaf(self.cl(p).classid, &self.dev).unhashed()
        });
        if level == 0 {
            self.purge_leaf(sch, m, now);
        }
        let classid = self.cl(m).classid;
        self.hash.remove(classid);
        if let Some(p) = parent {
            self.cl_mut(p).children -= 1;
        }
        self.deactivate(m);
        if self.cl(m).cmode != Mode::CanSend {
            self.erase_from_wait_tree(m);
        }
        if let (Some(p), Some(q)) = (parent, new_q) {
            // htb_parent_to_leaf: back to a leaf with full buckets.
            if self.cl(p).cmode != Mode::CanSend {
                self.erase_from_wait_tree(p);
            }
            let pc = self.cl_mut(p);
            pc.level = 0;
            pc.inner = None;
            pc.deficit = [0; TC_HTB_MAXDEPTH];
            pc.leaf = Some(q);
            pc.tokens = pc.buffer;
            pc.ctokens = pc.cbuffer;
            pc.t_c = now.as_nanos() as i64;
            pc.cmode = Mode::CanSend;
        }
        // htb_destroy_class: the class's filters go with it.
        let page = self.classes[m as usize / PAGE].as_mut().expect("class exists");
        page.present &= !(1 << (m as usize % PAGE));
        let gone = std::mem::replace(&mut page.slots[m as usize % PAGE], Class::vacant());
        self.put_block(gone.block);
        Ok(())
    }
}

/// Class `m` by minor, if it exists, borrowing only the class table (so the caller
/// may touch the qdisc's other fields meanwhile).
fn find_mut(classes: &mut [Option<Box<ClassPage>>], m: u32) -> Option<&mut Class> {
    classes.get_mut(m as usize / PAGE)?.as_mut()?.get_mut(m as usize % PAGE)
}

/// Class `m`, which exists (see [`find_mut`]).
fn class_mut(classes: &mut [Option<Box<ClassPage>>], m: u32) -> &mut Class {
    find_mut(classes, m).expect("class exists")
}

/// The set bits of a priority mask, lowest first (`ffz(~mask)` loops).
fn bits(mask: u32) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        (m != 0).then(|| {
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            b
        })
    })
}

/// An ordered set of class minors (0..=0xFFFF) — the kernel's per-row/per-feed
/// rb-trees keyed by classid (one qdisc's classes share the major, so minor order is
/// classid order). Three levels of bitmaps: `top` marks the non-empty pages, each
/// page's `mid` its non-empty words, and the words hold one bit per minor. Pages
/// (4096 minors, 520 bytes) are allocated on first use and kept, so a warm set never
/// allocates; successor queries are a few `trailing_zeros`.
#[derive(Clone, Debug, Default)]
pub(crate) struct MinorSet {
    top: u16,
    len: u32,
    pages: [Option<Box<MinorPage>>; 16],
}

#[derive(Clone, Debug)]
struct MinorPage {
    mid: u64,
    words: [u64; 64],
}

/// Bits of `w` at positions ≥ `from` (`from` may be 64: none).
fn bits_from(w: u64, from: u32) -> u64 {
    if from >= 64 {
        0
    } else {
        w & (!0u64 << from)
    }
}

impl MinorSet {
    fn split(x: u32) -> (usize, usize, u32) {
        debug_assert!(x <= 0xFFFF);
        ((x >> 12) as usize, ((x >> 6) & 63) as usize, x & 63)
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len as usize
    }
    #[cfg(test)]
    fn contains(&self, x: u32) -> bool {
        let (p, w, b) = Self::split(x);
        self.pages[p].as_ref().is_some_and(|pg| pg.words[w] >> b & 1 != 0)
    }
    pub(crate) fn insert(&mut self, x: u32) {
        let (p, w, b) = Self::split(x);
        let pg = self.pages[p].get_or_insert_with(|| Box::new(MinorPage { mid: 0, words: [0; 64] }));
        if pg.words[w] >> b & 1 == 0 {
            self.len += 1;
            pg.words[w] |= 1 << b;
            pg.mid |= 1 << w;
            self.top |= 1 << p;
        }
    }
    pub(crate) fn remove(&mut self, x: u32) {
        let (p, w, b) = Self::split(x);
        let Some(pg) = self.pages[p].as_mut() else { return };
        if pg.words[w] >> b & 1 == 0 {
            return;
        }
        self.len -= 1;
        pg.words[w] &= !(1 << b);
        if pg.words[w] == 0 {
            pg.mid &= !(1 << w);
            if pg.mid == 0 {
                self.top &= !(1 << p);
            }
        }
    }
    /// The smallest member of page `p` (which must be non-empty).
    fn page_first(&self, p: usize) -> u32 {
        let pg = self.pages[p].as_ref().expect("marked page");
        let w = pg.mid.trailing_zeros();
        ((p as u32) << 12) | (w << 6) | pg.words[w as usize].trailing_zeros()
    }
    /// `rb_first`.
    pub(crate) fn first(&self) -> Option<u32> {
        (self.top != 0).then(|| self.page_first(self.top.trailing_zeros() as usize))
    }
    /// The smallest member ≥ `x` (`htb_id_find_next_upper`).
    pub(crate) fn ceil(&self, x: u32) -> Option<u32> {
        if x > 0xFFFF {
            return None;
        }
        let (p, w, b) = Self::split(x);
        if let Some(pg) = self.pages[p].as_ref() {
            let in_word = bits_from(pg.words[w], b);
            if in_word != 0 {
                return Some((x & !63) | in_word.trailing_zeros());
            }
            let words = bits_from(pg.mid, w as u32 + 1);
            if words != 0 {
                let w2 = words.trailing_zeros();
                return Some(((p as u32) << 12) | (w2 << 6) | pg.words[w2 as usize].trailing_zeros());
            }
        }
        let pages = bits_from(self.top as u64, p as u32 + 1);
        (pages != 0).then(|| self.page_first(pages.trailing_zeros() as usize))
    }
    /// `rb_next`: the member after `x`.
    pub(crate) fn next_after(&self, x: u32) -> Option<u32> {
        self.ceil(x + 1)
    }
}

/// One wait-queue entry: a class changes mode at `key`. `tie` is the insertion
/// number above the class's 16-bit minor, so equal keys pop in insertion order, as
/// the kernel's rb-tree gives them (wrong only after 2^48 insertions: nine years at
/// a million a second). Two words are built in registers and stored whole; a
/// three-word entry went through the stack and was copied back in pieces that
/// straddled its stores, which stalls on store forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct WaitEntry {
    key: i64,
    tie: u64,
}

impl WaitEntry {
    fn new(key: i64, seq: u64, minor: u32) -> WaitEntry {
        WaitEntry { key, tie: seq << 16 | (minor & 0xffff) as u64 }
    }
    fn minor(self) -> usize {
        (self.tie & 0xffff) as usize
    }
}

/// log2 of a wait-queue block, ns: keys are grouped in blocks of ~1 µs.
const BLOCK_SHIFT: u32 = 10;
/// Far buckets: block numbers differ from the base's in bit 0 … 63 − BLOCK_SHIFT.
const FAR_BUCKETS: usize = 64 - BLOCK_SHIFT as usize;
/// `pos` of an entry held in a far bucket: the flag, the bucket, the index.
const POS_FAR: u32 = 1 << 31;
const POS_IDX_BITS: u32 = 17;

/// A level's wait queue (`q->hlevel[level].wait_pq`): the classes that are not
/// CAN_SEND, smallest (key, insertion) first — the order the kernel's rb-tree gives, equal
/// keys in insertion order. (key, tie) pairs are unique, so the minimum, the only
/// entry ever consumed in order, is exactly the rb-tree's `rb_first`.
///
/// A radix heap over ~1 µs blocks of key with a binary heap at the bottom. Entries
/// whose block is at most `base` sit in `near`, a min-heap on (key, tie); a later
/// block goes, unordered, to the far bucket numbered by the highest bit in which it
/// differs from `base`. Far entries are never compared until `near` runs dry: then
/// the lowest non-empty bucket is redistributed around its smallest block, which
/// becomes the new `base` (each entry only ever moves to a lower bucket). With
/// thousands of borrowing leaves, most waits are long (a bucket deep in debt) and are
/// erased again when the class sends: in a far bucket insert and erase are O(1),
/// where a heap of every class paid two sifts through thousands of entries.
///
/// Each queued class's place is kept in one dense array indexed by minor (`pos`,
/// [`Htb::pq_pos`]): a heap slot, or `POS_FAR | bucket << 17 | index`.
#[derive(Clone, Debug)]
struct WaitQueue {
    near: Vec<WaitEntry>,
    far: [Vec<WaitEntry>; FAR_BUCKETS],
    /// Bit per non-empty far bucket.
    far_mask: u64,
    /// The block number that divides `near` from `far`.
    base: u64,
}

impl Default for WaitQueue {
    fn default() -> Self {
        WaitQueue { near: Vec::new(), far: std::array::from_fn(|_| Vec::new()), far_mask: 0, base: 0 }
    }
}

impl WaitQueue {
    fn block(key: i64) -> u64 {
        key.max(0) as u64 >> BLOCK_SHIFT
    }

    /// `rb_first`: the smallest (key, tie), after pulling the nearest far bucket
    /// into `near` when it is empty.
    fn first(&mut self, pos: &mut [u32]) -> Option<WaitEntry> {
        if self.near.is_empty() {
            if self.far_mask == 0 {
                return None;
            }
            let i = self.far_mask.trailing_zeros() as usize;
            self.far_mask &= !(1 << i);
            let mut bucket = std::mem::take(&mut self.far[i]);
            self.base = bucket.iter().map(|e| Self::block(e.key)).min().expect("marked bucket");
            for e in bucket.drain(..) {
                self.push(e, pos);
            }
            self.far[i] = bucket;
        }
        self.near.first().copied()
    }

    #[inline]
    fn push(&mut self, e: WaitEntry, pos: &mut [u32]) {
        let b = Self::block(e.key);
        if b <= self.base {
            self.near.push(e);
            self.sift_up(self.near.len() - 1, e, pos);
        } else {
            let i = 63 - (b ^ self.base).leading_zeros() as usize;
            let v = &mut self.far[i];
            pos[e.minor()] = POS_FAR | (i as u32) << POS_IDX_BITS | v.len() as u32;
            v.push(e);
            self.far_mask |= 1 << i;
        }
    }

    /// Erase class `minor` (which must be queued).
    fn remove(&mut self, minor: u32, pos: &mut [u32]) {
        let p = pos[minor as usize];
        if p & POS_FAR == 0 {
            self.remove_near(p as usize, pos);
            return;
        }
        let i = ((p & !POS_FAR) >> POS_IDX_BITS) as usize;
        let j = (p & ((1 << POS_IDX_BITS) - 1)) as usize;
        let v = &mut self.far[i];
        v.swap_remove(j);
        if let Some(moved) = v.get(j) {
            pos[moved.minor()] = p;
        }
        if v.is_empty() {
            self.far_mask &= !(1 << i);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.near.len() + self.far.iter().map(Vec::len).sum::<usize>()
    }

    // The near heap.
    fn set(&mut self, i: usize, e: WaitEntry, pos: &mut [u32]) {
        self.near[i] = e;
        pos[e.minor()] = i as u32;
    }
    /// Move `e`, which is at `i`, up to its place. (`e` is passed in, not read back:
    /// reading an entry just written piecewise stalls on store forwarding.)
    fn sift_up(&mut self, mut i: usize, e: WaitEntry, pos: &mut [u32]) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.near[parent] <= e {
                break;
            }
            let pe = self.near[parent];
            self.set(i, pe, pos);
            i = parent;
        }
        self.set(i, e, pos);
    }
    /// Move `e`, which is at `i`, down to its place.
    fn sift_down(&mut self, mut i: usize, e: WaitEntry, pos: &mut [u32]) {
        let n = self.near.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && self.near[r] < self.near[l] { r } else { l };
            if e <= self.near[c] {
                break;
            }
            let ce = self.near[c];
            self.set(i, ce, pos);
            i = c;
        }
        self.set(i, e, pos);
    }
    fn remove_near(&mut self, i: usize, pos: &mut [u32]) {
        let last = self.near.pop().expect("queued entry");
        if i < self.near.len() {
            self.sift_down(i, last, pos);
            let j = pos[last.minor()] as usize;
            self.sift_up(j, last, pos);
        }
    }
}

impl Qdisc for Htb {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `htb_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        let len = pkt.len;
        match self.classify(&pkt, now) {
            Target::Direct => {
                if (self.direct.len() as u64) < self.direct_qlen as u64 {
                    self.direct.push_back(pkt);
                    self.direct_pkts = self.direct_pkts.wrapping_add(1);
                } else {
                    sch.stats.dropped();
                    return Enqueued::Dropped;
                }
            }
            Target::Drop => {
                sch.stats.dropped();
                return Enqueued::Dropped;
            }
            Target::Stolen => return Enqueued::Stolen,
            Target::Class(m) => {
                let r = self.leaf_q(m).enqueue(pkt, now);
                self.leaf_reduced(sch, m);
                if r != Enqueued::Success {
                    if r.counts_as_drop() {
                        sch.stats.dropped();
                        let c = self.cl_mut(m);
                        c.drops = c.drops.wrapping_add(1);
                    }
                    return r;
                }
                self.activate(m);
            }
        }
        sch.stats.queued(len);
        Enqueued::Success
    }

    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.dequeue_htb(sch, now)
    }

    // peek: `qdisc_peek_dequeued` (the default).

    /// Mirrors `htb_reset`: leaves reset, every class CAN_SEND and inactive, rows,
    /// feeds and wait queues emptied; buckets and the event cache are kept.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for c in self.classes.iter_mut().flatten().flat_map(|p| p.iter_mut()) {
            if c.level > 0 {
                c.inner = Some(Box::default());
            } else if let Some(l) = c.leaf.as_mut() {
                l.reset(now);
                let _ = l.take_reduce();
            }
            c.prio_activity = 0;
            c.cmode = Mode::CanSend;
            c.pq = None;
        }
        self.direct.clear();
        self.levels = Default::default();
        self.row_mask = [0; TC_HTB_MAXDEPTH];
        self.watchdog = None;
    }

    /// htb has no `change` op.
    fn change(&mut self, _sch: &mut Sch, _opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        Err(TcError::kernel("Change operation not supported by specified qdisc"))
    }

    /// What `htb_dump` sends, printed by q_htb.c `htb_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.int("r2q", format_args!("r2q {}", self.rate2quantum as i32), self.rate2quantum as i32 as i64);
        let def = if self.defcls == 0 { "0".to_string() } else { format!("{:#x}", self.defcls) };
        out.string("default", format_args!(" default {def}"), &def);
        out.uint(
            "direct_packets_stat",
            format_args!(" direct_packets_stat {}", self.direct_pkts),
            self.direct_pkts as u64,
        );
        if out.details() {
            let v = format!("{}.{}", HTB_VER >> 16, HTB_VER & 0xffff);
            out.string("ver", format_args!(" ver {v}"), &v);
        }
        out.uint("direct_qlen", format_args!(" direct_qlen {}", self.direct_qlen), self.direct_qlen as u64);
    }

    fn as_classful(&self) -> Option<&dyn Classful> {
        Some(self)
    }
    fn as_classful_mut(&mut self) -> Option<&mut dyn Classful> {
        Some(self)
    }

    /// When the kernel's watchdog would fire after the last dequeue that found
    /// nothing sendable (None once a packet was sent, or when empty).
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

impl Classful for Htb {
    /// `htb_walk`: the class hash, bucket by bucket.
    fn class_minors(&self) -> Vec<u32> {
        self.hash.walk().map(tc_h_min).collect()
    }
    fn find(&self, minor: u32) -> bool {
        self.has(minor)
    }
    /// `htb_leaf`: inner classes have none.
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.get(minor)?.leaf.as_ref()
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.get_mut(minor)?.leaf.as_mut()
    }

    /// Mirrors `htb_graft`: only leaves take a qdisc (EINVAL otherwise); None means a
    /// fresh default pfifo. The old qdisc is returned for the caller to purge; the
    /// class, whose new qdisc is empty, leaves the schedule (`htb_qlen_notify`).
    fn graft(&mut self, _sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        if !self.has(minor) {
            return Err(TcError::kernel("Specified class not found"));
        }
        if self.cl(minor).level > 0 {
            return Err(TcError::invalid());
        }
        self.dev = dev.clone();
        let classid = self.cl(minor).classid;
        let new = new.unwrap_or_else(|| Self::default_leaf(classid, dev));
        let old = self.cl_mut(minor).leaf.replace(new);
        self.deactivate(minor);
        Ok(old)
    }

    fn change_class(
        &mut self,
        sch: &mut Sch,
        classid: u32,
        parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        let o = opts.ok_or_else(TcError::invalid)?.of()?;
        self.change_class_impl(sch, classid, parent, exists, o, dev, now)
    }

    fn delete_class(&mut self, sch: &mut Sch, minor: u32, now: Instant) -> Result<(), TcError> {
        self.delete_impl(sch, minor, now)
    }

    /// Mirrors `htb_dump_class_stats`: the class's own bstats, drops and
    /// overlimits; qlen/backlog from the leaf qdisc.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        if !self.has(minor) {
            return Some(Stats::default());
        }
        let c = self.cl(minor);
        let (qlen, backlog) = c.leaf.as_ref().map_or((0, 0), |n| (n.stats().qlen, n.stats().backlog));
        Some(Stats {
            bytes: c.bstats.bytes,
            packets: c.bstats.packets,
            qlen,
            backlog,
            drops: c.drops,
            requeues: 0,
            overlimits: c.overlimits,
        })
    }

    /// What `htb_dump_class` sends, printed by q_htb.c `htb_print_opt`.
    fn dump_class(&self, minor: u32, out: &mut Out) {
        if !self.has(minor) {
            return;
        }
        let c = self.cl(minor);
        let (details, raw) = (out.details(), out.raw());
        let rspec = c.rate.getrate();
        let cspec = c.ceil.getrate();
        let (rate64, ceil64) = (c.rate.rate_bytes_ps, c.ceil.rate_bytes_ps);
        let (bticks, cticks) = (ns2ticks(c.buffer) as u32, ns2ticks(c.cbuffer) as u32);
        if c.level == 0 {
            out.int("prio", format_args!("prio {} ", c.prio as i32), c.prio as i32 as i64);
            if details {
                out.int("quantum", format_args!("quantum {} ", c.quantum), c.quantum as i64);
            }
        }
        out.rate("rate", "rate ", rate64, " ");
        if rspec.overhead != 0 {
            out.uint("overhead", format_args!("overhead {} ", rspec.overhead), rspec.overhead as u64);
        }
        let buffer = calc_xmitsize(rate64, bticks);
        out.rate("ceil", "ceil ", ceil64, " ");
        let cbuffer = calc_xmitsize(ceil64, cticks);
        if rspec.linklayer != LinkLayer::Ethernet || details {
            out.string("linklayer", format_args!("linklayer {} ", rspec.linklayer.name()), rspec.linklayer.name());
        }
        if details {
            out.size("burst", "burst ", buffer, "/");
            let cell = 1u32 << rspec.cell_log;
            out.uint("burst_cell", format_args!("{cell}"), cell as u64);
            out.size("mpu_rate", "mpu ", rspec.mpu as u32, " ");
            out.size("cburst", "cburst ", cbuffer, "/");
            let ccell = 1u32 << cspec.cell_log;
            out.uint("cburst_cell", format_args!("{ccell}"), ccell as u64);
            out.size("mpu_ceil", "mpu ", cspec.mpu as u32, " ");
            out.int("level", format_args!("level {} ", c.level), c.level as i64);
        } else {
            out.size("burst", "burst ", buffer, " ");
            out.size("cburst", "cburst ", cbuffer, "");
        }
        if raw {
            out.fp(format_args!("buffer [{bticks:08x}] cbuffer [{cticks:08x}] "));
        }
    }

    /// `struct tc_htb_xstats` as q_htb.c `htb_print_xstats` prints it; tokens in
    /// ticks, clamped to int.
    fn dump_class_xstats(&self, minor: u32, out: &mut Out) {
        if !self.has(minor) {
            return;
        }
        let c = self.cl(minor);
        let clamp = |ns: i64| ns2ticks(ns).clamp(i32::MIN as i64, i32::MAX as i64);
        out.uint("lended", format_args!(" lended: {} ", c.lends), c.lends as u64);
        out.uint("borrowed", format_args!("borrowed: {} ", c.borrows), c.borrows as u64);
        out.uint("giants", format_args!("giants: {}", c.giants), c.giants as u64);
        out.nl();
        let (t, ct) = (clamp(c.tokens), clamp(c.ctokens));
        out.int("tokens", format_args!(" tokens: {t} "), t);
        out.int("ctokens", format_args!("ctokens: {ct}"), ct);
        out.nl();
    }

    /// `htb_tcf_block`: the qdisc's block for minor 0, else the class's.
    fn block(&self, minor: u32) -> Option<&Block> {
        if minor == 0 {
            return Some(&self.block);
        }
        self.get(minor).map(|c| &c.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        if minor == 0 {
            return Some(&mut self.block);
        }
        self.get_mut(minor).map(|c| &mut c.block)
    }
    /// `htb_bind_filter`.
    fn bind_filter(&mut self, classid: u32) {
        Htb::bind_filter(self, classid);
    }
    /// `htb_unbind_filter`.
    fn unbind_filter(&mut self, classid: u32) {
        Htb::unbind_filter(self, classid);
    }

    /// `tcm_parent` of `htb_dump_class`: the parent class, or TC_H_ROOT.
    fn class_parent(&self, minor: u32) -> Option<u32> {
        let c = self.get(minor)?;
        Some(c.parent.map_or(TC_H_ROOT, |p| self.cl(p).classid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Reduce;
    use crate::testing::{argv, dev, held, t};

    const H: u32 = 0x1_0000;
    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000_000_000;

    fn qopt(s: &str) -> Result<HtbOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn copt(s: &str) -> Result<HtbClassOpt, TcError> {
        let v = argv(s);
        parse_class(&mut Args::new(&v))
    }
    fn htb(s: &str) -> Node<Htb> {
        held(Htb::new(&qopt(s).unwrap(), &dev(), H, TC_H_ROOT, t(0)).unwrap())
    }
    /// `class add … parent H:parent classid H:minor htb OPTS` (parent 0 = the qdisc).
    fn add(q: &mut Node<Htb>, parent: u32, minor: u32, opts: &str, now: u64) -> Result<Option<String>, TcError> {
        let o = Opts::new(copt(opts).unwrap());
        q.change_class(H | minor, H | parent, false, Some(&o), &dev(), t(now))
    }
    fn change(q: &mut Node<Htb>, minor: u32, opts: &str, now: u64) -> Result<Option<String>, TcError> {
        let o = Opts::new(copt(opts).unwrap());
        q.change_class(H | minor, 0, true, Some(&o), &dev(), t(now))
    }
    fn pkt(id: u64, len: u32, classid: u32) -> Packet {
        Packet::new(id, len).with_priority(classid)
    }
    fn leaf_qlen(q: &Htb, minor: u32) -> u32 {
        q.leaf(minor).unwrap().stats().qlen
    }

    // ---- parsing and printing -------------------------------------------------------------

    #[test]
    fn qdisc_options_parse_like_tc() {
        assert_eq!(qopt("").unwrap(), HtbOpt::default());
        let o = qopt("default 1ff r2q 5 direct_qlen 7 debug 0123").unwrap();
        assert_eq!((o.defcls, o.rate2quantum, o.direct_qlen, o.debug), (0x1ff, 5, Some(7), 0b11_10_01_00));
        assert_eq!(qopt("default 0x10").unwrap().defcls, 0x10);
        assert_eq!(
            qopt("def 10 r 2 dir 3 off").unwrap(),
            HtbOpt { defcls: 0x10, rate2quantum: 2, direct_qlen: Some(3), offload: true, ..HtbOpt::default() }
        );
        assert_eq!(qopt("r2q abc").unwrap_err(), TcError::tc(format!("Illegal \"r2q\"\n{USAGE}")));
        assert_eq!(qopt("direct_qlen -1").unwrap_err(), TcError::tc(format!("Illegal \"direct_qlen\"\n{USAGE}")));
        assert_eq!(qopt("foo").unwrap_err(), TcError::tc(format!("What is \"foo\"?\n{USAGE}")));
        assert_eq!(qopt("r2q").unwrap_err(), TcError::incomplete());
    }

    #[test]
    fn class_options_parse_like_tc() {
        let o = copt("rate 1mbit").unwrap();
        assert_eq!((o.rate.rate, o.ceil.rate), (125_000, 125_000));
        // burst = rate/1e9 + mtu = 1600 bytes = 12.8 ms = 200000 ticks.
        assert_eq!((o.buffer, o.cbuffer), (200_000, 200_000));
        assert_eq!((o.rate.cell_log, o.rate.cell_align, o.quantum, o.prio), (3, -1, 0, 0));
        let o =
            copt("rate 10gbit ceil 100gbit prio 3 quantum 1500 mpu 64 overhead 4 linklayer atm burst 10k/16").unwrap();
        assert_eq!((o.rate.rate, o.rate64, o.ceil64), (1_250_000_000, None, Some(12_500_000_000)));
        assert_eq!(o.ceil.rate, u32::MAX);
        assert_eq!((o.prio, o.quantum, o.rate.mpu, o.ceil.overhead, o.rate.cell_log), (3, 1500, 64, 4, 4));
        assert_eq!(o.rate.linklayer, LinkLayer::Atm);
        // `rate 8bit`: the default burst's tick count wraps in tc's unsigned int.
        assert_eq!(copt("rate 8bit").unwrap().buffer, 3_525_163_520);
        let e = |s: &str| copt(s).unwrap_err().msg;
        assert_eq!(e("ceil 1mbit"), "\"rate\" is required.\n");
        assert_eq!(e("rate 1mbit rate 2mbit"), "Double \"rate\" spec\n");
        assert_eq!(e("rate 1mbit prio -1"), format!("Illegal \"prio\"\n{USAGE}"));
        assert_eq!(e("rate 1mbit mpu 70000"), format!("Illegal \"mpu\"\n{USAGE}"));
        assert_eq!(e("rate 1mbit burst 10k/7"), format!("Illegal \"burst\"\n{USAGE}"));
        assert_eq!(e("help"), USAGE);
    }

    #[test]
    fn qdisc_and_class_lines_print_like_tc() {
        let mut q = htb("default 10");
        add(&mut q, 0, 1, "rate 10mbit", 0).unwrap();
        add(&mut q, 1, 0x10, "rate 1mbit ceil 2mbit", 0).unwrap();
        let mut o = Out::text();
        q.dump(&mut o, &dev());
        assert_eq!(o.into_string(), "r2q 10 default 0x10 direct_packets_stat 0 direct_qlen 1000");
        let mut o = Out::text();
        q.dump_class(0x10, &mut o);
        assert_eq!(o.into_string(), "prio 0 rate 1Mbit ceil 2Mbit burst 1600b cburst 1600b");
        let mut o = Out::text();
        q.dump_class(1, &mut o);
        assert_eq!(o.into_string(), "rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b");
        let mut o = Out::text();
        q.dump_class_xstats(0x10, &mut o);
        // 1600 B at 1 Mbit/s = 12.8 ms = 200000 ticks; at 2 Mbit/s 100000.
        assert_eq!(o.into_string(), " lended: 0 borrowed: 0 giants: 0\n tokens: 200000 ctokens: 100000\n");
        assert_eq!(q.class_parent(0x10), Some(H | 1));
        assert_eq!(q.class_parent(1), Some(TC_H_ROOT));
    }

    // ---- tokens, modes and the watchdog -------------------------------------------------

    #[test]
    fn exact_tokens_after_each_dequeue() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
        let full = 12_800_000; // 1600 B at 125000 B/s
        assert_eq!(q.tokens(1), Some((full, full)));
        for id in 0..3 {
            assert_eq!(q.enqueue(pkt(id, 1000, H | 1), t(0)), Enqueued::Success);
        }
        // 1000 B cost 8 ms.
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 0);
        assert_eq!(q.tokens(1), Some((4_800_000, 4_800_000)));
        assert_eq!(q.mode(1), Some(Mode::CanSend));
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
        assert_eq!(q.tokens(1), Some((-3_200_000, -3_200_000)));
        assert_eq!(q.mode(1), Some(Mode::CantSend));
        assert_eq!((q.stats().overlimits, q.class_stats(1).unwrap().overlimits), (1, 1));
        // Nothing may leave before the ceil bucket is back at zero.
        assert_eq!(q.dequeue(t(MS)), Dequeued::Throttled { until: t(3_200_000) });
        assert_eq!(q.watchdog(), Some(t(3_200_000)));
        assert_eq!(q.dequeue(t(3_200_000)).packet().unwrap().id, 2);
        assert_eq!(q.tokens(1), Some((-8_000_000, -8_000_000)));
        assert_eq!(q.lends_borrows(1), Some((3, 0)));
        assert_eq!(q.dequeue(t(3_200_000)), Dequeued::Empty);
        assert_eq!(q.watchdog(), None);
        let mut o = Out::text();
        q.dump_class_xstats(1, &mut o);
        assert_eq!(o.into_string(), " lended: 3 borrowed: 0 giants: 0\n tokens: -125000 ctokens: -125000\n");
        // Idle for a long time: the buckets fill up to their size, no further.
        q.enqueue(pkt(9, 1000, H | 1), t(10 * SEC));
        q.dequeue(t(10 * SEC)).packet().unwrap();
        assert_eq!(q.tokens(1), Some((full - 8_000_000, full - 8_000_000)));
    }

    #[test]
    fn debt_is_floored_at_mbuffer() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 8bit burst 100 cburst 100", 0).unwrap();
        q.enqueue(pkt(1, 1000, H | 1), t(0));
        q.dequeue(t(5)).packet().unwrap();
        // 100 s of credit minus 1000 s of cost, floored at 1 − 60 s.
        assert_eq!(q.tokens(1), Some((1 - MBUFFER_NS, 1 - MBUFFER_NS)));
        let mut o = Out::text();
        q.dump_class_xstats(1, &mut o);
        assert_eq!(o.into_string(), " lended: 1 borrowed: 0 giants: 0\n tokens: -937500000 ctokens: -937500000\n");
    }

    /// Keep every listed leaf backlogged and dequeue as fast as htb allows for
    /// `secs` of virtual time; bytes sent per leaf.
    fn saturate(q: &mut Node<Htb>, leaves: &[u32], len: u32, secs: u64) -> Vec<u64> {
        let mut bytes = vec![0u64; leaves.len()];
        let mut now = 0u64;
        let mut id = 0;
        while now < secs * SEC {
            for &m in leaves {
                while leaf_qlen(q, m) < 8 {
                    q.enqueue(pkt(id, len, H | m), t(now));
                    id += 1;
                }
            }
            match q.dequeue(t(now)) {
                Dequeued::Packet(p) => {
                    let i = leaves.iter().position(|&m| H | m == p.priority).unwrap();
                    bytes[i] += p.len as u64;
                }
                Dequeued::Throttled { until } => {
                    assert!(until > t(now), "throttled into the past");
                    now = until.as_nanos();
                }
                Dequeued::Empty => panic!("backlogged htb reported empty"),
            }
        }
        bytes
    }

    #[test]
    fn a_class_sends_its_rate_over_ten_seconds() {
        for (rate, bps) in [("10mbit", 1_250_000u64), ("1mbit", 125_000), ("100mbit", 12_500_000)] {
            let mut q = htb("");
            add(&mut q, 0, 1, &format!("rate {rate}"), 0).unwrap();
            let got = saturate(&mut q, &[1], 1500, 10)[0] as f64;
            let want = (bps * 10) as f64;
            assert!((got - want).abs() / want < 0.005, "{rate}: sent {got} B, want {want} B");
        }
    }

    #[test]
    fn children_share_by_rate_and_borrow_the_rest() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 100mbit ceil 100mbit", 0).unwrap();
        // Explicit quanta in the ratio of the rates, so the spare 10 Mbit/s is lent 1:2.
        add(&mut q, 1, 0x10, "rate 30mbit ceil 100mbit quantum 3000", 0).unwrap();
        add(&mut q, 1, 0x20, "rate 60mbit ceil 100mbit quantum 6000", 0).unwrap();
        let b = saturate(&mut q, &[0x10, 0x20], 1500, 10);
        let (a, c) = (b[0] as f64 * 8.0 / 10.0 / 1e6, b[1] as f64 * 8.0 / 10.0 / 1e6);
        assert!((a + c - 100.0).abs() < 0.5, "total {} Mbit/s", a + c);
        assert!(a > 30.0 && c > 60.0, "each gets at least its rate: {a} {c}");
        assert!((a - 33.3).abs() < 1.0 && (c - 66.7).abs() < 1.0, "split {a} / {c}");
        let (l10, b10) = q.lends_borrows(0x10).unwrap();
        let (l20, b20) = q.lends_borrows(0x20).unwrap();
        assert!(l10 > 0 && b10 > 0 && l20 > 0 && b20 > 0);
        // The parent lent to both (charged at its own level for borrowed packets).
        assert_eq!(q.lends_borrows(1).unwrap().0, b10 + b20);
        // With the quanta from r2q (both capped at 200000) the spare is split evenly.
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 100mbit ceil 100mbit", 0).unwrap();
        add(&mut q, 1, 0x10, "rate 30mbit ceil 100mbit", 0).unwrap();
        add(&mut q, 1, 0x20, "rate 60mbit ceil 100mbit", 0).unwrap();
        let b = saturate(&mut q, &[0x10, 0x20], 1500, 10);
        let (a, c) = (b[0] as f64 * 8.0 / 1e7, b[1] as f64 * 8.0 / 1e7);
        assert!((a - 35.0).abs() < 1.0 && (c - 65.0).abs() < 1.0, "split {a} / {c}");
    }

    #[test]
    fn ceil_caps_a_lone_borrower() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 100mbit", 0).unwrap();
        add(&mut q, 1, 0x10, "rate 10mbit ceil 40mbit", 0).unwrap();
        let got = saturate(&mut q, &[0x10], 1500, 10)[0] as f64 * 8.0 / 1e7;
        assert!((got - 40.0).abs() < 0.2, "{got} Mbit/s");
    }

    #[test]
    fn lower_prio_value_is_served_first() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1gbit", 0).unwrap();
        add(&mut q, 1, 0x10, "rate 100mbit ceil 1gbit prio 1", 0).unwrap();
        add(&mut q, 1, 0x20, "rate 100mbit ceil 1gbit prio 0", 0).unwrap();
        for id in 0..4 {
            q.enqueue(pkt(id, 100, H | 0x10), t(0));
        }
        for id in 10..14 {
            q.enqueue(pkt(id, 100, H | 0x20), t(0));
        }
        let order: Vec<u64> = (0..8).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
        assert_eq!(order, vec![10, 11, 12, 13, 0, 1, 2, 3]);
    }

    #[test]
    fn equal_prio_leaves_round_robin_by_quantum() {
        let mut q = htb("");
        add(&mut q, 0, 0x10, "rate 1gbit burst 100k cburst 100k quantum 1000", 0).unwrap();
        add(&mut q, 0, 0x20, "rate 1gbit burst 100k cburst 100k quantum 2000", 0).unwrap();
        for id in 0..6 {
            q.enqueue(pkt(id, 1000, H | 0x10), t(0));
            q.enqueue(pkt(100 + id, 1000, H | 0x20), t(0));
        }
        let order: Vec<u64> = (0..9).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
        // The deficit is charged after sending and the turn passes once it goes
        // negative: 1:10 sends one 1000-byte packet per turn, 1:20 (after its first
        // turn) two.
        assert_eq!(order, vec![0, 100, 1, 101, 102, 2, 103, 104, 3]);
    }

    // ---- classification ---------------------------------------------------------------------

    #[test]
    fn default_class_and_direct_queue() {
        let mut q = htb("default 20");
        add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
        add(&mut q, 1, 0x20, "rate 1mbit", 0).unwrap();
        add(&mut q, 1, 0x30, "rate 1mbit", 0).unwrap();
        assert_eq!(q.classify(&pkt(0, 100, 0), Instant::ZERO), Target::Class(0x20));
        assert_eq!(q.classify(&pkt(0, 100, 7), Instant::ZERO), Target::Class(0x20));
        assert_eq!(q.classify(&pkt(0, 100, H), Instant::ZERO), Target::Direct);
        assert_eq!(q.classify(&pkt(0, 100, H | 0x30), Instant::ZERO), Target::Class(0x30));
        // An inner class or a foreign major falls back to the default class.
        assert_eq!(q.classify(&pkt(0, 100, H | 1), Instant::ZERO), Target::Class(0x20));
        assert_eq!(q.classify(&pkt(0, 100, 0x2_0030), Instant::ZERO), Target::Class(0x20));
        // No default (or an inner one): the direct queue.
        let mut q2 = htb("default 1");
        add(&mut q2, 0, 1, "rate 1mbit", 0).unwrap();
        add(&mut q2, 1, 2, "rate 1mbit", 0).unwrap();
        assert_eq!(q2.classify(&pkt(0, 100, 0), Instant::ZERO), Target::Direct);
        let q3 = htb("");
        assert_eq!(q3.classify(&pkt(0, 100, 0), Instant::ZERO), Target::Direct);
    }

    #[test]
    fn direct_queue_is_unshaped_and_bounded() {
        let mut q = htb("direct_qlen 3");
        add(&mut q, 0, 1, "rate 8bit", 0).unwrap();
        for id in 0..5 {
            let r = q.enqueue(pkt(id, 1000, 0), t(0));
            assert_eq!(r, if id < 3 { Enqueued::Success } else { Enqueued::Dropped });
        }
        q.enqueue(pkt(9, 1000, H | 1), t(0));
        assert_eq!((q.stats().qlen, q.stats().drops, q.direct_packets()), (4, 2, 3));
        // Direct packets first, whatever the shaping says.
        let ids: Vec<u64> = (0..4).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
        assert_eq!(ids, vec![0, 1, 2, 9]);
        assert!(matches!(q.dequeue(t(0)), Dequeued::Empty));
    }

    #[test]
    fn atm_linklayer_rounds_to_cells() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1mbit linklayer atm burst 10k cburst 10k", 0).unwrap();
        let full = 81_920_000;
        q.enqueue(pkt(1, 49, H | 1), t(0));
        q.dequeue(t(0)).packet().unwrap();
        // 49 bytes are two cells: 106 wire bytes at 8000 ns each.
        assert_eq!(q.tokens(1), Some((full - 106 * 8000, full - 106 * 8000)));
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1mbit linklayer atm overhead 10 mpu 96 burst 10k cburst 10k", 0).unwrap();
        q.enqueue(pkt(1, 20, H | 1), t(0));
        q.dequeue(t(0)).packet().unwrap();
        // 20 + 10 → mpu 96 → 2 cells.
        assert_eq!(q.tokens(1), Some((full - 106 * 8000, full - 106 * 8000)));
    }

    // ---- class management ---------------------------------------------------------------------

    #[test]
    fn quantum_warnings_and_clamps() {
        let mut q = htb("");
        assert_eq!(
            add(&mut q, 0, 1, "rate 100mbit", 0).unwrap().as_deref(),
            Some("sch_htb: quantum of class 10001 is big. Consider r2q change.")
        );
        assert_eq!(q.quantum(1), Some(200_000));
        assert_eq!(
            add(&mut q, 0, 0xab, "rate 10kbit", 0).unwrap().as_deref(),
            Some("sch_htb: quantum of class 100AB is small. Consider r2q change.")
        );
        assert_eq!(q.quantum(0xab), Some(1000));
        assert_eq!(add(&mut q, 0, 2, "rate 10kbit quantum 100", 0).unwrap(), None);
        assert_eq!(q.quantum(2), Some(100));
        assert_eq!(add(&mut q, 0, 3, "rate 10mbit", 0).unwrap(), None);
        assert_eq!(q.quantum(3), Some(125_000));
        // Inner classes keep their quantum and print no warning on change.
        add(&mut q, 3, 0x30, "rate 1mbit", 0).unwrap();
        assert_eq!(change(&mut q, 3, "rate 1gbit", 0).unwrap(), None);
        assert_eq!(q.quantum(3), Some(125_000));
    }

    #[test]
    fn class_change_keeps_queued_packets() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
        for id in 0..5 {
            q.enqueue(pkt(id, 1000, H | 1), t(0));
        }
        q.dequeue(t(0)).packet().unwrap();
        let before = q.tokens(1);
        change(&mut q, 1, "rate 100mbit burst 20k prio 3", 0).unwrap();
        assert_eq!((leaf_qlen(&q, 1), q.stats().qlen, q.stats().drops), (4, 4, 0));
        // Buckets are kept; their sizes and the rate change.
        assert_eq!(q.tokens(1), before);
        let mut now = SEC;
        let mut ids = Vec::new();
        loop {
            match q.dequeue(t(now)) {
                Dequeued::Packet(p) => ids.push(p.id),
                Dequeued::Throttled { until } => now = until.as_nanos(),
                Dequeued::Empty => break,
            }
        }
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(q.class_stats(1).unwrap().packets, 5);
    }

    #[test]
    fn leaf_to_inner_purges_and_back() {
        let mut q = htb("default 10");
        add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
        add(&mut q, 1, 0x10, "rate 8bit burst 100 cburst 100", 0).unwrap();
        for id in 0..3 {
            q.enqueue(pkt(id, 1000, 0), t(0));
        }
        q.dequeue(t(1)).packet().unwrap();
        assert_eq!(q.mode(0x10), Some(Mode::CantSend));
        add(&mut q, 0x10, 0x100, "rate 1mbit", 10).unwrap();
        assert_eq!(q.level(0x10), Some(6));
        assert_eq!(q.mode(0x10), Some(Mode::CanSend));
        assert!(q.leaf(0x10).is_none() && q.find(0x10));
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (0, 0, 2));
        assert_eq!(q.take_reduce(), Reduce { pkts: 2, bytes: 2000 });
        // The default class is inner now: traffic goes direct.
        assert_eq!(q.classify(&pkt(0, 1, 0), Instant::ZERO), Target::Direct);
        // Busy while it has a child; deleting the child makes it a leaf with full buckets.
        assert_eq!(q.delete_class(0x10, t(20)).unwrap_err(), TcError::kernel("HTB class in use"));
        q.delete_class(0x100, t(20)).unwrap();
        assert_eq!(q.level(0x10), Some(0));
        assert_eq!(q.tokens(0x10), Some((100 * SEC as i64, 100 * SEC as i64)));
        let n = q.leaf(0x10).unwrap();
        assert_eq!((n.handle, n.parent, n.kind(), n.hashed()), (0, H | 0x10, "pfifo", false));
        assert_eq!(q.classify(&pkt(0, 1, 0), Instant::ZERO), Target::Class(0x10));
        // Bound filters keep a class busy too.
        assert!(q.bind_filter(H | 0x10));
        assert_eq!(q.delete_class(0x10, t(30)).unwrap_err(), TcError::kernel("HTB class in use"));
        q.unbind_filter(H | 0x10);
        q.delete_class(0x10, t(30)).unwrap();
        assert_eq!(q.class_minors(), vec![1]);
        assert_eq!(q.level(1), Some(0));
    }

    #[test]
    fn tree_depth_is_limited_to_eight_levels() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 100mbit", 0).unwrap();
        for m in 2..=8 {
            add(&mut q, m - 1, m, "rate 10mbit ceil 100mbit", 0).unwrap();
        }
        assert_eq!(add(&mut q, 8, 9, "rate 1mbit", 0).unwrap_err(), TcError::kernel("sch_htb: tree is too deep"));
        let levels: Vec<usize> = (1..=8).map(|m| q.level(m).unwrap()).collect();
        assert_eq!(levels, vec![7, 6, 5, 4, 3, 2, 1, 0]);
        // The bottom leaf borrows its ceil through seven ancestors.
        let got = saturate(&mut q, &[8], 1500, 2)[0] as f64 * 8.0 / 2e6;
        assert!((got - 100.0).abs() < 1.0, "{got} Mbit/s");
        let (l, b) = q.lends_borrows(8).unwrap();
        assert!(l > 0 && b > 0);
        assert_eq!(q.lends_borrows(1).unwrap().1, 0);
    }

    #[test]
    fn class_errors() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
        assert_eq!(add(&mut q, 0, 1, "rate 1mbit", 0).unwrap_err(), TcError::invalid());
        assert_eq!(
            q.change_class(0, H, false, Some(&Opts::new(copt("rate 1mbit").unwrap())), &dev(), t(0)),
            Err(TcError::invalid())
        );
        assert_eq!(q.change_class(H | 1, H, true, None, &dev(), t(0)), Err(TcError::invalid()));
        // An unknown parent makes a root class, as in the kernel.
        add(&mut q, 0x99, 0x20, "rate 1mbit", 0).unwrap();
        assert_eq!(q.class_parent(0x20), Some(TC_H_ROOT));
        assert_eq!(q.graft(1, None, &dev()).unwrap().unwrap().kind(), "pfifo");
        add(&mut q, 1, 2, "rate 1mbit", 0).unwrap();
        assert_eq!(q.graft(1, None, &dev()).err(), Some(TcError::invalid()));
        assert_eq!(
            q.change(&Opts::new(()), &dev(), t(0)).unwrap_err().msg,
            "Error: Change operation not supported by specified qdisc.\n"
        );
        assert!(Htb::new(&qopt("offload").unwrap(), &dev(), H, TC_H_ROOT, t(0)).is_err());
    }

    #[test]
    fn walk_follows_the_kernel_class_hash() {
        let mut q = htb("");
        for m in [1, 2, 3] {
            add(&mut q, 0, m, "rate 1mbit", 0).unwrap();
        }
        // Four buckets: 1:1 → 1, 1:2 → 2, 1:3 → 3 (bucket = (id ^ id>>8 ^ …) & 3).
        assert_eq!(q.class_minors(), vec![1, 2, 3]);
        add(&mut q, 0, 5, "rate 1mbit", 0).unwrap();
        // 4 classes > 3/4 of 4 buckets: grown to 8.
        assert_eq!(q.hash.buckets.len(), 8);
        add(&mut q, 0, 0x11, "rate 1mbit", 0).unwrap();
        let m = q.class_minors();
        assert_eq!(m.len(), 5);
        let mut sorted = m.clone();
        sorted.sort();
        assert_eq!(sorted, vec![1, 2, 3, 5, 0x11]);
    }

    #[test]
    fn reset_empties_without_drops() {
        let mut q = htb("default 1");
        add(&mut q, 0, 1, "rate 8bit", 0).unwrap();
        for id in 0..4 {
            q.enqueue(pkt(id, 500, 0), t(0));
            q.enqueue(pkt(id, 500, H), t(0));
        }
        q.dequeue(t(0)).packet().unwrap();
        q.reset(t(1));
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (0, 0, 0));
        assert_eq!(q.dequeue(t(2)), Dequeued::Empty);
        q.enqueue(pkt(1, 500, 0), t(3));
        assert_eq!(q.stats().qlen, 1);
    }

    #[test]
    fn peek_parks_the_next_packet() {
        let mut q = htb("");
        add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
        q.enqueue(pkt(1, 1000, H | 1), t(0));
        q.enqueue(pkt(2, 1000, H | 1), t(0));
        assert_eq!(q.peek(t(0)).unwrap().id, 1);
        assert_eq!(q.stats().qlen, 2);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
        assert_eq!(q.stats().qlen, 1);
    }

    /// A `tc -batch` of `n` leaf classes under one root class (plus a grafted leaf
    /// qdisc each when `leaf` is given).
    pub(crate) fn batch(n: u32, leaf: Option<&str>) -> String {
        let mut b = String::from(
            "qdisc add dev eth0 root handle 1: htb default 2\nclass add dev eth0 parent 1: classid 1:1 htb rate 100gbit\n",
        );
        for i in 0..n {
            let m = i + 2;
            b.push_str(&format!("class add dev eth0 parent 1:1 classid 1:{m:x} htb rate 1mbit ceil 10gbit\n"));
            if let Some(l) = leaf {
                b.push_str(&format!("qdisc add dev eth0 parent 1:{m:x} handle {m:x}: {l}\n"));
            }
        }
        b
    }

    /// Scale: build a 10,000-class tree from a batch, list it, and push traffic
    /// through every leaf (0.4 s in release, as CI runs it).
    /// `cargo test -p qdisc --release --lib htb_scale -- --nocapture`
    #[test]
    fn htb_scale_10k_classes() {
        use crate::tc::{Tc, TcOpts};
        use crate::tree::DevSpec;
        for leaf in [None, Some("pfifo limit 100"), Some("fq_codel")] {
            let text = batch(10_000, leaf);
            let mut tc = Tc::new(&[DevSpec::new("eth0")]);
            let t0 = std::time::Instant::now();
            let out = tc.batch(&text, "scale", TcOpts::default(), false);
            let build = t0.elapsed();
            assert_eq!(out.code, 0, "{}", out.stderr);
            let t1 = std::time::Instant::now();
            let shown = tc.run(&argv("-s class show dev eth0"));
            let show = t1.elapsed();
            assert_eq!(shown.stdout.matches("class htb").count(), 10_001);
            let d = &mut tc.devices[0];
            let t2 = std::time::Instant::now();
            let n = 1_000_000u64;
            let mut now = 0u64;
            let mut out = 0u64;
            for i in 0..n {
                let m = (i % 10_000) as u32 + 2;
                d.enqueue(pkt(i, 1000, H | m), t(now));
                now += 100;
                if let Dequeued::Packet(_) = d.dequeue(t(now)) {
                    out += 1;
                }
            }
            let per_pkt = t2.elapsed().as_nanos() as f64 / n as f64;
            // 80 Gbit/s offered under a 100 Gbit/s root: every packet leaves but the
            // last one or two, and the round robin reaches every leaf.
            let root = &d.root;
            assert_eq!((root.stats().drops, out + root.stats().qlen as u64), (0, n));
            assert!(n - out <= 2, "{} packets still queued", n - out);
            let htb = root.q.as_classful().unwrap();
            let idle = (2..10_002u32).filter(|&m| htb.class_stats(m).unwrap().packets == 0).count();
            assert_eq!(idle, 0, "leaves that sent nothing");
            eprintln!(
                "10k classes (leaf: {}): batch build {:?} ({} lines), -s class show {:?}, enqueue+dequeue {:.0} ns/packet",
                leaf.unwrap_or("default pfifo"),
                build,
                text.lines().count(),
                show,
                per_pkt
            );
        }
    }

    #[test]
    fn conservation_with_random_traffic_and_tree_changes() {
        let mut d = dev();
        d.tx_queue_len = 4;
        let mut q = held(Htb::new(&qopt("default 20 direct_qlen 3").unwrap(), &d, H, TC_H_ROOT, t(0)).unwrap());
        let o = |s: &str| Opts::new(copt(s).unwrap());
        q.change_class(H | 1, H, false, Some(&o("rate 2mbit ceil 4mbit")), &d, t(0)).unwrap();
        q.change_class(H | 0x10, H | 1, false, Some(&o("rate 1mbit ceil 4mbit prio 1")), &d, t(0)).unwrap();
        q.change_class(H | 0x20, H | 1, false, Some(&o("rate 500kbit ceil 3mbit")), &d, t(0)).unwrap();
        let (mut in_p, mut out_p, mut reduced) = (0u64, 0u64, 0i64);
        let mut x: u64 = 99;
        let mut now = 0u64;
        for i in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = 60 + (x >> 33) as u32 % 1400;
            let target = [0, H, H | 0x10, H | 0x20, H | 1][(x >> 20) as usize % 5];
            in_p += 1;
            q.enqueue(pkt(i, len, target), t(now));
            now += (x >> 40) % 2_000_000;
            for _ in 0..(x >> 50) % 3 {
                if let Dequeued::Packet(_) = q.dequeue(t(now)) {
                    out_p += 1;
                }
            }
            match (x >> 12) % 997 {
                0 => {
                    let _ = q.change_class(H | 0x200, H | 0x20, false, Some(&o("rate 1mbit")), &d, t(now));
                }
                1 => {
                    let _ = q.delete_class(0x200, t(now));
                }
                2 => {
                    let _ = q.change_class(H | 0x10, 0, true, Some(&o("rate 3mbit prio 0")), &d, t(now));
                }
                _ => {}
            }
            reduced += q.take_reduce().pkts as i64;
            let s = q.stats();
            assert_eq!(in_p, out_p + s.drops as u64 + s.qlen as u64, "step {i}");
            // Class backlogs plus the direct queue add up to the qdisc's.
            let leaves: u32 = q.class_minors().iter().filter_map(|&m| q.leaf(m)).map(|n| n.stats().qlen).sum();
            assert_eq!(leaves + q.direct.len() as u32, s.qlen, "step {i}");
        }
        assert!(reduced > 0 && q.stats().drops > 0 && out_p > 1000);
        // Drain.
        for _ in 0..1_000_000 {
            match q.dequeue(t(now)) {
                Dequeued::Packet(_) => out_p += 1,
                Dequeued::Throttled { until } => now = until.as_nanos(),
                Dequeued::Empty => break,
            }
        }
        assert_eq!(q.stats().qlen, 0);
        assert_eq!(in_p, out_p + q.stats().drops as u64);
    }

    #[test]
    fn minor_set_and_wait_queue_agree_with_ordered_collections() {
        use std::collections::BTreeSet;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let (mut s, mut b) = (MinorSet::default(), BTreeSet::new());
        for i in 0..200_000u64 {
            // Clustered and spread minors, the edges included.
            let x = match i % 3 {
                0 => next(0x10000) as u32,
                1 => 0x100 + next(300) as u32,
                _ => [0, 63, 64, 4095, 4096, 0xFFFF][next(6) as usize],
            };
            if next(2) == 0 {
                s.insert(x);
                b.insert(x);
            } else {
                s.remove(x);
                b.remove(&x);
            }
            let q = next(0x10001) as u32;
            assert_eq!(s.ceil(q), b.range(q..).next().copied());
            assert_eq!(s.next_after(x), b.range(x + 1..).next().copied());
            assert_eq!((s.first(), s.len(), s.contains(x)), (b.first().copied(), b.len(), b.contains(&x)));
        }
        // The wait queue pops in (key, insertion) order whatever is erased in between, with
        // keys near and far (so entries move between the far buckets and the heap).
        let mut pos = vec![0u32; 301];
        let (mut w, mut set) = (WaitQueue::default(), BTreeSet::new());
        let mut queued: Vec<Option<WaitEntry>> = vec![None; 301];
        let mut now = 0i64;
        for seq in 0..100_000u64 {
            let m = 1 + next(300) as u32;
            match next(4) {
                // Pop what is due, as do_events does.
                0 => {
                    now += next(5000) as i64;
                    while let Some(e) = w.first(&mut pos) {
                        assert_eq!(Some(&e), set.first());
                        if e.key > now {
                            break;
                        }
                        w.remove(e.minor() as u32, &mut pos);
                        set.remove(&e);
                        queued[e.minor()] = None;
                    }
                }
                _ => {
                    if let Some(e) = queued[m as usize].take() {
                        w.remove(m, &mut pos);
                        set.remove(&e);
                    } else {
                        let delay = match next(3) {
                            0 => next(50) as i64,
                            1 => next(1 << 20) as i64,
                            _ => 1 << 30 | next(1 << 36) as i64,
                        };
                        let e = WaitEntry::new(now + 1 + delay, seq, m);
                        w.push(e, &mut pos);
                        set.insert(e);
                        queued[m as usize] = Some(e);
                    }
                }
            }
            assert_eq!(w.len(), set.len());
            assert_eq!(w.first(&mut pos), set.first().copied());
        }
    }

    // ---- filters (htb_classify with blocks, bind counting, block teardown) ---------

    fn tc_htb(script: &str) -> crate::tc::Tc {
        let mut tc = crate::tc::Tc::new(&[crate::tree::DevSpec::new("eth0")]);
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let r = tc.run(&crate::tc::makeargs(line));
            assert_eq!(r.code, 0, "{line}: {}", r.stderr);
        }
        tc
    }
    fn flow(dport: u16) -> crate::FlowKey {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&[10, 0, 0, 1]);
        crate::FlowKey { src: a, dst: a, sport: 1000, dport, proto: 17 }
    }
    /// Enqueue one packet; the per-class qlens of `minors` and the qdisc's direct count.
    fn send_one(tc: &mut crate::tc::Tc, p: Packet) -> Enqueued {
        let now = tc.now;
        tc.device_mut("eth0").unwrap().enqueue(p, now)
    }
    fn qlens(tc: &mut crate::tc::Tc, minors: &[u32]) -> Vec<u32> {
        let c = tc.device_mut("eth0").unwrap().root.q.as_classful().unwrap();
        minors.iter().map(|&m| c.class_stats(m).unwrap().qlen).collect()
    }
    fn tc_err(tc: &mut crate::tc::Tc, line: &str) -> String {
        let r = tc.run(&crate::tc::makeargs(line));
        assert_ne!(r.code, 0, "{line} succeeded");
        r.stderr
    }

    const TREE: &str = "
        qdisc add dev eth0 root handle 1: htb default 30
        class add dev eth0 parent 1: classid 1:1 htb rate 100mbit
        class add dev eth0 parent 1:1 classid 1:10 htb rate 10mbit ceil 100mbit
        class add dev eth0 parent 1:1 classid 1:20 htb rate 20mbit ceil 100mbit
        class add dev eth0 parent 1: classid 1:30 htb rate 1mbit
    ";

    #[test]
    fn filters_walk_from_the_qdisc_block_through_inner_classes() {
        let mut tc = tc_htb(&format!(
            "{TREE}
            filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport 1 0xffff flowid 1:0
            filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dport 2 0xffff flowid 1:99
            filter add dev eth0 parent 1: protocol ip prio 3 u32 match ip dport 3 0xffff flowid 2:10
            filter add dev eth0 parent 1: protocol ip prio 4 u32 match ip dport 4 0xffff flowid 1:20
            filter add dev eth0 parent 1: protocol ip prio 9 u32 match u32 0 0 flowid 1:1
            filter add dev eth0 parent 1:1 protocol ip prio 1 u32 match ip dport 80 0xffff flowid 1:10
            filter add dev eth0 parent 1:1 protocol ip prio 2 u32 match ip dport 443 0xffff flowid 1:20"
        ));
        let m = [1, 0x10, 0x20, 0x30];
        let direct = |tc: &mut crate::tc::Tc| {
            let mut o = crate::tc::Out::text();
            tc.device_mut("eth0").unwrap().root.q.dump(&mut o, &dev());
            o.into_string()
        };
        // Root filter → inner 1:1 → 1:1's filters → leaf.
        send_one(&mut tc, Packet::new(1, 100).with_flow(flow(80)));
        send_one(&mut tc, Packet::new(2, 100).with_flow(flow(443)));
        assert_eq!(qlens(&mut tc, &m), vec![0, 1, 1, 0]);
        // 1:1's filters match nothing → the default class.
        send_one(&mut tc, Packet::new(3, 100).with_flow(flow(22)));
        // X:0 → the direct queue; 1:99 and 2:10 name no class → the default class.
        send_one(&mut tc, Packet::new(4, 100).with_flow(flow(1)));
        assert!(direct(&mut tc).contains("direct_packets_stat 1 "), "{}", direct(&mut tc));
        send_one(&mut tc, Packet::new(5, 100).with_flow(flow(2)));
        send_one(&mut tc, Packet::new(6, 100).with_flow(flow(3)));
        assert_eq!(qlens(&mut tc, &m), vec![0, 1, 1, 3]);
        // A root filter straight to a leaf.
        send_one(&mut tc, Packet::new(7, 100).with_flow(flow(4)));
        assert_eq!(qlens(&mut tc, &m), vec![0, 1, 2, 3]);
        // skb->priority naming a leaf wins over every filter; naming the inner 1:1
        // starts at 1:1's filters (the qdisc's dport-4 filter is not consulted).
        send_one(&mut tc, Packet::new(8, 100).with_flow(flow(80)).with_priority(H | 0x30));
        send_one(&mut tc, Packet::new(9, 100).with_flow(flow(4)).with_priority(H | 1));
        send_one(&mut tc, Packet::new(10, 100).with_flow(flow(80)).with_priority(H | 1));
        assert_eq!(qlens(&mut tc, &m), vec![0, 2, 2, 5]);
        // skb->priority X:0 → direct, before any filter.
        send_one(&mut tc, Packet::new(11, 100).with_flow(flow(80)).with_priority(H));
        assert!(direct(&mut tc).contains("direct_packets_stat 2 "));
    }

    #[test]
    fn an_inner_class_without_filters_falls_back_to_the_default() {
        let mut tc = tc_htb(&format!(
            "{TREE}
            filter add dev eth0 parent 1: protocol all prio 1 matchall classid 1:1"
        ));
        send_one(&mut tc, Packet::new(1, 100).with_flow(flow(80)));
        send_one(&mut tc, Packet::new(2, 100));
        assert_eq!(qlens(&mut tc, &[0x10, 0x20, 0x30]), vec![0, 0, 2]);
    }

    #[test]
    fn a_filter_cycle_drops_instead_of_spinning() {
        let mut tc = tc_htb(&format!(
            "{TREE}
            class add dev eth0 parent 1: classid 1:2 htb rate 1mbit
            class add dev eth0 parent 1:2 classid 1:40 htb rate 1mbit
            filter add dev eth0 parent 1: protocol all prio 1 matchall classid 1:1
            filter add dev eth0 parent 1:1 protocol all prio 1 matchall classid 1:2
            filter add dev eth0 parent 1:2 protocol all prio 1 matchall classid 1:1"
        ));
        assert_eq!(send_one(&mut tc, Packet::new(1, 100)), Enqueued::Dropped);
        let q = &tc.device_mut("eth0").unwrap().root;
        assert_eq!((q.stats().drops, q.stats().qlen), (1, 0));
    }

    #[test]
    fn bound_filters_hold_classes_and_die_with_their_class() {
        let in_use = "Error: HTB class in use.\n";
        let mut tc = tc_htb(&format!(
            "{TREE}
            filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport 5 0xffff flowid 1:40
            filter add dev eth0 parent 1: protocol ip prio 2 handle 7 fw classid 1:40
            class add dev eth0 parent 1: classid 1:40 htb rate 1mbit"
        ));
        // tc_bind_tclass: the class created after its filters is bound by both.
        assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:40"), in_use);
        tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 1");
        assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:40"), in_use);
        tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 2");
        tc_htb_run(&mut tc, "class del dev eth0 classid 1:40");

        // A leaf's own filters bind 1:30; deleting the leaf destroys them, which frees
        // 1:30 and, with the last u32 proto, the qdisc's u32 tables.
        tc_htb_run(&mut tc, "filter add dev eth0 parent 1:20 protocol ip prio 3 u32 match u32 0 0 flowid 1:30");
        tc_htb_run(&mut tc, "filter add dev eth0 parent 1:20 protocol all prio 4 matchall classid 1:30");
        assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:30"), in_use);
        tc_htb_run(&mut tc, "class del dev eth0 classid 1:20");
        tc_htb_run(&mut tc, "class del dev eth0 classid 1:30");
        tc_htb_run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 u32 match u32 0 0 flowid 1:10");
        let r = tc.run(&crate::tc::makeargs("filter show dev eth0"));
        assert!(r.stdout.contains("fh 800: ht divisor 1"), "{}", r.stdout);
        // A deleted class's block is gone with it.
        let r = tc.run(&crate::tc::makeargs("filter show dev eth0 parent 1:20"));
        assert_eq!(r.stdout, "");
        assert_eq!(
            tc_err(&mut tc, "filter add dev eth0 parent 1:20 protocol all matchall classid 1:10"),
            "Error: Specified class doesn't exist.\nWe have an error talking to the kernel\n"
        );
    }

    #[test]
    fn u32_bindings_follow_replaces_and_tables() {
        // What u32 logs per change keeps the counts that comparing every filter did.
        let in_use = "Error: HTB class in use.\n";
        let mut tc = tc_htb(&format!(
            "{TREE}
            class add dev eth0 parent 1: classid 1:40 htb rate 1mbit
            filter add dev eth0 parent 1: prio 1 handle 100: protocol ip u32 divisor 256
            filter add dev eth0 parent 1: prio 1 protocol ip u32 ht 100:5: match ip sport 5 0xffff flowid 1:30
            filter add dev eth0 parent 1: prio 1 protocol ip u32 ht 100:6: match ip sport 6 0xffff flowid 1:30"
        ));
        assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:30"), in_use);
        // A replace moves its node's binding: 1:30 is still held by the other node.
        tc_htb_run(
            &mut tc,
            "filter replace dev eth0 parent 1: prio 1 handle 100:5:800 protocol ip u32 match ip sport 5 0xffff flowid 1:40",
        );
        assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:30"), in_use);
        assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:40"), in_use);
        tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 1 handle 100:6:800 protocol ip u32");
        tc_htb_run(&mut tc, "class del dev eth0 classid 1:30");
        // Deleting the table takes its nodes' bindings with it.
        tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 1 handle 100: protocol ip u32");
        tc_htb_run(&mut tc, "class del dev eth0 classid 1:40");
    }

    fn tc_htb_run(tc: &mut crate::tc::Tc, line: &str) {
        let r = tc.run(&crate::tc::makeargs(line));
        assert_eq!(r.code, 0, "{line}: {}", r.stderr);
    }
}
