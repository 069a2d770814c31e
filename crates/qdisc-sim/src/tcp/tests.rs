//! Sender and receiver back to back through a tiny in-test network:
//!
//! ```text
//! TcpSender ─poll─► [local NIC: FIFO, optional rate, wmem/TSQ] ─split─► [bottleneck:
//!   drop-tail FIFO, optional rate] ─delay─► TcpReceiver ─ACK─delay─► TcpSender
//! ```
//!
//! Events are kept in a `BTreeMap` keyed by (time, insertion order), so runs are
//! deterministic. Hooks choose local verdicts, network drops and CE marks.

use std::collections::{BTreeMap, VecDeque};

use qdisc::{Duration, Instant};

use super::*;

const MSS: u32 = 1448;

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

#[derive(Clone, Debug)]
enum Ev {
    NicDone,
    BottleneckDone,
    AtReceiver(Segment, bool),
    AtSender(Ack),
}

/// One data skb handed out by the sender, with the local verdict.
#[derive(Clone, Debug)]
struct Sent {
    at: Instant,
    seg: Segment,
    verdict: LocalXmit,
}

/// One processed ACK with the sender's state around it.
#[derive(Clone, Debug)]
struct AckLog {
    at: Instant,
    ack: Ack,
    cwnd_before: u32,
    state_before: CaState,
    cwnd_after: u32,
    ssthresh_after: u32,
    state_after: CaState,
    /// DCTCP's α after the ACK (`None` for the other modules).
    alpha_after: Option<u32>,
}

type SegHook = Box<dyn FnMut(&Segment, Instant) -> bool>;
type VerdictHook = Box<dyn FnMut(&Segment, Instant) -> LocalXmit>;

struct Net {
    now: Instant,
    snd: TcpSender,
    rcv: TcpReceiver,
    delay: Duration,
    /// Sender NIC rate, bit/s; `None`: skbs leave and complete at once.
    nic_rate: Option<u64>,
    /// Bottleneck rate, bit/s; `None`: infinite.
    rate: Option<u64>,
    /// Bottleneck buffer, packets waiting (not counting the one on the wire).
    buffer: usize,
    events: BTreeMap<(Instant, u64), Ev>,
    next_ev: u64,
    nic_q: VecDeque<Segment>,
    nic_busy: bool,
    wmem: u64,
    bn_q: VecDeque<(Segment, bool)>,
    bn_cur: Option<(Segment, bool)>,
    /// Drop a wire segment before the bottleneck.
    drop: SegHook,
    /// Mark CE on a wire segment (ECT only).
    ce: SegHook,
    /// ACKs the receiver sends in [start, end) are held until `end` (a reverse-path stall).
    ack_hold: Option<(Instant, Instant)>,
    verdict: VerdictHook,
    sent: Vec<Sent>,
    acks: Vec<AckLog>,
    wire_delivered: u64,
    tail_drops: u64,
    /// Check the sender's scoreboard after every event (O(window) each time).
    check: bool,
    /// The application: `None` never writes (unlimited data queued); `Some` is a
    /// blocking writer of 128 KiB blocks as iperf3 (apps.rs), with what is left of its
    /// current block and whether it sleeps for room.
    writer: Option<(u64, bool)>,
    /// The most bytes in flight after any send.
    max_out: u64,
}

impl Net {
    fn new(cfg: TcpConfig, delay_ms: u64) -> Net {
        let now = Instant::ZERO;
        Net {
            now,
            rcv: TcpReceiver::new(&cfg, now).grown(),
            snd: TcpSender::new(cfg, now),
            delay: Duration::from_millis(delay_ms),
            nic_rate: None,
            rate: None,
            buffer: usize::MAX,
            events: BTreeMap::new(),
            next_ev: 0,
            nic_q: VecDeque::new(),
            nic_busy: false,
            wmem: 0,
            bn_q: VecDeque::new(),
            bn_cur: None,
            drop: Box::new(|_, _| false),
            ce: Box::new(|_, _| false),
            ack_hold: None,
            verdict: Box::new(|_, _| LocalXmit::Ok),
            sent: Vec::new(),
            acks: Vec::new(),
            wire_delivered: 0,
            tail_drops: 0,
            check: true,
            writer: None,
            max_out: 0,
        }
    }

    /// A sender fed by a blocking writer (see [`Net::writer`]).
    fn with_writer(cfg: TcpConfig, delay_ms: u64) -> Net {
        Net { writer: Some((0, false)), ..Net::new(cfg, delay_ms) }
    }

    /// The writer's `write()` calls until one waits: sendmsg, the push, and on while
    /// the push left the memory free (`sk_stream_wait_memory`).
    fn write(&mut self) {
        let Some((mut left, _)) = self.writer else { return };
        loop {
            if left == 0 {
                left = 128 * 1024;
            }
            left -= self.snd.sendmsg(left, self.wmem, self.now);
            self.poll();
            if left > 0 && !self.snd.memory_free(0) {
                self.writer = Some((left, true));
                return;
            }
            self.snd.take_write_space();
        }
    }

    fn at(&mut self, t: Instant, ev: Ev) {
        self.events.insert((t, self.next_ev), ev);
        self.next_ev += 1;
    }

    fn ser(bits_per_s: u64, bytes: u32) -> Duration {
        Duration::from_nanos((bytes as u64 * 8 * 1_000_000_000).div_ceil(bits_per_s))
    }

    /// The sender's poll loop, then the wake-up of a waiting writer.
    fn pump(&mut self) {
        self.poll();
        if let Some((left, true)) = self.writer {
            if self.snd.take_write_space() {
                self.writer = Some((left, false));
                self.write();
            }
        }
    }

    fn poll(&mut self) {
        while let Some(seg) = self.snd.poll_transmit(self.now, self.wmem) {
            let v = (self.verdict)(&seg, self.now);
            self.max_out = self.max_out.max(self.snd.snd_nxt() - self.snd.snd_una());
            self.sent.push(Sent { at: self.now, seg: seg.clone(), verdict: v });
            if v != LocalXmit::Ok {
                self.snd.on_local_xmit(&seg, v, self.now);
            }
            if v == LocalXmit::Dropped {
                continue;
            }
            match self.nic_rate {
                None => {
                    for w in seg.split(MSS) {
                        self.enqueue_bottleneck(w);
                    }
                }
                Some(_) => {
                    self.wmem += seg.truesize() as u64;
                    self.nic_q.push_back(seg);
                    self.start_nic();
                }
            }
        }
        if self.check {
            self.snd.check_invariants();
        }
    }

    fn start_nic(&mut self) {
        if self.nic_busy {
            return;
        }
        if let (Some(seg), Some(rate)) = (self.nic_q.front(), self.nic_rate) {
            let t = self.now + Self::ser(rate, seg.wire_len());
            self.nic_busy = true;
            self.at(t, Ev::NicDone);
        }
    }

    fn enqueue_bottleneck(&mut self, w: Segment) {
        if (self.drop)(&w, self.now) {
            return;
        }
        let ce = w.ect && (self.ce)(&w, self.now);
        match self.rate {
            None => {
                self.wire_delivered += w.wire_len() as u64;
                let t = self.now + self.delay;
                self.at(t, Ev::AtReceiver(w, ce));
            }
            Some(_) => {
                if self.bn_cur.is_some() && self.bn_q.len() >= self.buffer {
                    self.tail_drops += 1;
                    return;
                }
                self.bn_q.push_back((w, ce));
                self.start_bottleneck();
            }
        }
    }

    fn start_bottleneck(&mut self) {
        if self.bn_cur.is_some() {
            return;
        }
        if let (Some((w, ce)), Some(rate)) = (self.bn_q.pop_front(), self.rate) {
            let t = self.now + Self::ser(rate, w.wire_len());
            self.bn_cur = Some((w, ce));
            self.at(t, Ev::BottleneckDone);
        }
    }

