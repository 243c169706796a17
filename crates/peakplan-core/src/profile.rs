//! Framework profiles: what the engine needs to know about the framework a plan runs under, one row of plain data
//! per [`Framework`] (which logits its loss holds and in what dtype, how its model code keeps what backward needs,
//! what its quantized base and its optimizer path hold, its defaults for sharding, wrapping and accumulation).
//!
//! The engine resolves a plan's profile once, in its set-up stage, and its stages read the profile's fields, never
//! the framework: a new framework is one more row here ([`Profile::of`] matches every framework without a
//! wildcard) and one more key in the plan's vocabulary. The plan's own answers that depend on the framework
//! (`Plan::sharding`, `Plan::returns_full_logits`, `Plan::experts_are_parameters`, `Framework::apply_defaults`) are
//! defined here, over the row.

use crate::plan::{
    Alloc, Checkpointing, DType, Framework, GradSync, Loss, Method, MoeExperts, Optimizer, Plan,
    Shard, Sharding, Wrap,
};

/// How one framework computes a training step, as far as memory goes. Every field is a fact about the framework's
/// code, read by the engine's stages; a plan's keys choose among the options the framework offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    // === On the page ===
    /// The framework's name in the page's framework list.
    pub label: &'static str,
    /// Offered in the page's framework list (peakplan's own WebGPU runtime is planned by its micro panel instead).
    pub offered_on_page: bool,

    // === Defaults: what choosing the framework sets, and what `auto` keys resolve to ===
    /// What its recipes or loaders use for the keys a framework decides: choosing the framework sets them
    /// ([`Framework::switch`]).
    pub defaults: Defaults,
    /// A link naming the framework gets its defaults for the keys it leaves out. Links written before a
    /// framework's defaults existed (every framework but Unsloth) keep the plan's own defaults, so they still
    /// open as they did.
    pub defaults_in_links: bool,
    /// `shard=auto`: the sharding the framework runs across GPUs (FSDP1 through accelerate, FSDP2 for the
    /// `fully_shard` recipes).
    pub default_shard: Shard,
    /// `wrap=auto`: FSDP1's units under LoRA, `Block` (each decoder block with its adapters, so units mix frozen
    /// and trainable parameters) or `Lora` (PEFT's wrap policy: each adapter a unit of its own).
    pub default_wrap: Wrap,
    /// `gsync=auto`: `Accumulate` (micro-batches accumulate inside `no_sync`, whole gradients reduced once a step)
    /// or `EachBatch` (gradients reduced after every micro-batch).
    pub default_grad_sync: GradSync,
    /// FSDP2 shards the embedding and the output projection as units of their own (torchtune's
    /// `custom_sharded_layers`), gathered or offloaded apart from the root unit, which keeps the final norm.
    pub embedding_and_head_own_units: bool,

    // === The model code ===
    /// The model code has no SDPA path for attention sinks (transformers' gpt-oss declares
    /// `_supports_sdpa = False`): such a model asked for SDPA runs eager attention.
    pub sinks_force_eager: bool,
    /// The plan's `moe` key says how MoE experts are stored (transformers: 3D parameters since version 5, one
    /// `nn.Linear` per expert before); otherwise every expert is a Linear of its own, quantized with the others.
    pub expert_storage_from_plan: bool,
    /// A tied model's head gets a copy of the embedding of its own (litgpt's checkpoint converter), so two
    /// vocab x hidden matrices train, hold gradients and count as parameters.
    pub unties_head: bool,
    /// A quantized base quantizes a vision tower's encoder linears (transformers' bitsandbytes integration skips
    /// only `lm_head`; Unsloth's `SKIP_QUANTIZATION_MODULES` keeps vision towers and projectors in 16-bit).
    pub quantizes_vision_tower: bool,
    /// Batches of varying length go padding-free: one row of the sequences' real lengths (Unsloth's `SFTTrainer`).
    pub padding_free: bool,
    /// `gc=offload` is the framework's: each checkpointed layer input goes to pinned CPU memory (Unsloth's
    /// `UnslothCheckpointFunction`).
    pub offloads_checkpoints: bool,
    /// LoRA on a Llama-family layer runs hand-written autograd kernels that keep fewer tensors (Unsloth's
    /// `LoRA_QKV`, `LoRA_W`, `LoRA_MLP`, `Fast_RMS_Layernorm`; see `engine/saved.rs`, `unsloth_kernels`).
    pub lora_kernels: bool,
    /// A quantized base quantizes the LM head too (litgpt's bitsandbytes plugin converts every Linear, and
    /// dequantizes from fp16, so a bf16 step casts each dequantized weight once more).
    pub quantizes_head: bool,
    /// A 4-bit weight carries its quantization constants inside (torchao's NF4 tensor), so they are sharded and
    /// offloaded with it; otherwise (bitsandbytes) they sit beside the parameter, whole on every GPU.
    pub quant_constants_in_weight: bool,
    /// RMSNorm multiplies its weight into the fp32 normalized input before casting back (torchtune), so a
    /// trainable norm weight keeps a 4-byte normalized copy; otherwise it multiplies in the residual dtype.
    pub rmsnorm_weight_in_fp32: bool,
    /// `gelu_new` is written out in elementwise ops that keep four intermediate-wide tensors (transformers' Phi-2
    /// and GPT-2); otherwise the fused tanh GELU keeps one.
    pub gelu_new_unfused: bool,
    /// When a fused q|k|v projection reaches attention as views, keeping the whole projection output alive.
    pub qkv_views: QkvViews,
    /// Attention is one fused qkv linear whose LoRA runs one dropout over the shared input and keeps each adapted
    /// output zero-padded to the q|k|v width (litgpt).
    pub fused_qkv_lora: bool,
    /// Attention is the runtime's own kernel: it reads the grouped k/v heads directly and takes no mask (no eager
    /// 4D causal mask, no additive prefix mask); otherwise PyTorch's kernels, which expand k/v outside flash.
    pub own_attention_kernel: bool,
    /// The MLP's activation is one fused kernel that keeps its inputs only, whatever `compile` and `liger` say.
    pub fused_mlp_activation: bool,
    /// Autograd keeps nothing for an input gradient the first layer does not need (an adapter plan's frozen
    /// embedding feeds it); false where a fixed buffer schedule keeps it anyway.
    pub first_layer_spares_input_grad: bool,
    /// The first layer's input norm records nothing either (its fp32 input and reciprocal RMS): what the
    /// Hugging Face traces show (a one-layer LoRA step keeps the fp32 inputs of the attention's output norm and
    /// the final norm only; at Llama-2-7B's widths the 16 MiB the sequences' fixed part was above the trace).
    /// torchtune's traced LoRA steps keep it (its recipes' first layer is within 0.2% counting it, 1% low
    /// without), litgpt's are not traced at one layer without it: both keep counting it.
    pub first_norm_spared: bool,
    /// The activation gradients backward holds in flight.
    pub backward_grads: BackwardGrads,
    /// A quantized matmul dequantizes its weight into a dense compute-dtype buffer (bitsandbytes, GPTQ's torch
    /// path); false where fused dequantize-matmul kernels never materialize one.
    pub dequantizes_dense: bool,
    /// The batch (token ids, labels), the RoPE table, the loss and the 4-bit code tables are device buffers kept
    /// through the run (the WebGPU runtime).
    pub device_tables: bool,

    // === The output and the loss ===
    /// What `loss=standard` holds.
    pub standard_loss: StandardLoss,
    /// What `loss=chunked` holds.
    pub chunked_loss: ChunkedLoss,
    /// What `loss=kernel` runs.
    pub kernel_loss: KernelLoss,
    /// What `loss=fused` runs.
    pub fused_loss: FusedLoss,
    /// The losses the framework runs (others are refused, going back to its default).
    pub losses: &'static [Loss],
    /// Adapter plans run the LM head and the standard loss in chunks of this many tokens (litgpt: 128), each
    /// chunk's matmul casting its own copy of a frozen fp32 head.
    pub head_chunk_tokens: Option<u64>,
    /// Under the standard loss the model hands its full logits to the loop, which may keep them until after the
    /// optimizer step (`hold`); false where the loop keeps its own already or gets none.
    pub loop_may_hold_logits: bool,
    /// A final-logit softcap's tanh output waits for backward beside the logits (transformers, traced; the other
    /// frameworks' softcapped losses are not traced).
    pub softcap_output_kept: bool,
    /// Without checkpointing the model leaves `use_cache` on in training and returns a key/value cache of every
    /// layer's rotated keys and values with its output (transformers).
    pub returns_kv_cache: bool,
    /// LoRA on the LM head adds its output to the base logits out of place under the standard loss (PEFT): the
    /// base logits, lora_B's output, its scaled copy and their sum exist at once.
    pub head_lora_out_of_place: bool,
    /// A trainable head's backward runs after the loss's, the logits' 16-bit gradient live beside the head's
    /// weight gradient (standard and kernel losses under autograd); false where only adapters train.
    pub head_grad_after_loss: bool,
    /// The loop holds the step's autograd graph through its logits until the next forward returns (litgpt's
    /// `fit()`): what autograd nodes keep as attributes (bitsandbytes' kept inputs up to 0.44) of the previous
    /// micro-batch is still allocated at the end of the next forward.
    pub graph_held_to_next_forward: bool,

    // === Export ===
    /// The stack the runnable Python export runs, and predicts, for a plan of this framework (its note names the
    /// plan's framework where the two differ).
    pub python_export_runs: Framework,
}

