//! BBR, DCTCP and the delivery-rate sampler, stepped by hand: each test feeds the
//! module the samples or segments the kernel would and checks the exact state the
//! kernel's arithmetic gives.

use qdisc::{Duration, Instant};

use super::bbr::{self, Bbr, BbrSock, Mode, BBR_UNIT, HIGH_GAIN};
use super::dctcp::Dctcp;
use super::rate::RateSample;
use super::*;

const MSS: u32 = 1448;
const HZ: u32 = 250;

/// A socket 100 s into the jiffies clock with a 10 ms handshake RTT.
fn sock() -> BbrSock {
    BbrSock {
        now_ns: 1_000_000_000,
        jiffies: 1000,
        hz: HZ,
        mss: MSS,
        delivered: 0,
        delivered_mstamp: 1_000_000,
        lost: 0,
        in_flight: 0,
        wstamp_ns: 0,
        srtt_us: 10_000 << 3,
        min_rtt_us: 10_000,
        max_pacing_rate: u64::MAX,
        pacing_shift: 10,
        ca_state: CaState::Open,
        clamp: u32::MAX,
        cwnd: 10,
        ssthresh: INFINITE_SSTHRESH,
        pacing_rate: 0,
        app_limited: 0,
    }
}

/// One ACK that ends a round: `delivered` packets over 2^20 µs, so the bandwidth
/// sample is `delivered × 16` (packets/µs << 24).
fn round(b: &mut Bbr, sk: &mut BbrSock, delivered: u32, losses: u32, rtt_us: i64) {
    let rs = RateSample {
        prior_delivered: sk.delivered,
        delivered: delivered as i64,
        interval_us: 1 << 20,
        rtt_us,
        losses,
        acked_sacked: delivered,
        prior_in_flight: sk.in_flight,
        ..RateSample::default()
    };
    sk.delivered += delivered as u64;
    sk.lost += losses as u64;
    sk.delivered_mstamp += 20_000;
    sk.now_ns = sk.delivered_mstamp * 1000;
    b.main(sk, &rs);
}

#[test]
fn bbr_constants_and_rate_arithmetic_are_the_kernels() {
    assert_eq!((HIGH_GAIN, bbr::DRAIN_GAIN, bbr::CWND_GAIN), (739, 88, 512));
    assert_eq!(bbr::PACING_GAIN, [320, 192, 256, 256, 256, 256, 256, 256]);
    // 1 packet/µs × 1448 B at gain 1: 1448 MB/s less the 1 % margin.
    assert_eq!(Bbr::rate_bytes_per_sec(MSS, bbr::BW_UNIT, BBR_UNIT), 1_433_520_000);
    // bbr_init: high gain × 10 packets / 10 ms (srtt) = 2.89 × 1.448 MB/s, −1 %.
    let mut sk = sock();
    let b = Bbr::new(&mut sk, 1);
    let bw = 10 * bbr::BW_UNIT / 10_000;
    assert_eq!(sk.pacing_rate, Bbr::rate_bytes_per_sec(MSS, bw, HIGH_GAIN));
    assert_eq!(sk.pacing_rate, 4_138_115);
    assert_eq!((b.mode, b.min_rtt_us, sk.ssthresh), (Mode::Startup, 10_000, INFINITE_SSTHRESH));
    // bbr_min_tso_segs / bbr_tso_segs_goal: 1 segment below 1.2 Mbit/s; at 4.1 MB/s
    // 4_138_115 >> 10 = 4041 bytes = 2 MSS; at most 65215 bytes (and 127 segments).
    assert_eq!(Bbr::min_tso_segs(149_999), 1);
    assert_eq!(Bbr::min_tso_segs(150_000), 2);
    assert_eq!(Bbr::tso_segs_goal(&sk), 2);
    let fast = BbrSock { pacing_rate: 10_000_000_000, ..sk };
    assert_eq!(Bbr::tso_segs_goal(&fast), 45); // 65215 bytes / 1448
}

