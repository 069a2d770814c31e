//! pfifo, bfifo and pfifo_head_drop — mirrors net/sched/sch_fifo.c, printed and
//! parsed as tc/q_fifo.c does (§6 of docs/kernel-notes.md).
//!
//! Theory: one FIFO with a limit. pfifo counts packets (accept while qlen < limit),
//! bfifo counts bytes (accept while backlog + len ≤ limit); both tail-drop.
//! pfifo_head_drop, at its limit, drops the *oldest* packet to admit the new one
//! and answers NET_XMIT_CN, telling its parents the byte difference.
//! Without options the limit is the device's txqueuelen (× psched_mtu for bfifo).

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{tc_h_make, Create, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch};
use crate::tc::{units, Args, Out, TcError};
use crate::time::Instant;

/// Which of the three fifos.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FifoKind {
    Pfifo,
    Bfifo,
    PfifoHeadDrop,
}

impl FifoKind {
    pub fn id(self) -> &'static str {
        match self {
            FifoKind::Pfifo => "pfifo",
            FifoKind::Bfifo => "bfifo",
            FifoKind::PfifoHeadDrop => "pfifo_head_drop",
        }
    }
}

pub static PFIFO: Ops = ops!("pfifo", FifoKind::Pfifo);
pub static BFIFO: Ops = ops!("bfifo", FifoKind::Bfifo);
pub static PFIFO_HEAD_DROP: Ops = ops!("pfifo_head_drop", FifoKind::PfifoHeadDrop);

/// The registration of one of the three fifos.
macro_rules! ops {
    ($id:literal, $kind:expr) => {
        Ops {
            id: $id,
            parse: Parse::Qopt(|a| Ok(parse($kind, a)?.map(Opts::new))),
            create: |c| create($kind, c),
            parse_class: None,
            flags: Flags::NONE,
            since: None,
        }
    };
}
use ops;

/// `fifo_init`.
fn create(kind: FifoKind, c: &Create) -> Result<Box<dyn Qdisc>, TcError> {
    Ok(Box::new(Fifo::new(kind, c.opts::<FifoOpt>()?.copied(), c.dev)))
}

/// `struct tc_fifo_qopt`: what tc sends (only when `limit` is given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FifoOpt {
    /// Packets (pfifo, pfifo_head_drop) or bytes (bfifo).
    pub limit: u32,
}

/// q_fifo.c `explain`.
const USAGE: &str = "Usage: ... <[p|b]fifo | pfifo_head_drop> [ limit NUMBER ]\n";

/// tc side: `fifo_parse_opt`.
pub fn parse(kind: FifoKind, args: &mut Args) -> Result<Option<FifoOpt>, TcError> {
    let mut limit = None;
    while let Some(a) = args.next() {
        match a {
            "limit" => {
                let v = args.value()?;
                limit =
                    Some(units::get_size(v).ok_or_else(|| {
                        TcError::tc(format!("{}: Illegal value for \"limit\": \"{}\"\n", kind.id(), v))
                    })?);
            }
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("{}: unknown parameter \"{other}\"\n{USAGE}", kind.id()))),
        }
    }
    Ok(limit.map(|limit| FifoOpt { limit }))
}

pub struct Fifo {
    kind: FifoKind,
    pub limit: u32,
    q: VecDeque<Packet>,
    bypass: bool,
}

impl Fifo {
    /// `fifo_init` / `__fifo_init`.
    pub fn new(kind: FifoKind, opt: Option<FifoOpt>, dev: &DevInfo) -> Self {
        let mut f = Fifo { kind, limit: 0, q: VecDeque::new(), bypass: false };
        f.apply(opt, dev);
        f
    }

    /// A fifo of `limit` (packets or bytes, by kind).
    pub fn with_limit(kind: FifoKind, limit: u32, dev: &DevInfo) -> Self {
        Self::new(kind, Some(FifoOpt { limit }), dev)
    }
}

