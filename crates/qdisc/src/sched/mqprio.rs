//! mqprio — multiqueue priority: an mq whose tx queues are grouped into traffic
//! classes. Mirrors net/sched/sch_mqprio.c and sch_mqprio_lib.c (kernel side) and
//! tc/q_mqprio.c (iproute2 side); §mqprio of docs/kernel-notes.md.
//!
//! Theory: `num_tc` traffic classes (TCs), each a range of tx queues (`queues
//! count@offset …`, no overlaps, within the device's real tx queues), and a map
//! from the 16 priorities (`skb->priority & 15`) to TCs. mqprio writes them into
//! the device (`netdev_set_num_tc`, `netdev_set_tc_queue`,
//! `netdev_set_prio_tc_map`), where the transmit path reads them: `skb_tx_hash`
//! spreads a packet over its TC's queues only ([`Qdisc::tc_txqs`], read by
//! [`crate::tree::Device::txq_of`]). Otherwise it is mq: each tx queue gets its own
//! default qdisc (class `<major>:<txq+1>`), its counters are their sums. Besides
//! the queue classes it lists one class per TC (`<major>:ffe0` + TC), whose counters
//! are the sums over its queues, and each queue class names its TC as parent.
//!
//! Software mode only (`hw 0`): the engine's devices have no `ndo_setup_tc`, so the
//! default `hw 1`, `mode`/`shaper`/rates (which tc sends only with hw) and the `fp`
//! entries are refused as the kernel refuses them on such a device. mqprio has no
//! change op.

use crate::packet::Packet;
use crate::qdisc::{
    tc_h_make, Classful, Dequeued, DevInfo, Enqueued, Flags, Node, Ops, Opts, Parse, Qdisc, Sch, TC_H_ROOT,
};
use crate::sched::mq::Mq;
use crate::stats::Stats;
use crate::tc::{invarg, matches, units, Args, Errno, Out, TcError};
use crate::time::Instant;

/// TC_QOPT_MAX_QUEUE (TC_MAX_QUEUE).
pub(crate) const MAX_QUEUE: usize = 16;
/// TC_QOPT_BITMASK: priorities 0…15.
pub(crate) const BITMASK: u32 = 15;
/// TC_H_MIN_PRIORITY: the first traffic class's minor.
const MIN_PRIORITY: u32 = 0xFFE0;
/// TC_MQPRIO_HW_OFFLOAD_MAX.
const HW_OFFLOAD_MAX: u8 = 1;

/// tc always sends `struct tc_mqprio_qopt`; the kernel wants it.
pub static OPS: Ops = Ops {
    id: "mqprio",
    parse: Parse::Qopt(|a| Ok(Some(Opts::new(parse(a)?)))),
    create: |c| Ok(Box::new(Mqprio::new(c.required()?, c.dev, c.handle, c.parent, c.default_qdisc, c.now)?)),
    parse_class: None,
    flags: Flags { per_txq: true, ..Flags::NONE },
    since: None,
};

/// What tc sends: `struct tc_mqprio_qopt` and whether any attribute follows it
/// (TCA_MQPRIO_MODE, _SHAPER, the rates, the TC entries of `fp`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MqprioOpt {
    pub num_tc: u8,
    pub prio_tc_map: [u8; MAX_QUEUE],
    pub hw: u8,
    pub count: [u16; MAX_QUEUE],
    pub offset: [u16; MAX_QUEUE],
    /// Attributes after the struct (only hardware mode takes them).
    pub attrs: bool,
}

impl MqprioOpt {
    /// The traffic class of priority `prio` (`netdev_get_prio_tc_map`).
    pub(crate) fn tc_of(&self, prio: u32) -> usize {
        self.prio_tc_map[(prio & BITMASK) as usize] as usize
    }
    /// The tx queues, as (offset, count), of priority `prio`'s traffic class.
    pub(crate) fn txqs_of(&self, prio: u32) -> (u32, u32) {
        let tc = self.tc_of(prio);
        (self.offset[tc] as u32, self.count[tc] as u32)
    }
    /// `skb_tx_hash` on a device with these traffic classes: the packet's hash spread
    /// over its class's tx queues.
    pub(crate) fn pick_txq(&self, pkt: &Packet) -> usize {
        let (off, cnt) = self.txqs_of(pkt.priority);
        (off + crate::sched::codel::reciprocal_scale(pkt.hash, cnt)) as usize
    }
}

