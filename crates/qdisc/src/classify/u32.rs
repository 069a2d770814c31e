//! u32 — the "universal 32-bit key" classifier: net/sched/cls_u32.c (kernel side)
//! and tc/f_u32.c (tc's parser and printer).
//!
//! Theory: filters ("key nodes") live in hash tables; a key node holds 32-bit
//! value/mask pairs read at offsets from the network header, and either names a
//! class (`flowid`, which makes it terminal) or links to another hash table, into
//! which lookup descends (choosing the bucket by hashing a masked header word and
//! optionally moving the header offset forward). Every proto (pref) gets a root
//! table `800:`-style handle; all hash tables of one qdisc — its own block's and its
//! classes' — share one handle space and list (`tc_u_common`), which is also why a
//! dump of one pref shows every table created with that pref in the qdisc.
//!
//! Key nodes keep CONFIG_CLS_U32_PERF's counters (`tc_u32_pcnt`) always; they are
//! dumped only for kernels built with it ([`crate::tree::KernelVersion::u32_perf`]).
//! A terminal key node runs its actions ([`super::action`]); a "continue" verdict
//! lets the lookup go on with the next node, as `u32_classify` does.
//!
//! `mark VALUE MASK` is CONFIG_CLS_U32_MARK: Debian's 6.12 is built with it (every key
//! node then has a mark match, 0/0 unless given, counting its successes, and dumps it
//! when given); this CI host's 6.18 is not, and ignores the attribute
//! ([`crate::tree::KernelVersion::u32_mark`]).
//!
//! `indev DEV` (TCA_U32_INDEV) makes a terminal node match only packets whose
//! `skb_iif` is that device's ifindex (`tcf_match_indev`, checked after the keys and
//! before the hit is counted): a packet received on DEV, at its ingress hook or
//! forwarded from it; never one this host sent (`skb_iif` 0).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use super::action::{ActCtx, Exts, ExtsSpec};
use super::{Headers, TcfResult, ETH_P_IP, ETH_P_IPV6};
use crate::packet::Packet;
use crate::tc::{matches, Args, Out, TcError};
use crate::time::Instant;

use super::FilterError;

pub const TC_U32_TERMINAL: u8 = 1;
pub const TC_U32_OFFSET: u8 = 2;
pub const TC_U32_VAROFFSET: u8 = 4;
pub const TC_U32_EAT: u8 = 8;
const TC_U32_ROOT: u32 = 0xFFF0_0000;
/// IFNAMSIZ: a device name's buffer, its NUL included.
const IFNAMSIZ: usize = 16;
const TC_U32_MAXDEPTH: usize = 8;
/// TCA_CLS_FLAGS_SKIP_HW / SKIP_SW / NOT_IN_HW.
pub const SKIP_HW: u32 = 1;
pub const SKIP_SW: u32 = 2;
pub const NOT_IN_HW: u32 = 8;

fn htid_of(h: u32) -> u32 {
    h & 0xFFF0_0000
}
fn hash_of(h: u32) -> u32 {
    (h >> 12) & 0xFF
}
fn node_of(h: u32) -> u32 {
    h & 0xFFF
}
fn key_of(h: u32) -> u32 {
    h & 0xFFFFF
}

/// `struct tc_u32_key`, values in host order of the big-endian header words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub val: u32,
    pub mask: u32,
    pub off: i32,
    pub offmask: i32,
}

/// `struct tc_u32_sel`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sel {
    pub flags: u8,
    pub offshift: u8,
    /// Host order (`ntohs` of the kernel's field).
    pub offmask: u16,
    pub off: u16,
    pub offoff: i16,
    pub hoff: i16,
    /// Host order.
    pub hmask: u32,
    pub keys: Vec<Key>,
}

/// What tc's `u32_parse_opt` sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct U32Opts {
    /// TCA_OPTIONS present at all (tc sends none when no option follows `u32`).
    pub present: bool,
    pub sel: Option<Sel>,
    pub classid: Option<u32>,
    pub divisor: Option<u32>,
    pub link: Option<u32>,
    pub hash: Option<u32>,
    pub flags: Option<u32>,
    /// TCA_U32_MARK: value and mask (the last `mark` given).
    pub mark: Option<(u32, u32)>,
    /// TCA_U32_INDEV: the name tc sends (at most IFNAMSIZ bytes), with the ifindex
    /// `tcf_change_indev`'s `__dev_get_by_name` finds for it in the netns, looked up
    /// where the request is parsed, which knows the netns's links (None: no such
    /// device).
    pub indev: Option<(String, Option<u32>)>,
    /// `action …` / `police …`.
    pub exts: ExtsSpec,
}

/// `struct tc_u32_pcnt`: a key node's hit counters (CONFIG_CLS_U32_PERF). Shared by
/// the versions of a node that `change` makes, as the kernel moves the pointer.
#[derive(Debug, Default)]
pub struct Pcnt {
    /// Times the node was looked at.
    pub rcnt: AtomicU64,
    /// Times it matched as a terminal node.
    pub rhit: AtomicU64,
    /// Per key: times that key matched.
    pub kcnts: Vec<AtomicU64>,
    /// Walks the indexed lookup ([`Fast`]) ended at this node, having looked at
    /// every node before it in its bucket: added to their `rcnt` by [`flush_stops`].
    pub stops: AtomicU64,
}

impl Pcnt {
    fn new(nkeys: usize) -> Arc<Pcnt> {
        Arc::new(Pcnt { kcnts: (0..nkeys).map(|_| AtomicU64::new(0)).collect(), ..Default::default() })
    }
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A key node (`struct tc_u_knode`).
#[derive(Clone, Debug)]
pub struct Knode {
    pub handle: u32,
    pub sel: Sel,
    pub classid: u32,
    /// `res.class`: the class the node is bound to ([`super::Binds::bind`]).
    pub class: Option<u32>,
    /// Handle of the hash table linked below, 0 = none.
    pub link: u32,
    pub fshift: u32,
    pub flags: u32,
    pub pf: Arc<Pcnt>,
    /// CONFIG_CLS_U32_MARK's match (`val`, `mask`, `pcpu_success`); None on kernels
    /// built without it.
    pub mark: Option<Mark>,
    /// `ifindex` (0: any) and the device's name, which the dump gives.
    pub indev: (u32, String),
    pub exts: Exts,
}

/// A key node's mark match: `skb->mark & mask` must equal `val`; `success` counts the
/// packets that passed it (shared by the versions of a node `change` makes).
#[derive(Clone, Debug)]
pub struct Mark {
    pub val: u32,
    pub mask: u32,
    pub success: Arc<AtomicU64>,
}

/// A hash table (`struct tc_u_hnode`). `divisor` is stored minus one, as the kernel does.
#[derive(Clone, Debug)]
pub struct Ht {
    pub handle: u32,
    pub prio: u16,
    pub divisor: u32,
    pub is_root: bool,
    pub refcnt: u32,
    pub buckets: Vec<Vec<Knode>>,
    /// The index of a flat bucket 0 (see [`Fast`]), built at the first lookup after
    /// a change; None inside when the bucket does not qualify.
    fast: OnceLock<Option<Fast>>,
}

/// An index over a bucket whose nodes are all plain terminal matches of one word at
/// the same offset under the same mask (no mark but 0/0, no link, no offset mask,
/// not skip_sw): the node positions by key value, ascending. The walk `u32_classify`
/// makes over such a bucket only ever succeeds at those positions, so the lookup
/// visits them alone; the `rcnt` the walk would have counted on every node before
/// the one it ended at is kept as one count on that node ([`Pcnt::stops`]) and
/// spread when the counters are read or the table changes.
#[derive(Clone, Debug)]
struct Fast {
    off: i64,
    mask: u32,
    by_val: HashMap<u32, Vec<usize>>,
}

impl Fast {
    fn build(bucket: &[Knode]) -> Option<Fast> {
        let first = bucket.first()?.sel.keys.first()?;
        let (off, mask) = (first.off, first.mask);
        let mut by_val: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, n) in bucket.iter().enumerate() {
            let [k] = &n.sel.keys[..] else { return None };
            // A mark of 0/0 (what CONFIG_CLS_U32_MARK gives a node without one) passes
            // every packet and counts each visit.
            let plain = n.mark.as_ref().is_none_or(|m| m.mask == 0 && m.val == 0)
                && n.link == 0
                && n.indev.0 == 0
                && n.sel.flags & TC_U32_TERMINAL != 0
                && n.flags & SKIP_SW == 0
                && k.offmask == 0
                && k.off == off
                && k.mask == mask
                && k.val & !mask == 0;
            if !plain {
                return None;
            }
            by_val.entry(k.val).or_default().push(i);
        }
        Some(Fast { off: off as i64, mask, by_val })
    }
}

