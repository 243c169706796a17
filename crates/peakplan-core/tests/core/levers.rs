//! The memory guide's levers, each pinned on a one-layer model small enough to count by hand:
//! hidden h = 64, intermediate I = 128, 4 heads of 16, vocab V = 100, untied head; b = 1, s = 8, so n = 8 tokens;
//! pure bf16 (c = 2), LoRA rank 2 on q and v, no dropout, gradient checkpointing off.

use peakplan_core::plan::Plan;
use peakplan_core::{estimate, Architecture, Estimate, Kind, Phase, QkNorm};

fn tiny() -> Architecture {
    Architecture::llama("tiny", 1, 64, 128, 4, 4, 100)
}

/// The levers' baseline plan (q,v LoRA of rank 2 over 8 tokens, bf16, no checkpointing) with `extra` applied.
fn plan(extra: &str) -> Plan {
    let base = "method=lora&r=2&targets=q,v&b=1&s=8&gc=0&prec=bf16&adtype=bf16&attn=sdpa";
    let p = Plan::parse_query_over(Plan::parse_query(base).plan, extra);
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
    p.plan
}

fn run(extra: &str) -> Estimate {
    estimate(&tiny(), &plan(extra))
}

/// The tiny model with a second layer, whose input (the first layer's output) needs a gradient.
fn two_layers() -> Architecture {
    Architecture::llama("tiny", 2, 64, 128, 4, 4, 100)
}

/// A q,v LoRA of rank 2 over 8 tokens in bf16 with the plan defaults otherwise, for multi-layer models.
fn layered_plan(extra: &str) -> Plan {
    Plan::parse_query(&format!(
        "method=lora&r=2&targets=q,v&b=1&s=8&prec=bf16&{extra}"
    ))
    .plan
}

fn saved(e: &Estimate) -> i64 {
    e.component(Kind::SavedActivations) as i64
}

#[test]
fn lora_baseline_counts() {
    // q and v adapters: 2 x 2 x (64 + 64) = 512 trainable values.
    assert_eq!(run("").trainable_params, 512);
}

#[test]
fn trainable_tokens_train_only_their_rows_but_rebuild_the_embedding() {
    // 10 rows x 64 = 640 more trainable values; the rebuilt embedding is V x h x 2 B = 12,800 B per forward.
    let e = run("tt=10");
    assert_eq!(e.trainable_params, 512 + 640);
    assert_eq!(e.component(Kind::PeftBuffers), 12_800);
    // The whole layer instead (modules_to_save): embedding 6,400 + untied head 6,400 values, and the head's
    // input (n x h x 2 B = 1,024 B) is kept for its gradient; the first layer's input now needs a gradient, so
    // its input norm keeps its fp32 input and reciprocal RMS (4 B x n x (h + 1) = 2,080 B).
    let all = run("tt=all");
    assert_eq!(all.trainable_params, 512 + 6_400 + 6_400);
    assert_eq!(saved(&all) - saved(&run("")), 1_024 + 2_080);
    // PEFT deep-copies those modules as they are: in the model's bf16 beside fp32 adapters, their gradients and
    // Adam states in bf16 too (traced on CPU, peft 0.21.2).
    let fp32 = run("tt=all&adtype=fp32");
    assert_eq!(fp32.component(Kind::AdapterWeights), 512 * 4 + 12_800 * 2);
    assert_eq!(
        fp32.component(Kind::OptimizerStates),
        2 * (512 * 4 + 12_800 * 2)
    );
}

#[test]
fn the_first_layer_keeps_nothing_for_its_frozen_input() {
    // An adapter plan's first layer reads the frozen embedding: dropout keeps its 1-byte mask only where the
    // input needs a gradient. Dropout's output (2 B x n x 64 = 1,024 B per module) replaces the shared input
    // (1,024 B) in every layer; from the second layer on, q and v keep their masks too (n x 64 = 512 B each).
    let two = |q: &str| saved(&estimate(&two_layers(), &plan(q)));
    assert_eq!(saved(&run("dropout=0.1")) - saved(&run("")), 1_024);
    assert_eq!(two("dropout=0.1") - two(""), 1_024 + 2_048);
    // Checkpointing makes the embedding's output require a gradient (PEFT's enable_input_require_grads), and
    // trainable tokens and full fine-tuning train the embedding: every layer alike.
    assert_eq!(
        saved(&run("dropout=0.1&tt=10")) - saved(&run("tt=10")),
        2_048
    );
}

#[test]
fn adafactor_steps_in_fp32_one_parameter_at_a_time() {
    // Full fine-tuning's largest tensors are the MLP's (I x h = 8,192): a bf16 parameter's gradient and the
    // parameter are copied to fp32, beside the update and one more update-sized tensor: 16 B each. The factored
    // second moments are fp32 whatever the parameter's dtype.
    let e = run("method=full&opt=adafactor");
    assert_eq!(e.component(Kind::OptimizerTemps), 16 * 8_192);
    let fp32 = run("method=full&opt=adafactor&prec=fp32");
    assert_eq!(fp32.component(Kind::OptimizerTemps), 8 * 8_192);
    assert_eq!(
        e.component(Kind::OptimizerStates),
        fp32.component(Kind::OptimizerStates)
    );
}

#[test]
fn torch_compile_drops_the_fused_intermediates() {
    // The attention's output norm stops keeping its fp32 copy (4 B) and keeps the 2 B input: 2 x n x h =
    // 1,024 B (the first layer's input norm keeps nothing either way: its input needs no gradient); SwiGLU keeps
    // 2 of its 3 intermediates: c x n x I = 2 x 8 x 128 = 2,048 B. Total 3,072 B less.
    assert_eq!(saved(&run("")) - saved(&run("compile=1")), 3_072);
}

#[test]
fn liger_kernels_fuse_the_norms_and_swiglu() {
    assert_eq!(saved(&run("")) - saved(&run("liger=1")), 3_072);
}

