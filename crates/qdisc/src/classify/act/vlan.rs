//! The vlan action: push, pop or modify an 802.1Q/802.1ad tag, or pop/push the
//! Ethernet header.
//!
//! tc side: tc/m_vlan.c (`parse_vlan`, `print_vlan`). Kernel side:
//! net/sched/act_vlan.c (`tcf_vlan_init`, `tcf_vlan_act`, `tcf_vlan_dump`) and
//! net/core/skbuff.c (`skb_vlan_push`, `skb_vlan_pop`, `skb_eth_pop`,
//! `skb_eth_push`).
//!
//! # Model
//!
//! The engine's [`Packet`] carries no VLAN tag and no separate Ethernet header:
//! every packet here is an untagged Ethernet frame, as the goldens' frames are.
//! What the kernel does with such a frame, the action does here:
//!
//! * `pop`: nothing to pop (`skb_vlan_pop` of an untagged frame succeeds
//!   unchanged); `modify`: a no-op without a tag.
//! * `push`: the kernel puts the tag into the skb's metadata (`skb->vlan_tci`, no
//!   bytes added, so no length the qdiscs count changes). The tag is not kept
//!   here: a `pop`, `modify` or second `push` later in the same pipeline sees an
//!   untagged packet (in the kernel it would find the tag; a second push moves the
//!   first into the frame, 4 bytes more), and no classifier here matches on tags.
//! * `pop_eth`: the kernel pulls the Ethernet header (`skb_eth_pop`), which changes
//!   `skb->len` for later actions' byte counters but not the length the qdisc
//!   already took for the packet (`qdisc_pkt_len`); here it changes nothing.
//! * `push_eth`: `skb_eth_push` refuses a frame that still has its Ethernet header
//!   (a network offset other than 0), which every packet here has: a drop (counted
//!   as the action's). After a `pop_eth` in the same pipeline the kernel would push
//!   the header; that sequence is not modelled.
//!
//! The kernel keeps the push priority 0 when none is given (`push`), and a
//! `modify` without one keeps the tag's.

use crate::classify::action::{parse_action_control_dflt, print_action_control, Fail, TC_ACT_PIPE};
use crate::classify::{proto_name, proto_parse, FilterError};
use crate::tc::{invarg, matches, units, Args, Out, TcError};

const USAGE: &str = "Usage: vlan pop [CONTROL]
       vlan push [ protocol VLANPROTO ] id VLANID [ priority VLANPRIO ] [CONTROL]
       vlan modify [ protocol VLANPROTO ] id VLANID [ priority VLANPRIO ] [CONTROL]
       vlan pop_eth [CONTROL]
       vlan push_eth dst_mac LLADDR src_mac LLADDR [CONTROL]
       VLANPROTO is one of 802.1Q or 802.1AD
            with default: 802.1Q
       CONTROL := reclassify | pipe | drop | continue | pass |
                  goto chain <CHAIN_INDEX>
";

/// TCA_VLAN_ACT_*, with tc's `action_names`.
pub const POP: u32 = 1;
pub const PUSH: u32 = 2;
pub const MODIFY: u32 = 3;
pub const POP_ETH: u32 = 4;
pub const PUSH_ETH: u32 = 5;
const NAMES: [&str; 6] = ["", "pop", "push", "modify", "pop_eth", "push_eth"];

/// ETH_P_8021Q, ETH_P_8021AD.
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
/// VLAN_VID_MASK: ids from 0 to 4094.
const VLAN_VID_MASK: u16 = 0x0fff;

/// What tc sends: `struct tc_vlan` and the optional attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub action: i32,
    pub v_action: u32,
    pub id: Option<u16>,
    pub protocol: Option<u16>,
    pub priority: Option<u8>,
    pub dst_mac: Option<[u8; 6]>,
    pub src_mac: Option<[u8; 6]>,
}

/// `struct tcf_vlan_params` and the control verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vlan {
    pub action: i32,
    pub v_action: u32,
    pub vid: u16,
    pub proto: u16,
    /// `tcfv_push_prio` when it exists: always for push (0 by default), for
    /// modify only when given (otherwise the tag keeps its own).
    pub prio: Option<u8>,
    pub dst: [u8; 6],
    pub src: [u8; 6],
}

fn is_push_or_modify(v: u32) -> bool {
    v == PUSH || v == MODIFY
}