/// bbr_check_full_bw_reached: the pipe is full after 3 rounds in a row whose max
/// bandwidth grew by less than 25 %; then DRAIN (ssthresh = one BDP's inflight), and
/// PROBE_BW once what is in the network at the next EDT is down to that.
#[test]
fn bbr_enters_drain_after_three_rounds_without_growth() {
    let mut sk = sock();
    let mut b = Bbr::new(&mut sk, 1);
    sk.in_flight = 1000; // keep DRAIN from ending at once
                         // Growing rounds: 100, 200, 400 packets per 2^20 µs.
    for (i, d) in [100u32, 200, 400].into_iter().enumerate() {
        round(&mut b, &mut sk, d, 0, 10_000);
        assert_eq!((b.full_bw, b.full_bw_cnt, b.mode), (d * 16, 0, Mode::Startup), "round {i}");
    }
    // 400 → 480 is +20 %: not significant. Three such rounds fill the pipe.
    for cnt in 1..=3u32 {
        round(&mut b, &mut sk, 480, 0, 10_000);
        assert_eq!(b.full_bw_cnt, cnt);
        assert_eq!(b.full_bw, 6400, "full_bw stays at the last significant growth");
        assert_eq!(b.full_bw_reached, cnt == 3);
        assert_eq!(b.mode, if cnt == 3 { Mode::Drain } else { Mode::Startup });
    }
    assert_eq!((b.pacing_gain, b.cwnd_gain), (bbr::DRAIN_GAIN, HIGH_GAIN));
    // ssthresh = bbr_inflight(max_bw, 1): BDP = ⌈7680 × 10 ms / 2^24⌉ = 5 packets, plus
    // 3 TSO skbs of 2 = 11, rounded up to even: 12.
    assert_eq!(b.max_bw(), 7680);
    assert_eq!(b.bdp(7680, BBR_UNIT), 5);
    assert_eq!(sk.ssthresh, 12);
    // Still 1000 in flight: DRAIN holds. Once in flight ≤ 12: PROBE_BW.
    round(&mut b, &mut sk, 480, 0, 10_000);
    assert_eq!(b.mode, Mode::Drain);
    sk.in_flight = 12;
    round(&mut b, &mut sk, 480, 0, 10_000);
    assert_eq!(b.mode, Mode::ProbeBw);
    assert_ne!(b.cycle_idx, 1, "never starts in the 3/4 phase");
}

/// PROBE_BW cycles 5/4, 3/4, then six phases at 1, one min_rtt each; 5/4 ends only when
/// inflight reached 5/4 BDP (or a loss), 3/4 as soon as inflight is down to one BDP.
/// The first phase comes from the socket's seed: never 3/4, and the seed decides.
#[test]
fn bbr_pacing_gain_cycle_sequence() {
    let start = |seed: u64| {
        let mut sk = sock();
        let mut b = Bbr::new(&mut sk, seed);
        for d in [100u32, 200, 400, 400, 400, 400] {
            round(&mut b, &mut sk, d, 0, 10_000);
        }
        assert_eq!(b.mode, Mode::ProbeBw);
        (b, sk)
    };
    let firsts: std::collections::BTreeSet<u32> = (0..64).map(|seed| start(seed).0.cycle_idx).collect();
    assert_eq!(firsts, [0, 2, 3, 4, 5, 6, 7].into_iter().collect());
    assert_eq!(start(7).0.cycle_idx, start(7).0.cycle_idx);

    let (mut b, mut sk) = start(3);
    // Phases are one min_rtt (10 ms) of delivered_mstamp; each round advances it 20 ms.
    // The 5/4 phase also needs what is in the network at the next EDT (inflight + one
    // TSO skb of 2) to reach bbr_inflight(bw, 5/4) = 5 + 3·2 → 12, +2 in that phase = 14:
    // at 11 in flight it waits; 3/4 ends by time anyway.
    sk.in_flight = 11;
    let mut gains = Vec::new();
    let mut idx = Vec::new();
    for _ in 0..24 {
        round(&mut b, &mut sk, 400, 0, 10_000);
        gains.push(b.pacing_gain);
        idx.push(b.cycle_idx);
    }
    let at_probe = idx.iter().position(|&i| i == 0).expect("reaches the 5/4 phase");
    assert!(idx[at_probe..].iter().all(|&i| i == 0), "5/4 waits for inflight: {idx:?}");
    assert!(gains[at_probe..].iter().all(|&g| g == 320));
    sk.in_flight = 12;
    gains.clear();
    for _ in 0..16 {
        round(&mut b, &mut sk, 400, 0, 10_000);
        gains.push(b.pacing_gain);
    }
    assert_eq!(gains[..8], [192, 256, 256, 256, 256, 256, 256, 320]);
    assert_eq!(gains[8..], gains[..8]);
}

