//! The three-way handshake, sans-IO: the client in SYN_SENT ([`Connect`]: `tcp_connect`,
//! the SYN retransmissions of `tcp_retransmit_timer`/`tcp_write_timeout`, and
//! `tcp_rcv_synsent_state_process` → `tcp_finish_connect` → `tcp_init_transfer`) and
//! the server's request socket ([`Accept`]: `tcp_conn_request`, `tcp_check_req`,
//! `reqsk_timer_handler`, `tcp_synack_rtt_meas`).
//!
//! What each side takes from it:
//!
//! * **RTT**: the client's SYN-ACK acks its SYN. If that SYN was never retransmitted,
//!   `tcp_clean_rtx_queue` times it from its send (µs); after a retransmission Karn's
//!   rule forbids that and `tcp_ack_update_rtt` uses the timestamp echo (ms, at least
//!   1). The server does the same with its SYN-ACK on the handshake's last ACK
//!   (`tcp_synack_rtt_meas`: timed only when no SYN-ACK was retransmitted).
//! * **Initial window**: `tcp_init_transfer` sets cwnd to `TCP_INIT_CWND` (10), or to 1
//!   when *more than one* SYN went out (`total_retrans > 1`) and the retransmissions were
//!   not spurious (`tcp_try_undo_spurious_syn`: the SYN-ACK echoes the first SYN's
//!   timestamp). One lost SYN does not shrink the window (RFC 6298's 1 s initial RTO
//!   made Linux cut only after two). `tcp_init_metrics` puts ssthresh back to
//!   infinity (the SYN timeout's `tcp_enter_loss` had lowered it); the retransmitted
//!   SYNs stay in `tcpi_total_retrans`, which iperf3 reports.
//! * **Timers**: the SYN's RTO starts at `TCP_TIMEOUT_INIT` (1 s) and doubles up to
//!   `TCP_RTO_MAX` (120 s); after `net.ipv4.tcp_syn_retries` (6) retransmissions the
//!   next expiry gives up (`retransmits_timed_out` with `tcp_model_timeout`: 127 s for
//!   6). The server's SYN-ACK timer does the same with `tcp_synack_retries` (5); a
//!   retransmitted SYN gets the SYN-ACK again at once (`inet_rtx_syn_ack`) and re-arms it.
//!
//! Not modelled: SYN cookies and the listen queue's limits (one listener per iperf3
//! server, far below `somaxconn`), TCP Fast Open, the tcp_metrics cache (fresh
//! namespaces have none), and the RST the server sends to an ACK of a request it has
//! dropped (such an ACK is ignored here).

use qdisc::{Duration, Instant};

use super::{ts_ms, Hz, ACK_LEN};

/// A SYN or SYN-ACK as the qdisc counts it: 14 Ethernet + 20 IPv4 + 20 TCP + 20 bytes of
/// options (MSS 4, SACK-permitted with timestamps 12, NOP + window scale 4), the
/// 74-byte frame of a Linux SYN.
pub const SYN_LEN: u32 = 74;

/// `TCP_RTO_MAX`: 120 s.
const RTO_MAX_S: u64 = 120;

/// Which handshake segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HsKind {
    Syn,
    SynAck,
    /// The client's ACK of the SYN-ACK.
    Ack,
}

/// One handshake segment with its timestamps option (ms clock, [`ts_ms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HsSeg {
    pub kind: HsKind,
    pub tsval: u32,
    pub tsecr: u32,
}

impl HsSeg {
    /// Bytes the qdisc accounts.
    pub fn wire_len(&self) -> u32 {
        match self.kind {
            HsKind::Ack => ACK_LEN,
            HsKind::Syn | HsKind::SynAck => SYN_LEN,
        }
    }
}

/// What the client knows once its connect() returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected {
    /// The SYN-ACK's RTT sample.
    pub rtt: Duration,
    /// SYNs retransmitted (`tcpi_total_retrans` at the start).
    pub syn_retrans: u32,
    /// `tcp_init_transfer` sets cwnd to 1 instead of the initial window.
    pub cwnd_one: bool,
    /// The handshake's last ACK, to send.
    pub ack: HsSeg,
}

