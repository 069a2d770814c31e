//! The packet as a qdisc sees it: the fields of `struct sk_buff` that the
//! schedulers read (length, hash, priority, mark, dsfield, EDT timestamp, socket).
//! The classifiers read its headers: synthesized from its 5-tuple when it has one,
//! else from the head of its frame when the caller gave it (an AF_PACKET frame, a
//! captured non-IP frame). Its `truesize` follows the kernel's allocation of the
//! skb, one rule per way packets are made here (the section below `Packet`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::time::Instant;

/// The 5-tuple of a flow, when the caller knows it (replay, simulator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    /// IP protocol number (6 = TCP, 17 = UDP).
    pub proto: u8,
}

impl FlowKey {
    /// A deterministic 32-bit flow hash (FNV-1a), standing in for the kernel's
    /// jhash-based `skb_get_hash` when the caller supplies only a 5-tuple.
    pub fn hash(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        let mut eat = |b: u8| {
            h ^= b as u32;
            h = h.wrapping_mul(0x0100_0193);
        };
        self.src.iter().chain(self.dst.iter()).for_each(|&b| eat(b));
        self.sport.to_be_bytes().iter().for_each(|&b| eat(b));
        self.dport.to_be_bytes().iter().for_each(|&b| eat(b));
        eat(self.proto);
        h
    }
}

/// The state of the sending socket, as far as qdiscs care (fq's classification, §9.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SockState {
    /// A full socket with a peer (an established TCP or a connected UDP socket).
    #[default]
    Connected,
    /// TCP_CLOSE: an unconnected UDP socket.
    Close,
    /// A listener, or a request/TIME_WAIT mini-socket (SYN-ACKs, RSTs): not a full socket.
    Listener,
}

/// The sending socket, for qdiscs that look at it (fq's flow key and pacing rate),
/// and for the socket's own accounting of its packets (`sk_wmem_alloc`, which TCP
/// small queues reads).
///
/// Shared by all its packets (`Arc`), like `skb->sk`. The two values the socket
/// changes while its packets sit in a qdisc are atomics: TCP updates the pacing rate
/// as its estimate moves (fq reads it live at dequeue), and every charged packet that
/// is freed — sent, or dropped anywhere in a qdisc — gives its truesize back.
#[derive(Debug)]
pub struct Socket {
    /// Identity of the socket (the kernel uses the `struct sock *`).
    pub id: u64,
    /// `sk_hash`: changes when the socket is reused for another connection.
    pub hash: u32,
    /// `sk_pacing_rate`, bytes per second (`u64::MAX` = unlimited); read it with
    /// [`Socket::pacing_rate`].
    pub pacing_rate: AtomicU64,
    /// `sk_max_pacing_rate` (SO_MAX_PACING_RATE), bytes per second (`u64::MAX` = not set).
    pub max_pacing_rate: u64,
    pub state: SockState,
    /// A TCP socket (fq treats paced non-TCP sockets differently).
    pub tcp: bool,
    /// `sk_wmem_alloc`: truesize of this socket's charged packets not yet freed
    /// (see [`Packet::set_owner_w`]).
    pub wmem_alloc: AtomicU64,
    /// The net_cls classid of the socket's cgroup (`sock_cgroup_classid`: the
    /// `net_cls.classid` of the cgroup its task was in; 0 = none), which the cgroup
    /// classifier reads.
    pub net_cls_classid: u32,
    /// The fsuid and fsgid of the credentials its file was opened with
    /// (`sk->sk_socket->file->f_cred`), which flow's `sk-uid`/`sk-gid` keys read;
    /// 0 (root) unless the embedder says otherwise, as every socket of the simulator
    /// and the kernel lab is root's.
    pub uid: u32,
    pub gid: u32,
}

impl Socket {
    /// The current `sk_pacing_rate`.
    pub fn pacing_rate(&self) -> u64 {
        self.pacing_rate.load(Ordering::Relaxed)
    }
    pub fn set_pacing_rate(&self, rate: u64) {
        self.pacing_rate.store(rate, Ordering::Relaxed)
    }
    /// Bytes of charged packets still alive (`sk_wmem_alloc_get`).
    pub fn wmem_alloc(&self) -> u64 {
        self.wmem_alloc.load(Ordering::Relaxed)
    }
    pub fn with_pacing_rate(self, rate: u64) -> Self {
        self.set_pacing_rate(rate);
        self
    }
}

