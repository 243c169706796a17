//! Interoperation with training stacks: export a plan as a runnable script or config, import configs into a plan.
//!
//! Pure string work, no I/O: [`export`] writes a transformers + PEFT + bitsandbytes script, an axolotl YAML,
//! a torchtune config override or a DeepSpeed JSON for a plan; [`import`] reads PEFT `adapter_config.json`,
//! bitsandbytes `quantization_config` (alone or inside a `config.json`), `TrainingArguments` JSON, axolotl YAML,
//! DeepSpeed JSON and peakplan's own torchtune override back into a [`Plan`], listing every field it does not
//! model instead of dropping it.
//!
//! This code ships in the web page, and peakplan-core is built at opt-level 3 (for the engine), which inlines and
//! unrolls freely. So the module is written for size: the exported texts are data (`*.tmpl` templates filled by
//! one `render`), the importer reads fields through a few non-generic, out-of-line helpers (`#[inline(never)]`),
//! messages are written with `format_args!` straight into their line, and searches over constant tables go
//! through `table` so that they stay loops.

mod export;
mod import;
mod python;
pub mod yaml;

pub use import::{import, import_over, ImportError, Imported, MAX_IMPORT_BYTES};

use crate::arch::{Architecture, Mlp, Target};
use crate::plan::{Plan, Targets};
use crate::presets;

/// What [`export`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExportFormat {
    /// A runnable transformers + PEFT + bitsandbytes script that measures the peak.
    Python,
    /// An axolotl YAML config.
    Axolotl,
    /// A torchtune config override (YAML).
    Torchtune,
    /// A DeepSpeed JSON config (ZeRO stage, micro-batch, precision), also usable with accelerate.
    Deepspeed,
}

impl ExportFormat {
    /// Every format, in the order the page lists them.
    pub const ALL: &'static [ExportFormat] = &[
        ExportFormat::Python,
        ExportFormat::Axolotl,
        ExportFormat::Torchtune,
        ExportFormat::Deepspeed,
    ];
    /// The spelling on the command line (`--format`).
    pub fn key(self) -> &'static str {
        match self {
            ExportFormat::Python => "python",
            ExportFormat::Axolotl => "axolotl",
            ExportFormat::Torchtune => "torchtune",
            ExportFormat::Deepspeed => "deepspeed",
        }
    }
    /// Parses the command-line spelling.
    pub fn from_key(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|f| f.key() == s)
    }
    /// The accepted spellings, for messages.
    pub fn accepted() -> String {
        Self::ALL
            .iter()
            .map(|f| f.key())
            .collect::<Vec<_>>()
            .join(", ")
    }
    /// A label for the page.
    pub fn label(self) -> &'static str {
        match self {
            ExportFormat::Python => "Python script (HF)",
            ExportFormat::Axolotl => "axolotl YAML",
            ExportFormat::Torchtune => "torchtune override",
            ExportFormat::Deepspeed => "DeepSpeed JSON",
        }
    }
    /// A file name for the export.
    pub fn file_name(self) -> &'static str {
        match self {
            ExportFormat::Python => "peakplan_check.py",
            ExportFormat::Axolotl => "axolotl.yaml",
            ExportFormat::Torchtune => "torchtune_override.yaml",
            ExportFormat::Deepspeed => "ds_config.json",
        }
    }
}

/// Writes the plan for `arch` in a training stack's own format.
///
/// When `arch` is a bundled preset other than `plan.model` (a `config.json` of a bundled model), the export names
/// that preset, so that its plan line imports back to the same model.
#[inline(never)]
pub fn export(plan: &Plan, arch: &Architecture, format: ExportFormat) -> String {
    let mut p = plan.clone();
    if let Some(m) = preset_of(plan, arch) {
        if m.id != p.model {
            p.model = m.id.to_string();
        }
    }
    match format {
        ExportFormat::Python => python::script(&p, arch),
        ExportFormat::Axolotl => export::axolotl(&p, arch),
        ExportFormat::Torchtune => export::torchtune(&p, arch),
        ExportFormat::Deepspeed => export::deepspeed(&p),
    }
}

