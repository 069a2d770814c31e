//! A device and its qdisc tree — the parts of net/sched/sch_api.c and
//! sch_generic.c that decide where qdiscs live (§1.7 of docs/kernel-notes.md):
//! default attachment, handle allocation, `tc_modify_qdisc`'s create/change/graft
//! decision table, deletion, refcounts, and the order dumps list qdiscs in.
//!
//! Default attachment follows `net.core.default_qdisc` ([`check_default_qdisc`],
//! `Tc::set_default_qdisc`): the kind a device comes up with, gets back when its root
//! is deleted, and an mq puts on its tx queues.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::classify::SharedBlocks;
use crate::estimator::{EstSpec, Estimator, QdiscEst};
use crate::packet::Packet;
use crate::qdisc::{tc_h_maj, tc_h_min, Dequeued, DevInfo, Enqueued, Node, TC_H_ROOT, TC_H_UNSPEC};
use crate::sched::ingress::{INGRESS_HANDLE, TC_H_INGRESS, TC_H_MIN_EGRESS, TC_H_MIN_INGRESS};
use crate::sched::{self, noqueue, Opts};
use crate::stab::{SizeTable, StabRequest};
use crate::stats::Reduce;
use crate::tc::{Errno, TcError};
use crate::time::Instant;

/// What kind of device: its default root qdisc depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevKind {
    /// A NIC: pfifo_fast root (one tx queue) or mq with pfifo_fast per queue.
    Eth,
    /// veth: IFF_NO_QUEUE, so the default root is noqueue.
    Veth,
    /// ifb (drivers/net/ifb.c): a queue of its own (pfifo_fast root, like a NIC)
    /// whose transmit hands packets back to the device mirred took them from;
    /// `ifb_setup` gives it txqueuelen 32 (TX_Q_LIMIT) and no link speed.
    Ifb,
}

impl DevKind {
    /// `dev->max_mtu`: `veth_setup` sets ETH_MAX_MTU; `ifb_setup` clears it to 0,
    /// and the captures realise an `eth` device as an ifb, so it follows ifb.
    pub fn max_mtu(self) -> u32 {
        match self {
            DevKind::Veth => 65535,
            DevKind::Eth | DevKind::Ifb => 0,
        }
    }
}

/// `NAME[,kind=veth|eth|ifb][,txqueues=N][,realtxqueues=N][,mtu=N][,txqueuelen=N]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevSpec {
    pub name: String,
    pub kind: DevKind,
    pub txqueues: u32,
    /// `real_num_tx_queues` when fewer tx queues are in use than allocated: a veth
    /// made by `ip link add … type veth` allocates num_possible_cpus() and uses one.
    /// None = all of them.
    pub realtxqueues: Option<u32>,
    pub mtu: u32,
    pub txqueuelen: u32,
    /// Link speed in Mbit/s as sysfs reports it (what `rate N%` is a share of);
    /// None = unknown, like an ifb. A veth reports 10000.
    pub speed: Option<u32>,
}

impl DevSpec {
    pub fn new(name: &str) -> Self {
        DevSpec {
            name: name.into(),
            kind: DevKind::Eth,
            txqueues: 1,
            realtxqueues: None,
            mtu: 1500,
            txqueuelen: 1000,
            speed: None,
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = s.split(',');
        let name = parts.next().unwrap_or("");
        // The kernel's dev_valid_name (NUL: a C string ends there; isspace includes \v),
        // and '=' that would read as an option.
        let bad = |c: char| matches!(c, '/' | ':' | '=' | '\0' | '\u{b}') || c.is_ascii_whitespace();
        if name.is_empty() || name.len() > 15 || name == "." || name == ".." || name.contains(bad) {
            return Err(format!(
                "invalid device name {name:?} (1-15 bytes, not . or .., no '/', ':', '=', whitespace or NUL)"
            ));
        }
        let mut d = DevSpec::new(name);
        let mut txqueuelen_given = false;
        for p in parts {
            let (k, v) = p.split_once('=').ok_or_else(|| format!("device option \"{p}\" is not KEY=VALUE"))?;
            let num = || v.parse::<u32>().map_err(|_| format!("device option {k}: \"{v}\" is not a number"));
            match k {
                "kind" => {
                    d.kind = match v {
                        "eth" => DevKind::Eth,
                        "veth" => {
                            d.speed = d.speed.or(Some(10_000));
                            DevKind::Veth
                        }
                        "ifb" => {
                            if !txqueuelen_given {
                                d.txqueuelen = 32;
                            }
                            DevKind::Ifb
                        }
                        _ => return Err(format!("device kind \"{v}\" is not eth, veth or ifb")),
                    }
                }
                "speed" => d.speed = Some(num()?),
                "txqueues" => {
                    d.txqueues = num()?;
                    if !(1..=4096).contains(&d.txqueues) {
                        return Err("txqueues must be 1..4096".into());
                    }
                }
                "realtxqueues" => d.realtxqueues = Some(num()?),
                "mtu" => {
                    d.mtu = num()?;
                    if !(68..=65535).contains(&d.mtu) {
                        return Err("mtu must be 68..65535".into());
                    }
                }
                "txqueuelen" => {
                    d.txqueuelen = num()?;
                    txqueuelen_given = true;
                }
                _ => {
                    return Err(format!(
                        "unknown device option \"{k}\" (kind, txqueues, realtxqueues, mtu, txqueuelen, speed)"
                    ))
                }
            }
        }
        if d.realtxqueues.is_some_and(|r| r == 0 || r > d.txqueues) {
            return Err("realtxqueues must be 1..txqueues".into());
        }
        Ok(d)
    }
}

/// What [`Device::ingress`] did with a received packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Ingress {
    /// On up the stack.
    Pass(Packet),
    /// TC_ACT_SHOT: dropped, counted on the ingress qdisc.
    Dropped,
    /// STOLEN, QUEUED, TRAP, or a redirect: gone from this path (what mirred handed
    /// on waits in the netns's outbox, [`crate::tc::Tc::take_mirrored`]).
    Stolen,
}

/// What [`Device::xmit`] did with a packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Xmit {
    /// Straight to the driver: transmit it now.
    Direct(Packet),
    /// Given to the root qdisc, with its answer.
    Queued(Enqueued),
}

/// The `nlmsg_flags` of a qdisc request (tc's add/change/replace/link).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NlFlags {
    pub create: bool,
    pub excl: bool,
    pub replace: bool,
}

impl NlFlags {
    pub const ADD: NlFlags = NlFlags { create: true, excl: true, replace: false };
    pub const CHANGE: NlFlags = NlFlags { create: false, excl: false, replace: false };
    pub const REPLACE: NlFlags = NlFlags { create: true, excl: false, replace: true };
    pub const LINK: NlFlags = NlFlags { create: false, excl: false, replace: true };
}

/// Path from the root to a node: the class minors to follow. The ingress qdisc,
/// which lives beside the root tree, is `[INGRESS]`.
pub type Path = Vec<u32>;
pub const INGRESS: u32 = u32::MAX;

