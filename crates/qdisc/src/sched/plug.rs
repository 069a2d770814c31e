//! plug — queue until an explicit release. Mirrors net/sched/sch_plug.c (kernel
//! side) and tc/q_plug.c (iproute2 side); §25 of docs/kernel-notes.md.
//!
//! Theory: a byte-limited FIFO that starts plugged. `tc qdisc change … plug block`
//! closes the current epoch (its packets become the "last epoch") and plugs;
//! `release` lets the packets of the last closed epoch go (and, once they are gone,
//! plugs again); `release_indefinite` opens the queue until the next `block`; `limit`
//! sets the byte limit. sch_plug has no dump op, so tc prints no options.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::tc::units::get_size;
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// tc sends options only when a word was given; `plug_init` without them takes
/// txqueuelen × psched_mtu bytes.
pub static OPS: Ops = Ops {
    id: "plug",
    parse: Parse::Qopt(|a| Ok(parse(a)?.map(Opts::new))),
    create: |c| Ok(Box::new(Plug::new(c.opts::<PlugOpt>()?, c.dev))),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// q_plug.c `explain`.
const USAGE: &str = "Usage: ... plug [block | release | release_indefinite | limit NUMBER]\n";

/// `tc_plug_qopt.action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// TCQ_PLUG_BUFFER (`block`).
    Buffer,
    /// TCQ_PLUG_RELEASE_ONE (`release`).
    ReleaseOne,
    /// TCQ_PLUG_RELEASE_INDEFINITE (`release_indefinite`).
    ReleaseIndefinite,
    /// TCQ_PLUG_LIMIT (`limit N`).
    Limit,
}

/// `struct tc_plug_qopt`: the last action word given, and the limit (0 unless
/// `limit` was given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlugOpt {
    pub action: Action,
    /// Bytes.
    pub limit: u32,
}

/// tc side: mirrors `plug_parse_opt` in tc/q_plug.c: each word sets the action (the
/// last wins); `None` when no word was given (tc sends no options).
pub fn parse(args: &mut Args) -> Result<Option<PlugOpt>, TcError> {
    let mut o: Option<PlugOpt> = None;
    while let Some(a) = args.next() {
        let limit = o.map_or(0, |o| o.limit);
        let action = match a {
            "block" => Action::Buffer,
            "release" => Action::ReleaseOne,
            "release_indefinite" => Action::ReleaseIndefinite,
            "limit" => {
                let v = args.value()?;
                let limit =
                    get_size(v).ok_or_else(|| TcError::tc(format!("Illegal value for \"limit\": \"{v}\"\n")))?;
                o = Some(PlugOpt { action: Action::Limit, limit });
                continue;
            }
            "help" => return Err(TcError::tc(USAGE)),
            w => return Err(TcError::tc(format!("plug: unknown parameter \"{w}\"\n{USAGE}"))),
        };
        o = Some(PlugOpt { action, limit });
    }
    Ok(o)
}

/// `struct plug_sched_data` plus the queue (`sch->q`).
pub struct Plug {
    queue: VecDeque<Packet>,
    /// Bytes.
    limit: u32,
    /// Released until the next `block`: a pass-through queue.
    unplug_indefinite: bool,
    /// Dequeue gives nothing until a release.
    throttled: bool,
    pkts_current_epoch: u32,
    pkts_last_epoch: u32,
    pkts_to_release: u32,
}

impl Plug {
    /// `plug_init`: plugged; the limit is the options' whatever their action,
    /// txqueuelen × psched_mtu without options.
    pub fn new(o: Option<&PlugOpt>, dev: &DevInfo) -> Plug {
        let limit = match o {
            Some(o) => o.limit,
            None => dev.tx_queue_len.wrapping_mul(dev.psched_mtu()),
        };
        Plug {
            queue: VecDeque::new(),
            limit,
            unplug_indefinite: false,
            throttled: true,
            pkts_current_epoch: 0,
            pkts_last_epoch: 0,
            pkts_to_release: 0,
        }
    }
}

