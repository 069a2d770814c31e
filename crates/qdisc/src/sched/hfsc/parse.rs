//! hfsc's tc side: q_hfsc.c's option and class parsers and its curve printer.

use super::curve::ServiceCurve;
use crate::tc::{matches, units, Args, Out, TcError};

/// `struct tc_hfsc_qopt`: the minor of the default class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HfscOpt {
    pub defcls: u16,
}

/// What tc sends for `class … hfsc`: the TCA_HFSC_RSC, _FSC and _USC attributes it
/// was given (`sc` sends the same curve as both RSC and FSC).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HfscClassOpt {
    pub rsc: Option<ServiceCurve>,
    pub fsc: Option<ServiceCurve>,
    pub usc: Option<ServiceCurve>,
}

/// q_hfsc.c `explain_qdisc`.
const USAGE: &str = "Usage: ... hfsc [ default CLASSID ]\n\n default: default class for unclassified packets\n";

/// q_hfsc.c `explain_class`.
const CLASS_USAGE: &str = "Usage: ... hfsc [ [ rt SC ] [ ls SC ] | [ sc SC ] ] [ ul SC ]

SC := [ [ m1 BPS ] d SEC ] m2 BPS

 m1 : slope of first segment
 d  : x-coordinate of intersection
 m2 : slope of second segment

Alternative format:

SC := [ [ umax BYTE ] dmax SEC ] rate BPS

 umax : maximum unit of work
 dmax : maximum delay
 rate : rate

Remarks:
 - at least one of 'rt', 'ls' or 'sc' must be specified
 - 'ul' can only be specified with 'ls' or 'sc'

";

/// `explain1`.
fn illegal(what: &str) -> String {
    format!("HFSC: Illegal \"{what}\"\n")
}

/// q_hfsc.c `hfsc_parse_opt`.
pub fn parse(args: &mut Args) -> Result<HfscOpt, TcError> {
    let mut o = HfscOpt::default();
    while let Some(a) = args.next() {
        if matches(a, "default") {
            let v = args.value()?;
            if o.defcls != 0 {
                return Err(TcError::tc("HFSC: Double \"default\"\n"));
            }
            o.defcls = get_u16_hex(v).ok_or_else(|| TcError::tc(illegal("default")))?;
        } else if matches(a, "help") {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("HFSC: What is \"{a}\" ?\n{USAGE}")));
        }
    }
    Ok(o)
}

/// `get_u16(…, 16)`: `strtoul` base 16 over the whole word (leading blanks, a sign and
/// `0x` allowed), at most 0xffff.
fn get_u16_hex(s: &str) -> Option<u16> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\u{b}', '\u{c}', '\r']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let body = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(b) if b.starts_with(|c: char| c.is_ascii_hexdigit()) => b,
        _ => t,
    };
    if body.is_empty() || !body.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let v = u64::from_str_radix(body, 16).unwrap_or(u64::MAX);
    // A negative number wraps to something above 0xffff unless it is -0.
    let v = if neg { v.wrapping_neg() } else { v };
    u16::try_from(v).ok()
}

/// q_hfsc.c `hfsc_parse_class_opt`.
pub fn parse_class(args: &mut Args) -> Result<HfscClassOpt, TcError> {
    let mut o = HfscClassOpt::default();
    let mut any = false;
    while let Some(a) = args.next() {
        let which = if matches(a, "rt") {
            "rt"
        } else if matches(a, "ls") {
            "ls"
        } else if matches(a, "sc") {
            "sc"
        } else if matches(a, "ul") {
            "ul"
        } else if matches(a, "help") {
            return Err(TcError::tc(CLASS_USAGE));
        } else {
            return Err(TcError::tc(format!("HFSC: What is \"{a}\" ?\n{CLASS_USAGE}")));
        };
        if args.is_empty() {
            return Err(TcError::incomplete());
        }
        let (sc, used) = get_sc(args)?.ok_or_else(|| TcError::tc(illegal(which)))?;
        for _ in 0..used {
            args.next();
        }
        match which {
            "rt" => o.rsc = Some(sc),
            "ls" => o.fsc = Some(sc),
            "sc" => (o.rsc, o.fsc) = (Some(sc), Some(sc)),
            _ => o.usc = Some(sc),
        }
        any = true;
    }
    if !any {
        return Err(TcError::tc(format!("HFSC: no parameters given\n{CLASS_USAGE}")));
    }
    if o.usc.is_some() && o.fsc.is_none() {
        return Err(TcError::tc(format!(
            "HFSC: Upper-limit Service Curve without Link-Share Service Curve\n{CLASS_USAGE}"
        )));
    }
    Ok(o)
}

/// The words of one curve with `NEXT_ARG`'s cursor: `at` is the current word.
struct Words<'a> {
    w: &'a [String],
    at: usize,
}