impl Default for Socket {
    fn default() -> Self {
        Socket {
            id: 0,
            hash: 0,
            pacing_rate: AtomicU64::new(u64::MAX),
            max_pacing_rate: u64::MAX,
            state: SockState::Connected,
            tcp: true,
            wmem_alloc: AtomicU64::new(0),
            net_cls_classid: 0,
            uid: 0,
            gid: 0,
        }
    }
}

/// A copy of the socket's identity and settings, with nothing charged to it.
impl Clone for Socket {
    fn clone(&self) -> Self {
        Socket {
            id: self.id,
            hash: self.hash,
            pacing_rate: AtomicU64::new(self.pacing_rate()),
            max_pacing_rate: self.max_pacing_rate,
            state: self.state,
            tcp: self.tcp,
            wmem_alloc: AtomicU64::new(0),
            net_cls_classid: self.net_cls_classid,
            uid: self.uid,
            gid: self.gid,
        }
    }
}

/// Sockets are equal when their identity and settings are (not their accounting).
impl PartialEq for Socket {
    fn eq(&self, o: &Self) -> bool {
        (self.id, self.hash, self.pacing_rate(), self.max_pacing_rate, self.state, self.tcp, self.net_cls_classid)
            == (o.id, o.hash, o.pacing_rate(), o.max_pacing_rate, o.state, o.tcp, o.net_cls_classid)
            && (self.uid, self.gid) == (o.uid, o.gid)
    }
}

impl Eq for Socket {}

/// Where a packet's [`part`](Packet::part) starts in its `id`.
pub const PART_SHIFT: u32 = 48;

/// One skb. `len` is `qdisc_skb_cb(skb)->pkt_len`: the bytes the qdisc accounts,
/// including all GSO segments' headers (§1.2 of docs/kernel-notes.md).
///
/// Every enqueue and dequeue moves a packet by value, so it is kept to one 64-byte
/// cache line (asserted below): what few packets carry — the 5-tuple, `skb->len`
/// while a size table's length is in `len`, the head of a frame without a 5-tuple —
/// is boxed in [`Rare`], and the socket is
/// shared by reference like the kernel's `skb->sk`. The simulator gives every packet
/// a 5-tuple, so its size-tabled packets pay nothing more; elsewhere a size-tabled
/// packet pays one allocation, where an inline field would cost every packet a
/// second cache line.
#[derive(Debug, PartialEq, Eq)]
pub struct Packet {
    /// Caller's identifier, carried through untouched (for tracing departures), below
    /// [`PART_SHIFT`]: the bits above it are the segment number a qdisc gives each
    /// packet it cuts out of a GSO skb ([`Packet::part`]).
    pub id: u64,
    /// Length in bytes as the qdisc counts it.
    pub len: u32,
    /// Number of wire segments this skb stands for (1 if not GSO). `Sent … pkt` counts these.
    pub gso_segs: u16,
    /// IPv4 TOS / IPv6 traffic class, including the two ECN bits.
    pub tos: u8,
    /// `skb->hash` (flow hash).
    pub hash: u32,
    /// `skb->priority` (a TC_PRIO_* value, or a classid `major:minor`).
    pub priority: u32,
    /// `skb->mark`.
    pub mark: u32,
    /// Memory the skb occupies (`skb->truesize`), used by fq_codel's memory_limit.
    pub truesize: u32,
    /// Earliest departure time (`skb->tstamp`); `Instant::ZERO` means none, as in the kernel.
    pub tstamp: Instant,
    /// Set by the qdisc that queued it: when it was enqueued.
    pub enqueued_at: Instant,
    /// The sending socket, if any (`skb->sk`), shared by all its packets.
    pub sk: Option<Arc<Socket>>,
    /// The 5-tuple ([`Packet::flow`]), the size-tabled packet's `skb->len` and a
    /// frame's head ([`Packet::frame`]); `None` when the packet has none, so equal
    /// packets compare equal.
    rare: Option<Box<Rare>>,
    /// [`CHARGED`], [`NETEM_DUP`], [`CORRUPTED`], [`STABBED`]: one byte, with unused
    /// values left as a niche for `Option<Packet>`.
    flags: Flags,
}

