//! The simulator against the real kernel. Each fixture is the `RunResult` of one
//! scenario run on a real kernel by the kernel lab (tests/fixtures/README.md says with
//! which command and kernel; the matrix in tests/fixtures/matrix was recorded by
//! scripts/record-fixtures.sh). The simulator runs the same file and is held to the
//! targets of issue 16: total throughput within 3 %, ping p50 within 10 % and p99
//! within 15 %, drops within 25 %, retransmits of the same order (zero where the kernel
//! has zero).
//!
//! A metric outside its target needs a reason in [`WHY`]; a metric inside it must not
//! have one. The whole table, every number as printed, is docs/vs-kernel.md: a change
//! that moves any simulator figure fails here until the page is regenerated
//! (`QDISC_LAB_BLESS=1 cargo test --release -p qdisc-sim --test vs_kernel`) and the
//! reasons re-examined — so today's numbers are pinned, gaps included.

use std::fmt::Write as _;
use std::path::PathBuf;

use qdisc::tree::KernelVersion;
use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::{RunResult, Scenario};
use qdisc_sim::simulate_kernel;

#[path = "common/kernel.rs"]
mod kernel;
use kernel::{kernel_runs, median, modelled_kernel, page_is_true, root};

/// Fixtures recorded before the matrix, with their bundled scenarios.
const BUNDLED: &[(&str, &str)] = &[
    ("host-bufferbloat-pfifo.json", "scenarios/bufferbloat-pfifo.toml"),
    ("host-bbr-htb.json", "scenarios/bbr-htb.toml"),
    ("host-ifb-download-htb.json", "scenarios/ifb-download-htb.toml"),
    ("vm-bufferbloat-fq_codel.json", "scenarios/bufferbloat-fq_codel.toml"),
    ("vm-fq-flows-plimit.json", "scenarios/fq-flows-plimit.toml"),
    ("vm-netem-20ms.json", "scenarios/netem-20ms.toml"),
];

