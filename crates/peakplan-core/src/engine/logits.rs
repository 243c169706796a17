//! Stage 3b, the model's output: the logits and the loss as each framework computes them (standard, chunked,
//! fused and kernel losses; Gemma 2's softcapping), what a training loop holds of the output through backward,
//! and the key/value cache a Hugging Face model returns when trained without checkpointing.

use super::count::{ceil_div, Count};
use super::setup::{prefix_tokens, Setup};
use crate::arch::Target;
use crate::plan::{Attn, Loss, Method, Peft};
use crate::profile::{ChunkedLoss, FusedLoss, KernelLoss, StandardLoss};

/// The output's memory through the step.
pub(super) struct Logits {
    /// What the loss keeps at the end of forward.
    pub forward: Count,
    /// What the loss's backward holds at its largest, with what the loop holds of the output.
    pub backward: Count,
    /// The largest one block the loss allocates (for the allocator's cache).
    pub block: Count,
    pub kv_cache: Count,
    /// The key/value cache while a loop that keeps the output holds it.
    pub held_kv: Count,
    /// What a loop that keeps the model output holds through backward and the step.
    pub held_output: Count,
}

pub(super) fn logits(s: &Setup) -> Logits {
    let (arch, plan, d, n, v) = (s.arch, s.plan, s.d, s.tokens, s.vocab);
    let (forward, backward, block) = loss_memory(s);
    // Gemma 2 softcaps the logits before the loss: under transformers (traced on CPU) the tanh output waits for
    // backward beside them. litgpt's chunked head and torchtune's losses are not traced; they stay as they were.
    let softcap = if arch.final_logit_softcap
        && (s.loss == Some(Loss::Standard) || plan.task.full_logits())
        && s.profile.softcap_output_kept
    {
        d.compute * n * v
    } else {
        0.0
    };
    let (forward, backward) = (forward + softcap, backward + softcap);
    let forward = forward.max(head_lora_forward(s));
    // A loop that keeps the model's output until after the optimizer step holds the returned logits through
    // backward and the step: fsdp_qlora's `output`, and torchtune's recipes before they learned to `del logits`
    // (mid-2024). litgpt's profile keeps its logits already; chunked and fused losses return none.
    let held_logits = if s.loss == Some(Loss::Standard) && s.profile.loop_may_hold_logits {
        plan.hold_logits_bits as Count / 8.0 * n * v
    } else {
        0.0
    };
    let backward = backward + held_logits;
    // Without checkpointing a Hugging Face model leaves `use_cache` on in training and fills a key/value cache with
    // every layer's rotated keys and values, unexpanded, returned with the output. Where attention works on
    // head-expanded copies (grouped-query attention under SDPA or eager) the cache's tensors are extra; flash
    // kernels keep the grouped ones themselves. The cache goes when the loop drops the output: before backward
    // under the Trainer, after the step in loops that keep it (`hold`). TRL's log-probability head is called
    // with `use_cache=False`.
    let kv_cache = if s.loss.is_some()
        && s.profile.returns_kv_cache
        && !plan.checkpointing.on()
        && plan.attn != Attn::Flash
        && arch.kv_dim() < arch.q_dim()
    {
        s.layers
            * 2.0
            * d.compute
            * arch.kv_dim() as Count
            * (n + plan.micro_batch as Count * prefix_tokens(plan))
    } else {
        0.0
    };
    let held_kv = if plan.hold_logits_bits > 0 {
        kv_cache
    } else {
        0.0
    };
    Logits {
        forward,
        backward,
        block,
        kv_cache,
        held_kv,
        held_output: held_logits + held_kv,
    }
}

