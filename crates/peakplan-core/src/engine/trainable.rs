//! The trainable tensors of a plan, shape by shape: what gradients, optimizer states and adapter weights are
//! counted over. Full fine-tuning trains every parameter; an adapter plan trains what its PEFT kind adds (LoRA's A
//! and B, DoRA's magnitudes, IA³'s vectors, VeRA's scalings, LoHa's pairs, OFT's blocks, LayerNorm weights,
//! virtual tokens) and the embedding rows or copies that trainable tokens ask for.

use super::count::{ceil_div, Count};
use super::setup::{a_shared_with_gate, adapted, parametrized_gate_up, Setup};
use crate::arch::{Architecture, Linear, LinearInput, Norm, Target};
use crate::plan::{Method, Peft, Plan, TokenTraining};

/// A trainable tensor's shape, for optimizers whose state depends on it.
#[derive(Clone, Copy)]
pub(super) struct TensorShape {
    pub rows: Count,
    pub cols: Count,
    /// How many such tensors.
    pub count: Count,
    /// Held in the model's weight dtype rather than the trainable dtype: PEFT's `modules_to_save` deep-copies
    /// the module as it is, and its adapter-dtype cast leaves the copy alone (traced on CPU: peft 0.21.2).
    pub in_weight_dtype: bool,
}

impl TensorShape {
    /// Bytes per element: the trainable dtype's, or the weight dtype's for a copy of a model tensor.
    pub fn bytes(&self, trainable_bytes: Count, weight_bytes: Count) -> Count {
        if self.in_weight_dtype {
            weight_bytes
        } else {
            trainable_bytes
        }
    }
}

/// A fixed-capacity list of trainable tensor shapes (no allocation on the hot path).
pub(super) struct Shapes {
    items: [TensorShape; 24],
    len: usize,
}

impl Shapes {
    fn new() -> Shapes {
        let empty = TensorShape {
            rows: 0.0,
            cols: 0.0,
            count: 0.0,
            in_weight_dtype: false,
        };
        Shapes {
            items: [empty; 24],
            len: 0,
        }
    }
    /// Adds `count` tensors of `rows` x `cols`.
    fn push(&mut self, rows: Count, cols: Count, count: Count) {
        self.push_shape(rows, cols, count, false);
    }
    /// Adds a copy of a model tensor, kept in the model's weight dtype.
    fn push_copy(&mut self, rows: Count, cols: Count) {
        self.push_shape(rows, cols, 1.0, true);
    }
    fn push_shape(&mut self, rows: Count, cols: Count, count: Count, in_weight_dtype: bool) {
        // At most 8 linears x (weight + bias) + 6 other tensors: 22 < 24.
        if self.len < self.items.len() {
            self.items[self.len] = TensorShape {
                rows,
                cols,
                count,
                in_weight_dtype,
            };
            self.len += 1;
        }
    }
    /// Parameters in all the shapes.
    pub fn params(&self) -> Count {
        self.iter().map(|t| t.rows * t.cols * t.count).sum()
    }
    /// Bytes of all the shapes: `trainable_bytes` per parameter, `weight_bytes` for copies of model tensors.
    pub fn bytes(&self, trainable_bytes: Count, weight_bytes: Count) -> Count {
        self.iter()
            .map(|t| t.rows * t.cols * t.count * t.bytes(trainable_bytes, weight_bytes))
            .sum()
    }
    pub fn iter(&self) -> impl Iterator<Item = &TensorShape> {
        self.items[..self.len].iter()
    }
    /// Bytes per element of the largest one tensor (see [`TensorShape::bytes`]).
    pub fn largest_bytes(&self, trainable_bytes: Count, weight_bytes: Count) -> Count {
        self.iter()
            .fold((0.0, trainable_bytes), |(n, b), t| {
                if t.rows * t.cols > n {
                    (t.rows * t.cols, t.bytes(trainable_bytes, weight_bytes))
                } else {
                    (n, b)
                }
            })
            .1
    }
    /// Elements of the largest one tensor.
    pub fn largest(&self) -> Count {
        self.iter().map(|t| t.rows * t.cols).fold(0.0, Count::max)
    }
}

/// Trainable tensors of the plan.
pub(super) fn trainable_tensors(s: &Setup) -> Shapes {
    let (arch, plan, linears) = (s.arch, s.plan, &s.linears[..]);
    let mut t = Shapes::new();
    match plan.method {
        Method::Full => push_full(&mut t, arch, linears, s.head_tied),
        Method::Lora | Method::Qlora => {
            push_adapters(&mut t, arch, plan, linears);
            push_peft_extras(&mut t, arch, plan);
            push_tokens(&mut t, arch, plan);
        }
    }
    t
}

/// Full fine-tuning: every linear (and bias) of every layer, the layer's other parameters, the embeddings, a
/// head of its own unless `head_tied`, and the final norm.
fn push_full(t: &mut Shapes, arch: &Architecture, linears: &[Linear], head_tied: bool) {
    let layers = arch.layers as Count;
    let (hidden, vocab) = (arch.hidden as Count, arch.vocab as Count);
    for l in linears {
        let copies = l.copies as Count * layers;
        t.push(l.out_features as Count, l.in_features as Count, copies);
        if l.bias {
            t.push(1.0, l.out_features as Count, copies);
        }
    }
    t.push(1.0, arch.layer_other_params() as Count, layers);
    t.push(vocab, hidden, 1.0);
    if arch.learned_positions > 0 {
        t.push(arch.learned_positions as Count, hidden, 1.0);
    }
    if !head_tied {
        t.push(vocab, hidden, 1.0);
    }
    if arch.lm_head_bias {
        t.push(1.0, vocab, 1.0);
    }
    t.push(1.0, arch.final_norm_params() as Count, 1.0);
}

