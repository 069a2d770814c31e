//! The device tree as sch_api.c keeps it: handles, refcounts, graft/delete effects on
//! queued packets and counters, and backlog propagation through several levels.

use qdisc::tc::{makeargs, Tc, TcOpts};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Instant, Packet};

fn tc(spec: &str, script: &str) -> Tc {
    let mut tc = Tc::new(&spec.split(' ').map(|s| DevSpec::parse(s).unwrap()).collect::<Vec<_>>());
    let out = tc.batch(script, "script", TcOpts::default(), false);
    assert_eq!(out.code, 0, "{}", out.stderr);
    tc
}

fn show(tc: &mut Tc, cmd: &str) -> String {
    let out = tc.run(&makeargs(cmd));
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
}

#[test]
fn auto_handles_come_from_one_global_counter() {
    let mut t = tc("eth0 eth1", "qdisc add dev eth0 root pfifo\nqdisc add dev eth1 root pfifo");
    assert!(show(&mut t, "qdisc show dev eth0").starts_with("qdisc pfifo 8001: root"));
    assert!(show(&mut t, "qdisc show dev eth1").starts_with("qdisc pfifo 8002: root"));
    // A failed create still consumes a number (the handle is taken before init).
    assert_eq!(t.run(&makeargs("qdisc replace dev eth0 root mq")).code, 2);
    show(&mut t, "qdisc replace dev eth0 root bfifo");
    assert!(show(&mut t, "qdisc show dev eth0").starts_with("qdisc bfifo 8004: root"));
}

#[test]
fn refcounts_follow_tx_queues() {
    let mut t = tc("eth0,txqueues=4", "qdisc add dev eth0 root handle 1: pfifo");
    assert!(show(&mut t, "qdisc show dev eth0").starts_with("qdisc pfifo 1: root refcnt 5 limit 1000p"));
    let mut t = tc("eth0,txqueues=4", "qdisc add dev eth0 root handle 1: mq");
    assert_eq!(show(&mut t, "qdisc show dev eth0 root"), "qdisc mq 1: root \n");
}

#[test]
fn head_drop_deep_in_the_tree_fixes_every_ancestor() {
    // tbf → prio → pfifo_head_drop (limit 2) on band 2 (priority 0 maps to band 1 = class 1:2).
    let mut t = tc(
        "eth0",
        "qdisc add dev eth0 root handle 1: tbf rate 1mbit burst 10k limit 100k\n\
         qdisc add dev eth0 parent 1:1 handle 2: prio\n\
         qdisc add dev eth0 parent 2:2 handle 3: pfifo_head_drop limit 2",
    );
    let d = &mut t.devices[0];
    for (id, len) in [(1, 100), (2, 200), (3, 300)] {
        d.enqueue(Packet::new(id, len), Instant::ZERO);
    }
    // The third packet pushed out the first: every level holds 2 packets, 500 bytes.
    let s = show(&mut t, "-s qdisc show dev eth0");
    assert_eq!(s.matches(" backlog 500b 2p requeues 0").count(), 3, "{s}");
    // NET_XMIT_CN travels up and every level counts it as one drop (net_xmit_drop_count).
    assert!(
        s.contains(
            "qdisc prio 2: parent 1:1 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n Sent 0 bytes 0 pkt (dropped 1,"
        ),
        "{s}"
    );
    assert!(
        s.contains("qdisc tbf 1: root refcnt 2 rate 1Mbit burst 10Kb lat 737ms \n Sent 0 bytes 0 pkt (dropped 1,"),
        "{s}"
    );
    let d = &mut t.devices[0];
    let ids: Vec<u64> = std::iter::from_fn(|| d.dequeue(Instant::ZERO).packet().map(|p| p.id)).collect();
    assert_eq!(ids, vec![2, 3]);
}

