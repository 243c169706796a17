//! Unsloth's notebook settings, both ways. Import: the keyword arguments of `FastLanguageModel.from_pretrained`,
//! `FastLanguageModel.get_peft_model` and the trainer's `SFTConfig` or `TrainingArguments`, pasted as the Python a
//! notebook writes (the calls are found in the text, their literal arguments read) or as one JSON object of those
//! arguments, into a plan under `fw=unsloth`. Export: the Python export of an `fw=unsloth` plan is a runnable
//! Unsloth script (`unsloth.py.tmpl`) that prints the measured peaks beside the prediction.

use super::fields::{get_set, preset_for_hf_id, Reader};
use super::names::module_names;
use super::py::{py_list, py_str};
use super::template::{render, vars, PY_BOOLS};
use super::{model_repo, num};
use crate::arch::Architecture;
use crate::decimal::parse_f64;
use crate::engine::estimate;
use crate::plan::{Checkpointing, Loss, Method, Peft, Plan, Precision, Quant};
use crate::text::quote;
use serde_json::{Map, Number, Value};

const SCRIPT: &str = include_str!("unsloth.py.tmpl");

/// The Unsloth script for an `fw=unsloth` plan, with the prediction for exactly what it runs.
#[inline(never)]
pub(super) fn script(plan: &Plan, arch: &Architecture) -> String {
    let e = estimate(arch, plan);
    let query = plan.to_query();
    let repo = model_repo(plan, arch).unwrap_or_else(|| arch.model_type.clone());
    // Unsloth takes module names only (no `all-linear`).
    let target_modules = py_list(&module_names(arch, plan.targets));
    let full = plan.method == Method::Full;
    let qlora = plan.method == Method::Qlora;
    let bf16 = matches!(plan.precision, Precision::AmpBf16 | Precision::Bf16);
    let fp16 = matches!(plan.precision, Precision::AmpFp16 | Precision::Fp16);
    render(
        SCRIPT,
        PY_BOOLS,
        &[vars!(
            "model_name" => repo.clone(),
            "method" => crate::units::method_in_words(plan.method),
            "b" => num(plan.micro_batch),
            "s" => num(plan.seq_len),
            "ga" => num(plan.grad_accumulation),
            "query" => query.clone(),
            "plan_str" => py_str(&query),
            "repo" => repo.clone(),
            "hf_id" => py_str(&repo),
            "allocated" => num(e.peak_allocated_bytes),
            "reserved" => num(e.peak_reserved_bytes),
            "device" => num(e.device_bytes),
            "host" => num(e.host_bytes),
            "host_gib" => format!("{:.1}", e.host_bytes as f64 / (1u64 << 30) as f64),
            "r" => num(plan.rank),
            "target_modules" => target_modules,
            "dropout" => format!("{}", plan.dropout),
            "gc" => match plan.checkpointing {
                Checkpointing::Offload => "\"unsloth\"",
                Checkpointing::On => "True",
                Checkpointing::Off => "False",
            },
            "optim" => py_str(plan.optimizer.key()),
            "alloc_conf" => super::alloc_conf(plan, true),
            ;
            "full" => full,
            "load_in_4bit" => qlora && plan.quant != Quant::Int8,
            "load_in_8bit" => qlora && plan.quant == Quant::Int8,
            "rslora" => plan.peft == Peft::Rslora,
            "bf16" => bf16,
            "fp16" => fp16,
            "offload" => e.host_bytes > 0,
            "return_logits" => plan.loss == Loss::Kernel,
        )],
    )
}

/// The calls whose keyword arguments are read, by the name before their parenthesis.
const CALLS: &[&str] = &[
    "from_pretrained",
    "get_peft_model",
    "SFTConfig",
    "TrainingArguments",
    "UnslothTrainingArguments",
];

/// Arguments read without effect on memory.
#[rustfmt::skip]
const NEUTRAL: &[&str] = &[
    "lora_alpha", "random_state", "loftq_config", "dtype", "token", "device_map", "learning_rate", "warmup_steps",
    "warmup_ratio", "max_steps", "num_train_epochs", "logging_steps", "weight_decay", "lr_scheduler_type", "seed",
    "output_dir", "report_to", "dataset_text_field", "dataset_num_proc", "save_steps", "save_strategy",
    "embedding_learning_rate", "use_cache", "rope_scaling", "trust_remote_code", "max_grad_norm",
];

/// JSON fields only Unsloth's loader takes: a JSON object with one of them is read as Unsloth's settings.
pub(super) const OWN_FIELDS: &[&str] = &[
    "use_gradient_checkpointing",
    "full_finetuning",
    "fast_inference",
    "max_lora_rank",
];

/// Whether `text` is Python that calls Unsloth's loader.
pub(super) fn is_python(text: &str) -> bool {
    text.contains("FastLanguageModel") || text.contains("FastModel.")
}

