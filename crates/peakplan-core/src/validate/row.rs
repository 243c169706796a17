//! One CSV row to a plan: each group of columns (outcome, method, precision, quantization, optimizer, activations,
//! parallelism, framework habits) sets its part of the plan, or says why the row cannot be expressed.

use super::csv::Rec;
use super::{source_label, Case, Metric, Outcome};
use crate::arch::{Architecture, Target};
use crate::hf::import_config;
use crate::plan::{
    Alloc, Attn, Checkpointing, DType, Framework, Lens, Loss, Method, Optimizer, Overlong, Peft,
    Plan, Precision, Quant, Shard, Targets, Wrap,
};
use crate::presets::{GpuId, ModelId};
use serde_json::json;

/// Dimensions of models that some rows name without giving their shapes (from their public `config.json`).
fn known_config(model: &str) -> Option<serde_json::Value> {
    let m = model.to_lowercase();
    let llama = |h: u64, l: u64, i: u64, a: u64, kv: u64, v: u64| {
        json!({"model_type": "llama", "hidden_size": h, "num_hidden_layers": l, "intermediate_size": i,
               "num_attention_heads": a, "num_key_value_heads": kv, "vocab_size": v})
    };
    let qwen = |h: u64, l: u64, i: u64, a: u64, v: u64| {
        json!({"model_type": "qwen", "hidden_size": h, "num_hidden_layers": l, "intermediate_size": i,
               "num_attention_heads": a, "vocab_size": v})
    };
    Some(if m.starts_with("qwen-1_8b") {
        qwen(2048, 24, 11008, 16, 151936)
    } else if m.starts_with("qwen-7b") {
        qwen(4096, 32, 22016, 32, 151936)
    } else if m.starts_with("qwen-14b") {
        qwen(5120, 40, 27392, 40, 152064)
    } else if m.starts_with("yi-34b") {
        llama(7168, 60, 20480, 56, 8, 64000)
    } else if m.starts_with("bloomz-7b1") || m.starts_with("bloom-7b1") {
        json!({"model_type": "bloom", "n_embed": 4096, "n_layer": 30, "n_head": 32, "vocab_size": 250880})
    } else if m.starts_with("llama-65b") {
        llama(8192, 80, 22016, 64, 64, 32000)
    } else {
        return None;
    })
}

fn arch_of(r: &Rec) -> Result<Architecture, String> {
    let family = r.lower("arch_family");
    let model_type = match family.split([' ', '(']).next().unwrap_or("") {
        "llama" | "llama-like" => "llama",
        "mistral" => "mistral",
        "gemma" => "gemma",
        "gemma2" => "gemma2",
        "gpt-neox" => "gpt_neox",
        "falcon" => "falcon",
        "phi" => "phi",
        "phi3" => "phi3",
        "qwen" => "qwen",
        "gpt-3" => "gpt3",
        "bloom" => "bloom",
        other => return Err(format!("architecture family `{other}` is not supported")),
    };
    let config = match (
        r.uint("n_layers"),
        r.uint("hidden_size"),
        r.uint("n_heads"),
        r.uint("vocab_size"),
    ) {
        (Some(layers), Some(hidden), Some(heads), Some(vocab)) => {
            let mut c = json!({
                "model_type": model_type,
                "num_hidden_layers": layers,
                "hidden_size": hidden,
                "num_attention_heads": heads,
                "vocab_size": vocab,
                "tie_word_embeddings": r.lower("tied_embeddings") == "true",
            });
            if let Some(i) = r.uint("intermediate_size") {
                c["intermediate_size"] = json!(i);
                c["ffn_hidden_size"] = json!(i);
            }
            if let Some(kv) = r.uint("n_kv_heads") {
                c["num_key_value_heads"] = json!(kv);
                if model_type == "falcon" {
                    c["multi_query"] = json!(kv == 1);
                }
            }
            if model_type.starts_with("gemma") {
                c["head_dim"] = json!(256);
            }
            c
        }
        _ => known_config(r.get("model"))
            .ok_or_else(|| format!("no shapes for model `{}`", r.get("model")))?,
    };
    import_config(&config.to_string()).map_err(|e| e.to_string())
}