/// (kept at the end of forward, held at the largest moment of the loss's backward, the largest block), as the
/// profile computes the plan's loss.
fn loss_memory(s: &Setup) -> (Count, Count, Count) {
    let (plan, d, n, v) = (s.plan, s.d, s.tokens, s.vocab);
    let Some(loss) = s.loss else {
        if plan.task.full_logits() {
            return full_logits_head(s);
        }
        let head = LogProbHead::of(s);
        return (head.kept, head.kept + head.backward, head.tile);
    };
    match loss {
        Loss::Standard => standard_loss(s),
        Loss::Kernel if s.profile.kernel_loss == KernelLoss::Standard => standard_loss(s),
        Loss::Kernel => {
            // unsloth's cross-entropy kernel reads the 16-bit logits and keeps a log-sum-exp per token; its
            // backward writes the logits' gradient into their own buffer.
            let c = d.compute;
            (c * n * v + 4.0 * n, c * n * v + 4.0 * n, c * n * v)
        }
        Loss::Chunked => match s.profile.chunked_loss {
            ChunkedLoss::EightChunksKept => torchtune_chunked_loss(s),
            ChunkedLoss::NormKeptChunksRecomputed => webgpu_chunked_loss(s),
            ChunkedLoss::HeadUpcastPerChunk => {
                let chunk = (plan.chunk as Count).min(n);
                // TRL's chunked NLL upcasts the head weight to fp32 for each chunk, and keeps no logits between
                // chunks.
                let head_copy = if d.weight == 4.0 {
                    0.0
                } else {
                    4.0 * v * s.hidden
                };
                (
                    head_copy + 8.0 * chunk * v,
                    head_copy + 16.0 * chunk * v,
                    4.0 * chunk * v,
                )
            }
        },
        Loss::Fused if s.profile.fused_loss == FusedLoss::UnslothChunks => unsloth_fused_loss(s),
        Loss::Fused => {
            // Liger's fused linear cross-entropy: chunks sized so a chunk of logits is about the input's size,
            // with the input gradient computed in the forward and kept.
            let (c, h) = (d.compute, s.hidden);
            let inc = ceil_div(v, h);
            let chunk = (ceil_div(n, inc) as u64).next_power_of_two() as Count;
            (c * chunk * v + c * n * h, c * n * h, c * chunk * v)
        }
    }
}

/// The fp32 logits a chunk of Unsloth's fused loss may hold: `min(0.5 x free memory, 4 GiB)`, read once at the
/// first call (`_get_chunk_multiplier`). The plan assumes half the free memory is at least 4 GiB (8 GiB free at
/// the first step); on a fuller card the chunks are smaller than counted here.
pub(super) const UNSLOTH_LOSS_TARGET_BYTES: Count = 4.0 * 1024.0 * 1024.0 * 1024.0;

/// The chunks unsloth-zoo's fused loss splits `n` tokens into (`get_chunk_size`): `4 x round(fp32 logits /
/// (4 x target))`, at least 1, so one chunk's fp32 logits stay within about twice the target.
pub(super) fn unsloth_loss_chunks(n: Count, v: Count) -> Count {
    (4.0 * (4.0 * n * v / (4.0 * UNSLOTH_LOSS_TARGET_BYTES)).round()).max(1.0)
}

/// unsloth-zoo's `UnslothFusedLoss` (`fused_losses/cross_entropy_loss.py`): the tokens' hidden states in chunks
/// (`torch.chunk`: `ceil(n / chunks)` rows each); each chunk's loss and input gradient computed in forward
/// (`torch.func.grad_and_value`) and written into `grad_inputs` (`empty_like(hidden_states)`), which is all forward
/// keeps. The chunk loop is `torch.compile`d (`fullgraph`): the head's matmul writes the chunk's 16-bit logits, and
/// the fp32 upcast, log-softmax and their gradient fuse into the kernels that read them and write the logits'
/// 16-bit gradient, so a chunk holds two logits-sized 16-bit tensors. Backward scales the kept gradient out of
/// place, so it and its scaled copy meet. No logits outlive a chunk.
fn unsloth_fused_loss(s: &Setup) -> (Count, Count, Count) {
    let (c, n, v, h) = (s.d.compute, s.tokens, s.vocab, s.hidden);
    let rows = ceil_div(n, unsloth_loss_chunks(n, v));
    let grad_inputs = c * n * h;
    (
        grad_inputs + 2.0 * c * rows * v,
        2.0 * grad_inputs,
        c * rows * v,
    )
}

