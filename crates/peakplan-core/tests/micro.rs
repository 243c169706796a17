//! The micro QLoRA reference: NF4 with double quantization against bitsandbytes' values, gradients against finite
//! differences, AdamW against hand-computed steps, training that lowers the loss, and the plan mapping.

use peakplan_core::arch::Target;
use peakplan_core::micro::nf4::{dynamic_map, nearest, Nf4Tensor, NF4};
use peakplan_core::micro::ops;
use peakplan_core::micro::{
    predicted_peak_bytes, AdamState, AdamW, MicroAttention, MicroConfig, MicroLoss, MicroModel, Rng,
};
use peakplan_core::plan::Targets;
use peakplan_core::Plan;

fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn nf4_levels_are_bitsandbytes_values() {
    assert_eq!(NF4[0], -1.0);
    assert_eq!(NF4[7], 0.0);
    assert_eq!(NF4[15], 1.0);
    assert_eq!(NF4[1], -0.696_192_8);
    assert_eq!(NF4[8], 0.079_580_3);
    assert_eq!(NF4[14], 0.722_956_84);
    assert!(NF4.windows(2).all(|w| w[0] < w[1]));
    // Midpoint thresholds of the CUDA decision tree pick the same codes.
    assert_eq!(nearest(&NF4, 0.039_790_1), 7);
    assert_eq!(nearest(&NF4, 0.039_791), 8);
    assert_eq!(nearest(&NF4, 0.861_478_3), 14);
    assert_eq!(nearest(&NF4, 0.861_479), 15);
}

