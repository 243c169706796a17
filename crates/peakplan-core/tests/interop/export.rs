//! The config exports (axolotl, DeepSpeed, torchtune): each parses, carries the plan's keys, and imports back to
//! the same plan, with its plan line or (for what the format can say) without it.

use crate::{exported, import_one, plan, without_plan_line, PLANS};
use peakplan_core::interop::{import, yaml, ExportFormat};
use peakplan_core::plan::{Method, Peft, Plan, Precision, Shard, TokenTraining};
use peakplan_core::preset_arch;
use serde_json::Value;

/// Checks the keys an axolotl file itself carries (no `# peakplan:` line).
fn assert_axolotl_keys(q: &str, want: &Plan, got: &Plan) {
    let m = want.model.preset();
    if m.hf_id.contains('/') && !m.hf_id.starts_with('(') {
        assert_eq!(got.model, want.model, "{q}: model from base_model");
    }
    assert_eq!(got.method, want.method, "{q}: method");
    assert_eq!(got.micro_batch, want.micro_batch, "{q}: b");
    assert_eq!(got.seq_len, want.seq_len, "{q}: s");
    assert_eq!(got.checkpointing, want.checkpointing, "{q}: gc");
    assert_eq!(got.attn, want.attn, "{q}: attn");
    assert_eq!(got.optimizer, want.optimizer, "{q}: opt");
    assert_eq!(got.compile, want.compile, "{q}: compile");
    assert_eq!(got.liger, want.liger, "{q}: liger");
    let prec_ok = got.precision == want.precision
        || (want.method == Method::Full
            && matches!(
                (want.precision, got.precision),
                (Precision::AmpBf16, Precision::Bf16) | (Precision::AmpFp16, Precision::Fp16)
            ));
    assert!(
        prec_ok,
        "{q}: prec {:?} -> {:?}",
        want.precision, got.precision
    );
    if want.method != Method::Full {
        assert_eq!(got.rank, want.rank, "{q}: r");
        assert_eq!(got.dropout, want.dropout, "{q}: dropout");
        let arch = preset_arch(want);
        if !arch.fused_qkv && arch.mlp == peakplan_core::arch::Mlp::Gated {
            assert_eq!(got.targets, want.targets, "{q}: targets");
        }
        if matches!(want.peft, Peft::Dora | Peft::Rslora) {
            assert_eq!(got.peft, want.peft, "{q}: peft");
        }
        if want.tokens == TokenTraining::All {
            assert_eq!(got.tokens, want.tokens, "{q}: tt");
        }
    }
    if want.method == Method::Qlora && want.quant.gptq_bits().is_some() {
        // `gptq: true` names a GPTQ checkpoint; its bits live in the checkpoint, not in the file.
        assert!(
            got.quant.gptq_bits().is_some(),
            "{q}: quant {:?}",
            got.quant
        );
    } else if want.method == Method::Qlora {
        assert_eq!(got.quant, want.quant, "{q}: quant");
        assert_eq!(got.double_quant, want.double_quant, "{q}: dq");
    }
    if want.gpus > 1 && want.zero > 0 {
        assert_eq!(
            got.zero, want.zero,
            "{q}: zero from the DeepSpeed file name"
        );
    }
}

#[test]
fn axolotl_exports_parse_and_round_trip() {
    for q in PLANS {
        let (p, text) = exported(q, ExportFormat::Axolotl);
        let v = yaml::parse(&text).unwrap_or_else(|e| panic!("{q}: {e}"));
        let m = v.as_object().unwrap();
        assert_eq!(
            m.get("micro_batch_size").and_then(Value::as_u64),
            Some(p.micro_batch),
            "{q}"
        );
        assert_eq!(
            m.get("sequence_len").and_then(Value::as_u64),
            Some(p.seq_len),
            "{q}"
        );
        if p.method != Method::Full {
            assert_eq!(m.get("lora_r").and_then(Value::as_u64), Some(p.rank), "{q}");
        }
        // With its `# peakplan:` line the file gives back the whole plan, with no override notes.
        let back = import_one("axolotl.yaml", &text);
        assert_eq!(
            back.plan.to_query(),
            p.to_query(),
            "{q}: notes {:?}",
            back.notes
        );
        assert!(back.unsupported.is_empty(), "{q}: {:?}", back.unsupported);
        assert!(
            !back.notes.iter().any(|n| n.contains("replaces")),
            "{q}: {:?}",
            back.notes
        );
        // Without it, the axolotl keys alone carry what axolotl can say; the rest is named in a note.
        let bare = import_one("axolotl.yaml", &without_plan_line(&text));
        assert_axolotl_keys(q, &p, &bare.plan);
        assert!(
            bare.notes.iter().any(|n| n.contains("not in these files")),
            "{q}: {:?}",
            bare.notes
        );
    }
}

