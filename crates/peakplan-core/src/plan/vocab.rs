//! The plan's vocabulary: the keyword enums of its keys (each with its accepted spellings), the target set and
//! the bounds of its numbers. The key table is `keys.rs`, its parsers and writers `codec.rs`, the query the parent
//! module.

use crate::arch::Target;
use crate::text::quote;
use serde::{Deserialize, Serialize};

macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $key:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $key)] $variant),+ }
        impl $name {
            /// Every value, in the order the page lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The value's spelling in queries.
            pub fn key(self) -> &'static str { match self { $($name::$variant => $key),+ } }
            /// Parses the query spelling.
            pub fn from_key(s: &str) -> Option<Self> { match s { $($key => Some($name::$variant),)+ _ => None } }
            /// The accepted spellings, for messages.
            pub fn accepted() -> String { [$($key),+].join(", ") }
        }
        impl super::codec::Keyword for $name {
            const SPELLINGS: &'static [&'static str] = &[$($key),+];
            fn from_key(s: &str) -> Option<Self> { $name::from_key(s) }
            fn key(self) -> &'static str { $name::key(self) }
        }
    };
}

keyword_enum!(
    /// What is trained.
    Method { Full = "full", Lora = "lora", Qlora = "qlora" }
);
keyword_enum!(
    /// A floating-point storage type.
    DType { Fp32 = "fp32", Bf16 = "bf16", Fp16 = "fp16" }
);
keyword_enum!(
    /// The training precision regime.
    Precision {
        Fp32 = "fp32",
        /// Pure 16-bit: weights, gradients and optimizer states in bf16.
        Bf16 = "bf16",
        Fp16 = "fp16",
        /// fp32 master weights with bf16 compute.
        AmpBf16 = "amp_bf16",
        AmpFp16 = "amp_fp16",
    }
);
keyword_enum!(
    /// Attention implementation.
    Attn { Eager = "eager", Sdpa = "sdpa", Flash = "flash" }
);
keyword_enum!(
    /// Loss implementation: the full logits upcast for a plain cross-entropy; chunked; Liger's fused linear
    /// cross-entropy (no full logits); or a cross-entropy kernel over the 16-bit logits that writes their
    /// gradient in place (unsloth's).
    Loss { Standard = "standard", Chunked = "chunked", Fused = "fused", Kernel = "kernel" }
);
keyword_enum!(
    /// Optimizer, named as in `TrainingArguments.optim`.
    Optimizer {
        AdamwTorch = "adamw_torch",
        AdamwTorchFused = "adamw_torch_fused",
        Adamw8bit = "adamw_8bit",
        PagedAdamw8bit = "paged_adamw_8bit",
        PagedAdamw32bit = "paged_adamw_32bit",
        Sgd = "sgd",
        Adafactor = "adafactor",
    }
);
keyword_enum!(
    /// The training framework whose memory behaviour the engine follows (see ARCHITECTURE.md, "Framework profiles").
    Framework {
        /// Hugging Face Trainer + PEFT + bitsandbytes: full logits upcast to fp32 for the loss, PEFT's fp32 adapters.
        Hf = "hf",
        /// torchtune recipes: logits in 8 chunks with a per-chunk fp32 loss (CEWithChunkedOutputLoss), adapters in
        /// the model dtype.
        Torchtune = "torchtune",
        /// litgpt: LM head and cross-entropy in chunks of 128 tokens in the model dtype, adapters in the model dtype.
        Litgpt = "litgpt",
        /// peakplan's own WebGPU micro runtime: f32 buffers, fused kernels, each buffer freed at its last use.
        Webgpu = "webgpu",
        /// Unsloth (`FastLanguageModel`): checkpointed layer inputs offloaded to pinned CPU memory, a fused loss that
        /// never builds the logits, fp32 adapters, 8-bit AdamW and expandable segments by default.
        Unsloth = "unsloth",
    }
);

/// Gradient checkpointing (`gc`): off, on (each decoder layer keeps its input and recomputes the rest in
/// backward), or on with the kept inputs offloaded to pinned CPU memory as Unsloth's
/// `use_gradient_checkpointing="unsloth"` does (`fw=unsloth` only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Checkpointing {
    Off,
    On,
    Offload,
}

