//! The accounting engine: the memory of one training step, component by component, and its peak over the phases.
//!
//! Every figure that the page, the CLI, the chart and the WebGPU comparison show comes from [`estimate`].
//! Arithmetic is done in [`Count`] (an `f64` holding whole numbers) and saturates at `u64::MAX` on output, so
//! absurd plans report "beyond arithmetic" instead of wrapping.

use crate::arch::{Architecture, Linear, LinearInput, Norm, QkNorm, Target};
use crate::plan::{
    Alloc, Attn, Framework, Loss, Method, Optimizer, Peft, Plan, Precision, Quant, TokenTraining,
};
use serde::Serialize;

/// The four bars of the chart, plus everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Weights,
    Gradients,
    Optimizer,
    Activations,
    Other,
}

impl Category {
    pub const ALL: [Category; 5] = [
        Category::Weights,
        Category::Gradients,
        Category::Optimizer,
        Category::Activations,
        Category::Other,
    ];
    pub fn label(self) -> &'static str {
        match self {
            Category::Weights => "Weights",
            Category::Gradients => "Gradients",
            Category::Optimizer => "Optimizer states",
            Category::Activations => "Activations",
            Category::Other => "Other",
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            Category::Weights => "weights",
            Category::Gradients => "gradients",
            Category::Optimizer => "optimizer",
            Category::Activations => "activations",
            Category::Other => "other",
        }
    }
}

/// The phases of a training step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Model and optimizer state resident between steps.
    Load,
    /// End of forward: saved activations and the loss's logits.
    Forward,
    /// The largest moment of backward.
    Backward,
    /// The optimizer step: all gradients plus the update's temporaries.
    Optimizer,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Load,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
    ];
    pub fn label(self) -> &'static str {
        match self {
            Phase::Load => "loaded",
            Phase::Forward => "end of forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer step",
        }
    }
}

macro_rules! components {
    ($($variant:ident => $key:literal, $cat:ident, $label:literal, $formula:literal;)+) => {
        /// One memory component of a training step.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Kind { $($variant),+ }
        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),+];
            pub const COUNT: usize = Kind::ALL.len();
            /// JSON key.
            pub fn key(self) -> &'static str { match self { $(Kind::$variant => $key),+ } }
            pub fn category(self) -> Category { match self { $(Kind::$variant => Category::$cat),+ } }
            pub fn label(self) -> &'static str { match self { $(Kind::$variant => $label),+ } }
            /// The formula in plain language.
            pub fn formula(self) -> &'static str { match self { $(Kind::$variant => $formula),+ } }
        }
    };
}

components! {
    BaseWeights => "base_weights", Weights, "Base weights",
        "parameters x bytes per parameter (4-bit linears at 0.5 B each under QLoRA, 1 B under LLM.int8 or 8-bit GPTQ; the rest in the weight dtype), plus buffers such as GPT-BigCode's causal mask";
    QuantConstants => "quant_constants", Weights, "Quantization constants",
        "per 64-weight block: an fp32 absmax (0.5 bit/param), or with double quantization an 8-bit absmax plus an fp32 scale per 256 blocks (0.127 bit/param); LLM.int8: an fp32 absmax per output row; GPTQ: an fp16 scale and a packed zero point per 128 inputs and output, an int32 group index per input";
    AdapterWeights => "adapter_weights", Weights, "Adapter weights",
        "rank x (in + out) per adapted matrix x adapter dtype bytes";
    Gradients => "gradients", Gradients, "Gradients",
        "trainable parameters x gradient dtype bytes (gradients take the dtype of their parameters); in backward a trainable LM head's gradient arrives in shares that autograd sums, up to three vocab x hidden tensors at once";
    OptimizerStates => "optimizer_states", Optimizer, "Optimizer states",
        "AdamW: 2 moments per trainable parameter (param dtype; 1 B each for 8-bit); SGD: none; Adafactor: factored row+column second moments";
    MasterWeights => "master_weights", Optimizer, "fp32 master weights",
        "4 B per trainable parameter, kept by mixed precision beside the 16-bit working copy";
    SavedActivations => "saved_activations", Activations, "Saved activations",
        "tensors each layer keeps for backward (per token: norm inputs in fp32, adapted-layer inputs, q/k/v, attention output, MLP intermediates) x layers";
    AttentionScores => "attention_scores", Activations, "Attention scores",
        "eager attention keeps heads x batch x seq^2 softmax output in fp32 plus its 16-bit copy, per layer (gpt-oss: one 16-bit softmax over the keys and its sink); SDPA and flash keep none";
    Checkpoints => "checkpoints", Activations, "Checkpointed layer inputs",
        "gradient checkpointing keeps one hidden state (batch x seq x hidden) per layer and recomputes the rest";
    WeightCopies => "weight_copies", Activations, "16-bit weight copies",
        "an fp32 frozen base under autocast casts each weight to 16-bit for its matmul, a GPTQ base dequantizes each to 16-bit, and LoRA on 3D MoE expert parameters builds each dense W + BA; the linear keeps that copy for backward, so each layer holds a 16-bit copy of those weights until its backward (an upcast QLoRA model's fp32 head, likewise)";
    KvCache => "kv_cache", Activations, "Returned key/value cache",
        "a Hugging Face model trained without checkpointing keeps use_cache on and returns every layer's keys and values; under grouped-query attention (SDPA, eager) attention keeps head-expanded copies, so the cache is extra: through forward under the Trainer, through backward and the step in loops that keep the output (hold)";
    PreviousInputs => "previous_inputs", Activations, "Previous micro-batch's 4-bit inputs",
        "bitsandbytes up to 0.44 kept each 4-bit matmul's input on its autograd node, which backward does not free; litgpt's loop holds the graph until the next forward returns, so those inputs are still there at its end";
    Logits => "logits", Activations, "Logits and loss",
        "standard loss: batch x seq x vocab logits in 16-bit, their fp32 upcast and log-softmax (about 10-12 B per logit; Gemma 2's softcapped logits keep their tanh too), plus what a loop holds through backward; chunked and fused losses bound it, and a cross-entropy kernel keeps only the 16-bit logits";
    BackwardWork => "backward_work", Other, "Backward working memory",
        "gradients of one layer's activations in flight (hidden and MLP-width), plus one recomputed layer under checkpointing";
    DequantBuffer => "dequant_buffer", Other, "Dequantization buffer",
        "QLoRA dequantizes the largest 4-bit linear to the compute dtype for each matmul, forward and backward (GPTQ: its unpacked integers beside it, forward only); LLM.int8 quantizes each matmul's input and accumulates in int32 instead, and dequantizes only in backward";
    InputBuffers => "input_buffers", Other, "Batch and tables",
        "token ids and labels (4 B per token each), the RoPE table and the 4-bit code tables, resident on the device (WebGPU runtime)";
    PeftBuffers => "peft_buffers", Other, "PEFT working buffers",
        "DoRA builds the dense W + BA of the largest adapted matrix to take its norm; LoHa its two dense rank-r products; trainable tokens rebuild the whole embedding with the trained rows each forward";
    LoadTransient => "load_transient", Other, "Quantization at load",
        "torchao's NF4 quantizer before May 2024 compared every weight of the matrix being quantized with the 16 NF4 values: two (weights x 16) 16-bit tensors beside its 16-bit copy (qload=1)";
    OptimizerTemps => "optimizer_temps", Other, "Optimizer step temporaries",
        "foreach AdamW allocates one state-sized temporary (the sqrt of the second moment); fused and 8-bit kernels update in place";
    ShardBuffers => "shard_buffers", Other, "Sharding and communication buffers",
        "ZeRO-3 gathers the full parameters of two layers at a time (prefetch); DDP keeps gradient buckets the size of the gradients";
    AllocatorSlack => "allocator_slack", Other, "Allocator cache (reserved - allocated)",
        "PyTorch's caching allocator rounds blocks to 2 MiB; warm from earlier steps (alloc=cached) it also keeps about one largest transient block it cannot reuse, which an emptied cache or expandable segments avoid";
    CudaContext => "cuda_context", Other, "CUDA context",
        "CUDA context, cuBLAS workspace and loaded kernels: about 0.5 GiB, seen by nvidia-smi but not by torch";
    PagedStates => "paged_states", Other, "Paged optimizer states",
        "paged optimizers allocate states in unified memory: not counted by torch's allocator, resident on the GPU while it has room";
}

/// Bytes of one element of the hidden state stream, and related dtype facts of a plan.
#[derive(Clone, Copy, Debug)]
struct Dtypes {
    /// Compute dtype bytes (matmul inputs and outputs).
    c: Count,
    /// Residual stream bytes: 4 when parameters feeding it are fp32, else the compute dtype.
    r: Count,
    /// Adapter dtype bytes.
    a: Count,
    /// Base weight bytes for non-quantized tensors.
    w: Count,
    /// The MLP's gate/up outputs and its products: the compute dtype, except that bitsandbytes' 4-bit linear
    /// returns its input's dtype, so a QLoRA stream kept in fp32 (an upcast model) runs its MLP in fp32.
    m: Count,
    /// Mixed precision (autocast casts matmul inputs to 16-bit).
    amp: bool,
    /// An fp32 LoRA base sharded by FSDP under mixed precision: the shards stay fp32, and each layer is gathered
    /// already cast to the compute dtype, so the gathered layer is the 16-bit copy and the activations are 16-bit.
    sharded_cast: bool,
}

fn dtypes(plan: &Plan) -> Dtypes {
    let c = plan.precision.compute_bytes() as Count;
    let amp = plan.precision.is_amp();
    let w: Count = match plan.method {
        Method::Full if plan.precision == Precision::Fp32 => 4.0,
        Method::Full => 2.0,
        Method::Lora | Method::Qlora if plan.precision == Precision::Fp32 => 4.0,
        // A LoRA base kept in fp32 under autocast (litgpt's bf16-mixed, an fp32 `from_pretrained` with AMP).
        Method::Lora if plan.upcast => 4.0,
        Method::Lora => 2.0,
        Method::Qlora if plan.upcast => 4.0,
        Method::Qlora => 2.0,
    };
    let sharded_cast = amp && w == 4.0 && plan.method == Method::Lora && plan.zero >= 3;
    // With fp32 master weights the model itself is fp32 under HF AMP: the residual stream follows the embeddings.
    let r = if plan.method == Method::Full && amp {
        4.0
    } else if sharded_cast {
        c
    } else {
        w.max(c)
    };
    let bnb_4bit = plan.method == Method::Qlora && matches!(plan.quant, Quant::Nf4 | Quant::Fp4);
    let m = if bnb_4bit { r.max(c) } else { c };
    Dtypes {
        c,
        r,
        m,
        a: plan.adapter_dtype.bytes() as Count,
        w,
        amp,
        sharded_cast,
    }
}

