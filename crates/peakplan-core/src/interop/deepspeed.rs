//! DeepSpeed JSON: the export (ZeRO stage, micro-batch, precision, also the `DEEPSPEED` dict of the Python script)
//! and the import of a DeepSpeed config, alone, inside `TrainingArguments` or axolotl, or named by its file.

use super::fields::{cat, get, get_str, is_empty, show, type_name, Reader};
use super::num;
use super::sharding::{launch, Launch};
use super::template::{render, vars, Vars, YAML_BOOLS};
use crate::plan::{Plan, Precision, MAX_DS_ELEMENTS};
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
    render(
        DEEPSPEED,
        YAML_BOOLS,
        &[
            vars!(
                "batch" => batch,
                "b" => b,
                "ga" => ga,
                "zero" => zero,
                "offload" => if plan.cpu_offload { "cpu" } else { "none" },
                ;
                "bf16" => bf16(plan),
                "fp16" => fp16(plan),
                "zero1" => plan.zero >= 1,
                "zero3" => plan.zero == 3,
            ),
            zero_vars(plan),
        ],
    )
}

/// DeepSpeed's sizes and switches as the config writes them (the JSON file and the script's dict): a set value as
/// is; `auto` as `"auto"` where the Trainer fills it (`reduce_bucket_size`, and under ZeRO-3 the prefetch bucket
/// and the persistence threshold), else left out, so DeepSpeed's default applies.
pub(crate) fn zero_vars(plan: &Plan) -> Vars<'static> {
    let size = |v: Option<u64>, trainer_fills: bool| match v {
        Some(n) => num(n),
        None if trainer_fills => "\"auto\"".into(),
        None => String::new(),
    };
    let zero3 = plan.zero == 3;
    vars!(
        "ds_sub" => size(plan.ds_sub_group, false),
        "ds_rbucket" => size(plan.ds_reduce_bucket, true),
        "ds_agbucket" => size(plan.ds_allgather_bucket, false),
        "ds_prefetch" => size(plan.ds_prefetch_bucket, zero3),
        "ds_live" => size(plan.ds_max_live, false),
        "ds_reuse" => size(plan.ds_max_reuse, false),
        "ds_persist" => size(plan.ds_persistence, zero3),
        ;
        "ds_overlap_set" => plan.ds_overlap_comm.is_some(),
        "ds_overlap" => plan.ds_overlap_comm == Some(true),
        "ds_contig_set" => plan.ds_contiguous_grads.is_some(),
        "ds_contig" => plan.ds_contiguous_grads == Some(true),
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
        // zinit=0 under ZeRO-3: the model loads whole, outside zero.Init.
        "no_zero_init" => ds && plan.zero == 3 && !plan.zero_init,
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
    "reduce_scatter", "allgather_partitions",
    "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "round_robin_gradients", "load_from_fp32_weights",
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
    read_sizes(r, &zp, z);
    let mut handled = vec!["stage", "offload_optimizer", "offload_param"];
    handled.extend(SIZES.iter().flat_map(|(name, alias, _)| [*name, *alias]));
    handled.extend(SWITCHES.iter().map(|(name, _)| *name));
    r.rest(&zp, z, &handled, ZERO_NEUTRAL);
}

/// DeepSpeed's sizes in `zero_optimization` (elements): the field, the name DeepSpeed also accepts (its pydantic
/// field, aliased by the `stage3_` name), and the plan key.
const SIZES: &[(&str, &str, &str)] = &[
    ("sub_group_size", "sub_group_size", "ds_sub"),
    ("reduce_bucket_size", "reduce_bucket_size", "ds_rbucket"),
    (
        "allgather_bucket_size",
        "allgather_bucket_size",
        "ds_agbucket",
    ),
    (
        "stage3_prefetch_bucket_size",
        "prefetch_bucket_size",
        "ds_prefetch",
    ),
    (
        "stage3_max_live_parameters",
        "max_live_parameters",
        "ds_live",
    ),
    (
        "stage3_max_reuse_distance",
        "max_reuse_distance",
        "ds_reuse",
    ),
    (
        "stage3_param_persistence_threshold",
        "param_persistence_threshold",
        "ds_persist",
    ),
];

/// DeepSpeed's switches in `zero_optimization` and their plan keys.
const SWITCHES: &[(&str, &str)] = &[
    ("overlap_comm", "ds_overlap"),
    ("contiguous_gradients", "ds_contig"),
];

/// The sizes and switches of `zero_optimization`: a number (`5e8`, `500000000`, or either as a string), or
/// `auto` (the Trainer's fill, or DeepSpeed's default where the Trainer fills none).
#[inline(never)]
fn read_sizes(r: &mut Reader, zp: &str, z: &Map<String, Value>) {
    for &(name, alias, key) in SIZES {
        let Some((k, v)) = [name, alias]
            .into_iter()
            .find_map(|k| get(z, k).filter(|v| !v.is_null()).map(|v| (k, v)))
        else {
            continue;
        };
        let field = cat(zp, k);
        if v.as_str() == Some("auto") {
            r.fact(key, "auto", &field);
        } else if let Some(n) = elements(v) {
            r.fact(key, &num(n), &field);
        } else {
            r.note_fmt(format_args!(
                "{field} must be a whole number of elements (0 to {MAX_DS_ELEMENTS}) or auto, got {}; {key} \
                 unchanged",
                show(v)
            ));
        }
    }
    for &(name, key) in SWITCHES {
        let Some(v) = get(z, name).filter(|v| !v.is_null()) else {
            continue;
        };
        let field = cat(zp, name);
        if v.as_str() == Some("auto") {
            r.fact(key, "auto", &field);
        } else if let Some(b) = r.flag(&field, v) {
            r.fact_bool(key, b, &field);
        }
    }
}

