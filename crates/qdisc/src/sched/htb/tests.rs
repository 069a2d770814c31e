//! htb's unit tests.

use super::parse::USAGE;
use super::*;
use crate::stats::Reduce;
use crate::testing::{argv, dev, held, t};

const H: u32 = 0x1_0000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn qopt(s: &str) -> Result<HtbOpt, TcError> {
    let v = argv(s);
    parse(&mut Args::new(&v))
}
fn copt(s: &str) -> Result<HtbClassOpt, TcError> {
    let v = argv(s);
    parse_class(&mut Args::new(&v))
}
fn htb(s: &str) -> Node<Htb> {
    held(Htb::new(&qopt(s).unwrap(), &dev(), H, TC_H_ROOT, t(0)).unwrap())
}
/// `class add … parent H:parent classid H:minor htb OPTS` (parent 0 = the qdisc).
fn add(q: &mut Node<Htb>, parent: u32, minor: u32, opts: &str, now: u64) -> Result<Option<String>, TcError> {
    let o = Opts::new(copt(opts).unwrap());
    q.change_class(H | minor, H | parent, false, Some(&o), &dev(), t(now))
}
fn change(q: &mut Node<Htb>, minor: u32, opts: &str, now: u64) -> Result<Option<String>, TcError> {
    let o = Opts::new(copt(opts).unwrap());
    q.change_class(H | minor, 0, true, Some(&o), &dev(), t(now))
}
fn pkt(id: u64, len: u32, classid: u32) -> Packet {
    Packet::new(id, len).with_priority(classid)
}
fn leaf_qlen(q: &Htb, minor: u32) -> u32 {
    q.leaf(minor).unwrap().stats().qlen
}

// ---- parsing and printing -------------------------------------------------------------

#[test]
fn qdisc_options_parse_like_tc() {
    assert_eq!(qopt("").unwrap(), HtbOpt::default());
    let o = qopt("default 1ff r2q 5 direct_qlen 7 debug 0123").unwrap();
    assert_eq!((o.defcls, o.rate2quantum, o.direct_qlen, o.debug), (0x1ff, 5, Some(7), 0b11_10_01_00));
    assert_eq!(qopt("default 0x10").unwrap().defcls, 0x10);
    assert_eq!(
        qopt("def 10 r 2 dir 3 off").unwrap(),
        HtbOpt { defcls: 0x10, rate2quantum: 2, direct_qlen: Some(3), offload: true, ..HtbOpt::default() }
    );
    assert_eq!(qopt("r2q abc").unwrap_err(), TcError::tc(format!("Illegal \"r2q\"\n{USAGE}")));
    assert_eq!(qopt("direct_qlen -1").unwrap_err(), TcError::tc(format!("Illegal \"direct_qlen\"\n{USAGE}")));
    assert_eq!(qopt("foo").unwrap_err(), TcError::tc(format!("What is \"foo\"?\n{USAGE}")));
    assert_eq!(qopt("r2q").unwrap_err(), TcError::incomplete());
}

#[test]
fn class_options_parse_like_tc() {
    let o = copt("rate 1mbit").unwrap();
    assert_eq!((o.rate.rate, o.ceil.rate), (125_000, 125_000));
    // burst = rate/1e9 + mtu = 1600 bytes = 12.8 ms = 200000 ticks.
    assert_eq!((o.buffer, o.cbuffer), (200_000, 200_000));
    assert_eq!((o.rate.cell_log, o.rate.cell_align, o.quantum, o.prio), (3, -1, 0, 0));
    let o = copt("rate 10gbit ceil 100gbit prio 3 quantum 1500 mpu 64 overhead 4 linklayer atm burst 10k/16").unwrap();
    assert_eq!((o.rate.rate, o.rate64, o.ceil64), (1_250_000_000, None, Some(12_500_000_000)));
    assert_eq!(o.ceil.rate, u32::MAX);
    assert_eq!((o.prio, o.quantum, o.rate.mpu, o.ceil.overhead, o.rate.cell_log), (3, 1500, 64, 4, 4));
    assert_eq!(o.rate.linklayer, LinkLayer::Atm);
    // `rate 8bit`: the default burst's tick count wraps in tc's unsigned int.
    assert_eq!(copt("rate 8bit").unwrap().buffer, 3_525_163_520);
    let e = |s: &str| copt(s).unwrap_err().msg;
    assert_eq!(e("ceil 1mbit"), "\"rate\" is required.\n");
    assert_eq!(e("rate 1mbit rate 2mbit"), "Double \"rate\" spec\n");
    assert_eq!(e("rate 1mbit prio -1"), format!("Illegal \"prio\"\n{USAGE}"));
    assert_eq!(e("rate 1mbit mpu 70000"), format!("Illegal \"mpu\"\n{USAGE}"));
    assert_eq!(e("rate 1mbit burst 10k/7"), format!("Illegal \"burst\"\n{USAGE}"));
    assert_eq!(e("help"), USAGE);
}

#[test]
fn qdisc_and_class_lines_print_like_tc() {
    let mut q = htb("default 10");
    add(&mut q, 0, 1, "rate 10mbit", 0).unwrap();
    add(&mut q, 1, 0x10, "rate 1mbit ceil 2mbit", 0).unwrap();
    let mut o = Out::text();
    q.dump(&mut o, &dev());
    assert_eq!(o.into_string(), "r2q 10 default 0x10 direct_packets_stat 0 direct_qlen 1000");
    let mut o = Out::text();
    q.dump_class(0x10, &mut o);
    assert_eq!(o.into_string(), "prio 0 rate 1Mbit ceil 2Mbit burst 1600b cburst 1600b");
    let mut o = Out::text();
    q.dump_class(1, &mut o);
    assert_eq!(o.into_string(), "rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b");
    let mut o = Out::text();
    q.dump_class_xstats(0x10, &mut o);
    // 1600 B at 1 Mbit/s = 12.8 ms = 200000 ticks; at 2 Mbit/s 100000.
    assert_eq!(o.into_string(), " lended: 0 borrowed: 0 giants: 0\n tokens: 200000 ctokens: 100000\n");
    assert_eq!(q.class_parent(0x10), Some(H | 1));
    assert_eq!(q.class_parent(1), Some(TC_H_ROOT));
}

