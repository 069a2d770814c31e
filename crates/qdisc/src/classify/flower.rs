//! flower — match on dissected packet fields: net/sched/cls_flower.c and
//! tc/f_flower.c, for the keys the engine's packets carry: `ip_proto`,
//! `src_ip`/`dst_ip` with prefix, `src_port`/`dst_port` (tcp/udp/sctp), `ip_tos`
//! (with mask), plus `classid`, `skip_hw`/`skip_sw`.
//!
//! Handles are allocated lowest-free from 1 (`idr_alloc_u32`); filters are tried in
//! handle order (the kernel tries per mask in mask-creation order, which coincides
//! unless filters with different masks overlap). This machine's kernel has no
//! cls_flower: the printer follows tc/f_flower.c and is not checked against a kernel.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::action::{ActCtx, Exts, ExtsSpec};
use super::{Binds, FilterError, Headers, TcfResult, ETH_P_ALL, ETH_P_IP, ETH_P_IPV6};
use crate::packet::Packet;
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

/// A prefix match on an address (16 bytes; IPv4 in the last 4 of IPv4-mapped form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrKey {
    pub addr: [u8; 16],
    pub plen: u32,
    pub v6: bool,
}

impl AddrKey {
    fn matches(&self, a: &[u8; 16]) -> bool {
        let (bytes, plen) = if self.v6 { (&a[..], self.plen) } else { (&a[12..], self.plen) };
        let mine = if self.v6 { &self.addr[..] } else { &self.addr[12..] };
        let full = (plen / 8) as usize;
        if bytes[..full] != mine[..full] {
            return false;
        }
        let rem = plen % 8;
        rem == 0 || (bytes[full] ^ mine[full]) & (0xFFu8 << (8 - rem)) == 0
    }
    fn fmt(&self) -> String {
        let s = if self.v6 {
            Ipv6Addr::from(self.addr).to_string()
        } else {
            Ipv4Addr::new(self.addr[12], self.addr[13], self.addr[14], self.addr[15]).to_string()
        };
        let max = if self.v6 { 128 } else { 32 };
        if self.plen < max {
            format!("{s}/{}", self.plen)
        } else {
            s
        }
    }
}

/// The keys of one flower filter (`struct fl_flow_key` + mask, as far as modelled).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowerOpts {
    pub eth_type: u16,
    pub ip_proto: Option<u8>,
    pub src_ip: Option<AddrKey>,
    pub dst_ip: Option<AddrKey>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub ip_tos: Option<(u8, u8)>,
    pub classid: Option<u32>,
    pub flags: u32,
    pub exts: ExtsSpec,
}

#[derive(Clone, Debug)]
pub struct FlowerFilter {
    pub handle: u32,
    pub o: FlowerOpts,
    pub exts: Exts,
}

#[derive(Default)]
pub struct Flower {
    /// By ascending handle.
    pub filters: Vec<FlowerFilter>,
    /// The classids filters started or stopped naming since the trait's last
    /// operation took them (`tcf_bind_filter` / `tcf_unbind_filter` in `fl_change`,
    /// `fl_delete`).
    bound: Binds,
}

impl Flower {
    pub fn get(&self, handle: u32) -> Option<u32> {
        self.filters.iter().find(|f| f.handle == handle).map(|f| f.handle)
    }

    /// `fl_change`.
    pub fn change(
        &mut self,
        handle: u32,
        o: &FlowerOpts,
        fh: Option<u32>,
        acts: &mut ActCtx,
    ) -> Result<(), FilterError> {
        if o.flags & (super::u32::SKIP_HW | super::u32::SKIP_SW) == super::u32::SKIP_HW | super::u32::SKIP_SW {
            return Err(FilterError::Errno("Invalid argument"));
        }
        let exts = acts.init(&o.exts)?;
        if let Some(h) = fh {
            if handle != 0 && handle != h {
                return Err(FilterError::ext("Handle specified does not match"));
            }
            let f = self.filters.iter_mut().find(|f| f.handle == h).expect("existing filter");
            if let Some(c) = f.o.classid {
                self.bound.unbind(c);
            }
            if let Some(c) = o.classid {
                self.bound.bind(c);
            }
            f.o = o.clone();
            f.exts = exts;
            return Ok(());
        }
        let h = if handle == 0 {
            (1..=i32::MAX as u32)
                .find(|h| self.get(*h).is_none())
                .ok_or(FilterError::Errno("No space left on device"))?
        } else {
            handle
        };
        // Same mask and same key as an existing filter: `fl_ht_insert_unique`.
        if self.filters.iter().any(|f| same_key(&f.o, o)) {
            return Err(FilterError::ext("Filter already exists"));
        }
        let at = self.filters.iter().position(|f| f.handle > h).unwrap_or(self.filters.len());
        self.filters.insert(at, FlowerFilter { handle: h, o: o.clone(), exts });
        if let Some(c) = o.classid {
            self.bound.bind(c);
        }
        Ok(())
    }

