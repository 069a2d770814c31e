//! qdisc — the Linux packet scheduler in userspace.
//!
//! Kernel-exact qdiscs (same parameters, defaults, drop decisions, counters and `tc`
//! output) behind one trait, with time passed in: the engine never reads a clock,
//! never sleeps, spawns no threads and does no I/O. A non-work-conserving qdisc
//! answers a dequeue with [`Dequeued::Throttled`] and the caller decides how to wait.
//!
//! ```
//! use qdisc::{sched, tc::Args, Dequeued, DevInfo, Instant, Node, Packet};
//! # fn main() -> Result<(), qdisc::tc::TcError> {
//! let dev = DevInfo::eth0();
//! let argv: Vec<String> = "rate 1mbit burst 1600 limit 10k".split(' ').map(String::from).collect();
//! let opts = sched::parse("tbf", &mut Args::new(&argv))?;
//! let tbf = sched::create("tbf", opts.as_ref(), &dev, 0x10000, qdisc::qdisc::TC_H_ROOT, Instant::ZERO)?;
//! let mut q = Node::new(0x10000, qdisc::qdisc::TC_H_ROOT, tbf);
//! q.enqueue(Packet::new(1, 1500), Instant::ZERO);
//! q.enqueue(Packet::new(2, 1500), Instant::ZERO);
//! assert_eq!(q.dequeue(Instant::ZERO).packet().map(|p| p.id), Some(1));
//! // 1400 more bytes of tokens at 125000 B/s: 11.2 ms.
//! assert_eq!(q.dequeue(Instant::ZERO), Dequeued::Throttled { until: Instant::from_nanos(11_200_000) });
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub(crate) mod class_hash;
pub mod classify;
pub mod dql;
pub mod drops;
pub mod estimator;
pub mod packet;
pub mod qdisc;
pub mod rate;
pub mod sched;
pub mod stab;
pub mod stats;
pub mod tc;
#[cfg(test)]
pub(crate) mod testing;
pub mod time;
pub mod tree;

pub use packet::{FlowKey, Packet, SockState, Socket};
pub use qdisc::{Classful, Dequeued, DevInfo, Enqueued, Node, Qdisc};
pub use stats::Stats;
pub use time::{Duration, Instant};
