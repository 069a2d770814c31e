//! cgroup — the control-group classifier: net/sched/cls_cgroup.c and tc/f_cgroup.c.
//!
//! A proto holds at most one filter (`struct cls_cgroup_head`): a handle, an
//! optional ematch tree ([`super::ematch`], as basic's) and actions. It names no
//! class of its own: a packet's class is the net_cls classid of the cgroup that
//! sent it (`task_get_classid`), so `echo 0x10010 > net_cls.classid` puts a
//! cgroup's traffic in class 1:10 of whichever qdisc classifies it.
//!
//! # Where the classid comes from
//!
//! The kernel reads `current`'s classid in process context and, in softirq context
//! (TCP sending from an ACK, a timer, or any packet being received or forwarded),
//! the classid stored in the packet's full socket (`sock_cgroup_classid`), 0 when
//! there is none. A socket takes its task's classid when it is created and again when
//! the cgroup's `net_cls.classid` is written, so both read the same value for a
//! socket whose task stays in its cgroup — the model here: the classid of the
//! packet's [`crate::packet::Socket`] (`net_cls_classid`), 0 for a packet without
//! one (forwarded packets, pings and pktgen here carry none). A task moved to
//! another cgroup after creating its socket is not modelled.
//!
//! # Classification (`cls_cgroup_classify`)
//!
//! Classid 0 never matches; then the tree must match (an empty tree matches
//! everything); then the result is the classid and the actions run.
//!
//! # Control plane (`cls_cgroup_change`, `_get`, `_delete`)
//!
//! A filter needs a handle (none: EINVAL). Once there is one, a request with any
//! other handle is ENOENT and a request with its handle replaces it whole, even
//! `tc filter add`: `get` never finds a filter, so the "already exists" check
//! never fires, and `tc filter get`/`delete … handle H` answer "Specified filter
//! handle not found". Deleting the proto (`tc filter del … pref P` without a
//! handle) removes it.

use super::action::{ActCtx, Exts, ExtsSpec};
use super::ematch::Tree;
use super::{Binds, FilterError, Headers, TcfResult};
use crate::packet::Packet;
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// The one filter of a proto (`struct cls_cgroup_head`).
#[derive(Debug)]
struct Head {
    handle: u32,
    tree: Tree,
    exts: Exts,
}

/// A proto's filter, if created.
#[derive(Debug, Default)]
pub struct Cgroup {
    head: Option<Head>,
}

/// What tc's `cgroup_parse_opt` sends (TCA_OPTIONS always, if empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupOpts {
    pub tree: Tree,
    pub exts: ExtsSpec,
}

const USAGE: &str = "Usage: ... cgroup [ match EMATCH_TREE ]
                  [ action ACTION_SPEC ]
";

/// tc side: `cgroup_parse_opt`.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, CgroupOpts), TcError> {
    let h = super::strtol_handle(handle)?;
    let mut o = CgroupOpts::default();
    while let Some(w) = a.next() {
        if super::parse_tree_or_exts(w, a, &mut o.tree, &mut o.exts)? {
            continue;
        }
        if w == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    Ok((h, o))
}

impl Cgroup {
    /// `cls_cgroup_change`.
    fn change_opts(&mut self, handle: u32, o: &CgroupOpts, acts: &mut ActCtx) -> Result<(), FilterError> {
        match &self.head {
            None if handle == 0 => return Err(FilterError::Errno("Invalid argument")),
            Some(h) if h.handle != handle => return Err(FilterError::Errno("No such file or directory")),
            _ => {}
        }
        // tcf_exts_validate, then the tree (checked by the parser).
        let exts = acts.init(&o.exts)?;
        self.head = Some(Head { handle, tree: o.tree.clone(), exts });
        Ok(())
    }

    /// `cls_cgroup_classify` with `task_get_classid` (see the module documentation).
    fn classify_pkt(&self, pkt: &mut Packet, hdr: &Headers, now: Instant) -> Option<(i32, TcfResult)> {
        let head = self.head.as_ref()?;
        let classid = pkt.sk.as_ref().map_or(0, |s| s.net_cls_classid);
        if classid == 0 || !head.tree.matches(pkt, hdr) {
            return None;
        }
        let mut res = TcfResult::unbound(classid);
        let r = head.exts.exec(pkt, now, &mut res);
        (r >= 0).then_some((r, res))
    }
}

