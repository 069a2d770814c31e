//! taprio — Time Aware Priority scheduler (IEEE 802.1Qbv gate control lists) in
//! software mode. Mirrors net/sched/sch_taprio.c (kernel side) and tc/q_taprio.c
//! (iproute2 side); §taprio of docs/kernel-notes.md.
//!
//! Theory: like mqprio, taprio groups the device's tx queues into traffic classes
//! (`num_tc`, `map`, `queues`, parsed and checked by mqprio's code) and gives every
//! tx queue a pfifo child (class `<major>:<txq+1>`). Unlike mq it attaches itself
//! to every tx queue: all packets pass through its enqueue and dequeue. A schedule
//! is a cyclic list of entries, each opening the gates of a set of traffic classes
//! (`gatemask`) for `interval` ns; the cycle starts at `base-time` (the first
//! `base-time + k·cycle-time` after now when that is past) and lasts `cycle-time`
//! (default: the sum of the intervals). An hrtimer (`advance_sched`) moves the
//! current entry at each entry's end; dequeue serves the open traffic classes,
//! highest first, round robin over each class's queues, and only a packet that can
//! finish before its class's gate closes (the guard band, at the link speed) and
//! within the entry's byte budget. Until the first entry starts every gate is open.
//! A new schedule (`tc qdisc replace`) waits as the admin schedule and becomes the
//! oper one at its base-time; `cycle-time-extension` lets the last cycle of the old
//! one stretch to meet it. `max-sdu` (and gates too short for a frame) drop
//! oversized packets at enqueue (GSO ones are segmented first).
//!
//! `flags 0x1` (txtime-assist): no gate checks at dequeue; at enqueue each packet
//! gets the transmit time (`skb->tstamp`) at which its gate is open and it fits,
//! for an etf child to hold it; txtime-delay is added to now. Full offload
//! (`flags 0x2`) and frame preemption (`fp P`) need a driver; no engine device has
//! one, so they are refused as the kernel refuses them.
//!
//! Differences from the kernel, all deliberate:
//! * **Clock**: the `now` passed in is the clock `clockid` names (the engine has one
//!   clock); the hrtimer fires when the qdisc is next driven (enqueue, dequeue,
//!   change) at or after its expiry, each expiry in turn, and [`Qdisc::watchdog`]
//!   names the next one while packets wait.
//! * **Sockets**: the engine's sockets never set SO_TXTIME, so the per-packet
//!   `is_valid_interval` check never applies.
//! * **Broken-mqprio drivers**: none here; dequeue always prioritises by traffic
//!   class (`taprio_dequeue_tc_priority`).
//! * **Link speed**: from the device's `speed` (ethtool), SPEED_10 without one; the
//!   kernel's later update on link changes (`taprio_dev_notifier`) has nothing to
//!   notice here.

use crate::packet::Packet;
use crate::qdisc::{Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT};
use crate::sched::etf::{clock_name, get_clockid};
use crate::sched::mq::Mq;
use crate::sched::mqprio::{parse_qopt_word, validate_qopt, MqprioOpt, MAX_QUEUE};
use crate::tc::units::{get_s64_base10, get_u32, get_u32_base16};
use crate::tc::{Args, Out, TcError};
use crate::time::Instant;

/// TCA_TAPRIO_ATTR_FLAG_TXTIME_ASSIST, _FULL_OFFLOAD; TAPRIO_FLAGS_INVALID.
const TXTIME_ASSIST: u32 = 1 << 0;
const FULL_OFFLOAD: u32 = 1 << 1;
const SUPPORTED_FLAGS: u32 = TXTIME_ASSIST | FULL_OFFLOAD;
const FLAGS_INVALID: u32 = u32::MAX;
/// TAPRIO_ALL_GATES_OPEN: the gate mask before the schedule starts.
const ALL_GATES_OPEN: u32 = u32::MAX;
/// TC_FP_EXPRESS, TC_FP_PREEMPTIBLE.
const FP_EXPRESS: u32 = 1;
const FP_PREEMPTIBLE: u32 = 2;
/// TC_TAPRIO_CMD_SET_GATES, _SET_AND_HOLD, _SET_AND_RELEASE, as tc names them.
const CMDS: [&str; 3] = ["S", "H", "R"];
/// ETH_ZLEN: the shortest frame an interval must carry.
const ETH_ZLEN: i64 = 60;
const PSEC_PER_NSEC: i64 = 1000;
/// SPEED_10: what `taprio_set_picos_per_byte` assumes without ethtool's answer.
const SPEED_10: u32 = 10;
/// SPEED_UNKNOWN.
const SPEED_UNKNOWN: u32 = u32::MAX;
/// CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME, CLOCK_TAI: the static clocks.
const CLOCKS: [i32; 4] = [0, 1, 7, 11];
/// INT_MAX: the largest cycle-time (policy and the summed intervals).
const INT_MAX: i64 = i32::MAX as i64;
/// The extack taprio_change leaves on success: no `stab` can be given here.
const NO_STAB: &str = "sch_taprio: Size table not specified, frame length estimations may be inaccurate";

/// tc always sends TCA_OPTIONS (at least the empty entry list).
pub static OPS: Ops = Ops {
    id: "taprio",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Taprio::new(c.opts::<TaprioOpt>()?, c.dev, c.handle, c.parent, c.now)?)),
    parse_class: None,
    flags: Flags::NONE,
    since: None,
};

/// One `sched-entry CMD GATEMASK INTERVAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryOpt {
    pub cmd: u8,
    pub gate_mask: u32,
    pub interval: u32,
}

/// What tc sends: each attribute only when q_taprio.c adds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaprioOpt {
    /// TCA_TAPRIO_ATTR_PRIOMAP (sent when num_tc > 0).
    pub priomap: Option<MqprioOpt>,
    pub clockid: Option<i32>,
    /// Sent when non-zero.
    pub flags: Option<u32>,
    pub txtime_delay: Option<u32>,
    /// ns; 0 is not sent (the kernel's default is 0 too).
    pub base_time: i64,
    pub cycle_time: i64,
    pub cycle_time_extension: i64,
    /// TCA_TAPRIO_ATTR_TC_ENTRY: traffic class `i` gets `max_sdu[i]` and `fp[i]`
    /// where given; `None` when neither `max-sdu` nor `fp` was on the line.
    pub tc_entries: Option<(Vec<u32>, Vec<u32>)>,
    pub entries: Vec<EntryOpt>,
}

/// q_taprio.c `explain`.
const USAGE: &str = "Usage: ... taprio clockid CLOCKID\n\t\t[num_tc NUMBER] [map P0 P1 ...]\n\t\t[queues COUNT@OFFSET COUNT@OFFSET COUNT@OFFSET ...]\n\t\t[ [sched-entry index cmd gate-mask interval] ... ]\n\t\t[base-time time] [txtime-delay delay]\n\t\t[fp FP0 FP1 FP2 ...]\n\nCLOCKID must be a valid SYS-V id (i.e. CLOCK_TAI)\n";
/// q_taprio.c `explain_sched_entry`.
const ENTRY_USAGE: &str = "Usage: ... taprio ... sched-entry <cmd> <gate mask> <interval>\n";