/// The bandwidth filter is the max of the samples of the last 10 rounds.
#[test]
fn bbr_bandwidth_filter_is_the_max_over_10_rounds() {
    let mut sk = sock();
    let mut b = Bbr::new(&mut sk, 1);
    sk.in_flight = 1000;
    round(&mut b, &mut sk, 100, 0, 10_000); // round 1: 1600
    assert_eq!((b.rtt_cnt, b.max_bw()), (1, 1600));
    for r in 2..=11 {
        round(&mut b, &mut sk, 50, 0, 10_000);
        assert_eq!((b.rtt_cnt, b.max_bw()), (r, 1600), "round {r}");
    }
    round(&mut b, &mut sk, 50, 0, 10_000);
    assert_eq!((b.rtt_cnt, b.max_bw()), (12, 800), "the round-1 sample has aged out");
    // An app-limited sample below the max does not enter; a higher one does.
    let app = |d: i64| RateSample {
        prior_delivered: u64::MAX,
        delivered: d,
        interval_us: 1 << 20,
        rtt_us: 10_000,
        acked_sacked: 1,
        is_app_limited: true,
        ..RateSample::default()
    };
    b.main(&mut sk, &app(10));
    assert_eq!(b.max_bw(), 800);
    b.main(&mut sk, &app(60));
    assert_eq!(b.max_bw(), 960);
}

/// min_rtt expires after 10 s without a sample at or below it: PROBE_RTT, cwnd 4, for
/// 200 ms (50 jiffies) and a round once inflight is at 4; then the saved cwnd returns.
#[test]
fn bbr_probe_rtt_after_10s_without_a_new_min_rtt() {
    let mut sk = sock();
    let mut b = Bbr::new(&mut sk, 1);
    for d in [100u32, 200, 400, 400, 400, 400] {
        round(&mut b, &mut sk, d, 0, 10_000);
    }
    assert_eq!(b.mode, Mode::ProbeBw);
    sk.in_flight = 20;
    let stamp = b.min_rtt_stamp;
    // RTTs above min_rtt for 10 s (2500 jiffies): nothing happens until after that.
    sk.jiffies = stamp + 10 * HZ;
    round(&mut b, &mut sk, 400, 0, 12_000);
    assert_eq!((b.mode, b.min_rtt_us), (Mode::ProbeBw, 10_000));
    let cwnd_before = sk.cwnd;
    assert!(cwnd_before > 4);
    sk.jiffies += 1;
    round(&mut b, &mut sk, 400, 0, 12_000);
    // Expired: the sample becomes min_rtt, PROBE_RTT starts, cwnd is cut to 4.
    assert_eq!((b.mode, b.min_rtt_us, b.min_rtt_stamp), (Mode::ProbeRtt, 12_000, sk.jiffies));
    assert_eq!((b.prior_cwnd, sk.cwnd), (cwnd_before, 4));
    assert_eq!((b.pacing_gain, b.cwnd_gain), (BBR_UNIT, BBR_UNIT));
    assert_eq!(b.probe_rtt_done_stamp, 0, "inflight 20 > 4: the 200 ms have not started");
    assert_ne!(sk.app_limited, 0, "PROBE_RTT's samples are app-limited");
    // Inflight down to 4: 200 ms from now.
    sk.in_flight = 4;
    round(&mut b, &mut sk, 4, 0, 11_000);
    let done = sk.jiffies + 50;
    assert_eq!((b.mode, b.probe_rtt_done_stamp), (Mode::ProbeRtt, done));
    for j in [10, 50] {
        sk.jiffies = done - 50 + j;
        round(&mut b, &mut sk, 4, 0, 11_000);
        assert_eq!((b.mode, sk.cwnd), (Mode::ProbeRtt, 4), "jiffy {j} of 50");
    }
    sk.jiffies = done + 1;
    round(&mut b, &mut sk, 4, 0, 11_000);
    assert_eq!(b.mode, Mode::ProbeBw);
    assert!(sk.cwnd >= cwnd_before.min(b.prior_cwnd), "cwnd {} restored", sk.cwnd);
    assert_eq!(b.min_rtt_stamp, done + 1, "the filter restarts at the exit");
}

