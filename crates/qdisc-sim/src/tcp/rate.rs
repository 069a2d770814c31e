//! The delivery-rate sampler (`net/ipv4/tcp_rate.c`), which BBR runs on.
//!
//! Every (re)transmission stamps its segments with the connection's delivery state
//! (`tcp_rate_skb_sent`: `delivered`, `delivered_mstamp`, `first_tx_mstamp`,
//! app-limited); every ACK picks, among the segments it (S)ACKs, the most recently sent
//! one (`tcp_rate_skb_delivered`, in `sack.rs`) and turns it into a sample
//! (`tcp_rate_gen`): packets delivered since that segment was sent, over the longer of
//! its send phase and its ACK phase. A sample shorter than the minimum RTT is invalid
//! (ACK compression can make it look faster than the path is), and one whose window
//! contained a moment with nothing to send is marked application-limited
//! (`tcp_rate_check_app_limited`, at each application write).
//!
//! Times are µs of the sender's clock. The kernel's `delivered` is a `u32` that may
//! wrap; here it is a `u64` that does not, which changes nothing below 2³² segments.

use super::sack::SackState;
use super::sender::TcpSender;

/// `struct rate_sample`, as congestion control sees it (`cong_control`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSample {
    /// `tx.delivered` of the most recently sent (S)ACKed segment.
    pub prior_delivered: u64,
    /// Packets delivered over the interval; −1: no valid sample.
    pub delivered: i64,
    /// The interval, µs; −1: no valid sample.
    pub interval_us: i64,
    /// RTT of the last (S)ACKed segment, µs; −1: none.
    pub rtt_us: i64,
    /// Packets newly marked lost by this ACK.
    pub losses: u32,
    /// Packets newly (S)ACKed by this ACK.
    pub acked_sacked: u32,
    /// `tcp_packets_in_flight` before the ACK was processed.
    pub prior_in_flight: u32,
    /// The sample's window contained an application-limited moment.
    pub is_app_limited: bool,
    /// The sampled segment was retransmitted.
    pub is_retrans: bool,
    /// The ACK may have been delayed (`FLAG_ACK_MAYBE_DELAYED`).
    pub is_ack_delayed: bool,
}

impl TcpSender {
    /// `tcp_rate_gen`: update the connection's delivery information at the end of an
    /// ACK and return the sample for congestion control.
    pub(super) fn rate_gen(
        &mut self,
        delivered: u32,
        lost: u32,
        is_sack_reneg: bool,
        prior_in_flight: u32,
        st: &SackState,
    ) -> RateSample {
        // The app-limited bubble is over once everything sent in it is delivered.
        // after(delivered, app_limited) on the kernel's u32s: the initial ~0U clears at once.
        if self.app_limited != 0 && ((self.app_limited.wrapping_sub(self.delivered as u32)) as i32) < 0 {
            self.app_limited = 0;
        }
        if delivered > 0 {
            self.delivered_mstamp = super::us(self.now);
        }
        let mut rs = RateSample {
            prior_delivered: st.prior_delivered.unwrap_or(0),
            delivered: -1,
            interval_us: -1,
            rtt_us: st.rtt_us.map_or(-1, |r| r as i64),
            losses: lost,
            acked_sacked: delivered,
            prior_in_flight,
            is_app_limited: st.is_app_limited,
            is_retrans: st.is_retrans,
            // tcp_clean_rtx_queue sets FLAG_ACK_MAYBE_DELAYED only for an ACK of less
            // than one MSS; every segment of the model is a full MSS.
            is_ack_delayed: false,
        };
        let Some(prior_delivered) = st.prior_delivered else { return rs };
        if is_sack_reneg {
            return rs;
        }
        rs.delivered = (self.delivered - prior_delivered) as i64;
        // Send and ACK phases of the window: the longer one bounds the rate.
        let snd_us = st.interval_us;
        let ack_us = super::us(self.now) as i64 - st.prior_mstamp as i64;
        let interval = snd_us.max(ack_us);
        if interval < self.rtt_min.get() as i64 {
            rs.delivered = -1;
            rs.interval_us = -1;
            return rs;
        }
        rs.interval_us = interval;
        // Keep the last non-app-limited sample, or the fastest app-limited one
        // (`tcpi_delivery_rate`).
        if !rs.is_app_limited
            || (rs.delivered as u64) * self.rate_interval_us >= self.rate_delivered * rs.interval_us as u64
        {
            self.rate_delivered = rs.delivered as u64;
            self.rate_interval_us = rs.interval_us as u64;
            self.rate_app_limited = rs.is_app_limited;
        }
        rs
    }

    /// `tcp_rate_check_app_limited`: the application is about to write and the socket
    /// has run dry — less than a segment unsent, nothing of it in the local qdisc or
    /// driver, cwnd not full, no lost segment waiting — so the samples of the data in
    /// flight say more about the application than about the path.
    pub(super) fn rate_check_app_limited(&mut self, wmem_alloc: u64) {
        let in_flight = self.sb.in_flight();
        // sk_wmem_alloc_get < SKB_TRUESIZE(1): smaller than any skb, so none is queued.
        if self.unsent_bytes() < self.mss as u64
            && wmem_alloc == 0
            && in_flight < self.w.cwnd
            && self.sb.lost_out <= self.sb.retrans_out
        {
            self.app_limited = (self.delivered as u32).wrapping_add(in_flight).max(1);
        }
    }

    /// `tcpi_delivery_rate` in bytes/s (0 before the first sample) and
    /// `tcpi_delivery_rate_app_limited`.
    pub(super) fn delivery_rate(&self) -> (u64, bool) {
        if self.rate_interval_us == 0 {
            return (0, self.rate_app_limited);
        }
        (self.rate_delivered * self.mss as u64 * 1_000_000 / self.rate_interval_us, self.rate_app_limited)
    }
}
