//! Plans: the raw query vocabulary of the contract, parsed once into a validated [`Plan`] with diagnostics.

use crate::hub::{self, HubId};
use crate::presets::{GpuId, ModelId};
use crate::text::{clip, count, quote, Said, MAX_LISTED, MAX_MESSAGE_CHARS};
use serde::{Deserialize, Serialize};

mod vocab;
pub use vocab::*;

/// A validated training plan: every field holds an accepted value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The bundled model (see [`presets::MODELS`]); an imported config replaces the architecture.
    pub model: ModelId,
    /// A Hugging Face Hub model instead of the preset (`model=org/name`): the link holds its id, and the front
    /// end that fetched and imported its `config.json` holds the architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubId>,
    pub method: Method,
    pub rank: u64,
    pub targets: Targets,
    pub dropout: f64,
    pub adapter_dtype: DType,
    pub micro_batch: u64,
    pub seq_len: u64,
    pub grad_checkpointing: bool,
    pub attn: Attn,
    pub loss: Loss,
    pub chunk: u64,
    pub optimizer: Optimizer,
    pub precision: Precision,
    pub quant: Quant,
    pub double_quant: bool,
    pub upcast: bool,
    /// 4-bit matmuls keep their input for backward, as bitsandbytes' MatMul4Bit did up to its 0.44
    /// releases (`ctx.tensors = (A, B)`); current releases keep none.
    pub qlora_saves_input: bool,
    /// How transformers stores MoE experts (only a quantized base under `fw=hf` tells them apart).
    pub moe_experts: MoeExperts,
    pub gpus: u64,
    pub zero: u8,
    pub shard: Shard,
    pub wrap: Wrap,
    pub grad_sync: GradSync,
    pub gpu: GpuId,
    pub framework: Framework,
    pub peft: Peft,
    /// Virtual tokens of prompt and prefix tuning (PEFT `num_virtual_tokens`).
    pub virtual_tokens: u64,
    pub tokens: TokenTraining,
    /// torch.compile fuses elementwise chains (norms, activations, casts) so their intermediates are not kept.
    pub compile: bool,
    /// Liger kernels for RMSNorm, SwiGLU and RoPE (the fused loss is `loss=fused`).
    pub liger: bool,
    /// Optimizer in backward (torchtune `optimizer_in_bwd`): each parameter steps as soon as its gradient is
    /// ready, and the gradient is freed; the full set of gradients never exists.
    pub optimizer_in_backward: bool,
    /// Activation offloading (torchtune `enable_activation_offloading`): what each layer keeps for backward waits
    /// in CPU memory and comes back one layer ahead of backward.
    pub offload_activations: bool,
    /// CPU offload (FSDP `CPUOffload(offload_params=True)`, DeepSpeed `offload_param` + `offload_optimizer`):
    /// optimizer states, fp32 master weights and reduced gradients live in CPU memory and the optimizer steps
    /// there; under `zero=3` the parameter shards too, each layer fetched to the GPU when it runs.
    pub cpu_offload: bool,
    /// Quantizing each weight at load builds two (weights x 16) 16-bit comparison tensors, as torchao's NF4
    /// quantizer did before May 2024 (torchtune's QLoRA then); later ones work in chunks.
    pub quantize_at_load_wide: bool,
    /// Micro-batches whose gradients add up before each optimizer step: from the second on, the accumulated
    /// gradients stay resident through forward and backward.
    pub grad_accumulation: u64,
    /// Bits per logit of the model output a training loop keeps until after the optimizer step (0, 16 or 32):
    /// fsdp_qlora's loop holds `output` (fp32 logits under transformers 4.36 to 4.44), and torchtune's recipes
    /// kept their fp32 logits until mid-2024; the Trainer drops it before backward.
    pub hold_logits_bits: u64,
    /// The layers are split across the GPUs (`device_map="auto"`), which run one after another: no data
    /// parallelism and no sharding.
    pub split_layers: bool,
    /// The caching allocator's state at the peak step (reserved against allocated).
    pub allocator: Alloc,
    pub embed: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            model: ModelId::DEFAULT,
            hub: None,
            method: Method::Qlora,
            rank: 16,
            targets: Targets::ALL_LINEAR,
            dropout: 0.0,
            adapter_dtype: DType::Fp32,
            micro_batch: 1,
            seq_len: 2048,
            grad_checkpointing: true,
            attn: Attn::Sdpa,
            loss: Loss::Standard,
            chunk: 256,
            optimizer: Optimizer::AdamwTorch,
            precision: Precision::AmpBf16,
            quant: Quant::Nf4,
            double_quant: true,
            upcast: false,
            qlora_saves_input: false,
            moe_experts: MoeExperts::Fused,
            gpus: 1,
            zero: 0,
            shard: Shard::Auto,
            wrap: Wrap::Auto,
            grad_sync: GradSync::Auto,
            gpu: GpuId::DEFAULT,
            framework: Framework::Hf,
            peft: Peft::Lora,
            virtual_tokens: DEFAULT_VIRTUAL_TOKENS,
            tokens: TokenTraining::Frozen,
            compile: false,
            liger: false,
            optimizer_in_backward: false,
            offload_activations: false,
            cpu_offload: false,
            quantize_at_load_wide: false,
            grad_accumulation: 1,
            hold_logits_bits: 0,
            split_layers: false,
            allocator: Alloc::Cached,
            embed: false,
        }
    }
}

