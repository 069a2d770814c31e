//! flow — a class computed from the packet: net/sched/cls_flow.c and tc/f_flow.c.
//!
//! Each filter (kept in creation order, `list_add_tail_rcu`) first checks its ematch
//! tree, then reads its keys in key-number order (`ffs` over the key mask) and turns
//! them into a number: in **map** mode the first key, `((k & mask) ^ xor) >> rshift) +
//! addend`; in **hash** mode `jhash2` of all keys with the filter's random
//! `hashrnd`. The number is reduced modulo `divisor` (when not 0) and added to the
//! minor of `baseclass` (default: the qdisc's major, minor 1): the classid is
//! `TC_H_MAKE(baseclass, baseclass + n)`.
//!
//! # Keys in this engine
//!
//! `src`, `dst`, `proto`, `proto-src`, `proto-dst` come from the packet's flow
//! (IPv4 addresses, or the last 32 bits of IPv6 ones, and TCP/UDP/SCTP ports).
//! Without them the kernel folds pointers: the socket's address for `src` and
//! `proto-src` (here the socket's stand-in address, [`crate::sched::fq::socket_key`],
//! or 0 without a socket), and the route's address (no route objects exist here: 0)
//! XOR the ethertype as the kernel reads a big-endian value on x86 for `dst` and
//! `proto-dst`. `priority` and `mark` are the packet's; `vlan-tag` is 0 (packets
//! carry no VLAN tags here, the kernel's answer for an untagged packet); `rxhash`
//! is the packet's hash (the flow's hash when none was set); `rt-classid` is the
//! realms of the route the packet took ([`super::Dst`]; 0 without one). `iif` is
//! `skb->skb_iif` ([`Headers::iif`]: the receiving device at ingress and on a
//! forwarded packet, 0 on one this host sent). No packet here has a conntrack entry
//! (`skb_nfct` is NULL), so `nfct` — the entry's address — is 0 and `nfct-src`,
//! `nfct-dst`, `nfct-proto-src`, `nfct-proto-dst` take the kernel's fallback to
//! `src`, `dst`, `proto-src`, `proto-dst`. (On the 6.12 VM, frames an AF_PACKET
//! socket sends read a non-zero `nfct` — a kernel address, found
//! while capturing goldens/kernel-6.12/filter-flow-keys.json, cause not traced —
//! which no model could reproduce; that golden maps no frames by `nfct`.) `sk-uid`/`sk-gid` are the sending
//! socket's fsuid/fsgid ([`crate::packet::Socket::uid`]; a request mini-socket
//! answers for its listener, `skb_to_full_sk`), 0 without a socket.
//!
//! # Randomness
//!
//! `hashrnd` is `get_random_bytes` at creation; here it is drawn from a splitmix64
//! generator seeded from the proto's pref and the filter's handle, so the same
//! script gives the same classes. `perturb SECS` redraws it every `SECS * HZ`
//! jiffies from the filter's creation (the kernel's timer); the redraws due are
//! made when a packet arrives, time being passed in.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::action::{ActCtx, Exts, ExtsSpec};
use super::ematch::Tree;
use super::{Binds, FilterError, Headers, TcfResult};
use crate::packet::Packet;
use crate::sched::sfq::SplitMix64;
use crate::tc::{matches, units, Args, Out, TcError};
use crate::time::{Instant, HZ};

/// The key names by number (`FLOW_KEY_*`), `FLOW_KEY_MAX` = 17.
const KEYS: [&str; 18] = [
    "src",
    "dst",
    "proto",
    "proto-src",
    "proto-dst",
    "iif",
    "priority",
    "mark",
    "nfct",
    "nfct-src",
    "nfct-dst",
    "nfct-proto-src",
    "nfct-proto-dst",
    "rt-classid",
    "sk-uid",
    "sk-gid",
    "vlan-tag",
    "rxhash",
];

/// `FLOW_MODE_MAP` / `FLOW_MODE_HASH`.
const MODE_MAP: u32 = 0;
const MODE_HASH: u32 = 1;

