//! hfsc's unit tests: hand-stepped clocks with the exact order and times the
//! kernel's arithmetic gives (psched ticks are 64 ns), conservation, class errors.

use super::*;
use crate::sched::fifo::{Fifo, FifoKind};
use crate::tc::Args;
use crate::testing::{argv, dev, held, ms, t};

const H: u32 = 0x1_0000;

fn hfsc(defcls: u16) -> Node<Hfsc> {
    held(Hfsc::new(H, defcls, &dev()))
}

/// `tc class add … parent 1:PARENT classid 1:MINOR hfsc OPTS` (parent 0 = the root).
fn class(q: &mut Node<Hfsc>, minor: u32, parent: u32, opts: &str) -> Result<Option<String>, TcError> {
    let v = argv(opts);
    let o = parse_class(&mut Args::new(&v))?;
    q.change_class(H | minor, H | parent, false, Some(&Opts::new(o)), &dev(), t(0))
}

fn change(q: &mut Node<Hfsc>, minor: u32, parent: u32, opts: &str, now: Instant) -> Result<Option<String>, TcError> {
    let v = argv(opts);
    let o = parse_class(&mut Args::new(&v))?;
    q.change_class(H | minor, parent, true, Some(&Opts::new(o)), &dev(), now)
}

fn pkt(id: u64, len: u32, minor: u32) -> Packet {
    Packet::new(id, len).with_priority(H | minor)
}

/// Dequeue everything, following the watchdog: (id, time sent in ns).
fn drain(q: &mut Node<Hfsc>, mut now: Instant) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    loop {
        match q.dequeue(now) {
            Dequeued::Packet(p) => out.push((p.id, now.0)),
            Dequeued::Throttled { until } => {
                assert!(until > now, "a wake-up in the future");
                now = until;
            }
            Dequeued::Empty => return out,
        }
    }
}

fn xstats(q: &Node<Hfsc>, minor: u32) -> String {
    let mut o = Out::text();
    q.dump_class_xstats(minor, &mut o);
    o.into_string()
}

#[test]
fn parsers_match_tc() {
    let p = |s: &str| parse(&mut Args::new(&argv(s)));
    assert_eq!(p("").unwrap().defcls, 0);
    assert_eq!(p("default 1a").unwrap().defcls, 0x1a);
    assert_eq!(p("def 0x10").unwrap().defcls, 0x10);
    assert_eq!(p("default 0 default 3").unwrap().defcls, 3, "a zero default is not a first one");
    assert_eq!(p("default 1 default 2").unwrap_err().msg, "HFSC: Double \"default\"\n");
    assert_eq!(p("default 10000").unwrap_err().msg, "HFSC: Illegal \"default\"\n");
    assert_eq!(p("default -1").unwrap_err().msg, "HFSC: Illegal \"default\"\n");
    assert_eq!(p("default").unwrap_err(), TcError::incomplete());
    assert!(p("foo").unwrap_err().msg.starts_with("HFSC: What is \"foo\" ?\nUsage: ... hfsc [ default CLASSID ]"));

    let c = |s: &str| parse_class(&mut Args::new(&argv(s)));
    let sc = |m1, d, m2| Some(ServiceCurve { m1, d, m2 });
    let o = c("rt m1 2mbit d 10ms m2 1mbit ls m2 3mbit ul rate 4mbit").unwrap();
    assert_eq!(o.rsc, sc(250_000, 10_000, 125_000));
    assert_eq!(o.fsc, sc(0, 0, 375_000));
    assert_eq!(o.usc, sc(0, 0, 500_000));
    // umax/dmax: concave when umax/dmax beats the rate, else convex with a delay.
    assert_eq!(c("sc umax 1500b dmax 5ms rate 1mbit").unwrap().rsc, sc(300_000, 5000, 125_000));
    let o = c("sc umax 1500b dmax 5ms rate 1mbit").unwrap();
    assert_eq!(o.rsc, o.fsc);
    assert_eq!(c("rt umax 1000 dmax 100ms rate 2mbit").unwrap().rsc, sc(0, 96_000, 250_000));
    // A word that starts neither form, then an error in each.
    let e = c("rt d xyz m2 1mbit").unwrap_err();
    assert_eq!(e.msg, "HFSC: Illegal \"rt\"\n");
    let v = argv("rt d xyz m2 1mbit");
    let mut a = Args::new(&v);
    let _ = parse_class(&mut a);
    assert_eq!(a.notes, "HFSC: Illegal \"d\"\nHFSC: Illegal \"dmax\"\n");
    let v = argv("ls m2 0");
    let mut a = Args::new(&v);
    assert_eq!(parse_class(&mut a).unwrap_err().msg, "HFSC: Illegal \"ls\"\n");
    assert_eq!(a.notes, "HFSC: Service Curve has two zero slopes\n");
    assert_eq!(c("rt m1 1mbit").unwrap_err(), TcError::incomplete());
    assert!(c("").unwrap_err().msg.starts_with("HFSC: no parameters given\n"));
    assert!(c("ul m2 1mbit").unwrap_err().msg.starts_with("HFSC: Upper-limit Service Curve without Link-Share"));
}

