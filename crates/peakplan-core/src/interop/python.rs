//! The Python export: a runnable transformers + PEFT + bitsandbytes script that trains a few steps of the plan
//! on random tokens and prints PyTorch's peak memory next to peakplan's prediction.
//!
//! The script is data (`script.py.tmpl`); this module only works out the values it is filled with.

use super::export::{float_text, uses_deepspeed};
use super::yaml::json_str;
use super::{
    embedding_modules, family, fill, hf_modules, hf_repo, method_label, module_names, num,
    preset_of, table, target_module_names, Family, PY_BOOLS,
};
use crate::arch::{Architecture, Mlp, Target};
use crate::engine::estimate;
use crate::plan::{
    Alloc, Attn, DType, Framework, Loss, Method, Optimizer, Peft, Plan, Precision, Quant, Targets,
    TokenTraining,
};

const SCRIPT: &str = include_str!("script.py.tmpl");

/// A Python string literal (JSON escaping is valid Python for these strings).
fn py_str(s: &str) -> String {
    json_str(s)
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

fn torch_dtype(bytes_kind: DType) -> &'static str {
    match bytes_kind {
        DType::Fp32 => "torch.float32",
        DType::Bf16 => "torch.bfloat16",
        DType::Fp16 => "torch.float16",
    }
}

