//! The pedit action: rewrite 32-bit words of the packet's headers under a mask.
//!
//! tc side: tc/m_pedit.c (`parse_pedit`, `parse_munge`, `parse_offset`,
//! `parse_cmd`, `pack_key*`, `pack_mac`, `pack_ipv6`, `print_pedit`) and the layered
//! keys of tc/p_ip.c, p_ip6.c, p_tcp.c, p_udp.c, p_eth.c, p_icmp.c. Kernel side:
//! net/sched/act_pedit.c (`tcf_pedit_init`, `tcf_pedit_act`,
//! `pedit_skb_hdr_offset`, `tcf_pedit_dump`, `tcf_pedit_offload_act_setup`).
//!
//! # Model
//!
//! tc turns every edit into keys: a byte offset (a multiple of 4) from a header,
//! a mask of the bits to keep and a value, `(word & mask) ^ val` (`set`), or with
//! `ex`'s `add` `(word & mask) ^ ((word + val) & ~mask)`. Legacy (non-`ex`) keys
//! count from the network header; `ex` keys name their header (`eth`, `ipv4`,
//! `ipv6`, `tcp`, `udp`). A key whose word lies outside the packet (before the
//! Ethernet header, past its length), a transport key on a packet that is not IP
//! (or an IPv6 packet whose next header is not that protocol), or an `at` byte out
//! of bounds stops the action: the kernel counts an overlimit, and the verdict is
//! the control (default `pass`) all the same.
//!
//! The edits are applied to the headers the engine synthesizes for a packet with a
//! flow ([`Headers`]: Ethernet, IPv4 with IHL 5 or IPv6, TCP/UDP/SCTP ports), and
//! what the engine's [`Packet`] carries is read back: the DS field (IPv4 TOS / IPv6
//! traffic class, so `ip dsfield`/`ip tos`/`ip6 traffic_class` steer dsmark, prio
//! bands by TOS, u32 and flower matches downstream), the IP protocol, the source and
//! destination addresses, and the TCP/UDP/SCTP ports. Every other byte a key may
//! touch — the MAC addresses and ethertype, TTL / hop limit, IHL, IP id and flags,
//! checksums, TCP flags, UDP length, payload — is not carried by the model: such a
//! key passes its bounds checks and is counted like any other, and has no effect.
//! A packet without a flow has no header bytes at all here: its keys are
//! bounds-checked against its length and change nothing, and its transport keys
//! fail as on a non-IP frame.
//!
//! tc parses `icmp` keys with a parser that refuses everything (p_icmp.c), and
//! `retain` only for fields of at most 32 bits, as it does.

use std::net::Ipv4Addr;

use crate::classify::action::{parse_action_control_dflt, print_action_control, Fail, TC_ACT_OK};
use crate::classify::{FilterError, Headers};
use crate::packet::Packet;
use crate::tc::{matches, units, Args, Out, TcError};

const USAGE: &str = "Usage: ... pedit munge [ex] <MUNGE> [CONTROL]
Where: MUNGE := <RAW>|<LAYERED>
\t<RAW>:= <OFFSETC>[ATC]<CMD>
 \t\tOFFSETC:= offset <offval> <u8|u16|u32>
\t\tATC:= at <atval> offmask <maskval> shift <shiftval>
\t\tNOTE: offval is byte offset, must be multiple of 4
\t\tNOTE: maskval is a 32 bit hex number
 \t\tNOTE: shiftval is a shift value
\t\tCMD:= clear | invert | set <setval> | add <addval> | decrement | retain
\t<LAYERED>:= ip <ipdata> | ip6 <ip6data>
 \t\t| udp <udpdata> | tcp <tcpdata> | icmp <icmpdata>
\tCONTROL:= reclassify | pipe | drop | continue | pass |
\t          goto chain <CHAIN_INDEX>
\tNOTE: if 'ex' is set, extended functionality will be supported (kernel >= 4.11)
For Example usage look at the examples directory
";

/// MAX_OFFS: keys tc packs into one action.
const MAX_OFFS: usize = 128;

/// `enum pedit_header_type`, with tc's names (NETWORK prints none).
pub const HTYPE_NETWORK: u16 = 0;
pub const HTYPE_ETH: u16 = 1;
pub const HTYPE_IP4: u16 = 2;
pub const HTYPE_IP6: u16 = 3;
pub const HTYPE_TCP: u16 = 4;
pub const HTYPE_UDP: u16 = 5;
const HTYPE_NAMES: [&str; 6] = ["", "eth", "ipv4", "ipv6", "tcp", "udp"];

/// `enum pedit_cmd`.
pub const CMD_SET: u16 = 0;
pub const CMD_ADD: u16 = 1;

/// ETH_P_IP, ETH_P_IPV6.
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
/// The Ethernet header in front of the network header.
const ETH_HLEN: i64 = 14;

