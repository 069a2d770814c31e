//! tbf — Token Bucket Filter. Mirrors net/sched/sch_tbf.c (kernel side) and
//! tc/q_tbf.c (iproute2 side); §13 of docs/kernel-notes.md.
//!
//! Theory: two token buckets measured in *time* (nanoseconds of transmission
//! credit) rather than bytes. The rate bucket holds up to `buffer` ns — the time
//! `burst` bytes take at `rate` — and the optional peak bucket up to `mtu` ns, the
//! time `minburst` bytes take at `peakrate`. Credit accrues with wall time
//! (`now − t_c`, capped at `buffer`). The head packet of the inner qdisc may leave
//! when both buckets can pay its transmission time (`l2t`, see [`crate::rate`]);
//! otherwise tbf answers "not before now + deficit" (the kernel's watchdog) and
//! counts one overlimit per refused attempt. Packets are never reordered.
//!
//! Packets larger than `max_size` (the burst, or the peak bucket size if
//! smaller) can never be sent and are dropped at enqueue, except GSO packets
//! whose segments fit: those are split and each segment is queued.
//!
//! The queue itself is the inner qdisc of class `<handle>:1`: by default a bfifo
//! of `limit` bytes (hidden from dumps), replaceable by any qdisc; after the
//! inner qdisc is deleted, class 1 points at noop, which drops everything.

use crate::packet::Packet;
use crate::qdisc::{
    tc_h_make, Child, Dequeued, DevInfo, Enqueued, Flags, Node, OneClass, Ops, Opts, Parse, Qdisc, Sch,
};
use crate::rate::{LinkLayer, PschedRatecfg, RateSpec};
use crate::sched::fifo::{fifo_create_dflt, FifoKind, FifoOpt};
use crate::sched::noqueue::Noop;
use crate::tc::units::{c_double_to_u32, ticks2ns};
use crate::tc::{matches, units, Args, Out, TcError};
use crate::time::Instant;

/// What tc sends for tbf: `struct tc_tbf_qopt` (TCA_TBF_PARMS) plus the optional
/// attributes TCA_TBF_RATE64, TCA_TBF_PRATE64, TCA_TBF_BURST and TCA_TBF_PBURST.
/// (The rate tables TCA_TBF_RTAB/PTAB only matter for link-layer detection when
/// the ratespec says "unaware", which tc never sends; they are not modelled.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TbfOpt {
    pub rate: RateSpec,
    /// All zero when no peak rate is configured.
    pub peakrate: RateSpec,
    /// Bytes (the inner bfifo's limit).
    pub limit: u32,
    /// The rate bucket size in ticks (64 ns): `tc_calc_xmittime(rate, burst)`.
    pub buffer: u32,
    /// The peak bucket size in ticks: `tc_calc_xmittime(peakrate, mtu)`; 0 without a peak rate.
    pub mtu: u32,
    /// TCA_TBF_RATE64: sent when the rate does not fit 32 bits.
    pub rate64: Option<u64>,
    /// TCA_TBF_PRATE64.
    pub prate64: Option<u64>,
    /// TCA_TBF_BURST: the burst in bytes (tc always sends it).
    pub burst: Option<u32>,
    /// TCA_TBF_PBURST: the peak bucket in bytes (tc sends it with a peak rate).
    pub pburst: Option<u32>,
}

/// q_tbf.c `explain`.
const USAGE: &str = "Usage: ... tbf limit BYTES burst BYTES[/BYTES] rate KBPS [ mtu BYTES[/BYTES] ]\n\
\t[ peakrate KBPS ] [ latency TIME ] [ overhead BYTES ] [ linklayer TYPE ]\n";

/// q_tbf.c `explain1`.
fn illegal(name: &str, val: &str) -> TcError {
    TcError::tc(format!("tbf: illegal value for \"{name}\": \"{val}\"\n"))
}

fn dup(what: &str) -> TcError {
    TcError::tc(format!("tbf: duplicate \"{what}\" specification\n"))
}

/// iproute2 `get_size_and_cell`, including what is left of the argument when it
/// fails: the '/' is cut for the size parse and only restored once the cell part is
/// an integer, so `10k/x` and `x/8` are reported as `10k` and `x`.
fn size_and_cell(name: &str, s: &str) -> Result<(u32, Option<u8>), TcError> {
    match s.split_once('/') {
        None => units::get_size(s).map(|v| (v, None)).ok_or_else(|| illegal(name, s)),
        Some((sz, cell)) => {
            let size = units::get_size(sz).ok_or_else(|| illegal(name, sz))?;
            let cell = units::get_integer(cell).ok_or_else(|| illegal(name, sz))?;
            // `(1 << i) == cell` in C int arithmetic (1 << 31 is INT_MIN).
            let log = (0..32u32).find(|&i| 1i32.wrapping_shl(i) == cell).ok_or_else(|| illegal(name, s))?;
            Ok((size, Some(log as u8)))
        }
    }
}

/// iproute2 `get_u16(val, arg, 10)`: strtoul in base 10, whole string, ≤ 0xFFFF.
fn get_u16_dec(s: &str) -> Option<u16> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // strtoul saturates at ULONG_MAX (ERANGE) and negates a leading '-'.
    let v: u64 = digits.parse().unwrap_or(u64::MAX);
    let v = if neg { v.wrapping_neg() } else { v };
    u16::try_from(v).ok()
}

