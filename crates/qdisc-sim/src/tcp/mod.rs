//! A sans-IO, Linux-like TCP bulk sender and receiver (Linux 6.12 behaviour).
//!
//! # What this is
//!
//! The simulator drives one [`TcpSender`] and one [`TcpReceiver`] per flow. Neither
//! reads a clock nor arms a timer: every entry point takes `now`, and each side
//! reports the next instant it wants to be woken with `next_timer()`. The sender
//! hands out skbs (possibly GSO/TSO super-packets) through [`TcpSender::poll_transmit`];
//! the receiver answers wire segments with [`Ack`]s. Both start once the three-way
//! handshake ([`handshake`]: SYN / SYN-ACK / ACK as packets, with their retransmission
//! timers) has given them its RTT sample ([`TcpConfig::syn_rtt`]) and the initial
//! window. The sending application writes through [`TcpSender::sendmsg`] into a send
//! buffer of `sk_sndbuf` bytes of truesize (`tcp_wmem`, grown by `tcp_sndbuf_expand`)
//! and blocks while it is full; without writes the sender has unlimited data queued.
//!
//! # The model in one page
//!
//! * **Sequence space**: `u64` byte offsets from 0, never wrapping. Every data segment
//!   is exactly one MSS (the write queue never runs dry), so the retransmission
//!   queue is kept per MSS (`sack.rs`), which is what Linux's SACK processing
//!   converges to after it fragments skbs at SACK boundaries.
//! * **Congestion control** ([`cubic`], [`reno`], [`bbr`], [`dctcp`]): `tcp_cubic.c`
//!   with HyStart (ack-train + delay) and Reno, both on top of `tcp_cong.c`'s ABC slow
//!   start (`tcp_slow_start` counts acked *segments*, so delayed ACKs do not slow the
//!   doubling) and `tcp_cong_avoid_ai`; BBR v1 (`tcp_bbr.c`) on the delivery-rate
//!   sampler ([`rate`], `tcp_rate.c`), pacing itself when the qdisc is not fq; DCTCP
//!   (`tcp_dctcp.c`) with its α estimator and its receiver's CE state machine.
//! * **Loss detection and recovery** (`rack.rs`, `sender.rs`, `timer.rs`): RACK-TLP, Linux's
//!   default (`tcp_recovery=1`, `tcp_early_retrans=3`), with the `tcp_fastretrans_alert`
//!   state machine (Open/Disorder/CWR/Recovery/Loss), PRR (`tcp_cwnd_reduction`),
//!   F-RTO after timeouts, undo on D-SACK and timestamps, and the RFC 6298 RTO
//!   estimator ([`rtt`]) with Linux's `tcp_rtt_estimator` and exponential backoff.
//!   Without SACK the NewReno fallback (`tcp_newreno_mark_lost`) is used.
//! * **Output path** (`output.rs`): `tcp_write_xmit` one skb per `poll_transmit`:
//!   pacing check, `tcp_cwnd_test`, TSO autosizing (`tcp_tso_autosize`), TSO
//!   deferral (`tcp_tso_should_defer`), TCP Small Queues (`tcp_small_queue_check`)
//!   and EDT timestamps (`tcp_update_skb_after_send`); retransmissions go first as in
//!   `tcp_xmit_recovery` → `tcp_xmit_retransmit_queue`.
//! * **Local congestion**: the qdisc's verdict on the skb just handed out comes back
//!   through [`TcpSender::on_local_xmit`]: `Congested`/`Dropped` enter CWR like
//!   `tcp_transmit_skb`'s `err > 0 → tcp_enter_cwr`; `Dropped` puts the skb back.
//! * **ECN** (RFC 3168 as in `tcp_ecn.h`): ECT(0) on new data only, ECE until CWR; a
//!   dctcp receiver echoes the CE state of each segment instead ([`dctcp`]).
//! * **Pacing**: `sk_pacing_rate` from `tcp_update_pacing_rate`, or BBR's; EDT
//!   timestamps when the pacing status is not NONE (fq sets FQ, BBR sets NEEDED: TCP
//!   then paces itself with its pacing timer, `tcp_internal_pacing`).
//! * **Receiver** ([`receiver`]): `tcp_data_queue`, out-of-order queue with SACK
//!   and D-SACK blocks, the delayed-ACK engine (`ato`, quickack, `TCP_DELACK_MIN`
//!   … `TCP_DELACK_MAX`) and SACK compression (`__tcp_ack_snd_check`).
//!
//! Time units follow the kernel: RTTs in µs, timestamps option in ms, and the
//! lengths of the retransmission, loss-probe, RACK and delayed-ACK timers in
//! jiffies of [`TcpConfig::hz`]. A timer armed for `n` jiffies fires at the
//! jiffy boundary `(jiffies(now) + n) · (1 s / HZ)`; the timer wheel's extra
//! slack for long timers is not modelled.
//!
//! # Simplifications (each also noted where it applies)
//!
//! No FIN, zero-window probing, PMTU probing, SACK reneging at the
//! receiver, TCP memory pressure (`tcp_mem`), GRO,
//! PAWS, RFC 2861's cwnd validation of application-limited periods
//! (`tcp_cwnd_application_limited`), or `tcp_retries2` give-up.
//! `skb_still_in_host_queue` (no retransmission of an skb still in the local qdisc or
//! driver) knows what left the host from `sk_wmem_alloc` alone, taking the socket's
//! skbs to leave in the order sent (a qdisc that drops or reorders them makes it
//! approximate). Receive-window-limited sends are whole segments
//! (no sub-MSS tail). CUBIC's `cubic_root` uses an exact integer
//! cube root instead of the kernel's table + one Newton step (≤ 0.2 % apart). Where
//! later kernels changed things (the TSQ cap, `tcp_tso_should_defer`'s ACK-timing
//! test, `tcp_packet_delayed`, AccECN), the 6.12 code is followed.
//!
//! # Driving it (contract with the simulator)
//!
//! 1. After `TcpSender::new`, after every `on_ack`, after every `on_timer`, and on
//!    tx completion of this socket's skb *when [`TcpSender::tsq_throttled`] is
//!    true*, call `poll_transmit(now, wmem_alloc)` until it returns `None`.
//! 2. After each `Some(skb)`, enqueue it on the local qdisc and, if the qdisc did
//!    not simply accept it, call `on_local_xmit(&skb, verdict, now)` *before* the
//!    next `poll_transmit`.
//! 3. `wmem_alloc` is the sum of [`Segment::truesize`] of this socket's skbs still
//!    in the qdisc/driver; release on tx completion or drop.
//! 4. Wake each side at its `next_timer()` and call `on_timer(now)` (repeat while
//!    `next_timer() <= now`; the receiver may return one ACK per call).
//! 5. Split a GSO skb into wire segments with [`Segment::split`] (only the first
//!    keeps `cwr`, as `SKB_GSO_TCP_ECN` does) before the receiver sees them.
//! 6. The application writes with [`TcpSender::sendmsg`], then runs the poll loop; if
//!    the write was cut short it waits unless [`TcpSender::memory_free`] holds, and
//!    resumes when [`TcpSender::take_write_space`] says a poll loop woke it.