/// One key (`struct tc_pedit_key` + `struct tcf_pedit_key_ex`), its words in host
/// order as tc prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Key {
    pub mask: u32,
    pub val: u32,
    pub off: u32,
    pub at: u32,
    pub offmask: u32,
    pub shift: u32,
    pub htype: u16,
    pub cmd: u16,
}

/// What tc sends: `struct tc_pedit_sel` and, with `ex`, TCA_PEDIT_KEYS_EX.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub index: u32,
    pub params: Pedit,
}

/// `struct tcf_pedit_parms` and the control verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pedit {
    pub action: i32,
    pub keys: Vec<Key>,
    /// Sent as TCA_PEDIT_PARMS_EX with TCA_PEDIT_KEYS_EX (`tcfp_keys_ex` set).
    pub extended: bool,
}

/// The value types of `parse_val` (TU32, TIPV4, TIPV6, TMAC).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ty {
    U32,
    Ip4,
    Ip6,
    Mac,
}

/// PEDIT_ALLOW_DEC.
const ALLOW_DEC: u32 = 1;

/// A failed key: what tc printed (the caller adds its own lines), or an exit.
type R<T> = Result<T, Fail>;

fn ret<T>(m: &str) -> R<T> {
    Err(Fail::Ret(m.to_string()))
}

/// `NEXT_ARG`: the word after `i`, which must exist.
fn next_arg(w: &[String], i: &mut usize) -> R<()> {
    *i += 1;
    if *i >= w.len() {
        return Err(Fail::Exit(TcError::incomplete()));
    }
    Ok(())
}

/// m_pedit.c `parse_pedit`, at the word `pedit`.
pub(crate) fn parse(a: &mut Args) -> Result<Spec, Fail> {
    let w = a.rest();
    let base = a.pos();
    let mut p = Spec::default();
    let mut i = 0;
    let mut ok = 0;
    while i < w.len() {
        let word = w[i].as_str();
        if matches(word, "pedit") {
            next_arg(w, &mut i)?;
            ok += 1;
            if matches(&w[i], "ex") {
                if ok > 1 {
                    return ret(&format!("'ex' must be before first 'munge'\n{USAGE}"));
                }
                p.params.extended = true;
                next_arg(w, &mut i)?;
            }
        } else if matches(word, "help") {
            return Err(Fail::Exit(TcError::usage(USAGE)));
        } else if matches(word, "munge") {
            if ok == 0 {
                return ret(&format!("Bad pedit construct ({word})\n{USAGE}"));
            }
            next_arg(w, &mut i)?;
            if let Err(e) = parse_munge(w, &mut i, &mut p.params) {
                return Err(match e {
                    Fail::Ret(m) => {
                        let at = w.get(i).map(String::as_str).unwrap_or("(null)");
                        Fail::Ret(format!("{m}Bad pedit construct ({at})\n{USAGE}"))
                    }
                    x => x,
                });
            }
            ok += 1;
        } else {
            break;
        }
    }
    if ok == 0 {
        return ret(USAGE);
    }
    a.set_pos(base + i);
    p.params.action = parse_action_control_dflt(a, TC_ACT_OK)?;
    if a.peek().is_some_and(|w| matches(w, "index")) {
        a.next();
        match a.value().ok().and_then(units::get_unsigned10) {
            Some(i) => p.index = i,
            None => return ret("Pedit: Illegal \"index\"\n"),
        }
    }
    Ok(p)
}

/// `parse_munge`: at the word after `munge`. On failure `i` is where tc's cursor
/// stood (the layered kind's name, or wherever `parse_offset` left it).
fn parse_munge(w: &[String], i: &mut usize, sel: &mut Pedit) -> R<()> {
    let at = *i;
    let mut k = Key::default();
    if matches(&w[at], "offset") {
        next_arg(w, i)?;
        return parse_offset(w, i, sel, &mut k);
    }
    let kind = w[at].as_str();
    next_arg(w, i)?;
    let r = match kind {
        "ip" => parse_ip(w, i, sel, &mut k),
        "ip6" => parse_ip6(w, i, sel, &mut k),
        "tcp" | "udp" => parse_l4(w, i, sel, &mut k, kind == "tcp"),
        "eth" => parse_eth(w, i, sel, &mut k),
        // p_icmp.c refuses everything.
        "icmp" => ret(""),
        // pedit_parse_nopopt: no module for the kind.
        _ => ret(&format!("Unknown action  hence option \"{}\" is unparsable\n", w[*i])),
    };
    r.map_err(|e| {
        *i = at;
        match e {
            Fail::Ret(m) => Fail::Ret(format!("{m}bad pedit parsing\n")),
            x => x,
        }
    })
}