pub struct Device {
    pub info: DevInfo,
    pub kind: DevKind,
    pub root: Node,
    /// The ingress queue's qdisc (`tc qdisc add dev X ingress`), if any.
    pub ingress: Option<Node>,
    /// handle → path of the qdiscs with a handle, kept up to date on the way
    /// (entries of qdiscs that went away are noticed and dropped on lookup), so
    /// commands on trees of 10,000+ classes do not walk the tree.
    index: BTreeMap<u32, Path>,
    /// Whose behaviour to follow where kernel versions differ. Fixed when the device
    /// comes up; `info.kernel` is the same value, as the qdiscs see it.
    pub kernel: KernelVersion,
    /// `real_num_tx_queues` (≤ `info.num_tx_queues`, the allocated ones).
    pub real_tx_queues: u32,
    /// The ingress queue exists (`dev_ingress_queue_create`, on the first request for
    /// parent ffff:fff1); once made it stays, with noop on it when its qdisc is gone.
    ingress_queue: bool,
    /// `default_qdisc_ops` (`net.core.default_qdisc`), which is kernel-global: the
    /// `Tc` owning the device keeps every device's copy the same.
    pub(crate) default_qdisc: &'static str,
    /// IFF_XMIT_DST_RELEASE cleared (`netif_keep_dst`): a route or flow filter on one
    /// of its qdiscs made the device keep each packet's route for them; until then
    /// `__dev_queue_xmit` drops it before the qdisc ([`Device::xmit_routed`]).
    pub keep_dst: bool,
    /// The warning the last `modify` left (see [`crate::qdisc::Qdisc::take_warning`]),
    /// for tc to print when the request succeeds.
    pub(crate) warning: Option<&'static str>,
    /// The earliest next tick (ns) of the rate estimators of this device's qdiscs and
    /// classes; `u64::MAX` without any ([`Device::estimators`]).
    est_next: u64,
}

/// The kernel whose behaviour a device follows where versions differ: error texts,
/// and (see [`KernelVersion::u32_perf`], [`KernelVersion::has_action`]) the build
/// profile of the two kernels the goldens come from. Checked against 6.12 (Debian 13,
/// the default) and 6.18 (this project's CI host).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion(pub u32, pub u32);

impl KernelVersion {
    pub const V6_12: KernelVersion = KernelVersion(6, 12);
    pub const V6_18: KernelVersion = KernelVersion(6, 18);

    /// `6.12`, `6.18.44-fc-v669`, `6.12.107+deb13-amd64` …
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.split(|c: char| !c.is_ascii_digit());
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some(KernelVersion(major, minor))
    }

    /// CONFIG_CLS_U32_PERF: u32 key nodes keep hit counters (`u32_classify`'s
    /// `pf->rcnt/rhit/kcnts`) and dump them as TCA_U32_PCNT, which `tc -s filter show`
    /// prints as `(rule hit N success N)`. Set in Debian 13's 6.12 build (`=y`);
    /// not set in this CI host's 6.18 build.
    pub fn u32_perf(self) -> bool {
        self < Self::V6_18
    }

    /// CONFIG_CLS_U32_MARK: u32 key nodes match `skb->mark` (`mark VALUE MASK`) and dump
    /// the match as TCA_U32_MARK with its success count. Set in Debian 13's 6.12 build
    /// (`=y`); not set in this CI host's 6.18 build, which ignores the attribute.
    pub fn u32_mark(self) -> bool {
        self < Self::V6_18
    }

    /// Which tc action modules this engine models (act_gact, act_police,
    /// act_mirred) can be loaded. Debian 13's 6.12 build ships them all; this CI
    /// host's 6.18 build has only act_mirred (built in, with ifb, for ingress
    /// shaping), so a gact or police on a filter fails there with "Failed to load TC
    /// action module".
    pub fn has_action(self, kind: crate::classify::action::Kind) -> bool {
        kind == crate::classify::action::Kind::Mirred || self < Self::V6_18
    }

    /// `tcf_chain_tp_find` reports its own extack messages ("Protocol mismatch for
    /// filter with specified priority", "Lowest ID from auto-alloc range already in
    /// use"); before that change (so in 6.12) both cases read "Filter with specified
    /// priority/protocol not found". Upstream code, so by version: 6.18 has it.
    pub fn tp_find_extack(self) -> bool {
        self >= Self::V6_18
    }

    /// The quantum bounds of the 6.12 stable series (§9, §12, §16 of
    /// docs/kernel-notes.md), as Debian's 6.12.117 has them (goldens/kernel-6.12;
    /// the fq_change, fq policy and sfq_change parts are new since 6.12.107, whose
    /// goldens show the old behaviour; the init clamps could not be told apart on
    /// 6.12.107, which was never captured with a small enough MTU):
    /// * fq: `fq_change` clamps `quantum` to [256, 2^20] instead of refusing 0 and
    ///   > 2^20 with "invalid quantum"; TCA_FQ_INITIAL_QUANTUM's policy maximum is
    ///   2^20 (was INT_MAX), so a bigger one is ERANGE before anything is applied;
    ///   `fq_init` derives its defaults from psched_mtu clamped to [1, 2^20], with
    ///   quantum clamped to [256, 2^20] and initial_quantum capped at 2^20;
    /// * sfq: `sfq_change` raises a quantum below 256 to 256 and refuses one above
    ///   2^20 ("quantum too large"); `sfq_init` clamps its psched_mtu default to
    ///   [256, 2^20];
    /// * fq_codel and codel: the init-time mtu (fq_codel's default quantum and both
    ///   CoDel `mtu`s) is psched_mtu clamped to [256, 2^20];
    /// * fq_pie: `fq_pie_change` raises a quantum below 256 to 256 (golden
    ///   fq_pie-params) and `fq_pie_init` clamps its psched_mtu default to
    ///   [256, 2^20]; taken to be absent from 6.18.44 like the others (its fq_pie
    ///   source was not checked).
    ///
    /// 6.18 here means this project's CI host, 6.18.44, which has none of them: its
    /// v6.18.44 source still has the INT_MAX policy and the EINVAL quantum check in
    /// sch_fq.c and plain `psched_mtu()` in `fq_init`, `sfq_init`, `fq_codel_init` and
    /// `codel_init`, and no quantum floor in `sfq_change`. The host has no fq, sfq,
    /// fq_codel or codel module, so this rests on that source, not on a capture; a
    /// later 6.18.y has the init clamps and the fq change too.
    pub fn quantum_bounds(self) -> bool {
        self < Self::V6_18
    }

    /// "Invalid qdisc name" gained its explanation in the 6.18 series.
    fn invalid_qdisc_name(self) -> TcError {
        if self >= Self::V6_18 {
            TcError::kernel("Invalid qdisc name: must match existing qdisc")
        } else {
            TcError::kernel("Invalid qdisc name")
        }
    }
}