#[test]
fn dora_adds_magnitudes_rescaled_outputs_and_a_dense_norm_buffer() {
    // Magnitudes: one per output row of q and v: 64 + 64 = 128 more trainable values.
    let e = run("peft=dora&adtype=fp32");
    let lora = run("adtype=fp32");
    assert_eq!(e.trainable_params, 512 + 128);
    // Each adapted module keeps its base output (2 B) and LoRA output (4 B): 6 x n x 64 = 3,072 B, twice.
    assert_eq!(saved(&e) - saved(&lora), 6_144);
    // B·A (4 B) and W + BA in fp32 (4 B) for the 64 x 64 matrix: 8 x 4,096 = 32,768 B.
    assert_eq!(e.component(Kind::PeftBuffers), 32_768);
}

#[test]
fn rslora_costs_exactly_what_lora_costs() {
    assert_eq!(run("peft=rslora"), run(""));
}

#[test]
fn lora_fa_freezes_a_without_its_gradient_or_state() {
    // Only the B matrices train: 2 x 64 x 2 = 256. A's gradient and Adam states go (256 x (4 + 8) B with fp32
    // adapters = 3,072 B), and so does what A's gradient needs: LoRA's fp32 cast of each module's input
    // (4 B x n x 64 = 2,048 B, q and v; traced on CPU, peft 0.21.2's create_lorafa_optimizer).
    let (fa, lora) = (run("peft=lorafa&adtype=fp32"), run("adtype=fp32"));
    assert_eq!(fa.trainable_params, 256);
    assert_eq!(saved(&lora) - saved(&fa), 4_096);
    let state = |e: &Estimate| e.component(Kind::Gradients) + e.component(Kind::OptimizerStates);
    assert_eq!(state(&lora) - state(&fa), 3_072);
}

#[test]
fn ia3_learns_vectors_and_keeps_what_they_scale() {
    // PEFT's Llama default: k and v outputs (64 each) and the down projection's input (I = 128): 256 values.
    let e = run("peft=ia3&targets=k,v,down");
    assert_eq!(e.trainable_params, 256);
    // The products keep k's and v's outputs (2 x n x 64 = 1,024 B each) and down's input (2 x n x 128 = 2,048 B);
    // the q,v LoRA baseline kept the shared norm output (1,024 B) and two rank-2 outputs (2 x n x 2 = 32 B each).
    assert_eq!(saved(&e) - saved(&run("")), 4_096 - 1_024 - 64);
    // PEFT casts down's input to the vectors' dtype before scaling it: fp32 vectors keep it in fp32
    // (4 x n x 128 = 4,096 B); the k and v products keep the 16-bit outputs either way.
    let fp32 = run("peft=ia3&targets=k,v,down&adtype=fp32");
    assert_eq!(saved(&fp32) - saved(&e), 2_048);
}

#[test]
fn vera_trains_vectors_around_shared_frozen_projections() {
    // Per adapted module a rank-wide (2) and an output-wide (64) vector: 2 x 66 = 132 values.
    let e = run("peft=vera");
    assert_eq!(e.trainable_params, 132);
    // Adapter memory: the vectors (132 x 2 B) plus one shared A (2 x 64) and B (64 x 2) in bf16 (512 B).
    assert_eq!(e.component(Kind::AdapterWeights), 264 + 512);
    // Frozen projections keep no input (the LoRA baseline's shared 1,024 B and two 32 B rank outputs go);
    // each module keeps A·x and B's output: 2 B x n x (2 + 64) = 1,056 B, twice.
    assert_eq!(saved(&e) - saved(&run("")), 2_112 - 1_024 - 64);
}

#[test]
fn loha_keeps_its_dense_update_until_backward() {
    // Two (A, B) pairs per module: 2 x (2 x 64 + 64 x 2) = 512 values, twice.
    let e = run("peft=loha");
    assert_eq!(e.trainable_params, 1_024);
    // The dense 64 x 64 update in bf16 (8,192 B) per module is kept for the input's gradient, which this one
    // (first) layer's q and v do not need: only the two rank outputs (64 B) go. A second layer keeps both.
    assert_eq!(saved(&e) - saved(&run("")), -64);
    let two = |q: &str| saved(&estimate(&two_layers(), &plan(q)));
    assert_eq!(two("peft=loha") - two(""), 16_384 - 2 * 64);
    // Its two dense factors are in flight while it is built: 2 x 8,192 B.
    assert_eq!(e.component(Kind::PeftBuffers), 16_384);
}

#[test]
fn oft_rotates_the_input_in_blocks() {
    // r = 2 blocks of 32: each block's generator has 32 x 31 / 2 = 496 values; 992 per module, twice.
    let e = run("peft=oft");
    assert_eq!(e.trainable_params, 1_984);
    // The input is kept as under LoRA; Cayley-Neumann's generator Q, Q^2 and Q^3 (each 2 x 32 x 32 x 2 B =
    // 4,096 B) replace the rank outputs, per module, and in layers whose input needs a gradient the rotation R too.
    assert_eq!(saved(&e) - saved(&run("")), 2 * 3 * 4_096 - 64);
    let two = |q: &str| saved(&estimate(&two_layers(), &plan(q)));
    assert_eq!(two("peft=oft") - two(""), 2 * 7 * 4_096 - 2 * 64);
}

#[test]
fn query_and_key_norms_keep_their_fp32_inputs() {
    // Per-head q/k RMSNorms (Qwen3) on q and k (64 wide each, 4 heads of 16): each keeps its fp32 input
    // (4 B x n x 64 = 2,048 B) and a reciprocal RMS per head (4 B x n x 4 = 128 B): 4,352 B; their weights are
    // 2 x 16 more parameters. Fused (compile) they keep the 2 B input instead: 2 x (1,024 + 128) = 2,304 B.
    let mut qk = tiny();
    qk.qk_norm = QkNorm::PerHead;
    assert_eq!(qk.total_params(), tiny().total_params() + 32);
    let more = |extra: &str| saved(&estimate(&qk, &plan(extra))) - saved(&run(extra));
    assert_eq!(more(""), 4_352);
    assert_eq!(more("compile=1"), 2_304);
    // Trained (full fine-tuning), each weight keeps the 16-bit normalized copy it multiplies: 2 x 1,024 B more.
    assert_eq!(more("method=full"), 4_352 + 2_048);
    // Over the whole projection (OLMo 2): one statistic per token instead of per head.
    qk.qk_norm = QkNorm::Full;
    assert_eq!(qk.total_params(), tiny().total_params() + 128);
    assert_eq!(
        saved(&estimate(&qk, &plan(""))) - saved(&run("")),
        4_352 - 2 * 4 * 8 * 3
    );
}