/// A timer armed for `rto_j` jiffies at `now`.
fn deadline(hz: Hz, now: Instant, rto_j: u64) -> Instant {
    hz.deadline(now, rto_j)
}

/// The client in SYN_SENT.
#[derive(Clone, Debug)]
pub struct Connect {
    hz: Hz,
    syn_retries: u32,
    /// TSval of the first SYN (`retrans_stamp`).
    first_ts: u32,
    /// When the last SYN left.
    sent_at: Instant,
    retrans: u32,
    rto_j: u64,
    timer: Option<Instant>,
    /// `None` while connecting; then whether connect() succeeded.
    pub done: Option<bool>,
}

impl Connect {
    /// `tcp_connect` at `now`: the SYN to send, RTO `TCP_TIMEOUT_INIT`.
    pub fn new(now: Instant, hz: u32, syn_retries: u32) -> (Connect, HsSeg) {
        let hz = Hz(hz);
        let rto_j = hz.0 as u64;
        let c = Connect {
            hz,
            syn_retries,
            first_ts: ts_ms(now),
            sent_at: now,
            retrans: 0,
            rto_j,
            timer: Some(deadline(hz, now, rto_j)),
            done: None,
        };
        let syn = HsSeg { kind: HsKind::Syn, tsval: c.first_ts, tsecr: 0 };
        (c, syn)
    }

    pub fn next_timer(&self) -> Option<Instant> {
        self.timer
    }

    /// The SYN's retransmission timer: retransmit with a doubled RTO, or give up
    /// (ETIMEDOUT) after `tcp_syn_retries` retransmissions.
    pub fn on_timer(&mut self, now: Instant) -> Option<HsSeg> {
        if self.timer.is_none_or(|t| t > now) {
            return None;
        }
        if self.retrans >= self.syn_retries {
            self.timer = None;
            self.done = Some(false);
            return None;
        }
        self.retrans += 1;
        self.rto_j = (self.rto_j * 2).min(RTO_MAX_S * self.hz.0 as u64);
        self.timer = Some(deadline(self.hz, now, self.rto_j));
        self.sent_at = now;
        Some(HsSeg { kind: HsKind::Syn, tsval: ts_ms(now), tsecr: 0 })
    }

    /// A SYN-ACK arrives: connect() returns (`None` if it had already returned or failed).
    pub fn on_synack(&mut self, seg: &HsSeg, now: Instant) -> Option<Connected> {
        if self.done.is_some() || seg.kind != HsKind::SynAck {
            return None;
        }
        self.done = Some(true);
        self.timer = None;
        let rtt = if self.retrans == 0 {
            Duration::from_micros(((now - self.sent_at).as_nanos() / 1000).max(1))
        } else {
            Duration::from_millis(ts_ms(now).wrapping_sub(seg.tsecr).max(1) as u64)
        };
        let spurious = seg.tsecr == self.first_ts;
        Some(Connected {
            rtt,
            syn_retrans: self.retrans,
            cwnd_one: self.retrans > 1 && !spurious,
            ack: HsSeg { kind: HsKind::Ack, tsval: ts_ms(now), tsecr: seg.tsval },
        })
    }
}

/// The server's request socket (SYN_RECV).
#[derive(Clone, Debug)]
pub struct Accept {
    hz: Hz,
    synack_retries: u32,
    /// When the first SYN-ACK left (`snt_synack`).
    first_sent: Instant,
    /// SYN-ACKs retransmitted (`num_retrans`) and timer expiries (`num_timeout`).
    num_retrans: u32,
    num_timeout: u32,
    /// TSval of the last SYN (`ts_recent`), echoed in every SYN-ACK.
    ts_recent: u32,
    timer: Option<Instant>,
    /// `None` while pending; `Some(true)` once accepted, `Some(false)` if dropped.
    pub done: Option<bool>,
}

impl Accept {
    /// `tcp_conn_request`: a SYN at `now`; the SYN-ACK to send.
    pub fn new(syn: &HsSeg, now: Instant, hz: u32, synack_retries: u32) -> (Accept, HsSeg) {
        let hz = Hz(hz);
        let a = Accept {
            hz,
            synack_retries,
            first_sent: now,
            num_retrans: 0,
            num_timeout: 0,
            ts_recent: syn.tsval,
            timer: Some(deadline(hz, now, hz.0 as u64)),
            done: None,
        };
        let synack = a.synack(now);
        (a, synack)
    }

