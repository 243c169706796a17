//! Interoperation with training stacks: export a plan as a runnable script or config, import configs into a plan.
//!
//! Pure string work, no I/O: [`export`] writes a transformers + PEFT + bitsandbytes script, an axolotl YAML,
//! a torchtune config override or a DeepSpeed JSON for a plan; [`import`] reads PEFT `adapter_config.json`,
//! bitsandbytes `quantization_config` (alone or inside a `config.json`), `TrainingArguments` JSON, accelerate's config
//! YAML, axolotl YAML, DeepSpeed JSON and torchtune configs back into a [`Plan`], listing every field it does not
//! model instead of dropping it.
//!
//! This code ships in the web page, and peakplan-core is built at opt-level 3 (for the engine), which inlines and
//! unrolls freely. So the module is written for size: the exported texts are data (`*.tmpl` templates filled by
//! one `render`), the importer reads fields through a few non-generic, out-of-line helpers (`#[inline(never)]`),
//! messages are written with `format_args!` straight into their line, and searches over constant tables go
//! through `table` so that they stay loops.
//!
//! One module per format, each reading and writing its own keys: `peft.rs` (`adapter_config.json`, and the
//! adapter of the Python script), `bnb.rs` (`quantization_config`, bitsandbytes or GPTQ), `hf_config.rs` (a
//! model's `config.json`), `training_args.rs`, `deepspeed.rs`, `accelerate.rs` (import only), `axolotl.rs`,
//! `torchtune.rs` and `python.rs` (the script), and `trl.rs` (TRL's preference configs and axolotl's `rl:`, import
//! only); `sharding.rs` holds what several of them share about the sharding
//! keys (the launch a plan resolves to, the `fsdp_config` reader). The importer's driver (`import.rs`: format detection, the plan line, merging) and the shared field
//! reader (`fields.rs`) are apart, and so are the tables both directions read: module names (`names.rs`) and the
//! templates (`template.rs`). No format module uses another's code of the other direction.

mod accelerate;
mod axolotl;
mod bnb;
mod deepspeed;
mod fields;
mod grpo;
mod hf_config;
mod import;
mod names;
mod peft;
mod py;
mod python;
mod sharding;
mod template;
mod torchtune;
mod training_args;
mod trl;
mod unsloth;
pub mod yaml;

pub use import::{import, import_over, ImportError, Imported, MAX_IMPORT_BYTES};
pub(crate) use names::module_targets;

use crate::arch::Architecture;
use crate::engine::estimate;
use crate::plan::{Alloc, Plan};
use crate::presets::{self, ModelId};
use crate::units::method_in_words;
use template::{vars, Vars};
use yaml::scalar_text;

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
            ExportFormat::Python => "Python script",
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
/// that preset, so that its plan line imports back to the same model; a Hub model is named by its id.
#[inline(never)]
/// Why `format` cannot export `plan`, where it cannot: the caller says so instead of calling [`export`], which
/// would write the plan's supervised twin. A GRPO plan's runnable script and DeepSpeed config are written; its
/// axolotl and torchtune configs are not yet.
pub fn export_refused(plan: &Plan, format: ExportFormat) -> Option<String> {
    use crate::plan::Task;
    match (plan.task, format) {
        (Task::Grpo, ExportFormat::Axolotl | ExportFormat::Torchtune) => Some(format!(
            "a GRPO plan (task=grpo) cannot be exported as {} yet: export it as a Python script (TRL's GRPOTrainer)",
            format.label()
        )),
        // axolotl's `rl:` names DPO, IPO, KTO, ORPO and SimPO; CPO has no value of its own.
        (Task::Cpo, ExportFormat::Axolotl) => Some(
            "a CPO plan (task=cpo) cannot be exported as an axolotl config: its rl key has no cpo (rl: simpo with \
             cpo_alpha runs CPO-SimPO); export it as a Python script (TRL's CPOTrainer)"
                .to_string(),
        ),
        _ => None,
    }
}

pub fn export(plan: &Plan, arch: &Architecture, format: ExportFormat) -> String {
    let mut p = plan.clone();
    if let Some(m) = preset_of(plan, arch) {
        p.model = m;
    }
    match format {
        ExportFormat::Python
            if crate::profile::Profile::of(p.framework).python_export_runs
                == crate::plan::Framework::Unsloth =>
        {
            unsloth::script(&p, arch)
        }
        ExportFormat::Python => python::script(&p, arch),
        ExportFormat::Axolotl => axolotl::export(&p, arch),
        ExportFormat::Torchtune => torchtune::export(&p, arch),
        ExportFormat::Deepspeed => deepspeed::export(&p),
    }
}

