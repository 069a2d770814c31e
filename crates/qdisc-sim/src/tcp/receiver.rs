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
//!   segments only restart a timer of min(1 ms, a share of the RTT: 5 % in 6.12,
//!   `tcp_comp_sack_rtt_percent` = 33 % in 6.18; the receiver's RTT, or the
//!   handshake's if smaller), at most 44 ACKs coalesced.
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
//! `rwnd`, the window `tcp_select_window` offers (see below).
//!
//! # The receive window (Linux 6.18)
//!
//! The buffer is counted in truesize, the window in payload: `scaling_ratio` (×256)
//! converts (`tcp_win_from_space`). It starts at `TCP_DEFAULT_SCALING_RATIO` (1/2) and
//! is measured once, on the first skb whose MSS differs from the `rcv_mss` guess
//! (`tcp_measure_rcv_mss`: len/truesize; a GSO skb that crossed a veth whole keeps the
//! sender's truesize, [`super::truesize_of_payload`], so a 10-segment skb gives 241).
//! `sk_rcvbuf` is `tcp_rmem[1]`. The server's request picks the first window
//! (`tcp_openreq_init_rwin` → `tcp_select_initial_window`: the full space rounded down
//! to the MSS, 65160 bytes by default, offered unscaled in the SYN-ACK) and the
//! window scale from `tcp_rmem[2]` (7 by default); `tcp_init_buffer_space` then
//! clamps the window to the full space less one segment. Each data skb of 128 bytes or
//! more opens `rcv_ssthresh` by 2 × max(advmss, len) towards min(window_clamp,
//! free space) and grants a quick ACK (`tcp_grow_window`). Every ACK carries
//! `__tcp_select_window`: the free space (`tcp_space`, the buffer less what is still
//! queued) up to `rcv_ssthresh`, aligned up to the scale, never shrinking the window
//! already offered (`tcp_select_window`). `__tcp_ack_snd_check` ACKs every second
//! segment only if that window does not move the right edge back; the read
//! (`tcp_cleanup_rbuf`) ACKs if it at least doubles the window.
//!
//! DRS (`tcp_rcv_space_adjust` on each read): once per receiver RTT, if more was read
//! in it than in the one before, `tcp_rcvbuf_grow` (6.18) sizes `sk_rcvbuf` for twice
//! that plus its growth (below `tcp_rcvbuf_low_rtt`, 1 ms, a share in proportion to
//! the RTT instead), up to `tcp_rmem[2]`, and the clamp follows; out-of-order data
//! gets its room at once. The receiver's RTT (`rcv_rtt_est`) has two sources:
//! `tcp_rcv_rtt_measure`, the time one window takes to arrive (only a new minimum
//! counts), and `tcp_rcv_rtt_measure_ts`: ACKs carry the receiver's TSval, the sender
//! echoes the last one it took (`ts_recent`) on its data, and each data segment of at
//! least `rcv_mss` echoing a TSval not sampled yet gives now − that TSval in whole ms
//! (`TCP_TS_HZ` = 1000; 0 ms is no sample), a new minimum at once, else averaged in
//! by 1/8 (`tcp_rcv_rtt_update`).
//!
//! The application (iperf3's reader) consumes at once: a skb counts in
//! `sk_rmem_alloc` while its own softirq processes it (its ACK decision and window)
//! and is read before anything later happens. Out-of-order data counts by its payload
//! (coalesced skbs share pages). Not modelled: memory pressure (`tcp_mem`), zero
//! windows and their probes,
//! `tcp_shrink_window`, PAWS, and reneging.

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
/// `TCP_RMEM_TO_WIN_SCALE`: `scaling_ratio` is payload/truesize in 1/256.
const RMEM_TO_WIN_SCALE: u32 = 8;
/// `TCP_DEFAULT_SCALING_RATIO`: half the buffer is payload until a skb is measured.
const DEFAULT_SCALING_RATIO: u32 = 1 << (RMEM_TO_WIN_SCALE - 1);
/// `TCPOLEN_TSTAMP_ALIGNED`: `advmss` (MTU − 40) counts the timestamps option's room.
pub(super) const TSTAMP_ALIGNED: u32 = 12;
/// `TCP_MAX_WSCALE`.
const MAX_WSCALE: u32 = 14;
/// `net.core.rmem_max` (`sysctl_rmem_max` = 4 MiB in 6.18): a floor of the window scale.
const RMEM_MAX: u32 = 4 << 20;
/// `net.ipv4.tcp_rcvbuf_low_rtt` = 1000 µs: below it DRS grows the buffer less.
const RCVBUF_LOW_RTT_US: u64 = 1000;
/// `SOCK_MIN_RCVBUF / 2` (`TCP_SKB_MIN_TRUESIZE` = 2048 + 256): `tcp_set_window_clamp`'s floor.
const MIN_WINDOW_CLAMP: u32 = (2048 + 256) / 2;

