//! Import of training configs into a plan: the format is detected from the content, each file becomes a list of
//! facts about plan keys, and the facts of several files merge in order (a later file overrides an earlier one,
//! with a note; a fact that only refines an earlier one, like a 4-bit config after a LoRA adapter, applies
//! silently). Every field is accounted for: mapped to a key, listed as read without effect on memory, or listed
//! as unsupported.
//!
//! This module is the driver: it detects the format, reads the plan line, hands the fields to the format's module
//! and merges what the files say; the fields themselves are read by [`super::fields`].

use super::fields::{cat, get, get_str, has_any, type_name, Fact, Reader, MAX_FIELD_CHARS};
use super::{
    accelerate, axolotl, bnb, deepspeed, hf_config, peft, table, torchtune, training_args, unsloth,
    yaml,
};
use crate::plan::{Method, Plan, KEYS};
use crate::text::{clean, clip, count, quote, Said, MAX_LISTED, MAX_MESSAGE_CHARS};
use serde_json::{Map, Value};

/// The marker of the comment line that carries the whole plan in YAML exports.
const PLAN_COMMENT: &str = "# peakplan:";

/// Largest file accepted (real configs are a few kilobytes).
pub const MAX_IMPORT_BYTES: usize = 1 << 20;
/// Most files one import merges.
pub const MAX_IMPORT_FILES: usize = 32;

/// The result of an import: the plan, and everything the files said that the plan does not hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    pub plan: Plan,
    /// Fields that peakplan does not model, by name (dotted for nested fields), each once, in the order found:
    /// at most [`MAX_LISTED`] of them, then `… and N more` counting the others. Their text is safe to show
    /// (see [`crate::text`]).
    pub unsupported: Vec<String>,
    /// What the import decided: formats detected, fields read without effect on memory, overrides between
    /// files, values refused, and the keys no file set. Each file's own notes are said once and capped at
    /// [`MAX_LISTED`], with a line counting the others; all are safe to show.
    pub notes: Vec<String>,
    /// The plan keys that the files set, in the contract's order.
    pub carried: Vec<&'static str>,
}

/// A file that cannot be read as any supported format; names the file and the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    pub file: String,
    pub message: String,
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The file name is the user's, and the message may quote its content.
        if self.file.is_empty() {
            f.write_str(&clean(&self.message))
        } else {
            write!(f, "{}: {}", clean(&self.file), clean(&self.message))
        }
    }
}

impl std::error::Error for ImportError {}

/// Imports files (name, text) over the default plan.
pub fn import(files: &[(&str, &str)]) -> Result<Imported, ImportError> {
    import_over(&Plan::default(), files)
}

/// Imports files (name, text) over a base plan: keys that no file sets keep the base's values.
#[inline(never)]
pub fn import_over(base: &Plan, files: &[(&str, &str)]) -> Result<Imported, ImportError> {
    if files.is_empty() {
        return Err(ImportError {
            file: String::new(),
            message: "no file given".into(),
        });
    }
    if files.len() > MAX_IMPORT_FILES {
        return Err(ImportError {
            file: String::new(),
            message: format!(
                "{} files given; at most {MAX_IMPORT_FILES} are merged",
                files.len()
            ),
        });
    }
    let mut readers = Vec::with_capacity(files.len());
    for (name, text) in files {
        readers.push(read_file(name, text)?);
    }
    Ok(merge(base, &mut readers))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Peft,
    Quant,
    HfConfig,
    TrainingArgs,
    DeepSpeed,
    Axolotl,
    Torchtune,
    Accelerate,
    Unsloth,
}