/// Values of a list keyword (`fp`, `max-sdu`) while they parse, at most 16.
fn read_values(args: &mut Args, f: impl Fn(&str) -> Option<u32>) -> Vec<u32> {
    let mut v = Vec::new();
    while v.len() < MAX_QUEUE {
        let Some(x) = args.peek().and_then(&f) else { break };
        args.next();
        v.push(x);
    }
    v
}

/// tc side: q_taprio.c `taprio_parse_opt`.
pub fn parse(args: &mut Args) -> Result<TaprioOpt, TcError> {
    let mut o = TaprioOpt::default();
    let mut q = MqprioOpt::default();
    let (mut max_sdu, mut fp) = (Vec::new(), Vec::new());
    let mut have_tc_entries = false;
    let dup = |w: &str| TcError::tc(format!("taprio: duplicate \"{w}\" specification\n"));
    while let Some(a) = args.next() {
        if parse_qopt_word(a, args, &mut q)?.is_some() {
            continue;
        }
        match a {
            "fp" => {
                let v = read_values(args, |w| match w {
                    "E" => Some(FP_EXPRESS),
                    "P" => Some(FP_PREEMPTIBLE),
                    _ => None,
                });
                // Each `fp` list writes from traffic class 0 again.
                fp.resize(fp.len().max(v.len()), 0);
                fp[..v.len()].copy_from_slice(&v);
                have_tc_entries = true;
            }
            "max-sdu" => {
                let v = read_values(args, crate::tc::units::get_unsigned10);
                max_sdu.resize(max_sdu.len().max(v.len()), 0);
                max_sdu[..v.len()].copy_from_slice(&v);
                have_tc_entries = true;
            }
            "sched-entry" => {
                let cmd = args.value()?;
                let cmd = CMDS.iter().position(|c| *c == cmd).ok_or_else(|| TcError::tc(ENTRY_USAGE))? as u8;
                let gate_mask = get_u32_base16(args.value()?).ok_or_else(|| TcError::tc(ENTRY_USAGE))?;
                let interval = get_u32(args.value()?).ok_or_else(|| TcError::tc(ENTRY_USAGE))?;
                o.entries.push(EntryOpt { cmd, gate_mask, interval });
            }
            // A value that does not parse ends the options there (tc's `break`).
            "base-time" => match get_s64_base10(args.value()?) {
                Some(v) => o.base_time = v,
                None => break,
            },
            "cycle-time" | "cycle-time-extension" => {
                let v = args.value()?;
                let slot = if a == "cycle-time" { &mut o.cycle_time } else { &mut o.cycle_time_extension };
                if *slot != 0 {
                    return Err(dup(a));
                }
                match get_s64_base10(v) {
                    Some(v) => *slot = v,
                    None => break,
                }
            }
            "clockid" => {
                let v = args.value()?;
                if o.clockid.is_some() {
                    return Err(dup("clockid"));
                }
                o.clockid = Some(get_clockid(v).ok_or_else(|| {
                    TcError::tc(format!(
                        "taprio: illegal value for \"clockid\": \"{v}\".\nIt must be a valid SYS-V id (i.e. CLOCK_TAI)\n"
                    ))
                })?);
            }
            "flags" | "txtime-delay" => {
                let v = args.value()?;
                let slot = if a == "flags" { &mut o.flags } else { &mut o.txtime_delay };
                if slot.is_some() {
                    return Err(dup(a));
                }
                // tc fails silently on a bad value.
                *slot = Some(get_u32(v).ok_or_else(|| TcError::tc(""))?).filter(|&v| v != 0);
            }
            "help" => return Err(TcError::tc(USAGE)),
            _ => return Err(TcError::tc("Unknown argument\n")),
        }
    }
    // What follows a `break` is not looked at.
    while args.next().is_some() {}
    o.priomap = (q.num_tc > 0).then_some(q);
    o.tc_entries = have_tc_entries.then_some((max_sdu, fp));
    Ok(o)
}

/// `struct sched_entry`.
#[derive(Clone, Debug, Default)]
struct Entry {
    command: u8,
    gate_mask: u32,
    interval: u32,
    /// ns from this entry's start until each class's gate closes.
    gate_duration: [u64; MAX_QUEUE],
    /// Bytes each class may still send in this entry (i32, as the kernel's atomic_t).
    budget: [i32; MAX_QUEUE],
    /// No packet of a class may end after this (the guard band).
    gate_close_time: [i64; MAX_QUEUE],
    end_time: i64,
    /// txtime-assist: the next free transmit time in this entry.
    next_txtime: i64,
}

/// `struct sched_gate_list`: one schedule, oper or admin.
#[derive(Clone, Debug, Default)]
struct GateList {
    entries: Vec<Entry>,
    max_open_gate_duration: [u64; MAX_QUEUE],
    max_frm_len: [u32; MAX_QUEUE],
    max_sdu: [u32; MAX_QUEUE],
    cycle_end_time: i64,
    cycle_time: i64,
    cycle_time_extension: i64,
    base_time: i64,
}

impl GateList {
    /// `get_cycle_time_elapsed`: `div_s64_rem` leaves the dividend's sign.
    fn elapsed(&self, time: i64) -> i64 {
        time.wrapping_sub(self.base_time) % self.cycle_time
    }
}

/// Which schedule a txtime computation works on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Oper,
    Admin,
}

/// `struct taprio_sched`, plus the device's traffic classes it set (the kernel
/// keeps those in `struct net_device`).
pub struct Taprio {
    txqs: Mq,
    /// The device's traffic classes (none until the first change sets them).
    tcs: MqprioOpt,
    flags: u32,
    clockid: i32,
    picos_per_byte: i64,
    oper: Option<GateList>,
    admin: Option<GateList>,
    /// `current_entry`: an index into the oper schedule's entries.
    current: Option<usize>,
    /// The armed hrtimer's expiry.
    timer: Option<i64>,
    /// `hrtimer_get_expires`: the last expiry programmed (0: never).
    expires: i64,
    cur_txq: [u32; MAX_QUEUE],
    max_sdu: [u32; MAX_QUEUE],
    fp: [u32; MAX_QUEUE],
    txtime_delay: u32,
    hard_header_len: u32,
    max_mtu: u32,
    num_tx_queues: u32,
    warning: Option<&'static str>,
}

