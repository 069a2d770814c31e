//! Route filters steering transmitted packets into htb classes by the realms of the
//! route each packet took (`Device::xmit_routed`), with the meta keys `rt_classid` /
//! `rt_iif` beside them; counted by hand.

use qdisc::classify::Dst;
use qdisc::tc::{makeargs, Tc};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Instant, Packet};
use serde_json::Value;

fn run(tc: &mut Tc, cmd: &str) {
    let o = tc.run(&makeargs(cmd));
    assert_eq!((o.code, o.stderr.as_str()), (0, ""), "tc {cmd}");
}

/// Each class's `Sent` packets, by classid.
fn sent(tc: &mut Tc) -> Vec<(String, u64)> {
    let o = tc.run(&makeargs("-s -j class show dev eth0"));
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let mut out: Vec<(String, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["handle"].as_str().unwrap().to_string(), c["stats"]["packets"].as_u64().unwrap()))
        .collect();
    out.sort();
    out
}

#[test]
fn realms_steer_packets_into_htb_classes() {
    let mut tc = Tc::new(&[DevSpec::parse("eth0").unwrap()]);
    for c in [
        "qdisc add dev eth0 root handle 1: htb default 40",
        "class add dev eth0 parent 1: classid 1:10 htb rate 10mbit",
        "class add dev eth0 parent 1: classid 1:20 htb rate 10mbit",
        "class add dev eth0 parent 1: classid 1:30 htb rate 10mbit",
        "class add dev eth0 parent 1: classid 1:40 htb rate 10mbit",
        // Realm 1 as the destination, whatever the source.
        "filter add dev eth0 parent 1: protocol ip prio 1 route to 1 classid 1:10",
        // Source realm 2 (the second pass, with the TO half cleared).
        "filter add dev eth0 parent 1: protocol ip prio 1 route from 2 classid 1:20",
        // Forwarded packets (an input interface) with realms 0/7, by meta.
        "filter add dev eth0 parent 1: protocol ip prio 2 basic match meta(rt_iif gt 0) and meta(rt_classid eq 7) classid 1:30",
    ] {
        run(&mut tc, c);
    }
    // The route filters made eth0 keep each packet's route for its qdiscs.
    assert!(tc.device("eth0").unwrap().keep_dst);
    let now = Instant::ZERO;
    let route = |to: u32, from: u32, iif: u32| Some(Dst { tclassid: from << 16 | to, iif });
    // (route, packets): what each group should meet.
    let groups = [
        (route(1, 0, 0), 3), // to 1                      → 1:10
        (route(1, 2, 0), 1), // to 1 from 2: bucket 1 wins → 1:10
        (route(5, 2, 0), 2), // from 2 (pass two)          → 1:20
        (route(7, 0, 3), 4), // meta: forwarded, realm 7   → 1:30
        (route(7, 0, 0), 1), // realm 7 sent locally       → default 1:40
        (None, 5),           // no route (a raw frame)     → default 1:40
    ];
    let mut id = 0;
    for (dst, n) in groups {
        for _ in 0..n {
            let d = tc.device_mut("eth0").unwrap();
            let _ = d.xmit_routed(Packet::new(id, 100), 0, now, false, dst);
            id += 1;
        }
    }
    let d = tc.device_mut("eth0").unwrap();
    let mut out = 0;
    while let Dequeued::Packet(_) = d.dequeue(now) {
        out += 1;
    }
    assert_eq!(out, 16);
    let want = [("1:10", 4), ("1:20", 2), ("1:30", 4), ("1:40", 6)];
    assert_eq!(sent(&mut tc), want.map(|(c, n)| (c.to_string(), n)).to_vec());
}