use qdisc::{Duration, Instant};

pub mod bbr;
pub mod cubic;
pub mod dctcp;
pub mod handshake;
mod rack;
pub mod rate;
pub mod receiver;
pub mod reno;
pub mod rtt;
mod sack;
pub mod sender;

mod output;
mod timer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cc;

pub use receiver::TcpReceiver;
pub use sender::TcpSender;

/// Header bytes per segment on the wire: 14 Ethernet + 20 IPv4 + 32 TCP (20 + 12
/// bytes of timestamps option). SACK blocks on ACKs are not counted.
pub const HEADER: u32 = 66;

/// Length of a pure ACK without SACK blocks as the qdisc counts it (see [`Ack::wire_len`]).
pub const ACK_LEN: u32 = HEADER;

/// `sk_gso_max_size` for a TCP socket over a device with the default
/// `gso_ipv4_max_size` of 65536: `sk_dst_gso_max_size` subtracts `MAX_TCP_HEADER + 1`
/// (MAX_TCP_HEADER = 320 on x86_64 distribution kernels).
pub const GSO_MAX_SIZE: u32 = 65536 - 321;

/// `skb->truesize` of a TCP data skb before its payload is attached: the head that
/// `tcp_stream_alloc_skb` allocates (`alloc_skb_fclone(MAX_TCP_HEADER)`), 960 bytes on
/// x86_64 6.12/6.18 — the engine's rule for that path, [`qdisc::packet::tcp_skb_truesize`],
/// which derives it. The headers live in that head; the payload (page frags) adds
/// exactly its length.
pub const SKB_HEAD_TRUESIZE: u32 = qdisc::packet::tcp_skb_truesize(0);

