//! tc's command line over in-memory devices: tc/tc.c (global options, batch),
//! tc/tc_qdisc.c (`tc_qdisc_modify`, `tc_qdisc_list`) and tc/tc_class.c.

use crate::qdisc::{tc_h_maj, TC_H_ROOT};
use crate::sched;
use crate::sched::ingress::{INGRESS_HANDLE, TC_H_INGRESS};
use crate::tc::show::{self, QdiscFilter};
use crate::tc::{dev_word, duparg, invarg, matches, Args, Errno, Out, TcError, TcLib};
use crate::time::Instant;
use crate::tree::{self, DevSpec, Device, KernelVersion, NlFlags};

/// tc's global options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcOpts {
    /// `-s` (counted, as tc does).
    pub stats: u32,
    pub details: bool,
    pub json: bool,
    pub pretty: bool,
    pub raw: bool,
    pub iec: bool,
    pub oneline: bool,
    /// `-graph`: only `class show` draws differently, which is not implemented.
    pub graph: bool,
    /// `-brief`: `filter show` asks for a terse dump (TCA_DUMP_FLAGS_TERSE).
    pub brief: bool,
}

/// What one tc invocation printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

/// A set of in-memory devices and the kernel-global state tc talks to.
pub struct Tc {
    pub devices: Vec<Device>,
    /// The kernel's static auto-handle counter (`qdisc_alloc_handle`).
    autohandle: u32,
    /// Virtual time at which commands take effect.
    pub now: Instant,
    /// What the current command wrote to stderr without failing (usage texts, warnings).
    pub(crate) warn: String,
    /// What the current command printed to stdout before it failed (a dump the kernel
    /// cut short), which tc has already written.
    pub(crate) printed: String,
    /// What `qdisc show` filters on: tc keeps it in statics (`filter_ifindex`,
    /// `filter_parent`, `filter_handle`) that a later `qdisc show` of the same batch
    /// only overwrites with what it names itself.
    qdisc_show: QdiscShowState,
    /// The netns's tc actions (gact, police) by kind and index.
    pub(crate) actions: crate::classify::action::ActionTable,
    /// The netns's shared filter blocks by index (`ingress_block N`, `block N`).
    pub(crate) blocks: crate::classify::SharedBlocks,
    /// The kernel devices added later follow.
    kernel: KernelVersion,
    /// `net.core.default_qdisc` (kernel-global; each device keeps a copy).
    default_qdisc: &'static str,
    /// tc's library directory (netem's distribution tables); nothing is readable
    /// unless the caller lends a reader ([`TcLib::from_env`]).
    pub lib: TcLib,
}

/// tc's `qdisc show` filter statics (see [`Tc`]'s `qdisc_show`).
#[derive(Clone, Copy, Debug, Default)]
struct QdiscShowState {
    /// The device index.
    dev: Option<usize>,
    root: bool,
    parent: Option<u32>,
    handle: Option<u32>,
}

/// The `sysctl -w` keys this engine models (see [`Tc::sysctl_w`]).
pub const SYSCTLS: &[&str] = &[tree::DEFAULT_QDISC_SYSCTL];

/// procps' `slashdot`: a key whose first separator is already `new` is left alone;
/// otherwise every `old` becomes `new` and every `new` becomes `old`
/// (`net.core/x` → `net/core.x`).
fn slashdot(key: &str, old: char, new: char) -> String {
    match key.chars().find(|&c| c == '.' || c == '/') {
        Some(c) if c != new => key
            .chars()
            .map(|c| match c {
                c if c == old => new,
                c if c == new => old,
                c => c,
            })
            .collect(),
        _ => key.to_string(),
    }
}

const QDISC_USAGE: &str = "Usage: tc qdisc [ add | del | replace | change | show ] dev STRING
       [ handle QHANDLE ] [ root | ingress | clsact | parent CLASSID ]
       [ estimator INTERVAL TIME_CONSTANT ]
       [ stab [ help | STAB_OPTIONS] ]
       [ ingress_block BLOCK_INDEX ] [ egress_block BLOCK_INDEX ]
       [ [ QDISC_KIND ] [ help | OPTIONS ] ]

       tc qdisc { show | list } [ dev STRING ] [ QDISC_ID ] [ invisible ]
Where:
QDISC_KIND := { [p|b]fifo | tbf | prio | red | etc. }
OPTIONS := ... try tc qdisc add <desired QDISC_KIND> help
STAB_OPTIONS := ... try tc qdisc add stab help
QDISC_ID := { root | ingress | handle QHANDLE | parent CLASSID }
";

const CLASS_USAGE: &str = "Usage: tc class [ add | del | change | replace | show ] dev STRING
       [ classid CLASSID ] [ root | parent CLASSID ]
       [ [ QDISC_KIND ] [ help | OPTIONS ] ]

       tc class show [ dev STRING ] [ root | parent CLASSID ]
Where:
QDISC_KIND := { prio | etc. }
OPTIONS := ... try tc class add <desired QDISC_KIND> help
";

const TC_USAGE: &str = "Usage:\ttc [ OPTIONS ] OBJECT { COMMAND | help }
\ttc [-force] -batch filename
where  OBJECT := { qdisc | class | filter | chain |
\t\t    action | monitor | exec }
       OPTIONS := { -V[ersion] | -s[tatistics] | -d[etails] | -r[aw] |
\t\t    -o[neline] | -j[son] | -p[retty] | -c[olor]
\t\t    -b[atch] [filename] | -n[etns] name | -N[umeric] |
\t\t     -nm | -nam[es] | { -cf | -conf } path
\t\t     -br[ief] | -echo }
";

