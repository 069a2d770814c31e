//! fw — classify by `skb->mark`: net/sched/cls_fw.c and tc/f_fw.c.
//!
//! A proto holds filters keyed by mark (`handle MARK[/MASK]`); the packet's mark,
//! ANDed with the proto's one mask, selects the filter with that handle. A proto
//! created without any filter uses the "old method": a non-zero mark that is a
//! classid of this qdisc (or has no major) is itself the result.
//! (This machine's kernel has no cls_fw, so the printer follows tc/f_fw.c only.)

use super::action::{ActCtx, Exts, ExtsSpec};
use super::{Binds, FilterError, Headers, TcfResult};
use crate::packet::Packet;
use crate::qdisc::tc_h_maj;
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

const HTSIZE: usize = 256;

#[derive(Clone, Debug)]
pub struct FwFilter {
    pub id: u32,
    pub classid: u32,
    /// `res.class`: the class the filter is bound to ([`Binds::bind`]).
    pub class: Option<u32>,
    pub exts: Exts,
}

/// One fw proto: no head (`mask` None) until the first filter (`struct fw_head`).
/// The table is part of the proto, as the kernel's head is one allocation: a
/// classification visits every proto of a block, one load from proto to bucket.
pub struct Fw {
    /// The head's mask; None: no head (the "old method").
    mask: Option<u32>,
    ht: [Vec<FwFilter>; HTSIZE],
}

impl Default for Fw {
    fn default() -> Self {
        Fw { mask: None, ht: std::array::from_fn(|_| Vec::new()) }
    }
}

/// What tc's `fw_parse_opt` sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FwOpts {
    pub present: bool,
    pub mask: Option<u32>,
    pub classid: Option<u32>,
    pub exts: ExtsSpec,
}

/// `fw_hash`.
fn fw_hash(h: u32) -> usize {
    let h = h ^ (h >> 16);
    let h = h ^ (h >> 8);
    h as usize % HTSIZE
}

impl Fw {
    /// `fw_get`.
    pub fn get(&self, handle: u32) -> Option<u32> {
        self.mask?;
        self.ht[fw_hash(handle)].iter().find(|f| f.id == handle).map(|f| f.id)
    }

    /// `fw_change` (its `tcf_bind_filter` / `tcf_unbind_filter` through `binds`).
    pub fn change(
        &mut self,
        handle: u32,
        o: &FwOpts,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        if !o.present {
            return if handle != 0 { Err(FilterError::Errno("Invalid argument")) } else { Ok(()) };
        }
        if let Some(id) = fh {
            if id != handle && handle != 0 {
                return Err(FilterError::Errno("Invalid argument"));
            }
            let mask = self.mask.unwrap_or(u32::MAX);
            let exts = Self::check(o, mask, acts)?;
            let f = self.ht[fw_hash(id)].iter_mut().find(|f| f.id == id).expect("existing filter");
            if let Some(c) = o.classid {
                binds.unbind(f.classid, f.class);
                f.classid = c;
                f.class = if c != 0 { binds.bind(c) } else { None };
            }
            // The replacement filter carries only the actions of this request.
            f.exts = exts;
            return Ok(());
        }
        if handle == 0 {
            return Err(FilterError::Errno("Invalid argument"));
        }
        let mask = self.mask.unwrap_or_else(|| o.mask.unwrap_or(u32::MAX));
        let exts = Self::check(o, mask, acts)?;
        self.mask = Some(mask);
        let classid = o.classid.unwrap_or(0);
        let class = if classid != 0 { binds.bind(classid) } else { None };
        self.ht[fw_hash(handle)].insert(0, FwFilter { id: handle, classid, class, exts });
        Ok(())
    }

    /// `fw_set_parms`: actions, then the mask must be the proto's.
    fn check(o: &FwOpts, mask: u32, acts: &mut ActCtx) -> Result<Exts, FilterError> {
        let exts = acts.init(&o.exts)?;
        match o.mask {
            Some(m) if m != mask => Err(FilterError::Errno("Invalid argument")),
            None if mask != u32::MAX => Err(FilterError::Errno("Invalid argument")),
            _ => Ok(exts),
        }
    }

