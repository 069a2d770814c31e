//! The kernel's own tc-testing cases (tools/testing/selftests/tc-testing, a copy kept
//! outside this repository at the path `upstream_tc_testing_cases` reads) for the
//! qdiscs this engine implements, run through our tc.
//!
//! A tiny interpreter plays tdc: `$TC` is our tc, `$DUMMY` a dummy device (no queue
//! of its own, like the kernel's dummy), `$ETH` a netdevsim NIC whose queue count
//! comes from the `echo "ID PORTS QUEUES" > /sys/bus/netdevsim/new_device` setup line.
//! Each case runs setup, then cmdUnderTest (exit status checked against expExitCode),
//! then verifyCmd, whose stdout must match matchPattern exactly matchCount times.
//! Anything the interpreter cannot play is a skip with its reason. scapyPlugin packets
//! are sent on $DEV0 and arrive at $DEV1's ingress, which no case puts a qdisc on, so
//! they touch nothing modelled here.

mod common;

use std::path::PathBuf;

use qdisc::tc::{makeargs, Tc};
use qdisc::tree::{DevSpec, KernelVersion};
use regex::RegexBuilder;
use serde_json::Value;

const DUMMY: &str = "dummy1";
const ETH: &str = "eth0";
/// nsPlugin's veth pair: $DEV0 in the host namespace, $DEV1 in the test's.
const DEV0: &str = "v0p0";
const DEV1: &str = "v0p1";

enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

struct Bed {
    tc: Tc,
}

impl Bed {
    /// Run one tdc command line; returns (exit, stdout) or a skip reason.
    fn sh(&mut self, cmd: &str) -> Result<(i32, String), String> {
        if cmd.contains("$DEV2") {
            return Err("uses $DEV2, a device the runner does not set up".into());
        }
        // tdc runs each line through a shell: `|| /bin/true` only forgives a failure.
        let cmd = cmd.strip_suffix(" || /bin/true").or_else(|| cmd.strip_suffix(" || true")).unwrap_or(cmd);
        if let Some(expanded) = seq_loop(cmd) {
            return self.sh(&expanded);
        }
        if let Some((left, right)) = cmd.split_once(" | grep ") {
            let (code, out) = self.sh(left)?;
            return Ok((code, grep(&out, &makeargs(right)).ok_or_else(|| format!("grep not modelled: {cmd}"))?));
        }
        let cmd = cmd.replace("$DUMMY", DUMMY).replace("$ETH", ETH).replace("$DEV0", DEV0).replace("$DEV1", DEV1);
        let words = makeargs(&cmd);
        match words.first().map(String::as_str) {
            Some("$TC") => {
                let out = self.tc.run(&words[1..]);
                // The engine's own refusals (what it does not model) name their reason.
                if let Some(l) = out.stderr.lines().find(|l| l.starts_with("qdisc-lab")) {
                    return Err(l.trim_start_matches("qdisc-lab: ").to_string());
                }
                Ok((out.code, out.stdout))
            }
            Some("$IP") => {
                let w: Vec<&str> = words.iter().map(String::as_str).collect();
                match w.as_slice() {
                    ["$IP", "link", "add", "dev", d, "type", "dummy", ..] if *d == DUMMY => Ok((0, String::new())),
                    ["$IP", "link", "set", "dev", d, "txqueuelen", n] => {
                        let n: u32 = n.parse().map_err(|_| format!("bad txqueuelen in {cmd}"))?;
                        Ok((if self.tc.set_txqueuelen(d, n) { 0 } else { 1 }, String::new()))
                    }
                    // A dummy has no MTU bounds (dummy_setup: max_mtu 0).
                    ["$IP", "link", "set", "dev", d, "mtu", n, ..] => {
                        let n: u32 = n.parse().map_err(|_| format!("bad mtu in {cmd}"))?;
                        let dev = self.tc.device_mut(d).ok_or_else(|| format!("no device in {cmd}"))?;
                        dev.info.mtu = n;
                        Ok((0, String::new()))
                    }
                    // The engine's devices are up from the start, and no qdisc here
                    // reads an interface address.
                    ["$IP", "link", "set", "dev", d, "up"] if self.tc.device_mut(d).is_some() => Ok((0, String::new())),
                    ["$IP", "addr", "add", _, "dev", d] if self.tc.device_mut(d).is_some() => Ok((0, String::new())),
                    _ => Err(format!("ip command not modelled: {cmd}")),
                }
            }
            Some("echo") if cmd.contains("/sys/bus/netdevsim/new_device") => Ok((0, String::new())),
            Some("/bin/true") if words.len() == 1 => Ok((0, String::new())),
            Some("ping") => self.ping(&words),
            // The queues were run after every packet, and nothing here waits on time.
            Some("sleep") if words.len() == 2 => Ok((0, String::new())),
            _ => Err(format!("command not modelled: {cmd}")),
        }
    }
}

