//! Interop tests: every export for every method and a ZeRO-3 plan (the Python compiles and names the plan's
//! settings; YAML and JSON exports parse and import back to the same plan), hand-written samples of each input
//! format in `tests/data/interop/`, merging, and clear errors for malformed input.
#![allow(clippy::unwrap_used)]

use peakplan_core::interop::{export, import, import_over, yaml, ExportFormat, Imported};
use peakplan_core::plan::{Alloc, Method, Peft, Plan, Precision, TokenTraining};
use peakplan_core::{estimate, preset_arch, presets, Target};
use serde_json::Value;
use std::path::PathBuf;

/// Plans covering every method, sharding, precisions, PEFT kinds, losses and model families.
const PLANS: &[&str] = &[
    "model=llama-2-7b&method=qlora&r=64&targets=all-linear&b=4&s=2048&gc=1&opt=paged_adamw_8bit&quant=nf4&dq=1",
    "model=mistral-7b&method=lora&r=16&targets=q,k,v,o&b=2&s=4096&gc=1&attn=flash",
    "model=llama-2-70b&method=full&b=1&s=2048&gc=1&gpus=8&zero=3",
    "model=llama-3.1-8b&method=full&prec=bf16&b=2&s=1024&gc=0&attn=eager&opt=adamw_torch_fused",
    "model=qwen2.5-0.5b&method=qlora&r=8&targets=q,v,lm_head&dropout=0.05&quant=fp4&dq=0&upcast=1&adtype=bf16&loss=chunked&chunk=128&prec=amp_fp16",
    "model=phi-3-mini&method=lora&r=32&targets=q,o,down&peft=dora&tt=all&compile=1&liger=1&loss=fused",
    "model=pythia-1.4b&method=lora&targets=q,k,v,up,down&peft=rslora&prec=fp32&opt=sgd",
    "model=falcon-7b&method=qlora&peft=ia3&targets=q,k,v,down&gpus=4&zero=2&tt=64",
    "model=gpt3-175b&method=full&gpus=64&zero=3&opt=adafactor&s=2048",
    "model=mixtral-8x7b&method=qlora&r=8&targets=all-linear&peft=lorafa&gpus=2&zero=0",
    "model=gemma-2-9b&method=lora&targets=q,k,v,o,gate,up,down,lm_head&prec=bf16&opt=paged_adamw_32bit",
    "model=starcoderbase-1b&method=lora&targets=q,o,up&b=8&s=512&qsave=1&fw=litgpt",
    "model=tinyllama-1.1b&method=qlora&gpus=4&zero=3&dq=0&opt=adamw_8bit",
    "model=llama-3.2-3b&method=lora&peft=vera&r=256&targets=q,v&prec=bf16",
    "model=llama-3.2-1b&method=qlora&peft=loha&r=32&targets=q,v",
    "model=qwen2.5-0.5b&method=lora&peft=oft&r=32&targets=q,k,v,o",
    "model=llama-3.2-3b&method=lora&peft=ln&b=4&s=768&prec=bf16",
    "model=llama-3.2-1b&method=qlora&peft=prompt&vt=200",
    "model=mistral-7b&method=lora&peft=prefix&vt=30&gpus=2&zero=3",
    "model=llama-3.2-3b&method=full&fw=torchtune&oib=1&aoff=1&compile=1&loss=chunked&prec=bf16&opt=adamw_8bit&b=2&s=4096",
    "model=llama-2-7b&method=lora&fw=torchtune&aoff=1&loss=standard&prec=bf16",
    "model=llama-2-70b&method=qlora&r=64&targets=all-linear&gpus=2&zero=3&cpuoff=1&b=2",
    "model=llama-2-13b&method=full&gpus=4&zero=2&cpuoff=1&ga=8",
    "model=mistral-7b&method=lora&ga=16&b=2&gpus=2&zero=3",
    "model=llama-2-7b&method=qlora&quant=int8&r=32&targets=all-linear&b=2&s=4096&prec=amp_fp16&opt=adamw_8bit",
    "model=llama-2-7b&method=qlora&r=8&targets=q,v&b=4&s=1024&gc=1&loss=kernel&attn=flash",
    "model=llama-2-13b&method=qlora&quant=int8&r=8&targets=q,v&gpus=2&split=1&b=1&s=512&gc=1",
    "model=mistral-7b&method=lora&r=16&gpus=4&split=1&prec=bf16",
    "model=llama-2-13b&method=qlora&quant=gptq4&r=8&targets=q,v&b=2&s=2048&prec=amp_fp16",
    "model=mistral-7b&method=qlora&quant=gptq8&r=16&targets=all-linear&gc=0&b=1&s=512",
    "model=llama-3.2-3b&method=lora&peft=ia3&targets=k,v,down&b=4&s=768&prec=bf16&gc=0&alloc=emptied",
    "model=llama-3.1-8b&method=qlora&b=2&s=4096&alloc=expandable",
];

