//! CUBIC congestion control with HyStart, as in Linux's `tcp_cubic.c` (6.12).
//!
//! # Window growth
//!
//! After a reduction at window W_max, CUBIC grows along
//!
//! ```text
//!   W(t) = C · (t − K)³ + W_max,      K = ∛(W_max · (1 − β) / C)
//! ```
//!
//! with C = 0.4 and β = 717/1024 ≈ 0.7, t counted from the start of the epoch (the
//! first ACK after the reduction). Linux evaluates it in fixed point: time in
//! units of 2⁻¹⁰ s (`BICTCP_HZ` = 10), C as `bic_scale` = 41 / 1024 scaled by 10
//! (`cube_rtt_scale` = 410, i.e. C normalised to an assumed 100 ms RTT, the
//! historical `cube_factor` = 2⁴⁰ / 410), and adds the minimum delay to t so the
//! target is where the window should be one RTT from now. The target is turned
//! into `cnt`: acked segments per +1 segment (`tcp_cong_avoid_ai`), at least 2
//! (the window may grow at most 1.5× per RTT), and at most 20 before the first
//! loss (5 % per RTT while W_max is unknown).
//!
//! * **Fast convergence**: if a loss happens below the previous W_max, the flow
//!   releases bandwidth by remembering W_max · (1 + β) / 2 instead.
//! * **TCP friendliness**: an emulated Reno window grows by one segment every
//!   `cwnd · beta_scale / 8` acked segments (beta_scale = 8(1+β)/(3(1−β)) = 15,
//!   AIMD with the same average rate as Reno); if it is ahead, cnt follows it.
//! * **ssthresh on loss**: max(cwnd · 717 / 1024, 2).
//! * `bictcp_update` recomputes `cnt` at most once per jiffy, and not at all if
//!   cwnd is unchanged within HZ/32 (the 6.12 code; later kernels changed this).
//!
//! # HyStart (on by default; HyStart++ is not in 6.12's cubic)
//!
//! In slow start with cwnd ≥ 16 (`hystart_low_window`), each RTT "round" (until
//! `snd_una` passes the `snd_nxt` recorded at the round start) is watched for:
//!
//! * **ACK train**: ACKs arriving ≤ 2 ms apart (`hystart_ack_delta_us`) whose train
//!   has lasted longer than delay_min/2 (+ `hystart_ack_delay`, and not halved when
//!   paced) → the pipe is full;
//! * **Delay increase**: the minimum RTT over the first 8 samples of the round
//!   exceeds delay_min + clamp(delay_min/8, 4 ms, 16 ms).
//!
//! Either sets ssthresh = cwnd, ending slow start.
//!
//! # Deviation
//!
//! `K` uses an exact integer cube root; the kernel's `cubic_root` (a 64-entry table
//! plus one Newton-Raphson step) is within ~0.2 % of it.

use super::reno::Window;

/// β = 717/1024.
pub const BETA: u32 = 717;
/// `BICTCP_BETA_SCALE`.
pub const BETA_SCALE: u32 = 1024;
const BICTCP_HZ: u32 = 10;
const BIC_SCALE: u32 = 41;
/// `cube_rtt_scale` = bic_scale × 10.
const CUBE_RTT_SCALE: u64 = BIC_SCALE as u64 * 10;
/// `beta_scale` = 8 (1024 + β) / 3 / (1024 − β), integer arithmetic as in the kernel.
const TCP_FRIENDLY_SCALE: u32 = 8 * (BETA_SCALE + BETA) / 3 / (BETA_SCALE - BETA);
/// `cube_factor` = 2^(10 + 3·BICTCP_HZ) / (bic_scale × 10).
const CUBE_FACTOR: u64 = (1u64 << (10 + 3 * BICTCP_HZ)) / (BIC_SCALE as u64 * 10);

const HYSTART_LOW_WINDOW: u32 = 16;
const HYSTART_ACK_DELTA_US: i32 = 2000;
const HYSTART_MIN_SAMPLES: u8 = 8;
const HYSTART_DELAY_MIN: u32 = 4000;
const HYSTART_DELAY_MAX: u32 = 16000;

/// What CUBIC reads from the socket on each call.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// `tcp_jiffies32`.
    pub jiffies: u32,
    /// `tcp_mstamp` (µs clock, truncated like `bictcp_clock_us`).
    pub now_us: u32,
    /// `CONFIG_HZ`.
    pub hz: u32,
    pub snd_una: u64,
    pub snd_nxt: u64,
    /// `sk_pacing_rate`, bytes/s.
    pub pacing_rate: u64,
    /// `sk_pacing_status == SK_PACING_NONE`.
    pub unpaced: bool,
    /// `sk_gso_max_size`.
    pub gso_max_size: u32,
}