impl Taprio {
    /// Mirrors `taprio_init`: root of a multiqueue device only; a pfifo per tx queue;
    /// then `taprio_change`.
    pub fn new(o: Option<&TaprioOpt>, dev: &DevInfo, handle: u32, parent: u32, now: Instant) -> Result<Self, TcError> {
        if parent != TC_H_ROOT {
            return Err(TcError::kernel("sch_taprio: Can only be attached as root qdisc"));
        }
        if dev.num_tx_queues <= 1 {
            return Err(TcError::kernel("sch_taprio: Multi-queue device is required"));
        }
        let o = o.ok_or_else(TcError::invalid)?;
        let mut q = Taprio {
            txqs: Mq::new(dev, handle, parent, "pfifo", now)?,
            tcs: MqprioOpt::default(),
            flags: FLAGS_INVALID,
            clockid: -1,
            picos_per_byte: 0,
            oper: None,
            admin: None,
            current: None,
            timer: None,
            expires: 0,
            cur_txq: [0; MAX_QUEUE],
            max_sdu: [0; MAX_QUEUE],
            fp: [FP_EXPRESS; MAX_QUEUE],
            txtime_delay: 0,
            hard_header_len: dev.hard_header_len,
            max_mtu: dev.max_mtu,
            num_tx_queues: dev.num_tx_queues,
            warning: None,
        };
        q.apply(o, dev, now)?;
        Ok(q)
    }

    fn txtime_assist(&self) -> bool {
        self.flags & TXTIME_ASSIST != 0
    }

    /// `length_to_duration`: ns to send `len` bytes at the link speed.
    fn length_to_duration(&self, len: i64) -> i64 {
        len * self.picos_per_byte / PSEC_PER_NSEC
    }

    /// Mirrors `taprio_change`, in its order; what the kernel keeps from a request
    /// that fails later (flags, max-sdu, fp) is kept here too.
    fn apply(&mut self, o: &TaprioOpt, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        // The attribute policy, in the order tc puts the attributes.
        let flags = o.flags.unwrap_or(0);
        if flags & !SUPPORTED_FLAGS != 0 {
            return Err(TcError::kernel("reserved bit set"));
        }
        if o.cycle_time != 0 && !(0..=INT_MAX).contains(&o.cycle_time) {
            return Err(TcError::kernel("integer out of range"));
        }
        if flags & TXTIME_ASSIST != 0 && flags & FULL_OFFLOAD != 0 {
            return Err(TcError::kernel("TXTIME_ASSIST and FULL_OFFLOAD are mutually exclusive"));
        }
        if self.flags != FLAGS_INVALID && self.flags != flags {
            return Err(TcError::kernel("sch_taprio: Changing 'flags' of a running schedule is not supported"));
        }
        self.flags = flags;
        // taprio_set_picos_per_byte: ethtool's speed, else SPEED_10.
        let speed = dev.speed.filter(|&s| s != 0 && s != SPEED_UNKNOWN).unwrap_or(SPEED_10);
        self.picos_per_byte = 8_000_000 / speed as i64;
        // taprio_parse_mqprio_opt
        match &o.priomap {
            None if self.tcs.num_tc == 0 => return Err(TcError::kernel("'mqprio' configuration is necessary")),
            None => {}
            Some(m) => {
                if m.num_tc as u32 > dev.num_tx_queues {
                    return Err(TcError::kernel("Number of traffic classes is greater than number of HW queues"));
                }
                validate_qopt(dev, m, true, self.txtime_assist())?;
            }
        }
        self.parse_tc_entries(o)?;
        // taprio_mqprio_cmp: the same traffic classes are no change.
        let mqprio = o.priomap.as_ref().filter(|m| {
            let (n, t) = (m.num_tc as usize, &self.tcs);
            m.num_tc != t.num_tc
                || m.count[..n] != t.count[..n]
                || m.offset[..n] != t.offset[..n]
                || m.prio_tc_map != t.prio_tc_map
        });
        if mqprio.is_some() && (self.oper.is_some() || self.admin.is_some()) {
            return Err(TcError::kernel("Changing the traffic mapping of a running schedule is not supported"));
        }
        if let Some(m) = mqprio {
            self.tcs = m.clone();
            for i in 0..m.num_tc as usize {
                self.cur_txq[i] = m.offset[i] as u32;
            }
        }
        let mut new = self.parse_schedule(o)?;
        if new.entries.is_empty() {
            return Err(TcError::kernel("There should be at least one entry in the schedule"));
        }
        self.parse_clockid(o)?;
        self.update_queue_max_sdu(&mut new);
        if let Some(d) = o.txtime_delay {
            if !self.txtime_assist() {
                return Err(TcError::kernel(
                    "sch_taprio: txtime-delay can only be set when txtime-assist mode is enabled",
                ));
            }
            self.txtime_delay = d;
        }
        let start = Self::start_time(&new, now.as_nanos() as i64);
        // setup_txtime
        let mut at = start;
        for e in &mut new.entries {
            e.next_txtime = at;
            at = at.wrapping_add(e.interval as i64);
        }
        if self.txtime_assist() {
            if self.oper.is_none() {
                self.oper = Some(new);
                return Ok(());
            }
            self.admin = Some(new);
        } else {
            self.setup_first_end_time(&mut new, start);
            // taprio_start_sched: the earlier of the new start and the armed expiry.
            let expires = if self.expires == 0 { i64::MAX } else { self.expires };
            self.arm(start.min(expires));
            self.admin = Some(new);
        }
        self.warning = Some(NO_STAB);
        Ok(())
    }

    /// `taprio_parse_tc_entries`: max-sdu within the device's max MTU, fp express
    /// only (preemption needs full offload and a MAC merge layer).
    fn parse_tc_entries(&mut self, o: &TaprioOpt) -> Result<(), TcError> {
        let (mut max_sdu, mut fp) = (self.max_sdu, self.fp);
        if let Some((sdu, fps)) = &o.tc_entries {
            for tc in 0..sdu.len().max(fps.len()) {
                if let Some(&v) = sdu.get(tc) {
                    if v > self.max_mtu {
                        return Err(TcError::kernel("sch_taprio: TC max SDU exceeds device max MTU"));
                    }
                    max_sdu[tc] = v;
                }
                if let Some(&v) = fps.get(tc) {
                    fp[tc] = v;
                }
            }
        }
        (self.max_sdu, self.fp) = (max_sdu, fp);
        if fp.iter().any(|&f| f != FP_EXPRESS) {
            return Err(TcError::kernel(if self.flags & FULL_OFFLOAD == 0 {
                "Preemption only supported with full offload"
            } else {
                "Device does not support preemption"
            }));
        }
        Ok(())
    }

