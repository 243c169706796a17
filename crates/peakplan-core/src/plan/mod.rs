//! Plans: the raw query vocabulary of the contract, parsed once into a validated [`Plan`] with diagnostics.

use crate::hub::HubId;
use crate::presets::{GpuId, ModelId};
use crate::text::{clip, count, quote, Said, MAX_LISTED, MAX_MESSAGE_CHARS};
use serde::Serialize;

mod codec;
mod dataset;
mod deepspeed;
mod grpo;
mod keys;
mod vocab;
pub use dataset::{DatasetLengths, MAX_DATASET_LENGTHS};
pub use deepspeed::{DeepSpeedSizes, DS_MAX_LIVE, DS_SUB_GROUP};
pub use grpo::{DEFAULT_GENERATIONS, DEFAULT_VLLM_MEMORY, MAX_BETA, MAX_GENERATIONS};
pub use keys::{keyword_spellings, KEYS};
pub use vocab::*;

/// A validated training plan: every field holds an accepted value. Each key's field, default, parser and writer
/// are declared once, in the key table (`keys.rs`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The bundled model (see [`crate::presets::MODELS`]); an imported config replaces the architecture.
    pub model: ModelId,
    /// A Hugging Face Hub model instead of the preset (`model=org/name`): the link holds its id, and the front
    /// end that fetched and imported its `config.json` holds the architecture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubId>,
    pub method: Method,
    pub rank: u64,
    pub targets: Targets,
    pub dropout: f64,
    pub adapter_dtype: DType,
    pub micro_batch: u64,
    pub seq_len: u64,
    /// Gradient checkpointing, on the GPU or offloaded (the JSON's `grad_checkpointing`: a boolean, or `"offload"`).
    #[serde(rename = "grad_checkpointing")]
    pub checkpointing: Checkpointing,
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
    /// DeepSpeed `sub_group_size` in elements: the optimizer steps its fp32 partition one sub-group at a time
    /// (`None`: `auto`, DeepSpeed's default of 10^9). [`Plan::deepspeed_sizes`] resolves this and the next keys.
    pub ds_sub_group: Option<u64>,
    /// DeepSpeed `reduce_bucket_size` in elements: gradients are reduced a bucket at a time (`None`: `auto`, the
    /// Trainer's fill, hidden_size²).
    pub ds_reduce_bucket: Option<u64>,
    /// DeepSpeed `allgather_bucket_size` in elements, ZeRO-1 and 2's all-gather of the updated parameters
    /// (`None`: `auto`, DeepSpeed's default of 5 x 10^8).
    pub ds_allgather_bucket: Option<u64>,
    /// DeepSpeed `stage3_prefetch_bucket_size` in elements: ZeRO-3 parameters fetched ahead of use (`None`: `auto`,
    /// the Trainer's fill, 0.9 x hidden_size²).
    pub ds_prefetch_bucket: Option<u64>,
    /// DeepSpeed `stage3_max_live_parameters`: ZeRO-3 gathered parameters resident before any is released
    /// (`None`: `auto`, DeepSpeed's default of 10^9).
    pub ds_max_live: Option<u64>,
    /// DeepSpeed `stage3_max_reuse_distance`: a ZeRO-3 parameter used again within this many elements of fetched
    /// parameters stays gathered (`None`: `auto`, DeepSpeed's default of 10^9; the Trainer does not fill it).
    pub ds_max_reuse: Option<u64>,
    /// DeepSpeed `stage3_param_persistence_threshold` in elements: ZeRO-3 leaves smaller parameters whole on every
    /// GPU (`None`: `auto`, the Trainer's fill, 10 x hidden_size).
    pub ds_persistence: Option<u64>,
    /// DeepSpeed `overlap_comm`: reduce gradients while backward runs (`None`: `auto`, DeepSpeed's default: on
    /// under ZeRO-3 only).
    pub ds_overlap_comm: Option<bool>,
    /// DeepSpeed `contiguous_gradients`: copy gradients into one buffer as they are made (`None`: `auto`,
    /// DeepSpeed's default: on).
    pub ds_contiguous_grads: Option<bool>,
    /// ZeRO-3 partitions the model as it loads (`deepspeed.zero.Init`, which `from_pretrained` enters when
    /// `is_deepspeed_zero3_enabled()`: the Trainer's default under ZeRO-3); off, every GPU loads the whole model
    /// first. Nothing is partitioned at load under other stages.
    pub zero_init: bool,
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
    /// `PYTORCH_CUDA_ALLOC_CONF`'s `max_split_size_mb` (above 20, as PyTorch requires): cached blocks this large
    /// or larger are never split for a smaller request. `None` is PyTorch's default, no limit.
    pub max_split_mb: Option<u64>,
    /// The training task (supervised, or a preference objective of TRL's trainers).
    pub task: Task,
    /// Where a preference task's reference log-probabilities come from ([`Plan::reference`] resolves `auto`).
    pub reference: Reference,
    /// Prompt tokens of each sequence of a preference task (`None`: half of `s`); the completions fill the rest.
    pub prompt_tokens: Option<u64>,
    /// GRPO: completions generated per prompt (`num_generations`).
    pub generations: u64,
    /// GRPO: tokens generated per completion (`max_completion_length`; `None`: what `s` leaves after the prompt).
    /// Set, it makes `s` the prompt and the completion together.
    pub completion_max: Option<u64>,
    /// GRPO: the KL coefficient; 0 (TRL's default since 0.19) runs no reference.
    pub beta: f64,
    /// GRPO: where completions are generated.
    pub generation: Generation,
    /// GRPO under `gen=vllm_colocate`: the share of the GPU's memory vLLM takes (`gpu_memory_utilization`).
    pub vllm_memory: f64,
    /// How batch lengths vary from step to step; `lmean`, `lsd` and `lmax` describe the sequences' lengths
    /// (`None`: `auto`, see [`Plan::length_stats`]).
    pub lengths: Lens,
    pub len_mean: Option<u64>,
    pub len_sd: Option<u64>,
    pub len_max: Option<u64>,
    /// Whether sequences longer than `lmax` are cut to it or dropped (`ltrunc`).
    pub len_overlong: Overlong,
    /// The chart alone with a one-line caption, for `<iframe>` embedding (the page only).
    pub embed: bool,
    /// Light or dark colours, or the reader's own scheme (the page and the SVG only; no estimate reads it).
    pub theme: ColorScheme,
}