/// `MAX_TCP_HEADER`, and `SKB_DATA_ALIGN` of `sizeof(struct skb_shared_info)` and of
/// `sizeof(struct sk_buff)` on x86_64 (the engine's, see [`qdisc::packet`]).
pub use qdisc::packet::{MAX_TCP_HEADER, SKB_SHINFO_SIZE as SHINFO_SIZE, SKB_STRUCT_SIZE};

/// `TCP_INFINITE_SSTHRESH`.
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// Which congestion control module (`net.ipv4.tcp_congestion_control`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CongestionControl {
    /// `tcp_cubic.c`, Linux's default.
    #[default]
    Cubic,
    /// `tcp_reno_*` in `tcp_cong.c`.
    Reno,
    /// `tcp_bbr.c` (BBR v1).
    Bbr,
    /// `tcp_dctcp.c`.
    Dctcp,
}

impl CongestionControl {
    /// Every module the model has, by its kernel name.
    pub const ALL: [CongestionControl; 4] =
        [CongestionControl::Cubic, CongestionControl::Reno, CongestionControl::Bbr, CongestionControl::Dctcp];

    /// The name `net.ipv4.tcp_congestion_control` and `TCP_CONGESTION` use.
    pub fn name(self) -> &'static str {
        match self {
            CongestionControl::Cubic => "cubic",
            CongestionControl::Reno => "reno",
            CongestionControl::Bbr => "bbr",
            CongestionControl::Dctcp => "dctcp",
        }
    }

    /// The module the socket runs with `ecn` negotiated or not, by the name
    /// `TCP_CONGESTION` reads back: dctcp without ECN is "dctcp-reno".
    pub fn effective_name(self, ecn: bool) -> &'static str {
        match self {
            CongestionControl::Dctcp if !ecn => "dctcp-reno",
            c => c.name(),
        }
    }

    /// The module of that kernel name, if the model has it.
    pub fn from_name(name: &str) -> Option<CongestionControl> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// `sk->sk_pacing_status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PacingStatus {
    /// `SK_PACING_NONE`: no EDT timestamps, no pacing.
    #[default]
    None,
    /// `SK_PACING_FQ`: the egress qdisc is fq; skbs carry EDT timestamps and fq holds them.
    Fq,
    /// `SK_PACING_NEEDED`: TCP paces itself (`tcp_internal_pacing`, hrtimer at the EDT).
    Needed,
}

