//! Config exports: axolotl YAML, torchtune config override and DeepSpeed JSON, each carrying the plan's query.

//!
//! The texts are data (`axolotl.yaml.tmpl`, `torchtune.yaml.tmpl`, `deepspeed.json.tmpl`); this module only works
//! out the values they are filled with.

use super::yaml::scalar_text;
use super::{
    axolotl_peft_without_key, embedding_modules, fill, gib, hf_repo, method_label, num, preset_of,
    table, target_module_names, PEFT_WITHOUT_KEY, YAML_BOOLS,
};
use crate::arch::{Architecture, Target};
use crate::engine::estimate;
use crate::plan::{
    Alloc, Attn, Framework, Loss, Method, Optimizer, Peft, Plan, Precision, Quant, Targets,
    TokenTraining,
};

const AXOLOTL: &str = include_str!("axolotl.yaml.tmpl");
const TORCHTUNE: &str = include_str!("torchtune.yaml.tmpl");
const DEEPSPEED: &str = include_str!("deepspeed.json.tmpl");

/// The marker of the comment line that carries the whole plan in YAML exports.
pub(crate) const PLAN_COMMENT: &str = "# peakplan:";

/// The name the axolotl export gives the DeepSpeed file; the stage in it lets an import recover `zero`.
pub(crate) fn deepspeed_file_name(plan: &Plan) -> String {
    let mut s = String::from("deepspeed_zero");
    s.push_str(&num(u64::from(plan.zero)));
    s.push_str(".json");
    s
}

/// Whether the plan shards with DeepSpeed (several GPUs and a ZeRO stage).
pub(crate) fn uses_deepspeed(plan: &Plan) -> bool {
    plan.gpus > 1 && plan.zero > 0 && !plan.split_layers
}

/// `0.05`, `0`: the shortest decimal that reads back as the same float.
#[inline(never)]
pub(crate) fn float_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

/// The header values both YAML exports share: model label, whether the model is a custom config, the figures.
struct Common {
    label: String,
    custom: bool,
    allocated: String,
    reserved: String,
    device: String,
    b: String,
    ga: String,
    s: String,
    gpus: String,
    query: String,
}

fn common(plan: &Plan, arch: &Architecture) -> Common {
    let preset = preset_of(plan, arch);
    let label = match preset {
        Some(m) => m.name.to_string(),
        None => {
            let mut l = String::from("a ");
            l.push_str(&arch.model_type);
            l.push_str(" model from its config.json");
            l
        }
    };
    let e = estimate(arch, plan);
    Common {
        label,
        custom: preset.is_none(),
        allocated: gib(e.peak_allocated_bytes),
        reserved: gib(e.peak_reserved_bytes),
        device: gib(e.device_bytes),
        b: num(plan.micro_batch),
        ga: num(plan.grad_accumulation),
        s: num(plan.seq_len),
        gpus: num(plan.gpus),
        query: plan.to_query(),
    }
}

/// `\n  - name` for each name (a YAML list under the key written before it).
fn yaml_items(out: &mut String, pad: &str, names: &[&str]) {
    for n in names {
        out.push('\n');
        out.push_str(pad);
        out.push_str("- ");
        out.push_str(&scalar_text(n));
    }
}

/// An axolotl config for the plan.
#[inline(never)]
pub(crate) fn axolotl(plan: &Plan, arch: &Architecture) -> String {
    let c = common(plan, arch);
    let repo = preset_of(plan, arch).and_then(hf_repo).map(scalar_text);
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
    let ds_file = deepspeed_file_name(plan);
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
    fill!(
        AXOLOTL, YAML_BOOLS;
        "model_label" => &c.label,
        "method" => method_label(plan.method),
        "b" => &c.b,
        "ga" => &c.ga,
        "s" => &c.s,
        "gpus" => &c.gpus,
        "plural" => if plan.gpus == 1 { "" } else { "s" },
        "query" => &c.query,
        "model_type" => &arch.model_type,
        "allocated" => &c.allocated,
        "reserved" => &c.reserved,
        "device" => &c.device,
        "repo" => repo.as_deref().unwrap_or(""),
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
        "custom" => c.custom,
        "multi" => plan.gpus > 1,
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
        "gc" => plan.grad_checkpointing,
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
        "ds" => uses_deepspeed(plan),
        "expandable" => plan.allocator == Alloc::Expandable,
        "emptied" => plan.allocator == Alloc::Emptied,
    )
}