const _: () = assert!(std::mem::size_of::<Packet>() == 64 && std::mem::size_of::<Option<Packet>>() == 64);

/// The fields few packets have, out of line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Rare {
    /// The 5-tuple, if known.
    flow: Option<FlowKey>,
    /// `skb->len` while [`STABBED`] (crate::stab), else 0.
    stab_skb_len: u32,
    /// The frame's first bytes, if given ([`Packet::frame`]).
    frame: Option<Box<[u8]>>,
}

/// The most bytes of a frame's head a packet keeps ([`Packet::set_frame`]): an
/// Ethernet header, the largest network header the classifiers read as fields (IPv6's
/// 40) and a TCP header — the span [`crate::classify::Headers`] holds.
pub const FRAME_HEAD: usize = 14 + 40 + 20;

/// Four bits whose other values are invalid, as a `bool`'s are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Flags {
    F0,
    F1,
    F2,
    F3,
    F4,
    F5,
    F6,
    F7,
    F8,
    F9,
    F10,
    F11,
    F12,
    F13,
    F14,
    F15,
}

impl Flags {
    fn bits(self) -> u8 {
        self as u8
    }
    fn with(self, bits: u8) -> Flags {
        match bits & 15 {
            0 => Flags::F0,
            1 => Flags::F1,
            2 => Flags::F2,
            3 => Flags::F3,
            4 => Flags::F4,
            5 => Flags::F5,
            6 => Flags::F6,
            7 => Flags::F7,
            8 => Flags::F8,
            9 => Flags::F9,
            10 => Flags::F10,
            11 => Flags::F11,
            12 => Flags::F12,
            13 => Flags::F13,
            14 => Flags::F14,
            _ => Flags::F15,
        }
    }
}

/// `truesize` is charged to `sk`'s `wmem_alloc` (the skb has the socket's write
/// destructor, `skb_set_owner_w`): given back when the packet is freed or orphaned.
const CHARGED: u8 = 1;
/// A netem duplicate (`skb->tc_depth` raised): no netem duplicates it again.
const NETEM_DUP: u8 = 2;
/// netem's `corrupt` flipped a bit of it: the receiver's checksum check discards it.
const CORRUPTED: u8 = 4;
/// A size table set `len` (`qdisc_skb_cb(skb)->pkt_len`); `skb->len` is kept aside.
const STABBED: u8 = 8;

/// A clone is a new skb: it shares the socket but is not charged to it (as
/// `skb_clone` leaves the destructor with the original).
impl Clone for Packet {
    fn clone(&self) -> Self {
        Packet {
            id: self.id,
            len: self.len,
            gso_segs: self.gso_segs,
            tos: self.tos,
            hash: self.hash,
            priority: self.priority,
            mark: self.mark,
            truesize: self.truesize,
            tstamp: self.tstamp,
            enqueued_at: self.enqueued_at,
            sk: self.sk.clone(),
            rare: self.rare.clone(),
            flags: self.flags.with(self.flags.bits() & !CHARGED),
        }
    }
}

/// Freeing a charged packet (sent, or dropped anywhere) runs the socket's write
/// destructor (`sock_wfree`/`tcp_wfree`): its truesize leaves `sk_wmem_alloc`.
impl Drop for Packet {
    fn drop(&mut self) {
        self.orphan();
    }
}

