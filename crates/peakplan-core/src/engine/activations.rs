//! Stage 3, saved activations: what the whole model keeps for backward. Every layer's saved tensors (or, under
//! gradient checkpointing, its input alone), the eager attention mask, the final norm and a trainable head's
//! input, activation offloading, the 16-bit weight copies that casts and dequantization keep, and bitsandbytes'
//! kept inputs of the previous micro-batch.

use super::count::{ceil_div, Count};
use super::resident::Resident;
use super::saved::{
    first_layer_input_frozen, layer_saved, norm_product_bytes, norms_trainable, LayerSaved,
};
use super::setup::{
    a_shared_with_gate, bnb_saves_input, key_positions, parametrized, parametrized_gate_up,
};
use super::setup::{positions, zero3_linear, Setup};
use crate::arch::{Norm, Target};
use crate::plan::{Attn, Loss, Method, Plan, TokenTraining};

/// The saved activations of the whole step.
pub(super) struct Activations {
    /// One layer's saved tensors.
    pub layer: LayerSaved,
    /// The first layer's: fewer where its input needs no gradient (else `layer`'s).
    pub first_layer: LayerSaved,
    /// The eager attention's 4D causal mask.
    pub mask: Count,
    pub saved: Count,
    /// The part of `saved` the layers keep (the rest is the final norm's and a trainable head's input).
    pub saved_in_layers: Count,
    /// Layers whose saved tensors are on the GPU at once: all of them, or two under activation offloading.
    pub kept_layers: Count,
    pub scores: Count,
    pub checkpoints: Count,
    pub previous_inputs: Count,
    /// The layers' 16-bit weight copies, kept until each layer's backward.
    pub layer_weight_copies: Count,
    /// The frozen fp32 head's 16-bit copies, kept until the head's backward.
    pub head_copies: Count,
    /// One layer's weight copies (recomputed with it under checkpointing).
    pub copies_per_layer: Count,
    /// The largest expert parameter LoRA reaches through `target_parameters`.
    pub largest_parametrized: Count,
    /// Offloaded checkpoints' GPU reload buffers, made at the first forward and kept through training.
    pub reload_buffers: Count,
    /// Pinned CPU memory the offloaded checkpoints and their staging buffers take.
    pub host_checkpoints: Count,
}

/// Pinned CPU buffers Unsloth's offloaded checkpointing makes at start, and their elements (each grows to the
/// layer input it takes): `initialize_unsloth_gradient_checkpointing`.
const HOST_STAGING_BUFFERS: Count = 200.0;
const HOST_STAGING_ELEMENTS: Count = 128.0 * 1024.0;

/// GPU reload buffers an offloaded checkpoint comes back into: Unsloth adds a second (double buffering, so one
/// layer's reload overlaps the next one's backward) at the second step when 512 MiB of the card are free; the plan
/// assumes they are (one buffer less on a card with less to spare).
pub(super) const RELOAD_BUFFERS: u64 = 2;

pub(super) fn activations(s: &Setup, resident: &Resident) -> Activations {
    let (arch, plan, n, h) = (s.arch, s.plan, s.tokens, s.hidden);
    let layers = s.layers;
    let layer = layer_saved(s, plan, false);
    // The first layer keeps less where its input needs no gradient (unless offloaded: then two layers count).
    let first_layer = if first_layer_input_frozen(s) && !plan.offload_activations {
        layer_saved(s, plan, true)
    } else {
        layer
    };
    let first_spared = layer.bytes - first_layer.bytes;
    let previous_inputs = previous_inputs(s, layer);
    // Eager attention with a padding-capable mask builds one 4D causal mask per forward (a runtime's own
    // attention kernel takes none).
    let mask = if plan.attn == Attn::Eager && !s.profile.own_attention_kernel {
        s.d.compute * s.sequences * positions(plan) * key_positions(plan)
    } else {
        0.0
    };
    // torchtune compiles the layers only; Liger replaces the final norm too.
    let final_norm = match arch.norm {
        Norm::RmsNorm => 4.0 * n * h + 4.0 * n,
        Norm::LayerNorm => 4.0 * n * h + 8.0 * n,
    } + if norms_trainable(plan) && !plan.liger {
        norm_product_bytes(arch.norm, arch, s.profile, s.d) * n * h
    } else {
        0.0
    };
    let head_trainable = plan.method == Method::Full
        || plan.targets.contains(Target::LmHead)
        || plan.tokens == TokenTraining::All;
    // A frozen head keeps its input too under ZeRO-3's linear, where a gradient reaches it (traced: LoRA, the
    // final norm's output).
    let head_input = if head_trainable || zero3_linear(s) {
        s.d.residual * n * h
    } else {
        0.0
    };
    // Offloaded activations wait in CPU memory; on the GPU are the layer being computed and the one prefetched.
    // Offloaded checkpoints leave the last layer's input on the GPU (its backward comes first); the others come
    // back into the reload buffers.
    let kept_layers = if plan.offload_activations {
        layers.min(2.0)
    } else if s.offloaded_checkpoints {
        layers.min(1.0)
    } else {
        layers
    };
    let input = s.d.residual * n * h;
    let (reload_buffers, host_checkpoints) = if s.offloaded_checkpoints {
        let offloaded = layers - kept_layers;
        let staging =
            s.d.residual * (HOST_STAGING_BUFFERS - offloaded).max(0.0) * HOST_STAGING_ELEMENTS;
        (
            RELOAD_BUFFERS as Count * input,
            offloaded * input.max(s.d.residual * HOST_STAGING_ELEMENTS) + staging,
        )
    } else {
        (0.0, 0.0)
    };
    let copies = weight_copies(s, resident, head_trainable);
    let layer_weight_copies = if plan.checkpointing.on() {
        0.0
    } else {
        kept_layers * copies.per_layer
    };
    let saved_in_layers = if plan.checkpointing.on() {
        0.0
    } else {
        kept_layers * layer.bytes - first_spared
    };
    let (saved, scores, checkpoints) = if plan.checkpointing.on() {
        (final_norm + head_input, 0.0, kept_layers * input)
    } else {
        (
            kept_layers * layer.bytes - first_spared + final_norm + head_input,
            kept_layers * layer.scores + mask,
            0.0,
        )
    };
    Activations {
        layer,
        first_layer,
        mask,
        saved,
        saved_in_layers,
        kept_layers,
        scores,
        checkpoints,
        previous_inputs,
        layer_weight_copies,
        head_copies: copies.head,
        copies_per_layer: copies.per_layer,
        largest_parametrized: copies.largest_parametrized,
        reload_buffers,
        host_checkpoints,
    }
}

