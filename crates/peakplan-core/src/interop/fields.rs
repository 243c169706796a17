//! The shared field reader of the importers: a [`Reader`] collects what one file says (facts about plan keys,
//! notes, fields read without effect on memory, unsupported fields), and reads the values and the fields that
//! several formats share (batch, sequence, checkpointing, optimizer, model, target modules, FSDP).

use super::names::{consistent_targets, module_targets, LINEAR_GROUPS};
use super::{num, table, yaml};
use crate::plan::{Optimizer, Targets};
use crate::presets;
use crate::text::{clip, quote, Said, MAX_LISTED, MAX_MESSAGE_CHARS, QUOTE_CHARS};
use serde_json::{Map, Value};

/// One thing a file says about a plan key.
#[derive(Clone, Debug)]
pub(super) struct Fact {
    pub(super) key: &'static str,
    pub(super) value: String,
    /// Other values of the key that the file is equally consistent with (a fused module, a lossy flag).
    pub(super) also: Vec<String>,
    /// Applies only where nothing else set the key (the `# peakplan:` line, guesses from a file name).
    pub(super) weak: bool,
    /// `file: field`, for notes.
    pub(super) source: String,
}

/// Most characters of one unsupported field (its name, and its value where it has one).
pub(super) const MAX_FIELD_CHARS: usize = 120;

pub(super) struct Reader {
    pub(super) file: String,
    pub(super) facts: Vec<Fact>,
    /// Each field said once, however many times a file lists it.
    pub(super) unsupported: Said,
    pub(super) neutral: Vec<String>,
    pub(super) notes: Said,
}

pub(super) fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[inline(never)]
pub(super) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => quote(&yaml::json_text(other)),
    }
}

/// A field of a mapping (one out-of-line lookup for every field read).
#[inline(never)]
pub(super) fn get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key)
}

/// A string field of a mapping.
pub(super) fn get_str<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    get(map, key).and_then(Value::as_str)
}

/// A field, unless absent or null.
pub(super) fn get_set<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    get(map, key).filter(|v| !v.is_null())
}

/// `a` followed by `b`: a dotted field name, or a message.
#[inline(never)]
pub(super) fn cat(a: &str, b: &str) -> String {
    let mut s = String::with_capacity(a.len() + b.len());
    s.push_str(a);
    s.push_str(b);
    s
}

pub(super) fn one_zero(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}
impl Reader {
    pub(super) fn new(file: &str) -> Self {
        Reader {
            file: file.to_string(),
            facts: Vec::new(),
            unsupported: Said::new(MAX_LISTED, MAX_FIELD_CHARS),
            neutral: Vec::new(),
            notes: Said::new(MAX_LISTED, MAX_MESSAGE_CHARS),
        }
    }

    #[inline(never)]
    pub(super) fn add(
        &mut self,
        key: &'static str,
        value: String,
        also: Vec<String>,
        weak: bool,
        field: &str,
    ) {
        let mut source = cat(&self.file, ": ");
        source.push_str(field);
        self.facts.push(Fact {
            key,
            value,
            also,
            weak,
            source,
        });
    }
    #[inline(never)]
    pub(super) fn fact(&mut self, key: &'static str, value: &str, field: &str) {
        self.add(key, value.to_string(), Vec::new(), false, field);
    }
    #[inline(never)]
    pub(super) fn fact_also(&mut self, key: &'static str, value: &str, also: &[&str], field: &str) {
        let also = also.iter().map(|s| s.to_string()).collect();
        self.add(key, value.to_string(), also, false, field);
    }
    /// A `0`/`1` key.
    pub(super) fn fact_bool(&mut self, key: &'static str, b: bool, field: &str) {
        self.fact(key, one_zero(b), field);
    }
    /// A fact that applies only where nothing else set the key.
    #[inline(never)]
    pub(super) fn weak(&mut self, key: &'static str, value: &str, also: &[&str], field: &str) {
        let also = also.iter().map(|s| s.to_string()).collect();
        self.add(key, value.to_string(), also, true, field);
    }
    /// A note written straight into its line (no intermediate string).
    #[inline(never)]
    pub(super) fn note_fmt(&mut self, msg: std::fmt::Arguments) {
        use std::fmt::Write;
        let mut n = cat(&self.file, ": ");
        let _ = n.write_fmt(msg);
        self.notes.push(&n);
    }
    #[inline(never)]
    pub(super) fn note(&mut self, msg: &str) {
        let mut n = cat(&self.file, ": ");
        n.push_str(msg);
        self.notes.push(&n);
    }
    #[inline(never)]
    pub(super) fn unsupported(&mut self, field: &str) {
        self.unsupported.push(field);
    }
    /// `field: value` as unsupported.
    pub(super) fn unsupported_value(&mut self, field: &str, value: &str) {
        let mut f = cat(field, ": ");
        f.push_str(&clip(value, QUOTE_CHARS));
        self.unsupported(&f);
    }
    #[inline(never)]
    pub(super) fn neutral(&mut self, field: &str) {
        self.neutral.push(field.to_string());
    }