/// What tc's `flow_parse_opt` sends (TCA_OPTIONS is always there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowOpts {
    pub keys: Option<u32>,
    pub mode: u32,
    /// TCA_FLOW_MASK and TCA_FLOW_XOR (sent together).
    pub mask_xor: Option<(u32, u32)>,
    pub rshift: Option<u32>,
    pub addend: Option<u32>,
    pub divisor: Option<u32>,
    pub baseclass: Option<u32>,
    pub perturb: Option<u32>,
    pub tree: Option<Tree>,
    pub exts: ExtsSpec,
}

const USAGE: &str = "Usage: ... flow ...

 [mapping mode]: map key KEY [ OPS ] ...
 [hashing mode]: hash keys KEY-LIST ... [ perturb SECS ]

                 [ divisor NUM ] [ baseclass ID ] [ match EMATCH_TREE ]
                 [ action ACTION_SPEC ]

KEY-LIST := [ KEY-LIST , ] KEY
KEY      := [ src | dst | proto | proto-src | proto-dst | iif | priority |
              mark | nfct | nfct-src | nfct-dst | nfct-proto-src |
              nfct-proto-dst | rt-classid | sk-uid | sk-gid |
              vlan-tag | rxhash ]
OPS      := [ or NUM | and NUM | xor NUM | rshift NUM | addend NUM ]
ID       := X:Y
";

/// FLOW_KEY_SRC | FLOW_KEY_DST | FLOW_KEY_NFCT_SRC | FLOW_KEY_NFCT_DST as tc ORs
/// them: the key numbers 0, 1, 9 and 10, which make 11.
const ADDR_KEY_NUMBERS: u32 = 11;

