//! Model architectures: the shapes that decide parameter counts and activation sizes.

use serde::{Deserialize, Serialize};

/// How the feed-forward block is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mlp {
    /// `down(act(gate(x)) * up(x))`, separate gate and up projections (Llama, Mistral, Qwen2, Gemma).
    Gated,
    /// Gated, with gate and up fused into one `gate_up_proj` (Phi-3).
    GatedFused,
    /// `fc2(act(fc1(x)))` (GPT-2, GPT-NeoX, Falcon, Phi-2, GPT-BigCode).
    Plain,
}

/// The normalization layer type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// One weight vector of `hidden` values.
    RmsNorm,
    /// Weight and bias, `2 × hidden` values.
    LayerNorm,
}

/// An RMSNorm on the queries and keys before attention (Qwen3, Gemma 3, OLMo 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    #[default]
    None,
    /// One `head_dim` weight shared by every head, statistics per head (Qwen3, Gemma 3).
    PerHead,
    /// Over the whole projection output, `q_dim` and `kv_dim` weights, statistics per token (OLMo 2).
    Full,
}

/// A vision encoder loaded beside the language model (Gemma 3's SigLIP tower and its projector). Text-only
/// training never runs it: it is frozen weights, no activations, no gradients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisionTower {
    pub hidden: u64,
    pub intermediate: u64,
    /// Encoder layers; 0 when the model has no vision tower.
    pub layers: u64,
    /// Parameters outside the encoder layers' linear modules: patch and position embeddings, biases, norms,
    /// the pooling head, the projection into the language model.
    pub other_params: u64,
    /// The config fields that shape `other_params` (and the heads, which must divide `hidden`), kept so that an
    /// export can write the tower back.
    #[serde(default)]
    pub heads: u64,
    #[serde(default)]
    pub channels: u64,
    #[serde(default)]
    pub image_size: u64,
    #[serde(default)]
    pub patch_size: u64,
    /// SigLIP's attention-pooling head (`vision_use_head`).
    #[serde(default)]
    pub pooling_head: bool,
}

impl VisionTower {
    /// The `nn.Linear` weights of the encoder layers (q, k, v, out, fc1, fc2), which bitsandbytes quantizes.
    pub fn linear_params(&self) -> u64 {
        self.layers
            .saturating_mul(self.hidden)
            .saturating_mul(4 * self.hidden + 2 * self.intermediate)
    }
    pub fn params(&self) -> u64 {
        self.linear_params().saturating_add(self.other_params)
    }
}