/// Spread the indexed lookups' `stops` into the `rcnt` (and the 0/0 mark's
/// success) of the nodes they passed.
fn flush_stops(ht: &Ht) {
    for b in &ht.buckets {
        let mut acc = 0;
        for n in b.iter().rev() {
            acc += n.pf.stops.swap(0, Ordering::Relaxed);
            if acc != 0 {
                n.pf.rcnt.fetch_add(acc, Ordering::Relaxed);
                if let Some(m) = &n.mark {
                    m.success.fetch_add(acc, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Ht {
    fn new(handle: u32, prio: u16, divisor: u32, is_root: bool) -> Ht {
        Ht {
            handle,
            prio,
            divisor,
            is_root,
            refcnt: 1,
            buckets: vec![Vec::new(); divisor as usize + 1],
            fast: OnceLock::new(),
        }
    }
    fn key(&self, handle: u32) -> Option<&Knode> {
        let b = hash_of(handle);
        if b > self.divisor {
            return None;
        }
        self.buckets[b as usize].iter().find(|n| n.handle == handle)
    }
    fn used(&self, handle: u32) -> bool {
        self.key(handle).is_some()
    }
    /// `gen_new_kid`: the lowest free node id from 0x800, else from 1, else 0xFFF. The
    /// ids `htid` can get all hash to its bucket: one pass over it.
    fn new_kid(&self, htid: u32) -> u32 {
        let mut taken = [false; 0x1000];
        let b = hash_of(htid);
        if b <= self.divisor {
            for n in self.buckets[b as usize].iter().filter(|n| n.handle & !0xFFF == htid) {
                taken[node_of(n.handle) as usize] = true;
            }
        }
        let free = |lo: u32| (lo..=0xFFF).find(|&id| !taken[id as usize]).map(|id| htid | id);
        free(0x800).or_else(|| free(node_of(htid) + 1)).unwrap_or(htid | 0xFFF)
    }
}

/// A qdisc's shared u32 state (`struct tc_u_common`).
#[derive(Debug, Default)]
pub struct Common {
    /// `hlist`: newest first.
    pub hts: Vec<Ht>,
    /// `idr_alloc_cyclic`'s next id for table handles.
    idr_next: u32,
    /// Protos using this common.
    pub refcnt: u32,
    /// Key nodes in all tables.
    pub knodes: usize,
    /// Classids bound key nodes stopped naming (-1) since the last
    /// [`Common::take_bound_changes`] (`tcf_unbind_filter` of the nodes a table
    /// clear or a delete takes, in whichever proto's table they were): tc's bind
    /// bookkeeping follows an operation's changes instead of comparing every filter
    /// before and after it.
    bound_log: Vec<(u32, i32)>,
}

impl Common {
    /// The classids bound key nodes stopped naming since the last call, for
    /// `tcf_unbind_filter`.
    pub fn take_bound_changes(&mut self) -> Vec<(u32, i32)> {
        std::mem::take(&mut self.bound_log)
    }
    /// `tcf_unbind_filter` of a node that goes.
    fn unbind(&mut self, n: &Knode) {
        if n.class.is_some() {
            self.bound_log.push((n.classid, -1));
        }
    }
    fn ht(&self, handle: u32) -> Option<&Ht> {
        self.hts.iter().find(|h| h.handle == handle)
    }
    fn ht_mut(&mut self, handle: u32) -> Option<&mut Ht> {
        self.hts.iter_mut().find(|h| h.handle == handle)
    }
    /// `gen_new_htid`: cyclic ids 1..0x7FE, as `(id | 0x800) << 20`.
    fn new_htid(&mut self) -> Option<u32> {
        let used = |c: &Common, id: u32| c.hts.iter().any(|h| h.handle == (id | 0x800) << 20);
        let start = self.idr_next.clamp(1, 0x7FE);
        let id = (start..0x7FF).chain(1..start).find(|&id| !used(self, id))?;
        self.idr_next = id + 1;
        Some((id | 0x800) << 20)
    }
}

/// One u32 proto: its root table in the qdisc's common.
pub struct Tp {
    pub(crate) common: Arc<RwLock<Common>>,
    pub(crate) root: u32,
    pub(crate) pref: u16,
}

/// A filter handle inside a u32 proto (`u32_get`'s answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fh {
    Ht(u32),
    Key(u32),
}

/// u32 behind the classifier trait: filter handles are table or key-node handles
/// (`get` answers either), the qdisc's [`Common`] is the kind's shared state, and the
/// binding changes the common logs are handed to the caller after each operation.
impl super::Classifier for Tp {
    fn kind(&self) -> &'static str {
        "u32"
    }
    fn classify(
        &self,
        pkt: &mut crate::packet::Packet,
        hdr: &Headers,
        _: u32,
        now: Instant,
    ) -> Option<(i32, TcfResult)> {
        Tp::classify(self, hdr, pkt, now)
    }
    fn get(&self, handle: u32) -> Option<u32> {
        Tp::get(self, handle).map(|(Fh::Ht(h) | Fh::Key(h))| h)
    }
    fn change(
        &mut self,
        handle: u32,
        opts: Option<&dyn std::any::Any>,
        _tmplt: Option<&dyn std::any::Any>,
        fh: Option<u32>,
        acts: &mut ActCtx,
        binds: &mut super::Binds,
    ) -> Result<(), FilterError> {
        let fh = fh.and_then(|_| Tp::get(self, handle));
        write_common(&self.common).take_bound_changes(); // not this change's doing
        let r = super::with_opts(opts, |o: &U32Opts| Tp::change(self, handle, o, fh, acts, binds));
        binds.extend(write_common(&self.common).take_bound_changes());
        r
    }
    fn delete(&mut self, handle: u32, binds: &mut super::Binds) -> Result<bool, FilterError> {
        let fh = Tp::get(self, handle).ok_or(FilterError::ext("Specified filter handle not found"))?;
        self.logged(binds, |t| Tp::delete(t, fh))
    }
    fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        Tp::dump(self, ctx, out)
    }
    /// Every key node of the tables with this proto's pref, as `u32_walk` visits them.
    fn for_each_class(&self, f: &mut dyn FnMut(TcfResult)) {
        let c = read_common(&self.common);
        c.hts
            .iter()
            .filter(|h| h.prio == self.pref)
            .flat_map(|h| h.buckets.iter().flatten())
            .for_each(|k| f(TcfResult { classid: k.classid, class: k.class }));
    }
    fn for_each_class_mut(&mut self, f: &mut dyn FnMut(u32, &mut Option<u32>)) {
        let mut c = write_common(&self.common);
        let pref = self.pref;
        c.hts
            .iter_mut()
            .filter(|h| h.prio == pref)
            .flat_map(|h| h.buckets.iter_mut().flatten())
            .for_each(|k| f(k.classid, &mut k.class));
    }
    fn for_each_exts(&self, f: &mut dyn FnMut(&super::action::Exts)) {
        let c = read_common(&self.common);
        c.hts.iter().filter(|h| h.prio == self.pref).flat_map(|h| h.buckets.iter().flatten()).for_each(|k| f(&k.exts));
    }
    /// The root table's key nodes go (every table's with the last proto): the
    /// unbindings are the ones the common logs.
    fn destroy(self: Box<Self>, binds: &mut super::Binds) -> bool {
        let common = self.common.clone();
        write_common(&common).take_bound_changes(); // not this destroy's doing
        let gone = Tp::destroy(*self);
        binds.extend(write_common(&common).take_bound_changes());
        gone
    }
    fn shared(&self) -> Option<super::Shared> {
        Some(self.common.clone())
    }
}

fn read_common(c: &Arc<RwLock<Common>>) -> std::sync::RwLockReadGuard<'_, Common> {
    c.read().unwrap_or_else(|e| e.into_inner())
}
/// The common for a change: the indexed lookups' counts are spread first (node
/// positions may move) and the indexes dropped (rebuilt at the next lookup).
fn write_common(c: &Arc<RwLock<Common>>) -> std::sync::RwLockWriteGuard<'_, Common> {
    let mut g = c.write().unwrap_or_else(|e| e.into_inner());
    for ht in &mut g.hts {
        flush_stops(ht);
        ht.fast = OnceLock::new();
    }
    g
}

impl Tp {
    /// The registration's `init`: `shared` is the qdisc's [`Common`], if it has one.
    pub fn new_proto(shared: Option<super::Shared>, pref: u16) -> Result<Box<dyn super::Classifier>, FilterError> {
        let common = shared.map(|s| s.downcast::<RwLock<Common>>().expect("u32's shared state is its common"));
        Ok(Box::new(Tp::init(common, pref)?))
    }

    /// Run `op`, handing the binding changes the common logs for it to `binds`
    /// (whatever was logged before is not its doing).
    fn logged<R>(&mut self, binds: &mut super::Binds, op: impl FnOnce(&mut Tp) -> R) -> R {
        write_common(&self.common).take_bound_changes();
        let r = op(self);
        binds.extend(write_common(&self.common).take_bound_changes());
        r
    }

    /// `u32_init`: a root table, `800:` when the qdisc has no u32 common yet,
    /// otherwise the next cyclic id; `common` is the qdisc's existing one, if any.
    pub fn init(common: Option<Arc<RwLock<Common>>>, pref: u16) -> Result<Tp, FilterError> {
        let (common, handle) = match common {
            Some(c) => {
                let h = write_common(&c).new_htid().ok_or(FilterError::Errno("Cannot allocate memory"))?;
                (c, h)
            }
            None => (Arc::new(RwLock::new(Common::default())), 0x8000_0000),
        };
        {
            let mut c = write_common(&common);
            c.refcnt += 1;
            c.hts.insert(0, Ht::new(handle, pref, 0, true));
        }
        Ok(Tp { common, root: handle, pref })
    }

    /// `u32_destroy`: drop the root table (if nothing links to it) and, with the
    /// last proto, every table of the common. Returns true when the common is gone.
    pub fn destroy(self) -> bool {
        let mut c = write_common(&self.common);
        if let Some(i) = c.hts.iter().position(|h| h.handle == self.root) {
            c.hts[i].refcnt -= 1;
            if c.hts[i].refcnt == 0 {
                let ht = c.hts.remove(i);
                clear(&mut c, &ht);
            }
        }
        c.refcnt -= 1;
        if c.refcnt == 0 {
            for ht in std::mem::take(&mut c.hts) {
                ht.buckets.iter().flatten().for_each(|n| c.unbind(n));
            }
            c.knodes = 0;
            return true;
        }
        false
    }

    /// `u32_get`.
    pub fn get(&self, handle: u32) -> Option<Fh> {
        let c = read_common(&self.common);
        let ht = if htid_of(handle) == TC_U32_ROOT { c.ht(self.root)? } else { c.ht(htid_of(handle))? };
        if key_of(handle) == 0 {
            return Some(Fh::Ht(ht.handle));
        }
        ht.key(handle).map(|n| Fh::Key(n.handle))
    }

    /// Is the proto empty (no key nodes anywhere in the common, and it is the only
    /// user)? — `u32_delete`'s `*last`.
    fn last(c: &Common) -> bool {
        c.refcnt == 1 && c.knodes == 0
    }

    /// `u32_delete`. Returns `last`.
    pub fn delete(&mut self, fh: Fh) -> Result<bool, FilterError> {
        let mut c = write_common(&self.common);
        match fh {
            Fh::Key(h) => {
                for ht in c.hts.iter_mut() {
                    for b in ht.buckets.iter_mut() {
                        if let Some(i) = b.iter().position(|n| n.handle == h) {
                            let n = b.remove(i);
                            c.unbind(&n);
                            if n.link != 0 {
                                unlink(&mut c, n.link);
                            }
                            c.knodes -= 1;
                            return Ok(Self::last(&c));
                        }
                    }
                }
                Ok(Self::last(&c))
            }
            Fh::Ht(h) => {
                let i = c.hts.iter().position(|x| x.handle == h).expect("table exists");
                if c.hts[i].is_root {
                    return Err(FilterError::ext("cls_u32: Not allowed to delete root node"));
                }
                if c.hts[i].refcnt != 1 {
                    return Err(FilterError::ext("cls_u32: Can not delete in-use filter"));
                }
                let ht = c.hts.remove(i);
                clear(&mut c, &ht);
                Ok(Self::last(&c))
            }
        }
    }

    /// `u32_change`: create a table, create a key node, or (for an existing key
    /// node `fh`) change its classid/link — the selector of an existing node is kept.
    pub fn change(
        &mut self,
        handle: u32,
        o: &U32Opts,
        fh: Option<Fh>,
        acts: &mut ActCtx,
        binds: &mut super::Binds,
    ) -> Result<(), FilterError> {
        if !o.present {
            return if handle != 0 { Err(FilterError::ext("cls_u32: Filter handle requires options")) } else { Ok(()) };
        }
        let userflags = o.flags.unwrap_or(0);
        if userflags & !(SKIP_HW | SKIP_SW) != 0 || userflags & (SKIP_HW | SKIP_SW) == SKIP_HW | SKIP_SW {
            return Err(FilterError::ext("cls_u32: Invalid filter flags"));
        }
        let mut c = write_common(&self.common);
        if let Some(fh) = fh {
            let Fh::Key(kh) = fh else { return Err(FilterError::ext("cls_u32: Key node id cannot be zero")) };
            let old = find_key(&c, kh).expect("key exists").clone();
            if (old.flags ^ userflags) & !NOT_IN_HW != 0 {
                return Err(FilterError::ext("cls_u32: Key node flags do not match passed flags"));
            }
            let exts = acts.init(&o.exts)?;
            let indev = change_indev(o)?;
            let mut n = old.clone();
            n.exts = exts;
            if let Some(l) = o.link {
                n.link = check_link(&c, l)?;
            }
            // u32_bind_filter: a classid given binds the new node afresh (the old
            // one's class let go, as u32_change's tcf_unbind_filter of the old node).
            if let Some(cl) = o.classid {
                binds.unbind(old.classid, old.class);
                n.classid = cl;
                n.class = if cl != 0 { binds.bind(cl) } else { None };
            }
            if let Some(i) = indev {
                n.indev = i;
            }
            if n.link != old.link {
                if n.link != 0 {
                    c.ht_mut(n.link).expect("linked").refcnt += 1;
                }
                if old.link != 0 {
                    unlink(&mut c, old.link);
                }
            }
            *find_key_mut(&mut c, kh).expect("key exists") = n;
            return Ok(());
        }
        if let Some(d) = o.divisor {
            if !d.is_power_of_two() {
                return Err(FilterError::ext("cls_u32: Divisor is not a power of 2"));
            }
            if d > 0x100 {
                return Err(FilterError::ext("cls_u32: Exceeded maximum 256 hash buckets"));
            }
            if key_of(handle) != 0 {
                return Err(FilterError::ext("cls_u32: Divisor can only be used on a hash table"));
            }
            let h = if handle == 0 {
                c.new_htid().ok_or(FilterError::Errno("Cannot allocate memory"))?
            } else {
                if c.ht(handle).is_some() {
                    return Err(FilterError::Errno("No space left on device"));
                }
                handle
            };
            c.hts.insert(0, Ht::new(h, self.pref, d - 1, false));
            return Ok(());
        }
        let (ht, htid) = match o.hash {
            Some(hs) if htid_of(hs) != TC_U32_ROOT => {
                let ht =
                    c.ht(htid_of(hs)).ok_or_else(|| FilterError::ext("cls_u32: Specified hash table not found"))?;
                (ht.handle, hs)
            }
            _ => (self.root, self.root),
        };
        let divisor = c.ht(ht).expect("table").divisor;
        if divisor < hash_of(htid) {
            return Err(FilterError::ext("cls_u32: Specified hash table buckets exceed configured value"));
        }
        let htid = htid & 0xFFFF_F000;
        let handle = if handle != 0 {
            if htid_of(handle) != 0 && htid_of(handle ^ htid) != 0 {
                return Err(FilterError::ext("cls_u32: Handle specified hash table address mismatch"));
            }
            if node_of(handle) == 0 {
                c.ht(ht).expect("table").new_kid(htid)
            } else {
                let h = htid | node_of(handle);
                if c.ht(ht).expect("table").used(h) {
                    return Err(FilterError::Errno("No space left on device"));
                }
                h
            }
        } else {
            c.ht(ht).expect("table").new_kid(htid)
        };
        let Some(sel) = &o.sel else { return Err(FilterError::ext("cls_u32: Selector not specified")) };
        let exts = acts.init(&o.exts)?;
        let indev = change_indev(o)?.unwrap_or_default();
        let link = match o.link {
            Some(l) => check_link(&c, l)?,
            None => 0,
        };
        if link != 0 {
            c.ht_mut(link).expect("linked").refcnt += 1;
        }
        let n = Knode {
            handle,
            sel: sel.clone(),
            classid: o.classid.unwrap_or(0),
            class: o.classid.filter(|&c| c != 0).and_then(|c| binds.bind(c)),
            link,
            fshift: if sel.hmask != 0 { sel.hmask.trailing_zeros() } else { 0 },
            flags: userflags | NOT_IN_HW,
            pf: Pcnt::new(sel.keys.len()),
            mark: acts.kernel.u32_mark().then(|| {
                let (val, mask) = o.mark.unwrap_or((0, 0));
                Mark { val, mask, success: Arc::new(AtomicU64::new(0)) }
            }),
            indev,
            exts,
        };
        let t = c.ht_mut(ht).expect("table");
        let b = &mut t.buckets[hash_of(handle) as usize];
        let at = b.iter().position(|x| node_of(handle) < node_of(x.handle)).unwrap_or(b.len());
        b.insert(at, n);
        c.knodes += 1;
        Ok(())
    }

    /// Mirrors `u32_classify`: the verdict of the first terminal node that matches
    /// (its `indev` too) and whose actions do not say "continue" (TC_ACT_OK without
    /// actions), with its result.
    pub fn classify(&self, hdr: &Headers, pkt: &mut Packet, now: Instant) -> Option<(i32, TcfResult)> {
        let c = read_common(&self.common);
        let mut stack: Vec<(u32, usize, usize, i64)> = Vec::with_capacity(TC_U32_MAXDEPTH);
        let mut ht = c.ht(self.root)?;
        if ht.divisor == 0 {
            if let Some(f) = ht.fast.get_or_init(|| Fast::build(&ht.buckets[0])) {
                return Self::classify_fast(f, &ht.buckets[0], hdr, pkt, now);
            }
        }
        let mut off: i64 = 0;
        let mut off2: i64 = 0;
        let mut sel: usize = 0;
        let mut i: usize = 0;
        'next_ht: loop {
            // next_knode loop over ht.buckets[sel] from index i.
            loop {
                let bucket = &ht.buckets[sel];
                if let Some(n) = bucket.get(i) {
                    inc(&n.pf.rcnt);
                    if let Some(m) = &n.mark {
                        if pkt.mark & m.mask != m.val {
                            i += 1;
                            continue;
                        }
                        inc(&m.success);
                    }
                    let mut ok = true;
                    for (j, k) in n.sel.keys.iter().enumerate() {
                        let toff = off + k.off as i64 + (off2 & k.offmask as i64);
                        let data = hdr.read_u32(toff)?;
                        if (data ^ k.val) & k.mask != 0 {
                            ok = false;
                            break;
                        }
                        if let Some(c) = n.pf.kcnts.get(j) {
                            inc(c);
                        }
                    }
                    if !ok {
                        i += 1;
                        continue;
                    }
                    if n.link == 0 {
                        if n.sel.flags & TC_U32_TERMINAL != 0 {
                            if let Some(r) = Self::terminal(n, hdr, pkt, now) {
                                return Some(r);
                            }
                        }
                        i += 1;
                        continue;
                    }
                    // PUSH
                    if stack.len() >= TC_U32_MAXDEPTH {
                        return None;
                    }
                    stack.push((ht.handle, sel, i, off));
                    let down = c.ht(n.link)?;
                    let mut s = 0usize;
                    if down.divisor != 0 {
                        let data = hdr.read_u32(off + n.sel.hoff as i64)?;
                        s = (down.divisor & ((data & n.sel.hmask) >> n.fshift)) as usize;
                    }
                    let f = n.sel.flags;
                    if f & (TC_U32_VAROFFSET | TC_U32_OFFSET | TC_U32_EAT) != 0 {
                        if f & (TC_U32_OFFSET | TC_U32_VAROFFSET) != 0 {
                            off2 = n.sel.off as i64 + 3;
                            if f & TC_U32_VAROFFSET != 0 {
                                let d = hdr.read_u16(off + n.sel.offoff as i64)?;
                                off2 += ((n.sel.offmask & d) >> n.sel.offshift) as i64;
                            }
                            off2 &= !3;
                        }
                        if f & TC_U32_EAT != 0 {
                            off += off2;
                            off2 = 0;
                        }
                        if off >= hdr.net_len() {
                            // Falls through to POP.
                            break;
                        }
                    }
                    ht = down;
                    sel = s;
                    i = 0;
                    continue 'next_ht;
                }
                break;
            }
            // POP: back to the node that linked here; it matched, so check terminal.
            let (h, s, idx, o) = stack.pop()?;
            ht = c.ht(h)?;
            sel = s;
            off = o;
            let n = &ht.buckets[sel][idx];
            if n.sel.flags & TC_U32_TERMINAL != 0 {
                if let Some(r) = Self::terminal(n, hdr, pkt, now) {
                    return Some(r);
                }
            }
            i = idx + 1;
        }
    }

    /// The walk over an indexed root bucket ([`Fast`]): only the nodes whose key
    /// equals the packet's word can succeed, in order. A failed read ends the walk
    /// at the first node, as the linear walk's first key read does.
    fn classify_fast(
        f: &Fast,
        bucket: &[Knode],
        hdr: &Headers,
        pkt: &mut Packet,
        now: Instant,
    ) -> Option<(i32, TcfResult)> {
        let stop = |n: &Knode| inc(&n.pf.stops);
        let Some(data) = hdr.read_u32(f.off) else {
            stop(&bucket[0]);
            return None;
        };
        for &p in f.by_val.get(&(data & f.mask)).map_or(&[][..], |v| &v[..]) {
            let n = &bucket[p];
            inc(&n.pf.kcnts[0]);
            if let Some(r) = Self::terminal(n, hdr, pkt, now) {
                stop(n);
                return Some(r);
            }
        }
        stop(bucket.last().expect("an indexed bucket has nodes"));
        None
    }

    /// `check_terminal`: the node's `indev` (`tcf_match_indev`), then count the hit
    /// and run the node's actions; `None` = continue.
    fn terminal(n: &Knode, hdr: &Headers, pkt: &mut Packet, now: Instant) -> Option<(i32, TcfResult)> {
        if n.indev.0 != 0 && n.indev.0 != hdr.iif {
            return None;
        }
        let mut res = TcfResult { classid: n.classid, class: n.class };
        inc(&n.pf.rhit);
        let r = n.exts.exec(pkt, now, &mut res);
        (r >= 0).then_some((r, res))
    }

    /// `u32_walk` + `u32_dump` + tc's `u32_print_opt`: every table of the common
    /// with this proto's pref, each followed by its key nodes.
    pub fn dump(&self, ctx: &super::DumpCtx, out: &mut Out) {
        let c = read_common(&self.common);
        for ht in c.hts.iter().filter(|h| h.prio == self.pref) {
            flush_stops(ht);
            ctx.entry(out, ht.handle, None, |out| {
                print_handle(out, ht.handle);
                out.int("ht_divisor", format_args!("ht divisor {} ", ht.divisor + 1), ht.divisor as i64 + 1);
            });
            for b in &ht.buckets {
                for n in b {
                    ctx.entry(out, n.handle, Some(&n.exts), |out| print_knode(out, n, ctx));
                }
            }
        }
    }
}

