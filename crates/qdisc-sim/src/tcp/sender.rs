//! The TCP sender: ACK processing and the congestion state machine
//! (`tcp_ack` and `tcp_fastretrans_alert` in tcp_input.c).
//!
//! # States (`icsk_ca_state`)
//!
//! * **Open**: nothing suspicious; cwnd grows (slow start / congestion avoidance).
//! * **Disorder**: SACKs or dupacks seen but no loss proven yet; cwnd still grows
//!   on cumulative ACKs.
//! * **CWR**: cwnd is being reduced for a congestion *notification* (ECE, a local
//!   qdisc drop/`NET_XMIT_CN`, or a loss repaired by a tail loss probe). Held until
//!   something above `high_seq` (snd_nxt at entry) is acked, so the CWR flag reaches
//!   the receiver; then cwnd = ssthresh.
//! * **Recovery**: loss detected by RACK (or NewReno without SACK); lost segments
//!   are retransmitted while PRR (RFC 6937, `tcp_cwnd_reduction`) brings cwnd down
//!   to ssthresh over one round trip: while in flight > ssthresh it sends
//!   ⌈ssthresh · delivered / prior_cwnd⌉ − sent, otherwise it conserves packets
//!   (plus one per ACK that advances snd_una without new loss, a slow start back
//!   up to ssthresh). Ends when `high_seq` is acked: cwnd = ssthresh.
//! * **Loss**: after an RTO: everything outstanding (sent more than a RACK RTT ago)
//!   is marked lost, cwnd = in flight + 1 (normally 1), ssthresh from the module,
//!   slow start back up; F-RTO sends new data after the first retransmission is
//!   acked to detect a spurious timeout.
//!
//! Each reduction (Recovery, Loss) remembers `prior_ssthresh`/`prior_cwnd` and can be
//! undone when D-SACKs show every retransmission was unnecessary, or when the
//! timestamp echo shows the original transmission was delivered (Eifel, RFC 3522).
//! ECN-triggered reductions are never undone.
//!
//! # One ACK (`tcp_ack`)
//!
//! window update → SACK tagging → cumulative ACK (RTT samples, RACK advance,
//! HyStart) → TLP bookkeeping → loss detection and state machine (only for
//! "dubious" ACKs: duplicate, SACK, ECE, or not Open) → RTO/TLP timer → cwnd
//! (reduction or growth) → pacing rate. Transmissions that the kernel does at the end
//! of `tcp_ack` happen in the next [`TcpSender::poll_transmit`] calls.

use std::collections::VecDeque;

use qdisc::{Duration, Instant};

use super::bbr::{Bbr, BbrSock};
use super::cubic::{Ctx, Cubic};
use super::dctcp::Dctcp;
use super::output::{Output, Phase};
use super::rack::Rack;
use super::rate::RateSample;
use super::reno::{self, Window};
use super::rtt::{MinMax, RttEstimator};
use super::sack::{SackState, Scoreboard, E, L};
use super::timer::XmitTimer;
use super::{ts_ms, us, Ack, CaState, CongestionControl, Hz, PacingStatus, SenderStats, TcpConfig, INFINITE_SSTHRESH};

pub(super) const FLAG_DATA: u32 = 0x01;
pub(super) const FLAG_WIN_UPDATE: u32 = 0x02;
pub(super) const FLAG_DATA_ACKED: u32 = 0x04;
pub(super) const FLAG_RETRANS_DATA_ACKED: u32 = 0x08;
pub(super) const FLAG_DATA_SACKED: u32 = 0x20;
pub(super) const FLAG_ECE: u32 = 0x40;
pub(super) const FLAG_LOST_RETRANS: u32 = 0x80;
pub(super) const FLAG_ORIG_SACK_ACKED: u32 = 0x200;
pub(super) const FLAG_SND_UNA_ADVANCED: u32 = 0x400;
pub(super) const FLAG_DSACKING_ACK: u32 = 0x800;
pub(super) const FLAG_SET_XMIT_TIMER: u32 = 0x1000;
pub(super) const FLAG_SACK_RENEGING: u32 = 0x2000;
pub(super) const FLAG_DSACK_TLP: u32 = 0x20000;
pub(super) const FLAG_ACKED: u32 = FLAG_DATA_ACKED;
pub(super) const FLAG_NOT_DUP: u32 = FLAG_DATA | FLAG_WIN_UPDATE | FLAG_ACKED;
pub(super) const FLAG_CA_ALERT: u32 = FLAG_DATA_SACKED | FLAG_ECE | FLAG_DSACKING_ACK;
pub(super) const FLAG_FORWARD_PROGRESS: u32 = FLAG_ACKED | FLAG_DATA_SACKED;

/// `net.ipv4.tcp_reordering`.
pub(super) const SYSCTL_REORDERING: u32 = 3;

/// What `tcp_fastretrans_alert` asks the output path to do (`REXMIT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rexmit {
    None,
    /// Retransmit segments marked lost.
    Lost,
    /// F-RTO: send new data first.
    New,
}

/// The congestion control module.
#[derive(Clone, Debug)]
pub(super) enum Cc {
    Reno,
    Cubic(Box<Cubic>),
    Bbr(Box<Bbr>),
    Dctcp(Box<Dctcp>),
}

/// A Linux-like TCP bulk sender. See the [module docs](super) for the driving contract.
#[derive(Clone, Debug)]
pub struct TcpSender {
    pub(super) cfg: TcpConfig,
    pub(super) hz: Hz,
    pub(super) mss: u32,
    /// `tcp_mstamp` / `tcp_clock_cache`: the time of the current entry point.
    pub(super) now: Instant,

    pub(super) snd_una: u64,
    pub(super) snd_nxt: u64,
    /// Bytes the application has written into the socket (`write_seq`); `None`: it
    /// never wrote, and the sender has unlimited data queued (the unit tests' source).
    pub(super) written: Option<u64>,
    /// `sk_sndbuf`, bytes of truesize.
    pub(super) sndbuf: u64,
    /// `SOCK_NOSPACE`: a write found the buffer full and waits for room.
    pub(super) nospace: bool,
    /// `sk_stream_write_space` woke the waiting writer (taken by [`Self::take_write_space`]).
    pub(super) write_space: bool,
    /// An ACK was processed: its push ends with `tcp_check_space` (`tcp_data_snd_check`).
    pub(super) ack_space_check: bool,
    pub(super) snd_wnd: u64,
    pub(super) max_window: u64,
    pub(super) sb: Scoreboard,

    pub(super) w: Window,
    pub(super) cc: Cc,
    pub(super) prior_cwnd: u32,
    pub(super) prior_ssthresh: u32,
    pub(super) prr_delivered: u32,
    pub(super) prr_out: u32,
    pub(super) high_seq: u64,
    pub(super) undo_marker: Option<u64>,
    pub(super) undo_retrans: i32,
    /// TSval (ms) of the first retransmission of the episode, 0 = none.
    pub(super) retrans_stamp: u32,
    pub(super) ca_state: CaState,
    pub(super) is_cwnd_limited: bool,
    pub(super) max_packets_out: u32,
    pub(super) cwnd_usage_seq: u64,
    pub(super) reordering: u32,
    pub(super) reord_seen: u32,
    pub(super) is_sack_reneg: bool,
    pub(super) frto: bool,

    pub(super) rtt: RttEstimator,
    pub(super) rtt_min: MinMax,
    /// `icsk_rto`, jiffies (backoff included).
    pub(super) rto_j: u32,
    pub(super) backoff: u32,
    /// `icsk_retransmits`: consecutive timeouts.
    pub(super) retransmits: u32,
    /// TSecr of the ACK being processed (ms clock, 0 = none).
    pub(super) rcv_tsecr: u32,
    /// `rx_opt.ts_recent`: the TSval to echo on data (ms clock, 0 = none).
    pub(super) ts_recent: u32,

    pub(super) rack: Rack,
    pub(super) tlp_high_seq: Option<u64>,
    pub(super) tlp_retrans: bool,
    pub(super) dsack_dups: u64,

    pub(super) ecn_ok: bool,
    /// `TCP_ECN_QUEUE_CWR`: set CWR on the next new data segment.
    pub(super) queue_cwr: bool,

