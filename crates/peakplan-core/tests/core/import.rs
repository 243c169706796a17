//! Real models through the config importer: parameter counts, family features, and the errors a bad config gets.

use peakplan_core::plan::Plan;
use peakplan_core::{import_config, preset_arch, presets, Kind, QkNorm};

use crate::util::{data, est, est_arch, plan};

#[test]
fn preset_parameter_counts_match_the_real_models() {
    let check = |id: &str, want: u64| {
        let p = presets::model_arch(id).unwrap().total_params();
        assert_eq!(p, want, "{id}");
    };
    check("llama-2-7b", 6_738_415_616);
    check("mistral-7b", 7_241_732_096);
    check("llama-3.2-3b", 3_212_749_824);
    check("llama-3.1-8b", 8_030_261_248);
    check("mixtral-8x7b", 46_702_792_704);
    check("gemma-2-9b", 9_241_705_984);
    check("gemma-7b", 8_537_680_896);
    check("phi-3-mini", 3_821_079_552);
    check("pythia-1.4b", 1_414_647_808);
    check("qwen2.5-0.5b", 494_032_768);
    check("falcon-7b", 6_921_720_704);
    // Qwen3: KerasHub's stated counts (qwen3_presets.py, qwen3_moe_presets.py).
    check("qwen3-0.6b", 596_049_920);
    check("qwen3-1.7b", 1_720_574_976);
    check("qwen3-4b", 4_022_468_096);
    check("qwen3-14b", 14_768_307_200);
    check("qwen3-32b", 32_762_123_264);
    check("qwen3-8b", 8_190_735_360);
    check("qwen3-30b-a3b", 30_532_122_624);
    check("gemma-3-1b", 999_885_952);
    // KerasHub's stated counts (qwen_presets.py; the 32B and 72B figures are of the Instruct ports, same shapes).
    check("qwen2.5-3b", 3_085_938_688);
    check("qwen2.5-32b", 32_763_876_352);
    check("qwen2.5-72b", 72_706_203_648);
    check("gemma-2-2b", 2_614_341_888);
    check("gemma-2-27b", 27_227_128_320);
    // Qwen1.5-MoE-A2.7B: 60 routed experts, a shared expert and its gate per layer; Qwen states 14.3B.
    check("qwen1.5-moe-a2.7b", 14_315_784_192);
    // Qwen2-57B-A14B: Qwen states 57.4B total, 14B activated.
    check("qwen2-57b-a14b", 57_408_658_944);
    // Mistral Small 3: the text model's count in a public spec, which the shapes reproduce.
    check("mistral-small-24b", 23_572_403_200);
    // gpt-oss: no exact count is published; these sum OpenAI's reference modules (biased attention with 64
    // sinks, a biased router, biased experts, untied head) and round to the model card's 20.91B and 116.83B.
    check("gpt-oss-20b", 20_914_757_184);
    check("gpt-oss-120b", 116_829_156_672);
    // Gemma 3's image-text checkpoints, vision tower included: KerasHub's medgemma counts (the Hugging Face
    // vocabulary), and its gemma3_12b count plus the 64 vocabulary rows x 3840 its port lacks.
    check("gemma-3-4b", 4_300_079_472);
    check("gemma-3-12b", 12_187_079_280 + 64 * 3840);
    check("gemma-3-27b", 27_432_406_640);
    // The tower is frozen and never runs on text: a full fine-tune trains only the language model.
    let full = est("model=gemma-3-4b&method=full");
    assert_eq!(full.trainable_params, 3_880_263_168);
}