/// `struct bictcp`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cubic {
    pub cnt: u32,
    pub last_max_cwnd: u32,
    pub last_cwnd: u32,
    pub last_time: u32,
    pub bic_origin_point: u32,
    pub bic_k: u32,
    /// Minimum delay seen, µs (0 = none).
    pub delay_min: u32,
    /// Start of the current epoch in jiffies (0 = no epoch).
    pub epoch_start: u32,
    pub ack_cnt: u32,
    pub tcp_cwnd: u32,
    pub sample_cnt: u8,
    /// HyStart found the exit point.
    pub found: bool,
    pub round_start: u32,
    pub end_seq: u64,
    pub last_ack: u32,
    pub curr_rtt: u32,
}

/// Exact ⌊∛a⌋ for the CUBIC K computation.
pub fn cubic_root(a: u64) -> u32 {
    if a == 0 {
        return 0;
    }
    let mut x = (a as f64).cbrt() as u64;
    // Fix up the floating-point estimate to the exact floor.
    while x.saturating_mul(x).saturating_mul(x) > a {
        x -= 1;
    }
    while (x + 1).saturating_mul(x + 1).saturating_mul(x + 1) <= a {
        x += 1;
    }
    x as u32
}

impl Cubic {
    /// `cubictcp_init`: everything zeroed, HyStart round started.
    pub fn new(ctx: &Ctx) -> Self {
        let mut c = Cubic::default();
        c.hystart_reset(ctx);
        c
    }

    /// `bictcp_reset`: forget the window state and `found`; the HyStart round survives.
    fn reset(&mut self) {
        let (round_start, end_seq, last_ack, curr_rtt, sample_cnt) =
            (self.round_start, self.end_seq, self.last_ack, self.curr_rtt, self.sample_cnt);
        *self = Cubic { round_start, end_seq, last_ack, curr_rtt, sample_cnt, ..Cubic::default() };
    }