    pub(super) xmit_timer: Option<XmitTimer>,
    pub(super) pacing_timer: Option<Instant>,

    pub(super) pacing_rate: u64,
    pub(super) pacing_status: PacingStatus,
    /// `tcp_wstamp_ns`: EDT of the next skb.
    pub(super) wstamp_ns: u64,
    pub(super) first_tx_mstamp: u64,
    pub(super) lsndtime: u32,

    pub(super) data_segs_out: u64,
    pub(super) bytes_sent: u64,
    pub(super) bytes_retrans: u64,
    pub(super) bytes_acked: u64,
    pub(super) total_retrans: u64,
    pub(super) delivered: u64,
    pub(super) delivered_ce: u64,
    /// `delivered_mstamp`, µs: when `delivered` last grew (or the first send after idle).
    pub(super) delivered_mstamp: u64,
    /// `tp->app_limited`: `delivered` (as the kernel's u32) at the end of the
    /// app-limited bubble, 0 = none.
    pub(super) app_limited: u32,
    /// The last rate sample kept for `tcpi_delivery_rate` (`rate_delivered`,
    /// `rate_interval_us`, `rate_app_limited`).
    pub(super) rate_delivered: u64,
    pub(super) rate_interval_us: u64,
    pub(super) rate_app_limited: bool,
    pub(super) lost: u64,
    pub(super) rto_count: u64,
    pub(super) tlp_count: u64,
    pub(super) undo_count: u64,

    pub(super) out: Output,
    pub(super) next_skb_id: u64,
    pub(super) next_order: u64,
    /// End of the skb at the head of the write queue (sendmsg builds `size_goal` skbs).
    pub(super) head_end: u64,
    /// `TSQ_THROTTLED`: the last transmit attempt was stopped by TCP Small Queues.
    pub(super) tsq_throttled: bool,
}

impl TcpSender {
    /// A connection established at `now` with unlimited data to send.
    ///
    /// With [`TcpConfig::syn_rtt`] the state is what a client has after its SYN-ACK
    /// (`tcp_finish_connect` → `tcp_init_transfer`, see [`super::handshake`]): one RTT
    /// sample (srtt, RTO = srtt + max(2·srtt, rto_min), min_rtt), cwnd 10 (1 after
    /// [`TcpConfig::syn_cwnd_one`]), ssthresh infinite (`tcp_init_metrics`), the SYN
    /// retransmissions in the retransmit count, and a pacing rate of 200 % × cwnd ×
    /// MSS / srtt. Otherwise srtt is unknown and the RTO is `TCP_TIMEOUT_INIT` (1 s).
    pub fn new(cfg: TcpConfig, now: Instant) -> Self {
        let hz = Hz(cfg.hz);
        let mss = cfg.mss;
        let cc = match cfg.cc {
            CongestionControl::Reno => Cc::Reno,
            CongestionControl::Cubic => Cc::Cubic(Box::default()),
            // Initialised below, once the handshake's RTT sample is in (tcp_init_transfer);
            // dctcp without ECN stays "dctcp-reno": Reno's hooks.
            CongestionControl::Bbr | CongestionControl::Dctcp => Cc::Reno,
        };
        let mut s = TcpSender {
            hz,
            mss,
            now,
            snd_una: 0,
            snd_nxt: 0,
            written: None,
            // tcp_init_sock; tcp_init_buffer_space expands it below.
            sndbuf: cfg.wmem[1] as u64,
            nospace: false,
            write_space: false,
            ack_space_check: false,
            snd_wnd: super::receiver::synack_window(&cfg),
            max_window: super::receiver::synack_window(&cfg),
            sb: Scoreboard::new(mss),
            w: Window {
                cwnd: if cfg.syn_cwnd_one { 1 } else { cfg.initial_cwnd },
                ssthresh: INFINITE_SSTHRESH,
                cwnd_cnt: 0,
                clamp: u32::MAX,
            },
            cc,
            prior_cwnd: 0,
            prior_ssthresh: 0,
            prr_delivered: 0,
            prr_out: 0,
            high_seq: 0,
            undo_marker: None,
            undo_retrans: -1,
            retrans_stamp: 0,
            ca_state: CaState::Open,
            is_cwnd_limited: false,
            max_packets_out: 0,
            cwnd_usage_seq: 0,
            reordering: SYSCTL_REORDERING,
            reord_seen: 0,
            is_sack_reneg: false,
            frto: false,
            rtt: RttEstimator::default(),
            rtt_min: MinMax::new(hz.jiffies32(now), u32::MAX),
            rto_j: cfg.hz, // TCP_TIMEOUT_INIT = 1 s
            backoff: 0,
            retransmits: 0,
            rcv_tsecr: 0,
            ts_recent: cfg.synack_tsval,
            rack: Rack::default(),
            tlp_high_seq: None,
            tlp_retrans: false,
            dsack_dups: 0,
            ecn_ok: cfg.ecn,
            queue_cwr: false,
            xmit_timer: None,
            pacing_timer: None,
            pacing_rate: u64::MAX,
            pacing_status: cfg.pacing_status,
            wstamp_ns: now.as_nanos(),
            first_tx_mstamp: 0,
            lsndtime: hz.jiffies32(now),
            data_segs_out: 0,
            bytes_sent: 0,
            bytes_retrans: 0,
            bytes_acked: 0,
            total_retrans: cfg.syn_retrans as u64,
            delivered: 0,
            delivered_ce: 0,
            delivered_mstamp: 0,
            // tcp_init_sock: ~0U, so the initial window's samples are app-limited.
            app_limited: u32::MAX,
            rate_delivered: 0,
            rate_interval_us: 0,
            rate_app_limited: false,
            lost: 0,
            rto_count: 0,
            tlp_count: 0,
            undo_count: 0,
            out: Output::default(),
            next_skb_id: 1,
            next_order: 1,
            head_end: 0,
            tsq_throttled: false,
            cfg,
        };
        s.head_end = s.size_goal();
        if let Cc::Cubic(c) = &mut s.cc {
            let ctx = Ctx {
                jiffies: hz.jiffies32(now),
                now_us: us(now) as u32,
                hz: hz.0,
                snd_una: 0,
                snd_nxt: 0,
                pacing_rate: u64::MAX,
                unpaced: s.pacing_status == PacingStatus::None,
                gso_max_size: s.cfg.gso_max_size,
            };
            **c = Cubic::new(&ctx);
        }
        if let Some(r) = s.cfg.syn_rtt {
            let r_us = (r.as_nanos() / 1000).max(1) as u32;
            s.rtt.sample(r_us, 0, 0, s.rto_min_us());
            s.rto_j = s.rtt.rto_jiffies(hz);
            s.rtt_min = MinMax::new(hz.jiffies32(now), r_us);
            s.update_pacing_rate();
        }
        // tcp_init_congestion_control for the modules with state of their own.
        match s.cfg.cc {
            CongestionControl::Bbr => {
                let mut sk = s.bbr_sock();
                let b = Bbr::new(&mut sk, s.cfg.seed);
                s.bbr_write(&sk);
                s.cc = Cc::Bbr(Box::new(b));
                // bbr_init: SK_PACING_NONE → SK_PACING_NEEDED (TCP paces itself unless fq does).
                if s.pacing_status == PacingStatus::None {
                    s.pacing_status = PacingStatus::Needed;
                }
            }
            // dctcp_init: with ECN; without it the module falls back to dctcp-reno.
            CongestionControl::Dctcp if s.ecn_ok => {
                s.cc = Cc::Dctcp(Box::new(Dctcp::new(s.snd_nxt, s.delivered, s.delivered_ce)));
            }
            CongestionControl::Dctcp => {}
            CongestionControl::Cubic | CongestionControl::Reno => {}
        }
        // tcp_init_transfer → tcp_init_buffer_space (SOCK_SNDBUF_LOCK never set here).
        s.sndbuf_expand();
        // The application has data queued: the first poll sends the initial window.
        s.out.plan = VecDeque::from([Phase::New]);
        s
    }