/// `get_qdisc_handle`: `maj[:]` in hex, or `none`.
pub fn get_qdisc_handle(s: &str) -> Option<u32> {
    if s == "none" {
        return Some(0);
    }
    let (maj, rest) = strtoul16(s)?;
    if maj >= 1 << 16 {
        return None;
    }
    // Like iproute2, only the character after the major is checked ("1:0" is 1:).
    if !(rest.is_empty() || rest.starts_with(':')) {
        return None;
    }
    Some((maj as u32) << 16)
}

/// `get_tc_classid`: `root`, `none`, `maj:min`, `maj:`, `:min`, or a bare hex number.
pub fn get_tc_classid(s: &str) -> Option<u32> {
    match s {
        "root" => return Some(TC_H_ROOT),
        "none" => return Some(0),
        _ => {}
    }
    let (maj, rest) = match strtoul16(s) {
        Some(x) => x,
        None if s.starts_with(':') => (0, s),
        None => return None,
    };
    if let Some(min_s) = rest.strip_prefix(':') {
        if maj >= 1 << 16 {
            return None;
        }
        let (min, r) = strtoul16(min_s).unwrap_or((0, min_s));
        if !r.is_empty() || min >= 1 << 16 {
            return None;
        }
        Some(((maj as u32) << 16) | min as u32)
    } else if rest.is_empty() {
        // `*h = maj`: an unsigned long stored in a __u32 keeps its low 32 bits.
        Some(maj as u32)
    } else {
        None
    }
}

/// `strtoul(s, &end, 16)`: the leading hex number (an optional 0x prefix) and the rest.
fn strtoul16(s: &str) -> Option<(u64, &str)> {
    let body = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .filter(|b| b.starts_with(|c: char| c.is_ascii_hexdigit()))
        .unwrap_or(s);
    let end = body.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(body.len());
    if end == 0 {
        return None;
    }
    let v = u64::from_str_radix(&body[..end], 16).unwrap_or(u64::MAX);
    Some((v, &body[end..]))
}

/// Split a batch line like iproute2's `makeargs`: whitespace separates words,
/// quotes group them, `#` starts a comment.
pub fn makeargs(line: &str) -> Vec<String> {
    split_args(line).0
}

/// [`makeargs`], refusing a line whose quote is never closed as iproute2's does
/// ("Unterminated quoted string").
pub fn makeargs_checked(line: &str) -> Result<Vec<String>, String> {
    match split_args(line) {
        (_, true) => Err("Unterminated quoted string".into()),
        (args, false) => Ok(args),
    }
}

/// The words of a line, and whether a quote was left open — iproute2's `makeargs`
/// after `getcmdline`: a `#` anywhere ends the line (quotes included); words are
/// separated by space, tab, CR or LF (not by a no-break space); a quote opens a word
/// only at its start, and its closing quote ends the word (`"ab"cd` is two words);
/// elsewhere a quote is an ordinary character.
fn split_args(line: &str) -> (Vec<String>, bool) {
    let line = line.split('#').next().unwrap_or("");
    let sep = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n');
    let mut out = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start_matches(sep);
        let Some(c) = rest.chars().next() else { break };
        if c == '"' || c == '\'' {
            let Some(end) = rest[1..].find(c) else { return (out, true) };
            out.push(rest[1..1 + end].to_string());
            rest = &rest[2 + end..];
        } else {
            let end = rest.find(sep).unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    (out, false)
}

/// tc's global options as `main` in tc/tc.c reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Global {
    pub opts: TcOpts,
    /// `-b`/`-batch FILE` (`-` = stdin).
    pub batch: Option<String>,
    /// `-force`: keep going after a failed batch line.
    pub force: bool,
    /// Index of the first word after the options (the OBJECT).
    pub rest: usize,
    /// `-V`: print the version and stop.
    pub version: bool,
}

/// Parse tc's leading `-options` as tc/tc.c's `main` does: each is tried against the
/// options in tc's order with `matches` (so `-` is `-stats`, `-c` is `-conf`, `-n` is
/// `-netns`, `-b` is `-batch`), and `--` is not special.
pub fn parse_global(argv: &[String]) -> Result<Global, TcError> {
    let mut g = Global::default();
    let mut i = 0;
    let (mut names, mut conf) = (false, None);
    while i < argv.len() && argv[i].starts_with('-') {
        let o = argv[i].as_str();
        if matches(o, "-stats") || matches(o, "-statistics") {
            g.opts.stats += 1;
        } else if matches(o, "-details") {
            g.opts.details = true;
        } else if matches(o, "-raw") {
            g.opts.raw = true;
        } else if matches(o, "-pretty") {
            g.opts.pretty = true;
        } else if matches(o, "-graph") {
            g.opts.graph = true;
        } else if matches(o, "-Version") {
            g.version = true;
        } else if matches(o, "-iec") {
            g.opts.iec = true;
        } else if matches(o, "-help") {
            // usage() then exit(0).
            return Err(TcError { msg: TC_USAGE.into(), code: 0 });
        } else if matches(o, "-force") {
            g.force = true;
        } else if matches(o, "-batch") {
            i += 1;
            let f = argv.get(i).ok_or_else(|| TcError::usage("Error: argument \"batch file\" is required\n"))?;
            g.batch = Some(f.clone());
        } else if matches(o, "-netns") {
            // There are no other network namespaces here (glibc prints a missing name
            // as "(null)").
            let name = argv.get(i + 1).map_or("(null)", |s| s.as_str());
            return Err(TcError::usage(format!(
                "Cannot open network namespace \"{name}\": No such file or directory\n"
            )));
        } else if matches(o, "-cf") || matches(o, "-conf") {
            // The class-names file: only read with -nm (checked below).
            i += 1;
            conf = argv.get(i).map(String::as_str);
        } else if matches(o, "-names") || matches(o, "-nm") {
            names = true;
        } else if matches(o, "-Numeric")
            || matches(o, "-color")
            || ["-color=always", "-color=never", "-color=auto"].contains(&o)
            || o == "-echo"
            || matches(o, "-timestamp")
            || matches(o, "-tshort")
        {
            // These only change names, colours, monitor output or netlink echoes.
        } else if matches(o, "-brief") {
            g.opts.brief = true;
        } else if matches(o, "-json") {
            g.opts.json = true;
        } else if matches(o, "-oneline") {
            g.opts.oneline = true;
        } else {
            return Err(TcError::usage(format!("Option \"{o}\" is unknown, try \"tc -help\".\n")));
        }
        i += 1;
    }
    if let (true, Some(f)) = (names, conf) {
        if std::fs::File::open(f).is_err() {
            return Err(TcError::usage(format!("Can't open class names file: {f}\n")));
        }
    }
    g.rest = i.min(argv.len());
    Ok(g)
}

