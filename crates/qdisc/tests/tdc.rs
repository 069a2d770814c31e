//! The kernel's own tc-testing cases (tools/testing/selftests/tc-testing, a copy kept
//! outside this repository at the path `upstream_tc_testing_cases` reads) for the
//! qdiscs this engine implements, run through our tc.
//!
//! A tiny interpreter plays tdc: `$TC` is our tc, `$DUMMY` a dummy device (no queue
//! of its own, like the kernel's dummy), `$ETH` a netdevsim NIC whose queue count
//! comes from the `echo "ID PORTS QUEUES" > /sys/bus/netdevsim/new_device` setup line.
//! Each case runs setup, then cmdUnderTest (exit status checked against expExitCode),
//! then verifyCmd, whose stdout (its stderr when it failed and said something: tdc's
//! exec_cmd) must match matchPattern exactly matchCount times.
//! Anything the interpreter cannot play is a skip with its reason. scapyPlugin packets
//! are sent on $DEV0 and arrive at $DEV1's ingress, which no case puts a qdisc on, so
//! they touch nothing modelled here.
//!
//! `$NAME`s are replaced as tdc's `Template.safe_substitute` does (the longest
//! identifier after `$`; unknown names stay). $DEV2 is the physical NIC tdc takes
//! with `-d` for its flower cases (tdc skips every flower case without one): an
//! Ethernet NIC here. The flower concurrency cases' batch files are what
//! tdc_batch.py / tdc_multibatch.py write, kept in memory ([`Batch`]) and fed to
//! our `tc -b`.

mod common;

use std::collections::BTreeMap;
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
/// tdc's `-d DEVICE` (tdc_config.py leaves DEV2 empty): a physical NIC.
const DEV2: &str = "eth1";
/// tdc_config.py's BATCH_FILE, and the directory the flower cases make for theirs.
const BATCH_FILE: &str = "./batch.txt";
const BATCH_DIR: &str = "./batchdir";

/// tdc's `replace_keywords` (`string.Template.safe_substitute` over NAMES): `$` and
/// the longest identifier after it; names not in NAMES stay as written (`$TC` and
/// `$IP` are read by [`Bed::sh`] itself, `$ETHTOOL` too).
fn substitute(cmd: &str) -> String {
    let re = regex::Regex::new(r"\$([_A-Za-z][_A-Za-z0-9]*)").unwrap();
    re.replace_all(cmd, |c: &regex::Captures| {
        match &c[1] {
            "DUMMY" => DUMMY,
            "ETH" => ETH,
            "DEV0" => DEV0,
            "DEV1" => DEV1,
            "DEV2" => DEV2,
            "BATCH_FILE" => BATCH_FILE,
            "BATCH_DIR" => BATCH_DIR,
            _ => return c[0].to_string(),
        }
        .to_string()
    })
    .into_owned()
}

enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

struct Bed {
    tc: Tc,
    /// The batch files the case's generator commands wrote, by path.
    files: BTreeMap<String, Batch>,
}

/// What a shell command left: exit status, stdout, stderr.
type Ran = (i32, String, String);

impl Bed {
    fn new(tc: Tc) -> Bed {
        Bed { tc, files: BTreeMap::new() }
    }

