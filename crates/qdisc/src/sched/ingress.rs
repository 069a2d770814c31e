//! ingress and clsact — mirror net/sched/sch_ingress.c; parsed and printed as
//! tc/q_ingress.c and tc/q_clsact.c.
//!
//! Not queues: they are where classifiers hang outside the root tree (`tc qdisc add
//! dev X ingress` / `clsact`, handle `ffff:`, parent `ffff:fff1`). ingress has one
//! filter block, whatever class a filter names; clsact has two, `ingress`
//! (`ffff:fff2`) and `egress` (`ffff:fff3`). They hold no packets; what passes is
//! counted in the bstats (the kernel's mini-Qdisc does the same in
//! `sch_handle_ingress`). As a trait object each is a zero-delay pass-through.

use std::collections::VecDeque;

use crate::classify::Block;
use crate::packet::Packet;
use crate::qdisc::{Classful, Create, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch};
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// TC_H_INGRESS (= TC_H_CLSACT): the parent id of the ingress hook.
pub const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
/// The handle every ingress qdisc gets, `ffff:`.
pub const INGRESS_HANDLE: u32 = 0xFFFF_0000;

/// The minors of clsact's two blocks (TC_H_MIN_INGRESS, TC_H_MIN_EGRESS).
const MIN_INGRESS: u32 = 0xFFF2;
const MIN_EGRESS: u32 = 0xFFF3;

pub static INGRESS: Ops = Ops {
    id: "ingress",
    parse: Parse::Qopt(|a| parse("ingress", a).map(|()| Some(Opts::new(())))),
    create: |c| create(false, c),
    parse_class: None,
    flags: Flags { ingress: true, ..Flags::NONE },
    since: None,
};

pub static CLSACT: Ops = Ops {
    id: "clsact",
    parse: Parse::Qopt(|a| parse("clsact", a).map(|()| Some(Opts::new(())))),
    create: |c| create(true, c),
    parse_class: None,
    flags: Flags { ingress: true, ..Flags::NONE },
    since: None,
};

/// `ingress_init` / `clsact_init`: only at the ingress hook.
fn create(clsact: bool, c: &Create) -> Result<Box<dyn Qdisc>, TcError> {
    if c.parent != TC_H_INGRESS {
        let kind = if clsact { "clsact" } else { "ingress" };
        return Err(TcError::kernel(&format!("Can only be attached as {kind} qdisc")));
    }
    Ok(Box::new(Ingress::new(clsact)))
}

/// q_ingress.c `ingress_parse_opt` (only a stray `handle X` is tolerated) and
/// q_clsact.c `clsact_parse_opt` (nothing is).
pub fn parse(kind: &str, args: &mut Args) -> Result<(), TcError> {
    while let Some(a) = args.next() {
        if a == "handle" && kind == "ingress" {
            args.value()?;
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\nUsage: ... {kind}\n")));
        }
    }
    Ok(())
}

pub struct Ingress {
    passing: VecDeque<Packet>,
    clsact: bool,
    /// ingress: the block; clsact: the ingress block.
    block: Block,
    /// clsact: the egress block.
    egress: Block,
}

impl Ingress {
    pub fn new(clsact: bool) -> Self {
        Ingress {
            passing: VecDeque::new(),
            clsact,
            block: Block::new(INGRESS_HANDLE),
            egress: Block::new(INGRESS_HANDLE),
        }
    }
}

impl Qdisc for Ingress {
    fn ops(&self) -> &'static Ops {
        if self.clsact {
            &CLSACT
        } else {
            &INGRESS
        }
    }
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, _now: Instant) -> Enqueued {
        sch.stats.sent(&pkt);
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
    fn change(&mut self, _sch: &mut Sch, _opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        Ok(())
    }
    /// `ingress_print_opt` prints a row of dashes (the dump carries an empty nest);
    /// clsact prints nothing.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        if !self.clsact {
            out.fp(format_args!("---------------- "));
        }
    }
    crate::classful!();
}

/// `ingress_class_ops` / `clsact_class_ops`: no classes, only filter blocks.
impl Classful for Ingress {
    fn class_minors(&self) -> Vec<u32> {
        Vec::new()
    }
    /// `ingress_find` answers for any class; `clsact_find` only for its two hooks.
    fn find(&self, minor: u32) -> bool {
        !self.clsact || minor == MIN_INGRESS || minor == MIN_EGRESS
    }
    fn graft(
        &mut self,
        _sch: &mut Sch,
        _minor: u32,
        _new: Option<Node>,
        _dev: &DevInfo,
    ) -> Result<Option<Node>, TcError> {
        Err(TcError::kernel("Cannot add children to ingress/clsact qdisc"))
    }
    /// `ingress_tcf_block` gives its block for any class. `clsact_tcf_block` gives a
    /// hook's block and NULL (EINVAL) otherwise; minor 0 here stands for "has the op"
    /// and holds the qdisc's shared u32 state, so filter.rs asks [`Classful::hook_block`].
    fn block(&self, minor: u32) -> Option<&Block> {
        Some(if self.clsact && minor == MIN_EGRESS { &self.egress } else { &self.block })
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        Some(if self.clsact && minor == MIN_EGRESS { &mut self.egress } else { &mut self.block })
    }
    fn hook_block(&self, minor: u32) -> bool {
        !self.clsact || minor == MIN_INGRESS || minor == MIN_EGRESS
    }
}