    /// `parse_taprio_schedule` and `taprio_calculate_gate_durations`.
    fn parse_schedule(&self, o: &TaprioOpt) -> Result<GateList, TcError> {
        let min_duration = self.length_to_duration(ETH_ZLEN);
        let mut s = GateList {
            base_time: o.base_time,
            cycle_time: o.cycle_time,
            cycle_time_extension: o.cycle_time_extension,
            ..GateList::default()
        };
        for e in &o.entries {
            // fill_sched_entry: an interval must carry the shortest frame.
            if (e.interval as i64) < min_duration {
                return Err(TcError::kernel("Invalid interval for schedule entry"));
            }
            s.entries.push(Entry { command: e.cmd, gate_mask: e.gate_mask, interval: e.interval, ..Entry::default() });
        }
        if s.cycle_time == 0 {
            let cycle: i64 = s.entries.iter().map(|e| e.interval as i64).sum();
            if !(0..=INT_MAX).contains(&cycle) {
                return Err(TcError::kernel("'cycle_time' is too big"));
            }
            s.cycle_time = cycle;
        }
        if s.cycle_time < s.entries.len() as i64 * min_duration {
            return Err(TcError::kernel("'cycle_time' is too small"));
        }
        let n = s.entries.len();
        for i in 0..n {
            let mut open = s.entries[i].gate_mask;
            let mut dur = [0u64; MAX_QUEUE];
            let mut cur = i;
            loop {
                if open == 0 {
                    break;
                }
                for (tc, d) in dur.iter_mut().enumerate().take(self.tcs.num_tc as usize) {
                    if open & (1 << tc) == 0 {
                        continue;
                    }
                    if s.entries[cur].gate_mask & (1 << tc) != 0 {
                        *d += s.entries[cur].interval as u64;
                    } else {
                        open &= !(1 << tc);
                    }
                }
                cur = (cur + 1) % n;
                if cur == i {
                    break;
                }
            }
            s.entries[i].gate_duration = dur;
            // A class closed for now is not one that never opens.
            for (max, &d) in s.max_open_gate_duration.iter_mut().zip(&dur).take(self.tcs.num_tc as usize) {
                if d != 0 && *max < d {
                    *max = d;
                }
            }
        }
        Ok(s)
    }

    /// `taprio_parse_clockid` outside full offload (with it there is no PTP clock
    /// here to fall back on).
    fn parse_clockid(&mut self, o: &TaprioOpt) -> Result<(), TcError> {
        if self.flags & FULL_OFFLOAD != 0 {
            return Err(match o.clockid {
                Some(_) => TcError::kernel("The 'clockid' cannot be specified for full offload"),
                None => TcError::kernel("Device does not have a PTP clock"),
            });
        }
        let Some(c) = o.clockid else {
            return Err(TcError::kernel("Specifying a 'clockid' is mandatory"));
        };
        if c < 0 || (self.clockid != -1 && self.clockid != c) {
            return Err(TcError::kernel("Changing the 'clockid' of a running schedule is not supported"));
        }
        if !CLOCKS.contains(&c) {
            return Err(TcError::kernel("Invalid 'clockid'"));
        }
        self.clockid = c;
        Ok(())
    }

    /// `taprio_update_queue_max_sdu`: the smaller of the user's max-sdu and what the
    /// longest open gate of the class can carry at the link speed.
    fn update_queue_max_sdu(&self, s: &mut GateList) {
        for tc in 0..self.tcs.num_tc as usize {
            let from_user = if self.max_sdu[tc] != 0 { self.max_sdu[tc] } else { u32::MAX };
            let dynamic = if s.max_open_gate_duration[tc] == s.cycle_time as u64 {
                u32::MAX
            } else {
                // duration_to_length, as an int
                let frm = (s.max_open_gate_duration[tc] as i64 * PSEC_PER_NSEC / self.picos_per_byte) as u32;
                let d = frm.wrapping_sub(self.hard_header_len);
                if d > self.max_mtu {
                    u32::MAX
                } else {
                    d
                }
            };
            let sdu = dynamic.min(from_user);
            (s.max_frm_len[tc], s.max_sdu[tc]) =
                if sdu != u32::MAX { (sdu + self.hard_header_len, sdu) } else { (u32::MAX, 0) };
        }
    }

    /// `taprio_get_start_time`: base-time, or the next cycle start after now.
    fn start_time(s: &GateList, now: i64) -> i64 {
        if s.base_time > now {
            return s.base_time;
        }
        let n = (now - s.base_time) / s.cycle_time;
        s.base_time.wrapping_add((n + 1).wrapping_mul(s.cycle_time))
    }

    /// `setup_first_end_time`: the first entry's end, budgets and gate closings; no
    /// current entry until the timer fires.
    fn setup_first_end_time(&mut self, s: &mut GateList, base: i64) {
        s.cycle_end_time = base.wrapping_add(s.cycle_time);
        s.entries[0].end_time = base.wrapping_add(s.entries[0].interval as i64);
        self.set_budgets(s, 0);
        let cycle = s.cycle_time as u64;
        let first = &mut s.entries[0];
        for tc in 0..self.tcs.num_tc as usize {
            first.gate_close_time[tc] = if first.gate_duration[tc] == cycle {
                i64::MAX
            } else {
                base.wrapping_add(first.gate_duration[tc] as i64)
            };
        }
        self.current = None;
    }

    /// `taprio_set_budgets`: bytes each class can send while its gate stays open.
    fn set_budgets(&self, s: &mut GateList, i: usize) {
        let cycle = s.cycle_time as u64;
        let e = &mut s.entries[i];
        for tc in 0..self.tcs.num_tc as usize {
            e.budget[tc] = if e.gate_duration[tc] == cycle {
                i32::MAX
            } else {
                (e.gate_duration[tc] as i64 * PSEC_PER_NSEC / self.picos_per_byte) as i32
            };
        }
    }

    /// `hrtimer_start` / `hrtimer_set_expires`.
    fn arm(&mut self, at: i64) {
        self.timer = Some(at);
        self.expires = at;
    }

    /// The hrtimer's expiries up to `now`, each in turn.
    fn run_timer(&mut self, now: Instant) {
        let now = now.as_nanos() as i64;
        while self.timer.is_some_and(|t| t <= now) {
            self.advance_sched();
        }
    }

    /// `switch_schedules`: admin becomes oper.
    fn switch_schedules(&mut self) {
        self.oper = self.admin.take();
    }

    /// Mirrors `advance_sched`: the next entry (or the admin schedule's first), its
    /// end, gate closings and budgets; the timer re-armed at its end.
    fn advance_sched(&mut self) {
        if self.oper.is_none() {
            self.switch_schedules();
        }
        let oper = self.oper.as_ref().expect("a schedule is set before the timer is armed");
        let end_time = match self.current {
            Some(cur) if oper.entries[cur].end_time != oper.base_time => {
                let restart = cur + 1 == oper.entries.len() || oper.entries[cur].end_time == oper.cycle_end_time;
                let oper = self.oper.as_mut().expect("checked");
                let next = if restart {
                    oper.cycle_end_time = oper.cycle_end_time.wrapping_add(oper.cycle_time);
                    0
                } else {
                    cur + 1
                };
                let prev_end = oper.entries[cur].end_time;
                let mut end = prev_end.wrapping_add(oper.entries[next].interval as i64).min(oper.cycle_end_time);
                let cycle = oper.cycle_time as u64;
                let e = &mut oper.entries[next];
                for tc in 0..self.tcs.num_tc as usize {
                    e.gate_close_time[tc] = if e.gate_duration[tc] == cycle {
                        i64::MAX
                    } else {
                        prev_end.wrapping_add(e.gate_duration[tc] as i64)
                    };
                }
                let mut next = next;
                if self.should_change_schedules(end) {
                    self.switch_schedules();
                    next = 0;
                    end = self.oper.as_ref().expect("switched").entries[0].end_time;
                }
                let mut oper = self.oper.take().expect("set");
                oper.entries[next].end_time = end;
                self.set_budgets(&mut oper, next);
                self.oper = Some(oper);
                self.current = Some(next);
                end
            }
            // The first run, or the previous schedule just ended: the first entry's
            // end was set up with the schedule.
            _ => {
                self.current = Some(0);
                oper.entries[0].end_time
            }
        };
        self.arm(end_time);
    }

