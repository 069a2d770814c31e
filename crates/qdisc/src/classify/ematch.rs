//! Extended matches (ematch trees) of the basic and cgroup classifiers:
//! net/sched/ematch.c with em_cmp.c, em_u32.c, em_nbyte.c, em_meta.c and em_canid.c
//! on the kernel side; tc/m_ematch.c, its lexer and grammar (emp_ematch.l,
//! emp_ematch.y) and em_cmp.c, em_u32.c, em_nbyte.c, em_meta.c, em_canid.c on the tc
//! side.
//!
//! # The tree
//!
//! tc reads `EXPR := TERM [ { and | or } EXPR ]`, `TERM := [ not ] { KIND(ARGS) | ( EXPR ) }`
//! from the words after `match` (tokens never span words, except a quoted string).
//! The expression ends at the first token that cannot continue it: the words from
//! that one on go back to the classifier (tc "undoes" one word of look-ahead, also
//! when the words simply ran out). There is no precedence: a sequence is evaluated
//! left to right and stops at the first AND that fails or OR that holds
//! (`tcf_em_early_end`), so `a and b or c` is false whenever `a` is.
//!
//! The kernel gets the tree flattened (`flatten_tree`): the top sequence first, each
//! parenthesised sequence appended after it in the order they are met, and a
//! *container* in place of each parenthesis naming where its sequence starts.
//! [`Tree::matches`] walks that array with a stack as `__tcf_em_tree_match` does; an
//! empty tree matches everything.
//!
//! # What a match reads
//!
//! `cmp`, `u32` and `nbyte` read the packet's bytes as [`super::Headers`] synthesizes
//! them, from the link (Ethernet), network or transport header; a read outside the
//! packet fails the match (`tcf_valid_offset`), and a packet without a flow has no
//! readable bytes. `meta` reads the packet's metadata; the keys are iproute2's, and
//! those the engine can give are: `priority`, `protocol`, `pkt_len`, `nf_mark` /
//! `fwmark`, `tc_index` (always 0: nothing here writes `skb->tc_index`; dsmark and
//! tcindex left the kernel in 6.3), and `rt_classid` and `rt_iif` (the realms and
//! `inet_iif` of the route the packet took, [`super::Dst`]; a packet without one
//! fails the match, as `meta_get` errs without `skb_dst`). The others are refused by
//! name with the reason: the random and load-average keys (no random draws or CPU
//! load in a deterministic engine), `dev` (no device is attached to a packet),
//! `pkt_type`, `data_len` and `mac_len` (no `sk_buff` layout), `vlan` (no VLAN tags), and every `sk_*` key (the packet's
//! socket is not modelled field by field). Quoted (string) meta values are refused
//! too: the only string keys are `dev` and `sk_bind_if`.
//!
//! `canid` matches CAN identifiers, and em_canid_match does not look at the
//! protocol: it reads the first four bytes of `skb->data` (the Ethernet header here,
//! on x86 in host order) as a `can_id` whenever the packet has 16 bytes
//! (`CAN_MTU`). There are no CAN devices here, so it only ever sees Ethernet frames,
//! and answers for them as the kernel does: an extended-frame rule compares the id
//! under its mask, a standard-frame rule the low 11 bits (the kernel's bitmap of the
//! 2048 standard ids, computed per rule here). The other kinds tc knows (`ipset`,
//! `ipt`) are refused by name: no ipsets or xtables here.

use crate::tc::{Args, Out, TcError};

use super::Headers;

/// `TCF_EM_REL_AND` / `TCF_EM_REL_OR` / `TCF_EM_INVERT`.
const REL_AND: u16 = 1;
const REL_OR: u16 = 2;
const INVERT: u16 = 4;

/// `TCF_EM_OPND_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opnd {
    Eq,
    Gt,
    Lt,
}

impl Opnd {
    fn parse(w: &[u8]) -> Option<Opnd> {
        match w {
            b"eq" => Some(Opnd::Eq),
            b"gt" => Some(Opnd::Gt),
            b"lt" => Some(Opnd::Lt),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Opnd::Eq => "eq",
            Opnd::Gt => "gt",
            Opnd::Lt => "lt",
        }
    }
    fn holds<T: Ord>(self, a: T, b: T) -> bool {
        match self {
            Opnd::Eq => a == b,
            Opnd::Gt => a > b,
            Opnd::Lt => a < b,
        }
    }
}

/// `TCF_LAYER_LINK` / `NETWORK` / `TRANSPORT` (`TCF_LAYER_MAX` is 2).
const LAYER_MAX: u64 = 2;

/// One match of the flattened tree (`struct tcf_ematch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ematch {
    /// Relation to the next match of its sequence, and the inversion.
    flags: u16,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A parenthesised sequence starting at this index.
    Container(usize),
    /// `struct tcf_em_cmp`.
    Cmp { val: u32, mask: u32, off: u16, align: u8, layer: u8, trans: bool, opnd: Opnd },
    /// `struct tc_u32_key` (`offmask` only decides how tc prints it: basic passes no
    /// `nexthdr`).
    U32 { val: u32, mask: u32, off: i32, offmask: bool },
    /// `struct tcf_em_nbyte` + the needle.
    Nbyte { off: u16, layer: u8, needle: Vec<u8> },
    /// `struct tcf_meta_hdr` + the two values.
    Meta { left: MetaObj, opnd: Opnd, right: MetaObj },
    /// `struct can_filter` rules (`can_id`, `can_mask`) as em_canid_change keeps
    /// them: the extended-frame rules first, then the standard-frame ones.
    Canid(Vec<(u32, u32)>),
}

/// `CAN_EFF_FLAG`, `CAN_EFF_MASK`, `CAN_SFF_MASK` (linux/can.h).
const CAN_EFF_FLAG: u32 = 0x8000_0000;
const CAN_EFF_MASK: u32 = 0x1FFF_FFFF;
const CAN_SFF_MASK: u32 = 0x7FF;

/// One side of a meta comparison (`struct tcf_meta_val` + its value TLV).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MetaObj {
    /// None: a constant (`TCF_META_ID_VALUE`).
    id: Option<MetaId>,
    shift: u8,
    /// The constant, or for a key its mask (0: none).
    val: u32,
}

/// The meta keys the engine gives (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetaId {
    Priority,
    Protocol,
    PktLen,
    NfMark,
    TcIndex,
    RtClassid,
    RtIif,
}

