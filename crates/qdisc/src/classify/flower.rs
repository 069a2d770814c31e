//! flower — match on dissected packet fields: net/sched/cls_flower.c and
//! tc/f_flower.c, for the keys the engine's packets carry: `dst_mac`/`src_mac`
//! (with mask), `ip_proto`, `src_ip`/`dst_ip` with prefix, `src_port`/`dst_port`
//! (tcp/udp/sctp), `ip_tos` (with mask), plus `classid`, `skip_hw`/`skip_sw`. The
//! MAC keys read the Ethernet header [`Headers`] gives: a packet with a 5-tuple
//! carries no MAC addresses (all zero), one with its frame's bytes
//! ([`Packet::frame`]) its own, and its IP keys from the frame's IP header if any.
//!
//! Chain templates (`tc chain add … chain N flower KEYS`: `fl_tmplt_create`,
//! `fl_tmplt_dump`) hold a mask; a filter of that chain may set no mask bit the
//! template lacks (`fl_mask_fits_tmplt`, checked after its actions are made). A
//! template's `eth_type` is masked whenever its request's protocol is not `all` —
//! tc sends the chain's protocol, 0 when none is given, as the key.
//!
//! Handles are allocated lowest-free from 1 (`idr_alloc_u32`); filters are kept by
//! handle in a map, so adding, replacing or deleting one of a million costs a
//! logarithm (tdc's flower cases add and delete a million). As the kernel does,
//! filters are grouped by *mask* (which keys they set, prefix lengths, the tos
//! mask: `struct fl_flow_mask`), masks are tried in creation order, and within a
//! mask a hash table on the masked key (`fl_mask_lookup`) gives the one filter that
//! can match: a lookup costs one hash per mask, however many filters there are. Two
//! filters with the same mask and masked key are refused (EEXIST, no message:
//! `fl_ht_insert_unique`; goldens/kernel-6.12/flower-mac.json). This machine's kernel has no
//! cls_flower: the printer follows tc/f_flower.c, checked against Debian 6.12's in
//! goldens/kernel-6.12/flower-templates.json.

use std::collections::{BTreeMap, HashMap};
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
    /// `dst_mac` / `src_mac`: address and mask.
    pub dst_mac: Option<([u8; 6], [u8; 6])>,
    pub src_mac: Option<([u8; 6], [u8; 6])>,
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
    /// `res.class`: the class the filter is bound to ([`Binds::bind`]).
    pub class: Option<u32>,
    pub exts: Exts,
}

/// Which keys a filter sets, and how wide (`struct fl_flow_mask`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Mask {
    dst_mac: Option<[u8; 6]>,
    src_mac: Option<[u8; 6]>,
    eth_type: bool,
    ip_proto: bool,
    src_ip: Option<(u32, bool)>,
    dst_ip: Option<(u32, bool)>,
    src_port: bool,
    dst_port: bool,
    tos: Option<u8>,
}

/// A key under a mask (`fl_set_masked_key`): unmasked fields are None or 0; a field
/// the packet lacks is None, which no filter's key equals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct MaskedKey {
    dst_mac: Option<[u8; 6]>,
    src_mac: Option<[u8; 6]>,
    eth_type: u16,
    ip_proto: Option<u8>,
    src_ip: Option<[u8; 16]>,
    dst_ip: Option<[u8; 16]>,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    tos: Option<u8>,
}

fn mac_and(a: [u8; 6], m: [u8; 6]) -> [u8; 6] {
    std::array::from_fn(|i| a[i] & m[i])
}

/// The address bits a prefix keeps (IPv4 in the last 4 bytes).
fn masked_addr(a: &[u8; 16], plen: u32, v6: bool) -> [u8; 16] {
    let mut out = [0u8; 16];
    let (from, bits) = if v6 { (0, plen) } else { (12, plen) };
    for i in 0..(16 - from) {
        let keep = bits.saturating_sub(8 * i as u32).min(8);
        out[from + i] = a[from + i] & (0xFFu16 << (8 - keep)) as u8;
    }
    out
}