impl Qdisc for Plug {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `plug_enqueue`: tail-queued while the backlog stays within the limit.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, _now: Instant) -> Enqueued {
        if sch.stats.backlog as u64 + pkt.len as u64 <= self.limit as u64 {
            if !self.unplug_indefinite {
                self.pkts_current_epoch += 1;
            }
            sch.stats.queued(pkt.len);
            self.queue.push_back(pkt);
            return Enqueued::Success;
        }
        sch.stats.dropped();
        Enqueued::Dropped
    }

    /// Mirrors `plug_dequeue`.
    fn dequeue(&mut self, sch: &mut Sch, _now: Instant) -> Dequeued {
        if self.throttled {
            return Dequeued::Empty;
        }
        if !self.unplug_indefinite {
            if self.pkts_to_release == 0 {
                // Wait for the next release.
                self.throttled = true;
                return Dequeued::Empty;
            }
            self.pkts_to_release -= 1;
        }
        let Some(p) = self.queue.pop_front() else { return Dequeued::Empty };
        sch.stats.unqueued(p.len);
        sch.stats.sent(&p);
        Dequeued::Packet(p)
    }

    /// `qdisc_peek_head`: the head packet, plugged or not.
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        self.queue.front()
    }

    /// sch_plug has no reset op; `qdisc_reset` zeroes qlen and backlog and the
    /// packets go with the queue here. The plug state stays.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.queue.clear();
    }

    /// Mirrors `plug_change`. A release makes the device run the queue
    /// (`netif_schedule_queue`).
    fn change(&mut self, sch: &mut Sch, opts: &Opts, _dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        let o: &PlugOpt = opts.of()?;
        match o.action {
            Action::Buffer => {
                self.pkts_last_epoch = self.pkts_current_epoch;
                self.pkts_current_epoch = 0;
                if self.unplug_indefinite {
                    self.throttled = true;
                }
                self.unplug_indefinite = false;
            }
            Action::ReleaseOne => {
                self.pkts_to_release = self.pkts_to_release.wrapping_add(self.pkts_last_epoch);
                self.pkts_last_epoch = 0;
                self.throttled = false;
                sch.schedule = true;
            }
            Action::ReleaseIndefinite => {
                self.unplug_indefinite = true;
                self.pkts_to_release = 0;
                self.pkts_last_epoch = 0;
                self.pkts_current_epoch = 0;
                self.throttled = false;
                sch.schedule = true;
            }
            Action::Limit => self.limit = o.limit,
        }
        Ok(())
    }

    /// No dump op: tc prints nothing (`"options":{}` in JSON).
    fn dump(&self, _out: &mut Out, _dev: &DevInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::testing::{argv, dev, held, t};

    fn p(s: &str) -> Result<Option<PlugOpt>, TcError> {
        parse(&mut Args::new(&argv(s)))
    }
    fn act(q: &mut Node<Plug>, s: &str) {
        q.change(&Opts::new(p(s).unwrap().unwrap()), &dev(), t(0)).unwrap();
    }
    fn drain(q: &mut Node<Plug>) -> Vec<u64> {
        std::iter::from_fn(|| q.dequeue(t(0)).packet().map(|p| p.id)).collect()
    }

    #[test]
    fn parser_matches_q_plug() {
        assert_eq!(p(""), Ok(None));
        assert_eq!(p("block"), Ok(Some(PlugOpt { action: Action::Buffer, limit: 0 })));
        assert_eq!(p("limit 10k release"), Ok(Some(PlugOpt { action: Action::ReleaseOne, limit: 10240 })));
        assert_eq!(p("limit x").unwrap_err().msg, "Illegal value for \"limit\": \"x\"\n");
        assert_eq!(p("foo").unwrap_err().msg, format!("plug: unknown parameter \"foo\"\n{USAGE}"));
        assert_eq!(Plug::new(None, &dev()).limit, 1000 * 1514);
        // Options at init set the limit whatever their action.
        assert_eq!(Plug::new(p("block").unwrap().as_ref(), &dev()).limit, 0);
    }

    #[test]
    fn epochs_release_in_order() {
        let mut q = held(Plug::new(None, &dev()));
        q.enqueue(Packet::new(1, 100), t(0));
        q.enqueue(Packet::new(2, 100), t(0));
        assert!(drain(&mut q).is_empty());
        act(&mut q, "block"); // epoch {1, 2} closed
        q.enqueue(Packet::new(3, 100), t(0));
        assert_eq!(q.peek(t(0)).map(|p| p.id), Some(1));
        assert!(!q.sch.schedule);
        act(&mut q, "release");
        // The release asks the device to run the queue (netif_schedule_queue).
        assert!(std::mem::take(&mut q.sch.schedule));
        assert_eq!(drain(&mut q), vec![1, 2]);
        assert!(q.throttled);
        act(&mut q, "release"); // nothing closed since: still plugged
        assert!(drain(&mut q).is_empty());
        act(&mut q, "release_indefinite");
        q.enqueue(Packet::new(4, 100), t(0));
        assert_eq!(drain(&mut q), vec![3, 4]);
        act(&mut q, "block");
        q.enqueue(Packet::new(5, 100), t(0));
        assert!(drain(&mut q).is_empty());
        assert_eq!((q.stats().packets, q.stats().qlen), (4, 1));
    }

    #[test]
    fn the_byte_limit_drops() {
        let mut q = held(Plug::new(p("limit 1000").unwrap().as_ref(), &dev()));
        for i in 0..4 {
            q.enqueue(Packet::new(i, 300), t(0));
        }
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops), (3, 900, 1));
        act(&mut q, "limit 100");
        assert_eq!(q.enqueue(Packet::new(9, 1), t(0)), Enqueued::Dropped);
    }
}
