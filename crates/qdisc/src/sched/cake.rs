//! cake — Common Applications Kept Enhanced. Mirrors net/sched/sch_cake.c (kernel
//! side, 6.12) and tc/q_cake.c (iproute2 6.15 side); §18 of docs/kernel-notes.md.
//!
//! Theory: one qdisc doing four jobs.
//!
//! * **Shaper.** A deficit-mode rate limiter without a bucket: every packet pushes
//!   `time_next_packet` forward by its serialisation time at `bandwidth`
//!   (`(adjusted_len · rate_ns) >> rate_shft`, a fixed-point ns-per-byte). Dequeue
//!   waits until that time has come. A second clock runs at 2/3 of the rate
//!   (`failsafe_next_packet`, 1.5× the duration) so a shaper whose time was pushed far
//!   out by drops (ingress mode charges them too) cannot wedge. `autorate-ingress`
//!   measures the arrival rate of bursts and sets the bandwidth to 15/16 of it every
//!   250 ms.
//! * **Overhead compensation.** The shaper charges an *adjusted* length: without
//!   `raw`, the device's link-layer header is first taken off (the network offset);
//!   then `overhead` is added, `mpu` enforced, and ATM (48-byte cells in 53) or PTM
//!   (one byte per 64) framing applied. tc's presets (`docsis`, `ethernet`,
//!   `pppoe-ptm`, `bridged-llcsnap`, …) only add up overhead, mpu and framing.
//! * **Tins.** A Diffserv priority queue of 1, 3, 4 or 8 tins. The DSCP (or the
//!   fwmark, or `skb->priority` naming `handle:tin`) picks the tin. Each tin has its
//!   own threshold rate (a fraction of the bandwidth) and its own shaper clock: when
//!   shaped, dequeue serves the highest tin whose clock is due, else the one due
//!   soonest — a tin over its threshold falls back to bandwidth-weighted sharing.
//!   Unshaped, tins share by weighted DRR on `tin_quantum`.
//! * **Flow isolation.** Inside a tin, 1024 queues in 8-way set-associative buckets:
//!   a flow's hash picks a set of 8 and takes the way tagged with its hash, else a
//!   free way, else collides. In the host-aware modes (`dual-srchost`,
//!   `dual-dsthost`, `triple-isolate`) each flow's quantum is divided by the number
//!   of bulk flows its host has, so hosts rather than flows share fairly. Service is
//!   DRR++ as in fq_codel: new (sparse) flows first, then the bulk rotation, and a
//!   third list of emptied flows whose AQM state is still decaying.
//! * **COBALT.** Each queue runs CoDel (with the kernel's cached inverse square roots
//!   and a drop schedule that also decays while idle) alongside BLUE, which raises a
//!   drop probability when the queue overflows and lowers it when it drains.
//!
//! Overflow (`memlimit`, or a limit derived from the bandwidth) drops from the head of
//! the longest queue of any tin, found through a max-heap over all 8 × 1024 queues.
//!
//! Where this engine cannot be the kernel:
//! * The flow hash. The kernel hashes the dissected 5-tuple with a per-boot random
//!   key (or takes the socket's `skb->hash`); here `Packet::hash` is `skb->hash`, and
//!   a packet without a hash or 5-tuple gets one fixed value (as every such frame
//!   gets one random value in the kernel). Which bucket a flow lands in therefore
//!   differs; the counts (`way_*`, flows) do not, as long as flows do not collide.
//! * The quantum dither (`get_random_u16`) and BLUE's coin (`get_random_u32`) use a
//!   deterministic generator of ours.
//! * `nat` asks conntrack for the pre-NAT addresses. There is no conntrack here: like
//!   the kernel's answer for an untracked packet, the lookup finds nothing and the
//!   addresses stay as they are. The option is accepted and dumped.
//! * `ack-filter` inspects TCP headers. This engine's packets carry none (only a
//!   5-tuple), so no queued packet is ever an eligible pure ACK — what the kernel
//!   does with non-TCP traffic. The option is accepted and dumped.
//! * GSO packets that are not split (`no-split-gso`) are charged as their segments
//!   would be, without the kernel's header-length arithmetic.
//! * Classes (one per queue on a list, for `tc class show`) and the filter block (a
//!   classid's minor picks the queue, its major the host) are modelled.

use crate::classify::{Block, Verdict};
use crate::packet::Packet;
use crate::qdisc::{tc_h_maj, tc_h_min, Classful, Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::stats::Stats;
use crate::tc::{units, Args, Out, TcError};
use crate::time::Instant;

/// CAKE_QUEUES: queues per tin.
const QUEUES: usize = 1024;
/// CAKE_SET_WAYS.
const WAYS: usize = 8;
/// CAKE_MAX_TINS.
const MAX_TINS: usize = 8;
/// CAKE_FLOW_MASK / CAKE_FLOW_NAT_FLAG.
const FLOW_MASK: u8 = 63;
const FLOW_NAT_FLAG: u8 = 64;

// TCA_CAKE_DIFFSERV_MODE values.
pub const DIFFSERV3: u32 = 0;
pub const DIFFSERV4: u32 = 1;
pub const DIFFSERV8: u32 = 2;
pub const BESTEFFORT: u32 = 3;
pub const PRECEDENCE: u32 = 4;
const DIFFSERV_NAMES: [&str; 5] = ["diffserv3", "diffserv4", "diffserv8", "besteffort", "precedence"];

// TCA_CAKE_FLOW_MODE values (bit 0 source host, bit 1 destination host, bit 2 flows).
pub const FLOW_NONE: u32 = 0;
const FLOW_SRC_IP: u8 = 1;
const FLOW_DST_IP: u8 = 2;

const FLOW_FLOWS: u8 = 4;
const FLOW_DUAL_SRC: u8 = 5;
const FLOW_DUAL_DST: u8 = 6;
pub const FLOW_TRIPLE: u32 = 7;
const FLOWMODE_NAMES: [&str; 8] =
    ["flowblind", "srchost", "dsthost", "hosts", "flows", "dual-srchost", "dual-dsthost", "triple-isolate"];

// TCA_CAKE_ATM values.
pub const ATM_NONE: u32 = 0;
pub const ATM_ATM: u32 = 1;
pub const ATM_PTM: u32 = 2;

// TCA_CAKE_ACK_FILTER values.
pub const ACK_NONE: u32 = 0;
pub const ACK_FILTER: u32 = 1;
pub const ACK_AGGRESSIVE: u32 = 2;

// rate_flags.
const FLAG_OVERHEAD: u16 = 1 << 0;
const FLAG_AUTORATE_INGRESS: u16 = 1 << 1;
const FLAG_INGRESS: u16 = 1 << 2;
const FLAG_WASH: u16 = 1 << 3;
const FLAG_SPLIT_GSO: u16 = 1 << 4;

/// What tc sends for cake: TCA_OPTIONS always, each attribute only when given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CakeOpt {
    /// TCA_CAKE_BASE_RATE64, bytes/s (0 = unlimited).
    pub base_rate: Option<u64>,
    pub diffserv: Option<u32>,
    pub atm: Option<u32>,
    pub flow_mode: Option<u32>,
    pub overhead: Option<i32>,
    /// TCA_CAKE_RAW (always 0 on the wire; its presence is what counts).
    pub raw: bool,
    pub mpu: Option<u32>,
    /// TCA_CAKE_RTT, µs.
    pub rtt: Option<u32>,
    /// TCA_CAKE_TARGET, µs.
    pub target: Option<u32>,
    pub autorate: Option<u32>,
    pub memory: Option<u32>,
    pub fwmark: Option<u32>,
    pub nat: Option<u32>,
    pub wash: Option<u32>,
    pub split_gso: Option<u32>,
    pub ingress: Option<u32>,
    pub ack_filter: Option<u32>,
}

/// q_cake.c `explain`.
const USAGE: &str = "Usage: ... cake [ bandwidth RATE | unlimited* | autorate-ingress ]\n                [ rtt TIME | datacentre | lan | metro | regional |\n                  internet* | oceanic | satellite | interplanetary ]\n                [ besteffort | diffserv8 | diffserv4 | diffserv3* ]\n                [ flowblind | srchost | dsthost | hosts | flows |\n                  dual-srchost | dual-dsthost | triple-isolate* ]\n                [ nat | nonat* ]\n                [ wash | nowash* ]\n                [ split-gso* | no-split-gso ]\n                [ ack-filter | ack-filter-aggressive | no-ack-filter* ]\n                [ memlimit LIMIT ]\n                [ fwmark MASK ]\n                [ ptm | atm | noatm* ] [ overhead N | conservative | raw* ]\n                [ mpu N ] [ ingress | egress* ]\n                (* marks defaults)\n";

/// tc's rtt presets: (name, target µs, interval µs).
const PRESETS: [(&str, u32, u32); 8] = [
    ("datacentre", 5, 100),
    ("lan", 50, 1000),
    ("metro", 500, 10000),
    ("regional", 1500, 30000),
    ("internet", 5000, 100000),
    ("oceanic", 15000, 300000),
    ("satellite", 50000, 1000000),
    ("interplanetary", 50000000, 1000000000),
];

/// C `strtol(s, &end, 10)` stored into an `int`, with q_cake.c's "whole string"
/// test (`*end` must be NUL; an empty string passes as 0).
fn strtol10_int(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
        i += 1;
    }
    let start = i;
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let ds = i;
    let mut v: i64 = 0;
    let mut sat = false;
    while i < b.len() && b[i].is_ascii_digit() {
        if !sat {
            match v.checked_mul(10).and_then(|x| x.checked_add((b[i] - b'0') as i64)) {
                Some(x) => v = x,
                None => sat = true,
            }
        }
        i += 1;
    }
    if i == ds {
        // No digits: strtol leaves end at the start of the string.
        return if b.is_empty() { Some(0) } else { None };
    }
    let _ = start;
    if i != b.len() {
        return None;
    }
    let long = match (sat, neg) {
        (true, false) => i64::MAX,
        (true, true) => i64::MIN,
        (false, true) => -v,
        (false, false) => v,
    };
    // long → int keeps the low 32 bits.
    Some(long as i32)
}

/// tc side: mirrors `cake_parse_opt` in tc/q_cake.c.
pub fn parse(args: &mut Args) -> Result<CakeOpt, TcError> {
    let mut preset_set: Option<&str> = None;
    let (mut overhead_override, mut overhead_set) = (false, false);
    let (mut interval, mut target, mut memlimit, mut fwmark) = (0u32, 0u32, 0u32, 0u32);
    let mut bandwidth = 0u64;
    let mut unlimited = false;
    let (mut diffserv, mut ack_filter, mut split_gso, mut flowmode) = (-1i64, -1i64, -1i64, -1i64);
    let (mut autorate, mut ingress, mut wash, mut nat, mut atm) = (-1i64, -1i64, -1i64, -1i64, -1i64);
    let (mut overhead, mut mpu) = (0i32, 0i32);
    while let Some(a) = args.next() {
        match a {
            "bandwidth" => {
                bandwidth = units::get_rate64(args.value()?).ok_or_else(|| TcError::tc("Illegal \"bandwidth\"\n"))?;
                unlimited = false;
                autorate = 0;
            }
            "unlimited" => {
                bandwidth = 0;
                unlimited = true;
                autorate = 0;
            }
            "autorate-ingress" => autorate = 1,
            "rtt" => {
                interval = units::get_time(args.value()?).ok_or_else(|| TcError::tc("Illegal \"rtt\"\n"))?;
                target = (interval / 20).max(1);
            }
            p if PRESETS.iter().any(|x| x.0 == p) => {
                if let Some(prev) = preset_set {
                    return Err(TcError::usage(format!("Error: duplicate \"{p}\": \"{prev}\" is the second value.\n")));
                }
                let &(name, t, i) = PRESETS.iter().find(|x| x.0 == p).unwrap();
                preset_set = Some(name);
                target = t;
                interval = i;
            }
            "besteffort" => diffserv = BESTEFFORT as i64,
            "precedence" => diffserv = PRECEDENCE as i64,
            "diffserv8" => diffserv = DIFFSERV8 as i64,
            "diffserv4" | "diffserv" => diffserv = DIFFSERV4 as i64,
            "diffserv3" => diffserv = DIFFSERV3 as i64,
            "nowash" => wash = 0,
            "wash" => wash = 1,
            "split-gso" => split_gso = 1,
            "no-split-gso" => split_gso = 0,
            "flowblind" => flowmode = 0,
            "srchost" => flowmode = 1,
            "dsthost" => flowmode = 2,
            "hosts" => flowmode = 3,
            "flows" => flowmode = 4,
            "dual-srchost" => flowmode = 5,
            "dual-dsthost" => flowmode = 6,
            "triple-isolate" => flowmode = 7,
            "nat" => nat = 1,
            "nonat" => nat = 0,
            "ptm" => atm = ATM_PTM as i64,
            "atm" => atm = ATM_ATM as i64,
            "noatm" => atm = ATM_NONE as i64,
            "raw" => {
                atm = ATM_NONE as i64;
                overhead = 0;
                overhead_set = true;
                overhead_override = true;
            }
            "conservative" => {
                atm = ATM_ATM as i64;
                overhead = 48;
                overhead_set = true;
            }
            "ipoa-vcmux" | "ipoa-llcsnap" | "bridged-vcmux" | "bridged-llcsnap" | "pppoa-vcmux" | "pppoa-llc"
            | "pppoe-vcmux" | "pppoe-llcsnap" => {
                atm = ATM_ATM as i64;
                overhead += match a {
                    "ipoa-vcmux" => 8,
                    "ipoa-llcsnap" => 16,
                    "bridged-vcmux" => 24,
                    "bridged-llcsnap" => 32,
                    "pppoa-vcmux" => 10,
                    "pppoa-llc" => 14,
                    "pppoe-vcmux" => 32,
                    _ => 40,
                };
                overhead_set = true;
            }
            "pppoe-ptm" | "bridged-ptm" => {
                atm = ATM_PTM as i64;
                overhead += if a == "pppoe-ptm" { 30 } else { 22 };
                overhead_set = true;
            }
            // Kept for old scripts: the network offset is now taken off automatically.
            "via-ethernet" => {}
            "ethernet" => {
                overhead += 38;
                overhead_set = true;
                mpu = 84;
            }
            "ether-vlan" => {
                overhead += 4;
                overhead_set = true;
            }
            "docsis" => {
                atm = ATM_NONE as i64;
                overhead += 18;
                overhead_set = true;
                mpu = 64;
            }
            "overhead" => {
                // The C source writes "\\n": a backslash and an n, no line break.
                overhead = strtol10_int(args.value()?)
                    .filter(|v| (-64..=256).contains(v))
                    .ok_or_else(|| TcError::tc("Illegal \"overhead\", valid range is -64 to 256\\n"))?;
                overhead_set = true;
            }
            "mpu" => {
                mpu = strtol10_int(args.value()?)
                    .filter(|v| (0..=256).contains(v))
                    .ok_or_else(|| TcError::tc("Illegal \"mpu\", valid range is 0 to 256\\n"))?;
            }
            "ingress" => ingress = 1,
            "egress" => ingress = 0,
            "no-ack-filter" => ack_filter = ACK_NONE as i64,
            "ack-filter" => ack_filter = ACK_FILTER as i64,
            "ack-filter-aggressive" => ack_filter = ACK_AGGRESSIVE as i64,
            "memlimit" => {
                let v = args.value()?;
                memlimit = units::get_size(v)
                    .ok_or_else(|| TcError::tc(format!("Illegal value for \"memlimit\": \"{v}\"\n")))?;
            }
            "fwmark" => {
                let v = args.value()?;
                fwmark =
                    units::get_u32(v).ok_or_else(|| TcError::tc(format!("Illegal value for \"fwmark\": \"{v}\"\n")))?;
            }
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(TcError::tc(format!("What is \"{other}\"?\n{USAGE}"))),
        }
    }
    let opt = |v: i64| (v != -1).then_some(v as u32);
    Ok(CakeOpt {
        base_rate: (bandwidth != 0 || unlimited).then_some(bandwidth),
        diffserv: opt(diffserv),
        atm: opt(atm),
        flow_mode: opt(flowmode),
        overhead: overhead_set.then_some(overhead),
        raw: overhead_override,
        mpu: (mpu > 0).then_some(mpu as u32),
        rtt: (interval != 0).then_some(interval),
        target: (target != 0).then_some(target),
        autorate: opt(autorate),
        memory: (memlimit != 0).then_some(memlimit),
        fwmark: (fwmark != 0).then_some(fwmark),
        nat: opt(nat),
        wash: opt(wash),
        split_gso: opt(split_gso),
        ingress: opt(ingress),
        ack_filter: opt(ack_filter),
    })
}