    fn ack_to_sender(&mut self, a: Ack) {
        let mut t = self.now + self.delay;
        if let Some((s, e)) = self.ack_hold {
            if self.now >= s && self.now < e {
                t = e + self.delay;
            }
        }
        self.at(t, Ev::AtSender(a));
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::NicDone => {
                let seg = self.nic_q.pop_front().expect("nic busy");
                self.nic_busy = false;
                self.wmem -= seg.truesize() as u64;
                for w in seg.split(MSS) {
                    self.enqueue_bottleneck(w);
                }
                self.start_nic();
                if self.snd.tsq_throttled() {
                    self.pump();
                }
            }
            Ev::BottleneckDone => {
                let (w, ce) = self.bn_cur.take().expect("bottleneck busy");
                self.wire_delivered += w.wire_len() as u64;
                let t = self.now + self.delay;
                self.at(t, Ev::AtReceiver(w, ce));
                self.start_bottleneck();
            }
            Ev::AtReceiver(w, ce) => {
                if let Some(a) = self.rcv.on_segment(&w, ce, self.now) {
                    self.ack_to_sender(a);
                }
                // The reader takes the data at once (tcp_cleanup_rbuf).
                if let Some(a) = self.rcv.on_read(self.now) {
                    self.ack_to_sender(a);
                }
            }
            Ev::AtSender(a) => {
                let (cwnd_before, state_before) = (self.snd.cwnd(), self.snd.ca_state());
                self.snd.on_ack(&a, self.now);
                let st = self.snd.stats();
                self.acks.push(AckLog {
                    at: self.now,
                    ack: a,
                    cwnd_before,
                    state_before,
                    cwnd_after: st.cwnd,
                    ssthresh_after: st.ssthresh,
                    state_after: st.ca_state,
                    alpha_after: match &self.snd.cc {
                        sender::Cc::Dctcp(d) => Some(d.alpha),
                        _ => None,
                    },
                });
                self.pump();
            }
        }
    }

    /// Run every event up to and including `end`.
    fn run_until(&mut self, end: Instant) {
        if self.sent.is_empty() && self.now == Instant::ZERO {
            if self.writer.is_some() {
                self.write();
            } else {
                self.pump();
            }
        }
        loop {
            let te = self.events.keys().next().map(|k| k.0);
            let ts = self.snd.next_timer();
            let tr = self.rcv.next_timer();

            let Some(t) = [te, ts, tr].into_iter().flatten().min() else { break };
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            if te == Some(t) {
                let key = *self.events.keys().next().unwrap();
                let ev = self.events.remove(&key).unwrap();
                self.handle(ev);
            } else if ts == Some(t) {
                self.snd.on_timer(self.now);
                self.pump();
            } else if let Some(a) = self.rcv.on_timer(self.now) {
                self.ack_to_sender(a);
            }
        }
        self.now = self.now.max(end);
    }

    fn data_sent(&self) -> impl Iterator<Item = &Sent> {
        self.sent.iter()
    }
}

/// The defaults with a receive buffer so large that the window never limits these
/// sender tests (it still grows: each skb earns a quick ACK).
pub(super) fn base() -> TcpConfig {
    TcpConfig { rmem: [4096, 1 << 30, 1 << 30], ..TcpConfig::default() }
}

/// A sender whose peer has already offered a window beyond any test's reach (the
/// SYN-ACK's is at most 65535 bytes, unscaled, and `tcp_bound_to_half_wnd` holds skbs
/// to half the largest window seen): for tests of the first flight.
pub(super) fn open_sender(c: TcpConfig, now: Instant) -> TcpSender {
    let mut s = TcpSender::new(c, now);
    s.snd_wnd = 1 << 30;
    s.max_window = 1 << 30;
    s
}

fn cfg() -> TcpConfig {
    TcpConfig { syn_rtt: Some(Duration::from_millis(20)), ..base() }
}

// ----- 1. slow start ------------------------------------------------------------------

/// cwnd doubles every RTT: ABC counts acked segments, so the receiver's 16 quick ACKs
/// and the every-second-segment ACKs that follow grow cwnd alike. One-segment skbs
/// (no TSO) and an infinitely fast 20 ms path make every round a single burst, so the
/// window after round k is exactly 10 · 2^k. HyStart stays quiet: every RTT sample is
/// exactly 20 ms and each round's ACKs arrive at one instant.
#[test]
fn slow_start_doubles_cwnd_every_rtt() {
    for cc in [CongestionControl::Cubic, CongestionControl::Reno] {
        let mut net = Net::new(TcpConfig { tso: false, cc, ..cfg() }, 10);
        let mut expect = 10;
        for round in 0..7u64 {
            net.run_until(ms(20 * round + 10));
            assert_eq!(net.snd.cwnd(), expect, "{cc:?} round {round}");
            assert_eq!(net.snd.stats().ssthresh, INFINITE_SSTHRESH);
            expect *= 2;
        }
        let st = net.snd.stats();
        assert_eq!(st.retransmits, 0);
        assert_eq!(st.srtt, Duration::from_millis(20));
        // The first 16 segments were ACKed one by one (quickack), the rest in pairs.
        let first_round2 = net.acks.iter().filter(|a| a.at == ms(40)).count();
        assert_eq!(first_round2, 6 + 7, "{cc:?}: 6 quick ACKs + 7 delayed pairs for 20 segments");
    }
}

/// With TSO the bursts are TSO skbs and deferral may hold a few segments for the next
/// ACK, so rounds are not exact — but ABC still holds: cwnd = 10 + segments delivered.
#[test]
fn slow_start_with_tso_grows_by_delivered_segments() {
    let mut net = Net::new(cfg(), 10);
    for t in [30, 50, 70, 90] {
        net.run_until(ms(t));
        let st = net.snd.stats();
        assert_eq!(st.cwnd as u64, 10 + st.delivered, "t={t}");
    }
    assert!(net.snd.cwnd() >= 120, "cwnd {}", net.snd.cwnd());
    // TSO skbs: 2 segments at the start (1448 kB/s >> 10 < 1 MSS, tcp_min_tso_segs).
    assert_eq!(net.sent[0].seg.segs, 2);
    assert!(net.sent.iter().any(|s| s.seg.segs > 2));
}

// ----- 2. one loss ----------------------------------------------------------------------

/// Drop the first transmission of one segment in the third round (cwnd 40): three SACKs
/// later RACK marks it lost (reo_wnd becomes 0 at dupthresh), Recovery starts with
/// ssthresh = 40 · 717 / 1024 = 28, PRR retransmits it once, and the ACK above
/// high_seq ends recovery with cwnd = ssthresh. No timeout, no probe, no undo.
/// (The first two SACKs each let one new segment out — SACKed segments leave the
/// in-flight count, Linux's implicit limited transmit — so high_seq is segment 72.)
#[test]
fn single_loss_one_fast_retransmit_and_cubic_beta() {
    let lost_seq = 30 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, ..cfg() }, 10);
    let mut dropped = false;
    net.drop = Box::new(move |w, _| {
        if w.seq == lost_seq && !w.retransmit && !dropped {
            dropped = true;
            return true;
        }
        false
    });
    net.run_until(ms(300));
    let st = net.snd.stats();
    assert_eq!(st.retransmits, 1);
    let rtx: Vec<_> = net.data_sent().filter(|s| s.seg.retransmit).collect();
    assert_eq!(rtx.len(), 1);
    assert_eq!(rtx[0].seg.seq, lost_seq);
    assert_eq!(rtx[0].at, ms(60), "fast retransmit on the third SACK");
    assert_eq!((st.rto_count, st.tlp_count, st.undo_count), (0, 0, 0));

    let entry = net.acks.iter().find(|a| a.state_after == CaState::Recovery).unwrap();
    assert_eq!(entry.cwnd_before, 40);
    assert_eq!(entry.ssthresh_after, 40 * 717 / 1024);
    assert_eq!(entry.ssthresh_after, 28);
    let exit = net.acks.iter().find(|a| a.state_before == CaState::Recovery && a.state_after == CaState::Open).unwrap();
    assert_eq!(exit.cwnd_after, 28);
    assert_eq!(exit.ack.ack, 72 * MSS as u64, "high_seq = snd_nxt at entry");
    assert_eq!(net.rcv.ofo_bytes(), 0, "the hole was filled");
    assert!(net.rcv.delivered() >= net.snd.snd_una());
}

