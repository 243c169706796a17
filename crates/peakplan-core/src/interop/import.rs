//! Import of training configs into a plan: the format is detected from the content, each file becomes a list of
//! facts about plan keys, and the facts of several files merge in order (a later file overrides an earlier one,
//! with a note; a fact that only refines an earlier one, like a 4-bit config after a LoRA adapter, applies
//! silently). Every field is accounted for: mapped to a key, listed as read without effect on memory, or listed
//! as unsupported.

use super::export::{torchtune_optimizer, PLAN_COMMENT, TORCHTUNE_MODELS};
use super::yaml;
use super::{
    axolotl_peft_without_key, consistent_targets, module_targets, num, table, PEFT_WITHOUT_KEY,
};
use crate::arch::Target;
use crate::hf::{import_config, quote};
use crate::plan::{Method, Optimizer, Plan, Targets, KEYS};
use crate::presets;
use serde_json::{Map, Value};

/// Largest file accepted (real configs are a few kilobytes).
pub const MAX_IMPORT_BYTES: usize = 1 << 20;
/// Most files one import merges.
pub const MAX_IMPORT_FILES: usize = 32;

/// The result of an import: the plan, and everything the files said that the plan does not hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    pub plan: Plan,
    /// Fields that peakplan does not model, by name (dotted for nested fields), in the order found.
    pub unsupported: Vec<String>,
    /// What the import decided: formats detected, fields read without effect on memory, overrides between
    /// files, values refused, and the keys no file set.
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
        if self.file.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.file, self.message)
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
    Ok(merge(base, &readers))
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
        }
    }
}

/// One thing a file says about a plan key.
#[derive(Clone, Debug)]
struct Fact {
    key: &'static str,
    value: String,
    /// Other values of the key that the file is equally consistent with (a fused module, a lossy flag).
    also: Vec<String>,
    /// Applies only where nothing else set the key (the `# peakplan:` line, guesses from a file name).
    weak: bool,
    /// `file: field`, for notes.
    source: String,
}

struct Reader {
    file: String,
    facts: Vec<Fact>,
    unsupported: Vec<String>,
    neutral: Vec<String>,
    notes: Vec<String>,
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

fn type_name(v: &Value) -> &'static str {
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
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => quote(&yaml::json_text(other)),
    }
}

/// A field of a mapping (one out-of-line lookup for every field read).
#[inline(never)]
fn get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key)
}

/// A string field of a mapping.
fn get_str<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    get(map, key).and_then(Value::as_str)
}

/// A field, unless absent or null.
fn get_set<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    get(map, key).filter(|v| !v.is_null())
}

/// `a` followed by `b`: a dotted field name, or a message.
#[inline(never)]
fn cat(a: &str, b: &str) -> String {
    let mut s = String::with_capacity(a.len() + b.len());
    s.push_str(a);
    s.push_str(b);
    s
}