/// Memory of one phase, by category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PhaseMemory {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    pub activations: u64,
    pub other: u64,
}

impl PhaseMemory {
    pub fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer)
            .saturating_add(self.activations)
            .saturating_add(self.other)
    }
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Weights => self.weights,
            Category::Gradients => self.gradients,
            Category::Optimizer => self.optimizer,
            Category::Activations => self.activations,
            Category::Other => self.other,
        }
    }
}

/// The estimate of one plan on one GPU: parameter counts, components, phases and the three peak figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub total_params: u64,
    pub trainable_params: u64,
    /// Bytes of each component at its largest during the step, indexed like [`Kind::ALL`].
    pub components: [u64; Kind::COUNT],
    /// Live bytes by category at each phase, indexed like [`Phase::ALL`].
    pub phases: [PhaseMemory; 4],
    pub peak_phase: Phase,
    /// What `torch.cuda.max_memory_allocated()` would report.
    pub peak_allocated_bytes: u64,
    /// What `torch.cuda.max_memory_reserved()` would report.
    pub peak_reserved_bytes: u64,
    /// What `nvidia-smi` would show for the process.
    pub device_bytes: u64,
    /// True when some figure exceeded `u64` and was clamped.
    pub saturated: bool,
}

impl Estimate {
    pub fn component(&self, k: Kind) -> u64 {
        self.components[k as usize]
    }
    /// Sum of the components of a category (each at its largest).
    pub fn category(&self, c: Category) -> u64 {
        Kind::ALL
            .iter()
            .filter(|k| k.category() == c)
            .fold(0u64, |acc, k| {
                acc.saturating_add(self.components[*k as usize])
            })
    }
    pub fn phase(&self, p: Phase) -> &PhaseMemory {
        &self.phases[p as usize]
    }
    /// What the device holds at the peak, by category: the peak phase's live bytes, with the allocator cache,
    /// the CUDA context and paged states under Other. Its total is [`Estimate::device_bytes`].
    pub fn at_peak(&self) -> PhaseMemory {
        let mut m = *self.phase(self.peak_phase);
        m.other = m
            .other
            .saturating_add(self.component(Kind::AllocatorSlack))
            .saturating_add(self.component(Kind::CudaContext))
            .saturating_add(self.component(Kind::PagedStates));
        m
    }
}

/// A count of bytes or elements. Every whole number below 2^53 (8 PiB) is exact in `f64`, so real plans are counted
/// to the byte; past that, figures round but stay monotone, and [`clamp`] flags anything past `u64`. Not `u128`,
/// which wasm has to emulate in software (three times slower there); not `u64`, whose overflow checks cost the same.
type Count = f64;

const MIB: Count = (1u64 << 20) as Count;
/// The CUDA context plus cuBLAS workspace that `nvidia-smi` shows beside PyTorch's own memory (CUDA 12, lazy loading).
pub const CUDA_CONTEXT_BYTES: u64 = 512 << 20;
/// bitsandbytes 4-bit block size (weights per absmax).
const QUANT_BLOCK: Count = 64.0;
/// Blocks per second-level block under double quantization.
const DQ_BLOCK: Count = 256.0;
/// Input features per GPTQ group: one scale and one zero point per group and output.
const GPTQ_GROUP: Count = 128.0;
/// bitsandbytes 8-bit optimizers quantize states in blocks of 2048 with one fp32 absmax each.
const OPT8_BLOCK: Count = 2048.0;
/// bitsandbytes keeps tensors under this size in 32-bit state (`min_8bit_size`).
const OPT8_MIN_NUMEL: Count = 4096.0;

/// Layers split across the GPUs (`device_map="auto"` balances them): each GPU runs its slice in turn, and the
/// last one also holds the final norm and the head and computes the logits, which makes it the fullest. It is
/// planned as a one-GPU run of its slice of layers, which also counts the input embedding (on the first GPU in
/// fact: a small overcount for an untied model).
fn estimate_split(arch: &Architecture, plan: &Plan) -> Estimate {
    let whole = Plan {
        split_layers: false,
        gpus: 1,
        zero: 0,
        ..plan.clone()
    };
    let slice = Architecture {
        layers: arch.layers.div_ceil(plan.gpus.max(1)),
        ..arch.clone()
    };
    let mut e = estimate(&slice, &whole);
    // The counts shown stay the whole model's.
    e.total_params = arch.total_params();
    e.trainable_params = trainable_tensors(arch, &whole, &arch.layer_linears()).params() as u64;
    e
}

/// `ceil(a / b)` for whole `a` and `b`, exact below 2^53 whatever way `a / b` rounded.
fn ceil_div(a: Count, b: Count) -> Count {
    let b = b.max(1.0);
    let q = (a / b).floor();
    if q * b < a {
        q + 1.0
    } else {
        q
    }
}

/// Whether a quantized base (bitsandbytes, GPTQ: both replace `nn.Linear` modules) quantizes this linear. MoE
/// experts stored as 3D parameters, as transformers 5 stores them, stay in the weight dtype.
fn quantizes(l: &Linear, plan: &Plan) -> bool {
    l.copies == 1 || !plan.experts_are_parameters()
}

/// Quantized bytes of one weight matrix of `rows` outputs by `cols` inputs: its packed weights and its constants.
fn quantized_tensor_bytes(rows: Count, cols: Count, plan: &Plan) -> (Count, Count) {
    let n = rows * cols;
    if plan.quant == Quant::Int8 {
        // LLM.int8: one int8 per weight and an fp32 absmax per output row (`SCB`).
        return (n, 4.0 * rows);
    }
    if let Some(bits) = plan.quant.gptq_bits() {
        // auto-gptq's QuantLinear: weights packed `bits` to the int32 (`qweight`); per group of 128 inputs and
        // per output an fp16 scale (`scales`) and a packed zero point (`qzeros`); an int32 group index per
        // input (`g_idx`).
        let bits = bits as Count;
        let groups = ceil_div(cols, GPTQ_GROUP);
        let packed = 4.0 * ceil_div(cols * bits, 32.0) * rows;
        let zeros = 4.0 * ceil_div(rows * bits, 32.0) * groups;
        return (packed, 2.0 * groups * rows + zeros + 4.0 * cols);
    }
    let double_quant = plan.double_quant;
    let packed = ceil_div(n, 2.0);
    let blocks = ceil_div(n, QUANT_BLOCK);
    let constants = if double_quant {
        // 8-bit absmax per block, fp32 scale per 256 blocks, one fp32 mean offset.
        blocks + 4.0 * ceil_div(blocks, DQ_BLOCK) + 4.0
    } else {
        4.0 * blocks
    };
    (packed, constants)
}

/// A trainable tensor's shape, for optimizers whose state depends on it.
#[derive(Clone, Copy)]
struct TensorShape {
    rows: Count,
    cols: Count,
    /// How many such tensors.
    count: Count,
}

fn adapted(plan: &Plan, l: &Linear) -> bool {
    matches!(plan.method, Method::Lora | Method::Qlora)
        && !matches!(plan.peft, Peft::Ln | Peft::Prompt | Peft::Prefix)
        && l.selected_by & plan.targets.0 != 0
}

/// LoRA on MoE experts stored as 3D parameters (transformers 5): PEFT's `target_parameters` parametrizes each
/// parameter as W + BA, so every forward builds the dense 16-bit sum for all experts, the grouped matmul keeps it
/// and the routed inputs for backward as a full fine-tune's would, and backward makes its dense gradient (traced
/// on CPU: Qwen3-MoE). Other PEFT kinds cannot target parameters.
fn parametrized(plan: &Plan, l: &Linear) -> bool {
    l.copies > 1
        && plan.experts_are_parameters()
        && matches!(plan.peft, Peft::Lora | Peft::Rslora | Peft::Lorafa)
        && adapted(plan, l)
}

/// Whether the routed experts' gate and up are one 3D `gate_up_proj` parameter that LoRA adapts through
/// `target_parameters`: the two halves then share one A per expert (traced on CPU: Qwen2-MoE).
fn parametrized_gate_up(plan: &Plan, linears: &[Linear]) -> bool {
    let hit = |t: Target| {
        linears
            .iter()
            .any(|l| l.copies > 1 && l.selected_by == t.bit() && parametrized(plan, l))
    };
    hit(Target::Gate) && hit(Target::Up)
}

/// Whether `l` is the up half of a parametrized `gate_up_proj` whose A the gate half carries (`shared_a` from
/// [`parametrized_gate_up`]).
fn a_shared_with_gate(l: &Linear, shared_a: bool) -> bool {
    shared_a && l.copies > 1 && l.selected_by == Target::Up.bit()
}

/// bitsandbytes' 4-bit and 8-bit matmuls up to 0.44 keep their input for backward (`qsave=1`); GPTQ's keep the
/// dequantized weight instead (see `copies_per_layer`).
fn bnb_saves_input(plan: &Plan) -> bool {
    plan.method == Method::Qlora && plan.qlora_saves_input && plan.gptq_bits().is_none()
}

/// Bytes per value of the normalized input a trainable weight of a `norm` keeps: an RMSNorm multiplies by its
/// weight in a separate op that keeps the normalized input, in the residual dtype or in fp32 where the weight
/// multiplies in fp32 (Gemma's `1 + weight`, traced on CPU); `native_layer_norm` applies its weight inside the
/// fused op and keeps no such copy.
fn norm_product_bytes(norm: Norm, arch: &Architecture, d: Dtypes) -> Count {
    match norm {
        Norm::LayerNorm => 0.0,
        Norm::RmsNorm if arch.norm_scale_fp32 => 4.0,
        Norm::RmsNorm => d.r,
    }
}

