//! `tc filter add|change|replace|delete|show`: tc/tc_filter.c (`tc_filter_modify`,
//! `tc_filter_list`, `print_filter`) on the tc side and net/sched/cls_api.c
//! (`tc_new_tfilter`, `tc_del_tfilter`, `tc_dump_tfilter`) on the kernel side, over
//! the blocks of [`crate::classify`]. Kinds are reached only through the
//! registration table ([`classify::lookup`], `tcf_proto_lookup_ops`) and the
//! [`classify::Classifier`] trait; their options pass through unread, and the classids
//! each operation binds or unbinds come back from the kind ([`classify::Binds`]).
//!
//! Chains: a block's chains live in creation order ([`classify::Block`]); `tc
//! chain add|del|get|show` mirror `tc_ctl_chain` / `tc_dump_chain`, with a chain
//! template when a kind follows (`tc_chain_tmplt_add`; only flower has templates:
//! [`classify::TmpltOps`]), which a new filter of the chain must match in kind
//! ("Chain template is set to a different filter kind") and the kind checks further.
//!
//! Shared blocks: `block N` names the netns's block N ([`classify::SharedBlocks`],
//! `TCM_IFINDEX_MAGIC_BLOCK`) instead of a device; a device whose hook is bound to
//! one refuses edits by device ("This filter block is shared…") and dumps it with
//! `block N` in place of the parent, as `tcf_fill_node` answers with no qdisc.
//!
//! Limits: the route classifier is refused by name
//! ([`classify::REFUSED`]).

use std::any::Any;

use crate::classify::action::ActCtx;
use crate::classify::{self, Binds, Block, DumpCtx, FilterError, Proto, SharedBlocks, ETH_P_ALL};
use crate::estimator::EstSpec;
use crate::qdisc::{tc_h_maj, tc_h_min, TC_H_ROOT};
use crate::tc::cmd::{get_tc_classid, Tc, TcOpts};
use crate::tc::{dev_word, duparg, invarg, matches, show, Args, Errno, Out, TcError};
use crate::tree::{Device, KernelVersion, Path};

const USAGE: &str = "Usage: tc filter [ add | del | change | replace | show ] [ dev STRING ]
       tc filter [ add | del | change | replace | show ] [ block BLOCK_INDEX ]
       tc filter get dev STRING parent CLASSID protocol PROTO handle FILTERID pref PRIO FILTER_TYPE
       tc filter get block BLOCK_INDEX protocol PROTO handle FILTERID pref PRIO FILTER_TYPE
       [ pref PRIO ] protocol PROTO [ chain CHAIN_INDEX ]
       [ estimator INTERVAL TIME_CONSTANT ]
       [ root | ingress | egress | parent CLASSID ]
       [ handle FILTERID ] [ [ FILTER_TYPE ] [ help | OPTIONS ] ]

       tc filter show [ dev STRING ] [ root | ingress | egress | parent CLASSID ]
       tc filter show [ block BLOCK_INDEX ]
Where:
FILTER_TYPE := { u32 | bpf | fw | route | etc. }
FILTERID := ... format depends on classifier, see there
OPTIONS := ... try tc filter add <desired FILTER_KIND> help
";

/// TC_H_CLSACT / TC_H_MIN_INGRESS / TC_H_MIN_EGRESS.
const INGRESS_PARENT: u32 = 0xFFFF_FFF2;
const EGRESS_PARENT: u32 = 0xFFFF_FFF3;

fn kerr(m: &str) -> TcError {
    FilterError::ext(m).into_tc()
}
/// A `tcf_chain_tp_find` refusal: its own message from 6.18 on, before that the
/// callers' "Filter with specified priority/protocol not found".
fn tp_find_err(k: KernelVersion, msg: &str) -> TcError {
    if k.tp_find_extack() {
        kerr(msg)
    } else {
        kerr("Filter with specified priority/protocol not found")
    }
}
fn kerrno(e: Errno) -> TcError {
    FilterError::Errno(e.strerror()).into_tc()
}

/// What a `tc_filter_modify` request asks the kernel (its netlink message type).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Req {
    /// RTM_NEWTFILTER with (NLM_F_CREATE, NLM_F_EXCL).
    NewFilter {
        create: bool,
        excl: bool,
    },
    DelFilter,
    /// RTM_NEWCHAIN (always NLM_F_CREATE | NLM_F_EXCL from tc).
    NewChain,
    DelChain,
}

/// `tc filter …`.
pub(crate) fn do_filter(tc: &mut Tc, argv: &[String], o: TcOpts) -> Result<String, TcError> {
    let Some(cmd) = argv.first() else { return list(tc, &[], o, false) };
    let rest = &argv[1..];
    let req = if matches(cmd, "add") {
        Req::NewFilter { create: true, excl: true }
    } else if matches(cmd, "change") {
        Req::NewFilter { create: false, excl: false }
    } else if matches(cmd, "replace") {
        Req::NewFilter { create: true, excl: false }
    } else if matches(cmd, "delete") {
        Req::DelFilter
    } else if matches(cmd, "get") {
        return get(tc, rest, o, false);
    } else if matches(cmd, "list") || matches(cmd, "show") || matches(cmd, "lst") {
        return list(tc, rest, o, false);
    } else if matches(cmd, "help") {
        tc.warn.push_str(USAGE);
        return Ok(String::new());
    } else {
        return Err(TcError::usage(format!("Command \"{cmd}\" is unknown, try \"tc filter help\".\n")));
    };
    modify(tc, req, rest, o.raw).map(|_| String::new())
}

const CHAIN_USAGE: &str = "Usage: tc chain [ add | del | get | show ] [ dev STRING ]
       tc chain [ add | del | get | show ] [ block BLOCK_INDEX ] ]
";

/// `tc chain …` (tc_filter.c's `do_chain`).
pub(crate) fn do_chain(tc: &mut Tc, argv: &[String], o: TcOpts) -> Result<String, TcError> {
    let Some(cmd) = argv.first() else { return list(tc, &[], o, true) };
    let rest = &argv[1..];
    if matches(cmd, "add") {
        modify(tc, Req::NewChain, rest, o.raw).map(|_| String::new())
    } else if matches(cmd, "delete") {
        modify(tc, Req::DelChain, rest, o.raw).map(|_| String::new())
    } else if matches(cmd, "get") {
        get(tc, rest, o, true)
    } else if matches(cmd, "list") || matches(cmd, "show") || matches(cmd, "lst") {
        list(tc, rest, o, true)
    } else if matches(cmd, "help") {
        tc.warn.push_str(CHAIN_USAGE);
        Ok(String::new())
    } else {
        Err(TcError::usage(format!("Command \"{cmd}\" is unknown, try \"tc chain help\".\n")))
    }
}

/// What `tc_filter_modify` and `tc_filter_get` read before the kind.
struct Request<'a> {
    dev: Option<&'a str>,
    /// `block N` (never 0).
    block: Option<u32>,
    parent: u32,
    fhandle: Option<&'a str>,
    prio: u32,
    protocol: Option<u16>,
    chain: Option<u32>,
    /// TCA_RATE (`estimator …`): what the filter's new actions get.
    est: Option<EstSpec>,
    /// The first word that is none of the above: the kind (its options follow).
    kind: Option<&'a str>,
}