    /// Run one tdc command line; returns (exit, stdout, stderr) or a skip reason.
    fn sh(&mut self, cmd: &str) -> Result<Ran, String> {
        // tdc runs each line through a shell: `|| /bin/true` only forgives a failure.
        let cmd = cmd.strip_suffix(" || /bin/true").or_else(|| cmd.strip_suffix(" || true")).unwrap_or(cmd);
        if let Some(expanded) = seq_loop(cmd) {
            return self.sh(&expanded);
        }
        if let Some(body) = for_loop(cmd) {
            // A `for` loop's status is its last command's.
            let mut last = (0, String::new(), String::new());
            for c in body {
                let (code, out, err) = self.sh(&c)?;
                last.0 = code;
                last.1.push_str(&out);
                last.2.push_str(&err);
            }
            return Ok(last);
        }
        if let Some(r) = self.xargs_batches(cmd) {
            return r;
        }
        if let Some(r) = self.and_then_jq(cmd) {
            return r;
        }
        if let Some((left, right)) = cmd.split_once(" | grep ") {
            let (code, out, err) = self.sh(left)?;
            let out = grep(&out, &makeargs(right)).ok_or_else(|| format!("grep not modelled: {cmd}"))?;
            return Ok((code, out, err));
        }
        let cmd = substitute(cmd);
        let words = makeargs(&cmd);
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let ok = || Ok((0, String::new(), String::new()));
        match w.as_slice() {
            ["$TC", argv @ ..] => self.tc_cmd(argv),
            // Two gact cases' verifyCmd lacks `$TC` (upstream's typo): tdc's shell
            // finds no `actions` command (status 127, the pattern sought 0 times in its
            // error). It is run through tc here, as meant: the action must be gone from
            // tc's own `list` output, which is the stricter check.
            ["actions", "list", ..] => self.tc_cmd(&w),
            ["$IP", rest @ ..] => self.ip(rest, &cmd),
            // tdc runs the plain `ip` for `ip link set lo up` (lo exists in every netns).
            ["ip", rest @ ..] => self.ip(rest, &cmd),
            ["echo", ..] if cmd.contains("/sys/bus/netdevsim/new_device") => ok(),
            // netdevsim's ndo_setup_tc takes taprio and filter blocks only; ets offers
            // TC_SETUP_QDISC_ETS, is refused (-EOPNOTSUPP) and ignores it
            // (ets_offload_change returns nothing; qdisc_offload_dump_helper clears
            // TCQ_F_OFFLOADED): with ets alone the flag changes nothing shown.
            ["$ETHTOOL", "-K", d, "hw-tc-offload", "on"] if *d == ETH => ok(),
            ["/bin/true"] => ok(),
            ["ping", ..] => self.ping(&words),
            ["./scripts/taprio_wait_for_admin.sh", "$TC", dev] => self.wait_for_admin(dev),
            // The queues were run after every packet, and actions are deleted at once
            // (the sleeps wait for the kernel's workqueue).
            ["sleep" | "/bin/sleep", _] => ok(),
            // The batch files live in [`Bed::files`].
            ["/bin/mkdir", d] if *d == BATCH_DIR => ok(),
            ["./tdc_batch.py", args @ ..] => {
                let (path, b) = Batch::parse(args).ok_or_else(|| format!("tdc_batch.py not modelled: {cmd}"))?;
                self.files.insert(path, b);
                ok()
            }
            ["./tdc_multibatch.py", args @ ..] => {
                self.multibatch(args).ok_or_else(|| format!("tdc_multibatch.py not modelled: {cmd}"))?;
                ok()
            }
            _ => Err(format!("command not modelled: {cmd}")),
        }
    }