impl Default for KernelVersion {
    fn default() -> Self {
        Self::V6_12
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// `default_qdisc_ops` as the kernel starts (net/sched/sch_generic.c): pfifo_fast,
/// which `net.core.default_qdisc` replaces. (A kernel built with another
/// CONFIG_DEFAULT_NET_SCH sets that at boot through `qdisc_set_default`: Debian's
/// kernels say fq_codel, and so does systemd's sysctl.d, so a stock Debian 13 host
/// runs with fq_codel. The goldens' hosts and [`crate::tc::Tc::with_kernel`] keep
/// pfifo_fast.)
pub const DEFAULT_QDISC: &str = "pfifo_fast";

/// The sysctl naming the default qdisc.
pub const DEFAULT_QDISC_SYSCTL: &str = "net.core.default_qdisc";

/// Would `sysctl -w net.core.default_qdisc=KIND` be accepted? The error is what
/// procps' sysctl prints when the kernel refuses the write (exit status 1):
/// `sysctl: setting key "net.core.default_qdisc": No such file or directory`.
///
/// `set_default_qdisc` (net/core/sysctl_net_core.c) reads the value with
/// `proc_dostring` into an IFNAMSIZ buffer — up to a newline or NUL, at most 15
/// bytes, the rest silently cut — and `qdisc_set_default` (net/sched/sch_api.c) looks
/// the name up among the registered qdiscs (loading `sch_KIND` if needed): anything
/// registered is taken, classful or not, and ENOENT (which sysctl reports) otherwise.
/// So htb, tbf, prio, mq, ingress and noqueue are all accepted; what devices then get
/// is decided at attachment (see [`Device`]: those that cannot be made without options
/// or at a root fall back to noqueue). Kinds this engine does not implement are refused
/// as on a kernel without their module.
///
/// The sysctl is kernel-global: it lives in the init network namespace's
/// `net_core_table` only (a child netns has no /proc/sys/net/core/default_qdisc).
/// Kinds only newer kernels have are taken here (the scenario names no kernel);
/// [`crate::tc::Tc::set_default_qdisc`] refuses them on an older one.
pub fn check_default_qdisc(kind: &str) -> Result<(), String> {
    default_qdisc_ops(kind, KernelVersion(u32::MAX, u32::MAX)).map(|_| ())
}

/// `qdisc_set_default`'s lookup of a value written to `net.core.default_qdisc`: the
/// registered kind it names (see [`check_default_qdisc`]).
pub(crate) fn default_qdisc_ops(value: &str, k: KernelVersion) -> Result<&'static str, String> {
    // proc_dostring into char id[IFNAMSIZ].
    let v = value.as_bytes();
    let v = &v[..v.iter().position(|&c| c == b'\n' || c == 0).unwrap_or(v.len())];
    let v = &v[..v.len().min(15)];
    sched::KINDS
        .iter()
        .filter(|o| o.since.is_none_or(|s| k >= s))
        .map(|o| o.id)
        .find(|id| id.as_bytes() == v)
        .ok_or_else(|| format!("sysctl: setting key \"{DEFAULT_QDISC_SYSCTL}\": No such file or directory"))
}

/// `hash_32(handle, 4)`: the bucket of the device's 16-bucket qdisc hash.
fn bucket(handle: u32) -> u32 {
    handle.wrapping_mul(0x61C8_8647) >> 28
}

impl Device {
    /// A device as it comes up on a kernel with the default `net.core.default_qdisc`.
    pub fn new(spec: &DevSpec) -> Self {
        Self::with_default_qdisc(spec, DEFAULT_QDISC, KernelVersion::default(), Instant::ZERO)
    }

    /// A device coming up (`dev_activate`) at `now` while `net.core.default_qdisc` is
    /// `default_qdisc` (a kind [`default_qdisc_ops`] returned), on kernel `kernel`
    /// (which the default qdiscs already follow: a default fq_codel or sfq sizes its
    /// quantum by it).
    pub(crate) fn with_default_qdisc(
        spec: &DevSpec,
        default_qdisc: &'static str,
        kernel: KernelVersion,
        now: Instant,
    ) -> Self {
        let info = DevInfo {
            name: spec.name.clone(),
            mtu: spec.mtu,
            hard_header_len: 14,
            tx_queue_len: spec.txqueuelen,
            num_tx_queues: spec.txqueues,
            real_tx_queues: spec.realtxqueues.unwrap_or(spec.txqueues),
            speed: spec.speed,
            max_mtu: spec.kind.max_mtu(),
            kernel,
        };
        let mut d = Device {
            info,
            kind: spec.kind,
            root: Node::new(0, TC_H_ROOT, Box::new(noqueue::Noop)),
            ingress: None,
            index: BTreeMap::new(),
            kernel,
            real_tx_queues: spec.realtxqueues.unwrap_or(spec.txqueues),
            ingress_queue: false,
            default_qdisc,
            warning: None,
            est_next: u64::MAX,
            keep_dst: false,
        };
        d.root = d.default_root(now);
        d
    }

    /// The kind `net.core.default_qdisc` names for this device's kernel.
    pub fn default_qdisc(&self) -> &'static str {
        self.default_qdisc
    }

    /// `attach_default_qdiscs` (net/sched/sch_generic.c), which `dev_activate` runs
    /// when the device comes up and again when its root qdisc was deleted:
    /// * a single-queue or IFF_NO_QUEUE device: `attach_one_default_qdisc` on every
    ///   tx queue — noqueue if IFF_NO_QUEUE (veth), else `qdisc_create_dflt` of
    ///   `net.core.default_qdisc` — and txq 0's qdisc becomes the root, referenced by
    ///   the tx queue and by dev->qdisc (refcnt 2);
    /// * a multiqueue device: `qdisc_create_dflt` of mq, whose `mq_init` gives each tx
    ///   queue the default kind (refcnt 1: mq's `attach` hands its children to the
    ///   queues instead);
    /// * if that failed (the default kind needs options, as htb/tbf/prio do, or cannot
    ///   be a root or a tx queue's qdisc, as mq/ingress; or pfifo_fast on a device with
    ///   txqueuelen 0), the kernel warns "default qdisc (KIND) fail, fallback to
    ///   noqueue" and attaches noqueue as for IFF_NO_QUEUE (refcnt 2).
    ///
    /// All of them have handle 0 (`qdisc_alloc` sets none).
    fn default_root(&self, now: Instant) -> Node {
        let info = &self.info;
        let no_queue = self.kind == DevKind::Veth;
        let one_default = |no_queue: bool| {
            // attach_one_default_qdisc for txq 0 (the others get their own, unseen).
            let kind = if no_queue { "noqueue" } else { self.default_qdisc };
            sched::create_dflt(kind, info, TC_H_ROOT, self.default_qdisc, now).map(|q| {
                let mut n = Node::new(0, TC_H_ROOT, q);
                n.refcnt = 2;
                n
            })
        };
        let root = if info.num_tx_queues <= 1 || no_queue {
            one_default(no_queue)
        } else {
            sched::create_dflt("mq", info, TC_H_ROOT, self.default_qdisc, now)
                .map(|q| self.mq_queues(Node::new(0, TC_H_ROOT, q), now))
        };
        root.or_else(|| one_default(true)).expect("noqueue's init cannot fail")
    }