fn targets_of(text: &str) -> Result<Targets, String> {
    let t = text.to_lowercase();
    if t.contains("all linear") || t.starts_with("all") || t.contains("all-linear") {
        return Ok(Targets::ALL_LINEAR);
    }
    let mut bits = 0u8;
    for part in t
        .split([',', ' ', '(', ')'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        // litgpt's switch names (lora_projection, lora_mlp, lora_head); every other name is a module name.
        bits |= match part {
            "proj" | "projection" => Target::O.bit(),
            "mlp" => Target::Gate.bit() | Target::Up.bit() | Target::Down.bit(),
            "head" => Target::LmHead.bit(),
            _ => crate::interop::module_targets(part),
        };
    }
    if bits == 0 {
        // Not stated: PEFT applies its default mapping, q and v for these model families.
        return Ok(Targets::QV);
    }
    Ok(Targets(bits))
}

/// Gradient accumulation steps named in a row's notes ("GA 16", "gradient accumulation 4",
/// "gradient_accumulation_steps=1"); `None` when none is named.
fn grad_accumulation_of(text: &str) -> Option<u64> {
    for key in [
        "ga ",
        "gradient accumulation ",
        "accumulation_steps=",
        "accumulation_steps ",
    ] {
        if let Some(at) = text.find(key) {
            let digits: String = text[at + key.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse::<u64>() {
                return Some(n.clamp(1, crate::plan::MAX_GRAD_ACCUMULATION));
            }
        }
    }
    None
}

/// `train.global_batch_size` of the litgpt config-hub files the benchmark rows cite, read from litgpt's
/// repository (`config_hub/finetune/<model>/<method>.yaml`; every one sets `devices: 1`). A row names its config
/// in `source_ref` and its micro-batch in its own column; litgpt accumulates
/// `global_batch_size / devices / micro_batch_size` micro-batches per optimizer step (`TrainArgs` in
/// `litgpt/args.py`), and between them full fine-tuning keeps the previous micro-batches' gradients.
const LITGPT_GLOBAL_BATCH: &[(&str, u64)] = &[
    ("falcon-7b/lora.yaml", 8),
    ("falcon-7b/qlora.yaml", 8),
    ("gemma-2b/lora.yaml", 6),
    ("gemma-2b/qlora.yaml", 6),
    ("gemma-7b/lora.yaml", 6),
    ("gemma-7b/qlora.yaml", 6),
    ("gemma2-2b/lora.yaml", 6),
    ("gemma2-2b/qlora.yaml", 6),
    ("gemma2-9b/lora.yaml", 6),
    ("gemma2-9b/qlora.yaml", 6),
    ("llama-2-7b/lora.yaml", 8),
    ("llama-2-7b/qlora.yaml", 8),
    ("llama-3-8b/lora.yaml", 8),
    ("llama-3-8b/qlora.yaml", 8),
    ("llama-3.1-8b/lora.yaml", 8),
    ("llama-3.1-8b/qlora.yaml", 8),
    ("llama-3.2-1b/lora.yaml", 8),
    ("llama-3.2-1b/qlora.yaml", 8),
    ("llama-3.2-3b/lora.yaml", 8),
    ("llama-3.2-3b/qlora.yaml", 8),
    ("mistral-7b/lora.yaml", 8),
    ("mistral-7b/qlora.yaml", 8),
    ("phi-2/lora.yaml", 8),
    ("phi-2/qlora.yaml", 8),
    ("phi-3/lora.yaml", 8),
    ("phi-3/qlora.yaml", 8),
    ("stablelm-base-alpha-3b/lora.yaml", 8),
    ("stablelm-base-alpha-3b/qlora.yaml", 8),
    ("tiny-llama/full.yaml", 32),
    ("tiny-llama/lora.yaml", 8),
    ("tiny-llama/qlora.yaml", 8),
];

/// Gradient accumulation of a litgpt config-hub run from the config its `source_ref` cites (lower-cased), on
/// `devices` GPUs; 1 when it cites none of them.
fn litgpt_config_accumulation(source_ref: &str, micro_batch: u64, devices: u64) -> u64 {
    const HUB: &str = "config_hub/finetune/";
    // The README is cited before the config: look the path up after every mention of the hub.
    let global = source_ref.match_indices(HUB).find_map(|(at, _)| {
        let cited = &source_ref[at + HUB.len()..];
        LITGPT_GLOBAL_BATCH
            .iter()
            .find(|(path, _)| cited.starts_with(path))
            .map(|&(_, global)| global)
    });
    global.map_or(1, |global| {
        (global / devices.max(1) / micro_batch.max(1)).clamp(1, crate::plan::MAX_GRAD_ACCUMULATION)
    })
}

/// The memory of one GPU named like "NVIDIA A100 80GB" (the number before "GB", in 10^9 bytes).
fn gpu_capacity_bytes(gpu: &str) -> Option<f64> {
    let upper = gpu.to_uppercase();
    let at = upper.find("GB")?;
    let digits: String = upper[..at]
        .trim_end()
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    let gb: f64 = digits.chars().rev().collect::<String>().parse().ok()?;
    Some(gb * 1e9)
}

/// The bundled GPU a row's `gpu` column names ("NVIDIA A10G (24 GB)", "2x RTX 3090", "8x A100 40GB SXM"): by
/// model where it names one, by memory where it names only that ("single 48GB GPU"), and an 80 GB A100 where it
/// names neither ("not stated"): the card most of the public runs used, and one on which a run that was measured
/// did not run out. A card named here that is not bundled skips the row with its id.
fn gpu_of(gpu: &str) -> Result<GpuId, String> {
    let id = gpu_preset_id(gpu);
    GpuId::parse(id).ok_or_else(|| format!("GPU preset `{id}` is not bundled"))
}

/// The id of the bundled GPU a row's `gpu` column names (see [`gpu_of`]).
fn gpu_preset_id(gpu: &str) -> &'static str {
    let upper = gpu.to_uppercase();
    let has = |s: &str| upper.contains(s);
    let forty = has("40GB") || has("40 GB");
    if has("H100") {
        "h100-80gb"
    } else if has("A100") && forty {
        "a100-40gb"
    } else if has("A100") {
        "a100-80gb"
    } else if has("A10G") {
        "a10g-24gb"
    } else if has("L40S") {
        "l40s-48gb"
    } else if has("T4") {
        "t4-16gb"
    } else if has("4090") {
        "rtx-4090"
    } else if has("3090") || has("A5000") {
        "rtx-3090"
    } else if has("A6000") || has("48GB") || has("48 GB") {
        "rtx-6000-ada"
    } else if has("24GB") || has("24 GB") {
        "rtx-4090"
    } else if forty {
        "a100-40gb"
    } else {
        "a100-80gb"
    }
}

/// Maps one row to a case, or says why it cannot be expressed.
///
/// The column groups are read in a fixed order, so a row with several problems is skipped for the first one.
pub(super) fn map_row(r: &Rec) -> Result<Case, String> {
    let id = r.get("id").to_string();
    let gpus = r.uint("num_gpus").unwrap_or(1).max(1);
    let outcome = outcome_of(r, gpus)?;
    let peft = peft_of(r);
    let method = method_of(r, peft)?;
    let arch = arch_of(r)?;
    let framework_text = r.lower("framework");
    let framework = framework_of(r, &framework_text);
    // The row's date stands in for the versions where the row does not name them.
    let date = r.get("source_date");
    let year_month = date
        .find("20")
        .and_then(|i| date.get(i..i + 7))
        .unwrap_or("");
    let run = Run {
        method,
        framework,
        framework_text,
        source_ref: r.lower("source_ref"),
        par: r.lower("parallelism"),
        features: r.lower("other_memory_features"),
        gpus,
        year_month,
        // A "fits" claim that names no batch (the QLoRA paper's 65B on one 48 GB GPU) says some run fits: it is
        // read at its least demanding, one sequence of 512 tokens with checkpointing.
        existence_claim: matches!(outcome, Outcome::Fits { fits: true, .. })
            && r.get("micro_batch_size").trim().is_empty(),
    };
    let preset = ModelId::all().find(|m| m.arch().total_params() == arch.total_params());
    let mut plan = Plan {
        model: preset.unwrap_or(ModelId::DEFAULT),
        ..Plan::default()
    };
    framework.apply_defaults(&mut plan);
    plan.method = method;
    plan.peft = peft;
    read_shape(r, &run, &arch, &mut plan)?;
    read_precision(r, &run, &mut plan)?;
    if method == Method::Qlora {
        read_quantization(r, &run, &mut plan)?;
    }
    read_optimizer(r, &run, &mut plan);
    read_activations(r, &run, &mut plan);
    read_parallelism(&run, &mut plan)?;
    apply_framework_habits(&run, &mut plan);
    // The card decides when the allocator must release its cache and retry (the engine's replay runs on it).
    plan.gpu = gpu_of(r.get("gpu"))?;
    Ok(Case {
        id,
        source: source_label(r.get("source")),
        gpus: super::Gpus::of_row(r.get("num_gpus"), r.get("parallelism")),
        arch,
        plan,
        outcome,
    })
}

/// What a row says about its run that several column groups read.
struct Run<'a> {
    method: Method,
    framework: Framework,
    /// The `framework` column lower-cased: besides the framework it names scripts and recipes.
    framework_text: String,
    source_ref: String,
    par: String,
    features: String,
    gpus: u64,
    /// `YYYY-MM` of the row's date, or empty.
    year_month: &'a str,
    existence_claim: bool,
}

