//! What one decoder layer keeps for backward, tensor by tensor: its norms' inputs and statistics, the inputs of
//! its trainable or adapted linears (and what each PEFT kind's adapter keeps), the attention kernel's saved
//! tensors, the MLP's intermediates, and an MoE block's routing. Every rule here was read off a traced layer.

use super::count::Count;
use super::setup::{
    adapted, bnb_saves_input, key_positions, parametrized, prefix_tokens, quantizes, zero3_linear,
    Dtypes, Setup,
};
use super::trainable::oft_blocks;
use crate::allocator::SMALL_SIZE_BYTES;
use crate::arch::{Architecture, Linear, LinearInput, Mlp, Norm, QkNorm};
use crate::plan::{Attn, Method, Peft, Plan, Quant, Targets, TokenTraining};
use crate::profile::{Profile, QkvViews};

/// Bytes one layer keeps for backward: the s^2 attention scores apart from the rest.
#[derive(Clone, Copy)]
pub(super) struct LayerSaved {
    pub bytes: Count,
    pub scores: Count,
    /// The tensors `bytes` is made of, in the order forward makes them: the caching allocator places them one by
    /// one ([`super::events`]).
    pub tensors: Tensors,
}

/// Tensors told apart in one layer's saved bytes; more are summed into the last (a layer keeps about a dozen,
/// an adapted MoE layer a few dozen).
pub(super) const MAX_TENSORS: usize = 48;

/// Sizes of up to [`MAX_TENSORS`] tensors, and the short-lived tensors forward makes among them.
#[derive(Clone, Copy)]
pub(super) struct Tensors {
    sizes: [Count; MAX_TENSORS],
    len: usize,
    /// Tensors so far above the small pool's size: where a burst falls once the small ones are gathered apart.
    large: usize,
    bursts: [Burst; MAX_BURSTS],
    bursts_len: usize,
}

/// Transient tensors a layer's forward makes beside what it keeps, made in turn and let go together: they keep
/// nothing, so they never add to what backward finds, but a caching allocator makes segments for them that
/// later tensors land in (CPU traces of LoRA steps: an RMSNorm's fp32 product and cast, PEFT's LoRA output
/// chain).
#[derive(Clone, Copy)]
pub(super) struct Burst {
    /// Kept tensors above the small pool's size made before it.
    pub after: usize,
    pub sizes: [Count; BURST_TENSORS],
}

/// Bursts told apart in one layer; more are dropped (a layer makes one per norm and per adapted module).
const MAX_BURSTS: usize = 16;
/// Tensors of one burst at most.
pub(super) const BURST_TENSORS: usize = 4;

impl Tensors {
    const NONE: Tensors = Tensors {
        sizes: [0.0; MAX_TENSORS],
        len: 0,
        large: 0,
        bursts: [Burst {
            after: 0,
            sizes: [0.0; BURST_TENSORS],
        }; MAX_BURSTS],
        bursts_len: 0,
    };

    fn push(&mut self, size: Count) {
        if size <= 0.0 {
            return;
        }
        if size > SMALL_SIZE_BYTES as Count {
            self.large += 1;
        }
        if self.len < MAX_TENSORS {
            self.sizes[self.len] = size;
            self.len += 1;
        } else {
            self.sizes[MAX_TENSORS - 1] += size;
        }
    }

    fn burst(&mut self, sizes: &[Count]) {
        if self.bursts_len == MAX_BURSTS {
            return;
        }
        let mut b = Burst {
            after: self.large,
            sizes: [0.0; BURST_TENSORS],
        };
        for (to, from) in b.sizes.iter_mut().zip(sizes) {
            *to = *from;
        }
        self.bursts[self.bursts_len] = b;
        self.bursts_len += 1;
    }

    pub fn sizes(&self) -> &[Count] {
        &self.sizes[..self.len]
    }

    pub fn bursts(&self) -> &[Burst] {
        &self.bursts[..self.bursts_len]
    }
}

/// What a layer keeps, summed as before and told apart tensor by tensor.
struct Kept {
    bytes: Count,
    tensors: Tensors,
}

impl Kept {
    /// One tensor of `size` bytes.
    fn add(&mut self, size: Count) {
        self.bytes += size;
        self.tensors.push(size);
    }

    /// Transient tensors made here in turn and let go together ([`Burst`]).
    fn transient(&mut self, sizes: &[Count]) {
        self.tensors.burst(sizes);
    }

    /// `count` tensors of `size` bytes each.
    fn add_each(&mut self, count: Count, size: Count) {
        self.bytes += count * size;
        for _ in 0..count as u64 {
            self.tensors.push(size);
        }
    }
}

