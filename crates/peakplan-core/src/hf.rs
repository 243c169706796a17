//! Import of a Hugging Face `config.json` into an [`Architecture`], with messages that name the field.

use crate::arch::{ArchError, Architecture, Mlp, Norm, QkNorm, VisionTower, MAX_DIM, MAX_LAYERS};
use crate::model_type::{Layout, ModelType, KEYS};
use crate::text::quote;
use serde_json::{Map, Value};

/// Larger inputs are refused before parsing: real configs are a few kilobytes.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The `model_type` values this importer understands (the keys of [`ModelType::ALL`]).
pub const SUPPORTED_MODEL_TYPES: &[&str] = &KEYS;

fn err(msg: impl Into<String>) -> ArchError {
    ArchError(msg.into())
}

/// A config's fields, with the library's defaults for size fields it may leave out.
struct Fields<'a>(&'a Map<String, Value>, &'static [(&'static str, u64)]);

impl Fields<'_> {
    fn uint(&self, keys: &[&str]) -> Result<Option<u64>, ArchError> {
        for k in keys {
            match self.0.get(*k) {
                None | Some(Value::Null) => continue,
                Some(Value::Number(n)) => {
                    if let Some(v) = n.as_u64() {
                        return Ok(Some(v));
                    }
                    if let Some(f) = n.as_f64() {
                        if f.fract() == 0.0 && (0.0..9.0e15).contains(&f) {
                            return Ok(Some(f as u64));
                        }
                    }
                    return Err(err(format!("{k} must be a non-negative integer, got {n}")));
                }
                Some(other) => {
                    return Err(err(format!(
                        "{k} must be a number, got {}",
                        type_name(other)
                    )))
                }
            }
        }
        Ok(self
            .1
            .iter()
            .find(|(name, _)| keys.contains(name))
            .map(|(_, v)| *v))
    }
    fn need(&self, keys: &[&str]) -> Result<u64, ArchError> {
        self.uint(keys)?
            .ok_or_else(|| err(format!("config.json has no {}", keys.join(" / "))))
    }
    fn flag(&self, key: &str, default: bool) -> Result<bool, ArchError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(err(format!(
                "{key} must be true or false, got {}",
                type_name(other)
            ))),
        }
    }
    fn text(&self, keys: &[&str]) -> Result<Option<&str>, ArchError> {
        for k in keys {
            match self.0.get(*k) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => return Ok(Some(s.as_str())),
                Some(other) => {
                    return Err(err(format!(
                        "{k} must be a string, got {}",
                        type_name(other)
                    )))
                }
            }
        }
        Ok(None)
    }
    /// A setting that is on unless set to null (or 0); `default` when the key is absent.
    fn on_unless_null(&self, key: &str, default: bool) -> Result<bool, ArchError> {
        match self.0.get(key) {
            None => Ok(default),
            Some(Value::Null) => Ok(false),
            Some(Value::Number(n)) => Ok(n.as_f64().is_some_and(|v| v > 0.0)),
            Some(other) => Err(err(format!(
                "{key} must be a number or null, got {}",
                type_name(other)
            ))),
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses the text of a `config.json`.
///
/// Missing optional keys take the library defaults of `transformers` for that model type
/// (for example Gemma ties its embeddings, Qwen2 always has q/k/v biases).
pub fn import_config(text: &str) -> Result<Architecture, ArchError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(err(format!(
            "config.json is {} bytes; a real one is a few KB (at most {} accepted)",
            text.len(),
            MAX_CONFIG_BYTES
        )));
    }
    let value: Value = serde_json::from_str(text)
        .map_err(|e| err(format!("config.json is not valid JSON: {e}")))?;
    let Value::Object(map) = &value else {
        return Err(err(format!(
            "config.json must be a JSON object, got {}",
            type_name(&value)
        )));
    };
    import_map(map)
}

