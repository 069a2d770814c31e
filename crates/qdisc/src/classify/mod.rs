//! Classifiers: the filter blocks of classful qdiscs and the filter kinds
//! (net/sched/cls_api.c, cls_u32.c, cls_fw.c, cls_flower.c, cls_matchall.c,
//! cls_basic.c with its ematches, cls_flow.c, cls_cgroup.c, cls_route.c).
//!
//! # Model
//!
//! A classful qdisc owns one [`Block`] for itself and (if the kind allows filters on
//! classes, like htb) one per class — the kernel's `tcf_block`. A block holds
//! [`Chain`]s (`struct tcf_chain`) in creation order; each chain holds *protos*
//! (`struct tcf_proto`), kept sorted by `pref` (the kernel's `prio`), each with an
//! ethertype (`protocol`) and one classifier kind holding that kind's filters (u32
//! knodes, fw handles, flower handles, one matchall, basic and flow filters, one
//! cgroup filter). A chain lives while it has protos, was made by `tc chain add`,
//! or an action's `goto chain` names it ([`Block::settle`]). Classification starts
//! in chain 0.
//!
//! # Kinds
//!
//! A kind is a [`Classifier`] (`struct tcf_proto_ops`) registered in
//! [`CLASSIFIERS`] with its name, tc's option parser and its constructor; `tc
//! filter` (tc/filter.rs, cls_api.c's `tc_new_tfilter` / `tc_del_tfilter` /
//! `tc_dump_tfilter`) finds it with [`lookup`] (`tcf_proto_lookup_ops`) and calls
//! only the trait, handing the options through as the kind's own type ([`Opts`]),
//! as cls_api.c passes TCA_OPTIONS through unread. Each filter keeps its result's
//! bound class (`res.class`): a kind's `change` asks the [`Binds`] of the operation
//! (`tcf_bind_filter`, answered by the qdisc's
//! [`crate::qdisc::Classful::bind_tcf`]) and hands bound results back when they go
//! (`tcf_unbind_filter`); the log of what was bound and unbound, only what that
//! operation changed, keeps the qdisc's filter counts linear in the filters touched.
//! [`Classifier::for_each_class_mut`] rebinds them all when a class appears or is
//! deleted ([`Block::bind_class`], `tc_bind_tclass`).
//! State a kind shares among all blocks of one qdisc (u32's `tc_u_common`) is
//! [`Shared`], kept on the qdisc's own block.
//!
//! # Using a block from a qdisc (what prio and htb do)
//!
//! * Create the qdisc's own block with [`Block::new`]`(handle)` at init, and (htb)
//!   one per class at class creation; drop a class's block with the class.
//! * Expose them through [`crate::qdisc::Classful::block`] / `block_mut` (minor 0 is
//!   the qdisc's own block). Returning `None` for minor 0 means "this qdisc has no
//!   `tcf_block` op" (tc gets "Class doesn't support blocks"); `None` for a class
//!   means `cops->tcf_block` returned NULL (EINVAL), as prio does for its bands.
//! * At enqueue call [`Block::classify`]`(&pkt)`: it mirrors `tcf_classify` — the
//!   protos are tried in pref order, a proto whose protocol is neither the packet's
//!   nor `all` is skipped, and the first kind that matches gives the
//!   [`TcfResult`] (the `classid` the filter names and the class it is bound to, if
//!   any; the qdisc decides what they mean, and must check that an unbound classid
//!   names a class). `None` means no filter matched
//!   (`TC_ACT_UNSPEC`; `tcf_classify` < 0). An empty block answers `None` quickly
//!   ([`Block::is_empty`]), which is the kernel's `!fl` case.
//! * htb's `htb_classify` loop: start with the qdisc block (or, when
//!   `skb->priority` names an inner class, that class's block), classify, and if the
//!   result is an inner class continue with *its* block — at most 8 hops.
//!
//! Actions (`action gact …`, `action police …`, the legacy `police`): see
//! [`action`]. Filters run them when they match; [`Block::classify`] answers with
//! the verdict ([`Verdict`]) the qdisc acts on: a class, or drop (SHOT: the qdisc
//! drops the packet and counts it, `__NET_XMIT_BYPASS`), or stolen (STOLEN, QUEUED,
//! TRAP, and mirred's redirect: gone without counting as a drop; mirred leaves what
//! it forwards in the netns's outbox, see [`action`]). On a kernel without an action's module
//! ([`crate::tree::KernelVersion::has_action`]) a filter with one fails with
//! "Failed to load TC action module", after the kind's earlier checks.
//!
//! # Packet bytes (u32)
//!
//! u32 matches raw bytes at offsets from the network header. The engine's packets
//! carry no bytes, so a header is synthesized from [`Packet`] (see [`Headers`]):
//! IPv4 (flow addresses in IPv4-mapped form) or IPv6 with TCP/UDP/SCTP ports. A
//! packet without a [`crate::FlowKey`] counts as IPv4 (`protocol ip`) with no
//! readable header: every u32 key read fails (which ends the u32 lookup, as a failed
//! `skb_header_pointer` does), while fw and matchall filters still match it.

pub mod act;
pub mod action;
pub mod basic;
pub mod cgroup;
pub mod ematch;
pub mod flow;
pub mod flower;
pub mod fw;
pub mod matchall;
pub mod route;
pub mod u32;

use std::any::Any;
use std::sync::Arc;

use crate::packet::Packet;
use crate::tc::TcError;
use crate::time::Instant;

/// ETH_P_ALL.
pub const ETH_P_ALL: u16 = 0x0003;
/// ETH_P_IP.
pub const ETH_P_IP: u16 = 0x0800;
/// ETH_P_IPV6.
pub const ETH_P_IPV6: u16 = 0x86DD;

/// What a matching filter returns (`struct tcf_result`): the class it names, and
/// the class `tcf_bind_filter` bound it to (`res.class`), if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcfResult {
    pub classid: u32,
    /// The bound class as its qdisc names it ([`crate::qdisc::Classful::bind_tcf`];
    /// hfsc: the class's minor). It is set when the filter is changed or a class
    /// named `classid` appears, and cleared when a class of that id is deleted; drr,
    /// hfsc, htb and qfq follow it instead of looking `classid` up (hfsc then skips
    /// the level check an unbound result gets).
    pub class: Option<u32>,
}

impl TcfResult {
    /// A result bound to no class.
    pub const fn unbound(classid: u32) -> Self {
        TcfResult { classid, class: None }
    }
}

/// `tcf_classify`'s answer as prio and htb act on it (their `CONFIG_NET_CLS_ACT`
/// switch on the verdict).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// TC_ACT_OK, PIPE and the other non-consuming verdicts: use the result.
    Class(TcfResult),
    /// TC_ACT_SHOT: the qdisc drops the packet and counts a drop.
    Shot,
    /// TC_ACT_STOLEN / QUEUED / TRAP: consumed; not a drop.
    Stolen,
}

/// What the route a packet took tells classifiers (`skb_dst(skb)`): its realms
/// (`dst->tclassid`: TO in the low 16 bits, FROM in the high 16) and the packet's
/// input interface as `inet_iif` gives it (0 for a packet this host sent, the
/// receiving device's ifindex for one it forwards).
///
/// [`Packet`] has no field for it (it is kept small): the device owner hands it with
/// the transmit call ([`crate::tree::Device::xmit_routed`]), which makes it the
/// packet's route for the classifications of that call, through [`Headers::dst`].
/// Everywhere else (ingress, where the kernel has not routed the packet yet; frames
/// sent without a route) a packet has none, and route filters and the `rt_*` meta
/// keys do not match it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dst {
    pub tclassid: u32,
    pub iif: u32,
}

