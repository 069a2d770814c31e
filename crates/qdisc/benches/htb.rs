//! htb at scale (issue 4): building a 10,000-class tree from a `tc -batch`, and
//! enqueue + dequeue per packet with 10 / 1,000 / 10,000 leaf classes under one
//! root class, each leaf an fq_codel, traffic spread over all leaves.
//! `cargo bench -p qdisc --bench htb` — targets: build ≤ 1 s, ≤ 150 ns/packet at 10,000.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use qdisc::tc::{Tc, TcOpts};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Instant, Packet};

/// `n` leaves 1:2 … under root class 1:1, each with the given leaf qdisc (None = the
/// default pfifo).
fn batch(n: u32, leaf: Option<&str>) -> String {
    let mut b = String::from(
        "qdisc add dev eth0 root handle 1: htb default 2\nclass add dev eth0 parent 1: classid 1:1 htb rate 100gbit\n",
    );
    for i in 0..n {
        let m = i + 2;
        b.push_str(&format!("class add dev eth0 parent 1:1 classid 1:{m:x} htb rate 1mbit ceil 10gbit\n"));
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
    let mut g = c.benchmark_group("htb build from batch");
    g.sample_size(10);
    for (name, leaf) in [("10000 classes", None), ("10000 classes + fq_codel leaves", Some("fq_codel"))] {
        let text = batch(10_000, leaf);
        g.bench_function(name, |b| b.iter_batched(|| (), |_| black_box(build(&text)), BatchSize::PerIteration));
    }
    g.finish();
}

fn bench_datapath(c: &mut Criterion) {
    let mut g = c.benchmark_group("htb enqueue+dequeue");
    g.throughput(Throughput::Elements(1));
    for n in [10u32, 1_000, 10_000] {
        let mut tc = build(&batch(n, Some("fq_codel")));
        let d = &mut tc.devices[0];
        // A standing queue of two packets per leaf; 1000-byte packets every 100 ns
        // (80 Gbit/s offered, under the root's 100 Gbit/s, above every leaf's rate:
        // the leaves borrow).
        let mut now = 0u64;
        let mut id = 0u64;
        for _ in 0..2 {
            for m in 0..n {
                d.enqueue(Packet::new(id, 1000).with_priority(0x1_0000 | (m + 2)), Instant(now));
                id += 1;
            }
        }
        g.bench_function(format!("{n} leaves"), |b| {
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
