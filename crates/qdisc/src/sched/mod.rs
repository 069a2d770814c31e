//! The qdiscs, one file each, and the registry that maps a tc kind name to its
//! option parser (iproute2 side) and its constructor (kernel side).

pub mod fifo;
pub mod ingress;
pub mod mq;
pub mod noqueue;
pub mod pfifo_fast;
pub mod prio;
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
    /// Kinds that take no options (mq, pfifo_fast, noqueue).
    Empty,
}

/// Kinds this engine implements, as the kernel knows them.
pub const KINDS: &[&str] =
    &["bfifo", "ingress", "mq", "noqueue", "pfifo", "pfifo_fast", "pfifo_head_drop", "prio", "tbf"];

/// Kinds iproute2 has a `q_*.c` parser for but this engine does not implement yet:
/// tc accepts them, the kernel answers as one without the module would.
const TC_ONLY_KINDS: &[&str] = &[
    "cake", "cbs", "choke", "clsact", "codel", "drr", "etf", "ets", "fq", "fq_codel", "fq_pie", "gred", "hfsc", "hhf",
    "htb", "mqprio", "multiq", "netem", "pie", "plug", "qfq", "red", "sfb", "sfq", "skbprio", "taprio",
];

/// iproute2 side: parse a kind's options (`q->parse_qopt`). `Ok(None)` means the
/// command carries no TCA_OPTIONS at all.
pub fn parse(kind: &str, args: &mut Args) -> Result<Option<Opts>, TcError> {
    Ok(match kind {
        "pfifo" => fifo::parse(FifoKind::Pfifo, args)?.map(Opts::Fifo),
        "bfifo" => fifo::parse(FifoKind::Bfifo, args)?.map(Opts::Fifo),
        "pfifo_head_drop" => fifo::parse(FifoKind::PfifoHeadDrop, args)?.map(Opts::Fifo),
        "prio" => Some(Opts::Prio(prio::parse(args)?)),
        "ingress" => {
            ingress::parse(args)?;
            Some(Opts::Empty)
        }
        "tbf" => Some(Opts::Tbf(tbf::parse(args)?)),
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

/// Kernel side: `qdisc_create` → `ops->init`. `handle` is the new qdisc's handle
/// (children it creates hang below it), `parent` where it is being attached.
pub fn create(
    kind: &str,
    opts: Option<&Opts>,
    dev: &DevInfo,
    handle: u32,
    parent: u32,
    now: Instant,
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
        "ingress" if parent == ingress::TC_H_INGRESS => Ok(Box::new(ingress::Ingress::default())),
        "ingress" => Err(TcError::kernel("Can only be attached as ingress qdisc")),
        "prio" => match opts {
            Some(Opts::Prio(o)) => Ok(Box::new(prio::Prio::new(o, dev, handle)?)),
            _ => Err(TcError::invalid()),
        },
        "tbf" => match opts {
            Some(Opts::Tbf(o)) => Ok(Box::new(tbf::Tbf::new(o, dev, handle, now)?)),
            _ => Err(TcError::invalid()),
        },
        "mq" => Ok(Box::new(mq::Mq::new(dev, handle, parent)?)),
        _ => Err(TcError::kernel("Specified qdisc kind is unknown")),
    }
}