impl Packet {
    /// A plain packet of `len` bytes: not GSO, priority 0, no socket.
    pub fn new(id: u64, len: u32) -> Self {
        Packet {
            id,
            len,
            gso_segs: 1,
            hash: 0,
            priority: 0,
            mark: 0,
            tos: 0,
            tstamp: Instant::ZERO,
            sk: None,
            truesize: packet_snd_truesize(len),
            enqueued_at: Instant::ZERO,
            rare: None,
            flags: Flags::F0,
        }
    }
    /// `skb_gso_segment` of a GSO packet: `gso_segs` new skbs sharing `len` as evenly
    /// as possible (larger ones first), each with the truesize of a frame of its
    /// length ([`packet_snd_truesize`]: `skb_segment`'s own head sizes are not
    /// modelled). The socket's charge stays with the original.
    /// Segment k (from 1) carries the original's id with k in its [`part`](Self::part),
    /// so the caller can tell which bytes of its skb each one holds.
    pub fn gso_segments(&self) -> impl Iterator<Item = Packet> + '_ {
        let segs = self.gso_segs.max(1) as u32;
        let (base, extra) = (self.skb_len() / segs, self.skb_len() % segs);
        (0..segs).map(move |i| {
            let seg_len = base + u32::from(i < extra);
            let mut seg = self.clone();
            // Each segment's qdisc length is its own skb's (tbf_segment).
            seg.unstab();
            (seg.len, seg.gso_segs, seg.truesize) = (seg_len, 1, packet_snd_truesize(seg_len));
            seg.id = self.whole_id() | (u64::from(i) + 1) << PART_SHIFT;
            seg
        })
    }
    /// `skb->len`: what the driver sends, whatever a size table made `len`.
    pub fn skb_len(&self) -> u32 {
        match &self.rare {
            Some(r) if self.flags.bits() & STABBED != 0 => r.stab_skb_len,
            _ => self.len,
        }
    }
    /// A size table's length for the qdiscs (`__qdisc_calculate_pkt_len`).
    pub(crate) fn set_qdisc_len(&mut self, len: u32) {
        let skb_len = self.skb_len();
        self.rare.get_or_insert_default().stab_skb_len = skb_len;
        self.flags = self.flags.with(self.flags.bits() | STABBED);
        self.len = len;
    }
    /// Leaving the qdisc tree (to the driver, or redirected): `len` is the skb's again.
    /// An unstabbed packet (the flag alone says so) never touches its box.
    pub fn unstab(&mut self) {
        if self.flags.bits() & STABBED == 0 {
            return;
        }
        self.len = self.skb_len();
        self.flags = self.flags.with(self.flags.bits() & !STABBED);
        self.set_rare(|r| r.stab_skb_len = 0);
    }
    /// The 5-tuple, if known.
    pub fn flow(&self) -> Option<&FlowKey> {
        self.rare.as_ref()?.flow.as_ref()
    }
    pub fn flow_mut(&mut self) -> Option<&mut FlowKey> {
        self.rare.as_mut()?.flow.as_mut()
    }
    /// Give the packet a 5-tuple, or take it away (`skb->hash` is left alone).
    pub fn set_flow(&mut self, flow: Option<FlowKey>) {
        self.set_rare(|r| r.flow = flow);
    }
    /// The frame's first bytes from the Ethernet header on, for a packet that has no
    /// 5-tuple to synthesize its headers from (an AF_PACKET frame, a non-IP frame of a
    /// capture): what the classifiers read (u32, the ematches, flower's MACs and
    /// ethertype; `skb->protocol` is its ethertype). Bytes past it, up to the packet's
    /// length, read as zeros. A 5-tuple, if also set, wins.
    pub fn frame(&self) -> Option<&[u8]> {
        self.rare.as_ref()?.frame.as_deref()
    }
    /// Give the packet its frame's head (at most [`FRAME_HEAD`] bytes are kept, without
    /// the zeros they end with, which read the same), or take it away.
    pub fn set_frame(&mut self, head: Option<&[u8]>) {
        let head = head.map(|h| {
            let h = &h[..h.len().min(FRAME_HEAD)];
            let end = h.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            Box::from(&h[..end])
        });
        self.set_rare(|r| r.frame = head);
    }
    pub fn with_frame(mut self, head: &[u8]) -> Self {
        self.set_frame(Some(head));
        self
    }
    /// Change the boxed fields, keeping the box only while it holds something.
    fn set_rare(&mut self, f: impl FnOnce(&mut Rare)) {
        match &mut self.rare {
            Some(r) => {
                f(r);
                if **r == Rare::default() {
                    self.rare = None;
                }
            }
            None => {
                let mut r = Rare::default();
                f(&mut r);
                if r != Rare::default() {
                    self.rare = Some(Box::new(r));
                }
            }
        }
    }
    /// 0 for a packet as its sender built it; k ≥ 1 for the k-th segment a qdisc cut
    /// out of the GSO skb [`whole_id`](Self::whole_id) (tbf's, netem's and cake's
    /// software segmentation). An embedder's ids stay below `1 << PART_SHIFT`.
    pub fn part(&self) -> u16 {
        (self.id >> PART_SHIFT) as u16
    }
    /// The id the sender gave the skb this packet is, or was cut out of.
    pub fn whole_id(&self) -> u64 {
        self.id & ((1 << PART_SHIFT) - 1)
    }
    /// `skb_set_owner_w`: attach the socket and charge the packet's truesize to its
    /// `wmem_alloc` until the packet is freed or [orphaned](Packet::orphan).
    pub fn set_owner_w(&mut self, sk: Arc<Socket>) {
        self.orphan();
        sk.wmem_alloc.fetch_add(self.truesize as u64, Ordering::Relaxed);
        self.sk = Some(sk);
        self.flags = self.flags.with(self.flags.bits() | CHARGED);
    }
    /// `skb_orphan`'s accounting: give the truesize back to the socket now (the
    /// socket stays attached for classification). Returns whether it was charged.
    pub fn orphan(&mut self) -> bool {
        if self.flags.bits() & CHARGED == 0 {
            return false;
        }
        self.flags = self.flags.with(self.flags.bits() & !CHARGED);
        if let Some(sk) = &self.sk {
            sk.wmem_alloc.fetch_sub(self.truesize as u64, Ordering::Relaxed);
        }
        true
    }
    /// A netem duplicate (see [`NETEM_DUP`]).
    pub fn netem_dup(&self) -> bool {
        self.flags.bits() & NETEM_DUP != 0
    }
    pub fn set_netem_dup(&mut self) {
        self.flags = self.flags.with(self.flags.bits() | NETEM_DUP);
    }
    /// Corrupted by netem (see [`CORRUPTED`]).
    pub fn corrupted(&self) -> bool {
        self.flags.bits() & CORRUPTED != 0
    }
    pub fn set_corrupted(&mut self) {
        self.flags = self.flags.with(self.flags.bits() | CORRUPTED);
    }
    pub fn with_priority(mut self, prio: u32) -> Self {
        self.priority = prio;
        self
    }
    pub fn with_hash(mut self, hash: u32) -> Self {
        self.hash = hash;
        self
    }
    pub fn with_flow(mut self, flow: FlowKey) -> Self {
        self.hash = flow.hash();
        self.set_flow(Some(flow));
        self
    }
    pub fn with_socket(mut self, sk: Arc<Socket>) -> Self {
        self.sk = Some(sk);
        self
    }
    /// The ECN field (low two bits of the dsfield).
    pub fn ecn(&self) -> u8 {
        self.tos & 0b11
    }
    /// `INET_ECN_set_ce`: mark Congestion Experienced on an ECN-capable packet.
    /// Returns false for Not-ECT (the caller must drop instead); a packet already
    /// marked CE counts as marked.
    pub fn set_ce(&mut self) -> bool {
        match self.ecn() {
            0b00 => false,
            _ => {
                self.tos |= 0b11;
                true
            }
        }
    }
}

