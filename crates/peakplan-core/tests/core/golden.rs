//! Golden breakdowns: whole estimates pinned so that a change in the engine shows up as a reviewed diff.

use peakplan_core::Kind;

use crate::util::est;

fn check(q: &str, expect: &str) {
    let e = est(q);
    let got = format!(
        "params {} trainable {} | {} | peak {:?} alloc {} reserved {} device {}",
        e.total_params,
        e.trainable_params,
        Kind::ALL
            .iter()
            .filter(|k| e.component(**k) > 0)
            .map(|k| format!("{}={}", k.key(), e.component(*k)))
            .collect::<Vec<_>>()
            .join(" "),
        e.peak_phase,
        e.peak_allocated_bytes,
        e.peak_reserved_bytes,
        e.device_bytes
    );
    assert_eq!(got, expect.trim(), "\n{q}\n got: {got}");
}

/// The pinned plans and their breakdowns.
pub(crate) const GOLDEN: &[(&str, &str)] = &[
    (
        "model=llama-2-7b&method=full&prec=amp_bf16&b=1&s=512&gc=0&opt=adamw_torch_fused",
        "params 6738415616 trainable 6738415616 | base_weights=13476831232 gradients=13476831232 optimizer_states=53907324928 master_weights=26953662464 saved_activations=3751938048 logits=196608000 backward_work=50593792 allocator_slack=4114284544 cuda_context=536870912 | peak Backward alloc 107865243648 reserved 111979528192 device 112516399104",
    ),
    (
        "model=llama-2-70b&method=qlora&r=64&b=1&s=4096&gc=1&opt=paged_adamw_8bit&gpu=a100-80gb",
        "params 68976648192 trainable 828375040 | base_weights=35276734464 quant_constants=1086261440 adapter_weights=3313500160 gradients=3313500160 saved_activations=134234112 checkpoints=5368709120 logits=1572864000 backward_work=2743369728 dequant_buffer=469762048 allocator_slack=2205415232 cuda_context=536870912 paged_states=1659985920 | peak Backward alloc 48392571072 reserved 50597986304 device 52794843136",
    ),
    (
        "model=llama-2-7b&method=lora&r=8&targets=q,v&b=1&s=512&gc=0",
        "params 6738415616 trainable 4194304 | base_weights=13476831232 adapter_weights=16777216 gradients=16777216 optimizer_states=33554432 saved_activations=2435317760 logits=196608000 backward_work=42205184 optimizer_temps=16777216 allocator_slack=280485888 cuda_context=536870912 | peak Backward alloc 16159088640 reserved 16439574528 device 16976445440",
    ),
];

#[test]
fn golden_breakdowns() {
    for (q, expect) in GOLDEN {
        check(q, expect);
    }
}