#[test]
fn real_time_serves_the_earliest_deadline_among_eligible_classes() {
    // 1:1 at 1 Mbit/s, 1:2 at 2 Mbit/s, three 1250-byte packets each (10 ms and 5 ms
    // of curve). At 0 both are eligible and 1:2's deadline (5 ms) comes first; then
    // 1:2's next packet is eligible at 5 ms, both at 10 ms (1:2's deadline 15 ms
    // before 1:1's 20 ms), and 1:1's last at 20 ms.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "rt m2 1mbit").unwrap();
    class(&mut q, 2, 0, "rt m2 2mbit").unwrap();
    for i in 0..3 {
        assert_eq!(q.enqueue(pkt(10 + i, 1250, 1), t(0)), Enqueued::Success);
        assert_eq!(q.enqueue(pkt(20 + i, 1250, 2), t(0)), Enqueued::Success);
    }
    let sent = drain(&mut q, t(0));
    let ms = |x: u64| x * 1_000_000;
    assert_eq!(sent, vec![(20, 0), (10, 0), (21, ms(5)), (22, ms(10)), (11, ms(10)), (12, ms(20))]);
    assert_eq!(xstats(&q, 1), " period 0 work 3750 bytes rtwork 3750 bytes level 0 \n");
    // Each throttled dequeue counted an overlimit: at 0, 5 ms and 10 ms.
    assert_eq!(q.stats().overlimits, 3);
    assert_eq!(q.stats().packets, 6);
}

#[test]
fn a_concave_curve_sends_its_burst_at_m1_then_m2() {
    // rt m1 4mbit d 10ms m2 1mbit: 5000 bytes at 4 Mbit/s (a 1250-byte packet every
    // 39,062 ticks, 2.5 ms less the tick rounding), then one every 10 ms.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "rt m1 4mbit d 10ms m2 1mbit").unwrap();
    for i in 0..6 {
        q.enqueue(pkt(i, 1250, 1), t(0));
    }
    let times: Vec<u64> = drain(&mut q, t(0)).into_iter().map(|(_, at)| at).collect();
    let tick = |x: u64| x << 6;
    assert_eq!(times, vec![0, tick(39_062), tick(78_125), tick(117_187), tick(156_250), tick(312_500)]);
    // The same class convex (m1 0): one packet per 10 ms from the start.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "rt m2 1mbit").unwrap();
    for i in 0..3 {
        q.enqueue(pkt(i, 1250, 1), t(0));
    }
    let times: Vec<u64> = drain(&mut q, t(0)).into_iter().map(|(_, at)| at).collect();
    assert_eq!(times, vec![0, 10_000_000, 20_000_000]);
}

#[test]
fn link_sharing_divides_by_the_ls_curves() {
    // ls 1 Mbit/s and 3 Mbit/s with 1000-byte packets: 1:2's virtual time grows a
    // third as fast, so three of its packets go for each of 1:1's; ties go to the
    // class that entered the vt tree first.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "ls m2 1mbit").unwrap();
    class(&mut q, 2, 0, "ls m2 3mbit").unwrap();
    for i in 0..10 {
        q.enqueue(pkt(10 + i, 1000, 1), t(0));
        q.enqueue(pkt(20 + i, 1000, 2), t(0));
    }
    let ids: Vec<u64> = (0..12).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
    assert_eq!(ids, vec![10, 20, 21, 22, 11, 23, 24, 25, 12, 26, 27, 28]);
    assert_eq!(q.cl(1).vt, 375_000);
    assert_eq!(q.cl(2).vt, 375_000);
    assert_eq!(xstats(&q, 2), " period 1 work 9000 bytes level 0 \n");
    assert_eq!(q.stats().overlimits, 0, "link sharing is work-conserving");
}

