//! The Unsloth profile (`fw=unsloth`): its defaults as a link takes them, the rules between its keys, and each
//! mechanism against a figure worked by hand from the source's rules (unsloth and unsloth-zoo, August 2026;
//! `shared/research/unsloth.md`). Unsloth does not run on a CPU, so none of this is traced (COVERAGE.md says why).

use peakplan_core::plan::{Alloc, Checkpointing, DType, Framework, Loss, Optimizer, Plan};
use peakplan_core::{estimate, Architecture, Estimate, Kind, VisionTower};

/// Four layers of hidden 1,024 (MLP 2,048, 8 heads), vocabulary 1,000: one layer input of 2,048 tokens in bf16
/// is 4 MiB, over Unsloth's 2 MiB floor for offloading.
fn mid() -> Architecture {
    Architecture::llama("mid", 4, 1024, 2048, 8, 8, 1000)
}

const MIB: u64 = 1024 * 1024;

/// A QLoRA plan under Unsloth's defaults with `extra` applied over them; no diagnostics.
fn plan(extra: &str) -> Plan {
    let base = Plan::parse_query("fw=unsloth&method=qlora&b=1&s=2048").plan;
    let p = Plan::parse_query_over(base, extra);
    assert!(p.diagnostics.is_empty(), "{extra}: {:?}", p.diagnostics);
    p.plan
}

fn run(extra: &str) -> Estimate {
    estimate(&mid(), &plan(extra))
}

/// The first diagnostic's key and the plan a query parses to.
fn refused(query: &str) -> (String, String, Plan) {
    let p = Plan::parse_query(query);
    let d = p
        .diagnostics
        .first()
        .unwrap_or_else(|| panic!("{query}: no diagnostic"));
    (d.key.clone(), d.message.clone(), p.plan)
}

#[test]
fn a_link_naming_unsloth_takes_its_defaults_for_the_keys_it_leaves_out() {
    let p = Plan::parse_query("fw=unsloth").plan;
    assert_eq!(
        (
            p.adapter_dtype,
            p.optimizer,
            p.checkpointing,
            p.loss,
            p.allocator
        ),
        (
            DType::Fp32,
            Optimizer::Adamw8bit,
            Checkpointing::Offload,
            Loss::Fused,
            Alloc::Expandable
        )
    );
    // What the link gives stays, in any order.
    let p = Plan::parse_query("opt=adamw_torch&gc=1&fw=unsloth&alloc=cached&loss=kernel").plan;
    assert_eq!(
        (p.optimizer, p.checkpointing, p.loss, p.allocator),
        (
            Optimizer::AdamwTorch,
            Checkpointing::On,
            Loss::Kernel,
            Alloc::Cached
        )
    );
    // Its link writes the allocator it runs, so it opens as it was.
    assert!(p.to_query().contains("alloc=cached"), "{}", p.to_query());
    assert_eq!(Plan::parse_query(&p.to_query()).plan, p);
    // Links written before the profile existed keep the plan's own defaults.
    assert_eq!(
        Plan::parse_query("fw=torchtune").plan.adapter_dtype,
        DType::Fp32
    );
    // Choosing it on the page moves only the keys still at the old framework's defaults.
    let mut p = Plan::parse_query("opt=sgd").plan;
    Framework::Unsloth.apply_defaults(&mut p);
    assert_eq!(
        (p.optimizer, p.loss, p.framework),
        (Optimizer::Sgd, Loss::Fused, Framework::Unsloth)
    );
    Framework::Hf.apply_defaults(&mut p);
    assert_eq!(
        (p.checkpointing, p.loss, p.allocator),
        (Checkpointing::On, Loss::Standard, Alloc::Cached)
    );
}

#[test]
fn keys_unsloth_does_not_run_are_refused_with_their_reason() {
    let (key, message, p) = refused("gc=offload");
    assert_eq!((key.as_str(), p.checkpointing), ("gc", Checkpointing::On));
    assert!(message.contains("fw=unsloth"), "{message}");
    let (key, message, p) = refused("fw=unsloth&loss=standard");
    assert_eq!((key.as_str(), p.loss), ("loss", Loss::Fused));
    assert!(message.contains("accepted: fused, kernel"), "{message}");
    let (key, _, p) = refused("fw=unsloth&gpus=4&zero=3");
    assert_eq!((key.as_str(), p.zero, p.gpus), ("zero", 0, 4));
    let (key, _, p) = refused("fw=unsloth&aoff=1");
    assert_eq!((key.as_str(), p.offload_activations), ("aoff", false));
    let (key, message, _) = refused("gc=sometimes");
    assert_eq!(key, "gc");
    assert!(message.ends_with("accepted: 0, 1, offload"), "{message}");
    // The JSON keeps a boolean for off and on.
    let json = |q: &str| {
        serde_json::to_value(Plan::parse_query(q).plan).unwrap()["grad_checkpointing"].clone()
    };
    assert_eq!((json("gc=1"), json("gc=0")), (true.into(), false.into()));
    assert_eq!(json("fw=unsloth"), "offload");
}