/// The facts about one layer that each of its parts reads.
struct Layer<'a> {
    arch: &'a Architecture,
    plan: &'a Plan,
    profile: &'a Profile,
    d: Dtypes,
    linears: &'a [Linear],
    /// Token positions of the micro-batch.
    n: Count,
    /// Sequences of the micro-batch.
    sequences: Count,
    h: Count,
    q: Count,
    kv: Count,
    k_route: Count,
    full: bool,
    /// Norms fused by torch.compile or Liger rebuild what unfused ones keep.
    fused: bool,
    /// The first layer of a plan whose embedding output needs no gradient (see [`first_layer_input_frozen`]).
    input_frozen: bool,
    /// DeepSpeed ZeRO-3's linear keeps its input ([`zero3_linear`]).
    zero3_linear: bool,
}

impl Layer<'_> {
    /// Whether autograd needs the gradient of what a linear reading `input` reads. In a layer whose input is
    /// frozen nothing does until the first adapted module: q, k and v's inputs never, o's when attention is
    /// adapted, the MLP's once anything before it is.
    fn input_needs_grad(&self, input: LinearInput) -> bool {
        if !self.input_frozen {
            return true;
        }
        let parallel = self.arch.norms_per_layer == 1;
        let adapted_reading = |inputs: &[LinearInput]| {
            self.linears
                .iter()
                .any(|m| inputs.contains(&m.input) && adapted(self.plan, m))
        };
        let layer_input: &[LinearInput] = if parallel {
            &[LinearInput::AttnNorm, LinearInput::MlpNorm]
        } else {
            &[LinearInput::AttnNorm]
        };
        // Prefix tuning's trainable keys and values reach the attention output.
        let attention = adapted_reading(layer_input) || self.plan.peft == Peft::Prefix;
        match input {
            LinearInput::AttnNorm => false,
            LinearInput::MlpNorm if parallel => false,
            LinearInput::AttnOut => attention,
            LinearInput::MlpNorm => attention || adapted_reading(&[LinearInput::AttnOut]),
            LinearInput::MlpInner | LinearInput::SharedInner => {
                attention || adapted_reading(&[LinearInput::AttnOut, LinearInput::MlpNorm])
            }
        }
    }
}

/// Whether the first layer's input needs no gradient: an adapter plan's frozen embedding feeds it, so what
/// the layer keeps only for its input's gradient is not kept there (traced on CPU: layer 0's q, k and v keep no
/// dropout mask, no LoHa dense update and no OFT rotation, where o, gate, up, down and every later layer's
/// do). Trained embeddings (trainable tokens, prompt tuning), trained norms, mixed FSDP1 units (every weight
/// gets a gradient) and checkpointing (PEFT makes the embedding output require grad for it) need one, and so
/// does a profile whose buffers are kept whatever autograd would spare.
pub(super) fn first_layer_input_frozen(s: &Setup) -> bool {
    let plan = s.plan;
    plan.method != Method::Full
        && !s.d.frozen_grads
        && plan.tokens == TokenTraining::Frozen
        && !matches!(plan.peft, Peft::Ln | Peft::Prompt)
        && !plan.checkpointing.on()
        && s.profile.first_layer_spares_input_grad
}

/// Per-layer activation bytes that a layer of `s` saves for backward under `plan` (the set-up's, or one that
/// differs in a key the set-up does not read), split into the s^2 attention part and the rest; `input_frozen`
/// for a first layer whose input needs no gradient.
pub(super) fn layer_saved(s: &Setup, plan: &Plan, input_frozen: bool) -> LayerSaved {
    let (arch, d) = (s.arch, s.d);
    let layer = Layer {
        arch,
        plan,
        profile: s.profile,
        d,
        linears: &s.linears,
        n: s.tokens,
        sequences: s.sequences,
        h: arch.hidden as Count,
        q: arch.q_dim() as Count,
        kv: arch.kv_dim() as Count,
        k_route: if arch.experts > 1 {
            arch.experts_per_token as Count
        } else {
            1.0
        },
        full: plan.method == Method::Full || d.frozen_grads,
        fused: plan.compile || plan.liger,
        input_frozen,
        zero3_linear: zero3_linear(s),
    };
    if unsloth_kernels(s, plan) {
        return unsloth_layer(&layer);
    }
    let mut kept = Kept {
        bytes: 0.0,
        tensors: Tensors::NONE,
    };
    // In forward order (the allocator places them as they come): the first norm, what attention's projections
    // keep, attention, its output projection's, the second norm, the MLP's inputs and intermediates (a parallel
    // block's MLP reads the first norm's output, kept with attention's inputs).
    norms(&layer, 0..1, &mut kept);
    let mut mlp_norm_kept = linear_inputs(&layer, 0..1, &mut kept);
    let scores = attention(&layer, &mut kept);
    linear_inputs(&layer, 1..2, &mut kept);
    norms(&layer, 1..u64::MAX, &mut kept);
    if arch.norms_per_layer == 1 {
        mlp(&layer, mlp_norm_kept, &mut kept);
        linear_inputs(&layer, 2..5, &mut kept);
    } else {
        mlp_norm_kept |= linear_inputs(&layer, 2..3, &mut kept);
        mlp(&layer, mlp_norm_kept, &mut kept);
        linear_inputs(&layer, 3..5, &mut kept);
    }
    LayerSaved {
        bytes: kept.bytes,
        scores,
        tensors: kept.tensors,
    }
}