impl Checkpointing {
    /// Every value, in the order the page lists them.
    pub const ALL: [Checkpointing; 3] = [
        Checkpointing::On,
        Checkpointing::Off,
        Checkpointing::Offload,
    ];

    /// The value's spelling in queries.
    pub fn key(self) -> &'static str {
        match self {
            Checkpointing::Off => "0",
            Checkpointing::On => "1",
            Checkpointing::Offload => "offload",
        }
    }

    /// Whether layers are checkpointed (their inputs kept, on the GPU or offloaded, and the rest recomputed).
    pub fn on(self) -> bool {
        self != Checkpointing::Off
    }
}

impl From<bool> for Checkpointing {
    fn from(on: bool) -> Self {
        if on {
            Checkpointing::On
        } else {
            Checkpointing::Off
        }
    }
}

/// The plan's JSON keeps `grad_checkpointing` a boolean for off and on (as before the offload mode existed), and
/// spells the offload mode as its query value.
impl Serialize for Checkpointing {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Checkpointing::Off => serializer.serialize_bool(false),
            Checkpointing::On => serializer.serialize_bool(true),
            Checkpointing::Offload => serializer.serialize_str("offload"),
        }
    }
}

keyword_enum!(
    /// The training task: supervised fine-tuning, or a preference objective as TRL's trainers run it. DPO runs
    /// each prompt's chosen and rejected sequences as one doubled batch; ORPO, SimPO and CPO (TRL 1.x's
    /// `trl.experimental` trainers: `ORPOTrainer`, `CPOTrainer` with `loss_type="simpo"` and `cpo_alpha=0`, and
    /// `CPOTrainer` as it defaults) do too, without a reference, over the model's full logits; KTO runs unpaired
    /// completions beside a mismatched batch for its KL term; DPO and KTO compare with a reference. GRPO
    /// (`GRPOTrainer`) generates `gens` completions of each prompt, then trains on them, comparing with a
    /// reference when `beta` > 0.
    Task { Sft = "sft", Dpo = "dpo", Orpo = "orpo", Simpo = "simpo", Cpo = "cpo", Kto = "kto", Grpo = "grpo" }
);

impl Task {
    /// Whether the task can compare with a reference model's log-probabilities (GRPO only when `beta` > 0:
    /// [`crate::Plan::reference_source`]).
    pub fn has_reference(self) -> bool {
        matches!(self, Task::Dpo | Task::Kto | Task::Grpo)
    }
    /// Whether `ref` chooses where the task's reference comes from: DPO's and KTO's (GRPO's follows `beta`;
    /// ORPO, SimPO and CPO have none).
    pub fn reference_chosen_by_key(self) -> bool {
        self.has_reference() && !self.generates()
    }
    /// Whether the task generates its completions before training on them (online RL).
    pub fn generates(self) -> bool {
        self == Task::Grpo
    }
    /// Whether the task runs each prompt's chosen and rejected sequences as one doubled batch.
    pub fn paired(self) -> bool {
        matches!(self, Task::Dpo | Task::Orpo | Task::Simpo | Task::Cpo)
    }
    /// Whether the task scores the model's full logits (TRL's experimental ORPO and CPO trainers) rather than
    /// TRL's fused log-probability head over the completion tokens.
    pub fn full_logits(self) -> bool {
        matches!(self, Task::Orpo | Task::Simpo | Task::Cpo)
    }
    /// Whether the task adds a cross-entropy (NLL) term over the chosen sequences to its preference loss: ORPO
    /// always, CPO with its default `cpo_alpha` of 1; SimPO sets `cpo_alpha` to 0.
    pub fn chosen_nll(self) -> bool {
        matches!(self, Task::Orpo | Task::Cpo)
    }
}

keyword_enum!(
    /// Where GRPO's completions are generated: by the policy's own `generate` (transformers, with its key/value
    /// cache), by a vLLM engine in the training process that takes `vmem` of the GPU for itself from the start
    /// (`vllm_mode="colocate"`), or by a vLLM server on other GPUs (none of it on these).
    Generation { Hf = "hf", VllmColocate = "vllm_colocate", VllmServer = "vllm_server" }
);

