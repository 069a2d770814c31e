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
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Parse, Qdisc, Sch};
use crate::tc::Out;
use crate::time::Instant;

/// iproute2 has no q_noqueue.c; `noqueue_init` cannot fail.
pub static NOQUEUE: Ops = Ops {
    id: "noqueue",
    parse: Parse::Generic,
    create: |_| Ok(Box::new(Noqueue::default())),
    parse_class: None,
    flags: Flags { no_enqueue: true, no_options: true, ..Flags::NONE },
    since: None,
};

/// `noop_qdisc_ops`: not registered (tc cannot name it), only placed by the kernel.
pub static NOOP: Ops = Ops {
    id: "noop",
    parse: Parse::Generic,
    create: |_| Ok(Box::new(Noop)),
    parse_class: None,
    flags: Flags { builtin: true, no_options: true, ..Flags::NONE },
    since: None,
};

#[derive(Default)]
pub struct Noqueue {
    /// Packets handed to the "driver", waiting only for the caller to take them.
    passing: VecDeque<Packet>,
}

impl Qdisc for Noqueue {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &NOQUEUE
    }
    fn enqueue(&mut self, _sch: &mut Sch, pkt: Packet, _now: Instant) -> Enqueued {
        self.passing.push_back(pkt);
        Enqueued::Success
    }
    fn dequeue(&mut self, _sch: &mut Sch, _now: Instant) -> Dequeued {
        self.passing.pop_front().map_or(Dequeued::Empty, Dequeued::Packet)
    }
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        self.passing.front()
    }
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.passing.clear();
    }
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}
}

pub struct Noop;

impl Noop {
    /// The noop placeholder as a tree node below `parent` (never hashed, never dumped).
    pub fn node(parent: u32) -> Node {
        Node::new(0, parent, Box::new(Noop))
    }
}

impl Qdisc for Noop {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &NOOP
    }
    fn enqueue(&mut self, _sch: &mut Sch, _pkt: Packet, _now: Instant) -> Enqueued {
        Enqueued::Congested
    }
    fn dequeue(&mut self, _sch: &mut Sch, _now: Instant) -> Dequeued {
        Dequeued::Empty
    }
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        None
    }
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {}
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}
}
