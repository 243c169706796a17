//! The step as the caching allocator sees it: the engine's own quantities, emitted as an ordered sequence of
//! allocations and frees ([`Event`]) that [`crate::allocator::replay_steps`] replays.
//!
//! No second formula: every block is a number of the stage structs ([`super::Stages`]) or a share of one, and the
//! sequence passes through each moment of the [`super::timeline`] (the end of forward, backward's moments, the
//! optimizer step) holding exactly what that moment sums, and never more than the largest of them in between:
//! a replay's peak of `requested_bytes` is the engine's `peak_allocated_bytes`, to the byte. What a moment counts
//! is placed where it is counted (the engine's end of forward counts a running matmul's buffers, so they are
//! allocated there once more), and gradients, saved activations and buffers come and go layer by layer.
//! Where a layer's saved tensors go one by one, its forward's transients ([`super::saved::Burst`]) come and go
//! among them: they hold nothing a moment counts, and each is made only while the live bytes stay within the
//! engine's peak, so they change where tensors land, never the peak.
//!
//! # Rounding
//!
//! Counts are `f64` whole numbers almost everywhere; `clamp` turns a figure into bytes by truncation. Each
//! quantity becomes whole bytes the same way (`as u64`: truncated, saturating) before it is split, and a split
//! gives every part the quotient and the last part the remainder, so a quantity's blocks sum to its truncated
//! value exactly. Where a moment's total has a fractional part (a few halves: torchtune's chunked head, a packed
//! 4-bit layer), the truncated parts can fall short of the truncated total by less than one byte per part; at
//! that moment a block of the missing bytes (under 8) is allocated and freed, so the peak is the figure `clamp`
//! reports. Beyond 2^53 bytes (8 PiB) counts round in `f64` and no byte equality is claimed.
//!
//! # Steady state
//!
//! `setup` is what loading leaves resident (weights, quantized layer by layer with the load transient beside
//! the layer being quantized; DDP's buckets; the WebGPU runtime's tables). The optimizer's states (and fp32
//! master weights) are created by the first step, lazily as torch optimizers create them
//! ([`Event::AllocOnce`]), and kept. The engine's phases describe a step that finds them: every moment but the
//! load one counts them, so a replay equals the engine from the second step on (a lone first step peaks lower
//! unless its peak is the optimizer step). The engine's load moment also counts them beside the load transient,
//! which no replay holds at once: a plan whose peak is that moment replays lower by the optimizer's memory. (Under
//! DeepSpeed, `initialize`'s fp32 buffer instead, not replayed either: below the step's states or 6 B copies;
//! its hooks' gather of the largest trainable parameter is replayed at loading, as with CPU offload nothing
//! of the step need exceed it.)
//!
//! # Where a replay exceeds the engine
//!
//! The engine's layers' moment is the first layer of backward (every layer's saved tensors, no new gradient) and
//! its end moment has every gradient and no saved tensor. Made layer by layer, the gradients of the layers already
//! done sit beside the saved tensors of the layers still to do; where a layer's gradients outweigh its saved
//! tensors and something stays per layer that the end moment lacks (the two layers activation offloading keeps on
//! the GPU to the last, a checkpointed layer's recomputed forward, the layers ZeRO-3 gathers in backward where the
//! end moment has only the root unit), the last layers' backward holds more than either moment. Sampled plans
//! with activation offloading, checkpointing or ZeRO-3 are held to at least the engine's peak, not to equality; that excess is a moment the engine does not count yet, not a rounding.

use super::count::Count;
use super::saved::{LayerSaved, MAX_TENSORS};
use super::Phase;
use super::{runs, split_slice, stages, Runs, Stages};
use crate::allocator::{Event, Run};
use crate::arch::Architecture;
use crate::plan::{Method, Plan};

mod load;
mod parts;
mod round;
mod seq;

use parts::{
    blocks_of, coalesce_small, param_index, proportional, split, tensors_of, MAX_LOSS_BLOCKS,
};
use seq::{Bursts, Seq};

/// One training step of a plan as allocations and frees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepEvents {
    /// What loading the model leaves allocated (a transient at load comes and goes).
    pub setup: Vec<Event>,
    /// One training step (every micro-batch and the optimizer step) as runs of events: the first micro-batch,
    /// the middle ones (one run of identical micro-batches, replayed `ga - 2` times), the last with the optimizer
    /// step. So a step of any gradient accumulation is three micro-batches of events, and its replay settles
    /// ([`crate::allocator::Run`]). It frees everything it allocates except the optimizer's states, which it
    /// allocates as [`Event::AllocOnce`]: the first step creates them, later steps find them, so the step can be
    /// replayed any number of times.
    pub step: Vec<Run>,
}