#[test]
fn a_fused_qkv_output_sliced_into_views_stays_alive_with_v() {
    // GPT-NeoX and Phi-3 slice q, k and v out of one projection; the rotary embedding rebuilds q and k, but v
    // reaches attention as a view, so the whole 64 + 64 + 64 output stays while attention keeps v: q + kv =
    // 128 values a token more, 2 B x 8 x 128 = 2,048 B, under transformers.
    let fused = |views: bool, kv: u64| {
        let mut a = Architecture::llama("tiny", 1, 64, 128, 4, kv, 100);
        a.fused_qkv = true;
        a.qkv_views = views;
        a
    };
    let more = |kv: u64, extra: &str| {
        saved(&estimate(&fused(true, kv), &plan(extra)))
            - saved(&estimate(&fused(false, kv), &plan(extra)))
    };
    assert_eq!(more(4, ""), 2_048);
    // litgpt reshapes q, k and v into copies; grouped heads under SDPA are copied by repeat_kv, but a kernel
    // that reads grouped heads (flash) keeps the view: q + kv = 64 + 32 values a token.
    assert_eq!(more(4, "fw=litgpt"), 0);
    assert_eq!(more(2, ""), 0);
    assert_eq!(more(2, "attn=flash"), 2 * 8 * 96);
}

#[test]
fn parallel_layernorms_keep_their_shared_input_once() {
    // GPT-NeoX's two LayerNorms read the layer's input: it is kept once, not twice (2 B x 8 x 64 = 1,024 B);
    // under autocast each norm casts its own fp32 copy.
    let neox = |shared: bool| {
        let mut a = tiny();
        a.norm = peakplan_core::arch::Norm::LayerNorm;
        a.norms_share_input = shared;
        a
    };
    let less = |extra: &str| {
        saved(&estimate(&neox(false), &plan(extra))) - saved(&estimate(&neox(true), &plan(extra)))
    };
    assert_eq!(less(""), 1_024);
    assert_eq!(less("prec=amp_bf16&adtype=fp32"), 0);
}

#[test]
fn a_trainable_layernorm_keeps_no_normalized_copy() {
    // `native_layer_norm` applies its weight inside the fused op: LayerNorm tuning keeps no 16-bit normalized
    // copy per norm (the RMSNorm case below keeps three), only LoRA's kept input and rank outputs go.
    let mut a = tiny();
    a.norm = peakplan_core::arch::Norm::LayerNorm;
    let (ln, lora) = (estimate(&a, &plan("peft=ln")), estimate(&a, &plan("")));
    // LayerNorm tuning's first norm keeps its input and statistics (2 B x n x h + 8 B x n = 1,088 B), which
    // the LoRA plan's frozen first layer does not.
    assert_eq!(saved(&ln) - saved(&lora), -1_024 - 64 + 1_088);
}

#[test]
fn layernorm_tuning_trains_the_norms_only() {
    // Two RMSNorms of 64 in the layer and the final one: 192 values; no linear keeps anything extra, but each
    // trainable weight multiplies the normalized input and keeps its 16-bit copy for the weight's gradient:
    // 3 norms x 2 B x n x 64 = 3,072 B, where the LoRA baseline kept the shared input and two rank outputs.
    let e = run("peft=ln");
    assert_eq!(e.trainable_params, 192);
    assert_eq!(e.component(Kind::AdapterWeights), 384);
    // The first layer's input norm keeps its fp32 input and reciprocal RMS too (4 B x n x (h + 1) = 2,080 B),
    // which the LoRA baseline's frozen first layer does not.
    assert_eq!(saved(&e) - saved(&run("")), 3_072 - 1_024 - 64 + 2_080);
}

#[test]
fn a_fused_norm_rebuilds_what_a_trainable_weight_needs() {
    // Compiled, LayerNorm tuning's two layer norms keep no 16-bit normalized copy (2 x 2 B x n x 64 = 2,048 B
    // less than eagerly, on top of compile's own 4,096 B); the final norm is outside the compiled layers.
    let (eager, compiled) = (run("peft=ln"), run("peft=ln&compile=1"));
    assert_eq!(saved(&eager) - saved(&compiled), 4_096 + 2_048);
}

#[test]
fn o_proj_reads_the_attention_output_the_kernel_keeps() {
    // Adapting o as well as q and v adds only lora_B's rank-wide input (2 B x 8 tokens x 2) under SDPA: o's
    // input is the attention output SDPA already keeps. Eager attention keeps no output of its own, so there o
    // keeps its 16-bit input too (2 B x 8 x 64).
    let diff = |attn: &str| {
        saved(&run(&format!("targets=q,v,o&attn={attn}")))
            - saved(&run(&format!("targets=q,v&attn={attn}")))
    };
    assert_eq!(diff("sdpa"), 32);
    assert_eq!(diff("flash"), 32);
    assert_eq!(diff("eager"), 1_024 + 32);
    // Copies made from it still count: dropout's mask and output (1 B + 2 B per value) beside lora_B's input.
    assert_eq!(
        saved(&run("targets=q,v,o&dropout=0.1")) - saved(&run("targets=q,v&dropout=0.1")),
        512 + 1_024 + 32
    );
}

