//! The accounting engine: the memory of one training step, component by component, and its peak over the phases.
//!
//! Every figure that the page, the CLI, the chart and the WebGPU comparison show comes from [`estimate`], a
//! pipeline of stages, each a function in its own module that takes and returns plain structs:
//! [`setup`] (the framework's profile, dtypes, linears, tokens, sharding) → [`resident`] (weights, adapters,
//! gradients, optimizer) → [`activations`] and [`logits`] (what forward keeps for backward) → [`working`]
//! (backward's working memory and transient buffers) → [`timeline`] (the phases and the peak) → [`reserved`]
//! (allocator cache and device). [`result`] holds the public boundary. Arithmetic is done in [`count::Count`] (an
//! `f64` holding whole numbers) and saturates at `u64::MAX` on output, so absurd plans report "beyond arithmetic"
//! instead of wrapping.

mod activations;
mod coordinator;
mod count;
mod deepspeed;
mod events;
mod generation;
mod lengths;
mod logits;
mod picture;
mod reference;
mod reserved;
mod resident;
mod result;
mod saved;
mod setup;
mod sharding;
mod timeline;
mod trainable;
mod working;

pub use events::{
    allocation_events, varying_allocation_events, varying_allocation_events_at,
    varying_allocation_runs, StepEvents,
};
pub use lengths::Shape;
pub use picture::segments_at_peak;
pub use reserved::{Replayed, CUDA_CONTEXT_BYTES, MAX_REPLAYED_EVENTS};
pub use result::{Category, Estimate, Kind, Phase, PhaseMemory};

use crate::arch::Architecture;
use crate::plan::{Attn, Loss, Plan};
use crate::profile::{FusedLoss, Profile};
use count::{clamp, Count};
use reserved::{Replays, Transients};

/// The attention `transformers` runs when asked for `attn`: it has no SDPA path for attention sinks (gpt-oss
/// declares `_supports_sdpa = False`), so such a model runs eager attention unless a flash kernel that takes sinks
/// is chosen.
pub(crate) fn hf_attention(arch: &Architecture, attn: Attn) -> Attn {
    if arch.attn_sinks && attn == Attn::Sdpa {
        Attn::Eager
    } else {
        attn
    }
}

/// How a plan runs, decided once for [`estimate`] and [`allocation_events`].
enum Runs {
    /// With the attention transformers actually runs in place of the planned one.
    Resolved(Plan),
    /// Layers split over the GPUs: the fullest GPU's slice ([`split_slice`]).
    Split,
    AsPlanned,
}

fn runs(arch: &Architecture, plan: &Plan) -> Runs {
    let hf_attn = hf_attention(arch, plan.attn);
    if Profile::of(plan.framework).sinks_force_eager && hf_attn != plan.attn {
        Runs::Resolved(Plan {
            attn: hf_attn,
            ..plan.clone()
        })
    } else if plan.split_layers && plan.gpus > 1 {
        Runs::Split
    } else {
        Runs::AsPlanned
    }
}

/// The batch of each step of the first run the allocator replays for a plan whose batches vary in length
/// (`lens=padded` or `grouped`), in order: 16 steps drawn from its length distribution with a fixed seed, one of
/// them holding the longest sequence (`lmax`); each `b` sequences padded to their longest, or, where the framework
/// batches padding-free (Unsloth), one row of their real lengths. `None` where every batch is `b` x `s`.
pub fn replayed_batches(arch: &Architecture, plan: &Plan) -> Option<Vec<Shape>> {
    lengths::batch_shapes(arch, plan)
}

/// Every run's batches ([`replayed_batches`] is the first's): reserved memory is the mean of the runs' peaks, and
/// what is allocated is the largest batch of any run's.
pub fn replayed_runs(arch: &Architecture, plan: &Plan) -> Option<Vec<Vec<Shape>>> {
    lengths::batch_orders(arch, plan)
}

/// What a plan needs on a card of `capacity_bytes`, as an answer says it: [`needs_bytes`] where it agrees with the
/// card's own replay (`device_bytes`) on whether the plan fits, else `device_bytes` (a replay on a smaller card can
/// settle where the card's own does not).
pub fn needs_on_card(needs_bytes: u64, device_bytes: u64, capacity_bytes: u64) -> u64 {
    if (needs_bytes <= capacity_bytes) == (device_bytes <= capacity_bytes) {
        needs_bytes
    } else {
        device_bytes
    }
}

/// Computes the memory of one training step of `plan` on `arch`, its reserved memory by replaying the step
/// through the caching-allocator simulator on the plan's GPU ([`reserved`]).
pub fn estimate(arch: &Architecture, plan: &Plan) -> Estimate {
    estimate_on(arch, plan, plan.gpu.preset().capacity_bytes)
}