// ---- skb->truesize: how the kernel sizes the skbs made here ----------------------
//
// Every skb's truesize is `SKB_TRUESIZE(skb_end_offset)` for its head plus what its
// page frags add. The head comes from `__alloc_skb(size)` → `kmalloc_reserve`: the
// request is cache-line aligned (`SKB_DATA_ALIGN`) and the `skb_shared_info` added
// after it (`SKB_HEAD_ALIGN`); a request that fits `skb_small_head_cache` gets that
// object, any other the kmalloc bucket `kmalloc_size_roundup` names (powers of two
// from 1024 on here: the 96 and 192 buckets are below the small head), or whole pages
// beyond the largest bucket. `skb_end_offset` is that object less the shared info, so
// the truesize is the object plus the aligned `struct sk_buff`. The constants are
// x86_64's with Debian 6.12/6.18's configuration (the kernels of goldens/).

/// `SMP_CACHE_BYTES` on x86_64: what `SKB_DATA_ALIGN` rounds to.
pub const SMP_CACHE_BYTES: u32 = 64;
/// `SKB_DATA_ALIGN(sizeof(struct skb_shared_info))` (320 on x86_64 6.12/6.18).
pub const SKB_SHINFO_SIZE: u32 = 320;
/// `SKB_DATA_ALIGN(sizeof(struct sk_buff))` (232 bytes → 256).
pub const SKB_STRUCT_SIZE: u32 = 256;
/// `MAX_HEADER`: LL_MAX_HEADER (128 with CONFIG_HYPERV_NET) + 48 (IP tunnels built).
const MAX_HEADER: u32 = 128 + 48;
/// `MAX_TCP_HEADER` = `L1_CACHE_ALIGN(128 + MAX_HEADER)`: 320.
pub const MAX_TCP_HEADER: u32 = (128 + MAX_HEADER).div_ceil(SMP_CACHE_BYTES) * SMP_CACHE_BYTES;
/// `GRO_MAX_HEAD_PAD`: `GRO_MAX_HEAD` (MAX_HEADER + 128) + `NET_SKB_PAD` (64) +
/// `NET_IP_ALIGN` (0 on x86): 368.
const GRO_MAX_HEAD_PAD: u32 = MAX_HEADER + 128 + 64;
/// `SKB_SMALL_HEAD_CACHE_SIZE`: `SKB_HEAD_ALIGN(max(MAX_TCP_HEADER, GRO_MAX_HEAD_PAD))`
/// = 384 + 320 = 704 (not a power of two, so not bumped by a cache line). A 60-byte
/// AF_PACKET frame's truesize, 960, is this head's (goldens/kernel-6.12/cake-traffic).
pub const SKB_SMALL_HEAD_CACHE_SIZE: u32 = {
    let m = if MAX_TCP_HEADER > GRO_MAX_HEAD_PAD { MAX_TCP_HEADER } else { GRO_MAX_HEAD_PAD };
    m.div_ceil(SMP_CACHE_BYTES) * SMP_CACHE_BYTES + SKB_SHINFO_SIZE
};
/// `KMALLOC_MAX_CACHE_SIZE` with SLUB (2 pages); larger heads come from the page allocator.
const KMALLOC_MAX_CACHE_SIZE: u32 = 8192;
pub const PAGE_SIZE: u32 = 4096;
/// `PAGE_ALLOC_COSTLY_ORDER`: the largest page order `alloc_skb_with_frags` tries.
const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;
/// `LL_RESERVED_SPACE(dev)` of an Ethernet device (ifb, veth: hard_header_len 14, no
/// needed_headroom): 14 rounded down to `HH_DATA_MOD` (16) plus 16.
pub const LL_RESERVED_SPACE_ETH: u32 = 16;
/// `ETH_HLEN`: an Ethernet device's `hard_header_len`.
const ETH_HLEN: u32 = 14;