/// What the row records: a peak in some metric, a fits/OOM outcome, or a stated bound.
fn outcome_of(r: &Rec, gpus: u64) -> Result<Outcome, String> {
    let kind = r.lower("value_kind");
    let outcome_row = kind == "oom_lower_bound" || kind == "fits_upper_bound";
    let bytes: f64 = match r.get("measured_bytes").trim().parse() {
        Ok(b) => b,
        // An outcome row may name only its GPU: its capacity is the bound.
        Err(_) if outcome_row => gpu_capacity_bytes(r.get("gpu")).ok_or("no measured bytes")?,
        Err(_) => return Err("no measured bytes".into()),
    };
    let metric_text = r.lower("metric");
    let outcome =
        match kind.as_str() {
            "measured_peak" => {
                let metric = if metric_text.contains("max_memory_allocated")
                    || metric_text.contains("active_bytes")
                    || metric_text.contains("memory allocated")
                {
                    Metric::Allocated
                } else if metric_text.contains("nvidia-smi")
                    || metric_text.contains("screenshot")
                    || metric_text.contains("gram")
                    || metric_text.contains("vram")
                {
                    Metric::Device
                } else {
                    Metric::Reserved
                };
                Outcome::Peak {
                    bytes: bytes as u64,
                    metric,
                }
            }
            // An outcome's value is the listed hardware's whole memory; the engine answers for one GPU.
            "oom_lower_bound" => Outcome::Fits {
                capacity_bytes: (bytes / gpus as f64) as u64,
                fits: false,
            },
            "fits_upper_bound" => Outcome::Fits {
                capacity_bytes: (bytes / gpus as f64) as u64,
                fits: true,
            },
            // The QLoRA paper's "more than 780 GB" for 16-bit full fine-tuning of 65B counts 12 B per parameter
            // (16-bit weights and gradients, fp32 Adam states); the row states neither the precision regime nor the
            // states' dtype, and the plausible ones need 8 or 16 B per parameter, so the claim decides nothing.
            "lower_bound_claim" => return Err(
                "a paper's lower bound with no precision regime or optimizer-state dtype stated"
                    .into(),
            ),
            // A stated bound: on allocated memory where the claim names it, else on the whole (aggregate) footprint.
            "upper_bound" => Outcome::AtMost {
                bytes: bytes as u64,
                metric: if metric_text.contains("allocated") {
                    Metric::Allocated
                } else {
                    Metric::Device
                },
            },
            other => return Err(format!("`{other}` is a round claim, not one run")),
        };
    Ok(outcome)
}