// ---------------------------------------------------------------------------------
// Diffserv tables: DSCP → tin (sch_cake.c's lookup tables, same values).

const PRECEDENCE_MAP: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = (i / 8) as u8;
        i += 1;
    }
    t
};
#[rustfmt::skip]
const DIFFSERV8_MAP: [u8; 64] = [
    2, 0, 1, 2, 4, 2, 2, 2, 1, 2, 1, 2, 1, 2, 1, 2,
    5, 2, 4, 2, 4, 2, 4, 2, 3, 2, 3, 2, 3, 2, 3, 2,
    6, 2, 3, 2, 3, 2, 3, 2, 6, 2, 2, 2, 6, 2, 6, 2,
    7, 2, 2, 2, 2, 2, 2, 2, 7, 2, 2, 2, 2, 2, 2, 2,
];
#[rustfmt::skip]
const DIFFSERV4_MAP: [u8; 64] = [
    0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0,
    3, 0, 2, 0, 2, 0, 2, 0, 3, 0, 0, 0, 3, 0, 3, 0,
    3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
];
#[rustfmt::skip]
const DIFFSERV3_MAP: [u8; 64] = [
    0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0,
    2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
];
const BESTEFFORT_MAP: [u8; 64] = [0; 64];
/// Tin order for dumps (and for fwmark/priority tin numbers).
const NORMAL_ORDER: [u8; 8] = [0, 1, 2, 3, 4, 5, 6, 7];
const BULK_ORDER: [u8; 8] = [1, 0, 2, 3, 0, 0, 0, 0];

/// 1/sqrt(count) in Q0.32 for small counts, from eight Newton steps (the kernel's
/// `inv_sqrt_cache`); counts 0 and 1 both hold ~1.0.
const INV_SQRT_CACHE: [u32; 16] = [
    !0, !0, 3037000500, 2479700525, 2147483647, 1920767767, 1753413056, 1623345051, 1518500250, 1431655765, 1358187914,
    1294981364, 1239850263, 1191209601, 1147878294, 1108955788,
];

/// `quantum_div[i]` = 65535 / i, `[0]` = 0xffff.
const QUANTUM_DIV: [u16; QUEUES + 1] = {
    let mut t = [0u16; QUEUES + 1];
    t[0] = 0xFFFF;
    let mut i = 1;
    while i <= QUEUES {
        t[i] = (65535 / i) as u16;
        i += 1;
    }
    t
};

// ---------------------------------------------------------------------------------
// COBALT

/// `struct cobalt_params` (times in ns).
#[derive(Clone, Copy, Debug, Default)]
struct CobaltParams {
    interval: u64,
    target: u64,
    mtu_time: u64,
    p_inc: u32,
    p_dec: u32,
}

/// `struct cobalt_vars`.
#[derive(Clone, Copy, Debug, Default)]
struct CobaltVars {
    count: u32,
    rec_inv_sqrt: u32,
    drop_next: i64,
    blue_timer: i64,
    p_drop: u32,
    dropping: bool,
    ecn_marked: bool,
}

impl CobaltVars {
    /// `cobalt_newton_step`.
    fn newton_step(&mut self, count: u32) {
        let invsqrt = self.rec_inv_sqrt as u64;
        let invsqrt2 = (invsqrt * invsqrt) >> 32;
        let mut val = (3u64 << 32).wrapping_sub((count as u64).wrapping_mul(invsqrt2));
        val >>= 2;
        val = (val.wrapping_mul(invsqrt)) >> (32 - 2 + 1);
        self.rec_inv_sqrt = val as u32;
    }
    /// `cobalt_invsqrt`.
    fn invsqrt(&mut self, count: u32) {
        if (count as usize) < INV_SQRT_CACHE.len() {
            self.rec_inv_sqrt = INV_SQRT_CACHE[count as usize];
        } else {
            self.newton_step(count);
        }
    }
}

/// `cobalt_control`: t + interval / sqrt(count).
fn cobalt_control(t: i64, interval: u64, rec_inv_sqrt: u32) -> i64 {
    t.wrapping_add(((interval as u128 * rec_inv_sqrt as u128) >> 32) as i64)
}

/// `cobalt_queue_full`: an overflow drop. True if BLUE just became active.
fn cobalt_queue_full(v: &mut CobaltVars, p: &CobaltParams, now: i64) -> bool {
    let mut up = false;
    if now.wrapping_sub(v.blue_timer) > p.target as i64 {
        up = v.p_drop == 0;
        let mut p_drop = v.p_drop.wrapping_add(p.p_inc);
        if p_drop < p.p_inc {
            p_drop = !0;
        }
        v.p_drop = p_drop;
        v.blue_timer = now;
    }
    v.dropping = true;
    v.drop_next = now;
    if v.count == 0 {
        v.count = 1;
    }
    up
}

/// `cobalt_queue_empty`: the queue was found empty. True if BLUE just went quiet.
fn cobalt_queue_empty(v: &mut CobaltVars, p: &CobaltParams, now: i64) -> bool {
    let mut down = false;
    if v.p_drop != 0 && now.wrapping_sub(v.blue_timer) > p.target as i64 {
        v.p_drop = v.p_drop.saturating_sub(p.p_dec);
        v.blue_timer = now;
        down = v.p_drop == 0;
    }
    v.dropping = false;
    if v.count != 0 && now.wrapping_sub(v.drop_next) >= 0 {
        v.count -= 1;
        v.invsqrt(v.count);
        v.drop_next = cobalt_control(v.drop_next, p.interval, v.rec_inv_sqrt);
    }
    down
}

// ---------------------------------------------------------------------------------
// Queues

/// No packet / no queue.
const NIL: u32 = u32::MAX;

/// Which set a queue is in (`CAKE_SET_*`).
const SET_NONE: u8 = 0;
const SET_SPARSE: u8 = 1;
const SET_SPARSE_WAIT: u8 = 2;
const SET_BULK: u8 = 3;
const SET_DECAYING: u8 = 4;

/// `struct cake_flow` with the queue's `backlogs[]` entry, so one queue is one cache
/// line (the tags stay apart, as in the kernel: a set's 8 tags share a line, and so
/// does the per-queue drop count, which only the class dump reads).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Flow {
    head: u32,
    tail: u32,
    deficit: i32,
    /// `backlogs[i]`: bytes queued.
    backlog: u32,
    /// `flowchain` (next, prev) in the tin's link space: queues 0‥1023, then the
    /// three list heads; a queue off every list points at itself.
    link: [u16; 2],
    cvars: CobaltVars,
    /// `srchost`, `dsthost`: indices into the tin's hosts.
    host: [u16; 2],
}

/// The three list heads sit after the 1024 queues in the link index space.
const NEW_FLOWS: u16 = QUEUES as u16;
const OLD_FLOWS: u16 = QUEUES as u16 + 1;
const DECAYING_FLOWS: u16 = QUEUES as u16 + 2;

/// Source side of [`Tin::host_tag`], [`Tin::host_bulk`] and [`Flow::host`].
const SRC: usize = 0;
/// Destination side.
const DST: usize = 1;

/// `struct cake_tin_data`.
struct Tin {
    flows: Vec<Flow>,
    /// The links of the list heads [`NEW_FLOWS`], [`OLD_FLOWS`], [`DECAYING_FLOWS`].
    heads: [[u16; 2]; 3],
    /// `tags[]`: the flow hash that owns each way.
    tags: Vec<u32>,
    /// Each queue's `dropped`.
    dropped: Vec<u32>,
    /// Each queue's `set` (`CAKE_SET_*`), apart so a set's 8 ways share a line.
    sets: Vec<u8>,
    overflow_idx: Vec<u16>,
    /// `struct cake_host`'s two halves, by side ([`SRC`], [`DST`]) and then by slot, so
    /// that a set's 8 tags are 32 adjacent bytes, searched at once: the tag of the host
    /// owning the slot …
    host_tag: [Vec<u32>; 2],
    /// … and its bulk flows.
    host_bulk: [Vec<u16>; 2],
    flow_quantum: u16,
    cparams: CobaltParams,
    drop_overlimit: u32,
    bulk_flow_count: u16,
    sparse_flow_count: u16,
    decaying_flow_count: u16,
    unresponsive_flow_count: u16,
    max_skblen: u32,
    time_next_packet: i64,
    tin_rate_ns: u64,
    tin_rate_bps: u64,
    tin_rate_shft: u16,
    tin_quantum: u16,
    tin_deficit: i32,
    tin_backlog: u32,
    tin_dropped: u32,
    tin_ecn_mark: u32,
    packets: u32,
    bytes: u64,
    ack_drops: u32,
    avge_delay: u64,
    peak_delay: u64,
    base_delay: u64,
    way_directs: u32,
    way_hits: u32,
    way_misses: u32,
    way_collisions: u32,
}

impl Tin {
    fn new(i: usize) -> Tin {
        let mut flows = Vec::with_capacity(QUEUES);
        for j in 0..QUEUES {
            flows.push(Flow {
                head: NIL,
                tail: NIL,
                deficit: 0,
                backlog: 0,
                link: [j as u16; 2],
                cvars: CobaltVars::default(),
                host: [0; 2],
            });
        }
        Tin {
            flows,
            heads: [[NEW_FLOWS; 2], [OLD_FLOWS; 2], [DECAYING_FLOWS; 2]],
            tags: vec![0; QUEUES],
            dropped: vec![0; QUEUES],
            sets: vec![SET_NONE; QUEUES],
            overflow_idx: (0..QUEUES).map(|j| (j * MAX_TINS + i) as u16).collect(),
            host_tag: [vec![0; QUEUES], vec![0; QUEUES]],
            host_bulk: [vec![0; QUEUES], vec![0; QUEUES]],
            flow_quantum: 0,
            cparams: CobaltParams::default(),
            drop_overlimit: 0,
            bulk_flow_count: 0,
            sparse_flow_count: 0,
            decaying_flow_count: 0,
            unresponsive_flow_count: 0,
            max_skblen: 0,
            time_next_packet: 0,
            tin_rate_ns: 0,
            tin_rate_bps: 0,
            tin_rate_shft: 0,
            tin_quantum: 0,
            tin_deficit: 0,
            tin_backlog: 0,
            tin_dropped: 0,
            tin_ecn_mark: 0,
            packets: 0,
            bytes: 0,
            ack_drops: 0,
            avge_delay: 0,
            peak_delay: 0,
            base_delay: 0,
            way_directs: 0,
            way_hits: 0,
            way_misses: 0,
            way_collisions: 0,
        }
    }

