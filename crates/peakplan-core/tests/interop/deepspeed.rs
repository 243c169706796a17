//! DeepSpeed's sizes and switches (`ds_sub`, `ds_rbucket`, `ds_agbucket`, `ds_prefetch`, `ds_live`, `ds_reuse`, `ds_persist`,
//! `ds_overlap`, `ds_contig`, `zinit`): read from a DeepSpeed JSON alone, inline in TrainingArguments or axolotl,
//! from the files ms-swift and LLaMA-Factory ship (named only), and from accelerate's `zero3_init_flag`; written by
//! the DeepSpeed export and the script's dict, `auto` as the Trainer fills it.

use crate::{check_imports, exported, import_one, Case, PLANS};
use peakplan_core::interop::{import, ExportFormat};
use peakplan_core::plan::Plan;
use serde_json::Value;

const CASES: &[Case] = &[
    // Alone: numbers as integers, floats (`1e9`) or strings (`"5e8"`); `auto` stays auto.
    (
        "ds_config.json",
        include_str!("../data/interop/deepspeed_sizes.json"),
        "zero=3&shard=deepspeed&b=1&ga=4&gpus=4&prec=amp_bf16&ds_sub=0&ds_rbucket=500000000&ds_agbucket=200000000\
         &ds_persist=40960&ds_live=1000000000&ds_reuse=1000000000&ds_overlap=0",
        &[],
        "read as a DeepSpeed config",
    ),
    // DeepSpeed's own field names, which the `stage3_` names alias.
    (
        "ds_config.json",
        r#"{"zero_optimization": {"stage": 3, "prefetch_bucket_size": 1000, "max_live_parameters": 2000, "param_persistence_threshold": 3000, "overlap_comm": "auto"}}"#,
        "zero=3&shard=deepspeed&ds_prefetch=1000&ds_live=2000&ds_persist=3000",
        &[],
        "train_batch_size is a number",
    ),
    // Bad values: said, and the key left as it was.
    (
        "ds_config.json",
        r#"{"zero_optimization": {"stage": 2, "reduce_bucket_size": 1.5, "sub_group_size": -5, "allgather_bucket_size": "lots", "contiguous_gradients": "sometimes"}}"#,
        "zero=2&shard=deepspeed",
        &[],
        "zero_optimization.reduce_bucket_size must be a whole number of elements (0 to 1000000000000000) or auto, \
         got `1.5`; ds_rbucket unchanged",
    ),
    (
        "ds_config.json",
        r#"{"zero_optimization": {"stage": 2, "sub_group_size": 2e15}}"#,
        "zero=2&shard=deepspeed",
        &[],
        "zero_optimization.sub_group_size must be a whole number of elements",
    ),
    (
        "ds_config.json",
        r#"{"zero_optimization": {"stage": 2, "contiguous_gradients": "sometimes"}}"#,
        "zero=2&shard=deepspeed",
        &[],
        "zero_optimization.contiguous_gradients must be true or false, got `sometimes`; not used",
    ),
    // Inline in TrainingArguments (`deepspeed` as a dict).
    (
        "training_args.json",
        r#"{"per_device_train_batch_size": 2, "deepspeed": {"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "allgather_bucket_size": "200000000", "overlap_comm": true, "contiguous_gradients": false}}}"#,
        "b=2&zero=2&shard=deepspeed&ds_rbucket=200000000&ds_agbucket=200000000&ds_overlap=1&ds_contig=0",
        &[],
        "read as TrainingArguments",
    ),
    // Inline in axolotl (`deepspeed` as a mapping): axolotl's ZeRO-3 files set these two to 0.
    (
        "axolotl.yaml",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\ndeepspeed:\n  zero_optimization:\n    stage: 3\n    sub_group_size: 0\n    stage3_max_live_parameters: 0\n    reduce_bucket_size: auto\n",
        "model=llama-2-7b&method=lora&peft=lora&zero=3&shard=deepspeed&ds_sub=0&ds_live=0",
        &[],
        "read as an axolotl config",
    ),
    // axolotl names its file: the stage from the name, and a note to give the file.
    (
        "axolotl.yaml",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\ndeepspeed: deepspeed_configs/zero3_bf16.json\n",
        "model=llama-2-7b&method=lora&peft=lora&zero=3&shard=deepspeed",
        &[],
        "zero=3 from the file name; give that file too to read its settings",
    ),
    // LLaMA-Factory names one of its shipped files: read as shipped (overlap_comm off, 1e9 sub-groups and live
    // parameters, the Trainer's auto for the rest).
    (
        "llamafactory.yaml",
        "stage: sft\nfinetuning_type: full\ndeepspeed: examples/deepspeed/ds_z3_config.json\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 8\n",
        "b=1&ga=8&zero=3&shard=deepspeed&ds_sub=1000000000&ds_live=1000000000&ds_overlap=0&ds_contig=1",
        &["stage", "finetuning_type"],
        "read as LLaMA-Factory (examples/deepspeed/ds_z3_config.json) ships it",
    ),
    (
        "llamafactory.yaml",
        "stage: sft\ndeepspeed: examples/deepspeed/ds_z2_offload_config.json\nper_device_train_batch_size: 1\n",
        "b=1&zero=2&shard=deepspeed&cpuoff=1&ds_rbucket=500000000&ds_agbucket=500000000&ds_overlap=0&ds_contig=1",
        &["stage"],
        "give that file too to read a changed copy",
    ),
    // ms-swift's `--deepspeed zero2|zero3` names its built-in files.
    (
        "swift_args.json",
        r#"{"per_device_train_batch_size": 1, "deepspeed": "zero3"}"#,
        "b=1&zero=3&shard=deepspeed&ds_sub=1000000000&ds_live=1000000000&ds_overlap=1&ds_contig=1",
        &[],
        "read as ms-swift (swift/llm/ds_config/zero3.json) ships it",
    ),
    (
        "swift_args.json",
        r#"{"per_device_train_batch_size": 1, "deepspeed": "zero2_offload"}"#,
        "b=1&zero=2&shard=deepspeed&cpuoff=1&ds_rbucket=200000000&ds_agbucket=200000000&ds_overlap=1&ds_contig=1",
        &[],
        "read as ms-swift (swift/llm/ds_config/zero2_offload.json) ships it",
    ),
    // Another file of LLaMA-Factory's naming: the stage from `ds_z3`.
    (
        "llamafactory.yaml",
        "deepspeed: my_configs/ds_z3_tuned.json\nper_device_train_batch_size: 1\n",
        "b=1&zero=3&shard=deepspeed",
        &[],
        "zero=3 from the file name",
    ),
    // accelerate: `zero3_init_flag` is zinit.
    (
        "accelerate.yaml",
        "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: false\n",
        "gpus=2&zero=3&shard=deepspeed&zinit=0",
        &[],
        "read as an accelerate config",
    ),
];

