//! The Python export: a runnable transformers + PEFT + bitsandbytes script that trains a few steps of the plan
//! on random tokens and prints PyTorch's peak memory next to peakplan's prediction.
//!
//! The script is data (`script.py.tmpl`); this module works out the values of its header, model and run, and the
//! format modules give theirs: the adapter ([`peft`]), the quantization ([`bnb`]), the Trainer's arguments
//! ([`training_args`]) and the DeepSpeed config ([`deepspeed`]).

use super::deepspeed::{self, uses_deepspeed};
use super::template::{render, vars, Vars, PY_BOOLS};
use super::yaml::json_str;
use super::{bnb, hf_repo, method_label, num, peft, preset_of, table, training_args};
use crate::arch::Architecture;
use crate::engine::{estimate, Estimate};
use crate::plan::{Alloc, Attn, DType, Framework, Loss, Method, Optimizer, Plan, Precision};
use crate::presets::ModelId;

const SCRIPT: &str = include_str!("script.py.tmpl");

/// A Python string literal (JSON escaping is valid Python for these strings).
pub(super) fn py_str(s: &str) -> String {
    json_str(s)
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

pub(super) fn torch_dtype(bytes_kind: DType) -> &'static str {
    match bytes_kind {
        DType::Fp32 => "torch.float32",
        DType::Bf16 => "torch.bfloat16",
        DType::Fp16 => "torch.float16",
    }
}

/// A list of module names as a Python list literal.
pub(super) fn py_list(names: &[&str]) -> String {
    let mut s = String::from("[");
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('"');
        s.push_str(n);
        s.push('"');
    }
    s.push(']');
    s
}

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
    /// `max_position_embeddings`: the sequence, at least 4096.
    Positions,
    /// Learned position embeddings, at least 1.
    LearnedPositions,
    Experts,
    ExpertsPerToken,
    Tied,
    QkvBias,
    MlpBias,
    /// Falcon's multi-query attention: a single key/value head.
    MultiQuery,
    /// Falcon's parallel attention: one norm per layer.
    ParallelAttn,
    Yes,
    No,
}

