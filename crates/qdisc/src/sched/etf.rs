//! etf — Earliest TxTime First. Mirrors net/sched/sch_etf.c (kernel side) and
//! tc/q_etf.c (iproute2 side); §etf of docs/kernel-notes.md.
//!
//! Theory: every packet carries its transmit time (`skb->tstamp`, set by a socket
//! with SO_TXTIME). etf keeps packets sorted by it (equal times in arrival order)
//! and releases the earliest one no sooner than `delta` ns before its time; in
//! `deadline_mode` the head goes as soon as asked, its time becoming now. A packet
//! is refused at enqueue when its time is already past or before the last one sent,
//! and — unless `skip_sock_check` — when it does not come from a full socket with
//! SO_TXTIME on the qdisc's clock and deadline mode; a head whose time passes in the
//! queue is dropped at dequeue with every other packet due by then (counted as drops
//! and overlimits). The watchdog is set for the head's time minus delta. Only
//! CLOCK_TAI is accepted; hardware offload needs `ndo_setup_tc`, which no engine
//! device has. No change op.
//!
//! Differences from the kernel, all deliberate:
//! * **Clock**: the `now` passed in is CLOCK_TAI, the clock of `Packet::tstamp`.
//! * **Sockets**: the engine's sockets never set SO_TXTIME, so without
//!   `skip_sock_check` every packet is refused (as the kernel refuses one from such a
//!   socket); the socket error report (`report_sock_error`) has no one to go to.

use std::collections::BTreeMap;

use crate::packet::Packet;
use crate::qdisc::{Dequeued, DevInfo, Enqueued, Flags, Ops, Opts, Parse, Qdisc, Sch};
use crate::tc::units::parse_c_integer;
use crate::tc::{matches, Errno, Out, TcError};
use crate::time::Instant;

/// TC_ETF_DEADLINE_MODE_ON, TC_ETF_OFFLOAD_ON, TC_ETF_SKIP_SOCK_CHECK.
const DEADLINE_MODE_ON: u32 = 1 << 0;
const OFFLOAD_ON: u32 = 1 << 1;
const SKIP_SOCK_CHECK: u32 = 1 << 2;
/// CLOCKID_INVALID (tc's "not given").
const CLOCKID_INVALID: i32 = -1;
/// CLOCK_TAI.
const CLOCK_TAI: i32 = 11;
/// tc/tc_util.c `clockt_map`, in its order.
const CLOCKS: &[(&str, i32)] = &[("BOOTTIME", 7), ("MONOTONIC", 1), ("REALTIME", 0), ("TAI", CLOCK_TAI)];

/// tc always sends TCA_ETF_PARMS.
pub static OPS: Ops = Ops {
    id: "etf",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Etf::new(c.opts::<EtfOpt>()?)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// `struct tc_etf_qopt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtfOpt {
    /// ns.
    pub delta: i32,
    pub clockid: i32,
    pub flags: u32,
}

/// q_etf.c `explain`.
const USAGE: &str = "Usage: ... etf delta NANOS clockid CLOCKID [offload] [deadline_mode]\nCLOCKID must be a valid SYS-V id (i.e. CLOCK_TAI)\n";

/// tc/tc_util.c `get_clockid`: a name of the table, any case, after a `CLOCK_`
/// prefix — skipped wherever `strcasestr` finds it, as six bytes from the start.
pub(crate) fn get_clockid(arg: &str) -> Option<i32> {
    let arg = if arg.to_ascii_lowercase().contains("clock_") { arg.get(6..).unwrap_or("") } else { arg };
    CLOCKS.iter().find(|(n, _)| n.eq_ignore_ascii_case(arg)).map(|&(_, id)| id)
}

/// tc/tc_util.c `get_clock_name`.
pub(crate) fn clock_name(id: i32) -> &'static str {
    CLOCKS.iter().find(|&&(_, c)| c == id).map_or("invalid", |&(n, _)| n)
}

