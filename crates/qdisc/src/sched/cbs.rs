//! cbs — Credit-Based Shaper (IEEE 802.1Q-2014 §8.6.8.2, Annex L). Mirrors
//! net/sched/sch_cbs.c (Linux 6.12) in its software mode and tc/q_cbs.c (iproute2
//! 6.15); §30 of docs/kernel-notes.md.
//!
//! Theory: the queue holds a credit in bytes. While packets wait and none can go,
//! credit accrues at `idleslope` (kbit/s); sending a packet spends it at `sendslope`
//! (negative, idleslope − port rate) for the packet's time on the wire at the port's
//! rate — `len · sendslope / port_rate` bytes. A packet may start only with a credit
//! of zero or more; credit never exceeds `hicredit` nor falls below `locredit`, and
//! positive credit is forgotten when the queue runs empty. The result is a class
//! that gets `idleslope` of the port on average, in bursts bounded by the credits.
//! Packets wait in a child qdisc (a pfifo of txqueuelen packets by default).
//!
//! The port rate is the device's link speed as ethtool reports it (veth: 10 Gbit/s),
//! 10 Mbit/s for a device without one (a dummy), as `cbs_set_port_rate` falls back
//! to SPEED_10. `offload 1` needs a driver with `ndo_setup_tc`, which no device here
//! has: refused as the kernel refuses it on veth and dummy.

use crate::packet::Packet;
use crate::qdisc::{Child, Dequeued, DevInfo, Enqueued, Flags, Node, OneClass, Ops, Opts, Parse, Qdisc, Sch};
use crate::sched::fifo::pfifo_dflt;
use crate::tc::units::{get_integer, get_u32};
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

const NSEC_PER_SEC: i64 = 1_000_000_000;
/// BYTES_PER_KBIT.
const BYTES_PER_KBIT: i64 = 125;
/// SPEED_10: the port speed without a link speed, Mbit/s.
const SPEED_10: u32 = 10;

/// `struct tc_cbs_qopt` (TCA_CBS_PARMS): credits in bytes, slopes in kbit/s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbsOpt {
    pub offload: u8,
    pub hicredit: i32,
    pub locredit: i32,
    pub idleslope: i32,
    pub sendslope: i32,
}

pub struct Cbs {
    handle: u32,
    /// The class's qdisc.
    child: Node,
    offload: bool,
    /// Bytes/s.
    port_rate: i64,
    /// When the last packet's last byte leaves, ns.
    last: i64,
    /// Bytes.
    credits: i64,
    locredit: i32,
    hicredit: i32,
    /// Bytes/s.
    sendslope: i64,
    idleslope: i64,
}