/// Sender and receiver configuration. `Default` is Linux 6.12 with stock sysctls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// `net.ipv4.tcp_congestion_control` = cubic.
    pub cc: CongestionControl,
    /// Payload bytes per segment: 1500 MTU − 20 IPv4 − 20 TCP − 12 timestamps = 1448.
    pub mss: u32,
    /// `TCP_INIT_CWND` = 10 segments (include/net/tcp.h).
    pub initial_cwnd: u32,
    /// `TCP_RTO_MIN` = 200 ms (route `rto_min`); the initial RTO is `TCP_TIMEOUT_INIT` = 1 s.
    pub min_rto: Duration,
    /// Delayed ACKs (`TCP_DELACK_MIN` 40 ms … `TCP_DELACK_MAX` 200 ms, quickack at start).
    /// `false` makes the receiver ACK every segment (`TCP_QUICKACK` forever).
    pub delayed_ack: bool,
    /// `net.ipv4.tcp_sack` = 1 (with D-SACK, `tcp_dsack` = 1).
    pub sack: bool,
    /// ECN negotiated in the (unmodelled) handshake. With `net.ipv4.tcp_ecn` = 2 a
    /// client asks for it only when its SYN went out with a module that needs ECN
    /// (`TCP_CONG_NEEDS_ECN`: dctcp as the host's default), in an ECT SYN the server
    /// accepts only if its listener needs ECN too. dctcp without it falls back to
    /// "dctcp-reno" (`dctcp_init`): Reno, no ECN.
    pub ecn: bool,
    /// TSO/GSO (`tcp_tso_autosize`); `false` sends one MSS per skb.
    pub tso: bool,
    /// `net.ipv4.tcp_limit_output_bytes` = 1048576 in 6.12 (raised to 4 MiB in 6.16); caps the
    /// TSQ budget of sockets with pacing status `None` only.
    pub tsq_limit: u64,
    /// `net.ipv4.tcp_rmem` of the receiving host (min, default, max; bytes of truesize):
    /// `sk_rcvbuf` starts at the default, the window scale follows the max
    /// ([`receiver`]: the receive window).
    pub rmem: [u32; 3],
    /// `sk_pacing_status` at start; the simulator sets `Fq` when the egress qdisc is fq.
    pub pacing_status: PacingStatus,
    /// `SO_MAX_PACING_RATE` (`sk_max_pacing_rate`), bytes/s; `u64::MAX` = unset.
    pub max_pacing_rate: u64,
    /// `CONFIG_HZ` = 250 (kernel default and Debian's); timer lengths are in jiffies.
    pub hz: u32,
    /// The handshake's RTT sample ([`handshake`]: the SYN-ACK on the client,
    /// `tcp_synack_rtt_meas` on the server): seeds srtt, RTO, min_rtt and the initial
    /// pacing rate. `None` leaves them unknown (RTO 1 s, pacing rate unlimited).
    pub syn_rtt: Option<Duration>,
    /// SYNs the handshake retransmitted (they count in `tcpi_total_retrans`).
    pub syn_retrans: u32,
    /// `tcp_init_transfer` starts at cwnd 1: more than one SYN retransmitted, not spuriously.
    pub syn_cwnd_one: bool,
    /// The SYN-ACK's TSval ([`ts_ms`] of the peer's clock), the sender's first
    /// `ts_recent`: what its first data echoes (0 = none).
    pub synack_tsval: u32,
    /// `net.ipv4.tcp_syn_retries` = 6 (the client's host).
    pub syn_retries: u32,
    /// `net.ipv4.tcp_synack_retries` = 5 (the server's host).
    pub synack_retries: u32,
    /// `net.ipv4.tcp_slow_start_after_idle` = 1: restart the window after an idle RTO.
    pub slow_start_after_idle: bool,
    /// Tail loss probe (`net.ipv4.tcp_early_retrans` = 3).
    pub tlp: bool,
    /// F-RTO after a timeout (`net.ipv4.tcp_frto` = 2).
    pub frto: bool,
    /// `net.ipv4.tcp_pacing_ss_ratio` = 200 (%).
    pub pacing_ss_ratio: u32,
    /// `net.ipv4.tcp_pacing_ca_ratio` = 120 (%).
    pub pacing_ca_ratio: u32,
    /// `net.ipv4.tcp_min_tso_segs` = 2.
    pub min_tso_segs: u32,
    /// `net.ipv4.tcp_tso_rtt_log` = 9 (2^9 µs).
    pub tso_rtt_log: u32,
    /// `sk_gso_max_size`, see [`GSO_MAX_SIZE`].
    pub gso_max_size: u32,
    /// `sk_pacing_shift` = 10 (about 1 ms of pacing rate per TSO skb / TSQ budget).
    pub pacing_shift: u32,
    /// `net.ipv4.tcp_wmem` of the sending host (min, default, max; bytes of truesize):
    /// `sk_sndbuf` starts at the default (`tcp_init_sock`) and `tcp_sndbuf_expand` grows
    /// it up to the max (6.18's defaults: 4096, 16384, 4 MiB on a machine with 512 MiB
    /// or more, `tcp_init`). Only a writer ([`TcpSender::sendmsg`]) is held by it.
    pub wmem: [u32; 3],
    /// `net.ipv4.tcp_notsent_lowat` (bytes written but not sent above which the socket
    /// is not writable, `tcp_stream_memory_free`); `u32::MAX` (the default): no limit.
    pub notsent_lowat: u32,
    /// Seed of the socket's own randomness (BBR's gain-cycle start phase, the kernel's
    /// `get_random_u32_below`); the simulator derives it from the scenario's seed.
    pub seed: u64,
    /// `tcp_tso_should_defer` as 6.18 has it: defer only while the next ACK is expected
    /// within min(1 ms, srtt/2) of now (from the oldest unacknowledged skb's send time
    /// plus srtt); 6.12 defers once that skb left more than srtt/2 ago.
    pub defer_until_expected_ack: bool,
    /// SACK compression's delay as a share of the receiver's RTT, at most
    /// `tcp_comp_sack_delay_ns`: `net.ipv4.tcp_comp_sack_rtt_percent` (33 in 6.18), or
    /// `None` for 6.12's fixed 5 %.
    pub comp_sack_rtt_percent: Option<u32>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            cc: CongestionControl::Cubic,
            mss: 1448,
            initial_cwnd: 10,
            min_rto: Duration::from_millis(200),
            delayed_ack: true,
            sack: true,
            ecn: false,
            tso: true,
            tsq_limit: 1 << 20,
            rmem: [4096, 131072, 6291456],
            pacing_status: PacingStatus::None,
            max_pacing_rate: u64::MAX,
            hz: 250,
            syn_rtt: None,
            syn_retrans: 0,
            syn_cwnd_one: false,
            synack_tsval: 0,
            syn_retries: 6,
            synack_retries: 5,
            slow_start_after_idle: true,
            tlp: true,
            frto: true,
            pacing_ss_ratio: 200,
            pacing_ca_ratio: 120,
            min_tso_segs: 2,
            tso_rtt_log: 9,
            gso_max_size: GSO_MAX_SIZE,
            pacing_shift: 10,
            defer_until_expected_ack: false,
            comp_sack_rtt_percent: None,
            wmem: [4096, 16384, 4 << 20],
            notsent_lowat: u32::MAX,
            seed: 0,
        }
    }
}