/// iproute2's meta table (em_meta.c `meta_table`): name, type letters, description,
/// and what the engine does with the key (`Err`: why it is refused).
const META_TABLE: &[(&str, &str, &str, Result<MetaId, &str>)] = &[
    ("Generic", "", "", Err("")),
    ("random", "i", "Random value (32 bit)", Err("no random draws in a deterministic engine")),
    ("loadavg_1", "i", "Load average in last minute", Err("no CPU load is modelled")),
    ("loadavg_5", "i", "Load average in last 5 minutes", Err("no CPU load is modelled")),
    ("loadavg_15", "i", "Load average in last 15 minutes", Err("no CPU load is modelled")),
    ("Interfaces", "", "", Err("")),
    ("dev", "iv", "Device the packet is on", Err("no device is attached to a packet")),
    ("Packet attributes", "", "", Err("")),
    ("priority", "i", "Priority of packet", Ok(MetaId::Priority)),
    ("protocol", "i", "Link layer protocol", Ok(MetaId::Protocol)),
    ("pkt_type", "i", "Packet type (uni|multi|broad|...)cast", Err("no sk_buff packet type is modelled")),
    ("pkt_len", "i", "Length of packet", Ok(MetaId::PktLen)),
    ("data_len", "i", "Length of data in packet", Err("no sk_buff data layout is modelled")),
    ("mac_len", "i", "Length of link layer header", Err("no sk_buff data layout is modelled")),
    ("Netfilter", "", "", Err("")),
    ("nf_mark", "i", "Netfilter mark", Ok(MetaId::NfMark)),
    ("fwmark", "i", "Alias for nf_mark", Ok(MetaId::NfMark)),
    ("Traffic Control", "", "", Err("")),
    ("tc_index", "i", "TC Index", Ok(MetaId::TcIndex)),
    ("Routing", "", "", Err("")),
    ("rt_classid", "i", "Routing ClassID (cls_route)", Ok(MetaId::RtClassid)),
    ("rt_iif", "i", "Incoming interface index", Ok(MetaId::RtIif)),
    ("vlan", "i", "Vlan tag", Err("packets carry no VLAN tags here")),
    ("Sockets", "", "", Err("")),
    ("sk_family", "i", "Address family", Err(SK)),
    ("sk_state", "i", "State", Err(SK)),
    ("sk_reuse", "i", "Reuse Flag", Err(SK)),
    ("sk_bind_if", "iv", "Bound interface", Err(SK)),
    ("sk_refcnt", "i", "Reference counter", Err(SK)),
    ("sk_shutdown", "i", "Shutdown mask", Err(SK)),
    ("sk_proto", "i", "Protocol", Err(SK)),
    ("sk_type", "i", "Type", Err(SK)),
    ("sk_rcvbuf", "i", "Receive buffer size", Err(SK)),
    ("sk_rmem", "i", "RMEM", Err(SK)),
    ("sk_wmem", "i", "WMEM", Err(SK)),
    ("sk_omem", "i", "OMEM", Err(SK)),
    ("sk_wmem_queue", "i", "WMEM queue", Err(SK)),
    ("sk_snd_queue", "i", "Send queue length", Err(SK)),
    ("sk_rcv_queue", "i", "Receive queue length", Err(SK)),
    ("sk_err_queue", "i", "Error queue length", Err(SK)),
    ("sk_fwd_alloc", "i", "Forward allocations", Err(SK)),
    ("sk_sndbuf", "i", "Send buffer size", Err(SK)),
];
const SK: &str = "the packet's socket is not modelled field by field";

/// A section heading of [`META_TABLE`] (no type letters).
fn is_section(e: &(&str, &str, &str, Result<MetaId, &str>)) -> bool {
    e.1.is_empty()
}

impl MetaId {
    /// The name tc prints (`lookup_meta_entry_byid`: the first entry of the id).
    fn name(self) -> &'static str {
        META_TABLE.iter().find(|e| e.3 == Ok(self)).map(|e| e.0).expect("every id is in the table")
    }
}

/// An ematch tree (`struct tcf_ematch_tree`), flattened as the kernel keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    matches: Vec<Ematch>,
}

// ---- tc side: lexer (emp_ematch.l) ---------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    And,
    Or,
    Not,
    Open,
    Close,
    Attr {
        data: Vec<u8>,
        quoted: bool,
    },
    /// The lexer's ERROR (a bad escape in a quoted string); its message went to stderr.
    Error,
    End,
}

/// The lexer over the words after `match`: tc's `YY_INPUT` hands it one word at a
/// time with a blank appended, so `fed` counts the words it has taken.
struct Lexer<'a> {
    words: &'a [String],
    fed: usize,
    buf: Vec<u8>,
    pos: usize,
    /// What the lexer printed (escape errors).
    notes: String,
}

impl Lexer<'_> {
    /// The next byte, taking the next word when the current one is used up.
    fn peek(&mut self) -> Option<u8> {
        while self.pos >= self.buf.len() {
            // Empty words are skipped.
            let w = self.words.get(self.fed)?;
            self.fed += 1;
            if !w.is_empty() {
                self.buf = w.as_bytes().to_vec();
                self.buf.push(b' ');
                self.pos = 0;
            }
        }
        Some(self.buf[self.pos])
    }

    fn next(&mut self) -> Tok {
        loop {
            match self.peek() {
                None => return Tok::End,
                Some(b' ' | b'\t' | b'\r' | b'\n') => self.pos += 1,
                Some(_) => break,
            }
        }
        let c = self.buf[self.pos];
        match c {
            b'(' | b')' => {
                self.pos += 1;
                if c == b'(' {
                    Tok::Open
                } else {
                    Tok::Close
                }
            }
            b'"' => {
                self.pos += 1;
                self.string()
            }
            _ => {
                let start = self.pos;
                let end = self.buf[start..]
                    .iter()
                    .position(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'(' | b')'))
                    .map_or(self.buf.len(), |n| start + n);
                self.pos = end;
                let t = &self.buf[start..end];
                // flex: a keyword rule wins over ATTRIBUTE at equal length.
                if t.eq_ignore_ascii_case(b"and") {
                    Tok::And
                } else if t.eq_ignore_ascii_case(b"or") {
                    Tok::Or
                } else if t.eq_ignore_ascii_case(b"not") {
                    Tok::Not
                } else {
                    Tok::Attr { data: t.to_vec(), quoted: false }
                }
            }
        }
    }

    /// The `lexstr` state: up to the closing quote, across words, with C escapes.
    fn string(&mut self) -> Tok {
        let mut s = Vec::new();
        loop {
            let Some(c) = self.peek() else { return Tok::End };
            self.pos += 1;
            match c {
                b'"' => return Tok::Attr { data: s, quoted: true },
                b'\\' => {
                    let Some(e) = self.peek() else { return Tok::End };
                    let rest = &self.buf[self.pos..];
                    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                    let octal = rest.iter().take(3).take_while(|b| (b'0'..=b'7').contains(b)).count();
                    if digits > 0 {
                        // flex takes the longest match: `\\[0-9]+` beats `\\[0-7]{1,3}`.
                        if digits > octal {
                            self.pos += digits;
                            self.notes.push_str("error: invalid octale escape sequence\n");
                            return Tok::Error;
                        }
                        let v = rest[..octal].iter().fold(0u32, |v, d| v * 8 + (d - b'0') as u32);
                        self.pos += octal;
                        if v > 0xFF {
                            self.notes.push_str("error: octal escape sequence out of range\n");
                            return Tok::Error;
                        }
                        s.push(v as u8);
                    } else if e == b'x' && rest.get(1).is_some_and(u8::is_ascii_hexdigit) {
                        let n = rest[1..].iter().take(2).take_while(|b| b.is_ascii_hexdigit()).count();
                        let v = std::str::from_utf8(&rest[1..1 + n]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                        self.pos += 1 + n;
                        s.push(v.unwrap_or(0));
                    } else {
                        self.pos += 1;
                        s.push(match e {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'v' => 0x0b,
                            b'b' => 0x08,
                            b'f' => 0x0c,
                            b'a' => 0x07,
                            c => c,
                        });
                    }
                }
                c => s.push(c),
            }
        }
    }
}

