//! mq — mirrors net/sched/sch_mq.c (§8 of docs/kernel-notes.md).
//!
//! Theory: mq is not a scheduler. It is the root of a multiqueue device and owns one
//! child qdisc per tx queue (class `<major>:<txq+1>`), each attached to its own
//! queue; every packet is queued in the child of the tx queue it was sent on. Its
//! counters are the sums of its children's, recomputed at dump time (`mq_dump`).
//!
//! As a trait object, `enqueue` does what the transmit path does before reaching a
//! txq's qdisc — pick the queue by `skb_tx_hash` (`reciprocal_scale(hash, n)`, §2.2) —
//! and `dequeue` serves the tx queues in turn, as a NIC draining its rings would.

use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_make, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::sched;
use crate::stats::Stats;
use crate::tc::{Errno, Out, TcError};
use crate::time::Instant;

/// iproute2 has no q_mq.c. mq gives each tx queue its child (`mq_attach`).
pub static OPS: Ops = Ops {
    id: "mq",
    parse: Parse::Generic,
    create: |c| Ok(Box::new(Mq::new(c.dev, c.handle, c.parent, c.default_qdisc, c.now)?)),
    parse_class: None,
    flags: Flags { per_txq: true, no_options: true, ..Flags::NONE },
    since: None,
};

pub struct Mq {
    txqs: Vec<Node>,
    /// Next tx queue `dequeue` looks at.
    next: usize,
}

impl Mq {
    /// `mq_init`: only as root of a multiqueue device; each tx queue gets its default
    /// qdisc (`qdisc_create_dflt`, handle 0, parent `<major>:<txq+1>`) of the kind
    /// `get_default_qdisc_ops` (include/net/sch_generic.h) names: `default_qdisc`
    /// (`net.core.default_qdisc`) below real_num_tx_queues, pfifo_fast above — and
    /// every tx queue of a [`DevInfo`] is a real one. If one of them cannot be made (htb/tbf/prio/mq/ingress as
    /// `net.core.default_qdisc`, or pfifo_fast on a device with txqueuelen 0), mq_init
    /// fails with ENOMEM: `tc qdisc add … mq` is refused, and a default mq root falls
    /// back to noqueue ([`crate::tree`]).
    pub fn new(dev: &DevInfo, handle: u32, parent: u32, default_qdisc: &str, now: Instant) -> Result<Self, TcError> {
        if parent != TC_H_ROOT || dev.num_tx_queues <= 1 {
            return Err(TcError::errno(Errno::EOPNOTSUPP));
        }
        let mut txqs = Vec::with_capacity(dev.num_tx_queues as usize);
        for ntx in 0..dev.num_tx_queues {
            let parent = tc_h_make(tc_h_maj(handle), ntx + 1);
            let q = sched::create_dflt(default_qdisc, dev, parent, default_qdisc, now)
                .ok_or_else(|| TcError::errno(Errno::ENOMEM))?;
            txqs.push(Node::new(0, parent, q));
        }
        Ok(Mq { txqs, next: 0 })
    }

    /// `mq_dump`: the sums of the children.
    fn sync(&mut self, sch: &mut Sch) {
        let mut s = Stats::default();
        for n in &mut self.txqs {
            // Children are NOPARENT: their backlog reductions stop here.
            let _ = n.take_reduce();
            s.add(n.stats());
        }
        sch.stats = s;
    }

    /// `skb_tx_hash` without traffic classes: `reciprocal_scale(hash, n)`.
    pub fn pick_tx(&self, pkt: &Packet) -> usize {
        crate::sched::codel::reciprocal_scale(pkt.hash, self.txqs.len() as u32) as usize
    }

    pub fn txq(&mut self, i: usize) -> &mut Node {
        &mut self.txqs[i]
    }

    /// The transmit path's enqueue on tx queue `i` (one mqprio picks by traffic
    /// class), then the sums.
    pub(crate) fn enqueue_on(&mut self, sch: &mut Sch, i: usize, pkt: Packet, now: Instant) -> Enqueued {
        let r = self.txqs[i].enqueue(pkt, now);
        self.sync(sch);
        r
    }

