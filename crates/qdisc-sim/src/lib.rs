//! qdisc-lab's simulator: the engine's qdiscs inside a virtual-time network.
//!
//! ```text
//! Scenario ──► world::Sim::new (hosts, NICs, links, routes; each host's tc script
//!              through the engine's tc) ──► event loop (event.rs) ──► report.rs ──► RunResult
//!                 xmit.rs: dev_queue_xmit → qdisc → __qdisc_run → BQL → wire → link
//!                 rx.rs: NAPI, GRO, RPS, backlogs, lo and veth pairs, skb freeing
//!                 apps.rs: TCP (tcp/), UDP, ping endpoints
//! ```
//!
//! Deterministic: one seeded RNG (link loss), events ordered by (time, sequence),
//! no clock, no threads, no hash-order iteration — the same scenario and seed give a
//! byte-identical [`RunResult`]. It implements the same [`Backend`] as the kernel lab,
//! so `qdisc-lab compare` can put the two side by side.

#![forbid(unsafe_code)]

mod apps;
pub mod cpu;
mod cpu_xmit;
mod event;
mod report;
mod rng;
pub mod rx;
pub mod tcp;
mod world;
mod xmit;

use qdisc::tree::KernelVersion;
use qdisc_scenario::backend::{Backend, Progress, RunError, RunOptions};
use qdisc_scenario::{RunResult, Scenario};

pub use world::Sim;

/// `--backend sim`, modelling `kernel` (6.12 unless `--kernel 6.18`).
pub struct SimBackend {
    pub kernel: KernelVersion,
}

impl SimBackend {
    /// The kernel `--kernel` names: the versions the simulator models.
    pub fn for_kernel(name: &str) -> Result<SimBackend, String> {
        match name {
            "6.12" => Ok(SimBackend { kernel: KernelVersion(6, 12) }),
            "6.18" => Ok(SimBackend { kernel: KernelVersion(6, 18) }),
            other => Err(format!("the simulator models kernels 6.12 (the default) and 6.18, not {other:?}")),
        }
    }
}

impl Default for SimBackend {
    fn default() -> Self {
        SimBackend { kernel: KernelVersion(6, 12) }
    }
}

/// Counters of a finished simulation, for benchmarks and the closing report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events handled.
    pub events: u64,
    /// Packets that entered an interface's transmit path (skbs; a GSO skb counts once).
    pub packets: u64,
}

/// Run a scenario in the simulator, modelling Linux 6.12 (the default kernel): its
/// result and the simulator's own counters.
pub fn simulate(
    s: &Scenario,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<(RunResult, SimStats), RunError> {
    simulate_kernel(s, KernelVersion(6, 12), opts, progress)
}

/// [`simulate`], modelling `kernel` where the kernels this project models differ
/// (6.12 and 6.18: the engine's `KernelVersion` switches, and TCP's
/// `tcp_tso_should_defer`).
pub fn simulate_kernel(
    s: &Scenario,
    kernel: KernelVersion,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<(RunResult, SimStats), RunError> {
    progress.phase("building the network");
    let mut sim = Sim::new(s, kernel)?;
    let mut rec =
        report::Recorder::new(&sim, opts.interval.as_nanos() as u64, opts.snapshot_interval.as_nanos() as u64);
    progress.phase("simulating");
    let total = s.duration as f64 / 1e9;
    let mut cancelled = false;
    let run = sim.run(|sim| {
        if opts.cancelled() {
            cancelled = true;
            sim.end = sim.now;
            return;
        }
        progress.running(sim.now.as_nanos() as f64 / 1e9, total);
        let next = rec.sample(sim);
        if next <= sim.end {
            sim.events.at(next, event::Ev::Sample);
        }
    });
    progress.finish();
    run?;
    if cancelled {
        return Err(RunError::Interrupted);
    }
    let stats = SimStats { events: sim.events.handled, packets: sim.packets };
    Ok((rec.finish(&mut sim, s), stats))
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn run(&self, s: &Scenario, opts: &RunOptions, progress: &mut dyn Progress) -> Result<RunResult, RunError> {
        simulate_kernel(s, self.kernel, opts, progress).map(|(r, _)| r)
    }
}