impl Tc {
    /// Devices following the default kernel (6.12).
    pub fn new(specs: &[DevSpec]) -> Self {
        Self::with_kernel(specs, KernelVersion::default())
    }

    /// Devices following kernel `k` where versions differ, with the kernel's built-in
    /// default qdisc ([`tree::DEFAULT_QDISC`], pfifo_fast).
    pub fn with_kernel(specs: &[DevSpec], k: KernelVersion) -> Self {
        Self::boot(specs, k, tree::DEFAULT_QDISC)
    }

    /// Devices as on a host that booted with `net.core.default_qdisc=KIND` (a
    /// sysctl.d setting, or the kernel's CONFIG_DEFAULT_NET_SCH): each comes up with
    /// KIND as its root qdisc (handle 0, default parameters), a multiqueue device with
    /// mq and KIND on every tx queue, an IFF_NO_QUEUE one (veth) with noqueue — and with
    /// noqueue too when KIND cannot be made there (see [`tree::check_default_qdisc`]).
    /// The error is sysctl's for a kind the kernel refuses.
    pub fn with_default_qdisc(specs: &[DevSpec], k: KernelVersion, kind: &str) -> Result<Tc, String> {
        Ok(Self::boot(specs, k, tree::default_qdisc_ops(kind, k)?))
    }

    fn boot(specs: &[DevSpec], k: KernelVersion, default_qdisc: &'static str) -> Self {
        let mut tc = Tc {
            devices: Vec::with_capacity(specs.len()),
            autohandle: 0x8000_0000,
            now: Instant::ZERO,
            warn: String::new(),
            printed: String::new(),
            qdisc_show: QdiscShowState::default(),
            actions: Default::default(),
            blocks: Default::default(),
            kernel: k,
            default_qdisc,
            lib: TcLib::default(),
        };
        for s in specs {
            tc.bring_up(s);
        }
        tc
    }

    /// `ip link add` + `ip link set up`: the device gets its default qdiscs now.
    fn bring_up(&mut self, spec: &DevSpec) {
        let d = Device::with_default_qdisc(spec, self.default_qdisc, self.kernel, self.now);
        self.devices.push(d);
    }

    /// `ip link add NAME … ; ip link set NAME up` at [`Tc::now`]: a device created
    /// after boot, with the default qdiscs of the current `net.core.default_qdisc`.
    pub fn add_device(&mut self, spec: &DevSpec) -> Result<(), String> {
        if self.device(&spec.name).is_some() {
            return Err("RTNETLINK answers: File exists".into());
        }
        self.bring_up(spec);
        Ok(())
    }

    /// `sysctl -w net.core.default_qdisc=KIND` (`set_default_qdisc` in
    /// net/core/sysctl_net_core.c → `qdisc_set_default` in net/sched/sch_api.c): later
    /// default attachments use KIND — a device whose root is deleted, an mq's tx queues
    /// (`tc qdisc add … mq`), devices added later — while existing qdiscs stay as they
    /// are. The setting is kernel-global, so it holds for every device. The error is
    /// what sysctl prints for a kind the kernel refuses (unknown or not implemented
    /// here); classful and mq-like kinds are accepted, see [`tree::check_default_qdisc`].
    pub fn set_default_qdisc(&mut self, kind: &str) -> Result<(), String> {
        let kind = tree::default_qdisc_ops(kind, self.kernel)?;
        self.default_qdisc = kind;
        for d in &mut self.devices {
            d.default_qdisc = kind;
        }
        Ok(())
    }