/// One skb from the sender: a single segment or a GSO/TSO super-packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First payload byte.
    pub seq: u64,
    /// Payload bytes.
    pub len: u32,
    /// GSO segments (`ceil(len / mss)`), 1 if not GSO.
    pub segs: u16,
    /// ECN-capable transport: ECT(0) on new data when ECN is negotiated.
    pub ect: bool,
    /// CWR flag (on the first wire segment only once split).
    pub cwr: bool,
    /// A retransmission (fast, RTO or tail loss probe).
    pub retransmit: bool,
    /// EDT departure time (`skb->tstamp`) when pacing status is not `None`, else `Instant::ZERO`.
    pub tstamp: Instant,
    /// The sender's clock for the timestamps option (TSval) and RTT: `skb_mstamp_ns`.
    pub sent_at: Instant,
    /// TSecr: the sender's `ts_recent`, the TSval of the last ACK it took ([`ts_ms`]
    /// clock, 0 = none). The receiver's RTT samples come from it.
    pub tsecr: u32,
}

impl Segment {
    /// End of the payload (exclusive).
    pub fn end(&self) -> u64 {
        self.seq + self.len as u64
    }

    /// Bytes the qdisc accounts: payload plus one [`HEADER`] per wire segment.
    pub fn wire_len(&self) -> u32 {
        self.len + self.segs as u32 * HEADER
    }