    /// `$TC ARGS`: our tc, its batch file from [`Bed::files`].
    fn tc_cmd(&mut self, argv: &[&str]) -> Result<Ran, String> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let out = match qdisc::tc::parse_global(&argv) {
            Ok(g) if g.batch.is_some() => {
                let path = g.batch.unwrap();
                let b = self.files.get(&path).ok_or_else(|| format!("batch file {path} not written by the case"))?;
                let text = b.text();
                self.tc.batch(&text, &path, g.opts, g.force)
            }
            _ => self.tc.run(&argv),
        };
        // The engine's own refusals (what it does not model) name their reason.
        if let Some(l) = out.stderr.lines().find(|l| l.starts_with("qdisc-lab")) {
            return Err(l.trim_start_matches("qdisc-lab: ").to_string());
        }
        Ok((out.code, out.stdout, out.stderr))
    }

    fn ip(&mut self, w: &[&str], cmd: &str) -> Result<Ran, String> {
        let ok = || Ok((0, String::new(), String::new()));
        match w {
            ["link", "add", "dev", d, "type", "dummy", ..] if *d == DUMMY => ok(),
            ["link", "set", "dev", d, "txqueuelen", n] => {
                let n: u32 = n.parse().map_err(|_| format!("bad txqueuelen in {cmd}"))?;
                Ok((if self.tc.set_txqueuelen(d, n) { 0 } else { 1 }, String::new(), String::new()))
            }
            // A dummy has no MTU bounds (dummy_setup: max_mtu 0).
            ["link", "set", "dev", d, "mtu", n, ..] => {
                let n: u32 = n.parse().map_err(|_| format!("bad mtu in {cmd}"))?;
                let dev = self.tc.device_mut(d).ok_or_else(|| format!("no device in {cmd}"))?;
                dev.info.mtu = n;
                ok()
            }
            // The engine's devices are up from the start, and no qdisc here reads an
            // interface address.
            ["link", "set", "dev", d, "up"] | ["link", "set", d, "up"] if self.tc.device_mut(d).is_some() => ok(),
            ["addr", "add", _, "dev", d] if self.tc.device_mut(d).is_some() => ok(),
            _ => Err(format!("ip command not modelled: {cmd}")),
        }
    }

    /// `./tdc_multibatch.py [-x PREFIX] [-d] [-a START] [-m MAC] DEV DIR N FILES OP`:
    /// FILES batch files `DIR/PREFIXOP_i`, each tdc_batch.py's N lines of OP with
    /// MAC prefix `i + MAC`, handles from START on — consecutive ranges, or all the
    /// same range with `-d`.
    fn multibatch(&mut self, args: &[&str]) -> Option<()> {
        let (mut prefix, mut dup, mut start, mut mac) = ("", false, 1u32, 0u32);
        let mut pos = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match *a {
                "-x" => prefix = it.next()?,
                "-d" => dup = true,
                "-a" => start = it.next()?.parse().ok()?,
                "-m" => mac = it.next()?.parse().ok()?,
                a => pos.push(a),
            }
        }
        let [dev, dir, n, files, op] = pos.as_slice() else { return None };
        let (n, files): (u32, u32) = (n.parse().ok()?, files.parse().ok()?);
        let op = Op::parse(op)?;
        for i in 0..files {
            let b = Batch {
                dev: dev.to_string(),
                number: n,
                handle_start: start,
                op,
                mac_prefix: mac + i,
                share_action: false,
            };
            self.files.insert(format!("{dir}/{prefix}{}_{i}", op.name()), b);
            if !dup {
                start += n;
            }
        }
        Some(())
    }

    /// `bash -c "find DIR/GLOB* -print | xargs -n 1 -P N $TC [-f] -b"`: one tc per
    /// file, in parallel in tdc — one after the other here, in name order; each case
    /// asks for a final state no order changes (disjoint ranges, or the same change
    /// from every file). xargs exits 123 when any tc exited 1-125.
    fn xargs_batches(&mut self, cmd: &str) -> Option<Result<Ran, String>> {
        let re = regex::Regex::new(r#"^bash -c "find (\S+)\* -print \| xargs -n 1 -P \d+ \$TC( -f)? -b"$"#).ok()?;
        let c = re.captures(cmd)?;
        let glob = substitute(&c[1]);
        let force = if c.get(2).is_some() { " -f" } else { "" };
        let paths: Vec<String> = self.files.keys().filter(|p| p.starts_with(&glob)).cloned().collect();
        let mut all = (0, String::new(), String::new());
        for p in paths {
            let r = self.sh(&format!("$TC{force} -b {p}"));
            let (code, out, err) = match r {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            if (1..=125).contains(&code) {
                all.0 = 123;
            }
            all.1.push_str(&out);
            all.2.push_str(&err);
        }
        Some(Ok(all))
    }
}

/// tdc_config.py's TIMEOUT: how long tdc lets one command run before it kills it.
const TDC_TIMEOUT_SECS: u64 = 24;

impl Bed {
    /// tc-testing's scripts/taprio_wait_for_admin.sh TC DEV: until `$TC -j qdisc show
    /// dev DEV root | jq '.[].options | has("admin")'` prints `false`, `sleep 1`. The
    /// kernel's taprio makes the admin schedule the oper one from its hrtimer; here a
    /// second of the runner's virtual clock passes per `sleep 1` and the device's
    /// qdiscs are driven at the new time (the engine's taprio runs its hrtimer's
    /// expiries when driven). The script has no bound of its own: tdc kills it after
    /// its TIMEOUT, which fails the case.
    fn wait_for_admin(&mut self, dev: &str) -> Result<Ran, String> {
        let show = ["-j", "qdisc", "show", "dev", dev, "root"];
        for _ in 0..=TDC_TIMEOUT_SECS {
            let (code, out, err) = self.tc_cmd(&show)?;
            if code != 0 {
                return Err(format!("taprio_wait_for_admin.sh: `tc -j qdisc show` failed: {err}"));
            }
            let dump: Value = serde_json::from_str(&out).map_err(|e| format!("tc -j output is not JSON: {e}"))?;
            // jq's `has` on a qdisc without options (null) is an error, which the
            // script's test reads as "not false": it keeps waiting.
            let has: Vec<&str> = dump
                .as_array()
                .into_iter()
                .flatten()
                .map(|q| match q.get("options") {
                    Some(Value::Object(o)) => {
                        if o.contains_key("admin") {
                            "true"
                        } else {
                            "false"
                        }
                    }
                    _ => "error",
                })
                .collect();
            if has == ["false"] {
                return Ok((0, String::new(), String::new()));
            }
            self.tc.now = self.tc.now + qdisc::Duration::from_secs(1);
            let now = self.tc.now;
            let d = self.tc.device_mut(dev).ok_or_else(|| format!("no device {dev}"))?;
            while let qdisc::Dequeued::Packet(_) = d.dequeue(now) {}
        }
        Ok((
            124,
            String::new(),
            format!("taprio_wait_for_admin.sh: still an admin schedule after {TDC_TIMEOUT_SECS} s"),
        ))
    }

    /// `bash -c "A && B | jq 'FILTER'"` (taprio's verifyCmds): A, then, if it
    /// succeeded, B's output through [`jq`].
    fn and_then_jq(&mut self, cmd: &str) -> Option<Result<Ran, String>> {
        let re = regex::Regex::new(r#"^bash -c "(.+?) && (.+?) \| jq '([^']*)'"$"#).ok()?;
        let c = re.captures(cmd)?;
        let r = (|| {
            let (code, out, err) = self.sh(&c[1])?;
            if code != 0 {
                return Ok((code, out, err));
            }
            let (code, out, err) = self.sh(&c[2])?;
            let dump: Value = serde_json::from_str(&out).map_err(|e| format!("jq input is not JSON: {e}"))?;
            Ok((code, jq(&dump, &c[3]).ok_or_else(|| format!("jq filter not modelled: {}", &c[3]))?, err))
        })();
        Some(r)
    }
}

/// jq over a path of `.[]` and `.NAME` steps: each value it reaches on its own line,
/// as jq prints scalars (null for a missing key); None for any other filter.
fn jq(v: &Value, filter: &str) -> Option<String> {
    let mut vals = vec![v.clone()];
    let mut rest = filter;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(".[]") {
            vals = vals.iter().map(|v| v.as_array().cloned()).collect::<Option<Vec<_>>>()?.concat();
            rest = r;
        } else {
            let r = rest.strip_prefix('.')?;
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let (name, r) = r.split_at(end);
            vals = vals.iter().map(|v| v.get(name).cloned().unwrap_or(Value::Null)).collect();
            rest = r;
        }
    }
    vals.iter().try_fold(String::new(), |mut s, v| {
        if v.is_array() || v.is_object() {
            return None;
        }
        s.push_str(&format!("{v}\n"));
        Some(s)
    })
}

/// tdc_batch.py's `-e`.
#[derive(Clone, Copy)]
enum Op {
    Add,
    Del,
    Replace,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "add" => Op::Add,
            "del" => Op::Del,
            "replace" => Op::Replace,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Del => "del",
            Op::Replace => "replace",
        }
    }
}

