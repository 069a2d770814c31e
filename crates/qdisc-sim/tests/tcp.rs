//! TCP in the simulated network: expectations a user of iperf3 would derive by hand,
//! and determinism of whole runs.

use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate;

fn run(text: &str) -> RunResult {
    let s = Scenario::from_bytes(text.as_bytes(), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0
}

/// Goodput of a full link: 1448 payload bytes per 1538 wire bytes.
fn goodput(rate: f64) -> f64 {
    rate * 1448.0 / 1538.0
}

fn link(rate: &str, delay: &str, flows: u32, duration: &str, tc: &str) -> String {
    format!(
        r#"
duration = "{duration}"
[[host]]
name = "client"
[[host]]
name = "server"
[[link]]
between = ["client:eth0", "server:eth0"]
rate = "{rate}"
delay = "{delay}"
[tc.client]
script = """
{tc}
"""
[[traffic]]
kind = "tcp"
from = "client"
to = "server"
flows = {flows}
"#
    )
}

#[test]
fn one_flow_fills_an_idle_100mbit_20ms_path_within_2s() {
    let r = run(&link("100mbit", "10ms", 1, "3s", ""));
    let ivs = &r.throughput[0].streams[0].intervals;
    // The 100 ms interval ending at 2 s.
    let iv = ivs.iter().find(|iv| (iv.end - 2.0).abs() < 1e-9).unwrap();
    assert!(iv.bits_per_second >= 0.95 * goodput(100e6), "{iv:?}");
    // And it never exceeds the link.
    for iv in ivs {
        assert!(iv.bits_per_second <= goodput(100e6) * 1.02, "{iv:?}");
    }
    let rtt = ivs[5].tcp_rtt_us.unwrap();
    assert!(rtt >= 20_000, "srtt {rtt} µs below the path's 20 ms");
}

#[test]
fn four_flows_share_fq_codel_fairly() {
    let r = run(&link("100mbit", "10ms", 4, "10s", "qdisc add dev eth0 root fq_codel"));
    let bytes: Vec<f64> = r.throughput[0].streams.iter().map(|s| s.receiver.bytes as f64).collect();
    let jain = bytes.iter().sum::<f64>().powi(2) / (bytes.len() as f64 * bytes.iter().map(|b| b * b).sum::<f64>());
    assert!(jain >= 0.98, "Jain's index {jain} of {bytes:?}");
    let total = r.throughput[0].receiver.bits_per_second;
    assert!(total >= 0.9 * goodput(100e6), "{total}");
}

#[test]
fn same_scenario_and_seed_give_byte_identical_results() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/bufferbloat-fq_codel.toml");
    let s = Scenario::load(path).unwrap();
    let json = || serde_json::to_string(&simulate(&s, &RunOptions::default(), &mut NoProgress).unwrap().0).unwrap();
    let (a, b) = (json(), json());
    assert!(a == b, "two runs differ");
    assert!(a.contains("\"backend\":\"sim\""));
}

/// A qdisc that cuts GSO skbs into segments (tbf whose burst is smaller than the skb:
/// tbf_segment) passes on only the segments it queued, each with its own bytes: what
/// the receivers get is at most what tbf sent. On a veth link (GSO skbs of up to 64 KB
/// reach the qdisc whole) with bbr, tbf drops segments of most skbs.
#[test]
fn segments_cut_by_tbf_carry_only_their_own_bytes() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/matrix/tbf50-32k-lat50-bbr4.toml");
    let text = std::fs::read_to_string(file).unwrap().replace("duration = \"10s\"", "duration = \"2s\"");
    let r = run(&text);
    let received: u64 = r.throughput[0].receiver.bytes;
    let tbf = r.tc.end.iter().find(|d| d.host == "client" && d.dev == "eth0").unwrap();
    let q = &tbf.qdisc.as_array().unwrap()[0];
    assert_eq!(q["kind"], "tbf");
    let (sent, drops) = (q["bytes"].as_u64().unwrap(), q["drops"].as_u64().unwrap());
    // Payload is 1448 of every 1500 bytes tbf counts (it counts IP and TCP headers too).
    assert!(received <= sent * 1448 / 1500, "received {received} B, tbf sent {sent} B");
    assert!(received as f64 >= 0.8 * 2.0 * 50e6 / 8.0 * 1448.0 / 1500.0, "{received} B");
    assert!(drops > 100, "{drops} segments dropped");
}

