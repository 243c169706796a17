//! The Python export: every script compiles, and its constants and calls name the plan's settings.

use crate::{constant, exported, py, py_compile, PLANS};
use peakplan_core::interop::ExportFormat;
use peakplan_core::plan::{Alloc, Method, Peft, Plan, Precision, Shard, TokenTraining};
use peakplan_core::{estimate, preset_arch, Target};

/// Each plan's query, the plan, and its script.
fn scripts() -> impl Iterator<Item = (&'static str, Plan, String)> {
    PLANS.iter().map(|q| {
        let (p, src) = exported(q, ExportFormat::Python);
        (*q, p, src)
    })
}

/// The constant `name` of a script, which must be there.
fn konst(q: &str, src: &str, name: &str) -> String {
    constant(src, name).unwrap_or_else(|| panic!("{q}: no {name}"))
}

/// The script's predicted peaks are the estimate's.
fn predicts(q: &str, src: &str, e: &peakplan_core::Estimate) {
    assert_eq!(
        konst(q, src, "PREDICTED_PEAK_ALLOCATED_BYTES"),
        e.peak_allocated_bytes.to_string(),
        "{q}"
    );
    assert_eq!(
        konst(q, src, "PREDICTED_PEAK_RESERVED_BYTES"),
        e.peak_reserved_bytes.to_string(),
        "{q}"
    );
}

/// Every script is valid Python (when python3 is there).
#[test]
fn python_exports_compile() {
    let scripts: Vec<String> = scripts().map(|(_, _, src)| src).collect();
    py_compile(&scripts);
}

/// The constants: the shape, checkpointing, optimizer, attention, precision and peakplan's prediction.
#[test]
fn python_exports_name_the_plan_and_its_prediction() {
    for (q, p, src) in scripts() {
        let c = |name: &str| konst(q, &src, name);
        assert_eq!(c("MICRO_BATCH"), p.micro_batch.to_string(), "{q}");
        assert_eq!(c("SEQ_LEN"), p.seq_len.to_string(), "{q}");
        assert_eq!(c("GPUS"), p.gpus.to_string(), "{q}");
        assert_eq!(c("GRADIENT_CHECKPOINTING"), py(p.checkpointing.on()), "{q}");
        assert_eq!(c("OPTIM"), format!("\"{}\"", p.optimizer.key()), "{q}");
        let attn = match p.attn.key() {
            "flash" => "flash_attention_2",
            other => other,
        };
        assert_eq!(c("ATTN_IMPLEMENTATION"), format!("\"{attn}\""), "{q}");
        let mut hf = p.clone();
        // The script runs the plan's sharding as resolved, with the Trainer's wrap policy (PEFT's) for LoRA.
        let sh = p.sharding();
        hf.shard = sh.shard;
        hf.wrap = peakplan_core::plan::Wrap::Lora;
        hf.grad_sync = if sh.sync_each_batch {
            peakplan_core::plan::GradSync::EachBatch
        } else {
            peakplan_core::plan::GradSync::Accumulate
        };
        hf.framework = peakplan_core::plan::Framework::Hf;
        // The Trainer has neither of torchtune's optimizer-in-backward or activation offloading.
        hf.optimizer_in_backward = false;
        hf.offload_activations = false;
        hf.hold_logits_bits = 0;
        let e = estimate(preset_arch(&p), &hf);
        predicts(q, &src, &e);
        assert!(src.contains("torch.cuda.max_memory_allocated()"), "{q}");
        assert!(src.contains("torch.cuda.max_memory_reserved()"), "{q}");
        let deepspeed = p.gpus > 1
            && !p.split_layers
            && (p.zero == 1 || (p.zero > 1 && sh.shard == Shard::Deepspeed));
        let amp_bf16 = p.precision == Precision::AmpBf16
            || (p.method == Method::Full && p.precision == Precision::Bf16)
            || (deepspeed && p.precision == Precision::Bf16);
        assert_eq!(c("BF16"), py(amp_bf16), "{q}");
    }
}

