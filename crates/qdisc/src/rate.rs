//! Rate → time conversion shared by the shapers (tbf now, htb later): the kernel's
//! `struct psched_ratecfg` and its helpers (§1.6 of docs/kernel-notes.md).
//!
//! Theory: a rate is kept as bytes per second plus a precomputed fixed-point
//! reciprocal, so that "how long does sending `len` bytes take" is one multiply and
//! one shift:
//!
//! ```text
//! mult / 2^shift ≈ 1e9 / rate_bytes_ps        (nanoseconds per byte)
//! l2t(len)       = (len' × mult) >> shift     (len' = len adjusted, see below)
//! ```
//!
//! `shift` is raised until `mult` has bit 31 set (at most 32 significant bits of
//! precision) or the shifted numerator `1e9 << shift` reaches bit 63 (very high
//! rates, where `mult` stays small). Before the multiply the length is adjusted for
//! the link: `overhead` bytes are added, the result is raised to `mpu`, and on ATM
//! links it is rounded up to whole 48-byte cell payloads, each costing 53 bytes
//! on the wire.
//!
//! The inverse, [`PschedRatecfg::t2l`], is tbf's `psched_ns_t2l`: how many
//! bytes fit in a time span (used for tbf's `max_size` when tc sends no burst).
//!
//! Integer widths follow the kernel on purpose (u32 lengths that wrap, u64
//! products that wrap) so extreme parameters give the kernel's numbers.

/// `tc_ratespec.linklayer` / `psched_ratecfg.linklayer` (TC_LINKLAYER_*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkLayer {
    /// TC_LINKLAYER_ETHERNET (1): lengths are used as they are.
    #[default]
    Ethernet,
    /// TC_LINKLAYER_ATM (2): lengths are rounded up to 48-byte cells sent as 53 bytes.
    Atm,
}

impl LinkLayer {
    /// The TC_LINKLAYER_* value.
    pub fn value(self) -> u8 {
        match self {
            LinkLayer::Ethernet => 1,
            LinkLayer::Atm => 2,
        }
    }
    /// iproute2's `sprint_linklayer`.
    pub fn name(self) -> &'static str {
        match self {
            LinkLayer::Ethernet => "ethernet",
            LinkLayer::Atm => "atm",
        }
    }
    /// iproute2's `get_linklayer`: a prefix of `ethernet`, `atm` or `adsl`
    /// (adsl is ATM), matched in that order and case-sensitively.
    pub fn parse(s: &str) -> Option<LinkLayer> {
        if crate::tc::matches(s, "ethernet") {
            Some(LinkLayer::Ethernet)
        } else if crate::tc::matches(s, "atm") || crate::tc::matches(s, "adsl") {
            Some(LinkLayer::Atm)
        } else {
            None
        }
    }
}

/// `struct tc_ratespec`: a rate as tc sends it and as the kernel dumps it back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSpec {
    /// Rate table cell size log (tc fills it; the kernel dumps 0).
    pub cell_log: u8,
    pub linklayer: LinkLayer,
    pub overhead: u16,
    /// tc sends -1; unused by the kernel's maths.
    pub cell_align: i16,
    pub mpu: u16,
    /// Bytes per second, saturated at 2^32−1 (larger rates travel as RATE64 attributes).
    pub rate: u32,
}

impl RateSpec {
    /// `tc_calc_rtable`'s side effects on a ratespec (the table itself is not kept):
    /// cell_log defaults to the smallest with `mtu >> cell_log ≤ 255` (mtu 0 → 2047).
    pub fn calc_rtable(&mut self, cell_log: Option<u8>, mtu: u32, linklayer: LinkLayer) {
        let mtu = if mtu == 0 { 2047 } else { mtu };
        self.cell_log = cell_log.unwrap_or_else(|| {
            let mut c = 0u8;
            while (mtu >> c) > 255 {
                c += 1;
            }
            c
        });
        self.cell_align = -1;
        self.linklayer = linklayer;
    }
}