#[test]
fn gpu_capacities_are_the_sourced_nvidia_smi_totals() {
    // Each bundled GPU is a row of tests/data/models/gpus.json, in the same order; its capacity is the
    // nvidia-smi total where a printout is cited, else the vendor's figure.
    let rows: Vec<serde_json::Value> = serde_json::from_str(&data("models/gpus.json")).unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let bundled: Vec<&str> = presets::GPUS.iter().map(|g| g.id).collect();
    assert_eq!(bundled, ids);
    for (g, row) in presets::GPUS.iter().zip(&rows) {
        let want = match row["nvidia_smi_total_mib"].as_u64() {
            Some(mib) => mib << 20,
            None => row["vendor_capacity_bytes"].as_u64().unwrap(),
        };
        assert_eq!(g.capacity_bytes, want, "{}", g.id);
        assert_eq!(g.name, row["name"].as_str().unwrap(), "{}", g.id);
    }
}

#[test]
fn falcon_parallel_blocks_have_the_norms_transformers_builds() {
    // Falcon-11B's new decoder keeps one LayerNorm per parallel block (num_ln_in_parallel_attn = 1), not ln_attn
    // and ln_mlp: 10,836,484,096 parameters, as transformers 5.24 builds it (counted on the meta device).
    let a = import_config(&data("model_types/falcon.json")).unwrap();
    assert_eq!(
        (a.kv_heads, a.norms_per_layer, a.norms_share_input),
        (8, 1, false)
    );
    assert_eq!(a.total_params(), 10_836_484_096);
    // Falcon-40B's (RefinedWeb, the new decoder by default): ln_attn and ln_mlp, both reading the layer's input.
    let a = import_config(&data("model_types/RefinedWeb.json")).unwrap();
    assert_eq!(
        (a.kv_heads, a.norms_per_layer, a.norms_share_input),
        (8, 2, true)
    );
    assert_eq!(a.total_params(), 41_303_293_952);
    // A sequential block: a norm before attention and one before the MLP.
    let a = import_config(
        r#"{"model_type":"falcon","hidden_size":64,"num_attention_heads":4,"num_hidden_layers":2,"vocab_size":256,"new_decoder_architecture":true,"parallel_attn":false}"#,
    )
    .unwrap();
    assert_eq!((a.norms_per_layer, a.norms_share_input), (2, false));
}

