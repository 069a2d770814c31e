//! matchall — one filter that matches every packet: net/sched/cls_matchall.c and
//! tc/f_matchall.c. (This machine's kernel has no cls_matchall, so the printer
//! follows tc/f_matchall.c only.)

use std::sync::atomic::{AtomicU64, Ordering};

use super::action::{ActCtx, Exts, ExtsSpec};
use super::{Binds, FilterError, TcfResult};
use crate::packet::Packet;
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

/// The proto's single filter (`struct cls_mall_head`).
#[derive(Debug)]
pub struct Head {
    pub handle: u32,
    pub classid: u32,
    /// `res.class`: the class the filter is bound to ([`Binds::bind`]).
    pub class: Option<u32>,
    pub flags: u32,
    /// `pf->rhit`: packets this filter matched.
    pub hits: AtomicU64,
    pub exts: Exts,
}

#[derive(Default, Debug)]
pub struct Matchall {
    pub head: Option<Head>,
}

impl super::Classifier for Matchall {
    fn kind(&self) -> &'static str {
        "matchall"
    }
    fn classify(
        &self,
        pkt: &mut crate::packet::Packet,
        _: &super::Headers,
        _: u32,
        now: Instant,
    ) -> Option<(i32, TcfResult)> {
        Matchall::classify(self, pkt, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        Matchall::get(self, handle)
    }
    /// `tcf_bind_filter` of the one filter's class (it is never changed in place).
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn std::any::Any>,
        _tmplt: Option<&dyn std::any::Any>,
        _: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        super::with_opts(opts, |o: &MatchallOpts| Matchall::change(self, handle, o, acts))?;
        if let Some(h) = self.head.as_mut().filter(|h| h.classid != 0) {
            h.class = binds.bind(h.classid);
        }
        Ok(())
    }
    /// `mall_delete`: the proto's only filter; always the last.
    fn delete(&mut self, _: u32, binds: &mut Binds) -> Result<bool, FilterError> {
        self.for_each_class(&mut |r| binds.unbind(r.classid, r.class));
        self.head = None;
        Ok(true)
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        Matchall::dump(self, ctx, out)
    }
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult)) {
        self.head.iter().for_each(|h| f(TcfResult { classid: h.classid, class: h.class }));
    }
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>)) {
        self.head.iter_mut().for_each(|h| f(h.classid, &mut h.class));
    }
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.head.iter().for_each(|h| f(&h.exts));
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchallOpts {
    pub present: bool,
    pub classid: Option<u32>,
    pub flags: u32,
    pub exts: ExtsSpec,
}

