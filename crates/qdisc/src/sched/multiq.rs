//! multiq — one band per tx queue. Mirrors net/sched/sch_multiq.c (kernel side) and
//! tc/q_multiq.c (iproute2 side); §26 of docs/kernel-notes.md.
//!
//! Theory: on a multiqueue device, `real_num_tx_queues` bands `<handle>:1` … each
//! with a child qdisc (a pfifo unless grafted; noop once a graft removes one). A
//! packet goes to the band of the tx queue the stack picked for it (its queue
//! mapping; out of range: band 0) unless a filter action takes it. Dequeue serves
//! the bands round robin, one packet per turn, starting after the band served last.
//! multiq counts packets but not bytes: its own backlog is never raised.

use crate::classify::{Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_make, Child, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch,
};
use crate::sched::fifo::pfifo_dflt;
use crate::sched::noqueue::Noop;
use crate::tc::{Args, Errno, Out, TcError};
use crate::time::Instant;

/// `multiq_init` wants options (EINVAL without); tc always sends them.
pub static OPS: Ops = Ops {
    id: "multiq",
    parse: Parse::Qopt(|a| parse(a).map(|()| Some(Opts::new(MultiqOpt)))),
    create: |c| {
        c.required::<MultiqOpt>()?;
        Ok(Box::new(Multiq::new(c.dev, c.handle)?))
    },
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// q_multiq.c `explain`.
const USAGE: &str = "Usage: ... multiq [help]\n";

/// `struct tc_multiq_qopt` as tc sends it: zeroes (the kernel fills in the bands).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MultiqOpt;

/// tc side: q_multiq.c `multiq_parse_opt` — no option words.
pub fn parse(args: &mut Args) -> Result<(), TcError> {
    match args.next() {
        None => Ok(()),
        Some("help") => Err(TcError::tc(USAGE)),
        Some(a) => Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}"))),
    }
}

/// `struct multiq_sched_data`.
pub struct Multiq {
    handle: u32,
    /// `queues[0..max_bands]`; bands past `bands` hold noop.
    queues: Vec<Node>,
    bands: usize,
    curband: usize,
    block: Block,
}

impl Multiq {
    /// `multiq_init`: `max_bands` = the device's tx queues, all noop, then
    /// `multiq_tune`.
    pub fn new(dev: &DevInfo, handle: u32) -> Result<Multiq, TcError> {
        let max = dev.num_tx_queues as usize;
        let queues = (0..max).map(|i| Noop::node(tc_h_make(handle, i as u32 + 1))).collect();
        let mut q = Multiq { handle, queues, bands: 0, curband: 0, block: Block::new(handle) };
        q.tune(&mut Sch::default(), dev)?;
        Ok(q)
    }

    fn is_noop(n: &Node) -> bool {
        n.flags().builtin
    }

    /// Mirrors `multiq_tune`: refused on a single-queue device; the bands become the
    /// real tx queues; bands past them are purged (the ancestors are told) and get
    /// noop; bands holding noop get a fresh pfifo, hashed invisible.
    fn tune(&mut self, sch: &mut Sch, dev: &DevInfo) -> Result<(), TcError> {
        if dev.num_tx_queues <= 1 {
            return Err(TcError::errno(Errno::EOPNOTSUPP));
        }
        self.bands = (dev.real_tx_queues as usize).min(self.queues.len());
        for i in self.bands..self.queues.len() {
            if !Self::is_noop(&self.queues[i]) {
                let noop = Noop::node(tc_h_make(self.handle, i as u32 + 1));
                let mut old = std::mem::replace(&mut self.queues[i], noop);
                sch.child_purged(old.stats());
                old.reset(Instant::ZERO);
            }
        }
        for i in 0..self.bands {
            if Self::is_noop(&self.queues[i]) {
                self.queues[i] = pfifo_dflt(tc_h_make(self.handle, i as u32 + 1), dev).invisible();
            }
        }
        Ok(())
    }

    /// Mirrors `multiq_classify`: the filters first (SHOT drops, STOLEN consumes,
    /// any other result is ignored), then the packet's tx queue.
    fn classify(&self, pkt: &mut Packet, now: Instant) -> Result<usize, Enqueued> {
        match self.block.classify(pkt, now) {
            Some(Verdict::Shot) => return Err(Enqueued::Dropped),
            Some(Verdict::Stolen) => return Err(Enqueued::Stolen),
            _ => {}
        }
        let band = queue_mapping(pkt, self.bands);
        Ok(if band >= self.bands { 0 } else { band })
    }
}

/// `skb_get_queue_mapping` for a packet a non-mq root receives: the queue
/// `skb_tx_hash` picks among the `bands` real tx queues (`reciprocal_scale`), as
/// [`crate::tree::Device::txq_of`] does.
fn queue_mapping(pkt: &Packet, bands: usize) -> usize {
    crate::sched::codel::reciprocal_scale(pkt.hash, bands as u32) as usize
}

