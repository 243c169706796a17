//! The micro QLoRA run: a small Llama-style model trained for a few steps on the visitor's GPU, and its CPU reference.
//!
//! [`MicroConfig`] describes the run (plain data). [`MicroConfig::from_plan`] scales the page's plan into the micro
//! range, [`predicted_peak_bytes`] asks the accounting engine for the run's peak (the one engine: no second formula
//! here), and the submodules hold the reference implementation in plain `f32`:
//! - [`nf4`]: bitsandbytes NF4 quantization with double quantization of the absmax constants;
//! - [`ops`]: every operation the WebGPU kernels compute, one function each, in the same order of arithmetic;
//! - [`model`]: the model (embedding, decoder layers, LM head, cross-entropy), its backward into the LoRA adapters,
//!   and AdamW as `torch.optim.AdamW` does it.

pub mod model;
pub mod nf4;
pub mod ops;
mod rng;

pub use model::{AdamState, Batch, Lora, MicroModel, TensorId};
pub use rng::Rng;

use crate::arch::{Architecture, Target};
use crate::engine::estimate_rough;
use crate::plan::{
    Attn, Checkpointing, DType, Framework, Loss, Method, Optimizer, Plan, Precision, Quant, Targets,
};

/// Attention implementation of the micro run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MicroAttention {
    /// Materializes the softmax scores (`batch x heads x seq x seq`) and keeps them for backward.
    Eager,
    /// Online softmax over key tiles (flash-style): keeps only the output and the log-sum-exp per row.
    Tiled,
}

/// Loss implementation of the micro run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MicroLoss {
    /// All `tokens x vocab` logits at once, kept from forward to backward.
    Whole,
    /// The LM head and cross-entropy over this many tokens at a time; backward recomputes each chunk's logits.
    Chunked(usize),
}