impl Mask {
    fn of(o: &FlowerOpts) -> Mask {
        Mask {
            dst_mac: o.dst_mac.map(|(_, m)| m),
            src_mac: o.src_mac.map(|(_, m)| m),
            eth_type: o.eth_type != 0,
            ip_proto: o.ip_proto.is_some(),
            src_ip: o.src_ip.map(|k| (k.plen, k.v6)),
            dst_ip: o.dst_ip.map(|k| (k.plen, k.v6)),
            src_port: o.src_port.is_some(),
            dst_port: o.dst_port.is_some(),
            tos: o.ip_tos.map(|(_, m)| m),
        }
    }
    /// A filter's key.
    fn key(&self, o: &FlowerOpts) -> MaskedKey {
        MaskedKey {
            dst_mac: o.dst_mac.map(|(a, m)| mac_and(a, m)),
            src_mac: o.src_mac.map(|(a, m)| mac_and(a, m)),
            eth_type: o.eth_type,
            ip_proto: o.ip_proto,
            src_ip: o.src_ip.map(|k| masked_addr(&k.addr, k.plen, k.v6)),
            dst_ip: o.dst_ip.map(|k| masked_addr(&k.addr, k.plen, k.v6)),
            src_port: o.src_port,
            dst_port: o.dst_port,
            tos: o.ip_tos.map(|(v, m)| v & m),
        }
    }
    /// The packet's key under this mask (`skb_flow_dissect` + `fl_set_masked_key`).
    fn packet_key(&self, pkt: &Packet, hdr: &Headers) -> MaskedKey {
        let mac = |at: usize| -> [u8; 6] { hdr.bytes[at..at + 6].try_into().unwrap() };
        // The IP fields, read only when a key of this mask needs them: the 5-tuple's,
        // or a frame's own header.
        let wants_ip =
            self.src_ip.is_some() || self.dst_ip.is_some() || self.src_port || self.dst_port || self.tos.is_some();
        let ip = match pkt.flow() {
            _ if !wants_ip => None,
            Some(f) => Some((f.src, f.dst, pkt.tos, Some((f.sport, f.dport)))),
            None => hdr.frame_ip().map(|i| (i.src, i.dst, i.tos, i.ports)),
        };
        let ports = ip.and_then(|i| i.3).filter(|_| matches!(hdr.ip_proto, Some(6 | 17 | 132)));
        MaskedKey {
            dst_mac: self.dst_mac.map(|m| mac_and(mac(0), m)),
            src_mac: self.src_mac.map(|m| mac_and(mac(6), m)),
            eth_type: if self.eth_type { hdr.protocol } else { 0 },
            ip_proto: if self.ip_proto { hdr.ip_proto } else { None },
            src_ip: self.src_ip.and_then(|(p, v6)| ip.map(|i| masked_addr(&i.0, p, v6))),
            dst_ip: self.dst_ip.and_then(|(p, v6)| ip.map(|i| masked_addr(&i.1, p, v6))),
            src_port: if self.src_port { ports.map(|p| p.0) } else { None },
            dst_port: if self.dst_port { ports.map(|p| p.1) } else { None },
            tos: self.tos.and_then(|m| ip.map(|i| i.2 & m)),
        }
    }
}

/// A chain template's keys (`struct fl_flow_tmplt`): the options' keys, and
/// whether the ethertype is part of the mask (also when its value is 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowerTmplt {
    pub keys: FlowerOpts,
    pub eth_type_masked: bool,
}

impl FlowerTmplt {
    /// `fl_mask_fits_tmplt`: every mask bit of the filter's keys is in the template's.
    fn fits(&self, o: &FlowerOpts) -> bool {
        let t = &self.keys;
        // An address key also masks `control.addr_type`, which any address of the
        // template masks too.
        let any_addr = t.src_ip.is_some() || t.dst_ip.is_some();
        let addr_fits = |f: Option<AddrKey>, t: Option<AddrKey>| match (f, t) {
            (None, _) => true,
            (Some(f), _) if f.plen == 0 => any_addr,
            (Some(f), Some(t)) => f.v6 == t.v6 && f.plen <= t.plen,
            (Some(_), None) => false,
        };
        let mac_fits = |f: Option<([u8; 6], [u8; 6])>, t: Option<([u8; 6], [u8; 6])>| {
            let t = t.map_or([0; 6], |(_, m)| m);
            f.is_none_or(|(_, m)| (0..6).all(|i| m[i] & !t[i] == 0))
        };
        mac_fits(o.dst_mac, t.dst_mac)
            && mac_fits(o.src_mac, t.src_mac)
            && (o.eth_type == 0 || self.eth_type_masked)
            && (o.ip_proto.is_none() || t.ip_proto.is_some())
            && addr_fits(o.src_ip, t.src_ip)
            && addr_fits(o.dst_ip, t.dst_ip)
            && (o.src_port.is_none() || t.src_port.is_some())
            && (o.dst_port.is_none() || t.dst_port.is_some())
            && o.ip_tos.is_none_or(|(_, m)| m & !t.ip_tos.map_or(0, |(_, tm)| tm) == 0)
    }
}

