//! htb at scale (issue 4): building a 10,000-class tree from a `tc -batch`, and
//! enqueue + dequeue per packet with 10 / 1,000 / 10,000 leaf classes under one
//! root class, each leaf an fq_codel, traffic spread over all leaves.
//! `cargo bench -p qdisc --bench htb` — targets: build ≤ 1 s, ≤ 150 ns/packet at 10,000.

mod leaves;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use leaves::{batch, build, datapath};

/// The tree: leaves of 1 Mbit/s, ceil 10 Gbit/s, under a 100 Gbit/s root class.
const ROOT: &str = "htb default 2";
const INNER: &str = "htb rate 100gbit";
const CLASS: &str = "htb rate 1mbit ceil 10gbit";

fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("htb build from batch");
    g.sample_size(10);
    for (name, leaf) in [("10000 classes", None), ("10000 classes + fq_codel leaves", Some("fq_codel"))] {
        let text = batch(ROOT, INNER, CLASS, 10_000, leaf);
        g.bench_function(name, |b| b.iter_batched(|| (), |_| black_box(build(&text)), BatchSize::PerIteration));
    }
    g.finish();
}

fn bench_datapath(c: &mut Criterion) {
    let mut g = c.benchmark_group("htb enqueue+dequeue");
    g.throughput(Throughput::Elements(1));
    // 80 Gbit/s offered, under the root's 100 Gbit/s, above every leaf's rate: the
    // leaves borrow.
    for n in [10u32, 1_000, 10_000] {
        datapath(&mut g, format!("{n} leaves"), &batch(ROOT, INNER, CLASS, n, Some("fq_codel")), n);
    }
    g.finish();
}

criterion_group!(benches, bench_build, bench_datapath);
criterion_main!(benches);