// ---- tokens, modes and the watchdog -------------------------------------------------

#[test]
fn exact_tokens_after_each_dequeue() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
    let full = 12_800_000; // 1600 B at 125000 B/s
    assert_eq!(q.tokens(1), Some((full, full)));
    for id in 0..3 {
        assert_eq!(q.enqueue(pkt(id, 1000, H | 1), t(0)), Enqueued::Success);
    }
    // 1000 B cost 8 ms.
    assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 0);
    assert_eq!(q.tokens(1), Some((4_800_000, 4_800_000)));
    assert_eq!(q.mode(1), Some(Mode::CanSend));
    assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
    assert_eq!(q.tokens(1), Some((-3_200_000, -3_200_000)));
    assert_eq!(q.mode(1), Some(Mode::CantSend));
    assert_eq!((q.stats().overlimits, q.class_stats(1).unwrap().overlimits), (1, 1));
    // Nothing may leave before the ceil bucket is back at zero.
    assert_eq!(q.dequeue(t(MS)), Dequeued::Throttled { until: t(3_200_000) });
    assert_eq!(q.watchdog(), Some(t(3_200_000)));
    assert_eq!(q.dequeue(t(3_200_000)).packet().unwrap().id, 2);
    assert_eq!(q.tokens(1), Some((-8_000_000, -8_000_000)));
    assert_eq!(q.lends_borrows(1), Some((3, 0)));
    assert_eq!(q.dequeue(t(3_200_000)), Dequeued::Empty);
    assert_eq!(q.watchdog(), None);
    let mut o = Out::text();
    q.dump_class_xstats(1, &mut o);
    assert_eq!(o.into_string(), " lended: 3 borrowed: 0 giants: 0\n tokens: -125000 ctokens: -125000\n");
    // Idle for a long time: the buckets fill up to their size, no further.
    q.enqueue(pkt(9, 1000, H | 1), t(10 * SEC));
    q.dequeue(t(10 * SEC)).packet().unwrap();
    assert_eq!(q.tokens(1), Some((full - 8_000_000, full - 8_000_000)));
}

#[test]
fn debt_is_floored_at_mbuffer() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 8bit burst 100 cburst 100", 0).unwrap();
    q.enqueue(pkt(1, 1000, H | 1), t(0));
    q.dequeue(t(5)).packet().unwrap();
    // 100 s of credit minus 1000 s of cost, floored at 1 − 60 s.
    assert_eq!(q.tokens(1), Some((1 - MBUFFER_NS, 1 - MBUFFER_NS)));
    let mut o = Out::text();
    q.dump_class_xstats(1, &mut o);
    assert_eq!(o.into_string(), " lended: 1 borrowed: 0 giants: 0\n tokens: -937500000 ctokens: -937500000\n");
}

/// Keep every listed leaf backlogged and dequeue as fast as htb allows for
/// `secs` of virtual time; bytes sent per leaf.
fn saturate(q: &mut Node<Htb>, leaves: &[u32], len: u32, secs: u64) -> Vec<u64> {
    let mut bytes = vec![0u64; leaves.len()];
    let mut now = 0u64;
    let mut id = 0;
    while now < secs * SEC {
        for &m in leaves {
            while leaf_qlen(q, m) < 8 {
                q.enqueue(pkt(id, len, H | m), t(now));
                id += 1;
            }
        }
        match q.dequeue(t(now)) {
            Dequeued::Packet(p) => {
                let i = leaves.iter().position(|&m| H | m == p.priority).unwrap();
                bytes[i] += p.len as u64;
            }
            Dequeued::Throttled { until } => {
                assert!(until > t(now), "throttled into the past");
                now = until.as_nanos();
            }
            Dequeued::Empty => panic!("backlogged htb reported empty"),
        }
    }
    bytes
}

#[test]
fn a_class_sends_its_rate_over_ten_seconds() {
    for (rate, bps) in [("10mbit", 1_250_000u64), ("1mbit", 125_000), ("100mbit", 12_500_000)] {
        let mut q = htb("");
        add(&mut q, 0, 1, &format!("rate {rate}"), 0).unwrap();
        let got = saturate(&mut q, &[1], 1500, 10)[0] as f64;
        let want = (bps * 10) as f64;
        assert!((got - want).abs() / want < 0.005, "{rate}: sent {got} B, want {want} B");
    }
}

