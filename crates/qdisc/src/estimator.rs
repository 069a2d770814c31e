//! Rate estimators (`estimator INTERVAL TIME_CONSTANT`): the `rate …bit …pps` line of
//! `tc -s` for qdiscs, for the classes of htb, hfsc, drr and qfq, and for the actions
//! of a filter given one, and what police's `avrate` compares against.
//!
//! tc side: tc/m_estimator.c `parse_estimator` and tc/tc_estimator.c
//! `tc_setup_estimator` turn the two times into `struct tc_estimator` (an interval
//! index −2…3 and an EWMA weight 2^−ewma_log). Kernel side: net/core/gen_estimator.c
//! (`gen_new_estimator`, `gen_replace_estimator`, `est_timer`, `gen_estimator_read`),
//! unchanged in what it computes between 6.12 and 6.18.
//!
//! # Model
//!
//! * Every estimator is a timer of period `(HZ/4) << intvl_log` jiffies (with
//!   [`HZ`] = 250 that is 62 jiffies = 248 ms for `250ms`, 992 ms for `1sec`, not the
//!   nominal times: the kernel's integer division, kept). Its first expiry is that
//!   period after the jiffy it was created in; each expiry reads the byte and packet
//!   counters and folds `(Δ << (10 − intvl_log))` into two fixed-point EWMAs
//!   (×2^8) with weight 2^−ewma_log, exactly as `est_timer` does (wrapping u64).
//!   `gen_estimator_read` answers the EWMAs >> 8: bytes and packets per second.
//! * Jiffies are counted from the engine's time zero: jiffy `j` starts at
//!   `j × 4 ms` ([`Instant::jiffies`]). The real kernel's jiffies have an arbitrary
//!   phase against anything a user measures, so its estimates of the same traffic
//!   differ by where the ticks fall.
//! * The engine has no timers: counters change only inside calls that are given
//!   `now`, so the ticks are run lazily and exactly. Before a device's transmit,
//!   dequeue or receive call at `now`, and before any tc command, every tick at or
//!   before `now` runs with the counters as they stand (they were constant since the
//!   last call). A device keeps the earliest next tick of its estimators, so a call
//!   costs one comparison until a tick is due ([`crate::tree::Device`]). An action
//!   catches its own estimator up when it runs and when it is dumped (actions are
//!   shared between devices).
//! * Not modelled: the timer wheel's slack (an expiry 64 jiffies or more away may
//!   fire up to 1/8 of its distance late, and softirq latency delays any; the
//!   kernel's `next_jiffies` keeps the nominal grid, so only the sampled Δ moves) and
//!   the "timer was delayed" resynchronisation `est_timer` does when a whole period
//!   was missed. This is a model of the nominal tick instants.

use std::collections::BTreeMap;

use crate::tc::units::{fmt_rate, get_time};
use crate::tc::{duparg, invarg, matches, Args, Errno, Out, TcError};
use crate::time::{Instant, HZ};

/// One jiffy in nanoseconds.
const JIFFY_NS: u64 = 1_000_000_000 / HZ;

/// `struct tc_estimator`, the TCA_RATE attribute tc sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EstSpec {
    /// log2 of the period in seconds: −2 (250 ms) … 3 (8 s).
    pub interval: i8,
    /// The EWMA weight is 2^−ewma_log.
    pub ewma_log: u8,
}

/// m_estimator.c `est_help` (printed to stderr; tc carries on).
const EST_USAGE: &str = "Usage: ... estimator INTERVAL TIME-CONST
  INTERVAL is interval between measurements
  TIME-CONST is averaging time constant
Example: ... est 1sec 8sec
";

/// `parse_estimator`, the cursor on the `estimator` keyword's first value: a second
/// estimator of one command is `duparg`; `raw` (`tc -r`) echoes the result to
/// stderr as tc does.
pub fn parse(a: &mut Args, est: &mut Option<EstSpec>, raw: bool) -> Result<(), TcError> {
    let v = a.value()?;
    if est.is_some() {
        return Err(duparg("estimator", v));
    }
    if matches(v, "help") {
        a.notes.push_str(EST_USAGE);
    }
    let interval = get_time(v).ok_or_else(|| invarg("estimator", "invalid estimator interval"))?;
    let v = a.value()?;
    if matches(v, "help") {
        a.notes.push_str(EST_USAGE);
    }
    let time_const = get_time(v).ok_or_else(|| invarg("estimator", "invalid estimator time constant"))?;
    // The command returns -1: exit status 255, but a batch goes on to "Command failed".
    let s =
        setup(interval, time_const).ok_or_else(|| TcError::usage("Error: estimator parameters are out of range.\n"))?;
    if raw {
        a.notes.push_str(&format!("[estimator i={} e={}]\n", s.interval, s.ewma_log));
    }
    *est = Some(s);
    Ok(())
}

