//! Differential fuzzer: generated tc commands and batch files run through iproute2
//! 6.15's tc on the running kernel and through `qdisc-lab tc --kernel <running>`;
//! stdout, stderr and the exit status must be byte-identical (docs/tc-parity.md).
//!
//! A case is one tc invocation from a fresh device: a single command (argv), or a batch
//! file (`-batch FILE`, sometimes `-force`, sometimes on stdin) whose first lines build
//! a tree and whose later lines are the commands under test. Batch files are how state
//! is built: both sides then see the same sequence in one process, and the whole
//! output is compared. Kernel side: a network namespace holding `eth0`, a veth whose
//! peer lives in a second namespace (so `qdisc show` lists only eth0; `lo` is down and
//! shows nothing), recreated before every case; tc enters the namespace with setns(2)
//! so its argv is exactly the generated one. Engine side: `--dev eth0` described as
//! the kernel made it (veth, num_possible_cpus() tx queues, one of them real).
//!
//! Kinds the running kernel lacks (probed at start: "Specified qdisc kind is unknown",
//! "TC classifier not found") are not run; they are counted as skipped with the
//! reason. Every mismatch must match a known difference (KNOWN, each with its
//! reason), and at least 98 % of the cases run must be identical.
//!
//! CI mode: seed 18, 2500 cases generated (about 2,040 run). By hand: `QDL_FUZZ_SEED=N QDL_FUZZ_CASES=M
//! QDL_FUZZ_REPORT=FILE cargo test --release -p qdisc-lab --test tc_fuzz -- --nocapture`
//! (the report lists every mismatch with both sides' output). Needs root, network
//! namespaces and iproute2 6.15 (`scripts/install-iproute2.sh`, or `QDL_TC`);
//! QDISC_LAB_NO_KERNEL=1 skips it, and it says so.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");
const CI_SEED: u64 = 18;
const CI_CASES: usize = 2500;

// ---- deterministic generation --------------------------------------------------

/// splitmix64: tiny, seedable, the same sequence everywhere.
struct Rng(u64, Vec<&'static str>);

impl Rng {
    /// Note a qdisc or classifier kind the current case uses.
    fn uses(&mut self, kind: &'static str) -> &'static str {
        self.1.push(kind);
        kind
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// True with probability `pct` %.
    fn pct(&mut self, pct: usize) -> bool {
        self.below(100) < pct
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const RATE_OK: &[&str] =
    &["1mbit", "10mbit", "100kbit", "1gbit", "500kbps", "8000", "1.5mbit", "100mbit", "2mibit", "10%"];
const RATE_EDGE: &[&str] = &[
    "0",
    "1",
    "1bit",
    "0bit",
    "4294967295",
    "4294967296",
    "34359738360",
    "18446744073709551615",
    "18446744073709551616",
    "1e3",
    "1E3kbit",
    "0.5bit",
    "-1",
    "-1mbit",
    "nan",
    "inf",
    "100%",
    "101%",
    "0%",
    "-5%",
    "1.5%",
    "mbit",
    "1xbit",
    "1kibps",
    "1tbit",
    "1Tbps",
    "0x100",
    "1mbit/s",
    "",
];
const SIZE_OK: &[&str] = &["1500", "10k", "10kb", "15k", "1m", "1mb", "100000", "3000b", "64k"];
const SIZE_EDGE: &[&str] = &[
    "0",
    "1",
    "4294967295",
    "4294967296",
    "-1",
    "1.5k",
    "1kbit",
    "1g",
    "1gb",
    "4g",
    "abc",
    "0x400",
    "1e3",
    "10K",
    "10kB",
    "1mbit",
    "",
];
const TIME_OK: &[&str] = &["10ms", "50ms", "1s", "100us", "200ms", "1000"];
const TIME_EDGE: &[&str] = &[
    "0",
    "0ms",
    "1ns",
    "1us",
    "4294967295",
    "4294967296us",
    "4295s",
    "-1ms",
    "1.5ms",
    "1h",
    "1min",
    "nan",
    "1sec",
    "1msec",
    "1usecs",
    "abc",
    "",
];
const INT_OK: &[&str] = &["1", "2", "10", "100", "1000"];
const INT_EDGE: &[&str] = &[
    "0",
    "1",
    "2",
    "7",
    "8",
    "255",
    "256",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "-1",
    "0x10",
    "010",
    "1.5",
    "abc",
    "",
];
const HANDLE_EDGE: &[&str] =
    &["1:", "2:", "10:", "ffff:", "0:", "1:0", "1:1", "abc:", "1", "10000:", "fff1:", "8000:", "0x10:", ":1", ""];
const JUNK: &[&str] = &["foo", "help", "limit", "rate", "0", "-1", "root", "dev", "\u{a0}", "1:", "\t"];

/// Qdisc kinds generated: the ones the engine models. Those the running kernel lacks
/// are skipped (probed at start).
const QDISC_KINDS: &[&str] = &[
    "htb",
    "tbf",
    "pfifo",
    "bfifo",
    "pfifo_head_drop",
    "pfifo_fast",
    "mq",
    "noqueue",
    "fq",
    "fq_codel",
    "sfq",
    "prio",
    "codel",
];
const CLS_KINDS: &[&str] = &["u32", "fw", "matchall", "flower"];

impl Rng {
    fn val(&mut self, ok: &[&'static str], edge: &[&'static str]) -> &'static str {
        if self.pct(75) {
            self.pick(ok)
        } else {
            self.pick(edge)
        }
    }
    fn rate(&mut self) -> &'static str {
        self.val(RATE_OK, RATE_EDGE)
    }
    fn size(&mut self) -> &'static str {
        self.val(SIZE_OK, SIZE_EDGE)
    }
    fn time(&mut self) -> &'static str {
        self.val(TIME_OK, TIME_EDGE)
    }
    fn int(&mut self) -> &'static str {
        self.val(INT_OK, INT_EDGE)
    }
    /// A keyword, sometimes abbreviated (tc's `matches`) or misspelt.
    fn kw(&mut self, w: &'static str) -> String {
        match self.below(30) {
            0 if w.len() > 1 => w[..1 + self.below(w.len() - 1)].to_string(),
            1 => format!("{w}x"),
            2 => w.to_uppercase(),
            _ => w.to_string(),
        }
    }
}