/// bbr_lt_bw_sampling: after the first loss, two intervals of ≥ 4 rounds with ≥ 20 %
/// loss and consistent rates mean a policer; BBR then uses their average with gain 1,
/// for 48 rounds of PROBE_BW.
#[test]
fn bbr_long_term_sampler_detects_a_policer() {
    let mut sk = sock();
    let mut b = Bbr::new(&mut sk, 1);
    for d in [100u32, 200, 400, 400, 400, 400] {
        round(&mut b, &mut sk, d, 0, 10_000);
    }
    assert_eq!(b.mode, Mode::ProbeBw);
    // Rounds of 100 delivered, 30 lost, 20 ms apart (delivered_mstamp).
    round(&mut b, &mut sk, 100, 30, 10_000);
    assert!(b.lt_is_sampling);
    assert_eq!(b.lt_rtt_cnt, 1);
    for _ in 0..3 {
        round(&mut b, &mut sk, 100, 30, 10_000);
    }
    // First interval: 3 rounds after the start, 300 delivered in 60 ms: 300 × 2^24 / 60000.
    assert_eq!(b.lt_bw, 83_886);
    assert!(!b.lt_use_bw);
    for _ in 0..3 {
        round(&mut b, &mut sk, 100, 30, 10_000);
        assert!(!b.lt_use_bw);
    }
    round(&mut b, &mut sk, 100, 30, 10_000);
    // Second interval: 400 in 80 ms, the same rate: policed.
    assert!(b.lt_use_bw);
    assert_eq!((b.lt_bw, b.bw()), (83_886, 83_886));
    assert_eq!(b.pacing_gain, BBR_UNIT);
    // 48 rounds later (in PROBE_BW) the long-term estimate is dropped.
    for i in 1..48 {
        round(&mut b, &mut sk, 100, 0, 10_000);
        assert!(b.lt_use_bw, "round {i}");
    }
    round(&mut b, &mut sk, 100, 0, 10_000);
    assert!(!b.lt_use_bw);
    assert_eq!(b.lt_bw, 0);
}

/// Recovery: packet conservation in the first round (cwnd = inflight + acked), the
/// saved cwnd back when it ends.
#[test]
fn bbr_recovery_conserves_packets_then_restores() {
    let mut sk = sock();
    let mut b = Bbr::new(&mut sk, 1);
    for d in [100u32, 200, 400, 400, 400, 400] {
        round(&mut b, &mut sk, d, 0, 10_000);
    }
    sk.in_flight = 10;
    let before = sk.cwnd;
    // tcp_enter_recovery → bbr_ssthresh saves cwnd (prev state Open).
    assert_eq!(b.ssthresh(&sk), sk.ssthresh);
    assert_eq!(b.prior_cwnd, before);
    sk.ca_state = CaState::Recovery;
    round(&mut b, &mut sk, 2, 3, 10_000);
    assert!(b.packet_conservation);
    assert_eq!(sk.cwnd, 10 + 2, "inflight + acked");
    // Later rounds of recovery: slow start up to the target (2 per acked at most).
    round(&mut b, &mut sk, 2, 0, 10_000);
    assert!(!b.packet_conservation, "a new round ends conservation");
    assert_eq!(sk.cwnd, 12 + 2);
    sk.ca_state = CaState::Open;
    round(&mut b, &mut sk, 2, 0, 10_000);
    assert_eq!(sk.cwnd, before, "restored to the cwnd before recovery");
}

