//! The retransmission queue as a SACK scoreboard (RFC 2018, RFC 6675 bookkeeping,
//! Linux's `tcp_sacktag_write_queue` and `tcp_clean_rtx_queue`).
//!
//! Every sent-but-not-cumulatively-acked MSS of payload has one entry with Linux's
//! tag bits, whose counts make up the in-flight estimate
//!
//! ```text
//!   in_flight = packets_out − (sacked_out + lost_out) + retrans_out
//! ```
//!
//! | tags  | in flight | meaning                                        |
//! |-------|-----------|------------------------------------------------|
//! | —     | 1         | original in flight                             |
//! | S     | 0         | SACKed: reached the receiver                   |
//! | L     | 0         | marked lost, not retransmitted yet             |
//! | R     | 2         | original and retransmission in flight          |
//! | L\|R  | 1         | original lost, retransmission in flight        |
//! | S\|R  | 1         | original SACKed, retransmission still in flight|
//!
//! `E` (`TCPCB_EVER_RETRANS`) survives for Karn's rule and undo decisions.
//!
//! Linux keeps skbs (GSO super-packets) and splits them at SACK boundaries; since
//! the model's write queue never runs dry, every segment is a full MSS and one
//! entry per MSS is what that splitting converges to. Entries remember the skb
//! they were last (re)transmitted in (`skb`), so TSQ's "single skb in the rtx
//! queue" test and retransmission coalescing behave like the kernel's.
//!
//! Besides the sequence order, un-SACKed entries are kept in transmit order
//! (`tsorted`, the kernel's `tsorted_sent_queue`) for RACK.

use std::collections::{BTreeMap, VecDeque};

use qdisc::Instant;

use super::sender::{
    TcpSender, FLAG_ACKED, FLAG_DATA_ACKED, FLAG_DATA_SACKED, FLAG_DSACKING_ACK, FLAG_DSACK_TLP, FLAG_ORIG_SACK_ACKED,
    FLAG_RETRANS_DATA_ACKED, FLAG_SACK_RENEGING, FLAG_SET_XMIT_TIMER,
};
use super::{ts_ms, us, CaState};

/// `TCPCB_SACKED_ACKED`.
pub const S: u8 = 0x01;
/// `TCPCB_SACKED_RETRANS`: a retransmission is in flight.
pub const R: u8 = 0x02;
/// `TCPCB_LOST`.
pub const L: u8 = 0x04;
/// `TCPCB_EVER_RETRANS`.
pub const E: u8 = 0x80;
/// `TCPCB_RETRANS` = R | E.
pub const RETRANS: u8 = R | E;

/// `net.ipv4.tcp_max_reordering`.
pub const MAX_REORDERING: u32 = 300;

/// One MSS of the retransmission queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Tag bits.
    pub flags: u8,
    /// The skb this segment was last (re)transmitted in.
    pub skb: u64,
    /// `skb_mstamp_ns` of the last (re)transmission (the EDT departure time).
    pub xmit_ns: u64,
    /// Key in the transmit-ordered list, `None` once SACKed/marked lost by RACK.
    pub order: Option<u64>,
    /// `tx.delivered` at the last transmission; `None` once delivered by a SACK
    /// (the kernel zeroes `tx.delivered_mstamp` for that).
    pub tx_delivered: Option<u64>,
    /// `tx.first_tx_mstamp` and `tx.delivered_mstamp` (µs) at the last transmission.
    pub tx_first_tx_us: u64,
    pub tx_delivered_us: u64,
    /// `tx.is_app_limited` at the last transmission.
    pub tx_app_limited: bool,
}

impl Seg {
    pub fn xmit_us(&self) -> u64 {
        self.xmit_ns / 1_000
    }
}

