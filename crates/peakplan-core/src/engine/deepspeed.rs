//! DeepSpeed's own buffers, from its source (`deepspeed/runtime/zero/stage_1_and_2.py`, `stage3.py`, 0.19) and
//! CPU traces of its steps on 2 and 4 processes (`tools/trace/ds_cpu.sh`): the gradient reduce buckets, and the
//! sub-groups ZeRO-3's optimizer steps its partition in.

use super::coordinator::{self, Event, Gathered, Limits, Moment, Param, Trace};
use super::count::{ceil_div, Count};
use super::setup::adapted;
use super::setup::Setup;
use crate::arch::{Linear, LinearInput};
use crate::plan::{Method, Peft, Shard};
use std::cell::RefCell;

/// DeepSpeed's reduce buckets: with `contiguous_gradients` each gradient is copied into a flat bucket of
/// `reduce_bucket_size` elements in the 16-bit dtype, reduced when full. ZeRO-1 and 2 make the bucket when backward's first
/// gradient is ready (the head's) and free it at its end, two under `overlap_comm` so that one fills while the other is reduced
/// (`setup_buckets`, `_release_ipg_buffers`); ZeRO-3 makes one at initialize and keeps it. Its full size whatever
/// the trainable parameters (a LoRA step's bucket is mostly empty).
#[derive(Clone, Copy, Default)]
pub(super) struct ReduceBuckets {
    /// Made at initialize and kept (ZeRO-3).
    pub resident: Count,
    /// Live through each backward (ZeRO-1 and 2).
    pub in_backward: Count,
    /// What a reduction copies out of the bucket, live beside it: the filled bucket, at most its size in 16-bit
    /// elements (traced: the end of backward's reduction with every gradient in the bucket, a copy of all of them).
    pub reduce_copy: Count,
    /// Every gradient fits one bucket: none has been reduced into the gradient partition before the end of
    /// backward, they all live in the bucket.
    pub grads_in_bucket: bool,
}

pub(super) fn reduce_buckets(s: &Setup, trainable: Count) -> ReduceBuckets {
    if s.sharding.shard != Shard::Deepspeed || s.zero == 0 || !s.d.deepspeed_16bit {
        return ReduceBuckets::default();
    }
    let sizes = s.plan.deepspeed_sizes(s.arch);
    if !sizes.contiguous_gradients {
        return ReduceBuckets::default();
    }
    let bucket = sizes.reduce_bucket as Count * s.d.weight;
    if s.zero >= 3 {
        ReduceBuckets {
            resident: bucket,
            ..ReduceBuckets::default()
        }
    } else {
        ReduceBuckets {
            resident: 0.0,
            in_backward: bucket * if sizes.overlap_comm { 2.0 } else { 1.0 },
            reduce_copy: s.d.weight * trainable.min(sizes.reduce_bucket as Count),
            grads_in_bucket: trainable <= sizes.reduce_bucket as Count,
        }
    }
}

/// The trainable tensors' elements in the order DeepSpeed flattens them (the model's `parameters()`): a full
/// fine-tune's embedding, each layer's linears (weight, bias) and norms, the final norm and the head; LoRA's A and
/// B of each adapted linear, layer by layer. `None` for other trainable sets (their tensors are small, and the
/// callers bound what the order would tell).
fn in_model_order(s: &Setup, trainable: Count) -> Option<Vec<u64>> {
    let (arch, plan) = (s.arch, s.plan);
    let mut order = Vec::new();
    let mut push = |numel: u64| {
        if numel > 0 {
            order.push(numel);
        }
    };
    match plan.method {
        Method::Full => {
            push(arch.embedding_params());
            for _ in 0..arch.layers {
                for l in s.linears.iter() {
                    push(l.weight_params());
                    push(l.bias_params());
                }
                push(arch.layer_other_params());
            }
            push(arch.final_norm_params());
            push(arch.lm_head_params());
        }
        Method::Lora | Method::Qlora if plan.peft == Peft::Lora => {
            for _ in 0..arch.layers {
                for l in s.linears.iter().filter(|l| adapted(plan, l)) {
                    push(plan.rank * l.in_features * l.copies);
                    push(plan.rank * l.out_features * l.copies);
                }
            }
        }
        _ => return None,
    }
    // Only where the walk is the whole trainable set (no trainable tokens, saved modules or the like).
    (order.iter().sum::<u64>() as Count == trainable).then_some(order)
}