    /// Bytes queued by the application and not sent yet (`tcp_write_queue_empty` when 0).
    pub(super) fn unsent_bytes(&self) -> u64 {
        match self.written {
            Some(w) => w - self.snd_nxt,
            None => u64::MAX,
        }
    }

    /// `tcp_sendmsg_locked` for a blocking `write()` of `bytes` at `now`: the bytes are
    /// appended to the write queue's tail skb up to `size_goal`, and a new skb is
    /// started only while `sk_stream_memory_free` holds (so the queue may end one skb
    /// beyond `sk_sndbuf`). Returns the bytes taken; fewer than `bytes` means the
    /// writer waits (`SOCK_NOSPACE`): after pushing what it wrote (the caller runs the
    /// poll loop) it goes on while [`Self::memory_free`] holds, else it sleeps until
    /// [`Self::take_write_space`]. `wmem_alloc` as for `poll_transmit`: first the call
    /// checks whether the socket had run dry (`tcp_rate_check_app_limited`), then
    /// whether it had been idle ([`Self::slow_start_after_idle_check`], from
    /// `tcp_skb_entail`: the queue is empty then, so the write starts a new skb).
    pub fn sendmsg(&mut self, bytes: u64, wmem_alloc: u64, now: Instant) -> u64 {
        self.now = now;
        self.rate_check_app_limited(wmem_alloc);
        self.slow_start_after_idle_check();
        let mut written = self.written.unwrap_or(self.snd_nxt);
        self.written = Some(written);
        let mut left = bytes;
        while left > 0 {
            let sg = self.size_goal();
            let unsent = written - self.snd_nxt;
            // Room in the tail skb (the queue holds size_goal skbs, see wmem_queued).
            let room = unsent.div_ceil(sg) * sg - unsent;
            let copy = if room > 0 {
                room.min(left)
            } else if self.memory_free(0) {
                sg.min(left)
            } else {
                self.nospace = true;
                break;
            };
            written += copy;
            left -= copy;
            self.written = Some(written);
        }
        bytes - left
    }

    /// `sk_wmem_queued`: the truesize of the skbs in the write and retransmission
    /// queues. Each skb is a head of [`super::SKB_HEAD_TRUESIZE`] plus its payload
    /// (trimming an acked head frees its bytes, `tcp_trim_head`); the retransmission
    /// queue holds the skbs its segments were last sent in (`sb.skbs`), the write queue
    /// the `size_goal` skbs `tcp_sendmsg_locked` builds (the last one partly filled).
    pub fn wmem_queued(&self) -> u64 {
        let Some(written) = self.written else { return 0 };
        let unsent_skbs = (written - self.snd_nxt).div_ceil(self.size_goal());
        super::SKB_HEAD_TRUESIZE as u64 * (self.sb.skbs as u64 + unsent_skbs) + (written - self.snd_una)
    }

    /// `sk_sndbuf`, bytes.
    pub fn sndbuf(&self) -> u64 {
        self.sndbuf
    }

    /// `__sk_stream_memory_free(sk, wake)`: below `sk_sndbuf`, and what is written but
    /// not sent (doubled for a wake-up) below `tcp_notsent_lowat` (`tcp_stream_memory_free`).
    pub fn memory_free(&self, wake: u32) -> bool {
        let notsent = self.written.map_or(0, |w| w - self.snd_nxt);
        self.wmem_queued() < self.sndbuf && (notsent << wake) < self.cfg.notsent_lowat as u64
    }

    /// Whether `sk_stream_write_space` woke the writer since the last call.
    pub fn take_write_space(&mut self) -> bool {
        std::mem::take(&mut self.write_space)
    }

    /// `tcp_sndbuf_expand`: room for twice (bbr: three times, its `sndbuf_expand`) the
    /// larger of the initial window, cwnd and reordering + 1, each segment counted as a
    /// non-GSO skb's worst case: its MSS (`mss_clamp`, the SYN's MSS option = MTU − 40)
    /// with `MAX_TCP_HEADER` and the shared info, rounded up to a power of two, plus
    /// the `sk_buff`; never shrinking, at most `tcp_wmem[2]`.
    pub(super) fn sndbuf_expand(&mut self) {
        let mss_clamp = self.mss + super::receiver::TSTAMP_ALIGNED;
        let per_mss = (mss_clamp.max(self.mss) + super::MAX_TCP_HEADER + super::SHINFO_SIZE).next_power_of_two()
            + super::SKB_STRUCT_SIZE;
        let nr_segs = 10.max(self.w.cwnd).max(self.reordering + 1);
        let factor = if matches!(self.cc, Cc::Bbr(_)) { 3 } else { 2 };
        let sndmem = factor * nr_segs as u64 * per_mss as u64;
        if self.sndbuf < sndmem {
            self.sndbuf = sndmem.min(self.cfg.wmem[2] as u64);
        }
    }

    /// `tcp_check_space` (after new data left, `tcp_event_new_data_sent`, and after an
    /// ACK's push, `tcp_data_snd_check`): for a waiting writer, `tcp_new_space` grows
    /// the buffer unless cwnd is full (`tcp_should_expand_sndbuf`; no memory pressure
    /// here), then `sk_stream_write_space` wakes it once a third of the buffer is free
    /// (`sk_stream_wspace` ≥ `sk_stream_min_wspace`) and `memory_free(1)` holds.
    pub(super) fn check_space(&mut self) {
        if !self.nospace {
            return;
        }
        if self.sb.in_flight() < self.w.cwnd {
            self.sndbuf_expand();
        }
        let queued = self.wmem_queued();
        if self.sndbuf as i64 - queued as i64 >= (queued >> 1) as i64 && self.memory_free(1) {
            self.nospace = false;
            self.write_space = true;
        }
    }

    /// `tcp_slow_start_after_idle_check`: with `net.ipv4.tcp_slow_start_after_idle`, a
    /// socket with nothing in flight whose last data left more than an RTO ago restarts
    /// its window (`tcp_cwnd_restart`, RFC 2861 §3.2): ssthresh = `tcp_current_ssthresh`,
    /// cwnd halved once per RTO of idle beyond the first, never below min(initial
    /// window, cwnd). Modules with their own `cong_control` (bbr) are exempt; the
    /// `CA_EVENT_CWND_RESTART` it sends is ignored by cubic, reno and dctcp.
    fn slow_start_after_idle_check(&mut self) {
        if !self.cfg.slow_start_after_idle || self.sb.packets_out > 0 || matches!(self.cc, Cc::Bbr(_)) {
            return;
        }
        let delta = self.hz.jiffies32(self.now).wrapping_sub(self.lsndtime) as i32;
        let rto = self.rto_j as i32;
        if delta <= rto {
            return;
        }
        let restart = self.cfg.initial_cwnd.min(self.w.cwnd);
        self.w.ssthresh = self.current_ssthresh();
        let (mut cwnd, mut left) = (self.w.cwnd, delta);
        loop {
            left -= rto;
            if left <= 0 || cwnd <= restart {
                break;
            }
            cwnd >>= 1;
        }
        self.w.cwnd = cwnd.max(restart);
    }

    /// `tcp_rto_min_us`.
    pub(super) fn rto_min_us(&self) -> u32 {
        (self.cfg.min_rto.as_nanos() / 1000) as u32
    }

    // ----- public accessors -------------------------------------------------------

    /// `sk_pacing_rate`, bytes/s (`u64::MAX` until the first RTT sample).
    pub fn pacing_rate(&self) -> u64 {
        self.pacing_rate
    }

    /// Change `sk_pacing_status` (fq sets `SK_PACING_FQ` on the socket).
    pub fn set_pacing_status(&mut self, s: PacingStatus) {
        self.pacing_status = s;
        if s != PacingStatus::Needed {
            self.pacing_timer = None;
        }
    }

    /// Current congestion window, segments.
    pub fn cwnd(&self) -> u32 {
        self.w.cwnd
    }

    /// Current congestion-avoidance state.
    pub fn ca_state(&self) -> CaState {
        self.ca_state
    }

