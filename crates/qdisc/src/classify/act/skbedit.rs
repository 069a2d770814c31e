//! The skbedit action: rewrite fields of the packet's metadata as it passes.
//!
//! tc side: tc/m_skbedit.c (`parse_skbedit`, `print_skbedit`). Kernel side:
//! net/sched/act_skbedit.c (`tcf_skbedit_init`, `tcf_skbedit_act`,
//! `tcf_skbedit_dump`).
//!
//! # Model
//!
//! One action sets any of: `priority` (`skb->priority`, a classid — what prio,
//! pfifo_fast, htb, hfsc, drr and ets read when they pick a band or class
//! downstream), `mark` with an optional mask (`skb->mark`: only the mask's bits change,
//! which fw filters and u32's `mark` match read), `inheritdsfield` (`skb->priority`
//! from the IP DS field, the TOS byte without its two ECN bits), `queue_mapping` and
//! `ptype`. Its control verdict defaults to `pipe`, so the next action (or the
//! classifier's class) follows.
//!
//! What the engine cannot show: `ptype` (`skb->pkt_type`) is read only by the IP
//! stack above the devices, and `queue_mapping` moves a packet to another tx queue
//! only from clsact's egress hook, before the queue is picked, and [`Packet`] has no
//! queue mapping to carry (the simulator refuses it there); both are accepted,
//! validated, counted and dumped as the kernel does, and leave the engine's
//! [`Packet`] as it was. iproute2 6.15 has no syntax for the kernel's
//! queue-mapping range (`TCA_SKBEDIT_QUEUE_MAPPING_MAX` with `SKBEDIT_F_TXQ_SKBHASH`),
//! so no request can carry it.
//!
//! `inheritdsfield` needs an IP header: a packet whose network header cannot be read
//! (no flow, or shorter than the Ethernet and IP headers) is dropped (`SHOT`, counted
//! as the action's drop), as `pskb_may_pull` failing does; a non-IP packet keeps its
//! priority.

use crate::classify::action::{parse_action_control_dflt, print_action_control, Fail, TC_ACT_PIPE};
use crate::classify::{FilterError, Headers};
use crate::packet::Packet;
use crate::tc::{get_tc_classid, matches, show_classid, units, Args, Out, TcError};

const USAGE: &str = "Usage: ... skbedit <[QM] [PM] [MM] [PT] [IF]>
QM = queue_mapping QUEUE_MAPPING
PM = priority PRIORITY
MM = mark MARK[/MASK]
PT = ptype PACKETYPE
IF = inheritdsfield
PACKETYPE = is one of:
  host, otherhost, broadcast, multicast
QUEUE_MAPPING = device transmit queue to use
PRIORITY = classID to assign to priority field
MARK = firewall mark to set
MASK = mask applied to firewall mark (0xffffffff by default)
note: inheritdsfield maps DS field to skb->priority
";

/// PACKET_HOST … PACKET_OTHERHOST (linux/if_packet.h), in the order tc tries them.
const PTYPES: &[(&str, u16)] = &[("host", 0), ("broadcast", 1), ("multicast", 2), ("otherhost", 3)];

/// ETH_P_IP, ETH_P_IPV6.
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;

/// What tc sends: `struct tc_skbedit`'s index, and the rest as the action keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub params: Skbedit,
}

/// `struct tcf_skbedit_params`: the control verdict and the optional attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skbedit {
    pub action: i32,
    pub queue_mapping: Option<u16>,
    pub priority: Option<u32>,
    pub mark: Option<u32>,
    /// As sent; the mark is applied under `mask.unwrap_or(!0)`.
    pub mask: Option<u32>,
    pub ptype: Option<u16>,
    /// TCA_SKBEDIT_FLAGS' SKBEDIT_F_INHERITDSFIELD.
    pub inheritdsfield: bool,
}