    // ---- list_head over flows and the three heads --------------------------------

    fn link(&mut self, n: u16) -> &mut [u16; 2] {
        match n.checked_sub(NEW_FLOWS) {
            Some(h) => &mut self.heads[h as usize],
            None => &mut self.flows[n as usize].link,
        }
    }
    fn next_of(&self, n: u16) -> u16 {
        match n.checked_sub(NEW_FLOWS) {
            Some(h) => self.heads[h as usize][0],
            None => self.flows[n as usize].link[0],
        }
    }
    fn set_next(&mut self, n: u16, v: u16) {
        self.link(n)[0] = v
    }
    fn prev_of(&mut self, n: u16) -> u16 {
        self.link(n)[1]
    }
    fn set_prev(&mut self, n: u16, v: u16) {
        self.link(n)[1] = v
    }
    fn list_empty(&self, head: u16) -> bool {
        self.next_of(head) == head
    }
    /// `list_del` + re-init (`list_del_init`).
    fn list_del_init(&mut self, f: u16) {
        let (p, n) = (self.prev_of(f), self.next_of(f));
        self.set_next(p, n);
        self.set_prev(n, p);
        self.set_next(f, f);
        self.set_prev(f, f);
    }
    /// `list_add_tail`.
    fn list_add_tail(&mut self, f: u16, head: u16) {
        let last = self.prev_of(head);
        self.set_next(last, f);
        self.set_prev(f, last);
        self.set_next(f, head);
        self.set_prev(head, f);
    }
    /// `list_move_tail`.
    fn list_move_tail(&mut self, f: u16, head: u16) {
        self.list_del_init(f);
        self.list_add_tail(f, head);
    }

    // ---- host bulk counts ------------------------------------------------------

    /// `cake_dec_srchost_bulk_flow_count` / `…dsthost…`.
    fn dec_host(&mut self, f: usize, side: usize, mode: u8) {
        let h = self.flows[f].host[side] as usize;
        if dual(mode, side) && self.host_bulk[side][h] != 0 {
            self.host_bulk[side][h] -= 1;
        }
    }
    /// `cake_inc_srchost_bulk_flow_count` / `…dsthost…`.
    fn inc_host(&mut self, f: usize, side: usize, mode: u8) {
        let h = self.flows[f].host[side] as usize;
        if dual(mode, side) && (self.host_bulk[side][h] as usize) < QUEUES {
            self.host_bulk[side][h] += 1;
        }
    }
    fn dec_hosts(&mut self, f: usize, mode: u8) {
        self.dec_host(f, SRC, mode);
        self.dec_host(f, DST, mode);
    }
    fn inc_hosts(&mut self, f: usize, mode: u8) {
        self.inc_host(f, SRC, mode);
        self.inc_host(f, DST, mode);
    }

    /// The host half of `cake_hash`: give queue `reduced` the host slot of `hash`
    /// on `side` (the set-associative search again: the slot tagged with it, else the
    /// first without bulk flows, else the last way tried).
    #[inline]
    fn alloc_host(&mut self, reduced: usize, side: usize, hash: u32, mode: u8) {
        let idx = hash as usize % QUEUES;
        let (inner, outer) = (idx % WAYS, idx - idx % WAYS);
        let tags = &self.host_tag[side][outer..outer + WAYS];
        let k = match first_way(inner, ways(|w| tags[w] == hash)) {
            Some(k) => k,
            None => {
                let bulk = &self.host_bulk[side][outer..outer + WAYS];
                let k = first_way(inner, ways(|w| bulk[w] == 0)).unwrap_or(inner);
                self.host_tag[side][outer + k] = hash;
                k
            }
        };
        self.flows[reduced].host[side] = (outer + k) as u16;
        if self.sets[reduced] == SET_BULK {
            self.inc_host(reduced, side, mode);
        }
    }
}

/// The ways of a set for which `f` holds, as bits (branch-free, so it vectorises).
#[inline]
fn ways(f: impl Fn(usize) -> bool) -> u8 {
    (0..WAYS).fold(0, |m, w| m | (f(w) as u8) << w)
}

/// The first way of `set` met going round from way `inner` (the kernel's search
/// order: `k = (k + 1) % CAKE_SET_WAYS` from `inner`).
#[inline]
fn first_way(inner: usize, set: u8) -> Option<usize> {
    (set != 0).then(|| (inner + set.rotate_right(inner as u32).trailing_zeros() as usize) % WAYS)
}

/// `cake_dsrc` / `cake_ddst`: does the mode count bulk flows per host on `side`?
fn dual(mode: u8, side: usize) -> bool {
    let bits = [FLOW_DUAL_SRC, FLOW_DUAL_DST][side];
    mode & bits == bits
}

/// `cake_ewma`.
fn ewma(avg: u64, sample: u64, shift: u32) -> u64 {
    avg - (avg >> shift) + (sample >> shift)
}

/// Packet slots, in three parallel arrays so the links stay dense: the packet, the
/// next slot of its queue (or of the free list), and the length the shaper charges
/// for it (`cobalt_skb_cb.adjusted_len`; the enqueue time is `Packet::enqueued_at`).
#[derive(Default)]
struct Slots {
    pkt: Vec<Option<Packet>>,
    /// (next, adjusted_len).
    meta: Vec<[u32; 2]>,
}

/// The value standing in for the kernel's hash of a packet with no usable keys (a
/// random constant per boot there).
const NOKEY_HASH: u32 = 0x5bd1_e995;

/// A 32-bit mix (murmur3's finaliser) for host hashes, never 0.
fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h.max(1)
}

/// A host address's hash (the kernel's `flow_hash_from_keys` over the keys with
/// everything but that address cleared; ours is a multiply-rotate over the four
/// words and one final mix).
fn addr_hash(a: &[u8; 16], salt: u32) -> u32 {
    let mut h = salt;
    for c in a.chunks_exact(4) {
        h = (h ^ u32::from_be_bytes([c[0], c[1], c[2], c[3]])).wrapping_mul(0x9E37_79B1).rotate_left(13);
    }
    mix32(h)
}

/// The kernel's configuration (`struct cake_sched_data`'s user-set part).
#[derive(Clone, Copy, Debug)]
struct Config {
    rate_bps: u64,
    /// µs.
    interval: u64,
    /// µs.
    target: u64,
    buffer_config_limit: u32,
    fwmark_mask: u32,
    fwmark_shft: u16,
    rate_overhead: i16,
    rate_mpu: u16,
    rate_flags: u16,
    tin_mode: u8,
    flow_mode: u8,
    atm_mode: u8,
    ack_filter: u8,
}

impl Default for Config {
    /// `cake_init`'s defaults: diffserv3, triple-isolate, unlimited, rtt 100 ms,
    /// target 5 ms, split-gso.
    fn default() -> Self {
        Config {
            rate_bps: 0,
            interval: 100_000,
            target: 5_000,
            buffer_config_limit: 0,
            fwmark_mask: 0,
            fwmark_shft: 0,
            rate_overhead: 0,
            rate_mpu: 0,
            rate_flags: FLAG_SPLIT_GSO,
            tin_mode: DIFFSERV3 as u8,
            flow_mode: FLOW_TRIPLE as u8,
            atm_mode: 0,
            ack_filter: 0,
        }
    }
}

impl Config {
    /// The option part of `cake_change`. Returns whether the overhead changed.
    fn apply(&mut self, o: &CakeOpt) -> bool {
        let mut changed = false;
        let mut flags = self.rate_flags;
        let set = |flags: &mut u16, bit: u16, on: u32| {
            if on != 0 {
                *flags |= bit
            } else {
                *flags &= !bit
            }
        };
        if let Some(n) = o.nat {
            self.flow_mode = (self.flow_mode & !FLOW_NAT_FLAG) | if n != 0 { FLOW_NAT_FLAG } else { 0 };
        }
        if let Some(r) = o.base_rate {
            self.rate_bps = r;
        }
        if let Some(d) = o.diffserv {
            self.tin_mode = d as u8;
        }
        if let Some(f) = o.flow_mode {
            self.flow_mode = (self.flow_mode & FLOW_NAT_FLAG) | (f as u8 & FLOW_MASK);
        }
        if let Some(a) = o.atm {
            self.atm_mode = a as u8;
        }
        if let Some(w) = o.wash {
            set(&mut flags, FLAG_WASH, w);
        }
        if let Some(ov) = o.overhead {
            self.rate_overhead = ov as i16;
            flags |= FLAG_OVERHEAD;
            changed = true;
        }
        if o.raw {
            flags &= !FLAG_OVERHEAD;
            changed = true;
        }
        if let Some(m) = o.mpu {
            self.rate_mpu = m as u16;
        }
        if let Some(i) = o.rtt {
            self.interval = i.max(1) as u64;
        }
        if let Some(t) = o.target {
            self.target = t.max(1) as u64;
        }
        if let Some(a) = o.autorate {
            set(&mut flags, FLAG_AUTORATE_INGRESS, a);
        }
        if let Some(i) = o.ingress {
            set(&mut flags, FLAG_INGRESS, i);
        }
        if let Some(a) = o.ack_filter {
            self.ack_filter = a as u8;
        }
        if let Some(m) = o.memory {
            self.buffer_config_limit = m;
        }
        if let Some(s) = o.split_gso {
            set(&mut flags, FLAG_SPLIT_GSO, s);
        }
        if let Some(m) = o.fwmark {
            self.fwmark_mask = m;
            self.fwmark_shft = if m != 0 { m.trailing_zeros() as u16 } else { 0 };
        }
        self.rate_flags = flags;
        changed
    }
}

/// The max-heap entry over all queues (`struct cake_heap_entry`).
#[derive(Clone, Copy, Debug)]
struct HeapEntry {
    t: u8,
    b: u16,
}

/// The cake qdisc (`struct cake_sched_data`).
pub struct Cake {
    cfg: Config,
    tins: Vec<Tin>,
    overflow_heap: Vec<HeapEntry>,
    time_next_packet: i64,
    failsafe_next_packet: i64,
    rate_ns: u64,
    rate_shft: u16,
    overflow_timeout: u16,
    tin_cnt: u16,
    buffer_used: u32,
    buffer_max_used: u32,
    buffer_limit: u32,
    cur_tin: u16,
    cur_flow: u16,
    tin_index: &'static [u8; 64],
    tin_order: &'static [u8; 8],
    last_packet_time: i64,
    avg_window_begin: i64,
    avg_packet_interval: u64,
    avg_window_bytes: u64,
    avg_peak_bandwidth: u64,
    last_reconfig_time: i64,
    avg_netoff: u32,
    max_netlen: u16,
    max_adjlen: u16,
    min_netlen: u16,
    min_adjlen: u16,
    /// `sch->limit`.
    limit: u32,
    /// `psched_mtu(dev)` and `skb_network_offset` of this device's packets.
    mtu: u32,
    netoff: u32,
    handle: u32,
    slots: Slots,
    free: u32,
    watchdog: Option<Instant>,
    rng: u64,
    /// The latest time seen (the class dump's `ktime_get()`).
    last_now: i64,
    /// `q->block`: the qdisc's filters.
    block: Block,
}

