//! torchtune: the config override for a plan's recipe (with the plan line, `# peakplan: QUERY`) and the import of
//! a torchtune config.
//!
//! The export's text is data (`torchtune.yaml.tmpl`); this module works out the values it is filled with.

use super::fields::{dtype_name, get, get_str, has_any, show, Reader};
use super::names::{module_targets, PEFT_WITHOUT_KEY};
use super::template::{render, vars, YAML_BOOLS};
use super::{float_text, num, preset_of, table, yaml_header, yaml_items};
use crate::arch::{Architecture, Target};
use crate::plan::{
    Alloc, Attn, Framework, GradSync, Loss, Method, Optimizer, Peft, Plan, Precision, Quant,
    Reference, Shard, Task, TokenTraining, Wrap,
};
use crate::presets::ModelId;
use crate::text::quote;
use serde_json::{Map, Value};

const TORCHTUNE: &str = include_str!("torchtune.yaml.tmpl");

/// torchtune model builders of the bundled presets: (module, base builder).
const TORCHTUNE_MODELS: &[(&str, &str, &str)] = &[
    ("llama-2-7b", "llama2", "llama2_7b"),
    ("llama-2-13b", "llama2", "llama2_13b"),
    ("llama-2-70b", "llama2", "llama2_70b"),
    ("llama-3.1-8b", "llama3_1", "llama3_1_8b"),
    ("llama-3.1-70b", "llama3_1", "llama3_1_70b"),
    ("llama-3.2-1b", "llama3_2", "llama3_2_1b"),
    ("llama-3.2-3b", "llama3_2", "llama3_2_3b"),
    ("mistral-7b", "mistral", "mistral_7b"),
    ("gemma-7b", "gemma", "gemma_7b"),
    ("gemma-2-9b", "gemma2", "gemma2_9b"),
    ("phi-3-mini", "phi3", "phi3_mini"),
    ("qwen2.5-0.5b", "qwen2_5", "qwen2_5_0_5b"),
    ("qwen2.5-7b", "qwen2_5", "qwen2_5_7b_base"),
];

/// torchtune's optimizer component for a plan optimizer, and whether `fused: true` goes with it.
pub(crate) fn optimizer(o: Optimizer) -> (&'static str, bool) {
    match o {
        Optimizer::AdamwTorch => ("torch.optim.AdamW", false),
        Optimizer::AdamwTorchFused => ("torch.optim.AdamW", true),
        Optimizer::Adamw8bit => ("bitsandbytes.optim.AdamW8bit", false),
        Optimizer::PagedAdamw8bit => ("bitsandbytes.optim.PagedAdamW8bit", false),
        Optimizer::PagedAdamw32bit => ("bitsandbytes.optim.PagedAdamW32bit", false),
        Optimizer::Sgd => ("torch.optim.SGD", false),
        Optimizer::Adafactor => ("transformers.optimization.Adafactor", false),
    }
}

/// torchtune's name of each attention projection.
const TORCHTUNE_ATTN: &[(Target, &str)] = &[
    (Target::Q, "q_proj"),
    (Target::K, "k_proj"),
    (Target::V, "v_proj"),
    (Target::O, "output_proj"),
];

/// The plan as torchtune runs it: torchtune's loss profile, weights in bf16 (or fp32; torchtune has no mixed
/// precision and no fp16) and adapters in the model dtype.
fn torchtune_plan(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    Framework::Torchtune.apply_defaults(&mut p);
    // Preference tasks are planned over TRL only: the override is the SFT recipe's (said in the text).
    p.task = Task::Sft;
    p.reference = Reference::Auto;
    p.prompt_tokens = None;
    // torchtune quantizes its QLoRA base to NF4 only, and has no cross-entropy kernel like unsloth's.
    p.quant = Quant::Nf4;
    if p.loss == Loss::Kernel {
        p.loss = Loss::Standard;
    }
    if p.precision != Precision::Fp32 {
        p.precision = Precision::Bf16;
    }
    // Its distributed recipes shard with FSDP2 and reduce every micro-batch: what `auto` resolves to here.
    p.shard = Shard::Auto;
    p.wrap = Wrap::Auto;
    p.grad_sync = GradSync::Auto;
    p.adapter_dtype = if p.precision == Precision::Fp32 {
        crate::plan::DType::Fp32
    } else {
        crate::plan::DType::Bf16
    };
    p
}

/// torchtune's model builder of a bundled preset (`llama3_1.lora_llama3_1_8b`); empty for other models.
fn builder(plan: &Plan, arch: &Architecture) -> String {
    let adapter = plan.method != Method::Full;
    let preset = preset_of(plan, arch).map(ModelId::preset);
    match table(TORCHTUNE_MODELS)
        .iter()
        .find(|(id, _, _)| preset.is_some_and(|m| m.id == *id))
    {
        Some((_, module, base)) => {
            let mut b = String::from(*module);
            b.push_str(if adapter { ".lora_" } else { "." });
            b.push_str(base);
            b
        }
        None => String::new(),
    }
}