    /// `snd_una`: everything below was cumulatively acknowledged.
    pub fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// `snd_nxt`: the next new byte to send.
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// True when the last `poll_transmit` stopped at TCP Small Queues: the simulator
    /// must run the poll loop again when one of this socket's skbs completes
    /// (`tcp_wfree` → `tcp_tsq_handler`).
    pub fn tsq_throttled(&self) -> bool {
        self.tsq_throttled
    }

    /// Counters, like `tcp_info`.
    pub fn stats(&self) -> SenderStats {
        let min_rtt = self.rtt_min.get();
        SenderStats {
            bytes_sent: self.bytes_sent,
            bytes_acked: self.bytes_acked,
            bytes_retrans: self.bytes_retrans,
            retransmits: self.total_retrans,
            cwnd: self.w.cwnd,
            snd_cwnd_bytes: self.w.cwnd as u64 * self.mss as u64,
            ssthresh: self.w.ssthresh,
            srtt: Duration::from_micros((self.rtt.srtt_us >> 3) as u64),
            rttvar: Duration::from_micros((self.rtt.mdev_us >> 2) as u64),
            rto: Duration::from_micros(self.hz.jiffies_to_usecs(self.rto_j as u64)),
            min_rtt: (min_rtt != u32::MAX).then(|| Duration::from_micros(min_rtt as u64)),
            in_flight: self.sb.in_flight(),
            packets_out: self.sb.packets_out,
            sacked_out: self.sb.sacked_out,
            lost_out: self.sb.lost_out,
            retrans_out: self.sb.retrans_out,
            delivered: self.delivered,
            lost: self.lost,
            ca_state: self.ca_state,
            pacing_rate: self.pacing_rate,
            data_segs_out: self.data_segs_out,
            rto_count: self.rto_count,
            tlp_count: self.tlp_count,
            undo_count: self.undo_count,
            delivery_rate: self.delivery_rate().0,
            delivery_rate_app_limited: self.delivery_rate().1,
        }
    }

    // ----- congestion control dispatch ----------------------------------------------

    pub(super) fn cc_ctx(&self) -> Ctx {
        Ctx {
            jiffies: self.hz.jiffies32(self.now),
            now_us: us(self.now) as u32,
            hz: self.hz.0,
            snd_una: self.snd_una,
            snd_nxt: self.snd_nxt,
            pacing_rate: self.pacing_rate,
            unpaced: self.pacing_status == PacingStatus::None,
            gso_max_size: self.cfg.gso_max_size,
        }
    }

    /// `icsk_ca_ops->ssthresh`.
    pub(super) fn cc_ssthresh(&mut self) -> u32 {
        let cwnd = self.w.cwnd;
        let sk = if matches!(self.cc, Cc::Bbr(_)) { Some(self.bbr_sock()) } else { None };
        match &mut self.cc {
            Cc::Reno => reno::ssthresh(cwnd),
            Cc::Cubic(c) => c.ssthresh(cwnd),
            Cc::Dctcp(d) => d.ssthresh(cwnd),
            Cc::Bbr(b) => b.ssthresh(sk.as_ref().expect("bbr")),
        }
    }

    /// `icsk_ca_ops->undo_cwnd`: the cwnd an undone reduction goes back to.
    pub(super) fn cc_undo_cwnd(&mut self) -> u32 {
        let (cwnd, prior) = (self.w.cwnd, self.prior_cwnd);
        let sk = if matches!(self.cc, Cc::Bbr(_)) { Some(self.bbr_sock()) } else { None };
        match &mut self.cc {
            Cc::Reno | Cc::Cubic(_) => reno::undo_cwnd(cwnd, prior),
            Cc::Dctcp(d) => d.undo_cwnd(cwnd),
            Cc::Bbr(b) => b.undo_cwnd(sk.as_ref().expect("bbr")),
        }
    }

    /// `icsk_ca_ops->in_ack_event` (DCTCP's α update). 6.12 calls it in `tcp_ack` after
    /// SACK processing and before `tcp_clean_rtx_queue`.
    fn cc_in_ack_event(&mut self) {
        if let Cc::Dctcp(d) = &mut self.cc {
            d.update_alpha(self.snd_una, self.snd_nxt, self.delivered, self.delivered_ce);
        }
    }

    /// `CA_EVENT_LOSS` (from `tcp_enter_loss`).
    fn cc_event_loss(&mut self) {
        let cwnd = self.w.cwnd;
        if let Cc::Dctcp(d) = &mut self.cc {
            self.w.ssthresh = d.react_to_loss(cwnd);
        }
    }

    /// What BBR reads and writes of the socket.
    pub(super) fn bbr_sock(&self) -> BbrSock {
        BbrSock {
            now_ns: self.now.as_nanos(),
            jiffies: self.hz.jiffies32(self.now),
            hz: self.hz.0,
            mss: self.mss,
            delivered: self.delivered,
            delivered_mstamp: self.delivered_mstamp,
            lost: self.lost,
            in_flight: self.sb.in_flight(),
            wstamp_ns: self.wstamp_ns,
            srtt_us: self.rtt.srtt_us,
            min_rtt_us: self.rtt_min.get(),
            max_pacing_rate: self.cfg.max_pacing_rate,
            pacing_shift: self.cfg.pacing_shift,
            ca_state: self.ca_state,
            clamp: self.w.clamp,
            cwnd: self.w.cwnd,
            ssthresh: self.w.ssthresh,
            pacing_rate: self.pacing_rate,
            app_limited: self.app_limited,
        }
    }

    /// Take back what BBR wrote.
    pub(super) fn bbr_write(&mut self, sk: &BbrSock) {
        self.w.cwnd = sk.cwnd;
        self.w.ssthresh = sk.ssthresh;
        self.pacing_rate = sk.pacing_rate;
        self.app_limited = sk.app_limited;
    }

    /// The min TSO segments (`icsk_ca_ops->min_tso_segs`, else `tcp_min_tso_segs`).
    pub(super) fn cc_min_tso_segs(&self) -> u32 {
        match self.cc {
            Cc::Bbr(_) => Bbr::min_tso_segs(self.pacing_rate),
            _ => self.cfg.min_tso_segs,
        }
    }

    /// `tcp_cong_avoid`.
    fn cc_cong_avoid(&mut self, acked: u32) {
        let limited = self.is_cwnd_limited_now();
        let ctx = self.cc_ctx();
        match &mut self.cc {
            Cc::Reno | Cc::Dctcp(_) => reno::cong_avoid(&mut self.w, acked, limited),
            Cc::Cubic(c) => c.cong_avoid(&mut self.w, acked, limited, &ctx),
            // cong_control modules never get here.
            Cc::Bbr(_) => {}
        }
    }

    /// `icsk_ca_ops->pkts_acked` (CUBIC's HyStart).
    pub(super) fn cc_pkts_acked(&mut self, rtt_us: Option<u32>) {
        let ctx = self.cc_ctx();
        if let Cc::Cubic(c) = &mut self.cc {
            if let Some(ss) = c.pkts_acked(rtt_us, &self.w, &ctx) {
                self.w.ssthresh = ss;
            }
        }
    }

    /// `CA_EVENT_TX_START`.
    pub(super) fn cc_tx_start(&mut self) {
        match &self.cc {
            Cc::Cubic(_) => {
                let ctx = self.cc_ctx();
                let lsnd = self.lsndtime;
                if let Cc::Cubic(c) = &mut self.cc {
                    c.on_tx_start(&ctx, lsnd);
                }
            }
            Cc::Bbr(_) => {
                let mut sk = self.bbr_sock();
                if let Cc::Bbr(b) = &mut self.cc {
                    b.on_tx_start(&mut sk);
                }
                self.bbr_write(&sk);
            }
            Cc::Reno | Cc::Dctcp(_) => {}
        }
    }

    /// `tcp_set_ca_state`: the module's `set_state` hears the new state first.
    pub(super) fn set_ca_state(&mut self, s: CaState) {
        match &self.cc {
            Cc::Cubic(_) if s == CaState::Loss => {
                let ctx = self.cc_ctx();
                if let Cc::Cubic(c) = &mut self.cc {
                    c.on_loss_state(&ctx);
                }
            }
            Cc::Bbr(_) => {
                let sk = self.bbr_sock();
                if let Cc::Bbr(b) = &mut self.cc {
                    b.set_state(&sk, s);
                }
            }
            // dctcp_state: entering Recovery halves (once, not on a repeated entry).
            Cc::Dctcp(_) if s == CaState::Recovery && s != self.ca_state => {
                let cwnd = self.w.cwnd;
                if let Cc::Dctcp(d) = &mut self.cc {
                    self.w.ssthresh = d.react_to_loss(cwnd);
                }
            }
            _ => {}
        }
        self.ca_state = s;
    }

