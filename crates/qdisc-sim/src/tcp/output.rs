//! The output path: which skb leaves next (`tcp_write_xmit`, `tcp_xmit_retransmit_queue`,
//! `tcp_retransmit_skb`, `__tcp_transmit_skb` in tcp_output.c).
//!
//! # One skb per call
//!
//! The kernel sends in loops; here each loop iteration is one
//! [`TcpSender::poll_transmit`]. An *invocation* (the loops the kernel would run for
//! one event) is a short plan of phases set by the event: after an ACK, lost
//! segments are retransmitted first and new data follows (`tcp_xmit_recovery`,
//! `tcp_data_snd_check`); after F-RTO's step 2b new data goes first; an RTO sends
//! only the head; a loss probe one segment; the pacing timer and TSQ completions
//! run `tcp_tsq_write`. Each phase ends where the kernel's loop would `break`, and
//! its epilogue runs then (cwnd validation, PRR accounting, TLP scheduling).
//!
//! # New data (`tcp_write_xmit`)
//!
//! For each skb: internal pacing (`SK_PACING_NEEDED`: wait for the EDT), cwnd quota
//! `min(cwnd − in_flight, cwnd/2)` (so at least two TSO skbs are in flight),
//! capped by the TSO size; the receive window; TSO deferral (wait up to an ACK
//! for a bigger skb when less than a third of the window is free and an ACK is
//! due within half an RTT); TCP Small Queues; transmit.
//!
//! * **TSO autosizing** (`tcp_tso_autosize`): `pacing_rate >> 10` bytes (≈ 1 ms), plus
//!   a bonus of `gso_max_size >> (min_rtt >> 9 µs)` for short paths, at most
//!   `gso_max_size`, at least `tcp_min_tso_segs` (2) segments.
//! * **TSQ** (`tcp_small_queue_check`): stop while `sk_wmem_alloc` — this socket's
//!   skbs in the qdisc/driver plus the socket's own reference of 1 — exceeds
//!   max(2 × truesize, pacing_rate >> 10) (capped by `tcp_limit_output_bytes` when the
//!   socket is not paced, doubled for retransmissions), unless the rtx queue holds at
//!   most one skb. Resume on tx completion. A TSO skb's truesize is its payload plus
//!   960 bytes of head ([`super::SKB_HEAD_TRUESIZE`]), so two full skbs already
//!   exceed the budget of 2 × truesize.
//! * **EDT** (`tcp_update_skb_after_send`): when the pacing status is not NONE,
//!   each skb departs at `tcp_wstamp_ns` (never before now) and advances it by
//!   len / pacing_rate, minus up to half of it as credit for time the socket was
//!   idle; the first 10 segments are not paced.
//!
//! The write queue is modelled as sendmsg builds it: full `size_goal` skbs
//! (45 × 1448 with TSO), of which `tcp_grow_skb` pulls bytes into a short head.
//!
//! # Local congestion
//!
//! The skb just handed out is assumed accepted; [`TcpSender::on_local_xmit`] with
//! `Dropped` undoes what a successful `tcp_transmit_skb` changed (but not the
//! counters the kernel bumps before calling the qdisc: bytes/segments sent and
//! retransmission counts) and ends the current loop, like `err > 0` does.

use std::collections::VecDeque;

use qdisc::Instant;

use super::sack::{Seg, L, R, S};
use super::sender::TcpSender;
use super::timer::{TimerKind, XmitTimer};
use super::{ts_ms, LocalXmit, PacingStatus, Segment};

/// One loop of an invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// `tcp_xmit_retransmit_queue`.
    Rtx,
    /// `tcp_write_xmit` (`tcp_data_snd_check`, `tcp_tsq_write`).
    New,
    /// F-RTO step 2b: `__tcp_push_pending_frames` inside `tcp_xmit_recovery`.
    NewFrto,
    /// The retransmissions `tcp_xmit_recovery` does after F-RTO's new data, if any.
    RtxAfterFrto,
    /// `tcp_retransmit_timer`: the head, whatever cwnd, pacing and TSQ say.
    RtoHead,
    /// `tcp_send_loss_probe` with new data: `tcp_write_xmit(push_one = 2)`.
    TlpNew,
    /// `tcp_send_loss_probe` without: `__tcp_retransmit_skb` of the last segment.
    TlpRetransLast,
    /// `tcp_send_probe0` → `tcp_write_wakeup`: the probe timer fired with nothing in
    /// flight (a local drop, or a closed window): one segment of at most an MSS from
    /// the send head, whatever cwnd, pacing and TSQ say; a big head skb is cut to it.
    WriteWakeup,
    /// The event transmits nothing (e.g. a RACK timer that found no new loss).
    Nothing,
}

