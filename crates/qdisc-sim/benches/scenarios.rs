//! Wall time of whole simulated scenarios (the bundled bench-*.toml), with the events
//! and packets each run handles printed once so events/s and packets/s follow:
//!
//!   cargo bench -p qdisc-sim --bench scenarios
//!
//! The 1 Gbit/s dumbbell and the 100 Gbit/s fq flow take seconds per run; they run
//! with criterion's minimum of 10 samples (select one with a filter, e.g. `-- 100m`).
//! `seed-001-mq`/`-pfifo` are the 48-core router of seed 001 at 20 Mpps offered, 0.2 s
//! of virtual time each (×5 for the wall time of one virtual second).

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use qdisc_scenario::backend::{NoProgress, RunOptions};
use qdisc_scenario::Scenario;
use qdisc_sim::simulate;

fn scenarios(c: &mut Criterion) {
    let mut g = c.benchmark_group("scenario");
    g.sample_size(10);
    for name in [
        "bench-dumbbell-100m",
        "bench-dumbbell-1g",
        "bench-100g-fq",
        "seed-001-mq",
        "seed-001-pfifo",
        "seed-002-defer",
        "seed-000",
        "seed-004-time",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../scenarios/{name}.toml"));
        let s = Scenario::load(&path).unwrap();
        let opts = RunOptions::default();
        let (_, st) = simulate(&s, &opts, &mut NoProgress).unwrap();
        eprintln!("{name}: {} events, {} packets through transmit paths per run", st.events, st.packets);
        g.bench_function(name, |b| b.iter(|| simulate(&s, &opts, &mut NoProgress).unwrap()));
    }
    g.finish();
}

criterion_group!(benches, scenarios);
criterion_main!(benches);
