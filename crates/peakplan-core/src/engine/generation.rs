//! Stage 3e, GRPO's generation round (TRL 1.16's `GRPOTrainer._generate_and_score_completions`): before it trains,
//! each step generates `gens` completions of each of the round's prompts with the policy's own `generate`
//! (`gen=hf`: under `torch.no_grad()`, checkpointing switched off, one call for the whole round), or takes them
//! from a vLLM engine, then scores them with the reference when `beta` > 0, a training micro-batch at a time.
//! Nothing of the round stays for training but its token ids, masks and the reference's log-probabilities.
//!
//! transformers 5.24's sampling loop (`GenerationMixin._sample`) holds, beside the weights and the optimizer's
//! states: the key/value cache (a `DynamicCache`, each layer's keys and values grown by `torch.cat` at every
//! token, so one layer's old tensor is live beside its new one), the prefill forward's largest layer over every
//! prompt token, and per token the last position's logits (TRL sets `logits_to_keep=1`, prefill too), their fp32
//! copy and softmax, and `multinomial`'s fp32 exponential draw; the previous token's fp32 copy and softmax stay
//! live (local variables) through the next forward.

use super::count::Count;
use super::reference::no_grad_layer;
use super::resident::Resident;
use super::setup::Setup;
use crate::plan::Generation as Source;

/// One GPU's generation round and what it leaves for training.
#[derive(Clone, Copy, Default)]
pub(super) struct Generation {
    /// The key/value cache of every completion of the round at its longest (`prompt + completion - 1` positions:
    /// the last token sampled is never run through the model).
    pub kv_cache: Count,
    /// The cache when the prompts are in (prefill), and the largest moment of the prefill forward beside it.
    pub prefill_cache: Count,
    pub prefill: Count,
    /// The last token's sampling buffers: its logits, their fp32 copy, softmax and exponential draw.
    pub sampling: Count,
    /// The previous token's fp32 copy and softmax, live through the next forward.
    pub previous_sampling: Count,
    /// One layer's keys (or values) one position short: `torch.cat`'s old tensor beside the new one.
    pub growing_layer: Count,
    /// The weights ZeRO-3 gathers whole for `generate` (TRL's `unwrap_model_for_generation` gathers every
    /// parameter), beyond this GPU's shard.
    pub gathered: Count,
    /// The round's token ids and attention masks (int64), and the reference's fp32 log-probabilities, kept from the
    /// round through training (TRL buffers the round and trains on views of it).
    pub buffered: Count,
    /// vLLM's share of the GPU under `gen=vllm_colocate`, taken at start-up and held through the step: vLLM 0.10
    /// to 0.12 budget `requested_memory = total_memory x gpu_memory_utilization` (`vllm/v1/worker/gpu_worker.py`)
    /// and fill what its weights and the profiling run's activation peak leave of it with key/value blocks,
    /// allocated whole (`gpu_model_runner.py` `_allocate_kv_cache_tensors`). CUDA graphs are captured after, outside
    /// the budget (0.3 to 2.5 GiB in vLLM's issues), and TRL's sleep mode (`vllm_enable_sleep_mode`, off by
    /// default) frees weights and blocks between rounds: neither is counted.
    pub vllm: Count,
}

impl Generation {
    /// What generating holds beside the cache at its largest.
    pub fn work(&self) -> Count {
        self.gathered
            + self
                .prefill
                .max(self.previous_sampling + self.growing_layer)
                .max(self.sampling)
    }

    /// The round's largest moment beyond what every moment of the step holds.
    pub fn largest(&self) -> Count {
        let prefill = self.prefill_cache + self.prefill;
        let last_forward = self.kv_cache + self.previous_sampling + self.growing_layer;
        let last_sample = self.kv_cache + self.sampling;
        self.gathered + prefill.max(last_forward).max(last_sample)
    }
}

pub(super) fn generation(s: &Setup, r: &Resident) -> Generation {
    let plan = s.plan;
    if !plan.task.generates() {
        return Generation::default();
    }
    let (c, arch) = (s.d.compute, s.arch);
    let rows = plan.generated_sequences() as Count;
    let prompt = plan.prompt_tokens() as Count;
    let positions = plan.seq_len as Count;
    let completion = plan.completion_tokens() as Count;
    let with_reference = plan.reference_source() != crate::plan::Reference::None;
    let buffered = 16.0 * rows * positions
        + if with_reference {
            4.0 * rows * completion
        } else {
            0.0
        };
    let vllm = if plan.generation == Source::VllmColocate {
        plan.vllm_memory * plan.gpu.preset().capacity_bytes as Count
    } else {
        0.0
    };
    if plan.generation != Source::Hf {
        return Generation {
            buffered,
            vllm,
            ..Generation::default()
        };
    }
    // Keys and values of one position of one sequence in one layer.
    let per_position = arch.kv_dim() as Count * c;
    let cache = |len: Count| 2.0 * s.layers * rows * per_position * len;
    let vocab_rows = rows * s.vocab;
    let gathered = if s.zero >= 3 && s.sharding.shard == crate::plan::Shard::Deepspeed {
        (r.base_weights * s.gpus - r.base_weights).max(0.0)
    } else {
        0.0
    };
    Generation {
        kv_cache: cache(positions - 1.0),
        prefill_cache: cache(prompt),
        prefill: prefill(s, rows * prompt),
        sampling: c * vocab_rows + 12.0 * vocab_rows,
        previous_sampling: 8.0 * vocab_rows,
        growing_layer: rows * per_position * (positions - 2.0).max(0.0),
        gathered,
        buffered,
        vllm,
    }
}

/// The prefill forward's largest moment over `tokens` prompt tokens: a layer's MLP without gradients, beside which
/// the model's forward holds the embedding's output (`inputs_embeds`), past the first layer the layer's input (its
/// caller's variable keeps it until the layer returns), and the rotary embedding's cos and sin of every position
/// (traced: `tools/trace/grpo_step.py` at one and two layers, the prefill of 32 prompts of 256 tokens as the peak).
fn prefill(s: &Setup, tokens: Count) -> Count {
    let (c, h) = (s.d.compute, s.hidden);
    let held = if s.layers > 1.0 { 2.0 } else { 1.0 };
    let rotary = 2.0 * tokens * s.arch.head_dim as Count * c;
    no_grad_layer(s, tokens) + held * c * tokens * h + rotary
}
