//! What the engine's unit tests share: a device, times, argument vectors, and a
//! concrete qdisc held in a tree node ([`held`]) so a test drives it through the same
//! [`Node`] methods the tree uses and still reaches its fields.

use crate::qdisc::{DevInfo, Node, Qdisc, TC_H_ROOT};
use crate::time::Instant;

/// The standard Ethernet `eth0` of [`DevInfo::eth0`].
pub fn dev() -> DevInfo {
    DevInfo::eth0()
}

/// `ns` nanoseconds after time zero.
pub fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// `ms` milliseconds after time zero.
pub fn ms(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

/// A command line's words.
pub fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// `q` as the root qdisc `1:` of a device.
pub fn held<Q: Qdisc>(q: Q) -> Node<Q> {
    Node::typed(0x1_0000, TC_H_ROOT, Box::new(q))
}
