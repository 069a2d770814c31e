//! BBR v1 congestion control, as `net/ipv4/tcp_bbr.c` in Linux 6.12.
//!
//! # The model BBR keeps
//!
//! * **Bottleneck bandwidth**: the windowed maximum of the delivery-rate samples
//!   (`rate.rs`) over the last 10 packet-timed round trips (`bbr_bw_rtts` = cycle
//!   length + 2), in packets/µs scaled by 2²⁴ (`BW_SCALE`). Application-limited samples
//!   enter only when they are at least the current maximum.
//! * **min_rtt**: the lowest RTT sample of the last 10 s (`bbr_min_rtt_win_sec`).
//! * **Rounds**: a round ends when a segment sent after the previous round's end is
//!   delivered (`next_rtt_delivered`).
//!
//! # The state machine
//!
//! * **STARTUP**: pacing and cwnd gain 2/ln 2 (739/256, `bbr_high_gain`). The pipe is
//!   full after 3 rounds in a row (not application-limited) whose max bandwidth grew by
//!   less than 25 % (`bbr_check_full_bw_reached`).
//! * **DRAIN**: pacing gain 256/739 (ln 2 / 2), cwnd gain stays high, until the packets
//!   in the network at the next departure time fall to one BDP; ssthresh is set to
//!   that inflight on entry.
//! * **PROBE_BW**: cwnd gain 2, pacing gain cycling through 5/4, 3/4, 1, 1, 1, 1, 1, 1,
//!   one min_rtt per phase (5/4 also until inflight reaches 5/4 BDP or a loss, 3/4 ends
//!   early once inflight is down to one BDP). The first phase is drawn at random from
//!   all but the 3/4 phase (`bbr_reset_probe_bw_mode`) — here from the simulator's
//!   seeded generator, so a run stays reproducible.
//! * **PROBE_RTT**: when min_rtt has not been refreshed for 10 s, cwnd is cut to 4
//!   packets for max(200 ms, one round) once inflight is down to 4, then BBR restores
//!   the saved cwnd and returns to PROBE_BW (or STARTUP if the pipe was never full).
//!
//! # Around it
//!
//! * **Pacing rate**: gain × bw × MSS, 1 % below (`bbr_pacing_margin_percent`), and
//!   never lowered before the pipe is full. BBR asks for pacing (`bbr_init` moves
//!   `sk_pacing_status` from NONE to NEEDED): without fq, TCP paces itself with EDT
//!   timestamps and its pacing timer (`tcp_internal_pacing`, output.rs).
//! * **cwnd** (`bbr_set_cwnd`): gain × BDP plus the ACK-aggregation allowance plus the
//!   quantization budget (3 TSO skbs, rounded up to even, +2 in the 5/4 phase);
//!   slow start towards it, and cut to it only once the pipe is full. In loss recovery
//!   the first round conserves packets (cwnd = inflight + acked), later rounds may
//!   send 2 per ACKed, and leaving recovery restores the cwnd saved on entry.
//! * **Long-term bandwidth** (`bbr_lt_bw_sampling`): after the first loss, intervals
//!   of 4–16 rounds are measured; two consecutive lossy (≥ 20 %) intervals whose
//!   rates are within 1/8 or 4 kbit/s of each other mean a token-bucket policer: BBR
//!   then uses their average with pacing gain 1 for 48 rounds.
//!
//! BBR's `cong_control` replaces `tcp_cong_control`'s PRR and pacing-rate update
//! (sender.rs calls [`Bbr::main`] instead). The RFC 2861-style `CA_EVENT_TX_START`
//! idle restart is mirrored for application-limited sockets.

use super::rate::RateSample;
use super::rtt::MinMax;
use super::CaState;
use crate::rng::Rng;

