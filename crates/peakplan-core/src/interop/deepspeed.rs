//! DeepSpeed JSON: the export (ZeRO stage, micro-batch, precision, also the `DEEPSPEED` dict of the Python script)
//! and the import of a DeepSpeed config, alone, inside `TrainingArguments` or axolotl, or named by its file.

use super::fields::{cat, get, get_str, is_empty, type_name, Reader};
use super::num;
use super::sharding::{launch, Launch};
use super::template::{fill, vars, Vars, YAML_BOOLS};
use crate::plan::{Plan, Precision};
use crate::text::quote;
use serde_json::{Map, Value};

const DEEPSPEED: &str = include_str!("deepspeed.json.tmpl");

/// The name the axolotl export gives the DeepSpeed file; the stage in it lets an import recover `zero`.
pub(crate) fn file_name(plan: &Plan) -> String {
    let mut s = String::from("deepspeed_zero");
    s.push_str(&num(u64::from(plan.zero)));
    s.push_str(".json");
    s
}

/// Whether the plan shards with DeepSpeed: several data-parallel GPUs and `shard=deepspeed`, or ZeRO-1, which
/// FSDP has no stage for.
pub(crate) fn uses_deepspeed(plan: &Plan) -> bool {
    launch(plan) == Launch::DeepSpeed
}

/// DeepSpeed's `train_batch_size`: micro-batch x data-parallel processes x accumulation, which is how an import
/// recovers the GPU count. A layer split runs one process, whatever its GPU count.
fn train_batch_size(plan: &Plan) -> String {
    let processes = if plan.split_layers { 1 } else { plan.gpus };
    num(plan
        .micro_batch
        .saturating_mul(processes)
        .saturating_mul(plan.grad_accumulation))
}

/// A DeepSpeed config: ZeRO stage, micro-batch, precision. `train_batch_size` = micro-batch x GPUs (no
/// accumulation), which is how an import recovers the GPU count.
#[inline(never)]
pub(crate) fn export(plan: &Plan) -> String {
    let zero = num(u64::from(plan.zero));
    let batch = train_batch_size(plan);
    let ga = num(plan.grad_accumulation);
    let b = num(plan.micro_batch);
    fill!(
        DEEPSPEED, YAML_BOOLS;
        "batch" => &batch,
        "b" => &b,
        "ga" => &ga,
        "zero" => &zero,
        "offload" => if plan.cpu_offload { "cpu" } else { "none" },
        ;
        "bf16" => bf16(plan),
        "fp16" => fp16(plan),
        "zero1" => plan.zero >= 1,
        "zero3" => plan.zero == 3,
    )
}

fn bf16(plan: &Plan) -> bool {
    matches!(plan.precision, Precision::Bf16 | Precision::AmpBf16)
}

fn fp16(plan: &Plan) -> bool {
    matches!(plan.precision, Precision::Fp16 | Precision::AmpFp16)
}

/// The `DEEPSPEED` dict of the Python script, the config [`export`] writes (the micro-batch `b` and the accumulation
/// `ga` are the script's own).
pub(crate) fn script_vars(plan: &Plan) -> Vars<'static> {
    let ds = uses_deepspeed(plan);
    vars!(
        "zero" => num(u64::from(plan.zero)),
        "ds_batch" => train_batch_size(plan),
        ;
        "ds" => ds,
        "zero3" => ds && plan.zero == 3,
        // bitsandbytes stores 4-bit weights in a float dtype so that ZeRO-3 and FSDP can shard them.
        "quant_storage" => (ds && plan.zero == 3) || matches!(launch(plan), Launch::Fsdp(_)),
        "ds_bf16" => bf16(plan),
        "ds_fp16" => fp16(plan),
    )
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
pub(super) fn read(r: &mut Reader, prefix: &str, map: &Map<String, Value>) {
    let f = |k: &str| cat(prefix, k);
    // A DeepSpeed config: DeepSpeed runs the sharding, whatever its stage.
    let ds_field = if prefix.is_empty() {
        "DeepSpeed config"
    } else {
        prefix.trim_end_matches('.')
    };
    r.fact("shard", "deepspeed", ds_field);
    let micro_field = f("train_micro_batch_size_per_gpu");
    let micro = get(map, "train_micro_batch_size_per_gpu").and_then(|v| r.uint(&micro_field, v));
    if let Some(b) = micro {
        r.fact("b", &num(b), &micro_field);
    }
    match get(map, "zero_optimization") {
        Some(Value::Object(z)) => read_zero(r, prefix, z),
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

/// `zero_optimization`: the ZeRO stage and CPU offloading.
#[inline(never)]
fn read_zero(r: &mut Reader, prefix: &str, z: &Map<String, Value>) {
    let zp = cat(prefix, "zero_optimization.");
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
/// A zero stage guessed from a DeepSpeed file name such as `zero3_bf16.json`.
#[inline(never)]
pub(super) fn read_path(r: &mut Reader, field: &str, path: &str) {
    let lower = path.to_ascii_lowercase();
    let stage = lower
        .as_bytes()
        .windows(4)
        .position(|w| w == b"zero")
        .and_then(|i| lower[i + 4..].trim_start_matches(['_', '-']).chars().next())
        .and_then(|c| c.to_digit(10))
        .filter(|d| *d <= 3);
    let q = quote(path);
    r.fact("shard", "deepspeed", field);
    match stage {
        Some(d) => {
            r.fact("zero", &num(u64::from(d)), field);
            r.note_fmt(format_args!(
                "{field} = {q}: zero={d} from the file name; give that file too to read its settings"
            ));
        }
        None => r.note_fmt(format_args!(
            "{field} = {q}: give that file too (peakplan import this.yaml {q}) to read its ZeRO stage"
        )),
    }
}