    fn synack(&self, now: Instant) -> HsSeg {
        HsSeg { kind: HsKind::SynAck, tsval: ts_ms(now), tsecr: self.ts_recent }
    }

    /// `TCP_TIMEOUT_INIT << num_timeout`, capped at `TCP_RTO_MAX`, in jiffies.
    fn timeout_j(&self) -> u64 {
        (self.hz.0 as u64).saturating_mul(1 << self.num_timeout.min(20)).min(RTO_MAX_S * self.hz.0 as u64)
    }

    pub fn next_timer(&self) -> Option<Instant> {
        self.timer
    }

    /// `tcp_check_req` on a retransmitted SYN: the SYN-ACK again (`inet_rtx_syn_ack`),
    /// and the timer re-armed from now.
    pub fn on_syn(&mut self, syn: &HsSeg, now: Instant) -> Option<HsSeg> {
        if self.done.is_some() {
            return None;
        }
        self.ts_recent = syn.tsval;
        self.num_retrans += 1;
        self.timer = Some(deadline(self.hz, now, self.timeout_j()));
        Some(self.synack(now))
    }

    /// `reqsk_timer_handler`: retransmit the SYN-ACK, or drop the request after
    /// `tcp_synack_retries` expiries.
    pub fn on_timer(&mut self, now: Instant) -> Option<HsSeg> {
        if self.done.is_some() || self.timer.is_none_or(|t| t > now) {
            return None;
        }
        if self.num_timeout >= self.synack_retries {
            self.timer = None;
            self.done = Some(false);
            return None;
        }
        self.num_timeout += 1;
        self.num_retrans += 1;
        self.timer = Some(deadline(self.hz, now, self.timeout_j()));
        Some(self.synack(now))
    }

