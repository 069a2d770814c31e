//! hfsc — Hierarchical Fair Service Curve. Mirrors net/sched/sch_hfsc.c (kernel
//! side) and tc/q_hfsc.c (iproute2 side); §31 of docs/kernel-notes.md.
//!
//! Theory: a tree of classes below a root class (the qdisc's own handle, `X:`),
//! each with up to three two-piece linear service curves ([`curve`]): real-time
//! (`rt`, RSC), link-sharing (`ls`, FSC; `sc` sets both) and upper-limit (`ul`,
//! USC, only with `ls`). Leaves hold packets in a child qdisc (a pfifo until one
//! is grafted); inner classes keep theirs, purged, and use it again when their last
//! child goes. Time is psched ticks (64 ns).
//!
//! * Real-time: a backlogged leaf with RSC has an eligible time `e` and a deadline
//!   `d` (when its curve has served the bytes so far, resp. those plus the head
//!   packet). Dequeue first serves, among the leaves whose `e` has come, the one
//!   with the smallest `d` (`cl_cumul` counts these bytes: `rtwork`).
//! * Link-sharing: otherwise, from the root down, the active child with the
//!   smallest virtual time `vt` whose fit time `f` (from its own and its
//!   descendants' upper limits) has come; `vt` is where the class's FSC, restarted
//!   when it became active, has served its bytes (`cl_total`: `work`), kept from
//!   falling behind its siblings. Each time a class becomes active its `period`
//!   counts up.
//! * Neither: the watchdog is the earliest eligible time or the root's smallest fit
//!   time; dequeue answers `Throttled` then (and counts an overlimit).
//!
//! Classification: `skb->priority` naming a leaf; else the filters from the root,
//! continuing with an inner class's own filters (a filter may only point to a class
//! of lower level); else the `default` class if it is a leaf; else the packet is
//! dropped. Without classes the root class is a leaf, so `X:0` (default 0) carries
//! the traffic through its own pfifo.
//!
//! Data structures: keys are (time, insertion number), so that equal times keep
//! the insertion order the kernel's rb-tree inserts (equal keys go right) give;
//! being unique, they make any min-structure choose as the rb-tree's first entry
//! does. Each parent's cf tree is an indexed heap ([`heap`]), only read at its
//! minimum; its vt tree ([`vtree`]) a sorted run, which the round of siblings with
//! equal curves keeps in order at O(1) a packet, beside a heap for the others. The
//! vt tree's in-order scan for the first child that fits is its `first_where`, and
//! its last entry (the largest vt, read when a child becomes active) is kept as the
//! parent's `vt_last` while updates only raise keys, found again when its holder
//! leaves or falls back. The eligible tree is split in two indexed heaps so that the
//! minimum deadline is not the kernel's scan: classes whose `e` is still ahead of
//! `horizon` (the latest time seen) wait in `el` by `e`; those whose `e` has come are
//! in `dl` by (`d`, `e`, insertion) — the order in which the kernel's scan would
//! choose.
//!
//! Files: this one (classes and scheduler), `curve.rs` (service-curve arithmetic),
//! `heap.rs`, `vtree.rs`, `parse.rs` (tc's side), `tests.rs`.

