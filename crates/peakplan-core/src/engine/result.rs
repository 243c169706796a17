//! The engine's public boundary: the components of a step ([`Kind`]), their chart categories, the phases of a
//! step and the [`Estimate`] every consumer reads. No arithmetic lives here.

use serde::Serialize;

/// The four bars of the chart, plus everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Weights,
    Gradients,
    Optimizer,
    Activations,
    Other,
}

impl Category {
    pub const ALL: [Category; 5] = [
        Category::Weights,
        Category::Gradients,
        Category::Optimizer,
        Category::Activations,
        Category::Other,
    ];
    pub fn label(self) -> &'static str {
        match self {
            Category::Weights => "Weights",
            Category::Gradients => "Gradients",
            Category::Optimizer => "Optimizer states",
            Category::Activations => "Activations",
            Category::Other => "Other",
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            Category::Weights => "weights",
            Category::Gradients => "gradients",
            Category::Optimizer => "optimizer",
            Category::Activations => "activations",
            Category::Other => "other",
        }
    }
}

/// The phases of a training step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Model and optimizer state resident between steps.
    Load,
    /// GRPO's generation round at its largest: generating the completions (the key/value cache, sampling), or
    /// scoring them with the reference; all zeros for a plan that generates nothing.
    Generation,
    /// End of forward: saved activations and the loss's logits.
    Forward,
    /// A preference task's reference forward (DPO, KTO), run without gradients between the policy's forward and
    /// its backward; all zeros for a plan without one.
    Reference,
    /// The largest moment of backward.
    Backward,
    /// The optimizer step: all gradients plus the update's temporaries.
    Optimizer,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Load,
        Phase::Generation,
        Phase::Forward,
        Phase::Reference,
        Phase::Backward,
        Phase::Optimizer,
    ];
    pub fn label(self) -> &'static str {
        match self {
            Phase::Load => "loaded",
            Phase::Generation => "generation",
            Phase::Forward => "end of forward",
            Phase::Reference => "reference pass",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer step",
        }
    }
}

macro_rules! components {
    ($($variant:ident => $key:literal, $cat:ident, $label:literal, $formula:literal;)+) => {
        /// One memory component of a training step.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Kind { $($variant),+ }
        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),+];
            pub const COUNT: usize = Kind::ALL.len();
            /// JSON key.
            pub fn key(self) -> &'static str { match self { $(Kind::$variant => $key),+ } }
            pub fn category(self) -> Category { match self { $(Kind::$variant => Category::$cat),+ } }
            pub fn label(self) -> &'static str { match self { $(Kind::$variant => $label),+ } }
            /// The formula in plain language.
            pub fn formula(self) -> &'static str { match self { $(Kind::$variant => $formula),+ } }
        }
    };
}