#[test]
fn children_share_by_rate_and_borrow_the_rest() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 100mbit ceil 100mbit", 0).unwrap();
    // Explicit quanta in the ratio of the rates, so the spare 10 Mbit/s is lent 1:2.
    add(&mut q, 1, 0x10, "rate 30mbit ceil 100mbit quantum 3000", 0).unwrap();
    add(&mut q, 1, 0x20, "rate 60mbit ceil 100mbit quantum 6000", 0).unwrap();
    let b = saturate(&mut q, &[0x10, 0x20], 1500, 10);
    let (a, c) = (b[0] as f64 * 8.0 / 10.0 / 1e6, b[1] as f64 * 8.0 / 10.0 / 1e6);
    assert!((a + c - 100.0).abs() < 0.5, "total {} Mbit/s", a + c);
    assert!(a > 30.0 && c > 60.0, "each gets at least its rate: {a} {c}");
    assert!((a - 33.3).abs() < 1.0 && (c - 66.7).abs() < 1.0, "split {a} / {c}");
    let (l10, b10) = q.lends_borrows(0x10).unwrap();
    let (l20, b20) = q.lends_borrows(0x20).unwrap();
    assert!(l10 > 0 && b10 > 0 && l20 > 0 && b20 > 0);
    // The parent lent to both (charged at its own level for borrowed packets).
    assert_eq!(q.lends_borrows(1).unwrap().0, b10 + b20);
    // With the quanta from r2q (both capped at 200000) the spare is split evenly.
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 100mbit ceil 100mbit", 0).unwrap();
    add(&mut q, 1, 0x10, "rate 30mbit ceil 100mbit", 0).unwrap();
    add(&mut q, 1, 0x20, "rate 60mbit ceil 100mbit", 0).unwrap();
    let b = saturate(&mut q, &[0x10, 0x20], 1500, 10);
    let (a, c) = (b[0] as f64 * 8.0 / 1e7, b[1] as f64 * 8.0 / 1e7);
    assert!((a - 35.0).abs() < 1.0 && (c - 65.0).abs() < 1.0, "split {a} / {c}");
}

#[test]
fn ceil_caps_a_lone_borrower() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 100mbit", 0).unwrap();
    add(&mut q, 1, 0x10, "rate 10mbit ceil 40mbit", 0).unwrap();
    let got = saturate(&mut q, &[0x10], 1500, 10)[0] as f64 * 8.0 / 1e7;
    assert!((got - 40.0).abs() < 0.2, "{got} Mbit/s");
}

#[test]
fn lower_prio_value_is_served_first() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1gbit", 0).unwrap();
    add(&mut q, 1, 0x10, "rate 100mbit ceil 1gbit prio 1", 0).unwrap();
    add(&mut q, 1, 0x20, "rate 100mbit ceil 1gbit prio 0", 0).unwrap();
    for id in 0..4 {
        q.enqueue(pkt(id, 100, H | 0x10), t(0));
    }
    for id in 10..14 {
        q.enqueue(pkt(id, 100, H | 0x20), t(0));
    }
    let order: Vec<u64> = (0..8).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
    assert_eq!(order, vec![10, 11, 12, 13, 0, 1, 2, 3]);
}

#[test]
fn equal_prio_leaves_round_robin_by_quantum() {
    let mut q = htb("");
    add(&mut q, 0, 0x10, "rate 1gbit burst 100k cburst 100k quantum 1000", 0).unwrap();
    add(&mut q, 0, 0x20, "rate 1gbit burst 100k cburst 100k quantum 2000", 0).unwrap();
    for id in 0..6 {
        q.enqueue(pkt(id, 1000, H | 0x10), t(0));
        q.enqueue(pkt(100 + id, 1000, H | 0x20), t(0));
    }
    let order: Vec<u64> = (0..9).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
    // The deficit is charged after sending and the turn passes once it goes
    // negative: 1:10 sends one 1000-byte packet per turn, 1:20 (after its first
    // turn) two.
    assert_eq!(order, vec![0, 100, 1, 101, 102, 2, 103, 104, 3]);
}

// ---- classification ---------------------------------------------------------------------

#[test]
fn default_class_and_direct_queue() {
    let mut q = htb("default 20");
    add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
    add(&mut q, 1, 0x20, "rate 1mbit", 0).unwrap();
    add(&mut q, 1, 0x30, "rate 1mbit", 0).unwrap();
    assert_eq!(q.classify(&mut pkt(0, 100, 0), Instant::ZERO), Target::Class(0x20));
    assert_eq!(q.classify(&mut pkt(0, 100, 7), Instant::ZERO), Target::Class(0x20));
    assert_eq!(q.classify(&mut pkt(0, 100, H), Instant::ZERO), Target::Direct);
    assert_eq!(q.classify(&mut pkt(0, 100, H | 0x30), Instant::ZERO), Target::Class(0x30));
    // An inner class or a foreign major falls back to the default class.
    assert_eq!(q.classify(&mut pkt(0, 100, H | 1), Instant::ZERO), Target::Class(0x20));
    assert_eq!(q.classify(&mut pkt(0, 100, 0x2_0030), Instant::ZERO), Target::Class(0x20));
    // No default (or an inner one): the direct queue.
    let mut q2 = htb("default 1");
    add(&mut q2, 0, 1, "rate 1mbit", 0).unwrap();
    add(&mut q2, 1, 2, "rate 1mbit", 0).unwrap();
    assert_eq!(q2.classify(&mut pkt(0, 100, 0), Instant::ZERO), Target::Direct);
    let q3 = htb("");
    assert_eq!(q3.classify(&mut pkt(0, 100, 0), Instant::ZERO), Target::Direct);
}

#[test]
fn direct_queue_is_unshaped_and_bounded() {
    let mut q = htb("direct_qlen 3");
    add(&mut q, 0, 1, "rate 8bit", 0).unwrap();
    for id in 0..5 {
        let r = q.enqueue(pkt(id, 1000, 0), t(0));
        assert_eq!(r, if id < 3 { Enqueued::Success } else { Enqueued::Dropped });
    }
    q.enqueue(pkt(9, 1000, H | 1), t(0));
    assert_eq!((q.stats().qlen, q.stats().drops, q.direct_packets()), (4, 2, 3));
    // Direct packets first, whatever the shaping says.
    let ids: Vec<u64> = (0..4).map(|_| q.dequeue(t(0)).packet().unwrap().id).collect();
    assert_eq!(ids, vec![0, 1, 2, 9]);
    assert!(matches!(q.dequeue(t(0)), Dequeued::Empty));
}