/// [`estimate`] on a GPU of `capacity_bytes` rather than the plan's own: the capacity decides when the
/// allocator must free its cache and retry.
pub fn estimate_on(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Estimate {
    let by = Reserve::Replay {
        capacity_bytes,
        replays: Replays::Card,
    };
    estimate_by(arch, plan, by, &mut Replayed::default())
}

/// The smallest GPU (as `nvidia-smi` counts it) on which the plan's step runs: near its limit the allocator frees
/// its cache and retries, so a plan over its card needs less than the `device_bytes` a card without limit would
/// show, and a plan with room may run on a smaller card. A replay whose allocator releases its cache before every
/// new segment finds it, confirmed on a device of that size (else a bisection of at most eight replays): a few
/// times an estimate's cost, so it is worked out apart, where the answer is read. Where paged optimizer states
/// or an emptied cache leave no smaller card known to run the step, what the card shows.
pub fn needs_bytes(arch: &Architecture, plan: &Plan) -> u64 {
    let by = Reserve::Replay {
        capacity_bytes: plan.gpu.preset().capacity_bytes,
        replays: Replays::Smallest,
    };
    estimate_by(arch, plan, by, &mut Replayed::default()).device_bytes
}

/// [`needs_bytes`] within what `replayed` allows ([`Replayed::allow`]): the calls for one plan share one
/// `Replayed`, each running only the replays the earlier ones did not, so a page can work the answer out a replay per
/// task. `None` until the allowance covers the last replay; then what [`needs_bytes`] answers.
pub fn needs_bytes_within(
    arch: &Architecture,
    plan: &Plan,
    replayed: &mut Replayed,
) -> Option<u64> {
    let capacity_bytes = plan.gpu.preset().capacity_bytes;
    replayed_within(arch, plan, capacity_bytes, Replays::Smallest, replayed).map(|e| e.device_bytes)
}

/// [`estimate_on`] within what `replayed` allows, as [`needs_bytes_within`].
pub fn estimate_on_within(
    arch: &Architecture,
    plan: &Plan,
    capacity_bytes: u64,
    replayed: &mut Replayed,
) -> Option<Estimate> {
    replayed_within(arch, plan, capacity_bytes, Replays::Card, replayed)
}

/// [`fits_on`] within what `replayed` allows, as [`needs_bytes_within`].
pub fn fits_on_within(
    arch: &Architecture,
    plan: &Plan,
    capacity_bytes: u64,
    replayed: &mut Replayed,
) -> Option<bool> {
    replayed_within(arch, plan, capacity_bytes, Replays::CardOnly, replayed)
        .map(|e| e.device_bytes <= capacity_bytes)
}

/// The estimate with `replays` on a card of `capacity_bytes`, unless `replayed`'s allowance ran out first.
fn replayed_within(
    arch: &Architecture,
    plan: &Plan,
    capacity_bytes: u64,
    replays: Replays,
    replayed: &mut Replayed,
) -> Option<Estimate> {
    let by = Reserve::Replay {
        capacity_bytes,
        replays,
    };
    let e = estimate_by(arch, plan, by, replayed);
    (!replayed.paused).then_some(e)
}

/// [`estimate`] with reserved and device memory by the allocator's rule of thumb instead of a replay: about a
/// hundred times quicker, for searches that weigh many plans and then check their answer with [`estimate`].
/// Allocated memory and every component but the allocator's slack are the same.
pub fn estimate_rough(arch: &Architecture, plan: &Plan) -> Estimate {
    estimate_by(arch, plan, Reserve::Rule, &mut Replayed::default())
}

/// Whether `plan` fits a GPU of `capacity_bytes` (as `nvidia-smi` counts it): the same answer as
/// `estimate_on(arch, plan, capacity_bytes).device_bytes <= capacity_bytes`, from one replay on the card
/// where that may take two. For searches.
pub fn fits_on(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> bool {
    let by = Reserve::Replay {
        capacity_bytes,
        replays: Replays::CardOnly,
    };
    estimate_by(arch, plan, by, &mut Replayed::default()).device_bytes <= capacity_bytes
}

/// How reserved memory is found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reserve {
    /// Replayed on a card of `capacity_bytes`, the replays [`Replays`] names.
    Replay {
        capacity_bytes: u64,
        replays: Replays,
    },
    Rule,
}

/// The plan's estimate, reserved memory as `by` says; `replayed` holds the replays an earlier call for the same
/// plan ran and limits those this one runs (see [`Replayed`]).
fn estimate_by(arch: &Architecture, plan: &Plan, by: Reserve, replayed: &mut Replayed) -> Estimate {
    match runs(arch, plan) {
        Runs::Resolved(resolved) => return estimate_by(arch, &resolved, by, replayed),
        Runs::Split => return estimate_split(arch, plan, by, replayed),
        Runs::AsPlanned => {}
    }
    // Batches that vary in length: everything allocated is the longest batch's; the replay runs a step at each
    // drawn length, in each of several runs.
    let orders = lengths::batch_orders(arch, plan);
    let longest;
    let plan = match &orders {
        Some(o) => {
            longest = lengths::at_shape(plan, lengths::largest_of(o));
            &longest
        }
        None => plan,
    };
    let st = stages(arch, plan);
    let Stages {
        setup,
        resident,
        acts,
        logits,
        work,
        sharded: _,
        reference,
        generation: _,
        timeline,
    } = &st;
    let transients = Transients {
        loss_block: logits.block.max(reference.block),
        buffers: work.dequant_buffer + work.peft_buffers,
        load: work.load_transient,
        scores: acts.layer.scores,
        optimizer_temps: resident.optimizer_temps,
        largest_tensor: resident.largest_tensor,
    };
    let rule = reserved::rule(
        plan.allocator,
        timeline.peak,
        &transients,
        resident.paged_states,
    );
    let reserved = match by {
        Reserve::Rule => rule,
        Reserve::Replay {
            capacity_bytes,
            replays,
        } => reserved::replayed(
            reserved::AllocSettings::of(plan),
            capacity_bytes,
            replays,
            |max_events| {
                let events = events::step_events(&st, max_events)?;
                match &orders {
                    None => Some(vec![events]),
                    Some(o) => o
                        .iter()
                        .map(|s| lengths::varying_events(arch, plan, &events, s, max_events))
                        .collect(),
                }
            },
            timeline.peak,
            resident.paged_states,
            rule,
            replayed,
        ),
    };
    let components = components(&st, &reserved);

    let mut saturated = false;
    let to_phase = |a: timeline::Live, sat: &mut bool| PhaseMemory {
        weights: clamp(a[0], sat),
        gradients: clamp(a[1], sat),
        optimizer: clamp(a[2], sat),
        activations: clamp(a[3], sat),
        other: clamp(a[4], sat),
    };
    Estimate {
        total_params: clamp(setup::total_params(setup), &mut saturated),
        trainable_params: clamp(resident.trainable, &mut saturated),
        components: components.map(|v| clamp(v, &mut saturated)),
        phases: timeline.phases.map(|a| to_phase(a, &mut saturated)),
        peak_phase: Phase::ALL[timeline.peak_phase],
        peak_allocated_bytes: clamp(timeline.peak, &mut saturated),
        peak_reserved_bytes: clamp(reserved.reserved, &mut saturated),
        device_bytes: clamp(reserved.device, &mut saturated),
        host_bytes: clamp(acts.host_checkpoints, &mut saturated),
        saturated,
    }
}

/// The stages' results for one plan that runs as planned (no attention to resolve, no layer split).
struct Stages<'a> {
    setup: setup::Setup<'a>,
    resident: resident::Resident,
    acts: activations::Activations,
    logits: logits::Logits,
    work: working::Working,
    sharded: sharding::Sharded,
    reference: reference::Reference,
    generation: generation::Generation,
    timeline: timeline::Timeline,
}

