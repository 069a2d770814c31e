//! The qdiscs, one file each, and the registry that maps a tc kind name to its
//! option parser (iproute2 side) and its constructor (kernel side).

pub mod cake;
pub mod codel;
pub mod fifo;
pub mod fq;
pub mod fq_codel;
pub mod htb;
pub mod ingress;
pub mod mq;
pub mod netem;
pub mod noqueue;
pub mod pfifo_fast;
pub mod prio;
pub mod sfq;
pub mod tbf;

use crate::qdisc::{DevInfo, Qdisc};
use crate::tc::{Args, TcError};
use crate::time::Instant;

use fifo::{Fifo, FifoKind};

/// The options tc sends for a kind (`TCA_OPTIONS`), already parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum Opts {
    Fifo(fifo::FifoOpt),
    Prio(prio::PrioOpt),
    Tbf(tbf::TbfOpt),
    Codel(codel::CodelOpt),
    FqCodel(fq_codel::FqCodelOpt),
    Sfq(sfq::SfqOpt),
    Fq(fq::FqOpt),
    Htb(htb::HtbOpt),
    Netem(netem::NetemOpt),
    Cake(cake::CakeOpt),
    /// Kinds that take no options (mq, pfifo_fast, noqueue).
    Empty,
}

/// Kinds this engine implements, as the kernel knows them.
pub const KINDS: &[&str] = &[
    "bfifo",
    "cake",
    "clsact",
    "codel",
    "fq",
    "fq_codel",
    "htb",
    "ingress",
    "mq",
    "netem",
    "noqueue",
    "pfifo",
    "pfifo_fast",
    "pfifo_head_drop",
    "prio",
    "sfq",
    "tbf",
];

/// Kinds iproute2 has a `q_*.c` parser for but this engine does not implement yet:
/// tc accepts them, the kernel answers as one without the module would.
const TC_ONLY_KINDS: &[&str] = &[
    "cbs", "choke", "drr", "etf", "ets", "fq_pie", "gred", "hfsc", "hhf", "mqprio", "multiq", "pie", "plug", "qfq",
    "red", "sfb", "skbprio", "taprio",
];

/// iproute2 side: parse a kind's options (`q->parse_qopt`). `Ok(None)` means the
/// command carries no TCA_OPTIONS at all.
pub fn parse(kind: &str, args: &mut Args) -> Result<Option<Opts>, TcError> {
    Ok(match kind {
        "pfifo" => fifo::parse(FifoKind::Pfifo, args)?.map(Opts::Fifo),
        "bfifo" => fifo::parse(FifoKind::Bfifo, args)?.map(Opts::Fifo),
        "pfifo_head_drop" => fifo::parse(FifoKind::PfifoHeadDrop, args)?.map(Opts::Fifo),
        "prio" => Some(Opts::Prio(prio::parse(args)?)),
        "ingress" | "clsact" => {
            ingress::parse(kind, args)?;
            Some(Opts::Empty)
        }
        "tbf" => Some(Opts::Tbf(tbf::parse(args)?)),
        // q_htb.c always sends TCA_OPTIONS.
        "htb" => Some(Opts::Htb(htb::parse(args)?)),
        // q_codel.c / q_fq_codel.c always send TCA_OPTIONS (possibly empty).
        "codel" => Some(Opts::Codel(codel::parse(args)?)),
        "fq_codel" => Some(Opts::FqCodel(fq_codel::parse(args)?)),
        // q_sfq.c sends TCA_OPTIONS only when at least one option was given.
        "sfq" => sfq::parse(args)?.map(Opts::Sfq),
        // q_fq.c always sends TCA_OPTIONS (possibly empty).
        "fq" => Some(Opts::Fq(fq::parse(args)?)),
        // q_netem.c always sends TCA_OPTIONS.
        "netem" => Some(Opts::Netem(netem::parse(args)?)),
        // q_cake.c always sends TCA_OPTIONS.
        "cake" => Some(Opts::Cake(cake::parse(args)?)),
        // q_prio.c registers pfifo_fast for printing only, without a parser.
        "pfifo_fast" => {
            if !args.is_empty() {
                return Err(TcError::usage("qdisc 'pfifo_fast' does not support option parsing\n"));
            }
            None
        }
        k if TC_ONLY_KINDS.contains(&k) => {
            // Options are the kernel's business here; it will refuse the kind anyway.
            while args.next().is_some() {}
            None
        }
        _ => {
            if let Some(a) = args.next() {
                return Err(TcError::tc(format!("Unknown qdisc \"{kind}\", hence option \"{a}\" is unparsable\n")));
            }
            None
        }
    })
}

