//! prio — mirrors net/sched/sch_prio.c, parsed and printed as tc/q_prio.c does
//! (§7 of docs/kernel-notes.md; the printer is also pfifo_fast's, §5).
//!
//! Theory: `bands` (2..=16) strict-priority classes `<handle>:1` … `<handle>:<bands>`,
//! each holding a child qdisc (a pfifo of txqueuelen packets unless grafted).
//! A packet goes to band `minor − 1` when `skb->priority` names one of our classes,
//! otherwise to `priomap[priority & 15]` (`priomap[0]` when the priority carries a
//! foreign major). Dequeue always serves the lowest-numbered band that yields a
//! packet, so a throttled (shaped) band lets the next one send.
//! prio keeps only its own qlen/backlog/drops/bstats; the packets live in the children.

use crate::classify::Verdict;
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_make, tc_h_min, Child, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc,
    Sch,
};
use crate::sched::fifo::pfifo_dflt;
use crate::tc::units::{get_integer10, get_unsigned10};
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// TCQ_PRIO_BANDS: the most bands a prio qdisc may have.
pub const TCQ_PRIO_BANDS: i32 = 16;
/// TCQ_MIN_PRIO_BANDS.
pub const TCQ_MIN_PRIO_BANDS: i32 = 2;
/// TC_PRIO_MAX: priorities are looked up as `priority & TC_PRIO_MAX`.
pub const TC_PRIO_MAX: u32 = 15;
/// tc's default map (the same as pfifo_fast's `prio2band`).
pub const DEFAULT_PRIOMAP: [u8; 16] = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];

/// `struct tc_prio_qopt` as tc sends it. `bands` is a C `int`: tc passes any value
/// through and the kernel judges it. (tc's `multiqueue` adds a TCA_PRIO_MQ attribute
/// that this kernel's prio ignores, so it is not kept.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrioOpt {
    pub bands: i32,
    pub priomap: [u8; 16],
}

impl Default for PrioOpt {
    fn default() -> Self {
        PrioOpt { bands: 3, priomap: DEFAULT_PRIOMAP }
    }
}

/// q_prio.c `explain`.
const USAGE: &str = "Usage: ... prio bands NUMBER priomap P1 P2...[multiqueue]\n";

/// tc side: mirrors `prio_parse_opt` in tc/q_prio.c. Keywords are matched exactly.
/// `bands` may come before or after `priomap`; map elements are checked against
/// the bands value known when they are read, and a short map keeps tc's defaults
/// for the remaining priorities.
///
/// Not modelled: `priomap … bands N` makes tc print its usage text to stderr and
/// carry on (a warning, not an error); this function cannot emit it.
pub fn parse(args: &mut Args) -> Result<PrioOpt, TcError> {
    let mut opt = PrioOpt::default();
    let mut pmap_mode = false;
    let mut idx = 0usize;
    while let Some(a) = args.next() {
        match a {
            "bands" => {
                // tc explains itself (usage on stderr) when bands follows the priomap,
                // then carries on.
                if pmap_mode {
                    args.notes.push_str(USAGE);
                }
                let v = args.value()?;
                opt.bands = get_integer10(v).ok_or_else(|| TcError::tc("Illegal \"bands\"\n"))?;
            }
            "priomap" => {
                if pmap_mode {
                    return Err(TcError::tc("Error: duplicate priomap\n"));
                }
                pmap_mode = true;
            }
            "multiqueue" => {}
            "help" => return Err(TcError::tc(USAGE)),
            other => {
                if !pmap_mode {
                    return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}")));
                }
                let band = get_unsigned10(other).ok_or_else(|| TcError::tc("Illegal \"priomap\" element\n"))?;
                // C compares `unsigned >= int`: the int is converted to unsigned.
                if band >= opt.bands as u32 {
                    return Err(TcError::tc("\"priomap\" element is out of bands\n"));
                }
                if idx > TC_PRIO_MAX as usize {
                    return Err(TcError::tc(format!("\"priomap\" index > TC_PRIO_MAX={TC_PRIO_MAX}\n")));
                }
                opt.priomap[idx] = band as u8;
                idx += 1;
            }
        }
    }
    Ok(opt)
}