/// The PEFT config: its class, rank, alpha, dropout, target modules and adapter dtype.
#[test]
fn python_exports_write_the_planned_adapter() {
    for (q, p, src) in scripts() {
        let c = |name: &str| konst(q, &src, name);
        if p.method != Method::Full
            && matches!(
                p.peft,
                Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa
            )
        {
            assert!(
                src.contains(&format!("    r={},", p.rank)),
                "{q}: LoRA rank"
            );
            assert!(
                src.contains(&format!("    lora_alpha={},", 2 * p.rank)),
                "{q}: lora_alpha"
            );
            assert!(
                src.contains(&format!(
                    "    lora_dropout={},",
                    if p.dropout == 0.0 {
                        "0.0".to_string()
                    } else {
                        p.dropout.to_string()
                    }
                )),
                "{q}: dropout"
            );
            let line = src.lines().find(|l| l.contains("target_modules=")).unwrap();
            if p.targets.key() == "all-linear" {
                assert!(line.contains("\"all-linear\""), "{q}: {line}");
            } else {
                for (t, name) in [
                    (Target::Q, "q"),
                    (Target::O, "o"),
                    (Target::Down, "down"),
                    (Target::LmHead, "lm_head"),
                ] {
                    if p.targets.contains(t) {
                        let expect = match (p.model.id(), name) {
                            ("phi-3-mini", "q") => "qkv_proj",
                            ("pythia-1.4b" | "falcon-7b", "q") => "query_key_value",
                            ("pythia-1.4b", "down") => "dense_4h_to_h",
                            ("starcoderbase-1b", "q") => "c_attn",
                            ("starcoderbase-1b", "o") => "attn.c_proj",
                            (_, "lm_head") => "lm_head",
                            (_, "o") => "o_proj",
                            (_, "down") => "down_proj",
                            _ => "q_proj",
                        };
                        assert!(
                            line.contains(&format!("\"{expect}\"")),
                            "{q}: {line} lacks {expect}"
                        );
                    }
                }
            }
            assert_eq!(
                c("ADAPTER_DTYPE"),
                format!(
                    "torch.{}",
                    match p.adapter_dtype.key() {
                        "fp32" => "float32",
                        "bf16" => "bfloat16",
                        _ => "float16",
                    }
                ),
                "{q}"
            );
        }
        match p.peft {
            Peft::Dora if p.method != Method::Full => assert!(src.contains("use_dora=True"), "{q}"),
            Peft::Rslora if p.method != Method::Full => {
                assert!(src.contains("use_rslora=True"), "{q}")
            }
            Peft::Ia3 if p.method != Method::Full => assert!(
                src.contains("IA3Config(") && src.contains("feedforward_modules=["),
                "{q}"
            ),
            Peft::Lorafa if p.method != Method::Full => assert_eq!(c("LORA_FA"), "True", "{q}"),
            Peft::Vera if p.method != Method::Full => {
                assert!(
                    src.contains("VeraConfig(") && src.contains(&format!("    r={},", p.rank)),
                    "{q}"
                )
            }
            Peft::Loha if p.method != Method::Full => {
                assert!(
                    src.contains("LoHaConfig(") && src.contains(&format!("    r={},", p.rank)),
                    "{q}"
                )
            }
            Peft::Oft if p.method != Method::Full => {
                assert!(
                    src.contains("OFTConfig(") && src.contains(&format!("    r={},", p.rank)),
                    "{q}"
                )
            }
            Peft::Ln if p.method != Method::Full => assert!(src.contains("LNTuningConfig("), "{q}"),
            Peft::Prompt | Peft::Prefix if p.method != Method::Full => assert!(
                src.contains(&format!(
                    "TuningConfig(num_virtual_tokens={},",
                    p.virtual_tokens
                )),
                "{q}"
            ),
            _ => {}
        }
    }
}

/// Token training: the whole embedding and LM head, or some embedding rows.
#[test]
fn python_exports_write_the_planned_token_training() {
    for (q, p, src) in scripts() {
        match p.tokens {
            TokenTraining::All if p.method != Method::Full => {
                assert!(src.contains("modules_to_save=["), "{q}")
            }
            TokenTraining::Rows(n) if p.method != Method::Full && p.peft != Peft::Ia3 => {
                assert!(
                    src.contains(&format!("trainable_token_indices=list(range({n}))")),
                    "{q}"
                )
            }
            _ => {}
        }
    }
}