/// tc's `get_addend`: a number (optionally negated), or for keys that tc takes for
/// addresses an address's last 32 bits. tc tests the key *numbers* of src, dst,
/// nfct-src and nfct-dst as bits, so that is bits 0, 1 and 3 (src, dst, proto-src).
fn addend(s: &str, keys: u32) -> Option<u32> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let v = match units::get_u32(body) {
        Some(v) => v,
        None if keys & ADDR_KEY_NUMBERS != 0 => {
            if let Ok(a) = body.parse::<std::net::Ipv4Addr>() {
                u32::from(a)
            } else {
                let a = body.parse::<std::net::Ipv6Addr>().ok()?;
                u32::from_be_bytes(a.octets()[12..].try_into().expect("4 bytes"))
            }
        }
        None => return None,
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// tc side: `flow_parse_opt`.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, FlowOpts), TcError> {
    let ill = |w: &str| TcError::tc(format!("Illegal \"{w}\"\n"));
    let h = match handle {
        Some(s) => units::get_u32(s).ok_or_else(|| ill("handle"))?,
        None => 0,
    };
    let mut o = FlowOpts::default();
    let (mut mask, mut xor, mut nkeys) = (!0u32, 0u32, 0);
    // transfer_bitop
    let mut bitop = |m: u32, x: u32| {
        xor = x ^ (xor & m);
        mask &= m;
    };
    while let Some(w) = a.next() {
        if matches(w, "map") {
            o.mode = MODE_MAP;
        } else if matches(w, "hash") {
            o.mode = MODE_HASH;
        } else if matches(w, "keys") {
            let v = a.value()?;
            let mut keys = 0u32;
            nkeys = 0;
            for k in v.split(',') {
                let Some(i) = KEYS.iter().position(|n| matches(k, n)) else {
                    return Err(TcError::tc(format!("Unknown flow key \"{k}\"\n")));
                };
                keys |= 1 << i;
                nkeys += 1;
            }
            o.keys = Some(keys);
        } else if matches(w, "and") {
            bitop(units::get_u32(a.value()?).ok_or_else(|| ill("mask"))?, 0);
        } else if matches(w, "or") {
            let v = units::get_u32(a.value()?).ok_or_else(|| ill("or"))?;
            bitop(!v, v);
        } else if matches(w, "xor") {
            bitop(!0, units::get_u32(a.value()?).ok_or_else(|| ill("xor"))?);
        } else if matches(w, "rshift") {
            o.rshift = Some(units::get_u32(a.value()?).ok_or_else(|| ill("rshift"))?);
        } else if matches(w, "addend") {
            o.addend = Some(addend(a.value()?, o.keys.unwrap_or(0)).ok_or_else(|| ill("addend"))?);
        } else if matches(w, "divisor") {
            o.divisor = Some(units::get_u32(a.value()?).ok_or_else(|| ill("divisor"))?);
        } else if matches(w, "baseclass") {
            let v = a.value()?;
            let c = crate::tc::get_tc_classid(v).filter(|c| c & 0xFFFF != 0).ok_or_else(|| ill("baseclass"))?;
            o.baseclass = Some(c);
        } else if matches(w, "perturb") {
            o.perturb = Some(units::get_u32(a.value()?).ok_or_else(|| ill("perturb"))?);
        } else if super::parse_exts(w, a, &mut o.exts)? {
        } else if matches(w, "match") {
            if a.is_empty() {
                return Err(TcError::incomplete());
            }
            o.tree = Some(super::ematch::parse(a)?);
        } else if matches(w, "help") {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    if nkeys > 1 && o.mode != MODE_HASH {
        return Err(TcError::tc("Invalid mode \"map\" for multiple keys\n"));
    }
    if mask != !0 || xor != 0 {
        o.mask_xor = Some((mask, xor));
    }
    Ok((h, o))
}

/// One filter (`struct flow_filter`).
#[derive(Debug)]
pub struct FlowFilter {
    pub handle: u32,
    keymask: u32,
    mode: u32,
    mask: u32,
    xor: u32,
    rshift: u32,
    addend: u32,
    divisor: u32,
    /// As stored; with `base_from_qdisc` its major is the qdisc's (a new filter
    /// given no major), resolved where the qdisc's handle is known.
    baseclass: u32,
    base_from_qdisc: bool,
    /// `perturb_period` in jiffies.
    perturb: u32,
    tree: Tree,
    pub exts: Exts,
    /// `hashrnd`, its generator, and the next redraw (ns; 0: none).
    hashrnd: AtomicU32,
    rng: AtomicU64,
    next_perturb: AtomicU64,
}

/// A proto's filters in creation order (`struct flow_head`).
#[derive(Debug, Default)]
pub struct Flow {
    pref: u16,
    pub filters: Vec<FlowFilter>,
}

impl Flow {
    pub fn new_proto(_: Option<super::Shared>, pref: u16) -> Result<Box<dyn super::Classifier>, FilterError> {
        Ok(Box::new(Flow { pref, filters: Vec::new() }))
    }
}

/// jhash2 (include/linux/jhash.h: Bob Jenkins' lookup3 over 32-bit words).
fn jhash2(k: &[u32], initval: u32) -> u32 {
    let mut a = 0xdead_beef_u32.wrapping_add((k.len() as u32) << 2).wrapping_add(initval);
    let (mut b, mut c) = (a, a);
    let mut k = k;
    while k.len() > 3 {
        a = a.wrapping_add(k[0]);
        b = b.wrapping_add(k[1]);
        c = c.wrapping_add(k[2]);
        // __jhash_mix
        a = a.wrapping_sub(c) ^ c.rotate_left(4);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a) ^ a.rotate_left(6);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b) ^ b.rotate_left(8);
        b = b.wrapping_add(a);
        a = a.wrapping_sub(c) ^ c.rotate_left(16);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a) ^ a.rotate_left(19);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b) ^ b.rotate_left(4);
        b = b.wrapping_add(a);
        k = &k[3..];
    }
    if k.is_empty() {
        return c;
    }
    if k.len() == 3 {
        c = c.wrapping_add(k[2]);
    }
    if k.len() >= 2 {
        b = b.wrapping_add(k[1]);
    }
    a = a.wrapping_add(k[0]);
    // __jhash_final
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c.wrapping_sub(b.rotate_left(24))
}