/// One file tdc_batch.py writes: `number` flower filters on the device's ingress,
/// prio 1, handles from `handle_start`, skip_hw, the i-th with source MAC
/// `e4:11:PP:i2:i1:i0` and destination `e4:12:00:i2:i1:i0` (i's bytes), each with
/// its own drop action — or all with action index 1 (`--share_action`).
struct Batch {
    dev: String,
    number: u32,
    handle_start: u32,
    op: Op,
    mac_prefix: u32,
    share_action: bool,
}

impl Batch {
    /// `./tdc_batch.py DEV FILE [-n N] [-a START] [-e OP] [-m MAC] [-s|--share_action]`.
    fn parse(args: &[&str]) -> Option<(String, Batch)> {
        let mut b =
            Batch { dev: String::new(), number: 1, handle_start: 1, op: Op::Add, mac_prefix: 0, share_action: false };
        let mut pos = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match *a {
                "-n" | "--number" => b.number = it.next()?.parse().ok()?,
                "-a" | "--handle_start" => b.handle_start = it.next()?.parse().ok()?,
                "-e" | "--operation" => b.op = Op::parse(it.next()?)?,
                "-m" | "--mac_prefix" => b.mac_prefix = it.next()?.parse().ok().filter(|m| *m < 256)?,
                "-s" | "--share_action" => b.share_action = true,
                a if !a.starts_with('-') => pos.push(a),
                _ => return None,
            }
        }
        let [dev, file] = pos.as_slice() else { return None };
        b.dev = dev.to_string();
        Some((file.to_string(), b))
    }

    /// The file's text, line for line as tdc_batch.py formats it (its double space
    /// before `flower` and the space after `drop` included).
    fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::with_capacity(self.number as usize * 140);
        let share = if self.share_action { "index 1" } else { "" };
        for index in 0..self.number.min(1 << 24) {
            let mac = format!("{:02x}:{:02x}:{:02x}", index >> 16 & 0xff, index >> 8 & 0xff, index & 0xff);
            let h = self.handle_start + index;
            let dev = &self.dev;
            let _ = match self.op {
                Op::Del => writeln!(s, "filter del dev {dev} prio 1 protocol ip parent ffff: handle {h} flower"),
                op => writeln!(
                    s,
                    "filter {} dev {dev} prio 1 protocol ip parent ffff: handle {h}  flower skip_hw src_mac e4:11:{:02x}:{mac} dst_mac e4:12:00:{mac} action drop {share}",
                    op.name(),
                    self.mac_prefix
                ),
            };
        }
        s
    }
}

