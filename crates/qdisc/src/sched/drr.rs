//! drr — Deficit Round Robin. Mirrors net/sched/sch_drr.c (kernel side) and
//! tc/q_drr.c (iproute2 side); §22 of docs/kernel-notes.md.
//!
//! Theory: classes made with `tc class add … drr [quantum SIZE]`, each with a child
//! qdisc (a pfifo until one is grafted); a packet reaches a class through
//! `skb->priority` naming it or through the qdisc's filters, and is dropped when
//! neither names one. A class with packets sits on the active list; dequeue looks
//! at the head class: if its next packet fits its deficit the packet leaves and the
//! deficit shrinks, otherwise the class gets `quantum` more bytes of deficit and
//! goes to the tail. A class joining the list starts with one quantum. The qdisc has
//! no options of its own and dumps none.

use std::collections::{HashMap, VecDeque};

use crate::class_hash::ClassHash;
use crate::classify::{Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_min, Child, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch,
    TC_H_ROOT,
};
use crate::sched::fifo::pfifo_dflt;
use crate::stats::Stats;
use crate::tc::{units, Args, Errno, Out, TcError};
use crate::time::Instant;

/// `drr_init_qdisc` takes no options; tc sends none.
pub static OPS: Ops = Ops {
    id: "drr",
    parse: Parse::Qopt(|a| parse(a).map(|()| None)),
    create: |c| Ok(Box::new(Drr::new(c.handle))),
    parse_class: Some(|a| Ok(Opts::new(parse_class(a)?))),
    flags: Flags { no_options: true, ..Flags::NONE },
    since: None,
};

/// q_drr.c `explain` and `explain2`.
const USAGE: &str = "Usage: ... drr\n";
const CLASS_USAGE: &str = "Usage: ... drr quantum SIZE\n";

/// tc side: q_drr.c `drr_parse_opt` — the qdisc takes no option at all.
pub fn parse(args: &mut Args) -> Result<(), TcError> {
    match args.next() {
        None => Ok(()),
        Some("help") => Err(TcError::tc(USAGE)),
        Some(a) => Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}"))),
    }
}

/// What tc sends for `tc class … drr`: a TCA_OPTIONS nest, with TCA_DRR_QUANTUM if
/// `quantum` was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrrClassOpt {
    /// Bytes.
    pub quantum: Option<u32>,
}

