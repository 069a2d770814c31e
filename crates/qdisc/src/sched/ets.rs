//! ets — Enhanced Transmission Selection (802.1Qaz). Mirrors net/sched/sch_ets.c
//! (kernel side) and tc/q_ets.c (iproute2 side); §23 of docs/kernel-notes.md.
//!
//! Theory: `bands` (1..=16) fixed classes `<handle>:1` … `<handle>:<bands>`, each
//! with a child qdisc (a pfifo unless grafted). The first `strict` bands are served
//! as prio serves its bands: band 0 whenever it has a packet, then band 1, …. The
//! remaining bands share what the strict ones leave by deficit round robin, each
//! with its `quantum` (the `quanta` given in order, else psched_mtu): a band joins
//! the active list with one quantum of deficit when its qdisc gets a packet; the
//! head band sends while its next packet fits its deficit, otherwise it gains one
//! quantum and goes to the tail. Packets are classified as prio classifies them:
//! `skb->priority` naming one of our classes, else the filters, else
//! `priomap[priority & 15]` (unset priorities map to the last band). Classes cannot
//! be added or removed one by one; `tc class change` sets a sharing band's quantum.

use std::collections::VecDeque;

use crate::classify::Block;
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_make, Child, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::sched::fifo::pfifo_dflt;
use crate::sched::prio::{classify_band, dump_uint_array, TC_PRIO_MAX};
use crate::tc::units::get_unsigned10;
use crate::tc::{Args, Errno, Out, TcError};
use crate::time::Instant;

/// TCQ_ETS_MAX_BANDS.
pub const TCQ_ETS_MAX_BANDS: u8 = 16;

/// `ets_qdisc_init` wants options (EINVAL without); tc always sends them.
pub static OPS: Ops = Ops {
    id: "ets",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Ets::new(c.required()?, c.dev, c.handle)?)),
    parse_class: Some(|a| Ok(Opts::new(parse_class(a)?))),
    flags: Flags::NONE,
    since: None,
};

/// q_ets.c `explain` and `cexplain`.
const USAGE: &str = "Usage: ... ets [bands NUMBER] [strict NUMBER] [quanta Q1 Q2...] [priomap P1 P2...]\n";
const CLASS_USAGE: &str = "Usage: ... ets [quantum Q1]\n";

/// The TCA_OPTIONS nest tc sends: TCA_ETS_NBANDS always, TCA_ETS_NSTRICT when
/// nonzero, TCA_ETS_QUANTA and TCA_ETS_PRIOMAP with the values given (possibly
/// fewer than the bands or the 16 priorities).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtsOpt {
    pub bands: u8,
    pub strict: u8,
    pub quanta: Vec<u32>,
    pub priomap: Vec<u8>,
}

/// q_ets.c `parse_quantum`: a positive decimal.
fn parse_quantum(s: &str) -> Result<u32, TcError> {
    match get_unsigned10(s) {
        None => Err(TcError::tc("Illegal \"quanta\" element\n")),
        Some(0) => Err(TcError::tc("\"quanta\" must be > 0\n")),
        Some(q) => Ok(q),
    }
}

/// q_ets.c `parse_nbands`: a decimal up to TCQ_ETS_MAX_BANDS.
fn parse_nbands(s: &str, what: &str) -> Result<u8, TcError> {
    let v = get_unsigned10(s).ok_or_else(|| TcError::tc(format!("Illegal \"{what}\"\n")))?;
    if v > TCQ_ETS_MAX_BANDS as u32 {
        return Err(TcError::tc(format!("The number of \"{what}\" must be <= {TCQ_ETS_MAX_BANDS}\n")));
    }
    Ok(v as u8)
}

