//! `tc qdisc show` and `tc class show` printers: tc/tc_qdisc.c `print_qdisc`,
//! tc/tc_class.c `print_class`, tc/tc_util.c `print_tcstats2_attr` and
//! `print_tc_classid`, over what the kernel's `tc_fill_qdisc`/`tc_fill_tclass` dump.

use crate::qdisc::{tc_h_maj, tc_h_min, Node, TC_H_ROOT, TC_H_UNSPEC};
use crate::stats::Stats;
use crate::tc::Out;
use crate::tree::Device;

/// `print_tc_classid`.
pub fn classid(h: u32) -> String {
    if h == TC_H_ROOT {
        "root".into()
    } else if h == TC_H_UNSPEC {
        "none".into()
    } else if tc_h_maj(h) == 0 {
        format!(":{:x}", tc_h_min(h))
    } else if tc_h_min(h) == 0 {
        format!("{:x}:", tc_h_maj(h) >> 16)
    } else {
        format!("{:x}:{:x}", tc_h_maj(h) >> 16, tc_h_min(h))
    }
}

/// The two common statistics lines (`print_tcstats2_attr` with prefix " "), with
/// the rate estimator's reading when the object has one.
pub fn stats(out: &mut Out, s: &Stats, rate: Option<(u64, u64)>) {
    stats_attrs(out, s, true, rate);
}

/// `print_tcstats2_attr` with or without TCA_STATS_BASIC (without it, no prefix and
/// no `Sent` part: the line starts at ` (dropped`) and TCA_STATS_RATE_EST (`rate`:
/// its line takes the place of the newline before `backlog`).
pub fn stats_attrs(out: &mut Out, s: &Stats, basic: bool, rate: Option<(u64, u64)>) {
    if basic {
        out.fp(format_args!(" "));
        out.uint("bytes", format_args!("Sent {} bytes", s.bytes), s.bytes);
        out.uint("packets", format_args!(" {} pkt", s.packets), s.packets);
    }
    out.uint("drops", format_args!(" (dropped {}", s.drops), s.drops as u64);
    out.uint("overlimits", format_args!(", overlimits {}", s.overlimits), s.overlimits as u64);
    out.uint("requeues", format_args!(" requeues {}) ", s.requeues), s.requeues as u64);
    match rate {
        Some(r) => crate::estimator::print(out, " ", r),
        None => out.nl(),
    }
    out.fp(format_args!(" "));
    out.size("backlog", "backlog ", s.backlog, "");
    out.uint("qlen", format_args!(" {}p", s.qlen), s.qlen as u64);
    out.fp(format_args!(" requeues {}", s.requeues));
}

/// Which qdiscs a `qdisc show` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QdiscFilter {
    /// `dev X` given: the device name is not printed.
    pub dev_given: bool,
    /// `root`: only the root qdisc.
    pub root: bool,
    /// `parent P`.
    pub parent: Option<u32>,
    /// `handle H`.
    pub handle: Option<u32>,
    /// `invisible`: include TCQ_F_INVISIBLE qdiscs.
    pub invisible: bool,
}

/// `print_qdisc` for one node.
pub fn qdisc(out: &mut Out, dev: &Device, n: &Node, f: &QdiscFilter, show_stats: bool) {
    out.open_object(None);
    out.string("kind", format_args!("qdisc {} ", n.kind()), n.kind());
    let h = format!("{:x}:", n.handle >> 16);
    if out.raw() {
        out.string("handle", format_args!("{h}[{:08x}] ", n.handle), &h);
    } else {
        out.string("handle", format_args!("{h} "), &h);
    }
    if !f.dev_given {
        out.string("dev", format_args!("dev {} ", dev.info.name), &dev.info.name);
    }
    if n.parent == TC_H_ROOT {
        out.boolean("root", format_args!("root "), true);
    } else if n.parent != 0 {
        let p = classid(n.parent);
        out.string("parent", format_args!("parent {p} "), &p);
    }
    if n.refcnt != 1 {
        out.uint("refcnt", format_args!("refcnt {} ", n.refcnt), n.refcnt as u64);
    }
    // tc_fill_qdisc's TCA_INGRESS_BLOCK / TCA_EGRESS_BLOCK (sent when not 0).
    let [ib, eb] = n.q.as_classful().map_or([0, 0], |c| c.block_indexes());
    if ib != 0 {
        out.uint("ingress_block", format_args!("ingress_block {ib} "), ib as u64);
    }
    if eb != 0 {
        out.uint("egress_block", format_args!("egress_block {eb} "), eb as u64);
    }
    out.open_object(Some("options"));
    if !n.flags().no_options {
        n.q.dump(out, &dev.info);
    }
    out.close_object();
    out.nl();
    if let Some(t) = n.stab.as_ref().filter(|_| out.details()) {
        t.dump(out);
        out.nl();
    }
    if show_stats {
        let rate = n.est.as_ref().and_then(|e| e.own.as_ref()).map(|e| e.read());
        stats(out, n.stats(), rate);
        out.nl();
        let before = out.as_str().len();
        n.q.dump_xstats(out);
        if out.as_str().len() != before && !out.is_json() {
            out.nl();
        }
    }
    out.close_object();
}

/// `print_class` for class `minor` of the classful qdisc `n`.
pub fn class(out: &mut Out, dev: &Device, n: &Node, minor: u32, dev_given: bool, show_stats: bool) {
    let Some(c) = n.q.as_classful() else { return };
    let id = classid(tc_h_maj(n.handle) | minor);
    out.open_object(None);
    out.string("class", format_args!("class {} ", n.kind()), n.kind());
    out.string("handle", format_args!("{id} "), &id);
    if !dev_given {
        out.string("dev", format_args!("dev {} ", dev.info.name), &dev.info.name);
    }
    let parent = c.class_parent(minor).unwrap_or(if c.class_parent_is_root() { TC_H_ROOT } else { n.handle });
    if parent == TC_H_ROOT {
        out.boolean("root", format_args!("root "), true);
    } else {
        let p = classid(parent);
        out.string("parent", format_args!("parent {p} "), &p);
    }
    if let Some(leaf) = c.leaf(minor).filter(|_| c.dumps_leaf(minor)) {
        if leaf.handle != 0 {
            // print_0xhex: "0x8001" in JSON.
            let maj = leaf.handle >> 16;
            out.string("leaf", format_args!("leaf {maj:x}: "), &format!("{maj:#x}"));
        }
    }
    c.dump_class(minor, out);
    out.nl();
    if show_stats {
        out.open_object(Some("stats"));
        if let Some(s) = c.class_stats(minor) {
            let rate = n.est.as_ref().and_then(|e| e.classes.get(&minor)).map(|e| e.read());
            stats_attrs(out, &s, c.class_has_basic_stats(), rate);
        }
        out.nl();
        // print_class: the xstats land inside the "stats" JSON object.
        let before = out.as_str().len();
        c.dump_class_xstats(minor, out);
        if out.as_str().len() != before && !out.is_json() {
            out.nl();
        }
        out.close_object();
    }
    out.close_object();
}
