//! Stage 5, the timeline: what is live at each phase of the step (loaded, end of forward, the largest moment of
//! backward, the optimizer step), category by category, and which phase is the peak. It owns the order of
//! events inside backward: the loss's backward, the head's (where a trainable head's gradient arrives in shares),
//! the layers', and the end, where a tied embedding adds its share.

use super::activations::Activations;
use super::count::Count;
use super::generation::Generation;
use super::logits::{LogProbHead, Logits};
use super::reference::Reference;
use super::resident::Resident;
use super::setup::Setup;
use super::sharding::Sharded;
use super::working::Working;
use crate::plan::{Loss, Method};
use crate::profile::ChunkedLoss;

/// Live bytes by category (weights, gradients, optimizer, activations, other) at one moment.
pub(super) type Live = [Count; 5];

/// The four phases' live bytes, and the peak.
pub(super) struct Timeline {
    /// Indexed like [`crate::engine::Phase::ALL`]: loaded, generation, end of forward, reference pass, backward,
    /// step.
    pub phases: [Live; 6],
    /// Backward's moments in order (the loss's backward, the head's, the layers', the end); the largest is the
    /// backward phase. The head's is all zeros where no head gradient is live there.
    pub backward_moments: [Live; 4],
    /// What every moment holds regardless of the moment.
    pub held: Held,
    /// A trainable head's gradient through backward.
    pub head: HeadBackward,
    /// Optimizer-in-backward's step in the layers (a gradient and the step's temporaries) and at the end (the
    /// temporaries); 0 otherwise.
    pub step_in_bwd: Count,
    pub step_temps_in_bwd: Count,
    /// DeepSpeed ZeRO-3's `initialize` hook gather (its third load moment): the largest trainable parameter
    /// whole, and the 16-bit gradient partitions kept beside it; zeros elsewhere.
    pub hook_gather: [Count; 2],
    /// Index of the peak phase in [`crate::engine::Phase::ALL`].
    pub peak_phase: usize,
    pub peak: Count,
}

/// What every moment of the step holds regardless of the moment.
pub(super) struct Held {
    pub weights: Count,
    pub optimizer: Count,
    pub other: Count,
    /// Gradients summed from earlier micro-batches.
    pub grads: Count,
    /// Dequantization, PEFT and gathered-layer buffers of a running matmul.
    pub buffers: Count,
    /// What the layers keep for backward.
    pub kept_in_layers: Count,
    /// That, and the head's 16-bit copies kept until the head's backward.
    pub kept_to_head: Count,
    /// Offloaded checkpoints' reload buffers, kept from the first forward on.
    pub reload: Count,
}