/// A list of module names as a Python list literal.
fn py_list(names: &[&str]) -> String {
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
    // The script runs the Hugging Face stack: its prediction is the `fw=hf` one.
    let mut hf_plan = plan.clone();
    hf_plan.framework = Framework::Hf;
    hf_plan.optimizer_in_backward = false;
    hf_plan.offload_activations = false;
    // The Trainer drops the model's output before backward.
    hf_plan.hold_logits_bits = 0;
    let e = estimate(arch, &hf_plan);
    let preset = preset_of(plan, arch);
    let repo = preset.and_then(hf_repo);
    let (model_type, config) = model_config(arch, plan.seq_len);
    let peft = plan.method != Method::Full;
    let qlora = plan.method == Method::Qlora;
    let gptq_bits = plan.gptq_bits();
    let gptq = gptq_bits.is_some();
    let gptq_bits = gptq_bits.map(num).unwrap_or_default();
    let ds = uses_deepspeed(plan);
    // Layers split by device_map run in one process.
    let split = plan.gpus > 1 && plan.split_layers;
    let multi = plan.gpus > 1 && !split;
    let fused = plan.loss == Loss::Fused;
    let chunked = plan.loss == Loss::Chunked;

    // Dtypes: the model's own (16-bit unless fp32 or full AMP), the 4-bit compute dtype, the Trainer's AMP flag.
    let compute = match plan.precision {
        Precision::Fp32 => DType::Fp32,
        Precision::Bf16 | Precision::AmpBf16 => DType::Bf16,
        Precision::Fp16 | Precision::AmpFp16 => DType::Fp16,
    };
    let model_dtype = if plan.method == Method::Full && plan.precision.is_amp() {
        DType::Fp32
    } else {
        compute
    };
    let full_pure16 =
        plan.method == Method::Full && matches!(plan.precision, Precision::Bf16 | Precision::Fp16);
    let mut amp_bf16 =
        plan.precision == Precision::AmpBf16 || (full_pure16 && compute == DType::Bf16);
    let mut amp_fp16 =
        plan.precision == Precision::AmpFp16 || (full_pure16 && compute == DType::Fp16);
    if ds {
        // DeepSpeed insists that the Trainer's flags match its own bf16/fp16 sections.
        amp_bf16 = compute == DType::Bf16;
        amp_fp16 = compute == DType::Fp16;
    }
    let attn_impl = match plan.attn {
        Attn::Eager => "eager",
        Attn::Sdpa => "sdpa",
        Attn::Flash => "flash_attention_2",
    };
    let model_name = preset.map(|m| m.name).unwrap_or(arch.model_type.as_str());

    let mut needs = String::from("torch transformers accelerate");
    let opt = plan.optimizer.key();
    for (on, name) in [
        (peft, " peft"),
        (
            (qlora && !gptq)
                || matches!(
                    plan.optimizer,
                    Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit
                ),
            " bitsandbytes",
        ),
        (gptq, " optimum auto-gptq"),
        (ds, " deepspeed"),
        (fused || plan.liger, " liger-kernel"),
        (plan.attn == Attn::Flash, " flash-attn"),
    ] {
        if on {
            needs.push_str(name);
        }
    }

    // The adapter: target modules (PEFT's `all-linear` or a list), IA3's feed-forward ones, token training.
    let f = family(arch);
    let names = target_module_names(arch, plan.targets);
    let ia3 = plan.peft == Peft::Ia3;
    let target_modules = match &names {
        Some(n) => py_list(n),
        None if ia3 => py_list(&module_names(arch, Targets::ALL_LINEAR)),
        None => py_str("all-linear"),
    };
    let feedforward_modules = if ia3 {
        let down = hf_modules(f, Target::Down);
        let all = names.unwrap_or_else(|| module_names(arch, Targets::ALL_LINEAR));
        let kept: Vec<&str> = all.into_iter().filter(|m| down.contains(m)).collect();
        py_list(&kept)
    } else {
        String::new()
    };
    let mixtral = f == Family::Mixtral
        && [Target::Gate, Target::Up, Target::Down]
            .iter()
            .any(|t| plan.targets.contains(*t));
    let [embed, head] = embedding_modules(arch);
    let tt_rows = match plan.tokens {
        TokenTraining::Rows(n) => num(n),
        _ => String::new(),
    };

    let zero = num(u64::from(plan.zero));
    let b = num(plan.micro_batch);
    let s = num(plan.seq_len);
    let gpus = num(plan.gpus);
    let query = plan.to_query();
    let plan_str = py_str(&query);
    let allocated = num(e.peak_allocated_bytes);
    let reserved = num(e.peak_reserved_bytes);
    let device = num(e.device_bytes);
    let chunk = num(plan.chunk);
    let hf_id = py_str(repo.unwrap_or(""));
    let r = num(plan.rank);
    let vt = num(plan.virtual_tokens);
    let alpha = num(plan.rank.saturating_mul(2));
    let dropout = float_text(plan.dropout);
    let ds_batch = num(plan
        .micro_batch
        .saturating_mul(plan.gpus)
        .saturating_mul(plan.grad_accumulation));
    let ga = num(plan.grad_accumulation);
    let targets = plan.targets.key();
    let fw = if plan.framework == Framework::Hf {
        ""
    } else {
        plan.framework.key()
    };
    let compute_dtype = torch_dtype(compute);
    fill!(
        SCRIPT, PY_BOOLS;
        "model_name" => model_name,
        "method" => method_label(plan.method),
        "b" => &b,
        "s" => &s,
        "gpus" => &gpus,
        "plural" => if multi { "s" } else { "" },
        "query" => &query,
        "needs" => &needs,
        "repo" => repo.unwrap_or(""),
        "fw" => fw,
        "peft_config" => match plan.peft {
            Peft::Ia3 => "IA3Config",
            Peft::Vera => "VeraConfig",
            Peft::Loha => "LoHaConfig",
            Peft::Oft => "OFTConfig",
            Peft::Ln => "LNTuningConfig",
            Peft::Prompt => "PromptTuningConfig",
            Peft::Prefix => "PrefixTuningConfig",
            Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa => "LoraConfig",
        },
        "kbit_import" => if qlora { ", prepare_model_for_kbit_training" } else { "" },
        "plan_str" => &plan_str,
        "allocated" => &allocated,
        "reserved" => &reserved,
        "device" => &device,
        "attn_impl" => attn_impl,
        "attn" => plan.attn.key(),
        "opt" => opt,
        "model_dtype" => torch_dtype(model_dtype),
        "prec" => plan.precision.key(),
        "chunk" => &chunk,
        "hf_id" => &hf_id,
        "model_type" => model_type,
        "model_config" => &config,
        "targets" => &targets,
        "target_modules" => &target_modules,
        "feedforward_modules" => &feedforward_modules,
        "embed" => embed,
        "head" => head,
        "peft" => plan.peft.key(),
        "vt" => &vt,
        "r" => &r,
        "alpha" => &alpha,
        "dropout" => &dropout,
        "tt_rows" => &tt_rows,
        "adapter_dtype" => torch_dtype(plan.adapter_dtype),
        "adtype" => plan.adapter_dtype.key(),
        "quant" => plan.quant.key(),
        "gptq_bits" => &gptq_bits,
        "compute_dtype" => compute_dtype,
        "zero" => &zero,
        "ds_batch" => &ds_batch,
        "ga" => &ga,
        "device_map" => if split {
            "device_map=\"auto\", "
        } else if ds && plan.zero == 3 {
            ""
        } else {
            "device_map={\"\": LOCAL_RANK}, "
        },
        // The GPUs whose peaks count: all of them when the layers are split, else this process's.
        "quantization_arg" => if qlora { "quantization_config=QUANTIZATION, " } else { "" },
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
        "trainer" => if chunked {
            "ChunkedLossTrainer"
        } else if plan.loss == Loss::Kernel {
            "KernelLossTrainer"
        } else {
            "Trainer"
        },
        ;
        "multi" => multi,
        "split" => split,
        "checkpoint" => qlora || split,
        "ds" => ds,
        "qsave" => plan.qlora_saves_input && qlora,
        "qlora" => qlora,
        "kernel" => plan.loss == Loss::Kernel,
        "int8" => qlora && plan.quant == Quant::Int8,
        "nf4_fp4" => qlora && matches!(plan.quant, Quant::Nf4 | Quant::Fp4),
        "gptq" => gptq,
        "bnb" => qlora && !gptq,
        "adapter" => peft,
        "gc" => plan.grad_checkpointing,
        "bf16" => amp_bf16,
        "fp16" => amp_fp16,
        "chunked" => chunked,
        "gpt3" => arch.model_type == "gpt3",
        "mixtral" => mixtral,
        "no_gate" => arch.mlp == Mlp::Plain && plan.targets.contains(Target::Gate),
        "ia3" => ia3,
        "vera" => plan.peft == Peft::Vera,
        "loha" => plan.peft == Peft::Loha,
        "oft" => plan.peft == Peft::Oft,
        "ln" => plan.peft == Peft::Ln,
        "prompt" => plan.peft == Peft::Prompt,
        "prefix" => plan.peft == Peft::Prefix,
        "lora_family" => matches!(plan.peft, Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa),
        "tt_all" => plan.tokens == TokenTraining::All,
        "rslora" => plan.peft == Peft::Rslora,
        "dora" => plan.peft == Peft::Dora,
        "lorafa" => plan.peft == Peft::Lorafa,
        "dq" => plan.double_quant,
        "zero3" => ds && plan.zero == 3,
        "upcast" => plan.upcast,
        "ds_bf16" => matches!(plan.precision, Precision::Bf16 | Precision::AmpBf16),
        "ds_fp16" => matches!(plan.precision, Precision::Fp16 | Precision::AmpFp16),
        "positions" => matches!(model_type, "gpt2" | "gpt_bigcode"),
        "liger_kernel" => fused || plan.liger,
        "liger" => plan.liger,
        "oib" => plan.optimizer_in_backward,
        "aoff" => plan.offload_activations,
        "fused" => fused,
        "compile" => plan.compile,
        "expandable" => plan.allocator == Alloc::Expandable,
        "emptied" => plan.allocator == Alloc::Emptied,
    )
}