impl Dst {
    /// `set_class_tag`: fill the TO and FROM halves of `tclassid` that are still 0
    /// from `tag`.
    pub fn set_class_tag(&mut self, tag: u32) {
        if self.tclassid & 0xFFFF == 0 {
            self.tclassid |= tag & 0xFFFF;
        }
        if self.tclassid & 0xFFFF_0000 == 0 {
            self.tclassid |= tag & 0xFFFF_0000;
        }
    }
}

/// What the stack knows of the packet being classified besides its bytes: the route
/// it took ([`Dst`], when the device keeps routes) and `skb->skb_iif`, the ifindex of
/// the device it was received on — set by `__netif_receive_skb_core` before the
/// ingress hook and kept while the packet is forwarded, 0 for a packet this host
/// sent. The device owner hands both with the call (`Device::xmit_routed` — the
/// route's `inet_iif`, which for a forwarded packet is its `skb_iif` —, `Tc::ingress`
/// — the receiving device); they are read through [`Headers::dst`] and
/// [`Headers::iif`].
#[derive(Clone, Copy, Debug, Default)]
struct Origin {
    dst: Option<Dst>,
    iif: u32,
}

thread_local! {
    /// The [`Origin`] of the packet being transmitted or received by the current
    /// call: the engine is single-threaded per netns, and the slot lives exactly for
    /// that call.
    static ORIGIN: std::cell::Cell<Origin> = const { std::cell::Cell::new(Origin { dst: None, iif: 0 }) };
}

/// Run `f` with `dst` as the route of the packet it transmits or receives and
/// `iif` as its `skb_iif` (see [`Origin`]).
pub(crate) fn with_origin<R>(dst: Option<Dst>, iif: u32, f: impl FnOnce() -> R) -> R {
    struct Restore(Origin);
    impl Drop for Restore {
        fn drop(&mut self) {
            ORIGIN.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(ORIGIN.with(|d| d.replace(Origin { dst, iif })));
    f()
}

/// One classifier instance of a block (`struct tcf_proto`).
pub struct Proto {
    /// The 16-bit preference (`tp->prio >> 16`).
    pub pref: u16,
    /// Ethertype, host order (`ntohs(tp->protocol)`); ETH_P_ALL matches every packet.
    pub protocol: u16,
    /// The kind's filters (`tp->ops` + `tp->root`).
    pub kind: Box<dyn Classifier>,
}

/// A filter's options between tc's parser and the kind's `change`: the kind's own
/// type, opaque to `tc filter` as TCA_OPTIONS is to cls_api.c (the kind downcasts).
pub type Opts = Box<dyn Any>;

/// State a kind shares among the protos of all blocks of one qdisc (u32's
/// `tc_u_common`), kept on the qdisc's own block under the kind's name.
pub type Shared = Arc<dyn Any + Send + Sync>;

/// The `tcf_bind_filter` / `tcf_unbind_filter` calls of one operation: a kind's
/// `change` asks [`Binds::bind`] for the class a result binds (the qdisc's
/// `bind_tcf`, handed in as `bind_tcf`) and keeps the answer in the result; its
/// `change`, `delete` and `destroy` hand bound results back with [`Binds::unbind`].
/// The log (classid, ±1) of what was bound and unbound is applied to the qdisc's
/// filter counts after the operation, so the bookkeeping is linear in the filters
/// touched.
/// A qdisc's `bind_tcf` for one block's filters: classid → the class bound.
pub type BindTcf<'a> = dyn Fn(u32) -> Option<u32> + 'a;

#[derive(Default)]
pub struct Binds<'a> {
    log: Vec<(u32, i32)>,
    /// The qdisc's `bind_tcf` for this block's filters: classid → bound class.
    /// None for a block without a qdisc (a shared block: `tcf_bind_filter` returns
    /// at once) and for kinds whose bind answers are never read.
    bind_tcf: Option<&'a BindTcf<'a>>,
}

/// For tests: a qdisc whose `bind_tcf` binds every classid (as itself).
#[cfg(test)]
pub(crate) fn bind_every(classid: u32) -> Option<u32> {
    Some(classid)
}

impl<'a> Binds<'a> {
    /// Binds answered by the qdisc's `bind_tcf`.
    pub fn with_bind_tcf(bind_tcf: &'a BindTcf<'a>) -> Self {
        Binds { log: Vec::new(), bind_tcf: Some(bind_tcf) }
    }
    /// `tcf_bind_filter` of a result naming `classid`: the class it is bound to now.
    pub fn bind(&mut self, classid: u32) -> Option<u32> {
        let class = self.bind_tcf.and_then(|b| b(classid));
        if class.is_some() {
            self.log.push((classid, 1));
        }
        class
    }
    /// `tcf_unbind_filter`: a result naming `classid` lets go of its bound class.
    pub fn unbind(&mut self, classid: u32, class: Option<u32>) {
        if class.is_some() {
            self.log.push((classid, -1));
        }
    }
    /// `tc_cls_bind_class` on one result: bound to `class` now (the qdisc's answer
    /// for the block, or None when the class went), its old class let go.
    pub fn rebind(&mut self, classid: u32, bound: &mut Option<u32>, class: Option<u32>) {
        self.unbind(classid, *bound);
        if class.is_some() {
            self.log.push((classid, 1));
        }
        *bound = class;
    }
    /// Move what `other` logged here.
    pub fn append(&mut self, other: &mut Binds) {
        self.log.append(&mut other.log);
    }
    /// Entries `(classid, ±1)` logged elsewhere (u32's common).
    pub fn extend(&mut self, log: impl IntoIterator<Item = (u32, i32)>) {
        self.log.extend(log);
    }
    /// The classids unbound and those bound, each sorted.
    pub fn split(self) -> (Vec<u32>, Vec<u32>) {
        let (mut unbound, mut bound) = (Vec::new(), Vec::new());
        for (c, d) in self.log {
            if d < 0 { &mut unbound } else { &mut bound }.push(c);
        }
        unbound.sort_unstable();
        bound.sort_unstable();
        (unbound, bound)
    }
}

/// A classifier kind's filters in one proto: the kernel's `struct tcf_proto_ops`.
/// Options arrive as the kind's own [`Opts`] type; filter handles are the kind's
/// (`get` answers the handle of an existing filter, as `ops->get` does).
pub trait Classifier: Send + Sync {
    /// `ops->kind`.
    fn kind(&self) -> &'static str;
    /// `ops->classify`: the verdict of the first filter that takes the packet, and
    /// its result. `q_handle` is the owning qdisc's handle (fw's old method).
    fn classify(&self, pkt: &mut Packet, hdr: &Headers, q_handle: u32, now: Instant) -> Option<(i32, TcfResult)>;
    /// `ops->get`: the filter with `handle`, if any.
    fn get(&self, handle: u32) -> Option<u32>;
    /// `ops->change`: create (`fh` None) or change the filter `handle` / `fh`.
    /// `opts` None is a request without options (no TCA_OPTIONS); `tmplt` is the
    /// chain's template's keys (`tp->chain->tmplt_priv`), of this kind.
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn Any>,
        tmplt: Option<&dyn Any>,
        fh: Option<u32>,
        acts: &mut action::ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError>;
    /// `ops->delete` of the filter `handle` (which `get` found); answers `last`: no
    /// filter left, the proto goes.
    fn delete(&mut self, handle: u32, binds: &mut Binds) -> Result<bool, FilterError>;
    /// `ops->walk` + `ops->dump`: every filter after the proto's own line; with
    /// [`DumpCtx::terse`], `ops->terse_dump`.
    fn dump(&self, ctx: &DumpCtx, out: &mut crate::tc::Out);
    /// The kind has `ops->terse_dump` (flower alone): `tcf_fill_node` refuses a terse
    /// dump of any other kind's filters.
    fn terse_dump(&self) -> bool {
        false
    }
    /// `ops->walk`: the classid each filter names.
    fn for_each_classid(&self, f: &mut dyn FnMut(u32)) {
        self.for_each_class(&mut |c| {
            if c.classid != 0 {
                f(c.classid)
            }
        });
    }
    /// `ops->walk`: each filter's result (classid 0: the filter names no class).
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult));
    /// `ops->walk` + `ops->bind_class` (`tcf_node_bind`): each filter's result as
    /// `classid` and its bound class, for [`Binds::rebind`].
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>));
    /// Each filter's actions (`tcf_exts`), for the chains their `goto chain`
    /// actions hold.
    fn for_each_exts(&self, f: &mut dyn FnMut(&action::Exts));
    /// `ops->destroy`: the filters unbind what they named. True when the kind's
    /// qdisc-wide [`Shared`] state went with this proto.
    fn destroy(self: Box<Self>, binds: &mut Binds) -> bool {
        self.for_each_class(&mut |r| binds.unbind(r.classid, r.class));
        false
    }
    /// Whether a change makes the device keep each packet's route for its qdiscs
    /// (`tcf_block_netif_keep_dst`, which cls_route and cls_flow call): until then
    /// `__dev_queue_xmit` drops it before the qdisc (IFF_XMIT_DST_RELEASE).
    fn keeps_dst(&self) -> bool {
        false
    }
    /// The qdisc-wide state this proto uses, for the qdisc's block to keep and
    /// hand to the kind's next `init` (u32's `tc_u_common`).
    fn shared(&self) -> Option<Shared> {
        None
    }
}

