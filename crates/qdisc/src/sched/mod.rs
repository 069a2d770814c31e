//! The qdisc kinds, one module each, and the one table that registers them.
//!
//! Each kind's module defines its option type, its parser (the iproute2 side,
//! tc/q_KIND.c), its qdisc (the kernel side, net/sched/sch_KIND.c) and a `static`
//! [`Ops`] naming them — the kernel's `struct Qdisc_ops` plus iproute2's
//! `struct qdisc_util`. [`KINDS`] lists those statics; nothing else in the engine
//! names a kind. Options are the kind's own type, carried opaquely in [`Opts`] as
//! netlink attributes are carried through sch_api.c. Adding a kind: its module, plus
//! `pub mod` and one line in [`KINDS`] here (docs/architecture.md).

pub mod cake;
pub mod cbs;
pub mod choke;
pub mod codel;
pub mod drr;
pub mod dualpi2;
pub mod etf;
pub mod ets;
pub mod fifo;
pub mod fq;
pub mod fq_codel;
pub mod fq_pie;
pub mod gred;
pub mod hfsc;
pub mod hhf;
pub mod htb;
pub mod ingress;
pub mod mq;
pub mod mqprio;
pub mod multiq;
pub mod netem;
pub mod noqueue;
pub mod pfifo_fast;
pub mod pie;
pub mod plug;
pub mod prio;
pub mod qfq;
pub mod red;
pub mod sfb;
pub mod sfq;
pub mod skbprio;
pub mod taprio;
pub mod tbf;

pub use crate::qdisc::{Create, Flags, Ops, Opts, Parse};
use crate::qdisc::{DevInfo, Qdisc};
use crate::tc::{Args, TcError};
use crate::time::Instant;
use crate::tree::KernelVersion;

/// Every kind this engine implements (`register_qdisc`), in the kernel's names.
pub static KINDS: &[&Ops] = &[
    &fifo::BFIFO,
    &cake::OPS,
    &cbs::OPS,
    &choke::OPS,
    &ingress::CLSACT,
    &codel::OPS,
    &drr::OPS,
    &dualpi2::OPS,
    &etf::OPS,
    &ets::OPS,
    &fq::OPS,
    &fq_codel::OPS,
    &fq_pie::OPS,
    &gred::OPS,
    &hfsc::OPS,
    &hhf::OPS,
    &htb::OPS,
    &ingress::INGRESS,
    &mq::OPS,
    &mqprio::OPS,
    &multiq::OPS,
    &netem::OPS,
    &noqueue::NOQUEUE,
    &fifo::PFIFO,
    &pfifo_fast::OPS,
    &pie::OPS,
    &plug::OPS,
    &fifo::PFIFO_HEAD_DROP,
    &prio::OPS,
    &qfq::OPS,
    &red::OPS,
    &sfb::OPS,
    &sfq::OPS,
    &skbprio::OPS,
    &taprio::OPS,
    &tbf::OPS,
];

/// `qdisc_lookup_ops`: the kind named `kind`, whichever kernel has it.
pub fn lookup(kind: &str) -> Option<&'static Ops> {
    KINDS.iter().copied().find(|o| o.id == kind)
}

/// `qdisc_lookup_ops` on kernel `k`: the kind named `kind` if `k` has it
/// ([`Ops::since`]).
pub fn lookup_in(kind: &str, k: KernelVersion) -> Option<&'static Ops> {
    lookup(kind).filter(|o| o.since.is_none_or(|s| k >= s))
}

/// iproute2 side: parse a kind's options (`q->parse_qopt`). `Ok(None)` means the
/// command carries no TCA_OPTIONS at all. Every kind is known (the newest tc).
pub fn parse(kind: &str, args: &mut Args) -> Result<Option<Opts>, TcError> {
    parse_ops(kind, lookup(kind), args)
}

/// [`parse`] by the tc paired with kernel `k`: a kind `k` lacks is unknown to it
/// too (iproute2 6.15 has no q_dualpi2.c), so it gets tc's generic refusal.
pub fn parse_in(kind: &str, k: KernelVersion, args: &mut Args) -> Result<Option<Opts>, TcError> {
    parse_ops(kind, lookup_in(kind, k), args)
}

fn parse_ops(kind: &str, ops: Option<&'static Ops>, args: &mut Args) -> Result<Option<Opts>, TcError> {
    match ops.map(|o| &o.parse) {
        Some(Parse::Qopt(p)) => p(args),
        Some(Parse::PrintOnly) => {
            if !args.is_empty() {
                return Err(TcError::usage(format!("qdisc '{kind}' does not support option parsing\n")));
            }
            Ok(None)
        }
        Some(Parse::Generic) | None => {
            if let Some(a) = args.next() {
                return Err(TcError::tc(format!("Unknown qdisc \"{kind}\", hence option \"{a}\" is unparsable\n")));
            }
            Ok(None)
        }
    }
}

/// Kernel side: `qdisc_create` → `ops->init`. `handle` is the new qdisc's handle
/// (children it creates hang below it), `parent` where it is being attached.
/// An mq made here gets the boot-time default qdisc ([`crate::tree::DEFAULT_QDISC`])
/// on its tx queues; [`create_with_default`] takes `net.core.default_qdisc`.
pub fn create(
    kind: &str,
    opts: Option<&Opts>,
    dev: &DevInfo,
    handle: u32,
    parent: u32,
    now: Instant,
) -> Result<Box<dyn Qdisc>, TcError> {
    create_with_default(kind, opts, dev, handle, parent, now, crate::tree::DEFAULT_QDISC)
}

/// `qdisc_create_dflt` (net/sched/sch_generic.c): a qdisc the kernel makes on its own
/// — handle 0, `ops->init` without options — or None when that init fails (htb, tbf
/// and prio want options; mq and ingress refuse the place). `default_qdisc` is
/// `net.core.default_qdisc`, for an mq's own tx queue children.
pub fn create_dflt(
    kind: &str,
    dev: &DevInfo,
    parent: u32,
    default_qdisc: &str,
    now: Instant,
) -> Option<Box<dyn Qdisc>> {
    create_with_default(kind, None, dev, 0, parent, now, default_qdisc).ok()
}

/// [`create`] with `net.core.default_qdisc` (`default_qdisc_ops`, a kind of
/// [`KINDS`]) set to `default_qdisc`: only `mq_init` reads it.
pub fn create_with_default(
    kind: &str,
    opts: Option<&Opts>,
    dev: &DevInfo,
    handle: u32,
    parent: u32,
    now: Instant,
    default_qdisc: &str,
) -> Result<Box<dyn Qdisc>, TcError> {
    let ops = lookup_in(kind, dev.kernel).ok_or_else(|| TcError::kernel("Specified qdisc kind is unknown"))?;
    (ops.create)(&Create { opts, dev, handle, parent, now, default_qdisc })
}

/// iproute2 side of `tc class … KIND OPTIONS` (`q->parse_copt`): only kinds whose
/// q_*.c has a class parser accept options; for every other kind tc refuses.
pub fn parse_class(kind: &str, args: &mut Args) -> Result<Opts, TcError> {
    match lookup(kind).and_then(|o| o.parse_class) {
        Some(p) => p(args),
        None => Err(TcError::tc(format!("Error: Qdisc \"{kind}\" is classless.\n"))),
    }
}
