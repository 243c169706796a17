//! accelerate's config YAML (what `accelerate config` writes and `accelerate launch` reads): the distributed type,
//! the processes, mixed precision, and the `fsdp_config` or `deepspeed_config` section. Import only: the exports
//! launch with `accelerate launch --num_processes N` and carry their sharding in their own files.
//!
//! Keys as accelerate writes them (its FSDP guide, `docs/source/usage_guides/fsdp.md`, and
//! `utils/dataclasses.py`): `distributed_type` FSDP, DEEPSPEED, MULTI_GPU or NO; `fsdp_config` with `fsdp_`-prefixed
//! keys (`fsdp_version`, defaulting to 1, and `fsdp_sharding_strategy`, defaulting to FULL_SHARD);
//! `deepspeed_config` with `zero_stage`, `offload_optimizer_device`, `offload_param_device`,
//! `gradient_accumulation_steps` and `deepspeed_config_file`.

use super::fields::{get, get_str, is_empty, show, Reader};
use super::{deepspeed, sharding};
use serde_json::{Map, Value};

#[rustfmt::skip]
const ACCELERATE_NEUTRAL: &[&str] = &[
    "compute_environment", "debug", "downcast_bf16", "machine_rank", "main_training_function", "num_machines",
    "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_cpu", "enable_cpu_affinity",
    "dynamo_config", "main_process_ip", "main_process_port", "gpu_ids", "tpu_name", "tpu_zone", "ipex_config",
    "mpirun_config", "fsdp_config", "deepspeed_config",
];

/// The fields [`read`] maps to plan keys.
const HANDLED: &[&str] = &[
    "distributed_type",
    "num_processes",
    "mixed_precision",
    "fsdp_config",
    "deepspeed_config",
];

#[inline(never)]
pub(super) fn read(r: &mut Reader, map: &Map<String, Value>) {
    let kind = get_str(map, "distributed_type").unwrap_or("");
    match kind {
        "FSDP" => read_fsdp(r, map),
        "DEEPSPEED" => {
            r.fact("shard", "deepspeed", "distributed_type");
            if let Some(Value::Object(ds)) = get(map, "deepspeed_config") {
                read_deepspeed(r, ds);
            }
        }
        "MULTI_GPU" => r.fact("zero", "0", "distributed_type"),
        "NO" | "" => {}
        other => {
            r.unsupported_value("distributed_type", other);
            r.note_fmt(format_args!(
                "distributed_type = {} is not one peakplan models (FSDP, DEEPSPEED, MULTI_GPU or NO); zero and shard unchanged",
                show(&Value::String(other.to_string()))
            ));
        }
    }
    match get(map, "num_processes") {
        Some(v) if kind != "NO" => {
            if let Some(n) = r.uint("num_processes", v).filter(|n| *n > 0) {
                r.fact("gpus", &super::num(n), "num_processes");
            }
        }
        _ if kind == "NO" => r.fact("gpus", "1", "distributed_type"),
        _ => {}
    }
    if let Some(v) = get(map, "mixed_precision") {
        match v.as_str() {
            Some("bf16") => r.fact_also("prec", "amp_bf16", &["bf16"], "mixed_precision"),
            Some("fp16") => r.fact_also("prec", "amp_fp16", &["fp16"], "mixed_precision"),
            Some("no") => r.note("mixed_precision = \"no\": training runs in the dtype the model was loaded in; prec unchanged"),
            _ => r.unsupported_value("mixed_precision", &show(v)),
        }
    }
    // A section of another distributed type is not in effect.
    let mut handled: Vec<&str> = HANDLED.to_vec();
    if kind != "FSDP" && get(map, "fsdp_config").is_some_and(|v| !is_empty(v)) {
        handled.retain(|k| *k != "fsdp_config");
    }
    if kind != "DEEPSPEED" && get(map, "deepspeed_config").is_some_and(|v| !is_empty(v)) {
        handled.retain(|k| *k != "deepspeed_config");
    }
    r.rest("", map, &handled, ACCELERATE_NEUTRAL);
}

/// `distributed_type: FSDP` and its `fsdp_config`, with accelerate's defaults where it says nothing: FSDP1,
/// FULL_SHARD.
#[inline(never)]
fn read_fsdp(r: &mut Reader, map: &Map<String, Value>) {
    let said = match get(map, "fsdp_config") {
        Some(Value::Object(c)) => sharding::read_config(r, "fsdp_config", c),
        _ => sharding::Said::default(),
    };
    if !said.version {
        r.fact("shard", "fsdp1", "distributed_type");
        r.note("fsdp_config has no fsdp_version: accelerate's default, FSDP1 (shard=fsdp1)");
    }
    if !said.strategy {
        r.fact("zero", "3", "distributed_type");
    }
}

/// `deepspeed_config`: the stage, offloading, accumulation, or the DeepSpeed file it names.
#[inline(never)]
fn read_deepspeed(r: &mut Reader, ds: &Map<String, Value>) {
    let prefix = "deepspeed_config.";
    for (k, v) in ds {
        let f = super::fields::cat(prefix, k);
        match k.as_str() {
            "zero_stage" => {
                if let Some(s) = r.uint(&f, v) {
                    r.fact("zero", &super::num(s), &f);
                }
            }
            "offload_optimizer_device" | "offload_param_device" => match v.as_str() {
                Some("none") | None => {}
                Some(_) => r.fact("cpuoff", "1", &f),
            },
            "gradient_accumulation_steps" => r.accumulation(&f, v),
            "deepspeed_config_file" => match v.as_str() {
                Some(p) if !p.is_empty() => deepspeed::read_path(r, &f, p),
                _ => {}
            },
            // accelerate's default is the stage (`ACCELERATE_DEEPSPEED_ZERO3_INIT`, else `is_zero3()`), as zinit's.
            "zero3_init_flag" => {
                if let Some(b) = r.flag(&f, v) {
                    r.fact_bool("zinit", b, &f);
                }
            }
            _ if is_empty(v) => {}
            "zero3_save_16bit_model" | "deepspeed_multinode_launcher" | "gradient_clipping" => {
                r.neutral(&f)
            }
            _ => r.unsupported(&f),
        }
    }
}
