//! The sample action: hand one packet in RATE, truncated, to a psample group.
//!
//! tc side: tc/m_sample.c (`parse_sample`, `print_sample`). Kernel side:
//! net/sched/act_sample.c (`tcf_sample_init`, `tcf_sample_act`,
//! `tcf_sample_dump`).
//!
//! # Model
//!
//! The kernel counts every packet the action sees and, for one in RATE drawn at
//! random (`get_random_u32`), passes a copy to psample's netlink group GROUP, where
//! a listener (hsflowd, `tc monitor`-like tools) may read it; the packet itself goes
//! on with the control verdict (default `pipe`). Nothing in the engine listens on a
//! psample group and it has no random source, so no sample is drawn or counted: the
//! action's counters and verdict are all a user sees of it here, as in `tc -s
//! actions` on a kernel without a psample listener. RATE 0 is refused by the kernel
//! ("invalid sample rate"); TRUNC is stored and printed.

use crate::classify::action::{parse_action_control_dflt, print_action_control, Fail, TC_ACT_PIPE};
use crate::classify::FilterError;
use crate::tc::{matches, units, Args, Out, TcError};

const USAGE: &str = "Usage: sample SAMPLE_CONF
where:
\tSAMPLE_CONF := SAMPLE_PARAMS | SAMPLE_INDEX
\tSAMPLE_PARAMS := rate RATE group GROUP [trunc SIZE] [SAMPLE_INDEX]
\tSAMPLE_INDEX := index INDEX
\tRATE := The ratio of packets observed at the data source to the samples generated.
\tGROUP := the psample sampling group
\tSIZE := the truncation size
\tINDEX := integer index of the sample action
";

/// What tc sends: `struct tc_sample` and the optional attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub action: i32,
    pub rate: Option<u32>,
    pub group: Option<u32>,
    pub trunc: Option<u32>,
}

/// `struct tcf_sample`'s parameters and the control verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub action: i32,
    pub rate: u32,
    pub group: u32,
    pub trunc: Option<u32>,
}

/// m_sample.c `parse_sample`, at the word `sample`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    if a.rest().len() <= 1 {
        return Err(Fail::Exit(TcError::usage("Error: argument \"sample count\" is required\n")));
    }
    a.next();
    let mut p = Spec::default();
    let usage = |m: String| Fail::Exit(TcError::usage(format!("{m}{USAGE}")));
    while let Some(w) = a.peek() {
        let (slot, what) = if matches(w, "rate") {
            (&mut p.rate, "Illegal rate")
        } else if matches(w, "group") {
            (&mut p.group, "Illegal group num")
        } else if matches(w, "trunc") {
            (&mut p.trunc, "Illegal truncation size")
        } else if matches(w, "help") {
            return Err(usage(String::new()));
        } else {
            break;
        };
        a.next();
        let v = a.value()?;
        match units::get_unsigned10(v) {
            Some(n) => *slot = Some(n),
            None => return Err(usage(format!("{what} {v}\n"))),
        }
    }
    p.action = parse_action_control_dflt(a, TC_ACT_PIPE)?;
    if a.peek().is_some_and(|w| matches(w, "index")) {
        a.next();
        match units::get_unsigned10(a.value()?) {
            Some(i) => p.index = i,
            None => return Err(Fail::Ret("sample: Illegal \"index\"\n".into())),
        }
    }
    if p.index == 0 && p.group.is_none() {
        return Err(usage("param \"group\" not set\n".into()));
    }
    if p.index == 0 && p.rate.is_none() {
        return Err(usage("param \"rate\" not set\n".into()));
    }
    Ok(p)
}

impl Spec {
    /// `tcf_sample_init` after the index lookup.
    pub(crate) fn params(&self) -> Result<Sample, FilterError> {
        let (Some(rate), Some(group)) = (self.rate, self.group) else {
            return Err(FilterError::ext("sample rate and group are required"));
        };
        if rate == 0 {
            return Err(FilterError::ext("invalid sample rate"));
        }
        Ok(Sample { action: self.action, rate, group, trunc: self.trunc })
    }
}

impl Sample {
    /// `tcf_sample_dump`: parms, the times, rate, trunc size when set, group.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TC_GEN, TM};
        nla(TC_GEN) + TM + nla(4) + self.trunc.map_or(0, |_| nla(4)) + nla(4)
    }
    /// m_sample.c `print_sample` up to the index line.
    pub fn print(&self, out: &mut Out) {
        out.string("kind", format_args!("sample "), "sample");
        out.uint("rate", format_args!("rate 1/{} ", self.rate), self.rate as u64);
        out.uint("group", format_args!("group {}", self.group), self.group as u64);
        if let Some(t) = self.trunc {
            out.uint("trunc_size", format_args!(" trunc_size {t}"), t as u64);
        }
        print_action_control(out, " ", self.action, "");
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
            spec("sample rate 100 group 5 trunc 128 drop index 2"),
            Ok(Spec { index: 2, action: TC_ACT_SHOT, rate: Some(100), group: Some(5), trunc: Some(128) })
        );
        assert_eq!(spec("sample index 4"), Ok(Spec { index: 4, action: TC_ACT_PIPE, ..Default::default() }));
        assert_eq!(spec("sample"), Err("exit 255: Error: argument \"sample count\" is required\n".into()));
        assert_eq!(spec("sample rate x group 1"), Err(format!("exit 255: Illegal rate x\n{USAGE}")));
        assert_eq!(spec("sample rate 10"), Err(format!("exit 255: param \"group\" not set\n{USAGE}")));
        assert_eq!(spec("sample group 10"), Err(format!("exit 255: param \"rate\" not set\n{USAGE}")));
        assert_eq!(spec("sample rate 1 group 1 index q"), Err("sample: Illegal \"index\"\n".into()));
        assert_eq!(
            spec("sample index 4").unwrap().params(),
            Err(FilterError::ext("sample rate and group are required"))
        );
        assert_eq!(spec("sample rate 0 group 1").unwrap().params(), Err(FilterError::ext("invalid sample rate")));
    }

    #[test]
    fn prints_as_tc() {
        let mut out = Out::text();
        spec("sample rate 12 group 3 trunc 64").unwrap().params().unwrap().print(&mut out);
        assert_eq!(out.into_string(), "sample rate 1/12 group 3 trunc_size 64 pipe");
    }
}
