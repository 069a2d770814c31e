//! htb's tc side: q_htb.c's option and class parsers.

use super::*;

/// What tc sends for `qdisc add … htb`: `struct tc_htb_glob` (TCA_HTB_INIT) plus the
/// optional TCA_HTB_DIRECT_QLEN and TCA_HTB_OFFLOAD attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HtbOpt {
    /// Always 3 from tc.
    pub version: u32,
    pub rate2quantum: u32,
    /// Minor of the default class (`default`, parsed as hex).
    pub defcls: u32,
    /// `debug`: accepted and ignored by the kernel.
    pub debug: u32,
    /// TCA_HTB_DIRECT_QLEN, sent only when given.
    pub direct_qlen: Option<u32>,
    /// TCA_HTB_OFFLOAD.
    pub offload: bool,
}

impl Default for HtbOpt {
    fn default() -> Self {
        HtbOpt { version: TC_HTB_PROTOVER, rate2quantum: 10, defcls: 0, debug: 0, direct_qlen: None, offload: false }
    }
}

/// What tc sends for `class add|change … htb`: `struct tc_htb_opt` (TCA_HTB_PARMS)
/// plus TCA_HTB_RATE64/CEIL64 for rates that do not fit 32 bits. (The rate tables
/// only matter to the kernel for link-layer detection when the ratespec says
/// "unaware", which tc never sends.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HtbClassOpt {
    pub rate: RateSpec,
    pub ceil: RateSpec,
    /// Rate bucket size in ticks (`tc_calc_xmittime(rate, burst)`).
    pub buffer: u32,
    /// Ceil bucket size in ticks.
    pub cbuffer: u32,
    /// 0 = computed by the kernel from rate / r2q.
    pub quantum: u32,
    pub prio: u32,
    pub rate64: Option<u64>,
    pub ceil64: Option<u64>,
}

/// q_htb.c `explain`.
pub(super) const USAGE: &str = "Usage: ... qdisc add ... htb [default N] [r2q N]
                      [direct_qlen P] [offload]
 default  minor id of class to which unclassified packets are sent {0}
 r2q      DRR quantums are computed as rate in Bps/r2q {10}
 debug    string of 16 numbers each 0-3 {0}

 direct_qlen  Limit of the direct queue {in packets}
 offload  enable hardware offload
... class add ... htb rate R1 [burst B1] [mpu B] [overhead O]
                      [prio P] [slot S] [pslot PS]
                      [ceil R2] [cburst B2] [mtu MTU] [quantum Q]
 rate     rate allocated to this class (class can still borrow)
 burst    max bytes burst which can be accumulated during idle period {computed}
 mpu      minimum packet size used in rate computations
 overhead per-packet size overhead used in rate computations
 linklay  adapting to a linklayer e.g. atm
 ceil     definite upper class rate (no borrows) {rate}
 cburst   burst but for ceil {computed}
 mtu      max packet size we create rate map for {1600}
 prio     priority of leaf; lower are served first {0}
 quantum  how much bytes to serve from leaf at once {use r2q}

TC HTB version 3.3
";

/// q_htb.c `explain1`.
fn explain1(what: &str) -> TcError {
    TcError::tc(format!("Illegal \"{what}\"\n{USAGE}"))
}

/// C `strtoul(s, &end, base)` for base 10 or 16 with iproute2's `get_u32`/`get_u16`
/// checks: the whole string must be consumed and the value fit `max`.
fn get_unsigned(s: &str, base: u32, max: u64) -> Option<u64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, mut body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if base == 16 {
        if let Some(b) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            if b.starts_with(|c: char| c.is_ascii_hexdigit()) {
                body = b;
            }
        }
    }
    if body.is_empty() || !body.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    // strtoul saturates at ULONG_MAX (ERANGE → get_u32 fails) and negates after a '-'.
    let v = u64::from_str_radix(body, base).ok()?;
    let v = if neg { v.wrapping_neg() } else { v };
    (v <= max).then_some(v)
}

fn get_u32(s: &str, base: u32) -> Option<u32> {
    get_unsigned(s, base, u32::MAX as u64).map(|v| v as u32)
}
fn get_u16(s: &str) -> Option<u16> {
    get_unsigned(s, 10, u16::MAX as u64).map(|v| v as u16)
}

/// tc side: mirrors `htb_parse_opt` in tc/q_htb.c.
pub fn parse(args: &mut Args) -> Result<HtbOpt, TcError> {
    let mut opt = HtbOpt::default();
    while let Some(a) = args.next() {
        if matches(a, "r2q") {
            let v = args.value()?;
            opt.rate2quantum = get_u32(v, 10).ok_or_else(|| explain1("r2q"))?;
        } else if matches(a, "default") {
            let v = args.value()?;
            opt.defcls = get_u32(v, 16).ok_or_else(|| explain1("default"))?;
        } else if matches(a, "debug") {
            let v = args.value()?;
            for (i, c) in v.bytes().take(16).enumerate() {
                if !(b'0'..=b'3').contains(&c) {
                    break;
                }
                opt.debug |= ((c - b'0') as u32) << (2 * i);
            }
        } else if matches(a, "direct_qlen") {
            let v = args.value()?;
            opt.direct_qlen = Some(get_u32(v, 10).ok_or_else(|| explain1("direct_qlen"))?);
        } else if matches(a, "offload") {
            opt.offload = true;
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}")));
        }
    }
    // ~0U means "not given" in q_htb.c: `direct_qlen 4294967295` is not sent.
    if opt.direct_qlen == Some(u32::MAX) {
        opt.direct_qlen = None;
    }
    Ok(opt)
}