/// transformers' defaults for the size fields a config may leave out: the keyword defaults of each type's
/// configuration class (`LlamaConfig()` is a 7B Llama), so a config that names only what differs (a Gemma 3
/// `text_config`, a hand-written test config) imports as `from_pretrained` reads it. Qwen v1's are its remote
/// `QWenConfig`'s.
fn size_defaults(model_type: &str) -> &'static [(&'static str, u64)] {
    match model_type {
        "llama" => &[
            ("vocab_size", 32_000),
            ("hidden_size", 4096),
            ("intermediate_size", 11_008),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
        ],
        "olmo2" => &[
            ("vocab_size", 50_304),
            ("hidden_size", 4096),
            ("intermediate_size", 11_008),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
        ],
        "mistral" | "mixtral" => &[
            ("vocab_size", 32_000),
            ("hidden_size", 4096),
            ("intermediate_size", 14_336),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
            ("num_key_value_heads", 8),
            ("num_local_experts", 8),
            ("num_experts_per_tok", 2),
        ],
        "qwen2" | "qwen" => &[
            ("vocab_size", 151_936),
            ("hidden_size", 4096),
            ("intermediate_size", 22_016),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
        ],
        "gemma" => &[
            ("vocab_size", 256_000),
            ("hidden_size", 3072),
            ("intermediate_size", 24_576),
            ("num_hidden_layers", 28),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 16),
            ("head_dim", 256),
        ],
        "gemma2" => &[
            ("vocab_size", 256_000),
            ("hidden_size", 2304),
            ("intermediate_size", 9216),
            ("num_hidden_layers", 26),
            ("num_attention_heads", 8),
            ("num_key_value_heads", 4),
            ("head_dim", 256),
        ],
        "phi" => &[
            ("vocab_size", 51_200),
            ("hidden_size", 2048),
            ("intermediate_size", 8192),
            ("num_hidden_layers", 24),
            ("num_attention_heads", 32),
        ],
        "phi3" => &[
            ("vocab_size", 32_064),
            ("hidden_size", 3072),
            ("intermediate_size", 8192),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
        ],
        "gpt_neox" => &[
            ("vocab_size", 50_432),
            ("hidden_size", 6144),
            ("intermediate_size", 24_576),
            ("num_hidden_layers", 44),
            ("num_attention_heads", 64),
        ],
        "falcon" | "RefinedWebModel" | "RefinedWeb" => &[
            ("vocab_size", 65_024),
            ("hidden_size", 4544),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 71),
        ],
        "gpt2" | "gpt_bigcode" => &[
            ("vocab_size", 50_257),
            ("n_embd", 768),
            ("n_layer", 12),
            ("n_head", 12),
        ],
        "bloom" => &[
            ("vocab_size", 250_880),
            ("hidden_size", 64),
            ("n_layer", 2),
            ("n_head", 8),
        ],
        "qwen3" => &[
            ("vocab_size", 151_936),
            ("hidden_size", 4096),
            ("intermediate_size", 22_016),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
            ("head_dim", 128),
        ],
        "qwen3_moe" => &[
            ("vocab_size", 151_936),
            ("hidden_size", 2048),
            ("num_hidden_layers", 24),
            ("num_attention_heads", 32),
            ("num_key_value_heads", 4),
            ("num_experts", 128),
            ("num_experts_per_tok", 8),
            ("moe_intermediate_size", 768),
        ],
        "qwen2_moe" => &[
            ("vocab_size", 151_936),
            ("hidden_size", 2048),
            ("num_hidden_layers", 24),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 16),
            ("num_experts", 60),
            ("num_experts_per_tok", 4),
            ("moe_intermediate_size", 1408),
            ("shared_expert_intermediate_size", 5632),
        ],
        "gpt_oss" => &[
            ("vocab_size", 201_088),
            ("hidden_size", 2880),
            ("intermediate_size", 2880),
            ("num_hidden_layers", 36),
            ("num_attention_heads", 64),
            ("num_key_value_heads", 8),
            ("head_dim", 64),
            ("num_local_experts", 128),
            ("num_experts_per_tok", 4),
        ],
        "gemma3_text" => &[
            ("vocab_size", 262_208),
            ("hidden_size", 2304),
            ("intermediate_size", 9216),
            ("num_hidden_layers", 26),
            ("num_attention_heads", 8),
            ("num_key_value_heads", 4),
            ("head_dim", 256),
        ],
        _ => &[],
    }
}

/// The object under `key`, or `empty` when the key is absent (the config class's defaults then apply).
fn sub_config<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, ArchError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(empty),
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(err(format!(
            "{key} must be an object, got {}",
            type_name(other)
        ))),
    }
}

