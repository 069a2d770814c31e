//! What every qdisc-lab backend shares: the scenario a run is asked for, the result it
//! gives back, and the [`Backend`] interface between the two.
//!
//! ```text
//! scenario.toml ──► Scenario::load ──► Backend::run(&Scenario, &RunOptions, progress) ──► RunResult
//! ```
//!
//! * [`scenario`]: the TOML format (documented in `docs/scenarios.md`), loaded and
//!   validated in one place; every mistake is reported as `FILE:LINE:COL: FIELD: message`.
//! * [`result`]: [`RunResult`], serde, with a JSON Schema generated from the types
//!   (`docs/run-result.schema.json`, described in `docs/run-result.md`).
//! * [`profile`]: CPU cost profiles of the simulator's CPU model (data with sources).
//! * [`iperf3`]: a traffic entry of a result as `iperf3 -J` JSON.
//! * [`flent`]: a result as a flent data file (`.flent.gz`).
//! * [`overrides`]: `PATH=VALUE` edits of a scenario (`run --set`, Python sweeps).
//! * [`backend`]: the [`Backend`] trait every backend (host namespaces, a VM, the
//!   simulator) implements, the options of a run, progress reporting and errors.

pub mod backend;
pub mod flent;
pub mod iperf3;
pub mod overrides;
pub mod periodic;
pub mod profile;
pub mod result;
pub mod scenario;
pub mod schema;

pub use backend::{Backend, NoProgress, Progress, RunError, RunOptions};
pub use result::RunResult;
pub use scenario::{LoadError, Scenario};