// ---- tc side: grammar (emp_ematch.y) -------------------------------------------

/// A parsed term before flattening (`struct ematch`).
struct Node {
    inverted: bool,
    /// `TCF_EM_REL_*` to the next node of the sequence (0: last).
    relation: u16,
    /// The kind's name and its arguments, or a parenthesised sequence.
    body: Body,
}

enum Body {
    Args(Vec<Arg>),
    Child(Vec<Node>),
}

/// One argument (`struct bstr`).
#[derive(Clone, Debug)]
struct Arg {
    data: Vec<u8>,
    quoted: bool,
}

impl Arg {
    fn is(&self, s: &str) -> bool {
        self.data == s.as_bytes()
    }
    /// `bstrtoul`: C `strtoul(…, 0)` on a prefix; None for no number (or ULONG_MAX).
    fn ul(&self) -> Option<u64> {
        let (v, _) = crate::tc::units::strtol0_prefix(&self.data)?;
        let v = v as u64;
        (v != u64::MAX).then_some(v)
    }
    /// `bstr_print(…, 1)`: printable bytes, others as '.'.
    fn ascii(&self) -> String {
        ascii(&self.data)
    }
}

fn ascii(b: &[u8]) -> String {
    b.iter().map(|&c| if (0x20..0x7f).contains(&c) { c as char } else { '.' }).collect()
}

/// The grammar over the tokens, as bison runs it: LALR with one token of look-ahead,
/// and the single error rule `input: expr error`, which accepts a complete top-level
/// expression followed by anything.
struct Parser<'a> {
    lex: Lexer<'a>,
    look: Option<Tok>,
}

impl Parser<'_> {
    fn peek(&mut self) -> &Tok {
        if self.look.is_none() {
            self.look = Some(self.lex.next());
        }
        self.look.as_ref().expect("filled")
    }
    fn take(&mut self) -> Tok {
        self.peek();
        self.look.take().expect("filled")
    }

    /// `expr: match | match relation expr`.
    fn expr(&mut self) -> Option<Vec<Node>> {
        let mut seq = Vec::new();
        loop {
            let mut n = self.term()?;
            n.relation = match self.peek() {
                Tok::And => REL_AND,
                Tok::Or => REL_OR,
                _ => {
                    seq.push(n);
                    return Some(seq);
                }
            };
            self.take();
            seq.push(n);
        }
    }

    /// `match: invert ATTRIBUTE '(' args ')' | invert '(' expr ')'`.
    fn term(&mut self) -> Option<Node> {
        let inverted = matches!(self.peek(), Tok::Not);
        if inverted {
            self.take();
        }
        let body = match self.take() {
            Tok::Open => {
                let child = self.expr()?;
                if self.take() != Tok::Close {
                    return None;
                }
                Body::Child(child)
            }
            Tok::Attr { data, quoted } => {
                if self.take() != Tok::Open {
                    return None;
                }
                let mut args = vec![Arg { data, quoted }];
                loop {
                    match self.take() {
                        Tok::Attr { data, quoted } => args.push(Arg { data, quoted }),
                        Tok::Close if args.len() > 1 => break,
                        _ => return None,
                    }
                }
                Body::Args(args)
            }
            _ => return None,
        };
        Some(Node { inverted, relation: 0, body })
    }
}

const USAGE: &str = "Usage: EXPR
where: EXPR  := TERM [ { and | or } EXPR ]
       TERM  := [ not ] { MATCH | '(' EXPR ')' }
       MATCH := module '(' ARGS ')'
       ARGS := ARG1 ARG2 ...

Example: a(x y) and not (b(x) or c(x y z))
";

/// `em_parse_error`'s trace: the words read so far, the last one marked.
fn trace(words: &[String]) -> String {
    let mut s = String::from("... ");
    for (i, w) in words.iter().enumerate() {
        if i + 1 == words.len() {
            s.push_str(&format!(">>{w}<< "));
        } else {
            s.push_str(&format!("{w} "));
        }
    }
    s.push_str("...\n");
    s
}

/// `parse_ematch` for the words at `a` (after `match`): the flattened tree; `a`
/// moves to the first word the expression did not use. Errors are tc's, with
/// "Illegal \"ematch\"" appended as f_basic.c does.
pub fn parse(a: &mut Args) -> Result<Tree, TcError> {
    let words = a.rest();
    let mut p = Parser { lex: Lexer { words, fed: 0, buf: Vec::new(), pos: 0, notes: String::new() }, look: None };
    let root = match p.peek() {
        Tok::End => Some(Vec::new()),
        _ => p.expr(),
    };
    let root = match root {
        Some(r) if !r.is_empty() || matches!(p.peek(), Tok::End) => r,
        _ => {
            let err = format!(
                "{}Parse error: syntax error\n{}{USAGE}Illegal \"ematch\"\n",
                p.lex.notes,
                trace(&words[..p.lex.fed])
            );
            return Err(TcError::tc(err));
        }
    };
    // Whatever followed the expression (or the end): "undo look ahead by parser".
    let used = p.lex.fed.saturating_sub(1);
    for _ in 0..used {
        a.next();
    }
    let notes = p.lex.notes;
    let mut tree = Tree::default();
    flatten(&root, &mut tree.matches, &words[..used])
        .map_err(|e| TcError::tc(format!("{notes}{e}Illegal \"ematch\"\n")))?;
    Ok(tree)
}

/// `flatten_tree` + `parse_tree`: the top sequence, then each parenthesised
/// sequence appended in the order met, containers pointing at them.
fn flatten(root: &[Node], out: &mut Vec<Ematch>, words: &[String]) -> Result<(), String> {
    // Breadth of appending as tc does: a child sequence goes after everything listed
    // so far, and its own children after it, before the parent's later children.
    fn place<'n>(seq: &'n [Node], order: &mut Vec<&'n [Node]>) {
        order.push(seq);
        for n in seq {
            if let Body::Child(c) = &n.body {
                place(c, order);
            }
        }
    }
    let mut order = Vec::new();
    place(root, &mut order);
    let mut starts = Vec::with_capacity(order.len());
    let mut at = 0;
    for s in &order {
        starts.push(at);
        at += s.len();
    }
    let start_of = |c: &[Node]| {
        let i = order.iter().position(|s| std::ptr::eq(s.as_ptr(), c.as_ptr())).expect("placed");
        starts[i]
    };
    for seq in &order {
        for n in seq.iter() {
            let flags = n.relation | if n.inverted { INVERT } else { 0 };
            let kind = match &n.body {
                Body::Child(c) => Kind::Container(start_of(c)),
                Body::Args(args) => parse_match(args, words)?,
            };
            out.push(Ematch { flags, kind });
        }
    }
    Ok(())
}

