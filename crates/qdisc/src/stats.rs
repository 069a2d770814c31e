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
/// (a head drop, a batch drop, CoDel dropping at dequeue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reduce {
    /// Negative when a child grew by more packets than it was given (tbf segmenting GSO).
    pub pkts: i32,
    pub bytes: i64,
}

impl Reduce {
    pub fn is_zero(&self) -> bool {
        self.pkts == 0 && self.bytes == 0
    }
    pub fn add(&mut self, pkts: i32, bytes: i64) {
        self.pkts += pkts;
        self.bytes += bytes;
    }
    /// Apply to a parent: qlen and backlog fall, drops rise by max(n, 0).
    pub fn apply(&self, s: &mut Stats) {
        s.qlen = (s.qlen as i64 - self.pkts as i64) as u32;
        s.backlog = (s.backlog as i64 - self.bytes) as u32;
        s.drops = s.drops.wrapping_add(self.pkts.max(0) as u32);
    }
}