/// The batch cases' shell loop, `bash -c "for i in \`seq A B\`; do cmd=\"T\";
/// args=\"\$args\$cmd\"; done && $TC ARGS \$args"`: the tc command it builds, T
/// repeated for i from A to B.
fn seq_loop(cmd: &str) -> Option<String> {
    let re = regex::Regex::new(
        r#"^bash -c "for i in \\`seq (\d+) (\d+)\\`; do cmd=\\"(.*?)\\"; args=\\?"\\\$args\\\$cmd\\?"; done && (\$TC .*?) \\\$args"$"#,
    )
    .ok()?;
    let c = re.captures(cmd)?;
    let (a, b): (u32, u32) = (c[1].parse().ok()?, c[2].parse().ok()?);
    let body: Vec<String> = (a..=b).map(|i| c[3].replace("\\$i", &i.to_string())).collect();
    Some(format!("{} {}", &c[4], body.join(" ")))
}

/// `grep [-A N] PATTERN` over `text`, for a pattern that is plain text: the
/// matching lines, each with N lines of context after, groups apart joined by `--`.
fn grep(text: &str, words: &[String]) -> Option<String> {
    let (after, pattern) = match words {
        [a, n, p] if a == "-A" => (n.parse::<usize>().ok()?, p),
        [p] => (0, p),
        _ => return None,
    };
    if pattern.contains(|c: char| "\\.[]*^$".contains(c)) {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let (mut out, mut last): (String, Option<usize>) = (String::new(), None);
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].contains(pattern.as_str()) {
            i += 1;
            continue;
        }
        if last.is_some_and(|l| l + 1 < i) {
            out.push_str("--\n");
        }
        let end = (i + after).min(lines.len() - 1);
        for l in &lines[i..=end] {
            out.push_str(l);
            out.push('\n');
        }
        last = Some(end);
        i = end + 1;
    }
    Some(out)
}