impl Format {
    fn label(self) -> &'static str {
        match self {
            Format::Peft => "a PEFT adapter_config.json",
            Format::Quant => "a quantization_config (bitsandbytes or GPTQ)",
            Format::HfConfig => "a Hugging Face config.json",
            Format::TrainingArgs => "TrainingArguments",
            Format::DeepSpeed => "a DeepSpeed config",
            Format::Axolotl => "an axolotl config",
            Format::Torchtune => "a torchtune config",
            Format::Accelerate => "an accelerate config",
            Format::Unsloth => "Unsloth's settings (FastLanguageModel, its trainer's config)",
        }
    }
}
#[inline(never)]
fn detect(map: &Map<String, Value>) -> Option<Format> {
    let has = |k: &str| has_any(map, &[k]);
    if has_any(map, unsloth::OWN_FIELDS) || (has("model_name") && has("max_seq_length")) {
        return Some(Format::Unsloth);
    }
    if has("peft_type") || (has("target_modules") && has_any(map, &["r", "lora_alpha"])) {
        return Some(Format::Peft);
    }
    if has_any(
        map,
        &["zero_optimization", "train_micro_batch_size_per_gpu"],
    ) || (has("train_batch_size") && !has("per_device_train_batch_size"))
    {
        return Some(Format::DeepSpeed);
    }
    if has("quantization_config")
        || (has("model_type")
            && has_any(
                map,
                &[
                    "hidden_size",
                    "n_embd",
                    "d_model",
                    "num_hidden_layers",
                    "n_layer",
                ],
            ))
    {
        return Some(Format::HfConfig);
    }
    if has_any(map, &["distributed_type", "compute_environment"]) {
        return Some(Format::Accelerate);
    }
    let torchtune_model = get(map, "model")
        .and_then(Value::as_object)
        .is_some_and(|m| has_any(m, &["_component_"]));
    if torchtune_model
        || has_any(
            map,
            &[
                "enable_activation_checkpointing",
                "enable_activation_offloading",
            ],
        )
    {
        return Some(Format::Torchtune);
    }
    if has_any(
        map,
        &[
            "base_model",
            "adapter",
            "lora_r",
            "sequence_len",
            "micro_batch_size",
            "lora_target_modules",
            "lora_target_linear",
            "datasets",
            "num_epochs",
        ],
    ) {
        return Some(Format::Axolotl);
    }
    if has_any(
        map,
        &[
            "load_in_4bit",
            "load_in_8bit",
            "bnb_4bit_quant_type",
            "bnb_4bit_compute_dtype",
            "bnb_4bit_use_double_quant",
        ],
    ) || matches!(get_str(map, "quant_method"), Some("bitsandbytes" | "gptq"))
    {
        return Some(Format::Quant);
    }
    if has_any(
        map,
        &[
            "per_device_train_batch_size",
            "optim",
            "gradient_checkpointing",
            "output_dir",
            "num_train_epochs",
            "learning_rate",
            "bf16",
            "fp16",
            "max_seq_length",
        ],
    ) {
        return Some(Format::TrainingArgs);
    }
    None
}