/// One registered kind (`register_tcf_proto_ops`): its name, tc's option parser
/// (`q->parse_fopt`) and `ops->init`.
pub struct ClassifierOps {
    pub kind: &'static str,
    pub parse: ParseFn,
    pub init: InitFn,
    /// Chain templates, for the kinds that have them.
    pub tmplt: Option<&'static TmpltOps>,
}

/// tc's `parse_fopt`: the filter handle and the options (`protocol`: flower's default
/// `eth_type`).
pub type ParseFn = fn(handle: Option<&str>, protocol: u16, a: &mut crate::tc::Args) -> Result<(u32, Opts), TcError>;

/// A new proto with `pref`; `shared`: the qdisc's state of this kind, if any.
pub type InitFn = fn(shared: Option<Shared>, pref: u16) -> Result<Box<dyn Classifier>, FilterError>;

fn opts<T: Any>(r: Result<(u32, T), TcError>) -> Result<(u32, Opts), TcError> {
    r.map(|(h, o)| (h, Box::new(o) as Opts))
}

/// The kind's options from `opts` (its defaults for a request without options);
/// another kind's options are EINVAL.
pub(crate) fn with_opts<T: Any + Default, R>(
    opts: Option<&dyn Any>,
    f: impl FnOnce(&T) -> Result<R, FilterError>,
) -> Result<R, FilterError> {
    match opts {
        None => f(&T::default()),
        Some(o) => f(o.downcast_ref::<T>().ok_or(FilterError::Errno("Invalid argument"))?),
    }
}

/// The filter handle as f_basic.c and f_cgroup.c read it: `strtol(…, 0)`, unchecked
/// but for its saturation.
pub(crate) fn strtol_handle(handle: Option<&str>) -> Result<u32, TcError> {
    let Some(s) = handle else { return Ok(0) };
    let v = crate::tc::units::strtol0_prefix(s.as_bytes()).map_or(0, |(v, _)| v);
    if v == i64::MIN || v == i64::MAX {
        return Err(TcError::usage(format!("Illegal handle \"{s}\", must be numeric.\n")));
    }
    Ok(v as u32)
}

/// The words f_basic.c and f_cgroup.c read alike: `match EMATCH_TREE` and those of
/// [`parse_exts`]. False: `w` is none of them.
pub(crate) fn parse_tree_or_exts(
    w: &str,
    a: &mut crate::tc::Args,
    tree: &mut ematch::Tree,
    exts: &mut action::ExtsSpec,
) -> Result<bool, TcError> {
    if !crate::tc::matches(w, "match") {
        return parse_exts(w, a, exts);
    }
    if a.is_empty() {
        return Err(TcError::incomplete());
    }
    *tree = ematch::parse(a)?;
    Ok(true)
}

/// `action …` and the legacy `police …` as f_basic.c, f_cgroup.c, f_flow.c and
/// f_route.c read them: each wants a word after it. False: `w` is neither.
pub(crate) fn parse_exts(w: &str, a: &mut crate::tc::Args, exts: &mut action::ExtsSpec) -> Result<bool, TcError> {
    let which = ["action", "police"].into_iter().find(|k| crate::tc::matches(w, k));
    let Some(k) = which else { return Ok(false) };
    if a.is_empty() {
        return Err(TcError::incomplete());
    }
    match k {
        "action" => action::parse_action(a, exts)?,
        _ => action::parse_legacy_police(a, exts)?,
    }
    Ok(true)
}

/// `init` of a kind whose new proto is its default (no qdisc-wide state).
fn new<T: Classifier + Default + 'static>(_: Option<Shared>, _: u16) -> Result<Box<dyn Classifier>, FilterError> {
    Ok(Box::<T>::default())
}

/// The kinds this engine implements, by name: adding a classifier is its module and
/// one entry here.
pub const CLASSIFIERS: &[ClassifierOps] = &[
    ClassifierOps { kind: "basic", parse: |h, _, a| opts(basic::parse(h, a)), init: new::<basic::Basic>, tmplt: None },
    ClassifierOps {
        kind: "cgroup",
        parse: |h, _, a| opts(cgroup::parse(h, a)),
        init: new::<cgroup::Cgroup>,
        tmplt: None,
    },
    ClassifierOps { kind: "flow", parse: |h, _, a| opts(flow::parse(h, a)), init: flow::Flow::new_proto, tmplt: None },
    ClassifierOps {
        kind: "flower",
        parse: |h, p, a| opts(flower::parse(h, p, a)),
        init: new::<flower::Flower>,
        tmplt: Some(&flower::TMPLT),
    },
    ClassifierOps { kind: "fw", parse: |h, _, a| opts(fw::parse(h, a)), init: new::<fw::Fw>, tmplt: None },
    ClassifierOps {
        kind: "matchall",
        parse: |h, _, a| opts(matchall::parse(h, a)),
        init: new::<matchall::Matchall>,
        tmplt: None,
    },
    ClassifierOps { kind: "route", parse: |h, _, a| opts(route::parse(h, a)), init: new::<route::Route>, tmplt: None },
    ClassifierOps { kind: "u32", parse: |h, _, a| opts(u32::parse(h, a)), init: u32::Tp::new_proto, tmplt: None },
];

/// Classifier kinds the kernel has that this engine refuses, with the reason.
/// Classifier kinds the kernel has that this engine refuses, with the reason: none
/// of the kinds tc 6.15 and 6.12 share is refused now (route and cgroup were, until
/// routes carried realms and sockets net_cls classids).
pub const REFUSED: &[(&str, &str)] = &[];

/// The kinds' names, in [`CLASSIFIERS`] order.
pub const KINDS: &[&str] = &{
    let mut k = [""; CLASSIFIERS.len()];
    let mut i = 0;
    while i < k.len() {
        k[i] = CLASSIFIERS[i].kind;
        i += 1;
    }
    k
};

/// `tcf_proto_lookup_ops`.
pub fn lookup(kind: &str) -> Option<&'static ClassifierOps> {
    CLASSIFIERS.iter().find(|o| o.kind == kind)
}

/// One chain of a block (`struct tcf_chain`): its protos in ascending pref order,
/// and what keeps it alive besides them.
pub struct Chain {
    /// `chain->index` (0 ..= 0x0FFF_FFFF).
    pub index: u32,
    /// The protos in ascending pref order (`chain->filter_chain`).
    pub(crate) protos: Vec<Proto>,
    /// `chain->explicitly_created`: `tc chain add` made or adopted it.
    pub(crate) explicit: bool,
    /// `chain->action_refcnt`: distinct `goto chain` actions of this block's
    /// filters that name it.
    pub(crate) act_refs: u32,
    /// `chain->tmplt_ops` + `tmplt_priv`: the chain template `tc chain add … KIND
    /// …` gave (only flower has templates); it lives as long as the chain.
    pub(crate) tmplt: Option<Tmplt>,
}

