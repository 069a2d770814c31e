//! route — classify by the realms of the route a packet took, or its input
//! interface: net/sched/cls_route.c ("route4") and tc/f_route.c.
//!
//! # Realms
//!
//! A route may carry realms (`ip route … realm TO`, `realms FROM/TO`: RTA_FLOW,
//! `nh_tclassid`); the route a packet took (`skb_dst`) holds them as its
//! `tclassid`: TO in the low 16 bits, FROM in the high 16 (net/ipv4/route.c,
//! `rt_set_nexthop` / `set_class_tag`). A packet without a route (AF_PACKET frames,
//! anything at ingress: the route is looked up after `sch_handle_ingress`) matches
//! no route filter. What the classifier reads is [`super::Dst`]: the device owner
//! hands it with the transmit call (`Device::xmit_routed`), since [`Packet`] has no
//! field for it.
//!
//! # Filters and handles (`route4_set_parms`)
//!
//! A filter names `to REALM` (0–255), `from REALM` or `fromif DEV` (never both),
//! each optional. Its handle encodes them: bits 0–7 the TO realm, bit 15 set when
//! there is none, bits 8–14 tc's `order`; the high half the FROM realm, or `0x8000 |
//! ifindex` for `fromif`, or `0xFFFF` for neither. The head has 257 buckets by TO
//! (`to_hash`: the realm, 256 for none), each with 33 lists (`from_hash`: 16 by FROM
//! realm, 16 by ifindex, one wildcard) kept in ascending handle order; a dump walks
//! them in that order.
//!
//! # Lookup (`route4_classify`)
//!
//! With `id = tclassid`: in the bucket of `id & 0xFF`, first the FROM list of `(id
//! >> 16) & 0xF` (filters whose to/from equal `id` exactly), then the ifindex list
//! of `16 + ((iif >> 16) & 0xF)` (filters whose ifindex equals the packet's
//! `inet_iif`), then the wildcard list; then the same in bucket 256 (filters without
//! TO) with `id`'s low half cleared. A filter whose actions answer "continue" lets the
//! lookup go on. The ifindex list a filter is kept in is `16 + (ifindex & 0xF)`
//! while the lookup reads `16 + ((iif >> 16) & 0xF)`: a `fromif` filter is found
//! only for an ifindex that is a multiple of 16 (below 65536), as in the kernel.
//! The kernel's fastmap (a 16-entry cache of the last answers) changes nothing
//! observable and is not kept.
//!
//! # Replacing (`route4_change`)
//!
//! A change builds a new filter: it keeps the old one's realms and ifindex unless the
//! request gives new ones, takes only the request's classid (none: 0) and actions,
//! and moves to the handle its (new) keys encode (6.12 keeps a change to the same
//! keys in place: the goldens' `filter replace` of an existing key succeeds).

use super::action::{ActCtx, Exts, ExtsSpec};
use super::{Binds, FilterError, Headers, TcfResult};
use crate::packet::Packet;
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

/// 256 buckets by TO realm and one for filters without TO.
const BUCKETS: usize = 257;
/// 16 FROM lists, 16 ifindex lists, one wildcard.
const LISTS: usize = 33;

/// One filter (`struct route4_filter`).
#[derive(Debug)]
struct Filter {
    handle: u32,
    /// `to | from << 16` as the request(s) gave them.
    id: u32,
    /// The `fromif` ifindex and the name tc gave for it.
    iif: u32,
    iif_name: String,
    classid: u32,
    /// `res.class`: the class the filter is bound to ([`Binds::bind`]).
    class: Option<u32>,
    exts: Exts,
}

type Bucket = [Vec<Filter>; LISTS];

/// A proto's filters (`struct route4_head`).
pub struct Route {
    table: Vec<Option<Box<Bucket>>>,
}

impl Default for Route {
    fn default() -> Self {
        Route { table: (0..BUCKETS).map(|_| None).collect() }
    }
}

/// What tc's `route_parse_opt` sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteOpts {
    /// TCA_OPTIONS present.
    pub present: bool,
    pub to: Option<u32>,
    pub from: Option<u32>,
    /// `fromif`: ifindex and name.
    pub iif: Option<(u32, String)>,
    pub classid: Option<u32>,
    pub exts: ExtsSpec,
}

/// `to_hash`: the bucket of a handle.
fn to_hash(h: u32) -> usize {
    (h & 0xFF) as usize + if h & 0x8000 != 0 { 256 } else { 0 }
}