    /// `should_change_schedules`: the admin schedule starts by the end of the next
    /// entry, or within the oper schedule's cycle-time-extension after it.
    fn should_change_schedules(&self, end_time: i64) -> bool {
        let (Some(admin), Some(oper)) = (&self.admin, &self.oper) else { return false };
        admin.base_time <= end_time || admin.base_time <= end_time.wrapping_add(oper.cycle_time_extension)
    }

    /// `taprio_update_budgets`: a packet sent uses every class's budget; the sender's
    /// remaining one.
    fn update_budgets(&mut self, i: usize, len: i32, tc_consumed: usize) -> i32 {
        let num_tc = self.tcs.num_tc as usize;
        let e = &mut self.oper.as_mut().expect("an entry is current").entries[i];
        let mut left = 0;
        for tc in 0..num_tc {
            if e.budget[tc] == i32::MAX {
                if tc == tc_consumed {
                    left = i32::MAX;
                }
                continue;
            }
            e.budget[tc] = e.budget[tc].wrapping_sub(len);
            if tc == tc_consumed {
                left = e.budget[tc];
            }
        }
        left
    }

    /// Mirrors `taprio_dequeue_from_txq`: the head of tx queue `txq` if its class's
    /// gate is open, it ends before the gate closes and the budget allows it.
    fn dequeue_from_txq(
        &mut self,
        sch: &mut Sch,
        txq: usize,
        gate_mask: u32,
        now: Instant,
        idle: &mut Dequeued,
    ) -> Option<Packet> {
        if !self.txtime_assist() {
            let (prio, len) = {
                let head = self.txqs.txq(txq).peek(now)?;
                (head.priority, head.len)
            };
            let tc = self.tcs.tc_of(prio);
            if gate_mask & (1 << tc) == 0 {
                return None;
            }
            if gate_mask != ALL_GATES_OPEN {
                let cur = self.current.expect("gates other than all-open come from an entry");
                let guard = (now.as_nanos() as i64).wrapping_add(self.length_to_duration(len as i64));
                let close = self.oper.as_ref().expect("current entry").entries[cur].gate_close_time[tc];
                if guard >= close {
                    return None;
                }
                if self.update_budgets(cur, len as i32, tc) < 0 {
                    return None;
                }
            }
        }
        let child = self.txqs.txq(txq);
        let d = child.dequeue(now);
        let _ = child.take_reduce();
        match d {
            Dequeued::Packet(p) => {
                sch.stats.sent(&p);
                sch.stats.unqueued(p.len);
                Some(p)
            }
            other => {
                *idle = Dequeued::earliest(std::mem::replace(idle, Dequeued::Empty), other);
                None
            }
        }
    }

    /// `taprio_dequeue_tc_priority`: open classes highest first, round robin over
    /// each class's tx queues.
    fn dequeue_tc_priority(
        &mut self,
        sch: &mut Sch,
        gate_mask: u32,
        now: Instant,
        idle: &mut Dequeued,
    ) -> Option<Packet> {
        for tc in (0..self.tcs.num_tc as usize).rev() {
            if gate_mask & (1 << tc) == 0 {
                continue;
            }
            let first = self.cur_txq[tc];
            loop {
                let p = self.dequeue_from_txq(sch, self.cur_txq[tc] as usize, gate_mask, now, idle);
                // taprio_next_tc_txq
                let (off, cnt) = (self.tcs.offset[tc] as u32, self.tcs.count[tc] as u32);
                self.cur_txq[tc] += 1;
                if self.cur_txq[tc] == off + cnt {
                    self.cur_txq[tc] = off;
                }
                if self.cur_txq[tc] >= self.num_tx_queues {
                    self.cur_txq[tc] = first;
                }
                if p.is_some() {
                    return p;
                }
                if self.cur_txq[tc] == first {
                    break;
                }
            }
        }
        None
    }

    /// `taprio_skb_exceeds_queue_max_sdu`.
    fn exceeds_max_sdu(&self, pkt: &Packet) -> bool {
        let tc = self.tcs.tc_of(pkt.priority);
        self.oper.as_ref().is_some_and(|s| pkt.len > s.max_frm_len[tc])
    }

    /// `taprio_enqueue_one`: txtime-assist stamps the packet (0: no interval fits,
    /// dropped); taprio counts it before its child sees it, as the kernel does.
    fn enqueue_one(&mut self, sch: &mut Sch, txq: usize, mut pkt: Packet, now: Instant) -> Enqueued {
        if self.txtime_assist() {
            let t = self.packet_txtime(&pkt, now);
            if t == 0 {
                sch.stats.dropped();
                return Enqueued::Dropped;
            }
            pkt.tstamp = Instant::from_nanos(t.max(0) as u64);
        }
        sch.stats.queued(pkt.len);
        let child = self.txqs.txq(txq);
        let r = child.enqueue(pkt, now);
        let _ = child.take_reduce();
        r
    }

    /// Mirrors `find_entry_to_transmit` (never validating: no SO_TXTIME sockets):
    /// the entry, with its interval's start and end, where a packet of class `tc`
    /// taking `ptt` ns can go at `time` or next.
    fn find_entry(s: &GateList, admin: Option<&GateList>, tc: usize, ptt: i64, time: i64) -> Option<(usize, i64, i64)> {
        let cycle = s.cycle_time;
        let mut curr_end = time - s.elapsed(time);
        let cycle_end = curr_end + cycle;
        let (mut earliest, mut found, mut available) = (i64::MAX, None, false);
        for (i, e) in s.entries.iter().enumerate() {
            let curr_start = curr_end;
            curr_end = Self::interval_end(s, admin, e, curr_start);
            if curr_start > cycle_end {
                break;
            }
            if e.gate_mask & (1 << tc) == 0 || ptt as u32 > e.interval {
                continue;
            }
            if e.next_txtime < time {
                if (curr_start < time && time + ptt < curr_end) || curr_start > time {
                    return Some((i, curr_start, curr_end));
                } else if !available {
                    available = true;
                    found = Some((i, curr_start + cycle, curr_end + cycle));
                }
            } else if e.next_txtime < earliest && !available {
                earliest = e.next_txtime;
                let n = (e.next_txtime - curr_start) / cycle;
                found = Some((i, curr_start + n * cycle, curr_end + n * cycle));
            }
        }
        found
    }