/// `em_parse_error` from a kind's parser: the message, the word trace, the kind's
/// arguments from where its parser stands (none: no such line, as for C's NULL)
/// with `carg` marked, the kind's usage.
fn em_err(words: &[String], kind: &str, args: &[Arg], carg: Option<usize>, msg: &str, usage: &str) -> String {
    let mut s = format!("{msg}\n{}", trace(words));
    if !args.is_empty() {
        s.push_str(&format!("... {kind}("));
        for (i, a) in args.iter().enumerate() {
            let mark = carg == Some(i);
            s.push_str(&format!(
                "{}{}{}{}",
                if mark { ">>" } else { "" },
                a.ascii(),
                if mark { "<<" } else { "" },
                if i + 1 < args.len() { " " } else { "" }
            ));
        }
        s.push_str(")...\n");
    }
    s.push_str(usage);
    s
}

const CMP_USAGE: &str = "Usage: cmp(ALIGN at OFFSET [ ATTRS ] { eq | lt | gt } VALUE)
where: ALIGN  := { u8 | u16 | u32 }
       ATTRS  := [ layer LAYER ] [ mask MASK ] [ trans ]
       LAYER  := { link | network | transport | 0..2 }

Example: cmp(u16 at 3 layer 2 mask 0xff00 gt 20)
";
const U32_USAGE: &str = "Usage: u32(ALIGN VALUE MASK at [ nexthdr+ ] OFFSET)
where: ALIGN  := { u8 | u16 | u32 }

Example: u32(u16 0x1122 0xffff at nexthdr+4)
";
const NBYTE_USAGE: &str = "Usage: nbyte(NEEDLE at OFFSET [layer LAYER])
where: NEEDLE := { string | \"c-escape-sequence\" }
       OFFSET := int
       LAYER  := { link | network | transport | 0..2 }

Example: nbyte(\"ababa\" at 12 layer 1)
";
const META_USAGE: &str = "Usage: meta(OBJECT { eq | lt | gt } OBJECT)
where: OBJECT  := { META_ID | VALUE }
       META_ID := id [ shift SHIFT ] [ mask MASK ]

Example: meta(nf_mark gt 24)
         meta(indev shift 1 eq \"ppp\")
         meta(tcindex mask 0xf0 eq 0xf0)

For a list of meta identifiers, use meta(list).
";

/// `parse_layer` then a number: `link`/`network`/`transport` by first letter.
fn layer(a: &Arg) -> Option<u64> {
    match a.data.first() {
        Some(b'l') => Some(0),
        Some(b'n') => Some(1),
        Some(b't') => Some(2),
        _ => a.ul(),
    }
}

/// One match's arguments (`args[0]` is the kind) through the kind's tc parser.
fn parse_match(args: &[Arg], words: &[String]) -> Result<Kind, String> {
    // tc copies the name into a 64-byte buffer.
    let name = &args[0].data;
    let kind = String::from_utf8_lossy(&name[..name.len().min(63)]).into_owned();
    let a = &args[1..];
    match kind.as_str() {
        "cmp" => parse_cmp(a, words),
        "u32" => parse_u32(a, words),
        "nbyte" => parse_nbyte(a, words),
        "meta" => parse_meta(a, words),
        "canid" => parse_canid(a, words),
        "ipset" | "ipt" => Err(format!("qdisc-lab: ematch \"{kind}\" is not supported (no ipsets or xtables here)\n")),
        k => Err(format!("Unknown ematch \"{k}\"\n")),
    }
}

/// tc's `cmp_parse_eopt`.
fn parse_cmp(args: &[Arg], words: &[String]) -> Result<Kind, String> {
    let err = |c: Option<usize>, m: &str| em_err(words, "cmp", args, c, m, CMP_USAGE);
    let Some(first) = args.first() else { return Err(err(None, "cmp: missing arguments")) };
    let align = match &first.data[..] {
        b"u8" => 1,
        b"u16" => 2,
        b"u32" => 4,
        _ => return Err(err(Some(0), "cmp: invalid alignment")),
    };
    let (mut off, mut lay, mut mask, mut val, mut trans, mut opnd) = (None, 1u64, 0u64, None, false, Opnd::Eq);
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        let value = |i: usize| args.get(i + 1).ok_or_else(|| err(Some(i), "cmp: missing argument"));
        if a.is("at") {
            let v = value(i)?;
            i += 1;
            off = Some(v.ul().ok_or_else(|| err(Some(i), "cmp: invalid offset, must be numeric"))?);
        } else if a.is("layer") {
            let v = value(i)?;
            i += 1;
            lay = layer(v).ok_or_else(|| err(Some(i), "cmp: invalid layer"))?;
            if lay > LAYER_MAX {
                return Err(err(Some(i), "cmp: illegal layer, must be in 0..2"));
            }
        } else if a.is("mask") {
            let v = value(i)?;
            i += 1;
            mask = v.ul().ok_or_else(|| err(Some(i), "cmp: invalid mask"))?;
        } else if a.is("trans") {
            trans = true;
        } else if let Some(o) = Opnd::parse(&a.data) {
            opnd = o;
            let v = value(i)?;
            i += 1;
            val = Some(v.ul().ok_or_else(|| err(Some(i), "cmp: invalid value"))?);
        } else {
            // tc's own message says nbyte here.
            return Err(err(Some(i), "nbyte: unknown parameter"));
        }
        i += 1;
    }
    let (Some(off), Some(val)) = (off, val) else { return Err(err(None, "cmp: offset and value required")) };
    Ok(Kind::Cmp { val: val as u32, mask: mask as u32, off: off as u16, align, layer: lay as u8, trans, opnd })
}

/// tc's `u32_parse_eopt`: the key in network byte order as tc sends it, kept here
/// as the host-order word it compares.
fn parse_u32(args: &[Arg], words: &[String]) -> Result<Kind, String> {
    let err = |c: Option<usize>, m: &str| em_err(words, "u32", args, c, m, U32_USAGE);
    let Some(first) = args.first() else { return Err(err(None, "u32: missing arguments")) };
    let align = match &first.data[..] {
        b"u8" => 1,
        b"u16" => 2,
        b"u32" => 4,
        _ => return Err(err(Some(0), "u32: invalid alignment")),
    };
    let k = args.get(1).ok_or_else(|| err(None, "u32: missing key"))?;
    let mut key = k.ul().ok_or_else(|| err(Some(1), "u32: invalid key, must be numeric"))?;
    let m = args.get(2).ok_or_else(|| err(None, "u32: missing mask"))?;
    let mut mask = m.ul().ok_or_else(|| err(Some(2), "u32: invalid mask, must be numeric"))?;
    match args.get(3) {
        Some(a) if a.is("at") => {}
        Some(_) => return Err(err(Some(3), "u32: missing \"at\"")),
        None => return Err(err(None, "u32: missing \"at\"")),
    }
    let mut i = 4;
    let o = args.get(i).ok_or_else(|| err(None, "u32: missing offset"))?;
    let mut offmask = false;
    let mut offset = if o.data.len() > 8 && o.data.starts_with(b"nexthdr+") {
        offmask = true;
        // tc uses strtoul here without checking it.
        crate::tc::units::strtol0_prefix(&o.data[8..]).map_or(0, |(v, _)| v as u64)
    } else if o.is("nexthdr+") {
        i += 1;
        let o = args.get(i).ok_or_else(|| err(None, "u32: missing offset"))?;
        o.ul().unwrap_or(u64::MAX)
    } else {
        o.ul().unwrap_or(u64::MAX)
    };
    if offset == u64::MAX {
        return Err(err(Some(i), "u32: invalid offset"));
    }
    if args.len() > i + 1 {
        return Err(err(Some(i + 1), "u32: unexpected trailer"));
    }
    match align {
        1 => {
            if key > 0xFF {
                return Err(err(Some(i), "Illegal key (>0xFF)"));
            }
            if mask > 0xFF {
                return Err(err(Some(i), "Illegal mask (>0xFF)"));
            }
            let sh = 24 - (offset & 3) * 8;
            key <<= sh;
            mask <<= sh;
            offset &= !3;
        }
        2 => {
            if key > 0xFFFF {
                return Err(err(Some(i), "Illegal key (>0xFFFF)"));
            }
            if mask > 0xFFFF {
                return Err(err(Some(i), "Illegal mask (>0xFFFF)"));
            }
            if offset & 3 == 0 {
                key <<= 16;
                mask <<= 16;
            }
            offset &= !3;
        }
        _ => {}
    }
    if offset % 4 != 0 {
        return Err(err(Some(i), "u32: invalid offset alignment, must be aligned to 4."));
    }
    let (key, mask) = (key as u32, mask as u32);
    Ok(Kind::U32 { val: key & mask, mask, off: offset as i32, offmask })
}

/// tc's `nbyte_parse_eopt`.
fn parse_nbyte(args: &[Arg], words: &[String]) -> Result<Kind, String> {
    let err = |c: Option<usize>, m: &str| em_err(words, "nbyte", args, c, m, NBYTE_USAGE);
    let Some(needle) = args.first() else { return Err(err(None, "nbyte: missing arguments")) };
    if needle.data.is_empty() {
        return Err(err(Some(0), "nbyte: needle length is 0"));
    }
    let (mut off, mut lay) = (None, 1u64);
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        let value = |i: usize| args.get(i + 1).ok_or_else(|| err(Some(i), "nbyte: missing argument"));
        if a.is("at") {
            let v = value(i)?;
            i += 1;
            off = Some(v.ul().ok_or_else(|| err(Some(i), "nbyte: invalid offset, must be numeric"))?);
        } else if a.is("layer") {
            let v = value(i)?;
            i += 1;
            lay = layer(v).ok_or_else(|| err(Some(i), "nbyte: invalid layer"))?;
            if lay > LAYER_MAX {
                return Err(err(Some(i), "nbyte: illegal layer, must be in 0..2"));
            }
        } else {
            return Err(err(Some(i), "nbyte: unknown parameter"));
        }
        i += 1;
    }
    let Some(off) = off else { return Err(err(None, "nbyte: offset required")) };
    Ok(Kind::Nbyte { off: off as u16, layer: lay as u8, needle: needle.data.clone() })
}

const CANID_USAGE: &str = "Usage: canid(IDLIST)
where: IDLIST := IDSPEC [ IDLIST ]
       IDSPEC := { ’sff’ CANID | ’eff’ CANID }
       CANID := ID[:MASK]
       ID, MASK := hexadecimal number (i.e. 0x123)
Example: canid(sff 0x123 sff 0x124 sff 0x125:0xf)
";

/// tc's `canid_parse_eopt` (at most 400 rules, its array's growth limit), then the
/// kernel's `em_canid_change` order: extended-frame rules first. Its errors list the
/// arguments from the one it stands on (C's moving `args`).
fn parse_canid(args: &[Arg], words: &[String]) -> Result<Kind, String> {
    let err = |at: usize, m: &str| em_err(words, "canid", &args[at.min(args.len())..], Some(0), m, CANID_USAGE);
    let mut rules = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let eff = if args[i].is("sff") {
            false
        } else if args[i].is("eff") {
            true
        } else {
            return Err(err(i, "canid: invalid key"));
        };
        i += 1;
        let Some(a) = args.get(i) else { return Err(err(i, "canid: missing argument")) };
        // sscanf "%x:%x", else "%x" with the frame format's full mask.
        let (id, mask) = match scan_hex(&a.data) {
            Some((id, n)) => match a.data[n..].strip_prefix(b":").and_then(scan_hex) {
                Some((mask, _)) => (id, mask),
                None => (id, if eff { CAN_EFF_MASK } else { CAN_SFF_MASK }),
            },
            None => return Err(err(i, "canid: Improperly formed CAN ID & mask\n")),
        };
        if rules.len() == 400 {
            return Err(err(i, "canid: Too many arguments on input\n"));
        }
        rules.push((id | if eff { CAN_EFF_FLAG } else { 0 }, mask | CAN_EFF_FLAG));
        i += 1;
    }
    rules.sort_by_key(|r| r.0 & CAN_EFF_FLAG == 0);
    Ok(Kind::Canid(rules))
}