/// `skb->truesize` of `__alloc_skb(size)` (`kmalloc_reserve`, then `SKB_TRUESIZE` of
/// the head's `skb_end_offset`): 1016 bytes → 1024 + 320 → the 2048 bucket → 2304;
/// up to 384 bytes → the small head → 960.
pub const fn alloc_skb_truesize(size: u32) -> u32 {
    let obj = size.div_ceil(SMP_CACHE_BYTES) * SMP_CACHE_BYTES + SKB_SHINFO_SIZE;
    let head = if obj <= SKB_SMALL_HEAD_CACHE_SIZE {
        SKB_SMALL_HEAD_CACHE_SIZE
    } else if obj <= KMALLOC_MAX_CACHE_SIZE {
        obj.next_power_of_two()
    } else {
        // kmalloc_size_roundup past the caches: PAGE_SIZE << get_order(obj).
        obj.div_ceil(PAGE_SIZE).next_power_of_two() * PAGE_SIZE
    };
    head + SKB_STRUCT_SIZE
}

/// `skb->truesize` of a `len`-byte frame an AF_PACKET socket sends on an Ethernet device
/// (`packet_snd` → `packet_alloc_skb` → `sock_alloc_send_pskb`): the head reserves
/// `LL_RESERVED_SPACE` before the frame; a frame that with it fits under a page is
/// linear, a longer one keeps its link header in the head and the rest in page frags
/// of up to order 3, each adding its whole allocation (`alloc_skb_with_frags`). This
/// is what the goldens' `# send` frames (qdl-sendraw) are, and the rule of
/// [`Packet::new`].
pub const fn packet_snd_truesize(len: u32) -> u32 {
    let prepad = LL_RESERVED_SPACE_ETH;
    if prepad + len < PAGE_SIZE {
        return alloc_skb_truesize(prepad + len);
    }
    let linear = if len < ETH_HLEN { len } else { ETH_HLEN };
    let mut truesize = alloc_skb_truesize(prepad + linear);
    let mut data_len = len - linear;
    let mut order = PAGE_ALLOC_COSTLY_ORDER;
    while data_len > 0 {
        while order > 0 && data_len.div_ceil(PAGE_SIZE) * PAGE_SIZE < PAGE_SIZE << order {
            order -= 1;
        }
        let chunk = if data_len < PAGE_SIZE << order { data_len } else { PAGE_SIZE << order };
        truesize += PAGE_SIZE << order;
        data_len -= chunk;
    }
    truesize
}