/// q_cake.c always sends TCA_OPTIONS (possibly empty).
pub static OPS: Ops = Ops {
    id: "cake",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Cake::new(c.opts()?, c.dev, c.handle, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

impl Cake {
    /// `cake_init` (+ `cake_change` with the options given).
    pub fn new(opts: Option<&CakeOpt>, dev: &DevInfo, handle: u32, _now: Instant) -> Result<Cake, TcError> {
        let mut cfg = Config::default();
        let mut q = Cake {
            cfg,
            tins: (0..MAX_TINS).map(Tin::new).collect(),
            overflow_heap: (0..QUEUES * MAX_TINS)
                .map(|k| HeapEntry { t: (k % MAX_TINS) as u8, b: (k / MAX_TINS) as u16 })
                .collect(),
            time_next_packet: 0,
            failsafe_next_packet: 0,
            rate_ns: 0,
            rate_shft: 0,
            overflow_timeout: 0,
            tin_cnt: 0,
            buffer_used: 0,
            buffer_max_used: 0,
            buffer_limit: 0,
            cur_tin: 0,
            cur_flow: 0,
            tin_index: &DIFFSERV3_MAP,
            tin_order: &BULK_ORDER,
            last_packet_time: 0,
            avg_window_begin: 0,
            avg_packet_interval: 0,
            avg_window_bytes: 0,
            avg_peak_bandwidth: 0,
            last_reconfig_time: 0,
            avg_netoff: 0,
            max_netlen: 0,
            max_adjlen: 0,
            min_netlen: !0,
            min_adjlen: !0,
            limit: 10240,
            mtu: dev.psched_mtu(),
            netoff: dev.hard_header_len,
            handle,
            slots: Slots::default(),
            free: NIL,
            watchdog: None,
            rng: 0x9E37_79B9_7F4A_7C15 ^ handle as u64,
            last_now: 0,
            block: Block::new(handle),
        };
        if let Some(o) = opts {
            cfg.apply(o);
        }
        q.cfg = cfg;
        // Nothing is queued yet: the counters are not needed.
        q.reconfigure(&mut Sch::default());
        q.avg_peak_bandwidth = q.cfg.rate_bps;
        q.min_netlen = !0;
        q.min_adjlen = !0;
        Ok(q)
    }

    #[inline]
    fn rand_u32(&mut self) -> u32 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as u32
    }

    // ---- configuration -----------------------------------------------------------

    /// `cake_set_rate`.
    fn set_rate(b: &mut Tin, rate: u64, mtu: u32, target_ns: u64, rtt_est_ns: u64) {
        const MIN_RATE: u64 = 64;
        let (mut rate_shft, mut rate_ns) = (0u16, 0u64);
        if rate != 0 {
            b.flow_quantum = (rate >> 12).clamp(300, 1514) as u16;
            rate_shft = 34;
            rate_ns = (1_000_000_000u64 << rate_shft) / rate.max(MIN_RATE);
            while rate_ns >> 34 != 0 {
                rate_ns >>= 1;
                rate_shft -= 1;
            }
        } else {
            b.flow_quantum = 1514;
        }
        b.tin_rate_bps = rate;
        b.tin_rate_ns = rate_ns;
        b.tin_rate_shft = rate_shft;
        if mtu == 0 {
            return;
        }
        let byte_target_ns = (mtu as u64 * rate_ns) >> rate_shft;
        b.cparams.target = (byte_target_ns * 3 / 2).max(target_ns);
        b.cparams.interval = (rtt_est_ns + b.cparams.target - target_ns).max(b.cparams.target * 2);
        b.cparams.mtu_time = byte_target_ns;
        b.cparams.p_inc = 1 << 24;
        b.cparams.p_dec = 1 << 20;
    }

    /// `cake_config_*` + `cake_configure_rates` (`mtu` 0 = rate adjustment only).
    fn configure_rates(&mut self, sch: &mut Sch, rate: u64, mtu: u32) {
        let (t, i) = (self.cfg.target * 1000, self.cfg.interval * 1000);
        let set = |q: &mut Cake, tin: usize, r: u64, quantum: u16| {
            Self::set_rate(&mut q.tins[tin], r, mtu, t, i);
            q.tins[tin].tin_quantum = quantum;
        };
        match self.cfg.tin_mode as u32 {
            BESTEFFORT => {
                self.tin_cnt = 1;
                self.tin_index = &BESTEFFORT_MAP;
                self.tin_order = &NORMAL_ORDER;
                set(self, 0, rate, 65535);
            }
            PRECEDENCE | DIFFSERV8 => {
                self.tin_cnt = 8;
                self.tin_index = if self.cfg.tin_mode as u32 == PRECEDENCE { &PRECEDENCE_MAP } else { &DIFFSERV8_MAP };
                self.tin_order = &NORMAL_ORDER;
                let (mut r, mut quantum) = (rate, 256u32);
                for i in 0..8 {
                    set(self, i, r, (quantum as u16).max(1));
                    r = r.wrapping_mul(7) >> 3;
                    quantum = (quantum * 7) >> 3;
                }
            }
            DIFFSERV4 => {
                self.tin_cnt = 4;
                self.tin_index = &DIFFSERV4_MAP;
                self.tin_order = &BULK_ORDER;
                set(self, 0, rate, 1024);
                set(self, 1, rate >> 4, 1024 >> 4);
                set(self, 2, rate >> 1, 1024 >> 1);
                set(self, 3, rate >> 2, 1024 >> 2);
            }
            _ => {
                self.tin_cnt = 3;
                self.tin_index = &DIFFSERV3_MAP;
                self.tin_order = &BULK_ORDER;
                set(self, 0, rate, 1024);
                set(self, 1, rate >> 4, 1024 >> 4);
                set(self, 2, rate >> 2, 1024 >> 2);
            }
        }
        for c in self.tin_cnt as usize..MAX_TINS {
            self.clear_tin(sch, c);
            self.tins[c].cparams.mtu_time = self.tins[0].cparams.mtu_time;
        }
        self.rate_ns = self.tins[0].tin_rate_ns;
        self.rate_shft = self.tins[0].tin_rate_shft;
    }

    /// `cake_reconfigure`.
    fn reconfigure(&mut self, sch: &mut Sch) {
        self.configure_rates(sch, self.cfg.rate_bps, self.mtu);
        let buffer_limit = if self.cfg.buffer_config_limit != 0 {
            self.cfg.buffer_config_limit
        } else if self.cfg.rate_bps != 0 {
            let t = self.cfg.rate_bps.wrapping_mul(self.cfg.interval) / (1_000_000 / 4);
            (t as u32).max(4 << 20)
        } else {
            !0
        };
        self.buffer_limit = buffer_limit.min(self.limit.wrapping_mul(self.mtu).max(self.cfg.buffer_config_limit));
    }

    /// `cake_clear_tin`: drop what a tin no longer in use holds (not counted as drops,
    /// and — as in the kernel — not reported to the parents).
    fn clear_tin(&mut self, sch: &mut Sch, tin: usize) {
        self.cur_tin = tin as u16;
        for f in 0..QUEUES {
            self.cur_flow = f as u16;
            while let Some((s, _)) = self.dequeue_one(sch) {
                drop(self.release(s));
            }
        }
    }

    // ---- packet slots ------------------------------------------------------------

    #[inline]
    fn alloc_slot(&mut self, pkt: Packet, adjusted_len: u32) -> u32 {
        let sl = &mut self.slots;
        if self.free != NIL {
            let i = self.free as usize;
            self.free = sl.meta[i][0];
            sl.pkt[i] = Some(pkt);
            sl.meta[i] = [NIL, adjusted_len];
            i as u32
        } else {
            sl.pkt.push(Some(pkt));
            sl.meta.push([NIL, adjusted_len]);
            (sl.pkt.len() - 1) as u32
        }
    }

    /// `flow_queue_add`.
    #[inline]
    fn flow_queue_add(&mut self, tin: usize, idx: usize, pkt: Packet, adjusted_len: u32) -> u32 {
        let s = self.alloc_slot(pkt, adjusted_len);
        let f = &mut self.tins[tin].flows[idx];
        if f.head == NIL {
            f.head = s;
        } else {
            self.slots.meta[f.tail as usize][0] = s;
        }
        f.tail = s;
        s
    }

    /// `dequeue_head`: the packet and its adjusted length.
    #[inline]
    fn dequeue_head(&mut self, tin: usize, idx: usize) -> Option<(Packet, u32)> {
        let (s, adj) = self.unlink_head(tin, idx)?;
        Some((self.release(s)?, adj))
    }

    /// The head's slot taken off queue `idx` of tin `tin`, and its adjusted length; the
    /// packet stays in the slot until [`Cake::release`]. Dequeue reads and marks it
    /// there and moves it out whole once, into its answer: taken out early, it is
    /// copied in pieces that the next block copy stalls on (store forwarding).
    #[inline]
    fn unlink_head(&mut self, tin: usize, idx: usize) -> Option<(usize, u32)> {
        let f = &mut self.tins[tin].flows[idx];
        if f.head == NIL {
            return None;
        }
        let s = f.head as usize;
        let [next, adj] = self.slots.meta[s];
        f.head = next;
        if f.head == NIL {
            f.tail = NIL;
        }
        Some((s, adj))
    }

    /// The packet of an unlinked slot, the slot freed.
    #[inline]
    fn release(&mut self, s: usize) -> Option<Packet> {
        self.slots.meta[s][0] = self.free;
        self.free = s as u32;
        self.slots.pkt[s].take()
    }

    /// Load the slot the next dequeue most likely takes (this queue's new head while it
    /// has deficit left, else the next queue's head), so that its cache misses overlap
    /// the caller's work instead of stalling that dequeue: a prefetch (safe Rust has no
    /// prefetch instruction), without effect on the state.
    #[inline]
    fn warm_next(&self, tin: usize, idx: usize) {
        let b = &self.tins[tin];
        let next = if b.flows[idx].deficit > 0 { idx } else { b.next_of(idx as u16) as usize };
        if let Some(f) = b.flows.get(next) {
            if let (Some(m), Some(p)) = (self.slots.meta.get(f.head as usize), self.slots.pkt.get(f.head as usize)) {
                std::hint::black_box((m[0], p.as_ref().map(|p| p.len)));
            }
        }
    }

    /// The packet of an unlinked slot, in place.
    fn slot(&self, s: usize) -> &Packet {
        self.slots.pkt[s].as_ref().expect("queued slot holds a packet")
    }

    // ---- lengths -----------------------------------------------------------------

    /// `cake_calc_overhead`.
    fn calc_overhead(&mut self, len: u32, off: u32) -> u32 {
        let mut len = len;
        if self.cfg.rate_flags & FLAG_OVERHEAD != 0 {
            len = len.wrapping_sub(off);
        }
        if (self.max_netlen as u32) < len {
            self.max_netlen = len as u16;
        }
        if (self.min_netlen as u32) > len {
            self.min_netlen = len as u16;
        }
        let mut len = (len as i32 + self.cfg.rate_overhead as i32).max(self.cfg.rate_mpu as i32) as u32;
        match self.cfg.atm_mode as u32 {
            ATM_ATM => len = len.div_ceil(48) * 53,
            ATM_PTM => len += len.div_ceil(64),
            _ => {}
        }
        if (self.max_adjlen as u32) < len {
            self.max_adjlen = len as u16;
        }
        if (self.min_adjlen as u32) > len {
            self.min_adjlen = len as u16;
        }
        len
    }

    /// `cake_overhead`: a GSO packet is charged segment by segment.
    fn overhead(&mut self, pkt: &Packet) -> u32 {
        let off = self.netoff;
        self.avg_netoff = ewma(self.avg_netoff as u64, (off as u64) << 16, 8) as u32;
        if pkt.gso_segs <= 1 {
            return self.calc_overhead(pkt.len, off);
        }
        let segs = pkt.gso_segs as u32;
        let (base, extra) = (pkt.len / segs, pkt.len % segs);
        let mut total = 0u32;
        for i in 0..segs {
            total = total.wrapping_add(self.calc_overhead(base + u32::from(i < extra), off));
        }
        total
    }

    // ---- overflow heap -----------------------------------------------------------

    fn heap_backlog(&self, i: usize) -> u32 {
        let e = self.overflow_heap[i];
        self.tins[e.t as usize].flows[e.b as usize].backlog
    }
    fn heap_swap(&mut self, i: usize, j: usize) {
        let (ii, jj) = (self.overflow_heap[i], self.overflow_heap[j]);
        self.overflow_heap[i] = jj;
        self.overflow_heap[j] = ii;
        self.tins[ii.t as usize].overflow_idx[ii.b as usize] = j as u16;
        self.tins[jj.t as usize].overflow_idx[jj.b as usize] = i as u16;
    }
    /// `cake_heapify`.
    fn heapify(&mut self, mut i: usize) {
        let a = MAX_TINS * QUEUES;
        let mut mb = self.heap_backlog(i);
        let mut m = i;
        while m < a {
            let l = m + m + 1;
            let r = l + 1;
            if l < a {
                let lb = self.heap_backlog(l);
                if lb > mb {
                    m = l;
                    mb = lb;
                }
            }
            if r < a {
                let rb = self.heap_backlog(r);
                if rb > mb {
                    m = r;
                    mb = rb;
                }
            }
            if m != i {
                self.heap_swap(i, m);
                i = m;
            } else {
                break;
            }
        }
    }
    /// `cake_heapify_up`.
    fn heapify_up(&mut self, mut i: usize) {
        while i > 0 && i < MAX_TINS * QUEUES {
            let p = (i - 1) >> 1;
            if self.heap_backlog(i) > self.heap_backlog(p) {
                self.heap_swap(i, p);
                i = p;
            } else {
                break;
            }
        }
    }

    // ---- shaper ------------------------------------------------------------------

    /// `cake_advance_shaper`.
    fn advance_shaper(&mut self, tin: usize, len: u32, now: i64, drop: bool) -> u32 {
        if self.rate_ns != 0 {
            let b = &mut self.tins[tin];
            let tin_dur = ((len as u64 * b.tin_rate_ns) >> b.tin_rate_shft) as i64;
            let global_dur = ((len as u64 * self.rate_ns) >> self.rate_shft) as i64;
            let failsafe_dur = global_dur + (global_dur >> 1);
            if b.time_next_packet < now {
                b.time_next_packet += tin_dur;
            } else if b.time_next_packet < now + tin_dur {
                b.time_next_packet = now + tin_dur;
            }
            self.time_next_packet += global_dur;
            if !drop {
                self.failsafe_next_packet += failsafe_dur;
            }
        }
        len
    }

    /// `cake_drop`: drop the head of the longest queue. Returns `idx + (tin << 16)`.
    fn drop_longest(&mut self, sch: &mut Sch, now: i64) -> u32 {
        if self.overflow_timeout == 0 {
            for i in (0..MAX_TINS * QUEUES / 2).rev() {
                self.heapify(i);
            }
        }
        self.overflow_timeout = 65535;
        let qq = self.overflow_heap[0];
        let (tin, idx) = (qq.t as usize, qq.b as usize);
        let Some((pkt, adj)) = self.dequeue_head(tin, idx) else {
            self.overflow_timeout = 0;
            return idx as u32 + ((tin as u32) << 16);
        };
        let b = &mut self.tins[tin];
        if cobalt_queue_full(&mut b.flows[idx].cvars, &b.cparams, now) {
            b.unresponsive_flow_count = b.unresponsive_flow_count.wrapping_add(1);
        }
        let len = pkt.len;
        self.buffer_used = self.buffer_used.wrapping_sub(pkt.truesize);
        b.tin_backlog = b.tin_backlog.wrapping_sub(len);
        b.flows[idx].backlog = b.flows[idx].backlog.wrapping_sub(len);
        sch.stats.backlog = sch.stats.backlog.wrapping_sub(len);
        b.dropped[idx] = b.dropped[idx].wrapping_add(1);
        b.tin_dropped = b.tin_dropped.wrapping_add(1);
        if self.cfg.rate_flags & FLAG_INGRESS != 0 {
            self.advance_shaper(tin, adj, now, true);
        }
        sch.stats.dropped();
        sch.stats.qlen -= 1;
        pkt.kfree_skb();
        self.heapify(0);
        idx as u32 + ((tin as u32) << 16)
    }

    // ---- classification ----------------------------------------------------------

    /// `cake_handle_diffserv`: the DSCP, cleared from the packet when washing (the
    /// ECN bits stay).
    fn handle_diffserv(pkt: &mut Packet, wash: bool) -> u8 {
        let dscp = pkt.tos >> 2;
        if wash && dscp != 0 {
            pkt.tos &= 0b11;
        }
        dscp
    }

    /// `cake_select_tin`.
    fn select_tin(&self, pkt: &mut Packet) -> usize {
        let mark = (pkt.mark & self.cfg.fwmark_mask) >> self.cfg.fwmark_shft;
        let wash = self.cfg.rate_flags & FLAG_WASH != 0;
        let mut dscp = 0;
        if wash {
            dscp = Self::handle_diffserv(pkt, true);
        }
        let cnt = self.tin_cnt as u32;
        if self.cfg.tin_mode as u32 == BESTEFFORT {
            0
        } else if mark != 0 && mark <= cnt {
            self.tin_order[mark as usize - 1] as usize
        } else if tc_h_maj(pkt.priority) == self.handle && tc_h_min(pkt.priority) > 0 && tc_h_min(pkt.priority) <= cnt {
            self.tin_order[tc_h_min(pkt.priority) as usize - 1] as usize
        } else {
            if !wash {
                dscp = Self::handle_diffserv(pkt, false);
            }
            let t = self.tin_index[dscp as usize & 63] as usize;
            if t >= self.tin_cnt as usize {
                0
            } else {
                t
            }
        }
    }

    /// `cake_hash`: the queue index within tin `tin`. `flow_override` and
    /// `host_override` are a filter's classid minor and major (0 = none).
    fn hash(&mut self, tin: usize, pkt: &Packet, flow_override: u32, host_override: u32) -> usize {
        let mode = self.cfg.flow_mode & FLOW_MASK;
        if mode == FLOW_NONE as u8 {
            return 0;
        }
        // skb->hash with l4_hash set: the packet's own hash; else the dissected keys.
        // The host hashes are only worked out when the mode looks at hosts.
        let key = pkt.flow();
        let mut flow_hash = 0;
        if flow_override != 0 {
            flow_hash = flow_override - 1;
        } else if mode & FLOW_FLOWS != 0 {
            flow_hash = match (pkt.hash, key) {
                (0, Some(k)) => k.hash().max(1),
                (0, None) => NOKEY_HASH,
                (h, _) => h,
            };
        }
        let (srchost_hash, dsthost_hash) = match key {
            _ if host_override != 0 => (host_override - 1, host_override - 1),
            Some(k) if mode & (FLOW_SRC_IP | FLOW_DST_IP) != 0 => {
                (addr_hash(&k.src, 0x0123_4567), addr_hash(&k.dst, 0x0123_4567))
            }
            _ => (0, 0),
        };
        if mode & FLOW_FLOWS == 0 {
            if mode & FLOW_SRC_IP != 0 {
                flow_hash ^= srchost_hash;
            }
            if mode & FLOW_DST_IP != 0 {
                flow_hash ^= dsthost_hash;
            }
        }
        let q = &mut self.tins[tin];
        let mut reduced = (flow_hash % QUEUES as u32) as usize;
        if q.tags[reduced] == flow_hash && q.sets[reduced] != SET_NONE {
            q.way_directs = q.way_directs.wrapping_add(1);
            return reduced;
        }
        let inner = reduced % WAYS;
        let outer = reduced - inner;
        let (mut alloc_src, mut alloc_dst) = (false, false);
        let (tags, sets) = (&q.tags[outer..outer + WAYS], &q.sets[outer..outer + WAYS]);
        let k = if let Some(k) = first_way(inner, ways(|w| tags[w] == flow_hash)) {
            if k != inner {
                q.way_hits = q.way_hits.wrapping_add(1);
            }
            if q.sets[outer + k] == SET_NONE {
                alloc_src = dual(mode, SRC);
                alloc_dst = dual(mode, DST);
            }
            k
        } else if let Some(k) = first_way(inner, ways(|w| sets[w] == SET_NONE)) {
            q.way_misses = q.way_misses.wrapping_add(1);
            alloc_src = dual(mode, SRC);
            alloc_dst = dual(mode, DST);
            k
        } else {
            q.way_collisions = q.way_collisions.wrapping_add(1);
            alloc_src = dual(mode, SRC);
            alloc_dst = dual(mode, DST);
            if q.sets[inner + outer] == SET_BULK {
                q.dec_hosts(outer + inner, mode);
            }
            inner
        };
        reduced = outer + k;
        q.tags[reduced] = flow_hash;
        if alloc_src {
            q.alloc_host(reduced, SRC, srchost_hash, mode);
        }
        if alloc_dst {
            q.alloc_host(reduced, DST, dsthost_hash, mode);
        }
        reduced
    }

    /// `cake_get_flow_quantum`: the tin's quantum shared among the host's bulk flows,
    /// dithered by a random 16-bit value.
    #[inline]
    fn flow_quantum(&mut self, tin: usize, idx: usize) -> u16 {
        let mode = self.cfg.flow_mode;
        let b = &self.tins[tin];
        let mut host_load: u16 = 1;
        for side in [SRC, DST] {
            if dual(mode, side) {
                host_load = host_load.max(b.host_bulk[side][b.flows[idx].host[side] as usize]);
            }
        }
        let fq = b.flow_quantum as u32;
        let dither = self.rand_u32() >> 16;
        ((fq * QUANTUM_DIV[host_load as usize] as u32 + dither) >> 16) as u16
    }

    // ---- dequeue -----------------------------------------------------------------

    /// `cake_dequeue_one`: the head of queue `cur_flow` of tin `cur_tin`.
    #[inline]
    fn dequeue_one(&mut self, sch: &mut Sch) -> Option<(usize, u32)> {
        let (tin, idx) = (self.cur_tin as usize, self.cur_flow as usize);
        let (s, adj) = self.unlink_head(tin, idx)?;
        let pkt = self.slot(s);
        let (len, truesize) = (pkt.len, pkt.truesize);
        let b = &mut self.tins[tin];
        b.flows[idx].backlog = b.flows[idx].backlog.wrapping_sub(len);
        b.tin_backlog = b.tin_backlog.wrapping_sub(len);
        sch.stats.backlog = sch.stats.backlog.wrapping_sub(len);
        self.buffer_used = self.buffer_used.wrapping_sub(truesize);
        sch.stats.qlen -= 1;
        if self.overflow_timeout != 0 {
            let i = self.tins[tin].overflow_idx[idx] as usize;
            self.heapify(i);
        }
        Some((s, adj))
    }

    /// `cobalt_should_drop` for the packet just taken from `flow` (in slot `s`). True = drop.
    fn should_drop(&mut self, tin: usize, idx: usize, s: usize, now: i64, bulk_flows: u32) -> bool {
        let p = self.tins[tin].cparams;
        let coin = if self.tins[tin].flows[idx].cvars.p_drop != 0 { self.rand_u32() } else { u32::MAX };
        let v = &mut self.tins[tin].flows[idx].cvars;
        let pkt = self.slots.pkt[s].as_mut().expect("queued slot holds a packet");
        let sojourn = now.wrapping_sub(pkt.enqueued_at.0 as i64) as u64;
        let mut schedule = now.wrapping_sub(v.drop_next);
        let over_target = sojourn > p.target
            && sojourn > p.mtu_time.wrapping_mul(bulk_flows as u64) * 2
            && sojourn > p.mtu_time.wrapping_mul(4);
        let mut count = v.count;
        let mut next_due = count != 0 && schedule >= 0;
        let mut drop = false;
        v.ecn_marked = false;
        if over_target {
            if !v.dropping {
                v.dropping = true;
                v.drop_next = cobalt_control(now, p.interval, v.rec_inv_sqrt);
            }
            if count == 0 {
                count = 1;
            }
        } else if v.dropping {
            v.dropping = false;
        }
        if next_due && v.dropping {
            v.ecn_marked = pkt.set_ce();
            drop = !v.ecn_marked;
            count = count.wrapping_add(1);
            if count == 0 {
                count -= 1;
            }
            v.invsqrt(count);
            v.drop_next = cobalt_control(v.drop_next, p.interval, v.rec_inv_sqrt);
            schedule = now.wrapping_sub(v.drop_next);
        } else {
            while next_due {
                count -= 1;
                v.invsqrt(count);
                v.drop_next = cobalt_control(v.drop_next, p.interval, v.rec_inv_sqrt);
                schedule = now.wrapping_sub(v.drop_next);
                next_due = count != 0 && schedule >= 0;
            }
        }
        // BLUE: no ECN on purpose.
        if v.p_drop != 0 && !drop && coin < v.p_drop {
            // (the coin is only tossed when BLUE is active)
            drop = true;
        }
        v.count = count;
        if count == 0 {
            v.drop_next = now.wrapping_add(p.interval as i64);
        } else if schedule > 0 && !drop {
            v.drop_next = now;
        }
        drop
    }

    fn throttle_until(&self) -> Instant {
        Instant(self.time_next_packet.min(self.failsafe_next_packet).max(0) as u64)
    }

    /// `cake_dequeue` (without the peek slot).
    fn dequeue_inner(&mut self, sch: &mut Sch, now_i: Instant) -> Dequeued {
        let now = now_i.0 as i64;
        self.last_now = now;
        let mode = self.cfg.flow_mode;
        let ingress = self.cfg.rate_flags & FLAG_INGRESS != 0;
        // Only the very first queue picked may come from the decaying list (not reset
        // by going back to `begin`).
        let mut first_flow = true;
        'begin: loop {
            if sch.stats.qlen == 0 {
                return Dequeued::Empty;
            }
            if self.time_next_packet > now && self.failsafe_next_packet > now {
                sch.stats.overlimit();
                let until = self.throttle_until();
                self.watchdog = Some(until);
                return Dequeued::Throttled { until };
            }
            // Choose a tin.
            if self.rate_ns == 0 {
                let (mut wrapped, mut empty) = (false, true);
                loop {
                    let b = &mut self.tins[self.cur_tin as usize];
                    let active = b.sparse_flow_count as u32 + b.bulk_flow_count as u32;
                    if !(b.tin_deficit < 0 || active == 0) {
                        break;
                    }
                    if b.tin_deficit <= 0 {
                        b.tin_deficit += b.tin_quantum as i32;
                    }
                    if active != 0 {
                        empty = false;
                    }
                    self.cur_tin += 1;
                    if self.cur_tin >= self.tin_cnt {
                        self.cur_tin = 0;
                        if wrapped {
                            if empty {
                                return Dequeued::Empty;
                            }
                        } else {
                            wrapped = true;
                        }
                    }
                }
            } else {
                let mut best_time = i64::MAX;
                let mut best_tin = 0;
                for t in 0..self.tin_cnt as usize {
                    let b = &self.tins[t];
                    if b.sparse_flow_count as u32 + b.bulk_flow_count as u32 > 0 {
                        let time_to_pkt = b.time_next_packet - now;
                        if time_to_pkt <= 0 || time_to_pkt <= best_time {
                            best_time = time_to_pkt;
                            best_tin = t;
                        }
                    }
                }
                self.cur_tin = best_tin as u16;
                let b = &self.tins[best_tin];
                if b.sparse_flow_count as u32 + b.bulk_flow_count as u32 == 0 {
                    return Dequeued::Empty;
                }
            }
            let tin = self.cur_tin as usize;
            'retry: loop {
                let b = &self.tins[tin];
                let mut head = DECAYING_FLOWS;
                if !first_flow || b.list_empty(head) {
                    head = NEW_FLOWS;
                    if b.list_empty(head) {
                        head = OLD_FLOWS;
                        if b.list_empty(head) {
                            head = DECAYING_FLOWS;
                            if b.list_empty(head) {
                                continue 'begin;
                            }
                        }
                    }
                }
                let idx = b.next_of(head) as usize;
                self.cur_flow = idx as u16;
                first_flow = false;
                if self.tins[tin].flows[idx].deficit <= 0 {
                    let b = &mut self.tins[tin];
                    if b.sets[idx] == SET_SPARSE {
                        if b.flows[idx].head != NIL {
                            b.sparse_flow_count -= 1;
                            b.bulk_flow_count += 1;
                            b.inc_hosts(idx, mode);
                            b.sets[idx] = SET_BULK;
                        } else {
                            b.sets[idx] = SET_SPARSE_WAIT;
                        }
                    }
                    let q = self.flow_quantum(tin, idx) as i32;
                    let b = &mut self.tins[tin];
                    b.flows[idx].deficit = b.flows[idx].deficit.wrapping_add(q);
                    b.list_move_tail(idx as u16, OLD_FLOWS);
                    continue 'retry;
                }
                // Retrieve a packet via the AQM.
                let (s, adj) = loop {
                    let Some((s, adj)) = self.dequeue_one(sch) else {
                        let b = &mut self.tins[tin];
                        let p = b.cparams;
                        if cobalt_queue_empty(&mut b.flows[idx].cvars, &p, now) {
                            b.unresponsive_flow_count = b.unresponsive_flow_count.wrapping_sub(1);
                        }
                        let cv = b.flows[idx].cvars;
                        if cv.p_drop != 0 || cv.count != 0 || now < cv.drop_next {
                            b.list_move_tail(idx as u16, DECAYING_FLOWS);
                            match b.sets[idx] {
                                SET_BULK => {
                                    b.bulk_flow_count -= 1;
                                    b.dec_hosts(idx, mode);
                                    b.decaying_flow_count += 1;
                                }
                                SET_SPARSE | SET_SPARSE_WAIT => {
                                    b.sparse_flow_count -= 1;
                                    b.decaying_flow_count += 1;
                                }
                                _ => {}
                            }
                            b.sets[idx] = SET_DECAYING;
                        } else {
                            b.list_del_init(idx as u16);
                            match b.sets[idx] {
                                SET_SPARSE | SET_SPARSE_WAIT => b.sparse_flow_count -= 1,
                                SET_BULK => {
                                    b.bulk_flow_count -= 1;
                                    b.dec_hosts(idx, mode);
                                }
                                _ => b.decaying_flow_count = b.decaying_flow_count.wrapping_sub(1),
                            }
                            b.sets[idx] = SET_NONE;
                        }
                        continue 'begin;
                    };
                    let bulk = self.tins[tin].bulk_flow_count as u32 * u32::from(ingress);
                    let doomed = self.should_drop(tin, idx, s, now, bulk);
                    if !doomed || self.tins[tin].flows[idx].head == NIL {
                        break (s, adj);
                    }
                    // Drop this packet and take another.
                    if ingress {
                        let len = self.advance_shaper(tin, adj, now, true) as i32;
                        let b = &mut self.tins[tin];
                        b.flows[idx].deficit = b.flows[idx].deficit.wrapping_sub(len);
                        b.tin_deficit = b.tin_deficit.wrapping_sub(len);
                    }
                    let b = &mut self.tins[tin];
                    b.dropped[idx] = b.dropped[idx].wrapping_add(1);
                    b.tin_dropped = b.tin_dropped.wrapping_add(1);
                    sch.reduce(1, self.slot(s).len as i64);
                    sch.stats.dropped();
                    if let Some(p) = self.release(s) {
                        p.kfree_skb();
                    }
                    if ingress {
                        continue 'retry;
                    }
                };
                let pkt = self.slots.pkt[s].as_ref().expect("queued slot holds a packet");
                let b = &mut self.tins[tin];
                b.tin_ecn_mark = b.tin_ecn_mark.wrapping_add(u32::from(b.flows[idx].cvars.ecn_marked));
                sch.stats.sent(pkt);
                let delay = now.wrapping_sub(pkt.enqueued_at.0 as i64) as u64;
                b.avge_delay = ewma(b.avge_delay, delay, 8);
                b.peak_delay = ewma(b.peak_delay, delay, if delay > b.peak_delay { 2 } else { 8 });
                b.base_delay = ewma(b.base_delay, delay, if delay < b.base_delay { 2 } else { 8 });
                let len = self.advance_shaper(tin, adj, now, false) as i32;
                let b = &mut self.tins[tin];
                b.flows[idx].deficit = b.flows[idx].deficit.wrapping_sub(len);
                b.tin_deficit = b.tin_deficit.wrapping_sub(len);
                if self.time_next_packet > now && sch.stats.qlen != 0 {
                    self.watchdog = Some(self.throttle_until());
                } else if sch.stats.qlen == 0 {
                    self.watchdog = None;
                    for i in 0..self.tin_cnt as usize {
                        if self.tins[i].decaying_flow_count != 0 {
                            self.watchdog = Some(Instant((now + self.tins[i].cparams.target as i64) as u64));
                            break;
                        }
                    }
                }
                if self.overflow_timeout != 0 {
                    self.overflow_timeout -= 1;
                }
                self.warm_next(tin, idx);
                return self.release(s).map_or(Dequeued::Empty, Dequeued::Packet);
            }
        }
    }

    /// Enqueue one (already segmented) packet on queue `idx` of tin `tin`.
    #[inline]
    fn queue_packet(&mut self, sch: &mut Sch, tin: usize, idx: usize, pkt: Packet, now: Instant) -> u32 {
        let adj = self.overhead(&pkt);
        let (len, truesize) = (pkt.len, pkt.truesize);
        let s = self.flow_queue_add(tin, idx, pkt, adj);
        // Stamped in place: an 8-byte store into the packet just before it is copied
        // whole would stall the copy (store forwarding), as in fifo.rs.
        if let Some(p) = self.slots.pkt[s as usize].as_mut() {
            p.enqueued_at = now;
        }
        sch.stats.qlen += 1;
        self.buffer_used = self.buffer_used.wrapping_add(truesize);
        self.tins[tin].packets = self.tins[tin].packets.wrapping_add(1);
        len
    }
}

