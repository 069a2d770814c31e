//! Measuring a run the way the kernel lab does, into the shared [`RunResult`]:
//! per-interval bytes of every flow (iperf3's intervals), ping samples, and `tc -s`
//! snapshots of every interface taken with the engine's own tc (JSON periodically, text
//! and JSON at the end).
//!
//! TCP sender intervals count bytes newly acknowledged (iperf3 counts bytes written
//! into the socket, which runs ahead by the send buffer while it fills); the receiver
//! summary counts bytes delivered in order.

use std::collections::BTreeMap;

use qdisc::tc::TcOpts;
use qdisc::Instant;
use qdisc_scenario::result::{
    parse_tc_json, BqlQueue, BqlSample, CpuInterval, CpuTime, DeviceSnapshot, FunctionShare, HostCpu, Interval,
    LinkInfo, LockStats, Metadata, NetStats, Periodic, RttResult, RttStats, RunResult, ScenarioInfo, StreamResult,
    Summary, TcResult, TrafficResult, FORMAT,
};
use qdisc_scenario::scenario::{LinkKind, Scenario, TrafficKind, VethBql};

use crate::world::Sim;

fn secs(t: Instant) -> f64 {
    t.as_nanos() as f64 / 1e9
}

/// What a running simulation has measured so far.
pub struct Recorder {
    pub interval: u64,
    pub snapshot_every: u64,
    last: Instant,
    /// Per TCP flow: (bytes acked, retransmits) at the last boundary, and the intervals.
    tcp: Vec<((u64, u64), Vec<Interval>)>,
    /// Per UDP sender: (bytes, datagrams) at the last boundary, and the intervals.
    udp: Vec<((u64, u64), Vec<Interval>)>,
    /// The tc snapshots, spilled as they are taken (memory does not grow with the run).
    periodic: Periodic,
    /// Why a snapshot could not be spilled (a full disk), for the warnings.
    spill_error: Option<String>,
    /// Per host with CPUs: each CPU's busy time by class at the last boundary, and
    /// the intervals so far.
    cpu: Vec<(Vec<[u64; 3]>, Vec<CpuInterval>)>,
    /// BQL on veth: (interface, tx queue) and its samples.
    bql: Vec<(u32, u32, Vec<BqlSample>)>,
}

/// A CPU's split of a span of `span` ns in which it was busy `now - then` by class.
fn cpu_time(cpu: u32, now: &[u64; 3], then: &[u64; 3], span: u64) -> CpuTime {
    let pct = |k: usize| ((now[k] - then[k]) as f64 * 100.0 / span.max(1) as f64).min(100.0);
    let (user, sys, softirq) = (pct(0), pct(1), pct(2));
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    CpuTime {
        cpu,
        user: round(user),
        sys: round(sys),
        softirq: round(softirq),
        idle: round((100.0 - user - sys - softirq).max(0.0)),
    }
}

impl Recorder {
    pub fn new(sim: &Sim, interval: u64, snapshot_every: u64) -> Self {
        Recorder {
            interval: interval.max(1),
            snapshot_every: snapshot_every.max(1),
            last: Instant::ZERO,
            tcp: sim.tcp.iter().map(|_| ((0, 0), Vec::new())).collect(),
            udp: sim.udp.iter().map(|_| ((0, 0), Vec::new())).collect(),
            periodic: Periodic::spilled(),
            spill_error: None,
            cpu: sim
                .hosts
                .iter()
                .map(|h| (h.cpu.as_ref().map_or(Vec::new(), |c| vec![[0; 3]; c.cpus.len()]), Vec::new()))
                .collect(),
            bql: sim
                .ifaces
                .iter()
                .enumerate()
                .filter(|(_, i)| i.veth_bql != VethBql::Off)
                .flat_map(|(k, i)| (0..i.txqs.len() as u32).map(move |q| (k as u32, q, Vec::new())))
                .collect(),
        }
    }