use crate::class_hash::ClassHash;
use crate::classify::{Binds, Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{
    tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::sched::fifo::pfifo_dflt;
use crate::stats::Stats;
use crate::tc::{Errno, Out, TcError};
use crate::time::Instant;

mod curve;
mod heap;
mod parse;
#[cfg(test)]
mod tests;
mod vtree;

pub use curve::ServiceCurve;
use curve::{Isc, Rtsc, PSCHED_SHIFT};
use heap::{Heap, Places};
pub use parse::{parse, parse_class, HfscClassOpt, HfscOpt};
use vtree::{VtAt, VtTree};

/// `hfsc_init_qdisc` wants its `struct tc_hfsc_qopt`; tc always sends one.
pub static OPS: Ops = Ops {
    id: "hfsc",
    parse: Parse::Qopt(|a| parse(a).map(|o| Some(Opts::new(o)))),
    create: |c| Ok(Box::new(Hfsc::new(c.handle, c.required::<HfscOpt>()?.defcls, c.dev))),
    parse_class: Some(|a| Ok(Opts::new(parse_class(a)?))),
    flags: Flags::NONE,
    since: None,
};

/// A parent's two trees of active children: by virtual time and by fit time.
#[derive(Clone, Copy)]
enum Tree {
    Vt,
    Cf,
}

/// `enum hfsc_class_flags`.
const RSC: u8 = 1;
const FSC: u8 = 2;
const USC: u8 = 4;

/// `struct hfsc_class`, laid out in order (`repr(C)`) with what every packet reads
/// and writes first (times, work, tree keys, the three runtime curves of the
/// real-time and link-sharing criteria, the leaf), then what configuration and
/// dumps use: with thousands of classes, a packet touches as few cold lines as it can.
#[repr(C)]
struct Class {
    level: u32,
    nactive: u32,
    flags: u8,
    /// In the eligible tree (one of `el` and `dl`), inserted as number `el_seq`.
    in_el: bool,
    /// Out of the eligible tree but with an `el_node` that does not say so: the root
    /// class's is never cleared, and a reset drops the tree without clearing its
    /// members'. `cl_in_el_or_vttree` believes it, so the class is not started again.
    el_stale: bool,
    /// The parent's minor; None for the root class.
    parent: Option<u32>,
    el_seq: u64,
    /// `cl_total`: bytes served (`work`).
    total: u64,
    /// `cl_cumul`: bytes served by the real-time criterion (`rtwork`).
    cumul: u64,
    e: u64,
    d: u64,
    vt: u64,
    vtadj: u64,
    f: u64,
    myf: u64,
    cfmin: u64,
    cvtmin: u64,
    /// Membership of the parent's vt tree and cf tree: (key, insertion number).
    vt_key: Option<(u64, u64)>,
    cf_key: Option<(u64, u64)>,
    deadline: Rtsc,
    eligible: Rtsc,
    virtual_: Rtsc,
    /// `cl->qdisc`: every class has one; an inner class's is empty and unused.
    leaf: Node,
    bstats: Stats,
    /// Active children by (vt, insertion number), and by (f, …).
    vt_tree: VtTree,
    cf_tree: Heap<(u64, u64)>,
    /// The vt tree's last entry, when known (`None` inside: the tree is empty).
    vt_last: Option<Option<((u64, u64), u32)>>,
    ulimit: Rtsc,
    rsc: Isc,
    fsc: Isc,
    usc: Isc,
    cvtoff: u64,
    vtperiod: u32,
    parentperiod: u32,
    classid: u32,
    filter_cnt: u32,
    drops: u32,
    /// Child minors in the order added (`cl->children`).
    children: Vec<u32>,
    block: Block,
}

impl Class {
    fn new(classid: u32, parent: Option<u32>, leaf: Node, handle: u32) -> Class {
        Class {
            classid,
            parent,
            children: Vec::new(),
            level: 0,
            leaf,
            block: Block::new(handle),
            filter_cnt: 0,
            bstats: Stats::default(),
            drops: 0,
            flags: 0,
            rsc: Isc::default(),
            fsc: Isc::default(),
            usc: Isc::default(),
            deadline: Rtsc::default(),
            eligible: Rtsc::default(),
            virtual_: Rtsc::default(),
            ulimit: Rtsc::default(),
            total: 0,
            cumul: 0,
            d: 0,
            e: 0,
            vt: 0,
            f: 0,
            myf: 0,
            cfmin: 0,
            cvtmin: 0,
            vtadj: 0,
            cvtoff: 0,
            vtperiod: 0,
            parentperiod: 0,
            nactive: 0,
            in_el: false,
            el_seq: 0,
            el_stale: parent.is_none(),
            vt_key: None,
            cf_key: None,
            vt_tree: VtTree::new(),
            cf_tree: Heap::new(),
            vt_last: Some(None),
        }
    }

    /// `cl_in_el_or_vttree`.
    fn scheduled(&self) -> bool {
        (self.flags & FSC != 0 && self.nactive > 0) || (self.flags & RSC != 0 && (self.in_el || self.el_stale))
    }

    /// `hfsc_change_rsc`.
    fn change_rsc(&mut self, sc: &ServiceCurve, now: u64) {
        self.rsc = Isc::new(sc);
        self.deadline = Rtsc::new(&self.rsc, now, self.cumul);
        self.eligible = self.eligible_of_deadline();
        self.flags |= RSC;
    }
    /// `hfsc_change_fsc`.
    fn change_fsc(&mut self, sc: &ServiceCurve) {
        self.fsc = Isc::new(sc);
        self.virtual_ = Rtsc::new(&self.fsc, self.vt, self.total);
        self.flags |= FSC;
    }
    /// `hfsc_change_usc`.
    fn change_usc(&mut self, sc: &ServiceCurve, now: u64) {
        self.usc = Isc::new(sc);
        self.ulimit = Rtsc::new(&self.usc, now, self.total);
        self.flags |= USC;
    }
    /// The eligible curve: the deadline curve when concave, else its linear tail.
    fn eligible_of_deadline(&self) -> Rtsc {
        let mut e = self.deadline;
        if self.rsc.convex() {
            e.c.dx = 0;
            e.c.dy = 0;
        }
        e
    }
}

/// `struct hfsc_sched`.
pub struct Hfsc {
    handle: u32,
    defcls: u16,
    /// By minor; the root class is minor 0.
    classes: Vec<Option<Box<Class>>>,
    /// `q->clhash`: the order classes are walked and dumped in.
    hash: ClassHash,
    /// The eligible tree's classes whose `e` is after `horizon`, by (e, insertion).
    el: Heap<(u64, u64)>,
    /// Its classes whose `e` is at or before `horizon`, by (d, e, insertion).
    dl: Heap<(u64, u64, u64)>,
    /// The places in `el` and `dl`, and in the parents' vt and cf trees.
    el_at: Places,
    dl_at: Places,
    vt_at: VtAt,
    cf_at: Places,
    horizon: u64,
    /// Insertion counter for the trees' ties.
    seq: u64,
    /// When the kernel's watchdog would fire after the last dequeue that found
    /// nothing to send.
    watchdog: Option<Instant>,
}

/// Two distinct classes at once (a class and its parent).
fn pair(classes: &mut [Option<Box<Class>>], a: u32, b: u32) -> (&mut Class, &mut Class) {
    debug_assert_ne!(a, b);
    let (lo, hi, swap) = if a < b { (a, b, false) } else { (b, a, true) };
    let (l, h) = classes.split_at_mut(hi as usize);
    let x = l[lo as usize].as_deref_mut().expect("class exists");
    let y = h[0].as_deref_mut().expect("class exists");
    if swap {
        (y, x)
    } else {
        (x, y)
    }
}

/// `psched_get_time`.
fn ticks(now: Instant) -> u64 {
    now.0 >> PSCHED_SHIFT
}

impl Hfsc {
    /// Mirrors `hfsc_init_qdisc`: the root class, with its pfifo.
    pub fn new(handle: u32, defcls: u16, dev: &DevInfo) -> Hfsc {
        let mut q = Hfsc {
            handle,
            defcls,
            classes: Vec::new(),
            hash: ClassHash::new(),
            el: Heap::new(),
            dl: Heap::new(),
            el_at: Places::default(),
            dl_at: Places::default(),
            vt_at: VtAt::default(),
            cf_at: Places::default(),
            horizon: 0,
            seq: 0,
            watchdog: None,
        };
        q.classes.push(Some(Box::new(Class::new(handle, None, pfifo_dflt(handle, dev).invisible(), handle))));
        q.hash.insert(handle);
        q.hash.grow();
        q
    }

    fn get(&self, m: u32) -> Option<&Class> {
        self.classes.get(m as usize)?.as_deref()
    }
    fn cl(&self, m: u32) -> &Class {
        self.get(m).expect("class exists")
    }
    fn cl_mut(&mut self, m: u32) -> &mut Class {
        self.classes[m as usize].as_deref_mut().expect("class exists")
    }
    /// Two distinct classes at once (a class and its parent).
    fn pair(&mut self, a: u32, b: u32) -> (&mut Class, &mut Class) {
        pair(&mut self.classes, a, b)
    }
    /// `hfsc_find_class` by full classid.
    fn find_classid(&self, classid: u32) -> Option<u32> {
        let m = tc_h_min(classid);
        (tc_h_maj(classid) == self.handle && self.get(m).is_some()).then_some(m)
    }
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    // ---- the eligible tree ------------------------------------------------------

    /// `eltree_insert` (`eltree_update` when the class is in already).
    fn el_insert(&mut self, m: u32) {
        let seq = self.next_seq();
        let horizon = self.horizon;
        let c = self.cl_mut(m);
        c.in_el = true;
        c.el_stale = false;
        c.el_seq = seq;
        let (e, d) = (c.e, c.d);
        if e <= horizon {
            self.el.remove(&mut self.el_at, m);
            self.dl.set(&mut self.dl_at, m, (d, e, seq));
        } else {
            self.dl.remove(&mut self.dl_at, m);
            self.el.set(&mut self.el_at, m, (e, seq));
        }
    }
    /// `eltree_remove`.
    fn el_remove(&mut self, m: u32) {
        let c = self.cl_mut(m);
        c.el_stale = false;
        if c.in_el {
            c.in_el = false;
            self.el.remove(&mut self.el_at, m);
            self.dl.remove(&mut self.dl_at, m);
        }
    }
    /// A new deadline for a member of the eligible tree (its place there is by `e`).
    fn set_d(&mut self, m: u32, d: u64) {
        let c = self.classes[m as usize].as_deref_mut().expect("class exists");
        c.d = d;
        if self.dl_at.contains(m) {
            self.dl.set(&mut self.dl_at, m, (d, c.e, c.el_seq));
        }
    }
    /// `eltree_get_mindl`: of the classes eligible at `now`, the one with the smallest
    /// deadline, the first in the eligible tree's order among equals.
    fn get_mindl(&mut self, now: u64) -> Option<u32> {
        if now > self.horizon {
            self.horizon = now;
            while let Some(((e, seq), m)) = self.el.peek().filter(|k| k.0 .0 <= now) {
                self.el.remove(&mut self.el_at, m);
                let d = self.cl(m).d;
                self.dl.set(&mut self.dl_at, m, (d, e, seq));
            }
        }
        match self.dl.peek() {
            Some(((_, e, _), m)) if e <= now => Some(m),
            None => None,
            // Only a clock that went back leaves classes not yet eligible in `dl`.
            Some(_) => self.dl.iter().filter(|k| k.0 .1 <= now).min().map(|k| k.1),
        }
    }

    // ---- the per-parent vt and cf trees ----------------------------------------

    fn parent_of(&self, m: u32) -> u32 {
        self.cl(m).parent.expect("a class below the root")
    }
    /// `vttree_insert` / `cftree_insert`: into the parent's tree, by the class's
    /// virtual time or fit time as it is now; a class in the tree already moves
    /// (`vttree_remove` then `vttree_insert`, as `update_vf` and the refit do).
    fn tree_insert(&mut self, m: u32, t: Tree) {
        let seq = self.next_seq();
        let p = self.parent_of(m);
        let (c, pc) = pair(&mut self.classes, m, p);
        let k = match t {
            Tree::Vt => (c.vt, seq),
            Tree::Cf => (c.f, seq),
        };
        match t {
            Tree::Vt => {
                c.vt_key = Some(k);
                pc.vt_tree.set(&mut self.vt_at, m, k);
                // The last entry: still known if the entry moved is a newcomer at
                // or above it, or the last one itself moving up.
                pc.vt_last = match pc.vt_last {
                    Some(Some((lk, lm))) if lm == m && k < lk => None,
                    Some(Some((lk, lm))) if lm != m && k < lk => Some(Some((lk, lm))),
                    Some(_) => Some(Some((k, m))),
                    None => None,
                };
            }
            Tree::Cf => {
                c.cf_key = Some(k);
                pc.cf_tree.set(&mut self.cf_at, m, k);
            }
        }
    }
    /// `vttree_remove` / `cftree_remove`.
    fn tree_remove(&mut self, m: u32, t: Tree) {
        let p = self.parent_of(m);
        let (c, pc) = pair(&mut self.classes, m, p);
        match t {
            Tree::Vt => {
                if c.vt_key.take().is_some() {
                    pc.vt_tree.remove(&mut self.vt_at, m);
                    if matches!(pc.vt_last, Some(Some((_, lm))) if lm == m) {
                        pc.vt_last = pc.vt_tree.is_empty().then_some(None);
                    }
                }
            }
            Tree::Cf => {
                if c.cf_key.take().is_some() {
                    pc.cf_tree.remove(&mut self.cf_at, m);
                }
            }
        }
    }
    /// The largest vt in class `p`'s vt tree (`rb_last`).
    fn vt_last(&mut self, p: u32) -> Option<u64> {
        let c = self.cl_mut(p);
        let last = *c.vt_last.get_or_insert_with(|| c.vt_tree.last());
        last.map(|(k, _)| k.0)
    }
    /// `update_cfmin`.
    fn update_cfmin(&mut self, p: u32) {
        let c = self.cl_mut(p);
        c.cfmin = c.cf_tree.peek().map_or(0, |k| k.0 .0);
    }

    /// `vttree_get_minvt`: the leaf reached from the root by always taking the
    /// active child of smallest vt that fits (f ≤ now), raising each parent's cvtmin.
    fn get_minvt(&mut self, now: u64) -> Option<u32> {
        let mut m = 0u32;
        if self.cl(0).cfmin > now {
            return None;
        }
        while self.cl(m).level > 0 {
            let c = self.cl(m);
            let next = c.vt_tree.first_where(&self.vt_at, |k| self.cl(k).f <= now)?.1;
            let vt = self.cl(next).vt;
            let pc = self.cl_mut(m);
            if pc.cvtmin < vt {
                pc.cvtmin = vt;
            }
            m = next;
        }
        Some(m)
    }

    // ---- curves in motion --------------------------------------------------------

    /// `init_ed`: a class becomes backlogged for the real-time criterion.
    fn init_ed(&mut self, m: u32, next_len: u32, now: u64) {
        let c = self.cl_mut(m);
        let rsc = c.rsc;
        c.deadline.min(&rsc, now, c.cumul);
        c.eligible = c.eligible_of_deadline();
        c.e = c.eligible.y2x(c.cumul);
        c.d = c.deadline.y2x(c.cumul.wrapping_add(next_len as u64));
        self.el_insert(m);
    }
    /// `update_ed`.
    fn update_ed(&mut self, m: u32, next_len: u32) {
        self.el_remove(m);
        let c = self.cl_mut(m);
        c.e = c.eligible.y2x(c.cumul);
        c.d = c.deadline.y2x(c.cumul.wrapping_add(next_len as u64));
        self.el_insert(m);
    }
    /// `update_d`.
    fn update_d(&mut self, m: u32, next_len: u32) {
        let c = self.cl(m);
        let d = c.deadline.y2x(c.cumul.wrapping_add(next_len as u64));
        self.set_d(m, d);
    }

    /// `init_vf`: class `m` and, as far as they become active with it, its ancestors
    /// join their parents' vt and cf trees.
    fn init_vf(&mut self, m: u32, now: u64) {
        let mut go_active = true;
        let mut cl = m;
        while let Some(p) = self.cl(cl).parent {
            go_active = go_active && {
                let c = self.cl_mut(cl);
                c.nactive += 1;
                c.nactive == 1
            };
            if go_active {
                let max_vt = self.vt_last(p);
                let (c, pc) = self.pair(cl, p);
                match max_vt {
                    Some(max) => {
                        // Between the smallest and largest vt of the siblings; within
                        // the parent's period, never backwards.
                        let mut vt = max;
                        if pc.cvtmin != 0 {
                            vt = pc.cvtmin.wrapping_add(vt) / 2;
                        }
                        if pc.vtperiod != c.parentperiod || vt > c.vt {
                            c.vt = vt;
                        }
                    }
                    None => {
                        // The first active child of a new parent period.
                        c.vt = pc.cvtoff;
                        pc.cvtmin = 0;
                    }
                }
                let fsc = c.fsc;
                c.virtual_.min(&fsc, c.vt, c.total);
                c.vtadj = 0;
                c.vtperiod = c.vtperiod.wrapping_add(1);
                c.parentperiod = pc.vtperiod;
                if pc.nactive == 0 {
                    c.parentperiod = c.parentperiod.wrapping_add(1);
                }
                c.f = 0;
                self.tree_insert(cl, Tree::Vt);
                self.tree_insert(cl, Tree::Cf);
                let c = self.cl_mut(cl);
                if c.flags & USC != 0 {
                    let usc = c.usc;
                    c.ulimit.min(&usc, now, c.total);
                    c.myf = c.ulimit.y2x(c.total);
                }
            }
            self.refit(cl);
            self.update_cfmin(p);
            cl = p;
        }
    }

    /// The fit time from the class's own (`myf`) and its children's (`cfmin`); a
    /// change moves it in the parent's cf tree. Returns whether it changed.
    fn refit(&mut self, m: u32) -> bool {
        let c = self.cl(m);
        let f = c.myf.max(c.cfmin);
        if f == c.f {
            return false;
        }
        self.cl_mut(m).f = f;
        self.tree_insert(m, Tree::Cf);
        true
    }

    /// `update_vf`: `len` bytes were served from class `m`: work and virtual times
    /// advance up the tree; classes left without backlog go passive.
    fn update_vf(&mut self, m: u32, len: u32) {
        let c = self.cl(m);
        let mut go_passive = c.leaf.stats().qlen == 0 && c.flags & FSC != 0 && c.nactive > 0;
        let mut cl = m;
        while let Some(p) = self.cl(cl).parent {
            let c = self.cl_mut(cl);
            c.total = c.total.wrapping_add(len as u64);
            if c.flags & FSC == 0 || c.nactive == 0 {
                cl = p;
                continue;
            }
            go_passive = go_passive && {
                c.nactive -= 1;
                c.nactive == 0
            };
            let (c, pc) = self.pair(cl, p);
            c.vt = c.virtual_.y2x(c.total).wrapping_add(c.vtadj);
            // Behind cvtmin: the class was skipped as unfit; catch it up.
            if c.vt < pc.cvtmin {
                c.vtadj = c.vtadj.wrapping_add(pc.cvtmin - c.vt);
                c.vt = pc.cvtmin;
            }
            if go_passive {
                if c.vt > pc.cvtoff {
                    pc.cvtoff = c.vt;
                }
                self.tree_remove(cl, Tree::Vt);
                self.tree_remove(cl, Tree::Cf);
                self.update_cfmin(p);
                cl = p;
                continue;
            }
            self.tree_insert(cl, Tree::Vt);
            let c = self.cl_mut(cl);
            if c.flags & USC != 0 {
                c.myf = c.ulimit.y2x(c.total);
            }
            if self.refit(cl) {
                self.update_cfmin(p);
            }
            cl = p;
        }
    }

    /// `hfsc_adjust_levels` after a child of class `m` was added: levels only grow,
    /// so each ancestor needs only the one child it has on this path.
    fn raise_levels(&mut self, m: u32) {
        let mut level = 1;
        let mut cl = Some(m);
        while let Some(c) = cl {
            let cc = self.cl_mut(c);
            if cc.level >= level {
                break;
            }
            cc.level = level;
            level += 1;
            cl = cc.parent;
        }
    }

    /// `hfsc_adjust_levels`: from class `m` up, each level one above its highest child.
    fn adjust_levels(&mut self, m: u32) {
        let mut cl = Some(m);
        while let Some(c) = cl {
            let level = self.cl(c).children.iter().map(|&k| self.cl(k).level + 1).max().unwrap_or(0);
            self.cl_mut(c).level = level;
            cl = self.cl(c).parent;
        }
    }

    /// `hfsc_qlen_notify`: class `m`'s queue emptied other than by our dequeue.
    fn qlen_notify(&mut self, m: u32) {
        if self.cl(m).nactive > 0 {
            self.update_vf(m, 0);
        }
        if self.cl(m).flags & RSC != 0 {
            self.el_remove(m);
        }
    }

    /// After a call into class `m`'s qdisc: its backlog reductions reach us (and go
    /// on up), and an emptied queue notifies (`qdisc_tree_reduce_backlog`).
    fn collect(&mut self, sch: &mut Sch, m: u32) {
        let leaf = &mut self.cl_mut(m).leaf;
        let r = leaf.take_reduce();
        if r.is_zero() {
            return;
        }
        let empty = leaf.stats().qlen == 0;
        sch.child_reduced(r);
        if empty {
            self.qlen_notify(m);
        }
    }

    /// `qdisc_peek_len`: the head packet's length, 0 when the qdisc shows none.
    fn peek_len(&mut self, sch: &mut Sch, m: u32, now: Instant) -> u32 {
        let len = self.cl_mut(m).leaf.peek(now).map_or(0, |p| p.len);
        self.collect(sch, m);
        len
    }

    /// `qdisc_purge_queue` of class `m`'s qdisc, with the notification it brings.
    fn purge(&mut self, sch: &mut Sch, m: u32, now: Instant) {
        let leaf = &mut self.cl_mut(m).leaf;
        let had = leaf.stats().qlen > 0 || leaf.stats().backlog > 0;
        sch.child_purged(leaf.stats());
        leaf.reset(now);
        let _ = leaf.take_reduce();
        if had {
            self.qlen_notify(m);
        }
    }

    /// Mirrors `hfsc_classify`. `Err` is the answer for a packet without a class.
    fn classify(&self, pkt: &mut Packet, now: Instant) -> Result<u32, Enqueued> {
        if tc_h_maj(pkt.priority ^ self.handle) == 0 {
            if let Some(m) = self.find_classid(pkt.priority).filter(|&m| self.cl(m).level == 0) {
                return Ok(m);
            }
        }
        let (mut head, mut hops) = (0u32, 0usize);
        loop {
            let block = &self.cl(head).block;
            let Some(v) = block.classify(pkt, now) else { break };
            let r = match v {
                Verdict::Class(r) => r,
                Verdict::Shot => return Err(Enqueued::Dropped),
                Verdict::Stolen => return Err(Enqueued::Stolen),
            };
            // A bound result's class is followed as it is; an unbound result may
            // only point downwards.
            let m = match r.class {
                Some(m) => m,
                None => {
                    let Some(m) = self.find_classid(r.classid) else { break };
                    if self.cl(m).level >= self.cl(head).level {
                        break;
                    }
                    m
                }
            };
            if self.cl(m).level == 0 {
                return Ok(m);
            }
            // Bound results made when the levels were others can lead round in a
            // circle, where the kernel's loop would spin; a walk longer than the
            // classes are many is one, and classification fails.
            hops += 1;
            if hops > self.hash.elems {
                break;
            }
            head = m;
        }
        match self.find_classid(self.handle | self.defcls as u32) {
            Some(m) if self.cl(m).level == 0 => Ok(m),
            _ => Err(Enqueued::Dropped),
        }
    }

    /// `hfsc_schedule_watchdog`: the earliest eligible time, or the root's smallest
    /// fit time if that comes first.
    fn next_wakeup(&self) -> Option<Instant> {
        // `dl` is empty here unless the clock went back.
        let waiting = self.el.peek().map(|k| k.0 .0);
        let mut next = self.dl.iter().map(|k| k.0 .1).chain(waiting).min().unwrap_or(0);
        let cfmin = self.cl(0).cfmin;
        if cfmin != 0 && (next == 0 || next > cfmin) {
            next = cfmin;
        }
        (next != 0).then_some(Instant(next << PSCHED_SHIFT))
    }

    /// Mirrors `hfsc_change_class`.
    #[allow(clippy::too_many_arguments)]
    fn change_class_impl(
        &mut self,
        sch: &mut Sch,
        classid: u32,
        parentid: u32,
        exists: bool,
        o: &HfscClassOpt,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        // A curve of two zero slopes counts as absent.
        let given = |sc: Option<ServiceCurve>| sc.filter(|s| s.m1 != 0 || s.m2 != 0);
        let (rsc, fsc, usc) = (given(o.rsc), given(o.fsc), given(o.usc));
        let cur = ticks(now);
        let m = tc_h_min(classid);
        if exists {
            if parentid != 0 {
                match self.cl(m).parent {
                    Some(p) if self.cl(p).classid != parentid => return Err(TcError::invalid()),
                    None if parentid != TC_H_ROOT => return Err(TcError::invalid()),
                    _ => {}
                }
            }
            let c = self.cl_mut(m);
            let old = c.flags;
            if let Some(s) = rsc {
                c.change_rsc(&s, cur);
            }
            if let Some(s) = fsc {
                c.change_fsc(&s);
            }
            if let Some(s) = usc {
                c.change_usc(&s, cur);
            }
            let mut len = 0;
            if self.cl(m).leaf.stats().qlen != 0 {
                len = self.peek_len(sch, m, now);
            }
            // The peek may have emptied a queue (codel, netem).
            if self.cl(m).leaf.stats().qlen != 0 {
                let flags = self.cl(m).flags;
                if flags & RSC != 0 {
                    if old & RSC != 0 {
                        self.update_ed(m, len);
                    } else {
                        self.init_ed(m, len, cur);
                    }
                }
                if flags & FSC != 0 {
                    if old & FSC != 0 {
                        self.update_vf(m, 0);
                    } else {
                        self.init_vf(m, cur);
                    }
                }
            }
            return Ok(None);
        }
        if parentid == TC_H_ROOT {
            return Err(TcError::errno(Errno::EEXIST));
        }
        let parent =
            if parentid == 0 { 0 } else { self.find_classid(parentid).ok_or_else(|| TcError::errno(Errno::ENOENT))? };
        if classid == 0 || tc_h_maj(classid ^ self.handle) != 0 {
            return Err(TcError::invalid());
        }
        if self.get(m).is_some() {
            return Err(TcError::errno(Errno::EEXIST));
        }
        if rsc.is_none() && fsc.is_none() {
            return Err(TcError::invalid());
        }
        let mut c = Class::new(classid, Some(parent), pfifo_dflt(classid, dev).invisible(), self.handle);
        if let Some(s) = rsc {
            c.change_rsc(&s, 0);
        }
        if let Some(s) = fsc {
            c.change_fsc(&s);
        }
        if let Some(s) = usc {
            c.change_usc(&s, 0);
        }
        if self.classes.len() <= m as usize {
            self.classes.resize_with(m as usize + 1, || None);
        }
        self.classes[m as usize] = Some(Box::new(c));
        let mut warning = None;
        let pc = self.cl_mut(parent);
        if pc.flags & FSC == 0 && parent != 0 {
            // hfsc_upgrade_rt: an inner class needs a link-sharing curve.
            warning = Some("Forced curve change on parent 'rt' to 'sc'".to_string());
            pc.fsc = pc.rsc;
            pc.virtual_ = Rtsc::new(&pc.fsc, pc.vt, pc.total);
            pc.flags |= FSC;
        }
        self.hash.insert(classid);
        self.cl_mut(parent).children.push(m);
        if self.cl(parent).level == 0 {
            self.purge(sch, parent, now);
        }
        self.raise_levels(parent);
        self.hash.grow();
        Ok(warning)
    }

    /// Mirrors `hfsc_delete_class`.
    fn delete_impl(&mut self, sch: &mut Sch, m: u32, now: Instant) -> Result<(), TcError> {
        let c = self.get(m).ok_or_else(|| TcError::errno(Errno::ENOENT))?;
        if c.level > 0 || c.filter_cnt > 0 || m == 0 {
            return Err(TcError::with_errno("HFSC class in use", Errno::EBUSY));
        }
        let p = c.parent.expect("not the root");
        self.cl_mut(p).children.retain(|&k| k != m);
        self.adjust_levels(p);
        self.purge(sch, m, now);
        // Whatever the purge did not take out of the schedule (a queue already
        // empty while still listed) leaves it with the class.
        if self.cl(m).scheduled() {
            self.qlen_notify(m);
        }
        self.hash.remove(self.cl(m).classid);
        let gone = self.classes[m as usize].take().expect("class exists");
        // hfsc_destroy_class: the class's filters go with it.
        let mut binds = Binds::default();
        gone.block.put(&mut self.cl_mut(0).block, &mut binds);
        for id in binds.split().0 {
            self.unbind(id);
        }
        Ok(())
    }

    fn unbind(&mut self, classid: u32) {
        if let Some(m) = self.find_classid(classid) {
            let c = self.cl_mut(m);
            c.filter_cnt = c.filter_cnt.saturating_sub(1);
        }
    }
}

impl Qdisc for Hfsc {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `hfsc_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now: Instant) -> Enqueued {
        let m = match self.classify(&mut pkt, now) {
            Ok(m) => m,
            Err(e) => return sch.unclassified(e),
        };
        let len = pkt.len;
        let first = self.cl(m).leaf.stats().qlen == 0;
        let r = self.cl_mut(m).leaf.enqueue(pkt, now);
        self.collect(sch, m);
        if r != Enqueued::Success {
            if r.counts_as_drop() {
                let c = self.cl_mut(m);
                c.drops = c.drops.wrapping_add(1);
                sch.stats.dropped();
            }
            return r;
        }
        sch.stats.queued(len);
        if first && !self.cl(m).scheduled() {
            let flags = self.cl(m).flags;
            let cur = ticks(now);
            if flags & RSC != 0 {
                self.init_ed(m, len, cur);
            }
            if flags & FSC != 0 {
                self.init_vf(m, cur);
            }
            // Isolate the head, so a head drop before the first dequeue cannot
            // invalidate the deadline.
            if flags & RSC != 0 {
                let _ = self.cl_mut(m).leaf.peek(now);
                self.collect(sch, m);
            }
        }
        Enqueued::Success
    }

    /// Mirrors `hfsc_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.watchdog = None;
        if sch.stats.qlen == 0 {
            return Dequeued::Empty;
        }
        let cur = ticks(now);
        let (m, realtime) = match self.get_mindl(cur) {
            Some(m) => (m, true),
            None => match self.get_minvt(cur) {
                Some(m) => (m, false),
                None => {
                    sch.stats.overlimit();
                    self.watchdog = self.next_wakeup();
                    return self.watchdog.map_or(Dequeued::Empty, |until| Dequeued::Throttled { until });
                }
            },
        };
        let d = self.cl_mut(m).leaf.dequeue(now);
        self.collect(sch, m);
        // The packet stays where the child's dequeue put it and moves once, on the
        // way out; read right after the child stored it, a copy would wait on store
        // forwarding (about 3 % of a packet's time at 10,000 leaves).
        let Dequeued::Packet(p) = &d else {
            // qdisc_warn_nonwc: a throttled child; its own watchdog wakes the device.
            return match d {
                Dequeued::Throttled { until } => Dequeued::Throttled { until },
                _ => Dequeued::Empty,
            };
        };
        self.update_vf(m, p.len);
        if realtime {
            let c = self.cl_mut(m);
            c.cumul = c.cumul.wrapping_add(p.len as u64);
        }
        if self.cl(m).flags & RSC != 0 {
            if self.cl(m).leaf.stats().qlen != 0 {
                let next = self.peek_len(sch, m, now);
                if self.cl(m).leaf.stats().qlen != 0 {
                    if realtime {
                        self.update_ed(m, next);
                    } else {
                        self.update_d(m, next);
                    }
                }
            } else {
                self.el_remove(m);
            }
        }
        self.cl_mut(m).bstats.sent(p);
        sch.stats.sent(p);
        sch.stats.unqueued(p.len);
        d
    }

    // peek: `qdisc_peek_dequeued` (the default).

    /// Mirrors `hfsc_reset_qdisc` (`hfsc_reset_class` for each class): work, times
    /// and activity restart from zero; curves are re-anchored at the origin.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        for c in self.classes.iter_mut().flatten() {
            c.total = 0;
            c.cumul = 0;
            c.d = 0;
            c.e = 0;
            c.vt = 0;
            c.vtadj = 0;
            c.cvtmin = 0;
            c.cvtoff = 0;
            c.vtperiod = 0;
            c.parentperiod = 0;
            c.f = 0;
            c.myf = 0;
            c.cfmin = 0;
            c.nactive = 0;
            c.el_stale |= c.in_el;
            c.in_el = false;
            c.vt_key = None;
            c.cf_key = None;
            c.vt_tree.clear(&mut self.vt_at);
            c.cf_tree.clear(&mut self.cf_at);
            c.vt_last = Some(None);
            c.leaf.reset(now);
            let _ = c.leaf.take_reduce();
            if c.flags & RSC != 0 {
                c.deadline = Rtsc::new(&c.rsc, 0, 0);
            }
            if c.flags & FSC != 0 {
                c.virtual_ = Rtsc::new(&c.fsc, 0, 0);
            }
            if c.flags & USC != 0 {
                c.ulimit = Rtsc::new(&c.usc, 0, 0);
            }
        }
        self.el.clear(&mut self.el_at);
        self.dl.clear(&mut self.dl_at);
        self.watchdog = None;
    }

    /// Mirrors `hfsc_change_qdisc`: the default class.
    fn change(&mut self, _sch: &mut Sch, opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        self.defcls = opts.of::<HfscOpt>()?.defcls;
        Ok(())
    }

    /// q_hfsc.c `hfsc_print_opt` (plain fprintf, so also inside `-j` output).
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        if self.defcls != 0 {
            out.fprintf(format_args!("default {:x} ", self.defcls));
        }
    }

    crate::classful!();

    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