/// flower's template operations.
pub static TMPLT: super::TmpltOps = super::TmpltOps {
    create: |opts, protocol| {
        let keys = super::with_opts(opts, |o: &FlowerOpts| Ok(o.clone()))?;
        // Only the keys: fl_set_key ignores classid, flags and actions.
        let keys = FlowerOpts { classid: None, flags: 0, exts: ExtsSpec::default(), ..keys };
        Ok(Box::new(FlowerTmplt { keys, eth_type_masked: protocol != ETH_P_ALL }))
    },
    dump: |keys, out| {
        if let Some(t) = keys.downcast_ref::<FlowerTmplt>() {
            print_keys(&t.keys, t.eth_type_masked, out);
        }
    },
};

/// The keys of `flower_print_opt`; `eth_type` is printed when masked, even as 0.
fn print_keys(o: &FlowerOpts, eth_type_masked: bool, out: &mut Out) {
    out.open_object(Some("keys"));
    // flower_print_eth_addr: the mask as a prefix length when its ones lead, else
    // as an address; none when full.
    for (name, k) in [("dst_mac", o.dst_mac), ("src_mac", o.src_mac)] {
        if let Some((a, m)) = k {
            let mut s = mac_str(&a);
            let bits = u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]]) << 16;
            let ones = bits.leading_ones();
            if bits << ones != 0 {
                s = format!("{s}/{}", mac_str(&m));
            } else if ones < 48 {
                s = format!("{s}/{ones}");
            }
            out.nl();
            out.string(name, format_args!("  {name} {s}"), &s);
        }
    }
    if o.eth_type != 0 || eth_type_masked {
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
    // flower_print_ip_addr prints nothing for an ethertype other than IPv4/IPv6 (a
    // chain template without `protocol` keeps its addresses unseen).
    let ip = matches!(o.eth_type, ETH_P_IP | ETH_P_IPV6);
    for (name, k) in [("dst_ip", &o.dst_ip), ("src_ip", &o.src_ip)] {
        if let Some(k) = k.as_ref().filter(|_| ip) {
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
}

fn mac_str(a: &[u8; 6]) -> String {
    a.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[derive(Default)]
pub struct Flower {
    /// By handle.
    pub filters: BTreeMap<u32, FlowerFilter>,
    /// The masks in creation order, each with its filters by masked key (handles)
    /// (`head->masks`, `mask->ht`).
    masks: Vec<(Mask, HashMap<MaskedKey, u32>)>,
}

impl Flower {
    pub fn get(&self, handle: u32) -> Option<u32> {
        self.filters.contains_key(&handle).then_some(handle)
    }

    /// `fl_change` (its `tcf_bind_filter` / `tcf_unbind_filter` through `binds`).
    pub fn change(
        &mut self,
        handle: u32,
        o: &FlowerOpts,
        tmplt: Option<&FlowerTmplt>,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        if o.flags & (super::u32::SKIP_HW | super::u32::SKIP_SW) == super::u32::SKIP_HW | super::u32::SKIP_SW {
            return Err(FilterError::Errno("Invalid argument"));
        }
        let exts = acts.init(&o.exts)?;
        if fh.is_some_and(|h| handle != 0 && handle != h) {
            return Err(FilterError::ext("Handle specified does not match"));
        }
        if tmplt.is_some_and(|t| !t.fits(o)) {
            return Err(FilterError::ext("cls_flower: Mask does not fit the template"));
        }
        if let Some(h) = fh {
            let (mask, key) = (Mask::of(o), Mask::of(o).key(o));
            let taken = self.masks.iter().find(|(m, _)| *m == mask).and_then(|(_, t)| t.get(&key));
            if taken.is_some_and(|&other| other != h) {
                return Err(FilterError::Errno("File exists"));
            }
            let f = self.filters.get_mut(&h).expect("existing filter");
            f.exts = exts;
            let old = std::mem::replace(&mut f.o, o.clone());
            binds.unbind(old.classid.unwrap_or(0), f.class);
            f.class = o.classid.and_then(|c| binds.bind(c));
            self.unindex(&old, h);
            self.index(o, h);
            return Ok(());
        }
        let h = if handle == 0 {
            (1..=i32::MAX as u32)
                .find(|h| self.get(*h).is_none())
                .ok_or(FilterError::Errno("No space left on device"))?
        } else {
            handle
        };
        // Same mask and same masked key as an existing filter: `fl_ht_insert_unique`.
        let mask = Mask::of(o);
        if self.masks.iter().any(|(m, t)| *m == mask && t.contains_key(&mask.key(o))) {
            return Err(FilterError::Errno("File exists"));
        }
        let class = o.classid.and_then(|c| binds.bind(c));
        self.filters.insert(h, FlowerFilter { handle: h, o: o.clone(), class, exts });
        self.index(o, h);
        Ok(())
    }

    /// `fl_delete`; returns `last`.
    pub fn delete(&mut self, h: u32, binds: &mut Binds) -> bool {
        if let Some(f) = self.filters.remove(&h) {
            self.unindex(&f.o, h);
            binds.unbind(f.o.classid.unwrap_or(0), f.class);
        }
        self.filters.is_empty()
    }

    /// `fl_check_assign_mask` + the insert into the mask's table: a new mask goes
    /// to the end of the list.
    fn index(&mut self, o: &FlowerOpts, h: u32) {
        let mask = Mask::of(o);
        let i = match self.masks.iter().position(|(m, _)| *m == mask) {
            Some(i) => i,
            None => {
                self.masks.push((mask, HashMap::new()));
                self.masks.len() - 1
            }
        };
        self.masks[i].1.insert(mask.key(o), h);
    }

    /// The filter leaves its mask's table; a mask without filters goes.
    fn unindex(&mut self, o: &FlowerOpts, h: u32) {
        let mask = Mask::of(o);
        if let Some(i) = self.masks.iter().position(|(m, _)| *m == mask) {
            let key = mask.key(o);
            if self.masks[i].1.get(&key) == Some(&h) {
                self.masks[i].1.remove(&key);
            }
            if self.masks[i].1.is_empty() {
                self.masks.remove(i);
            }
        }
    }

    /// `fl_classify`: per mask in creation order, the filter whose key equals the
    /// packet's masked key; a `skip_sw` filter found there is passed over (the next
    /// mask is tried). The filter found answers with its actions' verdict (TC_ACT_OK
    /// without; "continue" ends this proto's lookup).
    pub fn classify(&self, pkt: &mut Packet, hdr: &Headers, now: Instant) -> Option<(i32, TcfResult)> {
        for (mask, table) in &self.masks {
            let Some(&h) = table.get(&mask.packet_key(pkt, hdr)) else { continue };
            let Some(f) = self.filters.get(&h) else { continue };
            if f.o.flags & super::u32::SKIP_SW != 0 {
                continue;
            }
            let mut res = TcfResult { classid: f.o.classid.unwrap_or(0), class: f.class };
            let r = f.exts.exec(pkt, now, &mut res);
            return (r >= 0).then_some((r, res));
        }
        None
    }

    /// `fl_walk` + `fl_dump` + tc's `flower_print_opt` for the modelled keys; a
    /// terse dump (`fl_terse_dump`) gives only the handle, the flags and the actions'
    /// terse dumps (tc still opens the empty `keys` object).
    pub fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        for f in self.filters.values() {
            let o = &f.o;
            ctx.entry(out, f.handle, None, |out| {
                out.uint("handle", format_args!("handle {:#x} ", f.handle), f.handle as u64);
                if ctx.terse {
                    out.open_object(Some("keys"));
                    out.close_object();
                } else {
                    if let Some(c) = o.classid {
                        let c = crate::tc::show_classid(c);
                        out.string("classid", format_args!("classid {c} "), &c);
                    }
                    print_keys(o, false, out);
                }
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
                // fl_dump → fl_hw_update_stats, unless skip_hw.
                if o.flags & super::u32::SKIP_HW == 0 {
                    f.exts.hw_stats_update();
                }
                if ctx.terse {
                    f.exts.print_terse(out, ctx.now);
                } else {
                    f.exts.print(out, ctx.now);
                }
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
        tmplt: Option<&dyn std::any::Any>,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut Binds,
    ) -> Result<(), FilterError> {
        let tmplt = tmplt.and_then(|t| t.downcast_ref::<FlowerTmplt>());
        super::with_opts(opts, |o: &FlowerOpts| Flower::change(self, handle, o, tmplt, fh, acts, binds))
    }
    fn delete(&mut self, handle: u32, binds: &mut Binds) -> Result<bool, FilterError> {
        Ok(Flower::delete(self, handle, binds))
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        Flower::dump(self, ctx, out)
    }
    fn terse_dump(&self) -> bool {
        true
    }
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult)) {
        self.filters.values().for_each(|x| f(TcfResult { classid: x.o.classid.unwrap_or(0), class: x.class }));
    }
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>)) {
        self.filters.values_mut().for_each(|x| f(x.o.classid.unwrap_or(0), &mut x.class));
    }
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.filters.values().for_each(|x| f(&x.exts));
    }
}

