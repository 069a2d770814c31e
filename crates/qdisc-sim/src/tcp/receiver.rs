//! The TCP receiver: reassembly, SACK/D-SACK generation and the ACK policy
//! (`tcp_data_queue`, `tcp_event_data_recv`, `__tcp_ack_snd_check`,
//! `tcp_send_delayed_ack` in tcp_input.c / tcp_output.c).
//!
//! # When an ACK is sent
//!
//! * **Immediately** when more than one full-sized segment (`rcv_mss`) arrived since
//!   the last ACK — in practice every second segment (RFC 5681 §4.2); when in
//!   *quickack* mode (the first 16 data segments of a connection, `TCP_MAX_QUICKACKS`,
//!   after a gap longer than the RTO, after duplicate data, and 2 ACKs after a CE
//!   mark); when a gap in the sequence space is filled (`ICSK_ACK_NOW`); when CWR
//!   arrives; for the first 3 out-of-order segments with the same `rcv_nxt`.
//! * **Compressed** (SACK compression, `tcp_comp_sack_*`): further out-of-order
//!   segments only restart a timer of min(1 ms, 5 % of the RTT), at most 44 ACKs
//!   coalesced.
//! * **Delayed** otherwise, by `ato`: it starts at `TCP_ATO_MIN` (40 ms), halves
//!   towards 20 ms + its half on back-to-back arrivals (converging to 40 ms), tracks
//!   the inter-arrival time when that is larger, doubles when the timer fires, and is
//!   capped by the RTO and by `TCP_DELACK_MAX` (200 ms); when above 40 ms it is
//!   also capped by the RTT. A pending timer fires early if the new deadline is
//!   later, and an ACK goes out at once if the pending one is within ato/4.
//!
//! # What an ACK carries
//!
//! `rcv_nxt`; up to 3 SACK blocks (4 minus one for the timestamps option): a
//! D-SACK first if a duplicate arrived since the last ACK (RFC 2883), then the
//! blocks in most-recently-changed order (RFC 2018); ECE while a CE mark has not
//! been answered by CWR (RFC 3168); TSecr = the TSval of the segment that
//! advanced the left edge since the last ACK (`tcp_replace_ts_recent`: only
//! segments at or below the last ACK's `rcv_nxt` update it, RFC 7323 §4.3).
//!
//! Not modelled: receive-buffer autotuning (the window is fixed, so the quickacks
//! `tcp_grow_window` grants while the window opens do not happen), the application
//! reading (data is consumed at once), PAWS, and reneging.

use std::collections::{BTreeMap, VecDeque};

use qdisc::Instant;

use super::{Ack, Hz, Segment, TcpConfig};

/// `TCP_MAX_QUICKACKS`.
const MAX_QUICKACKS: u32 = 16;
/// `TCP_FASTRETRANS_THRESH`.
const FASTRETRANS_THRESH: u32 = 3;
/// `net.ipv4.tcp_comp_sack_nr`.
const COMP_SACK_NR: u32 = 44;
/// `net.ipv4.tcp_comp_sack_delay_ns` = 1 ms.
const COMP_SACK_DELAY_NS: u64 = 1_000_000;
/// SACK blocks that fit next to the timestamps option.
const MAX_SACK_BLOCKS_WIRE: usize = 3;
/// `TCP_NUM_SACKS`.
const NUM_SACKS: usize = 4;
/// `TCP_MSS_DEFAULT`.
const MSS_DEFAULT: u32 = 536;

/// A Linux-like TCP receiver. See the [module docs](super) for the driving contract.
#[derive(Clone, Debug)]
pub struct TcpReceiver {
    hz: Hz,
    advmss: u32,
    sack_ok: bool,
    ecn_ok: bool,
    delayed_ack: bool,