/// `BW_SCALE`: bandwidths are packets/µs × 2²⁴.
pub const BW_SCALE: u32 = 24;
pub const BW_UNIT: u64 = 1 << BW_SCALE;
/// `BBR_SCALE`: gains are × 256.
pub const BBR_SCALE: u32 = 8;
pub const BBR_UNIT: u32 = 1 << BBR_SCALE;
/// `CYCLE_LEN`: phases of the PROBE_BW gain cycle.
pub const CYCLE_LEN: u32 = 8;
const BW_RTTS: u32 = CYCLE_LEN + 2;
const MIN_RTT_WIN_SEC: u32 = 10;
const PROBE_RTT_MODE_MS: u32 = 200;
const MIN_TSO_RATE: u64 = 1_200_000;
const PACING_MARGIN_PERCENT: u64 = 1;
/// 2/ln 2 (`bbr_high_gain` = 256 × 2885 / 1000 + 1 = 739).
pub const HIGH_GAIN: u32 = BBR_UNIT * 2885 / 1000 + 1;
/// `bbr_drain_gain` = 256 × 1000 / 2885 = 88.
pub const DRAIN_GAIN: u32 = BBR_UNIT * 1000 / 2885;
/// `bbr_cwnd_gain`.
pub const CWND_GAIN: u32 = BBR_UNIT * 2;
/// `bbr_pacing_gain`: 5/4, 3/4, then six phases at 1.
pub const PACING_GAIN: [u32; CYCLE_LEN as usize] =
    [BBR_UNIT * 5 / 4, BBR_UNIT * 3 / 4, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT];
const CYCLE_RAND: u32 = 7;
/// `bbr_cwnd_min_target`.
pub const CWND_MIN_TARGET: u32 = 4;
const FULL_BW_THRESH: u32 = BBR_UNIT * 5 / 4;
const FULL_BW_CNT: u32 = 3;
const LT_INTVL_MIN_RTTS: u32 = 4;
const LT_LOSS_THRESH: u64 = 50;
const LT_BW_RATIO: u32 = BBR_UNIT / 8;
const LT_BW_DIFF: u64 = 4000 / 8;
const LT_BW_MAX_RTTS: u32 = 48;
const EXTRA_ACKED_GAIN: u32 = BBR_UNIT;
const EXTRA_ACKED_WIN_RTTS: u32 = 5;
const ACK_EPOCH_ACKED_RESET_THRESH: u32 = 1 << 20;
const EXTRA_ACKED_MAX_US: u64 = 100 * 1000;
/// `TCP_INIT_CWND`.
const INIT_CWND: u32 = 10;
/// `GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER` (`bbr_tso_segs_goal` ignores the device's
/// `sk_gso_max_size`).
const TSO_GOAL_MAX_BYTES: u64 = 65536 - 1 - 320;

/// `enum bbr_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// The socket as BBR reads and writes it (the fields of `tcp_sock`/`sock` it uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BbrSock {
    /// `tcp_clock_cache`, ns.
    pub now_ns: u64,
    /// `tcp_jiffies32`.
    pub jiffies: u32,
    /// `CONFIG_HZ`.
    pub hz: u32,
    /// `mss_cache`.
    pub mss: u32,
    /// `tp->delivered`, `tp->delivered_mstamp` (µs), `tp->lost`.
    pub delivered: u64,
    pub delivered_mstamp: u64,
    pub lost: u64,
    /// `tcp_packets_in_flight`.
    pub in_flight: u32,
    /// `tcp_wstamp_ns`: EDT of the next skb.
    pub wstamp_ns: u64,
    /// `srtt_us` (× 8), 0 = none.
    pub srtt_us: u32,
    /// `tcp_min_rtt`, µs (`u32::MAX` = none).
    pub min_rtt_us: u32,
    /// `sk_max_pacing_rate`, `sk_pacing_shift`.
    pub max_pacing_rate: u64,
    pub pacing_shift: u32,
    /// `icsk_ca_state`.
    pub ca_state: CaState,
    /// `snd_cwnd_clamp`.
    pub clamp: u32,
    /// Written by BBR: `snd_cwnd`, `snd_ssthresh`, `sk_pacing_rate`, `tp->app_limited`.
    pub cwnd: u32,
    pub ssthresh: u32,
    pub pacing_rate: u64,
    pub app_limited: u32,
}