/// When a fused q|k|v projection's output reaches attention as views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkvViews {
    /// Never: q, k and v are projections of their own.
    Never,
    /// Where the model's own code slices a fused projection (`Architecture::qkv_views`: GPT-NeoX and Phi-3 under
    /// transformers).
    WhereTheModelFuses,
    /// Always: the framework's attention is one fused q|k|v linear split into views (litgpt 0.5).
    Always,
}

/// The activation gradients backward holds in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackwardGrads {
    /// Autograd's: two residual-wide gradients and the MLP's three, in their dtypes.
    Autograd,
    /// One f32 residual-stream gradient and the MLP's three f32 gradients at their widest moment (the WebGPU
    /// runtime's buffers).
    F32Buffers,
}

/// What `loss=standard` holds: which logits, in what dtype, for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandardLoss {
    /// The model returns logits in the compute dtype, which the loss upcasts to fp32 and log-softmaxes: 16-bit
    /// logits, their fp32 upcast and the log-softmax output at forward's end, 12 B per logit at backward's peak.
    /// Compiled with the model, one fused cross-entropy keeps the 16-bit logits instead (transformers' Trainer).
    UpcastModelLogits,
    /// The decoder returns fp32 logits (`output(h).float()`) and the recipe drops them after the loss, whose fp32
    /// log-softmax stays for backward; a compiled loss (single-device LoRA only) keeps the fp32 logits instead
    /// (torchtune).
    Fp32LogitsDropped,
    /// The loop keeps fp32 logits through backward (litgpt's Fabric `fit()`); adapter plans run the head and a
    /// cross-entropy per chunk of [`Profile::head_chunk_tokens`].
    Fp32LogitsKept,
    /// All logits in f32, kept, their gradient beside them while the per-row log-sum-exp waits (the WebGPU
    /// runtime).
    F32LogitsKept,
}

