//! Hosts with CPUs (docs/cpu-model.md): the path's costs in virtual time, locks, XPS,
//! settings, and the single-lock collapse of seed 001.

mod common;

use common::{host, run, scenario};
use qdisc_scenario::backend::{NoProgress, RunError, RunOptions};
use qdisc_scenario::profile::Profile;
use qdisc_scenario::RunResult;
use qdisc_sim::simulate;

/// Datagrams the receiver got (iperf3's count of those sent minus the lost).
fn received(r: &RunResult) -> u64 {
    let rx = &r.throughput[0].receiver;
    rx.packets.unwrap() - rx.lost_packets.unwrap()
}

fn share(r: &RunResult, h: &str, symbol: &str) -> f64 {
    host(r, h).functions.iter().find(|f| f.symbol == symbol).map_or(0.0, |f| f.share)
}

#[test]
fn an_idle_ping_costs_the_path_its_cpu_steps() {
    let r = run(r#"
duration = "1s"
[[host]]
name = "client"
cpus = 2
[[host]]
name = "server"
cpus = 2
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "1gbit"
delay = "10ms"
[[traffic]]
kind = "ping"
from = "client"
to = "server"
interval = "100ms"
sender_cpus = "1"
"#);
    let k = Profile::default_profile();
    let c = &k.cost;
    let (w, lock, enq) = (c.wakeup_latency.ns, k.lock.uncontended.ns, k.qdisc_cost("pfifo_fast").enqueue);
    // Client: the ping process (awake: ping takes its timestamp) on CPU 1: sendto +
    // __dev_queue_xmit, pfifo_fast's producer lock and a bypass enqueue, then the
    // driver: on the wire. 98 + 24 bytes at 1 Gbit/s take 976 ns, then 10 ms. Server:
    // the interrupt's NAPI poll on CPU 0 (no wake-up: softirq), the driver, IP and
    // icmp_rcv, the reply's xmit the same way. Client: NAPI on CPU 0, driver, IP, the
    // raw socket's queue (a GRO batch goes up the stack when the poll has taken it:
    // after its napi_gro_receive); it wakes the ping process on CPU 1, which reads
    // the reply.
    let request = c.udp_sendmsg.ns + c.dev_queue_xmit.ns + lock + enq + 976 + 10_000_000;
    let reply = c.napi_gro_receive.ns + c.ip_rcv.ns + c.icmp_rcv.ns + c.dev_queue_xmit.ns + lock + enq;
    let back = 976 + 10_000_000 + c.napi_gro_receive.ns + w + c.recvmsg.ns;
    let rtt_ms = (request + reply + back) as f64 / 1e6;
    let p = &r.rtt[0];
    assert_eq!((p.transmitted, p.received), (10, 10));
    // Some requests find the client's qdisc state line last touched by CPU 0 — by the
    // NET_TX run there after a completion woke a queue BQL had stopped (while BQL's
    // limit is still growing): one cache-line transfer more. The first cannot.
    let later = rtt_ms + k.lock.transfer.ns as f64 / 1e6;
    assert!((p.samples[0].rtt_ms - rtt_ms).abs() < 1e-9, "{} vs {rtt_ms}", p.samples[0].rtt_ms);
    for s in &p.samples {
        assert!([rtt_ms, later].iter().any(|w| (s.rtt_ms - w).abs() < 1e-9), "{} vs {rtt_ms} or {later}", s.rtt_ms);
    }
    // The CPU report: the client's CPU 1 ran the ping process only (sys time).
    let client = host(&r, "client");
    assert_eq!((client.cpus, client.source.as_str(), client.profile.as_str()), (2, "model", "default"));
    assert_eq!(client.total[1].softirq, 0.0);
    assert!(client.total[1].sys > 0.0 && client.total[1].user == 0.0);
    assert!(client.functions.iter().any(|f| f.symbol == "pfifo_fast_enqueue"));
}

const ROUTER: &str = r#"
duration = "20ms"
seed = 1
[[host]]
name = "gen"
cpus = 16
[[host]]
name = "router"
cpus = ROUTER_CPUS
[[host]]
name = "sink"
cpus = 16
[[link]]
between = ["gen:eth0", "router:eth0"]
rate = "100gbit"
txqueues = 16
[[link]]
between = ["router:eth1", "sink:eth0"]
rate = "100gbit"
txqueues = 16
[tc.router]
script = """
ROOT
"""
[[traffic]]
kind = "udp"
from = "gen"
to = "sink"
flows = 64
rate = "unlimited"
size = "58"
sender_cpus = "0-15"
"#;

fn router(cpus: u32, root: &str) -> RunResult {
    run(&ROUTER.replace("ROUTER_CPUS", &cpus.to_string()).replace("ROOT", root))
}

#[test]
fn one_root_lock_collapses_where_mq_scales() {
    let mq = router(16, "tc qdisc add dev eth1 root handle 1: mq");
    let pfifo = router(16, "tc qdisc add dev eth1 root pfifo");
    let (m, p) = (received(&mq), received(&pfifo));
    assert!(m >= 5 * p / 2, "mq {m} vs pfifo {p} datagrams");
    // The CPUs that forward through one lock spend their time waiting for it.
    assert!(share(&pfifo, "router", "native_queued_spin_lock_slowpath") >= 50.0);
    assert!(share(&mq, "router", "native_queued_spin_lock_slowpath") == 0.0);
    let busy = &host(&pfifo, "router").locks[0];
    assert_eq!(busy.name, "eth1 tx-0 qdisc busylock");
    assert!(busy.contended * 10 >= busy.acquisitions * 9, "{busy:?}");
    // What the router could not take in, its NIC dropped.
    assert!(host(&pfifo, "router").rx_discards["eth0"] > 0);
    // More cores do not help a single lock.
    let p4 = received(&router(4, "tc qdisc add dev eth1 root pfifo"));
    assert!((p4 as f64 / p as f64 - 1.0).abs() < 0.35, "4 cores {p4}, 16 cores {p}");
}

#[test]
fn xps_lines_pick_the_queue_of_the_sending_cpu() {
    let r = run(r#"
duration = "10ms"
[[host]]
name = "a"
cpus = 2
[[host]]
name = "b"
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "10gbit"
txqueues = 2
[tc.a]
script = """
echo 2 > /sys/class/net/eth0/queues/tx-0/xps_cpus
echo 1 > /sys/class/net/eth0/queues/tx-1/xps_cpus
"""
[[traffic]]
kind = "udp"
from = "a"
to = "b"
rate = "10mbit"
size = "100"
sender_cpus = "0"
[[traffic]]
kind = "udp"
from = "a"
to = "b"
rate = "10mbit"
size = "300"
sender_cpus = "1"
"#);
    let dev = r.tc.end.iter().find(|d| d.host == "a" && d.dev == "eth0").unwrap();
    let q = dev.qdisc.as_array().unwrap();
    let child = |parent: &str| q.iter().find(|x| x["parent"] == parent).unwrap();
    let per_packet =
        |parent: &str| child(parent)["bytes"].as_u64().unwrap() / child(parent)["packets"].as_u64().unwrap();
    // CPU 0's map is tx-1, CPU 1's is tx-0: 142-byte frames on :2, 342-byte on :1.
    assert_eq!((per_packet(":2"), per_packet(":1")), (142, 342));
}

#[test]
fn default_qdisc_set_before_the_first_tc_line_is_the_boot_default() {
    let r = run(r#"
duration = "10ms"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "1gbit"
[[link]]
between = ["a:eth1", "b:eth1"]
rate = "1gbit"
txqueues = 2
[tc.a]
script = """
sysctl -w net.core.default_qdisc=fq_codel
tc qdisc add dev eth0 root handle 1: tbf rate 1mbit burst 10k latency 10ms
sysctl -w net.core.default_qdisc=pfifo
tc qdisc del dev eth0 root
"""
"#);
    let kinds = |dev: &str| {
        let d = r.tc.end.iter().find(|d| d.host == "a" && d.dev == dev).unwrap();
        d.qdisc.as_array().unwrap().iter().map(|q| q["kind"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    // eth1 came up with the boot default (mq, fq_codel per queue); eth0's root, deleted
    // after the second sysctl, came back as pfifo.
    assert_eq!(kinds("eth1"), ["mq", "fq_codel", "fq_codel"]);
    assert_eq!(kinds("eth0"), ["pfifo"]);
}

#[test]
fn tcp_over_a_path_with_no_rate_and_no_delay_is_bounded_by_cpu() {
    let text = r#"
duration = "100ms"
[[host]]
name = "a"
PROFILE
[[host]]
name = "b"
PROFILE
[[link]]
between = ["a:eth0", "b:eth0"]
[[traffic]]
kind = "tcp"
from = "a"
to = "b"
"#;
    let r = run(&text.replace("PROFILE", ""));
    let bps = r.throughput[0].receiver.bits_per_second;
    assert!(bps > 1e9 && bps < 1e12, "{bps}");
    assert!(host(&r, "b").total.iter().any(|c| c.idle < 5.0), "some CPU is the bottleneck");
    // Without CPU costs nothing bounds it: a clear error, not a hang.
    let s = scenario(&text.replace("PROFILE", "profile = \"tests/zero-cost.toml\""));
    match simulate(&s, &RunOptions::default(), &mut NoProgress) {
        Err(RunError::Failed(e)) => assert!(e.contains("stopped advancing"), "{e}"),
        other => panic!("{:?}", other.map(|r| r.0.throughput[0].receiver.bits_per_second)),
    }
}

#[test]
fn unanswered_pings_are_lost_not_in_flight() {
    let r = run(r#"
duration = "2s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "1gbit"
delay = "1ms"
loss = "100%"
[[traffic]]
kind = "ping"
from = "a"
to = "b"
interval = "100ms"
"#);
    let p = &r.rtt[0];
    assert_eq!((p.transmitted, p.received, p.in_flight_at_end), (20, 0, 0));
}

#[test]
fn same_seed_same_cpu_report() {
    let a = router(4, "tc qdisc add dev eth1 root pfifo");
    let b = router(4, "tc qdisc add dev eth1 root pfifo");
    assert_eq!(serde_json::to_string(&a.cpu).unwrap(), serde_json::to_string(&b.cpu).unwrap());
}

#[test]
fn a_sender_slower_than_its_rate_sends_what_its_cpu_can() {
    let r = run(r#"
duration = "50ms"
[[host]]
name = "a"
cpus = 1
[[host]]
name = "b"
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "100gbit"
[[traffic]]
kind = "udp"
from = "a"
to = "b"
rate = "2gbit"
size = "58"
"#);
    // 2 Gbit/s of 58-byte payloads is 4.3 M datagrams/s; one CPU sends about 2 M
    // (calibration.rs), owing the rest — a count, not a queue of sends.
    let pps = r.throughput[0].sender.packets.unwrap() as f64 / 0.05;
    assert!((1.7e6..2.5e6).contains(&pps), "{pps}");
    assert!(host(&r, "a").total[0].idle < 1.0);
}

/// Every sender thread keeps sending, whatever the qdisc, queues, cores and pins: no
/// CPU is left parked on a lock nobody will hand over, no owner leaves a qdisc marked
/// running. Locks end either free with nobody waiting or held with a FIFO behind.
#[test]
fn no_thread_is_ever_stranded() {
    use qdisc::tree::KernelVersion;
    let roots = [
        "",
        "tc qdisc add dev eth0 root pfifo limit 50",
        "tc qdisc add dev eth0 root handle 1: mq",
        "tc qdisc add dev eth0 root sfq",
        "tc qdisc add dev eth0 root handle 1: htb default 1\ntc class add dev eth0 parent 1: classid 1:1 htb rate 5gbit",
        "tc qdisc add dev eth0 root tbf rate 3gbit burst 100k latency 5ms",
    ];
    let mut seed = 1u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for case in 0..24 {
        let root = roots[case % roots.len()];
        let (cpus, txq, flows) = (1 + next(4), [1, 2, 4][next(3) as usize], 1 + next(5));
        let pins = if next(2) == 0 { String::new() } else { format!("sender_cpus = \"0-{}\"", cpus - 1) };
        let rate = if next(2) == 0 {
            "rate = \"unlimited\"".to_string()
        } else {
            format!("rate = \"{}mbit\"", 100 + next(900))
        };
        let text = format!(
            r#"
duration = "20ms"
seed = {case}
[[host]]
name = "a"
cpus = {cpus}
[[host]]
name = "b"
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "{}gbit"
txqueues = {txq}
[tc.a]
script = """
{root}
"""
[[traffic]]
kind = "udp"
from = "a"
to = "b"
flows = {flows}
size = "{}"
{rate}
{pins}
"#,
            [1, 10, 100][next(3) as usize],
            [58, 500, 1400][next(3) as usize],
        );
        let what = format!("case {case}: cpus {cpus} txq {txq} flows {flows} root {root:?} {rate} {pins}");
        let s = scenario(&text);
        let mut sim = qdisc_sim::Sim::new(&s, KernelVersion(6, 12)).unwrap_or_else(|e| panic!("{what}: {e}"));
        sim.run(|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
        let hc = sim.hosts[0].cpu.as_ref().unwrap();
        for l in &hc.locks {
            assert!(l.holder.is_some() || l.waiters.is_empty(), "{what}: {} free with waiters", l.name);
        }
        // Every stream sent in the last 5 ms (a stuck thread sends nothing more).
        let opts = RunOptions { interval: std::time::Duration::from_millis(5), ..Default::default() };
        let r = simulate(&s, &opts, &mut NoProgress).unwrap().0;
        for st in &r.throughput[0].streams {
            let last: u64 = st.intervals.iter().filter(|i| i.start >= 0.015).map(|i| i.packets.unwrap()).sum();
            assert!(last > 0, "{what}: stream {} sent nothing after 15 ms", st.id);
        }
    }
}

#[test]
fn a_ping_faster_than_its_cpu_wakes_keeps_its_schedule() {
    // Requests every 10 us while each takes a 43 us wake-up of the ping process: the
    // schedule follows the interval, not the requests sent so far.
    let r = run(r#"
duration = "2ms"
[[host]]
name = "a"
cpus = 1
[[host]]
name = "b"
[[link]]
between = ["a:eth0", "b:eth0"]
rate = "1gbit"
[[traffic]]
kind = "ping"
from = "a"
to = "b"
interval = "10us"
"#);
    // 200 due; the process, woken 43 us after a request falls due, sends what piled
    // up meanwhile in one go, and those due in the last wake-up's shadow stay unsent.
    let p = &r.rtt[0];
    assert!((195..=200).contains(&p.transmitted), "{}", p.transmitted);
    assert_eq!(p.received, p.transmitted - p.in_flight_at_end);
}
