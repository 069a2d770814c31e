//! clsact's egress hook and mirred in the simulator, with counts derived by hand:
//! UDP at 10 Mbit/s of 1000-byte datagrams for 1 s is 1250 datagrams (one every
//! 0.8 ms), all arrived by the end of a 2 s run over 1 ms links. Hosts use the
//! zero-cost profile (`tests/zero-cost.toml`): CPUs that cost nothing.

use qdisc::tc::TcOpts;
use qdisc::tree::KernelVersion;
use qdisc_scenario::backend::RunError;
use qdisc_scenario::Scenario;
use qdisc_sim::Sim;

/// client:eth0 → server, client:eth1 → mon.
const HOSTS: &str = r#"
duration = "2s"
seed = 3
[[host]]
name = "client"
profile = "tests/zero-cost.toml"
ifb = ["ifb0"]
[[host]]
name = "server"
profile = "tests/zero-cost.toml"
ifb = ["ifb0"]
[[host]]
name = "mon"
profile = "tests/zero-cost.toml"
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "1gbit"
delay = "1ms"
[[link]]
between = ["client:eth1", "mon:eth0"]
rate = "1gbit"
delay = "1ms"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "10mbit"
size = "1000"
duration = "1s"
"#;

const N: u64 = 1250;

fn sim(tc: &str) -> Sim {
    let text = format!("{HOSTS}{tc}");
    let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Sim::new(&s, KernelVersion(6, 12)).unwrap_or_else(|e| panic!("{e}"));
    sim.run(|_| {}).unwrap_or_else(|e| panic!("{e}"));
    sim
}

fn host(sim: &Sim, name: &str) -> usize {
    sim.hosts.iter().position(|h| h.name == name).unwrap()
}

/// `tc -s -j ARGS` on host `h`, parsed.
fn tc_json(sim: &mut Sim, h: &str, args: &str) -> serde_json::Value {
    let h = host(sim, h);
    let argv: Vec<String> = args.split_whitespace().map(String::from).collect();
    let out = sim.hosts[h].tc.exec(&argv, TcOpts { stats: 1, json: true, ..Default::default() });
    assert_eq!(out.code, 0, "{args}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args}: {e}: {}", out.stdout))
}

/// (packets, drops) of the qdisc of `kind` on `dev` of host `h`.
fn qdisc(sim: &mut Sim, h: &str, dev: &str, kind: &str) -> (u64, u64) {
    let v = tc_json(sim, h, &format!("qdisc show dev {dev}"));
    let q = v.as_array().unwrap().iter().find(|q| q["kind"] == kind).unwrap_or_else(|| panic!("{kind}: {v}"));
    (q["packets"].as_u64().unwrap(), q["drops"].as_u64().unwrap())
}

/// (packets, overlimits) of mirred action `index` of host `h`.
fn mirred(sim: &mut Sim, h: &str, index: u32) -> (u64, u64) {
    let v = tc_json(sim, h, &format!("actions get action mirred index {index}"));
    let a = &v[1]["actions"][0];
    (a["stats"]["packets"].as_u64().unwrap(), a["stats"]["overlimits"].as_u64().unwrap())
}

/// (packets sent, packets queued) of class `classid` of htb on `dev`.
fn class(sim: &mut Sim, h: &str, dev: &str, classid: &str) -> (u64, u64) {
    let v = tc_json(sim, h, &format!("class show dev {dev}"));
    let c = v.as_array().unwrap().iter().find(|c| c["handle"] == classid).unwrap_or_else(|| panic!("{classid}: {v}"));
    (c["stats"]["packets"].as_u64().unwrap(), c["stats"]["qlen"].as_u64().unwrap())
}

/// Every packet's endpoint data is gone: delivered, dropped, or (a copy) freed.
fn nothing_left(sim: &Sim) {
    assert_eq!(sim.metas.iter().filter(|m| m.is_some()).count(), 0);
}

fn received(sim: &Sim) -> u64 {
    sim.udp[0].received
}