    // ----- small predicates -----------------------------------------------------------

    /// `tcp_in_cwnd_reduction`.
    pub(super) fn in_cwnd_reduction(&self) -> bool {
        matches!(self.ca_state, CaState::Cwr | CaState::Recovery)
    }

    /// `tcp_is_cwnd_limited`.
    pub(super) fn is_cwnd_limited_now(&self) -> bool {
        if self.is_cwnd_limited {
            return true;
        }
        if self.w.in_slow_start() {
            return self.w.cwnd < 2 * self.max_packets_out;
        }
        false
    }

    /// `tcp_current_ssthresh`.
    pub(super) fn current_ssthresh(&self) -> u32 {
        if self.in_cwnd_reduction() {
            self.w.ssthresh
        } else {
            self.w.ssthresh.max((self.w.cwnd >> 1) + (self.w.cwnd >> 2))
        }
    }

    /// `tcp_count_delivered`.
    pub(super) fn count_delivered(&mut self, n: u32, ece: bool) {
        self.delivered += n as u64;
        if ece && self.ecn_ok {
            self.delivered_ce += n as u64;
        }
    }

    /// `tcp_tsopt_ecr_before`: the echoed timestamp is older than `when` (ms clock).
    pub(super) fn tsecr_before(&self, when: u32) -> bool {
        self.rcv_tsecr != 0 && (self.rcv_tsecr.wrapping_sub(when) as i32) < 0
    }

    /// `tcp_any_retrans_done`.
    pub(super) fn any_retrans_done(&self) -> bool {
        self.sb.retrans_out > 0 || self.sb.segs.front().is_some_and(|s| s.flags & E != 0)
    }

    // ----- RTT ------------------------------------------------------------------------

    /// `tcp_ack_update_rtt`. Returns whether an RTT sample was taken.
    pub(super) fn ack_update_rtt(
        &mut self,
        flag: u32,
        seq_rtt: Option<u64>,
        sack_rtt: Option<u64>,
        ca_rtt: Option<u64>,
        st: &mut SackState,
    ) -> bool {
        let mut seq_rtt = seq_rtt.or(sack_rtt);
        let mut ca_rtt = ca_rtt;
        // Karn's rule forbids ACK timing for retransmitted data; the timestamp echo
        // still gives a sample (ms resolution).
        if seq_rtt.is_none() && self.rcv_tsecr != 0 && flag & FLAG_ACKED != 0 {
            let delta = ts_ms(self.now).wrapping_sub(self.rcv_tsecr).max(1) as u64;
            seq_rtt = Some(delta * 1000);
            ca_rtt = seq_rtt;
        }
        st.rtt_us = ca_rtt.map(|r| r as u32);
        let Some(m) = seq_rtt else { return false };
        let ca = ca_rtt.unwrap_or(m) as u32;
        // tcp_update_rtt_min: windowed min over tcp_min_rtt_wlen = 300 s.
        let wlen = 300 * self.hz.0;
        let sample = if ca == 0 { self.hz.jiffies_to_usecs(1) as u32 } else { ca };
        self.rtt_min.running_min(wlen, self.hz.jiffies32(self.now), sample);
        let rto_min = self.rto_min_us();
        self.rtt.sample(m.max(1) as u32, self.snd_una, self.snd_nxt, rto_min);
        self.rto_j = self.rtt.rto_jiffies(self.hz);
        self.backoff = 0;
        true
    }

    // ----- cwnd -------------------------------------------------------------------------

    /// `tcp_update_pacing_rate`: 200 % of cwnd/srtt in slow start, 120 % after.
    pub(super) fn update_pacing_rate(&mut self) {
        let mut rate = self.mss as u64 * ((1_000_000 / 100) << 3);
        // "Slow start" for pacing ends at half ssthresh, when the end is near.
        if self.w.cwnd < self.w.ssthresh / 2 {
            rate *= self.cfg.pacing_ss_ratio as u64;
        } else {
            rate *= self.cfg.pacing_ca_ratio as u64;
        }
        rate = rate.saturating_mul(self.w.cwnd.max(self.sb.packets_out) as u64);
        if self.rtt.srtt_us != 0 {
            rate /= self.rtt.srtt_us as u64;
        }
        self.pacing_rate = rate.min(self.cfg.max_pacing_rate);
    }

    /// `tcp_cong_control`: BBR's `cong_control` does everything; the other modules get
    /// PRR or growth, then `tcp_update_pacing_rate`.
    fn cong_control(&mut self, acked_sacked: u32, newly_lost: u32, flag: u32, rs: &RateSample) {
        if matches!(self.cc, Cc::Bbr(_)) {
            let mut sk = self.bbr_sock();
            if let Cc::Bbr(b) = &mut self.cc {
                b.main(&mut sk, rs);
            }
            self.bbr_write(&sk);
            return;
        }
        if self.in_cwnd_reduction() {
            self.cwnd_reduction(acked_sacked, newly_lost, flag);
        } else if self.may_raise_cwnd(flag) {
            self.cc_cong_avoid(acked_sacked);
        }
        self.update_pacing_rate();
    }

    /// `tcp_may_raise_cwnd`.
    fn may_raise_cwnd(&self, flag: u32) -> bool {
        if self.reordering > SYSCTL_REORDERING {
            return flag & FLAG_FORWARD_PROGRESS != 0;
        }
        flag & FLAG_DATA_ACKED != 0
    }

    /// `tcp_cwnd_reduction`: Proportional Rate Reduction (RFC 6937).
    pub(super) fn cwnd_reduction(&mut self, newly_acked_sacked: u32, newly_lost: u32, flag: u32) {
        if newly_acked_sacked == 0 || self.prior_cwnd == 0 {
            return;
        }
        let in_flight = self.sb.in_flight() as i64;
        let delta = self.w.ssthresh as i64 - in_flight;
        self.prr_delivered += newly_acked_sacked;
        let mut sndcnt: i64;
        if delta < 0 {
            let dividend = self.w.ssthresh as u64 * self.prr_delivered as u64 + self.prior_cwnd as u64 - 1;
            sndcnt = (dividend / self.prior_cwnd as u64) as i64 - self.prr_out as i64;
        } else {
            sndcnt = (self.prr_delivered as i64 - self.prr_out as i64).max(newly_acked_sacked as i64);
            if flag & FLAG_SND_UNA_ADVANCED != 0 && newly_lost == 0 {
                sndcnt += 1;
            }
            sndcnt = sndcnt.min(delta);
        }
        // The first ACK of a reduction always lets one segment (the retransmission) out.
        sndcnt = sndcnt.max(if self.prr_out > 0 { 0 } else { 1 });
        self.w.cwnd = (in_flight + sndcnt).max(0) as u32;
    }

    /// `tcp_init_cwnd_reduction`.
    pub(super) fn init_cwnd_reduction(&mut self) {
        self.high_seq = self.snd_nxt;
        self.tlp_high_seq = None;
        self.w.cwnd_cnt = 0;
        self.prior_cwnd = self.w.cwnd;
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.w.ssthresh = self.cc_ssthresh();
        self.ecn_queue_cwr();
    }

    /// `tcp_end_cwnd_reduction`: cwnd = ssthresh, unless the reduction was undone.
    fn end_cwnd_reduction(&mut self) {
        if self.w.ssthresh < INFINITE_SSTHRESH && (self.ca_state == CaState::Cwr || self.undo_marker.is_some()) {
            self.w.cwnd = self.w.ssthresh;
        }
    }

    /// `tcp_ecn_queue_cwr`.
    pub(super) fn ecn_queue_cwr(&mut self) {
        if self.ecn_ok {
            self.queue_cwr = true;
        }
    }