/// q_mqprio.c `explain`.
const USAGE: &str = "Usage: ... mqprio\t[num_tc NUMBER] [map P0 P1 ...]\n\t\t\t[queues count1@offset1 count2@offset2 ...] [hw 1|0]\n\t\t\t[fp FP0 FP1 FP2 ...]\n\t\t\t[mode dcb|channel]\n\t\t\t[shaper bw_rlimit SHAPER_PARAMS]\nWhere: SHAPER_PARAMS := { min_rate MIN_RATE1 MIN_RATE2 ...|\n\t\t\t  max_rate MAX_RATE1 MAX_RATE2 ... }\n";

/// `get_u8(…, 10)`.
fn get_u8(s: &str) -> Option<u8> {
    units::get_unsigned10(s).and_then(|v| u8::try_from(v).ok())
}

/// `get_u16(…, 10)`.
fn get_u16(s: &str) -> Option<u16> {
    units::get_unsigned10(s).and_then(|v| u16::try_from(v).ok())
}

/// `count@offset` as q_mqprio.c's two `strtok(…, "@")` read it.
fn count_offset(s: &str) -> Option<(u16, u16)> {
    let mut toks = s.split('@').filter(|t| !t.is_empty());
    Some((get_u16(toks.next()?)?, get_u16(toks.next()?)?))
}

/// Read values with `f` while they parse (at most `MAX_QUEUE - idx`): the
/// `while (idx < 16 && NEXT_ARG_OK())` loops of q_mqprio.c, which leave a word that
/// does not parse for the main loop.
fn read_list<T>(args: &mut Args, idx: &mut usize, mut f: impl FnMut(&str) -> Option<T>, mut put: impl FnMut(usize, T)) {
    while *idx < MAX_QUEUE {
        let Some(v) = args.peek().and_then(&mut f) else { break };
        args.next();
        put(*idx, v);
        *idx += 1;
    }
}

/// The words q_mqprio.c and q_taprio.c parse alike into `struct tc_mqprio_qopt`:
/// `num_tc`, `map` and `queues`. `Ok(None)`: `word` is none of them; else how many
/// `count@offset` pairs it read.
pub(crate) fn parse_qopt_word(word: &str, args: &mut Args, o: &mut MqprioOpt) -> Result<Option<usize>, TcError> {
    let mut idx = 0usize;
    match word {
        "num_tc" => o.num_tc = get_u8(args.value()?).ok_or_else(|| TcError::tc("Illegal \"num_tc\"\n"))?,
        "map" => {
            let map = &mut o.prio_tc_map;
            read_list(args, &mut idx, get_u8, |i, v| map[i] = v);
            map[idx..].fill(0);
            return Ok(Some(0));
        }
        "queues" => {
            let (count, offset) = (&mut o.count, &mut o.offset);
            read_list(args, &mut idx, count_offset, |i, (c, off)| (count[i], offset[i]) = (c, off));
        }
        _ => return Ok(None),
    }
    Ok(Some(idx))
}

/// tc side: q_mqprio.c `mqprio_parse_opt`.
pub fn parse(args: &mut Args) -> Result<MqprioOpt, TcError> {
    let mut o = MqprioOpt {
        num_tc: 8,
        prio_tc_map: [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 1, 1, 3, 3, 3, 3],
        hw: 1,
        count: [0; MAX_QUEUE],
        offset: [0; MAX_QUEUE],
        attrs: false,
    };
    let mut pairs = 0usize;
    let mut bw_rlimit = false;
    while let Some(a) = args.next() {
        if let Some(n) = parse_qopt_word(a, args, &mut o)? {
            pairs += n;
            continue;
        }
        let mut idx = 0usize;
        match a {
            "fp" => {
                read_list(args, &mut idx, |w| matches!(w, "E" | "P").then_some(()), |_, ()| {});
                o.attrs = true;
            }
            "hw" => o.hw = get_u8(args.value()?).ok_or_else(|| TcError::tc("Illegal \"hw\"\n"))?,
            "mode" if o.hw != 0 => {
                let m = args.value()?;
                if matches(m, "dcb") {
                } else if matches(m, "channel") {
                    o.attrs = true; // TCA_MQPRIO_MODE
                } else {
                    return Err(TcError::tc(format!("Illegal mode ({m})\n")));
                }
            }
            "shaper" if o.hw != 0 => {
                let m = args.value()?;
                if matches(m, "dcb") {
                } else if matches(m, "bw_rlimit") {
                    if args.peek().is_none() {
                        return Err(TcError::tc("Incomplete shaper arguments\n"));
                    }
                    bw_rlimit = true;
                    o.attrs = true;
                } else {
                    return Err(TcError::tc(format!("Illegal shaper ({m})\n")));
                }
            }
            "min_rate" | "max_rate" if bw_rlimit => {
                read_list(args, &mut idx, units::get_rate64, |_, _| {});
                if idx < o.num_tc as usize && args.peek().is_none() {
                    return Err(TcError::tc(format!("Incomplete arguments, {a} values expected\n")));
                }
            }
            "help" => return Err(TcError::tc(USAGE)),
            other => return Err(invarg("unknown argument", other)),
        }
    }
    if pairs > o.num_tc as usize {
        return Err(TcError::tc(format!(
            "queues count/offset pair count {pairs} can not be higher than given num_tc {}\n",
            o.num_tc
        )));
    }
    Ok(o)
}

