//! Size tables (`tc qdisc … stab …`): what a qdisc tree accounts a packet as.
//!
//! tc turns `overhead`, `mpu`, `linklayer`, `mtu` and `tsize` into a `tc_sizespec`
//! and, unless only an overhead is asked for on Ethernet, a table of `tsize` u16
//! slots (tc/tc_stab.c `parse_size_table`, tc/tc_core.c `tc_calc_size_table`):
//! slot `i` holds the accounted size of a packet of up to `(i + 1) << cell_log`
//! bytes — raised to `mpu`, rounded up to whole 53-byte ATM cells of 48 bytes of
//! payload for `linklayer atm`/`adsl` — shifted right by `size_log` so it fits 16 bits.
//!
//! The kernel keeps the table on the qdisc (`qdisc_get_stab`) and applies it once,
//! in `__dev_xmit_skb`, with the qdisc the packet is handed to: the device's root,
//! or under mq/mqprio the tx queue's own child. `__qdisc_calculate_pkt_len` replaces
//! `qdisc_pkt_len` with a value computed from `skb->len` (so a GSO skb loses the extra
//! segment headers `qdisc_pkt_len_segs_init` counted). Every qdisc below then sees
//! that length: shapers charge it, `Sent` counts it. The driver still sends
//! `skb->len` bytes (the engine keeps it, [`Packet::skb_len`]). A table on a qdisc
//! grafted below a class is refused (`qdisc_graft`: "STAB not supported on a non
//! root") unless its parent is mq-like; one reaching a class qdisc through `change`
//! is kept but never applied, as in the kernel.

use crate::packet::Packet;
use crate::rate::LinkLayer;
use crate::tc::units::{get_integer10, get_unsigned10};
use crate::tc::{duparg, invarg, matches, Args, Out, TcError};

/// `STAB_SIZE_LOG_MAX`: the largest cell_log / size_log the kernel takes.
const STAB_SIZE_LOG_MAX: u8 = 30;
/// ATM: 48 bytes of payload in a 53-byte cell (tc_core.c).
const ATM_CELL_PAYLOAD: u32 = 48;
const ATM_CELL_SIZE: u32 = 53;
/// The room tc's request has for attributes (`TCA_BUF_MAX`) and the whole request
/// (`struct nlmsghdr` + `struct tcmsg` + that): a table bigger than the buffer is
/// left out by `addattr_l`, which names the bound.
const TCA_BUF_MAX: usize = 64 * 1024;
const REQ_SIZE: usize = 16 + 20 + TCA_BUF_MAX;

/// `struct tc_sizespec`, as tc sends it and the kernel dumps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeSpec {
    pub cell_log: u8,
    pub size_log: u8,
    pub cell_align: i16,
    pub overhead: i32,
    /// `linklayer`: None is LINKLAYER_UNSPEC (0), what tc sends when none is given.
    pub linklayer: Option<LinkLayer>,
    pub mpu: u32,
    pub mtu: u32,
    pub tsize: u32,
}

/// `struct qdisc_size_table`: the spec and its slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeTable {
    pub spec: SizeSpec,
    pub data: Vec<u16>,
}

/// What `tc qdisc … stab …` asks for: the table, or the kernel's refusal of what
/// tc sent (checked when the qdisc is created or changed, as `qdisc_get_stab` does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StabRequest {
    Table(SizeTable),
    Refused(&'static str),
}

/// `stab_help`.
pub const STAB_USAGE: &str = "Usage: ... stab [ mtu BYTES ] [ tsize SLOTS ] [ mpu BYTES ]\n\
\x20               [ overhead BYTES ] [ linklayer TYPE ] ...\n\
\x20  mtu       : max packet size we create rate map for {2047}\n\
\x20  tsize     : how many slots should size table have {512}\n\
\x20  mpu       : minimum packet size used in rate computations\n\
\x20  overhead  : per-packet size overhead used in rate computations\n\
\x20  linklayer : adapting to a linklayer e.g. atm\n\
Example: ... stab overhead 20 linklayer atm\n";