    /// `tcp_enter_cwr`: a congestion notification (ECE, local drop or NET_XMIT_CN).
    pub(super) fn enter_cwr(&mut self) {
        self.prior_ssthresh = 0;
        if self.ca_state < CaState::Cwr {
            self.undo_marker = None;
            self.init_cwnd_reduction();
            self.set_ca_state(CaState::Cwr);
        }
    }

    /// `tcp_init_undo`.
    fn init_undo(&mut self) {
        self.undo_marker = Some(self.snd_una);
        self.undo_retrans = self.sb.retrans_out as i32;
        if self.tlp_high_seq.is_some() && self.tlp_retrans {
            self.undo_retrans += 1;
        }
        // Keep it non-zero: zero is the "all retransmissions were spurious" signal.
        if self.undo_retrans == 0 {
            self.undo_retrans = -1;
        }
    }

    /// `tcp_enter_recovery`.
    pub(super) fn enter_recovery(&mut self, ece: bool) {
        if !self.any_retrans_done() {
            self.retrans_stamp = 0;
        }
        self.prior_ssthresh = 0;
        self.init_undo();
        if !self.in_cwnd_reduction() {
            if !ece {
                self.prior_ssthresh = self.current_ssthresh();
            }
            self.init_cwnd_reduction();
        }
        self.set_ca_state(CaState::Recovery);
    }

    /// `tcp_timeout_mark_lost`: after an RTO, everything older than a RACK RTT is lost.
    fn timeout_mark_lost(&mut self) {
        let Some(head) = self.sb.segs.front() else { return };
        let is_reneg = head.flags & super::sack::S != 0;
        if is_reneg {
            self.sb.sacked_out = 0;
            self.is_sack_reneg = true;
        } else if !self.cfg.sack {
            self.sb.sacked_out = 0;
        }
        for idx in 0..self.sb.len() {
            if is_reneg {
                self.sb.segs[idx].flags &= !super::sack::S;
            } else if idx != 0 && self.rack_timeout(self.sb.segs[idx].xmit_us(), 0) > 0 {
                continue; // younger than a RACK RTT: may still arrive
            }
            self.mark_seg_lost(idx);
        }
    }

    /// `tcp_enter_loss`: the retransmission timer expired.
    pub(super) fn enter_loss(&mut self) {
        let new_recovery = self.ca_state < CaState::Recovery;
        self.timeout_mark_lost();
        // Reduce ssthresh once per window.
        if self.ca_state <= CaState::Disorder
            || self.high_seq <= self.snd_una
            || (self.ca_state == CaState::Loss && self.retransmits == 0)
        {
            self.prior_ssthresh = self.current_ssthresh();
            self.prior_cwnd = self.w.cwnd;
            self.w.ssthresh = self.cc_ssthresh();
            self.cc_event_loss();
            self.init_undo();
        }
        self.w.cwnd = self.sb.in_flight() + 1;
        self.w.cwnd_cnt = 0;
        if self.ca_state <= CaState::Disorder && self.sb.sacked_out >= SYSCTL_REORDERING {
            self.reordering = self.reordering.min(SYSCTL_REORDERING);
        }
        self.set_ca_state(CaState::Loss);
        self.high_seq = self.snd_nxt;
        self.tlp_high_seq = None;
        self.ecn_queue_cwr();
        self.frto = self.cfg.frto && (new_recovery || self.retransmits > 0);
    }

    // ----- undo -------------------------------------------------------------------------

    /// `tcp_packet_delayed` (6.12): the echo predates the first retransmission.
    fn packet_delayed(&self) -> bool {
        self.retrans_stamp != 0 && self.tsecr_before(self.retrans_stamp)
    }

    /// `tcp_may_undo`.
    fn may_undo(&self) -> bool {
        self.undo_marker.is_some() && (self.undo_retrans == 0 || self.packet_delayed())
    }

    /// `tcp_undo_cwnd_reduction`.
    fn undo_cwnd_reduction(&mut self, unmark_loss: bool) {
        if unmark_loss {
            for s in self.sb.segs.iter_mut() {
                s.flags &= !L;
            }
            self.sb.lost_out = 0;
        }
        if self.prior_ssthresh != 0 {
            self.w.cwnd = self.cc_undo_cwnd();
            if self.prior_ssthresh > self.w.ssthresh {
                self.w.ssthresh = self.prior_ssthresh;
                self.queue_cwr = false; // tcp_ecn_withdraw_cwr
            }
        }
        self.undo_marker = None;
        self.rack.advanced = true; // let RACK re-examine the queue
        self.undo_count += 1;
    }

    /// `tcp_is_non_sack_preventing_reopen`.
    fn non_sack_preventing_reopen(&mut self) -> bool {
        if self.snd_una == self.high_seq && !self.cfg.sack {
            // Without SACK, leaving at exactly high_seq risks false fast retransmits
            // (RFC 6582): wait for an ACK beyond it.
            if !self.any_retrans_done() {
                self.retrans_stamp = 0;
            }
            return true;
        }
        false
    }

    /// `tcp_try_undo_recovery`.
    fn try_undo_recovery(&mut self) -> bool {
        if self.may_undo() {
            self.undo_cwnd_reduction(false);
        } else if self.rack.reo_wnd_persist > 0 {
            self.rack.reo_wnd_persist -= 1;
        }
        if self.non_sack_preventing_reopen() {
            return true;
        }
        self.set_ca_state(CaState::Open);
        self.is_sack_reneg = false;
        false
    }

    /// `tcp_try_undo_dsack`: every retransmission was D-SACKed.
    fn try_undo_dsack(&mut self) -> bool {
        if self.undo_marker.is_some() && self.undo_retrans == 0 {
            self.rack.reo_wnd_persist = (self.rack.reo_wnd_persist + 1).min(16);
            self.undo_cwnd_reduction(false);
            return true;
        }
        false
    }

    /// `tcp_try_undo_loss`.
    fn try_undo_loss(&mut self, frto_undo: bool) -> bool {
        if frto_undo || self.may_undo() {
            self.undo_cwnd_reduction(true);
            self.retransmits = 0;
            if self.non_sack_preventing_reopen() {
                return true;
            }
            if frto_undo || self.cfg.sack {
                self.set_ca_state(CaState::Open);
                self.is_sack_reneg = false;
            }
            return true;
        }
        false
    }

    /// `tcp_try_undo_partial` (6.12): the hole was filled by a delayed original.
    fn try_undo_partial(&mut self, prior_snd_una: u64) -> bool {
        if self.undo_marker.is_some() && self.packet_delayed() {
            self.check_sack_reordering(prior_snd_una);
            if self.sb.retrans_out > 0 {
                return true;
            }
            if !self.any_retrans_done() {
                self.retrans_stamp = 0;
            }
            self.undo_cwnd_reduction(true);
            self.try_keep_open();
        }
        false
    }

    /// `tcp_try_keep_open`.
    fn try_keep_open(&mut self) {
        let state = if self.sb.left_out() > 0 || self.any_retrans_done() { CaState::Disorder } else { CaState::Open };
        if self.ca_state != state {
            self.set_ca_state(state);
            self.high_seq = self.snd_nxt;
        }
    }

    /// `tcp_try_to_open`.
    fn try_to_open(&mut self, flag: u32) {
        if !self.any_retrans_done() {
            self.retrans_stamp = 0;
        }
        if flag & FLAG_ECE != 0 {
            self.enter_cwr();
        }
        if self.ca_state != CaState::Cwr {
            self.try_keep_open();
        }
    }

    // ----- loss detection ---------------------------------------------------------------

    /// `tcp_identify_packet_loss`.
    fn identify_packet_loss(&mut self, flag: &mut u32) {
        if self.sb.is_empty() {
            return;
        }
        if !self.cfg.sack {
            self.newreno_mark_lost(*flag & FLAG_SND_UNA_ADVANCED != 0);
        } else {
            let prior_retrans = self.sb.retrans_out;
            if self.rack_mark_lost() {
                *flag &= !FLAG_SET_XMIT_TIMER;
            }
            if prior_retrans > self.sb.retrans_out {
                *flag |= FLAG_LOST_RETRANS;
            }
        }
    }