/// `cbs_init` wants options; tc always sends TCA_CBS_PARMS.
pub static OPS: Ops = Ops {
    id: "cbs",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| {
        let o = c.opts::<CbsOpt>()?.ok_or_else(|| TcError::kernel("Missing CBS qdisc options  which are mandatory"))?;
        Ok(Box::new(Cbs::new(o, c.dev, c.handle)?))
    },
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// `div64_s64`: truncation toward zero, as C divides.
fn div(a: i64, b: i64) -> i64 {
    a.wrapping_div(b)
}

impl Cbs {
    /// `cbs_init`: the default pfifo child (visible, below the qdisc itself), then
    /// `cbs_change`.
    pub fn new(o: &CbsOpt, dev: &DevInfo, handle: u32) -> Result<Cbs, TcError> {
        let mut q = Cbs {
            handle,
            // qdisc_create_dflt(…, sch->handle): parent the qdisc itself, hashed visible.
            child: pfifo_dflt(handle, dev),
            offload: false,
            port_rate: 0,
            last: 0,
            credits: 0,
            locredit: 0,
            hicredit: 0,
            sendslope: 0,
            idleslope: 0,
        };
        q.apply(o, dev)?;
        Ok(q)
    }

    /// `cbs_change`: the port rate (software mode), then the parameters. Offload needs
    /// a driver that can do it.
    fn apply(&mut self, o: &CbsOpt, dev: &DevInfo) -> Result<(), TcError> {
        if o.offload != 0 {
            return Err(TcError::kernel("Specified device does not support cbs offload"));
        }
        // cbs_set_port_rate: speed × 1000 × BYTES_PER_KBIT.
        self.port_rate =
            dev.speed.filter(|&s| s != 0 && s != u32::MAX).unwrap_or(SPEED_10) as i64 * 1000 * BYTES_PER_KBIT;
        self.hicredit = o.hicredit;
        self.locredit = o.locredit;
        self.idleslope = o.idleslope as i64 * BYTES_PER_KBIT;
        self.sendslope = o.sendslope as i64 * BYTES_PER_KBIT;
        self.offload = false;
        Ok(())
    }

    /// The credit now (tests).
    pub fn credits(&self) -> i64 {
        self.credits
    }
}

impl Qdisc for Cbs {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// `cbs_enqueue_soft`: an empty queue forgets positive credit. The child's drops
    /// are its own: `cbs_child_enqueue` does not count them here.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        if sch.stats.qlen == 0 && self.credits > 0 {
            self.credits = 0;
            self.last = now.as_nanos() as i64;
        }
        let len = pkt.len;
        let r = self.child.enqueue(pkt, now);
        Child::collect(&mut self.child, sch);
        if r == Enqueued::Success {
            sch.stats.queued(len);
        }
        r
    }

    /// `cbs_dequeue_soft`.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        let now = now.as_nanos() as i64;
        // The previous packet is still on the wire.
        if now < self.last {
            return Dequeued::Throttled { until: Instant(self.last as u64) };
        }
        if self.credits < 0 {
            let gained = div(now.wrapping_sub(self.last).wrapping_mul(self.idleslope), NSEC_PER_SEC);
            self.credits = self.credits.wrapping_add(gained).min(self.hicredit as i64);
            if self.credits < 0 {
                // delay_from_credits: S64_MAX without an idle slope.
                let delay = if self.idleslope == 0 {
                    i64::MAX
                } else {
                    div(self.credits.wrapping_neg().wrapping_mul(NSEC_PER_SEC), self.idleslope)
                };
                self.last = now;
                return Dequeued::Throttled { until: Instant(now.saturating_add(delay) as u64) };
            }
        }
        let d = Child::dequeue(&mut self.child, Instant(now as u64), sch);
        let Dequeued::Packet(p) = d else { return d };
        let len = p.len as i64;
        let spent = if self.port_rate == 0 { i64::MAX } else { div(len.wrapping_mul(self.sendslope), self.port_rate) };
        self.credits = spent.wrapping_add(self.credits).max(self.locredit as i64);
        self.last = if self.port_rate == 0 { now } else { now + div(len * NSEC_PER_SEC, self.port_rate) };
        Dequeued::Packet(p)
    }

    /// `cbs_reset`.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.child.reset(now);
        self.credits = 0;
        self.last = 0;
    }

    fn change(&mut self, _sch: &mut Sch, opts: &Opts, dev: &DevInfo, _now: Instant) -> Result<(), TcError> {
        self.apply(opts.of()?, dev)
    }

    /// What `cbs_dump` sends, printed by q_cbs.c `cbs_print_opt`.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        let (hi, lo) = (self.hicredit, self.locredit);
        let send = (self.sendslope / BYTES_PER_KBIT) as i32;
        let idle = (self.idleslope / BYTES_PER_KBIT) as i32;
        out.int("hicredit", format_args!("hicredit {hi} "), hi as i64);
        out.int("locredit", format_args!("locredit {lo} "), lo as i64);
        out.int("sendslope", format_args!("sendslope {send} "), send as i64);
        out.int("idleslope", format_args!("idleslope {idle} "), idle as i64);
        let off = self.offload as i64;
        out.int("offload", format_args!("offload {off} "), off);
    }

    crate::classful!();
}

/// One class, `<handle>:1`, as tbf's, except that grafting nothing puts a new
/// default pfifo there (`cbs_graft`), which — unlike the init's — is not added to
/// the qdisc hash, so no dump lists it.
impl OneClass for Cbs {
    fn class_handle(&self) -> u32 {
        self.handle
    }
    fn one_child(&self) -> &Node {
        &self.child
    }
    fn one_child_mut(&mut self) -> &mut Node {
        &mut self.child
    }
    fn graft_default(&self, dev: &DevInfo) -> Node {
        pfifo_dflt(self.handle, dev).unhashed()
    }
}

// ---- tc side: q_cbs.c -----------------------------------------------------------------

const USAGE: &str = "Usage: ... cbs hicredit BYTES locredit BYTES sendslope BPS idleslope BPS
	   [offload 0|1]
";