/// The standard loss as the profile computes it. The plain one keeps 16-bit logits, their fp32 upcast and the
/// log-softmax output at the end of forward; backward peaks with the log-softmax output, its incoming gradient and
/// the gradient it produces, all fp32.
fn standard_loss(s: &Setup) -> (Count, Count, Count) {
    let (plan, d, n, v) = (s.plan, s.d, s.tokens, s.vocab);
    match s.profile.standard_loss {
        // The Trainer's torch_compile compiles the model with its loss: one fused cross-entropy that keeps the
        // 16-bit logits (and a log-sum-exp per token) and recomputes the softmax in backward, where the logits'
        // gradient and one more logits-sized buffer join them (traced on CPU with inductor: 3 x 16-bit per logit
        // at backward's peak, where the eager loss holds 12 B).
        StandardLoss::UpcastModelLogits if plan.compile => {
            let c = d.compute;
            (c * n * v + 4.0 * n, 3.0 * c * n * v, c * n * v)
        }
        StandardLoss::UpcastModelLogits => {
            let up = if d.compute == 4.0 { 0.0 } else { 4.0 };
            ((d.compute + up + 4.0) * n * v, 12.0 * n * v, 4.0 * n * v)
        }
        StandardLoss::Fp32LogitsDropped => torchtune_standard_loss(s),
        StandardLoss::Fp32LogitsKept => {
            // Fabric returns the head's output cast to the default dtype, fp32, and `fit()` keeps those logits
            // through backward. LoRA recipes run the head in 128-token chunks with a cross-entropy per chunk,
            // each keeping its fp32 log-softmax; in backward the chunks' gradients arrive in fp32 (the logits'
            // dtype) beside them: 12 B per logit at the loss's peak (litgpt 0.5.13 traced on CPU; 10 B were
            // counted, from 16-bit gradients). Full fine-tuning runs the head unchunked: the fp32 log-softmax,
            // its incoming gradient and the gradient it makes beside the kept logits, 12 B.
            let chunk = n.min(head_chunk_tokens(s)) * v;
            if plan.method == Method::Full {
                (8.0 * n * v, 12.0 * n * v, 4.0 * n * v)
            } else {
                (8.0 * n * v + d.compute * chunk, 12.0 * n * v, 4.0 * chunk)
            }
        }
        StandardLoss::F32LogitsKept => webgpu_standard_loss(s),
    }
}

/// Tokens of each chunk an adapter plan's head runs in (`Profile::head_chunk_tokens`), or every token at once.
fn head_chunk_tokens(s: &Setup) -> Count {
    s.profile
        .head_chunk_tokens
        .map_or(Count::INFINITY, |t| t as Count)
}

/// LoRA on the LM head under transformers: PEFT computes `base(x) + lora_B(lora_A(x)) * scaling`, so at the add the
/// base logits, lora_B's output, its scaled copy and their sum (in the wider of the two dtypes, which the loss then
/// need not upcast) all exist: the step's peak when the adapters are fp32 (traced on CPU: three fp32 and one
/// 16-bit vocab-wide tensors per token at the add). 0 where the head carries no LoRA.
fn head_lora_forward(s: &Setup) -> Count {
    let (plan, d, n, v) = (s.plan, s.d, s.tokens, s.vocab);
    let lora = matches!(
        plan.peft,
        Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa
    );
    if plan.method == Method::Full
        || !lora
        || !plan.targets.contains(Target::LmHead)
        || s.loss != Some(Loss::Standard)
        || !s.profile.head_lora_out_of_place
    {
        return 0.0;
    }
    let ad = if d.amp { d.compute } else { d.adapter };
    (d.compute + 2.0 * ad + d.compute.max(ad)) * n * v
}

