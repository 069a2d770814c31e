//! The receive side (docs/cpu-model.md, "Receive"): loopback, veth pairs and their
//! rings, BQL on veth, RPS, coalescing, GRO, skb-free deferral, threaded NAPI, MTU and
//! txqueuelen — each on a hand-built case, with the default profile's costs.

mod common;

use common::{host, run};
use qdisc_scenario::profile::Profile;
use qdisc_scenario::RunResult;

/// Nanoseconds charged to a function row of a host.
fn ns(r: &RunResult, h: &str, symbol: &str) -> u64 {
    host(r, h).functions.iter().find(|f| f.symbol == symbol).map_or(0, |f| (f.seconds * 1e9).round() as u64)
}

/// A profile file like the default with other costs (removed when dropped).
struct TempProfile(std::path::PathBuf);

impl TempProfile {
    fn new(name: &str, costs: &[(&str, u64)]) -> TempProfile {
        let mut text = qdisc_scenario::profile::DEFAULT.to_string();
        for (cost, ns) in costs {
            let at = text.find(&format!("[cost.{cost}]\nns = ")).expect("a cost of the profile");
            let start = at + format!("[cost.{cost}]\nns = ").len();
            let end = start + text[start..].find('\n').unwrap();
            text.replace_range(start..end, &ns.to_string());
        }
        let path = std::env::temp_dir().join(format!("qdl-rx-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        TempProfile(path)
    }
}

impl Drop for TempProfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_ping_over_lo_is_answered_on_the_pinging_cpu() {
    let r = run(r#"
duration = "1s"
[[host]]
name = "h"
cpus = 2
[[traffic]]
kind = "ping"
from = "h"
to = "h"
interval = "100ms"
sender_cpus = "1"
"#);
    let k = Profile::default_profile();
    let c = &k.cost;
    let lock = k.lock.uncontended.ns;
    // The ping process (woken: its timestamp is taken after the wake-up): sendto and
    // __dev_queue_xmit; lo is noqueue: its _xmit_lock, sch_direct_xmit's bookkeeping,
    // loopback_xmit, enqueue_to_backlog of this CPU. The backlog runs on this CPU when
    // the thread is done: process_backlog, ip_rcv, icmp_rcv, and the reply the same
    // way back (its __dev_queue_xmit from the softirq); then udp_rcv's row for the
    // reply, and the ping process (still on the CPU: no wake-up) reads it.
    let xmit = lock + c.sch_direct_xmit.ns + c.loopback_xmit.ns + c.netif_rx.ns;
    let request = c.udp_sendmsg.ns + c.dev_queue_xmit.ns + xmit;
    let answer = c.napi_gro_receive.ns + c.ip_rcv.ns + c.icmp_rcv.ns + c.dev_queue_xmit.ns + xmit;
    let back = c.napi_gro_receive.ns + c.ip_rcv.ns + c.udp_rcv.ns + c.recvmsg.ns;
    let rtt_ms = (request + answer + back) as f64 / 1e6;
    let p = &r.rtt[0];
    assert_eq!((p.transmitted, p.received, p.dst.as_str()), (10, 10, "127.0.0.1"));
    for s in &p.samples {
        assert!((s.rtt_ms - rtt_ms).abs() < 1e-9, "{} vs {rtt_ms}", s.rtt_ms);
    }
    // Everything ran on CPU 1; CPU 0 stayed idle.
    let h = host(&r, "h");
    assert_eq!(h.total[0].idle, 100.0);
    assert!(h.total[1].softirq > 0.0 && h.total[1].sys > 0.0);
}

#[test]
fn udp_over_lo_arrives_whole_and_hosts_joined_by_a_veth_pair_share_their_cpus() {
    let r = run(&format!(
        "{}{}",
        VETH_PAIR.replace("DUR", "200ms"),
        r#"[[traffic]]
kind = "udp"
from = "a"
to = "a"
rate = "10mbit"
size = "1000"
[[traffic]]
kind = "udp"
from = "a"
to = "b"
rate = "10mbit"
size = "1000"
"#
    ));
    for t in &r.throughput {
        let (s, rx) = (&t.sender, &t.receiver);
        assert_eq!(s.packets, Some(250), "traffic[{}]", t.traffic);
        assert_eq!((rx.packets, rx.lost_packets), (Some(250), Some(0)), "traffic[{}]", t.traffic);
    }
    assert_eq!(r.throughput[0].dst, "127.0.0.1");
    // One machine: a's CPUs, with b as a namespace on them.
    assert_eq!(r.cpu.len(), 1);
    assert_eq!((r.cpu[0].host.as_str(), r.cpu[0].net.namespaces.clone()), ("a", vec!["b".to_string()]));
    // veth1 has no GRO: the peer's packets went through the backlog (netif_rx).
    assert_eq!(ns(&r, "a", "napi_gro_receive"), 0);
    assert_eq!(ns(&r, "a", "process_backlog"), 500 * Profile::default_profile().cost.napi_gro_receive.ns);
}

/// Two 2-CPU hosts joined by a veth pair, for `DUR`.
const VETH_PAIR: &str = r#"
duration = "DUR"
[[host]]
name = "a"
cpus = 2
[[host]]
name = "b"
cpus = 2
[[link]]
between = ["a:veth0", "b:veth1"]
kind = "veth-pair"
"#;

const NIC_PAIR: &str = r#"
duration = "1s"
[[host]]
name = "client"
cpus = 4
[[host]]
name = "server"
cpus = 4
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "1gbit"
delay = "1ms"
"#;

#[test]
fn rps_moves_the_protocol_work_to_the_chosen_cpu_with_an_ipi() {
    let udp = r#"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "8mbit"
size = "1000"
"#;
    let plain = run(&format!("{NIC_PAIR}{udp}"));
    let rps =
        run(&format!("{NIC_PAIR}[tc.server]\nscript = \"echo 4 > /sys/class/net/eth0/queues/rx-0/rps_cpus\"\n{udp}"));
    let c = Profile::default_profile().cost;
    // 1 ms apart, every datagram finds the queues idle; the last is still on the wire.
    let n = 999;
    assert_eq!(rps.throughput[0].receiver.lost_packets, Some(0));
    assert_eq!(rps.throughput[0].receiver.packets, Some(n));
    // Without RPS the NAPI CPU does it all; with it, NAPI takes the frame and queues it
    // to CPU 2's backlog (an IPI each time: the backlog is idle), which runs the stack.
    assert_eq!(ns(&plain, "server", "process_backlog"), 0);
    assert_eq!(ns(&rps, "server", "napi_gro_receive"), n * c.napi_gro_receive.ns);
    assert_eq!(ns(&rps, "server", "enqueue_to_backlog"), n * c.netif_rx.ns);
    assert_eq!(ns(&rps, "server", "smp_call_function_single_async"), n * c.ipi.ns);
    assert_eq!(ns(&rps, "server", "process_backlog"), n * c.napi_gro_receive.ns);
    assert_eq!(ns(&rps, "server", "udp_rcv"), ns(&plain, "server", "udp_rcv"));
    let server = host(&rps, "server");
    assert!(server.total[2].softirq > 0.0 && server.total[1].softirq == 0.0 && server.total[3].softirq == 0.0);
}

#[test]
fn rx_usecs_delays_the_receive_interrupt_and_tx_usecs_the_completion() {
    let ping = r#"
[[traffic]]
kind = "ping"
from = "client"
to = "server"
interval = "100ms"
sender_cpus = "1"
"#;
    let rtt = |script: &str| {
        let r = run(&format!("{NIC_PAIR}[tc.server]\nscript = \"{script}\"\n{ping}"));
        assert_eq!(r.rtt[0].received, 10);
        r.rtt[0].samples.iter().map(|s| s.rtt_ms).collect::<Vec<_>>()
    };
    let base = rtt("");
    let rx = rtt("ethtool -C eth0 rx-usecs 50");
    let tx = rtt("ethtool -C eth0 tx-usecs 50");
    for i in 0..10 {
        // The request waits 50 µs for the server's interrupt; the reply does not.
        assert!((rx[i] - base[i] - 0.050).abs() < 1e-9, "{} vs {}", rx[i], base[i]);
        // A later TX completion frees the reply's skb later; it does not delay it.
        assert!((tx[i] - base[i]).abs() < 1e-9, "{} vs {}", tx[i], base[i]);
    }
}

#[test]
fn the_mtu_sets_the_mss_and_txqueuelen_at_boot_sizes_the_default_qdisc() {
    let r = run(&format!(
        r#"{NIC_PAIR}[tc.client]
script = """
sysctl -w net.core.default_qdisc=pfifo
ip link set dev eth0 mtu 9000 txqueuelen 50
"""
[tc.server]
script = "ip link set dev eth0 mtu 9000"
[[traffic]]
kind = "tcp"
from = "client"
to = "server"
duration = "100ms"
[[traffic]]
kind = "tcp"
from = "server"
to = "server"
duration = "100ms"
"#
    ));
    // tcp_mtu_to_mss: MTU − 20 (IPv4) − 20 (TCP) − 12 (timestamps); lo's MTU is 65536.
    assert_eq!(r.throughput[0].tcp_mss, Some(8948));
    assert_eq!(r.throughput[1].tcp_mss, Some(65484));
    let dev = r.tc.end.iter().find(|d| d.host == "client" && d.dev == "eth0").unwrap();
    assert_eq!(dev.qdisc[0]["kind"], "pfifo");
    assert_eq!(dev.qdisc[0]["options"]["limit"], 50);
}

/// A veth pair whose receiving end (b) polls in a thread of its own and pays `ip_rcv`
/// of 5 µs a packet: three senders outrun it.
fn veth_flood(profile: &TempProfile, a_script: &str, bql: &str, ping: bool) -> RunResult {
    let ping = if ping {
        "[[traffic]]\nkind = \"ping\"\nfrom = \"a\"\nto = \"b\"\ninterval = \"10ms\"\nsender_cpus = \"3\"\n"
    } else {
        ""
    };
    let p = profile.0.display();
    run(&format!(
        r#"
duration = "500ms"
[[host]]
name = "a"
cpus = 5
profile = "{p}"
[[host]]
name = "b"
cpus = 5
profile = "{p}"
[[link]]
between = ["a:veth0", "b:veth1"]
kind = "veth-pair"
veth_bql = "{bql}"
[tc.a]
script = """
ethtool -K veth0 tso off
{a_script}
"""
[tc.b]
script = """
ethtool -K veth1 gro on
echo 1 > /sys/class/net/veth1/threaded
"""
[[traffic]]
kind = "udp"
from = "a"
to = "b"
rate = "unlimited"
size = "64"
flows = 6
sender_cpus = "0,2,4"
{ping}"#
    ))
}

#[test]
fn a_full_veth_ring_stops_a_queue_with_a_qdisc_and_drops_without() {
    let slow = TempProfile::new("slow-ring", &[("ip_rcv", 5000)]);
    let sent = |r: &RunResult| r.throughput[0].sender.packets.unwrap();
    let got = |r: &RunResult| r.throughput[0].receiver.bytes / 64;
    // noqueue (veth's default): a full ring drops in veth_xmit, counted as tx_dropped.
    let nq = veth_flood(&slow, "", "off", false);
    let dropped = host(&nq, "a").net.tx_dropped["veth0"];
    assert!(dropped > sent(&nq) / 2, "{dropped} of {}", sent(&nq));
    // What was sent was received, dropped, or is still in the ring (≤ 256)
    // (and up to a GRO batch of 8 taken from it, not yet up the stack).
    let left = sent(&nq) - got(&nq) - dropped;
    assert!(left <= 256 + 8, "{left}");
    // With a qdisc the queue stops instead: no driver drops; the qdisc holds the rest.
    let q = veth_flood(&slow, "tc qdisc add dev veth0 root pfifo limit 1000", "off", false);
    assert!(host(&q, "a").net.tx_dropped.is_empty());
    let dev = q.tc.end.iter().find(|d| d.host == "a" && d.dev == "veth0").unwrap();
    let qd = &dev.qdisc[0];
    let (drops, qlen) = (qd["drops"].as_u64().unwrap(), qd["qlen"].as_u64().unwrap());
    assert!(drops > 0 && qlen > 900, "drops {drops} qlen {qlen}");
    // The requeued packet (dev_requeue_skb) is neither in the qdisc's queue nor lost.
    let left = sent(&q) - got(&q) - drops - qlen;
    assert!((1..=256 + 8 + 1).contains(&left), "{left}");
    // Both run at the consumer's pace: the CPU of veth1's NAPI thread never idles (the
    // senders behind the qdisc sleep on their send buffers and wake at half of it,
    // those of noqueue never sleep). Behind the qdisc that CPU also restarts the
    // stopped queue (the ring's consumer wakes it), so it receives somewhat less.
    for r in [&q, &nq] {
        let napi = host(r, "a").total.iter().map(|c| c.softirq).fold(0.0, f64::max);
        assert!(napi > 0.98, "{napi}");
    }
    assert!(got(&q) <= got(&nq), "{} {}", got(&q), got(&nq));
}

#[test]
fn bql_on_veth_bounds_what_waits_in_the_ring() {
    let slow = TempProfile::new("slow-bql", &[("ip_rcv", 5000)]);
    let fq = "tc qdisc add dev veth0 root fq_codel";
    let p50 = |r: &RunResult| r.rtt[0].stats.as_ref().unwrap().p50;
    let off = veth_flood(&slow, fq, "off", true);
    let bytes = veth_flood(&slow, fq, "bytes", true);
    let time = veth_flood(&slow, fq, "time", true);
    assert!(host(&off, "a").net.bql.is_empty());
    // Without BQL the ping waits behind a full ring: 256 packets at > 5 µs each.
    assert!(p50(&off) > 1.28, "{}", p50(&off));
    // With it, DQL's limit holds the ring shorter (one queue per veth end reported).
    for (r, variant) in [(&bytes, "bytes"), (&time, "time")] {
        let q = &host(r, "a").net.bql[0];
        assert_eq!((q.dev.as_str(), q.txq, q.variant.as_str()), ("veth0", 0, variant));
        let most = q.samples.iter().map(|s| s.limit).max().unwrap();
        // DQL stops the queue once in flight passes the limit: at most one packet over.
        for s in &q.samples {
            assert!(s.inflight_max <= most + 106, "{s:?}");
        }
        assert!(p50(r) < p50(&off) * 0.9, "{variant}: {} vs {}", p50(r), p50(&off));
    }
    // The time-based revision completes every 100 µs, not per poll of 64: a smaller
    // limit and a shorter wait than v5.
    assert!(p50(&time) < p50(&bytes), "{} vs {}", p50(&time), p50(&bytes));
}

/// One loopback TCP flow, sender on CPU 0 and receiver on CPU 1.
fn loopback(script: &str) -> RunResult {
    run(&format!(
        r#"
duration = "200ms"
[[host]]
name = "h"
cpus = 3
[tc.h]
script = """
{script}
"""
[[traffic]]
kind = "tcp"
from = "h"
to = "h"
sender_cpus = "0"
receiver_cpus = "1"
"#
    ))
}

#[test]
fn skb_frees_go_back_to_the_allocating_cpu_unless_skb_defer_max_is_0() {
    let defer = loopback("");
    let local = loopback("sysctl -w net.core.skb_defer_max=0");
    let rps = loopback("echo 4 > /sys/class/net/lo/queues/rx-0/rps_cpus");
    let bps = |r: &RunResult| r.throughput[0].receiver.bits_per_second;
    // One tail loss probe finds the receive window still growing and retransmits the
    // last segment (vs_kernel.rs, RWND_TLP); nothing is lost.
    for r in [&defer, &local, &rps] {
        assert_eq!(r.throughput[0].sender.retransmits, Some(1));
    }
    // The sender's CPU is the bottleneck: the frees deferred to it cost throughput.
    let (s, l) = (&host(&defer, "h").total, &host(&local, "h").total);
    assert!(s[0].idle < 0.1 && l[0].idle < 0.1);
    assert!(s[0].softirq > l[0].softirq, "{} vs {}", s[0].softirq, l[0].softirq);
    assert!(s[1].sys < l[1].sys, "{} vs {}", s[1].sys, l[1].sys);
    assert!(bps(&defer) < bps(&local) * 0.98, "{} vs {}", bps(&defer), bps(&local));
    // RPS on lo: the receive softirq runs on CPU 2, beside the sender.
    let r = &host(&rps, "h").total;
    assert!(r[2].softirq > 5.0 && r[0].softirq < s[0].softirq);
    assert!(bps(&rps) > bps(&defer) * 1.05, "{} vs {}", bps(&rps), bps(&defer));
}

#[test]
fn gro_merges_the_segments_a_router_split() {
    let path = |server: &str, flows: u32| {
        run(&format!(
            r#"
duration = "200ms"
[[host]]
name = "client"
[[host]]
name = "router"
[[host]]
name = "server"
[[link]]
between = ["client:eth0", "router:eth0"]
rate = "1gbit"
[[link]]
between = ["router:eth1", "server:eth0"]
rate = "1gbit"
delay = "1ms"
[tc.server]
script = """
ethtool -C eth0 rx-usecs 100
{server}
"""
[[traffic]]
kind = "tcp"
from = "client"
to = "server"
flows = {flows}
"#
        ))
    };
    let c = Profile::default_profile().cost;
    let calls = |r: &RunResult, f: &str, cost: u64| ns(r, "server", f) / cost;
    let off = path("ethtool -K eth0 gro off", 1);
    let on = path("", 1);
    // The wire carries frames (the router's GRO merges, its GSO splits again); the
    // server's interrupt comes 100 µs after a first frame, so its poll finds a run.
    // Without GRO every frame is one skb up the stack; with it, a run is one.
    let frames = calls(&off, "napi_gro_receive", c.napi_gro_receive.ns);
    assert!(frames > 1000);
    assert_eq!(calls(&off, "tcp_v4_rcv", c.tcp_v4_rcv.ns), frames);
    let (frames_on, skbs_on) =
        (calls(&on, "napi_gro_receive", c.napi_gro_receive.ns), calls(&on, "tcp_v4_rcv", c.tcp_v4_rcv.ns));
    assert!(skbs_on * 4 < frames_on, "{skbs_on} skbs of {frames_on} frames");
    // Four flows interleaved in the one rx queue: GRO holds each flow's skb apart.
    let four = path("", 4);
    let (frames4, skbs4) =
        (calls(&four, "napi_gro_receive", c.napi_gro_receive.ns), calls(&four, "tcp_v4_rcv", c.tcp_v4_rcv.ns));
    assert!(skbs4 * 4 < frames4, "{skbs4} skbs of {frames4} frames");
}

#[test]
fn threaded_napi_polls_on_its_own_cpu() {
    let run_on = |b_script: &str| {
        run(&format!(
            r#"
duration = "100ms"
[[host]]
name = "a"
cpus = 4
[[host]]
name = "b"
cpus = 4
[[link]]
between = ["a:veth0", "b:veth1"]
kind = "veth-pair"
[tc.a]
script = "ethtool -K veth0 tso off"
[tc.b]
script = """
ethtool -K veth1 gro on
{b_script}
"""
[[traffic]]
kind = "udp"
from = "a"
to = "b"
rate = "100mbit"
size = "1000"
sender_cpus = "0"
receiver_cpus = "0"
"#
        ))
    };
    // NAPI of the peer runs where veth_xmit scheduled it: the sender's CPU.
    let softirq = |r: &RunResult| host(r, "a").total.iter().map(|t| t.softirq).collect::<Vec<f64>>();
    let inline = softirq(&run_on(""));
    assert!(inline[0] > 0.0 && inline[1..].iter().all(|&s| s == 0.0), "{inline:?}");
    // Threaded: on its kernel thread's CPU (placed by the seed), after a wake-up.
    let threaded = softirq(&run_on("echo 1 > /sys/class/net/veth1/threaded"));
    let busy: Vec<usize> = (0..4).filter(|&c| threaded[c] > 0.0).collect();
    assert_eq!(busy.len(), 1, "{threaded:?}");
}

#[test]
fn pktgen_sends_whole_frames_from_a_kernel_thread_without_a_socket() {
    let r = run(&format!(
        "{}{}",
        VETH_PAIR.replace("DUR", "100ms"),
        r#"[[traffic]]
kind = "pktgen"
from = "a"
to = "b"
rate = "8mbit"
size = "1000"
sender_cpus = "1"
"#
    ));
    let t = &r.throughput[0];
    let c = Profile::default_profile().cost;
    // 1000-byte frames at 8 Mbit/s: one every ms, the last still on its way.
    assert_eq!((t.kind.as_str(), t.sender.packets, t.sender.bytes), ("pktgen", Some(100), 100_000));
    assert_eq!(t.receiver.bytes, 100_000);
    // Its loop instead of a socket's sendmsg, and no reader: the far UDP frees them.
    assert_eq!(ns(&r, "a", "pktgen_xmit"), 100 * c.pktgen_xmit.ns);
    assert_eq!((ns(&r, "a", "udp_sendmsg"), ns(&r, "a", "recvmsg")), (0, 0));
    assert_eq!(ns(&r, "a", "skb_release_data"), 100 * (c.kfree_skb.ns + c.page_free.ns));
}

#[test]
fn rfs_steers_a_flow_to_its_readers_cpu() {
    let udp = r#"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "8mbit"
size = "1000"
receiver_cpus = "3"
"#;
    let script = "[tc.server]\nscript = \"\"\"\nsysctl -w net.core.rps_sock_flow_entries=32768\n\
                  echo 2048 > /sys/class/net/eth0/queues/rx-0/rps_flow_cnt\n\"\"\"\n";
    let r = run(&format!("{NIC_PAIR}{script}{udp}"));
    let c = Profile::default_profile().cost;
    // NAPI on CPU 0 queues each datagram to CPU 3, where its reader runs.
    assert_eq!(ns(&r, "server", "process_backlog"), 999 * c.napi_gro_receive.ns);
    let t = &host(&r, "server").total;
    assert!(t[3].softirq > 0.0 && t[1].softirq == 0.0 && t[2].softirq == 0.0, "{t:?}");
    // Without the global table the queue's table does nothing.
    let half = script.replace("sysctl -w net.core.rps_sock_flow_entries=32768\n", "");
    assert_ne!(half, script);
    let r = run(&format!("{NIC_PAIR}{half}{udp}"));
    assert_eq!(ns(&r, "server", "process_backlog"), 0);
}