/// The gradients ZeRO-1 and 2 hold for the optimizer step, in elements: each GPU's gradient partition is made
/// of whole parameters (`params_in_partition`: every parameter that reaches into the GPU's share of the flat
/// group, `grads_in_partition`), the largest such set over the GPUs.
pub(super) fn gradient_partition(s: &Setup, trainable: Count) -> Count {
    let share = ceil_div(trainable, s.gpus);
    let Some(order) = in_model_order(s, trainable) else {
        return share;
    };
    let gpus = s.gpus as usize;
    let mut per_gpu = vec![0.0; gpus];
    let mut start: Count = 0.0;
    for numel in order {
        let end = start + numel as Count;
        let first = (start / share) as usize;
        let last = (((end - 1.0) / share) as usize).min(gpus - 1);
        for held in &mut per_gpu[first.min(gpus - 1)..=last] {
            *held += numel as Count;
        }
        start = end;
    }
    per_gpu.into_iter().fold(0.0, Count::max)
}

/// Elements of the largest sub-group ZeRO-3's optimizer steps at once. Its step makes an fp32 copy of a sub-group's
/// 16-bit gradients, steps it and drops it before the next (`_prepare_sub_group`, `_release_sub_group`), where
/// ZeRO-1 and 2 copy the whole partition. Sub-groups take the trainable parameters' partitions in the model's
/// order, each closed once it reaches `sub_group_size` (`_create_fp16_sub_groups`).
pub(super) fn largest_sub_group(s: &Setup, trainable: Count, partition: Count) -> Count {
    let sub = s.plan.deepspeed_sizes(s.arch).sub_group as Count;
    if sub >= partition {
        return partition;
    }
    let share = |numel: u64| ceil_div(numel as Count, s.gpus);
    let Some(order) = in_model_order(s, trainable) else {
        return partition;
    };
    let (mut largest, mut open) = (0.0, 0.0);
    for numel in order {
        open += share(numel);
        if open >= sub {
            largest = Count::max(largest, open);
            open = 0.0;
        }
    }
    Count::max(largest, open).min(partition)
}

/// What DeepSpeed's `initialize` makes beside the partitions and master weights it keeps, at its two largest
/// moments. It makes no optimizer states (AdamW makes them at its first step; DeepSpeed builds Adagrad's only):
/// `initialize_optimizer_states` points each fp32 partition's gradient at an fp32 buffer, the largest sub-group's
/// under ZeRO-3 (one buffer narrowed for each), every group's partition under ZeRO-1 and 2, and drops it; ZeRO-3 then
/// makes its kept 16-bit gradient partitions and gathers each trainable parameter whole, one at a time, to hook its
/// gradient (`create_reduce_and_remove_grad_hooks`). Traced: loading a full fine-tune under ZeRO-3 peaks with the
/// fp32 buffer, with `zero.Init` or without (179,658,373 B at one layer: the 16-bit and fp32 partitions and the
/// buffer, to 133 B). Offloaded, the buffer and the gradient partitions are on the CPU (`self.device`).
///
/// Not counted: ZeRO-1 and 2 flatten each parameter group on the GPU beside its parameters only where the card
/// has room for the copy, else on the CPU (`flatten_on_accelerator`), so that copy never decides whether a plan
/// fits.
#[derive(Clone, Copy, Default)]
pub(super) struct Initialize {
    /// The fp32 gradient buffer `initialize_optimizer_states` makes and drops.
    pub fp32_grad_bytes: Count,
    /// ZeRO-3's largest trainable parameter, gathered whole beside the kept gradient partitions.
    pub hook_gather_bytes: Count,
}

/// [`Initialize`] for `trainable` elements whose largest tensor has `largest_tensor` elements.
pub(super) fn initialize(s: &Setup, trainable: Count, largest_tensor: Count) -> Initialize {
    if !s.d.deepspeed_16bit || s.zero == 0 {
        return Initialize::default();
    }
    Initialize {
        fp32_grad_bytes: if s.plan.cpu_offload {
            0.0
        } else {
            4.0 * stepped_at_once(s, trainable)
        },
        hook_gather_bytes: if s.zero >= 3 {
            s.d.weight * largest_tensor
        } else {
            0.0
        },
    }
}

/// Elements of this GPU's share of `trainable` that DeepSpeed's optimizer handles at once: ZeRO-3 a sub-group
/// ([`largest_sub_group`]), ZeRO-1 and 2 the whole partition.
pub(super) fn stepped_at_once(s: &Setup, trainable: Count) -> Count {
    let partition = s.shard_optimizer(trainable);
    if s.zero >= 3 {
        largest_sub_group(s, trainable, partition)
    } else {
        partition
    }
}

