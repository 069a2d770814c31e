//! pfifo_fast — mirrors `pfifo_fast_ops` in net/sched/sch_generic.c (§5 of
//! docs/kernel-notes.md); printed by iproute2's prio printer.
//!
//! Theory: three strict-priority bands chosen by `skb->priority & 15` through a fixed
//! priomap; band 0 is always served first. Each band is a ring of `txqueuelen`
//! slots, so the qdisc holds up to 3 × txqueuelen packets and a full ring drops the
//! newcomer. No parameters, no xstats; overlimits never moves.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Ops, Parse, Qdisc, Sch};
use crate::sched::prio;
use crate::tc::{Out, TcError};
use crate::time::Instant;

/// `prio2band` in sch_generic.c.
pub const PRIO2BAND: [u8; 16] = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
pub const BANDS: usize = 3;

/// q_prio.c registers pfifo_fast for printing only.
pub static OPS: Ops = Ops {
    id: "pfifo_fast",
    parse: Parse::PrintOnly,
    create: |c| Ok(Box::new(PfifoFast::new(c.dev)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

pub struct PfifoFast {
    bands: [VecDeque<Packet>; BANDS],
    /// Ring size of each band (`dev->tx_queue_len`).
    ring: u32,
}

impl PfifoFast {
    /// `pfifo_fast_init`: fails when the device's txqueuelen is 0 (no ring can be made).
    pub fn new(dev: &DevInfo) -> Result<Self, TcError> {
        if dev.tx_queue_len == 0 {
            return Err(TcError::errno(crate::tc::Errno::EINVAL));
        }
        Ok(PfifoFast { bands: Default::default(), ring: dev.tx_queue_len })
    }

    /// `band2list`: the band for a priority.
    pub fn band_of(priority: u32) -> usize {
        PRIO2BAND[(priority & 15) as usize] as usize
    }
}

impl Qdisc for PfifoFast {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `pfifo_fast_enqueue`: push to the band's ring, or drop when it is full.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let band = Self::band_of(pkt.priority);
        if self.bands[band].len() as u32 >= self.ring {
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        pkt.enqueued_at = now;
        sch.stats.queued(pkt.len);
        self.bands[band].push_back(pkt);
        Enqueued::Success
    }

    /// `pfifo_fast_dequeue`: the first non-empty band, 0 → 2.
    fn dequeue(&mut self, sch: &mut Sch, _now: Instant) -> Dequeued {
        // Count from the head packet, then move it out whole (one block copy, which
        // the caller's loads forward from).
        for band in self.bands.iter_mut() {
            if let Some(p) = band.front() {
                sch.stats.unqueued(p.len);
                sch.stats.sent(p);
                return band.pop_front().map_or(Dequeued::Empty, Dequeued::Packet);
            }
        }
        Dequeued::Empty
    }

    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        self.bands.iter().find_map(|b| b.front())
    }

    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.bands.iter_mut().for_each(VecDeque::clear);
    }

    /// `pfifo_fast_dump` sends a tc_prio_qopt; tc prints it with q_prio.c.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        prio::dump_priomap(out, BANDS as u32, &PRIO2BAND);
    }

    fn can_bypass(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(txqlen: u32) -> DevInfo {
        DevInfo { tx_queue_len: txqlen, ..DevInfo::eth0() }
    }

    #[test]
    fn strict_priority_by_priomap() {
        let mut q = crate::testing::held(PfifoFast::new(&dev(10)).unwrap());
        let now = Instant::ZERO;
        // priority 1 → band 2, 0 → band 1, 6 → band 0, 7 → band 0, 15 → band 1
        for (id, prio) in [(1, 1), (2, 0), (3, 6), (4, 15), (5, 7)] {
            assert_eq!(q.enqueue(Packet::new(id, 100).with_priority(prio), now), Enqueued::Success);
        }
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(now).packet().map(|p| p.id)).collect();
        assert_eq!(order, vec![3, 5, 2, 4, 1]);
    }

    #[test]
    fn each_band_holds_txqueuelen() {
        let mut q = crate::testing::held(PfifoFast::new(&dev(2)).unwrap());
        let now = Instant::ZERO;
        for i in 0..3 {
            q.enqueue(Packet::new(i, 100), now);
        }
        assert_eq!((q.stats().qlen, q.stats().drops), (2, 1));
        // Other bands still have room.
        assert_eq!(q.enqueue(Packet::new(9, 100).with_priority(6), now), Enqueued::Success);
        assert!(PfifoFast::new(&dev(0)).is_err());
    }
}
