//! `qdisc-lab replay` end to end: the built binary over the sample capture and tc
//! scripts in examples/, and over generated flows.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn example(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "examples", name].iter().collect();
    p.to_str().unwrap().to_string()
}

fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qdisc-lab")).arg("replay").args(args).output().expect("run qdisc-lab")
}

/// Run, insist on success, return stdout.
fn replay_ok(args: &[&str]) -> String {
    let out = replay(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "qdisc-lab replay {args:?} failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn replay_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&replay_ok(&a)).expect("--json prints JSON")
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Every packet is accounted for: delivered, dropped, or (capped run) still queued.
fn assert_conservation(report: &Value) {
    for f in report["flows"].as_array().unwrap() {
        assert_eq!(u(f, "sent_pkts"), u(f, "delivered_pkts") + u(f, "dropped_pkts") + u(f, "queued_pkts"), "{f}");
    }
    let t = &report["total"];
    assert_eq!(u(t, "sent_pkts"), u(t, "delivered_pkts") + u(t, "dropped_pkts") + u(t, "queued_pkts"));
}

#[test]
fn pcap_through_tbf_and_prio_favours_voice_and_interactive() {
    let (pcap, tc) = (example("mixed.pcap"), example("prio-tbf.tc"));
    let args = ["--tc", tc.as_str(), "--rate", "100mbit", "--pcap", pcap.as_str()];

    let text = replay_ok(&args);
    assert!(
        text.contains("tc -s qdisc show dev eth0\nqdisc tbf 1: root refcnt 2 rate 10Mbit burst 20Kb lat 50ms"),
        "{text}"
    );
    assert!(text.contains("qdisc prio 10: parent 1:1 bands 3 priomap 1 2 2 2 0 2 0 0 1 1 1 1 1 1 1 1"), "{text}");
    assert!(text.contains("tc -s class show dev eth0\nclass tbf 1:1 parent 1: leaf 10:"), "{text}");
    assert!(text.contains(" Sent "), "{text}");

    let r = replay_json(&args);
    assert_conservation(&r);
    assert_eq!(r["cap_hit"], false);
    let flows = r["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 5, "two bulk TCP, bulk UDP, voice, ssh");
    assert_eq!(u(&r["total"], "sent_pkts"), u(&r, "packets"));
    // The tbf's counters and the replay's agree on what left.
    assert!(r["tc_qdisc"].as_str().unwrap().contains(&format!(
        "Sent {} bytes {} pkt",
        u(&r["total"], "delivered_bytes"),
        u(&r["total"], "delivered_pkts")
    )));

    let p99 = |f: &Value| f["delay_ns"]["p99"].as_u64().unwrap();
    let by_tos = |tos: u64| flows.iter().filter(move |f| u(f, "tos") == tos);
    let urgent: Vec<&Value> = by_tos(0xB8).chain(by_tos(0x10)).collect();
    let bulk: Vec<&Value> = by_tos(0x00).chain(by_tos(0x08)).collect();
    assert_eq!((urgent.len(), bulk.len()), (2, 3));
    // ip_forward's priorities: EF → 4, lowdelay → 6, throughput → 2.
    assert_eq!(urgent.iter().map(|f| u(f, "priority")).collect::<Vec<_>>(), vec![4, 6]);
    assert!(by_tos(0x08).all(|f| u(f, "priority") == 2));
    let worst_urgent = urgent.iter().map(|f| p99(f)).max().unwrap();
    let best_bulk = bulk.iter().map(|f| p99(f)).min().unwrap();
    assert!(worst_urgent < best_bulk, "urgent p99 {worst_urgent}ns vs bulk {best_bulk}ns");
    // Band 0 waits for at most a packet or two of bulk on the wire, never for the queue.
    assert!(worst_urgent < 1_000_000, "{worst_urgent}");
}

/// The README's cake tour: the shaper holds 20 Mbit/s, EF voice keeps its Voice tin's
/// sub-millisecond delay, the two best-effort flows share their tin evenly, and the
/// per-tin table is printed.
#[test]
fn cake_home_shapes_prioritises_voice_and_shares_fairly() {
    let tc = example("cake-home.tc");
    let args = [
        "--tc",
        tc.as_str(),
        "--rate",
        "100mbit",
        "--flow",
        "12mbit",
        "--flow",
        "12mbit,proto=tcp,dport=443",
        "--flow",
        "8mbit,tos=0x20",
        "--flow",
        "500kbit,size=200,tos=0xb8",
        "--duration",
        "5s",
    ];
    let text = replay_ok(&args);
    assert!(text.contains("                   Bulk  Best Effort        Video        Voice\n  thresh       1250Kbit       20Mbit       10Mbit        5Mbit\n"), "{text}");
    let r = replay_json(&args);
    assert_conservation(&r);
    let flows = r["flows"].as_array().unwrap();
    let voice = flows.iter().find(|f| u(f, "tos") == 0xB8).unwrap();
    assert_eq!(u(voice, "dropped_pkts"), 0);
    assert!(voice["delay_ns"]["p99"].as_u64().unwrap() < 1_000_000, "{voice}");
    let be: Vec<u64> = flows.iter().filter(|f| u(f, "tos") == 0).map(|f| u(f, "delivered_bytes")).collect();
    assert_eq!(be.len(), 2);
    assert!(be[0].abs_diff(be[1]) * 100 < be[0], "even split: {be:?}");
    // 20 Mbit/s of DOCSIS-framed (+18 bytes) packets for about 5 s.
    let total_bits = u(&r["total"], "delivered_bytes") * 8;
    assert!((95_000_000..115_000_000).contains(&total_bits), "{total_bits}");
}

#[test]
fn generated_flow_into_a_small_fifo_gets_the_wire_rate_and_drops() {
    let tc = std::env::temp_dir().join(format!("qdisc-lab-replay-pfifo10-{}.tc", std::process::id()));
    std::fs::write(&tc, "qdisc add dev eth0 root pfifo limit 10\n").unwrap();
    let tc = tc.to_str().unwrap();
    let r = replay_json(&["--tc", tc, "--rate", "10mbit", "--flow", "20mbit", "--duration", "2s"]);
    let _ = std::fs::remove_file(tc);

    assert_conservation(&r);
    let f = &r["flows"][0];
    assert_eq!(r["flows"].as_array().unwrap().len(), 1);
    let bps = u(f, "throughput_bps") as f64;
    assert!((bps - 10e6).abs() / 10e6 < 0.01, "throughput {bps}");
    assert!(u(f, "dropped_pkts") > 0);
    // Offered twice the wire: about half is dropped.
    let drop_pct = f["drop_pct"].as_f64().unwrap();
    assert!((45.0..55.0).contains(&drop_pct), "{drop_pct}");
    // pfifo's own drop counter agrees with the replay's.
    let q = &r["tc_qdisc_json"][0];
    assert_eq!(u(q, "drops"), u(f, "dropped_pkts"));
    assert_eq!(u(q, "packets"), u(f, "delivered_pkts"));
    // A full 10-packet FIFO ahead at 10 Mbit/s: 10 × 1514 B ≈ 12.1 ms at most.
    assert!(u(&f["delay_ns"], "max") <= 10 * 1_211_200);
}

#[test]
fn overhead_costs_wire_time() {
    let base = replay_json(&["--rate", "10mbit", "--flow", "20mbit,size=100", "--duration", "1s"]);
    let with = replay_json(&["--rate", "10mbit", "--flow", "20mbit,size=100", "--duration", "1s", "--overhead", "24"]);
    // Same bytes offered; 124 wire bytes per 100 counted ones → ~8.06 Mbit/s of pkt_len.
    let (b, w) = (u(&base["total"], "throughput_bps") as f64, u(&with["total"], "throughput_bps") as f64);
    assert!((b - 10e6).abs() < 1e5, "{b}");
    assert!((w - 10e6 * 100.0 / 124.0).abs() < 1e5, "{w}");
}

#[test]
fn several_specs_make_distinct_flows_with_their_priorities() {
    let r = replay_json(&[
        "--rate",
        "100mbit",
        "--flow",
        "30mbit,count=3",
        "--flow",
        "1mbit,size=200,prio=6,proto=tcp",
        "--duration",
        "1s",
    ]);
    let flows = r["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 4);
    let keys: std::collections::BTreeSet<String> =
        flows.iter().map(|f| f["flow"].as_str().unwrap().to_string()).collect();
    assert_eq!(keys.len(), 4, "distinct 5-tuples");
    assert_eq!(flows.iter().map(|f| u(f, "spec")).collect::<Vec<_>>(), vec![1, 1, 1, 2]);
    assert_eq!(u(&flows[3], "priority"), 6);
    assert_eq!(u(&flows[3]["key"], "proto"), 6);
    // 100 Mbit/s of wire for 91 Mbit/s of traffic: nothing is lost.
    assert_eq!(u(&r["total"], "dropped_pkts"), 0);
    assert_conservation(&r);
}

#[test]
fn a_shaper_too_slow_to_drain_hits_the_cap_and_says_so() {
    let tc = std::env::temp_dir().join(format!("qdisc-lab-replay-slow-{}.tc", std::process::id()));
    std::fs::write(&tc, "qdisc add dev eth0 root tbf rate 100kbit burst 5kb limit 2mb\n").unwrap();
    let tc = tc.to_str().unwrap();
    let args = ["--tc", tc, "--rate", "10mbit", "--flow", "10mbit", "--duration", "1s"];
    let text = replay_ok(&args);
    let r = replay_json(&args);
    let _ = std::fs::remove_file(tc);
    assert_eq!(r["cap_hit"], true);
    assert!(u(&r["total"], "queued_pkts") > 0);
    assert!(text.contains("STOPPED at 61s"), "{text}");
    assert_conservation(&r);
    // The queued packets are the ones tbf still holds.
    assert_eq!(u(&r["tc_qdisc_json"][0], "qlen"), u(&r["total"], "queued_pkts"));
}

#[test]
fn replays_are_deterministic() {
    let (pcap, tc) = (example("mixed.pcap"), example("prio-tbf.tc"));
    let a = ["--tc", tc.as_str(), "--rate", "100mbit", "--pcap", pcap.as_str()];
    assert_eq!(replay_ok(&a), replay_ok(&a));
    let mut j = a.to_vec();
    j.push("--json");
    assert_eq!(replay_ok(&j), replay_ok(&j));

    let g = [
        "--rate",
        "10mbit",
        "--flow",
        "6mbit,count=2",
        "--flow",
        "1mbit,size=300,tos=0x10",
        "--duration",
        "3s",
        "--seed",
        "7",
    ];
    assert_eq!(replay_ok(&g), replay_ok(&g));
    // The seed moves the start phases, and so the report.
    let mut other = g.to_vec();
    *other.last_mut().unwrap() = "8";
    assert_ne!(replay_ok(&g), replay_ok(&other));
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let pcap = example("mixed.pcap");
    let tc_file = example("prio-tbf.tc");
    let bad_tc = std::env::temp_dir().join(format!("qdisc-lab-replay-bad-{}.tc", std::process::id()));
    std::fs::write(&bad_tc, "qdisc add dev eth0 root pfifo limit 10\nqdisc add dev eth0 root pfifo\n").unwrap();
    let bad_tc = bad_tc.to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--rate", "fast", "--flow", "1mbit"], "invalid rate \"fast\""),
        (vec!["--rate", "0", "--flow", "1mbit"], "invalid rate \"0\""),
        (vec!["--rate", "1mbit", "--flow", "1mbit,colour=red"], "--flow 1mbit,colour=red: unknown key \"colour\""),
        (vec!["--rate", "1mbit", "--flow", "lots"], "--flow lots: invalid rate \"lots\""),
        (vec!["--rate", "1mbit", "--flow", "1mbit,size=big"], "--flow 1mbit,size=big: size: invalid value"),
        (vec!["--rate", "1mbit", "--flow", "1mbit,start=5s,stop=1s"], "stop must be after start"),
        (vec!["--rate", "1mbit", "--flow", "1mbit", "--duration", "soon"], "invalid duration \"soon\""),
        // Values tc's own parsers would wrap: refused, with the range.
        (vec!["--rate=-1mbit", "--flow", "1mbit"], "invalid rate \"-1mbit\" (tc syntax, 8bit to about 18.4Ebit"),
        (vec!["--rate", "1bit", "--flow", "1mbit"], "invalid rate \"1bit\" (tc syntax, 8bit to"),
        (vec!["--rate", "1mbit", "--flow", "1mbit", "--duration=-1s"], "invalid duration \"-1s\" (a time above 0"),
        (
            vec!["--rate", "1mbit", "--flow", "1mbit,stop=-1s"],
            "--flow 1mbit,stop=-1s: stop: invalid time \"-1s\" (0 or more",
        ),
        (vec!["--rate", "1mbit", "--flow=-1mbit"], "--flow -1mbit: invalid rate \"-1mbit\""),
        (vec!["--rate", "1mbit", "--pcap", "/nonexistent/x.pcap"], "cannot read \"/nonexistent/x.pcap\""),
        (vec!["--rate", "1mbit", "--pcap", tc_file.as_str()], "not a pcap or pcapng file"),
        (vec!["--rate", "1mbit", "--flow", "1mbit", "--tc", "/nonexistent/x.tc"], "cannot read tc batch"),
        (vec!["--rate", "1mbit", "--flow", "1mbit", "--tc", bad_tc.as_str()], ":2"),
        (vec!["--rate", "1mbit", "--flow", "1mbit", "--dev", "eth0,mtu=5"], "--dev eth0,mtu=5"),
        (vec!["--rate", "1mbit"], "--pcap"),
        (vec!["--rate", "1mbit", "--flow", "1mbit", "--pcap", pcap.as_str()], "cannot be used with"),
    ];
    for (args, want) in cases {
        let out = replay(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(want), "{args:?}: want {want:?} in {stderr:?}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: no partial report");
    }
    let out = replay(&["--rate", "1mbit", "--flow", "1mbit", "--tc", bad_tc.as_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("Command failed {bad_tc}:2")), "{stderr}");
    let _ = std::fs::remove_file(&bad_tc);

    // A capture cut off mid-packet.
    let data = std::fs::read(&pcap).unwrap();
    let cut = std::env::temp_dir().join(format!("qdisc-lab-replay-cut-{}.pcap", std::process::id()));
    std::fs::write(&cut, &data[..5000]).unwrap();
    let out = replay(&["--rate", "1mbit", "--pcap", cut.to_str().unwrap()]);
    let _ = std::fs::remove_file(&cut);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("truncated capture"), "{stderr}");

    // A record claiming a 4 GiB packet (orig_len 0xFFFFFFFF): the first record's orig_len
    // is the 4 bytes before its data (global header 24 bytes, record header 16).
    let mut big = data.clone();
    let le = big[0] == 0xd4 || big[0] == 0x4d;
    big[36..40].copy_from_slice(&if le { u32::MAX.to_le_bytes() } else { u32::MAX.to_be_bytes() });
    let huge = std::env::temp_dir().join(format!("qdisc-lab-replay-huge-{}.pcap", std::process::id()));
    std::fs::write(&huge, &big).unwrap();
    let out = replay(&["--rate", "1mbit", "--pcap", huge.to_str().unwrap()]);
    let _ = std::fs::remove_file(&huge);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(
                "packet 1: its original length 4294967295 is more than any frame carries (at most 65599 bytes)"
            ),
        "{stderr}"
    );
}