/// `u32_set_parms`' `tcf_change_indev`: the device TCA_U32_INDEV names, if sent.
fn change_indev(o: &U32Opts) -> Result<Option<(u32, String)>, FilterError> {
    let Some((name, ifindex)) = &o.indev else { return Ok(None) };
    // nla_strscpy into char[IFNAMSIZ]: the name and its NUL must fit.
    if name.len() >= IFNAMSIZ {
        return Err(FilterError::ext("Interface name too long"));
    }
    match ifindex {
        Some(i) => Ok(Some((*i, name.clone()))),
        None => Err(FilterError::ext("Network device not found")),
    }
}

fn find_key(c: &Common, h: u32) -> Option<&Knode> {
    c.hts.iter().find_map(|t| t.buckets.iter().flatten().find(|n| n.handle == h))
}
fn find_key_mut(c: &mut Common, h: u32) -> Option<&mut Knode> {
    c.hts.iter_mut().find_map(|t| t.buckets.iter_mut().flatten().find(|n| n.handle == h))
}
fn unlink(c: &mut Common, h: u32) {
    if let Some(t) = c.ht_mut(h) {
        t.refcnt -= 1;
    }
}
/// Drop a table's key nodes (`u32_clear_hnode`).
fn clear(c: &mut Common, ht: &Ht) {
    for n in ht.buckets.iter().flatten() {
        c.knodes -= 1;
        c.unbind(n);
        if n.link != 0 {
            unlink(c, n.link);
        }
    }
}
/// The link checks of `u32_set_parms`.
fn check_link(c: &Common, l: u32) -> Result<u32, FilterError> {
    if key_of(l) != 0 {
        return Err(FilterError::ext("cls_u32: u32 Link handle must be a hash table"));
    }
    if l == 0 {
        return Ok(0);
    }
    let t = c.ht(l).ok_or_else(|| FilterError::ext("cls_u32: Link hash table not found"))?;
    if t.is_root {
        return Err(FilterError::ext("cls_u32: Not linking to root node"));
    }
    Ok(l)
}