/// m_skbedit.c `parse_skbedit`, at the word `skbedit`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    a.next();
    a.peek().ok_or_else(TcError::incomplete)?;
    let ret = |m: &str| Err(Fail::Ret(format!("{m}\n")));
    let mut p = Spec::default();
    let mut ok = 0;
    while let Some(w) = a.peek() {
        if matches(w, "queue_mapping") {
            a.next();
            match units::get_unsigned10(a.value()?).filter(|&q| q <= 65535) {
                Some(q) => p.params.queue_mapping = Some(q as u16),
                None => return ret("Illegal queue_mapping"),
            }
        } else if matches(w, "priority") {
            a.next();
            match get_tc_classid(a.value()?) {
                Some(c) => p.params.priority = Some(c),
                None => return ret("Illegal priority"),
            }
        } else if matches(w, "mark") {
            a.next();
            let v = a.value()?;
            let (m, mask) = match v.split_once('/') {
                Some((m, k)) => (m, Some(k)),
                None => (v, None),
            };
            let Some(m) = units::get_u32(m) else { return ret("Illegal mark") };
            p.params.mark = Some(m);
            if let Some(k) = mask {
                let Some(k) = units::get_u32(k) else { return ret("Illegal mask") };
                p.params.mask = Some(k);
            }
        } else if matches(w, "ptype") {
            a.next();
            let v = a.value()?;
            let Some(&(_, t)) = PTYPES.iter().find(|(n, _)| matches(v, n)) else {
                return ret(&format!("Illegal ptype ({v})"));
            };
            p.params.ptype = Some(t);
        } else if matches(w, "inheritdsfield") {
            a.next();
            p.params.inheritdsfield = true;
        } else if matches(w, "help") {
            return Err(Fail::Exit(TcError::usage(USAGE)));
        } else {
            break;
        }
        ok += 1;
    }
    p.params.action = parse_action_control_dflt(a, TC_ACT_PIPE)?;
    if a.peek().is_some_and(|w| matches(w, "index")) {
        a.next();
        match units::get_unsigned10(a.value()?) {
            Some(i) => p.index = i,
            None => return ret("skbedit: Illegal \"index\""),
        }
        ok += 1;
    }
    if ok == 0 {
        return Err(Fail::Ret(USAGE.into()));
    }
    Ok(p)
}

impl Spec {
    /// `tcf_skbedit_init`'s attribute checks, before it looks up the index.
    /// `at_ingress`: the filter's parent is an ingress hook (TCA_ACT_FLAGS_AT_INGRESS);
    /// tc never sends `skip_sw` for an action, so the receive side refuses
    /// `queue_mapping` outright.
    pub(crate) fn check(&self, at_ingress: bool) -> Result<(), FilterError> {
        if self.params.queue_mapping.is_some() && at_ingress {
            return Err(FilterError::ext(
                "act_skbedit: \"queue_mapping\" option on receive side is hardware only, use skip_sw",
            ));
        }
        Ok(())
    }

    /// `tcf_skbedit_init` after the index lookup: a request that sets nothing is
    /// EINVAL (for a new action and for one it would replace).
    pub(crate) fn check_flags(&self) -> Result<(), FilterError> {
        if self.params.edits() == 0 {
            return Err(FilterError::Errno("Invalid argument"));
        }
        Ok(())
    }
}