/// A chain template: the kind's own keys, which filters of that chain must fit.
pub struct Tmplt {
    pub kind: &'static str,
    pub ops: &'static TmpltOps,
    pub keys: Box<dyn Any + Send + Sync>,
}

/// A kind's `tmplt_create` / `tmplt_dump` (`struct tcf_proto_ops`).
pub struct TmpltOps {
    /// The template of a `tc chain add` request: its options and `protocol`.
    pub create: fn(opts: Option<&dyn Any>, protocol: u16) -> Result<Box<dyn Any + Send + Sync>, FilterError>,
    /// Its options as `tc chain show` prints them (`print_fopt` with handle 0).
    pub dump: fn(keys: &dyn Any, out: &mut crate::tc::Out),
}

impl Chain {
    fn new(index: u32) -> Self {
        Chain { index, protos: Vec::new(), explicit: false, act_refs: 0, tmplt: None }
    }

    /// `tcf_chain_held_by_acts_only`: only actions keep it; dumps skip it.
    pub(crate) fn held_by_acts_only(&self) -> bool {
        self.protos.is_empty() && !self.explicit
    }

    /// `tcf_chain_tp_find`: the index of the proto with `pref`, or where it would go.
    pub(crate) fn find(&self, pref: u16) -> Result<usize, usize> {
        self.protos.binary_search_by_key(&pref, |p| p.pref)
    }

    /// `tcf_auto_prio(tcf_chain_tp_prev(…))` for a request without `pref`: one below
    /// the first proto whose pref is ≥ 0x8000, or 0xC000 (49152) if there is none.
    /// `Err` if that first proto has pref 0x8000 exactly (ENOSPC).
    pub(crate) fn auto_pref(&self) -> Result<u16, ()> {
        match self.protos.iter().find(|p| p.pref >= 0x8000) {
            None => Ok(0xC000),
            Some(p) if p.pref == 0x8000 => Err(()),
            Some(p) => Ok(p.pref - 1),
        }
    }
}

/// The highest chain index (`TC_ACT_EXT_VAL_MASK`).
pub const CHAIN_INDEX_MAX: u32 = 0x0FFF_FFFF;

/// A filter block (`struct tcf_block`): its chains in creation order, as the
/// kernel's `block->chain_list` keeps them (dumps walk them in that order).
///
/// A chain lives while it has protos, was made by `tc chain add`, or a `goto chain`
/// action of one of the block's filters names it (`tcf_chain_get_by_act`); chain 0
/// is no different (a block without filters has no chains). [`Block::settle`]
/// restores that after every change. The actions' references are counted per
/// distinct action object held by this block's filters; an action bound by index
/// from another qdisc's filter is counted in each block that holds it (the kernel
/// keeps the reference on the block where the action was made).
pub struct Block {
    /// `sch->handle` of the owning qdisc (fw's "old method" compares marks with it).
    pub(crate) q_handle: u32,
    /// `block->classid`: the parent named by the last filter request that reached
    /// this block; dumps print it as the filters' `parent`.
    pub(crate) classid: u32,
    /// The chains in creation order.
    pub(crate) chains: Vec<Chain>,
    /// On a qdisc's own block: the kinds' qdisc-wide state ([`Shared`]; u32's
    /// `tc_u_common`, which the kernel keys by qdisc, so the qdisc's and its classes'
    /// u32 filters share it).
    pub(crate) shared: Vec<(&'static str, Shared)>,
    /// The netns's count of filter action lists with a `goto chain`
    /// ([`action::ActionTable::gotos`]) when [`Block::settle`] last found none here:
    /// until it grows, no action holds a chain and settling walks no filter.
    no_gotos_at: Option<u64>,
}

/// `max_reclassify_loop` of `__tcf_classify`.
const MAX_RECLASSIFY_LOOP: u32 = 16;

impl Block {
    /// An empty block of the qdisc with handle `q_handle`.
    pub fn new(q_handle: u32) -> Self {
        Block { q_handle, classid: q_handle, chains: Vec::new(), shared: Vec::new(), no_gotos_at: None }
    }

    /// No filters in chain 0 (the kernel's NULL `filter_list`: the qdisc's
    /// classification starts there, so filters in other chains alone do nothing).
    pub fn is_empty(&self) -> bool {
        self.chain(0).is_none_or(|c| c.protos.is_empty())
    }

    /// `tcf_chain_lookup`.
    pub(crate) fn chain(&self, index: u32) -> Option<&Chain> {
        self.chains.iter().find(|c| c.index == index)
    }

    pub(crate) fn chain_mut(&mut self, index: u32) -> Option<&mut Chain> {
        self.chains.iter_mut().find(|c| c.index == index)
    }

    /// `tcf_chain_get(…, create)`: the chain, appended to the list if new.
    pub(crate) fn chain_get(&mut self, index: u32) -> &mut Chain {
        let i = match self.chains.iter().position(|c| c.index == index) {
            Some(i) => i,
            None => {
                self.chains.push(Chain::new(index));
                self.chains.len() - 1
            }
        };
        &mut self.chains[i]
    }

    /// The chain references after a change (`tcf_chain_get_by_act` /
    /// `tcf_chain_put_by_act` as the filters' actions came and went, and the last
    /// `tcf_chain_put`): chains that actions name now exist (new ones appended in
    /// the order the block's filters name them), and chains nothing holds are gone.
    /// `gotos` is the netns's [`action::ActionTable::gotos`].
    pub(crate) fn settle(&mut self, gotos: u64) {
        let mut seen: Vec<*const ()> = Vec::new();
        let mut targets: Vec<u32> = Vec::new();
        let walk = if self.no_gotos_at == Some(gotos) { &[][..] } else { &self.chains[..] };
        for c in walk {
            for tp in &c.protos {
                tp.kind.for_each_exts(&mut |e| {
                    e.for_each_goto_chain(&mut |a, n| {
                        if !seen.contains(&a) {
                            seen.push(a);
                            targets.push(n);
                        }
                    })
                });
            }
        }
        for c in &mut self.chains {
            c.act_refs = 0;
        }
        self.no_gotos_at = targets.is_empty().then_some(gotos);
        for n in targets {
            self.chain_get(n).act_refs += 1;
        }
        self.chains.retain(|c| !c.protos.is_empty() || c.explicit || c.act_refs > 0);
    }

    /// Mirrors `tcf_classify` / `__tcf_classify` at time `now`: chain 0's protos in
    /// pref order (skipping those for another protocol) until one answers a verdict
    /// ≥ 0. RECLASSIFY starts over from chain 0's first proto, `goto chain N` from
    /// chain N's first (an empty chain N ends the lookup); at most 16 restarts, the
    /// 17th answers SHOT (`max_reclassify_loop`). `None` is TC_ACT_UNSPEC: no filter
    /// took the packet.
    pub fn classify(&self, pkt: &mut Packet, now: Instant) -> Option<Verdict> {
        let first = &self.chain(0)?.protos[..];
        if first.is_empty() {
            return None;
        }
        let hdr = Headers::of(pkt);
        let mut protos = first;
        let mut limit = 0;
        'reclassify: loop {
            for tp in protos {
                if tp.protocol != hdr.protocol && tp.protocol != ETH_P_ALL {
                    continue;
                }
                let Some((err, res)) = tp.kind.classify(pkt, &hdr, self.q_handle, now) else { continue };
                let next = if err == action::TC_ACT_RECLASSIFY {
                    Some(first)
                } else if action::ext_cmp(err, action::TC_ACT_GOTO_CHAIN) {
                    let n = (err & action::TC_ACT_EXT_VAL_MASK) as u32;
                    Some(self.chain(n).map_or(&[][..], |c| &c.protos[..]))
                } else {
                    None
                };
                if let Some(next) = next {
                    if limit >= MAX_RECLASSIFY_LOOP {
                        return Some(Verdict::Shot);
                    }
                    limit += 1;
                    protos = next;
                    continue 'reclassify;
                }
                return Some(match err {
                    action::TC_ACT_SHOT => Verdict::Shot,
                    action::TC_ACT_STOLEN | action::TC_ACT_QUEUED | action::TC_ACT_TRAP => Verdict::Stolen,
                    _ => Verdict::Class(res),
                });
            }
            return None;
        }
    }