/// A torchtune config override for the plan's recipe.
#[inline(never)]
pub(crate) fn export(plan: &Plan, arch: &Architecture) -> String {
    let original_precision = plan.precision;
    let original_quant = plan.quant;
    let original_loss = plan.loss;
    let original_task = plan.task;
    let original_sharding = plan.sharding();
    let tp = torchtune_plan(plan);
    let plan = &tp;
    let distributed = plan.gpus > 1;
    let adapter = plan.method != Method::Full;
    let recipe = match (plan.method, distributed) {
        (Method::Full, false) => "full_finetune_single_device",
        (Method::Full, true) => "full_finetune_distributed",
        (_, false) => "lora_finetune_single_device",
        (_, true) => "lora_finetune_distributed",
    };
    let builder = builder(plan, arch);
    let mut attn_items = String::new();
    let attn: Vec<&str> = TORCHTUNE_ATTN
        .iter()
        .filter(|(t, _)| plan.targets.contains(*t))
        .map(|(_, name)| *name)
        .collect();
    yaml_items(&mut attn_items, "    ", &attn);
    let mlp = [Target::Gate, Target::Up, Target::Down];
    let any_mlp = mlp.iter().any(|t| plan.targets.contains(*t));
    let all_mlp = mlp.iter().all(|t| plan.targets.contains(*t));
    let r = num(plan.rank);
    let alpha = num(plan.rank.saturating_mul(2));
    let dropout = float_text(plan.dropout);
    let (opt, fused) = optimizer(plan.optimizer);
    let tt = if plan.tokens != TokenTraining::Frozen && adapter {
        plan.get("tt").unwrap_or_default()
    } else {
        String::new()
    };
    // PEFT kinds torchtune has no key for.
    let peft_no_key = if PEFT_WITHOUT_KEY.contains(&plan.peft.key()) {
        plan.peft.key()
    } else {
        ""
    };
    let prec_note = if original_precision == plan.precision {
        ""
    } else {
        original_precision.key()
    };
    let distributed_fsdp = distributed && plan.zero >= 2;
    let sharding = plan.sharding();
    // What the plan said that torchtune's recipes do otherwise (FSDP1 or DeepSpeed; accumulation in no_sync).
    let shard_note = if distributed_fsdp && original_sharding.shard != sharding.shard {
        original_sharding.shard.key()
    } else {
        ""
    };
    let own = vars!(
        "recipe" => recipe,
        "shard_note" => shard_note,
        "reshard" => if plan.zero == 3 { "true" } else { "false" },
        "attn_note" => if plan.attn == Attn::Sdpa { "" } else { plan.attn.key() },
        "builder" => &builder,
        "attn_items" => &attn_items,
        "r" => &r,
        "alpha" => &alpha,
        "dropout" => &dropout,
        "peft_no_key" => peft_no_key,
        "prec_note" => prec_note,
        "task_note" => if original_task == Task::Sft { "" } else { original_task.key() },
        "loss_note" => if original_loss != plan.loss { original_loss.key() } else { "" },
        "quant_note" => if plan.method == Method::Qlora && original_quant != plan.quant {
            original_quant.key()
        } else {
            ""
        },
        "dtype" => if plan.precision == Precision::Fp32 { "fp32" } else { "bf16" },
        "opt" => opt,
        "loss_component" => match plan.loss {
            // torchtune_plan has made a kernel loss standard.
            Loss::Standard | Loss::Kernel => "torch.nn.CrossEntropyLoss",
            Loss::Chunked => "torchtune.modules.loss.CEWithChunkedOutputLoss",
            Loss::Fused => "torchtune.modules.loss.LinearCrossEntropyLoss",
        },
        "tt_note" => &tt,
        ;
        "not_zero3" => plan.zero < 2,
        "fsdp_zero" => distributed_fsdp,
        "cpuoff" => plan.cpu_offload,
        "gsync_note" => distributed && original_sharding.sync_each_batch != sharding.sync_each_batch,
        "oib" => plan.optimizer_in_backward,
        "aoff" => plan.offload_activations,
        "adapter" => adapter,
        "partial_mlp" => any_mlp && !all_mlp,
        "any_mlp" => any_mlp,
        "lm_head" => plan.targets.contains(Target::LmHead),
        "quantize" => plan.method == Method::Qlora,
        "dora" => plan.peft == Peft::Dora,
        "gc" => plan.checkpointing.on(),
        "adamw" => opt == "torch.optim.AdamW",
        "fused" => fused,
        "adafactor" => plan.optimizer == Optimizer::Adafactor,
        "compile" => plan.compile,
        "liger" => plan.liger,
        "emptied" => plan.allocator == Alloc::Emptied,
    );
    render(TORCHTUNE, YAML_BOOLS, &[yaml_header(plan, arch), own])
}