impl Qdisc for Cake {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `cake_enqueue`.
    fn enqueue(&mut self, sch: &mut Sch, mut pkt: Packet, now_i: Instant) -> Enqueued {
        let now = now_i.0 as i64;
        self.last_now = now;
        let len = pkt.len;
        // `cake_classify`: the filters first; a classid's minor picks the queue and its
        // major the host (each only when within 1024).
        let (mut flow_ov, mut host_ov) = (0, 0);
        match self.block.classify(&mut pkt, now_i) {
            Some(Verdict::Shot) => {
                sch.stats.dropped();
                return Enqueued::Dropped;
            }
            Some(Verdict::Stolen) => return Enqueued::Stolen,
            Some(Verdict::Class(res)) => {
                if tc_h_min(res.classid) as usize <= QUEUES {
                    flow_ov = tc_h_min(res.classid);
                }
                if tc_h_maj(res.classid) <= (QUEUES as u32) << 16 {
                    host_ov = tc_h_maj(res.classid) >> 16;
                }
            }
            None => {}
        }
        let tin = self.select_tin(&mut pkt);
        let idx = self.hash(tin, &pkt, flow_ov, host_ov);

        // Keep the shaper state fresh.
        if self.tins[tin].tin_backlog == 0 {
            let b = &mut self.tins[tin];
            if b.time_next_packet < now {
                b.time_next_packet = now;
            }
            if sch.stats.qlen == 0 {
                if self.time_next_packet < now {
                    self.failsafe_next_packet = now;
                    self.time_next_packet = now;
                } else if self.time_next_packet > now && self.failsafe_next_packet > now {
                    sch.stats.overlimit();
                    self.watchdog = Some(self.throttle_until());
                }
            }
        }
        if len > self.tins[tin].max_skblen {
            self.tins[tin].max_skblen = len;
        }

        if pkt.gso_segs > 1 && self.cfg.rate_flags & FLAG_SPLIT_GSO != 0 {
            let segs: Vec<Packet> = pkt.gso_segments().collect();
            let n = segs.len() as i32;
            let mut slen = 0u32;
            for s in segs {
                slen = slen.wrapping_add(self.queue_packet(sch, tin, idx, s, now_i));
            }
            sch.stats.backlog = sch.stats.backlog.wrapping_add(slen);
            self.avg_window_bytes = self.avg_window_bytes.wrapping_add(slen as u64);
            let b = &mut self.tins[tin];
            b.bytes = b.bytes.wrapping_add(slen as u64);
            b.tin_backlog = b.tin_backlog.wrapping_add(slen);
            b.flows[idx].backlog = b.flows[idx].backlog.wrapping_add(slen);
            sch.reduce(1 - n, len as i64 - slen as i64);
            drop(pkt);
        } else {
            // The ack filter finds no eligible ACK: this engine's packets carry no TCP
            // header (see the file's notes).
            self.queue_packet(sch, tin, idx, pkt, now_i);
            sch.stats.backlog = sch.stats.backlog.wrapping_add(len);
            self.avg_window_bytes = self.avg_window_bytes.wrapping_add(len as u64);
            let b = &mut self.tins[tin];
            b.bytes = b.bytes.wrapping_add(len as u64);
            b.tin_backlog = b.tin_backlog.wrapping_add(len);
            b.flows[idx].backlog = b.flows[idx].backlog.wrapping_add(len);
        }

        if self.overflow_timeout != 0 {
            let i = self.tins[tin].overflow_idx[idx] as usize;
            self.heapify_up(i);
        }

        // Incoming bandwidth capacity estimate.
        if self.cfg.rate_flags & FLAG_AUTORATE_INGRESS != 0 {
            let packet_interval = (now.wrapping_sub(self.last_packet_time) as u64).min(1_000_000_000);
            let shift = if packet_interval > self.avg_packet_interval { 2 } else { 8 };
            self.avg_packet_interval = ewma(self.avg_packet_interval, packet_interval, shift);
            self.last_packet_time = now;
            if packet_interval > self.avg_packet_interval {
                let window_interval = now.wrapping_sub(self.avg_window_begin) as u64;
                let b = if window_interval == 0 {
                    0
                } else {
                    ((self.avg_window_bytes as u128 * 1_000_000_000) / window_interval as u128) as u64
                };
                let shift = if b > self.avg_peak_bandwidth { 2 } else { 8 };
                self.avg_peak_bandwidth = ewma(self.avg_peak_bandwidth, b, shift);
                self.avg_window_bytes = 0;
                self.avg_window_begin = now;
                if now > self.last_reconfig_time + 250_000_000 {
                    self.cfg.rate_bps = (self.avg_peak_bandwidth * 15) >> 4;
                    self.last_reconfig_time = now;
                    self.reconfigure(sch);
                }
            }
        } else {
            self.avg_window_bytes = 0;
            self.last_packet_time = now;
        }

        // flowchain
        let mode = self.cfg.flow_mode;
        let set = self.tins[tin].sets[idx];
        if set == SET_NONE || set == SET_DECAYING {
            let b = &mut self.tins[tin];
            if set == SET_NONE {
                b.list_add_tail(idx as u16, NEW_FLOWS);
            } else {
                b.decaying_flow_count -= 1;
                b.list_move_tail(idx as u16, NEW_FLOWS);
            }
            b.sets[idx] = SET_SPARSE;
            b.sparse_flow_count += 1;
            let q = self.flow_quantum(tin, idx);
            self.tins[tin].flows[idx].deficit = q as i32;
        } else if set == SET_SPARSE_WAIT {
            let b = &mut self.tins[tin];
            b.sets[idx] = SET_BULK;
            b.sparse_flow_count -= 1;
            b.bulk_flow_count += 1;
            b.inc_hosts(idx, mode);
        }

        if self.buffer_used > self.buffer_max_used {
            self.buffer_max_used = self.buffer_used;
        }
        if self.buffer_used <= self.buffer_limit {
            return Enqueued::Success;
        }
        let (prev_qlen, prev_backlog) = (sch.stats.qlen, sch.stats.backlog);
        let mut same_flow = false;
        while self.buffer_used > self.buffer_limit {
            let id = self.drop_longest(sch, now);
            if (id >> 16) as usize == tin && (id & 0xFFFF) as usize == idx {
                same_flow = true;
            }
        }
        let dropped = prev_qlen - sch.stats.qlen;
        let dropped_bytes = prev_backlog.wrapping_sub(sch.stats.backlog);
        self.tins[tin].drop_overlimit = self.tins[tin].drop_overlimit.wrapping_add(dropped);
        if same_flow {
            sch.reduce(dropped as i32 - 1, dropped_bytes as i64 - len as i64);
            return Enqueued::Congested;
        }
        sch.reduce(dropped as i32, dropped_bytes as i64);
        Enqueued::Success
    }