/// The model types Unsloth runs through `FastLlamaModel` and its subclasses, whose LoRA layers it patches with its
/// kernels (`unsloth/models/loader.py`; Qwen3-MoE too, whose experts are left to PEFT here).
const UNSLOTH_KERNEL_TYPES: &[&str] = &["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2"];

/// Whether Unsloth's LoRA kernels run the layer: `FastLlamaModel.patch_peft_model` installs them only for LoRA
/// with dropout 0 and no bias on linears without a bias, and (as planned here) where all seven projections
/// carry adapters, as its notebooks set them; every other layer keeps PEFT's tensors.
pub(super) fn unsloth_kernels(s: &Setup, plan: &Plan) -> bool {
    let arch = s.arch;
    s.profile.lora_kernels
        && matches!(plan.method, Method::Lora | Method::Qlora)
        && matches!(plan.peft, Peft::Lora | Peft::Rslora)
        && plan.dropout == 0.0
        && UNSLOTH_KERNEL_TYPES.contains(&arch.model_type.as_str())
        && arch.mlp == Mlp::Gated
        && arch.experts <= 1
        && !arch.qkv_bias
        && plan.targets.covers(Targets::ALL_LINEAR)
}

/// One layer under Unsloth's kernels. `Fast_RMS_Layernorm` keeps its input and the fp32 inverse RMS of each token;
/// `LoRA_QKV` keeps only its input (q, k and v go to attention, whose kernel keeps them with its output);
/// `LoRA_W` (o_proj) keeps the attention output the kernel keeps already; `LoRA_MLP` keeps its input and the gate
/// and up projections e and g, not the activation's product, which backward recomputes in place. No LoRA
/// intermediate (x·A) is kept (`unsloth/kernels/fast_lora.py`, `rms_layernorm.py`).
fn unsloth_layer(l: &Layer) -> LayerSaved {
    let (d, n, h) = (l.d, l.n, l.h);
    let mut kept = Kept {
        bytes: 0.0,
        tensors: Tensors::NONE,
    };
    for i in 0..l.arch.norms_per_layer {
        // The first norm of a layer whose input needs no gradient records nothing (its weight is frozen).
        if i == 0 && l.input_frozen {
            continue;
        }
        kept.add(d.residual * n * h);
        kept.add(4.0 * n);
    }
    kept.add(d.compute * n * h);
    let scores = attention(l, &mut kept);
    kept.add(d.compute * n * h);
    kept.add_each(2.0, d.compute * n * l.arch.intermediate as Count);
    LayerSaved {
        bytes: kept.bytes,
        scores,
        tensors: kept.tensors,
    }
}

/// Bytes per value of the normalized input a trainable weight of a `norm` keeps: an RMSNorm multiplies by its
/// weight in a separate op that keeps the normalized input, in the residual dtype or in fp32 where the weight
/// multiplies in fp32 (Gemma's `1 + weight`, and torchtune's RMSNorm, which scales the fp32 normalized input before
/// casting back: traced on CPU, 1 MB a layer at 512 tokens, hidden 512, under optimizer-in-backward);
/// `native_layer_norm` applies its weight inside the fused op and keeps no such copy.
pub(super) fn norm_product_bytes(
    norm: Norm,
    arch: &Architecture,
    profile: &Profile,
    d: Dtypes,
) -> Count {
    match norm {
        Norm::LayerNorm => 0.0,
        Norm::RmsNorm if arch.norm_scale_fp32 || profile.rmsnorm_weight_in_fp32 => 4.0,
        Norm::RmsNorm => d.residual,
    }
}

/// Norm weights train under full fine-tuning and LayerNorm tuning. A trainable norm weight multiplies the
/// normalized input, and that product keeps the 16-bit normalized copy for the weight's gradient; a frozen one
/// keeps nothing more than its fp32 input and statistics.
pub(super) fn norms_trainable(plan: &Plan) -> bool {
    match plan.method {
        Method::Full => true,
        Method::Lora | Method::Qlora => plan.peft == Peft::Ln,
    }
}