#[test]
fn atm_linklayer_rounds_to_cells() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1mbit linklayer atm burst 10k cburst 10k", 0).unwrap();
    let full = 81_920_000;
    q.enqueue(pkt(1, 49, H | 1), t(0));
    q.dequeue(t(0)).packet().unwrap();
    // 49 bytes are two cells: 106 wire bytes at 8000 ns each.
    assert_eq!(q.tokens(1), Some((full - 106 * 8000, full - 106 * 8000)));
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1mbit linklayer atm overhead 10 mpu 96 burst 10k cburst 10k", 0).unwrap();
    q.enqueue(pkt(1, 20, H | 1), t(0));
    q.dequeue(t(0)).packet().unwrap();
    // 20 + 10 → mpu 96 → 2 cells.
    assert_eq!(q.tokens(1), Some((full - 106 * 8000, full - 106 * 8000)));
}

// ---- class management ---------------------------------------------------------------------

#[test]
fn quantum_warnings_and_clamps() {
    let mut q = htb("");
    assert_eq!(
        add(&mut q, 0, 1, "rate 100mbit", 0).unwrap().as_deref(),
        Some("sch_htb: quantum of class 10001 is big. Consider r2q change.")
    );
    assert_eq!(q.quantum(1), Some(200_000));
    assert_eq!(
        add(&mut q, 0, 0xab, "rate 10kbit", 0).unwrap().as_deref(),
        Some("sch_htb: quantum of class 100AB is small. Consider r2q change.")
    );
    assert_eq!(q.quantum(0xab), Some(1000));
    assert_eq!(add(&mut q, 0, 2, "rate 10kbit quantum 100", 0).unwrap(), None);
    assert_eq!(q.quantum(2), Some(100));
    assert_eq!(add(&mut q, 0, 3, "rate 10mbit", 0).unwrap(), None);
    assert_eq!(q.quantum(3), Some(125_000));
    // Inner classes keep their quantum and print no warning on change.
    add(&mut q, 3, 0x30, "rate 1mbit", 0).unwrap();
    assert_eq!(change(&mut q, 3, "rate 1gbit", 0).unwrap(), None);
    assert_eq!(q.quantum(3), Some(125_000));
}

#[test]
fn class_change_keeps_queued_packets() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
    for id in 0..5 {
        q.enqueue(pkt(id, 1000, H | 1), t(0));
    }
    q.dequeue(t(0)).packet().unwrap();
    let before = q.tokens(1);
    change(&mut q, 1, "rate 100mbit burst 20k prio 3", 0).unwrap();
    assert_eq!((leaf_qlen(&q, 1), q.stats().qlen, q.stats().drops), (4, 4, 0));
    // Buckets are kept; their sizes and the rate change.
    assert_eq!(q.tokens(1), before);
    let mut now = SEC;
    let mut ids = Vec::new();
    loop {
        match q.dequeue(t(now)) {
            Dequeued::Packet(p) => ids.push(p.id),
            Dequeued::Throttled { until } => now = until.as_nanos(),
            Dequeued::Empty => break,
        }
    }
    assert_eq!(ids, vec![1, 2, 3, 4]);
    assert_eq!(q.class_stats(1).unwrap().packets, 5);
}

#[test]
fn leaf_to_inner_purges_and_back() {
    let mut q = htb("default 10");
    add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
    add(&mut q, 1, 0x10, "rate 8bit burst 100 cburst 100", 0).unwrap();
    for id in 0..3 {
        q.enqueue(pkt(id, 1000, 0), t(0));
    }
    q.dequeue(t(1)).packet().unwrap();
    assert_eq!(q.mode(0x10), Some(Mode::CantSend));
    add(&mut q, 0x10, 0x100, "rate 1mbit", 10).unwrap();
    assert_eq!(q.level(0x10), Some(6));
    assert_eq!(q.mode(0x10), Some(Mode::CanSend));
    assert!(q.leaf(0x10).is_none() && q.find(0x10));
    assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (0, 0, 2));
    assert_eq!(q.take_reduce(), Reduce::new(2, 2000));
    // The default class is inner now: traffic goes direct.
    assert_eq!(q.classify(&mut pkt(0, 1, 0), Instant::ZERO), Target::Direct);
    // Busy while it has a child; deleting the child makes it a leaf with full buckets.
    assert_eq!(q.delete_class(0x10, t(20)).unwrap_err(), TcError::kernel("HTB class in use"));
    q.delete_class(0x100, t(20)).unwrap();
    assert_eq!(q.level(0x10), Some(0));
    assert_eq!(q.tokens(0x10), Some((100 * SEC as i64, 100 * SEC as i64)));
    let n = q.leaf(0x10).unwrap();
    assert_eq!((n.handle, n.parent, n.kind(), n.hashed()), (0, H | 0x10, "pfifo", false));
    assert_eq!(q.classify(&mut pkt(0, 1, 0), Instant::ZERO), Target::Class(0x10));
    // Bound filters keep a class busy too.
    assert!(q.bind_filter(H | 0x10));
    assert_eq!(q.delete_class(0x10, t(30)).unwrap_err(), TcError::kernel("HTB class in use"));
    q.unbind_filter(H | 0x10);
    q.delete_class(0x10, t(30)).unwrap();
    assert_eq!(q.class_minors(), vec![1]);
    assert_eq!(q.level(1), Some(0));
}

#[test]
fn tree_depth_is_limited_to_eight_levels() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 100mbit", 0).unwrap();
    for m in 2..=8 {
        add(&mut q, m - 1, m, "rate 10mbit ceil 100mbit", 0).unwrap();
    }
    assert_eq!(add(&mut q, 8, 9, "rate 1mbit", 0).unwrap_err(), TcError::kernel("sch_htb: tree is too deep"));
    let levels: Vec<usize> = (1..=8).map(|m| q.level(m).unwrap()).collect();
    assert_eq!(levels, vec![7, 6, 5, 4, 3, 2, 1, 0]);
    // The bottom leaf borrows its ceil through seven ancestors.
    let got = saturate(&mut q, &[8], 1500, 2)[0] as f64 * 8.0 / 2e6;
    assert!((got - 100.0).abs() < 1.0, "{got} Mbit/s");
    let (l, b) = q.lends_borrows(8).unwrap();
    assert!(l > 0 && b > 0);
    assert_eq!(q.lends_borrows(1).unwrap().1, 0);
}

