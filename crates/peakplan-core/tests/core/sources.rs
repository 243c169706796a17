//! Figures the planner must reproduce from its written sources: the PEFT memory guide and the bytes per parameter.

use peakplan_core::{estimate, Category, Estimate, Kind};

use crate::util::{est, model_with_params, plan, GIB};

// ---- Source 1: the PEFT memory guide.

#[test]
fn one_billion_fp16_params_take_1_863_gib() {
    // 1e9 params x 2 bytes = 1.863 GiB. Build a model of exactly 1e9 parameters: pure fp16 LoRA-free base.
    // Weight bytes of a full fp16 plan are params x 2, whatever the shape.
    let p = plan("method=full&prec=fp16&opt=adamw_torch");
    let a = model_with_params(1, 4096, 11008, 32000);
    let e = estimate(&a, &p);
    let per_param = e.component(Kind::BaseWeights) as f64 / e.total_params as f64;
    assert_eq!(per_param, 2.0);
    assert_eq!(format!("{:.3}", 1e9 * per_param / GIB), "1.863");
    // Gradients (1x) and Adam's two states (2x) in the param dtype: 3 x 1.863 = 5.59 GiB for 1B params.
    let rest = (e.component(Kind::Gradients) + e.component(Kind::OptimizerStates)) as f64
        / e.total_params as f64;
    assert_eq!(rest, 6.0);
    assert_eq!(format!("{:.2}", 1e9 * rest / GIB), "5.59");
}

// ---- Source 2: 16 bytes per parameter.

#[test]
fn mixed_precision_adam_costs_16_bytes_per_param() {
    let e = est("model=llama-2-7b&method=full&prec=amp_fp16&opt=adamw_torch");
    let p = e.total_params;
    assert_eq!(p, 6_738_415_616);
    assert_eq!(e.category(Category::Weights), 2 * p);
    assert_eq!(e.category(Category::Gradients), 2 * p);
    assert_eq!(e.category(Category::Optimizer), 12 * p);
    // For a 7e9 model: 112 GB in all, 84 GB optimizer, 14 GB weights.
    let per = |c| e.category(c) as f64 / p as f64 * 7e9 / 1e9;
    assert_eq!(
        per(Category::Weights) + per(Category::Gradients) + per(Category::Optimizer),
        112.0
    );
    assert_eq!(per(Category::Optimizer), 84.0);
    assert_eq!(per(Category::Weights), 14.0);
}

#[test]
fn lora_worked_example_counts_4_194_304_trainable() {
    let e = est("model=llama-2-7b&method=lora&r=8&targets=q,v");
    assert_eq!(e.trainable_params, 4_194_304);
    // Each adapter: 8 x (4096 + 4096) = 65,536; about 0.06% of the model.
    assert_eq!(e.trainable_params / (32 * 2), 65_536);
    assert_eq!(
        format!(
            "{:.2}",
            e.trainable_params as f64 / e.total_params as f64 * 100.0
        ),
        "0.06"
    );
    // all-linear at rank 8 is PEFT's familiar 19,988,480.
    assert_eq!(
        est("model=llama-2-7b&method=lora&r=8&targets=all-linear").trainable_params,
        19_988_480
    );
}

#[test]
fn double_quantization_bits_per_parameter() {
    let a = est("model=llama-2-7b&method=qlora&r=8&targets=q,v&quant=nf4&dq=0");
    let b = est("model=llama-2-7b&method=qlora&r=8&targets=q,v&quant=nf4&dq=1");
    let quantized = 32.0 * 202_375_168.0;
    let bits = |e: &Estimate| e.component(Kind::QuantConstants) as f64 * 8.0 / quantized;
    assert!((bits(&a) - 0.5).abs() < 1e-3, "{}", bits(&a));
    assert!((bits(&b) - 0.127).abs() < 1e-3, "{}", bits(&b));
    // 4.5 and 4.127 bits per quantized parameter in all.
    let packed_bits = |e: &Estimate| {
        let non_quantized = (e.total_params as f64 - quantized) * 2.0;
        (e.component(Kind::BaseWeights) as f64 - non_quantized) * 8.0 / quantized
    };
    assert!((packed_bits(&a) + bits(&a) - 4.5).abs() < 1e-3);
    assert!((packed_bits(&b) + bits(&b) - 4.127).abs() < 1e-3);
    // QLoRA keeps the base near 3.5 GB for 7B.
    let base_gb = (b.component(Kind::BaseWeights) + b.component(Kind::QuantConstants)) as f64 / 1e9;
    assert!((3.5..4.0).contains(&base_gb), "{base_gb}");
}

#[test]
fn qlora_65b_fits_a_48_gb_gpu() {
    let e = est(
        "model=llama-65b&method=qlora&r=64&targets=all-linear&b=1&s=512&gc=1&opt=paged_adamw_8bit",
    );
    assert!(
        e.peak_allocated_bytes < 48_000_000_000,
        "{}",
        e.peak_allocated_bytes
    );
    assert!(e.device_bytes < 48_000_000_000, "{}", e.device_bytes);
}