    /// `tcp_newreno_mark_lost`: without SACK, the head is lost after dupthresh dupacks,
    /// and again on each partial ACK in recovery.
    fn newreno_mark_lost(&mut self, snd_una_advanced: bool) {
        let st = self.ca_state;
        if (st < CaState::Recovery && self.sb.sacked_out >= self.reordering)
            || (st == CaState::Recovery && snd_una_advanced)
        {
            if self.sb.segs[0].flags & L != 0 {
                return;
            }
            self.mark_seg_lost(0);
        }
    }

    /// `tcp_time_to_recover` with RACK: a loss has been marked.
    fn time_to_recover(&self) -> bool {
        self.sb.lost_out > 0
    }

    /// `tcp_check_sack_reneging`: the ACK stopped at a SACKed segment; give the receiver
    /// max(srtt/2, 10 ms) before treating the SACKs as void.
    fn check_sack_reneging(&mut self, flag: &mut u32) -> bool {
        if *flag & FLAG_SACK_RENEGING != 0 && *flag & FLAG_SND_UNA_ADVANCED != 0 {
            let delay = self.hz.usecs_to_jiffies((self.rtt.srtt_us >> 4) as u64).max(self.hz.usecs_to_jiffies(10_000));
            self.reset_xmit_timer(super::timer::TimerKind::Retrans, delay, false);
            *flag &= !FLAG_SET_XMIT_TIMER;
            return true;
        }
        false
    }

    // ----- Reno (no SACK) dupack accounting --------------------------------------------

    /// `tcp_limit_reno_sacked`.
    fn limit_reno_sacked(&mut self) -> bool {
        let holes = self.sb.lost_out.max(1).min(self.sb.packets_out);
        if self.sb.sacked_out + holes > self.sb.packets_out {
            self.sb.sacked_out = self.sb.packets_out - holes;
            return true;
        }
        false
    }

    /// `tcp_check_reno_reordering`.
    fn check_reno_reordering(&mut self, addend: u32) {
        if !self.limit_reno_sacked() {
            return;
        }
        self.reordering = (self.sb.packets_out + addend).min(super::sack::MAX_REORDERING);
        self.reord_seen += 1;
    }

    /// `tcp_add_reno_sack`: a dupack stands for one segment that left the network.
    fn add_reno_sack(&mut self, num_dupack: u32, ece: bool) {
        if num_dupack > 0 {
            let prior = self.sb.sacked_out;
            self.sb.sacked_out += num_dupack;
            self.check_reno_reordering(0);
            let delivered = self.sb.sacked_out.saturating_sub(prior);
            if delivered > 0 {
                self.count_delivered(delivered, ece);
            }
        }
    }

    /// `tcp_remove_reno_sacks`.
    pub(super) fn remove_reno_sacks(&mut self, acked: u32, ece: bool) {
        if acked > 0 {
            let d = (acked as i64 - self.sb.sacked_out as i64).max(1) as u32;
            self.count_delivered(d, ece);
            if acked > self.sb.sacked_out {
                self.sb.sacked_out = 0;
            } else {
                self.sb.sacked_out -= acked - 1;
            }
        }
        self.check_reno_reordering(acked);
    }

    // ----- the state machine ------------------------------------------------------------

    /// `tcp_process_loss`: an ACK in the Loss state (with F-RTO, RFC 5682).
    fn process_loss(&mut self, flag: u32, num_dupack: u32, rexmit: &mut Rexmit) {
        let recovered = self.snd_una >= self.high_seq;
        if flag & FLAG_SND_UNA_ADVANCED != 0 && self.try_undo_loss(false) {
            return;
        }
        if self.frto {
            // RFC 5682 step 3b: data never retransmitted got through, so the RTO was spurious.
            if flag & FLAG_ORIG_SACK_ACKED != 0 && self.try_undo_loss(true) {
                return;
            }
            if self.snd_nxt > self.high_seq {
                if flag & FLAG_DATA_SACKED != 0 || num_dupack > 0 {
                    self.frto = false; // RFC 5682 step 3a: a real loss
                }
            } else if flag & FLAG_SND_UNA_ADVANCED != 0 && !recovered {
                self.high_seq = self.snd_nxt;
                // Step 2.b: send new data (the write queue is never empty here).
                if self.unsent_bytes() > 0 && self.snd_una + self.snd_wnd > self.snd_nxt {
                    *rexmit = Rexmit::New;
                    return;
                }
                self.frto = false;
            }
        }
        if recovered {
            self.try_undo_recovery();
            return;
        }
        if !self.cfg.sack {
            if self.snd_nxt > self.high_seq && num_dupack > 0 {
                self.add_reno_sack(num_dupack, flag & FLAG_ECE != 0);
            } else if flag & FLAG_SND_UNA_ADVANCED != 0 {
                self.sb.sacked_out = 0;
            }
        }
        *rexmit = Rexmit::Lost;
    }

    /// The default branch of `tcp_fastretrans_alert` (Open, Disorder, CWR).
    fn alert_default(&mut self, num_dupack: u32, flag: &mut u32, rexmit: &mut Rexmit) {
        let ece = *flag & FLAG_ECE != 0;
        if !self.cfg.sack {
            if *flag & FLAG_SND_UNA_ADVANCED != 0 {
                self.sb.sacked_out = 0;
            }
            self.add_reno_sack(num_dupack, ece);
        }
        if self.ca_state <= CaState::Disorder {
            self.try_undo_dsack();
        }
        self.identify_packet_loss(flag);
        if !self.time_to_recover() {
            self.try_to_open(*flag);
            return;
        }
        self.enter_recovery(ece);
        *rexmit = Rexmit::Lost;
    }

    /// `tcp_fastretrans_alert`: the congestion state machine for dubious ACKs.
    fn fastretrans_alert(&mut self, prior_snd_una: u64, num_dupack: u32, flag: &mut u32, rexmit: &mut Rexmit) {
        let ece = *flag & FLAG_ECE != 0;
        if self.sb.packets_out == 0 && self.sb.sacked_out > 0 {
            self.sb.sacked_out = 0;
        }
        // A. ECE: congestion is proven, no undo.
        if ece {
            self.prior_ssthresh = 0;
        }
        // B. SACK reneging.
        if self.check_sack_reneging(flag) {
            return;
        }
        // D. State exit when high_seq is acked.
        if self.ca_state == CaState::Open {
            self.retrans_stamp = 0;
        } else if self.snd_una >= self.high_seq {
            match self.ca_state {
                // Stay until an ACK beyond high_seq proves the CWR segment got there.
                CaState::Cwr if self.snd_una != self.high_seq => {
                    self.end_cwnd_reduction();
                    self.set_ca_state(CaState::Open);
                }
                CaState::Recovery => {
                    if !self.cfg.sack {
                        self.sb.sacked_out = 0;
                    }
                    if self.try_undo_recovery() {
                        return;
                    }
                    self.end_cwnd_reduction();
                }
                _ => {}
            }
        }
        // E. Process the state.
        match self.ca_state {
            CaState::Recovery => {
                if *flag & FLAG_SND_UNA_ADVANCED == 0 {
                    if !self.cfg.sack {
                        self.add_reno_sack(num_dupack, ece);
                    }
                } else if self.try_undo_partial(prior_snd_una) {
                    return;
                }
                if self.try_undo_dsack() {
                    self.try_to_open(*flag);
                }
                self.identify_packet_loss(flag);
                if self.ca_state != CaState::Recovery {
                    if !self.time_to_recover() {
                        return;
                    }
                    // Undone, yet a loss is marked: start over with a new recovery.
                    self.enter_recovery(ece);
                }
                *rexmit = Rexmit::Lost;
            }
            CaState::Loss => {
                self.process_loss(*flag, num_dupack, rexmit);
                self.identify_packet_loss(flag);
                if !(self.ca_state == CaState::Open || *flag & FLAG_LOST_RETRANS != 0) {
                    return;
                }
                // Undone, or retransmissions lost again: continue as in Open.
                self.alert_default(num_dupack, flag, rexmit);
            }
            _ => self.alert_default(num_dupack, flag, rexmit),
        }
    }

