//! RACK: time-based loss detection (RFC 8985), as in Linux's `tcp_recovery.c`.
//!
//! Instead of counting duplicate ACKs, RACK remembers the send time of the most
//! recently *sent* segment that has been delivered (`rack.mstamp`, with its end
//! sequence to break ties between segments of one TSO burst) and the RTT that
//! delivery measured (`rack.rtt_us`). A segment sent before it is lost once
//!
//! ```text
//!   now − xmit_time ≥ rack.rtt + reo_wnd
//! ```
//!
//! Segments not yet old enough arm the reordering timer for the remaining time
//! (+2 jiffies, `TCP_TIMEOUT_MIN`); it fires [`TcpSender::rack_reo_timeout`].
//!
//! The reordering window `reo_wnd` is min_rtt/4 × `reo_wnd_steps`, capped at SRTT.
//! While no reordering has been seen it is zero in recovery, and zero as soon as
//! `reordering` (3) segments are SACKed — i.e. RACK then behaves like the classic
//! three-duplicate-ACK rule, but per segment and with timing. D-SACKs that reveal
//! spurious retransmissions widen the window one step per round trip
//! (`tcp_rack_update_reo_wnd`); it shrinks back after 16 recoveries.
//!
//! A retransmitted segment is only trusted to advance RACK if its RTT is at least
//! min_rtt (otherwise the ACK may be for the original).

use super::sack::{L, R, RETRANS};
use super::sender::TcpSender;
use super::{us, CaState};

/// `TCP_RACK_RECOVERY_THRESH`.
const RACK_RECOVERY_THRESH: u8 = 16;

/// `tp->rack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rack {
    /// Send time (µs) of the most recently sent delivered segment.
    pub mstamp: u64,
    /// Its RTT, µs.
    pub rtt_us: u32,
    /// Its end sequence.
    pub end_seq: u64,
    /// `tp->delivered` when `reo_wnd` was last widened.
    pub last_delivered: u64,
    pub reo_wnd_steps: u8,
    pub reo_wnd_persist: u8,
    pub dsack_seen: bool,
    /// New deliveries since the last loss scan.
    pub advanced: bool,
}

impl Default for Rack {
    fn default() -> Self {
        Rack {
            mstamp: 0,
            rtt_us: 0,
            end_seq: 0,
            last_delivered: 0,
            reo_wnd_steps: 1,
            reo_wnd_persist: 0,
            dsack_seen: false,
            advanced: false,
        }
    }
}

/// `tcp_skb_sent_after`: was (t1, seq1) sent after (t2, seq2)?
fn sent_after(t1: u64, t2: u64, seq1: u64, seq2: u64) -> bool {
    t1 > t2 || (t1 == t2 && seq1 > seq2)
}

impl TcpSender {
    /// `tcp_min_rtt`.
    pub(super) fn min_rtt_us(&self) -> u32 {
        self.rtt_min.get()
    }

    /// `tcp_rack_advance`: a segment sent at `xmit_us` ending at `end` was delivered.
    pub(super) fn rack_advance(&mut self, flags: u8, end: u64, xmit_us: u64) {
        let rtt = us(self.now).saturating_sub(xmit_us) as u32;
        if rtt < self.min_rtt_us() && flags & RETRANS != 0 {
            // Possibly the original that was delivered, not the retransmission.
            return;
        }
        self.rack.advanced = true;
        self.rack.rtt_us = rtt;
        if sent_after(xmit_us, self.rack.mstamp, end, self.rack.end_seq) {
            self.rack.mstamp = xmit_us;
            self.rack.end_seq = end;
        }
    }

    /// `tcp_rack_reo_wnd`, µs.
    fn rack_reo_wnd(&self) -> u32 {
        if self.reord_seen == 0 {
            // No reordering seen: be aggressive in recovery, or once dupthresh SACKs arrived.
            if self.ca_state >= CaState::Recovery || self.sb.sacked_out >= self.reordering {
                return 0;
            }
        }
        let min_rtt = self.min_rtt_us();
        ((min_rtt >> 2).saturating_mul(self.rack.reo_wnd_steps as u32)).min(self.rtt.srtt_us >> 3)
    }