/// Reno halves instead.
#[test]
fn single_loss_reno_halves() {
    let lost_seq = 30 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, cc: CongestionControl::Reno, ..cfg() }, 10);
    net.drop = Box::new(move |w, _| w.seq == lost_seq && !w.retransmit);
    net.run_until(ms(300));
    let entry = net.acks.iter().find(|a| a.state_after == CaState::Recovery).unwrap();
    assert_eq!((entry.cwnd_before, entry.ssthresh_after), (40, 20));
    assert_eq!(net.snd.stats().retransmits, 1);
}

/// Without SACK the same loss is found by NewReno's three duplicate ACKs.
#[test]
fn single_loss_without_sack_uses_dupacks() {
    let lost_seq = 30 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, sack: false, ..cfg() }, 10);
    net.drop = Box::new(move |w, _| w.seq == lost_seq && !w.retransmit);
    net.run_until(ms(400));
    let st = net.snd.stats();
    assert_eq!(st.retransmits, 1);
    let entry = net.acks.iter().find(|a| a.state_after == CaState::Recovery).unwrap();
    assert_eq!(entry.ssthresh_after, 28);
    assert!(net.acks.iter().all(|a| a.ack.sack.is_empty()));
    assert_eq!(net.rcv.ofo_bytes(), 0, "the hole was filled");
}

// ----- 3. timeouts ------------------------------------------------------------------------

/// Nothing is ever delivered. With a 20 ms handshake RTT: RTO = 20 + max(40, 200) ms =
/// 55 jiffies (HZ=250). The tail loss probe fires first, at 2·srtt + 2 ms = 11 jiffies
/// (44 ms), sending one new segment and restarting the RTO (→ 264 ms). Each RTO
/// retransmits the head, sets cwnd = 1 and doubles the timeout: 264, 704, 1584 ms.
#[test]
fn rto_backoff_after_tail_loss_probe() {
    let mut net = Net::new(cfg(), 10);
    net.drop = Box::new(|_, _| true);
    net.run_until(ms(2000));
    let sent: Vec<(Instant, u64, u32, bool)> =
        net.sent.iter().map(|s| (s.at, s.seg.seq, s.seg.len, s.seg.retransmit)).collect();
    // 10 segments at t=0 in 2-segment TSO skbs.
    assert_eq!(sent[..5].iter().map(|s| s.2).sum::<u32>(), 10 * MSS);
    assert!(sent[..5].iter().all(|s| s.0 == ms(0) && !s.3));
    assert_eq!(sent[5], (ms(44), 10 * MSS as u64, MSS, false), "TLP: one new segment");
    assert_eq!(sent[6], (ms(264), 0, MSS, true));
    assert_eq!(sent[7], (ms(704), 0, MSS, true));
    assert_eq!(sent[8], (ms(1584), 0, MSS, true));
    assert_eq!(sent.len(), 9);
    let st = net.snd.stats();
    assert_eq!((st.cwnd, st.ssthresh, st.ca_state), (1, 10 * 717 / 1024, CaState::Loss));
    assert_eq!((st.retransmits, st.rto_count, st.tlp_count), (3, 3, 1));
    assert_eq!(st.rto, Duration::from_millis(1760));
}

/// Without a handshake RTT the first timeout is TCP_TIMEOUT_INIT: the probe goes at
/// 1 s (srtt unknown), the RTO restarts from it and fires at 2 s, then 2 s later.
#[test]
fn initial_rto_is_one_second() {
    let mut net = Net::new(base(), 10);
    net.drop = Box::new(|_, _| true);
    net.run_until(ms(6500));
    let t: Vec<(Instant, bool)> = net.sent.iter().skip(2).map(|s| (s.at, s.seg.retransmit)).collect();
    // Two 5-segment skbs at t=0 (quota = cwnd/2, pacing rate unknown = unlimited TSO).
    assert_eq!(net.sent[0].seg.segs, 5);
    assert_eq!(t, vec![(ms(1000), false), (ms(2000), true), (ms(4000), true)]);
}

/// One RTO in the middle of a transfer: a 255 ms blackhole swallows a window, the tail
/// loss probe with it; the RTO retransmits the head, F-RTO sees new data SACKed and
/// keeps the reduction, the sender slow-starts from cwnd 1 and repairs every hole.
#[test]
fn rto_recovers_a_lost_window() {
    let mut net = Net::new(TcpConfig { tso: false, ..cfg() }, 10);
    net.rate = Some(10_000_000);
    net.drop = Box::new(|_, now| now >= ms(45) && now < ms(300));
    net.run_until(ms(1500));
    let st = net.snd.stats();
    assert_eq!((st.rto_count, st.tlp_count, st.undo_count), (1, 1, 0));
    // F-RTO: once the head's retransmission is acked, two new segments go out (cwnd 2)
    // before anything else is retransmitted; their SACKs prove the loss was real.
    let first_rtx = net.sent.iter().position(|s| s.seg.retransmit).unwrap();
    let next_rtx = first_rtx + 1 + net.sent[first_rtx + 1..].iter().position(|s| s.seg.retransmit).unwrap();
    assert_eq!(next_rtx - first_rtx - 1, 2, "F-RTO step 2b");
    assert!(net.sent[first_rtx + 1..next_rtx].iter().all(|s| s.seg.seq >= net.sent[first_rtx].seg.seq));
    assert_eq!(net.rcv.ofo_bytes(), 0);
    assert!(net.rcv.delivered() > 1_000_000, "recovered and moved on: {}", net.rcv.delivered());
}

/// A spurious timeout: the reverse path stalls for 400 ms, the RTO retransmits the
/// head although it arrived, and the held ACKs then echo timestamps older than that
/// retransmission (Eifel, `tcp_packet_delayed`): the reduction is undone.
#[test]
fn spurious_rto_is_undone_by_timestamps() {
    let mut net = Net::new(TcpConfig { tso: false, ..cfg() }, 10);
    net.rate = Some(10_000_000);
    net.ack_hold = Some((ms(100), ms(500)));
    // The last ACKs before the stall arrive by 110 ms.
    net.run_until(ms(115));
    let pre = net.snd.stats();
    net.run_until(ms(499));
    let before = net.snd.stats();
    assert_eq!((before.rto_count, before.ca_state, before.cwnd), (1, CaState::Loss, 1));
    net.run_until(ms(800));
    let st = net.snd.stats();
    assert_eq!(st.undo_count, 1);
    assert_eq!(st.rto_count, 1);
    let undo = net.acks.iter().find(|a| a.state_before == CaState::Loss).unwrap();
    assert_eq!(undo.state_after, CaState::Open);
    assert_eq!((undo.cwnd_after, undo.ssthresh_after), (pre.cwnd, pre.ssthresh), "restored");
    // The receiver saw the retransmission as a duplicate and D-SACKed it.
    let rtx = net.sent.iter().find(|s| s.seg.retransmit).unwrap().seg.clone();
    assert!(net.acks.iter().any(|a| a.ack.sack.first() == Some(&(rtx.seq, rtx.end()))));
}

// ----- 4. local congestion ---------------------------------------------------------------

