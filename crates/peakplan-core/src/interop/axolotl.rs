//! axolotl YAML: the export (with the plan line, `# peakplan: QUERY`) and the import of an axolotl config.
//!
//! The export's text is data (`axolotl.yaml.tmpl`); this module works out the values it is filled with.

use super::deepspeed;
use super::fields::{get, get_set, get_str, has_any, is_empty, show, Reader};
use super::names::{
    axolotl_peft_without_key, embedding_modules, target_module_names, LINEAR_GROUPS,
};
use super::sharding;
use super::template::{render, vars, YAML_BOOLS};
use super::trl;
use super::yaml::scalar_text;
use super::{float_text, model_repo, num, yaml_header, yaml_items};
use crate::arch::{Architecture, Target};
use crate::plan::{
    Alloc, Attn, Loss, Method, Peft, Plan, Precision, Quant, Targets, TokenTraining,
};
use serde_json::{Map, Value};

const AXOLOTL: &str = include_str!("axolotl.yaml.tmpl");

/// An axolotl config for the plan.
#[inline(never)]
pub(crate) fn export(plan: &Plan, arch: &Architecture) -> String {
    let repo = model_repo(plan, arch).map(|r| scalar_text(&r));
    // A Hub model at another revision than `main` names it in axolotl's own key.
    let revision = plan
        .hub
        .as_ref()
        .filter(|id| id.revision() != "main")
        .map(|id| scalar_text(id.revision()));
    let all_linear = Targets(plan.targets.0 & Targets::ALL_LINEAR.0) == Targets::ALL_LINEAR;
    let mut target_items = String::new();
    if !all_linear {
        let names = target_module_names(arch, plan.targets).unwrap_or_default();
        yaml_items(&mut target_items, "  ", &names);
    }
    let [embed, head] = embedding_modules(arch);
    let (embed, head) = (scalar_text(embed), scalar_text(head));
    let tt_rows = match plan.tokens {
        TokenTraining::Rows(n) => num(n),
        _ => String::new(),
    };
    let (bf16, fp16, pure) = match plan.precision {
        Precision::AmpBf16 => (true, false, ""),
        Precision::AmpFp16 => (false, true, ""),
        Precision::Bf16 if plan.method == Method::Full => (true, false, ""),
        Precision::Fp16 if plan.method == Method::Full => (false, true, ""),
        Precision::Bf16 => (false, false, "bfloat16"),
        Precision::Fp16 => (false, false, "float16"),
        Precision::Fp32 => (false, false, ""),
    };
    let r = num(plan.rank);
    let alpha = num(plan.rank.saturating_mul(2));
    let dropout = float_text(plan.dropout);
    let ds_file = deepspeed::file_name(plan);
    let fused = plan.loss == Loss::Fused;
    // PEFT kinds axolotl has no key for.
    let peft_no_key = if axolotl_peft_without_key().contains(&plan.peft.key()) {
        plan.peft.key()
    } else {
        ""
    };
    let attn_key = match plan.attn {
        Attn::Flash => "flash_attention",
        Attn::Sdpa => "sdp_attention",
        Attn::Eager => "eager_attention",
    };
    let launch = sharding::launch(plan);
    let version = sharding::fsdp_version(launch);
    let fsdp_version = if version > 0 {
        num(version)
    } else {
        String::new()
    };
    let sh = plan.sharding();
    let own = vars!(
        "fsdp_version" => &fsdp_version,
        "strategy" => if plan.zero == 3 { "FULL_SHARD" } else { "SHARD_GRAD_OP" },
        "reshard" => if plan.zero == 3 { "true" } else { "false" },
        "repo" => repo.as_deref().unwrap_or(""),
        "revision" => revision.as_deref().unwrap_or(""),
        "quant" => plan.quant.key(),
        "r" => &r,
        "alpha" => &alpha,
        "dropout" => &dropout,
        "target_items" => &target_items,
        "peft_no_key" => peft_no_key,
        "embed" => &embed,
        "head" => &head,
        "tt_rows" => &tt_rows,
        "attn_key" => attn_key,
        "opt" => plan.optimizer.key(),
        "pure" => pure,
        "ds_file" => &ds_file,
        ;
        "lora" => plan.method == Method::Lora,
        "qlora" => plan.method == Method::Qlora && matches!(plan.quant, Quant::Nf4 | Quant::Fp4),
        "gptq" => plan.gptq_bits().is_some(),
        "int8" => plan.method == Method::Qlora && plan.quant == Quant::Int8,
        "dq" => plan.double_quant,
        "adapter" => plan.method != Method::Full,
        "all_linear" => all_linear,
        "lm_head" => plan.targets.contains(Target::LmHead),
        "rslora" => plan.peft == Peft::Rslora,
        "dora" => plan.peft == Peft::Dora,
        "tt_all" => plan.tokens == TokenTraining::All,
        "gc" => plan.checkpointing.on(),
        "liger_plugin" => fused || plan.liger,
        "oib" => plan.optimizer_in_backward,
        "aoff" => plan.offload_activations,
        "liger" => plan.liger,
        "fused" => fused,
        "kernel" => plan.loss == Loss::Kernel,
        "compile" => plan.compile,
        "chunked" => plan.loss == Loss::Chunked,
        "full_amp" => plan.method == Method::Full && plan.precision.is_amp(),
        "bf16" => bf16,
        "fp16" => fp16,
        "ds" => deepspeed::uses_deepspeed(plan),
        "fsdp1" => version == 1,
        "fsdp2" => version == 2,
        "cpuoff" => plan.cpu_offload,
        // The Trainer gives LoRA adapters units of their own; a plan of mixed units says what axolotl cannot.
        "wrap_block" => version == 1 && sh.mixed_units,
        "gsync1" => version > 0 && sh.sync_each_batch,
        "emptied" => plan.allocator == Alloc::Emptied,
    );
    render(AXOLOTL, YAML_BOOLS, &[yaml_header(plan, arch), own])
}