// ----- DCTCP --------------------------------------------------------------------------

/// α ← α − α/16 + (ce << 6)/delivered once per window, from α = 1024; with 25 % marks
/// it settles where α/16 = 16.
#[test]
fn dctcp_alpha_after_n_windows_with_a_known_ce_fraction() {
    // Windows of 100 packets (sequence in packets here), 25 of them CE.
    let mut d = Dctcp::new(100, 0, 0);
    assert_eq!(d.alpha, 1024);
    let (mut delivered, mut ce) = (0u64, 0u64);
    let mut alphas = Vec::new();
    for w in 1..=100u64 {
        // A mid-window ACK changes nothing.
        d.update_alpha(w * 100 - 50, w * 100 + 50, delivered + 50, ce + 10);
        assert_eq!((d.next_seq, d.alpha), (w * 100, alphas.last().copied().unwrap_or(1024)), "window {w}");
        delivered += 100;
        ce += 25;
        d.update_alpha(w * 100, (w + 1) * 100, delivered, ce);
        assert_eq!((d.next_seq, d.old_delivered, d.old_delivered_ce), ((w + 1) * 100, delivered, ce));
        alphas.push(d.alpha);
    }
    assert_eq!(alphas[..6], [976, 931, 889, 850, 813, 779]);
    assert_eq!(alphas[99], 271);
    // No marks: α decays by α/16, and to 0 once α/16 rounds to 0 (min_not_zero).
    let mut d = Dctcp::new(0, 0, 0);
    let mut seq = Vec::new();
    for w in 1..=100u64 {
        d.update_alpha(w, w + 1, w * 10, 0);
        seq.push(d.alpha);
    }
    assert_eq!(seq[..4], [960, 900, 844, 792]);
    let tail: Vec<u32> = seq.iter().copied().skip_while(|&a| a > 19).take(6).collect();
    assert_eq!(tail, [19, 18, 17, 16, 15, 0]);
}

/// The ECE reaction: ssthresh = cwnd − cwnd·α/2048 (at least 2); losses halve and are
/// undone to the cwnd before them.
#[test]
fn dctcp_cwnd_reduction_and_loss() {
    let mut d = Dctcp::new(0, 0, 0);
    assert_eq!(d.ssthresh(100), 50);
    d.alpha = 256;
    assert_eq!(d.ssthresh(100), 88); // 100 − 100·256/2048 = 100 − 12
    assert_eq!(d.loss_cwnd, 100);
    d.alpha = 0;
    assert_eq!(d.ssthresh(100), 100);
    d.alpha = 1024;
    assert_eq!(d.ssthresh(3), 2);
    assert_eq!(d.react_to_loss(81), 40);
    assert_eq!(d.undo_cwnd(60), 81);
    assert_eq!(d.undo_cwnd(90), 90);
}

fn data(i: u64) -> Segment {
    Segment {
        seq: i * MSS as u64,
        len: MSS,
        segs: 1,
        ect: true,
        cwr: false,
        retransmit: false,
        tstamp: Instant::ZERO,
        sent_at: Instant::from_millis(i),
        tsecr: 0,
    }
}