    #[inline(never)]
    pub(super) fn uint(&mut self, field: &str, v: &Value) -> Option<u64> {
        match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    return Some(u);
                }
                if let Some(f) = n.as_f64() {
                    if f.fract() == 0.0 && (0.0..9.0e15).contains(&f) {
                        return Some(f as u64);
                    }
                }
                self.note_fmt(format_args!(
                    "{field} must be a whole number ≥ 0, got {n}; not used"
                ));
                None
            }
            Value::String(s) if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) => {
                match s.parse() {
                    Ok(u) => Some(u),
                    Err(_) => {
                        self.note_fmt(format_args!(
                            "{field} = {} is too large; not used",
                            quote(s)
                        ));
                        None
                    }
                }
            }
            Value::String(s) if s == "auto" => {
                self.note(&cat(field, " is `auto` (decided at launch); not used"));
                None
            }
            Value::Null => None,
            other => {
                self.note_fmt(format_args!(
                    "{field} must be a whole number, got {} {}; not used",
                    type_name(other),
                    show(other)
                ));
                None
            }
        }
    }
    #[inline(never)]
    pub(super) fn float(&mut self, field: &str, v: &Value) -> Option<f64> {
        let f = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => crate::decimal::parse_f64(s.trim()),
            Value::Null => return None,
            _ => None,
        };
        if f.is_none() {
            self.note_fmt(format_args!(
                "{field} must be a number, got {}; not used",
                show(v)
            ));
        }
        f
    }
    #[inline(never)]
    pub(super) fn flag(&mut self, field: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            Value::Number(n) if n.as_u64() == Some(0) => Some(false),
            Value::Number(n) if n.as_u64() == Some(1) => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            Value::Null => None,
            other => {
                self.note_fmt(format_args!(
                    "{field} must be true or false, got {}; not used",
                    show(other)
                ));
                None
            }
        }
    }
    /// The flag `prefix` + `key` of `map`, when present.
    #[inline(never)]
    pub(super) fn flag_in(
        &mut self,
        map: &Map<String, Value>,
        prefix: &str,
        key: &str,
    ) -> Option<bool> {
        let v = get(map, key)?;
        self.flag(&cat(prefix, key), v)
    }
    /// Whether the flag `key` of `map` is present and true.
    pub(super) fn on(&mut self, map: &Map<String, Value>, key: &str) -> bool {
        self.flag_in(map, "", key) == Some(true)
    }
    #[inline(never)]
    pub(super) fn text<'v>(&mut self, field: &str, v: &'v Value) -> Option<&'v str> {
        match v {
            Value::String(s) => Some(s.as_str()),
            Value::Null => None,
            other => {
                self.note_fmt(format_args!(
                    "{field} must be a string, got {} {}; not used",
                    type_name(other),
                    show(other)
                ));
                None
            }
        }
    }

    /// Classifies the fields of `map` not in `handled`: listed as read without effect on memory when in `neutral`,
    /// skipped when empty (null, false, "", [], {}), and unsupported otherwise.
    #[inline(never)]
    pub(super) fn rest(
        &mut self,
        prefix: &str,
        map: &Map<String, Value>,
        handled: &[&str],
        neutral: &[&str],
    ) {
        for (k, v) in map {
            if handled.contains(&k.as_str()) || is_empty(v) {
                continue;
            }
            let field = cat(prefix, k);
            if neutral.contains(&k.as_str()) {
                self.neutral(&field);
            } else {
                self.unsupported(&field);
            }
        }
    }

    #[inline(never)]
    pub(super) fn number_fact(&mut self, key: &'static str, field: &str, v: &Value) {
        if let Some(n) = self.uint(field, v) {
            self.fact(key, &num(n), field);
        }
    }
    pub(super) fn batch(&mut self, field: &str, v: &Value) {
        self.number_fact("b", field, v);
    }
    pub(super) fn seq(&mut self, field: &str, v: &Value) {
        self.number_fact("s", field, v);
    }
    pub(super) fn rank(&mut self, field: &str, v: &Value) {
        self.number_fact("r", field, v);
    }
    pub(super) fn accumulation(&mut self, field: &str, v: &Value) {
        self.number_fact("ga", field, v);
    }
    #[inline(never)]
    pub(super) fn dropout(&mut self, field: &str, v: &Value) {
        if let Some(p) = self.float(field, v) {
            self.fact("dropout", &format!("{p}"), field);
        }
    }
    #[inline(never)]
    pub(super) fn gc(&mut self, field: &str, v: &Value) {
        match v {
            Value::String(s) if matches!(s.as_str(), "unsloth" | "offload") => {
                // Checkpointing whose kept layer inputs wait in CPU memory: activation offloading.
                self.fact("gc", "1", field);
                self.fact("aoff", "1", field);
            }
            _ => {
                if let Some(b) = self.flag(field, v) {
                    self.fact_bool("gc", b, field);
                }
            }
        }
    }
    #[inline(never)]
    pub(super) fn optimizer(&mut self, field: &str, v: &Value) {
        let Some(name) = self.text(field, v) else {
            return;
        };
        match optimizer_alias(name) {
            Some((o, exact)) => {
                if !exact {
                    self.note_fmt(format_args!(
                        "{field} = {} is planned as opt={} (same memory)",
                        quote(name),
                        o.key()
                    ));
                }
                self.fact("opt", o.key(), field);
            }
            None => {
                self.unsupported_value(field, name);
                self.note_fmt(format_args!(
                    "{field} = {} is not an optimizer peakplan models ({}); opt unchanged",
                    quote(name),
                    Optimizer::accepted()
                ));
            }
        }
    }
    /// A Hub id or path of the base model, mapped to a bundled preset.
    #[inline(never)]
    pub(super) fn model(&mut self, field: &str, v: &Value) {
        let Some(id) = self.text(field, v) else {
            return;
        };
        match preset_for_hf_id(id) {
            Some(m) => self.fact("model", m.id, field),
            // Any other Hub id is a Hub model, as `model=org/name` is in a link (the page or `--hf-model`
            // fetches its config.json).
            None if crate::hub::HubId::parse(id).is_ok() => self.fact("model", id, field),
            None => self.note_fmt(format_args!(
                "{field} = {} is not a bundled preset; model unchanged (for another model, give its config.json to --hf-config or the page's config box)",
                quote(id)
            )),
        }
    }
    /// A list (or one name) of module names, mapped to targets; unknown names are listed as unsupported.
    #[inline(never)]
    pub(super) fn targets(&mut self, field: &str, v: &Value, extra_groups: &[u8]) {
        let mut groups: Vec<u8> = extra_groups.to_vec();
        let names: Vec<&str> = match v {
            Value::String(s) if s == "all-linear" => {
                groups.extend_from_slice(&LINEAR_GROUPS);
                self.targets_from_groups(field, &groups);
                return;
            }
            Value::String(s) if s.bytes().any(|c| b"*()[]|^$\\+?".contains(&c)) => {
                self.unsupported(field);
                self.note_fmt(format_args!(
                    "{field} is a regular expression ({}); peakplan reads lists of module names; targets unchanged",
                    quote(s)
                ));
                return;
            }
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => {
                let mut out = Vec::new();
                for it in items {
                    match it {
                        Value::String(s) => out.push(s.as_str()),
                        other => self.note_fmt(format_args!(
                            "{field}: {} is not a module name; skipped",
                            show(other)
                        )),
                    }
                }
                out
            }
            Value::Null => Vec::new(),
            other => {
                self.note_fmt(format_args!(
                    "{field} must be a list of module names, got {}; targets unchanged",
                    type_name(other)
                ));
                return;
            }
        };
        for n in &names {
            match module_targets(n) {
                0 => self.unsupported_value(field, n),
                bits => groups.push(bits),
            }
        }
        if groups.is_empty() {
            if !names.is_empty() {
                self.note(&cat(
                    field,
                    " names no module peakplan models; targets unchanged",
                ));
            }
            return;
        }
        self.targets_from_groups(field, &groups);
    }
    #[inline(never)]
    pub(super) fn targets_from_groups(&mut self, field: &str, groups: &[u8]) {
        let union = groups.iter().fold(0u8, |a, g| a | g);
        let value = Targets(union).key();
        let also: Vec<String> = consistent_targets(groups)
            .into_iter()
            .map(Targets::key)
            .filter(|k| *k != value)
            .collect();
        self.add("targets", value, also, false, field);
    }
    /// `modules_to_save` naming the embedding and/or LM head: the whole layers train (`tt=all`).
    #[inline(never)]
    pub(super) fn modules_to_save(&mut self, field: &str, v: &Value) {
        let names: Vec<&str> = match v {
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            Value::String(s) => vec![s.as_str()],
            _ => Vec::new(),
        };
        let mut any = false;
        for n in names {
            let embedding = matches!(
                n.rsplit('.').next().unwrap_or(n),
                "embed_tokens"
                    | "embed_in"
                    | "word_embeddings"
                    | "wte"
                    | "lm_head"
                    | "embed_out"
                    | "tok_embeddings"
                    | "output"
            );
            if embedding {
                any = true;
            } else {
                self.unsupported_value(field, n);
            }
        }
        if any {
            self.fact("tt", "all", field);
        }
    }
    #[inline(never)]
    pub(super) fn fsdp(&mut self, field: &str, v: &Value) {
        let words: Vec<&str> = match v {
            // `fsdp=True` (transformers 5): FSDP with its default strategy, FULL_SHARD.
            Value::Bool(true) => vec!["full_shard"],
            Value::String(s) => s.split_whitespace().collect(),
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if words.is_empty() {
            return;
        }
        let has = |w: &str| words.contains(&w);
        if has("full_shard") || has("hybrid_shard") {
            self.fact("zero", "3", field);
        } else if has("shard_grad_op") || has("hybrid_shard_zero2") {
            self.fact("zero", "2", field);
        }
        if has("offload") {
            self.fact("cpuoff", "1", field);
        }
        self.note(&cat(
            field,
            ": FSDP's sharding strategy is planned as the matching zero stage (full_shard zero=3, shard_grad_op zero=2)",
        ));
    }
}