#[test]
fn deleting_a_prio_band_child_counts_its_packets_as_drops_up_the_tree() {
    let mut t = tc("eth0", "qdisc add dev eth0 root handle 1: prio\nqdisc add dev eth0 parent 1:2 handle 20: pfifo");
    for id in 0..3 {
        t.devices[0].enqueue(Packet::new(id, 1000), Instant::ZERO);
    }
    show(&mut t, "qdisc del dev eth0 parent 1:2 handle 20:");
    let s = show(&mut t, "-s qdisc show dev eth0 root");
    assert!(s.contains("(dropped 3, overlimits 0 requeues 0) \n backlog 0b 0p"), "{s}");
    // The band is back on a fresh default pfifo.
    assert_eq!(t.devices[0].enqueue(Packet::new(9, 64), Instant::ZERO), qdisc::Enqueued::Success);
}

#[test]
fn grafting_onto_an_mq_class_frees_the_old_packets_silently() {
    // dev_graft_qdisc + qdisc_put: the old child's queue is freed, nobody counts drops,
    // and mq's summed counters lose the old child's history.
    let mut t = tc("eth0,txqueues=2", "qdisc add dev eth0 root handle 1: mq");
    t.devices[0].enqueue(Packet::new(1, 500).with_hash(0), Instant::ZERO);
    show(&mut t, "qdisc replace dev eth0 parent 1:1 pfifo limit 10");
    let s = show(&mut t, "-s qdisc show dev eth0 root");
    assert_eq!(
        s,
        "qdisc mq 1: root \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n"
    );
}

#[test]
fn tbf_throttle_surfaces_through_prio_with_exact_wakeup() {
    // 1 Mbit/s, 1600-byte bucket: after one 1500-byte packet the next needs
    // (1500 - 100) bytes of tokens = 11.2 ms.
    let mut t = tc(
        "eth0",
        "qdisc add dev eth0 root handle 1: prio\nqdisc add dev eth0 parent 1:2 handle 2: tbf rate 1mbit burst 1600 limit 10k",
    );
    let d = &mut t.devices[0];
    d.enqueue(Packet::new(1, 1500), Instant::ZERO);
    d.enqueue(Packet::new(2, 1500), Instant::ZERO);
    assert_eq!(d.dequeue(Instant::ZERO).packet().unwrap().id, 1);
    assert_eq!(d.dequeue(Instant::ZERO), Dequeued::Throttled { until: Instant::from_nanos(11_200_000) });
    assert_eq!(
        d.dequeue(Instant::from_nanos(11_199_999)),
        Dequeued::Throttled { until: Instant::from_nanos(11_200_000) }
    );
    assert_eq!(d.dequeue(Instant::from_nanos(11_200_000)).packet().unwrap().id, 2);
}