    /// At a boundary: close the intervals, maybe snapshot tc, and return the next
    /// boundary.
    pub fn sample(&mut self, sim: &mut Sim) -> Instant {
        let now = sim.now;
        if now > Instant::ZERO {
            self.close(sim, now);
        }
        if now.as_nanos() % self.snapshot_every == 0 {
            let shown = show_all(sim, false);
            let devices = shown.iter().map(|s| [s.host.as_str(), &s.dev, &s.qdisc, &s.class]);
            if let Err(e) = self.periodic.push_raw(secs(now), devices) {
                self.spill_error.get_or_insert(e.to_string());
            }
        }
        self.last = now;
        let next = (now.as_nanos() / self.interval + 1) * self.interval;
        let next_snap = (now.as_nanos() / self.snapshot_every + 1) * self.snapshot_every;
        Instant::from_nanos(next.min(next_snap))
    }

    fn close(&mut self, sim: &mut Sim, now: Instant) {
        let span = (now - self.last).as_nanos();
        for (i, q, samples) in &mut self.bql {
            let tq = &mut sim.ifaces[*i as usize].txqs[*q as usize];
            let (limit, inflight) = (tq.dql.limit, tq.dql.inflight());
            let peak = std::mem::take(&mut tq.bql_peak).max(inflight);
            samples.push(BqlSample { t: secs(now), limit, inflight, inflight_max: peak });
        }
        for (h, host) in sim.hosts.iter().enumerate() {
            let Some(hc) = host.cpu.as_ref() else { continue };
            let (prev, ivs) = &mut self.cpu[h];
            let cpus = hc.cpus.iter().enumerate().map(|(i, c)| cpu_time(i as u32, &c.acct, &prev[i], span)).collect();
            ivs.push(CpuInterval { start: secs(self.last), end: secs(now), cpus });
            for (p, c) in prev.iter_mut().zip(&hc.cpus) {
                *p = c.acct;
            }
        }
        for (i, f) in sim.tcp.iter().enumerate() {
            let (start, end) = (self.last.max(f.start), now.min(f.end));
            let Some(s) = f.sender.as_ref() else { continue };
            if start >= end {
                continue;
            }
            let st = s.stats();
            let ((acked, rtx), ivs) = &mut self.tcp[i];
            let bytes = st.bytes_acked - *acked;
            ivs.push(Interval {
                start: secs(start),
                end: secs(end),
                bytes,
                bits_per_second: bytes as f64 * 8.0 / (end - start).as_secs_f64(),
                retransmits: Some(st.retransmits - *rtx),
                tcp_rtt_us: Some(st.srtt.as_nanos() / 1000),
                snd_cwnd: Some(st.snd_cwnd_bytes),
                packets: None,
            });
            *acked = st.bytes_acked;
            *rtx = st.retransmits;
        }
        for (i, u) in sim.udp.iter().enumerate() {
            let (start, end) = (self.last.max(u.start), now.min(u.end));
            if start >= end {
                continue;
            }
            let ((bytes0, pkts0), ivs) = &mut self.udp[i];
            let bytes = u.sent_bytes - *bytes0;
            ivs.push(Interval {
                start: secs(start),
                end: secs(end),
                bytes,
                bits_per_second: bytes as f64 * 8.0 / (end - start).as_secs_f64(),
                retransmits: None,
                tcp_rtt_us: None,
                snd_cwnd: None,
                packets: Some(u.sent - *pkts0),
            });
            *bytes0 = u.sent_bytes;
            *pkts0 = u.sent;
        }
    }

