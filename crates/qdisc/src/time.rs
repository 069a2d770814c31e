//! Nanosecond time, passed in by the caller.
//!
//! The engine never reads a clock. `Instant` is an absolute point on the caller's
//! monotonic timeline (the kernel's `ktime_get_ns()`), `Duration` a span between two.
//! Both are plain `u64` nanoseconds, like smoltcp's `time.rs`, so simulation and a
//! live shaper can feed the same code.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// The kernel's tick rate. Debian 13's 6.12 kernel (and this project's CI host's 6.18)
/// is built with CONFIG_HZ=250: jiffies are 4 ms, which decides the granularity of
/// what qdiscs keep in jiffies (fq's `refill_delay` and gc age, sfb's rehash and
/// penalty clocks).
pub const HZ: u64 = 250;

/// `time_after(a, b)` on jiffies: `a` is later than `b`, wrap-safe.
pub fn time_after(a: u64, b: u64) -> bool {
    (b.wrapping_sub(a) as i64) < 0
}

/// MAX_JIFFY_OFFSET: where the jiffy conversions saturate.
pub const MAX_JIFFY_OFFSET: u64 = ((i64::MAX as u64) >> 1) - 1;

/// `usecs_to_jiffies` (a u32 µs value; rounds up; huge values saturate at
/// MAX_JIFFY_OFFSET), stored in a u32 field as fq and hhf do.
pub fn usecs_to_jiffies(us: u32) -> u32 {
    if us > jiffies_to_usecs(MAX_JIFFY_OFFSET) {
        return MAX_JIFFY_OFFSET as u32;
    }
    (us as u64).div_ceil(1_000_000 / HZ) as u32
}

/// `jiffies_to_usecs` (returns an unsigned int).
pub fn jiffies_to_usecs(j: u64) -> u32 {
    (1_000_000 / HZ).wrapping_mul(j) as u32
}

/// `msecs_to_jiffies`: rounded up; a value negative as an int saturates.
pub fn msecs_to_jiffies(ms: u32) -> u64 {
    if (ms as i32) < 0 {
        return MAX_JIFFY_OFFSET;
    }
    (ms as u64).div_ceil(1000 / HZ)
}

/// `jiffies_to_msecs` (an unsigned int, so a saturated value wraps).
pub fn jiffies_to_msecs(j: u64) -> u32 {
    j.wrapping_mul(1000 / HZ) as u32
}

/// A point in time, nanoseconds since an arbitrary epoch (CLOCK_MONOTONIC in the kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    pub const fn from_micros(us: u64) -> Self {
        Instant(us * 1_000)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms * 1_000_000)
    }
    pub const fn from_secs(s: u64) -> Self {
        Instant(s * 1_000_000_000)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `jiffies` at this time: ticks of 1/[`HZ`] s since the epoch.
    pub const fn jiffies(self) -> u64 {
        self.0 / (1_000_000_000 / HZ)
    }
    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);
    pub const fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }
    pub const fn from_micros(us: u64) -> Self {
        Duration(us * 1_000)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * 1_000_000)
    }
    pub const fn from_secs(s: u64) -> Self {
        Duration(s * 1_000_000_000)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}
impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}
impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: time never runs backwards in the engine's view.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}
impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}