#[test]
fn offloaded_checkpoints_leave_the_last_layer_s_input_and_two_reload_buffers() {
    // One layer input: 2,048 tokens x 1,024 x 2 B = 4 MiB. On the GPU: the last layer's (its backward comes first)
    // and two reload buffers; on the host, pinned: the other three, and the 200 staging buffers of 128 Ki
    // elements that no layer has grown (197 x 256 KiB).
    let input = 4 * MIB;
    let off = run("");
    assert_eq!(off.component(Kind::Checkpoints), input);
    assert_eq!(off.component(Kind::ReloadBuffers), 2 * input);
    assert_eq!(off.host_bytes, 3 * input + 197 * 128 * 1024 * 2);
    // Plain checkpointing keeps all four inputs on the GPU, none on the host.
    let plain = run("gc=1");
    assert_eq!(plain.component(Kind::Checkpoints), 4 * input);
    assert_eq!(
        (plain.component(Kind::ReloadBuffers), plain.host_bytes),
        (0, 0)
    );
    assert!(off.peak_allocated_bytes < plain.peak_allocated_bytes);
}

#[test]
fn unsloth_checkpoints_plainly_below_512_tokens_under_ddp_and_for_small_inputs() {
    let plain = |e: &Estimate, layers: u64, input: u64| {
        assert_eq!(e.component(Kind::Checkpoints), layers * input);
        assert_eq!((e.component(Kind::ReloadBuffers), e.host_bytes), (0, 0));
    };
    // `max_seq_length < 512`: "offloading not worth it".
    plain(&run("s=511"), 4, 511 * 1024 * 2);
    // DDP unpatches it.
    plain(&run("gpus=2"), 4, 4 * MIB);
    // An input of exactly 2 MiB (1,024 tokens) is not over the floor.
    plain(&run("s=1024"), 4, 2 * MIB);
    assert_eq!(
        run("s=1025").component(Kind::ReloadBuffers),
        2 * 1025 * 1024 * 2
    );
}

#[test]
fn unsloth_s_fused_loss_keeps_the_hidden_states_gradient_and_one_chunk_of_logits() {
    // 2,048 tokens x 1,000 logits in fp32 are far under the 4 GiB target: one chunk. Forward holds the input
    // gradient (2,048 x 1,024 x 2 B) and the chunk's 16-bit logits and their 16-bit gradient; backward the
    // gradient and its scaled copy.
    let e = run("");
    let grad = 2048 * 1024 * 2;
    assert_eq!(
        e.component(Kind::FusedLoss),
        (grad + 2 * 2 * 2048 * 1000).max(2 * grad)
    );
}

#[test]
fn the_fused_loss_cuts_tokens_into_chunks_of_four_as_the_source_rounds() {
    // A vocabulary of 128,256: n tokens' fp32 logits over 4 x 4 GiB, rounded, times 4 chunks (at least 1).
    let wide = Architecture::llama("wide", 1, 64, 128, 4, 4, 128_256);
    let logits = |b: u64, s: u64| {
        let p = plan(&format!("b={b}&s={s}"));
        estimate(&wide, &p).component(Kind::FusedLoss)
    };
    let chunked = |n: u64, chunks: u64| {
        let rows = n.div_ceil(chunks);
        n * 64 * 2 + 2 * 2 * rows * 128_256
    };
    // 16,384 tokens: 7.8 GiB of fp32 logits, 0.49 of 16 GiB: one chunk.
    assert_eq!(logits(1, 16_384), chunked(16_384, 1));
    // 17,408 tokens: 0.52: four chunks of 4,352 rows, less than the one chunk of fewer tokens.
    assert_eq!(logits(1, 17_408), chunked(17_408, 4));
    assert!(logits(1, 17_408) < logits(1, 16_384));
    // 8 x 16,384 tokens: 3.9 rounds to 4: sixteen chunks.
    assert_eq!(logits(8, 16_384), chunked(131_072, 16));
}