/// The PEFT variant named in `peft_detail` (or `method`); plain LoRA when none is.
fn peft_of(r: &Rec) -> Peft {
    let detail = r.lower("peft_detail");
    if detail.contains("dora") || r.lower("method") == "dora" {
        Peft::Dora
    } else if detail.contains("lora-fa") {
        Peft::Lorafa
    } else if detail.contains("rslora") {
        Peft::Rslora
    } else if detail.contains("ia3") {
        Peft::Ia3
    } else if detail.contains("vera") {
        Peft::Vera
    } else if detail.contains("loha") {
        Peft::Loha
    } else if detail.contains("oft") {
        Peft::Oft
    } else if detail.contains("layernorm tuning") {
        Peft::Ln
    } else if detail.contains("prompt tuning") {
        Peft::Prompt
    } else if detail.contains("prefix tuning") {
        Peft::Prefix
    } else {
        Peft::Lora
    }
}

fn method_of(r: &Rec, peft: Peft) -> Result<Method, String> {
    Ok(match r.lower("method").as_str() {
        "full" => Method::Full,
        "lora" | "dora" => Method::Lora,
        "other" if peft != Peft::Lora => Method::Lora,
        // LoRA over a quantized base (bitsandbytes 4-bit, LLM.int8 or GPTQ): the quantized-base method.
        "qlora" | "lora-int8" | "qlora-gptq" => Method::Qlora,
        "other" => {
            return Err(format!(
                "PEFT method `{}` is not modeled yet",
                r.get("peft_detail")
            ))
        }
        other => return Err(format!("method `{other}` is not modeled yet")),
    })
}