/// Why a metric misses its target: (fixture, metric, reason). Metrics: throughput,
/// p50, p99, drops, retransmits.
const WHY: &[(&str, &str, &str)] = &[
    ("host-htb50-pfifo1000-cubic2", "p50", SKB_SIZES),
    ("host-bufferbloat-pfifo", "p50", SKB_SIZES),
    ("host-htb100-pfifo100-cubic4", "p50", SKB_SIZES),
    ("host-tbf20-limit30000-cubic2", "p99", BYTE_LIMIT),
    ("host-htb50-default-cubic1", "p50", SKB_SIZES),
    ("host-htb50-default-cubic1", "p99", SKB_SIZES),
    ("host-htb50-pfifo20-cubic8", "p50", SKB_SIZES),
    ("host-htb50-pfifo20-cubic8", "p99", SKB_SIZES),
    ("host-htb50-pfifo20-cubic8", "drops", SKB_SIZES),
    ("host-htb100-bfifo60000-cubic1", "p50", SKB_SIZES),
    ("host-tbf100-pfifo200-cubic2", "p50", TBF_CUT),
    ("host-tbf100-pfifo200-cubic2", "p99", TBF_CUT),
    ("host-tbf100-pfifo200-cubic2", "drops", TBF_CUT),
    ("host-tbf100-pfifo200-cubic2", "retransmits", TBF_CUT),
    ("host-tbf50-32k-lat50-cubic4", "drops", TBF_CUT),
    ("host-tbf5-10k-lat100-cubic1", "p50", TBF_CUT),
    ("host-tbf20-limit30000-cubic2", "drops", BYTE_LIMIT),
    ("host-htb100-bfifo60000-cubic1", "drops", BYTE_LIMIT),
    ("host-htb5-bfifo15000-cubic2", "drops", BYTE_LIMIT),
    ("host-htb50-bfifo100000-cubic2", "p99", SKB_SIZES),
    ("host-htb50-bfifo100000-cubic2", "drops", BYTE_LIMIT),
    ("host-bbr-htb", "p50", BBR_QUEUE),
    ("host-bbr-htb", "p99", BBR_STARTUP),
    ("host-htb100-pfifo100-bbr4", "p50", BBR_QUEUE),
    ("host-htb100-pfifo100-bbr4", "p99", BBR_STARTUP),
    ("host-htb20-pfifo1000-bbr8", "p99", BBR_STARTUP),
    ("host-htb5-pfifo100-bbr1", "p50", BBR_DRAIN),
    ("host-tbf50-32k-lat50-bbr4", "p50", BBR_QUEUE),
    ("host-tbf50-32k-lat50-bbr4", "drops", BBR_TBF),
    ("host-htb20-bfifo30000-bbr4", "p50", IDLE_PING),
    ("host-htb20-bfifo30000-bbr4", "p99", STALLED),
    ("host-idle-veth-ping", "p50", IDLE_PING),
    ("host-idle-veth-ping", "p99", IDLE_PING),
    ("vm-htb10-fq_codel-rtt0-cubic8", "p99", TCG_NOT_ALIKE),
    ("vm-htb10-fq_codel-rtt0-cubic8", "drops", TCG_HTB_DROPS),
    ("vm-bufferbloat-fq_codel", "throughput", TCG_CPU),
    ("vm-bufferbloat-fq_codel", "p50", TCG_PING_P50),
    ("vm-bufferbloat-fq_codel", "p99", TCG_TAIL),
    ("vm-bufferbloat-fq_codel", "drops", TCG_FEWER),
    ("vm-fq-flows-plimit", "throughput", TCG_FQ),
    ("vm-htb10-fq_codel-rtt0-cubic8", "throughput", TCG_HTB),
    ("vm-htb10-fq_codel-rtt0-cubic8", "p50", TCG_PING_P50),
    ("vm-htb10-fq_codel-rtt10-bbr2", "throughput", TCG_HTB),
    ("vm-htb10-fq_codel-rtt10-bbr2", "p50", TCG_SLOW_QUEUE),
    ("vm-htb10-fq_codel-rtt10-bbr2", "p99", TCG_TAIL),
    ("vm-htb10-fq_codel-rtt10-bbr2", "drops", TCG_FEWER),
    ("vm-htb10-fq_codel-rtt40-cubic4", "throughput", TCG_HTB),
    ("vm-htb10-fq_codel-rtt40-cubic4", "p99", TCG_TAIL),
    ("vm-htb20-bfifo60000-rtt10-bbr4", "throughput", TCG_HTB),
    ("vm-htb20-bfifo60000-rtt10-bbr4", "p50", TCG_SLOW_QUEUE),
    ("vm-htb20-bfifo60000-rtt10-bbr4", "p99", TCG_TAIL),
    ("vm-htb20-fq-rtt10-cubic2", "throughput", TCG_HTB),
    ("vm-htb20-fq-rtt10-cubic2", "p50", TCG_SLOW_QUEUE),
    ("vm-htb20-fq-rtt10-cubic2", "p99", TCG_TAIL),
    ("vm-htb20-fq-rtt10-cubic2", "retransmits", TCG_RTX),
    ("vm-htb5-pfifo50-rtt40-cubic1", "throughput", TCG_HTB),
    ("vm-htb5-pfifo50-rtt40-cubic1", "p99", TCG_TAIL),
    ("vm-htb5-pfifo50-rtt40-cubic1", "retransmits", TCG_RTX),
    ("vm-htb5-sfq-rtt10-bbr2", "throughput", TCG_HTB),
    ("vm-htb5-sfq-rtt10-bbr2", "p50", TCG_SLOW_QUEUE),
    ("vm-htb5-sfq-rtt10-bbr2", "p99", TCG_TAIL),
    ("vm-tbf10-sfq-rtt40-cubic4", "p99", TCG_TAIL),
    ("vm-tbf10-sfq-rtt40-cubic4", "retransmits", TCG_RTX),
];

// The host rows (6.18 on this machine). The queue column of the table is the evidence
// the first reasons cite.
const SKB_SIZES: &str = "the standing queue is made of the flows' TSO skbs: how many each flow keeps \
     below the stack (TSQ, tcp_small_queue_check: twice the next skb's truesize) and how big they are \
     (tcp_tso_autosize, and tcp_tso_should_defer with 6.18's rule) — the queue column gives both for the \
     kernel and the model, and where they differ the queue delay does too (and, at a queue limited in \
     packets, the drops). Not traced further";