/// What a transmission changed, to undo it if the qdisc drops the skb.
#[derive(Clone, Debug)]
pub(super) struct PendingTx {
    kind: TxKind,
    seq: u64,
    n: u32,
    wstamp_after_max: u64,
    prior_timer: Option<XmitTimer>,
    prior_head_end: u64,
    prior_first_tx: u64,
    prior_delivered_us: u64,
    /// (flags, skb, order) of retransmitted entries before the transmission.
    old: Vec<(u8, u64, Option<u64>)>,
    prior_prr_out: u32,
    prior_rearm: bool,
    prior_rto_j: u32,
    prior_backoff: u32,
    /// [`Output::charged`] before the skb was handed out.
    prior_charged: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxKind {
    New,
    Rtx,
    RtoHead,
    TlpLast,
}

/// State of the output machinery.
#[derive(Clone, Debug, Default)]
pub(super) struct Output {
    /// Remaining phases of the current invocation.
    pub plan: VecDeque<Phase>,
    /// The front phase has run at least one step.
    pub started: bool,
    /// `sent_pkts` of the current loop.
    pub sent_pkts: u32,
    /// `is_cwnd_limited` found by TSO deferral in the current loop.
    pub cwnd_limited: bool,
    /// `rearm_timer` of `tcp_xmit_retransmit_queue`.
    pub rearm_timer: bool,
    /// `tcp_tso_segs` at the start of the current loop.
    pub max_segs: u32,
    /// Lower bound of the first entry that may need a retransmission.
    pub rtx_from: u64,
    /// Undo record of the skb just handed out.
    pub pending: Option<PendingTx>,
    /// A local drop ended the current loop.
    pub abort: bool,
    /// The local qdisc dropped an skb of the current phase (`tcp_transmit_skb` > 0).
    pub dropped: bool,
    /// This invocation is the TSQ handler run by a tx completion (`tcp_wfree` found
    /// TSQ_THROTTLED and queued the socket): the completed skb's last byte of
    /// `sk_wmem_alloc` is still held until the handler returns (`tcp_tsq_workfn`'s
    /// `sk_free`).
    pub wfree_ref: bool,
    /// Truesize of every skb handed out (less the ones the qdisc refused at once).
    pub charged: u64,
    /// The skbs still in the host: (skb id, [`Output::charged`] once it was handed
    /// out), oldest first. See [`TcpSender::still_in_host_queue`].
    pub in_host: VecDeque<(u64, u64)>,
}

impl Output {
    /// `tcp_rack_reo_timeout` → `tcp_xmit_retransmit_queue`.
    pub fn plan_retransmit(&mut self) {
        self.plan = VecDeque::from([Phase::Rtx]);
    }
}

impl TcpSender {
    /// The next skb to hand to the IP layer now, if cwnd, rwnd, TSQ and pacing allow.
    ///
    /// `wmem_alloc`: bytes ([`Segment::truesize`]) of this socket's skbs still in the
    /// local qdisc/driver. Call until `None` after each event (see the module docs);
    /// a call without a preceding event runs `tcp_tsq_write` (TSQ completion).
    pub fn poll_transmit(&mut self, now: Instant, wmem_alloc: u64) -> Option<Segment> {
        if now > self.now {
            self.now = now;
        }
        self.commit_pending();
        self.prune_host_queue(wmem_alloc);
        if self.out.plan.is_empty() {
            // tcp_wfree → tcp_tsq_handler: TSQ_THROTTLED is cleared, the queue retried.
            self.out.wfree_ref = self.tsq_throttled;
            self.tsq_throttled = false;
            self.out.plan = self.default_plan();
        }
        while let Some(&phase) = self.out.plan.front() {
            if !self.out.abort {
                if let Some(seg) = self.step(phase, wmem_alloc) {
                    return Some(seg);
                }
            }
            self.out.abort = false;
            self.end_phase(phase);
            self.out.plan.pop_front();
        }
        self.out.wfree_ref = false;
        // tcp_data_snd_check: the ACK's push done, tcp_check_space.
        if std::mem::take(&mut self.ack_space_check) {
            self.check_space();
        }
        None
    }

