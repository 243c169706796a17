//! TRL's preference configs: the import of a `DPOConfig`, `KTOConfig`, `ORPOConfig` or `CPOConfig` (CPO, and
//! SimPO as its `loss_type="simpo"`) saved as JSON (detected by their own fields; the online trainers' configs
//! other than GRPO's are said to be unplanned) and of axolotl's `rl:` key, into the plan's `task`, `prompt` and
//! `ref`.
//!
//! A TRL config is `TrainingArguments` with the trainer's fields added: [`super::training_args`] reads the rest.

use super::fields::{get, get_set, has_any, Reader};
use super::num;
use serde_json::{Map, Value};

/// The trainer a TRL config belongs to, by its fields.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dpo,
    Kto,
    /// `CPOConfig` (CPO, and SimPO as its `loss_type="simpo"`).
    Cpo,
    /// `ORPOConfig`: `beta` without a loss type or a reference.
    Orpo,
    /// The online trainers other than GRPO (`num_generations` without GRPO's own fields: `grpo.rs` reads those).
    Online,
}

/// The fields a DPO or KTO config adds to `TrainingArguments` that [`read`] maps or reads without effect.
#[rustfmt::skip]
pub(super) const FIELDS: &[&str] = &[
    "beta", "loss_type", "loss_weights", "max_prompt_length", "max_completion_length", "precompute_ref_log_probs",
    "precompute_ref_batch_size", "reference_free", "label_smoothing", "desirable_weight", "undesirable_weight",
    "ref_model_init_kwargs", "model_adapter_name", "ref_adapter_name", "label_pad_token_id", "padding_value",
    "generate_during_eval", "is_encoder_decoder", "disable_dropout", "f_divergence_type",
    "f_alpha_divergence_coef", "use_weighting", "ld_alpha", "discopop_tau", "base_model_attribute_name",
    "tools", "use_logits_to_keep", "cpo_alpha", "simpo_gamma", "alpha",
];

/// The preference trainer whose config `map` is, if it is one.
fn kind(map: &Map<String, Value>) -> Option<Kind> {
    let has = |k: &str| has_any(map, &[k]);
    if has("num_generations") {
        Some(Kind::Online)
    } else if has_any(map, &["desirable_weight", "undesirable_weight"]) {
        Some(Kind::Kto)
    } else if has_any(map, &["cpo_alpha", "simpo_gamma"]) {
        Some(Kind::Cpo)
    } else if has_any(
        map,
        &[
            "loss_type",
            "precompute_ref_log_probs",
            "ref_model_init_kwargs",
            "reference_free",
        ],
    ) && (has("beta") || has("precompute_ref_log_probs"))
    {
        Some(Kind::Dpo)
    } else if has("beta") && has_any(map, &["max_prompt_length", "max_completion_length"]) {
        Some(Kind::Orpo)
    } else {
        None
    }
}

/// `map` without `keys`: what a format's reader accounts for once the preference fields are read.
fn without(map: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    let mut rest = map.clone();
    for k in keys {
        rest.remove(*k);
    }
    rest
}

/// Reads a TRL preference config's own fields. For a DPO or KTO config, returns `map` without its [`FIELDS`]
/// (`loss_type` among them), for the caller to account for the rest.
#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) -> Option<Map<String, Value>> {
    let kind = kind(map)?;
    let (task, class) = match kind {
        Kind::Dpo => ("dpo", "DPOConfig"),
        Kind::Kto => ("kto", "KTOConfig"),
        Kind::Orpo => ("orpo", "ORPOConfig"),
        Kind::Cpo => (cpo_task(r, map), "CPOConfig"),
        Kind::Online => {
            r.note(
                "a TRL online RL config (num_generations without GRPO's fields: RLOO, online DPO): that task is not \
                 planned yet (task=sft, dpo, orpo, simpo, cpo, kto or grpo are); task unchanged, its fields listed as \
                 unsupported",
            );
            return None;
        }
    };
    let field = match kind {
        Kind::Kto if get(map, "desirable_weight").is_some() => "desirable_weight",
        Kind::Cpo if get(map, "loss_type").is_some() => "loss_type",
        Kind::Cpo => "cpo_alpha",
        _ => "beta",
    };
    r.note_fmt(format_args!("a TRL {class}: task={task}"));
    r.fact("task", task, field);
    let seq = get_set(map, "max_length").and_then(Value::as_u64);
    read_prompt(
        r,
        "max_prompt_length",
        get_set(map, "max_prompt_length"),
        seq,
    );
    if r.on(map, "precompute_ref_log_probs") {
        r.fact("ref", "precomputed", "precompute_ref_log_probs");
    } else if r.on(map, "reference_free") {
        r.fact("ref", "none", "reference_free");
    }
    for k in FIELDS {
        if get_set(map, k).is_some()
            && !matches!(
                *k,
                "max_prompt_length" | "precompute_ref_log_probs" | "reference_free"
            )
        {
            r.neutral(k);
        }
    }
    Some(without(map, FIELDS))
}

