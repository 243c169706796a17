//! The sharding keys (`shard`, `wrap`, `gsync`) both ways: what an export launches for a plan ([`launch`]), and
//! the readers of the FSDP settings several formats share: an `fsdp_config` mapping (accelerate's YAML writes its
//! keys with an `fsdp_` prefix, `TrainingArguments` and axolotl with or without it), the FSDP version, the
//! sharding strategy, the wrap policy and accelerate's `sync_each_batch`.
//!
//! Spellings, as read from the sources: accelerate `utils/dataclasses.py` `FullyShardedDataParallelPlugin`
//! (`fsdp_version` 1 or 2, defaulting to 1; `sharding_strategy` FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD,
//! HYBRID_SHARD_ZERO2 or their numbers 1 to 5, deprecated in favour of `reshard_after_forward`, a bool under FSDP2
//! and a strategy under FSDP1; `auto_wrap_policy` TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP;
//! `offload_params`) and `GradientAccumulationPlugin` (`sync_each_batch`: "Setting to `True` may reduce memory
//! requirements when using gradient accumulation with distributed training"); transformers `training_args.py`
//! (the `fsdp_config` keys lose their `fsdp_` prefix; `fsdp_config.get("version", 1)` in transformers 4, `2` in
//! transformers 5; `cpu_offload`; `accelerator_config.gradient_accumulation_kwargs.sync_each_batch`) and
//! `Trainer._fsdp_qlora_plugin_updates`, which gives a LoRA model PEFT's `fsdp_auto_wrap_policy` whatever the
//! configured policy.

use super::fields::{cat, get, show, Reader};
use crate::plan::{Plan, Shard};
use crate::text::quote;
use serde_json::{Map, Value};

/// How an export launches a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Launch {
    /// One GPU.
    One,
    /// One process with the layers split over the GPUs (`device_map="auto"`).
    Split,
    /// Data parallelism without sharding (DDP).
    Ddp,
    /// DeepSpeed ZeRO: `shard=deepspeed`, or `zero=1`, a stage FSDP does not have (optimizer states alone).
    DeepSpeed,
    /// FSDP, version 1 or 2 (`Shard::Fsdp1`, `Shard::Fsdp2`).
    Fsdp(Shard),
}

/// How the plan runs over its GPUs, `shard=auto` resolved for its framework.
pub(crate) fn launch(plan: &Plan) -> Launch {
    if plan.gpus <= 1 {
        return Launch::One;
    }
    if plan.split_layers {
        return Launch::Split;
    }
    match (plan.zero, plan.sharding().shard) {
        (0, _) => Launch::Ddp,
        (1, _) | (_, Shard::Deepspeed) => Launch::DeepSpeed,
        (_, s) => Launch::Fsdp(s),
    }
}

/// The FSDP version of a launch (1 or 2), 0 when it is not FSDP.
pub(crate) fn fsdp_version(l: Launch) -> u64 {
    match l {
        Launch::Fsdp(Shard::Fsdp2) => 2,
        Launch::Fsdp(_) => 1,
        _ => 0,
    }
}

/// What an `fsdp_config` mapping said.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Said {
    /// It names the FSDP version.
    pub(super) version: bool,
    /// It names the sharding strategy (or `reshard_after_forward`).
    pub(super) strategy: bool,
}

#[rustfmt::skip]
const FSDP_CONFIG_NEUTRAL: &[&str] = &[
    "backward_prefetch", "backward_prefetch_policy", "forward_prefetch", "state_dict_type", "sync_module_states",
    "cpu_ram_efficient_loading", "transformer_layer_cls_to_wrap", "min_num_params", "limit_all_gathers",
    "use_orig_params", "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt", "xla_fsdp_settings", "mixed_precision_policy",
    "activation_checkpointing",
];

/// An `fsdp_config` mapping named `field`: the version, the strategy, parameter offloading, the wrap policy,
/// checkpointing and `sync_each_batch`; keys with or without their `fsdp_` prefix.
#[inline(never)]
pub(super) fn read_config(r: &mut Reader, field: &str, map: &Map<String, Value>) -> Said {
    let mut said = Said::default();
    let prefix = cat(field, ".");
    for (k, v) in map {
        let name = k.strip_prefix("fsdp_").unwrap_or(k);
        let f = cat(&prefix, k);
        match name {
            "version" => said.version |= version(r, &f, v),
            "sharding_strategy" => said.strategy |= strategy(r, &f, v),
            "reshard_after_forward" => {
                let reshards = match v {
                    Value::Bool(b) => Some(*b),
                    Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
                    Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
                    _ => None,
                };
                said.strategy |= match reshards {
                    // FSDP2's switch: resharding after forward is FULL_SHARD, keeping the layers is SHARD_GRAD_OP.
                    Some(b) => {
                        r.fact("zero", if b { "3" } else { "2" }, &f);
                        true
                    }
                    // FSDP1's accelerate configs put a strategy name here.
                    None => strategy(r, &f, v),
                };
            }
            "offload_params" | "cpu_offload" => {
                if let Some(b) = r.flag(&f, v) {
                    r.fact_bool("cpuoff", b, &f);
                }
            }
            "auto_wrap_policy" => wrap_policy(r, &f, v),
            "sync_each_batch" => sync_each_batch(r, &f, v),
            "activation_checkpointing" if r.flag(&f, v) == Some(true) => r.fact("gc", "1", &f),
            _ if super::fields::is_empty(v) => {}
            _ if FSDP_CONFIG_NEUTRAL.contains(&name) => r.neutral(&f),
            _ => r.unsupported(&f),
        }
    }
    said
}