impl Bed {
    /// `ping [-c N] [-s SIZE] [-Q TOS] [-f] [-W SECS] -I DEV ADDR [> /dev/null]` from
    /// 10.10.10.10 (the address the cases give $DUMMY): N ICMP echo requests of SIZE
    /// bytes of data (56 by default) in IPv4 and Ethernet headers, through DEV's
    /// transmit path, whose driver (a dummy's) takes whatever the qdisc releases. No
    /// reply ever comes: ping's status is 1.
    fn ping(&mut self, words: &[String]) -> Result<(i32, String), String> {
        let bad = || format!("ping not modelled: {}", words.join(" "));
        let (mut count, mut size, mut tos, mut dev, mut dst) = (1u64, 56u32, 0u8, None, None);
        let mut w = words[1..].iter().map(String::as_str);
        while let Some(o) = w.next() {
            match o {
                "-c" => count = w.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?,
                "-s" => size = w.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?,
                "-Q" => {
                    let v = w.next().ok_or_else(bad)?;
                    tos = u8::from_str_radix(v.trim_start_matches("0x"), 16).map_err(|_| bad())?;
                }
                "-I" => dev = w.next(),
                "-W" => {
                    w.next();
                }
                "-f" => {}
                ">" => {
                    w.next();
                }
                o if o.starts_with("-c") => count = o[2..].parse().map_err(|_| bad())?,
                o if o.starts_with("-W") => {}
                o if !o.starts_with('-') => dst = Some(o),
                _ => return Err(bad()),
            }
        }
        let (Some(dev), Some(dst)) = (dev, dst) else { return Err(bad()) };
        let ip = |a: &str| -> Result<[u8; 16], String> {
            let v4: std::net::Ipv4Addr = a.parse().map_err(|_| bad())?;
            Ok(v4.to_ipv6_mapped().octets())
        };
        let flow = qdisc::FlowKey { src: ip("10.10.10.10")?, dst: ip(dst)?, sport: 0, dport: 0, proto: 1 };
        let now = self.tc.now;
        let d = self.tc.device_mut(dev).ok_or_else(bad)?;
        for id in 0..count {
            let mut p = qdisc::Packet::new(id, 14 + 20 + 8 + size).with_flow(flow);
            p.tos = tos;
            let _ = d.xmit(p, now, true);
            while let qdisc::Dequeued::Packet(_) = d.dequeue(now) {}
        }
        Ok((1, String::new()))
    }
}

/// The devices a case needs: $DUMMY always; $ETH with the queue count netdevsim is given.
fn devices(case: &Value) -> Vec<DevSpec> {
    let mut specs = vec![
        DevSpec::parse(&format!("{DUMMY},kind=veth")).unwrap(),
        DevSpec::parse(&format!("{DEV0},kind=veth")).unwrap(),
        DevSpec::parse(&format!("{DEV1},kind=veth")).unwrap(),
    ];
    for s in case["setup"].as_array().into_iter().flatten() {
        let s = s.as_str().unwrap_or_default();
        if s.contains("/sys/bus/netdevsim/new_device") {
            let nums: Vec<u32> =
                s.split('"').nth(1).unwrap_or("").split_whitespace().filter_map(|w| w.parse().ok()).collect();
            let queues = nums.get(2).copied().unwrap_or(1);
            specs.push(DevSpec::parse(&format!("{ETH},kind=eth,txqueues={queues}")).unwrap());
        }
    }
    specs
}

/// Cases written for a kernel whose behaviour neither Debian's 6.12 nor 6.18 has,
/// each with the reason.
const OTHER_KERNEL: &[(&str, &str)] =
    &[("d34d", NETEM_IN_TREE), ("b33f", NETEM_IN_TREE), ("1337", NETEM_IN_TREE), ("cafe", NETEM_IN_TREE)];
/// Action cases whose expectation this engine's iproute2 (6.15) does not print, or
/// which need what is not modelled, each with the reason.
const ACTION_SKIPS: &[(&str, &str)] = &[
    ("7326", BURST_1MB),
    ("34fa", BURST_1MB),
    ("8dd5", BURST_1MB),
    ("b9d1", BURST_1MB),
    ("c534", BURST_1MB),
    ("cdd7", "police pkts_rate (a packet-rate bucket) is not modelled"),
    ("a7bd", NAT_ANY),
    ("ee1e", NAT_ANY),
    ("1de8", NAT_ANY),
    ("a895", NAT_ANY),
    ("2572", NAT_ANY),
    ("37f3", NAT_ANY),
    ("6054", NAT_ANY),
    ("0015", ODD_COOKIE),
    ("989e", ODD_COOKIE),
];
const ODD_COOKIE: &str = "its cookie `aaabbbcccdddeee` has 15 hex digits, which iproute2 6.15's tc refuses (\"cookie \
     must be a hex string\", exit 255, before the kernel), so its batch is never added";
const NAT_ANY: &str = "expects `0.0.0.0/32` for nat's `default`/`any`/`all`, an older iproute2's text: 6.15's \
     get_prefix_1 gives them prefix length 0, printed `0.0.0.0/0` (goldens/kernel-6.12/nat-actions.json)";