/// Gemma 3's image-text models (`Gemma3ForConditionalGeneration`, what `AutoModelForCausalLM` loads for them):
/// the `gemma3_text` language model plus a SigLIP vision tower and its projector, which text-only training loads
/// but never runs: frozen weights, no activations, no gradients (416,866,032 parameters for Gemma 3 4B-27B).
/// bitsandbytes quantizes the tower's encoder linears and leaves its embeddings, biases, norms and the projector
/// 16-bit (traced on CPU: a scaled Gemma 3 QLoRA step, bf16 and upcast, within 0.46%; one layer within 0.05%).
/// The counts match KerasHub's exact figures for 4B, 12B and 27B.
fn import_gemma3(map: &Map<String, Value>) -> Result<Architecture, ArchError> {
    let empty = Map::new();
    let text = sub_config(map, "text_config", &empty)?;
    let mut a =
        import_typed(ModelType::Gemma3Text, text).map_err(|e| err(format!("text_config: {e}")))?;
    a.name = "gemma3".into();
    a.model_type = "gemma3".into();
    let v = sub_config(map, "vision_config", &empty)?;
    // SiglipVisionConfig's defaults, for keys a vision_config leaves out.
    let f = Fields(
        v,
        &[
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 12),
            ("num_attention_heads", 12),
            ("num_channels", 3),
            ("image_size", 224),
            ("patch_size", 16),
        ],
    );
    let small = |key: &str, max: u64| -> Result<u64, ArchError> {
        let n = f.need(&[key])?;
        if n == 0 || n > max {
            return Err(err(format!(
                "vision_config.{key} = {n} is out of range 1..={max}"
            )));
        }
        Ok(n)
    };
    let (h, i) = (
        small("hidden_size", MAX_DIM)?,
        small("intermediate_size", MAX_DIM)?,
    );
    let layers = small("num_hidden_layers", MAX_LAYERS)?;
    let heads = small("num_attention_heads", h)?;
    if !h.is_multiple_of(heads) {
        return Err(err(format!(
            "vision_config.hidden_size = {h} is not divisible by num_attention_heads = {heads}"
        )));
    }
    let (channels, patch) = (small("num_channels", 64)?, small("patch_size", 1024)?);
    let image_size = small("image_size", 65_536)?;
    let positions = (image_size / patch).pow(2);
    let pooling_head = f.flag("vision_use_head", true)?;
    // SigLIP's attention-pooling head: a probe, an nn.MultiheadAttention, a LayerNorm and an MLP.
    let head = if pooling_head {
        h + (4 * h * h + 4 * h) + 2 * h + (2 * h * i + i + h)
    } else {
        0
    };
    a.vision = VisionTower {
        hidden: h,
        intermediate: i,
        layers,
        // Patch convolution with bias, position embeddings, per layer the q/k/v/out and fc1/fc2 biases and two
        // LayerNorms, the post-LayerNorm, the head, and the projector (a hidden x text-hidden matrix and an RMSNorm).
        other_params: channels * patch * patch * h
            + h
            + positions * h
            + layers * (4 * h + 4 * h + i + h)
            + 2 * h
            + head
            + h * a.hidden
            + h,
        heads,
        channels,
        image_size,
        patch_size: patch,
        pooling_head,
    };
    Ok(a)
}

pub(crate) fn import_map(map: &Map<String, Value>) -> Result<Architecture, ArchError> {
    let model_type = match map.get("model_type") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(err(format!(
                "model_type must be a string, got {}",
                type_name(other)
            )))
        }
        None => return Err(err("config.json has no model_type")),
    };
    let Some(t) = ModelType::parse(model_type) else {
        return Err(err(format!(
            "model_type {} is not supported; supported: {}",
            quote(model_type),
            SUPPORTED_MODEL_TYPES.join(", ")
        )));
    };
    if t.layout() == Layout::Gemma3 {
        return import_gemma3(map);
    }
    import_typed(t, map)
}