/// Norm weights train under full fine-tuning and LayerNorm tuning. A trainable norm weight multiplies the
/// normalized input, and that product keeps the 16-bit normalized copy for the weight's gradient; a frozen one
/// keeps nothing more than its fp32 input and statistics.
fn norms_trainable(plan: &Plan) -> bool {
    match plan.method {
        Method::Full => true,
        Method::Lora | Method::Qlora => plan.peft == Peft::Ln,
    }
}

/// The virtual tokens of an adapter plan whose PEFT kind is `kind` (prompt or prefix tuning), else 0.
fn virtual_tokens_of(plan: &Plan, kind: Peft) -> Count {
    if matches!(plan.method, Method::Lora | Method::Qlora) && plan.peft == kind {
        plan.virtual_tokens as Count
    } else {
        0.0
    }
}

/// Positions each sequence runs through the model: prompt tuning prepends its virtual tokens.
fn positions(plan: &Plan) -> Count {
    plan.seq_len as Count + virtual_tokens_of(plan, Peft::Prompt)
}

/// Key positions each query attends over: prefix tuning prepends its virtual keys and values in every layer.
fn key_positions(plan: &Plan) -> Count {
    positions(plan) + prefix_tokens(plan)
}

fn prefix_tokens(plan: &Plan) -> Count {
    virtual_tokens_of(plan, Peft::Prefix)
}

/// litgpt never ties the head to the embedding: its checkpoint converter copies the embedding into a head of
/// its own, so a tied model holds two vocab x hidden matrices there.
fn litgpt_unties(arch: &Architecture, plan: &Plan) -> bool {
    arch.tied_embeddings && plan.framework == Framework::Litgpt
}

/// Elements of VeRA's frozen random projections: one A (rank x widest input) and one B (widest output x rank),
/// shared by every adapted matrix and sliced per module.
fn vera_projections(arch: &Architecture, plan: &Plan, linears: &[Linear]) -> Count {
    if plan.peft != Peft::Vera || plan.method == Method::Full {
        return 0.0;
    }
    let (mut inp, mut out) = (0.0, 0.0);
    for l in linears.iter().filter(|l| adapted(plan, l)) {
        inp = Count::max(inp, l.in_features as Count);
        out = Count::max(out, l.out_features as Count);
    }
    if plan.targets.contains(Target::LmHead) {
        inp = Count::max(inp, arch.hidden as Count);
        out = Count::max(out, arch.vocab as Count);
    }
    plan.rank as Count * (inp + out)
}

/// Blocks and block width of OFT's rotation of an `inp`-wide input: `r` blocks, fewer when the input is narrower.
fn oft_blocks(r: Count, inp: Count) -> (Count, Count) {
    let blocks = r.clamp(1.0, inp.max(1.0));
    (blocks, ceil_div(inp, blocks))
}

/// A fixed-capacity list of trainable tensor shapes (no allocation on the hot path).
struct Shapes {
    items: [TensorShape; 24],
    len: usize,
}

impl Shapes {
    fn push(&mut self, t: TensorShape) {
        // At most 8 linears x (weight + bias) + 6 other tensors: 22 < 24.
        if self.len < self.items.len() {
            self.items[self.len] = t;
            self.len += 1;
        }
    }
    /// Parameters in all the shapes.
    fn params(&self) -> Count {
        self.iter().map(|t| t.rows * t.cols * t.count).sum()
    }
    fn iter(&self) -> impl Iterator<Item = &TensorShape> {
        self.items[..self.len].iter()
    }
}

/// Trainable tensors of the plan.
fn trainable_tensors(arch: &Architecture, plan: &Plan, linears: &[Linear]) -> Shapes {
    let layers = arch.layers as Count;
    let mut t = Shapes {
        items: [TensorShape {
            rows: 0.0,
            cols: 0.0,
            count: 0.0,
        }; 24],
        len: 0,
    };
    let r = plan.rank as Count;
    match plan.method {
        Method::Full => {
            for l in linears {
                let copies = l.copies as Count * layers;
                t.push(TensorShape {
                    rows: l.out_features as Count,
                    cols: l.in_features as Count,
                    count: copies,
                });
                if l.bias {
                    t.push(TensorShape {
                        rows: 1.0,
                        cols: l.out_features as Count,
                        count: copies,
                    });
                }
            }
            let other = arch.layer_other_params() as Count;
            t.push(TensorShape {
                rows: 1.0,
                cols: other,
                count: layers,
            });
            t.push(TensorShape {
                rows: arch.vocab as Count,
                cols: arch.hidden as Count,
                count: 1.0,
            });
            if arch.learned_positions > 0 {
                t.push(TensorShape {
                    rows: arch.learned_positions as Count,
                    cols: arch.hidden as Count,
                    count: 1.0,
                });
            }
            if !arch.tied_embeddings || litgpt_unties(arch, plan) {
                t.push(TensorShape {
                    rows: arch.vocab as Count,
                    cols: arch.hidden as Count,
                    count: 1.0,
                });
            }
            if arch.lm_head_bias {
                t.push(TensorShape {
                    rows: 1.0,
                    cols: arch.vocab as Count,
                    count: 1.0,
                });
            }
            t.push(TensorShape {
                rows: 1.0,
                cols: arch.final_norm_params() as Count,
                count: 1.0,
            });
        }
        Method::Lora | Method::Qlora => {
            let adapter = |t: &mut Shapes,
                           inp: Count,
                           out: Count,
                           count: Count,
                           feedforward: bool| match plan.peft {
                Peft::Ia3 => t.push(TensorShape {
                    rows: 1.0,
                    cols: if feedforward { inp } else { out },
                    count,
                }),
                // VeRA trains a rank-wide and an output-wide vector around the shared frozen projections.
                Peft::Vera => {
                    t.push(TensorShape {
                        rows: 1.0,
                        cols: r,
                        count,
                    });
                    t.push(TensorShape {
                        rows: 1.0,
                        cols: out,
                        count,
                    });
                }
                // LoHa: two (A, B) pairs.
                Peft::Loha => {
                    t.push(TensorShape {
                        rows: r,
                        cols: inp,
                        count: 2.0 * count,
                    });
                    t.push(TensorShape {
                        rows: out,
                        cols: r,
                        count: 2.0 * count,
                    });
                }
                // OFT stores each block's skew-symmetric generator as its strict upper triangle.
                Peft::Oft => {
                    let (blocks, b) = oft_blocks(r, inp);
                    t.push(TensorShape {
                        rows: 1.0,
                        cols: blocks * (b * (b - 1.0) / 2.0),
                        count,
                    });
                }
                Peft::Ln | Peft::Prompt | Peft::Prefix => {}
                Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa => {
                    if plan.peft != Peft::Lorafa {
                        t.push(TensorShape {
                            rows: r,
                            cols: inp,
                            count,
                        });
                    }
                    t.push(TensorShape {
                        rows: out,
                        cols: r,
                        count,
                    });
                    if plan.peft == Peft::Dora {
                        t.push(TensorShape {
                            rows: 1.0,
                            cols: out,
                            count,
                        });
                    }
                }
            };
            let shared_a = parametrized_gate_up(plan, linears);
            for l in linears.iter().filter(|l| adapted(plan, l)) {
                let copies = l.copies as Count * layers;
                if a_shared_with_gate(l, shared_a) {
                    // up_proj is the second half of gate_up_proj, whose A the gate half already counted.
                    t.push(TensorShape {
                        rows: l.out_features as Count,
                        cols: plan.rank as Count,
                        count: copies,
                    });
                    continue;
                }
                let feedforward = l.input == LinearInput::MlpInner;
                adapter(
                    &mut t,
                    l.in_features as Count,
                    l.out_features as Count,
                    copies,
                    feedforward,
                );
            }
            if plan.targets.contains(Target::LmHead) {
                adapter(
                    &mut t,
                    arch.hidden as Count,
                    arch.vocab as Count,
                    1.0,
                    false,
                );
            }
            if plan.peft == Peft::Ln {
                // Every norm of every layer, and the final norm (PEFT's LN tuning targets them all by default).
                let per_norm = match arch.norm {
                    Norm::RmsNorm => arch.hidden,
                    Norm::LayerNorm => 2 * arch.hidden,
                } as Count;
                t.push(TensorShape {
                    rows: 1.0,
                    cols: per_norm,
                    count: arch.norms_per_layer as Count * layers,
                });
                t.push(TensorShape {
                    rows: 1.0,
                    cols: arch.final_norm_params() as Count,
                    count: 1.0,
                });
            }
            match plan.peft {
                // The prompt encoder: one trainable embedding per virtual token.
                Peft::Prompt => t.push(TensorShape {
                    rows: plan.virtual_tokens as Count,
                    cols: arch.hidden as Count,
                    count: 1.0,
                }),
                // A key and a value vector per virtual token and layer (PEFT without the reparametrizing MLP).
                Peft::Prefix => t.push(TensorShape {
                    rows: plan.virtual_tokens as Count,
                    cols: 2.0 * arch.kv_dim() as Count,
                    count: layers,
                }),
                _ => {}
            }
            let head_rows = if arch.tied_embeddings {
                0.0
            } else {
                arch.vocab as Count
            };
            match plan.tokens {
                TokenTraining::Frozen => {}
                // PEFT keeps a trainable delta for just these rows.
                TokenTraining::Rows(rows) => t.push(TensorShape {
                    rows: (rows as Count).min(arch.vocab as Count),
                    cols: arch.hidden as Count,
                    count: 1.0,
                }),
                // modules_to_save: a trainable copy of the embedding (and of an untied head).
                TokenTraining::All => {
                    t.push(TensorShape {
                        rows: arch.vocab as Count,
                        cols: arch.hidden as Count,
                        count: 1.0,
                    });
                    if head_rows > 0.0 {
                        t.push(TensorShape {
                            rows: head_rows,
                            cols: arch.hidden as Count,
                            count: 1.0,
                        });
                    }
                }
            }
        }
    }
    t
}