/// The phases of the step; a task's stages (its reference and its generation round) come as one pair.
pub(super) fn timeline(
    s: &Setup,
    r: &Resident,
    a: &Activations,
    l: &Logits,
    w: &Working,
    sh: &Sharded,
    (reference, g): (&Reference, &Generation),
) -> Timeline {
    let kept_in_layers = a.saved + a.layer_weight_copies + a.scores + a.checkpoints;
    let held = Held {
        weights: r.base_weights + r.quant_constants + r.adapter_weights + reference.weights,
        optimizer: r.optimizer_states + r.master_weights,
        // GRPO's buffered round from its generation on; vLLM's share from start-up.
        other: w.ddp_buckets + w.reduce_buckets.resident + r.input_buffers + g.buffered + g.vllm,
        // With accumulation, the gradients summed so far stay through each later micro-batch's forward and
        // backward (optimizer-in-backward steps every micro-batch instead); whole on every GPU inside `no_sync`.
        grads: sh.held_grads,
        buffers: w.dequant_buffer + w.peft_buffers,
        kept_in_layers,
        kept_to_head: kept_in_layers + a.head_copies,
        reload: a.reload_buffers,
    };
    let head = head_backward(s, r);
    // Loading peaks once loaded, or (under DeepSpeed) at one of `initialize`'s moments, or with the model loaded
    // whole before DeepSpeed partitions it (ZeRO-3 without `zero.Init`), or as made under `zero.Init`: the model
    // as made, before PEFT or DeepSpeed's optimizer add to it, every partition and the last module made whole
    // beside them (the events make it at the end of loading).
    let plain = [[
        held.weights,
        0.0,
        held.optimizer,
        0.0,
        held.other - g.buffered + w.load_transient,
    ]];
    let initialized =
        s.d.deepspeed_16bit
            .then(|| deepspeed_initialized(s, r, w, &held, g));
    let (loaded, hook_gather): (&[Live], _) = match &initialized {
        Some((moments, hook)) => (moments, *hook),
        None => (&plain, [0.0; 2]),
    };
    let whole = [
        r.loaded_whole + r.first_partition,
        0.0,
        0.0,
        0.0,
        r.input_buffers + w.reduce_buckets.resident,
    ];
    let constructed = [
        held.weights - reference.weights,
        0.0,
        0.0,
        0.0,
        held.other - g.buffered + r.constructed_whole,
    ];
    let load = largest(loaded.iter().chain([&whole, &constructed]));
    let fwd = [
        held.weights + sh.gathered[0],
        held.grads + head.fused_grad,
        held.optimizer,
        held.kept_to_head + l.forward + a.previous_inputs + l.kv_cache + held.reload,
        held.other + held.buffers,
    ];
    // GRPO's round: generating (a running matmul's buffers too), then scoring with the reference a micro-batch
    // at a time, before the first forward; its largest moment is the phase.
    let generation = if s.plan.task.generates() {
        let generate = g.largest() + held.buffers;
        let scoring = reference.pass + held.buffers;
        [
            held.weights,
            // zero_grad(set_to_none=True) ended the last step: no gradient is held yet.
            0.0,
            held.optimizer,
            generate.max(scoring),
            held.other,
        ]
    } else {
        [0.0; 5]
    };
    // The reference forward runs with everything the end of forward holds (a running matmul's buffers too: a
    // quantized base dequantizes for the reference as for the policy). GRPO's runs in its generation round.
    let reference_pass = if reference.pass > 0.0 && !s.plan.task.generates() {
        let mut m = fwd;
        m[3] += reference.pass;
        m
    } else {
        [0.0; 5]
    };
    let (bwd, backward_moments, step_in_bwd, step_temps_in_bwd) =
        backward(s, r, l, w, sh, &held, &head);
    // DeepSpeed's step reads the 16-bit gradients of this GPU's partition: ZeRO-3's kept buffer, ZeRO-1's and
    // 2's the gradients of every parameter reaching into the partition (offloaded, on the CPU).
    let step_grads = if !s.d.deepspeed_16bit {
        r.gradients
    } else if s.plan.cpu_offload {
        0.0
    } else if s.zero >= 3 {
        r.gradients
    } else {
        s.d.weight * super::deepspeed::gradient_partition(s, r.trainable)
    };
    let opt = [
        held.weights,
        step_grads,
        held.optimizer,
        l.held_output + held.reload,
        held.other + r.optimizer_temps,
    ];
    let phases = [load, generation, fwd, reference_pass, bwd, opt];
    let (mut peak_phase, mut peak) = (0, 0.0);
    for (i, total) in phases.map(|a| a.iter().sum::<Count>()).iter().enumerate() {
        if *total >= peak {
            peak = *total;
            peak_phase = i;
        }
    }
    Timeline {
        phases,
        backward_moments,
        held,
        head,
        step_in_bwd,
        step_temps_in_bwd,
        hook_gather,
        peak_phase,
        peak,
    }
}

/// The moment that holds the most; the first of equals.
fn largest<'a>(moments: impl IntoIterator<Item = &'a Live>) -> Live {
    let total = |m: &Live| m.iter().sum::<Count>();
    moments
        .into_iter()
        .fold(None, |best: Option<Live>, m| match best {
            Some(b) if total(&b) >= total(m) => Some(b),
            _ => Some(*m),
        })
        .unwrap_or([0.0; 5])
}

