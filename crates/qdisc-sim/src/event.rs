//! The event queue: a binary heap ordered by (time, insertion sequence), so events at
//! the same instant run in the order they were scheduled — deterministic by design.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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
    /// A TCP connection starts.
    TcpStart { flow: u32 },
    /// The TCP sender's timer (RTO, pacing …).
    TcpSender { flow: u32 },
    /// The TCP receiver's delayed-ACK timer.
    TcpReceiver { flow: u32 },
    /// The next datagram of a UDP sender.
    Udp { app: u32 },
    /// The next echo request of a ping.
    Ping { app: u32 },
    /// CPU `cpu` of host `host` ends a step or is handed a lock (cpu.rs).
    Cpu { host: u32, cpu: u32 },
    /// Reporting interval / tc snapshot boundary.
    Sample,
}

struct Entry {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's maximum is the earliest event.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
pub struct Events {
    heap: BinaryHeap<Entry>,
    seq: u64,
    /// Events handled so far (for the events/s figure).
    pub handled: u64,
}

impl Events {
    pub fn at(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry { at, seq: self.seq, ev });
    }

    /// When the earliest pending event is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.at)
    }

    /// The next event, if it is due no later than `end`.
    pub fn pop_until(&mut self, end: Instant) -> Option<(Instant, Ev)> {
        if self.heap.peek()?.at > end {
            return None;
        }
        let e = self.heap.pop()?;
        self.handled += 1;
        Some((e.at, e.ev))
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
