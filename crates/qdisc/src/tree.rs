//! A device and its qdisc tree — the parts of net/sched/sch_api.c and
//! sch_generic.c that decide where qdiscs live (§1.7 of the reference):
//! default attachment, handle allocation, `tc_modify_qdisc`'s create/change/graft
//! decision table, deletion, refcounts, and the order dumps list qdiscs in.

use std::cmp::Reverse;

use crate::packet::Packet;
use crate::qdisc::{tc_h_maj, tc_h_min, Dequeued, DevInfo, Enqueued, Node, TC_H_ROOT, TC_H_UNSPEC};
use crate::sched::ingress::{INGRESS_HANDLE, TC_H_INGRESS};
use crate::sched::{self, mq, noqueue, pfifo_fast, Opts};
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
}

/// `NAME[,kind=veth|eth][,txqueues=N][,mtu=N][,txqueuelen=N]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevSpec {
    pub name: String,
    pub kind: DevKind,
    pub txqueues: u32,
    pub mtu: u32,
    pub txqueuelen: u32,
}

impl DevSpec {
    pub fn new(name: &str) -> Self {
        DevSpec { name: name.into(), kind: DevKind::Eth, txqueues: 1, mtu: 1500, txqueuelen: 1000 }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = s.split(',');
        let name = parts.next().unwrap_or("");
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '=']) {
            return Err(format!("invalid device name \"{name}\" (1-15 characters, no '/', '=' or spaces)"));
        }
        let mut d = DevSpec::new(name);
        for p in parts {
            let (k, v) = p.split_once('=').ok_or_else(|| format!("device option \"{p}\" is not KEY=VALUE"))?;
            let num = || v.parse::<u32>().map_err(|_| format!("device option {k}: \"{v}\" is not a number"));
            match k {
                "kind" => {
                    d.kind = match v {
                        "eth" => DevKind::Eth,
                        "veth" => DevKind::Veth,
                        _ => return Err(format!("device kind \"{v}\" is not eth or veth")),
                    }
                }
                "txqueues" => {
                    d.txqueues = num()?;
                    if !(1..=4096).contains(&d.txqueues) {
                        return Err("txqueues must be 1..4096".into());
                    }
                }
                "mtu" => {
                    d.mtu = num()?;
                    if !(68..=65535).contains(&d.mtu) {
                        return Err("mtu must be 68..65535".into());
                    }
                }
                "txqueuelen" => d.txqueuelen = num()?,
                _ => return Err(format!("unknown device option \"{k}\" (kind, txqueues, mtu, txqueuelen)")),
            }
        }
        Ok(d)
    }
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
    /// Next `qdisc_hash_add` insertion number.
    seq: u64,
}

/// `hash_32(handle, 4)`: the bucket of the device's 16-bucket qdisc hash.
fn bucket(handle: u32) -> u32 {
    handle.wrapping_mul(0x61C8_8647) >> 28
}

impl Device {
    pub fn new(spec: &DevSpec) -> Self {
        let info = DevInfo {
            name: spec.name.clone(),
            mtu: spec.mtu,
            hard_header_len: 14,
            tx_queue_len: spec.txqueuelen,
            num_tx_queues: spec.txqueues,
        };
        let mut d = Device {
            info,
            kind: spec.kind,
            root: Node::new(0, TC_H_ROOT, Box::new(noqueue::Noop::default())),
            ingress: None,
            seq: 0,
        };
        d.root = d.default_root();
        d.hash_new();
        d
    }

    /// `attach_default_qdiscs`.
    fn default_root(&self) -> Node {
        let mut n = if self.kind == DevKind::Veth {
            Node::new(0, TC_H_ROOT, Box::new(noqueue::Noqueue::default()))
        } else if self.info.num_tx_queues > 1 {
            match mq::Mq::new(&self.info, 0, TC_H_ROOT) {
                Ok(m) => return Node::new(0, TC_H_ROOT, Box::new(m)),
                Err(_) => Node::new(0, TC_H_ROOT, Box::new(noqueue::Noqueue::default())),
            }
        } else {
            match pfifo_fast::PfifoFast::new(&self.info) {
                Ok(p) => Node::new(0, TC_H_ROOT, Box::new(p)),
                // "If setup fails, the device falls back to noqueue."
                Err(_) => Node::new(0, TC_H_ROOT, Box::new(noqueue::Noqueue::default())),
            }
        };
        // txq 0's own default qdisc, also referenced by dev->qdisc (every tx queue
        // of a noqueue device gets its own).
        n.refcnt = 2;
        n
    }

