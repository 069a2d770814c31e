//! basic — filters that match an ematch tree: net/sched/cls_basic.c and
//! tc/f_basic.c (the tree itself: [`super::ematch`]).
//!
//! A proto keeps its filters in a list with the newest first (`list_add_rcu` at
//! the head), and classification and dumps walk it in that order: the first filter
//! whose tree matches and whose actions do not answer "continue" gives the verdict.
//! A filter without a tree matches everything. Handles are the lowest free from 1
//! unless given. `change` replaces the whole filter in place (a new tree, classid and
//! actions; what the request leaves out is gone). Each filter counts the packets it
//! was tried on and those its tree matched (`tc_basic_pcnt`), which tc 6.15 does not
//! print.

use std::sync::atomic::{AtomicU64, Ordering};

use super::action::{ActCtx, Exts, ExtsSpec};
use super::ematch::Tree;
use super::{Binds, FilterError, Headers, TcfResult};
use crate::packet::Packet;
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

/// One filter (`struct basic_filter`).
#[derive(Debug)]
pub struct BasicFilter {
    pub handle: u32,
    pub classid: u32,
    /// `res.class`: the class the filter is bound to ([`Binds::bind`]).
    pub class: Option<u32>,
    tree: Tree,
    pub exts: Exts,
    /// `pf->rcnt`, `pf->rhit`: packets tried, packets the tree matched.
    pub tried: AtomicU64,
    pub hits: AtomicU64,
}

/// A proto's filters, newest first (`struct basic_head`).
#[derive(Debug, Default)]
pub struct Basic {
    pub filters: Vec<BasicFilter>,
}

/// What tc's `basic_parse_opt` sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BasicOpts {
    /// TCA_OPTIONS present (tc sends none for a bare `basic`).
    pub present: bool,
    pub classid: Option<u32>,
    pub tree: Tree,
    pub exts: ExtsSpec,
}

const USAGE: &str = "Usage: ... basic [ match EMATCH_TREE ]
                 [ action ACTION_SPEC ] [ classid CLASSID ]

Where:\tSELECTOR := SAMPLE SAMPLE ...
\tFILTERID := X:Y:Z
\tACTION_SPEC := ... look at individual actions

NOTE: CLASSID is parsed as hexadecimal input.
";

/// tc side: `basic_parse_opt`.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, BasicOpts), TcError> {
    let h = super::strtol_handle(handle)?;
    let mut o = BasicOpts::default();
    if a.is_empty() {
        return Ok((h, o));
    }
    o.present = true;
    while let Some(w) = a.next() {
        if super::parse_tree_or_exts(w, a, &mut o.tree, &mut o.exts)? {
            continue;
        }
        if matches(w, "classid") || w == "flowid" {
            let v = a.value()?;
            o.classid = Some(crate::tc::get_tc_classid(v).ok_or_else(|| TcError::tc("Illegal \"classid\"\n"))?);
        } else if w == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    Ok((h, o))
}

impl Basic {
    /// `basic_change`: a new filter (at the head) or the replacement of `fh`.
    fn change_opts(
        &mut self,
        handle: u32,
        o: &BasicOpts,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        if !o.present {
            return Err(FilterError::Errno("Invalid argument"));
        }
        let handle = match (fh, handle) {
            (Some(h), _) => h,
            (None, 0) => {
                // idr_alloc_u32 from 1 to INT_MAX: the lowest free.
                let mut used: Vec<u32> = self.filters.iter().map(|f| f.handle).collect();
                used.sort_unstable();
                let mut h = 1;
                for u in used {
                    if u == h {
                        h += 1;
                    } else if u > h {
                        break;
                    }
                }
                if h > i32::MAX as u32 {
                    return Err(FilterError::Errno("No space left on device"));
                }
                h
            }
            (None, h) => h,
        };
        // basic_set_parms: actions, then the tree (already checked), then the class.
        let exts = acts.init(&o.exts)?;
        let classid = o.classid.unwrap_or(0);
        let class = if classid != 0 { binds.bind(classid) } else { None };
        let f = BasicFilter {
            handle,
            classid,
            class,
            tree: o.tree.clone(),
            exts,
            tried: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        };
        match self.filters.iter().position(|x| Some(x.handle) == fh) {
            Some(i) => {
                let old = std::mem::replace(&mut self.filters[i], f);
                binds.unbind(old.classid, old.class);
            }
            None => self.filters.insert(0, f),
        }
        Ok(())
    }

    /// `basic_classify`.
    fn classify_pkt(&self, pkt: &mut Packet, hdr: &Headers, now: Instant) -> Option<(i32, TcfResult)> {
        for f in &self.filters {
            f.tried.fetch_add(1, Ordering::Relaxed);
            if !f.tree.matches(pkt, hdr) {
                continue;
            }
            f.hits.fetch_add(1, Ordering::Relaxed);
            let mut res = TcfResult { classid: f.classid, class: f.class };
            let r = f.exts.exec(pkt, now, &mut res);
            if r >= 0 {
                return Some((r, res));
            }
        }
        None
    }

    /// `basic_walk` + `basic_dump` + tc's `basic_print_opt`.
    fn print(&self, ctx: &super::DumpCtx, out: &mut Out) {
        for f in &self.filters {
            ctx.entry(out, f.handle, Some(&f.exts), |out| {
                // print_hex: the JSON value is the bare hex digits.
                let h = format!("{:x}", f.handle);
                out.string("handle", format_args!("handle 0x{h} "), &h);
                if f.classid != 0 {
                    let c = crate::tc::show_classid(f.classid);
                    out.string("flowid", format_args!("flowid {c} "), &c);
                }
                f.tree.print(out);
                f.exts.print(out, ctx.now);
            });
        }
    }
}

impl super::Classifier for Basic {
    fn kind(&self) -> &'static str {
        "basic"
    }
    fn classify(&self, pkt: &mut Packet, hdr: &Headers, _: u32, now: Instant) -> Option<(i32, TcfResult)> {
        self.classify_pkt(pkt, hdr, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        self.filters.iter().find(|f| f.handle == handle).map(|f| f.handle)
    }
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn std::any::Any>,
        _tmplt: Option<&dyn std::any::Any>,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        // No TCA_OPTIONS (a request without options): EINVAL, as for `basic` alone.
        super::with_opts(opts, |o: &BasicOpts| self.change_opts(handle, o, fh, acts, binds))
    }
    fn delete(&mut self, handle: u32, binds: &mut Binds) -> Result<bool, FilterError> {
        if let Some(i) = self.filters.iter().position(|f| f.handle == handle) {
            let f = self.filters.remove(i);
            binds.unbind(f.classid, f.class);
        }
        Ok(self.filters.is_empty())
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        self.print(ctx, out)
    }
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult)) {
        self.filters.iter().for_each(|x| f(TcfResult { classid: x.classid, class: x.class }));
    }
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>)) {
        self.filters.iter_mut().for_each(|x| f(x.classid, &mut x.class));
    }
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.filters.iter().for_each(|x| f(&x.exts));
    }
}