#[test]
fn deepspeed_sizes_import_from_each_format() {
    check_imports(CASES);
}

/// A shipped file read by name yields to the file itself, given too: a changed copy wins, and the note names both.
#[test]
fn a_given_file_overrides_the_shipped_one_it_names() {
    let lf = "stage: sft\ndeepspeed: examples/deepspeed/ds_z3_config.json\nper_device_train_batch_size: 1\n";
    let copy =
        r#"{"zero_optimization": {"stage": 3, "overlap_comm": true, "sub_group_size": 5e8}}"#;
    let got = import(&[("llamafactory.yaml", lf), ("ds_z3_config.json", copy)]).unwrap();
    let w = Plan::parse_query(
        "b=1&zero=3&shard=deepspeed&ds_sub=500000000&ds_live=1000000000&ds_overlap=1&ds_contig=1",
    );
    assert_eq!(got.plan.to_query(), w.plan.to_query(), "{:?}", got.notes);
    assert!(
        got.notes.iter().any(|n| n.starts_with(
            "ds_overlap=1 (ds_z3_config.json: zero_optimization.overlap_comm) replaces ds_overlap=0 \
             (llamafactory.yaml: deepspeed (as shipped): zero_optimization.overlap_comm)"
        )),
        "{:?}",
        got.notes
    );
}