fn framework_of(r: &Rec, framework_text: &str) -> Framework {
    // Unsloth's own loader (its notebooks and benchmarks); LLaMA-Factory's `use_unsloth` rows run the
    // Trainer with Unsloth's loss kernel, read under the Trainer as before.
    if framework_text.contains("fastlanguagemodel") {
        Framework::Unsloth
    } else if framework_text.contains("litgpt") || framework_text.contains("lit-gpt") {
        Framework::Litgpt
    } else if framework_text.contains("torchtune") || r.lower("source").contains("torchtune") {
        Framework::Torchtune
    } else {
        Framework::Hf
    }
}

/// What became of a stated dataset's sequences longer than the run's limit: dropped where the row says so, or
/// where ms-swift ran it (its `truncation_strategy` defaulted to `delete`, which drops them before training:
/// `swift/llm/utils/argument.py` and `template.py` at the commits that published its benchmark tables), cut
/// otherwise (the tokenizer's truncation).
fn overlong_of(r: &Rec, semantics: &str) -> Overlong {
    let framework = r.lower("framework");
    if semantics.contains("drops samples longer")
        || framework.contains("ms-swift")
        || framework.contains("swift sft")
    {
        Overlong::Drop
    } else {
        Overlong::Cut
    }
}

/// Token lengths stated as `MEAN±SD` (numbers, decimals allowed), rounded to whole tokens.
fn stated_lengths(text: &str) -> Option<(u64, u64)> {
    let (before, after) = text.split_once('±')?;
    let number = |s: &str| -> Option<f64> { crate::decimal::parse_f64(s) };
    let mean: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let sd: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let (mean, sd) = (number(&mean)?, number(&sd)?);
    (mean >= 1.0).then(|| (mean.round() as u64, sd.round() as u64))
}

/// A mean length stated as `mean ~N` or `mean N` (whole tokens).
fn stated_mean(text: &str) -> Option<u64> {
    let (_, after) = text.split_once("mean")?;
    let digits: String = after
        .trim_start_matches([' ', '~', '≈'])
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok().filter(|m| *m >= 1)
}

/// The batch shape and what the adapter trains: micro-batch, sequence length, rank, virtual tokens, targets.
fn read_shape(r: &Rec, run: &Run, arch: &Architecture, plan: &mut Plan) -> Result<(), String> {
    plan.micro_batch = match r.uint("micro_batch_size") {
        Some(b) => b.max(1),
        None if run.existence_claim => 1,
        None => return Err("no micro-batch size".into()),
    };
    plan.seq_len = match r.uint("seq_len") {
        Some(s) => s.max(1),
        None if run.existence_claim => 512,
        None => return Err("no sequence length".into()),
    };
    // A dataset whose token lengths the row states as mean ± standard deviation (ms-swift's tables), batched
    // without packing: each batch padded to its own longest sequence, cut at the maximum length.
    let semantics = r.lower("seq_len_semantics");
    if let Some((mean, sd)) = stated_lengths(&semantics) {
        plan.lengths = Lens::Padded;
        plan.len_mean = Some(mean);
        plan.len_sd = Some(sd);
        plan.len_overlong = overlong_of(r, &semantics);
    } else if let Some(mean) = semantics
        .contains("length-bucketed")
        .then(|| stated_mean(&semantics))
        .flatten()
    {
        // Batches made from length-sorted buckets, longest first (PEFT's MetaMathQA `BucketIterator`), of a
        // stated mean length; the deviation unstated is `auto` (half the mean), as the row's notes say.
        plan.lengths = Lens::Grouped;
        plan.len_mean = Some(mean.min(plan.seq_len));
    }
    plan.rank = r.uint("lora_rank").unwrap_or(8).max(1);
    if plan.peft.uses_virtual_tokens() {
        // PEFT reports its trainable count: num_virtual_tokens times what each virtual token trains.
        let width = if plan.peft == Peft::Prompt {
            arch.hidden
        } else {
            2 * arch.kv_dim() * arch.layers
        };
        plan.virtual_tokens = r
            .uint("trainable_params")
            .filter(|t| width > 0 && t % width == 0 && *t > 0)
            .map(|t| t / width)
            .ok_or("num_virtual_tokens is neither stated nor implied by the trainable count")?;
    }
    if run.method != Method::Full {
        plan.targets = targets_of(r.get("lora_target_modules"))?;
    }
    Ok(())
}