#[test]
fn a_duration_beyond_2_to_the_32_microseconds_does_not_wrap() {
    // One 1000-byte packet a second for 4295 s: tc's get_time would wrap it to 32.7 ms.
    let out = replay_ok(&["--rate", "1mbit", "--flow", "8kbit,size=1000", "--duration", "4295s"]);
    assert!(out.contains(" 4295 pkt "), "{out}");
}

/// Non-IP frames of a capture carry their own bytes to the classifiers: u32 reads the
/// Ethernet header at negative offsets from the network header (as the kernel's
/// u32_classify does from skb_network_offset), flower its MACs. Two ARP frames from
/// 02:00:00:00:00:01 and one 0x88b5 frame from 02:00:00:00:00:02.
#[test]
fn pcap_non_ip_frames_are_classified_by_their_bytes() {
    let frame = |src: u8, ethertype: [u8; 2]| {
        let mut f = vec![0xff; 6];
        f.extend([0x02, 0, 0, 0, 0, src]);
        f.extend(ethertype);
        f.resize(60, 0);
        f
    };
    // pcap: little-endian, µs, snaplen 65535, Ethernet.
    let mut pcap = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        pcap.extend(w.to_le_bytes());
    }
    for (i, f) in [frame(1, [0x08, 0x06]), frame(2, [0x88, 0xb5]), frame(1, [0x08, 0x06])].iter().enumerate() {
        for w in [0u32, i as u32 * 1000, f.len() as u32, f.len() as u32] {
            pcap.extend(w.to_le_bytes());
        }
        pcap.extend(f);
    }
    let id = std::process::id();
    let (cap, tc) = (
        std::env::temp_dir().join(format!("qdisc-lab-replay-raw-{id}.pcap")),
        std::env::temp_dir().join(format!("qdisc-lab-replay-raw-{id}.tc")),
    );
    std::fs::write(&cap, &pcap).unwrap();
    std::fs::write(
        &tc,
        "qdisc add dev eth0 root handle 1: prio bands 4\n\
         filter add dev eth0 parent 1: protocol all prio 1 u32 match u16 0x0001 0xffff at -4 flowid 1:3\n\
         filter add dev eth0 parent 1: protocol all prio 2 flower src_mac 02:00:00:00:00:02 classid 1:4\n",
    )
    .unwrap();
    let out = replay(&["--rate", "100mbit", "--tc", tc.to_str().unwrap(), "--pcap", cap.to_str().unwrap()]);
    let _ = (std::fs::remove_file(&cap), std::fs::remove_file(&tc));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The word at -4 is the source MAC's last two bytes and the ethertype: its high
    // half is 00:01 for the ARP frames (u32 → 1:3), 00:02 for the other (flower → 1:4);
    // nothing is left for priomap's band 1.
    assert!(text.contains("class prio 1:2 parent 1: \n Sent 0 bytes 0 pkt"), "{text}");
    assert!(text.contains("class prio 1:3 parent 1: \n Sent 120 bytes 2 pkt"), "{text}");
    assert!(text.contains("class prio 1:4 parent 1: \n Sent 60 bytes 1 pkt"), "{text}");
}