    /// `tcp_process_tlp_ack`: did the tail loss probe repair a loss?
    fn process_tlp_ack(&mut self, ack: u64, flag: u32) {
        let Some(h) = self.tlp_high_seq else { return };
        if ack < h {
            return;
        }
        if !self.tlp_retrans {
            // A probe of new data was acked.
            self.tlp_high_seq = None;
        } else if flag & FLAG_DSACK_TLP != 0 {
            // The probe was a duplicate (D-SACKed): nothing was lost.
            self.tlp_high_seq = None;
        } else if ack > h {
            // The probe repaired a loss: reduce cwnd once (CWR, ended at once).
            self.init_cwnd_reduction();
            self.set_ca_state(CaState::Cwr);
            self.end_cwnd_reduction();
            self.try_keep_open();
        } else if flag & (FLAG_SND_UNA_ADVANCED | FLAG_NOT_DUP | FLAG_DATA_SACKED) == 0 {
            self.tlp_high_seq = None;
        }
    }

    /// An ACK arrived. Mirrors `tcp_ack` in tcp_input.c. Run the poll loop afterwards.
    pub fn on_ack(&mut self, ack: &Ack, now: Instant) {
        self.begin_event(now);
        self.ack_space_check = true;
        let prior_snd_una = self.snd_una;
        let prior_packets = self.sb.packets_out;
        let prior_delivered = self.delivered;
        let prior_lost = self.lost;
        let is_sack_reneg = self.is_sack_reneg;
        let mut flag: u32 = 0;
        let mut rexmit = Rexmit::None;
        let mut st = SackState::default();
        // Timestamps are always negotiated; ts_ms is never 0 (tsoffset 1).
        self.rcv_tsecr = ts_ms(ack.tsecr);
        let blocks: &[(u64, u64)] = if self.cfg.sack { &ack.sack } else { &[] };

        if ack.ack < prior_snd_una {
            // An old ACK: only its SACK information is of use.
            if !blocks.is_empty() {
                flag |= self.sacktag_write_queue(blocks, ack.ack, prior_snd_una, &mut st);
                self.fastretrans_alert(prior_snd_una, 0, &mut flag, &mut rexmit);
            }
            self.set_plan(rexmit);
            return;
        }
        if ack.ack > self.snd_nxt {
            // Acks data never sent: discarded (tcp_ack < 0), nothing is transmitted.
            self.out.plan = VecDeque::from([Phase::Nothing]);
            return;
        }
        // tcp_replace_ts_recent, once the ACK is known to be in the window (PAWS: never
        // back; the sender's rcv_nxt never moves, so every ACK is at rcv_wup).
        if ack.tsval.wrapping_sub(self.ts_recent) as i32 >= 0 || self.ts_recent == 0 {
            self.ts_recent = ack.tsval;
        }
        if ack.ack > prior_snd_una {
            flag |= FLAG_SND_UNA_ADVANCED;
            self.retransmits = 0;
        }
        let prior_fack = if self.cfg.sack { self.highest_sack_seq() } else { self.snd_una };
        let prior_in_flight = self.sb.in_flight();

        // Window update (tcp_ack_update_window): the receiver's sequence never changes,
        // so an update needs an advancing ACK or a larger window.
        if ack.ack > self.snd_una || ack.rwnd > self.snd_wnd {
            flag |= FLAG_WIN_UPDATE;
            self.snd_wnd = ack.rwnd;
            self.max_window = self.max_window.max(ack.rwnd);
        }
        self.bytes_acked += ack.ack - self.snd_una;
        self.snd_una = ack.ack;

        if !blocks.is_empty() {
            flag |= self.sacktag_write_queue(blocks, ack.ack, prior_snd_una, &mut st);
        }
        if self.ecn_ok && ack.ece {
            flag |= FLAG_ECE;
        }
        if st.sack_delivered > 0 {
            self.count_delivered(st.sack_delivered, flag & FLAG_ECE != 0);
        }
        self.cc_in_ack_event();

        if prior_packets == 0 {
            // Nothing outstanding: only D-SACKs can matter (undo).
            if flag & FLAG_DSACKING_ACK != 0 {
                self.fastretrans_alert(prior_snd_una, 0, &mut flag, &mut rexmit);
            }
            if self.tlp_high_seq.is_some() {
                self.process_tlp_ack(ack.ack, flag);
            }
            self.set_plan(rexmit);
            return;
        }

        flag |= self.clean_rtx_queue(prior_fack, &mut st, flag & FLAG_ECE != 0);
        self.rack_update_reo_wnd(st.prior_delivered);
        if self.tlp_high_seq.is_some() {
            self.process_tlp_ack(ack.ack, flag);
        }

        let dubious = flag & FLAG_NOT_DUP == 0 || flag & FLAG_CA_ALERT != 0 || self.ca_state != CaState::Open;
        if dubious {
            let num_dupack = if flag & (FLAG_SND_UNA_ADVANCED | FLAG_NOT_DUP | FLAG_DSACKING_ACK) == 0 { 1 } else { 0 };
            self.fastretrans_alert(prior_snd_una, num_dupack, &mut flag, &mut rexmit);
        }
        if flag & FLAG_SET_XMIT_TIMER != 0 {
            self.set_xmit_timer();
        }

        let delivered = (self.delivered - prior_delivered) as u32;
        let newly_lost = (self.lost - prior_lost) as u32;
        let rs = self.rate_gen(delivered, newly_lost, is_sack_reneg, prior_in_flight, &st);
        self.cong_control(delivered, newly_lost, flag, &rs);
        self.set_plan(rexmit);
    }

    /// The transmissions `tcp_ack` ends with: `tcp_xmit_recovery` then `tcp_data_snd_check`.
    fn set_plan(&mut self, rexmit: Rexmit) {
        self.out.plan = match rexmit {
            Rexmit::None => VecDeque::from([Phase::New]),
            Rexmit::Lost => VecDeque::from([Phase::Rtx, Phase::New]),
            Rexmit::New => VecDeque::from([Phase::NewFrto, Phase::RtxAfterFrto, Phase::New]),
        };
    }

    /// Common start of every entry point: refresh the clock (`tcp_mstamp_refresh`) and
    /// close the previous output invocation if the caller did not poll it to the end.
    pub(super) fn begin_event(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
        self.commit_pending();
        self.finish_invocation();
    }
}

#[cfg(test)]
impl TcpSender {
    /// Scoreboard consistency: the counters match the tags, the lists match the queue.
    pub(super) fn check_invariants(&self) {
        use super::sack::{R, S};
        let segs = &self.sb.segs;
        assert_eq!(self.sb.packets_out as usize, segs.len(), "packets_out");
        assert_eq!(self.snd_una, self.sb.base, "snd_una vs queue base");
        assert_eq!(self.snd_nxt, self.sb.base + segs.len() as u64 * self.sb.mss, "snd_nxt vs queue end");
        let lost = segs.iter().filter(|s| s.flags & L != 0).count() as u32;
        let retrans = segs.iter().filter(|s| s.flags & R != 0).count() as u32;
        assert_eq!(self.sb.lost_out, lost, "lost_out");
        assert_eq!(self.sb.retrans_out, retrans, "retrans_out");
        if self.cfg.sack {
            let sacked = segs.iter().filter(|s| s.flags & S != 0).count() as u32;
            assert_eq!(self.sb.sacked_out, sacked, "sacked_out");
            assert!(segs.iter().all(|s| s.flags & (S | L) != (S | L)), "S and L together");
        }
        for (&o, &seq) in &self.sb.tsorted {
            let idx = ((seq - self.sb.base) / self.sb.mss) as usize;
            assert_eq!(segs[idx].order, Some(o), "tsorted entry points back");
        }
        let listed = segs.iter().filter(|s| s.order.is_some()).count();
        assert_eq!(listed, self.sb.tsorted.len(), "tsorted size");
        assert!(self.w.cwnd >= 1, "cwnd >= 1");
        let runs = segs.iter().zip(segs.iter().skip(1)).filter(|(a, b)| a.skb != b.skb).count() + 1;
        assert_eq!(self.sb.skbs as usize, if segs.is_empty() { 0 } else { runs }, "skbs");
    }
}