#[test]
fn class_errors() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
    assert_eq!(add(&mut q, 0, 1, "rate 1mbit", 0).unwrap_err(), TcError::invalid());
    assert_eq!(
        q.change_class(0, H, false, Some(&Opts::new(copt("rate 1mbit").unwrap())), &dev(), t(0)),
        Err(TcError::invalid())
    );
    assert_eq!(q.change_class(H | 1, H, true, None, &dev(), t(0)), Err(TcError::invalid()));
    // An unknown parent makes a root class, as in the kernel.
    add(&mut q, 0x99, 0x20, "rate 1mbit", 0).unwrap();
    assert_eq!(q.class_parent(0x20), Some(TC_H_ROOT));
    assert_eq!(q.graft(1, None, &dev()).unwrap().unwrap().kind(), "pfifo");
    add(&mut q, 1, 2, "rate 1mbit", 0).unwrap();
    assert_eq!(q.graft(1, None, &dev()).err(), Some(TcError::invalid()));
    assert_eq!(
        q.change(&Opts::new(()), &dev(), t(0)).unwrap_err().msg,
        "Error: Change operation not supported by specified qdisc.\n"
    );
    assert!(Htb::new(&qopt("offload").unwrap(), &dev(), H, TC_H_ROOT, t(0)).is_err());
}

#[test]
fn walk_follows_the_kernel_class_hash() {
    let mut q = htb("");
    for m in [1, 2, 3] {
        add(&mut q, 0, m, "rate 1mbit", 0).unwrap();
    }
    // Four buckets: 1:1 → 1, 1:2 → 2, 1:3 → 3 (bucket = (id ^ id>>8 ^ …) & 3).
    assert_eq!(q.class_minors(), vec![1, 2, 3]);
    add(&mut q, 0, 5, "rate 1mbit", 0).unwrap();
    // 4 classes > 3/4 of 4 buckets: grown to 8.
    assert_eq!(q.hash.buckets.len(), 8);
    add(&mut q, 0, 0x11, "rate 1mbit", 0).unwrap();
    let m = q.class_minors();
    assert_eq!(m.len(), 5);
    let mut sorted = m.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 3, 5, 0x11]);
}

#[test]
fn reset_empties_without_drops() {
    let mut q = htb("default 1");
    add(&mut q, 0, 1, "rate 8bit", 0).unwrap();
    for id in 0..4 {
        q.enqueue(pkt(id, 500, 0), t(0));
        q.enqueue(pkt(id, 500, H), t(0));
    }
    q.dequeue(t(0)).packet().unwrap();
    q.reset(t(1));
    assert_eq!((q.stats().qlen, q.stats().backlog, q.stats().drops), (0, 0, 0));
    assert_eq!(q.dequeue(t(2)), Dequeued::Empty);
    q.enqueue(pkt(1, 500, 0), t(3));
    assert_eq!(q.stats().qlen, 1);
}

#[test]
fn peek_parks_the_next_packet() {
    let mut q = htb("");
    add(&mut q, 0, 1, "rate 1mbit", 0).unwrap();
    q.enqueue(pkt(1, 1000, H | 1), t(0));
    q.enqueue(pkt(2, 1000, H | 1), t(0));
    assert_eq!(q.peek(t(0)).unwrap().id, 1);
    assert_eq!(q.stats().qlen, 2);
    assert_eq!(q.dequeue(t(0)).packet().unwrap().id, 1);
    assert_eq!(q.stats().qlen, 1);
}

/// A `tc -batch` of `n` leaf classes under one root class (plus a grafted leaf
/// qdisc each when `leaf` is given).
pub(crate) fn batch(n: u32, leaf: Option<&str>) -> String {
    let mut b = String::from(
        "qdisc add dev eth0 root handle 1: htb default 2\nclass add dev eth0 parent 1: classid 1:1 htb rate 100gbit\n",
    );
    for i in 0..n {
        let m = i + 2;
        b.push_str(&format!("class add dev eth0 parent 1:1 classid 1:{m:x} htb rate 1mbit ceil 10gbit\n"));
        if let Some(l) = leaf {
            b.push_str(&format!("qdisc add dev eth0 parent 1:{m:x} handle {m:x}: {l}\n"));
        }
    }
    b
}

/// Scale: build a 10,000-class tree from a batch, list it, and push traffic
/// through every leaf (0.4 s in release, as CI runs it).
/// `cargo test -p qdisc --release --lib htb_scale -- --nocapture`
#[test]
fn htb_scale_10k_classes() {
    use crate::tc::{Tc, TcOpts};
    use crate::tree::DevSpec;
    for leaf in [None, Some("pfifo limit 100"), Some("fq_codel")] {
        let text = batch(10_000, leaf);
        let mut tc = Tc::new(&[DevSpec::new("eth0")]);
        let t0 = std::time::Instant::now();
        let out = tc.batch(&text, "scale", TcOpts::default(), false);
        let build = t0.elapsed();
        assert_eq!(out.code, 0, "{}", out.stderr);
        let t1 = std::time::Instant::now();
        let shown = tc.run(&argv("-s class show dev eth0"));
        let show = t1.elapsed();
        assert_eq!(shown.stdout.matches("class htb").count(), 10_001);
        let d = &mut tc.devices[0];
        let t2 = std::time::Instant::now();
        let n = 1_000_000u64;
        let mut now = 0u64;
        let mut out = 0u64;
        for i in 0..n {
            let m = (i % 10_000) as u32 + 2;
            d.enqueue(pkt(i, 1000, H | m), t(now));
            now += 100;
            if let Dequeued::Packet(_) = d.dequeue(t(now)) {
                out += 1;
            }
        }
        let per_pkt = t2.elapsed().as_nanos() as f64 / n as f64;
        // 80 Gbit/s offered under a 100 Gbit/s root: every packet leaves but the
        // last one or two, and the round robin reaches every leaf.
        let root = &d.root;
        assert_eq!((root.stats().drops, out + root.stats().qlen as u64), (0, n));
        assert!(n - out <= 2, "{} packets still queued", n - out);
        let htb = root.q.as_classful().unwrap();
        let idle = (2..10_002u32).filter(|&m| htb.class_stats(m).unwrap().packets == 0).count();
        assert_eq!(idle, 0, "leaves that sent nothing");
        eprintln!(
            "10k classes (leaf: {}): batch build {:?} ({} lines), -s class show {:?}, enqueue+dequeue {:.0} ns/packet",
            leaf.unwrap_or("default pfifo"),
            build,
            text.lines().count(),
            show,
            per_pkt
        );
    }
}