fn one_zero(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

impl Reader {
    fn new(file: &str) -> Self {
        Reader {
            file: file.to_string(),
            facts: Vec::new(),
            unsupported: Vec::new(),
            neutral: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[inline(never)]
    fn add(
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
    fn fact(&mut self, key: &'static str, value: &str, field: &str) {
        self.add(key, value.to_string(), Vec::new(), false, field);
    }
    #[inline(never)]
    fn fact_also(&mut self, key: &'static str, value: &str, also: &[&str], field: &str) {
        let also = also.iter().map(|s| s.to_string()).collect();
        self.add(key, value.to_string(), also, false, field);
    }
    /// A `0`/`1` key.
    fn fact_bool(&mut self, key: &'static str, b: bool, field: &str) {
        self.fact(key, one_zero(b), field);
    }
    /// A fact that applies only where nothing else set the key.
    #[inline(never)]
    fn weak(&mut self, key: &'static str, value: &str, also: &[&str], field: &str) {
        let also = also.iter().map(|s| s.to_string()).collect();
        self.add(key, value.to_string(), also, true, field);
    }
    /// A note written straight into its line (no intermediate string).
    #[inline(never)]
    fn note_fmt(&mut self, msg: std::fmt::Arguments) {
        use std::fmt::Write;
        let mut n = cat(&self.file, ": ");
        let _ = n.write_fmt(msg);
        self.notes.push(n);
    }
    #[inline(never)]
    fn note(&mut self, msg: &str) {
        let mut n = cat(&self.file, ": ");
        n.push_str(msg);
        self.notes.push(n);
    }
    #[inline(never)]
    fn unsupported(&mut self, field: &str) {
        if !self.unsupported.iter().any(|u| u == field) {
            self.unsupported.push(field.to_string());
        }
    }
    /// `field: value` as unsupported.
    fn unsupported_value(&mut self, field: &str, value: &str) {
        let mut f = cat(field, ": ");
        f.push_str(value);
        self.unsupported(&f);
    }
    #[inline(never)]
    fn neutral(&mut self, field: &str) {
        self.neutral.push(field.to_string());
    }

    #[inline(never)]
    fn uint(&mut self, field: &str, v: &Value) -> Option<u64> {
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
    fn float(&mut self, field: &str, v: &Value) -> Option<f64> {
        let f = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
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
    fn flag(&mut self, field: &str, v: &Value) -> Option<bool> {
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
    fn flag_in(&mut self, map: &Map<String, Value>, prefix: &str, key: &str) -> Option<bool> {
        let v = get(map, key)?;
        self.flag(&cat(prefix, key), v)
    }
    /// Whether the flag `key` of `map` is present and true.
    fn on(&mut self, map: &Map<String, Value>, key: &str) -> bool {
        self.flag_in(map, "", key) == Some(true)
    }
    #[inline(never)]
    fn text<'v>(&mut self, field: &str, v: &'v Value) -> Option<&'v str> {
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
    fn rest(&mut self, prefix: &str, map: &Map<String, Value>, handled: &[&str], neutral: &[&str]) {
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
    fn number_fact(&mut self, key: &'static str, field: &str, v: &Value) {
        if let Some(n) = self.uint(field, v) {
            self.fact(key, &num(n), field);
        }
    }
    fn batch(&mut self, field: &str, v: &Value) {
        self.number_fact("b", field, v);
    }
    fn seq(&mut self, field: &str, v: &Value) {
        self.number_fact("s", field, v);
    }
    fn rank(&mut self, field: &str, v: &Value) {
        self.number_fact("r", field, v);
    }
    fn accumulation(&mut self, field: &str, v: &Value) {
        self.number_fact("ga", field, v);
    }
    #[inline(never)]
    fn dropout(&mut self, field: &str, v: &Value) {
        if let Some(p) = self.float(field, v) {
            self.fact("dropout", &format!("{p}"), field);
        }
    }
    #[inline(never)]
    fn gc(&mut self, field: &str, v: &Value) {
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
    fn optimizer(&mut self, field: &str, v: &Value) {
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
    fn model(&mut self, field: &str, v: &Value) {
        let Some(id) = self.text(field, v) else {
            return;
        };
        match preset_for_hf_id(id) {
            Some(m) => self.fact("model", m.id, field),
            None => self.note_fmt(format_args!(
                "{field} = {} is not a bundled preset; model unchanged (for another model, give its config.json to --hf-config or the page's config box)",
                quote(id)
            )),
        }
    }
    /// A list (or one name) of module names, mapped to targets; unknown names are listed as unsupported.
    #[inline(never)]
    fn targets(&mut self, field: &str, v: &Value, extra_groups: &[u8]) {
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
    fn targets_from_groups(&mut self, field: &str, groups: &[u8]) {
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
    fn modules_to_save(&mut self, field: &str, v: &Value) {
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
    /// PEFT's `trainable_token_indices`: a list of token ids, or a mapping from layer name to such a list.
    #[inline(never)]
    fn trainable_tokens(&mut self, field: &str, v: &Value) {
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
            self.fact("tt", &num(n as u64), field);
        }
    }
    /// `bfloat16`, `torch.float16`, `fp32`… as a dtype name.
    fn dtype_name(name: &str) -> Option<&'static str> {
        match name.trim().trim_start_matches("torch.") {
            "bfloat16" | "bf16" => Some("bf16"),
            "float16" | "fp16" | "half" => Some("fp16"),
            "float32" | "fp32" | "float" => Some("fp32"),
            _ => None,
        }
    }
    /// A zero stage guessed from a DeepSpeed file name such as `zero3_bf16.json`.
    #[inline(never)]
    fn deepspeed_path(&mut self, field: &str, path: &str) {
        let lower = path.to_ascii_lowercase();
        let stage = lower
            .as_bytes()
            .windows(4)
            .position(|w| w == b"zero")
            .and_then(|i| lower[i + 4..].trim_start_matches(['_', '-']).chars().next())
            .and_then(|c| c.to_digit(10))
            .filter(|d| *d <= 3);
        let q = quote(path);
        match stage {
            Some(d) => {
                self.fact("zero", &num(u64::from(d)), field);
                self.note_fmt(format_args!(
                    "{field} = {q}: zero={d} from the file name; give that file too to read its settings"
                ));
            }
            None => self.note_fmt(format_args!(
                "{field} = {q}: give that file too (peakplan import this.yaml {q}) to read its ZeRO stage"
            )),
        }
    }
    #[inline(never)]
    fn fsdp(&mut self, field: &str, v: &Value) {
        let words: Vec<&str> = match v {
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
            ": FSDP sharding is planned as the matching ZeRO stage",
        ));
    }
}

/// The target groups of PEFT's `all-linear` (and axolotl's `lora_target_linear`): every linear but the LM head.
const LINEAR_GROUPS: [u8; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Hugging Face `optim` names (and bitsandbytes aliases) to the planned optimizer; `false` when only the memory
/// behaviour matches.
fn optimizer_alias(name: &str) -> Option<(Optimizer, bool)> {
    if let Some(o) = Optimizer::from_key(name) {
        return Some((o, true));
    }
    table(OPTIMIZER_ALIASES)
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, o)| (*o, false))
}

/// Other spellings of the planned optimizers (Hugging Face `optim` names, bitsandbytes names).
const OPTIMIZER_ALIASES: &[(&str, Optimizer)] = &[
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
fn preset_for_hf_id(id: &str) -> Option<&'static presets::ModelPreset> {
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
fn has_any(map: &Map<String, Value>, keys: &[&str]) -> bool {
    keys.iter().any(|k| map.contains_key(*k))
}

#[inline(never)]
fn detect(map: &Map<String, Value>) -> Option<Format> {
    let has = |k: &str| has_any(map, &[k]);
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
            "is not a training config peakplan reads (a PEFT adapter_config.json, a bitsandbytes or GPTQ quantization_config or config.json, TrainingArguments JSON, a DeepSpeed JSON, an axolotl YAML or a peakplan torchtune override); its keys start with ",
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
        Format::Peft => read_peft(&mut r, map)?,
        Format::Quant => read_quant(&mut r, "", map),
        Format::HfConfig => read_hf_config(&mut r, map, body),
        Format::TrainingArgs => read_training_args(&mut r, map),
        Format::DeepSpeed => read_deepspeed(&mut r, "", map),
        Format::Axolotl => read_axolotl(&mut r, map),
        Format::Torchtune => read_torchtune(&mut r, map),
    }
    Ok(r)
}

/// The keys of a `# peakplan: QUERY` line, as weak facts (they apply where no field of the files says).
#[inline(never)]
fn read_plan_comment(r: &mut Reader, q: &str) {
    let field = cat(PLAN_COMMENT, " line");
    let parsed = Plan::parse_query(q);
    for d in &parsed.diagnostics {
        let mut n = cat(&field, ": ");
        n.push_str(&d.message);
        r.note(&n);
    }
    // The keys the line gives (`key=value` pairs), less those it gives wrong.
    let given = |k: &str| {
        q.trim_start_matches('?')
            .split('&')
            .any(|p| p.split_once('=').is_some_and(|(g, _)| g == k))
    };
    for k in plan_keys() {
        if *k == "embed" || parsed.diagnostics.iter().any(|d| d.key == *k) || !given(k) {
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

#[inline(never)]
fn read_peft(r: &mut Reader, map: &Map<String, Value>) -> Result<(), ImportError> {
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
            return Err(ImportError {
                file: r.file.clone(),
                message: format!(
                    "peft_type is {}; peakplan plans LoRA (with rsLoRA, DoRA, LoRA-FA), IA3, VeRA, LoHa, OFT, LN_TUNING, PROMPT_TUNING and PREFIX_TUNING adapters",
                    quote(get_str(map, "peft_type").unwrap_or_default())
                ),
            });
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
        r.trainable_tokens("trainable_token_indices", v);
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

/// A GPTQ `quantization_config` (a quantized checkpoint's, or `GPTQConfig`'s): its bits pick `quant=gptq4` or
/// `gptq8`; peakplan models auto-gptq's layout with groups of 128 inputs.
#[inline(never)]
fn read_gptq(r: &mut Reader, prefix: &str, map: &Map<String, Value>) {
    let f = |k: &str| cat(prefix, k);
    let field = f("bits");
    match get(map, "bits").and_then(|v| r.uint(&field, v)) {
        Some(4) => r.fact("quant", "gptq4", &field),
        Some(8) => r.fact("quant", "gptq8", &field),
        Some(other) => {
            r.unsupported_value(&field, &num(other));
            r.note_fmt(format_args!(
                "{field} = {other}: peakplan models 4- and 8-bit GPTQ bases; the quantization is not in the plan"
            ));
            return;
        }
        None => {
            r.note_fmt(format_args!(
                "{} is gptq without bits: planned as 4-bit (quant=gptq4)",
                f("quant_method")
            ));
            r.fact("quant", "gptq4", &f("quant_method"));
        }
    }
    r.fact("method", "qlora", &f("quant_method"));
    if let Some(g) = get(map, "group_size") {
        let field = f("group_size");
        if r.uint(&field, g) != Some(128) {
            r.unsupported(&field);
            r.note_fmt(format_args!(
                "{field} is not 128: peakplan counts a scale and a zero point per 128 inputs"
            ));
        }
    }
    r.rest(
        prefix,
        map,
        &["quant_method", "bits", "group_size"],
        &[
            "desc_act",
            "sym",
            "damp_percent",
            "true_sequential",
            "static_groups",
            "model_name_or_path",
            "model_file_base_name",
            "use_exllama",
            "exllama_config",
            "disable_exllama",
            "use_cuda_fp16",
            "dataset",
            "tokenizer",
            "checkpoint_format",
            "meta",
            "module_name_preceding_first_block",
            "block_name_to_quantize",
            "modules_in_block_to_quantize",
            "cache_block_outputs",
            "max_input_length",
            "batch_size",
            "pad_token_id",
            "use_marlin",
            "backend",
        ],
    );
}

#[inline(never)]
fn read_quant(r: &mut Reader, prefix: &str, map: &Map<String, Value>) {
    let f = |k: &str| cat(prefix, k);
    if get_str(map, "quant_method") == Some("gptq") {
        read_gptq(r, prefix, map);
        return;
    }
    if let Some(m) = get_str(map, "quant_method") {
        if m != "bitsandbytes" {
            let field = f("quant_method");
            r.unsupported(&field);
            r.note_fmt(format_args!(
                "{field} is {}: only bitsandbytes 4-bit (QLoRA) is modelled; the quantization is not in the plan",
                quote(m)
            ));
            return;
        }
    }
    let four = r.flag_in(map, prefix, "load_in_4bit");
    let eight = r.flag_in(map, prefix, "load_in_8bit");
    if four == Some(true) {
        r.fact("method", "qlora", &f("load_in_4bit"));
    } else if eight == Some(true) {
        // LoRA over an LLM.int8 base: peakplan's quantized-base method with 8-bit weights.
        let field = f("load_in_8bit");
        r.fact("method", "qlora", &field);
        r.fact("quant", "int8", &field);
    }
    if let Some(v) = get(map, "bnb_4bit_quant_type") {
        let field = f("bnb_4bit_quant_type");
        if let Some(t) = r.text(&field, v) {
            r.fact("quant", &t.to_ascii_lowercase(), &field);
        }
    }
    if let Some(b) = r.flag_in(map, prefix, "bnb_4bit_use_double_quant") {
        r.fact_bool("dq", b, &f("bnb_4bit_use_double_quant"));
    }
    if let Some(v) = get(map, "bnb_4bit_compute_dtype") {
        let field = f("bnb_4bit_compute_dtype");
        if let Some(t) = r.text(&field, v) {
            match Reader::dtype_name(t) {
                Some("bf16") => r.weak("prec", "amp_bf16", &["bf16"], &field),
                Some("fp16") => r.weak("prec", "amp_fp16", &["fp16"], &field),
                Some(_) => r.weak("prec", "fp32", &[], &field),
                None => r.note_fmt(format_args!(
                    "{field} = {} is not a dtype peakplan knows",
                    quote(t)
                )),
            }
        }
    }
    if let Some(s) = get_str(map, "bnb_4bit_quant_storage") {
        if s.trim_start_matches("torch.") != "uint8" {
            r.unsupported(&f("bnb_4bit_quant_storage"));
        }
    }
    r.rest(
        prefix,
        map,
        &[
            "quant_method",
            "load_in_4bit",
            "load_in_8bit",
            "bnb_4bit_quant_type",
            "bnb_4bit_use_double_quant",
            "bnb_4bit_compute_dtype",
            "bnb_4bit_quant_storage",
        ],
        &[
            "llm_int8_threshold",
            "llm_int8_enable_fp32_cpu_offload",
            "llm_int8_has_fp16_weight",
            "_load_in_4bit",
            "_load_in_8bit",
        ],
    );
}

#[inline(never)]
fn read_hf_config(r: &mut Reader, map: &Map<String, Value>, text: &str) {
    match get(map, "quantization_config") {
        Some(Value::Object(q)) => read_quant(r, "quantization_config.", q),
        Some(Value::Null) | None => {}
        Some(other) => r.note_fmt(format_args!(
            "quantization_config must be a mapping, got {}; not used",
            type_name(other)
        )),
    }
    match import_config(text) {
        Ok(arch) => {
            let same = table(presets::MODELS).iter().find(|m| {
                presets::model_arch(m.id).is_some_and(|a| {
                    let mut b = arch.clone();
                    b.name.clone_from(&a.name);
                    &b == a
                })
            });
            match same {
                Some(m) => r.fact("model", m.id, "model fields"),
                None => match get_str(map, "_name_or_path").and_then(preset_for_hf_id) {
                    Some(m) => {
                        r.fact("model", m.id, "_name_or_path");
                        r.note_fmt(format_args!("the model fields differ from the bundled {}; planned as that preset", m.id));
                    }
                    None => r.note(
                        "this model is not a bundled preset: model unchanged; give this config.json to --hf-config (CLI) or the page's config box to plan for it",
                    ),
                },
            }
        }
        Err(e) if has_any(map, &["model_type"]) => {
            r.note(&cat("its model fields were not used: ", &e.to_string()));
        }
        Err(_) => {}
    }
    if let Some(v) = get(map, "torch_dtype").or_else(|| get(map, "dtype")) {
        if !is_empty(v) {
            r.neutral("torch_dtype");
        }
    }
}

#[rustfmt::skip]
const TRAINING_ARGS_NEUTRAL: &[&str] = &[
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "eval_strategy",
    "evaluation_strategy", "prediction_loss_only", "per_device_eval_batch_size", "per_gpu_train_batch_size",
    "per_gpu_eval_batch_size", "eval_accumulation_steps", "eval_delay",
    "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
    "num_train_epochs", "max_steps", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps",
    "log_level", "log_level_replica", "log_on_each_node", "logging_dir", "logging_strategy", "logging_first_step",
    "logging_steps", "logging_nan_inf_filter", "save_strategy", "save_steps", "save_total_limit",
    "save_safetensors", "save_on_each_node", "save_only_model", "seed", "data_seed", "jit_mode_eval", "use_ipex",
    "bf16_full_eval", "fp16_full_eval", "fp16_opt_level", "half_precision_backend", "fp16_backend", "tf32",
    "local_rank", "ddp_backend", "tpu_num_cores", "tpu_metrics_debug", "debug", "dataloader_drop_last",
    "eval_steps", "dataloader_num_workers", "dataloader_prefetch_factor", "past_index", "run_name", "disable_tqdm",
    "remove_unused_columns", "label_names", "load_best_model_at_end", "metric_for_best_model", "greater_is_better",
    "ignore_data_skip", "accelerator_config", "label_smoothing_factor", "group_by_length", "length_column_name",
    "report_to", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
    "dataloader_pin_memory", "dataloader_persistent_workers", "skip_memory_metrics", "use_legacy_prediction_loop",
    "push_to_hub", "resume_from_checkpoint", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo",
    "hub_always_push", "hub_revision", "gradient_checkpointing_kwargs", "include_inputs_for_metrics",
    "include_for_metrics", "eval_do_concat_batches", "full_determinism", "ray_scope", "ddp_timeout",
    "torch_compile_backend", "torch_compile_mode", "include_tokens_per_second", "include_num_input_tokens_seen",
    "neftune_noise_alpha", "optim_args", "optim_target_modules", "batch_eval_metrics", "eval_on_start",
    "eval_use_gather_object", "average_tokens_across_devices", "restore_callback_states_from_checkpoint",
    "dispatch_batches", "split_batches", "mp_parameters", "fsdp_config", "fsdp_min_num_params",
    "fsdp_transformer_layer_cls_to_wrap", "no_cuda", "use_cpu", "use_mps_device", "sharded_ddp",
    "push_to_hub_model_id", "push_to_hub_organization", "push_to_hub_token", "torch_empty_cache_steps", "project",
    "trackio_space_id", "liger_kernel_config", "parallelism_config", "dataset_text_field", "packing",
    "packing_strategy", "dataset_kwargs", "dataset_num_proc", "completion_only_loss", "assistant_only_loss",
    "model_init_kwargs", "chat_template_path", "eos_token", "pad_token", "pad_to_multiple_of", "eval_packing",
    "shuffle_dataset", "truncation_mode", "dataset_batch_size", "num_of_sequences", "chars_per_token", "use_liger",
];

#[inline(never)]
fn read_training_args(r: &mut Reader, map: &Map<String, Value>) {
    if let Some(v) = get(map, "per_device_train_batch_size") {
        r.batch("per_device_train_batch_size", v);
    }
    if let Some(v) = get(map, "gradient_checkpointing") {
        r.gc("gradient_checkpointing", v);
    }
    let bf16 = r.flag_in(map, "", "bf16");
    let fp16 = r.flag_in(map, "", "fp16");
    match (bf16, fp16) {
        (Some(true), Some(true)) => r.note("bf16 and fp16 are both on; prec unchanged"),
        (Some(true), _) => r.fact_also("prec", "amp_bf16", &["bf16"], "bf16"),
        (_, Some(true)) => r.fact_also("prec", "amp_fp16", &["fp16"], "fp16"),
        (Some(false), Some(false)) => r.note(
            "bf16 and fp16 are off: training runs in the dtype the model was loaded in (fp32, or pure 16-bit); prec unchanged",
        ),
        _ => {}
    }
    if let Some(v) = get(map, "optim") {
        r.optimizer("optim", v);
    }
    for k in ["max_seq_length", "max_length"] {
        if let Some(v) = get_set(map, k) {
            r.seq(k, v);
            break;
        }
    }
    match get(map, "deepspeed") {
        Some(Value::Object(ds)) => read_deepspeed(r, "deepspeed.", ds),
        Some(Value::String(p)) if !p.is_empty() => r.deepspeed_path("deepspeed", p),
        _ => {}
    }
    if let Some(v) = get(map, "fsdp") {
        r.fsdp("fsdp", v);
    }
    if get(map, "use_liger_kernel").and_then(Value::as_bool) == Some(true) {
        // Liger's defaults: every kernel on, the fused linear cross-entropy among them.
        let cfg = get(map, "liger_kernel_config").and_then(Value::as_object);
        let kernel = |k: &str| {
            cfg.and_then(|c| get(c, k))
                .and_then(Value::as_bool)
                .unwrap_or(true)
        };
        let layers = kernel("rope") || kernel("rms_norm") || kernel("swiglu");
        r.fact_bool("liger", layers, "use_liger_kernel");
        if kernel("fused_linear_cross_entropy") {
            r.fact("loss", "fused", "use_liger_kernel");
        }
    }
    if let Some(b) = r.flag_in(map, "", "torch_compile") {
        r.fact_bool("compile", b, "torch_compile");
    }
    if let Some(v) = get(map, "loss_type") {
        match v.as_str() {
            Some("chunked_nll") => r.fact("loss", "chunked", "loss_type"),
            Some("nll") => r.fact("loss", "standard", "loss_type"),
            Some(other) if !other.is_empty() => r.unsupported_value("loss_type", other),
            _ => {}
        }
    }
    if let Some(v) = get(map, "gradient_accumulation_steps") {
        r.accumulation("gradient_accumulation_steps", v);
    }
    r.rest(
        "",
        map,
        &[
            "gradient_accumulation_steps",
            "per_device_train_batch_size",
            "gradient_checkpointing",
            "bf16",
            "fp16",
            "optim",
            "max_seq_length",
            "max_length",
            "deepspeed",
            "fsdp",
            "use_liger_kernel",
            "loss_type",
            "torch_compile",
        ],
        TRAINING_ARGS_NEUTRAL,
    );
}

#[rustfmt::skip]
const DEEPSPEED_NEUTRAL: &[&str] = &[
    "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
    "zero_allow_untested_optimizer", "scheduler", "prescale_gradients", "gradient_predivide_factor",
    "communication_data_type", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger",
    "activation_checkpointing", "aio", "data_types", "zero_force_ds_cpu_optimizer", "dump_state",
    "memory_breakdown", "seq_parallel_communication_data_type", "sparse_gradients", "bfloat16",
];

#[rustfmt::skip]
const ZERO_NEUTRAL: &[&str] = &[
    "overlap_comm", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
    "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "sub_group_size", "round_robin_gradients", "load_from_fp32_weights",
    "elastic_checkpoint", "ignore_unused_parameters", "legacy_stage1", "zero_hpz_partition_size",
    "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size", "use_multi_rank_bucket_allreduce",
];

#[inline(never)]
fn read_deepspeed(r: &mut Reader, prefix: &str, map: &Map<String, Value>) {
    let f = |k: &str| cat(prefix, k);
    let micro_field = f("train_micro_batch_size_per_gpu");
    let micro = get(map, "train_micro_batch_size_per_gpu").and_then(|v| r.uint(&micro_field, v));
    if let Some(b) = micro {
        r.fact("b", &num(b), &micro_field);
    }
    match get(map, "zero_optimization") {
        Some(Value::Object(z)) => {
            let zp = f("zero_optimization.");
            if let Some(v) = get(z, "stage") {
                let field = cat(&zp, "stage");
                if let Some(s) = r.uint(&field, v) {
                    r.fact("zero", &num(s), &field);
                }
            }
            for k in ["offload_optimizer", "offload_param"] {
                let device = match get(z, k) {
                    Some(Value::Object(o)) => get_str(o, "device").unwrap_or("none"),
                    Some(Value::String(s)) => s.as_str(),
                    _ => "none",
                };
                let field = cat(&zp, k);
                match device {
                    "none" => {}
                    "cpu" => r.fact("cpuoff", "1", &field),
                    _ => {
                        r.fact("cpuoff", "1", &field);
                        r.note_fmt(format_args!(
                            "{field}: offloading to {device} is planned as CPU offload (the GPU side is the same)"
                        ));
                    }
                }
            }
            r.rest(
                &zp,
                z,
                &["stage", "offload_optimizer", "offload_param"],
                ZERO_NEUTRAL,
            );
        }
        Some(other) if !is_empty(other) => r.note_fmt(format_args!(
            "{}zero_optimization must be a mapping, got {}; not used",
            prefix,
            type_name(other)
        )),
        _ => {}
    }
    let bf16 = enabled(r, prefix, map, "bf16");
    let fp16 = enabled(r, prefix, map, "fp16");
    match (bf16, fp16) {
        (Some(true), Some(true)) => r.note("bf16 and fp16 are both enabled; prec unchanged"),
        (Some(true), _) => r.fact_also("prec", "amp_bf16", &["bf16"], &f("bf16.enabled")),
        (_, Some(true)) => r.fact_also("prec", "amp_fp16", &["fp16"], &f("fp16.enabled")),
        (Some(false), Some(false)) => r.fact("prec", "fp32", &f("bf16.enabled")),
        _ => {}
    }
    let gas = match get(map, "gradient_accumulation_steps") {
        None => Some(1),
        Some(v) => v.as_u64(),
    };
    match get(map, "train_batch_size") {
        Some(v) => {
            let field = f("train_batch_size");
            let total = r.uint(&field, v);
            let per_gpu = micro.zip(gas).and_then(|(m, g)| m.checked_mul(g)).filter(|n| *n > 0);
            match (total, per_gpu) {
                (Some(t), Some(n)) if t % n == 0 && t >= n => {
                    r.fact("gpus", &num(t / n), &field);
                }
                (Some(t), Some(n)) => r.note_fmt(format_args!(
                    "{field} = {t} is not a multiple of micro-batch x accumulation ({n}); gpus unchanged"
                )),
                _ => {}
            }
        }
        None => r.note("the GPU count is only in a DeepSpeed config when train_batch_size is a number; gpus unchanged"),
    }
    if get(map, "optimizer").is_some_and(|v| !is_empty(v)) {
        let field = f("optimizer");
        r.unsupported(&field);
        r.note(&cat(
            &field,
            ": DeepSpeed's own optimizer is not modelled; opt stays the Hugging Face optimizer",
        ));
    }
    if let Some(v) = get(map, "gradient_accumulation_steps") {
        r.accumulation(&cat(prefix, "gradient_accumulation_steps"), v);
    }
    r.rest(
        prefix,
        map,
        &[
            "gradient_accumulation_steps",
            "train_micro_batch_size_per_gpu",
            "zero_optimization",
            "bf16",
            "fp16",
            "train_batch_size",
            "optimizer",
        ],
        DEEPSPEED_NEUTRAL,
    );
}

/// DeepSpeed's `bf16`/`fp16` section: `enabled` (true when the section has no such field), `None` for `auto`.
#[inline(never)]
fn enabled(r: &mut Reader, prefix: &str, map: &Map<String, Value>, k: &str) -> Option<bool> {
    match get(map, k) {
        Some(Value::Object(o)) => match get(o, "enabled") {
            Some(Value::String(s)) if s == "auto" => None,
            Some(v) => {
                let mut field = cat(prefix, k);
                field.push_str(".enabled");
                r.flag(&field, v)
            }
            None => Some(true),
        },
        _ => None,
    }
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
    "max_grad_norm", "gradient_checkpointing_kwargs", "tf32", "lora_alpha", "fsdp_config", "plugins",
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

#[inline(never)]
fn read_axolotl(r: &mut Reader, map: &Map<String, Value>) {
    if let Some(v) = get(map, "base_model") {
        r.model("base_model", v);
    }
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
    if let Some(v) = get(map, "sequence_len") {
        r.seq("sequence_len", v);
    }
    if let Some(v) = get(map, "micro_batch_size") {
        r.batch("micro_batch_size", v);
    }
    if let Some(v) = get(map, "gradient_checkpointing") {
        r.gc("gradient_checkpointing", v);
    }
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
    read_axolotl_precision(r, map, method == Some(Method::Full));
    match get(map, "deepspeed") {
        Some(Value::String(p)) if !p.is_empty() => r.deepspeed_path("deepspeed", p),
        Some(Value::Object(ds)) => read_deepspeed(r, "deepspeed.", ds),
        _ => {}
    }
    if let Some(v) = get(map, "fsdp") {
        r.fsdp("fsdp", v);
    }
    if let Some(v) = get(map, "gradient_accumulation_steps") {
        r.accumulation("gradient_accumulation_steps", v);
    }
    r.rest(
        "",
        map,
        &[
            "gradient_accumulation_steps",
            "base_model",
            "adapter",
            "load_in_4bit",
            "load_in_8bit",
            "gptq",
            "lora_r",
            "lora_dropout",
            "lora_target_linear",
            "lora_target_modules",
            "sequence_len",
            "micro_batch_size",
            "gradient_checkpointing",
            "flash_attention",
            "sdp_attention",
            "eager_attention",
            "attn_implementation",
            "xformers_attention",
            "liger_fused_linear_cross_entropy",
            "cut_cross_entropy",
            "unsloth_cross_entropy_loss",
            "optimizer",
            "bf16",
            "fp16",
            "bfloat16",
            "float16",
            "deepspeed",
            "fsdp",
            "bnb_config_kwargs",
            "peft_use_dora",
            "peft_use_rslora",
            "lora_modules_to_save",
            "torch_compile",
            "liger_rope",
            "liger_rms_norm",
            "liger_glu_activation",
            "liger_swiglu",
            "liger_layer_norm",
        ],
        AXOLOTL_NEUTRAL,
    );
}

/// axolotl loads the weights in the 16-bit dtype whenever bf16/fp16 is on: for full fine-tuning that is
/// prec=bf16 for memory (no fp32 master), for adapters it is mixed precision over 16-bit weights.
#[inline(never)]
fn read_axolotl_precision(r: &mut Reader, map: &Map<String, Value>, full: bool) {
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

#[rustfmt::skip]
const TORCHTUNE_NEUTRAL: &[&str] = &[
    "output_dir", "seed", "shuffle", "dataset", "epochs", "max_steps_per_epoch", "checkpointer",
    "resume_from_checkpoint", "lr_scheduler", "metric_logger", "log_every_n_steps", "log_peak_memory_stats",
    "log_level", "profiler", "device", "clip_grad_norm", "save_adapter_weights_only",
    "custom_sharded_layers", "collate_fn", "run_val_every_n_steps", "dataset_val", "batch_size_val", "tokenizer",
];

#[inline(never)]
fn read_torchtune(r: &mut Reader, map: &Map<String, Value>) {
    r.fact("fw", "torchtune", "torchtune config");
    if let Some(Value::Object(m)) = get(map, "model") {
        read_torchtune_model(r, m);
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
        let (prec, also, adtype) = match r.text("dtype", v).and_then(Reader::dtype_name) {
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
                let (comp, f) = torchtune_optimizer(*opt);
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
    r.rest(
        "",
        map,
        &[
            "gradient_accumulation_steps",
            "model",
            "tokenizer",
            "batch_size",
            "enable_activation_checkpointing",
            "dtype",
            "optimizer",
            "loss",
            "compile",
            "optimizer_in_bwd",
            "enable_activation_offloading",
        ],
        TORCHTUNE_NEUTRAL,
    );
    r.note("torchtune configs do not say how many GPUs (the launch does); gpus unchanged unless the peakplan line says");
}

/// torchtune's `model:` section: the builder names the model and the method, the LoRA keys the adapter.
#[inline(never)]
fn read_torchtune_model(r: &mut Reader, m: &Map<String, Value>) {
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

/// The plan keys, as a loop rather than unrolled (see [`table`]).
fn plan_keys() -> &'static [&'static str] {
    table(KEYS)
}

#[inline(never)]
fn merge(base: &Plan, readers: &[Reader]) -> Imported {
    let mut plan = base.clone();
    // The fact that set each key so far.
    let mut set_by: Vec<&Fact> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut unsupported: Vec<String> = Vec::new();
    for r in readers {
        notes.extend_from_slice(&r.notes);
        if !r.neutral.is_empty() {
            let shown: Vec<&str> = r.neutral.iter().take(12).map(String::as_str).collect();
            let more = r.neutral.len().saturating_sub(shown.len());
            let mut n = cat(&r.file, ": read, no effect on memory: ");
            n.push_str(&shown.join(", "));
            if more > 0 {
                n.push_str(&format!(" and {more} more"));
            }
            notes.push(n);
        }
        for u in &r.unsupported {
            if !unsupported.contains(u) {
                unsupported.push(u.clone());
            }
        }
        for f in &r.facts {
            let cur = plan.get(f.key).unwrap_or_default();
            let prev = set_by.iter().position(|p| p.key == f.key);
            if let Some(i) = prev {
                if f.weak {
                    continue;
                }
                let p = set_by[i];
                if cur == f.value || f.also.contains(&cur) {
                    continue;
                }
                if !p.also.contains(&f.value) {
                    notes.push(format!(
                        "{}={} ({}) replaces {}={} ({})",
                        f.key, f.value, f.source, f.key, cur, p.source
                    ));
                }
            }
            match plan.set(f.key, &f.value) {
                Ok(()) => match prev {
                    Some(i) => set_by[i] = f,
                    None => set_by.push(f),
                },
                Err(msg) => notes.push(format!("{}: {msg}; {} stays {cur}", f.source, f.key)),
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
        "embed" => false,
        "r" | "targets" | "dropout" | "adtype" | "peft" | "tt" => plan.method != Method::Full,
        "vt" => plan.method != Method::Full && plan.peft.uses_virtual_tokens(),
        "quant" | "dq" | "upcast" | "qsave" | "moe" => plan.method == Method::Qlora,
        "chunk" => plan.loss == crate::plan::Loss::Chunked,
        "zero" => plan.gpus > 1,
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
        notes.push(kept);
    }
    Imported {
        plan,
        unsupported,
        notes,
        carried,
    }
}
