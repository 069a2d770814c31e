//! The simple action: a string (`sdata`) the kernel logs with each packet's count.
//!
//! tc side: tc/m_simple.c (`parse_simple`, `print_simple`). Kernel side:
//! net/sched/act_simple.c (`tcf_simp_init`, `reset_policy`, `tcf_simp_act`,
//! `tcf_simp_dump`).
//!
//! # Model
//!
//! The action counts the packet and answers its control verdict (default `pipe`);
//! it changes nothing in the packet. The kernel's one effect, a `simple: STRING_N`
//! line in the kernel log per packet (`pr_info`), has no counterpart here: what a
//! user can observe is the action's counters and ages in `tc -s actions list`.
//! The string holds at most 31 bytes (SIMP_MAX_DATA with its NUL); tc refuses a
//! longer one. A request without `sdata` creates nothing (EINVAL) but may bind an
//! existing action by index. No offload setup exists for it, so its dumps never
//! report `used_hw_stats`, and its text shows neither its kind nor its control.

use crate::classify::action::{parse_action_control_dflt, Fail, TC_ACT_PIPE};
use crate::classify::FilterError;
use crate::tc::{matches, units, Args, Out, TcError};

const USAGE: &str = "Usage:... simple [sdata STRING] [index INDEX] [CONTROL]
\tSTRING being an arbitrary string
\tINDEX := optional index value used
\tCONTROL := reclassify|pipe|drop|continue|ok
";

/// SIMP_MAX_DATA: the string's buffer, NUL included.
const SIMP_MAX_DATA: usize = 32;

/// What tc sends: `struct tc_defact` and TCA_DEF_DATA.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub action: i32,
    pub sdata: Option<String>,
}

/// `struct tcf_defact`'s own part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Simple {
    pub action: i32,
    pub sdata: String,
}

/// m_simple.c `parse_simple`, at the word `simple`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    let mut p = Spec::default();
    let mut ok = 0;
    while let Some(w) = a.peek() {
        if matches(w, "simple") {
            a.next();
            a.peek().ok_or_else(TcError::incomplete)?;
        } else if matches(w, "sdata") {
            a.next();
            p.sdata = Some(a.value()?.to_string());
            ok += 1;
        } else if matches(w, "help") {
            return Err(Fail::Exit(TcError::usage(USAGE)));
        } else {
            break;
        }
    }
    p.action = parse_action_control_dflt(a, TC_ACT_PIPE)?;
    if a.peek().is_some_and(|w| matches(w, "index")) {
        a.next();
        let v = a.value()?;
        match units::get_unsigned10(v) {
            Some(i) => p.index = i,
            None => return Err(Fail::Ret(format!("simple: Illegal \"index\" ({v})\n"))),
        }
        ok += 1;
    }
    if ok == 0 {
        return Err(Fail::Ret(USAGE.into()));
    }
    if let Some(s) = p.sdata.as_deref().filter(|s| s.len() > SIMP_MAX_DATA - 1) {
        return Err(Fail::Ret(format!("simple: Illegal string len {} <{s}>\n", s.len())));
    }
    Ok(p)
}

impl Spec {
    /// `tcf_simp_init` after the index lookup: no string, no action (EINVAL).
    pub(crate) fn params(&self) -> Result<Simple, FilterError> {
        let sdata = self.sdata.clone().ok_or(FilterError::Errno("Invalid argument"))?;
        Ok(Simple { action: self.action, sdata })
    }
}

impl Simple {
    /// `tcf_simp_dump`: parms, the string with its NUL, the times.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TC_GEN, TM};
        nla(TC_GEN) + nla(self.sdata.len() + 1) + TM
    }
    /// m_simple.c `print_simple` up to the index line.
    pub fn print(&self, out: &mut Out) {
        out.string("simple", format_args!("Simple <{}>", self.sdata), &self.sdata);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::action::TC_ACT_SHOT;

    fn spec(s: &str) -> Result<Spec, String> {
        crate::classify::act::parse_str(parse, s)
    }

    #[test]
    fn parses_and_refuses_like_tc() {
        assert_eq!(
            spec("simple sdata hello drop index 4"),
            Ok(Spec { index: 4, action: TC_ACT_SHOT, sdata: Some("hello".into()) })
        );
        assert_eq!(spec("simple simple sdata x"), Ok(Spec { index: 0, action: TC_ACT_PIPE, sdata: Some("x".into()) }));
        assert_eq!(spec("simple index 3"), Ok(Spec { index: 3, action: TC_ACT_PIPE, sdata: None }));
        assert_eq!(spec("simple pipe"), Err(USAGE.to_string()));
        assert_eq!(spec("simple sdata x index y"), Err("simple: Illegal \"index\" (y)\n".to_string()));
        let long = "a".repeat(32);
        assert_eq!(spec(&format!("simple sdata {long}")), Err(format!("simple: Illegal string len 32 <{long}>\n")));
        assert!(spec(&format!("simple sdata {}", &long[1..])).is_ok());
        assert_eq!(spec("simple help"), Err(format!("exit 255: {USAGE}")));
        assert_eq!(spec("simple index 3").unwrap().params(), Err(FilterError::Errno("Invalid argument")));
    }

    #[test]
    fn prints_only_the_string() {
        let mut out = Out::text();
        spec("simple sdata hi drop").unwrap().params().unwrap().print(&mut out);
        assert_eq!(out.into_string(), "Simple <hi>");
    }
}