/// The words before the kind, as `tc_filter_modify` (`modify`: `estimator` is one
/// of them; `raw`: `tc -r`) and `tc_filter_get` (an empty word is an invalid kind)
/// read them. None after `help` (printed).
fn parse_request<'a>(tc: &mut Tc, a: &mut Args<'a>, modify: bool, raw: bool) -> Result<Option<Request<'a>>, TcError> {
    let mut r = Request {
        dev: None,
        block: None,
        parent: 0,
        fhandle: None,
        prio: 0,
        protocol: None,
        chain: None,
        est: None,
        kind: None,
    };
    let exclusive = || TcError::usage("Error: \"dev\" and \"block\" are mutually exclusive\n");
    while let Some(w) = a.next() {
        match w {
            "dev" => {
                let v = a.value()?;
                if r.dev.is_some() {
                    return Err(duparg("dev", v));
                }
                if r.block.is_some() {
                    return Err(exclusive());
                }
                r.dev = dev_word(v);
            }
            w if matches(w, "block") => {
                let v = a.value()?;
                if r.block.is_some() {
                    return Err(duparg("block", v));
                }
                if r.dev.is_some() {
                    return Err(exclusive());
                }
                r.block = Some(block_index(v)?);
            }
            "root" | "ingress" | "egress" => {
                if r.parent != 0 {
                    return Err(TcError::usage(format!("Error: \"{w}\" is duplicate parent ID\n")));
                }
                r.parent = match w {
                    "root" => TC_H_ROOT,
                    "ingress" => INGRESS_PARENT,
                    _ => EGRESS_PARENT,
                };
            }
            "parent" => {
                let v = a.value()?;
                if r.parent != 0 {
                    return Err(duparg("parent", v));
                }
                r.parent = get_tc_classid(v).ok_or_else(|| invarg("Invalid parent ID", v))?;
            }
            "handle" => {
                let v = a.value()?;
                if r.fhandle.is_some() {
                    return Err(duparg("handle", v));
                }
                r.fhandle = Some(v);
            }
            w if matches(w, "preference") || matches(w, "priority") => {
                let v = a.value()?;
                if r.prio != 0 {
                    return Err(duparg("priority", v));
                }
                r.prio = crate::tc::units::get_u32(v)
                    .filter(|&p| p <= 0xFFFF)
                    .ok_or_else(|| invarg("invalid priority value", v))?;
            }
            w if matches(w, "protocol") => {
                let v = a.value()?;
                if r.protocol.is_some() {
                    return Err(duparg("protocol", v));
                }
                r.protocol = Some(classify::proto_parse(v).ok_or_else(|| invarg("invalid protocol", v))?);
            }
            w if matches(w, "chain") => {
                let v = a.value()?;
                if r.chain.is_some() {
                    return Err(duparg("chain", v));
                }
                r.chain = Some(crate::tc::units::get_u32(v).ok_or_else(|| invarg("invalid chain index value", v))?);
            }
            w if modify && matches(w, "estimator") => {
                let res = crate::estimator::parse(a, &mut r.est, raw);
                tc.warn.push_str(&std::mem::take(&mut a.notes));
                res?;
            }
            w if matches(w, "help") => {
                tc.warn.push_str(USAGE);
                return Ok(None);
            }
            "" if !modify => return Err(invarg("invalid filter name", "")),
            k => {
                r.kind = Some(k);
                break;
            }
        }
    }
    Ok(Some(r))
}

/// `tc_filter_modify` + the kernel's `tc_new_tfilter` / `tc_del_tfilter` /
/// `tc_ctl_chain`.
fn modify(tc: &mut Tc, req: Req, argv: &[String], raw: bool) -> Result<(), TcError> {
    let mut a = Args::new(argv);
    a.set_links(tc.link_names());
    let Some(r) = parse_request(tc, &mut a, true, raw)? else { return Ok(()) };
    let Request { dev, block, parent, fhandle, prio, chain, est, kind, .. } = r;
    // tc_filter_modify: a new filter's protocol defaults to all.
    let create = matches!(req, Req::NewFilter { create: true, .. });
    let protocol = r.protocol.unwrap_or(if create { ETH_P_ALL } else { 0 });
    let target = match (dev, block) {
        (Some(name), _) => Some(Target::Dev(tc.dev_index(name)?)),
        (None, Some(b)) => Some(Target::Block(b)),
        (None, None) => None,
    };
    if let Some((k, why)) = kind.and_then(|k| classify::REFUSED.iter().find(|(r, _)| *r == k)) {
        return Err(TcError::tc(format!("qdisc-lab: the {k} classifier is not supported: {why}\n")));
    }
    // q->parse_fopt (no options: a kind iproute2 has no module for, or no kind).
    let ops = kind.and_then(classify::lookup);
    let parsed = match ops {
        Some(ops) => (ops.parse)(fhandle, protocol, &mut a).map(|(h, o)| (h, Some(o))),
        None => Ok((0, None)),
    };
    // What tc printed while parsing comes first, error or not.
    tc.warn.push_str(&std::mem::take(&mut a.notes));
    let (handle, kopts) = match kind {
        Some(_) if ops.is_some() => parsed?,
        Some(k) => {
            if let Some(w) = a.peek() {
                return Err(TcError::tc(format!("Unknown filter \"{k}\", hence option \"{w}\" is unparsable\n")));
            }
            (0, None)
        }
        None => {
            if fhandle.is_some() {
                return Err(TcError::usage("Must specify filter type when using \"handle\"\n"));
            }
            (0, None)
        }
    };
    let Some(target) = target else { return Err(kerrno(Errno::ENODEV)) };
    let pref = prio as u16;
    // The kinds log the classids their filters start and stop naming; the qdisc
    // binds and unbinds them after the operation, error or not.
    let mut binds = Binds::default();
    let r = match req {
        Req::NewFilter { create, excl } => {
            let ko = kopts.as_deref();
            new_tfilter(tc, target, parent, pref, protocol, chain, kind, handle, ko, est, create, excl, &mut binds)
        }
        Req::DelFilter => del_tfilter(tc, target, parent, pref, protocol, chain, kind, handle, &mut binds),
        Req::NewChain | Req::DelChain => {
            ctl_chain(tc, target, parent, chain.unwrap_or(0), kind, kopts.as_deref(), protocol, req, &mut binds)
        }
    };
    if let Ok((at, _)) = find_block(tc, target, parent) {
        // The chains' references after the change (actions' and filters').
        let gotos = tc.actions.gotos;
        block_mut(tc, &at).settle(gotos);
        let (unbound, bound) = binds.split();
        if let At::Qdisc { di, path, .. } = &at {
            if !(unbound.is_empty() && bound.is_empty()) {
                rebind(tc, *di, path, &unbound, &bound);
            }
        }
    }
    r
}

/// tc's `get_u32` of a `block` value (0 is refused too).
fn block_index(v: &str) -> Result<u32, TcError> {
    crate::tc::units::get_u32(v).filter(|&b| b != 0).ok_or_else(|| invarg("invalid block index value", v))
}

/// What a request names: a device (`tcm_ifindex`) or a shared block by index
/// (`TCM_IFINDEX_MAGIC_BLOCK` + `tcm_block_index`).
#[derive(Clone, Copy)]
enum Target {
    Dev(usize),
    Block(u32),
}

impl Target {
    /// The kernel that answers: the device's, or the netns's for a block.
    fn kernel(self, tc: &Tc) -> KernelVersion {
        match self {
            Target::Dev(di) => tc.devices[di].kernel,
            Target::Block(_) => tc.kernel(),
        }
    }
}

/// Where a request's block lives: a qdisc's own (device, qdisc path, class minor —
/// 0 for the qdisc's block), or the netns's shared block by index.
enum At {
    Qdisc { di: usize, path: Path, minor: u32 },
    Shared(u32),
}