/// `tc_setup_estimator`: the shortest period (250 ms × 2^i, i ≤ 5) not shorter than
/// the interval `a` (µs), then the last ewma_log whose time constant
/// `a / −ln(1 − 2^−ewma_log)` does not exceed `time_const`. tc's `1 << ewma_log` is
/// an int: at 31 it turns negative, which ends the search there (kept).
pub fn setup(a: u32, time_const: u32) -> Option<EstSpec> {
    let interval = (0..=5).find(|i| a <= (1u32 << i) * 250_000)?;
    let mut ewma_log = 1u32;
    while ewma_log < 32 {
        let w = 1.0 - 1.0 / (1i32.wrapping_shl(ewma_log) as f64);
        if a as f64 / -w.ln() > time_const as f64 {
            break;
        }
        ewma_log += 1;
    }
    ewma_log -= 1;
    if ewma_log == 0 || ewma_log >= 31 {
        return None;
    }
    Some(EstSpec { interval: interval as i8 - 2, ewma_log: ewma_log as u8 })
}

/// `struct net_rate_estimator`: one estimator's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Estimator {
    ewma_log: u8,
    /// The period is `(HZ/4) << intvl_log` jiffies.
    intvl_log: u8,
    last_bytes: u64,
    last_packets: u64,
    /// Bytes and packets per second, × 2^8.
    avbps: u64,
    avpps: u64,
    next_jiffies: u64,
}

impl Estimator {
    /// `gen_new_estimator` at `now` on counters standing at `bytes`/`packets`; `old`
    /// is the estimator it replaces (`gen_replace_estimator`), whose averages carry
    /// over. The kernel's range checks (tc never sends anything outside them).
    pub fn new(
        spec: EstSpec,
        bytes: u64,
        packets: u64,
        now: Instant,
        old: Option<&Estimator>,
    ) -> Result<Self, TcError> {
        if !(-2..=3).contains(&spec.interval) || spec.ewma_log == 0 || spec.ewma_log >= 31 {
            return Err(TcError::errno(Errno::EINVAL));
        }
        let intvl_log = (spec.interval + 2) as u8;
        Ok(Estimator {
            ewma_log: spec.ewma_log,
            intvl_log,
            last_bytes: bytes,
            last_packets: packets,
            avbps: old.map_or(0, |o| o.avbps),
            avpps: old.map_or(0, |o| o.avpps),
            next_jiffies: now.jiffies() + ((HZ / 4) << intvl_log),
        })
    }

    /// When the next tick runs.
    pub fn next_tick(&self) -> Instant {
        Instant::from_nanos(self.next_jiffies.saturating_mul(JIFFY_NS))
    }

    /// Run every tick at or before `now`, the counters standing at `bytes`/`packets`
    /// for all of them (nothing counted since the last call).
    #[inline]
    pub fn catch_up(&mut self, now: Instant, bytes: u64, packets: u64) {
        if now >= self.next_tick() {
            self.run(now, bytes, packets);
        }
    }

    #[cold]
    fn run(&mut self, now: Instant, bytes: u64, packets: u64) {
        let period = (HZ / 4) << self.intvl_log;
        let due = now.jiffies();
        while self.next_jiffies <= due {
            self.tick(bytes, packets);
            // The counters no longer move; once both averages are below 2^ewma_log
            // the remaining ticks change nothing but the clock.
            if self.next_jiffies <= due && self.avbps >> self.ewma_log == 0 && self.avpps >> self.ewma_log == 0 {
                self.next_jiffies += ((due - self.next_jiffies) / period + 1) * period;
            }
        }
    }

