//! tc actions attached to filters: gact, police and mirred here, and the kinds of
//! [`super::act`] (skbedit, simple), each registered once below (`ActSpec`, `ActKind`, `Kind`).
//!
//! tc side: tc/m_action.c (`parse_action`, `tc_print_action`), tc/m_gact.c,
//! tc/m_police.c, tc/m_mirred.c and tc_util.c's action-control helpers. Kernel side:
//! net/sched/act_api.c (`tcf_action_init_1`, `tcf_action_exec`, the per-netns index
//! table), act_gact.c (`tcf_gact_init`, `tcf_gact`), act_police.c
//! (`tcf_police_init`, `tcf_police_act`), act_mirred.c (`tcf_mirred_init`,
//! `tcf_mirred_act`) and cls_api.c's `tcf_exts_*`.
//!
//! # Model
//!
//! * A filter's actions are an [`Exts`]: shared handles to action objects, in
//!   order (`action order 1:`, `2:` …), or one police action given with the legacy
//!   `police` keyword (TCA_OLD_COMPAT, dumped as the filter's own POLICE attribute).
//! * Action objects live in a per-netns table ([`ActionTable`], one per [`crate::tc::Tc`]),
//!   by kind and index: a new action takes the lowest free index from 1, and
//!   `index N` binds to an existing action N of that kind (its parameters stay, as
//!   for any bind in the kernel). An action goes away when the last filter holding it
//!   does; its `ref`/`bind` counts are the number of filters holding it.
//! * Execution ([`Exts::exec`]) mirrors `tcf_action_exec`: actions run in order while
//!   they answer PIPE; `jump N` skips N actions (restart from the top); the result is
//!   a `TC_ACT_*` verdict the classifier and the qdisc act on. Time is passed in: the
//!   police token bucket runs on the caller's clock in nanoseconds, like tbf's.
//! * mirred hands the packet to another device, which the engine cannot reach: a
//!   copy (mirror) or the packet itself (redirect) goes to the [`Outbox`] of the
//!   netns (the [`ActionTable`]'s), and whoever runs the devices (the simulator)
//!   takes it from there right after the classification that produced it, as the
//!   kernel's `tcf_mirred_forward` calls `dev_queue_xmit` / `netif_receive_skb` in
//!   place. The verdict is the action's control (`stolen` for redirect, `pipe` or
//!   the given one for mirror). The owner tells each classification where mirred's
//!   loop guards stand ([`MirredNest`]: the transmit forwards in progress, the
//!   packet's `tc_depth`), and hands an ifb's returns in with [`set_skip_classify`]. A target that refuses the packet is reported back
//!   with [`Mirrored::failed`] (the action's overlimit, as `tcf_mirred_to_dev`
//!   counts a forward error). `blockid` targets are accepted and printed, but no
//!   shared block exists here, so they reach no device (`tcf_blockcast`'s empty
//!   block: an overlimit, the control verdict).
//!
//! * Actions edit the packet they are given (`&mut Packet`): what a classifier runs
//!   them on is what the qdisc then queues, and a reclassification sees the edits.
//!
//! * A filter's `estimator` (TCA_RATE) gives each action the request creates a rate
//!   estimator (`tcf_idr_create`; police's own `gen_replace_estimator`), caught up
//!   when the action runs or is dumped ([`crate::estimator`]); police `avrate`
//!   needs one (EINVAL without) and treats a packet as over the limit while the
//!   estimate, this packet counted first, is at or above it.
//!
//! Not modelled (refused with a qdisc-lab message): other action kinds (those that
//! act on conntrack state — ct, connmark, ctinfo — say so), gact `random netrand` (needs a
//! random source), `hw_stats`, and the offload flags `skip_sw`/`skip_hw` of an
//! action. Action cookies are kept and printed (tc's quirk kept: a cookie also goes
//! to the actions after it in the same list). The generic flag `no_percpu`
//! (TCA_ACT_FLAGS_NO_PERCPU_STATS) is stored by the action it creates and printed;
//! it changes only how the kernel keeps the counters, not their values.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use crate::estimator::{EstSpec, Estimator};
use crate::packet::Packet;
use crate::rate::{LinkLayer, PschedPktrate, PschedRatecfg, RateSpec};
use crate::tc::{matches, units, Args, Out, TcError};
use crate::time::Instant;

use super::act::{csum, nat, pedit, sample, simple, skbedit, vlan};
use super::{FilterError, TcfResult};

pub const TC_ACT_UNSPEC: i32 = -1;
pub const TC_ACT_OK: i32 = 0;
pub const TC_ACT_RECLASSIFY: i32 = 1;
pub const TC_ACT_SHOT: i32 = 2;
pub const TC_ACT_PIPE: i32 = 3;
pub const TC_ACT_STOLEN: i32 = 4;
pub const TC_ACT_QUEUED: i32 = 5;
pub const TC_ACT_REPEAT: i32 = 6;
pub const TC_ACT_REDIRECT: i32 = 7;
pub const TC_ACT_TRAP: i32 = 8;
/// TC_ACT_VALUE_MAX: the last plain opcode.
const TC_ACT_VALUE_MAX: i32 = TC_ACT_TRAP;
pub const TC_ACT_EXT_VAL_MASK: i32 = 0x0FFF_FFFF;
pub const TC_ACT_JUMP: i32 = 0x1000_0000;
pub const TC_ACT_GOTO_CHAIN: i32 = 0x2000_0000;
/// TC_ACT_CONSUMED: what a redirect at ingress that hands on the packet itself answers.
pub const TC_ACT_CONSUMED: i32 = TC_ACT_VALUE_MAX + 1;
/// TCA_ACT_MAX_PRIO: actions per filter.
const TCA_ACT_MAX_PRIO: usize = 32;

/// `TC_ACT_EXT_CMP(v, opcode)`.
pub fn ext_cmp(v: i32, opcode: i32) -> bool {
    (v & !TC_ACT_EXT_VAL_MASK) == opcode
}

const PGACT_NONE: u16 = 0;
const PGACT_NETRAND: u16 = 1;
const PGACT_DETERM: u16 = 2;

// ---- tc side -------------------------------------------------------------------------

const GACT_USAGE: &str = "Usage: ... gact <ACTION> [RAND] [INDEX]
Where: \tACTION := reclassify | drop | continue | pass | pipe |
       \t          goto chain <CHAIN_INDEX> | jump <JUMP_COUNT>
\tRAND := random <RANDTYPE> <ACTION> <VAL>
\tRANDTYPE := netrand | determ
\tVAL : = value not exceeding 10000
\tJUMP_COUNT := Absolute jump from start of action list
\tINDEX := index value used

";

const POLICE_USAGE: &str = "Usage: ... police [ rate BPS burst BYTES[/BYTES] ] 
\t\t[ pkts_rate RATE pkts_burst PACKETS ] [ mtu BYTES[/BYTES] ]
\t\t[ peakrate BPS ] [ avrate BPS ] [ overhead BYTES ]
\t\t[ linklayer TYPE ] [ CONTROL ]
Where: CONTROL := conform-exceed <EXCEEDACT>[/NOTEXCEEDACT]
\t\t  Define how to handle packets which exceed (<EXCEEDACT>)
\t\t  or conform (<NOTEXCEEDACT>) the configured bandwidth limit.
       EXCEEDACT/NOTEXCEEDACT := { pipe | ok | reclassify | drop | continue |
\t\t\t\t   goto chain <CHAIN_INDEX> }
";

/// Action kinds iproute2 6.15 knows but this engine does not model.
pub(crate) const OTHER_KINDS: &[&str] =
    &["bpf", "connmark", "ct", "ctinfo", "gate", "ife", "ipt", "mpls", "skbmod", "tunnel_key", "xt"];

/// Of [`OTHER_KINDS`], those that act on connection-tracking state.
const CONNTRACK_KINDS: &[&str] = &["connmark", "ct", "ctinfo"];

/// The refusal of a kind of [`OTHER_KINDS`] (tc's exit status 1), by name.
pub(crate) fn refuse(k: &str) -> TcError {
    if CONNTRACK_KINDS.contains(&k) {
        return TcError::tc(format!("qdisc-lab: action \"{k}\" needs conntrack, which qdisc-lab does not model\n"));
    }
    let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
    let (last, rest) = names.split_last().expect("kinds");
    TcError::tc(format!("qdisc-lab: action \"{k}\" is not supported ({} and {last} only)\n", rest.join(", ")))
}

/// tc's `struct tc_police` plus the attributes m_police.c sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoliceSpec {
    pub index: u32,
    /// Exceed action (`tc_police.action`).
    pub action: i32,
    /// Conform action (TCA_POLICE_RESULT; 0 = not sent).
    pub result: i32,
    /// `tc_police.rate` (rate 0 = no byte rate).
    pub rate: RateSpec,
    pub rate64: u64,
    pub peakrate: RateSpec,
    pub prate64: u64,
    /// `tc_police.burst`: ticks.
    pub burst: u32,
    pub mtu: u32,
    /// TCA_POLICE_AVRATE, bytes/s (0 = not sent).
    pub avrate: u32,
    /// TCA_POLICE_PKTRATE64 and TCA_POLICE_PKTBURST64 (ticks: the time of the burst's
    /// packets at the rate), sent together when `pkts_rate` is not 0.
    pub pps: Option<(u64, u64)>,
}

/// One action as tc sends it (TCA_ACT_KIND + TCA_ACT_OPTIONS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActSpec {
    Gact {
        index: u32,
        action: i32,
        /// TCA_GACT_PROB: (ptype, paction, pval).
        prob: Option<(u16, i32, u16)>,
    },
    Police(PoliceSpec),
    Mirred(MirredSpec),
    Skbedit(skbedit::Spec),
    Simple(simple::Spec),
    Pedit(pedit::Spec),
    Nat(nat::Spec),
    Csum(csum::Spec),
    Sample(sample::Spec),
    Vlan(vlan::Spec),
    /// A word tc parsed with gact's parser (its fallback for kinds it has no module
    /// for) but sends as TCA_ACT_KIND: no kernel has such a module.
    Other(String),
}

/// m_mirred.c's `struct tc_mirred` plus TCA_MIRRED_BLOCKID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirredSpec {
    pub index: u32,
    /// The control verdict (`tc_mirred.action`).
    pub action: i32,
    /// TCA_EGRESS_REDIR … TCA_INGRESS_MIRROR (0 = none given).
    pub eaction: i32,
    /// The target device as tc resolved it: ifindex and name (0 = none).
    pub ifindex: u32,
    pub dev: String,
    /// TCA_MIRRED_BLOCKID (0 = not sent).
    pub blockid: u32,
}

/// TCA_EGRESS_REDIR, TCA_EGRESS_MIRROR, TCA_INGRESS_REDIR, TCA_INGRESS_MIRROR.
pub const TCA_EGRESS_REDIR: i32 = 1;
pub const TCA_EGRESS_MIRROR: i32 = 2;
pub const TCA_INGRESS_REDIR: i32 = 3;
pub const TCA_INGRESS_MIRROR: i32 = 4;

/// A filter's actions as tc sends them: the classifier's ACT attribute (a list) and
/// its POLICE attribute (the legacy `police` keyword). A repeated keyword sends the
/// attribute again, and the kernel's parser keeps the last one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtsSpec {
    pub acts: Vec<ActSpec>,
    /// Each action's TCA_ACT_COOKIE, in step with `acts` (None: not sent).
    pub cookies: Vec<Option<Vec<u8>>>,
    /// Each action's TCA_ACT_FLAGS (its user flags: [`TCA_ACT_FLAGS_NO_PERCPU_STATS`]),
    /// in step with `acts`.
    pub flags: Vec<u32>,
    pub police: Option<PoliceSpec>,
}

impl ExtsSpec {
    pub fn is_empty(&self) -> bool {
        self.acts.is_empty() && self.police.is_none()
    }
}

/// `action_a2n` (tc_util.c): a control word, matched as a prefix in tc's order.
fn action_a2n(w: &str, allow_num: bool) -> Option<i32> {
    const A2N: &[(&str, i32)] = &[
        ("continue", TC_ACT_UNSPEC),
        ("drop", TC_ACT_SHOT),
        ("shot", TC_ACT_SHOT),
        ("pass", TC_ACT_OK),
        ("ok", TC_ACT_OK),
        ("reclassify", TC_ACT_RECLASSIFY),
        ("pipe", TC_ACT_PIPE),
        ("trap", TC_ACT_TRAP),
    ];
    if let Some((_, n)) = A2N.iter().find(|(a, _)| matches(w, a)) {
        return Some(*n);
    }
    if allow_num {
        return w.parse::<i32>().ok();
    }
    None
}

/// `action_n2a`.
fn action_n2a(a: i32) -> String {
    if ext_cmp(a, TC_ACT_GOTO_CHAIN) {
        return "goto".into();
    }
    if ext_cmp(a, TC_ACT_JUMP) {
        return "jump".into();
    }
    match a {
        TC_ACT_UNSPEC => "continue".into(),
        TC_ACT_OK => "pass".into(),
        TC_ACT_SHOT => "drop".into(),
        TC_ACT_RECLASSIFY => "reclassify".into(),
        TC_ACT_PIPE => "pipe".into(),
        TC_ACT_STOLEN => "stolen".into(),
        TC_ACT_TRAP => "trap".into(),
        _ => a.to_string(),
    }
}

/// `print_action_control(prefix, action, suffix)`.
pub(crate) fn print_action_control(out: &mut Out, prefix: &str, a: i32, suffix: &str) {
    out.fp(format_args!("{prefix}"));
    out.open_object(Some("control_action"));
    let n = action_n2a(a);
    out.string("type", format_args!("{n}"), &n);
    if ext_cmp(a, TC_ACT_GOTO_CHAIN) {
        let c = (a & TC_ACT_EXT_VAL_MASK) as u64;
        out.uint("chain", format_args!(" chain {c}"), c);
    }
    if ext_cmp(a, TC_ACT_JUMP) {
        let j = (a & TC_ACT_EXT_VAL_MASK) as u64;
        out.uint("jump", format_args!(" {j}"), j);
    }
    out.close_object();
    out.fp(format_args!("{suffix}"));
}

/// How a tc-side parse failed: a message and `return -1` (the callers add their
/// own lines), or an `exit(-1)` that ends tc at once.
pub(crate) enum Fail {
    Ret(String),
    Exit(TcError),
}

impl From<TcError> for Fail {
    fn from(e: TcError) -> Self {
        Fail::Exit(e)
    }
}

/// `parse_action_control_dflt(…, allow_num, ignore_a2n_miss = false)`: a control
/// word, `goto chain N` or `jump N`.
fn parse_action_control(a: &mut Args, allow_num: bool) -> Result<i32, Fail> {
    let Some(w) = a.peek() else { return Err(Fail::Ret(String::new())) };
    if let Some(r) = action_a2n(w, allow_num) {
        a.next();
        return Ok(r);
    }
    if w == "goto" {
        a.next();
        let c = a.value()?;
        if c != "chain" {
            return Err(Fail::Ret("\"chain index\" expected\n".into()));
        }
        let v = a.value()?;
        return match v.parse::<u32>() {
            Ok(n) if n as i64 <= TC_ACT_EXT_VAL_MASK as i64 => Ok(n as i32 | TC_ACT_GOTO_CHAIN),
            _ => Err(Fail::Ret("Illegal \"chain index\"\n".into())),
        };
    }
    if w == "jump" {
        a.next();
        let v = a.value()?;
        return match v.parse::<u32>() {
            Ok(n) if n as i64 <= TC_ACT_EXT_VAL_MASK as i64 => Ok(n as i32 | TC_ACT_JUMP),
            _ => Err(Fail::Ret(format!("Invalid \"jump count\" ({v})\n"))),
        };
    }
    Err(Fail::Ret(format!("Bad action type {w}\n")))
}