components! {
    BaseWeights => "base_weights", Weights, "Base weights",
        "parameters x bytes per parameter (4-bit linears at 0.5 B each under QLoRA, 1 B under LLM.int8 or 8-bit GPTQ; the rest in the weight dtype), divided by the GPUs under ZeRO-3 / FSDP full sharding (this GPU's shard), plus buffers such as GPT-BigCode's causal mask";
    QuantConstants => "quant_constants", Weights, "Quantization constants",
        "per 64-weight block: an fp32 absmax (0.5 bit/param), or with double quantization an 8-bit absmax plus an fp32 scale per 256 blocks (0.127 bit/param); LLM.int8: an fp32 absmax per output row; GPTQ: an fp16 scale and a packed zero point per 128 inputs and output, an int32 group index per input";
    AdapterWeights => "adapter_weights", Weights, "Adapter weights",
        "rank x (in + out) per adapted matrix x adapter dtype bytes";
    GatheredWeights => "gathered_weights", Weights, "Gathered parameters",
        "sharded parameters gathered whole for compute: FSDP keeps the root unit (embeddings, final norm, LM head; torchtune shards the embedding and head as units of their own) gathered from forward to the end of backward, and gathers one decoder layer at a time in forward, the next one ahead in backward (one when adapters are units of their own); DeepSpeed ZeRO-3's coordinator replayed module by module: each fetch gathers its module and prefetches the next ones in the step's trace, ds_prefetch elements at a time within ds_live; a module is released after it runs unless it runs again within ds_reuse elements or the prefetcher already passed its next use (so a released module is often gathered again for backward), and parameters of at most ds_persist elements stay whole beside their partitions";
    Gradients => "gradients", Gradients, "Gradients",
        "trainable parameters x gradient dtype bytes (gradients take the dtype of their parameters), divided by the GPUs from ZeRO-2 / FSDP on; an FSDP1 unit mixing frozen and trainable parameters (LoRA under wrap=block) has a gradient for its frozen weights too; in backward a trainable LM head's gradient arrives in shares that autograd sums, up to three vocab x hidden tensors at once";
    UnshardedGradients => "unsharded_gradients", Gradients, "Accumulated whole gradients",
        "accumulating inside no_sync (gsync=0), every GPU keeps each unit's whole gradient until the step's last micro-batch: the trainable parameters, or every weight of mixed FSDP1 units, not divided by the GPUs";
    OptimizerStates => "optimizer_states", Optimizer, "Optimizer states",
        "AdamW: 2 moments per trainable parameter (param dtype; 1 B each for 8-bit); SGD: none; Adafactor: factored row+column second moments";
    MasterWeights => "master_weights", Optimizer, "fp32 master weights",
        "4 B per trainable parameter, kept by mixed precision beside the 16-bit working copy";
    SavedActivations => "saved_activations", Activations, "Saved activations",
        "tensors each layer keeps for backward (per token: norm inputs in fp32, adapted-layer inputs (under DeepSpeed ZeRO-3 every linear's that a gradient passes through: its linear keeps the input, frozen or not), q/k/v, attention output, MLP intermediates) x layers";
    AttentionScores => "attention_scores", Activations, "Attention scores",
        "eager attention keeps heads x batch x seq^2 softmax output in fp32 plus its 16-bit copy, per layer (gpt-oss: one 16-bit softmax over the keys and its sink); SDPA and flash keep none";
    Checkpoints => "checkpoints", Activations, "Checkpointed layer inputs",
        "gradient checkpointing keeps one hidden state (batch x seq x hidden) per layer and recomputes the rest; offloaded (gc=offload, Unsloth from 512 tokens on one GPU) only the last layer's stays on the GPU, the others wait in pinned CPU memory (host_bytes)";
    WeightCopies => "weight_copies", Activations, "16-bit weight copies",
        "an fp32 frozen base under autocast casts each weight to 16-bit for its matmul, a GPTQ base dequantizes each to 16-bit, and LoRA on 3D MoE expert parameters builds each dense W + BA; the linear keeps that copy for backward, so each layer holds a 16-bit copy of those weights until its backward (an upcast QLoRA model's fp32 head, likewise)";
    KvCache => "kv_cache", Activations, "Returned key/value cache",
        "a Hugging Face model trained without checkpointing keeps use_cache on and returns every layer's keys and values; under grouped-query attention (SDPA, eager) attention keeps head-expanded copies, so the cache is extra: through forward under the Trainer, through backward and the step in loops that keep the output (hold)";
    PreviousInputs => "previous_inputs", Activations, "Previous micro-batch's 4-bit inputs",
        "bitsandbytes up to 0.44 kept each 4-bit matmul's input on its autograd node, which backward does not free; litgpt's loop holds the graph until the next forward returns, so those inputs are still there at its end";
    Logits => "logits", Activations, "Logits and loss",
        "standard loss: batch x seq x vocab logits in 16-bit, their fp32 upcast and log-softmax (about 10-12 B per logit; Gemma 2's softcapped logits keep their tanh too), plus what a loop holds through backward; chunked and fused losses bound it, and a cross-entropy kernel keeps only the 16-bit logits. ORPO, CPO and SimPO (TRL's experimental trainers) keep the 16-bit logits of the doubled batch for a fused log-softmax; backward holds the logits and their shifted gradient (SimPO), or 2.5 x the logits with ORPO's and CPO's cross-entropy over the chosen half";
    BackwardWork => "backward_work", Other, "Backward working memory",
        "gradients of one layer's activations in flight (hidden and MLP-width), plus one recomputed layer under checkpointing";
    DequantBuffer => "dequant_buffer", Other, "Dequantization buffer",
        "QLoRA dequantizes the largest 4-bit linear to the compute dtype for each matmul, forward and backward (GPTQ: its unpacked integers beside it, forward only); LLM.int8 quantizes each matmul's input and accumulates in int32 instead, and dequantizes only in backward";
    InputBuffers => "input_buffers", Other, "Batch and tables",
        "token ids and labels (4 B per token each), the RoPE table and the 4-bit code tables, resident on the device (WebGPU runtime)";
    PeftBuffers => "peft_buffers", Other, "PEFT working buffers",
        "DoRA builds the dense W + BA of the largest adapted matrix to take its norm; LoHa its two dense rank-r products; trainable tokens rebuild the whole embedding with the trained rows each forward";
    LoadTransient => "load_transient", Other, "Quantization at load",
        "torchao's NF4 quantizer before May 2024 compared every weight of the matrix being quantized with the 16 NF4 values: two (weights x 16) 16-bit tensors beside its 16-bit copy (qload=1)";
    OptimizerTemps => "optimizer_temps", Other, "Optimizer step temporaries",
        "foreach AdamW allocates one state-sized temporary (the sqrt of the second moment); fused and 8-bit kernels update in place; DeepSpeed copies this GPU's gradient partition flat in 16-bit, then in fp32, for its optimizer (ZeRO-3 one sub-group, ds_sub, at a time)";
    ShardBuffers => "shard_buffers", Other, "Sharding and communication buffers",
        "DDP keeps gradient buckets the size of the gradients; DeepSpeed ZeRO-3 keeps one reduce bucket of reduce_bucket_size elements (ds_rbucket, auto: hidden^2) in the 16-bit dtype from initialize";
    AllocatorSlack => "allocator_slack", Other, "Allocator cache (reserved - allocated)",
        "the step's own allocations and frees replayed through a simulator of PyTorch's caching allocator on this GPU (loading, then two steps): blocks round to 512 B or 2 MiB, segments to 2 or 20 MiB, and a block freed in a segment still in use stays reserved; near the card's limit the allocator releases its cached segments and retries; alloc=emptied empties the cache before the measured step, alloc=expandable maps pages instead of whole segments";
    CudaContext => "cuda_context", Other, "CUDA context",
        "CUDA context, cuBLAS workspace and loaded kernels: about 0.5 GiB, seen by nvidia-smi but not by torch";
    PagedStates => "paged_states", Other, "Paged optimizer states",
        "paged optimizers allocate states in unified memory: not counted by torch's allocator, resident on the GPU while it has room";
    ReferenceWeights => "reference_weights", Weights, "Reference model weights",
        "a preference task's reference under full fine-tuning (ref=model): a second copy of the model, loaded in the policy's dtype and quantization; none when the reference is the base with its adapters switched off or when its log-probabilities are precomputed";
    ReferencePass => "reference_pass", Activations, "Reference forward",
        "DPO and KTO (and GRPO with beta > 0) run the reference without gradients after the policy's forward, beside everything the policy keeps for backward: at its largest a decoder layer's MLP (residual, normalized input, activation, up projection and their product) or the log-probability head (final hidden states, the scored positions' copy, one logits tile, fp32 statistics)";
    PairedBatch => "paired_batch", Activations, "Rejected sequences' activations",
        "DPO, ORPO, SimPO and CPO run each prompt's chosen and rejected sequences as one batch of 2 x b: what the rejected half keeps for backward (its share of the saved activations, scores and checkpoints)";
    FusedLoss => "fused_loss", Activations, "Fused loss (chunked, no logits kept)",
        "Unsloth's loss (loss=fused under fw=unsloth) never keeps the logits: the tokens in 4 x round(fp32 logits / 16 GiB) chunks (at least one), each chunk's 16-bit logits and their 16-bit gradient made and dropped in forward, and the hidden states' gradient (batch x seq x hidden) kept for backward, which scales it into a copy";
    ReloadBuffers => "reload_buffers", Activations, "Checkpoint reload buffers",
        "offloaded checkpoints (gc=offload) come back from CPU memory into GPU buffers of one hidden state each (batch x seq x hidden), made at the first forward and kept: two once Unsloth double-buffers from the second step, which it does when 512 MiB of the card are free (assumed)";
    ReduceBuckets => "reduce_buckets", Other, "Gradient reduce buckets",
        "DeepSpeed ZeRO-1 and 2 copy each gradient into a flat reduce bucket of reduce_bucket_size elements (ds_rbucket, auto: hidden^2) in the 16-bit dtype, whatever the trainable parameters: made when backward's first gradient is ready, freed at its end, two under overlap_comm (ds_overlap); a reduction copies the filled bucket out beside it; none without contiguous_gradients (ds_contig=0)";
    LogProbs => "log_probs", Activations, "Log-probability head",
        "TRL's preference trainers score only the completion tokens, in tiles of min(tokens, 4096) x 32768 16-bit logits that are never kept: a copy of the scored hidden states and fp32 statistics wait for backward, which adds their gradient in fp32 and its 16-bit copy (a trainable head also its fp32 weight gradient)";
    GenerationCache => "generation_cache", Activations, "Generation key/value cache",
        "GRPO generates gens completions of each of the b prompts with the policy's generate (gen=hf): every layer's keys and values for b x gens sequences of prompt + completion - 1 positions in the compute dtype (a DynamicCache; sliding-window layers counted whole), freed before training";
    GenerationWork => "generation_work", Activations, "Generation working memory",
        "beside the cache while generating: the prefill forward's largest layer over b x gens x prompt tokens (no gradients), or a token's sampling (its logits, their fp32 copy, softmax and multinomial's fp32 draw: about 12 B + the compute dtype per vocabulary entry and sequence, with the previous token's copy and softmax still live) and one layer's keys grown by torch.cat; under DeepSpeed ZeRO-3 the whole model gathered for generate";
    RoundBuffers => "round_buffers", Other, "Generation round's tensors",
        "GRPO keeps the round's token ids and attention masks (int64, b x gens x s each) and, with a reference (beta > 0), its fp32 log-probabilities of the completion tokens, from generation through training";
    VllmShare => "vllm_share", Other, "vLLM's share of the GPU",
        "gen=vllm_colocate: vLLM in the training process takes vmem (gpu_memory_utilization) of the GPU's total memory for its weights and key/value blocks at start-up and holds it through training";
}