impl StepEvents {
    /// Every event of a step in order, the middle micro-batches written out (`ga` micro-batches' worth).
    pub fn flat_step(&self) -> Vec<Event> {
        let mut all = Vec::new();
        for run in &self.step {
            for _ in 0..run.times {
                all.extend_from_slice(&run.events);
            }
        }
        all
    }

    /// The events held: the setup's and each run's once.
    pub fn len(&self) -> usize {
        self.setup.len() + self.step.iter().map(|r| r.events.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The allocation sequence of `plan` on `arch`, built from the quantities [`super::estimate`] sums (for batches of
/// varying length, one step of the largest).
pub fn allocation_events(arch: &Architecture, plan: &Plan) -> StepEvents {
    // The same runs as `estimate`: the attention transformers actually runs, and a layer split's fullest GPU.
    match runs(arch, plan) {
        Runs::Resolved(resolved) => return allocation_events(arch, &resolved),
        Runs::Split => {
            let (slice, whole) = split_slice(arch, plan);
            return allocation_events(&slice, &whole);
        }
        Runs::AsPlanned => {}
    }
    // Batches of varying length: one step of the largest batch, which is what the engine's figures count.
    if let Some(orders) = super::lengths::batch_orders(arch, plan) {
        let largest = super::lengths::at_shape(plan, super::lengths::largest_of(&orders));
        return allocation_events(arch, &largest);
    }
    let st = stages(arch, plan);
    step_events(&st, usize::MAX).unwrap_or_default()
}

/// The sequence the allocator replay runs first for a plan whose batches vary in length: the longest batch's
/// loading, then one step at each of its first run's batches ([`super::replayed_batches`]), in order. `None` for
/// fixed lengths.
pub fn varying_allocation_events(arch: &Architecture, plan: &Plan) -> Option<StepEvents> {
    varying_allocation_runs(arch, plan)?.into_iter().next()
}

/// Every run the allocator replay runs for a plan whose batches vary in length (reserved memory is the mean of
/// their peaks), each the longest batch's loading and one step at each of its batches. `None` for fixed lengths.
pub fn varying_allocation_runs(arch: &Architecture, plan: &Plan) -> Option<Vec<StepEvents>> {
    match runs(arch, plan) {
        Runs::Resolved(resolved) => return varying_allocation_runs(arch, &resolved),
        Runs::Split => {
            let (slice, whole) = split_slice(arch, plan);
            return varying_allocation_runs(&slice, &whole);
        }
        Runs::AsPlanned => {}
    }
    let orders = super::lengths::batch_orders(arch, plan)?;
    let largest = super::lengths::at_shape(plan, super::lengths::largest_of(&orders));
    let longest = step_events(&stages(arch, &largest), usize::MAX)?;
    orders
        .iter()
        .map(|shapes| super::lengths::varying_events(arch, &largest, &longest, shapes, usize::MAX))
        .collect()
}

/// [`varying_allocation_events`] for batches the caller states, in order, instead of those the plan's length
/// distribution draws: a run as long as a real one, or a dataset's own batches (a traced run's, in the tests).
/// `None` for no batches; a plan whose attention or layer split resolves runs as [`varying_allocation_events`]
/// would run it.
pub fn varying_allocation_events_at(
    arch: &Architecture,
    plan: &Plan,
    shapes: &[super::Shape],
) -> Option<StepEvents> {
    match runs(arch, plan) {
        Runs::Resolved(resolved) => return varying_allocation_events_at(arch, &resolved, shapes),
        Runs::Split => {
            let (slice, whole) = split_slice(arch, plan);
            return varying_allocation_events_at(&slice, &whole, shapes);
        }
        Runs::AsPlanned => {}
    }
    if shapes.is_empty() {
        return None;
    }
    let largest = super::lengths::at_shape(plan, super::lengths::largest(shapes));
    let longest = step_events(&stages(arch, &largest), usize::MAX)?;
    super::lengths::varying_events(arch, &largest, &longest, shapes, usize::MAX)
}

/// The allocation sequence of a plan's stages, or `None` if it holds more than `max_events` events (built no
/// further than that: a model of tens of thousands of layers would take gigabytes).
pub(super) fn step_events(st: &Stages, max_events: usize) -> Option<StepEvents> {
    step_events_as(st, max_events, false)
}

/// [`step_events`] with a full fine-tune's saved tensors apart, as an adapter plan's always are: for the steps
/// of a run whose batches vary in length, where a layer's tensors of one step land in the segments the
/// differently sized tensors of earlier steps left (one block a layer would need a segment of its own whenever
/// a step is longer than any before).
pub(super) fn step_events_by_tensor(st: &Stages, max_events: usize) -> Option<StepEvents> {
    step_events_as(st, max_events, true)
}

fn step_events_as(st: &Stages, max_events: usize, by_tensor: bool) -> Option<StepEvents> {
    if likely_events(st) / 2 > max_events {
        return None;
    }
    let mut b = Builder::with_layers(st, st.setup.arch.layers, by_tensor);
    b.seq.max_events = max_events;
    b.setup();
    let setup = std::mem::take(&mut b.seq.events);
    let step = b.step();
    (!b.seq.over).then_some(StepEvents { setup, step })
}

/// Layers from which [`likely_events`] extrapolates instead of counting: no model built has half as many, so the
/// two extra sequences are built only for configs far from any real one, off every real plan's path.
const COUNTED_LAYERS: u64 = 1024;

/// About how many events the plan's sequence holds, without building it: every layer makes the same events, so
/// the sequences of the same stages cut into 4 and 8 layers tell what a layer adds. An estimate (a layer's parts
/// of the small pool's size gather differently at other depths), used only to skip building what is far past the
/// cap: building to the cap is what a model of a hundred thousand layers would otherwise cost each estimate.
fn likely_events(st: &Stages) -> usize {
    let layers = st.setup.arch.layers;
    if layers <= COUNTED_LAYERS {
        return 0;
    }
    let made = |n: u64| {
        let mut b = Builder::with_layers(st, n, false);
        b.setup();
        b.step();
        b.seq.made as u64
    };
    let (four, eight) = (made(4), made(8));
    let per_layer = eight.saturating_sub(four) / 4;
    let likely = eight.saturating_add(per_layer.saturating_mul(layers - 8));
    usize::try_from(likely).unwrap_or(usize::MAX)
}

/// What a block is: the high half of its tag (`kind << 32 | index`). The numbers are explicit and fixed, so the
/// event lists (their tags included) stay the same when a kind is added or moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
enum Tag {
    Embedding = 1,
    Head = 2,
    LayerWeights = 3,
    QuantConstants = 4,
    Adapters = 5,
    DdpBuckets = 6,
    InputBuffers = 7,
    LoadTransient = 8,
    OptimizerStates = 9,
    MasterWeights = 10,
    OptimizerTemps = 11,
    Gathered = 12,
    Mask = 13,
    PreviousInputs = 14,
    Dequant = 15,
    PeftBuffers = 16,
    Saved = 17,
    Scores = 18,
    WeightCopies = 19,
    Checkpoint = 20,
    KvCache = 21,
    SavedAfterLayers = 22,
    HeadCopies = 23,
    FusedHeadGrad = 24,
    LossForward = 25,
    LossBackward = 26,
    HeldLogits = 27,
    HeadLogitGrads = 28,
    HeadGradShares = 29,
    HeadGrad = 30,
    GradFlow = 31,
    Recompute = 32,
    StepInBackward = 33,
    StepTempsInBackward = 34,
    LayerGrads = 35,
    HeldGrads = 36,
    EndGrads = 37,
    Rounding = 38,
    ReferenceWeights = 39,
    ReferencePass = 40,
    ReloadBuffers = 41,
    ReduceBuckets = 42,
    BackwardBuckets = 43,
    LoadedWhole = 44,
    ReduceCopy = 45,
    FirstPartition = 46,
    VllmShare = 47,
    RoundBuffers = 48,
    GenerationCache = 49,
    GenerationWork = 50,
    GatheredForGeneration = 51,
    Transient = 52,
}

/// The tag of `kind`'s block `index`.
fn tag(kind: Tag, index: u64) -> u64 {
    (kind as u64) << 32 | index
}

/// A count as whole bytes, as `clamp` makes it (truncated; negative and NaN to 0, saturating at `u64::MAX`).
fn bytes(v: Count) -> u64 {
    v as u64
}

struct Builder<'s, 'a> {
    st: &'s Stages<'a>,
    seq: Seq,
    layers: u64,
    /// Layers' saved tensors on the GPU at once (two under activation offloading): slots reused in turn.
    slots: u64,
    /// Gradient blocks in the order they were made.
    grads: Vec<u64>,
    /// Gradient blocks made up by [`Builder::grads_to`] so far (each its own tag).
    made_up: u64,
    /// Quantities whose blocks repeat per micro-batch (split once). The saved tensors of a slot's layer: every
    /// slot's share is the same but the last one's, which takes the remainder.
    saved_first: Vec<u64>,
    saved: Vec<u64>,
    /// The transients the first slot's layer and the others make in forward: (kept tensors made before, sizes).
    bursts_first: Vec<Bursts>,
    bursts: Vec<Bursts>,
    /// What a transient may bring the live bytes to: the engine's peak, which it never raises.
    burst_cap: u64,
    saved_last: Vec<u64>,
    /// A checkpointed layer's recompute in backward: tensor by tensor then the rest where lengths vary, else one
    /// block.
    recompute: Vec<u64>,
    /// Each parameter's share of a layer's gradients, states and temporaries, where they go apart (else empty:
    /// a block a layer).
    param_sizes: Vec<Count>,
    scores: Vec<u64>,
    copies: Vec<u64>,
    checkpoints: Vec<u64>,
}

/// What becomes of a slot's saved tensors.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Made by the layer's forward, its transients among them.
    Made,
    /// Brought back for backward (activation offloading): no transients.
    Reloaded,
    Freed,
}

fn total(live: &[Count; 5]) -> Count {
    live.iter().sum()
}

impl<'s, 'a> Builder<'s, 'a> {
    /// The stages' sequence as if the model had `layers` layers (its totals split among them).
    fn with_layers(st: &'s Stages<'a>, layers: u64, full_by_tensor: bool) -> Self {
        let layers = layers.max(1);
        let a = &st.acts;
        let slots = (a.kept_layers as u64).clamp(1, layers);
        // The mask is one per forward; the rest of the scores is the layers'.
        let scores_in_layers = if st.setup.plan.checkpointing.on() {
            0.0
        } else {
            a.scores - a.mask
        };
        // An adapter plan's layers keep their saved tensors apart: CPU traces of real LoRA and QLoRA sequences
        // strand what the engine's replay strands that way (`tests/core/sequences.rs`). A full fine-tune's
        // gradients take the place of its saved tensors in backward, and its optimizer's temporaries theirs in the
        // next step, so both go at one granularity: a block a layer. Tensor by tensor (saved tensors, gradients,
        // states and temporaries parameter by parameter) its traces replay no closer (a mean of 1.8% against 1.6%)
        // for five times the events; saved tensors apart beside gradients in blocks put PEFT's measured full
        // fine-tune 19% over (2% under as it is).
        let by_tensor = full_by_tensor || st.setup.plan.method != Method::Full;
        let tensors = |share: u64, layer: &LayerSaved| {
            if by_tensor {
                tensors_of(share, layer.tensors.sizes())
            } else {
                vec![share]
            }
        };
        // Where every layer has a slot, the first keeps its own tensors (fewer where its input needs no gradient)
        // and the others a whole layer's each, at their sizes: scaled to an even share, every tensor would be a
        // little smaller than the one the allocator is asked for, and land in segments of other sizes.
        let mut shares = split(a.saved_in_layers, slots);
        let exact = slots > 1 && slots as Count == a.kept_layers && a.saved_in_layers > 0.0;
        if exact {
            let total = bytes(a.saved_in_layers);
            let (first, whole) = (bytes(a.first_layer.bytes), bytes(a.layer.bytes));
            let last = total.saturating_sub(first.saturating_add(whole.saturating_mul(slots - 2)));
            shares = vec![first, whole, last];
        }
        let first_sizes = if exact || slots == 1 {
            &a.first_layer
        } else {
            &a.layer
        };
        let saved_first = tensors(shares[0], first_sizes);
        let saved = if exact {
            tensors(shares[1], &a.layer)
        } else {
            saved_first.clone()
        };
        let saved_last = tensors(
            shares[shares.len() - 1],
            if slots == 1 { first_sizes } else { &a.layer },
        );
        // The transients a layer's forward makes among its kept tensors, where those go one by one.
        let kept_apart = by_tensor && a.saved_in_layers > 0.0;
        let bursts = |layer: &LayerSaved| -> Vec<Bursts> {
            let each = layer.tensors.bursts().iter().filter(|_| kept_apart);
            each.map(|b| (b.after, b.sizes.iter().map(|&v| bytes(v)).collect()))
                .collect()
        };
        // Apart, a full fine-tune's gradients, optimizer states and step temporaries go parameter by parameter,
        // as torch makes them: a layer's linears (each with its bias, its copies as one) and its norms.
        let param_sizes: Vec<Count> = if full_by_tensor && st.setup.plan.method == Method::Full {
            let mut sizes: Vec<Count> = st
                .setup
                .linears
                .iter()
                .map(|l| (l.weight_params() + l.bias_params()) as Count)
                .collect();
            sizes.push(st.setup.arch.layer_other_params() as Count);
            sizes
        } else {
            Vec::new()
        };
        // Checkpointed, backward recomputes each layer's tensors. Where batch lengths vary they are made tensor by
        // tensor (the recompute's rest, scores, mask and weight copies, one block after them; a varying plan's
        // steps are built `full_by_tensor`): the longest batch's tensors then land in the segments shorter
        // batches' logits left, as the traces show. At a fixed length the recompute is one block, which its traces
        // replay closer.
        let recomputed = bytes(st.work.backward_work - st.work.grad_flow);
        let layer_bytes = bytes(a.layer.bytes);
        let recompute_apart =
            st.setup.plan.checkpointing.on() && full_by_tensor && layer_bytes <= recomputed;
        let mut recompute = if recompute_apart {
            tensors_of(layer_bytes, a.layer.tensors.sizes())
        } else {
            Vec::new()
        };
        let apart: u64 = recompute.iter().sum();
        recompute.push(recomputed - apart);
        Builder {
            recompute,
            bursts_first: bursts(first_sizes),
            bursts: bursts(&a.layer),
            burst_cap: bytes(st.timeline.peak),
            param_sizes,
            st,
            seq: Seq::default(),
            layers,
            slots,
            grads: Vec::new(),
            made_up: 0,
            saved_first,
            saved,
            saved_last,
            scores: split(scores_in_layers, slots),
            copies: split(a.layer_weight_copies, slots),
            checkpoints: split(a.checkpoints, slots),
        }
    }

    /// The optimizer's states, as the steady-state step finds them. A torch optimizer keeps them per parameter,
    /// made at its first step parameter by parameter: a block a layer here, as the layers' weights and gradients.
    fn states(&mut self) {
        let r = &self.st.resident;
        let optimizer = [
            (Tag::OptimizerStates, r.optimizer_states),
            (Tag::MasterWeights, r.master_weights),
        ];
        for (kind, v) in optimizer {
            for (i, part) in self.by_parameter(v).into_iter().enumerate() {
                if part > 0 {
                    self.seq.push(Event::AllocOnce {
                        tag: tag(kind, i as u64),
                        bytes: part,
                    });
                }
            }
        }
    }

    /// The whole model's `total` of states or temporaries as its blocks: a block a layer, or, apart, one a
    /// parameter in the model's order (the embedding, each layer's, the final norm and an untied head).
    fn by_parameter(&self, total: Count) -> Vec<u64> {
        if self.param_sizes.is_empty() {
            return split(total, self.layers);
        }
        let arch = self.st.setup.arch;
        let mut sizes = vec![arch.embedding_params() as Count];
        for _ in 0..self.layers {
            sizes.extend_from_slice(&self.param_sizes);
        }
        sizes.push(arch.final_norm_params() as Count);
        sizes.push(arch.lm_head_params() as Count);
        tensors_of(bytes(total), &sizes)
    }

    /// The layers' gradients (all but the head's) as the blocks each layer's backward makes, last layer first:
    /// an even share a layer, or, apart, each layer's parameters' with the embedding's and the final norm's
    /// last, as the embedding's backward ends the pass.
    fn layer_grad_blocks(&self, total: Count) -> Vec<Vec<u64>> {
        if self.param_sizes.is_empty() {
            return split(total, self.layers)
                .into_iter()
                .map(|g| vec![g])
                .collect();
        }
        let arch = self.st.setup.arch;
        let mut sizes = Vec::new();
        for _ in 0..self.layers {
            sizes.extend_from_slice(&self.param_sizes);
        }
        sizes.push((arch.embedding_params() + arch.final_norm_params()) as Count);
        let parts = proportional(bytes(total), &sizes);
        let n = self.param_sizes.len();
        let mut blocks: Vec<Vec<u64>> = parts
            .chunks(n)
            .map(|layer| coalesce_small(layer.to_vec()))
            .collect();
        // The embedding's and final norm's share goes with the first layer, whose backward comes last.
        if blocks.len() as u64 > self.layers {
            if let Some(rest) = blocks.pop() {
                if let Some(first) = blocks.first_mut() {
                    first.extend(rest);
                }
            }
        }
        blocks
    }

    /// The optimizer step's temporaries (a foreach kernel returns one tensor per parameter), made or let go.
    fn step_temps(&mut self, on: bool) {
        let temps = self.by_parameter(self.st.resident.optimizer_temps);
        for (i, part) in temps.into_iter().enumerate() {
            if on {
                self.seq.alloc(tag(Tag::OptimizerTemps, i as u64), part);
            } else {
                self.seq.free(tag(Tag::OptimizerTemps, i as u64));
            }
        }
    }

    /// One step as runs: the first micro-batch, the middle ones (one run: each allocates and frees the same
    /// blocks, since only the first makes the held gradients and only the last reaches the timeline's moments),
    /// and the last with the optimizer step.
    fn step(&mut self) -> Vec<Run> {
        self.steady_state();
        let plan = self.st.setup.plan;
        let ga = plan.grad_accumulation.max(1);
        let mut runs = Vec::with_capacity(3);
        let mut cut = |seq: &mut Seq, times: u64| {
            runs.push(Run {
                events: std::mem::take(&mut seq.events),
                times,
            });
        };
        self.generation_round();
        self.micro_batch(true, ga == 1);
        if ga > 1 {
            cut(&mut self.seq, 1);
        }
        if ga > 2 {
            self.micro_batch(false, false);
            cut(&mut self.seq, ga - 2);
        }
        if ga > 1 {
            self.micro_batch(false, true);
        }
        self.optimizer_step();
        cut(&mut self.seq, 1);
        runs
    }

    /// The steady state a step starts from: the states the first step created are live.
    fn steady_state(&mut self) {
        let r = &self.st.resident;
        self.seq.live = self
            .seq
            .live
            .saturating_add(bytes(r.optimizer_states))
            .saturating_add(bytes(r.master_weights))
            .saturating_add(self.reload_buffers().iter().sum())
            .saturating_add(bytes(self.st.generation.buffered));
    }

    /// The optimizer step: the gradients it reads (DeepSpeed has freed its 16-bit partition for an fp32 copy, one
    /// of the step's temporaries), its states, made at the first step, and its temporaries; then zero_grad and
    /// the loop's held output let go.
    fn optimizer_step(&mut self) {
        let opt = self.st.timeline.phases[Phase::Optimizer as usize];
        self.grads_to(opt[1]);
        if !self.st.setup.plan.optimizer_in_backward {
            self.states();
        }
        self.step_temps(true);
        self.seq.moment(total(&opt));
        self.step_temps(false);
        // zero_grad(set_to_none=True), and the loop lets go of the output it held.
        self.grads_to(0.0);
        self.release_output();
    }

    /// What a loop that keeps the output holds (logits, the key/value cache), let go.
    fn release_output(&mut self) {
        self.seq.free(tag(Tag::HeldLogits, 0));
        for i in 0..self.layers {
            self.seq.free(tag(Tag::KvCache, i));
        }
    }

    /// A running matmul's transient buffers (dequantized weight, PEFT's dense buffers).
    fn buffers(&mut self, on: bool) {
        if on {
            let w = &self.st.work;
            self.seq
                .alloc(tag(Tag::Dequant, 0), bytes(w.dequant_buffer));
            self.seq
                .alloc(tag(Tag::PeftBuffers, 0), bytes(w.peft_buffers));
        } else {
            self.seq.free(tag(Tag::PeftBuffers, 0));
            self.seq.free(tag(Tag::Dequant, 0));
        }
    }

    /// The saved tensors of the layer in `slot`, made, brought back or let go.
    fn kept(&mut self, slot: u64, keep: Keep) {
        let on = keep != Keep::Freed;
        let i = slot as usize;
        let saved = if slot + 1 == self.slots {
            &self.saved_last
        } else if slot == 0 {
            &self.saved_first
        } else {
            &self.saved
        };
        let bursts = match slot {
            _ if keep != Keep::Made => &[][..],
            0 => &self.bursts_first,
            _ => &self.bursts,
        };
        let first = tag(Tag::Saved, slot * MAX_TENSORS as u64);
        if on {
            self.seq.make_among(first, saved, bursts, self.burst_cap);
        } else {
            for j in 0..saved.len() {
                self.seq.free(first + j as u64);
            }
        }
        for (kind, parts) in [
            (Tag::Scores, &self.scores),
            (Tag::WeightCopies, &self.copies),
            (Tag::Checkpoint, &self.checkpoints),
        ] {
            if on {
                self.seq.alloc(tag(kind, slot), parts[i]);
            } else {
                self.seq.free(tag(kind, slot));
            }
        }
    }

    /// A checkpointed layer's recomputed tensors, made or let go.
    fn recompute(&mut self, on: bool) {
        for (k, &part) in self.recompute.iter().enumerate() {
            let t = tag(Tag::Recompute, k as u64);
            if on {
                self.seq.alloc(t, part);
            } else {
                self.seq.free(t);
            }
        }
    }

    fn gathered(&mut self, from: usize, to: usize) {
        // The stage counts what is gathered at each moment as a total (the root unit and the layers in flight):
        // one block a moment.
        let g = self.st.sharded.gathered;
        self.seq.free(tag(Tag::Gathered, from as u64));
        self.seq.alloc(tag(Tag::Gathered, to as u64), bytes(g[to]));
    }

    fn grad(&mut self, kind: Tag, index: u64, v: u64) {
        let t = tag(kind, index);
        self.seq.alloc(t, v);
        if v > 0 {
            self.grads.push(t);
        }
    }

    /// Leaves `target` bytes of gradients: the blocks made first are kept while they fit, the others are freed
    /// (reduced, stepped or set to None), and one block makes up the rest.
    fn grads_to(&mut self, target: Count) {
        let target = bytes(target);
        let mut kept = 0u64;
        let mut keep = Vec::new();
        for t in std::mem::take(&mut self.grads) {
            let size = self.seq.size(t);
            if kept + size <= target {
                kept += size;
                keep.push(t);
            } else {
                self.seq.free(t);
            }
        }
        self.grads = keep;
        if target > kept {
            self.made_up += 1;
            self.grad(Tag::EndGrads, self.made_up, target - kept);
        }
    }

    /// One micro-batch's forward: its gathered weights, masks and kept tensors layer by layer, then the head's
    /// copies and the loss's forward blocks.
    fn forward(&mut self, first: bool, last: bool, persistent: bool) {
        let st = self.st;
        let (a, l, t) = (&st.acts, &st.logits, &st.timeline);
        let (plan, held, head) = (st.setup.plan, &t.held, &t.head);
        // Forward.
        if persistent && first {
            self.grad(Tag::HeldGrads, 0, bytes(held.grads));
        }
        if first {
            for (i, part) in self.reload_buffers().into_iter().enumerate() {
                self.seq.push(Event::AllocOnce {
                    tag: tag(Tag::ReloadBuffers, i as u64),
                    bytes: part,
                });
            }
        }
        self.seq
            .alloc(tag(Tag::Gathered, 0), bytes(st.sharded.gathered[0]));
        if !plan.checkpointing.on() {
            self.seq.alloc(tag(Tag::Mask, 0), bytes(a.mask));
        }
        // The previous micro-batch's kept inputs: the engine counts them at the end of forward only.
        self.seq
            .alloc(tag(Tag::PreviousInputs, 0), bytes(a.previous_inputs));
        let kv = split(l.kv_cache, self.layers);
        for i in 0..self.layers {
            if self.seq.over {
                return;
            }
            self.buffers(true);
            let slot = i % self.slots;
            if i >= self.slots {
                // Activation offloading: the layer two back goes to CPU memory.
                self.kept(slot, Keep::Freed);
            }
            // Checkpointed at varying lengths, the layer's forward makes what its recompute will and keeps none
            // of it: its output, the next checkpoint, is made while those tensors are live.
            let recomputes = self.recompute.len() > 1;
            if recomputes {
                self.recompute(true);
            }
            self.kept(slot, Keep::Made);
            if recomputes {
                self.recompute(false);
            }
            self.seq.alloc(tag(Tag::KvCache, i), kv[i as usize]);
            self.buffers(false);
        }
        self.seq.alloc(
            tag(Tag::SavedAfterLayers, 0),
            bytes(a.saved - a.saved_in_layers),
        );
        self.seq
            .alloc(tag(Tag::HeadCopies, 0), bytes(a.head_copies));
        self.seq
            .alloc(tag(Tag::FusedHeadGrad, 0), bytes(head.fused_grad));
        for (i, b) in blocks_of(l.forward, l.block).into_iter().enumerate() {
            self.seq.alloc(tag(Tag::LossForward, i as u64), b);
        }
        // The engine's end of forward counts a running matmul's buffers.
        self.buffers(true);
        if last {
            self.seq.moment(total(&t.phases[Phase::Forward as usize]));
        }
        // A preference task's reference forward, with what the end of forward holds.
        let reference = &st.reference;
        if reference.pass > 0.0 && !st.setup.plan.task.generates() {
            let moment = last.then(|| total(&t.phases[Phase::Reference as usize]));
            self.reference_pass(moment);
        }
        self.buffers(false);
    }

    /// The reference's forward: its blocks made, the timeline's `moment` reached there (where one is), then let go.
    fn reference_pass(&mut self, moment: Option<Count>) {
        let reference = &self.st.reference;
        let blocks = blocks_of(reference.pass, reference.block);
        for (i, b) in blocks.iter().enumerate() {
            self.seq.alloc(tag(Tag::ReferencePass, i as u64), *b);
        }
        if let Some(m) = moment {
            self.seq.moment(m);
        }
        for i in 0..blocks.len() {
            self.seq.free(tag(Tag::ReferencePass, i as u64));
        }
    }

    /// The loss's backward and the head's: the loop's held output, the loss's blocks, the logits' gradients and
    /// the head's gradient shares.
    fn loss_and_head_backward(&mut self, last: bool) {
        let st = self.st;
        let (l, t) = (&st.logits, &st.timeline);
        let head = &t.head;
        // The loss's backward: the loop's held output (its logits, the key/value cache where it keeps them) and
        // the loss's blocks.
        self.seq.free(tag(Tag::PreviousInputs, 0));
        for i in 0..MAX_LOSS_BLOCKS {
            self.seq.free(tag(Tag::LossForward, i));
        }
        if l.held_kv == 0.0 {
            for i in 0..self.layers {
                self.seq.free(tag(Tag::KvCache, i));
            }
        }
        self.gathered(0, 1);
        let held_logits = l.held_output - l.held_kv;
        self.seq.alloc(tag(Tag::HeldLogits, 0), bytes(held_logits));
        for (i, b) in blocks_of(l.backward - held_logits, l.block)
            .into_iter()
            .enumerate()
        {
            self.seq.alloc(tag(Tag::LossBackward, i as u64), b);
        }
        if last {
            self.seq.moment(total(&t.backward_moments[0]));
        }
        for i in 0..MAX_LOSS_BLOCKS {
            self.seq.free(tag(Tag::LossBackward, i));
        }

        // The head's backward: the logits' gradients and the head's gradient shares.
        if head.grads_live > 0.0 {
            self.seq
                .alloc(tag(Tag::HeadLogitGrads, 0), bytes(head.logits));
            self.seq
                .alloc(tag(Tag::HeadGradShares, 0), bytes(head.grads_live));
            if last {
                self.seq.moment(total(&t.backward_moments[1]));
            }
            self.seq.free(tag(Tag::HeadGradShares, 0));
            self.seq.free(tag(Tag::HeadLogitGrads, 0));
        }
        self.seq.free(tag(Tag::FusedHeadGrad, 0));
        self.grad(Tag::HeadGrad, 0, bytes(head.grad_in_layers));
        self.seq.free(tag(Tag::HeadCopies, 0));
        // DeepSpeed's reduce buckets, made when the first gradient is ready (`process_gradients`).
        self.seq.alloc(
            tag(Tag::BackwardBuckets, 0),
            bytes(st.work.reduce_buckets.in_backward),
        );
    }

    fn micro_batch(&mut self, first: bool, last: bool) {
        let st = self.st;
        let (s, r, w, t) = (&st.setup, &st.resident, &st.work, &st.timeline);
        let plan = s.plan;
        let (held, head) = (&t.held, &t.head);
        let accumulating = plan.grad_accumulation > 1 && !plan.optimizer_in_backward;
        // Gradients the layers' backward makes and keeps: none where each is stepped at once or a persistent
        // partition takes them; the held ones, made by the first micro-batch, when accumulating; else all but
        // the head's, which the head's backward made.
        let persistent = held.grads > 0.0 && !accumulating;
        let layer_grads = if plan.optimizer_in_backward || persistent {
            0.0
        } else if accumulating {
            if first {
                held.grads
            } else {
                0.0
            }
        } else {
            (r.gradients - head.grad_in_layers).max(0.0)
        };
        let layer_grads = self.layer_grad_blocks(layer_grads);

        self.forward(first, last, persistent);
        self.loss_and_head_backward(last);

        // The layers' backward, last layer first: the activations' gradients flow through all of them; each
        // layer recomputes (under checkpointing), runs its buffers and, under optimizer-in-backward, steps, then
        // lets its saved tensors go and keeps its gradients.
        self.gathered(1, 2);
        self.seq.alloc(tag(Tag::GradFlow, 0), bytes(w.grad_flow));
        if plan.optimizer_in_backward {
            self.states();
        }
        for j in (0..self.layers).rev() {
            if self.seq.over {
                return;
            }
            self.recompute(true);
            self.buffers(true);
            self.seq
                .alloc(tag(Tag::StepInBackward, 0), bytes(t.step_in_bwd));
            if last && j + 1 == self.layers {
                self.seq.moment(total(&t.backward_moments[2]));
            }
            self.seq.free(tag(Tag::StepInBackward, 0));
            self.buffers(false);
            self.recompute(false);
            let slot = j % self.slots;
            self.kept(slot, Keep::Freed);
            if j + 1 == self.layers {
                self.seq.free(tag(Tag::SavedAfterLayers, 0));
            }
            if j == 0 {
                self.seq.free(tag(Tag::Mask, 0));
            }
            if j >= self.slots && !s.offloaded_checkpoints {
                // Activation offloading brings the layer `slots` below back into the slot just freed (offloaded
                // checkpoints come back into the reload buffers instead).
                self.kept(slot, Keep::Reloaded);
            }
            for (k, &part) in layer_grads[j as usize].iter().enumerate() {
                self.grad(Tag::LayerGrads, param_index(j, k), part);
            }
        }

        if !last {
            // The head's gradient joins the held ones (or its shard); the next micro-batch's output replaces this
            // one's.
            self.seq.free(tag(Tag::HeadGrad, 0));
            self.grads.retain(|&g| g != tag(Tag::HeadGrad, 0));
            self.seq.free(tag(Tag::GradFlow, 0));
            self.seq.free(tag(Tag::Gathered, 2));
            self.seq.free(tag(Tag::BackwardBuckets, 0));
            self.release_output();
            return;
        }
        // The end of backward: every gradient (a tied embedding's share beside the head's), the buffers of the
        // embedding's matmul, optimizer-in-backward's temporaries.
        self.gathered(2, 3);
        let end = t.backward_moments[3];
        self.grads_to(end[1]);
        self.buffers(true);
        self.seq
            .alloc(tag(Tag::StepTempsInBackward, 0), bytes(t.step_temps_in_bwd));
        self.seq.alloc(
            tag(Tag::ReduceCopy, 0),
            bytes(st.work.reduce_buckets.reduce_copy),
        );
        self.seq.moment(total(&end));
        self.seq.free(tag(Tag::ReduceCopy, 0));
        self.seq.free(tag(Tag::StepTempsInBackward, 0));
        self.buffers(false);
        self.seq.free(tag(Tag::GradFlow, 0));
        self.seq.free(tag(Tag::Gathered, 3));
        self.seq.free(tag(Tag::BackwardBuckets, 0));
    }
}

#[cfg(test)]
mod tests;
