//! The event queue, ordered by (time, insertion sequence), so events at the same
//! instant run in the order they were scheduled — deterministic by design.

use qdisc::Instant;

/// What happens at an instant. Small and `Copy`: packets never travel through the
/// heap (links keep their own FIFO of frames in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    /// The frame at the head of link direction `dir` reaches the far interface.
    Arrive { dir: u32 },
    /// The wire of interface `iface` finished serialising its current frame.
    TxDone { iface: u32 },
    /// A throttled qdisc of `iface`'s tx queue `txq` may have something to send.
    Watchdog { iface: u32, txq: u32 },
    /// `__qdisc_run` used its quota: the NET_TX softirq runs the queue again.
    NetTx { iface: u32, txq: u32 },
    /// The client of TCP connection `conn` (apps.rs `Conn`) calls connect().
    Connect { conn: u32 },
    /// A rate-limited TCP writer (iperf3 -b) may write its next block.
    TcpWrite { flow: u32 },
    /// The SYN (client) or SYN-ACK (server) retransmission timer of `conn`.
    Conn { conn: u32, server: bool },
    /// The TCP sender's timer (RTO, pacing …).
    TcpSender { flow: u32 },
    /// The TCP receiver's delayed-ACK timer.
    TcpReceiver { flow: u32 },
    /// The next datagram of a UDP sender.
    Udp { app: u32 },
    /// The next echo request of a ping.
    Ping { app: u32 },
    /// The (coalesced) interrupt of `iface`'s rx queue `rxq` fires.
    RxIrq { iface: u32, rxq: u32 },
    /// The (coalesced) TX completion interrupt of `iface`'s tx queue `txq` fires.
    TxIrq { iface: u32, txq: u32 },
    /// CPU `cpu` of host `host` ends a step or is handed a lock (cpu.rs).
    Cpu { host: u32, cpu: u32 },
    /// The first packet of `Sim::rx_later` goes up its receive path (`netif_rx` on a
    /// host without CPUs).
    NetifRx,
    /// Reporting interval / tc snapshot boundary.
    Sample,
}

/// A radix heap over the events' times (event times never go below the last one
/// popped): bucket `b` holds the events whose time differs from the last popped time
/// first in bit `b - 1`; bucket 0 those due at that very time, in insertion order.
/// Popping an empty bucket 0 moves the lowest non-empty bucket down, its earliest
/// events into bucket 0 (sorted by insertion). Each event moves at most 64 times;
/// most moves are one step, so the queue costs far less than a binary heap here.
pub struct Events {
    /// The time of the last popped event (`now` of the simulation).
    last: u64,
    buckets: Vec<Vec<(u64, u64, Ev)>>,
    /// Bit b set: bucket b is not empty.
    nonempty: u128,
    /// Bucket 0 in order (front = next).
    due: std::collections::VecDeque<(u64, Ev)>,
    seq: u64,
    /// Events handled so far (for the events/s figure).
    pub handled: u64,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            last: 0,
            buckets: (0..65).map(|_| Vec::new()).collect(),
            nonempty: 0,
            due: Default::default(),
            seq: 0,
            handled: 0,
        }
    }
}

fn bucket(last: u64, at: u64) -> usize {
    64 - (at ^ last).leading_zeros() as usize
}

impl Events {
    pub fn at(&mut self, at: Instant, ev: Ev) {
        let at = at.as_nanos();
        assert!(at >= self.last, "event {ev:?} at {at} ns scheduled before now ({} ns)", self.last);
        self.seq += 1;
        match bucket(self.last, at) {
            0 => self.due.push_back((self.seq, ev)),
            b => {
                self.buckets[b].push((at, self.seq, ev));
                self.nonempty |= 1 << b;
            }
        }
    }

    /// No event is due before `at` (a cheap check: false may be wrong, true is not).
    pub fn none_before(&self, at: Instant) -> bool {
        if !self.due.is_empty() {
            return false;
        }
        if self.nonempty == 0 {
            return true;
        }
        // Bucket b holds times that share the last time's bits above b - 1 and have
        // bit b - 1 set: none below that.
        let b = self.nonempty.trailing_zeros();
        let low = (self.last >> (b - 1) | 1) << (b - 1);
        at.as_nanos() < low
    }

    /// The next event, if it is due no later than `end`.
    pub fn pop_until(&mut self, end: Instant) -> Option<(Instant, Ev)> {
        if self.due.is_empty() {
            if self.nonempty == 0 {
                return None;
            }
            let i = self.nonempty.trailing_zeros() as usize;
            let min = self.buckets[i].iter().map(|e| e.0).min().expect("non-empty");
            if min > end.as_nanos() {
                return None;
            }
            // Everything pending is at or after `min`: it becomes the reference.
            self.last = min;
            let mut moved = std::mem::take(&mut self.buckets[i]);
            self.nonempty &= !(1 << i);
            for (at, seq, ev) in moved.drain(..) {
                match bucket(min, at) {
                    0 => self.due.push_back((seq, ev)),
                    b => {
                        self.buckets[b].push((at, seq, ev));
                        self.nonempty |= 1 << b;
                    }
                }
            }
            self.buckets[i] = moved;
            // Those due now, in insertion order (the bucket held them unordered).
            self.due.make_contiguous().sort_unstable_by_key(|e| e.0);
        } else if self.last > end.as_nanos() {
            return None;
        }
        let (_, ev) = self.due.pop_front()?;
        self.handled += 1;
        Some((Instant::from_nanos(self.last), ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_insertion_order() {
        let mut q = Events::default();
        let t = Instant::from_micros;
        q.at(t(5), Ev::Sample);
        q.at(t(1), Ev::Udp { app: 1 });
        q.at(t(5), Ev::Udp { app: 2 });
        q.at(t(1), Ev::Udp { app: 3 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop_until(t(5))).collect();
        assert_eq!(
            order,
            vec![
                (t(1), Ev::Udp { app: 1 }),
                (t(1), Ev::Udp { app: 3 }),
                (t(5), Ev::Sample),
                (t(5), Ev::Udp { app: 2 })
            ]
        );
        q.at(t(9), Ev::Sample);
        assert_eq!(q.pop_until(t(8)), None);
        assert_eq!(q.handled, 4);
    }
}
