//! The scenario loader: the bundled files load; every kind of mistake gives one exact
//! `FILE:LINE:COL: FIELD: message`; random mutations of valid files never panic.

use proptest::prelude::*;
use qdisc_scenario::scenario::{
    cpumask_string, parse_cpulist, parse_cpumask, LinkKind, ScriptItem, Setting, SettingKind, TrafficKind, VethBql,
    DEFAULT_CPUS,
};
use qdisc_scenario::Scenario;

const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");

const BASE: &str = r#"name = "t"
duration = "5s"

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a:eth0", "b:eth0"]
rate = "1gbit"

[tc.a]
script = """
qdisc add dev eth0 root handle 1: htb default 10
class add dev eth0 parent 1: classid 1:10 htb rate 100mbit
"""

[[traffic]]
kind = "tcp"
from = "a"
to = "b"
flows = 4

[[traffic]]
kind = "ping"
from = "a"
to = "b"
interval = "10ms"
"#;

/// The second line of BASE's script (line 16 of the file), to replace with a setting.
const CLASS: &str = "class add dev eth0 parent 1: classid 1:10 htb rate 100mbit";

fn load(text: &str) -> Result<Scenario, String> {
    Scenario::from_bytes(text.as_bytes(), "t.toml").map_err(|e| e.to_string())
}

/// `BASE` with `from` replaced by `to` (which must occur exactly once).
fn with(from: &str, to: &str) -> String {
    assert_eq!(BASE.matches(from).count(), 1, "{from:?} must occur once in BASE");
    BASE.replacen(from, to, 1)
}

#[test]
fn bundled_scenarios_load() {
    let mut names = Vec::new();
    for e in std::fs::read_dir(SCENARIOS).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let s = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.sha256.len(), 64);
            names.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "bbr-htb.toml",
            "bench-100g-fq.toml",
            "bench-dumbbell-100m.toml",
            "bench-dumbbell-1g.toml",
            "bufferbloat-fq_codel.toml",
            "bufferbloat-pfifo.toml",
            "dctcp-fq_codel-ce.toml",
            "dualpi2-l4s.toml",
            "fq-flows-plimit.toml",
            "ifb-download-cake.toml",
            "ifb-download-htb.toml",
            "netem-20ms.toml",
            "route-realms-htb.toml",
            "seed-000.toml",
            "seed-001-htb.toml",
            "seed-001-mq.toml",
            "seed-001-pfifo.toml",
            "seed-001-sfq.toml",
            "seed-002-defer.toml",
            "seed-002-no-defer.toml",
            "seed-002-rps-no-defer.toml",
            "seed-002-rps.toml",
            "seed-004-bytes.toml",
            "seed-004-off.toml",
            "seed-004-pktgen-bytes.toml",
            "seed-004-pktgen-off.toml",
            "seed-004-pktgen-time.toml",
            "seed-004-time.toml"
        ]
    );
}

#[test]
fn ifb_devices_of_a_host() {
    let s = load(&with("name = \"a\"\n", "name = \"a\"\nifb = [\"ifb0\", \"ifb1\"]\n")).unwrap();
    assert_eq!(s.hosts[0].ifb, ["ifb0", "ifb1"]);
    assert!(s.hosts[1].ifb.is_empty());
    // The host's script may name them; an undeclared one is refused with its list.
    let t = with(CLASS, "qdisc add dev ifb1 root pfifo");
    assert_eq!(
        load(&t.replace("name = \"a\"\n", "name = \"a\"\nifb = [\"ifb1\"]\n")).unwrap().tc[0].lines[1].args[3],
        "ifb1"
    );
    assert_eq!(
        load(&with(CLASS, "qdisc add dev ifb1 root pfifo")).unwrap_err(),
        "t.toml:16:1: tc.a.script: script line 2: device \"ifb1\" is not an interface of host \"a\" (its interfaces: eth0)"
    );
    let err = |list: &str| load(&with("name = \"a\"\n", &format!("name = \"a\"\nifb = {list}\n"))).unwrap_err();
    assert_eq!(err("[\"ifb0\", \"ifb0\"]"), "t.toml:6:16: host[0].ifb[1]: ifb device \"ifb0\" is declared twice");
    assert_eq!(
        err("[\"lo\"]"),
        "t.toml:6:8: host[0].ifb[0]: \"lo\" is the loopback device; name the ifb device otherwise"
    );
    assert_eq!(
        err("[\"a/b\"]"),
        "t.toml:6:8: host[0].ifb[0]: invalid interface name \"a/b\" (1–15 of A-Z a-z 0-9 _ - .)"
    );
    assert_eq!(
        err("[\"eth0\"]"),
        "t.toml:11:12: link[0].between[0]: interface a:eth0 is one of the host's ifb devices"
    );
}

#[test]
fn a_valid_file_loads_with_tc_units() {
    let s = load(BASE).unwrap();
    assert_eq!(s.name, "t");
    assert_eq!(s.duration, 5_000_000_000);
    assert_eq!(s.seed, 0);
    assert_eq!(s.links[0].rate, Some(125_000_000));
    assert_eq!(s.links[0].delay, 0);
    assert_eq!(s.ifaces("a"), ["eth0"]);
    let t = &s.tc[0];
    assert_eq!(t.host, "a");
    assert_eq!(t.lines.iter().map(|l| l.line).collect::<Vec<_>>(), [15, 16]);
    assert_eq!(t.lines[1].args[..4], ["class", "add", "dev", "eth0"]);
    assert_eq!(s.traffic[0].kind, TrafficKind::Tcp { flows: 4, cc: "cubic".into(), rate: None });
    // iperf3 -b with TCP: bytes/s per stream; "unlimited" is the bulk default.
    for (rate, want) in [("\"8mbit\"", Some(1_000_000)), ("\"unlimited\"", None)] {
        let s = load(&with("flows = 4", &format!("flows = 4\nrate = {rate}"))).unwrap();
        assert_eq!(s.traffic[0].kind, TrafficKind::Tcp { flows: 4, cc: "cubic".into(), rate: want });
    }
    assert_eq!((s.traffic[0].start, s.traffic[0].duration), (0, 5_000_000_000));
    assert_eq!(s.traffic[1].kind, TrafficKind::Ping { interval: 10_000_000 });
    assert_eq!(s.link_between("b", "a").unwrap().0, 0);
    assert_eq!(s.address_on(0, "b"), "10.1.0.2");
    // The hash is of the bytes.
    let s2 = load(&BASE.replace("name = \"t\"", "name = \"t\" ")).unwrap();
    assert_ne!(s.sha256, s2.sha256);
}

#[test]
fn congestion_control_names_and_the_senders_sysctl_default() {
    let cc = |s: &Scenario, i: usize| match &s.traffic[i].kind {
        TrafficKind::Tcp { cc, .. } => cc.clone(),
        k => panic!("{k:?}"),
    };
    // No cc and no sysctl: cubic.
    assert_eq!(cc(&load(BASE).unwrap(), 0), "cubic");
    for name in ["cubic", "reno", "bbr", "dctcp"] {
        assert_eq!(cc(&load(&with("flows = 4", &format!("flows = 4\ncc = \"{name}\""))).unwrap(), 0), name);
    }
    // The sender's sysctl (the last one) is the default; an explicit cc wins over it.
    let text =
        with(CLASS, "sysctl -w net.ipv4.tcp_congestion_control=dctcp\nsysctl -w net.ipv4.tcp_congestion_control=bbr");
    let s = load(&text).unwrap();
    assert_eq!(cc(&s, 0), "bbr");
    assert!(s.tc[0].settings.iter().any(
        |st| st.kind == SettingKind::Sysctl { key: "net.ipv4.tcp_congestion_control".into(), value: "bbr".into() }
    ));
    assert_eq!(cc(&load(&text.replace("flows = 4", "flows = 4\ncc = \"reno\"")).unwrap(), 0), "reno");
    // Another host's sysctl is not the sender's: b's setting leaves a's flows at cubic.
    let b = format!("{BASE}\n[tc.b]\nscript = \"sysctl -w net.ipv4.tcp_congestion_control=bbr\"\n");
    assert_eq!(cc(&load(&b).unwrap(), 0), "cubic");
    // echo into /proc/sys works too.
    let e = with(CLASS, "echo dctcp > /proc/sys/net/ipv4/tcp_congestion_control");
    assert_eq!(cc(&load(&e).unwrap(), 0), "dctcp");
}

#[test]
fn optional_things() {
    // A leading "tc", comments and blank lines in a script; loss and delay; udp defaults.
    let s = load(
        &with(
            "qdisc add dev eth0 root handle 1: htb default 10\n",
            "# the shaper\n\ntc qdisc add dev eth0 root handle 1: htb default 10\n",
        )
        .replace("rate = \"1gbit\"", "rate = \"1gbit\"\ndelay = \"20ms\"\nloss = \"0.5%\"")
        .replace("kind = \"ping\"", "kind = \"udp\"\nrate = \"10mbit\"")
        .replace("interval = \"10ms\"\n", "start = \"1s\"\nduration = \"2s\"\n"),
    )
    .unwrap();
    assert_eq!(s.tc[0].lines[0].args[0], "qdisc");
    assert_eq!(s.tc[0].lines[0].line, 19);
    assert_eq!((s.links[0].delay, s.links[0].loss), (20_000_000, 0.5));
    assert_eq!(s.traffic[1].kind, TrafficKind::Udp { rate: Some(1_250_000), size: 1400, flows: 1, tos: 0 });
    assert_eq!((s.traffic[1].start, s.traffic[1].duration), (1_000_000_000, 2_000_000_000));
}

