//! The traffic of a scenario: bulk TCP connections (iperf3), constant-rate UDP
//! (iperf3 -u) and ping, on top of the hosts' sockets.
//!
//! * TCP: a [`tcp::TcpSender`] on the client and a [`tcp::TcpReceiver`] on the server
//!   per connection; every skb is charged to the sender's socket until the driver
//!   frees it (TSQ), the local qdisc's verdict goes back to TCP (local congestion),
//!   and the socket's pacing rate is published for fq. Connections open as iperf3
//!   opens them ([`Conn`]): at the entry's start the control connection's handshake,
//!   then each stream's, one after the other (`iperf_connect` → `iperf_tcp_connect`
//!   per stream: each connect() returns before the next begins); every stream starts
//!   writing when the last one has connected, and stops at the entry's end.
//! * UDP: one datagram of `size` payload bytes every `size / rate` seconds; the
//!   receiver counts datagrams, losses (gaps in the sequence, as iperf3) and jitter
//!   (RFC 3550's running estimate, as iperf3).
//! * ping: a 64-byte ICMP echo every interval; the far host answers at once.

use std::sync::Arc;

use qdisc::{Enqueued, FlowKey, Instant, Socket};
use qdisc_scenario::result::RttSample;

use crate::cpu::{Class, Func, Step, Work};
use crate::cpu_xmit::{Then, XmitTask};
use crate::event::Ev;
use crate::tcp::handshake::{Accept, Connect, HsKind, HsSeg};
use crate::tcp::{self, LocalXmit};
use crate::world::{Meta, Payload, Sim};

/// Socket ids: TCP senders are `1 + flow`; the rest are tagged in the high bits.
const RECEIVER: u64 = 1 << 40;
const UDP: u64 = 2 << 40;
const PING: u64 = 3 << 40;
/// Handshake-only sockets (the control connections; a stream's SYN uses these too).
const CONN: u64 = 4 << 40;
/// iperf3's TCP write size (`-l` default, 128 KiB).
const BLOCK: u64 = 128 * 1024;
/// Bytes of UDP + IPv4 + Ethernet headers.
const UDP_HEADERS: u32 = 8 + 20 + 14;
/// A UDP socket's `sk_sndbuf`: `net.core.wmem_default` = `SK_WMEM_DEFAULT` (256 skbs
/// of `SKB_TRUESIZE(256)` = 832 bytes, include/net/sock.h).
const UDP_SNDBUF: u64 = 212992;

/// An ICMP echo of ping's default 56 data bytes, with IPv4 and Ethernet headers.
const PING_LEN: u32 = 56 + 8 + 20 + 14;

/// One TCP connection's handshake: iperf3's control connection of a traffic entry, or
/// one of its streams. The client connects at the entry's start (the control
/// connection) or when the connection before it has connected (`next`).
pub struct Conn {
    /// The stream this connection carries; `None`: the control connection.
    pub flow: Option<u32>,
    pub src: u32,
    pub dst: u32,
    key: FlowKey,
    pub(crate) sk: Arc<Socket>,
    rsk: Arc<Socket>,
    snd_cpu: u32,
    rcv_cpu: u32,
    /// The connection to open once this one's connect() has returned; `None`: this
    /// is the entry's last, and its connect() starts the test.
    pub next: Option<u32>,
    /// The streams of the entry (they start writing together).
    pub streams: std::ops::Range<u32>,
    /// Host sysctls: `tcp_syn_retries`, `tcp_synack_retries`; `CONFIG_HZ`.
    syn_retries: u32,
    synack_retries: u32,
    hz: u32,
    client: Option<Connect>,
    server: Option<Accept>,
    /// What the client echoes (TSecr) in its first segments: the SYN-ACK's TSval.
    echo: u32,
    client_timer: Option<Instant>,
    server_timer: Option<Instant>,
}

impl Conn {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        flow: Option<u32>,
        src: u32,
        dst: u32,
        key: FlowKey,
        id: u32,
        cpus: (u32, u32),
        streams: std::ops::Range<u32>,
        cfg: &tcp::TcpConfig,
    ) -> Conn {
        let hash = key.hash();
        Conn {
            flow,
            src,
            dst,
            key,
            sk: Sim::socket(CONN | id as u64, hash, true),
            rsk: Sim::socket(CONN | RECEIVER | id as u64, hash, true),
            snd_cpu: cpus.0,
            rcv_cpu: cpus.1,
            next: None,
            streams,
            syn_retries: cfg.syn_retries,
            synack_retries: cfg.synack_retries,
            hz: cfg.hz,
            client: None,
            server: None,
            echo: 0,
            client_timer: None,
            server_timer: None,
        }
    }

    /// The CPU of the thread owning the socket of `host` that takes a segment.
    pub fn cpu_of(&self, host: u32) -> u32 {
        if host == self.src {
            self.snd_cpu
        } else {
            self.rcv_cpu
        }
    }
}