    /// `fw_delete`; returns `last` (no filter left).
    pub fn delete(&mut self, id: u32, binds: &mut Binds) -> bool {
        if self.mask.is_some() {
            let ht = &mut self.ht;
            ht[fw_hash(id)].retain(|f| {
                if f.id == id {
                    binds.unbind(f.classid, f.class);
                }
                f.id != id
            });
            return ht.iter().all(|b| b.is_empty());
        }
        true
    }

    /// `fw_classify`: the verdict of the matching filter's actions (TC_ACT_OK
    /// without); a filter whose actions answer "continue" lets the lookup go on.
    #[inline(never)]
    pub fn classify(&self, pkt: &mut Packet, q_handle: u32, now: Instant) -> Option<(i32, TcfResult)> {
        match self.mask {
            Some(mask) => {
                let id = pkt.mark & mask;
                for f in self.ht[fw_hash(id)].iter().filter(|f| f.id == id) {
                    let mut res = TcfResult { classid: f.classid, class: f.class };
                    let r = f.exts.exec(pkt, now, &mut res);
                    if r >= 0 {
                        return Some((r, res));
                    }
                }
                None
            }
            None => {
                let id = pkt.mark;
                (id != 0 && (tc_h_maj(id) == 0 || tc_h_maj(id ^ q_handle) == 0)).then_some((0, TcfResult::unbound(id)))
            }
        }
    }

    /// `fw_walk` + `fw_dump` + tc's `fw_print_opt`.
    pub fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        let Some(mask) = self.mask else { return };
        for f in self.ht.iter().flatten() {
            if f.classid == 0 && f.exts.is_empty() {
                ctx.bare_filter(out, f.id);
                continue;
            }
            ctx.entry(out, f.id, Some(&f.exts), |out| {
                out.open_object(Some("fw"));
                let m = format!("{:#x}", f.id);
                if mask != u32::MAX {
                    out.string("mark", format_args!("handle {m}"), &m);
                    let mm = format!("{mask:#x}");
                    out.string("mask", format_args!("/{mm} "), &mm);
                } else {
                    out.string("mark", format_args!("handle {m} "), &m);
                    if out.is_json() {
                        out.string("mask", format_args!(""), "0xffffffff");
                    }
                }
                out.close_object();
                if f.classid != 0 {
                    let c = crate::tc::show_classid(f.classid);
                    out.string("classid", format_args!("classid {c} "), &c);
                }
                // f_fw.c starts TCA_FW_ACT on a line of its own (print_nl) before
                // tc_print_action's own newline.
                if !f.exts.is_empty() && !f.exts.legacy_police {
                    out.nl();
                }
                f.exts.print(out, ctx.now);
            });
        }
    }
}

impl super::Classifier for Fw {
    fn kind(&self) -> &'static str {
        "fw"
    }
    /// A proto without the packet's mark answers from its bucket alone: a block's
    /// lookup calls every proto, so the miss stays a leaf call.
    fn classify(&self, pkt: &mut Packet, _: &Headers, q_handle: u32, now: Instant) -> Option<(i32, TcfResult)> {
        if let Some(mask) = self.mask {
            if self.ht[fw_hash(pkt.mark & mask)].is_empty() {
                return None;
            }
        }
        Fw::classify(self, pkt, q_handle, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        Fw::get(self, handle)
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
        super::with_opts(opts, |o: &FwOpts| Fw::change(self, handle, o, fh, acts, binds))
    }
    fn delete(&mut self, handle: u32, binds: &mut Binds) -> Result<bool, FilterError> {
        Ok(Fw::delete(self, handle, binds))
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        Fw::dump(self, ctx, out)
    }
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult)) {
        self.ht.iter().flatten().for_each(|x| f(TcfResult { classid: x.classid, class: x.class }));
    }
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>)) {
        self.ht.iter_mut().flatten().for_each(|x| f(x.classid, &mut x.class));
    }
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.ht.iter().flatten().for_each(|x| f(&x.exts));
    }
}

