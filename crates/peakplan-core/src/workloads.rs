//! The benchmark workloads of the speed budgets, shared by the native criterion benches and the in-browser run.

use crate::engine::estimate_rough;
use crate::plan::{Method, Plan};
use crate::{preset_arch, solve};

/// The 70B QLoRA plan whose single estimate has a 5 µs budget.
pub fn plan_70b_qlora() -> Plan {
    Plan::parse_query("model=llama-2-70b&method=qlora&r=64&targets=all-linear&b=1&s=4096").plan
}

/// Allocated memory against 256 sequence lengths for each of the three methods (the engine's pipeline without
/// the allocator replay); returns a checksum so nothing is optimized away.
pub fn sweep_256x3(plan: &Plan) -> u64 {
    let arch = preset_arch(plan);
    let mut p = plan.clone();
    let mut acc = 0u64;
    for m in [Method::Full, Method::Lora, Method::Qlora] {
        p.method = m;
        for i in 1..=256u64 {
            p.seq_len = i * 128;
            acc = acc.wrapping_add(estimate_rough(arch, &p).peak_allocated_bytes);
        }
    }
    acc
}

/// The plan whose batches vary in length that the page's slider budget is measured on (#45): Llama 3.1 8B LoRA,
/// grouped by length around 300 ± 200 tokens, on an RTX 4090.
pub fn plan_varying() -> Plan {
    Plan::parse_query(
        "model=llama-3.1-8b&method=lora&b=4&s=2048&lens=grouped&lmean=300&lsd=200&gc=1&gpu=rtx-4090",
    )
    .plan
}

/// What a drag of the sequence slider over its whole track estimates: the plan at each of the slider's eleven
/// lengths (128 to 131,072 tokens), its own method only, as a move does; returns a checksum.
pub fn slider_track(plan: &Plan) -> u64 {
    let arch = preset_arch(plan);
    let mut p = plan.clone();
    (7..=17)
        .map(|power| {
            p.seq_len = 1 << power;
            crate::estimate(arch, &p).peak_reserved_bytes
        })
        .fold(0, u64::wrapping_add)
}

/// Capacity used by the inverse-question benchmarks: an 80 GiB card.
pub const INVERSE_CAPACITY_BYTES: u64 = 80 << 30;

/// Both inverse questions on the plan.
pub fn inverse(plan: &Plan) -> (Option<u64>, Option<u64>) {
    let arch = preset_arch(plan);
    (
        solve::max_batch(arch, plan, INVERSE_CAPACITY_BYTES),
        solve::max_seq(arch, plan, INVERSE_CAPACITY_BYTES),
    )
}

/// The page's "On other GPUs" table for the plan; returns a checksum.
pub fn gpu_table(plan: &Plan) -> u64 {
    crate::gpu_choice::gpu_fits(preset_arch(plan), plan)
        .iter()
        .map(|r| r.max_seq.unwrap_or(0) + r.gpus_needed.unwrap_or(0))
        .sum()
}
