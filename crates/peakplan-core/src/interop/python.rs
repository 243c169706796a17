//! The Python export: a runnable transformers + PEFT + bitsandbytes script that trains a few steps of the plan
//! on random tokens and prints PyTorch's peak memory next to peakplan's prediction.
//!
//! The script is data (`script.py.tmpl`); this module works out the values of its header, model and run, and the
//! format modules give theirs: the adapter ([`peft`]), the quantization ([`bnb`]), the Trainer's arguments
//! ([`training_args`]) and the DeepSpeed config ([`deepspeed`]). A preference task's script trains TRL's own
//! trainer (`DPOTrainer`, `KTOTrainer`) on random preference examples of the plan's prompt and completion lengths,
//! with the reference TRL makes for the plan.

use super::deepspeed::{self, uses_deepspeed};
use super::py::{compute_dtype, py_bool, py_str, torch_dtype};
use super::sharding::{launch, Launch};
use super::template::{render, vars, Vars, PY_BOOLS};
use super::{bnb, model_repo, num, peft, preset_of, table, training_args};
use crate::arch::Architecture;
use crate::engine::{estimate, hf_attention, Estimate};
use crate::model_type::ModelType;
use crate::plan::{
    Alloc, Attn, DType, Framework, Generation, GradSync, Loss, Method, Optimizer, Plan, Reference,
    Task, Wrap,
};
use crate::presets::ModelId;
use crate::profile::Profile;
use crate::units::method_in_words;

const SCRIPT: &str = include_str!("script.py.tmpl");

/// A `transformers` config field, and where its value comes from.
#[derive(Clone, Copy)]
enum Field {
    Hidden,
    Intermediate,
    Layers,
    Heads,
    KvHeads,
    HeadDim,
    Vocab,
    /// `max_position_embeddings` of a rotary (or ALiBi) model: no parameters, so the plan's sequence, at least 4096.
    Positions,
    /// Learned position embeddings (parameters): the architecture's own, at least 1.
    LearnedPositions,
    Experts,
    ExpertsPerToken,
    SharedExpertIntermediate,
    Tied,
    QkvBias,
    MlpBias,
    /// `gelu_new` where the architecture's GELU is the composite one, else the fused tanh GELU.
    Gelu,
    /// Falcon's and GPT-BigCode's multi-query attention: a single key/value head.
    MultiQuery,
    /// Falcon's parallel attention (no norm between attention and MLP).
    ParallelAttn,
    /// Falcon's new decoder: both parallel norms (`ln_attn`, `ln_mlp`) or one.
    LnsInParallel,
    /// GPT-NeoX's parallel residual, whose two norms read the same input.
    ParallelResidual,
    /// Gemma 2/3's softcaps: Gemma 2's values when on, None when off.
    FinalSoftcap,
    AttnSoftcap,
    /// Gemma 3's language model, as a `gemma3_text` config.
    TextConfig,
    /// Gemma 3's SigLIP tower.
    VisionConfig,
    VisionHidden,
    VisionIntermediate,
    VisionLayers,
    VisionHeads,
    VisionChannels,
    VisionImageSize,
    VisionPatchSize,
    VisionPoolingHead,
    Yes,
    No,
}

/// The value of one field, as Python writes it.
enum Value {
    Int(u64),
    Bool(bool),
    /// A literal written as is (a string, a float, None).
    Literal(&'static str),
    /// A nested config of this schema.
    Dict(u32),
}

/// The config schemas the export writes, as bits of a set: each is a config class's keys for the sizes and
/// switches peakplan models, so that the importer reads them back to the same architecture.
mod schema {
    pub const LLAMA: u32 = 1;
    /// Llama's without `mlp_bias`: Qwen3, OLMo 2, Gemma.
    pub const ROTARY: u32 = 1 << 1;
    /// Gemma 2 and Gemma 3's language model.
    pub const SOFTCAPPED: u32 = 1 << 2;
    /// Mistral and Qwen2 (whose q/k/v biases the type fixes).
    pub const MISTRAL: u32 = 1 << 3;
    pub const MIXTRAL: u32 = 1 << 4;
    /// Qwen3-MoE: every layer sparse (the importer refuses mixed ones), experts of `moe_intermediate_size`.
    pub const QWEN3_MOE: u32 = 1 << 5;
    /// Qwen2-MoE: Qwen3-MoE's experts beside a gated shared expert, q/k/v biases under `qkv_bias`.
    pub const QWEN2_MOE: u32 = 1 << 6;
    pub const GPT_OSS: u32 = 1 << 7;
    pub const PHI: u32 = 1 << 8;
    pub const PHI3: u32 = 1 << 9;
    pub const GPT_NEOX: u32 = 1 << 10;
    pub const BLOOM: u32 = 1 << 11;
    /// Falcon's old decoder (Falcon-7B): multi-query or multi-head.
    pub const FALCON: u32 = 1 << 12;
    /// Falcon's new decoder: grouped key/value heads, one or two norms per parallel block.
    pub const FALCON_NEW: u32 = 1 << 13;
    pub const GPT_BIGCODE: u32 = 1 << 14;
    pub const GPT2: u32 = 1 << 15;
    /// Gemma 3's image-text model: a language model and a vision tower.
    pub const GEMMA3: u32 = 1 << 16;
    /// Gemma 3's SigLIP vision tower.
    pub const SIGLIP: u32 = 1 << 17;

