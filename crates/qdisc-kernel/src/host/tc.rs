//! The real `tc`: what a scenario needs from the kernel (and whether it has it), and
//! `tc -s -j` snapshots of devices.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use qdisc_scenario::result::DeviceSnapshot;
use qdisc_scenario::scenario::{Scenario, SettingKind};

use super::lab::{self, port_name};

/// The qdisc kind a tc command adds (`qdisc add|change|replace|link … KIND …`), if it
/// is such a command. Abbreviations are tc's (`q a dev eth0 root fq`).
pub fn qdisc_kind(args: &[String]) -> Option<&str> {
    let obj = args.first()?;
    if obj.is_empty() || !"qdisc".starts_with(obj.as_str()) {
        return None;
    }
    let verb = args.get(1)?;
    if verb.is_empty() || !["add", "change", "replace", "link"].iter().any(|v| v.starts_with(verb.as_str())) {
        return None;
    }
    let mut i = 2;
    while i < args.len() {
        match args[i].as_str() {
            "dev" | "parent" | "handle" | "ingress_block" | "egress_block" => i += 2,
            "root" => i += 1,
            // `qdisc add dev X ingress`: the parent keyword is the kind too.
            k @ ("ingress" | "clsact") if i + 1 == args.len() => return Some(k),
            "ingress" | "clsact" => i += 1,
            "estimator" => i += 3,
            "stab" => {
                i += 1;
                while i + 1 < args.len() && ["mtu", "tsize", "mpu", "overhead", "linklayer"].contains(&args[i].as_str())
                {
                    i += 2;
                }
            }
            k => return Some(k),
        }
    }
    None
}

/// Qdisc kinds the scenario needs, each with what needs it.
pub fn needed_qdiscs(s: &Scenario) -> BTreeMap<String, Vec<String>> {
    let mut need: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, l) in s.links.iter().enumerate() {
        if let Some(args) = l.wire_qdisc(&port_name(i, true)) {
            let kind = args[7].clone();
            let mut what = Vec::new();
            if l.delay > 0 {
                what.push(format!("delay {}", qdisc::tc::units::fmt_time64(l.delay as i64)));
            }
            if l.loss > 0.0 {
                what.push(format!("loss {}%", l.loss));
            }
            if what.is_empty() {
                what.push(format!("rate {}", qdisc::tc::units::fmt_rate(l.rate.unwrap_or(0), false)));
            }
            need.entry(kind).or_default().push(format!(
                "{}:{}: link[{i}] {} — {} ({})",
                s.file,
                l.line,
                l.a,
                l.b,
                what.join(", ")
            ));
        }
    }
    for t in &s.tc {
        for line in &t.lines {
            if let Some(kind) = qdisc_kind(&line.args) {
                need.entry(kind.to_string())
                    .or_default()
                    .push(format!("{}:{}: tc.{}: {}", s.file, line.line, t.host, line.text));
            }
        }
        // `sysctl -w net.core.default_qdisc=KIND` loads sch_KIND too (qdisc_set_default).
        for st in &t.settings {
            if let SettingKind::Sysctl { key, value } = &st.kind {
                if key == "net.core.default_qdisc" {
                    need.entry(value.clone())
                        .or_default()
                        .push(format!("{}:{}: tc.{}: {}", s.file, st.line, t.host, st.text));
                }
            }
        }
    }
    need
}

/// The module that provides a qdisc kind: `sch_KIND` (clsact lives in sch_ingress), or
/// `None` for the kinds every kernel builds in (net/sched/Makefile's `obj-y` and the
/// bool `CONFIG_NET_SCHED` objects: sch_generic's pfifo_fast and noqueue, sch_fifo's
/// fifos, sch_mq, sch_blackhole).
pub fn qdisc_module(kind: &str) -> Option<String> {
    match kind {
        "pfifo_fast" | "noqueue" | "pfifo" | "bfifo" | "pfifo_head_drop" | "mq" | "blackhole" => None,
        "clsact" => Some("sch_ingress".into()),
        k => Some(format!("sch_{k}")),
    }
}

/// Options iproute2 insists on before it asks the kernel.
fn probe_args(kind: &str) -> &'static [&'static str] {
    match kind {
        "tbf" => &["rate", "1mbit", "burst", "10k", "latency", "10ms"],
        "red" => &["limit", "100k", "avpkt", "1000"],
        "gred" => &["setup", "vqs", "1", "default", "0"],
        "choke" => &["limit", "1000", "bandwidth", "10mbit"],
        "ets" => &["bands", "2"],
        _ => &[],
    }
}