/// `tcf_block_find`: the block a request names and the resolved parent. By index
/// (`__tcf_block_find`'s `tcf_block_refcnt_get`) no qdisc is looked at and the
/// parent stays as given; by device, `__tcf_qdisc_find` + `__tcf_qdisc_cl_find`,
/// and a hook bound to a shared block refuses.
fn find_block(tc: &Tc, target: Target, parent: u32) -> Result<(At, u32), TcError> {
    let di = match target {
        Target::Dev(di) => di,
        Target::Block(i) => {
            tc.blocks.get(i).ok_or_else(|| kerr("Block of given index was not found"))?;
            return Ok((At::Shared(i), parent));
        }
    };
    let d = &tc.devices[di];
    let (path, parent) = if parent == 0 {
        (Vec::new(), d.root.handle)
    } else {
        let p = d.lookup(tc_h_maj(parent)).ok_or_else(|| kerr("Parent Qdisc doesn't exists"))?;
        (p, parent)
    };
    let n = d.node(&path);
    let c = n.q.as_classful().ok_or_else(|| kerr("Qdisc not classful"))?;
    if c.block(0).is_none() {
        return Err(FilterError::Ext("Class doesn't support blocks".into()).into_tc());
    }
    let minor = tc_h_min(parent);
    if minor != 0 && !c.find(minor) {
        return Err(kerr("Specified class doesn't exist"));
    }
    if !c.hook_block(minor) {
        return Err(c.no_block_extack().map_or_else(|| kerrno(Errno::EINVAL), kerr));
    }
    if c.block_index(minor) != 0 {
        return Err(kerr("This filter block is shared. Please use the block index to manipulate the filters"));
    }
    Ok((At::Qdisc { di, path, minor }, parent))
}

/// The block at `at` (which [`find_block`] checked).
fn block_in<'a>(devices: &'a mut [Device], blocks: &'a mut SharedBlocks, at: &At) -> &'a mut Block {
    match at {
        At::Qdisc { di, path, minor } => {
            let n = devices[*di].node_mut(path);
            n.q.as_classful_mut().and_then(|c| c.block_mut(*minor)).expect("block checked")
        }
        At::Shared(i) => blocks.get_mut(*i).expect("block checked"),
    }
}

fn block_mut<'a>(tc: &'a mut Tc, at: &At) -> &'a mut Block {
    block_in(&mut tc.devices, &mut tc.blocks, at)
}

/// The block that keeps the kinds' qdisc-wide state for `at` (`tc_u_common_ptr`:
/// the qdisc's own block, or a shared block itself, which has no qdisc).
fn state_block<'a>(tc: &'a mut Tc, at: &At) -> &'a mut Block {
    match at {
        At::Qdisc { di, path, .. } => block_mut(tc, &At::Qdisc { di: *di, path: path.clone(), minor: 0 }),
        At::Shared(_) => block_mut(tc, at),
    }
}

/// The request's chain index (0 without `chain`), at most `TC_ACT_EXT_VAL_MASK`.
fn check_chain(chain: Option<u32>) -> Result<u32, TcError> {
    match chain.unwrap_or(0) {
        c if c > classify::CHAIN_INDEX_MAX => Err(kerr("Specified chain index exceeds upper limit")),
        c => Ok(c),
    }
}

/// `tcf_bind_filter` / `tcf_unbind_filter` for what an operation changed.
fn rebind(tc: &mut Tc, di: usize, path: &[u32], before: &[u32], after: &[u32]) {
    let n = tc.devices[di].node_mut(path);
    let Some(c) = n.q.as_classful_mut() else { return };
    let (mut i, mut j) = (0, 0);
    while i < before.len() || j < after.len() {
        match (before.get(i), after.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
            }
            (Some(x), y) if y.is_none_or(|y| x < y) => {
                c.unbind_filter(*x);
                i += 1;
            }
            (_, Some(y)) => {
                c.bind_filter(*y);
                j += 1;
            }
            _ => break,
        }
    }
}

/// The qdisc-wide state of the kinds (u32's common) that went away with each
/// kind's last proto is dropped.
fn drop_shared(tc: &mut Tc, at: &At, kinds: impl IntoIterator<Item = &'static str>) {
    for kind in kinds {
        state_block(tc, at).drop_shared(kind);
    }
}

#[allow(clippy::too_many_arguments)]
fn new_tfilter(
    tc: &mut Tc,
    target: Target,
    parent: u32,
    pref: u16,
    protocol: u16,
    chain: Option<u32>,
    kind: Option<&str>,
    handle: u32,
    ko: Option<&dyn Any>,
    est: Option<EstSpec>,
    create: bool,
    excl: bool,
    binds: &mut Binds,
) -> Result<(), TcError> {
    let prio_allocate = pref == 0;
    if prio_allocate && !create {
        return Err(kerr("Invalid filter command with priority of zero"));
    }
    let kernel = target.kernel(tc);
    // tc_new_tfilter's is_qdisc_ingress, on the parent as the request names it.
    let at_ingress = parent & 0xFFFF == 0xFFF2;
    let (at, parent) = find_block(tc, target, parent)?;
    let shared = kind.and_then(|k| state_block(tc, &at).shared(k));
    let b = block_mut(tc, &at);
    b.classid = parent;
    let ci = check_chain(chain)?;
    // tcf_chain_get(…, create): the chain exists from here on (Block::settle drops
    // it again if the request leaves it unused).
    let ch = b.chain_get(ci);
    // tcf_chain_tp_find.
    let mut pref = pref;
    let found = if prio_allocate {
        if ch.protos.iter().any(|p| p.pref == 0x8000) {
            return Err(tp_find_err(kernel, "Lowest ID from auto-alloc range already in use"));
        }
        None
    } else {
        match ch.find(pref) {
            Ok(i) => {
                if ch.protos[i].protocol != protocol && protocol != 0 {
                    return Err(tp_find_err(kernel, "Protocol mismatch for filter with specified priority"));
                }
                Some(i)
            }
            Err(_) => None,
        }
    };
    let mut created = false;
    let idx = match found {
        Some(i) => i,
        None => {
            let Some(k) = kind.filter(|_| protocol != 0) else {
                return Err(kerr("Filter kind and protocol must be specified"));
            };
            if !create {
                return Err(kerr("Need both RTM_NEWTFILTER and NLM_F_CREATE to create a new filter"));
            }
            if prio_allocate {
                pref = ch.auto_pref().map_err(|_| kerr("Lowest ID from auto-alloc range already in use"))?;
            }
            // tcf_proto_lookup_ops + tcf_proto_create.
            let ops = classify::lookup(k).ok_or_else(|| kerr("TC classifier not found"))?;
            let kind = (ops.init)(shared.clone(), pref).map_err(FilterError::into_tc)?;
            let new_shared = kind.shared().filter(|_| shared.is_none());
            let i = ch.find(pref).unwrap_err();
            ch.protos.insert(i, Proto { pref, protocol, kind });
            if let Some(s) = new_shared {
                state_block(tc, &at).keep_shared(ops.kind, s);
            }
            created = true;
            i
        }
    };
    let now = tc.now;
    let Tc { devices, actions, blocks, .. } = tc;
    let available = |k| kernel.has_action(k);
    let mut acts = ActCtx { table: actions, available: &available, kernel, now, at_ingress, est };
    let mut op = |b: &mut Block, binds: &mut Binds| {
        let acts = &mut acts;
        let ch = b.chain_mut(ci).expect("chain got");
        let tp = &mut ch.protos[idx];
        if kind.is_some_and(|k| k != tp.kind.kind()) {
            return Err(kerr("Specified filter kind does not match existing one"));
        }
        let fh = tp.kind.get(handle);
        match fh {
            None if !create => return Err(kerr("Need both RTM_NEWTFILTER and NLM_F_CREATE to create a new filter")),
            Some(_) if excl => return Err(kerr("Filter already exists")),
            _ => {}
        }
        let tmplt = ch.tmplt.as_ref();
        if tmplt.is_some_and(|t| t.kind != tp.kind.kind()) {
            return Err(kerr("Chain template is set to a different filter kind"));
        }
        // A request without a kind on an existing proto: the kind's change with no options.
        let keys = tmplt.map(|t| &*t.keys as &dyn Any);
        tp.kind.change(handle, ko, keys, fh, acts, binds).map_err(FilterError::into_tc)?;
        Ok(tp.kind.keeps_dst())
    };
    // tcf_bind_filter asks the qdisc that owns the block (a shared block has none).
    let r = match &at {
        At::Qdisc { di, path, minor } => {
            let c = devices[*di].node_mut(path).q.as_classful_mut().expect("classful checked");
            let mut r = Err(kerrno(Errno::EINVAL));
            c.with_block(*minor, &mut |b, bind_tcf| {
                let mut own = Binds::with_bind_tcf(bind_tcf);
                r = op(b, &mut own);
                binds.append(&mut own);
            });
            r
        }
        At::Shared(i) => op(blocks.get_mut(*i).expect("block checked"), binds),
    };
    if r.is_err() && created {
        let gone = block_mut(tc, &at).destroy(ci, idx, binds);
        drop_shared(tc, &at, gone);
    }
    // tcf_block_netif_keep_dst: from now on the device keeps each packet's route for
    // its qdiscs (not for the ingress/clsact qdisc, ffff:, whose blocks are skipped).
    // A shared block is bound only to ingress and clsact, whose routes are not kept.
    if r == Ok(true) && parent >> 16 != 0xFFFF {
        if let At::Qdisc { di, .. } = &at {
            tc.devices[*di].keep_dst = true;
        }
    }
    r.map(|_| ())
}