    /// `est_timer`: one expiry.
    fn tick(&mut self, bytes: u64, packets: u64) {
        let shift = 10 - self.intvl_log as u32;
        let e = self.ewma_log as u32;
        let brate = bytes.wrapping_sub(self.last_bytes) << shift;
        let brate = (brate >> e).wrapping_sub(self.avbps >> e);
        let rate = packets.wrapping_sub(self.last_packets) << shift;
        let rate = (rate >> e).wrapping_sub(self.avpps >> e);
        self.avbps = self.avbps.wrapping_add(brate);
        self.avpps = self.avpps.wrapping_add(rate);
        self.last_bytes = bytes;
        self.last_packets = packets;
        self.next_jiffies += (HZ / 4) << self.intvl_log;
    }

    /// `gen_estimator_read`: bytes and packets per second.
    pub fn read(&self) -> (u64, u64) {
        (self.avbps >> 8, self.avpps >> 8)
    }
}

/// The estimators of one qdisc: its own (`sch->rate_est`) and its classes'
/// (`cl->rate_est`, by minor), for the kinds whose class change takes TCA_RATE
/// ([`crate::qdisc::Classful::class_takes_estimator`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QdiscEst {
    pub own: Option<Estimator>,
    pub classes: BTreeMap<u32, Estimator>,
}