/// m_vlan.c `parse_vlan`, at the word `vlan`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    a.next();
    a.peek().ok_or_else(TcError::incomplete)?;
    let mut p = Spec::default();
    let unexpected = |w: &str| Fail::Ret(format!("unexpected \"{w}\" - action already specified\n{USAGE}"));
    let exit = |m: &str, w: &str| Fail::Exit(invarg(m, w));
    while let Some(w) = a.peek() {
        let verb = [("pop", POP), ("push", PUSH), ("modify", MODIFY), ("pop_eth", POP_ETH), ("push_eth", PUSH_ETH)]
            .into_iter()
            .find(|(n, _)| matches(w, n));
        if let Some((_, v)) = verb {
            if p.v_action != 0 {
                return Err(unexpected(w));
            }
            p.v_action = v;
        } else if matches(w, "id") {
            if !is_push_or_modify(p.v_action) {
                return Err(exit("only valid for push/modify", w));
            }
            a.next();
            let v = a.peek().ok_or_else(TcError::incomplete)?;
            let id = units::get_u32(v).and_then(|n| u16::try_from(n).ok()).ok_or_else(|| exit("id is invalid", v))?;
            p.id = Some(id);
        } else if matches(w, "protocol") {
            if !is_push_or_modify(p.v_action) {
                return Err(exit("only valid for push/modify", w));
            }
            a.next();
            let v = a.peek().ok_or_else(TcError::incomplete)?;
            p.protocol = Some(proto_parse(v).ok_or_else(|| exit("protocol is invalid", v))?);
        } else if matches(w, "priority") {
            if !is_push_or_modify(p.v_action) {
                return Err(exit("only valid for push/modify", w));
            }
            a.next();
            let v = a.peek().ok_or_else(TcError::incomplete)?;
            let prio = units::get_u32(v).filter(|&n| n <= 7).ok_or_else(|| exit("prio is invalid", v))?;
            p.priority = Some(prio as u8);
        } else if matches(w, "dst_mac") || matches(w, "src_mac") {
            if p.v_action != PUSH_ETH {
                return Err(exit("only valid for push_eth", w));
            }
            let dst = matches(w, "dst_mac");
            a.next();
            let v = a.peek().ok_or_else(TcError::incomplete)?;
            let mac = lladdr(v).map_err(|said| {
                let e = invarg(if dst { "dst_mac is invalid" } else { "src_mac is invalid" }, v);
                Fail::Exit(TcError { msg: format!("{said}{}", e.msg), code: e.code })
            })?;
            if dst {
                p.dst_mac = Some(mac);
            } else {
                p.src_mac = Some(mac);
            }
        } else if matches(w, "help") {
            return Err(Fail::Exit(TcError::usage(USAGE)));
        } else {
            break;
        }
        a.next();
    }
    p.action = parse_action_control_dflt(a, TC_ACT_PIPE)?;
    if a.peek().is_some_and(|w| matches(w, "index")) {
        a.next();
        match units::get_unsigned10(a.value()?) {
            Some(i) => p.index = i,
            None => return Err(Fail::Ret("vlan: Illegal \"index\"\n".into())),
        }
    }
    let name = NAMES.get(p.v_action as usize).copied().unwrap_or("");
    if is_push_or_modify(p.v_action) && p.id.is_none() {
        return Err(Fail::Ret(format!("id needs to be set for {name}\n{USAGE}")));
    }
    if p.v_action == PUSH_ETH {
        if p.dst_mac.is_none() {
            return Err(Fail::Ret(format!("dst_mac needs to be set for {name}\n{USAGE}")));
        }
        if p.src_mac.is_none() {
            return Err(Fail::Ret(format!("src_mac needs to be set for {name}\n{USAGE}")));
        }
    }
    if p.protocol.is_some_and(|x| x != ETH_P_8021Q && x != ETH_P_8021AD) {
        return Err(Fail::Ret(format!("protocol not supported\n{USAGE}")));
    }
    Ok(p)
}

/// `ll_addr_a2n(buf, 6, arg) < 0`: the bytes it read, the rest zero (tc accepts a
/// shorter address here); on failure what it printed.
fn lladdr(arg: &str) -> Result<[u8; 6], String> {
    let mut mac = [0u8; 6];
    let bad = |p: &str| format!("\"{p}\" is invalid lladdr.\n");
    if arg.contains('.') {
        let a: std::net::Ipv4Addr = arg.parse().map_err(|_| bad(arg))?;
        mac[..4].copy_from_slice(&a.octets());
        return Ok(mac);
    }
    for (i, part) in arg.split(':').take(6).enumerate() {
        let h = part.trim_start();
        let h = h.strip_prefix("0x").or_else(|| h.strip_prefix("0X")).unwrap_or(h);
        let digits: String = h.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        let v = u32::from_str_radix(&digits, 16).ok().filter(|&v| v <= 255).ok_or_else(|| bad(part))?;
        mac[i] = v as u8;
    }
    Ok(mac)
}

impl Spec {
    /// `tcf_vlan_init`'s checks of the request, before the index decides between
    /// EEXIST and a replace (a bind skips them).
    pub(crate) fn params(&self) -> Result<Vlan, FilterError> {
        // 6.12's act_vlan answers with bare errnos (goldens/kernel-6.12/vlan-actions).
        let einval = FilterError::Errno("Invalid argument");
        let mut v = Vlan {
            action: self.action,
            v_action: self.v_action,
            vid: 0,
            proto: 0,
            prio: None,
            dst: [0; 6],
            src: [0; 6],
        };
        match self.v_action {
            POP | POP_ETH => {}
            PUSH | MODIFY => {
                let Some(id) = self.id else { return Err(einval) };
                if id >= VLAN_VID_MASK {
                    return Err(FilterError::Errno("Numerical result out of range"));
                }
                v.vid = id;
                v.proto = self.protocol.unwrap_or(ETH_P_8021Q);
                v.prio = self.priority.or((self.v_action == PUSH).then_some(0));
            }
            PUSH_ETH => {
                let (Some(d), Some(s)) = (self.dst_mac, self.src_mac) else { return Err(einval) };
                (v.dst, v.src) = (d, s);
            }
            _ => return Err(einval),
        }
        Ok(v)
    }
}