pub struct TcpFlow {
    pub traffic: usize,
    pub stream: u32,
    pub src: u32,
    pub dst: u32,
    pub key: FlowKey,
    pub mss: u32,
    pub(crate) cfg: tcp::TcpConfig,
    pub sender: Option<tcp::TcpSender>,
    pub receiver: Option<tcp::TcpReceiver>,
    pub sk: Arc<Socket>,
    rsk: Arc<Socket>,
    pub start: Instant,
    pub end: Instant,
    sender_timer: Option<Instant>,
    receiver_timer: Option<Instant>,
    /// The CPUs of the sender's and the receiver's threads.
    pub snd_cpu: u32,
    pub rcv_cpu: u32,
    /// The sending application waits for room in the send buffer (`sk_stream_wait_memory`),
    /// with `app_left` bytes of its current write still to copy.
    app_blocked: bool,
    app_left: u64,
    /// The stream's connection ([`Conn`]).
    pub conn: u32,
    /// iperf3 `-b` (bytes/s, per stream): the writer's average since the test began
    /// stays below it; `None`: bulk.
    pub rate: Option<u64>,
    /// When the test began (every stream connected) and what the writer has written since.
    test_start: Instant,
    app_bytes: u64,
}

impl TcpFlow {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        traffic: usize,
        stream: u32,
        src: u32,
        dst: u32,
        key: FlowKey,
        cc: tcp::CongestionControl,
        start: Instant,
        end: Instant,
        id: u32,
    ) -> Self {
        let cfg = tcp::TcpConfig { cc, ..Default::default() };
        let hash = key.hash();
        TcpFlow {
            traffic,
            stream,
            src,
            dst,
            key,
            mss: cfg.mss,
            cfg,
            sender: None,
            receiver: None,
            sk: Sim::socket(1 + id as u64, hash, true),
            rsk: Sim::socket(RECEIVER | id as u64, hash, true),
            start,
            end,
            sender_timer: None,
            receiver_timer: None,
            snd_cpu: 0,
            rcv_cpu: 0,
            app_blocked: false,
            app_left: 0,
            conn: 0,
            rate: None,
            test_start: start,
            app_bytes: 0,
        }
    }

    /// The route's MTU (MSS = MTU − 40 bytes of headers − 12 of timestamps,
    /// `tcp_mtu_to_mss`) and whether the device takes GSO skbs (`sk_can_gso`).
    pub fn set_path(&mut self, mtu: u32, gso: bool) {
        self.cfg.mss = mtu.saturating_sub(52).max(48);
        self.mss = self.cfg.mss;
        self.cfg.tso = gso;
    }

    fn reverse_key(&self) -> FlowKey {
        FlowKey { src: self.key.dst, dst: self.key.src, sport: self.key.dport, dport: self.key.sport, proto: 6 }
    }
}

pub struct UdpApp {
    pub traffic: usize,
    pub src: u32,
    pub dst: u32,
    key: FlowKey,
    pub(crate) sk: Arc<Socket>,
    /// Payload bytes per second; `None`: as fast as the sender's CPU goes (iperf3 -b 0).
    pub rate: Option<u64>,
    /// The CPUs of the sender's and the receiver's threads.
    pub cpu: u32,
    pub rcv_cpu: u32,
    pub size: u32,
    /// The socket's IP_TOS (a traffic entry's `tos`): every datagram's dsfield, ECN
    /// field included, and (`rt_tos2priority`) its `skb->priority`.
    pub tos: u8,
    pub start: Instant,
    pub end: Instant,
    next_seq: u64,
    /// Datagrams scheduled so far (the next is due at start + scheduled·gap).
    scheduled: u64,
    /// Datagrams due that the sender's thread has not sent yet (its CPU is late), and
    /// whether the thread has a send queued: one at a time, so a late thread's backlog
    /// is a count, not a queue.
    owed: u64,
    queued: bool,
    /// The thread sleeps in `sock_alloc_send_skb`: the socket's skbs in the qdiscs and
    /// the driver hold all of `sk_sndbuf` (its send is still queued, `queued`).
    blocked: bool,
    /// Sender's totals: datagrams and payload bytes.
    pub sent: u64,
    pub sent_bytes: u64,
    /// Receiver's totals.
    pub received: u64,
    pub received_bytes: u64,
    /// Highest sequence number received + 1.
    pub received_upto: u64,
    /// Jitter estimate, nanoseconds (RFC 3550 §6.4.1).
    pub jitter: f64,
    last_transit: Option<i128>,
    /// A pktgen thread: `size` is the whole frame, there is no socket and no reader.
    pub pktgen: bool,
}