    rcv_nxt: u64,
    /// `rcv_wup`: `rcv_nxt` when the last ACK (window update) was sent.
    rcv_wup: u64,
    rcv_wnd: u64,
    /// Out-of-order data, coalesced: start → end.
    ofo: BTreeMap<u64, u64>,
    /// `selective_acks`, most recently changed first.
    sacks: Vec<(u64, u64)>,
    /// `duplicate_sack`, reported once.
    dsack: Option<(u64, u64)>,
    /// `ts_recent`: the TSval to echo.
    ts_recent: Instant,

    /// `icsk_ack.ato`, jiffies (0 = no data yet).
    ato: u64,
    /// `icsk_ack.quick`: quick ACKs left.
    quick: u32,
    /// `ICSK_ACK_SCHED`: an ACK is owed.
    ack_sched: bool,
    /// `ICSK_ACK_NOW`.
    ack_now: bool,
    /// `ICSK_ACK_PUSHED`.
    ack_pushed: bool,
    /// The delayed-ACK timer (`ICSK_ACK_TIMER`), in jiffies since the epoch.
    delack_at: Option<u64>,
    /// `icsk_ack.lrcvtime`, jiffies.
    lrcvtime: u64,
    /// `icsk_ack.rcv_mss`.
    rcv_mss: u32,
    /// `icsk_rto` of this side (from the handshake), jiffies.
    rto_j: u64,
    /// `srtt_us` of this side (×8, from the handshake), 0 = unknown.
    srtt_us: u64,

    compressed_ack: u32,
    compressed_ack_rcv_nxt: u64,
    dup_ack_counter: u32,
    comp_at: Option<Instant>,
    /// ACKs generated while another one was being returned, and when.
    stash: VecDeque<(Instant, Ack)>,

    /// `TCP_ECN_DEMAND_CWR`: echo ECE.
    demand_cwr: bool,
    /// The socket runs dctcp: its CE state machine (`dctcp_ece_ack_update`) decides ECE.
    pub(super) dctcp: bool,
    /// dctcp's `ce_state` (the last data segment was CE) and `prior_rcv_nxt`.
    ce_state: bool,
    prior_rcv_nxt: u64,
    /// The ACK dctcp sent for the previous CE state, to be returned first.
    dctcp_ack: Option<Ack>,
    /// `TCP_ECN_SEEN`.
    ecn_seen: bool,
}

impl TcpReceiver {
    /// A receiver for a connection established at `now`.
    pub fn new(cfg: &TcpConfig, now: Instant) -> Self {
        let hz = Hz(cfg.hz);
        let (rto_j, srtt_us) = match cfg.syn_rtt {
            Some(r) => {
                // tcp_synack_rtt_meas: one sample, RTO = srtt + max(2 srtt, rto_min).
                let r_us = (r.as_nanos() / 1000).max(1);
                let rttvar = (2 * r_us).max(cfg.min_rto.as_nanos() / 1000);
                (hz.usecs_to_jiffies(r_us + rttvar), r_us << 3)
            }
            None => (hz.0 as u64, 0),
        };
        // tcp_initialize_rcv_mss: a guess below the real MSS until data arrives.
        let rcv_mss = cfg.mss.min((cfg.rcv_wnd / 2).min(u32::MAX as u64) as u32).clamp(88, MSS_DEFAULT);
        TcpReceiver {
            hz,
            advmss: cfg.mss,
            sack_ok: cfg.sack,
            ecn_ok: cfg.ecn,
            delayed_ack: cfg.delayed_ack,
            rcv_nxt: 0,
            rcv_wup: 0,
            rcv_wnd: cfg.rcv_wnd,
            ofo: BTreeMap::new(),
            sacks: Vec::with_capacity(NUM_SACKS),
            dsack: None,
            ts_recent: Instant::ZERO,
            ato: 0,
            quick: 0,
            ack_sched: false,
            ack_now: false,
            ack_pushed: false,
            delack_at: None,
            lrcvtime: hz.jiffies(now),
            rcv_mss,
            rto_j,
            srtt_us,
            compressed_ack: 0,
            compressed_ack_rcv_nxt: 0,
            dup_ack_counter: 0,
            comp_at: None,
            stash: VecDeque::new(),
            demand_cwr: false,
            // dctcp_init: only with ECN (else dctcp-reno, an RFC 3168-less Reno).
            dctcp: cfg.cc == super::CongestionControl::Dctcp && cfg.ecn,
            ce_state: false,
            prior_rcv_nxt: 0,
            dctcp_ack: None,
            ecn_seen: false,
        }
    }

