//! DCTCP congestion control, as `net/ipv4/tcp_dctcp.c` (and `tcp_dctcp.h`) in Linux 6.12.
//!
//! # Sender
//!
//! * **α**, the estimated fraction of CE-marked packets, 0…1024 (`DCTCP_MAX_ALPHA`),
//!   starts at 1024 (`dctcp_alpha_on_init`) and is updated once per window of data
//!   (when `snd_una` reaches the `snd_nxt` recorded at the last update) as
//!   `α ← α − α/16 + (delivered_ce << 6) / delivered` (g = 1/16, `dctcp_shift_g` = 4),
//!   in the kernel's integer arithmetic (`dctcp_update_alpha`, the `in_ack_event` hook,
//!   which 6.12 calls before the ACK's cumulatively acked segments are counted as
//!   delivered).
//! * **Reaction to ECE**: the ordinary `tcp_enter_cwr` path (once per window, PRR
//!   down to ssthresh), with ssthresh = max(cwnd − cwnd·α/2048, 2) (`dctcp_ssthresh`).
//! * **Loss**: entering Recovery, or an RTO (`CA_EVENT_LOSS`), halves as Reno does and
//!   remembers the cwnd for undo (`dctcp_react_to_loss`); undo restores max(cwnd,
//!   that cwnd) (`dctcp_cwnd_undo`). Growth is Reno's (`tcp_reno_cong_avoid`).
//! * **ECN** is always negotiated: DCTCP has `TCP_CONG_NEEDS_ECN`, so a dctcp socket
//!   asks for it in its SYN and the peer (`tcp_ecn` = 2) accepts; the fallback to
//!   "dctcp-reno" without ECN therefore never happens here.
//!
//! # Receiver (the CE state machine, `dctcp_ece_ack_update`)
//!
//! A dctcp receiver echoes ECE exactly on the ACKs of CE-marked data rather than until
//! CWR: its one-bit state is "last data segment was CE". When a segment flips it, a
//! delayed ACK that is pending goes out first (acknowledging up to the previous
//! `rcv_nxt`, with the previous ECE), and the ACK for this segment is sent at once.
//! That part lives in `receiver.rs`.

/// `DCTCP_MAX_ALPHA`.
pub const MAX_ALPHA: u32 = 1024;
/// `dctcp_shift_g` (module parameter, default 4: g = 1/16).
pub const SHIFT_G: u32 = 4;
/// `dctcp_alpha_on_init` (module parameter, default `DCTCP_MAX_ALPHA`).
pub const ALPHA_ON_INIT: u32 = MAX_ALPHA;

/// `struct dctcp` (the sender's part; `prior_rcv_nxt` and `ce_state` are the
/// receiver's, in `receiver.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dctcp {
    pub old_delivered: u64,
    pub old_delivered_ce: u64,
    pub alpha: u32,
    pub next_seq: u64,
    pub loss_cwnd: u32,
}

impl Dctcp {
    /// `dctcp_init` for a connection with ECN (always the case here).
    pub fn new(snd_nxt: u64, delivered: u64, delivered_ce: u64) -> Self {
        let mut d = Dctcp { alpha: ALPHA_ON_INIT.min(MAX_ALPHA), ..Dctcp::default() };
        d.reset(snd_nxt, delivered, delivered_ce);
        d
    }

    /// `dctcp_reset`: a new observation window starts at `snd_nxt`.
    fn reset(&mut self, snd_nxt: u64, delivered: u64, delivered_ce: u64) {
        self.next_seq = snd_nxt;
        self.old_delivered = delivered;
        self.old_delivered_ce = delivered_ce;
    }

    /// `dctcp_ssthresh`: cwnd × (1 − α/2), at least 2.
    pub fn ssthresh(&mut self, cwnd: u32) -> u32 {
        self.loss_cwnd = cwnd;
        cwnd.saturating_sub(((cwnd as u64 * self.alpha as u64) >> 11) as u32).max(2)
    }

    /// `dctcp_update_alpha` (`in_ack_event`): once per window, fold the window's CE
    /// fraction into α.
    pub fn update_alpha(&mut self, snd_una: u64, snd_nxt: u64, delivered: u64, delivered_ce: u64) {
        if snd_una < self.next_seq {
            return;
        }
        // The kernel's counters are u32 that wrap; the model's do not.
        let mut ce = (delivered_ce - self.old_delivered_ce) as u32;
        let mut alpha = self.alpha;
        // min_not_zero(alpha, alpha >> g): alpha itself when alpha >> g is 0.
        let dec = if alpha >> SHIFT_G == 0 { alpha } else { alpha >> SHIFT_G };
        alpha -= dec;
        if ce != 0 {
            let d = (delivered - self.old_delivered) as u32;
            ce <<= 10 - SHIFT_G;
            ce /= d.max(1);
            alpha = (alpha + ce).min(MAX_ALPHA);
        }
        self.alpha = alpha;
        self.reset(snd_nxt, delivered, delivered_ce);
    }

    /// `dctcp_react_to_loss` (entering Recovery, or `CA_EVENT_LOSS` at an RTO): halve.
    pub fn react_to_loss(&mut self, cwnd: u32) -> u32 {
        self.loss_cwnd = cwnd;
        (cwnd >> 1).max(2)
    }

    /// `dctcp_cwnd_undo`.
    pub fn undo_cwnd(&self, cwnd: u32) -> u32 {
        cwnd.max(self.loss_cwnd)
    }
}