/// The qdisc drops one skb: CWR (ssthresh = 16 · 717/1024 = 11, cwnd falls by PRR, then
/// = ssthresh), the loop stops, nothing is counted as retransmitted, and the same bytes
/// leave again with the next ACK as new data.
#[test]
fn local_drop_enters_cwr_and_resends_same_seq() {
    let victim = 20 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, ..cfg() }, 10);
    let mut once = false;
    net.verdict = Box::new(move |s, _| {
        if s.seq == victim && !once {
            once = true;
            return LocalXmit::Dropped;
        }
        LocalXmit::Ok
    });
    net.run_until(ms(300));
    let tries: Vec<&Sent> = net.sent.iter().filter(|s| s.seg.seq == victim).collect();
    assert_eq!(tries.len(), 2);
    assert_eq!(tries[0].verdict, LocalXmit::Dropped);
    assert_eq!(tries[1].verdict, LocalXmit::Ok);
    assert!(!tries[1].seg.retransmit);
    // Both at 20 ms: the loop broke at the drop, the next ACK of that burst resent it.
    assert_eq!((tries[0].at, tries[1].at), (ms(20), ms(20)));
    let i0 = net.sent.iter().position(|s| s.seg.seq == victim).unwrap();
    assert_eq!(net.sent[i0 + 1].seg.seq, victim, "nothing else went out in between");
    let st = net.snd.stats();
    assert_eq!(st.retransmits, 0);
    assert_eq!(st.ssthresh, 16 * 717 / 1024);
    let exit = net.acks.iter().find(|a| a.state_before == CaState::Cwr && a.state_after == CaState::Open).unwrap();
    assert_eq!(exit.cwnd_after, 11);
    assert_eq!(net.rcv.ofo_bytes(), 0);
}

/// NET_XMIT_CN: the skb counts as sent (once), CWR all the same.
#[test]
fn local_congested_enters_cwr_without_resend() {
    let victim = 20 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, ..cfg() }, 10);
    net.verdict = Box::new(move |s, _| if s.seq == victim { LocalXmit::Congested } else { LocalXmit::Ok });
    net.run_until(ms(300));
    assert_eq!(net.sent.iter().filter(|s| s.seg.seq == victim).count(), 1);
    let st = net.snd.stats();
    assert_eq!((st.retransmits, st.ssthresh), (0, 11));
    assert!(net.acks.iter().any(|a| a.state_after == CaState::Cwr));
}

// ----- 5. ECN -----------------------------------------------------------------------------

/// One CE mark on segment 35 of round 3 (cwnd 40): the delayed ACKs for 30–31 and
/// 32–33 grow cwnd to 44, then the receiver ACKs 34–35 at once with ECE (a CE mark
/// enters quickack mode). The sender reduces once — ssthresh = 44 · 717/1024 = 30 —
/// sets CWR on exactly one new segment, and the receiver stops echoing when it sees it.
#[test]
fn ecn_ce_mark_reduces_once_and_sets_cwr() {
    let marked = 35 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, ecn: true, ..cfg() }, 10);
    net.ce = Box::new(move |w, _| w.seq == marked);
    net.run_until(ms(300));
    let st = net.snd.stats();
    assert_eq!(st.retransmits, 0);
    let ece_acks: Vec<&AckLog> = net.acks.iter().filter(|a| a.ack.ece).collect();
    assert!(!ece_acks.is_empty());
    let cwr_entries =
        net.acks.iter().filter(|a| a.state_before != CaState::Cwr && a.state_after == CaState::Cwr).count();
    assert_eq!(cwr_entries, 1, "one reduction per window");
    let first_ece = ece_acks[0];
    assert_eq!(first_ece.ack.ack, 36 * MSS as u64);
    assert_eq!(first_ece.cwnd_before, 44);
    assert_eq!(first_ece.ssthresh_after, 30);
    let cwr_segs: Vec<&Sent> = net.sent.iter().filter(|s| s.seg.cwr).collect();
    assert_eq!(cwr_segs.len(), 1);
    assert!(net.sent.iter().all(|s| s.seg.ect));
    // No ECE after the CWR segment was ACKed.
    let cwr_end = cwr_segs[0].seg.end();
    assert!(net.acks.iter().filter(|a| a.ack.ack >= cwr_end).all(|a| !a.ack.ece));
    let exit = net.acks.iter().find(|a| a.state_before == CaState::Cwr && a.state_after == CaState::Open).unwrap();
    assert_eq!(exit.cwnd_after, 30);
}

/// The same single CE mark with dctcp. The dctcp receiver echoes ECE on the ACK of the
/// marked segment only (its CE state flips back with the next one); the sender enters
/// CWR once with ssthresh = cwnd − cwnd·α/2048, α as the ACK left it (α is updated in
/// `in_ack_event`, before the state machine), and leaves it at that cwnd.
#[test]
fn dctcp_ce_mark_reduces_by_half_alpha() {
    let marked = 35 * MSS as u64;
    let mut net = Net::new(TcpConfig { tso: false, cc: CongestionControl::Dctcp, ecn: true, ..cfg() }, 10);
    net.ce = Box::new(move |w, _| w.seq == marked);
    net.run_until(ms(300));
    assert_eq!(net.snd.stats().retransmits, 0);
    assert!(net.sent.iter().filter(|s| !s.seg.retransmit).all(|s| s.seg.ect));
    let ece_acks: Vec<&AckLog> = net.acks.iter().filter(|a| a.ack.ece).collect();
    assert_eq!(ece_acks.len(), 1, "ECE on the marked segment's ACK only");
    assert_eq!(ece_acks[0].ack.ack, 36 * MSS as u64);
    let e = ece_acks[0];
    assert_eq!((e.state_before, e.state_after), (CaState::Open, CaState::Cwr));
    let alpha = e.alpha_after.unwrap();
    // No marks before: α decayed from 1024 by α/16 at each window's end (rounds 1–3).
    assert_eq!(alpha, 844);
    let w = e.cwnd_before;
    assert_eq!(e.ssthresh_after, w - (w * alpha >> 11));
    let cwr_entries =
        net.acks.iter().filter(|a| a.state_before != CaState::Cwr && a.state_after == CaState::Cwr).count();
    assert_eq!(cwr_entries, 1);
    let exit = net.acks.iter().find(|a| a.state_before == CaState::Cwr && a.state_after == CaState::Open).unwrap();
    assert_eq!(exit.cwnd_after, e.ssthresh_after);
}

// ----- 6. pacing, TSO, TSQ ----------------------------------------------------------------

/// sk_pacing_rate = mss · cwnd / srtt × 200 % below ssthresh/2, × 120 % above. With a
/// constant 20 ms RTT (srtt_us = 8 × 20000 exactly) that is 144800 and 86880 B/s per
/// segment of max(cwnd, packets_out).
#[test]
fn pacing_rate_follows_cwnd_and_srtt() {
    let t0 = Instant::ZERO;
    let mut s = TcpSender::new(TcpConfig { tso: false, ..cfg() }, t0);
    assert_eq!(s.pacing_rate(), 144_800 * 10);
    let mut segs = Vec::new();
    while let Some(seg) = s.poll_transmit(t0, 0) {
        segs.push(seg);
    }
    assert_eq!(segs.len(), 10);
    let ack = |n: u64| Ack { ack: n * MSS as u64, sack: vec![], ece: false, tsecr: t0, tsval: 1, rwnd: 1 << 30 };
    s.on_ack(&ack(2), ms(20));
    let st = s.stats();
    assert_eq!((st.cwnd, st.packets_out), (12, 8));
    assert_eq!(st.pacing_rate, 144_800 * 12);
    while s.poll_transmit(ms(20), 0).is_some() {}
    s.on_ack(&ack(3), ms(20));
    assert_eq!(s.cwnd(), 13);
    // Enter CWR by a local NET_XMIT_CN: ssthresh = 13 · 717/1024 = 9, so from cwnd 4 on
    // the congestion-avoidance ratio applies.
    let seg = s.poll_transmit(ms(20), 0).unwrap();
    s.on_local_xmit(&seg, LocalXmit::Congested, ms(20));
    assert_eq!((s.stats().ssthresh, s.ca_state()), (9, CaState::Cwr));
    while s.poll_transmit(ms(20), 0).is_some() {}
    s.on_ack(&ack(4), ms(20));
    let st = s.stats();
    assert_eq!(st.pacing_rate, 86_880 * st.cwnd.max(st.packets_out) as u64);
    // max_pacing_rate caps it.
    let s = TcpSender::new(TcpConfig { max_pacing_rate: 1000, ..cfg() }, t0);
    assert_eq!(s.pacing_rate(), 1000);
}