/// What ZeRO-3 holds gathered at the moments the timeline weighs: its parameter coordinator replayed over the
/// step's module trace ([`coordinator`]). Modules are gathered when they run and prefetched ahead of it, in the
/// trace's order, `stage3_prefetch_bucket_size` elements at a fetch within `stage3_max_live_parameters`; a module
/// is released after it runs unless it runs again within `stage3_max_reuse_distance` elements or the prefetcher
/// has walked past its next use. Parameters of at most `stage3_param_persistence_threshold` elements are never
/// released (norms, small adapters).
pub(super) struct Zero3Gathered {
    /// What the coordinator holds at the end of forward, the loss, the last layer's backward and the end.
    pub moments: Gathered,
    /// Persistent parameters' whole copies, beyond their shards: gathered at every moment.
    pub persistent: Count,
}

/// `layer_bytes` is one decoder layer gathered (in the dtype it computes in), `root_bytes` the bytes of an
/// embedding or head element.
pub(super) fn zero3_gathered(s: &Setup, layer_bytes: Count, root_bytes: Count) -> Zero3Gathered {
    let sizes = s.plan.deepspeed_sizes(s.arch);
    let limits = Limits {
        prefetch_bucket: sizes.prefetch_bucket as Count,
        max_live: sizes.max_live as Count,
        max_reuse: sizes.max_reuse as Count,
    };
    let persist = sizes.persistence as Count;
    let key = trace_key(s, layer_bytes, root_bytes, persist, limits);
    let cached = LAST_TRACE.with_borrow(|last| {
        last.iter()
            .find(|(k, _, _)| *k == key)
            .map(|&(_, g, p)| (g, p))
    });
    let (g, persistent_bytes) = cached.unwrap_or_else(|| {
        let mut t = TraceBuilder {
            trace: Trace::default(),
            persist,
            persistent_bytes: 0.0,
        };
        t.model(s, layer_bytes, root_bytes);
        let answer = (coordinator::replay(&t.trace, limits), t.persistent_bytes);
        LAST_TRACE.with_borrow_mut(|last| {
            last.truncate(TRACES_KEPT - 1);
            last.insert(0, (key, answer.0, answer.1));
        });
        answer
    });
    // A persistent parameter, once gathered, is never released: its whole copy stays beside its partition
    // (`ds_tensor`, counted in the shards), so what it adds does not shrink with more GPUs.
    // (Offloaded shards wait in CPU memory: what persists there is not modelled.)
    let persistent = if s.plan.cpu_offload {
        0.0
    } else {
        persistent_bytes
    };
    Zero3Gathered {
        moments: g,
        persistent,
    }
}

/// Module traces' answers kept: the page estimates three methods at once, beside the plan an advisor card makes.
const TRACES_KEPT: usize = 4;

thread_local! {
    /// The latest module traces' answers and their keys, newest first: a search (the largest batch, the longest
    /// sequence) and the GPU table change the batch, the sequence, the GPU or their count, none of which the
    /// trace reads, so their estimates replay it once (a 70B LoRA trace is about 13,000 events).
    static LAST_TRACE: RefCell<Vec<(Vec<u64>, Gathered, Count)>> = const { RefCell::new(Vec::new()) };
}

/// Everything [`TraceBuilder`] and the replay read, exactly: the key of [`LAST_TRACE`].
fn trace_key(
    s: &Setup,
    layer_bytes: Count,
    root_bytes: Count,
    persist: Count,
    l: Limits,
) -> Vec<u64> {
    let (arch, plan) = (s.arch, s.plan);
    let mut key = vec![
        layer_bytes.to_bits(),
        root_bytes.to_bits(),
        persist.to_bits(),
        s.d.adapter.to_bits(),
        l.prefetch_bucket.to_bits(),
        l.max_live.to_bits(),
        l.max_reuse.to_bits(),
        plan.method as u64,
        plan.peft as u64,
        if plan.method == Method::Full {
            0
        } else {
            plan.rank
        },
        arch.layers,
        arch.layer_params(),
        arch.layer_other_params(),
        arch.norms_per_layer,
        arch.embedding_params(),
        arch.final_norm_params(),
        arch.lm_head_params(),
        u64::from(arch.tied_embeddings),
    ];
    for l in s.linears.iter() {
        key.extend([
            l.weight_params() + l.bias_params(),
            l.in_features,
            l.out_features,
            l.copies,
            u64::from(adapted(plan, l)),
            l.input as u64,
        ]);
    }
    key
}

