//! What the htb and hfsc benches share: `n` leaf classes 1:2 … under class 1:1, built
//! from a `tc -batch`, and the enqueue + dequeue loop that spreads traffic over them.

use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup};
use qdisc::tc::{Tc, TcOpts};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Instant, Packet};

/// The batch: `qdisc … root handle 1: {root}`, `class … classid 1:1 {inner}`, then `n`
/// leaves `class … parent 1:1 classid 1:M {class}`, each with the given leaf qdisc
/// (None = the default pfifo).
pub fn batch(root: &str, inner: &str, class: &str, n: u32, leaf: Option<&str>) -> String {
    let mut b = format!("qdisc add dev eth0 root handle 1: {root}\nclass add dev eth0 parent 1: classid 1:1 {inner}\n");
    for i in 0..n {
        let m = i + 2;
        b.push_str(&format!("class add dev eth0 parent 1:1 classid 1:{m:x} {class}\n"));
        if let Some(l) = leaf {
            b.push_str(&format!("qdisc add dev eth0 parent 1:{m:x} handle {m:x}: {l}\n"));
        }
    }
    b
}

pub fn build(text: &str) -> Tc {
    let mut tc = Tc::new(&[DevSpec::new("eth0")]);
    let out = tc.batch(text, "bench", TcOpts::default(), false);
    assert_eq!(out.code, 0, "batch failed: {}", out.stderr);
    tc
}

/// Enqueue + dequeue on the tree of `text` with `n` leaves: a standing queue of two
/// packets per leaf, then 1000-byte packets every 100 ns (80 Gbit/s offered), each to
/// the next leaf (`skb->priority` naming it), one dequeue per packet.
pub fn datapath(g: &mut BenchmarkGroup<WallTime>, name: String, text: &str, n: u32) {
    let mut tc = build(text);
    let d = &mut tc.devices[0];
    let mut now = 0u64;
    let mut id = 0u64;
    for _ in 0..2 {
        for m in 0..n {
            d.enqueue(Packet::new(id, 1000).with_priority(0x1_0000 | (m + 2)), Instant(now));
            id += 1;
        }
    }
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