/// The quantized base: GPTQ, LLM.int8 or 4-bit bitsandbytes, and nothing outside QLoRA.
#[test]
fn python_exports_write_the_planned_quantization() {
    for (q, p, src) in scripts() {
        let c = |name: &str| konst(q, &src, name);
        if let Some(bits) = p.gptq_bits() {
            assert!(
                src.contains(&format!("GPTQConfig(bits={bits}, use_exllama=False)"))
                    && !src.contains("BitsAndBytesConfig(")
                    && src.contains("PEAKPLAN_WEIGHTS to one"),
                "{q}: gptq"
            );
        } else if p.method == Method::Qlora && p.quant == peakplan_core::plan::Quant::Int8 {
            assert!(
                src.contains("BitsAndBytesConfig(load_in_8bit=True)")
                    && !src.contains("load_in_4bit=True"),
                "{q}: int8"
            );
        } else if p.method == Method::Qlora {
            assert!(
                src.contains(&format!("bnb_4bit_quant_type=\"{}\"", p.quant.key())),
                "{q}: quant"
            );
            assert!(
                src.contains(&format!("bnb_4bit_use_double_quant={}", py(p.double_quant))),
                "{q}: dq"
            );
            assert!(src.contains("load_in_4bit=True"), "{q}");
            assert_eq!(c("UPCAST"), py(p.upcast), "{q}");
        } else {
            assert!(
                !src.contains("BitsAndBytesConfig("),
                "{q}: quantization outside QLoRA"
            );
        }
    }
}

/// The run: compile, Liger, the loss, the launcher, the allocator and the DeepSpeed config.
#[test]
fn python_exports_write_the_planned_run() {
    for (q, p, src) in scripts() {
        assert_eq!(
            src.contains("torch_compile=True"),
            p.compile,
            "{q}: compile"
        );
        assert_eq!(
            src.contains("use_liger_kernel=True"),
            p.liger || p.loss.key() == "fused",
            "{q}: liger"
        );
        assert_eq!(
            src.contains("class ChunkedLossTrainer"),
            p.loss.key() == "chunked",
            "{q}: chunked loss"
        );
        if p.gpus > 1 && p.split_layers {
            // One process spreads the layers; the fullest GPU's peaks are compared.
            assert!(
                src.contains("device_map=\"auto\"") && !src.contains("torchrun"),
                "{q}: split"
            );
        } else if p.gpus > 1 {
            assert!(
                src.contains(&format!("torchrun --nproc_per_node {}", p.gpus)),
                "{q}: launcher"
            );
        }
        // The allocator state: expandable segments are configured before torch starts CUDA; an emptied cache
        // is emptied before every step.
        let env =
            src.find("os.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"expandable_segments:True\"");
        assert_eq!(
            env.is_some(),
            p.allocator == Alloc::Expandable,
            "{q}: expandable"
        );
        if let Some(at) = env {
            assert!(
                at < src.find("import torch").unwrap(),
                "{q}: set after torch loads"
            );
        }
        assert_eq!(
            src.contains("callbacks=[EmptyCacheBeforeEachStep()]")
                && src.contains("torch.cuda.empty_cache()\n"),
            p.allocator == Alloc::Emptied,
            "{q}: emptied"
        );
        let data_parallel = p.gpus > 1 && !p.split_layers;
        let shard = p.sharding().shard;
        if data_parallel && (p.zero == 1 || (p.zero > 1 && shard == Shard::Deepspeed)) {
            assert!(
                src.contains(&format!("\"stage\": {},", p.zero)),
                "{q}: DeepSpeed stage"
            );
        } else {
            assert!(src.contains("DEEPSPEED = None"), "{q}");
        }
        let fsdp = data_parallel && p.zero > 1 && shard != Shard::Deepspeed;
        assert_eq!(
            konst(q, &src, "FSDP") != "\"\"",
            fsdp,
            "{q}: FSDP only where the plan runs it"
        );
    }
}