impl Matchall {
    /// `mall_get`.
    pub fn get(&self, handle: u32) -> Option<u32> {
        self.head.as_ref().filter(|h| h.handle == handle).map(|h| h.handle)
    }
    /// `mall_change`: only one filter per proto, never changed in place.
    pub fn change(&mut self, handle: u32, o: &MatchallOpts, acts: &mut ActCtx) -> Result<(), FilterError> {
        if !o.present {
            return Err(FilterError::Errno("Invalid argument"));
        }
        if self.head.is_some() {
            return Err(FilterError::Errno("File exists"));
        }
        let exts = acts.init(&o.exts)?;
        self.head = Some(Head {
            handle: if handle == 0 { 1 } else { handle },
            classid: o.classid.unwrap_or(0),
            class: None,
            flags: o.flags | super::u32::NOT_IN_HW,
            hits: AtomicU64::new(0),
            exts,
        });
        Ok(())
    }
    /// `mall_classify`: the verdict of the filter's actions (TC_ACT_OK without).
    pub fn classify(&self, pkt: &mut Packet, now: Instant) -> Option<(i32, TcfResult)> {
        let h = self.head.as_ref()?;
        if h.flags & super::u32::SKIP_SW != 0 {
            return None;
        }
        h.hits.fetch_add(1, Ordering::Relaxed);
        let mut res = TcfResult { classid: h.classid, class: h.class };
        let r = h.exts.exec(pkt, now, &mut res);
        (r >= 0).then_some((r, res))
    }
    /// `mall_dump` + tc's `matchall_print_opt`.
    pub fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        let Some(h) = &self.head else { return };
        ctx.entry(out, h.handle, None, |out| {
            out.uint("handle", format_args!("handle {:#x} ", h.handle), h.handle as u64);
            if h.classid != 0 {
                let c = crate::tc::show_classid(h.classid);
                out.string("flowid", format_args!("flowid {c} "), &c);
            }
            if h.flags & super::u32::SKIP_HW != 0 {
                out.boolean("skip_hw", format_args!("\n  skip_hw"), true);
            }
            if h.flags & super::u32::SKIP_SW != 0 {
                out.boolean("skip_sw", format_args!("\n  skip_sw"), true);
            }
            out.boolean("not_in_hw", format_args!("\n  not_in_hw"), true);
            if ctx.stats {
                let n = h.hits.load(Ordering::Relaxed);
                out.uint("rule_hit", format_args!(" (rule hit {n})"), n);
            }
            // mall_dump → mall_stats_hw_filter, unless skip_hw.
            if h.flags & super::u32::SKIP_HW == 0 {
                h.exts.hw_stats_update();
            }
            h.exts.print(out, ctx.now);
        });
    }
}

const USAGE: &str = "Usage: ... matchall [skip_sw | skip_hw]
                 [ action ACTION_SPEC ] [ classid CLASSID ]

Where: SELECTOR := SAMPLE SAMPLE ...
       FILTERID := X:Y:Z
       ACTION_SPEC := ... look at individual actions

NOTE: CLASSID is parsed as hexadecimal input.
";

/// tc side: `matchall_parse_opt`.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, MatchallOpts), TcError> {
    let h = match handle {
        Some(s) => crate::tc::units::parse_c_integer(s).unwrap_or(0) as u32,
        None => 0,
    };
    let mut o = MatchallOpts::default();
    if a.is_empty() {
        return Ok((h, o));
    }
    o.present = true;
    while let Some(w) = a.next() {
        if matches(w, "classid") || w == "flowid" {
            let v = a.value()?;
            o.classid = Some(crate::tc::get_tc_classid(v).ok_or_else(|| TcError::tc("Illegal \"classid\"\n"))?);
        } else if matches(w, "action") {
            super::action::parse_action(a, &mut o.exts)?;
        } else if w == "skip_hw" {
            o.flags |= super::u32::SKIP_HW;
        } else if w == "skip_sw" {
            o.flags |= super::u32::SKIP_SW;
        } else if w == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    if o.flags == super::u32::SKIP_HW | super::u32::SKIP_SW {
        return Err(TcError::tc("skip_hw and skip_sw are mutually exclusive\n"));
    }
    Ok((h, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_filter_matching_everything() {
        let mut m = Matchall::default();
        let o = MatchallOpts { present: true, classid: Some(0x10010), ..Default::default() };
        let mut t = super::super::action::ActionTable::default();
        let mut ctx = ActCtx {
            table: &mut t,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
            est: None,
        };
        m.change(0, &o, &mut ctx).unwrap();
        assert_eq!(m.get(1), Some(1));
        assert_eq!(m.classify(&mut Packet::new(0, 1), Instant::ZERO), Some((0, TcfResult::unbound(0x10010))));
        assert_eq!(m.change(0, &o, &mut ctx), Err(FilterError::Errno("File exists")));
        let mut s = Matchall::default();
        let o = MatchallOpts { present: true, flags: super::super::u32::SKIP_SW, ..Default::default() };
        s.change(5, &o, &mut ctx).unwrap();
        assert_eq!(s.classify(&mut Packet::new(0, 1), Instant::ZERO), None);
    }
}