/// What `loss=chunked` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedLoss {
    /// TRL's chunked NLL: the head weight upcast to fp32 for each chunk of `chunk` tokens, no logits kept between
    /// chunks.
    HeadUpcastPerChunk,
    /// torchtune's `CEWithChunkedOutputLoss`: the head runs as 8 matmuls and every chunk's 16-bit logits are kept
    /// (with their fp32 log-softmax, eagerly); a trainable head's gradient arrives in 8 shares.
    EightChunksKept,
    /// The final norm's output kept for recomputing one chunk of logits at a time (the WebGPU runtime).
    NormKeptChunksRecomputed,
}

/// What `loss=fused` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedLoss {
    /// Liger's fused linear cross-entropy: chunks sized so a chunk of logits is about the input's size.
    Liger,
    /// unsloth-zoo's `UnslothFusedLoss`: the tokens split into chunks (a multiple of 4, or 1) whose fp32 logits fit
    /// a target of half the free memory, at most 4 GiB; each chunk's loss and input gradient computed in forward,
    /// only the input gradient kept for backward.
    UnslothChunks,
}

/// The keys a framework decides, at the values its recipes or loaders use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    pub adapter_dtype: DType,
    pub optimizer: Optimizer,
    pub checkpointing: Checkpointing,
    pub loss: Loss,
    pub allocator: Alloc,
}