#[test]
fn conservation_with_random_traffic_and_tree_changes() {
    let mut d = dev();
    d.tx_queue_len = 4;
    let mut q = held(Htb::new(&qopt("default 20 direct_qlen 3").unwrap(), &d, H, TC_H_ROOT, t(0)).unwrap());
    let o = |s: &str| Opts::new(copt(s).unwrap());
    q.change_class(H | 1, H, false, Some(&o("rate 2mbit ceil 4mbit")), &d, t(0)).unwrap();
    q.change_class(H | 0x10, H | 1, false, Some(&o("rate 1mbit ceil 4mbit prio 1")), &d, t(0)).unwrap();
    q.change_class(H | 0x20, H | 1, false, Some(&o("rate 500kbit ceil 3mbit")), &d, t(0)).unwrap();
    let (mut in_p, mut out_p, mut reduced) = (0u64, 0u64, 0i64);
    let mut x: u64 = 99;
    let mut now = 0u64;
    for i in 0..20_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let len = 60 + (x >> 33) as u32 % 1400;
        let target = [0, H, H | 0x10, H | 0x20, H | 1][(x >> 20) as usize % 5];
        in_p += 1;
        q.enqueue(pkt(i, len, target), t(now));
        now += (x >> 40) % 2_000_000;
        for _ in 0..(x >> 50) % 3 {
            if let Dequeued::Packet(_) = q.dequeue(t(now)) {
                out_p += 1;
            }
        }
        match (x >> 12) % 997 {
            0 => {
                let _ = q.change_class(H | 0x200, H | 0x20, false, Some(&o("rate 1mbit")), &d, t(now));
            }
            1 => {
                let _ = q.delete_class(0x200, t(now));
            }
            2 => {
                let _ = q.change_class(H | 0x10, 0, true, Some(&o("rate 3mbit prio 0")), &d, t(now));
            }
            _ => {}
        }
        reduced += q.take_reduce().pkts as i64;
        let s = q.stats();
        assert_eq!(in_p, out_p + s.drops as u64 + s.qlen as u64, "step {i}");
        // Class backlogs plus the direct queue add up to the qdisc's.
        let leaves: u32 = q.class_minors().iter().filter_map(|&m| q.leaf(m)).map(|n| n.stats().qlen).sum();
        assert_eq!(leaves + q.direct.len() as u32, s.qlen, "step {i}");
    }
    assert!(reduced > 0 && q.stats().drops > 0 && out_p > 1000);
    // Drain.
    for _ in 0..1_000_000 {
        match q.dequeue(t(now)) {
            Dequeued::Packet(_) => out_p += 1,
            Dequeued::Throttled { until } => now = until.as_nanos(),
            Dequeued::Empty => break,
        }
    }
    assert_eq!(q.stats().qlen, 0);
    assert_eq!(in_p, out_p + q.stats().drops as u64);
}

#[test]
fn minor_set_and_wait_queue_agree_with_ordered_collections() {
    use std::collections::BTreeSet;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let (mut s, mut b) = (MinorSet::default(), BTreeSet::new());
    for i in 0..200_000u64 {
        // Clustered and spread minors, the edges included.
        let x = match i % 3 {
            0 => next(0x10000) as u32,
            1 => 0x100 + next(300) as u32,
            _ => [0, 63, 64, 4095, 4096, 0xFFFF][next(6) as usize],
        };
        if next(2) == 0 {
            s.insert(x);
            b.insert(x);
        } else {
            s.remove(x);
            b.remove(&x);
        }
        let q = next(0x10001) as u32;
        assert_eq!(s.ceil(q), b.range(q..).next().copied());
        assert_eq!(s.next_after(x), b.range(x + 1..).next().copied());
        assert_eq!((s.first(), s.len(), s.contains(x)), (b.first().copied(), b.len(), b.contains(&x)));
    }
    // The wait queue pops in (key, insertion) order whatever is erased in between, with
    // keys near and far (so entries move between the far buckets and the heap).
    let mut pos = vec![0u32; 301];
    let (mut w, mut set) = (WaitQueue::default(), BTreeSet::new());
    let mut queued: Vec<Option<WaitEntry>> = vec![None; 301];
    let mut now = 0i64;
    for seq in 0..100_000u64 {
        let m = 1 + next(300) as u32;
        match next(4) {
            // Pop what is due, as do_events does.
            0 => {
                now += next(5000) as i64;
                while let Some(e) = w.first(&mut pos) {
                    assert_eq!(Some(&e), set.first());
                    if e.key > now {
                        break;
                    }
                    w.remove(e.minor() as u32, &mut pos);
                    set.remove(&e);
                    queued[e.minor()] = None;
                }
            }
            _ => {
                if let Some(e) = queued[m as usize].take() {
                    w.remove(m, &mut pos);
                    set.remove(&e);
                } else {
                    let delay = match next(3) {
                        0 => next(50) as i64,
                        1 => next(1 << 20) as i64,
                        _ => 1 << 30 | next(1 << 36) as i64,
                    };
                    let e = WaitEntry::new(now + 1 + delay, seq, m);
                    w.push(e, &mut pos);
                    set.insert(e);
                    queued[m as usize] = Some(e);
                }
            }
        }
        assert_eq!(w.len(), set.len());
        assert_eq!(w.first(&mut pos), set.first().copied());
    }
}

