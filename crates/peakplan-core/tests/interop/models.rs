//! The Python export builds the planned model for every preset and every importable `model_type`: the config it
//! writes names the type, layers and positions, and imports back to the same architecture.

use crate::py_compile;
use peakplan_core::interop::{export, ExportFormat};
use peakplan_core::model_type::ModelType;
use peakplan_core::plan::Plan;
use peakplan_core::{import_config, Architecture, ModelId};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// An architecture to export, and the preset its plan names.
struct Sample {
    name: String,
    model: &'static str,
    arch: Architecture,
}

/// Every architecture to export: the presets, the bundled model configs, and one config of each type no preset
/// has (`tests/data/model_types/`).
fn samples() -> Vec<Sample> {
    let mut out: Vec<Sample> = ModelId::all()
        .map(|m| Sample {
            name: m.id().to_string(),
            model: m.id(),
            arch: m.arch().clone(),
        })
        .collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for dir in ["models", "model_types"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json") && !p.ends_with("gpus.json"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let arch = import_config(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let name = format!("{dir}/{}", f.file_name().unwrap().to_string_lossy());
            // Plans of an imported config name the default model, which the config replaces.
            out.push(Sample {
                name,
                model: ModelId::DEFAULT.id(),
                arch,
            });
        }
    }
    out
}

/// The longest sequence the model can take: its learned positions, else a long one.
fn seq_len(arch: &Architecture) -> u64 {
    if arch.learned_positions > 0 {
        arch.learned_positions.min(8192)
    } else {
        8192
    }
}

fn script(sample: &Sample) -> (u64, String) {
    let s = seq_len(&sample.arch);
    let q = format!(
        "model={}&method=lora&targets=all-linear&s={s}",
        sample.model
    );
    (
        s,
        export(
            &Plan::parse_query(&q).plan,
            &sample.arch,
            ExportFormat::Python,
        ),
    )
}

