//! Hugging Face `TrainingArguments`: the arguments the Python script gives the Trainer (precision flags, optimizer,
//! checkpointing, accumulation, Liger, compile), and the import of a `TrainingArguments` JSON (or TRL's
//! `SFTConfig`, or its `DPOConfig` and `KTOConfig`, whose own fields `trl.rs` reads), with its DeepSpeed config or
//! FSDP setting.

use super::deepspeed::{self, uses_deepspeed};
use super::fields::{get, get_set, is_empty, Reader};
use super::num;
use super::py::compute_dtype;
use super::sharding;
use super::template::{vars, Vars};
use super::trl;
use crate::plan::{DType, Loss, Method, Plan, Precision};
use serde_json::{Map, Value};

/// The Trainer's arguments in the Python script: `bf16`/`fp16` are the Trainer's mixed precision, also on for a
/// full fine-tune in pure 16-bit (as the Trainer runs it) and under DeepSpeed.
pub(crate) fn script_vars(plan: &Plan) -> Vars<'static> {
    let compute = compute_dtype(plan);
    let full_pure16 =
        plan.method == Method::Full && matches!(plan.precision, Precision::Bf16 | Precision::Fp16);
    let mut amp_bf16 =
        plan.precision == Precision::AmpBf16 || (full_pure16 && compute == DType::Bf16);
    let mut amp_fp16 =
        plan.precision == Precision::AmpFp16 || (full_pure16 && compute == DType::Fp16);
    if uses_deepspeed(plan) {
        // DeepSpeed insists that the Trainer's flags match its own bf16/fp16 sections.
        amp_bf16 = compute == DType::Bf16;
        amp_fp16 = compute == DType::Fp16;
    }
    let fused = plan.loss == Loss::Fused;
    let launch = sharding::launch(plan);
    let version = sharding::fsdp_version(launch);
    // TrainingArguments(fsdp=...): the strategy, auto-wrapping, and parameter offloading.
    let mut fsdp = String::from(if plan.zero == 3 {
        "full_shard auto_wrap"
    } else {
        "shard_grad_op auto_wrap"
    });
    if plan.cpu_offload {
        fsdp.push_str(" offload");
    }
    let reshard = if version == 2 {
        if plan.zero == 3 {
            ", \"reshard_after_forward\": True"
        } else {
            ", \"reshard_after_forward\": False"
        }
    } else {
        ""
    };
    let multi = matches!(
        launch,
        sharding::Launch::Ddp | sharding::Launch::DeepSpeed | sharding::Launch::Fsdp(_)
    );
    vars!(
        "opt" => plan.optimizer.key(),
        "ga" => num(plan.grad_accumulation),
        "fsdp_option" => if version > 0 { fsdp } else { String::new() },
        "fsdp_version" => num(version),
        "reshard" => reshard,
        ;
        "sync_each_batch" => multi && plan.sharding().sync_each_batch,
        "gc" => plan.checkpointing.on(),
        "bf16" => amp_bf16,
        "fp16" => amp_fp16,
        "liger_kernel" => fused || plan.liger,
        "liger" => plan.liger,
        "fused" => fused,
        "compile" => plan.compile,
    )
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
    "ignore_data_skip", "label_smoothing_factor", "group_by_length", "train_sampling_strategy", "length_column_name",
    "report_to", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
    "dataloader_pin_memory", "dataloader_persistent_workers", "skip_memory_metrics", "use_legacy_prediction_loop",
    "push_to_hub", "resume_from_checkpoint", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo",
    "hub_always_push", "hub_revision", "gradient_checkpointing_kwargs", "include_inputs_for_metrics",
    "include_for_metrics", "eval_do_concat_batches", "full_determinism", "ray_scope", "ddp_timeout",
    "torch_compile_backend", "torch_compile_mode", "include_tokens_per_second", "include_num_input_tokens_seen",
    "neftune_noise_alpha", "optim_args", "optim_target_modules", "batch_eval_metrics", "eval_on_start",
    "eval_use_gather_object", "average_tokens_across_devices", "restore_callback_states_from_checkpoint",
    "dispatch_batches", "split_batches", "mp_parameters", "fsdp_min_num_params",
    "fsdp_transformer_layer_cls_to_wrap", "no_cuda", "use_cpu", "use_mps_device", "sharded_ddp",
    "push_to_hub_model_id", "push_to_hub_organization", "push_to_hub_token", "torch_empty_cache_steps", "project",
    "trackio_space_id", "liger_kernel_config", "parallelism_config", "dataset_text_field", "packing",
    "packing_strategy", "dataset_kwargs", "dataset_num_proc", "completion_only_loss", "assistant_only_loss",
    "model_init_kwargs", "chat_template_path", "eos_token", "pad_token", "pad_to_multiple_of", "eval_packing",
    "shuffle_dataset", "truncation_mode", "dataset_batch_size", "num_of_sequences", "chars_per_token", "use_liger",
    "dataloader_in_order",
];

/// The fields [`read`] maps to plan keys.
#[rustfmt::skip]
const HANDLED: &[&str] = &[
    "gradient_accumulation_steps", "per_device_train_batch_size", "gradient_checkpointing", "bf16", "fp16", "optim",
    "max_seq_length", "max_length", "deepspeed", "fsdp", "use_liger_kernel", "loss_type", "torch_compile",
    "fsdp_config", "accelerator_config", "activation_checkpointing",
];

#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) {
    // A TRL GRPOConfig, DPOConfig or KTOConfig: its own fields first, the rest as TrainingArguments.
    let own = if super::grpo::is_grpo(map) {
        Some(super::grpo::read(r, map))
    } else {
        trl::read(r, map)
    };
    let map = own.as_ref().unwrap_or(map);
    if let Some(v) = get(map, "per_device_train_batch_size") {
        r.batch("per_device_train_batch_size", v);
    }
    // transformers 5.24 renamed it `activation_checkpointing` (the old name an alias; a saved config has both).
    if let Some(v) = get(map, "gradient_checkpointing") {
        r.gc("gradient_checkpointing", v);
    } else if let Some(v) = get(map, "activation_checkpointing") {
        r.gc("activation_checkpointing", v);
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
        Some(Value::Object(ds)) => deepspeed::read(r, "deepspeed.", ds),
        Some(Value::String(p)) if !p.is_empty() => deepspeed::read_path(r, "deepspeed", p),
        _ => {}
    }
    let fsdp_on = get(map, "fsdp").is_some_and(|v| !is_empty(v));
    if let Some(v) = get(map, "fsdp") {
        r.fsdp("fsdp", v);
    }
    let said = sharding::read_config_field(r, map, "fsdp_config");
    if fsdp_on && !said.version {
        r.note("fsdp_config names no version: the Trainer runs FSDP1 under transformers 4 and FSDP2 under transformers 5; shard unchanged");
    }
    match get(map, "accelerator_config") {
        Some(Value::Object(a)) => sharding::read_accelerator_config(r, "accelerator_config", a),
        Some(v) if !is_empty(v) => r.neutral("accelerator_config"),
        _ => {}
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
    if let Some(v) = get(map, "loss_type").filter(|_| own.is_none()) {
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
    r.rest("", map, HANDLED, TRAINING_ARGS_NEUTRAL);
}
