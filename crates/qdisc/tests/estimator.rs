//! Rate estimators through tc and a device, on a hand-stepped clock: what `tc -s`
//! prints and what police `avrate` drops, with the values worked out by hand from
//! `est_timer`'s arithmetic (see crates/qdisc/src/estimator.rs).

use qdisc::tc::{makeargs, Output, Tc};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Instant, Packet};

fn tc() -> Tc {
    Tc::new(&[DevSpec::new("eth0")])
}

fn run(tc: &mut Tc, cmd: &str) -> Output {
    let out = tc.run(&makeargs(cmd));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "tc {cmd}");
    out
}

/// 1000-byte frames every 4 ms from `from_ms` (inclusive) to `to_ms` (exclusive),
/// each sent straight through (an always-ready driver).
fn pace(tc: &mut Tc, from_ms: u64, to_ms: u64) {
    let d = tc.device_mut("eth0").unwrap();
    for (i, t) in (from_ms..to_ms).step_by(4).enumerate() {
        let now = Instant::from_millis(t);
        let _ = d.xmit(Packet::new(i as u64, 1000), now, true);
        while let Dequeued::Packet(_) = d.dequeue(now) {}
    }
}

fn show(tc: &mut Tc, at_ms: u64, what: &str) -> String {
    tc.now = Instant::from_millis(at_ms);
    run(tc, &format!("-s {what} show dev eth0")).stdout
}

/// `250ms 1sec`: interval −2 (62 jiffies, 248 ms), ewma_log 2. 250 frames/s: each
/// period holds 62 frames, Δ = 62,000 B and 62 packets, << 10 then >> 2:
/// 15,872,000 and 15,872 per tick. avbps after the ticks at 248, 496, 744 and
/// 992 ms: 15,872,000, 27,776,000, 36,704,000, 43,400,000 → 169,531 B/s (×8:
/// 1356Kbit) and 43,400 → 169 pps.
#[test]
fn qdisc_rate_line_after_paced_traffic() {
    let mut tc = tc();
    run(&mut tc, "qdisc add dev eth0 root handle 1: estimator 250ms 1sec pfifo");
    assert!(show(&mut tc, 0, "qdisc").contains(" rate 0bit 0pps backlog 0b 0p requeues 0\n"));
    pace(&mut tc, 0, 1000);
    let out = show(&mut tc, 1000, "qdisc");
    assert_eq!(
        out,
        "qdisc pfifo 1: root refcnt 2 limit 1000p\n Sent 250000 bytes 250 pkt (dropped 0, overlimits 0 requeues 0) \n \
         rate 1356Kbit 169pps backlog 0b 0p requeues 0\n"
    );
    // The next tick (1240 ms) sees the two frames sent after the last one (992 and
    // 996 ms): + (2,000 << 10 >> 2) − 43,400,000 / 4 = 33,062,000 → 129,148 B/s.
    assert!(show(&mut tc, 1239, "qdisc").contains(" rate 1356Kbit 169pps "));
    let out = show(&mut tc, 1240, "qdisc");
    assert!(out.contains(" rate 1033Kbit 129pps "), "{out}");
    // JSON: bytes/s, as the kernel's attribute.
    tc.now = Instant::from_millis(1240);
    let j = run(&mut tc, "-s -j qdisc show dev eth0").stdout;
    assert!(j.contains("\"requeues\":0,\"rate\":129148,\"pps\":129,\"backlog\":0"), "{j}");
}

/// A change brings an estimator to a running qdisc; its counters start from where
/// they stand, its first tick one period after the jiffy of the change.
#[test]
fn change_adds_an_estimator_that_starts_from_the_counters() {
    let mut tc = tc();
    run(&mut tc, "qdisc add dev eth0 root handle 1: pfifo");
    pace(&mut tc, 0, 500);
    assert!(!show(&mut tc, 500, "qdisc").contains("rate"));
    // At 502 ms (jiffy 125): first tick at jiffy 187 = 748 ms.
    tc.now = Instant::from_millis(502);
    run(&mut tc, "qdisc change dev eth0 root handle 1: estimator 250ms 1sec");
    pace(&mut tc, 504, 748);
    // Frames at 504 … 744 ms: 61 of them.
    let out = show(&mut tc, 748, "qdisc");
    // 61,000 << 10 >> 2 = 15,616,000 → 61,000 B/s = 488Kbit; 61 << 8 → 61 pps.
    assert!(out.contains(" rate 488Kbit 61pps "), "{out}");
}