/// `from_hash` of a handle's high half: its list (33 and up: none).
fn from_hash(id: u32) -> usize {
    let id = id & 0xFFFF;
    if id == 0xFFFF {
        32
    } else if id & 0x8000 == 0 {
        if id > 255 {
            256
        } else {
            (id & 0xF) as usize
        }
    } else {
        16 + (id & 0xF) as usize
    }
}

const EINVAL: FilterError = FilterError::Errno("Invalid argument");
/// The filter's options attribute (`TCA_OPTIONS`).
const TCA_OPTIONS: u16 = 2;

impl Route {
    fn filter(&self, handle: u32) -> Option<&Filter> {
        let (h1, h2) = (to_hash(handle), from_hash(handle >> 16));
        if h1 >= BUCKETS || h2 >= LISTS {
            return None;
        }
        self.table[h1].as_ref()?[h2].iter().find(|f| f.handle == handle)
    }

    /// `route4_change` + `route4_set_parms`.
    fn change_opts(
        &mut self,
        handle: u32,
        o: &RouteOpts,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        if handle == 0 {
            return Err(FilterError::ext("Creating with handle of 0 is invalid"));
        }
        if !o.present {
            return Err(FilterError::Missing(TCA_OPTIONS, "cls_route: Missing options"));
        }
        // route4_policy: NLA_POLICY_MAX of each key.
        if o.to.is_some_and(|t| t > 0xFF)
            || o.from.is_some_and(|f| f > 0xFF)
            || o.iif.as_ref().is_some_and(|i| i.0 > 0x7FFF)
        {
            return Err(FilterError::ext("integer out of range"));
        }
        let old = fh.and_then(|h| self.filter(h)).map(|f| (f.handle, f.id, f.iif, f.iif_name.clone()));
        if old.as_ref().is_some_and(|o| o.0 != handle) {
            return Err(EINVAL);
        }
        let new = old.is_none();
        let (old_handle, mut id, mut iif, mut iif_name) = old.unwrap_or((0, 0, 0, String::new()));
        let exts = acts.init(&o.exts)?;
        let mut to = 0;
        let mut nhandle = 0x8000;
        if let Some(t) = o.to {
            if new && handle & 0x8000 != 0 {
                return Err(FilterError::ext("Invalid handle"));
            }
            to = t;
            nhandle = t;
        }
        if o.from.is_some() && o.iif.is_some() {
            return Err(FilterError::ext("'from' and 'fromif' are mutually exclusive"));
        }
        if let Some(f) = o.from {
            nhandle |= f << 16;
        } else if let Some((i, _)) = &o.iif {
            nhandle |= (i | 0x8000) << 16;
        } else {
            nhandle |= 0xFFFF << 16;
        }
        if new {
            nhandle |= handle & 0x7F00;
            if nhandle != handle {
                return Err(FilterError::Ext(format!(
                    "Handle mismatch constructed: {handle:x} (expected: {nhandle:x})"
                )));
            }
        }
        if nhandle == 0 {
            return Err(FilterError::ext("Replacing with handle of 0 is invalid"));
        }
        let (h1, h2) = (to_hash(nhandle), from_hash(nhandle >> 16));
        if o.to.is_some() {
            id = to;
        }
        if let Some(f) = o.from {
            id = to | f << 16;
        } else if let Some((i, n)) = &o.iif {
            (iif, iif_name) = (*i, n.clone());
        }
        let classid = o.classid.unwrap_or(0);
        let class = if classid != 0 { binds.bind(classid) } else { None };
        let f = Filter { handle: nhandle, id, iif, iif_name, classid, class, exts };
        if !new {
            let (o1, o2) = (to_hash(old_handle), from_hash(old_handle >> 16));
            let list = &mut self.table[o1].as_mut().expect("the old filter's bucket")[o2];
            let i = list.iter().position(|f| f.handle == old_handle).expect("the old filter");
            let gone = list.remove(i);
            binds.unbind(gone.classid, gone.class);
        }
        let list = &mut self.table[h1].get_or_insert_with(|| Box::new(std::array::from_fn(|_| Vec::new())))[h2];
        let at = list.iter().position(|x| nhandle < x.handle).unwrap_or(list.len());
        list.insert(at, f);
        Ok(())
    }