impl<'a> Words<'a> {
    fn word(&self) -> &'a str {
        &self.w[self.at]
    }
    /// `NEXT_ARG()`.
    fn next(&mut self) -> Result<&'a str, TcError> {
        self.at += 1;
        self.w.get(self.at).map(String::as_str).ok_or_else(TcError::incomplete)
    }
}

/// `hfsc_get_sc`: the `m1 d m2` form, else the `umax dmax rate` form, both read from
/// the first word of the curve. `Ok(None)` is tc's −1 (its messages already in
/// `args.notes`); an incomplete command ends tc at once. On success, the curve and
/// the number of words it took.
fn get_sc(args: &mut Args) -> Result<Option<(ServiceCurve, usize)>, TcError> {
    let w = args.rest();
    let mut words = Words { w, at: 0 };
    let mut sc = get_sc1(args, &mut words)?;
    if sc.is_none() {
        words.at = 0;
        sc = get_sc2(args, &mut words)?;
    }
    let Some(sc) = sc else { return Ok(None) };
    if sc.m1 == 0 && sc.m2 == 0 {
        args.notes.push_str("HFSC: Service Curve has two zero slopes\n");
        return Ok(None);
    }
    Ok(Some((sc, words.at + 1)))
}

/// A rate word: `N%` of the device's speed or a rate in tc's units (32 bits).
fn rate(args: &mut Args, v: &str, what: &str) -> Option<u32> {
    let r = args.rate(v);
    if r.is_none() {
        args.notes.push_str(&illegal(what));
    }
    r
}

/// `hfsc_get_sc1`: `[ [ m1 BPS ] d SEC ] m2 BPS`.
fn get_sc1(args: &mut Args, w: &mut Words) -> Result<Option<ServiceCurve>, TcError> {
    let mut sc = ServiceCurve::default();
    if matches(w.word(), "m1") {
        let v = w.next()?;
        let Some(m1) = rate(args, v, "m1") else { return Ok(None) };
        sc.m1 = m1;
        w.next()?;
    }
    if matches(w.word(), "d") {
        let v = w.next()?;
        let Some(d) = units::get_time(v) else {
            args.notes.push_str(&illegal("d"));
            return Ok(None);
        };
        sc.d = d;
        w.next()?;
    }
    if !matches(w.word(), "m2") {
        return Ok(None);
    }
    let v = w.next()?;
    let Some(m2) = rate(args, v, "m2") else { return Ok(None) };
    sc.m2 = m2;
    Ok(Some(sc))
}

/// `hfsc_get_sc2`: `[ [ umax BYTE ] dmax SEC ] rate BPS`, turned into m1/d/m2 in
/// tc's own double and unsigned int arithmetic.
fn get_sc2(args: &mut Args, w: &mut Words) -> Result<Option<ServiceCurve>, TcError> {
    let (mut umax, mut dmax) = (0u32, 0u32);
    if matches(w.word(), "umax") {
        let v = w.next()?;
        let Some(u) = units::get_size(v) else {
            args.notes.push_str(&illegal("umax"));
            return Ok(None);
        };
        umax = u;
        w.next()?;
    }
    if matches(w.word(), "dmax") {
        let v = w.next()?;
        let Some(d) = units::get_time(v) else {
            args.notes.push_str(&illegal("dmax"));
            return Ok(None);
        };
        dmax = d;
        w.next()?;
    }
    if !matches(w.word(), "rate") {
        return Ok(None);
    }
    let v = w.next()?;
    let Some(rate) = rate(args, v, "rate") else { return Ok(None) };
    if umax != 0 && dmax == 0 {
        args.notes.push_str("HFSC: umax given but dmax is zero.\n");
        return Ok(None);
    }
    let burst = (umax as f64 * 1e6 / dmax as f64).ceil();
    if dmax != 0 && burst > rate as f64 {
        // Concave: the first segment serves umax within dmax.
        return Ok(Some(ServiceCurve { m1: burst as i64 as u32, d: dmax, m2: rate }));
    }
    // Convex: nothing until dmax − umax/rate, computed in unsigned int
    // (TIME_UNITS_PER_SEC is an int): with a zero rate tc dies of SIGFPE, which the
    // shell reports (golden hfsc-edges).
    let Some(lag) = umax.wrapping_mul(1_000_000).checked_div(rate) else {
        return Err(TcError { msg: "Floating point exception\n".into(), code: 136 });
    };
    Ok(Some(ServiceCurve { m1: 0, d: dmax.wrapping_sub(lag), m2: rate }))
}

/// q_hfsc.c `hfsc_print_sc`: the name with the curve's `d` as plain fprintf (also in
/// JSON), the slopes text only.
pub(super) fn print_sc(out: &mut Out, name: &str, sc: &ServiceCurve) {
    let iec = out.iec();
    out.fprintf(format_args!("{name} "));
    out.fp(format_args!("m1 {} ", units::fmt_rate(sc.m1 as u64, iec)));
    out.fprintf(format_args!("d {} ", units::fmt_time(sc.d)));
    out.fp(format_args!("m2 {} ", units::fmt_rate(sc.m2 as u64, iec)));
}