/// `KEY VALUE` pairs drawn from `opts` (each with its value generator), sometimes with
/// junk or a missing value.
fn options(r: &mut Rng, out: &mut Vec<String>, opts: &[(&'static str, fn(&mut Rng) -> String)]) {
    let n = r.below(opts.len() + 1);
    for _ in 0..n {
        let (k, v) = opts[r.below(opts.len())];
        out.push(r.kw(k));
        if !r.pct(4) {
            out.push(v(r));
        }
    }
    if r.pct(6) {
        out.push(r.pick(JUNK).to_string());
    }
}

fn s(x: &str) -> String {
    x.to_string()
}

/// The options of a qdisc kind (`qdisc add … KIND <these>`).
fn qdisc_opts(r: &mut Rng, kind: &str, out: &mut Vec<String>) {
    if r.pct(3) {
        out.push(s("help"));
        return;
    }
    match kind {
        "htb" => options(
            r,
            out,
            &[
                ("default", |r| s(r.pick(&["10", "0x10", "30", "0", "ffff", "1:10", "abc"]))),
                ("r2q", |r| s(r.int())),
                ("direct_qlen", |r| s(r.int())),
                ("offload", |_| s("")),
            ],
        ),
        "tbf" => {
            if !r.pct(10) {
                out.extend([r.kw("rate"), s(r.rate())]);
            }
            if !r.pct(10) {
                let b = r.pick(&["burst", "buffer", "maxburst"]);
                out.extend([r.kw(b), s(r.size())]);
            }
            if !r.pct(10) {
                if r.pct(50) {
                    out.extend([r.kw("limit"), s(r.size())]);
                } else {
                    out.extend([r.kw("latency"), s(r.time())]);
                }
            }
            options(
                r,
                out,
                &[
                    ("peakrate", |r| s(r.rate())),
                    ("mtu", |r| s(r.size())),
                    ("minburst", |r| s(r.size())),
                    ("mpu", |r| s(r.size())),
                    ("overhead", |r| s(r.int())),
                    ("linklayer", |r| s(r.pick(&["ethernet", "atm", "adsl", "foo"]))),
                ],
            );
        }
        "pfifo" | "pfifo_head_drop" => options(r, out, &[("limit", |r| s(r.int()))]),
        "bfifo" => options(r, out, &[("limit", |r| s(r.size()))]),
        "fq_codel" => options(r, out, &[("limit", |r| s(r.int())), ("target", |r| s(r.time()))]),
        "fq" => options(r, out, &[("limit", |r| s(r.int())), ("low_rate_threshold", |r| s(r.rate()))]),
        "sfq" => options(r, out, &[("perturb", |r| s(r.int())), ("quantum", |r| s(r.size()))]),
        "prio" => options(r, out, &[("bands", |r| s(r.int()))]),
        "codel" => options(r, out, &[("limit", |r| s(r.int())), ("target", |r| s(r.time()))]),
        // pfifo_fast, mq, noqueue, ingress, clsact take no options.
        _ => {
            if r.pct(8) {
                out.push(r.pick(JUNK).to_string());
            }
        }
    }
}

fn htb_class_opts(r: &mut Rng, out: &mut Vec<String>) {
    if r.pct(3) {
        out.push(s("help"));
        return;
    }
    if !r.pct(8) {
        out.extend([r.kw("rate"), s(r.rate())]);
    }
    options(
        r,
        out,
        &[
            ("ceil", |r| s(r.rate())),
            ("burst", |r| s(r.size())),
            ("cburst", |r| s(r.size())),
            ("prio", |r| s(r.pick(&["0", "1", "3", "7", "8", "-1", "abc"]))),
            ("quantum", |r| s(r.size())),
            ("mtu", |r| s(r.size())),
            ("mpu", |r| s(r.size())),
            ("overhead", |r| s(r.int())),
            ("linklayer", |r| s(r.pick(&["ethernet", "atm", "adsl", "foo"]))),
        ],
    );
}

const MATCHES: &[&str] = &[
    "match ip src 10.0.0.0/8",
    "match ip dst 192.168.1.1/32",
    "match ip dport 80 0xffff",
    "match ip sport 22 0xffff",
    "match ip protocol 6 0xff",
    "match ip tos 0x10 0xff",
    "match u32 0 0",
    "match u32 0x10 0xff at 12",
    "match u16 0x800 0xffff at -2",
    "match u8 6 0xff at 9",
    "match ip src 300.1.1.1/8",
    "match ip dport 70000 0xffff",
    "match u32 0 0 at 3",
    "match ip src 10.0.0.1/33",
    "match ip",
    "match u32 1",
    "match ether",
];

/// A filter's kind and options (`filter add … KIND <these>`).
fn filter_opts(r: &mut Rng, kind: &str, out: &mut Vec<String>) {
    out.push(s(kind));
    if r.pct(3) {
        out.push(s("help"));
        return;
    }
    match kind {
        "u32" => {
            for _ in 0..r.below(3) + usize::from(r.pct(85)) {
                out.extend(r.pick(MATCHES).split(' ').map(s));
            }
            if r.pct(15) {
                out.extend([s("handle"), s(r.pick(&["800::1", "1::", "800:0:5", "fff:1:1", "abc"]))]);
            }
        }
        "fw" => {}
        "flower" => out.extend(["ip_proto", "tcp", "dst_port", "80"].map(s)),
        _ => {}
    }
    if r.pct(80) {
        let id = r.pick(&["1:10", "1:1", "1:20", "1:", "10:1", "ffff:ffff", "abc", "1:10000"]);
        let k = if r.pct(50) { "classid" } else { "flowid" };
        out.extend([r.kw(k), s(id)]);
    }
    if r.pct(10) {
        out.extend(r.pick(&["action drop", "action gact pass", "police rate 1mbit burst 10k drop"]).split(' ').map(s));
    }
}

/// `parent X` / `root` / `ingress` … as a qdisc or filter is placed.
fn place(r: &mut Rng, out: &mut Vec<String>, tree: Tree) {
    let choices: &[&str] = match tree {
        Tree::Htb => &["root", "parent 1:", "parent 1:1", "parent 1:10", "parent 1:20", "parent 2:1"],
        Tree::Tbf => &["root", "parent 1:", "parent 1:1", "parent 10:"],
        Tree::Mq => &["root", "parent 1:1", "parent 1:2", "parent 1:3", "parent 1:"],
        Tree::Ingress => &["ingress", "parent ffff:", "root", "clsact"],
        Tree::Clsact => &["ingress", "egress", "clsact", "parent ffff:fff2", "parent ffff:fff3", "root"],
        Tree::None => &["root", "parent 1:", "parent 1:1", "ingress", "clsact", "parent ffff:fff1", "parent 0:"],
    };
    out.extend(r.pick(choices).split(' ').map(s));
    if r.pct(5) {
        out.push(s(r.pick(HANDLE_EDGE)));
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tree {
    None,
    Htb,
    Tbf,
    Mq,
    Ingress,
    Clsact,
}

const DEV: &str = "eth0";

/// One command under test (argv after tc's global options), given the tree it runs on.
fn command(r: &mut Rng, tree: Tree) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let dev = if r.pct(4) { r.pick(&["eth1", "", "eth0x", "e"]) } else { DEV };
    match r.below(20) {
        // qdisc add/replace/change
        0..=5 => {
            a.push(r.kw("qdisc"));
            let verb = r.pick(&["add", "add", "replace", "change"]);
            a.push(r.kw(verb));
            a.extend([r.kw("dev"), s(dev)]);
            let pool: &[&str] = if r.pct(12) { &["ingress", "clsact"] } else { QDISC_KINDS };
            let kind = r.pick(pool);
            r.uses(kind);
            if kind == "ingress" || kind == "clsact" {
                if r.pct(60) {
                    a.push(s(kind));
                } else {
                    place(r, &mut a, tree);
                }
            } else {
                place(r, &mut a, tree);
            }
            // A handle always (a change may create too): without one, or with `0:`, the
            // kernel draws from a global counter (qdisc_alloc_handle) that other
            // processes move.
            a.extend([r.kw("handle"), s(r.pick(&["1:", "2:", "10:", "20:", "ffff:", "abc:", "1:1"]))]);
            if r.pct(5) {
                a.extend([s("estimator"), s(r.time()), s(r.time())]);
            }
            a.push(s(kind));
            qdisc_opts(r, kind, &mut a);
        }
        // qdisc del
        6 => {
            a.extend([r.kw("qdisc"), r.kw("del"), r.kw("dev"), s(dev)]);
            place(r, &mut a, tree);
            if r.pct(30) {
                a.extend([s("handle"), s(r.pick(&["1:", "10:", "ffff:", "0:", "2:"]))]);
            }
            if r.pct(20) {
                let k = r.pick(QDISC_KINDS);
                a.push(s(r.uses(k)));
            }
        }
        // class add/change/replace/del
        7..=10 => {
            a.push(r.kw("class"));
            let verb = r.pick(&["add", "add", "change", "replace", "del"]);
            a.push(r.kw(verb));
            a.extend([r.kw("dev"), s(dev)]);
            let p = r.pick(&["parent 1:", "parent 1:1", "parent 1:10", "root", "parent 2:", "parent ffff:"]);
            if !r.pct(8) {
                a.extend(p.split(' ').map(s));
            }
            let id = r.pick(&["1:10", "1:20", "1:1", "1:30", "1:0", "2:10", "1:ffff", "1:10000", "abc", "1"]);
            if !r.pct(8) {
                a.extend([r.kw("classid"), s(id)]);
            }
            if verb != "del" || r.pct(20) {
                let kind = if r.pct(85) { "htb" } else { r.pick(&["tbf", "mq", "pfifo", "foo"]) };
                a.push(s(kind));
                if kind == "htb" {
                    htb_class_opts(r, &mut a);
                }
            }
        }
        // filter add/change/replace/del
        11..=14 => {
            a.push(r.kw("filter"));
            let verb = r.pick(&["add", "add", "add", "change", "replace", "del"]);
            a.push(r.kw(verb));
            a.extend([r.kw("dev"), s(dev)]);
            place(r, &mut a, tree);
            if r.pct(80) {
                a.extend([r.kw("protocol"), s(r.pick(&["ip", "all", "ipv6", "802.1q", "0x800", "foo", "arp"]))]);
            }
            if r.pct(70) {
                let k = if r.pct(50) { "prio" } else { "pref" };
                a.extend([r.kw(k), s(r.pick(&["1", "2", "10", "0", "65535", "65536", "-1", "x"]))]);
            }
            if verb != "del" || r.pct(30) {
                let kind = if r.pct(85) { "u32" } else { r.pick(CLS_KINDS) };
                r.uses(kind);
                filter_opts(r, kind, &mut a);
            }
        }
        // show / list
        _ => {
            let obj = r.pick(&["qdisc", "qdisc", "class", "filter"]);
            let verb = if r.pct(85) { "show" } else { "list" };
            a.extend([r.kw(obj), r.kw(verb)]);
            if r.pct(85) {
                a.extend([r.kw("dev"), s(dev)]);
            }
            match obj {
                "qdisc" => {
                    if r.pct(30) {
                        let w = r.pick(&[
                            "root",
                            "ingress",
                            "handle 1:",
                            "parent 1:1",
                            "handle 1: root",
                            "invisible",
                            "clsact",
                            "parent ffff:fff1",
                        ]);
                        a.extend(w.split(' ').map(s));
                    }
                }
                "class" => {
                    if r.pct(30) {
                        let w = r.pick(&["parent 1:", "parent 1:1", "classid 1:10", "root", "parent 2:"]);
                        a.extend(w.split(' ').map(s));
                    }
                }
                _ => {
                    if r.pct(50) {
                        place(r, &mut a, tree);
                    }
                    if r.pct(20) {
                        a.extend([s("prio"), s(r.pick(&["1", "2", "49152"]))]);
                    }
                    if r.pct(15) {
                        a.extend([s("protocol"), s("ip")]);
                    }
                }
            }
        }
    }
    if r.pct(2) {
        a.push(s("help"));
    }
    a
}

/// A tree built by the first lines of a batch (all valid, handles given).
fn setup(r: &mut Rng, kinds_ok: &dyn Fn(&str) -> bool) -> (Tree, Vec<String>) {
    let d = DEV;
    let mut lines = Vec::new();
    let tree = match r.below(7) {
        0 => Tree::None,
        1 | 2 => {
            lines.push(format!("qdisc add dev {d} root handle 1: htb default 10"));
            lines.push(format!("class add dev {d} parent 1: classid 1:1 htb rate 10mbit"));
            lines.push(format!("class add dev {d} parent 1:1 classid 1:10 htb rate 5mbit ceil 10mbit"));
            if r.pct(50) {
                lines.push(format!("class add dev {d} parent 1:1 classid 1:20 htb rate 1mbit ceil 2mbit prio 1"));
            }
            if r.pct(40) {
                lines.push(format!("qdisc add dev {d} parent 1:10 handle 10: pfifo limit 50"));
            }
            if r.pct(40) {
                lines.push(format!(
                    "filter add dev {d} parent 1: protocol ip prio 1 u32 match ip dport 80 0xffff flowid 1:10"
                ));
            }
            if r.pct(15) {
                // Nesting: the kernel allows 10 nested htb and 12 tbf.
                let mut parent = "1:10".to_string();
                for i in 0..r.below(13) {
                    let h = 0x20 + i;
                    if r.pct(50) {
                        lines.push(format!(
                            "qdisc add dev {d} parent {parent} handle {h:x}: tbf rate 1mbit burst 10k latency 10ms"
                        ));
                        parent = format!("{h:x}:1");
                    } else {
                        lines.push(format!("qdisc add dev {d} parent {parent} handle {h:x}: htb"));
                        lines.push(format!("class add dev {d} parent {h:x}: classid {h:x}:1 htb rate 1mbit"));
                        parent = format!("{h:x}:1");
                    }
                }
            }
            Tree::Htb
        }
        3 => {
            lines.push(format!("qdisc add dev {d} root handle 1: tbf rate 1mbit burst 10k latency 50ms"));
            if r.pct(50) {
                lines.push(format!("qdisc add dev {d} parent 1:1 handle 10: bfifo limit 10k"));
            }
            Tree::Tbf
        }
        4 if kinds_ok("mq") => {
            lines.push(format!("qdisc add dev {d} root handle 1: mq"));
            if r.pct(50) {
                lines.push(format!("qdisc add dev {d} parent 1:1 handle 10: pfifo limit 10"));
            }
            Tree::Mq
        }
        5 => {
            lines.push(format!("qdisc add dev {d} ingress"));
            if r.pct(50) {
                lines.push(format!(
                    "filter add dev {d} parent ffff: protocol ip prio 2 u32 match ip src 10.0.0.0/8 flowid 1:1"
                ));
            }
            Tree::Ingress
        }
        _ => {
            lines.push(format!("qdisc add dev {d} clsact"));
            if r.pct(50) {
                lines.push(format!("filter add dev {d} egress protocol all prio 3 u32 match u32 0 0 classid 1:1"));
            }
            Tree::Clsact
        }
    };
    (tree, lines)
}

/// tc's global options before the object.
fn global_opts(r: &mut Rng) -> Vec<String> {
    let mut g = Vec::new();
    for _ in 0..r.below(3) {
        let o = r.pick(&[
            "-s",
            "-s",
            "-d",
            "-j",
            "-p",
            "-stats",
            "-details",
            "-json",
            "-pretty",
            "-iec",
            "-r",
            "-raw",
            "-N",
            "-nm",
            "-o",
            "-oneline",
            "-x",
            "-",
            "-c",
            "-help",
            "-br",
            "-timestamp",
            "-g",
            "-graph",
        ]);
        g.push(s(o));
    }
    g
}

/// A case: one tc invocation.
enum Case {
    /// argv after `tc`.
    Argv(Vec<String>),
    /// Global options, `-force`, the file's bytes, whether it is read from stdin.
    Batch { opts: Vec<String>, force: bool, text: Vec<u8>, stdin: bool },
}

impl Case {
    fn describe(&self) -> String {
        match self {
            Case::Argv(a) => format!("tc {}", a.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join(" ")),
            Case::Batch { opts, force, text, stdin } => format!(
                "tc {}{}-batch {}\n{}",
                opts.iter().map(|o| format!("{o} ")).collect::<String>(),
                if *force { "-force " } else { "" },
                if *stdin { "-" } else { "FILE" },
                String::from_utf8_lossy(text)
            ),
        }
    }
}

/// Odd bytes for a batch file: what tc's tokenizer (`makeargs`) and line reader see.
fn mangle(r: &mut Rng, line: &str) -> String {
    match r.below(10) {
        0 => format!("  {line}  "),
        1 => line.replace(' ', "\t"),
        2 => {
            let w: Vec<&str> = line.split(' ').collect();
            let i = r.below(w.len());
            let mut w: Vec<String> = w.iter().map(|x| x.to_string()).collect();
            w[i] = format!("\"{}\"", w[i]);
            w.join(" ")
        }
        3 => {
            let i = line.find(' ').unwrap_or(0);
            format!("{} \\\n {}", &line[..i], &line[i..].trim_start())
        }
        4 => format!("{line} # trailing comment"),
        5 => line.replacen(' ', "\u{a0}", 1),
        6 => {
            let w: Vec<&str> = line.split(' ').collect();
            let i = r.below(w.len());
            let mut w: Vec<String> = w.iter().map(|x| x.to_string()).collect();
            if w[i].len() > 2 {
                w[i] = format!("{}'{}'", &w[i][..1], &w[i][1..]);
            }
            w.join(" ")
        }
        7 => format!("{line}\r"),
        8 => format!("{line} {}", vec!["x"; 95 + r.below(10)].join(" ")),
        _ => line.replacen(' ', " \0 ", 1),
    }
}

fn gen_case(r: &mut Rng, kinds_ok: &dyn Fn(&str) -> bool) -> Case {
    if r.pct(40) {
        let mut a = global_opts(r);
        if r.pct(4) {
            a.push(s(r.pick(&[
                "help",
                "-h",
                "qdisc help",
                "class help",
                "filter help",
                "qdisc",
                "foo",
                "q",
                "qdisc add",
                "class show",
            ])));
            return Case::Argv(a.iter().flat_map(|w| w.split(' ').map(s).collect::<Vec<_>>()).collect());
        }
        a.extend(command(r, Tree::None));
        return Case::Argv(a);
    }
    let (tree, mut lines) = setup(r, kinds_ok);
    for _ in 0..1 + r.below(3) {
        lines.push(command(r, tree).join(" "));
    }
    if r.pct(70) {
        let show = r.pick(&[
            "qdisc show dev eth0",
            "class show dev eth0",
            "qdisc show",
            "filter show dev eth0",
            "filter show dev eth0 ingress",
            "filter show dev eth0 egress",
        ]);
        lines.push(s(show));
    }
    let mut text = String::new();
    for l in &lines {
        text.push_str(&if r.pct(6) { mangle(r, l) } else { l.clone() });
        text.push('\n');
        if r.pct(3) {
            text.push_str(r.pick(&["# a comment\n", "\n", "   \n", "#\n"]));
        }
    }
    let mut bytes = text.into_bytes();
    if r.pct(2) {
        bytes.extend_from_slice(b"# caf\xe9\n");
        bytes.extend_from_slice(b"qdisc show dev eth0\n");
    }
    if r.pct(2) {
        bytes.pop(); // no final newline
    }
    let opts = global_opts(r)
        .into_iter()
        .filter(|o| ["-s", "-d", "-j", "-p", "-stats", "-details", "-json", "-pretty", "-iec"].contains(&o.as_str()))
        .collect();
    Case::Batch { opts, force: r.pct(40), text: bytes, stdin: r.pct(10) }
}

// ---- known differences -----------------------------------------------------------

/// A mismatch matching one of these is expected, for the reason given
/// (docs/tc-parity.md lists them). Anything else fails the test.
struct Known {
    reason: &'static str,
    matches: fn(&Case, &Run, &Run) -> bool,
}

const KNOWN: &[Known] = &[];

// ---- running ---------------------------------------------------------------------

#[derive(Debug, PartialEq, Eq)]
struct Run {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: i32,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run { stdout: o.stdout, stderr: o.stderr, code: o.status.code().unwrap_or(-1) }
    }
}

/// The namespaces and the scratch directory, removed on every exit path.
struct Lab {
    a: String,
    b: String,
    dir: PathBuf,
    /// /run/netns/<a>, for setns(2).
    ns: std::fs::File,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Lab {
    fn new() -> Result<Lab, String> {
        let id = std::process::id();
        let (a, b) = (format!("qdl-fuzz{id}-a"), format!("qdl-fuzz{id}-b"));
        let dir = std::env::temp_dir().join(format!("qdl-fuzz{id}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        sh(&["ip", "netns", "add", &a]).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        let ns = std::fs::File::open(format!("/run/netns/{a}")).map_err(|e| e.to_string());
        let lab = Lab {
            a: a.clone(),
            b: b.clone(),
            dir,
            ns: match ns {
                Ok(f) => f,
                Err(e) => {
                    let _ = Command::new("ip").args(["netns", "del", &a]).status();
                    return Err(e);
                }
            },
        };
        sh(&["ip", "netns", "add", &b])?;
        // No IPv6 autoconfiguration: nothing may go through the qdiscs (their -s counters).
        sh(&[
            "ip",
            "netns",
            "exec",
            &a,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        Ok(lab)
    }

    /// Back to a fresh eth0: the root qdisc (its filters with it) and the
    /// ingress/clsact qdisc deleted, so the root is the veth's default noqueue again.
    /// (Deleting and making the veth again costs RCU grace periods: 3x slower.)
    fn clear(&self, tc: &str) {
        let script = format!("qdisc del dev {DEV} root\nqdisc del dev {DEV} parent ffff:fff1\n");
        let _ = self.run_in_ns(tc, &["-force", "-batch", "-"].map(s), Some(script.as_bytes()));
    }

    /// A fresh eth0: deleted and made again, up, its peer up.
    fn reset(&self) -> Result<(), String> {
        let _ = Command::new("ip").args(["-n", &self.a, "link", "del", DEV]).stderr(Stdio::null()).status();
        sh(&["ip", "-n", &self.a, "link", "add", DEV, "type", "veth", "peer", "name", "p0", "netns", &self.b])?;
        sh(&["ip", "-n", &self.a, "link", "set", DEV, "up"])?;
        sh(&["ip", "-n", &self.b, "link", "set", "p0", "up"])
    }

    /// Run `prog args` inside namespace a (setns before exec), stdin from `input`.
    fn run_in_ns(&self, prog: &str, args: &[String], input: Option<&[u8]>) -> Run {
        let fd = self.ns.as_raw_fd();
        let mut cmd = Command::new(prog);
        cmd.args(args);
        // SAFETY: setns(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        run(cmd, input)
    }
}

fn run(cmd: Command, input: Option<&[u8]>) -> Run {
    spawn(cmd, input).wait_with_output().expect("waits").into()
}

/// Start `cmd` with `input` on its stdin (small: fits the pipe buffer).
fn spawn(mut cmd: Command, input: Option<&[u8]>) -> std::process::Child {
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawns");
    if let Some(i) = input {
        let mut w = child.stdin.take().unwrap();
        let _ = w.write_all(i);
    }
    child
}

/// iproute2 6.15's tc (as in kernel_htb.rs).
fn tc_bin() -> Option<String> {
    if let Some(t) = std::env::var_os("QDL_TC") {
        return Some(t.to_string_lossy().into_owned());
    }
    let cache = std::env::var("QDL_CACHE")
        .unwrap_or_else(|_| format!("{}/.cache/qdisc-lab", std::env::var("HOME").unwrap_or_else(|_| "/root".into())));
    let tc = format!("{cache}/iproute2-6.15/sbin/tc");
    let v = Command::new(&tc).arg("-V").output().ok()?;
    String::from_utf8_lossy(&v.stdout).contains("iproute2-6.15").then_some(tc)
}

fn argv_of(case: &Case, file: &Path) -> (Vec<String>, Option<Vec<u8>>) {
    match case {
        Case::Argv(a) => (a.clone(), None),
        Case::Batch { opts, force, text, stdin } => {
            let mut a = opts.clone();
            if *force {
                a.push(s("-force"));
            }
            a.push(s("-batch"));
            if *stdin {
                a.push(s("-"));
                (a, Some(text.clone()))
            } else {
                std::fs::write(file, text).unwrap();
                a.push(file.to_string_lossy().into_owned());
                (a, None)
            }
        }
    }
}

/// What a mismatch looks like in the report.
fn show_run(r: &Run) -> String {
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        r.code,
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    )
}

#[test]
fn tc_matches_iproute2_on_the_running_kernel() {
    if std::env::var_os("QDISC_LAB_NO_KERNEL").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_KERNEL is set (needs root, network namespaces and iproute2 6.15)");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root (the kernel side needs network namespaces)");
        return;
    }
    let Some(tc) = tc_bin() else {
        eprintln!("skipped: iproute2 6.15's tc not found (scripts/install-iproute2.sh, or set QDL_TC)");
        return;
    };
    let seed: u64 = std::env::var("QDL_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(CI_SEED);
    let cases: usize = std::env::var("QDL_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(CI_CASES);
    let kernel =
        String::from_utf8(Command::new("uname").arg("-r").output().unwrap().stdout).unwrap().trim().to_string();
    let lab = Lab::new().expect("network namespaces for the kernel side");
    lab.reset().expect("a veth in the namespace");
    // The veth as the kernel made it: num_possible_cpus() tx queues, one real.
    let txq = lab.run_in_ns("sh", &[s("-c"), format!("ls -d /sys/class/net/{DEV}/queues/tx-* | wc -l")], None);
    let txq: u32 = String::from_utf8_lossy(&txq.stdout).trim().parse().unwrap_or(1);
    let numtx = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|p| p.trim().rsplit(['-', ',']).next().and_then(|n| n.parse::<u32>().ok()))
        .map_or(1, |n| n + 1);
    let devspec = format!("{DEV},kind=veth,txqueues={numtx},realtxqueues={txq}");

    // Which kinds this kernel has.
    let mut missing: BTreeMap<&str, &str> = BTreeMap::new();
    for k in QDISC_KINDS {
        let r = lab.run_in_ns(&tc, &["qdisc", "add", "dev", DEV, "root", "handle", "1:", k].map(s), None);
        if String::from_utf8_lossy(&r.stderr).contains("Specified qdisc kind is unknown") {
            missing.insert(k, "qdisc kind unknown to the running kernel");
        }
        let _ = lab.run_in_ns(&tc, &["qdisc", "del", "dev", DEV, "root"].map(s), None);
    }
    let _ = lab.run_in_ns(&tc, &["qdisc", "add", "dev", DEV, "root", "handle", "1:", "htb"].map(s), None);
    for (i, k) in CLS_KINDS.iter().enumerate() {
        // A pref each: a second kind at the same pref is refused for that alone.
        let pref = (10 + i).to_string();
        let r = lab.run_in_ns(&tc, &["filter", "add", "dev", DEV, "parent", "1:", "prio", &pref, k].map(s), None);
        if String::from_utf8_lossy(&r.stderr).contains("TC classifier not found") {
            missing.insert(k, "classifier unknown to the running kernel");
        }
    }
    let kinds_ok = |k: &str| !missing.contains_key(k);

    let started = std::time::Instant::now();
    let mut rng = Rng(seed, Vec::new());
    let (mut run_n, mut same) = (0usize, 0usize);
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut known: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut report = String::new();
    let file = lab.dir.join("case.tc");
    let mut ingress_queue = true;
    for i in 0..cases {
        let case = gen_case(&mut rng, &kinds_ok);
        if let Some(k) = rng.1.drain(..).find_map(|w| missing.get_key_value(w)) {
            *skipped.entry(format!("{} ({})", k.0, k.1)).or_default() += 1;
            continue;
        }
        let (argv, input) = argv_of(&case, &file);
        // Ours runs meanwhile on the other core.
        let mut cmd = Command::new(BIN);
        cmd.args(["tc", "--kernel", &kernel, "--dev", &devspec]).args(&argv);
        let ours = spawn(cmd, input.as_deref());
        if ingress_queue {
            lab.reset().expect("a fresh eth0");
        } else {
            lab.clear(&tc);
        }
        // Anything on the ingress side makes the device's ingress queue, which only
        // deleting the device undoes ("Cannot delete qdisc with handle of zero" then
        // differs from "Cannot find specified qdisc on specified device").
        let text = case.describe().to_ascii_lowercase();
        ingress_queue = ["ffff", "ingress", "clsact", "egress"].iter().any(|w| text.contains(w));
        let kern = lab.run_in_ns(&tc, &argv, input.as_deref());
        let ours: Run = ours.wait_with_output().expect("waits").into();
        run_n += 1;
        if kern == ours {
            same += 1;
            continue;
        }
        let why = KNOWN.iter().find(|k| (k.matches)(&case, &kern, &ours));
        let label = match why {
            Some(k) => {
                *known.entry(k.reason).or_default() += 1;
                format!("known: {}", k.reason)
            }
            None => {
                unknown.push(format!("case {i}: {}", case.describe().lines().next().unwrap_or("")));
                "NEW".to_string()
            }
        };
        report.push_str(&format!(
            "==== case {i} ({label})\n{}\n==== tc 6.15 on {kernel}\n{}==== qdisc-lab\n{}\n",
            case.describe(),
            show_run(&kern),
            show_run(&ours)
        ));
    }
    let pct = 100.0 * same as f64 / run_n.max(1) as f64;
    let mut summary = format!(
        "tc differential fuzz, seed {seed}: {cases} cases generated, {run_n} run, {same} byte-identical ({pct:.2} %), {} skipped, in {:.1} s\n",
        cases - run_n,
        started.elapsed().as_secs_f64()
    );
    for (k, n) in &skipped {
        summary.push_str(&format!("  skipped {n}: {k}\n"));
    }
    for (k, n) in &known {
        summary.push_str(&format!("  known difference {n}: {k}\n"));
    }
    for u in &unknown {
        summary.push_str(&format!("  NEW difference: {u}\n"));
    }
    eprint!("{summary}");
    if let Some(p) = std::env::var_os("QDL_FUZZ_REPORT") {
        std::fs::write(p, format!("{summary}\n{report}")).unwrap();
    }
    assert!(unknown.is_empty(), "{} differences not in KNOWN (QDL_FUZZ_REPORT=FILE shows them)", unknown.len());
    assert!(pct >= 98.0, "only {pct:.2} % identical");
}
