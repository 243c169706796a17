//! Criterion benchmarks of the accounting engine against the budgets of the speed issue (the engine's pipeline
//! ≤ 5 µs, a 256 x 3 sweep ≤ 1 ms), and the figures that replay the step through the caching-allocator simulator:
//! one estimate, each inverse question, the GPU table (every bundled GPU's verdict, largest batch, longest
//! sequence and GPU count), and a varying plan's estimates over the sequence slider's track. The replay made the inverse questions' old 50 µs budget moot; the page runs them once
//! the plan settles.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use peakplan_core::workloads::{
    gpu_table, plan_70b_qlora, plan_varying, slider_track, sweep_256x3, INVERSE_CAPACITY_BYTES,
};
use peakplan_core::{estimate, estimate_rough, preset_arch, solve};

fn bench(c: &mut Criterion) {
    let plan = plan_70b_qlora();
    let arch = preset_arch(&plan);
    c.bench_function("estimate 70B QLoRA", |b| {
        b.iter(|| estimate_rough(black_box(arch), black_box(&plan)))
    });
    c.bench_function("estimate 70B QLoRA, replayed", |b| {
        b.iter(|| estimate(black_box(arch), black_box(&plan)))
    });
    c.bench_function("sweep 256 seq x 3 methods", |b| {
        b.iter(|| sweep_256x3(black_box(&plan)))
    });
    c.bench_function("max batch", |b| {
        b.iter(|| solve::max_batch(arch, black_box(&plan), INVERSE_CAPACITY_BYTES))
    });
    c.bench_function("max seq", |b| {
        b.iter(|| solve::max_seq(arch, black_box(&plan), INVERSE_CAPACITY_BYTES))
    });
    c.bench_function("gpu table", |b| b.iter(|| gpu_table(black_box(&plan))));
    let varying = plan_varying();
    c.bench_function("slider track, varying lengths", |b| {
        b.iter(|| slider_track(black_box(&varying)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