    /// Rotary decoders that name their sizes as Llama does.
    pub const LLAMA_SIZES: u32 = LLAMA
        | ROTARY
        | SOFTCAPPED
        | MISTRAL
        | MIXTRAL
        | QWEN3_MOE
        | QWEN2_MOE
        | GPT_OSS
        | PHI
        | PHI3;
    pub const FALCONS: u32 = FALCON | FALCON_NEW;
    pub const GPT2_SIZES: u32 = GPT_BIGCODE | GPT2;
    /// Every language model's config.
    pub const DECODERS: u32 = (1 << 16) - 1;
}

/// Every key the export writes, sorted (as `transformers` writes a config), where its value comes from, and the
/// schemas that have it.
#[rustfmt::skip]
const KEYS: &[(&str, Field, u32)] = {
    use schema::*;
    &[
        ("activation_function", Field::Gelu, GPT2_SIZES),
        ("attention_bias", Field::QkvBias, LLAMA | ROTARY | SOFTCAPPED | QWEN3_MOE | GPT_OSS | GPT_NEOX),
        ("attn_logit_softcapping", Field::AttnSoftcap, SOFTCAPPED),
        ("bias", Field::QkvBias, FALCONS),
        ("ffn_hidden_size", Field::Intermediate, FALCONS),
        ("final_logit_softcapping", Field::FinalSoftcap, SOFTCAPPED),
        ("head_dim", Field::HeadDim, LLAMA_SIZES & !PHI),
        ("hidden_act", Field::Gelu, PHI),
        ("hidden_size", Field::Hidden, LLAMA_SIZES | GPT_NEOX | BLOOM | FALCONS),
        ("hidden_size", Field::VisionHidden, SIGLIP),
        ("image_size", Field::VisionImageSize, SIGLIP),
        ("intermediate_size", Field::Intermediate, (LLAMA_SIZES & !(QWEN3_MOE | QWEN2_MOE)) | GPT_NEOX),
        ("intermediate_size", Field::VisionIntermediate, SIGLIP),
        ("max_position_embeddings", Field::Positions, LLAMA_SIZES | GPT_NEOX | FALCONS),
        ("mlp_bias", Field::MlpBias, LLAMA),
        ("moe_intermediate_size", Field::Intermediate, QWEN3_MOE | QWEN2_MOE),
        ("multi_query", Field::MultiQuery, FALCON | GPT_BIGCODE),
        ("n_embd", Field::Hidden, GPT2_SIZES),
        ("n_head", Field::Heads, BLOOM | GPT2_SIZES),
        ("n_inner", Field::Intermediate, GPT2_SIZES),
        ("n_layer", Field::Layers, BLOOM | GPT2_SIZES),
        ("n_positions", Field::LearnedPositions, GPT2_SIZES),
        ("new_decoder_architecture", Field::No, FALCON),
        ("new_decoder_architecture", Field::Yes, FALCON_NEW),
        ("num_attention_heads", Field::Heads, LLAMA_SIZES | GPT_NEOX | FALCONS),
        ("num_attention_heads", Field::VisionHeads, SIGLIP),
        ("num_channels", Field::VisionChannels, SIGLIP),
        ("num_experts", Field::Experts, QWEN3_MOE | QWEN2_MOE),
        ("num_experts_per_tok", Field::ExpertsPerToken, MIXTRAL | QWEN3_MOE | QWEN2_MOE | GPT_OSS),
        ("num_hidden_layers", Field::Layers, LLAMA_SIZES | GPT_NEOX | FALCONS),
        ("num_hidden_layers", Field::VisionLayers, SIGLIP),
        ("num_key_value_heads", Field::KvHeads, LLAMA_SIZES),
        ("num_kv_heads", Field::KvHeads, FALCON_NEW),
        ("num_ln_in_parallel_attn", Field::LnsInParallel, FALCON_NEW),
        ("num_local_experts", Field::Experts, MIXTRAL | GPT_OSS),
        ("parallel_attn", Field::ParallelAttn, FALCONS),
        ("patch_size", Field::VisionPatchSize, SIGLIP),
        ("qkv_bias", Field::QkvBias, QWEN2_MOE),
        ("shared_expert_intermediate_size", Field::SharedExpertIntermediate, QWEN2_MOE),
        ("text_config", Field::TextConfig, GEMMA3),
        ("tie_word_embeddings", Field::Tied, DECODERS | GEMMA3),
        ("use_cache", Field::No, DECODERS),
        ("use_parallel_residual", Field::ParallelResidual, GPT_NEOX),
        ("vision_config", Field::VisionConfig, GEMMA3),
        ("vision_use_head", Field::VisionPoolingHead, SIGLIP),
        ("vocab_size", Field::Vocab, DECODERS),
    ]
};

/// The built-in `transformers` type the script builds for `arch`, and its config fields.
///
/// Each importable type is its own, but for three that `transformers` has no class of: GPT-3 (never released)
/// is GPT-2 at GPT-3's sizes; Falcon's pre-`transformers` `RefinedWeb*` checkpoints are Falcon; Qwen (v1), whose
/// checkpoints run their own code, is its successor Qwen2 at the same sizes (q/k/v biases, no output bias,
/// SwiGLU, RMSNorm, untied head): the same parameters, with q, k and v as three projections where Qwen (v1) fuses
/// them in `c_attn`.
fn built_type(arch: &Architecture) -> (ModelType, u32) {
    use schema::*;
    use ModelType::*;
    let t = ModelType::of(arch);
    match t {
        Llama => (t, LLAMA),
        Qwen3 | Olmo2 | Gemma => (t, ROTARY),
        Gemma2 | Gemma3Text => (t, SOFTCAPPED),
        Gemma3 => (t, GEMMA3),
        Mistral | Qwen2 => (t, MISTRAL),
        Qwen => (Qwen2, MISTRAL),
        Mixtral => (t, MIXTRAL),
        Qwen3Moe => (t, QWEN3_MOE),
        Qwen2Moe => (t, QWEN2_MOE),
        GptOss => (t, GPT_OSS),
        Phi => (t, PHI),
        Phi3 => (t, PHI3),
        GptNeox => (t, GPT_NEOX),
        Bloom => (t, BLOOM),
        Falcon | RefinedWebModel | RefinedWeb => {
            // The old decoder where it can state the architecture, as Falcon-7B's own config does.
            let old =
                !arch.norms_share_input && (arch.kv_heads == 1 || arch.kv_heads == arch.heads);
            (Falcon, if old { FALCON } else { FALCON_NEW })
        }
        GptBigcode => (t, GPT_BIGCODE),
        Gpt2 | Gpt3 => (Gpt2, GPT2),
    }
}

fn value(field: Field, arch: &Architecture, seq_len: u64) -> Value {
    use Value::{Bool, Int, Literal};
    let v = &arch.vision;
    match field {
        Field::Hidden => Int(arch.hidden),
        Field::Intermediate => Int(arch.intermediate),
        Field::Layers => Int(arch.layers),
        Field::Heads => Int(arch.heads),
        Field::KvHeads => Int(arch.kv_heads),
        Field::HeadDim => Int(arch.head_dim),
        Field::Vocab => Int(arch.vocab),
        Field::Positions => Int(seq_len.max(4096)),
        Field::LearnedPositions => Int(arch.learned_positions.max(1)),
        Field::Experts => Int(arch.experts),
        Field::ExpertsPerToken => Int(arch.experts_per_token),
        Field::SharedExpertIntermediate => Int(arch.shared_expert_intermediate),
        Field::Tied => Bool(arch.tied_embeddings),
        Field::QkvBias => Bool(arch.qkv_bias),
        Field::MlpBias => Bool(arch.mlp_bias),
        Field::Gelu => Literal(if arch.composite_gelu {
            "\"gelu_new\""
        } else {
            "\"gelu_pytorch_tanh\""
        }),
        Field::MultiQuery => Bool(arch.kv_heads == 1),
        Field::ParallelAttn => Bool(arch.norms_per_layer == 1 || arch.norms_share_input),
        Field::LnsInParallel => Int(if arch.norms_share_input { 2 } else { 1 }),
        Field::ParallelResidual => Bool(arch.norms_share_input),
        Field::FinalSoftcap => Literal(if arch.final_logit_softcap {
            "30.0"
        } else {
            "None"
        }),
        Field::AttnSoftcap => Literal(if arch.attn_logit_softcap {
            "50.0"
        } else {
            "None"
        }),
        Field::TextConfig => Value::Dict(schema::SOFTCAPPED),
        Field::VisionConfig => Value::Dict(schema::SIGLIP),
        Field::VisionHidden => Int(v.hidden),
        Field::VisionIntermediate => Int(v.intermediate),
        Field::VisionLayers => Int(v.layers),
        Field::VisionHeads => Int(v.heads),
        Field::VisionChannels => Int(v.channels),
        Field::VisionImageSize => Int(v.image_size),
        Field::VisionPatchSize => Int(v.patch_size),
        Field::VisionPoolingHead => Bool(v.pooling_head),
        Field::Yes => Bool(true),
        Field::No => Bool(false),
    }
}

/// The config of `schema` as a Python dict literal, its entries indented by `depth` levels.
fn dict(schema: u32, arch: &Architecture, seq_len: u64, depth: usize) -> String {
    let pad = "    ".repeat(depth);
    let mut s = String::from("{\n");
    for (key, field, _) in table(KEYS).iter().filter(|(_, _, of)| of & schema != 0) {
        s.push_str(&pad);
        s.push_str(&py_str(key));
        s.push_str(": ");
        match value(*field, arch, seq_len) {
            Value::Int(n) => s.push_str(&num(n)),
            Value::Bool(b) => s.push_str(py_bool(b)),
            Value::Literal(text) => s.push_str(text),
            Value::Dict(inner) => s.push_str(&dict(inner, arch, seq_len, depth + 1)),
        }
        s.push_str(",\n");
    }
    s.push_str(&"    ".repeat(depth - 1));
    s.push('}');
    s
}

/// The `transformers` model type and the config fields that rebuild `arch` (with random weights), as a Python
/// dict literal with the keys in sorted order.
pub(crate) fn model_config(arch: &Architecture, seq_len: u64) -> (&'static str, String) {
    let (t, schema) = built_type(arch);
    (t.key(), dict(schema, arch, seq_len, 1))
}

/// The script for one plan.
#[inline(never)]
pub(crate) fn script(plan: &Plan, arch: &Architecture) -> String {
    render(
        SCRIPT,
        PY_BOOLS,
        &[
            header_vars(plan, arch),
            run_vars(plan),
            task_vars(plan),
            peft::script_vars(plan, arch),
            bnb::script_vars(plan),
            training_args::script_vars(plan),
            deepspeed::script_vars(plan),
            deepspeed::zero_vars(plan),
        ],
    )
}

/// Whether the layers are split by `device_map` over several GPUs (in one process).
fn splits_layers(plan: &Plan) -> bool {
    plan.gpus > 1 && plan.split_layers
}

/// The framework the script runs for `plan`, as its profile says.
fn script_framework(plan: &Plan) -> Framework {
    Profile::of(plan.framework).python_export_runs
}

/// peakplan's prediction for what the script runs.
fn prediction(plan: &Plan, arch: &Architecture) -> Estimate {
    // The script runs the stack the plan's profile names (Hugging Face's): its prediction is that framework's.
    let mut hf_plan = plan.clone();
    // It runs the plan's sharding as resolved for the plan's framework, with the Trainer's wrap policy for LoRA.
    let sh = plan.sharding();
    hf_plan.shard = sh.shard;
    hf_plan.wrap = Wrap::Lora;
    hf_plan.grad_sync = if sh.sync_each_batch {
        GradSync::EachBatch
    } else {
        GradSync::Accumulate
    };
    hf_plan.framework = script_framework(plan);
    hf_plan.optimizer_in_backward = false;
    hf_plan.offload_activations = false;
    // The Trainer drops the model's output before backward.
    hf_plan.hold_logits_bits = 0;
    estimate(arch, &hf_plan)
}

/// The `pip install` line.
fn needs(plan: &Plan) -> String {
    let qlora = plan.method == Method::Qlora;
    let gptq = plan.gptq_bits().is_some();
    let mut needs = String::from("torch transformers accelerate");
    for (on, name) in [
        (plan.method != Method::Full, " peft"),
        (
            (qlora && !gptq)
                || matches!(
                    plan.optimizer,
                    Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit
                ),
            " bitsandbytes",
        ),
        (gptq, " optimum auto-gptq"),
        (uses_deepspeed(plan), " deepspeed"),
        (plan.task != Task::Sft, " trl datasets"),
        (plan.loss == Loss::Fused || plan.liger, " liger-kernel"),
        (plan.attn == Attn::Flash, " flash-attn"),
    ] {
        if on {
            needs.push_str(name);
        }
    }
    needs
}

/// The docstring, the prediction, the model's settings and its config.
fn header_vars(plan: &Plan, arch: &Architecture) -> Vars<'static> {
    let e = prediction(plan, arch);
    let preset = preset_of(plan, arch).map(ModelId::preset);
    let repo = model_repo(plan, arch);
    // A Hub model at another revision than `main` loads that revision when its id is the weights.
    let revision = plan
        .hub
        .as_ref()
        .map(|id| id.revision())
        .filter(|r| *r != crate::hub::DEFAULT_REVISION);
    let (model_type, config) = model_config(arch, plan.seq_len);
    let split = splits_layers(plan);
    // Dtypes: the model's own (16-bit unless fp32 or full AMP).
    let model_dtype = if plan.method == Method::Full && plan.precision.is_amp() {
        DType::Fp32
    } else {
        compute_dtype(plan)
    };
    let query = plan.to_query();
    vars!(
        "model_name" => match (preset, &plan.hub) {
            (Some(m), _) => m.name.to_string(),
            (None, Some(id)) => id.to_string(),
            (None, None) => arch.model_type.clone(),
        },
        "method" => method_in_words(plan.method),
        // GRPO's micro-batch is completions (TRL's per_device_train_batch_size): the round's over ga.
        "b" => num(if plan.task == Task::Grpo {
            plan.generated_sequences() / plan.grad_accumulation.max(1)
        } else {
            plan.micro_batch
        }),
        "s" => num(plan.seq_len),
        "gpus" => num(plan.gpus),
        "plural" => if plan.gpus > 1 && !split { "s" } else { "" },
        "plan_str" => py_str(&query),
        "query" => query,
        "needs" => needs(plan),
        "repo" => repo.clone().unwrap_or_default(),
        "fw" => if plan.framework == script_framework(plan) { "" } else { plan.framework.key() },
        "allocated" => num(e.peak_allocated_bytes),
        "reserved" => num(e.peak_reserved_bytes),
        "device" => num(e.device_bytes),
        "alloc_conf" => super::alloc_conf(plan, false),
        // transformers refuses SDPA for a model it has no SDPA path for; the prediction is for what it runs.
        "attn_impl" => match hf_attention(arch, plan.attn) {
            Attn::Eager => "eager",
            Attn::Sdpa => "sdpa",
            Attn::Flash => "flash_attention_2",
        },
        "attn" => if hf_attention(arch, plan.attn) == plan.attn {
            plan.attn.key()
        } else {
            "sdpa, which this model has no SDPA path for in transformers: it runs eager"
        },
        "model_dtype" => torch_dtype(model_dtype),
        "prec" => plan.precision.key(),
        "chunk" => num(plan.chunk),
        "hf_id" => py_str(repo.as_deref().unwrap_or("")),
        "hf_revision" => revision.map(py_str).unwrap_or_default(),
        "revision_arg" => if revision.is_some() { "revision=weights_revision(weights), " } else { "" },
        "revision_note" => revision.map(|r| format!("; that id loads revision {r}, as planned")).unwrap_or_default(),
        "model_type" => model_type,
        "model_config" => config,
        ;
        "multi" => plan.gpus > 1 && !split,
        "split" => split,
        "chunked" => plan.loss == Loss::Chunked,
        "kernel" => plan.loss == Loss::Kernel,
        "gpt3" => arch.model_type == "gpt3",
        "qwen_v1" => ModelType::of(arch) == ModelType::Qwen,
        "refined_web" => matches!(ModelType::of(arch), ModelType::RefinedWeb | ModelType::RefinedWebModel),
        "positions" => matches!(model_type, "gpt2" | "gpt_bigcode"),
        "oib" => plan.optimizer_in_backward,
        "aoff" => plan.offload_activations,
        "wrap_block" => matches!(launch(plan), Launch::Fsdp(_)) && plan.sharding().mixed_units,
        "emptied" => plan.allocator == Alloc::Emptied,
    )
}