/// Precision: pure 16-bit unless an autocast regime is named; an fp32 frozen base under autocast is `upcast`.
fn read_precision(r: &Rec, run: &Run, plan: &mut Plan) -> Result<(), String> {
    let method = run.method;
    let mixed = r.lower("mixed_precision");
    let base = r.lower("base_weight_dtype");
    let amp = mixed.contains("mixed")
        || mixed.starts_with("bf16 (hf")
        || mixed.contains("accelerate")
        || mixed.starts_with("bf16: true");
    // PEFT's examples/sft/train.py loads with `torch_dtype=float32` unless a 4-bit storage dtype is set
    // (utils.py); DeepSpeed then casts the module to bf16, while FSDP keeps fp32 shards.
    let sft_script_fp32 = run.framework_text.contains("examples/sft/train.py")
        && method == Method::Lora
        && !run.par.contains("deepspeed");
    if base.starts_with("fp32") || sft_script_fp32 {
        if method == Method::Qlora && amp {
            return Err(
                "an fp32 base beside 4-bit weights under autocast is not expressible".into(),
            );
        }
        plan.upcast = method == Method::Lora && amp;
        plan.precision = if amp {
            Precision::AmpBf16
        } else {
            Precision::Fp32
        };
    } else {
        let fp16 = r.lower("compute_dtype").starts_with("fp16") || base.contains("fp16");
        // A model loaded in 16-bit and fully trained under autocast has no fp32 master: its parameters, gradients
        // and Adam states all stay 16-bit, which is pure 16-bit training as far as memory goes.
        let amp = amp && method != Method::Full;
        plan.precision = match (amp, fp16) {
            (true, false) => Precision::AmpBf16,
            (true, true) => Precision::AmpFp16,
            (false, false) => Precision::Bf16,
            (false, true) => Precision::Fp16,
        };
    }
    Ok(())
}

/// The quantized base of a QLoRA row: format, what bitsandbytes saved, and double quantization.
fn read_quantization(r: &Rec, run: &Run, plan: &mut Plan) -> Result<(), String> {
    let year_month = run.year_month;
    let q = r.lower("quantization") + &r.lower("base_weight_dtype");
    if q.contains("hqq") {
        return Err("only bitsandbytes and GPTQ bases are modeled".into());
    }
    let eight = q.contains("int8") || q.contains("8-bit") || q.contains("8bit");
    plan.quant = if q.contains("gptq") && eight {
        Quant::Gptq8
    } else if q.contains("gptq") {
        Quant::Gptq4
    } else if eight {
        Quant::Int8
    } else if q.contains("fp4") {
        Quant::Fp4
    } else {
        Quant::Nf4
    };
    // bitsandbytes kept each 4-bit matmul's input until its mid-2024 releases.
    plan.qlora_saves_input =
        !q.contains("torchao") && !year_month.is_empty() && year_month < "2025-01";
    // torchao's NF4 quantizer worked in chunks from May 2024 (its PR #196); torchtune used it for QLoRA.
    plan.quantize_at_load_wide =
        run.framework == Framework::Torchtune && !year_month.is_empty() && year_month < "2024-05";
    let dq = r.lower("double_quant");
    // ms-swift builds its BitsAndBytesConfig with double quantization on (1.4.0's defaults).
    plan.double_quant = dq.starts_with("yes")
        || (dq.is_empty() && (q.contains("torchao") || run.framework_text.contains("swift")));
    Ok(())
}

fn read_optimizer(r: &Rec, run: &Run, plan: &mut Plan) {
    // Negated mentions ("not 8-bit", "no optimizer_in_bwd") name what the run did not use.
    let opt = r
        .lower("optimizer")
        .replace("not 8-bit", "")
        .replace("no optimizer_in_bwd", "");
    plan.optimizer = if opt.contains("paged") && (opt.contains("8bit") || opt.contains("8-bit")) {
        Optimizer::PagedAdamw8bit
    } else if opt.contains("paged") {
        Optimizer::PagedAdamw32bit
    } else if opt.contains("8bit") || opt.contains("8-bit") {
        Optimizer::Adamw8bit
    } else if opt.contains("fused") {
        Optimizer::AdamwTorchFused
    } else if opt.contains("sgd") {
        Optimizer::Sgd
    } else if opt.contains("adafactor") {
        Optimizer::Adafactor
    } else {
        Optimizer::AdamwTorch
    };
    // torchtune's "optimization flags" table (Nov 2024, Llama 3.2 3B on one A100) names `torch.optim.AdamW` for
    // its full fine-tuning ladder without saying fused or foreach. Its own rows rule foreach out: with activation
    // checkpointing it reports 24.9 GiB active, while weights, gradients and both states take 23.9 GiB and
    // foreach's state-sized sqrt temporary 6.0 GiB more. Its author had made `fused: True` the default of
    // torchtune's Adam configs two months before (PR #1575): the table's AdamW is the fused one.
    if run.framework == Framework::Torchtune
        && plan.optimizer == Optimizer::AdamwTorch
        && run.source_ref.contains("optimization flags")
    {
        plan.optimizer = Optimizer::AdamwTorchFused;
    }
    plan.optimizer_in_backward =
        opt.contains("in_bwd") || opt.contains("into backw") || opt.contains("in backward");
}

