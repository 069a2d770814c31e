//! hfsc at scale (issue 15): building a 10,000-class tree from a `tc -batch`, and
//! enqueue + dequeue per packet with 10 / 1,000 / 10,000 leaf classes under one
//! inner class, each leaf `sc m2 1mbit` (real-time and link-sharing), traffic spread
//! over all leaves; the 10,000 case also with fq_codel leaves, as the htb bench has.
//! `cargo bench -p qdisc --bench hfsc` — target: ≤ 150 ns/packet at 10,000.

mod leaves;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use leaves::{batch, build, datapath};

/// The tree: leaves `sc m2 1mbit` (real-time and link-sharing) under one inner class.
const ROOT: &str = "hfsc default 2";
const INNER: &str = "hfsc ls m2 32gbit";
const CLASS: &str = "hfsc sc m2 1mbit";

fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("hfsc build from batch");
    g.sample_size(10);
    let text = batch(ROOT, INNER, CLASS, 10_000, None);
    g.bench_function("10000 classes", |b| b.iter_batched(|| (), |_| black_box(build(&text)), BatchSize::PerIteration));
    g.finish();
}

fn bench_datapath(c: &mut Criterion) {
    let mut g = c.benchmark_group("hfsc enqueue+dequeue");
    g.throughput(Throughput::Elements(1));
    // Each leaf's real-time curve makes it eligible now and then; link sharing sends
    // the rest.
    for (n, leaf) in [(10u32, None), (1_000, None), (10_000, None), (10_000, Some("fq_codel"))] {
        let name = format!("{n} leaves{}", leaf.map_or(String::new(), |l| format!(" + {l}")));
        datapath(&mut g, name, &batch(ROOT, INNER, CLASS, n, leaf), n);
    }
    g.finish();
}

criterion_group!(benches, bench_build, bench_datapath);
criterion_main!(benches);