    /// Every classid the filters of this block name, in every chain.
    pub fn for_each_classid(&self, f: &mut dyn FnMut(u32)) {
        for c in &self.chains {
            for tp in &c.protos {
                tp.kind.for_each_classid(f);
            }
        }
    }

    /// `tc_bind_class_walker` over this block: every result naming `classid` is
    /// bound to `class` (the qdisc's `bind_tcf` answer for this block), or unbound
    /// with None (the class was deleted).
    pub fn bind_class(&mut self, classid: u32, class: Option<u32>, binds: &mut Binds) {
        for c in &mut self.chains {
            for tp in &mut c.protos {
                tp.kind.for_each_class_mut(&mut |id, bound| {
                    if id == classid {
                        binds.rebind(id, bound, class);
                    }
                });
            }
        }
    }

    /// The qdisc-wide state of `kind` (on the qdisc's own block).
    pub(crate) fn shared(&self, kind: &str) -> Option<Shared> {
        self.shared.iter().find(|(k, _)| *k == kind).map(|(_, s)| s.clone())
    }

    /// A new proto of `kind` came with qdisc-wide state the block does not hold yet.
    pub(crate) fn keep_shared(&mut self, kind: &'static str, s: Shared) {
        if self.shared(kind).is_none() {
            self.shared.push((kind, s));
        }
    }

    /// The last proto using `kind`'s qdisc-wide state took it with it.
    pub(crate) fn drop_shared(&mut self, kind: &str) {
        self.shared.retain(|(k, _)| *k != kind);
    }

    /// `tcf_proto_destroy` of the proto at `idx` of chain `chain`; the kind whose
    /// qdisc-wide state went with it (for the qdisc's block to drop), if any.
    pub(crate) fn destroy(&mut self, chain: u32, idx: usize, binds: &mut Binds) -> Option<&'static str> {
        let tp = self.chain_mut(chain).expect("chain exists").protos.remove(idx);
        let kind = tp.kind.kind();
        tp.kind.destroy(binds).then_some(kind)
    }

    /// `tcf_chain_flush`: every proto of chain `chain` destroyed; the kinds whose
    /// qdisc-wide state went with them.
    pub(crate) fn flush(&mut self, chain: u32, binds: &mut Binds) -> Vec<&'static str> {
        let protos = std::mem::take(&mut self.chain_mut(chain).expect("chain exists").protos);
        protos
            .into_iter()
            .filter_map(|tp| {
                let k = tp.kind.kind();
                tp.kind.destroy(binds).then_some(k)
            })
            .collect()
    }

    /// `tcf_block_put` of a class's block: every proto of every chain destroyed;
    /// `q_block` (the qdisc's own) drops the qdisc-wide state that went with them.
    pub(crate) fn put(mut self, q_block: &mut Block, binds: &mut Binds) {
        let indices: Vec<u32> = self.chains.iter().map(|c| c.index).collect();
        for i in indices {
            for kind in self.flush(i, binds) {
                q_block.drop_shared(kind);
            }
        }
    }
}

/// The netns's shared blocks (`tcf_net`'s idr of `tcf_block`s by index): block N
/// is the one `tc qdisc add … ingress_block N` / `egress_block N` binds a hook of
/// ingress or clsact to, and `tc filter … block N` edits. Every device bound to it
/// runs the same filters (the same objects: one set of counters, one instance of
/// each action).
///
/// Lifetime (`tcf_block_get_ext` / `__tcf_block_put`): the first binding creates the
/// block, each qdisc hook holds one reference, and the last one going destroys it
/// with every chain and filter (`tcf_block_flush_all_chains`); filter requests hold
/// it only for their own duration. [`SharedBlocks::settle`] applies that after each
/// qdisc command from the hooks bound then. Blocks of a qdisc's own (index 0) never
/// appear here: the kernel gives them no index a user can see.
#[derive(Default)]
pub struct SharedBlocks(std::collections::BTreeMap<u32, Block>);

