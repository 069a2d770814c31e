//! gred — Generic RED: up to 16 virtual queues (VQs, "DPs"), each a RED instance,
//! in one FIFO. Mirrors net/sched/sch_gred.c (kernel side) and tc/q_gred.c
//! (iproute2 side); the RED arithmetic is red.rs's (include/net/red.h,
//! tc/tc_red.c); §gred of docs/kernel-notes.md.
//!
//! Theory: `tc qdisc add … gred setup vqs N default D [grio] [limit BYTES] [ecn]
//! [harddrop]` makes the table (the qdisc's byte limit defaults to txqueuelen ×
//! psched_mtu); each VQ is then configured alone with `tc qdisc change … gred vq V
//! limit … min … max … avpkt …` (its limit capped at the qdisc's). A packet's VQ is
//! `skb->tc_index & 15`; one without a configured VQ goes to the default VQ, and
//! when that is not configured either it passes untouched, within the qdisc's
//! limit. Each VQ averages its own backlog (or, in WRED mode, the whole queue's, one
//! average shared by all) and marks or drops as RED does, then holds the packet to
//! its own limit. With `grio` (RIO mode) a VQ's average is judged plus the
//! averages of the busy VQs with a lower `prio`; two VQs of equal prio turn RIO
//! into WRED mode. Packets leave in arrival order whatever their VQ.
//!
//! Differences from the kernel, all deliberate:
//! * **tc_index**: the engine's packets carry no `skb->tc_index` (its setters in
//!   the kernel — dsmark, tcindex — are gone since 6.3; BPF aside), so every packet
//!   arrives with 0: VQ 0 if configured, else the default VQ. The VQ gred writes
//!   back into tc_index for the dequeue is kept with the queued packet.
//! * **Randomness** and **time** as in red.rs: a splitmix64 generator seeded from
//!   the handle; the clock is the `now` passed in. A dump computes the averages as
//!   of the last enqueue or dequeue (the kernel's `gred_dump` reads the clock).

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::red::{
    default_seed, print_red_flags, red_action, red_calc_qavg, red_check_params, red_eval_stab, red_eval_wlog_plog,
    scan_lg, RedAction, RedParms, RedStats, RedVars, RED_STAB_SIZE, TC_RED_ECN, TC_RED_HARDDROP,
};
use crate::sched::sfq::SplitMix64;
use crate::tc::units::{self, c_double_to_u32};
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// MAX_DPs.
const MAX_DPS: u32 = 16;
/// GRED_DEF_PRIO.
const DEF_PRIO: u8 = (MAX_DPS / 2) as u8;
/// GRED_VQ_MASK.
const VQ_MASK: u32 = MAX_DPS - 1;
/// GRED_VQ_RED_FLAGS: the flags a VQ may have of its own.
const VQ_RED_FLAGS: u32 = (TC_RED_ECN | TC_RED_HARDDROP) as u32;

/// tc sends TCA_OPTIONS always; `gred_init` wants them.
pub static OPS: Ops = Ops {
    id: "gred",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Gred::new(c.required()?, c.dev, c.handle)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// What tc sends: the table (TCA_GRED_DPS, TCA_GRED_LIMIT if given) or one VQ
/// (TCA_GRED_PARMS, TCA_GRED_STAB, TCA_GRED_MAX_P and a TCA_GRED_VQ_LIST entry with
/// its flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GredOpt {
    Setup(GredSetup),
    Vq(Box<GredVq>),
}

/// `struct tc_gred_sopt` plus the limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GredSetup {
    pub dps: u32,
    pub def_dp: u32,
    pub grio: bool,
    /// TC_RED_ECN | TC_RED_HARDDROP for every VQ.
    pub flags: u32,
    /// Bytes; tc sends it only when non-zero.
    pub limit: Option<u32>,
}

/// `struct tc_gred_qopt` as tc fills it, the stab, max_P and the VQ's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GredVq {
    pub dp: u32,
    pub limit: u32,
    pub qth_min: u32,
    pub qth_max: u32,
    pub wlog: u8,
    pub plog: u8,
    pub scell_log: u8,
    /// `prio`, 0 when not given (the kernel then picks one in RIO mode).
    pub prio: u8,
    pub stab: [u8; RED_STAB_SIZE],
    pub max_p: u32,
    pub flags: u32,
}