/// The DeepSpeed export writes each size: a set one as is, `auto` as `"auto"` where the Trainer fills it
/// (`reduce_bucket_size`; under ZeRO-3 the prefetch bucket and persistence threshold), else nothing, so that
/// DeepSpeed's default applies; and it imports back to the same keys.
#[test]
fn the_deepspeed_export_writes_the_sizes() {
    let zero = |q: &str| {
        let (_, ds) = exported(q, ExportFormat::Deepspeed);
        let v: Value = serde_json::from_str(&ds).unwrap_or_else(|e| panic!("{q}: {e}\n{ds}"));
        v["zero_optimization"].clone()
    };
    let z3 = zero("model=llama-2-13b&method=full&gpus=4&zero=3&shard=deepspeed");
    assert_eq!(z3["reduce_bucket_size"], "auto");
    assert_eq!(z3["stage3_prefetch_bucket_size"], "auto");
    assert_eq!(z3["stage3_param_persistence_threshold"], "auto");
    for k in [
        "sub_group_size",
        "allgather_bucket_size",
        "stage3_max_live_parameters",
        "overlap_comm",
        "contiguous_gradients",
    ] {
        assert!(z3.get(k).is_none(), "{k}: {z3}");
    }
    let z2 = zero("model=llama-2-13b&method=full&gpus=4&zero=2&shard=deepspeed");
    assert_eq!(z2["reduce_bucket_size"], "auto");
    assert!(z2.get("stage3_prefetch_bucket_size").is_none(), "{z2}");
    assert!(
        z2.get("stage3_param_persistence_threshold").is_none(),
        "{z2}"
    );
    let set = "model=llama-2-13b&method=full&gpus=4&zero=3&shard=deepspeed&ds_sub=0&ds_rbucket=200000000\
               &ds_agbucket=300000000&ds_prefetch=0&ds_live=0&ds_persist=1000&ds_overlap=0&ds_contig=1";
    let z = zero(set);
    for (k, v) in [
        ("sub_group_size", 0),
        ("reduce_bucket_size", 200_000_000),
        ("allgather_bucket_size", 300_000_000),
        ("stage3_prefetch_bucket_size", 0),
        ("stage3_max_live_parameters", 0),
        ("stage3_param_persistence_threshold", 1000),
    ] {
        assert_eq!(z[k].as_u64(), Some(v), "{k}: {z}");
    }
    assert_eq!(
        (
            z["overlap_comm"].as_bool(),
            z["contiguous_gradients"].as_bool()
        ),
        (Some(false), Some(true))
    );
    // The script's DEEPSPEED dict is the same config in Python.
    let (_, script) = exported(set, ExportFormat::Python);
    for line in [
        "\"sub_group_size\": 0,",
        "\"reduce_bucket_size\": 200000000,",
        "\"overlap_comm\": False,",
        "\"contiguous_gradients\": True,",
    ] {
        assert!(script.contains(line), "{line}");
    }
    let (_, script) = exported(
        "model=llama-2-13b&method=full&gpus=4&zero=3&shard=deepspeed",
        ExportFormat::Python,
    );
    assert!(script.contains("\"stage3_prefetch_bucket_size\": \"auto\","));
}

/// `zinit=0` under ZeRO-3: the script builds the model with the Trainer's DeepSpeed config unregistered (so
/// transformers does not enter `zero.Init`) and registers it again before the Trainer starts.
#[test]
fn the_script_loads_whole_at_zinit_0() {
    let q = "model=llama-2-13b&method=full&gpus=4&zero=3&shard=deepspeed";
    let (_, on) = exported(q, ExportFormat::Python);
    assert!(!on.contains("unset_hf_deepspeed_config"));
    let (_, off) = exported(&format!("{q}&zinit=0"), ExportFormat::Python);
    let unset = off.find("    unset_hf_deepspeed_config()").unwrap();
    let load = off.find("from_pretrained(").unwrap();
    let set = off
        .find("    set_hf_deepspeed_config(args.hf_deepspeed_config)")
        .unwrap();
    let trainer = off.find("    trainer = ").unwrap();
    assert!(unset < load && load < set && set < trainer);
    // Nothing is partitioned at load under ZeRO-2: zinit changes nothing there.
    let z2 = "model=llama-2-13b&method=full&gpus=4&zero=2&shard=deepspeed&zinit=0";
    assert!(!exported(z2, ExportFormat::Python)
        .1
        .contains("unset_hf_deepspeed_config"));
}

/// Every plan's DeepSpeed export reads back to its sizes and switches.
#[test]
fn deepspeed_sizes_round_trip_through_the_export() {
    let keys = [
        "ds_sub",
        "ds_rbucket",
        "ds_agbucket",
        "ds_prefetch",
        "ds_live",
        "ds_persist",
        "ds_overlap",
        "ds_contig",
    ];
    for q in PLANS {
        let (p, ds) = exported(q, ExportFormat::Deepspeed);
        let back = import_one("ds_config.json", &ds).plan;
        for k in keys {
            assert_eq!(back.get(k), p.get(k), "{q}: {k}");
        }
    }
}