/// `bash -c "for V in W…; do CMD; done"`: CMD once per word, `\$V` replaced by it.
fn for_loop(cmd: &str) -> Option<Vec<String>> {
    let re = regex::Regex::new(r#"^bash -c "for (\w+) in ([^;]*); do (.*); done"$"#).ok()?;
    let c = re.captures(cmd)?;
    let var = format!("\\${}", &c[1]);
    Some(c[2].split_whitespace().map(|w| c[3].replace(&var, w)).collect())
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
    /// `ping [-n] [-c N] [-s SIZE] [-Q TOS] [-f] [-W SECS] [-I DEV] ADDR [> /dev/null]`:
    /// N ICMP echo requests of SIZE bytes of data (56 by default) in IPv4 and
    /// Ethernet headers. To a loopback address they leave by `lo` from 127.0.0.1,
    /// one a second (ping's interval): lo hands each request its qdisc releases back
    /// to the stack, whose echo reply leaves by lo's qdisc too (the queue is run
    /// through its watchdog times, as the kernel's qdisc watchdog does); ping's
    /// status is 0 once a reply came. Otherwise they leave by DEV from 10.10.10.10
    /// (the address the cases give $DUMMY), whose driver (a dummy's) takes whatever
    /// the qdisc releases: no reply ever comes, status 1.
    fn ping(&mut self, words: &[String]) -> Result<Ran, String> {
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
                "-f" | "-n" => {}
                ">" => {
                    w.next();
                }
                o if o.starts_with("-c") => count = o[2..].parse().map_err(|_| bad())?,
                o if o.starts_with("-W") => {}
                o if !o.starts_with('-') => dst = Some(o),
                _ => return Err(bad()),
            }
        }
        let dst: std::net::Ipv4Addr = dst.ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let len = 14 + 20 + 8 + size;
        if dst.is_loopback() {
            return self.ping_lo(dst, count, len, tos).ok_or_else(bad);
        }
        let dev = dev.ok_or_else(bad)?;
        let src = std::net::Ipv4Addr::new(10, 10, 10, 10).to_ipv6_mapped().octets();
        let flow = qdisc::FlowKey { src, dst: dst.to_ipv6_mapped().octets(), sport: 0, dport: 0, proto: 1 };
        let now = self.tc.now;
        let d = self.tc.device_mut(dev).ok_or_else(bad)?;
        for id in 0..count {
            let mut p = qdisc::Packet::new(id, len).with_flow(flow);
            p.tos = tos;
            let _ = d.xmit(p, now, true);
            while let qdisc::Dequeued::Packet(_) = d.dequeue(now) {}
        }
        Ok((1, String::new(), String::new()))
    }

    /// [`Bed::ping`] to a loopback address: requests and replies through lo's qdisc.
    fn ping_lo(&mut self, dst: std::net::Ipv4Addr, count: u64, len: u32, tos: u8) -> Option<Ran> {
        use qdisc::{Dequeued, Duration, Packet};
        let addr = |a: std::net::Ipv4Addr| a.to_ipv6_mapped().octets();
        let request =
            qdisc::FlowKey { src: addr(std::net::Ipv4Addr::LOCALHOST), dst: addr(dst), sport: 0, dport: 0, proto: 1 };
        let reply = qdisc::FlowKey { src: request.dst, dst: request.src, ..request };
        let start = self.tc.now;
        let mut now = start;
        let mut replies = 0;
        for id in 0..count {
            now = now.max(start + Duration::from_secs(id));
            let d = self.tc.device_mut("lo")?;
            let mut p = Packet::new(2 * id, len).with_flow(request);
            p.tos = tos;
            let _ = d.xmit(p, now, true);
            let next = start + Duration::from_secs(id + 1);
            loop {
                match d.dequeue(now) {
                    Dequeued::Packet(p) if p.id % 2 == 0 => {
                        let mut r = Packet::new(p.id + 1, len).with_flow(reply);
                        r.tos = tos;
                        let _ = d.xmit(r, now, true);
                    }
                    Dequeued::Packet(_) => replies += 1,
                    Dequeued::Throttled { until } if until < next => now = until,
                    _ => break,
                }
            }
        }
        self.tc.now = now;
        Some((if replies > 0 { 0 } else { 1 }, String::new(), String::new()))
    }
}