    /// mq_init/mq_attach on a device using fewer tx queues than it has: a queue past
    /// real_num_tx_queues gets pfifo_fast whatever `net.core.default_qdisc` says
    /// (`get_default_qdisc_ops`), and its qdisc is not hashed, so dumps skip it.
    fn mq_queues(&self, mut node: Node, now: Instant) -> Node {
        let real = self.real_tx_queues;
        if !node.flags().per_txq || real >= self.info.num_tx_queues {
            return node;
        }
        let Some(c) = node.q.as_classful_mut() else { return node };
        for ntx in real..self.info.num_tx_queues {
            let Some(leaf) = c.leaf_mut(ntx + 1) else { continue };
            if let Some(q) = sched::create_dflt("pfifo_fast", &self.info, leaf.parent, self.default_qdisc, now) {
                leaf.q = q;
            }
            leaf.unhashed = true;
        }
        node
    }

    /// Record the handles of the subtree at `path` in the index.
    fn index_subtree(&mut self, path: &[u32]) {
        fn go(n: &Node, path: &mut Path, index: &mut BTreeMap<u32, Path>) {
            if n.handle != 0 {
                index.insert(n.handle, path.clone());
            }
            if let Some(c) = n.q.as_classful() {
                for m in c.class_minors() {
                    if let Some(ch) = c.leaf(m) {
                        path.push(m);
                        go(ch, path, index);
                        path.pop();
                    }
                }
            }
        }
        let mut index = std::mem::take(&mut self.index);
        let mut p = path.to_vec();
        if let Some(n) = self.try_node(path) {
            go(n, &mut p, &mut index);
        }
        self.index = index;
    }

    // ---- lookups ---------------------------------------------------------------

    /// Every node with its path, depth first.
    pub fn walk(&self) -> Vec<(Path, &Node)> {
        fn go<'a>(n: &'a Node, path: &mut Path, out: &mut Vec<(Path, &'a Node)>) {
            out.push((path.clone(), n));
            if let Some(c) = n.q.as_classful() {
                for m in c.class_minors() {
                    if let Some(ch) = c.leaf(m) {
                        path.push(m);
                        go(ch, path, out);
                        path.pop();
                    }
                }
            }
        }
        let mut out = Vec::new();
        go(&self.root, &mut Vec::new(), &mut out);
        if let Some(i) = &self.ingress {
            out.push((vec![INGRESS], i));
        }
        out
    }

    /// Whether a qdisc of this device asked for its queue to be run
    /// (`netif_schedule_queue`, [`crate::qdisc::Sch::schedule`]) since the last call: the asks are
    /// taken. Whoever drives the device then dequeues as its driver allows.
    pub fn take_scheduled(&mut self) -> bool {
        let asked: Vec<Path> = self.walk().into_iter().filter(|(_, n)| n.sch.schedule).map(|(p, _)| p).collect();
        for p in &asked {
            self.node_mut(p).sch.schedule = false;
        }
        !asked.is_empty()
    }

    pub fn node(&self, path: &[u32]) -> &Node {
        self.try_node(path).expect("valid path")
    }

    /// The node at `path`, if the path still leads somewhere.
    pub fn try_node(&self, path: &[u32]) -> Option<&Node> {
        if path == [INGRESS] {
            return self.ingress.as_ref();
        }
        let mut n = &self.root;
        for &m in path {
            n = n.q.as_classful()?.leaf(m)?;
        }
        Some(n)
    }

    pub fn node_mut(&mut self, path: &[u32]) -> &mut Node {
        if path == [INGRESS] {
            return self.ingress.as_mut().expect("ingress path");
        }
        let mut n = &mut self.root;
        for &m in path {
            n = n.q.as_classful_mut().and_then(|c| c.leaf_mut(m)).expect("valid path");
        }
        n
    }

    /// `qdisc_lookup`: the root, the hashed qdiscs, the ingress qdisc.
    pub fn lookup(&self, handle: u32) -> Option<Path> {
        if handle == 0 {
            return None;
        }
        let p = self.index.get(&handle)?;
        // The index may remember a qdisc that has since been destroyed.
        let n = self.try_node(p)?;
        (n.handle == handle && !n.flags().builtin).then(|| p.clone())
    }

    /// The order `tc qdisc show` lists this device's qdiscs in: the root, then the
    /// hash buckets in order, newest first within a bucket (`tc_dump_qdisc_root`).
    pub fn dump_order(&self, invisible: bool) -> Vec<Path> {
        let mut hashed: Vec<(Path, &Node)> = self
            .walk()
            .into_iter()
            .filter(|(p, n)| !p.is_empty() && n.hashed() && (invisible || !n.invisible))
            .collect();
        hashed.sort_by_key(|(_, n)| (bucket(n.handle), Reverse(n.seq)));
        let ingress = self.ingress.as_ref().map(|_| vec![INGRESS]);
        std::iter::once(Vec::new()).chain(hashed.into_iter().map(|(p, _)| p)).chain(ingress).collect()
    }

    /// `qdisc_leaf`: the path of the qdisc attached to class `clid`, or an error.
    fn leaf_path(&self, clid: u32) -> Result<(Path, Path), TcError> {
        let p = self
            .lookup(tc_h_maj(clid))
            .ok_or_else(|| TcError::with_errno("Failed to find specified qdisc", Errno::ENOENT))?;
        let parent = self.node(&p);
        if p == [INGRESS] {
            return Err(TcError::with_errno("Cannot add children to ingress/clsact qdisc", Errno::EOPNOTSUPP));
        }
        let c = parent.q.as_classful().ok_or_else(|| TcError::kernel("Parent qdisc is not classful"))?;
        // `cops->find` decides, minor 0 included (tbf's and netem's take any classid).
        if !c.find(tc_h_min(clid)) {
            return Err(TcError::kernel("Specified class not found"));
        }
        let mut leaf = p.clone();
        leaf.push(tc_h_min(clid));
        Ok((p, leaf))
    }

    // ---- tc_modify_qdisc ---------------------------------------------------------