/// `skb->truesize` of a UDP/IPv4 datagram of `payload` bytes from a socket
/// (`__ip_append_data`, one linear skb): `sock_alloc_send_skb` of the IPv4 and UDP
/// headers and the payload plus `LL_RESERVED_SPACE` + 15 (`alloc_extra`). 1460 payload
/// bytes: 1519 → 1536 + 320 → 2048 → 2304.
pub const fn ip_append_data_truesize(payload: u32) -> u32 {
    alloc_skb_truesize(payload + 8 + 20 + LL_RESERVED_SPACE_ETH + 15)
}

/// `skb->truesize` of a TCP skb carrying `payload` bytes: the head
/// `tcp_stream_alloc_skb` (and `tcp_send_ack`) allocates, `alloc_skb(MAX_TCP_HEADER)`
/// from the small head cache (960), plus the payload's bytes, which the page frags
/// add exactly (`skb_copy_to_page_nocache`; `tso_fragment`, `tcp_fragment` and
/// `skb_shift` move truesize with the bytes).
pub const fn tcp_skb_truesize(payload: u32) -> u32 {
    alloc_skb_truesize(MAX_TCP_HEADER) + payload
}

/// `ip_tos2prio`, indexed by `IPTOS_TOS(tos) >> 1` (include/net/route.h; the
/// ECN_OR_COST entries equal their neighbours since the ECN bits are masked off).
const IP_TOS2PRIO: [u32; 16] = [0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4];

/// `rt_tos2priority`: the skb priority a TOS byte stands for — what `ip_forward` gives
/// a forwarded IPv4 packet and IP_TOS (`__ip_sock_set_tos`) gives a socket's
/// `sk_priority`.
pub fn rt_tos2priority(tos: u8) -> u32 {
    IP_TOS2PRIO[((tos & 0x1E) >> 1) as usize]
}

#[cfg(test)]
mod tests {
    use super::{FlowKey, Packet, Socket};
    use std::sync::Arc;

    #[test]
    fn the_size_tabled_length_and_the_5_tuple_share_one_box() {
        let key = FlowKey { sport: 5, dport: 6, proto: 17, ..FlowKey::default() };
        for flow in [None, Some(key)] {
            let mut p = Packet::new(1, 3000);
            p.set_flow(flow);
            p.gso_segs = 2;
            let fresh = p.clone();
            p.set_qdisc_len(4000);
            assert_eq!((p.len, p.skb_len(), p.flow()), (4000, 3000, flow.as_ref()));
            assert_ne!(p, fresh);
            // A clone carries both; segments only the 5-tuple, at their own length.
            let c = p.clone();
            assert_eq!((c.len, c.skb_len(), c.flow()), (4000, 3000, flow.as_ref()));
            for s in p.gso_segments() {
                assert_eq!((s.len, s.skb_len(), s.flow()), (1500, 1500, flow.as_ref()));
                assert_eq!(s.rare.is_some(), flow.is_some());
            }
            p.unstab();
            assert_eq!((p.len, p.skb_len(), p.flow()), (3000, 3000, flow.as_ref()));
            // Nothing of the table is left: it equals the packet it was, box and all.
            assert_eq!(p, fresh);
            assert_eq!(p.rare.is_some(), flow.is_some());
            p.set_flow(None);
            assert!(p.rare.is_none());
        }
    }