// ---- filters (htb_classify with blocks, bind counting, block teardown) ---------

fn tc_htb(script: &str) -> crate::tc::Tc {
    let mut tc = crate::tc::Tc::new(&[crate::tree::DevSpec::new("eth0")]);
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let r = tc.run(&crate::tc::makeargs(line));
        assert_eq!(r.code, 0, "{line}: {}", r.stderr);
    }
    tc
}
fn flow(dport: u16) -> crate::FlowKey {
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&[10, 0, 0, 1]);
    crate::FlowKey { src: a, dst: a, sport: 1000, dport, proto: 17 }
}
/// Enqueue one packet; the per-class qlens of `minors` and the qdisc's direct count.
fn send_one(tc: &mut crate::tc::Tc, p: Packet) -> Enqueued {
    let now = tc.now;
    tc.device_mut("eth0").unwrap().enqueue(p, now)
}
fn qlens(tc: &mut crate::tc::Tc, minors: &[u32]) -> Vec<u32> {
    let c = tc.device_mut("eth0").unwrap().root.q.as_classful().unwrap();
    minors.iter().map(|&m| c.class_stats(m).unwrap().qlen).collect()
}
fn tc_err(tc: &mut crate::tc::Tc, line: &str) -> String {
    let r = tc.run(&crate::tc::makeargs(line));
    assert_ne!(r.code, 0, "{line} succeeded");
    r.stderr
}

const TREE: &str = "
    qdisc add dev eth0 root handle 1: htb default 30
    class add dev eth0 parent 1: classid 1:1 htb rate 100mbit
    class add dev eth0 parent 1:1 classid 1:10 htb rate 10mbit ceil 100mbit
    class add dev eth0 parent 1:1 classid 1:20 htb rate 20mbit ceil 100mbit
    class add dev eth0 parent 1: classid 1:30 htb rate 1mbit
";

#[test]
fn filters_walk_from_the_qdisc_block_through_inner_classes() {
    let mut tc = tc_htb(&format!(
        "{TREE}
        filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport 1 0xffff flowid 1:0
        filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dport 2 0xffff flowid 1:99
        filter add dev eth0 parent 1: protocol ip prio 3 u32 match ip dport 3 0xffff flowid 2:10
        filter add dev eth0 parent 1: protocol ip prio 4 u32 match ip dport 4 0xffff flowid 1:20
        filter add dev eth0 parent 1: protocol ip prio 9 u32 match u32 0 0 flowid 1:1
        filter add dev eth0 parent 1:1 protocol ip prio 1 u32 match ip dport 80 0xffff flowid 1:10
        filter add dev eth0 parent 1:1 protocol ip prio 2 u32 match ip dport 443 0xffff flowid 1:20"
    ));
    let m = [1, 0x10, 0x20, 0x30];
    let direct = |tc: &mut crate::tc::Tc| {
        let mut o = crate::tc::Out::text();
        tc.device_mut("eth0").unwrap().root.q.dump(&mut o, &dev());
        o.into_string()
    };
    // Root filter → inner 1:1 → 1:1's filters → leaf.
    send_one(&mut tc, Packet::new(1, 100).with_flow(flow(80)));
    send_one(&mut tc, Packet::new(2, 100).with_flow(flow(443)));
    assert_eq!(qlens(&mut tc, &m), vec![0, 1, 1, 0]);
    // 1:1's filters match nothing → the default class.
    send_one(&mut tc, Packet::new(3, 100).with_flow(flow(22)));
    // X:0 → the direct queue; 1:99 and 2:10 name no class → the default class.
    send_one(&mut tc, Packet::new(4, 100).with_flow(flow(1)));
    assert!(direct(&mut tc).contains("direct_packets_stat 1 "), "{}", direct(&mut tc));
    send_one(&mut tc, Packet::new(5, 100).with_flow(flow(2)));
    send_one(&mut tc, Packet::new(6, 100).with_flow(flow(3)));
    assert_eq!(qlens(&mut tc, &m), vec![0, 1, 1, 3]);
    // A root filter straight to a leaf.
    send_one(&mut tc, Packet::new(7, 100).with_flow(flow(4)));
    assert_eq!(qlens(&mut tc, &m), vec![0, 1, 2, 3]);
    // skb->priority naming a leaf wins over every filter; naming the inner 1:1
    // starts at 1:1's filters (the qdisc's dport-4 filter is not consulted).
    send_one(&mut tc, Packet::new(8, 100).with_flow(flow(80)).with_priority(H | 0x30));
    send_one(&mut tc, Packet::new(9, 100).with_flow(flow(4)).with_priority(H | 1));
    send_one(&mut tc, Packet::new(10, 100).with_flow(flow(80)).with_priority(H | 1));
    assert_eq!(qlens(&mut tc, &m), vec![0, 2, 2, 5]);
    // skb->priority X:0 → direct, before any filter.
    send_one(&mut tc, Packet::new(11, 100).with_flow(flow(80)).with_priority(H));
    assert!(direct(&mut tc).contains("direct_packets_stat 2 "));
}

