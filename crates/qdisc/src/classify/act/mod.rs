//! Action kinds beyond gact, police and mirred (which live in `action.rs`), one file
//! each; `action.rs` registers them (its `ActSpec`, `ActKind` and `Kind`) and runs
//! the parts every action shares (index table, counters, control verdicts, dumps).

pub mod csum;
pub mod nat;
pub mod pedit;
pub mod sample;
pub mod simple;
pub mod skbedit;
pub mod vlan;