/// The pipeline up to the timeline: [`estimate`] and [`allocation_events`] read the same structs.
fn stages<'a>(arch: &'a Architecture, plan: &'a Plan) -> Stages<'a> {
    let setup = setup::setup(arch, plan);
    let s = &setup;
    let resident = resident::resident(s);
    let acts = activations::activations(s, &resident);
    let logits = logits::logits(s);
    let work = working::working(s, &resident, &acts);
    let sharded = sharding::sharded(s, &resident);
    let reference = reference::reference(s, &resident);
    let generation = generation::generation(s, &resident);
    let timeline = timeline::timeline(
        s,
        &resident,
        &acts,
        &logits,
        &work,
        &sharded,
        (&reference, &generation),
    );
    Stages {
        setup,
        resident,
        acts,
        logits,
        work,
        sharded,
        reference,
        generation,
        timeline,
    }
}

/// Each component at its largest, indexed like [`Kind::ALL`].
fn components(st: &Stages, reserved: &reserved::Reserved) -> [Count; Kind::COUNT] {
    let (r, a, l, w, sh) = (&st.resident, &st.acts, &st.logits, &st.work, &st.sharded);
    let g = &st.generation;
    // A paired preference task's batch is its chosen and rejected halves: the rejected half's share of what the
    // layers keep is its own component.
    let kept_share = if st.setup.plan.task.paired() {
        0.5
    } else {
        1.0
    };
    // A preference task's loss is TRL's log-probability head (at its largest in the head's backward, where a
    // trainable head's fp32 gradient joins it), not logits; ORPO, CPO and SimPO score the full logits.
    let (logits, log_probs) = if st.setup.loss.is_none() && !st.setup.plan.task.full_logits() {
        (0.0, l.backward.max(st.timeline.head.logits))
    } else {
        (l.forward.max(l.backward), 0.0)
    };
    // Unsloth's fused loss keeps no logits: its memory is a component of its own.
    let (logits, fused_loss) = if st.setup.loss == Some(Loss::Fused)
        && st.setup.profile.fused_loss == FusedLoss::UnslothChunks
    {
        (0.0, logits)
    } else {
        (logits, 0.0)
    };
    let mut c = [0.0; Kind::COUNT];
    for (kind, bytes) in [
        (Kind::BaseWeights, r.base_weights),
        (Kind::QuantConstants, r.quant_constants),
        (Kind::AdapterWeights, r.adapter_weights),
        (Kind::Gradients, r.gradients),
        (Kind::OptimizerStates, r.optimizer_states),
        (Kind::MasterWeights, r.master_weights),
        (Kind::SavedActivations, a.saved * kept_share),
        (Kind::AttentionScores, a.scores * kept_share),
        (Kind::Checkpoints, a.checkpoints * kept_share),
        // The head's backward runs first, so its copies are gone before backward reaches the layers.
        (Kind::WeightCopies, a.layer_weight_copies + a.head_copies),
        (Kind::KvCache, l.kv_cache),
        (Kind::PreviousInputs, a.previous_inputs),
        (Kind::Logits, logits),
        (Kind::BackwardWork, w.backward_work),
        (Kind::DequantBuffer, w.dequant_buffer),
        (Kind::InputBuffers, r.input_buffers),
        (Kind::PeftBuffers, w.peft_buffers),
        (Kind::LoadTransient, w.load_transient),
        (Kind::OptimizerTemps, r.optimizer_temps),
        (
            Kind::GatheredWeights,
            sh.gathered.iter().fold(0.0, |a: Count, &b| a.max(b)),
        ),
        (Kind::UnshardedGradients, sh.held_grads_whole),
        (
            Kind::ShardBuffers,
            w.ddp_buckets + w.reduce_buckets.resident,
        ),
        (
            Kind::ReduceBuckets,
            w.reduce_buckets.in_backward + w.reduce_buckets.reduce_copy,
        ),
        (Kind::AllocatorSlack, reserved.allocator_slack),
        (Kind::CudaContext, CUDA_CONTEXT_BYTES as Count),
        (Kind::PagedStates, r.paged_states),
        (Kind::ReferenceWeights, st.reference.weights),
        (Kind::ReferencePass, st.reference.pass),
        (
            Kind::PairedBatch,
            (a.saved + a.scores + a.checkpoints) * (1.0 - kept_share),
        ),
        (Kind::LogProbs, log_probs),
        (Kind::ReloadBuffers, a.reload_buffers),
        (Kind::FusedLoss, fused_loss),
        (Kind::GenerationCache, g.kv_cache),
        (Kind::GenerationWork, g.work()),
        (Kind::RoundBuffers, g.buffered),
        (Kind::VllmShare, g.vllm),
    ] {
        c[kind as usize] = bytes;
    }
    c
}

/// Layers split across the GPUs (`device_map="auto"` balances them): each GPU runs its slice in turn, and the
/// last one also holds the final norm and the head and computes the logits, which makes it the fullest. It is
/// planned as a one-GPU run of its slice of layers, which also counts the input embedding (on the first GPU in
/// fact: a small overcount for an untied model).
fn estimate_split(
    arch: &Architecture,
    plan: &Plan,
    by: Reserve,
    replayed: &mut Replayed,
) -> Estimate {
    let (slice, whole) = split_slice(arch, plan);
    let mut e = estimate_by(&slice, &whole, by, replayed);
    // The counts shown stay the whole model's.
    let s = setup::setup(arch, &whole);
    e.total_params = setup::total_params(&s) as u64;
    e.trainable_params = trainable::trainable_tensors(&s).params() as u64;
    e
}

/// The fullest GPU of a layer split, as a one-GPU plan over its slice of layers.
fn split_slice(arch: &Architecture, plan: &Plan) -> (Architecture, Plan) {
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
    (slice, whole)
}