    #[test]
    fn charged_packets_give_their_truesize_back_once() {
        let sk = Arc::new(Socket::default());
        let mut a = Packet::new(1, 1514);
        a.set_owner_w(sk.clone());
        let mut b = Packet::new(2, 100);
        b.set_owner_w(sk.clone());
        assert_eq!(sk.wmem_alloc(), (a.truesize + b.truesize) as u64);
        let c = a.clone();
        drop(c);
        assert_eq!(sk.wmem_alloc(), (a.truesize + b.truesize) as u64, "a clone is not charged");
        assert!(a.orphan());
        assert!(!a.orphan());
        assert_eq!(sk.wmem_alloc(), b.truesize as u64);
        drop(a);
        assert_eq!(sk.wmem_alloc(), b.truesize as u64);
        drop(b);
        assert_eq!(sk.wmem_alloc(), 0);
    }
}

#[cfg(test)]
mod truesize_tests {
    use super::*;

    #[test]
    fn af_packet_frames_take_a_small_head_a_kmalloc_bucket_or_pages() {
        // len + 16 aligned to 64, + 320 of shared info: ≤ 704 is the small head; else
        // the power-of-two bucket; the truesize adds the sk_buff's 256.
        assert_eq!(packet_snd_truesize(60), 704 + 256); // 76 → 128 + 320 = 448
        assert_eq!(packet_snd_truesize(368), 704 + 256); // 384 + 320 = 704
        assert_eq!(packet_snd_truesize(369), 1024 + 256); // 448 + 320 = 768
        assert_eq!(packet_snd_truesize(1000), 2048 + 256); // 1024 + 320 = 1344
        assert_eq!(packet_snd_truesize(1514), 2048 + 256); // 1536 + 320 = 1856
        assert_eq!(packet_snd_truesize(1712), 2048 + 256); // 1728 + 320 = 2048
        assert_eq!(packet_snd_truesize(1713), 4096 + 256); // 1729 → 1792 + 320
        assert_eq!(packet_snd_truesize(4079), 8192 + 256); // 4095 → 4096 + 320
                                                           // From a page on: the 14-byte link header in a small head (30 bytes), the rest
                                                           // in frags of 2^order pages, the largest order PAGE_ALIGN(rest) fills.
        assert_eq!(packet_snd_truesize(4080), 960 + 4096); // 4066 left: one page
        assert_eq!(packet_snd_truesize(9014), 960 + 8192 + 4096); // 9000: 8192, then 808
                                                                  // Past the largest kmalloc cache, whole pages in a power of two.
        assert_eq!(alloc_skb_truesize(8000), 16384 + 256); // 8000 + 320 = 8320: 3 → 4 pages
    }

    #[test]
    fn udp_and_tcp_skbs() {
        // __ip_append_data: payload + 28 of headers + 16 + 15.
        assert_eq!(ip_append_data_truesize(64), 960); // 123 → 128 + 320
        assert_eq!(ip_append_data_truesize(1460), 2304); // 1519 → 1536 + 320 = 1856
        assert_eq!(ip_append_data_truesize(1733), 4352); // 1792 + 320 = 2112: the 4096 bucket
                                                         // tcp_stream_alloc_skb: MAX_TCP_HEADER (320) + 320 = 640 fits the small head.
        assert_eq!(tcp_skb_truesize(0), 960);
        assert_eq!(tcp_skb_truesize(1448), 960 + 1448);
        assert_eq!(Packet::new(1, 1000).truesize, 2304);
    }
}

#[cfg(test)]
mod ecn_tests {
    use super::{rt_tos2priority, Packet};

    #[test]
    fn tos_to_priority_like_rt_tos2priority() {
        assert_eq!(rt_tos2priority(0x00), 0);
        assert_eq!(rt_tos2priority(0x10), 6); // IPTOS_LOWDELAY
        assert_eq!(rt_tos2priority(0x08), 2); // IPTOS_THROUGHPUT
        assert_eq!(rt_tos2priority(0xB8), 4); // DSCP EF
        assert_eq!(rt_tos2priority(0x03), 0); // ECN bits do not count
    }

    #[test]
    fn set_ce_follows_inet_ecn_set_ce() {
        for (tos, ok, after) in [
            (0x00, false, 0x00),
            (0x01, true, 0x03),
            (0x02, true, 0x03),
            (0x03, true, 0x03),
            (0xb8, false, 0xb8),
            (0xba, true, 0xbb),
        ] {
            let mut p = Packet::new(1, 100);
            p.tos = tos;
            assert_eq!(p.set_ce(), ok, "tos {tos:#x}");
            assert_eq!(p.tos, after);
        }
    }
}
