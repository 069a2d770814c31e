//! The csum action: recompute the checksums of the IPv4 header and of the
//! transport protocols it names.
//!
//! tc side: tc/m_csum.c (`parse_csum`, `parse_csum_args`, `print_csum`). Kernel
//! side: net/sched/act_csum.c (`tcf_csum_init`, `tcf_csum_act`, `tcf_csum_ipv4`,
//! `tcf_csum_ipv6`, `tcf_csum_dump`).
//!
//! # Model
//!
//! The targets are `iph` (also `ip4h`, `ipv4h`), `icmp`, `igmp`, `tcp`, `udp`,
//! `udplite` and `sctp`; `and`, `or` and `+` are filler words. The engine's packets
//! carry no checksums, so nothing is recomputed: what the action does here is what a
//! user can observe of it in the kernel — its counters, and its drops. Like
//! `tcf_csum_act` it drops (counted as the action's drop) a packet when its control
//! is `drop`, and an IP packet too short for the header it must read: the IPv4 or
//! IPv6 header, and the TCP (20 bytes), UDP/UDP-Lite (8), ICMP/IGMP (8) header of
//! a flagged protocol. Non-IP packets (here: packets without a flow, like the
//! goldens' raw frames) pass untouched, as the kernel's protocol switch lets them.
//! An IPv4 header with a fragment offset is never one here (the engine's headers
//! have none), so the transport header is always looked at.

use crate::classify::action::{parse_action_control_dflt, print_action_control, Fail, TC_ACT_OK, TC_ACT_SHOT};
use crate::classify::Headers;
use crate::packet::Packet;
use crate::tc::{matches, units, Args, Out, TcError};

const USAGE: &str = "Usage: ... csum <UPDATE>
Where: UPDATE := <TARGET> [<UPDATE>]
       TARGET := { ip4h | icmp | igmp | tcp | udp | udplite | sctp | <SWEETS> }
       SWEETS := { and | or | '+' }
";

/// TCA_CSUM_UPDATE_FLAG_*, with the names `print_csum` gives them, in its order.
pub const IPV4HDR: u32 = 1;
pub const ICMP: u32 = 2;
pub const IGMP: u32 = 4;
pub const TCP: u32 = 8;
pub const UDP: u32 = 16;
pub const UDPLITE: u32 = 32;
pub const SCTP: u32 = 64;
const NAMES: [(u32, &str); 7] = [
    (IPV4HDR, "iph"),
    (ICMP, "icmp"),
    (IGMP, "igmp"),
    (TCP, "tcp"),
    (UDP, "udp"),
    (UDPLITE, "udplite"),
    (SCTP, "sctp"),
];

/// What tc sends: `struct tc_csum`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub params: Csum,
}

/// `struct tcf_csum_params` and the control verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csum {
    pub action: i32,
    pub update_flags: u32,
}

/// m_csum.c `parse_csum`, at the word `csum`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    let mut p = Spec::default();
    let mut ok = 0;
    let mut skip_to_index = false;
    while let Some(w) = a.peek() {
        if matches(w, "csum") {
            a.next();
            if a.peek().ok_or_else(TcError::incomplete)? == "index" {
                skip_to_index = true;
                break;
            }
            parse_args(a, &mut p.params);
            ok += 1;
        } else if matches(w, "help") {
            return Err(Fail::Exit(TcError::usage(USAGE)));
        } else {
            break;
        }
    }
    if !skip_to_index {
        if ok == 0 {
            return Err(Fail::Ret(USAGE.into()));
        }
        if p.params.update_flags == 0 {
            return Err(Fail::Ret("Illegal csum construct, empty <UPDATE> list\n".into()));
        }
        p.params.action = parse_action_control_dflt(a, TC_ACT_OK)?;
        skip_to_index = a.peek().is_some_and(|w| matches(w, "index"));
    }
    if skip_to_index {
        a.next();
        let v = a.value()?;
        match units::get_unsigned10(v) {
            Some(i) => p.index = i,
            None => return Err(Fail::Ret(format!("Illegal \"index\" ({v}) <csum>\n"))),
        }
    }
    Ok(p)
}