/// `parse_offset`: at the offset's value.
fn parse_offset(w: &[String], i: &mut usize, sel: &mut Pedit, k: &mut Key) -> R<()> {
    let Some(off) = units::get_integer(&w[*i]) else { return ret("") };
    k.off = off as u32;
    let mut j = *i + 1;
    let Some(width) = w.get(j) else { return ret("") };
    let (len, retain) = if matches(width, "u32") {
        (4, 0xFFFF_FFFF)
    } else if matches(width, "u16") {
        (2, 0xFFFF)
    } else if matches(width, "u8") {
        (1, 0xFF)
    } else {
        return ret("");
    };
    next_arg(w, &mut j)?;
    if matches(&w[j], "at") {
        next_arg(w, &mut j)?;
        let Some(atv) = units::get_u32(&w[j]) else { return ret("") };
        next_arg(w, &mut j)?;
        let Some(offmask) = units::get_u32_base16(&w[j]) else { return ret("") };
        next_arg(w, &mut j)?;
        let Some(shift) = units::get_u32(&w[j]) else { return ret("") };
        next_arg(w, &mut j)?;
        (k.at, k.offmask, k.shift) = (atv, offmask, shift);
    }
    let r = parse_cmd(w, &mut j, len, Ty::U32, retain, sel, k, 0);
    *i = j;
    r
}

/// p_ip.c `parse_ip`: at the field's name.
fn parse_ip(w: &[String], i: &mut usize, sel: &mut Pedit, k: &mut Key) -> R<()> {
    if w.len() - *i < 2 {
        return ret("");
    }
    k.htype = if sel.extended { HTYPE_IP4 } else { HTYPE_NETWORK };
    let f = w[*i].as_str();
    // (offset, length, type, retain, flags), in tc's order of tests.
    let field = match f {
        "src" => (12, 4, Ty::Ip4, 0xFFFF_FFFF, 0),
        "dst" => (16, 4, Ty::Ip4, 0xFFFF_FFFF, 0),
        _ if f == "tos" || matches(f, "dsfield") => (1, 1, Ty::U32, 0xFF, 0),
        "ihl" => (0, 1, Ty::U32, 0x0F, 0),
        "ttl" => (8, 1, Ty::U32, 0xFF, ALLOW_DEC),
        "protocol" => (9, 1, Ty::U32, 0xFF, 0),
        _ if matches(f, "precedence") => (1, 1, Ty::U32, 0xFF, 0),
        "nofrag" => (6, 1, Ty::U32, 0x3F, 0),
        "firstfrag" => (6, 1, Ty::U32, 0x1F, 0),
        "ce" => (6, 1, Ty::U32, 0x80, 0),
        "df" => (6, 1, Ty::U32, 0x40, 0),
        "mf" => (6, 1, Ty::U32, 0x20, 0),
        // Fields past the IP header are for the legacy form only.
        _ if sel.extended => return ret(""),
        "dport" => (22, 2, Ty::U32, 0xFFFF, 0),
        "sport" => (20, 2, Ty::U32, 0xFFFF, 0),
        "icmp_type" | "icmp_code" => (20, 1, Ty::U32, 0xFF, 0),
        _ => return ret(""),
    };
    field_cmd(w, i, sel, k, field)
}

/// p_ip6.c `parse_ip6`.
fn parse_ip6(w: &[String], i: &mut usize, sel: &mut Pedit, k: &mut Key) -> R<()> {
    if w.len() - *i < 2 || !sel.extended {
        return ret("");
    }
    k.htype = HTYPE_IP6;
    let field = match w[*i].as_str() {
        "src" => (8, 16, Ty::Ip6, 0xFFFF_FFFF, 0),
        "dst" => (24, 16, Ty::Ip6, 0xFFFF_FFFF, 0),
        "flow_lbl" => (0, 4, Ty::U32, 0x0007_FFFF, 0),
        "payload_len" => (4, 2, Ty::U32, 0xFFFF, 0),
        "nexthdr" => (6, 1, Ty::U32, 0xFF, 0),
        "hoplimit" => (7, 1, Ty::U32, 0xFF, ALLOW_DEC),
        "traffic_class" => {
            field_cmd(w, i, sel, k, (1, 1, Ty::U32, 0xFF, 0))?;
            // The class straddles two bytes: the key moves up by four bits.
            let last = sel.keys.last_mut().expect("a key was packed");
            last.mask = (last.mask << 4) | 0xf;
            last.val <<= 4;
            return Ok(());
        }
        _ => return ret(""),
    };
    field_cmd(w, i, sel, k, field)
}

/// p_tcp.c `parse_tcp` / p_udp.c `parse_udp`.
fn parse_l4(w: &[String], i: &mut usize, sel: &mut Pedit, k: &mut Key, tcp: bool) -> R<()> {
    if w.len() - *i < 2 || !sel.extended {
        return ret("");
    }
    k.htype = if tcp { HTYPE_TCP } else { HTYPE_UDP };
    let field = match w[*i].as_str() {
        "sport" => (0, 2, Ty::U32, 0xFFFF, 0),
        "dport" => (2, 2, Ty::U32, 0xFFFF, 0),
        "flags" if tcp => (13, 1, Ty::U32, 0xFF, 0),
        _ => return ret(""),
    };
    field_cmd(w, i, sel, k, field)
}

