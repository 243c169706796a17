//! Imports: hand-written samples of each input format in `tests/data/interop/`, merging, bad values, malformed
//! and truncated input, PEFT adapters of every kind, and the YAML reader.

use crate::{data, import_one, plan};
use peakplan_core::interop::{import, import_over, yaml, Imported};
use peakplan_core::plan::{Method, Plan};
use peakplan_core::GpuId;

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
fn unsloth_settings_import_as_a_plan_under_its_profile() {
    let one = |f: &str| import_one(f, &data(f));
    // A notebook's calls, pasted as Python: the upload names Llama 3.1 8B, 4-bit is the loader's default,
    // "unsloth" checkpointing is gc=offload, and what the settings leave out is Unsloth's (loss, allocator).
    let nb = one("unsloth_notebook.py");
    check(
        &nb,
        "model=llama-3.1-8b&method=qlora&r=16&b=2&s=2048&ga=4&opt=adamw_8bit&fw=unsloth",
        &[],
    );
    assert!(
        nb.notes.iter().any(|n| n.contains("bf16 = an expression")),
        "{:?}",
        nb.notes
    );
    // The same arguments as JSON: 16-bit LoRA, plain checkpointing, some targets, an unread field listed.
    check(
        &one("unsloth_settings.json"),
        "model=qwen2.5-7b&method=lora&r=32&targets=q,v&dropout=0.05&b=1&s=8192&ga=8&gc=1\
         &opt=adamw_torch_fused&prec=amp_bf16&fw=unsloth",
        &["neftune_noise_alpha"],
    );
    // An Unsloth plan read from a notebook is valid as a link.
    assert!(Plan::parse_query(&nb.plan.to_query())
        .diagnostics
        .is_empty());
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
        "b=8&ga=4&gc=1&prec=amp_bf16&opt=adamw_8bit&s=1024&zero=2&shard=deepspeed&compile=0&ds_overlap=1&ds_contig=1",
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
        // Its sizes: 1e9 as written (DeepSpeed's defaults, stated), the Trainer's `auto` fills left at auto.
        "zero=3&shard=deepspeed&cpuoff=1&ds_sub=1000000000&ds_live=1000000000&ds_reuse=1000000000&ds_overlap=1&ds_contig=1",
        &["optimizer"],
    );
    check(
        &one("deepspeed_zero2_4gpu.json"),
        "zero=2&shard=deepspeed&b=2&ga=8&gpus=4&prec=amp_bf16",
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
    assert!(got.plan.checkpointing.on() && got.plan.offload_activations);
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
        (q.plan.rank, q.plan.quant.key(), q.plan.model.id()),
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
        gpu: GpuId::parse("a100-80gb").unwrap(),
        micro_batch: 16,
        ..Plan::default()
    };
    let o = import_over(
        &base,
        &[("adapter_config.json", &data("adapter_config.json"))],
    )
    .unwrap();
    assert_eq!(
        (o.plan.gpu.id(), o.plan.micro_batch, o.plan.rank),
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

#[test]
fn a_base_model_outside_the_presets_is_a_hub_model() {
    // A Hub id that no preset carries imports as the Hub model, as `model=org/name` in a link does; a name that is
    // no Hub id keeps the model and says why.
    let hub = import(&[(
        "axolotl.yaml",
        "base_model: acme/custom-7b\nadapter: lora\n",
    )])
    .unwrap();
    assert_eq!(
        hub.plan.hub.as_ref().map(|id| id.to_string()).as_deref(),
        Some("acme/custom-7b")
    );
    let plain = import(&[("axolotl.yaml", "base_model: my model\nadapter: lora\n")]).unwrap();
    assert_eq!(plain.plan.hub, None);
    assert!(plain
        .notes
        .iter()
        .any(|n| n.contains("not a bundled preset")));
    // And a Hub plan written as axolotl's file reads back to itself, its revision in `revision_of_model`; the
    // torchtune override reads back to its plan line.
    use peakplan_core::interop::{export, ExportFormat};
    for q in [
        "model=acme/custom-7b&method=qlora&r=16",
        "model=acme/custom-7b@v2&method=lora",
        "model=acme/custom-7b@refs/pr/1&method=full",
    ] {
        let plan = Plan::parse_query(q).plan;
        let arch = peakplan_core::preset_arch(&plan);
        let axolotl = export(&plan, arch, ExportFormat::Axolotl);
        let back = import(&[("axolotl.yaml", &axolotl)]).unwrap();
        assert_eq!(back.plan.to_query(), plan.to_query(), "{axolotl}");
        let torchtune = export(&plan, arch, ExportFormat::Torchtune);
        let line = torchtune
            .lines()
            .find_map(|l| l.strip_prefix("# peakplan: "))
            .unwrap();
        let back = import(&[("torchtune_override.yaml", &torchtune)]).unwrap();
        assert_eq!(
            back.plan.to_query(),
            Plan::parse_query(line).plan.to_query()
        );
    }
}

/// TRL's preference configs saved as JSON and axolotl's `rl:` key: the task, its prompt and reference; the
/// tasks not planned yet are said in a note, never imported as SFT silently.
#[test]
fn preference_configs_import_their_task() {
    let one = |f: &str| import_one(f, &data(f));
    check(
        &one("trl_dpo_config.json"),
        "task=dpo&ref=precomputed&prompt=384&s=1024&b=2&ga=8&gc=1&prec=amp_bf16",
        &[],
    );
    check(
        &one("trl_kto_config.json"),
        "task=kto&prompt=512&s=2048&b=4&gc=0&prec=amp_bf16",
        &[],
    );
    // A GRPOConfig as TRL 1.16 saves it (`to_json_string`): b is the round's prompts (8 completions a
    // micro-batch x 4 micro-batches a round / 8 per prompt), ga its micro-batches.
    let grpo = one("trl_grpo_config.json");
    check(
        &grpo,
        "task=grpo&gens=8&completion=1024&beta=0.04&gen=vllm_colocate&vmem=0.3&b=4&ga=4&gc=1&prec=amp_bf16&opt=adamw_torch_fused",
        &[],
    );
    assert!(
        grpo.notes.iter().any(|n| n.contains("GRPOConfig")),
        "{:?}",
        grpo.notes
    );
    // ORPO and SimPO run TRL's experimental trainers; SimPO is CPOConfig's loss_type simpo with cpo_alpha 0 (saved
    // by TRL 1.16's `to_json_string` on this CPU machine, which needs use_cpu for bf16: set back to false).
    check(
        &one("trl_orpo_config.json"),
        "task=orpo&prompt=512&s=1024&b=2",
        &[],
    );
    let simpo = one("trl_simpo_config.json");
    check(
        &simpo,
        "task=simpo&s=2048&b=2&ga=8&gc=1&prec=amp_bf16&opt=adamw_torch_fused",
        &[],
    );
    assert!(
        simpo
            .notes
            .iter()
            .any(|n| n.contains("CPOConfig: task=simpo")),
        "{:?}",
        simpo.notes
    );
    check(
        &one("axolotl_dpo.yaml"),
        "model=llama-2-7b&method=lora&r=16&targets=all-linear&task=dpo&prompt=512&s=2048&b=1&gc=1&prec=amp_bf16",
        &[],
    );
}

/// Short TRL configs and axolotl `rl:` keys: the task each plans as (CPO-SimPO and axolotl's SimPO without
/// `cpo_alpha: 0` cost what CPO does), and a note for those not planned.
#[test]
fn preference_fields_pick_the_task() {
    let cases: &[(&str, &str, &str)] = &[
        // (file, text, the plan's task)
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "ipo", "max_length": 512}"#,
            "dpo",
        ),
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "sigmoid", "reference_free": true}"#,
            "dpo",
        ),
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "simpo", "cpo_alpha": 0.0}"#,
            "simpo",
        ),
        // CPO-SimPO (a simpo loss with CPO's NLL term) costs what CPO does; alphapo is SimPO's.
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "simpo", "cpo_alpha": 0.5}"#,
            "cpo",
        ),
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "loss_type": "alphapo", "simpo_gamma": 0.5}"#,
            "simpo",
        ),
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "sigmoid", "cpo_alpha": 1.0}"#,
            "cpo",
        ),
        // No NLL term whatever the loss: SimPO's memory.
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "hinge", "cpo_alpha": 0.0}"#,
            "simpo",
        ),
        (
            "a.json",
            r#"{"per_device_train_batch_size": 1, "beta": 0.04, "num_generations": 8, "loss_type": "dapo"}"#,
            "sft",
        ),
        (
            "a.yaml",
            "base_model: meta-llama/Llama-2-7b-hf\nrl: ipo\n",
            "dpo",
        ),
        (
            "a.yaml",
            "base_model: meta-llama/Llama-2-7b-hf\nrl: kto\nprecompute_ref_log_probs: true\n",
            "kto",
        ),
        (
            "a.yaml",
            "base_model: meta-llama/Llama-2-7b-hf\nrl: orpo\nmax_prompt_len: 256\n",
            "orpo",
        ),
        // axolotl leaves TRL's cpo_alpha (1.0) unless the config sets it.
        (
            "a.yaml",
            "base_model: meta-llama/Llama-2-7b-hf\nrl: simpo\n",
            "cpo",
        ),
        (
            "a.yaml",
            "base_model: meta-llama/Llama-2-7b-hf\nrl: simpo\ncpo_alpha: 0.0\nsimpo_gamma: 0.5\n",
            "simpo",
        ),
        (
            "a.yaml",
            "base_model: meta-llama/Llama-2-7b-hf\nrl: grpo\n",
            "sft",
        ),
    ];
    for (name, text, task) in cases {
        let got = import_one(name, text);
        assert_eq!(got.plan.task.key(), *task, "{text}: {:?}", got.notes);
        if *task == "sft" {
            assert!(
                got.notes.iter().any(|n| n.contains("not planned")),
                "{text}: {:?}",
                got.notes
            );
            assert!(!got.unsupported.is_empty(), "{text}");
        }
    }
    let free = import_one("a.json", cases[1].1);
    assert_eq!(
        free.plan.to_query(),
        plan("task=dpo&ref=none&b=1").to_query()
    );
    let kto_yaml = cases.iter().find(|c| c.1.contains("rl: kto")).map(|c| c.1);
    let kto = import_one("a.yaml", kto_yaml.unwrap_or_default());
    assert_eq!(kto.plan.reference.key(), "precomputed");
    // A prompt as long as the sequence leaves no completion: said, and the prompt stays.
    let long = import_one(
        "a.json",
        r#"{"per_device_train_batch_size": 1, "beta": 0.1, "loss_type": "sigmoid", "max_length": 512, "max_prompt_length": 512}"#,
    );
    assert_eq!(long.plan.prompt_tokens, None, "{:?}", long.notes);
    assert!(long
        .notes
        .iter()
        .any(|n| n.contains("no completion tokens")));
}