#[test]
fn a_tied_embedding_adds_its_share_to_the_heads_at_the_very_end() {
    // Full fine-tuning of a tied model with a single head matmul: at the embedding's backward the head's share
    // (a transposed view autograd cannot add into), the embedding's share and their sum exist at once, two
    // 100 x 64 x 2 B = 12,800 B more than the one gradient kept. Chunked, the head's share is already a sum and
    // takes the embedding's in place: one more. (Over one token, so that the end is backward's largest moment.)
    let mut tied = tiny();
    tied.tied_embeddings = true;
    let end = |q: &str| estimate(&tied, &plan(q)).phases[Phase::Backward as usize];
    let all = estimate(&tied, &plan("method=full&fw=torchtune&s=1")).component(Kind::Gradients);
    let single = end("method=full&fw=torchtune&s=1");
    assert_eq!(single.gradients, all + 2 * 12_800);
    let chunked = end("method=full&fw=torchtune&loss=chunked&s=1");
    assert_eq!(chunked.gradients, all + 12_800);
    // Accumulating, the sum is then added into the held `.grad`: all three are more than it.
    let held = end("method=full&fw=torchtune&ga=4&s=1");
    assert_eq!(held.gradients, all + 3 * 12_800);
}

#[test]
fn the_heads_new_share_waits_beside_a_held_output() {
    // A loop that keeps the 16-bit logits (2 B x 800 = 1,600 B) keeps them through the head's backward too.
    let moment = |q: &str| run(q).phases[Phase::Backward as usize].activations;
    assert_eq!(
        moment("method=full&fw=torchtune&ga=4&hold=16") - moment("method=full&fw=torchtune&ga=4"),
        1_600
    );
    // A cross-entropy kernel leaves the logits' gradient for the head's matmul like the standard loss: the new
    // share (100 x 64 x 2 B) beside the held gradients.
    let kernel = run("method=full&fw=hf&loss=kernel&ga=4");
    assert_eq!(
        kernel.phases[Phase::Backward as usize].gradients,
        kernel.component(Kind::Gradients) + 12_800
    );
    // Liger's fused loss makes the head's gradient in the forward.
    let fused = run("method=full&loss=fused");
    assert_eq!(fused.phases[Phase::Forward as usize].gradients, 12_800);
}

#[test]
fn a_hugging_face_model_without_checkpointing_returns_a_key_value_cache() {
    // Grouped-query attention: 4 heads over 2 key/value heads of 16. SDPA keeps head-expanded copies, so the
    // cache's unexpanded keys and values are extra: 2 x 2 B x 32 wide x 8 tokens = 1,024 B for the layer.
    let gqa = Architecture::llama("tiny-gqa", 1, 64, 128, 4, 2, 100);
    let p = plan;
    let e = estimate(&gqa, &p(""));
    assert_eq!(e.component(Kind::KvCache), 1_024);
    // The Trainer drops the output before backward: the cache adds to the end of forward only.
    let fwd = |e: &Estimate| e.phase(Phase::Forward).activations;
    let bwd = |e: &Estimate| e.phase(Phase::Backward).activations;
    let without = estimate(&gqa, &p("gc=1")); // checkpointing turns use_cache off
    assert_eq!(without.component(Kind::KvCache), 0);
    // A loop that keeps the output keeps the cache through backward too, beside the 16-bit logits
    // (2 B x 800 = 1,600 B).
    let held = estimate(&gqa, &p("hold=16"));
    assert_eq!(bwd(&held) - bwd(&e), 1_600 + 1_024);
    assert!(fwd(&e) >= 1_024);
    // Flash kernels keep the grouped keys and values themselves; a head per key/value adds nothing either.
    assert_eq!(estimate(&gqa, &p("attn=flash")).component(Kind::KvCache), 0);
    assert_eq!(run("").component(Kind::KvCache), 0);
    // Other frameworks' models build no such cache.
    assert_eq!(
        estimate(&gqa, &p("fw=torchtune")).component(Kind::KvCache),
        0
    );
}

#[test]
fn the_allocator_rule_strands_one_transient_block_in_a_warm_cache_only() {
    // The rule of thumb searches screen with: warm, the cache holds about one largest transient block beside the
    // rounded peak, here the fp32 upcast of the logits, 4 B x 800 = 3,200 B. An emptied cache or expandable
    // segments keep only the rounding.
    let rough = |q: &str| peakplan_core::estimate_rough(&tiny(), &plan(q));
    let warm = rough("");
    let two_mib = 2u64 << 20;
    for q in ["alloc=emptied", "alloc=expandable"] {
        let e = rough(q);
        assert_eq!(e.peak_allocated_bytes, warm.peak_allocated_bytes, "{q}");
        assert_eq!(
            e.peak_reserved_bytes,
            e.peak_allocated_bytes.div_ceil(two_mib) * two_mib,
            "{q}"
        );
        assert_eq!(
            warm.peak_reserved_bytes - e.peak_reserved_bytes,
            3_200,
            "{q}"
        );
    }
    // The replay of the same step: every block of a one-layer model this small is under 1 MiB, so all of it is
    // served from one 2 MiB segment of the small pool, whatever the cache's state.
    for q in ["", "alloc=emptied", "alloc=expandable"] {
        assert_eq!(run(q).peak_reserved_bytes, two_mib, "{q}");
    }
}

#[test]
fn expandable_segments_reserve_what_is_allocated_and_a_warm_cache_strands_more() {
    // Llama 3.1 8B LoRA at batch 4 on an 80 GB card: 29.3 GiB allocated at the peak. With expandable segments
    // the freed pages serve the next blocks, so the allocator reserves within a few MiB of that; a warm cache of
    // fixed segments strands 1.7 GiB (the backward's blocks do not fit the gaps the forward's left), and an
    // emptied one as much: the measured step lays its segments out anew.
    let at = |q: &str| {
        let p = Plan::parse_query(&format!(
            "model=llama-3.1-8b&method=lora&b=4&gpu=a100-80gb&{q}"
        ))
        .plan;
        estimate(peakplan_core::preset_arch(&p), &p)
    };
    let (warm, emptied, expandable) = (at(""), at("alloc=emptied"), at("alloc=expandable"));
    let slack = |e: &Estimate| e.peak_reserved_bytes - e.peak_allocated_bytes;
    assert!(slack(&expandable) < 8 << 20, "{}", slack(&expandable));
    assert!(slack(&warm) > 1 << 30, "{}", slack(&warm));
    assert!(slack(&emptied) > 1 << 30, "{}", slack(&emptied));
    assert_eq!(
        expandable.component(Kind::AllocatorSlack),
        slack(&expandable)
    );
}