/// The script's sharding, read back: its `TrainingArguments` (`fsdp`, `fsdp_config`, `accelerator_config`) as a
/// `TrainingArguments` JSON import to the plan's zero, shard, gsync and cpuoff.
#[test]
fn python_exports_round_trip_their_sharding() {
    let mut fsdp_plans = 0;
    for (q, p, src) in scripts() {
        let fsdp = konst(q, &src, "FSDP");
        if fsdp == "\"\"" {
            continue;
        }
        fsdp_plans += 1;
        let config = konst(q, &src, "FSDP_CONFIG")
            .replace("True", "true")
            .replace("False", "false");
        let sync = konst(q, &src, "SYNC_EACH_BATCH") == "True";
        let args = format!(
            r#"{{"per_device_train_batch_size": {}, "fsdp": {fsdp}, "fsdp_config": {config}, "accelerator_config": {{"gradient_accumulation_kwargs": {{"sync_each_batch": {sync}}}}}}}"#,
            p.micro_batch
        );
        let back = crate::import_one("training_args.json", &args);
        let (got, want) = (back.plan.sharding(), p.sharding());
        assert_eq!(got.shard, want.shard, "{q}: {args} {:?}", back.notes);
        assert_eq!(got.sync_each_batch, want.sync_each_batch, "{q}: {args}");
        assert_eq!(
            (back.plan.zero, back.plan.cpu_offload),
            (p.zero, p.cpu_offload),
            "{q}: {args}"
        );
        assert!(back.unsupported.is_empty(), "{q}: {:?}", back.unsupported);
    }
    assert!(fsdp_plans >= 5, "{fsdp_plans} FSDP plans");
}

/// A Hub model at a revision other than `main` loads that revision when its id is the weights (the revision was
/// dropped: `PEAKPLAN_WEIGHTS=org/name` loaded `main`); at `main` the script names none.
#[test]
fn python_exports_load_the_planned_hub_revision() {
    let mut scripts = Vec::new();
    for (q, revision) in [
        ("model=acme/custom-7b@v2&method=lora", Some("v2")),
        (
            "model=acme/custom-7b@refs/pr/3&method=qlora",
            Some("refs/pr/3"),
        ),
        ("model=acme/custom-7b@main&method=qlora", None),
        ("model=acme/custom-7b&method=lora", None),
    ] {
        let (_, src) = exported(q, ExportFormat::Python);
        assert_eq!(konst(q, &src, "HF_ID"), "\"acme/custom-7b\"", "{q}");
        assert_eq!(
            constant(&src, "HF_REVISION"),
            revision.map(|r| format!("\"{r}\"")),
            "{q}"
        );
        let loads = src.matches("from_pretrained(").count();
        let with_revision = src.matches("revision=weights_revision(weights), ").count();
        match revision {
            Some(r) => {
                assert!(
                    loads > 0 && with_revision == loads,
                    "{q}: {with_revision} of {loads}"
                );
                assert!(
                    src.contains(&format!("PEAKPLAN_WEIGHTS=acme/custom-7b (a Hub id or a local folder; that id loads revision {r}, as planned)")),
                    "{q}"
                );
                assert!(
                    src.contains("return HF_REVISION if weights == HF_ID else \"main\""),
                    "{q}"
                );
            }
            None => assert!(!src.contains("revision"), "{q}"),
        }
        scripts.push(src);
    }
    py_compile(&scripts);
}

/// Preference plans: DPO and KTO under LoRA, QLoRA and full fine-tuning, each reference; ORPO, SimPO and CPO.
const PREFERENCE_PLANS: &[&str] = &[
    "model=llama-3.2-1b&method=lora&task=dpo&b=2&s=512&prompt=128",
    "model=llama-3.2-1b&method=full&task=dpo&b=1&s=1024&prec=bf16",
    "model=llama-3.1-8b&method=qlora&task=dpo&ref=precomputed&b=1&s=1024",
    "model=qwen2.5-0.5b&method=full&task=kto&b=2&s=512&ref=precomputed",
    "model=llama-3.2-1b&method=lora&task=kto&b=4&s=768&prompt=256&ref=model",
    "model=llama-3.2-1b&method=lora&peft=dora&task=dpo&ref=none&b=2&s=256",
    "model=llama-3.2-1b&method=lora&task=orpo&b=2&s=512&prompt=128",
    "model=qwen2.5-0.5b&method=full&task=simpo&b=2&s=512&prec=bf16",
    "model=llama-3.1-8b&method=qlora&task=cpo&b=1&s=1024",
];