/// tc side: q_drr.c `drr_parse_class_opt`.
pub fn parse_class(args: &mut Args) -> Result<DrrClassOpt, TcError> {
    let mut o = DrrClassOpt::default();
    while let Some(a) = args.next() {
        match a {
            "quantum" => {
                let v = args.value()?;
                o.quantum = Some(units::get_size(v).ok_or_else(|| TcError::tc("Illegal \"quantum\"\n"))?);
            }
            "help" => return Err(TcError::tc(CLASS_USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{CLASS_USAGE}"))),
        }
    }
    Ok(o)
}

/// `struct drr_class`.
struct Class {
    classid: u32,
    quantum: u32,
    deficit: u32,
    /// On the active list (`cl_is_active`: its `alist` is linked).
    active: bool,
    /// Counted here, dumped as the class's basic stats.
    bstats: Stats,
    /// Filters whose result names this class (`qdisc_class_get` by `drr_bind_tcf`).
    filter_cnt: u32,
    leaf: Node,
}

pub struct Drr {
    /// `sch->handle`.
    handle: u32,
    /// Classes by minor.
    classes: HashMap<u32, Class>,
    /// `q->clhash`: the order `drr_walk` lists classes in.
    hash: ClassHash,
    /// `q->active`, by minor.
    active: VecDeque<u32>,
    /// `q->block`: the qdisc's filters (classes have none).
    block: Block,
    /// The wake-up a throttled head class's qdisc reported at the last dequeue.
    watchdog: Option<Instant>,
}

impl Drr {
    /// `drr_init_qdisc`.
    pub fn new(handle: u32) -> Drr {
        Drr {
            handle,
            classes: HashMap::new(),
            hash: ClassHash::new(),
            active: VecDeque::new(),
            block: Block::new(handle),
            watchdog: None,
        }
    }

    /// `qdisc_create_dflt(pfifo, classid)`: handle 0, hashed invisible.

    /// `drr_find_class` by full classid.
    fn find(&self, classid: u32) -> Option<u32> {
        (tc_h_maj(classid) == self.handle && self.classes.contains_key(&tc_h_min(classid))).then(|| tc_h_min(classid))
    }

    /// `drr_qlen_notify`, and the same on the paths where a class empties.
    fn deactivate(&mut self, m: u32) {
        if let Some(c) = self.classes.get_mut(&m) {
            if c.active {
                c.active = false;
                self.active.retain(|&x| x != m);
            }
        }
    }

    /// A child call's reduction reached us (`qdisc_tree_reduce_backlog`): our
    /// counters, the report upwards, and `drr_qlen_notify` when it emptied the class.
    fn collect(&mut self, sch: &mut Sch, m: u32) {
        let leaf = &mut self.classes.get_mut(&m).expect("class").leaf;
        if leaf.sch.reduce.is_zero() {
            return;
        }
        Child::collect(leaf, sch);
        if leaf.stats().qlen == 0 {
            self.deactivate(m);
        }
    }

    /// Mirrors `drr_classify`: `skb->priority` naming one of our classes, else the
    /// filters' class. `Err` is what to answer for the packet (SHOT, STOLEN, or no
    /// class: dropped).
    fn classify(&self, pkt: &mut Packet, now: Instant) -> Result<u32, Enqueued> {
        if tc_h_maj(pkt.priority ^ self.handle) == 0 {
            if let Some(m) = self.find(pkt.priority) {
                return Ok(m);
            }
        }
        match self.block.classify(pkt, now) {
            Some(Verdict::Class(r)) => r.class.or_else(|| self.find(r.classid)).ok_or(Enqueued::Dropped),
            Some(Verdict::Stolen) => Err(Enqueued::Stolen),
            Some(Verdict::Shot) | None => Err(Enqueued::Dropped),
        }
    }
}

impl Qdisc for Drr {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `drr_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let m = match self.classify(&mut pkt, now) {
            Ok(m) => m,
            Err(e) => return sch.unclassified(e),
        };
        let c = self.classes.get_mut(&m).expect("classified");
        let r = Child::enqueue(&mut c.leaf, pkt, now, sch);
        if r != Enqueued::Success {
            if c.leaf.stats().qlen == 0 {
                self.deactivate(m);
            }
            return r;
        }
        if !c.active {
            c.active = true;
            c.deficit = c.quantum;
            self.active.push_back(m);
        }
        r
    }

    /// Mirrors `drr_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        while let Some(&m) = self.active.front() {
            let c = self.classes.get_mut(&m).expect("active class");
            let Some(len) = c.leaf.peek(now).map(|p| p.len) else {
                // qdisc_warn_nonwc: a throttled child; its watchdog wakes the device.
                self.collect(sch, m);
                let c = &self.classes[&m];
                self.watchdog = c.leaf.watchdog().filter(|_| c.leaf.stats().qlen > 0);
                return self.watchdog.map_or(Dequeued::Empty, |until| Dequeued::Throttled { until });
            };
            if len <= c.deficit {
                c.deficit -= len;
                let d = Child::dequeue(&mut c.leaf, now, sch);
                if let Dequeued::Packet(p) = &d {
                    c.bstats.sent(p);
                }
                if c.leaf.stats().qlen == 0 {
                    self.deactivate(m);
                }
                self.watchdog = None;
                return match d {
                    Dequeued::Packet(_) => d,
                    _ => Dequeued::Empty,
                };
            }
            c.deficit = c.deficit.wrapping_add(c.quantum);
            self.active.rotate_left(1);
        }
        self.watchdog = None;
        Dequeued::Empty
    }

    /// Mirrors `drr_reset_qdisc`: every class leaves the active list and its qdisc is
    /// reset; deficits stay.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for c in self.classes.values_mut() {
            c.active = false;
            c.leaf.reset(now);
            let _ = c.leaf.take_reduce();
        }
        self.active.clear();
        self.watchdog = None;
    }

    /// drr has no `dump` op: no options.
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}

    crate::classful!();
    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