/// `parse_action_control_dflt(…, allow_num = false, dflt)`: a control word if one
/// parses; otherwise `dflt`, the cursor where it was (a failed `goto`/`jump` still
/// printed its complaint; a word that is no control word says nothing).
pub(crate) fn parse_action_control_dflt(a: &mut Args, dflt: i32) -> Result<i32, Fail> {
    let at = a.pos();
    match parse_action_control(a, false) {
        Ok(r) => Ok(r),
        Err(Fail::Ret(m)) => {
            if !m.starts_with("Bad action type") {
                a.notes.push_str(&m);
            }
            a.set_pos(at);
            Ok(dflt)
        }
        Err(e) => Err(e),
    }
}

/// `parse_action_control_slash`: `EXCEED[/CONFORM]`.
fn parse_action_control_slash(a: &mut Args, allow_num: bool) -> Result<(i32, Option<i32>), Fail> {
    let Some(w) = a.peek() else { return Err(Fail::Ret(String::new())) };
    let Some((x, y)) = w.split_once('/') else {
        return parse_action_control(a, allow_num).map(|r| (r, None));
    };
    let (Some(r1), Some(r2)) = (action_a2n(x, allow_num), action_a2n(y, allow_num)) else {
        return Err(Fail::Ret(String::new()));
    };
    a.next();
    Ok((r1, Some(r2)))
}

/// m_gact.c `parse_gact` (CONFIG_GACT_PROB on, as iproute2 builds it).
fn parse_gact(a: &mut Args) -> Result<ActSpec, Fail> {
    let usage = |msg: String| Fail::Exit(TcError::usage(format!("{msg}{GACT_USAGE}")));
    if a.peek().is_some_and(|w| matches(w, "gact")) {
        a.next();
        a.peek().ok_or_else(TcError::incomplete)?;
    }
    let mut action = 0;
    let mut prob = None;
    let mut index = 0;
    let skip = a.peek().is_some_and(|w| matches(w, "index"));
    if !skip {
        action = match parse_action_control(a, false) {
            Ok(r) => r,
            Err(Fail::Ret(m)) => return Err(usage(m)),
            Err(e) => return Err(e),
        };
        if let Some(w) = a.peek() {
            if matches(w, "random") {
                a.next();
                let t = a.value()?;
                let ptype = if matches(t, "netrand") {
                    PGACT_NETRAND
                } else if matches(t, "determ") {
                    PGACT_DETERM
                } else {
                    return Err(Fail::Ret("Illegal \"random type\"\n".into()));
                };
                a.peek().ok_or_else(TcError::incomplete)?;
                let paction = match parse_action_control(a, false) {
                    Ok(r) => r,
                    Err(Fail::Ret(m)) => return Err(usage(m)),
                    Err(e) => return Err(e),
                };
                // get_u16 into a field tc never initialised: on failure the message
                // shows what the stack held; 0x1000 is what tc 6.15 prints there.
                let v = a.peek();
                let pval = match v.and_then(|v| v.parse::<u16>().ok()) {
                    Some(p) => p,
                    None => return Err(Fail::Ret("Illegal probability val 0x1000\n".into())),
                };
                if pval > 10000 {
                    return Err(Fail::Ret(format!("Illegal probability val  0x{pval:x}\n")));
                }
                a.next();
                prob = Some((ptype, paction, pval));
            } else if matches(w, "help") {
                return Err(usage(String::new()));
            }
        }
    }
    if let Some(w) = a.peek() {
        if matches(w, "index") {
            a.next();
            let v = a.value()?;
            index = match v.parse::<u32>() {
                Ok(i) => i,
                Err(_) => return Err(Fail::Ret("Illegal \"index\"\n".into())),
            };
        } else if matches(w, "help") {
            return Err(usage(String::new()));
        }
    }
    Ok(ActSpec::Gact { index, action, prob })
}

const MIRRED_USAGE: &str = "Usage: mirred <DIRECTION> <ACTION> [index INDEX] <TARGET>
where:
\tDIRECTION := <ingress | egress>
\tACTION := <mirror | redirect>
\tINDEX  is the specific policy instance id
\tTARGET := <BLOCK | DEVICE>
\tDEVICE := dev DEVICENAME
\tDEVICENAME is the devicename
\tBLOCK := blockid BLOCKID
\tBLOCKID := 32-bit unsigned block ID
";

/// m_mirred.c `parse_mirred` + `parse_direction`, at the word `mirred`. Its loop
/// reads a keyword, then steps on with `NEXT_ARG` (so a word it does not know ends
/// in "Command line is not complete" when it is the last). The device name is
/// resolved as tc does (`ll_name_to_index`) against `a`'s links.
fn parse_mirred(a: &mut Args) -> Result<MirredSpec, Fail> {
    a.next();
    let first = a.peek().ok_or_else(TcError::incomplete)?;
    if !(matches(first, "egress") || matches(first, "ingress") || matches(first, "index")) {
        if matches(first, "help") {
            return Err(Fail::Exit(TcError::usage(MIRRED_USAGE)));
        }
        return Err(Fail::Ret(format!("mirred option not supported {first}\n")));
    }
    let mut p = MirredSpec::default();
    let (mut ok, mut iok) = (0, 0);
    let (mut mirror, mut redir, mut ingress, mut egress) = (false, false, false, false);
    let mut d: Option<&str> = None;
    let ret = |m: &str| Err(Fail::Ret(format!("{m}\n")));
    // NEXT_ARG: step to the next word, which must exist.
    let next_arg = |a: &mut Args| -> Result<(), Fail> {
        a.next();
        a.peek().map(|_| ()).ok_or(Fail::Exit(TcError::incomplete()))
    };
    while let Some(w) = a.peek() {
        if matches(w, "action") {
            next_arg(a)?;
            break;
        } else if !egress && matches(w, "egress") {
            egress = true;
            if ingress {
                return ret("Can't have both egress and ingress");
            }
            next_arg(a)?;
            ok += 1;
            continue;
        } else if !ingress && matches(w, "ingress") {
            ingress = true;
            if egress {
                return ret("Can't have both ingress and egress");
            }
            next_arg(a)?;
            ok += 1;
            continue;
        } else if matches(w, "index") {
            next_arg(a)?;
            p.index = a.peek().and_then(|v| v.parse().ok()).ok_or(Fail::Ret("Illegal \"index\"\n".into()))?;
            iok += 1;
            if ok == 0 {
                a.next();
                break;
            }
        } else if ok == 0 {
            // Printed, then the loop ends without a verdict of its own.
            a.notes.push_str(&format!("was expecting egress or ingress ({w})\n"));
            break;
        } else if !mirror && matches(w, "mirror") {
            mirror = true;
            if redir {
                return ret("Can't have both mirror and redir");
            }
            p.eaction = if egress { TCA_EGRESS_MIRROR } else { TCA_INGRESS_MIRROR };
            p.action = TC_ACT_PIPE;
            ok += 1;
        } else if !redir && matches(w, "redirect") {
            redir = true;
            if mirror {
                return ret("Can't have both mirror and redir");
            }
            p.eaction = if egress { TCA_EGRESS_REDIR } else { TCA_INGRESS_REDIR };
            p.action = TC_ACT_STOLEN;
            ok += 1;
        } else if redir || mirror {
            if w == "blockid" {
                if d.is_some() {
                    return ret("blockid and device are mutually exclusive.");
                }
                next_arg(a)?;
                p.blockid = match a.peek().and_then(units::get_u32) {
                    Some(b) if b != 0 => b,
                    _ => return Err(Fail::Ret("invalid block ID".into())),
                };
                a.next();
            }
            if a.peek().is_some_and(|w| matches(w, "dev")) {
                if p.blockid != 0 {
                    return ret("blockid and device are mutually exclusive.");
                }
                next_arg(a)?;
                d = a.next();
            }
            break;
        }
        next_arg(a)?;
    }
    if ok == 0 && iok == 0 {
        return Err(Fail::Ret(std::mem::take(&mut a.notes)));
    }
    if let Some(d) = d {
        // tc copies at most IFNAMSIZ-1 bytes of the name.
        let name: String = d.chars().take(15).collect();
        let Some(idx) = a.link_index(&name) else {
            return Err(Fail::Ret(format!("Cannot find device \"{name}\"\n")));
        };
        p.ifindex = idx;
        p.dev = name;
    }
    if p.eaction == TCA_EGRESS_MIRROR || p.eaction == TCA_INGRESS_MIRROR {
        p.action = parse_action_control_dflt(a, TC_ACT_PIPE)?;
    }
    if let Some(w) = a.peek() {
        if iok > 0 && matches(w, "index") {
            return Err(Fail::Ret("mirred: Illegal double index\n".into()));
        }
        if matches(w, "index") {
            next_arg(a)?;
            p.index = a.peek().and_then(|v| v.parse().ok()).ok_or(Fail::Ret("mirred: Illegal \"index\"\n".into()))?;
            a.next();
        }
    }
    Ok(p)
}

/// m_police.c `act_parse_police`. `named`: reached as `action police` (the word
/// `police` is still ahead), rather than the legacy keyword (already consumed).
fn parse_police(a: &mut Args, named: bool) -> Result<PoliceSpec, Fail> {
    if named {
        a.next();
        a.peek().ok_or_else(TcError::incomplete)?;
    }
    if a.is_empty() {
        return Err(Fail::Ret(String::new()));
    }
    let invarg = |what: &str, v: &str| Fail::Exit(crate::tc::invarg(what, v));
    let duparg = |what: &str, v: &str| Fail::Exit(crate::tc::duparg(what, v));
    let mut p = PoliceSpec { action: TC_ACT_RECLASSIFY, ..Default::default() };
    let (mut buffer, mut mtu, mut mpu) = (0u32, 0u32, 0u32);
    let (mut rcell, mut pcell) = (None, None);
    let (mut rate64, mut prate64, mut avrate, mut pps, mut ppsburst) = (0u64, 0u64, 0u32, 0u64, 0u64);
    let mut overhead = 0u16;
    let mut linklayer = LinkLayer::Ethernet;
    let mut presult = 0;
    let mut ok = 0;
    while let Some(w) = a.peek() {
        if matches(w, "index") {
            a.next();
            let v = a.value()?;
            p.index = v.parse().map_err(|_| invarg("index", v))?;
        } else if matches(w, "burst") || w == "buffer" || w == "maxburst" {
            a.next();
            let v = a.value()?;
            if buffer != 0 {
                return Err(duparg("buffer/burst", v));
            }
            let (b, c) = units::get_size_and_cell(v).ok_or_else(|| invarg("buffer", v))?;
            buffer = b;
            rcell = c;
        } else if w == "mtu" || w == "minburst" {
            a.next();
            let v = a.value()?;
            if mtu != 0 {
                return Err(duparg("mtu/minburst", v));
            }
            let (m, c) = units::get_size_and_cell(v).ok_or_else(|| invarg("mtu", v))?;
            mtu = m;
            pcell = c;
        } else if w == "mpu" {
            a.next();
            let v = a.value()?;
            if mpu != 0 {
                return Err(duparg("mpu", v));
            }
            mpu = units::get_size(v).ok_or_else(|| invarg("mpu", v))?;
        } else if w == "rate" {
            a.next();
            let v = a.value()?;
            if rate64 != 0 {
                return Err(duparg("rate", v));
            }
            rate64 = a.rate64(v).ok_or_else(|| invarg("rate", v))?;
        } else if w == "avrate" {
            a.next();
            let v = a.value()?;
            if avrate != 0 {
                return Err(duparg("avrate", v));
            }
            avrate = a.rate(v).ok_or_else(|| invarg("avrate", v))?;
        } else if matches(w, "peakrate") {
            a.next();
            let v = a.value()?;
            if prate64 != 0 {
                return Err(duparg("peakrate", v));
            }
            prate64 = a.rate64(v).ok_or_else(|| invarg("peakrate", v))?;
        } else if ["reclassify", "drop", "shot", "continue", "pass", "ok", "pipe", "goto"].iter().any(|k| matches(w, k))
        {
            p.action = parse_action_control(a, false)?;
            ok += 1;
            continue;
        } else if w == "conform-exceed" {
            a.next();
            a.peek().ok_or_else(TcError::incomplete)?;
            let (x, y) = parse_action_control_slash(a, true)?;
            p.action = x;
            if let Some(y) = y {
                presult = y;
            }
            ok += 1;
            continue;
        } else if matches(w, "overhead") {
            a.next();
            let v = a.value()?;
            overhead = v.parse().map_err(|_| invarg("overhead", v))?;
        } else if matches(w, "linklayer") {
            a.next();
            let v = a.value()?;
            linklayer = LinkLayer::parse(v).ok_or_else(|| invarg("linklayer", v))?;
        } else if matches(w, "pkts_rate") {
            a.next();
            let v = a.value()?;
            if pps != 0 {
                return Err(duparg("pkts_rate", v));
            }
            pps = units::get_u64_base10(v).ok_or_else(|| invarg("pkts_rate", v))?;
        } else if matches(w, "pkts_burst") {
            a.next();
            let v = a.value()?;
            if ppsburst != 0 {
                return Err(duparg("pkts_burst", v));
            }
            ppsburst = units::get_u64_base10(v).ok_or_else(|| invarg("pkts_burst", v))?;
        } else if w == "help" {
            return Err(Fail::Exit(TcError::usage(POLICE_USAGE)));
        } else {
            break;
        }
        ok += 1;
    }
    if ok == 0 {
        return Err(Fail::Ret(String::new()));
    }
    if rate64 != 0 && avrate != 0 {
        return Err(Fail::Ret(String::new()));
    }
    if rate64 == 0 && avrate == 0 && p.index == 0 && mtu == 0 && pps == 0 {
        return Err(Fail::Ret("'rate' or 'avrate' or 'mtu' or 'pkts_rate' MUST be specified.\n".into()));
    }
    if rate64 != 0 && buffer == 0 && avrate == 0 {
        return Err(Fail::Ret("'burst' requires 'rate'.\n".into()));
    }
    if pps != 0 && ppsburst == 0 {
        return Err(Fail::Ret("'pkts_burst' requires 'pkts_rate'.\n".into()));
    }
    if pps != 0 && rate64 != 0 {
        return Err(Fail::Ret("'rate' and 'pkts_rate' are not allowed in same action.\n".into()));
    }
    if prate64 != 0 {
        if rate64 == 0 {
            return Err(Fail::Ret("'peakrate' requires 'rate'.\n".into()));
        }
        if mtu == 0 {
            return Err(Fail::Ret("'mtu' is required, if 'peakrate' is requested.\n".into()));
        }
    }
    let spec = |r64: u64, cell: Option<u8>| RateSpec {
        rate: r64.min(u32::MAX as u64) as u32,
        mpu: mpu as u16,
        overhead,
        linklayer,
        cell_align: -1,
        cell_log: cell.unwrap_or_else(|| {
            let m = if mtu == 0 { 2047 } else { mtu };
            let mut c = 0u8;
            while (m >> c) > 255 {
                c += 1;
            }
            c
        }),
    };
    if rate64 != 0 {
        p.rate = spec(rate64, rcell);
        p.rate64 = rate64;
        p.burst = units::calc_xmittime(rate64, buffer);
    }
    p.mtu = mtu;
    if prate64 != 0 {
        p.peakrate = spec(prate64, pcell);
        p.prate64 = prate64;
    }
    p.result = presult;
    p.avrate = avrate;
    if pps != 0 {
        // tc_calc_xmittime takes the burst as an unsigned int.
        p.pps = Some((pps, units::calc_xmittime(pps, ppsburst as u32) as u64));
    }
    Ok(p)
}