    /// `cake_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.dequeue_inner(sch, now)
    }

    // peek: `qdisc_peek_dequeued` (the default).

    /// `cake_reset`: every tin cleared (packets freed, not counted as drops).
    fn reset(&mut self, sch: &mut Sch, _now: Instant) {
        for c in 0..MAX_TINS {
            self.clear_tin(sch, c);
        }
    }

    /// `cake_change`.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        let o = opts.of()?;
        if self.cfg.apply(o) {
            self.max_netlen = 0;
            self.max_adjlen = 0;
            self.min_netlen = !0;
            self.min_adjlen = !0;
        }
        self.reconfigure(sch);
        Ok(())
    }

    /// `cake_dump` printed by q_cake.c `cake_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let c = &self.cfg;
        if c.rate_bps != 0 {
            out.rate("bandwidth", "bandwidth ", c.rate_bps, " ");
        } else {
            out.string("bandwidth", format_args!("bandwidth unlimited "), "unlimited");
        }
        if c.rate_flags & FLAG_AUTORATE_INGRESS != 0 {
            out.string("autorate", format_args!("autorate-ingress "), "autorate-ingress");
        }
        print_mode(out, c.tin_mode as u32, "diffserv", &DIFFSERV_NAMES);
        print_mode(out, (c.flow_mode & FLOW_MASK) as u32, "flowmode", &FLOWMODE_NAMES);
        let nat = c.flow_mode & FLOW_NAT_FLAG != 0;
        out.fp(format_args!("{}", if nat { "nat " } else { "nonat " }));
        out.boolean("nat", format_args!(""), nat);
        let wash = c.rate_flags & FLAG_WASH != 0;
        out.fp(format_args!("{}", if wash { "wash " } else { "nowash " }));
        out.boolean("wash", format_args!(""), wash);
        let ingress = c.rate_flags & FLAG_INGRESS != 0;
        if ingress {
            out.fp(format_args!("ingress "));
        }
        out.boolean("ingress", format_args!(""), ingress);
        match c.ack_filter as u32 {
            ACK_AGGRESSIVE => out.string("ack-filter", format_args!("ack-filter-aggressive "), "aggressive"),
            ACK_FILTER => out.string("ack-filter", format_args!("ack-filter "), "enabled"),
            _ => out.string("ack-filter", format_args!("no-ack-filter "), "disabled"),
        }
        let gso = c.rate_flags & FLAG_SPLIT_GSO != 0;
        out.fp(format_args!("{}", if gso { "split-gso " } else { "no-split-gso " }));
        out.boolean("split_gso", format_args!(""), gso);
        let interval = c.interval as u32;
        if interval != 0 {
            out.fp(format_args!("rtt {} ", units::fmt_time(interval)));
        }
        out.uint("rtt", format_args!(""), interval as u64);
        let raw = c.rate_flags & FLAG_OVERHEAD == 0;
        if raw {
            out.fp(format_args!("raw "));
        }
        out.boolean("raw", format_args!(""), raw);
        match c.atm_mode as u32 {
            ATM_ATM => out.string("atm", format_args!("atm "), "atm"),
            ATM_PTM => out.string("atm", format_args!("ptm "), "ptm"),
            _ if !raw => out.string("atm", format_args!("noatm "), "noatm"),
            _ => {}
        }
        let ov = c.rate_overhead as i64;
        out.int("overhead", format_args!("overhead {ov} "), ov);
        if c.rate_mpu != 0 {
            let m = c.rate_mpu as u64;
            out.uint("mpu", format_args!("mpu {m} "), m);
        }
        if c.buffer_config_limit != 0 {
            out.size("memlimit", "memlimit ", c.buffer_config_limit, " ");
        }
        if c.fwmark_mask != 0 {
            out.fp(format_args!("fwmark {:#x} ", c.fwmark_mask));
        }
        if out.is_json() {
            // print_0xhex: C's "%#x", which prints a bare 0.
            let m = c.fwmark_mask;
            out.string("fwmark", format_args!(""), &if m == 0 { "0".into() } else { format!("{m:#x}") });
        }
    }

    /// `cake_dump_stats` printed by `cake_print_xstats`.
    fn dump_xstats(&self, out: &mut Out) {
        let (used, limit) = (self.buffer_max_used, self.buffer_limit);
        out.fp(format_args!(" memory used: {}", units::fmt_size(used)));
        out.fp(format_args!(" of {}\n", units::fmt_size(limit)));
        out.uint("memory_used", format_args!(""), used as u64);
        out.uint("memory_limit", format_args!(""), limit as u64);
        out.rate("capacity_estimate", " capacity estimate: ", self.avg_peak_bandwidth, "\n");
        let (minn, maxn) = (self.min_netlen as u64, self.max_netlen as u64);
        out.uint("min_network_size", format_args!(" min/max network layer size: {minn:12}"), minn);
        out.uint("max_network_size", format_args!(" /{maxn:8}\n"), maxn);
        let (mina, maxa) = (self.min_adjlen as u64, self.max_adjlen as u64);
        out.uint("min_adj_size", format_args!(" min/max overhead-adjusted size: {mina:8}"), mina);
        out.uint("max_adj_size", format_args!(" /{maxa:8}\n"), maxa);
        let off = ((self.avg_netoff as u64 + 0x8000) >> 16) as u32 as u64;
        out.uint("avg_hdr_offset", format_args!(" average network hdr offset: {off:12}\n\n"), off);

        let n = self.tin_cnt as usize;
        let tins: Vec<&Tin> = (0..n).map(|i| &self.tins[self.tin_order[i] as usize]).collect();
        if out.is_json() {
            out.open_array("tins", "");
            for b in &tins {
                out.open_object(None);
                let u = |out: &mut Out, k: &str, v: u64| out.uint(k, format_args!(""), v);
                u(out, "threshold_rate", b.tin_rate_bps);
                u(out, "sent_bytes", b.bytes);
                u(out, "backlog_bytes", b.tin_backlog as u64);
                u(out, "target_us", us32(b.cparams.target));
                u(out, "interval_us", us32(b.cparams.interval));
                u(out, "peak_delay_us", us32(b.peak_delay));
                u(out, "avg_delay_us", us32(b.avge_delay));
                u(out, "base_delay_us", us32(b.base_delay));
                u(out, "sent_packets", b.packets as u64);
                u(out, "way_indirect_hits", b.way_hits as u64);
                u(out, "way_misses", b.way_misses as u64);
                u(out, "way_collisions", b.way_collisions as u64);
                u(out, "drops", b.tin_dropped as u64);
                u(out, "ecn_mark", b.tin_ecn_mark as u64);
                u(out, "ack_drops", b.ack_drops as u64);
                u(out, "sparse_flows", b.sparse_flow_count as u64 + b.decaying_flow_count as u64);
                u(out, "bulk_flows", b.bulk_flow_count as u64);
                u(out, "unresponsive_flows", b.unresponsive_flow_count as u64);
                u(out, "max_pkt_len", b.max_skblen as u64);
                u(out, "flow_quantum", b.flow_quantum as u64);
                out.close_object();
            }
            out.close_array("");
            return;
        }
        match n {
            3 => out.fp(format_args!("                   Bulk  Best Effort        Voice\n")),
            4 => out.fp(format_args!("                   Bulk  Best Effort        Video        Voice\n")),
            _ => {
                out.fp(format_args!("          "));
                for i in 0..n {
                    out.fp(format_args!("        Tin {i}"));
                }
                out.nl();
            }
        }
        let iec = out.iec();
        let row = |out: &mut Out, name: &str, f: &dyn Fn(&Tin) -> String| {
            out.fp(format_args!("{name}"));
            for b in &tins {
                out.fp(format_args!(" {:>12}", f(b)));
            }
            out.nl();
        };
        let us = |ns: u64| units::fmt_time((ns / 1000) as u32);
        row(out, "  thresh  ", &|b| units::fmt_rate(b.tin_rate_bps, iec));
        row(out, "  target  ", &|b| us(b.cparams.target));
        row(out, "  interval", &|b| us(b.cparams.interval));
        row(out, "  pk_delay", &|b| us(b.peak_delay));
        row(out, "  av_delay", &|b| us(b.avge_delay));
        row(out, "  sp_delay", &|b| us(b.base_delay));
        row(out, "  backlog ", &|b| units::fmt_size(b.tin_backlog));
        row(out, "  pkts    ", &|b| b.packets.to_string());
        row(out, "  bytes   ", &|b| b.bytes.to_string());
        row(out, "  way_inds", &|b| b.way_hits.to_string());
        row(out, "  way_miss", &|b| b.way_misses.to_string());
        row(out, "  way_cols", &|b| b.way_collisions.to_string());
        row(out, "  drops   ", &|b| b.tin_dropped.to_string());
        row(out, "  marks   ", &|b| b.tin_ecn_mark.to_string());
        row(out, "  ack_drop", &|b| b.ack_drops.to_string());
        row(out, "  sp_flows", &|b| (b.sparse_flow_count as u32 + b.decaying_flow_count as u32).to_string());
        row(out, "  bk_flows", &|b| b.bulk_flow_count.to_string());
        row(out, "  un_flows", &|b| b.unresponsive_flow_count.to_string());
        row(out, "  max_len ", &|b| b.max_skblen.to_string());
        row(out, "  quantum ", &|b| b.flow_quantum.to_string());
    }

    crate::classful!();

    fn watchdog(&self, sch: &Sch) -> Option<Instant> {
        if sch.stats.qlen == 0 {
            return None;
        }
        self.watchdog
    }
}