#[test]
fn unsloth_keeps_a_vision_tower_in_16_bit_where_bitsandbytes_would_quantize_it() {
    // Two encoder layers of hidden 64 and MLP 128: eight 64 x 64 and four 64 x 128 linears, 65,536 weights.
    // Quantized (nf4, double quantization): 32,768 B packed and per tensor a byte per 64-weight block, an fp32
    // scale per 256 blocks and an offset (72 B for 4,096 weights, 136 B for 8,192): 1,120 B. Unsloth's skip list
    // keeps them in bf16: 131,072 B.
    let mut a = Architecture::llama("tiny", 1, 64, 128, 4, 4, 100);
    a.vision = VisionTower {
        hidden: 64,
        intermediate: 128,
        layers: 2,
        ..VisionTower::default()
    };
    let q = |fw: &str| {
        estimate(
            &a,
            &Plan::parse_query(&format!("method=qlora&s=8&fw={fw}")).plan,
        )
    };
    let (hf, unsloth) = (q("hf"), q("unsloth"));
    let base = |e: &Estimate| e.component(Kind::BaseWeights) as i64;
    let consts = |e: &Estimate| e.component(Kind::QuantConstants) as i64;
    assert_eq!(base(&unsloth) - base(&hf), 131_072 - 32_768);
    assert_eq!(consts(&hf) - consts(&unsloth), 1_120);
}

#[test]
fn unsloth_plans_far_less_than_the_trainer_for_the_same_llama_qlora() {
    // The plan: Llama 3.1 8B, QLoRA r=16 on every linear, b=2: no logits on the GPU, the checkpoints on the
    // host, and a gap that grows with the length.
    let arch = peakplan_core::preset_arch(&Plan::parse_query("model=llama-3.1-8b").plan).clone();
    let at = |fw: &str, s: u64| {
        let q =
            format!("model=llama-3.1-8b&method=qlora&r=16&targets=all-linear&b=2&s={s}&fw={fw}");
        estimate(&arch, &Plan::parse_query(&q).plan)
    };
    let (u2, h2, u16, h16) = (
        at("unsloth", 2048),
        at("hf", 2048),
        at("unsloth", 16_384),
        at("hf", 16_384),
    );
    assert!(u2.host_bytes > 31 * 2 * 2048 * 4096 * 2);
    assert_eq!(
        (u2.component(Kind::Logits), u16.component(Kind::Logits)),
        (0, 0)
    );
    assert!(h2.component(Kind::Logits) > 0 && h2.component(Kind::FusedLoss) == 0);
    assert!(u2.peak_allocated_bytes < h2.peak_allocated_bytes);
    assert!(
        h16.peak_allocated_bytes - u16.peak_allocated_bytes
            > h2.peak_allocated_bytes - u2.peak_allocated_bytes
    );
}

#[test]
fn unsloth_s_lora_kernels_keep_their_inputs_and_the_mlp_s_two_projections_only() {
    // One Llama layer (h = 64, MLP 128, 4 heads of 16), 8 tokens in bf16, no checkpointing. The layer's input needs
    // no gradient, so its first norm records nothing; the MLP's norm keeps its input and an fp32 inverse RMS
    // (1,024 + 32 B); LoRA_QKV its input (1,024); SDPA q, k, v, its output and an fp32 log-sum-exp per head
    // (4 x 1,024 + 128); LoRA_MLP its input, e and g (1,024 + 2 x 2,048). The final norm keeps its fp32 input and
    // inverse RMS (2,048 + 32). No activation product, no x·A.
    let tiny = Architecture::llama("tiny", 1, 64, 128, 4, 4, 100);
    let at = |q: &str| {
        let base = Plan::parse_query("method=lora&s=8&b=1&gc=0&prec=bf16&adtype=bf16").plan;
        let p = Plan::parse_query_over(base, q);
        assert!(p.diagnostics.is_empty(), "{q}: {:?}", p.diagnostics);
        estimate(&tiny, &p.plan)
    };
    let kernels = at("fw=unsloth");
    assert_eq!(
        kernels.component(Kind::SavedActivations),
        1_056 + 1_024 + 4_224 + 5_120 + 2_080
    );
    // PEFT's tensors wherever the kernels do not run: dropout, some targets only, or the Trainer.
    for other in ["fw=unsloth&dropout=0.05", "fw=unsloth&targets=q,v", "fw=hf"] {
        let peft = at(other).component(Kind::SavedActivations);
        assert!(
            peft > kernels.component(Kind::SavedActivations),
            "{other}: {peft}"
        );
    }
    // Backward's gradients in flight: two residual-wide and one MLP-wide (the rest is written in place), 2 x 1,024
    // + 2,048 B, where autograd holds three MLP-wide ones.
    assert_eq!(kernels.component(Kind::BackwardWork), 2 * 1_024 + 2_048);
    assert_eq!(
        at("fw=hf").component(Kind::BackwardWork),
        2 * 1_024 + 3 * 2_048
    );
    // A 4-bit base: the global buffer of the largest weight (128 x 64 in bf16) and backward's dequantized copy.
    assert_eq!(
        at("fw=unsloth&method=qlora").component(Kind::DequantBuffer),
        2 * 2 * 8_192
    );
    assert_eq!(
        at("fw=hf&method=qlora").component(Kind::DequantBuffer),
        2 * 8_192
    );
}