/// The legacy `police` keyword of a classifier (`parse_police`). `keyword` is how
/// the classifier reports a failure (`Illegal "police"`).
pub fn parse_legacy_police(a: &mut Args, spec: &mut ExtsSpec) -> Result<(), TcError> {
    a.peek().ok_or_else(TcError::incomplete)?;
    match parse_police(a, false) {
        Ok(p) => {
            spec.police = Some(p);
            Ok(())
        }
        Err(Fail::Exit(e)) => Err(e),
        Err(Fail::Ret(m)) => Err(TcError::tc(format!("{m}Illegal \"police\"\n"))),
    }
}

/// `new_cmd`: a word that starts the next batch command.
fn new_cmd(w: &str) -> bool {
    ["change", "replace", "delete", "get", "add"].iter().any(|k| matches(w, k))
}

/// m_action.c `parse_action`, entered after the classifier's `action` keyword.
/// Appends to `spec`; failures carry tc's text including the classifier's
/// `Illegal "action"`.
pub fn parse_action(a: &mut Args, spec: &mut ExtsSpec) -> Result<(), TcError> {
    // What a parser printed on its way (a default control's complaint) comes first.
    parse_actions(a, spec)
        .map_err(|e| TcError { msg: format!("{}{}", std::mem::take(&mut a.notes), e.msg), code: e.code })
}

fn parse_actions(a: &mut Args, spec: &mut ExtsSpec) -> Result<(), TcError> {
    a.peek().ok_or_else(TcError::incomplete)?;
    spec.acts.clear();
    spec.cookies.clear();
    spec.flags.clear();
    // tc keeps the last cookie for the actions after it (`act_ck_len` is not reset).
    let mut cookie = None;
    let illegal = |m: String| TcError::tc(format!("{m}Illegal \"action\"\n"));
    // tc reports where its own cursor stood: the start of the failed action.
    let bad_val = |at: &[String], m: String| {
        let w = at.first().map(String::as_str).unwrap_or("(null)");
        illegal(format!("{m}parse_action: bad value ({}:{w})!\n", at.len()))
    };
    let mut eap = false;
    let mut ok = 0;
    while let Some(w) = a.peek() {
        if w == "action" {
            a.next();
            eap = true;
            continue;
        } else if w == "flowid" || w == "classid" {
            break;
        } else if w == "help" {
            return Err(illegal(String::new()));
        } else if new_cmd(w) {
            if ok > 0 {
                break;
            }
            return Ok(());
        }
        eap = false;
        let start = a.rest();
        // tc's a2n table also holds goto and jump: control words all, parsed by gact.
        let control = action_a2n(w, false).is_some() || matches(w, "goto") || matches(w, "jump");
        let kind = if control { "gact" } else { w };
        let r = match kind {
            "police" => parse_police(a, true).map(ActSpec::Police),
            "mirred" => parse_mirred(a).map(ActSpec::Mirred),
            "skbedit" => skbedit::parse(a).map(ActSpec::Skbedit),
            "simple" => simple::parse(a).map(ActSpec::Simple),
            "pedit" => pedit::parse(a).map(ActSpec::Pedit),
            "nat" => nat::parse(a).map(ActSpec::Nat),
            "csum" => csum::parse(a).map(ActSpec::Csum),
            "sample" => sample::parse(a).map(ActSpec::Sample),
            "vlan" => vlan::parse(a).map(ActSpec::Vlan),
            k if OTHER_KINDS.contains(&k) => return Err(refuse(k)),
            // get_action_kind falls back to gact's parser, but the kind sent is the word.
            _ => parse_gact(a).map(|g| if kind == "gact" { g } else { ActSpec::Other(kind.to_string()) }),
        };
        match r {
            Ok(s) => spec.acts.push(s),
            Err(Fail::Exit(e)) => return Err(e),
            Err(Fail::Ret(m)) => return Err(bad_val(start, format!("{m}bad action parsing\n"))),
        }
        if a.peek() == Some("cookie") {
            a.next();
            cookie = Some(parse_cookie(a.value()?)?);
        }
        spec.cookies.push(cookie.clone());
        if let Some(w) = a.peek().filter(|w| matches(w, "hw_stats")) {
            return Err(TcError::tc(format!("qdisc-lab: action \"{w}\" is not supported\n")));
        }
        let mut flags = 0;
        if a.peek() == Some("no_percpu") {
            a.next();
            flags |= TCA_ACT_FLAGS_NO_PERCPU_STATS;
        }
        if let Some(w) = a.peek().filter(|w| ["skip_sw", "skip_hw"].contains(w)) {
            return Err(TcError::tc(format!("qdisc-lab: action flag \"{w}\" is not supported\n")));
        }
        spec.flags.push(flags);
        ok += 1;
    }
    if eap {
        return Err(bad_val(a.rest(), "bad action empty 1\n".into()));
    }
    Ok(())
}

/// TC_COOKIE_MAX_SIZE: bytes of a cookie.
const TC_COOKIE_MAX_SIZE: usize = 16;

/// m_action.c's `cookie HEX` (`hex2mem`): an even number of hex digits, at most
/// 16 bytes.
fn parse_cookie(v: &str) -> Result<Vec<u8>, TcError> {
    if v.len() > TC_COOKIE_MAX_SIZE * 2 {
        return Err(crate::tc::invarg(&format!("{} Max allowed size {}", v.len(), TC_COOKIE_MAX_SIZE * 2), v));
    }
    let bytes = v.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    if !bytes.len().is_multiple_of(2) || !bytes.iter().all(|&c| hex(c).is_some()) {
        return Err(crate::tc::invarg("cookie must be a hex string\n", v));
    }
    Ok(bytes.chunks(2).map(|p| (hex(p[0]).unwrap_or(0) * 16 + hex(p[1]).unwrap_or(0)) as u8).collect())
}

// ---- kernel side ---------------------------------------------------------------------

/// `struct tcf_gact`.
#[derive(Clone, Debug)]
pub struct Gact {
    pub action: i32,
    pub ptype: u16,
    pub paction: i32,
    pub pval: u16,
    /// `gact->packets`, the determ counter.
    packets: u32,
}

/// `struct tcf_police` + `tcf_police_params`.
#[derive(Clone, Debug)]
pub struct Police {
    /// Exceed action.
    pub action: i32,
    /// Conform action.
    pub result: i32,
    pub mtu: u32,
    /// ns.
    pub burst: i64,
    pub mtu_ptoks: i64,
    pub rate: Option<PschedRatecfg>,
    pub peak: Option<PschedRatecfg>,
    /// `tcfp_ewma_rate` (avrate), bytes/s; 0 = none.
    pub ewma_rate: u32,
    /// `ppsrate` and `tcfp_pkt_burst` (ns), when a packet rate was given
    /// (`pps_present`).
    pub pps: Option<(PschedPktrate, i64)>,
    toks: i64,
    ptoks: i64,
    /// `tcfp_pkttoks`: ns of packet credit; starts at 0 (only `tcf_police_act`
    /// sets it), so a new packet-rate policer first earns its credit.
    pkttoks: i64,
    t_c: u64,
}

/// `struct tcf_mirred`.
#[derive(Clone, Debug)]
pub struct Mirred {
    /// The control verdict (`tcf_action`).
    pub action: i32,
    pub eaction: i32,
    /// The target: ifindex and name (`tcfm_dev`), or a block.
    pub ifindex: u32,
    pub dev: String,
    pub blockid: u32,
    outbox: Outbox,
}

impl Mirred {
    pub fn is_redirect(&self) -> bool {
        self.eaction == TCA_EGRESS_REDIR || self.eaction == TCA_INGRESS_REDIR
    }
    /// `tcf_mirred_act_wants_ingress`.
    pub fn wants_ingress(&self) -> bool {
        self.eaction == TCA_INGRESS_REDIR || self.eaction == TCA_INGRESS_MIRROR
    }
}

/// MIRRED_NEST_LIMIT (act_mirred.c): how many forwards to a transmit path may nest.
pub const MIRRED_NEST_LIMIT: usize = 4;
/// MIRRED_DEFER_LIMIT: how many times one packet may be sent into a receive path
/// (`skb->tc_depth`, a 2-bit field).
pub const MIRRED_DEFER_LIMIT: u8 = 3;

/// Where mirred's loop guards stand for the packet being classified: the per-CPU
/// `netdev_xmit` state of the forwards to a transmit path in progress around it
/// (`sched_mirred_nest` and `sched_mirred_dev`, their targets' ifindexes) and the
/// packet's own `tc_depth` (raised by each forward into a receive path, kept across
/// the backlog). As Debian's 6.12.117 and 6.18 have them (the 6.12.0 of the first
/// release counted every forward against one per-CPU nest level instead).
///
/// The device owner sets it ([`set_mirred_nest`]) before each classification it runs
/// and around each forward it makes from the [`Outbox`]: one nested in place for a
/// transmit-path target ([`MirredNest::enter`]); the packet's depth, one more for what
/// it sends into a receive path. Per thread, as the kernel's is per CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirredNest {
    devs: [u32; MIRRED_NEST_LIMIT],
    n: usize,
    /// `skb->tc_depth` of the packet being classified.
    pub depth: u8,
}

impl MirredNest {
    /// Inside a forward to `ifindex`'s transmit path (`sched_mirred_dev[nest++]`).
    pub fn enter(self, ifindex: u32) -> MirredNest {
        let mut n = self;
        if n.n < MIRRED_NEST_LIMIT {
            n.devs[n.n] = ifindex;
            n.n += 1;
        }
        n
    }

    /// The same forwards, for a packet of `tc_depth` `depth`.
    pub fn with_depth(self, depth: u8) -> MirredNest {
        MirredNest { depth, ..self }
    }

    /// A forward to `ifindex`'s transmit path is already in progress (a loop).
    fn looping(&self, ifindex: u32) -> bool {
        self.devs[..self.n].contains(&ifindex)
    }
}

thread_local! {
    static MIRRED_NEST: std::cell::Cell<MirredNest> = const {
        std::cell::Cell::new(MirredNest { devs: [0; MIRRED_NEST_LIMIT], n: 0, depth: 0 })
    };
}

/// The mirred loop guards the next classification on this thread sees.
pub fn mirred_nest() -> MirredNest {
    MIRRED_NEST.with(|n| n.get())
}

/// Set what [`mirred_nest`] reports; the caller restores the old state after a forward.
pub fn set_mirred_nest(nest: MirredNest) {
    MIRRED_NEST.with(|n| n.set(nest));
}

thread_local! {
    static SKIP_CLASSIFY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `skb->tc_skip_classify` of the packet being handed to the engine: an ifb sets it on
/// what it gives back (`ifb_ri_tasklet`), and the first `tcf_action_exec` that packet
/// meets (`skb_skip_tc_classify`) clears it and answers TC_ACT_OK without running its
/// actions — on egress, where nothing else checks it, that keeps the filter that sent
/// the packet to the ifb from sending it again. [`Packet`] has no field for it: the
/// device owner sets it around the one transmit call and reads it back after
/// ([`take_skip_classify`]).
pub fn set_skip_classify(skip: bool) {
    SKIP_CLASSIFY.with(|s| s.set(skip));
}

/// Read and clear what [`set_skip_classify`] set.
pub fn take_skip_classify() -> bool {
    SKIP_CLASSIFY.with(|s| s.replace(false))
}

/// What lets the taker of a [`Mirrored`] report a refusal after taking its packet.
#[derive(Debug)]
pub struct Refusal(Weak<Mutex<Action>>);

impl Refusal {
    /// The target did not take the packet: the action counts an overlimit.
    pub fn failed(&self) {
        if let Some(a) = self.0.upgrade() {
            let mut a = lock(&a);
            a.stats.overlimits = a.stats.overlimits.wrapping_add(1);
        }
    }
}

/// A packet mirred handed to another device: a copy (mirror) or the packet itself
/// (redirect), for `ifindex`'s transmit path (`dev_queue_xmit`) or, when
/// `ingress`, its receive path (`netif_receive_skb` / `netif_rx`).
#[derive(Debug)]
pub struct Mirrored {
    pub ifindex: u32,
    pub ingress: bool,
    pub redirect: bool,
    pub pkt: Packet,
    action: Weak<Mutex<Action>>,
}

impl Mirrored {
    /// The target did not take the packet: the action counts an overlimit
    /// (`tcf_mirred_to_dev`'s forward error).
    pub fn failed(&self) {
        Refusal(self.action.clone()).failed();
    }
    /// The packet, and the handle to report its refusal with.
    pub fn split(self) -> (Packet, Refusal) {
        (self.pkt, Refusal(self.action))
    }
}

/// Where mirred leaves what it forwards until the device owner takes it
/// ([`ActionTable::take_mirrored`]); one per netns, shared by its mirred actions.
#[derive(Clone, Debug, Default)]
pub struct Outbox(Arc<Mutex<Vec<Mirrored>>>);

#[derive(Clone, Debug)]
pub enum ActKind {
    Gact(Gact),
    Police(Police),
    Mirred(Mirred),
    Skbedit(skbedit::Skbedit),
    Simple(simple::Simple),
    Pedit(pedit::Pedit),
    Nat(nat::Nat),
    Csum(csum::Csum),
    Sample(sample::Sample),
    Vlan(vlan::Vlan),
}

impl ActKind {
    /// The kind's `offload_act_setup` for a standalone action succeeds
    /// (`tcf_gact_offload_act_setup` … `tcf_skbedit_offload_act_setup`).
    fn offloadable(&self) -> bool {
        match self {
            ActKind::Gact(g) => {
                matches!(g.action, TC_ACT_OK | TC_ACT_SHOT | TC_ACT_TRAP) || ext_cmp(g.action, TC_ACT_GOTO_CHAIN)
            }
            ActKind::Police(_) | ActKind::Mirred(_) => true,
            ActKind::Skbedit(e) => e.offloadable(),
            ActKind::Simple(_) => false,
            ActKind::Pedit(p) => p.offloadable(),
            ActKind::Csum(c) => c.offloadable(),
            ActKind::Sample(_) | ActKind::Vlan(_) => true,
            ActKind::Nat(_) => false,
        }
    }

    /// The bytes of the kind's `dump` inside TCA_ACT_OPTIONS (`tcf_gact_dump` …
    /// `tcf_vlan_dump`).
    fn dump_size(&self) -> usize {
        use super::act::{nla, TC_GEN, TM};
        match self {
            // tc_gact, tc_gact_p (ptype, pval, paction) when random.
            ActKind::Gact(g) => nla(TC_GEN) + if g.ptype != 0 { nla(8) } else { 0 } + TM,
            // tc_police (56 bytes); the 64-bit rates when above 32 bits; the conform
            // verdict when not ok.
            ActKind::Police(p) => {
                let r64 =
                    |r: &Option<PschedRatecfg>| r.as_ref().filter(|r| r.rate_bytes_ps >= 1 << 32).map_or(0, |_| nla(8));
                let pps = if p.pps.is_some() { 2 * nla(8) } else { 0 };
                nla(56) + r64(&p.rate) + r64(&p.peak) + pps + if p.result != 0 { nla(4) } else { 0 } + TM
            }
            // tc_mirred (tc_gen, eaction, ifindex); the block when it redirects to one.
            ActKind::Mirred(m) => nla(TC_GEN + 8) + TM + if m.blockid != 0 { nla(4) } else { 0 },
            ActKind::Skbedit(e) => e.dump_size(),
            ActKind::Simple(d) => d.dump_size(),
            ActKind::Pedit(p) => p.dump_size(),
            ActKind::Nat(n) => n.dump_size(),
            ActKind::Csum(c) => c.dump_size(),
            ActKind::Sample(d) => d.dump_size(),
            ActKind::Vlan(v) => v.dump_size(),
        }
    }

    /// The extack message of the kind's `offload_act_setup` when it fails for a
    /// standalone action: `tc actions add` prints it as a warning.
    /// police passes its own check (`offload_act_setup` unbound) and fails the
    /// setup of the action list (`tc_setup_action`, bound), whose message replaces
    /// its own, when a verdict has no flow action (`tcf_police_act_to_flow_act`:
    /// reclassify, or any but ok, drop, pipe, continue, goto chain and jump).
    fn offload_warning(&self) -> Option<&'static str> {
        let flow_act = |v: i32| {
            matches!(v, TC_ACT_OK | TC_ACT_SHOT | TC_ACT_PIPE | TC_ACT_UNSPEC)
                || ext_cmp(v, TC_ACT_GOTO_CHAIN)
                || ext_cmp(v, TC_ACT_JUMP)
        };
        match self {
            ActKind::Pedit(p) if !p.offloadable() => Some("act_pedit: Unsupported pedit command offload"),
            ActKind::Police(p) if !(flow_act(p.action) && flow_act(p.result)) => {
                Some("act_api: Failed to setup tc actions for offload")
            }
            _ => None,
        }
    }
}