/// `struct mqprio_sched`, plus the device's traffic classes it set (the kernel
/// keeps those in `struct net_device`; `mqprio_qopt_reconstruct` gives them back).
pub struct Mqprio {
    mq: Mq,
    tcs: MqprioOpt,
    handle: u32,
}

/// `mqprio_validate_qopt` (sch_mqprio_lib.c): the queue ranges are checked only with
/// `validate_queue_counts` (mqprio's `hw 0`, always for taprio), and may overlap when
/// `allow_overlapping_txqs` (taprio's txtime-assist).
pub(crate) fn validate_qopt(
    dev: &DevInfo,
    o: &MqprioOpt,
    validate_queue_counts: bool,
    allow_overlapping_txqs: bool,
) -> Result<(), TcError> {
    if o.num_tc as usize > MAX_QUEUE {
        return Err(TcError::kernel("Number of traffic classes is outside valid range"));
    }
    if o.prio_tc_map.iter().any(|&t| t >= o.num_tc) {
        return Err(TcError::kernel("Invalid traffic class in priority to traffic class mapping"));
    }
    if !validate_queue_counts {
        return Ok(());
    }
    let real = dev.real_tx_queues;
    for i in 0..o.num_tc as usize {
        let (c, off) = (o.count[i] as u32, o.offset[i] as u32);
        if c == 0 {
            return Err(TcError::kernel(&format!("sch_mqprio_lib: No queues for TC {i}")));
        }
        if off >= real || off + c > real {
            return Err(TcError::kernel(&format!(
                "sch_mqprio_lib: Queues {c}:{off} for TC {i} exceed the {real} TX queues available"
            )));
        }
        if allow_overlapping_txqs {
            continue;
        }
        for j in i + 1..o.num_tc as usize {
            let (cj, oj) = (o.count[j] as u32, o.offset[j] as u32);
            // intervals_overlap: [off, off + c) and [oj, oj + cj) share a queue.
            if off.max(oj) < (off + c).min(oj + cj) {
                return Err(TcError::kernel(&format!(
                    "sch_mqprio_lib: TC {i} queues {c}@{off} overlap with TC {j} queues {cj}@{oj}"
                )));
            }
        }
    }
    Ok(())
}

impl Mqprio {
    /// Mirrors `mqprio_init` (and `mqprio_parse_opt`, `mqprio_parse_nlattr`): root of a
    /// multiqueue device only; the map and the queue ranges are checked; hardware
    /// mode, and any attribute after the struct, are refused; then mq's children.
    pub fn new(
        o: &MqprioOpt,
        dev: &DevInfo,
        handle: u32,
        parent: u32,
        default_qdisc: &str,
        now: Instant,
    ) -> Result<Self, TcError> {
        if parent != TC_H_ROOT || dev.num_tx_queues <= 1 {
            return Err(TcError::errno(Errno::EOPNOTSUPP));
        }
        if dev.num_tx_queues >= MIN_PRIORITY {
            return Err(TcError::errno(Errno::ENOMEM));
        }
        let hw = o.hw.min(HW_OFFLOAD_MAX);
        validate_qopt(dev, o, hw == 0, false)?;
        if hw != 0 {
            return Err(TcError::kernel("Device does not support hardware offload"));
        }
        if o.attrs {
            return Err(TcError::kernel("mqprio TCA_OPTIONS can only contain netlink attributes in hardware mode"));
        }
        let mq = Mq::new(dev, handle, parent, default_qdisc, now)?;
        Ok(Mqprio { mq, tcs: o.clone(), handle })
    }