#[test]
fn an_upper_limit_caps_link_sharing() {
    // ls 10 Mbit/s capped by ul 1 Mbit/s: a 1250-byte packet every 10 ms, the
    // watchdog set from the root's fit time.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "ls m2 10mbit ul m2 1mbit").unwrap();
    for i in 0..4 {
        q.enqueue(pkt(i, 1250, 1), t(0));
    }
    assert!(q.dequeue(t(0)).packet().is_some());
    assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: ms(10) });
    assert_eq!(q.watchdog(), Some(ms(10)));
    assert_eq!(q.dequeue(ms(9)), Dequeued::Throttled { until: ms(10) });
    let times: Vec<u64> = drain(&mut q, ms(10)).into_iter().map(|(_, at)| at).collect();
    assert_eq!(times, vec![10_000_000, 20_000_000, 30_000_000]);
    // An inner class's limit holds its children back too.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "ls m2 10mbit ul m2 2mbit").unwrap();
    class(&mut q, 10, 1, "ls m2 10mbit").unwrap();
    class(&mut q, 11, 1, "ls m2 10mbit").unwrap();
    for i in 0..2 {
        q.enqueue(pkt(10 + i, 1250, 10), t(0));
        q.enqueue(pkt(20 + i, 1250, 11), t(0));
    }
    let sent = drain(&mut q, t(0));
    assert_eq!(sent, vec![(10, 0), (20, 5_000_000), (11, 10_000_000), (21, 15_000_000)]);
}

#[test]
fn real_time_goes_first_and_link_sharing_fills_in() {
    // sc 1 Mbit/s: the first packet by its real-time curve (rtwork), the rest, at
    // the same instant, by link sharing (work only).
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "sc m2 1mbit").unwrap();
    for i in 0..3 {
        q.enqueue(pkt(i, 1000, 1), t(0));
    }
    assert_eq!(drain(&mut q, t(0)).len(), 3);
    assert_eq!(xstats(&q, 1), " period 1 work 3000 bytes rtwork 1000 bytes level 0 \n");
    // Link sharing pushed the deadline on, not the eligible time.
    let c = q.cl(1);
    assert!(!c.in_el, "an empty class leaves the eligible tree");
}

#[test]
fn without_classes_the_root_class_carries_the_traffic() {
    let mut q = hfsc(0);
    q.enqueue(Packet::new(1, 100), t(0));
    q.enqueue(Packet::new(2, 200), t(0));
    assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
    // A first class makes the root inner: its queue is purged and reported up.
    class(&mut q, 1, 0, "ls m2 1mbit").unwrap();
    let s = q.stats();
    assert_eq!((s.qlen, s.backlog, s.drops), (0, 0, 1));
    assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 200));
    // Unclassified now: dropped (default 0 names the inner root).
    assert_eq!(q.enqueue(Packet::new(3, 100), t(0)), Enqueued::Dropped);
    assert_eq!(q.stats().drops, 2);
    assert_eq!(q.class_stats(0).unwrap().packets, 1);
    assert_eq!(xstats(&q, 0), " period 0 level 1 \n");
}

#[test]
fn the_default_class_and_filters_classify() {
    let mut q = hfsc(0x10);
    class(&mut q, 1, 0, "ls m2 1mbit").unwrap();
    class(&mut q, 0x10, 1, "ls m2 1mbit").unwrap();
    assert_eq!(q.classify(&mut Packet::new(1, 100), t(0)), Ok(0x10));
    // priority naming an inner class falls through to the default.
    assert_eq!(q.classify(&mut pkt(2, 100, 1), t(0)), Ok(0x10));
    q.defcls = 1;
    assert_eq!(q.classify(&mut Packet::new(3, 100), t(0)), Err(Enqueued::Dropped));
}