/// Loading under DeepSpeed, three moments: the model as loaded (with ZeRO-3's reduce bucket, made with the optimizer
/// and kept), then `initialize`'s two largest ([`super::deepspeed::initialize`]): its fp32 gradient buffer beside the
/// partitions and master weights (before ZeRO-3's reduce bucket), and ZeRO-3's hook gathers beside its kept
/// 16-bit gradient partitions (on the CPU when offloaded). Returns them, and the hook gather's two parts.
fn deepspeed_initialized(
    s: &Setup,
    r: &Resident,
    w: &Working,
    held: &Held,
    g: &Generation,
) -> ([Live; 3], [Count; 2]) {
    let init = super::deepspeed::initialize(s, r.trainable, r.largest_tensor);
    let other = held.other - g.buffered;
    let kept_grads = if s.zero >= 3 && !s.plan.cpu_offload {
        held.grads
    } else {
        0.0
    };
    let moments = [
        [held.weights, 0.0, 0.0, 0.0, other + w.load_transient],
        [
            held.weights,
            init.fp32_grad_bytes,
            r.master_weights,
            0.0,
            other - w.reduce_buckets.resident,
        ],
        [
            held.weights + init.hook_gather_bytes,
            kept_grads,
            r.master_weights,
            0.0,
            other,
        ],
    ];
    (moments, [init.hook_gather_bytes, kept_grads])
}

/// Backward's moments, in order: the loss's backward, the head's, the layers', the end; the largest is the phase.
/// Returns it, the moments, and optimizer-in-backward's step in the layers and at the end.
fn backward(
    s: &Setup,
    r: &Resident,
    l: &Logits,
    w: &Working,
    sh: &Sharded,
    held: &Held,
    head: &HeadBackward,
) -> (Live, [Live; 4], Count, Count) {
    let plan = s.plan;
    // Optimizer-in-backward steps each parameter inside backward: its gradient and step temporaries join there.
    let step_temps_in_bwd = if plan.optimizer_in_backward {
        r.optimizer_temps
    } else {
        0.0
    };
    let step_in_bwd = if plan.optimizer_in_backward {
        step_temps_in_bwd
            + if plan.method == Method::Full {
                // In the layers a layer's largest weight steps (the head has stepped, or waits for a tied
                // embedding and is counted on its own); the embedding's turn is the end.
                w.largest_linear * r.param_bytes
            } else {
                r.gradients
            }
    } else {
        0.0
    };
    let at_head = if head.grads_live > 0.0 {
        [
            held.weights + sh.gathered[1],
            held.grads + head.grads_live,
            held.optimizer,
            held.kept_to_head + head.logits + l.held_output + held.reload,
            held.other,
        ]
    } else {
        [0.0; 5]
    };
    // DeepSpeed's end of backward reduces its last bucket: where every gradient fit in it, they live there (a
    // bucket counted apart), copied out for the reduction.
    let end_grads = if w.reduce_buckets.grads_in_bucket {
        0.0
    } else {
        r.gradients
    };
    let moments = [
        [
            held.weights + sh.gathered[1],
            held.grads + head.fused_grad,
            held.optimizer,
            held.kept_to_head + l.backward + l.held_kv + held.reload,
            held.other,
        ],
        at_head,
        [
            held.weights + sh.gathered[2],
            held.grads + head.grad_in_layers,
            held.optimizer,
            held.kept_in_layers + l.held_output + held.reload,
            held.other
                + w.reduce_buckets.in_backward
                + w.backward_work
                + held.buffers
                + step_in_bwd,
        ],
        [
            held.weights + sh.gathered[3],
            end_grads + head.tied_end,
            held.optimizer,
            l.held_output + held.reload,
            held.other
                + w.reduce_buckets.in_backward
                + w.reduce_buckets.reduce_copy
                + w.grad_flow
                + held.buffers
                + step_temps_in_bwd,
        ],
    ];
    let bwd = largest(&moments);
    (bwd, moments, step_in_bwd, step_temps_in_bwd)
}

/// A trainable head's gradient through backward.
pub(super) struct HeadBackward {
    /// The head's gradient as Liger's fused linear cross-entropy holds it from the loss's forward on.
    pub fused_grad: Count,
    /// The head's gradient while backward is in the layers.
    pub grad_in_layers: Count,
    /// Logit gradients still live at the head's backward.
    pub logits: Count,
    /// Head-weight gradients live at the head's backward.
    pub grads_live: Count,
    /// What a tied embedding's share adds at the end.
    pub tied_end: Count,
}