/// The bundled preset `arch` is, when it is one (compared field by field, the display name aside).
pub(crate) fn preset_of(plan: &Plan, arch: &Architecture) -> Option<&'static presets::ModelPreset> {
    let same = |a: &Architecture| {
        let mut b = a.clone();
        b.name.clone_from(&arch.name);
        &b == arch
    };
    presets::model(&plan.model)
        .filter(|m| presets::model_arch(m.id).is_some_and(same))
        .or_else(|| {
            table(presets::MODELS)
                .iter()
                .find(|m| presets::model_arch(m.id).is_some_and(same))
        })
}

/// A static table, hidden from the optimizer. peakplan-core is built at opt-level 3, which unrolls a search over a
/// short constant table into one inlined comparison per entry; through this it stays one small loop.
pub(crate) fn table<T>(t: &'static [T]) -> &'static [T] {
    std::hint::black_box(t)
}

/// The Hugging Face repository id of a preset, when its weights are published.
pub(crate) fn hf_repo(m: &presets::ModelPreset) -> Option<&'static str> {
    (m.hf_id.contains('/') && !m.hf_id.starts_with('(')).then_some(m.hf_id)
}

/// The families of module names in Hugging Face `transformers` implementations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Llama, Mistral, Qwen2, Gemma: `q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`.
    Llama,
    /// Mixtral: attention as Llama, experts `w1` (gate), `w3` (up), `w2` (down).
    Mixtral,
    /// Phi-2: `q_proj`, `k_proj`, `v_proj`, `dense`, `fc1`, `fc2`.
    Phi,
    /// Phi-3: `qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`.
    Phi3,
    /// GPT-NeoX and Falcon: `query_key_value`, `dense`, `dense_h_to_4h`, `dense_4h_to_h`.
    NeoX,
    /// GPT-2 and GPT-BigCode: `c_attn`, `attn.c_proj`, `c_fc`, `mlp.c_proj`.
    Gpt2,
}

/// PEFT kinds that torchtune configs cannot state: a `lora` adapter there is consistent with each, and the
/// peakplan line says which.
pub(crate) const PEFT_WITHOUT_KEY: &[&str] = &[
    "rslora", "lorafa", "ia3", "vera", "loha", "oft", "ln", "prompt", "prefix",
];

/// The PEFT kinds axolotl configs cannot state: torchtune's less rsLoRA, which axolotl has a key for.
pub(crate) fn axolotl_peft_without_key() -> &'static [&'static str] {
    &PEFT_WITHOUT_KEY[1..]
}

pub(crate) fn family(arch: &Architecture) -> Family {
    match arch.model_type.as_str() {
        "mixtral" => Family::Mixtral,
        "phi" => Family::Phi,
        "phi3" => Family::Phi3,
        "gpt_neox" | "falcon" | "RefinedWebModel" | "RefinedWeb" | "bloom" => Family::NeoX,
        "gpt2" | "gpt3" | "gpt_bigcode" => Family::Gpt2,
        _ if arch.fused_qkv && arch.mlp == Mlp::GatedFused => Family::Phi3,
        _ => Family::Llama,
    }
}