#[allow(clippy::too_many_arguments)]
fn del_tfilter(
    tc: &mut Tc,
    target: Target,
    parent: u32,
    pref: u16,
    protocol: u16,
    chain: Option<u32>,
    kind: Option<&str>,
    handle: u32,
    binds: &mut Binds,
) -> Result<(), TcError> {
    if pref == 0 && (protocol != 0 || handle != 0 || kind.is_some()) {
        return Err(kerr("Cannot flush filters with protocol, handle or kind set"));
    }
    let kernel = target.kernel(tc);
    let (at, _) = find_block(tc, target, parent)?;
    let ci = check_chain(chain)?;
    let b = block_mut(tc, &at);
    // tcf_chain_get(…, no create): a chain only actions hold is found too.
    let Some(ch) = b.chain_mut(ci) else {
        if pref == 0 {
            return Ok(());
        }
        return Err(kerr("Cannot find specified filter chain"));
    };
    let mut gone = Vec::new();
    if pref == 0 {
        gone = b.flush(ci, binds);
    } else {
        let i = ch.find(pref).map_err(|_| kerr("Filter with specified priority/protocol not found"))?;
        let tp = &mut ch.protos[i];
        if tp.protocol != protocol && protocol != 0 {
            return Err(tp_find_err(kernel, "Protocol mismatch for filter with specified priority"));
        }
        if kind.is_some_and(|k| k != tp.kind.kind()) {
            return Err(kerr("Specified filter kind does not match existing one"));
        }
        if handle == 0 {
            gone.extend(b.destroy(ci, i, binds));
        } else {
            tp.kind.get(handle).ok_or_else(|| kerr("Specified filter handle not found"))?;
            if tp.kind.delete(handle, binds).map_err(FilterError::into_tc)? {
                gone.extend(b.destroy(ci, i, binds));
            }
        }
    }
    drop_shared(tc, &at, gone);
    Ok(())
}

/// The kernel's `tc_ctl_chain` for RTM_NEWCHAIN / RTM_DELCHAIN, with a template
/// when a kind follows `chain N` (`tc_chain_tmplt_add`: flower's, the only kind with
/// templates).
#[allow(clippy::too_many_arguments)]
fn ctl_chain(
    tc: &mut Tc,
    target: Target,
    parent: u32,
    ci: u32,
    kind: Option<&str>,
    ko: Option<&dyn Any>,
    protocol: u16,
    req: Req,
    binds: &mut Binds,
) -> Result<(), TcError> {
    let (at, _) = find_block(tc, target, parent)?;
    let ci = check_chain(Some(ci))?;
    let b = block_mut(tc, &at);
    let exists = b.chain(ci).map(|c| !c.held_by_acts_only());
    if req == Req::NewChain {
        if exists == Some(true) {
            return Err(kerr("Filter chain already exists"));
        }
        let Some(k) = kind else {
            b.chain_get(ci).explicit = true;
            return Ok(());
        };
        // tc_chain_tmplt_add: the chain is held while the template is tried, and
        // dropped again when it fails (Block::settle).
        b.chain_get(ci);
        let ops = classify::lookup(k).ok_or_else(|| kerr("TC classifier not found"))?;
        let t = ops.tmplt.ok_or_else(|| kerr("Chain templates are not supported with specified classifier"))?;
        let keys = (t.create)(ko, protocol).map_err(FilterError::into_tc)?;
        let ch = b.chain_get(ci);
        ch.tmplt = Some(classify::Tmplt { kind: ops.kind, ops: t, keys });
        ch.explicit = true;
        return Ok(());
    }
    if exists != Some(true) {
        return Err(kerr("Cannot find specified filter chain"));
    }
    // Flush, then drop the explicit reference; actions may still hold the chain.
    let gone = b.flush(ci, binds);
    b.chain_mut(ci).expect("chain exists").explicit = false;
    drop_shared(tc, &at, gone);
    Ok(())
}