#[rustfmt::skip]
const AXOLOTL_NEUTRAL: &[&str] = &[
    "base_model_config", "model_type", "tokenizer_type", "tokenizer_config", "tokenizer_use_fast",
    "trust_remote_code", "datasets", "test_datasets", "dataset_prepared_path", "val_set_size", "output_dir",
    "num_epochs", "max_steps", "learning_rate", "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps",
    "warmup_ratio", "weight_decay", "logging_steps", "saves_per_epoch", "save_steps", "save_strategy",
    "save_total_limit", "save_safetensors", "evals_per_epoch", "eval_steps", "eval_strategy", "eval_batch_size",
    "eval_sample_packing", "eval_max_new_tokens", "eval_table_size", "wandb_project", "wandb_entity", "wandb_watch",
    "wandb_name", "wandb_run_id", "wandb_log_model", "mlflow_tracking_uri", "special_tokens", "tokens",
    "train_on_inputs", "group_by_length", "strict", "seed", "early_stopping_patience", "resume_from_checkpoint",
    "auto_resume_from_checkpoints", "local_rank", "hub_model_id", "hub_strategy", "chat_template", "debug",
    "lora_model_dir", "lora_fan_in_fan_out", "sample_packing", "pad_to_sequence_len",
    "max_grad_norm", "gradient_checkpointing_kwargs", "tf32", "lora_alpha", "plugins",
    "shuffle_merged_datasets", "dataset_processes", "remove_unused_columns", "ddp_timeout",
    "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "adam_beta1", "adam_beta2", "adam_epsilon",
    "lr_quadratic_warmup", "cosine_min_lr_ratio", "loss_watchdog_threshold", "loss_watchdog_patience",
    "is_llama_derived_model", "is_mistral_derived_model", "is_qwen_derived_model", "default_system_message",
    "hf_use_auth_token", "push_dataset_to_hub", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_prefetch_factor", "sequence_len_overflow_handling", "max_packed_sequence_len",
    "sample_packing_eff_est", "total_num_tokens", "liger_cross_entropy", "neftune_noise_alpha",
    "output_router_logits", "use_tensorboard", "profiler_steps", "include_tokens_per_second",
    "flash_attn_cross_entropy", "flash_attn_rms_norm", "flash_attn_fuse_qkv", "flash_attn_fuse_mlp",
    "val_set_size_ratio",
];