/// Counters an action keeps (`cpu_bstats`/`cpu_qstats`) and `struct tcf_t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActStats {
    pub bytes: u64,
    pub packets: u64,
    pub drops: u32,
    pub overlimits: u32,
}

/// One action object (`struct tc_action`).
#[derive(Debug)]
pub struct Action {
    pub index: u32,
    pub kind: ActKind,
    pub stats: ActStats,
    install: u64,
    lastuse: u64,
    firstuse: u64,
    /// Made by `tc actions add` (the table holds a reference of its own).
    standalone: bool,
    /// `used_hw_stats_valid`: see [`ActionTable::dump`].
    hw_stats: bool,
    /// `user_cookie` (TCA_ACT_COOKIE): kept for the user, printed in dumps.
    cookie: Option<Vec<u8>>,
    /// `tcfa_flags & TCA_ACT_FLAGS_USER_MASK`: the TCA_ACT_FLAGS of the request that
    /// created it (a bind or a replace leaves them).
    flags: u32,
    /// `tcfa_rate_est`: from the filter's `estimator` of the request that made it.
    est: Option<Estimator>,
    /// Where the action reports its end (`tcf_idr_release` freeing its index), for
    /// the table it is in.
    freed: Option<Freed>,
}

/// The indices of actions gone since the table last looked, by kind.
type Freed = Arc<Mutex<Vec<(Kind, u32)>>>;

impl Drop for Action {
    fn drop(&mut self) {
        if let Some(f) = self.freed.take() {
            let k = self.kind();
            f.lock().unwrap_or_else(|e| e.into_inner()).push((k, self.index));
        }
    }
}

pub type ActRef = Arc<Mutex<Action>>;

/// TCA_ACT_FLAGS_NO_PERCPU_STATS: the action keeps its counters without per-CPU
/// copies (`tcf_idr_create_from_flags`).
pub const TCA_ACT_FLAGS_NO_PERCPU_STATS: u32 = 1;

fn lock(a: &ActRef) -> std::sync::MutexGuard<'_, Action> {
    a.lock().unwrap_or_else(|e| e.into_inner())
}

impl Action {
    /// The bytes `tcf_dump_walker` puts for this action: its nest, then
    /// `tcf_action_dump_1` — kind, counters (TCA_ACT_STATS: basic_hw, basic, the
    /// 64-bit packet count past 32 bits, queue), cookie, used_hw_stats, in_hw_count
    /// and the kind's options.
    fn dump_size(&self) -> usize {
        use super::act::nla;
        let pkt64 = if self.stats.packets > u32::MAX as u64 { nla(8) } else { 0 };
        let stats = 4 + nla(16) + nla(16) + pkt64 + nla(20);
        let cookie = self.cookie.as_ref().map_or(0, |c| nla(c.len()));
        let used_hw = if self.hw_stats { nla(8) } else { 0 };
        let flags = if self.flags != 0 { nla(8) } else { 0 };
        4 + nla(self.kind().name().len() + 1) + stats + cookie + flags + used_hw + nla(4) + 4 + self.kind.dump_size()
    }

    fn kind(&self) -> Kind {
        match self.kind {
            ActKind::Gact(_) => Kind::Gact,
            ActKind::Police(_) => Kind::Police,
            ActKind::Mirred(_) => Kind::Mirred,
            ActKind::Skbedit(_) => Kind::Skbedit,
            ActKind::Simple(_) => Kind::Simple,
            ActKind::Pedit(_) => Kind::Pedit,
            ActKind::Nat(_) => Kind::Nat,
            ActKind::Csum(_) => Kind::Csum,
            ActKind::Sample(_) => Kind::Sample,
            ActKind::Vlan(_) => Kind::Vlan,
        }
    }

    /// The usual bookkeeping of an action: last use, the packet counted, and a
    /// drop (`r` None) counted and answered with SHOT.
    fn count_or_drop(&mut self, t: u64, len: u32, r: Option<i32>) -> i32 {
        self.used(t);
        self.stats.bytes += len as u64;
        self.stats.packets += 1;
        r.unwrap_or_else(|| {
            self.stats.drops = self.stats.drops.wrapping_add(1);
            TC_ACT_SHOT
        })
    }

    /// `tcf_lastuse_update`.
    fn used(&mut self, now: u64) {
        self.lastuse = now;
        if self.firstuse == 0 {
            self.firstuse = now;
        }
    }

    /// The action's `act` op on `pkt` at `now`; `me` is the shared handle of this
    /// action (mirred's forwarded packets carry it back for [`Mirrored::failed`]).
    pub fn act(&mut self, me: &ActRef, pkt: &mut Packet, now: Instant) -> i32 {
        let t = now.0;
        let len = pkt.len;
        if let Some(e) = &mut self.est {
            e.catch_up(now, self.stats.bytes, self.stats.packets);
        }
        match &mut self.kind {
            ActKind::Gact(g) => {
                // tcf_gact: the verdict (gact_determ for `random determ`), then counters.
                let mut action = g.action;
                if g.ptype == PGACT_DETERM {
                    g.packets = g.packets.wrapping_add(1);
                    action = if g.packets % g.pval as u32 != 0 { g.action } else { g.paction };
                }
                self.stats.bytes += len as u64;
                self.stats.packets += 1;
                if action == TC_ACT_SHOT {
                    self.stats.drops = self.stats.drops.wrapping_add(1);
                }
                self.used(t);
                action
            }
            ActKind::Police(p) => {
                // tcf_police_act: avrate first (no estimate counts as over it).
                let mut ret = p.action;
                let mut conform = false;
                let mut early = false;
                let over_avrate =
                    p.ewma_rate != 0 && self.est.as_ref().is_none_or(|e| e.read().0 >= p.ewma_rate as u64);
                if !over_avrate && len <= p.mtu {
                    if p.rate.is_none() && p.pps.is_none() {
                        ret = p.result;
                        early = true;
                    } else {
                        let elapsed = t.wrapping_sub(p.t_c) as i64;
                        let mut toks = elapsed.min(p.burst);
                        let (mut ptoks, mut pkttoks) = (0i64, 0i64);
                        if let Some(peak) = &p.peak {
                            ptoks = (toks + p.ptoks).min(p.mtu_ptoks);
                            ptoks -= peak.l2t_ns(len) as i64;
                        }
                        if let Some(rate) = &p.rate {
                            toks = (toks + p.toks).min(p.burst);
                            toks -= rate.l2t_ns(len) as i64;
                        } else if let Some((pps, burst)) = &p.pps {
                            pkttoks = (elapsed.min(*burst) + p.pkttoks).min(*burst);
                            pkttoks -= pps.pkt2t_ns(1) as i64;
                        }
                        if (toks | ptoks | pkttoks) >= 0 {
                            p.t_c = t;
                            p.toks = toks;
                            p.ptoks = ptoks;
                            p.pkttoks = pkttoks;
                            ret = p.result;
                            conform = true;
                        }
                    }
                }
                self.stats.bytes += len as u64;
                self.stats.packets += 1;
                self.used(t);
                if early {
                    return ret;
                }
                if !conform {
                    self.stats.overlimits = self.stats.overlimits.wrapping_add(1);
                }
                if ret == TC_ACT_SHOT {
                    self.stats.drops = self.stats.drops.wrapping_add(1);
                }
                ret
            }
            ActKind::Mirred(m) => {
                // tcf_mirred_act: past the nest or depth limit the packet is shot,
                // uncounted ("Packet exceeded mirred recursion limit").
                let nest = mirred_nest();
                if nest.n >= MIRRED_NEST_LIMIT || nest.depth >= MIRRED_DEFER_LIMIT {
                    return TC_ACT_SHOT;
                }
                // Counted, then the target. A blockid finds no shared block
                // (tcf_blockcast: an overlimit); a transmit path already being
                // forwarded to is a loop ("tc mirred: loop on device": an overlimit,
                // and a redirect drops). The engine's devices are always up (no
                // "device is down").
                let looping = !m.wants_ingress() && nest.looping(m.ifindex);
                let verdict = if m.blockid != 0 || looping {
                    self.stats.overlimits = self.stats.overlimits.wrapping_add(1);
                    if looping && m.is_redirect() {
                        TC_ACT_SHOT
                    } else {
                        m.action
                    }
                } else {
                    let fwd = Mirrored {
                        ifindex: m.ifindex,
                        ingress: m.wants_ingress(),
                        redirect: m.is_redirect(),
                        pkt: {
                            // A new xmit or receive: its qdiscs account skb->len afresh.
                            let mut p = pkt.clone();
                            p.unstab();
                            p
                        },
                        action: Arc::downgrade(me),
                    };
                    m.outbox.0.lock().unwrap_or_else(|e| e.into_inner()).push(fwd);
                    m.action
                };
                self.stats.bytes += len as u64;
                self.stats.packets += 1;
                self.used(t);
                verdict
            }
            ActKind::Skbedit(e) => {
                // tcf_skbedit_act: counted, then the edits; an unreadable IP header
                // for inheritdsfield is a drop.
                let r = e.act(pkt);
                self.stats.bytes += len as u64;
                self.stats.packets += 1;
                self.used(t);
                r.unwrap_or_else(|| {
                    self.stats.drops = self.stats.drops.wrapping_add(1);
                    TC_ACT_SHOT
                })
            }
            ActKind::Simple(d) => {
                // tcf_simp_act: counted (its kernel-log line has no counterpart).
                let verdict = d.action;
                self.stats.bytes += len as u64;
                self.stats.packets += 1;
                self.used(t);
                verdict
            }
            ActKind::Pedit(p) => {
                // tcf_pedit_act: counted, then the keys; a key it cannot apply
                // ends the edits with an overlimit.
                let (done, verdict) = (p.act(pkt), p.action);
                self.used(t);
                self.stats.bytes += len as u64;
                self.stats.packets += 1;
                if !done {
                    self.stats.overlimits = self.stats.overlimits.wrapping_add(1);
                }
                verdict
            }
            ActKind::Nat(n) => {
                // tcf_nat_act: counted, then the rewrite; a drop is the action's.
                let r = n.act(pkt);
                self.count_or_drop(t, len, r)
            }
            ActKind::Csum(c) => {
                // tcf_csum_act: counted; nothing to recompute here, but the drops.
                let r = c.act(pkt);
                self.count_or_drop(t, len, r)
            }
            ActKind::Sample(s) => {
                // tcf_sample_act: counted; the psample copy has no listener here.
                let verdict = s.action;
                self.count_or_drop(t, len, Some(verdict))
            }
            ActKind::Vlan(v) => {
                // tcf_vlan_act on an untagged frame: see act/vlan.rs.
                let r = v.act();
                self.count_or_drop(t, len, r)
            }
        }
    }
}

/// The action kinds, each with its own index table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gact,
    Police,
    Mirred,
    Skbedit,
    Simple,
    Pedit,
    Nat,
    Csum,
    Sample,
    Vlan,
}

impl Kind {
    /// Every kind, in the order of their tables.
    pub const ALL: [Kind; 10] = [
        Kind::Gact,
        Kind::Police,
        Kind::Mirred,
        Kind::Skbedit,
        Kind::Simple,
        Kind::Pedit,
        Kind::Nat,
        Kind::Csum,
        Kind::Sample,
        Kind::Vlan,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Gact => "gact",
            Kind::Police => "police",
            Kind::Mirred => "mirred",
            Kind::Skbedit => "skbedit",
            Kind::Simple => "simple",
            Kind::Pedit => "pedit",
            Kind::Nat => "nat",
            Kind::Csum => "csum",
            Kind::Sample => "sample",
            Kind::Vlan => "vlan",
        }
    }

    /// The kind tc names `k` (`get_action_kind`'s id).
    pub fn from_name(k: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kd| kd.name() == k)
    }
}

impl ActSpec {
    /// The kind the kernel is asked for; None = one it has no module for.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            ActSpec::Gact { .. } => Some(Kind::Gact),
            ActSpec::Police(_) => Some(Kind::Police),
            ActSpec::Mirred(_) => Some(Kind::Mirred),
            ActSpec::Skbedit(_) => Some(Kind::Skbedit),
            ActSpec::Simple(_) => Some(Kind::Simple),
            ActSpec::Pedit(_) => Some(Kind::Pedit),
            ActSpec::Nat(_) => Some(Kind::Nat),
            ActSpec::Csum(_) => Some(Kind::Csum),
            ActSpec::Sample(_) => Some(Kind::Sample),
            ActSpec::Vlan(_) => Some(Kind::Vlan),
            ActSpec::Other(_) => None,
        }
    }

    /// The index asked for (`tc_*.index`; 0 = any free one).
    fn index(&self) -> u32 {
        match self {
            ActSpec::Gact { index, .. } => *index,
            ActSpec::Police(p) => p.index,
            ActSpec::Mirred(p) => p.index,
            ActSpec::Skbedit(p) => p.index,
            ActSpec::Simple(p) => p.index,
            ActSpec::Pedit(p) => p.index,
            ActSpec::Nat(p) => p.index,
            ActSpec::Csum(p) => p.index,
            ActSpec::Sample(p) => p.index,
            ActSpec::Vlan(p) => p.index,
            ActSpec::Other(_) => 0,
        }
    }
}