#[test]
fn optimizer_in_backward_holds_one_gradient_at_a_time() {
    // Full fine-tuning in bf16: every gradient (2 B x all parameters) gives way to the largest tensor's
    // (an MLP matrix, 64 x 128 x 2 B = 16,384 B), and foreach AdamW's temporary to that tensor's size too.
    let (e, all) = (run("method=full&oib=1"), run("method=full"));
    assert_eq!(all.component(Kind::Gradients), 2 * all.trainable_params);
    assert_eq!(e.component(Kind::Gradients), 16_384);
    assert_eq!(e.component(Kind::OptimizerTemps), 16_384);
    assert!(e.peak_allocated_bytes < all.peak_allocated_bytes);
}

#[test]
fn a_chunked_trainable_head_sums_its_gradient_out_of_place() {
    // Full fine-tuning with torchtune's chunked loss over a 1000-word vocabulary: each of the 8 head matmuls
    // makes a 1000 x 64 x 2 B = 128,000 B weight gradient. At the first sum two shares and the sum exist, and
    // six of the eight chunks' logit gradients wait (6/8 x 8 tokens x 1000 x 2 B = 12,000 B).
    let wide = Architecture::llama("wide", 1, 64, 128, 4, 4, 1000);
    let e = estimate(
        &wide,
        &plan("method=full&fw=torchtune&loss=chunked&compile=1&oib=1"),
    );
    assert_eq!(e.peak_phase, Phase::Backward);
    let bwd = e.phases[Phase::Backward as usize];
    assert_eq!(bwd.gradients, 3 * 128_000);
    assert_eq!(
        bwd.activations,
        e.component(Kind::SavedActivations) + 12_000
    );
    // A frozen head (LoRA) has no such moment: backward peaks at the loss, with no gradient yet.
    let lora = estimate(&wide, &plan("fw=torchtune&loss=chunked&compile=1"));
    assert_eq!(lora.phases[Phase::Backward as usize].gradients, 0);
}

#[test]
fn activation_offloading_keeps_two_layers_on_the_gpu() {
    let four = Architecture::llama("tiny4", 4, 64, 128, 4, 4, 100);
    let p = layered_plan;
    // Checkpointed inputs: 4 layers x n x h x 2 B = 4,096 B; offloaded, the two layers in flight: 2,048 B.
    let on = estimate(&four, &p("gc=1&aoff=1"));
    assert_eq!(
        estimate(&four, &p("gc=1")).component(Kind::Checkpoints),
        4_096
    );
    assert_eq!(on.component(Kind::Checkpoints), 2_048);
    // Without checkpointing, four offloaded layers keep on the GPU what two layers keep without offloading,
    // and the first layer's input norm (whose input needs no gradient, 4 B x n x (h + 1) = 2,080 B), which the
    // two kept layers (the last ones) do not spare.
    let two = Architecture::llama("tiny2", 2, 64, 128, 4, 4, 100);
    assert_eq!(
        estimate(&four, &p("gc=0&aoff=1")).component(Kind::SavedActivations),
        estimate(&two, &p("gc=0")).component(Kind::SavedActivations) + 2_080
    );
}

#[test]
fn an_fp32_base_under_autocast_keeps_16_bit_weight_copies() {
    // The layer's linears: q, k, v, o (64 x 64 each) and gate, up, down (64 x 128 each): 40,960 weights,
    // each cast to bf16 for its matmul and kept for backward: 81,920 B; and the frozen head (100 x 64),
    // 12,800 B. The base itself is fp32.
    let e = run("upcast=1&prec=amp_bf16");
    assert_eq!(e.component(Kind::WeightCopies), 81_920 + 12_800);
    assert_eq!(e.component(Kind::BaseWeights), 4 * e.total_params);
    // Under checkpointing only the recomputed layer casts them again; the head is not checkpointed.
    let gc = run("upcast=1&prec=amp_bf16&gc=1");
    assert_eq!(gc.component(Kind::WeightCopies), 12_800);
    assert!(gc.component(Kind::BackwardWork) > 81_920);
    // litgpt runs its head once per 128-token chunk, and casts it each time: 300 tokens, 3 copies.
    let litgpt = run("upcast=1&prec=amp_bf16&fw=litgpt&s=300");
    assert_eq!(litgpt.component(Kind::WeightCopies), 81_920 + 3 * 12_800);
    // A 16-bit base under autocast casts nothing.
    assert_eq!(run("prec=amp_bf16").component(Kind::WeightCopies), 0);
}

#[test]
fn fsdp_keeps_an_fp32_base_sharded_and_gathers_it_in_16_bit() {
    // FSDP's mixed precision casts each shard before the all-gather: the gathered layers are the 16-bit copies
    // and the activations stay 16-bit, so only the resident shards differ from a bf16 base.
    let fp32 = run("upcast=1&prec=amp_bf16&gpus=2&zero=3");
    let bf16 = run("prec=amp_bf16&gpus=2&zero=3");
    // Shards: base params x 4 B / 2 GPUs; the bf16 base's: x 2 B / 2.
    let base = fp32.total_params;
    assert_eq!(fp32.component(Kind::BaseWeights), 2 * base);
    assert_eq!(bf16.component(Kind::BaseWeights), base);
    // One layer of 41,088 parameters (7 linears, 2 norms) gathered at 2 B at a time (the adapters are units of
    // their own under the Trainer's wrap policy, so the next layer waits for them), beside the root unit
    // (embedding 6,400 + untied head 6,400 + final norm 64), which stays gathered from forward on.
    assert_eq!(
        fp32.component(Kind::GatheredWeights),
        41_088 * 2 + 12_864 * 2
    );
    // Block wrapping (litgpt's FSDP1 policy) would prefetch the next layer, but a one-layer model has none.
    let block = run("upcast=1&prec=amp_bf16&gpus=2&zero=3&wrap=block");
    assert_eq!(
        block.component(Kind::GatheredWeights),
        fp32.component(Kind::GatheredWeights)
    );
    assert_eq!(fp32.component(Kind::WeightCopies), 0);
    for k in [
        Kind::GatheredWeights,
        Kind::SavedActivations,
        Kind::Logits,
        Kind::BackwardWork,
    ] {
        assert_eq!(fp32.component(k), bf16.component(k), "{k:?}");
    }
}