/// tc side: q_tbf.c `tbf_parse_opt`.
pub fn parse(args: &mut Args) -> Result<TbfOpt, TcError> {
    let mut limit: u32 = 0;
    let mut latency: u32 = 0;
    let mut buffer: u32 = 0;
    let mut mtu: u32 = 0;
    let mut mpu: u32 = 0;
    let mut rcell: Option<u8> = None;
    let mut pcell: Option<u8> = None;
    let mut overhead: u16 = 0;
    let mut linklayer = LinkLayer::Ethernet;
    let mut rate64: u64 = 0;
    let mut prate64: u64 = 0;

    while let Some(a) = args.next() {
        if matches(a, "limit") {
            let v = args.value()?;
            if limit != 0 {
                return Err(dup("limit"));
            }
            if latency != 0 {
                return Err(TcError::tc("tbf: specifying both \"latency\" and \"limit\" is not allowed\n"));
            }
            limit = units::get_size(v).ok_or_else(|| illegal("limit", v))?;
        } else if matches(a, "latency") {
            let v = args.value()?;
            if latency != 0 {
                return Err(dup("latency"));
            }
            if limit != 0 {
                // sic: iproute2's message has the stray slash.
                return Err(TcError::tc("tbf: specifying both \"limit\" and \"/latency\" is not allowed\n"));
            }
            latency = units::get_time(v).ok_or_else(|| illegal("latency", v))?;
        } else if matches(a, "burst") || a == "buffer" || a == "maxburst" {
            let v = args.value()?;
            if buffer != 0 {
                return Err(dup("buffer/burst/maxburst"));
            }
            let (b, c) = size_and_cell(a, v)?;
            buffer = b;
            if c.is_some() {
                rcell = c;
            }
        } else if a == "mtu" || a == "minburst" {
            let v = args.value()?;
            if mtu != 0 {
                return Err(dup("mtu/minburst"));
            }
            let (m, c) = size_and_cell(a, v)?;
            mtu = m;
            if c.is_some() {
                pcell = c;
            }
        } else if a == "mpu" {
            let v = args.value()?;
            if mpu != 0 {
                return Err(dup("mpu"));
            }
            mpu = units::get_size(v).ok_or_else(|| illegal("mpu", v))?;
        } else if a == "rate" {
            let v = args.value()?;
            if rate64 != 0 {
                return Err(dup("rate"));
            }
            rate64 = args.rate64(v).ok_or_else(|| illegal("rate", v))?;
        } else if matches(a, "peakrate") {
            let v = args.value()?;
            if prate64 != 0 {
                return Err(dup("peakrate"));
            }
            prate64 = args.rate64(v).ok_or_else(|| illegal("peakrate", v))?;
        } else if matches(a, "overhead") {
            let v = args.value()?;
            if overhead != 0 {
                return Err(dup("overhead"));
            }
            overhead = get_u16_dec(v).ok_or_else(|| illegal("overhead", v))?;
        } else if matches(a, "linklayer") {
            let v = args.value()?;
            linklayer = LinkLayer::parse(v).ok_or_else(|| illegal("linklayer", v))?;
        } else if a == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("tbf: unknown parameter \"{a}\"\n{USAGE}")));
        }
    }

    // All missing-parameter complaints in one go, then the usage.
    let mut msg = String::new();
    if rate64 == 0 {
        msg.push_str("tbf: the \"rate\" parameter is mandatory.\n");
    }
    if buffer == 0 {
        msg.push_str("tbf: the \"burst\" parameter is mandatory.\n");
    }
    if prate64 != 0 && mtu == 0 {
        msg.push_str("tbf: when \"peakrate\" is specified, \"mtu\" must also be specified.\n");
    }
    if limit == 0 && latency == 0 {
        msg.push_str("tbf: either \"limit\" or \"latency\" is required.\n");
    }
    if !msg.is_empty() {
        msg.push_str(USAGE);
        return Err(TcError::tc(msg));
    }

    let mut opt = TbfOpt::default();
    opt.rate.rate = rate64.min(u32::MAX as u64) as u32;
    opt.peakrate.rate = prate64.min(u32::MAX as u64) as u32;

    opt.limit = if limit == 0 {
        // latency → limit: what the bucket plus `latency` worth of rate can hold.
        let mut lim = rate64 as f64 * latency as f64 / 1e6 + buffer as f64;
        if prate64 != 0 {
            let lim2 = prate64 as f64 * latency as f64 / 1e6 + mtu as f64;
            if lim2 < lim {
                lim = lim2;
            }
        }
        c_double_to_u32(lim)
    } else {
        limit
    };

    // tc_ratespec.mpu is 16 bits: larger values are truncated on assignment.
    opt.rate.mpu = mpu as u16;
    opt.rate.overhead = overhead;
    opt.rate.calc_rtable(rcell, mtu, linklayer);
    opt.buffer = units::calc_xmittime(opt.rate.rate as u64, buffer);

    if opt.peakrate.rate != 0 {
        opt.peakrate.mpu = mpu as u16;
        opt.peakrate.overhead = overhead;
        opt.peakrate.calc_rtable(pcell, mtu, linklayer);
        opt.mtu = units::calc_xmittime(opt.peakrate.rate as u64, mtu);
    }

    opt.burst = Some(buffer);
    if rate64 >= 1 << 32 {
        opt.rate64 = Some(rate64);
    }
    if opt.peakrate.rate != 0 {
        if prate64 >= 1 << 32 {
            opt.prate64 = Some(prate64);
        }
        opt.pburst = Some(mtu);
    }
    Ok(opt)
}

/// Kernel side: `struct tbf_sched_data` plus the qdisc's counters.
pub struct Tbf {
    /// Our own handle, for the default child's parent `<handle>:1`.
    handle: u32,
    /// Bytes (what the default bfifo is given).
    limit: u32,
    /// Largest packet that can ever be sent.
    max_size: u32,
    /// Rate bucket size, ns.
    buffer: i64,
    /// Peak bucket size, ns.
    mtu: i64,
    rate: PschedRatecfg,
    /// `rate_bytes_ps == 0` when there is no peak rate (`tbf_peak_present`).
    peak: PschedRatecfg,
    /// Current credit of the rate bucket, ns.
    tokens: i64,
    /// Current credit of the peak bucket, ns.
    ptokens: i64,
    /// Time of the last send (checkpoint), ns.
    t_c: i64,
    /// Class 1's qdisc: the default bfifo, a grafted qdisc, or noop.
    child: Node,
    /// When the watchdog would fire after the last refused dequeue (None after a send).
    watchdog: Option<Instant>,
}