/// The bundled preset `arch` is, when it is one (compared field by field, the display name aside); none for a Hub
/// model, which its id names whatever its shape.
pub(crate) fn preset_of(plan: &Plan, arch: &Architecture) -> Option<ModelId> {
    if plan.hub.is_some() {
        return None;
    }
    let same = |m: &ModelId| {
        let mut b = m.arch().clone();
        b.name.clone_from(&arch.name);
        &b == arch
    };
    Some(plan.model)
        .filter(same)
        .or_else(|| ModelId::all().find(same))
}

/// A static table, hidden from the optimizer. peakplan-core is built at opt-level 3, which unrolls a search over a
/// short constant table into one inlined comparison per entry; through this it stays one small loop.
pub(crate) fn table<T>(t: &'static [T]) -> &'static [T] {
    std::hint::black_box(t)
}

/// The Hugging Face repository the plan's model loads from: its Hub id's, else its preset's published weights.
pub(crate) fn model_repo(plan: &Plan, arch: &Architecture) -> Option<String> {
    match &plan.hub {
        Some(id) => Some(id.repo()),
        None => preset_of(plan, arch)
            .map(ModelId::preset)
            .and_then(hf_repo)
            .map(str::to_string),
    }
}

/// The Hugging Face repository id of a preset, when its weights are published.
pub(crate) fn hf_repo(m: &presets::ModelPreset) -> Option<&'static str> {
    (m.hf_id.contains('/') && !m.hf_id.starts_with('(')).then_some(m.hf_id)
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

/// `0.05`, `0`: the shortest decimal that reads back as the same float.
#[inline(never)]
pub(crate) fn float_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

/// The header both YAML exports open with: model label, method, shape and GPUs, the plan line, the figures, and
/// whether the model is a custom config.
pub(crate) fn yaml_header(plan: &Plan, arch: &Architecture) -> Vars<'static> {
    let preset = preset_of(plan, arch).map(ModelId::preset);
    let label = match (preset, &plan.hub) {
        (Some(m), _) => m.name.to_string(),
        (None, Some(id)) => id.to_string(),
        (None, None) => {
            let mut l = String::from("a ");
            l.push_str(&arch.model_type);
            l.push_str(" model from its config.json");
            l
        }
    };
    let e = estimate(arch, plan);
    vars!(
        "model_label" => label,
        "method" => method_in_words(plan.method),
        "b" => num(plan.micro_batch),
        "ga" => num(plan.grad_accumulation),
        "s" => num(plan.seq_len),
        "gpus" => num(plan.gpus),
        "plural" => if plan.gpus == 1 { "" } else { "s" },
        "query" => plan.to_query(),
        "model_type" => arch.model_type.clone(),
        "allocated" => gib(e.peak_allocated_bytes),
        "reserved" => gib(e.peak_reserved_bytes),
        "device" => gib(e.device_bytes),
        "pref_task" => plan.task.key(),
        "pref_prompt" => num(plan.prompt_tokens()),
        "pref_ref" => plan.reference_source().key(),
        "alloc_conf" => alloc_conf(plan, false),
        ;
        "pref" => plan.task != crate::plan::Task::Sft,
        "pref_simpo" => plan.task == crate::plan::Task::Simpo,
        "custom" => preset.is_none(),
        // Data-parallel processes, one per GPU; a layer split runs one process over all of them.
        "multi" => plan.gpus > 1 && !plan.split_layers,
        "split" => plan.gpus > 1 && plan.split_layers,
    )
}

/// `PYTORCH_CUDA_ALLOC_CONF` as the plan sets it, empty for PyTorch's defaults. `expandable_off` writes
/// `expandable_segments:False` for a warm cache, where the framework would otherwise turn them on (Unsloth).
pub(crate) fn alloc_conf(plan: &Plan, expandable_off: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    match plan.allocator {
        Alloc::Expandable => parts.push("expandable_segments:True".into()),
        Alloc::Cached if expandable_off => parts.push("expandable_segments:False".into()),
        _ => {}
    }
    if let Some(mb) = plan.max_split_mb {
        parts.push(format!("max_split_size_mb:{mb}"));
    }
    parts.join(",")
}

/// `\n  - name` for each name (a YAML list under the key written before it).
pub(crate) fn yaml_items(out: &mut String, pad: &str, names: &[&str]) {
    for n in names {
        out.push('\n');
        out.push_str(pad);
        out.push_str("- ");
        out.push_str(&scalar_text(n));
    }
}