/// p_eth.c `parse_eth`.
fn parse_eth(w: &[String], i: &mut usize, sel: &mut Pedit, k: &mut Key) -> R<()> {
    if w.len() - *i < 2 || !sel.extended {
        return ret("");
    }
    k.htype = HTYPE_ETH;
    let field = match w[*i].as_str() {
        "type" => (12, 2, Ty::U32, 0xFFFF, 0),
        "dst" => (0, 6, Ty::Mac, 0xFFFF_FFFF, 0),
        "src" => (6, 6, Ty::Mac, 0xFFFF_FFFF, 0),
        _ => return ret(""),
    };
    field_cmd(w, i, sel, k, field)
}

/// A layered field: its offset, then `parse_cmd` at the command word.
fn field_cmd(w: &[String], i: &mut usize, sel: &mut Pedit, k: &mut Key, f: (u32, u32, Ty, u32, u32)) -> R<()> {
    let (off, len, ty, retain, flags) = f;
    next_arg(w, i)?;
    k.off = off;
    parse_cmd(w, i, len, ty, retain, sel, k, flags)
}

/// `parse_cmd`: at the command word. Its early refusals leave `i` there; once it
/// packs, `i` is past what it read.
#[allow(clippy::too_many_arguments)]
fn parse_cmd(
    w: &[String],
    i: &mut usize,
    len: u32,
    ty: Ty,
    mut retain: u32,
    sel: &mut Pedit,
    k: &mut Key,
    flags: u32,
) -> R<()> {
    let o: u32 = match len {
        2 => 0xFFFF,
        4 => 0xFFFF_FFFF,
        _ => 0xFF,
    };
    // `val`/`mask` of tc: four words, read as bytes for addresses.
    let mut val = [0u8; 16];
    let mut mask = 0u32;
    let mut j = *i;
    let c = w[j].as_str();
    if matches(c, "invert") {
        val[..4].copy_from_slice(&o.to_le_bytes());
        mask = o;
    } else if matches(c, "set") || matches(c, "add") {
        if matches(c, "add") {
            k.cmd = CMD_ADD;
        }
        if !sel.extended && k.cmd != CMD_SET {
            return ret("Non extended mode. only 'set' command is supported\n");
        }
        next_arg(w, &mut j)?;
        parse_val(&w[j], ty, &mut val)?;
    } else if matches(c, "decrement") {
        if flags & ALLOW_DEC == 0 {
            return ret("decrement command is not supported for this field\n");
        }
        if !sel.extended {
            return ret("Non extended mode. only 'set' command is supported\n");
        }
        k.cmd = CMD_ADD;
        // Adding all ones subtracts one.
        val[..4].copy_from_slice(&retain.to_le_bytes());
    } else if matches(c, "preserve") {
        retain = 0;
    } else if !matches(c, "clear") {
        return ret("");
    }
    j += 1;
    if w.get(j).is_some_and(|r| matches(r, "retain")) {
        next_arg(w, &mut j)?;
        let Some(r) = units::get_u32(&w[j]) else { return ret("") };
        retain = r;
        j += 1;
    }
    if len > 4 && retain != !0 {
        return ret("retain is not supported for fields longer the 32 bits\n");
    }
    *i = j;
    match ty {
        Ty::Mac => pack_mac(sel, k, &val),
        Ty::Ip6 => pack_ipv6(sel, k, &val),
        _ => {
            let v = u32::from_le_bytes([val[0], val[1], val[2], val[3]]);
            k.val = if ty == Ty::Ip4 { u32::from_be(v) } else { v };
            k.mask = mask;
            match len {
                1 => pack_key8(retain, sel, k),
                2 => pack_key16(retain, sel, k),
                _ => pack_key32(retain, sel, k),
            }
        }
    }
}

/// `parse_val` into tc's value words (bytes in memory order, as on x86).
fn parse_val(s: &str, ty: Ty, val: &mut [u8; 16]) -> R<()> {
    match ty {
        Ty::U32 => {
            let Some(v) = units::get_u32(s) else { return ret("") };
            val[..4].copy_from_slice(&v.to_le_bytes());
        }
        Ty::Ip4 | Ty::Ip6 => {
            let Some((a, _)) = crate::classify::u32::get_prefix(s, ty == Ty::Ip6) else { return ret("") };
            val[..a.len()].copy_from_slice(&a);
        }
        Ty::Mac => {
            let mac = ll_addr_a2n(s)?;
            if mac.len() != 6 {
                return ret("");
            }
            val[..6].copy_from_slice(&mac);
        }
    }
    Ok(())
}

