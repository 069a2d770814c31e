//! The Linux transmit path of one interface (§2–3 of docs/kernel-notes.md):
//!
//! ```text
//! dev_queue_xmit ─► tx queue (skb_tx_hash) ─► __dev_xmit_skb ─┬─ bypass (empty, idle) ─┐
//!                                                             └─ qdisc enqueue          │
//!        __qdisc_run: dequeue while the txq runs, ≤ 64 per run ─► driver ring ◄─────────┘
//!        BQL: dql_queued on hand-over, XOFF when over the limit; the wire serialises
//!        the ring in order; TX completion → dql_completed → XON → __qdisc_run again
//! ```
//!
//! * A qdisc that answers `Throttled { until }` gets a watchdog event at `until`
//!   (`qdisc_watchdog_schedule_ns`).
//! * When the quota of 64 packets is used up the queue is run again at the same instant
//!   after already-scheduled events (the NET_TX softirq).
//! * A GSO skb is one ring entry and one BQL charge; the NIC segments it (TSO): its
//!   segments leave back to back and arrive one by one — at a router, which forwards
//!   them one by one. At their final destination the receiving NIC merges them again
//!   (GRO) and the train is delivered as one skb when its last segment is in (on a
//!   lossless link; with random loss every segment travels alone).
//! * TX completion happens when the frame leaves the wire (no interrupt coalescing);
//!   freeing the skb gives its truesize back to the socket (TSQ) and the sender may
//!   send more.
//!
//! Simplifications: with several tx queues but a root qdisc other than mq, all
//! queues share txq 0's BQL state; no XPS; no requeues (BQL stops a queue long before
//! its ring is full).

use qdisc::tree::Xmit;
use qdisc::{Dequeued, Enqueued, Instant, Packet};

use crate::event::Ev;
use crate::world::{Meta, Payload, Sim, ETH_WIRE_OVERHEAD, QDISC_QUOTA};

impl Sim {
    /// `dev_queue_xmit` on interface `iface`: the qdisc's verdict for the packet.
    pub fn dev_queue_xmit(&mut self, iface: u32, pkt: Packet) -> Enqueued {
        self.dev_queue_xmit_skb(iface, pkt, false)
    }

    /// [`Sim::dev_queue_xmit`] of a packet whose `tc_skip_classify` is `skip` (what an
    /// ifb gives back to the device that sent it there: the first filter actions it
    /// meets are not run, see [`qdisc::classify::action::set_skip_classify`]). First
    /// the device's clsact egress hook (`sch_handle_egress`), then the tx queue pick
    /// and the qdisc; what mirred actions of either handed on is forwarded after.
    pub(crate) fn dev_queue_xmit_skb(&mut self, iface: u32, pkt: Packet, skip: bool) -> Enqueued {
        use qdisc::classify::action::set_skip_classify;
        self.packets += 1;
        let now = self.now;
        set_skip_classify(skip);
        let pkt = match self.egress_hook(iface, pkt) {
            Ok(p) => p,
            Err(v) => {
                set_skip_classify(false);
                return v;
            }
        };
        // On a host with CPUs the sending CPU picks the queue (socket cache, XPS);
        // otherwise skb_tx_hash.
        let host = self.ifaces[iface as usize].host;
        let pick = match self.on_cpu {
            Some((m, c)) if m == self.machine(host) => self.pick_tx(iface, c, &pkt),
            _ => self.device(iface).txq_of(&pkt) as u32,
        };
        let txq = self.qdisc_queue(iface, pick);
        let idle = self.txq_can_take(iface, txq);
        let route = self.route_of(iface, &pkt);
        let id = pkt.id;
        self.mirred_sees(id);
        let xmit = self.device(iface).xmit_routed(pkt, pick as usize, now, idle, route);
        set_skip_classify(false);
        self.after_qdisc_filters(iface, id, &xmit);
        match xmit {
            Xmit::Direct(p) => {
                self.to_driver(iface, txq, p);
                Enqueued::Success
            }
            Xmit::Queued(v) => {
                self.qdisc_run(iface, txq);
                v
            }
        }
    }

