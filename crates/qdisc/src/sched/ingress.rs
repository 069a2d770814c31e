//! ingress and clsact — mirror net/sched/sch_ingress.c; parsed and printed as
//! tc/q_ingress.c and tc/q_clsact.c.
//!
//! Not queues: they are where classifiers hang outside the root tree (`tc qdisc add
//! dev X ingress` / `clsact`, handle `ffff:`, parent `ffff:fff1`). ingress has one
//! filter block, whatever class a filter names; clsact has two, `ingress`
//! (`ffff:fff2`) and `egress` (`ffff:fff3`). They hold no packets; what passes is
//! counted in the bstats (the kernel's mini-Qdisc does the same in
//! `sch_handle_ingress`). As a trait object each is a zero-delay pass-through.
//!
//! Shared blocks: `ingress_block N` (both) and `egress_block N` (clsact) bind a hook
//! to the netns's block N instead of a block of the qdisc's own
//! (`ingress_ingress_block_set` … then `tcf_block_get_ext` at init); the qdisc keeps
//! only the index, the netns keeps the block ([`crate::classify::SharedBlocks`]),
//! and it lives while some qdisc binds it.

use std::collections::VecDeque;

use crate::classify::Block;
use crate::packet::Packet;
use crate::qdisc::{Classful, Create, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Parse, Qdisc, Sch};
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// TC_H_INGRESS (= TC_H_CLSACT): the parent id of the ingress hook.
pub const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
/// The handle every ingress qdisc gets, `ffff:`.
pub const INGRESS_HANDLE: u32 = 0xFFFF_0000;

/// The minors of clsact's two blocks (TC_H_MIN_INGRESS, TC_H_MIN_EGRESS).
pub const TC_H_MIN_INGRESS: u32 = 0xFFF2;
pub const TC_H_MIN_EGRESS: u32 = 0xFFF3;

pub static INGRESS: Ops = Ops {
    id: "ingress",
    parse: Parse::Qopt(|a| parse("ingress", a).map(|()| None)),
    create: |c| create(false, c),
    parse_class: None,
    flags: Flags { ingress: true, shared_blocks: 1, ..Flags::NONE },
    since: None,
};

pub static CLSACT: Ops = Ops {
    id: "clsact",
    parse: Parse::Qopt(|a| parse("clsact", a).map(|()| None)),
    create: |c| create(true, c),
    parse_class: None,
    flags: Flags { ingress: true, shared_blocks: 2, ..Flags::NONE },
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
/// q_clsact.c `clsact_parse_opt` (nothing is). Neither sends TCA_OPTIONS.
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
    /// The shared blocks the hooks bind (ingress, egress), 0 for their own.
    indexes: [u32; 2],
}

impl Ingress {
    pub fn new(clsact: bool) -> Self {
        Ingress {
            passing: VecDeque::new(),
            clsact,
            block: Block::new(INGRESS_HANDLE),
            egress: Block::new(INGRESS_HANDLE),
            indexes: [0, 0],
        }
    }
}

impl Qdisc for Ingress {
    fn has_change(&self) -> bool {
        false
    }
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
        !self.clsact || minor == TC_H_MIN_INGRESS || minor == TC_H_MIN_EGRESS
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
        Some(if self.clsact && minor == TC_H_MIN_EGRESS { &self.egress } else { &self.block })
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        Some(if self.clsact && minor == TC_H_MIN_EGRESS { &mut self.egress } else { &mut self.block })
    }
    fn hook_block(&self, minor: u32) -> bool {
        !self.clsact || minor == TC_H_MIN_INGRESS || minor == TC_H_MIN_EGRESS
    }
    /// ingress's one hook answers for any class, as its `ingress_tcf_block` does.
    fn block_index(&self, minor: u32) -> u32 {
        match minor {
            TC_H_MIN_EGRESS if self.clsact => self.indexes[1],
            TC_H_MIN_INGRESS => self.indexes[0],
            _ if !self.clsact => self.indexes[0],
            _ => 0,
        }
    }
    fn block_indexes(&self) -> [u32; 2] {
        self.indexes
    }
    fn set_block_indexes(&mut self, indexes: [u32; 2]) {
        self.indexes = indexes;
    }
}