/// tc side: q_etf.c `etf_parse_opt`.
pub fn parse(args: &mut crate::tc::Args) -> Result<EtfOpt, TcError> {
    let mut o = EtfOpt { delta: 0, clockid: CLOCKID_INVALID, flags: 0 };
    let dup = |w: &str| TcError::tc(format!("etf: duplicate \"{w}\" specification\n"));
    let flag = |o: &mut EtfOpt, bit: u32, w: &str| {
        if o.flags & bit != 0 {
            return Err(dup(w));
        }
        o.flags |= bit;
        Ok(())
    };
    while let Some(a) = args.next() {
        if matches(a, "offload") {
            flag(&mut o, OFFLOAD_ON, "offload")?;
        } else if matches(a, "deadline_mode") {
            flag(&mut o, DEADLINE_MODE_ON, "deadline_mode")?;
        } else if matches(a, "delta") {
            let v = args.value()?;
            if o.delta != 0 {
                return Err(dup("delta"));
            }
            o.delta = parse_c_integer(v)
                .and_then(|x| i32::try_from(x).ok())
                .ok_or_else(|| TcError::tc(format!("etf: illegal value for \"delta\": \"{v}\"\n")))?;
        } else if matches(a, "clockid") {
            let v = args.value()?;
            if o.clockid != CLOCKID_INVALID {
                return Err(dup("clockid"));
            }
            o.clockid = get_clockid(v).ok_or_else(|| {
                TcError::tc(format!(
                    "etf: illegal value for \"clockid\": \"{v}\".\nIt must be a valid SYS-V id (i.e. CLOCK_TAI)\n"
                ))
            })?;
        } else if a == "skip_sock_check" {
            flag(&mut o, SKIP_SOCK_CHECK, "skip_sock_check")?;
        } else if a == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("etf: unknown parameter \"{a}\"\n{USAGE}")));
        }
    }
    Ok(o)
}

/// `struct etf_sched_data`.
pub struct Etf {
    o: EtfOpt,
    /// The txtime of the last packet sent.
    last: Instant,
    /// `q->head`: by (txtime, arrival).
    q: BTreeMap<(Instant, u64), Packet>,
    seq: u64,
    /// The armed watchdog: the head's txtime minus delta.
    watchdog: Option<Instant>,
}

impl Etf {
    /// Mirrors `etf_init` and `validate_input_params`.
    pub fn new(o: Option<&EtfOpt>) -> Result<Etf, TcError> {
        let o = o.ok_or_else(|| TcError::kernel("Missing ETF qdisc options which are mandatory"))?;
        if o.clockid < 0 {
            // ENOTSUPP (524) with its message.
            return Err(TcError::kernel("Dynamic clockids are not supported"));
        }
        if o.clockid != CLOCK_TAI {
            return Err(TcError::kernel("Invalid clockid. CLOCK_TAI must be used"));
        }
        if o.delta < 0 {
            return Err(TcError::kernel("Delta must be positive"));
        }
        if o.flags & OFFLOAD_ON != 0 {
            return Err(TcError::with_errno("Specified device does not support ETF offload", Errno::EOPNOTSUPP));
        }
        Ok(Etf { o: o.clone(), last: Instant::ZERO, q: BTreeMap::new(), seq: 0, watchdog: None })
    }

    fn delta(&self) -> u64 {
        self.o.delta as u64
    }

    /// `reset_watchdog`: the head's txtime minus delta, or none.
    fn reset_watchdog(&mut self) {
        self.watchdog = self.q.keys().next().map(|&(t, _)| Instant(t.0.saturating_sub(self.delta())));
    }

    /// `is_packet_valid`.
    fn valid(&self, pkt: &Packet, now: Instant) -> bool {
        // No engine socket has SO_TXTIME (theory above).
        if self.o.flags & SKIP_SOCK_CHECK == 0 {
            return false;
        }
        !(pkt.tstamp < now || pkt.tstamp < self.last)
    }
}

