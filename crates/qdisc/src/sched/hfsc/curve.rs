//! Service curves as sch_hfsc.c computes with them: two-piece linear curves in
//! psched ticks (64 ns) and bytes, slopes kept scaled (`sm`, bytes per tick << 24)
//! and inverted (`ism`, ticks per byte << 14) so that both directions are a
//! multiply and a shift. All arithmetic is the kernel's u64 arithmetic, wrapping
//! where the kernel's wraps (an infinite inverse slope added to a time, for one).

/// PSCHED_SHIFT: a psched tick is 2^6 ns.
pub const PSCHED_SHIFT: u32 = 6;
/// PSCHED_TICKS_PER_SEC.
const TICKS_PER_SEC: u64 = 1_000_000_000 >> PSCHED_SHIFT;
/// SM_SHIFT (30 − PSCHED_SHIFT).
const SM_SHIFT: u32 = 30 - PSCHED_SHIFT;
/// ISM_SHIFT (8 + PSCHED_SHIFT).
const ISM_SHIFT: u32 = 8 + PSCHED_SHIFT;
const SM_MASK: u64 = (1 << SM_SHIFT) - 1;
const ISM_MASK: u64 = (1 << ISM_SHIFT) - 1;
/// HT_INFINITY.
pub const INFINITY: u64 = u64::MAX;
const USEC_PER_SEC: u64 = 1_000_000;

/// `struct tc_service_curve` as tc sends it: slopes in bytes/s, `d` in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceCurve {
    pub m1: u32,
    pub d: u32,
    pub m2: u32,
}

/// `struct internal_sc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Isc {
    pub sm1: u64,
    pub ism1: u64,
    pub dx: u64,
    pub dy: u64,
    pub sm2: u64,
    pub ism2: u64,
}

/// `struct runtime_sc`: an internal curve anchored at (x, y); `c.dx`/`c.dy` may be
/// shortened by [`Rtsc::min`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rtsc {
    pub x: u64,
    pub y: u64,
    pub c: Isc,
}

/// `seg_x2y`: bytes served in `x` ticks at scaled slope `sm`.
fn seg_x2y(x: u64, sm: u64) -> u64 {
    (x >> SM_SHIFT).wrapping_mul(sm).wrapping_add((x & SM_MASK).wrapping_mul(sm) >> SM_SHIFT)
}

/// `seg_y2x`: ticks to serve `y` bytes at scaled inverse slope `ism`.
fn seg_y2x(y: u64, ism: u64) -> u64 {
    if y == 0 {
        0
    } else if ism == INFINITY {
        INFINITY
    } else {
        (y >> ISM_SHIFT).wrapping_mul(ism).wrapping_add((y & ISM_MASK).wrapping_mul(ism) >> ISM_SHIFT)
    }
}

/// `m2sm`: bytes/s → scaled bytes per tick, rounded up.
fn m2sm(m: u32) -> u64 {
    ((m as u64) << SM_SHIFT).div_ceil(TICKS_PER_SEC)
}

/// `m2ism`: bytes/s → scaled ticks per byte, rounded up; infinite for 0.
fn m2ism(m: u32) -> u64 {
    if m == 0 {
        INFINITY
    } else {
        (TICKS_PER_SEC << ISM_SHIFT).div_ceil(m as u64)
    }
}

/// `d2dx`: µs → ticks, rounded up.
fn d2dx(d: u32) -> u64 {
    (d as u64 * TICKS_PER_SEC).div_ceil(USEC_PER_SEC)
}

/// `sm2m`: back to bytes/s, as the dump reports it (rounded down).
fn sm2m(sm: u64) -> u32 {
    (sm.wrapping_mul(TICKS_PER_SEC) >> SM_SHIFT) as u32
}

/// `dx2d`: back to µs (rounded down).
fn dx2d(dx: u64) -> u32 {
    (dx.wrapping_mul(USEC_PER_SEC) / TICKS_PER_SEC) as u32
}

impl Isc {
    /// `sc2isc`.
    pub fn new(sc: &ServiceCurve) -> Isc {
        let sm1 = m2sm(sc.m1);
        let dx = d2dx(sc.d);
        Isc { sm1, ism1: m2ism(sc.m1), dx, dy: seg_x2y(dx, sm1), sm2: m2sm(sc.m2), ism2: m2ism(sc.m2) }
    }
    /// `hfsc_dump_sc`: the curve as the kernel reports it back.
    pub fn dump(&self) -> ServiceCurve {
        ServiceCurve { m1: sm2m(self.sm1), d: dx2d(self.dx), m2: sm2m(self.sm2) }
    }
    /// A convex curve (first slope not above the second).
    pub fn convex(&self) -> bool {
        self.sm1 <= self.sm2
    }
}

impl Rtsc {
    /// `rtsc_init`.
    pub fn new(c: &Isc, x: u64, y: u64) -> Rtsc {
        Rtsc { x, y, c: *c }
    }