#[test]
fn deepspeed_exports_parse_and_round_trip_with_axolotl() {
    for q in PLANS {
        let (p, ds) = exported(q, ExportFormat::Deepspeed);
        let v: Value = serde_json::from_str(&ds).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert_eq!(
            v["zero_optimization"]["stage"].as_u64(),
            Some(u64::from(p.zero)),
            "{q}"
        );
        assert_eq!(
            v["train_micro_batch_size_per_gpu"].as_u64(),
            Some(p.micro_batch),
            "{q}"
        );
        // One process per GPU, except a layer split, which runs one process over its GPUs.
        let processes = if p.split_layers { 1 } else { p.gpus };
        assert_eq!(
            v["train_batch_size"].as_u64(),
            Some(p.micro_batch * processes * p.grad_accumulation),
            "{q}"
        );
        assert_eq!(
            v["gradient_accumulation_steps"].as_u64(),
            Some(p.grad_accumulation),
            "{q}"
        );
        assert_eq!(
            v["bf16"]["enabled"].as_bool(),
            Some(matches!(p.precision, Precision::Bf16 | Precision::AmpBf16)),
            "{q}"
        );
        let alone = import_one("ds_config.json", &ds).plan;
        assert_eq!(
            (alone.zero, alone.micro_batch, alone.gpus),
            (p.zero, p.micro_batch, processes),
            "{q}"
        );
        // An axolotl file names its DeepSpeed file only where the plan runs DeepSpeed (shard=deepspeed, or ZeRO-1).
        let deepspeed = p.gpus > 1
            && !p.split_layers
            && (p.zero == 1 || (p.zero > 1 && p.sharding().shard == Shard::Deepspeed));
        if deepspeed {
            let (_, axo) = exported(q, ExportFormat::Axolotl);
            let both = import(&[("axolotl.yaml", &axo), ("ds_config.json", &ds)]).unwrap();
            assert_eq!(both.plan.to_query(), p.to_query(), "{q}: {:?}", both.notes);
            assert!(
                !both.notes.iter().any(|n| n.contains("replaces")),
                "{q}: {:?}",
                both.notes
            );
            // A person's axolotl file has no peakplan line: the DeepSpeed file supplies the sharding.
            let bare = import(&[
                ("axolotl.yaml", &without_plan_line(&axo)),
                ("ds_config.json", &ds),
            ])
            .unwrap();
            assert_axolotl_keys(q, &p, &bare.plan);
            assert_eq!((bare.plan.gpus, bare.plan.zero), (p.gpus, p.zero), "{q}");
        }
    }
}

#[test]
fn torchtune_exports_parse_and_round_trip() {
    for q in PLANS {
        let (p, text) = exported(q, ExportFormat::Torchtune);
        let v = yaml::parse(&text).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert_eq!(v["batch_size"].as_u64(), Some(p.micro_batch), "{q}");
        assert_eq!(
            v["tokenizer"]["max_seq_len"].as_u64(),
            Some(p.seq_len),
            "{q}"
        );
        assert_eq!(
            v["enable_activation_checkpointing"].as_bool(),
            Some(p.checkpointing.on()),
            "{q}"
        );
        if p.method != Method::Full {
            assert_eq!(v["model"]["lora_rank"].as_u64(), Some(p.rank), "{q}");
            assert_eq!(
                v["model"]["quantize_base"].as_bool(),
                Some(p.method == Method::Qlora),
                "{q}"
            );
        }
        // The plan line holds the plan as torchtune runs it: its framework profile, no mixed precision.
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("# peakplan: "))
            .unwrap();
        let as_run = plan(line);
        assert_eq!(as_run.framework.key(), "torchtune", "{q}");
        let back = import_one("torchtune.yaml", &text);
        assert_eq!(
            back.plan.to_query(),
            as_run.to_query(),
            "{q}: {:?}",
            back.notes
        );
        assert!(
            !back.notes.iter().any(|n| n.contains("replaces")),
            "{q}: {:?}",
            back.notes
        );
        let bare = import_one("torchtune.yaml", &without_plan_line(&text)).plan;
        assert_eq!(
            (
                bare.micro_batch,
                bare.seq_len,
                bare.optimizer,
                bare.precision
            ),
            (
                as_run.micro_batch,
                as_run.seq_len,
                as_run.optimizer,
                as_run.precision
            ),
            "{q}"
        );
        if p.method != Method::Full || text.contains("_component_: torchtune.models.") {
            assert_eq!(bare.method, p.method, "{q}: method");
        }
        if p.method != Method::Full {
            assert_eq!(bare.rank, p.rank, "{q}");
        }
        if text.contains("_component_: torchtune.models.") {
            assert_eq!(bare.model, p.model, "{q}: model from the builder");
        }
    }
}