/// dctcp_ece_ack_update: a delayed-ACK receiver answers a change of CE state at once,
/// after first sending the pending ACK with the previous state; an RFC 3168 receiver
/// latches ECE until CWR instead.
#[test]
fn dctcp_receiver_acks_at_once_on_a_ce_state_change() {
    let cfg = TcpConfig {
        cc: CongestionControl::Dctcp,
        ecn: true,
        syn_rtt: Some(Duration::from_millis(20)),
        ..super::tests::base()
    };
    let mut r = TcpReceiver::new(&cfg, Instant::ZERO).grown();
    let mut i = 0u64;
    let mut feed = |r: &mut TcpReceiver, ce: bool| {
        let t = Instant::from_millis(100 + i);
        let a = r.on_segment(&data(i), ce, t);
        let mut all: Vec<(u64, bool)> = a.into_iter().map(|a| (a.ack / MSS as u64, a.ece)).collect();
        while r.next_timer().is_some_and(|x| x <= t) {
            all.extend(r.on_timer(t).map(|a| (a.ack / MSS as u64, a.ece)));
        }
        i += 1;
        (i, all)
    };
    // Past the 16 quick ACKs, every second segment is ACKed: stop at a delayed one.
    let mut n = 0;
    while n < 40 || !feed(&mut r, false).1.is_empty() {
        n += 1;
    }
    let (k, acks) = feed(&mut r, true);
    // CE: the pending ACK (up to before this segment, ECE 0), then this one (ECE 1).
    assert_eq!(acks, [(k - 1, false), (k, true)]);
    // More CE: no change, every second segment again.
    assert_eq!(feed(&mut r, true).1, []);
    assert_eq!(feed(&mut r, true).1, [(k + 2, true)]);
    assert_eq!(feed(&mut r, true).1, []);
    // Not CE: the pending ACK with ECE 1, then this one with ECE 0, at once.
    assert_eq!(feed(&mut r, false).1, [(k + 3, true), (k + 4, false)]);

    // The RFC 3168 receiver (cubic with ECN): ECE from the CE segment until CWR.
    let cfg = TcpConfig { ecn: true, ..cfg };
    let cfg = TcpConfig { cc: CongestionControl::Cubic, ..cfg };
    let mut r = TcpReceiver::new(&cfg, Instant::ZERO).grown();
    let mut j = 0u64;
    let mut acks = Vec::new();
    for k in 0..60u64 {
        let t = Instant::from_millis(100 + j);
        acks.extend(r.on_segment(&data(j), k == 45, t));
        j += 1;
    }
    assert!(acks.iter().filter(|a| a.ack > 46 * MSS as u64).all(|a| a.ece), "latched until CWR");
}

/// dctcp_init: with ECN negotiated the socket is dctcp and sends ECT(0); without it,
/// "dctcp-reno": Reno's hooks, no ECT, and a receiver without the CE state machine.
#[test]
fn dctcp_needs_ecn_or_falls_back_to_dctcp_reno() {
    let cfg = TcpConfig {
        cc: CongestionControl::Dctcp,
        ecn: true,
        syn_rtt: Some(Duration::from_millis(20)),
        ..super::tests::base()
    };
    let mut s = TcpSender::new(cfg.clone(), Instant::ZERO);
    assert!(matches!(s.cc, sender::Cc::Dctcp(_)));
    assert!(s.poll_transmit(Instant::ZERO, 0).unwrap().ect);
    assert_eq!(CongestionControl::Dctcp.effective_name(true), "dctcp");
    let plain = TcpConfig { ecn: false, ..cfg };
    let mut s = TcpSender::new(plain.clone(), Instant::ZERO);
    assert!(matches!(s.cc, sender::Cc::Reno));
    assert!(!s.poll_transmit(Instant::ZERO, 0).unwrap().ect);
    assert_eq!(CongestionControl::Dctcp.effective_name(false), "dctcp-reno");
    assert!(!TcpReceiver::new(&plain, Instant::ZERO).dctcp);
}

