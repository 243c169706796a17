//! The sharding keys (`shard`, `wrap`, `gsync`) on import: each format's FSDP and DeepSpeed fields, one case a
//! row (file, text, the plan it gives, its unsupported fields, a note it must say), and bad values with their
//! messages.

use crate::{check_imports, data, import_one, Case};
use peakplan_core::plan::Plan;

const CASES: &[Case] = &[
    // accelerate: FSDP2 resharding after forward, sync_each_batch in its fsdp_config.
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n  fsdp_offload_params: false\n  sync_each_batch: true\n",
        "gpus=8&zero=2&shard=fsdp2&gsync=1&prec=amp_bf16",
        &[],
        "read as an accelerate config",
    ),
    // accelerate's defaults: FSDP1, FULL_SHARD.
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nnum_processes: 2\n",
        "gpus=2&zero=3&shard=fsdp1",
        &[],
        "accelerate's default, FSDP1",
    ),
    // The strategy by number, as `accelerate config` writes it.
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 1\n  fsdp_sharding_strategy: 2\n",
        "gpus=2&zero=2&shard=fsdp1",
        &[],
        "read as an accelerate config",
    ),
    (
        "accelerate.yaml",
        "distributed_type: DEEPSPEED\nnum_processes: 4\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n  offload_param_device: none\n  gradient_accumulation_steps: 8\n  zero3_init_flag: true\n",
        "gpus=4&zero=3&shard=deepspeed&cpuoff=1&ga=8&zinit=1",
        &[],
        "read as an accelerate config",
    ),
    (
        "accelerate.yaml",
        "distributed_type: MULTI_GPU\nnum_processes: 2\nfsdp_config: {}\n",
        "gpus=2&zero=0",
        &[],
        "read as an accelerate config",
    ),
    // TrainingArguments: the Trainer's fsdp option, its fsdp_config (prefix dropped) and accelerator_config.
    (
        "training_args.json",
        r#"{"per_device_train_batch_size": 2, "fsdp": "shard_grad_op auto_wrap offload", "fsdp_config": {"version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}, "accelerator_config": {"gradient_accumulation_kwargs": {"sync_each_batch": true}}}"#,
        "b=2&zero=2&cpuoff=1&shard=fsdp2&gsync=1",
        &[],
        "read, no effect on memory: fsdp_config.transformer_layer_cls_to_wrap",
    ),
    (
        "training_args.json",
        r#"{"per_device_train_batch_size": 2, "fsdp": "full_shard auto_wrap", "fsdp_config": {"fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_use_orig_params": true}}"#,
        "b=2&zero=3&shard=fsdp1&wrap=lora",
        &[],
        "PEFT's fsdp_auto_wrap_policy",
    ),
    // No version: which FSDP runs depends on the transformers release, so shard is left as it was.
    (
        "training_args.json",
        r#"{"per_device_train_batch_size": 2, "fsdp": ["full_shard"]}"#,
        "b=2&zero=3",
        &[],
        "FSDP1 under transformers 4 and FSDP2 under transformers 5",
    ),
    // axolotl: fsdp_version 2 with its unprefixed fsdp_config; FSDP1 from the fsdp list alone.
    (
        "axolotl.yaml",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: qlora\nload_in_4bit: true\nfsdp_version: 2\nfsdp_config:\n  offload_params: true\n  reshard_after_forward: true\n  auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  state_dict_type: FULL_STATE_DICT\n",
        "model=llama-2-7b&method=qlora&peft=lora&zero=3&shard=fsdp2&cpuoff=1&wrap=lora",
        &[],
        "read as an axolotl config",
    ),
    (
        "axolotl.yaml",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nfsdp:\n  - shard_grad_op\n  - auto_wrap\nfsdp_config:\n  fsdp_offload_params: false\n  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n",
        "model=llama-2-7b&method=lora&peft=lora&zero=2&shard=fsdp1&cpuoff=0",
        &[],
        "axolotl's FSDP1",
    ),
    (
        "axolotl.yaml",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\ndeepspeed: deepspeed_configs/zero2.json\n",
        "model=llama-2-7b&method=lora&peft=lora&zero=2&shard=deepspeed",
        &[],
        "zero=2 from the file name",
    ),
    // torchtune: a distributed recipe named in its launch line shards with FSDP2 and reduces every micro-batch.
    (
        "torchtune.yaml",
        "# tune run --nproc_per_node 2 lora_finetune_distributed --config llama3_1/8B_lora\nmodel:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n  lora_rank: 8\nbatch_size: 2\nfsdp_cpu_offload: true\nfsdp_reshard_after_forward: false\n",
        "fw=torchtune&model=llama-3.1-8b&method=lora&peft=lora&r=8&b=2&shard=fsdp2&gsync=1&cpuoff=1&zero=2",
        &[],
        "read as a torchtune config",
    ),
    (
        "torchtune.yaml",
        "# tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device\nmodel:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\nbatch_size: 2\n",
        "fw=torchtune&model=llama-3.1-8b&method=lora&peft=lora&b=2",
        &[],
        "read as a torchtune config",
    ),
    // Bad values keep the key and say why.
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 3\n  fsdp_sharding_strategy: HALF_SHARD\n",
        "gpus=2&zero=3&shard=fsdp1",
        &[],
        "fsdp_config.fsdp_version must be 1 or 2, got `3`; shard unchanged",
    ),
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
        "zero=3&shard=fsdp1",
        &[],
        "fsdp_config.fsdp_sharding_strategy must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1 to 5), got `HALF_SHARD`; zero unchanged",
    ),
    (
        "training_args.json",
        r#"{"per_device_train_batch_size": 1, "fsdp_config": {"auto_wrap_policy": "EVERY_LINEAR", "sync_each_batch": "sometimes"}}"#,
        "b=1",
        &["fsdp_config.auto_wrap_policy: `EVERY_LINEAR`"],
        "fsdp_config.sync_each_batch must be true or false, got `sometimes`; not used",
    ),
    (
        "accelerate.yaml",
        "distributed_type: XLA\nnum_processes: 8\n",
        "gpus=8",
        &["distributed_type: XLA"],
        "distributed_type = `XLA` is not one peakplan models",
    ),
    // A strategy by its number as text: HYBRID_SHARD_ZERO2, noted as one node's sharding.
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: \"5\"\n",
        "gpus=2&zero=2&shard=fsdp1",
        &[],
        "planned as zero=2 over the GPUs of one node",
    ),
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n  fsdp_offload_params: maybe\n",
        "zero=3&shard=fsdp1",
        &[],
        "fsdp_config.fsdp_offload_params must be true or false, got `maybe`; not used",
    ),
];