impl UdpApp {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        traffic: usize,
        src: u32,
        dst: u32,
        key: FlowKey,
        rate: Option<u64>,
        size: u32,
        start: Instant,
        end: Instant,
        id: u32,
    ) -> Self {
        UdpApp {
            cpu: 0,
            rcv_cpu: 0,
            traffic,
            src,
            dst,
            sk: Sim::socket(UDP | id as u64, key.hash(), false),
            key,
            rate,
            size,
            tos: 0,
            pktgen: false,
            start,
            end,
            next_seq: 0,
            scheduled: 0,
            owed: 0,
            queued: false,
            blocked: false,
            sent: 0,
            sent_bytes: 0,
            received: 0,
            received_bytes: 0,
            received_upto: 0,
            jitter: 0.0,
            last_transit: None,
        }
    }

    /// Datagrams lost as iperf3 counts them: sequence numbers never seen.
    pub fn lost(&self) -> u64 {
        self.received_upto.saturating_sub(self.received)
    }
}

pub struct PingApp {
    pub traffic: usize,
    pub src: u32,
    pub dst: u32,
    key: FlowKey,
    pub(crate) sk: Arc<Socket>,
    pub interval: u64,
    pub start: Instant,
    pub end: Instant,
    pub transmitted: u64,
    /// Requests due so far (the next is due at start + scheduled·interval): the ping
    /// process sends them later when its CPU is late.
    scheduled: u64,
    pub samples: Vec<RttSample>,
    /// The CPU of the ping process.
    pub cpu: u32,
}

impl PingApp {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        traffic: usize,
        src: u32,
        dst: u32,
        key: FlowKey,
        interval: u64,
        start: Instant,
        end: Instant,
        id: u32,
    ) -> Self {
        PingApp {
            traffic,
            src,
            dst,
            sk: Sim::socket(PING | id as u64, key.hash(), false),
            key,
            interval,
            start,
            end,
            transmitted: 0,
            scheduled: 0,
            samples: Vec::new(),
            cpu: 0,
        }
    }
}

fn local_verdict(v: Option<Enqueued>) -> LocalXmit {
    match v {
        Some(Enqueued::Success) | Some(Enqueued::Stolen) => LocalXmit::Ok,
        Some(Enqueued::Congested) => LocalXmit::Congested,
        Some(Enqueued::Dropped) | None => LocalXmit::Dropped,
    }
}

/// Timers are lazy: a flow has at most one pending event per side (`pending`), at the
/// earliest time it was asked for. A timer pushed later (an RTO re-armed on every ACK)
/// waits for that event, whose handler re-arms it; an earlier one gets an event of its own.
fn arm(events: &mut crate::event::Events, pending: &mut Option<Instant>, want: Option<Instant>, now: Instant, ev: Ev) {
    let Some(want) = want.map(|t| t.max(now)) else { return };
    if pending.is_none_or(|p| want < p) {
        *pending = Some(want);
        events.at(want, ev);
    }
}

/// Whether a device's tree has an fq qdisc (which marks its sockets SK_PACING_FQ).
fn has_fq(dev: &qdisc::tree::Device) -> bool {
    dev.walk().iter().any(|(_, n)| n.kind() == "fq")
}

impl Sim {
    /// connect() on connection `conn` (`tcp_connect`): its SYN goes out.
    pub fn tcp_connect(&mut self, conn: u32) {
        let now = self.now;
        let c = &mut self.conns[conn as usize];
        let (client, syn) = Connect::new(now, c.hz, c.syn_retries);
        c.client = Some(client);
        self.hs_send(conn, true, syn);
        self.arm_conn(conn);
    }

    /// A handshake segment from the client (`true`) or the server of `conn`.
    fn hs_send(&mut self, conn: u32, from_client: bool, seg: HsSeg) {
        let c = &self.conns[conn as usize];
        let reverse = FlowKey { src: c.key.dst, dst: c.key.src, sport: c.key.dport, dport: c.key.sport, proto: 6 };
        let (src, dst, key, sk) =
            if from_client { (c.src, c.dst, c.key, c.sk.clone()) } else { (c.dst, c.src, reverse, c.rsk.clone()) };
        let meta = Meta { src, dst, payload: Payload::Hs { conn, seg }, alloc: u32::MAX };
        let mut pkt = self.packet(seg.wire_len(), 1, &key, meta);
        pkt.sk = Some(sk);
        self.send(src, dst, pkt);
    }

    fn arm_conn(&mut self, conn: u32) {
        let c = &mut self.conns[conn as usize];
        let want = c.client.as_ref().and_then(|x| x.next_timer());
        arm(&mut self.events, &mut c.client_timer, want, self.now, Ev::Conn { conn, server: false });
        let want = c.server.as_ref().and_then(|x| x.next_timer());
        arm(&mut self.events, &mut c.server_timer, want, self.now, Ev::Conn { conn, server: true });
    }