    /// The result of a finished run (`sim.now` is the scenario's end).
    pub fn finish(mut self, sim: &mut Sim, s: &Scenario) -> RunResult {
        if sim.now > self.last {
            let now = sim.now;
            self.close(sim, now);
        }
        let end = snapshot(sim);
        let mut throughput = Vec::new();
        let mut rtt = Vec::new();
        for (ti, t) in s.traffic.iter().enumerate() {
            let dst = s.dst_address(&t.from, &t.to).expect("validated route");
            let start_s = t.start as f64 / 1e9;
            let seconds = t.duration as f64 / 1e9;
            let summary = |bytes: u64| Summary {
                seconds,
                bytes,
                bits_per_second: bytes as f64 * 8.0 / seconds,
                retransmits: None,
                packets: None,
                lost_packets: None,
                jitter_ms: None,
            };
            match &t.kind {
                TrafficKind::Tcp { cc, .. } => {
                    let mut streams = Vec::new();
                    for (i, f) in sim.tcp.iter().enumerate().filter(|(_, f)| f.traffic == ti) {
                        let (acked, rtx) =
                            f.sender.as_ref().map(|s| (s.stats().bytes_acked, s.stats().retransmits)).unwrap_or((0, 0));
                        let delivered = f.receiver.as_ref().map(|r| r.delivered()).unwrap_or(0);
                        streams.push(StreamResult {
                            id: f.stream + 1,
                            intervals: std::mem::take(&mut self.tcp[i].1),
                            sender: Summary { retransmits: Some(rtx), ..summary(acked) },
                            receiver: summary(delivered),
                        });
                    }
                    throughput.push(traffic_result(
                        ti,
                        t,
                        &dst,
                        start_s,
                        // What TCP_CONGESTION reads back (iperf3's sender_tcp_congestion).
                        Some(
                            sim.tcp
                                .iter()
                                .find(|f| f.traffic == ti)
                                .map_or(cc.as_str(), |f| f.cfg.cc.effective_name(f.cfg.ecn))
                                .to_string(),
                        ),
                        sim.tcp.iter().find(|f| f.traffic == ti).map(|f| f.mss),
                        streams,
                        summary,
                    ));
                }
                TrafficKind::Udp { .. } | TrafficKind::Pktgen { .. } => {
                    let mut streams = Vec::new();
                    for (i, u) in sim.udp.iter().enumerate().filter(|(_, u)| u.traffic == ti) {
                        streams.push(StreamResult {
                            id: streams.len() as u32 + 1,
                            intervals: std::mem::take(&mut self.udp[i].1),
                            sender: Summary { packets: Some(u.sent), ..summary(u.sent_bytes) },
                            receiver: Summary {
                                // iperf3: the datagrams the receiver knows were sent (lost included).
                                packets: Some(u.received_upto),
                                lost_packets: Some(u.lost()),
                                jitter_ms: Some(u.jitter / 1e6),
                                ..summary(u.received_bytes)
                            },
                        });
                    }
                    throughput.push(traffic_result(ti, t, &dst, start_s, None, None, streams, summary));
                }
                TrafficKind::Ping { interval } => {
                    let p = sim.ping.iter_mut().find(|p| p.traffic == ti).expect("one app per entry");
                    let samples = std::mem::take(&mut p.samples); // the run is over: moved, not copied
                    let received = samples.len() as u64;
                    let last = samples.iter().map(|x| x.seq).max().unwrap_or(0);
                    let rtts: Vec<f64> = samples.iter().map(|x| x.rtt_ms).collect();
                    // Still in flight: sent after the last reply and recently enough that
                    // a reply could come (iputils' linger, twice the largest RTT — here at
                    // least twice the path's own); older unanswered requests are lost.
                    let tmax = rtts.iter().fold(0.0f64, |a, &b| a.max(b)) * 1e6;
                    let window = 2 * (tmax as u64).max(crate::world::path_rtt(s, &t.from, &t.to));
                    let end = t.start + t.duration;
                    let in_flight =
                        (last..p.transmitted).filter(|&k| t.start + k * interval + window > end).count() as u64;
                    rtt.push(RttResult {
                        traffic: ti,
                        from: t.from.clone(),
                        to: t.to.clone(),
                        dst,
                        start_s,
                        interval_s: *interval as f64 / 1e9,
                        transmitted: p.transmitted,
                        received,
                        in_flight_at_end: in_flight,
                        samples,
                        stats: RttStats::of(&rtts),
                    });
                }
            }
        }
        let interval_s = self.interval as f64 / 1e9;
        let mut warnings = sim.warnings.clone();
        if let Some(e) = &self.spill_error {
            warnings.push(format!("some periodic tc snapshots are missing: their temporary file: {e}"));
        }
        warnings.push(
            "simulated: TCP is qdisc-sim's Linux-like model (sender intervals count acknowledged bytes, not written ones); \
             NICs are modelled with BQL, TSO and GRO (docs/simulator.md)"
                .into(),
        );
        RunResult {
            format: FORMAT.into(),
            scenario: ScenarioInfo {
                name: s.name.clone(),
                file: s.file.clone(),
                sha256: s.sha256.clone(),
                seed: s.seed,
                duration_s: s.duration as f64 / 1e9,
            },
            metadata: Metadata {
                backend: "sim".into(),
                kernel: format!("simulated (qdisc engine with Linux {}.{} semantics)", sim.kernel.0, sim.kernel.1),
                iproute2: format!("qdisc-lab tc {} (iproute2 6.15 syntax)", env!("CARGO_PKG_VERSION")),
                tools: BTreeMap::from([(
                    "tcp".to_string(),
                    "qdisc-sim TCP model (cubic, reno, bbr, dctcp)".to_string(),
                )]),
                qdisc_lab: env!("CARGO_PKG_VERSION").into(),
                interval_s,
                snapshot_interval_s: self.snapshot_every as f64 / 1e9,
                links: links(s),
            },
            wallclock: None,
            total: RunResult::totals(&throughput, interval_s),
            throughput,
            rtt,
            tc: TcResult { end, periodic: self.periodic },
            cpu: sim
                .hosts
                .iter()
                .enumerate()
                .zip(std::mem::take(&mut self.cpu))
                .filter_map(|((k, h), (_, intervals))| {
                    let mut c = host_cpu(sim, h, intervals, s.duration)?;
                    c.net = net_stats(sim, k as u32, &mut self.bql);
                    Some(c)
                })
                .collect(),
            warnings,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn traffic_result(
    ti: usize,
    t: &qdisc_scenario::scenario::Traffic,
    dst: &str,
    start_s: f64,
    cc: Option<String>,
    mss: Option<u32>,
    streams: Vec<StreamResult>,
    summary: impl Fn(u64) -> Summary,
) -> TrafficResult {
    let mut grid: BTreeMap<u64, Interval> = BTreeMap::new();
    for st in &streams {
        for iv in &st.intervals {
            let k = (iv.start * 1e9).round() as u64;
            let e = grid.entry(k).or_insert(Interval {
                bytes: 0,
                bits_per_second: 0.0,
                retransmits: iv.retransmits.map(|_| 0),
                packets: iv.packets.map(|_| 0),
                tcp_rtt_us: None,
                snd_cwnd: None,
                ..iv.clone()
            });
            e.bytes += iv.bytes;
            e.bits_per_second += iv.bits_per_second;
            e.retransmits = e.retransmits.zip(iv.retransmits).map(|(a, b)| a + b);
            e.packets = e.packets.zip(iv.packets).map(|(a, b)| a + b);
        }
    }
    let sum_of = |f: &dyn Fn(&StreamResult) -> &Summary| {
        let bytes = streams.iter().map(|s| f(s).bytes).sum();
        let opt = |g: &dyn Fn(&Summary) -> Option<u64>| {
            streams.iter().map(|s| g(f(s))).try_fold(0u64, |acc, v| v.map(|v| acc + v))
        };
        Summary {
            retransmits: opt(&|s| s.retransmits),
            packets: opt(&|s| s.packets),
            lost_packets: opt(&|s| s.lost_packets),
            jitter_ms: streams.first().and_then(|s| f(s).jitter_ms),
            ..summary(bytes)
        }
    };
    TrafficResult {
        traffic: ti,
        kind: t.kind.name().into(),
        from: t.from.clone(),
        to: t.to.clone(),
        dst: dst.into(),
        start_s,
        flows: streams.len() as u32,
        cc,
        tcp_mss: mss,
        sender: sum_of(&|s| &s.sender),
        receiver: sum_of(&|s| &s.receiver),
        sum: grid.into_values().collect(),
        streams,
        cpu_utilization_percent: None,
    }
}

/// A host's CPU report: totals, locks, functions (the CPU model's figures).
fn host_cpu(sim: &Sim, h: &crate::world::Host, intervals: Vec<CpuInterval>, duration: u64) -> Option<HostCpu> {
    let hc = h.cpu.as_ref()?;
    let total = hc.cpus.iter().enumerate().map(|(i, c)| cpu_time(i as u32, &c.acct, &[0; 3], duration)).collect();
    let mut locks: Vec<LockStats> = hc
        .locks
        .iter()
        .filter(|l| l.acquisitions > 0)
        .map(|l| LockStats {
            name: l.name.clone(),
            acquisitions: l.acquisitions,
            contended: l.contended,
            wait_s: l.wait_ns as f64 / 1e9,
        })
        .collect();
    locks.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s).then(b.acquisitions.cmp(&a.acquisitions)));
    let busy: u64 = hc.funcs.ns.iter().sum();
    let mut functions: Vec<FunctionShare> = hc
        .funcs
        .names
        .iter()
        .zip(&hc.funcs.ns)
        .filter(|(_, &ns)| ns > 0)
        .map(|(n, &ns)| FunctionShare {
            symbol: n.clone(),
            seconds: ns as f64 / 1e9,
            share: (ns as f64 * 10000.0 / busy.max(1) as f64).round() / 100.0,
        })
        .collect();
    functions.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.symbol.cmp(&b.symbol)));
    let rx_discards = h
        .ifaces
        .iter()
        .flatten()
        .map(|&i| &sim.ifaces[i as usize])
        .filter(|i| !i.veth)
        .map(|i| (i.name.clone(), i.rx_discards))
        .collect();
    Some(HostCpu {
        host: h.name.clone(),
        cpus: hc.cpus.len() as u32,
        source: "model".into(),
        profile: hc.profile.origin.clone(),
        total,
        intervals,
        locks,
        functions,
        rx_discards,
        net: NetStats::default(),
    })
}

