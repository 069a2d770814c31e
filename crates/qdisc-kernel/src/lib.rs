//! qdisc-lab's kernel lab: scenarios on a real Linux kernel.
//!
//! * [`host::HostBackend`] (`--backend host`): the running kernel, one network
//!   namespace per scenario host, a veth per link through a "wire" namespace that
//!   realises the link's rate/delay/loss, the user's tc scripts applied with the real
//!   tc, traffic from iperf3 and ping, `tc -s -j` snapshots every 100 ms.
//! * [`vm::VmBackend`] (`--backend vm`): a chosen Debian kernel (6.12, 6.1, or any
//!   `linux-image-*` package) booted under qemu with an initramfs built from Debian
//!   packages; inside, the qdisc-lab binary itself runs the scenario with the host
//!   backend's code, and the result comes back over a virtio-serial port.
//!
//! Nothing outlives a run: see [`proc`] for children and namespaces, and
//! [`proc::emergency_cleanup`] for a signal handler's last resort.

pub mod host;
pub mod proc;
pub mod vm;

pub use host::HostBackend;
pub use vm::VmBackend;