keyword_enum!(
    /// Where a preference task's reference log-probabilities come from: `auto` is what TRL does for the plan
    /// (the base with adapters switched off under PEFT, a second copy of the model under full fine-tuning, none
    /// for a task without a reference); `precomputed` reads them from the dataset (`precompute_ref_log_probs`).
    Reference {
        Auto = "auto",
        Model = "model",
        AdaptersOff = "adapters_off",
        Precomputed = "precomputed",
        None = "none",
    }
);

keyword_enum!(
    /// How transformers stores an MoE layer's experts, which decides what bitsandbytes and GPTQ quantize.
    MoeExperts {
        /// 3D parameters per layer (transformers 5 and later for every MoE family; gpt-oss always): they are no
        /// `nn.Linear`, so a quantized base keeps them in 16-bit (fp32 once upcast).
        Fused = "fused",
        /// One `nn.Linear` per expert (transformers 4, Unsloth's checkpoints; litgpt and torchtune always):
        /// quantized with the other linears.
        Linear = "linear",
    }
);

keyword_enum!(
    /// Which sharding runs across the GPUs (with `zero`, how far it shards): `auto` is what the framework runs
    /// today (the Trainer through accelerate: FSDP1; litgpt since August 2025 and torchtune: FSDP2).
    Shard {
        Auto = "auto",
        /// `FullyShardedDataParallel`: each unit's parameters in one flat parameter, gathered and sharded whole.
        Fsdp1 = "fsdp1",
        /// `fully_shard`: each parameter sharded on its own (DTensor); frozen parameters never get a gradient.
        Fsdp2 = "fsdp2",
        /// DeepSpeed ZeRO: partitions cover the optimizer's (trainable) parameters only.
        Deepspeed = "deepspeed",
    }
);
keyword_enum!(
    /// FSDP1's units under LoRA: `block` wraps each decoder block, adapters inside (litgpt's Block policy until
    /// 2025, a plain `transformer_auto_wrap_policy`), so every unit mixes frozen and trainable parameters; `lora`
    /// is PEFT's `fsdp_auto_wrap_policy` (the Trainer applies it), each adapter in a unit of its own; `auto` is
    /// what the framework does.
    Wrap { Auto = "auto", Block = "block", Lora = "lora" }
);
keyword_enum!(
    /// Gradient accumulation across GPUs: `0` accumulates the micro-batches inside `no_sync` (unsharded
    /// gradients, reduced once per step: the Trainer's and litgpt's default), `1` reduces every micro-batch
    /// (accelerate's `sync_each_batch`, torchtune's recipes); `auto` is what the framework does.
    GradSync { Auto = "auto", Accumulate = "0", EachBatch = "1" }
);

/// The sharding a plan runs once `auto` values are resolved for its framework.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sharding {
    pub shard: Shard,
    /// FSDP1 units that mix frozen and trainable parameters (LoRA under `wrap=block`): the whole unit gets a
    /// gradient.
    pub mixed_units: bool,
    /// Gradients are reduced after every micro-batch (no unsharded accumulation).
    pub sync_each_batch: bool,
}

// `Framework::apply_defaults` is defined with the frameworks' profiles (`profile.rs`).

keyword_enum!(
    /// The parameter-efficient method applied on the LoRA/QLoRA targets.
    Peft {
        /// Low-rank A and B per adapted matrix.
        Lora = "lora",
        /// LoRA with rank-stabilized scaling alpha/sqrt(r): the same memory as LoRA.
        Rslora = "rslora",
        /// LoRA with a trainable magnitude per output row; its weight norm needs the dense W + BA.
        Dora = "dora",
        /// LoRA with A frozen: no gradient or optimizer state for A (PEFT still keeps the input).
        Lorafa = "lorafa",
        /// (IA)^3: a learned vector scales each target's output (its input for `down`).
        Ia3 = "ia3",
        /// VeRA: frozen random A and B shared by every layer, with trainable scaling vectors (rank-wide and
        /// output-wide) per adapted matrix.
        Vera = "vera",
        /// LoHa: the update is the Hadamard product of two rank-r products, built densely in every forward.
        Loha = "loha",
        /// OFT: a block-diagonal orthogonal rotation (r blocks, Cayley-parametrized) of each target's input.
        Oft = "oft",
        /// LayerNorm tuning: only the norm weights train; no adapter on the linears.
        Ln = "ln",
        /// Prompt tuning: `vt` trainable embeddings prepended to every sequence.
        Prompt = "prompt",
        /// Prefix tuning: `vt` trainable key and value vectors prepended in every layer's attention.
        Prefix = "prefix",
    }
);