/// An skbedit priority on the egress hook picks the htb class (htb_classify reads
/// skb->priority before its filters): the UDP datagrams go to 1:20, the handshake-free
/// rest (none here) to the default 1:10. The hook counts each datagram once.
#[test]
fn egress_hook_skbedit_priority_steers_htb_classes() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: htb default 10
class add dev eth0 parent 1: classid 1:10 htb rate 1mbit
class add dev eth0 parent 1: classid 1:20 htb rate 50mbit
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 u32 match ip protocol 17 0xff action skbedit priority 1:20
"""
"#);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "clsact"), (N, 0));
    assert_eq!(class(&mut sim, "client", "eth0", "1:20"), (N, 0));
    assert_eq!(class(&mut sim, "client", "eth0", "1:10"), (0, 0));
    assert_eq!(received(&sim), N);
}

/// TCP's segments take the synchronous transmit path (the sender needs the verdict):
/// the egress hook sees every skb the root qdisc then gets, and its mark steers them
/// by an fw filter into prio's band 1:3.
#[test]
fn egress_hook_runs_on_tcp_segments_too() {
    let text = HOSTS.replace(r#"kind = "udp""#, r#"kind = "tcp""#).replace("rate = \"10mbit\"\nsize = \"1000\"\n", "");
    let text = format!(
        "{text}{}",
        r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: prio
filter add dev eth0 parent 1: protocol ip pref 1 handle 7 fw classid 1:3
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action skbedit mark 7
"""
"#
    );
    let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Sim::new(&s, KernelVersion(6, 12)).unwrap();
    sim.run(|_| {}).unwrap();
    let (seen, dropped) = qdisc(&mut sim, "client", "eth0", "clsact");
    assert_eq!(dropped, 0);
    assert!(seen > 1000, "{seen}");
    let v = tc_json(&mut sim, "client", "class show dev eth0");
    let bands: Vec<u64> = v.as_array().unwrap().iter().map(|c| c["stats"]["packets"].as_u64().unwrap()).collect();
    // Every skb (counted per segment: gso_segs) in band 3, none in the others.
    assert_eq!(bands.len(), 3);
    assert_eq!((bands[0], bands[1]), (0, 0));
    assert_eq!(qdisc(&mut sim, "client", "eth0", "prio").0, bands[2]);
    assert_eq!(seen, bands[2]);
}

/// A policer on the egress hook: what it drops never reaches the qdisc or the wire;
/// seen − dropped = what the root qdisc sent = what the server received.
#[test]
fn egress_hook_drops_are_conserved() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: pfifo limit 1000
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action police rate 4mbit burst 10k drop
"""
"#);
    let (seen, dropped) = qdisc(&mut sim, "client", "eth0", "clsact");
    assert_eq!(seen, N);
    // 1042-byte packets (UDP, IP and Ethernet headers): 4 Mbit/s passes 479.8 a
    // second, the 10 KiB burst 9.8 more.
    assert_eq!(seen - dropped, 489);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "pfifo"), (seen - dropped, 0));
    assert_eq!(received(&sim), seen - dropped);
}

/// `mirred egress mirror` on the egress hook: every datagram leaves twice, once to the
/// server and once (a clone) out of eth1 to mon, whose ingress sees every copy and
/// whose IP layer drops them (addressed elsewhere: PACKET_OTHERHOST). Nothing is left
/// behind.
#[test]
fn egress_mirror_sends_every_packet_twice() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action mirred egress mirror dev eth1
"""
[tc.mon]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 ingress protocol ip pref 1 matchall action pass
"""
"#);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "clsact"), (N, 0));
    assert_eq!(mirred(&mut sim, "client", 1), (N, 0));
    assert_eq!(qdisc(&mut sim, "client", "eth1", "pfifo_fast").0, N);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "pfifo_fast").0, N);
    assert_eq!(qdisc(&mut sim, "mon", "eth0", "clsact"), (N, 0));
    assert_eq!(received(&sim), N);
    nothing_left(&sim);
}

/// `mirred ingress mirror` from eth0's ingress into ifb0's receive path
/// (`netif_receive_skb`): ifb0's ingress hook sees each copy, and the stack takes it
/// as received on ifb0 — the server's socket gets every datagram twice.
#[test]
fn ingress_mirror_into_another_receive_path_delivers_twice() {
    let mut sim = sim(r#"
[tc.server]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 ingress protocol ip pref 1 matchall action mirred ingress mirror dev ifb0
qdisc add dev ifb0 clsact
filter add dev ifb0 ingress protocol ip pref 1 matchall action pass
"""
"#);
    assert_eq!(qdisc(&mut sim, "server", "eth0", "clsact"), (N, 0));
    assert_eq!(qdisc(&mut sim, "server", "ifb0", "clsact"), (N, 0));
    assert_eq!(mirred(&mut sim, "server", 1), (N, 0));
    assert_eq!(received(&sim), 2 * N);
}

/// `mirred ingress mirror` from eth0's egress hook: `netif_rx` into ifb0's receive
/// path (the CPU's backlog); ifb0's ingress hook sees every copy (and drops it here,
/// before the stack), the original goes out to the server.
#[test]
fn egress_mirror_into_a_receive_path_goes_through_the_backlog() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action mirred ingress mirror dev ifb0
qdisc add dev ifb0 clsact
filter add dev ifb0 ingress protocol ip pref 1 matchall action drop
"""
"#);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "clsact"), (N, 0));
    assert_eq!(mirred(&mut sim, "client", 1), (N, 0));
    assert_eq!(qdisc(&mut sim, "client", "ifb0", "clsact"), (N, N));
    assert_eq!(received(&sim), N);
    nothing_left(&sim);
}

/// `mirred ingress redirect` into ifb0's receive path: once, through ifb0's ingress
/// hook (whose policer drops part: seen − dropped = received).
#[test]
fn ingress_redirect_into_another_receive_path() {
    let mut sim = sim(r#"
[tc.server]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 ingress protocol ip pref 1 matchall action mirred ingress redirect dev ifb0
qdisc add dev ifb0 clsact
filter add dev ifb0 ingress protocol ip pref 1 matchall action police rate 4mbit burst 10k drop
"""
"#);
    assert_eq!(qdisc(&mut sim, "server", "eth0", "clsact"), (N, 0));
    let (seen, dropped) = qdisc(&mut sim, "server", "ifb0", "clsact");
    assert_eq!(seen, N);
    assert!(dropped > 0);
    // netif_receive_skb's NET_RX_DROP is the mirred's overlimit.
    assert_eq!(mirred(&mut sim, "server", 1), (N, dropped));
    assert_eq!(received(&sim), N - dropped);
    nothing_left(&sim);
}