/// What one adapter of the plan's PEFT kind trains on an `inp` x `out` linear, `count` times.
fn push_adapter(
    t: &mut Shapes,
    plan: &Plan,
    inp: Count,
    out: Count,
    count: Count,
    feedforward: bool,
) {
    let r = plan.rank as Count;
    match plan.peft {
        Peft::Ia3 => t.push(1.0, if feedforward { inp } else { out }, count),
        // VeRA trains a rank-wide and an output-wide vector around the shared frozen projections.
        Peft::Vera => {
            t.push(1.0, r, count);
            t.push(1.0, out, count);
        }
        // LoHa: two (A, B) pairs.
        Peft::Loha => {
            t.push(r, inp, 2.0 * count);
            t.push(out, r, 2.0 * count);
        }
        // OFT stores each block's skew-symmetric generator as its strict upper triangle.
        Peft::Oft => {
            let (blocks, b) = oft_blocks(r, inp);
            t.push(1.0, blocks * (b * (b - 1.0) / 2.0), count);
        }
        Peft::Ln | Peft::Prompt | Peft::Prefix => {}
        Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa => {
            if plan.peft != Peft::Lorafa {
                t.push(r, inp, count);
            }
            t.push(out, r, count);
            if plan.peft == Peft::Dora {
                t.push(1.0, out, count);
            }
        }
    }
}

/// The adapters on every adapted linear of every layer, and on the head when it is a target.
fn push_adapters(t: &mut Shapes, arch: &Architecture, plan: &Plan, linears: &[Linear]) {
    let layers = arch.layers as Count;
    let shared_a = parametrized_gate_up(plan, linears);
    for l in linears.iter().filter(|l| adapted(plan, l)) {
        let copies = l.copies as Count * layers;
        if a_shared_with_gate(l, shared_a) {
            // up_proj is the second half of gate_up_proj, whose A the gate half already counted.
            t.push(l.out_features as Count, plan.rank as Count, copies);
            continue;
        }
        let feedforward = l.input == LinearInput::MlpInner;
        push_adapter(
            t,
            plan,
            l.in_features as Count,
            l.out_features as Count,
            copies,
            feedforward,
        );
    }
    if plan.targets.contains(Target::LmHead) {
        push_adapter(
            t,
            plan,
            arch.hidden as Count,
            arch.vocab as Count,
            1.0,
            false,
        );
    }
}

/// LayerNorm tuning's norm weights, and prompt and prefix tuning's virtual tokens.
fn push_peft_extras(t: &mut Shapes, arch: &Architecture, plan: &Plan) {
    let layers = arch.layers as Count;
    if plan.peft == Peft::Ln {
        for (rows, cols, count) in norm_weights(arch) {
            t.push(rows, cols, count);
        }
    }
    match plan.peft {
        // The prompt encoder: one trainable embedding per virtual token.
        Peft::Prompt => t.push(plan.virtual_tokens as Count, arch.hidden as Count, 1.0),
        // A key and a value vector per virtual token and layer (PEFT without the reparametrizing MLP).
        Peft::Prefix => t.push(
            plan.virtual_tokens as Count,
            2.0 * arch.kv_dim() as Count,
            layers,
        ),
        _ => {}
    }
}

/// Every norm's weights as (rows, cols, count): each layer's, and the final norm (PEFT's LN tuning targets them
/// all by default).
fn norm_weights(arch: &Architecture) -> [(Count, Count, Count); 2] {
    let per_norm = match arch.norm {
        Norm::RmsNorm => arch.hidden,
        Norm::LayerNorm => 2 * arch.hidden,
    } as Count;
    [
        (
            1.0,
            per_norm,
            arch.norms_per_layer as Count * arch.layers as Count,
        ),
        (1.0, arch.final_norm_params() as Count, 1.0),
    ]
}

/// Trainable tokens beside an adapter: rows of the embedding, or whole copies of it (and of an untied head).
fn push_tokens(t: &mut Shapes, arch: &Architecture, plan: &Plan) {
    let (hidden, vocab) = (arch.hidden as Count, arch.vocab as Count);
    match plan.tokens {
        TokenTraining::Frozen => {}
        // PEFT keeps a trainable delta for just these rows.
        TokenTraining::Rows(rows) => t.push((rows as Count).min(vocab), hidden, 1.0),
        // modules_to_save: a trainable copy of the embedding (and of an untied head), in the model's dtype.
        TokenTraining::All => {
            t.push_copy(vocab, hidden);
            if !arch.tied_embeddings {
                t.push_copy(vocab, hidden);
            }
        }
    }
}

/// Elements of VeRA's frozen random projections: one A (rank x widest input) and one B (widest output x rank),
/// shared by every adapted matrix and sliced per module.
pub(super) fn vera_projections(arch: &Architecture, plan: &Plan, linears: &[Linear]) -> Count {
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
pub(super) fn oft_blocks(r: Count, inp: Count) -> (Count, Count) {
    let blocks = r.clamp(1.0, inp.max(1.0));
    (blocks, ceil_div(inp, blocks))
}