    /// What the filters of `iface`'s qdiscs did beyond classifying packet `id`: their
    /// mirred actions' packets are forwarded, and one they stole (`__NET_XMIT_STOLEN`)
    /// and no redirect took on is freed — unless the qdisc reported freeing it itself
    /// (netem's loss answers `Stolen` too, after `Packet::kfree_skb`): its meta is then
    /// the drop monitor's to free, and freeing it here as well would free the id twice,
    /// the second time under the packet that reused it.
    pub(crate) fn after_qdisc_filters(&mut self, iface: u32, id: u64, xmit: &Xmit) {
        let stolen = matches!(xmit, Xmit::Queued(Enqueued::Stolen)).then_some(id);
        if !self.forward_mirrored(iface, false, stolen) && stolen.is_some() {
            // Only an id freed during this call can be this packet's: one reported
            // earlier still holds its meta until reclaimed, so it was not reused.
            let before = self.dropped_ids.len();
            qdisc::drops::take_freed(&mut self.dropped_ids);
            if !self.dropped_ids[before..].contains(&id) {
                self.take_meta(id);
            }
        }
    }

    /// The driver would take a packet on this queue now.
    pub(crate) fn txq_can_take(&self, iface: u32, txq: u32) -> bool {
        let i = &self.ifaces[iface as usize];
        let q = &i.txqs[txq as usize];
        !q.stopped && !q.drv_stopped && q.in_ring < i.tx_ring_size
    }

    /// `__qdisc_run` for one tx queue.
    pub fn qdisc_run(&mut self, iface: u32, txq: u32) {
        self.qdisc_run_quota(iface, txq);
        // Dequeue drops (codel, pie, ...) free skbs too: sleeping UDP senders may go on.
        self.udp_write_space();
    }

    fn qdisc_run_quota(&mut self, iface: u32, txq: u32) {
        let now = self.now;
        for _ in 0..QDISC_QUOTA {
            if !self.txq_can_take(iface, txq) {
                return;
            }
            if let Some(p) = self.ifaces[iface as usize].txqs[txq as usize].requeued.take() {
                self.to_driver(iface, txq, p);
                continue;
            }
            match self.device(iface).dequeue_txq(txq as usize, now) {
                Dequeued::Packet(p) => {
                    let p = self.own_part(p);
                    self.to_driver(iface, txq, p)
                }
                Dequeued::Empty => return,
                Dequeued::Throttled { until } => {
                    let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
                    if q.watchdog.is_none_or(|w| until < w || w < now) {
                        q.watchdog = Some(until);
                        self.events.at(until.max(now), Ev::Watchdog { iface, txq });
                    }
                    return;
                }
            }
        }
        let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
        if !q.net_tx {
            q.net_tx = true;
            self.events.at(now, Ev::NetTx { iface, txq });
        }
    }

    /// `ndo_start_xmit` + `netdev_tx_sent_queue`. lo and a veth pair hand the packet
    /// to the receive side (rx.rs); one the driver gives back waits in `requeued`.
    pub(crate) fn to_driver(&mut self, iface: u32, txq: u32, p: Packet) {
        if self.ifaces[iface as usize].local() {
            if let Err(p) = self.local_xmit(iface, txq, p) {
                let qd = self.qdisc_queue(iface, txq);
                self.ifaces[iface as usize].txqs[qd as usize].requeued = Some(p);
            }
            return;
        }
        let i = &mut self.ifaces[iface as usize];
        let q = &mut i.txqs[txq as usize];
        q.in_ring += 1;
        if i.rate.is_some() && q.dql.queued(p.len) {
            q.stopped = true;
        }
        i.ring.push_back((txq, p));
        if i.on_wire.is_none() {
            self.start_wire(iface);
        }
    }

    /// Put the next ring entry on the wire.
    fn start_wire(&mut self, iface: u32) {
        let now = self.now;
        let i = &mut self.ifaces[iface as usize];
        let Some((txq, p)) = i.ring.pop_front() else { return };
        let ns = match i.rate {
            Some(rate) => wire_ns(p.len as u64 + framing(i.veth) * p.gso_segs as u64, rate),
            None => 0,
        };
        i.on_wire = Some((txq, p, now));
        self.events.at(now + qdisc::Duration(ns), Ev::TxDone { iface });
    }