#[test]
fn the_advisor_offers_unsloth_where_it_runs_the_plan_and_its_own_levers_under_it() {
    use peakplan_core::advise::{apply, candidates};
    let hf = Plan::parse_query("model=llama-3.1-8b&method=qlora&b=2&s=8192").plan;
    let all = candidates(&hf);
    let switch = all.iter().find(|c| c.key == "fw").expect("no Unsloth card");
    assert_eq!(
        switch.query(),
        "fw=unsloth&opt=adamw_8bit&gc=offload&loss=fused&alloc=expandable"
    );
    // The card's plan is the plan moved to Unsloth as the page's profile select moves it.
    let mut moved = hf.clone();
    Framework::Unsloth.apply_defaults(&mut moved);
    assert_eq!(apply(&hf, &[switch]), moved);
    // Not where Unsloth does not run the plan as it stands: ZeRO-3, a preference task, another framework.
    for q in ["gpus=4&zero=3", "task=dpo", "fw=torchtune"] {
        let p = Plan::parse_query_over(hf.clone(), q).plan;
        assert!(candidates(&p).iter().all(|c| c.key != "fw"), "{q}");
    }
    // Under Unsloth: offloading plain checkpoints, and the loss without logits; neither Liger nor torch.compile.
    let u = Plan::parse_query("fw=unsloth&gc=1&loss=kernel").plan;
    let keys: Vec<String> = candidates(&u).iter().map(|c| c.query()).collect();
    assert!(
        keys.contains(&"gc=offload".to_string()) && keys.contains(&"loss=fused".to_string()),
        "{keys:?}"
    );
    assert!(
        !keys
            .iter()
            .any(|k| k.starts_with("liger") || k.starts_with("compile") || k.starts_with("fw")),
        "{keys:?}"
    );
}

#[test]
fn unsloth_batches_varying_lengths_padding_free() {
    use peakplan_core::{preset_arch, replayed_batches, replayed_runs};
    // Unsloth's SFTTrainer turns padding_free on: a batch is one row of its sequences' real lengths, so the
    // largest step allocates for the sum of its lengths, not b x the longest.
    let q = |fw: &str| {
        let base = format!(
            "model=llama-3.1-8b&method=qlora&b=8&s=4096&lens=padded&lmean=300&lsd=200&fw={fw}"
        );
        Plan::parse_query(&base).plan
    };
    let (u, hf) = (q("unsloth"), q("hf"));
    let arch = preset_arch(&u);
    let ub = replayed_batches(arch, &u).unwrap();
    assert!(ub.iter().all(|s| s.sequences == 1), "{ub:?}");
    // One batch holds the longest sequence (4,096 tokens) beside seven others; allocated is the largest of
    // any replayed run's.
    let biggest = replayed_runs(arch, &u)
        .unwrap()
        .iter()
        .flatten()
        .map(|s| s.len)
        .max()
        .unwrap();
    assert!(biggest > 4096 && biggest < 8 * 4096, "{ub:?}");
    // The Trainer pads: 8 sequences of the longest's length.
    let hb = replayed_batches(arch, &hf).unwrap();
    assert!(
        hb.iter().all(|s| s.sequences == 8) && hb.iter().any(|s| s.len == 4096),
        "{hb:?}"
    );
    // Allocated: the largest step's, as a fixed plan of one row of that many tokens.
    let one_row = Plan::parse_query(&format!(
        "model=llama-3.1-8b&method=qlora&b=1&s={biggest}&fw=unsloth"
    ))
    .plan;
    assert_eq!(
        estimate(arch, &u).peak_allocated_bytes,
        estimate(arch, &one_row).peak_allocated_bytes
    );
    // Not with the loss kernel (UNSLOTH_RETURN_LOGITS=1 turns padding-free off).
    let kernel = Plan::parse_query_over(u.clone(), "loss=kernel").plan;
    assert!(replayed_batches(arch, &kernel)
        .unwrap()
        .iter()
        .all(|s| s.sequences == 8));
}
