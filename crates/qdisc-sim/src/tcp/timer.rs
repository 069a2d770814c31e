//! The sender's timers (`tcp_timer.c`, `tcp_rearm_rto`, `tcp_schedule_loss_probe`).
//!
//! Like the kernel, one "retransmit" timer slot (`icsk_pending`) carries one of:
//!
//! * **RTO** (RFC 6298 §5): armed when data goes out with nothing in flight and
//!   re-armed on each ACK that acknowledges new data. Re-armed relative to the send
//!   time of the oldest outstanding segment when it replaces a probe or RACK timer
//!   (`tcp_rto_delta_us`), so those never postpone the RTO. On expiry
//!   (`tcp_retransmit_timer`): enter Loss, retransmit the head, double the RTO
//!   (`icsk_backoff`, at most 120 s); a local drop of that retransmission retries
//!   after `TCP_RESOURCE_PROBE_INTERVAL` (500 ms) without backoff.
//! * **Tail loss probe** (RFC 8985 §7): in Open/CWR with data outstanding, PTO =
//!   2·SRTT + 2 ms (+ rto_min when a single segment is out, for a delayed ACK), or
//!   1 s without an RTT sample, never later than the RTO. On expiry send one new
//!   segment ignoring cwnd, or retransmit the last one — unless that one has not left
//!   the host yet (`skb_still_in_host_queue`: a window-limited flow behind a slow local
//!   shaper); the RTO then restarts.
//! * **RACK reordering timer**: see [`super::rack`].
//! * **Zero-window/local-congestion probe** (`ICSK_TIME_PROBE0`): armed when nothing
//!   is in flight and a local drop left data unsent, at max(RTO, 200 ms); on expiry
//!   `tcp_write_wakeup` sends one MSS cut off the head skb, and if the local qdisc
//!   refuses that too the probe is retried after `TCP_RESOURCE_PROBE_INTERVAL`.
//!
//! Plus the **pacing timer** (an hrtimer at the EDT of the next skb) when the
//! socket paces itself (`SK_PACING_NEEDED`).
//!
//! Lengths are in jiffies and, when `pace_delay` applies (`tcp_reset_xmit_timer`),
//! extended by the time until the next paced departure.

use std::collections::VecDeque;

use qdisc::Instant;

use super::output::Phase;
use super::rtt::RTO_MAX_SECS;
use super::sender::TcpSender;
use super::us;

/// What the retransmit timer slot holds (`ICSK_TIME_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    Retrans,
    ReoTimeout,
    LossProbe,
    Probe0,
}

/// The armed retransmit timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XmitTimer {
    pub kind: TimerKind,
    pub at: Instant,
}

/// `TCP_RESOURCE_PROBE_INTERVAL` = HZ/2.
fn resource_probe_jiffies(hz: u32) -> u64 {
    hz as u64 / 2
}

impl TcpSender {
    /// `tcp_pacing_delay` in jiffies: how far in the future the next departure is.
    fn pacing_delay_jiffies(&self) -> u64 {
        let now = self.now.as_nanos();
        if self.wstamp_ns > now {
            self.hz.nsecs_to_jiffies(self.wstamp_ns - now)
        } else {
            0
        }
    }

    /// `tcp_reset_xmit_timer` / `inet_csk_reset_xmit_timer` (max_when = `TCP_RTO_MAX`).
    pub(super) fn reset_xmit_timer(&mut self, kind: TimerKind, when_j: u64, pace_delay: bool) {
        let mut j = when_j;
        if pace_delay {
            j += self.pacing_delay_jiffies();
        }
        j = j.min(RTO_MAX_SECS * self.hz.0 as u64);
        self.xmit_timer = Some(XmitTimer { kind, at: self.hz.deadline(self.now, j) });
    }

    /// `tcp_rto_delta_us`: time left until the RTO measured from the head's transmission.
    fn rto_delta_us(&self) -> i64 {
        let rto_us = self.hz.jiffies_to_usecs(self.rto_j as u64) as i64;
        match self.sb.segs.front() {
            Some(head) => head.xmit_us() as i64 + rto_us - us(self.now) as i64,
            None => rto_us,
        }
    }

