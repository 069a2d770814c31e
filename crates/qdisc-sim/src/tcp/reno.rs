//! Reno, and the window arithmetic every loss-based module shares (`tcp_cong.c`).
//!
//! * **Slow start with Appropriate Byte Counting** (RFC 3465 flavour, `tcp_slow_start`):
//!   cwnd grows by the number of *segments* newly acknowledged, capped at ssthresh;
//!   what is left over after crossing ssthresh is returned so congestion avoidance
//!   can use it in the same ACK. A delayed ACK covering two segments therefore
//!   grows cwnd by two, and cwnd doubles per RTT whatever the ACK ratio.
//! * **Additive increase** (`tcp_cong_avoid_ai`): `snd_cwnd_cnt` accumulates acked
//!   segments; every `w` of them add one segment (w = cwnd for Reno, CUBIC's `cnt`).
//!   Credits earned at a larger `w` are paid out gently when `w` shrinks.
//! * **Reno**: additive increase by one segment per window, halving on loss
//!   (`tcp_reno_ssthresh` = max(cwnd/2, 2)), undo restores max(cwnd, prior_cwnd).
//!
//! All of it runs only while the flow is cwnd-limited (`tcp_is_cwnd_limited`),
//! which the sender decides and passes in.

/// The cwnd fields of `tcp_sock` that congestion control modules modify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// `snd_cwnd`, segments.
    pub cwnd: u32,
    /// `snd_ssthresh`, segments.
    pub ssthresh: u32,
    /// `snd_cwnd_cnt`: acked segments not yet turned into cwnd growth.
    pub cwnd_cnt: u32,
    /// `snd_cwnd_clamp`.
    pub clamp: u32,
}

impl Window {
    /// `tcp_in_slow_start`.
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// Grow by `acked` segments up to ssthresh; return the acked segments left over.
    /// Mirrors `tcp_slow_start` in tcp_cong.c.
    pub fn slow_start(&mut self, acked: u32) -> u32 {
        let cwnd = self.cwnd.saturating_add(acked).min(self.ssthresh);
        let left = acked - (cwnd - self.cwnd);
        self.cwnd = cwnd.min(self.clamp);
        left
    }

    /// One segment of growth per `w` acked segments. Mirrors `tcp_cong_avoid_ai`.
    pub fn cong_avoid_ai(&mut self, w: u32, acked: u32) {
        let w = w.max(1);
        // Leftover credit from a larger w: turn it into one segment, not a jump.
        if self.cwnd_cnt >= w {
            self.cwnd_cnt = 0;
            self.cwnd += 1;
        }
        self.cwnd_cnt += acked;
        if self.cwnd_cnt >= w {
            let delta = self.cwnd_cnt / w;
            self.cwnd_cnt -= delta * w;
            self.cwnd += delta;
        }
        self.cwnd = self.cwnd.min(self.clamp);
    }
}

/// `tcp_reno_cong_avoid`: slow start below ssthresh, then +1 segment per window.
pub fn cong_avoid(w: &mut Window, acked: u32, cwnd_limited: bool) {
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
    let cwnd = w.cwnd;
    w.cong_avoid_ai(cwnd, acked);
}

/// `tcp_reno_ssthresh`: half the window, at least 2.
pub fn ssthresh(cwnd: u32) -> u32 {
    (cwnd >> 1).max(2)
}

/// `tcp_reno_undo_cwnd` (CUBIC uses it too): back to the window before the reduction.
pub fn undo_cwnd(cwnd: u32, prior_cwnd: u32) -> u32 {
    cwnd.max(prior_cwnd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(cwnd: u32, ssthresh: u32) -> Window {
        Window { cwnd, ssthresh, cwnd_cnt: 0, clamp: u32::MAX }
    }

    #[test]
    fn slow_start_counts_segments_and_stops_at_ssthresh() {
        let mut w = win(10, 15);
        assert_eq!(w.slow_start(2), 0);
        assert_eq!(w.cwnd, 12);
        // Crossing ssthresh: 3 of 5 used, 2 left for congestion avoidance.
        assert_eq!(w.slow_start(5), 2);
        assert_eq!(w.cwnd, 15);
    }

    #[test]
    fn reno_adds_one_segment_per_window() {
        let mut w = win(10, 10);
        for _ in 0..9 {
            cong_avoid(&mut w, 1, true);
        }
        assert_eq!((w.cwnd, w.cwnd_cnt), (10, 9));
        cong_avoid(&mut w, 1, true);
        assert_eq!((w.cwnd, w.cwnd_cnt), (11, 0));
        // A stretch ACK of 25 segments at w = 11: two increments, 3 left over.
        cong_avoid(&mut w, 25, true);
        assert_eq!((w.cwnd, w.cwnd_cnt), (13, 3));
        // Not cwnd-limited: no growth at all.
        cong_avoid(&mut w, 100, false);
        assert_eq!(w.cwnd, 13);
        assert_eq!(ssthresh(13), 6);
        assert_eq!(ssthresh(3), 2);
    }
}