#[test]
fn conservation_bytes_in_equal_out_plus_dropped_plus_backlog() {
    // A two-level tree with small leaf queues, pseudo-random arrivals to four leaves
    // (and some to no class) over 200 ms, dequeues at a fixed 20 Mbit/s pace.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "ls m2 8mbit ul m2 10mbit").unwrap();
    class(&mut q, 2, 0, "sc m1 4mbit d 5ms m2 2mbit").unwrap();
    class(&mut q, 10, 1, "rt m2 1mbit ls m2 3mbit").unwrap();
    class(&mut q, 11, 1, "ls umax 1500 dmax 10ms rate 2mbit").unwrap();
    class(&mut q, 20, 2, "rt m2 500kbit").unwrap();
    class(&mut q, 21, 2, "ls m2 1mbit").unwrap();
    for m in [10, 11, 20, 21] {
        let f = Node::new(0, H | m, Box::new(Fifo::with_limit(FifoKind::Pfifo, 8, &dev())));
        q.graft(m, Some(f), &dev()).unwrap();
    }
    let (mut inb, mut out, mut dropped) = (0u64, 0u64, 0u64);
    let mut seed = 12345u64;
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    let leaves = [10, 11, 20, 21, 7];
    let mut now = 0u64;
    let mut id = 0;
    while now < 200_000_000 {
        for _ in 0..rnd() % 3 {
            let len = 64 + rnd() % 1400;
            let m = leaves[(rnd() % 5) as usize];
            inb += len as u64;
            id += 1;
            match q.enqueue(pkt(id, len, m), Instant(now)) {
                Enqueued::Success => {}
                _ => dropped += len as u64,
            }
        }
        if let Dequeued::Packet(p) = q.dequeue(Instant(now)) {
            out += p.len as u64;
        }
        now += 500_000;
    }
    let s = q.stats();
    assert!(out > 0 && dropped > 0 && s.backlog > 0, "every path taken: {out} {dropped} {}", s.backlog);
    assert_eq!(inb, out + dropped + s.backlog as u64);
    let leaves_backlog: u64 = [10, 11, 20, 21].iter().map(|&m| q.class_stats(m).unwrap().backlog as u64).sum();
    assert_eq!(leaves_backlog, s.backlog as u64);
    let leaves_sent: u64 = [10, 11, 20, 21].iter().map(|&m| q.class_stats(m).unwrap().bytes).sum();
    assert_eq!(leaves_sent, out);
    // Work counts up the tree: each inner class has its children's.
    assert_eq!(q.cl(1).total, q.cl(10).total + q.cl(11).total);
    assert_eq!(q.cl(2).total, q.cl(20).total + q.cl(21).total);
    // A reset empties everything and zeroes the work.
    q.reset(Instant(now));
    assert_eq!((q.stats().qlen, q.cl(1).total), (0, 0));
    assert!(q.el.len() + q.dl.len() == 0 && q.cl(0).vt_tree.is_empty());
    assert_eq!(q.dequeue(Instant(now)), Dequeued::Empty);
}

#[test]
fn class_rules_and_errors() {
    let mut q = hfsc(0);
    // A real-time-only parent is upgraded to sc when it gets a child.
    class(&mut q, 1, 0, "rt m2 1mbit").unwrap();
    let w = class(&mut q, 2, 1, "sc m2 1mbit").unwrap();
    assert_eq!(w.as_deref(), Some("Forced curve change on parent 'rt' to 'sc'"));
    assert_eq!(q.cl(1).flags, RSC | FSC);
    assert_eq!((q.cl(0).level, q.cl(1).level, q.cl(2).level), (2, 1, 0));
    let busy = TcError::with_errno("HFSC class in use", Errno::EBUSY);
    assert_eq!(q.delete_class(1, t(0)).unwrap_err(), busy);
    assert_eq!(q.delete_class(0, t(0)).unwrap_err(), busy);
    assert_eq!(q.graft(1, None, &dev()).err(), Some(TcError::invalid()));
    assert_eq!(class(&mut q, 3, 9, "sc m2 1mbit").unwrap_err(), TcError::errno(Errno::ENOENT));
    let ul_only = HfscClassOpt { usc: Some(ServiceCurve { m1: 0, d: 0, m2: 1 }), ..Default::default() };
    let e = q.change_class(H | 3, H, false, Some(&Opts::new(ul_only)), &dev(), t(0)).unwrap_err();
    assert_eq!(e, TcError::invalid());
    assert_eq!(q.change_class(H | 3, H, false, None, &dev(), t(0)).unwrap_err(), TcError::invalid());
    // A change naming another parent is refused; the root takes curves too.
    assert_eq!(change(&mut q, 2, H, "sc m2 2mbit", t(0)).unwrap_err(), TcError::invalid());
    change(&mut q, 0, TC_H_ROOT, "sc m2 2mbit", t(0)).unwrap();
    assert_eq!(q.cl(0).flags, RSC | FSC);
    // A filter's class cannot go; deleting the last child makes the parent a leaf.
    q.bind_filter(H | 2);
    assert_eq!(q.delete_class(2, t(0)).unwrap_err(), busy);
    q.unbind_filter(H | 2);
    q.delete_class(2, t(0)).unwrap();
    assert_eq!((q.cl(0).level, q.cl(1).level), (1, 0));
    assert_eq!(q.class_minors().len(), 2);
}