/// The plan's own defaults (what `Plan::default` holds): the Trainer's, as the first links were written.
const PLAN_DEFAULTS: Defaults = Defaults {
    adapter_dtype: DType::Fp32,
    optimizer: Optimizer::AdamwTorch,
    checkpointing: Checkpointing::On,
    loss: Loss::Standard,
    allocator: Alloc::Cached,
};

/// The losses a framework that runs transformers' model code offers.
const EVERY_LOSS: &[Loss] = &[Loss::Standard, Loss::Chunked, Loss::Fused, Loss::Kernel];

/// What `loss=kernel` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLoss {
    /// unsloth's cross-entropy kernel over the 16-bit logits: a log-sum-exp per token, and backward writes the
    /// logits' gradient into their own buffer.
    InPlaceGradient,
    /// The framework has no such kernel: its standard loss runs.
    Standard,
}

// === The rows: one per framework ===

/// Hugging Face: the Trainer (through accelerate) + PEFT + bitsandbytes; transformers' model code.
const HF: Profile = Profile {
    label: "HF + PEFT",
    offered_on_page: true,
    defaults: PLAN_DEFAULTS,
    defaults_in_links: false,
    default_shard: Shard::Fsdp1,
    default_wrap: Wrap::Lora,
    default_grad_sync: GradSync::Accumulate,
    embedding_and_head_own_units: false,
    sinks_force_eager: true,
    expert_storage_from_plan: true,
    unties_head: false,
    quantizes_vision_tower: true,
    padding_free: false,
    offloads_checkpoints: false,
    lora_kernels: false,
    quantizes_head: false,
    quant_constants_in_weight: false,
    rmsnorm_weight_in_fp32: false,
    gelu_new_unfused: true,
    qkv_views: QkvViews::WhereTheModelFuses,
    fused_qkv_lora: false,
    own_attention_kernel: false,
    fused_mlp_activation: false,
    first_layer_spares_input_grad: true,
    first_norm_spared: true,
    backward_grads: BackwardGrads::Autograd,
    dequantizes_dense: true,
    device_tables: false,
    standard_loss: StandardLoss::UpcastModelLogits,
    chunked_loss: ChunkedLoss::HeadUpcastPerChunk,
    kernel_loss: KernelLoss::InPlaceGradient,
    fused_loss: FusedLoss::Liger,
    losses: EVERY_LOSS,
    head_chunk_tokens: None,
    loop_may_hold_logits: true,
    softcap_output_kept: true,
    returns_kv_cache: true,
    head_lora_out_of_place: true,
    head_grad_after_loss: true,
    graph_held_to_next_forward: false,
    python_export_runs: Framework::Hf,
};

/// torchtune's recipes: FSDP2, torchao's NF4, adapters in the model dtype.
const TORCHTUNE: Profile = Profile {
    label: "torchtune",
    offered_on_page: true,
    defaults: Defaults {
        adapter_dtype: DType::Bf16,
        ..PLAN_DEFAULTS
    },
    defaults_in_links: false,
    default_shard: Shard::Fsdp2,
    default_wrap: Wrap::Block,
    default_grad_sync: GradSync::EachBatch,
    embedding_and_head_own_units: true,
    sinks_force_eager: false,
    expert_storage_from_plan: false,
    unties_head: false,
    quantizes_vision_tower: true,
    padding_free: false,
    offloads_checkpoints: false,
    lora_kernels: false,
    quantizes_head: false,
    quant_constants_in_weight: true,
    rmsnorm_weight_in_fp32: true,
    gelu_new_unfused: false,
    qkv_views: QkvViews::Never,
    fused_qkv_lora: false,
    own_attention_kernel: false,
    fused_mlp_activation: false,
    first_layer_spares_input_grad: true,
    first_norm_spared: false,
    backward_grads: BackwardGrads::Autograd,
    dequantizes_dense: true,
    device_tables: false,
    standard_loss: StandardLoss::Fp32LogitsDropped,
    chunked_loss: ChunkedLoss::EightChunksKept,
    kernel_loss: KernelLoss::InPlaceGradient,
    fused_loss: FusedLoss::Liger,
    losses: EVERY_LOSS,
    head_chunk_tokens: None,
    loop_may_hold_logits: true,
    softcap_output_kept: false,
    returns_kv_cache: false,
    head_lora_out_of_place: false,
    head_grad_after_loss: true,
    graph_held_to_next_forward: false,
    python_export_runs: Framework::Hf,
};