/// lib/ll_addr.c `ll_addr_a2n` for a 6-byte address: the bytes it read (tc wants
/// exactly six).
fn ll_addr_a2n(arg: &str) -> R<Vec<u8>> {
    let bad = |p: &str| ret(&format!("\"{p}\" is invalid lladdr.\n"));
    if arg.contains('.') {
        if arg.parse::<Ipv4Addr>().is_err() {
            return bad(arg);
        }
        return Ok(vec![0; 4]);
    }
    let mut out = Vec::new();
    let mut rest = arg;
    loop {
        let (part, next) = match rest.split_once(':') {
            Some((p, n)) => (p, Some(n)),
            None => (rest, None),
        };
        match scan_hex(part) {
            Some(v) if (0..=255).contains(&v) => out.push(v as u8),
            _ => return bad(part),
        }
        match next {
            Some(n) if out.len() < 6 => rest = n,
            Some(_) => {
                // A seventh part: tc stops reading and counts one more.
                out.push(0);
                break;
            }
            None => break,
        }
    }
    Ok(out)
}

/// `sscanf(s, "%x", &int)`: white space, a sign, `0x`, then hex digits.
fn scan_hex(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let t = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) if h.starts_with(|c: char| c.is_ascii_hexdigit()) => h,
        _ => t,
    };
    let digits: String = t.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    if digits.is_empty() {
        return None;
    }
    let v = u64::from_str_radix(&digits, 16).unwrap_or(u64::MAX) as u32 as i32 as i64;
    Some(if neg { -v } else { v })
}

/// `pack_key`: append the key (tc refuses a 129th silently).
fn pack_key(sel: &mut Pedit, k: &Key) -> R<()> {
    if sel.keys.len() >= MAX_OFFS {
        return ret("");
    }
    if !k.off.is_multiple_of(4) {
        return ret("offsets MUST be in 32 bit boundaries\n");
    }
    let mut key = *k;
    if !sel.extended {
        if k.htype != HTYPE_NETWORK || k.cmd != CMD_SET {
            return ret("Munge parameters not supported. Use 'pedit ex munge ...'.\n");
        }
        (key.htype, key.cmd) = (HTYPE_NETWORK, CMD_SET);
    }
    sel.keys.push(key);
    Ok(())
}

fn pack_key32(retain: u32, sel: &mut Pedit, k: &mut Key) -> R<()> {
    if k.off > (k.off & !3) {
        return ret("pack_key32: 32 bit offsets must begin in 32bit boundaries\n");
    }
    k.val &= retain;
    k.mask |= !retain;
    pack_key(sel, k)
}

fn pack_key16(retain: u32, sel: &mut Pedit, k: &mut Key) -> R<()> {
    const M: [u32; 3] = [0x0000_FFFF, 0xFF00_00FF, 0xFFFF_0000];
    if k.val > 0xFFFF || k.mask > 0xFFFF {
        return ret("pack_key16 bad value\n");
    }
    let ind = (k.off & 3) as usize;
    if ind == 3 {
        return ret(&format!("pack_key16 bad index value {ind}\n"));
    }
    let stride = 8 * (2 - ind as u32);
    k.val = (k.val & retain) << stride;
    k.mask = ((k.mask | !retain) << stride) | M[ind];
    k.off &= !3;
    pack_key(sel, k)
}