const BURST_1MB: &str = "expects `burst 1024Kb`, an older iproute2's text: 6.15's sprint_size \
     (lib/json_print_math.c) prints 1048576 bytes as `1Mb`";
/// tdc filter cases whose expectation another kernel gave, or that need what the
/// engine does not model.
const OFFLOAD: &str = "matchall with skip_sw / skip_hw binding an action made by `tc actions add`: the \
     kernel's offload path (mall_replace_hw_filter, the action's hw flags) refuses it; hardware offload is not \
     modelled, so the flags are only stored and printed";
const FILTER_SKIPS: &[(&str, &str)] = &[
    ("3329", OFFLOAD),
    ("0eeb", OFFLOAD),
    ("eee4", OFFLOAD),
    (
        "4524",
        "expects flow `rshift 0xff` accepted; 6.12.117 refuses an rshift above 31 (NLA_POLICY_MAX, \
     goldens/kernel-6.12/filter-flow.json: `rshift 32` is ERANGE)",
    ),
];
/// qdisc cases that need a driver the engine does not model, or that show where it
/// differs from the kernel.
const QDISC_SKIPS: &[(&str, &str)] = &[(
    "6a83",
    "its setup makes a taprio in full offload (flags 0x2), which takes netdevsim's taprio offload; the \
         engine's devices have no offload and refuse it as a kernel without one does",
)];
const NETEM_IN_TREE: &str = "tests check_netem_in_tree (\"net/sched: Restrict conditions for adding duplicating \
     netems to qdisc tree\"), which 6.12.117 does not have (goldens/kernel-6.12/netem-tree.json: both changes \
     succeed) and 6.18 replaced by marking duplicates (skb tc_depth)";

/// The kernel a file's cases run under: the first that has the kind (dualpi2:
/// 6.18), else the default (6.12).
fn kernel_for(kind: &str) -> KernelVersion {
    qdisc::sched::lookup(kind).and_then(|o| o.since).unwrap_or_default()
}

