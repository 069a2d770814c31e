//! RTT estimation and the retransmission timeout (RFC 6298 as Linux does it).
//!
//! Linux keeps Jacobson's estimator in fixed point: `srtt_us` is 8 × SRTT and
//! `mdev_us` is 4 × the mean deviation, both in µs. Two departures from RFC 6298
//! matter for behaviour (mirrors `tcp_rtt_estimator` in tcp_input.c):
//!
//! * when a sample is *below* SRTT, its deviation enters `mdev` with gain 1/32
//!   instead of 1/4, so a falling RTT does not inflate the RTO (the "Eifel" note);
//! * the RTO variance term `rttvar_us` is not `mdev` but the largest `mdev` seen
//!   during the last window of data (`mdev_max_us`, floored at `rto_min`), decaying
//!   by a quarter of the gap once per RTT (when `snd_una` passes `rtt_seq`).
//!
//! RTO = SRTT + rttvar, in jiffies rounded up (`__tcp_set_rto`), at most 120 s
//! (`tcp_bound_rto`). Because rttvar ≥ `rto_min` (200 ms), the RTO is always at
//! least 200 ms *plus* SRTT — the usual Linux "RTO = srtt + 200 ms" on a clean path.
//!
//! The minimum RTT (`tcp_min_rtt`, used by RACK and TSO autosizing) is a windowed
//! running minimum over `tcp_min_rtt_wlen` = 300 s, tracked with Kathleen Nichols'
//! three-sample algorithm (`lib/win_minmax.c`), implemented in [`MinMax`].

use super::Hz;

/// `TCP_RTO_MAX` = 120 s.
pub const RTO_MAX_SECS: u64 = 120;

/// The smoothed RTT state of a socket (`tcp_sock` srtt_us, mdev_us, mdev_max_us, rttvar_us, rtt_seq).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// 8 × smoothed RTT, µs; 0 = no sample yet.
    pub srtt_us: u32,
    /// 4 × mean deviation, µs.
    pub mdev_us: u32,
    /// Largest `mdev_us` in the current window.
    pub mdev_max_us: u32,
    /// The variance term of the RTO, µs.
    pub rttvar_us: u32,
    /// `snd_nxt` when the current window started.
    pub rtt_seq: u64,
}

impl RttEstimator {
    /// Feed one RTT sample `m_us` (> 0). Mirrors `tcp_rtt_estimator` in tcp_input.c.
    pub fn sample(&mut self, m_us: u32, snd_una: u64, snd_nxt: u64, rto_min_us: u32) {
        let mut m = m_us as i64;
        let mut srtt = self.srtt_us as i64;
        if srtt != 0 {
            m -= srtt >> 3; // error in the estimate
            srtt += m; // srtt = 7/8 srtt + 1/8 sample
            let mdev = self.mdev_us as i64;
            if m < 0 {
                m = -m - (mdev >> 2);
                // RTT fell: smaller gain so the RTO does not grow on a *decrease*.
                if m > 0 {
                    m >>= 3;
                }
            } else {
                m -= mdev >> 2;
            }
            self.mdev_us = (mdev + m) as u32; // mdev = 3/4 mdev + 1/4 |err|
            if self.mdev_us > self.mdev_max_us {
                self.mdev_max_us = self.mdev_us;
                if self.mdev_max_us > self.rttvar_us {
                    self.rttvar_us = self.mdev_max_us;
                }
            }
            if snd_una > self.rtt_seq {
                // One window later: let rttvar decay towards this window's maximum.
                if self.mdev_max_us < self.rttvar_us {
                    self.rttvar_us -= (self.rttvar_us - self.mdev_max_us) >> 2;
                }
                self.rtt_seq = snd_nxt;
                self.mdev_max_us = rto_min_us;
            }
        } else {
            // First sample: RTO = 3 × RTT, but never less than rto_min above SRTT.
            srtt = m << 3;
            self.mdev_us = (m << 1) as u32;
            self.rttvar_us = self.mdev_us.max(rto_min_us);
            self.mdev_max_us = self.rttvar_us;
            self.rtt_seq = snd_nxt;
        }
        self.srtt_us = (srtt as u32).max(1);
    }

    /// The RTO without backoff, in jiffies: `__tcp_set_rto` + `tcp_bound_rto`.
    pub(crate) fn rto_jiffies(&self, hz: Hz) -> u32 {
        let us = (self.srtt_us >> 3) as u64 + self.rttvar_us as u64;
        hz.usecs_to_jiffies(us).min(RTO_MAX_SECS * hz.0 as u64) as u32
    }
}

/// One sample of the windowed min filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    t: u32,
    v: u32,
}