/// How backward meets a hooked module: not at all (nothing of its output needs a gradient), fetched (its
/// pre-backward hook) but released only with the leftovers (its inputs need no gradient, so its post-backward
/// hook never runs), or fetched and released.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backward {
    Skipped,
    Fetched,
    Released,
}

impl Backward {
    /// A module whose output needs a gradient when `output`, and whose input does when `input`.
    fn of(output: bool, input: bool) -> Backward {
        match (output, input) {
            (false, _) => Backward::Skipped,
            (true, false) => Backward::Fetched,
            (true, true) => Backward::Released,
        }
    }
}

/// A module DeepSpeed hooks (containers too: each fetch prefetches), in the model's tree.
struct Node {
    id: usize,
    children: Vec<Node>,
    backward: Backward,
    /// The last decoder layer: its backward's fetches are the layers' moments.
    last_layer: bool,
}

/// Builds the module trace of a Hugging Face causal LM (PEFT's two wrappers around it for adapters): its tree,
/// then forward's events, then backward's in reverse, as the coordinator's log shows them.
struct TraceBuilder {
    trace: Trace,
    persist: Count,
    persistent_bytes: Count,
}

impl TraceBuilder {
    /// A parameter of `numel` elements (made of `parts` equal tensors), or `None` where it persists.
    fn param(&mut self, numel: u64, bytes_each: Count, parts: u64) -> Option<usize> {
        let numel = numel as Count;
        if numel == 0.0 {
            return None;
        }
        if numel / parts.max(1) as Count <= self.persist {
            self.persistent_bytes += numel * bytes_each;
            return None;
        }
        self.trace.params.push(Param {
            numel,
            bytes: numel * bytes_each,
        });
        Some(self.trace.params.len() - 1)
    }

    fn node(&mut self, param: Option<usize>, children: Vec<Node>, backward: Backward) -> Node {
        self.trace.modules.push(param);
        Node {
            id: self.trace.modules.len() - 1,
            children,
            backward,
            last_layer: false,
        }
    }

    fn model(&mut self, s: &Setup, layer_bytes: Count, root_bytes: Count) {
        let (arch, plan) = (s.arch, s.plan);
        let full = plan.method == Method::Full;
        let per_param = layer_bytes / (arch.layer_params() as Count).max(1.0);
        let embedding = self.param(arch.embedding_params(), root_bytes, 1);
        let embed = self.node(embedding, vec![], Backward::of(full, false));
        let rotary = self.node(None, vec![], Backward::Skipped);
        let mut children = vec![embed, rotary];
        // Whether the residual stream entering a layer needs a gradient: from the embedding on in a full
        // fine-tune, from the first layer with a trainable module on otherwise.
        let mut grad = full;
        for i in 0..arch.layers {
            let (mut layer, out) = self.layer(s, per_param, grad);
            layer.last_layer = i + 1 == arch.layers;
            children.push(layer);
            grad = out;
        }
        let norm = self.param(arch.final_norm_params(), root_bytes, 1);
        children.push(self.node(norm, vec![], Backward::of(grad, grad)));
        let model = self.node(None, children, Backward::of(grad, false));
        // A tied head is the embedding's own parameter, fetched again.
        let head_param = if arch.tied_embeddings && arch.lm_head_params() == 0 {
            embedding
        } else {
            self.param(arch.lm_head_params(), root_bytes, 1)
        };
        let head = self.node(head_param, vec![], Backward::of(grad, grad));
        // The root (PEFT's model and its LoRA model around the causal LM for adapters): fetched first in
        // backward, never released there (their input is the token ids).
        let wrappers = if full { 1 } else { 3 };
        let roots: Vec<usize> = (0..wrappers)
            .map(|_| self.node(None, vec![], Backward::Fetched).id)
            .collect();
        let ev = &mut self.trace.events;
        // Forward and backward fetch and release each module at most once, and the layers' moments follow the
        // last layer's fetches.
        ev.reserve(5 * self.trace.modules.len() + 8);
        ev.extend(roots.iter().map(|&r| Event::Fetch(r)));
        forward(&model, ev);
        forward(&head, ev);
        ev.extend(roots.iter().rev().map(|&r| Event::Release(r)));
        ev.push(Event::Mark(Moment::Forward));
        ev.extend(roots.iter().map(|&r| Event::Fetch(r)));
        ev.push(Event::Mark(Moment::Loss));
        backward(&head, ev, false);
        backward(&model, ev, false);
        ev.push(Event::Mark(Moment::End));
    }

