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
