//! What the CPU-model test files share: a scenario from text, its run in the
//! simulator, a host's CPU report.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::result::HostCpu;
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

pub fn scenario(text: &str) -> Scenario {
    Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"))
}

pub fn run(text: &str) -> RunResult {
    simulate(&scenario(text), &RunOptions::default(), &mut NoProgress).unwrap_or_else(|e| panic!("{e}")).0
}

pub fn host<'a>(r: &'a RunResult, name: &str) -> &'a HostCpu {
    r.cpu.iter().find(|h| h.host == name).unwrap_or_else(|| panic!("no CPU report for {name}"))
}