/// torchtune's standard loss. The decoder returns `output(h).float()` and the recipe deletes its reference after
/// the loss: the fp32 log-softmax stays for backward, which adds its incoming gradient and the gradient it makes.
/// Under compile the loss is one fused kernel that keeps the fp32 logits themselves instead, but only in
/// `lora_finetune_single_device`: the full and distributed recipes (0.4 to 0.6) call
/// `training.compile_loss(loss)` without keeping the compiled module it returns, which only patches the chunked
/// loss in place, so a plain cross-entropy runs eagerly there (traced on CPU: 12 B per logit).
fn torchtune_standard_loss(s: &Setup) -> (Count, Count, Count) {
    let (plan, n, v) = (s.plan, s.tokens, s.vocab);
    let c = s.d.compute;
    if plan.compile && plan.method != Method::Full && plan.gpus == 1 {
        ((c + 4.0) * n * v, 8.0 * n * v, 4.0 * n * v)
    } else {
        ((c + 4.0).max(8.0) * n * v, 12.0 * n * v, 4.0 * n * v)
    }
}

/// torchtune's chunked loss.
fn torchtune_chunked_loss(s: &Setup) -> (Count, Count, Count) {
    let (plan, n, v) = (s.plan, s.tokens, s.vocab);
    let c = s.d.compute;
    // CEWithChunkedOutputLoss: the head's output in 8 chunks of 16-bit logits, all kept. Eagerly each chunk is
    // upcast and log-softmaxed in fp32 and kept too; compiled, the loss reads the 16-bit chunk and keeps only a
    // log-sum-exp per token, and backward makes one chunk's 16-bit gradient at a time beside the saved chunks
    // (torchtune 0.6's step traced on CPU: 8 chunks + 1 gradient at its peak, 9 x 65.7 MB at batch 2 x 1024
    // tokens).
    let chunk = ceil_div(n, 8.0) * v;
    if plan.compile {
        (c * n * v + 4.0 * n, c * n * v + c * chunk, c * chunk)
    } else {
        (
            c * n * v + 4.0 * n * v + 4.0 * chunk,
            4.0 * n * v + 2.0 * 4.0 * chunk + c * chunk,
            4.0 * chunk,
        )
    }
}

/// The WebGPU runtime's loss, for the standard and kernel losses alike: all logits in f32, kept; backward adds
/// their gradient beside them while the per-row log-sum-exp waits.
fn webgpu_standard_loss(s: &Setup) -> (Count, Count, Count) {
    let (n, v, h) = (s.tokens, s.vocab, s.hidden);
    (
        (4.0 * v + (4.0 * h).max(8.0)) * n,
        8.0 * n * v + 4.0 * n,
        4.0 * n * v,
    )
}

/// The WebGPU runtime's chunked loss: the final norm's output stays for the recomputation; one chunk of logits at
/// a time, and its gradient.
fn webgpu_chunked_loss(s: &Setup) -> (Count, Count, Count) {
    let (plan, n, v, h) = (s.plan, s.tokens, s.vocab, s.hidden);
    let chunk = (plan.chunk as Count).min(n) * v;
    (
        4.0 * n * h + 4.0 * chunk + 8.0 * n,
        8.0 * n * h + 8.0 * chunk + 4.0 * n,
        4.0 * chunk,
    )
}