#[test]
fn the_dynamic_map_matches_create_dynamic_map() {
    let m = dynamic_map();
    assert!(close(m[0], -0.992_968_75, 1e-7), "{}", m[0]);
    assert_eq!(m[127], 0.0);
    assert_eq!(m[255], 1.0);
    let smallest_pos = m.iter().copied().filter(|v| *v > 0.0).fold(1.0, f32::min);
    assert!(close(smallest_pos, 5.5e-7, 1e-12), "{smallest_pos}");
    assert!(m.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
    // Decade i (scale 10^(i-6)) holds 2^i positive values.
    for i in 0..7 {
        let (lo, hi) = (10f32.powi(i - 7), 10f32.powi(i - 6));
        let count = m
            .iter()
            .filter(|v| **v > lo && **v <= hi && **v < 1.0)
            .count();
        assert_eq!(count, 1 << i, "decade {i}");
    }
}

#[test]
fn nibbles_go_high_first_and_levels_round_trip_exactly() {
    // One block holding every level times 2: absmax 2, the mean offset is 2 and the centred absmax is 0.
    let mut w: Vec<f32> = NF4.iter().map(|v| v * 2.0).collect();
    w.resize(64, 0.0);
    let t = Nf4Tensor::quantize(1, 64, &w);
    assert_eq!(
        t.packed[0], 0x01,
        "element 0 (code 0) high, element 1 (code 1) low"
    );
    assert_eq!(t.packed[7], 0xef);
    assert_eq!(t.code(0), 0);
    assert_eq!(t.code(15), 15);
    assert_eq!(t.offset, 2.0);
    assert_eq!(t.absmax2, vec![0.0]);
    assert_eq!(t.dequantize(), w);
    assert_eq!(ops::nf4_dequant(&t), w);
}

#[test]
fn quantization_error_is_bounded_and_sizes_follow_the_formula() {
    let mut rng = Rng::new(7);
    let (rows, cols) = (384, 128);
    let w = rng.fill(rows * cols, 0.3);
    let t = Nf4Tensor::quantize(rows, cols, &w);
    let n = rows * cols;
    let blocks = n / 64;
    assert_eq!(t.packed.len(), n / 2);
    assert_eq!(t.qabsmax.len(), blocks);
    assert_eq!(t.absmax2.len(), blocks.div_ceil(256));
    assert_eq!(t.bytes(), n / 2 + blocks + 4 * blocks.div_ceil(256) + 4);
    assert_eq!(t.to_words().len() * 4, t.bytes());
    let d = t.dequantize();
    let dyn8 = dynamic_map();
    for (b, (wb, db)) in w.chunks(64).zip(d.chunks(64)).enumerate() {
        let amax = wb.iter().fold(0f32, |m, x| m.max(x.abs()));
        let qa = t.block_absmax(&dyn8, b);
        // The 8-bit double-quantized absmax is within 2% of the real one here (absmax values near their mean).
        assert!(
            (qa - amax).abs() <= 0.02 * amax,
            "block {b}: {qa} vs {amax}"
        );
        // Half the widest NF4 gap (between -1 and -0.696) bounds the 4-bit rounding.
        for (x, y) in wb.iter().zip(db) {
            assert!(
                (x - y).abs() <= 0.153 * amax + (qa - amax).abs(),
                "{x} vs {y}"
            );
        }
    }
    // Round trip: quantizing the dequantized weights gives the same codes.
    let t2 = Nf4Tensor::quantize(rows, cols, &d);
    let same = t
        .packed
        .iter()
        .zip(&t2.packed)
        .filter(|(a, b)| a == b)
        .count();
    assert!(
        same * 100 >= t.packed.len() * 99,
        "{same} of {}",
        t.packed.len()
    );
}

#[test]
fn gpu_words_hold_the_parts_little_endian() {
    let mut rng = Rng::new(3);
    let w = rng.fill(64 * 64, 1.0);
    let t = Nf4Tensor::quantize(64, 64, &w);
    let words = t.to_words();
    let l = t.layout();
    assert_eq!(words[0] & 0xff, t.packed[0] as u32);
    assert_eq!((words[0] >> 24) & 0xff, t.packed[3] as u32);
    assert_eq!((words[l.qabsmax_word] >> 8) & 0xff, t.qabsmax[1] as u32);
    assert_eq!(f32::from_bits(words[l.absmax2_word]), t.absmax2[0]);
    assert_eq!(f32::from_bits(words[l.offset_word]), t.offset);
}

fn tiny(attention: MicroAttention, loss: MicroLoss) -> MicroConfig {
    MicroConfig {
        hidden: 64,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        intermediate: 128,
        vocab: 96,
        rank: 4,
        targets: Targets::ALL_LINEAR,
        alpha: 8.0,
        batch: 2,
        seq: 5,
        attention,
        loss,
        adamw: AdamW::default(),
        rope_theta: 10000.0,
        norm_eps: 1e-5,
        seed: 11,
    }
}

/// A model whose adapters `B` are random too, so that every adapter gets a non-zero gradient.
fn model_with_random_b(cfg: &MicroConfig) -> MicroModel {
    let mut m = MicroModel::new(cfg).expect("a valid micro config");
    let mut rng = Rng::new(99);
    for id in m.trainable() {
        if id.b {
            for v in m.tensor_mut(id) {
                *v = rng.uniform(0.2);
            }
        }
    }
    m
}

#[test]
fn gradients_match_finite_differences() {
    for (attn, loss) in [
        (MicroAttention::Eager, MicroLoss::Whole),
        (MicroAttention::Tiled, MicroLoss::Chunked(3)),
    ] {
        let cfg = tiny(attn, loss);
        let model = model_with_random_b(&cfg);
        let batch = model.batch();
        let (l0, grads) = model.loss_and_grads(&batch);
        assert!(l0.is_finite());
        let ids = model.trainable();
        assert_eq!(ids.len(), 2 * 7 * cfg.layers);
        let mut rng = Rng::new(5);
        let mut checked = 0;
        for (ti, id) in ids.iter().enumerate() {
            // The largest-gradient entry and one random entry of each tensor.
            let g = &grads[ti];
            assert_eq!(g.len(), model.tensor(*id).len());
            let big = (0..g.len())
                .max_by(|a, b| g[*a].abs().total_cmp(&g[*b].abs()))
                .unwrap();
            for e in [big, rng.below(g.len() as u32) as usize] {
                let h = 1e-2f32;
                let mut plus = model.clone();
                plus.tensor_mut(*id)[e] += h;
                let mut minus = model.clone();
                minus.tensor_mut(*id)[e] -= h;
                let fd = (plus.loss(&batch) - minus.loss(&batch)) / (2.0 * h);
                let tol = 0.03 * g[e].abs().max(fd.abs()) + 3e-4;
                assert!(
                    (fd - g[e]).abs() <= tol,
                    "{attn:?}/{loss:?} {id:?}[{e}]: analytic {} vs finite difference {fd}",
                    g[e]
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 2 * ids.len());
    }
}

#[test]
fn eager_and_tiled_attention_and_both_losses_agree() {
    let base = model_with_random_b(&tiny(MicroAttention::Eager, MicroLoss::Whole));
    let batch = base.batch();
    let (l_ref, g_ref) = base.loss_and_grads(&batch);
    for (attn, loss) in [
        (MicroAttention::Tiled, MicroLoss::Whole),
        (MicroAttention::Eager, MicroLoss::Chunked(4)),
        (MicroAttention::Tiled, MicroLoss::Chunked(1)),
    ] {
        let mut m = base.clone();
        m.cfg.attention = attn;
        m.cfg.loss = loss;
        let (l, g) = m.loss_and_grads(&batch);
        assert!(close(l, l_ref, 1e-5 * l_ref.abs()), "{l} vs {l_ref}");
        for (a, b) in g.iter().zip(&g_ref) {
            let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-4 * scale + 1e-7, "{x} vs {y}");
            }
        }
    }
}

#[test]
fn adamw_matches_hand_computed_steps() {
    let hp = AdamW {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let (mut p, mut m, mut v) = (vec![1.0f32], vec![0.0f32], vec![0.0f32]);
    // Step 1: p = 1 * (1 - 0.01) = 0.99; m = 0.05; v = 0.00025; step size lr / 0.1 = 1;
    // denominator sqrt(0.00025) / sqrt(0.001) + 1e-8 = 0.5; p = 0.99 - 0.05 / 0.5 = 0.89.
    ops::adamw(&hp, 1, &mut p, &[0.5], &mut m, &mut v);
    assert!(close(p[0], 0.89, 1e-6), "{}", p[0]);
    // 1 - 0.999 is 0.00099998713 in f32: the second moment carries that relative error of about 1.3e-5.
    assert!(
        close(m[0], 0.05, 1e-7) && close(v[0], 0.000_25, 2e-5 * 0.000_25),
        "{} {}",
        m[0],
        v[0]
    );
    // Step 2 with g = -0.25: p = 0.89 * 0.99 = 0.8811; m = 0.045 - 0.025 = 0.02; v = 0.00031225;
    // step size 0.1 / 0.19; denominator sqrt(0.00031225) / sqrt(0.001999) = 0.39523; p = 0.8811 - 0.026634.
    ops::adamw(&hp, 2, &mut p, &[-0.25], &mut m, &mut v);
    assert!(close(p[0], 0.854_466_3, 2e-6), "{}", p[0]);
    assert!(close(m[0], 0.02, 1e-7) && close(v[0], 0.000_312_25, 3e-5 * 0.000_312_25));
    // Step 3 with g = 1.0.
    ops::adamw(&hp, 3, &mut p, &[1.0], &mut m, &mut v);
    assert!(close(p[0], 0.780_110_5, 2e-6), "{}", p[0]);
    // Weight decay is decoupled: a zero gradient on step 1 only decays.
    let (mut p, mut m, mut v) = (vec![2.0f32], vec![0.0f32], vec![0.0f32]);
    ops::adamw(&hp, 1, &mut p, &[0.0], &mut m, &mut v);
    assert!(close(p[0], 1.98, 1e-6));
}

#[test]
fn five_steps_lower_the_loss() {
    for (attn, loss) in [
        (MicroAttention::Eager, MicroLoss::Chunked(4)),
        (MicroAttention::Tiled, MicroLoss::Whole),
    ] {
        let cfg = tiny(attn, loss);
        let mut model = MicroModel::new(&cfg).unwrap();
        let batch = model.batch();
        let mut state = AdamState::new(&model);
        let losses: Vec<f32> = (0..5).map(|_| model.step(&batch, &mut state)).collect();
        assert_eq!(state.step, 5);
        assert!(
            losses.windows(2).all(|w| w[1] < w[0]),
            "{attn:?}/{loss:?}: {losses:?}"
        );
        // With B = 0 at the start, the adapted model equals the base model: step 1's loss is the base loss.
        let fresh = MicroModel::new(&cfg).unwrap();
        assert_eq!(fresh.loss(&batch), losses[0]);
    }
}

#[test]
fn adapters_start_as_peft_does() {
    let cfg = tiny(MicroAttention::Tiled, MicroLoss::Whole);
    let m = MicroModel::new(&cfg).unwrap();
    for id in m.trainable() {
        let t = m.tensor(id);
        let fan_in = cfg.proj_shape(peakplan_core::micro::PROJECTIONS[id.proj]).0;
        if id.b {
            assert!(t.iter().all(|v| *v == 0.0));
        } else {
            let bound = 1.0 / (fan_in as f32).sqrt();
            assert!(t.iter().all(|v| v.abs() <= bound));
            assert!(t.iter().any(|v| v.abs() > 0.5 * bound));
        }
    }
    let mut qv = cfg.clone();
    qv.targets = Targets::QV;
    let m = MicroModel::new(&qv).unwrap();
    assert_eq!(m.trainable().len(), 2 * 2 * qv.layers);
}

fn plan(q: &str) -> Plan {
    let p = Plan::parse_query(q);
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
    p.plan
}

#[test]
fn plans_scale_into_the_micro_range_monotonically() {
    let small = MicroConfig::from_plan(&plan("model=llama-2-7b&method=qlora&r=8&b=1&s=128"));
    let big = MicroConfig::from_plan(&plan("model=llama-2-7b&method=qlora&r=64&b=4&s=512"));
    assert_eq!((small.rank, small.batch, small.seq), (8, 1, 16));
    assert_eq!((big.rank, big.batch, big.seq), (64, 4, 64));
    small.validate().unwrap();
    big.validate().unwrap();
    assert_eq!(small.attention, MicroAttention::Tiled);
    assert_eq!(small.loss, MicroLoss::Whole);
    assert_eq!(small.kv_heads, small.heads, "llama-2-7b has no GQA");
    assert!(predicted_peak_bytes(&big) > predicted_peak_bytes(&small));
    // GQA follows the model; lm_head is not a micro target.
    let g = MicroConfig::from_plan(&plan(
        "model=llama-3.1-8b&targets=q,lm_head&attn=eager&loss=chunked&chunk=64",
    ));
    assert_eq!(g.heads / g.kv_heads, 4);
    assert!(!g.targets.contains(Target::LmHead) && g.targets.contains(Target::Q));
    assert_eq!(g.attention, MicroAttention::Eager);
    assert_eq!(g.loss, MicroLoss::Chunked(8));
    g.validate().unwrap();
    let only_head = MicroConfig::from_plan(&plan("targets=lm_head"));
    assert_eq!(only_head.targets, Targets::QV);
    // Every slider is monotone: a bigger value never gives a smaller run.
    let mut last = (0, 0, 0);
    for (r, b, s) in [
        (1, 1, 1),
        (4, 1, 64),
        (8, 2, 128),
        (16, 2, 1024),
        (64, 4, 2048),
        (4096, 64, 1 << 20),
    ] {
        let c = MicroConfig::from_plan(&plan(&format!("r={r}&b={b}&s={s}")));
        c.validate().unwrap();
        assert!(c.rank >= last.0 && c.batch >= last.1 && c.seq >= last.2);
        last = (c.rank, c.batch, c.seq);
    }
}

#[test]
fn the_prediction_comes_from_the_engine() {
    let cfg = MicroConfig::from_plan(&plan("model=llama-2-7b&method=qlora&r=8&b=1&s=128"));
    let e = peakplan_core::estimate(&cfg.architecture(), &cfg.plan());
    assert_eq!(predicted_peak_bytes(&cfg), e.peak_allocated_bytes);
    let m = MicroModel::new(&cfg).unwrap();
    // The engine's weights are the model's: fp32 embedding, norms and head; NF4 projections with their constants;
    // fp32 adapters.
    let quant: usize = m
        .layers
        .iter()
        .flat_map(|l| &l.proj)
        .map(|p| p.base.bytes())
        .sum();
    let fp32 =
        4 * (m.embed.len() + m.lm_head.len() + m.final_norm.len() + 2 * cfg.layers * cfg.hidden);
    let adapters: usize = m.trainable().iter().map(|t| 4 * m.tensor(*t).len()).sum();
    let w = e.phase(peakplan_core::Phase::Load).weights as usize;
    assert_eq!(w, quant + fp32 + adapters);
    assert!(cfg.plan().to_query().contains("opt=adamw_torch_fused"));
}

#[test]
fn the_rope_table_is_cos_and_sin_of_the_positions() {
    let (seq, d, theta) = (300, 64, 10000f32);
    let (cos, sin) = ops::rope_table(seq, d, theta);
    for pos in 0..seq {
        for j in 0..d / 2 {
            let a = pos as f64 * (theta as f64).powf(-2.0 * j as f64 / d as f64);
            assert!(
                (cos[pos * d / 2 + j] as f64 - a.cos()).abs() < 1e-6,
                "cos {pos} {j}"
            );
            assert!(
                (sin[pos * d / 2 + j] as f64 - a.sin()).abs() < 1e-6,
                "sin {pos} {j}"
            );
        }
    }
}

#[test]
fn the_engine_predicts_the_webgpu_schedule_of_the_check_queries() {
    // The peaks the WebGPU runtime's allocation tracker measures for these plans, summed by hand from the buffer
    // schedule in src/gpu/step.rs (load + saved activations + x_L + rstd + lse + logits and their gradient):
    // 5,980,388 + 540,416 + 16,384 + 64 + 64 + 262,144, and
    // 12,617,828 + 9,449,472 + 262,144 + 1,024 + 1,024 + 4,194,304.
    for (q, measured) in [
        ("model=llama-2-7b&method=qlora&r=8&b=1&s=128", 6_799_460u64),
        ("model=llama-2-7b&method=qlora&r=64&b=4&s=512", 26_525_796),
    ] {
        let plan = Plan::parse_query(q).plan;
        let cfg = MicroConfig::from_plan(&plan);
        let predicted = predicted_peak_bytes(&cfg);
        let ratio = measured as f64 / predicted as f64;
        assert!(
            (ratio - 1.0).abs() < 0.01,
            "{q}: measured {measured}, predicted {predicted}"
        );
    }
}