#[test]
fn export_formats_have_stable_keys() {
    for f in ExportFormat::ALL {
        assert_eq!(ExportFormat::from_key(f.key()), Some(*f));
    }
    assert_eq!(ExportFormat::from_key("yaml"), None);
    assert!(ExportFormat::accepted().contains("deepspeed"));
}

#[test]
fn a_layer_split_plan_exports_one_process_over_its_gpus() {
    let q = "model=llama-2-70b&method=qlora&split=1&gpus=3&b=2&ga=4";
    let (p, axolotl) = exported(q, ExportFormat::Axolotl);
    // device_map="auto" in one process: no data-parallel launch, no DeepSpeed.
    assert!(!axolotl.contains("--num_processes"), "{axolotl}");
    assert!(
        axolotl.contains("# Run: axolotl train axolotl.yaml"),
        "{axolotl}"
    );
    assert!(axolotl.contains("\ndevice_map: auto\n"), "{axolotl}");
    assert!(!axolotl.contains("\ndeepspeed:"), "{axolotl}");
    // Without the plan line, device_map alone says the layers are split.
    let bare = import_one("axolotl.yaml", &without_plan_line(&axolotl));
    assert!(bare.plan.split_layers, "{:?}", bare.notes);
    // DeepSpeed's global batch counts processes, not GPUs: one process of micro-batch 2 x 4 accumulations.
    let (_, ds) = exported(q, ExportFormat::Deepspeed);
    let v: Value = serde_json::from_str(&ds).unwrap();
    assert_eq!(v["train_batch_size"].as_u64(), Some(2 * 4), "{ds}");
    // Data parallelism over the same 3 GPUs launches 3 processes and counts them.
    let (_, ddp) = exported(&q.replace("split=1", "split=0"), ExportFormat::Axolotl);
    assert!(ddp.contains("--num_processes 3"), "{ddp}");
    assert!(!ddp.contains("device_map"), "{ddp}");
    let (_, ds3) = exported(&q.replace("split=1", "split=0"), ExportFormat::Deepspeed);
    let v: Value = serde_json::from_str(&ds3).unwrap();
    assert_eq!(v["train_batch_size"].as_u64(), Some(2 * 3 * 4), "{ds3}");
    assert_eq!(p.gpus, 3);
}

/// A preference plan in the YAML exports: axolotl's `rl:` key (and the plan line) carry it back; torchtune's
/// override says that it is the SFT recipe's, never a silent SFT config under a DPO plan line.
#[test]
fn yaml_exports_say_what_they_make_of_a_preference_task() {
    for q in [
        "model=llama-3.2-1b&method=lora&task=dpo&b=2&s=512&prompt=128",
        "model=llama-3.2-1b&method=full&task=kto&b=2&s=512&ref=precomputed",
    ] {
        let (p, yaml) = exported(q, ExportFormat::Axolotl);
        assert!(yaml.contains(&format!("\nrl: {}\n", p.task.key())), "{q}");
        let back = import_one("axolotl.yaml", &yaml);
        assert_eq!(back.plan.to_query(), p.to_query(), "{q}: {:?}", back.notes);
        // Without the plan line, rl: alone gives the task.
        let bare = import_one("axolotl.yaml", &without_plan_line(&yaml));
        assert_eq!(bare.plan.task, p.task, "{q}: {:?}", bare.notes);
        let (_, tt) = exported(q, ExportFormat::Torchtune);
        assert!(
            tt.contains(&format!(
                "# task={} is planned over TRL's trainers only",
                p.task.key()
            )),
            "{q}"
        );
        let line = tt.lines().find(|l| l.starts_with("# peakplan:")).unwrap();
        assert!(!line.contains("task="), "{q}: {line}");
    }
}