    /// `skb->truesize` for `sk_wmem_alloc` accounting (TSQ): [`SKB_HEAD_TRUESIZE`] plus
    /// the payload, as `tcp_stream_alloc_skb` + `tcp_sendmsg_locked` build it.
    pub fn truesize(&self) -> u32 {
        truesize_of_payload(self.len)
    }

    /// How many wire segments [`Segment::split`] cuts this skb into.
    pub fn pieces(&self, mss: u32) -> u32 {
        self.len.div_ceil(mss).max(1)
    }
    /// The wire segments of this skb, as the NIC (TSO) or GSO produces them: `mss`
    /// payload each (the last may be shorter), same flags and times, `cwr` only on
    /// the first (`SKB_GSO_TCP_ECN`).
    pub fn split(&self, mss: u32) -> impl Iterator<Item = Segment> + '_ {
        (0..self.pieces(mss)).map(move |i| self.piece(mss, i))
    }
    /// The `i`-th of [`Segment::split`]'s segments.
    pub fn piece(&self, mss: u32, i: u32) -> Segment {
        assert!(i < self.pieces(mss), "no more segments than TSO cuts");
        let off = i * mss;
        Segment {
            seq: self.seq + off as u64,
            len: (self.len - off).min(mss),
            segs: 1,
            cwr: self.cwr && i == 0,
            ..self.clone()
        }
    }
}

/// `skb->truesize` of a TCP data skb carrying `len` payload bytes (see [`SKB_HEAD_TRUESIZE`]).
pub fn truesize_of_payload(len: u32) -> u32 {
    qdisc::packet::tcp_skb_truesize(len)
}

/// A pure ACK from the receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// Cumulative ACK: next byte expected.
    pub ack: u64,
    /// SACK blocks `[start, end)`, at most 3 (4 minus one for the timestamps option),
    /// D-SACK first if any, then the most recently changed block first.
    pub sack: Vec<(u64, u64)>,
    /// ECN-Echo.
    pub ece: bool,
    /// Timestamp echo (TSecr): the `sent_at` of the segment the receiver echoes.
    pub tsecr: Instant,
    /// TSval: the receiver's clock when it sent this ACK ([`ts_ms`]).
    pub tsval: u32,
    /// Advertised receive window, bytes.
    pub rwnd: u64,
}

impl Ack {
    /// Bytes the qdisc accounts for this ACK: [`ACK_LEN`], plus the SACK option
    /// (2 NOPs, kind, length and 8 bytes per block) when blocks are present.
    pub fn wire_len(&self) -> u32 {
        if self.sack.is_empty() {
            ACK_LEN
        } else {
            ACK_LEN + 4 + 8 * self.sack.len() as u32
        }
    }
}

/// The local qdisc's answer to the skb just handed out (`net_xmit_eval`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalXmit {
    /// `NET_XMIT_SUCCESS`.
    Ok,
    /// `NET_XMIT_CN`: queued (or another packet dropped); counts as sent, enters CWR.
    Congested,
    /// `NET_XMIT_DROP`: not sent; the skb stays at the head of the write queue, enters CWR.
    Dropped,
}

/// `icsk_ca_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CaState {
    Open,
    Disorder,
    Cwr,
    Recovery,
    Loss,
}