/// The receive side's drops and veth BQL of machine `m` (its own host and the
/// namespaces sharing its CPUs).
fn net_stats(sim: &Sim, m: u32, bql: &mut Vec<(u32, u32, Vec<BqlSample>)>) -> NetStats {
    let hosts: Vec<u32> = (0..sim.hosts.len() as u32).filter(|&h| sim.hosts[h as usize].machine == m).collect();
    let name = |i: &crate::world::Iface| {
        if i.host == m {
            i.name.clone()
        } else {
            format!("{}:{}", sim.hosts[i.host as usize].name, i.name)
        }
    };
    let ifaces = || sim.ifaces.iter().filter(|i| hosts.contains(&i.host));
    let hc = sim.hosts[m as usize].cpu.as_ref().expect("a machine");
    let (mine, rest) =
        std::mem::take(bql).into_iter().partition(|(i, ..)| hosts.contains(&sim.ifaces[*i as usize].host));
    *bql = rest;
    let queues = mine
        .into_iter()
        .map(|(i, q, samples): (u32, u32, Vec<BqlSample>)| {
            let iface = &sim.ifaces[i as usize];
            let variant = if iface.veth_bql == VethBql::Time { "time" } else { "bytes" };
            BqlQueue { dev: name(iface), txq: q, variant: variant.into(), samples }
        })
        .collect();
    NetStats {
        namespaces: hosts.iter().filter(|&&h| h != m).map(|&h| sim.hosts[h as usize].name.clone()).collect(),
        tx_dropped: ifaces().filter(|i| i.tx_dropped > 0).map(|i| (name(i), i.tx_dropped)).collect(),
        backlog_dropped: hc.backlog_dropped,
        tx_queue_changes: hosts.iter().map(|&h| sim.hosts[h as usize].txq_changes).sum(),
        bql: queues,
    }
}