/// A trainable head's weight gradient appears in the head's backward, right after the loss's. When the head runs
/// in chunks (torchtune's chunked loss) each chunk's matmul makes a whole vocab x hidden gradient, a transposed
/// view that autograd cannot add into in place: the sum so far, the new share and their sum exist at once.
/// Autograd takes the most recently created node first, so every chunk's cross-entropy backward runs before any
/// head matmul, and all chunks' 16-bit logit gradients are still there when the head's begin. Traced with torch
/// 2.15's profiler (no Python dispatch mode, which itself blocks in-place adds): at the first add, two head
/// matmuls' gradients, their sum and six chunks' logit gradients are live.
/// The gradient then stays through the layers: as `.grad`, or, under optimizer-in-backward, until a tied
/// embedding adds its share at the very end. It is whole even when sharded or offloaded: FSDP and DeepSpeed
/// reduce-scatter (and offload) a gradient after autograd has summed it, and the head's unit is the root one,
/// whose turn comes at the end of backward.
fn head_backward(s: &Setup, r: &Resident) -> HeadBackward {
    let (arch, plan) = (s.arch, s.plan);
    let (n, v) = (s.tokens, s.vocab);
    let head_grad = if plan.method == Method::Full {
        arch.vocab as Count * s.hidden * r.param_bytes
    } else {
        0.0
    };
    let accumulating = plan.grad_accumulation > 1 && !plan.optimizer_in_backward;
    let tied = s.head_tied;
    // Accumulating, the head's gradient is added into the `.grad` held from earlier micro-batches when that is
    // whole on the GPU; sharded (ZeRO-2/3), offloaded or under DeepSpeed (which accumulates into gradient
    // partitions of its own at every stage), the head's whole gradient exists beside them until it is reduced.
    let into_held = accumulating && s.zero < 2 && !plan.cpu_offload && !s.d.deepspeed_16bit;
    let grad_in_layers = if tied {
        // The summed share waits in autograd's buffer for the embedding's, at the very end.
        head_grad
    } else if plan.optimizer_in_backward || into_held {
        // Stepped and freed at once, or added into the held `.grad`.
        0.0
    } else {
        head_grad
    };
    // torchtune's chunked loss runs the head as 8 matmuls, each adding its share of the gradient.
    let chunked_head =
        s.loss == Some(Loss::Chunked) && s.profile.chunked_loss == ChunkedLoss::EightChunksKept;
    let (logits, grads_live) = match s.loss {
        _ if head_grad == 0.0 => (0.0, 0.0),
        // TRL's log-probability head: its backward accumulates the head's gradient in fp32 beside its own
        // buffers, and returns it in the weights' dtype.
        // ORPO and CPO's full logits: their gradient, summed, is what the head's matmul reads.
        None if plan.task.full_logits() => (s.d.compute * n * v, head_grad),
        None => {
            let lp = LogProbHead::of(s);
            (lp.kept + lp.backward + lp.head_grad_fp32, head_grad)
        }
        _ if chunked_head => {
            let all = s.d.compute * n * v;
            if all + head_grad >= all * 6.0 / 8.0 + 3.0 * head_grad {
                (all, head_grad)
            } else {
                (all * 6.0 / 8.0, 3.0 * head_grad)
            }
        }
        // A cross-entropy kernel (unsloth) leaves the 16-bit logits' gradient for the head's matmul, like the
        // standard loss.
        Some(Loss::Standard | Loss::Kernel) if s.profile.head_grad_after_loss => {
            (s.d.compute * n * v, head_grad)
        }
        // Liger's fused linear cross-entropy computes the head's gradient in the forward; the WebGPU runtime
        // trains adapters only.
        _ => (0.0, 0.0),
    };
    // A tied embedding's share arrives last and joins the head's in autograd's buffer. A single head matmul left a
    // transposed view there, so the sum is out of place: both shares and the sum (traced on CPU: 3 x 788 MB at the
    // end of torchtune's unchunked full fine-tune). Chunked, the buffer is already a sum and takes the share in
    // place. Accumulating, the result is then added into the held `.grad`, so none of it is that `.grad`.
    let tied_end = if tied && head_grad > 0.0 {
        let extra = if chunked_head { 1.0 } else { 2.0 } + if accumulating { 1.0 } else { 0.0 };
        extra * head_grad
    } else {
        0.0
    };
    HeadBackward {
        // Liger's fused linear cross-entropy accumulates the head's weight gradient chunk by chunk during the
        // loss's forward, so it exists from the loss on.
        fused_grad: if s.loss == Some(Loss::Fused) {
            head_grad
        } else {
            0.0
        },
        grad_in_layers,
        logits,
        grads_live,
        tied_end,
    }
}