/// Windowed running minimum (best, second best, third best within the window).
/// Our own implementation of the algorithm in `lib/win_minmax.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinMax {
    s: [Sample; 3],
}

impl MinMax {
    /// A filter holding `v` at time `t` (`minmax_reset`).
    pub fn new(t: u32, v: u32) -> Self {
        MinMax { s: [Sample { t, v }; 3] }
    }

    /// The current minimum.
    pub fn get(&self) -> u32 {
        self.s[0].v
    }

    /// Add a measurement `v` at time `t` with window `win` (same units as `t`).
    /// Mirrors `minmax_running_min`.
    pub fn running_min(&mut self, win: u32, t: u32, v: u32) -> u32 {
        let val = Sample { t, v };
        // A new minimum, or the whole window expired: start over.
        if v <= self.s[0].v || t.wrapping_sub(self.s[2].t) > win {
            *self = MinMax::new(t, v);
            return v;
        }
        if v <= self.s[1].v {
            self.s[1] = val;
            self.s[2] = val;
        } else if v <= self.s[2].v {
            self.s[2] = val;
        }
        self.subwin_update(win, val)
    }

    /// The same for a windowed maximum (BBR's bandwidth filter). Mirrors
    /// `minmax_running_max`.
    pub fn running_max(&mut self, win: u32, t: u32, v: u32) -> u32 {
        let val = Sample { t, v };
        if v >= self.s[0].v || t.wrapping_sub(self.s[2].t) > win {
            *self = MinMax::new(t, v);
            return v;
        }
        if v >= self.s[1].v {
            self.s[1] = val;
            self.s[2] = val;
        } else if v >= self.s[2].v {
            self.s[2] = val;
        }
        self.subwin_update(win, val)
    }

    /// `minmax_subwin_update`: age the best, second and third choices.
    fn subwin_update(&mut self, win: u32, val: Sample) -> u32 {
        let t = val.t;
        let dt = t.wrapping_sub(self.s[0].t);
        if dt > win {
            // The best expired: promote the runners-up (at most twice).
            self.s = [self.s[1], self.s[2], val];
            if t.wrapping_sub(self.s[0].t) > win {
                self.s = [self.s[1], self.s[2], val];
            }
        } else if self.s[1].t == self.s[0].t && dt > win / 4 {
            // A quarter window without a second choice: take this one.
            self.s[1] = val;
            self.s[2] = val;
        } else if self.s[2].t == self.s[1].t && dt > win / 2 {
            self.s[2] = val;
        }
        self.s[0].v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_sets_rto_to_srtt_plus_rto_min() {
        let mut e = RttEstimator::default();
        e.sample(20_000, 0, 14_480, 200_000);
        assert_eq!(e.srtt_us, 160_000);
        assert_eq!(e.mdev_us, 40_000);
        assert_eq!(e.rttvar_us, 200_000);
        // 220 ms = 55 jiffies at HZ=250.
        assert_eq!(e.rto_jiffies(Hz(250)), 55);
        // A long RTT: RTO = 3 × RTT.
        let mut e = RttEstimator::default();
        e.sample(300_000, 0, 1, 200_000);
        assert_eq!(e.rto_jiffies(Hz(1000)), 900);
    }

    #[test]
    fn estimator_follows_jacobson_with_linux_gains() {
        let mut e = RttEstimator::default();
        e.sample(10_000, 0, 100, 200_000);
        // Larger sample: err = +8000 → srtt = 10000 + 1000; mdev = 20000 + (8000 − 5000).
        e.sample(18_000, 0, 100, 200_000);
        assert_eq!(e.srtt_us >> 3, 11_000);
        assert_eq!(e.mdev_us, 23_000);
        // Smaller sample: |err| = 3000 − 23000/4 < 0 → mdev gains the negative term unscaled.
        e.sample(8_000, 0, 100, 200_000);
        assert_eq!(e.srtt_us, 88_000 - 3_000);
        assert_eq!(e.mdev_us, 23_000 - (5_750 - 3_000));
    }

    #[test]
    fn minmax_tracks_windowed_minimum() {
        let mut m = MinMax::new(0, u32::MAX);
        assert_eq!(m.running_min(100, 0, 50), 50);
        assert_eq!(m.running_min(100, 10, 60), 50);
        assert_eq!(m.running_min(100, 30, 70), 50);
        // 60 never became a runner-up (not below the second choice, not a quarter window
        // late); 70 did at t=30. When 50 expires, 70 takes over.
        assert_eq!(m.running_min(100, 120, 80), 70);
        assert_eq!(m.running_min(100, 130, 40), 40);
    }
}