    /// What the local qdisc said about the skb just returned by `poll_transmit`.
    /// Mirrors `tcp_transmit_skb`'s `err > 0 → tcp_enter_cwr`, then `net_xmit_eval`:
    /// `Congested` counts as sent, `Dropped` puts the skb back at the head of the
    /// write queue (no retransmission is counted for new data).
    pub fn on_local_xmit(&mut self, seg: &Segment, verdict: LocalXmit, now: Instant) {
        if now > self.now {
            self.now = now;
        }
        let Some(p) = self.out.pending.take() else { return };
        if p.seq != seg.seq {
            return;
        }
        if verdict != LocalXmit::Dropped && p.kind == TxKind::New {
            // NET_XMIT_CN counts as sent (net_xmit_eval): tcp_event_new_data_sent.
            self.check_space();
        }
        match verdict {
            LocalXmit::Ok => {}
            LocalXmit::Congested => {
                let entering = self.ca_state < super::CaState::Cwr;
                self.enter_cwr();
                if entering && p.kind == TxKind::New {
                    // tcp_enter_cwr ran before this skb advanced snd_nxt.
                    self.high_seq = p.seq;
                }
            }
            LocalXmit::Dropped => {
                self.undo_tx(p);
                self.enter_cwr();
                self.out.abort = true;
                self.out.dropped = true;
            }
        }
    }

    /// The verdict window of the last skb closed: it was accepted (new data:
    /// `tcp_event_new_data_sent` ends with `tcp_check_space`).
    pub(super) fn commit_pending(&mut self) {
        if self.out.pending.take().is_some_and(|p| p.kind == TxKind::New) {
            self.check_space();
        }
    }

    /// End an invocation the caller did not poll to the end.
    pub(super) fn finish_invocation(&mut self) {
        if let Some(&phase) = self.out.plan.front() {
            if self.out.started {
                self.end_phase(phase);
            }
        }
        self.out.plan.clear();
        self.out.abort = false;
        self.out.wfree_ref = false;
    }

    /// `tcp_tsq_write`: retransmit if losses wait and cwnd allows, then new data.
    pub(super) fn default_plan(&self) -> VecDeque<Phase> {
        if self.sb.lost_out > self.sb.retrans_out && self.w.cwnd > self.sb.in_flight() {
            VecDeque::from([Phase::Rtx, Phase::New])
        } else {
            VecDeque::from([Phase::New])
        }
    }

    fn step(&mut self, phase: Phase, wmem: u64) -> Option<Segment> {
        match phase {
            Phase::New | Phase::NewFrto => self.write_xmit_step(wmem, 0),
            Phase::TlpNew => {
                if self.out.sent_pkts > 0 {
                    None
                } else {
                    self.write_xmit_step(wmem, 2)
                }
            }
            Phase::Rtx | Phase::RtxAfterFrto => self.retransmit_step(wmem),
            Phase::RtoHead => {
                if self.out.started || self.sb.is_empty() {
                    return None;
                }
                self.out.started = true;
                // -EBUSY: tcp_retransmit_timer backs off as if it had been sent.
                if self.still_in_host_queue(0) {
                    return None;
                }
                Some(self.transmit_rtx(0, 1, TxKind::RtoHead))
            }
            Phase::TlpRetransLast => {
                if self.out.started || self.sb.is_empty() {
                    return None;
                }
                self.out.started = true;
                let last = self.sb.len() - 1;
                if self.still_in_host_queue(last) {
                    return None;
                }
                Some(self.transmit_rtx(last, 1, TxKind::TlpLast))
            }
            Phase::WriteWakeup => {
                if self.out.started {
                    return None;
                }
                self.out.started = true;
                let mss = self.mss as u64;
                let wnd_end = self.snd_una + self.snd_wnd;
                if self.unsent_bytes() < mss || self.snd_nxt >= wnd_end {
                    return None;
                }
                // The head skb is cut to what the window allows, at most an MSS (tcp_fragment).
                Some(self.transmit_new(mss.min(wnd_end - self.snd_nxt) as u32))
            }
            Phase::Nothing => None,
        }
    }

    /// The epilogue of a loop.
    fn end_phase(&mut self, phase: Phase) {
        match phase {
            Phase::New | Phase::NewFrto | Phase::TlpNew => {
                let probe = phase == Phase::TlpNew;
                let cwnd_limited = self.out.cwnd_limited || self.sb.in_flight() >= self.w.cwnd;
                if self.out.sent_pkts > 0 || cwnd_limited {
                    self.cwnd_validate(cwnd_limited);
                }
                if self.out.sent_pkts > 0 {
                    if self.in_cwnd_reduction() {
                        self.prr_out += self.out.sent_pkts;
                    }
                    if probe {
                        self.loss_probe_sent();
                    } else {
                        self.schedule_loss_probe(false);
                    }
                } else if self.sb.packets_out == 0 {
                    self.check_probe_timer();
                }
                if phase == Phase::NewFrto {
                    // tcp_xmit_recovery: new data went out beyond high_seq → done.
                    if self.snd_nxt > self.high_seq {
                        if self.out.plan.get(1) == Some(&Phase::RtxAfterFrto) {
                            self.out.plan.remove(1);
                        }
                    } else {
                        self.frto = false;
                    }
                }
            }
            Phase::Rtx | Phase::RtxAfterFrto => {
                if self.out.rearm_timer {
                    let rto = self.rto_j as u64;
                    self.reset_xmit_timer(TimerKind::Retrans, rto, true);
                }
            }
            Phase::WriteWakeup => self.probe0_sent(),
            Phase::RtoHead | Phase::Nothing => {}
            Phase::TlpRetransLast => {
                if self.out.sent_pkts > 0 {
                    self.tlp_retrans = true;
                    self.loss_probe_sent();
                }
            }
        }
        self.out.started = false;
        self.out.sent_pkts = 0;
        self.out.cwnd_limited = false;
        self.out.rearm_timer = false;
        self.out.dropped = false;
    }

