//! Criterion benchmarks of the accounting engine against the budgets of the speed issue.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use peakplan_core::plan::{Method, Plan};
use peakplan_core::{estimate, preset_arch, solve};

fn bench(c: &mut Criterion) {
    let plan =
        Plan::parse_query("model=llama-2-70b&method=qlora&r=64&targets=all-linear&b=1&s=4096").plan;
    let arch = preset_arch(&plan);
    c.bench_function("estimate 70B QLoRA", |b| {
        b.iter(|| estimate(black_box(arch), black_box(&plan)))
    });
    c.bench_function("sweep 256 seq x 3 methods", |b| {
        b.iter(|| {
            let mut p = plan.clone();
            let mut acc = 0u64;
            for m in [Method::Full, Method::Lora, Method::Qlora] {
                p.method = m;
                for i in 1..=256u64 {
                    p.seq_len = i * 128;
                    acc = acc.wrapping_add(estimate(arch, &p).peak_allocated_bytes);
                }
            }
            acc
        })
    });
    let cap = 80u64 << 30;
    c.bench_function("max batch", |b| {
        b.iter(|| solve::max_batch(arch, black_box(&plan), cap))
    });
    c.bench_function("max seq", |b| {
        b.iter(|| solve::max_seq(arch, black_box(&plan), cap))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