/// `tcp_select_initial_window` for the server's request (`tcp_openreq_init_rwin`:
/// window scaling and timestamps on, no route `initrwnd` or `window` metric):
/// (rcv_wnd, window_clamp, rcv_wscale).
fn initial_window(cfg: &TcpConfig) -> (u32, u32, u32) {
    let full = win_from_space(DEFAULT_SCALING_RATIO, cfg.rmem[1]);
    let clamp = u32::from(u16::MAX) << MAX_WSCALE;
    let mss = cfg.mss;
    let mut space = full.min(clamp);
    if space > mss {
        space -= space % mss;
    }
    let scale_space = space.max(cfg.rmem[2]).max(RMEM_MAX).min(clamp);
    let wscale = (scale_space.ilog2().saturating_sub(15)).min(MAX_WSCALE);
    (space, clamp.min(u32::from(u16::MAX) << wscale), wscale)
}

/// The window the SYN-ACK offers (unscaled, so at most 65535): the sender's first `snd_wnd`.
pub fn synack_window(cfg: &TcpConfig) -> u64 {
    u64::from(initial_window(cfg).0.min(u32::from(u16::MAX)))
}

/// `__tcp_win_from_space`.
fn win_from_space(ratio: u32, space: u32) -> u32 {
    ((u64::from(space) * u64::from(ratio)) >> RMEM_TO_WIN_SCALE) as u32
}

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
    /// `rcv_wnd`: the window last offered, from `rcv_wup`.
    rcv_wnd: u64,
    /// `net.ipv4.tcp_rmem`.
    rmem: [u32; 3],
    /// `sk_rcvbuf`, truesize bytes.
    rcvbuf: u32,
    /// `scaling_ratio`: payload per 256 bytes of truesize.
    scaling_ratio: u32,
    /// `window_clamp`: the largest window to offer.
    window_clamp: u32,
    /// `rcv_ssthresh`: the window the sender has earned so far.
    rcv_ssthresh: u32,
    /// `rx_opt.rcv_wscale`.
    rcv_wscale: u32,
    /// `tp->advmss`: the MSS the SYN-ACK announced (timestamps room included).
    tp_advmss: u32,
    /// `sk_rmem_alloc` beside the out-of-order queue: the skb being processed.
    rmem_alloc: u32,
    /// `rcv_rtt_est`: the receiver's RTT (µs × 8, 0 = none), and the sequence and time
    /// (µs) the running sample ends at / started at.
    rcv_rtt_us: u64,
    rcv_rtt_seq: u64,
    rcv_rtt_time: Option<u64>,
    /// `rcv_rtt_last_tsecr`: the TSecr of the last timestamp sample.
    rcv_rtt_last_tsecr: u32,
    /// The TSval of ACKs sent now ([`super::ts_ms`] of the entry point's `now`).
    tsval: u32,
    /// `rcvq_space`: bytes read in the last measured RTT, and where / when it began.
    rcvq_space: u64,
    rcvq_seq: u64,
    rcvq_time: u64,
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
    /// [`TcpConfig::comp_sack_rtt_percent`].
    comp_sack_rtt_percent: Option<u32>,
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
        let (rcv_wnd, clamp, rcv_wscale) = initial_window(cfg);
        let tp_advmss = cfg.mss + TSTAMP_ALIGNED;
        // tcp_init_buffer_space: the clamp is the full space less one segment
        // (tcp_app_win = 31 reserves nothing more), rcv_ssthresh below it.
        let maxwin = win_from_space(DEFAULT_SCALING_RATIO, cfg.rmem[1]);
        let mut window_clamp = clamp;
        if window_clamp >= maxwin {
            window_clamp = maxwin;
        }
        if window_clamp > 2 * tp_advmss && window_clamp + tp_advmss > maxwin {
            window_clamp = (2 * tp_advmss).max(maxwin - tp_advmss);
        }
        // tcp_initialize_rcv_mss: a guess below the real MSS until data arrives.
        let rcv_mss = cfg.mss.min(rcv_wnd / 2).clamp(88, MSS_DEFAULT);
        TcpReceiver {
            hz,
            advmss: cfg.mss,
            sack_ok: cfg.sack,
            ecn_ok: cfg.ecn,
            delayed_ack: cfg.delayed_ack,
            rcv_nxt: 0,
            rcv_wup: 0,
            rcv_wnd: u64::from(rcv_wnd),
            rmem: cfg.rmem,
            rcvbuf: cfg.rmem[1],
            scaling_ratio: DEFAULT_SCALING_RATIO,
            window_clamp,
            rcv_ssthresh: rcv_wnd.min(window_clamp),
            rcv_wscale,
            tp_advmss,
            rmem_alloc: 0,
            rcv_rtt_us: 0,
            rcv_rtt_seq: 0,
            rcv_rtt_time: None,
            rcv_rtt_last_tsecr: 0,
            tsval: super::ts_ms(now),
            // tcp_init_buffer_space: min(rcv_ssthresh, rcv_wnd, TCP_INIT_CWND × advmss).
            rcvq_space: u64::from(rcv_wnd.min(window_clamp).min(10 * tp_advmss)),
            rcvq_seq: 0,
            rcvq_time: super::us(now),
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
            comp_sack_rtt_percent: cfg.comp_sack_rtt_percent,
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

    /// This receiver with its window already grown (`rcv_ssthresh` above any free
    /// space, as at the end of `tcp_grow_window`'s phase): no quick ACKs from growth,
    /// for tests of the sender and of the ACK policy.
    #[cfg(test)]
    pub(crate) fn grown(mut self) -> Self {
        self.rcv_ssthresh = u32::MAX >> 1;
        self
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
        self.tsval = super::ts_ms(now);
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
    /// It also ACKs a window that the read at least doubled.
    /// Before that, DRS (`tcp_rcv_space_adjust`) sizes the buffer from what was read.
    pub fn on_read(&mut self, now: Instant) -> Option<Ack> {
        self.tsval = super::ts_ms(now);
        self.rcv_space_adjust(now);
        if self.ack_sched && (self.rcv_nxt - self.rcv_wup > self.rcv_mss as u64 || self.ack_pushed) {
            return Some(self.send_ack());
        }
        let now = self.receive_window();
        if 2 * now <= u64::from(self.window_clamp) {
            let new = u64::from(self.select_window_raw());
            if new != 0 && new >= 2 * now {
                return Some(self.send_ack());
            }
        }
        None
    }

    /// `tcp_rcv_space_adjust` (the reader has read up to `rcv_nxt`): once per receiver
    /// RTT, if more was read in it than in the last one, the buffer grows.
    fn rcv_space_adjust(&mut self, now: Instant) {
        if self.rcv_rtt_us == 0 {
            return;
        }
        let t = super::us(now);
        if t.saturating_sub(self.rcvq_time) < self.rcv_rtt_us >> 3 {
            return;
        }
        let copied = self.rcv_nxt - self.rcvq_seq;
        if copied > self.rcvq_space {
            self.rcvbuf_grow(copied);
        }
        self.rcvq_seq = self.rcv_nxt;
        self.rcvq_time = t;
    }

    /// `tcp_rcvbuf_grow` (6.18): room for twice what one RTT brought, plus its growth
    /// (or, below `tcp_rcvbuf_low_rtt`, a share of it in proportion to the RTT), plus
    /// the out-of-order data; `sk_rcvbuf` up to `tcp_rmem[2]`, the clamp with it.
    fn rcvbuf_grow(&mut self, newval: u64) {
        let old = self.rcvq_space;
        self.rcvq_space = newval;
        let mut rcvwin = newval << 1;
        let rtt = self.rcv_rtt_us >> 3;
        let grow = if rtt < RCVBUF_LOW_RTT_US {
            rcvwin * rtt / RCVBUF_LOW_RTT_US
        } else {
            (rcvwin << 1) * (newval - old) / old.max(1)
        };
        rcvwin += grow;
        if let Some((_, &e)) = self.ofo.iter().next_back() {
            rcvwin += e - self.rcv_nxt;
        }
        let space = ((rcvwin << RMEM_TO_WIN_SCALE) / u64::from(self.scaling_ratio)).min(u64::from(u32::MAX));
        let rcvbuf = (space as u32).min(self.rmem[2]);
        if rcvbuf > self.rcvbuf {
            self.rcvbuf = rcvbuf;
            self.window_clamp = win_from_space(self.scaling_ratio, rcvbuf);
        }
    }

    /// `tcp_rcv_rtt_update`: a new minimum is taken at once; a larger sample only
    /// from timestamps (not `win_dep`), averaged in by 1/8 (the reader keeps the
    /// receive queue empty, so that is always allowed).
    fn rcv_rtt_update(&mut self, sample_us: u64, win_dep: bool) {
        let m = sample_us << 3;
        if self.rcv_rtt_us == 0 || m < self.rcv_rtt_us {
            self.rcv_rtt_us = m;
        } else if !win_dep {
            self.rcv_rtt_us = self.rcv_rtt_us - (self.rcv_rtt_us >> 3) + sample_us;
        }
    }

    /// `tcp_rcv_rtt_measure`: the time one window takes to arrive.
    fn rcv_rtt_measure(&mut self, now: Instant) {
        let t = super::us(now);
        if let Some(start) = self.rcv_rtt_time {
            if self.rcv_nxt < self.rcv_rtt_seq {
                return;
            }
            self.rcv_rtt_update(t.saturating_sub(start).max(1), true);
        }
        self.rcv_rtt_seq = self.rcv_nxt + self.rcv_wnd;
        self.rcv_rtt_time = Some(t);
    }

    /// `tcp_rcv_rtt_measure_ts`: a segment of at least `rcv_mss` echoing a TSval not
    /// sampled yet gives the time since that ACK left, in whole ms (`TCP_TS_HZ` =
    /// 1000: 0 ms is no sample).
    fn rcv_rtt_measure_ts(&mut self, seg: &Segment) {
        if seg.tsecr == self.rcv_rtt_last_tsecr {
            return;
        }
        self.rcv_rtt_last_tsecr = seg.tsecr;
        if seg.len >= self.rcv_mss {
            let delta_ms = self.tsval.wrapping_sub(seg.tsecr);
            if delta_ms > 0 && delta_ms < i32::MAX as u32 / 1000 {
                self.rcv_rtt_update(u64::from(delta_ms) * 1000, false);
            }
        }
    }

    /// `tcp_receive_window`: what is left of the window last offered.
    fn receive_window(&self) -> u64 {
        (self.rcv_wup + self.rcv_wnd).saturating_sub(self.rcv_nxt)
    }

    /// `tcp_space`: the free buffer as window.
    fn space(&self) -> i64 {
        let free = i64::from(self.rcvbuf) - i64::from(self.rmem_alloc) - self.ofo_bytes() as i64;
        (free * i64::from(self.scaling_ratio)) >> RMEM_TO_WIN_SCALE
    }

    /// `tcp_full_space`.
    fn full_space(&self) -> u32 {
        win_from_space(self.scaling_ratio, self.rcvbuf)
    }

    /// `__tcp_select_window` (no `tcp_shrink_window`, no memory pressure): the free
    /// space, at most `rcv_ssthresh`, aligned up to the window scale; 0 when the
    /// free space is below an MSS or 1/16 of the buffer.
    fn select_window_raw(&mut self) -> u32 {
        let allowed = self.full_space() as i64;
        let full = i64::from(self.window_clamp).min(allowed);
        let mut mss = i64::from(self.rcv_mss);
        if mss > full {
            mss = full;
            if mss <= 0 {
                return 0;
            }
        }
        let mut free = self.space();
        if free < full >> 1 {
            self.quick = 0;
            free &= !((1i64 << self.rcv_wscale) - 1);
            if free < allowed >> 4 || free < mss {
                return 0;
            }
        }
        let free = free.min(i64::from(self.rcv_ssthresh)).max(0) as u32;
        if self.rcv_wscale > 0 {
            free.next_multiple_of(1 << self.rcv_wscale)
        } else {
            // Without scaling: a multiple of the MSS, kept if within one MSS.
            let (w, mss) = (self.rcv_wnd as i64, mss);
            if w <= i64::from(free) - mss || w > i64::from(free) {
                (i64::from(free) / mss * mss) as u32
            } else if mss == full && i64::from(free) > w + (full >> 1) {
                free
            } else {
                w as u32
            }
        }
    }

    /// `tcp_select_window`: the window this ACK offers, never moving the right edge
    /// back; becomes `rcv_wnd` from `rcv_wup` = `rcv_nxt`. Returns it in bytes as the
    /// sender reads it (the 16-bit field shifted by the scale).
    fn select_window(&mut self) -> u64 {
        let cur = self.receive_window();
        let mut new = u64::from(self.select_window_raw());
        if new < cur {
            new = cur.next_multiple_of(1 << self.rcv_wscale);
        }
        self.rcv_wnd = new;
        self.rcv_wup = self.rcv_nxt;
        (new.min(u64::from(u16::MAX) << self.rcv_wscale) >> self.rcv_wscale) << self.rcv_wscale
    }

    /// `tcp_grow_window` for a skb of `len` payload bytes and `truesize`: if the skb
    /// is worth its room in the buffer, `rcv_ssthresh` opens by 2 × max(advmss, len)
    /// (`__tcp_grow_window`'s slower test: 2 × rcv_mss), up to the clamp or the free
    /// space, and a quick ACK is granted.
    fn grow_window(&mut self, len: u32, truesize: u32) {
        let room = i64::from(self.window_clamp).min(self.space()) - i64::from(self.rcv_ssthresh);
        if room <= 0 {
            return;
        }
        let mut incr = 0;
        if win_from_space(self.scaling_ratio, truesize) <= len {
            incr = 2 * self.tp_advmss;
        } else {
            // __tcp_grow_window: a skb of worse ratio still opens a small window.
            let mut t = win_from_space(self.scaling_ratio, truesize) >> 1;
            let mut window = win_from_space(self.scaling_ratio, self.rmem[2]) >> 1;
            while self.rcv_ssthresh <= window {
                if t <= len {
                    incr = 2 * self.rcv_mss;
                    break;
                }
                t >>= 1;
                window >>= 1;
            }
        }
        if incr > 0 {
            let incr = incr.max(2 * len);
            self.rcv_ssthresh += (i64::from(incr)).min(room) as u32;
            self.quick |= 1;
        }
    }

    /// `tcp_set_window_clamp`.
    fn set_window_clamp(&mut self, val: u32) {
        let new = val.max(MIN_WINDOW_CLAMP);
        if new == self.window_clamp {
            return;
        }
        if new < self.window_clamp {
            self.rcv_ssthresh = self.rcv_ssthresh.min(new);
        } else {
            let t = (self.rcv_wnd.min(u64::from(new))) as u32;
            self.rcv_ssthresh = self.rcv_ssthresh.max(t);
        }
        self.window_clamp = new;
    }

    /// A data segment arrived (`ce`: the IP header carried CE). Returns the ACK to send
    /// now, or `None` (delayed; see `next_timer`).
    pub fn on_segment(&mut self, seg: &Segment, ce: bool, now: Instant) -> Option<Ack> {
        if seg.len == 0 {
            return None;
        }
        self.tsval = super::ts_ms(now);
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
        self.rcv_rtt_measure_ts(seg);
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
        } else if seq >= self.rcv_wup + self.rcv_wnd {
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
        self.rmem_alloc = 0;
        self.stash.pop_front().map(|(_, a)| a)
    }

    /// The in-sequence branch of `tcp_data_queue`.
    fn queue_in_order(&mut self, seg: &Segment, end: u64, ce: bool, now: Instant) {
        // The skb holds its truesize of the buffer while its softirq runs (with what
        // it releases from the out-of-order queue); the reader takes it right after.
        self.rmem_alloc = super::truesize_of_payload(seg.len);
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
        self.rcv_rtt_measure(now);
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
        if seg.len >= 128 {
            // truesize_adjust: the payload sits in page frags, the head goes.
            self.grow_window(seg.len, seg.len);
        }
    }

    /// `tcp_data_queue_ofo`. Returns an ACK if SACK compression had to be flushed.
    fn queue_ofo(&mut self, seg: &Segment, seq: u64, end: u64, ce: bool) -> Option<Ack> {
        self.ecn_check(seg, ce);
        self.measure_rcv_mss(seg);
        self.ack_sched = true;
        let coalesced = self.ofo.range(..seq).next_back().is_some_and(|(_, &e)| e == seq);
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
        // tcp_data_queue_ofo: with SACK the window grows here too; a skb that extends
        // the last out-of-order block coalesces into it (its head freed), another keeps
        // its head in the buffer.
        self.ofo.insert(start, stop);
        if let Some((a, b)) = dup {
            self.dsack_set(a, b);
        }
        if self.sack_ok && dup.is_none() {
            let truesize = if coalesced { seg.len } else { super::truesize_of_payload(seg.len) };
            self.grow_window(seg.len, truesize);
        }
        // 6.18: the buffer makes room for the out-of-order data at once.
        self.rcvbuf_grow(self.rcvq_space);
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
            self.rmem_alloc += (e - s) as u32;
            if e > self.rcv_nxt {
                self.rcv_nxt = e;
            }
        }
    }

    /// `tcp_measure_rcv_mss`; when the MSS guess changes, `scaling_ratio` is measured
    /// on this skb and the clamp follows the buffer's new window.
    fn measure_rcv_mss(&mut self, seg: &Segment) {
        let len = if seg.segs > 1 { seg.len.div_ceil(seg.segs as u32) } else { seg.len };
        if len >= self.rcv_mss {
            if len != self.rcv_mss {
                let ratio = (u64::from(seg.len) << RMEM_TO_WIN_SCALE) / u64::from(super::truesize_of_payload(seg.len));
                let old = self.scaling_ratio;
                self.scaling_ratio = (ratio as u32).max(1);
                if old != self.scaling_ratio {
                    self.set_window_clamp(self.full_space());
                    self.rcvq_space = self.rcvq_space.min(u64::from(self.window_clamp));
                }
            }
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

    /// An ACK of `rcv_nxt` = `ack` with the current options, changing no ACK state
    /// (the window: the one last offered, as the sender would read it).
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
        let right = self.rcv_wup + self.rcv_wnd;
        let rwnd = (right.saturating_sub(ack).min(u64::from(u16::MAX) << self.rcv_wscale) >> self.rcv_wscale)
            << self.rcv_wscale;
        Ack { ack, sack, ece: self.ecn_ok && self.demand_cwr, tsecr: self.ts_recent, tsval: self.tsval, rwnd }
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
        // Every second segment only if the right edge does not move back (else the
        // read's tcp_cleanup_rbuf ACKs).
        let two =
            self.rcv_nxt - self.rcv_wup > self.rcv_mss as u64 && u64::from(self.select_window_raw()) >= self.rcv_wnd;
        if two || self.in_quickack_mode() || self.ack_now {
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
        // A share of the RTT (the receiver's, or the handshake's if smaller; µs × 8),
        // at most tcp_comp_sack_delay_ns: 6.12's 5 %, or 6.18's percent (× 1.25 ns).
        let mut rtt = self.rcv_rtt_us;
        if self.srtt_us != 0 && self.srtt_us < rtt {
            rtt = self.srtt_us;
        }
        let share = match self.comp_sack_rtt_percent {
            None => rtt * 125 / 20,
            Some(p) => (rtt + (rtt >> 2)) * u64::from(p),
        };
        let delay = COMP_SACK_DELAY_NS.min(share);
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
        let mut ack = self.ack_at(self.rcv_nxt);
        ack.rwnd = self.select_window();
        self.dsack = None;
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
            tsecr: 0,
        }
    }

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// 16 quick ACKs, then one ACK per two full segments; a lone segment waits for the
    /// delayed-ACK timer: ato = TCP_ATO_MIN = 10 jiffies at HZ=250, from the current jiffy.
    #[test]
    fn quickack_then_every_second_segment_then_delack_timer() {
        let mut r = TcpReceiver::new(&cfg(), Instant::ZERO).grown();
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
    /// (min(1 ms, 5 % of min(receiver RTT, srtt) = 20 ms)); filling the hole ACKs at
    /// once; a duplicate is D-SACKed.
    #[test]
    fn sack_dsack_and_compression() {
        let mut r = TcpReceiver::new(&cfg(), Instant::ZERO).grown();
        // The receiver's RTT, measured (without one the kernel's delay is 0).
        r.rcv_rtt_us = 20_000 << 3;
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
        let mut r = TcpReceiver::new(&TcpConfig { ecn: true, ..cfg() }, Instant::ZERO).grown();
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

    /// A veth's GSO skb of `n` segments from segment `i` on (it reaches the receiver whole).
    fn gso(i: u64, n: u64, sent_ms: u64) -> Segment {
        Segment { len: (n * M) as u32, segs: n as u16, ..seg(i, sent_ms) }
    }

    /// Default tcp_rmem, 1-MSS skbs: the SYN-ACK offers rounddown(131072/2, 1448) = 65160
    /// with scale 7; init_buffer_space clamps to 65536 − 1460 = 64076. The first skb
    /// measures scaling_ratio = 1448·256/(1448+960) = 153, so the clamp becomes
    /// 131072·153/256 = 78336 and rcv_ssthresh the SYN-ACK's 65160; each skb then adds
    /// 2·advmss = 2920 up to the free space while it is queued, (131072−2408)·153/256 =
    /// 76896 (the fifth adds only 56), and every offer is aligned up to 128.
    #[test]
    fn window_opens_step_by_step_on_single_segments() {
        let c = TcpConfig::default();
        assert_eq!(synack_window(&c), 65160);
        assert_eq!(initial_window(&c), (65160, 65535 << 7, 7));
        let mut r = TcpReceiver::new(&c, Instant::ZERO);
        assert_eq!((r.window_clamp, r.rcv_ssthresh, r.rcv_mss), (64076, 64076, 536));
        let want = [68096, 71040, 73984, 76928, 76928, 76928, 76928];
        for (i, w) in want.into_iter().enumerate() {
            let a = r.on_segment(&seg(i as u64, 0), false, ms(1)).expect("quick ack");
            assert_eq!(a.rwnd, w, "skb {i}");
        }
        assert_eq!((r.scaling_ratio, r.window_clamp, r.rcv_ssthresh), (153, 78336, 76896));
        // Each of the five skbs that grew the window granted a quick ACK (quick |= 1 on
        // an even count): 16 + 5 ACKs at once, the 22nd skb waits.
        for i in 7..21 {
            assert!(r.on_segment(&seg(i, 0), false, ms(1)).is_some(), "skb {i}");
        }
        assert_eq!(r.on_segment(&seg(21, 0), false, ms(1)), None);
    }

    /// GSO skbs of 10 segments (a veth hands them over whole): scaling_ratio 14480·256/
    /// 15440 = 240, clamp 131072·240/256 = 122880; each skb adds 2·14480 up to the free
    /// space while it is queued, (131072−15440)·240/256 = 108405. A 30-segment skb
    /// leaves (131072−44400)·240/256 = 81255: the window would move back, so the
    /// softirq does not ACK it (__tcp_ack_snd_check); the read does, with the buffer
    /// empty again (tcp_cleanup_rbuf).
    #[test]
    fn gso_skbs_measure_the_ratio_and_a_big_skb_waits_for_the_read() {
        let mut r = TcpReceiver::new(&TcpConfig::default(), Instant::ZERO);
        let a = r.on_segment(&gso(0, 10, 0), false, ms(1)).unwrap();
        assert_eq!((r.scaling_ratio, r.window_clamp, r.rcv_ssthresh), (240, 122880, 94120));
        assert_eq!(a.rwnd, 94208);
        let a = r.on_segment(&gso(10, 10, 0), false, ms(1)).unwrap();
        assert_eq!((r.rcv_ssthresh, a.rwnd), (108405, 108416));
        assert_eq!(r.on_read(ms(1)), None, "a window of 108416 is more than half the clamp");
        // The quick ACKs run out: 16, each grant having put one back.
        for k in 2..18 {
            let a = r.on_segment(&gso(10 * k, 10, 0), false, ms(1)).expect("quick ack");
            assert_eq!(a.rwnd, 108416);
        }
        // Not quick any more: every second segment, the window holding.
        let a = r.on_segment(&gso(180, 10, 0), false, ms(1)).expect("more than one MSS");
        assert_eq!((a.ack, a.rwnd), (190 * M, 108416));
        assert_eq!(r.on_segment(&gso(190, 30, 0), false, ms(1)), None);
        let a = r.on_read(ms(1)).expect("the read ACKs");
        assert_eq!((a.ack, a.rwnd), (220 * M, 108416));
        assert_eq!(r.next_timer(), None);
    }

    /// DRS: the receiver's RTT is the time one window takes to arrive (from the first
    /// skb, seq 1448 + 65160 = 66608, reached 20 ms later); the read that ends that RTT
    /// finds 66608 bytes read against rcvq_space 14600 (TCP_INIT_CWND × advmss), so
    /// tcp_rcvbuf_grow sizes the buffer for rcvwin = 2 × 66608 + 4 × 66608 × (66608 −
    /// 14600) / 14600 = 1082297 bytes of window: 1082297 × 256 / 153 = 1810902 bytes,
    /// and the clamp 1810902 × 153 / 256 = 1082296. Then the window grows by 2920 per skb.
    #[test]
    fn drs_grows_the_buffer_once_an_rtt_is_measured() {
        let mut r = TcpReceiver::new(&TcpConfig::default(), Instant::ZERO);
        for i in 0..45 {
            r.on_segment(&seg(i, 0), false, ms(1));
            r.on_read(ms(1));
        }
        assert_eq!((r.rcv_rtt_us, r.rcvq_space, r.rcvbuf), (0, 14600, 131072));
        r.on_segment(&seg(45, 0), false, ms(21));
        assert_eq!(r.rcv_rtt_us, 20_000 << 3);
        r.on_read(ms(21));
        assert_eq!((r.rcvq_space, r.rcvbuf, r.window_clamp), (66608, 1810902, 1082296));
        // The next RTT is not over yet: nothing changes.
        r.on_segment(&seg(46, 0), false, ms(30));
        r.on_read(ms(30));
        assert_eq!((r.rcvq_space, r.rcvbuf), (66608, 1810902));
        let before = r.rcv_ssthresh;
        let a = r.on_segment(&seg(47, 0), false, ms(31)).expect("growth grants a quick ACK");
        assert_eq!(r.rcv_ssthresh, before + 2920);
        assert_eq!(a.rwnd, u64::from(r.rcv_ssthresh).next_multiple_of(128));
        // The buffer stops at tcp_rmem[2].
        r.rcvbuf_grow(1 << 30);
        assert_eq!(r.rcvbuf, 6291456);
    }

    /// `tcp_rcv_rtt_measure_ts`: each data segment echoing a TSval not sampled yet
    /// gives an RTT in whole ms, taken at once if a new minimum and else averaged in
    /// by 1/8; a segment echoing within the same ms, or shorter than `rcv_mss`, gives
    /// none. ACKs carry the receiver's clock (`ts_ms`: ms + 1).
    #[test]
    fn receiver_rtt_from_timestamps() {
        let mut r = TcpReceiver::new(&TcpConfig::default(), Instant::ZERO);
        let echo = |i: u64, tsecr: u32| Segment { tsecr, ..seg(i, 0) };
        // The first data echoes the SYN-ACK's TSval (sent at 0 ms: 1), 1 ms ago.
        let a = r.on_segment(&echo(0, 1), false, ms(1)).expect("quick ACK");
        assert_eq!((r.rcv_rtt_us, a.tsval), (1000 << 3, 2));
        // The same echo again: no sample, even 10 ms later.
        r.on_segment(&echo(1, 1), false, ms(11));
        assert_eq!(r.rcv_rtt_us, 1000 << 3);
        // The ACK of 1 ms comes back on data at 12 ms: 11 ms, above the estimate.
        r.on_segment(&echo(2, 2), false, ms(12));
        assert_eq!(r.rcv_rtt_us, 8000 - 1000 + 11_000);
        // An echo of this very ms: 0 ms is no sample (but it is the last seen).
        r.on_segment(&echo(3, 13), false, ms(12));
        assert_eq!((r.rcv_rtt_us, r.rcv_rtt_last_tsecr), (18_000, 13));
        // A short segment is no sample either.
        r.on_segment(&Segment { len: 100, ..echo(4, 10) }, false, ms(13));
        assert_eq!((r.rcv_rtt_us, r.rcv_rtt_last_tsecr), (18_000, 10));
        // A smaller sample is the new estimate at once: 2 ms.
        r.on_segment(&Segment { seq: 4 * M + 100, ..echo(5, 12) }, false, ms(13));
        assert_eq!(r.rcv_rtt_us, 2000 << 3);
    }
}