    /// What /proc/sys/net/core/default_qdisc reads (`qdisc_get_default`).
    pub fn default_qdisc(&self) -> &'static str {
        self.default_qdisc
    }

    /// `sysctl -w KEY=VALUE` (procps-ng 4) on the keys this engine models
    /// ([`SYSCTLS`]): `Ok` with what sysctl prints (`KEY = VALUE\n`), or `Err` with
    /// its message (no newline; sysctl exits with status 1). A key the engine does not
    /// model is refused as one the kernel lacks (`sysctl: cannot stat
    /// /proc/sys/net/core/foo: No such file or directory`).
    pub fn sysctl_w(&mut self, setting: &str) -> Result<String, String> {
        // parse_setting_line: KEY=VALUE, blanks around both stripped.
        let Some((key, value)) = setting.split_once('=') else {
            return Err("sysctl: command line(0): invalid syntax, continuing...".into());
        };
        let (key, value) = (key.trim(), value.trim());
        let path = slashdot(key, '.', '/');
        if !SYSCTLS.iter().any(|k| slashdot(k, '.', '/') == path) {
            return Err(format!("sysctl: cannot stat /proc/sys/{path}: No such file or directory"));
        }
        self.set_default_qdisc(value)?;
        Ok(format!("{} = {value}\n", slashdot(&path, '/', '.')))
    }

    /// `ip link set dev NAME txqueuelen N`: later default qdiscs and default limits
    /// follow it; existing qdiscs keep what they computed at init, as in the kernel.
    pub fn set_txqueuelen(&mut self, name: &str, n: u32) -> bool {
        match self.device_mut(name) {
            Some(d) => {
                d.info.tx_queue_len = n;
                true
            }
            None => false,
        }
    }

    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.info.name == name)
    }
    pub fn device_mut(&mut self, name: &str) -> Option<&mut Device> {
        self.devices.iter_mut().find(|d| d.info.name == name)
    }
    /// The kernel whose behaviour new devices and the netns's actions follow.
    pub(crate) fn kernel(&self) -> KernelVersion {
        self.kernel
    }
    /// The netns's device names by ifindex from 1: `lo` (which every netns has, and
    /// makes first, whether or not it is one of the devices here), then the other
    /// devices in the order they were given.
    pub fn link_names(&self) -> Vec<String> {
        let others = self.devices.iter().filter(|d| d.info.name != "lo").map(|d| d.info.name.clone());
        std::iter::once("lo".to_string()).chain(others).collect()
    }
    /// The device with `ifindex` (as [`Tc::link_names`] numbers them), if it is one
    /// of the devices (`lo` is not).
    pub fn device_by_ifindex(&self, ifindex: u32) -> Option<usize> {
        let names = self.link_names();
        let name = names.get((ifindex as usize).checked_sub(1)?)?;
        self.devices.iter().position(|d| &d.info.name == name)
    }
    /// Some filter holds a mirred action (packets may leave for another device).
    pub fn has_mirred(&mut self) -> bool {
        self.actions.holds(crate::classify::action::Kind::Mirred)
    }
    /// Some skbedit action sets `queue_mapping`.
    pub fn sets_queue_mapping(&mut self) -> bool {
        self.actions.sets_queue_mapping()
    }
    /// What mirred actions forwarded since the last call, in order (see
    /// [`crate::classify::action::Outbox`]).
    pub fn take_mirrored(&mut self) -> Vec<crate::classify::action::Mirrored> {
        self.actions.take_mirrored()
    }
    /// `sch_handle_ingress` on device `dev` ([`Device::ingress`]), with the netns's
    /// shared blocks its ingress hook may be bound to; the packet's `skb_iif` is the
    /// device's ifindex.
    pub fn ingress(&mut self, dev: usize, pkt: crate::packet::Packet, now: Instant) -> tree::Ingress {
        let ifindex = self.ifindex(dev);
        self.devices[dev].ingress(pkt, now, &self.blocks, ifindex)
    }
    /// The ifindex of device `dev`, as [`Tc::link_names`] numbers them.
    pub fn ifindex(&self, dev: usize) -> u32 {
        if self.devices[dev].info.name == "lo" {
            return 1;
        }
        2 + self.devices[..dev].iter().filter(|d| d.info.name != "lo").count() as u32
    }
    /// `sch_handle_egress` on device `dev` ([`Device::egress`]): clsact's egress hook,
    /// with the netns's shared blocks it may be bound to.
    pub fn egress(&mut self, dev: usize, pkt: crate::packet::Packet, now: Instant) -> tree::Ingress {
        self.devices[dev].egress(pkt, now, &self.blocks)
    }
    /// The shared blocks some qdisc hook binds (what keeps each alive), across the
    /// netns's devices; tc's `tc_qdisc_block_exists` asks the same of a qdisc dump.
    pub(crate) fn bound_blocks(&self) -> std::collections::BTreeSet<u32> {
        let hooks = self.devices.iter().filter_map(|d| d.ingress.as_ref()?.q.as_classful().map(|c| c.block_indexes()));
        hooks.flatten().filter(|&b| b != 0).collect()
    }
    pub(crate) fn dev_index(&self, name: &str) -> Result<usize, TcError> {
        self.devices
            .iter()
            .position(|d| d.info.name == name)
            .ok_or_else(|| TcError::tc(format!("Cannot find device \"{name}\"\n")))
    }

    /// One `tc ARGS…` invocation (argv after the program name). `-batch` needs a
    /// file, which the engine does not read: callers use [`parse_global`] and [`Tc::batch`].
    pub fn run(&mut self, argv: &[String]) -> Output {
        match parse_global(argv) {
            Ok(g) if g.batch.is_some() => {
                err_out(TcError::tc("qdisc-lab: -batch is handled by the command-line program\n"))
            }
            Ok(g) => self.exec(&argv[g.rest..], g.opts),
            Err(e) => err_out(e),
        }
    }

    /// Run one command (no global options) with the given options.
    pub fn exec(&mut self, argv: &[String], o: TcOpts) -> Output {
        // A command of its own is a tc process of its own: no earlier show's filters.
        self.qdisc_show = QdiscShowState::default();
        let r = self.do_cmd(argv, o);
        let mut stderr = std::mem::take(&mut self.warn);
        match r {
            Ok(stdout) => Output { stdout, stderr, code: 0 },
            Err(e) => {
                stderr.push_str(&e.msg);
                Output { stdout: std::mem::take(&mut self.printed), stderr, code: e.code }
            }
        }
    }

    /// `tc -batch`: every line a command; a failing line prints "Command failed
    /// FILE:LINE" and stops the batch unless `force` — but an error tc reports by
    /// exiting (`invarg`, `duparg`, an incomplete command) ends the batch with status
    /// 255, `-force` or not. Lines are read as `getcmdline` reads them: cut at a NUL
    /// byte and at `#`, and a line ending in a backslash continues on the next ("Missing
    /// continuation line" at the end of the file ends the batch). An unterminated quote
    /// ends it too, with status 1. A line may start with its own `-s/-d/-j/-p`
    /// (qdisc-lab extension), which apply to that line only.
    pub fn batch(&mut self, text: &str, name: &str, o: TcOpts, force: bool) -> Output {
        // One physical line as C string functions see it.
        fn cut(l: &str) -> &str {
            let l = l.split('\0').next().unwrap_or("");
            l.split('#').next().unwrap_or("")
        }
        let mut res = Output::default();
        let mut lines = text.split_inclusive('\n');
        let mut n = 0;
        while let Some(first) = lines.next() {
            n += 1;
            let mut line = cut(first).to_string();
            while line.ends_with("\\\n") {
                line.truncate(line.len() - 2);
                let Some(next) = lines.next() else {
                    res.stderr.push_str("Missing continuation line\n");
                    return res;
                };
                n += 1;
                line.push_str(cut(next));
            }
            let (mut args, open) = split_args(&line);
            if open {
                res.stderr.push_str("Unterminated quoted string\n");
                res.code = 1;
                return res;
            }
            if args.is_empty() {
                continue;
            }
            let mut lo = o;
            let mut skip = 0;
            for a in &args {
                match a.as_str() {
                    "-s" | "-stats" | "-statistics" => lo.stats += 1,
                    "-d" | "-details" => lo.details = true,
                    "-j" | "-json" => lo.json = true,
                    "-p" | "-pretty" => lo.pretty = true,
                    "-iec" => lo.iec = true,
                    "-r" | "-raw" => lo.raw = true,
                    _ => break,
                }
                skip += 1;
            }
            args.drain(..skip);
            let r = self.do_cmd(&args, lo);
            res.stderr.push_str(&std::mem::take(&mut self.warn));
            match r {
                Ok(out) => res.stdout.push_str(&out),
                Err(e) => {
                    res.stdout.push_str(&std::mem::take(&mut self.printed));
                    res.stderr.push_str(&e.msg);
                    if e.exits() {
                        res.code = 255;
                        return res;
                    }
                    res.stderr.push_str(&format!("Command failed {}:{}\n", name, n));
                    res.code = 1;
                    if !force {
                        break;
                    }
                }
            }
        }
        res
    }

    fn do_cmd(&mut self, argv: &[String], o: TcOpts) -> Result<String, TcError> {
        let Some(obj) = argv.first() else {
            self.warn.push_str(TC_USAGE);
            return Ok(String::new());
        };
        let rest = &argv[1..];
        // Whatever the command reads or changes, the rate estimators have ticked up
        // to now (crate::estimator).
        let now = self.now;
        for d in &mut self.devices {
            d.estimators(now);
        }
        if matches(obj, "qdisc") {
            self.do_qdisc(rest, o)
        } else if matches(obj, "class") {
            self.do_class(rest, o)
        } else if matches(obj, "filter") {
            super::filter::do_filter(self, rest, o)
        } else if matches(obj, "actions") {
            super::actions::do_action(self, rest, o)
        } else if matches(obj, "chain") {
            super::filter::do_chain(self, rest, o)
        } else if matches(obj, "help") {
            self.warn.push_str(TC_USAGE);
            Ok(String::new())
        } else {
            Err(TcError::usage(format!("Object \"{obj}\" is unknown, try \"tc help\".\n")))
        }
    }

    // ---- tc qdisc --------------------------------------------------------------

    fn do_qdisc(&mut self, argv: &[String], o: TcOpts) -> Result<String, TcError> {
        let Some(cmd) = argv.first() else { return self.qdisc_list(&[], o) };
        let rest = &argv[1..];
        let flags = if matches(cmd, "add") {
            NlFlags::ADD
        } else if matches(cmd, "change") {
            NlFlags::CHANGE
        } else if matches(cmd, "replace") {
            NlFlags::REPLACE
        } else if matches(cmd, "link") {
            NlFlags::LINK
        } else if matches(cmd, "delete") {
            return self.qdisc_modify(None, rest, o.raw).map(|_| String::new());
        } else if matches(cmd, "list") || matches(cmd, "show") || matches(cmd, "lst") {
            return self.qdisc_list(rest, o);
        } else if matches(cmd, "help") {
            self.warn.push_str(QDISC_USAGE);
            return Ok(String::new());
        } else {
            return Err(TcError::usage(format!("Command \"{cmd}\" is unknown, try \"tc qdisc help\".\n")));
        };
        self.qdisc_modify(Some(flags), rest, o.raw).map(|_| String::new())
    }

    /// `tc_qdisc_modify`: parse, then hand the request to the device (the kernel).
    /// `flags` None = delete; `raw`: `tc -r`.
    fn qdisc_modify(&mut self, flags: Option<NlFlags>, argv: &[String], raw: bool) -> Result<(), TcError> {
        let mut a = Args::new(argv);
        let mut est = None;
        let mut dev: Option<&str> = None;
        let mut handle = 0u32;
        let mut parent = 0u32;
        let mut kind: Option<&str> = None;
        let mut stab = None;
        // TCA_INGRESS_BLOCK, TCA_EGRESS_BLOCK (0: not sent).
        let mut blocks = [0u32; 2];
        while let Some(w) = a.next() {
            match w {
                "dev" => {
                    let v = a.value()?;
                    if dev.is_some() {
                        return Err(duparg("dev", v));
                    }
                    dev = dev_word(v);
                }
                "handle" => {
                    if handle != 0 {
                        return Err(duparg("handle", w));
                    }
                    let v = a.value()?;
                    handle = get_qdisc_handle(v).ok_or_else(|| invarg("invalid qdisc ID", v))?;
                }
                "root" => {
                    if parent != 0 {
                        return Err(TcError::usage("Error: \"root\" is duplicate parent ID\n"));
                    }
                    parent = TC_H_ROOT;
                }
                "parent" => {
                    let v = a.value()?;
                    if parent != 0 {
                        return Err(duparg("parent", v));
                    }
                    parent = get_tc_classid(v).ok_or_else(|| invarg("invalid parent ID", v))?;
                }
                "ingress" => {
                    if parent != 0 {
                        return Err(TcError::usage("Error: \"ingress\" is a duplicate parent ID\n"));
                    }
                    parent = TC_H_INGRESS;
                    handle = INGRESS_HANDLE;
                    kind = Some("ingress");
                    break;
                }
                "clsact" => {
                    if parent != 0 {
                        return Err(TcError::usage("Error: \"clsact\" is a duplicate parent ID\n"));
                    }
                    parent = TC_H_INGRESS;
                    handle = INGRESS_HANDLE;
                    kind = Some("clsact");
                    break;
                }
                w if matches(w, "estimator") => {
                    let r = crate::estimator::parse(&mut a, &mut est, raw);
                    self.warn.push_str(&std::mem::take(&mut a.notes));
                    r?;
                }
                // Each `stab` starts a fresh spec: the last one given counts.
                w if matches(w, "stab") => match crate::stab::parse(&mut a) {
                    Ok(Some(s)) => stab = Some(s),
                    Ok(None) => {
                        self.warn.push_str(&std::mem::take(&mut a.notes));
                        return Err(TcError::usage(""));
                    }
                    Err(e) => return Err(e),
                },
                w if matches(w, "ingress_block") || matches(w, "egress_block") => {
                    let v = a.value()?;
                    let hook = if w.starts_with('i') { "ingress" } else { "egress" };
                    let b = crate::tc::units::get_u32(v).filter(|&b| b != 0);
                    let b = b.ok_or_else(|| invarg(&format!("invalid {hook} block index value"), v))?;
                    blocks[usize::from(hook == "egress")] = b;
                }
                // tc prints its usage and carries on with the request.
                w if matches(w, "help") => self.warn.push_str(QDISC_USAGE),
                w => {
                    kind = Some(w);
                    break;
                }
            }
        }
        if let Some(d) = dev {
            match self.device(d) {
                Some(x) => a.set_dev(d, x.info.speed),
                None => a.set_missing_dev(d),
            }
        }
        a.set_lib(self.lib.clone());
        let opts = match kind {
            Some(k) => sched::parse_in(k, self.kernel, &mut a),
            None => Ok(None),
        };
        // What tc printed while parsing comes first, error or not.
        self.warn.push_str(&a.notes);
        let opts = opts?;
        // tc_calc_size_table, after the kind's options.
        let stab = stab.map(|s| crate::stab::build(s, &mut self.warn));
        let name = dev.ok_or_else(|| TcError::errno(Errno::ENODEV))?;
        let di = self.dev_index(name)?;
        let now = self.now;
        let mut auto = self.autohandle;
        let r = match flags {
            Some(f) => self.devices[di].modify(
                f,
                parent,
                handle,
                kind,
                opts.as_ref(),
                stab.as_ref(),
                est,
                blocks,
                &mut auto,
                now,
            ),
            None => self.devices[di].delete(parent, handle, kind, now),
        };
        self.autohandle = auto;
        self.blocks.settle(&self.bound_blocks());
        let warning = self.devices[di].warning.take();
        if let (Ok(()), Some(w)) = (&r, warning) {
            self.warn.push_str(&format!("Warning: {w}.\n"));
        }
        r
    }

    /// `tc_qdisc_list` + `print_qdisc` over the dump.
    fn qdisc_list(&mut self, argv: &[String], o: TcOpts) -> Result<String, TcError> {
        let mut a = Args::new(argv);
        let mut dev: Option<&str> = None;
        let mut f = QdiscFilter::default();
        // tc parses into its statics (see `qdisc_show`), so what an earlier show of the
        // batch set counts too. One QDISC_ID: a second (handle, root, parent, ingress,
        // clsact) is refused by what the first set; `handle 0:`/`parent 0:` set nothing.
        let mut st = self.qdisc_show;
        let mut help = false;
        let parsed = (|| {
            let taken = |st: &QdiscShowState, w: &str| {
                if st.handle.is_some() {
                    Err(invarg("handle is already specified", w))
                } else if st.parent.is_some() || st.root {
                    Err(invarg("parent is already specified", w))
                } else {
                    Ok(())
                }
            };
            while let Some(w) = a.next() {
                match w {
                    "dev" => dev = dev_word(a.value()?),
                    "root" => {
                        taken(&st, w)?;
                        st.root = true;
                    }
                    "parent" => {
                        taken(&st, w)?;
                        let v = a.value()?;
                        let p = get_tc_classid(v).ok_or_else(|| invarg("invalid parent ID", v))?;
                        st.parent = (p != 0).then_some(p);
                    }
                    "handle" => {
                        taken(&st, w)?;
                        let v = a.value()?;
                        let h = get_qdisc_handle(v).ok_or_else(|| invarg("invalid handle ID", v))?;
                        st.handle = (h != 0).then_some(h);
                    }
                    "invisible" => f.invisible = true,
                    "ingress" | "clsact" => {
                        taken(&st, w)?;
                        st.parent = Some(TC_H_INGRESS);
                    }
                    // Usage, and the listing still follows (status 0).
                    w if matches(w, "help") => help = true,
                    w => return Err(TcError::usage(format!("What is \"{w}\"? Try \"tc qdisc help\".\n"))),
                }
            }
            Ok(())
        })();
        self.qdisc_show = st;
        if help {
            self.warn.push_str(QDISC_USAGE);
        }
        parsed?;
        if let Some(name) = dev {
            let di = self.dev_index(name)?;
            self.qdisc_show.dev = Some(di);
        }
        let st = &self.qdisc_show;
        (f.root, f.parent, f.handle) = (st.root, st.parent, st.handle);
        let idx: Vec<usize> = match st.dev {
            Some(di) => vec![di],
            None => (0..self.devices.len()).collect(),
        };
        f.dev_given = st.dev.is_some();
        let mut out = self.out(o);
        out.start_top();
        for i in idx {
            let d = &mut self.devices[i];
            d.root.sync_stats();
            let d = &self.devices[i];
            for p in d.dump_order(f.invisible) {
                let n = d.node(&p);
                if f.root && n.parent != TC_H_ROOT {
                    continue;
                }
                if f.parent.is_some_and(|pp| pp != n.parent) {
                    continue;
                }
                if f.handle.is_some_and(|h| h != n.handle) {
                    continue;
                }
                show::qdisc(&mut out, d, n, &f, o.stats > 0);
            }
        }
        out.end_top();
        Ok(out.into_string())
    }

    fn out(&self, o: TcOpts) -> Out {
        let out = if o.json { Out::json(o.pretty) } else { Out::text() };
        out.with_flags(o.details, o.raw, o.iec, o.oneline).with_stats(o.stats > 0)
    }

    // ---- tc class --------------------------------------------------------------

    fn do_class(&mut self, argv: &[String], o: TcOpts) -> Result<String, TcError> {
        let Some(cmd) = argv.first() else { return self.class_list(&[], o) };
        let rest = &argv[1..];
        if matches(cmd, "add") || matches(cmd, "change") || matches(cmd, "replace") || matches(cmd, "delete") {
            self.class_modify(cmd, rest, o.raw).map(|_| String::new())
        } else if matches(cmd, "list") || matches(cmd, "show") || matches(cmd, "lst") {
            self.class_list(rest, o)
        } else if matches(cmd, "help") {
            self.warn.push_str(CLASS_USAGE);
            Ok(String::new())
        } else {
            Err(TcError::usage(format!("Command \"{cmd}\" is unknown, try \"tc class help\".\n")))
        }
    }

    /// `tc_class_modify` (tc side) and `tc_ctl_tclass` (kernel side).
    fn class_modify(&mut self, cmd: &str, argv: &[String], raw: bool) -> Result<(), TcError> {
        let mut a = Args::new(argv);
        let mut est = None;
        let mut dev: Option<&str> = None;
        let mut clid = 0u32;
        let mut portid = 0u32;
        let mut opts = None;
        while let Some(w) = a.next() {
            match w {
                "dev" => {
                    let v = a.value()?;
                    if dev.is_some() {
                        return Err(duparg("dev", v));
                    }
                    dev = dev_word(v);
                }
                "classid" => {
                    let v = a.value()?;
                    if clid != 0 {
                        return Err(duparg("classid", v));
                    }
                    clid = get_tc_classid(v).ok_or_else(|| invarg("invalid class ID", v))?;
                }
                "handle" => return Err(TcError::usage("Error: try \"classid\" instead of \"handle\"\n")),
                "root" => {
                    if portid != 0 {
                        return Err(TcError::usage("Error: \"root\" is duplicate parent ID.\n"));
                    }
                    portid = TC_H_ROOT;
                }
                "parent" => {
                    let v = a.value()?;
                    if portid != 0 {
                        return Err(duparg("parent", v));
                    }
                    portid = get_tc_classid(v).ok_or_else(|| invarg("invalid parent ID", v))?;
                }
                w if matches(w, "estimator") => {
                    let r = crate::estimator::parse(&mut a, &mut est, raw);
                    self.warn.push_str(&std::mem::take(&mut a.notes));
                    r?;
                }
                w if matches(w, "help") => self.warn.push_str(CLASS_USAGE),
                k => {
                    if let Some(d) = dev {
                        match self.device(d) {
                            Some(x) => a.set_dev(d, x.info.speed),
                            None => a.set_missing_dev(d),
                        }
                    }
                    a.set_lib(self.lib.clone());
                    let o = sched::parse_class(k, &mut a);
                    self.warn.push_str(&a.notes);
                    opts = Some(o?);
                    break;
                }
            }
        }
        let name = dev.ok_or_else(|| TcError::errno(Errno::ENODEV))?;
        let di = self.dev_index(name)?;
        let d = &self.devices[di];
        // Step 1: the qdisc handle from the class id and/or the parent.
        let mut qid = tc_h_maj(clid);
        if portid != TC_H_ROOT {
            let qid1 = tc_h_maj(portid);
            if qid != 0 && qid1 != 0 {
                if qid != qid1 {
                    return Err(TcError::errno(Errno::EINVAL));
                }
            } else if qid1 != 0 {
                qid = qid1;
            } else if qid == 0 {
                qid = d.root.handle;
            }
            if portid != 0 {
                portid = tc_h_maj(qid) | (portid & 0xFFFF);
            }
        } else if qid == 0 {
            qid = d.root.handle;
        }
        let q = d.lookup(qid).ok_or_else(|| TcError::errno(Errno::ENOENT))?;
        let c = d.node(&q).q.as_classful().ok_or_else(|| TcError::errno(Errno::EINVAL))?;
        let clid = if clid == 0 {
            if portid == TC_H_ROOT {
                qid
            } else {
                0
            }
        } else {
            tc_h_maj(qid) | (clid & 0xFFFF)
        };
        let found = clid != 0 && c.find(clid & 0xFFFF);
        let (create, excl) = (matches(cmd, "add") || matches(cmd, "replace"), matches(cmd, "add"));
        let now = self.now;
        if matches(cmd, "delete") {
            if !found {
                return Err(TcError::errno(Errno::ENOENT));
            }
            return self.devices[di].delete_class(&q, clid & 0xFFFF, now);
        }
        if !found && !create {
            return Err(TcError::errno(Errno::ENOENT));
        }
        if found && excl {
            return Err(TcError::errno(Errno::EEXIST));
        }
        // tc_ctl_tclass (since 6.14, and in 6.12's stable line): no class may take
        // the classid TC_H_ROOT, whatever the kind.
        if clid == TC_H_ROOT {
            return Err(TcError::with_errno("Cannot create traffic class with classid TC_H_ROOT", Errno::EINVAL));
        }
        let warning = self.devices[di].change_class(&q, clid, portid, found, opts.as_ref(), est, now)?;
        if let Some(w) = warning {
            let dot = if w.ends_with('.') { "" } else { "." };
            self.warn.push_str(&format!("Warning: {w}{dot}\n"));
        }
        Ok(())
    }

    fn class_list(&mut self, argv: &[String], o: TcOpts) -> Result<String, TcError> {
        let mut a = Args::new(argv);
        let mut dev: Option<&str> = None;
        let mut parent: Option<u32> = None;
        let mut classid: Option<u32> = None;
        while let Some(w) = a.next() {
            match w {
                "dev" => {
                    let v = a.value()?;
                    if dev.is_some() {
                        return Err(duparg("dev", v));
                    }
                    dev = dev_word(v);
                }
                "root" => {
                    if parent.is_some() {
                        return Err(TcError::usage("Error: \"root\" is duplicate parent ID\n"));
                    }
                    parent = Some(TC_H_ROOT);
                }
                "parent" => {
                    // tc names the keyword, not the value, as "the second value".
                    if parent.is_some() {
                        return Err(duparg("parent", w));
                    }
                    let v = a.value()?;
                    parent = Some(get_tc_classid(v).ok_or_else(|| invarg("invalid parent ID", v))?);
                }
                "classid" => {
                    let v = a.value()?;
                    if classid.is_some() {
                        return Err(duparg("classid", v));
                    }
                    let id = get_tc_classid(v).ok_or_else(|| invarg("invalid class ID", v))?;
                    classid = (id != 0).then_some(id);
                }
                // Usage, and the listing still follows (status 0).
                w if matches(w, "help") => self.warn.push_str(CLASS_USAGE),
                w => return Err(TcError::usage(format!("What is \"{w}\"? Try \"tc class help\".\n"))),
            }
        }
        // No device: the kernel's class dump finds no ifindex 0 and sends nothing.
        let Some(name) = dev else {
            let mut out = self.out(o);
            out.start_top();
            out.end_top();
            return Ok(out.into_string());
        };
        let di = self.dev_index(name)?;
        // The graph of no classes is nothing; of some, not drawn here.
        let classless =
            self.devices[di].walk().iter().all(|(_, n)| n.q.as_classful().is_none_or(|c| c.class_minors().is_empty()));
        if o.graph && !classless {
            return Err(TcError::tc("qdisc-lab: \"tc -graph class show\" is not supported\n"));
        }
        self.devices[di].root.sync_stats();
        let d = &self.devices[di];
        let mut out = self.out(o);
        out.start_top();
        for p in d.dump_order(false) {
            let n = d.node(&p);
            let Some(c) = n.q.as_classful() else { continue };
            // tc_dump_tclass_qdisc: only the qdisc whose handle is the parent's major
            // (`root` = ffff: matches none but a qdisc ffff:).
            if parent.is_some_and(|pp| tc_h_maj(pp) != n.handle) {
                continue;
            }
            // The dump stops at the first class whose dump fails (netlink's next
            // round resumes at it and fails again).
            if c.class_dump_fails() {
                break;
            }
            for m in c.class_minors() {
                let id = tc_h_maj(n.handle) | m;
                if classid.is_some_and(|c| c != id) {
                    continue;
                }
                show::class(&mut out, d, n, m, true, o.stats > 0);
            }
        }
        out.end_top();
        Ok(out.into_string())
    }
}