fn links(s: &Scenario) -> Vec<LinkInfo> {
    s.links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let rate = l.rate.map(|r| qdisc::tc::units::fmt_rate(r, false));
            let mut how = vec![match (l.kind, &rate) {
                (LinkKind::Eth, Some(r)) => format!("simulated NICs (BQL, TSO/GRO, 24 B framing per frame) at {r}"),
                (LinkKind::Eth, None) => "simulated NICs without a rate of their own".into(),
                (LinkKind::Veth, _) if l.wire_needs_netem() => format!(
                    "simulated veth pair through a bridge; {} on the ports l{i}a/l{i}b, seeded from the run's seed",
                    l.wire_qdisc("").unwrap_or_default()[7..].join(" ")
                ),
                (LinkKind::Veth, Some(r)) => format!(
                    "simulated veth pair through a bridge; tbf rate {r} burst {}b latency 50ms on the ports l{i}a/l{i}b",
                    l.wire_tbf_burst()
                ),
                (LinkKind::Veth, None) => "simulated veth pair through a bridge".into(),
                (LinkKind::VethPair, _) => format!(
                    "simulated veth pair, no bridge (peer NAPI ring of 256 when GRO is on; BQL on veth: {})",
                    match l.veth_bql {
                        qdisc_scenario::scenario::VethBql::Off => "off",
                        qdisc_scenario::scenario::VethBql::Bytes => "bytes (v5)",
                        qdisc_scenario::scenario::VethBql::Time => "time-based",
                    }
                ),
            }];
            // On a veth wire the netem command above says it.
            if l.kind == LinkKind::Eth && l.delay > 0 {
                how.push(format!("delay {}us", l.delay / 1000));
            }
            if l.kind == LinkKind::Eth && l.loss > 0.0 {
                how.push(format!("loss {}%", l.loss));
            }
            LinkInfo {
                between: [l.a.to_string(), l.b.to_string()],
                addresses: [format!("{}/24", s.address_on(i, &l.a.host)), format!("{}/24", s.address_on(i, &l.b.host))],
                realised_by: how.join(", "),
            }
        })
        .collect()
}