#[test]
fn hosts_have_cpus_and_a_profile() {
    let s = load(BASE).unwrap();
    assert_eq!((s.hosts[0].cpus, DEFAULT_CPUS), (4, 4));
    assert_eq!(s.hosts[0].profile.origin, "default");
    assert_eq!(s.hosts[0].cpus_phrase(), "4 cpus (0-3)");
    let s = load(&with("name = \"a\"", "name = \"a\"\ncpus = 48\nprofile = \"default\"")).unwrap();
    assert_eq!((s.hosts[0].cpus, s.hosts[1].cpus), (48, 4));
    assert_eq!(s.host("a").unwrap().profile, s.host("b").unwrap().profile);
    // A profile file, relative to the scenario's directory.
    let dir = std::env::temp_dir().join(format!("qdl-loader-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("p")).unwrap();
    std::fs::write(
        dir.join("p/mine.toml"),
        qdisc_scenario::profile::DEFAULT.replace("name = \"default\"", "name = \"mine\""),
    )
    .unwrap();
    let file = dir.join("s.toml");
    std::fs::write(&file, with("name = \"a\"", "name = \"a\"\nprofile = \"p/mine.toml\"")).unwrap();
    let s = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.hosts[0].profile.name, "mine");
    assert_eq!(s.hosts[1].profile.name, "default");
    std::fs::write(dir.join("p/bad.toml"), "name = 1\n").unwrap();
    std::fs::write(&file, with("name = \"a\"", "name = \"a\"\nprofile = \"p/bad.toml\"")).unwrap();
    let e = Scenario::load(&file).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:6:11: host[0].profile: ", file.display())), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pins_and_udp_flows() {
    let s = load(
        &with("name = \"a\"", "name = \"a\"\ncpus = 48")
            .replace("flows = 4", "flows = 4\nsender_cpus = \"0-47\"\nreceiver_cpus = \"2,0,2\"")
            .replace("kind = \"ping\"", "kind = \"udp\"\nrate = \"unlimited\"\nflows = 48\nsender_cpus = \"0-47:2\"")
            .replace("interval = \"10ms\"\n", ""),
    )
    .unwrap();
    assert_eq!(s.traffic[0].sender_cpus, Some((0..48).collect()));
    assert_eq!(s.traffic[0].receiver_cpus, Some(vec![0, 2]));
    assert_eq!(s.traffic[1].kind, TrafficKind::Udp { rate: None, size: 1400, flows: 48, tos: 0 });
    assert_eq!(s.traffic[1].sender_cpus, Some((0..48).step_by(2).collect()));
    assert_eq!(s.traffic[1].receiver_cpus, None);
    assert_eq!(load(BASE).unwrap().traffic[0].sender_cpus, None);
    // cpulists as taskset reads them.
    assert_eq!(parse_cpulist("5"), Ok(vec![5]));
    assert_eq!(parse_cpulist("3,1-2,1"), Ok(vec![1, 2, 3]));
    assert_eq!(parse_cpulist("0-10:5"), Ok(vec![0, 5, 10]));
    for bad in ["", ",", "a", "1-", "-1", "2-1", "0-4:0", "5:2", "1 2", "99999999999"] {
        assert!(parse_cpulist(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn tcp_rmem_takes_up_to_three_integers() {
    let script = "sysctl -w \"net.ipv4.tcp_rmem=4096  0x20000\t6291456\"\nsysctl -w net.ipv4.tcp_rmem=8192\n";
    let s = load(&with(CLASS, script)).unwrap();
    let got: Vec<SettingKind> = s.tc[0].settings.iter().map(|st| st.kind.clone()).collect();
    let rmem = |v: &str| SettingKind::Sysctl { key: "net.ipv4.tcp_rmem".into(), value: v.into() };
    assert_eq!(got, vec![rmem("4096 131072 6291456"), rmem("8192")]);
}

#[test]
fn tcp_wmem_and_tcp_notsent_lowat_are_sender_sysctls() {
    let script = "sysctl -w \"net.ipv4.tcp_wmem=4096 16384 0x400000\" net.ipv4.tcp_notsent_lowat=0x4000\n\
                  sysctl -w net.ipv4.tcp_wmem=8192 net.ipv4.tcp_notsent_lowat=4294967295\n";
    let s = load(&with(CLASS, script)).unwrap();
    let got: Vec<SettingKind> = s.tc[0].settings.iter().map(|st| st.kind.clone()).collect();
    let set = |k: &str, v: &str| SettingKind::Sysctl { key: k.into(), value: v.into() };
    let (wmem, lowat) = ("net.ipv4.tcp_wmem", "net.ipv4.tcp_notsent_lowat");
    assert_eq!(
        got,
        vec![set(wmem, "4096 16384 4194304"), set(lowat, "16384"), set(wmem, "8192"), set(lowat, "4294967295")]
    );
}

#[test]
fn settings_are_parsed_in_script_order() {
    let script = "sysctl -w net.core.dev_weight=0x20 net/core/netdev_budget=600\n\
                  qdisc add dev eth0 root handle 1: mq\n\
                  echo -n ffff,ffffffff > /sys/class/net/eth0/queues/tx-1/xps_cpus\n\
                  echo 0 > /sys/class/net/eth0/queues/tx-0/xps_cpus\n\
                  sysctl net.core.default_qdisc=pfifo_fast\n\
                  echo 010 > /proc/sys/net/core/netdev_max_backlog\n";
    let text = with(
        "qdisc add dev eth0 root handle 1: htb default 10\nclass add dev eth0 parent 1: classid 1:10 htb rate 100mbit\n",
        script,
    )
    .replace("name = \"a\"", "name = \"a\"\ncpus = 48")
    .replace("rate = \"1gbit\"", "rate = \"1gbit\"\ntxqueues = 2");
    let s = load(&text).unwrap();
    let t = &s.tc[0];
    let sysctl = |line, text: &str, key: &str, value: &str| Setting {
        line,
        text: text.into(),
        kind: SettingKind::Sysctl { key: key.into(), value: value.into() },
    };
    let first = "sysctl -w net.core.dev_weight=0x20 net/core/netdev_budget=600";
    assert_eq!(
        t.settings,
        vec![
            sysctl(17, first, "net.core.dev_weight", "32"),
            sysctl(17, first, "net.core.netdev_budget", "600"),
            Setting {
                line: 19,
                text: "echo -n ffff,ffffffff > /sys/class/net/eth0/queues/tx-1/xps_cpus".into(),
                kind: SettingKind::XpsCpus { dev: "eth0".into(), txq: 1, cpus: (0..48).collect() },
            },
            Setting {
                line: 20,
                text: "echo 0 > /sys/class/net/eth0/queues/tx-0/xps_cpus".into(),
                kind: SettingKind::XpsCpus { dev: "eth0".into(), txq: 0, cpus: vec![] },
            },
            sysctl(21, "sysctl net.core.default_qdisc=pfifo_fast", "net.core.default_qdisc", "pfifo_fast"),
            sysctl(22, "echo 010 > /proc/sys/net/core/netdev_max_backlog", "net.core.netdev_max_backlog", "8"),
        ]
    );
    assert_eq!(t.lines.len(), 1);
    assert_eq!(t.lines[0].line, 18);
    let order: Vec<usize> = t.in_order().iter().map(ScriptItem::line).collect();
    assert_eq!(order, [17, 17, 18, 19, 20, 21, 22]);
    assert!(matches!(t.in_order()[2], ScriptItem::Tc(_)));
    // The kernel's bitmap format both ways.
    assert_eq!(cpumask_string(&(0..48).collect::<Vec<_>>()), "ffff,ffffffff");
    assert_eq!(cpumask_string(&[]), "0");
    assert_eq!(cpumask_string(&[1, 2]), "6");
    assert_eq!(cpumask_string(&[33]), "2,00000000");
    assert_eq!(parse_cpumask("2,00000000"), Ok((vec![33], 2)));
    assert_eq!(parse_cpumask("F"), Ok((vec![0, 1, 2, 3], 1)));
    for bad in ["", ",1", "1,", "123456789", "0x1", "g", "1 2"] {
        assert!(parse_cpumask(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn mistakes_are_named_exactly() {
    let cases: &[(String, &str)] = &[
        // TOML syntax and types (the toml crate's words, our place and field).
        (with("duration = \"5s\"", "duration = \"5s"), "t.toml:2:15: invalid basic string, expected `\"`"),
        (with("duration = \"5s\"", "duration = 5"), "t.toml:2:12: duration: invalid type: integer `5`, expected a string"),
        (with("flows = 4", "flows = \"4\""), "t.toml:23:9: traffic[0].flows: invalid type: string \"4\", expected i64"),
        (with("rate = \"1gbit\"", "rat = \"1gbit\""), "t.toml:11:1: link[0].rat: unknown field `rat`, expected one of `between`, `kind`, `txqueues`, `rate`, `delay`, `loss`, `veth_bql`"),
        (with("rate = \"1gbit\"", "rate = \"1gbit\"\ntxqueues = 0"), "t.toml:12:12: link[0].txqueues: txqueues must be 1..4096"),
        (with("rate = \"1gbit\"", "rate = \"1gbit\"\nkind = \"wifi\""), "t.toml:12:8: link[0].kind: unknown kind \"wifi\" (eth, veth or veth-pair)"),
        // Units, tc's.
        (with("rate = \"1gbit\"", "rate = \"1gbps2\""), "t.toml:11:8: link[0].rate: invalid rate \"1gbps2\" (tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\")"),
        (with("rate = \"1gbit\"", "rate = \"0mbit\""), "t.toml:11:8: link[0].rate: a rate must be greater than 0"),
        (with("rate = \"1gbit\"", "rate = \"1bit\""), "t.toml:11:8: link[0].rate: rate \"1bit\" is less than one byte per second: the smallest rate is 8bit"),
        (with("rate = \"1gbit\"", "rate = \"18446744073709551616bit\""), "t.toml:11:8: link[0].rate: rate \"18446744073709551616bit\" is too large: at most 2^61 - 1 bytes (about 18.4 Ebit) per second"),
        (with(CLASS, "qdisc add dev \"eth0 root pfifo"), "t.toml:16:1: tc.a.script: script line 2: Unterminated quoted string"),
        (with("duration = \"5s\"", "duration = \"5 s\""), "t.toml:2:12: duration: invalid time \"5 s\" (tc units, e.g. \"10s\", \"250ms\", \"100us\")"),
        (with("duration = \"5s\"", "duration = \"0s\""), "t.toml:2:12: duration: must be greater than 0"),
        (with("duration = \"5s\"", "duration = \"-5s\""), "t.toml:2:12: duration: a time cannot be negative: \"-5s\""),
        (with("rate = \"1gbit\"", "rate = \"1gbit\"\nloss = \"150%\""), "t.toml:12:8: link[0].loss: loss must be between 0% and 100%"),
        (with("rate = \"1gbit\"", "rate = \"1gbit\"\nloss = \"lots\""), "t.toml:12:8: link[0].loss: invalid loss \"lots\" (a percentage, e.g. \"0.5%\")"),
        (with("interval = \"10ms\"", "interval = \"0\""), "t.toml:29:12: traffic[1].interval: must be greater than 0"),
        // Names.
        (with("between = [\"a:eth0\", \"b:eth0\"]", "between = [\"a:eth0\", \"c:eth0\"]"), "t.toml:10:22: link[0].between[1]: unknown host \"c\" (hosts: a, b)"),
        (with("between = [\"a:eth0\", \"b:eth0\"]", "between = [\"a:eth0\", \"b\"]"), "t.toml:10:22: link[0].between[1]: \"b\" is not \"host:iface\""),
        (with("between = [\"a:eth0\", \"b:eth0\"]", "between = [\"a:eth0\"]"), "t.toml:10:11: link[0].between: a link joins exactly two \"host:iface\" endpoints, not 1"),
        (with("between = [\"a:eth0\", \"b:eth0\"]", "between = [\"a:eth0\", \"a:eth1\"]"), "t.toml:10:11: link[0].between: a link joins two different hosts"),
        (with("between = [\"a:eth0\", \"b:eth0\"]", "between = [\"a:eth0\", \"b:this-name-is-too-long\"]"), "t.toml:10:22: link[0].between[1]: invalid interface name \"this-name-is-too-long\" (1–15 of A-Z a-z 0-9 _ - .)"),
        (with("name = \"b\"", "name = \"a\""), "t.toml:7:8: host[1].name: host \"a\" is declared twice"),
        (with("name = \"b\"", "name = \"b c\""), "t.toml:7:8: host[1].name: invalid host name \"b c\" (1–32 of A-Z a-z 0-9 _ -, starting with a letter or digit)"),
        (with("[tc.a]", "[tc.c]"), "t.toml:13:1: tc.c: unknown host \"c\" (hosts: a, b)"),
        (with("from = \"a\"\nto = \"b\"\nflows", "from = \"x\"\nto = \"b\"\nflows"), "t.toml:21:8: traffic[0].from: unknown host \"x\" (hosts: a, b)"),
        // tc scripts: the line inside the script, the device names.
        (with("class add dev eth0", "class add dev eth1"), "t.toml:16:1: tc.a.script: script line 2: device \"eth1\" is not an interface of host \"a\" (its interfaces: eth0)"),
        (with("class add dev eth0", "-n foo class add dev eth0"), "t.toml:16:1: tc.a.script: script line 2: option \"-n\" is not allowed: each script runs in its host's namespace"),
        // Traffic kinds and their fields.
        (with("kind = \"tcp\"", "kind = \"tpc\""), "t.toml:20:8: traffic[0].kind: unknown traffic kind \"tpc\" (expected \"tcp\", \"udp\", \"pktgen\" or \"ping\")"),
        (with("flows = 4", "flows = 4\ninterval = \"1s\""), "t.toml:24:12: traffic[0].interval: does not apply to kind \"tcp\" (tcp takes: from, to, start, duration, flows, cc, rate, sender_cpus, receiver_cpus, net_cls_classid)"),
        (with("flows = 4", "flows = 0"), "t.toml:23:9: traffic[0].flows: must be between 1 and 128"),
        (with("flows = 4", "flows = 4\ncc = \"cu bic\""), "t.toml:24:6: traffic[0].cc: unknown congestion control \"cu bic\" (the simulator models cubic, reno, bbr, dctcp)"),
        (with("flows = 4", "flows = 4\ncc = \"BBR\""), "t.toml:24:6: traffic[0].cc: unknown congestion control \"BBR\" (the simulator models cubic, reno, bbr, dctcp)"),
        (with("flows = 4", "flows = 4\ncc = \"htcp\""), "t.toml:24:6: traffic[0].cc: unknown congestion control \"htcp\" (the simulator models cubic, reno, bbr, dctcp)"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_congestion_control=vegas"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_congestion_control = \"vegas\" is refused: unknown congestion control \"vegas\" (the simulator models cubic, reno, bbr, dctcp)"),
        (with("flows = 4", "flows = 4\nstart = \"5s\""), "t.toml:24:9: traffic[0].start: starts at 5s but the scenario lasts 5s"),
        (with("flows = 4", "flows = 4\nstart = \"1s\"\nduration = \"4500ms\""), "t.toml:25:12: traffic[0].duration: ends at 5500ms but the scenario lasts 5s"),
        (with("kind = \"ping\"\nfrom = \"a\"\nto = \"b\"\ninterval = \"10ms\"", "kind = \"udp\"\nfrom = \"a\"\nto = \"b\""), "t.toml:25:1: traffic[1].rate: missing: udp traffic needs a rate per flow (e.g. rate = \"50mbit\", or \"unlimited\")"),
        (with("to = \"b\"\ninterval", "to = \"c\"\ninterval").replace("[[link]]", "[[host]]\nname = \"c\"\n[[link]]"), "t.toml:30:6: traffic[1].to: no path of [[link]]s joins \"a\" and \"c\""),
        // Hosts: cores and CPU profiles.
        (with("name = \"a\"", "name = \"a\"\ncpus = 0"), "t.toml:6:8: host[0].cpus: cpus must be 1..4096"),
        (with("name = \"a\"", "name = \"a\"\ncpus = 4097"), "t.toml:6:8: host[0].cpus: cpus must be 1..4096"),
        (with("name = \"a\"", "name = \"a\"\ncpus = \"4\""), "t.toml:6:8: host[0].cpus: invalid type: string \"4\", expected i64"),
        (with("name = \"a\"", "name = \"a\"\nprofile = \"nope.toml\""), "t.toml:6:11: host[0].profile: unknown profile \"nope.toml\": not \"default\" and ./nope.toml cannot be read: No such file or directory (os error 2)"),
        // Traffic pins.
        (with("flows = 4", "flows = 4\nsender_cpus = \"7\""), "t.toml:24:15: traffic[0].sender_cpus: host a has 4 cpus (0-3): cpu 7 does not exist"),
        (with("name = \"b\"", "name = \"b\"\ncpus = 1").replace("flows = 4", "flows = 4\nreceiver_cpus = \"0,1\""), "t.toml:25:17: traffic[0].receiver_cpus: host b has 1 cpu (0): cpu 1 does not exist"),
        (with("flows = 4", "flows = 4\nsender_cpus = \"0-\""), "t.toml:24:15: traffic[0].sender_cpus: invalid cpu list \"0-\" (taskset -c syntax, e.g. \"0-3\", \"0,2\", \"0-47:2\")"),
        (with("flows = 4", "flows = 4\nsender_cpus = \"3-1\""), "t.toml:24:15: traffic[0].sender_cpus: invalid cpu list \"3-1\" (taskset -c syntax, e.g. \"0-3\", \"0,2\", \"0-47:2\")"),
        (with("interval = \"10ms\"", "interval = \"10ms\"\nreceiver_cpus = \"0\""), "t.toml:30:17: traffic[1].receiver_cpus: does not apply to kind \"ping\" (ping takes: from, to, start, duration, interval, sender_cpus, net_cls_classid)"),
        // net_cls cgroups: a class id as tc writes one.
        (with("flows = 4", "flows = 4\nnet_cls_classid = \"0x10010\""), "t.toml:24:19: traffic[0].net_cls_classid: \"0x10010\" is not a class id MAJ:MIN (hexadecimal, as tc writes it: \"1:10\")"),
        (with("flows = 4", "flows = 4\nnet_cls_classid = \"root\""), "t.toml:24:19: traffic[0].net_cls_classid: \"root\" is not a class id MAJ:MIN (hexadecimal, as tc writes it: \"1:10\")"),
        (with("flows = 4", "flows = 4\nnet_cls_classid = \"0:0\""), "t.toml:24:19: traffic[0].net_cls_classid: \"0:0\" is not a class id MAJ:MIN (hexadecimal, as tc writes it: \"1:10\")"),
        // udp: flows, "unlimited".
        (with("flows = 4", "flows = 4\nrate = \"fast\""), "t.toml:24:8: traffic[0].rate: invalid rate \"fast\" (tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\", or \"unlimited\")"),
        (with("kind = \"ping\"\nfrom = \"a\"\nto = \"b\"\ninterval = \"10ms\"", "kind = \"udp\"\nfrom = \"a\"\nto = \"b\"\nrate = \"lots\""), "t.toml:29:8: traffic[1].rate: invalid rate \"lots\" (tc units, e.g. \"100mbit\", \"1gbit\", \"500kbit\", or \"unlimited\")"),
        (with("kind = \"ping\"\nfrom = \"a\"\nto = \"b\"\ninterval = \"10ms\"", "kind = \"udp\"\nfrom = \"a\"\nto = \"b\"\nrate = \"unlimited\"\nflows = 129"), "t.toml:30:9: traffic[1].flows: must be between 1 and 128"),
        // Settings in a script: sysctl.
        (with(CLASS, "sysctl -w net.core.foo=1"), "t.toml:16:1: tc.a.script: script line 2: unknown sysctl key \"net.core.foo\" (supported: net.core.default_qdisc, net.core.dev_weight, net.core.dev_weight_tx_bias, net.core.dev_weight_rx_bias, net.core.netdev_budget, net.core.netdev_budget_usecs, net.core.netdev_max_backlog, net.core.skb_defer_max, net.core.gro_normal_batch, net.core.rps_sock_flow_entries, net.ipv4.tcp_congestion_control, net.ipv4.tcp_syn_retries, net.ipv4.tcp_synack_retries, net.ipv4.tcp_slow_start_after_idle, net.ipv4.tcp_rmem, net.ipv4.tcp_wmem, net.ipv4.tcp_notsent_lowat, net.ipv4.tcp_ecn)"),
        (with(CLASS, "sysctl -w net.core.dev_weight=0"), "t.toml:16:1: tc.a.script: script line 2: net.core.dev_weight = 0 is out of range: the kernel takes 1 to 2147483647"),
        (with(CLASS, "sysctl net.core.dev_weight_rx_bias=2147483648"), "t.toml:16:1: tc.a.script: script line 2: net.core.dev_weight_rx_bias = 2147483648 is out of range: the kernel takes 1 to 2147483647"),
        (with(CLASS, "sysctl -w net.core.netdev_budget_usecs=2000"), "t.toml:16:1: tc.a.script: script line 2: net.core.netdev_budget_usecs = 2000 is out of range: the kernel takes 8000 to 2147483647 (at least 2 jiffies: 8000 µs at HZ=250)"),
        (with(CLASS, "sysctl -w net.core.netdev_max_backlog=-2147483649"), "t.toml:16:1: tc.a.script: script line 2: net.core.netdev_max_backlog = -2147483649 is out of range: the kernel takes -2147483648 to 2147483647"),
        (with(CLASS, "sysctl -w net.core.skb_defer_max=-1"), "t.toml:16:1: tc.a.script: script line 2: net.core.skb_defer_max = -1 is out of range: the kernel takes 0 to 2147483647"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_syn_retries=0"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_syn_retries = 0 is out of range: the kernel takes 1 to 127"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_syn_retries=128"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_syn_retries = 128 is out of range: the kernel takes 1 to 127"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_synack_retries=256"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_synack_retries = 256 is out of range: the kernel takes 0 to 255"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_slow_start_after_idle=x"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_slow_start_after_idle = \"x\": not an integer"),
        (with(CLASS, "sysctl -w 'net.ipv4.tcp_rmem=4096 131072 6291456 1'"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_rmem = \"4096 131072 6291456 1\": the kernel takes at most 3 integers (min default max)"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_rmem='4096 131072 6291456'"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_rmem: quote the whole setting, as in sysctl -w \"net.ipv4.tcp_rmem=4096 131072 6291456\" (a quote inside a word is kept)"),
        (with(CLASS, "sysctl -w 'net.ipv4.tcp_rmem=0 131072 6291456'"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_rmem = \"0 131072 6291456\": 0 is out of range: the kernel takes 1 to 2147483647"),
        (with(CLASS, "sysctl -w 'net.ipv4.tcp_rmem=4096 lots'"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_rmem = \"4096 lots\": \"lots\" is not an integer"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_rmem="), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_rmem = \"\": not an integer"),
        (with(CLASS, "sysctl -w 'net.ipv4.tcp_wmem=4096 0 4194304'"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_wmem = \"4096 0 4194304\": 0 is out of range: the kernel takes 1 to 2147483647"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_notsent_lowat=4294967296"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_notsent_lowat = 4294967296 is out of range: the kernel takes 0 to 4294967295"),
        (with(CLASS, "sysctl -w net.ipv4.tcp_notsent_lowat=-1"), "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_notsent_lowat = -1 is out of range: the kernel takes 0 to 4294967295"),
        (with(CLASS, "echo 2147483648 > /proc/sys/net/core/skb_defer_max"), "t.toml:16:1: tc.a.script: script line 2: net.core.skb_defer_max = 2147483648 is out of range: the kernel takes 0 to 2147483647"),
        (with(CLASS, "sysctl -w net.core.gro_normal_batch=0"), "t.toml:16:1: tc.a.script: script line 2: net.core.gro_normal_batch = 0 is out of range: the kernel takes 1 to 2147483647"),
        (with(CLASS, "sysctl -w net.core.netdev_budget=lots"), "t.toml:16:1: tc.a.script: script line 2: net.core.netdev_budget = \"lots\": not an integer"),
        (with(CLASS, "sysctl -w net.core.default_qdisc=nosuch"), "t.toml:16:1: tc.a.script: script line 2: net.core.default_qdisc = \"nosuch\" is refused: sysctl: setting key \"net.core.default_qdisc\": No such file or directory"),
        (with(CLASS, "sysctl -p /etc/sysctl.conf"), "t.toml:16:1: tc.a.script: script line 2: sysctl option \"-p\" is not supported (write settings as sysctl -w KEY=VALUE)"),
        (with(CLASS, "sysctl net.core.dev_weight"), "t.toml:16:1: tc.a.script: script line 2: sysctl net.core.dev_weight: reading a setting changes nothing; write it as sysctl -w net.core.dev_weight=VALUE"),
        (with(CLASS, "echo 0 > /proc/sys/net/core/dev_weight"), "t.toml:16:1: tc.a.script: script line 2: net.core.dev_weight = 0 is out of range: the kernel takes 1 to 2147483647"),
        // Settings in a script: XPS.
        (with(CLASS, "echo xyz > /sys/class/net/eth0/queues/tx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: invalid xps mask \"xyz\" (hex groups of up to 32 bits separated by commas, e.g. \"f\" or \"ffff,ffffffff\"; \"0\" = no XPS)"),
        (with(CLASS, "echo 0x1 > /sys/class/net/eth0/queues/tx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: invalid xps mask \"0x1\" (hex groups of up to 32 bits separated by commas, e.g. \"f\" or \"ffff,ffffffff\"; \"0\" = no XPS)"),
        (with(CLASS, "echo 80 > /sys/class/net/eth0/queues/tx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: host a has 4 cpus (0-3): cpu 7 does not exist"),
        (with(CLASS, "echo 0,1 > /sys/class/net/eth0/queues/tx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: xps mask \"0,1\" has 2 groups of 32 cpus; host a has 4 cpus (0-3): the kernel takes at most 1"),
        (with(CLASS, "echo 1 > /sys/class/net/eth1/queues/tx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: device \"eth1\" is not an interface of host \"a\" (its interfaces: eth0)"),
        (with(CLASS, "echo 1 > /sys/class/net/eth0/queues/tx-1/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: eth0 of host a has 1 tx queue (tx-0), as link[0].txqueues says: tx-1 does not exist"),
        (with(CLASS, "echo 1 > /sys/class/net/eth0/queues/tx-4/xps_cpus").replace("rate = \"1gbit\"", "rate = \"1gbit\"\ntxqueues = 4"), "t.toml:17:1: tc.a.script: script line 2: eth0 of host a has 4 tx queues (tx-0 to tx-3), as link[0].txqueues says: tx-4 does not exist"),
        (with(CLASS, "echo 1 > /sys/class/net/lo/queues/tx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: device \"lo\" is not an interface of host \"a\" (its interfaces: eth0)"),
        (with(CLASS, "echo 1 > /sys/class/net/eth0/queues/rx-0/xps_cpus"), "t.toml:16:1: tc.a.script: script line 2: \"rx-0\" is not a tx queue (tx-0, tx-1, …)"),
        (with(CLASS, "echo 1 > /sys/class/net/eth0/queues/tx-0/xps_rxqs"), "t.toml:16:1: tc.a.script: script line 2: echo to \"/sys/class/net/eth0/queues/tx-0/xps_rxqs\" is not supported: the only /sys files a script can write are /sys/class/net/DEV/queues/tx-N/xps_cpus (XPS), /sys/class/net/DEV/queues/rx-N/rps_cpus (RPS), /sys/class/net/DEV/queues/rx-N/rps_flow_cnt (RFS) and /sys/class/net/DEV/threaded (threaded NAPI)"),
        (with(CLASS, "echo 1 > /tmp/x"), "t.toml:16:1: tc.a.script: script line 2: echo to \"/tmp/x\" is not supported: the only /sys files a script can write are /sys/class/net/DEV/queues/tx-N/xps_cpus (XPS), /sys/class/net/DEV/queues/rx-N/rps_cpus (RPS), /sys/class/net/DEV/queues/rx-N/rps_flow_cnt (RFS) and /sys/class/net/DEV/threaded (threaded NAPI)"),
        (with(CLASS, "echo 1"), "t.toml:16:1: tc.a.script: script line 2: expected echo MASK > /sys/class/net/DEV/queues/tx-N/xps_cpus or /sys/class/net/DEV/queues/rx-N/rps_cpus (an echo without \">\" sets nothing)"),
        (with("script = \"\"\"\nqdisc add dev eth0 root handle 1: htb default 10\nclass add dev eth0 parent 1: classid 1:10 htb rate 100mbit\n\"\"\"", "script = \"sysctl -w net.core.dev_weight=32\\nqdisc add dev eth0 root handle 1: htb default 10\""), "t.toml:14:10: tc.a.script: line 14: \"sysctl -w net.core.dev_weight=32\" shares its line of the file with a tc command; give each setting a line of its own (a multi-line string, \"\"\"…\"\"\")"),
        // Whole-file things.
        (with("duration = \"5s\"\n", ""), "t.toml:1:1: duration: missing (the length of the run, e.g. duration = \"10s\")"),
    ];
    let mut bad = Vec::new();
    for (text, want) in cases {
        if want.is_empty() {
            continue;
        }
        let got = match load(text) {
            Ok(_) => "loaded".to_string(),
            Err(e) => e,
        };
        if got != *want {
            bad.push(format!("want: {want}\n got: {got}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Hosts a and b (8 cpus each) joined by a veth pair with `veth_bql = BQL`, a NIC link
/// a:eth0–c:eth0 with 2 queues, a bridged veth link a:br0–c:br0; host a's script is
/// SCRIPT (line 22 of the file).
const RX: &str = r#"duration = "5s"
[[host]]
name = "a"
cpus = 8
[[host]]
name = "b"
cpus = 8
[[host]]
name = "c"
[[link]]
between = ["a:eth0", "c:eth0"]
txqueues = 2
[[link]]
between = ["a:veth0", "b:veth0"]
kind = "veth-pair"
veth_bql = "BQL"
[[link]]
between = ["a:br0", "c:br0"]
kind = "veth"
[tc.a]
script = """
SCRIPT
"""
[[traffic]]
kind = "tcp"
from = "a"
to = "a"
[[traffic]]
kind = "ping"
from = "b"
to = "b"
"#;

fn rx(bql: &str, script: &str) -> String {
    RX.replace("BQL", bql).replace("SCRIPT", script)
}

#[test]
fn receive_side_and_interface_settings_are_parsed() {
    let script = "echo f > /sys/class/net/eth0/queues/rx-1/rps_cpus\n\
                  echo -n ff > /sys/class/net/lo/queues/rx-0/rps_cpus\n\
                  echo 0 > /sys/class/net/veth0/queues/rx-0/rps_cpus\n\
                  echo 1 > /sys/class/net/veth0/threaded\n\
                  echo 2048 > /sys/class/net/lo/queues/rx-0/rps_flow_cnt\n\
                  echo -n 0 > /sys/class/net/eth0/threaded\n\
                  ethtool -C eth0 rx-usecs 8 tx-usecs 0x10\n\
                  ethtool --coalesce eth0 tx-usecs 50\n\
                  ethtool -C veth0 tx-usecs 100\n\
                  ethtool -G eth0 tx 64 rx 4096\n\
                  ethtool --set-ring eth0 tx 8192\n\
                  ethtool -K eth0 tso off gso on gro off\n\
                  ethtool --features lo gro on\n\
                  ethtool --offload veth0 generic-receive-offload on tcp-segmentation-offload off generic-segmentation-offload off\n\
                  ethtool -K br0 gso off\n\
                  ip link set dev eth0 mtu 9000 txqueuelen 5000\n\
                  ip link set lo mtu 65535\n\
                  ip l s br0 qlen 0\n\
                  ip link change txqlen 2147483647 d veth0\n\
                  ip link set eth0 mtu 68\n\
                  sysctl -w net.core.skb_defer_max=0 net.core.gro_normal_batch=1\n\
                  echo 0x7fffffff > /proc/sys/net/core/skb_defer_max";
    let s = load(&rx("time", script)).unwrap_or_else(|e| panic!("{e}"));
    use SettingKind::*;
    let d = |s: &str| s.to_string();
    let want = vec![
        RpsCpus { dev: d("eth0"), rxq: 1, cpus: vec![0, 1, 2, 3] },
        RpsCpus { dev: d("lo"), rxq: 0, cpus: (0..8).collect() },
        RpsCpus { dev: d("veth0"), rxq: 0, cpus: vec![] },
        Threaded { dev: d("veth0"), on: true },
        RpsFlowCnt { dev: d("lo"), rxq: 0, count: 2048 },
        Threaded { dev: d("eth0"), on: false },
        Coalesce { dev: d("eth0"), rx_usecs: Some(8), tx_usecs: Some(16) },
        Coalesce { dev: d("eth0"), rx_usecs: None, tx_usecs: Some(50) },
        Coalesce { dev: d("veth0"), rx_usecs: None, tx_usecs: Some(100) },
        Rings { dev: d("eth0"), rx: Some(4096), tx: Some(64) },
        Rings { dev: d("eth0"), rx: None, tx: Some(8192) },
        Features { dev: d("eth0"), tso: Some(false), gso: Some(true), gro: Some(false) },
        Features { dev: d("lo"), tso: None, gso: None, gro: Some(true) },
        Features { dev: d("veth0"), tso: Some(false), gso: Some(false), gro: Some(true) },
        Features { dev: d("br0"), tso: None, gso: Some(false), gro: None },
        IpLink { dev: d("eth0"), mtu: Some(9000), txqueuelen: Some(5000) },
        IpLink { dev: d("lo"), mtu: Some(65535), txqueuelen: None },
        IpLink { dev: d("br0"), mtu: None, txqueuelen: Some(0) },
        IpLink { dev: d("veth0"), mtu: None, txqueuelen: Some(2147483647) },
        IpLink { dev: d("eth0"), mtu: Some(68), txqueuelen: None },
        Sysctl { key: d("net.core.skb_defer_max"), value: d("0") },
        Sysctl { key: d("net.core.gro_normal_batch"), value: d("1") },
        Sysctl { key: d("net.core.skb_defer_max"), value: d("2147483647") },
    ];
    let t = &s.tc[0];
    assert!(t.lines.is_empty());
    let got: Vec<SettingKind> = t.settings.iter().map(|st| st.kind.clone()).collect();
    assert_eq!(got, want);
    // Each with its line of the file and its text.
    let lines: Vec<usize> = t.settings.iter().map(|st| st.line).collect();
    let mut want_lines: Vec<usize> = (22..=43).collect();
    want_lines.insert(21, 42);
    assert_eq!(lines, want_lines);
    assert_eq!(t.settings[3].text, "echo 1 > /sys/class/net/veth0/threaded");
    assert_eq!(t.settings[6].text, "ethtool -C eth0 rx-usecs 8 tx-usecs 0x10");
    assert_eq!(t.settings[21].text, "sysctl -w net.core.skb_defer_max=0 net.core.gro_normal_batch=1");
}

#[test]
fn ip_route_lines_set_the_realms_of_a_route() {
    let s = load(&rx(
        "off",
        "ip route change 10.3.0.0/24 dev br0 realms cosmos/0x12\nip r replace 10.2.0.0/24 dev veth0 realm 7",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let t = &s.tc[0];
    let kinds: Vec<&SettingKind> = t.settings.iter().map(|st| &st.kind).collect();
    assert_eq!(kinds, [&SettingKind::IpRoute { link: 2, realms: 0x12 }, &SettingKind::IpRoute { link: 1, realms: 7 }]);
    // A routed subnet is restated with its gateway: b reaches link 0 through a.
    let r = qdisc_scenario::scenario::host_route(&s.links, "b", 0).unwrap();
    assert_eq!((r.dev.as_str(), r.via.as_deref(), r.first_link), ("veth0", Some("10.2.0.1"), 1));
}

#[test]
fn veth_pair_links_and_local_traffic() {
    let s = load(&rx("time", "ethtool -K veth0 gro on")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.links.iter().map(|l| l.kind).collect::<Vec<_>>(), [LinkKind::Eth, LinkKind::VethPair, LinkKind::Veth]);
    assert_eq!(s.links.iter().map(|l| l.veth_bql).collect::<Vec<_>>(), [VethBql::Off, VethBql::Time, VethBql::Off]);
    assert_eq!((s.links[1].rate, s.links[1].delay, s.links[1].loss), (None, 0, 0.0));
    for (v, want) in [("off", VethBql::Off), ("bytes", VethBql::Bytes), ("time", VethBql::Time)] {
        assert_eq!(load(&rx(v, "ethtool -K veth0 gro on")).unwrap().links[1].veth_bql, want);
        assert_eq!(want.name(), v);
    }
    // Without veth_bql: off.
    let s2 = load(&rx("off", "ethtool -K veth0 gro on").replace("veth_bql = \"off\"\n", "")).unwrap();
    assert_eq!(s2.links[1].veth_bql, VethBql::Off);
    assert_eq!(LinkKind::VethPair.name(), "veth-pair");
    // Local traffic: a host to itself, over lo.
    assert_eq!((s.traffic[0].from.as_str(), s.traffic[0].to.as_str()), ("a", "a"));
    assert_eq!(s.path("a", "a"), Some(vec![]));
    assert_eq!(s.dst_address("a", "a").as_deref(), Some("127.0.0.1"));
    assert_eq!(s.dst_address("b", "b").as_deref(), Some("127.0.0.1"));
    // A host with no link at all can still talk to itself.
    let lonely = "duration = \"1s\"\n[[host]]\nname = \"x\"\n[[traffic]]\nkind = \"ping\"\nfrom = \"x\"\nto = \"x\"\n";
    let s3 = load(lonely).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s3.path("x", "x"), Some(vec![]));
    assert_eq!(s3.dst_address("x", "x").as_deref(), Some("127.0.0.1"));
    // Between hosts, as before.
    assert_eq!(s.dst_address("a", "b").as_deref(), Some("10.2.0.2"));
}

#[test]
fn receive_side_mistakes_are_named_exactly() {
    let at = "t.toml:22:1: tc.a.script: script line 1: ";
    let script_cases: &[(&str, &str, &str)] = &[
        // RPS, checked as XPS is.
        ("off", "echo xyz > /sys/class/net/eth0/queues/rx-0/rps_cpus", "invalid rps mask \"xyz\" (hex groups of up to 32 bits separated by commas, e.g. \"f\" or \"ffff,ffffffff\"; \"0\" = no RPS)"),
        ("off", "echo 100 > /sys/class/net/eth0/queues/rx-0/rps_cpus", "host a has 8 cpus (0-7): cpu 8 does not exist"),
        ("off", "echo 0,1 > /sys/class/net/eth0/queues/rx-0/rps_cpus", "rps mask \"0,1\" has 2 groups of 32 cpus; host a has 8 cpus (0-7): the kernel takes at most 1"),
        ("off", "echo 1 > /sys/class/net/lo/queues/rx-1/rps_cpus", "lo of host a has 1 rx queue (rx-0): rx-1 does not exist"),
        ("off", "echo 1 > /sys/class/net/eth0/queues/rx-2/rps_cpus", "eth0 of host a has 2 rx queues (rx-0 to rx-1), as link[0].txqueues says: rx-2 does not exist"),
        ("off", "echo 1 > /sys/class/net/veth0/queues/rx-1/rps_cpus", "veth0 of host a has 1 rx queue (rx-0), as link[1].txqueues says: rx-1 does not exist"),
        ("off", "echo 1 > /sys/class/net/eth0/queues/tx-0/rps_cpus", "\"tx-0\" is not an rx queue (rx-0, rx-1, …)"),
        ("off", "echo 1 > /sys/class/net/eth9/queues/rx-0/rps_cpus", "device \"eth9\" is not an interface of host \"a\" (its interfaces: br0, eth0, veth0)"),
        ("off", "echo 9000 > /sys/class/net/eth0/mtu", "echo to \"/sys/class/net/eth0/mtu\" is not supported: the only /sys files a script can write are /sys/class/net/DEV/queues/tx-N/xps_cpus (XPS), /sys/class/net/DEV/queues/rx-N/rps_cpus (RPS), /sys/class/net/DEV/queues/rx-N/rps_flow_cnt (RFS) and /sys/class/net/DEV/threaded (threaded NAPI)"),
        // RFS's per-queue table: a count that fits, on a queue that exists.
        ("off", "echo -1 > /sys/class/net/eth0/queues/rx-0/rps_flow_cnt", "rps_flow_cnt takes a count of 0 to 4294967295, not \"-1\" (write error: Invalid argument)"),
        ("off", "echo 16 > /sys/class/net/lo/queues/rx-1/rps_flow_cnt", "lo of host a has 1 rx queue (rx-0): rx-1 does not exist"),
        ("off", "sysctl -w net.core.rps_sock_flow_entries=536870913", "net.core.rps_sock_flow_entries = 536870913 is out of range: the kernel takes 0 to 536870912"),
        // Threaded NAPI: 0 or 1, not on lo.
        ("off", "echo 2 > /sys/class/net/eth0/threaded", "/sys/class/net/eth0/threaded takes 0 or 1, not \"2\" (write error: Invalid argument)"),
        ("off", "echo 1 > /sys/class/net/lo/threaded", "lo has no NAPI to thread (its packets go through the per-CPU backlog)"),
        ("off", "echo 1 > /sys/class/net/eth9/threaded", "device \"eth9\" is not an interface of host \"a\" (its interfaces: br0, eth0, veth0)"),
        // ethtool: options, devices, parameters.
        ("off", "ethtool", "ethtool: bad command line argument(s) (a script's ethtool lines are ethtool -C, -G or -K DEV …)"),
        ("off", "ethtool -L eth0 combined 2", "ethtool -L: not modelled (ethtool -C, -G and -K are)"),
        ("off", "ethtool -k eth0", "ethtool -k: not modelled (ethtool -C, -G and -K are)"),
        ("off", "ethtool -C", "ethtool -C without a device (ethtool: bad command line argument(s))"),
        ("off", "ethtool -C eth9 rx-usecs 1", "device \"eth9\" is not an interface of host \"a\" (its interfaces: br0, eth0, veth0)"),
        ("off", "ethtool -C eth0 adaptive-rx on", "ethtool -C eth0 adaptive-rx: not modelled (rx-usecs and tx-usecs are)"),
        ("off", "ethtool --coalesce eth0 rx-frames 8", "ethtool -C eth0 rx-frames: not modelled (rx-usecs and tx-usecs are)"),
        ("off", "ethtool -C eth0 foo 1", "ethtool (-C): unknown parameter 'foo'"),
        ("off", "ethtool -C eth0 rx-usecs", "ethtool (-C): no value for parameter 'rx-usecs'"),
        ("off", "ethtool -C eth0 rx-usecs abc", "ethtool (-C): invalid value 'abc' for parameter 'rx-usecs'"),
        ("off", "ethtool -C eth0 tx-usecs -1", "ethtool (-C): invalid value '-1' for parameter 'tx-usecs'"),
        ("off", "ethtool -C eth0 tx-usecs 4294967296", "ethtool (-C): invalid value '4294967296' for parameter 'tx-usecs'"),
        ("off", "ethtool -C eth0 rx-usecs 1 rx-usecs 2", "ethtool -C eth0 rx-usecs: rx-usecs is given twice"),
        ("off", "ethtool -C eth0", "ethtool -C eth0: nothing to set (rx-usecs N, tx-usecs N)"),
        ("off", "ethtool -C lo rx-usecs 1", "ethtool -C lo: lo has no interrupt coalescing (ethtool: Operation not supported)"),
        ("off", "ethtool -C br0 tx-usecs 1", "ethtool -C br0: br0 is a veth (link[2] kind = \"veth\"): veth has no interrupt coalescing (ethtool: Operation not supported)"),
        ("off", "ethtool -C veth0 tx-usecs 1", "ethtool -C veth0: veth0 is a veth (link[1] kind = \"veth-pair\"), veth_bql = \"off\": veth has no interrupt coalescing (ethtool: Operation not supported); only veth_bql = \"time\" gives it tx-usecs"),
        ("bytes", "ethtool -C veth0 tx-usecs 1", "ethtool -C veth0: veth0 is a veth (link[1] kind = \"veth-pair\"), veth_bql = \"bytes\": veth has no interrupt coalescing (ethtool: Operation not supported); only veth_bql = \"time\" gives it tx-usecs"),
        ("time", "ethtool -C veth0 rx-usecs 1 tx-usecs 1", "ethtool -C veth0 rx-usecs: veth0 is a veth (link[1] kind = \"veth-pair\"), veth_bql = \"time\": it takes tx-usecs only (the BQL series' completion interval, VETH_BQL_COAL_TX_USECS); veth has no rx coalescing"),
        ("off", "ethtool -G eth0 rx-jumbo 10", "ethtool -G eth0 rx-jumbo: not modelled (rx and tx are)"),
        ("off", "ethtool -G eth0 foo 1", "ethtool (-G): unknown parameter 'foo'"),
        ("off", "ethtool -G eth0 rx", "ethtool (-G): no value for parameter 'rx'"),
        ("off", "ethtool -G eth0 rx 63", "ethtool -G eth0 rx 63: the simulated NIC's rings take 64 to 8192 descriptors"),
        ("off", "ethtool --set-ring eth0 rx 512 tx 8193", "ethtool -G eth0 tx 8193: the simulated NIC's rings take 64 to 8192 descriptors"),
        ("off", "ethtool -G lo rx 256", "ethtool -G lo: lo has no rings (ethtool: Operation not supported)"),
        ("time", "ethtool -G veth0 tx 256", "ethtool -G veth0: veth0 is a veth (link[1] kind = \"veth-pair\"): veth has no rings to size (ethtool: Operation not supported)"),
        ("off", "ethtool -G br0 tx 256", "ethtool -G br0: br0 is a veth (link[2] kind = \"veth\"): veth has no rings to size (ethtool: Operation not supported)"),
        ("off", "ethtool -K eth0 lro off", "ethtool -K eth0 lro: not modelled (tso, gso and gro are)"),
        ("off", "ethtool --offload lo rx-checksumming off", "ethtool -K lo rx-checksumming: not modelled (tso, gso and gro are)"),
        ("off", "ethtool -K eth0 tso yes", "ethtool (-K): flag 'yes' for parameter 'tso' is not followed by 'on' or 'off'"),
        ("off", "ethtool -K eth0 gro", "ethtool (-K): parameter 'gro' is not followed by 'on' or 'off'"),
        ("off", "ethtool -K eth0 tso on tcp-segmentation-offload off", "ethtool -K eth0 tcp-segmentation-offload: tso is given twice"),
        ("off", "ethtool -K veth0", "ethtool -K veth0: nothing to set (tso, gso, gro on|off)"),
        // ip.
        ("off", "ip", "ip without a command (a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX [via GW] dev DEV realms [FROM/]TO)"),
        ("off", "ip -s link set eth0 mtu 1400", "ip option \"-s\" is not supported (a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX [via GW] dev DEV realms [FROM/]TO)"),
        ("off", "ip -n x link set eth0 mtu 1400", "option \"-n\" is not allowed: each script runs in its host's namespace"),
        ("off", "ip addr add 10.9.0.1/24 dev eth0", "ip addr: not modelled (a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX [via GW] dev DEV realms [FROM/]TO)"),
        ("off", "ip route add default via 10.1.0.2", "ip route add: not modelled: the routes are the scenario's shortest paths; only their realms can be set (ip route change PREFIX [via GW] dev DEV realms [FROM/]TO, restating a route the host has)"),
        ("off", "ip route change 10.9.0.0/24 dev eth0 realms 3", "ip route change 10.9.0.0/24: not a route of this host: its routes are to the links' subnets 10.N.0.0/24"),
        ("off", "ip route change 10.1.0.0/24 dev veth0 realms 3", "ip route change 10.1.0.0/24: the host's route is 10.1.0.0/24 dev eth0 (connected): a line may only add realms to it, not move it"),
        ("off", "ip route change 10.1.0.0/24 via 10.1.0.2 dev eth0 realms 3", "ip route change 10.1.0.0/24: the host's route is 10.1.0.0/24 dev eth0 (connected): a line may only add realms to it, not move it"),
        ("off", "ip route change 10.1.0.0/24 dev eth0 realms 1/x", "Error: argument \"1/x\" is wrong: \"realm\" value is invalid"),
        ("off", "ip route change 10.1.0.0/24 dev eth0", "ip route change 10.1.0.0/24: no realms to set (ip route change PREFIX [via GW] dev DEV realms [FROM/]TO, restating a route the host has)"),
        ("off", "ip route change 10.1.0.0/24 realms 2", "ip route change 10.1.0.0/24: give its dev (ip route change PREFIX [via GW] dev DEV realms [FROM/]TO, restating a route the host has)"),
        ("off", "ip route change 10.1.0.0/24 dev eth0 metric 5 realms 2", "ip route change metric: not modelled (ip route change PREFIX [via GW] dev DEV realms [FROM/]TO, restating a route the host has)"),
        ("off", "ip rule add from all realms 3", "ip rule: not modelled: policy routing (and the realms an `ip rule … realms` gives) has no counterpart here; an ip route line sets a route's realms (a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX [via GW] dev DEV realms [FROM/]TO)"),
        ("off", "ip link", "ip link without a command (a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX [via GW] dev DEV realms [FROM/]TO)"),
        ("off", "ip link add d0 type dummy", "ip link add: not modelled (a script's ip lines are ip link set DEV mtu N | txqueuelen N, and ip route change PREFIX [via GW] dev DEV realms [FROM/]TO)"),
        ("off", "ip link set eth0 up", "ip link set eth0 up: not modelled (mtu and txqueuelen are)"),
        ("off", "ip link set dev eth0 address 02:00:00:00:00:01", "ip link set eth0 address: not modelled (mtu and txqueuelen are)"),
        ("off", "ip link set gso_max_size 1000 dev eth0", "ip link set gso_max_size: not modelled (mtu and txqueuelen are)"),
        ("off", "ip link set mtu 1400", "Not enough information: \"dev\" argument is required."),
        ("off", "ip link set eth0 mtu", "Command line is not complete. Try option \"help\""),
        ("off", "ip link set eth0 mtu abc", "Error: argument \"abc\" is wrong: Invalid \"mtu\" value"),
        ("off", "ip link set eth0 mtu 1400 mtu 1500", "Error: duplicate \"mtu\": \"1500\" is the second value."),
        ("off", "ip link set eth0 mtu 67", "ip link set eth0 mtu 67: mtu less than device minimum (the kernel takes 68 to 65535)"),
        ("off", "ip link set veth0 mtu 65536", "ip link set veth0 mtu 65536: mtu greater than device maximum (the kernel takes 68 to 65535)"),
        ("off", "ip link set lo mtu 65536", "ip link set lo mtu 65536: the scenario takes 68 to 65535 for lo too (below 68 lo would lose IPv4)"),
        ("off", "ip link set eth0 txqueuelen 2147483648", "Error: argument \"2147483648\" is wrong: Invalid \"txqueuelen\" value (ip takes 0 to 2147483647)"),
        ("off", "ip link set eth0 qlen -1", "Error: argument \"-1\" is wrong: Invalid \"txqueuelen\" value (ip takes 0 to 2147483647)"),
        ("off", "ip link set eth0 txqueuelen 10 txq 20", "Error: duplicate \"txqueuelen\": \"20\" is the second value."),
        ("off", "ip link set eth0 br0 mtu 1400", "Error: either \"dev\" is duplicate, or \"br0\" is a garbage."),
        ("off", "ip link set dev eth9 mtu 1400", "device \"eth9\" is not an interface of host \"a\" (its interfaces: br0, eth0, veth0)"),
        ("off", "ip link set eth0", "ip link set eth0: nothing to set (mtu N, txqueuelen N)"),
    ];
    let mut bad = Vec::new();
    for (bql, script, msg) in script_cases {
        let want = format!("{at}{msg}");
        let got = match load(&rx(bql, script)) {
            Ok(_) => "loaded".to_string(),
            Err(e) => e,
        };
        if got != want {
            bad.push(format!("want: {want}\n got: {got}"));
        }
    }
    // Links.
    let base = rx("off", "ethtool -K eth0 gro on");
    let pair = "kind = \"veth-pair\"\nveth_bql = \"off\"";
    let link_cases: &[(String, &str)] = &[
        (base.replace(pair, "kind = \"veth-pair\"\nrate = \"1gbit\""), "t.toml:16:8: link[1].rate: a veth pair has no rate, delay or loss of its own (kind = \"veth-pair\": the two interfaces are the two ends of one veth, no bridge between them); use kind = \"veth\" for a link with a wire, or a qdisc on the interface"),
        (base.replace(pair, "kind = \"veth-pair\"\ndelay = \"1ms\""), "t.toml:16:9: link[1].delay: a veth pair has no rate, delay or loss of its own (kind = \"veth-pair\": the two interfaces are the two ends of one veth, no bridge between them); use kind = \"veth\" for a link with a wire, or a qdisc on the interface"),
        (base.replace(pair, "loss = \"1%\"\nkind = \"veth-pair\""), "t.toml:15:8: link[1].loss: a veth pair has no rate, delay or loss of its own (kind = \"veth-pair\": the two interfaces are the two ends of one veth, no bridge between them); use kind = \"veth\" for a link with a wire, or a qdisc on the interface"),
        (base.replacen("cpus = 8", "cpus = 4", 1), "t.toml:15:8: link[1].kind: a veth pair joins two network namespaces of one kernel, which share its CPUs: host a has 4 cpus (0-3), host b has 8 cpus (0-7); give both the same cpus"),
        (base.replacen("cpus = 8\n", "", 2), "loaded"),
        (base.replace(pair, "kind = \"veth-pair\"\nveth_bql = \"on\""), "t.toml:16:12: link[1].veth_bql: unknown veth_bql \"on\" (off, bytes or time)"),
        (base.replace("txqueues = 2", "txqueues = 2\nveth_bql = \"off\""), "t.toml:13:12: link[0].veth_bql: only a kind = \"veth-pair\" link has veth_bql (BQL on its veth's tx queues); this link is kind = \"eth\""),
        (base.replace("kind = \"veth\"\n", "kind = \"veth\"\nveth_bql = \"time\"\n"), "t.toml:20:12: link[2].veth_bql: only a kind = \"veth-pair\" link has veth_bql (BQL on its veth's tx queues); this link is kind = \"veth\""),
    ];
    for (text, want) in link_cases {
        let got = match load(text) {
            Ok(_) => "loaded".to_string(),
            Err(e) => e,
        };
        if got != *want {
            bad.push(format!("want: {want}\n got: {got}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn veth_pair_hosts_share_a_profile() {
    let dir = std::env::temp_dir().join(format!("qdl-loader-pair-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mine.toml"),
        qdisc_scenario::profile::DEFAULT.replace("name = \"default\"", "name = \"mine\""),
    )
    .unwrap();
    let file = dir.join("s.toml");
    let text = rx("off", "ethtool -K eth0 gro on");
    std::fs::write(&file, text.replacen("cpus = 8", "cpus = 8\nprofile = \"mine.toml\"", 1)).unwrap();
    let e = Scenario::load(&file).unwrap_err().to_string();
    std::fs::write(&file, text.replace("cpus = 8", "cpus = 8\nprofile = \"mine.toml\"")).unwrap();
    let same = Scenario::load(&file);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        e,
        format!(
            "{}:16:8: link[1].kind: a veth pair joins two network namespaces of one kernel, which share its CPUs: \
             host a has profile \"{}\", host b has profile \"default\"; give both the same profile",
            file.display(),
            dir.join("mine.toml").display()
        )
    );
    let same = same.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(same.hosts[0].profile.name, "mine");
}

#[test]
fn io_and_encoding_errors() {
    let e = Scenario::load("/nonexistent/x.toml").unwrap_err().to_string();
    assert!(e.starts_with("/nonexistent/x.toml: cannot read: "), "{e}");
    let e = Scenario::from_bytes(b"name = \"a\"\nduration = \"\xff\"", "t.toml").unwrap_err().to_string();
    assert_eq!(e, "t.toml:2:13: not UTF-8");
}

/// Mutations of a valid file: deleted, duplicated or replaced bytes and lines, and
/// random values spliced in. Whatever comes out, the loader answers without panicking,
/// and an error always has a place in the file.
fn mutate(base: &str, ops: &[(u8, usize, String)]) -> String {
    let mut s = base.to_string();
    for (op, pos, text) in ops {
        let mut p = pos % (s.len() + 1);
        while !s.is_char_boundary(p) {
            p -= 1;
        }
        match op % 5 {
            0 => s.insert_str(p, text),
            1 => {
                let mut end = (p + text.len() % 8 + 1).min(s.len());
                while !s.is_char_boundary(end) {
                    end += 1;
                }
                s.replace_range(p..end, "");
            }
            2 => {
                // Duplicate the line at p.
                let start = s[..p].rfind('\n').map_or(0, |i| i + 1);
                let end = s[p..].find('\n').map_or(s.len(), |i| p + i + 1);
                let line = s[start..end].to_string();
                s.insert_str(start, &line);
            }
            3 => {
                // Replace the value of the line at p.
                let start = s[..p].rfind('\n').map_or(0, |i| i + 1);
                let end = s[p..].find('\n').map_or(s.len(), |i| p + i);
                if let Some(eq) = s[start..end].find('=') {
                    s.replace_range(start + eq + 1..end, &format!(" {text}"));
                }
            }
            _ => {
                // Swap two lines.
                let lines: Vec<&str> = s.split('\n').collect();
                let (i, j) = (p % lines.len(), text.len() % lines.len());
                let mut l: Vec<String> = lines.iter().map(|x| x.to_string()).collect();
                l.swap(i, j);
                s = l.join("\n");
            }
        }
    }
    s
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"\"".to_string()),
        Just("\"a:eth0\"".to_string()),
        Just("[\"a:eth0\"]".to_string()),
        Just("\"-1mbit\"".to_string()),
        Just("\"1e400gbit\"".to_string()),
        Just("\"nan\"".to_string()),
        Just("\"inf\"".to_string()),
        Just("\"0x10s\"".to_string()),
        Just("18446744073709551615".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("{}".to_string()),
        Just("[[host]]".to_string()),
        Just("\"\"\"\nqdisc add dev\n\"\"\"".to_string()),
        Just("\"é\u{0}\"".to_string()),
        "[ -~]{0,12}",
        "\"[0-9.]{1,6}(s|ms|us|ns|mbit|gbit|kb|%|)\"",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]
    #[test]
    fn mutated_files_never_panic(ops in prop::collection::vec((any::<u8>(), any::<usize>(), value()), 1..5)) {
        for base in [BASE.to_string(), std::fs::read_to_string(format!("{SCENARIOS}/fq-flows-plimit.toml")).unwrap()] {
            let text = mutate(&base, &ops);
            if let Err(e) = Scenario::from_bytes(text.as_bytes(), "m.toml") {
                let s = e.to_string();
                prop_assert!(s.starts_with("m.toml"), "{}", s);
                prop_assert!(e.pos.is_some(), "error without a place: {}", s);
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = Scenario::from_bytes(&bytes, "m.toml");
    }
}

#[test]
fn pktgen_traffic_is_parsed_and_checked() {
    let pktgen = |extra: &str| {
        with(
            "kind = \"tcp\"\nfrom = \"a\"\nto = \"b\"\nflows = 4",
            &format!("kind = \"pktgen\"\nfrom = \"a\"\nto = \"b\"\n{extra}"),
        )
    };
    let s = load(&pktgen("flows = 2\nsender_cpus = \"0-1\"")).unwrap_or_else(|e| panic!("{e}"));
    // pkt_size 60 and no delay by default: pktgen's own defaults.
    assert_eq!(s.traffic[0].kind, TrafficKind::Pktgen { rate: None, size: 60, flows: 2 });
    assert_eq!(s.traffic[0].kind.name(), "pktgen");
    let s = load(&pktgen("rate = \"1gbit\"\nsize = \"1514\"")).unwrap();
    assert_eq!(s.traffic[0].kind, TrafficKind::Pktgen { rate: Some(125_000_000), size: 1514, flows: 1 });
    let cases = [
        ("size = \"41\"", "t.toml:23:8: traffic[0].size: a pktgen frame (pkt_size) is 42 (Ethernet, IPv4 and UDP headers) to 65535 bytes"),
        ("rate = \"fast\"", "t.toml:23:8: traffic[0].rate: invalid rate \"fast\" (tc units, e.g. \"1gbit\", or \"unlimited\")"),
        ("receiver_cpus = \"0\"", "t.toml:23:17: traffic[0].receiver_cpus: does not apply to kind \"pktgen\" (pktgen takes: from, to, start, duration, rate, size, flows, sender_cpus)"),
    ];
    for (extra, want) in cases {
        assert_eq!(load(&pktgen(extra)).unwrap_err(), want, "{extra}");
    }
}

#[test]
fn net_cls_classid_is_a_class_id_of_the_sending_application() {
    let s = load(&with("flows = 4", "flows = 4\nnet_cls_classid = \"1:10\"")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.traffic[0].net_cls_classid, s.traffic[1].net_cls_classid), (0x0001_0010, 0));
    let pktgen = with(
        "kind = \"tcp\"\nfrom = \"a\"\nto = \"b\"\nflows = 4",
        "kind = \"pktgen\"\nfrom = \"a\"\nto = \"b\"\nnet_cls_classid = \"1:10\"",
    );
    assert_eq!(
        load(&pktgen).unwrap_err(),
        "t.toml:23:19: traffic[0].net_cls_classid: does not apply to kind \"pktgen\" (pktgen takes: from, to, start, duration, rate, size, flows, sender_cpus)"
    );
}

#[test]
fn tos_is_a_udp_sockets_ip_tos_byte() {
    let udp = |extra: &str| {
        with(
            "kind = \"ping\"\nfrom = \"a\"\nto = \"b\"\ninterval = \"10ms\"",
            &format!("kind = \"udp\"\nfrom = \"a\"\nto = \"b\"\nrate = \"1mbit\"{extra}"),
        )
    };
    let s = load(&udp("\ntos = 1")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.traffic[1].kind, TrafficKind::Udp { rate: Some(125_000), size: 1400, flows: 1, tos: 1 });
    let s = load(&udp("\ntos = 0xb9")).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(s.traffic[1].kind, TrafficKind::Udp { tos: 0xb9, .. }));
    let s = load(&udp("")).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(s.traffic[1].kind, TrafficKind::Udp { tos: 0, .. }));
    for bad in ["256", "-1"] {
        assert_eq!(
            load(&udp(&format!("\ntos = {bad}"))).unwrap_err(),
            "t.toml:30:7: traffic[1].tos: the IP TOS byte is 0 to 255 (the ECN field its low two bits: 1 = ECT(1), 2 = ECT(0))"
        );
    }
    // TCP takes ECN from net.ipv4.tcp_ecn (a TCP socket's IP_TOS keeps no ECN bits).
    assert_eq!(
        load(&with("flows = 4", "flows = 4\ntos = 1")).unwrap_err(),
        "t.toml:24:7: traffic[0].tos: does not apply to kind \"tcp\" (tcp takes: from, to, start, duration, flows, cc, rate, sender_cpus, receiver_cpus, net_cls_classid)"
    );
}

#[test]
fn tcp_ecn_takes_0_to_2() {
    let s = load(&with(CLASS, "sysctl -w net.ipv4.tcp_ecn=1")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&s.tc[0].settings[0].kind, SettingKind::Sysctl { key, value } if key == "net.ipv4.tcp_ecn" && value == "1")
    );
    assert_eq!(
        load(&with(CLASS, "sysctl -w net.ipv4.tcp_ecn=3")).unwrap_err(),
        "t.toml:16:1: tc.a.script: script line 2: net.ipv4.tcp_ecn = 3 is out of range: the kernel takes 0 to 2 (6.18's AccECN modes 3 to 5 are not modelled)"
    );
}

#[test]
fn the_255th_link_is_blamed_where_it_is() {
    let mut text = String::from("duration = \"1s\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n");
    for i in 0..255 {
        text.push_str(&format!("[[link]]\nbetween = [\"a:e{i}\", \"b:e{i}\"]\n"));
    }
    // A 5-line header, 2 lines per link: the 255th [[link]] starts at line 6 + 254 × 2.
    assert_eq!(
        load(&text).unwrap_err(),
        "t.toml:514:1: link[254]: at most 254 links (link i uses the subnet 10.(i+1).0.0/24); this file has 255"
    );
}

#[test]
fn long_scripts_keep_their_line_numbers() {
    // Line numbers are counted on from line to line (not from the file's start each
    // time): every line of a long script, blank lines, comments and a setting among
    // them, keeps its own.
    let mut script = String::new();
    for i in 0..5000 {
        script += &format!("class add dev eth0 parent 1: classid 1:{:x} htb rate 1mbit\n", i + 0x20);
        if i % 1000 == 0 {
            script += "\n# a comment\nsysctl -w net.core.dev_weight=64\n";
        }
    }
    let s = load(&with(&format!("{CLASS}\n"), &script)).unwrap();
    let t = &s.tc[0];
    assert_eq!(t.lines.len(), 5001);
    let mut expect = vec![15];
    let mut line = 16;
    for i in 0..5000 {
        expect.push(line);
        line += if i % 1000 == 0 { 4 } else { 1 };
    }
    assert_eq!(t.lines.iter().map(|l| l.line).collect::<Vec<_>>(), expect);
    assert_eq!(t.settings.iter().map(|s| s.line).collect::<Vec<_>>(), [19, 1022, 2025, 3028, 4031]);
}

#[test]
fn a_run_too_long_to_hold_is_refused_at_its_duration() {
    // BASE per 100 ms: 4 flows + their sum + the total + 8 CPUs = 14 figures; the ping
    // answers every 10 ms.
    let s = load(&with("duration = \"5s\"", "duration = \"3600s\"")).unwrap();
    assert_eq!(s.retained_figures(), 36_000 * 14 + 360_000);
    assert!(s.retained_figures() <= qdisc_scenario::scenario::MAX_RETAINED_FIGURES);
    assert_eq!(
        load(&with("duration = \"5s\"", "duration = \"1000000s\"")).unwrap_err(),
        "t.toml:2:12: duration: 1000000s would keep 240000000 figures that grow with the run (per 100 ms: each \
         flow's interval, each entry's sum, each host CPU's split, each veth BQL queue; each ping request), more \
         than the 10000000 a result may hold (about 80 bytes each in memory): shorten the run, or use fewer flows, \
         CPUs or ping requests"
    );
}
