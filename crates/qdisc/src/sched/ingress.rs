//! ingress — mirrors net/sched/sch_ingress.c; parsed and printed as tc/q_ingress.c.
//!
//! Not a queue: the ingress qdisc is where receive-side classifiers hang
//! (`tc qdisc add dev X ingress`, handle `ffff:`, parent `ffff:fff1`). It holds no
//! packets; what passes is counted in its bstats (the kernel's mini-Qdisc does the
//! same in `sch_handle_ingress`). As a trait object it is a zero-delay pass-through.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Qdisc};
use crate::sched::Opts;
use crate::stats::Stats;
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// TC_H_INGRESS (= TC_H_CLSACT): the parent id of the ingress hook.
pub const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
/// The handle every ingress qdisc gets, `ffff:`.
pub const INGRESS_HANDLE: u32 = 0xFFFF_0000;

/// q_ingress.c `ingress_parse_opt`: only a stray `handle X` is tolerated.
pub fn parse(args: &mut Args) -> Result<(), TcError> {
    while let Some(a) = args.next() {
        if a == "handle" {
            args.value()?;
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\nUsage: ... ingress \n")));
        }
    }
    Ok(())
}

#[derive(Default)]
pub struct Ingress {
    passing: VecDeque<Packet>,
    stats: Stats,
}

impl Qdisc for Ingress {
    fn kind(&self) -> &'static str {
        "ingress"
    }
    fn enqueue(&mut self, pkt: Packet, _now: Instant) -> Enqueued {
        self.stats.sent(&pkt);
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
        Ok(())
    }
    /// `ingress_print_opt` prints a row of dashes (the dump carries an empty nest).
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.fp(format_args!("---------------- "));
    }
}