/// ORPO, CPO and SimPO under TRL 1.x's experimental trainers (`ORPOTrainer`, `CPOTrainer`): the model returns the
/// 16-bit logits of the whole doubled batch (chosen and rejected, every position), which
/// `selective_log_softmax` scores with CUDA's fused Triton kernel: it saves the logits and two fp32 statistics
/// per position, and its backward writes one contiguous gradient of the shifted logits (`[:, :-1]`), which the
/// slice's backward copies into a zeroed logits-sized one. ORPO and CPO also take a cross-entropy over the
/// chosen half (`logits[:, :-1].contiguous()`, log-softmaxed in 16-bit and kept); its backward ends in two
/// slice backwards (the shift, then the chosen half), each a zeroed copy, while the scorer's gradient waits for
/// them: at the second, the scorer's gradient, the chosen half's and the whole batch's zeroed one, 2.5 x the
/// logits. Without the cross-entropy (SimPO) the peak is the kernel's backward: the logits and the shifted
/// gradient. Traced on CPU through both trainers with the kernel's allocations (`tools/trace/pref_step.py`).
fn full_logits_head(s: &Setup) -> (Count, Count, Count) {
    let (c, n, v) = (s.d.compute, s.tokens, s.vocab);
    let logits = c * n * v;
    let shifted = c * (n - s.sequences) * v;
    let stats = 2.0 * 4.0 * (n - s.sequences);
    if s.plan.task.chosen_nll() {
        let chosen_log_softmax = shifted / 2.0;
        let backward = (logits + shifted + chosen_log_softmax).max(2.5 * logits);
        (logits + chosen_log_softmax + stats, backward, logits)
    } else {
        (logits + stats, logits + shifted, logits)
    }
}

/// Rows and columns of the tiles TRL's fused log-probability head computes its logits in
/// (`trl/kernels/chunked_logprob.py`: `TOKEN_CHUNK_SIZE`, and `_CHUNKED_LOGPROB_CHUNK_SIZE` in
/// `trl/trainer/utils.py`): the buffer is allocated this wide whatever the vocabulary.
const LOGPROB_TILE_TOKENS: Count = 4096.0;
const LOGPROB_TILE_COLUMNS: Count = 32768.0;

/// A preference task's loss under TRL (1.x, `add_fused_lm_head`): the model is called with
/// `fused_lm_head=True` and returns per-token log-probabilities of the labelled (completion) positions only,
/// computed tile by tile without the logits. Traced on CPU through `DPOTrainer` and `KTOTrainer`
/// (`tools/trace/pref_step.py`, with CUDA's kernels' memory: the Triton folds allocate nothing).
pub(super) struct LogProbHead {
    /// Kept from the head's forward to its backward: the scored positions' hidden states (a copy, made by
    /// indexing with the label mask), their int64 labels, and fp32 log-sum-exp, log-probabilities and entropy.
    pub kept: Count,
    /// The one logits tile buffer, `min(scored, 4096) x 32768` in the compute dtype, in forward and backward.
    pub tile: Count,
    /// Backward's buffers beside the kept ones: the tile, the hidden states' gradient accumulated in fp32 and its
    /// compute-dtype copy returned.
    pub backward: Count,
    /// A trainable head's weight gradient accumulated in fp32 beside them (its compute-dtype copy becomes the
    /// head's `.grad`); 0 for an adapter plan.
    pub head_grad_fp32: Count,
}

impl LogProbHead {
    pub(super) fn of(s: &Setup) -> LogProbHead {
        LogProbHead::of_scored(s, s.scored)
    }

    /// The head over `nc` scored positions (a reference pass scores its own batch).
    pub(super) fn of_scored(s: &Setup, nc: Count) -> LogProbHead {
        let (c, h) = (s.d.compute, s.hidden);
        let tile = c * nc.min(LOGPROB_TILE_TOKENS) * LOGPROB_TILE_COLUMNS;
        LogProbHead {
            kept: nc * (c * h + 8.0 + 3.0 * 4.0),
            tile,
            backward: tile + (4.0 + c) * nc * h,
            head_grad_fp32: if s.plan.method == Method::Full {
                4.0 * s.vocab * h
            } else {
                0.0
            },
        }
    }
}