/// The sequence lengths of a run whose batches vary, in tokens ([`Plan::length_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthStats {
    pub mean: u64,
    pub sd: u64,
    pub max: u64,
    /// Whether the distribution's draws longer than `max` are cut to it or dropped.
    pub overlong: Overlong,
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

impl Plan {
    // `sharding`, `sharded_by_fsdp`, `returns_full_logits` and `experts_are_parameters` depend on the framework:
    // they read its row in the profile module (`profile.rs`), where they are defined.

    /// Bits of the plan's GPTQ base: `Some` for a quantized-base plan over a GPTQ checkpoint.
    pub fn gptq_bits(&self) -> Option<u64> {
        self.quant
            .gptq_bits()
            .filter(|_| self.method == Method::Qlora)
    }

    /// Prompt tokens of each sequence of a preference task: `prompt`, or half of `s` for `auto` (TRL's defaults
    /// were 512 of 1,024; a GRPO plan with `completion` set: what `s` leaves beside it); always at least one
    /// completion token is left.
    pub fn prompt_tokens(&self) -> u64 {
        let auto = match self.completion_max {
            Some(c) if self.task == Task::Grpo && c < self.seq_len => self.seq_len - c,
            _ => self.seq_len / 2,
        };
        self.prompt_tokens
            .unwrap_or(auto)
            .min(self.seq_len.saturating_sub(1))
    }

    /// The length distribution of a run whose batches vary (`lens=padded` or `grouped`): the longest sequence
    /// (`lmax`, at most `s`; `auto`: `s`), the mean (`lmean`; `auto`: half the longest) and the standard deviation
    /// (`lsd`; `auto`: half the mean), in tokens. The mean and deviation may be a dataset's before truncation:
    /// longer sequences are cut to the longest, or dropped (`ltrunc`).
    pub fn length_stats(&self) -> LengthStats {
        let max = self.len_max.unwrap_or(self.seq_len).clamp(1, self.seq_len);
        let mean = self.len_mean.unwrap_or(max / 2).max(1);
        let sd = self.len_sd.unwrap_or(mean / 2);
        LengthStats {
            mean,
            sd,
            max,
            overlong: self.len_overlong,
        }
    }