/// The layer's norms, and its query/key norms.
fn norms(l: &Layer, which: std::ops::Range<u64>, kept: &mut Kept) {
    let (arch, d, n, h) = (l.arch, l.d, l.n, l.h);
    // HF RMSNorm upcasts its input to fp32 and keeps it with the fp32 reciprocal RMS; LayerNorm keeps its input
    // (fp32 under autocast) with mean and rstd. A trainable norm weight also keeps the 16-bit normalized input it
    // multiplies, unless the norm is fused (compiled, Liger), which rebuilds it from the input and rstd in
    // backward (torchtune's compiled full fine-tune traced on CPU keeps no such copy).
    let norm_input = match arch.norm {
        // A fused RMSNorm (torch.compile, Liger) keeps its input in its own dtype and the fp32 rstd only.
        Norm::RmsNorm if l.fused => d.residual * n * h,
        Norm::RmsNorm => 4.0 * n * h,
        Norm::LayerNorm => (if d.amp { 4.0 } else { d.residual }) * n * h,
    };
    let stats = match arch.norm {
        Norm::RmsNorm => 4.0 * n,
        Norm::LayerNorm => 8.0 * n,
    };
    let product = if (l.full || norms_trainable(l.plan)) && !l.fused {
        norm_product_bytes(arch.norm, arch, l.profile, d) * n * h
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
    // An unfused HF RMSNorm makes its fp32 input, its square, the normalized product and the cast back (traced
    // on CPU): beside what it keeps, the product and the cast, or where nothing is kept the fp32 input with the
    // square and then the product. An fp32 stream makes no copy and no cast.
    let h32 = 4.0 * n * h;
    let (transient, spared_transient) = match arch.norm {
        Norm::RmsNorm if !l.fused && d.residual < 4.0 => ([h32, d.residual * n * h], [h32, h32]),
        Norm::RmsNorm if !l.fused => ([h32, 0.0], [h32, 0.0]),
        _ => ([0.0; 2], [0.0; 2]),
    };
    for i in which.clone().take_while(|&i| i < norms as u64) {
        // The first norm reads the layer's input: where that needs no gradient and the norm trains nothing,
        // autograd records nothing of it (where the profile's traces show so).
        if i == 0 && l.input_frozen && product == 0.0 && l.profile.first_norm_spared {
            kept.transient(&spared_transient);
            continue;
        }
        if (i as Count) < inputs_kept {
            kept.add(norm_input);
        }
        kept.transient(&transient);
        kept.add(stats);
        kept.add(product);
    }
    // Query/key norms read the projections' compute-dtype outputs: unfused, the fp32 copy and one reciprocal RMS
    // per head (or per token, over the whole projection); fused, the input itself. A trainable weight (full
    // fine-tuning; LayerNorm tuning leaves them frozen) also keeps the normalized copy it multiplies.
    let qk_norm = |width: Count, groups: Count| {
        (if l.fused {
            d.compute * n * width
        } else {
            4.0 * n * width
        }) + 4.0 * n * groups
            + if l.full && !l.fused {
                norm_product_bytes(Norm::RmsNorm, arch, l.profile, d) * n * width
            } else {
                0.0
            }
    };
    if !which.contains(&0) {
        return;
    }
    kept.add(match arch.qk_norm {
        QkNorm::None => 0.0,
        QkNorm::PerHead => {
            qk_norm(l.q, arch.heads as Count) + qk_norm(l.kv, arch.kv_heads as Count)
        }
        QkNorm::Full => qk_norm(l.q, 1.0) + qk_norm(l.kv, 1.0),
    });
}

/// Inputs of linear modules: a trainable weight (full) or an adapter (LoRA) needs the module's input for backward.
/// Modules that read one tensor share what they keep of it. Returns whether the MLP's norm output is kept by a
/// module of the MLP's own rows (a shared expert), which a trainable router reads too.
fn linear_inputs(l: &Layer, which: std::ops::Range<usize>, kept: &mut Kept) -> bool {
    // Parallel blocks (one norm) feed attention and MLP from the same tensor.
    let groups: [&[LinearInput]; 5] = if l.arch.norms_per_layer == 1 {
        [
            &[LinearInput::AttnNorm, LinearInput::MlpNorm],
            &[LinearInput::AttnOut],
            &[LinearInput::MlpInner],
            &[],
            &[LinearInput::SharedInner],
        ]
    } else {
        [
            &[LinearInput::AttnNorm],
            &[LinearInput::AttnOut],
            &[LinearInput::MlpNorm],
            &[LinearInput::MlpInner],
            &[LinearInput::SharedInner],
        ]
    };
    let mut mlp_norm_kept = false;
    for g in &groups[which] {
        let shared_saved = linear_group(l, g, kept);
        if g.contains(&LinearInput::MlpNorm) && shared_saved[0] {
            mlp_norm_kept = true;
        }
    }
    mlp_norm_kept
}

/// What the linears reading one input keep. Returns which of the input's two forms (the plain tokens [0], the
/// routed copies [1]) the modules keep shared.
fn linear_group(l: &Layer, g: &[LinearInput], kept: &mut Kept) -> [bool; 2] {
    let (plan, d, n) = (l.plan, l.d, l.n);
    // Flash and memory-efficient kernels (SDPA's choice for 16-bit inputs, and peakplan's WebGPU runtime) write
    // their output in (batch, seq, heads, dim) order and keep it for backward, so the `transpose(1, 2)
    // .contiguous()` before o_proj copies nothing: o_proj's input is that kept compute-dtype tensor, and only
    // copies made from it (casts, dropout, int8 transposes) are more (torchtune's full fine-tune traced on
    // CPU keeps one attention-output tensor per layer).
    let attn_out_kept = g == [LinearInput::AttnOut] && plan.attn != Attn::Eager;
    let Some(first) = l.linears.iter().find(|m| g.contains(&m.input)) else {
        return [false; 2];
    };
    let w = match first.input {
        LinearInput::AttnNorm | LinearInput::MlpNorm => l.h,
        LinearInput::AttnOut => l.q,
        LinearInput::MlpInner => l.arch.intermediate as Count,
        LinearInput::SharedInner => l.arch.shared_expert_intermediate as Count,
    };
    // MoE expert inputs are routed copies: each token reaches k experts. A shared expert beside them reads
    // the tokens themselves, so one group may hold two tensors: the plain input [0] and the routed copies [1].
    let rows_by_kind = [n, n * l.k_route];
    let mut shared_saved = [false; 2];
    // litgpt's attention is one fused qkv linear: its LoRA runs one dropout over the shared input, and keeps
    // the adapted outputs zero-padded to the full q|k|v width for the concatenation.
    let litgpt_qkv = l.profile.fused_qkv_lora
        && g.contains(&LinearInput::AttnNorm)
        && plan.method != Method::Full;
    let mut qkv_dropout_kept = false;
    for m in l.linears.iter().filter(|m| g.contains(&m.input)) {
        let routed = usize::from(m.copies > 1);
        let rows = rows_by_kind[routed];
        let input = Input { rows, w };
        // A frozen linear in the graph keeps its input under ZeRO-3's linear, where autograd's would keep only
        // its weight (traced: a LoRA layer on q and v keeps the MLP's two inputs more, 1,933,312 B at hidden 512;
        // o_proj's is the attention output, kept already). bitsandbytes' linears do not call `F.linear`.
        let bnb_linear = plan.method == Method::Qlora && quantizes(m, plan);
        let zero3_kept = l.zero3_linear && !bnb_linear && l.input_needs_grad(m.input);
        let in_compute = d.residual == d.compute || attn_out_kept;
        if l.full || parametrized(plan, m) || zero3_kept {
            keep_input(
                in_compute,
                d.compute * rows * w,
                &mut shared_saved[routed],
                kept,
            );
        }
        // A LoRA adapter keeps what it needs beside its base linear's input (which a mixed FSDP1 unit keeps too).
        if adapted(plan, m) && !parametrized(plan, m) {
            let qkv_dropout =
                (litgpt_qkv && m.input == LinearInput::AttnNorm).then_some(&mut qkv_dropout_kept);
            adapter_saved(l, m, input, qkv_dropout, &mut shared_saved[routed], kept);
        }
        if bnb_saves_input(plan) && quantizes(m, plan) {
            // Older bitsandbytes MatMul4Bit kept its (compute-dtype) input A for backward even though the
            // frozen weight needs no gradient.
            keep_input(
                in_compute,
                d.compute * rows * w,
                &mut shared_saved[routed],
                kept,
            );
            // Its MatMul8bitLt kept the input's transposed int8 copy (`CAt`) beside it.
            if plan.quant == Quant::Int8 {
                kept.add(rows * w);
            }
        }
    }
    if !attn_out_kept {
        for (rows, shared) in rows_by_kind.into_iter().zip(shared_saved) {
            if shared {
                kept.add(d.residual * rows * w);
            }
        }
    }
    shared_saved
}

/// A linear keeping its input: the stream's own tensor, shared by the linears reading it, where that is already
/// in the compute dtype (or is the kept attention output); else the compute-dtype copy autocast casts for each
/// module, `copy_bytes`.
fn keep_input(in_compute: bool, copy_bytes: Count, shared: &mut bool, kept: &mut Kept) {
    if in_compute {
        *shared = true;
    } else {
        kept.add(copy_bytes);
    }
}

/// The input one linear reads: its rows (tokens, or routed copies) and width.
#[derive(Clone, Copy)]
struct Input {
    rows: Count,
    w: Count,
}

/// litgpt's fused qkv LoRA: one dropout (or cast) of the shared input, and each adapted output zero-padded.
fn litgpt_qkv_saved(l: &Layer, m: &Linear, input: Input, dropout_kept: &mut bool, kept: &mut Kept) {
    let Input { rows, w } = input;
    let ad = if l.d.amp { l.d.compute } else { l.d.adapter };
    if !*dropout_kept {
        *dropout_kept = true;
        let mask = if l.input_needs_grad(m.input) {
            rows * w
        } else {
            0.0
        };
        if l.plan.dropout > 0.0 {
            kept.add(mask);
        }
        kept.add(ad * rows * w);
    }
    kept.add(l.d.compute * rows * m.out_features as Count);
}

/// What an adapter on linear `m` keeps for its gradients. `qkv_dropout`: on litgpt's fused qkv, whether its one
/// dropout's output is counted already; `shared`: set when the module keeps the shared input rather than a copy.
fn adapter_saved(
    l: &Layer,
    m: &Linear,
    input: Input,
    qkv_dropout: Option<&mut bool>,
    shared: &mut bool,
    kept: &mut Kept,
) {
    let (plan, d) = (l.plan, l.d);
    let Input { rows, w } = input;
    let ad = if d.amp { d.compute } else { d.adapter };
    let mut cast = 0.0;
    // Dropout keeps its 1-byte mask for its input's gradient, which a frozen first layer's q, k, v never need.
    let input_grad = l.input_needs_grad(m.input);
    let mask = if plan.dropout > 0.0 && input_grad {
        rows * w
    } else {
        0.0
    };
    match plan.peft {
        // (IA)^3 multiplies the output by its vector (the input, for the feed-forward `down`), and the product
        // keeps the other factor for the vector's gradient. PEFT first casts a feed-forward input to the vector's
        // dtype, so that factor is kept in the adapter dtype (fp32 by default).
        Peft::Ia3 => {
            kept.add(if m.input == LinearInput::MlpInner {
                d.adapter * rows * w
            } else {
                d.compute * rows * m.out_features as Count
            });
            return;
        }
        // VeRA's projections are frozen, so neither keeps its input: lambda_d keeps A·x (rank-wide) and lambda_b
        // keeps B's output (output-wide) for their gradients; dropout keeps only its mask.
        Peft::Vera => {
            kept.add(mask);
            kept.add(ad * rows * plan.rank as Count);
            kept.add(ad * rows * m.out_features as Count);
            return;
        }
        // LoRA-FA (PEFT's `create_lorafa_optimizer`) freezes A, so nothing keeps A's input (traced on CPU: two
        // fp32 input casts a layer fewer than LoRA's on q and v); B keeps A's rank-wide output.
        Peft::Lorafa => {
            kept.add(mask);
            kept.add(ad * rows * plan.rank as Count);
            return;
        }
        _ => {}
    }
    if let Some(dropout_kept) = qkv_dropout {
        litgpt_qkv_saved(l, m, input, dropout_kept, kept);
    } else if plan.dropout > 0.0 {
        // Dropout keeps its mask and its output, per adapted module.
        kept.add(mask);
        kept.add(ad * rows * w);
    } else if (d.adapter_compute != d.residual || autocast_casts_input(d)) && !plan.compile {
        // PEFT casts the input to the adapter dtype per module; under autocast lora_A re-casts to 16-bit, a copy
        // per module even where the stream is already in the adapters' fp32 (traced on CPU: an fp32 LoRA base
        // under autocast keeps one 16-bit input per adapted module, not the shared fp32 stream).
        // Under autocast the cast to fp32 adapters comes first, a transient where the input is not fp32 already,
        // live until the module's output is summed (traced on CPU: every 16-bit input, `down`'s the widest).
        let norm_fed = matches!(m.input, LinearInput::AttnNorm | LinearInput::MlpNorm);
        let input_dtype = if norm_fed { d.residual } else { d.compute };
        if autocast_casts_input(d) && input_dtype != d.adapter {
            cast = d.adapter * rows * w;
        }
        kept.add(ad * rows * w);
    } else {
        *shared = true;
    }
    match plan.peft {
        // LoHa builds the dense update (B1 A1) ⊙ (B2 A2) in the adapter dtype each forward, and the linear that
        // applies it keeps it for the input's gradient until this layer's backward.
        Peft::Loha if input_grad => kept.add_each(
            m.copies as Count,
            d.adapter * m.in_features as Count * m.out_features as Count,
        ),
        Peft::Loha => {}
        // OFT (PEFT 0.17 on) builds each block's rotation by Cayley-Neumann's series (5 terms): the skew-symmetric
        // generator Q and the products Q^2 and Q^3 are kept for the generator's gradient, the rotation R for the
        // input's (the input it rotates is counted above).
        Peft::Oft => {
            let (blocks, b) = oft_blocks(plan.rank as Count, w);
            let count = if input_grad { 4.0 } else { 3.0 };
            kept.add_each(count, d.adapter * blocks * b * b * m.copies as Count);
        }
        // lora_B keeps lora_A's rank-wide output.
        _ => {
            kept.add(ad * rows * plan.rank as Count);
            kept.add(lora_weight_casts(l, m, input_grad));
            // PEFT's LoRA adds `lora_B(...) * scaling` to the base output: beside the base output, B's scaled
            // output and the sum, in the adapters' dtype, with the base output promoted to it where that differs
            // (traced on CPU: fp32 adapters on a bf16 base) or, under autocast, the input's fp32 cast.
            if plan.peft == Peft::Lora && !plan.compile {
                let out = rows * m.out_features as Count;
                let promoted = if ad != d.compute { ad * out } else { cast };
                kept.transient(&[d.compute * out, ad * out, promoted, ad * out]);
            }
        }
    }
    if plan.peft == Peft::Dora {
        // DoRA rescales the base output and the LoRA output by magnitude / ||W + BA||: both products keep their
        // other factor (the base output in the compute dtype, the LoRA output in the adapter dtype).
        kept.add(d.compute * rows * m.out_features as Count);
        kept.add(ad * rows * m.out_features as Count);
    }
}

/// Whether autocast casts an adapter's input to the compute dtype for its matmul (fp32 adapters under autocast;
/// FSDP's mixed precision gathers them already in the compute dtype).
fn autocast_casts_input(d: Dtypes) -> bool {
    d.amp && d.adapter_compute != d.compute
}

/// fp32 LoRA weights under autocast (not FSDP's mixed precision, which gathers them in 16-bit already): each
/// matmul casts its weight to 16-bit and keeps the copy for its input's gradient (autocast caches the casts of
/// weights that train): B's always (A's output needs a gradient), A's where the module's input needs one (LoRA-FA,
/// whose A is frozen, keeps its own account in `adapter_saved`) (traced on CPU: bf16 copies of every A and B of a layer, 2 B per adapter
/// parameter, under all-linear QLoRA with autocast).
fn lora_weight_casts(l: &Layer, m: &Linear, input_grad: bool) -> Count {
    let d = l.d;
    if !autocast_casts_input(d) {
        return 0.0;
    }
    let r = l.plan.rank as Count;
    let a = if input_grad {
        r * m.in_features as Count
    } else {
        0.0
    };
    d.compute * (a + r * m.out_features as Count) * m.copies as Count
}

/// Attention: q and (expanded) k, v are kept by the attention kernel with its output and log-sum-exp; eager
/// attention keeps its scores. Returns the scores' bytes.
fn attention(l: &Layer, kept: &mut Kept) -> Count {
    let (arch, plan, n, q, kv) = (l.arch, l.plan, l.n, l.q, l.kv);
    let c = l.d.compute;
    let heads = arch.heads as Count;
    // HF's SDPA and eager paths expand k and v to every head (repeat_kv); flash kernels and a runtime's own
    // attention kernel (peakplan's WebGPU runtime) read the grouped heads directly.
    let kv_width = if plan.attn == Attn::Flash || l.profile.own_attention_kernel {
        kv
    } else {
        q
    };
    // Prefix tuning's virtual keys and values are concatenated in front of each layer's own, and kept with them.
    let b = l.sequences;
    kept.add(c * n * q);
    kept.add_each(2.0, c * kv_width * (n + b * prefix_tokens(plan)));
    // Under transformers, v sliced out of a fused projection reaches attention as a view unless repeat_kv copies
    // it (grouped heads under SDPA or eager): the whole q|k|v output stays alive, q + kv more than v alone
    // (traced on CPU: Phi-3, GPT-NeoX). litgpt 0.5 splits its fused q|k|v into views too (traced on CPU:
    // 0.5.13; its 2024 releases reshaped a permuted split, a copy, which the 2024 tables measured).
    let fused_views = match l.profile.qkv_views {
        QkvViews::Never => false,
        QkvViews::WhereTheModelFuses => arch.qkv_views,
        QkvViews::Always => true,
    };
    if fused_views && (plan.attn == Attn::Flash || arch.kv_heads == arch.heads) {
        kept.add(c * n * (q + kv));
    }
    match plan.attn {
        // gpt-oss appends each head's sink logit as one more key, subtracts the row maximum (whose backward keeps
        // its int64 index) and softmaxes in the compute dtype; P·V reads a view of that softmax, the one
        // scores-sized tensor kept (traced on CPU).
        Attn::Eager if arch.attn_sinks => {
            c * heads * n * (key_positions(plan) + 1.0) + 8.0 * heads * n
        }
        Attn::Eager => {
            // Softmax output in fp32 plus the 16-bit copy fed to P·V; softcapped scores keep their tanh as well.
            let per = if c == 4.0 { 4.0 } else { 4.0 + c }
                + if arch.attn_logit_softcap { c } else { 0.0 };
            per * heads * n * key_positions(plan)
        }
        // Prefix tuning hands SDPA a boolean mask (the causal one widened by the virtual tokens), which SDPA
        // turns into an additive one in the compute dtype at every call and keeps for backward: batch x seq x
        // key positions a layer, broadcast over heads (traced on CPU: `aten::where`, one per layer). Flash
        // kernels take no mask; without a prefix transformers passes none (`is_causal`).
        Attn::Sdpa | Attn::Flash => {
            kept.add(c * n * q);
            kept.add(4.0 * n * heads);
            if plan.attn == Attn::Sdpa
                && prefix_tokens(plan) > 0.0
                && !l.profile.own_attention_kernel
            {
                c * n * key_positions(plan)
            } else {
                0.0
            }
        }
    }
}

/// MLP: the activation keeps its input; the gated product keeps both factors. A shared expert and an MoE
/// router add theirs.
fn mlp(l: &Layer, mlp_norm_kept: bool, kept: &mut Kept) {
    let (arch, plan, d, n, h) = (l.arch, l.plan, l.d, l.n, l.h);
    let inter = arch.intermediate as Count * l.k_route;
    let fused_act = plan.compile || plan.liger || l.profile.fused_mlp_activation;
    let tensors = match arch.mlp {
        // Fused SwiGLU keeps the two projections and recomputes the activation in backward.
        Mlp::Gated | Mlp::GatedFused if fused_act => 2.0,
        // gpt-oss's clamped SwiGLU keeps the gate|up output (both clamps read views of it) and four products.
        Mlp::Gated | Mlp::GatedFused if arch.swiglu_clamp => 6.0,
        Mlp::Gated | Mlp::GatedFused => 3.0,
        // transformers writes `gelu_new` out in elementwise ops, which keep its input, the tanh, 1 + tanh and
        // x / 2 (traced on CPU: Phi-2); litgpt and torchtune call the fused tanh GELU.
        Mlp::Plain if arch.composite_gelu && l.profile.gelu_new_unfused => 4.0,
        Mlp::Plain => 1.0,
    };
    kept.add_each(tensors, d.mlp * n * inter);
    // The gated product feeds `down`; where nothing keeps it (a frozen, unadapted `down`), it and down's output
    // are transients (traced on CPU: LoRA on q and v).
    let down_reads = |m: &&Linear| m.input == LinearInput::MlpInner;
    let down_kept = l.full
        || l.linears
            .iter()
            .filter(down_reads)
            .any(|m| adapted(plan, m));
    if !down_kept && matches!(arch.mlp, Mlp::Gated | Mlp::GatedFused) && arch.experts <= 1 {
        kept.transient(&[d.mlp * n * inter, d.compute * n * h]);
    }
    // A shared expert is a gated MLP over every token (traced on CPU: Qwen2-MoE); its sigmoid gate's product keeps
    // the expert's output and the sigmoid.
    let shared = arch.shared_expert_intermediate as Count;
    if shared > 0.0 {
        kept.add_each(if fused_act { 2.0 } else { 3.0 }, d.mlp * n * shared);
        if arch.shared_expert_gate {
            kept.add(d.mlp * n * h);
            kept.add(d.mlp * n);
        }
    }
    if arch.experts > 1 {
        if arch.router_topk_softmax {
            // The top-k indices and the softmax over those k logits, in the compute dtype.
            kept.add(8.0 * n * l.k_route);
            kept.add(d.compute * n * l.k_route);
        } else {
            // Router logits and their softmax in fp32.
            kept.add_each(2.0, 4.0 * n * arch.experts as Count);
        }
        // Each routed token's expert output is scaled by its routing weight, and that product keeps the output for
        // the weight's gradient (the router trains through it, frozen or not, as long as the stream needs a
        // gradient); gathering those weights keeps two int64 index tensors (traced on CPU: Mixtral LoRA). The
        // output has the MLP's dtype: fp32 in an upcast QLoRA model (traced on CPU: Qwen3-MoE).
        kept.add(d.mlp * h * n * l.k_route);
        kept.add_each(2.0, 8.0 * n * l.k_route);
        // A trainable router keeps its own input, the norm output, beside the routed copies the experts keep
        // (traced on CPU: gpt-oss full fine-tuning).
        if l.full && !mlp_norm_kept {
            kept.add(d.compute * n * h);
        }
    }
}