    /// `get_interval_end_time`: an interval ends with its entry, the cycle, or the
    /// admin schedule's start within the cycle-time-extension.
    fn interval_end(s: &GateList, admin: Option<&GateList>, e: &Entry, start: i64) -> i64 {
        let cycle_end = start + (s.cycle_time - s.elapsed(start));
        let intv_end = start + e.interval as i64;
        let ext_end = cycle_end + s.cycle_time_extension;
        match admin {
            _ if intv_end < cycle_end => intv_end,
            Some(a) if !std::ptr::eq(a, s) && a.base_time > cycle_end && a.base_time < ext_end => a.base_time,
            _ => cycle_end,
        }
    }

    /// Mirrors `get_packet_txtime`: when the packet's gate is open and it fits, no
    /// sooner than now + txtime-delay (or a TCP packet's own departure time).
    fn packet_txtime(&mut self, pkt: &Packet, now: Instant) -> i64 {
        let mut min = (now.as_nanos() as i64).wrapping_add(self.txtime_delay as i64);
        if pkt.sk.as_ref().is_some_and(|s| s.tcp) {
            min = min.max(pkt.tstamp.as_nanos() as i64);
        }
        if self.admin.as_ref().is_some_and(|a| min > a.base_time) {
            self.switch_schedules();
        }
        match &self.oper {
            Some(s) if min >= s.base_time => {}
            _ => return min,
        }
        let tc = self.tcs.tc_of(pkt.priority);
        let ptt = self.length_to_duration(pkt.len as i64);
        let mut which = Which::Oper;
        loop {
            let admin = self.admin.as_ref();
            let s = if which == Which::Oper { self.oper.as_ref() } else { admin }.expect("chosen schedule exists");
            let Some((i, start, end)) = Self::find_entry(s, admin, tc, ptt, min) else { return 0 };
            let txtime = s.entries[i].next_txtime.max(min).max(start);
            if which == Which::Oper && admin.is_some_and(|a| txtime > a.base_time) {
                which = Which::Admin;
                continue;
            }
            let cycle = s.cycle_time;
            let s = if which == Which::Oper { self.oper.as_mut() } else { self.admin.as_mut() }.expect("as above");
            let tend = txtime + ptt;
            min = tend;
            if tend > end {
                s.entries[i].next_txtime = start + cycle;
                continue;
            }
            s.entries[i].next_txtime = tend;
            return txtime;
        }
    }

    /// `dump_schedule`, printed as q_taprio.c `print_schedule` prints it.
    fn dump_schedule(out: &mut Out, s: &GateList) {
        out.uint("base_time", format_args!("\tbase-time {}", s.base_time), s.base_time as u64);
        out.uint("cycle_time", format_args!(" cycle-time {}", s.cycle_time), s.cycle_time as u64);
        let ext = s.cycle_time_extension;
        out.uint("cycle_time_extension", format_args!(" cycle-time-extension {ext}"), ext as u64);
        out.open_array("schedule", "");
        out.nl();
        for (i, e) in s.entries.iter().enumerate() {
            out.open_object(None);
            out.uint("index", format_args!("\tindex {i}"), i as u64);
            let cmd = CMDS.get(e.command as usize).copied().unwrap_or("Invalid");
            out.string("cmd", format_args!(" cmd {cmd}"), cmd);
            let mask = c_hex(e.gate_mask);
            out.string("gatemask", format_args!(" gatemask {mask}"), &mask);
            out.uint("interval", format_args!(" interval {}", e.interval), e.interval as u64);
            out.close_object();
            out.nl();
        }
        out.close_array("");
    }
}

/// C's `%#x`: `0x` before a non-zero value only.
fn c_hex(v: u32) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

impl Qdisc for Taprio {
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// Mirrors `taprio_enqueue`: the transmit path's tx queue pick (by traffic
    /// class, as the device's `skb_tx_hash` does), then the max-sdu check.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        self.run_timer(now);
        let txq = self.tcs.pick_txq(&pkt);
        if self.txqs.txq(txq).kind() == "noop" {
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        if !self.exceeds_max_sdu(&pkt) {
            return self.enqueue_one(sch, txq, pkt, now);
        }
        if pkt.gso_segs <= 1 {
            sch.stats.dropped();
            return Enqueued::Dropped;
        }
        // taprio_enqueue_segmented: each segment on its own; a drop is counted twice
        // (by qdisc_drop and again for its return code), as in the kernel.
        let (mut sent, mut lost) = (0, Vec::new());
        for seg in pkt.gso_segments() {
            let id = seg.id;
            let r = if self.exceeds_max_sdu(&seg) {
                sch.stats.dropped();
                Enqueued::Dropped
            } else {
                self.enqueue_one(sch, txq, seg, now)
            };
            match r {
                Enqueued::Success => sent += 1,
                Enqueued::Dropped => {
                    sch.stats.dropped();
                    lost.push(id);
                }
                Enqueued::Congested => sch.stats.dropped(),
                Enqueued::Stolen => {}
            }
        }
        if sent > 0 {
            // The skb is answered NET_XMIT_SUCCESS: the segments that were not are freed.
            lost.into_iter().for_each(crate::drops::freed);
            Enqueued::Success
        } else {
            Enqueued::Dropped
        }
    }