    /// The tx queues' qdiscs, queue 0 first.
    pub(crate) fn txqs(&self) -> &[Node] {
        &self.txqs
    }
}

impl Qdisc for Mq {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        let i = self.pick_tx(&pkt);
        self.enqueue_on(sch, i, pkt, now)
    }

    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let n = self.txqs.len();
        let mut idle = Dequeued::Empty;
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.txqs[i].dequeue(now) {
                Dequeued::Packet(p) => {
                    self.next = (i + 1) % n;
                    self.sync(sch);
                    return Dequeued::Packet(p);
                }
                other => idle = Dequeued::earliest(idle, other),
            }
        }
        self.sync(sch);
        idle
    }

    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        let n = self.txqs.len();
        let i = (0..n).map(|k| (self.next + k) % n).find(|&i| self.txqs[i].peek(now).is_some())?;
        let _ = sch;
        self.txqs[i].peek(now)
    }

    fn reset(&mut self, sch: &mut Sch, now: Instant) {
        for n in &mut self.txqs {
            n.reset(now);
        }
        self.sync(sch);
    }

    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}
    fn sync_stats(&mut self, sch: &mut Sch) {
        for n in &mut self.txqs {
            n.sync_stats();
        }
        self.sync(sch);
    }

    crate::classful!();
}

impl Classful for Mq {
    fn class_minors(&self) -> Vec<u32> {
        (1..=self.txqs.len() as u32).collect()
    }
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.txqs.get((minor as usize).checked_sub(1)?)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.txqs.get_mut((minor as usize).checked_sub(1)?)
    }
    /// `mq_graft`: the tx queue's qdisc is swapped (deleting leaves noop on it).
    fn graft(
        &mut self,
        _sch: &mut Sch,
        minor: u32,
        new: Option<Node>,
        _dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        let i = (minor as usize).checked_sub(1).filter(|&i| i < self.txqs.len());
        let i = i.ok_or_else(|| TcError::kernel("Specified class not found"))?;
        let parent = self.txqs[i].parent;
        let new = new.unwrap_or_else(|| crate::sched::noqueue::Noop::node(parent));
        // mq's own counters are the sums taken at dump time (`sync_stats`).
        Ok(Some(std::mem::replace(&mut self.txqs[i], new)))
    }
    fn class_parent_is_root(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(n: u32) -> DevInfo {
        DevInfo { num_tx_queues: n, real_tx_queues: n, ..DevInfo::eth0() }
    }

    fn mq(d: &DevInfo, handle: u32, parent: u32) -> Result<Mq, TcError> {
        Mq::new(d, handle, parent, crate::tree::DEFAULT_QDISC, Instant::ZERO)
    }

    #[test]
    fn only_root_of_multiqueue() {
        assert!(mq(&dev(1), 0, TC_H_ROOT).is_err());
        assert!(mq(&dev(4), 0x10000, 0x20001).is_err());
        let mq = mq(&dev(4), 0x10000, TC_H_ROOT).unwrap();
        assert_eq!(mq.class_minors(), vec![1, 2, 3, 4]);
        assert_eq!(mq.leaf(2).unwrap().parent, 0x10002);
        assert_eq!(crate::qdisc::tc_h_min(mq.leaf(4).unwrap().parent), 4);
    }

    #[test]
    fn stats_are_sums_and_hash_picks_queue() {
        let mut mq = crate::testing::held(mq(&dev(4), 0, TC_H_ROOT).unwrap());
        let now = Instant::ZERO;
        // hash 0 → txq 0; hash 0xC000_0000 → txq 3.
        mq.enqueue(Packet::new(1, 100).with_hash(0), now);
        mq.enqueue(Packet::new(2, 200).with_hash(0xC000_0000), now);
        assert_eq!(mq.txq(0).stats().qlen, 1);
        assert_eq!(mq.txq(3).stats().backlog, 200);
        assert_eq!((mq.stats().qlen, mq.stats().backlog), (2, 300));
        assert!(mq.dequeue(now).packet().is_some());
        assert!(mq.dequeue(now).packet().is_some());
        assert_eq!((mq.stats().qlen, mq.stats().bytes, mq.stats().packets), (0, 300, 2));
    }
}