// ---- tc side: f_u32.c ---------------------------------------------------------------

const USAGE: &str = "Usage: ... u32 [ match SELECTOR ... ] [ link HTID ] [ classid CLASSID ]
               [ action ACTION_SPEC ] [ offset OFFSET_SPEC ]
               [ ht HTID ] [ hashkey HASHKEY_SPEC ]
               [ sample SAMPLE ] [skip_hw | skip_sw]
or         u32 divisor DIVISOR

Where: SELECTOR := SAMPLE SAMPLE ...
       SAMPLE := { ip | ip6 | udp | tcp | icmp | u{32|16|8} | mark }
                 SAMPLE_ARGS [ divisor DIVISOR ]
       FILTERID := X:Y:Z

NOTE: CLASSID is parsed at hexadecimal input.
";

/// `get_u32_handle`: `htid:hash:node` in hex, or a `0x` number.
pub fn get_u32_handle(s: &str) -> Option<u32> {
    let Some(colon) = s.find(':') else {
        return s.strip_prefix("0x").and_then(|h| u32::from_str_radix(h, 16).ok());
    };
    let _ = colon;
    let mut parts = s.splitn(3, ':');
    let p = |t: &str, max: u32| -> Option<u32> {
        if t.is_empty() {
            return Some(0);
        }
        let end = t.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(t.len());
        if end != t.len() {
            return None;
        }
        let v = u64::from_str_radix(t, 16).ok()?;
        (v < max as u64).then_some(v as u32)
    };
    let htid = p(parts.next()?, 0x1000)?;
    let hash = p(parts.next().unwrap_or(""), 0x100)?;
    let node = p(parts.next().unwrap_or(""), 0x1000)?;
    Some((htid << 20) | (hash << 12) | node)
}

/// `sprint_u32_handle`.
pub fn fmt_u32_handle(h: u32, raw: bool) -> String {
    if h == 0 {
        return "none".into();
    }
    let mut s = String::new();
    if htid_of(h) != 0 {
        s.push_str(&format!("{:x}:", h >> 20));
    }
    if hash_of(h) != 0 {
        s.push_str(&format!("{:x}", hash_of(h)));
    }
    if node_of(h) != 0 {
        s.push_str(&format!(":{:x}", node_of(h)));
    }
    if raw {
        s.push_str(&format!("[{h:08x}]"));
    }
    s
}

/// `pack_key`: merge with a key at the same offset or append.
fn pack_key(sel: &mut Sel, key: u32, mask: u32, off: i32, offmask: i32) -> Option<()> {
    let key = key & mask;
    if let Some(k) = sel.keys.iter_mut().find(|k| k.off == off && k.offmask == offmask) {
        if (key ^ k.val) & (mask & k.mask) != 0 {
            return None;
        }
        k.val |= key;
        k.mask |= mask;
        return Some(());
    }
    if sel.keys.len() >= 128 || off % 4 != 0 {
        return None;
    }
    sel.keys.push(Key { val: key, mask, off, offmask });
    Some(())
}
fn pack_key16(sel: &mut Sel, mut key: u32, mut mask: u32, off: i32, offmask: i32) -> Option<()> {
    if key > 0xFFFF || mask > 0xFFFF {
        return None;
    }
    if off & 3 == 0 {
        key <<= 16;
        mask <<= 16;
    }
    pack_key(sel, key, mask, off & !3, offmask)
}
fn pack_key8(sel: &mut Sel, mut key: u32, mut mask: u32, off: i32, offmask: i32) -> Option<()> {
    if key > 0xFF || mask > 0xFF {
        return None;
    }
    let sh = 8 * (3 - (off & 3)) as u32;
    key <<= sh;
    mask <<= sh;
    pack_key(sel, key, mask, off & !3, offmask)
}

fn num(s: &str) -> Option<u32> {
    crate::tc::units::get_u32(s)
}

/// `parse_at`: an optional `at [nexthdr+]OFF`.
fn parse_at(a: &mut Args, off: &mut i32, offmask: &mut i32) -> Option<()> {
    if a.peek() != Some("at") {
        return Some(());
    }
    a.next();
    let mut p = a.next()?;
    if p.len() > 8 && p.starts_with("nexthdr+") {
        *offmask = -1;
        p = &p[8..];
    } else if matches(p, "nexthdr+") {
        *offmask = -1;
        p = a.next()?;
    }
    *off = crate::tc::units::get_integer(p)?;
    Some(())
}

/// `parse_u32`/`parse_u16`/`parse_u8`: VAL MASK [at OFF].
fn parse_un(a: &mut Args, sel: &mut Sel, bits: u32, mut off: i32, mut offmask: i32) -> Option<()> {
    let key = num(a.next()?)?;
    let mask = crate::tc::units::get_u32_base16(a.next()?)?;
    if bits == 8 && (key > 0xFF || mask > 0xFF) {
        return None;
    }
    parse_at(a, &mut off, &mut offmask)?;
    match bits {
        32 => pack_key(sel, key, mask, off, offmask),
        16 => pack_key16(sel, key, mask, off, offmask),
        _ => pack_key8(sel, key, mask, off, offmask),
    }
}