fn err_out(e: TcError) -> Output {
    Output { stdout: String::new(), stderr: e.msg, code: e.code }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_parse_like_tc() {
        assert_eq!(get_qdisc_handle("1:"), Some(0x10000));
        assert_eq!(get_qdisc_handle("ffff:"), Some(0xFFFF_0000));
        assert_eq!(get_qdisc_handle("1"), Some(0x10000));
        assert_eq!(get_qdisc_handle("1:0"), Some(0x10000));
        assert_eq!(get_qdisc_handle("1x"), None);
        assert_eq!(get_qdisc_handle("x"), None);
        assert_eq!(get_tc_classid("1:10"), Some(0x10010));
        assert_eq!(get_tc_classid(":1"), Some(1));
        assert_eq!(get_tc_classid("1:"), Some(0x10000));
        assert_eq!(get_tc_classid("root"), Some(TC_H_ROOT));
        assert_eq!(get_tc_classid("10000:"), None);
        assert_eq!(get_tc_classid("1:g"), None);
    }

    #[test]
    fn makeargs_splits_quotes_and_comments() {
        assert_eq!(makeargs("qdisc add dev eth0 # c"), vec!["qdisc", "add", "dev", "eth0"]);
        assert_eq!(makeargs("a \"b c\" d"), vec!["a", "b c", "d"]);
    }
}