/// The fields [`read`] maps to plan keys.
#[rustfmt::skip]
const HANDLED: &[&str] = &[
    "gradient_accumulation_steps", "base_model", "revision_of_model", "adapter", "load_in_4bit", "load_in_8bit", "gptq", "lora_r",
    "lora_dropout", "lora_target_linear", "lora_target_modules", "sequence_len", "micro_batch_size",
    "gradient_checkpointing", "flash_attention", "sdp_attention", "eager_attention", "attn_implementation",
    "xformers_attention", "liger_fused_linear_cross_entropy", "cut_cross_entropy", "unsloth_cross_entropy_loss",
    "optimizer", "bf16", "fp16", "bfloat16", "float16", "deepspeed", "fsdp", "bnb_config_kwargs", "peft_use_dora",
    "peft_use_rslora", "lora_modules_to_save", "torch_compile", "liger_rope", "liger_rms_norm",
    "liger_glu_activation", "liger_swiglu", "liger_layer_norm", "device_map", "fsdp_config", "fsdp_version",
];

#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) {
    if let Some(v) = get(map, "base_model") {
        // A Hub model at another revision: `revision_of_model` beside its id.
        let at_revision = match (v, get(map, "revision_of_model")) {
            (Value::String(m), Some(Value::String(rev))) if !m.contains('@') => {
                Value::String(format!("{m}@{rev}"))
            }
            _ => v.clone(),
        };
        r.model("base_model", &at_revision);
    }
    let (method, eight) = read_method(r, map);
    if let Some(b) = r.flag_in(map, "", "torch_compile") {
        r.fact_bool("compile", b, "torch_compile");
    }
    let liger_keys = [
        "liger_rope",
        "liger_rms_norm",
        "liger_glu_activation",
        "liger_swiglu",
        "liger_layer_norm",
    ];
    if has_any(map, &liger_keys) {
        let on = liger_keys.iter().any(|k| r.on(map, k));
        r.fact_bool("liger", on, "liger_rms_norm");
    }
    if eight && method == Some(Method::Full) {
        r.unsupported("load_in_8bit");
        r.note("load_in_8bit without an adapter: a full fine-tune cannot train 8-bit weights; planned with 16-bit weights");
    }
    if let Some(Value::Object(kw)) = get(map, "bnb_config_kwargs") {
        read_bnb_kwargs(r, kw);
    }
    if let Some(v) = get(map, "lora_r") {
        r.rank("lora_r", v);
    }
    if let Some(v) = get(map, "lora_dropout") {
        r.dropout("lora_dropout", v);
    }
    let linear = r.on(map, "lora_target_linear");
    let linear_groups: &[u8] = if linear { &LINEAR_GROUPS } else { &[] };
    match get_set(map, "lora_target_modules") {
        Some(v) => r.targets("lora_target_modules", v, linear_groups),
        None if linear => r.targets_from_groups("lora_target_linear", linear_groups),
        None => {}
    }
    // accelerate's automatic placements split the layers over the GPUs in one process; a hand-written map is
    // not modelled.
    match get_str(map, "device_map") {
        Some("auto" | "balanced" | "balanced_low_0" | "sequential") => {
            r.fact("split", "1", "device_map")
        }
        Some(_) => r.unsupported("device_map"),
        None if get(map, "device_map").is_some() => r.unsupported("device_map"),
        None => {}
    }
    if let Some(v) = get(map, "sequence_len") {
        r.seq("sequence_len", v);
    }
    if let Some(v) = get(map, "micro_batch_size") {
        r.batch("micro_batch_size", v);
    }
    if let Some(v) = get(map, "gradient_checkpointing") {
        r.gc("gradient_checkpointing", v);
    }
    read_attention(r, map);
    if r.on(map, "liger_fused_linear_cross_entropy") {
        r.fact("loss", "fused", "liger_fused_linear_cross_entropy");
    } else if r.on(map, "cut_cross_entropy") {
        r.fact("loss", "fused", "cut_cross_entropy");
        r.note("cut_cross_entropy keeps no full logits: planned as the fused loss");
    } else if r.on(map, "unsloth_cross_entropy_loss") {
        r.fact("loss", "kernel", "unsloth_cross_entropy_loss");
    }
    if let Some(v) = get(map, "optimizer") {
        r.optimizer("optimizer", v);
    }
    read_precision(r, map, method == Some(Method::Full));
    match get(map, "deepspeed") {
        Some(Value::String(p)) if !p.is_empty() => deepspeed::read_path(r, "deepspeed", p),
        Some(Value::Object(ds)) => deepspeed::read(r, "deepspeed.", ds),
        _ => {}
    }
    read_fsdp(r, map);
    if let Some(v) = get(map, "gradient_accumulation_steps") {
        r.accumulation("gradient_accumulation_steps", v);
    }
    let rest = trl::read_axolotl(r, map);
    r.rest("", &rest, HANDLED, AXOLOTL_NEUTRAL);
}