impl Cake {
    /// Class `minor` (1-based over the tins in dump order) as (tin, queue).
    fn class_queue(&self, minor: u32) -> Option<(usize, usize)> {
        let i = (minor as usize).checked_sub(1)?;
        (i < QUEUES * self.tin_cnt as usize).then(|| (self.tin_order[i / QUEUES] as usize, i % QUEUES))
    }
}

/// The queues as classes `<handle>:<n>`, n = tin position × 1024 + queue + 1: only
/// dumpable (`cake_find` finds nothing, there are no leaves); the qdisc has a filter
/// block.
impl Classful for Cake {
    /// `cake_walk`: the queues on a list (even if momentarily empty), tins in dump order.
    fn class_minors(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for i in 0..self.tin_cnt as usize {
            let b = &self.tins[self.tin_order[i] as usize];
            for (j, f) in b.flows.iter().enumerate() {
                if f.link[0] as usize != j {
                    v.push((i * QUEUES + j + 1) as u32);
                }
            }
        }
        v
    }
    // find, leaf and graft: the defaults (no class is found, none has a qdisc,
    // no graft op).
    /// `cake_dump_class_stats`: the queue's packets, backlog and drops.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let Some((t, j)) = self.class_queue(minor) else { return Some(Stats::default()) };
        let b = &self.tins[t];
        let mut qlen = 0;
        let mut s = b.flows[j].head;
        while s != NIL {
            qlen += 1;
            s = self.slots.meta[s as usize][0];
        }
        Some(Stats { qlen, backlog: b.flows[j].backlog, drops: b.dropped[j], ..Default::default() })
    }
    /// Only the queue counters (no TCA_STATS_BASIC).
    fn class_has_basic_stats(&self) -> bool {
        false
    }
    /// The queue's xstats as `cake_print_xstats` prints them.
    fn dump_class_xstats(&self, minor: u32, out: &mut Out) {
        let Some((t, j)) = self.class_queue(minor) else { return };
        let f = &self.tins[t].flows[j];
        let v = &f.cvars;
        out.int("deficit", format_args!("  deficit {}", f.deficit), f.deficit as i64);
        out.uint("count", format_args!(" count {}", v.count), v.count as u64);
        let us = |t: i64| (self.last_now.wrapping_sub(t) / 1000) as i32;
        if v.dropping {
            out.boolean("dropping", format_args!(" dropping"), true);
            let d = us(v.drop_next);
            if d < 0 {
                out.fp(format_args!(" drop_next -{}", units::fmt_time(d.wrapping_neg() as u32)));
            } else {
                out.uint("drop_next", format_args!(" drop_next {}", units::fmt_time(d as u32)), d as u64);
            }
        }
        out.uint("blue_prob", format_args!(" blue_prob {}", v.p_drop), v.p_drop as u64);
        if v.p_drop != 0 {
            let b = us(v.blue_timer);
            // tc prints a negative timer through sprint_time's unsigned argument.
            let txt = if b < 0 {
                format!(" blue_timer -{}", units::fmt_time(b as u32))
            } else {
                format!(" blue_timer {}", units::fmt_time(b as u32))
            };
            if b >= 0 {
                out.uint("blue_timer", format_args!("{txt}"), b as u64);
            } else {
                out.fp(format_args!("{txt}"));
            }
        }
    }
    /// `cake_tcf_block`: the qdisc's block; classes have none (NULL → EINVAL).
    fn block(&self, minor: u32) -> Option<&Block> {
        (minor == 0).then_some(&self.block)
    }
    fn block_mut(&mut self, minor: u32) -> Option<&mut Block> {
        (minor == 0).then_some(&mut self.block)
    }
}

/// `ktime_to_us` put in a u32 attribute.
fn us32(ns: u64) -> u64 {
    (ns / 1000) as u32 as u64
}