impl Skbedit {
    /// The bytes of `tcf_skbedit_dump`'s attributes: parms, the optional ones set,
    /// TCA_SKBEDIT_FLAGS (a u64) for inheritdsfield, the times.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TC_GEN, TM};
        let opt = |set: bool, n: usize| if set { nla(n) } else { 0 };
        nla(TC_GEN)
            + opt(self.priority.is_some(), 4)
            + opt(self.queue_mapping.is_some(), 2)
            + opt(self.mark.is_some(), 4)
            + opt(self.ptype.is_some(), 2)
            + opt(self.mask.is_some(), 4)
            + opt(self.inheritdsfield, 8)
            + TM
    }
    /// How many of the attributes are set (the kernel's `flags` bits).
    fn edits(&self) -> usize {
        [
            self.queue_mapping.is_some(),
            self.priority.is_some(),
            self.mark.is_some(),
            self.mask.is_some(),
            self.ptype.is_some(),
            self.inheritdsfield,
        ]
        .iter()
        .filter(|&&b| b)
        .count()
    }

    /// `tcf_skbedit_act` on `pkt`: the verdict, or None for the drop of an
    /// unreadable IP header (the caller counts the packet, and the drop).
    pub fn act(&self, pkt: &mut Packet) -> Option<i32> {
        if let Some(p) = self.priority {
            pkt.priority = p;
        }
        if self.inheritdsfield {
            let need = match pkt.flow().is_some().then(|| Headers::of(pkt).protocol) {
                Some(ETH_P_IP) => Some(20),
                Some(ETH_P_IPV6) => Some(40),
                Some(_) => None,
                None => return None,
            };
            if let Some(n) = need {
                if (pkt.len as usize) < 14 + n {
                    return None;
                }
                pkt.priority = (pkt.tos >> 2) as u32;
            }
        }
        if let Some(m) = self.mark {
            let mask = self.mask.unwrap_or(!0);
            pkt.mark = (pkt.mark & !mask) | (m & mask);
        }
        Some(self.action)
    }

    /// `tcf_skbedit_offload_act_setup` of a standalone action: one edit alone, a
    /// mark without a mask, a packet type or a priority (a receive queue needs an
    /// ingress action, which `tc actions` never makes).
    pub fn offloadable(&self) -> bool {
        self.edits() == 1 && (self.mark.is_some() || self.ptype.is_some() || self.priority.is_some())
    }

    /// m_skbedit.c `print_skbedit` up to the index line.
    pub fn print(&self, out: &mut Out) {
        out.string("kind", format_args!("skbedit "), "skbedit");
        if let Some(q) = self.queue_mapping {
            out.uint("queue_mapping", format_args!("queue_mapping {q}"), q as u64);
        }
        if let Some(p) = self.priority {
            let c = show_classid(p);
            out.string("priority", format_args!(" priority {c}"), &c);
        }
        if let Some(m) = self.mark {
            out.uint("mark", format_args!(" mark {m}"), m as u64);
        }
        if let Some(k) = self.mask {
            // C's "%#x": no 0x before a zero.
            let text = if k == 0 { "/0".to_string() } else { format!("/{k:#x}") };
            out.string("mask", format_args!("{text}"), &format!("{k:x}"));
        }
        if let Some(t) = self.ptype {
            match PTYPES.iter().find(|(_, v)| *v == t) {
                Some((n, _)) => out.string("ptype", format_args!(" ptype {n}"), n),
                None => out.uint("ptype", format_args!(" ptype {t}"), t as u64),
            }
        }
        if self.inheritdsfield {
            out.null("inheritdsfield", format_args!(" inheritdsfield"));
        }
        print_action_control(out, " ", self.action, "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::action::TC_ACT_OK;
    use crate::packet::FlowKey;

    fn spec(s: &str) -> Result<Spec, Fail> {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(&mut Args::new(&v))
    }

    fn ipv4(tos: u8, len: u32) -> Packet {
        let mut src = [0u8; 16];
        src[10] = 0xff;
        src[11] = 0xff;
        let mut p = Packet::new(1, len).with_flow(FlowKey { src, dst: src, sport: 1, dport: 2, proto: 17 });
        p.tos = tos;
        p
    }

    #[test]
    fn parses_every_keyword_as_tc_sends_it() {
        let p = spec("skbedit queue_mapping 3 priority 1:10 mark 7/0xff00 ptype otherhost inheritdsfield pass index 9")
            .ok()
            .unwrap();
        assert_eq!(
            p,
            Spec {
                index: 9,
                params: Skbedit {
                    action: TC_ACT_OK,
                    queue_mapping: Some(3),
                    priority: Some(0x1_0010),
                    mark: Some(7),
                    mask: Some(0xff00),
                    ptype: Some(3),
                    inheritdsfield: true,
                },
            }
        );
        assert!(!p.params.offloadable());
        // The control defaults to pipe; tc's prefix matching ("prio", "mark 0x10").
        let p = spec("skbedit prio 99 mark 0x10").ok().unwrap().params;
        assert_eq!((p.action, p.priority, p.mark, p.mask), (TC_ACT_PIPE, Some(0x99), Some(16), None));
        assert!(!p.offloadable());
        assert!(spec("skbedit ptype host drop").ok().unwrap().params.offloadable());
        assert!(!spec("skbedit mark 1/0xff").ok().unwrap().params.offloadable());
    }

    #[test]
    fn refuses_like_tc() {
        let msg = |s: &str| match spec(s) {
            Err(Fail::Ret(m)) => m,
            Err(Fail::Exit(e)) => format!("exit {}: {}", e.code, e.msg),
            Ok(_) => "ok".into(),
        };
        assert_eq!(msg("skbedit queue_mapping 65536"), "Illegal queue_mapping\n");
        assert_eq!(msg("skbedit mark 666777888999"), "Illegal mark\n");
        assert_eq!(msg("skbedit mark 1/-1234"), "Illegal mask\n");
        assert_eq!(msg("skbedit ptype openair"), "Illegal ptype (openair)\n");
        assert_eq!(msg("skbedit priority foo"), "Illegal priority\n");
        assert_eq!(msg("skbedit mark 1 index 4294967297"), "skbedit: Illegal \"index\"\n");
        assert_eq!(msg("skbedit pipe"), USAGE);
        assert_eq!(msg("skbedit mark"), "exit 255: Command line is not complete. Try option \"help\"\n");
        assert!(msg("skbedit help").starts_with(&format!("exit 255: {USAGE}")));
    }

    #[test]
    fn kernel_checks_in_order() {
        let s = spec("skbedit queue_mapping 2").ok().unwrap();
        assert!(s.check(false).is_ok());
        assert_eq!(
            s.check(true),
            Err(FilterError::ext(
                "act_skbedit: \"queue_mapping\" option on receive side is hardware only, use skip_sw"
            ))
        );
        let bare = spec("skbedit index 4").ok().unwrap();
        assert_eq!(bare.check_flags(), Err(FilterError::Errno("Invalid argument")));
        assert!(s.check_flags().is_ok());
    }

    #[test]
    fn edits_priority_mark_under_mask_and_dsfield() {
        let e = spec("skbedit priority 1:2 mark 0xab/0x0f").ok().unwrap().params;
        let mut p = ipv4(0, 100);
        p.mark = 0x1234_5670;
        assert_eq!(e.act(&mut p), Some(TC_ACT_PIPE));
        assert_eq!((p.priority, p.mark), (0x1_0002, 0x1234_567b));
        // Without a mask the whole mark is replaced.
        let e = spec("skbedit mark 5").ok().unwrap().params;
        assert_eq!(e.act(&mut p), Some(TC_ACT_PIPE));
        assert_eq!(p.mark, 5);
        // inheritdsfield: DSCP 46 (EF) with ECN bits 01 → priority 0xb9 >> 2 = 46;
        // it comes after `priority`, so it wins.
        let e = spec("skbedit priority 7 inheritdsfield").ok().unwrap().params;
        let mut p = ipv4(0xb9, 100);
        assert_eq!(e.act(&mut p), Some(TC_ACT_PIPE));
        assert_eq!(p.priority, 46);
        // No readable IP header: the drop.
        let mut short = ipv4(0xb9, 33);
        assert_eq!(e.act(&mut short), None);
        assert_eq!(e.act(&mut Packet::new(2, 1000)), None);
        // queue_mapping and ptype leave the engine's packet untouched.
        let e = spec("skbedit queue_mapping 1 ptype host").ok().unwrap().params;
        let mut p = ipv4(4, 100);
        let before = p.clone();
        assert_eq!(e.act(&mut p), Some(TC_ACT_PIPE));
        assert_eq!(p, before);
    }

    #[test]
    fn prints_as_tc() {
        let text = |s: &str| {
            let mut out = Out::text();
            spec(s).ok().unwrap().params.print(&mut out);
            out.into_string()
        };
        assert_eq!(text("skbedit mark 1/0xaabb"), "skbedit  mark 1/0xaabb pipe");
        assert_eq!(text("skbedit mark 1/0"), "skbedit  mark 1/0 pipe");
        assert_eq!(text("skbedit queue_mapping 3 drop"), "skbedit queue_mapping 3 drop");
        assert_eq!(text("skbedit priority 16 jump 9"), "skbedit  priority :16 jump 9");
        assert_eq!(
            text("skbedit queue_mapping 2 priority 10 mark 7/0xaabbccdd ptype host inheritdsfield"),
            "skbedit queue_mapping 2 priority :10 mark 7/0xaabbccdd ptype host inheritdsfield pipe"
        );
        let mut out = Out::json(false);
        spec("skbedit mark 7/0xff ptype multicast inheritdsfield").ok().unwrap().params.print(&mut out);
        assert_eq!(
            out.into_string(),
            "\"kind\":\"skbedit\",\"mark\":7,\"mask\":\"ff\",\"ptype\":\"multicast\",\"inheritdsfield\":null,\
             \"control_action\":{\"type\":\"pipe\"}"
        );
    }
}