/// The kinds of `kinds` this kernel does not know: each is tried as the root qdisc of
/// a veth in a scratch namespace `ns` (created and deleted here). Only the kernel's
/// "Specified qdisc kind is unknown" counts as missing (with module autoloading, that
/// is also what a kernel says when no module provides the kind).
pub fn missing_qdiscs(tc: &Path, ns: &str, kinds: &[&str]) -> Result<Vec<String>, String> {
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    let mut scratch = lab::Lab::new(ns.to_string(), tc.to_path_buf()).map_err(|e| e.to_string())?;
    scratch.add_netns(ns)?;
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    lab::batch(
        Path::new("ip"),
        ns,
        &[
            v(&["link", "add", "name", "p0", "type", "veth", "peer", "name", "p1"]),
            v(&["link", "set", "dev", "p0", "up"]),
        ],
    )?;
    // One `tc -force -batch`: line 2k+1 adds kind k, line 2k+2 deletes it again.
    let mut script = String::new();
    for kind in kinds {
        script.push_str(&format!("qdisc add dev p0 root handle 1: {kind} {}\n", probe_args(kind).join(" ")));
        script.push_str("qdisc del dev p0 root\n");
    }
    let mut child = Command::new(tc)
        .args(["-n", ns, "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", tc.display()))?;
    let _ = child.stdin.take().expect("piped").write_all(script.as_bytes());
    let out = child.wait_with_output().map_err(|e| format!("{}: {e}", tc.display()))?;
    let mut missing = Vec::new();
    for (line, msg) in lab::batch_failures(&String::from_utf8_lossy(&out.stderr)) {
        if line % 2 == 1 && msg.contains("Specified qdisc kind is unknown") {
            if let Some(kind) = kinds.get(line / 2) {
                missing.push(kind.to_string());
            }
        }
    }
    scratch.teardown()?;
    Ok(missing)
}

/// Congestion controls the kernel has loaded or could load as a module.
pub fn cc_available(cc: &str) -> bool {
    let loaded = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
    if loaded.split_whitespace().any(|c| c == cc) {
        return true;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let dir = format!("/lib/modules/{}/kernel/net/ipv4", release.trim());
    std::fs::read_dir(dir)
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(&format!("tcp_{cc}.ko"))))
        .unwrap_or(false)
}

/// Devices of one namespace to snapshot; `owner` is the scenario host or "link[i]".
#[derive(Debug, Clone)]
pub struct Target {
    pub ns: String,
    pub devs: Vec<(String, String)>,
}

fn tc_stdin(tc: &Path, ns: &str, global: &[&str], input: &str) -> Result<String, String> {
    let mut child = Command::new(tc)
        .args(["-n", ns])
        .args(global)
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", tc.display()))?;
    child.stdin.take().unwrap().write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("tc -n {ns} {}: {}", global.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Split the text of `qdisc show dev D` / `class show dev D` for several devices, run
/// in one batch, into each command's output, knowing how many qdiscs and classes each
/// device has (from its JSON): every qdisc starts with a line `qdisc …`, every class with
/// `class …`, everything else continues the one before. `None` when the text does not
/// have that shape (the caller then asks device by device).
pub fn split_shows(text: &str, counts: &[(usize, usize)]) -> Option<Vec<(String, String)>> {
    let mut blocks: Vec<String> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("qdisc ") || line.starts_with("class ") || blocks.is_empty() {
            blocks.push(String::new());
        }
        blocks.last_mut().unwrap().push_str(line);
    }
    let mut it = blocks.into_iter().peekable();
    let mut out = Vec::new();
    for &(nq, nc) in counts {
        let mut take = |n: usize, head: &str| -> Option<String> {
            let mut s = String::new();
            for _ in 0..n {
                let b = it.next()?;
                if !b.starts_with(head) {
                    return None;
                }
                s.push_str(&b);
            }
            Some(s)
        };
        let q = take(nq, "qdisc ")?;
        let c = take(nc, "class ")?;
        out.push((q, c));
    }
    it.peek().is_none().then_some(out)
}

/// `tc -s -j qdisc show` and `class show` of every device (one tc per namespace, the
/// namespaces at once); with `text`, also the plain `tc -s … show` text of each (one more
/// tc per namespace).
pub fn snapshot(tc: &Path, targets: &[Target], text: bool) -> Result<Vec<DeviceSnapshot>, String> {
    let per_ns: Vec<Result<Vec<DeviceSnapshot>, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = targets.iter().map(|t| sc.spawn(move || snapshot_ns(tc, t, text))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("snapshot thread panicked".into()))).collect()
    });
    let mut out = Vec::new();
    for r in per_ns {
        out.extend(r?);
    }
    Ok(out)
}