impl SharedBlocks {
    /// `tcf_block_lookup`: block `index`, if a qdisc binds it.
    pub fn get(&self, index: u32) -> Option<&Block> {
        self.0.get(&index)
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> Option<&mut Block> {
        self.0.get_mut(&index)
    }

    /// After qdiscs came and went: a block for each index in `bound` (a new one
    /// empty; its `q` is NULL, so fw's old method sees handle 0), and none for an
    /// index nothing binds any more (destroyed with its filters; a shared block's
    /// filters bind no classes, `tcf_bind_filter` has no qdisc to tell).
    pub(crate) fn settle(&mut self, bound: &std::collections::BTreeSet<u32>) {
        self.0.retain(|i, _| bound.contains(i));
        for &i in bound {
            self.0.entry(i).or_insert_with(|| Block::new(0));
        }
    }
}

/// The packet as a classifier reads it (`skb_protocol` + the bytes from the
/// Ethernet header on). Synthesized fields:
///
/// * Ethernet: zero MACs, the ethertype.
/// * IPv4 (flow addresses `::ffff:a.b.c.d`): version 4, IHL 5, TOS = `Packet::tos`,
///   total length = `len − 14`, id 0, DF set, fragment offset 0, TTL 64, protocol
///   from the flow, checksum 0, the addresses. Options: none.
/// * IPv6: version 6, traffic class = `tos`, flow label 0, payload length
///   `len − 54`, next header from the flow, hop limit 64, the addresses.
/// * Transport: TCP (6) — ports, seq 0, ack 0, data offset 5, flags ACK, window 0,
///   checksum 0; UDP (17) — ports, length, checksum 0; SCTP (132) — ports. Other
///   protocols: no transport header.
/// * Beyond the synthesized headers, up to `len`, the payload reads as zeros; reads
///   past `len` fail.
///
/// A packet without a 5-tuple that carries its frame's head ([`Packet::frame`]) is
/// read from those bytes instead ([`Headers::read_frame`]); one with neither reads as
/// IPv4 with no readable byte.
pub struct Headers {
    /// Ethertype (host order).
    pub protocol: u16,
    /// Ethernet header + network header + transport header.
    bytes: [u8; Self::LEN],
    /// Bytes of `bytes` that were synthesized (from the Ethernet header on).
    filled: usize,
    /// `skb->len` from the Ethernet header on (0 = no readable network header).
    len: usize,
    /// The flow's L4 protocol and ports (flower reads them parsed), if any.
    pub ip_proto: Option<u8>,
    /// The route the packet took, if any (see [`Dst`]).
    pub dst: Option<Dst>,
    /// `skb->skb_iif` (see [`Origin`]): 0 for a packet this host sent.
    pub iif: u32,
}

/// A frame's IP header as flower reads it ([`Headers::frame_ip`]).
pub struct FrameIp {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub tos: u8,
    /// Source and destination port.
    pub ports: Option<(u16, u16)>,
}

impl Headers {
    pub fn of(pkt: &Packet) -> Self {
        let Origin { dst, iif } = ORIGIN.with(|d| d.get());
        let mut h = Headers { protocol: ETH_P_IP, bytes: [0; Self::LEN], filled: 0, len: 0, ip_proto: None, dst, iif };
        let Some(f) = pkt.flow() else {
            if let Some(frame) = pkt.frame() {
                h.read_frame(frame, pkt.skb_len());
            }
            return h;
        };
        let v4 = f.src[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        h.protocol = if v4 { ETH_P_IP } else { ETH_P_IPV6 };
        h.ip_proto = Some(f.proto);
        h.len = pkt.len as usize;
        let b = &mut h.bytes;
        b[12..14].copy_from_slice(&h.protocol.to_be_bytes());
        let l3 = 14;
        let nl = (pkt.len as usize).saturating_sub(14);
        let l4 = if v4 {
            b[l3] = 0x45;
            b[l3 + 1] = pkt.tos;
            b[l3 + 2..l3 + 4].copy_from_slice(&(nl.min(0xFFFF) as u16).to_be_bytes());
            b[l3 + 6] = 0x40;
            b[l3 + 8] = 64;
            b[l3 + 9] = f.proto;
            b[l3 + 12..l3 + 16].copy_from_slice(&f.src[12..]);
            b[l3 + 16..l3 + 20].copy_from_slice(&f.dst[12..]);
            l3 + 20
        } else {
            b[l3] = 0x60 | (pkt.tos >> 4);
            b[l3 + 1] = pkt.tos << 4;
            b[l3 + 4..l3 + 6].copy_from_slice(&(nl.saturating_sub(40).min(0xFFFF) as u16).to_be_bytes());
            b[l3 + 6] = f.proto;
            b[l3 + 7] = 64;
            b[l3 + 8..l3 + 24].copy_from_slice(&f.src);
            b[l3 + 24..l3 + 40].copy_from_slice(&f.dst);
            l3 + 40
        };
        h.filled = l4;
        match f.proto {
            6 | 17 | 132 => {
                b[l4..l4 + 2].copy_from_slice(&f.sport.to_be_bytes());
                b[l4 + 2..l4 + 4].copy_from_slice(&f.dport.to_be_bytes());
                if f.proto == 6 {
                    b[l4 + 12] = 0x50;
                    b[l4 + 13] = 0x10;
                    h.filled = l4 + 20;
                } else if f.proto == 17 {
                    let ul = (pkt.len as usize).saturating_sub(l4).min(0xFFFF) as u16;
                    b[l4 + 4..l4 + 6].copy_from_slice(&ul.to_be_bytes());
                    h.filled = l4 + 8;
                } else {
                    h.filled = l4 + 12;
                }
            }
            _ => {}
        }
        h
    }

    /// A frame's own bytes ([`Packet::frame`]), `len` long: `skb->protocol` is its
    /// ethertype (`packet_parse_headers` → `eth_header_parse_protocol`, as for an
    /// AF_PACKET frame) and its network header starts after the 14 Ethernet bytes
    /// (`skb_reset_network_header` after `LL_RESERVED_SPACE`); an IPv4/IPv6 header
    /// there gives flower its IP protocol.
    fn read_frame(&mut self, frame: &[u8], len: u32) {
        self.len = len as usize;
        self.filled = frame.len();
        self.bytes[..frame.len()].copy_from_slice(frame);
        self.protocol = u16::from_be_bytes([self.bytes[12], self.bytes[13]]);
        self.ip_proto = match self.protocol {
            ETH_P_IP if self.len >= 14 + 20 => Some(self.bytes[14 + 9]),
            ETH_P_IPV6 if self.len >= 14 + 40 => Some(self.bytes[14 + 6]),
            _ => None,
        };
    }

    /// What flower dissects from a frame's own IP header ([`Headers::read_frame`]): the
    /// addresses (IPv4 ones IPv4-mapped), the DS field and, for TCP/UDP/SCTP after an
    /// option-less header, the ports. None for a packet whose headers were synthesized
    /// from its 5-tuple, or a frame without a whole IPv4/IPv6 header.
    pub fn frame_ip(&self) -> Option<FrameIp> {
        let b = &self.bytes;
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        let (tos, l4) = match self.protocol {
            ETH_P_IP if self.filled > 0 && self.len >= 14 + 20 && b[14] >> 4 == 4 => {
                src[10..12].fill(0xff);
                dst[10..12].fill(0xff);
                src[12..].copy_from_slice(&b[26..30]);
                dst[12..].copy_from_slice(&b[30..34]);
                (b[15], (b[14] & 0xf == 5).then_some(34))
            }
            ETH_P_IPV6 if self.filled > 0 && self.len >= 14 + 40 && b[14] >> 4 == 6 => {
                src.copy_from_slice(&b[22..38]);
                dst.copy_from_slice(&b[38..54]);
                ((b[14] << 4) | (b[15] >> 4), Some(54))
            }
            _ => return None,
        };
        let ports = l4
            .filter(|&l4| matches!(self.ip_proto, Some(6 | 17 | 132)) && self.len >= l4 + 4)
            .map(|l4| (u16::from_be_bytes([b[l4], b[l4 + 1]]), u16::from_be_bytes([b[l4 + 2], b[l4 + 3]])));
        Some(FrameIp { src, dst, tos, ports })
    }

    /// How many header bytes are synthesized at most.
    pub const LEN: usize = crate::packet::FRAME_HEAD;

    /// The synthesized header bytes from the Ethernet header on (zeros past them).
    pub fn bytes(&self) -> [u8; Self::LEN] {
        self.bytes
    }

    /// What of `bytes` (headers as [`Headers::of`] laid them out, then edited) the
    /// packet carries, written back to `pkt`: the DS field, the IP protocol, the
    /// addresses, and the ports of a TCP/UDP/SCTP flow. Everything else in them
    /// (MACs, ethertype, TTL, lengths, flags, checksums) has no field to go to.
    pub fn write_back(&self, bytes: &[u8; Self::LEN], pkt: &mut Packet) {
        let Some(f) = pkt.flow_mut() else { return };
        let l3 = 14;
        let (tos, l4) = if self.protocol == ETH_P_IP {
            f.proto = bytes[l3 + 9];
            f.src[12..].copy_from_slice(&bytes[l3 + 12..l3 + 16]);
            f.dst[12..].copy_from_slice(&bytes[l3 + 16..l3 + 20]);
            (bytes[l3 + 1], l3 + 20)
        } else {
            f.proto = bytes[l3 + 6];
            f.src.copy_from_slice(&bytes[l3 + 8..l3 + 24]);
            f.dst.copy_from_slice(&bytes[l3 + 24..l3 + 40]);
            ((bytes[l3] << 4) | (bytes[l3 + 1] >> 4), l3 + 40)
        };
        if matches!(self.ip_proto, Some(6 | 17 | 132)) {
            f.sport = u16::from_be_bytes([bytes[l4], bytes[l4 + 1]]);
            f.dport = u16::from_be_bytes([bytes[l4 + 2], bytes[l4 + 3]]);
        }
        pkt.tos = tos;
    }

    /// `skb_header_pointer(skb, skb_network_offset + off, 4)` as a host-order u32
    /// of the big-endian bytes; `None` when the read leaves the packet.
    pub fn read_u32(&self, off: i64) -> Option<u32> {
        let at = 14 + off;
        if at < 0 || at + 4 > self.len as i64 {
            return None;
        }
        let at = at as usize;
        let mut w = [0u8; 4];
        for (i, x) in w.iter_mut().enumerate() {
            if at + i < self.filled {
                *x = self.bytes[at + i];
            }
        }
        Some(u32::from_be_bytes(w))
    }

    /// Where layer `layer` (`TCF_LAYER_LINK`, `NETWORK`, `TRANSPORT`) starts, from
    /// the Ethernet header (`tcf_get_base_ptr`); None without a readable header.
    pub fn layer_offset(&self, layer: u8) -> Option<i64> {
        if self.len == 0 {
            return None;
        }
        match layer {
            0 => Some(0),
            1 => Some(14),
            _ => Some(if self.protocol == ETH_P_IP { 14 + 20 } else { 14 + 40 }),
        }
    }

    /// `out.len()` bytes at `at` from the Ethernet header; false when they leave the
    /// packet (`tcf_valid_offset`).
    pub fn bytes_at(&self, at: i64, out: &mut [u8]) -> bool {
        if at < 0 || at + out.len() as i64 > self.len as i64 {
            return false;
        }
        for (i, b) in out.iter_mut().enumerate() {
            let j = at as usize + i;
            *b = if j < self.filled { self.bytes[j] } else { 0 };
        }
        true
    }

    /// `skb->len` counted from the network header.
    pub fn net_len(&self) -> i64 {
        (self.len as i64 - 14).max(0)
    }

    /// 2 bytes at `off` from the network header.
    pub fn read_u16(&self, off: i64) -> Option<u16> {
        let at = 14 + off;
        if at < 0 || at + 2 > self.len as i64 {
            return None;
        }
        let at = at as usize;
        let g = |i: usize| if i < self.filled { self.bytes[i] } else { 0 };
        Some(u16::from_be_bytes([g(at), g(at + 1)]))
    }
}

/// A kernel-side refusal of a filter request: an extack message or a bare errno
/// (its strerror text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterError {
    Ext(String),
    /// `NL_REQ_ATTR_CHECK` failed: the missing attribute's type (tc prints it from
    /// NLMSGERR_ATTR_MISS_TYPE) and the extack message.
    Missing(u16, &'static str),
    Errno(&'static str),
    /// Something this engine does not model, refused with tc's exit status 1.
    Tc(String),
}

impl FilterError {
    pub fn ext(m: &str) -> Self {
        FilterError::Ext(m.to_string())
    }
    /// What this kernel (no act_gact, no act_police) answers to any action.
    pub fn action() -> Self {
        FilterError::ext("Failed to load TC action module")
    }
    /// As tc prints it: the message, then "We have an error talking to the kernel".
    pub fn into_tc(self) -> crate::tc::TcError {
        let m = match self {
            FilterError::Ext(m) => format!("Error: {m}.\n"),
            FilterError::Missing(t, m) => format!("Missing required attribute type {t}\nError: {m}.\n"),
            FilterError::Errno(e) => format!("RTNETLINK answers: {e}\n"),
            FilterError::Tc(m) => return crate::tc::TcError::tc(m),
        };
        crate::tc::TcError { msg: format!("{m}We have an error talking to the kernel\n"), code: 2 }
    }
}

/// How one `tc filter show` line starts and what the kinds' printers need to know.
pub struct DumpCtx<'a> {
    /// Opens the line's JSON object and prints `filter parent … pref … KIND chain 0 `.
    pub head: &'a dyn Fn(&mut crate::tc::Out),
    /// tc's `-p` (u32 prints its keys decoded).
    pub pretty: bool,
    /// tc's `-s`.
    pub stats: bool,
    /// The proto's ethertype (tc's `f_proto`).
    pub protocol: u16,
    /// The kernel dumps u32 hit counters (CONFIG_CLS_U32_PERF).
    pub u32_perf: bool,
    /// The dump's time (action ages).
    pub now: Instant,
    /// The owning qdisc's handle (flow's default baseclass).
    pub q_handle: u32,
    /// `tc filter get`: only the filter with this handle (`tfilter_notify` of one
    /// `fh`).
    pub only: Option<u32>,
    /// A terse dump (`tc -brief filter show`, TCA_DUMP_FLAGS_TERSE): only kinds with
    /// [`Classifier::terse_dump`] get here.
    pub terse: bool,
}

impl DumpCtx<'_> {
    /// One dumped filter with `handle`: the head, its options, the line end.
    /// `exts`: the filter's actions, whose legacy police the kernel also dumps as the
    /// filter's own statistics (`tcf_exts_dump_stats`), which `-s` prints after it.
    pub fn entry(
        &self,
        out: &mut crate::tc::Out,
        handle: u32,
        exts: Option<&action::Exts>,
        f: impl FnOnce(&mut crate::tc::Out),
    ) {
        if self.only.is_some_and(|h| h != handle) {
            return;
        }
        (self.head)(out);
        out.open_object(Some("options"));
        f(out);
        out.close_object();
        out.nl();
        if let Some(e) = exts {
            e.print_filter_stats(out);
        }
        out.close_object();
    }
    /// A dumped filter without TCA_OPTIONS (an empty fw filter).
    pub fn bare_filter(&self, out: &mut crate::tc::Out, handle: u32) {
        if self.only.is_none_or(|h| h == handle) {
            self.bare(out);
        }
    }
    /// A line without TCA_OPTIONS (the proto's own line).
    pub fn bare(&self, out: &mut crate::tc::Out) {
        (self.head)(out);
        out.nl();
        out.close_object();
    }
}

/// iproute2's `llproto_names` (lib/ll_proto.c): ethertype and name, in its order
/// (a number prints as its first name; a name parses case-insensitively).
const LL_PROTO: &[(u16, &str)] = &[
    (0x0060, "loop"),
    (0x0200, "pup"),
    (0x0201, "pupat"),
    (ETH_P_IP, "ip"),
    (0x0805, "x25"),
    (0x0806, "arp"),
    (0x08FF, "bpq"),
    (0x0a00, "ieeepup"),
    (0x0a01, "ieeepupat"),
    (0x6000, "dec"),
    (0x6001, "dna_dl"),
    (0x6002, "dna_rc"),
    (0x6003, "dna_rt"),
    (0x6004, "lat"),
    (0x6005, "diag"),
    (0x6006, "cust"),
    (0x6007, "sca"),
    (0x8035, "rarp"),
    (0x809B, "atalk"),
    (0x80F3, "aarp"),
    (0x8137, "ipx"),
    (ETH_P_IPV6, "ipv6"),
    (0x8863, "ppp_disc"),
    (0x8864, "ppp_ses"),
    (0x884c, "atmmpoa"),
    (0x8884, "atmfate"),
    (0x0001, "802_3"),
    (0x0002, "ax25"),
    (ETH_P_ALL, "all"),
    (0x0004, "802_2"),
    (0x0005, "snap"),
    (0x0006, "ddcmp"),
    (0x0007, "wan_ppp"),
    (0x0008, "ppp_mp"),
    (0x0009, "localtalk"),
    (0x000C, "can"),
    (0x0010, "ppptalk"),
    (0x0011, "tr_802_2"),
    (0x0015, "mobitex"),
    (0x0016, "control"),
    (0x0017, "irda"),
    (0x0018, "econet"),
    (0x88CA, "tipc"),
    (0x8892, "profinet"),
    (0x88A2, "aoe"),
    (0x88A4, "ethercat"),
    (0x8100, "802.1Q"),
    (0x88A8, "802.1ad"),
    (0x8847, "mpls_uc"),
    (0x8848, "mpls_mc"),
    (0x6558, "teb"),
    (0x8902, "cfm"),
    (0x8100, "802.1Q"),
    (0x88cc, "LLDP"),
    (ETH_P_IP, "ipv4"),
];

/// iproute2's `ll_proto_n2a` for the names tc prints.
pub fn proto_name(p: u16) -> String {
    match LL_PROTO.iter().find(|(id, _)| *id == p) {
        Some((_, n)) => n.to_string(),
        None => format!("[{p}]"),
    }
}

/// iproute2's `ll_proto_a2n`: a name (any case) or a number (`get_be16`, base 0).
pub fn proto_parse(s: &str) -> Option<u16> {
    if let Some((id, _)) = LL_PROTO.iter().find(|(_, n)| n.eq_ignore_ascii_case(s)) {
        return Some(*id);
    }
    crate::tc::units::parse_c_integer(s).and_then(|v| u16::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::FlowKey;

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a);
        m
    }