/// tc side: mirrors `ets_parse_opt` in tc/q_ets.c. `quanta` and `priomap` take the
/// words that follow them until the next keyword; `bands` defaults to the count of
/// strict bands and quanta.
pub fn parse(args: &mut Args) -> Result<EtsOpt, TcError> {
    #[derive(PartialEq)]
    enum Mode {
        None,
        Quanta,
        Priomap,
    }
    let mut o = EtsOpt::default();
    let mut mode = Mode::None;
    while let Some(a) = args.next() {
        match a {
            "bands" => {
                if o.bands != 0 {
                    return Err(TcError::tc("Duplicate \"bands\"\n"));
                }
                o.bands = parse_nbands(args.value()?, "bands")?;
                mode = Mode::None;
            }
            "strict" => {
                if o.strict != 0 {
                    return Err(TcError::tc("Duplicate \"strict\"\n"));
                }
                o.strict = parse_nbands(args.value()?, "strict")?;
                mode = Mode::None;
            }
            "quanta" => {
                if !o.quanta.is_empty() {
                    return Err(TcError::tc("Duplicate \"quanta\"\n"));
                }
                o.quanta.push(parse_quantum(args.value()?)?);
                mode = Mode::Quanta;
            }
            "priomap" => {
                if !o.priomap.is_empty() {
                    return Err(TcError::tc("Duplicate \"priomap\"\n"));
                }
                let v = args.value()?;
                o.priomap.push(priomap_element(v, 0)?);
                mode = Mode::Priomap;
            }
            "help" => return Err(TcError::tc(USAGE)),
            // tc keeps 16 quanta in an array and writes a 17th past it (the stack
            // survives: the kernel then refuses 17 bands, tdc 65b6).
            w if mode == Mode::Quanta => o.quanta.push(parse_quantum(w)?),
            w if mode == Mode::Priomap => {
                let n = o.priomap.len();
                o.priomap.push(priomap_element(w, n)?)
            }
            w => return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}"))),
        }
    }
    if o.bands == 0 {
        o.bands = (o.quanta.len() as u8).wrapping_add(o.strict);
    }
    if o.bands == 0 {
        return Err(TcError::tc(format!("One of \"bands\", \"quanta\" or \"strict\" needs to be specified\n{USAGE}")));
    }
    if o.strict as usize + o.quanta.len() > o.bands as usize {
        return Err(TcError::tc(format!("Not enough total bands to cover all the strict bands and quanta\n{USAGE}")));
    }
    if o.priomap.iter().any(|&b| b >= o.bands) {
        return Err(TcError::tc("\"priomap\" element is out of bounds\n"));
    }
    Ok(o)
}

/// One word of q_ets.c's priomap: a decimal (kept as the u8 tc stores), at most
/// TC_PRIO_MAX + 1 of them.
fn priomap_element(w: &str, n: usize) -> Result<u8, TcError> {
    let band = get_unsigned10(w).ok_or_else(|| TcError::tc("Illegal \"priomap\" element\n"))?;
    if n > TC_PRIO_MAX as usize {
        return Err(TcError::tc(format!("\"priomap\" index cannot be higher than {TC_PRIO_MAX}\n")));
    }
    Ok(band as u8)
}

/// What tc sends for `tc class … ets`: the nest, with TCA_ETS_QUANTA_BAND when
/// `quantum` was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtsClassOpt {
    pub quantum: Option<u32>,
}

/// tc side: q_ets.c `ets_parse_copt`.
pub fn parse_class(args: &mut Args) -> Result<EtsClassOpt, TcError> {
    let mut o = EtsClassOpt::default();
    while let Some(a) = args.next() {
        match a {
            "quantum" => {
                if o.quantum.is_some() {
                    return Err(TcError::tc("Duplicate \"quantum\"\n"));
                }
                o.quantum = Some(parse_quantum(args.value()?)?);
            }
            "help" => return Err(TcError::tc(CLASS_USAGE)),
            w => return Err(TcError::tc(format!("What is \"{w}\"?\n{CLASS_USAGE}"))),
        }
    }
    Ok(o)
}

/// `struct ets_class`.
struct Band {
    quantum: u32,
    deficit: u32,
    /// On the active list (`cl_is_active`).
    active: bool,
    qdisc: Node,
}

/// `struct ets_sched`.
pub struct Ets {
    /// `sch->handle`.
    handle: u32,
    /// `classes[0..nbands]`.
    bands: Vec<Band>,
    nstrict: usize,
    prio2band: [u8; 16],
    /// `q->active`: indices of sharing bands with packets.
    active: VecDeque<usize>,
    /// `q->block`: the qdisc's filters.
    block: Block,
    /// The wake-up a throttled child reported at the last dequeue.
    watchdog: Option<Instant>,
}