/// litgpt: Fabric's `fit()` loop, its fused qkv, its bitsandbytes plugin, adapters in the model dtype.
const LITGPT: Profile = Profile {
    label: "litgpt",
    offered_on_page: true,
    defaults: Defaults {
        adapter_dtype: DType::Bf16,
        ..PLAN_DEFAULTS
    },
    defaults_in_links: false,
    default_shard: Shard::Fsdp2,
    default_wrap: Wrap::Block,
    default_grad_sync: GradSync::Accumulate,
    embedding_and_head_own_units: false,
    sinks_force_eager: false,
    expert_storage_from_plan: false,
    unties_head: true,
    quantizes_vision_tower: true,
    padding_free: false,
    offloads_checkpoints: false,
    lora_kernels: false,
    quantizes_head: true,
    quant_constants_in_weight: false,
    rmsnorm_weight_in_fp32: false,
    gelu_new_unfused: false,
    qkv_views: QkvViews::Always,
    fused_qkv_lora: true,
    own_attention_kernel: false,
    fused_mlp_activation: false,
    first_layer_spares_input_grad: true,
    first_norm_spared: false,
    backward_grads: BackwardGrads::Autograd,
    dequantizes_dense: true,
    device_tables: false,
    standard_loss: StandardLoss::Fp32LogitsKept,
    chunked_loss: ChunkedLoss::HeadUpcastPerChunk,
    kernel_loss: KernelLoss::InPlaceGradient,
    fused_loss: FusedLoss::Liger,
    losses: EVERY_LOSS,
    head_chunk_tokens: Some(128),
    loop_may_hold_logits: false,
    softcap_output_kept: false,
    returns_kv_cache: false,
    head_lora_out_of_place: false,
    head_grad_after_loss: true,
    graph_held_to_next_forward: true,
    python_export_runs: Framework::Hf,
};

/// peakplan's own WebGPU micro runtime: f32 buffers, fused kernels, each buffer freed at its last use.
const WEBGPU: Profile = Profile {
    label: "WebGPU micro runtime",
    offered_on_page: false,
    defaults: PLAN_DEFAULTS,
    defaults_in_links: false,
    default_shard: Shard::Fsdp1,
    default_wrap: Wrap::Block,
    default_grad_sync: GradSync::Accumulate,
    embedding_and_head_own_units: false,
    sinks_force_eager: false,
    expert_storage_from_plan: false,
    unties_head: false,
    quantizes_vision_tower: true,
    padding_free: false,
    offloads_checkpoints: false,
    lora_kernels: false,
    quantizes_head: false,
    quant_constants_in_weight: false,
    rmsnorm_weight_in_fp32: false,
    gelu_new_unfused: false,
    qkv_views: QkvViews::Never,
    fused_qkv_lora: false,
    own_attention_kernel: true,
    fused_mlp_activation: true,
    first_layer_spares_input_grad: false,
    first_norm_spared: false,
    backward_grads: BackwardGrads::F32Buffers,
    dequantizes_dense: false,
    device_tables: true,
    standard_loss: StandardLoss::F32LogitsKept,
    chunked_loss: ChunkedLoss::NormKeptChunksRecomputed,
    kernel_loss: KernelLoss::Standard,
    fused_loss: FusedLoss::Liger,
    losses: EVERY_LOSS,
    head_chunk_tokens: None,
    loop_may_hold_logits: false,
    softcap_output_kept: false,
    returns_kv_cache: false,
    head_lora_out_of_place: false,
    head_grad_after_loss: false,
    graph_held_to_next_forward: false,
    python_export_runs: Framework::Hf,
};