/// The module names a LoRA target selects in a Hugging Face model of this family (empty when none).
pub(crate) fn hf_modules(f: Family, t: Target) -> &'static [&'static str] {
    use Family::*;
    match (f, t) {
        (_, Target::LmHead) => &["lm_head"],
        (Llama | Mixtral | Phi, Target::Q) => &["q_proj"],
        (Llama | Mixtral | Phi, Target::K) => &["k_proj"],
        (Llama | Mixtral | Phi, Target::V) => &["v_proj"],
        (Llama | Mixtral | Phi3, Target::O) => &["o_proj"],
        (Llama, Target::Gate) => &["gate_proj"],
        (Llama, Target::Up) => &["up_proj"],
        (Llama | Phi3, Target::Down) => &["down_proj"],
        (Mixtral, Target::Gate) => &["w1"],
        (Mixtral, Target::Up) => &["w3"],
        (Mixtral, Target::Down) => &["w2"],
        (Phi | NeoX, Target::O) => &["dense"],
        (Phi, Target::Up) => &["fc1"],
        (Phi, Target::Down) => &["fc2"],
        (Phi3, Target::Q | Target::K | Target::V) => &["qkv_proj"],
        (Phi3, Target::Gate | Target::Up) => &["gate_up_proj"],
        (NeoX, Target::Q | Target::K | Target::V) => &["query_key_value"],
        (NeoX, Target::Up) => &["dense_h_to_4h"],
        (NeoX, Target::Down) => &["dense_4h_to_h"],
        (Gpt2, Target::Q | Target::K | Target::V) => &["c_attn"],
        (Gpt2, Target::O) => &["attn.c_proj"],
        (Gpt2, Target::Up) => &["c_fc"],
        (Gpt2, Target::Down) => &["mlp.c_proj"],
        // Plain MLPs have no gate projection.
        (Phi | NeoX | Gpt2, Target::Gate) => &[],
    }
}

/// The module names of a target set, deduplicated, in forward order; `None` for PEFT's `all-linear`.
pub(crate) fn target_module_names(
    arch: &Architecture,
    targets: Targets,
) -> Option<Vec<&'static str>> {
    (targets != Targets::ALL_LINEAR).then(|| module_names(arch, targets))
}

/// The module names of a target set, deduplicated, in forward order.
pub(crate) fn module_names(arch: &Architecture, targets: Targets) -> Vec<&'static str> {
    let f = family(arch);
    let head = [embedding_modules(arch)[1]];
    let mut out: Vec<&'static str> = Vec::new();
    for t in Target::ALL {
        if targets.contains(t) {
            let names = if t == Target::LmHead {
                &head[..]
            } else {
                hf_modules(f, t)
            };
            for m in names {
                if !out.contains(m) {
                    out.push(m);
                }
            }
        }
    }
    out
}

/// The target keys a module name selects, in any family (bit set of [`Target::bit`]); 0 when unknown.
pub(crate) fn module_targets(name: &str) -> u8 {
    // PEFT matches a name as a suffix of the module path; only the last segments matter.
    let name = name.trim();
    let last = name.rsplit('.').next().unwrap_or(name);
    match name {
        "attn.c_proj" => return Target::O.bit(),
        "mlp.c_proj" => return Target::Down.bit(),
        _ => {}
    }
    table(MODULE_TARGETS)
        .iter()
        .find(|(n, _)| *n == last)
        .map_or(0, |(_, bits)| *bits)
}

/// Module names (the last segment of a module path) and the targets they select, as [`Target::bit`] sets.
const MODULE_TARGETS: &[(&str, u8)] = {
    const Q: u8 = 1;
    const K: u8 = 1 << 1;
    const V: u8 = 1 << 2;
    const O: u8 = 1 << 3;
    const GATE: u8 = 1 << 4;
    const UP: u8 = 1 << 5;
    const DOWN: u8 = 1 << 6;
    const LM_HEAD: u8 = 1 << 7;
    &[
        ("q_proj", Q),
        ("q", Q),
        ("query", Q),
        ("k_proj", K),
        ("k", K),
        ("key", K),
        ("v_proj", V),
        ("v", V),
        ("value", V),
        ("o_proj", O),
        ("o", O),
        ("out_proj", O),
        ("output_proj", O),
        ("dense", O),
        ("gate_proj", GATE),
        ("gate", GATE),
        ("w1", GATE),
        ("up_proj", UP),
        ("up", UP),
        ("w3", UP),
        ("fc1", UP),
        ("dense_h_to_4h", UP),
        ("c_fc", UP),
        ("down_proj", DOWN),
        ("down", DOWN),
        ("w2", DOWN),
        ("fc2", DOWN),
        ("dense_4h_to_h", DOWN),
        ("qkv_proj", Q | K | V),
        ("query_key_value", Q | K | V),
        ("c_attn", Q | K | V),
        ("Wqkv", Q | K | V),
        ("gate_up_proj", GATE | UP),
        ("c_proj", O | DOWN),
        ("lm_head", LM_HEAD),
        ("embed_out", LM_HEAD),
        ("output", LM_HEAD),
    ]
};