    /// The SYN's (client) or SYN-ACK's (server) retransmission timer of `conn`.
    pub fn conn_timer(&mut self, conn: u32, server: bool, at: Instant) {
        let now = self.now;
        let c = &mut self.conns[conn as usize];
        let slot = if server { &mut c.server_timer } else { &mut c.client_timer };
        if *slot != Some(at) {
            return;
        }
        *slot = None;
        let seg = if server {
            c.server.as_mut().and_then(|a| a.on_timer(now))
        } else {
            c.client.as_mut().and_then(|x| x.on_timer(now))
        };
        if let Some(seg) = seg {
            self.hs_send(conn, !server, seg);
        }
        self.arm_conn(conn);
    }

    /// A handshake segment reaches its end of `conn`.
    pub fn hs_receive(&mut self, conn: u32, seg: HsSeg) {
        let now = self.now;
        let c = &mut self.conns[conn as usize];
        match seg.kind {
            HsKind::Syn => {
                // A request the server dropped is forgotten: a new SYN makes a new one.
                let reply = match c.server.as_mut() {
                    Some(a) if a.done != Some(false) => a.on_syn(&seg, now),
                    _ => {
                        let (a, synack) = Accept::new(&seg, now, c.hz, c.synack_retries);
                        c.server = Some(a);
                        Some(synack)
                    }
                };
                if let Some(r) = reply {
                    self.hs_send(conn, false, r);
                }
                self.arm_conn(conn);
            }
            HsKind::SynAck => {
                let Some(client) = c.client.as_mut() else { return };
                match client.on_synack(&seg, now) {
                    Some(done) => {
                        c.echo = done.ack.tsecr;
                        self.hs_send(conn, true, done.ack);
                        self.arm_conn(conn);
                        self.connected(conn, done);
                    }
                    // An established client answers a retransmitted SYN-ACK with an
                    // ACK (tcp_validate_incoming's challenge ACK): how a lost last ACK
                    // of the handshake is repaired when no data follows.
                    None if client.done == Some(true) => {
                        let ack = HsSeg { kind: HsKind::Ack, tsval: tcp::ts_ms(now), tsecr: seg.tsval };
                        self.hs_send(conn, true, ack);
                    }
                    None => {}
                }
            }
            HsKind::Ack => {
                self.accept(conn, seg.tsecr);
            }
        }
    }

    /// The server's request becomes a socket (`tcp_check_req` → `tcp_create_openreq_child`),
    /// on the handshake's ACK or the first data that carries it; a stream's receiver
    /// starts with `tcp_synack_rtt_meas`'s sample. False if there is no request to accept.
    fn accept(&mut self, conn: u32, tsecr: u32) -> bool {
        let now = self.now;
        let c = &mut self.conns[conn as usize];
        let Some(rtt) = c.server.as_mut().and_then(|a| a.on_ack(tsecr, now)) else { return false };
        if let Some(flow) = c.flow {
            let f = &mut self.tcp[flow as usize];
            let cfg = tcp::TcpConfig { syn_rtt: Some(rtt), ..f.cfg.clone() };
            f.receiver = Some(tcp::TcpReceiver::new(&cfg, now));
        }
        true
    }

    /// connect() returned (`tcp_finish_connect` → `tcp_init_transfer`): a stream's sender
    /// starts with the handshake's RTT sample and initial window; then iperf3 connects
    /// the next stream, or, after the last, every stream starts writing.
    fn connected(&mut self, conn: u32, done: tcp::handshake::Connected) {
        let now = self.now;
        let c = &self.conns[conn as usize];
        let (next, streams) = (c.next, c.streams.clone());
        if let Some(flow) = c.flow {
            let f = &mut self.tcp[flow as usize];
            f.cfg.syn_rtt = Some(done.rtt);
            f.cfg.syn_retrans = done.syn_retrans;
            f.cfg.syn_cwnd_one = done.cwnd_one;
            f.cfg.synack_tsval = done.ack.tsecr;
            let mut sender = tcp::TcpSender::new(f.cfg.clone(), now);
            let (src, dst) = (f.src, f.dst);
            if let Some(iface) = self.hosts[src as usize].route[dst as usize] {
                if has_fq(self.device(iface)) {
                    sender.set_pacing_status(tcp::PacingStatus::Fq);
                }
            }
            self.tcp[flow as usize].sender = Some(sender);
        }
        match next {
            Some(n) => self.tcp_connect(n),
            None => {
                // iperf3's threads write into their sockets on their CPUs (Work::TcpWrite).
                for flow in streams {
                    let f = &mut self.tcp[flow as usize];
                    f.test_start = now;
                    let (src, c) = (f.src, f.snd_cpu);
                    self.give(src, c, Work::TcpWrite { flow }, false);
                }
            }
        }
    }