/// tcp_tso_autosize: ~1 ms of pacing rate (rate >> 10), plus gso_max_size >> (min_rtt >> 9 µs)
/// for short paths, capped at gso_max_size (65215 B = 45 MSS), at least 2 segments.
#[test]
fn tso_autosizing_at_several_rates() {
    // (pacing rate B/s, min_rtt µs, expected segments)
    let cases = [
        (1_000_000u64, 20_000u64, 2), // 976 B: below 1 MSS → tcp_min_tso_segs
        (12_500_000, 20_000, 8),      // 100 Mbit/s: 12207 B
        (12_500_000, 3_000, 9),       // + 65215 >> 5 = 2037 B → 14244 B
        (12_500_000, 1_000, 30),      // + 65215 >> 1 = 32607 B → 44814 B
        (12_500_000, 100, 45),        // + 65215 → capped at 65215 B
        (125_000_000, 2_000, 45),     // 1 Gbit/s: 122070 B → capped
    ];
    for (rate, rtt_us, expect) in cases {
        let c = TcpConfig {
            initial_cwnd: 100,
            max_pacing_rate: rate,
            syn_rtt: Some(Duration::from_micros(rtt_us)),
            ..base()
        };
        let mut s = open_sender(c, Instant::ZERO);
        assert_eq!(s.pacing_rate(), rate);
        let seg = s.poll_transmit(Instant::ZERO, 0).unwrap();
        assert_eq!(seg.segs as u32, expect, "rate {rate} min_rtt {rtt_us}");
        assert_eq!(seg.len, expect * MSS);
        assert_eq!(seg.wire_len(), expect * (MSS + HEADER));
    }
}

/// TSQ: the budget is max(2 × truesize, pacing_rate >> 10), capped at
/// tcp_limit_output_bytes for unpaced sockets; `sk_wmem_alloc` (the bytes queued plus the
/// socket's own reference of 1) above it, with more than one skb in the rtx queue, makes
/// the sender wait for tx completions.
#[test]
fn tsq_blocks_at_the_limit() {
    let t0 = Instant::ZERO;
    let mut s = TcpSender::new(cfg(), t0);
    // 2-segment skbs: truesize = 960 + 2896 = 3856; 2 × 3856 = 7712 > 1448000 >> 10.
    let a = s.poll_transmit(t0, 0).unwrap();
    assert_eq!(a.truesize(), 3856);
    // One skb in the rtx queue: sent whatever wmem says.
    assert!(s.poll_transmit(t0, 1 << 40).is_some());
    // Two skbs out: 7711 bytes queued (sk_wmem_alloc 7712) is still allowed, 7712 is not.
    assert!(s.poll_transmit(t0, 7711).is_some());
    assert!(!s.tsq_throttled());
    assert!(s.poll_transmit(t0, 7712).is_none());
    assert!(s.tsq_throttled());
    // Tx completion: the poll loop runs again and the flag clears.
    assert!(s.poll_transmit(t0, 0).is_some());
    assert!(!s.tsq_throttled());

    // Without an RTT the pacing rate is unlimited: the sysctl caps the budget at 1 MiB.
    // (One-segment skbs, so TSO deferral does not stop the loop before TSQ does.)
    let mut s = TcpSender::new(TcpConfig { initial_cwnd: 100, tso: false, ..base() }, t0);
    assert!(s.poll_transmit(t0, 0).is_some());
    assert!(s.poll_transmit(t0, 1 << 20).is_some());
    assert!(s.poll_transmit(t0, (1 << 20) - 1).is_some());
    assert!(s.poll_transmit(t0, 1 << 20).is_none());
    assert!(s.tsq_throttled());
}

/// skb->truesize of a TCP data skb: 960 bytes of head (tcp_stream_alloc_skb's
/// MAX_TCP_HEADER in the 704-byte small head: 704 + 256) plus the payload, whatever
/// the segment count.
#[test]
fn truesize_is_head_plus_payload() {
    let seg = |len: u32, segs: u16| Segment {
        seq: 0,
        len,
        segs,
        ect: false,
        cwr: false,
        retransmit: false,
        tstamp: Instant::ZERO,
        sent_at: Instant::ZERO,
        tsecr: 0,
    };
    assert_eq!(seg(MSS, 1).truesize(), 960 + 1448);
    assert_eq!(seg(45 * MSS, 45).truesize(), 960 + 45 * 1448);
    assert_eq!(truesize_of_payload(0), SKB_HEAD_TRUESIZE);
}

/// A bulk socket behind a slow qdisc keeps two full TSO skbs below the stack, not three:
/// with two 45-segment skbs queued, sk_wmem_alloc = 2 × 66120 + 1 > 2 × 66120
/// (tcp_small_queue_check compares the refcount, which sk_alloc starts at 1). In the TSQ
/// handler after a tx completion, tcp_wfree still holds one byte of the freed skb.
#[test]
fn tsq_keeps_two_full_tso_skbs() {
    let t0 = Instant::ZERO;
    // 100 Mbit/s pacing rate (>> 10 = 12207 B) and a 100 µs path: 45-segment skbs.
    let c = TcpConfig {
        initial_cwnd: 200,
        max_pacing_rate: 12_500_000,
        syn_rtt: Some(Duration::from_micros(100)),
        ..base()
    };
    // Each skb: 960 + 45 × 1448 = 66120 of truesize.
    let two = 2 * 66120;
    let mut s = open_sender(c.clone(), t0);
    let a = s.poll_transmit(t0, 0).unwrap();
    assert_eq!((a.segs, a.len, a.truesize()), (45, 45 * MSS, 66120));
    assert!(s.poll_transmit(t0, 66120).is_some());
    // Two full skbs queued: the third waits.
    assert!(s.poll_transmit(t0, two).is_none());
    assert!(s.tsq_throttled());
    // TSQ handler (tx completion of a throttled socket): the refcount is queued + 2.
    assert!(s.poll_transmit(t0, two - 1).is_none());
    assert!(s.tsq_throttled());
    let c3 = s.poll_transmit(t0, two - 2).unwrap();
    assert_eq!(c3.seq, 2 * 45 * MSS as u64);
    assert!(s.poll_transmit(t0, two - 2 + 66120).is_none());

    // Outside the TSQ handler one byte less is held: two − 1 bytes queued may still send.
    let mut s = open_sender(c, t0);
    assert!(s.poll_transmit(t0, 0).is_some());
    assert!(s.poll_transmit(t0, 66120).is_some());
    assert!(s.poll_transmit(t0, two - 1).is_some());
    assert!(!s.tsq_throttled());
}

/// tcp_limit_output_bytes only caps sockets with SK_PACING_NONE (c73e5807e4f6): with fq
/// the budget is pacing_rate >> 10 however large.
#[test]
fn tsq_sysctl_cap_applies_to_unpaced_sockets_only() {
    let t0 = Instant::ZERO;
    let c = TcpConfig { initial_cwnd: 100, tso: false, pacing_status: PacingStatus::Fq, ..base() };
    let mut s = TcpSender::new(c, t0);
    assert_eq!(s.pacing_rate(), u64::MAX);
    assert!(s.poll_transmit(t0, 0).is_some());
    assert!(s.poll_transmit(t0, 1 << 20).is_some());
    assert!(s.poll_transmit(t0, 1 << 30).is_some());
    assert!(!s.tsq_throttled());
    // With an RTT (100 µs, cwnd 100: 2.9 GB/s before the cap) the budget is the pacing
    // rate >> 10 — below the sysctl at 1 GB/s, above it at 2 GB/s.
    for (rate, budget) in [(1_000_000_000u64, 976_562u64), (2_000_000_000, 1_953_125)] {
        let c = TcpConfig {
            initial_cwnd: 100,
            tso: false,
            pacing_status: PacingStatus::Fq,
            max_pacing_rate: rate,
            syn_rtt: Some(Duration::from_micros(100)),
            ..base()
        };
        let mut s = TcpSender::new(c, t0);
        assert_eq!(s.pacing_rate(), rate);
        assert_eq!(s.pacing_rate() >> 10, budget);
        // Two skbs first: a single one in the rtx queue is exempt.
        assert!(s.poll_transmit(t0, 0).is_some());
        assert!(s.poll_transmit(t0, 0).is_some());
        assert!(s.poll_transmit(t0, budget - 1).is_some());
        assert!(!s.tsq_throttled());
        assert!(s.poll_transmit(t0, budget).is_none(), "rate {rate}");
        assert!(s.tsq_throttled());
    }
}