/// The literal keyword arguments of [`CALLS`] in `text` as one map (a later call's argument replaces an earlier
/// one's, as the trainer's `max_seq_length` follows the loader's), and the names of arguments whose value is an
/// expression (`bf16 = is_bfloat16_supported()`), which are not read.
pub(super) fn kwargs(text: &str) -> (Map<String, Value>, Vec<String>) {
    let code = without_comments(text);
    let mut map = Map::new();
    let mut expressions = Vec::new();
    for call in CALLS {
        let mut from = 0;
        while let Some(at) = code[from..].find(call) {
            let start = from + at + call.len();
            from = start;
            let before = code[..start - call.len()].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let Some(args) = code[start..].trim_start().strip_prefix('(') else {
                continue;
            };
            let Some(end) = closing(args) else {
                continue;
            };
            for piece in split_top(&args[..end], ',') {
                let Some((key, value)) = keyword(piece) else {
                    continue;
                };
                match literal(value) {
                    Some(v) => {
                        map.insert(key.to_string(), v);
                    }
                    None => expressions.push(key.to_string()),
                }
            }
        }
    }
    (map, expressions)
}

/// `text` with each `#` comment cut (outside strings).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut comment = false;
    for c in text.chars() {
        match (comment, quote, c) {
            (true, _, '\n') => {
                comment = false;
                out.push(c);
            }
            (true, _, _) => {}
            (false, None, '#') => comment = true,
            (false, None, '"' | '\'') => {
                quote = Some(c);
                out.push(c);
            }
            (false, Some(q), _) if c == q => {
                quote = None;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Where the parenthesis opened before `args` closes (outside strings), if it does.
fn closing(args: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (i, c) in args.char_indices() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')') if depth == 0 => return Some(i),
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// `text` split at `sep` where no bracket is open and no string either.
fn split_top(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0usize, None::<char>, 0);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            (None, _) if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `name = value` (not `==`), with a Python identifier for a name.
fn keyword(piece: &str) -> Option<(&str, &str)> {
    let (key, value) = piece.split_once('=')?;
    let (key, value) = (key.trim(), value.trim());
    let identifier = !key.is_empty()
        && key.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    (identifier && !value.starts_with('=')).then_some((key, value))
}

/// A Python literal (string, number, `True`, `False`, `None`, a list or tuple of literals) as JSON; `None` for
/// any other expression.
fn literal(text: &str) -> Option<Value> {
    let t = text.trim();
    match t {
        "True" => return Some(Value::Bool(true)),
        "False" => return Some(Value::Bool(false)),
        "None" => return Some(Value::Null),
        _ => {}
    }
    let first = t.chars().next()?;
    if matches!(first, '"' | '\'') {
        let inner = t.strip_prefix(first)?.strip_suffix(first)?;
        return (!inner.contains(first)).then(|| Value::String(inner.to_string()));
    }
    if let Some(inner) = t
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .or_else(|| t.strip_prefix('(').and_then(|s| s.strip_suffix(')')))
    {
        let items: Option<Vec<Value>> = split_top(inner, ',')
            .into_iter()
            .filter(|s| !s.trim().is_empty())
            .map(literal)
            .collect();
        return items.map(Value::Array);
    }
    let plain: String = t.chars().filter(|c| *c != '_').collect();
    if let Ok(u) = plain.parse::<u64>() {
        return Some(Value::Number(u.into()));
    }
    parse_f64(&plain)
        .and_then(Number::from_f64)
        .map(Value::Number)
}

/// Reads Unsloth's settings into facts: the method from the loader's 4-bit, 8-bit and full fine-tuning switches
/// (4-bit is its default), the shape, the adapters, checkpointing (`"unsloth"`, its default, is `gc=offload`),
/// the trainer's batch, accumulation, optimizer and precision; the keys Unsloth decides that the settings leave
/// out get its defaults.
#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) {
    r.fact("fw", "unsloth", "FastLanguageModel");
    let flag = |r: &mut Reader, key: &str| get_set(map, key).and_then(|v| r.flag(key, v));
    let full = flag(r, "full_finetuning") == Some(true);
    if full {
        r.fact("method", "full", "full_finetuning");
    } else if flag(r, "load_in_8bit") == Some(true) {
        r.fact("method", "qlora", "load_in_8bit");
        r.fact("quant", "int8", "load_in_8bit");
    } else if flag(r, "load_in_4bit") != Some(false) {
        // FastLanguageModel's default: bitsandbytes NF4 with double quantization.
        r.fact("method", "qlora", "load_in_4bit");
        r.fact("quant", "nf4", "load_in_4bit");
        r.fact("dq", "1", "load_in_4bit");
    } else {
        r.fact("method", "lora", "load_in_4bit");
    }
    for (key, v) in map {
        let k = key.as_str();
        match k {
            "model_name" | "model" => model(r, k, v),
            "max_seq_length" | "max_length" => r.seq(k, v),
            "r" => r.rank(k, v),
            "target_modules" => r.targets(k, v, &[]),
            "lora_dropout" => r.dropout(k, v),
            "use_gradient_checkpointing" => match v {
                Value::String(s) if s == "unsloth" => r.fact("gc", "offload", k),
                _ => {
                    if let Some(b) = r.flag(k, v) {
                        r.fact_bool("gc", b, k);
                    }
                }
            },
            "use_rslora" => {
                if r.flag(k, v) == Some(true) {
                    r.fact("peft", "rslora", k);
                }
            }
            "per_device_train_batch_size" => r.batch(k, v),
            "gradient_accumulation_steps" => r.accumulation(k, v),
            "optim" => r.optimizer(k, v),
            "bf16" | "fp16" => {
                if r.flag(k, v) == Some(true) {
                    // Unsloth keeps a full fine-tune's weights in 16-bit; adapters train under autocast.
                    let prec = match (k, full) {
                        ("bf16", true) => "bf16",
                        ("fp16", true) => "fp16",
                        ("bf16", false) => "amp_bf16",
                        _ => "amp_fp16",
                    };
                    r.fact("prec", prec, k);
                }
            }
            "bias" if v.as_str() == Some("none") => r.neutral(k),
            "packing" if v == &Value::Bool(false) => r.neutral(k),
            "packing" => r.note(
                "packing = True: every sample is packed to max_seq_length tokens, which the plan's s is",
            ),
            "load_in_4bit" | "load_in_8bit" | "full_finetuning" => {}
            _ if NEUTRAL.contains(&k) => r.neutral(k),
            _ => r.unsupported(k),
        }
    }
    // What Unsloth decides where the settings say nothing.
    r.weak(
        "gc",
        "offload",
        &[],
        "use_gradient_checkpointing (default \"unsloth\")",
    );
    r.weak(
        "loss",
        "fused",
        &[],
        "Unsloth's loss (labels given: no logits)",
    );
    r.weak(
        "alloc",
        "expandable",
        &[],
        "expandable_segments (set by unsloth at import)",
    );
    r.weak(
        "adtype",
        "fp32",
        &[],
        "LoRA weights (upcast to fp32 by Unsloth)",
    );
    r.weak("aoff", "0", &[], "Unsloth's checkpointing");
    r.weak("zero", "0", &[], "Unsloth (one GPU or DDP)");
}

/// Unsloth's model names: its re-uploads (`unsloth/Meta-Llama-3.1-8B-bnb-4bit`, `...-Instruct`) name the
/// architecture of a bundled preset; any other id is a Hub model.
fn model(r: &mut Reader, field: &str, v: &Value) {
    let Some(id) = r.text(field, v) else {
        return;
    };
    let base = unsloth_base_name(id);
    match preset_for_hf_id(&base) {
        Some(m) => {
            if !m.hf_id.eq_ignore_ascii_case(id) {
                r.note_fmt(format_args!(
                    "{field} = {} has the architecture of {} (model={})",
                    quote(id),
                    m.hf_id,
                    m.id
                ));
            }
            r.fact("model", m.id, field);
        }
        None => r.model(field, v),
    }
}

/// The last part of a model id without Unsloth's and the chat releases' suffixes, lower-cased:
/// `unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit` is `llama-3.1-8b`.
fn unsloth_base_name(id: &str) -> String {
    let mut name = id
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or(id)
        .to_ascii_lowercase();
    for prefix in ["meta-"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            name = rest.to_string();
        }
    }
    loop {
        let before = name.len();
        for suffix in ["-bnb-4bit", "-unsloth", "-instruct", "-it", "-chat"] {
            if let Some(rest) = name.strip_suffix(suffix) {
                name = rest.to_string();
            }
        }
        if name.len() == before {
            return name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calls_literal_keyword_arguments_are_read_and_expressions_named() {
        let text = r#"
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name = "unsloth/Meta-Llama-3.1-8B-bnb-4bit", # the 4-bit upload
    max_seq_length = 2048,
    dtype = None,
    load_in_4bit = True,
)
model = FastLanguageModel.get_peft_model(model, r = 16,
    target_modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",],
    lora_dropout = 0, use_gradient_checkpointing = "unsloth", random_state = 3407)
trainer = SFTTrainer(model = model, args = SFTConfig(per_device_train_batch_size = 2,
    learning_rate = 2e-4, fp16 = not is_bfloat16_supported(), optim = "adamw_8bit"))
"#;
        let (map, expressions) = kwargs(text);
        assert_eq!(map["model_name"], "unsloth/Meta-Llama-3.1-8B-bnb-4bit");
        assert_eq!(map["max_seq_length"], 2048);
        assert_eq!(map["dtype"], Value::Null);
        assert_eq!(map["target_modules"].as_array().map(Vec::len), Some(7));
        assert_eq!(map["learning_rate"].as_f64(), Some(2e-4));
        assert_eq!(map["use_gradient_checkpointing"], "unsloth");
        assert_eq!(map["per_device_train_batch_size"], 2);
        assert!(expressions.contains(&"fp16".to_string()), "{expressions:?}");
        assert!(!map.contains_key("model") && !map.contains_key("args"));
    }

    #[test]
    fn unsloth_s_uploads_name_their_architecture() {
        for (id, base) in [
            (
                "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit",
                "llama-3.1-8b",
            ),
            ("unsloth/Qwen2.5-7B-unsloth-bnb-4bit", "qwen2.5-7b"),
            ("unsloth/gemma-2-9b-it", "gemma-2-9b"),
        ] {
            assert_eq!(unsloth_base_name(id), base);
        }
    }
}