/// `parse_csum_args`: targets and filler words until another word.
fn parse_args(a: &mut Args, sel: &mut Csum) {
    while let Some(w) = a.peek() {
        let flag = if matches(w, "iph") || matches(w, "ip4h") || matches(w, "ipv4h") {
            IPV4HDR
        } else if matches(w, "icmp") {
            ICMP
        } else if matches(w, "igmp") {
            IGMP
        } else if matches(w, "tcp") {
            TCP
        } else if matches(w, "udp") {
            UDP
        } else if matches(w, "udplite") {
            UDPLITE
        } else if matches(w, "sctp") {
            SCTP
        } else if matches(w, "and") || matches(w, "or") || matches(w, "+") {
            0
        } else {
            break;
        };
        sel.update_flags |= flag;
        a.next();
    }
}

impl Csum {
    /// `tcf_csum_dump`: `struct tc_csum` (tc_gen, update flags), the times.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TC_GEN, TM};
        nla(TC_GEN + 4) + TM
    }
    /// `tcf_csum_act` on `pkt`: the verdict, or None for a drop.
    pub fn act(&self, pkt: &Packet) -> Option<i32> {
        if self.action == TC_ACT_SHOT {
            return None;
        }
        if pkt.flow().is_none() {
            return Some(self.action);
        }
        let h = Headers::of(pkt);
        let ip = if h.protocol == 0x0800 { 20 } else { 40 };
        let l4 = match h.ip_proto {
            Some(6) if self.update_flags & TCP != 0 => 20,
            Some(17) if self.update_flags & UDP != 0 => 8,
            Some(136) if self.update_flags & UDPLITE != 0 => 8,
            Some(1) if self.update_flags & ICMP != 0 => 8,
            Some(58) if self.update_flags & ICMP != 0 => 8,
            Some(2) if self.update_flags & IGMP != 0 => 8,
            Some(132) if self.update_flags & SCTP != 0 => 12,
            _ => 0,
        };
        if (pkt.len as usize) < 14 + ip + l4 {
            return None;
        }
        Some(self.action)
    }

    /// act_csum's `offload_act_setup`: any set of targets.
    pub fn offloadable(&self) -> bool {
        true
    }

    /// m_csum.c `print_csum` up to the index line.
    pub fn print(&self, out: &mut Out) {
        out.string("kind", format_args!("csum "), "csum");
        let names: Vec<&str> = NAMES.iter().filter(|(f, _)| self.update_flags & f != 0).map(|(_, n)| *n).collect();
        let list = if names.is_empty() { "?empty".to_string() } else { names.join(", ") };
        out.string("csum", format_args!("({list}) "), &list);
        print_action_control(out, "action ", self.action, "");
        out.nl();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::FlowKey;

    fn spec(s: &str) -> Result<Spec, String> {
        crate::classify::act::parse_str(parse, s)
    }

    #[test]
    fn parses_targets_and_refuses_like_tc() {
        let p = spec("csum iph and tcp or udp + udplite sctp icmp igmp drop index 3").unwrap();
        assert_eq!((p.index, p.params.update_flags, p.params.action), (3, 127, TC_ACT_SHOT));
        assert_eq!(spec("csum index 4").unwrap(), Spec { index: 4, params: Csum::default() });
        assert_eq!(spec("csum pipe"), Err("Illegal csum construct, empty <UPDATE> list\n".into()));
        assert_eq!(spec("csum tcp index x"), Err("Illegal \"index\" (x) <csum>\n".into()));
        assert_eq!(spec("csum"), Err("exit 255: Command line is not complete. Try option \"help\"\n".into()));
    }

    #[test]
    fn drops_what_is_too_short_for_its_headers() {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        let tcp = |len| Packet::new(1, len).with_flow(FlowKey { src: a, dst: a, sport: 1, dport: 2, proto: 6 });
        let c = spec("csum iph tcp").unwrap().params;
        assert_eq!(c.act(&tcp(54)), Some(TC_ACT_OK));
        assert_eq!(c.act(&tcp(53)), None);
        // Without the tcp target only the IP header must be there.
        assert_eq!(spec("csum iph").unwrap().params.act(&tcp(34)), Some(TC_ACT_OK));
        // A non-IP frame passes; a drop control drops.
        assert_eq!(c.act(&Packet::new(2, 20)), Some(TC_ACT_OK));
        assert_eq!(spec("csum udp drop").unwrap().params.act(&tcp(100)), None);
    }

    #[test]
    fn prints_as_tc() {
        let text = |s: &str| {
            let mut out = Out::text();
            spec(s).unwrap().params.print(&mut out);
            out.into_string()
        };
        assert_eq!(text("csum udp iph"), "csum (iph, udp) action pass\n");
        assert_eq!(text("csum index 1"), "csum (?empty) action pass\n");
    }
}