const TBF_CUT: &str = "tbf cuts every skb longer than its burst into MSS segments (tbf_segment): the \
     kernel's cubic skbs are nearly all longer (queue column: ~1.5-2 KB per queued packet, i.e. segments), \
     the model's are often shorter and queue whole (2.4-5.6 KB), so a queue limited in packets fills \
     differently — with 200 packets the kernel never drops, the model does. The skb sizes come from \
     tcp_tso_autosize; not traced further";
const BYTE_LIMIT: &str = "a byte-limited queue (bfifo, tbf's limit) drops each skb that does not fit, \
     whole: the count depends on the skb sizes (queue column: close to the kernel's here) and on how \
     often each flow retries after its local drop (CWR, the probe timer, TLP); the model's counts are \
     off in both directions, and the queue that stands with them too. Not traced further";
const BBR_QUEUE: &str = "bbr in PROBE_BW keeps cwnd at 2 BDP plus its ACK-aggregation allowance \
     (extra_acked) and quantization budget; the standing queue that leaves differs from the kernel's by \
     2-8 ms (both directions across rows): the allowance follows the ACK pattern (GRO, delayed and \
     stretched ACKs on the veth path) that the model reproduces only approximately";
const BBR_STARTUP: &str = "the 1 % largest samples come from STARTUP's queue peak at the start, which \
     the model builds lower than the kernel: its p99 is 18-36 % below the kernel's in these bbr rows";
const BBR_DRAIN: &str = "the cwnd trajectory matches the kernel's (STARTUP to 263 KB, the long drain \
     to 26 KB, srtt 44 ms at the end in both: the fixture's intervals), but the model leaves STARTUP's plateau about \
     0.3 s later (between 3.1 and 3.4 s; the kernel between 2.8 and 3.1 s), and at 5 Mbit/s the p50 falls on that drain slope";
const BBR_TBF: &str = "bbr's 64 KB skbs meet tbf's 32 KB burst: tbf cuts each into segments and drops \
     the ones its 50 ms latency bound refuses; the kernel's count varies 2.5-fold between its runs \
     (1037-2602 drops) and the model's is below that range: fewer of its skbs are long enough to be \
     cut (queue column)";
const IDLE_PING: &str = "an idle path's RTT is CPU time and wake-up latency: the model charges the \
     CPU profile's constants (docs/cpu-model.md; cost.wakeup_latency 43 us, calibrated on 2026-11-25 \
     when this machine's idle ping was 46.5 us) and has no spread; this machine's idle ping varies \
     between runs and days (23, 26 and 40 us p50 here)";
const STALLED: &str = "every 64 KB skb exceeds the 30000-byte bfifo, so flows move only what the probe \
     timer's one-MSS segments carry (throughput and drops agree with the kernel); ping's tail is the \
     kernel's wake-up and timer noise on an almost idle path, which the model does not have";
const TCG_NOT_ALIKE: &str = "TCG: the kernel's htb delivered 72 % of its rate (this row's throughput), \
     so its 8 flows and fq_codel ran a different load from the model's; its ping tail is shorter than \
     the model's, whose 8 flows each keep fq_codel's target delay at the full rate";

const TCG_HTB_DROPS: &str = "TCG: the kernel's htb delivered 72 % of its rate (this row's throughput), so its \
     fq_codel dropped from a different load than the model's full-rate one; the model's count is 18-26 % \
     above (1172 with 896 bytes of truesize per TCP skb head, 1251 with the kernel's 960)";

// What TCG (qemu's CPU emulation: this machine's KVM cannot boot a stock kernel) does
// to the VM fixtures. The kernel's own numbers are the evidence each reason cites.
const TCG_CPU: &str = "TCG: the emulated kernel is CPU-bound at 82.9 Mbit/s behind the 100 Mbit/s shaper \
     (the fixture's warning); the model, whose CPUs are a real machine's, reaches the shaper's 95.6";
const TCG_FQ: &str = "TCG: the kernel's fq releases throttled flows 437 us late on average (fq's `latency` xstat \
     in the fixture), so its 20 Mbit/s maxrate flows run ~5 % slow; the model releases them on time";