    /// iperf3's blocking `write()` of a 128 KiB block on CPU `c`: `tcp_sendmsg` per skb
    /// and the copy while the send buffer takes them, then `tcp_push` sends what TCP
    /// allows. On a full buffer the write waits with the rest of its block
    /// (`sk_stream_wait_memory`) unless the push made room; `sk_stream_write_space`
    /// wakes it (`tcp_send`).
    pub fn tcp_write_on(&mut self, h: u32, c: u32, flow: u32) -> Step {
        let f = &mut self.tcp[flow as usize];
        let Some(s) = f.sender.as_mut() else { return Step::Done(0) };
        if self.now >= f.end {
            return Step::Done(0);
        }
        if f.app_left == 0 {
            // iperf3 -b (iperf_check_throttle): the next block only once the average
            // since the test began, written bytes × 8 / elapsed, is below the rate; the
            // thread's polling of that test is taken as exact.
            if let Some(rate) = f.rate {
                let due =
                    f.test_start + qdisc::Duration((f.app_bytes as u128 * 1_000_000_000 / rate.max(1) as u128) as u64);
                if f.app_bytes > 0 && self.now <= due {
                    self.events.at(due + qdisc::Duration(1), Ev::TcpWrite { flow });
                    return Step::Done(0);
                }
            }
            f.app_left = BLOCK;
        }
        let bytes = s.sendmsg(f.app_left, f.sk.wmem_alloc(), self.now);
        f.app_left -= bytes;
        if f.app_left == 0 {
            // write() returned: iperf3 counts the block.
            f.app_bytes += BLOCK;
        }
        let k = &self.cpus(h).costs;
        let (call, copy) = (k.tcp_sendmsg * bytes.div_ceil(65536), k.copy(bytes));
        self.cpus(h).charge(c, Class::Sys, Func::TcpSendmsg as u16, call);
        self.cpus(h).charge(c, Class::Sys, Func::Copy as u16, copy);
        self.tcp_send(flow);
        let f = &mut self.tcp[flow as usize];
        let Some(s) = f.sender.as_mut() else { return Step::Done(call + copy) };
        if f.app_left > 0 && !s.memory_free(0) {
            f.app_blocked = true;
        } else {
            s.take_write_space();
            self.give(h, c, Work::TcpWrite { flow }, false);
        }
        Step::Done(call + copy)
    }

    /// `tcp_write_xmit`: send what the sender allows now, then re-arm its timer.
    pub fn tcp_send(&mut self, flow: u32) {
        let now = self.now;
        if now >= self.tcp[flow as usize].end {
            return;
        }
        loop {
            let f = &mut self.tcp[flow as usize];
            let Some(sender) = f.sender.as_mut() else { return };
            let wmem = f.sk.wmem_alloc();
            let seg = sender.poll_transmit(now, wmem);
            // fq reads sk_pacing_rate live: publish it after every event.
            f.sk.set_pacing_rate(sender.pacing_rate());
            let Some(seg) = seg else { break };
            let (src, dst, key, sk) = (f.src, f.dst, f.key, f.sk.clone());
            let len = seg.wire_len();
            let meta = Meta { src, dst, payload: Payload::Tcp { flow, seg: seg.clone() }, alloc: u32::MAX };
            let mut pkt = self.packet(len, seg.segs, &key, meta);
            pkt.tos = if seg.ect { 0b10 } else { 0 };
            pkt.tstamp = seg.tstamp;
            pkt.truesize = seg.truesize();
            pkt.set_owner_w(sk);
            let v = local_verdict(self.send(src, dst, pkt));
            // tcp_write_xmit stops at the first skb the stack refused (the sender ends
            // that loop); polling on runs the invocation's epilogue — e.g. the probe
            // timer that retries once nothing is in flight — and any later loop.
            if let Some(s) = self.tcp[flow as usize].sender.as_mut() {
                s.on_local_xmit(&seg, v, now);
            }
        }
        // sk_stream_write_space (from tcp_check_space) wakes a blocked writer.
        let f = &mut self.tcp[flow as usize];
        if f.app_blocked && f.sender.as_mut().is_some_and(|s| s.take_write_space()) {
            f.app_blocked = false;
            let (src, c) = (f.src, f.snd_cpu);
            self.give(src, c, Work::TcpWrite { flow }, false);
        }
        self.arm_sender(flow);
    }

    fn arm_sender(&mut self, flow: u32) {
        let f = &mut self.tcp[flow as usize];
        let want = f.sender.as_ref().and_then(|s| s.next_timer());
        arm(&mut self.events, &mut f.sender_timer, want, self.now, Ev::TcpSender { flow });
    }

    /// The sender's timer event for instant `at` (its handler may run later, on its
    /// CPU's timer softirq).
    pub fn tcp_sender_timer(&mut self, flow: u32, at: Instant) {
        let now = self.now;
        let f = &mut self.tcp[flow as usize];
        if f.sender_timer != Some(at) {
            return;
        }
        f.sender_timer = None;
        let due = f.sender.as_ref().and_then(|s| s.next_timer()).is_some_and(|t| t <= now);
        if due {
            if let Some(s) = f.sender.as_mut() {
                s.on_timer(now);
            }
            self.tcp_send(flow);
        } else {
            self.arm_sender(flow);
        }
    }