fn pack_key8(retain: u32, sel: &mut Pedit, k: &mut Key) -> R<()> {
    const M: [u32; 4] = [0x00FF_FFFF, 0xFF00_FFFF, 0xFFFF_00FF, 0xFFFF_FF00];
    if k.val > 0xFF || k.mask > 0xFF {
        return ret(&format!("pack_key8 bad value (val {:x} mask {:x}\n", k.val, k.mask));
    }
    let ind = (k.off & 3) as usize;
    let stride = 8 * (3 - ind as u32);
    k.val = (k.val & retain) << stride;
    k.mask = ((k.mask | !retain) << stride) | M[ind];
    k.off &= !3;
    pack_key(sel, k)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// `pack_mac`: a word and a half-word, in the order the alignment allows.
fn pack_mac(sel: &mut Pedit, k: &mut Key, mac: &[u8; 16]) -> R<()> {
    let (first, second) = if k.off & 3 == 0 {
        k.mask = 0;
        k.val = be32(&mac[0..4]);
        let a = pack_key32(!0, sel, k);
        k.off = k.off.wrapping_add(4);
        k.mask = 0;
        k.val = u16::from_be_bytes([mac[4], mac[5]]) as u32;
        (a, pack_key16(!0, sel, k))
    } else if k.off & 1 == 0 {
        k.mask = 0;
        k.val = u16::from_be_bytes([mac[0], mac[1]]) as u32;
        let a = pack_key16(!0, sel, k);
        k.off = k.off.wrapping_add(4);
        k.mask = 0;
        k.val = be32(&mac[2..6]);
        (a, pack_key32(!0, sel, k))
    } else {
        return ret("pack_mac: mac offsets must begin in 32bit or 16bit boundaries\n");
    };
    first.and(second)
}

/// `pack_ipv6`: four words.
fn pack_ipv6(sel: &mut Pedit, k: &mut Key, a: &[u8; 16]) -> R<()> {
    if k.off & 3 != 0 {
        return ret("pack_ipv6: IPv6 offsets must begin in 32bit boundaries\n");
    }
    for w in a.chunks(4) {
        k.mask = 0;
        k.val = be32(w);
        pack_key32(!0, sel, k)?;
        k.off = k.off.wrapping_add(4);
    }
    Ok(())
}

// ---- kernel side ---------------------------------------------------------------------

impl Spec {
    /// `tcf_pedit_init` after the index lookup: no keys, no action.
    pub(crate) fn check_keys(&self) -> Result<(), FilterError> {
        if self.params.keys.is_empty() {
            return Err(FilterError::ext("act_pedit: Pedit requires keys to be passed"));
        }
        Ok(())
    }
}

/// The bytes a key may edit: the synthesized headers of [`Headers`], the
/// Ethernet header at 0, for a packet of `len` bytes.
struct Frame {
    bytes: [u8; Headers::LEN],
    len: i64,
    protocol: Option<u16>,
}

impl Frame {
    fn get(&self, at: i64) -> u8 {
        self.bytes.get(at as usize).copied().unwrap_or(0)
    }
    /// `offset_valid`: `n` bytes at `at` lie in the packet (no headroom here).
    fn valid(&self, at: i64, n: i64) -> bool {
        at >= 0 && at <= self.len - n
    }
    /// `pedit_skb_hdr_offset`: where the key's header starts.
    fn header(&self, htype: u16) -> Option<i64> {
        match htype {
            HTYPE_ETH => Some(0),
            HTYPE_NETWORK | HTYPE_IP4 | HTYPE_IP6 => Some(ETH_HLEN),
            HTYPE_TCP | HTYPE_UDP => {
                let proto = if htype == HTYPE_TCP { 6 } else { 17 };
                match self.protocol? {
                    ETH_P_IP => Some(ETH_HLEN + 4 * (self.get(ETH_HLEN) & 0x0f) as i64),
                    ETH_P_IPV6 if self.get(ETH_HLEN + 6) == proto => Some(ETH_HLEN + 40),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

impl Pedit {
    /// `tcf_pedit_dump`: `struct tc_pedit` (tc_gen, nkeys, flags, padded to 24)
    /// with its keys (24 bytes each), the extended keys' nest (htype and cmd, a u16
    /// each, per key) when extended, the times.
    pub(crate) fn dump_size(&self) -> usize {
        use super::{nla, TM};
        let n = self.keys.len();
        let ex = if self.extended { 4 + n * (4 + nla(2) + nla(2)) } else { 0 };
        nla(24 + 24 * n) + ex + TM
    }
    /// `tcf_pedit_act` on `pkt`'s headers: false when a key could not be applied
    /// (the caller counts the overlimit).
    pub fn act(&self, pkt: &mut Packet) -> bool {
        let h = Headers::of(pkt);
        let mut f =
            Frame { bytes: h.bytes(), len: pkt.len as i64, protocol: pkt.flow().is_some().then_some(h.protocol) };
        let ok = self.keys.iter().all(|k| self.apply(&mut f, k));
        if pkt.flow().is_some() {
            h.write_back(&f.bytes, pkt);
        }
        ok
    }

    /// One key of `tcf_pedit_act`.
    fn apply(&self, f: &mut Frame, k: &Key) -> bool {
        let (htype, cmd) = if self.extended { (k.htype, k.cmd) } else { (HTYPE_NETWORK, CMD_SET) };
        let Some(hoff) = f.header(htype) else { return false };
        let mut offset = k.off as i32 as i64;
        if k.offmask != 0 {
            let at = hoff + k.at as i32 as i64;
            if !f.valid(at, 1) {
                return false;
            }
            offset += ((f.get(at) as u32 & k.offmask) >> k.shift.min(31)) as i64;
            if offset % 4 != 0 {
                return false;
            }
        }
        let at = hoff + offset;
        if !f.valid(at, 4) {
            return false;
        }
        let cur = u32::from_be_bytes([f.get(at), f.get(at + 1), f.get(at + 2), f.get(at + 3)]);
        let val = match cmd {
            CMD_SET => k.val,
            CMD_ADD => cur.wrapping_add(k.val) & !k.mask,
            _ => return false,
        };
        let new = ((cur & k.mask) ^ val).to_be_bytes();
        for (i, b) in new.iter().enumerate() {
            if let Some(x) = f.bytes.get_mut(at as usize + i) {
                *x = *b;
            }
        }
        true
    }

    /// `tcf_pedit_offload_act_setup` of a standalone action: `ex` keys with one
    /// command for all (legacy keys have no command to offload).
    pub fn offloadable(&self) -> bool {
        self.extended && self.keys.iter().all(|k| k.cmd == self.keys[0].cmd)
    }

    /// m_pedit.c `print_pedit` up to the index line.
    pub fn print_head(&self, out: &mut Out) {
        out.string("kind", format_args!(" pedit "), "pedit");
        print_action_control(out, "action ", self.action, " ");
        let n = self.keys.len();
        out.uint("nkeys", format_args!("keys {n}\n"), n as u64);
    }

    /// m_pedit.c `print_pedit` after the index line: the keys.
    pub fn print_keys(&self, out: &mut Out) {
        out.open_array("keys", "");
        for (i, k) in self.keys.iter().enumerate() {
            let (htype, cmd) = if self.extended { (k.htype, k.cmd) } else { (HTYPE_NETWORK, CMD_SET) };
            out.open_object(None);
            out.fp(format_args!("\n\t key #{i}  at "));
            let off = k.off as i32 as i64;
            if htype != HTYPE_NETWORK {
                let name = match HTYPE_NAMES.get(htype as usize) {
                    Some(n) => n.to_string(),
                    None => format!("unknown({htype})"),
                };
                out.string("htype", format_args!("{name}"), &name);
                out.int("offset", format_args!("{off:+}"), off);
            } else {
                out.string("htype", format_args!(""), "network");
                out.int("offset", format_args!("{off}"), off);
            }
            let add = cmd == CMD_ADD;
            out.fp(format_args!(": {}", if add { "add" } else { "val" }));
            out.string("cmd", format_args!(""), if add { "add" } else { "set" });
            out.string("val", format_args!(" {:08x}", k.val), &format!("{:x}", k.val));
            out.string("mask", format_args!(" mask {:08x}", k.mask), &format!("{:x}", k.mask));
            out.close_object();
        }
        out.close_array("");
        out.nl();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::action::TC_ACT_PIPE;
    use crate::packet::FlowKey;

    fn spec(s: &str) -> Result<Spec, String> {
        crate::classify::act::parse_str(parse, s)
    }

    fn keys(s: &str) -> Vec<(u16, i32, u16, u32, u32)> {
        spec(s).unwrap().params.keys.iter().map(|k| (k.htype, k.off as i32, k.cmd, k.val, k.mask)).collect()
    }

    #[test]
    fn packs_keys_as_tc_does() {
        assert_eq!(keys("pedit munge offset 12 u32 set 0x90abcdef"), [(0, 12, 0, 0x90abcdef, 0)]);
        assert_eq!(
            keys("pedit munge offset 0 u8 set 0x12 munge offset 1 u16 set 0x3456 munge offset 3 u8 invert"),
            [(0, 0, 0, 0x1200_0000, 0x00ff_ffff), (0, 0, 0, 0x0034_5600, 0xff00_00ff), (0, 0, 0, 0xff, !0)]
        );
        assert_eq!(keys("pedit munge offset 8 u32 set 0x12345678 retain 0xff00"), [(0, 8, 0, 0x5600, 0xffff_00ff)]);
        assert_eq!(keys("pedit munge offset -14 u16 set 0"), [(0, -16, 0, 0, 0xffff_0000)]);
        assert_eq!(keys("pedit munge offset 4 u8 preserve"), [(0, 4, 0, 0, !0)]);
        assert_eq!(keys("pedit munge ip ihl set 0xff"), [(0, 0, 0, 0x0f00_0000, 0xf0ff_ffff)]);
        assert_eq!(keys("pedit ex munge ip ttl decrement"), [(HTYPE_IP4, 8, 1, 0xff00_0000, 0x00ff_ffff)]);
        assert_eq!(
            keys("pedit ex munge eth src set 11:22:33:44:55:66"),
            [(1, 4, 0, 0x1122, 0xffff_0000), (1, 8, 0, 0x3344_5566, 0)]
        );
        assert_eq!(keys("pedit ex munge eth dst invert"), [(1, 0, 0, 0xff00_0000, 0), (1, 4, 0, 0, 0xffff)]);
        assert_eq!(keys("pedit ex munge ip6 traffic_class set 0xb8"), [(3, 0, 0, 0x0b80_0000, 0xf00f_ffff)]);
        assert_eq!(keys("pedit ex munge ip6 src set 2001:db8::1").len(), 4);
        let s = spec("pedit ex munge udp sport set 53 retain 0xff pipe index 9").unwrap();
        assert_eq!((s.index, s.params.action, s.params.extended), (9, TC_ACT_PIPE, true));
        assert_eq!(s.params.keys[0].val, 0x0035_0000);
        assert_eq!(s.params.keys[0].mask, 0xff00_ffff);
    }

    #[test]
    fn refuses_with_tcs_words_and_cursor() {
        let tail = |m: &str, at: &str| format!("{m}Bad pedit construct ({at})\n{USAGE}");
        assert_eq!(
            spec("pedit munge offset 2 u32 set 1"),
            Err(tail("pack_key32: 32 bit offsets must begin in 32bit boundaries\n", "(null)"))
        );
        assert_eq!(
            spec("pedit munge offset 0 u8 add 1"),
            Err(tail("Non extended mode. only 'set' command is supported\n", "add"))
        );
        assert_eq!(spec("pedit munge offset 0 u64 set 1"), Err(tail("", "0")));
        assert_eq!(spec("pedit munge offset 0 u8 set 1 retain x"), Err(tail("", "set")));
        assert_eq!(
            spec("pedit munge ip ttl set 300"),
            Err(tail("pack_key8 bad value (val 12c mask 0\nbad pedit parsing\n", "ip"))
        );
        assert_eq!(
            spec("pedit ex munge eth src set %e:11:m2"),
            Err(tail("\"%e\" is invalid lladdr.\nbad pedit parsing\n", "eth"))
        );
        assert_eq!(spec("pedit ex munge eth dst set 11:22:33:44:55"), Err(tail("bad pedit parsing\n", "eth")));
        assert_eq!(
            spec("pedit ex munge foo bar"),
            Err(tail("Unknown action  hence option \"bar\" is unparsable\nbad pedit parsing\n", "foo"))
        );
        assert_eq!(spec("pedit munge ip"), Err("exit 255: Command line is not complete. Try option \"help\"\n".into()));
        assert_eq!(spec("pedit munge ip ttl set 1 index x"), Err("Pedit: Illegal \"index\"\n".into()));
        assert_eq!(
            spec("pedit munge ip ttl set 1 pedit ex"),
            Err(format!("'ex' must be before first 'munge'\n{USAGE}"))
        );
        assert_eq!(
            spec("pedit pipe index 3").unwrap().check_keys(),
            Err(FilterError::ext("act_pedit: Pedit requires keys to be passed"))
        );
    }

    fn tcp4() -> Packet {
        let mut src = [0u8; 16];
        src[10] = 0xff;
        src[11] = 0xff;
        let mut dst = src;
        src[12..].copy_from_slice(&[10, 0, 0, 1]);
        dst[12..].copy_from_slice(&[10, 0, 0, 2]);
        Packet::new(1, 100).with_flow(FlowKey { src, dst, sport: 1000, dport: 80, proto: 6 })
    }

    #[test]
    fn edits_what_the_packet_carries() {
        let e = spec("pedit ex munge ip dsfield set 0xb8 retain 0xfc munge ip src set 192.168.1.1 munge tcp dport set 8080 munge ip ttl set 1")
            .unwrap()
            .params;
        let mut p = tcp4();
        p.tos = 0x01;
        assert!(e.act(&mut p));
        let f = p.flow().unwrap();
        // `retain 0xfc` keeps the ECN bits; the TTL is not carried.
        assert_eq!((p.tos, f.src[12..].to_vec(), f.dport, f.sport), (0xb9, vec![192, 168, 1, 1], 8080, 1000));
        // add: 0xb8 + 4 under the byte's mask.
        let e = spec("pedit ex munge ip tos add 4").unwrap().params;
        assert!(e.act(&mut p));
        assert_eq!(p.tos, 0xbd);
        // A udp key on a TCP/IPv4 packet edits the same transport header (IHL 5).
        let e = spec("pedit ex munge udp sport set 7").unwrap().params;
        assert!(e.act(&mut p));
        assert_eq!(p.flow().unwrap().sport, 7);
        // Past the packet: an overlimit, nothing changed.
        let e = spec("pedit munge offset 84 u32 set 1 munge ip tos set 0").unwrap().params;
        let before = p.clone();
        assert!(!e.act(&mut p));
        assert_eq!(p, before);
        // A packet without a flow: bounds only; no transport header.
        let mut bare = Packet::new(2, 100);
        assert!(spec("pedit munge offset 80 u32 set 1").unwrap().params.act(&mut bare));
        assert!(!spec("pedit munge offset 84 u32 set 1").unwrap().params.act(&mut bare));
        assert!(!spec("pedit ex munge tcp sport set 1").unwrap().params.act(&mut bare));
        assert_eq!(bare, Packet::new(2, 100));
    }

    #[test]
    fn prints_as_tc() {
        let text = |s: &str| {
            let mut out = Out::text();
            let p = spec(s).unwrap().params;
            p.print_head(&mut out);
            p.print_keys(&mut out);
            out.into_string()
        };
        assert_eq!(
            text("pedit ex munge ip tos add 1 munge offset -14 u16 set 0 pipe"),
            " pedit action pipe keys 2\n\n\t key #0  at ipv4+0: add 00010000 mask ff00ffff\n\t key #1  at -16: val 00000000 mask ffff0000\n"
        );
        let mut out = Out::json(false);
        let p = spec("pedit munge offset 12 u32 set 0x90abcdef").unwrap().params;
        p.print_head(&mut out);
        p.print_keys(&mut out);
        assert_eq!(
            out.into_string(),
            "\"kind\":\"pedit\",\"control_action\":{\"type\":\"pass\"},\"nkeys\":1,\"keys\":[{\"htype\":\"network\",\
             \"offset\":12,\"cmd\":\"set\",\"val\":\"90abcdef\",\"mask\":\"0\"}]"
        );
    }
}