/// `tc_filter_get` (RTM_GETTFILTER, or RTM_GETCHAIN for `tc chain get`) + the
/// kernel's `tc_get_tfilter` / `tc_ctl_chain`: the one filter (or chain) as a dump
/// prints it, with its parent, protocol, pref and chain always named.
fn get(tc: &mut Tc, argv: &[String], o: TcOpts, chain_req: bool) -> Result<String, TcError> {
    let mut a = Args::new(argv);
    let Some(r) = parse_request(tc, &mut a, false, false)? else { return Ok(String::new()) };
    let Request { dev, block, parent, fhandle, prio, protocol, chain, kind, .. } = r;
    if !chain_req {
        if protocol.is_none() {
            return Err(TcError::usage("Must specify filter protocol\n"));
        }
        if prio == 0 {
            return Err(TcError::usage("Must specify filter priority\n"));
        }
    }
    if parent == 0 {
        return Err(TcError::usage("Must specify filter parent\n"));
    }
    if !chain_req && kind.is_none() {
        return Err(TcError::usage("Must specify filter type\n"));
    }
    let target = match (dev, block) {
        (Some(name), _) => Target::Dev(tc.dev_index(name)?),
        (None, Some(b)) => Target::Block(b),
        (None, None) => {
            return Err(TcError::usage("Must specify netdevice \"dev\" or block index \"block\"\n"));
        }
    };
    let mut handle = 0;
    if !chain_req {
        let k = kind.expect("checked");
        if let Some((k, why)) = classify::REFUSED.iter().find(|(r, _)| *r == k) {
            return Err(TcError::tc(format!("qdisc-lab: the {k} classifier is not supported: {why}\n")));
        }
        if let Some(ops) = classify::lookup(k) {
            let parsed = (ops.parse)(fhandle, protocol.unwrap_or(0), &mut a);
            tc.warn.push_str(&std::mem::take(&mut a.notes));
            handle = parsed?.0;
        } else if let Some(w) = a.peek() {
            return Err(TcError::tc(format!("Unknown filter \"{k}\", hence option \"{w}\" is unparsable\n")));
        }
        if fhandle.is_none() {
            return Err(TcError::usage("Must specify filter \"handle\"\n"));
        }
    }
    if let Some(w) = a.next() {
        if matches(w, "help") {
            tc.warn.push_str(USAGE);
        }
        return Err(TcError::usage(format!("Garbage instead of arguments \"{w} ...\". Try \"tc filter help\".\n")));
    }
    let kernel = target.kernel(tc);
    let (at, parent) = find_block(tc, target, parent)?;
    let ci = check_chain(chain)?;
    let (b, tcm) = block_at(tc, &at, parent);
    // tc's filter_block_index: a request by block leaves the block out.
    let shown = Shown { parent: 0, block: block.unwrap_or(0), prio: 0, protocol: 0, chain: None };
    let mut out = if o.json { Out::json(o.pretty) } else { Out::text() };
    out = out.with_flags(o.details, o.raw, o.iec, o.oneline).with_stats(o.stats > 0);
    if chain_req {
        let Some(ch) = b.chain(ci).filter(|c| !c.held_by_acts_only()) else {
            return Err(kerr("Cannot find specified filter chain"));
        };
        out.start_top();
        print_chain(&mut out, &shown, chain_owner(b, tcm), ch);
        out.end_top();
        return Ok(out.into_string());
    }
    let Some(ch) = b.chain(ci) else { return Err(kerr("Cannot find specified filter chain")) };
    let protocol = protocol.unwrap_or(0);
    let tp = match ch.find(prio as u16) {
        Ok(i) if ch.protos[i].protocol == protocol || protocol == 0 => &ch.protos[i],
        Ok(_) => return Err(tp_find_err(kernel, "Protocol mismatch for filter with specified priority")),
        Err(_) => return Err(kerr("Filter with specified priority/protocol not found")),
    };
    if kind.is_some_and(|k| k != tp.kind.kind()) {
        return Err(kerr("Specified filter kind does not match existing one"));
    }
    let fh = tp.kind.get(handle).ok_or_else(|| kerr("Specified filter handle not found"))?;
    out.start_top();
    dump_proto(tc, kernel, b, tp, ch.index, &shown, tcm, Some(fh), o, &mut out);
    out.end_top();
    Ok(out.into_string())
}

/// The block at `at` and what its messages name (`tcf_fill_node`): the parent a
/// qdisc's block answers with, or a shared block's index (no qdisc).
fn block_at<'a>(tc: &'a Tc, at: &At, parent: u32) -> (&'a Block, Tcm) {
    match at {
        At::Qdisc { di, path, minor } => {
            let n = tc.devices[*di].node(path);
            (n.q.as_classful().and_then(|c| c.block(*minor)).expect("block checked"), Tcm::Parent(parent))
        }
        At::Shared(i) => (tc.blocks.get(*i).expect("block checked"), Tcm::Block(*i)),
    }
}

/// `tc_filter_list` + the kernel's `tc_dump_tfilter` (or, for `tc chain show`,
/// `tc_dump_chain`) + `print_filter`.
fn list(tc: &mut Tc, argv: &[String], o: TcOpts, chains: bool) -> Result<String, TcError> {
    let mut a = Args::new(argv);
    let mut dev: Option<&str> = None;
    let mut block: Option<u32> = None;
    let mut parent = 0u32;
    let mut prio = 0u32;
    let mut protocol = 0u16;
    let mut chain: Option<u32> = None;
    while let Some(w) = a.next() {
        match w {
            "dev" => {
                let v = a.value()?;
                if dev.is_some() {
                    return Err(duparg("dev", v));
                }
                if block.is_some() {
                    return Err(TcError::usage("Error: \"dev\" cannot be used in the same time as \"block\"\n"));
                }
                dev = dev_word(v);
            }
            w if matches(w, "block") => {
                let v = a.value()?;
                if block.is_some() {
                    return Err(duparg("block", v));
                }
                if dev.is_some() {
                    return Err(TcError::usage("Error: \"block\" cannot be used in the same time as \"dev\"\n"));
                }
                block = Some(block_index(v)?);
            }
            "root" | "ingress" | "egress" => {
                if parent != 0 {
                    return Err(TcError::usage(format!("Error: \"{w}\" is duplicate parent ID\n")));
                }
                parent = match w {
                    "root" => TC_H_ROOT,
                    "ingress" => INGRESS_PARENT,
                    _ => EGRESS_PARENT,
                };
            }
            "parent" => {
                let v = a.value()?;
                if parent != 0 {
                    return Err(duparg("parent", v));
                }
                parent = get_tc_classid(v).ok_or_else(|| invarg("invalid parent ID", v))?;
            }
            "handle" => {
                a.value()?;
            }
            w if matches(w, "preference") || matches(w, "priority") => {
                let v = a.value()?;
                if prio != 0 {
                    return Err(duparg("priority", v));
                }
                prio = crate::tc::units::get_u32(v).ok_or_else(|| invarg("invalid preference", v))?;
            }
            w if matches(w, "protocol") => {
                let v = a.value()?;
                if protocol != 0 {
                    return Err(duparg("protocol", v));
                }
                protocol = classify::proto_parse(v).ok_or_else(|| invarg("invalid protocol", v))?;
            }
            w if matches(w, "chain") => {
                let v = a.value()?;
                if chain.is_some() {
                    return Err(duparg("chain", v));
                }
                chain = Some(crate::tc::units::get_u32(v).ok_or_else(|| invarg("invalid chain index value", v))?);
            }
            w if matches(w, "help") => tc.warn.push_str(USAGE),
            w => return Err(TcError::usage(format!(" What is \"{w}\"? Try \"tc filter help\"\n"))),
        }
    }
    let mut kernel = tc.kernel();
    let found = match (dev, block) {
        (Some(name), _) => {
            let di = tc.dev_index(name)?;
            kernel = tc.devices[di].kernel;
            dump_block(tc, di, parent)
        }
        (None, Some(b)) => {
            // tc_qdisc_block_exists: some qdisc of the netns dumps the index.
            if !tc.bound_blocks().contains(&b) {
                return Err(TcError::tc(format!("Cannot find block \"{b}\"\n")));
            }
            tc.blocks.get(b).map(|blk| (blk, Tcm::Block(b)))
        }
        (None, None) => None,
    };
    let mut out = if o.json { Out::json(o.pretty) } else { Out::text() };
    out = out.with_flags(o.details, o.raw, o.iec, o.oneline).with_stats(o.stats > 0);
    out.start_top();
    let mut complete = true;
    if let Some((b, tcm)) = found {
        let shown = Shown { parent, block: block.unwrap_or(0), prio, protocol, chain };
        if chains {
            dump_chains(b, &shown, chain_owner(b, tcm), &mut out);
        } else {
            complete = dump(tc, kernel, b, &shown, tcm, o, &mut out);
        }
    }
    // tc closes its JSON array on a failed dump too (delete_json_obj).
    out.end_top();
    if !complete {
        tc.printed = out.into_string();
        return Err(TcError::tc("Error: Buffer too small for object.\nDump terminated\n"));
    }
    Ok(out.into_string())
}

