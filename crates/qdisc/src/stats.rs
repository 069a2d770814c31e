//! Per-qdisc counters: `gnet_stats_basic` (bstats) and `gnet_stats_queue` (qstats),
//! maintained exactly where the kernel maintains them (§1.1 of docs/kernel-notes.md).

use crate::packet::Packet;

/// bstats + qstats of one qdisc or class.
///
/// The netlink structs carry `qlen`, `backlog`, `drops`, `requeues` and `overlimits`
/// as u32; they wrap the same way here. `packets` is u64 (TCA_STATS_PKT64).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes dequeued ("Sent N bytes").
    pub bytes: u64,
    /// Wire segments dequeued ("N pkt"): `gso_segs` per skb.
    pub packets: u64,
    /// Packets queued (`q.qlen`).
    pub qlen: u32,
    /// Bytes queued.
    pub backlog: u32,
    pub drops: u32,
    pub requeues: u32,
    pub overlimits: u32,
}

impl Stats {
    /// `qdisc_bstats_update`: one dequeued skb.
    pub fn sent(&mut self, pkt: &Packet) {
        self.bytes += pkt.len as u64;
        self.packets += pkt.gso_segs.max(1) as u64;
    }
    /// A packet joined the queue.
    pub fn queued(&mut self, len: u32) {
        self.qlen += 1;
        self.backlog = self.backlog.wrapping_add(len);
    }
    /// A packet left the queue (dequeued or dropped from it).
    pub fn unqueued(&mut self, len: u32) {
        self.qlen -= 1;
        self.backlog = self.backlog.wrapping_sub(len);
    }
    /// `qdisc_qstats_drop`.
    pub fn dropped(&mut self) {
        self.drops = self.drops.wrapping_add(1);
    }
    pub fn overlimit(&mut self) {
        self.overlimits = self.overlimits.wrapping_add(1);
    }
    /// Counters a parent sums from its children (mq's dump, §8).
    pub fn add(&mut self, o: &Stats) {
        self.bytes += o.bytes;
        self.packets += o.packets;
        self.qlen = self.qlen.wrapping_add(o.qlen);
        self.backlog = self.backlog.wrapping_add(o.backlog);
        self.drops = self.drops.wrapping_add(o.drops);
        self.requeues = self.requeues.wrapping_add(o.requeues);
        self.overlimits = self.overlimits.wrapping_add(o.overlimits);
    }
}

/// What `qdisc_tree_reduce_backlog(sch, n, len)` tells every ancestor: packets that
/// left a child other than through the parent's own enqueue/dequeue accounting
/// (a head drop, a batch drop, CoDel dropping at dequeue). One value may sum several
/// calls; each call counts max(n, 0) drops at every ancestor, so a GSO split's
/// negative n in the same sum cancels no drop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reduce {
    /// Negative when a child grew by more packets than it was given (tbf segmenting GSO).
    pub pkts: i32,
    pub bytes: i64,
    /// Σ max(n, 0) over the calls summed.
    pub drops: u32,
}

impl Reduce {
    /// One call's `n` and `len`.
    pub const fn new(pkts: i32, bytes: i64) -> Self {
        Reduce { pkts, bytes, drops: if pkts > 0 { pkts as u32 } else { 0 } }
    }
    pub fn is_zero(&self) -> bool {
        self.pkts == 0 && self.bytes == 0 && self.drops == 0
    }
    /// One more call.
    pub fn add(&mut self, pkts: i32, bytes: i64) {
        self.merge(Reduce::new(pkts, bytes));
    }
    /// Calls summed elsewhere (a child's, travelling up).
    pub fn merge(&mut self, r: Reduce) {
        self.pkts += r.pkts;
        self.bytes += r.bytes;
        self.drops += r.drops;
    }
    /// Apply to a parent: qlen and backlog fall, drops rise by each call's max(n, 0).
    pub fn apply(&self, s: &mut Stats) {
        s.qlen = (s.qlen as i64 - self.pkts as i64) as u32;
        s.backlog = (s.backlog as i64 - self.bytes) as u32;
        s.drops = s.drops.wrapping_add(self.drops);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that split a GSO skb into 3 (n = −2) and dropped one 1000-byte packet
    /// (n = 1) before its parent looked: the parent's qlen grows by 1 net, and its
    /// drops still rise by 1, as the two qdisc_tree_reduce_backlog calls would make
    /// them (summing n first gave max(−1, 0) = 0 drops).
    #[test]
    fn a_gso_split_cancels_no_drop() {
        let mut r = Reduce::new(-2, 0);
        r.add(1, 1000);
        assert_eq!(r, Reduce { pkts: -1, bytes: 1000, drops: 1 });
        let mut s = Stats { qlen: 5, backlog: 7000, ..Default::default() };
        r.apply(&mut s);
        assert_eq!((s.qlen, s.backlog, s.drops), (6, 6000, 1));
        // A +1 then −1 nets to nothing but its drop.
        let mut r = Reduce::default();
        r.add(1, 100);
        r.add(-1, -100);
        assert!(!r.is_zero());
        let mut up = Reduce::default();
        up.merge(r);
        assert_eq!(up.drops, 1);
    }
}