/// `print_tcstats2_attr`'s rate line: `\n` + prefix + `rate …bit …pps` (a bare
/// newline, as tc writes it, even with `-oneline`). Above 2^32 − 1 bytes/s the
/// kernel adds TCA_STATS_RATE_EST64, which tc prints instead; below, the 32-bit
/// attribute's pps.
pub fn print(out: &mut Out, prefix: &str, rate: (u64, u64)) {
    let (bps, pps) = rate;
    let pps = if bps > u32::MAX as u64 { pps } else { pps as u32 as u64 };
    out.fp(format_args!("\n{prefix}"));
    out.uint("rate", format_args!("rate {}", fmt_rate(bps, out.iec())), bps);
    out.uint("pps", format_args!(" {pps}pps"), pps);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    /// tc_setup_estimator's choices, worked by hand: `1sec 8sec` is interval 0 and
    /// the last weight with 1 s / −ln(1 − 2^−k) ≤ 8 s: k = 3 (7.49 s; k = 4 gives 15.5 s).
    #[test]
    fn setup_picks_interval_and_weight() {
        assert_eq!(setup(1_000_000, 8_000_000), Some(EstSpec { interval: 0, ewma_log: 3 }));
        assert_eq!(setup(250_000, 1_000_000), Some(EstSpec { interval: -2, ewma_log: 2 }));
        // 300 ms rounds up to the 500 ms period; the weight still uses 300 ms.
        assert_eq!(setup(300_000, 2_000_000), Some(EstSpec { interval: -1, ewma_log: 2 }));
        assert_eq!(setup(8_000_000, 64_000_000), Some(EstSpec { interval: 3, ewma_log: 3 }));
        // Over 8 s, or a time constant shorter than the interval: out of range.
        assert_eq!(setup(8_000_001, 64_000_000), None);
        assert_eq!(setup(1_000_000, 1_000_000), None);
        // 2 µs against 4000 s would want ewma_log 30 (2 × 2^31 > 4e9): tc's int
        // shift turns negative at 31 and the search runs off the end.
        assert_eq!(setup(2, 4_000_000_000), None);
        assert_eq!(setup(2, 2_000_000_000), Some(EstSpec { interval: -2, ewma_log: 29 }));
    }

    #[test]
    fn parse_words_and_errors() {
        let run = |s: &str, raw: bool| {
            let argv: Vec<String> = s.split(' ').map(String::from).collect();
            let mut a = Args::new(&argv);
            let mut est = None;
            let r = parse(&mut a, &mut est, raw);
            (r.map(|_| est.unwrap()), a.notes)
        };
        assert_eq!(run("1sec 8sec", true), (Ok(EstSpec { interval: 0, ewma_log: 3 }), "[estimator i=0 e=3]\n".into()));
        let (r, _) = run("1x 8sec", false);
        assert_eq!(r.unwrap_err().msg, "Error: argument \"invalid estimator interval\" is wrong: estimator\n");
        let (r, notes) = run("1sec help", false);
        assert_eq!(r.unwrap_err().msg, "Error: argument \"invalid estimator time constant\" is wrong: estimator\n");
        assert_eq!(notes, EST_USAGE);
        let (r, _) = run("9sec 80sec", false);
        assert_eq!(r.unwrap_err(), TcError::usage("Error: estimator parameters are out of range.\n"));
        let argv: Vec<String> = ["1sec"].iter().map(|s| s.to_string()).collect();
        let mut est = None;
        assert_eq!(parse(&mut Args::new(&argv), &mut est, false).unwrap_err(), TcError::incomplete());
        let mut est = Some(EstSpec { interval: 0, ewma_log: 3 });
        let argv: Vec<String> = ["2sec", "8sec"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse(&mut Args::new(&argv), &mut est, false).unwrap_err().msg,
            "Error: duplicate \"estimator\": \"2sec\" is the second value.\n"
        );
    }

    #[test]
    fn kernel_ranges() {
        for (interval, ewma_log) in [(-3, 3), (4, 3), (0, 0), (0, 31)] {
            let r = Estimator::new(EstSpec { interval, ewma_log }, 0, 0, ms(0), None);
            assert_eq!(r.unwrap_err(), TcError::errno(Errno::EINVAL));
        }
    }

    /// `250ms 1sec` (interval −2, ewma_log 2): ticks every 62 jiffies = 248 ms from
    /// the creation jiffy. 10,000 bytes and 10 packets per tick, worked by hand:
    /// Δ << 10 = 10,240,000 (bytes/s × 2^8 as if 250 ms); avbps += (that >> 2) −
    /// (avbps >> 2): 2,560,000, then 4,480,000, …; read >> 8: 10,000 then 17,500.
    #[test]
    fn ewma_by_hand() {
        let spec = EstSpec { interval: -2, ewma_log: 2 };
        // Created at 10 ms: jiffy 2, first tick at jiffy 64 = 256 ms.
        let mut e = Estimator::new(spec, 500, 5, ms(10), None).unwrap();
        assert_eq!(e.next_tick(), ms(256));
        e.catch_up(ms(255), 10_500, 15);
        assert_eq!(e.read(), (0, 0));
        e.catch_up(ms(256), 10_500, 15);
        assert_eq!(e.read(), (10_000, 10));
        assert_eq!((e.avbps, e.avpps), (2_560_000, 2_560));
        assert_eq!(e.next_tick(), ms(504));
        e.catch_up(ms(504), 20_500, 25);
        assert_eq!((e.avbps, e.avpps), (4_480_000, 4_480));
        assert_eq!(e.read(), (17_500, 17));
        // Idle: the ticks at 752 and 1000 ms in one catch-up, Δ = 0: −1/4 each.
        e.catch_up(ms(1000), 20_500, 25);
        assert_eq!((e.avbps, e.avpps), (2_520_000, 2_520));
        assert_eq!(e.next_tick(), ms(1248));
        e.catch_up(ms(1247), 20_500, 25);
        assert_eq!((e.avbps, e.avpps), (2_520_000, 2_520));
        e.catch_up(ms(1248), 20_500, 25);
        assert_eq!((e.avbps, e.avpps), (1_890_000, 1_890));
    }

    /// A long idle stretch: the skip lands on the same state as ticking one by one.
    #[test]
    fn idle_skip_is_exact() {
        let spec = EstSpec { interval: 0, ewma_log: 3 };
        let mut a = Estimator::new(spec, 0, 0, ms(0), None).unwrap();
        a.catch_up(ms(992), 1_000_000, 1000);
        let mut b = a.clone();
        a.catch_up(ms(3_600_000), 1_000_000, 1000);
        let mut t = 992 * 2;
        while t <= 3_600_000 {
            b.catch_up(ms(t), 1_000_000, 1000);
            t += 992;
        }
        assert_eq!(a, b);
        assert_eq!(a.read(), (0, 0));
        // The averages left below 2^ewma_log (never read as more than 0).
        assert!(a.avbps < 8 && a.avpps < 8);
    }

    /// A replacement keeps the averages, restarts the counters and the period.
    #[test]
    fn replace_keeps_averages() {
        let mut old = Estimator::new(EstSpec { interval: -2, ewma_log: 1 }, 0, 0, ms(0), None).unwrap();
        old.catch_up(ms(248), 1000, 1);
        let new = Estimator::new(EstSpec { interval: 1, ewma_log: 4 }, 5000, 7, ms(300), Some(&old)).unwrap();
        assert_eq!((new.avbps, new.avpps), (old.avbps, old.avpps));
        assert_eq!((new.last_bytes, new.last_packets), (5000, 7));
        // Jiffy 75 + (62 << 3) = 571 → 2284 ms.
        assert_eq!(new.next_tick(), ms(2284));
    }
}