    /// The client's first ACK (the handshake's, or data carrying it): the request
    /// becomes a socket. Returns the RTT sample of `tcp_synack_rtt_meas`, `None` if the
    /// request was already accepted or dropped.
    pub fn on_ack(&mut self, tsecr: u32, now: Instant) -> Option<Duration> {
        if self.done.is_some() {
            return None;
        }
        self.done = Some(true);
        self.timer = None;
        Some(if self.num_retrans == 0 {
            Duration::from_micros(((now - self.first_sent).as_nanos() / 1000).max(1))
        } else {
            Duration::from_millis(ts_ms(now).wrapping_sub(tsecr).max(1) as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    #[test]
    fn clean_handshake_times_the_syn_in_microseconds() {
        let t0 = Instant::from_nanos(5_000_123);
        let (mut c, syn) = Connect::new(t0, 250, 6);
        assert_eq!(syn, HsSeg { kind: HsKind::Syn, tsval: 6, tsecr: 0 });
        assert_eq!(syn.wire_len(), 74);
        // The RTO: 250 jiffies from the jiffy of t0 (jiffy 1 at HZ 250) = 1.004 s.
        assert_eq!(c.next_timer(), Some(ms(1004)));
        let t1 = t0 + Duration::from_micros(20_500);
        let (mut a, synack) = Accept::new(&syn, t1, 250, 5);
        assert_eq!(synack.tsecr, 6);
        let t2 = t1 + Duration::from_micros(20_250);
        let done = c.on_synack(&synack, t2).expect("connected");
        assert_eq!(done.rtt, Duration::from_micros(40_750));
        assert_eq!((done.syn_retrans, done.cwnd_one), (0, false));
        assert_eq!(done.ack.wire_len(), ACK_LEN);
        assert_eq!(c.next_timer(), None);
        // A duplicate SYN-ACK changes nothing.
        assert_eq!(c.on_synack(&synack, t2), None);
        let t3 = t2 + Duration::from_micros(20_000);
        assert_eq!(a.on_ack(done.ack.tsecr, t3), Some(Duration::from_micros(40_250)));
        assert_eq!(a.next_timer(), None);
    }

    #[test]
    fn one_lost_syn_costs_a_second_keeps_the_window_and_times_by_the_echo() {
        let (mut c, _lost) = Connect::new(ms(0), 250, 6);
        assert_eq!(c.on_timer(ms(999)), None);
        let syn2 = c.on_timer(ms(1000)).expect("retransmitted");
        assert_eq!(syn2.tsval, 1001);
        // Doubled RTO: 2 s from the jiffy of the retransmission.
        assert_eq!(c.next_timer(), Some(ms(3000)));
        let (_, synack) = Accept::new(&syn2, ms(1020), 250, 5);
        let done = c.on_synack(&synack, ms(1040)).unwrap();
        // Karn: the echo of the retransmitted SYN's TSval, in whole ms.
        assert_eq!(done.rtt, Duration::from_millis(40));
        assert_eq!((done.syn_retrans, done.cwnd_one), (1, false));
    }

    #[test]
    fn two_lost_syns_start_at_cwnd_one_unless_spurious() {
        let (mut c, syn1) = Connect::new(ms(0), 250, 6);
        c.on_timer(ms(1000)).unwrap();
        let syn3 = c.on_timer(ms(3000)).unwrap();
        assert_eq!(c.next_timer(), Some(ms(7000)));
        let (_, synack) = Accept::new(&syn3, ms(3010), 250, 5);
        let done = c.clone().on_synack(&synack, ms(3020)).unwrap();
        assert_eq!((done.syn_retrans, done.cwnd_one, done.rtt), (2, true, Duration::from_millis(20)));
        // The first SYN was only delayed: its echo makes the timeouts spurious.
        let (_, synack1) = Accept::new(&syn1, ms(3010), 250, 5);
        let done = c.on_synack(&synack1, ms(3020)).unwrap();
        assert_eq!((done.cwnd_one, done.rtt), (false, Duration::from_millis(3020)));
    }

    #[test]
    fn syn_retries_then_connect_fails_at_127_s() {
        let (mut c, _) = Connect::new(ms(0), 250, 6);
        let mut sent = vec![];
        while let Some(t) = c.next_timer() {
            if c.on_timer(t).is_some() {
                sent.push(t.as_nanos() / 1_000_000);
            }
        }
        assert_eq!(sent, [1000, 3000, 7000, 15000, 31000, 63000]);
        assert_eq!(c.done, Some(false));
        // tcp_syn_retries = 1: one retransmission, given up at 3 s.
        let (mut c, _) = Connect::new(ms(0), 250, 1);
        assert!(c.on_timer(ms(1000)).is_some());
        assert_eq!(c.next_timer(), Some(ms(3000)));
        assert_eq!(c.on_timer(ms(3000)), None);
        assert_eq!(c.done, Some(false));
    }

    #[test]
    fn server_retransmits_its_synack_and_times_by_the_echo_after() {
        let syn = HsSeg { kind: HsKind::Syn, tsval: 1, tsecr: 0 };
        let (mut a, first) = Accept::new(&syn, ms(10), 250, 5);
        assert_eq!(a.next_timer(), Some(ms(1008)));
        let again = a.on_timer(ms(1008)).expect("SYN-ACK retransmitted");
        assert_eq!((again.tsval, again.tsecr), (1009, 1));
        assert_eq!(a.next_timer(), Some(ms(3008)));
        // The client's retransmitted SYN: SYN-ACK at once, timer re-armed (2 s).
        let syn2 = HsSeg { kind: HsKind::Syn, tsval: 1002, tsecr: 0 };
        assert_eq!(a.on_syn(&syn2, ms(1500)).map(|s| s.tsecr), Some(1002));
        assert_eq!(a.next_timer(), Some(ms(3500)));
        // Timed by the echo of the SYN-ACK the ACK answers.
        assert_eq!(a.on_ack(first.tsval, ms(1600)), Some(Duration::from_millis(1590)));
        assert_eq!(a.on_ack(first.tsval, ms(1700)), None);
        // Five expiries, then the request is dropped.
        let (mut a, _) = Accept::new(&syn, ms(0), 250, 5);
        let mut n = 0;
        while let Some(t) = a.next_timer() {
            n += a.on_timer(t).is_some() as u32;
        }
        assert_eq!((n, a.done), (5, Some(false)));
    }
}