#[test]
fn a_class_emptied_from_outside_leaves_the_schedule() {
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "sc m2 1mbit").unwrap();
    class(&mut q, 2, 0, "sc m2 1mbit").unwrap();
    q.enqueue(pkt(1, 500, 1), t(0));
    q.enqueue(pkt(2, 700, 2), t(0));
    assert!(q.cl(1).scheduled());
    // Grafting a new qdisc hands the old one (with its packet) back to be purged.
    let old = q.graft(1, None, &dev()).unwrap().unwrap();
    assert_eq!(old.stats().qlen, 1);
    assert!(!q.cl(1).scheduled());
    assert_eq!(q.cl(0).nactive, 0, "the root is never counted");
    assert_eq!(q.cl(0).vt_tree.len(), 1);
    // Deleting a backlogged leaf purges it and reports the packet up.
    q.delete_class(2, t(0)).unwrap();
    assert!(q.el.len() + q.dl.len() == 0 && q.cl(0).vt_tree.is_empty() && q.cl(0).cf_tree.is_empty());
    assert_eq!(q.take_reduce(), crate::stats::Reduce::new(1, 700));
}

#[test]
fn changing_the_curves_of_a_backlogged_class_reschedules_it() {
    // ls only, backlogged; adding rt puts it in the eligible tree at once.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "ls m2 1mbit").unwrap();
    q.enqueue(pkt(1, 1250, 1), ms(1));
    q.enqueue(pkt(2, 1250, 1), ms(1));
    assert!(!q.cl(1).in_el);
    change(&mut q, 1, H, "rt m2 2mbit", ms(2)).unwrap();
    let c = q.cl(1);
    // The curve starts at 2 ms (31,250 ticks): eligible then, deadline 5 ms later.
    assert_eq!((c.e, c.d), (31_250, 31_250 + 78_125));
    assert_eq!(q.dequeue(ms(2)).packet().unwrap().id, 1);
    assert_eq!(xstats(&q, 1), " period 1 work 1250 bytes rtwork 1250 bytes level 0 \n");
}

#[test]
fn dumps_print_the_curves_as_tc_does() {
    let mut q = hfsc(0x1a);
    class(&mut q, 1, 0, "sc rate 10mbit ul rate 20mbit").unwrap();
    class(&mut q, 2, 1, "rt m2 12345 ls m2 999kbit").unwrap();
    let show = |q: &Node<Hfsc>, m: u32| {
        let mut o = Out::text();
        q.dump_class(m, &mut o);
        o.into_string()
    };
    assert_eq!(show(&q, 1), "sc m1 0bit d 0us m2 10Mbit ul m1 0bit d 0us m2 20Mbit ");
    assert_eq!(show(&q, 2), "rt m1 0bit d 0us m2 12344bit ls m1 0bit d 0us m2 999Kbit ");
    assert_eq!(show(&q, 0), "");
    let mut o = Out::text();
    q.dump(&mut o, &dev());
    assert_eq!(o.into_string(), "default 1a ");
    assert_eq!(q.class_parent(0), Some(TC_H_ROOT));
    assert_eq!(q.class_parent(2), Some(H | 1));
}