/// The script's `MODEL_TYPE` and `MODEL_CONFIG`, the latter as JSON.
fn model_of(name: &str, src: &str) -> (String, Map<String, Value>) {
    let model_type = src
        .lines()
        .find_map(|l| l.strip_prefix("MODEL_TYPE = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{name}: no MODEL_TYPE"))
        .to_string();
    let start = src
        .find("MODEL_CONFIG = {\n")
        .unwrap_or_else(|| panic!("{name}: no MODEL_CONFIG"));
    let body = &src[start + "MODEL_CONFIG = ".len()..];
    let body = &body[..body.find("\n}\n").unwrap() + 2];
    // The dict is a Python literal of JSON strings and numbers: only its constants and trailing commas differ.
    let lines: Vec<&str> = body.lines().collect();
    let json = lines
        .iter()
        .enumerate()
        .map(|(i, l)| match lines.get(i + 1) {
            Some(next) if next.trim_start().starts_with('}') => l.trim_end_matches(','),
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace(": True", ": true")
        .replace(": False", ": false")
        .replace(": None", ": null");
    let Value::Object(map) =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}: {e}\n{json}"))
    else {
        panic!("{name}: MODEL_CONFIG is not a dict");
    };
    (model_type, map)
}

/// A size field of the config (or of its `text_config`).
fn size(config: &Map<String, Value>, keys: &[&str]) -> Option<u64> {
    let text = config
        .get("text_config")
        .and_then(Value::as_object)
        .unwrap_or(config);
    keys.iter()
        .find_map(|k| text.get(*k).and_then(Value::as_u64))
}

/// Every preset and every importable type: the script builds that type (or the built-in equivalent it names), with
/// the architecture's layers and positions for the plan's sequence, and its config imports back to the same
/// architecture, parameter for parameter.
#[test]
fn python_export_builds_every_model_it_plans() {
    let samples = samples();
    for t in ModelType::ALL {
        assert!(
            samples.iter().any(|x| ModelType::of(&x.arch) == t),
            "no sample config of model_type {}: add one to tests/data/model_types/",
            t.key()
        );
    }
    for sample in &samples {
        let (name, arch) = (&sample.name, &sample.arch);
        let (s, src) = script(sample);
        let (built, config) = model_of(name, &src);
        let t = ModelType::of(arch);
        let want_type = match t {
            ModelType::Gpt3 => "gpt2",
            ModelType::Qwen => "qwen2",
            ModelType::RefinedWeb | ModelType::RefinedWebModel => "falcon",
            _ => t.key(),
        };
        assert_eq!(built, want_type, "{name}: MODEL_TYPE");
        let layers = size(&config, &["num_hidden_layers", "n_layer"]);
        assert_eq!(layers, Some(arch.layers), "{name}: layers");
        let positions = size(&config, &["max_position_embeddings", "n_positions"]);
        if t != ModelType::Bloom {
            // BLOOM's ALiBi has no positions to state.
            assert!(
                positions.is_some_and(|p| p >= s),
                "{name}: {positions:?} positions for s={s}"
            );
        }

        // transformers refuses SDPA for attention sinks: the script asks for what it runs, and predicts that.
        let attn = if arch.attn_sinks { "eager" } else { "sdpa" };
        assert!(
            src.contains(&format!("ATTN_IMPLEMENTATION = \"{attn}\"")),
            "{name}: attention"
        );

        let mut config = config;
        config.insert("model_type".into(), Value::String(built.clone()));
        let back = import_config(&Value::Object(config).to_string())
            .unwrap_or_else(|e| panic!("{name}: the exported config does not import: {e}"));
        let mut want = arch.clone();
        want.name = back.name.clone();
        want.model_type = built;
        if t == ModelType::Qwen {
            // Qwen2 has q, k and v as three projections where Qwen (v1) fuses them.
            want.fused_qkv = false;
        }
        assert_eq!(
            back, want,
            "{name}: the exported config imports to another architecture"
        );
        assert_eq!(
            back.total_params(),
            arch.total_params(),
            "{name}: parameters"
        );
    }
}

/// Every one of those scripts is valid Python (when python3 is there).
#[test]
fn python_exports_of_every_model_compile() {
    let scripts: Vec<String> = samples().iter().map(|x| script(x).1).collect();
    py_compile(&scripts);
}

/// Runs the exported script's model, adapter and data for its three steps on the CPU: what the script does
/// but for the CUDA measurement (which needs a GPU).
const CPU_RUN: &str = r#"
import importlib.util, sys, tempfile
import torch
from peft import get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

spec = importlib.util.spec_from_file_location("peakplan_check", sys.argv[1])
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
config = AutoConfig.for_model(check.MODEL_TYPE, **check.MODEL_CONFIG)
model = AutoModelForCausalLM.from_config(
    config, attn_implementation=check.ATTN_IMPLEMENTATION, **check.dtype_kwargs(check.MODEL_DTYPE)
)
print("params", sum(p.numel() for p in model.parameters()))
model = get_peft_model(model, check.LORA)
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(), max_steps=check.STEPS, per_device_train_batch_size=check.MICRO_BATCH,
    use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, dataloader_num_workers=0,
    remove_unused_columns=False,
)
data = check.RandomTokens(config.get_text_config().vocab_size, check.STEPS * check.MICRO_BATCH)
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
print("steps", trainer.state.global_step)
"#;

/// Where torch, transformers and PEFT are installed, a tiny model's script builds the planned parameter count and
/// trains its three steps (on the CPU).
#[test]
fn python_export_of_a_tiny_model_runs_on_cpu() {
    let ready = Command::new("python3")
        .args(["-c", "import torch, transformers, peft"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        println!("note: torch, transformers or peft is absent; the tiny model's script is not run");
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/model_types/tiny-llama.json");
    let arch = import_config(&std::fs::read_to_string(path).unwrap()).unwrap();
    let q = "model=llama-2-7b&method=lora&targets=all-linear&r=4&b=2&s=32&prec=fp32&gc=0&opt=adamw_torch";
    let src = export(&Plan::parse_query(q).plan, &arch, ExportFormat::Python);
    let dir = std::env::temp_dir().join(format!("peakplan-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("peakplan_check.py");
    std::fs::write(&file, src).unwrap();
    let out = Command::new("python3")
        .args(["-c", CPU_RUN])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the tiny model's script fails on CPU:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("params {}\n", arch.total_params())),
        "{stdout}"
    );
    assert!(stdout.contains("steps 3\n"), "{stdout}");
}