/// One problem found in a raw query: the key it concerns and a message naming the accepted values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The result of parsing a query: a plan where every bad key kept its default, and what was wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub plan: Plan,
    pub diagnostics: Vec<Diagnostic>,
}

/// Virtual tokens of prompt and prefix tuning unless the plan says otherwise.
pub const DEFAULT_VIRTUAL_TOKENS: u64 = 20;

/// Every key of the contract's vocabulary, in the order [`Plan::to_query`] writes them.
pub const KEYS: &[&str] = &[
    "model", "method", "r", "targets", "dropout", "adtype", "b", "s", "ga", "gc", "attn", "loss",
    "chunk", "opt", "prec", "quant", "dq", "upcast", "qsave", "moe", "gpus", "zero", "shard",
    "wrap", "gsync", "gpu", "fw", "peft", "vt", "tt", "compile", "liger", "oib", "aoff", "cpuoff",
    "qload", "hold", "split", "alloc", "embed",
];

/// Decodes `%XX` escapes and `+`; invalid escapes are kept literally, invalid UTF-8 is replaced.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encodes a value for a query string (RFC 3986 unreserved characters stay, and `,` for target lists).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        // `/` and `@` may stand in a query (RFC 3986): a Hub id reads `model=org/name@rev`.
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b',' | b'/' | b'@')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn parse_uint(key: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{key}={n} is out of range; accepted: integers {min} to {max}"
        )),
        // A whole number too large for u64, or a signed one ("-5"), is an integer outside the range.
        Err(_) if is_integer_text(v) => Err(format!(
            "{key}={} is out of range; accepted: integers {min} to {max}",
            // Signs and digits are safe to show as they are; only a long run needs quoting's clip.
            if v.len() <= 24 {
                v.to_string()
            } else {
                quote(v)
            }
        )),
        Err(_) => Err(format!(
            "{key}={} is not an integer; accepted: integers {min} to {max}",
            quote(v)
        )),
    }
}

/// Digits, optionally signed: text that reads as an integer even when `u64` cannot hold it.
fn is_integer_text(v: &str) -> bool {
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())
}

fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(format!(
            "{key}={} is not accepted; accepted: 0, 1",
            quote(v)
        )),
    }
}

fn keyword<T>(
    key: &str,
    v: &str,
    parse: fn(&str) -> Option<T>,
    accepted: String,
) -> Result<T, String> {
    parse(v).ok_or_else(|| format!("{key}={} is not accepted; accepted: {accepted}", quote(v)))
}

impl Plan {
    /// Whether the model hands its loop full logits a loop could hold (`hold`): the standard loss under the
    /// Hugging Face and torchtune profiles; litgpt's profile holds its own, and the other losses return none.
    pub fn returns_full_logits(&self) -> bool {
        matches!(self.framework, Framework::Hf | Framework::Torchtune)
            && self.loss == Loss::Standard
    }