/// `parse_size_table` (mirrored): the words after `stab`, up to the first it does not
/// know, which stays for the caller. `Ok(None)`: tc's silent `return -1` (`help`, or
/// nothing that needs a table: no overhead, mpu or linklayer) — the command fails
/// with status 255 and, for `help`, the usage in `a.notes`.
pub fn parse(a: &mut Args) -> Result<Option<SizeSpec>, TcError> {
    let first = a.peek().ok_or_else(TcError::incomplete)?;
    if matches(first, "help") {
        a.next();
        a.notes.push_str(STAB_USAGE);
        return Ok(None);
    }
    let mut s = SizeSpec::default();
    while let Some(w) = a.peek() {
        if matches(w, "mtu") {
            a.next();
            let v = a.value()?;
            if s.mtu != 0 {
                return Err(duparg("mtu", v));
            }
            s.mtu = get_unsigned10(v).ok_or_else(|| invarg("mtu", "invalid mtu"))?;
        } else if matches(w, "mpu") {
            a.next();
            let v = a.value()?;
            if s.mpu != 0 {
                return Err(duparg("mpu", v));
            }
            s.mpu = get_unsigned10(v).ok_or_else(|| invarg("mpu", "invalid mpu"))?;
        } else if matches(w, "overhead") {
            a.next();
            let v = a.value()?;
            if s.overhead != 0 {
                return Err(duparg("overhead", v));
            }
            s.overhead = get_integer10(v).ok_or_else(|| invarg("overhead", "invalid overhead"))?;
        } else if matches(w, "tsize") {
            a.next();
            let v = a.value()?;
            if s.tsize != 0 {
                return Err(duparg("tsize", v));
            }
            s.tsize = get_unsigned10(v).ok_or_else(|| invarg("tsize", "invalid table size"))?;
        } else if matches(w, "linklayer") {
            a.next();
            let v = a.value()?;
            if s.linklayer.is_some() {
                return Err(duparg("linklayer", v));
            }
            s.linklayer = Some(LinkLayer::parse(v).ok_or_else(|| invarg("linklayer", "invalid linklayer"))?);
        } else {
            break;
        }
    }
    // check_size_table_opts
    let wanted = s.linklayer.is_some() || s.mpu != 0 || s.overhead != 0;
    Ok(wanted.then_some(s))
}

/// `tc_adjust_size`: at least `mpu`, then whole ATM cells on ATM.
fn adjust_size(sz: u32, mpu: u32, linklayer: Option<LinkLayer>) -> u32 {
    let sz = sz.max(mpu);
    if linklayer == Some(LinkLayer::Atm) {
        sz.div_ceil(ATM_CELL_PAYLOAD).wrapping_mul(ATM_CELL_SIZE)
    } else {
        sz
    }
}