/// [`snapshot`] of one namespace.
fn snapshot_ns(tc: &Path, t: &Target, text: bool) -> Result<Vec<DeviceSnapshot>, String> {
    let mut out = Vec::new();
    {
        let first = out.len();
        let mut cmds = String::new();
        for (_, dev) in &t.devs {
            cmds.push_str(&format!("qdisc show dev {dev}\nclass show dev {dev}\n"));
        }
        let json = tc_stdin(tc, &t.ns, &["-s", "-j"], &cmds)?;
        let mut values = serde_json::Deserializer::from_str(&json).into_iter::<serde_json::Value>();
        // Some kinds' `-j` output is not JSON (iproute2 6.15's hfsc prints its options
        // and xstats as plain text, hfsc_print_opt()/hfsc_print_xstats()): from the first
        // device that does not parse on, each show runs alone and one that still does not
        // parse is kept as `[]`, as the simulator keeps it (parse_tc_json); the text
        // snapshot has its figures.
        let mut batch_ok = true;
        for (owner, dev) in &t.devs {
            let mut next = |what: &str| -> Result<serde_json::Value, String> {
                if batch_ok {
                    match values.next() {
                        Some(Ok(v)) => return Ok(v),
                        Some(Err(_)) => batch_ok = false,
                        None => return Err(format!("tc -s -j printed too little for {}/{dev}", t.ns)),
                    }
                }
                let one = tc_stdin(tc, &t.ns, &["-s", "-j"], &format!("{what} show dev {dev}\n"))?;
                Ok(qdisc_scenario::periodic::parse_tc_json(&one))
            };
            let (qdisc, class) = (next("qdisc")?, next("class")?);
            out.push(DeviceSnapshot {
                host: owner.clone(),
                dev: dev.clone(),
                qdisc,
                class,
                qdisc_text: None,
                class_text: None,
            });
        }
        if text {
            let devs = &mut out[first..];
            let len = |v: &serde_json::Value| v.as_array().map_or(0, Vec::len);
            let counts: Vec<(usize, usize)> = devs.iter().map(|d| (len(&d.qdisc), len(&d.class))).collect();
            let all = tc_stdin(tc, &t.ns, &["-s"], &cmds)?;
            match split_shows(&all, &counts) {
                Some(texts) => {
                    for (d, (q, c)) in devs.iter_mut().zip(texts) {
                        (d.qdisc_text, d.class_text) = (Some(q), Some(c));
                    }
                }
                None => {
                    for d in devs.iter_mut() {
                        d.qdisc_text = Some(tc_stdin(tc, &t.ns, &["-s"], &format!("qdisc show dev {}\n", d.dev))?);
                        d.class_text = Some(tc_stdin(tc, &t.ns, &["-s"], &format!("class show dev {}\n", d.dev))?);
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(line: &str) -> Option<String> {
        qdisc_kind(&qdisc::tc::makeargs(line)).map(String::from)
    }

    /// The probe reaches the kernel only if iproute2 accepts it: every kind the engine
    /// implements must parse with its probe options, as tc parses them.
    #[test]
    fn every_engine_kind_passes_tcs_parser_with_its_probe() {
        let refused: Vec<String> = qdisc::sched::KINDS
            .iter()
            .filter_map(|ops| {
                let argv: Vec<String> = probe_args(ops.id).iter().map(|s| s.to_string()).collect();
                let r = qdisc::sched::parse(ops.id, &mut qdisc::tc::Args::new(&argv));
                r.err().map(|e| format!("{}: {}", ops.id, e.msg))
            })
            .collect();
        assert!(refused.is_empty(), "{refused:#?}");
    }

    /// A device whose `-j` output is not JSON (iproute2 6.15's hfsc) is kept as `[]`, and
    /// the devices after it in the batch are still read (each on its own).
    #[test]
    fn a_device_whose_json_does_not_parse_is_kept_empty() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("qdl-tc-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tc = dir.join("tc");
        // A stand-in tc: each `WHAT show dev D` line prints one JSON array, or, for dev
        // "h", hfsc's text inside it as iproute2 6.15 prints it.
        std::fs::write(
            &tc,
            "#!/bin/sh\nwhile read -r what show dev d; do\n  if [ \"$d\" = h ]; then printf              '[{\"kind\":\"hfsc\",\"options\":{default 30 }}]'; else printf '[{\"%s\":\"%s\"}]' \"$what\" \"$d\"; \
             fi\ndone\n",
        )
        .unwrap();
        std::fs::set_permissions(&tc, std::fs::Permissions::from_mode(0o755)).unwrap();
        let devs = ["a", "h", "b"].map(|d| ("host".to_string(), d.to_string())).to_vec();
        let got = snapshot_ns(&tc, &Target { ns: "x".into(), devs }, false);
        std::fs::remove_dir_all(&dir).unwrap();
        let got: Vec<String> = got.unwrap().iter().map(|d| format!("{} {} {}", d.dev, d.qdisc, d.class)).collect();
        assert_eq!(
            got,
            ["a [{\"qdisc\":\"a\"}] [{\"class\":\"a\"}]", "h [] []", "b [{\"qdisc\":\"b\"}] [{\"class\":\"b\"}]"]
        );
    }

    #[test]
    fn batched_show_text_splits_per_device() {
        let text = "qdisc htb 1: root refcnt 2 r2q 10 default 0x10\n Sent 1 bytes 1 pkt\n\
                    qdisc pfifo 10: parent 1:10 limit 1000p\n Sent 1 bytes 1 pkt\n\
                    class htb 1:10 root leaf 10: prio 0 rate 100Mbit\n Sent 1 bytes\n\n\
                    qdisc noqueue 0: root refcnt 2\n Sent 0 bytes 0 pkt\n";
        let got = split_shows(text, &[(2, 1), (1, 0)]).unwrap();
        assert_eq!(got[0].0, "qdisc htb 1: root refcnt 2 r2q 10 default 0x10\n Sent 1 bytes 1 pkt\nqdisc pfifo 10: parent 1:10 limit 1000p\n Sent 1 bytes 1 pkt\n");
        assert_eq!(got[0].1, "class htb 1:10 root leaf 10: prio 0 rate 100Mbit\n Sent 1 bytes\n\n");
        assert_eq!(got[1], ("qdisc noqueue 0: root refcnt 2\n Sent 0 bytes 0 pkt\n".to_string(), String::new()));
        // Counts that do not match the text: no guess.
        assert_eq!(split_shows(text, &[(1, 1), (1, 0)]), None);
        assert_eq!(split_shows(text, &[(2, 1)]), None);
        assert_eq!(split_shows("", &[(0, 0)]), Some(vec![(String::new(), String::new())]));
    }

    #[test]
    fn modules_of_kinds() {
        assert_eq!(qdisc_module("dualpi2").as_deref(), Some("sch_dualpi2"));
        assert_eq!(qdisc_module("fq_codel").as_deref(), Some("sch_fq_codel"));
        assert_eq!(qdisc_module("clsact").as_deref(), Some("sch_ingress"));
        assert_eq!(qdisc_module("pfifo"), None);
        assert_eq!(qdisc_module("mq"), None);
    }

    #[test]
    fn kinds_of_commands() {
        assert_eq!(kind("qdisc add dev eth0 root handle 1: htb default 10").as_deref(), Some("htb"));
        assert_eq!(kind("q a dev eth0 parent 1:10 handle 10: fq_codel").as_deref(), Some("fq_codel"));
        assert_eq!(
            kind("qdisc replace dev eth0 root stab overhead 24 linklayer ethernet cake").as_deref(),
            Some("cake")
        );
        assert_eq!(kind("qdisc add dev eth0 ingress").as_deref(), Some("ingress"));
        assert_eq!(kind("qdisc add dev eth0 handle ffff: ingress").as_deref(), Some("ingress"));
        assert_eq!(kind("qdisc del dev eth0 root").as_deref(), None);
        assert_eq!(kind("class add dev eth0 parent 1: classid 1:1 htb rate 1mbit").as_deref(), None);
    }
}