    /// `sock_def_write_space` for the UDP senders asleep in `sock_alloc_send_skb`: a
    /// freed skb (sent, or dropped in a qdisc) wakes one once less than half its
    /// `sk_sndbuf` is held (`__sock_writeable`, on the reference count, one above the
    /// bytes); its send goes on. Cheap unless a sender sleeps.
    pub fn udp_write_space(&mut self) {
        if self.udp_blocked == 0 {
            return;
        }
        for app in 0..self.udp.len() {
            let u = &mut self.udp[app];
            if u.blocked && u.sk.wmem_alloc() + 1 < UDP_SNDBUF / 2 {
                u.blocked = false;
                self.udp_blocked -= 1;
                let (src, cpu) = (u.src, u.cpu);
                self.give(src, cpu, Work::UdpSend { app: app as u32 }, false);
            }
        }
    }

    /// A charged skb of socket `id` was freed: TSQ lets its sender go on.
    pub fn socket_released(&mut self, id: u64) {
        self.udp_write_space();
        if (1..RECEIVER).contains(&id) {
            let flow = (id - 1) as u32;
            if self.tcp[flow as usize].sender.as_ref().is_some_and(|s| s.tsq_throttled()) {
                self.tcp_send(flow);
            }
        }
    }

    pub fn tcp_data(&mut self, flow: u32, seg: tcp::Segment, ce: bool, alloc: u32) {
        let now = self.now;
        let f = &mut self.tcp[flow as usize];
        if f.receiver.is_none() {
            // The handshake's last ACK was lost: this segment carries it.
            let (conn, echo) = (f.conn, self.conns[f.conn as usize].echo);
            if !self.accept(conn, echo) {
                return;
            }
        }
        let f = &mut self.tcp[flow as usize];
        let Some(r) = f.receiver.as_mut() else { return };
        let (dst, rcv_cpu, bytes) = (f.dst, f.rcv_cpu, seg.len as u64);
        let ack = r.on_segment(&seg, ce, now);
        // tcp_recvmsg → tcp_eat_recv_skb: the skb may be freed by its allocating CPU.
        self.read_skb(dst, rcv_cpu, alloc, bytes, Some(flow));
        if let Some(ack) = ack {
            self.tcp_send_ack(flow, ack);
        }
        self.arm_receiver(flow);
    }

    fn tcp_send_ack(&mut self, flow: u32, ack: tcp::Ack) {
        let f = &self.tcp[flow as usize];
        let (src, dst, key, rsk) = (f.dst, f.src, f.reverse_key(), f.rsk.clone());
        let len = ack.wire_len();
        let meta = Meta { src, dst, payload: Payload::TcpAck { flow, ack }, alloc: u32::MAX };
        let mut pkt = self.packet(len, 1, &key, meta);
        pkt.sk = Some(rsk);
        self.send(src, dst, pkt);
    }

    fn arm_receiver(&mut self, flow: u32) {
        let f = &mut self.tcp[flow as usize];
        let want = f.receiver.as_ref().and_then(|r| r.next_timer());
        arm(&mut self.events, &mut f.receiver_timer, want, self.now, Ev::TcpReceiver { flow });
    }

    pub fn tcp_receiver_timer(&mut self, flow: u32, at: Instant) {
        let now = self.now;
        let f = &mut self.tcp[flow as usize];
        if f.receiver_timer != Some(at) {
            return;
        }
        f.receiver_timer = None;
        // One ACK per call: repeat while the receiver is due.
        loop {
            let f = &mut self.tcp[flow as usize];
            let Some(r) = f.receiver.as_mut() else { return };
            if r.next_timer().is_none_or(|t| t > now) {
                break;
            }
            match r.on_timer(now) {
                Some(ack) => self.tcp_send_ack(flow, ack),
                None => break,
            }
        }
        self.arm_receiver(flow);
    }

    pub fn tcp_ack(&mut self, flow: u32, ack: tcp::Ack) {
        let now = self.now;
        let f = &mut self.tcp[flow as usize];
        if let Some(s) = f.sender.as_mut() {
            s.on_ack(&ack, now);
        }
        self.tcp_send(flow);
    }

    /// A UDP datagram is due: the sender's thread sends it.
    pub fn udp_due(&mut self, app: u32) {
        let u = &mut self.udp[app as usize];
        let (src, cpu) = (u.src, u.cpu);
        u.owed += 1;
        if !std::mem::replace(&mut u.queued, true) {
            self.give(src, cpu, Work::UdpSend { app }, false);
        }
        self.udp_next(app);
    }

    /// The next datagram of a rate-limited sender: datagram k leaves at start + k·gap
    /// (no drift), or later if its CPU is late.
    fn udp_next(&mut self, app: u32) {
        let u = &mut self.udp[app as usize];
        let Some(rate) = u.rate else { return };
        let gap = (u.size as u128 * 1_000_000_000 / rate.max(1) as u128).max(1) as u64;
        u.scheduled += 1;
        let next = u.start + qdisc::Duration(gap * u.scheduled);
        if next < u.end {
            self.events.at(next, Ev::Udp { app });
        }
    }