#[rustfmt::skip]
const TORCHTUNE_NEUTRAL: &[&str] = &[
    "output_dir", "seed", "shuffle", "dataset", "epochs", "max_steps_per_epoch", "checkpointer",
    "resume_from_checkpoint", "lr_scheduler", "metric_logger", "log_every_n_steps", "log_peak_memory_stats",
    "log_level", "profiler", "device", "clip_grad_norm", "save_adapter_weights_only",
    "custom_sharded_layers", "collate_fn", "run_val_every_n_steps", "dataset_val", "batch_size_val", "tokenizer",
];

/// The fields [`read`] maps to plan keys.
#[rustfmt::skip]
const HANDLED: &[&str] = &[
    "gradient_accumulation_steps", "model", "tokenizer", "batch_size", "enable_activation_checkpointing", "dtype",
    "optimizer", "loss", "compile", "optimizer_in_bwd", "enable_activation_offloading", "fsdp_cpu_offload",
    "fsdp_reshard_after_forward",
];

/// torchtune's distributed recipes, which shard with FSDP2 (`fully_shard`) and reduce every micro-batch's
/// gradients (no `no_sync`): `recipes/full_finetune_distributed.py`, `recipes/lora_finetune_distributed.py` and
/// the others built the same way.
const DISTRIBUTED_RECIPES: &[&str] = &[
    "full_finetune_distributed",
    "lora_finetune_distributed",
    "qat_distributed",
    "qat_lora_finetune_distributed",
    "lora_dpo_distributed",
    "full_dpo_distributed",
    "knowledge_distillation_distributed",
];

/// The sharding of a distributed recipe, named in the file (its launch line, `tune run --nproc_per_node N
/// lora_finetune_distributed`, or the override's `# Recipe:` line) or implied by its FSDP keys.
#[inline(never)]
fn read_recipe(r: &mut Reader, map: &Map<String, Value>, body: &str) {
    let named = table(DISTRIBUTED_RECIPES)
        .iter()
        .find(|name| body.contains(**name));
    let field = match named {
        Some(name) => {
            let mut f = String::from("recipe ");
            f.push_str(name);
            f
        }
        None if has_any(map, &["fsdp_cpu_offload", "fsdp_reshard_after_forward"]) => {
            String::from("fsdp_cpu_offload")
        }
        None => return,
    };
    r.fact("shard", "fsdp2", &field);
    r.fact("gsync", "1", &field);
    if let Some(b) = r.flag_in(map, "", "fsdp_cpu_offload") {
        r.fact_bool("cpuoff", b, "fsdp_cpu_offload");
    }
    if let Some(b) = r.flag_in(map, "", "fsdp_reshard_after_forward") {
        r.fact(
            "zero",
            if b { "3" } else { "2" },
            "fsdp_reshard_after_forward",
        );
    }
}

#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>, body: &str) {
    r.fact("fw", "torchtune", "torchtune config");
    read_recipe(r, map, body);
    if let Some(Value::Object(m)) = get(map, "model") {
        read_model(r, m);
    }
    if let Some(Value::Object(t)) = get(map, "tokenizer") {
        if let Some(v) = get(t, "max_seq_len") {
            r.seq("tokenizer.max_seq_len", v);
        }
    }
    if let Some(v) = get(map, "batch_size") {
        r.batch("batch_size", v);
    }
    if let Some(v) = get(map, "enable_activation_checkpointing") {
        r.gc("enable_activation_checkpointing", v);
    }
    if let Some(v) = get(map, "dtype") {
        // torchtune keeps LoRA weights in the model dtype.
        let (prec, also, adtype) = match r.text("dtype", v).and_then(dtype_name) {
            Some("bf16") => ("bf16", "amp_bf16", "bf16"),
            Some("fp32") => ("fp32", "", "fp32"),
            Some(_) => ("fp16", "amp_fp16", "fp16"),
            None => {
                r.note_fmt(format_args!(
                    "dtype = {} is not bf16 or fp32; prec unchanged",
                    show(v)
                ));
                ("", "", "")
            }
        };
        if !prec.is_empty() {
            let also: &[&str] = if also.is_empty() {
                &[]
            } else {
                std::slice::from_ref(&also)
            };
            r.fact_also("prec", prec, also, "dtype");
            r.fact("adtype", adtype, "dtype");
        }
    }
    if let Some(Value::Object(o)) = get(map, "optimizer") {
        if let Some(c) = get_str(o, "_component_") {
            let fused = get(o, "fused").and_then(Value::as_bool).unwrap_or(false);
            let found = table(Optimizer::ALL).iter().copied().find(|opt| {
                let (comp, f) = optimizer(*opt);
                comp == c && (comp != "torch.optim.AdamW" || f == fused)
            });
            match found {
                Some(opt) => r.fact("opt", opt.key(), "optimizer._component_"),
                None => {
                    r.unsupported_value("optimizer._component_", c);
                    r.note_fmt(format_args!(
                        "optimizer {} is not one peakplan models; opt unchanged",
                        quote(c)
                    ));
                }
            }
        }
    }
    if let Some(b) = r.flag_in(map, "", "compile") {
        r.fact_bool("compile", b, "compile");
    }
    for (key, field) in [
        ("oib", "optimizer_in_bwd"),
        ("aoff", "enable_activation_offloading"),
    ] {
        if let Some(b) = r.flag_in(map, "", field) {
            r.fact_bool(key, b, field);
        }
    }
    if let Some(Value::Object(l)) = get(map, "loss") {
        match get_str(l, "_component_") {
            Some("torch.nn.CrossEntropyLoss") => r.fact("loss", "standard", "loss._component_"),
            Some(c) if c.ends_with("LinearCrossEntropyLoss") => {
                r.fact("loss", "fused", "loss._component_")
            }
            Some(c) if c.ends_with("CEWithChunkedOutputLoss") => {
                r.fact("loss", "chunked", "loss._component_")
            }
            _ => r.unsupported("loss._component_"),
        }
    }
    if let Some(v) = get(map, "gradient_accumulation_steps") {
        r.accumulation("gradient_accumulation_steps", v);
    }
    r.rest("", map, HANDLED, TORCHTUNE_NEUTRAL);
    r.note("torchtune configs do not say how many GPUs (the launch does); gpus unchanged unless the peakplan line says");
}