/// C's `%#x` (`print_0xhex`'s JSON value): no prefix for 0.
fn c_hex(v: u32) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// `addr_fold` of the packet's socket (its stand-in address; 0 without one).
fn sk_fold(pkt: &Packet) -> u32 {
    pkt.sk.as_ref().map_or(0, |s| {
        let p = crate::sched::fq::socket_key(s.id);
        (p ^ (p >> 32)) as u32
    })
}

/// `addr_fold(skb_dst(skb)) ^ (u16)skb_protocol(skb)`: no route objects here (0), and
/// the big-endian ethertype read as a little-endian u16.
fn dst_fold(hdr: &Headers) -> u32 {
    hdr.protocol.swap_bytes() as u32
}

/// `flow_key_get`.
fn key_get(key: usize, pkt: &Packet, hdr: &Headers) -> u32 {
    let f = pkt.flow();
    let addr = |a: &[u8; 16]| u32::from_be_bytes(a[12..].try_into().expect("4 bytes"));
    let ports = f.filter(|f| matches!(f.proto, 6 | 17 | 132) && (f.sport != 0 || f.dport != 0));
    match key {
        0 => f.map(|f| addr(&f.src)).filter(|&a| a != 0).unwrap_or_else(|| sk_fold(pkt)),
        1 => f.map(|f| addr(&f.dst)).filter(|&a| a != 0).unwrap_or_else(|| dst_fold(hdr)),
        2 => f.map_or(0, |f| f.proto as u32),
        3 => ports.map_or_else(|| sk_fold(pkt), |f| f.sport as u32),
        4 => ports.map_or_else(|| dst_fold(hdr), |f| f.dport as u32),
        5 => hdr.iif,
        6 => pkt.priority,
        7 => pkt.mark,
        // flow_get_nfct: addr_fold(skb_nfct(skb)), no entry.
        8 => 0,
        // flow_get_nfct_*: CTTUPLE finds no entry and jumps to the fallback.
        9 | 10 => key_get(key - 9, pkt, hdr),
        11 | 12 => key_get(key - 8, pkt, hdr),
        13 => hdr.dst.map_or(0, |d| d.tclassid),
        14 => pkt.sk.as_ref().map_or(0, |s| s.uid),
        15 => pkt.sk.as_ref().map_or(0, |s| s.gid),
        16 => 0,
        17 => {
            if pkt.hash != 0 {
                pkt.hash
            } else {
                f.map_or(0, |f| f.hash())
            }
        }
        _ => unreachable!("keys above FLOW_KEY_MAX are refused at change"),
    }
}

impl FlowFilter {
    /// The redraws of `hashrnd` due by `now` (the perturbation timer).
    fn perturb(&self, now: Instant) {
        let next = self.next_perturb.load(Ordering::Relaxed);
        if next == 0 || now.0 < next {
            return;
        }
        let period = self.perturb as u64 * (1_000_000_000 / HZ);
        let mut rng = SplitMix64(self.rng.load(Ordering::Relaxed));
        let mut next = next;
        while now.0 >= next {
            self.hashrnd.store(rng.next_u32(), Ordering::Relaxed);
            next += period;
        }
        self.rng.store(rng.0, Ordering::Relaxed);
        self.next_perturb.store(next, Ordering::Relaxed);
    }

    fn baseclass(&self, q_handle: u32) -> u32 {
        if !self.base_from_qdisc {
            return self.baseclass;
        }
        let b = (q_handle & 0xFFFF_0000) | (self.baseclass & 0xFFFF);
        if b & 0xFFFF == 0 {
            b | 1
        } else {
            b
        }
    }
}