/// What the forward keeps: checkpointing, activation offloading, and the attention implementation.
fn read_activations(r: &Rec, run: &Run, plan: &mut Plan) {
    let gc = r.lower("grad_checkpointing");
    plan.offload_activations =
        gc.contains("offload") || run.features.contains("activation offloading");
    // Unsloth's "unsloth" checkpointing offloads the layer inputs.
    let unsloth_offload = run.framework == Framework::Unsloth && gc.contains("unsloth");
    plan.checkpointing = Checkpointing::from(if gc.starts_with("on") || run.existence_claim {
        true
    } else if gc.starts_with("off") {
        false
    } else {
        // Not stated: LLaMA-Factory turns checkpointing on by default; the others leave it off.
        run.framework_text.contains("llama-factory") || r.lower("source").contains("llama-factory")
    });
    if unsloth_offload && plan.checkpointing.on() {
        plan.checkpointing = Checkpointing::Offload;
    }
    let attn = r.lower("attention_impl");
    let year_month = run.year_month;
    // transformers gave its models an SDPA path in 4.36 (December 2023); before, attention was eager, and a row
    // of that time that names no attention ran it.
    let eager_era =
        run.framework == Framework::Hf && !year_month.is_empty() && year_month < "2023-12";
    plan.attn = if attn.contains("eager") || (attn.trim().is_empty() && eager_era) {
        Attn::Eager
    } else if attn.contains("flash") || attn.contains("xformers") {
        Attn::Flash
    } else {
        Attn::Sdpa
    };
}

/// How the run spreads over its GPUs (and the CPU): offload, layer split, sharding.
fn read_parallelism(run: &Run, plan: &mut Plan) -> Result<(), String> {
    let (par, gpus) = (&run.par, run.gpus);
    plan.cpu_offload =
        par.contains("offload") && !par.contains("no cpu offload") && !par.contains("no offload");
    if par.contains("pipeline") {
        return Err(
            "pipeline parallelism (micro-batches in flight on every stage) is not modeled".into(),
        );
    }
    // A model split across the GPUs by `device_map`: each runs its slice of layers in turn.
    plan.split_layers = gpus > 1 && (par.contains("split") || par.contains("device_map"));
    plan.gpus = gpus;
    // ZeRO-3 with offload runs on one GPU as well; without offload one GPU has nothing to shard.
    // FSDP's NO_SHARD ("ddp") keeps a full replica per GPU, which is plain data parallelism for memory.
    let replicated = par.contains("no_shard") || par.contains("ddp");
    plan.zero = if (gpus > 1 || plan.cpu_offload)
        && !replicated
        && (par.contains("full_shard")
            || par.contains("full shard")
            || par.contains("zero-3")
            || par.contains("fsdp"))
    {
        3
    } else {
        0
    };
    // DeepSpeed's partitions; FSDP's version and wrapping follow the framework unless the row names them.
    if par.contains("deepspeed") || par.contains("zero-") {
        plan.shard = Shard::Deepspeed;
    } else if par.contains("fsdp2") || par.contains("fully_shard") {
        plan.shard = Shard::Fsdp2;
    } else if run.framework == Framework::Torchtune
        && !run.year_month.is_empty()
        && run.year_month < "2024-09"
    {
        // torchtune's distributed recipes ran FSDP1 until its 0.3 release (September 2024), adapters wrapped
        // in units of their own (`lora_fsdp_wrap_policy`).
        plan.shard = Shard::Fsdp1;
        plan.wrap = Wrap::Lora;
    }
    Ok(())
}