    /// Build the next datagram of a sender (its sequence number advances).
    fn udp_datagram(&mut self, app: u32) -> (u32, u32, qdisc::Packet) {
        let now = self.now;
        let u = &mut self.udp[app as usize];
        let (src, dst, key, sk, seq) = (u.src, u.dst, u.key, u.sk.clone(), u.next_seq);
        u.next_seq += 1;
        u.sent += 1;
        u.sent_bytes += u.size as u64;
        let len = if u.pktgen { u.size } else { u.size + UDP_HEADERS };
        let (pktgen, truesize, tos) = (u.pktgen, qdisc::packet::ip_append_data_truesize(u.size), u.tos);
        let meta = Meta { src, dst, payload: Payload::Udp { app, seq, sent_at: now }, alloc: u32::MAX };
        let mut pkt = self.packet(len, 1, &key, meta);
        pkt.tos = tos;
        pkt.priority = qdisc::packet::rt_tos2priority(tos);
        if !pktgen {
            // Charged to the socket until freed (sock_wfree), as the kernel's skb is.
            pkt.truesize = truesize;
            pkt.set_owner_w(sk);
        }
        (src, dst, pkt)
    }

    /// After a datagram's xmit: an unlimited sender loops; a rate-limited one sends
    /// what it owes, or waits for its next due time.
    pub fn udp_after_send(&mut self, h: u32, c: u32, app: u32) {
        let u = &mut self.udp[app as usize];
        if u.rate.is_none() || u.owed > 0 {
            self.give(h, c, Work::UdpSend { app }, false);
        } else {
            u.queued = false;
        }
    }

    /// The sender thread on CPU `c`: iperf3's loop (user), `sendto` (sys), then the
    /// datagram's `dev_queue_xmit` on this CPU. An unlimited sender loops right after.
    pub fn udp_send_on(&mut self, h: u32, c: u32, app: u32) -> Step {
        let u = &mut self.udp[app as usize];
        if self.now >= u.end {
            u.queued = false;
            return Step::Done(0);
        }
        // sock_alloc_send_skb: a blocking send sleeps while the socket's skbs not yet
        // freed hold sk_sndbuf (sock_wait_for_wmem), until sock_wfree wakes it.
        if !u.pktgen && u.sk.wmem_alloc() >= UDP_SNDBUF {
            u.blocked = true;
            self.udp_blocked += 1;
            return Step::Done(0);
        }
        let (src, dst, pkt) = self.udp_datagram(app);
        let pktgen = self.udp[app as usize].pktgen;
        let k = &self.cpus(h).costs;
        let (user, sys) = if pktgen {
            // pktgen's kernel thread: its loop, then dev_queue_xmit (queue_xmit mode).
            let ns = k.pktgen_xmit;
            self.cpus(h).charge(c, Class::Sys, Func::PktgenXmit as u16, ns);
            (0, ns)
        } else {
            let (user, sys) = (k.app_send, k.udp_sendmsg);
            self.cpus(h).charge(c, Class::User, Func::App as u16, user);
            self.cpus(h).charge(c, Class::Sys, Func::UdpSendmsg as u16, sys);
            (user, sys)
        };
        let Some(iface) = self.hosts[src as usize].route[dst as usize] else { return Step::Done(user + sys) };
        let u = &mut self.udp[app as usize];
        u.owed = u.owed.saturating_sub(1);
        let then = Then::UdpNext(app);
        self.cpus(h).cpus[c as usize].cur = Some(Work::Xmit(XmitTask::send(iface, pkt, then)));
        self.cpus(h).cpus[c as usize].cur_class = Class::Sys;
        Step::Busy(user + sys + self.xmit_cost(h, c))
    }

    pub fn udp_receive(&mut self, app: u32, seq: u64, sent_at: Instant, alloc: u32) {
        let now = self.now;
        let u = &mut self.udp[app as usize];
        u.received += 1;
        u.received_bytes += u.size as u64;
        u.received_upto = u.received_upto.max(seq + 1);
        let transit = now.as_nanos() as i128 - sent_at.as_nanos() as i128;
        if let Some(prev) = u.last_transit {
            let d = (transit - prev).abs() as f64;
            u.jitter += (d - u.jitter) / 16.0;
        }
        u.last_transit = Some(transit);
        let (dst, c, size) = (u.dst, u.rcv_cpu, u.size as u64);
        if u.pktgen {
            // No socket on the discard port: udp_rcv frees the skb where it runs.
            if let Some((h, cpu)) = self.on_cpu {
                let ns = self.cpus(h).costs.free(size);
                self.cpus(h).charge(cpu, Class::Softirq, Func::KfreeSkb as u16, ns);
                self.inline_ns += ns;
            }
            return;
        }
        // skb_consume_udp defers the free from 6.18 on; 6.12 frees it in place, on the
        // reader's CPU (as if it had allocated it).
        let alloc = if self.kernel >= qdisc::tree::KernelVersion(6, 18) { alloc } else { c };
        self.read_skb(dst, c, alloc, size, None);
    }