/// `bfloat16`, `torch.float16`, `fp32`… as a dtype name.
pub(super) fn dtype_name(name: &str) -> Option<&'static str> {
    match name.trim().trim_start_matches("torch.") {
        "bfloat16" | "bf16" => Some("bf16"),
        "float16" | "fp16" | "half" => Some("fp16"),
        "float32" | "fp32" | "float" => Some("fp32"),
        _ => None,
    }
}

/// Hugging Face `optim` names (and bitsandbytes aliases) to the planned optimizer; `false` when only the memory
/// behaviour matches.
pub(super) fn optimizer_alias(name: &str) -> Option<(Optimizer, bool)> {
    if let Some(o) = Optimizer::from_key(name) {
        return Some((o, true));
    }
    table(OPTIMIZER_ALIASES)
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, o)| (*o, false))
}

/// Other spellings of the planned optimizers (Hugging Face `optim` names, bitsandbytes names).
pub(super) const OPTIMIZER_ALIASES: &[(&str, Optimizer)] = &[
    ("adamw_hf", Optimizer::AdamwTorch),
    ("adamw", Optimizer::AdamwTorch),
    ("adam", Optimizer::AdamwTorch),
    ("adamw_bnb_8bit", Optimizer::Adamw8bit),
    ("adam8bit", Optimizer::Adamw8bit),
    ("adamw8bit", Optimizer::Adamw8bit),
    ("bnb_8bit", Optimizer::Adamw8bit),
    ("paged_adamw", Optimizer::PagedAdamw32bit),
    ("paged_adam_32bit", Optimizer::PagedAdamw32bit),
    ("paged_adam_8bit", Optimizer::PagedAdamw8bit),
];

/// A bundled preset for a Hub id, preset id or local path whose last component names one.
pub(super) fn preset_for_hf_id(id: &str) -> Option<&'static presets::ModelPreset> {
    let id = id.trim().trim_end_matches('/');
    let last = |s: &str| s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase();
    table(presets::MODELS)
        .iter()
        .find(|m| m.hf_id.eq_ignore_ascii_case(id) || m.id.eq_ignore_ascii_case(id))
        .or_else(|| {
            table(presets::MODELS)
                .iter()
                .find(|m| m.hf_id.contains('/') && last(m.hf_id) == last(id))
        })
}

/// Whether `map` has any of `keys`.
#[inline(never)]
pub(super) fn has_any(map: &Map<String, Value>, keys: &[&str]) -> bool {
    keys.iter().any(|k| map.contains_key(*k))
}