/// Memory of one phase, by category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PhaseMemory {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    pub activations: u64,
    pub other: u64,
}

impl PhaseMemory {
    pub fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer)
            .saturating_add(self.activations)
            .saturating_add(self.other)
    }
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Weights => self.weights,
            Category::Gradients => self.gradients,
            Category::Optimizer => self.optimizer,
            Category::Activations => self.activations,
            Category::Other => self.other,
        }
    }
}

/// An array as a sequence (serde derives arrays of up to 32 elements only; written the same).
fn as_sequence<S: serde::Serializer>(
    v: &[u64; Kind::COUNT],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    v[..].serialize(serializer)
}

/// The estimate of one plan on one GPU: parameter counts, components, phases and the three peak figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub total_params: u64,
    pub trainable_params: u64,
    /// Bytes of each component at its largest during the step, indexed like [`Kind::ALL`].
    #[serde(serialize_with = "as_sequence")]
    pub components: [u64; Kind::COUNT],
    /// Live bytes by category at each phase, indexed like [`Phase::ALL`].
    pub phases: [PhaseMemory; 6],
    pub peak_phase: Phase,
    /// What `torch.cuda.max_memory_allocated()` would report.
    pub peak_allocated_bytes: u64,
    /// What `torch.cuda.max_memory_reserved()` would report.
    pub peak_reserved_bytes: u64,
    /// What `nvidia-smi` would show for the process.
    pub device_bytes: u64,
    /// Pinned CPU memory the step's offloads hold on the host: offloaded checkpoints and their staging buffers
    /// (`gc=offload`). CPU offload's states (`cpuoff`) are not counted here yet.
    pub host_bytes: u64,
    /// True when some figure exceeded `u64` and was clamped.
    pub saturated: bool,
}