    /// Whether an MoE model's experts are 3D parameters here (transformers 5 under the HF profile, `moe=fused`):
    /// bitsandbytes and GPTQ leave them unquantized, and LoRA reaches them through PEFT's `target_parameters`.
    pub fn experts_are_parameters(&self) -> bool {
        self.framework == Framework::Hf && self.moe_experts == MoeExperts::Fused
    }

    /// The sharding this plan runs, `auto` resolved for its framework: the Trainer goes through accelerate's
    /// FSDP1 with PEFT's wrap policy and accumulates inside `no_sync`; litgpt (FSDP2 since August 2025, its
    /// Block policy before) accumulates inside `no_backward_sync`; torchtune's recipes shard with FSDP2 and
    /// reduce every micro-batch.
    pub fn sharding(&self) -> Sharding {
        let fw = self.framework;
        let shard = match (self.shard, fw) {
            (Shard::Auto, Framework::Hf | Framework::Webgpu) => Shard::Fsdp1,
            (Shard::Auto, _) => Shard::Fsdp2,
            (s, _) => s,
        };
        let block = match self.wrap {
            Wrap::Auto => fw != Framework::Hf,
            w => w == Wrap::Block,
        };
        let sync_each_batch = match self.grad_sync {
            GradSync::Auto => fw == Framework::Torchtune,
            g => g == GradSync::EachBatch,
        };
        Sharding {
            shard,
            mixed_units: shard == Shard::Fsdp1 && block && self.method != Method::Full,
            sync_each_batch,
        }
    }

    /// Whether FSDP shards this plan: several GPUs in data parallel (no layer split), gradients or parameters
    /// sharded (`zero` 2 or 3), not by DeepSpeed.
    pub fn sharded_by_fsdp(&self) -> bool {
        self.gpus > 1
            && !self.split_layers
            && self.zero >= 2
            && self.sharding().shard != Shard::Deepspeed
    }

    /// Bits of the plan's GPTQ base: `Some` for a quantized-base plan over a GPTQ checkpoint.
    pub fn gptq_bits(&self) -> Option<u64> {
        self.quant
            .gptq_bits()
            .filter(|_| self.method == Method::Qlora)
    }