/// How the model is loaded and placed, and how the run is measured.
fn run_vars(plan: &Plan) -> Vars<'static> {
    let split = splits_layers(plan);
    let ds = uses_deepspeed(plan);
    vars!(
        "device_map" => if split {
            "device_map=\"auto\", "
        } else if (ds && plan.zero == 3) || matches!(launch(plan), Launch::Fsdp(_)) {
            ""
        } else {
            "device_map={\"\": LOCAL_RANK}, "
        },
        // The GPUs whose peaks count: all of them when the layers are split, else this process's.
        "devices" => if split {
            "range(torch.cuda.device_count())"
        } else {
            "[torch.cuda.current_device()]"
        },
        "callbacks" => if plan.allocator == Alloc::Emptied {
            ", callbacks=[EmptyCacheBeforeEachStep()]"
        } else {
            ""
        },
        "trainer" => match plan.loss {
            Loss::Chunked => "ChunkedLossTrainer",
            Loss::Kernel => "KernelLossTrainer",
            Loss::Standard | Loss::Fused => "Trainer",
        },
        ;
        "checkpoint" => plan.method == Method::Qlora || split,
    )
}

/// A preference task's trainer, its config class, lengths and reference; `TrainingArguments` for SFT.
fn task_vars(plan: &Plan) -> Vars<'static> {
    // ORPO and CPO (SimPO as its loss) live in `trl.experimental` from TRL 1.0 on.
    let (module, config, trainer) = match plan.task {
        Task::Sft => ("trl", "TrainingArguments", ""),
        Task::Dpo => ("trl", "DPOConfig", "DPOTrainer"),
        Task::Orpo => ("trl.experimental.orpo", "ORPOConfig", "ORPOTrainer"),
        Task::Simpo | Task::Cpo => ("trl.experimental.cpo", "CPOConfig", "CPOTrainer"),
        Task::Kto => ("trl", "KTOConfig", "KTOTrainer"),
        Task::Grpo => ("trl", "GRPOConfig", "GRPOTrainer"),
    };
    let reference_task = plan.task.reference_chosen_by_key();
    let reference = plan.reference_source();
    vars!(
        "args_class" => config,
        "trl_module" => module,
        "ref_model_arg" => if reference_task { "ref_model=ref_model, " } else { "" },
        "pref_config" => config,
        "pref_trainer" => trainer,
        "pref_task" => plan.task.key(),
        "pref_prompt" => num(plan.prompt_tokens()),
        "pref_completion" => num(plan.completion_tokens()),
        "pref_ref" => reference.key(),
        "gens" => num(plan.generations),
        "grpo_prompts" => num(plan.micro_batch),
        "beta" => plan.beta.to_string(),
        "gen" => plan.generation.key(),
        "use_vllm" => if plan.generation == Generation::Hf { "False" } else { "True" },
        "vllm_mode" => if plan.generation == Generation::VllmServer { "server" } else { "colocate" },
        "vmem" => plan.vllm_memory.to_string(),
        "adapter_bool" => if plan.method == Method::Full { "False" } else { "True" },
        ;
        "trl" => plan.task != Task::Sft,
        "pref" => plan.task != Task::Sft && !plan.task.generates(),
        "pref_reference" => reference_task,
        "pref_simpo" => plan.task == Task::Simpo,
        "grpo" => plan.task == Task::Grpo,
        "pref_kto" => plan.task == Task::Kto,
        // ref=none: TRL 1.16 has no reference-free mode; precomputed log-probabilities keep no reference either
        // (no copy, no pass during the steps), which is what the plan counts.
        "precompute" => matches!(reference, Reference::Precomputed | Reference::None),
    )
}