/// `struct bbr`.
#[derive(Clone, Debug)]
pub struct Bbr {
    pub min_rtt_us: u32,
    pub min_rtt_stamp: u32,
    pub probe_rtt_done_stamp: u32,
    /// Max recent delivery rate, packets/µs << 24, windowed over `rtt_cnt`.
    pub bw: MinMax,
    pub rtt_cnt: u32,
    pub next_rtt_delivered: u64,
    /// Start of the current gain-cycle phase, µs.
    pub cycle_mstamp: u64,
    pub mode: Mode,
    pub prev_ca_state: CaState,
    pub packet_conservation: bool,
    pub round_start: bool,
    pub idle_restart: bool,
    pub probe_rtt_round_done: bool,
    pub lt_is_sampling: bool,
    pub lt_rtt_cnt: u32,
    pub lt_use_bw: bool,
    pub lt_bw: u32,
    pub lt_last_delivered: u64,
    /// ms.
    pub lt_last_stamp: u32,
    pub lt_last_lost: u64,
    pub pacing_gain: u32,
    pub cwnd_gain: u32,
    pub full_bw_reached: bool,
    pub full_bw_cnt: u32,
    pub cycle_idx: u32,
    pub has_seen_rtt: bool,
    pub prior_cwnd: u32,
    pub full_bw: u32,
    pub ack_epoch_mstamp: u64,
    pub extra_acked: [u16; 2],
    pub ack_epoch_acked: u32,
    pub extra_acked_win_rtts: u32,
    pub extra_acked_win_idx: usize,
    /// The randomness of `bbr_reset_probe_bw_mode` (the kernel's `get_random_u32_below`).
    rng: Rng,
}

/// `tcp_stamp_us_delta`: `t1 − t0`, at least 0.
fn us_delta(t1: u64, t0: u64) -> u64 {
    t1.saturating_sub(t0)
}

/// `after(a, b)` on jiffies.
fn after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

impl Bbr {
    /// `bbr_init`, with `seed` for the gain cycle's random start phase.
    pub fn new(sk: &mut BbrSock, seed: u64) -> Bbr {
        let mut b = Bbr {
            min_rtt_us: sk.min_rtt_us,
            min_rtt_stamp: sk.jiffies,
            probe_rtt_done_stamp: 0,
            bw: MinMax::new(0, 0),
            rtt_cnt: 0,
            next_rtt_delivered: 0,
            cycle_mstamp: 0,
            mode: Mode::Startup,
            prev_ca_state: CaState::Open,
            packet_conservation: false,
            round_start: false,
            idle_restart: false,
            probe_rtt_round_done: false,
            lt_is_sampling: false,
            lt_rtt_cnt: 0,
            lt_use_bw: false,
            lt_bw: 0,
            lt_last_delivered: 0,
            lt_last_stamp: 0,
            lt_last_lost: 0,
            pacing_gain: 0,
            cwnd_gain: 0,
            full_bw_reached: false,
            full_bw_cnt: 0,
            cycle_idx: 0,
            has_seen_rtt: false,
            prior_cwnd: 0,
            full_bw: 0,
            ack_epoch_mstamp: sk.now_ns / 1000,
            extra_acked: [0; 2],
            ack_epoch_acked: 0,
            extra_acked_win_rtts: 0,
            extra_acked_win_idx: 0,
            rng: Rng::new(seed),
        };
        sk.ssthresh = super::INFINITE_SSTHRESH;
        b.init_pacing_rate_from_rtt(sk);
        b.reset_lt_bw_sampling(sk);
        b.mode = Mode::Startup;
        b
    }

    /// `bbr_max_bw`.
    pub fn max_bw(&self) -> u32 {
        self.bw.get()
    }

    /// `bbr_bw`: the policed rate when one was detected, else the max filter.
    pub fn bw(&self) -> u32 {
        if self.lt_use_bw {
            self.lt_bw
        } else {
            self.max_bw()
        }
    }

    /// `bbr_extra_acked`.
    fn extra_acked(&self) -> u32 {
        self.extra_acked[0].max(self.extra_acked[1]) as u32
    }

    /// `bbr_rate_bytes_per_sec`: a rate in bytes/s with a gain and the 1 % margin.
    pub fn rate_bytes_per_sec(mss: u32, rate: u64, gain: u32) -> u64 {
        let mut rate = rate.wrapping_mul(mss as u64);
        rate = rate.wrapping_mul(gain as u64);
        rate >>= BBR_SCALE;
        rate = rate.wrapping_mul(1_000_000 / 100 * (100 - PACING_MARGIN_PERCENT));
        rate >> BW_SCALE
    }

    /// `bbr_bw_to_pacing_rate`.
    fn bw_to_pacing_rate(sk: &BbrSock, bw: u32, gain: u32) -> u64 {
        Self::rate_bytes_per_sec(sk.mss, bw as u64, gain).min(sk.max_pacing_rate)
    }