/// `adapter` and the quantization flags: the method (and the quantization they imply), the PEFT kind; with
/// whether `load_in_8bit` is on.
#[inline(never)]
fn read_method(r: &mut Reader, map: &Map<String, Value>) -> (Option<Method>, bool) {
    let four = r.on(map, "load_in_4bit");
    let eight = r.on(map, "load_in_8bit");
    let gptq = r.on(map, "gptq");
    let method = match get(map, "adapter") {
        None | Some(Value::Null) => Some(Method::Full),
        Some(Value::String(s)) if s.is_empty() => Some(Method::Full),
        Some(Value::String(s)) if s == "qlora" => Some(Method::Qlora),
        Some(Value::String(s)) if s == "lora" && gptq => {
            r.note("adapter is lora with gptq: true: LoRA over a GPTQ checkpoint, whose own bits decide (quant=gptq4 unless the plan says gptq8)");
            r.fact_also("quant", "gptq4", &["gptq8"], "gptq");
            Some(Method::Qlora)
        }
        Some(Value::String(s)) if s == "lora" && four => {
            r.note("adapter is lora with load_in_4bit: true, which is QLoRA");
            Some(Method::Qlora)
        }
        Some(Value::String(s)) if s == "lora" && eight => {
            r.note("adapter is lora with load_in_8bit: true: LoRA over an LLM.int8 base (method=qlora&quant=int8)");
            r.fact("quant", "int8", "load_in_8bit");
            Some(Method::Qlora)
        }
        Some(Value::String(s)) if s == "lora" => Some(Method::Lora),
        Some(other) => {
            r.unsupported_value("adapter", other.as_str().unwrap_or("?"));
            r.note_fmt(format_args!(
                "adapter = {} is not LoRA or QLoRA; method unchanged",
                show(other)
            ));
            None
        }
    };
    if let Some(m) = method {
        r.fact(
            "method",
            m.key(),
            if m == Method::Full {
                "no adapter"
            } else {
                "adapter"
            },
        );
    }
    if method.is_some_and(|m| m != Method::Full) {
        if r.on(map, "peft_use_dora") {
            r.fact("peft", "dora", "peft_use_dora");
        } else if r.on(map, "peft_use_rslora") {
            r.fact("peft", "rslora", "peft_use_rslora");
        } else {
            r.fact_also("peft", "lora", axolotl_peft_without_key(), "adapter");
        }
        if let Some(v) = get(map, "lora_modules_to_save") {
            r.modules_to_save("lora_modules_to_save", v);
        }
    }
    (method, eight)
}

/// `bnb_config_kwargs`: the bitsandbytes settings axolotl passes through.
#[inline(never)]
fn read_bnb_kwargs(r: &mut Reader, kw: &Map<String, Value>) {
    if let Some(v) = get(kw, "bnb_4bit_quant_type") {
        let field = "bnb_config_kwargs.bnb_4bit_quant_type";
        if let Some(t) = r.text(field, v) {
            r.fact("quant", &t.to_ascii_lowercase(), field);
        }
    }
    if let Some(b) = r.flag_in(kw, "bnb_config_kwargs.", "bnb_4bit_use_double_quant") {
        r.fact_bool("dq", b, "bnb_config_kwargs.bnb_4bit_use_double_quant");
    }
    r.rest(
        "bnb_config_kwargs.",
        kw,
        &["bnb_4bit_quant_type", "bnb_4bit_use_double_quant"],
        &[
            "llm_int8_has_fp16_weight",
            "bnb_4bit_compute_dtype",
            "llm_int8_threshold",
        ],
    );
}