    /// In-order bytes received (what the application can read: goodput).
    pub fn delivered(&self) -> u64 {
        self.rcv_nxt
    }

    /// Bytes held out of order.
    pub fn ofo_bytes(&self) -> u64 {
        self.ofo.iter().map(|(s, e)| e - s).sum()
    }

    /// The earliest instant the receiver wants `on_timer`: the delayed-ACK or the
    /// SACK-compression timer (or `now` if an extra ACK is waiting).
    pub fn next_timer(&self) -> Option<Instant> {
        let d = self.delack_at.map(|j| Instant::from_nanos(j * self.hz.jiffy_ns()));
        let mut t = match (d, self.comp_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some((at, _)) = self.stash.front() {
            t = Some(*at);
        }
        t
    }

    /// Timers due at `now`; returns at most one ACK (call again while due).
    pub fn on_timer(&mut self, now: Instant) -> Option<Ack> {
        if let Some((_, a)) = self.stash.pop_front() {
            return Some(a);
        }
        if self.comp_at.is_some_and(|t| t <= now) {
            // tcp_compressed_ack_kick.
            self.comp_at = None;
            if self.compressed_ack > 0 {
                self.compressed_ack -= 1;
                return Some(self.send_ack());
            }
        }
        if let Some(j) = self.delack_at {
            if j * self.hz.jiffy_ns() <= now.as_nanos() {
                // tcp_delack_timer_handler: the delayed ACK was "missed", inflate ato.
                self.delack_at = None;
                if self.ack_sched {
                    self.ato = (self.ato << 1).min(self.rto_j);
                    return Some(self.send_ack());
                }
            }
        }
        None
    }

    /// The application read everything received (`tcp_cleanup_rbuf` after
    /// `tcp_recvmsg`): a scheduled ACK goes out now if more than one `rcv_mss` is
    /// unacknowledged, or the data was pushed (a short segment: `ICSK_ACK_PUSHED`).
    pub fn on_read(&mut self) -> Option<Ack> {
        if !self.ack_sched {
            return None;
        }
        if self.rcv_nxt - self.rcv_wup > self.rcv_mss as u64 || self.ack_pushed {
            return Some(self.send_ack());
        }
        None
    }

    /// A data segment arrived (`ce`: the IP header carried CE). Returns the ACK to send
    /// now, or `None` (delayed; see `next_timer`).
    pub fn on_segment(&mut self, seg: &Segment, ce: bool, now: Instant) -> Option<Ack> {
        if seg.len == 0 {
            return None;
        }
        let seq = seg.seq;
        let end = seg.end();
        if end < self.rcv_wup {
            // Entirely below what we already ACKed: tcp_sequence rejects it and
            // tcp_send_dupack answers at once with a D-SACK (the echo is not updated).
            self.dsack_set(seq, end.min(self.rcv_nxt));
            self.enter_quickack_mode(MAX_QUICKACKS);
            return Some(self.send_ack());
        }
        // tcp_replace_ts_recent (via tcp_ack's FLAG_UPDATE_TS_RECENT): only a segment
        // at or below the last ACKed point may update the echo.
        if seq <= self.rcv_wup {
            self.ts_recent = seg.sent_at;
        }
        // 6.12 tcp_data_queue: tcp_ecn_accept_cwr first.
        if self.ecn_ok && seg.cwr {
            self.demand_cwr = false;
            self.ack_now = true;
        }
        self.dsack = None;
        let mut first_ack: Option<Ack> = None;

        if seq == self.rcv_nxt {
            self.queue_in_order(seg, end, ce, now);
        } else if end <= self.rcv_nxt {
            // A retransmission of data we have: D-SACK it and ACK at once.
            self.dsack_set(seq, end);
            self.enter_quickack_mode(MAX_QUICKACKS);
            self.ack_sched = true;
        } else if seq >= self.rcv_nxt + self.rcv_wnd {
            // Beyond the window.
            self.enter_quickack_mode(MAX_QUICKACKS);
            self.ack_sched = true;
        } else if seq < self.rcv_nxt {
            // Partial duplicate: D-SACK the old part, keep the rest.
            self.dsack_set(seq, self.rcv_nxt);
            self.queue_in_order(seg, end, ce, now);
        } else {
            first_ack = self.queue_ofo(seg, seq, end, ce);
        }

        // tcp_ack_snd_check
        let ack = if self.ack_sched { self.ack_snd_check(now) } else { None };
        // DCTCP's ACK for the previous CE state goes first; ACKs still waiting to be
        // returned go before all of them (they were sent first).
        let acks = self.dctcp_ack.take().into_iter().chain(first_ack).chain(ack);
        self.stash.extend(acks.map(|a| (now, a)));
        self.stash.pop_front().map(|(_, a)| a)
    }

    /// The in-sequence branch of `tcp_data_queue`.
    fn queue_in_order(&mut self, seg: &Segment, end: u64, ce: bool, now: Instant) {
        self.rcv_nxt = end;
        self.event_data_recv(seg, ce, now);
        if !self.ofo.is_empty() {
            self.ofo_queue();
            // A hole just closed: tell the sender at once (RFC 5681 §4.2).
            if self.ofo.is_empty() {
                self.ack_now = true;
            }
        }
        if !self.sacks.is_empty() {
            self.sack_remove();
        }
    }

    /// `tcp_event_data_recv`: the delayed-ACK estimator.
    fn event_data_recv(&mut self, seg: &Segment, ce: bool, now: Instant) {
        self.ack_sched = true;
        self.measure_rcv_mss(seg);
        let now_j = self.hz.jiffies(now);
        let ato_min = self.ato_min();
        if self.ato == 0 {
            // First data: start in quickack mode.
            self.incr_quickack(MAX_QUICKACKS);
            self.ato = ato_min;
        } else {
            let m = now_j.saturating_sub(self.lrcvtime);
            if m <= ato_min / 2 {
                self.ato = (self.ato >> 1) + ato_min / 2;
            } else if m < self.ato {
                self.ato = ((self.ato >> 1) + m).min(self.rto_j);
            } else if m > self.rto_j {
                // A gap longer than the RTO: the sender is restarting, ACK quickly.
                self.incr_quickack(MAX_QUICKACKS);
            }
        }
        self.lrcvtime = now_j;
        self.ecn_check(seg, ce);
    }

    /// `tcp_data_queue_ofo`. Returns an ACK if SACK compression had to be flushed.
    fn queue_ofo(&mut self, seg: &Segment, seq: u64, end: u64, ce: bool) -> Option<Ack> {
        self.ecn_check(seg, ce);
        self.measure_rcv_mss(seg);
        self.ack_sched = true;
        // Insert, D-SACKing any overlap with data already queued.
        let mut start = seq;
        let mut stop = end;
        let overlapping: Vec<(u64, u64)> =
            self.ofo.range(..end).filter(|&(_, &e)| e >= seq).map(|(&s, &e)| (s, e)).collect();
        let mut dup: Option<(u64, u64)> = None;
        for (s, e) in overlapping {
            let (ds, de) = (s.max(seq), e.min(end));
            if ds < de {
                dup = Some(match dup {
                    None => (ds, de),
                    Some((a, b)) => (a.min(ds), b.max(de)),
                });
            }
            start = start.min(s);
            stop = stop.max(e);
            self.ofo.remove(&s);
        }
        self.ofo.insert(start, stop);
        if let Some((a, b)) = dup {
            self.dsack_set(a, b);
        }
        if self.sack_ok {
            return self.sack_new_ofo_skb(seq, end);
        }
        None
    }

    /// `tcp_ofo_queue`: move what became in-order from the out-of-order queue.
    fn ofo_queue(&mut self) {
        let dsack_high = self.rcv_nxt;
        while let Some((&s, &e)) = self.ofo.iter().next() {
            if s > self.rcv_nxt {
                break;
            }
            if s < dsack_high {
                self.dsack_extend(s, e.min(dsack_high));
            }
            self.ofo.remove(&s);
            if e > self.rcv_nxt {
                self.rcv_nxt = e;
            }
        }
    }

    /// `tcp_measure_rcv_mss`.
    fn measure_rcv_mss(&mut self, seg: &Segment) {
        let len = if seg.segs > 1 { seg.len.div_ceil(seg.segs as u32) } else { seg.len };
        if len >= self.rcv_mss {
            self.rcv_mss = len.min(self.advmss);
        } else {
            // A small segment: likely pushed; ack it promptly.
            self.ack_pushed = true;
        }
    }

    /// `TCP_ATO_MIN` = `TCP_DELACK_MIN` = HZ/25 (40 ms).
    fn ato_min(&self) -> u64 {
        self.hz.0 as u64 / 25
    }

    /// `tcp_incr_quickack`.
    fn incr_quickack(&mut self, max: u32) {
        let mut q = (self.rcv_wnd / (2 * self.rcv_mss as u64)).min(u32::MAX as u64) as u32;
        if q == 0 {
            q = 2;
        }
        q = q.min(max);
        if q > self.quick {
            self.quick = q;
        }
    }

    /// `tcp_enter_quickack_mode`.
    fn enter_quickack_mode(&mut self, max: u32) {
        self.incr_quickack(max);
        self.ato = self.ato_min();
    }

    /// `tcp_data_ecn_check` (RFC 3168 receiver), with the `CA_EVENT_ECN_IS_CE` /
    /// `CA_EVENT_ECN_NO_CE` events dctcp takes.
    fn ecn_check(&mut self, seg: &Segment, ce: bool) {
        if !self.ecn_ok {
            return;
        }
        if self.dctcp && (ce || seg.ect) {
            self.dctcp_ece_ack_update(ce);
        }
        if ce {
            if !self.demand_cwr {
                // The sender's window may be tiny after it reacts: ACK promptly.
                self.enter_quickack_mode(2);
                self.demand_cwr = true;
            }
            self.ecn_seen = true;
        } else if seg.ect {
            self.ecn_seen = true;
        } else if self.ecn_seen {
            // Not-ECT after ECT traffic: most likely a retransmission.
            self.enter_quickack_mode(2);
        }
    }

    /// `dctcp_ece_ack_update`: ECE follows the CE state of the last data segment. When
    /// it flips, a pending delayed ACK goes out first — up to the previous `rcv_nxt`,
    /// with the previous state's ECE (`__tcp_send_ack(sk, prior_rcv_nxt)`, which leaves
    /// the delayed-ACK state alone) — and this segment is ACKed at once.
    fn dctcp_ece_ack_update(&mut self, ce: bool) {
        if self.ce_state != ce {
            if self.delack_at.is_some() {
                self.demand_cwr = self.ce_state;
                self.dctcp_ack = Some(self.ack_at(self.prior_rcv_nxt));
            }
            self.ack_now = true;
        }
        self.prior_rcv_nxt = self.rcv_nxt;
        self.ce_state = ce;
        self.demand_cwr = ce;
    }

    /// An ACK of `rcv_nxt` = `ack` with the current options, changing no ACK state.
    fn ack_at(&self, ack: u64) -> Ack {
        let mut sack = Vec::new();
        if self.sack_ok {
            if let Some(d) = self.dsack {
                sack.push(d);
            }
            for &b in &self.sacks {
                if sack.len() >= MAX_SACK_BLOCKS_WIRE {
                    break;
                }
                sack.push(b);
            }
        }
        Ack { ack, sack, ece: self.ecn_ok && self.demand_cwr, tsecr: self.ts_recent, rwnd: self.rcv_wnd }
    }

    fn dsack_set(&mut self, s: u64, e: u64) {
        if self.sack_ok {
            self.dsack = Some((s, e));
        }
    }

    fn dsack_extend(&mut self, s: u64, e: u64) {
        match self.dsack {
            None => self.dsack_set(s, e),
            Some((a, b)) => {
                if s <= b && a <= e {
                    self.dsack = Some((a.min(s), b.max(e)));
                }
            }
        }
    }

    /// `tcp_sack_new_ofo_skb`: keep the block just changed first.
    fn sack_new_ofo_skb(&mut self, seq: u64, end: u64) -> Option<Ack> {
        let mut flushed = None;
        for i in 0..self.sacks.len() {
            let (a, b) = self.sacks[i];
            if seq <= b && a <= end {
                // Touching a block beyond the first two: the compressed ACK would hide it.
                if i >= 2 {
                    flushed = self.sack_compress_send_ack();
                }
                self.sacks[i] = (a.min(seq), b.max(end));
                let blk = self.sacks.remove(i);
                self.sacks.insert(0, blk);
                self.sack_maybe_coalesce();
                return flushed;
            }
        }
        if self.sacks.len() >= 2 {
            flushed = self.sack_compress_send_ack();
        }
        if self.sacks.len() >= NUM_SACKS {
            self.sacks.pop();
        }
        self.sacks.insert(0, (seq, end));
        flushed
    }

    /// `tcp_sack_maybe_coalesce`: merge blocks the first one now touches.
    fn sack_maybe_coalesce(&mut self) {
        let mut i = 1;
        while i < self.sacks.len() {
            let (a, b) = self.sacks[0];
            let (s, e) = self.sacks[i];
            if s <= b && a <= e {
                self.sacks[0] = (a.min(s), b.max(e));
                self.sacks.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// `tcp_sack_remove`: blocks now below `rcv_nxt` are gone.
    fn sack_remove(&mut self) {
        if self.ofo.is_empty() {
            self.sacks.clear();
            return;
        }
        let nxt = self.rcv_nxt;
        self.sacks.retain(|&(s, _)| s > nxt);
    }

    /// `tcp_sack_compress_send_ack`: send the ACK held by SACK compression.
    fn sack_compress_send_ack(&mut self) -> Option<Ack> {
        if self.compressed_ack == 0 {
            return None;
        }
        self.comp_at = None;
        self.compressed_ack = 0;
        Some(self.send_ack())
    }

    /// `tcp_in_quickack_mode`.
    fn in_quickack_mode(&self) -> bool {
        self.quick > 0 || !self.delayed_ack
    }

    /// `__tcp_ack_snd_check(sk, ofo_possible = 1)`.
    fn ack_snd_check(&mut self, now: Instant) -> Option<Ack> {
        // The application reads at once, so the window's right edge always advances.
        if self.rcv_nxt - self.rcv_wup > self.rcv_mss as u64 || self.in_quickack_mode() || self.ack_now {
            return Some(self.send_ack());
        }
        if self.ofo.is_empty() {
            return self.send_delayed_ack(now);
        }
        if !self.sack_ok || self.compressed_ack >= COMP_SACK_NR {
            return Some(self.send_ack());
        }
        if self.compressed_ack_rcv_nxt != self.rcv_nxt {
            self.compressed_ack_rcv_nxt = self.rcv_nxt;
            self.dup_ack_counter = 0;
        }
        if self.dup_ack_counter < FASTRETRANS_THRESH {
            self.dup_ack_counter += 1;
            return Some(self.send_ack());
        }
        self.compressed_ack += 1;
        if self.comp_at.is_some() {
            return None;
        }
        // 6.12: min(tcp_comp_sack_delay_ns, 5 % of the RTT); the RTT is the handshake's
        // (the receive-side RTT estimator is not modelled).
        let delay = COMP_SACK_DELAY_NS.min(self.srtt_us * 125 / 20);
        self.comp_at = Some(now + qdisc::Duration::from_nanos(delay));
        None
    }

    /// `tcp_send_delayed_ack`.
    fn send_delayed_ack(&mut self, now: Instant) -> Option<Ack> {
        let delack_min = self.ato_min();
        let delack_max = self.hz.0 as u64 / 5;
        let mut ato = self.ato;
        if ato > delack_min {
            let mut max_ato = self.hz.0 as u64 / 2;
            if self.ack_pushed {
                max_ato = delack_max;
            }
            // With an RTT estimate, do not delay longer than one RTT.
            if self.srtt_us != 0 {
                let rtt = self.hz.usecs_to_jiffies(self.srtt_us >> 3).max(delack_min);
                if rtt < max_ato {
                    max_ato = rtt;
                }
            }
            ato = ato.min(max_ato);
        }
        ato = ato.min(delack_max);
        let now_j = self.hz.jiffies(now);
        let mut timeout = now_j + ato;
        if let Some(pending) = self.delack_at {
            // The armed timer is due within ato/4 anyway: ACK now.
            if pending <= now_j + (ato >> 2) {
                return Some(self.send_ack());
            }
            if timeout >= pending {
                timeout = pending;
            }
        }
        self.ack_sched = true;
        self.delack_at = Some(timeout);
        None
    }

    /// `tcp_send_ack` + `tcp_event_ack_sent`.
    fn send_ack(&mut self) -> Ack {
        let ack = self.ack_at(self.rcv_nxt);
        self.dsack = None;
        self.rcv_wup = self.rcv_nxt;
        // tcp_event_ack_sent: compression done, one quick ACK used, timer cleared.
        self.compressed_ack = 0;
        self.comp_at = None;
        if self.quick > 0 {
            let pkts = u32::from(self.ack_sched);
            if pkts >= self.quick {
                self.quick = 0;
                self.ato = self.ato_min();
            } else {
                self.quick -= pkts;
            }
        }
        self.ack_sched = false;
        self.ack_now = false;
        self.ack_pushed = false;
        self.delack_at = None;
        ack
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdisc::Duration;

    const M: u64 = 1448;

    fn cfg() -> TcpConfig {
        TcpConfig { syn_rtt: Some(Duration::from_millis(20)), ..TcpConfig::default() }
    }

    fn seg(i: u64, sent_ms: u64) -> Segment {
        Segment {
            seq: i * M,
            len: M as u32,
            segs: 1,
            ect: false,
            cwr: false,
            retransmit: false,
            tstamp: Instant::ZERO,
            sent_at: Instant::from_millis(sent_ms),
        }
    }

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// 16 quick ACKs, then one ACK per two full segments; a lone segment waits for the
    /// delayed-ACK timer: ato = TCP_ATO_MIN = 10 jiffies at HZ=250, from the current jiffy.
    #[test]
    fn quickack_then_every_second_segment_then_delack_timer() {
        let mut r = TcpReceiver::new(&cfg(), Instant::ZERO);
        for i in 0..16 {
            let a = r.on_segment(&seg(i, i), false, ms(i)).expect("quick ack");
            assert_eq!(a.ack, (i + 1) * M);
        }
        assert_eq!(r.on_segment(&seg(16, 16), false, ms(16)), None);
        assert_eq!(r.next_timer(), Some(ms(56)), "jiffy 4 + 10");
        let a = r.on_segment(&seg(17, 17), false, ms(17)).expect("second full segment");
        assert_eq!(a.ack, 18 * M);
        assert_eq!(a.tsecr, ms(16), "echo of the segment at the old left edge");
        assert_eq!(r.next_timer(), None);
        assert_eq!(r.on_segment(&seg(18, 18), false, ms(18)), None);
        assert_eq!(r.on_timer(ms(55)), None);
        let a = r.on_timer(ms(56)).expect("delayed ack");
        assert_eq!(a.ack, 19 * M);
        // The timer fired: ato doubled to 20 jiffies, but above TCP_DELACK_MIN it is
        // capped by max(srtt, 40 ms) = 10 jiffies.
        assert_eq!(r.on_segment(&seg(19, 100), false, ms(100)), None);
        assert_eq!(r.next_timer(), Some(Instant::from_millis(4 * (25 + 10))));
    }

    /// Out-of-order data: three immediate duplicate ACKs with SACK, then SACK compression
    /// (min(1 ms, 5 % of 20 ms)); filling the hole ACKs at once; a duplicate is D-SACKed.
    #[test]
    fn sack_dsack_and_compression() {
        let mut r = TcpReceiver::new(&cfg(), Instant::ZERO);
        for i in 0..16 {
            r.on_segment(&seg(i, 0), false, ms(1));
        }
        let t = ms(10);
        for (i, hi) in [(17u64, 18u64), (18, 19), (19, 20)] {
            let a = r.on_segment(&seg(i, 5), false, t).expect("dupack");
            assert_eq!((a.ack, a.sack.clone()), (16 * M, vec![(17 * M, hi * M)]));
        }
        assert_eq!(r.on_segment(&seg(20, 5), false, t), None);
        assert_eq!(r.on_segment(&seg(21, 5), false, t), None);
        assert_eq!(r.next_timer(), Some(t + Duration::from_millis(1)));
        let a = r.on_timer(t + Duration::from_millis(1)).expect("compressed ack");
        assert_eq!(a.sack, vec![(17 * M, 22 * M)]);
        // A second hole, same rcv_nxt: still compressed; the newest block goes first.
        assert_eq!(r.on_segment(&seg(24, 5), false, ms(12)), None);
        let a = r.on_timer(ms(13)).expect("compressed ack");
        assert_eq!(a.sack, vec![(24 * M, 25 * M), (17 * M, 22 * M)]);
        assert_eq!(a.wire_len(), 66 + 4 + 2 * 8);
        // The retransmission fills the first hole: ACK at once, one block left.
        let a = r.on_segment(&seg(16, 11), false, ms(13)).expect("gap partly filled");
        assert_eq!((a.ack, a.sack.clone()), (22 * M, vec![(24 * M, 25 * M)]));
        assert_eq!(a.tsecr, ms(11), "the retransmission's TSval");
        // An old duplicate: D-SACK first, the echo unchanged.
        let a = r.on_segment(&seg(5, 12), false, ms(14)).expect("duplicate");
        assert_eq!(a.sack, vec![(5 * M, 6 * M), (24 * M, 25 * M)]);
        assert_eq!(a.tsecr, ms(11));
        assert_eq!(r.delivered(), 22 * M);
        assert_eq!(r.ofo_bytes(), M);
    }

    /// CE → ECE on every ACK (the first two at once) until a segment with CWR arrives.
    #[test]
    fn ecn_echo_until_cwr() {
        let mut r = TcpReceiver::new(&TcpConfig { ecn: true, ..cfg() }, Instant::ZERO);
        for i in 0..16 {
            let a = r.on_segment(&Segment { ect: true, ..seg(i, 0) }, false, ms(1)).unwrap();
            assert!(!a.ece);
        }
        let a = r.on_segment(&Segment { ect: true, ..seg(16, 2) }, true, ms(3)).expect("CE: quickack");
        assert!(a.ece);
        let a = r.on_segment(&Segment { ect: true, ..seg(17, 2) }, false, ms(3)).expect("2nd quickack");
        assert!(a.ece);
        assert_eq!(r.on_segment(&Segment { ect: true, ..seg(18, 2) }, false, ms(3)), None);
        let a = r.on_segment(&Segment { ect: true, ..seg(19, 2) }, false, ms(3)).unwrap();
        assert!(a.ece);
        let a = r.on_segment(&Segment { ect: true, cwr: true, ..seg(20, 2) }, false, ms(3)).expect("CWR: ack now");
        assert!(!a.ece);
    }
}