impl Vlan {
    /// `tcf_vlan_dump`: `struct tc_vlan` (tc_gen, v_action); for push and modify
    /// the id, protocol and the priority when it exists; for push_eth both
    /// addresses; the times.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TC_GEN, TM};
        let tag = if is_push_or_modify(self.v_action) { nla(2) + nla(2) + self.prio.map_or(0, |_| nla(1)) } else { 0 };
        let eth = if self.v_action == PUSH_ETH { 2 * nla(6) } else { 0 };
        nla(TC_GEN + 4) + tag + eth + TM
    }
    /// `tcf_vlan_act` on an untagged frame with its Ethernet header: the verdict,
    /// or None for the drop of `push_eth`.
    pub fn act(&self) -> Option<i32> {
        (self.v_action != PUSH_ETH).then_some(self.action)
    }

    /// m_vlan.c `print_vlan` up to the index line.
    pub fn print(&self, out: &mut Out) {
        out.string("kind", format_args!("vlan "), "vlan");
        let name = NAMES.get(self.v_action as usize).copied().unwrap_or("");
        out.string("vlan_action", format_args!(" {name}"), name);
        match self.v_action {
            PUSH | MODIFY => {
                out.uint("id", format_args!(" id {}", self.vid), self.vid as u64);
                let p = proto_name(self.proto);
                out.string("protocol", format_args!(" protocol {p}"), &p);
                if let Some(prio) = self.prio {
                    out.uint("priority", format_args!(" priority {prio}"), prio as u64);
                }
            }
            PUSH_ETH => {
                let hex = |m: &[u8; 6]| m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
                let (d, s) = (hex(&self.dst), hex(&self.src));
                out.string("dst_mac", format_args!(" dst_mac {d}"), &d);
                out.string("src_mac", format_args!(" src_mac {s}"), &s);
            }
            _ => {}
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
        let p = spec("vlan push protocol 802.1ad id 4094 priority 7 drop index 6").unwrap();
        assert_eq!(
            (p.v_action, p.id, p.protocol, p.priority, p.action, p.index),
            (PUSH, Some(4094), Some(0x88a8), Some(7), TC_ACT_SHOT, 6)
        );
        assert_eq!(spec("vlan push"), Err(format!("id needs to be set for push\n{USAGE}")));
        assert_eq!(spec("vlan pop pop"), Err(format!("unexpected \"pop\" - action already specified\n{USAGE}")));
        assert_eq!(
            spec("vlan pop id 1"),
            Err("exit 255: Error: argument \"id\" is wrong: only valid for push/modify\n".into())
        );
        assert_eq!(
            spec("vlan push id 1 priority 8"),
            Err("exit 255: Error: argument \"8\" is wrong: prio is invalid\n".into())
        );
        assert_eq!(spec("vlan push id 1 protocol ipv4"), Err(format!("protocol not supported\n{USAGE}")));
        assert_eq!(
            spec("vlan push_eth dst_mac 02:00:00:00:00:01"),
            Err(format!("src_mac needs to be set for push_eth\n{USAGE}"))
        );
        assert_eq!(spec("vlan pop index x"), Err("vlan: Illegal \"index\"\n".into()));
        assert_eq!(
            spec("vlan push id 4095").unwrap().params(),
            Err(FilterError::Errno("Numerical result out of range"))
        );
        assert_eq!(spec("vlan pipe").unwrap().params(), Err(FilterError::Errno("Invalid argument")));
    }

    #[test]
    fn acts_on_an_untagged_frame_and_prints_as_tc() {
        let text = |s: &str| {
            let mut out = Out::text();
            let v = spec(s).unwrap().params().unwrap();
            v.print(&mut out);
            (out.into_string(), v.act())
        };
        assert_eq!(
            text("vlan push id 5"),
            ("vlan  push id 5 protocol 802.1Q priority 0 pipe".into(), Some(TC_ACT_PIPE))
        );
        assert_eq!(text("vlan pop_eth pass"), ("vlan  pop_eth pass".into(), Some(0)));
        assert_eq!(text("vlan modify id 9"), ("vlan  modify id 9 protocol 802.1Q pipe".into(), Some(TC_ACT_PIPE)));
        assert_eq!(
            text("vlan push_eth dst_mac 02:00:00:00:00:01 src_mac aa:BB:cc:dd:ee:ff"),
            ("vlan  push_eth dst_mac 02:00:00:00:00:01 src_mac aa:bb:cc:dd:ee:ff pipe".into(), None)
        );
    }
}