/// What a kind's parser wrote to stderr without failing (tc prints it and goes on).
pub fn parse_warning(opts: &Opts) -> &str {
    match opts {
        Opts::Sfq(o) => &o.warning,
        _ => "",
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
    let fifo = |k: FifoKind| -> Result<Box<dyn Qdisc>, TcError> {
        match opts {
            None => Ok(Box::new(Fifo::new(k, None, dev))),
            Some(Opts::Fifo(o)) => Ok(Box::new(Fifo::new(k, Some(*o), dev))),
            Some(_) => Err(TcError::invalid()),
        }
    };
    match kind {
        "pfifo" => fifo(FifoKind::Pfifo),
        "bfifo" => fifo(FifoKind::Bfifo),
        "pfifo_head_drop" => fifo(FifoKind::PfifoHeadDrop),
        "pfifo_fast" => Ok(Box::new(pfifo_fast::PfifoFast::new(dev)?)),
        "noqueue" => Ok(Box::new(noqueue::Noqueue::default())),
        "ingress" if parent == ingress::TC_H_INGRESS => Ok(Box::new(ingress::Ingress::new(false))),
        "ingress" => Err(TcError::kernel("Can only be attached as ingress qdisc")),
        "clsact" if parent == ingress::TC_H_INGRESS => Ok(Box::new(ingress::Ingress::new(true))),
        "clsact" => Err(TcError::kernel("Can only be attached as clsact qdisc")),
        "prio" => match opts {
            Some(Opts::Prio(o)) => Ok(Box::new(prio::Prio::new(o, dev, handle)?)),
            _ => Err(TcError::invalid()),
        },
        "sfq" => match opts {
            None => Ok(Box::new(sfq::Sfq::new(None, dev, handle, now)?)),
            Some(Opts::Sfq(o)) => Ok(Box::new(sfq::Sfq::new(Some(o), dev, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        "codel" => match opts {
            None => Ok(Box::new(codel::Codel::new(&codel::CodelOpt::default(), dev, now)?)),
            Some(Opts::Codel(o)) => Ok(Box::new(codel::Codel::new(o, dev, now)?)),
            _ => Err(TcError::invalid()),
        },
        "fq_codel" => match opts {
            None => Ok(Box::new(fq_codel::FqCodel::new(&fq_codel::FqCodelOpt::default(), dev, handle, now)?)),
            Some(Opts::FqCodel(o)) => Ok(Box::new(fq_codel::FqCodel::new(o, dev, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        "tbf" => match opts {
            Some(Opts::Tbf(o)) => Ok(Box::new(tbf::Tbf::new(o, dev, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        "htb" => match opts {
            Some(Opts::Htb(o)) => Ok(Box::new(htb::Htb::new(o, dev, handle, parent, now)?)),
            _ => Err(TcError::invalid()),
        },
        // fq_init: without options only the defaults (tc always sends some).
        "fq" => match opts {
            None => Ok(Box::new(fq::Fq::new(&fq::FqOpt::default(), dev, handle, now)?)),
            Some(Opts::Fq(o)) => Ok(Box::new(fq::Fq::new(o, dev, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        "mq" => Ok(Box::new(mq::Mq::new(dev, handle, parent, default_qdisc, now)?)),
        "netem" => match opts {
            Some(Opts::Netem(o)) => Ok(Box::new(netem::Netem::new(o, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        "cake" => match opts {
            None => Ok(Box::new(cake::Cake::new(None, dev, handle, now)?)),
            Some(Opts::Cake(o)) => Ok(Box::new(cake::Cake::new(Some(o), dev, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        _ => Err(TcError::kernel("Specified qdisc kind is unknown")),
    }
}

/// The class options tc sends (`tc class add|change … KIND OPTIONS`), parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum ClassOpts {
    Htb(htb::HtbClassOpt),
}

/// iproute2 side of `tc class … KIND OPTIONS` (`q->parse_copt`): only kinds whose
/// q_*.c has a class parser accept options; for every other kind tc refuses.
pub fn parse_class(kind: &str, args: &mut Args) -> Result<ClassOpts, TcError> {
    match kind {
        "htb" => Ok(ClassOpts::Htb(htb::parse_class(args)?)),
        _ => Err(TcError::tc(format!("Error: Qdisc \"{kind}\" is classless.\n"))),
    }
}