/// Imports `map` as a config of type `t` (a Gemma 3 `text_config` may leave its own type out).
fn import_typed(t: ModelType, map: &Map<String, Value>) -> Result<Architecture, ArchError> {
    let model_type = t.key();
    let f = Fields(map, size_defaults(model_type));
    let hidden = f.need(&["hidden_size", "n_embd", "n_embed", "d_model"])?;
    let layers = f.need(&["num_hidden_layers", "n_layer", "num_layers"])?;
    let heads = f.need(&["num_attention_heads", "n_head"])?;
    let vocab = f.need(&["vocab_size"])?;
    if heads == 0 {
        return Err(err("num_attention_heads must be at least 1"));
    }
    let explicit_head_dim = f.uint(&["head_dim"])?;
    let c = Config {
        f,
        model_type,
        hidden,
        heads,
        explicit_head_dim,
    };
    let mut a = Architecture::llama(model_type, layers, hidden, 0, heads, heads, vocab);
    a.model_type = model_type.to_string();
    match t.layout() {
        Layout::Llama => llama_family(&mut a, &c)?,
        // Only as a whole config: its text_config is imported as gemma3_text.
        Layout::Gemma3 => {
            return Err(err(
                "a gemma3 config cannot nest another as its text_config",
            ))
        }
        Layout::GptOss => gpt_oss(&mut a, &c)?,
        Layout::Phi => phi(&mut a, &c)?,
        Layout::QwenV1 => qwen_v1(&mut a, &c)?,
        Layout::Phi3 => phi3(&mut a, &c)?,
        Layout::Bloom => bloom(&mut a, &c)?,
        Layout::GptNeox => gpt_neox(&mut a, &c)?,
        Layout::Falcon => falcon(&mut a, &c)?,
        Layout::Gpt2 => gpt2_family(&mut a, &c)?,
    }
    a.validate()?;
    Ok(a)
}

/// A config being imported: its fields and the sizes every family reads.
struct Config<'a> {
    f: Fields<'a>,
    model_type: &'a str,
    hidden: u64,
    heads: u64,
    explicit_head_dim: Option<u64>,
}

impl Config<'_> {
    /// `head_dim` as given, else hidden / heads (which must divide).
    fn head_dim(&self) -> Result<u64, ArchError> {
        if let Some(d) = self.explicit_head_dim {
            return Ok(d);
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(err(format!(
                "hidden_size = {} is not divisible by num_attention_heads = {} and there is no head_dim",
                self.hidden, self.heads
            )));
        }
        Ok(self.hidden / self.heads)
    }
}

/// Llama-layout decoders: Llama, Mistral, Mixtral, Qwen2/3 (and their MoE), Gemma 1-3 text, OLMo 2.
fn llama_family(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    let qwen_moe = matches!(c.model_type, "qwen3_moe" | "qwen2_moe");
    a.intermediate = if qwen_moe {
        c.f.need(&["moe_intermediate_size"])?
    } else {
        c.f.need(&["intermediate_size"])?
    };
    a.kv_heads = c.f.uint(&["num_key_value_heads"])?.unwrap_or(c.heads);
    let gemma = c.model_type.starts_with("gemma");
    a.head_dim = if gemma {
        c.explicit_head_dim.unwrap_or(256)
    } else {
        c.head_dim()?
    };
    a.tied_embeddings = c.f.flag("tie_word_embeddings", gemma)?;
    a.qkv_bias = c.model_type == "qwen2"
        || (c.model_type == "qwen2_moe" && c.f.flag("qkv_bias", true)?)
        || c.f.flag("attention_bias", false)?;
    a.o_bias = c.f.flag("attention_bias", false)?;
    a.mlp_bias = c.f.flag("mlp_bias", false)?;
    // OLMo 2 multiplies by its norm weights in fp32 before casting back, as Gemma does.
    a.norm_scale_fp32 = gemma || c.model_type == "olmo2";
    if matches!(c.model_type, "gemma2" | "gemma3_text") {
        a.norms_per_layer = 4;
        // Gemma2Config softcaps by default (30 and 50); Gemma3TextConfig only when a value is given. A
        // null turns each off.
        let softcap = c.model_type == "gemma2";
        a.final_logit_softcap = c.f.on_unless_null("final_logit_softcapping", softcap)?;
        a.attn_logit_softcap = c.f.on_unless_null("attn_logit_softcapping", softcap)?;
    }
    a.qk_norm = match c.model_type {
        "qwen3" | "qwen3_moe" | "gemma3_text" => QkNorm::PerHead,
        "olmo2" => QkNorm::Full,
        _ => QkNorm::None,
    };
    if c.model_type == "mixtral" {
        a.experts = c.f.uint(&["num_local_experts"])?.unwrap_or(8);
        a.experts_per_token = c.f.uint(&["num_experts_per_tok"])?.unwrap_or(2);
    }
    if qwen_moe {
        a.experts = c.f.need(&["num_experts"])?;
        a.experts_per_token = c.f.need(&["num_experts_per_tok"])?;
        if c.model_type == "qwen2_moe" {
            // Every Qwen2-MoE block runs a dense shared expert beside the routed ones, scaled by a sigmoid
            // gate.
            a.shared_expert_intermediate = c.f.need(&["shared_expert_intermediate_size"])?;
            a.shared_expert_gate = true;
        }
        let dense_layers = match c.f.0.get("mlp_only_layers") {
            None | Some(Value::Null) => false,
            Some(Value::Array(v)) => !v.is_empty(),
            Some(other) => {
                return Err(err(format!(
                    "mlp_only_layers must be a list of layer indices, got {}",
                    type_name(other)
                )))
            }
        };
        if dense_layers || c.f.uint(&["decoder_sparse_step"])?.unwrap_or(1) != 1 {
            return Err(err(
                    "decoder_sparse_step other than 1 or a non-empty mlp_only_layers mixes dense and MoE \
                     layers, which peakplan does not model",
                ));
        }
    }
    Ok(())
}