    /// `qdisc_hash_add` for every node that joined the tree since the last call,
    /// children before their parent (init creates them first).
    fn hash_new(&mut self) {
        fn walk(n: &mut Node, seq: &mut u64) {
            if let Some(c) = n.q.as_classful_mut() {
                for m in c.class_minors() {
                    if let Some(ch) = c.leaf_mut(m) {
                        walk(ch, seq);
                    }
                }
            }
            if n.seq == 0 && n.parent != TC_H_ROOT && n.q.kind() != "noop" {
                *seq += 1;
                n.seq = *seq;
            }
        }
        walk(&mut self.root, &mut self.seq);
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

    pub fn node(&self, path: &[u32]) -> &Node {
        if path == [INGRESS] {
            return self.ingress.as_ref().expect("ingress path");
        }
        let mut n = &self.root;
        for &m in path {
            n = n.q.as_classful().and_then(|c| c.leaf(m)).expect("valid path");
        }
        n
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

    /// `qdisc_lookup`: the root, then the hashed qdiscs.
    pub fn lookup(&self, handle: u32) -> Option<Path> {
        if handle == 0 {
            return None;
        }
        self.walk()
            .into_iter()
            .find(|(p, n)| n.handle == handle && (p.is_empty() || n.seq != 0 || p == &[INGRESS]))
            .map(|(p, _)| p)
    }

    /// The order `tc qdisc show` lists this device's qdiscs in: the root, then the
    /// hash buckets in order, newest first within a bucket (`tc_dump_qdisc_root`).
    pub fn dump_order(&self, invisible: bool) -> Vec<Path> {
        let mut hashed: Vec<(Path, &Node)> = self
            .walk()
            .into_iter()
            .filter(|(p, n)| !p.is_empty() && n.seq != 0 && (invisible || !n.invisible))
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
        let c = parent.q.as_classful().ok_or_else(|| TcError::kernel("Parent qdisc is not classful"))?;
        if c.leaf(tc_h_min(clid)).is_none() || tc_h_min(clid) == 0 {
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
        autohandle: &mut u32,
        now: Instant,
    ) -> Result<(), TcError> {
        let kind_differs = |n: &Node| kind.is_some_and(|k| k != n.q.kind());
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
            let q_path = q_path.filter(|p| {
                let n = self.node(p);
                n.handle != 0 && n.q.kind() != "noop"
            });
            let mut goto_create = false;
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
                            if flags.excl {
                                return Err(TcError::with_errno("Exclusivity flag on, cannot override", Errno::EEXIST));
                            }
                            if kind_differs(self.node(&found)) {
                                return Err(TcError::kernel("Invalid qdisc name: must match existing qdisc"));
                            }
                            if parent_path.as_ref() == Some(&found) {
                                return Err(TcError::with_errno("Qdisc parent/child loop detected", Errno::ELOOP));
                            }
                            // Grafting an existing qdisc into a second place makes the kernel
                            // share it between two parents; owned trees cannot do that.
                            return Err(TcError::kernel(
                                "qdisc-lab: attaching an existing qdisc at a second place is not supported",
                            ));
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
                                let f = NlFlags { create: true, ..flags };
                                return self.create_and_graft(
                                    f,
                                    clid,
                                    handle,
                                    kind,
                                    opts,
                                    parent_path,
                                    autohandle,
                                    now,
                                );
                            }
                        }
                        Some(_) => {}
                    }
                }
            }
            if goto_create {
                return self.create_and_graft(flags, clid, handle, kind, opts, parent_path, autohandle, now);
            }
            return self.change(flags, q_path, kind, opts, now);
        }
        if handle == 0 {
            return Err(TcError::kernel("Handle cannot be zero"));
        }
        let q = self.lookup(handle);
        self.change(flags, q, kind, opts, now)
    }

    /// The "Change qdisc parameters" tail of tc_modify_qdisc, then `qdisc_change`.
    fn change(
        &mut self,
        flags: NlFlags,
        q: Option<Path>,
        kind: Option<&str>,
        opts: Option<&Opts>,
        now: Instant,
    ) -> Result<(), TcError> {
        let q = q.ok_or_else(|| TcError::with_errno("Specified qdisc not found", Errno::ENOENT))?;
        if flags.excl {
            return Err(TcError::with_errno("Exclusivity flag on, cannot modify", Errno::EEXIST));
        }
        let info = self.info.clone();
        let n = self.node_mut(&q);
        if kind.is_some_and(|k| k != n.q.kind()) {
            return Err(TcError::kernel("Invalid qdisc name: must match existing qdisc"));
        }
        if let Some(o) = opts {
            let before = (n.q.stats().qlen, n.q.stats().backlog);
            n.q.change(o, &info, now)?;
            let after = (n.q.stats().qlen, n.q.stats().backlog);
            // A change that shrank the queue reports it up (e.g. prio losing bands).
            let mut r = n.q.take_reduce();
            if r.is_zero() && before != after {
                r.add(before.0 as i32 - after.0 as i32, before.1 as i64 - after.1 as i64);
            }
            self.reduce_ancestors(&q, r);
        }
        self.hash_new();
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
        parent_path: Option<Path>,
        autohandle: &mut u32,
        now: Instant,
    ) -> Result<(), TcError> {
        if !flags.create {
            return Err(TcError::with_errno("Qdisc not found. To create specify NLM_F_CREATE flag", Errno::ENOENT));
        }
        // qdisc_create
        let kind = kind.unwrap_or("");
        if !sched::KINDS.contains(&kind) {
            return Err(TcError::with_errno("Specified qdisc kind is unknown", Errno::ENOENT));
        }
        let handle = if clid == TC_H_INGRESS {
            INGRESS_HANDLE
        } else if handle == 0 {
            self.alloc_handle(autohandle)?
        } else {
            handle
        };
        let q = sched::create(kind, opts, &self.info, handle, clid, now)?;
        let mut node = Node::new(handle, clid, q);
        if clid == TC_H_INGRESS {
            self.ingress = Some(node);
            return Ok(());
        }
        if node.q.kind() == "ingress" {
            return Err(TcError::kernel("Specified parent ID is reserved for ingress and clsact Qdiscs"));
        }
        // qdisc_graft
        match parent_path {
            None => {
                // Root: one reference per tx queue, plus dev->qdisc, unless the
                // qdisc attaches itself to the queues (mq).
                node.refcnt = if node.q.kind() == "mq" { 1 } else { self.info.num_tx_queues + 1 };
                self.root = node;
            }
            Some(pp) => {
                if node.q.kind() == "noqueue" {
                    return Err(TcError::kernel("Cannot assign noqueue to a class"));
                }
                let depth = pp.len() + 1;
                if depth > 7 {
                    return Err(TcError::errno(Errno::E2BIG));
                }
                self.graft(&pp, tc_h_min(clid), Some(node), now)?;
            }
        }
        self.hash_new();
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
        let mq_parent = parent.q.kind() == "mq";
        let c = parent.q.as_classful_mut().ok_or_else(|| TcError::errno(Errno::EOPNOTSUPP))?;
        let old = c.graft(minor, new, &info)?;
        if let Some(mut old) = old {
            let (qlen, backlog) = (old.q.stats().qlen, old.q.stats().backlog);
            old.q.reset(now);
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
            if n.q.kind() == "mq" {
                break;
            }
            r.apply(n.q.stats_mut());
        }
    }

    // ---- tc_get_qdisc (RTM_DELQDISC) -------------------------------------------

    pub fn delete(&mut self, clid: u32, handle: u32, kind: Option<&str>, now: Instant) -> Result<(), TcError> {
        let mut parent_path = None;
        let q = if clid != TC_H_UNSPEC {
            let q = if clid == TC_H_INGRESS {
                self.ingress.as_ref().map(|_| vec![INGRESS])
            } else if clid != TC_H_ROOT {
                let p = self
                    .lookup(tc_h_maj(clid))
                    .ok_or_else(|| TcError::with_errno("Failed to find qdisc with specified classid", Errno::ENOENT))?;
                let (pp, leaf) = self.leaf_path(clid)?;
                debug_assert_eq!(p, pp);
                parent_path = Some(pp);
                Some(leaf).filter(|l| self.node(l).q.kind() != "noop")
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
        if kind.is_some_and(|k| k != self.node(&q).q.kind()) {
            return Err(TcError::kernel("Invalid qdisc name: must match existing qdisc"));
        }
        if clid == TC_H_UNSPEC {
            return Err(TcError::kernel("Classid cannot be zero"));
        }
        if self.node(&q).handle == 0 {
            return Err(TcError::with_errno("Cannot delete qdisc with handle of zero", Errno::ENOENT));
        }
        match parent_path {
            None if q == [INGRESS] => self.ingress = None,
            // Root deleted: the device is reactivated with its default qdisc.
            None => {
                self.root = self.default_root();
                self.hash_new();
            }
            Some(pp) => {
                let minor = *q.last().expect("leaf path");
                self.graft(&pp, minor, None, now)?;
                self.hash_new();
            }
        }
        Ok(())
    }

    // ---- datapath ----------------------------------------------------------------

    /// Hand a packet to the device's root qdisc.
    pub fn enqueue(&mut self, pkt: Packet, now: Instant) -> Enqueued {
        let r = self.root.q.enqueue(pkt, now);
        let _ = self.root.q.take_reduce();
        r
    }

    /// Ask the root qdisc for the next packet to put on the wire.
    pub fn dequeue(&mut self, now: Instant) -> Dequeued {
        let d = self.root.q.dequeue(now);
        let _ = self.root.q.take_reduce();
        d
    }
}

impl TcError {
    /// A kernel refusal with an extack message (the errno only matters for the exit path).
    pub fn with_errno(extack: &str, _e: Errno) -> Self {
        TcError::kernel(extack)
    }
}