fn plan(q: &str) -> Plan {
    let p = Plan::parse_query(q);
    assert!(p.diagnostics.is_empty(), "{q}: {:?}", p.diagnostics);
    p.plan
}

fn exported(q: &str, f: ExportFormat) -> (Plan, String) {
    let p = plan(q);
    let text = export(&p, preset_arch(&p), f);
    (p, text)
}

fn data(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/interop")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn import_one(name: &str, text: &str) -> Imported {
    import(&[(name, text)]).unwrap_or_else(|e| panic!("{e}"))
}

fn without_plan_line(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("# peakplan:"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn py(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The integer constant `NAME = 123` of a script.
fn constant(src: &str, name: &str) -> Option<String> {
    src.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .map(|v| v.split("  #").next().unwrap_or(v).trim().to_string())
}

#[test]
fn python_exports_compile_and_name_the_plan() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        println!(
            "note: python3 is absent; the exported scripts are checked for their settings only"
        );
    }
    for (i, q) in PLANS.iter().enumerate() {
        let (p, src) = exported(q, ExportFormat::Python);
        if python {
            let file = std::env::temp_dir()
                .join(format!("peakplan-interop-{}-{i}.py", std::process::id()));
            std::fs::write(&file, &src).unwrap();
            let out = std::process::Command::new("python3")
                .args(["-m", "py_compile"])
                .arg(&file)
                .output()
                .unwrap();
            let _ = std::fs::remove_file(&file);
            assert!(
                out.status.success(),
                "{q}: the script does not compile: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let c = |name: &str| constant(&src, name).unwrap_or_else(|| panic!("{q}: no {name}"));
        assert_eq!(c("MICRO_BATCH"), p.micro_batch.to_string(), "{q}");
        assert_eq!(c("SEQ_LEN"), p.seq_len.to_string(), "{q}");
        assert_eq!(c("GPUS"), p.gpus.to_string(), "{q}");
        assert_eq!(c("GRADIENT_CHECKPOINTING"), py(p.grad_checkpointing), "{q}");
        assert_eq!(c("OPTIM"), format!("\"{}\"", p.optimizer.key()), "{q}");
        let attn = match p.attn.key() {
            "flash" => "flash_attention_2",
            other => other,
        };
        assert_eq!(c("ATTN_IMPLEMENTATION"), format!("\"{attn}\""), "{q}");
        let mut hf = p.clone();
        hf.framework = peakplan_core::plan::Framework::Hf;
        // The Trainer has neither of torchtune's optimizer-in-backward or activation offloading.
        hf.optimizer_in_backward = false;
        hf.offload_activations = false;
        hf.hold_logits_bits = 0;
        let e = estimate(preset_arch(&p), &hf);
        assert_eq!(
            c("PREDICTED_PEAK_ALLOCATED_BYTES"),
            e.peak_allocated_bytes.to_string(),
            "{q}"
        );
        assert_eq!(
            c("PREDICTED_PEAK_RESERVED_BYTES"),
            e.peak_reserved_bytes.to_string(),
            "{q}"
        );
        assert!(src.contains("torch.cuda.max_memory_allocated()"), "{q}");
        assert!(src.contains("torch.cuda.max_memory_reserved()"), "{q}");
        let amp_bf16 = p.precision == Precision::AmpBf16
            || (p.method == Method::Full && p.precision == Precision::Bf16)
            || (p.gpus > 1 && p.zero > 0 && p.precision == Precision::Bf16);
        assert_eq!(c("BF16"), py(amp_bf16), "{q}");
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
                        let expect = match (p.model.as_str(), name) {
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
        if p.gpus > 1 && p.zero > 0 && !p.split_layers {
            assert!(
                src.contains(&format!("\"stage\": {},", p.zero)),
                "{q}: DeepSpeed stage"
            );
        } else {
            assert!(src.contains("DEEPSPEED = None"), "{q}");
        }
    }
}

/// Checks the keys an axolotl file itself carries (no `# peakplan:` line).
fn assert_axolotl_keys(q: &str, want: &Plan, got: &Plan) {
    if presets::model(&want.model)
        .is_some_and(|m| m.hf_id.contains('/') && !m.hf_id.starts_with('('))
    {
        assert_eq!(got.model, want.model, "{q}: model from base_model");
    }
    assert_eq!(got.method, want.method, "{q}: method");
    assert_eq!(got.micro_batch, want.micro_batch, "{q}: b");
    assert_eq!(got.seq_len, want.seq_len, "{q}: s");
    assert_eq!(got.grad_checkpointing, want.grad_checkpointing, "{q}: gc");
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
        assert_eq!(
            v["train_batch_size"].as_u64(),
            Some(p.micro_batch * p.gpus * p.grad_accumulation),
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
            (p.zero, p.micro_batch, p.gpus),
            "{q}"
        );
        if p.gpus > 1 {
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
            Some(p.grad_checkpointing),
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

fn check(got: &Imported, want_query: &str, unsupported: &[&str]) {
    let want = Plan::parse_query_over(Plan::default(), want_query);
    assert!(want.diagnostics.is_empty(), "{:?}", want.diagnostics);
    assert_eq!(
        got.plan.to_query(),
        want.plan.to_query(),
        "notes: {:?}",
        got.notes
    );
    let mut u = got.unsupported.clone();
    u.sort();
    let mut w: Vec<String> = unsupported.iter().map(|s| s.to_string()).collect();
    w.sort();
    assert_eq!(u, w);
}

#[test]
fn hand_written_samples_import_with_their_unsupported_fields() {
    let one = |f: &str| import_one(f, &data(f));
    check(
        &one("adapter_config.json"),
        "model=llama-2-7b&method=lora&r=16&targets=q,k,v,o&dropout=0.05",
        &[],
    );
    check(
        &one("adapter_config_dora.json"),
        "model=mistral-7b&method=lora&r=8&targets=q,v,gate,up,down&dropout=0.1&peft=dora&tt=all",
        &[
            "layers_to_transform",
            "modules_to_save: score",
            "target_modules: router",
        ],
    );
    check(
        &one("quantization_config.json"),
        "method=qlora&quant=fp4&dq=0&prec=amp_fp16",
        &[],
    );
    // LLM.int8 (`load_in_8bit`): LoRA over an 8-bit base.
    check(
        &one("quantization_config_int8.json"),
        "method=qlora&quant=int8",
        &[],
    );
    // A GPTQ checkpoint's config: its bits pick the base; groups of 128 are what peakplan counts.
    check(
        &one("quantization_config_gptq.json"),
        "method=qlora&quant=gptq8",
        &[],
    );
    let odd = import_one(
        "quantization_config.json",
        r#"{"quant_method": "gptq", "bits": 3, "group_size": 32}"#,
    );
    assert_eq!(odd.plan.quant, Plan::default().quant, "{:?}", odd.notes);
    assert!(
        odd.unsupported.iter().any(|u| u.contains("bits")),
        "{:?}",
        odd.unsupported
    );
    let grouped = import_one(
        "quantization_config.json",
        r#"{"quant_method": "gptq", "bits": 4, "group_size": 32}"#,
    );
    assert_eq!(grouped.plan.quant.key(), "gptq4");
    assert!(
        grouped.unsupported.iter().any(|u| u.contains("group_size")),
        "{:?}",
        grouped.unsupported
    );
    check(
        &one("config_with_quantization.json"),
        "model=mistral-7b&method=qlora&quant=nf4&dq=1&prec=amp_bf16",
        &["quantization_config.llm_int8_skip_modules"],
    );
    check(
        &one("training_args.json"),
        "b=8&ga=4&gc=1&prec=amp_bf16&opt=adamw_8bit&s=1024&zero=2&compile=0",
        &["auto_find_batch_size"],
    );
    let axo = one("axolotl_qlora.yaml");
    check(
        &axo,
        "model=llama-2-7b&method=qlora&r=32&targets=all-linear&dropout=0.05&s=4096&b=2&ga=4&opt=paged_adamw_32bit&prec=amp_bf16&gc=1&attn=flash&peft=lora",
        &["lora_on_cpu", "unsloth_lora_mlp"],
    );
    assert!(
        axo.notes.iter().any(|n| n.contains("gpus=1")),
        "{:?}",
        axo.notes
    );
    check(
        &one("deepspeed_zero3.json"),
        "zero=3&cpuoff=1",
        &["optimizer"],
    );
    check(
        &one("deepspeed_zero2_4gpu.json"),
        "zero=2&b=2&ga=8&gpus=4&prec=amp_bf16",
        &[],
    );
    check(
        &one("torchtune_qlora.yaml"),
        "fw=torchtune&model=llama-3.1-8b&method=qlora&r=8&targets=q,v,o,gate,up,down&dropout=0&b=2&ga=8&gc=1&prec=bf16&adtype=bf16&opt=adamw_torch_fused&compile=0&peft=lora&loss=chunked&aoff=0",
        &[],
    );
}

#[test]
fn unsloth_switches_import_as_their_mechanisms() {
    let got = import_one(
        "axolotl.yaml",
        "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nload_in_4bit: true\nunsloth_cross_entropy_loss: true\ngradient_checkpointing: unsloth\n",
    );
    assert_eq!(got.plan.loss.key(), "kernel", "{:?}", got.notes);
    assert!(got.plan.grad_checkpointing && got.plan.offload_activations);
    assert!(got.unsupported.is_empty(), "{:?}", got.unsupported);
}

#[test]
fn several_files_merge_and_later_ones_override_with_a_note() {
    // An adapter and a 4-bit config together are QLoRA: the quantization refines the method, without a note.
    let q = import(&[
        ("adapter_config.json", &data("adapter_config.json")),
        (
            "quantization_config.json",
            &data("quantization_config.json"),
        ),
    ])
    .unwrap();
    assert_eq!(q.plan.method, Method::Qlora);
    assert_eq!(
        (q.plan.rank, q.plan.quant.key(), q.plan.model.as_str()),
        (16, "fp4", "llama-2-7b")
    );
    assert!(
        !q.notes.iter().any(|n| n.contains("replaces")),
        "{:?}",
        q.notes
    );
    // The same two in the other order agree.
    let r = import(&[
        (
            "quantization_config.json",
            &data("quantization_config.json"),
        ),
        ("adapter_config.json", &data("adapter_config.json")),
    ])
    .unwrap();
    assert_eq!(r.plan, q.plan);
    // TrainingArguments say b=8, the axolotl file after them says b=2: the later file wins, with a note.
    let m = import(&[
        ("training_args.json", &data("training_args.json")),
        ("axolotl_qlora.yaml", &data("axolotl_qlora.yaml")),
    ])
    .unwrap();
    assert_eq!(m.plan.micro_batch, 2);
    assert!(
        m.notes.iter().any(|n| n.contains("b=2")
            && n.contains("replaces b=8")
            && n.contains("training_args.json")),
        "{:?}",
        m.notes
    );
    // A DeepSpeed file completes a person's axolotl file with the GPU count.
    let d = import(&[
        ("axolotl_qlora.yaml", &data("axolotl_qlora.yaml")),
        (
            "deepspeed_zero2_4gpu.json",
            &data("deepspeed_zero2_4gpu.json"),
        ),
    ])
    .unwrap();
    assert_eq!((d.plan.gpus, d.plan.zero, d.plan.micro_batch), (4, 2, 2));
    // Importing over a base plan keeps the keys that no file sets.
    let base = Plan {
        gpu: "a100-80gb".into(),
        micro_batch: 16,
        ..Plan::default()
    };
    let o = import_over(
        &base,
        &[("adapter_config.json", &data("adapter_config.json"))],
    )
    .unwrap();
    assert_eq!(
        (o.plan.gpu.as_str(), o.plan.micro_batch, o.plan.rank),
        ("a100-80gb", 16, 16)
    );
    assert!(o.carried.contains(&"r") && !o.carried.contains(&"b"));
}

#[test]
fn bad_values_keep_the_key_and_say_why() {
    let got = import_one(
        "axolotl.yaml",
        "adapter: lora\nlora_r: 0\nmicro_batch_size: many\nsequence_len: 512\n",
    );
    assert_eq!(
        (got.plan.rank, got.plan.micro_batch, got.plan.seq_len),
        (16, 1, 512)
    );
    assert!(
        got.notes.iter().any(|n| n.contains("r=0 is out of range")),
        "{:?}",
        got.notes
    );
    assert!(
        got.notes
            .iter()
            .any(|n| n.contains("micro_batch_size must be a whole number")),
        "{:?}",
        got.notes
    );
}

#[test]
fn malformed_inputs_give_clear_errors() {
    let huge = format!("lora_r: 8\n#{}\n", "x".repeat(2 << 20));
    let cases: &[(&str, &str, &str)] = &[
        ("bad.json", "{\"r\": 16,", "bad.json: is not valid JSON"),
        (
            "tabs.yaml",
            "adapter: lora\n\tlora_r: 8\n",
            "tabs.yaml: is not valid YAML: line 2: tabs",
        ),
        (
            "quote.yaml",
            "base_model: \"unterminated\nlora_r: 8\n",
            "line 1: a quoted string does not close",
        ),
        (
            "dup.yaml",
            "lora_r: 8\nlora_r: 16\n",
            "line 2: duplicate key `lora_r`",
        ),
        ("indent.yaml", "adapter: lora\n    lora_r: 8\n", "line 2"),
        ("list.yaml", "- adapter\n- lora\n", "must hold a mapping"),
        ("empty.yaml", "  \n\n", "empty.yaml: is empty"),
        (
            "unknown.json",
            "{\"foo\": 1, \"bar\": 2}",
            "is not a training config peakplan reads",
        ),
        (
            "anchor.yaml",
            "base_model: &m meta-llama/Llama-2-7b-hf\nadapter: lora\n",
            "anchors",
        ),
        ("tag.yaml", "lora_r: !!int 8\n", "tags"),
        (
            "docs.yaml",
            "lora_r: 8\n---\nlora_r: 9\n",
            "several YAML documents",
        ),
        (
            "flow.yaml",
            "lora_target_modules: [q_proj, v_proj\n",
            "never closes",
        ),
        (
            "adalora.json",
            "{\"peft_type\": \"ADALORA\", \"init_r\": 12, \"target_modules\": null}",
            "peft_type is `ADALORA`",
        ),
        ("huge.yaml", &huge, "huge.yaml: is"),
    ];
    for (name, text, want) in cases {
        match import(&[(name, text)]) {
            Ok(i) => panic!("{name}: accepted as {}", i.plan.to_query()),
            Err(e) => assert!(e.to_string().contains(want), "{name}: `{e}` lacks `{want}`"),
        }
    }
    assert_eq!(import(&[]).unwrap_err().to_string(), "no file given");
}

#[test]
fn truncated_and_mangled_inputs_never_panic() {
    for name in [
        "axolotl_qlora.yaml",
        "torchtune_qlora.yaml",
        "training_args.json",
        "deepspeed_zero3.json",
    ] {
        let text = data(name);
        for (i, _) in text.char_indices().step_by(3) {
            let _ = import(&[(name, &text[..i])]);
            let mangled: String = text[..i].replace(':', "").replace('-', "- - ") + &text[i..];
            let _ = import(&[(name, &mangled)]);
        }
    }
    let deep = "a:\n".to_string()
        + &(1..200)
            .map(|d| format!("{}k{d}:\n", " ".repeat(d)))
            .collect::<String>();
    assert!(yaml::parse(&deep).unwrap_err().message.contains("deeper"));
    let flow = format!("k: {}{}", "[".repeat(500), "]".repeat(500));
    assert!(yaml::parse(&flow).is_err());
}

#[test]
fn yaml_reader_reads_the_config_subset() {
    let text = r#"
# a comment
name: "quoted: with # hash"   # trailing comment
single: 'it''s'
plain: some text here
int: 42
neg: -3
float: 3e-4
yes: true
no: False
nothing:
tilde: ~
nested:
  deeper:
    value: 1
  list:
    - a
    - 'b'
compact:
- x
- y
items:
  - path: data/one
    type: alpaca
  - path: data/two
flow: [q_proj, "v_proj", 3]
flowmap: {a: 1, b: [x, y]}
multi: [
  one,
  two  # comment
]
block: |
  line one
    indented
  line three
folded: >-
  a
  b
"#;
    let v = yaml::parse(text).unwrap();
    assert_eq!(v["name"], "quoted: with # hash");
    assert_eq!(v["single"], "it's");
    assert_eq!(v["plain"], "some text here");
    assert_eq!(v["int"], 42);
    assert_eq!(v["neg"], -3);
    assert_eq!(v["float"].as_f64(), Some(3e-4));
    assert_eq!(v["yes"], true);
    assert_eq!(v["no"], false);
    assert!(v["nothing"].is_null() && v["tilde"].is_null());
    assert_eq!(v["nested"]["deeper"]["value"], 1);
    assert_eq!(v["nested"]["list"], serde_json::json!(["a", "b"]));
    assert_eq!(v["compact"], serde_json::json!(["x", "y"]));
    assert_eq!(v["items"][0]["type"], "alpaca");
    assert_eq!(v["items"][1]["path"], "data/two");
    assert_eq!(v["flow"], serde_json::json!(["q_proj", "v_proj", 3]));
    assert_eq!(v["flowmap"]["b"], serde_json::json!(["x", "y"]));
    assert_eq!(v["multi"], serde_json::json!(["one", "two"]));
    assert_eq!(v["block"], "line one\n  indented\nline three\n");
    assert_eq!(v["folded"], "a b");
    assert_eq!(
        yaml::scalar_text("meta-llama/Llama-2-7b-hf"),
        "meta-llama/Llama-2-7b-hf"
    );
    assert_eq!(yaml::scalar_text("true"), "\"true\"");
    assert_eq!(yaml::scalar_text("a: b"), "\"a: b\"");
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
fn peft_adapter_configs_of_every_kind_import() {
    let cases = [
        (
            r#"{"peft_type": "PREFIX_TUNING", "num_virtual_tokens": 30, "task_type": "CAUSAL_LM"}"#,
            "peft=prefix&vt=30",
        ),
        (
            r#"{"peft_type": "PROMPT_TUNING", "num_virtual_tokens": 200, "token_dim": 3072}"#,
            "peft=prompt&vt=200",
        ),
        (
            r#"{"peft_type": "VERA", "r": 256, "target_modules": ["q_proj", "v_proj"], "vera_dropout": 0.0}"#,
            "peft=vera",
        ),
        (
            r#"{"peft_type": "LOHA", "r": 32, "alpha": 32, "target_modules": ["q_proj", "v_proj"]}"#,
            "peft=loha",
        ),
        (
            r#"{"peft_type": "OFT", "r": 32, "oft_block_size": 0, "target_modules": ["q_proj", "v_proj"]}"#,
            "peft=oft",
        ),
        (
            r#"{"peft_type": "LN_TUNING", "target_modules": ["input_layernorm", "norm"]}"#,
            "peft=ln",
        ),
    ];
    for (text, want) in cases {
        let got = import(&[("adapter_config.json", text)])
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .plan
            .to_query();
        for part in want.split('&') {
            assert!(
                got.split('&').any(|p| p == part),
                "{text}: {got} lacks {part}"
            );
        }
    }
}
