//! The simulated network without TCP: UDP and ping through qdiscs, NICs, links and
//! routers, with expectations derived by hand from rates, sizes and delays. Hosts use
//! a profile in which CPU work costs nothing (`tests/zero-cost.toml`): the network
//! alone (CPU costs are tested in `cpu.rs`).

use qdisc::tree::KernelVersion;
use qdisc_scenario::backend::{NoProgress, RunError, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::{simulate, Sim};

const TWO_HOSTS: &str = r#"
duration = "2s"
seed = 3
[[host]]
name = "client"
profile = "tests/zero-cost.toml"
[[host]]
name = "server"
profile = "tests/zero-cost.toml"
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "1gbit"
delay = "10ms"
"#;

fn scenario(text: &str) -> Scenario {
    Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn run(text: &str) -> RunResult {
    simulate(&scenario(text), &RunOptions::default(), &mut NoProgress).unwrap().0
}

fn with(extra: &str) -> String {
    format!("{TWO_HOSTS}{extra}")
}

const PING: &str = r#"
[[traffic]]
kind = "ping"
from = "client"
to = "server"
interval = "100ms"
"#;

#[test]
fn ping_on_an_idle_link_is_twice_delay_plus_serialisation() {
    let r = run(&with(PING));
    let p = &r.rtt[0];
    assert_eq!((p.transmitted, p.received, p.in_flight_at_end), (20, 20, 0));
    // 98-byte echo + 24 bytes of Ethernet framing at 125 MB/s = 976 ns each way.
    for s in &p.samples {
        assert!((s.rtt_ms - 20.001952).abs() < 1e-9, "{s:?}");
    }
    assert_eq!(p.samples[0].seq, 1);
    assert!((p.samples[3].t - 0.320001952).abs() < 1e-9);
}

#[test]
fn routed_path_adds_every_hop() {
    let r = run(r#"
duration = "1s"
[[host]]
name = "snd"
profile = "tests/zero-cost.toml"
[[host]]
name = "rtr"
profile = "tests/zero-cost.toml"
[[host]]
name = "rcv"
profile = "tests/zero-cost.toml"
[[link]]
between = ["snd:eth0", "rtr:eth0"]
rate = "10gbit"
delay = "1ms"
[[link]]
between = ["rtr:eth1", "rcv:eth0"]
rate = "100mbit"
delay = "5ms"
[[traffic]]
kind = "ping"
from = "snd"
to = "rcv"
interval = "200ms"
"#);
    let p = &r.rtt[0];
    assert_eq!(p.dst, "10.2.0.2");
    assert_eq!(p.received, 5);
    // Each way: 122 wire bytes at 1.25 GB/s (97.6 ns → 98) + 1 ms, then at 12.5 MB/s
    // (9.76 µs) + 5 ms.
    let one_way = 1e6 + 98.0 + 5e6 + 9760.0;
    for s in &p.samples {
        assert!((s.rtt_ms - 2.0 * one_way / 1e6).abs() < 1e-9, "{s:?}");
    }
}

#[test]
fn udp_through_htb_gets_the_shaped_rate_and_ping_its_own_fq_codel_queue() {
    let r = run(&(with(
        r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: htb default 10
class add dev eth0 parent 1: classid 1:10 htb rate 100mbit
qdisc add dev eth0 parent 1:10 handle 10: fq_codel
"""
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "150mbit"
size = "1400"
"#,
    ) + PING));
    let u = &r.throughput[0];
    // htb counts 1442-byte frames at 100 Mbit/s: payload 1400/1442 of it.
    let expect = 100e6 * 1400.0 / 1442.0;
    let got = u.receiver.bits_per_second;
    assert!((got / expect - 1.0).abs() < 0.01, "{got} vs {expect}");
    // Not 26786 (150 Mbit/s of 1400 B for 2 s): the socket blocks while its skbs hold
    // its 212992-byte send buffer (92 datagrams of 2304 bytes of truesize), so the
    // sender is never more than that ahead of what fq_codel passed or dropped.
    let (sent, received, lost) =
        (u.sender.packets.unwrap(), u.receiver.packets.unwrap(), u.receiver.lost_packets.unwrap());
    assert_eq!(sent, 17516);
    assert!(sent <= received + lost + 92, "{sent} {received} {lost}");
    assert!(u.receiver.lost_packets.unwrap() > 0, "fq_codel drops the flood");
    // The ping flow is sparse: fq_codel serves it first, RTT stays near 20 ms.
    let p = r.rtt[0].stats.as_ref().unwrap();
    assert!(p.max < 21.0, "{p:?}");
    let q = &r.tc.end[0].qdisc;
    assert_eq!(q[1]["kind"], "fq_codel");
    assert!(q[1]["drops"].as_u64().unwrap() > 0);
}

#[test]
fn bql_keeps_the_ring_short_and_the_queue_in_the_qdisc() {
    let s = scenario(&with(
        r#"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "100mbit"
size = "1472"
flows = 24
"#,
    ));
    let mut sim = Sim::new(&s, KernelVersion(6, 12)).unwrap();
    sim.run(|_| {}).unwrap();
    let q = &sim.ifaces[0].txqs[0];
    // Completions come one frame at a time: BQL learns a limit of a few frames.
    assert!(q.dql.limit <= 4 * 1514, "limit {}", q.dql.limit);
    let dev = sim.device(0);
    assert_eq!(dev.root.kind(), "pfifo_fast");
    let st = dev.root.stats();
    // Offered 2.4 Gbit/s by 24 sockets, each blocking only once 92 of its datagrams
    // (2304 bytes of truesize each) hold its 212992-byte send buffer: together twice
    // pfifo_fast's 1000 (txqueuelen), which overflows.
    assert!(st.drops > 10_000, "{st:?}");
    // Within a few packets of its limit (the sockets refill it as they wake).
    assert!(st.qlen >= 990, "the queue stands in the qdisc: {st:?}");
}

#[test]
fn tbf_throttles_to_its_rate() {
    let r = run(&with(
        r#"
[tc.client]
script = "qdisc add dev eth0 root tbf rate 10mbit burst 10kb latency 50ms"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "20mbit"
size = "1000"
"#,
    ));
    let got = r.throughput[0].receiver.bits_per_second;
    // tbf counts 1042-byte frames; plus the first burst of 10 kB over 2 s.
    let expect = 10e6 * 1000.0 / 1042.0 + 10_240.0 * 8.0 / 2.0 * 1000.0 / 1042.0;
    assert!((got / expect - 1.0).abs() < 0.01, "{got} vs {expect}");
}

/// A qdisc's rate estimator in the snapshots: `estimator 250ms 1sec` on the tbf
/// shaping 20 Mbit/s of UDP to 10 Mbit/s. Eight 248 ms ticks by the end of the
/// 2 s run put the EWMA (ewma_log 2) at 1 − (3/4)^8 ≈ 0.90 of the 1.24 MB/s the
/// kernel's arithmetic reads from 10 Mbit/s (248 ms taken as 250).
#[test]
fn snapshots_show_the_rate_estimate() {
    let r = run(&with(
        r#"
[tc.client]
script = "qdisc add dev eth0 root handle 1: estimator 250ms 1sec tbf rate 10mbit burst 10kb latency 50ms"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "20mbit"
size = "1000"
"#,
    ));
    let snap = r.tc.end.iter().find(|d| d.host == "client" && d.dev == "eth0").expect("client eth0");
    let q = &snap.qdisc[0];
    let bps = q["rate"].as_u64().expect("a rate field");
    assert!((1_000_000..1_240_000).contains(&bps), "{q}");
    assert!(snap.qdisc_text.as_deref().unwrap().contains(" rate "), "{:?}", snap.qdisc_text);
}

#[test]
fn link_loss_is_seeded() {
    let text = with(
        r#"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "10mbit"
size = "1000"
"#,
    )
    .replace("delay = \"10ms\"", "delay = \"10ms\"\nloss = \"10%\"");
    let (a, b) = (run(&text), run(&text));
    let lost = a.throughput[0].receiver.lost_packets.unwrap();
    assert_eq!(lost, b.throughput[0].receiver.lost_packets.unwrap());
    assert!((200..=300).contains(&lost), "10 % of 2500: {lost}");
    let other = run(&text.replace("seed = 3", "seed = 4"));
    assert_ne!(lost, other.throughput[0].receiver.lost_packets.unwrap());
}

#[test]
fn a_failing_tc_line_names_its_place() {
    let e = simulate(
        &scenario(&with("[tc.client]\nscript = \"\"\"\nqdisc add dev eth0 root handle 1: htb\nclass add dev eth0 parent 1: classid 1:10 htb\n\"\"\"\n")),
        &RunOptions::default(),
        &mut NoProgress,
    )
    .unwrap_err();
    match e {
        RunError::TcScript { at, host, stderr, .. } => {
            assert_eq!((at.as_str(), host.as_str()), ("t.toml:17", "client"));
            assert!(stderr.contains("rate"), "{stderr}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn veth_links_are_built_as_the_kernel_lab_builds_them() {
    let r = run(&with(
        r#"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "2gbit"
size = "1400"
duration = "1s"
"#,
    )
    .replace("rate = \"1gbit\"", "kind = \"veth\"\nrate = \"1gbit\"")
    .replace("delay = \"10ms\"", ""));
    let dev = |host: &str, dev: &str| r.tc.end.iter().find(|d| d.host == host && d.dev == dev).unwrap();
    // A veth's default root is noqueue: no backpressure at the host.
    assert_eq!(dev("client", "eth0").qdisc[0]["kind"], "noqueue");
    // The wire: tbf on the bridge port facing the receiver, as qdisc_kernel's wire_qdisc.
    let wire = &dev("link[0]", "l0b").qdisc[0];
    assert_eq!((wire["kind"].as_str(), wire["options"]["rate"].as_u64()), (Some("tbf"), Some(125_000_000)));
    assert!(wire["drops"].as_u64().unwrap() > 0, "2 Gbit/s into a 1 Gbit/s tbf");
    // tbf counts 1442-byte packets at 1 Gbit/s for the second of traffic, plus its first
    // burst (125 kB), plus its full queue drained afterwards (latency 50 ms at the rate
    // + burst: 6.375 MB).
    let got = r.throughput[0].receiver.bytes as f64 * 8.0;
    let expect = (1e9 + 125_000.0 * 8.0 + 6_375_000.0 * 8.0) * 1400.0 / 1442.0;
    assert!((got / expect - 1.0).abs() < 0.01, "{got} vs {expect}");
}

#[test]
fn veth_links_with_delay_run_netem() {
    let r = run(&with(PING).replace("rate = \"1gbit\"", "kind = \"veth\"\nrate = \"1gbit\""));
    let wire = &r.tc.end.iter().find(|d| d.host == "link[0]" && d.dev == "l0b").unwrap().qdisc[0];
    // The lab's netem: its limit is twice the 1500-byte packets in flight at 1 Gbit/s
    // over 10 ms + 50 ms = 10000 — 10001 after the floating-point ceil, which we share.
    assert_eq!((wire["kind"].as_str(), wire["options"]["limit"].as_u64()), (Some("netem"), Some(10_001)));
    assert_eq!(wire["options"]["delay"]["delay"].as_f64(), Some(0.01));
    assert_eq!(wire["options"]["rate"]["rate"].as_u64(), Some(125_000_000));
    // netem's rate serialises without framing: 98 B at 125 MB/s = 784 ns each way.
    for s in &r.rtt[0].samples {
        assert!((s.rtt_ms - 20.001568).abs() < 1e-9, "{s:?}");
    }
}

#[test]
fn a_multiqueue_nic_gets_mq_and_bql_per_queue() {
    let s = scenario(
        &(with(
            r#"
[[traffic]]
kind = "tcp"
from = "client"
to = "server"
flows = 8
"#,
        )
        .replace("rate = \"1gbit\"", "txqueues = 4\nrate = \"1gbit\"")),
    );
    let mut sim = Sim::new(&s, KernelVersion(6, 12)).unwrap();
    sim.run(|_| {}).unwrap();
    assert_eq!(sim.ifaces[0].txqs.len(), 4);
    let dev = sim.device(0);
    assert_eq!(dev.root.kind(), "mq");
    // skb_tx_hash spreads the 8 connections: more than one queue carried traffic, and
    // each queue that did learnt its own BQL limit.
    let used: Vec<usize> = (0..4).filter(|&i| sim.ifaces[0].txqs[i].dql.num_completed > 0).collect();
    assert!(used.len() > 1, "{used:?}");
    for i in used {
        assert!(sim.ifaces[0].txqs[i].dql.limit > 0);
    }
}

/// iperf3 -u behind a class slower than its rate blocks on its socket: 50 Mbit/s of
/// 1400-byte datagrams into a 10 Mbit/s htb class with a 1000-packet pfifo. The
/// socket's 212992 bytes hold 93 datagrams (2304 bytes of truesize each: 92 × 2304 =
/// 211968 is still below), so the pfifo never holds more, never drops, and the sender
/// is never more than those 93 ahead of what the class sent.
#[test]
fn a_udp_sender_blocks_on_its_send_buffer_behind_a_slow_class() {
    let r = run(&with(
        r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: htb default 10
class add dev eth0 parent 1: classid 1:10 htb rate 10mbit
qdisc add dev eth0 parent 1:10 handle 10: pfifo limit 1000
"""
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "50mbit"
size = "1400"
"#,
    ));
    let u = &r.throughput[0];
    let (sent, received) = (u.sender.packets.unwrap(), u.receiver.packets.unwrap());
    assert_eq!(u.receiver.lost_packets, Some(0));
    let q = &r.tc.end[0].qdisc[1];
    assert_eq!(q["kind"], "pfifo");
    assert_eq!(q["drops"].as_u64(), Some(0));
    let qlen = q["qlen"].as_u64().unwrap();
    assert!((1..=93).contains(&qlen), "{qlen}");
    // What the sender sent and the receiver did not get is in the queue (or on its way).
    assert!(sent - received >= qlen && sent - received <= 93, "{sent} {received} {qlen}");
    // 10 Mbit/s of 1442-byte frames for 2 s, not 50 Mbit/s.
    let expect = 10e6 * 1400.0 / 1442.0;
    assert!((u.receiver.bits_per_second / expect - 1.0).abs() < 0.02, "{}", u.receiver.bits_per_second);
}

#[test]
fn netem_duplicates_arrive_as_second_copies() {
    // Every datagram duplicated: both copies cross (the copy shares its original's id,
    // and its endpoint data lives until the last copy is delivered).
    let s = scenario(&with(
        r#"
[tc.client]
script = "qdisc add dev eth0 root netem delay 1ms duplicate 100%"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "10mbit"
size = "1000"
"#,
    ));
    let mut sim = Sim::new(&s, KernelVersion(6, 12)).unwrap();
    sim.run(|_| {}).unwrap();
    let u = &sim.udp[0];
    // 10 Mbit/s of 1000-byte datagrams for 2 s; the last 11 ms (≤ 14 datagrams,
    // twice) still in flight.
    assert_eq!(u.sent, 2500);
    let in_flight = 2 * u.sent - u.received;
    assert!(in_flight <= 2 * 14, "sent {} received {}", u.sent, u.received);
    // Nothing is left behind but what is still in flight.
    assert!(sim.metas.iter().filter(|m| m.is_some()).count() as u64 <= in_flight);
}

/// Two devices whose clsact ingress hooks share block 1 run its one filter and its
/// one policer (one action instance, `ingress_block`): 2 × 60 Mbit/s of UDP arrive
/// and 50 Mbit/s of it pass in all, not 50 per device. Every packet a sender put on
/// its uncongested 1 Gbit/s link meets its own device's clsact (which counts it, and
/// the ones the policer drops), but for the last millisecond's still on the wire
/// (60 Mbit/s of 1442-byte frames: 5.2 per ms), and seen − dropped = received.
#[test]
fn devices_sharing_an_ingress_block_share_its_policer() {
    let r = run(r#"
duration = "2s"
seed = 3
[[host]]
name = "client"
profile = "tests/zero-cost.toml"
[[host]]
name = "s1"
profile = "tests/zero-cost.toml"
[[host]]
name = "s2"
profile = "tests/zero-cost.toml"
[[link]]
between = ["s1:eth0", "client:eth0"]
rate = "1gbit"
delay = "1ms"
[[link]]
between = ["s2:eth0", "client:eth1"]
rate = "1gbit"
delay = "1ms"
[tc.client]
script = """
qdisc add dev eth0 ingress_block 1 clsact
qdisc add dev eth1 ingress_block 1 clsact
filter add block 1 protocol ip pref 1 u32 match u32 0 0 action police rate 50mbit burst 100k drop
"""
[[traffic]]
kind = "udp"
from = "s1"
to = "client"
rate = "60mbit"
size = "1400"
[[traffic]]
kind = "udp"
from = "s2"
to = "client"
rate = "60mbit"
size = "1400"
"#);
    let clsact = |dev: &str| {
        let d = r.tc.end.iter().find(|d| d.host == "client" && d.dev == dev).expect("device");
        let q = d.qdisc.as_array().unwrap().iter().find(|q| q["kind"] == "clsact").expect("clsact").clone();
        assert_eq!(q["ingress_block"], 1, "{q}");
        (q["packets"].as_u64().unwrap(), q["drops"].as_u64().unwrap())
    };
    let (mut sent, mut received, mut seen, mut dropped) = (0, 0, 0, 0);
    for (u, dev) in r.throughput.iter().zip(["eth0", "eth1"]) {
        // iperf3's receiver counts what the sequence numbers say was sent, and the lost.
        let (s, rcv) = (u.sender.packets.unwrap(), u.receiver.packets.unwrap() - u.receiver.lost_packets.unwrap());
        let (pkts, drops) = clsact(dev);
        assert!(s >= pkts && s - pkts <= 6, "{dev}: {s} sent, {pkts} met the hook");
        assert!(drops > 0, "{dev}: the shared policer drops from both devices");
        sent += s;
        received += rcv;
        seen += pkts;
        dropped += drops;
    }
    assert_eq!(seen - dropped, received);
    assert!(sent - seen <= 12);
    // The policer counts 1442-byte frames (1400 + UDP/IP + Ethernet: the mac header is
    // pushed back at the ingress hook) at 50 Mbit/s, plus its 100 KiB burst once.
    let bytes = 50e6 / 8.0 * 2.0 + 102_400.0;
    let expect = bytes / 1442.0;
    let got = received as f64;
    assert!((got / expect - 1.0).abs() < 0.01, "{got} vs {expect}");
}

/// The cgroup classifier steers each application's traffic by the net_cls classid of
/// its cgroup: two UDP senders in cgroups 1:10 and 1:20 and a ping in none, through
/// one `cgroup` filter on an htb root whose default is 1:30. Every class is faster
/// than what it gets, so nothing waits or drops and the counters are the senders':
/// 2 Mbit/s and 4 Mbit/s of 1000-byte datagrams for 2 s are 500 and 1000 datagrams
/// (250 and 500 per second), each a 1042-byte frame at htb (1000 + UDP 8 + IPv4 20 +
/// Ethernet 14); the 20 pings every 100 ms are 98-byte frames (56, ICMP 8, IPv4 20,
/// Ethernet 14). The ping's socket is in no net_cls cgroup (classid 0): no match, so
/// it falls to the default class.
#[test]
fn a_cgroup_filter_puts_each_net_cls_cgroup_in_its_class() {
    let r = run(&(with(
        r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: htb default 30
class add dev eth0 parent 1: classid 1:10 htb rate 100mbit
class add dev eth0 parent 1: classid 1:20 htb rate 100mbit
class add dev eth0 parent 1: classid 1:30 htb rate 100mbit
filter add dev eth0 parent 1: protocol ip prio 1 handle 1 cgroup
"""
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "2mbit"
size = "1000"
net_cls_classid = "1:10"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "4mbit"
size = "1000"
net_cls_classid = "1:20"
"#,
    ) + PING));
    let sent: Vec<u64> = r.throughput.iter().map(|t| t.sender.packets.unwrap()).collect();
    assert_eq!(sent, [500, 1000]);
    assert_eq!(r.rtt[0].transmitted, 20);
    let classes = r.tc.end[0].class.as_array().unwrap();
    let class = |id: &str| {
        let c = classes.iter().find(|c| c["handle"] == id).unwrap_or_else(|| panic!("{id}: {classes:?}"));
        let st = &c["stats"];
        (st["packets"].as_u64().unwrap(), st["bytes"].as_u64().unwrap(), st["drops"].as_u64().unwrap())
    };
    assert_eq!(class("1:10"), (500, 500 * 1042, 0));
    assert_eq!(class("1:20"), (1000, 1000 * 1042, 0));
    assert_eq!(class("1:30"), (20, 20 * 98, 0));
    // The root counts them all.
    let root = &r.tc.end[0].qdisc[0];
    assert_eq!(root["packets"].as_u64(), Some(1520));
    assert_eq!(root["bytes"].as_u64(), Some(1500 * 1042 + 20 * 98));
}

/// Route filters and the `rt_*` meta keys classify by the realms of the route each
/// packet took: `ip route change … realms` on the sender (its output routes) and on a
/// router (its forward routes, and the route back to the source for the FROM realm),
/// with the router's input interface for forwarded packets. Ten pings to each of two
/// hosts behind the router, counted by hand per class.
#[test]
fn realms_of_the_routes_taken_steer_packets_into_classes() {
    let r = run(r#"
duration = "1s"
[[host]]
name = "snd"
profile = "tests/zero-cost.toml"
[[host]]
name = "rtr"
profile = "tests/zero-cost.toml"
[[host]]
name = "a"
profile = "tests/zero-cost.toml"
[[host]]
name = "b"
profile = "tests/zero-cost.toml"
[[link]]
between = ["snd:eth0", "rtr:eth0"]
[[link]]
between = ["rtr:eth1", "a:eth0"]
[[link]]
between = ["rtr:eth2", "b:eth0"]
[tc.snd]
script = """
ip route change 10.2.0.0/24 via 10.1.0.2 dev eth0 realms 2
ip route change 10.3.0.0/24 via 10.1.0.2 dev eth0 realms 5/3
qdisc add dev eth0 root handle 1: htb default 9
class add dev eth0 parent 1: classid 1:2 htb rate 100mbit
class add dev eth0 parent 1: classid 1:3 htb rate 100mbit
class add dev eth0 parent 1: classid 1:9 htb rate 100mbit
filter add dev eth0 parent 1: protocol ip prio 1 route to 2 classid 1:2
filter add dev eth0 parent 1: protocol ip prio 1 route to 3 from 5 classid 1:3
"""
[tc.rtr]
script = """
ip route change 10.1.0.0/24 dev eth0 realm 7
ip route change 10.2.0.0/24 dev eth1 realms 4
qdisc add dev eth1 root handle 1: htb default 9
class add dev eth1 parent 1: classid 1:1 htb rate 100mbit
class add dev eth1 parent 1: classid 1:9 htb rate 100mbit
filter add dev eth1 parent 1: protocol ip prio 1 route to 4 from 7 classid 1:1
qdisc add dev eth2 root handle 1: htb default 9
class add dev eth2 parent 1: classid 1:5 htb rate 100mbit
class add dev eth2 parent 1: classid 1:9 htb rate 100mbit
filter add dev eth2 parent 1: protocol ip prio 1 basic match meta(rt_classid eq 0x70000) classid 1:5
filter add dev eth2 parent 1: protocol ip prio 2 route to 255 classid 1:9
qdisc add dev eth0 root handle 1: htb default 9
class add dev eth0 parent 1: classid 1:6 htb rate 100mbit
class add dev eth0 parent 1: classid 1:9 htb rate 100mbit
filter add dev eth0 parent 1: protocol ip prio 1 basic match meta(rt_iif gt 0) classid 1:6
"""
[[traffic]]
kind = "ping"
from = "snd"
to = "a"
interval = "100ms"
[[traffic]]
kind = "ping"
from = "snd"
to = "b"
interval = "100ms"
"#);
    assert_eq!((r.rtt[0].received, r.rtt[1].received), (10, 10));
    let sent = |host: &str, dev: &str| -> Vec<(String, u64)> {
        let d = r.tc.end.iter().find(|d| d.host == host && d.dev == dev).unwrap();
        let mut v: Vec<(String, u64)> = d
            .class
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["handle"].as_str().unwrap().into(), c["stats"]["packets"].as_u64().unwrap()))
            .collect();
        v.sort();
        v
    };
    let want = |v: &[(&str, u64)]| v.iter().map(|&(c, n)| (c.to_string(), n)).collect::<Vec<_>>();
    // The sender's output routes: realm 2 to a's subnet, 5/3 to b's.
    assert_eq!(sent("snd", "eth0"), want(&[("1:2", 10), ("1:3", 10), ("1:9", 0)]));
    // Forwarded to a: the forward route's TO realm 4, FROM from the route back to snd
    // (its TO realm 7, shifted): 0x70004.
    assert_eq!(sent("rtr", "eth1"), want(&[("1:1", 10), ("1:9", 0)]));
    // Forwarded to b: no realm on that route, FROM 7 all the same.
    assert_eq!(sent("rtr", "eth2"), want(&[("1:5", 10), ("1:9", 0)]));
    // (eth2 keeps the route for its qdisc because a route filter is there, though it
    // never matches.) eth0 has no route or flow filter: the kernel drops the route
    // before the qdisc (IFF_XMIT_DST_RELEASE), so its rt_iif filter never matches the
    // replies from a and b the router forwards back to snd.
    assert_eq!(sent("rtr", "eth0"), want(&[("1:6", 0), ("1:9", 20)]));
}