/// The attention implementation: one of the flags, else `attn_implementation`.
#[inline(never)]
fn read_attention(r: &mut Reader, map: &Map<String, Value>) {
    if r.on(map, "flash_attention") {
        r.fact("attn", "flash", "flash_attention");
    } else if r.on(map, "sdp_attention") {
        r.fact("attn", "sdpa", "sdp_attention");
    } else if r.on(map, "eager_attention") {
        r.fact("attn", "eager", "eager_attention");
    } else if let Some(v) = get(map, "attn_implementation") {
        match v.as_str() {
            Some("eager") => r.fact("attn", "eager", "attn_implementation"),
            Some("sdpa") => r.fact("attn", "sdpa", "attn_implementation"),
            Some(s) if s.starts_with("flash_attention") => {
                r.fact("attn", "flash", "attn_implementation")
            }
            Some(s) if !s.is_empty() => r.unsupported_value("attn_implementation", s),
            _ => {}
        }
    }
    if r.on(map, "xformers_attention") {
        r.unsupported("xformers_attention");
    }
}

/// axolotl loads the weights in the 16-bit dtype whenever bf16/fp16 is on: for full fine-tuning that is
/// prec=bf16 for memory (no fp32 master), for adapters it is mixed precision over 16-bit weights.
#[inline(never)]
fn read_precision(r: &mut Reader, map: &Map<String, Value>, full: bool) {
    let flag16 = |r: &mut Reader, k: &str| -> Option<bool> {
        match get(map, k) {
            Some(Value::String(s)) if matches!(s.as_str(), "auto" | "full") => Some(true),
            Some(v) => r.flag(k, v),
            None => None,
        }
    };
    let bf16 = flag16(r, "bf16");
    let fp16 = flag16(r, "fp16");
    let pure_bf16 = r.on(map, "bfloat16");
    let pure_fp16 = r.on(map, "float16");
    // (the key, its value, the value it can also be, the field)
    let (value, also, field): (&str, &str, &str) = if pure_bf16 {
        ("bf16", "amp_bf16", "bfloat16")
    } else if pure_fp16 {
        ("fp16", "amp_fp16", "float16")
    } else if bf16 == Some(true) {
        if full {
            ("bf16", "amp_bf16", "bf16")
        } else {
            ("amp_bf16", "bf16", "bf16")
        }
    } else if fp16 == Some(true) {
        if full {
            ("fp16", "amp_fp16", "fp16")
        } else {
            ("amp_fp16", "fp16", "fp16")
        }
    } else if bf16 == Some(false) || fp16 == Some(false) {
        ("fp32", "", "bf16")
    } else {
        return;
    };
    // Pure 16-bit flags only match mixed precision for full fine-tuning.
    let also: &[&str] = if also.is_empty() || ((pure_bf16 || pure_fp16) && !full) {
        &[]
    } else {
        std::slice::from_ref(&also)
    };
    r.fact_also("prec", value, also, field);
}

/// axolotl's FSDP: the `fsdp` list (strategy, offloading), `fsdp_version` (top level, or inside `fsdp_config`) and
/// `fsdp_config`. FSDP named without a version is FSDP1, axolotl's original form.
#[inline(never)]
fn read_fsdp(r: &mut Reader, map: &Map<String, Value>) {
    let option = get(map, "fsdp").filter(|v| !is_empty(v));
    if let Some(v) = option {
        r.fsdp("fsdp", v);
    }
    let mut version = false;
    if let Some(v) = get_set(map, "fsdp_version") {
        version = sharding::version(r, "fsdp_version", v);
    }
    let said = sharding::read_config_field(r, map, "fsdp_config");
    let config = get(map, "fsdp_config").is_some_and(|v| !is_empty(v));
    if !version && !said.version && (option.is_some() || config) {
        r.fact(
            "shard",
            "fsdp1",
            if option.is_some() {
                "fsdp"
            } else {
                "fsdp_config"
            },
        );
        r.note(
            "FSDP without fsdp_version is axolotl's FSDP1 (fsdp_version: 2 for FSDP2): shard=fsdp1",
        );
    }
    if (version || said.version) && !said.strategy && option.is_none() {
        // accelerate's default strategy: FULL_SHARD, resharding after forward.
        r.fact("zero", "3", "fsdp_config");
    }
}