/// EDT: with pacing status Fq every skb carries tcp_wstamp_ns, advanced by len/rate after
/// the first 10 segments; with Needed the sender holds the skb itself and asks for a
/// timer at its departure time.
#[test]
fn pacing_edt_timestamps_and_internal_pacing() {
    let t0 = Instant::ZERO;
    let base = TcpConfig { tso: false, initial_cwnd: 20, ..cfg() };
    // cwnd 20, srtt 20 ms: rate = 144800 × 20 = 2896000 B/s → 1448 B every 0.5 ms.
    let mut fq = TcpSender::new(TcpConfig { pacing_status: PacingStatus::Fq, ..base.clone() }, t0);
    assert_eq!(fq.pacing_rate(), 2_896_000);
    let ts: Vec<u64> = std::iter::from_fn(|| fq.poll_transmit(t0, 0)).map(|s| s.tstamp.as_nanos()).collect();
    assert_eq!(ts.len(), 20);
    assert!(ts[..10].iter().all(|&t| t == 0));
    for (i, &t) in ts[10..].iter().enumerate() {
        assert_eq!(t, (i as u64 + 1) * 500_000);
    }
    // No pacing timer with fq, only the loss probe: 2·srtt + 2 ms = 11 jiffies, pushed back
    // by the 5 ms of queued departures (tcp_pacing_delay, 1 jiffy): 12 jiffies = 48 ms.
    assert_eq!(fq.next_timer(), Some(ms(48)));

    let mut paced = TcpSender::new(TcpConfig { pacing_status: PacingStatus::Needed, ..base.clone() }, t0);
    let n = std::iter::from_fn(|| paced.poll_transmit(t0, 0)).count();
    assert_eq!(n, 10);
    assert_eq!(paced.next_timer(), Some(Instant::from_micros(500)));
    paced.on_timer(Instant::from_micros(500));
    let s11 = paced.poll_transmit(Instant::from_micros(500), 0).unwrap();
    assert_eq!((s11.seq, s11.tstamp), (10 * MSS as u64, Instant::from_micros(500)));
    assert!(paced.poll_transmit(Instant::from_micros(500), 0).is_none());
    assert_eq!(paced.next_timer(), Some(Instant::from_micros(1000)));

    // Not paced: no EDT stamp.
    let mut none = TcpSender::new(base, t0);
    assert_eq!(none.poll_transmit(t0, 0).unwrap().tstamp, Instant::ZERO);
}

// ----- 7. one flow fills a link ---------------------------------------------------------

/// 100 Mbit/s, 20 ms RTT, 100-packet drop-tail buffer, a 1 Gbit/s sender NIC with TSQ:
/// within 2 s the flow keeps the bottleneck ≥ 95 % busy (measured over the second second).
#[test]
fn one_flow_fills_a_100mbit_link() {
    let mut net = Net::new(cfg(), 10);
    net.rate = Some(100_000_000);
    net.buffer = 100;
    net.nic_rate = Some(1_000_000_000);
    net.run_until(ms(1000));
    let at1 = net.wire_delivered;
    net.run_until(ms(2000));
    let busy = (net.wire_delivered - at1) as f64 * 8.0 / 100e6;
    assert!(busy >= 0.95, "bottleneck busy {:.3}", busy);
    let st = net.snd.stats();
    assert!(st.retransmits > 0 && net.tail_drops > 0, "the buffer overflowed at least once");
    assert!(st.retransmits <= net.tail_drops, "only lost segments are retransmitted");
    assert!(net.rcv.delivered() >= net.snd.snd_una());
}

/// `tcp_wmem[2]` = 64 KiB caps what a writer keeps in the socket: one-segment skbs
/// of 2408 bytes of truesize (960 + 1448), a new one only while `sk_wmem_queued` is
/// below `sk_sndbuf`, so at most 28 of them (27 × 2408 = 65016 < 65536). On a 20 ms
/// path with no bottleneck a round's segments arrive together and are acked two by
/// two; the writer, woken when a third of the buffer is free (18 skbs left: 43690 ≥
/// 43344), refills to 28, so of ten ACKs the 1st and the 6th wake it and the last
/// four drain the queue to 20: 20 segments per round trip, all in flight between
/// rounds. The flow is application-limited: cwnd stops growing.
#[test]
fn tcp_wmem_max_caps_data_in_flight() {
    let c = TcpConfig { tso: false, wmem: [4096, 16384, 65536], ..cfg() };
    let mut net = Net::with_writer(c, 10);
    net.run_until(ms(1000));
    let (d1, cwnd1) = (net.rcv.delivered(), net.snd.cwnd());
    net.max_out = 0;
    assert_eq!(net.snd.sndbuf(), 65536);
    for t in 1..=100 {
        net.run_until(ms(1000 + 10 * t));
        assert_eq!(net.snd.snd_nxt() - net.snd.snd_una(), 20 * MSS as u64);
        assert_eq!(net.snd.wmem_queued(), 20 * 2408);
    }
    // The most in flight: 28, right after each wake-up's push.
    assert_eq!(net.max_out, 28 * MSS as u64);
    assert_eq!(net.rcv.delivered() - d1, 50 * 20 * MSS as u64);
    assert_eq!(net.snd.cwnd(), cwnd1);
    assert_eq!(net.snd.stats().retransmits, 0);
}

/// `tcp_init_buffer_space` → `tcp_sndbuf_expand` at connect: 2 (bbr: 3) × max(10,
/// cwnd, reordering + 1) × per_mss, where per_mss is the MSS option (1460 at MTU 1500,
/// the timestamps' 12 bytes included) + MAX_TCP_HEADER 320 + shared info 320 rounded
/// up to a power of two (2100 → 4096), + the sk_buff's 256 = 4352; capped by
/// tcp_wmem[2], never below tcp_wmem[1].
#[test]
fn sndbuf_starts_from_tcp_wmem_and_expands_for_the_initial_window() {
    let sndbuf = |c: TcpConfig| TcpSender::new(c, Instant::ZERO).sndbuf();
    assert_eq!(sndbuf(cfg()), 2 * 10 * 4352);
    assert_eq!(sndbuf(TcpConfig { cc: CongestionControl::Bbr, ..cfg() }), 3 * 10 * 4352);
    assert_eq!(sndbuf(TcpConfig { wmem: [4096, 16384, 65536], ..cfg() }), 65536);
    assert_eq!(sndbuf(TcpConfig { wmem: [4096, 200_000, 4 << 20], ..cfg() }), 200_000);
    // MTU 9000: 8960 + 640 = 9600 → 16384, + 256.
    assert_eq!(sndbuf(TcpConfig { mss: 9000 - 52, ..cfg() }), 2 * 10 * 16640);
}

