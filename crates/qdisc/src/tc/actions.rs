//! `tc actions`: the action table of the netns on its own — tc/m_action.c's
//! `do_action` (`tc_action_modify`, `tc_action_gd`, `tc_act_list_or_flush`,
//! `print_action`) over the kernel's act_api.c (`tcf_action_add`, `tca_action_gd`,
//! `tca_action_flush`, `tc_dump_action`), which [`ActionTable`] and [`ActCtx`] play.
//!
//! tc's quirks kept: `get`/`delete` skip the word after the command unread (it is
//! meant to be `action`), and when the kernel refuses them tc goes on reading at
//! that word, so a refusal ends with `Command "action" is unknown`; `list`/`flush`
//! of a kind tc has no module for say `bad action KIND` and succeed; a `list` of a
//! kind the kernel has no module for, or of no actions, prints nothing. A `list`
//! prints `total acts N` for each netlink message of the kernel's dump
//! ([`action::dump_messages`]).
//!
//! [`ActionTable`]: crate::classify::action::ActionTable

use crate::classify::action::{self, ActCtx, ExtsSpec, Kind};
use crate::tc::{matches, units, Args, Out, Tc, TcError, TcOpts};

const USAGE: &str = "usage: tc actions <ACTSPECOP>*
Where:\t\tACTSPECOP := ACR | GD | FL
\tACR := add | change | replace <ACTSPEC>*
\tGD := get | delete | <ACTISPEC>*
\tFL := ls | list | flush | <ACTNAMESPEC>
\tACTNAMESPEC :=  action <ACTNAME>
\tACTISPEC := <ACTNAMESPEC> <INDEXSPEC>
\tACTSPEC := action <ACTDETAIL> [INDEXSPEC] [HWSTATSSPEC] [SKIPSPEC]
\tINDEXSPEC := index <32 bit indexvalue>
\tHWSTATSSPEC := hw_stats [ immediate | delayed | disabled ]
\tSKIPSPEC := [ skip_sw | skip_hw ]
\tACTDETAIL := <ACTNAME> <ACTPARAMS>
\t\tExample ACTNAME is gact, mirred, bpf, etc
\t\tEach action has its own parameters (ACTPARAMS)

";

/// How tc names a kind it has a module for (`get_action_kind(k)->id == k`): one
/// this engine models, or one it refuses.
fn kind(k: &str) -> Result<Option<Kind>, ()> {
    match Kind::from_name(k) {
        Some(kd) => Ok(Some(kd)),
        None if action::OTHER_KINDS.contains(&k) => Ok(None),
        None => Err(()),
    }
}

/// An error of `tc actions`: whatever tc printed, exit status 255 (`return -1`).
fn fail(msg: impl Into<String>) -> TcError {
    TcError::usage(msg)
}

/// `do_action`.
pub(crate) fn do_action(tc: &mut Tc, argv: &[String], o: TcOpts) -> Result<String, TcError> {
    let mut i = 0;
    let mut stdout = String::new();
    let mut stderr = String::new();
    while let Some(cmd) = argv.get(i) {
        if matches(cmd, "add") || matches(cmd, "change") || matches(cmd, "replace") {
            i = modify(tc, argv, i + 1, !matches(cmd, "add")).map_err(|e| with(&stderr, e))?;
        } else if matches(cmd, "delete") || matches(cmd, "get") {
            match gd(tc, argv, i + 1, matches(cmd, "get"), o) {
                Ok((next, text)) => {
                    stdout.push_str(&text);
                    i = next;
                }
                Err(Gd::Usage(e)) => return Err(with(&stderr, e)),
                // tc_action_gd's `return 1`: do_action reads on at the same place.
                Err(Gd::Kernel(m)) => {
                    stderr.push_str(&m);
                    i += 1;
                }
            }
        } else if matches(cmd, "list") || matches(cmd, "show") || matches(cmd, "lst") || matches(cmd, "flush") {
            if argv.len() - i <= 2 {
                return Err(fail(format!("{stderr}{USAGE}")));
            }
            let flush = matches(cmd, "flush");
            let r = list_or_flush(tc, &argv[i + 2..], flush, o).map_err(|e| with(&stderr, e))?;
            tc.warn.push_str(&stderr);
            stdout.push_str(&r);
            return Ok(stdout);
        } else if matches(cmd, "help") {
            return Err(fail(format!("{stderr}{USAGE}")));
        } else {
            return Err(fail(format!("{stderr}Command \"{cmd}\" is unknown, try \"tc actions help\".\n")));
        }
    }
    tc.warn.push_str(&stderr);
    Ok(stdout)
}

/// An error after what tc already printed.
fn with(stderr: &str, e: TcError) -> TcError {
    TcError { msg: format!("{stderr}{}", e.msg), code: e.code }
}

/// `tc_action_modify` + `tcf_action_add`: the action list from `argv[at..]`;
/// returns where the next command starts.
fn modify(tc: &mut Tc, argv: &[String], at: usize, replace: bool) -> Result<usize, TcError> {
    let mut a = Args::new(&argv[at..]);
    a.set_links(tc.link_names());
    let mut spec = ExtsSpec::default();
    if a.peek().is_some() {
        action::parse_action(&mut a, &mut spec).map_err(|e| fail(e.msg))?;
    } else {
        return Err(fail("Illegal \"action\"\n"));
    }
    let next = argv.len() - a.rest().len();
    let kernel = tc.kernel();
    let available = |k| kernel.has_action(k);
    let now = tc.now;
    let warning = ActCtx { table: &mut tc.actions, available: &available, kernel, now, at_ingress: false, est: None }
        .add(&spec, replace)
        .map_err(|e| fail(e.into_tc().msg))?;
    if let Some(w) = warning {
        tc.warn.push_str(&format!("Warning: {w}.\n"));
    }
    Ok(next)
}