/// What the framework, script or recipe does that the row does not state: accumulation, compile, the loss and
/// how long its logits live, adapter dtype, dropout, and the allocator.
fn apply_framework_habits(run: &Run, plan: &mut Plan) {
    let (framework, framework_text, features) = (run.framework, &run.framework_text, &run.features);
    let method = run.method;
    let year_month = run.year_month;
    plan.grad_accumulation = grad_accumulation_of(&format!("{features} {framework_text}"))
        .unwrap_or_else(|| {
            if framework == Framework::Litgpt {
                litgpt_config_accumulation(&run.source_ref, plan.micro_batch, plan.gpus)
            } else {
                1
            }
        });
    plan.compile = features.contains("compile")
        && !features.contains("compile off")
        && !features.contains("no compile");
    // torchtune's CEWithChunkedOutputLoss (the recipes' default from late 2024); earlier, a plain cross-entropy.
    if framework == Framework::Torchtune && features.contains("chunked") {
        plan.loss = Loss::Chunked;
    }
    // unsloth patches the model's loss with its cross-entropy kernel over the 16-bit logits; from December 2024
    // its own loader computes the loss without logits (Apple's Cut Cross Entropy, then unsloth-zoo's fused
    // loss), which its rows state.
    if framework == Framework::Unsloth {
        plan.loss = if features.contains("cut cross entropy") || features.contains("fused loss") {
            Loss::Fused
        } else {
            Loss::Kernel
        };
        // unsloth-zoo sets expandable segments at import; older releases left the allocator as it was.
        plan.allocator = if features.contains("expandable segments") {
            Alloc::Expandable
        } else {
            Alloc::Cached
        };
    } else if framework_text.contains("unsloth") {
        plan.loss = Loss::Kernel;
    }
    // torchtune's recipes kept their (fp32, shifted) `logits` through backward until they deleted them after
    // the loss: the distributed LoRA recipe from June 2024 (PR #1046), the others from late July (PR #1235).
    let logits_deleted_from = if method != Method::Full && run.gpus > 1 {
        "2024-06"
    } else {
        "2024-08"
    };
    if framework == Framework::Torchtune
        && plan.loss == Loss::Standard
        && !year_month.is_empty()
        && year_month < logits_deleted_from
    {
        plan.hold_logits_bits = 32;
    }
    plan.adapter_dtype = if matches!(framework, Framework::Hf | Framework::Unsloth) {
        DType::Fp32
    } else {
        DType::Bf16
    };
    if framework == Framework::Litgpt && method != Method::Full {
        // litgpt's config_hub LoRA/QLoRA recipes set lora_dropout: 0.05.
        plan.dropout = 0.05;
    }
    if framework_text.contains("fsdp_qlora") {
        // Its train.py: `lora_dropout` defaults to 0.1; its own 4-bit loading builds bitsandbytes `Linear4bit`s,
        // whose `compress_statistics` (double quantization) defaults to on; and its loop keeps `output` until
        // after the optimizer step, the fp32 logits LlamaForCausalLM returned in transformers 4.36 to 4.44.
        if method != Method::Full {
            plan.dropout = 0.1;
        }
        if method == Method::Qlora {
            plan.double_quant = true;
        }
        plan.hold_logits_bits = 32;
    }
    if features.contains("expandable_segments") {
        plan.allocator = Alloc::Expandable;
    }
    if framework_text.contains("method_comparison") {
        // PEFT's MetaMathQA loop (`run.py`) keeps `outputs` until the next step's forward returns, so the
        // 16-bit logits transformers returns (it upcasts only inside the loss) live through backward. It
        // empties the cache every 10 steps, and its 20-batch length buckets run longest first: the longest
        // batch of each bucket, and so the run's peak, comes right after an `empty_cache()`.
        plan.hold_logits_bits = 16;
        plan.allocator = Alloc::Emptied;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every card the `gpu` column is read as is bundled: no row is skipped for its GPU.
    #[test]
    fn every_card_read_is_bundled() {
        for gpu in [
            "NVIDIA H100 80GB",
            "A100 40GB SXM",
            "8x A100 80GB",
            "NVIDIA A10G (24 GB)",
            "L40S",
            "Tesla T4",
            "RTX 4090",
            "2x RTX 3090",
            "RTX A5000",
            "RTX A6000",
            "single 48GB GPU",
            "24 GB",
            "40 GB",
            "not stated",
        ] {
            assert!(gpu_of(gpu).is_ok(), "{gpu}");
        }
    }
}