/// `tc_calc_size_table` and the kernel's `qdisc_get_stab` checks: what reaches the
/// qdisc. `notes` gets what tc prints on the way (a table too big for its request).
pub fn build(mut s: SizeSpec, notes: &mut String) -> StabRequest {
    if s.linklayer != Some(LinkLayer::Atm) && s.mpu == 0 {
        // Only an overhead: no table.
        s.mtu = 0;
        s.tsize = 0;
        s.cell_log = 0;
        s.cell_align = 0;
        return StabRequest::Table(SizeTable { spec: s, data: Vec::new() });
    }
    if s.mtu == 0 {
        s.mtu = 2047;
    }
    if s.tsize == 0 {
        s.tsize = 512;
    }
    // tc's loop shifts a 32-bit mtu; past 31 it would not end, so the search stops
    // where the kernel's limit would refuse the table anyway.
    s.cell_log = 0;
    while u64::from(s.mtu) >> s.cell_log > u64::from(s.tsize - 1) && s.cell_log <= STAB_SIZE_LOG_MAX {
        s.cell_log += 1;
    }
    s.cell_align = -1;
    // addattr_l: TCA_STAB_DATA (a 4-byte header and the slots) must fit tc's request.
    if 4 + 2 * s.tsize as usize > TCA_BUF_MAX {
        notes.push_str(&format!("addattr_l ERROR: message exceeded bound of {REQ_SIZE}\n"));
        return StabRequest::Refused("Size table data attribute is missing");
    }
    if s.cell_log > STAB_SIZE_LOG_MAX {
        return StabRequest::Refused("Invalid logarithmic size of size table");
    }
    s.size_log = 0;
    let data = loop {
        let sizes = (0..s.tsize).map(|i| adjust_size((i + 1).wrapping_shl(u32::from(s.cell_log)), s.mpu, s.linklayer));
        if sizes.clone().all(|sz| sz >> s.size_log <= u32::from(u16::MAX)) {
            break sizes.map(|sz| (sz >> s.size_log) as u16).collect();
        }
        s.size_log += 1;
    };
    if s.size_log > STAB_SIZE_LOG_MAX {
        return StabRequest::Refused("Invalid logarithmic size of size table");
    }
    StabRequest::Table(SizeTable { spec: s, data })
}

impl SizeTable {
    /// `__qdisc_calculate_pkt_len`: the length the tree accounts for an skb of
    /// `skb_len` bytes (at least 1).
    pub fn pkt_len(&self, skb_len: u32) -> u32 {
        let s = &self.spec;
        let mut len = (skb_len as i64).wrapping_add(s.overhead as i64) as i32;
        if s.tsize > 0 {
            let slot = len.wrapping_add(s.cell_align as i32).max(0) >> s.cell_log;
            let slot = slot as u32;
            let t = s.tsize;
            len = if slot < t {
                self.data[slot as usize] as i32
            } else {
                (self.data[t as usize - 1] as i32)
                    .wrapping_mul((slot / t) as i32)
                    .wrapping_add(self.data[(slot % t) as usize] as i32)
            };
            len = len.wrapping_shl(u32::from(s.size_log));
        }
        len.max(1) as u32
    }

    /// Account `pkt` with this table (`qdisc_calculate_pkt_len`).
    pub fn apply(&self, pkt: &mut Packet) {
        let len = self.pkt_len(pkt.skb_len());
        pkt.set_qdisc_len(len);
    }