    /// `route4_delete`: unlink the filter, drop its bucket when that empties;
    /// answers `last` (no bucket left).
    fn delete_filter(&mut self, handle: u32, binds: &mut Binds) -> bool {
        let (h1, h2) = (to_hash(handle), from_hash(handle >> 16));
        if let Some(b) = self.table.get_mut(h1).and_then(|b| b.as_mut()) {
            if let Some(i) = b.get(h2).and_then(|l| l.iter().position(|f| f.handle == handle)) {
                let f = b[h2].remove(i);
                binds.unbind(f.classid, f.class);
                if b.iter().all(|l| l.is_empty()) {
                    self.table[h1] = None;
                }
            }
        }
        self.table.iter().all(|b| b.is_none())
    }

    /// `route4_classify`.
    fn lookup(&self, pkt: &mut Packet, hdr: &Headers, now: Instant) -> Option<(i32, TcfResult)> {
        let dst = hdr.dst?;
        let (mut id, iif) = (dst.tclassid, dst.iif);
        let mut h = (id & 0xFF) as usize;
        loop {
            if let Some(b) = &self.table[h] {
                let from = b[((id >> 16) & 0xF) as usize].iter().filter(|f| f.id == id);
                let by_if = b[16 + ((iif >> 16) & 0xF) as usize].iter().filter(|f| f.iif == iif);
                for f in from.chain(by_if).chain(b[32].iter()) {
                    let mut res = TcfResult { classid: f.classid, class: f.class };
                    let r = f.exts.exec(pkt, now, &mut res);
                    if r >= 0 {
                        return Some((r, res));
                    }
                }
            }
            if h == 256 {
                return None;
            }
            h = 256;
            id &= !0xFFFF;
        }
    }

    fn filters(&self) -> impl Iterator<Item = &Filter> {
        self.table.iter().flatten().flat_map(|b| b.iter().flatten())
    }

    /// `route4_walk` + `route4_dump` + tc's `route_print_opt`.
    fn print(&self, ctx: &super::DumpCtx, out: &mut Out) {
        for f in self.filters() {
            ctx.entry(out, f.handle, Some(&f.exts), |out| {
                let fh = format!("{:#x}", f.handle);
                out.string("fh", format_args!("fh 0x{:08x} ", f.handle), &fh);
                if f.handle & 0x7F00 != 0 {
                    let order = (f.handle >> 8) & 0x7F;
                    out.uint("order", format_args!("order {order} "), order as u64);
                }
                if f.classid != 0 {
                    let c = crate::tc::show_classid(f.classid);
                    out.string("flowid", format_args!("flowid {c} "), &c);
                }
                if f.handle & 0x8000 == 0 {
                    let n = realm_name(f.id & 0xFF);
                    out.string("name", format_args!("to {n} "), &n);
                }
                if f.handle & 0x8000_0000 != 0 {
                    if f.handle >> 16 != 0xFFFF {
                        out.string("fromif", format_args!("fromif {}", f.iif_name), &f.iif_name);
                    }
                } else {
                    let n = realm_name(f.id >> 16);
                    out.string("name", format_args!("from {n} "), &n);
                }
                f.exts.print_police_nl(out, ctx.now, false);
            });
        }
    }
}

impl super::Classifier for Route {
    fn kind(&self) -> &'static str {
        "route"
    }
    fn classify(&self, pkt: &mut Packet, hdr: &Headers, _: u32, now: Instant) -> Option<(i32, TcfResult)> {
        self.lookup(pkt, hdr, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        self.filter(handle).map(|f| f.handle)
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
        super::with_opts(opts, |o: &RouteOpts| self.change_opts(handle, o, fh, acts, binds))
    }
    fn delete(&mut self, handle: u32, binds: &mut Binds) -> Result<bool, FilterError> {
        Ok(self.delete_filter(handle, binds))
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        self.print(ctx, out)
    }
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult)) {
        self.filters().for_each(|x| f(TcfResult { classid: x.classid, class: x.class }));
    }
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>)) {
        let lists = self.table.iter_mut().flatten().flat_map(|b| b.iter_mut().flatten());
        lists.for_each(|x| f(x.classid, &mut x.class));
    }
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.filters().for_each(|x| f(&x.exts));
    }
    fn keeps_dst(&self) -> bool {
        true
    }
}

/// The realm names iproute2 reads from `rt_realms` (`rtnl_rtrealm_tab`): the file
/// iproute2 installs (etc/iproute2/rt_realms, Debian's /etc/iproute2/rt_realms, which
/// the goldens' VM copies from the host) names only realm 0, "cosmos".
const REALM_NAMES: &[(u32, &str)] = &[(0, "cosmos")];