/// `cake_print_mode`.
fn print_mode(out: &mut Out, v: u32, key: &str, table: &[&str]) {
    match table.get(v as usize) {
        Some(name) => out.string(key, format_args!("{name} "), name),
        None => {
            if out.is_json() {
                out.string(key, format_args!(""), "unknown");
            } else {
                out.fp(format_args!("(?{key}?)"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::stats::Reduce;
    use crate::testing::{dev, held};

    fn opts(s: &str) -> Result<CakeOpt, TcError> {
        let argv: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(&mut Args::new(&argv))
    }

    fn cake(s: &str) -> Node<Cake> {
        held(Cake::new(Some(&opts(s).unwrap()), &dev(), 0x10000, Instant::ZERO).unwrap())
    }

    fn dump(q: &Cake) -> String {
        let mut o = Out::text();
        q.dump(&mut o, &dev());
        o.into_string()
    }

    #[test]
    fn parse_presets_accumulate() {
        let o = opts("pppoe-ptm ether-vlan").unwrap();
        assert_eq!((o.atm, o.overhead), (Some(ATM_PTM), Some(34)));
        let o = opts("ethernet docsis").unwrap();
        assert_eq!((o.atm, o.overhead, o.mpu), (Some(ATM_NONE), Some(56), Some(64)));
        let o = opts("rtt 0").unwrap();
        assert_eq!((o.rtt, o.target), (None, Some(1)));
        let o = opts("metro").unwrap();
        assert_eq!((o.rtt, o.target), (Some(10000), Some(500)));
        assert_eq!(opts("lan metro").unwrap_err().msg, "Error: duplicate \"metro\": \"lan\" is the second value.\n");
        assert_eq!(opts("overhead 257").unwrap_err().msg, "Illegal \"overhead\", valid range is -64 to 256\\n");
        assert_eq!(opts("mpu -1").unwrap_err().msg, "Illegal \"mpu\", valid range is 0 to 256\\n");
        // strtol of "" consumes nothing and leaves *end == NUL: accepted as 0.
        let argv = vec!["overhead".to_string(), String::new()];
        assert_eq!(parse(&mut Args::new(&argv)).unwrap().overhead, Some(0));
    }

    #[test]
    fn dump_defaults_and_overhead() {
        assert_eq!(
            dump(&cake("")),
            "bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead 0 "
        );
        assert_eq!(
            dump(&cake("bandwidth 20mbit docsis ack-filter fwmark 0xf0 memlimit 1mb")),
            "bandwidth 20Mbit diffserv3 triple-isolate nonat nowash ack-filter split-gso rtt 100ms noatm overhead 18 mpu 64 memlimit 1Mb fwmark 0xf0 "
        );
    }

    #[test]
    fn set_rate_fixed_point() {
        // 20 Mbit/s = 2.5 MB/s: 400 ns per byte, in 34-bit fixed point shifted to fit.
        let q = cake("bandwidth 20mbit besteffort");
        let b = &q.tins[0];
        assert_eq!(b.tin_rate_ns >> b.tin_rate_shft, 400);
        assert_eq!(b.flow_quantum, 610); // 2_500_000 >> 12
                                         // mtu_time = 1514 B × 400 ns = 605.6 µs → target max(908 µs, 5 ms).
        assert_eq!(b.cparams.target, 5_000_000);
        assert_eq!(b.cparams.interval, 100_000_000);
        assert_eq!(q.buffer_limit, 4 << 20);
    }

    #[test]
    fn atm_and_ptm_framing() {
        let mut q = cake("atm overhead 8");
        // 1000 B frame − 14 B offset + 8 = 994 → 21 cells of 53 = 1113.
        assert_eq!(q.calc_overhead(1000, 14), 1113);
        let mut q = cake("ptm overhead 30");
        assert_eq!(q.calc_overhead(1000, 14), 1016 + 16);
        let mut q = cake("raw mpu 100");
        assert_eq!(q.calc_overhead(60, 14), 100);
    }

    #[test]
    fn shaper_spaces_packets_and_counts_overlimits() {
        // 8 Mbit/s = 1 MB/s: 1000 B every 1 ms.
        let mut q = cake("bandwidth 8mbit besteffort raw");
        for i in 0..3 {
            assert_eq!(q.enqueue(Packet::new(i, 1000), Instant::ZERO), Enqueued::Success);
        }
        assert!(matches!(q.dequeue(Instant::ZERO), Dequeued::Packet(_)));
        assert_eq!(q.dequeue(Instant::ZERO), Dequeued::Throttled { until: Instant::from_millis(1) });
        assert!(matches!(q.dequeue(Instant::from_millis(1)), Dequeued::Packet(_)));
        assert!(matches!(q.dequeue(Instant::from_millis(2)), Dequeued::Packet(_)));
        assert_eq!(q.stats().overlimits, 1);
        assert_eq!(q.tins[0].packets, 3);
    }

    #[test]
    fn tins_by_dscp_and_priority() {
        let mut q = cake("diffserv4");
        let mut p = Packet::new(1, 100);
        p.tos = 46 << 2; // EF → Voice (tin 3)
        q.enqueue(p, Instant::ZERO);
        let mut p = Packet::new(2, 100);
        p.tos = 8 << 2; // CS1 → Bulk (tin 1)
        q.enqueue(p, Instant::ZERO);
        q.enqueue(Packet::new(3, 100).with_priority(0x10001), Instant::ZERO); // 1:1 = first in dump order = Bulk
        assert_eq!((q.tins[3].packets, q.tins[1].packets, q.tins[0].packets), (1, 2, 0));
    }

    #[test]
    fn flows_share_by_drr() {
        let mut q = cake("besteffort flows");
        for i in 0..20u64 {
            q.enqueue(Packet::new(i, 1000).with_hash(1 + (i % 2) as u32), Instant::ZERO);
        }
        let mut order = Vec::new();
        while let Dequeued::Packet(p) = q.dequeue(Instant::ZERO) {
            order.push(p.hash);
        }
        assert_eq!(order.len(), 20);
        // Alternation with runs of at most two (a 1514-byte quantum covers one or two).
        let ones = order.iter().take(10).filter(|&&h| h == 1).count();
        assert!((4..=6).contains(&ones), "{order:?}");
        assert_eq!(q.tins[0].way_misses, 2);
    }

    #[test]
    fn cobalt_drops_after_interval() {
        let mut q = cake("besteffort flows rtt 100ms");
        for i in 0..200u64 {
            q.enqueue(Packet::new(i, 1000).with_hash(7), Instant::ZERO);
        }
        // Everything waited 200 ms: above target for longer than an interval.
        let mut sent = 0;
        while let Dequeued::Packet(_) = q.dequeue(Instant::from_millis(200)) {
            sent += 1;
        }
        assert!(q.tins[0].tin_dropped > 0);
        assert_eq!(sent + q.tins[0].tin_dropped, 200);
    }

    #[test]
    fn memlimit_drops_from_longest_queue() {
        let mut q = cake("besteffort flows memlimit 26000");
        for i in 0..10u64 {
            q.enqueue(Packet::new(i, 1000).with_hash(5), Instant::ZERO);
        }
        // truesize 2304 each (packet_snd_truesize(1000)): 26000 holds 11 (25344); the
        // twelfth (27648) overflows and one packet goes.
        q.enqueue(Packet::new(100, 1000).with_hash(6), Instant::ZERO);
        let r = q.enqueue(Packet::new(101, 1000).with_hash(6), Instant::ZERO);
        assert_eq!(r, Enqueued::Success);
        assert_eq!(q.tins[0].tin_dropped, 1);
        assert_eq!(q.tins[0].flows[5].backlog, 9000);
    }

    #[test]
    fn xstats_table_besteffort() {
        let q = cake("besteffort");
        let mut o = Out::text();
        q.dump_xstats(&mut o);
        let s = o.into_string();
        assert!(s.starts_with(" memory used: 0b of 15140Kb\n capacity estimate: 0bit\n"), "{s}");
        assert!(s.contains("\n\n                  Tin 0\n  thresh           0bit\n  target            5ms\n"), "{s}");
    }

    /// Drain `q`, following its throttle times; (id, departure ns) in order.
    fn drain(q: &mut Node<Cake>, mut now: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        loop {
            match q.dequeue(Instant(now)) {
                Dequeued::Packet(p) => out.push((p.id, now)),
                Dequeued::Throttled { until } => now = until.0,
                Dequeued::Empty => return out,
            }
        }
    }

    #[test]
    fn cobalt_drops_the_ninth_of_a_burst_at_4mbit() {
        // goldens/diff/cake-shaper: the kernel drops packet 9 of the first burst too.
        // 1000 B at 4 Mbit/s = 2 ms; 4 MTU times = 12.11 ms. Packet 8 (sojourn 14 ms)
        // starts the dropping state with drop_next = now (rec_inv_sqrt still 0), so
        // packet 9 is dropped at once; then count 2 spaces the next drop by
        // interval/sqrt(2) ≈ 70.7 ms.
        let mut q = cake("bandwidth 4mbit besteffort flows");
        for i in 1..=10u64 {
            q.enqueue(Packet::new(i, 1000).with_hash(3), Instant::ZERO);
        }
        let got = drain(&mut q, 0);
        let want: Vec<(u64, u64)> = (1..=8).chain([10]).zip((0..9).map(|k| k * 2_000_000)).collect();
        assert_eq!(got, want);
        assert_eq!((q.tins[0].tin_dropped, q.stats().drops, q.tins[0].dropped[3]), (1, 1, 1));
        let v = q.tins[0].flows[3].cvars;
        assert_eq!((v.count, v.dropping, v.rec_inv_sqrt), (2, true, 3037000500));
    }

    #[test]
    fn wash_clears_dscp_keeps_ecn_and_still_picks_the_tin() {
        let mut q = cake("diffserv4 wash");
        let mut p = Packet::new(1, 100);
        p.tos = (46 << 2) | 0b10; // EF, ECT(0)
        q.enqueue(p, Instant::ZERO);
        assert_eq!(q.tins[3].packets, 1, "EF → Voice");
        let Dequeued::Packet(p) = q.dequeue(Instant::ZERO) else { panic!() };
        assert_eq!(p.tos, 0b10);
    }

    #[test]
    fn overflow_drops_from_the_longest_queue_of_any_tin() {
        // memlimit 10 packets' truesize (2304 each); tin 2 (Voice) holds the fattest.
        // At 10 ms: BLUE only moves when its timer is a target (5 ms) old.
        let t = Instant::from_millis(10);
        let mut q = cake("diffserv3 flows memlimit 23040");
        for i in 0..6u64 {
            let mut p = Packet::new(i, 1000).with_hash(1);
            p.tos = 46 << 2;
            q.enqueue(p, t);
        }
        for i in 6..10u64 {
            q.enqueue(Packet::new(i, 1000).with_hash(2), t);
        }
        assert_eq!(q.stats().drops, 0);
        // The eleventh: the Voice queue (6 packets) loses its head.
        assert_eq!(q.enqueue(Packet::new(10, 1000).with_hash(2), t), Enqueued::Success);
        assert_eq!((q.tins[2].tin_dropped, q.tins[2].flows[1].backlog, q.tins[0].flows[2].backlog), (1, 5000, 5000));
        assert_eq!(q.take_reduce(), Reduce::new(1, 1000));
        // BLUE noticed: p_drop = 1/256 and the queue counts as unresponsive.
        assert_eq!((q.tins[2].flows[1].cvars.p_drop, q.tins[2].unresponsive_flow_count), (1 << 24, 1));
        // The twelfth makes its own queue the longest: NET_XMIT_CN, and the parents,
        // which will not count it, are told nothing more.
        assert_eq!(q.enqueue(Packet::new(11, 1000).with_hash(2), t), Enqueued::Congested);
        assert_eq!(q.take_reduce(), Reduce::new(0, 0));
        // drop_overlimit counts on the tin of the packet that overflowed (both times
        // tin 0), tin_dropped on the tin that lost one.
        assert_eq!((q.tins[0].tin_dropped, q.tins[0].drop_overlimit, q.stats().qlen), (1, 2, 10));
    }

    #[test]
    fn ingress_mode_charges_the_shaper_for_overflow_drops() {
        let mut q = cake("bandwidth 8mbit besteffort flows ingress memlimit 3584");
        q.enqueue(Packet::new(1, 1000).with_hash(1), Instant::ZERO);
        q.enqueue(Packet::new(2, 1000).with_hash(1), Instant::ZERO);
        let before = q.time_next_packet;
        // A third overflows: the head (1000 B = 1 ms at 8 Mbit/s) is dropped and charged.
        q.enqueue(Packet::new(3, 1000).with_hash(1), Instant::ZERO);
        assert_eq!(q.time_next_packet - before, 1_000_000);
        assert_eq!(q.failsafe_next_packet, 0, "drops do not move the failsafe clock");
    }

    #[test]
    fn gso_split_or_charged_whole() {
        // split-gso (the default): three segments, three packets; the parents grew by
        // one packet and are told two more (a negative reduction).
        let mut q = cake("besteffort flows overhead 10");
        let mut p = Packet::new(1, 3000).with_hash(9);
        p.gso_segs = 3;
        assert_eq!(q.enqueue(p, Instant::ZERO), Enqueued::Success);
        assert_eq!((q.stats().qlen, q.tins[0].packets, q.tins[0].bytes), (3, 3, 3000));
        assert_eq!(q.take_reduce(), Reduce::new(-2, 0));
        // Each segment: 1000 − 14 + 10.
        assert_eq!((q.min_adjlen, q.max_adjlen), (996, 996));
        // no-split-gso: one packet, charged as its segments.
        let mut q = cake("besteffort flows overhead 10 no-split-gso");
        let mut p = Packet::new(1, 3000).with_hash(9);
        p.gso_segs = 3;
        q.enqueue(p, Instant::ZERO);
        assert_eq!((q.stats().qlen, q.tins[0].packets), (1, 1));
        assert_eq!(q.slots.meta[0][1], 3 * 996);
    }

    #[test]
    fn autorate_ingress_follows_the_arrival_rate() {
        // Pairs of 1000-byte packets every 2 ms: 1 MB/s arriving in bursts. The first of
        // a pair comes after a gap longer than the (EWMA) average gap, closing a window
        // of 2000 bytes in 2 ms; the peak estimate goes to 10^6 B/s (less the integer
        // EWMA's shortfall) and every 250 ms the bandwidth becomes 15/16 of it. (At a
        // perfectly even rate the average gap reaches the gap and no window closes.)
        let mut q = cake("autorate-ingress besteffort");
        assert_eq!(q.cfg.rate_bps, 0);
        for k in 1..=150u64 {
            let t = Instant::from_millis(2 * k);
            for i in 0..2 {
                q.enqueue(Packet::new(2 * k + i, 1000).with_hash(1), t);
            }
            while let Dequeued::Packet(_) = q.dequeue(t) {}
        }
        let est = q.avg_peak_bandwidth;
        assert!((999_000..=1_000_000).contains(&est), "{est}");
        assert_eq!(q.cfg.rate_bps, (est * 15) >> 4);
        assert_eq!(q.tins[0].tin_rate_bps, q.cfg.rate_bps, "reconfigured: the shaper is on");
        let mut o = Out::text();
        q.dump(&mut o, &dev());
        assert!(o.as_str().starts_with("bandwidth 7500Kbit autorate-ingress besteffort "), "{}", o.as_str());
    }
}