    /// One decoder layer: its norms, the attention's and the MLP's linears (LoRA's wrapped in PEFT's module:
    /// the base layer, dropout, A and B), each container a module of its own. Returns the layer and whether
    /// its output needs a gradient.
    fn layer(&mut self, s: &Setup, per_param: Count, grad_in: bool) -> (Node, bool) {
        let (arch, plan) = (s.arch, s.plan);
        let full = plan.method == Method::Full;
        let norms = self.param(
            arch.layer_other_params(),
            per_param,
            arch.norms_per_layer.max(1),
        );
        let norm = self.node(norms, vec![], Backward::of(grad_in || full, grad_in));
        let (mut attention, mut mlp) = (Vec::new(), Vec::new());
        let (mut attn_grad, mut inner_grad) = (false, false);
        for l in s.linears.iter() {
            let input = match l.input {
                LinearInput::AttnNorm => grad_in,
                LinearInput::AttnOut => grad_in || attn_grad,
                LinearInput::MlpNorm => grad_in || attn_grad,
                LinearInput::MlpInner | LinearInput::SharedInner => {
                    grad_in || attn_grad || inner_grad
                }
            };
            let (node, out) = self.linear(s, l, per_param, input);
            match l.input {
                LinearInput::AttnNorm | LinearInput::AttnOut => {
                    attn_grad |= out;
                    attention.push(node);
                }
                LinearInput::MlpNorm => {
                    inner_grad |= out;
                    mlp.push(node);
                    if mlp.len() == 1 {
                        let act = self.node(None, vec![], Backward::of(out, input));
                        mlp.push(act);
                    }
                }
                LinearInput::MlpInner | LinearInput::SharedInner => {
                    inner_grad |= out;
                    mlp.push(node);
                }
            }
        }
        let attention = self.node(None, attention, Backward::of(attn_grad, grad_in));
        let mlp_in = grad_in || attn_grad;
        let out = mlp_in || inner_grad;
        let mlp = self.node(None, mlp, Backward::of(inner_grad, mlp_in));
        let layer = self.node(None, vec![norm, attention, mlp], Backward::of(out, grad_in));
        (layer, out)
    }

    /// A linear module (and PEFT's LoRA wrapper around it), and whether its output needs a gradient.
    fn linear(&mut self, s: &Setup, l: &Linear, per_param: Count, input: bool) -> (Node, bool) {
        let plan = s.plan;
        let full = plan.method == Method::Full;
        let weight = self.param(l.weight_params() + l.bias_params(), per_param, 1);
        let low_rank = matches!(
            plan.peft,
            Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa
        );
        if !(adapted(plan, l) && low_rank) || full {
            let out = input || full || adapted(plan, l);
            return (self.node(weight, vec![], Backward::of(out, input)), out);
        }
        let base = self.node(weight, vec![], Backward::of(input, input));
        let dropout = self.node(None, vec![], Backward::of(input, input));
        let a = self.param(plan.rank * l.in_features * l.copies, s.d.adapter, 1);
        let a = self.node(a, vec![], Backward::of(true, input));
        let b = self.param(plan.rank * l.out_features * l.copies, s.d.adapter, 1);
        let b = self.node(b, vec![], Backward::Released);
        (
            self.node(None, vec![base, dropout, a, b], Backward::of(true, input)),
            true,
        )
    }
}

/// A module's forward: its fetch, its children's forward, its release.
fn forward(n: &Node, ev: &mut Vec<Event>) {
    ev.push(Event::Fetch(n.id));
    for c in &n.children {
        forward(c, ev);
    }
    ev.push(Event::Release(n.id));
}

/// A module's backward: its fetch, its children's backward in reverse, its release where its post-backward hook
/// runs; inside the last layer (`mark`), the layers' moment after each fetch.
fn backward(n: &Node, ev: &mut Vec<Event>, mark: bool) {
    let mark = mark || n.last_layer;
    if n.backward != Backward::Skipped {
        ev.push(Event::Fetch(n.id));
        if mark {
            ev.push(Event::Mark(Moment::Layers));
        }
    }
    for c in n.children.iter().rev() {
        backward(c, ev, mark);
    }
    if n.backward == Backward::Released {
        ev.push(Event::Release(n.id));
    }
}