/// Per-layer activation bytes that a layer saves for backward, split into the s^2 attention part and the rest.
fn layer_saved(
    arch: &Architecture,
    plan: &Plan,
    d: Dtypes,
    linears: &[Linear],
    tokens: Count,
) -> (Count, Count) {
    let n = tokens;
    let h = arch.hidden as Count;
    let q = arch.q_dim() as Count;
    let kv = arch.kv_dim() as Count;
    let k_route = if arch.experts > 1 {
        arch.experts_per_token as Count
    } else {
        1.0
    };
    let inter = arch.intermediate as Count * k_route;
    let heads = arch.heads as Count;
    let full = plan.method == Method::Full;
    let mut bytes: Count = 0.0;

    // Norms. HF RMSNorm upcasts its input to fp32 and keeps it with the fp32 reciprocal RMS;
    // LayerNorm keeps its input (fp32 under autocast) with mean and rstd. A trainable norm weight also keeps the
    // 16-bit normalized input it multiplies, unless the norm is fused (compiled, Liger), which rebuilds it from the
    // input and rstd in backward (torchtune's compiled full fine-tune traced on CPU keeps no such copy).
    let fused = plan.compile || plan.liger;
    let norm_input = match arch.norm {
        // A fused RMSNorm (torch.compile, Liger) keeps its input in its own dtype and the fp32 rstd only.
        Norm::RmsNorm if fused => d.r * n * h,
        Norm::RmsNorm => 4.0 * n * h,
        Norm::LayerNorm => (if d.amp { 4.0 } else { d.r }) * n * h,
    };
    let per_norm = match arch.norm {
        Norm::RmsNorm => 4.0 * n,
        Norm::LayerNorm => 8.0 * n,
    } + if norms_trainable(plan) && !fused {
        norm_product_bytes(arch.norm, arch, d) * n * h
    } else {
        0.0
    };
    // LayerNorms of a parallel block that read one 16-bit input keep it once (an RMSNorm's fp32 copy, or an
    // autocast cast, is made per norm).
    let norms = arch.norms_per_layer as Count;
    let inputs_kept = if arch.norms_share_input && arch.norm == Norm::LayerNorm && !d.amp {
        norms.min(1.0)
    } else {
        norms
    };
    bytes += per_norm * norms + norm_input * inputs_kept;
    // Query/key norms read the projections' compute-dtype outputs: unfused, the fp32 copy and one reciprocal RMS
    // per head (or per token, over the whole projection); fused, the input itself. A trainable weight (full
    // fine-tuning; LayerNorm tuning leaves them frozen) also keeps the normalized copy it multiplies.
    let qk_norm = |width: Count, groups: Count| {
        (if fused {
            d.c * n * width
        } else {
            4.0 * n * width
        }) + 4.0 * n * groups
            + if full && !fused {
                norm_product_bytes(Norm::RmsNorm, arch, d) * n * width
            } else {
                0.0
            }
    };
    bytes += match arch.qk_norm {
        QkNorm::None => 0.0,
        QkNorm::PerHead => qk_norm(q, heads) + qk_norm(kv, arch.kv_heads as Count),
        QkNorm::Full => qk_norm(q, 1.0) + qk_norm(kv, 1.0),
    };

    // Inputs of linear modules: a trainable weight (full) or an adapter (LoRA) needs the module's input for backward.
    let width = |i: LinearInput| match i {
        LinearInput::AttnNorm | LinearInput::MlpNorm => h,
        LinearInput::AttnOut => q,
        LinearInput::MlpInner => arch.intermediate as Count,
        LinearInput::SharedInner => arch.shared_expert_intermediate as Count,
    };
    // Parallel blocks (one norm) feed attention and MLP from the same tensor.
    let same_norm = arch.norms_per_layer == 1;
    let groups: [&[LinearInput]; 3] = if same_norm {
        [
            &[LinearInput::AttnNorm, LinearInput::MlpNorm],
            &[LinearInput::AttnOut],
            &[LinearInput::MlpInner],
        ]
    } else {
        [
            &[LinearInput::AttnNorm],
            &[LinearInput::AttnOut],
            &[LinearInput::MlpNorm],
        ]
    };
    let last: &[LinearInput] = if same_norm {
        &[]
    } else {
        &[LinearInput::MlpInner]
    };
    // Whether a module of the MLP's own rows (a shared expert) keeps the 16-bit norm output itself, which a
    // trainable router reads too.
    let mut mlp_norm_kept = false;
    for g in groups
        .into_iter()
        .chain([last, &[LinearInput::SharedInner][..]])
    {
        // Flash and memory-efficient kernels (SDPA's choice for 16-bit inputs, and peakplan's WebGPU runtime) write
        // their output in (batch, seq, heads, dim) order and keep it for backward, so the `transpose(1, 2)
        // .contiguous()` before o_proj copies nothing: o_proj's input is that kept compute-dtype tensor, and only
        // copies made from it (casts, dropout, int8 transposes) are more (torchtune's full fine-tune traced on
        // CPU keeps one attention-output tensor per layer).
        let attn_out_kept = g == [LinearInput::AttnOut] && plan.attn != Attn::Eager;
        let members = linears.iter().filter(|l| g.contains(&l.input));
        let Some(first) = linears.iter().find(|l| g.contains(&l.input)) else {
            continue;
        };
        let w = width(first.input);
        // MoE expert inputs are routed copies: each token reaches k experts. A shared expert beside them reads
        // the tokens themselves, so one group may hold two tensors: the plain input [0] and the routed copies [1].
        let rows_by_kind = [n, n * k_route];
        let mut shared_saved = [false; 2];
        // litgpt's attention is one fused qkv linear: its LoRA runs one dropout over the shared input, and keeps
        // the adapted outputs zero-padded to the full q|k|v width for the concatenation.
        let litgpt_qkv = plan.framework == Framework::Litgpt
            && g.contains(&LinearInput::AttnNorm)
            && plan.method != Method::Full;
        let mut qkv_dropout_kept = false;
        for l in members {
            let routed = usize::from(l.copies > 1);
            let rows = rows_by_kind[routed];
            if full || parametrized(plan, l) {
                if d.r == d.c || attn_out_kept {
                    shared_saved[routed] = true;
                } else {
                    // Autocast casts the fp32 input separately for each module and keeps each 16-bit copy.
                    bytes += d.c * rows * w;
                }
            } else if adapted(plan, l) && plan.peft == Peft::Ia3 {
                // (IA)^3 multiplies the output by its vector (the input, for the feed-forward `down`), and the
                // product keeps the other factor for the vector's gradient. PEFT first casts a feed-forward input
                // to the vector's dtype, so that factor is kept in the adapter dtype (fp32 by default).
                bytes += if l.input == LinearInput::MlpInner {
                    d.a * rows * w
                } else {
                    d.c * rows * l.out_features as Count
                };
            } else if adapted(plan, l) && plan.peft == Peft::Vera {
                // VeRA's projections are frozen, so neither keeps its input: lambda_d keeps A·x (rank-wide) and
                // lambda_b keeps B's output (output-wide) for their gradients; dropout keeps only its mask.
                let ad = if d.amp { d.c } else { d.a };
                if plan.dropout > 0.0 {
                    bytes += rows * w;
                }
                bytes += ad * rows * (plan.rank as Count + l.out_features as Count);
            } else if adapted(plan, l) {
                let ad = if d.amp { d.c } else { d.a };
                // LoRA-FA (PEFT's optimizer-based implementation) drops A's gradient and optimizer state, but the
                // input is still kept: PEFT's MetaMathQA run measures the same peak as LoRA less A's states.
                if litgpt_qkv && l.input == LinearInput::AttnNorm {
                    if !qkv_dropout_kept {
                        qkv_dropout_kept = true;
                        bytes += if plan.dropout > 0.0 {
                            rows * w + ad * rows * w
                        } else {
                            ad * rows * w
                        };
                    }
                    bytes += d.c * rows * l.out_features as Count;
                } else if plan.dropout > 0.0 {
                    // Dropout keeps a 1-byte mask and its output, per adapted module.
                    bytes += rows * w + ad * rows * w;
                } else if d.a != d.r && !plan.compile {
                    // PEFT casts the input to the adapter dtype per module; under autocast lora_A re-casts to 16-bit.
                    bytes += ad * rows * w;
                } else {
                    shared_saved[routed] = true;
                }
                match plan.peft {
                    // LoHa builds the dense update (B1 A1) ⊙ (B2 A2) in the adapter dtype each forward, and the
                    // linear that applies it keeps it for the input's gradient until this layer's backward.
                    Peft::Loha => {
                        bytes += d.a
                            * l.in_features as Count
                            * l.out_features as Count
                            * l.copies as Count;
                    }
                    // OFT rotates the input it keeps (counted above) by a block-diagonal matrix built per forward.
                    Peft::Oft => {
                        let (blocks, b) = oft_blocks(plan.rank as Count, w);
                        bytes += d.a * blocks * b * b * l.copies as Count;
                    }
                    // lora_B keeps lora_A's rank-wide output.
                    _ => bytes += ad * rows * plan.rank as Count,
                }
                if plan.peft == Peft::Dora {
                    // DoRA rescales the base output and the LoRA output by magnitude / ||W + BA||: both products
                    // keep their other factor (the base output in the compute dtype, the LoRA output in the
                    // adapter dtype).
                    bytes += (d.c + ad) * rows * l.out_features as Count;
                }
            }
            if bnb_saves_input(plan) && quantizes(l, plan) {
                // Older bitsandbytes MatMul4Bit kept its (compute-dtype) input A for backward even though the
                // frozen weight needs no gradient: shared when the stream is already in the compute dtype.
                if d.r == d.c || attn_out_kept {
                    shared_saved[routed] = true;
                } else {
                    bytes += d.c * rows * w;
                }
                // Its MatMul8bitLt kept the input's transposed int8 copy (`CAt`) beside it.
                if plan.quant == Quant::Int8 {
                    bytes += rows * w;
                }
            }
        }
        if !attn_out_kept {
            for (rows, kept) in rows_by_kind.into_iter().zip(shared_saved) {
                if kept {
                    bytes += d.r * rows * w;
                }
            }
        }
        if g.contains(&LinearInput::MlpNorm) && shared_saved[0] {
            mlp_norm_kept = true;
        }
    }

    // Attention: q and (expanded) k, v are kept by the attention kernel with its output and log-sum-exp.
    let c = d.c;
    // HF's SDPA and eager paths expand k and v to every head (repeat_kv); flash kernels and peakplan's WebGPU
    // runtime read the grouped heads directly.
    let webgpu = plan.framework == Framework::Webgpu;
    let kv_kept = if plan.attn == Attn::Flash || webgpu {
        2.0 * kv
    } else {
        2.0 * q
    };
    // Prefix tuning's virtual keys and values are concatenated in front of each layer's own, and kept with them.
    let b = plan.micro_batch as Count;
    bytes += c * (n * q + kv_kept * (n + b * prefix_tokens(plan)));
    // Under transformers, v sliced out of a fused projection reaches attention as a view unless repeat_kv copies
    // it (grouped heads under SDPA or eager): the whole q|k|v output stays alive, q + kv more than v alone
    // (traced on CPU: Phi-3, GPT-NeoX).
    if arch.qkv_views
        && plan.framework == Framework::Hf
        && (plan.attn == Attn::Flash || arch.kv_heads == arch.heads)
    {
        bytes += c * n * (q + kv);
    }
    let mut scores = 0.0;
    match plan.attn {
        Attn::Eager if arch.attn_sinks => {
            // gpt-oss appends each head's sink logit as one more key, subtracts the row maximum (whose backward
            // keeps its int64 index) and softmaxes in the compute dtype; P·V reads a view of that softmax, the one
            // scores-sized tensor kept (traced on CPU).
            scores = c * heads * n * (key_positions(plan) + 1.0) + 8.0 * heads * n;
        }
        Attn::Eager => {
            // Softmax output in fp32 plus the 16-bit copy fed to P·V; softcapped scores keep their tanh as well.
            let per = if c == 4.0 { 4.0 } else { 4.0 + c }
                + if arch.attn_logit_softcap { c } else { 0.0 };
            scores = per * heads * n * key_positions(plan);
        }
        Attn::Sdpa | Attn::Flash => {
            bytes += c * n * q + 4.0 * n * heads;
        }
    }

    // MLP: the activation keeps its input; the gated product keeps both factors.
    bytes += match arch.mlp {
        // Fused SwiGLU keeps the two projections and recomputes the activation in backward.
        crate::arch::Mlp::Gated | crate::arch::Mlp::GatedFused
            if plan.compile || plan.liger || webgpu =>
        {
            2.0 * d.m * n * inter
        }
        // gpt-oss's clamped SwiGLU keeps the gate|up output (both clamps read views of it) and four products.
        crate::arch::Mlp::Gated | crate::arch::Mlp::GatedFused if arch.swiglu_clamp => {
            6.0 * d.m * n * inter
        }
        crate::arch::Mlp::Gated | crate::arch::Mlp::GatedFused => 3.0 * d.m * n * inter,
        // transformers writes `gelu_new` out in elementwise ops, which keep its input, the tanh, 1 + tanh and
        // x / 2 (traced on CPU: Phi-2); litgpt and torchtune call the fused tanh GELU.
        crate::arch::Mlp::Plain if arch.composite_gelu && plan.framework == Framework::Hf => {
            4.0 * d.m * n * inter
        }
        crate::arch::Mlp::Plain => d.m * n * inter,
    };
    // A shared expert is a gated MLP over every token (traced on CPU: Qwen2-MoE); its sigmoid gate's product keeps
    // the expert's output and the sigmoid.
    let shared = arch.shared_expert_intermediate as Count;
    if shared > 0.0 {
        bytes += if plan.compile || plan.liger || webgpu {
            2.0
        } else {
            3.0
        } * d.m
            * n
            * shared;
        if arch.shared_expert_gate {
            bytes += d.m * n * (h + 1.0);
        }
    }
    if arch.experts > 1 {
        bytes += if arch.router_topk_softmax {
            // The top-k indices and the softmax over those k logits, in the compute dtype.
            (8.0 + c) * n * k_route
        } else {
            // Router logits and their softmax in fp32.
            8.0 * n * arch.experts as Count
        };
        // Each routed token's expert output is scaled by its routing weight, and that product keeps the output for
        // the weight's gradient (the router trains through it, frozen or not, as long as the stream needs a
        // gradient); gathering those weights keeps two int64 index tensors (traced on CPU: Mixtral LoRA). The
        // output has the MLP's dtype: fp32 in an upcast QLoRA model (traced on CPU: Qwen3-MoE).
        bytes += (d.m * h + 16.0) * n * k_route;
        // A trainable router keeps its own input, the norm output, beside the routed copies the experts keep
        // (traced on CPU: gpt-oss full fine-tuning).
        if full && !mlp_norm_kept {
            bytes += d.c * n * h;
        }
    }
    (bytes, scores)
}