/// `struct psched_ratecfg` (include/net/sch_generic.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PschedRatecfg {
    /// Bytes per second; 0 means "no rate" (e.g. tbf without a peak rate).
    pub rate_bytes_ps: u64,
    pub mult: u32,
    pub overhead: u16,
    pub mpu: u16,
    pub linklayer: LinkLayer,
    pub shift: u8,
}

const NSEC_PER_SEC: u64 = 1_000_000_000;

impl PschedRatecfg {
    /// Mirrors `psched_ratecfg_precompute` + `psched_ratecfg_precompute__`
    /// (net/sched/sch_generic.c) for an explicit rate.
    pub fn precompute(rate_bytes_ps: u64, overhead: u16, mpu: u16, linklayer: LinkLayer) -> Self {
        let (mult, shift) = precompute_mult_shift(rate_bytes_ps);
        PschedRatecfg { rate_bytes_ps, mult, overhead, mpu, linklayer, shift }
    }

    /// `psched_ratecfg_precompute(r, conf, rate64)`: the rate is the larger of the
    /// 32-bit ratespec field and the 64-bit attribute (0 when absent).
    pub fn from_spec(spec: &RateSpec, rate64: u64) -> Self {
        Self::precompute((spec.rate as u64).max(rate64), spec.overhead, spec.mpu, spec.linklayer)
    }

    /// `psched_ratecfg_getrate`: the ratespec the kernel dumps. The rate saturates at
    /// 32 bits, cell_log/cell_align read back as 0.
    pub fn getrate(&self) -> RateSpec {
        RateSpec {
            cell_log: 0,
            linklayer: self.linklayer,
            overhead: self.overhead,
            cell_align: 0,
            mpu: self.mpu,
            rate: self.rate_bytes_ps.min(u32::MAX as u64) as u32,
        }
    }

    /// A configured (non-zero) rate, e.g. `tbf_peak_present`.
    pub fn is_present(&self) -> bool {
        self.rate_bytes_ps != 0
    }

    /// Mirrors `psched_l2t_ns`: nanoseconds to send `len` bytes at this rate.
    ///
    /// `len += overhead`; `len = max(len, mpu)`; ATM: `ceil(len/48) × 53`;
    /// then `(len × mult) >> shift`. The length arithmetic is 32-bit and wraps, as in C.
    pub fn l2t_ns(&self, len: u32) -> u64 {
        let mut len = len.wrapping_add(self.overhead as u32);
        if len < self.mpu as u32 {
            len = self.mpu as u32;
        }
        if self.linklayer == LinkLayer::Atm {
            // DIV_ROUND_UP(len, 48) * 53, still in unsigned int.
            let cells = len.wrapping_add(47) / 48;
            len = cells.wrapping_mul(53);
        }
        (len as u64).wrapping_mul(self.mult as u64) >> self.shift
    }

    /// Mirrors `psched_ns_t2l` (net/sched/sch_tbf.c): bytes that fit in `ns`.
    ///
    /// `len = ns × rate / 1e9` (the product wraps in u64); ATM: `len / 53 × 48`;
    /// then the overhead is taken off, floored at 0.
    pub fn t2l(&self, ns: u64) -> u64 {
        let mut len = ns.wrapping_mul(self.rate_bytes_ps) / NSEC_PER_SEC;
        if self.linklayer == LinkLayer::Atm {
            len = len / 53 * 48;
        }
        len.saturating_sub(self.overhead as u64)
    }
}

/// `psched_ratecfg_precompute__`: (mult, shift) with mult/2^shift ≈ 1e9/rate.
/// A zero rate gives (1, 0).
/// `struct psched_pktrate`: a packet rate (police `pkts_rate`) as time per packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PschedPktrate {
    pub rate_pkts_ps: u64,
    pub mult: u32,
    pub shift: u8,
}

impl PschedPktrate {
    /// Mirrors `psched_ppscfg_precompute`: the same reciprocal as a byte rate's.
    pub fn precompute(rate_pkts_ps: u64) -> Self {
        let (mult, shift) = precompute_mult_shift(rate_pkts_ps);
        PschedPktrate { rate_pkts_ps, mult, shift }
    }