/// `tbf_init` wants options (EINVAL without); tc always sends them.
pub static OPS: Ops = Ops {
    id: "tbf",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Tbf::new(c.required()?, c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Tbf {
    /// `tbf_init`: t_c = now, class 1 starts at noop, then `tbf_change`.
    pub fn new(o: &TbfOpt, dev: &DevInfo, handle: u32, now: Instant) -> Result<Tbf, TcError> {
        let mut q = Tbf {
            handle,
            limit: 0,
            max_size: 0,
            buffer: 0,
            mtu: 0,
            rate: PschedRatecfg::default(),
            peak: PschedRatecfg::default(),
            tokens: 0,
            ptokens: 0,
            t_c: now.as_nanos() as i64,
            child: Noop::node(tc_h_make(handle, 1)),
            watchdog: None,
        };
        q.apply(o, dev, now)?;
        Ok(q)
    }

    /// Mirrors `tbf_change`. All validation happens before anything is modified.
    /// Unlike reset, a change does not move `t_c`; it refills both buckets.
    fn apply(&mut self, o: &TbfOpt, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        let rate = PschedRatecfg::from_spec(&o.rate, o.rate64.unwrap_or(0));
        let mut buffer = ticks2ns(o.buffer).min(u32::MAX as i64);
        let mut mtu = ticks2ns(o.mtu).min(u32::MAX as i64);

        let mut max_size: u64 = match o.burst {
            Some(b) => {
                buffer = rate.l2t_ns(b) as i64;
                b as u64
            }
            None => rate.t2l(buffer as u64).min(u32::MAX as u64),
        };

        let peak = if o.peakrate.rate != 0 {
            let peak = PschedRatecfg::from_spec(&o.peakrate, o.prate64.unwrap_or(0));
            if peak.rate_bytes_ps <= rate.rate_bytes_ps {
                // "sch_tbf: peakrate … is lower than or equals to rate …" (log only).
                return Err(TcError::invalid());
            }
            match o.pburst {
                Some(pb) => {
                    max_size = max_size.min(pb as u64);
                    mtu = peak.l2t_ns(pb) as i64;
                }
                None => max_size = max_size.min(peak.t2l(mtu as u64)),
            }
            peak
        } else {
            PschedRatecfg::default()
        };

        // (A max_size below the device MTU is only logged.)
        if max_size == 0 {
            return Err(TcError::invalid());
        }

        let mut new_child = None;
        if !self.child.flags().builtin {
            fifo_set_limit(&mut self.child, o.limit, dev, now)?;
        } else if o.limit > 0 {
            // fifo_create_dflt: handle 0, parent <handle>:1, hashed invisible.
            new_child = Some(fifo_create_dflt(FifoKind::Bfifo, o.limit, self.handle, dev));
        }

        if let Some(c) = new_child {
            // The old child is noop: nothing to flush.
            self.child = c;
        }
        self.limit = o.limit;
        self.mtu = if o.pburst.is_some() { mtu } else { ticks2ns(o.mtu) };
        self.max_size = max_size as u32;
        self.buffer = if o.burst.is_some() { buffer } else { ticks2ns(o.buffer) };
        self.tokens = self.buffer;
        self.ptokens = self.mtu;
        self.rate = rate;
        self.peak = peak;
        Ok(())
    }

    // ---- accessors (tests, simulator) ---------------------------------------------

    /// Rate bucket credit, ns.
    pub fn tokens(&self) -> i64 {
        self.tokens
    }
    /// Peak bucket credit, ns.
    pub fn ptokens(&self) -> i64 {
        self.ptokens
    }
    /// Checkpoint time (last send, init or reset).
    pub fn t_c(&self) -> Instant {
        Instant::from_nanos(self.t_c.max(0) as u64)
    }
    /// Rate bucket size, ns.
    pub fn buffer_ns(&self) -> i64 {
        self.buffer
    }
    /// Peak bucket size, ns.
    pub fn mtu_ns(&self) -> i64 {
        self.mtu
    }
    pub fn max_size(&self) -> u32 {
        self.max_size
    }
    pub fn limit(&self) -> u32 {
        self.limit
    }
    pub fn rate(&self) -> &PschedRatecfg {
        &self.rate
    }
    pub fn peak(&self) -> &PschedRatecfg {
        &self.peak
    }
    pub fn child(&self) -> &Node {
        &self.child
    }

    // ---- the algorithm ----------------------------------------------------------------

    /// `tbf_segment`: software-segment a GSO packet whose segments fit `max_size`
    /// and queue each segment. The segments share `len` as evenly as possible
    /// (larger ones first). Failed segments count as drops here; ancestors learn the
    /// difference between one packet of `len` bytes and what was queued.
    fn segment(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        let prev_len = pkt.len;
        let mut nb: u32 = 0;
        let mut len: u32 = 0;
        let mut lost = Vec::new();
        for seg in pkt.gso_segments() {
            let (seg_len, id) = (seg.len, seg.id);
            let r = self.child.enqueue(seg, now);
            Child::collect(&mut self.child, sch);
            if r == Enqueued::Success {
                nb += 1;
                len += seg_len;
                sch.stats.queued(seg_len);
            } else if r.counts_as_drop() {
                sch.stats.dropped();
            }
            if r == Enqueued::Dropped {
                lost.push(id);
            }
        }
        if nb > 0 {
            // The skb is answered NET_XMIT_SUCCESS: the segments that were not are freed.
            lost.into_iter().for_each(crate::drops::freed);
            // qdisc_tree_reduce_backlog(sch, 1 - nb, prev_len - len): the parents
            // count one packet of prev_len on our SUCCESS; correct them to nb/len.
            // NOTE: 1 - nb is negative for nb ≥ 2; `Reduce.pkts` must be signed (with
            // drops += max(n, 0)) for this to be exact — see the cast below.
            #[allow(clippy::unnecessary_cast)]
            sch.reduce(1 - nb as i32, prev_len as i64 - len as i64);
            Enqueued::Success
        } else {
            Enqueued::Dropped
        }
    }

    /// `tbf_dequeue`.
    fn dequeue_tbf(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let len = match self.child.peek(now) {
            Some(p) => p.len,
            None => return self.child_wakeup(sch),
        };
        let now_ns = now.as_nanos() as i64;
        let elapsed = (now_ns - self.t_c).min(self.buffer);
        let mut ptoks: i64 = 0;
        if self.peak.is_present() {
            ptoks = (elapsed + self.ptokens).min(self.mtu) - self.peak.l2t_ns(len) as i64;
        }
        let toks = (elapsed + self.tokens).min(self.buffer) - self.rate.l2t_ns(len) as i64;

        if (toks | ptoks) >= 0 {
            match Child::dequeue(&mut self.child, now, sch) {
                Dequeued::Packet(p) => {
                    self.t_c = now_ns;
                    self.tokens = toks;
                    self.ptokens = ptoks;
                    self.watchdog = None;
                    Dequeued::Packet(p)
                }
                _ => Dequeued::Empty,
            }
        } else {
            let until = Instant::from_nanos((now_ns + (-toks).max(-ptoks)).max(0) as u64);
            self.watchdog = Some(until);
            sch.stats.overlimit();
            Dequeued::Throttled { until }
        }
    }

    /// The child's peek found nothing. Empty child: nothing to do. A non-empty one is
    /// non-work-conserving and throttled (e.g. a tbf below this tbf): in the kernel its
    /// own watchdog wakes the device, so its wake-up time is ours too.
    fn child_wakeup(&mut self, sch: &mut Sch) -> Dequeued {
        Child::collect(&mut self.child, sch);
        match self.child.watchdog() {
            Some(until) if self.child.stats().qlen > 0 => {
                self.watchdog = Some(until);
                Dequeued::Throttled { until }
            }
            _ => Dequeued::Empty,
        }
    }
}

/// `fifo_set_limit`: only pfifo, bfifo and pfifo_head_drop children are told the
/// new limit (any qdisc whose id continues with "fifo" after one letter and has a
/// change op) — even one the user grafted, which then gets `limit` as a packet count.
fn fifo_set_limit(child: &mut Node, limit: u32, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
    match child.kind() {
        "pfifo" | "bfifo" | "pfifo_head_drop" => child.change(&Opts::new(FifoOpt { limit }), dev, now),
        _ => Ok(()),
    }
}

impl Qdisc for Tbf {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `tbf_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        if pkt.len > self.max_size {
            // skb_is_gso && skb_gso_validate_mac_len(skb, max_size)
            if pkt.gso_segs > 1 && pkt.len.div_ceil(pkt.gso_segs as u32) <= self.max_size {
                return self.segment(sch, pkt, now);
            }
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        Child::enqueue(&mut self.child, pkt, now, sch)
    }

    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.dequeue_tbf(sch, now)
    }

    // peek: `qdisc_peek_dequeued` (the default): tokens are spent, bstats counted.

    /// `tbf_reset`.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.child.reset(now);
        self.t_c = now.as_nanos() as i64;
        self.tokens = self.buffer;
        self.ptokens = self.mtu;
        self.watchdog = None;
    }

    fn change(&mut self, _sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.apply(opts.of()?, dev, now)
    }

    /// What `tbf_dump` sends, printed as q_tbf.c `tbf_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let rate64 = self.rate.rate_bytes_ps;
        let rspec = self.rate.getrate();
        let buffer_ticks = units::ns2ticks(self.buffer) as u32;
        let (prate64, pspec) = if self.peak.is_present() {
            (self.peak.rate_bytes_ps, self.peak.getrate())
        } else {
            (0, RateSpec::default())
        };
        let mtu_ticks = units::ns2ticks(self.mtu) as u32;
        let limit = self.limit;
        let (details, raw, iec) = (out.details(), out.raw(), out.iec());

        out.rate("rate", "rate ", rate64, " ");
        let burst = units::calc_xmitsize(rate64, buffer_ticks);
        if details {
            let s = format!("{}/{}", units::fmt_size(burst), 1u32 << rspec.cell_log);
            out.string("burst", format_args!("burst {s} "), &s);
            out.size("mpu", "mpu ", rspec.mpu as u32, " ");
        } else {
            out.size("burst", "burst ", burst, " ");
        }
        if raw {
            out.string("burst_raw", format_args!("[{buffer_ticks:08x}] "), &format!("{buffer_ticks:x}"));
        }
        if prate64 != 0 {
            out.fp(format_args!("peakrate {} ", units::fmt_rate(prate64, iec)));
            if mtu_ticks != 0 || pspec.mpu != 0 {
                let mtu = units::calc_xmitsize(prate64, mtu_ticks);
                if details {
                    let s = format!("{}/{}", units::fmt_size(mtu), 1u32 << pspec.cell_log);
                    out.string("mtu", format_args!("mtu {s} "), &s);
                    out.size("mpu", "mpu ", pspec.mpu as u32, " ");
                } else {
                    out.size("minburst", "minburst ", mtu, " ");
                }
                if raw {
                    out.string("mtu_raw", format_args!("[{mtu_ticks:08x}] "), &format!("{mtu_ticks:x}"));
                }
            }
        }

        let mut latency = 1e6 * (limit as f64 / rate64 as f64) - units::tick2time(buffer_ticks as f64);
        if prate64 != 0 {
            let lat2 = 1e6 * (limit as f64 / prate64 as f64) - units::tick2time(mtu_ticks as f64);
            if lat2 > latency {
                latency = lat2;
            }
        }
        if latency >= 0.0 {
            // JSON gets the u64; the text goes through sprint_time's u32 parameter.
            let text = units::fmt_time(c_double_to_u32(latency));
            out.uint("lat", format_args!("lat {text} "), latency as u64);
        }
        if raw || latency < 0.0 {
            out.size("limit", "limit ", limit, " ");
        }
        if rspec.overhead != 0 {
            out.uint("overhead", format_args!("overhead {} ", rspec.overhead), rspec.overhead as u64);
        }
        if rspec.linklayer != LinkLayer::Ethernet || details {
            out.string("linklayer", format_args!("linklayer {} ", rspec.linklayer.name()), rspec.linklayer.name());
        }
    }

    crate::classful!();

    /// `tbf_dump` overwrites the qdisc's backlog with the child's before reporting.
    /// The time the kernel's watchdog would be armed for after the last dequeue
    /// that found nothing sendable; None once a packet has been sent or after reset.
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
    fn sync_stats(&mut self, sch: &mut Sch) {
        self.child.sync_stats();
        sch.stats.backlog = self.child.stats().backlog;
    }
}

/// One class, `<handle>:1`. The kernel's `tbf_find` maps *every* classid to it, so
/// `parent 1:5` addresses the same class (and the grafted qdisc keeps parent 1:5).
/// tbf has no `dump_stats` class op: its class prints no counters.
impl OneClass for Tbf {
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
    use crate::sched::fifo::{Fifo, FifoKind};
    use crate::testing::{argv, dev, held, t};

    fn p(s: &str) -> Result<TbfOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn tbf(s: &str) -> Node<Tbf> {
        held(Tbf::new(&p(s).unwrap(), &dev(), 0x10000, t(0)).unwrap())
    }
    fn show(q: &Tbf, details: bool, raw: bool, json: bool) -> String {
        let mut out = if json { Out::json(false) } else { Out::text() }.with_flags(details, raw, false, false);
        out.open_object(None);
        q.dump(&mut out, &dev());
        out.close_object();
        out.into_string()
    }
    fn text(s: &str) -> String {
        show(&tbf(s), false, false, false)
    }

    // ---- parsing ---------------------------------------------------------------------

    #[test]
    fn parse_basic_fields() {
        let o = p("rate 1mbit burst 32kbit latency 400ms").unwrap();
        assert_eq!(o.rate.rate, 125_000);
        assert_eq!(o.burst, Some(4096));
        assert_eq!(o.buffer, 512_000);
        // 125000 × 0.4 + 4096
        assert_eq!(o.limit, 54_096);
        assert_eq!((o.rate.cell_log, o.rate.cell_align, o.rate.linklayer), (3, -1, LinkLayer::Ethernet));
        assert_eq!(o.peakrate, RateSpec::default());
        assert_eq!((o.mtu, o.pburst, o.rate64), (0, None, None));

        let o = p("rate 1mbit burst 10k latency 50ms peakrate 2mbit mtu 1540/16 mpu 64 overhead 10 linklayer adsl")
            .unwrap();
        assert_eq!(o.peakrate.rate, 250_000);
        assert_eq!(o.pburst, Some(1540));
        assert_eq!(o.peakrate.cell_log, 4);
        assert_eq!((o.rate.mpu, o.peakrate.mpu, o.rate.overhead), (64, 64, 10));
        assert_eq!(o.peakrate.linklayer, LinkLayer::Atm);
        // min(125000×0.05 + 10240, 250000×0.05 + 1540)
        assert_eq!(o.limit, 14_040);
        assert_eq!(o.mtu, units::calc_xmittime(250_000, 1540));

        let o = p("rate 100gbit burst 10mb latency 10ms").unwrap();
        assert_eq!(o.rate.rate, u32::MAX);
        assert_eq!(o.rate64, Some(12_500_000_000));
        // mpu is a 16-bit field
        assert_eq!(p("rate 1mbit burst 10k limit 3000 mpu 70000").unwrap().rate.mpu, 4464);
        // repeated zero values are not duplicates
        assert!(p("rate 1mbit burst 10k latency 0 latency 5ms").is_ok());
        assert!(p("rate 1mbit burst 10k limit 3000 overhead 0 overhead 4").is_ok());
        assert!(p("rate 1mbit burst 10k limit 3000 peakrate 0").is_ok());
        // abbreviations
        let o = p("rate 1mbit bur 1500b lim 1000 over 5 link a").unwrap();
        assert_eq!((o.limit, o.rate.overhead, o.rate.linklayer), (1000, 5, LinkLayer::Atm));
    }

    #[test]
    fn parse_errors_exact() {
        let usage = USAGE;
        let e = |s: &str| p(s).unwrap_err();
        assert_eq!(e("rate 1mbit latency 50ms").msg, format!("tbf: the \"burst\" parameter is mandatory.\n{usage}"));
        assert_eq!(e("").msg, format!("tbf: the \"rate\" parameter is mandatory.\ntbf: the \"burst\" parameter is mandatory.\ntbf: either \"limit\" or \"latency\" is required.\n{usage}"));
        assert_eq!(
            e("rate 1mbit burst 10k latency 50ms limit 1000").msg,
            "tbf: specifying both \"latency\" and \"limit\" is not allowed\n"
        );
        assert_eq!(
            e("rate 1mbit burst 10k limit 1000 latency 2").msg,
            "tbf: specifying both \"limit\" and \"/latency\" is not allowed\n"
        );
        assert_eq!(
            e("rate 1mbit burst 10k buffer 20k latency 50ms").msg,
            "tbf: duplicate \"buffer/burst/maxburst\" specification\n"
        );
        assert_eq!(e("rate 1mbit burst 10k limit 1 limit 2").msg, "tbf: duplicate \"limit\" specification\n");
        assert_eq!(
            e("rate 1mbit burst 10k limit 1 mtu 1 minburst 2").msg,
            "tbf: duplicate \"mtu/minburst\" specification\n"
        );
        assert_eq!(
            e("rate 1mbit burst 10k latency 50ms peakrate 2mbit").msg,
            format!("tbf: when \"peakrate\" is specified, \"mtu\" must also be specified.\n{usage}")
        );
        assert_eq!(e("rate 1mbit burst 10k/3 latency 50ms").msg, "tbf: illegal value for \"burst\": \"10k/3\"\n");
        assert_eq!(e("rate 1mbit burst 10k/x latency 50ms").msg, "tbf: illegal value for \"burst\": \"10k\"\n");
        assert_eq!(e("rate 1mbit bu x/8 latency 50ms").msg, "tbf: illegal value for \"bu\": \"x\"\n");
        assert_eq!(e("rate 1mbit burst 10k limit 1 minburst x").msg, "tbf: illegal value for \"minburst\": \"x\"\n");
        assert_eq!(
            e("rate 1mbit burst 10k latency 50ms overhead -4").msg,
            "tbf: illegal value for \"overhead\": \"-4\"\n"
        );
        assert_eq!(
            e("rate 1mbit burst 10k latency 50ms overhead 0x10").msg,
            "tbf: illegal value for \"overhead\": \"0x10\"\n"
        );
        assert_eq!(
            e("rate 1mbit burst 10k latency 50ms linklayer ATM").msg,
            "tbf: illegal value for \"linklayer\": \"ATM\"\n"
        );
        assert_eq!(e("rate 1mbit burst 10k latency 1min").msg, "tbf: illegal value for \"latency\": \"1min\"\n");
        assert_eq!(e("rate foo burst 10k latency 1ms").msg, "tbf: illegal value for \"rate\": \"foo\"\n");
        assert_eq!(
            e("rate 0 burst 1500 limit 1500").msg,
            format!("tbf: the \"rate\" parameter is mandatory.\n{usage}")
        );
        assert_eq!(e("rate 1mbit burst 10k latency 50ms foo").msg, format!("tbf: unknown parameter \"foo\"\n{usage}"));
        assert_eq!(e("ra 1mbit").msg, format!("tbf: unknown parameter \"ra\"\n{usage}"));
        assert_eq!(e("help"), TcError::tc(usage));
        assert_eq!(e("rate 1mbit burst 10k limit"), TcError::incomplete());
        assert_eq!(e("rate 1mbit burst 10k limit").code, 255);
        assert_eq!(e("help").code, 1);
    }

    // ---- kernel-side configuration -------------------------------------------------

    #[test]
    fn change_validation() {
        // peak must exceed rate (1000001bit truncates to the same 125000 B/s)
        let o = p("rate 1mbit burst 10k limit 3000 peakrate 1000001bit mtu 1500").unwrap();
        assert_eq!(Tbf::new(&o, &dev(), 0x10000, t(0)).err(), Some(TcError::invalid()));
        // max_size 0
        let o = TbfOpt { burst: Some(0), ..p("rate 1mbit burst 10k limit 3000").unwrap() };
        assert_eq!(Tbf::new(&o, &dev(), 0x10000, t(0)).err(), Some(TcError::invalid()));
        // a failed change leaves everything as it was
        let mut q = tbf("rate 1mbit burst 10k limit 3000");
        let bad = Opts::new(p("rate 1mbit burst 10k limit 5000 peakrate 1mbit mtu 1500").unwrap());
        assert!(q.change(&bad, &dev(), t(5)).is_err());
        assert_eq!((q.limit(), q.max_size()), (3000, 10240));
        assert!(q.change(&Opts::new(()), &dev(), t(5)).is_err());
    }

    #[test]
    fn bucket_sizes() {
        let q = tbf("rate 1mbit burst 10k latency 50ms");
        assert_eq!((q.buffer_ns(), q.tokens(), q.max_size(), q.limit()), (81_920_000, 81_920_000, 10240, 16490));
        assert_eq!((q.mtu_ns(), q.ptokens()), (0, 0));
        assert!(!q.peak().is_present());
        let q = tbf("rate 1mbit burst 10k latency 50ms peakrate 2mbit mtu 1540");
        assert_eq!((q.mtu_ns(), q.ptokens(), q.max_size()), (1540 * 4000, 1540 * 4000, 1540));
        // Without TCA_TBF_BURST the kernel works from the tick values.
        let mut o = p("rate 1mbit burst 10k limit 3000").unwrap();
        o.burst = None;
        let q = Tbf::new(&o, &dev(), 0x10000, t(0)).unwrap();
        assert_eq!(q.buffer_ns(), (o.buffer as i64) << 6);
        assert_eq!(q.max_size(), (q.buffer_ns() as u64 * 125_000 / 1_000_000_000) as u32);
    }

    #[test]
    fn default_child_and_change() {
        let mut q = tbf("rate 1mbit burst 10k limit 3000");
        let c = q.child();
        assert_eq!((c.handle, c.parent, c.invisible, c.kind()), (0, 0x10001, true, "bfifo"));
        let mut o = Out::text();
        c.q.dump(&mut o, &dev());
        assert_eq!(o.into_string(), "limit 3000b");
        // change: the fifo child only gets the new limit
        q.enqueue(Packet::new(1, 1000), t(0));
        q.change(&Opts::new(p("rate 2mbit burst 20k limit 5000").unwrap()), &dev(), t(10)).unwrap();
        assert_eq!(q.child().stats().qlen, 1);
        let mut o = Out::text();
        q.child().q.dump(&mut o, &dev());
        assert_eq!(o.into_string(), "limit 5000b");
        // a change refills the buckets but keeps t_c
        assert_eq!((q.tokens(), q.t_c()), (20480 * 4000, t(0)));
        // a user-grafted pfifo gets the byte limit as a packet count
        let pf = Node::new(0x100000, 0x10001, Box::new(Fifo::with_limit(FifoKind::Pfifo, 7, &dev())));
        let old = q.graft(1, Some(pf), &dev()).unwrap().unwrap();
        assert_eq!(old.kind(), "bfifo");
        q.change(&Opts::new(p("rate 2mbit burst 20k limit 3000").unwrap()), &dev(), t(10)).unwrap();
        let mut o = Out::text();
        q.leaf(5).unwrap().q.dump(&mut o, &dev());
        assert_eq!(o.into_string(), "limit 3000p");
        // delete → noop; noop drops everything (the parent counts the drop)
        let old = q.graft(1, None, &dev()).unwrap().unwrap();
        assert_eq!(old.handle, 0x100000);
        assert_eq!(q.child().kind(), "noop");
        assert_eq!(q.child().parent, 0x10001);
        let drops = q.stats().drops;
        assert_eq!(q.enqueue(Packet::new(2, 100), t(20)), Enqueued::Congested);
        assert_eq!(q.stats().drops, drops + 1);
        // a change with a limit recreates the default bfifo
        q.change(&Opts::new(p("rate 2mbit burst 20k limit 4000").unwrap()), &dev(), t(30)).unwrap();
        assert_eq!(q.child().kind(), "bfifo");
        assert!(q.child().invisible);
        assert_eq!(q.class_minors(), vec![1]);
        assert_eq!(q.kind(), "tbf");
    }

    // ---- the algorithm ---------------------------------------------------------------

    /// 1 Mbit/s = 8000 ns per byte; burst 3000 B = 24 ms of credit.
    #[test]
    fn token_accounting_hand_stepped() {
        let mut q = tbf("rate 1mbit burst 3000 limit 100000");
        assert_eq!(q.buffer_ns(), 24_000_000);
        for i in 0..4 {
            assert_eq!(q.enqueue(Packet::new(i, 1000), t(0)), Enqueued::Success);
        }
        assert_eq!((q.stats().qlen, q.stats().backlog), (4, 4000));
        // Full bucket: three 1000-byte packets (8 ms each) leave at once.
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 0);
        assert_eq!(q.tokens(), 16_000_000);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
        assert_eq!(q.tokens(), 8_000_000);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 2);
        assert_eq!(q.tokens(), 0);
        // The fourth must wait the whole 8 ms.
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(8_000_000) });
        assert_eq!(q.stats().overlimits, 1);
        assert_eq!(q.watchdog(), Some(t(8_000_000)));
        // Each refused attempt counts; the deficit shrinks with time.
        assert_eq!(q.dequeue(t(5_000_000)), Dequeued::Throttled { until: t(8_000_000) });
        assert_eq!(q.stats().overlimits, 2);
        assert_eq!(q.tokens(), 0, "a refusal spends nothing");
        assert_eq!(q.t_c(), t(0));
        // At 8 ms exactly there is enough.
        assert_eq!(q.dequeue(t(8_000_000)).packet().unwrap().id, 3);
        assert_eq!((q.tokens(), q.t_c(), q.watchdog()), (0, t(8_000_000), None));
        assert_eq!(q.dequeue(t(9_000_000)), Dequeued::Empty);
        assert_eq!(q.stats().overlimits, 2, "empty is not an overlimit");
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.bytes, s.packets, s.drops), (0, 0, 4000, 4, 0));
        // Credit is capped at the bucket: a long idle gives 24 ms, not more.
        for i in 10..14 {
            q.enqueue(Packet::new(i, 1000), t(1_000_000_000));
        }
        for _ in 0..3 {
            assert!(q.dequeue(t(1_000_000_000)).packet().is_some());
        }
        assert_eq!(q.dequeue(t(1_000_000_000)), Dequeued::Throttled { until: t(1_008_000_000) });
    }

    #[test]
    fn partial_credit_until() {
        let mut q = tbf("rate 1mbit burst 1500 limit 100000");
        q.enqueue(Packet::new(1, 1500), t(0));
        q.enqueue(Packet::new(2, 1000), t(0));
        assert!(q.dequeue(t(0)).packet().is_some());
        assert_eq!(q.tokens(), 0);
        // 3 ms later: 3 ms of credit, 8 ms needed → 5 ms to go.
        assert_eq!(q.dequeue(t(3_000_000)), Dequeued::Throttled { until: t(8_000_000) });
        assert_eq!(q.dequeue(t(8_000_000)).packet().unwrap().id, 2);
        // toks = min(8 ms + 0, 12 ms) − 8 ms
        assert_eq!(q.tokens(), 0);
    }

    /// rate 1 Mbit/s, peak 2 Mbit/s (4000 ns/B), minburst 1500 B = 6 ms.
    #[test]
    fn peakrate_limits_back_to_back() {
        let mut q = tbf("rate 1mbit burst 10000 limit 100000 peakrate 2mbit mtu 1500");
        assert_eq!((q.buffer_ns(), q.mtu_ns(), q.max_size()), (80_000_000, 6_000_000, 1500));
        for i in 0..3 {
            q.enqueue(Packet::new(i, 1500), t(0));
        }
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 0);
        assert_eq!((q.tokens(), q.ptokens()), (68_000_000, 0));
        // The rate bucket has plenty; the peak bucket needs 6 ms.
        assert_eq!(q.dequeue(t(1_000_000)), Dequeued::Throttled { until: t(6_000_000) });
        assert_eq!(q.stats().overlimits, 1);
        assert_eq!(q.dequeue(t(6_000_000)).packet().unwrap().id, 1);
        // elapsed 6 ms: toks = min(6 + 68, 80) − 12 = 62 ms; ptoks = min(6 + 0, 6) − 6 = 0
        assert_eq!((q.tokens(), q.ptokens()), (62_000_000, 0));
        assert_eq!(q.dequeue(t(12_000_000)).packet().unwrap().id, 2);
        // Oversize for the peak bucket: dropped at enqueue.
        assert_eq!(q.enqueue(Packet::new(9, 1501), t(12_000_000)), Enqueued::Dropped);
        assert_eq!(q.stats().drops, 1);
    }

    #[test]
    fn atm_linklayer_costs_cells() {
        // 1000 B + overhead 8 = 1008 → 21 cells = 1113 wire bytes = 8.904 ms.
        let mut q = tbf("rate 1mbit burst 10000 limit 100000 overhead 8 linklayer atm");
        // burst 10000 + 8 → 209 cells = 11077 B
        assert_eq!(q.buffer_ns(), 11_077 * 8000);
        q.enqueue(Packet::new(1, 1000), t(0));
        assert!(q.dequeue(t(0)).packet().is_some());
        assert_eq!(q.tokens(), (11_077 - 1113) * 8000);
    }

    #[test]
    fn oversize_drops_and_gso_segmentation() {
        let mut q = tbf("rate 1mbit burst 1500 limit 100000");
        assert_eq!(q.enqueue(Packet::new(1, 1501), t(0)), Enqueued::Dropped);
        assert_eq!((q.stats().drops, q.stats().qlen), (1, 0));
        assert_eq!(q.enqueue(Packet::new(2, 1500), t(0)), Enqueued::Success);
        // GSO 4 segments of 1000 B: split, each queued.
        let mut gso = Packet::new(3, 4000);
        gso.gso_segs = 4;
        assert_eq!(q.enqueue(gso, t(0)), Enqueued::Success);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (5, 5500, 1));
        assert_eq!(q.child().stats().qlen, 5);
        let r = q.take_reduce();
        assert_eq!(r.bytes, 0);
        assert_eq!(r.pkts, -3);
        // Uneven split: 3001 B in 3 → 1001, 1000, 1000.
        let mut gso = Packet::new(4, 3001);
        gso.gso_segs = 3;
        q.enqueue(gso, t(0));
        assert_eq!((q.stats().qlen, q.stats().backlog), (8, 8501));
        // GSO whose segments do not fit: dropped whole.
        let mut gso = Packet::new(5, 3002);
        gso.gso_segs = 2;
        assert_eq!(q.enqueue(gso, t(0)), Enqueued::Dropped);
        assert_eq!(q.stats().drops, 2);
        // Segments leave one by one, each counted as one packet.
        assert_eq!(q.dequeue(t(0)).packet().unwrap().len, 1500);
        let mut lens = vec![];
        let mut now = 0;
        while q.stats().qlen > 0 {
            match q.dequeue(t(now)) {
                Dequeued::Packet(p) => lens.push((p.len, p.whole_id(), p.part())),
                Dequeued::Throttled { until } => now = until.as_nanos(),
                Dequeued::Empty => unreachable!(),
            }
        }
        // Each segment names its skb and which segment of it it is.
        assert_eq!(
            lens,
            vec![(1000, 3, 1), (1000, 3, 2), (1000, 3, 3), (1000, 3, 4), (1001, 4, 1), (1000, 4, 2), (1000, 4, 3)]
        );
        assert_eq!((q.stats().packets, q.stats().bytes), (8, 8501));
    }

    #[test]
    fn child_limit_drops() {
        let mut q = tbf("rate 1mbit burst 1500 limit 3000");
        assert_eq!(q.enqueue(Packet::new(1, 1500), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 1500), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(3, 1), t(0)), Enqueued::Dropped);
        assert_eq!((q.stats().drops, q.child().stats().drops), (1, 1));
        assert_eq!((q.stats().qlen, q.stats().backlog), (2, 3000));
    }

    #[test]
    fn peek_parks_and_conserves() {
        let mut q = tbf("rate 1mbit burst 1500 limit 100000");
        q.enqueue(Packet::new(1, 1500), t(0));
        q.enqueue(Packet::new(2, 1500), t(0));
        // Peek takes the first packet through the bucket and parks it.
        assert_eq!(q.peek(t(0)).unwrap().id, 1);
        assert_eq!(q.tokens(), 0);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.bytes, s.packets), (2, 3000, 1500, 1));
        // Peeking again returns the same packet without touching the bucket.
        assert_eq!(q.peek(t(1)).unwrap().id, 1);
        assert_eq!(q.stats().overlimits, 0);
        // Dequeue hands over the parked packet; bstats are not counted twice.
        assert_eq!(q.dequeue(t(1)).packet().unwrap().id, 1);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.bytes, s.packets), (1, 1500, 1500, 1));
        // A peek that finds no credit parks nothing and counts an overlimit.
        assert!(q.peek(t(2)).is_none());
        assert_eq!((q.stats().overlimits, q.watchdog()), (1, Some(t(12_000_000))));
        assert_eq!(q.dequeue(t(12_000_000)).packet().unwrap().id, 2);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().bytes), (0, 0, 3000));
    }

    #[test]
    fn reset_refills_and_empties() {
        let mut q = tbf("rate 1mbit burst 1500 limit 100000");
        for i in 0..3 {
            q.enqueue(Packet::new(i, 1000), t(0));
        }
        q.peek(t(0));
        assert!(q.dequeue(t(0)).packet().is_some());
        assert!(q.peek(t(0)).is_none());
        q.reset(t(50));
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog), (0, 0));
        assert_eq!(q.child().stats().qlen, 0);
        assert_eq!((q.tokens(), q.t_c(), q.watchdog()), (12_000_000, t(50), None));
        assert_eq!(q.dequeue(t(60)), Dequeued::Empty);
    }

    #[test]
    fn nested_tbf_reports_inner_wakeup() {
        let mut outer = tbf("rate 10mbit burst 10000 limit 100000");
        let inner = Tbf::new(&p("rate 1mbit burst 1000 limit 100000").unwrap(), &dev(), 0x20000, t(0)).unwrap();
        outer.graft(1, Some(Node::new(0x20000, 0x10001, Box::new(inner))), &dev()).unwrap();
        for i in 0..2 {
            assert_eq!(outer.enqueue(Packet::new(i, 1000), t(0)), Enqueued::Success);
        }
        assert_eq!(outer.dequeue(t(0)).packet().unwrap().id, 0);
        // The inner bucket is empty: the outer reports the inner's wake-up, counts no
        // overlimit itself, and the inner counts exactly one.
        assert_eq!(outer.dequeue(t(0)), Dequeued::Throttled { until: t(8_000_000) });
        assert_eq!(outer.stats().overlimits, 0);
        assert_eq!(outer.child().stats().overlimits, 1);
        assert_eq!(outer.dequeue(t(8_000_000)).packet().unwrap().id, 1);
        let (o, i) = (outer.stats(), outer.child().stats());
        assert_eq!((o.qlen, o.bytes, o.packets, i.qlen, i.bytes, i.packets), (0, 2000, 2, 0, 2000, 2));
    }

    #[test]
    fn sync_stats_takes_child_backlog() {
        let mut q = tbf("rate 1mbit burst 1500 limit 100000");
        q.enqueue(Packet::new(1, 1000), t(0));
        q.enqueue(Packet::new(2, 1000), t(0));
        q.peek(t(0));
        assert_eq!(q.stats().backlog, 2000);
        q.sync_stats();
        // The parked packet is not in the child any more: tbf_dump reports 1000.
        assert_eq!(q.stats().backlog, 1000);
    }

    /// Random traffic: every packet is sent, dropped or still queued.
    #[test]
    fn conservation() {
        let mut q = tbf("rate 5mbit burst 4000 limit 20000 peakrate 20mbit mtu 2000");
        let mut seed = 12345u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let (mut sent_b, mut sent_p, mut enq_b, mut enq_p) = (0u64, 0u64, 0u64, 0u64);
        let mut now = 0u64;
        let mut last_id = None;
        for id in 0..5000u64 {
            now += (rnd() % 400_000) as u64;
            let len = 60 + rnd() % 2100;
            enq_b += len as u64;
            enq_p += 1;
            q.enqueue(Packet::new(id, len), t(now));
            if rnd() % 3 == 0 {
                q.peek(t(now));
            }
            while let Dequeued::Packet(pk) = q.dequeue(t(now)) {
                assert!(last_id.is_none_or(|l| pk.id > l), "no reordering");
                last_id = Some(pk.id);
                sent_b += pk.len as u64;
                sent_p += 1;
            }
        }
        let s = q.stats().clone();
        assert_eq!((s.bytes, s.packets), (sent_b, sent_p));
        let dropped_b = enq_b - sent_b - s.backlog as u64;
        assert_eq!(enq_p, sent_p + s.drops as u64 + s.qlen as u64);
        assert!(dropped_b > 0 && s.drops > 0 && s.overlimits > 0);
        assert!(s.bytes as f64 <= 5e6 / 8.0 * (now as f64 / 1e9) + 4000.0, "never above rate + burst");
    }

    // ---- dump -------------------------------------------------------------------------

    #[test]
    fn dump_text_matches_iproute2() {
        assert_eq!(text("rate 1mbit burst 32kbit latency 400ms"), "rate 1Mbit burst 4Kb lat 400ms ");
        assert_eq!(text("rate 1mbit burst 10kb latency 70ms"), "rate 1Mbit burst 10Kb lat 70ms ");
        assert_eq!(text("rate 1mbit burst 32kbit limit 10000"), "rate 1Mbit burst 4Kb lat 47.2ms ");
        assert_eq!(text("rate 3mbit burst 20k limit 5000"), "rate 3Mbit burst 20Kb limit 5000b ");
        assert_eq!(
            text("rate 1mbit burst 10k latency 50ms peakrate 2mbit mtu 1540"),
            "rate 1Mbit burst 10Kb peakrate 2Mbit minburst 1540b lat 50ms "
        );
        assert_eq!(
            text("rate 1mbit burst 10k latency 50ms linklayer atm"),
            "rate 1Mbit burst 11342b lat 41.2ms linklayer atm "
        );
        assert_eq!(
            text("rate 1mbit burst 10k latency 50ms overhead 24"),
            "rate 1Mbit burst 10264b lat 49.8ms overhead 24 "
        );
        assert_eq!(text("rate 1mibit burst 10k latency 50ms"), "rate 1048Kbit burst 10Kb lat 50ms ");
        assert_eq!(text("rate 1kibit burst 10k latency 50ms"), "rate 1024bit burst 10Kb lat 46.9ms ");
        assert_eq!(text("rate 125bps burst 10k latency 50ms"), "rate 1Kbit burst 10Kb lat 48ms ");
        assert_eq!(text("rate 10gbit burst 1mb latency 10ms"), "rate 10Gbit burst 1048560b lat 10ms ");
        assert_eq!(text("rate 100gbit burst 10mb latency 10ms"), "rate 100Gbit burst 10Mb lat 10ms ");
        assert_eq!(text("rate 1tbit burst 10mb latency 10ms"), "rate 1Tbit burst 10480000b lat 10ms ");
        assert_eq!(
            text("rate 40gbit burst 1mb latency 1ms peakrate 100gbit mtu 9000"),
            "rate 40Gbit burst 1048319b peakrate 100Gbit minburst 8800b lat 1ms "
        );
        assert_eq!(text("rate 8bit burst 1500 limit 1500"), "rate 8bit burst 125b lat 1.37e+03s ");
        assert_eq!(text("rate 999bit burst 1500 limit 1500"), "rate 992bit burst 1499b lat 0us ");
        assert_eq!(text("rate 1500kbit burst 1500 limit 1500"), "rate 1500Kbit burst 1499b lat 0us ");
        assert_eq!(text("rate 2500000 burst 1500 limit 1500"), "rate 2500Kbit burst 1500b lat 0us ");
        assert_eq!(text("rate 1mbit burst 10k limit 2m"), "rate 1Mbit burst 10Kb lat 16.7s ");
        assert_eq!(text("rate 1mbit burst 1mb limit 2m"), "rate 1Mbit burst 1Mb lat 8.39s ");
        assert_eq!(text("rate 1mbit burst 10kb limit 20kbit"), "rate 1Mbit burst 10Kb limit 2560b ");
        assert_eq!(text("rate 1mbit burst 1500b limit 1g"), "rate 1Mbit burst 1500b lat 4.29e+03s ");
        assert_eq!(text("rate 1mbit burst 1.5k limit 20000"), "rate 1Mbit burst 1536b lat 148ms ");
        assert_eq!(text("rate 1mbit burst 10k latency 500us"), "rate 1Mbit burst 10Kb lat 496us ");
        assert_eq!(
            text("rate 1mbit burst 10k limit 3000 peakrate 2mbit minburst 2k"),
            "rate 1Mbit burst 10Kb peakrate 2Mbit minburst 2Kb lat 3.81ms "
        );
        assert_eq!(
            text("rate 1mbit burst 100 limit 3000 peakrate 2mbit mtu 10"),
            "rate 1Mbit burst 100b peakrate 2Mbit minburst 10b lat 23.2ms "
        );
        assert_eq!(
            text("rate 1mbit burst 1 limit 3000 overhead 10 linklayer atm"),
            "rate 1Mbit burst 53b lat 23.6ms overhead 10 linklayer atm "
        );
        assert_eq!(
            text("rate 1mbit burst 10k latency 50ms peakrate 1gbit mtu 1"),
            "rate 1Mbit burst 10Kb peakrate 1Gbit lat 50ms "
        );
        assert_eq!(
            text("rate 5gbit burst 10k latency 5ms peakrate 6gbit mtu 9000"),
            "rate 5Gbit burst 10200b peakrate 6Gbit minburst 8976b lat 5ms "
        );
        let iec = {
            let mut out = Out::text().with_flags(false, false, true, false);
            tbf("rate 1mbit burst 10k limit 1000").dump(&mut out, &dev());
            out.into_string()
        };
        assert_eq!(iec, "rate 1000000bit burst 10Kb limit 1000b ");
    }

    /// `rate -1mbit`: iproute2's get_rate64 turns -125000.0 B/s into 2^64 − 125000
    /// (C double → u64). The kernel accepts it (mult rounds to 0, so every packet is
    /// free) and tc prints it as below (golden err-bad-rate).
    #[test]
    fn absurd_rate_from_negative_input() {
        let rate64 = 0u64.wrapping_sub(125_000);
        let mut o = p("rate 1mbit burst 10k latency 50ms").unwrap();
        o.rate.rate = u32::MAX;
        o.rate64 = Some(rate64);
        o.limit = c_double_to_u32(rate64 as f64 * 50_000.0 / 1e6 + 10240.0);
        o.buffer = units::calc_xmittime(u32::MAX as u64, 10240);
        let mut q = held(Tbf::new(&o, &dev(), 0x80010000, t(0)).unwrap());
        assert_eq!((q.rate().mult, q.buffer_ns(), q.max_size()), (0, 0, 10240));
        assert_eq!(show(&q, false, false, false), "rate 18446744Tbit burst 0b lat 0us ");
        q.enqueue(Packet::new(1, 1500), t(0));
        assert!(q.dequeue(t(0)).packet().is_some());
    }

    #[test]
    fn dump_details_raw_json() {
        let q = tbf("rate 1mbit burst 10k latency 50ms peakrate 2mbit mtu 1540/16");
        assert_eq!(
            show(&q, true, false, false),
            "rate 1Mbit burst 10Kb/1 mpu 0b peakrate 2Mbit mtu 1540b/1 mpu 0b lat 50ms linklayer ethernet "
        );
        assert_eq!(show(&q, false, false, true), r#"{"rate":125000,"burst":10240,"minburst":1540,"lat":50000}"#);
        let q = tbf("rate 1mbit burst 10k latency 50ms mpu 64");
        assert_eq!(show(&q, true, false, false), "rate 1Mbit burst 10Kb/1 mpu 64b lat 50ms linklayer ethernet ");
        assert_eq!(show(&q, false, false, true), r#"{"rate":125000,"burst":10240,"lat":50000}"#);
        let q = tbf("rate 1mbit burst 10k latency 50ms linklayer adsl overhead 10");
        assert_eq!(
            show(&q, true, false, false),
            "rate 1Mbit burst 11342b/1 mpu 0b lat 41.2ms overhead 10 linklayer atm "
        );
        let q = tbf("rate 1mbit burst 10k latency 50ms linklayer atm");
        assert_eq!(show(&q, false, false, true), r#"{"rate":125000,"burst":11342,"lat":41184,"linklayer":"atm"}"#);
        let q = tbf("rate 1mbit burst 10k latency 50ms overhead 24");
        assert_eq!(show(&q, false, false, true), r#"{"rate":125000,"burst":10264,"lat":49808,"overhead":24}"#);
        let q = tbf("rate 1mbit burst 10k latency 50ms peakrate 2mbit mtu 1540 mpu 64 overhead 10 linklayer atm");
        assert_eq!(
            show(&q, false, false, false),
            "rate 1Mbit burst 11342b peakrate 2Mbit minburst 1748b lat 49.2ms overhead 10 linklayer atm "
        );
        assert_eq!(show(&q, true, false, false), "rate 1Mbit burst 11342b/1 mpu 64b peakrate 2Mbit mtu 1748b/1 mpu 64b lat 49.2ms overhead 10 linklayer atm ");
        assert_eq!(
            show(&q, true, false, true),
            r#"{"rate":125000,"burst":"11342b/1","mpu":64,"mtu":"1748b/1","mpu":64,"lat":49164,"overhead":10,"linklayer":"atm"}"#
        );
        assert_eq!(show(&q, false, true, false), "rate 1Mbit burst 11342b [0015a216] peakrate 2Mbit minburst 1748b [0001ab00] lat 49.2ms limit 14040b overhead 10 linklayer atm ");
        assert_eq!(
            show(&q, false, true, true),
            r#"{"rate":125000,"burst":11342,"burst_raw":"15a216","minburst":1748,"mtu_raw":"1ab00","lat":49164,"limit":14040,"overhead":10,"linklayer":"atm"}"#
        );
        assert_eq!(
            show(&q, true, true, true),
            r#"{"rate":125000,"burst":"11342b/1","mpu":64,"burst_raw":"15a216","mtu":"1748b/1","mpu":64,"mtu_raw":"1ab00","lat":49164,"limit":14040,"overhead":10,"linklayer":"atm"}"#
        );
        let q = tbf("rate 1mbit burst 10k limit 1000 mpu 100");
        assert_eq!(
            show(&q, true, false, true),
            r#"{"rate":125000,"burst":"10Kb/1","mpu":100,"limit":1000,"linklayer":"ethernet"}"#
        );
        let q = tbf("rate 5gbit burst 10k latency 5ms peakrate 6gbit mtu 9000");
        assert_eq!(
            show(&q, true, false, true),
            r#"{"rate":625000000,"burst":"10200b/1","mpu":0,"mtu":"8976b/1","mpu":0,"lat":5000,"linklayer":"ethernet"}"#
        );
        // JSON latencies beyond 32 bits, small rates, large rates
        assert_eq!(
            show(&tbf("rate 1mbit burst 1500b limit 1g"), false, false, true),
            r#"{"rate":125000,"burst":1500,"lat":8589922592}"#
        );
        assert_eq!(
            show(&tbf("rate 8bit burst 1500 limit 1500"), false, false, true),
            r#"{"rate":1,"burst":125,"lat":1374389534}"#
        );
        assert_eq!(
            show(&tbf("rate 1mibit burst 10k latency 50ms"), false, false, true),
            r#"{"rate":131072,"burst":10239,"lat":49995}"#
        );
        assert_eq!(
            show(&tbf("rate 100gbit burst 10mb latency 10ms"), false, false, true),
            r#"{"rate":12500000000,"burst":10485600,"lat":10000}"#
        );
        assert_eq!(
            show(&tbf("rate 40gbit burst 1mb latency 1ms peakrate 100gbit mtu 9000"), false, false, true),
            r#"{"rate":5000000000,"burst":1048319,"minburst":8800,"lat":1000}"#
        );
        assert_eq!(
            show(&tbf("rate 1mbit burst 10k latency 250usec"), false, false, true),
            r#"{"rate":125000,"burst":10240,"lat":248}"#
        );
        assert_eq!(
            show(&tbf("rate 1mbit burst 1.5k limit 20000"), false, false, true),
            r#"{"rate":125000,"burst":1536,"lat":147712}"#
        );
    }
}