#[test]
fn a_loop_holding_its_output_keeps_the_logits_through_the_step() {
    // 8 tokens x 100 vocabulary = 800 logits. The Trainer's standard loss peaks at 12 B per logit in
    // backward; fp32 logits held by the loop add 4 B per logit there, and stay through the optimizer step.
    let e = run("hold=32");
    assert_eq!(run("hold=0").component(Kind::Logits), 12 * 800);
    assert_eq!(e.component(Kind::Logits), 16 * 800);
    assert_eq!(e.phase(Phase::Optimizer).activations, 4 * 800);
    assert_eq!(run("hold=16").phase(Phase::Optimizer).activations, 2 * 800);
    // torchtune's recipes before mid-2024 kept `logits` (their fp32 shifted copy) the same way.
    assert_eq!(
        run("hold=32&fw=torchtune&loss=standard").component(Kind::Logits),
        run("hold=0&fw=torchtune&loss=standard").component(Kind::Logits) + 4 * 800
    );
    // litgpt's profile keeps its logits already.
    assert_eq!(
        run("hold=32&fw=litgpt").component(Kind::Logits),
        run("hold=0&fw=litgpt").component(Kind::Logits)
    );
    assert!(Plan::parse_query("hold=8").diagnostics[0]
        .message
        .contains("0, 16 or 32"));
}

#[test]
fn bitsandbytes_constants_stay_whole_on_every_gpu_and_torchao_s_are_sharded() {
    let q = "method=qlora&dq=0&gpus=2&zero=3";
    let one = run("method=qlora&dq=0").component(Kind::QuantConstants);
    // 40,960 4-bit weights in 640 blocks of 64, an fp32 absmax each: 2,560 B, on each of the two GPUs.
    assert_eq!(one, 2_560);
    assert_eq!(run(q).component(Kind::QuantConstants), one);
    assert_eq!(
        run(&format!("{q}&cpuoff=1")).component(Kind::QuantConstants),
        one
    );
    assert_eq!(
        run(&format!("{q}&fw=torchtune")).component(Kind::QuantConstants),
        one / 2
    );
    assert_eq!(
        run(&format!("{q}&fw=torchtune&cpuoff=1")).component(Kind::QuantConstants),
        0
    );
}

#[test]
fn llm_int8_bases_keep_a_byte_per_weight_and_a_scale_per_row() {
    let e = run("method=qlora&quant=int8&qsave=0");
    // 40,960 linear weights at 1 B; the embedding, untied head and norms (12,992 values) at 2 B.
    assert_eq!(e.component(Kind::BaseWeights), 40_960 + 25_984);
    // An fp32 absmax per output row: q, k, v, o (64 each), gate and up (128 each), down (64).
    assert_eq!(e.component(Kind::QuantConstants), 4 * 576);
    // Backward dequantizes the largest weight (gate, 8,192 values) to 16-bit.
    assert_eq!(e.component(Kind::DequantBuffer), 16_384);
    // At 64 tokens the forward's int8 copies of gate's input (2 x 64 B per token) and its int32 output
    // (4 x 128 B per token) outweigh that: 64 x 640 B.
    let long = run("method=qlora&quant=int8&qsave=0&s=64");
    assert_eq!(long.component(Kind::DequantBuffer), 40_960);
    // bitsandbytes up to 0.44 kept each int8 matmul's input and its int8 transpose: one byte per input
    // value more than a 4-bit matmul kept (8 tokens x 512 input features of the seven linears).
    assert_eq!(
        saved(&run("method=qlora&quant=int8&qsave=1")) - saved(&run("method=qlora&qsave=1")),
        8 * 512
    );
}

#[test]
fn gptq_bases_pack_their_bits_and_keep_a_dequantized_copy_for_backward() {
    let e = run("method=qlora&quant=gptq4");
    // 40,960 linear weights packed 8 to the int32 (20,480 B); the rest (12,992 values) at 2 B.
    assert_eq!(e.component(Kind::BaseWeights), 20_480 + 25_984);
    // Per linear, one group (its inputs are 64 or 128): an fp16 scale and a 4-bit zero per output, an int32
    // index per input. q, k, v, o: 128 + 32 + 256 B; gate, up: 256 + 64 + 256 B; down: 128 + 32 + 512 B.
    assert_eq!(e.component(Kind::QuantConstants), 4 * 416 + 2 * 576 + 672);
    // Each matmul keeps the 16-bit weight it dequantized: the layer's seven linears, 2 B x 40,960.
    assert_eq!(e.component(Kind::WeightCopies), 81_920);
    // 8-bit: a byte per weight, and 8-bit zeros.
    let eight = run("method=qlora&quant=gptq8");
    assert_eq!(eight.component(Kind::BaseWeights), 40_960 + 25_984);
    assert_eq!(
        eight.component(Kind::QuantConstants),
        4 * 448 + 2 * 640 + 704
    );
    // The matmul needs no input for a frozen weight: bitsandbytes' old input-keeping does not apply.
    assert_eq!(saved(&run("method=qlora&quant=gptq4&qsave=1")), saved(&e));
    // Checkpointed, only the recomputed layer holds its copies, inside backward.
    let gc = run("method=qlora&quant=gptq4&gc=1");
    assert_eq!(gc.component(Kind::WeightCopies), 0);
    assert_eq!(
        gc.component(Kind::BackwardWork) - run("method=qlora&gc=1").component(Kind::BackwardWork),
        81_920
    );
}