/// The per-netns action tables (`tc_action_net.idrinfo` of each kind) and mirred's
/// [`Outbox`].
#[derive(Debug, Default)]
pub struct ActionTable {
    /// One per kind, in [`Kind::ALL`] order.
    tables: [BTreeMap<u32, Weak<Mutex<Action>>>; Kind::ALL.len()],
    /// Per kind: every index below it is a live action's (where `tcf_idr_check_alloc`
    /// starts looking for a free one).
    below_taken: [u32; Kind::ALL.len()],
    /// Actions gone since the tables last dropped their entries.
    freed: Freed,
    /// How many filter action lists with a `goto chain` were made (a block whose
    /// filters held none need not look again until this grows: `Block::settle`).
    pub(crate) gotos: u64,
    /// The references `tc actions add` holds (`ref 1 bind 0` until a filter binds).
    held: Vec<ActRef>,
    outbox: Outbox,
}

impl ActionTable {
    /// The actions of `kind`, by index (`tcf_generic_walker`'s dump order);
    /// `since_ns`: only those used within that much time before `now` (`since`).
    /// Each one listed asks for its hardware counters (`tcf_action_update_hw_stats`),
    /// which, with no offloading device, succeeds for a kind whose offload setup
    /// does: from then on its dumps report `used_hw_stats`.
    pub fn dump(&mut self, kind: Kind, since_ns: Option<u64>, now: Instant) -> Vec<ActRef> {
        let listed: Vec<ActRef> = self
            .all(kind)
            .into_iter()
            .filter(|a| since_ns.is_none_or(|s| lock(a).lastuse >= now.0.saturating_sub(s)))
            .collect();
        for a in &listed {
            let mut a = lock(a);
            a.hw_stats |= a.kind.offloadable();
        }
        listed
    }

    /// Some skbedit action sets `queue_mapping` (which only a clsact egress hook acts on).
    pub fn sets_queue_mapping(&mut self) -> bool {
        let sets = |a: &ActRef| matches!(&lock(a).kind, ActKind::Skbedit(e) if e.queue_mapping.is_some());
        self.all(Kind::Skbedit).iter().any(sets)
    }

    /// Every action of `kind`, by index.
    fn all(&mut self, kind: Kind) -> Vec<ActRef> {
        self.table(kind).values().filter_map(Weak::upgrade).collect()
    }

    /// `tcf_action_get_1`: the action of `kind` with `index`.
    pub fn get(&mut self, kind: Kind, index: u32) -> Result<ActRef, FilterError> {
        self.table(kind)
            .get(&index)
            .and_then(Weak::upgrade)
            .ok_or_else(|| FilterError::ext("TC action with specified index not found"))
    }

    /// `tcf_action_delete` of actions `get` found, in order: one a filter holds
    /// ends the request (EPERM, "Failed to delete TC action"); those before it are
    /// gone.
    pub fn delete(&mut self, acts: Vec<ActRef>) -> Result<(), FilterError> {
        for a in acts {
            if Arc::strong_count(&a) - 1 > lock(&a).standalone as usize {
                return Err(FilterError::ext("Failed to delete TC action"));
            }
            self.release(&a);
        }
        Ok(())
    }

    /// `tca_action_flush` → `tcf_del_walker`: every action of `kind` in index order
    /// until one a filter holds, which ends the walk with EPERM.
    /// When some were released before that one, the flush succeeds with the warning
    /// it returns.
    pub fn flush(&mut self, kind: Kind) -> Result<Option<&'static str>, FilterError> {
        for (n, a) in self.all(kind).into_iter().enumerate() {
            if Arc::strong_count(&a) - 1 > lock(&a).standalone as usize {
                if n > 0 {
                    return Ok(Some("Unable to flush all TC actions"));
                }
                return Err(FilterError::Errno("Operation not permitted"));
            }
            self.release(&a);
        }
        Ok(None)
    }

    /// Drop the table's own reference (the action goes when no filter holds it).
    fn release(&mut self, a: &ActRef) {
        self.held.retain(|h| !Arc::ptr_eq(h, a));
        let (index, k) = {
            let a = lock(a);
            (a.index, a.kind())
        };
        self.table(k).remove(&index);
        self.below_taken[k as usize] = self.below_taken[k as usize].min(index);
    }

    /// Some filter holds an action of `kind`.
    pub fn holds(&mut self, kind: Kind) -> bool {
        !self.table(kind).is_empty()
    }
    /// What mirred actions forwarded since the last call, in order.
    pub fn take_mirrored(&mut self) -> Vec<Mirrored> {
        std::mem::take(&mut *self.outbox.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    /// The live actions of `kind` (the entries of actions gone since are dropped:
    /// their indices are free again, as `tcf_idr_release` frees them).
    fn table(&mut self, kind: Kind) -> &mut BTreeMap<u32, Weak<Mutex<Action>>> {
        let gone = std::mem::take(&mut *self.freed.lock().unwrap_or_else(|e| e.into_inner()));
        for (k, index) in gone {
            let t = &mut self.tables[k as usize];
            if t.get(&index).is_some_and(|w| w.strong_count() == 0) {
                t.remove(&index);
                self.below_taken[k as usize] = self.below_taken[k as usize].min(index);
            }
        }
        &mut self.tables[kind as usize]
    }
    /// `tcf_idr_check_alloc`: an existing action to bind, or the index for a new one.
    fn check_alloc(&mut self, kind: Kind, index: u32) -> Result<Result<ActRef, u32>, FilterError> {
        let t = self.table(kind);
        if index != 0 {
            return Ok(match t.get(&index).and_then(Weak::upgrade) {
                Some(a) => Ok(a),
                None => Err(index),
            });
        }
        // The lowest free index from 1 (idr_alloc_u32).
        let mut i = self.below_taken[kind as usize].max(1);
        let t = &self.tables[kind as usize];
        while t.contains_key(&i) {
            i = i.checked_add(1).ok_or(FilterError::Errno("No space left on device"))?;
        }
        self.below_taken[kind as usize] = i;
        Ok(Err(i))
    }
    fn insert(&mut self, kind: Kind, a: &ActRef) {
        let index = lock(a).index;
        self.table(kind).insert(index, Arc::downgrade(a));
    }
}

/// What the kernel needs to build a filter's actions.
pub struct ActCtx<'a> {
    pub table: &'a mut ActionTable,
    /// The action modules the kernel profile can load
    /// ([`crate::tree::KernelVersion::has_action`]).
    pub available: &'a dyn Fn(Kind) -> bool,
    /// The kernel whose build options a filter change follows (u32's mark match).
    pub kernel: crate::tree::KernelVersion,
    pub now: Instant,
    /// The filter's parent is an ingress hook (TCA_ACT_FLAGS_AT_INGRESS: its minor is
    /// clsact's/ingress's FFF2); false for `tc actions`.
    pub at_ingress: bool,
    /// The filter's TCA_RATE (`tc actions` has none): the estimator each new action gets.
    pub est: Option<EstSpec>,
}

/// `tcf_action_init_1`'s `tcf_set_action_cookie`: a cookie sent replaces the
/// action's (on a bind and a replace too); none sent keeps it.
fn set_cookie(a: &ActRef, cookie: Option<Vec<u8>>) {
    if cookie.is_some() {
        lock(a).cookie = cookie;
    }
}

/// `tcf_action_check_ctrlact`: a valid opcode, and `goto chain` only for an action
/// made for a filter (`tp`); the chain it names is held by the filter's block
/// ([`super::Block::settle`]).
fn check_ctrlact(a: i32, tp: bool) -> Result<(), FilterError> {
    // tcf_action_valid, in C's int arithmetic.
    let op = a & !TC_ACT_EXT_VAL_MASK;
    let valid = if op == 0 { a <= TC_ACT_VALUE_MAX } else { op <= TC_ACT_GOTO_CHAIN || a == TC_ACT_UNSPEC };
    if !valid {
        return Err(FilterError::ext("Invalid control action"));
    }
    if ext_cmp(a, TC_ACT_GOTO_CHAIN) && !tp {
        return Err(FilterError::ext("can't goto NULL proto/chain"));
    }
    Ok(())
}

/// `tcf_mirred_init`'s refusals, in its order; `new`: no action has the index.
fn mirred_checks(p: &MirredSpec, new: bool) -> Result<(), FilterError> {
    let ext = |m: &str| Err(FilterError::ext(&format!("act_mirred: {m}")));
    if p.blockid != 0 && p.ifindex != 0 {
        return ext("Cannot specify Block ID and dev simultaneously");
    }
    if !(TCA_EGRESS_REDIR..=TCA_INGRESS_MIRROR).contains(&p.eaction) {
        return ext("Unknown mirred option");
    }
    if new && p.ifindex == 0 && p.blockid == 0 {
        return ext("Must specify device or block");
    }
    Ok(())
}

impl ActCtx<'_> {
    /// `tcf_action_add` (`tc actions add|change|replace`): each action of the list
    /// is created and held by the table, or with `replace` an existing one takes
    /// the new parameters; an existing index without `replace` is EEXIST. A failure
    /// undoes what the request created. An index given for an action the same
    /// request already made is EAGAIN, as the kernel's reservation answers.
    pub fn add(&mut self, spec: &ExtsSpec, replace: bool) -> Result<Option<&'static str>, FilterError> {
        if spec.acts.iter().take(TCA_ACT_MAX_PRIO).any(|s| !s.kind().is_some_and(self.available)) {
            return Err(FilterError::action());
        }
        let mut made: Vec<ActRef> = Vec::new();
        // tcf_action_offload_add of each action: the last refusal's message stays.
        let mut warning = None;
        let r = (|| {
            for (i, s) in spec.acts.iter().enumerate().take(TCA_ACT_MAX_PRIO) {
                let cookie = spec.cookies.get(i).cloned().flatten();
                let index = s.index();
                if index != 0
                    && made.iter().any(|m| {
                        let m = lock(m);
                        m.index == index && Some(m.kind()) == s.kind()
                    })
                {
                    return Err(FilterError::Errno("Resource temporarily unavailable"));
                }
                let a = match self.check(s, false, replace)? {
                    Ok(a) => {
                        set_cookie(&a, cookie);
                        warning = lock(&a).kind.offload_warning().or(warning);
                        continue;
                    }
                    Err(idx) => self.create(s, idx, false, spec.flags.get(i).copied().unwrap_or(0))?,
                };
                set_cookie(&a, cookie);
                warning = lock(&a).kind.offload_warning().or(warning);
                lock(&a).standalone = true;
                made.push(a);
            }
            Ok(())
        })();
        match r {
            Ok(()) => self.table.held.extend(made),
            Err(e) => {
                for a in &made {
                    self.table.release(a);
                }
                return Err(e);
            }
        }
        Ok(warning)
    }

    /// `tcf_exts_validate_ex` → `tcf_action_init` → `tcf_action_init_1` for each
    /// action: load the kind, then bind or create (`tcf_gact_init`,
    /// `tcf_police_init`). A POLICE attribute wins over an ACT list.
    pub fn init(&mut self, spec: &ExtsSpec) -> Result<Exts, FilterError> {
        let legacy = spec.police.clone().map(ActSpec::Police);
        let (list, legacy_police) = match &legacy {
            Some(p) => (std::slice::from_ref(p), true),
            None => (&spec.acts[..], false),
        };
        let mut e = Exts { acts: Vec::new(), legacy_police };
        if list.is_empty() {
            return Ok(e);
        }
        // tcf_action_init loads every kind's module before it builds any action.
        if list.iter().take(TCA_ACT_MAX_PRIO).any(|s| !s.kind().is_some_and(self.available)) {
            return Err(FilterError::action());
        }
        for (i, s) in list.iter().enumerate().take(TCA_ACT_MAX_PRIO) {
            let flags = if legacy_police { 0 } else { spec.flags.get(i).copied().unwrap_or(0) };
            let a = self.init_1(s, flags)?;
            if !legacy_police {
                set_cookie(&a, spec.cookies.get(i).cloned().flatten());
            }
            e.acts.push(a);
        }
        let mut goto = false;
        e.for_each_goto_chain(&mut |_, _| goto = true);
        self.table.gotos += goto as u64;
        Ok(e)
    }

    /// `tcf_action_init_1` of a filter's action (TCA_ACT_FLAGS_BIND): an existing
    /// index binds to that action as it is; otherwise a new one.
    fn init_1(&mut self, s: &ActSpec, flags: u32) -> Result<ActRef, FilterError> {
        match self.check(s, true, false)? {
            Ok(a) => Ok(a),
            Err(idx) => self.create(s, idx, true, flags),
        }
    }

    /// The part of each kind's init before and at `tcf_idr_check_alloc`: the
    /// existing action to use (`bind`, or `replace` after its parameters were
    /// replaced), or the index for a new one. Without either an existing index is
    /// EEXIST.
    fn check(&mut self, s: &ActSpec, bind: bool, replace: bool) -> Result<Result<ActRef, u32>, FilterError> {
        if let ActSpec::Gact { prob: Some((ptype, paction, _)), .. } = s {
            // tcf_gact_init checks TCA_GACT_PROB before the index.
            if *ptype > PGACT_DETERM {
                return Err(FilterError::Errno("Invalid argument"));
            }
            if ext_cmp(*paction, TC_ACT_GOTO_CHAIN) {
                return Err(FilterError::ext("goto chain not allowed on fallback"));
            }
            if *ptype == PGACT_NETRAND {
                return Err(FilterError::Tc(
                    "qdisc-lab: gact \"random netrand\" is not supported (use determ)\n".into(),
                ));
            }
        }
        if let ActSpec::Skbedit(p) = s {
            p.check(self.at_ingress)?;
        }
        let Some(kind) = s.kind() else { return Err(FilterError::action()) };
        let existing = match self.table.check_alloc(kind, s.index())? {
            Ok(a) => a,
            Err(idx) => return Ok(Err(idx)),
        };
        if bind {
            return Ok(Ok(existing));
        }
        match s {
            ActSpec::Skbedit(p) => p.check_flags()?,
            ActSpec::Simple(p) => drop(p.params()?),
            // tcf_vlan_init checks the request before it answers EEXIST.
            ActSpec::Vlan(p) => p.params().map(|_| ())?,
            _ => {}
        }
        if let ActSpec::Mirred(p) = s {
            // tcf_mirred_init's checks that come before EEXIST.
            mirred_checks(p, false)?;
        }
        if !replace {
            return Err(FilterError::Errno("File exists"));
        }
        let est_active = lock(&existing).est.is_some();
        let new = self.kind_of(s, false, false, est_active)?;
        let mut a = lock(&existing);
        a.kind = match (new, &a.kind) {
            // A mirred replaced without a target keeps its device or block.
            (ActKind::Mirred(mut m), ActKind::Mirred(old)) if m.ifindex == 0 && m.blockid == 0 => {
                (m.ifindex, m.dev, m.blockid) = (old.ifindex, old.dev.clone(), old.blockid);
                ActKind::Mirred(m)
            }
            // tcf_sample_init changes the truncation only when it is given.
            (ActKind::Sample(mut d), ActKind::Sample(old)) if d.trunc.is_none() => {
                d.trunc = old.trunc;
                ActKind::Sample(d)
            }
            (k, _) => k,
        };
        drop(a);
        Ok(Ok(existing))
    }

    /// A new action with index `idx` and the request's TCA_ACT_FLAGS, in the table.
    fn create(&mut self, s: &ActSpec, idx: u32, tp: bool, flags: u32) -> Result<ActRef, FilterError> {
        let kind = self.kind_of(s, true, tp, false)?;
        let k = s.kind().expect("checked");
        let est = match self.est {
            Some(spec) => {
                Some(Estimator::new(spec, 0, 0, self.now, None).map_err(|_| FilterError::Errno("Invalid argument"))?)
            }
            None => None,
        };
        let now = self.now.0;
        let a = Arc::new(Mutex::new(Action {
            index: idx,
            kind,
            stats: ActStats::default(),
            install: now,
            lastuse: now,
            firstuse: 0,
            standalone: false,
            hw_stats: false,
            cookie: None,
            flags,
            est,
            freed: Some(self.table.freed.clone()),
        }));
        self.table.insert(k, &a);
        Ok(a)
    }

    /// The rest of each kind's init: validation and the parameters
    /// (`tcf_gact_init`, `tcf_police_init`, `tcf_mirred_init`) of a new action
    /// (`new`) or of the replacement of an existing one (`est_active`: which has
    /// an estimator).
    fn kind_of(&mut self, s: &ActSpec, new: bool, tp: bool, est_active: bool) -> Result<ActKind, FilterError> {
        let now = self.now.0;
        match s {
            ActSpec::Gact { action, prob, .. } => {
                check_ctrlact(*action, tp)?;
                if let Some((_, paction, _)) = prob {
                    check_ctrlact(*paction, tp)?;
                }
                let (ptype, paction, pval) = match prob {
                    Some((t, a, v)) if *t != PGACT_NONE => (*t, *a, (*v).max(1)),
                    _ => (PGACT_NONE, 0, 0),
                };
                Ok(ActKind::Gact(Gact { action: *action, ptype, paction, pval, packets: 0 }))
            }
            ActSpec::Police(p) => {
                check_ctrlact(p.action, tp)?;
                // avrate reads an estimator: this request's, or the one it has.
                if p.avrate != 0 && self.est.is_none() && !est_active {
                    return Err(FilterError::Errno("Invalid argument"));
                }
                if p.result != 0 && ext_cmp(p.result, TC_ACT_GOTO_CHAIN) {
                    return Err(FilterError::ext("goto chain not allowed on fallback"));
                }
                let rate = (p.rate.rate != 0).then(|| PschedRatecfg::from_spec(&p.rate, p.rate64));
                let peak = (p.peakrate.rate != 0).then(|| PschedRatecfg::from_spec(&p.peakrate, p.prate64));
                let mut mtu = p.mtu;
                if mtu == 0 {
                    mtu = u32::MAX;
                    if p.rate.rate != 0 {
                        mtu = 255u32 << p.rate.cell_log;
                    }
                }
                let burst = units::ticks2ns(p.burst);
                let mtu_ptoks = peak.as_ref().map(|pk| pk.l2t_ns(mtu) as i64).unwrap_or(0);
                // PSCHED_TICKS2NS of the 64-bit burst.
                let pps = p.pps.map(|(rate, burst)| (PschedPktrate::precompute(rate), (burst as i64) << 6));
                Ok(ActKind::Police(Police {
                    action: p.action,
                    result: p.result,
                    mtu,
                    burst,
                    mtu_ptoks,
                    rate,
                    peak,
                    ewma_rate: p.avrate,
                    pps,
                    toks: burst,
                    ptoks: mtu_ptoks,
                    pkttoks: 0,
                    t_c: now,
                }))
            }
            ActSpec::Mirred(p) => {
                mirred_checks(p, new)?;
                check_ctrlact(p.action, tp)?;
                Ok(ActKind::Mirred(Mirred {
                    action: p.action,
                    eaction: p.eaction,
                    ifindex: p.ifindex,
                    dev: p.dev.clone(),
                    blockid: p.blockid,
                    outbox: self.table.outbox.clone(),
                }))
            }
            ActSpec::Skbedit(p) => {
                p.check_flags()?;
                check_ctrlact(p.params.action, tp)?;
                Ok(ActKind::Skbedit(p.params.clone()))
            }
            ActSpec::Simple(p) => {
                let d = p.params()?;
                check_ctrlact(d.action, tp)?;
                Ok(ActKind::Simple(d))
            }
            ActSpec::Pedit(p) => {
                p.check_keys()?;
                check_ctrlact(p.params.action, tp)?;
                Ok(ActKind::Pedit(p.params.clone()))
            }
            ActSpec::Nat(p) => {
                check_ctrlact(p.params.action, tp)?;
                Ok(ActKind::Nat(p.params.clone()))
            }
            ActSpec::Csum(p) => {
                check_ctrlact(p.params.action, tp)?;
                Ok(ActKind::Csum(p.params.clone()))
            }
            ActSpec::Sample(p) => {
                let d = p.params()?;
                check_ctrlact(d.action, tp)?;
                Ok(ActKind::Sample(d))
            }
            ActSpec::Vlan(p) => {
                let v = p.params()?;
                check_ctrlact(v.action, tp)?;
                Ok(ActKind::Vlan(v))
            }
            ActSpec::Other(_) => Err(FilterError::action()),
        }
    }
}