/// `fsdp_version`: 1 or 2 (a number or its text); true when it was read.
#[inline(never)]
pub(super) fn version(r: &mut Reader, field: &str, v: &Value) -> bool {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match n {
        Some(1) => r.fact("shard", "fsdp1", field),
        Some(2) => r.fact("shard", "fsdp2", field),
        _ => {
            r.note_fmt(format_args!(
                "{field} must be 1 or 2, got {}; shard unchanged",
                show(v)
            ));
            return false;
        }
    }
    true
}

/// FSDP1's sharding strategies in `ShardingStrategy`'s order (numbered from 1), each with the ZeRO stage it shards
/// like.
const STRATEGIES: [(&str, &str); 5] = [
    ("FULL_SHARD", "3"),
    ("SHARD_GRAD_OP", "2"),
    ("NO_SHARD", "0"),
    ("HYBRID_SHARD", "3"),
    ("HYBRID_SHARD_ZERO2", "2"),
];

/// A sharding strategy, by name or number, as the ZeRO stage it shards like; true when it was read.
#[inline(never)]
fn strategy(r: &mut Reader, field: &str, v: &Value) -> bool {
    let (number, name) = match v {
        Value::Number(n) => (n.as_u64(), String::new()),
        Value::String(s) => (s.trim().parse().ok(), s.trim().to_ascii_uppercase()),
        _ => (None, String::new()),
    };
    let Some(i) =
        (0..STRATEGIES.len()).find(|&i| number == Some(i as u64 + 1) || name == STRATEGIES[i].0)
    else {
        r.note_fmt(format_args!(
            "{field} must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1 to 5), got {}; zero unchanged",
            show(v)
        ));
        return false;
    };
    let zero = STRATEGIES[i].1;
    if STRATEGIES[i].0.starts_with("HYBRID") {
        r.note_fmt(format_args!(
            "{field} = {}: shards within each node and replicates across nodes; planned as zero={zero} over the GPUs of one node",
            show(v)
        ));
    }
    r.fact("zero", zero, field);
    true
}

/// The wrap policy: under the Trainer a LoRA model gets PEFT's policy whatever is configured, so the policy says
/// `wrap=lora`, weakly (a plan line that says otherwise keeps its value).
#[inline(never)]
fn wrap_policy(r: &mut Reader, field: &str, v: &Value) {
    match v.as_str().map(str::trim) {
        Some(p @ ("TRANSFORMER_BASED_WRAP" | "SIZE_BASED_WRAP" | "NO_WRAP")) => {
            r.weak("wrap", "lora", &[], field);
            r.note_fmt(format_args!(
                "{field} = {p}: the Trainer gives a LoRA model PEFT's fsdp_auto_wrap_policy instead (adapters in units of their own): wrap=lora; a script of your own that wraps decoder blocks with their adapters is wrap=block"
            ));
        }
        _ => {
            r.unsupported_value(field, &show(v));
            r.note_fmt(format_args!(
                "{field} must be TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, got {}; wrap unchanged",
                show(v)
            ));
        }
    }
}

/// accelerate's `sync_each_batch`: reduce gradients after every micro-batch (`gsync=1`) or accumulate them
/// inside `no_sync` (`gsync=0`).
#[inline(never)]
pub(super) fn sync_each_batch(r: &mut Reader, field: &str, v: &Value) {
    if let Some(b) = r.flag(field, v) {
        r.fact_bool("gsync", b, field);
    }
}

/// `accelerator_config` of `TrainingArguments`: `gradient_accumulation_kwargs.sync_each_batch`; the other fields
/// have no effect on memory.
#[inline(never)]
pub(super) fn read_accelerator_config(r: &mut Reader, field: &str, map: &Map<String, Value>) {
    let prefix = cat(field, ".");
    for (k, v) in map {
        let f = cat(&prefix, k);
        match (k.as_str(), v) {
            ("gradient_accumulation_kwargs", Value::Object(kw)) => {
                let kp = cat(&f, ".");
                for (kk, vv) in kw {
                    let ff = cat(&kp, kk);
                    match kk.as_str() {
                        "sync_each_batch" => sync_each_batch(r, &ff, vv),
                        _ if super::fields::is_empty(vv) => {}
                        _ => r.neutral(&ff),
                    }
                }
            }
            _ if super::fields::is_empty(v) => {}
            _ => r.neutral(&f),
        }
    }
}

/// The `fsdp_config` of `TrainingArguments` or axolotl, when present: a mapping, or a file named in its place.
#[inline(never)]
pub(super) fn read_config_field(r: &mut Reader, map: &Map<String, Value>, field: &str) -> Said {
    match get(map, field) {
        Some(Value::Object(c)) => read_config(r, field, c),
        Some(Value::String(p)) if !p.is_empty() => {
            r.note_fmt(format_args!(
                "{field} = {}: give that file's settings inline to read them; shard and zero unchanged",
                quote(p)
            ));
            Said::default()
        }
        Some(other) if !super::fields::is_empty(other) => {
            r.note_fmt(format_args!(
                "{field} must be a mapping, got {}; not used",
                super::fields::type_name(other)
            ));
            Said::default()
        }
        _ => Said::default(),
    }
}