impl Flow {
    /// `flow_change`.
    fn change_opts(
        &mut self,
        handle: u32,
        o: &FlowOpts,
        fh: Option<u32>,
        acts: &mut ActCtx,
    ) -> Result<(), FilterError> {
        let einval = FilterError::Errno("Invalid argument");
        // The attribute policy (NLA_POLICY_MAX 31) is checked while parsing.
        if o.rshift.is_some_and(|r| r > 31) {
            return Err(FilterError::Errno("Numerical result out of range"));
        }
        if o.baseclass.is_some_and(|b| b & 0xFFFF == 0) {
            return Err(einval);
        }
        let mut nkeys = 0;
        if let Some(k) = o.keys {
            nkeys = k.count_ones();
            if nkeys == 0 {
                return Err(einval);
            }
            if 31 - k.leading_zeros() > 17 {
                return Err(FilterError::Errno("Operation not supported"));
            }
        }
        let exts = acts.init(&o.exts)?;
        let old = fh.and_then(|h| self.filters.iter().position(|f| f.handle == h));
        let now = acts.now.0;
        let mut f = match old {
            Some(i) => {
                let p = &self.filters[i];
                if p.handle != handle && handle != 0 {
                    return Err(einval);
                }
                let mode = o.mode;
                if mode != MODE_HASH && nkeys > 1 {
                    return Err(einval);
                }
                let mut perturb = if mode == MODE_HASH { p.perturb } else { 0 };
                if let Some(s) = o.perturb {
                    if mode != MODE_HASH {
                        return Err(einval);
                    }
                    perturb = s.wrapping_mul(HZ as u32);
                }
                FlowFilter {
                    handle: p.handle,
                    keymask: p.keymask,
                    mode,
                    mask: p.mask,
                    xor: p.xor,
                    rshift: p.rshift,
                    addend: p.addend,
                    divisor: p.divisor,
                    baseclass: p.baseclass,
                    base_from_qdisc: p.base_from_qdisc,
                    perturb,
                    tree: Tree::default(),
                    exts,
                    hashrnd: AtomicU32::new(p.hashrnd.load(Ordering::Relaxed)),
                    rng: AtomicU64::new(p.rng.load(Ordering::Relaxed)),
                    next_perturb: AtomicU64::new(0),
                }
            }
            None => {
                if handle == 0 || o.keys.is_none() {
                    return Err(einval);
                }
                let mode = o.mode;
                if mode != MODE_HASH && nkeys > 1 {
                    return Err(einval);
                }
                let mut perturb = 0;
                if let Some(s) = o.perturb {
                    if mode != MODE_HASH {
                        return Err(einval);
                    }
                    perturb = s.wrapping_mul(HZ as u32);
                }
                let base = o.baseclass.unwrap_or(0);
                let mut rng = SplitMix64(((self.pref as u64) << 32) | handle as u64);
                let hashrnd = rng.next_u32();
                FlowFilter {
                    handle,
                    keymask: 0,
                    mode,
                    mask: !0,
                    xor: 0,
                    rshift: 0,
                    addend: 0,
                    divisor: 0,
                    baseclass: base,
                    base_from_qdisc: base & 0xFFFF_0000 == 0,
                    perturb,
                    tree: Tree::default(),
                    exts,
                    hashrnd: AtomicU32::new(hashrnd),
                    rng: AtomicU64::new(rng.0),
                    next_perturb: AtomicU64::new(0),
                }
            }
        };
        if let Some(k) = o.keys {
            f.keymask = k;
        }
        if let Some((m, x)) = o.mask_xor {
            (f.mask, f.xor) = (m, x);
        }
        if let Some(r) = o.rshift {
            f.rshift = r;
        }
        if let Some(a) = o.addend {
            f.addend = a;
        }
        if let Some(d) = o.divisor {
            f.divisor = d;
        }
        if let Some(b) = o.baseclass.filter(|&b| b != 0) {
            if old.is_some() {
                (f.baseclass, f.base_from_qdisc) = (b, false);
            }
        }
        f.tree = o.tree.clone().unwrap_or_default();
        if f.perturb != 0 {
            f.next_perturb.store(now + f.perturb as u64 * (1_000_000_000 / HZ), Ordering::Relaxed);
        }
        match old {
            Some(i) => self.filters[i] = f,
            None => self.filters.push(f),
        }
        Ok(())
    }