/// The devices a case needs: $DUMMY always; $ETH with the queue count netdevsim is given.
fn devices(case: &Value) -> Vec<DevSpec> {
    let mut specs = vec![
        DevSpec::parse(&format!("{DUMMY},kind=veth")).unwrap(),
        DevSpec::parse(&format!("{DEV0},kind=veth")).unwrap(),
        DevSpec::parse(&format!("{DEV1},kind=veth")).unwrap(),
    ];
    let text = case.to_string();
    if text.contains("$DEV2") {
        specs.push(DevSpec::parse(&format!("{DEV2},kind=eth")).unwrap());
    }
    // Every netns has its loopback (noqueue by default, as a veth here).
    if text.contains(" lo ") || text.contains("127.0.0.1") {
        specs.push(DevSpec::parse("lo,kind=veth").unwrap());
    }
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
/// flower's concurrency cases that count their filters by a line without `parent`.
const BATCH_PARENT: &str = "its pattern `filter protocol ip pref 1 flower chain 0 handle` counts filters \
     tdc_batch.py adds with `parent ffff:` and the case lists with `ingress`: the kernel dumps the block's \
     classid, which each filter request sets, as their parent (tc_dump_tfilter), so 6.12's tc prints \
     `filter parent ffff: protocol ip pref 1 …` and the pattern matches none (goldens/kernel-6.12/flower-mac.json); \
     its siblings 6f52 and 0c44, which expect none, pass for that reason too";
const FILTER_SKIPS: &[(&str, &str)] = &[
    ("e41d", BATCH_PARENT),
    ("c9da", BATCH_PARENT),
    ("14be", BATCH_PARENT),
    ("ab62", BATCH_PARENT),
    ("6e8f", BATCH_PARENT),
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
const QDISC_SKIPS: &[(&str, &str)] = &[("6a83", TAPRIO_OFFLOAD), ("e8a1", TAPRIO_OFFLOAD)];
const TAPRIO_OFFLOAD: &str = "its setup makes a taprio in full offload (flags 0x2), which takes netdevsim's taprio \
     offload; the engine's devices have no offload and refuse it as a kernel without one does";
const NETEM_IN_TREE: &str = "tests check_netem_in_tree (\"net/sched: Restrict conditions for adding duplicating \
     netems to qdisc tree\"), which 6.12.117 does not have (goldens/kernel-6.12/netem-tree.json: both changes \
     succeed) and 6.18 replaced by marking duplicates (skb tc_depth)";

/// The kernel a file's cases run under: the first that has the kind (dualpi2:
/// 6.18), else the default (6.12).
fn kernel_for(kind: &str) -> KernelVersion {
    qdisc::sched::lookup(kind).and_then(|o| o.since).unwrap_or_default()
}

/// The flower cases that play a million filters (tdc_batch.py files through `tc -b`)
/// and are not skips for [`BATCH_PARENT`]: 53 s together and 1.3 GB at the peak
/// here, so the default run leaves them to [`upstream_tc_testing_flower_scale_cases`].
const FLOWER_SCALE: &[&str] = &["6f52", "0c44", "d052"];

/// `scale`: also the [`FLOWER_SCALE`] cases.
fn run_case(case: &Value, kernel: KernelVersion, scale: bool) -> Outcome {
    if !scale && FLOWER_SCALE.contains(&case["id"].as_str().unwrap_or("")) {
        return Outcome::Skip(
            "a million-filter flower case (tdc_batch.py files through `tc -b`): run by the ignored test \
             upstream_tc_testing_flower_scale_cases (`cargo test --release -p qdisc --test tdc -- --ignored`)"
                .into(),
        );
    }
    if let Some((_, why)) = OTHER_KERNEL
        .iter()
        .chain(ACTION_SKIPS)
        .chain(FILTER_SKIPS)
        .chain(QDISC_SKIPS)
        .find(|(id, _)| case["id"].as_str() == Some(id))
    {
        return Outcome::Skip(why.to_string());
    }
    let text = case.to_string();
    if text.contains("hw-tc-offload on") && (text.contains("taprio") || text.contains("filter add")) {
        return Outcome::Skip(
            "hw-tc-offload on a netdevsim whose taprio or filter-block offload (nsim_setup_tc) would take the \
             case's configuration: offload is not modelled"
                .into(),
        );
    }
    let mut bed = Bed::new(Tc::with_kernel(&devices(case), kernel));
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
    let (code, _, _) = match bed.sh(case["cmdUnderTest"].as_str().unwrap()) {
        Ok(r) => r,
        Err(why) => return Outcome::Skip(why),
    };
    if code != want_exit {
        return Outcome::Fail(format!("exit {code}, expected {want_exit}"));
    }
    // tdc's exec_cmd reads stderr instead of stdout when the command failed and
    // said something there.
    let out = match bed.sh(case["verifyCmd"].as_str().unwrap()) {
        Ok((code, _, err)) if code != 0 && !err.is_empty() => err,
        Ok((_, out, _)) => out,
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
            match run_case(case, kernel_for(kind), false) {
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

/// The filter files (every classifier tc 6.15 and 6.12 share), and the infrastructure
/// file of `tc filter` / `tc chain`.
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

/// The [`FLOWER_SCALE`] cases of flower.json, each timed (ignored by default;
/// `-- --ignored` runs it).
#[test]
#[ignore]
fn upstream_tc_testing_flower_scale_cases() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tdc/filters/flower.json");
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(file).expect("tdc case file")).unwrap();
    let mut failures = Vec::new();
    for case in cases.as_array().unwrap() {
        let id = case["id"].as_str().unwrap_or("?");
        if !FLOWER_SCALE.contains(&id) {
            continue;
        }
        let t = std::time::Instant::now();
        let outcome = run_case(case, KernelVersion::default(), true);
        let secs = t.elapsed().as_secs_f64();
        match outcome {
            Outcome::Pass => eprintln!("tdc flower {id}: passed in {secs:.1} s"),
            Outcome::Fail(why) => failures.push(format!("{id}: {}", why.chars().take(2000).collect::<String>())),
            Outcome::Skip(why) => failures.push(format!("{id} skipped: {why}")),
        }
    }
    assert!(failures.is_empty(), "tdc flower scale failures:\n{}", failures.join("\n"));
}