/// Counters and state, like `tcp_info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderStats {
    /// Payload bytes handed to IP, retransmissions included (`tcpi_bytes_sent`).
    pub bytes_sent: u64,
    /// Payload bytes cumulatively acknowledged (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Payload bytes retransmitted (`tcpi_bytes_retrans`).
    pub bytes_retrans: u64,
    /// Retransmitted segments (`tcpi_total_retrans`, what iperf3 reports as Retr).
    pub retransmits: u64,
    /// Congestion window in segments (`tcpi_snd_cwnd`).
    pub cwnd: u32,
    /// Congestion window in bytes (`snd_cwnd * mss`).
    pub snd_cwnd_bytes: u64,
    /// Slow-start threshold in segments (`INFINITE_SSTHRESH` until the first reduction).
    pub ssthresh: u32,
    /// Smoothed RTT (`tcpi_rtt`), zero until the first sample.
    pub srtt: Duration,
    /// RTT mean deviation (`tcpi_rttvar` = mdev / 4).
    pub rttvar: Duration,
    /// Current retransmission timeout, backoff included (`tcpi_rto`).
    pub rto: Duration,
    /// Windowed minimum RTT (`tcpi_min_rtt`), `None` before the first sample.
    pub min_rtt: Option<Duration>,
    /// Segments in flight (`tcp_packets_in_flight`).
    pub in_flight: u32,
    /// Segments sent and not cumulatively acked (`packets_out`).
    pub packets_out: u32,
    /// Segments SACKed (`sacked_out`).
    pub sacked_out: u32,
    /// Segments marked lost (`lost_out`).
    pub lost_out: u32,
    /// Retransmissions in flight (`retrans_out`).
    pub retrans_out: u32,
    /// Segments delivered, (S)ACKed (`tcpi_delivered`).
    pub delivered: u64,
    /// Segments ever marked lost (`tcpi_lost` counter `tp->lost`).
    pub lost: u64,
    /// Congestion-avoidance state.
    pub ca_state: CaState,
    /// `sk_pacing_rate`, bytes/s.
    pub pacing_rate: u64,
    /// Data segments sent (`tcpi_data_segs_out`).
    pub data_segs_out: u64,
    /// Timeouts (RTO expirations).
    pub rto_count: u64,
    /// Tail loss probes sent.
    pub tlp_count: u64,
    /// Reductions undone (spurious recovery/RTO detected).
    pub undo_count: u64,
    /// `tcpi_delivery_rate`, bytes/s (0 before the first rate sample).
    pub delivery_rate: u64,
    /// `tcpi_delivery_rate_app_limited`.
    pub delivery_rate_app_limited: bool,
}

/// Jiffies arithmetic for a given `CONFIG_HZ` (include/linux/jiffies.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hz(pub u32);

impl Hz {
    pub(crate) fn jiffy_ns(self) -> u64 {
        1_000_000_000 / self.0 as u64
    }
    /// Jiffies since the simulation epoch.
    pub(crate) fn jiffies(self, now: Instant) -> u64 {
        now.as_nanos() / self.jiffy_ns()
    }
    /// `tcp_jiffies32`: like the kernel, jiffies start at `INITIAL_JIFFIES` = −300 s so that
    /// 0 (used as "unset" by CUBIC) is not hit at start.
    pub(crate) fn jiffies32(self, now: Instant) -> u32 {
        let initial = (300u64 * self.0 as u64).wrapping_neg() as u32;
        initial.wrapping_add(self.jiffies(now) as u32)
    }
    /// `usecs_to_jiffies`: rounds up.
    pub(crate) fn usecs_to_jiffies(self, us: u64) -> u64 {
        (us * self.0 as u64).div_ceil(1_000_000)
    }
    pub(crate) fn jiffies_to_usecs(self, j: u64) -> u64 {
        j * 1_000_000 / self.0 as u64
    }
    /// `nsecs_to_jiffies`: rounds down.
    pub(crate) fn nsecs_to_jiffies(self, ns: u64) -> u64 {
        ns / self.jiffy_ns()
    }
    /// When a timer armed at `now` for `j` jiffies fires.
    pub(crate) fn deadline(self, now: Instant, j: u64) -> Instant {
        Instant::from_nanos((self.jiffies(now) + j) * self.jiffy_ns())
    }
}

/// `tcp_clock_us`-style microseconds of an instant.
pub(crate) fn us(t: Instant) -> u64 {
    t.as_nanos() / 1_000
}

/// TSval/TSecr clock: milliseconds (`TCP_TS_HZ` = 1000) plus a fixed `tsoffset` of 1 so
/// that a real timestamp is never 0, which the kernel reads as "no echo".
pub(crate) fn ts_ms(t: Instant) -> u32 {
    (t.as_nanos() / 1_000_000) as u32 + 1
}