/// `get_prefix_1` for one family: ADDR[/PLEN] (or `default`/`any`/`all`).
pub(crate) fn get_prefix(s: &str, v6: bool) -> Option<(Vec<u8>, u32)> {
    let max = if v6 { 128 } else { 32 };
    if matches!(s, "default" | "any" | "all") {
        return Some((vec![0; if v6 { 16 } else { 4 }], 0));
    }
    let (addr, plen) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let bytes = if v6 {
        addr.parse::<std::net::Ipv6Addr>().ok()?.octets().to_vec()
    } else {
        addr.parse::<std::net::Ipv4Addr>().ok()?.octets().to_vec()
    };
    let bits = match plen {
        Some(p) => {
            let v = num(p)?;
            if v > max {
                return None;
            }
            v
        }
        None => max,
    };
    Some((bytes, bits))
}

fn parse_ip_addr(a: &mut Args, sel: &mut Sel, mut off: i32, v6: bool) -> Option<()> {
    let (addr, bits) = get_prefix(a.next()?, v6)?;
    let mut offmask = 0;
    parse_at(a, &mut off, &mut offmask)?;
    if !v6 {
        let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
        let v = u32::from_be_bytes([addr[0], addr[1], addr[2], addr[3]]);
        return pack_key(sel, v, mask, off, offmask);
    }
    let mut i = 0;
    while i < bits {
        let w = (i / 32) as usize;
        let v = u32::from_be_bytes([addr[4 * w], addr[4 * w + 1], addr[4 * w + 2], addr[4 * w + 3]]);
        let mask = if i + 31 < bits { u32::MAX } else { u32::MAX << (32 - (bits - i)) };
        pack_key(sel, v, mask, off + 4 * w as i32, offmask)?;
        i += 32;
    }
    Some(())
}

fn parse_ip(a: &mut Args, sel: &mut Sel) -> Option<()> {
    if a.rest().len() < 2 {
        return None;
    }
    let w = a.next()?;
    match w {
        "src" => parse_ip_addr(a, sel, 12, false),
        "dst" => parse_ip_addr(a, sel, 16, false),
        "tos" => parse_un(a, sel, 8, 1, 0),
        w if matches(w, "dsfield") || matches(w, "precedence") => parse_un(a, sel, 8, 1, 0),
        "ihl" => parse_un(a, sel, 8, 0, 0),
        "protocol" => parse_un(a, sel, 8, 9, 0),
        "nofrag" => pack_key16(sel, 0, 0x3FFF, 6, 0),
        "firstfrag" => pack_key16(sel, 0x2000, 0x3FFF, 6, 0),
        "df" => pack_key16(sel, 0x4000, 0x4000, 6, 0),
        "mf" => pack_key16(sel, 0x2000, 0x2000, 6, 0),
        "dport" => parse_un(a, sel, 16, 22, 0),
        "sport" => parse_un(a, sel, 16, 20, 0),
        "icmp_type" => parse_un(a, sel, 8, 20, 0),
        "icmp_code" => parse_un(a, sel, 8, 21, 0),
        _ => None,
    }
}

fn parse_ip6(a: &mut Args, sel: &mut Sel) -> Option<()> {
    if a.rest().len() < 2 {
        return None;
    }
    match a.next()? {
        "src" => parse_ip_addr(a, sel, 8, true),
        "dst" => parse_ip_addr(a, sel, 24, true),
        "priority" => {
            let key = num(a.next()?)?;
            let mask = crate::tc::units::get_u32_base16(a.next()?)?;
            if key > 0xFF || mask > 0xFF {
                return None;
            }
            pack_key(sel, key << 20, mask << 20, 0, 0)
        }
        "protocol" => parse_un(a, sel, 8, 6, 0),
        "flowlabel" => parse_un(a, sel, 32, 0, 0),
        "dport" => parse_un(a, sel, 16, 42, 0),
        "sport" => parse_un(a, sel, 16, 40, 0),
        "icmp_type" => parse_un(a, sel, 8, 40, 0),
        "icmp_code" => parse_un(a, sel, 8, 41, 1),
        _ => None,
    }
}

/// `parse_selector`. A `mark` goes to `mark` (TCA_U32_MARK, the last one wins).
fn parse_selector(a: &mut Args, sel: &mut Sel, mark: &mut Option<(u32, u32)>) -> Result<Option<()>, TcError> {
    let Some(w) = a.next() else { return Ok(None) };
    // Every selector takes NEXT_ARG before its own parser looks.
    let known = ["u32", "u16", "u8", "ip", "ip6", "udp", "tcp", "icmp", "mark", "ether"];
    if a.is_empty() && known.iter().any(|k| matches(w, k)) {
        return Err(TcError::incomplete());
    }
    Ok(if matches(w, "u32") {
        parse_un(a, sel, 32, 0, 0)
    } else if matches(w, "u16") {
        parse_un(a, sel, 16, 0, 0)
    } else if matches(w, "u8") {
        parse_un(a, sel, 8, 0, 0)
    } else if matches(w, "ip") {
        parse_ip(a, sel)
    } else if matches(w, "ip6") {
        parse_ip6(a, sel)
    } else if matches(w, "udp") || matches(w, "tcp") {
        if a.rest().len() < 2 {
            return Ok(None);
        }
        match a.next() {
            Some("src") => parse_un(a, sel, 16, 0, -1),
            Some("dst") => parse_un(a, sel, 16, 2, -1),
            _ => None,
        }
    } else if matches(w, "icmp") {
        if a.rest().len() < 2 {
            return Ok(None);
        }
        match a.next() {
            Some("type") => parse_un(a, sel, 8, 0, -1),
            Some("code") => parse_un(a, sel, 8, 1, -1),
            _ => None,
        }
    } else if matches(w, "ether") {
        // parse_ether: `src`/`dst` MAC matches are not modelled; anything else is
        // named before tc gives up.
        if a.rest().len() < 2 {
            return Ok(None);
        }
        if let Some(x) = a.peek().filter(|x| *x != "src" && *x != "dst") {
            a.notes.push_str(&format!("Unknown match: ether {x}\n"));
        }
        None
    } else if matches(w, "mark") {
        if a.rest().len() <= 1 {
            return Err(TcError::usage("Error: argument \"mark\" is required\n"));
        }
        let v = num(a.next().unwrap_or("")).ok_or_else(|| TcError::tc("Illegal \"mark\" value\n"))?;
        let m = num(a.next().unwrap_or("")).ok_or_else(|| TcError::tc("Illegal \"mark\" mask\n"))?;
        if v & m != v {
            return Err(TcError::tc("Illegal \"mark\" (impossible combination)\n"));
        }
        *mark = Some((v, m));
        Some(())
    } else {
        None
    })
}

/// `u32_parse_opt`'s `match` and `sample` steps: a selector, else tc's `Illegal "WORD"`
/// — after the selector's own words when it gave some (parse_mark's refusals).
fn selector(a: &mut Args, sel: &mut Sel, mark: &mut Option<(u32, u32)>, word: &str) -> Result<(), TcError> {
    let illegal = |said: &str| TcError::tc(format!("{said}Illegal \"{word}\"\n"));
    match parse_selector(a, sel, mark) {
        Ok(Some(())) => Ok(()),
        Ok(None) => Err(illegal("")),
        Err(e) if e.code == 1 => Err(illegal(&e.msg)),
        Err(e) => Err(e),
    }
}