impl super::Classifier for Cgroup {
    fn kind(&self) -> &'static str {
        "cgroup"
    }
    fn classify(&self, pkt: &mut Packet, hdr: &Headers, _: u32, now: Instant) -> Option<(i32, TcfResult)> {
        self.classify_pkt(pkt, hdr, now)
    }
    /// `cls_cgroup_get`: never a filter.
    fn get(&self, _: u32) -> Option<u32> {
        None
    }
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn std::any::Any>,
        _tmplt: Option<&dyn std::any::Any>,
        _fh: Option<u32>,
        acts: &mut ActCtx,
        _binds: &mut Binds,
    ) -> Result<(), FilterError> {
        // No TCA_OPTIONS (a request without a kind on an existing proto): EINVAL.
        match opts {
            None => Err(FilterError::Errno("Invalid argument")),
            Some(_) => super::with_opts(opts, |o: &CgroupOpts| self.change_opts(handle, o, acts)),
        }
    }
    /// `cls_cgroup_delete` (unreachable through tc: `get` finds nothing to delete).
    fn delete(&mut self, _: u32, _: &mut Binds) -> Result<bool, FilterError> {
        Err(FilterError::Errno("Operation not supported"))
    }
    /// `cls_cgroup_walk` + `cls_cgroup_dump` + tc's `cgroup_print_opt`.
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        let Some(h) = &self.head else { return };
        ctx.entry(out, h.handle, Some(&h.exts), |out| {
            // print_0xhex: "%#llx" in text and JSON alike (the handle is never 0).
            let x = format!("{:#x}", h.handle);
            out.string("handle", format_args!("handle {x} "), &x);
            h.tree.print(out);
            h.exts.print(out, ctx.now);
        });
    }
    /// The filter names no class: its classids come from the packets.
    /// Results are made per packet: no filter keeps a class.
    fn for_each_class(&self, _: &mut dyn FnMut(TcfResult)) {}
    fn for_each_class_mut(&mut self, _: &mut dyn FnMut(u32, &mut Option<u32>)) {}
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.head.iter().for_each(|h| f(&h.exts));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::classify::Verdict;
    use crate::packet::{FlowKey, Packet, Socket};
    use crate::tc::Tc;
    use crate::testing::argv;
    use crate::tree::DevSpec;

    fn tc() -> Tc {
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        for l in [
            "qdisc add dev eth0 root handle 1: htb default 30",
            "class add dev eth0 parent 1: classid 1:10 htb rate 10mbit",
            "class add dev eth0 parent 1: classid 1:20 htb rate 10mbit",
            "class add dev eth0 parent 1: classid 1:30 htb rate 10mbit",
        ] {
            let o = tc.run(&argv(l));
            assert_eq!(o.code, 0, "{l}: {}", o.stderr);
        }
        tc
    }

    fn run(tc: &mut Tc, l: &str) -> (i32, String, String) {
        let o = tc.run(&argv(l));
        (o.code, o.stdout, o.stderr)
    }

    fn udp(id: u64, classid: Option<u32>) -> Packet {
        let ip = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        let flow = FlowKey { src: ip([10, 0, 0, 1]), dst: ip([10, 0, 0, 2]), sport: 5000, dport: 5201, proto: 17 };
        let p = Packet::new(id, 1000).with_flow(flow);
        match classid {
            Some(c) => p.with_socket(Arc::new(Socket { id: 1, net_cls_classid: c, ..Default::default() })),
            None => p,
        }
    }

    /// The class htb's root block gives the packet, via `Block::classify`.
    fn class_of(tc: &mut Tc, mut p: Packet) -> Option<Verdict> {
        let b = tc.devices[0].root.q.as_classful().unwrap().block(0).unwrap();
        b.classify(&mut p, tc.now)
    }

    #[test]
    fn the_sockets_classid_is_the_class() {
        use crate::classify::TcfResult;
        let mut t = tc();
        let (c, _, e) = run(&mut t, "filter add dev eth0 parent 1: protocol ip prio 1 handle 1 cgroup");
        assert_eq!(c, 0, "{e}");
        assert_eq!(class_of(&mut t, udp(1, Some(0x10010))), Some(Verdict::Class(TcfResult::unbound(0x10010))));
        assert_eq!(class_of(&mut t, udp(2, Some(0x10020))), Some(Verdict::Class(TcfResult::unbound(0x10020))));
        // Classid 0 and no socket: no match.
        assert_eq!(class_of(&mut t, udp(3, Some(0))), None);
        assert_eq!(class_of(&mut t, udp(4, None)), None);
    }

    #[test]
    fn the_tree_and_the_actions_apply_after_the_classid() {
        use crate::classify::TcfResult;
        let mut t = tc();
        // UDP (IP protocol 17 at byte 9 of the network header) is dropped, the rest classified.
        let l = "filter add dev eth0 parent 1: protocol ip prio 1 handle 7 cgroup \
                 match cmp(u8 at 9 layer network eq 17) action drop";
        assert_eq!(run(&mut t, l).0, 0);
        assert_eq!(class_of(&mut t, udp(1, Some(0x10010))), Some(Verdict::Shot));
        assert_eq!(class_of(&mut t, udp(2, None)), None);
        let l = "filter replace dev eth0 parent 1: protocol ip prio 1 handle 7 cgroup \
                 match cmp(u8 at 9 layer network eq 6) action pass";
        assert_eq!(run(&mut t, l).0, 0);
        assert_eq!(class_of(&mut t, udp(3, Some(0x10010))), None);
        let l = "filter replace dev eth0 parent 1: protocol ip prio 1 handle 7 cgroup \
                 match not cmp(u8 at 9 layer network eq 6) action pass";
        assert_eq!(run(&mut t, l).0, 0);
        assert_eq!(class_of(&mut t, udp(4, Some(0x10020))), Some(Verdict::Class(TcfResult::unbound(0x10020))));
    }

    #[test]
    fn one_filter_per_proto_as_the_kernel_keeps_it() {
        let mut t = tc();
        let add = "filter add dev eth0 parent 1: protocol ip prio 1";
        // No handle: EINVAL.
        let (c, _, e) = run(&mut t, &format!("{add} cgroup"));
        assert_eq!(
            (c, e.as_str()),
            (2, "RTNETLINK answers: Invalid argument\nWe have an error talking to the kernel\n")
        );
        assert_eq!(run(&mut t, &format!("{add} handle 1 cgroup action pass")).0, 0);
        // add again with the same handle replaces (get never finds it).
        assert_eq!(run(&mut t, &format!("{add} handle 1 cgroup action drop")).0, 0);
        let (_, out, _) = run(&mut t, "filter show dev eth0");
        assert!(out.contains("gact action drop") && !out.contains("action pass"), "{out}");
        // Another handle: ENOENT.
        let (c, _, e) = run(&mut t, &format!("{add} handle 2 cgroup"));
        assert_eq!(
            (c, e.as_str()),
            (2, "RTNETLINK answers: No such file or directory\nWe have an error talking to the kernel\n")
        );
        let (c, _, e) = run(&mut t, "filter del dev eth0 parent 1: protocol ip prio 1 handle 1 cgroup");
        assert_eq!(
            (c, e.as_str()),
            (2, "Error: Specified filter handle not found.\nWe have an error talking to the kernel\n")
        );
        assert_eq!(run(&mut t, "filter del dev eth0 parent 1: protocol ip prio 1 cgroup").0, 0);
        assert_eq!(run(&mut t, "filter show dev eth0").1, "");
    }

    #[test]
    fn tc_errors() {
        let mut t = tc();
        let (c, _, e) = run(&mut t, "filter add dev eth0 parent 1: prio 1 handle 1 cgroup classid 1:10");
        assert_eq!(
            (c, e.as_str()),
            (1, "What is \"classid\"?\nUsage: ... cgroup [ match EMATCH_TREE ]\n                  [ action ACTION_SPEC ]\n")
        );
        let (c, _, e) = run(&mut t, "filter add dev eth0 parent 1: prio 1 handle zz9 cgroup");
        assert_eq!(
            (c, e.as_str()),
            (2, "RTNETLINK answers: Invalid argument\nWe have an error talking to the kernel\n")
        );
    }
}