    /// `flow_classify`.
    fn classify_pkt(&self, pkt: &mut Packet, hdr: &Headers, q_handle: u32, now: Instant) -> Option<(i32, TcfResult)> {
        for f in &self.filters {
            if !f.tree.matches(pkt, hdr) {
                continue;
            }
            let mut keys = [0u32; 18];
            let mut n = 0;
            let mut mask = f.keymask;
            while mask != 0 {
                let key = mask.trailing_zeros() as usize;
                mask &= !(1 << key);
                keys[n] = key_get(key, pkt, hdr);
                n += 1;
            }
            let mut classid = if f.mode == MODE_HASH {
                f.perturb(now);
                jhash2(&keys[..n], f.hashrnd.load(Ordering::Relaxed))
            } else {
                let c = (keys[0] & f.mask) ^ f.xor;
                (c >> f.rshift).wrapping_add(f.addend)
            };
            if f.divisor != 0 {
                classid %= f.divisor;
            }
            let base = f.baseclass(q_handle);
            let mut res = TcfResult::unbound((base & 0xFFFF_0000) | (base.wrapping_add(classid) & 0xFFFF));
            let r = f.exts.exec(pkt, now, &mut res);
            if r >= 0 {
                return Some((r, res));
            }
        }
        None
    }

    /// `flow_walk` + `flow_dump` + tc's `flow_print_opt`.
    fn print(&self, ctx: &super::DumpCtx, out: &mut Out) {
        for f in &self.filters {
            ctx.entry(out, f.handle, Some(&f.exts), |out| {
                let h = c_hex(f.handle);
                out.string("handle", format_args!("handle {h} "), &h);
                let mode = if f.mode == MODE_HASH { "hash" } else { "map" };
                out.string("mode", format_args!("{mode} "), mode);
                out.open_array("keys", "keys");
                let mut sep = " ";
                for (i, k) in KEYS.iter().enumerate() {
                    if f.keymask & (1 << i) != 0 {
                        out.fp(format_args!("{sep}"));
                        out.bare_string(format_args!("{k}"), k);
                        sep = ",";
                    }
                }
                out.close_array(" ");
                if f.mask != !0 || f.xor != 0 {
                    let or = (f.mask & f.xor) ^ f.xor;
                    let xor = f.mask & f.xor;
                    if f.mask != !0 {
                        let v = c_hex(f.mask);
                        out.string("and", format_args!("and 0x{:08x} ", f.mask), &v);
                    }
                    if xor != 0 {
                        let v = c_hex(xor);
                        out.string("xor", format_args!("xor 0x{xor:08x} "), &v);
                    }
                    if or != 0 {
                        let v = c_hex(or);
                        out.string("or", format_args!("or 0x{or:08x} "), &v);
                    }
                }
                if f.rshift != 0 {
                    out.uint("rshift", format_args!("rshift {} ", f.rshift), f.rshift as u64);
                }
                if f.addend != 0 {
                    let v = c_hex(f.addend);
                    out.string("addend", format_args!("addend 0x{:x} ", f.addend), &v);
                }
                if f.divisor != 0 {
                    out.uint("divisor", format_args!("divisor {} ", f.divisor), f.divisor as u64);
                }
                let base = f.baseclass(ctx.q_handle);
                if base != 0 {
                    let c = crate::tc::show_classid(base);
                    out.string("baseclass", format_args!("baseclass {c} "), &c);
                }
                if f.perturb != 0 {
                    let s = f.perturb / HZ as u32;
                    out.uint("perturb", format_args!("perturb {s}sec "), s as u64);
                }
                f.tree.print(out);
                if !f.exts.is_empty() && !f.exts.legacy_police {
                    out.nl();
                }
                f.exts.print(out, ctx.now);
            });
        }
    }
}