/// torchtune's `model:` section: the builder names the model and the method, the LoRA keys the adapter.
#[inline(never)]
fn read_model(r: &mut Reader, m: &Map<String, Value>) {
    let mut method = None;
    if let Some(c) = get_str(m, "_component_") {
        let builder = c.rsplit('.').next().unwrap_or(c);
        let (m_kind, base) = if let Some(b) = builder.strip_prefix("qlora_") {
            (Method::Qlora, b)
        } else if let Some(b) = builder.strip_prefix("lora_") {
            (Method::Lora, b)
        } else {
            (Method::Full, builder)
        };
        method = Some(m_kind);
        match table(TORCHTUNE_MODELS).iter().find(|(_, _, b)| *b == base) {
            Some((id, _, _)) => r.fact("model", id, "model._component_"),
            None => r.note_fmt(format_args!(
                "model._component_ = {} is not a builder of a bundled preset; model unchanged",
                quote(c)
            )),
        }
    }
    let quantize = r.flag_in(m, "model.", "quantize_base");
    if quantize == Some(true) {
        method = Some(Method::Qlora);
    } else if method.is_none() && (has_any(m, &["lora_rank"]) || quantize.is_some()) {
        // No builder named: LoRA keys still say an adapter trains.
        method = Some(Method::Lora);
    }
    if let Some(k) = method {
        r.fact("method", k.key(), "model._component_");
        if k != Method::Full {
            if r.flag_in(m, "model.", "use_dora") == Some(true) {
                r.fact("peft", "dora", "model.use_dora");
            } else {
                r.fact_also("peft", "lora", PEFT_WITHOUT_KEY, "model._component_");
            }
        }
    }
    if let Some(v) = get(m, "lora_rank") {
        r.rank("model.lora_rank", v);
    }
    if let Some(v) = get(m, "lora_dropout") {
        r.dropout("model.lora_dropout", v);
    }
    if has_any(m, &["lora_attn_modules", "apply_lora_to_mlp"]) {
        let mut groups: Vec<u8> = Vec::new();
        if let Some(Value::Array(items)) = get(m, "lora_attn_modules") {
            for it in items {
                match it.as_str().map(module_targets) {
                    Some(0) | None => r.unsupported_value("model.lora_attn_modules", &show(it)),
                    Some(bits) => groups.push(bits),
                }
            }
        }
        if r.flag_in(m, "model.", "apply_lora_to_mlp") == Some(true) {
            groups.push(Target::Gate.bit() | Target::Up.bit() | Target::Down.bit());
        }
        if r.flag_in(m, "model.", "apply_lora_to_output") == Some(true) {
            groups.push(Target::LmHead.bit());
        }
        if !groups.is_empty() {
            r.targets_from_groups("model.lora_attn_modules", &groups);
        }
    }
    r.rest(
        "model.",
        m,
        &[
            "_component_",
            "quantize_base",
            "lora_rank",
            "lora_dropout",
            "lora_attn_modules",
            "apply_lora_to_mlp",
            "apply_lora_to_output",
        ],
        &["lora_alpha", "use_dora"],
    );
}