    #[test]
    fn ipv4_header_at_kernel_offsets() {
        let f = FlowKey { src: mapped([10, 0, 0, 1]), dst: mapped([10, 1, 2, 3]), sport: 1024, dport: 80, proto: 6 };
        let mut p = Packet::new(1, 1514).with_flow(f);
        p.tos = 0x10;
        let h = Headers::of(&p);
        assert_eq!(h.protocol, ETH_P_IP);
        assert_eq!(h.read_u32(0), Some(0x4510_05dc));
        assert_eq!(h.read_u32(8), Some(0x4006_0000));
        assert_eq!(h.read_u32(12), Some(0x0a00_0001));
        assert_eq!(h.read_u32(16), Some(0x0a01_0203));
        assert_eq!(h.read_u32(20), Some((1024 << 16) | 80));
        // Ethertype just before the network header, payload zeros, end of packet.
        assert_eq!(h.read_u32(-4), Some(0x0800));
        assert_eq!(h.read_u32(100), Some(0));
        assert_eq!(h.read_u32(1496), Some(0));
        assert_eq!(h.read_u32(1497), None);
    }

    /// An AF_PACKET frame (goldens/kernel-6.12/filter-raw-frames): the protocol is its
    /// ethertype, the network header starts at 14, a read needs all 4 bytes inside
    /// the frame, and negative offsets reach the Ethernet header.
    #[test]
    fn a_frame_is_read_from_its_own_bytes() {
        let head = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5];
        let h = Headers::of(&Packet::new(1, 100).with_frame(&head));
        assert_eq!(h.protocol, 0x88b5);
        assert_eq!(h.ip_proto, None);
        assert_eq!(h.read_u32(-8), Some(0x0200_0000));
        assert_eq!(h.read_u32(-4), Some(0x0001_88b5));
        assert_eq!(h.read_u32(-14), Some(0xffff_ffff));
        assert_eq!(h.read_u32(-15), None);
        // 86 bytes after the Ethernet header: a word at 82 is the last.
        assert_eq!(h.read_u32(82), Some(0));
        assert_eq!(h.read_u32(83), None);
        assert!(h.frame_ip().is_none());
        // 14 and 15 bytes: no word at the network header.
        assert_eq!(Headers::of(&Packet::new(1, 14).with_frame(&head)).read_u32(0), None);
        assert_eq!(Headers::of(&Packet::new(1, 17).with_frame(&head)).read_u32(0), None);
        assert_eq!(Headers::of(&Packet::new(1, 18).with_frame(&head)).read_u32(0), Some(0));
        // An IPv4 frame: its fields for flower.
        let mut v4 = head.to_vec();
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4.extend_from_slice(&[
            0x45, 0xb8, 0, 86, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0, 0, 53,
        ]);
        let h = Headers::of(&Packet::new(1, 100).with_frame(&v4));
        assert_eq!((h.protocol, h.ip_proto), (ETH_P_IP, Some(17)));
        let ip = h.frame_ip().unwrap();
        assert_eq!(
            (ip.src, ip.dst, ip.tos, ip.ports),
            (mapped([10, 0, 0, 1]), mapped([10, 0, 0, 2]), 0xb8, Some((1024, 53)))
        );
        // The 5-tuple wins over a frame, and a packet with neither reads nothing.
        let f = FlowKey { src: mapped([10, 0, 0, 9]), dst: mapped([10, 0, 0, 8]), sport: 1, dport: 2, proto: 6 };
        let h = Headers::of(&Packet::new(1, 100).with_frame(&head).with_flow(f));
        assert_eq!((h.protocol, h.read_u32(12)), (ETH_P_IP, Some(0x0a00_0009)));
        assert_eq!(Headers::of(&Packet::new(1, 100)).read_u32(-4), None);
    }

    #[test]
    fn ipv6_and_flowless() {
        let mut s = [0u8; 16];
        s[0] = 0x20;
        s[1] = 0x01;
        let f = FlowKey { src: s, dst: s, sport: 5, dport: 53, proto: 17 };
        let h = Headers::of(&Packet::new(1, 200).with_flow(f));
        assert_eq!(h.protocol, ETH_P_IPV6);
        assert_eq!(h.read_u32(8), Some(0x2001_0000));
        assert_eq!(h.read_u32(40), Some((5 << 16) | 53));
        assert_eq!(h.read_u32(4).map(|w| w & 0xFF00), Some(17 << 8));
        let h = Headers::of(&Packet::new(1, 200));
        assert_eq!(h.protocol, ETH_P_IP);
        assert_eq!(h.read_u32(0), None);
    }

    #[test]
    fn auto_pref_like_tcf_auto_prio() {
        let mut b = Chain::new(0);
        assert_eq!(b.auto_pref(), Ok(0xC000));
        let mk = |pref| Proto { pref, protocol: ETH_P_ALL, kind: Box::new(matchall::Matchall::default()) };
        b.protos.push(mk(1));
        assert_eq!(b.auto_pref(), Ok(0xC000));
        b.protos.push(mk(0xC000));
        assert_eq!(b.auto_pref(), Ok(0xBFFF));
        b.protos.insert(1, mk(0x8000));
        assert_eq!(b.auto_pref(), Err(()));
    }

    #[test]
    fn the_table_names_each_kind_once() {
        assert_eq!(KINDS, ["basic", "cgroup", "flow", "flower", "fw", "matchall", "route", "u32"]);
        for ops in CLASSIFIERS {
            assert_eq!((ops.init)(None, 1).unwrap().kind(), ops.kind);
            assert_eq!(lookup(ops.kind).map(|o| o.kind), Some(ops.kind));
        }
        assert!(lookup("rsvp").is_none());
    }

    #[test]
    fn kinds_log_only_their_own_bindings() {
        use action::{ActCtx, ActionTable};
        let mut t = ActionTable::default();
        let mut acts = ActCtx {
            table: &mut t,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
            est: None,
        };
        let fw = lookup("fw").unwrap();
        let mut tp = (fw.init)(None, 1).unwrap();
        for i in 1..=100 {
            let args: Vec<String> = format!("classid 1:{i:x}").split(' ').map(String::from).collect();
            let (h, o) = (fw.parse)(Some(&i.to_string()), ETH_P_ALL, &mut crate::tc::Args::new(&args)).unwrap();
            let mut binds = Binds::with_bind_tcf(&bind_every);
            tp.change(h, Some(&*o), None, None, &mut acts, &mut binds).unwrap();
            assert_eq!(binds.split(), (vec![], vec![0x10000 + i]));
        }
        let mut binds = Binds::default();
        assert_eq!(tp.delete(7, &mut binds), Ok(false));
        assert_eq!(binds.split(), (vec![0x10007], vec![]));
        // A request without options on an existing filter: EINVAL, nothing changed.
        let mut binds = Binds::default();
        assert!(tp.change(8, None, None, tp.get(8), &mut acts, &mut binds).is_err());
        assert_eq!(binds.split(), (vec![], vec![]));
        let mut binds = Binds::default();
        assert!(!tp.destroy(&mut binds));
        assert_eq!(binds.split().0.len(), 99);
    }

    #[test]
    fn protocol_names() {
        assert_eq!(proto_parse("802.1q"), Some(0x8100));
        assert_eq!(proto_name(0x8100), "802.1Q");
        assert_eq!(proto_parse("IP"), Some(ETH_P_IP));
        assert_eq!(proto_parse("0x800"), Some(ETH_P_IP));
        assert_eq!(proto_parse("foo"), None);
        assert_eq!(proto_parse("ipv4"), Some(ETH_P_IP));
        assert_eq!(proto_name(ETH_P_IP), "ip");
        assert_eq!((proto_parse("802_3"), proto_name(1)), (Some(1), "802_3".into()));
        assert_eq!(proto_name(0x88cc), "LLDP");
        assert_eq!(proto_name(0x1234), "[4660]");
    }
}