/// `rtnl_rtrealm_n2a`.
pub fn realm_name(id: u32) -> String {
    match REALM_NAMES.iter().find(|(i, _)| *i == id) {
        Some((_, n)) => n.to_string(),
        None => id.to_string(),
    }
}

/// `rtnl_rtrealm_a2n`: a name, else a number (strtoul, base 0) up to 255.
pub fn realm_parse(s: &str) -> Option<u32> {
    if let Some((i, _)) = REALM_NAMES.iter().find(|(_, n)| *n == s) {
        return Some(*i);
    }
    crate::tc::units::parse_c_integer(s).filter(|v| (0..=255).contains(v)).map(|v| v as u32)
}

const USAGE: &str = "Usage: ... route [ from REALM | fromif TAG ] [ to REALM ]
                [ classid CLASSID ] [ action ACTION_SPEC ]
       ACTION_SPEC := ... look at individual actions
       CLASSID := X:Y

NOTE: CLASSID is parsed as hexadecimal input.
";

/// tc side: `route_parse_opt`, with the handle tc computes from the keys when none
/// is given.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, RouteOpts), TcError> {
    let mut h = 0;
    if let Some(s) = handle {
        h = crate::tc::units::get_u32(s).ok_or_else(|| TcError::tc("Illegal \"handle\"\n"))?;
    }
    let mut o = RouteOpts::default();
    if a.is_empty() {
        return Ok((h, o));
    }
    o.present = true;
    let mut fh: u32 = 0xFFFF_8000;
    let mut order = 0;
    while let Some(w) = a.next() {
        if matches(w, "to") {
            let id = realm_parse(a.value()?).ok_or_else(|| TcError::tc("Illegal \"to\"\n"))?;
            o.to = Some(id);
            fh = (fh & !0x80FF) | (id & 0xFF);
        } else if matches(w, "from") {
            let id = realm_parse(a.value()?).ok_or_else(|| TcError::tc("Illegal \"from\"\n"))?;
            o.from = Some(id);
            fh = (fh & 0xFFFF) | id << 16;
        } else if matches(w, "fromif") {
            let d = a.value()?;
            let id = a.link_index(d).ok_or_else(|| TcError::tc("Illegal \"fromif\"\n"))?;
            o.iif = Some((id, d.to_string()));
            fh = (fh & 0xFFFF) | (0x8000 | id) << 16;
        } else if matches(w, "classid") || w == "flowid" {
            let v = a.value()?;
            o.classid = Some(crate::tc::get_tc_classid(v).ok_or_else(|| TcError::tc("Illegal \"classid\"\n"))?);
        } else if super::parse_exts(w, a, &mut o.exts)? {
        } else if matches(w, "order") {
            order = crate::tc::units::get_u32(a.value()?).ok_or_else(|| TcError::tc("Illegal \"order\"\n"))?;
        } else if w == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    if order != 0 {
        fh = (fh & !0x7F00) | ((order << 8) & 0x7F00);
    }
    if h == 0 {
        h = fh;
    }
    Ok((h, o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::action::ActionTable;
    use crate::classify::{with_origin, Dst};
    use crate::testing::argv;

    fn ctx(table: &mut ActionTable) -> ActCtx<'_> {
        ActCtx {
            table,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
            est: None,
        }
    }

    /// A proto of the filters `lines` (tc's words after `route`, `handle` first when
    /// given as `handle H …`), over devices lo (1), eth0 (2), … eth31 (33).
    fn proto(lines: &[&str]) -> Route {
        let mut r = Route::default();
        let mut tb = ActionTable::default();
        let mut acts = ctx(&mut tb);
        let mut links: Vec<String> = vec!["lo".into()];
        links.extend((0..32).map(|i| format!("eth{i}")));
        for l in lines {
            let v = argv(l);
            let (h, rest) = match v.first().map(String::as_str) {
                Some("handle") => (Some(v[1].as_str()), &v[2..]),
                _ => (None, &v[..]),
            };
            let mut a = Args::new(rest);
            a.set_links(links.clone());
            let (h, o) = parse(h, &mut a).unwrap();
            r.change_opts(h, &o, None, &mut acts, &mut Binds::with_bind_tcf(&crate::classify::bind_every)).unwrap();
        }
        r
    }

    fn cls(r: &Route, dst: Option<Dst>) -> Option<u32> {
        let mut p = Packet::new(1, 100);
        with_origin(dst, 0, || {
            let hdr = Headers::of(&p);
            r.lookup(&mut p, &hdr, Instant::ZERO).map(|(_, res)| res.classid)
        })
    }

    fn dst(to: u32, from: u32, iif: u32) -> Option<Dst> {
        Some(Dst { tclassid: from << 16 | to, iif })
    }

    #[test]
    fn tc_encodes_the_keys_in_the_handle() {
        let h = |s: &str| {
            let v = argv(s);
            parse(None, &mut Args::new(&v)).unwrap().0
        };
        assert_eq!(h("to 10"), 0xFFFF_000A);
        assert_eq!(h("from 1"), 0x0001_8000);
        assert_eq!(h("to 10 from 1"), 0x0001_000A);
        assert_eq!(h("to 3 order 200"), 0xFFFF_4803);
        assert_eq!(h("to cosmos from 0"), 0);
        let v = argv("fromif eth0 to 2");
        let mut a = Args::new(&v);
        a.set_links(vec!["lo".into(), "eth0".into()]);
        assert_eq!(parse(None, &mut a).unwrap().0, 0x8002_0002);
        assert_eq!(realm_name(0), "cosmos");
        assert_eq!((realm_parse("0x10"), realm_parse("256"), realm_parse("x")), (Some(16), None, None));
    }

    #[test]
    fn lookup_order_and_the_second_pass_without_to() {
        let r = proto(&[
            "to 10 classid 1:1",
            "to 10 from 1 classid 1:2",
            "from 1 classid 1:3",
            "from 17 classid 1:4",
            "to 20 fromif eth14 classid 1:5",
            "to 20 fromif eth30 classid 1:6",
        ]);
        // to 10 from 1: the exact pair before the to-only wildcard.
        assert_eq!(cls(&r, dst(10, 1, 0)), Some(0x10002));
        // to 10 from 2: no pair; the wildcard of bucket 10.
        assert_eq!(cls(&r, dst(10, 2, 0)), Some(0x10001));
        // to 11 from 1: nothing in bucket 11; bucket 256 with the TO half cleared.
        assert_eq!(cls(&r, dst(11, 1, 0)), Some(0x10003));
        // from 17 shares from 1's list (17 & 0xF) but not its realm.
        assert_eq!(cls(&r, dst(0, 17, 0)), Some(0x10004));
        assert_eq!(cls(&r, dst(0, 2, 0)), None);
        // fromif: eth14 is ifindex 16, kept in list 16 + 0, which the lookup reads
        // for any ifindex below 65536; eth30 (ifindex 32) likewise. A fromif filter of
        // another ifindex (eth0, 2: list 18) is never read.
        assert_eq!(cls(&r, dst(20, 0, 16)), Some(0x10005));
        assert_eq!(cls(&r, dst(20, 0, 32)), Some(0x10006));
        let r2 = proto(&["to 20 fromif eth0 classid 1:7"]);
        assert_eq!(cls(&r2, dst(20, 0, 2)), None);
        // No route: no match, whatever the filters.
        assert_eq!(cls(&r, None), None);
    }

    #[test]
    fn continue_goes_on_and_change_moves_the_filter() {
        let mut r = proto(&["to 5 classid 1:1 action continue", "to 5 from 3 classid 1:2 action continue"]);
        assert_eq!(cls(&r, dst(5, 3, 0)), None);
        let mut tb = ActionTable::default();
        let mut acts = ctx(&mut tb);
        let v = argv("from 4 classid 1:9");
        let (_, o) = parse(None, &mut Args::new(&v)).unwrap();
        let mut binds = Binds::with_bind_tcf(&crate::classify::bind_every);
        r.change_opts(0xFFFF_0005, &o, Some(0xFFFF_0005), &mut acts, &mut binds).unwrap();
        assert_eq!(binds.split(), (vec![0x10001], vec![0x10009]));
        // The old TO realm stays in `id`; the handle now says "from 4, no TO".
        assert_eq!(r.get_handles(), vec![0x0003_0005, 0x0004_8000]);
        assert_eq!(cls(&r, dst(7, 4, 0)), Some(0x10009));
        let mut binds = Binds::default();
        assert!(!r.delete_filter(0x0004_8000, &mut binds));
        assert!(r.delete_filter(0x0003_0005, &mut binds));
        assert_eq!(binds.split(), (vec![0x10002, 0x10009], vec![]));
    }

    impl Route {
        fn get_handles(&self) -> Vec<u32> {
            self.filters().map(|f| f.handle).collect()
        }
    }
}