/// One interface's `tc -s` output, as printed.
struct Shown {
    host: String,
    dev: String,
    qdisc: String,
    class: String,
    qdisc_text: Option<String>,
    class_text: Option<String>,
}

/// `tc -s -j qdisc show` and `class show` of every interface (text too when `text`).
fn show_all(sim: &mut Sim, text: bool) -> Vec<Shown> {
    let now = sim.now;
    let mut out = Vec::new();
    for h in &mut sim.hosts {
        h.tc.now = now;
        let names: Vec<String> =
            h.tc.devices.iter().filter(|d| d.info.name != "lo").map(|d| d.info.name.clone()).collect();
        for dev in names {
            let mut show = |what: &str, json: bool| {
                let args: Vec<String> = [what, "show", "dev", &dev].iter().map(|s| s.to_string()).collect();
                h.tc.exec(&args, TcOpts { stats: 1, json, ..Default::default() }).stdout
            };
            out.push(Shown {
                host: h.name.clone(),
                qdisc: show("qdisc", true),
                class: show("class", true),
                qdisc_text: text.then(|| show("qdisc", false)),
                class_text: text.then(|| show("class", false)),
                dev,
            });
        }
    }
    out
}

/// The final snapshot of every interface, JSON and text.
fn snapshot(sim: &mut Sim) -> Vec<DeviceSnapshot> {
    show_all(sim, true)
        .into_iter()
        .map(|s| DeviceSnapshot {
            qdisc: parse_tc_json(&s.qdisc),
            class: parse_tc_json(&s.class),
            host: s.host,
            dev: s.dev,
            qdisc_text: s.qdisc_text,
            class_text: s.class_text,
        })
        .collect()
}