/// The body of q_prio.c `prio_print_opt`, for prio and pfifo_fast alike:
/// text `bands 3 priomap 1 2 … 1` (no trailing space); JSON
/// `"bands":3,"priomap":[1,2,…],"multiqueue":false` (the kernel never sends
/// TCA_PRIO_MQ, so tc prints the JSON-only `false`).
pub fn dump_priomap(out: &mut Out, bands: u32, priomap: &[u8; 16]) {
    out.uint("bands", format_args!("bands {bands} "), bands as u64);
    dump_uint_array(out, "priomap", priomap.iter().map(|&b| b as u64), "");
    out.boolean("multiqueue", format_args!(""), false);
}

/// `open_json_array(PRINT_ANY, key)`, ` N` per value, `close_json_array(PRINT_ANY,
/// close)`: text `key N N … close`, JSON `"key":[N,N,…]` (prio's and ets's maps).
pub fn dump_uint_array(out: &mut Out, key: &str, values: impl IntoIterator<Item = u64>, close: &str) {
    out.open_array(key, key);
    for v in values {
        out.array_uint(format_args!(" {v}"), v);
    }
    out.close_array(close);
}

/// `prio_init` wants options (EINVAL without); tc always sends them.
pub static OPS: Ops = Ops {
    id: "prio",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Prio::new(c.required()?, c.dev, c.handle)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// One prio qdisc (`struct prio_sched_data` plus the qdisc's own counters).
pub struct Prio {
    /// `sch->handle`: classids `handle:1..=bands` are ours.
    handle: u32,
    /// `prio2band`.
    prio2band: [u8; 16],
    /// `queues[0..bands]`: one child per band; `queues.len()` is `q->bands`.
    queues: Vec<Node>,
    /// `q->block`: the qdisc's filters (prio bands have no blocks of their own).
    block: crate::classify::Block,
}

impl Prio {
    /// `prio_init`: options are mandatory (the caller refuses `None` with EINVAL),
    /// then `prio_tune` from zero bands.
    pub fn new(o: &PrioOpt, dev: &DevInfo, handle: u32) -> Result<Prio, TcError> {
        let mut p = Prio { handle, prio2band: [0; 16], queues: Vec::new(), block: crate::classify::Block::new(handle) };
        // From zero bands nothing is purged: the counters are not needed.
        p.tune(&mut Sch::default(), o, dev)?;
        Ok(p)
    }

    /// The default child of band `band` (0-based): what `qdisc_create_dflt(…,
    /// &pfifo_qdisc_ops, TC_H_MAKE(handle, band + 1))` makes — handle 0, parent the
    /// band's classid, limit txqueuelen, hashed invisible.
    fn default_child(&self, band: usize, dev: &DevInfo) -> Node {
        pfifo_dflt(tc_h_make(self.handle, band as u32 + 1), dev).invisible()
    }

    /// Mirrors `prio_tune` in net/sched/sch_prio.c: validate everything first (no
    /// change on error), make the new bands' children, shrink by purging the removed
    /// children (their packets count as drops here and above, via the reduce).
    fn tune(&mut self, sch: &mut Sch, o: &PrioOpt, dev: &DevInfo) -> Result<(), TcError> {
        if o.bands > TCQ_PRIO_BANDS || o.bands < TCQ_MIN_PRIO_BANDS {
            return Err(TcError::invalid());
        }
        if o.priomap.iter().any(|&b| b as i32 >= o.bands) {
            return Err(TcError::invalid());
        }
        let bands = o.bands as usize;
        self.prio2band = o.priomap;
        // Removed bands: qdisc_purge_queue, i.e. reset the child, then tell every
        // ancestor (us first) that its packets are gone.
        while self.queues.len() > bands {
            let mut child = self.queues.pop().expect("len > bands");
            sch.child_purged(child.stats());
            child.reset(Instant::ZERO);
        }
        while self.queues.len() < bands {
            let c = self.default_child(self.queues.len(), dev);
            self.queues.push(c);
        }
        Ok(())
    }

    /// `q->bands`.
    pub fn bands(&self) -> u32 {
        self.queues.len() as u32
    }
    /// `q->prio2band`.
    pub fn priomap(&self) -> &[u8; 16] {
        &self.prio2band
    }
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Mirrors `prio_classify` (see [`classify_band`]).
    pub fn classify(&self, pkt: &mut Packet, now: Instant) -> Result<usize, Enqueued> {
        classify_band(&self.block, self.handle, &self.prio2band, self.bands(), pkt, now)
    }
}

/// Mirrors `prio_classify`, which `ets_classify` repeats: the band (0-based) for
/// `pkt` at `now` of a qdisc `handle` with `bands` bands, filters `block` and map
/// `prio2band`.
///
/// When the priority does not name one of our classes the filters run
/// (`tcf_classify`); a match yields a classid whose minor − 1 is the band (its
/// major is not checked; out of range → `priomap[0]`), and no filter or no match
/// falls through to the priomap. A filter action's SHOT answers
/// `Err(Dropped)` (the caller counts the drop, `__NET_XMIT_BYPASS`), its
/// STOLEN/QUEUED/TRAP `Err(Stolen)`.
pub fn classify_band(
    block: &crate::classify::Block,
    handle: u32,
    prio2band: &[u8; 16],
    bands: u32,
    pkt: &mut Packet,
    now: Instant,
) -> Result<usize, Enqueued> {
    let mut band = pkt.priority;
    if tc_h_maj(pkt.priority) != handle {
        match block.classify(pkt, now) {
            Some(Verdict::Shot) => return Err(Enqueued::Dropped),
            Some(Verdict::Stolen) => return Err(Enqueued::Stolen),
            Some(Verdict::Class(res)) => band = res.classid,
            None => {
                if tc_h_maj(band) != 0 {
                    band = 0;
                }
                return Ok(prio2band[(band & TC_PRIO_MAX) as usize] as usize);
            }
        }
    }
    let b = tc_h_min(band).wrapping_sub(1);
    if b >= bands {
        return Ok(prio2band[0] as usize);
    }
    Ok(b as usize)
}

impl Qdisc for Prio {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `prio_enqueue`: hand the packet to the band's child; on success our
    /// qlen/backlog grow, on a drop code (DROP or CN) our drops grow.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let band = match self.classify(&mut pkt, now) {
            Ok(b) => b,
            Err(e) => return sch.unclassified(e),
        };
        Child::enqueue(&mut self.queues[band], pkt, now, sch)
    }

    /// Mirrors `prio_dequeue`: the first band, in order, whose child yields a packet
    /// (`qdisc_dequeue_peeked`, so a packet parked by a peek leaves first). When none
    /// does, the earliest wake-up among throttled children is reported.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let mut idle = Dequeued::Empty;
        for child in self.queues.iter_mut() {
            match Child::dequeue(child, now, sch) {
                d @ Dequeued::Packet(_) => return d,
                d => idle = Dequeued::earliest(idle, d),
            }
        }
        idle
    }

    /// Mirrors `prio_peek`: the first band whose child's peek has a packet.
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        let n = self.queues.len();
        Child::peek_first(&mut self.queues, 0..n, now, sch)
    }

    /// Mirrors `prio_reset`.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for child in self.queues.iter_mut() {
            child.reset(now);
        }
    }

    /// `ops->change` is `prio_tune`.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        self.tune(sch, opts.of()?, dev)
    }

    /// `prio_dump` sends a tc_prio_qopt; tc prints it with `prio_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        dump_priomap(out, self.bands(), &self.prio2band);
    }

    crate::classful!();
}