/// A 10 Mbit/s path (one-way `delay`) whose client pfifo (5 packets) a 100 Mbit/s UDP
/// burst keeps full from `udp_start` for `udp_len`: whatever TCP sends then is dropped
/// locally. One TCP stream (traffic[0]) starts at `tcp_start`; `sysctl` is a line of
/// the client's script.
fn syn_loss(sysctl: &str, delay: &str, duration: &str, udp: (&str, &str), tcp_start: &str) -> RunResult {
    let (udp_start, udp_len) = udp;
    let script = format!("{sysctl}\nqdisc add dev eth0 root pfifo limit 5");
    run(&(link("10mbit", delay, 1, duration, &script)
        + &format!(
            r#"start = "{tcp_start}"
[[traffic]]
kind = "udp"
from = "client"
to = "server"
rate = "100mbit"
start = "{udp_start}"
duration = "{udp_len}"
"#
        )))
}

/// Bytes the stream had acknowledged in the 100 ms interval starting at `t` (seconds),
/// after none before it; and its retransmissions.
fn first_acked(r: &RunResult, t: f64) -> (u64, Option<u64>) {
    let a: Vec<(f64, u64)> =
        r.throughput[0].streams[0].intervals.iter().map(|iv| ((iv.start * 10.0).round() / 10.0, iv.bytes)).collect();
    assert!(a.iter().all(|&(s, b)| s >= t || b == 0), "{a:?}");
    let first = a.iter().find(|&&(s, _)| s == t).unwrap_or_else(|| panic!("{a:?}")).1;
    (first, r.throughput[0].sender.retransmits)
}

#[test]
fn a_lost_control_syn_delays_the_test_by_the_initial_rto() {
    // iperf3's control connection sends its SYN at 0.1 s into the full queue; the
    // retransmission leaves 1 s later (TCP_TIMEOUT_INIT, at the jiffy: 1.100 s), then
    // the stream connects (one more RTT) and sends: nothing is acked before 1.1 s.
    // The stream's own SYN went through: no retransmission counted on it.
    let (first, retrans) = first_acked(&syn_loss("", "10ms", "4s", ("0s", "200ms"), "100ms"), 1.1);
    assert!(first > 0);
    assert_eq!(retrans, Some(0));
}

#[test]
fn a_lost_stream_syn_counts_as_a_retransmission_and_keeps_the_initial_window() {
    // The control connection's SYN (0 s) gets through; the stream's (0.020 s, after the
    // control SYN-ACK) meets the burst. Retransmitted at 1.020 s, connected at 1.040 s:
    // the initial window of 10 segments (one lost SYN does not shrink it) is acked by
    // about 1.075 s, inside the interval 1.0–1.1.
    let (first, retrans) = first_acked(&syn_loss("", "10ms", "4s", ("5ms", "500ms"), "0s"), 1.0);
    assert!(first >= 10 * 1448, "{first}");
    assert_eq!(retrans, Some(1));
}

#[test]
fn two_lost_stream_syns_start_the_window_at_one_segment() {
    // SYNs at 0.020 and 1.020 s are dropped, the third (3.020 s) connects at 3.040 s with
    // cwnd 1 (tcp_init_transfer): by 3.1 s at most 1 + 2 segments are acked, where the
    // initial window of 10 would have been.
    let (first, retrans) = first_acked(&syn_loss("", "10ms", "4s", ("5ms", "2s"), "0s"), 3.0);
    assert!(first > 0 && first <= 3 * 1448, "{first}");
    assert_eq!(retrans, Some(2));
}