/// `flower_parse_ip_addr`: the family of the filter's ethertype, or — with none at
/// all (a chain template without `protocol`) — the address's own.
fn parse_addr(s: &str, eth_type: u16) -> Option<AddrKey> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let (addr, v6) = if eth_type == ETH_P_IPV6 || (eth_type == 0 && a.contains(':')) {
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

/// `ll_addr_a2n` into tc's buffer: colon-separated hex octets, at most six (a
/// dotted IPv4 address is 4). An octet tc cannot read is its "invalid lladdr"
/// (`Err(Some(text))`, tc then names the key). Fewer than six octets leave the rest
/// of the buffer as it was: `base` (the mask's buffer holds the address), else a
/// refusal (tc would send uninitialised memory).
fn parse_mac(s: &str, base: Option<[u8; 6]>) -> Result<[u8; 6], Result<String, TcError>> {
    let mut a = base.unwrap_or_default();
    let mut n = 0;
    for part in s.split(':').take(6) {
        // sscanf("%x"): optional 0x, hex digits, anything after ignored.
        let p = part.trim_start_matches("0x").trim_start_matches("0X");
        let digits: String = p.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        a[n] = u32::from_str_radix(&digits, 16)
            .ok()
            .and_then(|v| u8::try_from(v).ok())
            .ok_or_else(|| Ok(format!("\"{part}\" is invalid lladdr.\n")))?;
        n += 1;
    }
    if s.contains('.') || (n < 6 && base.is_none()) {
        return Err(Err(TcError::tc(format!(
            "qdisc-lab: MAC address \"{s}\" has fewer than 6 octets (tc would send the rest uninitialised)\n"
        ))));
    }
    Ok(a)
}

/// `flower_parse_eth_addr`: ADDR, ADDR/PREFIXLEN or ADDR/MASK; a failure as tc
/// reports it for key `name`.
fn parse_mac_key(v: &str, name: &str) -> Result<([u8; 6], [u8; 6]), TcError> {
    let fail = |e: Result<String, TcError>| match e {
        Ok(text) => TcError::tc(format!("{text}Illegal \"{name}\"\n")),
        Err(refused) => refused,
    };
    let (a, m) = match v.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (v, None),
    };
    let a = parse_mac(a, None).map_err(fail)?;
    let m = match m {
        None => [0xff; 6],
        Some(m) => match crate::tc::units::get_unsigned10(m) {
            // A prefix length: tc shifts 48 ones left by 64 - LEN and sends the top six
            // bytes (a shift by 64 or more is undefined in C).
            Some(bits) if (1..=64).contains(&bits) => {
                (0xFFFF_FFFF_FFFFu64 << (64 - bits)).to_be_bytes()[..6].try_into().unwrap()
            }
            Some(bits) => {
                return Err(TcError::tc(format!(
                    "qdisc-lab: MAC prefix length {bits}: tc's mask shift is undefined for it\n"
                )))
            }
            None => parse_mac(m, Some(a)).map_err(fail)?,
        },
    };
    Ok((a, m))
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
        } else if matches(w, "dst_mac") || matches(w, "src_mac") {
            let v = a.value()?;
            let name = if w.starts_with('d') { "dst_mac" } else { "src_mac" };
            let k = parse_mac_key(v, name)?;
            if name == "dst_mac" {
                o.dst_mac = Some(k);
            } else {
                o.src_mac = Some(k);
            }
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
            let eth = if proto == 0 { 0 } else { o.eth_type };
            let k = parse_addr(v, eth)
                .filter(|_| is_ip || proto == 0)
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
            // flower_parse_ip_tos_ttl: the value in decimal, else hex; the mask in hex.
            let u8_of = |n: Option<u32>| n.and_then(|n| u8::try_from(n).ok());
            let val = u8_of(crate::tc::units::get_unsigned10(x)).or_else(|| u8_of(crate::tc::units::get_u32_base16(x)));
            let mask = match m {
                Some(m) => u8_of(crate::tc::units::get_u32_base16(m)),
                None => Some(0xFF),
            };
            match (val, mask) {
                // fl_set_key reads the IP keys only of an IPv4 or IPv6 filter: others
                // send them for nothing.
                (Some(v), Some(m)) => {
                    if is_ip {
                        o.ip_tos = Some((v, m))
                    }
                }
                _ => return Err(TcError::tc("Illegal \"ip_tos\"\n")),
            }
        } else if matches(w, "action") {
            super::action::parse_action(a, &mut o.exts)?;
        } else if w == "help" {
            return Err(TcError::tc("Usage: ... flower [ MATCH-LIST ] [ classid CLASSID ] [ skip_hw | skip_sw ] (qdisc-lab subset: dst_mac, src_mac, ip_proto, src_ip, dst_ip, src_port, dst_port, ip_tos)\n"));
        } else {
            return Err(TcError::tc(format!(
                "What is \"{w}\"?\nqdisc-lab flower supports: dst_mac, src_mac, ip_proto, src_ip, dst_ip, src_port, dst_port, ip_tos, classid, skip_hw, skip_sw\n"
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

    fn ctx(table: &mut crate::classify::action::ActionTable) -> ActCtx<'_> {
        ActCtx {
            table,
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
            est: None,
        }
    }

    #[test]
    fn keys_match() {
        let mut f = Flower::default();
        let mut tb = crate::classify::action::ActionTable::default();
        let mut ctx = ctx(&mut tb);
        f.change(
            0,
            &opts("ip_proto tcp dst_ip 10.0.0.0/8 dst_port 80 classid 1:10"),
            None,
            None,
            &mut ctx,
            &mut Binds::default(),
        )
        .unwrap();
        f.change(0, &opts("ip_proto udp classid 1:20"), None, None, &mut ctx, &mut Binds::default()).unwrap();
        assert_eq!(f.get(2), Some(2));
        let c = |p: &Packet| f.classify(&mut p.clone(), &Headers::of(p), Instant::ZERO).map(|r| r.1.classid);
        assert_eq!(c(&pkt([10, 9, 9, 9], 80, 6)), Some(0x10010));
        assert_eq!(c(&pkt([11, 9, 9, 9], 80, 6)), None);
        assert_eq!(c(&pkt([10, 9, 9, 9], 81, 6)), None);
        assert_eq!(c(&pkt([11, 9, 9, 9], 53, 17)), Some(0x10020));
        assert_eq!(c(&Packet::new(1, 100)), None);
        assert_eq!(
            f.change(0, &opts("ip_proto udp classid 1:30"), None, None, &mut ctx, &mut Binds::default()),
            Err(FilterError::Errno("File exists"))
        );
    }

    /// A frame's own MACs, ethertype and IP header (goldens/kernel-6.12/filter-raw-frames).
    #[test]
    fn frames_match_their_macs_ethertype_and_ip_header() {
        let mut f = Flower::default();
        let mut tb = crate::classify::action::ActionTable::default();
        let mut ctx = ctx(&mut tb);
        // `protocol all`: no ethertype in the key.
        let all = |s: &str| {
            let v: Vec<String> = s.split_whitespace().map(String::from).collect();
            parse(None, ETH_P_ALL, &mut Args::new(&v)).unwrap().1
        };
        f.change(
            0,
            &all("dst_mac ff:ff:ff:ff:ff:ff src_mac 02:00:00:00:00:02 classid 1:4"),
            None,
            None,
            &mut ctx,
            &mut Binds::default(),
        )
        .unwrap();
        f.change(0, &all("src_mac 02:00:00:00:00:01 classid 1:2"), None, None, &mut ctx, &mut Binds::default())
            .unwrap();
        f.change(0, &opts("ip_tos 0xb8/0xfc dst_ip 10.0.0.2 classid 1:3"), None, None, &mut ctx, &mut Binds::default())
            .unwrap();
        let c = |p: &Packet| f.classify(&mut p.clone(), &Headers::of(p), Instant::ZERO).map(|r| r.1.classid);
        let head = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5];
        assert_eq!(c(&Packet::new(1, 64).with_frame(&head)), Some(0x10002));
        let mut v4 = head.to_vec();
        v4[11] = 0x03;
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4.extend_from_slice(&[0x45, 0xb9, 0, 50, 0, 0, 0x40, 0, 64, 253, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        assert_eq!(c(&Packet::new(1, 64).with_frame(&v4)), Some(0x10003));
        v4[33] = 3;
        assert_eq!(c(&Packet::new(1, 64).with_frame(&v4)), None);
        // Without a frame the MACs read as zeros.
        assert_eq!(c(&Packet::new(1, 64)), None);
    }

    #[test]
    fn masks_in_creation_order_and_masked_duplicates() {
        let mut f = Flower::default();
        let mut tb = crate::classify::action::ActionTable::default();
        let mut ctx = ctx(&mut tb);
        f.change(0, &opts("dst_ip 10.0.0.0/8 classid 1:1"), None, None, &mut ctx, &mut Binds::default()).unwrap();
        f.change(0, &opts("dst_ip 10.1.0.0/16 classid 1:2"), None, None, &mut ctx, &mut Binds::default()).unwrap();
        let c = |f: &Flower, mut p: Packet| {
            let hdr = Headers::of(&p);
            f.classify(&mut p, &hdr, Instant::ZERO).map(|r| r.1.classid)
        };
        // The /8 mask came first, so it answers for 10.1.2.3.
        assert_eq!(c(&f, pkt([10, 1, 2, 3], 80, 6)), Some(0x10001));
        // Same mask, same masked key: refused even with other host bits.
        assert_eq!(
            f.change(0, &opts("dst_ip 10.9.9.9/8 classid 1:3"), None, None, &mut ctx, &mut Binds::default()),
            Err(FilterError::Errno("File exists"))
        );
        // The /8 mask goes with its filter and comes back after the /16.
        assert!(!f.delete(1, &mut Binds::default()));
        f.change(0, &opts("dst_ip 10.0.0.0/8 classid 1:3"), None, None, &mut ctx, &mut Binds::default()).unwrap();
        assert_eq!(f.get(1), Some(1));
        assert_eq!(c(&f, pkt([10, 1, 2, 3], 80, 6)), Some(0x10002));
        assert_eq!(c(&f, pkt([10, 2, 2, 3], 80, 6)), Some(0x10003));
    }

    fn tmplt(proto: u16, s: &str) -> FlowerTmplt {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        let o = parse(None, proto, &mut Args::new(&v)).unwrap().1;
        *(TMPLT.create)(Some(&o), proto).unwrap().downcast::<FlowerTmplt>().unwrap()
    }

    #[test]
    fn template_masks_hold_the_filters_masks() {
        let t = tmplt(ETH_P_IP, "dst_ip 10.0.0.0/24 ip_proto tcp dst_port 80 ip_tos 0x10/0xf0");
        assert!(t.eth_type_masked && t.keys.classid.is_none());
        for (f, fits) in [
            ("dst_ip 10.0.0.0/16", true),
            ("dst_ip 10.0.0.0/24", true),
            ("dst_ip 10.0.0.1", false),
            ("src_ip 0.0.0.0/0", true), // only control.addr_type, which the template masks
            ("src_ip 10.0.0.0/8", false),
            ("ip_proto udp dst_port 53", true), // tcp, udp and sctp ports share tp.dst
            ("ip_proto tcp src_port 80", false),
            ("ip_tos 0x10/0x70", true),
            ("ip_tos 0x10/0xff", false),
            ("", true),
        ] {
            assert_eq!(t.fits(&opts(f)), fits, "{f}");
        }
        // A filter of protocol all sets no ethertype; a template without a protocol
        // masks it (as 0), so every filter's ethertype fits.
        assert!(tmplt(ETH_P_IP, "").fits(&FlowerOpts::default()));
        let bare = tmplt(0, "");
        assert!(bare.eth_type_masked && bare.fits(&opts("")));
        assert!(!tmplt(ETH_P_ALL, "").fits(&opts("")));
        // IPv4 and IPv6 addresses are different keys.
        let v6 = tmplt(ETH_P_IPV6, "src_ip 2001:db8::/64");
        let f = parse(None, ETH_P_IPV6, &mut Args::new(&["src_ip".into(), "2001:db8::/48".into()])).unwrap().1;
        assert!(v6.fits(&f));
        assert!(!v6.fits(&opts("src_ip 10.0.0.0/8")));
    }

    fn keys_text(o: &FlowerOpts) -> String {
        let mut out = Out::text();
        print_keys(o, false, &mut out);
        out.into_string()
    }

    #[test]
    fn mac_keys_parse_print_and_match_the_headers_addresses() {
        let o = opts("dst_mac ff:ff:ff:ff:ff:ff");
        assert_eq!(o.dst_mac, Some(([0xff; 6], [0xff; 6])));
        // MACs come before the ethertype (flower_print_opt); a full mask is not shown.
        assert_eq!(keys_text(&o), "\n  dst_mac ff:ff:ff:ff:ff:ff\n  eth_type ipv4");
        // A prefix length, a leading-ones mask and a mask with holes.
        let o = opts("src_mac e4:11:22:33:44:55/24 dst_mac 0:1:2:3:4:5/ff:ff:ff:ff:00:00");
        assert_eq!(o.src_mac, Some(([0xe4, 0x11, 0x22, 0x33, 0x44, 0x55], [0xff, 0xff, 0xff, 0, 0, 0])));
        assert_eq!(keys_text(&o), "\n  dst_mac 00:01:02:03:04:05/32\n  src_mac e4:11:22:33:44:55/24\n  eth_type ipv4");
        let o = opts("dst_mac 0:1:2:3:4:5/ff:00:ff:00:00:00");
        assert_eq!(keys_text(&o), "\n  dst_mac 00:01:02:03:04:05/ff:00:ff:00:00:00\n  eth_type ipv4");
        // tc's refusals and what it would send uninitialised.
        let bad = |s: &str| {
            let v: Vec<String> = s.split_whitespace().map(String::from).collect();
            parse(None, ETH_P_IP, &mut Args::new(&v)).unwrap_err().msg
        };
        assert_eq!(bad("dst_mac zz:1:2:3:4:5"), "\"zz\" is invalid lladdr.\nIllegal \"dst_mac\"\n");
        assert_eq!(bad("src_mac 1:2:3:4:5:100"), "\"100\" is invalid lladdr.\nIllegal \"src_mac\"\n");
        // A short mask keeps the address's bytes after its own.
        assert_eq!(opts("src_mac 1:2:3:4:5:6/ff:ff").src_mac, Some(([1, 2, 3, 4, 5, 6], [0xff, 0xff, 3, 4, 5, 6])));
        assert!(bad("dst_mac 1:2:3").starts_with("qdisc-lab: MAC address \"1:2:3\" has fewer than 6 octets"));
        assert!(bad("dst_mac 1:2:3:4:5:6/0").starts_with("qdisc-lab: MAC prefix length 0"));

        // The engine's packets carry no MAC addresses: the header's are zero.
        let mut f = Flower::default();
        let mut tb = crate::classify::action::ActionTable::default();
        let mut ctx = ctx(&mut tb);
        f.change(0, &opts("dst_mac ff:ff:ff:ff:ff:ff classid 1:1"), None, None, &mut ctx, &mut Binds::default())
            .unwrap();
        f.change(0, &opts("src_mac 00:00:00:00:00:00/8 classid 1:2"), None, None, &mut ctx, &mut Binds::default())
            .unwrap();
        let p = pkt([10, 0, 0, 1], 80, 6);
        assert_eq!(f.classify(&mut p.clone(), &Headers::of(&p), Instant::ZERO).map(|r| r.1.classid), Some(0x10002));
        // Same mask, same masked key: refused; another address under it: a new filter.
        assert_eq!(
            f.change(0, &opts("src_mac 00:11:22:33:44:55/8 classid 1:3"), None, None, &mut ctx, &mut Binds::default()),
            Err(FilterError::Errno("File exists"))
        );
        f.change(0, &opts("src_mac 01:00:00:00:00:00/8 classid 1:3"), None, None, &mut ctx, &mut Binds::default())
            .unwrap();
        // A template's MAC mask bounds its filters'.
        let t = tmplt(ETH_P_IP, "dst_mac 00:00:00:00:00:00/16");
        assert!(t.fits(&opts("dst_mac 1:2:0:0:0:0/8")));
        assert!(!t.fits(&opts("dst_mac 1:2:3:0:0:0/24")));
        assert!(!t.fits(&opts("src_mac 1:2:3:0:0:0/8")));
    }

    #[test]
    fn ip_tos_of_a_non_ip_filter_is_sent_for_nothing() {
        let v: Vec<String> = ["ip_tos", "0x10/f0"].iter().map(|s| s.to_string()).collect();
        assert_eq!(parse(None, ETH_P_ALL, &mut Args::new(&v)).unwrap().1.ip_tos, None);
        assert_eq!(parse(None, ETH_P_IP, &mut Args::new(&v)).unwrap().1.ip_tos, Some((16, 0xf0)));
        let v: Vec<String> = ["ip_tos", "0x100"].iter().map(|s| s.to_string()).collect();
        assert!(parse(None, ETH_P_ALL, &mut Args::new(&v)).is_err());
    }
}