impl super::Classifier for Flow {
    fn kind(&self) -> &'static str {
        "flow"
    }
    fn classify(&self, pkt: &mut Packet, hdr: &Headers, q_handle: u32, now: Instant) -> Option<(i32, TcfResult)> {
        self.classify_pkt(pkt, hdr, q_handle, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        self.filters.iter().find(|f| f.handle == handle).map(|f| f.handle)
    }
    /// flow binds no class (it has no `bind_class`).
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn std::any::Any>,
        _tmplt: Option<&dyn std::any::Any>,
        fh: Option<u32>,
        acts: &mut ActCtx,
        _: &mut Binds,
    ) -> Result<(), FilterError> {
        match opts {
            None => Err(FilterError::Errno("Invalid argument")),
            Some(_) => super::with_opts(opts, |o: &FlowOpts| self.change_opts(handle, o, fh, acts)),
        }
    }
    fn delete(&mut self, handle: u32, _: &mut Binds) -> Result<bool, FilterError> {
        self.filters.retain(|f| f.handle != handle);
        Ok(self.filters.is_empty())
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        self.print(ctx, out)
    }
    /// Results are made per packet: no filter keeps a class.
    fn for_each_class(&self, _: &mut dyn FnMut(TcfResult)) {}
    fn for_each_class_mut(&mut self, _: &mut dyn FnMut(u32, &mut Option<u32>)) {}
    fn for_each_exts(&self, f: &mut dyn FnMut(&Exts)) {
        self.filters.iter().for_each(|x| f(&x.exts));
    }
    fn keeps_dst(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tc::{makeargs, Tc};
    use crate::tree::DevSpec;
    use crate::FlowKey;

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a);
        m
    }

    fn pkt(dst: [u8; 4], dport: u16) -> Packet {
        let f = FlowKey { src: mapped([1, 2, 3, 4]), dst: mapped(dst), sport: 999, dport, proto: 6 };
        Packet::new(1, 100).with_flow(f)
    }

    fn tc_with(filter: &str) -> Tc {
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        for l in ["qdisc add dev eth0 root handle 1: prio bands 16", filter] {
            let r = tc.run(&makeargs(l));
            assert_eq!(r.code, 0, "{l}: {}", r.stderr);
        }
        tc
    }

    fn class_of(tc: &Tc, p: &Packet, now: Instant) -> u32 {
        let b = tc.devices[0].root.q.as_classful().unwrap().block(0).unwrap();
        match b.classify(&mut p.clone(), now) {
            Some(super::super::Verdict::Class(r)) => r.classid,
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn map_mode_arithmetic() {
        let tc =
            tc_with("filter add dev eth0 parent 1: protocol ip prio 1 handle 1 flow map key dst and 0xff addend 1");
        // (10.1.2.3 & 0xff) + 1 = 4 on the default baseclass 1:1: 1:5.
        assert_eq!(class_of(&tc, &pkt([10, 1, 2, 3], 80), Instant::ZERO), 0x1_0005);
        let tc = tc_with(
            "filter add dev eth0 parent 1: protocol ip prio 1 handle 1 flow map key proto-dst divisor 3 baseclass 1:4",
        );
        // 80 % 3 = 2: 1:6.
        assert_eq!(class_of(&tc, &pkt([10, 1, 2, 3], 80), Instant::ZERO), 0x1_0006);
        let tc = tc_with(
            "filter add dev eth0 parent 1: protocol ip prio 1 handle 1 flow map key dst xor 0xff rshift 4 or 0x1",
        );
        // ((0x0a010203 | 1) ^ 0xff) >> 4 wraps into the minor: 0x0a0102fc >> 4 = 0xa0102f.
        assert_eq!(class_of(&tc, &pkt([10, 1, 2, 3], 80), Instant::ZERO), 0x1_0000 | ((1 + 0x00a0_102f) & 0xFFFF));
    }

    #[test]
    fn hash_mode_is_deterministic_and_perturbed() {
        let f = "filter add dev eth0 parent 1: protocol ip prio 1 handle 1 flow hash keys dst,proto-dst divisor 8 perturb 10";
        let (a, b) = (tc_with(f), tc_with(f));
        let flows: Vec<Packet> = (0..64).map(|i| pkt([10, 0, 0, i as u8], 1000 + i)).collect();
        let classes = |tc: &Tc, now: Instant| -> Vec<u32> { flows.iter().map(|p| class_of(tc, p, now)).collect() };
        let t0 = classes(&a, Instant::ZERO);
        assert_eq!(t0, classes(&b, Instant::ZERO));
        assert!(t0.iter().all(|c| (0x1_0001..=0x1_0008).contains(c)));
        assert!(t0.iter().collect::<std::collections::BTreeSet<_>>().len() > 4, "the hash spreads: {t0:?}");
        // Before the perturbation period nothing moves; after it the key changes.
        assert_eq!(classes(&a, Instant(9_999_999_999)), t0);
        let t1 = classes(&a, Instant(10_000_000_000));
        assert_ne!(t1, t0);
        assert_eq!(t1, classes(&b, Instant(10_000_000_000)));
    }

    /// `iif` is skb_iif (0 for a packet this host sends, the input device of one it
    /// forwards or receives); with no conntrack entry `nfct` is 0 and the `nfct-*`
    /// keys are their plain counterparts; `sk-uid`/`sk-gid` are the socket's.
    #[test]
    fn skb_keys_iif_nfct_and_credentials() {
        let f = |key: &str| format!("filter add dev eth0 parent 1: protocol ip prio 1 handle 1 flow map key {key}");
        let p = pkt([10, 1, 2, 3], 80);
        let tc = tc_with(&f("iif"));
        assert_eq!(class_of(&tc, &p, Instant::ZERO), 0x1_0001);
        let fwd = crate::classify::with_origin(None, 3, || class_of(&tc, &p, Instant::ZERO));
        assert_eq!(fwd, 0x1_0004);
        let tc = tc_with(&f("nfct addend 2"));
        assert_eq!(class_of(&tc, &p, Instant::ZERO), 0x1_0003);
        for (nfct, plain) in
            [("nfct-src", "src"), ("nfct-dst", "dst"), ("nfct-proto-src", "proto-src"), ("nfct-proto-dst", "proto-dst")]
        {
            let a = class_of(&tc_with(&format!("{} and 0xff divisor 16", f(nfct))), &p, Instant::ZERO);
            let b = class_of(&tc_with(&format!("{} and 0xff divisor 16", f(plain))), &p, Instant::ZERO);
            assert_eq!(a, b, "{nfct}");
        }
        // dst 10.1.2.3 & 0xff = 3, 80 % 16 = 0: the fallbacks read the packet.
        assert_eq!(class_of(&tc_with(&format!("{} and 0xff", f("nfct-dst"))), &p, Instant::ZERO), 0x1_0004);
        assert_eq!(class_of(&tc_with(&format!("{} divisor 16", f("nfct-proto-dst"))), &p, Instant::ZERO), 0x1_0001);
        let sk = crate::Socket { id: 1, uid: 7, gid: 5, ..Default::default() };
        let owned = p.clone().with_socket(std::sync::Arc::new(sk));
        for (key, with, without) in [("sk-uid", 0x1_0008, 0x1_0001), ("sk-gid", 0x1_0006, 0x1_0001)] {
            let tc = tc_with(&f(key));
            assert_eq!(
                (class_of(&tc, &owned, Instant::ZERO), class_of(&tc, &p, Instant::ZERO)),
                (with, without),
                "{key}"
            );
        }
    }

    #[test]
    fn jhash2_matches_the_kernel() {
        // No words: the initial value alone.
        assert_eq!(jhash2(&[], 0), 0xdead_beef);
        assert_eq!(jhash2(&[], 1), 0xdead_bef0);
        // Every word and the seed count.
        let h = jhash2(&[1, 2, 3, 4], 0);
        assert_ne!(h, jhash2(&[1, 2, 3, 5], 0));
        assert_ne!(h, jhash2(&[0, 2, 3, 4], 0));
        assert_ne!(h, jhash2(&[1, 2, 3, 4], 1));
    }
}