    /// The frame on the wire is out: its segments fly, the driver completes it.
    pub fn tx_done(&mut self, iface: u32) {
        let Some((txq, mut p, began)) = self.ifaces[iface as usize].on_wire.take() else { return };
        let i = &self.ifaces[iface as usize];
        let (out, rate, veth) = (i.out, i.rate, i.veth);
        self.emit_segments(out, rate, &p, began, veth);
        let h = self.ifaces[iface as usize].host;
        if self.has_cpus(h) {
            if !self.ifaces[iface as usize].ring.is_empty() {
                self.start_wire(iface);
            }
            let i = &mut self.ifaces[iface as usize];
            let us = i.tx_usecs.unwrap_or(0);
            let q = &mut i.txqs[txq as usize];
            q.completed.push_back(p);
            if !q.tx_poll {
                // The completion interrupt: now, or tx-usecs after the first completion.
                q.tx_poll = true;
                match us {
                    0 => self.tx_irq(iface, txq),
                    us => self.events.at(self.now + qdisc::Duration(us as u64 * 1000), Ev::TxIrq { iface, txq }),
                }
            }
            return;
        }
        // TX completion: BQL, then free the skb (TSQ credit back to its socket).
        self.tx_completed(iface, txq, 1, p.len);
        let owner = if p.orphan() { p.sk.as_ref().map(|s| s.id) } else { None };
        drop(p);
        if !self.ifaces[iface as usize].ring.is_empty() {
            self.start_wire(iface);
        }
        self.qdisc_run(iface, txq);
        if let Some(id) = owner {
            self.socket_released(id);
        }
    }

    /// The TX completion interrupt of queue `txq`, affine to CPU `txq` mod cpus: the
    /// driver's TX poll runs there.
    pub(crate) fn tx_irq(&mut self, iface: u32, txq: u32) {
        let h = self.ifaces[iface as usize].host;
        let cpus = self.cpus(h).cpus.len() as u32;
        self.give(h, txq % cpus, crate::cpu::Work::TxPoll { iface, txq }, true);
    }

    /// The driver gives back `n` ring slots holding `bytes` (`netdev_tx_completed_queue`):
    /// BQL learns them and a queue it stopped may go again. Whether the queue woke
    /// (from BQL, or from a full ring).
    pub(crate) fn tx_completed(&mut self, iface: u32, txq: u32, n: u32, bytes: u32) -> bool {
        let now = self.now;
        let (rate, size) = (self.ifaces[iface as usize].rate, self.ifaces[iface as usize].tx_ring_size);
        let q = &mut self.ifaces[iface as usize].txqs[txq as usize];
        let mut woke = q.in_ring >= size;
        q.in_ring -= n;
        if rate.is_some() {
            q.dql.completed(bytes, now);
            if q.stopped && q.dql.avail() >= 0 {
                q.stopped = false;
                woke = true;
            }
        }
        woke
    }