/// BBR asks for pacing: without fq the socket paces itself (SK_PACING_NEEDED), its
/// skbs carry EDT timestamps, and the pacing timer holds the next one.
#[test]
fn bbr_paces_internally_without_fq() {
    let cfg = TcpConfig {
        cc: CongestionControl::Bbr,
        initial_cwnd: 400,
        syn_rtt: Some(Duration::from_millis(10)),
        ..super::tests::base()
    };
    let mut s = super::tests::open_sender(cfg, Instant::ZERO);
    assert_eq!(s.pacing_status, PacingStatus::Needed);
    // bbr_init_pacing_rate_from_rtt: 739/256 × 400 packets / 10 ms, −1 %.
    let rate = Bbr::rate_bytes_per_sec(MSS, 400 * bbr::BW_UNIT / 10_000, HIGH_GAIN);
    assert_eq!(s.pacing_rate(), rate);
    let mut sent: Vec<(Instant, Instant, u32)> = Vec::new();
    let mut now = Instant::ZERO;
    while sent.len() < 8 {
        match s.poll_transmit(now, 0) {
            Some(seg) => sent.push((now, seg.tstamp, seg.len)),
            None => {
                // Held by the pacing timer, at the next EDT.
                now = s.next_timer().expect("the pacing timer");
                assert_eq!(now.as_nanos(), s.wstamp_ns);
                s.on_timer(now);
            }
        }
    }
    // Every skb (45 segments: 65 KB at 165 MB/s) leaves at its EDT, len / rate after the
    // previous one's (more than 10 segments are out after the first).
    for w in sent.windows(2) {
        let gap = (w[1].1 - w[0].1).as_nanos();
        assert_eq!(gap, w[0].2 as u64 * 1_000_000_000 / rate, "{sent:?}");
        assert_eq!(w[1].0, w[1].1, "sent when its EDT came");
    }
    assert_eq!(sent[0].2, 45 * MSS);
}

/// tcp_rate_gen: a window's sample is delivered over max(send phase, ACK phase), and
/// tcpi_delivery_rate is the bottleneck's goodput.
#[test]
fn delivery_rate_samples_measure_the_bottleneck() {
    use std::collections::VecDeque;
    // 10 ms each way, 10 Mbit/s bottleneck (1514-byte frames): a hand-run network.
    let cfg = TcpConfig { tso: false, syn_rtt: Some(Duration::from_millis(20)), ..super::tests::base() };
    let mut s = TcpSender::new(cfg.clone(), Instant::ZERO);
    let mut r = TcpReceiver::new(&cfg, Instant::ZERO).grown();
    let ser = Duration::from_nanos(1514 * 8 * 100);
    let mut free_at = Instant::ZERO;
    let mut to_rcv: VecDeque<(Instant, Segment)> = VecDeque::new();
    let mut to_snd: VecDeque<(Instant, Ack)> = VecDeque::new();
    let mut now = Instant::ZERO;
    let end = Instant::from_millis(3000);
    while now < end {
        while let Some(seg) = s.poll_transmit(now, 0) {
            free_at = free_at.max(now) + ser;
            to_rcv.push_back((free_at + Duration::from_millis(10), seg));
        }
        let next = [to_rcv.front().map(|x| x.0), to_snd.front().map(|x| x.0), s.next_timer(), r.next_timer()]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        now = next;
        if to_rcv.front().is_some_and(|x| x.0 == now) {
            let (_, seg) = to_rcv.pop_front().unwrap();
            if let Some(a) = r.on_segment(&seg, false, now) {
                to_snd.push_back((now + Duration::from_millis(10), a));
            }
        } else if to_snd.front().is_some_and(|x| x.0 == now) {
            let (_, a) = to_snd.pop_front().unwrap();
            s.on_ack(&a, now);
        } else if s.next_timer() == Some(now) {
            s.on_timer(now);
        } else if let Some(a) = r.on_timer(now) {
            to_snd.push_back((now + Duration::from_millis(10), a));
        }
    }
    let st = s.stats();
    let goodput = 10_000_000 / 8 * 1448 / 1514;
    assert!(!st.delivery_rate_app_limited);
    let err = st.delivery_rate as f64 / goodput as f64 - 1.0;
    assert!(err.abs() < 0.02, "delivery rate {} vs {goodput}", st.delivery_rate);
}