    /// `netdev_txq_to_tc`: the traffic class whose queues include `txq`.
    fn txq_to_tc(&self, txq: u32) -> Option<u32> {
        (0..self.tcs.num_tc as usize)
            .find(|&i| (self.tcs.offset[i] as u32..self.tcs.offset[i] as u32 + self.tcs.count[i] as u32).contains(&txq))
            .map(|i| i as u32)
    }

    /// The TC of traffic class minor `minor`, if it is one.
    fn tc_of_minor(&self, minor: u32) -> Option<usize> {
        minor.checked_sub(MIN_PRIORITY).filter(|&t| t < self.tcs.num_tc as u32).map(|t| t as usize)
    }
}

impl Qdisc for Mqprio {
    /// mqprio_qdisc_ops has no `change`: a replace with options is refused.
    fn has_change(&self) -> bool {
        false
    }
    fn ops(&self) -> &'static Ops {
        &OPS
    }

    /// As mq's: the transmit path's pick (now by traffic class), then the queue's qdisc.
    fn enqueue(&mut self, sch: &mut Sch, pkt: Packet, now: Instant) -> Enqueued {
        let i = self.tcs.pick_txq(&pkt);
        self.mq.enqueue_on(sch, i, pkt, now)
    }
    fn dequeue(&mut self, sch: &mut Sch, now: Instant) -> Dequeued {
        self.mq.dequeue(sch, now)
    }
    fn peek<'a>(&'a mut self, sch: &'a mut Sch, now: Instant) -> Option<&'a Packet> {
        self.mq.peek(sch, now)
    }
    fn reset(&mut self, sch: &mut Sch, now: Instant) {
        self.mq.reset(sch, now)
    }
    /// mqprio has no change op.
    fn change(&mut self, sch: &mut Sch, opts: &Opts, dev: &DevInfo, now: Instant) -> Result<(), TcError> {
        self.mq.change(sch, opts, dev, now)
    }

    /// What `mqprio_dump` sends (`mqprio_qopt_reconstruct` from the device, every
    /// TC entry's fp), printed as q_mqprio.c `mqprio_print_opt` prints it.
    fn dump(&self, out: &mut Out, _dev: &DevInfo) {
        out.uint("tc", format_args!("tc {} ", self.tcs.num_tc), self.tcs.num_tc as u64);
        out.open_array("map", "map ");
        for &t in &self.tcs.prio_tc_map {
            out.array_uint(format_args!("{t} "), t as u64);
        }
        out.close_array("");
        out.open_array("queues", "\n             queues:");
        for i in 0..self.tcs.num_tc as usize {
            let (off, c) = (self.tcs.offset[i] as u64, self.tcs.count[i] as u64);
            out.open_anon_array();
            out.array_uint(format_args!("({off}:"), off);
            out.array_uint(format_args!("{}) ", (off + c).wrapping_sub(1)), (off + c).wrapping_sub(1));
            out.close_array("");
        }
        out.close_array("");
        out.string("mode", format_args!("\n             mode:dcb"), "dcb");
        out.string("shaper", format_args!("\n             shaper:dcb"), "dcb");
        out.open_array("fp", "\n             fp:");
        for _ in 0..MAX_QUEUE {
            out.bare_string(format_args!(" E"), "E");
        }
        out.close_array("");
        out.nl();
    }

    fn sync_stats(&mut self, sch: &mut Sch) {
        self.mq.sync_stats(sch)
    }

    fn tc_txqs(&self, prio: u32) -> Option<(u32, u32)> {
        Some(self.tcs.txqs_of(prio))
    }

    crate::classful!();
}