#[test]
fn an_inner_class_without_filters_falls_back_to_the_default() {
    let mut tc = tc_htb(&format!(
        "{TREE}
        filter add dev eth0 parent 1: protocol all prio 1 matchall classid 1:1"
    ));
    send_one(&mut tc, Packet::new(1, 100).with_flow(flow(80)));
    send_one(&mut tc, Packet::new(2, 100));
    assert_eq!(qlens(&mut tc, &[0x10, 0x20, 0x30]), vec![0, 0, 2]);
}

#[test]
fn a_filter_cycle_drops_instead_of_spinning() {
    let mut tc = tc_htb(&format!(
        "{TREE}
        class add dev eth0 parent 1: classid 1:2 htb rate 1mbit
        class add dev eth0 parent 1:2 classid 1:40 htb rate 1mbit
        filter add dev eth0 parent 1: protocol all prio 1 matchall classid 1:1
        filter add dev eth0 parent 1:1 protocol all prio 1 matchall classid 1:2
        filter add dev eth0 parent 1:2 protocol all prio 1 matchall classid 1:1"
    ));
    assert_eq!(send_one(&mut tc, Packet::new(1, 100)), Enqueued::Dropped);
    let q = &tc.device_mut("eth0").unwrap().root;
    assert_eq!((q.stats().drops, q.stats().qlen), (1, 0));
}

#[test]
fn bound_filters_hold_classes_and_die_with_their_class() {
    let in_use = "Error: HTB class in use.\n";
    let mut tc = tc_htb(&format!(
        "{TREE}
        filter add dev eth0 parent 1: protocol ip prio 5 u32 match ip dport 6 0xffff flowid 1:50
        class add dev eth0 parent 1: classid 1:50 htb rate 1mbit
        filter add dev eth0 parent 1:1 protocol ip prio 1 u32 match ip dport 5 0xffff flowid 1:40
        filter add dev eth0 parent 1:1 protocol ip prio 2 handle 7 fw classid 1:40
        class add dev eth0 parent 1:1 classid 1:40 htb rate 1mbit"
    ));
    // tc_bind_tclass walks the classes' blocks (goldens/kernel/class-reverse-bind.json):
    // the qdisc's own filter never binds 1:50, made after it; 1:1's two bind 1:40.
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:50");
    tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 5");
    assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:40"), in_use);
    // The delete, refused, still unbinds every filter naming 1:40 (tc_ctl_tclass's
    // tc_bind_tclass with no class; goldens/kernel-6.12/hfsc-bind.json): the next
    // one takes it. Made again, it is bound by both filters again; one filter gone,
    // the other still holds it.
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:40");
    tc_htb_run(&mut tc, "class add dev eth0 parent 1:1 classid 1:40 htb rate 1mbit");
    tc_htb_run(&mut tc, "filter del dev eth0 parent 1:1 prio 1");
    assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:40"), in_use);
    tc_htb_run(&mut tc, "filter del dev eth0 parent 1:1 prio 2");
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:40");

    // A leaf's own filters bind 1:30; deleting the leaf destroys them, which frees
    // 1:30 and, with the last u32 proto, the qdisc's u32 tables.
    tc_htb_run(&mut tc, "filter add dev eth0 parent 1:20 protocol ip prio 3 u32 match u32 0 0 flowid 1:30");
    tc_htb_run(&mut tc, "filter add dev eth0 parent 1:20 protocol all prio 4 matchall classid 1:30");
    assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:30"), in_use);
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:20");
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:30");
    tc_htb_run(&mut tc, "filter add dev eth0 parent 1: protocol ip prio 1 u32 match u32 0 0 flowid 1:10");
    let r = tc.run(&crate::tc::makeargs("filter show dev eth0"));
    assert!(r.stdout.contains("fh 800: ht divisor 1"), "{}", r.stdout);
    // A deleted class's block is gone with it.
    let r = tc.run(&crate::tc::makeargs("filter show dev eth0 parent 1:20"));
    assert_eq!(r.stdout, "");
    assert_eq!(
        tc_err(&mut tc, "filter add dev eth0 parent 1:20 protocol all matchall classid 1:10"),
        "Error: Specified class doesn't exist.\nWe have an error talking to the kernel\n"
    );
}

#[test]
fn u32_bindings_follow_replaces_and_tables() {
    // What u32 logs per change keeps the counts that comparing every filter did.
    let in_use = "Error: HTB class in use.\n";
    let mut tc = tc_htb(&format!(
        "{TREE}
        class add dev eth0 parent 1: classid 1:40 htb rate 1mbit
        filter add dev eth0 parent 1: prio 1 handle 100: protocol ip u32 divisor 256
        filter add dev eth0 parent 1: prio 1 protocol ip u32 ht 100:5: match ip sport 5 0xffff flowid 1:30
        filter add dev eth0 parent 1: prio 1 protocol ip u32 ht 100:6: match ip sport 6 0xffff flowid 1:30"
    ));
    assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:30"), in_use);
    // A replace moves its node's binding: 1:30 is still held by the other node.
    tc_htb_run(
        &mut tc,
        "filter replace dev eth0 parent 1: prio 1 handle 100:5:800 protocol ip u32 match ip sport 5 0xffff flowid 1:40",
    );
    assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:30"), in_use);
    assert_eq!(tc_err(&mut tc, "class del dev eth0 classid 1:40"), in_use);
    tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 1 handle 100:6:800 protocol ip u32");
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:30");
    // Deleting the table takes its nodes' bindings with it.
    tc_htb_run(&mut tc, "filter del dev eth0 parent 1: prio 1 handle 100: protocol ip u32");
    tc_htb_run(&mut tc, "class del dev eth0 classid 1:40");
}

fn tc_htb_run(tc: &mut crate::tc::Tc, line: &str) {
    let r = tc.run(&crate::tc::makeargs(line));
    assert_eq!(r.code, 0, "{line}: {}", r.stderr);
}