/// The queue with its counters (`packets_out`, `sacked_out`, `lost_out`, `retrans_out`).
#[derive(Clone, Debug, Default)]
pub struct Scoreboard {
    /// Sequence number of `segs[0]`.
    pub base: u64,
    pub mss: u64,
    pub segs: VecDeque<Seg>,
    /// Transmit order → sequence number of un-SACKed entries.
    pub tsorted: BTreeMap<u64, u64>,
    pub packets_out: u32,
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    /// `tcp_highest_sack_seq` while `sacked_out > 0`: end of the highest SACKed entry.
    pub highest_sack: u64,
    /// `recv_sack_cache`: the blocks of the previous ACK, already fully tagged.
    pub sack_cache: Vec<(u64, u64)>,
    /// Skbs in the queue: runs of entries (re)transmitted in the same skb, as the
    /// kernel's queue holds them after `tso_fragment`/`tcp_fragment` (SACK's merging
    /// of skbs, `tcp_shift_skb_data`, is not followed).
    pub skbs: u32,
}

impl Scoreboard {
    pub fn new(mss: u32) -> Self {
        Scoreboard { mss: mss as u64, ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.segs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    pub fn seq_of(&self, idx: usize) -> u64 {
        self.base + idx as u64 * self.mss
    }

    /// `tcp_left_out`.
    pub fn left_out(&self) -> u32 {
        self.sacked_out + self.lost_out
    }

    /// `tcp_packets_in_flight`.
    pub fn in_flight(&self) -> u32 {
        (self.packets_out + self.retrans_out).saturating_sub(self.left_out())
    }

    /// Remove an entry from the transmit-ordered list.
    pub fn untsort(&mut self, idx: usize) {
        if let Some(o) = self.segs[idx].order.take() {
            self.tsorted.remove(&o);
        }
    }

    /// (Re)insert an entry at the tail of the transmit-ordered list.
    pub fn tsort(&mut self, idx: usize, order: u64) {
        self.untsort(idx);
        let seq = self.seq_of(idx);
        self.segs[idx].order = Some(order);
        self.tsorted.insert(order, seq);
    }

    /// Append an entry (new data), counting a new skb when it starts one.
    pub fn push_seg(&mut self, seg: Seg) {
        if self.segs.back().is_none_or(|b| b.skb != seg.skb) {
            self.skbs += 1;
        }
        self.segs.push_back(seg);
    }

    /// Remove the last entry (a send the qdisc refused).
    pub fn pop_back_seg(&mut self) {
        let last = self.segs.pop_back().expect("an entry to take back");
        if self.segs.back().is_none_or(|b| b.skb != last.skb) {
            self.skbs -= 1;
        }
    }

    /// Remove the head entry (cumulatively acknowledged); its skb is freed with its last entry.
    pub fn pop_front_seg(&mut self) {
        let first = self.segs.pop_front().expect("an entry to free");
        if self.segs.front().is_none_or(|f| f.skb != first.skb) {
            self.skbs -= 1;
        }
    }

    /// Entry `i` now belongs to skb `skb` (a retransmission, or its undoing).
    pub fn set_skb(&mut self, i: usize, skb: u64) {
        let edges = |sb: &Scoreboard| {
            let me = sb.segs[i].skb;
            u32::from(i > 0 && sb.segs[i - 1].skb != me) + u32::from(sb.segs.get(i + 1).is_some_and(|n| n.skb != me))
        };
        let before = edges(self);
        self.segs[i].skb = skb;
        self.skbs = self.skbs + edges(self) - before;
    }

    /// `tcp_rtx_queue_empty_or_single_skb`.
    pub fn empty_or_single_skb(&self) -> bool {
        match (self.segs.front(), self.segs.back()) {
            (Some(f), Some(b)) => f.skb == b.skb && self.segs.iter().all(|s| s.skb == f.skb),
            _ => true,
        }
    }
}

/// What one ACK's SACK processing found (`struct tcp_sacktag_state` + rate sample bits).
#[derive(Clone, Copy, Debug, Default)]
pub struct SackState {
    /// Transmit time (µs) of the earliest/latest never-retransmitted newly SACKed segment.
    pub first_sackt: Option<u64>,
    pub last_sackt: u64,
    /// Lowest newly SACKed never-retransmitted sequence below the highest SACK.
    pub reord: u64,
    /// Segments newly SACKed (and D-SACKed spurious retransmissions).
    pub sack_delivered: u32,
    pub flag: u32,
    /// Rate sample (`struct rate_sample`, filled by `tcp_rate_skb_delivered`):
    /// `tx.delivered` of the most recently sent delivered segment, `None` if none was.
    pub prior_delivered: Option<u64>,
    pub last_end_seq: u64,
    /// Its `tx.delivered_mstamp` (µs).
    pub prior_mstamp: u64,
    /// Its `tx.is_app_limited`, and whether it was ever retransmitted.
    pub is_app_limited: bool,
    pub is_retrans: bool,
    /// Send phase of the sample: its transmit time minus its `tx.first_tx_mstamp`, µs.
    pub interval_us: i64,
    /// RTT of the last (S)ACKed segment for congestion control (`rs->rtt_us`).
    pub rtt_us: Option<u32>,
}

impl TcpSender {
    /// `tcp_highest_sack_seq`.
    pub(super) fn highest_sack_seq(&self) -> u64 {
        if self.sb.sacked_out == 0 {
            self.snd_una
        } else {
            self.sb.highest_sack
        }
    }

    /// `tcp_mark_skb_lost`.
    pub(super) fn mark_seg_lost(&mut self, idx: usize) {
        let seq = self.sb.seq_of(idx);
        let f = self.sb.segs[idx].flags;
        if f & S != 0 {
            return;
        }
        self.out.rtx_from = self.out.rtx_from.min(seq);
        if f & L != 0 {
            if f & R != 0 {
                // Its retransmission is gone too.
                self.sb.segs[idx].flags &= !R;
                self.sb.retrans_out -= 1;
                self.lost += 1;
            }
        } else {
            self.sb.lost_out += 1;
            self.sb.segs[idx].flags |= L;
            self.lost += 1;
        }
    }

    /// `tcp_check_sack_reordering`: a never-retransmitted `low_seq` was delivered after
    /// higher data; widen `reordering` to the observed distance.
    pub(super) fn check_sack_reordering(&mut self, low_seq: u64) {
        let fack = self.highest_sack_seq();
        if low_seq >= fack {
            return;
        }
        let mss = self.mss as u64;
        let metric = fack - low_seq;
        if metric > self.reordering as u64 * mss {
            self.reordering = (metric.div_ceil(mss) as u32).min(MAX_REORDERING);
        }
        self.reord_seen += 1;
    }

    /// `tcp_rate_skb_delivered` (tcp_rate.c): remember the most recently sent delivered
    /// segment (`tcp_skb_sent_after`) and the send phase of its window.
    fn rate_seg_delivered(&mut self, idx: usize, st: &mut SackState) {
        let seg = self.sb.segs[idx];
        let Some(txd) = seg.tx_delivered else { return };
        let end = self.sb.seq_of(idx) + self.sb.mss;
        let tx_us = seg.xmit_us();
        if st.prior_delivered.is_none()
            || tx_us > self.first_tx_mstamp
            || (tx_us == self.first_tx_mstamp && end > st.last_end_seq)
        {
            st.prior_delivered = Some(txd);
            st.prior_mstamp = seg.tx_delivered_us;
            st.is_app_limited = seg.tx_app_limited;
            st.is_retrans = seg.flags & RETRANS != 0;
            st.last_end_seq = end;
            self.first_tx_mstamp = tx_us;
            st.interval_us = tx_us as i64 - seg.tx_first_tx_us as i64;
        }
        if seg.flags & S != 0 {
            self.sb.segs[idx].tx_delivered = None;
        }
    }

    /// `tcp_is_sackblock_valid`.
    fn sack_block_valid(&self, dsack: bool, start: u64, end: u64) -> bool {
        if end > self.snd_nxt || start >= end || start >= self.snd_nxt {
            return false;
        }
        if start > self.snd_una {
            return true;
        }
        let Some(um) = self.undo_marker else { return false };
        if !dsack || end > self.snd_una {
            return false;
        }
        if start >= um {
            return true;
        }
        if end <= um {
            return false;
        }
        start >= end.saturating_sub(self.max_window)
    }

    /// `tcp_dsack_seen`: returns the number of duplicate segments reported.
    fn dsack_seen(&mut self, start: u64, end: u64, st: &mut SackState) -> u32 {
        if start >= end {
            return 0;
        }
        let len = end - start;
        if len > self.max_window {
            return 0;
        }
        let mss = self.mss as u64;
        let dup = if len > mss {
            len.div_ceil(mss) as u32
        } else {
            if self.tlp_high_seq == Some(end) {
                st.flag |= FLAG_DSACK_TLP;
            }
            1
        };
        self.dsack_dups += dup as u64;
        // Not caused by our retransmissions (e.g. network duplication): ignore.
        if self.dsack_dups > self.total_retrans {
            return 0;
        }
        if self.reord_seen > 0 && st.flag & FLAG_DSACK_TLP == 0 {
            self.rack.dsack_seen = true;
        }
        st.flag |= FLAG_DSACKING_ACK;
        st.sack_delivered += dup;
        dup
    }

    /// `tcp_check_dsack`: is the first block a D-SACK (below the ACK, or inside the second)?
    fn check_dsack(&mut self, blocks: &[(u64, u64)], ack: u64, prior_snd_una: u64, st: &mut SackState) -> bool {
        let (s0, e0) = blocks[0];
        if s0 >= ack {
            match blocks.get(1) {
                Some(&(s1, e1)) if e0 <= e1 && s0 >= s1 => {}
                _ => return false,
            }
        }
        let dup = self.dsack_seen(s0, e0, st);
        if dup == 0 {
            return false;
        }
        // A D-SACK below snd_una: nothing left to tag, but it still proves one
        // retransmission unnecessary.
        if let Some(um) = self.undo_marker {
            if self.undo_retrans > 0 && e0 <= prior_snd_una && e0 > um {
                self.undo_retrans = (self.undo_retrans - dup as i32).max(0);
            }
        }
        true
    }

    /// `tcp_sacktag_one` on one entry. `dup` marks a D-SACKed entry.
    fn sacktag_one(&mut self, idx: usize, dup: bool, st: &mut SackState) {
        let start = self.sb.seq_of(idx);
        let end = start + self.sb.mss;
        let mut f = self.sb.segs[idx].flags;

        if dup && f & RETRANS != 0 {
            if let Some(um) = self.undo_marker {
                if self.undo_retrans > 0 && end > um {
                    self.undo_retrans = (self.undo_retrans - 1).max(0);
                }
            }
            if f & S != 0 && start < st.reord {
                st.reord = start;
            }
        }
        if end <= self.snd_una {
            return;
        }
        if f & S == 0 {
            let xmit_us = self.sb.segs[idx].xmit_us();
            self.rack_advance(f, end, xmit_us);
            if f & R != 0 {
                // Only a lost original lets us retire the retransmission now; otherwise
                // it is still in flight.
                if f & L != 0 {
                    f &= !(L | R);
                    self.sb.lost_out -= 1;
                    self.sb.retrans_out -= 1;
                }
            } else {
                if f & RETRANS == 0 {
                    // A hole filled by never-retransmitted data: reordering.
                    if start < self.highest_sack_seq() && start < st.reord {
                        st.reord = start;
                    }
                    if end <= self.high_seq {
                        st.flag |= FLAG_ORIG_SACK_ACKED;
                    }
                    if st.first_sackt.is_none() {
                        st.first_sackt = Some(xmit_us);
                    }
                    st.last_sackt = xmit_us;
                }
                if f & L != 0 {
                    f &= !L;
                    self.sb.lost_out -= 1;
                }
            }
            f |= S;
            st.flag |= FLAG_DATA_SACKED;
            self.sb.sacked_out += 1;
            st.sack_delivered += 1;
        }
        if dup && f & R != 0 {
            f &= !R;
            self.sb.retrans_out -= 1;
        }
        self.sb.segs[idx].flags = f;
        self.rate_seg_delivered(idx, st);
        if f & S != 0 {
            self.sb.untsort(idx);
            // tcp_advance_highest_sack when this entry is at/above the highest SACK.
            if self.sb.sacked_out == 1 || end > self.sb.highest_sack {
                self.sb.highest_sack = self.sb.highest_sack.max(end);
            }
        }
    }

    /// Tag every whole entry inside `[start, end)`.
    fn sacktag_range(&mut self, start: u64, end: u64, dup: bool, st: &mut SackState) {
        let mss = self.sb.mss;
        let base = self.sb.base;
        let from = start.max(self.snd_una).max(base);
        let first = (from - base).div_ceil(mss) as usize;
        let last = ((end.saturating_sub(base)) / mss) as usize;
        let last = last.min(self.sb.len());
        for idx in first..last {
            self.sacktag_one(idx, dup, st);
        }
    }

    /// `tcp_sacktag_write_queue`: apply the SACK blocks of one ACK.
    pub(super) fn sacktag_write_queue(
        &mut self,
        blocks: &[(u64, u64)],
        ack: u64,
        prior_snd_una: u64,
        st: &mut SackState,
    ) -> u32 {
        st.flag = 0;
        st.reord = self.snd_nxt;
        if self.sb.sacked_out == 0 {
            // tcp_highest_sack_reset: the walk restarts from the head.
            self.sb.highest_sack = self.sb.base;
        }
        let found_dup = self.check_dsack(blocks, ack, prior_snd_una, st);
        if self.sb.packets_out == 0 {
            return st.flag;
        }
        let mut used: Vec<(u64, u64, bool)> = Vec::with_capacity(blocks.len());
        for (i, &(s, e)) in blocks.iter().enumerate() {
            let dup = i == 0 && found_dup;
            if !self.sack_block_valid(dup, s, e) || e <= prior_snd_una {
                continue;
            }
            used.push((s, e, dup));
        }
        // D-SACKed entries first (they need the dup handling), then in sequence order.
        used.sort_by_key(|&(s, _, dup)| (!dup, s));
        // Ranges the previous ACK already reported were tagged then: skip them, like the
        // kernel's recv_sack_cache (unless nothing is SACKed any more).
        let cache = if self.sb.sacked_out == 0 { Vec::new() } else { std::mem::take(&mut self.sb.sack_cache) };
        for &(s, e, dup) in &used {
            if dup {
                self.sacktag_range(s, e, true, st);
                continue;
            }
            let mut todo = vec![(s, e)];
            for &(cs, ce) in &cache {
                todo = todo
                    .into_iter()
                    .flat_map(|(a, b)| {
                        if ce <= a || cs >= b {
                            vec![(a, b)]
                        } else {
                            [(a, cs), (ce, b)].into_iter().filter(|r| r.0 < r.1).collect()
                        }
                    })
                    .collect();
            }
            for (a, b) in todo {
                self.sacktag_range(a, b, false, st);
            }
        }
        self.sb.sack_cache = used.iter().map(|&(s, e, _)| (s, e)).collect();
        if self.ca_state != CaState::Loss || self.undo_marker.is_some() {
            self.check_sack_reordering(st.reord);
        }
        st.flag
    }

    /// `tcp_skb_spurious_retrans`: the echoed timestamp predates this retransmission.
    fn spurious_retrans(&self, seg: &Seg) -> bool {
        seg.flags & RETRANS != 0 && self.tsecr_before(ts_ms(Instant::from_nanos(seg.xmit_ns)))
    }

    /// `tcp_clean_rtx_queue`: drop cumulatively acked entries, take RTT samples.
    /// Returns the ACK flags it adds.
    pub(super) fn clean_rtx_queue(&mut self, prior_fack: u64, st: &mut SackState, ece: bool) -> u32 {
        let now_us = us(self.now);
        let mss = self.sb.mss;
        let mut flag = 0u32;
        let mut reord = self.snd_nxt;
        let mut first_ackt: Option<u64> = None;
        let mut last_ackt = 0u64;
        let mut pkts_acked = 0u32;

        while let Some(&seg) = self.sb.segs.front() {
            let start = self.sb.base;
            let end = start + mss;
            if end > self.snd_una {
                break;
            }
            let f = seg.flags;
            if f & RETRANS != 0 {
                if f & R != 0 {
                    self.sb.retrans_out -= 1;
                }
                flag |= FLAG_RETRANS_DATA_ACKED;
            } else if f & S == 0 {
                last_ackt = seg.xmit_us();
                first_ackt.get_or_insert(last_ackt);
                reord = reord.min(start);
                if end <= self.high_seq {
                    flag |= FLAG_ORIG_SACK_ACKED;
                }
            }
            if f & S != 0 {
                self.sb.sacked_out -= 1;
            } else if self.cfg.sack {
                self.count_delivered(1, ece);
                if !self.spurious_retrans(&seg) {
                    self.rack_advance(f, end, seg.xmit_us());
                }
            }
            if f & L != 0 {
                self.sb.lost_out -= 1;
            }
            self.sb.packets_out -= 1;
            pkts_acked += 1;
            self.rate_seg_delivered(0, st);
            flag |= FLAG_DATA_ACKED;
            self.sb.untsort(0);
            self.sb.pop_front_seg();
            self.sb.base += mss;
        }
        self.out.rtx_from = self.out.rtx_from.max(self.sb.base);

        if let Some(head) = self.sb.segs.front() {
            if head.flags & S != 0 {
                flag |= FLAG_SACK_RENEGING;
            }
        }

        let mut seq_rtt: Option<u64> = None;
        let mut ca_rtt: Option<u64> = None;
        if let Some(first) = first_ackt {
            if flag & FLAG_RETRANS_DATA_ACKED == 0 {
                seq_rtt = Some(now_us.saturating_sub(first));
                ca_rtt = Some(now_us.saturating_sub(last_ackt));
            }
        }
        let mut sack_rtt: Option<u64> = None;
        if let Some(first) = st.first_sackt {
            sack_rtt = Some(now_us.saturating_sub(first));
            ca_rtt = Some(now_us.saturating_sub(st.last_sackt));
        }
        let rtt_update = self.ack_update_rtt(flag, seq_rtt, sack_rtt, ca_rtt, st);

        if flag & FLAG_ACKED != 0 {
            flag |= FLAG_SET_XMIT_TIMER;
            if !self.cfg.sack {
                self.remove_reno_sacks(pkts_acked, ece);
                if flag & FLAG_RETRANS_DATA_ACKED != 0 {
                    flag &= !FLAG_ORIG_SACK_ACKED;
                }
            } else if reord < prior_fack {
                self.check_sack_reordering(reord);
            }
        } else if let (Some(head), true, Some(srtt)) = (self.sb.segs.front(), rtt_update, sack_rtt) {
            // Re-arm only if the SACK RTT covers the head's last transmission, so that
            // the timeout cannot keep extending in loss recovery.
            if srtt > now_us.saturating_sub(head.xmit_us()) {
                flag |= FLAG_SET_XMIT_TIMER;
            }
        }
        self.cc_pkts_acked(st.rtt_us);
        flag
    }
}