#[test]
fn a_cross_entropy_kernel_keeps_the_16_bit_logits_and_writes_their_gradient_in_place() {
    // 800 logits at 2 B and an fp32 log-sum-exp for each of the 8 tokens, in forward and in backward.
    let e = run("loss=kernel");
    assert_eq!(e.component(Kind::Logits), 2 * 800 + 4 * 8);
    assert!(e.component(Kind::Logits) < run("loss=standard").component(Kind::Logits) / 5);
}

#[test]
fn layers_split_across_gpus_leave_each_its_slice() {
    // 5 layers on 2 GPUs: the fuller GPU runs 3 of them, with the head and the logits, on its own.
    let five = Architecture::llama("tiny5", 5, 64, 128, 4, 4, 100);
    let three = Architecture::llama("tiny3", 3, 64, 128, 4, 4, 100);
    let p = layered_plan;
    let split = estimate(&five, &p("gpus=2&split=1&zero=3"));
    let slice = estimate(&three, &p("gpus=1"));
    assert_eq!(split.components, slice.components);
    assert_eq!(split.device_bytes, slice.device_bytes);
    // The counts shown are still the whole model's.
    let whole = estimate(&five, &p("gpus=1"));
    assert_eq!(split.total_params, whole.total_params);
    assert_eq!(split.trainable_params, whole.trainable_params);
    // Without the split, two GPUs hold a replica each.
    assert!(estimate(&five, &p("gpus=2&zero=0")).peak_allocated_bytes > split.peak_allocated_bytes);
}

#[test]
fn litgpt_keeps_the_previous_micro_batch_s_4_bit_inputs_into_the_next_forward() {
    // bitsandbytes <= 0.44 kept each 4-bit matmul's input on its autograd node; litgpt's loop holds the graph
    // until the next forward returns. What the previous micro-batch kept is what qsave adds to this step, and
    // o_proj's input too: this step counts it once, as the attention output the flash kernel keeps, but the
    // previous step's kernel has freed that while bitsandbytes still holds it (8 tokens x 64 x 2 B).
    let q = |x: &str| run(&format!("method=qlora&fw=litgpt&{x}"));
    let (kept, not) = (q("qsave=1"), q("qsave=0"));
    let extra = saved(&kept) - saved(&not);
    assert!(extra > 0);
    assert_eq!(kept.component(Kind::PreviousInputs) as i64, extra + 1_024);
    assert_eq!(
        kept.phase(Phase::Forward).activations - not.phase(Phase::Forward).activations,
        (2 * extra + 1_024) as u64
    );
    // Nothing under checkpointing, with current bitsandbytes, or in the Trainer's loop.
    assert_eq!(q("qsave=1&gc=1").component(Kind::PreviousInputs), 0);
    assert_eq!(not.component(Kind::PreviousInputs), 0);
    assert_eq!(
        run("method=qlora&qsave=1").component(Kind::PreviousInputs),
        0
    );
}

#[test]
fn litgpt_unties_the_head_keeps_fp32_logits_and_fuses_qkv_dropout() {
    // A tied model gets a head of its own under litgpt: V x h x 2 B = 12,800 B more weights.
    let mut tied = tiny();
    tied.tied_embeddings = true;
    let p = |q: &str| {
        Plan::parse_query_over(
            plan("method=lora&r=2&targets=q,v&b=1&s=8&gc=0&prec=bf16&adtype=bf16&attn=sdpa"),
            q,
        )
        .plan
    };
    let weights = |q: &str| estimate(&tied, &p(q)).component(Kind::BaseWeights);
    assert_eq!(weights("fw=litgpt") - weights("fw=hf"), 12_800);
    // n x V = 800 logits: fp32 logits and fp32 log-softmax kept (8 B each) plus one 16-bit chunk of 8 x 100 in
    // forward; in backward the chunks' fp32 gradients join them: 12 B each at the loss's peak (litgpt 0.5.13
    // traced on CPU), as for full fine-tuning's unchunked head.
    let logits = |q: &str| run(&format!("fw=litgpt&{q}")).component(Kind::Logits);
    assert_eq!(logits(""), 9_600);
    assert_eq!(logits("method=full"), 9_600);
    // One dropout over the fused q|k|v input (its output, 2 B x n x 64 = 1,024 B; this first layer's input
    // needs no gradient, so no mask) instead of one per adapted module (2 x 1,024 B), plus the adapted outputs
    // zero-padded for the concatenation (2 B x n x (64 + 64) = 2,048 B); and v is a view of the fused q|k|v
    // output, which attention keeps whole (litgpt 0.5): q + k more than v alone, 2 B x n x 128 = 2,048 B.
    // And transformers' first layer's input norm keeps nothing (its input needs no gradient, traced), where
    // litgpt's profile counts its fp32 input and reciprocal RMS (4 B x n x (h + 1) = 2,080 B).
    let saved_of = |fw: &str| saved(&run(&format!("fw={fw}&dropout=0.05")));
    assert_eq!(
        saved_of("litgpt") - saved_of("hf"),
        1_024 + 2_048 - 2_048 + 2_048 + 2_080
    );
    // QLoRA: litgpt dequantizes to fp16 and casts to bf16, two dense copies of the largest 4-bit matrix (an MLP
    // one, 64 x 128): 2 x 2 B x 8,192; transformers makes one.
    let dequant = |fw: &str| run(&format!("method=qlora&fw={fw}")).component(Kind::DequantBuffer);
    assert_eq!(dequant("litgpt"), 32_768);
    assert_eq!(dequant("hf"), 16_384);
}

