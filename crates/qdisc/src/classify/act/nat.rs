//! The nat action: stateless IPv4 address translation of one prefix.
//!
//! tc side: tc/m_nat.c (`parse_nat`, `parse_nat_args`, `print_nat`). Kernel side:
//! net/sched/act_nat.c (`tcf_nat_init`, `tcf_nat_act`, `tcf_nat_dump`).
//!
//! # Model
//!
//! `nat egress OLD[/LEN] NEW` rewrites the IPv4 source address, `ingress` the
//! destination, when it lies in OLD/LEN: the prefix's bits come from NEW, the host
//! bits stay. The action reads the network header as IPv4 whatever the packet is,
//! as `tcf_nat_act` does (it checks only that 20 bytes are there), on the headers the
//! engine synthesizes ([`Headers`]); the rewritten address goes back to the packet's
//! flow, where flower, u32, flow and the qdiscs' flow hashes read it. A packet
//! without a flow carries no header bytes: the address reads as 0.0.0.0 and a
//! rewrite has nothing to change. A packet shorter than the Ethernet and IPv4
//! headers, or an action whose control is `drop`, is dropped (counted as the
//! action's drop).
//!
//! Not carried by the model, so without effect: the IP, TCP and UDP checksums the
//! kernel patches, and the inner header of an ICMP error it also rewrites.

use crate::classify::action::{parse_action_control_dflt, print_action_control, Fail, TC_ACT_OK, TC_ACT_SHOT};
use crate::classify::Headers;
use crate::packet::Packet;
use crate::tc::{matches, units, Args, Out, TcError};

const USAGE: &str = "Usage: ... nat NAT
NAT := DIRECTION OLD NEW
DIRECTION := { ingress | egress }
OLD := PREFIX
NEW := ADDRESS
";

/// TCA_NAT_FLAG_EGRESS.
const FLAG_EGRESS: u32 = 1;

/// What tc sends: `struct tc_nat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub params: Nat,
}

/// `struct tcf_nat_parms` and the control verdict; addresses and mask in host
/// order of their big-endian bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nat {
    pub action: i32,
    pub old_addr: u32,
    pub new_addr: u32,
    pub mask: u32,
    pub flags: u32,
}

/// m_nat.c `parse_nat`, at the word `nat`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    let mut p = Spec::default();
    let mut ok = 0;
    let mut skip_to_index = false;
    while let Some(w) = a.peek() {
        if matches(w, "nat") {
            a.next();
            let at = a.peek().ok_or_else(TcError::incomplete)?;
            if at == "index" {
                skip_to_index = true;
                break;
            }
            if parse_args(a, &mut p.params)?.is_none() {
                return Err(Fail::Ret(format!("Illegal nat construct ({at})\n{USAGE}")));
            }
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
        p.params.action = parse_action_control_dflt(a, TC_ACT_OK)?;
        skip_to_index = a.peek().is_some_and(|w| matches(w, "index"));
    }
    if skip_to_index {
        a.next();
        match units::get_unsigned10(a.value()?) {
            Some(i) => p.index = i,
            None => return Err(Fail::Ret("Nat: Illegal \"index\"\n".into())),
        }
    }
    Ok(p)
}

/// `parse_nat_args`: DIRECTION OLD NEW; None for tc's `bad_val`.
fn parse_args(a: &mut Args, sel: &mut Nat) -> Result<Option<()>, Fail> {
    let Some(d) = a.peek() else { return Ok(None) };
    if matches(d, "egress") {
        sel.flags |= FLAG_EGRESS;
    } else if !matches(d, "ingress") {
        return Ok(None);
    }
    a.next();
    let Some((old, bits)) = crate::classify::u32::get_prefix(a.peek().ok_or_else(TcError::incomplete)?, false) else {
        return Ok(None);
    };
    sel.old_addr = u32::from_be_bytes([old[0], old[1], old[2], old[3]]);
    sel.mask = (!0u64 << (32 - bits)) as u32;
    a.next();
    let Some((new, _)) = crate::classify::u32::get_prefix(a.peek().ok_or_else(TcError::incomplete)?, false) else {
        return Ok(None);
    };
    sel.new_addr = u32::from_be_bytes([new[0], new[1], new[2], new[3]]);
    a.next();
    Ok(Some(()))
}