    /// `fl_delete`; returns `last`.
    pub fn delete(&mut self, h: u32) -> bool {
        self.filters.retain(|f| {
            if f.handle == h {
                if let Some(c) = f.o.classid {
                    self.bound.unbind(c);
                }
            }
            f.handle != h
        });
        self.filters.is_empty()
    }

    /// `fl_classify` over the keys modelled here.
    /// The first matching filter answers with its actions' verdict (TC_ACT_OK
    /// without; "continue" ends this proto's lookup).
    pub fn classify(&self, pkt: &mut Packet, hdr: &Headers, now: Instant) -> Option<(i32, TcfResult)> {
        let flow = pkt.flow.as_deref();
        for f in &self.filters {
            let o = &f.o;
            if o.flags & super::u32::SKIP_SW != 0 {
                continue;
            }
            if o.eth_type != 0 && o.eth_type != hdr.protocol {
                continue;
            }
            let ok = (|| {
                if let Some(p) = o.ip_proto {
                    if hdr.ip_proto? != p {
                        return None;
                    }
                }
                if let Some(k) = &o.src_ip {
                    k.matches(&flow?.src).then_some(())?;
                }
                if let Some(k) = &o.dst_ip {
                    k.matches(&flow?.dst).then_some(())?;
                }
                let ports = matches!(hdr.ip_proto, Some(6 | 17 | 132));
                if let Some(p) = o.src_port {
                    (ports && flow?.sport == p).then_some(())?;
                }
                if let Some(p) = o.dst_port {
                    (ports && flow?.dport == p).then_some(())?;
                }
                if let Some((v, m)) = o.ip_tos {
                    flow?;
                    (pkt.tos & m == v & m).then_some(())?;
                }
                Some(())
            })();
            if ok.is_some() {
                let mut res = TcfResult { classid: o.classid.unwrap_or(0) };
                let r = f.exts.exec(pkt, now, &mut res);
                return (r >= 0).then_some((r, res));
            }
        }
        None
    }

    /// `fl_walk` + `fl_dump` + tc's `flower_print_opt` for the modelled keys.
    pub fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        for f in &self.filters {
            let o = &f.o;
            ctx.entry(out, |out| {
                out.uint("handle", format_args!("handle {:#x} ", f.handle), f.handle as u64);
                if let Some(c) = o.classid {
                    let c = crate::tc::show_classid(c);
                    out.string("classid", format_args!("classid {c} "), &c);
                }
                out.open_object(Some("keys"));
                if o.eth_type != 0 {
                    let t = match o.eth_type {
                        ETH_P_IP => "ipv4".to_string(),
                        ETH_P_IPV6 => "ipv6".to_string(),
                        0x0806 => "arp".to_string(),
                        0x8035 => "rarp".to_string(),
                        t => format!("{t:04x}"),
                    };
                    out.nl();
                    out.string("eth_type", format_args!("  eth_type {t}"), &t);
                }
                if let Some(p) = o.ip_proto {
                    let s = match p {
                        6 => "tcp".to_string(),
                        17 => "udp".to_string(),
                        132 => "sctp".to_string(),
                        1 => "icmp".to_string(),
                        58 => "icmpv6".to_string(),
                        115 => "l2tp".to_string(),
                        50 => "esp".to_string(),
                        51 => "ah".to_string(),
                        p => format!("0x{p:02x}"),
                    };
                    out.nl();
                    out.string("ip_proto", format_args!("  ip_proto {s}"), &s);
                }
                if let Some((v, m)) = o.ip_tos {
                    out.nl();
                    out.uint("ip_tos", format_args!("  ip_tos {v}"), v as u64);
                    if m != 0xFF {
                        out.string("ip_tos_mask", format_args!("/{m:#x}"), &format!("{m:x}"));
                    }
                }
                for (name, k) in [("dst_ip", &o.dst_ip), ("src_ip", &o.src_ip)] {
                    if let Some(k) = k {
                        let s = k.fmt();
                        out.nl();
                        out.string(name, format_args!("  {name} {s}"), &s);
                    }
                }
                if o.ip_proto.is_some_and(|p| matches!(p, 6 | 17 | 132)) {
                    for (name, p) in [("dst_port", o.dst_port), ("src_port", o.src_port)] {
                        if let Some(p) = p {
                            out.nl();
                            out.uint(name, format_args!("  {name} {p}"), p as u64);
                        }
                    }
                }
                out.close_object();
                if o.flags & super::u32::SKIP_HW != 0 {
                    out.nl();
                    out.boolean("skip_hw", format_args!("  skip_hw"), true);
                }
                if o.flags & super::u32::SKIP_SW != 0 {
                    out.nl();
                    out.boolean("skip_sw", format_args!("  skip_sw"), true);
                }
                out.nl();
                out.boolean("not_in_hw", format_args!("  not_in_hw"), true);
                f.exts.print(out, ctx.now);
            });
        }
    }
}