impl Peft {
    /// Prompt and prefix tuning, which add `vt` virtual tokens instead of adapting the targets.
    pub fn uses_virtual_tokens(self) -> bool {
        matches!(self, Peft::Prompt | Peft::Prefix)
    }
}

/// Most gradient accumulation steps accepted.
pub const MAX_GRAD_ACCUMULATION: u64 = 65_536;

/// Most virtual tokens of prompt or prefix tuning (PEFT examples use 8 to a few hundred).
pub const MAX_VIRTUAL_TOKENS: u64 = 65_536;

/// Which embedding rows train (PEFT's trainable tokens, or the whole layer through `modules_to_save`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenTraining {
    /// The embedding and head stay frozen.
    Frozen,
    /// Only these many token rows of the embedding train (PEFT `trainable_token_indices`).
    Rows(u64),
    /// The whole embedding and LM head train (PEFT `modules_to_save`).
    All,
}

keyword_enum!(
    /// The state of PyTorch's CUDA caching allocator at the peak step, which sets reserved against allocated.
    Alloc {
        /// The default allocator, warm from the step before: the segments it left cached serve this one.
        Cached = "cached",
        /// The measured step starts from an emptied cache (`torch.cuda.empty_cache()` and
        /// `reset_peak_memory_stats()` before it): its segments are laid out anew.
        Emptied = "emptied",
        /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: segments grow page by page, so freed blocks
        /// are reused instead of stranded.
        Expandable = "expandable",
    }
);

keyword_enum!(
    /// How the lengths of a run's batches vary (`lens`), with `lmean`, `lsd` and `lmax`.
    Lens {
        /// Every batch `b` x `s` tokens (the plan as it always was).
        Fixed = "fixed",
        /// Each batch padded to its own longest sequence (the Trainer's and TRL's default without packing): lengths
        /// change every step, and the allocator keeps segments sized for earlier batches.
        Padded = "padded",
        /// Documents concatenated into rows of `s` tokens (packing, or padding-free batches of `s` tokens a row):
        /// every batch is `b` x `s`, as `fixed`.
        Packed = "packed",
        /// `group_by_length`: batches of similar lengths, the longest first (the Trainer's
        /// `LengthGroupedSampler`).
        Grouped = "grouped",
    }
);

keyword_enum!(
    /// What becomes of a dataset's sequences longer than the longest a batch holds (`lmax`), for `ltrunc`.
    Overlong {
        /// Cut to `lmax` tokens (the tokenizer's or the collator's truncation: the Trainer's and TRL's
        /// `max_length`): every one of them is a sequence of `lmax` tokens.
        Cut = "cut",
        /// Dropped from the dataset before training (ms-swift's `truncation_strategy='delete'`, a filter on
        /// length): the lengths trained are the distribution's below `lmax`.
        Drop = "drop",
    }
);

impl Lens {
    /// Whether batches change length from step to step.
    pub fn varies(self) -> bool {
        matches!(self, Lens::Padded | Lens::Grouped)
    }
}

keyword_enum!(
    /// The colours the page and its chart are drawn in (`theme`): a document that embeds the chart may want it in
    /// its own scheme whatever its reader's system says. No estimate reads it.
    ColorScheme {
        /// The reader's `prefers-color-scheme`, as the page did before the key existed.
        Auto = "auto",
        Light = "light",
        Dark = "dark",
    }
);