#[test]
fn tcp_syn_retries_bounds_the_connect() {
    // Every SYN meets the burst. With tcp_syn_retries = 2 the control connection sends
    // SYNs at 0.01, 1.01 and 3.01 s and gives up at 7.01 s (iperf3 exits, nothing is
    // sent); with the default 6 it retransmits once more at 7.01 s: one more drop at
    // the client's pfifo, the UDP burst being the same in both runs.
    let run = |retries: u32| {
        let sysctl = format!("sysctl -w net.ipv4.tcp_syn_retries={retries}");
        syn_loss(&sysctl, "0ms", "8s", ("0s", "8s"), "10ms")
    };
    let drops = |r: &RunResult| {
        r.tc.end
            .iter()
            .filter(|d| d.host == "client")
            .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
            .filter(|q| q["kind"] == "pfifo")
            .map(|q| q["drops"].as_u64().unwrap())
            .sum::<u64>()
    };
    let (two, six) = (run(2), run(6));
    assert_eq!(drops(&six) - drops(&two), 1);
    for r in [&two, &six] {
        assert_eq!(r.throughput[0].receiver.bytes, 0);
    }
}

#[test]
fn an_app_limited_stream_restarts_its_window_after_idle_unless_the_sysctl_says_not() {
    // iperf3 -b 1M over TCP: one 128 KiB block (131072 bytes, 91 segments) every
    // 1.048576 s on a 100 ms path. The first burst ends by 0.6 s with cwnd 100; the
    // second is written at 0.2 s (test start) + 1.048576 s after ~0.75 s (187 jiffies)
    // of idle, more than the RTO (~300 ms, 75 jiffies): tcp_cwnd_restart halves cwnd
    // for each further RTO (187 − 75 = 112 > 0, 37 > 0): 100 → 25, then slow start
    // takes three round trips (25, 50, 16 segments). With the sysctl off, the 91
    // segments go in one window. (The model sends whole segments only: the block's
    // 752-byte tail waits for the next block instead of leaving at once as Nagle
    // would let it, so the counts are floor(bytes / 1448).)
    let text = |on: u32| {
        let sysctl = format!("sysctl -w net.ipv4.tcp_slow_start_after_idle={on}");
        // The tcp entry is the last table: its rate follows.
        link("100mbit", "50ms", 1, "2s", &sysctl) + "rate = \"1mbit\"\n"
    };
    let second_burst = |r: &RunResult| {
        let ivs = &r.throughput[0].streams[0].intervals;
        let b: Vec<u64> = ivs.iter().filter(|iv| iv.start >= 1.0 - 1e-9 && iv.bytes > 0).map(|iv| iv.bytes).collect();
        b.iter().map(|b| b / 1448).collect::<Vec<_>>()
    };
    assert_eq!(second_burst(&run(&text(1))), [25, 50, 16]);
    assert_eq!(second_burst(&run(&text(0))), [91]);
}

/// `net.ipv4.tcp_wmem` on the sending host caps what its writer keeps in the socket,
/// in flight included: with a 256 KiB maximum (truesize; payload a little less) a
/// 50 ms round trip carries at most 262144 bytes, 41.9 Mbit/s, of a 1 Gbit/s path;
/// and at least the two thirds of it the writer refills at (ACK-clocked). The
/// default maximum (4 MiB) is not the limit of that path.
#[test]
fn tcp_wmem_of_the_sender_caps_a_long_fat_path() {
    let capped = run(&link("1gbit", "25ms", 1, "5s", "sysctl -w \"net.ipv4.tcp_wmem=4096 16384 262144\""));
    let free = run(&link("1gbit", "25ms", 1, "5s", ""));
    let bps = |r: &RunResult| r.throughput[0].receiver.bits_per_second;
    let cap = 262144.0 * 8.0 / 0.050;
    assert!(bps(&capped) <= cap && bps(&capped) >= 0.6 * cap, "{} of {cap}", bps(&capped));
    assert!(bps(&free) > 5.0 * cap, "{}", bps(&free));
    // The receiver's host's tcp_wmem is not the sender's: no cap.
    let other = link("1gbit", "25ms", 1, "5s", "").replace(
        "[tc.client]",
        "[tc.server]\nscript = \"sysctl -w 'net.ipv4.tcp_wmem=4096 16384 262144'\"\n[tc.client]",
    );
    assert_eq!(bps(&run(&other)), bps(&free));
}
