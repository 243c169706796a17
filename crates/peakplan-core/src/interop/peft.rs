//! PEFT: the adapter of the Python script (`LoraConfig` and the other PEFT configs: rank, alpha, dropout, target
//! modules, trainable tokens) and the import of an `adapter_config.json`.

use super::fields::{get, get_str, Reader};
use super::names::{
    embedding_modules, family, hf_modules, module_names, target_module_names, Family,
};
use super::py::{py_list, py_str, torch_dtype};
use super::template::{vars, Vars};
use super::{float_text, num};
use crate::arch::{Architecture, Mlp, Target};
use crate::plan::{Method, Peft, Plan, Targets, TokenTraining};
use crate::text::quote;
use serde_json::{Map, Value};

/// The adapter of the Python script: the PEFT config class and its arguments.
pub(crate) fn script_vars(plan: &Plan, arch: &Architecture) -> Vars<'static> {
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
    vars!(
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
        "targets" => plan.targets.key(),
        "target_modules" => target_modules,
        "feedforward_modules" => feedforward_modules,
        "embed" => embed,
        "head" => head,
        "peft" => plan.peft.key(),
        "vt" => num(plan.virtual_tokens),
        "r" => num(plan.rank),
        "alpha" => num(plan.rank.saturating_mul(2)),
        "dropout" => float_text(plan.dropout),
        "tt_rows" => tt_rows,
        "adapter_dtype" => torch_dtype(plan.adapter_dtype),
        "adtype" => plan.adapter_dtype.key(),
        ;
        "adapter" => plan.method != Method::Full,
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
    )
}

#[rustfmt::skip]
const PEFT_NEUTRAL: &[&str] = &[
    "task_type", "inference_mode", "revision", "fan_in_fan_out", "init_lora_weights", "layers_pattern",
    "alpha_pattern", "auto_mapping", "lora_alpha", "feedforward_modules", "megatron_core", "megatron_config",
    "peft_version", "d_initial", "projection_prng_key", "save_projection", "alpha", "oft_block_size",
    "use_effective_conv2d", "block_share", "coft", "eps", "use_cayley_neumann", "token_dim",
    "num_transformer_submodules", "num_attention_heads", "num_layers", "prompt_tuning_init",
    "prompt_tuning_init_text", "tokenizer_name_or_path", "tokenizer_kwargs", "encoder_hidden_size",
    "prefix_projection",
];

/// Reads an `adapter_config.json`; a `peft_type` peakplan does not plan is refused with the reason (the importer
/// names the file).
#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) -> Result<(), String> {
    // PEFT's peft_type names, and the peft key each one sets.
    let kind = match get_str(map, "peft_type")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("lora") => "lora",
        Some("ln_tuning") => "ln",
        Some("ia3") => "ia3",
        Some("vera") => "vera",
        Some("loha") => "loha",
        Some("oft") => "oft",
        Some("prompt_tuning") => "prompt",
        Some("prefix_tuning") => "prefix",
        Some(_) => {
            return Err(format!(
                "peft_type is {}; peakplan plans LoRA (with rsLoRA, DoRA, LoRA-FA), IA3, VeRA, LoHa, OFT, LN_TUNING, PROMPT_TUNING and PREFIX_TUNING adapters",
                quote(get_str(map, "peft_type").unwrap_or_default())
            ));
        }
    };
    r.fact_also("method", "lora", &["qlora"], "peft_type");
    let dora = get(map, "use_dora").and_then(Value::as_bool) == Some(true);
    let rslora = get(map, "use_rslora").and_then(Value::as_bool) == Some(true);
    if kind != "lora" {
        r.fact("peft", kind, "peft_type");
    } else if dora {
        r.fact("peft", "dora", "use_dora");
        if rslora {
            r.neutral("use_rslora");
        }
    } else if rslora {
        r.fact("peft", "rslora", "use_rslora");
    } else {
        // LoRA-FA's adapter file is a LoRA one: A is frozen by the optimizer.
        r.fact_also("peft", "lora", &["lorafa"], "peft_type");
    }
    if let Some(v) = get(map, "modules_to_save") {
        r.modules_to_save("modules_to_save", v);
    }
    if let Some(v) = get(map, "trainable_token_indices") {
        trainable_tokens(r, "trainable_token_indices", v);
    }
    if let Some(v) = get(map, "r") {
        r.rank("r", v);
    }
    if let Some(v) = get(map, "target_modules") {
        // LN tuning targets norms, which the plan does not select.
        if kind == "ln" {
            r.neutral("target_modules");
        } else {
            r.targets("target_modules", v, &[]);
        }
    }
    if let Some(v) = get(map, "num_virtual_tokens") {
        r.number_fact("vt", "num_virtual_tokens", v);
    }
    for key in ["lora_dropout", "vera_dropout"] {
        if let Some(v) = get(map, key) {
            r.dropout(key, v);
        }
    }
    if let Some(v) = get(map, "base_model_name_or_path") {
        r.model("base_model_name_or_path", v);
    }
    match get_str(map, "bias") {
        None | Some("none") => {}
        Some(_) => r.unsupported("bias"),
    }
    r.rest(
        "",
        map,
        &[
            "peft_type",
            "r",
            "target_modules",
            "lora_dropout",
            "vera_dropout",
            "num_virtual_tokens",
            "base_model_name_or_path",
            "use_dora",
            "use_rslora",
            "bias",
            "modules_to_save",
            "trainable_token_indices",
        ],
        PEFT_NEUTRAL,
    );
    Ok(())
}
/// PEFT's `trainable_token_indices`: a list of token ids, or a mapping from layer name to such a list.
#[inline(never)]
fn trainable_tokens(r: &mut Reader, field: &str, v: &Value) {
    let n: usize = match v {
        Value::Array(a) => a.len(),
        Value::Object(m) => m
            .values()
            .filter_map(Value::as_array)
            .map(Vec::len)
            .max()
            .unwrap_or(0),
        _ => 0,
    };
    if n > 0 {
        r.fact("tt", &num(n as u64), field);
    }
}