    /// `bbr_init_pacing_rate_from_rtt`: high gain × cwnd / srtt (1 ms without a sample).
    fn init_pacing_rate_from_rtt(&mut self, sk: &mut BbrSock) {
        let rtt_us = if sk.srtt_us != 0 {
            self.has_seen_rtt = true;
            (sk.srtt_us >> 3).max(1)
        } else {
            1000
        };
        let bw = sk.cwnd as u64 * BW_UNIT / rtt_us as u64;
        sk.pacing_rate = Self::bw_to_pacing_rate(sk, bw as u32, HIGH_GAIN);
    }

    /// `bbr_set_pacing_rate`: never slower before the pipe is known to be full.
    fn set_pacing_rate(&mut self, sk: &mut BbrSock, bw: u32, gain: u32) {
        let rate = Self::bw_to_pacing_rate(sk, bw, gain);
        if !self.has_seen_rtt && sk.srtt_us != 0 {
            self.init_pacing_rate_from_rtt(sk);
        }
        if self.full_bw_reached || rate > sk.pacing_rate {
            sk.pacing_rate = rate;
        }
    }

    /// `bbr_min_tso_segs`: one-segment skbs below 1.2 Mbit/s.
    pub fn min_tso_segs(pacing_rate: u64) -> u32 {
        if pacing_rate < (MIN_TSO_RATE >> 3) {
            1
        } else {
            2
        }
    }

    /// `bbr_tso_segs_goal`.
    pub fn tso_segs_goal(sk: &BbrSock) -> u32 {
        let bytes = (sk.pacing_rate >> sk.pacing_shift).min(TSO_GOAL_MAX_BYTES);
        let segs = ((bytes / sk.mss as u64) as u32).max(Self::min_tso_segs(sk.pacing_rate));
        segs.min(0x7f)
    }

    /// `bbr_save_cwnd`: remember the last good cwnd before recovery or PROBE_RTT.
    fn save_cwnd(&mut self, sk: &BbrSock) {
        if self.prev_ca_state < CaState::Recovery && self.mode != Mode::ProbeRtt {
            self.prior_cwnd = sk.cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(sk.cwnd);
        }
    }

    /// `bbr_cwnd_event(CA_EVENT_TX_START)`: restarting from idle while app-limited.
    pub fn on_tx_start(&mut self, sk: &mut BbrSock) {
        if sk.app_limited == 0 {
            return;
        }
        self.idle_restart = true;
        self.ack_epoch_mstamp = sk.now_ns / 1000;
        self.ack_epoch_acked = 0;
        if self.mode == Mode::ProbeBw {
            let bw = self.bw();
            self.set_pacing_rate(sk, bw, BBR_UNIT);
        } else if self.mode == Mode::ProbeRtt {
            self.check_probe_rtt_done(sk);
        }
    }

    /// `bbr_bdp`: ⌈bw × min_rtt × gain⌉ packets (TCP_INIT_CWND without an RTT).
    pub fn bdp(&self, bw: u32, gain: u32) -> u32 {
        if self.min_rtt_us == u32::MAX {
            return INIT_CWND;
        }
        let w = bw as u64 * self.min_rtt_us as u64;
        (((w.wrapping_mul(gain as u64) >> BBR_SCALE) + BW_UNIT - 1) / BW_UNIT) as u32
    }