/// C `sscanf`'s `%x` into an `unsigned int`: blanks, a sign, an optional `0x`, hex
/// digits (strtoul's saturation, then truncation); the value and the bytes used.
fn scan_hex(b: &[u8]) -> Option<(u32, usize)> {
    let mut i = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let neg = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    if b.get(i) == Some(&b'0')
        && matches!(b.get(i + 1), Some(b'x' | b'X'))
        && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    {
        i += 2;
    }
    let digits = b[i..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if digits == 0 {
        return None;
    }
    let v = b[i..i + digits].iter().fold(0u64, |v, &c| {
        let d = (c as char).to_digit(16).expect("hex digit") as u64;
        v.checked_mul(16).and_then(|v| v.checked_add(d)).unwrap_or(u64::MAX)
    });
    let v = if neg && v != u64::MAX { v.wrapping_neg() } else { v };
    Some((v as u32, i + digits))
}

/// em_meta.c's `list_meta_ids`.
fn meta_list() -> String {
    let mut s = String::from(
        "--------------------------------------------------------\n  ID               Type       Description\n--------------------------------------------------------",
    );
    for e in META_TABLE {
        if is_section(e) {
            s.push_str(&format!("\n{}:\n", e.0));
        } else {
            let types: Vec<&str> = e.1.chars().map(|c| if c == 'i' { "INT" } else { "VAR" }).collect();
            s.push_str(&format!("  {:<16} {:<10} {}\n", e.0, types.join(","), e.2));
        }
    }
    s.push_str("--------------------------------------------------------\n");
    s
}

/// tc's `meta_parse_eopt` (integer objects; see the module documentation for what
/// is refused).
fn parse_meta(args: &[Arg], words: &[String]) -> Result<Kind, String> {
    let err = |c: Option<usize>, m: &str| em_err(words, "meta", args, c, m, META_USAGE);
    if args.is_empty() {
        return Err(err(None, "meta: missing arguments"));
    }
    if args[0].is("list") {
        return Err(meta_list());
    }
    // parse_object: a quoted string, a number, or a key with `shift`/`mask`.
    let object = |i: usize| -> Result<(MetaObj, usize), String> {
        let a = &args[i];
        if a.quoted {
            return Err("qdisc-lab: meta string values are not supported (no string keys are modelled)\n".into());
        }
        if let Some(v) = a.ul() {
            return Ok((MetaObj { id: None, shift: 0, val: v as u32 }, i + 1));
        }
        let Some(e) = META_TABLE.iter().find(|e| !is_section(e) && a.data == e.0.as_bytes()) else {
            return Err(err(Some(i), "meta: unknown meta id\n"));
        };
        let id = e.3.map_err(|why| format!("qdisc-lab: meta key \"{}\" is not supported: {why}\n", e.0))?;
        let mut o = MetaObj { id: Some(id), shift: 0, val: 0 };
        let mut j = i + 1;
        while let Some(w) = args.get(j) {
            let (shift, what) = if w.is("shift") {
                (true, "shift")
            } else if w.is("mask") {
                (false, "mask")
            } else {
                break;
            };
            let v = args.get(j + 1).ok_or_else(|| err(Some(j), "meta: missing argument"))?;
            let v = v.ul().ok_or_else(|| err(Some(j + 1), &format!("meta: invalid {what}, must be numeric")))?;
            if shift {
                o.shift = v as u8;
            } else {
                o.val = v as u32;
            }
            j += 2;
        }
        Ok((o, j))
    };
    let (left, i) = object(0)?;
    let Some(op) = args.get(i) else { return Err(err(Some(0), "meta: missing operand")) };
    let opnd = Opnd::parse(&op.data).ok_or_else(|| err(Some(i), "meta: invalid operand"))?;
    if i + 1 >= args.len() {
        return Err(err(Some(0), "meta: missing rvalue"));
    }
    let (right, j) = object(i + 1)?;
    if j < args.len() {
        return Err(err(Some(j), "meta: unexpected trailer"));
    }
    Ok(Kind::Meta { left, opnd, right })
}

// ---- kernel side ---------------------------------------------------------------

impl Tree {
    /// No matches: `tcf_em_tree_match` answers 1.
    pub fn is_empty(&self) -> bool {
        self.matches.is_empty()
    }

    /// `tcf_em_tree_match` / `__tcf_em_tree_match`.
    pub fn matches(&self, pkt: &crate::Packet, hdr: &Headers) -> bool {
        if self.matches.is_empty() {
            return true;
        }
        let early_end = |em: &Ematch, res: bool| {
            em.flags & (REL_AND | REL_OR) == 0 || (!res && em.flags & REL_AND != 0) || (res && em.flags & REL_OR != 0)
        };
        let mut stack: Vec<usize> = Vec::new();
        let mut idx = 0;
        let mut res = false;
        loop {
            // proceed
            while idx < self.matches.len() {
                let em = &self.matches[idx];
                if let Kind::Container(start) = em.kind {
                    stack.push(idx);
                    idx = start;
                    continue;
                }
                res = em.kind.matches(pkt, hdr) != (em.flags & INVERT != 0);
                if early_end(em, res) {
                    break;
                }
                idx += 1;
            }
            // pop_stack
            loop {
                let Some(c) = stack.pop() else { return res };
                let em = &self.matches[c];
                if em.flags & INVERT != 0 {
                    res = !res;
                }
                if !early_end(em, res) {
                    idx = c + 1;
                    break;
                }
            }
        }
    }

    /// tc's `print_ematch` (plain `fprintf`, in `-j` output too).
    pub fn print(&self, out: &mut Out) {
        if self.matches.is_empty() {
            return;
        }
        out.fprintf(format_args!("\n  "));
        self.print_seq(out, 0, 1);
    }

    /// `print_ematch_seq` from `i` with indentation level `prefix`.
    fn print_seq(&self, out: &mut Out, mut i: usize, prefix: usize) {
        loop {
            let em = &self.matches[i];
            if em.flags & INVERT != 0 {
                out.fprintf(format_args!("NOT "));
            }
            if let Kind::Container(start) = em.kind {
                out.fprintf(format_args!("(\n{}", "  ".repeat(prefix + 1)));
                self.print_seq(out, start, prefix + 1);
                out.fprintf(format_args!("{}) ", "  ".repeat(prefix)));
            } else {
                em.kind.print(out);
                if em.flags & (REL_AND | REL_OR) != 0 {
                    out.fprintf(format_args!("{}", "  ".repeat(prefix)));
                }
            }
            match em.flags & (REL_AND | REL_OR) {
                REL_AND => out.fprintf(format_args!("AND ")),
                REL_OR => out.fprintf(format_args!("OR ")),
                _ => return,
            }
            i += 1;
        }
    }
}

impl Kind {
    /// The kind's `match` (em_cmp_match, em_u32_match, em_nbyte_match, em_meta_match).
    fn matches(&self, pkt: &crate::Packet, hdr: &Headers) -> bool {
        match self {
            Kind::Container(_) => unreachable!("containers are walked, not matched"),
            Kind::Cmp { val, mask, off, align, layer, trans, opnd } => {
                let Some(base) = hdr.layer_offset(*layer) else { return false };
                let mut b = [0u8; 4];
                let n = *align as usize;
                if !hdr.bytes_at(base + *off as i64, &mut b[..n]) {
                    return false;
                }
                let mut v = match n {
                    1 => b[0] as u32,
                    2 => u16::from_be_bytes([b[0], b[1]]) as u32,
                    _ => u32::from_be_bytes(b),
                };
                if *trans {
                    // be16_to_cpu / be32_to_cpu on the host-order value (x86).
                    v = if n == 2 {
                        (v as u16).swap_bytes() as u32
                    } else if n == 4 {
                        v.swap_bytes()
                    } else {
                        v
                    };
                }
                if *mask != 0 {
                    v &= mask;
                }
                opnd.holds(v, *val)
            }
            Kind::U32 { val, mask, off, .. } => hdr.read_u32(*off as i64).is_some_and(|w| (w ^ val) & mask == 0),
            Kind::Nbyte { off, layer, needle } => {
                let Some(base) = hdr.layer_offset(*layer) else { return false };
                let mut b = vec![0u8; needle.len()];
                hdr.bytes_at(base + *off as i64, &mut b) && b == *needle
            }
            Kind::Meta { left, opnd, right } => {
                let (Some(l), Some(r)) = (left.get(pkt, hdr), right.get(pkt, hdr)) else { return false };
                opnd.holds(l, r)
            }
            Kind::Canid(rules) => {
                // pskb_may_pull(skb, CAN_MTU), then the can_id at skb->data.
                let mut b = [0u8; 16];
                if !hdr.bytes_at(0, &mut b) {
                    return false;
                }
                let id = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                if id & CAN_EFF_FLAG != 0 {
                    rules.iter().take_while(|r| r.0 & CAN_EFF_FLAG != 0).any(|r| (r.0 ^ id) & r.1 == 0)
                } else {
                    // em_canid_sff_match_add's bitmap: the id under the rule's 11-bit mask.
                    rules.iter().filter(|r| r.0 & CAN_EFF_FLAG == 0).any(|r| (r.0 ^ id) & r.1 & CAN_SFF_MASK == 0)
                }
            }
        }
    }

    /// The kind's tc printer between `KIND(` and `)\n`.
    fn print(&self, out: &mut Out) {
        match self {
            Kind::Container(_) => unreachable!("containers print as parentheses"),
            Kind::Cmp { val, mask, off, align, layer, trans, opnd } => {
                let a = match align {
                    1 => "u8 ",
                    2 => "u16 ",
                    _ => "u32 ",
                };
                out.fprintf(format_args!("cmp({a}at {off} layer {layer} "));
                if *mask != 0 {
                    out.fprintf(format_args!("mask {mask:#x} "));
                }
                if *trans {
                    out.fprintf(format_args!("trans "));
                }
                out.fprintf(format_args!("{} {})\n", opnd.name(), *val as i32));
            }
            Kind::U32 { val, mask, off, offmask } => {
                let nh = if *offmask { "nexthdr+" } else { "" };
                out.fprintf(format_args!("u32({val:08x}/{mask:08x} at {nh}{off})\n"));
            }
            Kind::Nbyte { off, layer, needle } => {
                out.fprintf(format_args!("nbyte("));
                for b in needle {
                    out.fprintf(format_args!("{b:02x} "));
                }
                out.fprintf(format_args!("\"{}\" at {off} layer {layer})\n", ascii(needle)));
            }
            Kind::Canid(rules) => {
                out.fprintf(format_args!("canid("));
                for (i, &(id, mask)) in rules.iter().enumerate() {
                    let (name, full) =
                        if id & CAN_EFF_FLAG != 0 { ("eff", CAN_EFF_MASK) } else { ("sff", CAN_SFF_MASK) };
                    out.fprintf(format_args!("{name} 0x{:X}", id & full));
                    if mask != CAN_EFF_FLAG | full {
                        out.fprintf(format_args!(":0x{:X}", mask & full));
                    }
                    if i + 1 < rules.len() {
                        out.fprintf(format_args!(" "));
                    }
                }
                out.fprintf(format_args!(")\n"));
            }
            Kind::Meta { left, opnd, right } => {
                out.fprintf(format_args!("meta("));
                left.print(out);
                out.fprintf(format_args!(" {} ", opnd.name()));
                right.print(out);
                out.fprintf(format_args!(")\n"));
            }
        }
    }
}

impl MetaObj {
    /// `meta_get`: a constant, or the key's value shifted then masked
    /// (`meta_int_apply_extras`).
    fn get(&self, pkt: &crate::Packet, hdr: &Headers) -> Option<u64> {
        let Some(id) = self.id else { return Some(self.val as u64) };
        let mut v: u64 = match id {
            MetaId::Priority => pkt.priority as u64,
            // int_protocol hands over `skb_protocol()` as the __be16 it is ("let userspace
            // take care of the byte ordering"): on x86 0x0800 reads as 0x0008.
            MetaId::Protocol => hdr.protocol.swap_bytes() as u64,
            MetaId::PktLen => pkt.len as u64,
            MetaId::NfMark => pkt.mark as u64,
            MetaId::TcIndex => 0,
            MetaId::RtClassid => hdr.dst?.tclassid as u64,
            MetaId::RtIif => hdr.dst?.iif as u64,
        };
        if self.shift != 0 {
            v = v.checked_shr(self.shift as u32).unwrap_or(0);
        }
        if self.val != 0 {
            v &= self.val as u64;
        }
        Some(v)
    }

    /// tc's `print_object`.
    fn print(&self, out: &mut Out) {
        let Some(id) = self.id else {
            out.fprintf(format_args!("{}", self.val as i32));
            return;
        };
        out.fprintf(format_args!("{}", id.name()));
        if self.shift != 0 {
            out.fprintf(format_args!(" shift {}", self.shift));
        }
        if self.val != 0 {
            out.fprintf(format_args!(" mask 0x{:08x}", self.val));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{FlowKey, Packet};

    fn tree(s: &str) -> Result<(Tree, Vec<String>), TcError> {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        let mut a = Args::new(&v);
        let t = parse(&mut a)?;
        Ok((t, a.rest().to_vec()))
    }

    fn printed(t: &Tree) -> String {
        let mut o = Out::text();
        t.print(&mut o);
        o.into_string()
    }

    fn tcp(len: u32) -> Packet {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        let (mut s, mut d) = (m, m);
        s[12..].copy_from_slice(&[10, 0, 0, 1]);
        d[12..].copy_from_slice(&[10, 1, 2, 3]);
        Packet::new(1, len).with_flow(FlowKey { src: s, dst: d, sport: 1024, dport: 80, proto: 6 })
    }

    #[test]
    fn flattening_appends_parenthesised_sequences() {
        let (t, rest) = tree("not ( meta(nf_mark eq 1) and ( u32(u8 0x45 0xff at 0) or cmp(u8 at 0 eq 1) ) ) and meta(priority eq 0) classid 1:1").unwrap();
        assert_eq!(rest, ["classid", "1:1"]);
        let shape: Vec<(u16, Option<usize>)> =
            t.matches.iter().map(|m| (m.flags, if let Kind::Container(s) = m.kind { Some(s) } else { None })).collect();
        // top: NOT container(2) AND, meta; then the first parenthesis: meta AND,
        // container(4); then the inner one: u32 OR, cmp.
        assert_eq!(
            shape,
            [(INVERT | REL_AND, Some(2)), (0, None), (REL_AND, None), (0, Some(4)), (REL_OR, None), (0, None)]
        );
        assert_eq!(
            printed(&t),
            "\n  NOT (\n    meta(nf_mark eq 1)\n    AND (\n      u32(45000000/ff000000 at 0)\n      OR cmp(u8 at 0 layer 1 eq 1)\n    )   ) AND meta(priority eq 0)\n"
        );
    }

    #[test]
    fn sequences_short_circuit_without_precedence() {
        let p = tcp(100);
        let h = Headers::of(&p);
        let m = |s: &str| tree(s).unwrap().0.matches(&p, &h);
        // version/IHL is 0x45, protocol (offset 9) is 6.
        assert!(m("cmp(u8 at 0 eq 0x45)"));
        assert!(m("cmp(u8 at 9 layer network eq 6) and u32(u32 0x0a010203 0xffffffff at 16)"));
        // `a and b or c` with a false is false even though c holds.
        assert!(!m("cmp(u8 at 0 eq 1) and cmp(u8 at 0 eq 1) or cmp(u8 at 9 eq 6)"));
        assert!(m("( cmp(u8 at 0 eq 1) and cmp(u8 at 0 eq 1) ) or cmp(u8 at 9 eq 6)"));
        assert!(m("not ( cmp(u8 at 0 eq 1) or cmp(u8 at 9 eq 7) )"));
        // Transport layer: the TCP destination port; link layer: the ethertype.
        assert!(m("cmp(u16 at 2 layer transport eq 80)"));
        assert!(m("cmp(u16 at 12 layer link eq 0x800)"));
        assert!(m("cmp(u16 at 12 layer link trans eq 0x8)"));
        assert!(m("nbyte(\"\\x45\\x00\" at 0)"));
        assert!(!m("cmp(u8 at 86 layer network eq 0)"));
        assert!(m("cmp(u8 at 85 layer network eq 0)"));
        assert!(m("meta(pkt_len eq 100) and meta(protocol eq 0x0008) and meta(tc_index eq 0)"));
        assert!(!m("meta(protocol eq 0x800)"));
        // No header at all without a flow.
        let raw = Packet::new(2, 100);
        let hr = Headers::of(&raw);
        assert!(!tree("cmp(u8 at 0 layer link lt 1)").unwrap().0.matches(&raw, &hr));
        assert!(tree("meta(pkt_len gt 99)").unwrap().0.matches(&raw, &hr));
    }

    /// goldens/kernel-6.12/filter-raw-frames: the ematches on an AF_PACKET frame.
    #[test]
    fn ematches_read_a_frame() {
        let head = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5];
        let p = Packet::new(1, 64).with_frame(&head);
        let h = Headers::of(&p);
        let m = |s: &str| tree(s).unwrap().0.matches(&p, &h);
        assert!(m("cmp(u16 at 12 layer link mask 0xffff eq 0x88b5)"));
        assert!(!m("cmp(u16 at 12 layer link mask 0xffff eq 0x88b6)"));
        assert!(m("u32(u16 0x0200 0xffff at -8)"));
        assert!(m("nbyte(\"\\x02\\x00\" at 6 layer link)"));
        // skb->protocol as the __be16 it is: 0x88b5 reads 0xb588 on x86.
        assert!(!m("meta(protocol eq 0x88b5) and u32(u16 0x0200 0xffff at -8)"));
        assert!(m("meta(protocol eq 0xb588)"));
        // 50 bytes after the Ethernet header: 44..48 is inside, 48..52 is not.
        assert!(m("u32(u32 0 0xffffffff at 44)"));
        assert!(!m("u32(u32 0 0 at 48)"));
    }

    #[test]
    fn meta_shift_and_mask() {
        let mut p = Packet::new(1, 64);
        p.mark = 0xF4;
        p.priority = 7;
        let h = Headers::of(&p);
        let m = |s: &str| tree(s).unwrap().0.matches(&p, &h);
        assert!(m("meta(nf_mark shift 4 eq 0xf)"));
        assert!(m("meta(fwmark mask 0x0f eq 4)"));
        assert!(m("meta(priority gt 6) and meta(priority lt 8)"));
        assert!(m("meta(priority eq priority)"));
        let (t, _) = tree("meta(fwmark shift 2 mask 0xff gt 0xffffffff)").unwrap();
        assert_eq!(printed(&t), "\n  meta(nf_mark shift 2 mask 0x000000ff gt -1)\n");
    }

    #[test]
    fn canid_rules_print_and_match_as_the_kernel_keeps_them() {
        // Extended-frame rules first; a full mask is not printed; sff ids keep 11 bits.
        let (t, _) = tree("canid(sff 0x01:0xf eff 0x02:0xf sff 0xaabb:0x00ff eff 1) x").unwrap();
        assert_eq!(printed(&t), "\n  canid(eff 0x2:0xF eff 0x1 sff 0x1:0xF sff 0x2BB:0xFF)\n");
        // The can_id is the Ethernet header's first four bytes read little-endian:
        // the destination MAC 02:00:00:00:00:02 and 00:00 of the source gives 0x2 (sff).
        let p = tcp(100);
        let h = Headers::of(&p);
        let mut b = [0u8; 4];
        assert!(h.bytes_at(0, &mut b));
        let id = u32::from_le_bytes(b);
        assert_eq!(id & CAN_EFF_FLAG, 0, "a standard-frame id: {id:#x}");
        let m = |s: &str| tree(s).unwrap().0.matches(&p, &h);
        assert!(m(&format!("canid(sff {:#x})", id & 0x7ff)));
        assert!(!m(&format!("canid(sff {:#x})", (id + 1) & 0x7ff)));
        // Mask 0 matches every standard id; extended rules never match one.
        assert!(m("canid(sff 0x5:0x0)"));
        assert!(!m(&format!("canid(eff {:#x}:0x0)", id)));
        // Shorter than CAN_MTU (16 bytes) or without bytes: no match.
        let raw = Packet::new(2, 100);
        assert!(!tree("canid(sff 0:0)").unwrap().0.matches(&raw, &Headers::of(&raw)));
        let e = |s: &str| tree(s).unwrap_err().msg;
        assert_eq!(
            e("canid(sff zz) x"),
            format!("canid: Improperly formed CAN ID & mask\n\n... canid(sff >>zz)<< ...\n... canid(>>zz<<)...\n{CANID_USAGE}Illegal \"ematch\"\n")
        );
        assert!(e("canid(foo 1) x").starts_with("canid: invalid key\n"));
        assert_eq!(
            e("canid(sff) x"),
            format!("canid: missing argument\n... >>canid(sff)<< ...\n{CANID_USAGE}Illegal \"ematch\"\n")
        );
        let many: Vec<String> = (0..401).map(|i| format!("sff {i}")).collect();
        assert!(e(&format!("canid({}) x", many.join(" "))).starts_with("canid: Too many arguments on input\n"));
        assert_eq!(scan_hex(b"-1"), Some((u32::MAX, 2)));
        assert_eq!(scan_hex(b"0x"), Some((0, 1)));
    }

    #[test]
    fn the_expression_ends_where_it_cannot_continue() {
        // The word that ended it goes back, and so does the last word at the end.
        assert_eq!(tree("cmp(u8 at 0 eq 1) flowid 1:2").unwrap().1, ["flowid", "1:2"]);
        assert_eq!(tree("cmp(u8 at 0 eq 1)").unwrap().1, ["1)"]);
        // A relation must be followed by a term.
        assert!(tree("cmp(u8 at 0 eq 1)or").is_err());
    }

    #[test]
    fn tc_errors() {
        let e = |s: &str| tree(s).unwrap_err().msg;
        assert_eq!(
            e("cmp(u8 at 0) classid 1:1"),
            format!("cmp: offset and value required\n... cmp(u8 at >>0)<< ...\n... cmp(u8 at 0)...\n{CMP_USAGE}Illegal \"ematch\"\n")
        );
        assert_eq!(
            e("and cmp(u8 at 0 eq 1)"),
            format!("Parse error: syntax error\n... >>and<< ...\n{USAGE}Illegal \"ematch\"\n")
        );
        assert_eq!(
            e("cmp(u8 at 0 eq 1 classid 1:1"),
            format!("Parse error: syntax error\n... cmp(u8 at 0 eq 1 classid >>1:1<< ...\n{USAGE}Illegal \"ematch\"\n")
        );
        assert_eq!(
            e("u32(u8 0x100 0xff at 0) x"),
            format!("Illegal key (>0xFF)\n... u32(u8 0x100 0xff at >>0)<< ...\n... u32(u8 0x100 0xff at >>0<<)...\n{U32_USAGE}Illegal \"ematch\"\n")
        );
        assert_eq!(e("foo(a) x"), "Unknown ematch \"foo\"\nIllegal \"ematch\"\n");
        assert!(e("meta(sk_rcvbuf gt 1) x").contains("meta key \"sk_rcvbuf\" is not supported"));
        assert!(e("meta(list) x").starts_with("------"));
        assert_eq!(
            e("nbyte(\"\\777\" at 0) x"),
            format!("error: octal escape sequence out of range\nParse error: syntax error\n... >>nbyte(\"\\777\"<< ...\n{USAGE}Illegal \"ematch\"\n")
        );
    }
}