enum Gd {
    /// tc's own refusal: the command ends (status 255).
    Usage(TcError),
    /// The kernel's: printed, and tc reads on.
    Kernel(String),
}

/// `tc_action_gd` + `tca_action_gd`: `get` prints the actions; `delete` removes them.
fn gd(tc: &mut Tc, argv: &[String], at: usize, get: bool, o: TcOpts) -> Result<(usize, String), Gd> {
    let mut pairs = Vec::new();
    // The first word is skipped unread.
    let mut j = at + 1;
    while let Some(w) = argv.get(j) {
        if w == "action" {
            j += 1;
            continue;
        } else if w == "help" {
            return Err(Gd::Usage(fail("")));
        }
        let k: String = w.chars().take(15).collect();
        let kind = match kind(&k) {
            Ok(Some(kd)) => kd,
            Ok(None) => return Err(Gd::Usage(action::refuse(&k))),
            Err(()) => return Err(Gd::Usage(fail(format!("Error: non existent action: {k}\n")))),
        };
        j += 1;
        let no_index = || Gd::Usage(fail(format!("Error: no index specified action: {k}\n")));
        let Some(w) = argv.get(j) else { return Err(no_index()) };
        if !matches(w, "index") {
            return Err(no_index());
        }
        let v = argv.get(j + 1).ok_or(Gd::Usage(TcError::incomplete()))?;
        let index: u32 = v.parse().map_err(|_| Gd::Usage(fail("Illegal \"index\"\n")))?;
        j += 2;
        pairs.push((kind, index));
    }
    let kernel = tc.kernel();
    let refused = |e: crate::classify::FilterError| Gd::Kernel(e.into_tc().msg);
    let mut acts = Vec::new();
    for (kind, index) in pairs {
        if !kernel.has_action(kind) {
            return Err(refused(crate::classify::FilterError::ext("Specified TC action kind not found")));
        }
        if index == 0 {
            // tc sends no TCA_ACT_INDEX for 0: tcf_action_get_1 reads it as 0.
            return Err(refused(crate::classify::FilterError::ext("Invalid TC action index value")));
        }
        acts.push(tc.actions.get(kind, index).map_err(refused)?);
    }
    if !get {
        tc.actions.delete(acts).map_err(refused)?;
        return Ok((j, String::new()));
    }
    let mut out = out(o);
    out.start_top();
    total(&mut out, 0);
    out.open_object(None);
    out.open_array("actions", "");
    for (n, a) in acts.iter().enumerate() {
        action::print_one(&mut out, a, n as u64 + 1, false, tc.now);
    }
    out.close_array("");
    out.close_object();
    out.end_top();
    Ok((j, out.into_string()))
}

fn out(o: TcOpts) -> Out {
    let out = if o.json { Out::json(o.pretty) } else { Out::text() };
    out.with_flags(o.details, o.raw, o.iec, o.oneline).with_stats(o.stats > 0)
}

/// `print_action`'s head: `total acts N`.
fn total(out: &mut Out, n: u64) {
    out.open_object(None);
    out.uint("total acts", format_args!("total acts {n}"), n);
    out.nl();
    out.close_object();
}

/// `tc_act_list_or_flush` from the kind's word on.
fn list_or_flush(tc: &mut Tc, argv: &[String], flush: bool, o: TcOpts) -> Result<String, TcError> {
    let k: String = argv[0].chars().take(15).collect();
    let kind = match kind(&k) {
        Ok(Some(kd)) => kd,
        Ok(None) => return Err(action::refuse(&k)),
        Err(()) => {
            tc.warn.push_str(&format!("bad action {k}\n"));
            return Ok(String::new());
        }
    };
    let mut since = None;
    if argv.get(1).is_some_and(|w| w == "since") {
        let v = argv.get(2).ok_or_else(TcError::incomplete)?;
        let ms = units::get_u32(v).ok_or_else(|| crate::tc::invarg("dump time \"since\" is invalid", v))?;
        since = (ms != 0).then_some(ms as u64 * 1_000_000);
    }
    let kernel = tc.kernel();
    if flush {
        let flushing = |m: String| TcError { msg: format!("{m}We have an error flushing\n"), code: 1 };
        if !kernel.has_action(kind) {
            return Err(flushing("Error: Cannot flush unknown TC action.\n".into()));
        }
        return tc
            .actions
            .flush(kind)
            .map(|w| {
                if let Some(w) = w {
                    tc.warn.push_str(&format!("Warning: {w}.\n"));
                }
                String::new()
            })
            .map_err(|e| {
                let m = e.into_tc().msg;
                flushing(m.trim_end_matches("We have an error talking to the kernel\n").to_string())
            });
    }
    let acts = if kernel.has_action(kind) { tc.actions.dump(kind, since, tc.now) } else { Vec::new() };
    let mut out = out(o);
    out.start_top();
    // print_action, once per netlink message of the dump: its count, its actions
    // numbered from 0.
    let mut rest = &acts[..];
    for n in action::dump_messages(&acts) {
        let (msg, more) = rest.split_at(n);
        rest = more;
        total(&mut out, n as u64);
        out.open_object(None);
        out.open_array("actions", "");
        for (order, a) in msg.iter().enumerate() {
            action::print_one(&mut out, a, order as u64, false, tc.now);
        }
        out.close_array("");
        out.close_object();
    }
    out.end_top();
    Ok(if o.json || !acts.is_empty() { out.into_string() } else { String::new() })
}