    /// `RTM_NEWQDISC`: add / change / replace / link, following tc_modify_qdisc's
    /// decision table. `autohandle` is the kernel's global auto-handle counter.
    #[allow(clippy::too_many_arguments)]
    pub fn modify(
        &mut self,
        flags: NlFlags,
        clid: u32,
        handle: u32,
        kind: Option<&str>,
        opts: Option<&Opts>,
        stab: Option<&StabRequest>,
        est: Option<EstSpec>,
        blocks: [u32; 2],
        autohandle: &mut u32,
        now: Instant,
    ) -> Result<(), TcError> {
        self.estimators(now);
        if clid == TC_H_INGRESS {
            self.ingress_queue = true;
        }
        let kind_differs = |n: &Node| kind.is_some_and(|k| k != n.kind());
        // (q, p): the qdisc at the place, and the parent qdisc (None = root).
        let mut parent_path: Option<Path> = None;
        if clid != TC_H_UNSPEC {
            let q_path = if clid == TC_H_INGRESS {
                self.ingress.as_ref().map(|_| vec![INGRESS])
            } else if clid != TC_H_ROOT {
                let (p, leaf) = self.leaf_path(clid)?;
                parent_path = Some(p);
                Some(leaf)
            } else {
                Some(Vec::new())
            };
            // "It may be default qdisc, ignore it."
            let q_path = q_path.filter(|p| self.try_node(p).is_some_and(|n| n.handle != 0 && !n.flags().builtin));
            let mut goto_create = false;
            // A plain change that creates goes on as if NLM_F_CREATE were set.
            let mut create_flags = flags;
            let qh = q_path.as_ref().map(|p| self.node(p).handle);
            if q_path.is_none() || handle == 0 || qh != Some(handle) {
                if handle != 0 {
                    if q_path.is_some() && !flags.replace {
                        return Err(TcError::with_errno("NLM_F_REPLACE needed to override", Errno::EEXIST));
                    }
                    if tc_h_min(handle) != 0 {
                        return Err(TcError::kernel("Invalid minor handle"));
                    }
                    match self.lookup(handle) {
                        None => goto_create = true,
                        Some(found) => {
                            // A qdisc never moves (6.12 and later): grafting it elsewhere is refused
                            // before anything else is looked at.
                            if self.node(&found).parent != clid {
                                return Err(TcError::kernel("Cannot move an existing qdisc to a different parent"));
                            }
                            if flags.excl {
                                return Err(TcError::with_errno("Exclusivity flag on, cannot override", Errno::EEXIST));
                            }
                            if kind_differs(self.node(&found)) {
                                return Err(self.kernel.invalid_qdisc_name());
                            }
                            if parent_path.as_ref() == Some(&found) {
                                return Err(TcError::with_errno("Qdisc parent/child loop detected", Errno::ELOOP));
                            }
                            // Same parent: it is the qdisc already attached there, and the
                            // graft puts it back in its own place.
                            return Ok(());
                        }
                    }
                } else {
                    match &q_path {
                        None => goto_create = true,
                        // A different kind at the place means "create and graft": for
                        // add/replace as asked, and for a plain change (no flags) too,
                        // without the NLM_F_CREATE check.
                        Some(p) if kind_differs(self.node(p)) => {
                            if flags.create && (flags.replace || flags.excl) {
                                goto_create = true;
                            } else if !flags.create && !flags.replace && !flags.excl {
                                create_flags = NlFlags { create: true, ..flags };
                                goto_create = true;
                            }
                        }
                        Some(_) => {}
                    }
                }
            }
            if goto_create {
                return self.create_and_graft(
                    create_flags,
                    clid,
                    handle,
                    kind,
                    opts,
                    stab,
                    est,
                    blocks,
                    parent_path,
                    autohandle,
                    now,
                );
            }
            return self.change(flags, q_path, kind, opts, stab, est, blocks, now);
        }
        if handle == 0 {
            return Err(TcError::kernel("Handle cannot be zero"));
        }
        let q = self.lookup(handle);
        self.change(flags, q, kind, opts, stab, est, blocks, now)
    }