/// Computes the memory of one training step of `plan` on `arch`.
pub fn estimate(arch: &Architecture, plan: &Plan) -> Estimate {
    // transformers has no SDPA path for attention sinks (gpt-oss declares `_supports_sdpa = False`): the model
    // runs eager attention unless a flash kernel that takes sinks is chosen.
    if arch.attn_sinks && plan.attn == Attn::Sdpa && plan.framework == Framework::Hf {
        let mut eager = plan.clone();
        eager.attn = Attn::Eager;
        return estimate(arch, &eager);
    }
    if plan.split_layers && plan.gpus > 1 {
        return estimate_split(arch, plan);
    }
    let d = dtypes(plan);
    let linears = arch.layer_linears();
    let layers = arch.layers as Count;
    let gpus = plan.gpus.max(1) as Count;
    // One GPU has nothing to shard, except that ZeRO-3 offload still fetches each layer from CPU memory.
    let zero = if plan.gpus > 1 || (plan.cpu_offload && plan.zero >= 3) {
        plan.zero
    } else {
        0
    };
    let total_params = arch.total_params() as Count;
    let mut comp = [0.0; Kind::COUNT];
    let set = |comp: &mut [Count; Kind::COUNT], k: Kind, v: Count| comp[k as usize] = v;

    // ---- Weights
    let head_quantized = plan.method == Method::Qlora && plan.framework == Framework::Litgpt;
    let quantized_layer_weights: Count = linears
        .iter()
        .filter(|l| quantizes(l, plan))
        .map(|l| l.weight_params() as Count)
        .sum();
    let (base, constants) = if plan.method == Method::Qlora {
        let (mut packed, mut consts) = (0.0, 0.0);
        for l in linears.iter().filter(|l| quantizes(l, plan)) {
            let (p, c) =
                quantized_tensor_bytes(l.out_features as Count, l.in_features as Count, plan);
            packed += p * l.copies as Count * layers;
            consts += c * l.copies as Count * layers;
        }
        // Embeddings, norms, biases and the LM head stay in 16-bit (fp32 when upcast) under transformers, which
        // skips `lm_head`; litgpt's bitsandbytes plugin converts every Linear, the head included (a tied head then
        // gets its own 4-bit copy while the embedding stays 16-bit).
        // A vision tower's encoder linears are nn.Linear modules too (traced on CPU: Gemma 3 under bitsandbytes).
        let v = arch.vision;
        let (vh, vi, vl) = (
            v.hidden as Count,
            v.intermediate as Count,
            v.layers as Count,
        );
        for (rows, cols, count) in [(vh, vh, 4.0 * vl), (vi, vh, vl), (vh, vi, vl)] {
            if count > 0.0 {
                let (p, c) = quantized_tensor_bytes(rows, cols, plan);
                packed += p * count;
                consts += c * count;
            }
        }
        let head_w = arch.vocab as Count * arch.hidden as Count;
        let mut rest = total_params - quantized_layer_weights * layers - v.linear_params() as Count;
        if head_quantized {
            let (p, c) = quantized_tensor_bytes(arch.vocab as Count, arch.hidden as Count, plan);
            packed += p;
            consts += c;
            if !arch.tied_embeddings {
                rest -= head_w;
            }
        }
        (packed + rest * d.w, consts)
    } else {
        let own_head = if litgpt_unties(arch, plan) {
            arch.vocab as Count * arch.hidden as Count
        } else {
            0.0
        };
        ((total_params + own_head) * d.w, 0.0)
    };
    let tensors = trainable_tensors(arch, plan, &linears);
    let trainable = tensors.params();
    let (adapter_bytes, param_bytes) = match plan.method {
        Method::Full => (0.0, d.w),
        _ => (
            trainable * d.a + vera_projections(arch, plan, &linears) * d.a,
            d.a,
        ),
    };
    let shard_w = |v: Count| if zero >= 3 { ceil_div(v, gpus) } else { v };
    let shard_g = |v: Count| if zero >= 2 { ceil_div(v, gpus) } else { v };
    let shard_o = |v: Count| if zero >= 1 { ceil_div(v, gpus) } else { v };
    // With parameter offload the layers' shards wait in CPU memory (each layer is gathered when it runs, see
    // ShardBuffers); the root unit (embeddings, final norm, LM head) stays gathered on the GPU through the step.
    // (ZeRO-3 offload works on one GPU too: the shards are the whole model, in CPU memory.)
    let params_offloaded = plan.cpu_offload && plan.zero >= 3;
    // Buffers (GPT-BigCode's causal mask) are neither sharded nor offloaded: every GPU holds them.
    let buffers = arch.buffer_bytes as Count;
    if params_offloaded {
        let root = arch.embedding_params() + arch.lm_head_params() + arch.final_norm_params();
        set(&mut comp, Kind::BaseWeights, root as Count * d.w + buffers);
    } else {
        set(&mut comp, Kind::BaseWeights, shard_w(base) + buffers);
        set(&mut comp, Kind::AdapterWeights, shard_w(adapter_bytes));
    }
    // bitsandbytes keeps a 4-bit weight's quantization state (absmax, scales) beside the parameter, not in it:
    // FSDP and DeepSpeed shard and offload the packed weights, and every GPU holds all the constants. torchao's
    // NF4 tensor (torchtune) carries its constants inside, so they are sharded and offloaded with it.
    let constants = match plan.framework {
        Framework::Torchtune if params_offloaded => 0.0,
        Framework::Torchtune => shard_w(constants),
        _ => constants,
    };
    set(&mut comp, Kind::QuantConstants, constants);

    // ---- Gradients: same dtype as their parameters.
    let largest_tensor = tensors
        .iter()
        .map(|t| t.rows * t.cols)
        .fold(0.0, Count::max);
    // Under optimizer-in-backward a gradient lives only until its parameter has stepped: one at a time.
    let grads = if plan.optimizer_in_backward {
        largest_tensor * param_bytes
    } else if plan.cpu_offload {
        // Offloaded: a layer's gradients are reduced and copied out as that layer's backward ends.
        ceil_div(trainable, layers) * param_bytes
    } else {
        shard_g(trainable * param_bytes)
    };
    set(&mut comp, Kind::Gradients, grads);

    // ---- Optimizer
    let state_bytes = if d.amp && plan.method == Method::Full {
        4.0
    } else {
        param_bytes
    };
    let master = if d.amp && plan.method == Method::Full {
        4.0 * trainable
    } else {
        0.0
    };
    let mut states: Count = 0.0;
    for t in tensors.iter() {
        let numel = t.rows * t.cols;
        states += t.count
            * match plan.optimizer {
                Optimizer::AdamwTorch | Optimizer::AdamwTorchFused => 2.0 * state_bytes * numel,
                Optimizer::PagedAdamw32bit => 8.0 * numel,
                Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => {
                    if numel < OPT8_MIN_NUMEL {
                        8.0 * numel
                    } else {
                        2.0 * numel + 2.0 * 4.0 * ceil_div(numel, OPT8_BLOCK)
                    }
                }
                Optimizer::Sgd => 0.0,
                // Factored second moment for matrices (row and column vectors), a full one for vectors.
                Optimizer::Adafactor => {
                    if t.rows > 1.0 && t.cols > 1.0 {
                        state_bytes * (t.rows + t.cols)
                    } else {
                        state_bytes * numel
                    }
                }
            };
    }
    let paged = matches!(
        plan.optimizer,
        Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit
    );
    let (on_device_states, paged_states) = if plan.cpu_offload {
        (0.0, 0.0)
    } else if paged {
        (0.0, shard_o(states))
    } else {
        (shard_o(states), 0.0)
    };
    // Offloaded states (and master weights) are stepped by the CPU; none of it is on the GPU.
    let on_device = if plan.cpu_offload { 0.0 } else { 1.0 };
    set(&mut comp, Kind::OptimizerStates, on_device_states);
    set(&mut comp, Kind::MasterWeights, on_device * shard_o(master));
    set(&mut comp, Kind::PagedStates, paged_states);
    let opt_temps = match plan.optimizer {
        // Stepping one parameter at a time in backward, foreach has one tensor to batch.
        Optimizer::AdamwTorch if plan.optimizer_in_backward => largest_tensor * state_bytes,
        Optimizer::AdamwTorch => shard_o(trainable) * state_bytes,
        Optimizer::Adafactor => 2.0 * 4.0 * largest_tensor,
        _ => 0.0,
    };
    let opt_temps = on_device * opt_temps;
    set(&mut comp, Kind::OptimizerTemps, opt_temps);

    // ---- Activations
    let n = plan.micro_batch as Count * positions(plan);
    let h = arch.hidden as Count;
    let v = arch.vocab as Count;
    let (per_layer, per_layer_scores) = layer_saved(arch, plan, d, &linears, n);
    // bitsandbytes up to 0.44 kept a 4-bit matmul's input as an attribute of its autograd node (`ctx.tensors`),
    // which backward does not free: it lives as long as the graph. litgpt's `fit()` holds the graph through its
    // logits until the next forward returns, so the previous micro-batch's inputs are still allocated at the end
    // of the next forward. (Checkpointed layers keep theirs in a graph of their own.)
    let previous_inputs =
        if plan.framework == Framework::Litgpt && bnb_saves_input(plan) && !plan.grad_checkpointing
        {
            let without = Plan {
                qlora_saves_input: false,
                ..plan.clone()
            };
            // o_proj's input is the attention output a flash kernel keeps, so this step counts it once (in the
            // attention's share); the previous micro-batch's kernels have freed theirs, but bitsandbytes still
            // holds o_proj's copy of it.
            let attn_out = if plan.attn == Attn::Eager {
                0.0
            } else {
                d.c * n * arch.q_dim() as Count
            };
            layers * (per_layer - layer_saved(arch, &without, d, &linears, n).0 + attn_out)
        } else {
            0.0
        };
    set(&mut comp, Kind::PreviousInputs, previous_inputs);
    // Eager attention with a padding-capable mask builds one 4D causal mask per forward.
    let mask = if plan.attn == Attn::Eager && plan.framework != Framework::Webgpu {
        d.c * plan.micro_batch as Count * positions(plan) * key_positions(plan)
    } else {
        0.0
    };
    // torchtune compiles the layers only; Liger replaces the final norm too.
    let final_norm = match arch.norm {
        Norm::RmsNorm => 4.0 * n * h + 4.0 * n,
        Norm::LayerNorm => 4.0 * n * h + 8.0 * n,
    } + if norms_trainable(plan) && !plan.liger {
        norm_product_bytes(arch.norm, arch, d) * n * h
    } else {
        0.0
    };
    let head_trainable = plan.method == Method::Full
        || plan.targets.contains(Target::LmHead)
        || plan.tokens == TokenTraining::All;
    let head_input = if head_trainable { d.r * n * h } else { 0.0 };
    // Offloaded activations wait in CPU memory; on the GPU are the layer being computed and the one prefetched.
    let kept_layers = if plan.offload_activations {
        layers.min(2.0)
    } else {
        layers
    };
    // An fp32 frozen base under autocast: each matmul casts its weight to 16-bit, and the linear keeps that copy
    // for its input's gradient (autocast caches only casts of weights that train). Checkpointing recomputes them
    // one layer at a time.
    // Sharded, the gathered layer is that copy (see ShardBuffers).
    // A GPTQ base does the same: auto-gptq's QuantLinear, in its PyTorch path (above 128 tokens, and always
    // under ms-swift), dequantizes its weight to 16-bit and multiplies with `torch.matmul`, which keeps that weight
    // for the input's gradient.
    let gptq = plan.gptq_bits().is_some();
    let fp32_frozen_base = d.amp && d.w == 4.0 && plan.method == Method::Lora && !d.sharded_cast;
    // Expert parameters LoRA reaches through `target_parameters`: all of them are rebuilt dense and kept, and the
    // largest one's dense gradient passes through backward. Building W + BA casts each expert's A and B to the
    // compute dtype, and the product keeps both casts (up's A is the gate half's).
    let shared_a = parametrized_gate_up(plan, &linears);
    let rank = plan.rank as Count;
    let (parametrized_weights, largest_parametrized, factors) =
        linears.iter().filter(|l| parametrized(plan, l)).fold(
            (0.0, 0.0, 0.0),
            |(sum, max, factors): (Count, Count, Count), l| {
                let w = l.weight_params() as Count;
                let a_in = if a_shared_with_gate(l, shared_a) {
                    0.0
                } else {
                    l.in_features as Count
                };
                let f = l.copies as Count * rank * (a_in + l.out_features as Count);
                (sum + w, max.max(w), factors + f)
            },
        );
    let factor_casts = if d.a != d.c { d.c * factors } else { 0.0 };
    let copies_per_layer = if fp32_frozen_base {
        d.c * arch.layer_linear_weight_params() as Count
    } else if gptq {
        d.c * quantized_layer_weights
    } else {
        0.0
    } + d.c * parametrized_weights
        + factor_casts;
    // The frozen fp32 head is cast the same way for each matmul it takes part in: once for the whole batch, or
    // once per 128-token chunk of litgpt's chunked head, each copy kept until that chunk's backward. QLoRA's head
    // is such a head too once `prepare_model_for_kbit_training` upcasts every unquantized weight (HF QLoRA traced
    // on CPU keeps a 16-bit vocab x hidden copy from the head's forward to its backward).
    // The head is an fp32 weight under autocast whenever the unquantized weights are (LoRA's fp32 base, upcast
    // QLoRA), unless FSDP gathers it already cast or litgpt quantized it.
    let fp32_frozen_head = d.amp && d.w == 4.0 && !d.sharded_cast && !head_quantized;
    let head_copies = if fp32_frozen_head && !head_trainable && plan.loss == Loss::Standard {
        let chunks = if plan.framework == Framework::Litgpt {
            ceil_div(positions(plan), 128.0)
        } else {
            1.0
        };
        chunks * d.c * arch.vocab as Count * h
    } else {
        0.0
    };
    let weight_copies = if plan.grad_checkpointing {
        0.0
    } else {
        kept_layers * copies_per_layer
    };
    // The head's backward runs first, so its copies are gone before backward reaches the layers.
    set(&mut comp, Kind::WeightCopies, weight_copies + head_copies);
    let (saved_all, scores_all, ckpt) = if plan.grad_checkpointing {
        (final_norm + head_input, 0.0, kept_layers * d.r * n * h)
    } else {
        (
            kept_layers * per_layer + final_norm + head_input,
            kept_layers * per_layer_scores + mask,
            0.0,
        )
    };
    // Logits: forward keeps 16-bit logits, their fp32 upcast and the log-softmax output; backward peaks with
    // the log-softmax output, its incoming gradient and the gradient it produces, all fp32.
    let (logits_fwd, logits_bwd, logits_block) = match (plan.loss, plan.framework) {
        (Loss::Standard, Framework::Hf) => {
            let up = if d.c == 4.0 { 0.0 } else { 4.0 };
            ((d.c + up + 4.0) * n * v, 12.0 * n * v, 4.0 * n * v)
        }
        (Loss::Standard, Framework::Torchtune) => {
            // The decoder returns `output(h).float()` and the recipe deletes its reference after the loss: the fp32
            // log-softmax stays for backward, which adds its incoming gradient and the gradient it makes. Under
            // compile the loss is one fused kernel that keeps the fp32 logits themselves instead, but only in
            // `lora_finetune_single_device`: the full and distributed recipes (0.4 to 0.6) call
            // `training.compile_loss(loss)` without keeping the compiled module it returns, which only patches the
            // chunked loss in place, so a plain cross-entropy runs eagerly there (traced on CPU: 12 B per logit).
            if plan.compile && plan.method != Method::Full && plan.gpus == 1 {
                ((d.c + 4.0) * n * v, 8.0 * n * v, 4.0 * n * v)
            } else {
                ((d.c + 4.0).max(8.0) * n * v, 12.0 * n * v, 4.0 * n * v)
            }
        }
        (Loss::Chunked, Framework::Torchtune) => {
            // CEWithChunkedOutputLoss: the head's output in 8 chunks of 16-bit logits, all kept. Eagerly each chunk
            // is upcast and log-softmaxed in fp32 and kept too; compiled, the loss reads the 16-bit chunk and keeps
            // only a log-sum-exp per token, and backward makes one chunk's 16-bit gradient at a time beside the
            // saved chunks (torchtune 0.6's step traced on CPU: 8 chunks + 1 gradient at its peak, 9 x 65.7 MB at
            // batch 2 x 1024 tokens).
            let chunk = ceil_div(n, 8.0) * v;
            if plan.compile {
                (
                    d.c * n * v + 4.0 * n,
                    d.c * n * v + d.c * chunk,
                    d.c * chunk,
                )
            } else {
                (
                    d.c * n * v + 4.0 * n * v + 4.0 * chunk,
                    4.0 * n * v + 2.0 * 4.0 * chunk + d.c * chunk,
                    4.0 * chunk,
                )
            }
        }
        (Loss::Standard, Framework::Litgpt) => {
            // Fabric returns the head's output cast to the default dtype, fp32, and `fit()` keeps those logits
            // through backward. LoRA recipes run the head in 128-token chunks with a cross-entropy per chunk,
            // each keeping its fp32 log-softmax; backward then gathers every chunk's 16-bit gradient before the
            // head's backward: 10 B per logit at its start. Full fine-tuning runs the head unchunked: the fp32
            // log-softmax, its incoming gradient and the gradient it makes beside the kept logits, 12 B.
            let chunk = n.min(128.0) * v;
            if plan.method == Method::Full {
                (8.0 * n * v, 12.0 * n * v, 4.0 * n * v)
            } else {
                (8.0 * n * v + d.c * chunk, 10.0 * n * v, 4.0 * chunk)
            }
        }
        // The WebGPU runtime computes its whole loss one way, whatever kernel the plan names.
        (Loss::Standard | Loss::Kernel, Framework::Webgpu) => {
            // All logits in f32, kept; backward adds their gradient beside them while the per-row log-sum-exp waits.
            (
                (4.0 * v + (4.0 * h).max(8.0)) * n,
                8.0 * n * v + 4.0 * n,
                4.0 * n * v,
            )
        }
        (Loss::Chunked, Framework::Webgpu) => {
            // The final norm's output stays for the recomputation; one chunk of logits at a time, and its gradient.
            let chunk = (plan.chunk as Count).min(n) * v;
            (
                4.0 * n * h + 4.0 * chunk + 8.0 * n,
                8.0 * n * h + 8.0 * chunk + 4.0 * n,
                4.0 * chunk,
            )
        }
        (Loss::Chunked, _) => {
            let chunk = (plan.chunk as Count).min(n);
            // TRL's chunked NLL upcasts the head weight to fp32 for each chunk, and keeps no logits between chunks.
            let head_copy = if d.w == 4.0 { 0.0 } else { 4.0 * v * h };
            (
                head_copy + 8.0 * chunk * v,
                head_copy + 16.0 * chunk * v,
                4.0 * chunk * v,
            )
        }
        (Loss::Kernel, _) => {
            // unsloth's cross-entropy kernel reads the 16-bit logits and keeps a log-sum-exp per token; its
            // backward writes the logits' gradient into their own buffer.
            (d.c * n * v + 4.0 * n, d.c * n * v + 4.0 * n, d.c * n * v)
        }
        (Loss::Fused, _) => {
            // Liger's fused linear cross-entropy: chunks sized so a chunk of logits is about the input's size,
            // with the input gradient computed in the forward and kept.
            let inc = ceil_div(v, h);
            let chunk = (ceil_div(n, inc) as u64).next_power_of_two() as Count;
            (d.c * chunk * v + d.c * n * h, d.c * n * h, d.c * chunk * v)
        }
    };
    // Gemma 2 softcaps the logits before the loss: under transformers (traced on CPU) the tanh output waits for
    // backward beside them. litgpt's chunked head and torchtune's losses are not traced; they stay as they were.
    let softcap = if arch.final_logit_softcap
        && plan.loss == Loss::Standard
        && plan.framework == Framework::Hf
    {
        d.c * n * v
    } else {
        0.0
    };
    let (logits_fwd, logits_bwd) = (logits_fwd + softcap, logits_bwd + softcap);
    set(&mut comp, Kind::SavedActivations, saved_all);
    set(&mut comp, Kind::AttentionScores, scores_all);
    set(&mut comp, Kind::Checkpoints, ckpt);
    // A loop that keeps the model's output until after the optimizer step holds the returned logits through
    // backward and the step: fsdp_qlora's `output`, and torchtune's recipes before they learned to `del logits`
    // (mid-2024). litgpt's profile keeps its logits already; chunked and fused losses return none.
    let held_logits = if plan.returns_full_logits() {
        plan.hold_logits_bits as Count / 8.0 * n * v
    } else {
        0.0
    };
    let logits_bwd = logits_bwd + held_logits;
    set(&mut comp, Kind::Logits, logits_fwd.max(logits_bwd));
    // Without checkpointing a Hugging Face model leaves `use_cache` on in training and fills a key/value cache with
    // every layer's rotated keys and values, unexpanded, returned with the output. Where attention works on
    // head-expanded copies (grouped-query attention under SDPA or eager) the cache's tensors are extra; flash
    // kernels keep the grouped ones themselves. The cache goes when the loop drops the output: before backward
    // under the Trainer, after the step in loops that keep it (`hold`).
    let kv_cache = if plan.framework == Framework::Hf
        && !plan.grad_checkpointing
        && plan.attn != Attn::Flash
        && arch.kv_dim() < arch.q_dim()
    {
        layers
            * 2.0
            * d.c
            * arch.kv_dim() as Count
            * (n + plan.micro_batch as Count * prefix_tokens(plan))
    } else {
        0.0
    };
    set(&mut comp, Kind::KvCache, kv_cache);
    let held_kv = if plan.hold_logits_bits > 0 {
        kv_cache
    } else {
        0.0
    };
    // What a loop that keeps the model output holds through backward and the step.
    let held_output = held_logits + held_kv;

    // ---- Working memory of backward: one layer's activation gradients, and one recomputed layer under checkpointing.
    let k_route = if arch.experts > 1 {
        arch.experts_per_token as Count
    } else {
        1.0
    };
    // Softmax backward makes a gradient the size of the scores it reads (eager attention only).
    let scores_grad = if plan.attn == Attn::Eager {
        per_layer_scores
    } else {
        0.0
    };
    // A parametrized expert parameter's dense 16-bit gradient, on its way to B and A.
    let parametrized_grad = d.c * largest_parametrized;
    // The widest MLP in backward: the routed experts' rows, or a shared expert's, whose backward runs apart.
    let mlp_inner =
        (arch.intermediate as Count * k_route).max(arch.shared_expert_intermediate as Count);
    let grad_flow = if plan.framework == Framework::Webgpu {
        // The residual stream's gradient, and the MLP's three gradients at their widest moment.
        4.0 * n * h + 12.0 * n * mlp_inner + scores_grad
    } else {
        2.0 * d.r * n * h + 3.0 * d.m * n * mlp_inner + scores_grad
    } + parametrized_grad;
    let recompute = if plan.grad_checkpointing {
        per_layer + per_layer_scores + mask + copies_per_layer
    } else {
        0.0
    };
    let backward_work = grad_flow + recompute;
    set(&mut comp, Kind::BackwardWork, backward_work);
    let largest_linear = linears
        .iter()
        .map(|l| l.in_features as Count * l.out_features as Count)
        .fold(0.0, Count::max);
    // Weights of the largest quantized linear of a layer: what one dequantization or one load-time quantization
    // handles.
    let largest_quantized = linears
        .iter()
        .filter(|l| quantizes(l, plan))
        .map(|l| l.in_features as Count * l.out_features as Count)
        .fold(0.0, Count::max);
    // The WebGPU runtime's fused dequantize-matmul kernels never materialize a dense weight.
    let dequant = if plan.method == Method::Qlora && plan.framework != Framework::Webgpu {
        let head = if head_quantized {
            arch.vocab as Count * arch.hidden as Count
        } else {
            0.0
        };
        // litgpt's bitsandbytes plugin quantizes from fp16, so each dequantization returns fp16 and the cast to
        // the bf16 compute dtype is a second dense copy beside it.
        let copies = if head_quantized && d.c == 2.0 {
            2.0
        } else {
            1.0
        };
        let backward = copies * d.c * largest_quantized.max(head);
        if plan.quant == Quant::Int8 {
            // LLM.int8's forward multiplies in int8: each matmul quantizes its input row- and column-wise (two int8
            // copies) and accumulates an int32 output before scaling it back; its backward dequantizes the weight.
            let forward = linears
                .iter()
                .filter(|l| quantizes(l, plan))
                .map(|l| n * (2.0 * l.in_features as Count + 4.0 * l.out_features as Count))
                .fold(0.0, Count::max);
            backward.max(forward)
        } else {
            backward
        }
    } else {
        0.0
    };
    set(&mut comp, Kind::DequantBuffer, dequant);
    let peft_buffer = {
        let largest = linears
            .iter()
            .filter(|l| adapted(plan, l))
            .map(|l| l.in_features as Count * l.out_features as Count)
            .fold(0.0, Count::max);
        let dora = match plan.peft {
            _ if plan.method == Method::Full => 0.0,
            // B·A in the adapter dtype, and W + s·BA promoted to fp32 for the norm.
            Peft::Dora => (d.a + 4.0) * largest,
            // LoHa's two dense rank-r products in flight before their Hadamard product (and again in backward,
            // where each factor's gradient multiplies the other product).
            Peft::Loha => 2.0 * d.a * largest,
            _ => 0.0,
        };
        let tokens = match plan.tokens {
            TokenTraining::Rows(_) if plan.method != Method::Full => d.w * arch.vocab as Count * h,
            _ => 0.0,
        };
        dora.max(tokens)
    };
    set(&mut comp, Kind::PeftBuffers, peft_buffer);
    let dequant = dequant + peft_buffer;
    let gather = if zero >= 3 {
        let layer_bytes = arch.layer_params() as Count
            * if plan.method == Method::Qlora {
                1.0
            } else if d.sharded_cast {
                d.c
            } else {
                d.w
            };
        2.0 * layer_bytes
    } else {
        0.0
    };
    let ddp_buckets = if plan.gpus > 1 && zero == 0 {
        trainable * param_bytes
    } else {
        0.0
    };
    set(&mut comp, Kind::ShardBuffers, gather + ddp_buckets);

    // ---- Phases
    let weights = comp[Kind::BaseWeights as usize]
        + comp[Kind::QuantConstants as usize]
        + comp[Kind::AdapterWeights as usize];
    let optimizer = comp[Kind::OptimizerStates as usize] + comp[Kind::MasterWeights as usize];
    // The WebGPU runtime also keeps the batch (token ids, labels), the RoPE table, the loss and the 4-bit code
    // tables on the device for the whole run.
    let inputs = if plan.framework == Framework::Webgpu {
        8.0 * n + 4.0 * plan.seq_len as Count * arch.head_dim as Count + 4.0 + 1088.0
    } else {
        0.0
    };
    set(&mut comp, Kind::InputBuffers, inputs);
    let other_resident = ddp_buckets + inputs;
    // What the layers keep for backward, and with the head's 16-bit copies what is kept until the head's backward
    // is done.
    let kept_in_layers = saved_all + weight_copies + scores_all + ckpt;
    let kept_to_head = kept_in_layers + head_copies;
    let acts_fwd = kept_to_head + logits_fwd + previous_inputs + kv_cache;
    // Backward starts at the loss with everything saved; its layers then trade activations for gradients.
    let bwd_at_loss = kept_to_head + logits_bwd + held_kv;
    let bwd_in_layers_acts = kept_in_layers + held_output;
    // A trainable head's weight gradient appears in the head's backward, right after the loss's. When the head runs
    // in chunks (torchtune's chunked loss) each chunk's matmul makes a whole vocab x hidden gradient, a transposed
    // view that autograd cannot add into in place: the sum so far, the new share and their sum exist at once.
    // Autograd takes the most recently created node first, so every chunk's cross-entropy backward runs before
    // any head matmul, and all chunks' 16-bit logit gradients are still there when the head's begin. Traced with
    // torch 2.15's profiler (no Python dispatch mode, which itself blocks in-place adds): at the first add, two
    // head matmuls' gradients, their sum and six chunks' logit gradients are live.
    // The gradient then stays through the layers: as `.grad`, or, under optimizer-in-backward, until a tied
    // embedding adds its share at the very end. It is whole even when sharded or offloaded: FSDP and DeepSpeed
    // reduce-scatter (and offload) a gradient after autograd has summed it, and the head's unit is the root one,
    // whose turn comes at the end of backward.
    let head_grad = if plan.method == Method::Full {
        arch.vocab as Count * h * param_bytes
    } else {
        0.0
    };
    let accumulating = plan.grad_accumulation > 1 && !plan.optimizer_in_backward;
    let tied = arch.tied_embeddings && !litgpt_unties(arch, plan);
    let head_grad_in_layers = if tied {
        // The summed share waits in autograd's buffer for the embedding's, at the very end.
        head_grad
    } else if plan.optimizer_in_backward || accumulating {
        // Stepped and freed at once, or added into the `.grad` held from earlier micro-batches.
        0.0
    } else {
        head_grad
    };
    // torchtune's chunked loss runs the head as 8 matmuls, each adding its share of the gradient.
    let chunked_head = plan.loss == Loss::Chunked && plan.framework == Framework::Torchtune;
    // (logit gradients still live, head-weight gradients live) at the head's backward.
    let (head_logits, head_grads_live) = match (plan.loss, plan.framework) {
        _ if head_grad == 0.0 => (0.0, 0.0),
        _ if chunked_head => {
            let all = d.c * n * v;
            if all + head_grad >= all * 6.0 / 8.0 + 3.0 * head_grad {
                (all, head_grad)
            } else {
                (all * 6.0 / 8.0, 3.0 * head_grad)
            }
        }
        // A cross-entropy kernel (unsloth) leaves the 16-bit logits' gradient for the head's matmul, like the
        // standard loss.
        (
            Loss::Standard | Loss::Kernel,
            Framework::Hf | Framework::Torchtune | Framework::Litgpt,
        ) => (d.c * n * v, head_grad),
        // Liger's fused linear cross-entropy computes the head's gradient in the forward (see `fused_head_grad`);
        // the WebGPU runtime trains adapters only.
        _ => (0.0, 0.0),
    };
    // Liger's fused linear cross-entropy accumulates the head's weight gradient chunk by chunk during the loss's
    // forward, so it exists from the loss on.
    let fused_head_grad = if plan.loss == Loss::Fused {
        head_grad
    } else {
        0.0
    };
    let bwd_at_head_acts = kept_to_head + head_logits + held_output;
    // Optimizer-in-backward steps each parameter inside backward: its gradient and step temporaries join there.
    let step_temps_in_bwd = if plan.optimizer_in_backward {
        opt_temps
    } else {
        0.0
    };
    let step_in_bwd = if plan.optimizer_in_backward {
        step_temps_in_bwd
            + if plan.method == Method::Full {
                // In the layers a layer's largest weight steps (the head has stepped, or waits for a tied
                // embedding and is counted on its own); the embedding's turn is the end.
                largest_linear * param_bytes
            } else {
                grads
            }
    } else {
        0.0
    };
    // Loading a QLoRA model quantizes one weight at a time: its 16-bit copy, and with the wide quantizer two
    // (weights x 16) 16-bit tensors comparing every weight with the 16 NF4 values.
    let load_transient =
        if plan.method == Method::Qlora && plan.quantize_at_load_wide && plan.gptq_bits().is_none()
        {
            (2.0 + 2.0 * 16.0 * 2.0) * largest_quantized
        } else {
            0.0
        };
    set(&mut comp, Kind::LoadTransient, load_transient);
    let load = [
        weights,
        0.0,
        optimizer,
        0.0,
        other_resident + load_transient,
    ];
    // With accumulation, the gradients summed so far stay through each later micro-batch's forward and backward
    // (optimizer-in-backward steps every micro-batch instead).
    let held_grads = if plan.grad_accumulation > 1 && !plan.optimizer_in_backward {
        grads
    } else {
        0.0
    };
    let fwd = [
        weights,
        held_grads + fused_head_grad,
        optimizer,
        acts_fwd,
        other_resident + dequant + gather,
    ];
    // A tied embedding's share arrives last and joins the head's in autograd's buffer. A single head matmul left a
    // transposed view there, so the sum is out of place: both shares and the sum (traced on CPU: 3 x 788 MB at the
    // end of torchtune's unchunked full fine-tune). Chunked, the buffer is already a sum and takes the share in
    // place. Accumulating, the result is then added into the held `.grad`, so none of it is that `.grad`.
    let tied_end = if tied && head_grad > 0.0 {
        let extra = if chunked_head { 1.0 } else { 2.0 } + if accumulating { 1.0 } else { 0.0 };
        extra * head_grad
    } else {
        0.0
    };
    // Backward's moments, in order: the loss's backward, the head's, the layers', the end; the largest is the phase.
    let at_head = if head_grads_live > 0.0 {
        [
            weights,
            held_grads + head_grads_live,
            optimizer,
            bwd_at_head_acts,
            other_resident,
        ]
    } else {
        [0.0; 5]
    };
    let moments = [
        [
            weights,
            held_grads + fused_head_grad,
            optimizer,
            bwd_at_loss,
            other_resident,
        ],
        at_head,
        [
            weights,
            held_grads + head_grad_in_layers,
            optimizer,
            bwd_in_layers_acts,
            other_resident + backward_work + dequant + gather + step_in_bwd,
        ],
        [
            weights,
            grads + tied_end,
            optimizer,
            held_output,
            other_resident + grad_flow + dequant + gather + step_temps_in_bwd,
        ],
    ];
    let mut bwd = moments[0];
    for m in &moments[1..] {
        if m.iter().sum::<Count>() > bwd.iter().sum::<Count>() {
            bwd = *m;
        }
    }
    let opt = [
        weights,
        grads,
        optimizer,
        held_output,
        other_resident + opt_temps,
    ];
    let to_phase = |a: [Count; 5], sat: &mut bool| PhaseMemory {
        weights: clamp(a[0], sat),
        gradients: clamp(a[1], sat),
        optimizer: clamp(a[2], sat),
        activations: clamp(a[3], sat),
        other: clamp(a[4], sat),
    };
    let sums = [load, fwd, bwd, opt].map(|a| a.iter().sum::<Count>());
    let (mut peak_idx, mut peak) = (0, 0.0);
    for (i, s) in sums.iter().enumerate() {
        if *s >= peak {
            peak = *s;
            peak_idx = i;
        }
    }

    // ---- Reserved and device
    // A warm cache strands about one largest transient block; an emptied cache or expandable segments do not:
    // the step's frees serve its own later allocations (the backward's fp32 gradients land in the blocks the
    // forward's upcast freed), so only block rounding stays.
    let largest_transient = if plan.allocator == Alloc::Cached {
        logits_block
            .max(dequant)
            .max(load_transient)
            .max(per_layer_scores)
            .max(opt_temps.min(largest_tensor * 4.0))
    } else {
        0.0
    };
    let rounded = ceil_div(peak, 2.0 * MIB) * 2.0 * MIB;
    let slack = rounded - peak + largest_transient;
    set(&mut comp, Kind::AllocatorSlack, slack);
    let reserved = peak + slack;
    set(&mut comp, Kind::CudaContext, CUDA_CONTEXT_BYTES as Count);
    let device = reserved + CUDA_CONTEXT_BYTES as Count + paged_states;

    let mut saturated = false;
    let components = comp.map(|v| clamp(v, &mut saturated));
    let phases = [load, fwd, bwd, opt].map(|a| to_phase(a, &mut saturated));
    Estimate {
        total_params: clamp(total_params, &mut saturated),
        trainable_params: clamp(trainable, &mut saturated),
        components,
        phases,
        peak_phase: Phase::ALL[peak_idx],
        peak_allocated_bytes: clamp(peak, &mut saturated),
        peak_reserved_bytes: clamp(reserved, &mut saturated),
        device_bytes: clamp(device, &mut saturated),
        saturated,
    }
}

fn clamp(v: Count, saturated: &mut bool) -> u64 {
    // 2^64 is the first f64 that no u64 holds; `as` saturates there.
    if v >= 18_446_744_073_709_551_616.0 {
        *saturated = true;
    }
    v as u64
}