// The fields of each model type, sorted by key (as `transformers` writes a config).
const LLAMA: &[(&str, Field)] = &[
    ("attention_bias", Field::QkvBias),
    ("head_dim", Field::HeadDim),
    ("hidden_size", Field::Hidden),
    ("intermediate_size", Field::Intermediate),
    ("max_position_embeddings", Field::Positions),
    ("mlp_bias", Field::MlpBias),
    ("num_attention_heads", Field::Heads),
    ("num_hidden_layers", Field::Layers),
    ("num_key_value_heads", Field::KvHeads),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const MISTRAL: &[(&str, Field)] = &[
    ("head_dim", Field::HeadDim),
    ("hidden_size", Field::Hidden),
    ("intermediate_size", Field::Intermediate),
    ("max_position_embeddings", Field::Positions),
    ("num_attention_heads", Field::Heads),
    ("num_hidden_layers", Field::Layers),
    ("num_key_value_heads", Field::KvHeads),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const MIXTRAL: &[(&str, Field)] = &[
    ("head_dim", Field::HeadDim),
    ("hidden_size", Field::Hidden),
    ("intermediate_size", Field::Intermediate),
    ("max_position_embeddings", Field::Positions),
    ("num_attention_heads", Field::Heads),
    ("num_experts_per_tok", Field::ExpertsPerToken),
    ("num_hidden_layers", Field::Layers),
    ("num_key_value_heads", Field::KvHeads),
    ("num_local_experts", Field::Experts),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const PHI: &[(&str, Field)] = &[
    ("hidden_size", Field::Hidden),
    ("intermediate_size", Field::Intermediate),
    ("max_position_embeddings", Field::Positions),
    ("num_attention_heads", Field::Heads),
    ("num_hidden_layers", Field::Layers),
    ("num_key_value_heads", Field::KvHeads),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const GPT_NEOX: &[(&str, Field)] = &[
    ("attention_bias", Field::QkvBias),
    ("hidden_size", Field::Hidden),
    ("intermediate_size", Field::Intermediate),
    ("max_position_embeddings", Field::Positions),
    ("num_attention_heads", Field::Heads),
    ("num_hidden_layers", Field::Layers),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const BLOOM: &[(&str, Field)] = &[
    ("hidden_size", Field::Hidden),
    ("n_head", Field::Heads),
    ("n_layer", Field::Layers),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const FALCON_GQA: &[(&str, Field)] = &[
    ("bias", Field::QkvBias),
    ("ffn_hidden_size", Field::Intermediate),
    ("hidden_size", Field::Hidden),
    ("max_position_embeddings", Field::Positions),
    ("new_decoder_architecture", Field::Yes),
    ("num_attention_heads", Field::Heads),
    ("num_hidden_layers", Field::Layers),
    ("num_kv_heads", Field::KvHeads),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const FALCON: &[(&str, Field)] = &[
    ("bias", Field::QkvBias),
    ("ffn_hidden_size", Field::Intermediate),
    ("hidden_size", Field::Hidden),
    ("max_position_embeddings", Field::Positions),
    ("multi_query", Field::MultiQuery),
    ("new_decoder_architecture", Field::No),
    ("num_attention_heads", Field::Heads),
    ("num_hidden_layers", Field::Layers),
    ("parallel_attn", Field::ParallelAttn),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const GPT_BIGCODE: &[(&str, Field)] = &[
    ("multi_query", Field::MultiQuery),
    ("n_embd", Field::Hidden),
    ("n_head", Field::Heads),
    ("n_inner", Field::Intermediate),
    ("n_layer", Field::Layers),
    ("n_positions", Field::LearnedPositions),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];
const GPT2: &[(&str, Field)] = &[
    ("n_embd", Field::Hidden),
    ("n_head", Field::Heads),
    ("n_inner", Field::Intermediate),
    ("n_layer", Field::Layers),
    ("n_positions", Field::LearnedPositions),
    ("tie_word_embeddings", Field::Tied),
    ("use_cache", Field::No),
    ("vocab_size", Field::Vocab),
];

/// The `transformers` model type and the config fields that rebuild `arch` (with random weights), as a Python
/// dict literal with the keys in sorted order.
pub(crate) fn model_config(arch: &Architecture, seq_len: u64) -> (&'static str, String) {
    let falcon_gqa = arch.kv_heads != 1 && arch.kv_heads != arch.heads;
    let (model_type, fields): (&'static str, &[(&str, Field)]) = match arch.model_type.as_str() {
        "llama" => ("llama", LLAMA),
        "mistral" => ("mistral", MISTRAL),
        "qwen2" => ("qwen2", MISTRAL),
        "gemma" => ("gemma", MISTRAL),
        "gemma2" => ("gemma2", MISTRAL),
        "mixtral" => ("mixtral", MIXTRAL),
        "phi3" => ("phi3", PHI),
        "phi" => ("phi", PHI),
        "gpt_neox" => ("gpt_neox", GPT_NEOX),
        "bloom" => ("bloom", BLOOM),
        "falcon" | "RefinedWebModel" | "RefinedWeb" if falcon_gqa => ("falcon", FALCON_GQA),
        "falcon" | "RefinedWebModel" | "RefinedWeb" => ("falcon", FALCON),
        "gpt_bigcode" => ("gpt_bigcode", GPT_BIGCODE),
        // gpt2 and GPT-3 (never released; GPT-2's layout at GPT-3's sizes).
        _ => ("gpt2", GPT2),
    };
    let mut s = String::from("{\n");
    for (key, field) in table(fields) {
        let n = match field {
            Field::Hidden => arch.hidden,
            Field::Intermediate => arch.intermediate,
            Field::Layers => arch.layers,
            Field::Heads => arch.heads,
            Field::KvHeads => arch.kv_heads,
            Field::HeadDim => arch.head_dim,
            Field::Vocab => arch.vocab,
            Field::Positions => seq_len.max(4096),
            Field::LearnedPositions => arch.learned_positions.max(1),
            Field::Experts => arch.experts,
            Field::ExpertsPerToken => arch.experts_per_token,
            Field::Tied => u64::from(arch.tied_embeddings),
            Field::QkvBias => u64::from(arch.qkv_bias),
            Field::MlpBias => u64::from(arch.mlp_bias),
            Field::MultiQuery => u64::from(arch.kv_heads == 1),
            Field::ParallelAttn => u64::from(arch.norms_per_layer == 1),
            Field::Yes => 1,
            Field::No => 0,
        };
        let flag = matches!(
            field,
            Field::Tied
                | Field::QkvBias
                | Field::MlpBias
                | Field::MultiQuery
                | Field::ParallelAttn
                | Field::Yes
                | Field::No
        );
        s.push_str("    \"");
        s.push_str(key);
        s.push_str("\": ");
        s.push_str(&if flag {
            py_bool(n == 1).to_string()
        } else {
            num(n)
        });
        s.push_str(",\n");
    }
    s.push('}');
    (model_type, s)
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
            peft::script_vars(plan, arch),
            bnb::script_vars(plan),
            training_args::script_vars(plan),
            deepspeed::script_vars(plan),
        ],
    )
}

/// The dtype the model computes in: the 4-bit compute dtype, and the Trainer's AMP dtype.
pub(super) fn compute_dtype(plan: &Plan) -> DType {
    match plan.precision {
        Precision::Fp32 => DType::Fp32,
        Precision::Bf16 | Precision::AmpBf16 => DType::Bf16,
        Precision::Fp16 | Precision::AmpFp16 => DType::Fp16,
    }
}

/// Whether the layers are split by `device_map` over several GPUs (in one process).
fn splits_layers(plan: &Plan) -> bool {
    plan.gpus > 1 && plan.split_layers
}

/// peakplan's prediction for what the script runs.
fn prediction(plan: &Plan, arch: &Architecture) -> Estimate {
    // The script runs the Hugging Face stack: its prediction is the `fw=hf` one.
    let mut hf_plan = plan.clone();
    hf_plan.framework = Framework::Hf;
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
    let repo = preset.and_then(hf_repo);
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
        "model_name" => preset.map(|m| m.name).unwrap_or(arch.model_type.as_str()).to_string(),
        "method" => method_label(plan.method),
        "b" => num(plan.micro_batch),
        "s" => num(plan.seq_len),
        "gpus" => num(plan.gpus),
        "plural" => if plan.gpus > 1 && !split { "s" } else { "" },
        "plan_str" => py_str(&query),
        "query" => query,
        "needs" => needs(plan),
        "repo" => repo.unwrap_or(""),
        "fw" => if plan.framework == Framework::Hf { "" } else { plan.framework.key() },
        "allocated" => num(e.peak_allocated_bytes),
        "reserved" => num(e.peak_reserved_bytes),
        "device" => num(e.device_bytes),
        "attn_impl" => match plan.attn {
            Attn::Eager => "eager",
            Attn::Sdpa => "sdpa",
            Attn::Flash => "flash_attention_2",
        },
        "attn" => plan.attn.key(),
        "model_dtype" => torch_dtype(model_dtype),
        "prec" => plan.precision.key(),
        "chunk" => num(plan.chunk),
        "hf_id" => py_str(repo.unwrap_or("")),
        "model_type" => model_type,
        "model_config" => config,
        ;
        "multi" => plan.gpus > 1 && !split,
        "split" => split,
        "chunked" => plan.loss == Loss::Chunked,
        "kernel" => plan.loss == Loss::Kernel,
        "gpt3" => arch.model_type == "gpt3",
        "positions" => matches!(model_type, "gpt2" | "gpt_bigcode"),
        "oib" => plan.optimizer_in_backward,
        "aoff" => plan.offload_activations,
        "expandable" => plan.allocator == Alloc::Expandable,
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
        } else if ds && plan.zero == 3 {
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