impl Ets {
    /// `ets_qdisc_init`: `ets_qdisc_change` from zero bands.
    pub fn new(o: &EtsOpt, dev: &DevInfo, handle: u32) -> Result<Ets, TcError> {
        let mut q = Ets {
            handle,
            bands: Vec::new(),
            nstrict: 0,
            prio2band: [0; 16],
            active: VecDeque::new(),
            block: Block::new(handle),
            watchdog: None,
        };
        q.tune(&mut Sch::default(), o, dev)?;
        Ok(q)
    }

    /// The default child of band `i`: `qdisc_create_dflt(pfifo, classid)`, hashed
    /// invisible (`qdisc_hash_add(…, true)`), at init, when bands grow and when a
    /// graft puts the default back.
    fn default_child(&self, i: usize, dev: &DevInfo) -> Node {
        pfifo_dflt(tc_h_make(self.handle, i as u32 + 1), dev).invisible()
    }

    /// `ets_quantum_parse`: Debian's 6.12.117 clamps a quantum to [256, 2^20]
    /// (golden ets-params); without the clamp the kernel refuses zero.
    fn quantum(q: u32, dev: &DevInfo) -> Result<u32, TcError> {
        if dev.kernel.quantum_bounds() {
            return Ok(q.clamp(256, 1 << 20));
        }
        if q == 0 {
            return Err(TcError::with_errno("ETS quantum cannot be zero", Errno::EINVAL));
        }
        Ok(q)
    }

    /// Mirrors `ets_qdisc_change`: validate all, then drop the removed bands (purged,
    /// reported up), move bands between the strict and sharing sets, and make the
    /// new bands' children.
    fn tune(&mut self, sch: &mut Sch, o: &EtsOpt, dev: &DevInfo) -> Result<(), TcError> {
        let nbands = o.bands as usize;
        if nbands < 1 || nbands > TCQ_ETS_MAX_BANDS as usize {
            return Err(TcError::with_errno("ets: Invalid number of bands", Errno::EINVAL));
        }
        // Unless overridden, traffic goes to the last band.
        let mut priomap = [(nbands - 1) as u8; 16];
        let nstrict = o.strict as usize;
        if nstrict > nbands {
            return Err(TcError::with_errno("ets: Invalid number of strict bands", Errno::EINVAL));
        }
        for (p, &b) in o.priomap.iter().enumerate() {
            if p > TC_PRIO_MAX as usize {
                return Err(TcError::with_errno("ets: Too many priorities in ETS priomap", Errno::EINVAL));
            }
            if b as usize >= nbands {
                return Err(TcError::with_errno("ets: Invalid band number in ETS priomap", Errno::EINVAL));
            }
            priomap[p] = b;
        }
        let mut quanta = [0u32; TCQ_ETS_MAX_BANDS as usize];
        for (i, &q) in o.quanta.iter().enumerate() {
            if nstrict + i >= nbands {
                return Err(TcError::with_errno("ets: ETS quanta has more values than bands", Errno::EINVAL));
            }
            quanta[nstrict + i] = Self::quantum(q, dev)?;
        }
        // The remaining sharing bands get psched_mtu (clamped like any quantum).
        let mtu = dev.psched_mtu();
        let dflt = if dev.kernel.quantum_bounds() { mtu.clamp(256, 1 << 20) } else { mtu };
        for q in quanta.iter_mut().take(nbands).skip(nstrict) {
            if *q == 0 {
                *q = dflt;
            }
        }

        // Removed bands: off the active list, their queues purged.
        while self.bands.len() > nbands {
            let i = self.bands.len() - 1;
            let mut b = self.bands.pop().expect("len > nbands");
            if b.active {
                self.active.retain(|&x| x != i);
            }
            sch.child_purged(b.qdisc.stats());
            b.qdisc.reset(Instant::ZERO);
        }
        // Strict bands becoming sharing ones join the list if they hold packets.
        for i in nstrict..self.nstrict.min(self.bands.len()) {
            let b = &mut self.bands[i];
            if b.qdisc.stats().qlen > 0 {
                b.active = true;
                b.deficit = quanta[i];
                self.active.push_back(i);
            }
        }
        // Sharing bands becoming strict leave it.
        for i in self.nstrict..nstrict.min(self.bands.len()) {
            if self.bands[i].active {
                self.bands[i].active = false;
                self.active.retain(|&x| x != i);
            }
        }
        self.nstrict = nstrict;
        self.prio2band = priomap;
        for (i, b) in self.bands.iter_mut().enumerate() {
            b.quantum = quanta[i];
        }
        while self.bands.len() < nbands {
            let i = self.bands.len();
            let qdisc = self.default_child(i, dev);
            self.bands.push(Band { quantum: quanta[i], deficit: 0, active: false, qdisc });
        }
        Ok(())
    }