    /// Segment a (GSO) skb into wire frames and put them on link direction `out`.
    fn emit_segments(&mut self, out: u32, rate: Option<u64>, p: &Packet, began: Instant, veth: bool) {
        let d = &self.dirs[out as usize];
        let to = d.to;
        let last_hop = self.metas.get(p.id as usize).and_then(|m| m.as_ref()).map(|m| m.dst)
            == Some(self.ifaces[to as usize].host);
        // The 5-tuple stays where a classifier may read it: beyond this hop, or at an
        // ingress qdisc's filters on the receiving device.
        let keep_flow = !last_hop || self.device(to).ingress.is_some();
        let d = &self.dirs[out as usize];
        // A veth hands the GSO skb over whole. A NIC segments it (TSO), but at the
        // destination GRO merges the train again: deliver it as one skb when its last
        // byte is in (on a lossless hop to a NIC with GRO on; otherwise every segment
        // takes its chance, and GRO in rx.rs merges what arrives in a run).
        let gro = self.ifaces[d.to as usize].gro;
        if p.gso_segs > 1 && (veth || (last_hop && d.loss == 0.0 && gro)) {
            if d.loss > 0.0 && self.rng.next_f64() < d.loss {
                self.dirs[out as usize].lost += 1;
                self.take_meta(p.id);
                return;
            }
            let ns = rate.map_or(0, |r| wire_ns(p.len as u64 + framing(veth) * p.gso_segs as u64, r));
            let arrive = began + qdisc::Duration(ns + d.delay);
            self.fly(out, arrive, onward(p, p.id, p.len, p.gso_segs, keep_flow));
            return;
        }
        let frames: Vec<(u32, u64)> = if p.gso_segs <= 1 {
            vec![(p.len, p.id)]
        } else {
            // Only TCP builds GSO skbs: TSO cuts its payload into MSS-sized segments.
            let meta = self.metas[p.id as usize].clone().expect("a GSO skb has its meta");
            let Payload::Tcp { flow, seg } = &meta.payload else { unreachable!("GSO is TCP only") };
            let mss = self.tcp[*flow as usize].mss;
            let frames = seg
                .split(mss)
                .map(|s| {
                    let len = s.wire_len();
                    let m = Meta { payload: Payload::Tcp { flow: *flow, seg: s }, ..meta.clone() };
                    (len, self.new_meta(m))
                })
                .collect();
            self.take_meta(p.id);
            frames
        };
        let delay = self.dirs[out as usize].delay;
        let mut t = began;
        for (len, id) in frames {
            if let Some(rate) = rate {
                t = t + qdisc::Duration(wire_ns(len as u64 + framing(veth), rate));
            }
            let d = &self.dirs[out as usize];
            if d.loss > 0.0 && self.rng.next_f64() < d.loss {
                self.dirs[out as usize].lost += 1;
                self.take_meta(id);
                continue;
            }
            // Emitted at the end of the skb's serialisation: a segment that would be in
            // already (no propagation delay) arrives now, never in the past.
            let arrive = (t + qdisc::Duration(delay)).max(self.now);
            self.fly(out, arrive, onward(p, id, len, 1, keep_flow));
        }
    }
}

impl Sim {
    /// A frame on link direction `out`, arriving at `arrive` (frames of one direction
    /// arrive in order, so only the head has an event).
    fn fly(&mut self, out: u32, arrive: Instant, f: Packet) {
        let d = &mut self.dirs[out as usize];
        if d.frames.is_empty() {
            self.events.at(arrive, Ev::Arrive { dir: out });
        }
        d.frames.push_back((arrive, f));
    }
}

/// The skb the next hop builds for `p`'s bytes: `len` bytes in `segs` segments, the
/// same dsfield and flow hash, no socket; the 5-tuple only where a qdisc may classify
/// it again (`keep_flow`: not at the destination, which needs only the meta `id`).
pub fn onward(p: &Packet, id: u64, len: u32, segs: u16, keep_flow: bool) -> Packet {
    let mut f = Packet::new(id, len);
    f.gso_segs = segs;
    f.tos = p.tos;
    f.hash = p.hash;
    if keep_flow {
        f.set_flow(p.flow().copied());
    }
    f
}

/// Bytes a frame takes on the wire beyond its length: Ethernet framing on a NIC,
/// nothing on a shaped veth port (tbf and netem count the skb's length).
fn framing(veth: bool) -> u64 {
    if veth {
        0
    } else {
        ETH_WIRE_OVERHEAD as u64
    }
}

/// Nanoseconds to serialise `bytes` at `rate` bytes/s, rounded up.
pub fn wire_ns(bytes: u64, rate: u64) -> u64 {
    ((bytes as u128 * 1_000_000_000).div_ceil(rate as u128)) as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn serialisation_time() {
        // 1538 wire bytes at 1 Gbit/s (125 MB/s) = 12.304 µs.
        assert_eq!(super::wire_ns(1538, 125_000_000), 12_304);
        assert_eq!(super::wire_ns(1, 3), 333_333_334);
    }
}