/// A preference plan's script trains TRL's own trainer on examples of the plan's lengths, with the reference TRL
/// makes, and prints the prediction for the plan (its task included); it compiles.
#[test]
fn python_exports_of_preference_tasks_drive_trl() {
    let mut all = Vec::new();
    for q in PREFERENCE_PLANS {
        let (p, src) = exported(q, ExportFormat::Python);
        let c = |name: &str| konst(q, &src, name);
        let (module, config, trainer) = match p.task.key() {
            "dpo" => ("trl", "DPOConfig", "DPOTrainer"),
            "kto" => ("trl", "KTOConfig", "KTOTrainer"),
            "orpo" => ("trl.experimental.orpo", "ORPOConfig", "ORPOTrainer"),
            _ => ("trl.experimental.cpo", "CPOConfig", "CPOTrainer"),
        };
        assert!(
            src.contains(&format!("from {module} import {config}, {trainer}")),
            "{q}"
        );
        // ORPO, SimPO and CPO take no reference; SimPO is CPO's simpo loss without its NLL term.
        let reference_task = matches!(p.task.key(), "dpo" | "kto");
        assert_eq!(src.contains("ref_model=ref_model"), reference_task, "{q}");
        assert_eq!(
            src.contains("loss_type=\"simpo\"") && src.contains("cpo_alpha=0.0"),
            p.task.key() == "simpo",
            "{q}"
        );
        assert!(src.contains(&format!("    args = {config}(")), "{q}");
        assert!(src.contains(&format!("    trainer = {trainer}(")), "{q}");
        assert!(src.contains("max_length=SEQ_LEN"), "{q}");
        assert_eq!(c("TASK"), format!("\"{}\"", p.task.key()), "{q}");
        assert_eq!(c("PROMPT_TOKENS"), p.prompt_tokens().to_string(), "{q}");
        assert_eq!(
            c("COMPLETION_TOKENS"),
            p.completion_tokens().to_string(),
            "{q}"
        );
        let reference = p.reference_source().key();
        assert_eq!(c("REFERENCE"), format!("\"{reference}\""), "{q}");
        if reference_task {
            let precompute = matches!(reference, "precomputed" | "none");
            assert_eq!(c("PRECOMPUTE_REF_LOG_PROBS"), py(precompute), "{q}");
        } else {
            assert!(!src.contains("precompute_ref_log_probs"), "{q}");
        }
        // PEFT through the trainer's peft_config, as TRL is driven (no reference adapter copy).
        assert_eq!(
            src.contains("peft_config=LORA"),
            p.method != Method::Full,
            "{q}"
        );
        assert!(!src.contains("get_peft_model(model, LORA"), "{q}");
        // KTO's examples are unpaired and labelled; DPO's are pairs.
        assert_eq!(
            src.contains("\"label\": i % 2 == 0"),
            p.task.key() == "kto",
            "{q}"
        );
        assert_eq!(
            src.contains("\"rejected\": rejected"),
            p.task.key() != "kto",
            "{q}"
        );
        assert!(src.contains(" trl datasets"), "{q}");
        let e = estimate(preset_arch(&p), &p);
        predicts(q, &src, &e);
        all.push(src);
    }
    // An SFT plan's script has none of it.
    let (_, sft) = exported(PLANS[0], ExportFormat::Python);
    assert!(!sft.contains("trl") && sft.contains("    args = TrainingArguments("));
    py_compile(&all);
}

