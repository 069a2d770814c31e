//! noqueue and noop — mirrors `noqueue_qdisc_ops` and `noop_qdisc_ops` in
//! net/sched/sch_generic.c (§1.8 of docs/kernel-notes.md).
//!
//! noqueue is a real, dumpable qdisc whose enqueue the kernel sets to NULL, so
//! `__dev_queue_xmit` calls the driver directly (§2.1). As a trait object it is a
//! zero-delay pass-through: what is enqueued is immediately dequeueable, and — as in
//! the kernel — none of its counters ever move.
//!
//! noop is the builtin placeholder a class points at after its qdisc is deleted
//! (tbf, mq): it frees every packet and answers NET_XMIT_CN, so the parent counts a
//! drop. It is never dumped.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Node, Qdisc};
use crate::sched::Opts;
use crate::stats::Stats;
use crate::tc::{Out, TcError};
use crate::time::Instant;

#[derive(Default)]
pub struct Noqueue {
    /// Packets handed to the "driver", waiting only for the caller to take them.
    passing: VecDeque<Packet>,
    stats: Stats,
}

impl Qdisc for Noqueue {
    fn kind(&self) -> &'static str {
        "noqueue"
    }
    fn enqueue(&mut self, pkt: Packet, _now: Instant) -> Enqueued {
        self.passing.push_back(pkt);
        Enqueued::Success
    }
    fn dequeue(&mut self, _now: Instant) -> Dequeued {
        self.passing.pop_front().map_or(Dequeued::Empty, Dequeued::Packet)
    }
    fn peek(&mut self, _now: Instant) -> Option<&Packet> {
        self.passing.front()
    }
    fn reset(&mut self, _now: Instant) {
        self.passing.clear();
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
    fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }
    fn change(&mut self, _opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        Err(TcError::kernel("Change operation not supported by specified qdisc"))
    }
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}
    fn has_options(&self) -> bool {
        false
    }
}

#[derive(Default)]
pub struct Noop {
    stats: Stats,
}

impl Noop {
    /// The noop placeholder as a tree node below `parent` (never hashed, never dumped).
    pub fn node(parent: u32) -> Node {
        Node::new(0, parent, Box::new(Noop::default()))
    }
}

impl Qdisc for Noop {
    fn kind(&self) -> &'static str {
        "noop"
    }
    fn enqueue(&mut self, _pkt: Packet, _now: Instant) -> Enqueued {
        Enqueued::Congested
    }
    fn dequeue(&mut self, _now: Instant) -> Dequeued {
        Dequeued::Empty
    }
    fn peek(&mut self, _now: Instant) -> Option<&Packet> {
        None
    }
    fn reset(&mut self, _now: Instant) {}
    fn stats(&self) -> &Stats {
        &self.stats
    }
    fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }
    fn change(&mut self, _opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        Err(TcError::invalid())
    }
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}
    fn has_options(&self) -> bool {
        false
    }
}