#[test]
fn accumulated_gradients_stay_through_the_next_forward_and_backward() {
    // Full fine-tuning in bf16: 2 B per parameter of gradients, held from the second micro-batch on.
    let grads_in = |q: &str, phase: usize| run(q).phases[phase].gradients;
    let all = run("method=full").component(Kind::Gradients);
    let (fwd, bwd) = (Phase::Forward as usize, Phase::Backward as usize);
    assert_eq!(grads_in("method=full&ga=4", fwd), all);
    // Backward peaks in the head's backward, whose new share (100 x 64 x 2 B) waits beside the held `.grad`.
    assert_eq!(grads_in("method=full&ga=4", bwd), all + 12_800);
    assert_eq!(grads_in("method=full", fwd), 0);
    // Optimizer-in-backward steps every micro-batch, so there is nothing to hold.
    assert_eq!(grads_in("method=full&ga=4&oib=1", fwd), 0);
    // This model's peak stays the optimizer step, where the gradients were counted already.
    assert_eq!(
        run("method=full&ga=4").peak_allocated_bytes,
        run("method=full").peak_allocated_bytes
    );
}

#[test]
fn the_wide_nf4_quantizer_peaks_at_load() {
    // The largest 4-bit matrix (64 x 128 = 8,192 weights): its bf16 copy (2 B) and two (8,192 x 16) bf16
    // comparison tensors (64 B per weight): 540,672 B on top of the loaded model, which is then the peak.
    let e = run("method=qlora&fw=torchtune&qload=1");
    assert_eq!(e.component(Kind::LoadTransient), 540_672);
    assert_eq!(e.peak_phase, Phase::Load);
    assert_eq!(
        run("method=qlora&fw=torchtune").component(Kind::LoadTransient),
        0
    );
}

#[test]
fn cpu_offload_leaves_the_root_unit_and_one_layer_in_flight() {
    // zero=3 on 2 GPUs, full fine-tuning: the layer shards, gradients and AdamW states wait in CPU memory.
    // The root unit stays gathered: embedding 6,400 + untied head 6,400 + final norm 64 values x 2 B.
    let e = run("method=full&gpus=2&zero=3&cpuoff=1");
    assert_eq!(e.component(Kind::BaseWeights), 25_728);
    assert_eq!(e.component(Kind::OptimizerStates), 0);
    assert_eq!(e.component(Kind::OptimizerTemps), 0);
    // FSDP still gathers the running layer (41,088 values x 2 B; a one-layer model has no next one to
    // prefetch); the root unit's gathered copy, which unoffloaded FSDP holds beside its shard, is the weights.
    let kept = run("method=full&gpus=2&zero=3");
    assert_eq!(
        e.component(Kind::GatheredWeights) + 25_728,
        kept.component(Kind::GatheredWeights)
    );
    assert!(e.peak_allocated_bytes < kept.peak_allocated_bytes);
    assert_eq!(e.component(Kind::GatheredWeights), 82_176);
    // On one GPU the layers come from CPU memory all the same, two at a time (DeepSpeed's ZeRO-3 offload).
    let one = run("method=full&gpus=1&zero=3&cpuoff=1");
    assert_eq!(one.component(Kind::GatheredWeights), 164_352);
    assert_eq!(one.component(Kind::BaseWeights), 25_728);
}

#[test]
fn torchtune_losses_upcast_and_compile_fuses_them() {
    // n x V = 800 logits. Plain cross-entropy on `output(h).float()`: backward holds the fp32 log-softmax,
    // its incoming gradient and the gradient it makes: 12 B each. Compiled, the loss keeps the fp32 logits
    // and makes one gradient: 8 B each.
    let logits = |q: &str| run(&format!("fw=torchtune&{q}")).component(Kind::Logits);
    assert_eq!(logits("loss=standard"), 9_600);
    assert_eq!(logits("loss=standard&compile=1"), 6_400);
    assert_eq!(logits("compile=1"), 6_400);
    // Only the single-device LoRA recipe keeps the compiled plain loss; the full and distributed recipes drop
    // the compiled module and run it eagerly (12 B per logit).
    assert_eq!(logits("compile=1&method=full"), 9_600);
    assert_eq!(logits("compile=1&gpus=2"), 9_600);
    // CEWithChunkedOutputLoss keeps the 16-bit chunks (1,600 B); eagerly also their fp32 log-softmax.
    // Compiled: chunks (1,600 B) + a log-sum-exp per token (32 B) forward; backward adds one 16-bit chunk
    // gradient of 100 logits at a time (200 B).
    assert_eq!(logits("loss=chunked&compile=1"), 1_800);
    assert_eq!(logits("loss=chunked"), 1_600 + 3_200 + 400);
}

#[test]
fn prompt_tuning_lengthens_every_sequence() {
    // vt = 4 virtual embeddings of 64: 256 values. The 4 positions run through the whole model, so what the
    // frozen network keeps (LN tuning's less its three norm copies, 3,072 B) and the logits grow by 12/8.
    let (e, ln) = (run("peft=prompt&vt=4"), run("peft=ln"));
    assert_eq!(e.trainable_params, 256);
    assert_eq!(2 * saved(&e), 3 * (saved(&ln) - 3_072));
    assert_eq!(
        2 * e.component(Kind::Logits),
        3 * ln.component(Kind::Logits)
    );
    assert_eq!(
        e.peak_allocated_bytes,
        run("peft=prompt&vt=4&r=64").peak_allocated_bytes
    );
}

#[test]
fn prefix_tuning_prepends_keys_and_values_in_every_layer() {
    // A key and a value of 64 per virtual token and layer: 4 x 128 = 512 values. SDPA keeps the concatenated
    // (head-expanded) keys and values: 2 B x 4 tokens x (64 + 64) = 1,024 B more than the frozen network.
    let (e, ln) = (run("peft=prefix&vt=4"), run("peft=ln"));
    assert_eq!(e.trainable_params, 512);
    // (LayerNorm tuning's first norm keeps its fp32 input and reciprocal RMS, 2,080 B, which prefix tuning's
    // frozen first layer does not.)
    assert_eq!(saved(&e) - (saved(&ln) - 3_072 - 2_080), 1_024);
    assert_eq!(e.component(Kind::Logits), ln.component(Kind::Logits));
}