/// `qdisc_change` refuses a kind whose `ops->change` is NULL before it reads the
/// request, with "Change operation not supported by specified qdisc." (EOPNOTSUPP,
/// tc's exit 2); a kind with one takes its own add options back. [`Qdisc::has_change`]
/// says which a kind is (the kernel's NULL: blackhole, drr, etf, noop, noqueue,
/// pfifo_fast, htb, ingress, clsact, mq, mqprio, qfq, sfq — net/sched/sch_*.c,
/// 6.12 and 6.18 alike): a `tc qdisc change` of every registered kind, with the
/// options it was added with, must be refused exactly when it says false.
#[test]
fn change_is_refused_exactly_for_the_kinds_without_ops_change() {
    use qdisc::tree::KernelVersion;
    // Each kind's parent and add options (every registered kind must have a line).
    let add = |kind: &str| -> (&str, &str) {
        match kind {
            "ingress" => ("ingress", ""),
            "clsact" => ("clsact", ""),
            "tbf" => ("root", "rate 1mbit burst 10k latency 10ms"),
            "red" => ("root", "limit 100k avpkt 1000 bandwidth 10mbit"),
            "gred" => ("root", "setup vqs 1 default 0"),
            "choke" => ("root", "limit 1000 bandwidth 10mbit"),
            "ets" => ("root", "bands 2"),
            "mqprio" => ("root", "num_tc 2 map 0 1 queues 2@0 2@2 hw 0"),
            "taprio" => {
                ("root", "num_tc 2 map 0 1 queues 2@0 2@2 base-time 0 sched-entry S 3 1000000 clockid CLOCK_TAI")
            }
            "hfsc" => ("root", "default 1"),
            "dualpi2" => ("root", "limit 1000"),
            "etf" => ("root", "clockid CLOCK_TAI delta 300000"),
            "cbs" => ("root", "idleslope 1000 sendslope -9000 hicredit 30 locredit -200"),
            "bfifo" | "cake" | "codel" | "drr" | "fq" | "fq_codel" | "fq_pie" | "hhf" | "mq" | "multiq" | "netem"
            | "noqueue" | "pfifo" | "pfifo_fast" | "pfifo_head_drop" | "pie" | "plug" | "prio" | "qfq" | "sfb"
            | "sfq" | "skbprio" | "htb" => ("root", ""),
            _ => panic!("no add options for the kind {kind}: give it a line here"),
        }
    };
    let mut checked = 0;
    for ops in qdisc::sched::KINDS {
        let (parent, opts) = add(ops.id);
        let kernel = ops.since.unwrap_or(KernelVersion::default());
        let mut t = Tc::with_kernel(&[DevSpec::parse("eth0,kind=eth,txqueues=4").unwrap()], kernel);
        // `tc qdisc add dev D ingress` (or clsact): the kind's word is its place too.
        let at = |verb: &str| if parent == "root" { format!("root {verb}") } else { String::new() };
        let added = t.run(&makeargs(&format!("qdisc add dev eth0 {} {} {opts}", at("handle 1:"), ops.id)));
        assert_eq!(added.code, 0, "{}: {}", ops.id, added.stderr);
        let handle = if parent == "root" { 0x10000 } else { 0xFFFF_0000 };
        let now = t.now;
        let d = t.device_mut("eth0").unwrap();
        let path = d.lookup(handle).unwrap();
        let info = d.info.clone();
        let n = d.node_mut(&path);
        let has_change = n.q.has_change();
        // The kind's own `change` with the options tc makes of its add line (an
        // empty set for a kind tc sends none for): refused exactly when it has none.
        let argv = makeargs(opts);
        let sent = qdisc::sched::parse_in(ops.id, kernel, &mut qdisc::tc::Args::new(&argv)).unwrap();
        // (A kind with a change op and no options sent is only asked through tc.)
        let refusal = Err(qdisc::tc::TcError::kernel("Change operation not supported by specified qdisc"));
        if let Some(o) = &sent {
            let own = n.change(o, &info, now);
            if has_change {
                assert!(own.is_ok(), "{} has a change op but refused its own options: {own:?}", ops.id);
            } else {
                assert_eq!(own, refusal, "{} has no change op", ops.id);
            }
        } else if !has_change {
            assert_eq!(n.change(&qdisc::qdisc::Opts::new(()), &info, now), refusal, "{} has no change op", ops.id);
        }
        // Through tc: qdisc_change reaches the op only with TCA_OPTIONS, which tc
        // sends for a kind with an option parser (not ingress, clsact, …).
        let changed = t.run(&makeargs(&format!("qdisc change dev eth0 {} {} {opts}", at(""), ops.id)));
        if has_change || sent.is_none() {
            assert_eq!(changed.code, 0, "{}: {}", ops.id, changed.stderr);
        } else {
            assert_eq!(
                (changed.code, changed.stderr.as_str()),
                (2, "Error: Change operation not supported by specified qdisc.\n"),
                "{} has no change op",
                ops.id
            );
        }
        checked += 1;
    }
    assert_eq!(checked, qdisc::sched::KINDS.len());
    // noop, the placeholder of a class without a qdisc, is no kind tc can name.
    let mut noop = qdisc::sched::noqueue::Noop::node(0);
    assert!(!noop.q.has_change());
    let refusal = Err(qdisc::tc::TcError::kernel("Change operation not supported by specified qdisc"));
    let info = Tc::new(&[DevSpec::parse("eth0").unwrap()]).device("eth0").unwrap().info.clone();
    assert_eq!(noop.change(&qdisc::qdisc::Opts::new(()), &info, Instant::ZERO), refusal);
}