impl Classful for Prio {
    /// `prio_walk`: minors 1..=bands in order.
    fn class_minors(&self) -> Vec<u32> {
        (1..=self.bands()).collect()
    }

    /// `prio_leaf` (classes outside 1..=bands do not exist: `prio_get` → 0).
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.queues.get((minor as usize).checked_sub(1)?)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.queues.get_mut((minor as usize).checked_sub(1)?)
    }

    /// Mirrors `prio_graft`: `None` puts a fresh default pfifo (hashed invisible) on
    /// the band; the old child is swapped out by `qdisc_replace`, which purges it
    /// (its packets leave our qlen/backlog and count as drops here and above).
    fn graft(&mut self, sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        let band = match (minor as usize).checked_sub(1) {
            Some(b) if b < self.queues.len() => b,
            _ => return Err(TcError::kernel("Specified class not found")),
        };
        let new = match new {
            Some(n) => n,
            None => self.default_child(band, dev),
        };
        let mut old = std::mem::replace(&mut self.queues[band], new);
        sch.child_purged(old.stats());
        old.reset(Instant::ZERO);
        Ok(Some(old))
    }

    // class_stats: the default (the leaf's bstats/qstats) is `prio_dump_class_stats`.

    /// `prio_tcf_block`: the qdisc's block; bands have none (NULL → EINVAL).
    fn block(&self, minor: u32) -> Option<&crate::classify::Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut crate::classify::Block> {
        (minor == 0).then_some(&mut self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::fifo::{Fifo, FifoKind};
    use crate::stats::{Reduce, Stats};
    use crate::testing::{argv, dev, held, t};
    const H: u32 = 0x8001_0000;

    fn p(s: &str) -> Result<PrioOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    fn prio(bands: i32, priomap: [u8; 16]) -> Node<Prio> {
        held(Prio::new(&PrioOpt { bands, priomap }, &dev(), H).unwrap())
    }
    fn text(bands: u32, map: &[u8; 16]) -> String {
        let mut o = Out::text();
        dump_priomap(&mut o, bands, map);
        o.into_string()
    }

    /// The band for a packet (no filter here can drop it).
    fn band(q: &Prio, mut p: Packet) -> usize {
        q.classify(&mut p, Instant::ZERO).unwrap()
    }

    #[test]
    fn parse_defaults_and_maps() {
        assert_eq!(p("").unwrap(), PrioOpt { bands: 3, priomap: DEFAULT_PRIOMAP });
        assert_eq!(
            p("bands 4 priomap 1 1 2 2 3 3 0 0 1 2 3 0 0 0 0 0").unwrap(),
            PrioOpt { bands: 4, priomap: [1, 1, 2, 2, 3, 3, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0] }
        );
        // A partial map keeps tc's defaults for the rest.
        assert_eq!(p("priomap 0 0 0").unwrap().priomap, [0, 0, 0, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
        // bands may follow the map (tc prints its usage as a warning and goes on);
        // the priomap is not re-checked by tc.
        assert_eq!(
            p("priomap 2 bands 2").unwrap(),
            PrioOpt { bands: 2, priomap: [2, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1] }
        );
        // tc passes absurd band counts to the kernel.
        assert_eq!(p("bands 1024 priomap 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16").unwrap().bands, 1024);
        assert_eq!(p("bands -5").unwrap().bands, -5);
        assert_eq!(p("multiqueue").unwrap(), PrioOpt::default());
        assert_eq!(p("priomap +1 -0").unwrap().priomap[..2], [1, 0]);
    }

    #[test]
    fn parse_errors_match_tc() {
        let usage = "Usage: ... prio bands NUMBER priomap P1 P2...[multiqueue]\n";
        assert_eq!(p("help").unwrap_err(), TcError::tc(usage));
        assert_eq!(p("bands").unwrap_err(), TcError::incomplete());
        assert_eq!(p("bands x").unwrap_err(), TcError::tc("Illegal \"bands\"\n"));
        assert_eq!(p("bands 0x4").unwrap_err(), TcError::tc("Illegal \"bands\"\n"));
        assert_eq!(p("bands 3000000000").unwrap_err(), TcError::tc("Illegal \"bands\"\n"));
        assert_eq!(p("foorbar").unwrap_err(), TcError::tc(format!("What is \"foorbar\"?\n{usage}")));
        assert_eq!(p("bands 3 foo").unwrap_err().code, 1);
        assert_eq!(p("priomap 1 priomap").unwrap_err(), TcError::tc("Error: duplicate priomap\n"));
        assert_eq!(p("priomap -1").unwrap_err(), TcError::tc("Illegal \"priomap\" element\n"));
        assert_eq!(p("priomap 0x1").unwrap_err(), TcError::tc("Illegal \"priomap\" element\n"));
        assert_eq!(p("priomap 1 2 3").unwrap_err(), TcError::tc("\"priomap\" element is out of bands\n"));
        assert_eq!(
            p("bands 4 priomap 1 1 2 2 7 5 0 0 1 2 3 0 0 0 0 0").unwrap_err(),
            TcError::tc("\"priomap\" element is out of bands\n")
        );
        assert_eq!(
            p("bands 4 priomap 1 1 2 2 3 3 0 0 1 2 3 0 0 0 0 0 1 1").unwrap_err(),
            TcError::tc("\"priomap\" index > TC_PRIO_MAX=15\n")
        );
        // Negative bands become a huge unsigned bound; the element is truncated to u8.
        assert_eq!(p("bands -1 priomap 300").unwrap().priomap[0], 44);
    }

    #[test]
    fn printer_is_byte_exact() {
        assert_eq!(text(3, &DEFAULT_PRIOMAP), "bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1");
        let mut o = Out::json(false);
        o.open_object(None);
        dump_priomap(&mut o, 3, &DEFAULT_PRIOMAP);
        o.close_object();
        assert_eq!(o.into_string(), r#"{"bands":3,"priomap":[1,2,2,2,1,2,0,0,1,1,1,1,1,1,1,1],"multiqueue":false}"#);
        let q = prio(4, [1, 1, 2, 2, 3, 3, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0]);
        let mut o = Out::text();
        q.dump(&mut o, &dev());
        assert_eq!(o.into_string(), "bands 4 priomap 1 1 2 2 3 3 0 0 1 2 3 0 0 0 0 0");
    }

    #[test]
    fn kernel_validation() {
        let d = dev();
        let mk = |bands, priomap| Prio::new(&PrioOpt { bands, priomap }, &d, H).err();
        assert_eq!(mk(1, [0; 16]), Some(TcError::invalid()));
        assert_eq!(mk(17, [0; 16]), Some(TcError::invalid()));
        assert_eq!(mk(-3, [0; 16]), Some(TcError::invalid()));
        assert_eq!(mk(1024, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]), Some(TcError::invalid()));
        let mut m = [0u8; 16];
        m[15] = 2;
        assert_eq!(mk(2, m), Some(TcError::invalid()));
        assert!(mk(2, [1; 16]).is_none());
        assert!(mk(16, [15; 16]).is_none());
    }

    #[test]
    fn children_are_default_pfifos() {
        let q = prio(3, DEFAULT_PRIOMAP);
        assert_eq!(q.class_minors(), vec![1, 2, 3]);
        for m in 1..=3 {
            let n = q.leaf(m).unwrap();
            assert_eq!((n.handle, n.parent, n.invisible, n.kind()), (0, H | m, true, "pfifo"));
            let mut o = Out::text();
            n.q.dump(&mut o, &dev());
            assert_eq!(o.into_string(), "limit 1000p");
        }
        assert!(q.leaf(0).is_none() && q.leaf(4).is_none());
        assert_eq!(q.kind(), "prio");
        assert!(!q.can_bypass());
    }

    #[test]
    fn default_priomap_bands() {
        let q = prio(3, DEFAULT_PRIOMAP);
        let got: Vec<usize> = (0..16).map(|pr| band(&q, Packet::new(0, 1).with_priority(pr))).collect();
        assert_eq!(got, vec![1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
        // Only the low four bits count.
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(0x16)), 0); // 22 & 15 = 6
                                                                        // A foreign major: priomap[0], whatever the minor.
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(0x0001_0006)), 1);
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(0x8002_0001)), 1);
    }

    #[test]
    fn custom_priomap() {
        let q = prio(4, [3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0]);
        let got: Vec<usize> = (0..16).map(|pr| band(&q, Packet::new(0, 1).with_priority(pr))).collect();
        assert_eq!(got, vec![3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0]);
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(0x0009_0000)), 3);
    }

    #[test]
    fn classid_priority_selects_band() {
        let q = prio(4, DEFAULT_PRIOMAP);
        for minor in 1..=4u32 {
            assert_eq!(band(&q, Packet::new(0, 1).with_priority(H | minor)), minor as usize - 1);
        }
        // Our major, but no such class (minor 0 or > bands): priomap[0].
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(H)), 1);
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(H | 5)), 1);
        assert_eq!(band(&q, Packet::new(0, 1).with_priority(H | 0xffff)), 1);
    }

    #[test]
    fn strict_priority_dequeue() {
        let mut q = prio(3, DEFAULT_PRIOMAP);
        // priorities → bands: 0→1, 2→2, 6→0, 7→0, 4→1
        for (id, pr) in [(1, 0), (2, 2), (3, 6), (4, 4), (5, 7), (6, 2)] {
            assert_eq!(q.enqueue(Packet::new(id, 100 + id as u32).with_priority(pr), t(0)), Enqueued::Success);
        }
        assert_eq!((q.stats().qlen, q.stats().backlog), (6, 621));
        assert_eq!(q.peek(t(1)).unwrap().id, 3);
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(1)).packet().map(|p| p.id)).collect();
        assert_eq!(order, vec![3, 5, 1, 4, 2, 6]);
        assert_eq!(q.dequeue(t(1)), Dequeued::Empty);
        assert!(q.peek(t(1)).is_none());
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.bytes, s.packets, s.drops, s.overlimits), (0, 0, 621, 6, 0, 0));
        // Class stats are the leaf's.
        assert_eq!(q.class_stats(1).unwrap().packets, 2);
        assert_eq!(q.class_stats(2).unwrap().bytes, 101 + 104);
        assert_eq!(q.class_stats(3).unwrap().packets, 2);
    }

    #[test]
    fn full_band_drops_count_at_prio() {
        let mut d = dev();
        d.tx_queue_len = 2;
        let mut q = held(Prio::new(&PrioOpt::default(), &d, H).unwrap());
        for id in 0..3 {
            q.enqueue(Packet::new(id, 100), t(0)); // priority 0 → band 1
        }
        assert_eq!(q.enqueue(Packet::new(9, 100).with_priority(6), t(0)), Enqueued::Success);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (3, 300, 1));
        assert_eq!(q.class_stats(2).unwrap().drops, 1);
        assert_eq!(q.class_stats(2).unwrap().qlen, 2);
        assert!(q.take_reduce().is_zero());
    }

    #[test]
    fn head_drop_child_counts_as_prio_drop() {
        let d = dev();
        let mut q = prio(3, DEFAULT_PRIOMAP);
        let hd = Node::new(0x10_0000, H | 2, Box::new(Fifo::with_limit(FifoKind::PfifoHeadDrop, 2, &d)));
        let old = q.graft(2, Some(hd), &d).unwrap().unwrap();
        assert_eq!(old.kind(), "pfifo");
        q.enqueue(Packet::new(1, 100), t(0));
        q.enqueue(Packet::new(2, 200), t(0));
        assert_eq!(q.enqueue(Packet::new(3, 500), t(0)), Enqueued::Congested);
        let s = q.stats().clone();
        assert_eq!((s.qlen, s.backlog, s.drops), (2, 700, 1));
        // Nothing to push further up but the byte difference.
        assert_eq!(q.take_reduce(), Reduce::new(0, -400));
        let c = q.class_stats(2).unwrap();
        assert_eq!((c.qlen, c.backlog, c.drops), (2, 700, 1));
        assert_eq!(q.dequeue(t(1)).packet().unwrap().id, 2);
        assert_eq!(q.dequeue(t(1)).packet().unwrap().id, 3);
        assert_eq!((q.stats().qlen, q.stats().backlog), (0, 0));
    }

    #[test]
    fn change_grows_and_shrinks_bands() {
        let d = dev();
        let mut q = prio(3, DEFAULT_PRIOMAP);
        for (id, pr) in [(1, 6), (2, 0), (3, 2), (4, 2)] {
            q.enqueue(Packet::new(id, 100).with_priority(pr), t(0));
        }
        // Invalid change: nothing moves.
        assert_eq!(
            q.change(&Opts::new(PrioOpt { bands: 2, priomap: DEFAULT_PRIOMAP }), &d, t(0)),
            Err(TcError::invalid())
        );
        assert_eq!(q.bands(), 3);
        assert_eq!(q.change(&Opts::new(()), &d, t(0)), Err(TcError::invalid()));
        // Grow to 5: bands 0..2 keep their children and packets.
        q.change(&Opts::new(PrioOpt { bands: 5, priomap: [4; 16] }), &d, t(0)).unwrap();
        assert_eq!(q.bands(), 5);
        assert_eq!(q.leaf(3).unwrap().stats().qlen, 2);
        assert_eq!(q.leaf(5).unwrap().parent, H | 5);
        assert_eq!(band(&q, Packet::new(0, 1)), 4);
        // Shrink to 2: band 2 (two packets) is purged and reported.
        q.change(&Opts::new(PrioOpt { bands: 2, priomap: [1; 16] }), &d, t(0)).unwrap();
        assert_eq!(q.class_minors(), vec![1, 2]);
        let s = q.stats().clone();
        assert_eq!((s.qlen, s.backlog, s.drops), (2, 200, 2));
        assert_eq!(q.take_reduce(), Reduce::new(2, 200));
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 2);
        assert_eq!(q.dequeue(t(0)), Dequeued::Empty);
        let mut o = Out::text();
        q.dump(&mut o, &d);
        assert_eq!(o.into_string(), "bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1");
    }

    #[test]
    fn graft_none_restores_default_and_purges() {
        let d = dev();
        let mut q = prio(3, DEFAULT_PRIOMAP);
        q.enqueue(Packet::new(1, 300), t(0)); // band 1
        q.enqueue(Packet::new(2, 50).with_priority(6), t(0)); // band 0
        let old = q.graft(2, None, &d).unwrap().unwrap();
        assert_eq!(old.stats().qlen, 0); // purged
        let n = q.leaf(2).unwrap();
        assert_eq!((n.handle, n.parent, n.invisible, n.stats().qlen), (0, H | 2, true, 0));
        let s = q.stats().clone();
        assert_eq!((s.qlen, s.backlog, s.drops), (1, 50, 1));
        assert_eq!(q.take_reduce(), Reduce::new(1, 300));
        assert!(q.graft(4, None, &d).is_err());
        assert!(q.graft(0, None, &d).is_err());
    }

    /// A child that holds packets it will not release before `until`.
    struct Shaped {
        until: Instant,
        q: std::collections::VecDeque<Packet>,
    }
    impl Qdisc for Shaped {
        fn ops(&self) -> &'static Ops {
            &crate::sched::tbf::OPS
        }
        fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, _now: Instant) -> Enqueued {
            sch.stats.queued(pkt.len);
            self.q.push_back(pkt);
            Enqueued::Success
        }
        fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
            if self.q.is_empty() {
                return Dequeued::Empty;
            }
            if now < self.until {
                return Dequeued::Throttled { until: self.until };
            }
            let p = self.q.pop_front().unwrap();
            sch.stats.unqueued(p.len);
            sch.stats.sent(&p);
            Dequeued::Packet(p)
        }
        fn peek<'a>(&'a mut self, _: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
            if now < self.until {
                None
            } else {
                self.q.front()
            }
        }
        fn reset(&mut self, _: &mut Sch, _now: Instant) {
            self.q.clear();
        }
        fn change(&mut self, _: &mut Sch, _: &Opts, _: &DevInfo, _: Instant) -> Result<(), TcError> {
            Ok(())
        }
        fn dump(&self, _: &mut Out, _: &DevInfo) {}
    }

    #[test]
    fn throttled_band_yields_to_lower_priority_and_surfaces_wakeup() {
        let d = dev();
        let mut q = prio(3, DEFAULT_PRIOMAP);
        let mk = |until| Node::new(0x20_0000, H | 1, Box::new(Shaped { until, q: Default::default() }));
        q.graft(1, Some(mk(t(1000))), &d).unwrap();
        q.enqueue(Packet::new(1, 100).with_priority(6), t(0)); // band 0, shaped
        q.enqueue(Packet::new(2, 100), t(0)); // band 1
        assert_eq!(q.dequeue(t(10)).packet().unwrap().id, 2);
        assert_eq!(q.dequeue(t(10)), Dequeued::Throttled { until: t(1000) });
        assert_eq!((q.stats().qlen, q.stats().backlog), (1, 100));
        assert!(q.peek(t(10)).is_none());
        assert_eq!(q.peek(t(1000)).unwrap().id, 1);
        assert_eq!(q.dequeue(t(1000)).packet().unwrap().id, 1);
        assert_eq!(q.dequeue(t(1000)), Dequeued::Empty);
        // Two throttled bands: the earlier wake-up wins.
        q.graft(3, Some(mk(t(500))), &d).unwrap();
        q.graft(1, Some(mk(t(2000))), &d).unwrap();
        q.enqueue(Packet::new(3, 100).with_priority(6), t(0));
        q.enqueue(Packet::new(4, 100).with_priority(2), t(0));
        assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: t(500) });
    }

    #[test]
    fn reset_empties_everything_without_drops() {
        let mut q = prio(3, DEFAULT_PRIOMAP);
        for pr in 0..8 {
            q.enqueue(Packet::new(pr as u64, 64).with_priority(pr), t(0));
        }
        q.reset(t(1));
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops), (0, 0, 0));
        assert!((1..=3).all(|m| q.class_stats(m).unwrap().qlen == 0));
        assert_eq!(q.dequeue(t(1)), Dequeued::Empty);
    }

    #[test]
    fn conservation() {
        // A deterministic mix of priorities, lengths and dequeues against small bands.
        let mut d = dev();
        d.tx_queue_len = 5;
        let mut q = held(
            Prio::new(&PrioOpt { bands: 4, priomap: [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3] }, &d, H).unwrap(),
        );
        let (mut in_p, mut in_b, mut out_p, mut out_b) = (0u64, 0u64, 0u64, 0u64);
        let mut x: u64 = 12345;
        for i in 0..2000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = 60 + (x >> 33) as u32 % 1400;
            let pr = (x >> 20) as u32 % 16;
            in_p += 1;
            in_b += len as u64;
            q.enqueue(Packet::new(i, len).with_priority(pr), t(i));
            if (x >> 40).is_multiple_of(3) {
                if let Some(p) = q.dequeue(t(i)).packet() {
                    out_p += 1;
                    out_b += p.len as u64;
                }
            }
            let s = q.stats();
            let sum = (1..=4).fold(Stats::default(), |mut a, m| {
                a.add(&q.class_stats(m).unwrap());
                a
            });
            assert_eq!((s.qlen, s.backlog, s.drops), (sum.qlen, sum.backlog, sum.drops));
            assert_eq!(in_p, out_p + s.drops as u64 + s.qlen as u64);
        }
        let s = q.stats().clone();
        assert!(s.drops > 0);
        assert_eq!((s.packets, s.bytes), (out_p, out_b));
        while let Some(p) = q.dequeue(t(9999)).packet() {
            out_p += 1;
            out_b += p.len as u64;
        }
        let s = q.stats();
        assert_eq!(s.qlen, 0);
        assert_eq!(in_p, out_p + s.drops as u64);
        assert!(in_b > out_b);
    }
}