/// The block a dump request by device names (`tc_dump_tfilter`'s lookup, which
/// answers nothing rather than an error) and what its messages name: the block's
/// `classid` as parent, or — a hook bound to a shared block — that block's index.
fn dump_block(tc: &Tc, di: usize, parent: u32) -> Option<(&Block, Tcm)> {
    let d = &tc.devices[di];
    let path = if parent == 0 { Vec::new() } else { d.lookup(tc_h_maj(parent))? };
    let n = d.node(&path);
    let c = n.q.as_classful()?;
    c.block(0)?;
    let minor = tc_h_min(parent);
    if minor != 0 && !c.find(minor) {
        return None;
    }
    if !c.hook_block(minor) {
        return None;
    }
    match c.block_index(minor) {
        0 => c.block(minor).map(|b| (b, Tcm::Parent(b.classid))),
        i => tc.blocks.get(i).map(|b| (b, Tcm::Block(i))),
    }
}

/// What a dumped message names (`tcm_ifindex`, `tcm_parent`, `tcm_block_index`):
/// a qdisc's block by parent, or a shared block by index (`TCM_IFINDEX_MAGIC_BLOCK`).
#[derive(Clone, Copy)]
enum Tcm {
    Parent(u32),
    Block(u32),
}

/// What the request named, which `print_filter` leaves out of each line (its
/// `filter_parent`, `filter_block_index`, `filter_prio`, `filter_protocol`,
/// `filter_chain_index`; 0 / None: not named).
struct Shown {
    parent: u32,
    block: u32,
    prio: u32,
    protocol: u16,
    chain: Option<u32>,
}

/// `print_filter`'s `block N`, or its `parent …` / `root` / `ingress` / `egress`,
/// unless the request named it.
fn print_owner(out: &mut Out, shown: &Shown, tcm: Tcm) {
    let tcm_parent = match tcm {
        Tcm::Block(b) => {
            if shown.block != b {
                out.uint("block", format_args!("block {b} "), b as u64);
            }
            return;
        }
        Tcm::Parent(p) => p,
    };
    if shown.parent != 0 && shown.parent == tcm_parent {
        return;
    }
    if tcm_parent == TC_H_ROOT {
        out.boolean("root", format_args!("root "), true);
    } else if tcm_parent == INGRESS_PARENT {
        out.boolean("ingress", format_args!("ingress "), true);
    } else if tcm_parent == EGRESS_PARENT {
        out.boolean("egress", format_args!("egress "), true);
    } else {
        let p = show::classid(tcm_parent);
        out.string("parent", format_args!("parent {p} "), &p);
    }
}

/// What a chain message names (`tc_chain_fill_node`): the qdisc's handle for a
/// block of its own (`block->q`), the index for a shared one.
fn chain_owner(b: &Block, tcm: Tcm) -> Tcm {
    match tcm {
        Tcm::Parent(_) => Tcm::Parent(b.q_handle),
        t => t,
    }
}

/// `print_filter` of an RTM_NEWCHAIN message: `chain`, the owner unless the
/// request named it, the index unless the request did.
fn print_chain(out: &mut Out, shown: &Shown, owner: Tcm, ch: &classify::Chain) {
    let index = ch.index;
    out.open_object(None);
    out.fp(format_args!("chain "));
    print_owner(out, shown, owner);
    if let Some(t) = &ch.tmplt {
        out.string("kind", format_args!("{} ", t.kind), t.kind);
    }
    if shown.chain != Some(index) {
        out.uint("chain", format_args!("chain {index} "), index as u64);
    }
    if let Some(t) = &ch.tmplt {
        out.open_object(Some("options"));
        (t.ops.dump)(&*t.keys, out);
        out.close_object();
    }
    out.nl();
    out.close_object();
}

/// `tc_dump_chain` over netlink's dump rounds: each round skips the first
/// `cb->args[0]` chains and prints the rest that actions do not hold alone, until a
/// round prints nothing. The skip counts chains held by actions alone but the
/// printed count does not, so a chain after such a chain is printed again in the
/// next round, as the kernel does (`chain show` lists it twice).
fn dump_chains(b: &Block, shown: &Shown, owner: Tcm, out: &mut Out) {
    let mut start = 0;
    loop {
        let (mut index, mut printed) = (0, false);
        for ch in &b.chains {
            if shown.chain.is_some_and(|c| c != ch.index) {
                continue;
            }
            if index < start {
                index += 1;
                continue;
            }
            if ch.held_by_acts_only() {
                continue;
            }
            print_chain(out, shown, owner, ch);
            printed = true;
            index += 1;
        }
        if !printed {
            return;
        }
        start = index;
    }
}

/// `tc_dump_tfilter`. False when a terse dump met a kind without one: `tcf_fill_node`
/// fails on its first filter, netlink's next round finds it again with nothing in the
/// message, and the dump ends in EMSGSIZE.
fn dump(tc: &Tc, kernel: KernelVersion, b: &Block, shown: &Shown, tcm: Tcm, o: TcOpts, out: &mut Out) -> bool {
    for ch in &b.chains {
        if shown.chain.is_some_and(|c| c != ch.index) {
            continue;
        }
        for tp in &ch.protos {
            if shown.prio != 0 && shown.prio != tp.pref as u32 {
                continue;
            }
            if shown.protocol != 0 && shown.protocol != tp.protocol {
                continue;
            }
            if !dump_proto(tc, kernel, b, tp, ch.index, shown, tcm, None, o, out) {
                return false;
            }
        }
    }
    true
}

/// One proto's lines (`tcf_fill_node` + `print_filter`): its own line and each
/// filter's, or with `only` (`tc filter get`) that filter's alone. `shown` is what
/// the request named, which tc leaves out.
#[allow(clippy::too_many_arguments)]
fn dump_proto(
    tc: &Tc,
    kernel: KernelVersion,
    b: &Block,
    tp: &Proto,
    chain_index: u32,
    shown: &Shown,
    tcm: Tcm,
    only: Option<u32>,
    o: TcOpts,
    out: &mut Out,
) -> bool {
    let kind = tp.kind.kind();
    let head = |out: &mut Out| {
        out.open_object(None);
        out.fp(format_args!("filter "));
        print_owner(out, shown, tcm);
        if shown.protocol == 0 || shown.protocol != tp.protocol {
            let pn = classify::proto_name(tp.protocol);
            out.string("protocol", format_args!("protocol {pn} "), &pn);
        }
        if shown.prio == 0 || shown.prio != tp.pref as u32 {
            out.uint("pref", format_args!("pref {} ", tp.pref), tp.pref as u64);
        }
        out.string("kind", format_args!("{kind} "), kind);
        if shown.chain != Some(chain_index) {
            out.uint("chain", format_args!("chain {chain_index} "), chain_index as u64);
        }
    };
    let ctx = DumpCtx {
        head: &head,
        pretty: o.pretty,
        stats: o.stats > 0,
        protocol: tp.protocol,
        u32_perf: kernel.u32_perf(),
        now: tc.now,
        q_handle: b.q_handle,
        only,
        // tc_filter_get sends no dump flags.
        terse: o.brief && only.is_none(),
    };
    if only.is_none() {
        ctx.bare(out);
    }
    if ctx.terse && !tp.kind.terse_dump() {
        return false;
    }
    tp.kind.dump(&ctx, out);
    true
}

#[cfg(test)]
mod tests {
    //! The filter goldens (captured with an htb parent, as this machine's kernel has
    //! no prio) replayed with a prio parent: the filter commands on the qdisc's own
    //! block must give the kernel's output byte for byte. Steps on class blocks need
    //! htb's blocks and are left to the golden test.
    use crate::tc::{makeargs, Tc};
    use crate::tree::DevSpec;