/// Every target set that is consistent with a list of selected groups (each group a bit set that at least one
/// of its targets must be in, as a fused module like `qkv_proj` is selected by any of q, k, v).
pub(crate) fn consistent_targets(groups: &[u8]) -> Vec<Targets> {
    let union = groups.iter().fold(0u8, |a, g| a | g);
    (1..=u8::MAX)
        .filter(|t| t & !union == 0 && groups.iter().all(|g| t & g != 0))
        .map(Targets)
        .collect()
}

/// Formats a byte count as GiB with two decimals, for comments.
pub(crate) fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A number as text (one out-of-line instance for every export).
#[inline(never)]
pub(crate) fn num(n: u64) -> String {
    n.to_string()
}

/// The plain-language name of a method, for headers.
pub(crate) fn method_label(m: crate::plan::Method) -> &'static str {
    match m {
        crate::plan::Method::Full => "full fine-tuning",
        crate::plan::Method::Lora => "LoRA",
        crate::plan::Method::Qlora => "QLoRA",
    }
}

/// A template (the exports are data, see the `*.tmpl` files next to this module) and the names it is filled by.
///
/// `{{name}}` is replaced by the value of `name`; a flag's value is written as `bools[0]` (true) or `bools[1]`
/// (false). A line holding only `{{#name}}` (or `{{^name}}`) opens a section that is kept when the flag is true or
/// the value non-empty (false, empty), up to the matching `{{/name}}` line; sections nest, and the tag lines
/// themselves are not written. A value is written as is, never re-read. Filled through [`fill!`], which keeps
/// each name next to its value.
pub(crate) struct Template {
    pub(crate) text: &'static str,
    /// How the template's language spells true and false.
    pub(crate) bools: [&'static str; 2],
    /// The names of the text values.
    pub(crate) values: &'static [&'static str],
    /// The names of the flags.
    pub(crate) flags: &'static [&'static str],
}

pub(crate) const PY_BOOLS: [&str; 2] = ["True", "False"];
pub(crate) const YAML_BOOLS: [&str; 2] = ["true", "false"];

/// Fills `t` with `values` and `flags` (in the order of `t.values` and `t.flags`).
#[inline(never)]
pub(crate) fn render(t: &Template, values: &[&str], flags: &[bool]) -> String {
    debug_assert_eq!(t.values.len(), values.len());
    debug_assert_eq!(t.flags.len(), flags.len());
    let mut out = String::with_capacity(t.text.len() + 1024);
    let mut depth = 0usize;
    // The depth of the outermost section being left out, or 0 when everything is written.
    let mut hidden = 0usize;
    for line in t.text.split_inclusive('\n') {
        let b = line.as_bytes();
        let body = line.strip_suffix('\n').unwrap_or(line);
        if let Some(tag) = body.strip_prefix("{{").and_then(|t| t.strip_suffix("}}")) {
            let name = tag.get(1..).unwrap_or("");
            match tag.as_bytes().first() {
                Some(c @ (b'#' | b'^')) => {
                    depth += 1;
                    if hidden == 0 && lookup(t, values, flags, name).1 != (*c == b'#') {
                        hidden = depth;
                    }
                    continue;
                }
                Some(b'/') => {
                    if hidden == depth {
                        hidden = 0;
                    }
                    depth = depth.saturating_sub(1);
                    continue;
                }
                _ => {}
            }
        }
        if hidden != 0 {
            continue;
        }
        // `{{name}}` placeholders; the rest of the line is copied as is.
        let mut copied = 0;
        let mut i = 0;
        while i + 1 < b.len() {
            if b[i] == b'{' && b[i + 1] == b'{' {
                if let Some(j) =
                    (i + 2..b.len().saturating_sub(1)).find(|&j| b[j] == b'}' && b[j + 1] == b'}')
                {
                    out.push_str(&line[copied..i]);
                    out.push_str(lookup(t, values, flags, &line[i + 2..j]).0);
                    i = j + 2;
                    copied = i;
                    continue;
                }
            }
            i += 1;
        }
        out.push_str(&line[copied..]);
    }
    out
}