#[test]
fn stale_eligible_nodes_keep_a_class_from_starting_again() {
    // The root class's el_node is never cleared (golden hfsc-edges): with a real-time
    // curve it is never started, so link sharing (the root as a leaf) sends, no rtwork.
    let mut q = hfsc(0);
    change(&mut q, 0, TC_H_ROOT, "rt m2 1mbit", t(0)).unwrap();
    q.enqueue(Packet::new(1, 100), ms(1));
    assert_eq!(q.dequeue(ms(1)).packet().unwrap().id, 1);
    assert_eq!(xstats(&q, 0), " period 0 level 0 \n");
    // A reset drops the eligible tree without clearing its members' nodes: a
    // real-time-only class that was in it is not started by its next packet, which
    // waits (sch_hfsc.c's hfsc_reset_class/hfsc_reset_qdisc as read; no golden).
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "rt m2 1mbit").unwrap();
    q.enqueue(pkt(1, 100, 1), t(0));
    q.reset(t(0));
    q.enqueue(pkt(2, 100, 1), ms(1));
    assert!(!q.cl(1).in_el && q.cl(1).scheduled());
    assert_eq!(q.dequeue(ms(1)), Dequeued::Empty);
    assert_eq!(q.stats().qlen, 1);
}

#[test]
fn random_operations_keep_the_books_and_the_schedule_consistent() {
    // Classes added, changed, grafted and deleted while traffic flows, with a seeded
    // generator: the qdisc's queue is always its leaves' queues, every backlogged
    // class below the root with a link-sharing curve is active in its parent's tree,
    // and nothing is left scheduled once everything is sent.
    let curves =
        ["rt m2 1mbit", "ls m2 2mbit", "sc m1 4mbit d 2ms m2 1mbit", "ls m2 3mbit ul m2 1mbit", "sc m2 500kbit"];
    for seed in 1..=20u64 {
        let mut s = seed;
        let mut rnd = move |n: u64| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) % n
        };
        let mut q = hfsc(0);
        let mut now = 0u64;
        let mut id = 0;
        for _ in 0..600 {
            let minors: Vec<u32> = q.class_minors();
            let pick = minors[rnd(minors.len() as u64) as usize];
            match rnd(10) {
                0 => {
                    let m = 1 + rnd(40) as u32;
                    let _ = class(&mut q, m, pick, curves[rnd(curves.len() as u64) as usize]);
                }
                1 => {
                    let _ = q.delete_class(pick, Instant(now));
                    let _ = q.take_reduce();
                }
                2 => {
                    let _ = change(&mut q, pick, 0, curves[rnd(curves.len() as u64) as usize], Instant(now));
                }
                3 if rnd(4) == 0 => {
                    if let Ok(Some(old)) = q.graft(pick, None, &dev()) {
                        q.stats_mut().qlen -= old.stats().qlen;
                        q.stats_mut().backlog -= old.stats().backlog;
                    }
                }
                4..=6 => {
                    id += 1;
                    let _ = q.enqueue(pkt(id, 64 + rnd(1400) as u32, pick), Instant(now));
                }
                _ => {
                    now += rnd(2_000_000);
                    let _ = q.dequeue(Instant(now));
                }
            }
            let (qlen, backlog) = q
                .class_minors()
                .iter()
                .map(|&m| q.class_stats(m).unwrap())
                .fold((0, 0), |(a, b), s| (a + s.qlen, b + s.backlog));
            assert_eq!((q.stats().qlen, q.stats().backlog), (qlen, backlog), "seed {seed}");
            for m in q.class_minors() {
                let c = q.cl(m);
                if m != 0 && c.level == 0 && c.leaf.stats().qlen > 0 && c.flags & FSC != 0 {
                    assert!(c.vt_key.is_some() && c.nactive == 1, "seed {seed}: class {m:x} backlogged but passive");
                }
            }
        }
        // Drain: whatever can never leave (a stale eligible node) is all that stays.
        let _ = drain(&mut q, Instant(now));
        for m in q.class_minors() {
            let c = q.cl(m);
            assert!(c.vt_tree.is_empty() && c.cf_tree.is_empty(), "seed {seed}: class {m:x} trees");
        }
        assert_eq!(q.el.len() + q.dl.len(), 0, "seed {seed}");
    }
}