/// bitsandbytes up to 0.44 kept a 4-bit matmul's input as an attribute of its autograd node (`ctx.tensors`),
/// which backward does not free: it lives as long as the graph. A loop that holds the graph through its logits
/// until the next forward returns (litgpt's `fit()`) still has the previous micro-batch's inputs allocated at the
/// end of the next forward. (Checkpointed layers keep theirs in a graph of their own.)
fn previous_inputs(s: &Setup, layer: LayerSaved) -> Count {
    let plan = s.plan;
    if !s.profile.graph_held_to_next_forward || !bnb_saves_input(plan) || plan.checkpointing.on() {
        return 0.0;
    }
    let without = Plan {
        qlora_saves_input: false,
        ..plan.clone()
    };
    // o_proj's input is the attention output a flash kernel keeps, so this step counts it once (in the
    // attention's share); the previous micro-batch's kernels have freed theirs, but bitsandbytes still holds
    // o_proj's copy of it.
    let attn_out = if plan.attn == Attn::Eager {
        0.0
    } else {
        s.d.compute * s.tokens * s.arch.q_dim() as Count
    };
    let kept_without = layer_saved(s, &without, false).bytes;
    s.layers * (layer.bytes - kept_without + attn_out)
}

/// 16-bit weight copies a step keeps for backward.
struct WeightCopies {
    per_layer: Count,
    head: Count,
    largest_parametrized: Count,
}

/// An fp32 frozen base under autocast: each matmul casts its weight to 16-bit, and the linear keeps that copy for
/// its input's gradient (autocast caches only casts of weights that train). Checkpointing recomputes them one
/// layer at a time. Sharded, the gathered layer is that copy (see ShardBuffers). A GPTQ base does the same:
/// auto-gptq's QuantLinear, in its PyTorch path (above 128 tokens, and always under ms-swift), dequantizes its
/// weight to 16-bit and multiplies with `torch.matmul`, which keeps that weight for the input's gradient.
fn weight_copies(s: &Setup, resident: &Resident, head_trainable: bool) -> WeightCopies {
    let (arch, plan, d) = (s.arch, s.plan, s.d);
    let gptq = plan.gptq_bits().is_some();
    let fp32_frozen_base =
        d.amp && d.weight == 4.0 && plan.method == Method::Lora && !d.sharded_cast;
    // Expert parameters LoRA reaches through `target_parameters`: all of them are rebuilt dense and kept, and the
    // largest one's dense gradient passes through backward. Building W + BA casts each expert's A and B to the
    // compute dtype, and the product keeps both casts (up's A is the gate half's).
    let shared_a = parametrized_gate_up(plan, &s.linears);
    let rank = plan.rank as Count;
    let (parametrized_weights, largest_parametrized, factors) =
        s.linears.iter().filter(|l| parametrized(plan, l)).fold(
            (0.0, 0.0, 0.0),
            |(sum, max, factors): (Count, Count, Count), l| {
                let w = l.weight_params() as Count;
                let a_in = if a_shared_with_gate(l, shared_a) {
                    0.0
                } else {
                    l.in_features as Count
                };
                let f = l.copies as Count * rank * (a_in + l.out_features as Count);
                (sum + w, max.max(w), factors + f)
            },
        );
    let factor_casts = if d.adapter_compute != d.compute {
        d.compute * factors
    } else {
        0.0
    };
    let per_layer = if fp32_frozen_base {
        d.compute * arch.layer_linear_weight_params() as Count
    } else if gptq {
        d.compute * resident.quantized_layer_weights
    } else {
        0.0
    } + d.compute * parametrized_weights
        + factor_casts;
    // The frozen fp32 head is cast the same way for each matmul it takes part in: once for the whole batch, or
    // once per chunk of a chunked head (litgpt's 128 tokens), each copy kept until that chunk's backward. QLoRA's
    // head is such a head too once `prepare_model_for_kbit_training` upcasts every unquantized weight (HF QLoRA
    // traced on CPU keeps a 16-bit vocab x hidden copy from the head's forward to its backward).
    // The head is an fp32 weight under autocast whenever the unquantized weights are (LoRA's fp32 base, upcast
    // QLoRA), unless FSDP gathers it already cast or litgpt quantized it.
    let fp32_frozen_head = d.amp && d.weight == 4.0 && !d.sharded_cast && !s.head_quantized;
    // TRL's log-probability head (a preference task) casts a vocabulary chunk at a time and keeps none.
    let head = if fp32_frozen_head && !head_trainable && s.loss == Some(Loss::Standard) {
        let chunks = match s.profile.head_chunk_tokens {
            Some(tokens) => ceil_div(positions(plan), tokens as Count),
            None => 1.0,
        };
        chunks * d.compute * arch.vocab as Count * s.hidden
    } else {
        0.0
    };
    WeightCopies {
        per_layer,
        head,
        largest_parametrized,
    }
}