/// The text of a name in a template, and whether it counts as set for a section (a true flag, a non-empty value).
#[inline(never)]
fn lookup<'a>(t: &Template, values: &[&'a str], flags: &[bool], name: &str) -> (&'a str, bool) {
    if let Some(i) = t.flags.iter().position(|k| *k == name) {
        let on = flags.get(i).copied().unwrap_or(false);
        return (t.bools[usize::from(!on)], on);
    }
    match t.values.iter().position(|k| *k == name) {
        Some(i) => {
            let v = values.get(i).copied().unwrap_or("");
            (v, !v.is_empty())
        }
        None => {
            debug_assert!(false, "template variable `{name}` not given");
            ("", false)
        }
    }
}

/// `fill!(TEXT, BOOLS; "name" => value, ...; "flag" => condition, ...)`: [`render`] with the names in a static
/// [`Template`] and only the values and flags built at run time.
macro_rules! fill {
    ($text:expr, $bools:expr;
     $($name:literal => $value:expr),* $(,)?;
     $($flag:literal => $on:expr),* $(,)?) => {
        $crate::interop::render(
            &$crate::interop::Template {
                text: $text,
                bools: $bools,
                values: &[$($name),*],
                flags: &[$($flag),*],
            },
            &[$($value),*],
            &[$($on),*],
        )
    };
}
pub(crate) use fill;

/// The input embedding's and the LM head's module names in a Hugging Face model of this architecture.
pub(crate) fn embedding_modules(arch: &Architecture) -> [&'static str; 2] {
    match arch.model_type.as_str() {
        "gpt_neox" => ["embed_in", "embed_out"],
        "falcon" | "RefinedWebModel" | "RefinedWeb" | "bloom" => ["word_embeddings", "lm_head"],
        "gpt2" | "gpt3" | "gpt_bigcode" => ["wte", "lm_head"],
        _ => ["embed_tokens", "lm_head"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_target_bits_follow_target_order() {
        for (t, name) in [
            (Target::Q, "q_proj"),
            (Target::K, "k_proj"),
            (Target::V, "v_proj"),
            (Target::O, "o_proj"),
            (Target::Gate, "gate_proj"),
            (Target::Up, "up_proj"),
            (Target::Down, "down_proj"),
            (Target::LmHead, "lm_head"),
        ] {
            assert_eq!(module_targets(name), t.bit(), "{name}");
        }
        assert_eq!(module_targets("model.layers.0.self_attn.qkv_proj"), 0b111);
        assert_eq!(module_targets("attn.c_proj"), Target::O.bit());
        assert_eq!(module_targets("unknown"), 0);
    }

    #[test]
    fn templates_fill_values_flags_and_sections() {
        let t = Template {
            text: "a {{x}} {{f}}\n{{#f}}\nshown {{x}}\n{{^g}}\nnested\n{{/g}}\n{{/f}}\n{{#x}}\nx set\n{{/x}}\n{{#g}}\nhidden\n{{#f}}\nalso hidden\n{{/f}}\n{{/g}}\n{{y}}{{ unclosed\n",
            bools: PY_BOOLS,
            values: &["x", "y"],
            flags: &["f", "g"],
        };
        assert_eq!(
            render(&t, &["1", ""], &[true, false]),
            "a 1 True\nshown 1\nnested\nx set\n{{ unclosed\n"
        );
        assert_eq!(
            render(&t, &["", "y"], &[false, false]),
            "a  False\ny{{ unclosed\n"
        );
    }
}