fn run_case(case: &Value, kernel: KernelVersion) -> Outcome {
    if let Some((_, why)) = OTHER_KERNEL
        .iter()
        .chain(ACTION_SKIPS)
        .chain(FILTER_SKIPS)
        .chain(QDISC_SKIPS)
        .find(|(id, _)| case["id"].as_str() == Some(id))
    {
        return Outcome::Skip(why.to_string());
    }
    let mut bed = Bed { tc: Tc::with_kernel(&devices(case), kernel) };
    bed.tc.lib = common::tc_lib();
    for s in case["setup"].as_array().into_iter().flatten() {
        // tdc setup entries may be [cmd, allowed exit codes…]; only the command matters here.
        let cmd = match s {
            Value::String(c) => c.clone(),
            Value::Array(a) => a.first().and_then(Value::as_str).unwrap_or_default().to_string(),
            _ => continue,
        };
        if let Err(why) = bed.sh(&cmd) {
            return Outcome::Skip(why);
        }
    }
    let want_exit: i32 = case["expExitCode"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
    let (code, _) = match bed.sh(case["cmdUnderTest"].as_str().unwrap()) {
        Ok(r) => r,
        Err(why) => return Outcome::Skip(why),
    };
    if code != want_exit {
        return Outcome::Fail(format!("exit {code}, expected {want_exit}"));
    }
    let (_, out) = match bed.sh(case["verifyCmd"].as_str().unwrap()) {
        Ok(r) => r,
        Err(why) => return Outcome::Skip(why),
    };
    // tdc.py compiles the pattern with re.DOTALL | re.MULTILINE (`.` takes newlines
    // too, `$` matches at every line's end), as Rust's flags below do.
    let pattern = case["matchPattern"].as_str().unwrap();
    let re = match RegexBuilder::new(pattern).dot_matches_new_line(true).multi_line(true).build() {
        Ok(r) => r,
        Err(e) => return Outcome::Skip(format!("pattern not expressible in Rust regex: {e}")),
    };
    let want: usize = case["matchCount"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
    let got = re.find_iter(&out).count();
    if got != want {
        return Outcome::Fail(format!(
            "pattern {:?} matched {got} times, expected {want}; output:\n{out}",
            re.as_str()
        ));
    }
    Outcome::Pass
}

/// Run every case of `dir/KIND.json` for each kind; fails on any failure, and when
/// fewer than `at_least` passed (the files were not found or not run).
fn run_files(what: &str, dir: &std::path::Path, kinds: &[&str], at_least: usize) {
    let (mut pass, mut fail, mut skip) = (0, 0, 0);
    let mut failures = Vec::new();
    let mut per_file = Vec::new();
    for kind in kinds {
        let text = std::fs::read_to_string(dir.join(format!("{kind}.json"))).expect("tdc case file");
        let cases: Value = serde_json::from_str(&text).unwrap();
        let before = (pass, fail, skip);
        for case in cases.as_array().unwrap() {
            let id = case["id"].as_str().unwrap_or("?");
            match run_case(case, kernel_for(kind)) {
                Outcome::Pass => pass += 1,
                Outcome::Fail(why) => {
                    fail += 1;
                    failures.push(format!("{kind} {id} ({}): {why}", case["name"].as_str().unwrap_or("")));
                }
                Outcome::Skip(why) => {
                    skip += 1;
                    eprintln!("tdc skip {kind} {id}: {why}");
                }
            }
        }
        per_file.push(format!(
            "  {kind}.json: {} passed, {} failed, {} skipped",
            pass - before.0,
            fail - before.1,
            skip - before.2
        ));
    }
    eprintln!("{what}: {pass} passed, {fail} failed, {skip} skipped\n{}", per_file.join("\n"));
    assert!(failures.is_empty(), "tdc failures:\n{}", failures.join("\n"));
    assert!(pass >= at_least, "expected the {what} cases to run, only {pass} passed");
}

/// The action files of the kinds this engine models, through `tc actions` and filters,
/// and the infrastructure file of actions.
#[test]
fn upstream_tc_testing_action_cases() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tdc/actions");
    run_files(
        "tdc actions",
        &dir,
        &["gact", "police", "mirred", "skbedit", "simple", "pedit", "nat", "csum", "sample", "vlan"],
        15,
    );
    // Filters binding an action made by `tc actions`, one case per kind (those the
    // engine refuses are skips that name it).
    run_files("tdc action infra", &dir.join("../infra"), &["actions"], 9);
}

#[test]
fn upstream_tc_testing_cases() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tdc/qdiscs");
    // Every tdc file whose qdisc this engine implements ("fifo" covers pfifo/bfifo),
    // each with its pass/fail/skip counts.
    let mut kinds: Vec<&str> = qdisc::sched::KINDS
        .iter()
        .map(|k| if k.id == "pfifo" { "fifo" } else { k.id })
        .filter(|k| dir.join(format!("{k}.json")).exists())
        .collect();
    // Further files about an implemented kind.
    kinds.push("hhf_flows_limit");
    kinds.sort();
    kinds.dedup();
    eprintln!("tdc files: {kinds:?}");
    run_files("tdc", &dir, &kinds, 45);
}

/// The filter files (the classifiers this engine implements, and cgroup, which it
/// refuses by name), and the infrastructure file of `tc filter` / `tc
/// chain`.
#[test]
fn upstream_tc_testing_filter_cases() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tdc");
    run_files(
        "tdc filters",
        &root.join("filters"),
        &["basic", "cgroup", "flow", "flower", "fw", "matchall", "route", "u32"],
        50,
    );
    run_files("tdc filter infra", &root.join("infra"), &["filter"], 1);
}

/// The infrastructure file of qdiscs (class deletion and backlog notifications, drops
/// in a child), with ping's packets through a dummy.
#[test]
fn upstream_tc_testing_qdisc_infra_cases() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tdc");
    run_files("tdc qdisc infra", &root.join("infra"), &["qdiscs"], 5);
}