/// A filter's actions (`struct tcf_exts`).
#[derive(Clone, Debug, Default)]
pub struct Exts {
    pub acts: Vec<ActRef>,
    /// TCA_OLD_COMPAT: one police action from the legacy `police` keyword.
    pub legacy_police: bool,
}

impl Exts {
    pub fn is_empty(&self) -> bool {
        self.acts.is_empty()
    }

    /// Each action whose control is `goto chain N` (`a->goto_chain`): its
    /// identity and N.
    pub fn for_each_goto_chain(&self, f: &mut dyn FnMut(*const (), u32)) {
        for a in &self.acts {
            let c = match &lock(a).kind {
                ActKind::Gact(g) => g.action,
                ActKind::Police(p) => p.action,
                ActKind::Mirred(m) => m.action,
                ActKind::Skbedit(e) => e.action,
                ActKind::Simple(d) => d.action,
                ActKind::Pedit(p) => p.action,
                ActKind::Nat(n) => n.action,
                ActKind::Csum(c) => c.action,
                ActKind::Sample(d) => d.action,
                ActKind::Vlan(v) => v.action,
            };
            if ext_cmp(c, TC_ACT_GOTO_CHAIN) {
                f(Arc::as_ptr(a) as *const (), (c & TC_ACT_EXT_VAL_MASK) as u32);
            }
        }
    }

    /// `tcf_exts_exec` → `tcf_action_exec` for `pkt` at `now`; TC_ACT_OK without
    /// actions.
    pub fn exec(&self, pkt: &mut Packet, now: Instant, _res: &mut TcfResult) -> i32 {
        if take_skip_classify() {
            return TC_ACT_OK;
        }
        let n = self.acts.len();
        let mut ret = TC_ACT_OK;
        let mut jmp_prgcnt = 0u32;
        let mut jmp_ttl = TCA_ACT_MAX_PRIO as u32;
        'restart: loop {
            for a in &self.acts {
                if jmp_prgcnt > 0 {
                    jmp_prgcnt -= 1;
                    continue;
                }
                let mut repeat_ttl = 32;
                loop {
                    ret = lock(a).act(a, pkt, now);
                    if ret != TC_ACT_REPEAT {
                        break;
                    }
                    repeat_ttl -= 1;
                    if repeat_ttl == 0 {
                        return TC_ACT_OK;
                    }
                }
                if ext_cmp(ret, TC_ACT_JUMP) {
                    jmp_prgcnt = (ret & (TCA_ACT_MAX_PRIO as i32 - 1)) as u32;
                    if jmp_prgcnt == 0 || jmp_prgcnt as usize > n {
                        return TC_ACT_OK;
                    }
                    jmp_ttl -= 1;
                    if jmp_ttl > 0 {
                        continue 'restart;
                    }
                    return TC_ACT_OK;
                }
                if ret != TC_ACT_PIPE {
                    break;
                }
            }
            return ret;
        }
    }

    /// `tcf_exts_hw_stats_update` of a classifier's dump that asks its (absent)
    /// hardware for counters (matchall's and flower's, unless `skip_hw`): each
    /// action takes the filter's `used_hw_stats_valid`, which is false here.
    pub fn hw_stats_update(&self) {
        for a in &self.acts {
            lock(a).hw_stats = false;
        }
    }

    /// `tcf_exts_dump_stats` + tc's `print_tcstats_attr` with `-s`: a legacy police's
    /// counters as the filter's own (compat TCA_STATS: no estimator, no queue here, so
    /// no rate or backlog line).
    pub fn print_filter_stats(&self, out: &mut Out) {
        if !self.legacy_police || !out.show_stats() {
            return;
        }
        let s = lock(&self.acts[0]).stats;
        out.fp(format_args!(" "));
        out.uint("bytes", format_args!("Sent {} bytes", s.bytes), s.bytes);
        out.uint("packets", format_args!(" {} pkts", s.packets as u32), s.packets as u32 as u64);
        out.uint("dropped", format_args!(" (dropped {},", s.drops), s.drops as u64);
        out.uint("overlimits", format_args!(" overlimits {}) ", s.overlimits), s.overlimits as u64);
        out.nl();
    }

    /// `tcf_exts_dump` + tc's printing: the legacy police (on a line of its own, as
    /// most classifiers print it) or the action list (`tc_print_action`).
    pub fn print(&self, out: &mut Out, now: Instant) {
        self.print_police_nl(out, now, true)
    }

    /// `tcf_exts_terse_dump` + tc's printing: each action's terse dump
    /// (`tcf_action_dump_terse`: kind, counters, cookie).
    pub fn print_terse(&self, out: &mut Out, now: Instant) {
        if self.acts.is_empty() {
            return;
        }
        out.open_array("actions", "");
        for (i, a) in self.acts.iter().enumerate() {
            print_one_terse(out, a, i as u64 + 1, now);
        }
        out.close_array("");
    }

    /// [`Exts::print`], with the legacy police on the filter's line unless `nl`
    /// (f_route.c, f_fw.c and f_flow.c call `tc_print_police` without `print_nl`).
    pub fn print_police_nl(&self, out: &mut Out, now: Instant, nl: bool) {
        if self.acts.is_empty() {
            return;
        }
        if self.legacy_police {
            if nl {
                out.nl();
            }
            // tc_print_police prints into the filter's options, with no object of its own.
            print_police(out, &lock(&self.acts[0]), 1, 1, now);
            return;
        }
        out.open_array("actions", "");
        for (i, a) in self.acts.iter().enumerate() {
            print_one(out, a, i as u64 + 1, true, now);
        }
        out.close_array("");
    }
}

/// How many of `acts` each netlink message of a `tc actions ls` dump holds
/// (`tc_dump_action` over `tcf_dump_walker`, which tc asks for with
/// TCA_ACT_FLAG_LARGE_DUMP_ON: as many as fit, whole). A message is an skb of
/// `netlink_dump`'s size: the first two NLMSG_GOODSIZE (4096 less the 320 bytes of
/// `skb_shared_info`: the dump starts before tc's first read, and tc's first read
/// only peeks with an empty buffer), the later ones the 32 KiB tc's reads ask for,
/// less the same 320 (`netlink_recvmsg`'s cap). Each starts with the nlmsghdr (16),
/// tcamsg (4), TCA_ROOT_COUNT (8) and the TCA_ACT_TAB nest (4). goldens/kernel-6.12/
/// actions-dump-split.json: 22, 22, 56 of 100 gact actions.
pub fn dump_messages(acts: &[ActRef]) -> Vec<usize> {
    const GOODSIZE: usize = 4096 - 320;
    const LARGE: usize = 32768 - 320;
    const HEAD: usize = 16 + 4 + 8 + 4;
    let mut counts = Vec::new();
    let (mut n, mut used) = (0, HEAD);
    for a in acts {
        let size = lock(a).dump_size();
        let room = if counts.len() < 2 { GOODSIZE } else { LARGE };
        if n > 0 && used + size > room {
            counts.push(n);
            (n, used) = (0, HEAD);
        }
        n += 1;
        used += size;
    }
    if n > 0 {
        counts.push(n);
    }
    counts
}

/// `tc_dump_action`'s entry for one action (`tcf_action_dump_1` +
/// `tc_print_one_action`): `order`, the kind's own lines, the statistics, and the
/// hardware lines — `not_in_hw` only in `tc actions` dumps (`bind` false: a
/// filter's dump is a bind dump), `used_hw_stats` for an action `tc actions` made.
/// A `tc actions` dump holds a reference of its own to each action while it prints
/// (`a`), which the counts leave out.
pub fn print_one(out: &mut Out, a: &ActRef, order: u64, bind: bool, now: Instant) {
    let refs = Arc::strong_count(a) as i64 - !bind as i64;
    let mut a = lock(a);
    let (bytes, packets) = (a.stats.bytes, a.stats.packets);
    if let Some(e) = &mut a.est {
        e.catch_up(now, bytes, packets);
    }
    let binds = refs - a.standalone as i64;
    out.open_object(None);
    out.nl();
    out.uint("order", format_args!("\taction order {order}: "), order);
    match &a.kind {
        ActKind::Gact(_) => print_gact(out, &a, refs, binds, now),
        ActKind::Police(_) => print_police(out, &a, refs, binds, now),
        ActKind::Mirred(_) => print_mirred(out, &a, refs, binds, now),
        ActKind::Skbedit(e) => {
            e.print(out);
            out.nl();
            print_refs(out, "\t index", &a, refs, binds, now);
        }
        ActKind::Simple(d) => {
            d.print(out);
            out.nl();
            print_refs(out, "\t index", &a, refs, binds, now);
        }
        ActKind::Pedit(p) => {
            p.print_head(out);
            out.uint("index", format_args!(" \t index {}", a.index), a.index as u64);
            out.int("ref", format_args!(" ref {refs}"), refs);
            out.int("bind", format_args!(" bind {binds}"), binds);
            if out.show_stats() {
                print_tm(out, &a, now);
            }
            p.print_keys(out);
        }
        ActKind::Nat(n) => {
            n.print(out);
            out.nl();
            print_refs(out, "\t index", &a, refs, binds, now);
        }
        ActKind::Csum(c) => {
            c.print(out);
            print_refs(out, "\tindex", &a, refs, binds, now);
        }
        ActKind::Sample(d) => {
            d.print(out);
            out.nl();
            print_refs(out, "\t index", &a, refs, binds, now);
        }
        ActKind::Vlan(v) => {
            v.print(out);
            out.nl();
            print_refs(out, "\t index", &a, refs, binds, now);
        }
    }
    print_stats(out, &a);
    print_cookie(out, &a);
    // TCA_ACT_FLAGS, then TCA_ACT_IN_HW_COUNT (`tc actions` dumps only: 0), on one line.
    if a.flags & TCA_ACT_FLAGS_NO_PERCPU_STATS != 0 {
        out.boolean("no_percpu", format_args!("\tno_percpu"), true);
    }
    if !bind {
        out.boolean("not_in_hw", format_args!("\tnot_in_hw"), true);
    }
    if a.flags != 0 || !bind {
        out.nl();
    }
    if a.hw_stats {
        out.fp(format_args!("\t"));
        out.open_array("used_hw_stats", "used_hw_stats");
        out.bare_string(format_args!(" disabled"), "disabled");
        out.close_array("");
        out.nl();
    }
    out.close_object();
}

/// A filter's action in a terse dump (`tcf_action_dump_terse`, no options): what
/// each kind's tc printer gives for absent options — its kind, in text or only in
/// JSON (police), or nothing (simple) — then the counters and the cookie.
fn print_one_terse(out: &mut Out, a: &ActRef, order: u64, now: Instant) {
    let mut a = lock(a);
    let (bytes, packets) = (a.stats.bytes, a.stats.packets);
    if let Some(e) = &mut a.est {
        e.catch_up(now, bytes, packets);
    }
    out.open_object(None);
    out.nl();
    out.uint("order", format_args!("\taction order {order}: "), order);
    match a.kind() {
        Kind::Police => out.string("kind", format_args!(""), "police"),
        Kind::Simple => {}
        Kind::Pedit => out.string("kind", format_args!(" pedit "), "pedit"),
        Kind::Nat => out.string("type", format_args!(" nat "), "nat"),
        k => out.string("kind", format_args!("{} ", k.name()), k.name()),
    }
    print_stats(out, &a);
    print_cookie(out, &a);
    out.close_object();
}