    /// `tcp_rack_skb_timeout`: µs until the entry counts as lost (≤ 0: lost now).
    pub(super) fn rack_timeout(&self, xmit_us: u64, reo_wnd: u32) -> i64 {
        self.rack.rtt_us as i64 + reo_wnd as i64 - (us(self.now) as i64 - xmit_us as i64)
    }

    /// `tcp_rack_detect_loss`: mark entries sent before the RACK segment and older than
    /// rtt + reo_wnd. Returns the longest remaining wait, µs (0 = none).
    pub(super) fn rack_detect_loss(&mut self) -> u32 {
        let reo_wnd = self.rack_reo_wnd();
        let mut reo_timeout: u32 = 0;
        let mut lost_now: Vec<usize> = Vec::new();
        for (&_order, &seq) in self.sb.tsorted.iter() {
            let idx = ((seq - self.sb.base) / self.sb.mss) as usize;
            let seg = &self.sb.segs[idx];
            // Already lost and not resent yet: RACK has nothing to decide for it.
            if seg.flags & L != 0 && seg.flags & R == 0 {
                continue;
            }
            let end = seq + self.sb.mss;
            if !sent_after(self.rack.mstamp, seg.xmit_us(), self.rack.end_seq, end) {
                break;
            }
            let remaining = self.rack_timeout(seg.xmit_us(), reo_wnd);
            if remaining <= 0 {
                lost_now.push(idx);
            } else {
                reo_timeout = reo_timeout.max(remaining as u32);
            }
        }
        for idx in lost_now {
            self.mark_seg_lost(idx);
            self.sb.untsort(idx);
        }
        reo_timeout
    }

    /// `tcp_rack_mark_lost`: run detection if something new was delivered; arm the
    /// reordering timer if some entries are not old enough yet. Returns whether it did.
    pub(super) fn rack_mark_lost(&mut self) -> bool {
        if !self.rack.advanced {
            return false;
        }
        self.rack.advanced = false;
        let timeout = self.rack_detect_loss();
        if timeout > 0 {
            // inet_csk_reset_xmit_timer with max_when = icsk_rto, no pacing delay.
            let j = self.hz.usecs_to_jiffies(timeout as u64) + TIMEOUT_MIN_JIFFIES;
            self.reset_xmit_timer(super::timer::TimerKind::ReoTimeout, j.min(self.rto_j as u64), false);
            return true;
        }
        false
    }

    /// `tcp_rack_update_reo_wnd`: widen the window after D-SACKs, once per round trip.
    pub(super) fn rack_update_reo_wnd(&mut self, prior_delivered: Option<u64>) {
        let Some(prior) = prior_delivered else { return };
        // Ignore a D-SACK if a round trip has not passed since the last change.
        if prior < self.rack.last_delivered {
            self.rack.dsack_seen = false;
        }
        if self.rack.dsack_seen {
            self.rack.reo_wnd_steps = self.rack.reo_wnd_steps.saturating_add(1);
            self.rack.dsack_seen = false;
            self.rack.last_delivered = self.delivered;
            self.rack.reo_wnd_persist = RACK_RECOVERY_THRESH;
        } else if self.rack.reo_wnd_persist == 0 {
            self.rack.reo_wnd_steps = 1;
        }
    }

    /// `tcp_rack_reo_timeout`: the reordering window expired; mark and retransmit.
    pub(super) fn rack_reo_timeout(&mut self) {
        let prior_inflight = self.sb.in_flight();
        let prior_lost = self.lost;
        self.rack_detect_loss();
        if prior_inflight != self.sb.in_flight() {
            if self.ca_state != CaState::Recovery {
                self.enter_recovery(false);
                let newly_lost = (self.lost - prior_lost) as u32;
                self.cwnd_reduction(1, newly_lost, 0);
            }
            self.out.plan_retransmit();
        }
    }
}

/// `TCP_TIMEOUT_MIN`: 2 jiffies added to the RACK reordering timer.
pub const TIMEOUT_MIN_JIFFIES: u64 = 2;