/// tc side: `u32_parse_opt`. `handle` is the `handle` word of the command line;
/// `keywords` ends an `action`/`police` spec.
pub fn parse(handle: Option<&str>, a: &mut Args) -> Result<(u32, U32Opts), TcError> {
    let mut tcm_handle = 0u32;
    if let Some(h) = handle {
        tcm_handle = get_u32_handle(h).ok_or_else(|| TcError::tc("Illegal filter ID\n"))?;
    }
    let mut o = U32Opts::default();
    if a.is_empty() {
        return Ok((tcm_handle, o));
    }
    o.present = true;
    let mut sel = Sel::default();
    let mut sel_ok = false;
    let mut sample_ok = false;
    let mut htid = 0u32;
    let mut order = 0u32;
    let mut flags = 0u32;
    let mut terminal = false;
    while let Some(w) = a.peek() {
        if matches(w, "match") {
            a.next();
            selector(a, &mut sel, &mut o.mark, "match")?;
            sel_ok = true;
            continue;
        } else if matches(w, "offset") {
            a.next();
            while let Some(x) = a.peek() {
                if matches(x, "plus") {
                    a.next();
                    let v = a.value()?;
                    sel.off =
                        crate::tc::units::get_integer(v).ok_or_else(|| TcError::tc("Illegal \"offset\"\n"))? as u16;
                    sel.flags |= TC_U32_OFFSET;
                } else if matches(x, "at") {
                    a.next();
                    let v = a.value()?;
                    let n = crate::tc::units::get_integer(v).ok_or_else(|| TcError::tc("Illegal \"offset\"\n"))?;
                    sel.offoff = n as i16;
                    if n % 2 != 0 {
                        return Err(TcError::tc("offset \"at\" must be even\nIllegal \"offset\"\n"));
                    }
                    sel.flags |= TC_U32_VAROFFSET;
                } else if matches(x, "mask") {
                    a.next();
                    let v = a.value()?;
                    let m = crate::tc::units::get_u32_base16(v)
                        .filter(|m| *m <= 0xFFFF)
                        .ok_or_else(|| TcError::tc("Illegal \"offset\"\n"))?;
                    sel.offmask = m as u16;
                    sel.flags |= TC_U32_VAROFFSET;
                } else if matches(x, "shift") {
                    a.next();
                    let v = a.value()?;
                    sel.offshift =
                        crate::tc::units::get_integer(v).ok_or_else(|| TcError::tc("Illegal \"offset\"\n"))? as u8;
                    sel.flags |= TC_U32_VAROFFSET;
                } else if matches(x, "eat") {
                    a.next();
                    sel.flags |= TC_U32_EAT;
                } else {
                    break;
                }
            }
            continue;
        } else if matches(w, "hashkey") {
            a.next();
            while let Some(x) = a.peek() {
                if matches(x, "mask") {
                    a.next();
                    let v = a.value()?;
                    sel.hmask =
                        crate::tc::units::get_u32_base16(v).ok_or_else(|| TcError::tc("Illegal \"hashkey\"\n"))?;
                } else if matches(x, "at") {
                    a.next();
                    let v = a.value()?;
                    let n = crate::tc::units::get_integer(v)
                        .filter(|n| n % 4 == 0)
                        .ok_or_else(|| TcError::tc("Illegal \"hashkey\"\n"))?;
                    sel.hoff = n as i16;
                } else {
                    break;
                }
            }
            continue;
        }
        a.next();
        if matches(w, "classid") || w == "flowid" {
            let v = a.value()?;
            let c = crate::tc::get_tc_classid(v).ok_or_else(|| TcError::tc("Illegal \"classid\"\n"))?;
            o.classid = Some(c);
            sel.flags |= TC_U32_TERMINAL;
        } else if matches(w, "divisor") {
            let v = a.value()?;
            let d = num(v)
                .filter(|&d| d != 0 && d <= 0x100 && (d - 1) & d == 0)
                .ok_or_else(|| TcError::tc("Illegal \"divisor\"\n"))?;
            o.divisor = Some(d);
        } else if matches(w, "order") {
            let v = a.value()?;
            order = num(v).ok_or_else(|| TcError::tc("Illegal \"order\"\n"))?;
        } else if w == "link" {
            let v = a.value()?;
            let l = get_u32_handle(v).ok_or_else(|| TcError::tc("Illegal \"link\"\n"))?;
            if l != 0 && node_of(l) != 0 {
                return Err(TcError::tc("\"link\" must be a hash table.\n"));
            }
            o.link = Some(l);
        } else if w == "ht" {
            let v = a.value()?;
            let h = get_u32_handle(v).ok_or_else(|| TcError::tc("Illegal \"ht\"\n"))?;
            if handle.is_some() && node_of(h) != 0 {
                return Err(TcError::tc("\"ht\" must be a hash table.\n"));
            }
            htid = if sample_ok { (htid & 0xFF000) | (h & 0xFFF0_0000) } else { h & 0xFFFF_F000 };
        } else if w == "sample" {
            let mut s2 = Sel::default();
            selector(a, &mut s2, &mut o.mark, "sample")?;
            if s2.keys.len() != 1 {
                return Err(TcError::tc("\"sample\" must contain exactly ONE key.\n"));
            }
            let mut divisor = 0x100u32;
            if a.peek() == Some("divisor") {
                a.next();
                let v = a.value()?;
                divisor = num(v)
                    .filter(|&d| d != 0 && d <= 0x100 && (d - 1) & d == 0)
                    .ok_or_else(|| TcError::tc("Illegal sample \"divisor\"\n"))?;
                a.value()?;
            }
            let k = s2.keys[0];
            let fshift = if k.mask != 0 { k.mask.trailing_zeros() } else { 0 };
            let hash = (k.val & k.mask) >> fshift;
            htid = ((hash % divisor) << 12) | (htid & 0xFFF0_0000);
            sample_ok = true;
        } else if w == "indev" {
            let Some(v) = a.next() else { return Err(TcError::tc("Illegal indev\n")) };
            // strncpy into char[IFNAMSIZ + 1]: at most IFNAMSIZ bytes go.
            let mut name = v.to_string();
            while name.len() > IFNAMSIZ {
                name.pop();
            }
            let ifindex = a.link_index(&name);
            o.indev = Some((name, ifindex));
        } else if matches(w, "action") {
            super::action::parse_action(a, &mut o.exts)?;
            terminal = true;
        } else if matches(w, "police") {
            super::action::parse_legacy_police(a, &mut o.exts)?;
            terminal = true;
        } else if w == "skip_hw" {
            flags |= SKIP_HW;
        } else if w == "skip_sw" {
            flags |= SKIP_SW;
        } else if w == "help" {
            return Err(TcError::tc(USAGE));
        } else {
            return Err(TcError::tc(format!("What is \"{w}\"?\n{USAGE}")));
        }
    }
    if terminal {
        sel.flags |= TC_U32_TERMINAL;
    }
    if order != 0 {
        if node_of(tcm_handle) != 0 && order != node_of(tcm_handle) {
            return Err(TcError::tc("\"order\" contradicts \"handle\"\n"));
        }
        tcm_handle |= order;
    }
    if htid != 0 {
        o.hash = Some(htid);
    }
    if sel_ok {
        o.sel = Some(sel);
    }
    if flags != 0 {
        if flags == SKIP_HW | SKIP_SW {
            return Err(TcError::tc("skip_hw and skip_sw are mutually exclusive\n"));
        }
        o.flags = Some(flags);
    }
    Ok((tcm_handle, o))
}

// ---- printing: u32_print_opt ---------------------------------------------------------

fn print_handle(out: &mut Out, h: u32) {
    let s = fmt_u32_handle(h, out.raw());
    out.string("fh", format_args!("fh {s} "), &s);
    if node_of(h) != 0 {
        out.int("order", format_args!("order {} ", node_of(h)), node_of(h) as i64);
    }
}

fn print_knode(out: &mut Out, n: &Knode, ctx: &super::DumpCtx) {
    print_handle(out, n.handle);
    let htid = n.handle & 0xFFFF_F000;
    let kh = format!("{:x}", (htid >> 20) & 0xFFF);
    out.string("key_ht", format_args!("key ht {kh} "), &kh);
    let bkt = format!("{:x}", hash_of(htid));
    out.string("bkt", format_args!("bkt {bkt} "), &bkt);
    if n.classid != 0 {
        if n.sel.flags & TC_U32_TERMINAL == 0 {
            out.fp(format_args!("*"));
        }
        let c = crate::tc::show_classid(n.classid);
        out.string("flowid", format_args!("flowid {c} "), &c);
    } else if n.sel.flags & TC_U32_TERMINAL != 0 {
        out.fp(format_args!("terminal flowid "));
    }
    if n.link != 0 {
        let l = fmt_u32_handle(n.link, out.raw());
        out.string("link", format_args!("link {l} "), &l);
    }
    if n.flags & SKIP_HW != 0 {
        out.boolean("skip_hw", format_args!("skip_hw "), true);
    }
    if n.flags & SKIP_SW != 0 {
        out.boolean("skip_sw", format_args!("skip_sw "), true);
    }
    if n.flags & NOT_IN_HW != 0 {
        out.boolean("not_in_hw", format_args!("not_in_hw "), true);
    }
    let perf = ctx.stats && ctx.u32_perf;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    if perf {
        out.uint("rule_hit", format_args!("(rule hit {} ", load(&n.pf.rcnt)), load(&n.pf.rcnt));
        out.uint("success", format_args!("success {})", load(&n.pf.rhit)), load(&n.pf.rhit));
    }
    // TCA_U32_MARK, dumped when a value or mask was given; JSON as print_0xhex ("%#llx").
    if let Some(m) = n.mark.as_ref().filter(|m| m.val != 0 || m.mask != 0) {
        let hex = |v: u32| if v == 0 { "0".to_string() } else { format!("{v:#x}") };
        out.nl();
        out.string("fwmark_value", format_args!("  mark 0x{:04x} ", m.val), &hex(m.val));
        out.string("fwmark_mask", format_args!("0x{:04x} ", m.mask), &hex(m.mask));
        let ok = load(&m.success) as u32 as i32;
        out.int("fwmark_success", format_args!("(success {ok})"), ok as i64);
    }
    for (j, k) in n.sel.keys.iter().enumerate() {
        show_key(out, k, ctx);
        if perf {
            let c = n.pf.kcnts.get(j).map(load).unwrap_or(0);
            out.uint("success", format_args!(" (success {c} ) "), c);
        }
    }
    let s = &n.sel;
    if s.flags & (TC_U32_VAROFFSET | TC_U32_OFFSET) != 0 {
        out.nl();
        out.fp(format_args!("    offset "));
        if s.flags & TC_U32_VAROFFSET != 0 {
            let m = format!("{:04x}", s.offmask);
            out.string("offset_mask", format_args!("{m}"), &format!("{:x}", s.offmask));
            out.int("offset_shift", format_args!(">>{} ", s.offshift), s.offshift as i64);
            out.int("offset_off", format_args!("at {} ", s.offoff), s.offoff as i64);
        }
        if s.off != 0 {
            out.int("plus", format_args!("plus {} ", s.off as i16), s.off as i16 as i64);
        }
    }
    if s.flags & TC_U32_EAT != 0 {
        out.bare_string(format_args!(" eat "), " eat ");
    }
    if s.hmask != 0 {
        out.nl();
        out.string("hash_mask", format_args!("    hash mask {:08x} ", s.hmask), &format!("{:x}", s.hmask));
        out.int("hash_off", format_args!("at {} ", s.hoff), s.hoff as i64);
    }
    // The legacy police (TCA_U32_POLICE), then TCA_U32_INDEV, then the actions.
    let indev = |out: &mut Out| {
        if n.indev.0 != 0 {
            out.nl();
            out.string("input_dev", format_args!("  input dev {}", n.indev.1), &n.indev.1);
            out.nl();
        }
    };
    if n.exts.legacy_police {
        n.exts.print(out, ctx.now);
        indev(out);
    } else {
        indev(out);
        n.exts.print(out, ctx.now);
    }
}