/// A decoder-only transformer, described by the fields that move memory.
///
/// Plain data: every field is public, and [`Architecture::validate`] checks the invariants
/// that the accounting engine relies on (non-zero sizes, heads dividing evenly).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Architecture {
    /// Display name (a preset id or the `model_type` of an imported config).
    pub name: String,
    /// Hugging Face `model_type`.
    pub model_type: String,
    pub layers: u64,
    pub hidden: u64,
    pub intermediate: u64,
    pub heads: u64,
    /// Key/value heads: `heads` for multi-head, fewer for GQA, 1 for MQA.
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    /// The LM head shares the input embedding's matrix.
    pub tied_embeddings: bool,
    pub mlp: Mlp,
    pub norm: Norm,
    /// Norm layers per decoder layer (2 for most, 1 for Phi-2 and Falcon-7B, 4 for Gemma 2).
    pub norms_per_layer: u64,
    /// q, k and v are one fused projection (GPT-NeoX, Falcon, Phi-3, GPT-BigCode).
    pub fused_qkv: bool,
    /// Bias on the q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    /// Bias on the MLP projections.
    pub mlp_bias: bool,
    /// Bias on the LM head (Phi-2).
    pub lm_head_bias: bool,
    /// Learned absolute position embeddings (rows), 0 for rotary models.
    pub learned_positions: u64,
    /// A LayerNorm right after the word embeddings (BLOOM's `word_embeddings_layernorm`).
    pub embedding_norm: bool,
    /// Experts per MoE layer; 1 for a dense model.
    pub experts: u64,
    /// Experts each token is routed to.
    pub experts_per_token: u64,
    /// The norm weight multiplies in fp32 (Gemma's `1 + weight`, OLMo 2's `weight * x` before the cast back), so a
    /// trainable weight keeps the fp32 normalized input.
    #[serde(default)]
    pub norm_scale_fp32: bool,
    /// `gelu_new` (Phi-2, GPT-2): the tanh GELU written out in elementwise ops keeps four inter-wide tensors
    /// (its input, the tanh, 1 + tanh and x / 2) where a fused GELU keeps one.
    #[serde(default)]
    pub composite_gelu: bool,
    /// Gemma 2 softcaps the final logits (`cap * tanh(logits / cap)`): the tanh output is kept for backward.
    #[serde(default)]
    pub final_logit_softcap: bool,
    /// Gemma 2 softcaps the attention scores the same way: eager attention keeps each layer's tanh output too.
    #[serde(default)]
    pub attn_logit_softcap: bool,
    /// Buffers the model holds beside its parameters, in bytes (GPT-BigCode's positions x positions causal mask).
    #[serde(default)]
    pub buffer_bytes: u64,
    /// RMSNorms on the queries and keys.
    #[serde(default)]
    pub qk_norm: QkNorm,
    /// q, k and v are views of the fused projection's output, and v reaches attention as a view (GPT-NeoX, Phi-3):
    /// while attention keeps v, the whole output stays alive beside the rotated q and k.
    #[serde(default)]
    pub qkv_views: bool,
    /// The two norms of a parallel block read the same input (GPT-NeoX's parallel residual, Falcon's new
    /// decoder): a LayerNorm keeps that input once for both.
    #[serde(default)]
    pub norms_share_input: bool,
    /// A learned per-head sink logit joins each query's attention scores (gpt-oss): one parameter per head, and
    /// eager attention softmaxes the scores with it in the compute dtype, keeping only that softmax.
    #[serde(default)]
    pub attn_sinks: bool,
    /// gpt-oss's clamped SwiGLU over an interleaved gate|up projection: backward keeps the projection's output
    /// and four intermediate-wide tensors (the clamped gate, its sigmoid, `up + 1` and the gated product) where
    /// the plain SwiGLU keeps three.
    #[serde(default)]
    pub swiglu_clamp: bool,
    /// The MoE router has a bias, and softmaxes only the top-k logits it picked (gpt-oss): it keeps k weights
    /// and k indices per token instead of a softmax over every expert.
    #[serde(default)]
    pub router_topk_softmax: bool,
    /// An image encoder the checkpoint loads with the language model (Gemma 3's image-text models).
    #[serde(default)]
    pub vision: VisionTower,
    /// Width of a dense gated MLP every token runs beside the routed experts (Qwen2-MoE's `shared_expert`); 0 for
    /// none. Its gate_proj, up_proj and down_proj are ordinary linears: quantized, and adapted by the gate, up and
    /// down targets.
    #[serde(default)]
    pub shared_expert_intermediate: u64,
    /// The shared expert's output is scaled by a learned sigmoid gate (one `hidden -> 1` linear), and the product
    /// keeps that output and the sigmoid for backward.
    #[serde(default)]
    pub shared_expert_gate: bool,
}

/// What a LoRA target key selects in a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
    LmHead,
}

impl Target {
    pub const ALL: [Target; 8] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
        Target::LmHead,
    ];
    /// The key used in queries (`targets=q,v`).
    pub fn key(self) -> &'static str {
        match self {
            Target::Q => "q",
            Target::K => "k",
            Target::V => "v",
            Target::O => "o",
            Target::Gate => "gate",
            Target::Up => "up",
            Target::Down => "down",
            Target::LmHead => "lm_head",
        }
    }
    pub fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// One linear module of a decoder layer (per expert, for MoE expert projections).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    pub name: &'static str,
    pub in_features: u64,
    pub out_features: u64,
    pub bias: bool,
    /// Copies per layer: `experts` for MoE expert projections, else 1.
    pub copies: u64,
    /// Target keys that put an adapter on this module (bit set of [`Target::bit`]).
    pub selected_by: u8,
    /// Which input this module reads; modules with the same input share its saved copy.
    pub input: LinearInput,
}