impl Classful for Mqprio {
    /// `mqprio_walk`: the traffic classes, then every tx queue.
    fn class_minors(&self) -> Vec<u32> {
        let queues = 1..=self.mq.txqs().len() as u32;
        (MIN_PRIORITY..MIN_PRIORITY + self.tcs.num_tc as u32).chain(queues).collect()
    }
    /// `mqprio_find`.
    fn find(&self, minor: u32) -> bool {
        if minor < MIN_PRIORITY {
            minor != 0 && minor as usize <= self.mq.txqs().len()
        } else {
            self.tc_of_minor(minor).is_some()
        }
    }
    /// `mqprio_leaf`: a tx queue's qdisc; traffic classes have none.
    fn leaf(&self, minor: u32) -> Option<&Node> {
        self.mq.leaf(minor)
    }
    fn leaf_mut(&mut self, minor: u32) -> Option<&mut Node> {
        self.mq.leaf_mut(minor)
    }
    /// `mqprio_graft` on a tx queue class, as mq's. A traffic class has no tx queue
    /// (`mqprio_select_queue`), which `qdisc_alloc` refuses.
    fn graft(&mut self, sch: &mut Sch, minor: u32, new: Option<Node>, dev: &DevInfo) -> Result<Option<Node>, TcError> {
        if minor >= MIN_PRIORITY {
            return Err(TcError::kernel("No device queue given"));
        }
        self.mq.graft(sch, minor, new, dev)
    }
    /// `mqprio_dump_class_stats`: a traffic class sums its queues' qdiscs; a queue
    /// class is its qdisc's.
    fn class_stats(&self, minor: u32) -> Option<Stats> {
        let Some(tc) = self.tc_of_minor(minor) else {
            return Some(self.leaf(minor).map(|n| n.stats().clone()).unwrap_or_default());
        };
        let (off, c) = (self.tcs.offset[tc] as usize, self.tcs.count[tc] as usize);
        let mut s = Stats::default();
        for n in self.mq.txqs().iter().skip(off).take(c) {
            s.add(n.stats());
        }
        Some(s)
    }
    /// `mqprio_dump_class`: traffic classes hang from the root, a queue from its
    /// traffic class (none when no class holds it).
    fn class_parent(&self, minor: u32) -> Option<u32> {
        if minor >= MIN_PRIORITY {
            return Some(TC_H_ROOT);
        }
        Some(self.txq_to_tc(minor - 1).map_or(0, |tc| tc_h_make(self.handle, MIN_PRIORITY + tc)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{argv, held, t};

    fn p(s: &str) -> Result<MqprioOpt, TcError> {
        parse(&mut Args::new(&argv(s)))
    }

    fn dev(n: u32) -> DevInfo {
        DevInfo { num_tx_queues: n, real_tx_queues: n, ..DevInfo::eth0() }
    }

    fn mqprio(n: u32, s: &str) -> Result<Mqprio, TcError> {
        Mqprio::new(&p(s)?, &dev(n), 0x1_0000, TC_H_ROOT, crate::tree::DEFAULT_QDISC, t(0))
    }

    #[test]
    fn parser_reads_lists_as_tc() {
        let o = p("num_tc 3 map 0 0 1 2 queues 1@0 1@1 2@2 hw 0").unwrap();
        assert_eq!((o.num_tc, o.hw, o.attrs), (3, 0, false));
        assert_eq!(o.prio_tc_map, [0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!((&o.count[..3], &o.offset[..3]), (&[1, 1, 2][..], &[0, 1, 2][..]));
        // A word that is not a pair ends the list and is read next.
        assert_eq!(
            p("num_tc 2 queues 4 4@4 hw 0").unwrap_err().msg,
            "Error: argument \"4\" is wrong: unknown argument\n"
        );
        // mode and shaper exist only while hw is on (its default).
        assert_eq!(p("hw 0 mode channel").unwrap_err().code, 255);
        assert!(p("mode channel").unwrap().attrs);
        assert!(!p("mode dcb").unwrap().attrs);
        assert_eq!(p("mode x").unwrap_err().msg, "Illegal mode (x)\n");
        assert!(p("hw 0 fp E P").unwrap().attrs);
        assert_eq!(p("num_tc x").unwrap_err().msg, "Illegal \"num_tc\"\n");
        assert_eq!(
            p("num_tc 1 queues 1@0 1@1").unwrap_err().msg,
            "queues count/offset pair count 2 can not be higher than given num_tc 1\n"
        );
        assert_eq!(p("help").unwrap_err().msg, USAGE);
    }

    #[test]
    fn the_kernel_checks_in_order() {
        let e = |n, s| mqprio(n, s).err().unwrap().msg;
        assert_eq!(e(8, ""), "Error: Device does not support hardware offload.\n");
        assert_eq!(e(8, "num_tc 17 hw 0"), "Error: Number of traffic classes is outside valid range.\n");
        assert_eq!(
            e(8, "num_tc 2 map 0 2 hw 0"),
            "Error: Invalid traffic class in priority to traffic class mapping.\n"
        );
        assert_eq!(e(8, "hw 0"), "Error: sch_mqprio_lib: No queues for TC 0.\n");
        assert_eq!(
            e(8, "num_tc 2 map 0 1 queues 4@0 5@4 hw 0"),
            "Error: sch_mqprio_lib: Queues 5:4 for TC 1 exceed the 8 TX queues available.\n"
        );
        assert_eq!(
            e(8, "num_tc 2 map 0 1 queues 4@0 4@3 hw 0"),
            "Error: sch_mqprio_lib: TC 0 queues 4@0 overlap with TC 1 queues 4@3.\n"
        );
        assert_eq!(
            e(8, "num_tc 2 map 0 1 queues 4@0 4@4 hw 0 fp E"),
            "Error: mqprio TCA_OPTIONS can only contain netlink attributes in hardware mode.\n"
        );
        assert_eq!(mqprio(1, "num_tc 1 queues 1@0 hw 0").err().unwrap(), TcError::errno(Errno::EOPNOTSUPP));
    }

    #[test]
    fn classes_parents_and_traffic_class_sums() {
        // TC 0 = queue 0, TC 1 = queues 1 and 2; queue 3 belongs to no TC.
        let mut q = held(mqprio(4, "num_tc 2 map 0 1 1 0 queues 1@0 2@1 hw 0").unwrap());
        assert_eq!(q.class_minors(), vec![0xFFE0, 0xFFE1, 1, 2, 3, 4]);
        let parents: Vec<_> = q.class_minors().into_iter().map(|m| q.class_parent(m).unwrap()).collect();
        assert_eq!(parents, vec![TC_H_ROOT, TC_H_ROOT, 0x1_FFE0, 0x1_FFE1, 0x1_FFE1, 0]);
        assert!(q.find(0xFFE1) && !q.find(0xFFE2) && q.find(4) && !q.find(5) && !q.find(0));
        // Priority 1 → TC 1 → queues 1..3: hash 0 takes queue 1, 0xC000_0000 queue 2;
        // priority 3 → TC 0 → queue 0 whatever the hash.
        assert_eq!(q.tc_txqs(1), Some((1, 2)));
        assert_eq!(q.tc_txqs(0x1_0013), Some((0, 1)), "priority & 15");
        q.enqueue(Packet::new(1, 100).with_priority(1).with_hash(0), t(0));
        q.enqueue(Packet::new(2, 200).with_priority(1).with_hash(0xC000_0000), t(0));
        q.enqueue(Packet::new(3, 300).with_priority(3).with_hash(0xC000_0000), t(0));
        let backlog = |m| q.class_stats(m).unwrap().backlog;
        assert_eq!((backlog(1), backlog(2), backlog(3), backlog(4)), (300, 100, 200, 0));
        assert_eq!((backlog(0xFFE0), backlog(0xFFE1)), (300, 300));
        assert_eq!((q.stats().qlen, q.stats().backlog), (3, 600));
        let e = q.graft(0xFFE0, None, &dev(4)).err().unwrap();
        assert_eq!(e.msg, "Error: No device queue given.\n");
    }

    #[test]
    fn the_device_picks_tx_queues_within_the_traffic_class() {
        let mut tc = crate::tc::Tc::new(&[crate::tree::DevSpec::parse("eth0,txqueues=4").unwrap()]);
        let pkt = |prio| Packet::new(1, 100).with_priority(prio).with_hash(0xFFFF_FFFF);
        // Without traffic classes the hash spreads over all 4 queues: the last.
        assert_eq!(tc.devices[0].txq_of(&pkt(0)), 3);
        let out = tc.run(&argv("qdisc add dev eth0 root handle 1: mqprio num_tc 2 map 0 1 queues 1@0 3@1 hw 0"));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!((tc.devices[0].txq_of(&pkt(0)), tc.devices[0].txq_of(&pkt(1))), (0, 3));
        // Deleting it clears them (`netdev_reset_tc` at destroy).
        assert_eq!(tc.run(&argv("qdisc del dev eth0 root")).code, 0);
        assert_eq!(tc.devices[0].txq_of(&pkt(0)), 3);
    }

    #[test]
    fn dump_is_tcs_print() {
        let q = mqprio(4, "num_tc 2 map 0 1 queues 1@0 3@1 hw 0").unwrap();
        let mut o = Out::text();
        q.dump(&mut o, &dev(4));
        assert_eq!(
            o.into_string(),
            "tc 2 map 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 \n             queues:(0:0) (1:3) \n             mode:dcb\n             shaper:dcb\n             fp: E E E E E E E E E E E E E E E E\n"
        );
    }
}