keyword_enum!(
    /// Data type of QLoRA's quantized base: bitsandbytes 4-bit NF4 or FP4, LLM.int8 (`load_in_8bit`), or a
    /// GPTQ checkpoint of 4 or 8 bits (auto-gptq, group size 128).
    Quant { Nf4 = "nf4", Fp4 = "fp4", Int8 = "int8", Gptq4 = "gptq4", Gptq8 = "gptq8" }
);

impl Quant {
    /// Bits of a GPTQ base's packed weights; `None` for the bitsandbytes formats.
    pub fn gptq_bits(self) -> Option<u64> {
        match self {
            Quant::Gptq4 => Some(4),
            Quant::Gptq8 => Some(8),
            Quant::Nf4 | Quant::Fp4 | Quant::Int8 => None,
        }
    }
}

impl DType {
    pub fn bytes(self) -> u64 {
        match self {
            DType::Fp32 => 4,
            DType::Bf16 | DType::Fp16 => 2,
        }
    }
}

impl Precision {
    /// Bytes of one element in the compute dtype.
    pub fn compute_bytes(self) -> u64 {
        if self == Precision::Fp32 {
            4
        } else {
            2
        }
    }
    /// Whether an fp32 master copy of trainable weights is kept beside 16-bit compute.
    pub fn is_amp(self) -> bool {
        matches!(self, Precision::AmpBf16 | Precision::AmpFp16)
    }
}

/// A set of LoRA target keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Targets(pub u8);

impl Targets {
    /// `all-linear`: every linear of the decoder layers, not the LM head (as PEFT defines it).
    pub const ALL_LINEAR: Targets = Targets(0x7f);
    /// PEFT's default for Llama-family models.
    pub const QV: Targets = Targets(1 | 4);

    pub fn contains(self, t: Target) -> bool {
        self.0 & t.bit() != 0
    }
    /// Whether every target of `other` is in this set.
    pub fn covers(self, other: Targets) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn with(self, t: Target, on: bool) -> Targets {
        if on {
            Targets(self.0 | t.bit())
        } else {
            Targets(self.0 & !t.bit())
        }
    }
    /// The query spelling: `all-linear` or a comma list in canonical order.
    pub fn key(self) -> String {
        if self == Targets::ALL_LINEAR {
            return "all-linear".into();
        }
        Target::ALL
            .iter()
            .filter(|t| self.contains(**t))
            .map(|t| t.key())
            .collect::<Vec<_>>()
            .join(",")
    }
    /// Parses `all-linear` or a comma list; names the first bad entry.
    pub fn parse(s: &str) -> Result<Targets, String> {
        if s == "all-linear" {
            return Ok(Targets::ALL_LINEAR);
        }
        let mut bits = 0u8;
        for part in s.split(',') {
            let part = part.trim();
            let t = Target::ALL
                .iter()
                .find(|t| t.key() == part || part.strip_suffix("_proj") == Some(t.key()))
                .ok_or_else(|| {
                    format!("unknown target {}; use a comma list of q,k,v,o,gate,up,down,lm_head or all-linear", quote(part))
                })?;
            bits |= t.bit();
        }
        if bits == 0 {
            return Err("no target given".into());
        }
        Ok(Targets(bits))
    }
}

/// Range limits of the integer keys: generous beyond any real run, small enough for exact arithmetic.
pub const MAX_RANK: u64 = 65_536;
pub const MAX_BATCH: u64 = 65_536;
pub const MAX_SEQ: u64 = 16_777_216;
pub const MAX_GPUS: u64 = 65_536;
/// Most elements a DeepSpeed size key (`ds_sub`, `ds_rbucket`, …) accepts: 10^15, above any model's parameters
/// (Lightning's DeepSpeed strategy sets `sub_group_size` to 10^12).
pub const MAX_DS_ELEMENTS: u64 = 1_000_000_000_000_000;
/// Largest `max_split_size_mb` accepted: 2^30 MiB (1 PiB), beyond any device, within the allocator's byte
/// arithmetic.
pub const MAX_SPLIT_MB: u64 = 1 << 30;
/// Most trainable token rows (larger than any vocabulary).
pub const MAX_TOKEN_ROWS: u64 = 16_777_216;
