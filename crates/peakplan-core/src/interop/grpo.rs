//! TRL's `GRPOConfig` saved as JSON, into `task=grpo` and its keys: `num_generations` (`gens`),
//! `max_completion_length` (`completion`), `beta`, `use_vllm` with `vllm_mode` (`gen`) and
//! `vllm_gpu_memory_utilization` (`vmem`), and the round's batch: TRL's `per_device_train_batch_size` counts
//! completions and `steps_per_generation` (default `gradient_accumulation_steps`) micro-batches make a round, so
//! the plan's `b` (the round's prompts) is their product over `num_generations` and its `ga` is
//! `steps_per_generation`.

use super::fields::{get_set, has_any, Reader};
use super::num;
use serde_json::{Map, Value};

/// Fields only GRPO's config has among TRL's online trainers' (RLOO and online DPO share `num_generations`).
const GRPO_ONLY: &[&str] = &[
    "scale_rewards",
    "epsilon_high",
    "steps_per_generation",
    "generation_batch_size",
    "vllm_gpu_memory_utilization",
    "num_iterations",
    "mask_truncated_completions",
    "top_entropy_quantile",
];

/// The fields [`read`] maps to plan keys (and the batch fields it reads as a round).
const MAPPED: &[&str] = &[
    "num_generations",
    "max_completion_length",
    "max_prompt_length",
    "beta",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "steps_per_generation",
    "generation_batch_size",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
];

/// GRPO's fields read without effect on memory (sampling, the loss's shape, rewards, logging, vLLM's server).
#[rustfmt::skip]
const NEUTRAL: &[&str] = &[
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "generation_kwargs", "cache_implementation",
    "loss_type", "epsilon", "epsilon_high", "delta", "scale_rewards", "reward_weights", "num_iterations",
    "mask_truncated_completions", "top_entropy_quantile", "entropy_coef", "importance_sampling_level",
    "use_bias_correction_kl", "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps", "log_completions",
    "num_completions_to_print", "wandb_log_unique_prompts", "shuffle_dataset", "disable_dropout",
    "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout", "vllm_group_port",
    "vllm_guided_decoding_regex", "vllm_tensor_parallel_size", "vllm_model_impl", "vllm_enable_sleep_mode",
    "vllm_max_model_length", "vllm_importance_sampling_correction", "vllm_importance_sampling_cap",
    "cast_lm_head_to_fp32", "model_init_kwargs", "chat_template_kwargs", "max_tool_calling_iterations",
    "use_transformers_paged", "ds3_gather_for_generation", "remove_unused_columns", "reward_clip_range",
    "entropy_coef_delta", "entropy_coef_max", "entropy_coef_min", "entropy_target", "log_multimodal",
    "multi_objective_aggregation", "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_neg", "vespo_k_pos",
    "vespo_lambda_neg", "vespo_lambda_pos", "vllm_importance_sampling_clip_max", "vllm_importance_sampling_mode",
    "train_sampling_strategy",
];

/// Whether `map` is a `GRPOConfig`: `num_generations` with a field of GRPO's own.
pub(super) fn is_grpo(map: &Map<String, Value>) -> bool {
    has_any(map, &["num_generations"]) && has_any(map, GRPO_ONLY)
}

/// Reads a `GRPOConfig`'s own fields and its round; returns `map` without what it accounted for, for the
/// caller to read the rest as `TrainingArguments`.
#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) -> Map<String, Value> {
    r.note("a TRL GRPOConfig: task=grpo");
    r.fact("task", "grpo", "num_generations");
    let uint = |r: &mut Reader, k: &str| get_set(map, k).and_then(|v| r.uint(k, v));
    let gens = uint(r, "num_generations");
    if let Some(g) = gens {
        r.fact("gens", &num(g), "num_generations");
    }
    if let Some(c) = uint(r, "max_completion_length") {
        r.fact("completion", &num(c), "max_completion_length");
    }
    // TRL 0.27 and earlier cut prompts to `max_prompt_length`; later releases keep the dataset's.
    match uint(r, "max_prompt_length") {
        Some(p) if p > 0 => r.fact("prompt", &num(p), "max_prompt_length"),
        _ => r.note("the prompts' length is the dataset's (TRL 0.28 and later cut none): set prompt to the longest"),
    }
    if let Some(b) = get_set(map, "beta").and_then(|v| r.float("beta", v)) {
        r.fact("beta", &b.to_string(), "beta");
    }
    read_generation(r, map);
    read_round(r, map, gens);
    let mut rest = map.clone();
    for k in MAPPED {
        rest.remove(*k);
    }
    for k in NEUTRAL {
        if rest
            .remove(*k)
            .is_some_and(|v| !super::fields::is_empty(&v))
        {
            r.neutral(k);
        }
    }
    rest
}

/// `use_vllm` and `vllm_mode` as `gen`, `vllm_gpu_memory_utilization` as `vmem`.
fn read_generation(r: &mut Reader, map: &Map<String, Value>) {
    if !r.on(map, "use_vllm") {
        r.fact("gen", "hf", "use_vllm");
        return;
    }
    // TRL 0.19 to 0.22 defaulted to the server; the mode is in every saved config since it exists.
    let mode = get_set(map, "vllm_mode").and_then(|v| r.text("vllm_mode", v));
    match mode {
        Some("colocate") => {
            r.fact("gen", "vllm_colocate", "vllm_mode");
            if let Some(u) = get_set(map, "vllm_gpu_memory_utilization")
                .and_then(|v| r.float("vllm_gpu_memory_utilization", v))
            {
                r.fact("vmem", &u.to_string(), "vllm_gpu_memory_utilization");
            }
        }
        Some("server") | None => r.fact("gen", "vllm_server", "vllm_mode"),
        Some(other) => r.unsupported_value("vllm_mode", other),
    }
}

/// The round: `per_device_train_batch_size` completions a micro-batch, `steps_per_generation` micro-batches (or
/// `generation_batch_size` completions) a round; `b` is the round's prompts, `ga` its micro-batches.
fn read_round(r: &mut Reader, map: &Map<String, Value>, gens: Option<u64>) {
    let uint = |r: &mut Reader, k: &str| get_set(map, k).and_then(|v| r.uint(k, v));
    let per_device = uint(r, "per_device_train_batch_size");
    let accumulation = uint(r, "gradient_accumulation_steps");
    let steps = uint(r, "steps_per_generation").or_else(|| {
        let total = uint(r, "generation_batch_size")?;
        per_device.filter(|&p| p > 0).map(|p| total / p)
    });
    let steps = steps.or(accumulation).unwrap_or(1);
    let (Some(per_device), Some(gens)) =
        (per_device, gens.or(Some(crate::plan::DEFAULT_GENERATIONS)))
    else {
        return;
    };
    let round = per_device.saturating_mul(steps);
    if gens == 0 || round == 0 || round % gens != 0 {
        r.note_fmt(format_args!(
            "a round of {round} completions (per_device_train_batch_size x steps_per_generation) is no whole number of prompts x num_generations={gens}; b and ga unchanged"
        ));
        return;
    }
    r.fact("b", &num(round / gens), "per_device_train_batch_size");
    r.fact("ga", &num(steps), "steps_per_generation");
    if accumulation.is_some_and(|a| a != steps) {
        r.note("gradient_accumulation_steps differs from steps_per_generation: the plan steps once a round (ga = steps_per_generation)");
    }
}