const USAGE: &str = "Usage: ... fw [ classid CLASSID ] [ indev DEV ] [ action ACTION_SPEC ]
\tCLASSID := Push matching packets to the class identified by CLASSID with format X:Y
\t\tCLASSID is parsed as hexadecimal input.
\tDEV := specify device for incoming device classification.
\tACTION_SPEC := Apply an action on matching packets.
\tNOTE: handle is represented as HANDLE[/FWMASK].
\t\tFWMASK is 0xffffffff by default.
";

/// tc side: `fw_parse_opt`.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, FwOpts), TcError> {
    let mut h = 0u32;
    let mut o = FwOpts::default();
    let mut mask = None;
    if let Some(s) = handle {
        let (m, k) = match s.split_once('/') {
            Some((m, k)) => (m, Some(k)),
            None => (s, None),
        };
        h = crate::tc::units::get_u32(m).ok_or_else(|| TcError::tc("Illegal \"handle\"\n"))?;
        if let Some(k) = k {
            mask = Some(crate::tc::units::get_u32(k).ok_or_else(|| TcError::tc("Illegal \"handle\" mask\n"))?);
        }
    }
    if a.is_empty() {
        return Ok((h, o));
    }
    o.present = true;
    o.mask = mask;
    while let Some(w) = a.next() {
        if matches(w, "classid") || matches(w, "flowid") {
            let v = a.value()?;
            o.classid = Some(crate::tc::get_tc_classid(v).ok_or_else(|| TcError::tc("Illegal \"classid\"\n"))?);
        } else if matches(w, "police") {
            super::action::parse_legacy_police(a, &mut o.exts)?;
        } else if matches(w, "action") {
            super::action::parse_action(a, &mut o.exts)?;
        } else if w == "indev" {
            return Err(TcError::tc(
                "qdisc-lab: fw \"indev\" is not supported (egress packets have no input device)\n",
            ));
        } else if w == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    Ok((h, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(h: &str, s: &str) -> (u32, FwOpts) {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(Some(h), &mut Args::new(&v)).unwrap()
    }
    fn cls(fw: &Fw, p: &Packet) -> Option<TcfResult> {
        fw.classify(&mut p.clone(), 0x10000, Instant::ZERO).map(|(_, r)| r)
    }
    fn marked(m: u32) -> Packet {
        let mut p = Packet::new(1, 100);
        p.mark = m;
        p
    }

    #[test]
    fn mark_selects_filter_with_mask() {
        let mut fw = Fw::default();
        let mut tb = crate::classify::action::ActionTable::default();
        let mut ctx = ActCtx {
            table: &mut tb,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
            est: None,
        };
        let (h, o) = opts("5/0xff", "classid 1:5");
        let b = &mut Binds::default();
        fw.change(h, &o, None, &mut ctx, b).unwrap();
        let (h, o) = opts("6/0xff", "classid 1:6");
        fw.change(h, &o, None, &mut ctx, b).unwrap();
        assert_eq!(cls(&fw, &marked(5)), Some(TcfResult::unbound(0x10005)));
        assert_eq!(cls(&fw, &marked(0x1206)), Some(TcfResult::unbound(0x10006)));
        assert_eq!(cls(&fw, &marked(7)), None);
        // Every filter of a proto must use the proto's mask.
        let (h, o) = opts("7", "classid 1:7");
        assert_eq!(fw.change(h, &o, None, &mut ctx, b), Err(FilterError::Errno("Invalid argument")));
        assert!(!fw.delete(5, b));
        assert!(fw.delete(6, b));
    }

    #[test]
    fn old_method_uses_the_mark_as_classid() {
        let fw = Fw::default();
        assert_eq!(cls(&fw, &marked(0x10020)), Some(TcfResult::unbound(0x10020)));
        assert_eq!(cls(&fw, &marked(0x20)), Some(TcfResult::unbound(0x20)));
        assert_eq!(cls(&fw, &marked(0x20020)), None);
        assert_eq!(cls(&fw, &marked(0)), None);
    }
}
