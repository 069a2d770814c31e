//! qdisc — the Linux packet scheduler in userspace.
//!
//! Kernel-exact qdiscs (same parameters, defaults, drop decisions, counters and `tc`
//! output) behind one trait, with time passed in: the engine never reads a clock,
//! never sleeps, spawns no threads and does no I/O. A non-work-conserving qdisc
//! answers a dequeue with [`Dequeued::Throttled`] and the caller decides how to wait.
#![forbid(unsafe_code)]

pub mod packet;
pub mod qdisc;
pub mod rate;
pub mod sched;
pub mod stats;
pub mod tc;
pub mod time;
pub mod tree;

pub use packet::{FlowKey, Packet, Socket};
pub use qdisc::{Classful, Dequeued, DevInfo, Enqueued, Node, Qdisc};
pub use stats::Stats;
pub use time::{Duration, Instant};