/// Unsloth (`FastLanguageModel`, unsloth 2026.8 and unsloth-zoo read at their commits of August 2026; see
/// `shared/research/unsloth.md`): transformers' model code patched by Unsloth. Its loader's defaults: 4-bit
/// loading that skips lm_head, routers and vision towers, LoRA weights upcast to fp32, `"unsloth"` checkpointing
/// (layer inputs to pinned CPU memory), the fused loss whenever labels are given, 8-bit AdamW in its notebooks, and
/// `expandable_segments` set at import.
const UNSLOTH: Profile = Profile {
    label: "Unsloth",
    defaults: Defaults {
        adapter_dtype: DType::Fp32,
        optimizer: Optimizer::Adamw8bit,
        checkpointing: Checkpointing::Offload,
        loss: Loss::Fused,
        allocator: Alloc::Expandable,
    },
    defaults_in_links: true,
    quantizes_vision_tower: false,
    padding_free: true,
    offloads_checkpoints: true,
    lora_kernels: true,
    fused_loss: FusedLoss::UnslothChunks,
    // No plain cross-entropy over returned logits: with `UNSLOTH_RETURN_LOGITS=1` its forward returns the 16-bit
    // logits to its cross-entropy kernel (`loss=kernel`).
    losses: &[Loss::Fused, Loss::Kernel],
    loop_may_hold_logits: false,
    // The cross-entropy kernel softcaps inside itself.
    softcap_output_kept: false,
    // Its export is Unsloth's own script (`interop/unsloth.rs`).
    python_export_runs: Framework::Unsloth,
    // Everything else is transformers' model code and the Trainer's, as under Hugging Face.
    ..HF
};

impl Profile {
    /// The row of `framework`.
    pub const fn of(framework: Framework) -> &'static Profile {
        match framework {
            Framework::Hf => &HF,
            Framework::Torchtune => &TORCHTUNE,
            Framework::Litgpt => &LITGPT,
            Framework::Webgpu => &WEBGPU,
            Framework::Unsloth => &UNSLOTH,
        }
    }

    /// The frameworks the page lists, in [`Framework::ALL`]'s order, with their labels.
    pub fn page_list() -> impl Iterator<Item = (Framework, &'static str)> {
        Framework::ALL.iter().filter_map(|&f| {
            let p = Profile::of(f);
            p.offered_on_page.then_some((f, p.label))
        })
    }

    /// `plan`'s sharding with its `auto` keys resolved to this profile's defaults.
    pub fn sharding(&self, plan: &Plan) -> Sharding {
        let shard = match plan.shard {
            Shard::Auto => self.default_shard,
            s => s,
        };
        let wrap = match plan.wrap {
            Wrap::Auto => self.default_wrap,
            w => w,
        };
        let grad_sync = match plan.grad_sync {
            GradSync::Auto => self.default_grad_sync,
            g => g,
        };
        Sharding {
            shard,
            mixed_units: shard == Shard::Fsdp1
                && wrap == Wrap::Block
                && plan.method != Method::Full,
            sync_each_batch: grad_sync == GradSync::EachBatch,
        }
    }
}

// === The plan's answers that depend on its framework, read off its row ===

impl Framework {
    /// Moves `plan` to this framework (what selecting it on the page does): each key a framework decides that is
    /// still at the old framework's default takes this one's; a value chosen apart from it stays.
    pub fn apply_defaults(self, plan: &mut Plan) {
        let (from, to) = (
            Profile::of(plan.framework).defaults,
            Profile::of(self).defaults,
        );
        Framework::switch(plan, from, to, &[]);
        plan.framework = self;
    }

    /// Moves each key a framework decides from `from`'s default to `to`'s, except the keys in `kept` (a query's
    /// own) and values that differ from `from`'s.
    pub(crate) fn switch(plan: &mut Plan, from: Defaults, to: Defaults, kept: &[&str]) {
        fn take<T: PartialEq + Copy>(kept: &[&str], key: &str, value: &mut T, from: T, to: T) {
            if *value == from && !kept.contains(&key) {
                *value = to;
            }
        }
        take(
            kept,
            "adtype",
            &mut plan.adapter_dtype,
            from.adapter_dtype,
            to.adapter_dtype,
        );
        take(
            kept,
            "opt",
            &mut plan.optimizer,
            from.optimizer,
            to.optimizer,
        );
        take(
            kept,
            "gc",
            &mut plan.checkpointing,
            from.checkpointing,
            to.checkpointing,
        );
        take(kept, "loss", &mut plan.loss, from.loss, to.loss);
        take(
            kept,
            "alloc",
            &mut plan.allocator,
            from.allocator,
            to.allocator,
        );
    }
}