    /// The receiver of TCP connection `flow` read what had arrived (`tcp_cleanup_rbuf`):
    /// an ACK it held back may go now.
    pub fn tcp_read(&mut self, flow: u32) {
        let now = self.now;
        let Some(f) = self.tcp.get_mut(flow as usize) else { return };
        if let Some(ack) = f.receiver.as_mut().and_then(|r| r.on_read(now)) {
            self.tcp_send_ack(flow, ack);
            self.arm_receiver(flow);
        }
    }

    /// The receiving application reads `bytes` of one skb on its thread's CPU (load on
    /// that CPU: it does not hold the packet up) and the skb is freed there or deferred
    /// to the CPU that allocated it (skb_attempt_defer_free: TCP's `flow`, and UDP's
    /// from 6.18 on, `None`).
    fn read_skb(&mut self, h: u32, c: u32, alloc: u32, bytes: u64, flow: Option<u32>) {
        let k = &self.cpus(h).costs;
        let recv = k.recvmsg + k.copy(bytes);
        let (free, ipi) = self.skb_consumed(h, c, alloc, bytes);
        self.give(h, c, Work::Recv { flow: flow.unwrap_or(u32::MAX), recv: recv + ipi, free }, false);
    }

    /// An echo request is due: on a host with CPUs the ping process sends it.
    pub fn ping_due(&mut self, app: u32) {
        let now = self.now;
        let p = &mut self.ping[app as usize];
        if now >= p.end {
            return;
        }
        p.scheduled += 1;
        let next = p.start + qdisc::Duration(p.interval * p.scheduled);
        self.events.at(next, Ev::Ping { app });
        let (src, cpu) = (p.src, p.cpu);
        self.give(src, cpu, Work::PingSend { app }, false);
    }

    fn ping_request(&mut self, app: u32) -> (u32, u32, qdisc::Packet) {
        let now = self.now;
        let p = &mut self.ping[app as usize];
        let (src, dst, key, sk, seq) = (p.src, p.dst, p.key, p.sk.clone(), p.transmitted);
        p.transmitted += 1;
        let meta = Meta { src, dst, payload: Payload::Ping { app, seq, sent_at: now, reply: false }, alloc: u32::MAX };
        let mut pkt = self.packet(PING_LEN, 1, &key, meta);
        pkt.sk = Some(sk);
        (src, dst, pkt)
    }

    /// The ping process on CPU `c`: `sendto` of the echo request, then its xmit.
    pub fn ping_send_on(&mut self, h: u32, c: u32, app: u32) -> Step {
        let (src, dst, pkt) = self.ping_request(app);
        let ns = self.cpus(h).costs.udp_sendmsg;
        self.cpus(h).charge(c, Class::Sys, Func::UdpSendmsg as u16, ns);
        let Some(iface) = self.hosts[src as usize].route[dst as usize] else { return Step::Done(ns) };
        self.cpus(h).cpus[c as usize].cur = Some(Work::Xmit(XmitTask::send(iface, pkt, Then::Nothing)));
        Step::Busy(ns + self.xmit_cost(h, c))
    }

    pub fn ping_receive(&mut self, app: u32, seq: u64, sent_at: Instant, reply: bool, from: u32) {
        if !reply {
            // The far host's ICMP answers at once (no socket), from the CPU that received it.
            let p = &self.ping[app as usize];
            let key = FlowKey { src: p.key.dst, dst: p.key.src, ..p.key };
            let me = p.dst;
            let meta =
                Meta { src: me, dst: from, payload: Payload::Ping { app, seq, sent_at, reply: true }, alloc: u32::MAX };
            let pkt = self.packet(PING_LEN, 1, &key, meta);
            let (h, c) = self.on_cpu.expect("delivered by a NAPI poll");
            let iface = self.hosts[me as usize].route[from as usize].expect("the way back of a validated route");
            self.cpus(h).cpus[c as usize].cur = Some(Work::Xmit(XmitTask::send(iface, pkt, Then::Nothing)));
            self.inline_ns += self.xmit_cost(h, c);
            return;
        }
        // The reply wakes the ping process, which reads it on its CPU.
        let (src, cpu) = (self.ping[app as usize].src, self.ping[app as usize].cpu);
        self.give(src, cpu, Work::PingRecv { app, seq, sent_at }, false);
    }

    /// ping prints the reply `ns` from now.
    pub fn ping_record(&mut self, app: u32, seq: u64, sent_at: Instant, ns: u64) {
        let at = self.now + qdisc::Duration(ns);
        let rtt = (at - sent_at).as_nanos() as f64 / 1e6;
        self.ping[app as usize].samples.push(RttSample { seq: seq + 1, t: at.as_nanos() as f64 / 1e9, rtt_ms: rtt });
    }
}