#[test]
fn a_throttled_child_answers_with_its_own_wakeup() {
    // A tbf (1 Mbit/s, one 1000-byte burst) below a link-sharing class: hfsc picks
    // the class, the tbf has nothing yet (qdisc_warn_nonwc), and the answer is the
    // tbf's own wake-up, not an hfsc overlimit.
    let mut q = hfsc(0);
    class(&mut q, 1, 0, "ls m2 10mbit").unwrap();
    let v = argv("rate 1mbit burst 1000 limit 10000");
    let o = crate::sched::parse("tbf", &mut Args::new(&v)).unwrap();
    let tbf = crate::sched::create("tbf", o.as_ref(), &dev(), 0x2_0000, H | 1, t(0)).unwrap();
    q.graft(1, Some(Node::new(0x2_0000, H | 1, tbf)), &dev()).unwrap();
    for i in 0..2 {
        q.enqueue(pkt(i, 1000, 1), t(0));
    }
    assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 0);
    // 1000 bytes at 125,000 B/s: 8 ms.
    assert_eq!(q.dequeue(t(0)), Dequeued::Throttled { until: ms(8) });
    assert_eq!(q.stats().overlimits, 0);
    assert_eq!(q.dequeue(ms(8)).packet().unwrap().id, 1);
    // One backlog period: the class stayed active while the tbf held its packet.
    assert_eq!(xstats(&q, 1), " period 1 work 2000 bytes level 0 \n");
}

#[test]
fn link_sharing_goes_round_equal_siblings_and_fits_in_a_faster_one() {
    // Three siblings of 1 Mbit/s and one of 2 Mbit/s, all active from t=0 with vt 0
    // (ties in activation order). Each 1000-byte packet moves a class's vt by 8 ms
    // (125,000 ticks) at 1 Mbit/s, 4 ms at 2 Mbit/s: the equal ones go round at the
    // back of the vt tree's order, the faster one lands between them and is served
    // twice a round, until its four packets are gone.
    let mut q = hfsc(0);
    for m in 1..=3 {
        class(&mut q, m, 0, "ls m2 1mbit").unwrap();
    }
    class(&mut q, 4, 0, "ls m2 2mbit").unwrap();
    for m in 1..=4u32 {
        for k in 0..4 {
            q.enqueue(pkt(m as u64 * 10 + k, 1000, m), t(0));
        }
    }
    let order: Vec<u64> = drain(&mut q, t(0)).into_iter().map(|(id, _)| id).collect();
    assert_eq!(order, [10, 20, 30, 40, 41, 11, 21, 31, 42, 43, 12, 22, 32, 13, 23, 33]);
    assert_eq!((q.cl(1).vt, q.cl(4).vt), (4 * 125_000, 4 * 62_500));
}

/// Packets of one UDP flow through eth0, `gap_ms` apart, each dequeued at once.
fn send_udp(tc: &mut crate::tc::Tc, count: u64, gap_ms: u64) {
    let mut a = [0u8; 16];
    a[10..12].copy_from_slice(&[0xff, 0xff]);
    a[12..].copy_from_slice(&[10, 0, 0, 1]);
    let flow = crate::FlowKey { src: a, dst: a, sport: 1, dport: 2, proto: 17 };
    for id in 0..count {
        let now = tc.now;
        let d = tc.device_mut("eth0").unwrap();
        let _ = d.xmit(Packet::new(id, 100).with_flow(flow), now, true);
        while let Dequeued::Packet(_) = d.dequeue(now) {}
        tc.now = now + crate::Duration::from_millis(gap_ms);
    }
}

/// (packets, bytes) sent by each class of `minors` (tc's hex minors).
fn sent(tc: &crate::tc::Tc, minors: &[u32]) -> Vec<(u64, u64)> {
    let c = tc.device("eth0").unwrap().root.q.as_classful().unwrap();
    minors.iter().map(|&m| c.class_stats(m).map_or((0, 0), |s| (s.packets, s.bytes))).collect()
}

/// A Tc with eth0 after `setup`, every line of which must succeed.
fn tc_eth0(setup: &str) -> crate::tc::Tc {
    let mut tc = crate::tc::Tc::new(&[crate::tree::DevSpec::parse("eth0").unwrap()]);
    let ran = tc_lines(&mut tc, setup);
    assert!(ran.iter().all(|r| r.starts_with('0')), "{ran:?}");
    tc
}

/// Each line's exit status and stderr, as "STATUS" + stderr.
fn tc_lines(tc: &mut crate::tc::Tc, script: &str) -> Vec<String> {
    let lines = script.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.map(|l| tc.run(&crate::tc::makeargs(l))).map(|r| format!("{}{}", r.code, r.stderr.trim_end())).collect()
}