    /// `print_size_table` (after the qdisc line with `-d`): the spec as dumped.
    pub fn dump(&self, out: &mut Out) {
        let s = &self.spec;
        out.open_object(Some("stab"));
        out.fp(format_args!(" "));
        if let Some(l) = s.linklayer {
            out.string("linklayer", format_args!("linklayer {} ", l.name()), l.name());
        }
        if s.overhead != 0 {
            out.int("overhead", format_args!("overhead {} ", s.overhead), s.overhead as i64);
        }
        if s.mpu != 0 {
            out.uint("mpu", format_args!("mpu {} ", s.mpu), s.mpu as u64);
        }
        if s.mtu != 0 {
            out.uint("mtu", format_args!("mtu {} ", s.mtu), s.mtu as u64);
        }
        if s.tsize != 0 {
            out.uint("tsize", format_args!("tsize {} ", s.tsize), s.tsize as u64);
        }
        out.close_object();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::argv;

    fn table(words: &str) -> SizeTable {
        let v = argv(words);
        let spec = parse(&mut Args::new(&v)).unwrap().unwrap();
        match build(spec, &mut String::new()) {
            StabRequest::Table(t) => t,
            StabRequest::Refused(e) => panic!("{e}"),
        }
    }

    #[test]
    fn overhead_alone_needs_no_table() {
        let t = table("overhead 24");
        assert_eq!((t.spec.tsize, t.spec.mtu, t.spec.cell_log, t.spec.cell_align), (0, 0, 0, 0));
        assert_eq!(t.pkt_len(1500), 1524);
        // Negative overheads clamp at one byte.
        assert_eq!(table("overhead -100").pkt_len(60), 1);
    }

    #[test]
    fn atm_table_rounds_to_cells() {
        // mtu 2047 in 512 slots: cell_log 2 (2047 >> 2 = 511), cell_align -1.
        let t = table("linklayer atm overhead 10");
        assert_eq!(
            (t.spec.mtu, t.spec.tsize, t.spec.cell_log, t.spec.size_log, t.spec.cell_align),
            (2047, 512, 2, 0, -1)
        );
        // slot i: (i + 1) * 4 bytes in 53-byte cells of 48.
        assert_eq!(t.data[0], 53);
        assert_eq!(t.data[11], 53); // 48 bytes: one cell
        assert_eq!(t.data[12], 106); // 52 bytes: two
                                     // 1500 + 10 = 1510: slot (1509 >> 2) = 377, 1512 bytes -> 32 cells.
        assert_eq!(t.pkt_len(1500), 32 * 53);
        // 38 + 10 = 48: slot 11, one cell; 39 + 10 = 49 two.
        assert_eq!((t.pkt_len(38), t.pkt_len(39)), (53, 106));
        // Beyond the table: last slot times the wraps plus the remainder's slot.
        // 4000 + 10: slot 1002 = 512 + 490 -> data[511] + data[490].
        assert_eq!(t.pkt_len(4000), (t.data[511] + t.data[490]) as u32);
    }

    #[test]
    fn mpu_and_size_log() {
        let t = table("mpu 64 linklayer ethernet");
        assert_eq!(t.pkt_len(20), 64);
        assert_eq!(t.pkt_len(1000), 1000);
        // Slots above 65535 bytes raise size_log until they fit.
        let t = table("mpu 64 mtu 200000 tsize 256");
        assert_eq!((t.spec.cell_log, t.spec.size_log), (10, 3));
        // 100000 bytes: slot 97 (99999 >> 10), (98 << 10) >> 2 = 25088, shifted back.
        assert_eq!(t.pkt_len(100000), 98 << 10);
    }

    #[test]
    fn tc_words_and_refusals() {
        let mut notes = String::new();
        let v = argv("help");
        let mut a = Args::new(&v);
        assert_eq!(parse(&mut a), Ok(None));
        assert!(a.notes.starts_with("Usage: ... stab [ mtu BYTES ]"));
        // Nothing that needs a table: tc's silent failure.
        assert_eq!(parse(&mut Args::new(&argv("mtu 1000 tsize 10 htb"))), Ok(None));
        let v = argv("o 10 htb");
        let mut a = Args::new(&v);
        assert_eq!(parse(&mut a).unwrap().map(|s| s.overhead), Some(10));
        assert_eq!(a.peek(), Some("htb"));
        let e = parse(&mut Args::new(&argv("overhead 1 overhead 2"))).unwrap_err();
        assert_eq!(e.msg, "Error: duplicate \"overhead\": \"2\" is the second value.\n");
        let e = parse(&mut Args::new(&argv("linklayer foo"))).unwrap_err();
        assert_eq!(e.msg, "Error: argument \"invalid linklayer\" is wrong: linklayer\n");
        assert_eq!(e.code, 255);
        assert_eq!(parse(&mut Args::new(&argv("mtu"))).unwrap_err(), TcError::incomplete());
        assert_eq!(parse(&mut Args::new(&[])).unwrap_err(), TcError::incomplete());
        let s = parse(&mut Args::new(&argv("mpu 64 tsize 40000"))).unwrap().unwrap();
        assert_eq!(build(s, &mut notes), StabRequest::Refused("Size table data attribute is missing"));
        assert_eq!(notes, "addattr_l ERROR: message exceeded bound of 65572\n");
        let s = parse(&mut Args::new(&argv("mpu 64 tsize 1 mtu 4000000000"))).unwrap().unwrap();
        assert_eq!(build(s, &mut notes), StabRequest::Refused("Invalid logarithmic size of size table"));
    }

    fn tc(spec: &str, script: &[&str]) -> crate::tc::Tc {
        let mut tc = crate::tc::Tc::new(&[crate::tree::DevSpec::parse(spec).unwrap()]);
        for l in script {
            let out = tc.run(&argv(l));
            assert_eq!(out.code, 0, "{l}: {}", out.stderr);
        }
        tc
    }

    #[test]
    fn the_tree_accounts_the_table_and_the_driver_gets_the_skb() {
        use crate::qdisc::Dequeued;
        use crate::testing::t;
        let mut tc = tc(
            "eth0",
            &["qdisc add dev eth0 root handle 1: stab overhead 24 linklayer atm tbf rate 1mbit burst 3000 limit 10000"],
        );
        let d = tc.device_mut("eth0").unwrap();
        // 1000 + 24 bytes in whole cells: 1024 -> slot 255 (1023 >> 2), 1024 B, 22 cells.
        assert!(matches!(d.xmit(Packet::new(1, 1000), t(0), false), crate::tree::Xmit::Queued(_)));
        assert_eq!(d.root.stats().backlog, 22 * 53);
        let Dequeued::Packet(p) = d.dequeue(t(0)) else { panic!("tbf has tokens") };
        assert_eq!((p.len, p.skb_len()), (1000, 1000));
        assert_eq!(d.root.stats().bytes, 22 * 53);
        // 24 ms of bucket, 9.328 ms per 1166 bytes: the third waits 3.984 ms (1000-byte
        // frames would all fit).
        d.xmit(Packet::new(2, 1000), t(0), false);
        d.xmit(Packet::new(3, 1000), t(0), false);
        assert!(matches!(d.dequeue(t(0)), Dequeued::Packet(_)));
        assert_eq!(d.dequeue(t(0)), Dequeued::Throttled { until: t(3_984_000) });
    }

    #[test]
    fn under_mq_the_queues_table_applies_not_the_roots() {
        let mut tc = tc(
            "eth0,kind=eth,txqueues=2",
            &[
                "qdisc add dev eth0 root handle 1: stab overhead 100 mq",
                "qdisc replace dev eth0 parent 1:2 stab overhead 10 pfifo",
            ],
        );
        let d = tc.device_mut("eth0").unwrap();
        // Neither queue bypasses when the driver is busy.
        d.xmit_on(Packet::new(1, 500), 0, crate::testing::t(0), false);
        d.xmit_on(Packet::new(2, 500), 1, crate::testing::t(0), false);
        let out = tc.run(&argv("-s -d qdisc show dev eth0"));
        assert!(out.stdout.starts_with("qdisc mq 1: root \n overhead 100 \n Sent 0 bytes 0 pkt"), "{}", out.stdout);
        assert!(out.stdout.contains(" backlog 1010b 2p"), "{}", out.stdout);
        assert!(out.stdout.contains("qdisc pfifo 8001: parent 1:2 limit 1000p\n overhead 10 \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 510b 1p"), "{}", out.stdout);
        // A bypass counts the table's length and hands the driver the frame.
        let d = tc.device_mut("eth0").unwrap();
        let p = d.dequeue_txq(1, crate::testing::t(0)).packet().unwrap();
        assert_eq!(p.len, 500);
    }

    #[test]
    fn gso_segments_and_redirects_carry_the_skb_length() {
        let mut p = Packet::new(1, 3000);
        p.gso_segs = 2;
        p.set_qdisc_len(4000);
        assert_eq!((p.len, p.skb_len()), (4000, 3000));
        let segs: Vec<u32> = p.gso_segments().map(|s| s.len).collect();
        assert_eq!(segs, [1500, 1500]);
        assert!(p.gso_segments().all(|s| s.skb_len() == 1500));
        // A second table starts again from skb->len.
        p.set_qdisc_len(10);
        assert_eq!(p.skb_len(), 3000);
        p.unstab();
        assert_eq!((p.len, p.skb_len()), (3000, 3000));
    }
}