    /// The "Change qdisc parameters" tail of tc_modify_qdisc, then `qdisc_change`.
    #[allow(clippy::too_many_arguments)]
    fn change(
        &mut self,
        flags: NlFlags,
        q: Option<Path>,
        kind: Option<&str>,
        opts: Option<&Opts>,
        stab: Option<&StabRequest>,
        est: Option<EstSpec>,
        blocks: [u32; 2],
        now: Instant,
    ) -> Result<(), TcError> {
        let q = q.ok_or_else(|| TcError::with_errno("Specified qdisc not found", Errno::ENOENT))?;
        if flags.excl {
            return Err(TcError::with_errno("Exclusivity flag on, cannot modify", Errno::EEXIST));
        }
        let info = self.info.clone();
        let n = self.node_mut(&q);
        if kind.is_some_and(|k| k != n.kind()) {
            return Err(self.kernel.invalid_qdisc_name());
        }
        if let Some(o) = opts {
            // qdisc_change: blocks are bound at init only (ingress and clsact send no
            // options, so a change of theirs leaves the blocks as they were, silently).
            if blocks != [0, 0] && n.q.has_change() {
                return Err(TcError::with_errno("Change of blocks is not supported", Errno::EOPNOTSUPP));
            }
            let before = (n.stats().qlen, n.stats().backlog);
            n.change(o, &info, now)?;
            let warning = n.q.take_warning();
            let after = (n.stats().qlen, n.stats().backlog);
            // A change that shrank the queue reports it up (e.g. prio losing bands).
            let mut r = n.take_reduce();
            if r.is_zero() && before != after {
                r.add(before.0 as i32 - after.0 as i32, before.1 as i64 - after.1 as i64);
            }
            self.reduce_ancestors(&q, r);
            // A change may create children (prio growing bands).
            self.index_subtree(&q);
            self.warning = warning;
        }
        // qdisc_change: the table asked for replaces the old one; none asked, none kept.
        let n = self.node_mut(&q);
        n.stab = size_table(stab)?;
        // Then gen_replace_estimator, its errors ignored ("change can't be undone");
        // a multi-queue root takes none.
        if let Some(spec) = est.filter(|_| !n.flags().per_txq) {
            let (bytes, packets) = (n.stats().bytes, n.stats().packets);
            let e = n.est.get_or_insert_with(Default::default);
            if let Ok(new) = Estimator::new(spec, bytes, packets, now, e.own.as_ref()) {
                let next = new.next_tick().as_nanos();
                e.own = Some(new);
                self.est_next = self.est_next.min(next);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn create_and_graft(
        &mut self,
        flags: NlFlags,
        clid: u32,
        handle: u32,
        kind: Option<&str>,
        opts: Option<&Opts>,
        stab: Option<&StabRequest>,
        est: Option<EstSpec>,
        blocks: [u32; 2],
        parent_path: Option<Path>,
        autohandle: &mut u32,
        now: Instant,
    ) -> Result<(), TcError> {
        if !flags.create {
            return Err(TcError::with_errno("Qdisc not found. To create specify NLM_F_CREATE flag", Errno::ENOENT));
        }
        // qdisc_create
        let kind = kind.unwrap_or("");
        let Some(ops) = sched::lookup_in(kind, self.kernel) else {
            return Err(TcError::with_errno("Specified qdisc kind is unknown", Errno::ENOENT));
        };
        if clid == TC_H_INGRESS && !ops.flags.ingress {
            return Err(TcError::kernel("Specified parent ID is reserved for ingress and clsact Qdiscs"));
        }
        let handle = if clid == TC_H_INGRESS {
            INGRESS_HANDLE
        } else if handle == 0 {
            self.alloc_handle(autohandle)?
        } else {
            handle
        };
        // qdisc_block_indexes_set (tc never sends index 0).
        if blocks[0] != 0 && ops.flags.shared_blocks < 1 {
            return Err(TcError::with_errno("Ingress block sharing is not supported", Errno::EOPNOTSUPP));
        }
        if blocks[1] != 0 && ops.flags.shared_blocks < 2 {
            return Err(TcError::with_errno("Egress block sharing is not supported", Errno::EOPNOTSUPP));
        }
        // qdisc_create takes the size table before the kind's init.
        let stab = size_table(stab)?;
        let mut q = sched::create_with_default(kind, opts, &self.info, handle, clid, now, self.default_qdisc)?;
        if blocks != [0, 0] {
            // tcf_block_get_ext, hook by hook: a shared block tracks the devices
            // bound to it (block->ports), one entry per device, so a device cannot
            // bind one block twice — with both hooks of a clsact, or while the
            // ingress qdisc this one replaces still holds it.
            let held = self.ingress.as_ref().and_then(|n| n.q.as_classful()).map_or([0, 0], |c| c.block_indexes());
            let mut bound: Vec<u32> = held.into_iter().filter(|&b| b != 0).collect();
            for b in blocks.into_iter().filter(|&b| b != 0) {
                if bound.contains(&b) {
                    return Err(TcError::with_errno("block dev insert failed", Errno::EBUSY));
                }
                bound.push(b);
            }
            q.as_classful_mut().expect("only ingress and clsact take blocks").set_block_indexes(blocks);
        }
        self.warning = q.take_warning();
        let mut node = self.mq_queues(Node::new(handle, clid, q), now);
        node.stab = stab;
        // qdisc_create, after the kind's init: gen_new_estimator on the new counters.
        if let Some(spec) = est {
            if node.flags().per_txq {
                return Err(TcError::with_errno(
                    "Cannot attach rate estimator to a multi-queue root qdisc",
                    Errno::EOPNOTSUPP,
                ));
            }
            let e = Estimator::new(spec, 0, 0, now, None)
                .map_err(|_| TcError::with_errno("Failed to generate new estimator", Errno::EINVAL))?;
            self.est_next = self.est_next.min(e.next_tick().as_nanos());
            node.est = Some(Box::new(QdiscEst { own: Some(e), ..Default::default() }));
        }
        if clid == TC_H_INGRESS {
            self.ingress = Some(node);
            self.index_subtree(&[INGRESS]);
            return Ok(());
        }
        if node.flags().ingress {
            return Err(TcError::kernel("Specified parent ID is reserved for ingress and clsact Qdiscs"));
        }
        // qdisc_graft
        match parent_path {
            None => {
                // Root: one reference per tx queue, plus dev->qdisc, unless the
                // qdisc attaches itself to the queues (mq).
                node.refcnt = if node.flags().per_txq { 1 } else { self.info.num_tx_queues + 1 };
                self.root = node;
                self.index.clear();
                self.index_subtree(&[]);
                if self.ingress.is_some() {
                    self.index_subtree(&[INGRESS]);
                }
            }
            Some(pp) => {
                if node.flags().no_enqueue {
                    return Err(TcError::kernel("Cannot assign noqueue to a class"));
                }
                // Only the qdisc __dev_xmit_skb hands packets to applies a table.
                if node.stab.is_some() && !self.node(&pp).flags().per_txq {
                    return Err(TcError::kernel("STAB not supported on a non root"));
                }
                // No depth limit: 6.18 takes 40 nested tbf or htb as readily as 2.
                self.graft(&pp, tc_h_min(clid), Some(node), now)?;
                let mut leaf = pp.clone();
                leaf.push(tc_h_min(clid));
                self.index_subtree(&leaf);
            }
        }
        Ok(())
    }

    /// `qdisc_alloc_handle`: the next free `8001:`… handle, from the global counter.
    fn alloc_handle(&self, autohandle: &mut u32) -> Result<u32, TcError> {
        for _ in 0..0x8000 {
            *autohandle = autohandle.wrapping_add(0x10000);
            if *autohandle == 0xFFFF_0000 {
                *autohandle = 0x8000_0000;
            }
            if self.lookup(*autohandle).is_none() {
                return Ok(*autohandle);
            }
        }
        Err(TcError::kernel("Maximum number of qdisc handles was exceeded"))
    }

    /// Graft `new` onto class `minor` of the qdisc at `pp`; the old qdisc's queue is
    /// purged and the ancestors told (`qdisc_purge_queue`).
    fn graft(&mut self, pp: &[u32], minor: u32, new: Option<Node>, now: Instant) -> Result<(), TcError> {
        let info = self.info.clone();
        let parent = self.node_mut(pp);
        let mq_parent = parent.flags().per_txq;
        let old = parent.graft(minor, new, &info)?;
        if let Some(mut old) = old {
            let (qlen, backlog) = (old.stats().qlen, old.stats().backlog);
            old.reset(now);
            // mq children are NOPARENT: nothing travels up from them.
            if !mq_parent && qlen > 0 {
                let mut path = pp.to_vec();
                path.push(minor);
                let mut r = Reduce::default();
                r.add(qlen as i32, backlog as i64);
                self.reduce_ancestors(&path, r);
            }
        }
        Ok(())
    }

    /// `qdisc_tree_reduce_backlog` from the node at `path` up to the root.
    fn reduce_ancestors(&mut self, path: &[u32], r: Reduce) {
        if r.is_zero() || path == [INGRESS] {
            return;
        }
        for depth in (0..path.len()).rev() {
            let n = self.node_mut(&path[..depth]);
            if n.flags().per_txq {
                break;
            }
            r.apply(n.stats_mut());
        }
    }

    // ---- tc_get_qdisc (RTM_DELQDISC) -------------------------------------------

    pub fn delete(&mut self, clid: u32, handle: u32, kind: Option<&str>, now: Instant) -> Result<(), TcError> {
        let mut parent_path = None;
        let q = if clid != TC_H_UNSPEC {
            // tc_get_qdisc: any parent ffff:X names the ingress queue's qdisc.
            let q = if clid != TC_H_ROOT && tc_h_maj(clid) == tc_h_maj(TC_H_INGRESS) {
                if self.ingress.is_none() && self.ingress_queue {
                    // The queue's noop qdisc (handle 0).
                    if handle != 0 {
                        return Err(TcError::kernel("Invalid handle"));
                    }
                    if kind.is_some_and(|k| k != "noop") {
                        return Err(self.kernel.invalid_qdisc_name());
                    }
                    return Err(TcError::with_errno("Cannot delete qdisc with handle of zero", Errno::ENOENT));
                }
                self.ingress.as_ref().map(|_| vec![INGRESS])
            } else if clid != TC_H_ROOT {
                let p = self
                    .lookup(tc_h_maj(clid))
                    .ok_or_else(|| TcError::with_errno("Failed to find qdisc with specified classid", Errno::ENOENT))?;
                let (pp, leaf) = self.leaf_path(clid)?;
                debug_assert_eq!(p, pp);
                parent_path = Some(pp);
                Some(leaf).filter(|l| self.try_node(l).is_some_and(|n| !n.flags().builtin))
            } else {
                Some(Vec::new())
            };
            let q =
                q.ok_or_else(|| TcError::with_errno("Cannot find specified qdisc on specified device", Errno::ENOENT))?;
            if handle != 0 && self.node(&q).handle != handle {
                return Err(TcError::kernel("Invalid handle"));
            }
            q
        } else {
            self.lookup(handle)
                .ok_or_else(|| TcError::with_errno("Failed to find qdisc with specified handle", Errno::ENOENT))?
        };
        if kind.is_some_and(|k| k != self.node(&q).kind()) {
            return Err(self.kernel.invalid_qdisc_name());
        }
        if clid == TC_H_UNSPEC {
            return Err(TcError::kernel("Classid cannot be zero"));
        }
        if self.node(&q).handle == 0 {
            return Err(TcError::with_errno("Cannot delete qdisc with handle of zero", Errno::ENOENT));
        }
        match parent_path {
            None if q == [INGRESS] => self.ingress = None,
            // Root deleted: the device is reactivated with its default qdisc, of the
            // kind `net.core.default_qdisc` names now (qdisc_graft → dev_activate).
            None => {
                self.root = self.default_root(now);
                self.index.clear();
                if self.ingress.is_some() {
                    self.index_subtree(&[INGRESS]);
                }
            }
            Some(pp) => {
                let minor = *q.last().expect("leaf path");
                self.graft(&pp, minor, None, now)?;
                self.index_subtree(&q);
            }
        }
        Ok(())
    }

    // ---- tc_ctl_tclass --------------------------------------------------------

    /// `cops->change` on the classful qdisc at `q`, then what the kernel does around
    /// it: purged leaves reported to the ancestors, new leaves hashed. A kind that
    /// takes TCA_RATE gives the class the estimator `est` asks for (new, or replacing
    /// its old one); the others ignore it.
    #[allow(clippy::too_many_arguments)]
    pub fn change_class(
        &mut self,
        q: &[u32],
        classid: u32,
        parent: u32,
        exists: bool,
        opts: Option<&Opts>,
        est: Option<EstSpec>,
        now: Instant,
    ) -> Result<Option<String>, TcError> {
        self.estimators(now);
        let info = self.info.clone();
        let n = self.node_mut(q);
        let r = n.change_class(classid, parent, exists, opts, &info, now);
        let red = n.take_reduce();
        let minor = tc_h_min(classid);
        if let (Ok(_), Some(spec)) = (&r, est) {
            let c = n.q.as_classful().expect("a class was changed");
            if c.class_takes_estimator() {
                let s = c.class_stats(minor).unwrap_or_default();
                let e = n.est.get_or_insert_with(Default::default);
                let new = Estimator::new(spec, s.bytes, s.packets, now, e.classes.get(&minor))?;
                let next = new.next_tick().as_nanos();
                e.classes.insert(minor, new);
                self.est_next = self.est_next.min(next);
            }
        }
        self.reduce_ancestors(q, red);
        r
    }

    /// `cops->delete` on the classful qdisc at `q`.
    pub fn delete_class(&mut self, q: &[u32], minor: u32, now: Instant) -> Result<(), TcError> {
        self.estimators(now);
        let n = self.node_mut(q);
        let r = n.delete_class(minor, now);
        if let (Ok(()), Some(e)) = (&r, n.est.as_deref_mut()) {
            // The class's gen_kill_estimator.
            e.classes.remove(&minor);
        }
        let red = n.take_reduce();
        self.reduce_ancestors(q, red);
        r
    }

    // ---- datapath ----

    /// `sch_handle_ingress` → `tc_run` (net/core/dev.c): a received packet meets the
    /// ingress qdisc's filters (clsact's ingress hook), after RPS and before the IP
    /// layer. See [`Device::hook`]; without an ingress qdisc the packet passes untouched.
    /// `ifindex` is this device's: the packet's `skb_iif` from here on.
    pub fn ingress(&mut self, pkt: Packet, now: Instant, shared: &SharedBlocks, ifindex: u32) -> Ingress {
        self.hook(TC_H_MIN_INGRESS, pkt, now, shared, ifindex)
    }

    /// `sch_handle_egress` → `tc_run`: in `__dev_queue_xmit`, before the tx queue is
    /// picked and the root qdisc sees the packet, it meets clsact's egress hook (an
    /// `ingress` qdisc has none). What its actions change (skbedit's priority and mark,
    /// pedit's header bytes) is what the qdisc then classifies; the caller hands a
    /// [`Ingress::Pass`] packet on to [`Device::xmit_on`]. Its filters see no route
    /// and `skb_iif` 0, as for a packet this host sends: a forwarded packet's route
    /// reaches only the qdisc ([`Device::xmit_routed`]).
    pub fn egress(&mut self, pkt: Packet, now: Instant, shared: &SharedBlocks) -> Ingress {
        if self.ingress.as_ref().is_none_or(|q| q.kind() != "clsact") {
            return Ingress::Pass(pkt);
        }
        self.hook(TC_H_MIN_EGRESS, pkt, now, shared, 0)
    }

    /// `tc_run` on one hook of the ingress/clsact qdisc. The hook's mini-qdisc exists
    /// only while chain 0 of its block has filters (`mini_qdisc_pair_swap` follows the
    /// chain's head): then it counts every packet it sees (bstats) and the ones a
    /// filter shoots (qstats drop); otherwise the packet passes uncounted.
    ///
    /// A hook bound to a shared block runs that block of the netns (`shared`): every
    /// device bound to it runs the same filters and actions, with the same counters.
    /// `iif` is the packet's `skb_iif` as the hook's filters see it.
    fn hook(&mut self, minor: u32, mut pkt: Packet, now: Instant, shared: &SharedBlocks, iif: u32) -> Ingress {
        self.estimators(now);
        let Some(node) = self.ingress.as_mut() else { return Ingress::Pass(pkt) };
        let c = node.q.as_classful();
        let block = match c.map(|c| c.block_index(minor)) {
            Some(0) | None => c.and_then(|c| c.block(minor)),
            Some(i) => shared.get(i),
        };
        let Some(block) = block.filter(|b| !b.is_empty()) else { return Ingress::Pass(pkt) };
        node.sch.stats.sent(&pkt);
        match crate::classify::with_origin(None, iif, || block.classify(&mut pkt, now)) {
            Some(crate::classify::Verdict::Shot) => {
                node.sch.stats.dropped();
                Ingress::Dropped
            }
            Some(crate::classify::Verdict::Stolen) => Ingress::Stolen,
            _ => Ingress::Pass(pkt),
        }
    }

    /// `__dev_xmit_skb` (§2.3): what the stack does with a packet for this device.
    /// noqueue hands it to the driver; an idle, empty qdisc with TCQ_F_CAN_BYPASS
    /// counts it as sent and hands it to the driver too (its xstats never see it);
    /// otherwise it is enqueued. `driver_idle`: the tx queue could take a packet now
    /// (the caller's wire or ring is free). With mq, the tx queue is picked as
    /// `skb_tx_hash` does and its own qdisc decides.
    pub fn xmit(&mut self, pkt: Packet, now: Instant, driver_idle: bool) -> Xmit {
        let txq = self.txq_of(&pkt);
        self.xmit_on(pkt, txq, now, driver_idle)
    }

    /// [`Device::xmit`] on a tx queue the caller picked (`netdev_core_pick_tx`: the
    /// socket's cached queue, XPS, else `skb_tx_hash`); it matters under mq, where
    /// each queue has its own qdisc.
    pub fn xmit_on(&mut self, mut pkt: Packet, txq: usize, now: Instant, driver_idle: bool) -> Xmit {
        self.estimators(now);
        if self.root.flags().no_enqueue {
            return Xmit::Direct(pkt);
        }
        let mq = self.root.flags().per_txq;
        let txq = if mq {
            let minor = txq as u32 + 1;
            self.root.q.as_classful_mut().and_then(|c| c.leaf_mut(minor))
        } else {
            Some(&mut self.root)
        };
        if let Some(q) = txq {
            // A tx queue whose qdisc has no enqueue (mq with noqueue per queue, from
            // `net.core.default_qdisc=noqueue`): straight to the driver, as above.
            if q.flags().no_enqueue {
                return Xmit::Direct(pkt);
            }
            if let Some(t) = &q.stab {
                t.apply(&mut pkt);
            }
            if driver_idle && q.q.can_bypass() && q.stats().qlen == 0 {
                q.stats_mut().sent(&pkt);
                // mq sums its queues when dumped (as mq_dump does), not per packet.
                if !mq {
                    self.root.sync_stats();
                }
                pkt.unstab();
                return Xmit::Direct(pkt);
            }
            if mq {
                // __dev_xmit_skb enqueues into the picked queue's own qdisc
                // (txq->qdisc); mq itself never sees the packet.
                let r = q.enqueue(pkt, now);
                let _ = q.take_reduce();
                return Xmit::Queued(r);
            }
        }
        Xmit::Queued(self.root_enqueue(pkt, now))
    }

    /// [`Device::xmit_on`] of a packet that took the route `dst` (`skb_dst`): its
    /// realms and input interface are what route filters and the `rt_classid` /
    /// `rt_iif` meta keys read while its qdiscs classify it (see
    /// [`crate::classify::Dst`]) — once a route or flow filter made the device keep
    /// routes ([`Device::keep_dst`]); before, the packet reaches the qdisc without it.
    /// Its input interface is also its `skb_iif` (flow's `iif` key, u32's `indev`),
    /// which the packet keeps whether or not the device keeps routes.
    pub fn xmit_routed(
        &mut self,
        pkt: Packet,
        txq: usize,
        now: Instant,
        driver_idle: bool,
        dst: Option<crate::classify::Dst>,
    ) -> Xmit {
        let iif = dst.map_or(0, |d| d.iif);
        let dst = dst.filter(|_| self.keep_dst);
        crate::classify::with_origin(dst, iif, || self.xmit_on(pkt, txq, now, driver_idle))
    }

    /// The tx queue `skb_tx_hash` picks for a packet (`reciprocal_scale(hash, n)`,
    /// §2.2; no XPS): among all real tx queues, or, when the root qdisc gave the
    /// device traffic classes (mqprio), among those of the packet's class.
    pub fn txq_of(&self, pkt: &Packet) -> usize {
        let (offset, count) = match self.root.q.tc_txqs(pkt.priority) {
            Some((o, c)) if c > 0 => (o, c),
            _ => (0, self.real_tx_queues.max(1)),
        };
        (offset + sched::codel::reciprocal_scale(pkt.hash, count)) as usize
    }

    /// Whether each tx queue has a qdisc of its own (an mq root): then
    /// [`Device::dequeue_txq`] serves one queue; otherwise all queues share the root.
    pub fn per_txq_qdiscs(&self) -> bool {
        self.root.flags().per_txq
    }

    /// `dequeue_skb` for tx queue `txq`: its own qdisc under an mq root, else the root.
    pub fn dequeue_txq(&mut self, txq: usize, now: Instant) -> Dequeued {
        self.estimators(now);
        if !self.per_txq_qdiscs() {
            return self.dequeue(now);
        }
        let Some(leaf) = self.root.q.as_classful_mut().and_then(|c| c.leaf_mut(txq as u32 + 1)) else {
            return Dequeued::Empty;
        };
        let mut d = leaf.dequeue(now);
        let _ = leaf.take_reduce();
        if let Dequeued::Packet(p) = &mut d {
            p.unstab();
        }
        d
    }

    /// Hand a packet to the device's root qdisc.
    pub fn enqueue(&mut self, pkt: Packet, now: Instant) -> Enqueued {
        self.estimators(now);
        self.root_enqueue(pkt, now)
    }

    /// [`Device::enqueue`] once the estimators are up to date ([`Device::xmit_on`]
    /// has just checked).
    fn root_enqueue(&mut self, pkt: Packet, now: Instant) -> Enqueued {
        let r = self.root.enqueue(pkt, now);
        let _ = self.root.take_reduce();
        r
    }

    /// Ask the root qdisc for the next packet to put on the wire. (The root's backlog
    /// reports go nowhere; they are cleared before rather than after the call so that
    /// the packet is returned straight from the root, not copied through a local.)
    pub fn dequeue(&mut self, now: Instant) -> Dequeued {
        self.estimators(now);
        let _ = self.root.take_reduce();
        let mut d = self.root.dequeue(now);
        if let Dequeued::Packet(p) = &mut d {
            p.unstab();
        }
        d
    }
}

impl Device {
    /// Run the estimator ticks due at or before `now` (see [`crate::estimator`]):
    /// one comparison unless one is due. Every call that changes counters, and every
    /// tc command, starts with it.
    #[inline]
    pub fn estimators(&mut self, now: Instant) {
        if now.as_nanos() >= self.est_next {
            self.tick_estimators(now);
        }
    }

    /// Every qdisc's and class's estimator caught up to `now`, and the next tick
    /// found. (Whole-tree walk, at most once per estimator period.)
    #[cold]
    #[inline(never)]
    fn tick_estimators(&mut self, now: Instant) {
        fn go(n: &mut Node, now: Instant, next: &mut u64) {
            if let Some(e) = n.est.as_deref_mut() {
                if let Some(own) = &mut e.own {
                    own.catch_up(now, n.sch.stats.bytes, n.sch.stats.packets);
                    *next = (*next).min(own.next_tick().as_nanos());
                }
                if let Some(c) = n.q.as_classful().filter(|_| !e.classes.is_empty()) {
                    for (&minor, est) in e.classes.iter_mut() {
                        let s = c.class_stats(minor).unwrap_or_default();
                        est.catch_up(now, s.bytes, s.packets);
                        *next = (*next).min(est.next_tick().as_nanos());
                    }
                }
            }
            if let Some(c) = n.q.as_classful_mut() {
                for m in c.class_minors() {
                    if let Some(ch) = c.leaf_mut(m) {
                        go(ch, now, next);
                    }
                }
            }
        }
        let mut next = u64::MAX;
        go(&mut self.root, now, &mut next);
        if let Some(i) = &mut self.ingress {
            go(i, now, &mut next);
        }
        self.est_next = next;
    }
}

/// `qdisc_get_stab`: the table a request gives a qdisc, or the kernel's refusal.
fn size_table(req: Option<&StabRequest>) -> Result<Option<std::sync::Arc<SizeTable>>, TcError> {
    match req {
        None => Ok(None),
        Some(StabRequest::Table(t)) => Ok(Some(std::sync::Arc::new(t.clone()))),
        Some(StabRequest::Refused(e)) => Err(TcError::with_errno(e, Errno::EINVAL)),
    }
}

impl TcError {
    /// A kernel refusal with an extack message (the errno only matters for the exit path).
    pub fn with_errno(extack: &str, _e: Errno) -> Self {
        TcError::kernel(extack)
    }
}