/// A count of elements as DeepSpeed reads one: a whole number, written as an integer or a float (`1e9`), or as
/// a string of either; `None` for anything else or beyond [`MAX_DS_ELEMENTS`].
fn elements(v: &Value) -> Option<u64> {
    let f = match v {
        Value::Number(n) => match n.as_u64() {
            Some(u) => return Some(u).filter(|u| *u <= MAX_DS_ELEMENTS),
            None => n.as_f64()?,
        },
        Value::String(s) => crate::decimal::parse_f64(s.trim())?,
        _ => return None,
    };
    (f.fract() == 0.0 && (0.0..=MAX_DS_ELEMENTS as f64).contains(&f)).then_some(f as u64)
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
/// A DeepSpeed file named by its path: one a framework ships is read as shipped (its stage, offloading, sizes and
/// switches, each applying only where no file given says otherwise); for any other, the ZeRO stage guessed from
/// a name such as `zero3_bf16.json` or `ds_z3_config.json`. Either way the note asks for the file itself.
#[inline(never)]
pub(super) fn read_path(r: &mut Reader, field: &str, path: &str) {
    let q = quote(path);
    r.fact("shard", "deepspeed", field);
    if let Some((source, zero)) = shipped(path) {
        let first = r.facts.len();
        let z: Map<String, Value> = serde_json::from_str(&zero).unwrap_or_default();
        read_zero(r, &cat(field, " (as shipped): "), &z);
        for f in &mut r.facts[first..] {
            f.weak = true;
        }
        r.note_fmt(format_args!(
            "{field} = {q}: read as {source} ships it (ZeRO stage, offloading, DeepSpeed sizes); give that file \
             too to read a changed copy"
        ));
        return;
    }
    let lower = path.to_ascii_lowercase();
    let after = |tag: &[u8]| {
        let i = lower.as_bytes().windows(tag.len()).position(|w| w == tag)?;
        lower[i + tag.len()..]
            .trim_start_matches(['_', '-'])
            .chars()
            .next()
    };
    let stage = after(b"zero")
        .or_else(|| after(b"ds_z"))
        .and_then(|c| c.to_digit(10))
        .filter(|d| *d <= 3);
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

/// The `zero_optimization` of a DeepSpeed file a framework ships, by the name its configs give: ms-swift's
/// `--deepspeed zero2|zero3|zero2_offload|zero3_offload` (`swift/llm/ds_config/*.json`), LLaMA-Factory's
/// `examples/deepspeed/ds_z{2,3}[_offload]_config.json`. Other fields of those files (precision, batch) are `auto`.
fn shipped(path: &str) -> Option<(&'static str, String)> {
    const SWIFT_Z2: &str = r#"{"stage": 2, "allgather_bucket_size": 2e8, "overlap_comm": true,
        "reduce_bucket_size": 2e8, "contiguous_gradients": true"#;
    const SWIFT_Z3: &str = r#"{"stage": 3, "overlap_comm": true, "contiguous_gradients": true,
        "sub_group_size": 1e9, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9"#;
    const LF_Z2: &str = r#"{"stage": 2, "allgather_bucket_size": 5e8, "overlap_comm": false,
        "reduce_bucket_size": 5e8, "contiguous_gradients": true"#;
    const LF_Z3: &str = r#"{"stage": 3, "overlap_comm": false, "contiguous_gradients": true,
        "sub_group_size": 1e9, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9"#;
    // ms-swift names its files without a path or extension; LLaMA-Factory's configs give the file's path.
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let (source, body, offload): (_, _, &str) = match name {
        "zero2" => ("ms-swift (swift/llm/ds_config/zero2.json)", SWIFT_Z2, ""),
        "zero2_offload" => (
            "ms-swift (swift/llm/ds_config/zero2_offload.json)",
            SWIFT_Z2,
            r#", "offload_optimizer": {"device": "cpu"}"#,
        ),
        "zero3" => ("ms-swift (swift/llm/ds_config/zero3.json)", SWIFT_Z3, ""),
        "zero3_offload" => (
            "ms-swift (swift/llm/ds_config/zero3_offload.json)",
            SWIFT_Z3,
            r#", "offload_param": {"device": "cpu"}"#,
        ),
        "ds_z2_config.json" => (
            "LLaMA-Factory (examples/deepspeed/ds_z2_config.json)",
            LF_Z2,
            "",
        ),
        "ds_z2_offload_config.json" => (
            "LLaMA-Factory (examples/deepspeed/ds_z2_offload_config.json)",
            LF_Z2,
            r#", "offload_optimizer": {"device": "cpu"}"#,
        ),
        "ds_z3_config.json" => (
            "LLaMA-Factory (examples/deepspeed/ds_z3_config.json)",
            LF_Z3,
            "",
        ),
        "ds_z3_offload_config.json" => (
            "LLaMA-Factory (examples/deepspeed/ds_z3_offload_config.json)",
            LF_Z3,
            r#", "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}"#,
        ),
        _ => return None,
    };
    Some((source, format!("{body}{offload}}}")))
}