impl super::Classifier for Flower {
    fn kind(&self) -> &'static str {
        "flower"
    }
    fn classify(&self, pkt: &mut Packet, hdr: &Headers, _: u32, now: Instant) -> Option<(i32, TcfResult)> {
        Flower::classify(self, pkt, hdr, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        Flower::get(self, handle)
    }
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn std::any::Any>,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        let r = super::with_opts(opts, |o: &FlowerOpts| Flower::change(self, handle, o, fh, acts));
        binds.append(&mut self.bound);
        r
    }
    fn delete(&mut self, handle: u32, binds: &mut Binds) -> Result<bool, FilterError> {
        let last = Flower::delete(self, handle);
        binds.append(&mut self.bound);
        Ok(last)
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        Flower::dump(self, ctx, out)
    }
    fn for_each_classid(&self, f: &mut dyn FnMut(u32)) {
        self.filters.iter().filter_map(|x| x.o.classid).for_each(f);
    }
}

fn same_key(a: &FlowerOpts, b: &FlowerOpts) -> bool {
    (a.eth_type, a.ip_proto, a.src_ip, a.dst_ip, a.src_port, a.dst_port, a.ip_tos)
        == (b.eth_type, b.ip_proto, b.src_ip, b.dst_ip, b.src_port, b.dst_port, b.ip_tos)
}

fn parse_addr(s: &str, eth_type: u16) -> Option<AddrKey> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let (addr, v6) = if eth_type == ETH_P_IPV6 {
        (a.parse::<Ipv6Addr>().ok()?.octets(), true)
    } else {
        (a.parse::<Ipv4Addr>().ok()?.to_ipv6_mapped().octets(), false)
    };
    let max = if v6 { 128 } else { 32 };
    let plen = match p {
        Some(p) => crate::tc::units::get_u32(p).filter(|&v| v <= max)?,
        None => max,
    };
    Some(AddrKey { addr, plen, v6 })
}