/// `show_keys`: the raw form, or with `-p` the protocol's pretty printer.
fn show_key(out: &mut Out, k: &Key, ctx: &super::DumpCtx) {
    out.open_object(Some("match"));
    if ctx.pretty && (ctx.protocol == ETH_P_IP || ctx.protocol == ETH_P_IPV6) {
        print_ip_key(out, k, ctx.protocol == ETH_P_IPV6);
    } else {
        out.nl();
        out.string("value", format_args!("  match {:08x}", k.val), &format!("{:x}", k.val));
        out.string("mask", format_args!("/{:08x} ", k.mask), &format!("{:x}", k.mask));
        let nh = if k.offmask != 0 { "nexthdr+" } else { "" };
        out.string("offmask", format_args!("at {nh}"), nh);
        out.int("off", format_args!("{}", k.off), k.off as i64);
    }
    out.close_object();
}

/// `mask2bits`: the prefix length of a contiguous mask, or None.
fn mask2bits(m: u32) -> Option<u32> {
    let bits = m.leading_ones();
    (m.checked_shl(bits).unwrap_or(0) == 0).then_some(bits)
}

/// `print_ipv4` / `print_ipv6` (the latter, like tc, prints IPv4-style and swaps
/// the port names).
fn print_ip_key(out: &mut Out, k: &Key, v6: bool) {
    match k.off {
        0 => match k.mask {
            0x0f00_0000 => {
                out.nl();
                out.uint("ip_ihl", format_args!("  match IP ihl {}", k.val >> 24), (k.val >> 24) as u64);
            }
            0x00ff_0000 => {
                out.nl();
                let v = k.val >> 16;
                let s = if v == 0 { "0".to_string() } else { format!("{v:#x}") };
                out.string("ip_dsfield", format_args!("  match IP dsfield {s}"), &format!("{v:#x}"));
            }
            _ => {}
        },
        8 if k.mask == 0x00ff_0000 => {
            out.nl();
            let v = (k.val >> 16) as i64;
            out.int("ip_protocol", format_args!("  match IP protocol {v}"), v);
        }
        12 | 16 => {
            if let Some(bits) = mask2bits(k.mask) {
                out.nl();
                if k.off == 12 {
                    out.fp(format_args!("  match IP src "));
                    out.open_object(Some("src"));
                } else {
                    out.fp(format_args!("  match IP dst "));
                    out.open_object(Some("dst"));
                }
                let a = std::net::Ipv4Addr::from(k.val).to_string();
                out.string("address", format_args!("{a}"), &a);
                out.int("prefixlen", format_args!("/{bits}"), bits as i64);
                out.close_object();
            }
        }
        20 => {
            let (lo, hi) = (k.val & 0xffff, k.val >> 16);
            match (k.mask, v6) {
                (0x0000_ffff, false) => out.uint("dport", format_args!("match dport {lo}"), lo as u64),
                (0xffff_0000, false) => {
                    out.nl();
                    out.uint("sport", format_args!("  match sport {hi}"), hi as u64);
                }
                (0xffff_ffff, false) => {
                    out.nl();
                    out.uint("dport", format_args!("  match dport {lo}, "), lo as u64);
                    out.uint("sport", format_args!("match sport {hi}"), hi as u64);
                }
                (0x0000_ffff, true) => {
                    out.nl();
                    out.uint("sport", format_args!("  match sport {lo}"), lo as u64);
                }
                (0xffff_0000, true) => out.uint("dport", format_args!("match dport {hi}"), hi as u64),
                (0xffff_ffff, true) => {
                    out.nl();
                    out.uint("sport", format_args!("  match sport {lo}, "), lo as u64);
                    out.uint("dport", format_args!("match dport {hi}"), hi as u64);
                }
                _ => {}
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binds_every() -> super::super::Binds<'static> {
        super::super::Binds::with_bind_tcf(&super::super::bind_every)
    }
    use crate::classify::{Headers, ETH_P_IP};
    use crate::packet::{FlowKey, Packet};

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }
    fn opts(s: &str) -> (u32, U32Opts) {
        let v = argv(s);
        parse(None, &mut Args::new(&v)).unwrap()
    }
    fn mapped(a: [u8; 4]) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a);
        m
    }
    fn pkt(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8, tos: u8) -> Packet {
        let mut p = Packet::new(1, 1000).with_flow(FlowKey { src: mapped(src), dst: mapped(dst), sport, dport, proto });
        p.tos = tos;
        p
    }
    fn actx() -> ActCtx<'static> {
        ActCtx {
            table: Box::leak(Box::default()),
            available: &|_| true,
            kernel: Default::default(),
            now: Instant::ZERO,
            at_ingress: false,
            est: None,
        }
    }
    /// `indev`: a terminal node takes only packets whose skb_iif is the device's
    /// (checked after its keys): not one this host sends, one forwarded from the
    /// device (its route's input interface, whether or not the device keeps routes),
    /// one received on it at its ingress hook. Devices: lo 1, eth0 2, eth1 3.
    #[test]
    fn indev_matches_the_input_device() {
        use crate::classify::{with_origin, Dst, Verdict};
        use crate::tc::{makeargs, Tc};
        use crate::tree::{DevSpec, Ingress};
        let mut tc = Tc::new(&[DevSpec::new("eth0"), DevSpec::new("eth1")]);
        for l in [
            "qdisc add dev eth0 root handle 1: prio",
            "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.2/32 indev eth1 flowid 1:1",
            "qdisc add dev eth1 ingress",
            "filter add dev eth1 ingress protocol ip prio 1 u32 match ip dst 10.0.0.2/32 indev eth1 action drop",
            "filter add dev eth1 ingress protocol ip prio 2 u32 match ip dst 10.0.0.3/32 indev eth0 action drop",
        ] {
            let r = tc.run(&makeargs(l));
            assert_eq!(r.code, 0, "{l}: {}", r.stderr);
        }
        let to = |d: u8| pkt([10, 0, 0, 1], [10, 0, 0, d], 1, 2, 17, 0);
        let block =
            |tc: &Tc| tc.devices[0].root.q.as_classful().unwrap().block(0).unwrap().classify(&mut to(2), Instant::ZERO);
        assert_eq!(block(&tc), None, "sent here: skb_iif 0");
        assert_eq!(with_origin(None, 2, || block(&tc)), None, "from eth0");
        assert_eq!(with_origin(None, 3, || block(&tc)), Some(Verdict::Class(TcfResult::unbound(0x1_0001))));
        // Through the transmit path: forwarded from eth1, a device that keeps no routes.
        let dst = Some(Dst { tclassid: 0, iif: 3 });
        let _ = tc.devices[0].xmit_routed(to(2), 0, Instant::ZERO, false, dst);
        let _ = tc.devices[0].dequeue(Instant::ZERO);
        let s = tc.run(&makeargs("-s class show dev eth0")).stdout;
        assert!(s.starts_with("class prio 1:1 parent 1: \n Sent 1000 bytes 1 pkt"), "{s}");
        // At eth1's ingress: received there, skb_iif is eth1's.
        assert!(matches!(tc.ingress(1, to(2), Instant::ZERO), Ingress::Dropped));
        assert!(matches!(tc.ingress(1, to(3), Instant::ZERO), Ingress::Pass(_)));
        // The dump names the device; a name the netns lacks is refused.
        let r = tc.run(&makeargs("filter show dev eth0"));
        assert!(r.stdout.contains("  match 0a000002/ffffffff at 16\n  input dev eth1\n"), "{}", r.stdout);
        let r = tc
            .run(&makeargs("filter add dev eth0 parent 1: protocol ip prio 2 u32 match u8 0 0 indev eth9 flowid 1:1"));
        assert_eq!(
            (r.code, r.stderr.as_str()),
            (2, "Error: Network device not found.\nWe have an error talking to the kernel\n")
        );
    }

    fn tp_with(rules: &[&str]) -> Tp {
        let mut tp = Tp::init(None, 1).unwrap();
        for r in rules {
            let (h, o) = opts(r);
            tp.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        }
        tp
    }
    fn cls(tp: &Tp, p: &Packet) -> Option<u32> {
        tp.classify(&Headers::of(p), &mut p.clone(), Instant::ZERO).map(|r| r.1.classid)
    }

    /// goldens/kernel-6.12/filter-raw-frames: u32 on AF_PACKET frames (ethertype
    /// 0x88b5): keys at negative offsets read the Ethernet header, and a key past the
    /// frame's end ends the filter (no later node is tried).
    #[test]
    fn frames_are_read_from_the_network_header_on() {
        let head = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5];
        let frame = |len| Packet::new(1, len).with_frame(&head);
        let tp =
            tp_with(&["match u16 0x88b6 0xffff at -2 flowid 1:4", "match u32 0x02000000 0xffffffff at -8 flowid 1:3"]);
        assert_eq!(cls(&tp, &frame(100)), Some(0x10003));
        let tp = tp_with(&[
            "match u32 0 0xffffffff at 84 flowid 1:3",
            "match u16 0x88b5 0xffff at -2 match u32 0 0xffffffff at 40 flowid 1:2",
        ]);
        // 60 bytes: 84 is past the end, so nothing; 100 bytes: 84..88 > 86, nothing
        // either — the first node's failed read ends the walk.
        assert_eq!(cls(&tp, &frame(60)), None);
        assert_eq!(cls(&tp, &frame(100)), None);
        let tp = tp_with(&["match u16 0x88b5 0xffff at -2 match u32 0 0xffffffff at 40 flowid 1:2"]);
        assert_eq!(cls(&tp, &frame(60)), Some(0x10002));
        // u8 at 0 reads a whole word: 18 bytes at least.
        let tp = tp_with(&["match u8 0 0 at 0 flowid 1:1"]);
        assert_eq!((cls(&tp, &frame(15)), cls(&tp, &frame(17)), cls(&tp, &frame(18))), (None, None, Some(0x10001)));
    }

    #[test]
    fn parse_packs_keys_like_f_u32() {
        let (_, o) = opts("match ip src 10.0.0.0/8 match ip sport 1024 0xffff match ip dport 80 0xffff flowid 1:10");
        let s = o.sel.unwrap();
        assert_eq!(s.keys[0], Key { val: 0x0a00_0000, mask: 0xff00_0000, off: 12, offmask: 0 });
        // sport and dport share the word at 20.
        assert_eq!(s.keys[1], Key { val: (1024 << 16) | 80, mask: 0xffff_ffff, off: 20, offmask: 0 });
        assert_eq!(s.flags, TC_U32_TERMINAL);
        assert_eq!(o.classid, Some(0x10010));
        let (_, o) = opts("match ip tos 0x10 0xff match ip protocol 6 0xff match u8 5 0xff at 3");
        let k = o.sel.unwrap().keys;
        assert_eq!(k[0], Key { val: 0x0010_0005, mask: 0x00ff_00ff, off: 0, offmask: 0 });
        assert_eq!(k[1], Key { val: 0x0006_0000, mask: 0x00ff_0000, off: 8, offmask: 0 });
        let v = argv("match u32 1 2 at 3 flowid 1:1");
        assert_eq!(parse(None, &mut Args::new(&v)).unwrap_err(), TcError::tc("Illegal \"match\"\n"));
        let v = argv("match ip src 10.0.0.0/33");
        assert!(parse(None, &mut Args::new(&v)).is_err());
        assert_eq!(get_u32_handle("800::800"), Some(0x8000_0800));
        assert_eq!(get_u32_handle("2:5:"), Some(0x0020_5000));
        assert_eq!(fmt_u32_handle(0x0020_5800, false), "2:5:800");
        assert_eq!(fmt_u32_handle(0x8000_0000, false), "800:");
    }

    #[test]
    fn classify_prefixes_ports_protocol_tos() {
        let tp = tp_with(&[
            "match ip dst 10.1.0.0/16 match ip dport 80 0xffff flowid 1:10",
            "match ip src 192.168.1.7/32 flowid 1:20",
            "match ip protocol 17 0xff match ip tos 0xb8 0xfc flowid 1:30",
        ]);
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 1, 9, 9], 5, 80, 6, 0)), Some(0x10010));
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 2, 9, 9], 5, 80, 6, 0)), None);
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 1, 9, 9], 5, 81, 6, 0)), None);
        assert_eq!(cls(&tp, &pkt([192, 168, 1, 7], [8, 8, 8, 8], 5, 81, 6, 0)), Some(0x10020));
        assert_eq!(cls(&tp, &pkt([192, 168, 1, 8], [8, 8, 8, 8], 5, 81, 6, 0)), None);
        // ECN bits are masked off.
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [8, 8, 8, 8], 5, 53, 17, 0xb9)), Some(0x10030));
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [8, 8, 8, 8], 5, 53, 6, 0xb8)), None);
        // No header: the first key read fails and u32 gives up.
        assert_eq!(cls(&tp, &Packet::new(1, 100)), None);
    }

    /// CONFIG_CLS_U32_MARK (6.12): a node whose mark match fails is skipped before its
    /// keys; one without a `mark` matches every mark (0/0). 6.18 ignores the match.
    #[test]
    fn mark_match_where_the_kernel_has_it() {
        let rules = ["match mark 0x10 0xf0 match ip src 1.1.1.1/32 flowid 1:1", "match ip src 1.1.1.1/32 flowid 1:2"];
        let tp = tp_with(&rules);
        let mut p = pkt([1, 1, 1, 1], [8, 8, 8, 8], 5, 80, 6, 0);
        assert_eq!(cls(&tp, &p), Some(0x10002));
        p.mark = 0x13;
        assert_eq!(cls(&tp, &p), Some(0x10001));
        let c = read_common(&tp.common);
        let n = find_key(&c, 0x8000_0800).unwrap();
        let (m, m2) = (n.mark.as_ref().unwrap(), find_key(&c, 0x8000_0801).unwrap().mark.as_ref().unwrap());
        assert_eq!((m.val, m.mask, m.success.load(Ordering::Relaxed)), (0x10, 0xf0, 1));
        assert_eq!((m2.val, m2.mask, m2.success.load(Ordering::Relaxed)), (0, 0, 1));
        drop(c);
        let mut tp618 = Tp::init(None, 1).unwrap();
        for r in rules {
            let (h, o) = opts(r);
            let mut a = ActCtx { kernel: crate::tree::KernelVersion::V6_18, ..actx() };
            tp618.change(h, &o, None, &mut a, &mut binds_every()).unwrap();
        }
        p.mark = 0;
        assert_eq!(cls(&tp618, &p), Some(0x10001), "6.18 has no mark match");
    }

    #[test]
    fn handles_follow_the_kernel() {
        let mut tp = Tp::init(None, 1).unwrap();
        assert_eq!(tp.root, 0x8000_0000);
        let (h, o) = opts("match u32 0 0 flowid 1:1");
        tp.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        tp.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        assert_eq!(tp.get(0x8000_0800), Some(Fh::Key(0x8000_0800)));
        assert_eq!(tp.get(0x8000_0801), Some(Fh::Key(0x8000_0801)));
        assert_eq!(tp.get(0x8000_0000), Some(Fh::Ht(0x8000_0000)));
        // Deleting the first frees its id for the next filter.
        assert!(!tp.delete(Fh::Key(0x8000_0800)).unwrap());
        tp.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        assert_eq!(tp.get(0x8000_0800), Some(Fh::Key(0x8000_0800)));
        // A second proto of the qdisc gets 801:, a table 802:.
        let tp2 = Tp::init(Some(tp.common.clone()), 2).unwrap();
        assert_eq!(tp2.root, 0x8010_0000);
        let mut tp2 = tp2;
        let (h, o) = opts("divisor 256");
        tp2.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        assert!(read_common(&tp.common).ht(0x8020_0000).is_some());
        assert_eq!(tp.delete(Fh::Ht(0x8000_0000)), Err(FilterError::ext("cls_u32: Not allowed to delete root node")));
    }

    #[test]
    fn hash_tables_and_links() {
        let mut tp = Tp::init(None, 1).unwrap();
        let v = argv("divisor 256");
        let (_, o) = parse(Some("2:"), &mut Args::new(&v)).unwrap();
        tp.change(0x0020_0000, &o, None, &mut actx(), &mut binds_every()).unwrap();
        // Bucket = last octet of the destination.
        let (h, o) = opts("ht 800:: match ip protocol 6 0xff hashkey mask 0x000000ff at 16 link 2:");
        tp.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        let (h, o) = opts("ht 2:7 match ip dst 10.0.0.7 flowid 1:7");
        tp.change(h, &o, None, &mut actx(), &mut binds_every()).unwrap();
        assert_eq!(tp.get(0x0020_7800), Some(Fh::Key(0x0020_7800)));
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 0, 0, 7], 1, 2, 6, 0)), Some(0x10007));
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 0, 0, 8], 1, 2, 6, 0)), None);
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 0, 0, 7], 1, 2, 17, 0)), None);
        // The linked table is in use.
        assert_eq!(tp.delete(Fh::Ht(0x0020_0000)), Err(FilterError::ext("cls_u32: Can not delete in-use filter")));
        let (h, o) = opts("ht 3: match ip dst 10.0.0.7 flowid 1:7");
        assert_eq!(
            tp.change(h, &o, None, &mut actx(), &mut binds_every()),
            Err(FilterError::ext("cls_u32: Specified hash table not found"))
        );
        let (h, o) = opts("link 9: match ip dst 10.0.0.7");
        assert_eq!(
            tp.change(h, &o, None, &mut actx(), &mut binds_every()),
            Err(FilterError::ext("cls_u32: Link hash table not found"))
        );
        let _ = ETH_P_IP;
    }

    #[test]
    fn each_change_logs_only_its_own_bindings() {
        // tc's bind bookkeeping reads what a change logged, not every key node: one
        // entry per filter added however many there are (setup linear in the script).
        let mut tp = Tp::init(None, 1).unwrap();
        for i in 0..3000 {
            let (h, o) = opts(&format!("match ip sport {i} 0xffff flowid 1:{:x}", i + 0x10));
            let mut binds = binds_every();
            tp.change(h, &o, None, &mut actx(), &mut binds).unwrap();
            assert_eq!(binds.split(), (vec![], vec![0x10010 + i]));
            assert_eq!(write_common(&tp.common).take_bound_changes(), []);
        }
        // gen_new_kid: 0x800..=0xFFF first, then from 1.
        assert_eq!(tp.get(0x8000_0FFF), Some(Fh::Key(0x8000_0FFF)));
        assert_eq!(tp.get(0x8000_0001 + 3000 - 0x801), Some(Fh::Key(0x8000_0001 + 3000 - 0x801)));
        assert_eq!(tp.get(0x8000_0002 + 3000 - 0x801), None);
        let (h, o) = opts("flowid 1:ffff");
        let mut binds = binds_every();
        tp.change(h, &o, tp.get(0x8000_0800), &mut actx(), &mut binds).unwrap();
        assert_eq!(binds.split(), (vec![0x10010], vec![0x1ffff]));
        assert!(!tp.delete(Fh::Key(0x8000_0801)).unwrap());
        assert_eq!(write_common(&tp.common).take_bound_changes(), [(0x10011, -1)]);
        // The last proto takes every node's binding with it.
        let common = tp.common.clone();
        assert!(tp.destroy());
        let mut gone: Vec<u32> = write_common(&common)
            .take_bound_changes()
            .into_iter()
            .map(|(c, d)| {
                assert_eq!(d, -1);
                c
            })
            .collect();
        gone.sort_unstable();
        assert_eq!(gone, (0x10012..0x10010 + 3000).chain([0x1ffff]).collect::<Vec<_>>());
    }

    #[test]
    fn replace_keeps_the_selector() {
        let mut tp = tp_with(&["match ip dst 10.0.0.1 flowid 1:10"]);
        let (h, o) = opts("match ip dst 10.0.0.2 flowid 1:20");
        tp.change(h, &o, tp.get(0x8000_0800), &mut actx(), &mut binds_every()).unwrap();
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 0, 0, 1], 1, 2, 6, 0)), Some(0x10020));
        assert_eq!(cls(&tp, &pkt([1, 1, 1, 1], [10, 0, 0, 2], 1, 2, 6, 0)), None);
    }
}