impl Nat {
    /// `tcf_nat_dump`: `struct tc_nat` (tc_gen, old and new address, mask, flags),
    /// the times.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TC_GEN, TM};
        nla(TC_GEN + 16) + TM
    }
    /// `tcf_nat_act` on `pkt`: the verdict, or None for a drop (the caller counts
    /// it).
    pub fn act(&self, pkt: &mut Packet) -> Option<i32> {
        if self.action == TC_ACT_SHOT || (pkt.len as usize) < 14 + 20 {
            return None;
        }
        let h = Headers::of(pkt);
        let mut b = h.bytes();
        let at = if self.flags & FLAG_EGRESS != 0 { 14 + 12 } else { 14 + 16 };
        let addr = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if (self.old_addr ^ addr) & self.mask == 0 {
            let new = (self.new_addr & self.mask) | (addr & !self.mask);
            b[at..at + 4].copy_from_slice(&new.to_be_bytes());
            h.write_back(&b, pkt);
        }
        Some(self.action)
    }

    /// m_nat.c `print_nat` up to the index line.
    pub fn print(&self, out: &mut Out) {
        out.string("type", format_args!(" nat "), "nat");
        let dir = if self.flags & FLAG_EGRESS != 0 { "egress" } else { "ingress" };
        out.string("direction", format_args!("{dir}"), dir);
        // ffs of the mask: its length as a prefix.
        let len = if self.mask == 0 { 0 } else { 32 - self.mask.trailing_zeros() };
        let old = format!("{}/{len}", std::net::Ipv4Addr::from(self.old_addr));
        out.string("old_addr", format_args!(" {old}"), &old);
        let new = std::net::Ipv4Addr::from(self.new_addr).to_string();
        out.string("new_addr", format_args!(" {new}"), &new);
        print_action_control(out, " ", self.action, "");
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
    fn parses_and_refuses_like_tc() {
        let p = spec("nat egress 10.0.0.0/8 192.168.1.1 pipe index 4").unwrap();
        assert_eq!(
            p,
            Spec {
                index: 4,
                params: Nat { action: 3, old_addr: 0x0a00_0000, new_addr: 0xc0a8_0101, mask: 0xff00_0000, flags: 1 }
            }
        );
        assert_eq!(spec("nat ingress any 1.1.1.1").unwrap().params.mask, 0);
        assert_eq!(spec("nat index 7").unwrap(), Spec { index: 7, params: Nat::default() });
        assert_eq!(spec("nat sideways 1.1.1.1 2.2.2.2"), Err(format!("Illegal nat construct (sideways)\n{USAGE}")));
        assert_eq!(spec("nat egress 1.1.1.1 ::1"), Err(format!("Illegal nat construct (egress)\n{USAGE}")));
        assert_eq!(spec("nat egress 1.1.1.1 2.2.2.2 index z"), Err("Nat: Illegal \"index\"\n".into()));
        assert_eq!(
            spec("nat egress 1.1.1.1"),
            Err("exit 255: Command line is not complete. Try option \"help\"\n".into())
        );
    }

    #[test]
    fn rewrites_the_prefix_bits_of_the_address() {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        let (mut src, mut dst) = (a, a);
        src[12..].copy_from_slice(&[10, 1, 2, 3]);
        dst[12..].copy_from_slice(&[8, 8, 8, 8]);
        let mut p = Packet::new(1, 100).with_flow(FlowKey { src, dst, sport: 1, dport: 2, proto: 17 });
        let n = spec("nat egress 10.0.0.0/8 192.168.0.0").unwrap().params;
        assert_eq!(n.act(&mut p), Some(TC_ACT_OK));
        assert_eq!(p.flow().unwrap().src[12..], [192, 1, 2, 3]);
        // Ingress looks at the destination, which is not in the prefix.
        let n = spec("nat ingress 10.0.0.0/8 192.168.0.0").unwrap().params;
        let before = p.clone();
        assert_eq!(n.act(&mut p), Some(TC_ACT_OK));
        assert_eq!(p, before);
        // Too short for an IPv4 header, or a drop control: dropped.
        assert_eq!(n.act(&mut Packet::new(2, 33)), None);
        assert_eq!(spec("nat ingress any 1.1.1.1 drop").unwrap().params.act(&mut Packet::new(3, 100)), None);
    }

    #[test]
    fn prints_as_tc() {
        let mut out = Out::text();
        spec("nat ingress 10.1.0.0/16 1.2.3.4").unwrap().params.print(&mut out);
        assert_eq!(out.into_string(), " nat ingress 10.1.0.0/16 1.2.3.4 pass");
    }
}