/// `get_hz()` on a kernel with high-resolution timers (/proc/net/psched word 4).
const TC_HZ: u64 = 1_000_000_000;

/// tc side: mirrors `htb_parse_class_opt` in tc/q_htb.c.
pub fn parse_class(args: &mut Args) -> Result<HtbClassOpt, TcError> {
    let mut opt = HtbClassOpt::default();
    let (mut buffer, mut cbuffer) = (0u32, 0u32);
    let (mut cell_log, mut ccell_log): (Option<u8>, Option<u8>) = (None, None);
    let mut mtu: u32 = 1600;
    let mut mpu: u16 = 0;
    let mut overhead: u16 = 0;
    let mut linklayer = LinkLayer::Ethernet;
    let (mut rate64, mut ceil64) = (0u64, 0u64);
    while let Some(a) = args.next() {
        if matches(a, "prio") {
            let v = args.value()?;
            opt.prio = get_u32(v, 10).ok_or_else(|| explain1("prio"))?;
        } else if matches(a, "mtu") {
            let v = args.value()?;
            mtu = get_u32(v, 10).ok_or_else(|| explain1("mtu"))?;
        } else if matches(a, "mpu") {
            let v = args.value()?;
            mpu = get_u16(v).ok_or_else(|| explain1("mpu"))?;
        } else if matches(a, "overhead") {
            let v = args.value()?;
            overhead = get_u16(v).ok_or_else(|| explain1("overhead"))?;
        } else if matches(a, "linklayer") {
            let v = args.value()?;
            linklayer = LinkLayer::parse(v).ok_or_else(|| explain1("linklayer"))?;
        } else if matches(a, "quantum") {
            let v = args.value()?;
            opt.quantum = get_u32(v, 10).ok_or_else(|| explain1("quantum"))?;
        } else if matches(a, "burst") || a == "buffer" || a == "maxburst" {
            let v = args.value()?;
            let (b, c) = units::get_size_and_cell(v).ok_or_else(|| explain1(a))?;
            buffer = b;
            if c.is_some() {
                cell_log = c;
            }
        } else if matches(a, "cburst") || a == "cbuffer" || a == "cmaxburst" {
            let v = args.value()?;
            let (b, c) = units::get_size_and_cell(v).ok_or_else(|| explain1(a))?;
            cbuffer = b;
            if c.is_some() {
                ccell_log = c;
            }
        } else if a == "ceil" {
            let v = args.value()?;
            if ceil64 != 0 {
                return Err(TcError::tc("Double \"ceil\" spec\n"));
            }
            ceil64 = args.rate64(v).ok_or_else(|| explain1("ceil"))?;
        } else if a == "rate" {
            let v = args.value()?;
            if rate64 != 0 {
                return Err(TcError::tc("Double \"rate\" spec\n"));
            }
            rate64 = args.rate64(v).ok_or_else(|| explain1("rate"))?;
        } else if a == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{a}\"?\n{USAGE}")));
        }
    }
    if rate64 == 0 {
        return Err(TcError::tc("\"rate\" is required.\n"));
    }
    if ceil64 == 0 {
        ceil64 = rate64;
    }
    opt.rate.rate = if rate64 >= 1 << 32 { u32::MAX } else { rate64 as u32 };
    opt.ceil.rate = if ceil64 >= 1 << 32 { u32::MAX } else { ceil64 as u32 };
    // The smallest sensible burst: what the rate sends in one timer tick, plus an MTU.
    if buffer == 0 {
        buffer = (rate64 / TC_HZ).wrapping_add(mtu as u64) as u32;
    }
    if cbuffer == 0 {
        cbuffer = (ceil64 / TC_HZ).wrapping_add(mtu as u64) as u32;
    }
    opt.rate.overhead = overhead;
    opt.ceil.overhead = overhead;
    opt.rate.mpu = mpu;
    opt.ceil.mpu = mpu;
    opt.rate.calc_rtable(cell_log, mtu, linklayer);
    opt.buffer = calc_xmittime(rate64, buffer);
    opt.ceil.calc_rtable(ccell_log, mtu, linklayer);
    opt.cbuffer = calc_xmittime(ceil64, cbuffer);
    if rate64 >= 1 << 32 {
        opt.rate64 = Some(rate64);
    }
    if ceil64 >= 1 << 32 {
        opt.ceil64 = Some(ceil64);
    }
    Ok(opt)
}