    /// `tcp_cwnd_validate`. The RFC 2861 decay branch never applies: a bulk sender blocks
    /// on a full send buffer (`SOCK_NOSPACE`).
    fn cwnd_validate(&mut self, is_cwnd_limited: bool) {
        if self.snd_una >= self.cwnd_usage_seq
            || is_cwnd_limited
            || (!self.is_cwnd_limited && self.sb.packets_out > self.max_packets_out)
        {
            self.is_cwnd_limited = is_cwnd_limited;
            self.max_packets_out = self.sb.packets_out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
    }

    // ----- sizing ---------------------------------------------------------------------

    /// `tcp_xmit_size_goal`: the skb size sendmsg builds.
    pub(super) fn size_goal(&self) -> u64 {
        let mss = self.mss as u64;
        if !self.cfg.tso {
            return mss;
        }
        let mut goal = self.cfg.gso_max_size as u64;
        // tcp_bound_to_half_wnd
        let cutoff = if self.max_window > 536 { self.max_window >> 1 } else { self.max_window };
        if cutoff > 0 && goal > cutoff {
            goal = cutoff.max(68 - 32);
        }
        ((goal / mss).min(65535) * mss).max(mss)
    }

    /// `tcp_tso_autosize`: segments per TSO skb for the current pacing rate and min RTT.
    pub(super) fn tso_autosize(&self, min_tso_segs: u32) -> u32 {
        let gso = self.cfg.gso_max_size as u64;
        let mut bytes = self.pacing_rate >> self.cfg.pacing_shift;
        let r = self.min_rtt_us() >> self.cfg.tso_rtt_log;
        if r < 32 {
            bytes = bytes.saturating_add(gso >> r);
        }
        bytes = bytes.min(gso);
        ((bytes / self.mss as u64) as u32).max(min_tso_segs)
    }

    /// `tcp_tso_segs`.
    pub(super) fn tso_segs(&self) -> u32 {
        let gso_max_segs = if self.cfg.tso { 65535 } else { 1 };
        self.tso_autosize(self.cc_min_tso_segs()).min(gso_max_segs)
    }

    /// `tcp_cwnd_test`: segments cwnd allows now, at most half the window.
    fn cwnd_test(&self) -> u32 {
        let in_flight = self.sb.in_flight();
        let cwnd = self.w.cwnd;
        if in_flight >= cwnd {
            return 0;
        }
        (cwnd >> 1).max(1).min(cwnd - in_flight)
    }

    /// `tcp_snd_wnd_test`: does the first segment fit in the receive window?
    fn snd_wnd_test(&self) -> bool {
        self.snd_nxt + self.mss as u64 <= self.snd_una + self.snd_wnd
    }

    /// `tcp_pacing_check`: internal pacing holds the skb until its EDT.
    fn pacing_check(&mut self) -> bool {
        if self.pacing_status != PacingStatus::Needed {
            return false;
        }
        if self.wstamp_ns <= self.now.as_nanos() {
            return false;
        }
        if self.pacing_timer.is_none() {
            self.pacing_timer = Some(Instant::from_nanos(self.wstamp_ns));
        }
        true
    }

    /// `tcp_small_queue_check`. `factor` 1 doubles the budget (retransmissions).
    ///
    /// `wmem` is what the caller passes to `poll_transmit`: the bytes
    /// (`sk_wmem_alloc_get`) of this socket's skbs still in the qdisc/driver. The kernel
    /// compares the raw `refcount_read(&sk->sk_wmem_alloc)`, which is one more: `sk_alloc`
    /// sets it to 1 (the socket's own reference), and inside the TSQ handler `tcp_wfree`
    /// still holds one more byte of the completed skb (dropped by `sk_free` after
    /// `tcp_tsq_handler`). So two equal skbs in the queue already exceed
    /// 2 × truesize: a socket keeps at most two full TSO skbs below the stack, not three.
    pub(super) fn small_queue_check(&mut self, wmem: u64, truesize: u32, factor: u32) -> bool {
        let mut limit = (2 * truesize as u64).max(self.pacing_rate >> self.cfg.pacing_shift);
        // tcp_limit_output_bytes caps unpaced sockets only (c73e5807e4f6, 2018).
        if self.pacing_status == PacingStatus::None {
            limit = limit.min(self.cfg.tsq_limit);
        }
        limit <<= factor;
        let refcount = wmem + 1 + u64::from(self.out.wfree_ref);
        if refcount > limit {
            // A lone skb in flight: sending cannot hurt and a late tx completion
            // would stall the flow.
            if self.sb.empty_or_single_skb() {
                return false;
            }
            self.tsq_throttled = true;
            return true;
        }
        false
    }

    /// `tcp_tso_should_defer` (6.12, or 6.18 with [`TcpConfig::defer_until_expected_ack`]):
    /// wait for more cwnd instead of a small TSO skb.
    fn tso_should_defer(&mut self, skb_len: u64, max_segs: u32) -> bool {
        if self.ca_state >= super::CaState::Recovery {
            return false;
        }
        let now = self.now.as_nanos();
        // Only right after a write (1 ms): avoid bursts after idle.
        if now as i64 - self.wstamp_ns as i64 - 1_000_000 > 0 {
            return false;
        }
        let mss = self.mss as u64;
        let in_flight = self.sb.in_flight();
        let send_win = (self.snd_una + self.snd_wnd).saturating_sub(self.snd_nxt);
        let cong_win = (self.w.cwnd - in_flight) as u64 * mss;
        let limit = send_win.min(cong_win);
        if limit >= max_segs as u64 * mss {
            return false;
        }
        // The head skb is never the write queue's tail: it gets no more data.
        if limit >= skb_len {
            return false;
        }
        // tcp_tso_win_divisor = 3: a third of the window is enough to send.
        let chunk = self.snd_wnd.min(self.w.cwnd as u64 * mss) / 3;
        if limit >= chunk {
            return false;
        }
        let Some(head) = self.sb.segs.front() else { return false };
        if self.cfg.defer_until_expected_ack {
            // 6.18: the next ACK (the head's send time + srtt) is more than min(1 ms,
            // srtt/2) away: it comes too late to wait for, send now.
            let srtt_ns = (self.rtt.srtt_us as u64 * 1000) >> 3;
            let how_far = (head.xmit_ns + srtt_ns) as i64 - now as i64;
            if how_far - (srtt_ns >> 1).min(1_000_000) as i64 > 0 {
                return false;
            }
        } else {
            // 6.12: the head left less than srtt/2 ago: the next ACK is far off, send now.
            let delta = now as i64 - head.xmit_ns as i64;
            if delta - 1000 * ((self.rtt.srtt_us >> 4) as i64) < 0 {
                return false;
            }
        }
        if cong_win < send_win && cong_win <= skb_len {
            self.out.cwnd_limited = true;
        }
        true
    }

    /// `tcp_mss_split_point`: how much of the head skb to send now.
    fn mss_split_point(&self, skb_len: u64, quota: u32) -> u64 {
        let mss = self.mss as u64;
        let window = (self.snd_una + self.snd_wnd).saturating_sub(self.snd_nxt);
        let max_len = mss * quota as u64;
        if max_len <= window {
            return max_len;
        }
        // Window-limited: whole segments only (Nagle keeps the sub-MSS tail).
        (skb_len.min(window) / mss) * mss
    }

    // ----- loops ----------------------------------------------------------------------

    /// One iteration of `tcp_write_xmit`. `push_one` 2 is the loss probe.
    fn write_xmit_step(&mut self, wmem: u64, push_one: u8) -> Option<Segment> {
        if !self.out.started {
            self.out.started = true;
            self.out.max_segs = self.tso_segs();
        }
        let mss = self.mss as u64;
        // tcp_send_head: nothing (no whole segment) queued by the application.
        if self.unsent_bytes() < mss {
            return None;
        }
        if self.pacing_check() {
            return None;
        }
        let mut quota = self.cwnd_test();
        if quota == 0 {
            if push_one == 2 {
                quota = 1; // force out the loss probe
            } else {
                return None;
            }
        }
        let quota = quota.min(self.out.max_segs);
        // tcp_grow_skb: pull bytes from the next skb into a short head.
        let want = quota as u64 * mss;
        let head_len = self.head_end - self.snd_nxt;
        if head_len < want {
            let sg = self.size_goal();
            let next_end = (self.head_end / sg + 1) * sg;
            self.head_end += (want - head_len).min(next_end - self.head_end);
        }
        let skb_len = self.head_end - self.snd_nxt;
        let tso_segs = skb_len.div_ceil(mss);
        if !self.snd_wnd_test() {
            return None;
        }
        if tso_segs > 1 && push_one == 0 && self.tso_should_defer(skb_len, self.out.max_segs) {
            return None;
        }
        let limit = if tso_segs > 1 { self.mss_split_point(skb_len, quota) } else { mss };
        let len = skb_len.min(limit).min(self.unsent_bytes() / mss * mss);
        if len == 0 {
            return None;
        }
        // After tso_fragment: the skb that would leave, `len` bytes.
        let truesize = super::truesize_of_payload(len as u32);
        if self.small_queue_check(wmem, truesize, 0) {
            return None;
        }
        Some(self.transmit_new(len as u32))
    }

    /// One iteration of `tcp_xmit_retransmit_queue`.
    fn retransmit_step(&mut self, wmem: u64) -> Option<Segment> {
        if self.sb.packets_out == 0 {
            return None;
        }
        if !self.out.started {
            self.out.started = true;
            self.out.max_segs = self.tso_segs();
        }
        if self.pacing_check() {
            return None;
        }
        let in_flight = self.sb.in_flight() as i64;
        let room = self.w.cwnd as i64 - in_flight;
        if room <= 0 {
            return None;
        }
        let segs = (room as u32).min(self.out.max_segs);
        if self.sb.retrans_out >= self.sb.lost_out {
            return None;
        }
        // The first entry marked lost and neither SACKed nor already retransmitted.
        let mss = self.sb.mss;
        let mut idx = ((self.out.rtx_from.max(self.sb.base) - self.sb.base) / mss) as usize;
        while idx < self.sb.len() {
            let f = self.sb.segs[idx].flags;
            if f & L != 0 && f & (S | R) == 0 {
                break;
            }
            idx += 1;
        }
        self.out.rtx_from = self.sb.seq_of(idx);
        if idx >= self.sb.len() {
            return None;
        }
        // Retransmit up to `segs` contiguous lost entries of the same skb (the kernel
        // retransmits one rtx-queue skb, fragmented to `segs` segments).
        let skb = self.sb.segs[idx].skb;
        let mut n = 1;
        while n < segs as usize && idx + n < self.sb.len() {
            let s = &self.sb.segs[idx + n];
            if s.skb != skb || s.flags & L == 0 || s.flags & (S | R) != 0 {
                break;
            }
            n += 1;
        }
        let truesize = super::truesize_of_payload(n as u32 * self.mss);
        if self.small_queue_check(wmem, truesize, 1) || self.still_in_host_queue(idx) {
            return None;
        }
        Some(self.transmit_rtx(idx, n as u32, TxKind::Rtx))
    }

    // ----- transmissions --------------------------------------------------------------

    /// `tcp_update_skb_after_send`: advance the EDT clock by the skb's pacing time.
    fn update_skb_after_send(&mut self, len: u32, prior_wstamp: u64) {
        if self.pacing_status == PacingStatus::None {
            return;
        }
        let rate = self.pacing_rate;
        // The first 10 segments go unpaced (the historical sch_fq behaviour).
        if rate != u64::MAX && rate != 0 && self.data_segs_out >= 10 {
            let mut len_ns = (len as u128 * 1_000_000_000 / rate as u128) as u64;
            let credit = self.wstamp_ns - prior_wstamp;
            len_ns -= (len_ns / 2).min(credit);
            self.wstamp_ns += len_ns;
        }
    }

    /// `tcp_event_data_sent`: the part of `__tcp_transmit_skb` before the qdisc.
    fn event_data_sent(&mut self) {
        if self.sb.in_flight() == 0 {
            self.cc_tx_start();
        }
        self.lsndtime = self.hz.jiffies32(self.now);
    }

    /// The skb's `tstamp` field: the EDT when the socket paces (or fq does), else none.
    fn edt(&self, tstamp: u64) -> Instant {
        if self.pacing_status == PacingStatus::None {
            Instant::ZERO
        } else {
            Instant::from_nanos(tstamp)
        }
    }

    /// Send `len` new bytes at `snd_nxt` (`tcp_transmit_skb` + `tcp_event_new_data_sent`).
    fn transmit_new(&mut self, len: u32) -> Segment {
        let mss = self.mss;
        let seq = self.snd_nxt;
        let n = len.div_ceil(mss);
        let prior_wstamp = self.wstamp_ns;
        self.wstamp_ns = self.wstamp_ns.max(self.now.as_nanos());
        let tstamp = self.wstamp_ns;

        // Done before the qdisc sees the skb, whatever it answers.
        self.event_data_sent();
        self.data_segs_out += n as u64;
        self.bytes_sent += len as u64;
        let cwr = self.ecn_ok && self.queue_cwr;
        if cwr {
            self.queue_cwr = false;
        }

        let undo = PendingTx {
            kind: TxKind::New,
            seq,
            n,
            wstamp_after_max: tstamp,
            prior_timer: self.xmit_timer,
            prior_head_end: self.head_end,
            prior_first_tx: self.first_tx_mstamp,
            prior_delivered_us: self.delivered_mstamp,
            old: Vec::new(),
            prior_prr_out: self.prr_out,
            prior_rearm: self.out.rearm_timer,
            prior_rto_j: self.rto_j,
            prior_backoff: self.backoff,
            prior_charged: self.out.charged,
        };

        // Success path.
        self.update_skb_after_send(len, prior_wstamp);
        let prior_packets = self.sb.packets_out;
        // tcp_rate_skb_sent: nothing in flight, so the sample starts now.
        if prior_packets == 0 {
            self.first_tx_mstamp = tstamp / 1000;
            self.delivered_mstamp = tstamp / 1000;
        }
        let skb = self.next_skb_id;
        self.next_skb_id += 1;
        self.charge(skb, len);
        for _ in 0..n {
            self.sb.push_seg(Seg {
                flags: 0,
                skb,
                xmit_ns: tstamp,
                order: None,
                tx_delivered: Some(self.delivered),
                tx_first_tx_us: self.first_tx_mstamp,
                tx_delivered_us: self.delivered_mstamp,
                tx_app_limited: self.app_limited != 0,
            });
            let idx = self.sb.len() - 1;
            let o = self.next_order;
            self.next_order += 1;
            self.sb.tsort(idx, o);
        }
        self.snd_nxt += len as u64;
        self.sb.packets_out += n;
        if prior_packets == 0 || self.xmit_timer.is_some_and(|t| t.kind == TimerKind::LossProbe) {
            self.rearm_rto();
        }
        self.out.sent_pkts += n;
        if self.snd_nxt >= self.head_end {
            let sg = self.size_goal();
            self.head_end = (self.head_end / sg + 1) * sg;
        }
        self.out.pending = Some(undo);
        Segment {
            seq,
            len,
            segs: n as u16,
            ect: self.ecn_ok,
            cwr,
            retransmit: false,
            tstamp: self.edt(tstamp),
            sent_at: Instant::from_nanos(tstamp),
            tsecr: self.ts_recent,
        }
    }

    /// Retransmit `n` entries from `idx` (`tcp_retransmit_skb` / `__tcp_retransmit_skb`).
    fn transmit_rtx(&mut self, idx: usize, n: u32, kind: TxKind) -> Segment {
        let seq = self.sb.seq_of(idx);
        let len = n * self.mss;
        let prior_wstamp = self.wstamp_ns;
        self.wstamp_ns = self.wstamp_ns.max(self.now.as_nanos());
        let tstamp = self.wstamp_ns;
        let old: Vec<(u8, u64, Option<u64>)> = (idx..idx + n as usize)
            .map(|i| {
                let s = &self.sb.segs[i];
                (s.flags, s.skb, s.order)
            })
            .collect();
        let undo = PendingTx {
            kind,
            seq,
            n,
            wstamp_after_max: tstamp,
            prior_timer: self.xmit_timer,
            prior_head_end: self.head_end,
            prior_first_tx: self.first_tx_mstamp,
            prior_delivered_us: self.delivered_mstamp,
            old,
            prior_prr_out: self.prr_out,
            prior_rearm: self.out.rearm_timer,
            prior_rto_j: self.rto_j,
            prior_backoff: self.backoff,
            prior_charged: self.out.charged,
        };

        // Done whatever the qdisc answers.
        self.event_data_sent();
        for i in idx..idx + n as usize {
            let s = &mut self.sb.segs[i];
            s.flags |= super::sack::E;
            s.xmit_ns = tstamp;
            // tcp_rate_skb_sent (packets_out > 0 here).
            s.tx_delivered = Some(self.delivered);
            s.tx_first_tx_us = self.first_tx_mstamp;
            s.tx_delivered_us = self.delivered_mstamp;
            s.tx_app_limited = self.app_limited != 0;
        }
        self.total_retrans += n as u64;
        self.bytes_retrans += len as u64;
        self.data_segs_out += n as u64;
        self.bytes_sent += len as u64;
        if kind != TxKind::TlpLast {
            if self.retrans_stamp == 0 {
                self.retrans_stamp = ts_ms(Instant::from_nanos(tstamp));
            }
            if self.undo_retrans < 0 {
                self.undo_retrans = 0;
            }
            self.undo_retrans += n as i32;
        }

        // Success path.
        let skb = self.next_skb_id;
        self.next_skb_id += 1;
        self.charge(skb, len);
        for i in idx..idx + n as usize {
            self.sb.set_skb(i, skb);
            if kind != TxKind::TlpLast {
                self.sb.segs[i].flags |= R;
            }
        }
        if kind != TxKind::TlpLast {
            self.sb.retrans_out += n;
        }
        self.update_skb_after_send(len, prior_wstamp);
        for i in idx..idx + n as usize {
            let o = self.next_order;
            self.next_order += 1;
            self.sb.tsort(i, o);
        }
        if kind == TxKind::Rtx {
            if self.in_cwnd_reduction() {
                self.prr_out += n;
            }
            if idx == 0 && self.xmit_timer.map(|t| t.kind) != Some(TimerKind::ReoTimeout) {
                self.out.rearm_timer = true;
            }
        }
        self.out.sent_pkts += n;
        self.out.pending = Some(undo);
        // Retransmissions are never ECT and never carry CWR (tcp_ecn_send).
        Segment {
            seq,
            len,
            segs: n as u16,
            ect: false,
            cwr: false,
            retransmit: true,
            tstamp: self.edt(tstamp),
            sent_at: Instant::from_nanos(tstamp),
            tsecr: self.ts_recent,
        }
    }

    /// The skb `skb` of `len` payload bytes was handed out: `sk_wmem_alloc` holds its
    /// truesize until it leaves the host.
    fn charge(&mut self, skb: u64, len: u32) {
        self.out.charged += u64::from(super::truesize_of_payload(len));
        self.out.in_host.push_back((skb, self.out.charged));
    }

    /// Forget the skbs that left the host. The socket sees only `sk_wmem_alloc`, the
    /// truesize still charged: taking its skbs to leave in the order they were sent,
    /// everything charged up to `charged − wmem_alloc` is gone.
    fn prune_host_queue(&mut self, wmem_alloc: u64) {
        let released = self.out.charged.saturating_sub(wmem_alloc);
        while self.out.in_host.front().is_some_and(|&(_, end)| end <= released) {
            self.out.in_host.pop_front();
        }
    }

    /// `skb_still_in_host_queue` for the entry at `idx`: its last transmission has not
    /// left the host yet (the kernel's fclone of it is still in a qdisc or driver), so
    /// retransmitting it is pointless; TSQ_THROTTLED makes its release retry the queue.
    fn still_in_host_queue(&mut self, idx: usize) -> bool {
        let skb = self.sb.segs[idx].skb;
        let busy = self.out.in_host.binary_search_by_key(&skb, |&(s, _)| s).is_ok();
        self.tsq_throttled |= busy;
        busy
    }

    /// The qdisc dropped the skb: revert what the successful transmit changed.
    fn undo_tx(&mut self, p: PendingTx) {
        self.wstamp_ns = p.wstamp_after_max;
        // Freed at once: never in the host.
        self.out.in_host.pop_back();
        self.out.charged = p.prior_charged;
        self.out.sent_pkts = self.out.sent_pkts.saturating_sub(p.n);
        match p.kind {
            TxKind::New => {
                for _ in 0..p.n {
                    let idx = self.sb.len() - 1;
                    self.sb.untsort(idx);
                    self.sb.pop_back_seg();
                }
                self.snd_nxt = p.seq;
                self.sb.packets_out -= p.n;
                self.head_end = p.prior_head_end;
                self.first_tx_mstamp = p.prior_first_tx;
                self.delivered_mstamp = p.prior_delivered_us;
                self.xmit_timer = p.prior_timer;
            }
            TxKind::Rtx | TxKind::RtoHead | TxKind::TlpLast => {
                let idx0 = ((p.seq - self.sb.base) / self.sb.mss) as usize;
                for (k, &(flags, skb, order)) in p.old.iter().enumerate() {
                    let i = idx0 + k;
                    self.sb.untsort(i);
                    let s = &mut self.sb.segs[i];
                    if p.kind != TxKind::TlpLast && s.flags & R != 0 && flags & R == 0 {
                        self.sb.retrans_out -= 1;
                    }
                    // EVER_RETRANS and the new transmit time stay, as in the kernel.
                    s.flags = flags | super::sack::E;
                    self.sb.set_skb(i, skb);
                    if let Some(o) = order {
                        let seq = self.sb.seq_of(i);
                        self.sb.segs[i].order = Some(o);
                        self.sb.tsorted.insert(o, seq);
                    }
                }
                self.prr_out = p.prior_prr_out;
                self.out.rearm_timer = p.prior_rearm;
                if p.kind == TxKind::RtoHead {
                    self.rto_head_dropped(p.prior_rto_j, p.prior_backoff);
                }
            }
        }
    }
}