/// tdc's 8c39 by hand (goldens/kernel-6.12/hfsc-bind.json has it with matchall):
/// each u32 filter is bound while its class is a leaf below the filter's class
/// (hfsc_bind_tcf), so once 1:2 and 1:3 have children the walk still goes 1:1 ->
/// 1:2 -> 1:3 -> 1:31, past the level check an unbound result gets. A delete of the
/// held class is refused and unbinds the filter, so the next one takes it; the
/// filter's unbound result then finds no class and the default 1:30 gets the
/// packets, until 1:31 is made again and bound again. A filter of a leaf's block
/// (1:30) binds nothing: its class can go at once.
#[test]
fn bound_filters_walk_past_the_level_check() {
    let m = "u32 match u8 0 0 at 0 flowid";
    let setup = format!(
        "qdisc add dev eth0 root handle 1: hfsc default 30
        class add dev eth0 parent 1: classid 1:1 hfsc rt m2 10mbit
        class add dev eth0 parent 1:1 classid 1:10 hfsc rt m2 5mbit
        class add dev eth0 parent 1: classid 1:2 hfsc rt m2 10mbit
        filter add dev eth0 parent 1: protocol ip prio 1 {m} 1:1
        filter add dev eth0 parent 1:1 protocol ip prio 1 {m} 1:2
        class add dev eth0 parent 1:2 classid 1:20 hfsc rt m2 1mbit
        class add dev eth0 parent 1: classid 1:3 hfsc rt m2 10mbit
        filter add dev eth0 parent 1:2 protocol ip prio 1 {m} 1:3
        class add dev eth0 parent 1:3 classid 1:30 hfsc rt m2 1mbit
        class add dev eth0 parent 1:3 classid 1:31 hfsc rt m2 10mbit
        filter add dev eth0 parent 1:3 protocol ip prio 1 {m} 1:31"
    );
    let mut tc = tc_eth0(&setup);
    let classes = [0x1, 0x2, 0x3, 0x10, 0x20, 0x30, 0x31];
    send_udp(&mut tc, 4, 1);
    assert_eq!(sent(&tc, &classes), [(0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (4, 400)]);
    let busy = "2Error: HFSC class in use.";
    assert_eq!(tc_lines(&mut tc, "class del dev eth0 classid 1:31\nclass del dev eth0 classid 1:31"), [busy, "0"]);
    send_udp(&mut tc, 2, 1);
    assert_eq!(sent(&tc, &[0x30, 0x31]), [(2, 200), (0, 0)]);
    assert_eq!(tc_lines(&mut tc, "class add dev eth0 parent 1:3 classid 1:31 hfsc rt m2 10mbit"), ["0"]);
    send_udp(&mut tc, 3, 1);
    assert_eq!(sent(&tc, &[0x30, 0x31]), [(2, 200), (3, 300)]);
    let lateral =
        format!("filter add dev eth0 parent 1:30 protocol ip prio 1 {m} 1:20\nclass del dev eth0 classid 1:20");
    assert_eq!(tc_lines(&mut tc, &lateral), ["0", "0"]);
}

/// Bound results made while the levels were others can name each other's classes:
/// 1:1's filter bound 1:2 while 1:2 was a leaf, 1:2's bound 1:1 once 1:2 stood two
/// levels up. The kernel's hfsc_classify would go round 1:1 -> 1:2 -> 1:1 for ever;
/// here a walk longer than the classes are many fails, and the default class takes
/// the packet.
#[test]
fn a_circle_of_bound_filters_ends_at_the_default_class() {
    let m = "protocol all prio 1 matchall classid";
    let setup = format!(
        "qdisc add dev eth0 root handle 1: hfsc default 9
        class add dev eth0 parent 1: classid 1:1 hfsc sc m2 10mbit
        class add dev eth0 parent 1:1 classid 1:10 hfsc sc m2 10mbit
        class add dev eth0 parent 1: classid 1:2 hfsc sc m2 10mbit
        class add dev eth0 parent 1: classid 1:9 hfsc sc m2 10mbit
        filter add dev eth0 parent 1: {m} 1:1
        filter add dev eth0 parent 1:1 {m} 1:2
        class add dev eth0 parent 1:2 classid 1:20 hfsc sc m2 10mbit
        class add dev eth0 parent 1:20 classid 1:21 hfsc sc m2 10mbit
        filter add dev eth0 parent 1:2 {m} 1:1"
    );
    let mut tc = tc_eth0(&setup);
    send_udp(&mut tc, 1, 1);
    assert_eq!(sent(&tc, &[0x9, 0x10, 0x21]), [(1, 100), (0, 0), (0, 0)]);
}