/// AdamW hyper-parameters (`torch.optim.AdamW` semantics).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for AdamW {
    fn default() -> Self {
        // torch's betas, eps and weight decay; a learning rate large enough to move a micro model in 5 steps.
        AdamW {
            lr: 5e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// Limits of the micro range: small enough for a browser, and what the kernels assume.
pub const MIN_HIDDEN: usize = 64;
pub const MAX_HIDDEN: usize = 1024;
pub const MAX_LAYERS: usize = 4;
pub const MAX_VOCAB: usize = 4096;
/// The tiled attention kernel keeps key/value tiles of this width in workgroup memory.
pub const MAX_HEAD_DIM: usize = 64;
pub const MAX_RANK: usize = 256;
pub const MAX_BATCH: usize = 8;
pub const MAX_SEQ: usize = 512;

/// Hidden width of the micro model built from a plan.
const PLAN_HIDDEN: usize = 256;
/// Head width of the micro model built from a plan.
const PLAN_HEAD_DIM: usize = 64;
const PLAN_LAYERS: usize = 2;

/// One micro QLoRA run: model shape, adapters, batch, attention and loss kinds, optimizer.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroConfig {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    /// Key/value heads (GQA when fewer than `heads`); divides `heads`.
    pub kv_heads: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub rank: usize,
    /// Projections that get LoRA adapters; `lm_head` is ignored (the head stays frozen).
    pub targets: Targets,
    pub alpha: f32,
    pub batch: usize,
    pub seq: usize,
    pub attention: MicroAttention,
    pub loss: MicroLoss,
    pub adamw: AdamW,
    pub rope_theta: f32,
    pub norm_eps: f32,
    /// Seed of the weights and of the synthetic batch.
    pub seed: u64,
}

/// The seven projections of a decoder layer, in forward order (the order of adapters and their tensors).
pub const PROJECTIONS: [Target; 7] = {
    // Every target but the LM head, in the order `Target::ALL` lists them.
    let t = Target::ALL;
    [t[0], t[1], t[2], t[3], t[4], t[5], t[6]]
};

impl Default for MicroConfig {
    fn default() -> Self {
        MicroConfig::from_plan(&Plan::default())
    }
}

fn ceil_to(v: usize, m: usize) -> usize {
    v.div_ceil(m) * m
}

impl MicroConfig {
    /// Scales a page plan into the micro range. Monotone in the plan's rank, micro-batch and sequence length:
    /// rank `clamp(r, 1, 64)`, batch `clamp(b, 1, 4)`, sequence `clamp(s / 8, 16, 256)`. The shape follows the
    /// plan's model where it matters (GQA ratio, MLP ratio, vocabulary / 16); attention is eager when the plan's is,
    /// tiled otherwise; the loss is chunked (chunk / 8 tokens) when the plan's is chunked or fused.
    pub fn from_plan(plan: &Plan) -> MicroConfig {
        let arch = crate::preset_arch(plan);
        let hidden = PLAN_HIDDEN;
        let heads = hidden / PLAN_HEAD_DIM;
        let ratio = ((arch.heads / arch.kv_heads.max(1)) as usize).clamp(1, heads);
        let mut kv_heads = heads / ratio;
        while !heads.is_multiple_of(kv_heads) {
            kv_heads -= 1;
        }
        let mlp_ratio = arch.intermediate as f64 / arch.hidden.max(1) as f64;
        let intermediate =
            ceil_to((hidden as f64 * mlp_ratio).ceil() as usize, 64).clamp(64, 4 * MAX_HIDDEN);
        let vocab = ceil_to((arch.vocab as usize / 16).max(1), 64).clamp(512, MAX_VOCAB);
        let clampu = |v: u64, lo: u64, hi: u64| v.clamp(lo, hi) as usize;
        let mut targets = Targets(plan.targets.0 & !Target::LmHead.bit());
        if targets.0 == 0 {
            targets = Targets::QV;
        }
        let attention = match plan.attn {
            Attn::Eager => MicroAttention::Eager,
            Attn::Sdpa | Attn::Flash => MicroAttention::Tiled,
        };
        let loss = match plan.loss {
            Loss::Standard | Loss::Kernel => MicroLoss::Whole,
            Loss::Chunked | Loss::Fused => MicroLoss::Chunked(clampu(plan.chunk / 8, 1, 4096)),
        };
        MicroConfig {
            hidden,
            layers: PLAN_LAYERS,
            heads,
            kv_heads,
            intermediate,
            vocab,
            rank: clampu(plan.rank, 1, 64),
            targets,
            alpha: 16.0,
            batch: clampu(plan.micro_batch, 1, 4),
            seq: clampu(plan.seq_len / 8, 16, 256),
            attention,
            loss,
            adamw: AdamW::default(),
            rope_theta: 10000.0,
            norm_eps: 1e-5,
            seed: 0x5eed_2026,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim()
    }
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim()
    }
    /// Tokens of the batch, `batch x seq`.
    pub fn tokens(&self) -> usize {
        self.batch * self.seq
    }
    /// LoRA scaling `alpha / r`.
    pub fn scaling(&self) -> f32 {
        self.alpha / self.rank.max(1) as f32
    }
    /// Tokens per chunk of the loss (all tokens for the whole loss).
    pub fn loss_chunk(&self) -> usize {
        match self.loss {
            MicroLoss::Whole => self.tokens(),
            MicroLoss::Chunked(c) => c.clamp(1, self.tokens().max(1)),
        }
    }
    /// Whether projection `t` has an adapter.
    pub fn adapted(&self, t: Target) -> bool {
        t != Target::LmHead && self.targets.contains(t)
    }
    /// `(in, out)` of a projection.
    pub fn proj_shape(&self, t: Target) -> (usize, usize) {
        let (h, q, kv, i) = (self.hidden, self.q_dim(), self.kv_dim(), self.intermediate);
        match t {
            Target::Q => (h, q),
            Target::K | Target::V => (h, kv),
            Target::O => (q, h),
            Target::Gate | Target::Up => (h, i),
            Target::Down => (i, h),
            Target::LmHead => (h, self.vocab),
        }
    }

    /// Checks the ranges the reference and the kernels rely on.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |what: &str| Err(format!("micro run: {what}"));
        if !(MIN_HIDDEN..=MAX_HIDDEN).contains(&self.hidden) || !self.hidden.is_multiple_of(64) {
            return bad("hidden must be a multiple of 64 from 64 to 1024");
        }
        if !(1..=MAX_LAYERS).contains(&self.layers) {
            return bad("layers must be 1 to 4");
        }
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            return bad("heads must divide hidden");
        }
        let d = self.head_dim();
        if !d.is_multiple_of(2) || d > MAX_HEAD_DIM {
            return bad("the head width must be even and at most 64");
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad("kv_heads must divide heads");
        }
        if self.intermediate == 0
            || !self.intermediate.is_multiple_of(64)
            || self.intermediate > 4 * MAX_HIDDEN
        {
            return bad("intermediate must be a multiple of 64 up to 4096");
        }
        if !(2..=MAX_VOCAB).contains(&self.vocab) {
            return bad("vocab must be 2 to 4096");
        }
        if !(1..=MAX_RANK).contains(&self.rank) {
            return bad("rank must be 1 to 256");
        }
        if !(1..=MAX_BATCH).contains(&self.batch) || !(1..=MAX_SEQ).contains(&self.seq) {
            return bad("batch must be 1 to 8 and seq 1 to 512");
        }
        if !PROJECTIONS.iter().any(|t| self.adapted(*t)) {
            return bad("at least one projection needs an adapter");
        }
        if let MicroLoss::Chunked(0) = self.loss {
            return bad("the loss chunk must be at least 1 token");
        }
        Ok(())
    }

    /// The micro model as an ordinary architecture, for the accounting engine.
    pub fn architecture(&self) -> Architecture {
        Architecture::llama(
            "micro-llama",
            self.layers as u64,
            self.hidden as u64,
            self.intermediate as u64,
            self.heads as u64,
            self.kv_heads as u64,
            self.vocab as u64,
        )
    }

    /// The micro run as an ordinary plan: QLoRA (NF4, double quantization), fp32 everywhere, fused AdamW,
    /// no gradient checkpointing, eager or flash attention, standard or chunked loss.
    pub fn plan(&self) -> Plan {
        // Struct update from the default, so that keys added to the plan later keep their defaults here.
        Plan {
            // The micro architecture is passed beside the plan; the model field is the default's and unused.
            model: crate::ModelId::DEFAULT,
            method: Method::Qlora,
            rank: self.rank as u64,
            targets: Targets(self.targets.0 & !Target::LmHead.bit()),
            dropout: 0.0,
            adapter_dtype: DType::Fp32,
            micro_batch: self.batch as u64,
            seq_len: self.seq as u64,
            checkpointing: Checkpointing::Off,
            attn: match self.attention {
                MicroAttention::Eager => Attn::Eager,
                MicroAttention::Tiled => Attn::Flash,
            },
            loss: match self.loss {
                MicroLoss::Whole => Loss::Standard,
                MicroLoss::Chunked(_) => Loss::Chunked,
            },
            chunk: self.loss_chunk() as u64,
            optimizer: Optimizer::AdamwTorchFused,
            precision: Precision::Fp32,
            quant: Quant::Nf4,
            double_quant: true,
            upcast: true,
            gpus: 1,
            zero: 0,
            embed: false,
            framework: Framework::Webgpu,
            ..Plan::default()
        }
    }
}

/// The accounting engine's peak allocated bytes for the micro run (the figure the page sets beside the measurement).
pub fn predicted_peak_bytes(cfg: &MicroConfig) -> u64 {
    // Allocated memory needs no allocator replay.
    estimate_rough(&cfg.architecture(), &cfg.plan()).peak_allocated_bytes
}
