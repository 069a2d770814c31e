//! qdisc-lab's kernel lab: scenarios on a real Linux kernel.
//!
//! * [`host::HostBackend`] (`--backend host`): the running kernel, one network
//!   namespace per scenario host, a veth per link through a "wire" namespace that
//!   realises the link's rate/delay/loss, the user's tc scripts applied with the real
//!   tc, traffic from iperf3 and ping, `tc -s -j` snapshots every 100 ms.
//! * A VM backend (a chosen Debian kernel under qemu) implements the same
//!   [`qdisc_scenario::Backend`] trait; it is not part of this crate yet.
//!
//! Nothing outlives a run: see [`proc`] for children and namespaces, and
//! [`proc::emergency_cleanup`] for a signal handler's last resort.

pub mod host;
pub mod proc;

pub use host::HostBackend;