/// gpt-oss.
fn gpt_oss(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    // gpt-oss: biased attention with a learned sink per head, an MoE of fused, biased gate|up and down
    // experts behind a biased router that softmaxes its top-k logits, clamped SwiGLU, RMSNorms that scale
    // in fp32 (kept in fp32 by `_keep_in_fp32_modules`), untied head. The checkpoint's MXFP4 experts are
    // dequantized for training (`Mxfp4Config(dequantize=True)`); the plan's `quant` says what they become.
    a.intermediate = c.f.need(&["intermediate_size"])?;
    a.kv_heads = c.f.need(&["num_key_value_heads"])?;
    a.head_dim = c.f.need(&["head_dim"])?;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", false)?;
    a.qkv_bias = c.f.flag("attention_bias", true)?;
    a.o_bias = a.qkv_bias;
    a.mlp = Mlp::GatedFused;
    a.mlp_bias = true;
    a.experts = c.f.need(&["num_local_experts"])?;
    a.experts_per_token = c.f.need(&["num_experts_per_tok", "experts_per_token"])?;
    a.norm_scale_fp32 = true;
    a.attn_sinks = true;
    a.swiglu_clamp = true;
    a.router_topk_softmax = true;
    Ok(())
}

/// Phi-1/2: a parallel block with one LayerNorm and a plain GELU MLP.
fn phi(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    a.intermediate = c.f.need(&["intermediate_size"])?;
    a.kv_heads = c.f.uint(&["num_key_value_heads"])?.unwrap_or(c.heads);
    a.head_dim = c.head_dim()?;
    a.norm = Norm::LayerNorm;
    a.norms_per_layer = 1;
    a.mlp = Mlp::Plain;
    a.qkv_bias = true;
    a.o_bias = true;
    a.mlp_bias = true;
    a.lm_head_bias = true;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", false)?;
    a.composite_gelu = c.f.text(&["hidden_act"])?.unwrap_or("gelu_new") == "gelu_new";
    Ok(())
}

/// Qwen (v1).
fn qwen_v1(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    // Qwen (v1): fused c_attn with bias, bias-free c_proj, SwiGLU whose two branches are each half of
    // `intermediate_size`, RMSNorm, untied head.
    let inter = c.f.need(&["intermediate_size"])?;
    a.intermediate = inter / 2;
    a.head_dim = c.head_dim()?;
    a.fused_qkv = true;
    a.qkv_bias = true;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", false)?;
    Ok(())
}

/// Phi-3: fused qkv and gate|up projections.
fn phi3(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    a.intermediate = c.f.need(&["intermediate_size"])?;
    a.kv_heads = c.f.uint(&["num_key_value_heads"])?.unwrap_or(c.heads);
    a.head_dim = c.head_dim()?;
    a.fused_qkv = true;
    a.qkv_views = true;
    a.mlp = Mlp::GatedFused;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", false)?;
    Ok(())
}