impl Qdisc for Etf {
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `etf_enqueue_timesortedlist`.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        if !self.valid(&pkt, now) {
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        sch.stats.queued(pkt.len);
        self.seq += 1;
        self.q.insert((pkt.tstamp, self.seq), pkt);
        self.reset_watchdog();
        Enqueued::Success
    }

    /// Mirrors `etf_dequeue_timesortedlist` (and `timesortedlist_drop`,
    /// `timesortedlist_remove`).
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let Some(&(t, seq)) = self.q.keys().next() else { return Dequeued::Empty };
        let out = if t < now {
            // Expired in the queue: it and everything due by now are dropped — counted
            // here only: `timesortedlist_drop` tells no parent.
            while let Some(e) = self.q.first_entry().filter(|e| e.key().0 <= now) {
                let p = e.remove();
                sch.stats.unqueued(p.len);
                sch.stats.dropped();
                sch.stats.overlimit();
                p.kfree_skb();
            }
            None
        } else if self.o.flags & DEADLINE_MODE_ON != 0 || now.0 > t.0.saturating_sub(self.delta()) {
            let mut p = self.q.remove(&(t, seq)).expect("head");
            sch.stats.unqueued(p.len);
            sch.stats.sent(&p);
            self.last = p.tstamp;
            if self.o.flags & DEADLINE_MODE_ON != 0 {
                p.tstamp = now;
            }
            Some(p)
        } else {
            None
        };
        self.reset_watchdog();
        match (out, self.watchdog) {
            (Some(p), _) => Dequeued::Packet(p),
            (None, Some(until)) => Dequeued::Throttled { until: until.max(now) },
            (None, None) => Dequeued::Empty,
        }
    }

    /// `etf_peek_timesortedlist`: the earliest packet, due or not.
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        self.q.values().next()
    }

    /// Mirrors `etf_reset`.
    fn reset(&mut self, _sch: &mut Sch, _now: Instant) {
        self.q.clear();
        self.watchdog = None;
        self.last = Instant::ZERO;
    }

    /// What `etf_dump` sends, printed as q_etf.c `etf_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let on = |bit: u32| if self.o.flags & bit != 0 { "on" } else { "off" };
        let name = clock_name(self.o.clockid);
        out.string("clockid", format_args!("clockid {name} "), name);
        out.uint("delta", format_args!("delta {} ", self.o.delta), self.o.delta as u32 as u64);
        out.string("offload", format_args!("offload {} ", on(OFFLOAD_ON)), on(OFFLOAD_ON));
        out.string("deadline_mode", format_args!("deadline_mode {} ", on(DEADLINE_MODE_ON)), on(DEADLINE_MODE_ON));
        out.string("skip_sock_check", format_args!("skip_sock_check {}", on(SKIP_SOCK_CHECK)), on(SKIP_SOCK_CHECK));
    }

    fn watchdog(&self, _sch: &Sch) -> Option<Instant> {
        self.watchdog
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Node;
    use crate::tc::Args;
    use crate::testing::{argv, held, t};

    fn p(s: &str) -> Result<EtfOpt, TcError> {
        parse(&mut Args::new(&argv(s)))
    }

    fn etf(s: &str) -> Node<Etf> {
        held(Etf::new(Some(&p(s).unwrap())).unwrap())
    }

    fn at(id: u64, len: u32, txtime: u64) -> Packet {
        let mut p = Packet::new(id, len);
        p.tstamp = t(txtime);
        p
    }

    #[test]
    fn parser_and_kernel_checks() {
        assert_eq!(
            p("clock CLOCK_tai delta 0x10 dead skip_sock_check").unwrap(),
            EtfOpt { delta: 16, clockid: 11, flags: 5 }
        );
        assert_eq!(p("").unwrap().clockid, CLOCKID_INVALID);
        assert_eq!(get_clockid("xxclock_TAI"), None, "the prefix is cut six bytes from the start");
        assert_eq!(get_clockid("monotonic"), Some(1));
        assert_eq!(p("delta 1 delta 2").unwrap_err().msg, "etf: duplicate \"delta\" specification\n");
        assert_eq!(p("delta 4294967296").unwrap_err().msg, "etf: illegal value for \"delta\": \"4294967296\"\n");
        let e = |s: &str| Etf::new(Some(&p(s).unwrap())).err().unwrap().msg;
        assert_eq!(e("delta 5"), "Error: Dynamic clockids are not supported.\n");
        assert_eq!(e("clockid REALTIME"), "Error: Invalid clockid. CLOCK_TAI must be used.\n");
        assert_eq!(e("clockid TAI delta -1"), "Error: Delta must be positive.\n");
        assert_eq!(e("clockid TAI offload"), "Error: Specified device does not support ETF offload.\n");
    }

    #[test]
    fn without_skip_sock_check_every_packet_is_refused() {
        let mut q = etf("clockid TAI delta 100");
        assert_eq!(q.enqueue(at(1, 100, 5_000), t(1_000)), Enqueued::Dropped);
        assert_eq!((q.stats().drops, q.stats().qlen), (1, 0));
    }

    #[test]
    fn txtime_order_delta_window_and_late_drops() {
        let mut q = etf("clockid TAI delta 100 skip_sock_check");
        // In the past: refused.
        assert_eq!(q.enqueue(at(1, 100, 999), t(1_000)), Enqueued::Dropped);
        assert_eq!(q.enqueue(at(2, 100, 3_000), t(1_000)), Enqueued::Success);
        assert_eq!(q.enqueue(at(3, 100, 2_000), t(1_000)), Enqueued::Success);
        assert_eq!(q.enqueue(at(4, 100, 2_000), t(1_000)), Enqueued::Success);
        // The head (2000, first of the two) may leave after 1900.
        assert_eq!(q.watchdog(), Some(t(1_900)));
        assert_eq!(q.peek(t(1_000)).unwrap().id, 3);
        assert_eq!(q.dequeue(t(1_900)), Dequeued::Throttled { until: t(1_900) });
        assert_eq!(q.dequeue(t(1_901)).packet().unwrap().id, 3);
        assert_eq!(q.dequeue(t(1_950)).packet().unwrap().id, 4);
        // Before the last one sent: refused.
        assert_eq!(q.enqueue(at(5, 100, 1_990), t(1_950)), Enqueued::Dropped);
        // 2 expires in the queue along with 6 (due by then); 7 stays.
        q.enqueue(at(6, 100, 3_000), t(1_960));
        q.enqueue(at(7, 100, 4_000), t(1_960));
        assert_eq!(q.dequeue(t(3_001)), Dequeued::Throttled { until: t(3_900) });
        let s = q.stats();
        assert_eq!((s.qlen, s.backlog, s.drops, s.overlimits, s.packets), (1, 100, 4, 2, 2));
    }

    #[test]
    fn deadline_mode_sends_at_once_stamped_now() {
        let mut q = etf("clockid TAI delta 0 deadline_mode skip_sock_check");
        q.enqueue(at(1, 100, 9_000), t(1_000));
        let p = q.dequeue(t(1_500)).packet().unwrap();
        assert_eq!((p.id, p.tstamp), (1, t(1_500)));
        // The last txtime is the deadline, not the new stamp.
        assert_eq!(q.enqueue(at(2, 100, 8_000), t(1_600)), Enqueued::Dropped);
        q.reset(t(2_000));
        assert_eq!(q.enqueue(at(3, 100, 8_000), t(2_000)), Enqueued::Success);
    }

    #[test]
    fn dump_is_tcs_print() {
        let q = etf("clockid TAI delta 300000");
        let mut o = Out::text();
        q.dump(&mut o, &DevInfo::eth0());
        assert_eq!(o.into_string(), "clockid TAI delta 300000 offload off deadline_mode off skip_sock_check off");
    }
}