    /// Completion tokens of each sequence of a preference task (`s` less the prompt).
    pub fn completion_tokens(&self) -> u64 {
        self.seq_len - self.prompt_tokens()
    }

    /// Where the plan's reference log-probabilities come from, `auto` resolved as TRL resolves it: none for a
    /// task without a reference, the base with its adapters switched off under PEFT, a second copy of the model
    /// under full fine-tuning.
    pub fn reference_source(&self) -> Reference {
        match self.reference {
            _ if !self.task.has_reference() => Reference::None,
            _ if self.task == Task::Grpo && self.beta == 0.0 => Reference::None,
            Reference::Auto if self.method == Method::Full => Reference::Model,
            Reference::Auto => Reference::AdaptersOff,
            other => other,
        }
    }

    /// The whole plan as a query string (without `?`); `embed` and `theme` only when set. Parses back to an equal plan.
    pub fn to_query(&self) -> String {
        KEYS.iter()
            .filter(|k| self.writes(k))
            .filter_map(|k| self.get(k).map(|v| format!("{k}={}", percent_encode(&v))))
            .collect::<Vec<_>>()
            .join("&")
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
        let framework_before = plan.framework;
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
        // A framework the query chooses brings its defaults for the keys the query leaves out.
        if applied.contains(&"fw") {
            plan.take_framework_defaults(framework_before, &applied);
        }
        for (key, message) in plan.check_between_keys() {
            applied.retain(|k| *k != key);
            said.say(&message, |message| Diagnostic {
                key: key.into(),
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

impl Plan {
    /// Whether the plan breaks none of the rules between keys, as its link would parse without a diagnostic.
    pub(crate) fn keys_agree(&self) -> bool {
        self.clone().check_between_keys().is_empty()
    }

    /// The rules between keys, checked once every key is read (so their order in a query does not matter): a
    /// key that breaks one goes back to its default (which never does) and its message is returned.
    fn check_between_keys(&mut self) -> Vec<(&'static str, String)> {
        let mut said = self.check_framework_keys();
        if self.task != Task::Sft && self.framework != Framework::Hf {
            said.push((
                "task",
                format!(
                    "task={} is planned as TRL's trainers run it, over transformers (fw=hf), not fw={}",
                    self.task.key(),
                    self.framework.key()
                ),
            ));
            self.task = Task::Sft;
        }
        let task = self.task;
        let reference = match self.reference {
            Reference::Auto => None,
            Reference::Model | Reference::AdaptersOff | Reference::Precomputed
                if !task.has_reference() =>
            {
                Some(format!(
                    "ref={} does not apply to task={}, which compares with no reference; accepted: auto, none",
                    self.reference.key(),
                    task.key()
                ))
            }
            Reference::AdaptersOff if self.method == Method::Full => Some(
                "ref=adapters_off needs adapters to switch off (method=lora or qlora); with method=full \
                 accepted: auto, model, precomputed, none"
                    .into(),
            ),
            _ => None,
        };
        if let Some(message) = reference {
            self.reference = Reference::Auto;
            said.push(("ref", message));
        }
        said.extend(self.check_grpo_keys());
        if let Some(max) = self.len_max.filter(|m| *m > self.seq_len) {
            self.len_max = None;
            said.push((
                "lmax",
                format!(
                    "lmax={max} is longer than s={}, which truncates every sequence; accepted: 1 to {}, or auto",
                    self.seq_len, self.seq_len
                ),
            ));
        }
        if let Some(prompt) = self.prompt_tokens.filter(|p| *p >= self.seq_len) {
            self.prompt_tokens = None;
            said.push((
                "prompt",
                format!(
                    "prompt={prompt} leaves no completion tokens in s={}; accepted: 1 to {} (the completions fill \
                     the rest of s), or auto",
                    self.seq_len,
                    self.seq_len.saturating_sub(1).max(1)
                ),
            ));
        }
        said
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