/// tc side: the modelled subset of `flower_parse_opt`. `proto` is the filter's
/// `protocol` (its ethertype becomes the eth_type key unless it is `all`).
pub fn parse(handle: Option<&str>, proto: u16, a: &mut Args) -> Result<(u32, FlowerOpts), TcError> {
    let h = match handle {
        Some(s) => crate::tc::units::get_u32(s).ok_or_else(|| TcError::tc("Illegal \"handle\"\n"))?,
        None => 0,
    };
    let mut o = FlowerOpts { eth_type: if proto == ETH_P_ALL { 0 } else { proto }, ..Default::default() };
    let is_ip = o.eth_type == ETH_P_IP || o.eth_type == ETH_P_IPV6;
    while let Some(w) = a.next() {
        if matches(w, "classid") || matches(w, "flowid") {
            let v = a.value()?;
            o.classid = Some(crate::tc::get_tc_classid(v).ok_or_else(|| TcError::tc("Illegal classid\n"))?);
        } else if w == "skip_hw" {
            o.flags |= super::u32::SKIP_HW;
        } else if w == "skip_sw" {
            o.flags |= super::u32::SKIP_SW;
        } else if matches(w, "ip_proto") {
            let v = a.value()?;
            if !is_ip {
                return Err(TcError::tc("Illegal \"eth_type\" for ip proto\nIllegal \"ip_proto\"\n"));
            }
            o.ip_proto = Some(match v {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                "icmp" => 1,
                "icmpv6" => 58,
                v => crate::tc::units::get_u32(v)
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| TcError::tc("Illegal \"ip_proto\"\n"))?,
            });
        } else if matches(w, "dst_ip") || matches(w, "src_ip") {
            let v = a.value()?;
            let name = if w.starts_with('d') { "dst_ip" } else { "src_ip" };
            let k = parse_addr(v, o.eth_type)
                .filter(|_| is_ip)
                .ok_or_else(|| TcError::tc(format!("Illegal \"{name}\"\n")))?;
            if name == "dst_ip" {
                o.dst_ip = Some(k);
            } else {
                o.src_ip = Some(k);
            }
        } else if matches(w, "dst_port") || matches(w, "src_port") {
            let v = a.value()?;
            let name = if w.starts_with('d') { "dst_port" } else { "src_port" };
            let p = crate::tc::units::get_u32(v)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|_| o.ip_proto.is_some_and(|p| matches!(p, 6 | 17 | 132)))
                .ok_or_else(|| TcError::tc(format!("Illegal \"{name}\"\n")))?;
            if name == "dst_port" {
                o.dst_port = Some(p);
            } else {
                o.src_port = Some(p);
            }
        } else if matches(w, "ip_tos") {
            let v = a.value()?;
            let (x, m) = match v.split_once('/') {
                Some((x, m)) => (x, Some(m)),
                None => (v, None),
            };
            let val = crate::tc::units::get_u32(x).and_then(|n| u8::try_from(n).ok());
            let mask = match m {
                Some(m) => crate::tc::units::get_u32(m).and_then(|n| u8::try_from(n).ok()),
                None => Some(0xFF),
            };
            match (val, mask) {
                (Some(v), Some(m)) if is_ip => o.ip_tos = Some((v, m)),
                _ => return Err(TcError::tc("Illegal \"ip_tos\"\n")),
            }
        } else if matches(w, "action") {
            super::action::parse_action(a, &mut o.exts)?;
        } else if w == "help" {
            return Err(TcError::tc("Usage: ... flower [ MATCH-LIST ] [ classid CLASSID ] [ skip_hw | skip_sw ] (qdisc-lab subset: ip_proto, src_ip, dst_ip, src_port, dst_port, ip_tos)\n"));
        } else {
            return Err(TcError::tc(format!(
                "What is \"{w}\"?\nqdisc-lab flower supports: ip_proto, src_ip, dst_ip, src_port, dst_port, ip_tos, classid, skip_hw, skip_sw\n"
            )));
        }
    }
    Ok((h, o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::FlowKey;

    fn opts(s: &str) -> FlowerOpts {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(None, ETH_P_IP, &mut Args::new(&v)).unwrap().1
    }
    fn pkt(dst: [u8; 4], dport: u16, proto: u8) -> Packet {
        let src = Ipv4Addr::new(192, 168, 0, 1).to_ipv6_mapped().octets();
        let dst = Ipv4Addr::from(dst).to_ipv6_mapped().octets();
        Packet::new(1, 500).with_flow(FlowKey { src, dst, sport: 1000, dport, proto })
    }

    #[test]
    fn keys_match() {
        let mut f = Flower::default();
        let mut tb = crate::classify::action::ActionTable::default();
        let mut ctx = ActCtx {
            table: &mut tb,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
        };
        f.change(0, &opts("ip_proto tcp dst_ip 10.0.0.0/8 dst_port 80 classid 1:10"), None, &mut ctx).unwrap();
        f.change(0, &opts("ip_proto udp classid 1:20"), None, &mut ctx).unwrap();
        assert_eq!(f.get(2), Some(2));
        let c = |p: &Packet| f.classify(&mut p.clone(), &Headers::of(p), Instant::ZERO).map(|r| r.1.classid);
        assert_eq!(c(&pkt([10, 9, 9, 9], 80, 6)), Some(0x10010));
        assert_eq!(c(&pkt([11, 9, 9, 9], 80, 6)), None);
        assert_eq!(c(&pkt([10, 9, 9, 9], 81, 6)), None);
        assert_eq!(c(&pkt([11, 9, 9, 9], 53, 17)), Some(0x10020));
        assert_eq!(c(&Packet::new(1, 100)), None);
        assert_eq!(
            f.change(0, &opts("ip_proto udp classid 1:30"), None, &mut ctx),
            Err(FilterError::ext("Filter already exists"))
        );
    }
}