    /// `rtsc_y2x`: the time at which the curve reaches `y` bytes.
    pub fn y2x(&self, y: u64) -> u64 {
        if y < self.y {
            self.x
        } else if y <= self.y.wrapping_add(self.c.dy) {
            if self.c.dy == 0 {
                self.x.wrapping_add(self.c.dx)
            } else {
                self.x.wrapping_add(seg_y2x(y - self.y, self.c.ism1))
            }
        } else {
            self.x
                .wrapping_add(self.c.dx)
                .wrapping_add(seg_y2x(y.wrapping_sub(self.y).wrapping_sub(self.c.dy), self.c.ism2))
        }
    }

    /// `rtsc_x2y`: the bytes the curve has reached at time `x`.
    pub fn x2y(&self, x: u64) -> u64 {
        if x <= self.x {
            self.y
        } else if x <= self.x.wrapping_add(self.c.dx) {
            self.y.wrapping_add(seg_x2y(x - self.x, self.c.sm1))
        } else {
            self.y
                .wrapping_add(self.c.dy)
                .wrapping_add(seg_x2y(x.wrapping_sub(self.x).wrapping_sub(self.c.dx), self.c.sm2))
        }
    }

    /// `rtsc_min`: the lower envelope of this curve and `isc` anchored at (x, y).
    pub fn min(&mut self, isc: &Isc, x: u64, y: u64) {
        if isc.convex() {
            if self.x2y(x) < y {
                return;
            }
            self.x = x;
            self.y = y;
            return;
        }
        let y1 = self.x2y(x);
        if y1 <= y {
            return;
        }
        let y2 = self.x2y(x.wrapping_add(isc.dx));
        if y2 >= y.wrapping_add(isc.dy) {
            *self = Rtsc { x, y, c: Isc { dx: isc.dx, dy: isc.dy, ..self.c } };
            return;
        }
        // The curves cross: solve seg_x2y(dx, sm1) == seg_x2y(dx, sm2) + (y1 − y).
        let mut dx = ((y1 - y) << SM_SHIFT) / (isc.sm1 - isc.sm2);
        if self.x.wrapping_add(self.c.dx) > x {
            dx = dx.wrapping_add(self.x.wrapping_add(self.c.dx) - x);
        }
        let dy = seg_x2y(dx, isc.sm1);
        *self = Rtsc { x, y, c: Isc { dx, dy, ..self.c } };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_as_the_kernel_dumps_them() {
        // 12345 B/s comes back one lower (12344bit/8 in the hfsc-class golden).
        let c = |m1, d, m2| Isc::new(&ServiceCurve { m1, d, m2 }).dump();
        assert_eq!(c(0, 0, 1543), ServiceCurve { m1: 0, d: 0, m2: 1543 });
        assert_eq!(c(250_000, 10_000, 125_000), ServiceCurve { m1: 250_000, d: 10_000, m2: 125_000 });
        assert_eq!(c(0, 7, 0).d, 7);
        assert_eq!(m2sm(125_000), 134_218);
        assert_eq!(m2ism(125_000), 2_048_000);
        assert_eq!(d2dx(1), 16);
    }

    #[test]
    fn a_linear_curve_maps_bytes_to_ticks_and_back() {
        // 1 Mbit/s = 125,000 B/s: 1250 bytes take 10 ms = 156,250 ticks.
        let isc = Isc::new(&ServiceCurve { m1: 0, d: 0, m2: 125_000 });
        let r = Rtsc::new(&isc, 1000, 0);
        assert_eq!(r.y2x(1250), 1000 + 156_250);
        assert_eq!(r.x2y(1000 + 156_250), 1250);
        assert_eq!(r.y2x(0), 1000);
    }

    #[test]
    fn min_of_a_concave_curve_cuts_its_burst_short() {
        // m1 2 Mbit/s for 10 ms, then 1 Mbit/s. The old curve has served 1250 bytes
        // at 5 ms (78,125 ticks); a new one from there with 1000 bytes lies under it
        // and meets it where the old curve's burst has ended: 1749 bytes at m1 over
        // 109,374 ticks, to 2749 bytes at 12 ms, as the old one.
        let isc = Isc::new(&ServiceCurve { m1: 250_000, d: 10_000, m2: 125_000 });
        let mut r = Rtsc::new(&isc, 0, 0);
        r.min(&isc, 78_125, 1250);
        assert_eq!((r.x, r.y), (0, 0), "not below the old curve: unchanged");
        r.min(&isc, 78_125, 1000);
        assert_eq!((r.x, r.y, r.c.dx, r.c.dy), (78_125, 1000, 109_374, 1749));
        assert_eq!(r.x2y(187_499), 2749);
        assert_eq!(Rtsc::new(&isc, 0, 0).x2y(187_499), 2749);
        // Restarted 0.64 s later: with more bytes than the old curve reached then, the
        // old curve stays; with none, the new one (its full burst) replaces it.
        let mut r = Rtsc::new(&isc, 0, 0);
        r.min(&isc, 10_000_000, 100_000);
        assert_eq!((r.x, r.y), (0, 0));
        r.min(&isc, 10_000_000, 0);
        assert_eq!((r.x, r.y, r.c.dx, r.c.dy), (10_000_000, 0, isc.dx, isc.dy));
    }
}