/// A write appends skbs while `sk_wmem_queued` is below `sk_sndbuf` (the last one may
/// go beyond); an ACK frees the acked skbs; the push after it grows the buffer from
/// cwnd once a sent skb leaves cwnd unfilled (`tcp_should_expand_sndbuf`), and the
/// writer wakes once a third of the buffer is free. One-segment skbs (no TSO):
/// 960 + 1448 = 2408 bytes of truesize each.
#[test]
fn sendmsg_fills_the_buffer_and_an_ack_expands_it_and_wakes_the_writer() {
    let mut s = open_sender(TcpConfig { tso: false, ..cfg() }, Instant::ZERO);
    assert_eq!(s.sndbuf(), 87040);
    // 36 × 2408 = 86688 < 87040: a 37th skb, then full.
    assert_eq!(s.sendmsg(1 << 20, 0, Instant::ZERO), 37 * MSS as u64);
    assert_eq!(s.wmem_queued(), 37 * 2408);
    assert!(s.nospace && !s.memory_free(0));
    // The initial window: sending moves skbs to the retransmission queue, freeing
    // nothing; the checks after each skb expand for cwnd 10 (no change).
    let mut n = 0;
    while s.poll_transmit(Instant::ZERO, 0).is_some() {
        n += 1;
    }
    assert_eq!((n, s.sndbuf(), s.wmem_queued()), (10, 87040, 37 * 2408));
    assert!(!s.take_write_space());
    // The ACK of all ten: cwnd 20, 27 skbs left; after the first skb of its push (in
    // flight 1 < 20) the buffer becomes 2 × 20 × 4352 = 174080 and 109064 free ≥
    // 65016 / 2: the writer wakes.
    let ack = Ack { ack: s.snd_nxt(), sack: vec![], ece: false, tsecr: Instant::ZERO, tsval: 1, rwnd: 1 << 30 };
    s.on_ack(&ack, ms(20));
    assert_eq!((s.cwnd(), s.wmem_queued()), (20, 27 * 2408));
    assert!(s.poll_transmit(ms(20), 0).is_some());
    assert!(s.poll_transmit(ms(20), 0).is_some());
    assert_eq!(s.sndbuf(), 174080);
    assert!(s.take_write_space() && !s.nospace);
    while s.poll_transmit(ms(20), 0).is_some() {}
    // (174080 − 65016) / 2408 = 45.3: 46 more skbs.
    assert_eq!(s.sendmsg(1 << 20, 0, ms(20)), 46 * MSS as u64);
    assert_eq!(s.wmem_queued(), (27 + 46) * 2408);
}

/// `tcp_notsent_lowat`: a new skb only while what is written but unsent is below it,
/// and the writer wakes once twice that is (`tcp_stream_memory_free` with `wake`).
#[test]
fn notsent_lowat_holds_the_writer_to_the_unsent_bytes() {
    let mut net = Net::with_writer(TcpConfig { tso: false, notsent_lowat: 16384, ..cfg() }, 10);
    // 11 × 1448 = 15928 < 16384: a 12th skb. The push sends cwnd's 10; after the 7th
    // the unsent 5 × 1448 doubled (14480) is below 16384: the writer wakes and writes
    // until 12 skbs wait again (the window is full): 22 written in all.
    net.run_until(Instant::ZERO);
    assert_eq!(net.sent.len(), 10);
    assert_eq!(net.snd.written, Some(22 * MSS as u64));
    assert!(net.snd.nospace && !net.snd.memory_free(0));
    assert_eq!(net.writer.map(|w| w.1), Some(true));
}

// ----- robustness// ----- robustness -------------------------------------------------------------------------

/// A small deterministic generator for drop patterns.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// True with probability `per_mille` / 1000.
    fn hit(&mut self, per_mille: u32) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// Random network drops (also of retransmissions), random CE marks and random local
/// drops, under every configuration switch: the scoreboard invariants hold after every
/// event (checked in `pump`), the receiver never holds data beyond what was sent, and
/// once the losses stop every hole is repaired and the flow runs clean again.
#[test]
fn random_losses_keep_invariants_and_recover() {
    let variants: Vec<(&str, TcpConfig)> = vec![
        ("cubic", cfg()),
        ("reno", TcpConfig { cc: CongestionControl::Reno, ..cfg() }),
        ("nosack", TcpConfig { sack: false, ..cfg() }),
        ("ecn", TcpConfig { ecn: true, ..cfg() }),
        ("fq", TcpConfig { pacing_status: PacingStatus::Fq, ..cfg() }),
        ("paced", TcpConfig { pacing_status: PacingStatus::Needed, ..cfg() }),
        ("notso-delack-off", TcpConfig { tso: false, delayed_ack: false, ..cfg() }),
        ("no-rtt", base()),
        // 106000 bytes of buffer at 158/256 (1-MSS skbs): a 64 KiB window.
        ("rwnd-64k", TcpConfig { rmem: [4096, 106000, 106000], ..cfg() }),
        ("hz1000", TcpConfig { hz: 1000, ..cfg() }),
    ];
    for (name, c) in variants {
        for (seed, loss) in [(1u64, 20u32), (2, 100)] {
            let mut net = Net::new(c.clone(), 5);
            // A deep buffer: after 1.5 s nothing is lost any more.
            net.rate = Some(10_000_000);
            net.nic_rate = Some(100_000_000);
            let mut rng = Lcg(seed);
            net.drop = Box::new(move |_, now| now < ms(1000) && rng.hit(loss));
            let mut rng2 = Lcg(seed + 100);
            net.ce = Box::new(move |_, now| now < ms(1000) && rng2.hit(20));
            let mut rng3 = Lcg(seed + 200);
            net.verdict =
                Box::new(move |_, now| if now < ms(1000) && rng3.hit(5) { LocalXmit::Dropped } else { LocalXmit::Ok });
            net.run_until(ms(1000));
            let mid = net.rcv.delivered();
            assert!(mid > 0, "{name} loss {loss}: no progress");
            net.run_until(ms(3000));
            let st = net.snd.stats();
            let tag = format!("{name} loss {loss}‰: {st:?}");
            assert!(net.rcv.delivered() >= net.snd.snd_una(), "{tag}");
            assert!(net.rcv.delivered() <= net.snd.snd_nxt(), "{tag}");
            assert!(net.rcv.delivered() > mid + 1_500_000, "{tag}: stalled after the losses");
            assert_eq!(st.lost_out, 0, "{tag}");
            assert!(st.ca_state <= CaState::Disorder, "{tag}");
        }
    }
}

/// A local queue that refuses every skb longer than two segments (a small bfifo facing
/// 64 KB TSO skbs): with nothing in flight the probe timer (`tcp_send_probe0`) fires at
/// the RTO and `tcp_write_wakeup` cuts one MSS off the head skb, which passes; each ACK
/// lets TCP try a whole skb again, which is refused again — until CWR has shrunk cwnd
/// (and with it the pacing rate and TSO size) to one-segment skbs, which pass.
#[test]
fn probe_timer_sends_one_mss_when_the_local_qdisc_refuses_big_skbs() {
    let mut net = Net::new(cfg(), 10);
    net.verdict = Box::new(|s, _| if s.len > MSS { LocalXmit::Dropped } else { LocalXmit::Ok });
    net.run_until(ms(3000));
    let first: Vec<_> = net.sent.iter().take(7).map(|s| (s.at, s.seg.seq, s.seg.len, s.verdict)).collect();
    use LocalXmit::{Dropped, Ok};
    // The RTO is 220 ms: the SYN's 20 ms RTT plus its variance term's 200 ms floor (tcp_rto_min).
    assert_eq!(
        first,
        vec![
            (ms(0), 0, 2 * MSS, Dropped),
            (ms(220), 0, MSS, Ok),
            (ms(240), MSS as u64, 2 * MSS, Dropped),
            (ms(460), MSS as u64, MSS, Ok),
            (ms(480), 2 * MSS as u64, 2 * MSS, Dropped),
            (ms(700), 2 * MSS as u64, MSS, Ok),
            (ms(720), 3 * MSS as u64, MSS, Ok),
        ]
    );
    // Nothing counts as a retransmission: the refused bytes were never sent.
    assert_eq!(net.snd.stats().retransmits, 0);
}

