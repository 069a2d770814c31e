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

/// `nla_total_size`: an attribute of `payload` bytes with its header, padded to 4
/// (x86-64 needs no pad attribute before a 64-bit one).
pub(crate) const fn nla(payload: usize) -> usize {
    (4 + payload + 3) & !3
}

/// TCA_*_TM (`struct tcf_t`: four u64), which every kind's dump ends with.
pub(crate) const TM: usize = nla(32);
/// TCA_*_PARMS of most kinds: `tc_gen` (index, capab, action, refcnt, bindcnt).
pub(crate) const TC_GEN: usize = 20;

/// For the kinds' tests: a parser run on `s` (split at spaces), its failure as the
/// text tc prints, or `exit CODE: TEXT` for one that ends tc.
#[cfg(test)]
pub(crate) fn parse_str<T>(
    parse: fn(&mut crate::tc::Args) -> Result<T, super::action::Fail>,
    s: &str,
) -> Result<T, String> {
    use super::action::Fail;
    let v: Vec<String> = s.split_whitespace().map(String::from).collect();
    parse(&mut crate::tc::Args::new(&v)).map_err(|e| match e {
        Fail::Ret(m) => m,
        Fail::Exit(e) => format!("exit {}: {}", e.code, e.msg),
    })
}