    /// Mirrors `taprio_dequeue`: the current entry's gates (all open before the
    /// schedule starts); none open or nothing allowed waits for the next entry.
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.run_timer(now);
        let gate_mask = match (self.current, &self.oper) {
            (Some(i), Some(s)) => s.entries[i].gate_mask,
            _ => ALL_GATES_OPEN,
        };
        let mut idle = Dequeued::Empty;
        if gate_mask != 0 {
            if let Some(p) = self.dequeue_tc_priority(sch, gate_mask, now, &mut idle) {
                return Dequeued::Packet(p);
            }
        }
        match self.watchdog(sch) {
            Some(until) => Dequeued::earliest(idle, Dequeued::Throttled { until }),
            None => idle,
        }
    }

    /// `taprio_peek`: taprio is only ever root; nothing peeks at it.
    fn peek<'a>(&'a mut self, _sch: &'a mut Sch, _now: Instant) -> Option<&'a Packet> {
        None
    }

    /// `taprio_reset`: the timer stops; the children are emptied.
    fn reset(&mut self, _sch: &mut Sch, now: Instant) {
        self.timer = None;
        for i in 0..self.num_tx_queues as usize {
            self.txqs.txq(i).reset(now);
        }
    }

    fn change(&mut self, _sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.run_timer(now);
        self.apply(opts.of()?, dev, now)
    }

    /// What `taprio_dump` sends, printed as q_taprio.c `taprio_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("tc", format_args!("tc {} ", self.tcs.num_tc), self.tcs.num_tc as u64);
        out.open_array("map", "map");
        for &t in &self.tcs.prio_tc_map {
            out.array_uint(format_args!(" {t}"), t as u64);
        }
        out.close_array("");
        out.nl();
        out.open_array("queues", "queues");
        for i in 0..self.tcs.num_tc as usize {
            out.open_object(None);
            out.uint("offset", format_args!(" offset {}", self.tcs.offset[i]), self.tcs.offset[i] as u64);
            out.uint("count", format_args!(" count {}", self.tcs.count[i]), self.tcs.count[i] as u64);
            out.close_object();
        }
        out.close_array("");
        out.nl();
        if self.flags & FULL_OFFLOAD == 0 {
            let name = clock_name(self.clockid);
            out.string("clockid", format_args!("clockid {name}"), name);
        }
        if self.flags != 0 {
            let f = c_hex(self.flags);
            out.string("flags", format_args!(" flags {f}"), &f);
        }
        if self.txtime_delay != 0 {
            let d = self.txtime_delay;
            out.uint("txtime_delay", format_args!(" txtime delay {}", d as i32), d as u64);
        }
        if let Some(s) = &self.oper {
            Self::dump_schedule(out, s);
        }
        if let Some(s) = &self.admin {
            out.open_object(Some("admin"));
            Self::dump_schedule(out, s);
            out.close_object();
        }
        // taprio_dump_tc_entries (with the oper schedule only): all 16 classes.
        if let Some(s) = &self.oper {
            out.open_array("max-sdu", "max-sdu");
            for v in s.max_sdu {
                out.array_uint(format_args!(" {v}"), v as u64);
            }
            out.close_array("");
            out.nl();
            out.open_array("fp", "fp");
            for f in self.fp {
                let v = match f {
                    FP_PREEMPTIBLE => "P",
                    FP_EXPRESS => "E",
                    _ => "?",
                };
                out.bare_string(format_args!(" {v}"), v);
            }
            out.close_array("");
            out.nl();
        }
    }

    /// The hrtimer, while packets wait for a gate.
    fn watchdog(&self, sch: &Sch) -> Option<Instant> {
        let t = self.timer.filter(|_| sch.stats.qlen > 0)?;
        Some(Instant::from_nanos(t.max(0) as u64))
    }

    fn tc_txqs(&self, prio: u32) -> Option<(u32, u32)> {
        Some(self.tcs.txqs_of(prio))
    }

    fn take_warning(&mut self) -> Option<&'static str> {
        self.warning.take()
    }

    crate::classful!();
}