/// The task a `CPOConfig` plans as, by memory: SimPO where it computes no NLL term (`cpo_alpha` 0, which
/// `alphapo` sets; any loss type then costs what SimPO's does, said in a note), CPO otherwise (`cpo_alpha`
/// defaults to 1: CPO-SimPO's NLL term costs what CPO's does).
fn cpo_task(r: &mut Reader, map: &Map<String, Value>) -> &'static str {
    let loss = get_set(map, "loss_type")
        .and_then(Value::as_str)
        .unwrap_or("sigmoid");
    let alpha = get_set(map, "cpo_alpha")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    match (loss, alpha == 0.0) {
        ("alphapo", _) | ("simpo", true) => "simpo",
        (other, true) => {
            r.note_fmt(format_args!(
                "loss_type {other} with cpo_alpha 0 computes no NLL term: planned as task=simpo, whose memory it has"
            ));
            "simpo"
        }
        ("simpo", false) => {
            r.note_fmt(format_args!(
                "loss_type simpo with cpo_alpha {alpha} (CPO-SimPO) computes CPO's NLL term: task=cpo"
            ));
            "cpo"
        }
        _ => "cpo",
    }
}

/// `prompt` from a prompt-length field, when it leaves completion tokens in `seq` (the sequence, when known).
fn read_prompt(r: &mut Reader, field: &str, v: Option<&Value>, seq: Option<u64>) {
    let Some(n) = v.and_then(|v| r.uint(field, v)) else {
        return;
    };
    match seq {
        Some(s) if n >= s => r.note_fmt(format_args!(
            "{field} = {n} leaves no completion tokens in a sequence of {s}; prompt unchanged"
        )),
        _ if n == 0 => r.note_fmt(format_args!("{field} = 0 is no prompt; prompt unchanged")),
        _ => r.fact("prompt", &num(n), field),
    }
}

/// The fields of an axolotl config's preference training that [`read_axolotl`] maps.
const AXOLOTL_HANDLED: &[&str] = &["rl", "max_prompt_len", "precompute_ref_log_probs"];

/// The fields of axolotl's preference training read without effect on memory.
#[rustfmt::skip]
const AXOLOTL_NEUTRAL: &[&str] = &[
    "rl_beta", "cpo_alpha", "simpo_gamma", "orpo_alpha", "dpo_use_weighting", "dpo_label_smoothing", "dpo_norm_loss", "dpo_padding_free",
    "dpo_use_logits_to_keep", "dpo_generate_during_eval", "kto_desirable_weight", "kto_undesirable_weight",
    "max_completion_length",
];

/// axolotl's `rl:` (`dpo`, `ipo` as DPO's loss, `kto`, `orpo`, `simpo`; the others said to be unplanned), its
/// `max_prompt_len` and `precompute_ref_log_probs`. Returns `map` without the fields it accounted for (`rl` when it is there,
/// and the preference fields when it names a planned task).
#[inline(never)]
pub(super) fn read_axolotl(r: &mut Reader, map: &Map<String, Value>) -> Map<String, Value> {
    let Some(rl) = get_set(map, "rl").and_then(|v| r.text("rl", v)) else {
        return without(map, &["rl"]);
    };
    let task = match rl {
        "dpo" => "dpo",
        "ipo" => {
            r.note("rl: ipo is DPO with loss_type ipo: task=dpo");
            "dpo"
        }
        "kto" => "kto",
        "orpo" => "orpo",
        // axolotl passes `cpo_alpha` to TRL's CPOConfig only when it is set: TRL's 1.0 otherwise, whose NLL term
        // is CPO's.
        "simpo" if get_set(map, "cpo_alpha").and_then(Value::as_f64) == Some(0.0) => "simpo",
        "simpo" => {
            r.note("rl: simpo without cpo_alpha: 0 keeps TRL's cpo_alpha 1.0 (CPO-SimPO), whose NLL term is CPO's: task=cpo");
            "cpo"
        }
        other => {
            r.unsupported_value("rl", other);
            r.note_fmt(format_args!(
                "rl: {other} is not planned yet (task=sft, dpo, kto, orpo or simpo are); task unchanged"
            ));
            return without(map, &["rl"]);
        }
    };
    r.fact("task", task, "rl");
    let seq = get_set(map, "sequence_len").and_then(Value::as_u64);
    read_prompt(r, "max_prompt_len", get_set(map, "max_prompt_len"), seq);
    if r.on(map, "precompute_ref_log_probs") {
        r.fact("ref", "precomputed", "precompute_ref_log_probs");
    }
    for k in AXOLOTL_NEUTRAL {
        if get_set(map, k).is_some() {
            r.neutral(k);
        }
    }
    let mut rest = without(map, AXOLOTL_HANDLED);
    for k in AXOLOTL_NEUTRAL {
        rest.remove(*k);
    }
    rest
}