/// Class estimators (htb): each class its own, replaced by a change (the averages
/// carry over), gone with the class.
#[test]
fn htb_class_estimators() {
    let mut tc = tc();
    run(&mut tc, "qdisc add dev eth0 root handle 1: htb default 1");
    run(&mut tc, "class add dev eth0 parent 1: classid 1:1 estimator 250ms 1sec htb rate 100mbit burst 1mb cburst 1mb quantum 60000");
    run(&mut tc, "class add dev eth0 parent 1: classid 1:2 htb rate 1mbit");
    pace(&mut tc, 0, 1000);
    let out = show(&mut tc, 1000, "class");
    let c1 = out.split("class htb 1:2").next().unwrap();
    assert!(c1.contains(" rate 1356Kbit 169pps backlog 0b 0p requeues 0\n"), "{out}");
    assert_eq!(out.matches("pps backlog").count(), 1, "{out}");
    // Replace at 1000 ms (jiffy 250) with 1sec 8sec: next tick 1992 ms, the
    // average kept; with no traffic Δ = 0 and avbps −1/8.
    run(&mut tc, "class change dev eth0 parent 1: classid 1:1 estimator 1sec 8sec htb rate 100mbit quantum 60000");
    assert!(show(&mut tc, 1991, "class").contains(" rate 1356Kbit 169pps "));
    // 43,400,000 − 5,425,000 = 37,975,000 → 148,339 B/s = 1186712 bit/s.
    assert!(show(&mut tc, 1992, "class").contains(" rate 1186Kbit 148pps "));
    run(&mut tc, "class del dev eth0 classid 1:2");
    run(&mut tc, "class change dev eth0 parent 1: classid 1:1 htb rate 100mbit quantum 60000");
    assert!(show(&mut tc, 1992, "class").contains(" rate 1186Kbit 148pps "));
}

/// police avrate 500kbit (62,500 B/s) behind `estimator 250ms 500ms` (ewma_log 1):
/// the 62 frames before the first tick (248 ms) pass; that tick reads
/// 62,000 << 10 >> 1 >> 8 = 124,000 B/s, over avrate, and every later frame is
/// dropped (still counted by police, so the estimate keeps climbing: 31,744,000,
/// 47,616,000, 55,552,000, 59,520,000 × 2^−8 B/s after the four ticks).
#[test]
fn police_avrate_drops_once_the_estimate_is_over() {
    let mut tc = tc();
    run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
    run(
        &mut tc,
        "filter add dev eth0 parent 1: protocol all pref 1 estimator 250ms 500ms matchall action police avrate 500kbit conform-exceed drop",
    );
    pace(&mut tc, 0, 1000);
    let q = show(&mut tc, 1000, "qdisc");
    assert!(q.starts_with("qdisc prio 1: root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n Sent 62000 bytes 62 pkt (dropped 188, overlimits 0 requeues 0) \n backlog"), "{q}");
    let f = show(&mut tc, 1000, "filter");
    assert!(f.contains("avrate 500Kbit "), "{f}");
    // Police saw all 250, 188 over the limit and dropped; 232,500 B/s (1860Kbit),
    // 232 pps. The queue part follows the rate on its line, after the "\t" prefix.
    assert!(
        f.contains("\tSent 250000 bytes 250 pkt (dropped 188, overlimits 188 requeues 0) \n\trate 1860Kbit 232pps\tbacklog 0b 0p requeues 0\n"),
        "{f}"
    );
}

/// Without an estimator avrate has nothing to read: the kernel refuses it.
#[test]
fn avrate_needs_an_estimator() {
    let mut tc = tc();
    run(&mut tc, "qdisc add dev eth0 root handle 1: prio");
    let out = tc.run(&makeargs(
        "filter add dev eth0 parent 1: protocol all pref 1 matchall action police avrate 500kbit conform-exceed drop",
    ));
    assert_eq!(out.code, 2, "{out:?}");
    let out = tc.run(&makeargs("actions add action police avrate 1mbit index 50"));
    assert_ne!(out.code, 0, "{out:?}");
}
