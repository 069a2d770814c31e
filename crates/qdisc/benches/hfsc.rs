//! hfsc at scale (issue 15): building a 10,000-class tree from a `tc -batch`, and
//! enqueue + dequeue per packet with 10 / 1,000 / 10,000 leaf classes under one
//! inner class, each leaf `sc m2 1mbit` (real-time and link-sharing), traffic spread
//! over all leaves; the 10,000 case also with fq_codel leaves, as the htb bench has.
//! `cargo bench -p qdisc --bench hfsc` — target: ≤ 150 ns/packet at 10,000.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use qdisc::tc::{Tc, TcOpts};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Instant, Packet};

/// `n` leaves 1:2 … under class 1:1, each with the given leaf qdisc (None = the
/// default pfifo).
fn batch(n: u32, leaf: Option<&str>) -> String {
    let mut b = String::from(
        "qdisc add dev eth0 root handle 1: hfsc default 2\nclass add dev eth0 parent 1: classid 1:1 hfsc ls m2 32gbit\n",
    );
    for i in 0..n {
        let m = i + 2;
        b.push_str(&format!("class add dev eth0 parent 1:1 classid 1:{m:x} hfsc sc m2 1mbit\n"));
        if let Some(l) = leaf {
            b.push_str(&format!("qdisc add dev eth0 parent 1:{m:x} handle {m:x}: {l}\n"));
        }
    }
    b
}

fn build(text: &str) -> Tc {
    let mut tc = Tc::new(&[DevSpec::new("eth0")]);
    let out = tc.batch(text, "bench", TcOpts::default(), false);
    assert_eq!(out.code, 0, "batch failed: {}", out.stderr);
    tc
}

fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("hfsc build from batch");
    g.sample_size(10);
    let text = batch(10_000, None);
    g.bench_function("10000 classes", |b| b.iter_batched(|| (), |_| black_box(build(&text)), BatchSize::PerIteration));
    g.finish();
}

fn bench_datapath(c: &mut Criterion) {
    let mut g = c.benchmark_group("hfsc enqueue+dequeue");
    g.throughput(Throughput::Elements(1));
    for (n, leaf) in [(10u32, None), (1_000, None), (10_000, None), (10_000, Some("fq_codel"))] {
        let mut tc = build(&batch(n, leaf));
        let d = &mut tc.devices[0];
        // A standing queue of two packets per leaf; 1000-byte packets every 100 ns
        // (80 Gbit/s offered): each leaf's real-time curve makes it eligible now and
        // then, link sharing sends the rest.
        let mut now = 0u64;
        let mut id = 0u64;
        for _ in 0..2 {
            for m in 0..n {
                d.enqueue(Packet::new(id, 1000).with_priority(0x1_0000 | (m + 2)), Instant(now));
                id += 1;
            }
        }
        let name = format!("{n} leaves{}", leaf.map_or(String::new(), |l| format!(" + {l}")));
        g.bench_function(name, |b| {
            b.iter(|| {
                let m = (id % n as u64) as u32 + 2;
                d.enqueue(Packet::new(id, 1000).with_priority(0x1_0000 | m), Instant(now));
                id += 1;
                now += 100;
                match d.dequeue(Instant(now)) {
                    Dequeued::Packet(p) => {
                        black_box(p);
                    }
                    Dequeued::Throttled { until } => now = until.0,
                    Dequeued::Empty => {}
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_build, bench_datapath);
criterion_main!(benches);