    /// `ets_class_from_arg`: band index of class `minor`.
    fn band(&self, minor: u32) -> Option<usize> {
        let i = (minor as usize).checked_sub(1)?;
        (i < self.bands.len()).then_some(i)
    }

    fn deactivate(&mut self, i: usize) {
        if self.bands[i].active {
            self.bands[i].active = false;
            self.active.retain(|&x| x != i);
        }
    }

    /// A child call's reduction reached us: our counters, the report upwards, and
    /// `ets_class_qlen_notify` when it emptied a sharing band.
    fn collect(&mut self, sch: &mut Sch, i: usize) {
        let q = &mut self.bands[i].qdisc;
        if q.sch.reduce.is_zero() {
            return;
        }
        Child::collect(q, sch);
        if q.stats().qlen == 0 {
            self.deactivate(i);
        }
    }
}

impl Qdisc for Ets {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `ets_qdisc_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let nbands = self.bands.len() as u32;
        let i = match classify_band(&self.block, self.handle, &self.prio2band, nbands, &mut pkt, now) {
            Ok(i) => i,
            Err(e) => return sch.unclassified(e),
        };
        let b = &mut self.bands[i];
        let r = Child::enqueue(&mut b.qdisc, pkt, now, sch);
        if r != Enqueued::Success {
            if b.qdisc.stats().qlen == 0 {
                self.deactivate(i);
            }
            return r;
        }
        if !b.active && i >= self.nstrict {
            b.active = true;
            b.deficit = b.quantum;
            self.active.push_back(i);
        }
        r
    }

    /// Mirrors `ets_qdisc_dequeue`: the strict bands in order, then the head of the
    /// active list while its packet does not fit its deficit.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let mut idle = Dequeued::Empty;
        for i in 0..self.nstrict {
            match Child::dequeue(&mut self.bands[i].qdisc, now, sch) {
                d @ Dequeued::Packet(_) => {
                    self.watchdog = None;
                    return d;
                }
                d => idle = Dequeued::earliest(idle, d),
            }
        }
        while let Some(&i) = self.active.front() {
            let b = &mut self.bands[i];
            let Some(len) = b.qdisc.peek(now).map(|p| p.len) else {
                // qdisc_warn_nonwc: a throttled child; its watchdog wakes the device.
                self.collect(sch, i);
                let b = &self.bands[i];
                if let Some(until) = b.qdisc.watchdog().filter(|_| b.qdisc.stats().qlen > 0) {
                    idle = Dequeued::earliest(idle, Dequeued::Throttled { until });
                }
                break;
            };
            if len <= b.deficit {
                b.deficit -= len;
                let d = Child::dequeue(&mut b.qdisc, now, sch);
                if b.qdisc.stats().qlen == 0 {
                    self.deactivate(i);
                }
                if let d @ Dequeued::Packet(_) = d {
                    self.watchdog = None;
                    return d;
                }
                break;
            }
            b.deficit = b.deficit.wrapping_add(b.quantum);
            self.active.rotate_left(1);
        }
        self.watchdog = match idle {
            Dequeued::Throttled { until } => Some(until),
            _ => None,
        };
        idle
    }

    /// Mirrors `ets_qdisc_reset`: the sharing bands leave the list (deficits stay),
    /// every child is reset.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for b in self.bands.iter_mut() {
            b.active = false;
            b.qdisc.reset(now);
            let _ = b.qdisc.take_reduce();
        }
        self.active.clear();
        self.watchdog = None;
    }

    /// `ops->change` is `ets_qdisc_change`.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        self.tune(sch, opts.of()?, dev)
    }

    /// `ets_qdisc_dump` printed by q_ets.c `ets_print_opt`: `bands N `, `strict N `
    /// when nonzero, `quanta Q… ` when there are sharing bands, `priomap P… `.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let n = self.bands.len();
        out.uint("bands", format_args!("bands {n} "), n as u64);
        if self.nstrict > 0 {
            let s = self.nstrict;
            out.uint("strict", format_args!("strict {s} "), s as u64);
        }
        if n > self.nstrict {
            dump_uint_array(out, "quanta", self.bands[self.nstrict..].iter().map(|b| b.quantum as u64), " ");
        }
        dump_uint_array(out, "priomap", self.prio2band.iter().map(|&b| b as u64), " ");
    }

    crate::classful!();
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

impl Classful for Ets {
    /// `ets_qdisc_walk`: bands in order.
    fn class_minors(&self) -> Vec<u32> {
        (1..=self.bands.len() as u32).collect()
    }
    /// `ets_class_leaf`.
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.band(minor).map(|i| &self.bands[i].qdisc)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.band(minor).map(|i| &mut self.bands[i].qdisc)
    }

    /// Mirrors `ets_class_graft`: None puts a fresh default pfifo, hashed invisible;
    /// `qdisc_replace` purges the old child (its packets leave our counters and
    /// those above, `ets_class_qlen_notify` takes the band off the list).
    fn graft(&mut self, sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        let i = self.band(minor).ok_or_else(|| TcError::kernel("Specified class not found"))?;
        let new = new.unwrap_or_else(|| self.default_child(i, dev));
        let mut old = std::mem::replace(&mut self.bands[i].qdisc, new);
        sch.child_purged(old.stats());
        old.reset(Instant::ZERO);
        self.deactivate(i);
        Ok(Some(old))
    }

    /// Mirrors `ets_class_change`: only existing classes; options required; a
    /// quantum only for a sharing band.
    fn change_class(
        &mut self,
        _sch: &mut Sch,
        classid: u32,
        _parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        dev: &DevInfo,
        _now: Instant,
    ) -> Result<Option<String>, TcError> {
        let i = match self.band(crate::qdisc::tc_h_min(classid)) {
            Some(i) if exists => i,
            _ => {
                return Err(TcError::with_errno(
                    "Fine-grained class addition and removal is not supported",
                    Errno::EOPNOTSUPP,
                ))
            }
        };
        let Some(o) = opts else {
            return Err(TcError::with_errno("ETS options are required for this operation", Errno::EINVAL));
        };
        let o: &EtsClassOpt = o.of()?;
        let Some(q) = o.quantum else { return Ok(None) };
        if i < self.nstrict {
            return Err(TcError::with_errno("Strict bands do not have a configurable quantum", Errno::EINVAL));
        }
        self.bands[i].quantum = Self::quantum(q, dev)?;
        Ok(None)
    }

    // class_stats: the default (the child's bstats and qstats) is
    // `ets_class_dump_stats`.

    /// q_ets.c `ets_print_copt` on `ets_class_dump`: sharing bands carry their quantum.
    fn dump_class(&self, minor: u32, out: &mut Out) {
        if let Some(i) = self.band(minor).filter(|&i| i >= self.nstrict) {
            let q = self.bands[i].quantum;
            out.uint("quantum", format_args!("quantum {q} "), q as u64);
        }
    }

    /// `ets_qdisc_tcf_block`: the qdisc's block; classes have none.
    fn block(&self, minor: u32) -> Option<&Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        (minor == 0).then_some(&mut self.block)
    }
    fn no_block_extack(&self) -> Option<&'static str> {
        Some("ETS classid must be zero")
    }
    /// `ets_class_dump` sets `tcm_parent` to TC_H_ROOT.
    fn class_parent(&self, _minor: u32) -> Option<u32> {
        Some(TC_H_ROOT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::fifo::{Fifo, FifoKind};
    use crate::stats::Reduce;
    use crate::testing::{argv, dev, held, t};

    const H: u32 = 0x1_0000;

    fn p(s: &str) -> Result<EtsOpt, TcError> {
        parse(&mut Args::new(&argv(s)))
    }
    fn ets(s: &str) -> Node<Ets> {
        held(Ets::new(&p(s).unwrap(), &dev(), H).unwrap())
    }
    fn pkt(id: u64, len: u32, minor: u32) -> Packet {
        Packet::new(id, len).with_priority(H | minor)
    }
    fn text(q: &Node<Ets>) -> String {
        let mut o = Out::text();
        q.dump(&mut o, &dev());
        o.into_string()
    }
    fn drain(q: &mut Node<Ets>) -> Vec<u64> {
        std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect()
    }

    #[test]
    fn parser_matches_q_ets() {
        assert_eq!(p("bands 3").unwrap(), EtsOpt { bands: 3, ..Default::default() });
        assert_eq!(
            p("strict 1 quanta 10 20 priomap 0 1 2").unwrap(),
            EtsOpt { bands: 3, strict: 1, quanta: vec![10, 20], priomap: vec![0, 1, 2] }
        );
        // Seventeen quanta reach the kernel as 17 bands (tdc 65b6).
        assert_eq!(p("quanta 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17").unwrap().bands, 17);
        let usage = USAGE;
        assert_eq!(
            p("").unwrap_err().msg,
            format!("One of \"bands\", \"quanta\" or \"strict\" needs to be specified\n{usage}")
        );
        assert_eq!(p("bands 17").unwrap_err().msg, "The number of \"bands\" must be <= 16\n");
        assert_eq!(p("quanta 10 0").unwrap_err().msg, "\"quanta\" must be > 0\n");
        assert_eq!(p("quanta").unwrap_err(), TcError::incomplete());
        assert_eq!(p("bands 3 priomap 0 1 3").unwrap_err().msg, "\"priomap\" element is out of bounds\n");
        assert_eq!(
            p("bands 3 priomap 0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 1").unwrap_err().msg,
            "\"priomap\" index cannot be higher than 15\n"
        );
        assert_eq!(p("bands 2 strict 2 strict 1").unwrap_err().msg, "Duplicate \"strict\"\n");
        let c = |s: &str| parse_class(&mut Args::new(&argv(s)));
        assert_eq!(c("quantum 300").unwrap().quantum, Some(300));
        assert_eq!(c("").unwrap().quantum, None);
        assert_eq!(c("quantum 1 quantum 2").unwrap_err().msg, "Duplicate \"quantum\"\n");
    }

    #[test]
    fn dump_prints_strict_quanta_and_the_default_map() {
        assert_eq!(text(&ets("bands 3")), "bands 3 quanta 1514 1514 1514 priomap 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 ");
        assert_eq!(
            text(&ets("bands 4 strict 2 quanta 1000 3000 priomap 3 2 1 0")),
            "bands 4 strict 2 quanta 1000 3000 priomap 3 2 1 0 3 3 3 3 3 3 3 3 3 3 3 3 "
        );
        assert_eq!(text(&ets("strict 2")), "bands 2 strict 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 ");
        // 6.12.117 clamps quanta to [256, 2^20].
        assert!(text(&ets("quanta 4294967294 1 300")).starts_with("bands 3 quanta 1048576 256 300 "));
        let mut o = Out::json(false);
        o.open_object(None);
        ets("strict 1 quanta 700").dump(&mut o, &dev());
        o.close_object();
        assert_eq!(
            o.into_string(),
            r#"{"bands":2,"strict":1,"quanta":[700],"priomap":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}"#
        );
    }

    #[test]
    fn strict_bands_first_then_deficit_round_robin() {
        // Band 1 (1:1) strict; 1:2 quantum 3000, 1:3 quantum 1000.
        let mut q = ets("strict 1 quanta 3000 1000");
        for i in 0..4 {
            q.enqueue(pkt(20 + i, 1000, 2), t(0));
            q.enqueue(pkt(30 + i, 1000, 3), t(0));
        }
        q.enqueue(pkt(10, 1000, 1), t(0));
        q.enqueue(pkt(11, 1000, 1), t(0));
        // Strict 10, 11; then 1:2 sends three (deficit 3000 → 0), 1:3 one, 1:2 its last
        // (deficit 0 + 3000 → 2000), 1:3 the rest.
        assert_eq!(drain(&mut q), vec![10, 11, 20, 21, 22, 30, 23, 31, 32, 33]);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.packets, s.bytes), (0, 0, 10, 10_000));
        assert_eq!(q.class_stats(2).unwrap().packets, 4);
        assert!(q.active.is_empty());
    }

    #[test]
    fn a_big_packet_waits_for_its_deficit() {
        let mut q = ets("quanta 500 1500");
        q.enqueue(pkt(1, 1200, 1), t(0));
        q.enqueue(pkt(2, 1500, 2), t(0));
        q.enqueue(pkt(3, 1500, 2), t(0));
        // Deficits 500 and 1500 are clamped as given (both ≥ 256). 1:1 500 < 1200 →
        // 1000, tail; 1:2 sends (0); 1:2 0 < 1500 → 1500, tail; 1:1 1000 → 1500, tail;
        // 1:2 sends; 1:1 sends with 300 left.
        assert_eq!(drain(&mut q), vec![2, 3, 1]);
        assert_eq!(q.bands[0].deficit, 300);
    }

    #[test]
    fn classification_uses_priority_filters_and_the_priomap() {
        let mut q = ets("bands 3 priomap 0 1");
        q.enqueue(Packet::new(1, 100).with_priority(1), t(0)); // priomap[1] = 1 → 1:2
        q.enqueue(Packet::new(2, 100).with_priority(7), t(0)); // unset → last band
        q.enqueue(pkt(3, 100, 9), t(0)); // our major, no class 9 → priomap[0]
        q.enqueue(Packet::new(4, 100).with_priority(0x2_0001), t(0)); // foreign major → priomap[0]
        let qlen: Vec<u32> = (1..=3).map(|m| q.class_stats(m).unwrap().qlen).collect();
        assert_eq!(qlen, vec![2, 1, 1]);
    }

    #[test]
    fn change_moves_bands_between_strict_and_sharing_and_purges_removed_ones() {
        let mut q = ets("bands 4 strict 2");
        q.enqueue(pkt(1, 100, 2), t(0));
        q.enqueue(pkt(2, 200, 4), t(0));
        q.enqueue(pkt(3, 300, 4), t(0));
        assert_eq!(q.active, VecDeque::from([3]));
        // Band 2 becomes sharing (joins the list with its quantum), band 4 goes.
        q.change(&Opts::new(p("bands 3 strict 1 quanta 700").unwrap()), &dev(), t(0)).unwrap();
        assert_eq!(q.active, VecDeque::from([1]));
        assert_eq!(q.bands[1].deficit, 700);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops), (1, 100, 2));
        assert_eq!(q.take_reduce(), Reduce::new(2, 500));
        assert_eq!(q.class_minors(), vec![1, 2, 3]);
        // Back to strict: off the list, served first.
        q.change(&Opts::new(p("bands 3 strict 2").unwrap()), &dev(), t(0)).unwrap();
        assert!(q.active.is_empty());
        assert_eq!(drain(&mut q), vec![1]);
    }

    #[test]
    fn class_change_and_refusals() {
        let mut q = ets("bands 3 strict 1 quanta 1000 2000");
        let o = |s: &str| Opts::new(parse_class(&mut Args::new(&argv(s))).unwrap());
        q.change_class(H | 2, H, true, Some(&o("quantum 100")), &dev(), t(0)).unwrap();
        assert_eq!(q.bands[1].quantum, 256);
        q.change_class(H | 3, H, true, Some(&o("")), &dev(), t(0)).unwrap();
        assert_eq!(q.bands[2].quantum, 2000);
        let e = q.change_class(H | 1, H, true, Some(&o("quantum 1500")), &dev(), t(0)).unwrap_err();
        assert_eq!(e.msg, "Error: Strict bands do not have a configurable quantum.\n");
        let e = q.change_class(H | 1, H, true, None, &dev(), t(0)).unwrap_err();
        assert_eq!(e.msg, "Error: ETS options are required for this operation.\n");
        let e = q.change_class(H | 5, H, false, Some(&o("")), &dev(), t(0)).unwrap_err();
        assert_eq!(e.msg, "Error: Fine-grained class addition and removal is not supported.\n");
        let mut c = Out::text();
        q.dump_class(1, &mut c);
        q.dump_class(2, &mut c);
        assert_eq!(c.into_string(), "quantum 256 ");
    }

    #[test]
    fn a_full_child_drops_here_and_a_graft_takes_the_band_off_the_list() {
        let mut q = ets("quanta 1000 1000");
        let f = Node::new(0x2_0000, H | 1, Box::new(Fifo::with_limit(FifoKind::Pfifo, 1, &dev())));
        q.graft(1, Some(f), &dev()).unwrap();
        assert_eq!(q.enqueue(pkt(1, 100, 1), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(pkt(2, 100, 1), t(0)), Enqueued::Dropped);
        assert_eq!((q.stats().qlen, q.stats().drops), (1, 1));
        let old = q.graft(1, None, &dev()).unwrap().unwrap();
        assert_eq!(old.handle, 0x2_0000);
        assert!(q.active.is_empty());
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (0, 0, 2));
        assert!(q.leaf(1).unwrap().invisible);
    }
}