/// torchtune model builders of the bundled presets: (module, base builder).
pub(crate) const TORCHTUNE_MODELS: &[(&str, &str, &str)] = &[
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
pub(crate) fn torchtune_optimizer(o: Optimizer) -> (&'static str, bool) {
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
pub(crate) fn torchtune_plan(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    Framework::Torchtune.apply_defaults(&mut p);
    // torchtune quantizes its QLoRA base to NF4 only, and has no cross-entropy kernel like unsloth's.
    p.quant = Quant::Nf4;
    if p.loss == Loss::Kernel {
        p.loss = Loss::Standard;
    }
    if p.precision != Precision::Fp32 {
        p.precision = Precision::Bf16;
    }
    p.adapter_dtype = if p.precision == Precision::Fp32 {
        crate::plan::DType::Fp32
    } else {
        crate::plan::DType::Bf16
    };
    p
}

/// A torchtune config override for the plan's recipe.
#[inline(never)]
pub(crate) fn torchtune(plan: &Plan, arch: &Architecture) -> String {
    let original_precision = plan.precision;
    let original_quant = plan.quant;
    let original_loss = plan.loss;
    let tp = torchtune_plan(plan);
    let plan = &tp;
    let c = common(plan, arch);
    let distributed = plan.gpus > 1;
    let adapter = plan.method != Method::Full;
    let recipe = match (plan.method, distributed) {
        (Method::Full, false) => "full_finetune_single_device",
        (Method::Full, true) => "full_finetune_distributed",
        (_, false) => "lora_finetune_single_device",
        (_, true) => "lora_finetune_distributed",
    };
    let preset = preset_of(plan, arch);
    let builder = match table(TORCHTUNE_MODELS)
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
    };
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
    let (opt, fused) = torchtune_optimizer(plan.optimizer);
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
    fill!(
        TORCHTUNE, YAML_BOOLS;
        "model_label" => &c.label,
        "method" => method_label(plan.method),
        "b" => &c.b,
        "ga" => &c.ga,
        "s" => &c.s,
        "gpus" => &c.gpus,
        "plural" => if plan.gpus == 1 { "" } else { "s" },
        "query" => &c.query,
        "model_type" => &arch.model_type,
        "allocated" => &c.allocated,
        "reserved" => &c.reserved,
        "device" => &c.device,
        "recipe" => recipe,
        "attn_note" => if plan.attn == Attn::Sdpa { "" } else { plan.attn.key() },
        "builder" => &builder,
        "attn_items" => &attn_items,
        "r" => &r,
        "alpha" => &alpha,
        "dropout" => &dropout,
        "peft_no_key" => peft_no_key,
        "prec_note" => prec_note,
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
        "custom" => c.custom,
        "multi" => distributed,
        "not_zero3" => plan.zero != 3,
        "oib" => plan.optimizer_in_backward,
        "aoff" => plan.offload_activations,
        "adapter" => adapter,
        "partial_mlp" => any_mlp && !all_mlp,
        "any_mlp" => any_mlp,
        "lm_head" => plan.targets.contains(Target::LmHead),
        "quantize" => plan.method == Method::Qlora,
        "dora" => plan.peft == Peft::Dora,
        "gc" => plan.grad_checkpointing,
        "adamw" => opt == "torch.optim.AdamW",
        "fused" => fused,
        "adafactor" => plan.optimizer == Optimizer::Adafactor,
        "compile" => plan.compile,
        "liger" => plan.liger,
        "expandable" => plan.allocator == Alloc::Expandable,
        "emptied" => plan.allocator == Alloc::Emptied,
    )
}

/// A DeepSpeed config: ZeRO stage, micro-batch, precision. `train_batch_size` = micro-batch x GPUs (no
/// accumulation), which is how an import recovers the GPU count.
#[inline(never)]
pub(crate) fn deepspeed(plan: &Plan) -> String {
    let zero = num(u64::from(plan.zero));
    let batch = num(plan
        .micro_batch
        .saturating_mul(plan.gpus)
        .saturating_mul(plan.grad_accumulation));
    let ga = num(plan.grad_accumulation);
    let b = num(plan.micro_batch);
    fill!(
        DEEPSPEED, YAML_BOOLS;
        "batch" => &batch,
        "b" => &b,
        "ga" => &ga,
        "zero" => &zero,
        "offload" => if plan.cpu_offload { "cpu" } else { "none" },
        ;
        "bf16" => matches!(plan.precision, Precision::Bf16 | Precision::AmpBf16),
        "fp16" => matches!(plan.precision, Precision::Fp16 | Precision::AmpFp16),
        "zero1" => plan.zero >= 1,
        "zero3" => plan.zero == 3,
    )
}