#[inline(never)]
fn read_file(name: &str, text: &str) -> Result<Reader, ImportError> {
    let fail = |message: String| ImportError {
        file: name.to_string(),
        message,
    };
    if text.len() > MAX_IMPORT_BYTES {
        return Err(fail(format!(
            "is {} bytes; training configs are a few KB (at most {MAX_IMPORT_BYTES} accepted)",
            text.len()
        )));
    }
    let body = text.strip_prefix('\u{feff}').unwrap_or(text).trim();
    if body.is_empty() {
        return Err(fail("is empty".into()));
    }
    let is_json = body.starts_with('{');
    // Unsloth's calls pasted from a notebook: their literal keyword arguments.
    if !is_json && unsloth::is_python(body) {
        let (map, expressions) = unsloth::kwargs(body);
        let mut r = Reader::new(name);
        r.note(&cat("read as ", Format::Unsloth.label()));
        for e in &expressions {
            r.note_fmt(format_args!(
                "{e} = an expression, not a value: not read (its key keeps the plan's value)"
            ));
        }
        unsloth::read(&mut r, &map);
        return Ok(r);
    }
    let parsed = if is_json {
        serde_json::from_str::<Value>(body).map_err(|e| cat("is not valid JSON: ", &e.to_string()))
    } else {
        yaml::parse(body).map_err(|e| cat("is not valid YAML: ", &e.to_string()))
    };
    let value = parsed.map_err(fail)?;
    let Value::Object(map) = &value else {
        return Err(fail(cat(
            "must hold a mapping of settings (`key: value`), got ",
            type_name(&value),
        )));
    };
    let Some(format) = detect(map) else {
        let keys: Vec<&str> = map.keys().take(6).map(String::as_str).collect();
        return Err(fail(cat(
            "is not a training config peakplan reads (a PEFT adapter_config.json, a bitsandbytes or GPTQ quantization_config or config.json, TrainingArguments JSON, a DeepSpeed JSON, an accelerate config, an axolotl YAML, a torchtune config, or Unsloth's settings); its keys start with ",
            &quote(&keys.join(", ")),
        )));
    };
    let mut r = Reader::new(name);
    r.note(&cat("read as ", format.label()));
    let comment = if is_json { None } else { plan_comment(body) };
    if let Some(q) = comment {
        read_plan_comment(&mut r, q);
    }
    match format {
        Format::Peft => peft::read(&mut r, map).map_err(fail)?,
        Format::Quant => bnb::read(&mut r, "", map),
        Format::HfConfig => hf_config::read(&mut r, map, body),
        Format::TrainingArgs => training_args::read(&mut r, map),
        Format::DeepSpeed => deepspeed::read(&mut r, "", map),
        Format::Axolotl => axolotl::read(&mut r, map),
        Format::Torchtune => torchtune::read(&mut r, map, body),
        Format::Accelerate => accelerate::read(&mut r, map),
        Format::Unsloth => unsloth::read(&mut r, map),
    }
    Ok(r)
}

/// The keys of a `# peakplan: QUERY` line, as weak facts (they apply where no field of the files says).
#[inline(never)]
fn read_plan_comment(r: &mut Reader, q: &str) {
    let field = cat(PLAN_COMMENT, " line");
    let (parsed, applied) = Plan::parse_query_applied(Plan::default(), q);
    for d in &parsed.diagnostics {
        let mut n = cat(&field, ": ");
        n.push_str(&d.message);
        r.note(&n);
    }
    for k in plan_keys() {
        // The line leaves out the sharding keys at `auto`: they are said all the same, so that a file that only
        // restates what `auto` runs keeps them `auto`.
        let implied = matches!(*k, "shard" | "wrap" | "gsync");
        // How the page shows the plan is no fact of a training run.
        if matches!(*k, "embed" | "theme") || !(applied.contains(k) || implied) {
            continue;
        }
        if let Some(v) = parsed.plan.get(k) {
            r.weak(k, &v, &[], &field);
        }
    }
}

/// The query of a `# peakplan: QUERY` comment line, if the text has one.
fn plan_comment(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(PLAN_COMMENT))
        .map(str::trim)
        .filter(|q| !q.is_empty())
}

/// The plan keys, as a loop rather than unrolled (see [`table`]).
fn plan_keys() -> &'static [&'static str] {
    table(KEYS)
}