impl Classful for Drr {
    /// `drr_change_class` takes TCA_RATE.
    fn class_takes_estimator(&self) -> bool {
        true
    }
    /// `drr_walk`: the class hash, bucket by bucket.
    fn class_minors(&self) -> Vec<u32> {
        self.hash.walk().map(tc_h_min).collect()
    }
    /// `drr_search_class`.
    fn find(&self, minor: u32) -> bool {
        self.classes.contains_key(&minor)
    }
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.classes.get(&minor).map(|c| &c.leaf)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.classes.get_mut(&minor).map(|c| &mut c.leaf)
    }

    /// Mirrors `drr_graft_class`: None means a fresh default pfifo (unlisted). The old qdisc is
    /// returned for the caller to purge, which empties the class
    /// (`drr_qlen_notify`).
    fn graft(&mut self, _sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        let c = self.classes.get_mut(&minor).ok_or_else(|| TcError::kernel("Specified class not found"))?;
        // Unlike drr_change_class, drr_graft_class never qdisc_hash_add()s the fresh
        // pfifo: dumps do not list it.
        let new = new.unwrap_or_else(|| pfifo_dflt(c.classid, dev).invisible().unhashed());
        let old = std::mem::replace(&mut c.leaf, new);
        self.deactivate(minor);
        Ok(Some(old))
    }

    /// Mirrors `drr_change_class`: options are required (tc always sends the nest);
    /// a zero quantum is refused; without one a new class gets `psched_mtu`.
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
        let Some(o) = opts else {
            return Err(TcError::with_errno("DRR options are required for this operation", Errno::EINVAL));
        };
        let o: &DrrClassOpt = o.of()?;
        if o.quantum == Some(0) {
            return Err(TcError::with_errno("Specified DRR quantum cannot be zero", Errno::EINVAL));
        }
        // Debian's 6.12.117 clamps every quantum, given or default, to [256, 2^20]
        // (golden drr-quantum-bounds); 6.18 takes any but zero.
        let bound = |q: u32| if dev.kernel.quantum_bounds() { q.clamp(256, 1 << 20) } else { q };
        let m = tc_h_min(classid);
        if exists {
            if let (Some(c), Some(q)) = (self.classes.get_mut(&m), o.quantum) {
                c.quantum = bound(q);
            }
            return Ok(None);
        }
        let leaf = pfifo_dflt(classid, dev).invisible();
        let quantum = bound(o.quantum.unwrap_or(dev.psched_mtu()));
        self.classes.insert(
            m,
            Class { classid, quantum, deficit: 0, active: false, bstats: Stats::default(), filter_cnt: 0, leaf },
        );
        self.hash.insert(classid);
        self.hash.grow();
        // tc_bind_tclass walks the classes' blocks, and drr_tcf_block has none for a
        // class: filters made before the class never bind it (tdc infra 33a9).
        Ok(None)
    }

    /// Mirrors `drr_delete_class`: refused while filters name the class; its queue is
    /// purged and reported up.
    fn delete_class(&mut self, sch: &mut Sch, minor: u32, now: Instant) -> Result<(), TcError> {
        let c = self.classes.get(&minor).ok_or_else(|| TcError::errno(Errno::ENOENT))?;
        if c.filter_cnt > 0 {
            return Err(TcError::with_errno("DRR class is in use", Errno::EBUSY));
        }
        let classid = c.classid;
        let mut c = self.classes.remove(&minor).expect("exists");
        sch.child_purged(c.leaf.stats());
        c.leaf.reset(now);
        if c.active {
            self.active.retain(|&x| x != minor);
        }
        self.hash.remove(classid);
        Ok(())
    }

    /// Mirrors `drr_dump_class_stats`: the class's bstats; qlen, backlog and drops
    /// are its qdisc's.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let Some(c) = self.classes.get(&minor) else { return Some(Stats::default()) };
        let q = c.leaf.stats();
        Some(Stats { bytes: c.bstats.bytes, packets: c.bstats.packets, ..q.clone() })
    }

    /// q_drr.c `drr_print_opt` on `drr_dump_class`'s TCA_DRR_QUANTUM (text only:
    /// tc prints it with PRINT_FP).
    fn dump_class(&self, minor: u32, out: &mut Out) {
        if let Some(c) = self.classes.get(&minor) {
            out.fp(format_args!("quantum {} ", units::fmt_size(c.quantum)));
        }
    }

    /// q_drr.c `drr_print_xstats` (text only): the deficit while the class has
    /// packets, else 0.
    fn dump_class_xstats(&self, minor: u32, out: &mut Out) {
        if let Some(c) = self.classes.get(&minor) {
            let d = if c.leaf.stats().qlen > 0 { c.deficit } else { 0 };
            out.fp(format_args!(" deficit {} ", units::fmt_size(d)));
        }
    }

    /// `drr_tcf_block`: the qdisc's block; classes have none.
    fn block(&self, minor: u32) -> Option<&Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        (minor == 0).then_some(&mut self.block)
    }
    fn no_block_extack(&self) -> Option<&'static str> {
        Some("DRR classid must be zero")
    }
    /// `drr_bind_tcf`: the class named, wherever the filter is.
    fn bind_tcf(&self, _base: u32, classid: u32) -> Option<u32> {
        self.find(classid)
    }
    /// `drr_bind_tcf`'s `qdisc_class_get`.
    fn bind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find(classid) {
            self.classes.get_mut(&m).expect("found").filter_cnt += 1;
        }
    }
    /// `drr_unbind_tcf`.
    fn unbind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find(classid) {
            let c = self.classes.get_mut(&m).expect("found");
            c.filter_cnt = c.filter_cnt.saturating_sub(1);
        }
    }
    /// `drr_dump_class` sets `tcm_parent` to TC_H_ROOT.
    fn class_parent(&self, _minor: u32) -> Option<u32> {
        Some(TC_H_ROOT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::fifo::{Fifo, FifoKind};
    use crate::testing::{argv, dev, held, t};

    const H: u32 = 0x1_0000;

    fn class(q: &mut Node<Drr>, minor: u32, opts: &str) -> Result<Option<String>, TcError> {
        let v = argv(opts);
        let o = parse_class(&mut Args::new(&v))?;
        q.change_class(H | minor, H, false, Some(&Opts::new(o)), &dev(), t(0))
    }

    fn drr(classes: &[(u32, &str)]) -> Node<Drr> {
        let mut q = held(Drr::new(H));
        for &(m, o) in classes {
            class(&mut q, m, o).unwrap();
        }
        q
    }

    fn pkt(id: u64, len: u32, minor: u32) -> Packet {
        Packet::new(id, len).with_priority(H | minor)
    }

    #[test]
    fn parsers_match_tc() {
        let p = |s: &str| parse(&mut Args::new(&argv(s)));
        assert_eq!(p(""), Ok(()));
        assert_eq!(p("quantum 1").unwrap_err().msg, "What is \"quantum\"?\nUsage: ... drr\n");
        let c = |s: &str| parse_class(&mut Args::new(&argv(s)));
        assert_eq!(c("quantum 1k").unwrap().quantum, Some(1024));
        assert_eq!(c("").unwrap().quantum, None);
        assert_eq!(c("quantum x").unwrap_err().msg, "Illegal \"quantum\"\n");
        assert_eq!(c("foo").unwrap_err().msg, "What is \"foo\"?\nUsage: ... drr quantum SIZE\n");
    }

    #[test]
    fn quantum_defaults_to_psched_mtu_and_zero_is_refused() {
        let mut q = drr(&[(1, "")]);
        assert_eq!(q.classes[&1].quantum, 1514);
        let e = class(&mut q, 2, "quantum 0").unwrap_err();
        assert_eq!(e.msg, "Error: Specified DRR quantum cannot be zero.\n");
        let e = q.change_class(H | 3, H, false, None, &dev(), t(0)).unwrap_err();
        assert_eq!(e.msg, "Error: DRR options are required for this operation.\n");
    }

    #[test]
    fn deficit_round_robin_shares_bytes_by_quantum() {
        // Class 1 gets 3000 bytes per round, class 2 1000: with 1000-byte packets,
        // three of class 1 for each one of class 2.
        let mut q = drr(&[(1, "quantum 3000"), (2, "quantum 1000")]);
        for i in 0..12 {
            q.enqueue(pkt(i, 1000, 1), t(0));
            q.enqueue(pkt(100 + i, 1000, 2), t(0));
        }
        let order: Vec<u64> = (0..8).map(|_| q.dequeue(t(1)).packet().unwrap().id).collect();
        assert_eq!(order, vec![0, 1, 2, 100, 3, 4, 5, 101]);
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.packets, s.bytes), (16, 16_000, 8, 8000));
        assert_eq!(q.class_stats(1).unwrap().packets, 6);
        assert_eq!(q.class_stats(2).unwrap().qlen, 10);
    }

    #[test]
    fn a_packet_larger_than_the_deficit_waits_for_more_rounds() {
        let mut q = drr(&[(1, "quantum 500"), (2, "quantum 1500")]);
        q.enqueue(pkt(1, 1200, 1), t(0));
        q.enqueue(pkt(2, 1500, 2), t(0));
        q.enqueue(pkt(3, 1500, 2), t(0));
        // Class 1: 500 < 1200 → deficit 1000, to the tail; class 2 sends (deficit 0)
        // and stays at the head. Next: class 2 0 < 1500 → 1500, tail; class 1 1000 <
        // 1200 → 1500, tail; class 2 sends. Then class 1 at 1500.
        let ids: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect();
        assert_eq!(ids, vec![2, 3, 1]);
        assert!(q.active.is_empty());
    }

    #[test]
    fn unclassified_packets_are_dropped_and_counted() {
        let mut q = drr(&[(1, "")]);
        assert_eq!(q.enqueue(Packet::new(1, 100), t(0)), Enqueued::Dropped);
        assert_eq!(q.enqueue(pkt(2, 100, 7), t(0)), Enqueued::Dropped);
        assert_eq!(q.stats().drops, 2);
        assert_eq!(q.enqueue(pkt(3, 100, 1), t(0)), Enqueued::Success);
        assert_eq!(q.stats().qlen, 1);
    }

    #[test]
    fn a_full_child_counts_drops_here_and_leaves_the_class_active() {
        let mut q = drr(&[(1, "")]);
        let f = Node::new(0x2_0000, H | 1, Box::new(Fifo::with_limit(FifoKind::Pfifo, 1, &dev())));
        q.graft(1, Some(f), &dev()).unwrap();
        assert_eq!(q.enqueue(pkt(1, 100, 1), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(pkt(2, 100, 1), t(0)), Enqueued::Dropped);
        assert_eq!((q.stats().qlen, q.stats().drops), (1, 1));
        assert!(q.classes[&1].active);
        assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
        assert!(!q.classes[&1].active);
    }

    #[test]
    fn delete_purges_and_graft_deactivates() {
        let mut q = drr(&[(1, ""), (2, "")]);
        q.enqueue(pkt(1, 300, 1), t(0));
        q.enqueue(pkt(2, 200, 2), t(0));
        q.delete_class(1, t(0)).unwrap();
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops), (1, 200, 1));
        assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 300));
        assert_eq!(q.class_minors(), vec![2]);
        let old = q.graft(2, None, &dev()).unwrap().unwrap();
        assert_eq!(old.stats().qlen, 1);
        assert!(q.active.is_empty());
        assert_eq!(q.delete_class(9, t(0)).unwrap_err(), TcError::errno(Errno::ENOENT));
    }

    #[test]
    fn class_xstats_show_the_deficit_only_with_packets() {
        let mut q = drr(&[(1, "quantum 2000")]);
        let x = |q: &Node<Drr>| {
            let mut o = Out::text();
            q.dump_class_xstats(1, &mut o);
            o.into_string()
        };
        assert_eq!(x(&q), " deficit 0b ");
        q.enqueue(pkt(1, 500, 1), t(0));
        q.enqueue(pkt(2, 500, 1), t(0));
        q.dequeue(t(0));
        assert_eq!(x(&q), " deficit 1500b ");
        let mut o = Out::text();
        q.dump_class(1, &mut o);
        assert_eq!(o.into_string(), "quantum 2000b ");
    }
}