const TCG_HTB: &str = "TCG: the kernel's htb class itself sends only 70-90 % of its rate (its `Sent` bytes in the \
     fixture's report) although its queue is rarely empty: its default burst (1600 b, 1.3 ms at 10 Mbit/s) \
     cannot bank the time the emulated hrtimer fires late, so the lost sending time is gone (the tbf row, \
     with a 16 KB burst, reaches 94 %); the model's timers are on time";
const TCG_PING_P50: &str = "TCG: with fq_codel the ping is a sparse flow served almost at once, so its RTT is mostly \
     per-packet CPU time, which emulation multiplies (1.2-1.7 ms against the model's 0.5-0.8 ms)";
const TCG_SLOW_QUEUE: &str = "TCG: the kernel's shaper runs below its rate (see this row's throughput), so the \
     same in-flight data stands longer in its queue; the model's queue drains at the full rate";
const TCG_TAIL: &str = "TCG: ping's tail is the emulator's: vCPU threads descheduled for milliseconds stretch \
     single round trips far beyond any queue (the model has no such stalls)";
const TCG_FEWER: &str = "TCG: the kernel's flows run slower than the shaper (see this row's throughput), so its \
     AQM sees less sojourn time and drops differently from the model at the full rate";
const TCG_RTX: &str = "TCG: a handful of retransmissions with no packet dropped anywhere in the kernel's run \
     (0 drops, lossless wire): emulation stalls fire its tail-loss probe / RTO timers before the ACKs \
     arrive; the model's timers see no such stalls";

