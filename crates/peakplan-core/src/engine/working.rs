//! Stage 4, working memory: what exists only while something runs. Backward's activation gradients (and one
//! recomputed layer under checkpointing), QLoRA's dequantized weights and LLM.int8's quantized inputs, PEFT's
//! dense buffers (DoRA, LoHa, trainable tokens), DDP's buckets, and the
//! quantization transient at load.

use super::activations::Activations;
use super::count::Count;
use super::deepspeed::{reduce_buckets, ReduceBuckets};
use super::resident::Resident;
use super::saved::unsloth_kernels;
use super::setup::{adapted, quantizes, Setup};
use crate::plan::{Attn, Method, Peft, Quant, TokenTraining};
use crate::profile::BackwardGrads;

pub(super) struct Working {
    /// Gradients of one layer's activations in flight.
    pub grad_flow: Count,
    /// `grad_flow` and the recomputed layer under checkpointing.
    pub backward_work: Count,
    pub dequant_buffer: Count,
    pub peft_buffers: Count,
    pub ddp_buckets: Count,
    /// DeepSpeed's gradient reduce buckets ([`reduce_buckets`]).
    pub reduce_buckets: ReduceBuckets,
    pub load_transient: Count,
    /// Weights of the layer's largest linear.
    pub largest_linear: Count,
}

pub(super) fn working(s: &Setup, resident: &Resident, acts: &Activations) -> Working {
    let plan = s.plan;
    let (grad_flow, backward_work) = backward(s, acts);
    let largest_linear = s.largest_linear(|_| true);
    // Weights of the largest quantized linear of a layer: what one dequantization or one load-time quantization
    // handles.
    let largest_quantized = s.largest_linear(|l| quantizes(l, plan));
    let ddp_buckets = if plan.gpus > 1 && s.zero == 0 {
        resident.trainable_bytes
    } else {
        0.0
    };
    // Loading a QLoRA model quantizes one weight at a time: its 16-bit copy, and with the wide quantizer two
    // (weights x 16) 16-bit tensors comparing every weight with the 16 NF4 values.
    let load_transient =
        if plan.method == Method::Qlora && plan.quantize_at_load_wide && plan.gptq_bits().is_none()
        {
            (2.0 + 2.0 * 16.0 * 2.0) * largest_quantized
        } else {
            0.0
        };
    Working {
        grad_flow,
        backward_work,
        dequant_buffer: dequant(s, largest_quantized),
        peft_buffers: peft_buffers(s),
        ddp_buckets,
        reduce_buckets: reduce_buckets(s, resident.trainable),
        load_transient,
        largest_linear,
    }
}

/// Working memory of backward: one layer's activation gradients, and one recomputed layer under checkpointing.
/// Returns (the gradients in flight, with the recomputed layer).
fn backward(s: &Setup, acts: &Activations) -> (Count, Count) {
    let (arch, plan, d, n, h) = (s.arch, s.plan, s.d, s.tokens, s.hidden);
    // Softmax backward makes a gradient the size of the scores it reads (eager attention only).
    let scores_grad = if plan.attn == Attn::Eager {
        acts.layer.scores
    } else {
        0.0
    };
    // A parametrized expert parameter's dense 16-bit gradient, on its way to B and A.
    let parametrized_grad = d.compute * acts.largest_parametrized;
    // The widest MLP in backward: the routed experts' rows, or a shared expert's, whose backward runs apart.
    let mlp_inner =
        (arch.intermediate as Count * s.k_route).max(arch.shared_expert_intermediate as Count);
    let grad_flow = if unsloth_kernels(s, plan) {
        // Unsloth's MLP backward makes one intermediate-wide gradient (dY through down's weight) and writes the
        // activation's and both projections' gradients in place into it and the kept e and g; the input's
        // gradient goes into the kept input's storage.
        2.0 * d.residual * n * h + d.compute * n * mlp_inner + scores_grad
    } else {
        match s.profile.backward_grads {
            // The residual stream's gradient, and the MLP's three gradients at their widest moment.
            BackwardGrads::F32Buffers => 4.0 * n * h + 12.0 * n * mlp_inner + scores_grad,
            BackwardGrads::Autograd => {
                2.0 * d.residual * n * h + 3.0 * d.mlp * n * mlp_inner + scores_grad
            }
        }
    } + parametrized_grad;
    let recompute = if plan.checkpointing.on() {
        acts.layer.bytes + acts.layer.scores + acts.mask + acts.copies_per_layer
    } else {
        0.0
    };
    (grad_flow, grad_flow + recompute)
}

/// QLoRA dequantizes the largest 4-bit linear to the compute dtype for each matmul; LLM.int8 quantizes inputs.
fn dequant(s: &Setup, largest_quantized: Count) -> Count {
    let (arch, plan, d) = (s.arch, s.plan, s.d);
    // Fused dequantize-matmul kernels (the WebGPU runtime's) never materialize a dense weight.
    if plan.method != Method::Qlora || !s.profile.dequantizes_dense {
        return 0.0;
    }
    let head = if s.head_quantized {
        arch.vocab as Count * arch.hidden as Count
    } else {
        0.0
    };
    // A quantized head is litgpt's bitsandbytes plugin, which quantizes from fp16: each dequantization returns
    // fp16 and the cast to the bf16 compute dtype is a second dense copy beside it.
    let copies = if s.head_quantized && d.compute == 2.0 {
        2.0
    } else {
        1.0
    };
    // Unsloth's matmuls dequantize into one global buffer the size of the largest weight, and its kernels'
    // backward dequantizes each transposed weight into a fresh tensor beside it (`fast_dequantize`).
    let copies = if unsloth_kernels(s, plan) {
        2.0
    } else {
        copies
    };
    let backward = copies * d.compute * largest_quantized.max(head);
    if plan.quant != Quant::Int8 {
        return backward;
    }
    // LLM.int8's forward multiplies in int8: each matmul quantizes its input row- and column-wise (two int8
    // copies) and accumulates an int32 output before scaling it back; its backward dequantizes the weight.
    let forward = s
        .linears
        .iter()
        .filter(|l| quantizes(l, plan))
        .map(|l| s.tokens * (2.0 * l.in_features as Count + 4.0 * l.out_features as Count))
        .fold(0.0, Count::max);
    backward.max(forward)
}

/// PEFT's dense working buffers.
fn peft_buffers(s: &Setup) -> Count {
    let (plan, d) = (s.plan, s.d);
    let largest = s.largest_linear(|l| adapted(plan, l));
    let dora = match plan.peft {
        _ if plan.method == Method::Full => 0.0,
        // B·A in the adapter dtype, and W + s·BA promoted to fp32 for the norm.
        Peft::Dora => (d.adapter + 4.0) * largest,
        // LoHa's two dense rank-r products in flight before their Hadamard product (and again in backward,
        // where each factor's gradient multiplies the other product).
        Peft::Loha => 2.0 * d.adapter * largest,
        _ => 0.0,
    };
    let tokens = match plan.tokens {
        TokenTraining::Rows(_) if plan.method != Method::Full => d.weight * s.vocab * s.hidden,
        _ => 0.0,
    };
    dora.max(tokens)
}