    fn replay(case: &str) -> Vec<String> {
        let path = format!("{}/../../goldens/kernel/{case}.json", env!("CARGO_MANIFEST_DIR"));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // goldens/kernel is this host's 6.18 kernel: follow its profile.
        let mut tc = Tc::with_kernel(&[DevSpec::new("eth0")], crate::tree::KernelVersion::V6_18);
        let mut bad = Vec::new();
        for s in v["steps"].as_array().unwrap() {
            let cmd = s["cmd"].as_str().unwrap();
            if cmd.starts_with("class ") {
                continue;
            }
            let line = cmd.replace("htb default 10", "prio");
            let r = tc.run(&makeargs(&line));
            let class_parent = ["parent 1:1 ", "parent 1:10", "parent 1:99", "parent 1:1\n"]
                .iter()
                .any(|p| format!("{cmd}\n").contains(p));
            if !cmd.contains("filter ") || class_parent {
                continue;
            }
            let want = (s["stdout"].as_str().unwrap(), s["stderr"].as_str().unwrap(), s["exit"].as_i64().unwrap());
            if (r.stdout.as_str(), r.stderr.as_str(), r.code as i64) != want {
                bad.push(format!(
                    "{cmd}\n--- want (exit {}):\n{}{}--- got (exit {}):\n{}{}",
                    want.2, want.0, want.1, r.code, r.stdout, r.stderr
                ));
            }
        }
        bad
    }

    #[test]
    fn goldens_on_a_prio_parent() {
        let mut bad = Vec::new();
        for c in ["filter-u32-basic", "filter-u32-lifecycle", "filter-u32-hash", "filter-errors"] {
            bad.extend(replay(c));
        }
        assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
    }

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a);
        m
    }

    fn run(tc: &mut Tc, line: &str) -> String {
        let r = tc.run(&makeargs(line));
        assert_eq!(r.code, 0, "{line}: {}", r.stderr);
        r.stdout
    }

    #[test]
    fn prio_classifies_through_filters() {
        use crate::{FlowKey, Packet};
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport 22 0xffff flowid 1:1");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.0.0.0/8 flowid 1:3");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 3 handle 5 fw classid 1:2");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 4 u32 match ip dst 9.9.9.9 flowid 1:7");
        let flow = |dst: [u8; 4], dport: u16| FlowKey {
            src: mapped([1, 2, 3, 4]),
            dst: mapped(dst),
            sport: 999,
            dport,
            proto: 6,
        };
        let now = tc.now;
        let d = tc.device_mut("eth0").unwrap();
        d.enqueue(Packet::new(1, 100).with_flow(flow([8, 8, 8, 8], 22)), now); // u32 → band 0
        d.enqueue(Packet::new(2, 100).with_flow(flow([10, 1, 1, 1], 80)), now); // u32 → band 2
        let mut m = Packet::new(3, 100);
        m.mark = 5;
        d.enqueue(m, now); // fw → band 1
        d.enqueue(Packet::new(4, 100).with_flow(flow([9, 9, 9, 9], 80)), now); // 1:7 out of range → priomap[0] = 1
        d.enqueue(Packet::new(5, 100).with_priority(6), now); // no match → priomap[6] = 0
        let c = d.root.q.as_classful().unwrap();
        let q: Vec<u32> = (1..=3).map(|m| c.class_stats(m).unwrap().qlen).collect();
        assert_eq!(q, vec![2, 2, 1]);
        // Bands have no blocks of their own.
        let r = tc.run(&makeargs("filter add dev eth0 parent 1:1 protocol ip prio 1 u32 match u32 0 0 flowid 1:2"));
        assert_eq!(r.stderr, "RTNETLINK answers: Invalid argument\nWe have an error talking to the kernel\n");
    }

    #[test]
    fn clsact_hooks_run_their_own_blocks_and_count_only_with_filters() {
        use crate::tree::Ingress;
        use crate::Packet;
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 clsact");
        let now = tc.now;
        let pass = |r: Ingress| match r {
            Ingress::Pass(p) => p,
            r => panic!("{r:?}"),
        };
        // No filter in either hook: no mini-qdisc, nothing counted.
        pass(tc.ingress(0, Packet::new(1, 100).with_flow(flow_to([10, 1, 1, 1])), now));
        pass(tc.egress(0, Packet::new(2, 100).with_flow(flow_to([10, 1, 1, 1])), now));
        assert_eq!(tc.devices[0].ingress.as_ref().unwrap().stats().packets, 0);
        run(&mut tc, "filter add dev eth0 egress protocol ip pref 1 u32 match ip dst 10.9.0.0/16 action drop");
        run(&mut tc, "filter add dev eth0 egress protocol ip pref 2 matchall action skbedit priority 1:20");
        // Egress: the skbedit's priority is on the packet handed on; the drop counts.
        let p = pass(tc.egress(0, Packet::new(3, 100).with_flow(flow_to([10, 1, 1, 1])), now));
        assert_eq!(p.priority, 0x10020);
        assert!(matches!(tc.egress(0, Packet::new(4, 200).with_flow(flow_to([10, 9, 1, 1])), now), Ingress::Dropped));
        // Ingress has its own (empty) block: it passes uncounted, unedited.
        let p = pass(tc.ingress(0, Packet::new(5, 100).with_flow(flow_to([10, 9, 1, 1])), now));
        assert_eq!(p.priority, 0);
        let s = tc.devices[0].ingress.as_ref().unwrap().stats();
        assert_eq!((s.packets, s.bytes, s.drops), (2, 300, 1));
        // An ingress qdisc has no egress hook.
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 ingress");
        run(&mut tc, "filter add dev eth0 parent ffff: protocol ip pref 1 matchall action drop");
        pass(tc.egress(0, Packet::new(6, 100).with_flow(flow_to([10, 1, 1, 1])), now));
        assert!(matches!(tc.ingress(0, Packet::new(7, 100).with_flow(flow_to([10, 1, 1, 1])), now), Ingress::Dropped));
    }

    fn flow_to(dst: [u8; 4]) -> crate::FlowKey {
        crate::FlowKey { src: mapped([1, 2, 3, 4]), dst: mapped(dst), sport: 999, dport: 80, proto: 6 }
    }

    #[test]
    fn prio_drops_on_shot_and_counts_u32_hits() {
        use crate::{Enqueued, Packet};
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.9.0.0/16 action drop");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.0.0.0/8 flowid 1:1");
        let now = tc.now;
        let d = tc.device_mut("eth0").unwrap();
        assert_eq!(d.enqueue(Packet::new(1, 100).with_flow(flow_to([10, 9, 1, 1])), now), Enqueued::Dropped);
        assert_eq!(d.enqueue(Packet::new(2, 200).with_flow(flow_to([10, 1, 1, 1])), now), Enqueued::Success);
        let s = d.root.stats();
        assert_eq!((s.qlen, s.drops, s.packets), (1, 1, 0));
        assert_eq!(d.root.q.as_classful().unwrap().class_stats(1).unwrap().qlen, 1);
        let want = "\
filter parent 1: protocol ip pref 1 u32 chain 0 
filter parent 1: protocol ip pref 1 u32 chain 0 fh 800: ht divisor 1 
filter parent 1: protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 terminal flowid not_in_hw (rule hit 2 success 1)
  match 0a090000/ffff0000 at 16 (success 1 ) 
\taction order 1: gact action drop
\t random type none pass val 0
\t index 1 ref 1 bind 1
\tAction statistics:
\tSent 100 bytes 1 pkt (dropped 1, overlimits 0 requeues 0) 
\tbacklog 0b 0p requeues 0