/// The GPT-style block the BLOOM, GPT-NeoX, Falcon and GPT-2 layouts share: LayerNorms, one fused q|k|v
/// projection, a plain (ungated) MLP, and biases on every linear or none.
fn gpt_block(a: &mut Architecture, bias: bool) {
    a.norm = Norm::LayerNorm;
    a.fused_qkv = true;
    a.mlp = Mlp::Plain;
    a.qkv_bias = bias;
    a.o_bias = bias;
    a.mlp_bias = bias;
}

/// BLOOM.
fn bloom(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    // BLOOM: ALiBi (no position parameters), fused query_key_value, a 4x GELU MLP, LayerNorms and biases
    // everywhere, a LayerNorm on the word embeddings, and a head tied to them.
    a.intermediate = 4 * c.hidden;
    a.head_dim = c.head_dim()?;
    gpt_block(a, true);
    a.embedding_norm = true;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", true)?;
    Ok(())
}

/// GPT-NeoX (Pythia).
fn gpt_neox(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    a.intermediate = c.f.uint(&["intermediate_size"])?.unwrap_or(4 * c.hidden);
    a.head_dim = c.head_dim()?;
    gpt_block(a, c.f.flag("attention_bias", true)?);
    a.mlp_bias = true;
    a.qkv_views = true;
    a.norms_share_input = c.f.flag("use_parallel_residual", true)?;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", false)?;
    Ok(())
}

/// Falcon, old and new decoder architectures.
fn falcon(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    a.intermediate = c.f.uint(&["ffn_hidden_size"])?.unwrap_or(4 * c.hidden);
    a.head_dim = c.head_dim()?;
    let new_arch =
        c.f.flag("new_decoder_architecture", c.model_type == "RefinedWeb")?;
    a.kv_heads = if new_arch {
        c.f.uint(&["num_kv_heads", "n_head_kv"])?.unwrap_or(c.heads)
    } else if c.f.flag("multi_query", true)? {
        1
    } else {
        c.heads
    };
    gpt_block(a, c.f.flag("bias", false)?);
    // As FalconDecoderLayer: a sequential block has two norms; a parallel one has ln_attn and ln_mlp, both
    // reading the layer's input, when num_ln_in_parallel_attn is 2 (the new decoder's default), else one.
    let parallel = c.f.flag("parallel_attn", true)?;
    let two_lns =
        c.f.uint(&["num_ln_in_parallel_attn"])?
            .unwrap_or(if new_arch { 2 } else { 1 })
            == 2;
    a.norms_per_layer = if !parallel || two_lns { 2 } else { 1 };
    a.norms_share_input = parallel && two_lns;
    a.tied_embeddings = c.f.flag("tie_word_embeddings", true)?;
    Ok(())
}

/// GPT-2 layout: gpt_bigcode, gpt2, gpt3.
fn gpt2_family(a: &mut Architecture, c: &Config) -> Result<(), ArchError> {
    a.intermediate =
        c.f.uint(&["n_inner", "intermediate_size"])?
            .unwrap_or(4 * c.hidden);
    a.head_dim = c.head_dim()?;
    a.kv_heads = if c.model_type == "gpt_bigcode" && c.f.flag("multi_query", true)? {
        1
    } else {
        c.heads
    };
    gpt_block(a, true);
    a.learned_positions =
        c.f.uint(&["n_positions", "max_position_embeddings"])?
            .unwrap_or(1024);
    a.tied_embeddings = c.f.flag("tie_word_embeddings", true)?;
    let default_act = if c.model_type == "gpt_bigcode" {
        "gelu_pytorch_tanh"
    } else {
        "gelu_new"
    };
    a.composite_gelu =
        c.f.text(&["activation_function", "hidden_act"])?
            .unwrap_or(default_act)
            == "gelu_new";
    if c.model_type == "gpt_bigcode" {
        // GPTBigCodeModel registers a bool causal mask of positions x positions as a buffer.
        a.buffer_bytes = a.learned_positions.saturating_mul(a.learned_positions);
    }
    Ok(())
}