impl Classful for Hfsc {
    /// `hfsc_change_class` takes TCA_RATE.
    fn class_takes_estimator(&self) -> bool {
        true
    }
    /// `hfsc_walk`: the class hash, bucket by bucket, the root class (minor 0) too.
    fn class_minors(&self) -> Vec<u32> {
        self.hash.walk().map(tc_h_min).collect()
    }
    /// `hfsc_search_class`.
    fn find(&self, minor: u32) -> bool {
        self.get(minor).is_some()
    }
    /// Every class's qdisc, an inner class's included: the kernel keeps it in the
    /// device's qdisc hash, so dumps list it. (`hfsc_class_leaf` answers only for
    /// leaves; the one place that differs, grafting, is refused below.)
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.get(minor).map(|c| &c.leaf)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.classes.get_mut(minor as usize)?.as_deref_mut().map(|c| &mut c.leaf)
    }

    /// `hfsc_dump_class` sets `tcm_info` for leaves only.
    fn dumps_leaf(&self, minor: u32) -> bool {
        self.get(minor).is_some_and(|c| c.level == 0)
    }

    /// Mirrors `hfsc_graft_class`: only leaves take a qdisc; None means a fresh
    /// default pfifo (not hashed: dumps skip it). The old qdisc is returned for the
    /// caller to purge, which takes the class out of the schedule.
    fn graft(&mut self, _sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        let c = self.get(minor).ok_or_else(|| TcError::kernel("Specified class not found"))?;
        if c.level > 0 {
            return Err(TcError::invalid());
        }
        let new = new.unwrap_or_else(|| pfifo_dflt(c.classid, dev).invisible().unhashed());
        let old = std::mem::replace(&mut self.cl_mut(minor).leaf, new);
        if old.stats().qlen > 0 || self.cl(minor).scheduled() {
            self.qlen_notify(minor);
        }
        Ok(Some(old))
    }

    fn change_class(
        &mut self,
        sch: &mut Sch,
        classid: u32,
        parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        dev: &DevInfo,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        let o = opts.ok_or_else(TcError::invalid)?.of()?;
        self.change_class_impl(sch, classid, parent, exists, o, dev, now)
    }

    fn delete_class(&mut self, sch: &mut Sch, minor: u32, now: Instant) -> Result<(), TcError> {
        self.delete_impl(sch, minor, now)
    }

    /// Mirrors `hfsc_dump_class_stats`: the class's bstats and drops, its qdisc's
    /// qlen and backlog.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let Some(c) = self.get(minor) else { return Some(Stats::default()) };
        let q = c.leaf.stats();
        Some(Stats {
            bytes: c.bstats.bytes,
            packets: c.bstats.packets,
            qlen: q.qlen,
            backlog: q.backlog,
            drops: c.drops,
            requeues: 0,
            overlimits: 0,
        })
    }

    /// q_hfsc.c `hfsc_print_class_opt` over `hfsc_dump_curves`: `sc` when the
    /// real-time and link-sharing curves dump alike.
    fn dump_class(&self, minor: u32, out: &mut Out) {
        let Some(c) = self.get(minor) else { return };
        let rsc = (c.flags & RSC != 0).then(|| c.rsc.dump());
        let fsc = (c.flags & FSC != 0).then(|| c.fsc.dump());
        match (rsc, fsc) {
            (Some(r), Some(f)) if r == f => parse::print_sc(out, "sc", &r),
            _ => {
                if let Some(r) = rsc {
                    parse::print_sc(out, "rt", &r);
                }
                if let Some(f) = fsc {
                    parse::print_sc(out, "ls", &f);
                }
            }
        }
        if c.flags & USC != 0 {
            parse::print_sc(out, "ul", &c.usc.dump());
        }
    }

    /// `struct tc_hfsc_stats` as q_hfsc.c `hfsc_print_xstats` prints it (plain
    /// fprintf, so also inside `-j` output).
    fn dump_class_xstats(&self, minor: u32, out: &mut Out) {
        let Some(c) = self.get(minor) else { return };
        out.fprintf(format_args!(" period {} ", c.vtperiod));
        if c.total != 0 {
            out.fprintf(format_args!("work {} bytes ", c.total));
        }
        if c.cumul != 0 {
            out.fprintf(format_args!("rtwork {} bytes ", c.cumul));
        }
        out.fprintf(format_args!("level {} \n", c.level));
    }

    /// `hfsc_tcf_block`: the root class's block for minor 0, else the class's.
    fn block(&self, minor: u32) -> Option<&Block> {
        self.get(minor).map(|c| &c.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        self.classes.get_mut(minor as usize)?.as_deref_mut().map(|c| &mut c.block)
    }
    /// `hfsc_bind_tcf`: the class named, if it is below the class whose block holds
    /// the filter. The qdisc's own block is the root class's here (the kernel's
    /// `base` is then NULL, which skips the check): every class is below the root
    /// but the root itself, whose result stays unbound — bound, hfsc_classify would
    /// run the root's filters round forever.
    fn bind_tcf(&self, base: u32, classid: u32) -> Option<u32> {
        let m = self.find_classid(classid)?;
        (self.get(base)?.level > self.cl(m).level).then_some(m)
    }
    /// `hfsc_bind_tcf`'s `qdisc_class_get`.
    fn bind_filter(&mut self, classid: u32) {
        if let Some(m) = self.find_classid(classid) {
            self.cl_mut(m).filter_cnt += 1;
        }
    }
    /// `hfsc_unbind_tcf`.
    fn unbind_filter(&mut self, classid: u32) {
        self.unbind(classid);
    }
    /// `tcm_parent` of `hfsc_dump_class`: the parent class, or TC_H_ROOT for the root.
    fn class_parent(&self, minor: u32) -> Option<u32> {
        let c = self.get(minor)?;
        Some(c.parent.map_or(TC_H_ROOT, |p| self.cl(p).classid))
    }
}