    /// `tcp_rearm_rto`.
    pub(super) fn rearm_rto(&mut self) {
        if self.sb.packets_out == 0 {
            self.xmit_timer = None;
            return;
        }
        let mut rto = self.rto_j as u64;
        if matches!(self.xmit_timer.map(|t| t.kind), Some(TimerKind::ReoTimeout | TimerKind::LossProbe)) {
            let delta = self.rto_delta_us().max(1) as u64;
            rto = self.hz.usecs_to_jiffies(delta);
        }
        self.reset_xmit_timer(TimerKind::Retrans, rto, true);
    }

    /// `tcp_schedule_loss_probe`. Returns whether a probe was scheduled.
    pub(super) fn schedule_loss_probe(&mut self, advancing_rto: bool) -> bool {
        use super::CaState::{Cwr, Open};
        if !self.cfg.tlp || self.sb.packets_out == 0 || !self.cfg.sack || !matches!(self.ca_state, Open | Cwr) {
            return false;
        }
        let mut timeout = if self.rtt.srtt_us != 0 {
            let mut t_us = (self.rtt.srtt_us >> 2) as u64;
            // One segment out: allow for the receiver's delayed ACK.
            t_us += if self.sb.packets_out == 1 { self.rto_min_us() as u64 } else { 2000 };
            self.hz.usecs_to_jiffies(t_us)
        } else {
            self.hz.0 as u64 // TCP_TIMEOUT_INIT
        };
        let rto_delta_us =
            if advancing_rto { self.hz.jiffies_to_usecs(self.rto_j as u64) as i64 } else { self.rto_delta_us() };
        if rto_delta_us > 0 {
            timeout = timeout.min(self.hz.usecs_to_jiffies(rto_delta_us as u64));
        }
        self.reset_xmit_timer(TimerKind::LossProbe, timeout, true);
        true
    }

    /// `tcp_set_xmit_timer`: a loss probe if allowed, else the RTO.
    pub(super) fn set_xmit_timer(&mut self) {
        if !self.schedule_loss_probe(true) {
            self.rearm_rto();
        }
    }

    /// `tcp_probe0_base`: the probe timer's interval before backoff, max(RTO, rto_min).
    fn probe0_base(&self) -> u64 {
        (self.rto_j as u64).max(self.hz.usecs_to_jiffies(self.rto_min_us() as u64))
    }

    /// `tcp_check_probe_timer`: nothing in flight and nothing armed, but data waits.
    pub(super) fn check_probe_timer(&mut self) {
        if self.sb.packets_out == 0 && self.xmit_timer.is_none() {
            self.reset_xmit_timer(TimerKind::Probe0, self.probe0_base(), true);
        }
    }