/// The tensor a linear module reads, for deciding what backward must keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearInput {
    /// The normalized hidden state before attention (`hidden` wide).
    AttnNorm,
    /// The attention output (`heads × head_dim` wide).
    AttnOut,
    /// The normalized hidden state before the MLP (`hidden` wide; the same as `AttnNorm` in parallel blocks).
    MlpNorm,
    /// The MLP's inner activation (`intermediate` wide).
    MlpInner,
    /// The shared expert's inner activation (`shared_expert_intermediate` wide, one row per token).
    SharedInner,
}

/// Up to ten linear modules of a layer, stored inline (the estimate runs on every slider move).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linears {
    items: [Linear; 10],
    len: usize,
}

impl Default for Linears {
    fn default() -> Self {
        const EMPTY: Linear = Linear {
            name: "",
            in_features: 0,
            out_features: 0,
            bias: false,
            copies: 0,
            selected_by: 0,
            input: LinearInput::AttnNorm,
        };
        Linears {
            items: [EMPTY; 10],
            len: 0,
        }
    }
}

impl Linears {
    fn push(&mut self, l: Linear) {
        // A layer has at most ten linears (q, k, v, o, gate, up, down, and a shared expert's gate, up and down);
        // the capacity is never exceeded.
        if self.len < self.items.len() {
            self.items[self.len] = l;
            self.len += 1;
        }
    }
}

impl std::ops::Deref for Linears {
    type Target = [Linear];
    fn deref(&self) -> &[Linear] {
        &self.items[..self.len]
    }
}

impl Linear {
    pub fn weight_params(&self) -> u64 {
        self.in_features * self.out_features * self.copies
    }
    pub fn bias_params(&self) -> u64 {
        if self.bias {
            self.out_features * self.copies
        } else {
            0
        }
    }
}

/// Hard limits on imported sizes: far above any real model, low enough that the engine's products stay exact below
/// 2^53 for real models and finite beyond.
pub const MAX_DIM: u64 = 1 << 22;
/// Most layers an architecture may have.
pub const MAX_LAYERS: u64 = 100_000;
/// Most experts an MoE layer may have.
pub const MAX_EXPERTS: u64 = 4096;

/// Why an architecture is not usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchError(pub String);

impl std::fmt::Display for ArchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ArchError {}