/// `qdisc_create_dflt(…, &pfifo_qdisc_ops, parent)`: a class's default qdisc, a
/// pfifo of txqueuelen packets, handle 0, below `parent`. Callers hash it as their
/// kernel code does (`.invisible()` for `qdisc_hash_add(q, true)`).
pub fn pfifo_dflt(parent: u32, dev: &DevInfo) -> Node {
    Node::new(0, parent, Box::new(Fifo::new(FifoKind::Pfifo, None, dev)))
}

/// `fifo_create_dflt(sch, ops, limit)` as tbf, red and sfb use it: a fifo of `limit`
/// below class 1 of the qdisc `handle`, hashed invisible (`qdisc_hash_add(q, true)`).
pub fn fifo_create_dflt(kind: FifoKind, limit: u32, handle: u32, dev: &DevInfo) -> Node {
    Node::new(0, tc_h_make(handle, 1), Box::new(Fifo::with_limit(kind, limit, dev))).invisible()
}

impl Fifo {
    fn apply(&mut self, opt: Option<FifoOpt>, dev: &DevInfo) {
        self.limit = match opt {
            Some(o) => o.limit,
            None if self.kind == FifoKind::Bfifo => dev.tx_queue_len.wrapping_mul(dev.psched_mtu()),
            None => dev.tx_queue_len,
        };
        self.bypass = match self.kind {
            FifoKind::Bfifo => self.limit >= dev.psched_mtu(),
            _ => self.limit >= 1,
        };
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    fn tail(&mut self, sch: &mut Sch, pkt: Packet) -> Enqueued {
        // The fifos leave the control block (`enqueued_at`) alone, as the kernel's
        // do: a parent's words there (sfb's bin hashes) survive the child.
        sch.stats.queued(pkt.len);
        self.q.push_back(pkt);
        Enqueued::Success
    }
}

impl Qdisc for Fifo {
    fn ops(&self) -> &'static Ops {
        match self.kind {
            FifoKind::Pfifo => &PFIFO,
            FifoKind::Bfifo => &BFIFO,
            FifoKind::PfifoHeadDrop => &PFIFO_HEAD_DROP,
        }
    }

    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, _now: Instant) -> Enqueued {
        match self.kind {
            // bfifo_enqueue
            FifoKind::Bfifo => {
                if sch.stats.backlog as u64 + pkt.len as u64 <= self.limit as u64 {
                    return self.tail(sch, pkt);
                }
            }
            // pfifo_enqueue
            FifoKind::Pfifo => {
                if sch.stats.qlen < self.limit {
                    return self.tail(sch, pkt);
                }
            }
            // pfifo_tail_enqueue
            FifoKind::PfifoHeadDrop => {
                if self.limit == 0 {
                    sch.stats.dropped();
                    return Enqueued::Dropped;
                }
                if sch.stats.qlen < self.limit {
                    return self.tail(sch, pkt);
                }
                let prev_backlog = sch.stats.backlog;
                let old = self.q.pop_front().expect("qlen == limit > 0");
                sch.stats.unqueued(old.len);
                sch.stats.dropped();
                old.kfree_skb();
                self.tail(sch, pkt);
                sch.reduce(0, prev_backlog as i64 - sch.stats.backlog as i64);
                return Enqueued::Congested;
            }
        }
        sch.stats.dropped();
        Enqueued::Dropped
    }

    fn dequeue(&mut self, sch: &mut Sch, _now: Instant) -> Dequeued {
        // Count from the queued packet, then move it out whole, as a `Packet` and
        // not through `pop_front`'s `Option`: checking that one's tag (the flags
        // byte, the niche) splits the copy into 63 bytes and that byte, and the
        // caller's 16-byte load of the packet's last quarter, spanning both stores,
        // then stalls instead of being forwarded from them. The empty packet left
        // in its place owns nothing and is not charged, so it is popped unread.
        let Some(p) = self.q.front_mut() else { return Dequeued::Empty };
        sch.stats.unqueued(p.len);
        sch.stats.sent(p);
        let p = std::mem::replace(p, Packet::new(0, 0));
        std::mem::forget(self.q.pop_front());
        Dequeued::Packet(p)
    }

    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        self.q.front()
    }

    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.q.clear();
    }

    fn change(&mut self, _sch: &mut Sch, opts: &Opts, dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        self.apply(Some(*opts.of::<FifoOpt>()?), dev);
        Ok(())
    }

    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        // q_fifo.c fifo_print_opt: bfifo prints a size, the others a packet count.
        if self.kind == FifoKind::Bfifo {
            out.uint("limit", format_args!("limit {}", units::fmt_size(self.limit)), self.limit as u64);
        } else {
            out.uint("limit", format_args!("limit {}p", self.limit), self.limit as u64);
        }
    }

    fn can_bypass(&self) -> bool {
        self.bypass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Reduce;
    use crate::testing::{dev, held, t};

    #[test]
    fn defaults_follow_the_device() {
        assert_eq!(Fifo::new(FifoKind::Pfifo, None, &dev()).limit, 1000);
        assert_eq!(Fifo::new(FifoKind::Bfifo, None, &dev()).limit, 1_514_000);
        assert_eq!(Fifo::new(FifoKind::PfifoHeadDrop, None, &dev()).limit, 1000);
    }

    #[test]
    fn pfifo_tail_drops_at_limit() {
        let mut f = held(Fifo::with_limit(FifoKind::Pfifo, 2, &dev()));
        assert_eq!(f.enqueue(Packet::new(1, 100), t(0)), Enqueued::Success);
        assert_eq!(f.enqueue(Packet::new(2, 100), t(0)), Enqueued::Success);
        assert_eq!(f.enqueue(Packet::new(3, 100), t(0)), Enqueued::Dropped);
        assert_eq!(f.stats().drops, 1);
        assert_eq!((f.stats().qlen, f.stats().backlog), (2, 200));
        assert_eq!(f.dequeue(t(1)).packet().unwrap().id, 1);
        assert_eq!(f.dequeue(t(1)).packet().unwrap().id, 2);
        assert_eq!(f.dequeue(t(1)), Dequeued::Empty);
        assert_eq!((f.stats().bytes, f.stats().packets), (200, 2));
    }

    #[test]
    fn bfifo_counts_bytes_inclusive() {
        let mut f = held(Fifo::with_limit(FifoKind::Bfifo, 3000, &dev()));
        assert_eq!(f.enqueue(Packet::new(1, 1500), t(0)), Enqueued::Success);
        assert_eq!(f.enqueue(Packet::new(2, 1500), t(0)), Enqueued::Success); // 3000 ≤ 3000
        assert_eq!(f.enqueue(Packet::new(3, 1), t(0)), Enqueued::Dropped);
        assert!(!Fifo::with_limit(FifoKind::Bfifo, 1513, &dev()).can_bypass());
        assert!(Fifo::with_limit(FifoKind::Bfifo, 1514, &dev()).can_bypass());
    }

    #[test]
    fn head_drop_drops_oldest_and_reports_bytes() {
        let mut f = held(Fifo::with_limit(FifoKind::PfifoHeadDrop, 2, &dev()));
        f.enqueue(Packet::new(1, 100), t(0));
        f.enqueue(Packet::new(2, 200), t(0));
        assert_eq!(f.enqueue(Packet::new(3, 300), t(0)), Enqueued::Congested);
        assert_eq!(f.take_reduce(), Reduce::new(0, -200));
        assert_eq!((f.stats().qlen, f.stats().backlog, f.stats().drops), (2, 500, 1));
        assert_eq!(f.dequeue(t(0)).packet().unwrap().id, 2);
        let mut z = held(Fifo::with_limit(FifoKind::PfifoHeadDrop, 0, &dev()));
        assert_eq!(z.enqueue(Packet::new(1, 1), t(0)), Enqueued::Dropped);
    }
}