impl Plan {
    /// The sharding this plan runs, `auto` resolved for its framework ([`Profile::sharding`]): the Trainer goes
    /// through accelerate's FSDP1 with PEFT's wrap policy and accumulates inside `no_sync`; litgpt (FSDP2 since
    /// August 2025, its Block policy before) accumulates inside `no_backward_sync`; torchtune's recipes shard with
    /// FSDP2 and reduce every micro-batch.
    pub fn sharding(&self) -> Sharding {
        Profile::of(self.framework).sharding(self)
    }

    /// Moves the keys a framework decides from `from`'s defaults to the plan's framework's, except those in `kept`
    /// (what a query set itself): a query that chooses a framework gets its defaults for the keys it leaves out.
    pub(crate) fn take_framework_defaults(&mut self, from: Framework, kept: &[&str]) {
        let to = Profile::of(self.framework);
        if to.defaults_in_links {
            Framework::switch(self, Profile::of(from).defaults, to.defaults, kept);
        }
    }

    /// The rules between the framework and its keys: a key the framework does not run goes back to its
    /// framework's default (`zero` to 0), with the message that says why.
    pub(crate) fn check_framework_keys(&mut self) -> Vec<(&'static str, String)> {
        let mut said = Vec::new();
        let profile = Profile::of(self.framework);
        let fw = self.framework.key();
        if self.checkpointing == Checkpointing::Offload && !profile.offloads_checkpoints {
            self.checkpointing = Checkpointing::On;
            said.push((
                "gc",
                format!(
                    "gc=offload is Unsloth's offloaded checkpointing (fw=unsloth); with fw={fw} accepted: 0, 1"
                ),
            ));
        }
        if !profile.losses.contains(&self.loss) {
            let refused = self.loss.key();
            self.loss = profile.defaults.loss;
            let accepted: Vec<&str> = profile.losses.iter().map(|l| l.key()).collect();
            said.push((
                "loss",
                format!(
                    "loss={refused} is not a loss fw={fw} runs (its forward computes a fused loss, loss=fused, or \
                     returns 16-bit logits to its cross-entropy kernel, loss=kernel, with UNSLOTH_RETURN_LOGITS=1); \
                     accepted: {}",
                    accepted.join(", ")
                ),
            ));
        }
        if profile.offloads_checkpoints && self.offload_activations {
            self.offload_activations = false;
            said.push((
                "aoff",
                format!(
                    "aoff=1 is torchtune's activation offloading; fw={fw} offloads checkpointed layer inputs with \
                     gc=offload instead; accepted: 0"
                ),
            ));
        }
        if self.framework == Framework::Unsloth && self.zero > 0 {
            said.push((
                "zero",
                format!(
                    "zero={} is not how fw=unsloth trains on several GPUs: it runs one GPU, DDP (zero=0) or a \
                     layer split (split=1); accepted: 0",
                    self.zero
                ),
            ));
            self.zero = 0;
        }
        said
    }

    /// Whether FSDP shards this plan: several GPUs in data parallel (no layer split), gradients or parameters
    /// sharded (`zero` 2 or 3), not by DeepSpeed.
    pub fn sharded_by_fsdp(&self) -> bool {
        self.gpus > 1
            && !self.split_layers
            && self.zero >= 2
            && self.sharding().shard != Shard::Deepspeed
    }

    /// Whether the model hands its loop full logits a loop could hold (`hold`): the standard loss under a
    /// profile whose loop may hold them (Hugging Face's, torchtune's); litgpt's loop holds its own, and the other
    /// losses return none.
    pub fn returns_full_logits(&self) -> bool {
        Profile::of(self.framework).loop_may_hold_logits && self.loss == Loss::Standard
    }

    /// Whether an MoE model's experts are 3D parameters here (`moe=fused` under a profile where the plan says how
    /// experts are stored: transformers 5): bitsandbytes and GPTQ leave them unquantized, and LoRA reaches them
    /// through PEFT's `target_parameters`.
    pub fn experts_are_parameters(&self) -> bool {
        Profile::of(self.framework).expert_storage_from_plan
            && self.moe_experts == MoeExperts::Fused
    }
}