/// `tcp_cwnd_restart` after an idle period, as `skb_entail` checks it on the next write.
#[test]
fn slow_start_after_idle_halves_cwnd_per_idle_rto_down_to_the_initial_window() {
    let c = TcpConfig { syn_rtt: Some(Duration::from_millis(100)), ..cfg() };
    let idle = |c: &TcpConfig, cwnd: u32, idle_ms: u64| {
        let mut s = TcpSender::new(c.clone(), Instant::ZERO);
        // RTO after the 100 ms sample: srtt 100 + max(2·100, rto_min 200) = 300 ms.
        assert_eq!(s.rto_j, 75);
        s.w.cwnd = cwnd;
        s.w.ssthresh = 50;
        s.sendmsg(1 << 20, 0, ms(idle_ms));
        (s.w.cwnd, s.w.ssthresh)
    };
    // Exactly one RTO idle: no restart (the kernel wants more than an RTO).
    assert_eq!(idle(&c, 80, 300), (80, 50));
    // 500 ms = 125 jiffies: 125 − 75 > 0 halves once; ssthresh = max(50, ¾ · 80).
    assert_eq!(idle(&c, 80, 500), (40, 60));
    // 1 s = 250 jiffies: 175, 100, 25 > 0 halve three times: 80 → 10.
    assert_eq!(idle(&c, 80, 1000), (10, 60));
    // 2 s: the halving stops at the initial window.
    assert_eq!(idle(&c, 80, 2000), (10, 60));
    // A window below the initial one stays.
    assert_eq!(idle(&c, 6, 2000), (6, 50));
    // net.ipv4.tcp_slow_start_after_idle = 0, and bbr (its own cong_control): no restart.
    let off = TcpConfig { slow_start_after_idle: false, ..c.clone() };
    assert_eq!(idle(&off, 80, 2000), (80, 50));
    let mut s = TcpSender::new(TcpConfig { cc: CongestionControl::Bbr, ..c.clone() }, Instant::ZERO);
    let before = s.w.cwnd;
    s.sendmsg(1 << 20, 0, ms(2000));
    assert_eq!(s.w.cwnd, before);
}

#[test]
fn slow_start_after_idle_counts_from_the_last_data_sent_and_not_with_data_in_flight() {
    let c = TcpConfig { syn_rtt: Some(Duration::from_millis(100)), ..cfg() };
    // The initial window leaves at 0.4 s (lsndtime) after a write at 0.
    let start = || {
        let mut s = TcpSender::new(c.clone(), Instant::ZERO);
        s.sendmsg(100 * MSS as u64, 0, Instant::ZERO);
        while s.poll_transmit(ms(400), 0).is_some() {}
        assert!(s.sb.packets_out > 0);
        s
    };
    // Data in flight: no restart, however long since the last send.
    let mut s = start();
    s.w.cwnd = 80;
    s.sendmsg(MSS as u64, 0, ms(1000));
    assert_eq!(s.w.cwnd, 80);
    // Everything acked at 0.5 s (RTO still 300 ms = 75 jiffies); the next write at
    // 0.8 s is 100 jiffies after the last send: one halving.
    let mut s = start();
    let ack = Ack { ack: s.snd_nxt, sack: vec![], ece: false, tsecr: ms(400), tsval: 1, rwnd: 1 << 30 };
    s.on_ack(&ack, ms(500));
    assert_eq!((s.sb.packets_out, s.rto_j, s.w.cwnd), (0, 75, 20));
    s.sendmsg(MSS as u64, 0, ms(800));
    assert_eq!(s.w.cwnd, 10);
}

/// The default buffer with 1-MSS skbs gives a window of 76928 bytes (receiver.rs); with
/// tcp_rmem[2] = tcp_rmem[1] DRS cannot grow it, so on a 20 ms path with no bottleneck
/// the flow sends 53 whole segments (76744 bytes) per round trip and no more, whatever
/// its cwnd.
#[test]
fn window_limited_flow_sends_rwnd_per_rtt() {
    let c =
        TcpConfig { syn_rtt: Some(Duration::from_millis(20)), rmem: [4096, 131072, 131072], ..TcpConfig::default() };
    let mut net = Net::new(c.clone(), 10);
    net.rcv = TcpReceiver::new(&c, Instant::ZERO);
    net.run_until(ms(1000));
    let (d1, cwnd1) = (net.rcv.delivered(), net.snd.cwnd());
    let mut max_out = 0;
    for t in 1..=100 {
        net.run_until(ms(1000 + 10 * t));
        max_out = max_out.max(net.snd.snd_nxt() - net.snd.snd_una());
    }
    assert_eq!(net.snd.snd_wnd, 76928);
    assert_eq!(max_out, 53 * MSS as u64);
    // 50 round trips in the second second, 53 segments each, the second's edges
    // cutting into one: between 49 and 50 rounds' worth.
    let segs = (net.rcv.delivered() - d1) / MSS as u64;
    assert!((49 * 53..=50 * 53).contains(&segs), "{segs} segments");
    // Not cwnd-limited: the window does not grow (tcp_is_cwnd_limited).
    assert_eq!(net.snd.cwnd(), cwnd1);
}

/// `skb_still_in_host_queue`: a retransmission of an skb whose last transmission has
/// not left the host (a slow shaper's queue on the sending host) is skipped. The
/// sender knows what left from `sk_wmem_alloc`, its skbs leaving in the order sent.
/// A flow limited by a 4-segment window sends it at 0 ms (two 2-segment skbs); the loss probe fires at
/// 2 · 20 ms + 2 ms, 11 jiffies; no new data fits, so it would retransmit the last
/// segment — not while that is still queued. The RTO (220 ms) would retransmit the
/// head — not while it is queued either; its release (TSQ) retransmits it.
#[test]
fn retransmissions_skip_skbs_still_in_the_host() {
    let sender = || {
        let mut s = open_sender(cfg(), Instant::ZERO);
        (s.snd_wnd, s.max_window) = (4 * MSS as u64, 4 * MSS as u64);
        let mut charged = Vec::new();
        while let Some(seg) = s.poll_transmit(Instant::ZERO, charged.iter().sum()) {
            charged.push(u64::from(seg.truesize()));
        }
        assert_eq!((s.snd_nxt(), charged.len()), (4 * MSS as u64, 2));
        assert_eq!(s.next_timer(), Some(ms(44)), "the loss probe");
        s.on_timer(ms(44));
        (s, charged)
    };
    // Everything still queued: no probe, the RTO stays where the head's send put it.
    let (mut s, charged) = sender();
    let all: u64 = charged.iter().sum();
    assert_eq!(s.poll_transmit(ms(44), all), None);
    assert!(s.tsq_throttled());
    assert_eq!((s.stats().tlp_count, s.stats().retransmits), (0, 0));
    assert_eq!(s.next_timer(), Some(ms(220)));
    // Only the first skb left: the head is no longer busy, the last one still is.
    let head = charged[0];
    s.on_timer(ms(220));
    assert_eq!(s.stats().rto_count, 1);
    let rtx = s.poll_transmit(ms(220), all - head).expect("the head goes again");
    assert_eq!((rtx.seq, rtx.len, rtx.retransmit), (0, MSS, true));
    assert_eq!(s.stats().retransmits, 1);

    // Everything left: the probe retransmits the last segment.
    let (mut s, _) = sender();
    let p = s.poll_transmit(ms(44), 0).expect("the probe");
    assert_eq!((p.seq, p.len, p.retransmit), (3 * MSS as u64, MSS, true));
    assert_eq!(s.poll_transmit(ms(44), u64::from(p.truesize())), None);
    assert_eq!((s.stats().tlp_count, s.stats().retransmits), (1, 1));
}

/// The RTO head while it is still queued: -EBUSY, `tcp_retransmit_timer` backs off as
/// if it had gone; the skb's release runs the TSQ handler, which retransmits it.
#[test]
fn rto_head_still_queued_goes_on_its_release() {
    let mut s = open_sender(cfg(), Instant::ZERO);
    (s.snd_wnd, s.max_window) = (4 * MSS as u64, 4 * MSS as u64);
    let mut all = 0;
    while let Some(seg) = s.poll_transmit(Instant::ZERO, all) {
        all += u64::from(seg.truesize());
    }
    s.on_timer(ms(44));
    assert_eq!(s.poll_transmit(ms(44), all), None);
    s.on_timer(ms(220));
    assert_eq!(s.poll_transmit(ms(220), all), None, "the head is still queued");
    assert!(s.tsq_throttled());
    assert_eq!((s.stats().rto_count, s.stats().retransmits, s.stats().rto), (1, 0, Duration::from_millis(440)));
    // The queue drains at 300 ms: the release retries the queue, the head goes.
    let rtx = s.poll_transmit(ms(300), 0).expect("the TSQ handler retransmits");
    assert_eq!((rtx.seq, rtx.len, rtx.retransmit), (0, MSS, true));
    assert_eq!(s.stats().retransmits, 1);
}