filter parent 1: protocol ip pref 2 u32 chain 0 
filter parent 1: protocol ip pref 2 u32 chain 0 fh 801: ht divisor 1 
filter parent 1: protocol ip pref 2 u32 chain 0 fh 801::800 order 2048 key ht 801 bkt 0 flowid 1:1 not_in_hw (rule hit 1 success 1)
  match 0a000000/ff000000 at 16 (success 1 ) 
";
        assert_eq!(run(&mut tc, "-s filter show dev eth0"), want);
    }

    #[test]
    fn indexed_u32_keeps_the_walks_counters() {
        use crate::{Enqueued, Packet};
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
        for i in 1..=3 {
            run(
                &mut tc,
                &format!("filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.{i} flowid 1:{i}"),
            );
        }
        let now = tc.now;
        let d = tc.device_mut("eth0").unwrap();
        // .2 stops at the second node, .9 passes all three, a packet without a
        // header stops at the first (its key read fails).
        for (id, p) in [
            (1, Packet::new(1, 100).with_flow(flow_to([10, 0, 0, 2]))),
            (2, Packet::new(2, 100).with_flow(flow_to([10, 0, 0, 9]))),
            (3, Packet::new(3, 100)),
        ] {
            assert_eq!(d.enqueue(p, now), Enqueued::Success, "{id}");
        }
        let out = run(&mut tc, "-s filter show dev eth0");
        let hits: Vec<&str> = out.lines().filter_map(|l| l.split_once("(rule hit ").map(|x| x.1)).collect();
        assert_eq!(hits, ["3 success 0)", "2 success 1)", "1 success 0)"], "{out}");
        assert!(out.contains("  match 0a000002/ffffffff at 16 (success 1 ) \n"), "{out}");
        // A change spreads the counts before the nodes move; the walk goes on counting.
        run(
            &mut tc,
            "filter add dev eth0 parent 1: protocol ip prio 1 handle 800::900 u32 match ip dst 10.0.0.4 flowid 1:3",
        );
        let d = tc.device_mut("eth0").unwrap();
        d.enqueue(Packet::new(4, 100).with_flow(flow_to([10, 0, 0, 9])), now);
        let out = run(&mut tc, "-s filter show dev eth0");
        let hits: Vec<&str> = out.lines().filter_map(|l| l.split_once("(rule hit ").map(|x| x.1)).collect();
        assert_eq!(hits, ["4 success 0)", "3 success 1)", "2 success 0)", "1 success 0)"], "{out}");
    }

    #[test]
    fn htb_drops_on_shot_police_exceed_and_steals_on_trap() {
        use crate::{Enqueued, Packet};
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 root handle 1: htb default 10");
        run(&mut tc, "class add dev eth0 parent 1: classid 1:10 htb rate 10mbit");
        // 1 Mbit/s with a 2000-byte bucket: one 1500-byte packet conforms, the next exceeds.
        run(
            &mut tc,
            "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police rate 1mbit burst 2000 drop flowid 1:10",
        );
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.0.0.2/32 action trap");
        let now = tc.now;
        let d = tc.device_mut("eth0").unwrap();
        let p = |id, dst| Packet::new(id, 1500).with_flow(flow_to(dst));
        assert_eq!(d.enqueue(p(1, [10, 0, 0, 1]), now), Enqueued::Success);
        assert_eq!(d.enqueue(p(2, [10, 0, 0, 1]), now), Enqueued::Dropped);
        assert_eq!(d.enqueue(p(3, [10, 0, 0, 2]), now), Enqueued::Stolen);
        let s = d.root.stats();
        assert_eq!((s.qlen, s.drops), (1, 1));
        let c = d.root.q.as_classful().unwrap().class_stats(0x10).unwrap();
        assert_eq!((c.qlen, c.drops), (1, 0));
        let out = run(&mut tc, "filter show dev eth0");
        assert!(
            out.contains(
                "  match 0a000001/ffffffff at 16\n police 0x1 rate 1Mbit burst 2000b mtu 2Kb action drop overhead 0b \n\tref 1 bind 1 \n\n"
            ),
            "{out}"
        );
        // Deleting the filter frees the police index for the next one.
        run(&mut tc, "filter del dev eth0 parent 1: prio 1");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action police rate 2mbit burst 4k");
        assert!(run(&mut tc, "filter show dev eth0").contains("\taction order 1:  police 0x1 rate 2Mbit burst 4Kb mtu 2Kb action reclassify overhead 0b \n\tref 1 bind 1 \n"));
    }

    #[test]
    fn actions_follow_the_kernel_profile() {
        use crate::tree::KernelVersion;
        let mut tc = Tc::with_kernel(&[DevSpec::new("eth0")], KernelVersion::V6_18);
        run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
        for f in [
            "u32 match ip dst 1.2.3.4 action drop",
            "matchall action pass",
            "handle 5 fw action drop",
            "flower action drop",
        ] {
            let r = tc.run(&makeargs(&format!("filter add dev eth0 parent 1: protocol ip prio 1 {f}")));
            assert_eq!(
                r.stderr, "Error: Failed to load TC action module.\nWe have an error talking to the kernel\n",
                "{f}"
            );
        }
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 matchall action pass action gact drop random determ pass 2");
        let out = run(&mut tc, "filter show dev eth0");
        assert!(
            out.contains(
                "\taction order 2: gact action drop\n\t random type determ pass val 2\n\t index 2 ref 1 bind 1\n"
            ),
            "{out}"
        );
        // `goto chain N` holds chain N, which only actions hold: `chain show` hides it.
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 2 matchall action goto chain 1");
        assert_eq!(run(&mut tc, "chain show dev eth0"), "chain parent 1: chain 0 \n");
    }

    #[test]
    fn fw_flower_matchall_lifecycle_and_show() {
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 handle 5 fw classid 1:2");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 handle 6 fw classid 1:3");
        run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 2 flower ip_proto tcp dst_ip 10.0.0.0/8 dst_port 80 classid 1:1");
        run(&mut tc, "filter add dev eth0 parent 1: protocol all matchall classid 1:3");
        let want = "\
filter parent 1: protocol ip pref 1 fw chain 0 
filter parent 1: protocol ip pref 1 fw chain 0 handle 0x5 classid 1:2 
filter parent 1: protocol ip pref 1 fw chain 0 handle 0x6 classid 1:3 
filter parent 1: protocol ip pref 2 flower chain 0 
filter parent 1: protocol ip pref 2 flower chain 0 handle 0x1 classid 1:1 
  eth_type ipv4
  ip_proto tcp
  dst_ip 10.0.0.0/8
  dst_port 80
  not_in_hw
filter parent 1: protocol all pref 49152 matchall chain 0 
filter parent 1: protocol all pref 49152 matchall chain 0 handle 0x1 flowid 1:3 
  not_in_hw
";
        assert_eq!(run(&mut tc, "filter show dev eth0"), want);
        let r = tc.run(&makeargs("filter add dev eth0 parent 1: protocol all prio 49152 matchall classid 1:2"));
        assert_eq!(r.stderr, "RTNETLINK answers: File exists\nWe have an error talking to the kernel\n");
        run(&mut tc, "filter del dev eth0 parent 1: prio 1 handle 5 fw");
        run(&mut tc, "filter del dev eth0 parent 1: prio 1 handle 6 fw");
        // The last fw filter took its proto with it.
        let r = tc.run(&makeargs("filter del dev eth0 parent 1: prio 1"));
        assert_eq!(
            r.stderr,
            "Error: Filter with specified priority/protocol not found.\nWe have an error talking to the kernel\n"
        );
        run(&mut tc, "filter del dev eth0 parent 1:");
        assert_eq!(run(&mut tc, "filter show dev eth0"), "");
    }
}