impl Estimate {
    pub fn component(&self, k: Kind) -> u64 {
        self.components[k as usize]
    }
    /// Sum of the components of a category (each at its largest).
    pub fn category(&self, c: Category) -> u64 {
        Kind::ALL
            .iter()
            .filter(|k| k.category() == c)
            .fold(0u64, |acc, k| {
                acc.saturating_add(self.components[*k as usize])
            })
    }
    pub fn phase(&self, p: Phase) -> &PhaseMemory {
        &self.phases[p as usize]
    }
    /// The phases the step runs, in order: every one but a generation round or a reference pass the plan has not
    /// got.
    pub fn phases_run(&self) -> impl Iterator<Item = Phase> + '_ {
        Phase::ALL.into_iter().filter(|p| {
            !matches!(p, Phase::Reference | Phase::Generation) || self.phase(*p).total() > 0
        })
    }
    /// Device bytes without the allocator's cache: the allocated peak, the CUDA context and paged states. No
    /// replay reserves less than it allocates, so no card below this holds the plan (a search's first screen).
    pub fn device_bytes_uncached(&self) -> u64 {
        self.device_bytes
            .saturating_sub(self.component(Kind::AllocatorSlack))
    }
    /// What the device holds at the peak, by category: the peak phase's live bytes, with the allocator cache,
    /// the CUDA context and paged states under Other. Its total is [`Estimate::device_bytes`].
    pub fn at_peak(&self) -> PhaseMemory {
        let mut m = *self.phase(self.peak_phase);
        m.other = m
            .other
            .saturating_add(self.component(Kind::AllocatorSlack))
            .saturating_add(self.component(Kind::CudaContext))
            .saturating_add(self.component(Kind::PagedStates));
        m
    }
}