/// `print_tcstats2_attr` of an action's counters with `-s`.
fn print_stats(out: &mut Out, a: &Action) {
    if out.show_stats() {
        out.fp(format_args!("\tAction statistics:"));
        out.nl();
        out.open_object(Some("stats"));
        let s = a.stats;
        out.fp(format_args!("\t"));
        out.uint("bytes", format_args!("Sent {} bytes", s.bytes), s.bytes);
        out.uint("packets", format_args!(" {} pkt", s.packets as u32), s.packets as u32 as u64);
        out.uint("drops", format_args!(" (dropped {}", s.drops), s.drops as u64);
        out.uint("overlimits", format_args!(", overlimits {}", s.overlimits), s.overlimits as u64);
        out.uint("requeues", format_args!(" requeues 0) "), 0);
        match &a.est {
            Some(e) => crate::estimator::print(out, "\t", e.read()),
            None => out.nl(),
        }
        out.fp(format_args!("\t"));
        out.size("backlog", "backlog ", 0, "");
        out.uint("qlen", format_args!(" 0p"), 0);
        out.fp(format_args!(" requeues 0"));
        out.close_object();
        out.nl();
    }
}

/// TCA_ACT_COOKIE.
fn print_cookie(out: &mut Out, a: &Action) {
    if let Some(c) = &a.cookie {
        let hex: String = c.iter().map(|b| format!("{b:02x}")).collect();
        out.string("cookie", format_args!("\tcookie {hex}"), &hex);
        out.nl();
    }
}

/// `tcf_tm_dump` + `print_tm`: ages in USER_HZ ticks, printed as whole seconds.
fn print_tm(out: &mut Out, a: &Action, now: Instant) {
    let clk = |t: u64| now.0.saturating_sub(t) / 10_000_000;
    let install = clk(a.install);
    let lastuse = clk(a.lastuse);
    let firstuse = if a.firstuse != 0 { clk(a.firstuse) } else { 0 };
    if install != 0 {
        out.uint("installed", format_args!(" installed {} sec", install / 100), install / 100);
    }
    if lastuse != 0 {
        out.uint("last_used", format_args!(" used {} sec", lastuse / 100), lastuse / 100);
    }
    if firstuse != 0 {
        out.uint("first_used", format_args!(" firstused {} sec", firstuse / 100), firstuse / 100);
    }
}

/// m_gact.c `print_gact`.
fn print_gact(out: &mut Out, a: &Action, refs: i64, binds: i64, now: Instant) {
    let ActKind::Gact(g) = &a.kind else { return };
    out.string("kind", format_args!("gact "), "gact");
    print_action_control(out, "action ", g.action, "");
    out.open_object(Some("prob"));
    out.nl();
    let (ptype, paction, pval) = if g.ptype != PGACT_NONE { (g.ptype, g.paction, g.pval) } else { (0, 0, 0) };
    let tname = match ptype {
        PGACT_NETRAND => "netrand",
        PGACT_DETERM => "determ",
        _ => "none",
    };
    out.string("random_type", format_args!("\t random type {tname}"), tname);
    print_action_control(out, " ", paction, " ");
    out.int("val", format_args!("val {pval}"), pval as i64);
    out.close_object();
    out.nl();
    print_refs(out, "\t index", a, refs, binds, now);
}

/// The index line most kinds end with: `PREFIX N ref R bind B`, the ages with `-s`.
fn print_refs(out: &mut Out, prefix: &str, a: &Action, refs: i64, binds: i64, now: Instant) {
    out.uint("index", format_args!("{prefix} {}", a.index), a.index as u64);
    out.int("ref", format_args!(" ref {refs}"), refs);
    out.int("bind", format_args!(" bind {binds}"), binds);
    if out.show_stats() {
        print_tm(out, a, now);
    }
    out.nl();
}

/// m_mirred.c `print_mirred`.
fn print_mirred(out: &mut Out, a: &Action, refs: i64, binds: i64, now: Instant) {
    let ActKind::Mirred(m) = &a.kind else { return };
    out.string("kind", format_args!("mirred "), "mirred");
    let (what, dir, act) = match m.eaction {
        TCA_EGRESS_REDIR => ("Egress Redirect", "egress", "redirect"),
        TCA_INGRESS_REDIR => ("Ingress Redirect", "ingress", "redirect"),
        TCA_EGRESS_MIRROR => ("Egress Mirror", "egress", "mirror"),
        _ => ("Ingress Mirror", "ingress", "mirror"),
    };
    out.fp(format_args!("({what}"));
    out.string("mirred_action", format_args!(""), act);
    out.string("direction", format_args!(""), dir);
    if m.blockid != 0 {
        out.uint("to_blockid", format_args!(" to blockid {})", m.blockid), m.blockid as u64);
    } else {
        out.string("to_dev", format_args!(" to device {})", m.dev), &m.dev);
    }
    print_action_control(out, " ", m.action, "");
    out.nl();
    print_refs(out, "\tindex", a, refs, binds, now);
}