/// A redirect of eth0's ingress into eth0's own receive path loops in place until the
/// packet has been sent into a receive path 3 times (`tc_depth`, MIRRED_DEFER_LIMIT):
/// the 4th mirred shoots it uncounted, so the hook sees each packet 4 times and drops
/// it once, the action counts 3, and the innermost `netif_receive_skb`'s NET_RX_DROP
/// one overlimit. (Debian's 6.12.117 in the VM, with ingress mirror to ifb0 and ifb0
/// redirecting into itself: ifb0's clsact saw 2103 packets and dropped 701 for 701
/// datagrams — 3 passes each, the depth the mirror already used counted.)
#[test]
fn ingress_redirect_loop_stops_at_the_depth_limit() {
    let mut sim = sim(r#"
[tc.server]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 ingress protocol ip pref 1 matchall action mirred ingress redirect dev eth0
"""
"#);
    assert_eq!(qdisc(&mut sim, "server", "eth0", "clsact"), (4 * N, N));
    assert_eq!(mirred(&mut sim, "server", 1), (3 * N, N));
    assert_eq!(received(&sim), 0);
    nothing_left(&sim);
}

/// An egress redirect of eth0 into eth0's own transmit path is a loop the second
/// mirred sees (`sched_mirred_dev`): it counts the packet, an overlimit, and drops
/// it; the first counts an overlimit for the NET_XMIT_DROP. The hook sees each packet
/// twice and drops it once — as on Debian's 6.12.117 in the VM (2499 packets seen,
/// 1241 dropped for 1241 datagrams and 17 packets of iperf3's control connection).
#[test]
fn egress_redirect_loop_is_caught_on_the_second_pass() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action mirred egress redirect dev eth0
"""
"#);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "clsact"), (2 * N, N));
    assert_eq!(mirred(&mut sim, "client", 1), (2 * N, 2 * N));
    assert_eq!(received(&sim), 0);
    nothing_left(&sim);
}

/// Egress shaping on an ifb: the egress hook redirects to ifb0, whose tbf shapes; the
/// ifb gives each packet back to eth0's dev_queue_xmit with `tc_skip_classify`, so the
/// hook sees it again (counted) but its mirred does not run twice. What tbf drops
/// never comes back: the hook's second pass counts what tbf sent.
#[test]
fn egress_redirect_to_ifb_shapes_and_comes_back() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action mirred egress redirect dev ifb0
qdisc add dev ifb0 root tbf rate 4mbit burst 10k limit 20k
"""
"#);
    let (sent, tbf_drops) = qdisc(&mut sim, "client", "ifb0", "tbf");
    assert_eq!(sent + tbf_drops, N);
    assert!(tbf_drops > 0);
    assert_eq!(mirred(&mut sim, "client", 1), (N, tbf_drops));
    assert_eq!(qdisc(&mut sim, "client", "eth0", "clsact"), (N + sent, 0));
    assert_eq!(qdisc(&mut sim, "client", "eth0", "pfifo_fast").0, sent);
    assert_eq!(received(&sim), sent);
    nothing_left(&sim);
}

/// mirred on a root qdisc's filter (egress, inside the enqueue): the mirror's copy
/// leaves by eth1, the packet goes on to its class.
#[test]
fn qdisc_filter_mirror_copies_out_another_device() {
    let mut sim = sim(r#"
[tc.client]
script = """
qdisc add dev eth0 root handle 1: prio
filter add dev eth0 parent 1: protocol ip pref 1 matchall classid 1:2 action mirred egress mirror dev eth1
"""
"#);
    assert_eq!(mirred(&mut sim, "client", 1), (N, 0));
    assert_eq!(qdisc(&mut sim, "client", "eth1", "pfifo_fast").0, N);
    assert_eq!(qdisc(&mut sim, "client", "eth0", "prio").0, N);
    assert_eq!(received(&sim), N);
    nothing_left(&sim);
}

/// skbedit queue_mapping on an egress hook would move packets between tx queues,
/// which the simulator does not do: refused, not ignored.
#[test]
fn egress_hook_queue_mapping_is_refused() {
    let text = format!(
        "{HOSTS}{}",
        r#"
[tc.client]
script = """
qdisc add dev eth0 clsact
filter add dev eth0 egress protocol ip pref 1 matchall action skbedit queue_mapping 1
"""
"#
    );
    let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap();
    match Sim::new(&s, KernelVersion(6, 12)) {
        Err(RunError::Unsupported(e)) => assert!(e.contains("skbedit queue_mapping"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    }
}