    /// `bbr_quantization_budget`.
    pub fn quantization_budget(&self, sk: &BbrSock, cwnd: u32) -> u32 {
        let mut cwnd = cwnd + 3 * Self::tso_segs_goal(sk);
        cwnd = (cwnd + 1) & !1;
        if self.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            cwnd += 2;
        }
        cwnd
    }

    /// `bbr_inflight`.
    pub fn inflight(&self, sk: &BbrSock, bw: u32, gain: u32) -> u32 {
        let bdp = self.bdp(bw, gain);
        self.quantization_budget(sk, bdp)
    }

    /// `bbr_packets_in_net_at_edt`: what will still be in the network when the next skb
    /// leaves at its EDT.
    pub fn packets_in_net_at_edt(&self, sk: &BbrSock, inflight_now: u32) -> u32 {
        let now_ns = sk.now_ns;
        let edt_ns = sk.wstamp_ns.max(now_ns);
        let interval_us = (edt_ns - now_ns) / 1000;
        let interval_delivered = ((self.bw() as u64 * interval_us) >> BW_SCALE) as u32;
        let mut inflight_at_edt = inflight_now;
        if self.pacing_gain > BBR_UNIT {
            inflight_at_edt += Self::tso_segs_goal(sk);
        }
        inflight_at_edt.saturating_sub(interval_delivered)
    }

    /// `bbr_ack_aggregation_cwnd`.
    fn ack_aggregation_cwnd(&self) -> u32 {
        if EXTRA_ACKED_GAIN != 0 && self.full_bw_reached {
            let max_aggr_cwnd = (self.bw() as u64 * EXTRA_ACKED_MAX_US / BW_UNIT) as u32;
            let aggr_cwnd = (EXTRA_ACKED_GAIN * self.extra_acked()) >> BBR_SCALE;
            return aggr_cwnd.min(max_aggr_cwnd);
        }
        0
    }

    /// `bbr_set_cwnd_to_recover_or_restore`: packet conservation in the first round of
    /// recovery, the saved cwnd back when it ends. Returns the cwnd and whether packet
    /// conservation applies.
    fn set_cwnd_to_recover_or_restore(&mut self, sk: &BbrSock, rs: &RateSample, acked: u32) -> (u32, bool) {
        let prev_state = self.prev_ca_state;
        let state = sk.ca_state;
        let mut cwnd = sk.cwnd;
        if rs.losses > 0 {
            cwnd = (cwnd as i32 - rs.losses as i32).max(1) as u32;
        }
        if state == CaState::Recovery && prev_state != CaState::Recovery {
            self.packet_conservation = true;
            self.next_rtt_delivered = sk.delivered;
            cwnd = sk.in_flight + acked;
        } else if prev_state >= CaState::Recovery && state < CaState::Recovery {
            cwnd = cwnd.max(self.prior_cwnd);
            self.packet_conservation = false;
        }
        self.prev_ca_state = state;
        if self.packet_conservation {
            return (cwnd.max(sk.in_flight + acked), true);
        }
        (cwnd, false)
    }

    /// `bbr_set_cwnd`.
    fn set_cwnd(&mut self, sk: &mut BbrSock, rs: &RateSample, acked: u32, bw: u32, gain: u32) {
        let mut cwnd = sk.cwnd;
        if acked != 0 {
            let (c, conserving) = self.set_cwnd_to_recover_or_restore(sk, rs, acked);
            cwnd = c;
            if !conserving {
                let mut target = self.bdp(bw, gain);
                target += self.ack_aggregation_cwnd();
                target = self.quantization_budget(sk, target);
                if self.full_bw_reached {
                    cwnd = (cwnd + acked).min(target);
                } else if cwnd < target || sk.delivered < INIT_CWND as u64 {
                    cwnd += acked;
                }
                cwnd = cwnd.max(CWND_MIN_TARGET);
            }
        }
        sk.cwnd = cwnd.min(sk.clamp);
        if self.mode == Mode::ProbeRtt {
            sk.cwnd = sk.cwnd.min(CWND_MIN_TARGET);
        }
    }

    /// `bbr_is_next_cycle_phase`.
    fn is_next_cycle_phase(&self, sk: &BbrSock, rs: &RateSample) -> bool {
        let is_full_length = us_delta(sk.delivered_mstamp, self.cycle_mstamp) > self.min_rtt_us as u64;
        if self.pacing_gain == BBR_UNIT {
            return is_full_length;
        }
        let inflight = self.packets_in_net_at_edt(sk, rs.prior_in_flight);
        let bw = self.max_bw();
        if self.pacing_gain > BBR_UNIT {
            return is_full_length && (rs.losses > 0 || inflight >= self.inflight(sk, bw, self.pacing_gain));
        }
        is_full_length || inflight <= self.inflight(sk, bw, BBR_UNIT)
    }

    /// `bbr_advance_cycle_phase`.
    fn advance_cycle_phase(&mut self, sk: &BbrSock) {
        self.cycle_idx = (self.cycle_idx + 1) & (CYCLE_LEN - 1);
        self.cycle_mstamp = sk.delivered_mstamp;
    }

    /// `bbr_update_cycle_phase`.
    fn update_cycle_phase(&mut self, sk: &BbrSock, rs: &RateSample) {
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(sk, rs) {
            self.advance_cycle_phase(sk);
        }
    }

    /// `bbr_reset_probe_bw_mode`: a random phase other than 3/4 comes next.
    fn reset_probe_bw_mode(&mut self, sk: &BbrSock) {
        self.mode = Mode::ProbeBw;
        // get_random_u32_below(7): the high half of a 32×32-bit product.
        let r = ((self.rng.next_u64() as u32 as u64 * CYCLE_RAND as u64) >> 32) as u32;
        self.cycle_idx = CYCLE_LEN - 1 - r;
        self.advance_cycle_phase(sk);
    }

    /// `bbr_reset_mode`.
    fn reset_mode(&mut self, sk: &BbrSock) {
        if !self.full_bw_reached {
            self.mode = Mode::Startup;
        } else {
            self.reset_probe_bw_mode(sk);
        }
    }

    /// `bbr_reset_lt_bw_sampling_interval`.
    fn reset_lt_bw_sampling_interval(&mut self, sk: &BbrSock) {
        self.lt_last_stamp = (sk.delivered_mstamp / 1000) as u32;
        self.lt_last_delivered = sk.delivered;
        self.lt_last_lost = sk.lost;
        self.lt_rtt_cnt = 0;
    }

    /// `bbr_reset_lt_bw_sampling`.
    fn reset_lt_bw_sampling(&mut self, sk: &BbrSock) {
        self.lt_bw = 0;
        self.lt_use_bw = false;
        self.lt_is_sampling = false;
        self.reset_lt_bw_sampling_interval(sk);
    }

    /// `bbr_lt_bw_interval_done`: two consistent lossy intervals mean a policer.
    fn lt_bw_interval_done(&mut self, sk: &BbrSock, bw: u32) {
        if self.lt_bw != 0 {
            // abs() of the u32 difference read as an int, as the kernel computes it.
            let diff = (bw.wrapping_sub(self.lt_bw) as i32).unsigned_abs();
            if diff.wrapping_mul(BBR_UNIT) <= LT_BW_RATIO.wrapping_mul(self.lt_bw)
                || Self::rate_bytes_per_sec(sk.mss, diff as u64, BBR_UNIT) <= LT_BW_DIFF
            {
                self.lt_bw = ((bw as u64 + self.lt_bw as u64) >> 1) as u32;
                self.lt_use_bw = true;
                self.pacing_gain = BBR_UNIT;
                self.lt_rtt_cnt = 0;
                return;
            }
        }
        self.lt_bw = bw;
        self.reset_lt_bw_sampling_interval(sk);
    }

    /// `bbr_lt_bw_sampling`: the long-term (policer) bandwidth estimator.
    fn lt_bw_sampling(&mut self, sk: &BbrSock, rs: &RateSample) {
        if self.lt_use_bw {
            if self.mode == Mode::ProbeBw && self.round_start {
                self.lt_rtt_cnt += 1;
                if self.lt_rtt_cnt >= LT_BW_MAX_RTTS {
                    self.reset_lt_bw_sampling(sk);
                    self.reset_probe_bw_mode(sk);
                }
            }
            return;
        }
        // Start at the first loss, once the policer's tokens are exhausted.
        if !self.lt_is_sampling {
            if rs.losses == 0 {
                return;
            }
            self.reset_lt_bw_sampling_interval(sk);
            self.lt_is_sampling = true;
        }
        if rs.is_app_limited {
            self.reset_lt_bw_sampling(sk);
            return;
        }
        if self.round_start {
            self.lt_rtt_cnt += 1;
        }
        if self.lt_rtt_cnt < LT_INTVL_MIN_RTTS {
            return;
        }
        if self.lt_rtt_cnt > 4 * LT_INTVL_MIN_RTTS {
            self.reset_lt_bw_sampling(sk);
            return;
        }
        // End the interval at a loss (the tokens are gone).
        if rs.losses == 0 {
            return;
        }
        let lost = sk.lost - self.lt_last_lost;
        let delivered = sk.delivered - self.lt_last_delivered;
        if delivered == 0 || (lost << BBR_SCALE) < LT_LOSS_THRESH * delivered {
            return;
        }
        let mut t = ((sk.delivered_mstamp / 1000) as u32).wrapping_sub(self.lt_last_stamp);
        if (t as i32) < 1 {
            return;
        }
        if t >= u32::MAX / 1000 {
            self.reset_lt_bw_sampling(sk);
            return;
        }
        t *= 1000;
        let bw = delivered * BW_UNIT / t as u64;
        self.lt_bw_interval_done(sk, bw as u32);
    }

    /// `bbr_update_bw`: rounds, the long-term sampler, and the max-bandwidth filter.
    fn update_bw(&mut self, sk: &BbrSock, rs: &RateSample) {
        self.round_start = false;
        if rs.delivered < 0 || rs.interval_us <= 0 {
            return;
        }
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = sk.delivered;
            self.rtt_cnt += 1;
            self.round_start = true;
            self.packet_conservation = false;
        }
        self.lt_bw_sampling(sk, rs);
        let bw = (rs.delivered as u64 * BW_UNIT / rs.interval_us as u64) as u32;
        if !rs.is_app_limited || bw >= self.max_bw() {
            self.bw.running_max(BW_RTTS, self.rtt_cnt, bw);
        }
    }

    /// `bbr_update_ack_aggregation`: the largest excess of ACKed data over bw × time in
    /// the last 5–10 rounds.
    fn update_ack_aggregation(&mut self, sk: &BbrSock, rs: &RateSample) {
        if EXTRA_ACKED_GAIN == 0 || rs.acked_sacked == 0 || rs.delivered < 0 || rs.interval_us <= 0 {
            return;
        }
        if self.round_start {
            self.extra_acked_win_rtts = (self.extra_acked_win_rtts + 1).min(0x1f);
            if self.extra_acked_win_rtts >= EXTRA_ACKED_WIN_RTTS {
                self.extra_acked_win_rtts = 0;
                self.extra_acked_win_idx ^= 1;
                self.extra_acked[self.extra_acked_win_idx] = 0;
            }
        }
        let epoch_us = us_delta(sk.delivered_mstamp, self.ack_epoch_mstamp) as u32;
        let mut expected_acked = (self.bw() as u64 * epoch_us as u64 / BW_UNIT) as u32;
        if self.ack_epoch_acked <= expected_acked
            || self.ack_epoch_acked + rs.acked_sacked >= ACK_EPOCH_ACKED_RESET_THRESH
        {
            self.ack_epoch_acked = 0;
            self.ack_epoch_mstamp = sk.delivered_mstamp;
            expected_acked = 0;
        }
        self.ack_epoch_acked = (self.ack_epoch_acked + rs.acked_sacked).min(0xfffff);
        let extra_acked = (self.ack_epoch_acked - expected_acked).min(sk.cwnd);
        if extra_acked > self.extra_acked[self.extra_acked_win_idx] as u32 {
            self.extra_acked[self.extra_acked_win_idx] = extra_acked as u16;
        }
    }

    /// `bbr_check_full_bw_reached`: 3 rounds without 25 % growth.
    fn check_full_bw_reached(&mut self, rs: &RateSample) {
        if self.full_bw_reached || !self.round_start || rs.is_app_limited {
            return;
        }
        let bw_thresh = ((self.full_bw as u64 * FULL_BW_THRESH as u64) >> BBR_SCALE) as u32;
        if self.max_bw() >= bw_thresh {
            self.full_bw = self.max_bw();
            self.full_bw_cnt = 0;
            return;
        }
        self.full_bw_cnt += 1;
        self.full_bw_reached = self.full_bw_cnt >= FULL_BW_CNT;
    }

    /// `bbr_check_drain`.
    fn check_drain(&mut self, sk: &mut BbrSock) {
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            sk.ssthresh = self.inflight(sk, self.max_bw(), BBR_UNIT);
        }
        if self.mode == Mode::Drain
            && self.packets_in_net_at_edt(sk, sk.in_flight) <= self.inflight(sk, self.max_bw(), BBR_UNIT)
        {
            self.reset_probe_bw_mode(sk);
        }
    }

    /// `bbr_check_probe_rtt_done`.
    fn check_probe_rtt_done(&mut self, sk: &mut BbrSock) {
        if !(self.probe_rtt_done_stamp != 0 && after(sk.jiffies, self.probe_rtt_done_stamp)) {
            return;
        }
        self.min_rtt_stamp = sk.jiffies;
        sk.cwnd = sk.cwnd.max(self.prior_cwnd);
        self.reset_mode(sk);
    }

    /// `bbr_update_min_rtt`: the 10 s min_rtt filter and PROBE_RTT.
    fn update_min_rtt(&mut self, sk: &mut BbrSock, rs: &RateSample) {
        let filter_expired = after(sk.jiffies, self.min_rtt_stamp.wrapping_add(MIN_RTT_WIN_SEC * sk.hz));
        if rs.rtt_us >= 0 && ((rs.rtt_us as u64) <= self.min_rtt_us as u64 || (filter_expired && !rs.is_ack_delayed)) {
            self.min_rtt_us = rs.rtt_us as u32;
            self.min_rtt_stamp = sk.jiffies;
        }
        if PROBE_RTT_MODE_MS > 0 && filter_expired && !self.idle_restart && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.save_cwnd(sk);
            self.probe_rtt_done_stamp = 0;
        }
        if self.mode == Mode::ProbeRtt {
            // Ignore the low-rate samples of this mode.
            sk.app_limited = (sk.delivered as u32).wrapping_add(sk.in_flight).max(1);
            if self.probe_rtt_done_stamp == 0 && sk.in_flight <= CWND_MIN_TARGET {
                // msecs_to_jiffies rounds up.
                let j = (PROBE_RTT_MODE_MS as u64 * sk.hz as u64).div_ceil(1000) as u32;
                self.probe_rtt_done_stamp = sk.jiffies.wrapping_add(j);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = sk.delivered;
            } else if self.probe_rtt_done_stamp != 0 {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done {
                    self.check_probe_rtt_done(sk);
                }
            }
        }
        if rs.delivered > 0 {
            self.idle_restart = false;
        }
    }

    /// `bbr_update_gains`.
    fn update_gains(&mut self) {
        let (p, c) = match self.mode {
            Mode::Startup => (HIGH_GAIN, HIGH_GAIN),
            Mode::Drain => (DRAIN_GAIN, HIGH_GAIN),
            Mode::ProbeBw => (if self.lt_use_bw { BBR_UNIT } else { PACING_GAIN[self.cycle_idx as usize] }, CWND_GAIN),
            Mode::ProbeRtt => (BBR_UNIT, BBR_UNIT),
        };
        self.pacing_gain = p;
        self.cwnd_gain = c;
    }

    /// `bbr_update_model`.
    fn update_model(&mut self, sk: &mut BbrSock, rs: &RateSample) {
        self.update_bw(sk, rs);
        self.update_ack_aggregation(sk, rs);
        self.update_cycle_phase(sk, rs);
        self.check_full_bw_reached(rs);
        self.check_drain(sk);
        self.update_min_rtt(sk, rs);
        self.update_gains();
    }

    /// `bbr_main` (the `cong_control` hook): update the model, then pacing rate and cwnd.
    pub fn main(&mut self, sk: &mut BbrSock, rs: &RateSample) {
        self.update_model(sk, rs);
        let bw = self.bw();
        self.set_pacing_rate(sk, bw, self.pacing_gain);
        self.set_cwnd(sk, rs, rs.acked_sacked, bw, self.cwnd_gain);
    }

    /// `bbr_undo_cwnd`: a spurious slow-down; full-pipe detection starts over.
    pub fn undo_cwnd(&mut self, sk: &BbrSock) -> u32 {
        self.full_bw = 0;
        self.full_bw_cnt = 0;
        self.reset_lt_bw_sampling(sk);
        sk.cwnd
    }

    /// `bbr_ssthresh`: entering recovery; save cwnd, leave ssthresh as it is.
    pub fn ssthresh(&mut self, sk: &BbrSock) -> u32 {
        self.save_cwnd(sk);
        sk.ssthresh
    }

    /// `bbr_set_state`: an RTO ends the round and counts as a loss for the policer
    /// detector.
    pub fn set_state(&mut self, sk: &BbrSock, new_state: CaState) {
        if new_state == CaState::Loss {
            let rs = RateSample { losses: 1, ..RateSample::default() };
            self.prev_ca_state = CaState::Loss;
            self.full_bw = 0;
            self.round_start = true;
            self.lt_bw_sampling(sk, &rs);
        }
    }
}