/// `cbs_parse_opt`: abbreviations allowed; a second value for a field that is
/// already non-zero is a duplicate.
pub fn parse(a: &mut Args) -> Result<CbsOpt, TcError> {
    let mut o = CbsOpt::default();
    while let Some(w) = a.next() {
        let name = ["offload", "hicredit", "locredit", "sendslope", "idleslope"].into_iter().find(|k| matches(w, k));
        let Some(name) = name else {
            return Err(TcError::tc(if w == "help" {
                USAGE.to_string()
            } else {
                format!("cbs: unknown parameter \"{w}\"\n{USAGE}")
            }));
        };
        let v = a.value()?;
        let dup = || TcError::tc(format!("cbs: duplicate \"{name}\" specification\n"));
        let bad = || TcError::tc(format!("cbs: illegal value for \"{name}\": \"{v}\"\n"));
        if name == "offload" {
            if o.offload != 0 {
                return Err(dup());
            }
            o.offload = get_u32(v).and_then(|x| u8::try_from(x).ok()).ok_or_else(bad)?;
            continue;
        }
        let field = match name {
            "hicredit" => &mut o.hicredit,
            "locredit" => &mut o.locredit,
            "sendslope" => &mut o.sendslope,
            _ => &mut o.idleslope,
        };
        if *field != 0 {
            return Err(dup());
        }
        *field = get_integer(v).ok_or_else(bad)?;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Classful;
    use crate::testing::{argv, dev, held, t};

    fn p(s: &str) -> Result<CbsOpt, TcError> {
        let v = argv(s);
        parse(&mut Args::new(&v))
    }
    /// A 100 Mbit/s port (12.5 MB/s).
    fn cbs(s: &str) -> Node<Cbs> {
        let d = DevInfo { speed: Some(100), ..dev() };
        held(Cbs::new(&p(s).unwrap(), &d, 0x10000).unwrap())
    }

    #[test]
    fn tc_parses_abbreviations_and_refuses_duplicates() {
        let o = p("hi 1500 lo -1500 send -80000 idle 20000").unwrap();
        assert_eq!((o.hicredit, o.locredit, o.sendslope, o.idleslope, o.offload), (1500, -1500, -80000, 20000, 0));
        assert_eq!(p("hicredit 1 hicredit 2").unwrap_err(), TcError::tc("cbs: duplicate \"hicredit\" specification\n"));
        assert!(p("hicredit 0 hicredit 2").is_ok(), "only a non-zero value is a duplicate");
        assert_eq!(p("offload 256").unwrap_err(), TcError::tc("cbs: illegal value for \"offload\": \"256\"\n"));
        assert_eq!(p("idleslope").unwrap_err(), TcError::incomplete());
        assert!(p("foo 1").unwrap_err().msg.starts_with("cbs: unknown parameter \"foo\"\nUsage: ... cbs"));
    }

    /// idleslope 20 Mbit/s (2.5 MB/s) of a 100 Mbit/s port, sendslope −80 Mbit/s:
    /// a 1250-byte packet takes 100 µs on the wire and spends 1250 · (−10 MB/s) /
    /// (12.5 MB/s) = −1000 bytes of credit at once, which 2.5 MB/s earns back in
    /// 400 µs counted from the end of its transmission.
    #[test]
    fn credit_spent_by_sending_and_earned_while_waiting() {
        let mut q = cbs("hicredit 3000 locredit -5000 sendslope -80000 idleslope 20000");
        for i in 0..3 {
            q.enqueue(Packet::new(i, 1250), t(0));
        }
        assert!(q.dequeue(t(0)).packet().is_some());
        assert_eq!(q.q.credits(), -1000);
        // On the wire until 100 µs.
        assert_eq!(q.dequeue(t(50_000)), Dequeued::Throttled { until: t(100_000) });
        // At 100 µs nothing is earned yet: 400 µs to wait.
        assert_eq!(q.dequeue(t(100_000)), Dequeued::Throttled { until: t(500_000) });
        assert_eq!(q.q.credits(), -1000);
        // At 300 µs half of it: 500 bytes short, 200 µs more.
        assert_eq!(q.dequeue(t(300_000)), Dequeued::Throttled { until: t(500_000) });
        assert_eq!(q.q.credits(), -500);
        assert!(q.dequeue(t(500_000)).packet().is_some());
        assert_eq!(q.q.credits(), -1000);
        // Conservation: one packet left.
        assert_eq!((q.stats().qlen, q.stats().packets), (1, 2));
    }

    /// Credits are capped at hicredit and floored at locredit; positive credit is
    /// forgotten when the queue is empty at an arrival.
    #[test]
    fn credit_bounds() {
        let mut q = cbs("hicredit 100 locredit -500 sendslope -80000 idleslope 20000");
        q.enqueue(Packet::new(0, 1250), t(0));
        q.dequeue(t(0));
        assert_eq!(q.q.credits(), -500, "floored at locredit");
        q.enqueue(Packet::new(1, 100), t(0));
        // 10 ms later: 25000 bytes earned, capped at 100.
        assert!(q.dequeue(t(10_000_000)).packet().is_some());
        assert_eq!(q.q.credits(), 100 - 80);
        q.enqueue(Packet::new(2, 100), t(20_000_000));
        assert_eq!(q.q.credits(), 0, "positive credit forgotten on an empty queue");
    }

    #[test]
    fn port_rate_from_link_speed_or_10mbit_and_no_offload() {
        let q = Cbs::new(&p("idleslope 1").unwrap(), &dev(), 0x10000).unwrap();
        assert_eq!(q.port_rate, 1_250_000);
        let e = Cbs::new(&p("offload 1").unwrap(), &dev(), 0x10000).err().unwrap();
        assert_eq!(e.msg, "Error: Specified device does not support cbs offload.\n");
        // The default child below the qdisc itself; grafting nothing makes a new one.
        let mut q = held(q);
        assert_eq!((q.q.child.parent, q.q.child.kind()), (0x10000, "pfifo"));
        let old = q.q.graft(&mut Sch::default(), 1, None, &dev()).unwrap().unwrap();
        assert_eq!((old.kind(), q.q.leaf(1).unwrap().kind()), ("pfifo", "pfifo"));
    }
}