    /// The earliest instant the sender wants `on_timer` without an ACK: the
    /// retransmit-slot timer (RTO, TLP, RACK, probe) or the pacing timer.
    pub fn next_timer(&self) -> Option<Instant> {
        let x = self.xmit_timer.map(|t| t.at);
        match (x, self.pacing_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Timers due at `now` fire. Run the poll loop afterwards.
    pub fn on_timer(&mut self, now: Instant) {
        self.begin_event(now);
        // Unless a handler below plans transmissions, this event sends nothing.
        self.out.plan = VecDeque::from([Phase::Nothing]);
        let pacing_fired = self.pacing_timer.is_some_and(|t| t <= self.now);
        if pacing_fired {
            self.pacing_timer = None;
        }
        if let Some(t) = self.xmit_timer.filter(|t| t.at <= self.now) {
            match t.kind {
                TimerKind::ReoTimeout => {
                    self.rack_reo_timeout();
                    // The slot still holds the expired RACK timer: re-arm the RTO relative
                    // to the head. A head retransmission in the poll loop restarts it.
                    self.rearm_rto();
                }
                TimerKind::LossProbe => self.send_loss_probe(),
                TimerKind::Retrans => {
                    self.xmit_timer = None;
                    self.retransmit_timer();
                }
                TimerKind::Probe0 => {
                    self.xmit_timer = None;
                    self.out.plan = VecDeque::from([Phase::WriteWakeup]);
                }
            }
        }
        if pacing_fired {
            // tcp_pace_kick → tcp_tsq_handler → tcp_tsq_write, after whatever the
            // retransmit timer sent.
            let more = self.default_plan();
            self.out.plan.retain(|p| *p != Phase::Nothing);
            self.out.plan.extend(more);
        }
    }

    /// `tcp_retransmit_timer`: the RTO expired.
    fn retransmit_timer(&mut self) {
        if self.sb.packets_out == 0 {
            return;
        }
        self.rto_count += 1;
        self.enter_loss();
        // tcp_update_rto_stats.
        self.retransmits += 1;
        // The head goes out at once (Phase::RtoHead); assuming it does, back off. A local
        // drop of it undoes this and retries after 500 ms (see output.rs).
        self.backoff += 1;
        self.rto_j = (self.rto_j.saturating_mul(2)).min((RTO_MAX_SECS * self.hz.0 as u64) as u32);
        self.reset_xmit_timer(super::timer::TimerKind::Retrans, self.rto_j as u64, false);
        self.out.plan = VecDeque::from([Phase::RtoHead]);
    }

    /// The retransmission of the head after an RTO was dropped by the local qdisc.
    pub(super) fn rto_head_dropped(&mut self, prior_rto_j: u32, prior_backoff: u32) {
        self.rto_j = prior_rto_j;
        self.backoff = prior_backoff;
        self.reset_xmit_timer(TimerKind::Retrans, resource_probe_jiffies(self.hz.0), false);
    }

    /// The rest of `tcp_send_probe0` after its `tcp_write_wakeup`: data went out (or
    /// nothing waits), so the probe is over; else probe again — after
    /// `TCP_RESOURCE_PROBE_INTERVAL` if the local qdisc dropped the segment (senders
    /// fight for local resources conservatively), after the backed-off probe interval
    /// (`tcp_probe0_when`) if the window is closed.
    pub(super) fn probe0_sent(&mut self) {
        if self.sb.packets_out > 0 || self.unsent_bytes() < self.mss as u64 {
            self.backoff = 0;
            return;
        }
        let when = if self.out.dropped {
            resource_probe_jiffies(self.hz.0)
        } else {
            // tcp_retries2's bound on the backoff (15) is far beyond what the cap allows.
            if self.backoff < 15 {
                self.backoff += 1;
            }
            (self.probe0_base() << self.backoff.min(31)).min(RTO_MAX_SECS * self.hz.0 as u64)
        };
        self.reset_xmit_timer(TimerKind::Probe0, when, true);
    }

    /// `tcp_send_loss_probe`: the probe timeout fired.
    fn send_loss_probe(&mut self) {
        if self.tlp_high_seq.is_some() {
            // At most one probe outstanding.
            self.rearm_rto();
            return;
        }
        self.tlp_retrans = false;
        let new_data_fits =
            self.unsent_bytes() >= self.mss as u64 && self.snd_nxt + self.mss as u64 <= self.snd_una + self.snd_wnd;
        self.out.plan =
            if new_data_fits { VecDeque::from([Phase::TlpNew]) } else { VecDeque::from([Phase::TlpRetransLast]) };
        // Until the probe actually leaves (poll_transmit), the RTO is what remains of it.
        self.rearm_rto();
    }

    /// `probe_sent` in `tcp_send_loss_probe`: remember snd_nxt and restart the RTO.
    pub(super) fn loss_probe_sent(&mut self) {
        self.tlp_high_seq = Some(self.snd_nxt);
        self.tlp_count += 1;
        self.xmit_timer = None; // icsk_pending = 0: tcp_rearm_rto restarts from now
        self.rearm_rto();
    }
}