    /// Applies one key; on error the plan is unchanged and the message names the key and accepted values.
    pub fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        match key {
            // A preset, else an `org/name` shaped value as a Hub id; anything else is refused as a preset.
            "model" if ModelId::parse(v).is_none() && hub::looks_like_id(v) => {
                self.hub = Some(HubId::parse(v).map_err(|e| format!("model={e}"))?);
            }
            "model" => {
                let ids = ModelId::all().map(ModelId::id);
                self.model = bundled(key, v, ModelId::parse, ids, "preset", "peakplan presets")?;
                self.hub = None;
            }
            "method" => self.method = keyword(key, v, Method::from_key, Method::accepted())?,
            "r" => self.rank = parse_uint(key, v, 1, MAX_RANK)?,
            "targets" => self.targets = Targets::parse(v).map_err(|e| format!("targets: {e}"))?,
            "dropout" => {
                let p: f64 = v.parse().map_err(|_| {
                    format!(
                        "dropout={} is not a number; accepted: 0 to below 1",
                        quote(v)
                    )
                })?;
                if !(p.is_finite() && (0.0..1.0).contains(&p)) {
                    return Err(format!(
                        "dropout={} is out of range; accepted: 0 to below 1",
                        quote(v)
                    ));
                }
                self.dropout = p;
            }
            "adtype" => self.adapter_dtype = keyword(key, v, DType::from_key, DType::accepted())?,
            "b" => self.micro_batch = parse_uint(key, v, 1, MAX_BATCH)?,
            "s" => self.seq_len = parse_uint(key, v, 1, MAX_SEQ)?,
            "gc" => self.grad_checkpointing = parse_bool(key, v)?,
            "attn" => self.attn = keyword(key, v, Attn::from_key, Attn::accepted())?,
            "loss" => self.loss = keyword(key, v, Loss::from_key, Loss::accepted())?,
            "chunk" => self.chunk = parse_uint(key, v, 1, MAX_SEQ)?,
            "opt" => self.optimizer = keyword(key, v, Optimizer::from_key, Optimizer::accepted())?,
            "prec" => self.precision = keyword(key, v, Precision::from_key, Precision::accepted())?,
            "quant" => self.quant = keyword(key, v, Quant::from_key, Quant::accepted())?,
            "dq" => self.double_quant = parse_bool(key, v)?,
            "upcast" => self.upcast = parse_bool(key, v)?,
            "qsave" => self.qlora_saves_input = parse_bool(key, v)?,
            "moe" => {
                self.moe_experts = keyword(key, v, MoeExperts::from_key, MoeExperts::accepted())?
            }
            "gpus" => self.gpus = parse_uint(key, v, 1, MAX_GPUS)?,
            "zero" => self.zero = parse_uint(key, v, 0, 3)? as u8,
            "shard" => self.shard = keyword(key, v, Shard::from_key, Shard::accepted())?,
            "wrap" => self.wrap = keyword(key, v, Wrap::from_key, Wrap::accepted())?,
            "gsync" => self.grad_sync = keyword(key, v, GradSync::from_key, GradSync::accepted())?,
            "gpu" => {
                let ids = GpuId::all().map(GpuId::id);
                self.gpu = bundled(key, v, GpuId::parse, ids, "GPU", "peakplan presets")?;
            }
            "fw" => self.framework = keyword(key, v, Framework::from_key, Framework::accepted())?,
            "peft" => self.peft = keyword(key, v, Peft::from_key, Peft::accepted())?,
            "vt" => self.virtual_tokens = parse_uint(key, v, 1, MAX_VIRTUAL_TOKENS)?,
            "tt" => {
                self.tokens =
                    match v {
                        "0" => TokenTraining::Frozen,
                        "all" => TokenTraining::All,
                        _ => TokenTraining::Rows(parse_uint(key, v, 1, MAX_TOKEN_ROWS).map_err(
                            |e| format!("{e}, or 0 (frozen) or all (the whole embedding and head)"),
                        )?),
                    }
            }
            "compile" => self.compile = parse_bool(key, v)?,
            "oib" => self.optimizer_in_backward = parse_bool(key, v)?,
            "aoff" => self.offload_activations = parse_bool(key, v)?,
            "cpuoff" => self.cpu_offload = parse_bool(key, v)?,
            "qload" => self.quantize_at_load_wide = parse_bool(key, v)?,
            "ga" => self.grad_accumulation = parse_uint(key, v, 1, MAX_GRAD_ACCUMULATION)?,
            "split" => self.split_layers = parse_bool(key, v)?,
            "alloc" => self.allocator = keyword(key, v, Alloc::from_key, Alloc::accepted())?,
            "hold" => {
                self.hold_logits_bits = match v {
                    "0" => 0,
                    "16" => 16,
                    "32" => 32,
                    _ => {
                        return Err(format!(
                            "hold must be 0, 16 or 32 (bits per logit the loop keeps through backward), got {}",
                            quote(v)
                        ))
                    }
                }
            }
            "liger" => self.liger = parse_bool(key, v)?,
            "embed" => self.embed = parse_bool(key, v)?,
            _ => {
                return Err(format!(
                    "unknown key {}; known keys: {}",
                    quote(key),
                    KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// The value of one key in query spelling.
    pub fn get(&self, key: &str) -> Option<String> {
        let b = |v: bool| if v { "1" } else { "0" }.to_string();
        Some(match key {
            "model" => match &self.hub {
                Some(id) => id.to_string(),
                None => self.model.id().into(),
            },
            "method" => self.method.key().into(),
            "r" => self.rank.to_string(),
            "targets" => self.targets.key(),
            "dropout" => self.dropout.to_string(),
            "adtype" => self.adapter_dtype.key().into(),
            "b" => self.micro_batch.to_string(),
            "s" => self.seq_len.to_string(),
            "gc" => b(self.grad_checkpointing),
            "attn" => self.attn.key().into(),
            "loss" => self.loss.key().into(),
            "chunk" => self.chunk.to_string(),
            "opt" => self.optimizer.key().into(),
            "prec" => self.precision.key().into(),
            "quant" => self.quant.key().into(),
            "dq" => b(self.double_quant),
            "upcast" => b(self.upcast),
            "qsave" => b(self.qlora_saves_input),
            "moe" => self.moe_experts.key().into(),
            "gpus" => self.gpus.to_string(),
            "zero" => self.zero.to_string(),
            "shard" => self.shard.key().into(),
            "wrap" => self.wrap.key().into(),
            "gsync" => self.grad_sync.key().into(),
            "gpu" => self.gpu.id().into(),
            "fw" => self.framework.key().into(),
            "peft" => self.peft.key().into(),
            "vt" => self.virtual_tokens.to_string(),
            "tt" => match self.tokens {
                TokenTraining::Frozen => "0".into(),
                TokenTraining::All => "all".into(),
                TokenTraining::Rows(n) => n.to_string(),
            },
            "compile" => b(self.compile),
            "oib" => b(self.optimizer_in_backward),
            "aoff" => b(self.offload_activations),
            "cpuoff" => b(self.cpu_offload),
            "qload" => b(self.quantize_at_load_wide),
            "ga" => self.grad_accumulation.to_string(),
            "hold" => self.hold_logits_bits.to_string(),
            "split" => b(self.split_layers),
            "alloc" => self.allocator.key().into(),
            "liger" => b(self.liger),
            "embed" => b(self.embed),
            _ => return None,
        })
    }

    /// The whole plan as a query string (without `?`); `embed` only when set. Parses back to an equal plan.
    pub fn to_query(&self) -> String {
        KEYS.iter()
            .filter(|k| self.writes(k))
            .filter_map(|k| self.get(k).map(|v| format!("{k}={}", percent_encode(&v))))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// Whether [`Plan::to_query`] writes `key`: keys added after the first links are written only when they
    /// matter, so those links stay what they were.
    fn writes(&self, key: &str) -> bool {
        match key {
            "embed" => self.embed,
            // A count set under another PEFT kind is still part of the plan (switching back restores it).
            "vt" => {
                self.peft.uses_virtual_tokens() || self.virtual_tokens != DEFAULT_VIRTUAL_TOKENS
            }
            "oib" => self.optimizer_in_backward,
            "aoff" => self.offload_activations,
            "cpuoff" => self.cpu_offload,
            "qload" => self.quantize_at_load_wide,
            "ga" => self.grad_accumulation > 1,
            "hold" => self.hold_logits_bits > 0,
            "split" => self.split_layers,
            "alloc" => self.allocator != Alloc::Cached,
            "moe" => self.moe_experts != MoeExperts::Fused,
            "shard" => self.shard != Shard::Auto,
            "wrap" => self.wrap != Wrap::Auto,
            "gsync" => self.grad_sync != GradSync::Auto,
            _ => true,
        }
    }

    /// Parses a query string (`?` optional) over the defaults.
    pub fn parse_query(query: &str) -> Parsed {
        Self::parse_query_over(Plan::default(), query)
    }

    /// Parses a query string over a given base plan: each bad key keeps the base's value and adds a diagnostic.
    /// A key given more than once is ambiguous: none of its values is used. At most [`MAX_LISTED`] diagnostics
    /// are kept, each said once, then one `… and N more` (its `key` empty) counts the others.
    pub fn parse_query_over(plan: Plan, query: &str) -> Parsed {
        Self::parse_query_applied(plan, query).0
    }

    /// [`Plan::parse_query_over`], with the keys the query set (given once, with an accepted value), in order.
    pub(crate) fn parse_query_applied(mut plan: Plan, query: &str) -> (Parsed, Vec<&'static str>) {
        let query = query.strip_prefix('?').unwrap_or(query);
        let pairs: Vec<(String, Option<usize>, Option<String>)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = match p.split_once('=') {
                    Some((k, v)) => (percent_decode(k), Some(percent_decode(v))),
                    None => (percent_decode(p), None),
                };
                let i = key_index(&k);
                (k, i, v)
            })
            .collect();
        // Each known key's values, counted first, so that a repeated key is refused as a whole.
        let mut values: Vec<Vec<&str>> = vec![Vec::new(); KEYS.len()];
        for (_, i, v) in &pairs {
            if let (Some(i), Some(v)) = (i, v) {
                values[*i].push(v);
            }
        }
        let mut said: Said<Diagnostic> = Said::new(MAX_LISTED, MAX_MESSAGE_CHARS);
        // The first unknown key's message also lists the known keys; the others repeat their own text only.
        let mut first_unknown: Option<&str> = None;
        let mut applied = Vec::new();
        for (k, i, v) in &pairs {
            let message = match (*i, v) {
                (_, None) => format!("{} has no value (write key=value)", quote(k)),
                (None, Some(_)) if first_unknown == Some(k.as_str()) => continue,
                (None, Some(_)) => {
                    let first = first_unknown.is_none();
                    first_unknown.get_or_insert(k);
                    unknown_key(k, first)
                }
                (Some(i), Some(_)) if values[i].len() > 1 => repeated_key(KEYS[i], &values[i]),
                (Some(i), Some(v)) => match plan.set(KEYS[i], v) {
                    Ok(()) => {
                        applied.push(KEYS[i]);
                        continue;
                    }
                    Err(message) => message,
                },
            };
            said.say(&message, |message| Diagnostic {
                key: clip(k, KEY_CHARS),
                message,
            });
        }
        let (mut diagnostics, more) = said.into_parts();
        if more > 0 {
            diagnostics.push(Diagnostic {
                key: String::new(),
                message: format!("… and {} more problems", count(more as u64)),
            });
        }
        (Parsed { plan, diagnostics }, applied)
    }
}

/// Most characters of a diagnostic's key (every known key is far shorter).
const KEY_CHARS: usize = 64;

/// The position of a known key in [`KEYS`].
fn key_index(key: &str) -> Option<usize> {
    KEYS.iter().position(|k| *k == key)
}

/// The message for an unknown key: a close known key when there is one, and the known keys with the first
/// (saying them once, not with every unknown key).
fn unknown_key(key: &str, first: bool) -> String {
    let mut m = format!("unknown key {}", quote(key));
    if let Some(k) = KEYS.iter().find(|k| near(key, k)) {
        m.push_str(&format!(" (did you mean `{k}`?)"));
    }
    if first {
        m.push_str("; known keys: ");
        m.push_str(&KEYS.join(", "));
    }
    m
}

/// The bundled preset `v` names, or a message that says so with the ids it may have meant (a slip, or the same
/// family) and where every id is listed, instead of all of them: 46 model ids fill a phone's first screen.
fn bundled<T>(
    key: &str,
    v: &str,
    parse: fn(&str) -> Option<T>,
    ids: impl Iterator<Item = &'static str>,
    noun: &str,
    listed_by: &str,
) -> Result<T, String> {
    if let Some(id) = parse(v) {
        return Ok(id);
    }
    let ids: Vec<&str> = ids.collect();
    let family = v
        .split(['-', '_', '.'])
        .next()
        .unwrap_or(v)
        .to_ascii_lowercase();
    // Slips first, then the same family.
    let slips = ids.iter().filter(|id| near(v, id));
    let kin = ids
        .iter()
        .filter(|id| family.len() >= 3 && id.starts_with(family.as_str()) && !near(v, id));
    let close: Vec<&str> = slips.chain(kin).copied().take(6).collect();
    let hint = if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    };
    Err(format!(
        "{key}={} is not a known {noun}{hint} ({} bundled, listed by `{listed_by}` and the page's list)",
        quote(v),
        ids.len()
    ))
}

/// Whether `typed` is `known` with a different case, or with one character added, dropped, changed or two
/// neighbours swapped (only for keys of three characters or more, where such a slip is recognisable).
fn near(typed: &str, known: &str) -> bool {
    let (a, b) = (typed.as_bytes(), known.as_bytes());
    // Every known key is ASCII, and the test runs once per distinct unknown key: no allocation.
    if !typed.is_ascii() || a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    if typed.eq_ignore_ascii_case(known) {
        return true;
    }
    if b.len() < 3 {
        return false;
    }
    // Skip the common prefix and suffix; what is left must be one edit.
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (x, y) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    x.len() <= 1 && y.len() <= 1 || (x.len() == 2 && y.len() == 2 && x[0] == y[1] && x[1] == y[0])
}

/// The message for a key given more than once: its first values, and that none is used.
fn repeated_key(key: &str, values: &[&str]) -> String {
    let shown: Vec<String> = values.iter().take(3).map(|v| quote(v)).collect();
    let etc = if values.len() > 3 { ", …" } else { "" };
    format!(
        "{key} is given {} times ({}{etc}); give it once (none of these values is used)",
        count(values.len() as u64),
        shown.join(", ")
    )
}