#[inline(never)]
fn merge(base: &Plan, readers: &mut [Reader]) -> Imported {
    let mut plan = base.clone();
    // The fact that set each key so far.
    let mut set_by: Vec<&Fact> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    // Notes made here may quote file names and values: cleaned like the readers' own.
    let say = |notes: &mut Vec<String>, n: &str| notes.push(clip(n, MAX_MESSAGE_CHARS));
    let mut unsupported = Said::new(MAX_LISTED, MAX_FIELD_CHARS);
    for r in readers.iter_mut() {
        let Reader {
            file,
            facts,
            unsupported: file_unsupported,
            neutral,
            notes: file_notes,
        } = r;
        let facts: &Vec<Fact> = facts;
        let (said, more) = std::mem::take(file_notes).into_parts();
        notes.extend(said);
        if more > 0 {
            say(
                &mut notes,
                &format!("{file}: … and {} more notes", count(more as u64)),
            );
        }
        if !neutral.is_empty() {
            let shown: Vec<&str> = neutral.iter().take(12).map(String::as_str).collect();
            let more = neutral.len().saturating_sub(shown.len());
            let mut n = cat(file, ": read, no effect on memory: ");
            n.push_str(&shown.join(", "));
            if more > 0 {
                n.push_str(&format!(" and {} more", count(more as u64)));
            }
            say(&mut notes, &n);
        }
        unsupported.extend(std::mem::take(file_unsupported));
        for f in facts {
            let cur = plan.get(f.key).unwrap_or_default();
            let prev = set_by.iter().position(|p| p.key == f.key);
            if let Some(i) = prev {
                if f.weak {
                    continue;
                }
                let p = set_by[i];
                if cur == f.value || f.also.contains(&cur) || same_sharding(&plan, f) {
                    continue;
                }
                if !p.also.contains(&f.value) {
                    let n = format!(
                        "{}={} ({}) replaces {}={} ({})",
                        f.key, f.value, f.source, f.key, cur, p.source
                    );
                    say(&mut notes, &n);
                }
            }
            match plan.set(f.key, &f.value) {
                Ok(()) => match prev {
                    Some(i) => set_by[i] = f,
                    None => set_by.push(f),
                },
                Err(msg) => say(
                    &mut notes,
                    &format!("{}: {msg}; {} stays {cur}", f.source, f.key),
                ),
            }
        }
    }
    let keys = plan_keys();
    let carried: Vec<&'static str> = keys
        .iter()
        .copied()
        .filter(|k| set_by.iter().any(|f| f.key == *k))
        .collect();
    let relevant = |k: &str| match k {
        "embed" | "theme" => false,
        "r" | "targets" | "dropout" | "adtype" | "peft" | "tt" => plan.method != Method::Full,
        "vt" => plan.method != Method::Full && plan.peft.uses_virtual_tokens(),
        "quant" | "dq" | "upcast" | "qsave" | "moe" => plan.method == Method::Qlora,
        "chunk" => plan.loss == crate::plan::Loss::Chunked,
        "zero" | "shard" | "wrap" | "gsync" => plan.gpus > 1,
        // DeepSpeed's sizes and switches, only where the plan runs DeepSpeed.
        k if k.starts_with("ds_") || k == "zinit" => deepspeed::uses_deepspeed(&plan),
        _ => true,
    };
    let mut kept = String::new();
    for k in keys {
        if !relevant(k) || carried.contains(k) {
            continue;
        }
        if let Some(v) = plan.get(k) {
            kept.push_str(if kept.is_empty() {
                "not in these files, so unchanged: "
            } else {
                ", "
            });
            kept.push_str(k);
            kept.push('=');
            kept.push_str(&v);
        }
    }
    if !kept.is_empty() {
        say(&mut notes, &kept);
    }
    Imported {
        plan,
        unsupported: unsupported.finish(),
        notes,
        carried,
    }
}

/// Whether a fact about a sharding key leaves the sharding the plan runs as it is (`shard=fsdp1` from a file over
/// `shard=auto` under the Trainer, which runs FSDP1; any of them where FSDP shards nothing, as under ZeRO-1, whose
/// only runner is DeepSpeed): the plan keeps its own value.
#[inline(never)]
fn same_sharding(plan: &Plan, f: &Fact) -> bool {
    if !matches!(f.key, "shard" | "wrap" | "gsync") {
        return false;
    }
    let mut p = plan.clone();
    if p.set(f.key, &f.value).is_err() {
        return false;
    }
    (!plan.sharded_by_fsdp() && !p.sharded_by_fsdp()) || p.sharding() == plan.sharding()
}