/// q_gred.c `explain`.
const USAGE: &str = "Usage: tc qdisc { add | replace | change } ... gred setup vqs NUMBER\n           default DEFAULT_VQ [ grio ] [ limit BYTES ] [ecn] [harddrop]\n       tc qdisc change ... gred vq VQ [ prio VALUE ] limit BYTES\n           min BYTES max BYTES avpkt BYTES [ burst PACKETS ]\n           [ probability PROBABILITY ] [ bandwidth KBPS ] [ecn] [harddrop]\n";

fn ill(what: &str) -> TcError {
    TcError::tc(format!("Illegal \"{what}\"\n"))
}

fn too_many() -> TcError {
    TcError::tc(format!("GRED: only {MAX_DPS} VQs are currently supported\n"))
}

/// C `strtol(s, NULL, 10)`: the leading decimal integer, 0 without one (saturating
/// at the `long` range as glibc does).
fn strtol10(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add((b - b'0') as i64);
    }
    if neg {
        v.saturating_neg()
    } else {
        v
    }
}

/// tc side: q_gred.c `gred_parse_opt` (and `init_gred` after `setup`).
pub fn parse(args: &mut Args) -> Result<GredOpt, TcError> {
    let mut ok = 0;
    let (mut dp, mut limit, mut qth_min, mut qth_max) = (MAX_DPS, 0u32, 0u32, 0u32);
    let (mut burst, mut avpkt, mut flags, mut rate, mut prio) = (0u32, 0u32, 0u32, 0u32, 0u8);
    let mut probability = 0.02f64;
    while let Some(a) = args.next() {
        match a {
            "limit" => limit = units::get_size(args.value()?).ok_or_else(|| ill("limit"))?,
            "setup" => {
                if ok > 0 {
                    return Err(ill("setup"));
                }
                return parse_setup(args).map(GredOpt::Setup);
            }
            "min" => qth_min = units::get_size(args.value()?).ok_or_else(|| ill("min"))?,
            "max" => qth_max = units::get_size(args.value()?).ok_or_else(|| ill("max"))?,
            "vq" | "DP" => {
                dp = units::get_unsigned10(args.value()?).ok_or_else(|| ill("vq"))?;
                if dp >= MAX_DPS {
                    return Err(too_many());
                }
            }
            "burst" => burst = units::get_u32(args.value()?).ok_or_else(|| ill("burst"))?,
            "avpkt" => avpkt = units::get_size(args.value()?).ok_or_else(|| ill("avpkt"))?,
            "probability" => probability = scan_lg(args.value()?).ok_or_else(|| ill("probability"))?,
            // `opt.prio = strtol(…)`: no check, truncated to the u8 field.
            "prio" => prio = strtol10(args.value()?) as u8,
            "bandwidth" => {
                let v = args.value()?;
                rate = args.rate(v).ok_or_else(|| ill("bandwidth"))?;
            }
            "ecn" => flags |= TC_RED_ECN as u32,
            "harddrop" => flags |= TC_RED_HARDDROP as u32,
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
        // Every option but ecn and harddrop counts towards `ok`.
        if a != "ecn" && a != "harddrop" {
            ok += 1;
        }
    }
    if ok == 0 {
        return Err(TcError::tc(USAGE));
    }
    if dp == MAX_DPS || limit == 0 || qth_min == 0 || qth_max == 0 || avpkt == 0 {
        return Err(TcError::tc("Required parameter (vq, limit, min, max, avpkt) is missing\n"));
    }
    if burst == 0 {
        burst = qth_min.wrapping_mul(2).wrapping_add(qth_max) / avpkt.wrapping_mul(3).max(1);
        args.notes.push_str(&format!("GRED: set burst to {burst}\n"));
    }
    if rate == 0 {
        rate = units::get_rate("10Mbit").expect("a valid rate");
        args.notes.push_str("GRED: set bandwidth to 10Mbit\n");
    }
    let (wlog, plog) = red_eval_wlog_plog("GRED", args, (qth_min, qth_max), burst, avpkt, probability)?;
    let (scell_log, stab) = red_eval_stab("GRED", wlog, avpkt, rate)?;
    Ok(GredOpt::Vq(Box::new(GredVq {
        dp,
        limit,
        qth_min,
        qth_max,
        wlog,
        plog,
        scell_log,
        prio,
        stab,
        max_p: c_double_to_u32(probability * 4294967296.0),
        flags,
    })))
}

/// q_gred.c `init_gred`: the words after `setup`.
fn parse_setup(args: &mut Args) -> Result<GredSetup, TcError> {
    let mut o = GredSetup { dps: 0, def_dp: MAX_DPS, grio: false, flags: 0, limit: None };
    while let Some(a) = args.next() {
        match a {
            "vqs" | "DPs" => {
                o.dps = units::get_unsigned10(args.value()?).ok_or_else(|| ill("vqs"))?;
                if o.dps > MAX_DPS {
                    return Err(too_many());
                }
            }
            "default" => {
                if o.dps == 0 {
                    return Err(TcError::tc("\"default\" must be defined after \"vqs\"\n"));
                }
                o.def_dp = units::get_unsigned10(args.value()?).ok_or_else(|| ill("default"))?;
                if o.def_dp >= o.dps {
                    return Err(TcError::tc("\"default\" must be less than \"vqs\"\n"));
                }
            }
            "grio" => o.grio = true,
            "limit" => {
                let l = units::get_size(args.value()?).ok_or_else(|| ill("limit"))?;
                o.limit = (l != 0).then_some(l);
            }
            "ecn" => o.flags |= TC_RED_ECN as u32,
            "harddrop" => o.flags |= TC_RED_HARDDROP as u32,
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    if o.dps == 0 || o.def_dp == MAX_DPS {
        return Err(TcError::tc("Illegal gred setup parameters\n"));
    }
    Ok(o)
}

/// `struct gred_sched_data`: one VQ.
#[derive(Clone, Debug)]
struct Vq {
    limit: u32,
    dp: u32,
    red_flags: u32,
    bytesin: u64,
    packetsin: u32,
    backlog: u32,
    prio: u8,
    parms: RedParms,
    vars: RedVars,
    stats: RedStats,
}

/// `struct gred_sched` plus the qdisc's FIFO and limit.
pub struct Gred {
    tab: [Option<Box<Vq>>; MAX_DPS as usize],
    /// GRED_RIO_MODE and GRED_WRED_MODE.
    rio: bool,
    wred: bool,
    red_flags: u32,
    dps: u32,
    def: u32,
    /// The averaging state WRED mode shares between VQs.
    wred_set: RedVars,
    /// `sch->limit`, bytes.
    limit: u32,
    /// `sch->q`: packets with the VQ written into their tc_index.
    q: VecDeque<(Packet, u32)>,
    /// `sch->qstats.backlog`, kept here for the dump.
    backlog: u32,
    rng: SplitMix64,
    /// The clock as of the last enqueue or dequeue, for the dump's averages.
    last_now: Instant,
}

impl Gred {
    /// Mirrors `gred_init`: options are required, and may not configure a VQ.
    pub fn new(o: &GredOpt, dev: &DevInfo, handle: u32) -> Result<Gred, TcError> {
        let GredOpt::Setup(s) = o else {
            return Err(TcError::kernel(
                "sch_gred: virtual queue configuration can't be specified at initialization time",
            ));
        };
        let mut q = Gred {
            tab: Default::default(),
            rio: false,
            wred: false,
            red_flags: 0,
            dps: 0,
            def: 0,
            wred_set: RedVars::default(),
            limit: s.limit.unwrap_or(dev.tx_queue_len.wrapping_mul(dev.psched_mtu())),
            q: VecDeque::new(),
            backlog: 0,
            rng: SplitMix64(default_seed(handle)),
            last_now: Instant::ZERO,
        };
        q.change_table_def(s)?;
        Ok(q)
    }

    /// Re-seed the generator behind `prandom_u32`.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = SplitMix64(seed);
    }

    /// `gred_wred_mode_check`: two configured VQs share a prio.
    fn wred_mode_check(&self) -> bool {
        let live: Vec<u8> = self.tab[..self.dps as usize].iter().flatten().map(|q| q.prio).collect();
        live.iter().enumerate().any(|(i, p)| live[i + 1..].contains(p))
    }

    /// `gred_per_vq_red_flags_used`.
    fn per_vq_red_flags_used(&self) -> bool {
        self.red_flags == 0 && self.tab.iter().flatten().any(|q| q.red_flags != 0)
    }

    /// Mirrors `gred_change_table_def`.
    fn change_table_def(&mut self, s: &GredSetup) -> Result<(), TcError> {
        if s.dps > MAX_DPS {
            return Err(TcError::kernel("sch_gred: number of virtual queues too high"));
        }
        if s.dps == 0 {
            return Err(TcError::kernel("sch_gred: number of virtual queues can't be 0"));
        }
        if s.def_dp >= s.dps {
            return Err(TcError::kernel("sch_gred: default virtual queue above virtual queue count"));
        }
        if s.flags != 0 && self.per_vq_red_flags_used() {
            return Err(TcError::kernel(
                "sch_gred: can't set per-Qdisc RED flags when per-virtual queue flags are used",
            ));
        }
        self.dps = s.dps;
        self.def = s.def_dp;
        let flags_changed = self.red_flags != s.flags;
        self.red_flags = s.flags;
        self.rio = s.grio;
        self.wred = s.grio && self.wred_mode_check();
        if flags_changed {
            for q in self.tab[..s.dps as usize].iter_mut().flatten() {
                q.red_flags = s.flags & VQ_RED_FLAGS;
            }
        }
        // Shadowed VQs are destroyed; their packets stay in the queue.
        for q in &mut self.tab[s.dps as usize..] {
            *q = None;
        }
        Ok(())
    }

    /// Mirrors the VQ half of `gred_change`, `gred_vqs_validate`, `gred_change_vq`
    /// and `gred_vqs_apply`.
    fn change_vq(&mut self, o: &GredVq) -> Result<(), TcError> {
        if o.dp >= self.dps {
            return Err(TcError::kernel("sch_gred: virtual queue index above virtual queue count"));
        }
        if self.red_flags != 0 && self.red_flags != o.flags {
            return Err(TcError::kernel(
                "sch_gred: can't change per-virtual queue RED flags when per-Qdisc flags are used",
            ));
        }
        if o.flags & !VQ_RED_FLAGS != 0 {
            return Err(TcError::kernel("sch_gred: invalid RED flags specified"));
        }
        let prio = match (self.rio, o.prio) {
            (false, _) => DEF_PRIO,
            (true, 0) => self.tab[self.def as usize].as_ref().map_or(DEF_PRIO, |d| d.prio),
            (true, p) => p,
        };
        if !red_check_params(o.qth_min, o.qth_max, o.wlog, o.scell_log, Some(&o.stab)) {
            return Err(TcError::kernel("sch_gred: invalid RED parameters"));
        }
        let red_flags = self.red_flags & VQ_RED_FLAGS;
        let limit = o.limit.min(self.limit);
        let q = self.tab[o.dp as usize].get_or_insert_with(|| {
            Box::new(Vq {
                limit: 0,
                dp: o.dp,
                red_flags,
                bytesin: 0,
                packetsin: 0,
                backlog: 0,
                prio: 0,
                parms: RedParms::new(0, 0, 0, 0, 0, None, 0),
                vars: RedVars::default(),
                stats: RedStats::default(),
            })
        });
        q.dp = o.dp;
        q.prio = prio;
        q.limit = limit;
        if q.backlog == 0 {
            q.vars.qidlestart = None; // red_end_of_idle_period
        }
        q.parms = RedParms::new(o.qth_min, o.qth_max, o.wlog, o.plog, o.scell_log, Some(&o.stab), o.max_p);
        q.vars.reset();
        q.red_flags = o.flags;
        if self.rio {
            self.wred = self.wred_mode_check();
        }
        Ok(())
    }

    /// `gred_backlog`: the whole queue's in WRED mode, else the VQ's.
    fn vq_backlog(&self, q: &Vq) -> u32 {
        if self.wred {
            self.backlog
        } else {
            q.backlog
        }
    }

    fn push(&mut self, sch: &mut Sch, pkt: Packet, dp: u32) -> Enqueued {
        sch.stats.queued(pkt.len);
        self.backlog = self.backlog.wrapping_add(pkt.len);
        self.q.push_back((pkt, dp));
        Enqueued::Success
    }
}

impl Qdisc for Gred {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `gred_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        self.last_now = now;
        let len = pkt.len;
        // tc_index_to_dp: skb->tc_index is 0 here (theory above).
        let tc_index = 0u32;
        let mut dp = tc_index & VQ_MASK;
        if dp >= self.dps || self.tab[dp as usize].is_none() {
            dp = self.def;
            if self.tab[dp as usize].is_none() {
                // No VQ for it: pass within the qdisc's limit, tc_index untouched.
                if self.backlog as u64 + len as u64 <= self.limit as u64 {
                    return self.push(sch, pkt, 0);
                }
                sch.stats.dropped();
                return Enqueued::Dropped;
            }
        }
        let d = dp as usize;
        let mut others = 0u64;
        if !self.wred && self.rio {
            let prio = self.tab[d].as_ref().expect("vq").prio;
            for v in self.tab[..self.dps as usize].iter().flatten() {
                if v.prio < prio && v.vars.qidlestart.is_none() {
                    others = others.wrapping_add(v.vars.qavg);
                }
            }
        }
        let (wred, wred_set, total) = (self.wred, self.wred_set, self.backlog);
        let q = self.tab[d].as_mut().expect("vq");
        q.packetsin = q.packetsin.wrapping_add(1);
        q.bytesin = q.bytesin.wrapping_add(len as u64);
        if wred {
            q.vars.qavg = wred_set.qavg;
            q.vars.qidlestart = wred_set.qidlestart;
        }
        let backlog = if wred { total } else { q.backlog };
        q.vars.qavg = red_calc_qavg(&q.parms, &q.vars, backlog, now);
        q.vars.qidlestart = None; // red_end_of_idle_period
        if wred {
            self.wred_set.qavg = q.vars.qavg;
            self.wred_set.qidlestart = q.vars.qidlestart;
        }
        let ecn = q.red_flags & TC_RED_ECN as u32 != 0;
        let harddrop = q.red_flags & TC_RED_HARDDROP as u32 != 0;
        let rng = &mut self.rng;
        let qavg = q.vars.qavg.wrapping_add(others);
        let congestion = match red_action(&q.parms, &mut q.vars, qavg, || rng.next_u32()) {
            RedAction::Pass => false,
            RedAction::Prob => {
                sch.stats.overlimit();
                if !ecn || !pkt.set_ce() {
                    q.stats.prob_drop += 1;
                    true
                } else {
                    q.stats.prob_mark += 1;
                    false
                }
            }
            RedAction::Hard => {
                sch.stats.overlimit();
                if harddrop || !ecn || !pkt.set_ce() {
                    q.stats.forced_drop += 1;
                    true
                } else {
                    q.stats.forced_mark += 1;
                    false
                }
            }
        };
        if congestion {
            sch.stats.dropped();
            return Enqueued::Congested;
        }
        let backlog = if wred { total } else { q.backlog };
        if backlog as u64 + len as u64 <= q.limit as u64 {
            q.backlog = q.backlog.wrapping_add(len);
            return self.push(sch, pkt, dp);
        }
        q.stats.pdrop += 1;
        sch.stats.dropped();
        Enqueued::Dropped
    }

    /// Mirrors `gred_dequeue`: the head packet; its VQ's backlog falls, and an
    /// emptied VQ (the emptied queue, in WRED mode) starts an idle period.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.last_now = now;
        let Some((p, dp)) = self.q.pop_front() else { return Dequeued::Empty };
        sch.stats.unqueued(p.len);
        sch.stats.sent(&p);
        self.backlog = self.backlog.wrapping_sub(p.len);
        let (wred, total) = (self.wred, self.backlog);
        if dp < self.dps {
            if let Some(q) = self.tab[dp as usize].as_mut() {
                q.backlog = q.backlog.wrapping_sub(p.len);
                if wred {
                    if total == 0 {
                        self.wred_set.qidlestart = Some(now);
                    }
                } else if q.backlog == 0 {
                    q.vars.qidlestart = Some(now);
                }
            }
        }
        Dequeued::Packet(p)
    }

    /// `qdisc_peek_head`.
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        self.q.front().map(|(p, _)| p)
    }

    /// Mirrors `gred_reset`.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.q.clear();
        self.backlog = 0;
        for q in self.tab[..self.dps as usize].iter_mut().flatten() {
            q.vars.restart();
            q.backlog = 0;
        }
    }

    /// Mirrors `gred_change`: the table (the limit is taken before the table's
    /// checks, as the kernel does) or one VQ.
    fn change(&mut self, _sch: &mut Sch, opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        match opts.of::<GredOpt>()? {
            GredOpt::Setup(s) => {
                if let Some(l) = s.limit {
                    self.limit = l;
                }
                self.change_table_def(s)
            }
            GredOpt::Vq(v) => self.change_vq(v),
        }
    }

    /// What `gred_dump` sends, printed as q_gred.c `gred_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("dp_cnt", format_args!("vqs {} ", self.dps), self.dps as u64);
        out.uint("dp_default", format_args!("default {} ", self.def), self.def as u64);
        out.boolean("grio", format_args!("{}", if self.rio { "grio " } else { "" }), self.rio);
        out.size("limit", "limit ", self.limit, " ");
        print_red_flags(out, self.red_flags);
        out.open_array("vqs", "");
        for q in self.tab.iter().flatten() {
            out.open_object(None);
            out.uint("vq", format_args!("\n vq {} ", q.dp), q.dp as u64);
            out.uint("prio", format_args!("prio {} ", q.prio), q.prio as u64);
            out.size("limit", "limit ", q.limit, " ");
            out.size("min", "min ", q.parms.qth_min >> q.parms.wlog, " ");
            out.size("max", "max ", q.parms.qth_max >> q.parms.wlog, " ");
            print_red_flags(out, q.red_flags);
            if out.details() {
                let p = &q.parms;
                out.uint("ewma", format_args!("ewma {} ", p.wlog), p.wlog as u64);
                let g = units::fmt_g(p.max_p as f64 / 4294967296.0, 6);
                out.float("probability", format_args!("probability {g} "), &g);
                out.uint("Scell_log", format_args!("Scell_log {} ", p.scell_log), p.scell_log as u64);
            }
            if out.show_stats() {
                self.dump_vq_stats(q, out);
            }
            out.close_object();
        }
        out.close_array("");
    }
}

impl Gred {
    /// q_gred.c `gred_print_stats` with the VQ list's counters; the average is the
    /// dump's `red_calc_qavg` of the average itself (decayed when idling).
    fn dump_vq_stats(&self, q: &Vq, out: &mut Out) {
        let mut vars = q.vars;
        if self.wred {
            vars.qavg = self.wred_set.qavg;
            vars.qidlestart = self.wred_set.qidlestart;
        }
        let qavg = red_calc_qavg(&q.parms, &vars, (vars.qavg >> q.parms.wlog) as u32, self.last_now);
        let s = &q.stats;
        out.fp(format_args!("\n  Queue size: "));
        out.size("qave", "average ", (qavg >> q.parms.wlog) as u32, " ");
        out.size("backlog", "current ", self.vq_backlog(q), " ");
        out.fp(format_args!("\n  Dropped packets: "));
        out.uint("forced_drop", format_args!("forced {} ", s.forced_drop), s.forced_drop as u64);
        out.uint("prob_drop", format_args!("early {} ", s.prob_drop), s.prob_drop as u64);
        out.uint("pdrop", format_args!("pdrop {} ", s.pdrop), s.pdrop as u64);
        out.uint("other", format_args!("other 0 "), 0);
        out.fp(format_args!("\n  Marked packets: "));
        out.uint("forced_mark", format_args!("forced {} ", s.forced_mark), s.forced_mark as u64);
        out.uint("prob_mark", format_args!("early {} ", s.prob_mark), s.prob_mark as u64);
        out.fp(format_args!("\n  Total packets: "));
        out.uint("packets", format_args!("{} ", q.packetsin), q.packetsin as u64);
        // TCA_GRED_VQ_STAT_BYTES is read as a u32 and printed by print_size.
        out.size("bytes", "(", q.bytesin as u32, ") ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::testing::{argv, dev, held, t};

    fn p(s: &str) -> Result<GredOpt, TcError> {
        parse(&mut Args::new(&argv(s)))
    }

    fn setup(s: &str) -> Node<Gred> {
        held(Gred::new(&p(s).unwrap(), &dev(), 0x1_0000).unwrap())
    }

    /// A VQ with Wlog 0 (the average is the backlog itself) and no idle table.
    fn vq(dp: u32, limit: u32, min: u32, max: u32, prio: u8, flags: u32) -> Opts {
        Opts::new(GredOpt::Vq(Box::new(GredVq {
            dp,
            limit,
            qth_min: min,
            qth_max: max,
            wlog: 0,
            plog: 0,
            scell_log: 0,
            prio,
            stab: [0; RED_STAB_SIZE],
            max_p: 0,
            flags,
        })))
    }

    fn ect(id: u64, len: u32) -> Packet {
        let mut p = Packet::new(id, len);
        p.tos = 0b10;
        p
    }

    fn change(q: &mut Node<Gred>, o: &Opts) -> Result<(), TcError> {
        q.change(o, &dev(), t(0))
    }

    #[test]
    fn parsers_match_tc() {
        assert_eq!(
            p("setup vqs 4 default 1 grio limit 50000 ecn").unwrap(),
            GredOpt::Setup(GredSetup { dps: 4, def_dp: 1, grio: true, flags: 1, limit: Some(50000) })
        );
        assert_eq!(p("setup vqs 4").unwrap_err().msg, "Illegal gred setup parameters\n");
        assert_eq!(p("setup default 1").unwrap_err().msg, "\"default\" must be defined after \"vqs\"\n");
        assert_eq!(p("setup vqs 17").unwrap_err().msg, "GRED: only 16 VQs are currently supported\n");
        assert_eq!(p("limit 1000 setup vqs 2 default 0").unwrap_err().msg, "Illegal \"setup\"\n");
        assert_eq!(p("").unwrap_err().msg, USAGE);
        assert_eq!(p("ecn").unwrap_err().msg, USAGE);
        assert_eq!(
            p("vq 0 limit 1000 min 100 max 300").unwrap_err().msg,
            "Required parameter (vq, limit, min, max, avpkt) is missing\n"
        );
        let v = argv("vq 3 prio 259 limit 100k min 10k max 30k avpkt 1000 harddrop");
        let mut a = Args::new(&v);
        let GredOpt::Vq(v) = parse(&mut a).unwrap() else { panic!("a VQ") };
        // burst (2·10240 + 30720) / 3000 = 17; prio truncated to its byte.
        assert_eq!(a.notes, "GRED: set burst to 17\nGRED: set bandwidth to 10Mbit\n");
        assert_eq!((v.dp, v.prio, v.limit, v.qth_min, v.qth_max, v.flags), (3, 3, 102400, 10240, 30720, 2));
        assert_eq!((v.wlog, v.max_p), (4, c_double_to_u32(0.02 * 4294967296.0)));
    }

    #[test]
    fn table_checks_and_the_limit_taken_first() {
        let mut q = setup("setup vqs 4 default 1");
        assert_eq!(q.limit, 1000 * 1514);
        change(&mut q, &vq(0, 10_000, 100, 300, 0, TC_RED_ECN as u32)).unwrap();
        let e = change(&mut q, &Opts::new(p("setup vqs 3 default 2 limit 50000 harddrop").unwrap())).unwrap_err();
        assert_eq!(e.msg, "Error: sch_gred: can't set per-Qdisc RED flags when per-virtual queue flags are used.\n");
        assert_eq!((q.limit, q.dps), (50000, 4));
        let e = change(&mut q, &vq(4, 1000, 100, 300, 0, 0)).unwrap_err();
        assert_eq!(e.msg, "Error: sch_gred: virtual queue index above virtual queue count.\n");
        let e = change(&mut q, &vq(1, 1000, 300, 100, 0, 0)).unwrap_err();
        assert_eq!(e.msg, "Error: sch_gred: invalid RED parameters.\n");
        // A VQ's limit is capped at the qdisc's; a smaller table drops the VQs beyond.
        change(&mut q, &vq(3, 90_000, 100, 300, 0, 0)).unwrap();
        assert_eq!(q.tab[3].as_ref().unwrap().limit, 50000);
        change(&mut q, &Opts::new(p("setup vqs 2 default 0").unwrap())).unwrap();
        assert!(q.tab[3].is_none() && q.tab[0].is_some());
        let e = Gred::new(&p("vq 0 limit 1000 min 100 max 300 avpkt 100").unwrap(), &dev(), 1).err().unwrap();
        assert_eq!(e.msg, "Error: sch_gred: virtual queue configuration can't be specified at initialization time.\n");
    }

    #[test]
    fn without_a_vq_packets_pass_within_the_qdisc_limit() {
        let mut q = setup("setup vqs 4 default 3 limit 1000");
        assert_eq!(q.enqueue(Packet::new(1, 600), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 600), t(0)), Enqueued::Dropped);
        assert_eq!(q.enqueue(Packet::new(3, 400), t(0)), Enqueued::Success);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops, s.overlimits), (2, 1000, 1, 0));
        assert_eq!(q.dequeue(t(1)).packet().unwrap().id, 1);
    }

    #[test]
    fn red_per_vq_forced_drops_marks_and_the_vq_limit() {
        // VQ 3 (the default: tc_index 0 finds no VQ 0): min = max = 1000 bytes and
        // Wlog 0, so the average is the backlog and 1000 queued bytes force a drop.
        let mut q = setup("setup vqs 4 default 3");
        change(&mut q, &vq(3, 1200, 1000, 1000, 0, 0)).unwrap();
        assert_eq!(q.enqueue(Packet::new(1, 500), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(2, 500), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(Packet::new(3, 500), t(0)), Enqueued::Congested);
        let v = q.tab[3].as_ref().unwrap();
        assert_eq!((v.stats.forced_drop, v.packetsin, v.bytesin, v.backlog), (1, 3, 1500, 1000));
        assert_eq!((q.stats().overlimits, q.stats().drops), (1, 1));
        // Leaving one: 500 queued, average 500 — passes RED, but 500 + 800 > 1200.
        q.dequeue(t(1));
        assert_eq!(q.enqueue(Packet::new(4, 800), t(2)), Enqueued::Dropped);
        assert_eq!(q.tab[3].as_ref().unwrap().stats.pdrop, 1);
        // ECN: an ECT packet over max is marked, not dropped; harddrop drops it.
        change(&mut q, &vq(3, 5000, 400, 400, 0, TC_RED_ECN as u32)).unwrap();
        assert_eq!(q.enqueue(ect(5, 100), t(3)), Enqueued::Success);
        assert_eq!(q.tab[3].as_ref().unwrap().stats.forced_mark, 1);
        change(&mut q, &vq(3, 5000, 400, 400, 0, (TC_RED_ECN | TC_RED_HARDDROP) as u32)).unwrap();
        assert_eq!(q.enqueue(ect(6, 100), t(3)), Enqueued::Congested);
    }

    #[test]
    fn rio_adds_busier_lower_prios_and_equal_prios_mean_wred() {
        let mut q = setup("setup vqs 3 default 2 grio");
        change(&mut q, &vq(1, 10_000, 1000, 1000, 1, 0)).unwrap();
        change(&mut q, &vq(2, 10_000, 1000, 1000, 2, 0)).unwrap();
        assert!(q.rio && !q.wred);
        // VQ 1 (prio 1) averages 600 and is busy: VQ 2's 500 bytes count 1100.
        q.tab[1].as_mut().unwrap().vars.qavg = 600;
        q.enqueue(Packet::new(1, 500), t(0));
        assert_eq!(q.enqueue(Packet::new(2, 500), t(0)), Enqueued::Congested);
        // Idling, VQ 1 no longer counts.
        q.tab[1].as_mut().unwrap().vars.qidlestart = Some(t(0));
        assert_eq!(q.enqueue(Packet::new(3, 400), t(0)), Enqueued::Success);
        // A prio of 0 takes the default VQ's; equal prios switch WRED on.
        change(&mut q, &vq(0, 10_000, 1000, 1000, 0, 0)).unwrap();
        assert_eq!(q.tab[0].as_ref().unwrap().prio, 2);
        assert!(q.wred);
    }

    #[test]
    fn dequeue_starts_idle_periods_and_dumps_print_as_tc() {
        let mut q = setup("setup vqs 2 default 1");
        change(&mut q, &vq(1, 10_000, 1000, 3000, 0, 0)).unwrap();
        q.enqueue(Packet::new(1, 300), t(5));
        assert_eq!(q.tab[1].as_ref().unwrap().vars.qidlestart, None);
        q.dequeue(t(7));
        assert_eq!(q.tab[1].as_ref().unwrap().vars.qidlestart, Some(t(7)));
        let mut o = Out::text().with_stats(true);
        q.dump(&mut o, &dev());
        assert_eq!(
            o.into_string(),
            "vqs 2 default 1 limit 1514000b \n vq 1 prio 8 limit 10000b min 1000b max 3000b \n  Queue size: average 0b current 0b \n  Dropped packets: forced 0 early 0 pdrop 0 other 0 \n  Marked packets: forced 0 early 0 \n  Total packets: 1 (300b) "
        );
    }
}