/// m_police.c `print_police`.
fn print_police(out: &mut Out, a: &Action, refs: i64, binds: i64, now: Instant) {
    let ActKind::Police(p) = &a.kind else { return };
    out.string("kind", format_args!(""), "police");
    out.fp(format_args!(" police 0x{:x} ", a.index));
    if out.is_json() {
        out.uint("index", format_args!(""), a.index as u64);
    }
    let rate64 = p.rate.map(|r| r.rate_bytes_ps).unwrap_or(0);
    out.fp(format_args!("rate {} ", units::fmt_rate(rate64, out.iec())));
    let ticks = units::ns2ticks(p.burst) as u32;
    let buffer = units::calc_xmitsize(rate64, ticks);
    out.fp(format_args!("burst {} ", units::fmt_size(buffer)));
    out.fp(format_args!("mtu {} ", units::fmt_size(p.mtu)));
    if out.raw() {
        out.fp(format_args!("[{ticks:08x}] "));
    }
    if let Some(pk) = p.peak {
        out.fp(format_args!("peakrate {} ", units::fmt_rate(pk.rate_bytes_ps, out.iec())));
    }
    if p.ewma_rate != 0 {
        out.fp(format_args!("avrate {} ", units::fmt_rate(p.ewma_rate as u64, out.iec())));
    }
    if let Some((pps, burst)) = &p.pps {
        // TCA_POLICE_PKTBURST64 is PSCHED_NS2TICKS of the burst; tc reads it back as
        // a number of packets (tc_calc_xmitsize, the ticks as an unsigned int).
        let pkts = units::calc_xmitsize(pps.rate_pkts_ps, units::ns2ticks(*burst) as u32) as u64;
        out.uint("pkts_rate", format_args!("pkts_rate {} ", pps.rate_pkts_ps), pps.rate_pkts_ps);
        out.uint("pkts_burst", format_args!("pkts_burst {pkts} "), pkts);
    }
    print_action_control(out, "action ", p.action, "");
    if p.result != 0 {
        print_action_control(out, "/", p.result, " ");
    } else {
        out.fp(format_args!(" "));
    }
    // Without a byte rate the dumped ratespec is zeroed: linklayer 0, "unspec".
    let (overhead, ll) = match p.rate {
        Some(r) => (r.overhead, r.linklayer.name()),
        None => (0, "unspec"),
    };
    out.size("overhead", "overhead ", overhead as u32, " ");
    if p.rate.is_some_and(|r| r.linklayer != LinkLayer::Ethernet) || out.details() {
        out.string("linklayer", format_args!("linklayer {ll} "), ll);
    }
    out.nl();
    out.int("ref", format_args!("\tref {refs} "), refs);
    out.int("bind", format_args!("bind {binds} "), binds);
    if out.show_stats() {
        print_tm(out, a, now);
    }
    out.nl();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn exts(s: &str, now: u64) -> (Exts, ActionTable) {
        let v = argv(s);
        let mut a = Args::new(&v);
        let mut spec = ExtsSpec::default();
        if a.peek() == Some("police") {
            a.next();
            parse_legacy_police(&mut a, &mut spec).unwrap();
        } else {
            parse_action(&mut a, &mut spec).unwrap();
        }
        let mut table = ActionTable::default();
        let e = ActCtx {
            table: &mut table,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant(now),
            at_ingress: false,
            est: None,
        }
        .init(&spec)
        .unwrap();
        (e, table)
    }

    fn run(e: &Exts, len: u32, now: u64) -> i32 {
        e.exec(&mut Packet::new(0, len), Instant(now), &mut TcfResult::unbound(0))
    }

    #[test]
    fn a_gone_actions_index_is_the_lowest_free_again() {
        let mut table = ActionTable::default();
        let init = |table: &mut ActionTable, s: &str| {
            let v = argv(s);
            let mut spec = ExtsSpec::default();
            parse_action(&mut Args::new(&v), &mut spec).unwrap();
            let mut ctx = ActCtx {
                table,
                available: &|_| true,
                kernel: Default::default(),
                now: Instant(0),
                at_ingress: false,
                est: None,
            };
            ctx.init(&spec).unwrap()
        };
        let lists: Vec<Exts> = (0..5).map(|_| init(&mut table, "drop")).collect();
        let index = |e: &Exts| lock(&e.acts[0]).index;
        assert_eq!(lists.iter().map(index).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        // The filters holding 2 and 4 go: their indices are free, lowest first
        // (idr_alloc_u32), and the table lists only the live ones.
        let mut lists = lists;
        lists.remove(3);
        lists.remove(1);
        assert_eq!(index(&init(&mut table, "pass")), 2);
        let kept = init(&mut table, "pass");
        assert_eq!(index(&kept), 2, "the list just made was dropped: 2 is free again");
        assert_eq!(index(&init(&mut table, "pass")), 4);
        assert_eq!(table.all(Kind::Gact).iter().map(|a| lock(a).index).collect::<Vec<_>>(), [1, 2, 3, 5]);
        // A goto chain counts as one more list that holds a chain.
        assert_eq!(table.gotos, 0);
        let _g = init(&mut table, "goto chain 1");
        assert_eq!(table.gotos, 1);
    }

    #[test]
    fn gact_verdicts_and_counters() {
        for (w, v) in [
            ("drop", TC_ACT_SHOT),
            ("shot", TC_ACT_SHOT),
            ("pass", TC_ACT_OK),
            ("ok", TC_ACT_OK),
            ("continue", TC_ACT_UNSPEC),
            ("reclassify", TC_ACT_RECLASSIFY),
            ("pipe", TC_ACT_PIPE),
            ("gact drop", TC_ACT_SHOT),
        ] {
            let (e, _t) = exts(w, 0);
            assert_eq!(run(&e, 100, 5), v, "{w}");
            let s = lock(&e.acts[0]).stats;
            assert_eq!((s.bytes, s.packets, s.drops), (100, 1, (v == TC_ACT_SHOT) as u32), "{w}");
        }
        // pipe runs on to the next action; the last verdict wins.
        let (e, _t) = exts("pipe action drop", 0);
        assert_eq!(run(&e, 60, 1), TC_ACT_SHOT);
        assert_eq!(lock(&e.acts[1]).index, 2);
        // `random determ pass 3`: every third packet takes the random action.
        let (e, _t) = exts("gact drop random determ pass 3", 0);
        let v: Vec<i32> = (0..6).map(|i| run(&e, 10, i)).collect();
        assert_eq!(v, [2, 2, 0, 2, 2, 0]);
        // `jump N` restarts the list skipping its first N actions (the jump included).
        let (e, _t) = exts("jump 2 action drop action pass", 0);
        assert_eq!(run(&e, 10, 0), TC_ACT_OK);
        assert_eq!(lock(&e.acts[1]).stats.packets, 0);
        assert_eq!(lock(&e.acts[0]).stats.packets, 1);
        // Past the end of the list: the pipeline stops with OK.
        let (e, _t) = exts("jump 5 action drop", 0);
        assert_eq!(run(&e, 10, 0), TC_ACT_OK);
    }

    #[test]
    fn indexes_are_shared_per_kind_and_freed() {
        let v = argv("drop");
        let mut table = ActionTable::default();
        let spec = |s: &[String]| {
            let mut a = Args::new(s);
            let mut sp = ExtsSpec::default();
            parse_action(&mut a, &mut sp).unwrap();
            sp
        };
        let mut ctx = ActCtx {
            table: &mut table,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant(0),
            at_ingress: false,
            est: None,
        };
        let a = ctx.init(&spec(&v)).unwrap();
        let b = ctx.init(&spec(&v)).unwrap();
        assert_eq!((lock(&a.acts[0]).index, lock(&b.acts[0]).index), (1, 2));
        drop(a);
        let c = ctx.init(&spec(&v)).unwrap();
        assert_eq!(lock(&c.acts[0]).index, 1);
        let d = ctx.init(&spec(&argv("pass index 2"))).unwrap();
        // Bound to the existing drop action 2, whose parameters stay.
        assert!(Arc::ptr_eq(&d.acts[0], &b.acts[0]));
        assert_eq!(Arc::strong_count(&b.acts[0]), 2);
        let mut ctx = ActCtx {
            table: &mut table,
            available: &|_| false,
            kernel: Default::default(),
            now: Instant(0),
            at_ingress: false,
            est: None,
        };
        assert_eq!(ctx.init(&spec(&v)).unwrap_err(), FilterError::action());
    }

    #[test]
    fn police_token_bucket_at_exact_boundaries() {
        // 1 Mbit/s = 125000 B/s = 8000 ns per byte; burst 10 KiB → 81920 µs of tokens.
        let (e, _t) = exts("police rate 1mbit burst 10k drop", 0);
        let p = || match &lock(&e.acts[0]).kind {
            ActKind::Police(p) => (p.toks, p.burst, p.mtu),
            _ => unreachable!(),
        };
        let (toks, burst, mtu) = p();
        assert_eq!((toks, burst, mtu), (81_920_000, 81_920_000, 2040));
        // Ten 1024-byte packets at t=0 drain the bucket exactly to 0: all conform.
        for _ in 0..10 {
            assert_eq!(run(&e, 1024, 0), TC_ACT_OK);
        }
        assert_eq!(p().0, 0);
        // One byte more than the tokens: exceed → drop, counted as overlimit + drop.
        assert_eq!(run(&e, 1, 7_999), TC_ACT_SHOT);
        // 8000 ns later one byte's worth of tokens exists: conform again.
        assert_eq!(run(&e, 1, 8_000), TC_ACT_OK);
        assert_eq!(p().0, 0);
        // Larger than the mtu (2040): always exceeds, whatever the tokens.
        assert_eq!(run(&e, 2041, 1_000_000_000), TC_ACT_SHOT);
        let s = lock(&e.acts[0]).stats;
        assert_eq!((s.packets, s.drops, s.overlimits), (13, 2, 2));
        // Refill is capped at the burst.
        assert_eq!(run(&e, 1, 10_000_000_000), TC_ACT_OK);
        assert_eq!(p().0, 81_920_000 - 8_000);
    }

    /// The packet-rate bucket (`pkts_rate 1000 pkts_burst 3`: 1 ms a packet, a 3 ms
    /// burst): `tcfp_pkttoks` starts empty, so a new policer first earns its credit;
    /// a conforming packet restarts the clock (`tcfp_t_c`), an exceeding one does not.
    #[test]
    fn police_packet_rate_bucket_at_exact_boundaries() {
        let (e, _t) = exts("police pkts_rate 1000 pkts_burst 3 conform-exceed drop/pipe", 0);
        let (pps, burst) = match &lock(&e.acts[0]).kind {
            ActKind::Police(p) => p.pps.expect("a packet rate"),
            _ => unreachable!(),
        };
        // tc sends the burst as ticks: ceil(3 ms × 15.625) = 46875, exactly 3 ms.
        assert_eq!((pps.rate_pkts_ps, pps.pkt2t_ns(1), burst), (1000, 1_000_000, 3_000_000));
        // At creation: no credit, the packet costs 1 ms: over the limit (drop).
        assert_eq!(run(&e, 100, 0), TC_ACT_SHOT);
        // 1 ms - 1 ns later the credit is still short by 1 ns; at 1 ms it is exactly
        // enough (0 left), and the next packet at the same instant is over again.
        assert_eq!(run(&e, 100, 999_999), TC_ACT_SHOT);
        assert_eq!(run(&e, 100, 1_000_000), TC_ACT_PIPE);
        assert_eq!(run(&e, 100, 1_000_000), TC_ACT_SHOT);
        // A long pause fills the bucket to the burst alone: three packets, not more.
        let t = 1_000_000_000;
        let v: Vec<i32> = (0..4).map(|_| run(&e, 1500, t)).collect();
        assert_eq!(v, [TC_ACT_PIPE, TC_ACT_PIPE, TC_ACT_PIPE, TC_ACT_SHOT]);
        // The length does not matter, the byte rate is absent; the MTU still does.
        let s = lock(&e.acts[0]).stats;
        assert_eq!((s.packets, s.drops, s.overlimits), (8, 4, 4));
        // tc reads the burst back as packets (tc_calc_xmitsize of the dumped ticks).
        let mut out = Out::text();
        print_police(&mut out, &lock(&e.acts[0]), 1, 1, Instant(t));
        assert!(out
            .into_string()
            .contains(" rate 0bit burst 0b mtu 4096Mb pkts_rate 1000 pkts_burst 3 action drop/pipe "));
    }

    #[test]
    fn police_peakrate_and_conform_action() {
        // rate 1mbit burst 10k, peak 2mbit with mtu 1000: the peak bucket holds
        // 1000 bytes at 4000 ns/byte = 4 ms.
        let (e, _t) = exts("police rate 1mbit burst 10k mtu 1000 peakrate 2mbit conform-exceed drop/pipe", 0);
        assert_eq!(run(&e, 1000, 0), TC_ACT_PIPE);
        // The peak bucket is empty now: a second packet at once exceeds.
        assert_eq!(run(&e, 1, 0), TC_ACT_SHOT);
        assert_eq!(run(&e, 1, 3_999), TC_ACT_SHOT);
        assert_eq!(run(&e, 1, 4_000), TC_ACT_PIPE);
    }

    fn mirred_exts(s: &str, table: &mut ActionTable) -> Exts {
        let v = argv(s);
        let mut a = Args::new(&v);
        a.set_links(vec!["lo".into(), "eth0".into(), "ifb0".into()]);
        let mut spec = ExtsSpec::default();
        parse_action(&mut a, &mut spec).unwrap();
        ActCtx {
            table,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant(0),
            at_ingress: false,
            est: None,
        }
        .init(&spec)
        .unwrap()
    }

    #[test]
    fn mirred_redirect_steals_and_hands_the_packet_on() {
        let mut t = ActionTable::default();
        let e = mirred_exts("mirred egress redirect dev ifb0", &mut t);
        assert_eq!(e.exec(&mut Packet::new(7, 1000), Instant(5), &mut TcfResult::unbound(0)), TC_ACT_STOLEN);
        let out = t.take_mirrored();
        assert_eq!(out.len(), 1);
        let m = &out[0];
        assert_eq!((m.ifindex, m.ingress, m.redirect, m.pkt.id, m.pkt.len), (3, false, true, 7, 1000));
        // Taken once: the outbox is empty again.
        assert!(t.take_mirrored().is_empty());
        // The target refused it: one overlimit on the action, counters as sent.
        m.failed();
        let s = lock(&e.acts[0]).stats;
        assert_eq!((s.bytes, s.packets, s.drops, s.overlimits), (1000, 1, 0, 1));
    }

    #[test]
    fn mirred_loop_guards() {
        let mut t = ActionTable::default();
        let e = mirred_exts("mirred egress redirect dev ifb0", &mut t);
        let run = |nest: MirredNest| {
            set_mirred_nest(nest);
            let v = e.exec(&mut Packet::new(1, 100), Instant(0), &mut TcfResult::unbound(0));
            set_mirred_nest(MirredNest::default());
            v
        };
        let root = MirredNest::default();
        // Three forwards to other transmit paths in progress: this one may go.
        assert_eq!(run(root.enter(1).enter(2).enter(4)), TC_ACT_STOLEN);
        // Four: shot before it counts or forwards anything; so is a packet that went
        // into a receive path three times.
        assert_eq!(run(root.enter(1).enter(2).enter(4).enter(5)), TC_ACT_SHOT);
        assert_eq!(run(root.with_depth(MIRRED_DEFER_LIMIT)), TC_ACT_SHOT);
        assert_eq!(run(root.with_depth(MIRRED_DEFER_LIMIT - 1)), TC_ACT_STOLEN);
        assert_eq!(t.take_mirrored().len(), 2);
        let s = lock(&e.acts[0]).stats;
        assert_eq!((s.packets, s.drops, s.overlimits), (2, 0, 0));
        // ifb0 (ifindex 3) already being sent to: a loop, counted, an overlimit, and
        // the redirect drops; nothing goes out.
        assert_eq!(run(root.enter(3)), TC_ACT_SHOT);
        assert!(t.take_mirrored().is_empty());
        let s = lock(&e.acts[0]).stats;
        assert_eq!((s.packets, s.drops, s.overlimits), (3, 0, 1));
        // A mirror in a loop keeps its verdict; one into a receive path is no loop.
        let e = mirred_exts("mirred egress mirror dev ifb0", &mut t);
        set_mirred_nest(root.enter(3));
        assert_eq!(e.exec(&mut Packet::new(1, 100), Instant(0), &mut TcfResult::unbound(0)), TC_ACT_PIPE);
        let e = mirred_exts("mirred ingress mirror dev ifb0", &mut t);
        assert_eq!(e.exec(&mut Packet::new(1, 100), Instant(0), &mut TcfResult::unbound(0)), TC_ACT_PIPE);
        set_mirred_nest(root);
        assert_eq!(t.take_mirrored().len(), 1);
    }

    #[test]
    fn skip_classify_passes_the_first_action_list_only() {
        let mut t = ActionTable::default();
        let e = mirred_exts("mirred egress redirect dev ifb0", &mut t);
        let mut res = TcfResult::unbound(0);
        set_skip_classify(true);
        assert_eq!(e.exec(&mut Packet::new(1, 100), Instant(0), &mut res), TC_ACT_OK);
        assert!(!take_skip_classify(), "the first exec cleared it");
        assert_eq!(e.exec(&mut Packet::new(1, 100), Instant(0), &mut res), TC_ACT_STOLEN);
        assert_eq!(t.take_mirrored().len(), 1);
        assert_eq!(lock(&e.acts[0]).stats.packets, 1);
    }

    #[test]
    fn mirred_mirror_pipes_on_to_the_next_action() {
        let mut t = ActionTable::default();
        // Mirror (pipe) to eth0's receive path, then redirect to ifb0: two copies out,
        // in action order, and the last verdict wins.
        let e = mirred_exts("mirred ingress mirror dev eth0 action mirred egress redirect dev ifb0", &mut t);
        assert_eq!(e.exec(&mut Packet::new(1, 60), Instant(0), &mut TcfResult::unbound(0)), TC_ACT_STOLEN);
        let out = t.take_mirrored();
        let got: Vec<_> = out.iter().map(|m| (m.ifindex, m.ingress, m.redirect)).collect();
        assert_eq!(got, [(2, true, false), (3, false, true)]);
        // A mirror's own control word replaces pipe.
        let e = mirred_exts("mirred egress mirror dev ifb0 drop", &mut t);
        assert_eq!(e.exec(&mut Packet::new(2, 60), Instant(0), &mut TcfResult::unbound(0)), TC_ACT_SHOT);
        assert_eq!(t.take_mirrored().len(), 1);
        // A block target: no shared block exists, so nothing goes out; an overlimit.
        let e = mirred_exts("mirred egress mirror blockid 3", &mut t);
        assert_eq!(e.exec(&mut Packet::new(3, 60), Instant(0), &mut TcfResult::unbound(0)), TC_ACT_PIPE);
        assert!(t.take_mirrored().is_empty());
        assert_eq!(lock(&e.acts[0]).stats.overlimits, 1);
    }

    #[test]
    fn mirred_refusals_in_the_kernels_words() {
        let mut t = ActionTable::default();
        let init = |t: &mut ActionTable, spec: MirredSpec| {
            let spec = ExtsSpec { acts: vec![ActSpec::Mirred(spec)], ..Default::default() };
            ActCtx {
                table: t,
                available: &|_| true,
                kernel: Default::default(),
                now: Instant(0),
                at_ingress: false,
                est: None,
            }
            .init(&spec)
            .map(|_| ())
        };
        // `mirred index 5` of a missing action: no direction.
        let e = init(&mut t, MirredSpec { index: 5, ..Default::default() }).unwrap_err();
        assert_eq!(e, FilterError::ext("act_mirred: Unknown mirred option"));
        let spec = MirredSpec { eaction: TCA_EGRESS_REDIR, action: TC_ACT_STOLEN, ..Default::default() };
        let e = init(&mut t, spec.clone()).unwrap_err();
        assert_eq!(e, FilterError::ext("act_mirred: Must specify device or block"));
        let both = MirredSpec { ifindex: 2, dev: "eth0".into(), blockid: 1, ..spec };
        let e = init(&mut t, both).unwrap_err();
        assert_eq!(e, FilterError::ext("act_mirred: Cannot specify Block ID and dev simultaneously"));
        // Only act_mirred loads where the profile lacks gact and police (6.18).
        let spec =
            ExtsSpec { acts: vec![ActSpec::Gact { index: 0, action: TC_ACT_OK, prob: None }], ..Default::default() };
        let only_mirred = |k: Kind| k == Kind::Mirred;
        let e = ActCtx {
            table: &mut t,
            available: &only_mirred,
            kernel: Default::default(),
            now: Instant(0),
            at_ingress: false,
            est: None,
        }
        .init(&spec)
        .unwrap_err();
        assert_eq!(e, FilterError::action());
    }

    #[test]
    fn parse_errors_like_tc() {
        let err = |s: &str| {
            let v = argv(s);
            let mut a = Args::new(&v);
            parse_action(&mut a, &mut ExtsSpec::default()).unwrap_err()
        };
        let e = err("bogus");
        assert!(e.msg.starts_with("Bad action type bogus\nUsage: ... gact"), "{}", e.msg);
        assert_eq!(e.code, 255);
        assert_eq!(
            err("police pkts_rate 10").msg,
            "'pkts_burst' requires 'pkts_rate'.\nbad action parsing\nparse_action: bad value (3:police)!\nIllegal \"action\"\n"
        );
        assert_eq!(
            err("pipe action c flowid 1:1").msg,
            "bad action empty 1\nparse_action: bad value (3:c)!\nIllegal \"action\"\n"
        );
        assert_eq!(err("help").msg, "Illegal \"action\"\n");
        assert_eq!(
            err("gact drop random determ pass 10001").msg,
            "Illegal probability val  0x2711\nbad action parsing\nparse_action: bad value (6:gact)!\nIllegal \"action\"\n"
        );
        // Kinds that need conntrack are refused by name (tc's exit status 1).
        for k in ["ct", "connmark", "ctinfo"] {
            let e = err(&format!("{k} zone 1"));
            assert_eq!(e.msg, format!("qdisc-lab: action \"{k}\" needs conntrack, which qdisc-lab does not model\n"));
            assert_eq!(e.code, 1);
        }
        assert_eq!(
            err("mpls pop").msg,
            "qdisc-lab: action \"mpls\" is not supported (gact, police, mirred, skbedit, simple, pedit, nat, csum, sample and vlan only)\n"
        );
    }

    #[test]
    fn simple_counts_and_answers_its_control() {
        let (e, _t) = exts("simple sdata hi action simple sdata there drop", 0);
        let mut p = Packet::new(1, 300);
        let before = p.clone();
        assert_eq!(e.exec(&mut p, Instant(3), &mut TcfResult::unbound(0)), TC_ACT_SHOT);
        assert_eq!(p, before);
        let s = |i: usize| lock(&e.acts[i]).stats;
        assert_eq!(s(0), ActStats { bytes: 300, packets: 1, drops: 0, overlimits: 0 });
        // A drop verdict of simple is not counted as the action's drop (no qstats).
        assert_eq!(s(1), ActStats { bytes: 300, packets: 1, drops: 0, overlimits: 0 });
    }

    #[test]
    fn skbedit_edits_the_packet_counts_and_drops() {
        // mark under a mask, then a second action sees the edited packet.
        let (e, _t) = exts("skbedit mark 0x50/0xf0 pipe action skbedit priority 1:3 inheritdsfield pass", 0);
        let mut p = Packet::new(1, 1000);
        p.mark = 0x0f0f;
        // No readable IP header for inheritdsfield: the second action drops it.
        assert_eq!(e.exec(&mut p, Instant(7), &mut TcfResult::unbound(0)), TC_ACT_SHOT);
        assert_eq!(p.mark, 0x0f5f);
        assert_eq!(p.priority, 0x1_0003);
        let s = |i: usize| lock(&e.acts[i]).stats;
        assert_eq!(s(0), ActStats { bytes: 1000, packets: 1, drops: 0, overlimits: 0 });
        assert_eq!(s(1), ActStats { bytes: 1000, packets: 1, drops: 1, overlimits: 0 });
        assert_eq!(lock(&e.acts[1]).lastuse, 7);
        // A request that sets nothing: EINVAL, in a filter as in `tc actions`.
        let v = argv("skbedit index 3");
        let mut spec = ExtsSpec::default();
        parse_action(&mut Args::new(&v), &mut spec).unwrap();
        let mut t = ActionTable::default();
        let mut ctx = ActCtx {
            table: &mut t,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant(0),
            at_ingress: false,
            est: None,
        };
        assert_eq!(ctx.init(&spec).unwrap_err(), FilterError::Errno("Invalid argument"));
        assert_eq!(ctx.add(&spec, false).unwrap_err(), FilterError::Errno("Invalid argument"));
        // queue_mapping at an ingress hook, before the index is looked at.
        let v = argv("skbedit queue_mapping 1 index 3");
        let mut spec = ExtsSpec::default();
        parse_action(&mut Args::new(&v), &mut spec).unwrap();
        ctx.at_ingress = true;
        assert!(matches!(ctx.init(&spec), Err(FilterError::Ext(m)) if m.contains("hardware only, use skip_sw")));
        ctx.at_ingress = false;
        assert!(ctx.init(&spec).is_ok());
    }
}