    /// `bictcp_hystart_reset`: a new round starts now and ends when `snd_nxt` is acked.
    fn hystart_reset(&mut self, ctx: &Ctx) {
        self.round_start = ctx.now_us;
        self.last_ack = ctx.now_us;
        self.end_seq = ctx.snd_nxt;
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// `cubictcp_cwnd_event(CA_EVENT_TX_START)`: after an idle period, shift the epoch
    /// so the cubic curve does not jump.
    pub fn on_tx_start(&mut self, ctx: &Ctx, lsndtime: u32) {
        let delta = ctx.jiffies.wrapping_sub(lsndtime) as i32;
        if self.epoch_start != 0 && delta > 0 {
            self.epoch_start = self.epoch_start.wrapping_add(delta as u32);
            if (self.epoch_start.wrapping_sub(ctx.jiffies) as i32) > 0 {
                self.epoch_start = ctx.jiffies;
            }
        }
    }

    /// Recompute `cnt`. Mirrors `bictcp_update` in tcp_cubic.c.
    fn update(&mut self, cwnd: u32, acked: u32, ctx: &Ctx) {
        self.ack_cnt = self.ack_cnt.wrapping_add(acked);

        let skip = self.last_cwnd == cwnd && (ctx.jiffies.wrapping_sub(self.last_time) as i32) <= (ctx.hz / 32) as i32;
        if skip {
            return;
        }
        // Within one jiffy only the friendliness part below is refreshed.
        if !(self.epoch_start != 0 && ctx.jiffies == self.last_time) {
            self.last_cwnd = cwnd;
            self.last_time = ctx.jiffies;

            if self.epoch_start == 0 {
                self.epoch_start = ctx.jiffies;
                self.ack_cnt = acked;
                self.tcp_cwnd = cwnd;
                if self.last_max_cwnd <= cwnd {
                    self.bic_k = 0;
                    self.bic_origin_point = cwnd;
                } else {
                    self.bic_k = cubic_root(CUBE_FACTOR * (self.last_max_cwnd - cwnd) as u64);
                    self.bic_origin_point = self.last_max_cwnd;
                }
            }

            // t in 2^-10 s, one delay_min ahead. A negative elapsed time sign-extends
            // like the kernel's (s32) → u64 assignment.
            let elapsed = ctx.jiffies.wrapping_sub(self.epoch_start) as i32 as i64 as u64;
            let delay_j = (self.delay_min as u64 * ctx.hz as u64).div_ceil(1_000_000);
            let t = (elapsed.wrapping_add(delay_j) << BICTCP_HZ) / ctx.hz as u64;
            let k = self.bic_k as u64;
            let offs = k.abs_diff(t);
            let delta = (CUBE_RTT_SCALE.wrapping_mul(offs).wrapping_mul(offs).wrapping_mul(offs)
                >> (10 + 3 * BICTCP_HZ)) as u32;
            let target = if t < k {
                self.bic_origin_point.wrapping_sub(delta)
            } else {
                self.bic_origin_point.wrapping_add(delta)
            };
            self.cnt = if target > cwnd { cwnd / (target - cwnd) } else { cwnd.wrapping_mul(100) };
            // Until the first loss, grow at least 5 % per RTT.
            if self.last_max_cwnd == 0 && self.cnt > 20 {
                self.cnt = 20;
            }
        }

        // TCP friendliness: follow an emulated Reno window when it is ahead.
        let per_seg = cwnd.wrapping_mul(TCP_FRIENDLY_SCALE) >> 3;
        if per_seg > 0 {
            while self.ack_cnt > per_seg {
                self.ack_cnt -= per_seg;
                self.tcp_cwnd += 1;
            }
        }
        if self.tcp_cwnd > cwnd {
            let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
            if self.cnt > max_cnt {
                self.cnt = max_cnt;
            }
        }
        // cnt ≥ 2 caps the growth at 1.5× per round trip.
        self.cnt = self.cnt.max(2);
    }

    /// `cubictcp_cong_avoid`.
    pub fn cong_avoid(&mut self, w: &mut Window, acked: u32, cwnd_limited: bool, ctx: &Ctx) {
        if !cwnd_limited {
            return;
        }
        let mut acked = acked;
        if w.in_slow_start() {
            acked = w.slow_start(acked);
            if acked == 0 {
                return;
            }
        }
        self.update(w.cwnd, acked, ctx);
        let cnt = self.cnt;
        w.cong_avoid_ai(cnt, acked);
    }

    /// `cubictcp_recalc_ssthresh`: end the epoch, remember W_max (with fast convergence).
    pub fn ssthresh(&mut self, cwnd: u32) -> u32 {
        self.epoch_start = 0;
        if cwnd < self.last_max_cwnd {
            self.last_max_cwnd = cwnd.wrapping_mul(BETA_SCALE + BETA) / (2 * BETA_SCALE);
        } else {
            self.last_max_cwnd = cwnd;
        }
        (cwnd.wrapping_mul(BETA) / BETA_SCALE).max(2)
    }

    /// `cubictcp_state(TCP_CA_Loss)`: forget everything after a timeout.
    pub fn on_loss_state(&mut self, ctx: &Ctx) {
        self.reset();
        self.found = false;
        self.hystart_reset(ctx);
    }

    /// `hystart_ack_delay`: allowance for TSO/GRO aggregation, µs, at most 1 ms.
    fn hystart_ack_delay(ctx: &Ctx) -> u32 {
        if ctx.pacing_rate == 0 {
            return 0;
        }
        let d = (ctx.gso_max_size as u128 * 4 * 1_000_000) / ctx.pacing_rate as u128;
        d.min(1000) as u32
    }

    /// `hystart_update`: returns the new ssthresh when the exit point is found.
    fn hystart_update(&mut self, delay: u32, cwnd: u32, ctx: &Ctx) -> Option<u32> {
        let mut ssthresh = None;
        if ctx.snd_una > self.end_seq {
            self.hystart_reset(ctx);
        }
        // ACK-train detection.
        let now = ctx.now_us;
        if (now.wrapping_sub(self.last_ack) as i32) <= HYSTART_ACK_DELTA_US {
            self.last_ack = now;
            let mut threshold = self.delay_min + Self::hystart_ack_delay(ctx);
            // A paced round is spread out by itself, so only unpaced flows use delay_min/2.
            if ctx.unpaced {
                threshold >>= 1;
            }
            if now.wrapping_sub(self.round_start) > threshold {
                self.found = true;
                ssthresh = Some(cwnd);
            }
        }
        // Delay-increase detection.
        if self.curr_rtt > delay {
            self.curr_rtt = delay;
        }
        if self.sample_cnt < HYSTART_MIN_SAMPLES {
            self.sample_cnt += 1;
        } else {
            let thresh = (self.delay_min >> 3).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
            if self.curr_rtt > self.delay_min + thresh {
                self.found = true;
                ssthresh = Some(cwnd);
            }
        }
        ssthresh
    }

    /// `cubictcp_acked` (the `pkts_acked` hook): track delay_min and run HyStart.
    /// `rtt_us` is the RTT of the most recently (S)ACKed segment, if any.
    /// Returns the new ssthresh if HyStart ends slow start.
    pub fn pkts_acked(&mut self, rtt_us: Option<u32>, w: &Window, ctx: &Ctx) -> Option<u32> {
        let rtt_us = rtt_us?;
        // Ignore delay samples during the first second of an epoch (just after a cut).
        if self.epoch_start != 0 && (ctx.jiffies.wrapping_sub(self.epoch_start) as i32) < ctx.hz as i32 {
            return None;
        }
        let delay = rtt_us.max(1);
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }
        if !self.found && w.in_slow_start() && w.cwnd >= HYSTART_LOW_WINDOW {
            return self.hystart_update(delay, w.cwnd, ctx);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(jiffies: u32) -> Ctx {
        Ctx {
            jiffies,
            now_us: jiffies.wrapping_mul(4000),
            hz: 250,
            snd_una: 0,
            snd_nxt: 0,
            pacing_rate: u64::MAX,
            unpaced: true,
            gso_max_size: super::super::GSO_MAX_SIZE,
        }
    }

    #[test]
    fn constants_match_the_kernel_precomputation() {
        assert_eq!(TCP_FRIENDLY_SCALE, 15);
        assert_eq!(CUBE_FACTOR, 2_681_735_677);
        assert_eq!(cubic_root(0), 0);
        assert_eq!(cubic_root(26), 2);
        assert_eq!(cubic_root(27), 3);
        for a in [1u64, 7, 8, 9, 999, 1000, 80_452_070_310, u32::MAX as u64 * 1000] {
            let x = cubic_root(a) as u64;
            assert!(x * x * x <= a && (x + 1) * (x + 1) * (x + 1) > a, "cbrt({a}) = {x}");
        }
    }

    #[test]
    fn ssthresh_is_beta_with_fast_convergence() {
        let mut c = Cubic::new(&ctx(1));
        assert_eq!(c.ssthresh(100), 70); // 100 × 717 / 1024 = 70.02
        assert_eq!(c.last_max_cwnd, 100);
        // A second loss below W_max releases bandwidth: W_max = 80 × 1741 / 2048 = 68.
        assert_eq!(c.ssthresh(80), 56);
        assert_eq!(c.last_max_cwnd, 68);
        assert_eq!(c.ssthresh(2), 2);
    }

    #[test]
    fn concave_then_convex_growth_around_w_max() {
        // After a loss at 100 the window restarts at 70: K = ∛(2^40/410 × 30) s/1024.
        let mut c = Cubic::new(&ctx(1));
        c.ssthresh(100);
        let mut w = Window { cwnd: 70, ssthresh: 70, cwnd_cnt: 0, clamp: u32::MAX };
        let k = cubic_root(CUBE_FACTOR * 30);
        assert_eq!(k, 4316); // ≈ 4.2 s
                             // At the epoch start (delay_min = 0 here) the target is far below W_max growth:
                             // delta = 410 × 4316³ >> 40 = 29, target 71 → cnt = 70 / 1 = 70.
        c.cong_avoid(&mut w, 1, true, &ctx(100));
        assert_eq!((c.epoch_start, c.bic_k, c.bic_origin_point), (100, k, 100));
        assert_eq!(c.cnt, 70);
        // 8 s into the epoch (t = 8192/1024 s, 3.8 s past K): target = 100 + 21, cnt = 100/21.
        let mut w2 = Window { cwnd: 100, ..w };
        c.cong_avoid(&mut w2, 1, true, &ctx(100 + 250 * 8));
        assert_eq!(c.cnt, 4);
        // Much later the convex part is steep: cnt drops to its floor of 2.
        c.cong_avoid(&mut w2, 1, true, &ctx(100 + 250 * 20));
        assert_eq!(c.cnt, 2);
    }

    #[test]
    fn hystart_delay_detection_ends_slow_start() {
        let mut c = Cubic::new(&ctx(1));
        let w = Window { cwnd: 32, ssthresh: u32::MAX, cwnd_cnt: 0, clamp: u32::MAX };
        let mut cx = ctx(1);
        // delay_min = 20 ms; ACKs 3 ms apart (no train).
        for i in 0..8u32 {
            cx.now_us = 100_000 + i * 3000;
            assert_eq!(c.pkts_acked(Some(20_000), &w, &cx), None);
        }
        // Ninth sample of the round: the round's minimum is 20 ms, no exit.
        cx.now_us += 3000;
        assert_eq!(c.pkts_acked(Some(20_000), &w, &cx), None);
        // A new round whose RTTs all exceed 20 + 4 ms: exit after 8 samples.
        cx.snd_una = 1;
        cx.snd_nxt = 1000;
        for i in 0..9u32 {
            cx.now_us += 3000;
            let r = c.pkts_acked(Some(24_001), &w, &cx);
            assert_eq!(r, if i == 8 { Some(32) } else { None }, "sample {i}");
        }
        assert!(c.found);
    }
}