impl Architecture {
    /// Width of the query projection output.
    pub fn q_dim(&self) -> u64 {
        self.heads * self.head_dim
    }
    /// Width of each of the key and value projection outputs.
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    /// The linear modules of one decoder layer, in forward order (a fixed-capacity list: no allocation).
    pub fn layer_linears(&self) -> Linears {
        use LinearInput::*;
        let (h, q, kv, i) = (self.hidden, self.q_dim(), self.kv_dim(), self.intermediate);
        let b = |t: &[Target]| t.iter().fold(0u8, |acc, t| acc | t.bit());
        let mut out = Linears::default();
        if self.fused_qkv {
            out.push(Linear {
                name: "qkv_proj",
                in_features: h,
                out_features: q + 2 * kv,
                bias: self.qkv_bias,
                copies: 1,
                selected_by: b(&[Target::Q, Target::K, Target::V]),
                input: AttnNorm,
            });
        } else {
            for (name, out_f, t) in [
                ("q_proj", q, Target::Q),
                ("k_proj", kv, Target::K),
                ("v_proj", kv, Target::V),
            ] {
                out.push(Linear {
                    name,
                    in_features: h,
                    out_features: out_f,
                    bias: self.qkv_bias,
                    copies: 1,
                    selected_by: t.bit(),
                    input: AttnNorm,
                });
            }
        }
        out.push(Linear {
            name: "o_proj",
            in_features: q,
            out_features: h,
            bias: self.o_bias,
            copies: 1,
            selected_by: Target::O.bit(),
            input: AttnOut,
        });
        let e = self.experts.max(1);
        match self.mlp {
            Mlp::Gated => {
                out.push(Linear {
                    name: "gate_proj",
                    in_features: h,
                    out_features: i,
                    bias: self.mlp_bias,
                    copies: e,
                    selected_by: Target::Gate.bit(),
                    input: MlpNorm,
                });
                out.push(Linear {
                    name: "up_proj",
                    in_features: h,
                    out_features: i,
                    bias: self.mlp_bias,
                    copies: e,
                    selected_by: Target::Up.bit(),
                    input: MlpNorm,
                });
            }
            Mlp::GatedFused => out.push(Linear {
                name: "gate_up_proj",
                in_features: h,
                out_features: 2 * i,
                bias: self.mlp_bias,
                copies: e,
                selected_by: b(&[Target::Gate, Target::Up]),
                input: MlpNorm,
            }),
            Mlp::Plain => out.push(Linear {
                name: "fc1",
                in_features: h,
                out_features: i,
                bias: self.mlp_bias,
                copies: e,
                selected_by: Target::Up.bit(),
                input: MlpNorm,
            }),
        }
        out.push(Linear {
            name: "down_proj",
            in_features: i,
            out_features: h,
            bias: self.mlp_bias,
            copies: e,
            selected_by: Target::Down.bit(),
            input: MlpInner,
        });
        let si = self.shared_expert_intermediate;
        if si > 0 {
            for (name, t) in [
                ("shared_expert.gate_proj", Target::Gate),
                ("shared_expert.up_proj", Target::Up),
            ] {
                out.push(Linear {
                    name,
                    in_features: h,
                    out_features: si,
                    bias: false,
                    copies: 1,
                    selected_by: t.bit(),
                    input: MlpNorm,
                });
            }
            out.push(Linear {
                name: "shared_expert.down_proj",
                in_features: si,
                out_features: h,
                bias: false,
                copies: 1,
                selected_by: Target::Down.bit(),
                input: SharedInner,
            });
        }
        out
    }

    /// Parameters of one decoder layer that are not in its linear modules (norms, MoE router).
    pub fn layer_other_params(&self) -> u64 {
        let norm = match self.norm {
            Norm::RmsNorm => self.hidden,
            Norm::LayerNorm => 2 * self.hidden,
        };
        let router = if self.experts > 1 {
            (self.hidden + u64::from(self.router_topk_softmax)) * self.experts
        } else {
            0
        };
        let sinks = if self.attn_sinks { self.heads } else { 0 };
        let shared_gate = if self.shared_expert_gate {
            self.hidden
        } else {
            0
        };
        let qk_norm = match self.qk_norm {
            QkNorm::None => 0,
            QkNorm::PerHead => 2 * self.head_dim,
            QkNorm::Full => self.q_dim() + self.kv_dim(),
        };
        norm * self.norms_per_layer + router + qk_norm + sinks + shared_gate
    }

    /// Parameters of one decoder layer.
    pub fn layer_params(&self) -> u64 {
        self.layer_linears()
            .iter()
            .map(|l| l.weight_params() + l.bias_params())
            .sum::<u64>()
            + self.layer_other_params()
    }

    /// Parameters of the quantizable linear weights of one layer (bitsandbytes replaces these with 4-bit).
    pub fn layer_linear_weight_params(&self) -> u64 {
        self.layer_linears().iter().map(Linear::weight_params).sum()
    }

    /// Input embedding (and learned positions, and an embedding LayerNorm) parameters.
    pub fn embedding_params(&self) -> u64 {
        self.vocab * self.hidden
            + self.learned_positions * self.hidden
            + if self.embedding_norm {
                2 * self.hidden
            } else {
                0
            }
    }

    /// LM head parameters not shared with the embedding.
    pub fn lm_head_params(&self) -> u64 {
        let w = if self.tied_embeddings {
            0
        } else {
            self.vocab * self.hidden
        };
        w + if self.lm_head_bias { self.vocab } else { 0 }
    }

