//! Filter chains (issue 14): `Block::classify` — the kernel's `tcf_classify` — on a
//! prio qdisc's block holding 1,000 filters, every packet matching only the last one:
//!
//! * `u32 1000 rules`: one u32 proto, 1,000 key nodes in its root table (a linear
//!   walk over the key nodes);
//! * `flower 1000 rules`: one flower proto, 1,000 filters;
//! * `fw 1000 prefs`: 1,000 fw protos of one filter each (a walk over the protos:
//!   the per-proto dispatch);
//! * `goto chain 1, u32 1000 rules`: a matchall in chain 0 whose action jumps to
//!   chain 1, which holds the 1,000 u32 rules (the chain walk of `tcf_classify`);
//!
//! plus building 2,000 fw filters in one proto from a `tc -batch` (each filter change
//! updates the classes its filters bind).
//! `cargo bench -p qdisc --bench classify`.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use qdisc::tc::{Tc, TcOpts};
use qdisc::tree::DevSpec;
use qdisc::{FlowKey, Instant, Packet};

const N: u32 = 1_000;

fn build(text: &str) -> Tc {
    let mut tc = Tc::new(&[DevSpec::new("eth0")]);
    let out = tc.batch(text, "bench", TcOpts::default(), false);
    assert_eq!(out.code, 0, "batch failed: {}", out.stderr);
    tc
}

/// `10.0.(i >> 8).(i & 255)`.
fn addr(i: u32) -> [u8; 4] {
    [10, 0, (i >> 8) as u8, i as u8]
}

fn mapped(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xff;
    m[11] = 0xff;
    m[12..].copy_from_slice(&a);
    m
}

fn chains() -> Vec<(&'static str, String, Packet)> {
    let head = "qdisc add dev eth0 root handle 1: prio\n";
    let last = addr(N - 1);
    let flow = FlowKey { src: mapped([1, 2, 3, 4]), dst: mapped(last), sport: 999, dport: 80, proto: 6 };
    let pkt = Packet::new(1, 1000).with_flow(flow);
    let mut u32s = String::from(head);
    let mut flowers = String::from(head);
    let mut fws = String::from(head);
    for i in 0..N {
        let [a, b, c, d] = addr(i);
        u32s.push_str(&format!(
            "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst {a}.{b}.{c}.{d}/32 flowid 1:2\n"
        ));
        flowers.push_str(&format!(
            "filter add dev eth0 parent 1: protocol ip prio 1 flower dst_ip {a}.{b}.{c}.{d} classid 1:2\n"
        ));
        fws.push_str(&format!(
            "filter add dev eth0 parent 1: protocol ip prio {} handle {} fw classid 1:2\n",
            i + 1,
            i + 1
        ));
    }
    let mut goto = String::from(head);
    goto.push_str("filter add dev eth0 parent 1: protocol all prio 1 matchall action goto chain 1\n");
    goto.push_str(&u32s[head.len()..].replace("prio 1 u32", "chain 1 prio 1 u32"));
    let mut marked = Packet::new(1, 1000).with_flow(flow);
    marked.mark = N;
    vec![
        ("u32 1000 rules", u32s, pkt.clone()),
        ("flower 1000 rules", flowers, pkt.clone()),
        ("fw 1000 prefs", fws, marked),
        ("goto chain 1, u32 1000 rules", goto, pkt),
    ]
}

fn bench_classify(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    g.throughput(Throughput::Elements(1));
    for (name, text, mut pkt) in chains() {
        let tc = build(&text);
        let block = tc.devices[0].root.q.as_classful().unwrap().block(0).unwrap();
        assert!(block.classify(&mut pkt.clone(), Instant(0)).is_some(), "{name}: the last filter must match");
        g.bench_function(name, |b| b.iter(|| black_box(block.classify(black_box(&mut pkt), Instant(0)))));
    }
    g.finish();
}

fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify build from batch");
    g.sample_size(10);
    let mut text = String::from("qdisc add dev eth0 root handle 1: htb\n");
    text.push_str("class add dev eth0 parent 1: classid 1:2 htb rate 1gbit\n");
    for i in 0..2 * N {
        text.push_str(&format!("filter add dev eth0 parent 1: protocol ip prio 1 handle {} fw classid 1:2\n", i + 1));
    }
    g.bench_function("fw 2000 filters", |b| {
        b.iter_batched(|| (), |_| black_box(build(&text)), BatchSize::PerIteration)
    });
    g.finish();
}

criterion_group!(benches, bench_classify, bench_build);
criterion_main!(benches);