impl Qdisc for Multiq {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `multiq_enqueue`: qlen grows on success, drops on a drop code; the
    /// backlog is not touched.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let band = match self.classify(&mut pkt, now) {
            Ok(b) => b,
            Err(e) => return sch.unclassified(e),
        };
        let child = &mut self.queues[band];
        let r = child.enqueue(pkt, now);
        Child::collect(child, sch);
        match r {
            Enqueued::Success => sch.stats.qlen += 1,
            r if r.counts_as_drop() => sch.stats.dropped(),
            _ => {}
        }
        r
    }

    /// Mirrors `multiq_dequeue`: one turn round the bands from the one after the
    /// last served. Every tx queue is taken as running (`netif_xmit_stopped` false).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let mut idle = Dequeued::Empty;
        for _ in 0..self.bands {
            self.curband = (self.curband + 1) % self.bands;
            let child = &mut self.queues[self.curband];
            let d = child.dequeue(now);
            Child::collect(child, sch);
            match d {
                Dequeued::Packet(p) => {
                    sch.stats.qlen -= 1;
                    sch.stats.sent(&p);
                    return Dequeued::Packet(p);
                }
                d => idle = Dequeued::earliest(idle, d),
            }
        }
        idle
    }

    /// Mirrors `multiq_peek`: the same turn without moving `curband`.
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        let (cur, n) = (self.curband, self.bands);
        Child::peek_first(&mut self.queues, (1..=n).map(|k| (cur + k) % n), now, sch)
    }

    /// Mirrors `multiq_reset`.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for q in self.queues.iter_mut().take(self.bands) {
            q.reset(now);
            let _ = q.take_reduce();
        }
        self.curband = 0;
    }

    /// `ops->change` is `multiq_tune`.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        opts.of::<MultiqOpt>()?;
        self.tune(sch, dev)
    }

    /// `multiq_dump`, printed by q_multiq.c with a plain fprintf: `bands N/M ` in
    /// text and, as it is, inside `-j`'s options object.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.fprintf(format_args!("bands {}/{} ", self.bands, self.queues.len()));
    }

    crate::classful!();
}

impl Classful for Multiq {
    /// `multiq_walk`: the bands in order.
    fn class_minors(&self) -> Vec<u32> {
        (1..=self.bands as u32).collect()
    }
    /// `multiq_find`: minors 1..=bands.
    fn find(&self, minor: u32) -> bool {
        (1..=self.bands as u32).contains(&minor)
    }
    /// `multiq_leaf`.
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.queues.get((minor as usize).checked_sub(1)?).filter(|_| self.find(minor))
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        let ok = self.find(minor);
        self.queues.get_mut((minor as usize).checked_sub(1)?).filter(|_| ok)
    }

    /// Mirrors `multiq_graft`: None puts noop on the band; `qdisc_replace` purges the
    /// old child.
    fn graft(&mut self, sch: &mut Sch, minor: u32, new: Option<Node>, _dev: &DevInfo) -> Result<Option<Node>, TcError> {
        if !self.find(minor) {
            return Err(TcError::kernel("Specified class not found"));
        }
        let new = new.unwrap_or_else(|| Noop::node(tc_h_make(self.handle, minor)));
        let mut old = std::mem::replace(&mut self.queues[minor as usize - 1], new);
        sch.child_purged(old.stats());
        old.reset(Instant::ZERO);
        Ok(Some(old))
    }

    // class_stats: the default (the child's bstats and qstats) is
    // `multiq_dump_class_stats`.

    /// `multiq_tcf_block`: the qdisc's block; bands have none (EINVAL).
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
    use crate::testing::{argv, dev, held, t};

    const H: u32 = 0x1_0000;

    fn four() -> DevInfo {
        DevInfo { num_tx_queues: 4, real_tx_queues: 4, ..dev() }
    }
    fn multiq(d: &DevInfo) -> Node<Multiq> {
        held(Multiq::new(d, H).unwrap())
    }
    /// A packet whose hash puts it on tx queue `q` of 4.
    fn pkt(id: u64, q: u32) -> Packet {
        Packet::new(id, 100).with_hash(q << 30)
    }

    #[test]
    fn parser_and_single_queue_refusal() {
        assert_eq!(parse(&mut Args::new(&argv(""))), Ok(()));
        assert_eq!(parse(&mut Args::new(&argv("foo"))).unwrap_err().msg, format!("What is \"foo\"?\n{USAGE}"));
        assert_eq!(Multiq::new(&dev(), H).err(), Some(TcError::errno(Errno::EOPNOTSUPP)));
        let d = DevInfo { real_tx_queues: 3, ..four() };
        let q = multiq(&d);
        let mut o = Out::text();
        q.dump(&mut o, &d);
        assert_eq!(o.into_string(), "bands 3/4 ");
        assert_eq!(q.class_minors(), vec![1, 2, 3]);
    }

    #[test]
    fn bands_are_served_round_robin_from_the_one_after_the_last() {
        let mut q = multiq(&four());
        for (id, txq) in [(1, 0), (2, 0), (3, 2), (4, 3), (5, 3), (6, 1)] {
            assert_eq!(q.enqueue(pkt(id, txq), t(0)), Enqueued::Success);
        }
        // curband starts at 0, so band 1 is served first.
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect();
        assert_eq!(order, vec![6, 3, 4, 1, 5, 2]);
        assert_eq!(q.stats().packets, 6);
    }

    #[test]
    fn qlen_but_no_backlog_and_purges_wrap_it() {
        let mut q = multiq(&four());
        q.enqueue(pkt(1, 2), t(0));
        q.enqueue(pkt(2, 2), t(0));
        assert_eq!((q.stats().qlen, q.stats().backlog), (2, 0));
        // Grafting None leaves noop and purges the band.
        let old = q.graft(3, None, &four()).unwrap().unwrap();
        assert_eq!(old.stats().qlen, 0);
        assert!(q.leaf(3).unwrap().flags().builtin);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (0, 200u32.wrapping_neg(), 2));
        // A change puts a pfifo back on the noop band.
        q.change(&Opts::new(MultiqOpt), &four(), t(0)).unwrap();
        assert_eq!(q.leaf(3).unwrap().kind(), "pfifo");
    }
}