/// An `fw=unsloth` plan's Python export is Unsloth's own script: it compiles, loads through FastLanguageModel
/// with the planned switches, and carries the prediction for fw=unsloth (host memory too).
#[test]
fn unsloth_plans_export_an_unsloth_script_with_their_prediction() {
    let queries = [
        "model=llama-3.1-8b&method=qlora&r=16&b=2&s=2048&ga=4&fw=unsloth",
        "model=qwen2.5-7b&method=lora&r=32&targets=q,v&b=1&s=8192&gc=1&loss=kernel&alloc=cached&prec=amp_fp16&fw=unsloth",
        "model=llama-3.2-1b&method=full&prec=bf16&b=4&s=1024&opt=adamw_torch&fw=unsloth",
    ];
    let mut scripts = Vec::new();
    for q in queries {
        let (p, src) = exported(q, ExportFormat::Python);
        assert!(src.contains("from unsloth import FastLanguageModel"), "{q}");
        assert!(!src.contains("{{"), "{q}: an unfilled template field");
        let e = estimate(preset_arch(&p), &p);
        let predicted = format!(
            "PREDICTED = {{\"allocated\": {}, \"reserved\": {}, \"device\": {}, \"host\": {}}}",
            e.peak_allocated_bytes, e.peak_reserved_bytes, e.device_bytes, e.host_bytes
        );
        assert!(src.contains(&predicted), "{q}: {predicted}");
        let has = |s: &str| src.contains(s);
        match p.method {
            Method::Qlora => {
                assert!(has("load_in_4bit=True") && has("use_gradient_checkpointing=\"unsloth\""))
            }
            Method::Lora => assert!(
                has("load_in_4bit=False")
                    && has("use_gradient_checkpointing=True")
                    && has("target_modules=[\"q_proj\", \"v_proj\"]")
                    && has("os.environ[\"UNSLOTH_RETURN_LOGITS\"] = \"1\"")
                    && has("expandable_segments:False")
                    && has("fp16=True")
            ),
            Method::Full => {
                assert!(has("full_finetuning=True") && !has("get_peft_model") && has("bf16=True"))
            }
        }
        scripts.push(src);
    }
    py_compile(&scripts);
}

/// GRPO plans' scripts: TRL's GRPOTrainer on random prompts with a length reward, the round's batch as TRL counts
/// it (completions a micro-batch), generation where the plan puts it; each compiles and carries the prediction.
/// (One ran to its end on CPU, its CUDA calls stubbed, with TRL 1.16: every completion ran its full length.)
#[test]
fn python_exports_of_grpo_plans_drive_grpo_trainer() {
    let mut all = Vec::new();
    for (q, micro_batch, use_vllm, mode) in [
        (
            "model=qwen2.5-1.5b&method=lora&task=grpo&b=2&gens=8&ga=4&prompt=256&completion=1024&beta=0.04",
            "4",
            "False",
            "colocate",
        ),
        (
            "model=llama-3.1-8b&method=qlora&task=grpo&b=1&gens=8&prompt=256&completion=512&gen=vllm_colocate&vmem=0.4",
            "8",
            "True",
            "colocate",
        ),
        (
            "model=qwen2.5-0.5b&method=full&task=grpo&gens=4&prompt=64&completion=128&beta=0.1&gen=vllm_server",
            "4",
            "True",
            "server",
        ),
    ] {
        let (p, src) = exported(q, ExportFormat::Python);
        let c = |name: &str| konst(q, &src, name);
        assert_eq!(c("MICRO_BATCH"), micro_batch, "{q}");
        assert_eq!(c("GENERATIONS"), p.generations.to_string(), "{q}");
        assert_eq!(c("COMPLETION_TOKENS"), p.completion_tokens().to_string(), "{q}");
        assert_eq!(c("PROMPT_TOKENS"), p.prompt_tokens().to_string(), "{q}");
        assert_eq!(c("USE_VLLM"), use_vllm, "{q}");
        assert_eq!(c("VLLM_MODE"), format!("\"{mode}\""), "{q}");
        assert_eq!(c("VLLM_GPU_MEMORY_UTILIZATION"), p.vllm_memory.to_string(), "{q}");
        assert!(src.contains("from trl import GRPOConfig, GRPOTrainer"), "{q}");
        assert!(src.contains("reward_funcs=length_reward"), "{q}");
        assert!(!src.contains("\"chosen\""), "{q}");
        let e = estimate(preset_arch(&p), &p);
        predicts(q, &src, &e);
        all.push(src);
    }
    py_compile(&all);
}