#[test]
fn bloom_configs_import_with_their_embedding_norm_and_tied_head() {
    // bigscience/bloom-7b1's config.json names its width n_embed; the model card states 7,069,016,064 parameters.
    let a = import_config(r#"{"model_type": "bloom", "n_embed": 4096, "n_layer": 30, "n_head": 32, "vocab_size": 250880}"#)
        .unwrap();
    assert_eq!(a.total_params(), 7_069_016_064);
    assert!(a.tied_embeddings && a.embedding_norm && a.fused_qkv);
}

#[test]
fn every_shared_config_imports_to_its_preset() {
    for m in presets::MODELS {
        let full = data(&format!("models/{}.json", m.id));
        let mut a = import_config(&full).unwrap_or_else(|e| panic!("{}: {e}", m.id));
        a.name = m.id.to_string();
        assert_eq!(&a, presets::model_arch(m.id).unwrap(), "{}", m.id);
    }
}

#[test]
fn fused_moe_experts_stay_16_bit_under_a_quantized_transformers_base() {
    // Qwen3-30B-A3B: 48 layers x 128 experts x 3 x 2048 x 768 expert weights. transformers 5 stores them as 3D
    // parameters, which bitsandbytes does not replace: 2 B each where one nn.Linear per expert packs 0.5 B.
    let expert_weights: u64 = 48 * 128 * 3 * 2048 * 768;
    let q = |extra: &str| {
        est(&format!(
            "model=qwen3-30b-a3b&method=qlora&gc=1&b=1&s=1024{extra}"
        ))
    };
    let (fused, linear) = (q(""), q("&moe=linear"));
    assert_eq!(
        fused.component(Kind::BaseWeights) - linear.component(Kind::BaseWeights),
        expert_weights * 3 / 2
    );
    assert!(fused.component(Kind::QuantConstants) < linear.component(Kind::QuantConstants) / 20);
    // prepare_model_for_kbit_training upcasts them with the other 16-bit weights.
    let up = q("&upcast=1&prec=amp_bf16");
    assert!(up.component(Kind::BaseWeights) > expert_weights * 4);
    // litgpt quantizes its per-expert linears whatever transformers does; LoRA has nothing to quantize.
    let lit = |extra: &str| q(&format!("&fw=litgpt{extra}")).peak_allocated_bytes;
    assert_eq!(lit(""), lit("&moe=linear"));
    // LoRA on the default targets adapts the experts: per-expert gate and up Linears have an A each, while the
    // halves of one 3D gate_up_proj share it (48 layers x 128 experts x r 16 x 2048 fp32 parameters fewer, each with
    // its gradient, two Adam moments and the foreach temporary: 20 B).
    let lora = |extra: &str| est(&format!("model=qwen3-30b-a3b&method=lora{extra}"));
    let (fused_lora, linear_lora) = (lora(""), lora("&moe=linear"));
    let shared_a: u64 = 48 * 128 * 16 * 2048;
    assert_eq!(
        linear_lora.trainable_params - fused_lora.trainable_params,
        shared_a
    );
    assert_eq!(
        linear_lora.peak_allocated_bytes - fused_lora.peak_allocated_bytes,
        20 * shared_a
    );
    // LoRA on the 3D experts (PEFT target_parameters) keeps each layer's dense 16-bit W + BA until its backward;
    // per-expert Linears keep no such copy, and checkpointing rebuilds one layer at a time.
    let copies = |targets: &str, extra: &str| {
        est(&format!(
            "model=qwen3-30b-a3b&method=lora&targets={targets}&b=1&s=1024{extra}"
        ))
        .component(Kind::WeightCopies)
    };
    let experts = "q,v,gate,up,down";
    // With them, the bf16 casts of each expert's fp32 A and B that built it: gate_up's shared A (2048) and B
    // (2 x 768), down's A (768) and B (2048), at rank 16.
    let factor_casts: u64 = 48 * 128 * 16 * (2048 + 2 * 768 + 768 + 2048) * 2;
    assert_eq!(copies(experts, "&gc=0"), 2 * expert_weights + factor_casts);
    assert_eq!(copies(experts, "&gc=0&moe=linear"), 0);
    assert_eq!(copies("q,v", "&gc=0"), 0);
    assert_eq!(copies(experts, "&gc=1"), 0);
    // The key is written only when it is not the default, and a bad value is named.
    assert!(!plan("method=qlora").to_query().contains("moe="));
    assert!(plan("moe=linear").to_query().contains("moe=linear"));
    let bad = Plan::parse_query("moe=3d");
    assert!(
        bad.diagnostics[0].message.contains("fused, linear"),
        "{:?}",
        bad.diagnostics
    );
    // The advisor offers the per-expert layout for an MoE model, and not for a dense one (it would save nothing).
    let moe_lever = |q: &str| {
        let p = plan(q);
        peakplan_core::advise::advise(preset_arch(&p), &p, Some(24 << 30))
            .levers
            .iter()
            .find(|l| l.changes[0].key == "moe")
            .map(|l| l.saved_bytes)
    };
    let saved = moe_lever("model=qwen3-30b-a3b&method=qlora&b=1&s=2048").unwrap();
    assert!(saved > expert_weights, "{saved}");
    assert_eq!(moe_lever("model=llama-2-7b&method=qlora&b=1&s=2048"), None);
}

#[test]
fn gpt_oss_imports_with_sinks_and_runs_eager_attention_under_transformers() {
    // GptOssConfig's defaults are gpt-oss-120b's sizes: a config that names only its family still imports.
    let a = import_config(r#"{"model_type": "gpt_oss"}"#).unwrap();
    assert_eq!(a.total_params(), 116_829_156_672);
    assert!(a.attn_sinks && a.swiglu_clamp && a.router_topk_softmax && a.qkv_bias && a.mlp_bias);
    assert_eq!((a.experts, a.experts_per_token, a.head_dim), (128, 4, 64));
    let e = import_config(
        r#"{"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 8}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("num_experts_per_tok = 8"), "{e}");
    // transformers has no SDPA path for sinks, so SDPA means eager there; a flash kernel with sinks keeps no
    // scores, and eager keeps one 16-bit softmax over s + 1 keys per head and layer, with its row maxima's indices.
    let q = |attn: &str, fw: &str| {
        format!("model=gpt-oss-20b&method=lora&b=1&s=1024&gc=0&attn={attn}&fw={fw}")
    };
    let (sdpa, eager, flash) = (
        est(&q("sdpa", "hf")),
        est(&q("eager", "hf")),
        est(&q("flash", "hf")),
    );
    assert_eq!(sdpa.peak_allocated_bytes, eager.peak_allocated_bytes);
    assert_eq!(flash.component(Kind::AttentionScores), 0);
    let (scores, mask) = (24 * (2 * 64 * 1024 * 1025 + 8 * 64 * 1024), 2 * 1024 * 1024);
    assert_eq!(eager.component(Kind::AttentionScores), scores + mask);
    // Outside transformers, SDPA is taken as asked.
    assert_eq!(
        est(&q("sdpa", "litgpt")).component(Kind::AttentionScores),
        0
    );
}

#[test]
fn family_features_import_from_their_config_fields() {
    let gemma2 = |extra: &str| {
        import_config(&format!(
            r#"{{"model_type":"gemma2","hidden_size":3584,"intermediate_size":14336,"num_hidden_layers":42,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"vocab_size":256000{extra}}}"#
        ))
    };
    // Gemma2Config softcaps both by default; a null turns one off.
    let a = gemma2("").unwrap();
    assert!(a.final_logit_softcap && a.attn_logit_softcap && a.norm_scale_fp32);
    let a = gemma2(r#","final_logit_softcapping":null,"attn_logit_softcapping":50.0"#).unwrap();
    assert!(!a.final_logit_softcap && a.attn_logit_softcap);
    let e = gemma2(r#","final_logit_softcapping":"30""#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("final_logit_softcapping must be a number or null"),
        "{e}"
    );
    // `gelu_new` is written out in elementwise ops; PhiConfig and GPT2Config default to it.
    let phi = |act: &str| {
        import_config(&format!(
            r#"{{"model_type":"phi","hidden_size":2560,"intermediate_size":10240,"num_hidden_layers":32,"num_attention_heads":32,"vocab_size":51200{act}}}"#
        ))
        .unwrap()
        .composite_gelu
    };
    assert!(phi(""));
    assert!(!phi(r#","hidden_act":"gelu""#));
    let gpt2 = import_config(
        r#"{"model_type":"gpt2","n_embd":768,"n_layer":12,"n_head":12,"vocab_size":50257}"#,
    )
    .unwrap();
    assert!(gpt2.composite_gelu && gpt2.buffer_bytes == 0);
    // GPTBigCodeModel keeps a bool causal mask of n_positions^2 bytes: 64 MiB at 8192 positions.
    let sc = import_config(r#"{"model_type":"gpt_bigcode","n_embd":2048,"n_layer":24,"n_head":16,"n_positions":8192,"vocab_size":49152}"#).unwrap();
    assert_eq!(sc.buffer_bytes, 64 << 20);
    assert!(!sc.composite_gelu);
    let e = est_arch(
        &sc,
        "model=starcoderbase-1b&method=lora&targets=q,k,v&b=1&s=512",
    );
    assert!(e.component(Kind::BaseWeights) >= sc.total_params() * 2 + (64 << 20));
}

#[test]
fn query_key_norm_families_import_with_their_parameter_counts() {
    let import = |text: &str| import_config(text).unwrap_or_else(|e| panic!("{text:.60}: {e}"));
    // Qwen3-8B: the model card's 8.2B, 6.95B without the embedding and head.
    let q8 = import(
        r#"{"model_type":"qwen3","hidden_size":4096,"intermediate_size":12288,"num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,"tie_word_embeddings":false}"#,
    );
    assert_eq!(q8.total_params(), 8_190_735_360);
    assert_eq!(q8.layers * q8.layer_params(), 6_946_071_552);
    assert_eq!(q8.qk_norm, QkNorm::PerHead);
    // Qwen3-0.6B: head_dim 128 although hidden / heads is 64, tied head; 0.44B without the embedding.
    let q06 = import(
        r#"{"model_type":"qwen3","hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,"tie_word_embeddings":true}"#,
    );
    assert_eq!(q06.total_params(), 596_049_920);
    // Qwen3-30B-A3B: 128 experts of width 768, 8 per token; 30.5B, 29.9B without the embedding and head.
    let moe = r#"{"model_type":"qwen3_moe","hidden_size":2048,"intermediate_size":6144,"moe_intermediate_size":768,"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"num_experts":128,"num_experts_per_tok":8,"vocab_size":151936"#;
    let q30 = import(&format!(
        r#"{moe},"decoder_sparse_step":1,"mlp_only_layers":[]}}"#
    ));
    assert_eq!(q30.total_params(), 30_532_122_624);
    assert_eq!(
        (q30.experts, q30.experts_per_token, q30.intermediate),
        (128, 8, 768)
    );
    for mixed in [r#""mlp_only_layers":[0]"#, r#""decoder_sparse_step":2"#] {
        let e = import_config(&format!("{moe},{mixed}}}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("mixes dense and MoE layers"), "{mixed}: {e}");
    }
    // Qwen2-MoE takes its sizes from Qwen2MoeConfig's defaults (Qwen1.5-MoE-A2.7B's) where a config leaves them
    // out: 60 experts of 1408, 4 a token, a 5632-wide shared expert and its gate, biased q/k/v.
    let q2 = import(r#"{"model_type":"qwen2_moe"}"#);
    assert_eq!(q2.total_params(), 14_315_784_192);
    assert_eq!(
        (q2.experts, q2.experts_per_token, q2.intermediate),
        (60, 4, 1408)
    );
    assert!(q2.shared_expert_intermediate == 5632 && q2.shared_expert_gate && q2.qkv_bias);
    assert!(!import(r#"{"model_type":"qwen2_moe","qkv_bias":false}"#).qkv_bias);
    let mixed = import_config(r#"{"model_type":"qwen2_moe","mlp_only_layers":[0,1]}"#)
        .unwrap_err()
        .to_string();
    assert!(mixed.contains("mixes dense and MoE layers"), "{mixed}");
    // Gemma-3-1B (gemma3_text): 999,885,952 parameters; no softcapping unless a value is given.
    let g1 = import(
        r#"{"model_type":"gemma3_text","hidden_size":1152,"intermediate_size":6912,"num_hidden_layers":26,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":256,"vocab_size":262144}"#,
    );
    assert_eq!(g1.total_params(), 999_885_952);
    assert!(g1.tied_embeddings && g1.norm_scale_fp32 && g1.norms_per_layer == 4);
    assert!(!g1.final_logit_softcap && !g1.attn_logit_softcap);
    // Gemma-3-4B's text_config names only what differs from Gemma3TextConfig (vocabulary 262,208, head_dim 256).
    let g4 = import(
        r#"{"model_type":"gemma3_text","hidden_size":2560,"intermediate_size":10240,"num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4}"#,
    );
    assert_eq!(g4.total_params(), 3_880_263_168);
    // The image-text checkpoint adds a SigLIP tower (27 layers of 1152, patches of 14 over 896 pixels, no pooling
    // head) and its projector: 4,300,079,472 in all, KerasHub's count for medgemma_4b (Gemma 3 4B's shapes).
    let vision = r#""vision_config":{"hidden_size":1152,"image_size":896,"intermediate_size":4304,"num_hidden_layers":27,"patch_size":14,"vision_use_head":false}"#;
    let mm = import(&format!(
        r#"{{"model_type":"gemma3","text_config":{{"hidden_size":2560,"intermediate_size":10240,"num_hidden_layers":34}},{vision}}}"#
    ));
    assert_eq!(mm.total_params(), 4_300_079_472);
    assert_eq!(mm.vision.params(), 4_300_079_472 - 3_880_263_168);
    // Absent sub-configs take Gemma3TextConfig's and SiglipVisionConfig's defaults; bad ones are named.
    assert!(import(r#"{"model_type":"gemma3"}"#).vision.layers == 12);
    for (bad, want) in [
        (
            r#"{"model_type":"gemma3","text_config":[]}"#,
            "text_config must be an object",
        ),
        (
            r#"{"model_type":"gemma3","vision_config":{"patch_size":0}}"#,
            "vision_config.patch_size = 0",
        ),
        (
            r#"{"model_type":"gemma3","text_config":{"num_hidden_layers":0}}"#,
            "text_config: num_hidden_layers",
        ),
    ] {
        let e = import_config(bad).unwrap_err().to_string();
        assert!(e.contains(want), "{bad}: {e}");
    }
    // OLMo-2-1124-7B: post-norms, and q/k norms over the whole projections.
    let olmo = import(
        r#"{"model_type":"olmo2","hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":32,"vocab_size":100352}"#,
    );
    assert_eq!(olmo.total_params(), 7_298_617_344);
    assert_eq!(olmo.qk_norm, QkNorm::Full);
}

#[test]
fn config_errors_name_the_problem() {
    let check = |text: &str, want: &str| {
        let e = import_config(text).unwrap_err().to_string();
        assert!(e.contains(want), "{text:.60}: {e}");
    };
    check("not json", "not valid JSON");
    check("[]", "must be a JSON object");
    check("{}", "no model_type");
    check(
        r#"{"model_type":"llama","hidden_size":"4096"}"#,
        "hidden_size must be a number",
    );
    // gpt3 is peakplan's name for the GPT-3 paper's layout, which no library class gives defaults for.
    check(r#"{"model_type":"gpt3"}"#, "hidden_size");
    check(r#"{"model_type":"bert","hidden_size":1}"#, "not supported");
    check(
        r#"{"model_type":"llama","hidden_size":-4096,"intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1}"#,
        "hidden_size must be a non-negative integer",
    );
    check(
        r#"{"model_type":"llama","hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":1000000000000,"num_attention_heads":32,"vocab_size":32000}"#,
        "num_hidden_layers",
    );
    check(
        r#"{"model_type":"llama","hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,"num_attention_heads":7,"vocab_size":32000}"#,
        "not divisible",
    );
    let deep = format!("{}1{}", "{\"a\": ".repeat(10_000), "}".repeat(10_000));
    check(&deep, "not valid JSON");
    check(&" ".repeat(2 << 20), "bytes");
}

#[test]
fn a_config_with_only_its_model_type_takes_the_library_defaults() {
    // Each configuration class's keyword defaults: LlamaConfig() is Llama 2 7B, MistralConfig() Mistral 7B,
    // MixtralConfig() Mixtral 8x7B, GPT2Config() GPT-2 small, GPTNeoXConfig() GPT-NeoX 20B.
    for (model_type, params) in [
        ("llama", 6_738_415_616u64),
        ("mistral", 7_241_732_096),
        ("mixtral", 46_702_792_704),
        ("gpt2", 124_439_808),
        ("gpt_neox", 20_554_567_680),
        ("gemma", 8_537_680_896),
        ("falcon", 6_921_720_704),
    ] {
        let a = import_config(&format!(r#"{{"model_type": "{model_type}"}}"#))
            .unwrap_or_else(|e| panic!("{model_type}: {e}"));
        assert_eq!(a.total_params(), params, "{model_type}");
    }
    // Every type transformers has a class for imports from its type alone.
    for t in peakplan_core::hf::SUPPORTED_MODEL_TYPES
        .iter()
        .filter(|t| **t != "gpt3")
    {
        let config = format!(r#"{{"model_type": "{t}"}}"#);
        assert!(
            import_config(&config).is_ok(),
            "{t}: {:?}",
            import_config(&config)
        );
    }
}