    /// Mirrors `psched_pkt2t_ns`: nanoseconds for `pkts` packets.
    pub fn pkt2t_ns(&self, pkts: u32) -> u64 {
        (pkts as u64).wrapping_mul(self.mult as u64) >> self.shift
    }
}

fn precompute_mult_shift(rate: u64) -> (u32, u8) {
    if rate == 0 {
        return (1, 0);
    }
    let mut factor = NSEC_PER_SEC;
    let mut shift = 0u8;
    loop {
        // The kernel stores the u64 quotient into a u32; it always fits (see tests).
        let mult = (factor / rate) as u32;
        if mult & (1 << 31) != 0 || factor & (1 << 63) != 0 {
            return (mult, shift);
        }
        factor <<= 1;
        shift += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_rate_reciprocal() {
        // 1 pkt/s: 1e9 and 2e9 lack bit 31, 4e9 has it: mult 4e9, shift 2, 1 s a packet.
        let r = PschedPktrate::precompute(1);
        assert_eq!((r.mult, r.shift, r.pkt2t_ns(1)), (4_000_000_000, 2, 1_000_000_000));
        // 1000 pkt/s: (1e9 << 12) / 1000 = 4096000000, 1e6 ns a packet.
        let r = PschedPktrate::precompute(1000);
        assert_eq!((r.mult, r.shift, r.pkt2t_ns(1), r.pkt2t_ns(3)), (4_096_000_000, 12, 1_000_000, 3_000_000));
        // 7 pkt/s: (1e9 << 4) / 7 = 2285714285 truncates, as the kernel's does
        // (142857142.86 ns a packet).
        let r = PschedPktrate::precompute(7);
        assert_eq!((r.mult, r.shift, r.pkt2t_ns(1)), (2_285_714_285, 4, 142_857_142));
    }

    #[test]
    fn mult_shift_exact_values() {
        // 1 Mbit/s = 125000 B/s = 8000 ns/byte: 8000 << 19 = 4194304000 has bit 31.
        let r = PschedRatecfg::precompute(125_000, 0, 0, LinkLayer::Ethernet);
        assert_eq!((r.mult, r.shift), (4_194_304_000, 19));
        assert_eq!(r.l2t_ns(1), 8000);
        assert_eq!(r.l2t_ns(1514), 12_112_000);
        assert_eq!(r.l2t_ns(10240), 81_920_000);
        // 1 B/s: neither 1e9 nor 2e9 has bit 31; 4e9 does.
        let r = PschedRatecfg::precompute(1, 0, 0, LinkLayer::Ethernet);
        assert_eq!((r.mult, r.shift), (4_000_000_000, 2));
        assert_eq!(r.l2t_ns(1500), 1_500_000_000_000);
        // 1 Tbit/s = 1.25e11 B/s: the numerator reaches bit 63 first (1e9 << 34).
        let r = PschedRatecfg::precompute(125_000_000_000, 0, 0, LinkLayer::Ethernet);
        assert_eq!(r.shift, 34);
        assert_eq!(r.mult, ((1_000_000_000u64 << 34) / 125_000_000_000) as u32);
        assert_eq!(r.mult, 137_438_953);
        // 2^20 B/s (1 MiBps): 1e9/2^20 = 953.67…, 2e9 at shift 21 lacks bit 31, 4e9 at shift 22 has it.
        let r = PschedRatecfg::precompute(1 << 20, 0, 0, LinkLayer::Ethernet);
        assert_eq!((r.mult, r.shift), (4_000_000_000, 22));
        // Zero rate.
        let r = PschedRatecfg::precompute(0, 0, 0, LinkLayer::Ethernet);
        assert_eq!((r.mult, r.shift), (1, 0));
        assert!(!r.is_present());
    }

    #[test]
    fn mult_never_overflows_u32() {
        for rate in [1u64, 2, 3, 7, 999, 124, 125_000, 1 << 31, (1 << 32) - 1, 1 << 32, u64::MAX / 3, u64::MAX] {
            let (mult, shift) = precompute_mult_shift(rate);
            let exact = ((NSEC_PER_SEC as u128) << shift) / rate as u128;
            assert_eq!(mult as u128, exact, "rate {rate}");
        }
    }

    #[test]
    fn overhead_mpu_and_atm() {
        let r = PschedRatecfg::precompute(125_000, 24, 0, LinkLayer::Ethernet);
        assert_eq!(r.l2t_ns(10240), 10264 * 8000);
        let r = PschedRatecfg::precompute(125_000, 0, 64, LinkLayer::Ethernet);
        assert_eq!(r.l2t_ns(40), 64 * 8000);
        assert_eq!(r.l2t_ns(65), 65 * 8000);
        // ATM: 10240 B → 214 cells → 11342 B on the wire.
        let r = PschedRatecfg::precompute(125_000, 0, 0, LinkLayer::Atm);
        assert_eq!(r.l2t_ns(10240), 11342 * 8000);
        assert_eq!(r.l2t_ns(48), 53 * 8000);
        assert_eq!(r.l2t_ns(49), 106 * 8000);
        assert_eq!(r.l2t_ns(0), 0);
        // Overhead before the cell rounding: 1 + 10 → one cell.
        let r = PschedRatecfg::precompute(125_000, 10, 0, LinkLayer::Atm);
        assert_eq!(r.l2t_ns(1), 53 * 8000);
        assert_eq!(r.l2t_ns(39), 106 * 8000);
        // 32-bit wrap of len + overhead, as in C.
        let r = PschedRatecfg::precompute(125_000, 10, 0, LinkLayer::Ethernet);
        assert_eq!(r.l2t_ns(u32::MAX - 4), 5 * 8000);
    }

    #[test]
    fn t2l_inverse() {
        let r = PschedRatecfg::precompute(125_000, 0, 0, LinkLayer::Ethernet);
        assert_eq!(r.t2l(81_920_000), 10240);
        assert_eq!(r.t2l(7999), 0);
        let r = PschedRatecfg::precompute(125_000, 24, 0, LinkLayer::Ethernet);
        assert_eq!(r.t2l(81_920_000), 10216);
        assert_eq!(r.t2l(8000 * 20), 0);
        // ATM: 11342 wire bytes = 214 cells = 10272 payload bytes.
        let r = PschedRatecfg::precompute(125_000, 0, 0, LinkLayer::Atm);
        assert_eq!(r.t2l(11342 * 8000), 10272);
        assert_eq!(r.t2l(52 * 8000), 0);
    }

    #[test]
    fn ratespec_roundtrip() {
        let spec =
            RateSpec { cell_log: 3, linklayer: LinkLayer::Atm, overhead: 5, cell_align: -1, mpu: 64, rate: 125_000 };
        let r = PschedRatecfg::from_spec(&spec, 0);
        assert_eq!(r.rate_bytes_ps, 125_000);
        let back = r.getrate();
        assert_eq!(back, RateSpec { cell_log: 0, cell_align: 0, ..spec });
        let big = RateSpec { rate: u32::MAX, ..Default::default() };
        let r = PschedRatecfg::from_spec(&big, 12_500_000_000);
        assert_eq!(r.rate_bytes_ps, 12_500_000_000);
        assert_eq!(r.getrate().rate, u32::MAX);
    }

    #[test]
    fn linklayer_names() {
        assert_eq!(LinkLayer::parse("ethernet"), Some(LinkLayer::Ethernet));
        assert_eq!(LinkLayer::parse("e"), Some(LinkLayer::Ethernet));
        assert_eq!(LinkLayer::parse("a"), Some(LinkLayer::Atm));
        assert_eq!(LinkLayer::parse("adsl"), Some(LinkLayer::Atm));
        assert_eq!(LinkLayer::parse("ATM"), None);
        assert_eq!(LinkLayer::parse(""), None);
        assert_eq!(LinkLayer::Atm.name(), "atm");
    }
}