#[test]
fn sharding_fields_import_from_each_format() {
    check_imports(CASES);
}

#[test]
fn an_accelerate_fsdp_config_imports_with_its_defaults_and_wrap_note() {
    let got = import_one("accelerate_fsdp.yaml", &data("accelerate_fsdp.yaml"));
    let w = Plan::parse_query("gpus=4&zero=3&shard=fsdp1&cpuoff=1&wrap=lora&prec=amp_bf16");
    assert_eq!(got.plan.to_query(), w.plan.to_query(), "{:?}", got.notes);
    assert!(got.unsupported.is_empty(), "{:?}", got.unsupported);
    assert!(
        got.notes.iter().any(|n| n.contains("wrap=lora")),
        "{:?}",
        got.notes
    );
}

/// A file that only restates what `auto` runs leaves a plan line's `auto` as it is; one that says otherwise
/// overrides it, with a note.
#[test]
fn a_plan_line_keeps_auto_where_the_file_runs_what_auto_resolves_to() {
    let cases: &[(&str, &str, &str)] = &[
        // The Trainer's FSDP1 under fw=hf: still auto.
        (
            "gpus=2&zero=3",
            "fsdp_version: 1\nfsdp_config:\n  sharding_strategy: FULL_SHARD\n",
            "",
        ),
        // litgpt's auto is FSDP2.
        (
            "gpus=2&zero=3&fw=litgpt",
            "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n",
            "",
        ),
        (
            "gpus=2&zero=3",
            "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n",
            "shard=fsdp2",
        ),
    ];
    for (query, fsdp, replaced) in cases {
        let text = format!("# peakplan: {query}\nbase_model: ./model\nadapter: lora\n{fsdp}");
        let got = import_one("axolotl.yaml", &text);
        let override_note = got.notes.iter().find(|n| n.contains("replaces"));
        if replaced.is_empty() {
            assert_eq!(got.plan.shard.key(), "auto", "{query}: {:?}", got.notes);
            assert!(override_note.is_none(), "{query}: {:?}", got.notes);
        } else {
            assert!(
                override_note.is_some_and(|n| n.contains(replaced)),
                "{query}: {:?}",
                got.notes
            );
        }
    }
}

/// Exports write the plan's resolved sharding: without its plan line an axolotl file gives back the sharding the
/// plan runs (FSDP version, zero, offloading), and a torchtune override its distributed recipe.
#[test]
fn exports_write_the_resolved_sharding() {
    use crate::{exported, without_plan_line, PLANS};
    use peakplan_core::interop::ExportFormat;
    use peakplan_core::plan::Shard;
    let mut fsdp = 0;
    for q in PLANS {
        let (p, axo) = exported(q, ExportFormat::Axolotl);
        let sh = p.sharding();
        let runs_fsdp =
            p.gpus > 1 && !p.split_layers && p.zero >= 2 && sh.shard != Shard::Deepspeed;
        let version = match sh.shard {
            Shard::Fsdp2 => "2",
            _ => "1",
        };
        assert_eq!(
            axo.contains(&format!("\nfsdp_version: {version}\n")),
            runs_fsdp,
            "{q}"
        );
        if !runs_fsdp {
            continue;
        }
        fsdp += 1;
        assert!(!axo.contains("\ndeepspeed:"), "{q}");
        assert_eq!(
            axo.contains("# wrap=block has no axolotl key"),
            sh.mixed_units,
            "{q}"
        );
        assert_eq!(axo.contains("# gsync=1"), sh.sync_each_batch, "{q}");
        let bare = import_one("axolotl.yaml", &without_plan_line(&axo)).plan;
        assert_eq!(
            (bare.sharding().shard, bare.zero, bare.cpu_offload),
            (sh.shard, p.zero, p.cpu_offload),
            "{q}"
        );
        let (_, tt) = exported(q, ExportFormat::Torchtune);
        let bare = import_one("torchtune.yaml", &without_plan_line(&tt)).plan;
        assert_eq!(
            (
                bare.shard,
                bare.grad_sync.key(),
                bare.zero,
                bare.cpu_offload
            ),
            (Shard::Fsdp2, "1", p.zero, p.cpu_offload),
            "{q}: {tt}"
        );
        assert_eq!(
            tt.contains("planned as shard=fsdp2"),
            sh.shard != Shard::Fsdp2,
            "{q}"
        );
    }
    assert!(fsdp >= 6, "{fsdp} FSDP plans");
}