impl Classful for Taprio {
    /// `taprio_walk`: one class per tx queue.
    fn class_minors(&self) -> Vec<u32> {
        self.txqs.class_minors()
    }
    /// `taprio_leaf`.
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.txqs.leaf(minor)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.txqs.leaf_mut(minor)
    }
    /// `taprio_graft`: the tx queue's child is swapped (noop when deleted).
    fn graft(&mut self, sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        self.txqs.graft(sch, minor, new, dev)
    }
    /// `taprio_dump_class`: every class hangs from the root.
    fn class_parent_is_root(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{argv, held, t};

    fn p(s: &str) -> Result<TaprioOpt, TcError> {
        parse(&mut Args::new(&argv(s)))
    }

    /// 4 tx queues at 1000 Mbit/s: 8000 ps (8 ns) per byte.
    fn dev() -> DevInfo {
        DevInfo { num_tx_queues: 4, real_tx_queues: 4, speed: Some(1000), max_mtu: 65535, ..DevInfo::eth0() }
    }

    /// TC 0 (priority 0) on queues 0–1, TC 1 (priority 1) on queues 2–3.
    const MQPRIO: &str = "num_tc 2 map 0 1 queues 2@0 2@2";

    fn taprio(s: &str, now: Instant) -> Result<Taprio, TcError> {
        Taprio::new(Some(&p(&format!("{MQPRIO} {s}"))?), &dev(), 0x1_0000, TC_H_ROOT, now)
    }

    /// A 1000-byte packet (8 µs on the wire) of priority `prio`.
    fn pkt(id: u64, prio: u32) -> Packet {
        Packet::new(id, 1000).with_priority(prio)
    }

    fn sent(d: Dequeued) -> Option<u64> {
        d.packet().map(|p| p.id)
    }

    #[test]
    fn parser_sends_what_tc_sends() {
        let o = p("num_tc 1 map 0 queues 1@0 sched-entry H 0x3 0x100 sched-entry R ff 2000 base-time -5 clockid CLOCK_TAI fp E E max-sdu 100 flags 0 txtime-delay 0").unwrap();
        assert_eq!(o.priomap.as_ref().map(|m| (m.num_tc, m.count[0])), Some((1, 1)));
        assert_eq!(
            o.entries,
            [EntryOpt { cmd: 1, gate_mask: 3, interval: 256 }, EntryOpt { cmd: 2, gate_mask: 0xFF, interval: 2000 }]
        );
        assert_eq!((o.base_time, o.clockid, o.flags, o.txtime_delay), (-5, Some(11), None, None));
        assert_eq!(o.tc_entries, Some((vec![100], vec![FP_EXPRESS, FP_EXPRESS])));
        // Without num_tc no PRIOMAP; a bad base-time ends the options silently.
        let o = p("sched-entry S 1 300000 base-time x clockid FOO").unwrap();
        assert_eq!((o.priomap, o.clockid, o.entries.len()), (None, None, 1));
        assert_eq!(p("flags x").unwrap_err(), TcError::tc(""));
        assert_eq!(p("sched-entry S 1").unwrap_err(), TcError::incomplete());
    }

    #[test]
    fn before_base_time_every_gate_is_open_highest_class_first() {
        let mut q =
            held(taprio("base-time 1000000 sched-entry S 1 100000 sched-entry S 2 100000 clockid TAI", t(0)).unwrap());
        assert_eq!(q.take_warning(), Some(NO_STAB));
        assert_eq!(q.enqueue(pkt(0, 0), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(pkt(1, 1), t(0)), Enqueued::Success);
        assert_eq!((sent(q.dequeue(t(10))), sent(q.dequeue(t(10)))), (Some(1), Some(0)));
        assert!(q.admin.is_some() && q.oper.is_none() && q.current.is_none());
        assert_eq!(q.timer, Some(1_000_000));
    }

    #[test]
    fn gates_follow_the_entries_with_the_guard_band() {
        // Entry 0 opens TC 0 over [1.0 ms, 1.1 ms), entry 1 TC 1 over [1.1, 1.2), …
        let mut q =
            held(taprio("base-time 1000000 sched-entry S 1 100000 sched-entry S 2 100000 clockid TAI", t(0)).unwrap());
        q.enqueue(pkt(0, 0), t(0));
        q.enqueue(pkt(1, 1), t(0));
        let at = t(1_000_000);
        assert_eq!(sent(q.dequeue(at)), Some(0));
        assert_eq!(q.dequeue(at), Dequeued::Throttled { until: t(1_100_000) });
        assert_eq!(q.watchdog(), Some(t(1_100_000)));
        assert_eq!(sent(q.dequeue(t(1_100_000))), Some(1));
        // 5 µs before TC 1's gate closes an 8 µs packet waits for its next opening,
        // at 1.3 ms (the cycle restarts at 1.2 ms with entry 0).
        q.enqueue(pkt(2, 1), t(1_195_000));
        assert_eq!(q.dequeue(t(1_195_000)), Dequeued::Throttled { until: t(1_200_000) });
        assert_eq!(q.dequeue(t(1_200_000)), Dequeued::Throttled { until: t(1_300_000) });
        assert_eq!(q.oper.as_ref().unwrap().cycle_end_time, 1_400_000);
        assert_eq!(sent(q.dequeue(t(1_300_000))), Some(2));
        assert_eq!((q.stats().packets, q.stats().qlen), (3, 0));
    }

    #[test]
    fn an_entry_gives_each_open_class_a_byte_budget() {
        // 100 µs at 8 ns/byte: 12,500 bytes of TC 0 in entry 0, taken all at once:
        // twelve 1000-byte packets, then the thirteenth waits for the next entry.
        let mut q =
            held(taprio("base-time 1000000 sched-entry S 1 100000 sched-entry S 2 100000 clockid TAI", t(0)).unwrap());
        for id in 0..13 {
            q.enqueue(pkt(id, 0).with_hash(0), t(0));
        }
        let at = t(1_000_000);
        let got: Vec<_> = std::iter::from_fn(|| sent(q.dequeue(at))).collect();
        assert_eq!(got, (0..12).collect::<Vec<_>>());
        assert_eq!(q.oper.as_ref().unwrap().entries[0].budget[0], -500);
        assert_eq!(q.dequeue(at), Dequeued::Throttled { until: t(1_100_000) });
        // Entry 1 keeps TC 0 closed; entry 0 of the next cycle sends it.
        assert_eq!(q.dequeue(t(1_100_000)), Dequeued::Throttled { until: t(1_200_000) });
        assert_eq!(sent(q.dequeue(t(1_200_000))), Some(12));
    }

    #[test]
    fn a_replace_waits_as_admin_and_takes_over_at_its_base_time() {
        let mut q =
            held(taprio("base-time 1000000 sched-entry S 1 100000 sched-entry S 2 100000 clockid TAI", t(0)).unwrap());
        q.enqueue(pkt(0, 1), t(0));
        assert_eq!(q.dequeue(t(1_050_000)), Dequeued::Throttled { until: t(1_100_000) });
        let o = Opts::new(p("base-time 1250000 sched-entry S 3 50000 clockid TAI").unwrap());
        q.change(&o, &dev(), t(1_050_000)).unwrap();
        // setup_first_end_time clears the current entry: every gate is open until
        // the timer, still armed for 1.1 ms, next fires.
        assert!(q.current.is_none() && q.admin.is_some());
        assert_eq!(sent(q.dequeue(t(1_050_000))), Some(0));
        q.enqueue(pkt(1, 0), t(1_100_000));
        assert_eq!(q.dequeue(t(1_100_000)), Dequeued::Throttled { until: t(1_200_000) });
        assert_eq!(q.current, Some(1));
        // At 1.2 ms the next entry would end at 1.3 ms, after the admin base-time:
        // the admin schedule becomes oper there, its first entry ending at 1.3 ms.
        assert_eq!(sent(q.dequeue(t(1_200_000))), Some(1));
        let oper = q.oper.as_ref().unwrap();
        assert_eq!((oper.base_time, oper.entries[0].gate_mask, q.admin.is_none()), (1_250_000, 3, true));
        assert_eq!(q.timer, Some(1_300_000));
        // The traffic mapping and the clock stay.
        let o = Opts::new(p("num_tc 2 map 1 0 queues 2@0 2@2 sched-entry S 3 50000 clockid TAI").unwrap());
        let e = q.change(&o, &dev(), t(1_200_000)).unwrap_err();
        assert_eq!(e.msg, "Error: Changing the traffic mapping of a running schedule is not supported.\n");
        let o = Opts::new(p("sched-entry S 3 50000 clockid REALTIME").unwrap());
        let e = q.change(&o, &dev(), t(1_200_000)).unwrap_err();
        assert_eq!(e.msg, "Error: Changing the 'clockid' of a running schedule is not supported.\n");
    }

    #[test]
    fn txtime_assist_stamps_each_packet_where_its_gate_is_open() {
        // Cycle 200 µs from base 0; the schedule is oper at once.
        let mut q = held(taprio("sched-entry S 1 100000 sched-entry S 2 100000 flags 0x1 clockid TAI", t(0)).unwrap());
        assert_eq!(q.take_warning(), None, "the first txtime-assist schedule leaves no extack");
        assert!(q.oper.is_some() && q.timer.is_none());
        let now = t(1_000_001);
        // TC 0 is open now: at once, then 8 µs later; TC 1 opens at 1.1 ms.
        for (id, prio) in [(0, 0), (1, 0), (2, 1)] {
            assert_eq!(q.enqueue(pkt(id, prio).with_hash(0), now), Enqueued::Success);
        }
        let got: Vec<_> = std::iter::from_fn(|| q.dequeue(now).packet().map(|p| (p.id, p.tstamp))).collect();
        assert_eq!(got, [(2, t(1_100_000)), (0, t(1_000_001)), (1, t(1_008_001))]);
        // txtime-delay pushes the earliest time: 95 µs later leaves 5 µs of entry
        // 0, too little for 8 µs, so the next cycle's entry 0.
        let o = Opts::new(
            p("sched-entry S 1 100000 sched-entry S 2 100000 flags 0x1 txtime-delay 95000 clockid TAI").unwrap(),
        );
        q.change(&o, &dev(), now).unwrap();
        assert_eq!(q.take_warning(), Some(NO_STAB));
        q.enqueue(pkt(3, 0).with_hash(0), now);
        assert_eq!(q.dequeue(now).packet().map(|p| p.tstamp), Some(t(1_200_000)));
    }

    #[test]
    fn max_sdu_drops_oversized_packets_and_segments_gso() {
        let mut q = held(taprio("sched-entry S 3 100000 max-sdu 500 flags 0x1 clockid TAI", t(0)).unwrap());
        assert_eq!(q.oper.as_ref().unwrap().max_frm_len[..2], [514, u32::MAX]);
        let now = t(1);
        assert_eq!(q.enqueue(Packet::new(0, 600), now), Enqueued::Dropped);
        assert_eq!(q.enqueue(Packet::new(1, 600).with_priority(1), now), Enqueued::Success);
        let mut gso = Packet::new(2, 1000);
        gso.gso_segs = 2;
        assert_eq!(q.enqueue(gso.clone(), now), Enqueued::Success);
        // Two 1500-byte segments: each dropped, and counted twice.
        (gso.len, gso.gso_segs) = (3000, 2);
        assert_eq!(q.enqueue(gso, now), Enqueued::Dropped);
        assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (3, 1600, 5));
    }
}