/// Every fixture: (its name, the fixture file, the scenario file), in table order.
fn fixtures() -> Vec<(String, PathBuf, PathBuf)> {
    let dir = root().join("crates/qdisc-sim/tests/fixtures");
    let mut v: Vec<_> =
        BUNDLED.iter().map(|(f, s)| (f.trim_end_matches(".json").to_string(), dir.join(f), root().join(s))).collect();
    let mut matrix: Vec<_> = std::fs::read_dir(dir.join("matrix"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    matrix.sort();
    for s in matrix {
        let name = s.file_stem().unwrap().to_str().unwrap().to_string();
        let name = if name.starts_with("vm-") { name } else { format!("host-{name}") };
        v.push((name, s.with_extension("json"), s));
    }
    v
}

/// The compared metrics, in table order: name, column, decimals.
const METRICS: [(&str, &str, usize); 5] = [
    ("throughput", "throughput Mbit/s", 2),
    ("p50", "ping p50 ms", 3),
    ("p99", "ping p99 ms", 3),
    ("drops", "drops", 0),
    ("retransmits", "retransmits", 0),
];

/// What the table compares, for one run, in [`METRICS`] order: total received
/// throughput of the tcp entries; the first ping's p50 and p99 (None: no ping); drops
/// of every root qdisc on the scenario's hosts (not the wires); iperf3's Retr, summed.
fn figures(r: &RunResult) -> [Option<f64>; 5] {
    let st = r.rtt.first().and_then(|p| p.stats.as_ref());
    let drops: u64 =
        r.tc.end
            .iter()
            .filter(|d| !d.host.starts_with("link["))
            .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
            .filter(|q| q["root"].as_bool() == Some(true))
            .map(|q| q["drops"].as_u64().unwrap_or(0))
            .sum();
    let retransmits: u64 = r.throughput.iter().filter_map(|t| t.sender.retransmits).sum();
    [
        Some(r.throughput.iter().map(|t| t.receiver.bits_per_second).sum::<f64>() / 1e6),
        st.map(|s| s.p50),
        st.map(|s| s.p99),
        Some(drops as f64),
        Some(retransmits as f64),
    ]
}

/// Evidence, not a target: the standing queue of the sending host's root qdiscs over
/// the run's second half (the periodic `tc -s` snapshots) — packets (skbs) and their
/// mean size in KB — which shows how the flows' TSO skbs fill a queue.
fn queue(r: &RunResult, host: &str) -> Option<(f64, f64)> {
    let samples: Vec<(u64, u64)> =
        r.tc.periodic
            .iter()
            .filter(|x| x.t >= r.scenario.duration_s / 2.0)
            .map(|x| {
                x.devices
                    .iter()
                    .filter(|d| d.host == host)
                    .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
                    .filter(|q| q["root"].as_bool() == Some(true))
                    .map(|q| (q["qlen"].as_u64().unwrap_or(0), q["backlog"].as_u64().unwrap_or(0)))
                    .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
            })
            .collect();
    let n = samples.len() as f64;
    let (pkts, bytes) = samples.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    (pkts > 0).then(|| (pkts as f64 / n, bytes as f64 / pkts as f64 / 1024.0))
}

/// Whether the simulator's `s` meets the metric's target against the kernel's `k`.
fn meets(metric: &str, s: f64, k: f64) -> bool {
    let within = |tol: f64| if k == 0.0 { s == 0.0 } else { (s / k - 1.0).abs() <= tol + 1e-9 };
    match metric {
        "throughput" => within(0.03),
        "p50" => within(0.10),
        "p99" => within(0.15),
        "drops" => within(0.25),
        // Of the same order: both zero, or within a factor of ten.
        _ => (k == 0.0 && s == 0.0) || (k > 0.0 && s > 0.0 && (s / k).log10().abs() <= 1.0),
    }
}

fn pct(s: f64, k: f64) -> String {
    match (k == 0.0, s == 0.0) {
        (true, true) => "=".into(),
        (true, false) => "new".into(),
        _ => format!("{:+.0} %", (s / k - 1.0) * 100.0),
    }
}

#[test]
fn the_simulator_against_every_kernel_fixture() {
    let mut table = String::new();
    let mut notes: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    // Inside the target; outside it but inside the kernel's own spread; explained.
    let (mut inside, mut spread, mut total) = (0, 0, 0);
    let cols: Vec<&str> = METRICS.iter().map(|m| m.1).collect();
    writeln!(
        table,
        "| fixture | kernel | runs | {} | queue: skbs × KB |\n|---|---|---|{}---|",
        cols.join(" | "),
        "---|".repeat(cols.len())
    )
    .unwrap();
    for (name, fixture, scenario) in fixtures() {
        let runs = kernel_runs(&fixture);
        let s = Scenario::load(&scenario).unwrap();
        for r in &runs {
            assert_eq!(
                s.sha256,
                r.scenario.sha256,
                "{} changed since {name} was recorded: record it again (scripts/record-fixtures.sh)",
                scenario.display()
            );
        }
        let (sim_run, _) =
            simulate_kernel(&s, modelled_kernel(&runs[0]), &RunOptions::default(), &mut NoProgress).unwrap();
        let sim = figures(&sim_run);
        let kernel: Vec<[Option<f64>; 5]> = runs.iter().map(figures).collect();
        let meta = &runs[0].metadata;
        let kname = match meta.backend.as_str() {
            "vm" => format!("{} (TCG)", meta.kernel.split('+').next().unwrap_or("")),
            _ => meta.kernel.split('-').next().unwrap_or("").to_string(),
        };
        write!(table, "| {name} | {kname} | {} |", runs.len()).unwrap();
        for (i, (metric, _, dec)) in METRICS.iter().enumerate() {
            let mut ks: Vec<f64> = kernel.iter().filter_map(|f| f[i]).collect();
            let Some(m) = sim[i].filter(|_| !ks.is_empty()) else {
                table.push_str(" — |");
                continue;
            };
            total += 1;
            let (lo, hi) = (ks.iter().copied().fold(f64::MAX, f64::min), ks.iter().copied().fold(f64::MIN, f64::max));
            let k = median(&mut ks);
            let range = if ks.len() > 1 { format!(" ({lo:.dec$}–{hi:.dec$})") } else { String::new() };
            let mut cell = format!("{k:.dec$}{range} / {m:.dec$} ({})", pct(m, k));
            let why = WHY.iter().find(|w| w.0 == name && w.1 == *metric);
            if meets(metric, m, k) {
                inside += 1;
                if why.is_some() {
                    problems.push(format!("{name}: {metric} meets its target now ({cell}): remove its reason"));
                }
            } else if ks.len() > 1 && (lo..=hi).contains(&m) {
                spread += 1;
                cell.push_str(" ≈");
                if why.is_some() {
                    problems
                        .push(format!("{name}: {metric} is inside the kernel's spread ({cell}): remove its reason"));
                }
            } else if let Some(w) = why {
                notes.push(format!("{}. {name}, {metric}: {}", notes.len() + 1, w.2));
                write!(cell, " ✗[{}]", notes.len()).unwrap();
            } else {
                cell.push_str(" ✗");
                problems.push(format!("{name}: {metric}: {cell} misses the target, unexplained"));
            }
            write!(table, " {cell} |").unwrap();
        }
        let sender = &s.traffic[0].from;
        let q = |r: Option<(f64, f64)>| r.map_or("—".to_string(), |(n, kb)| format!("{n:.1} × {kb:.1}"));
        write!(table, " {} / {} |", q(queue(&runs[0], sender)), q(queue(&sim_run, sender))).unwrap();
        table.push('\n');
    }
    for w in WHY {
        if !fixtures().iter().any(|f| f.0 == w.0) {
            problems.push(format!("a reason names no fixture: {}", w.0));
        }
    }
    let generated = format!(
        "Each cell is the kernel's median over its runs (with their range when there are several) / the \
         simulator (difference). The last column is evidence, not a target: the sending host's root queue \
         over the run's second half, mean packets (skbs) × their mean size in KB, kernel (first run) / \
         simulator. Of {total} comparisons, {inside} are inside their target, {spread} (≈) miss \
         it but fall inside the range of the kernel's own runs, and {} (✗) are outside both, each with its \
         reason below.\n\n{table}\n{}\n",
        total - inside - spread,
        notes.join("\n")
    );
    problems.extend(page_is_true("docs/vs-kernel.md", "vs_kernel.rs", &generated));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The client's qdisc of `kind` on `dev` at the end of a run, as `tc -s -j` gives it.
fn client_qdisc(sim: &RunResult, dev: &str, kind: &str) -> serde_json::Value {
    sim.tc
        .end
        .iter()
        .filter(|d| d.host == "client" && d.dev == dev)
        .flat_map(|d| d.qdisc.as_array().cloned().unwrap_or_default())
        .find(|q| q["kind"] == kind)
        .unwrap()
}

#[test]
fn ifb_download_shaping_in_detail() {
    // The simulator's own figures on the ifb scenario beyond the table: every received
    // packet met eth0's ingress filter and went through ifb0's htb.
    let s = Scenario::load(root().join("scenarios/ifb-download-htb.toml")).unwrap();
    // Its fixture ran on this machine's 6.18.
    let (sim, _) = simulate_kernel(&s, KernelVersion(6, 18), &RunOptions::default(), &mut NoProgress).unwrap();
    let q = |dev: &str, kind: &str| client_qdisc(&sim, dev, kind);
    let (ingress, htb) = (q("eth0", "ingress"), q("ifb0", "htb"));
    assert_eq!(ingress["packets"].as_u64(), Some(18178));
    assert_eq!((htb["packets"].as_u64(), htb["drops"].as_u64()), (Some(17455), Some(94)));
}

#[test]
fn ifb_download_shaping_with_cake() {
    // cake on ifb0 cuts the GSO skbs the veth hands it (split-gso): every piece goes
    // back up eth0 (none is the ifb's tx_dropped), and what eth0's ingress redirected
    // is what cake sent, dropped or still holds.
    let s = Scenario::load(root().join("scenarios/ifb-download-cake.toml")).unwrap();
    let (sim, _) = simulate_kernel(&s, KernelVersion(6, 12), &RunOptions::default(), &mut NoProgress).unwrap();
    let q = |dev: &str, kind: &str| client_qdisc(&sim, dev, kind);
    let (ingress, cake) = (q("eth0", "ingress"), q("ifb0", "cake"));
    let n = |q: &serde_json::Value, k: &str| q[k].as_u64().unwrap();
    assert!(sim.cpu.iter().all(|c| c.net.tx_dropped.is_empty()), "{:?}", sim.cpu);
    // Both count segments (bstats count gso_segs).
    assert_eq!(n(&cake, "packets") + n(&cake, "drops") + n(&cake, "qlen"), n(&ingress, "packets"));
    assert_eq!((n(&ingress, "packets"), n(&cake, "packets"), n(&cake, "drops")), (17472, 16499, 959));
}
