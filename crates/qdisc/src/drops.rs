//! The drop monitor: which packets the qdiscs freed as drops, for an embedder that
//! keeps data of its own per packet (the simulator's endpoint data, keyed by
//! [`Packet::id`]).
//!
//! The kernel's qdiscs free what they drop (`kfree_skb` on a `to_free` list, or at
//! once at dequeue) and whoever watches `trace_kfree_skb` (drop_monitor, perf) sees
//! each one. Most drops here are of the packet an enqueue is answering
//! [`Enqueued::Dropped`](crate::Enqueued::Dropped) for, which the caller already
//! knows is gone. The others are not visible in any answer: a head drop (pfifo_head_drop,
//! sfq's and cake's drops from the longest flow, fq_codel's batch, choke's victim,
//! skbprio's lowest band), an AQM's drop at dequeue (codel, fq_codel, pie, dualpi2),
//! a packet that expired in etf or taprio, a queue trimmed by a change. Those go
//! through [`Packet::kfree_skb`], which reports the packet's id to the watch the
//! caller installed with [`watch`], if any. Without a watch nothing is kept, so the
//! engine's memory stays bounded whoever drives it. A copy made with the packet's id
//! (netem's duplicate) is reported by [`cloned`]: until one of them is freed or
//! delivered, two packets carry that id.
//!
//! A watch is per thread (an engine is driven from one thread at a time) and scoped
//! by its guard; a nested watch hides the outer one until it ends.

use std::cell::RefCell;

use crate::Packet;

/// What a watch has recorded.
#[derive(Default)]
struct Seen {
    freed: Vec<u64>,
    cloned: Vec<u64>,
}

thread_local! {
    static WATCH: RefCell<Option<Seen>> = const { RefCell::new(None) };
}

/// Installed by [`watch`]; the previous watch comes back when it is dropped.
#[must_use = "the watch ends when the guard is dropped"]
pub struct Watch {
    outer: Option<Seen>,
}

/// Start recording, on this thread, the ids of packets freed by [`Packet::kfree_skb`]
/// or [`freed`], and of packets [`cloned`].
pub fn watch() -> Watch {
    Watch { outer: WATCH.with(|w| w.borrow_mut().replace(Seen::default())) }
}

fn with_seen(f: impl FnOnce(&mut Seen)) {
    WATCH.with(|w| {
        if let Some(seen) = w.borrow_mut().as_mut() {
            f(seen)
        }
    });
}

/// Move the ids of the packets freed so far, under the watch installed on this
/// thread, into `out` (appended, in the order freed; nothing without a watch).
pub fn take_freed(out: &mut Vec<u64>) {
    with_seen(|s| out.append(&mut s.freed));
}

/// Move the ids of the packets cloned so far, under the watch installed on this
/// thread, into `out` (appended; nothing without a watch).
pub fn take_cloned(out: &mut Vec<u64>) {
    with_seen(|s| out.append(&mut s.cloned));
}

impl Drop for Watch {
    fn drop(&mut self) {
        let outer = self.outer.take();
        WATCH.with(|w| *w.borrow_mut() = outer);
    }
}

impl Packet {
    /// `kfree_skb` of a dropped packet that no enqueue answer reports (see the
    /// module's text).
    pub fn kfree_skb(self) {
        freed(self.id);
    }
}

/// Report the packet `id` freed as a drop, when the packet itself went where it was
/// freed (a segment a child qdisc answered NET_XMIT_DROP for, while the skb it was
/// cut from is answered NET_XMIT_SUCCESS).
pub fn freed(id: u64) {
    with_seen(|s| s.freed.push(id));
}

/// Report a copy of packet `id` made with the same id (netem's duplicate,
/// `skb_clone`): one more packet with that id is alive until freed or delivered.
pub fn cloned(id: u64) {
    with_seen(|s| s.cloned.push(id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_watch_records_and_it_nests() {
        Packet::new(1, 100).kfree_skb();
        let outer = watch();
        Packet::new(2, 100).kfree_skb();
        {
            let _inner = watch();
            Packet::new(3, 100).kfree_skb();
            cloned(4);
            let mut got = Vec::new();
            take_freed(&mut got);
            assert_eq!(got, [3]);
            let mut got = Vec::new();
            take_cloned(&mut got);
            assert_eq!(got, [4]);
        }
        Packet::new(5, 100).kfree_skb();
        let mut got = Vec::new();
        take_freed(&mut got);
        assert_eq!(got, [2, 5]);
        take_freed(&mut got);
        assert_eq!(got, [2, 5]);
        let mut none = Vec::new();
        take_cloned(&mut none);
        assert!(none.is_empty());
        drop(outer);
        Packet::new(6, 100).kfree_skb();
        WATCH.with(|w| assert!(w.borrow().is_none()));
    }
}