    /// The final norm's parameters.
    pub fn final_norm_params(&self) -> u64 {
        match self.norm {
            Norm::RmsNorm => self.hidden,
            Norm::LayerNorm => 2 * self.hidden,
        }
    }

    /// Every parameter of the model, as `model.num_parameters()` counts them (tied weights once).
    pub fn total_params(&self) -> u64 {
        self.layers * self.layer_params()
            + self.embedding_params()
            + self.lm_head_params()
            + self.final_norm_params()
            + self.vision.params()
    }

    /// Checks the invariants the engine relies on; every message names the field.
    pub fn validate(&self) -> Result<(), ArchError> {
        let dims = [
            ("hidden_size", self.hidden),
            ("intermediate_size", self.intermediate),
            ("num_attention_heads", self.heads),
            ("num_key_value_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab),
        ];
        for (name, v) in dims {
            if v == 0 {
                return Err(ArchError(format!("{name} must be at least 1")));
            }
            if v > MAX_DIM {
                return Err(ArchError(format!(
                    "{name} = {v} is larger than any model (at most {MAX_DIM})"
                )));
            }
        }
        in_range("num_hidden_layers", self.layers, MAX_LAYERS)?;
        ensure(self.heads.is_multiple_of(self.kv_heads), || {
            format!(
                "num_key_value_heads = {} does not divide num_attention_heads = {}",
                self.kv_heads, self.heads
            )
        })?;
        ensure(self.learned_positions <= MAX_DIM, || {
            format!("max positions {} is out of range", self.learned_positions)
        })?;
        in_range(
            "the expert count (num_local_experts / num_experts)",
            self.experts,
            MAX_EXPERTS,
        )?;
        ensure((1..=self.experts).contains(&self.experts_per_token), || {
            format!(
                "num_experts_per_tok = {} must be between 1 and the expert count {}",
                self.experts_per_token, self.experts
            )
        })?;
        ensure(self.shared_expert_intermediate <= MAX_DIM, || {
            format!(
                "shared_expert_intermediate_size = {} is larger than any model (at most {MAX_DIM})",
                self.shared_expert_intermediate
            )
        })?;
        if self.norms_per_layer > 8 {
            return Err(ArchError("more than 8 norms per layer".into()));
        }
        Ok(())
    }

    /// A Llama-style architecture (RMSNorm, SwiGLU, rotary, no biases, untied head).
    pub fn llama(
        name: &str,
        layers: u64,
        hidden: u64,
        intermediate: u64,
        heads: u64,
        kv_heads: u64,
        vocab: u64,
    ) -> Self {
        Architecture {
            name: name.to_string(),
            model_type: "llama".into(),
            layers,
            hidden,
            intermediate,
            heads,
            kv_heads,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            vocab,
            tied_embeddings: false,
            mlp: Mlp::Gated,
            norm: Norm::RmsNorm,
            norms_per_layer: 2,
            fused_qkv: false,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            lm_head_bias: false,
            learned_positions: 0,
            embedding_norm: false,
            experts: 1,
            experts_per_token: 1,
            norm_scale_fp32: false,
            composite_gelu: false,
            final_logit_softcap: false,
            attn_logit_softcap: false,
            buffer_bytes: 0,
            qk_norm: QkNorm::None,
            qkv_views: false,
            norms_share_input: false,
            attn_sinks: false,
            swiglu_clamp: false,
            router_topk_softmax: false,
            vision: VisionTower::default(),
            shared_expert_intermediate: 0,
            shared_expert_gate: false,
        }
    }
}

/// `name = v` must be in 1..=max.
fn in_range(name: &str, v: u64, max: u64) -> Result<(), ArchError> {
    ensure((1..=max).contains(&v), || {
        format!("{name} = {v} is out of range 1..={max}")
    })
}

/// An error with `message` unless `ok`.
fn ensure(ok: bool, message: impl FnOnce() -> String) -> Result<(), ArchError> {
    if ok {
        Ok(())
    } else {
        Err(ArchError(message()))
    }
}
