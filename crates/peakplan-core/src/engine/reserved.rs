//! Stage 6, reserved and device memory: what PyTorch's caching allocator holds beyond the allocated peak, and
//! what `nvidia-smi` shows beside it (the CUDA context, paged optimizer states).
//!
//! Reserved memory comes from replaying the step's own allocation sequence ([`super::events`]) through the
//! caching-allocator simulator ([`crate::allocator`]) on the plan's GPU: loading, then two steps, so the second
//! finds the cache the first left (a warm cache), or an emptied one (`alloc=emptied`: `empty_cache()` and
//! `reset_peak_memory_stats()` before the measured step), or expandable segments (`alloc=expandable`). The
//! device is the GPU's memory less the CUDA context, so a step near the limit frees its cached blocks and retries
//! as PyTorch does instead of growing past the card. A plan the card cannot hold reports what the same replay
//! reaches on a device without limit: the memory it would need.
//!
//! [`rule`] is a quick stand-in for the replay (allocated, rounded, plus one largest transient block where the
//! cache is warm). Searches that weigh many plans (the largest batch, the fewest GPUs, the advisor's sets) screen
//! with it and check their answers with the replay; no figure shown comes from it, except for plans past what a
//! replay takes (more than [`MAX_REPLAYED_EVENTS`] events, or requests beyond the allocator's 1 EB limit).

use super::count::{ceil_div, Count, MIB};
use super::events::StepEvents;
use crate::allocator::{AllocatorConfig, Moment, Replay, Settled, Stats};
use crate::plan::Alloc;

/// The CUDA context plus cuBLAS workspace that `nvidia-smi` shows beside PyTorch's own memory (CUDA 12, lazy loading).
pub const CUDA_CONTEXT_BYTES: u64 = 512 << 20;

/// Blocks the step allocates and frees, which a warm cache may keep.
pub(super) struct Transients {
    pub loss_block: Count,
    /// Dequantization and PEFT buffers.
    pub buffers: Count,
    pub load: Count,
    pub scores: Count,
    pub optimizer_temps: Count,
    /// Elements of the largest trainable tensor.
    pub largest_tensor: Count,
}

pub(super) struct Reserved {
    pub allocator_slack: Count,
    pub reserved: Count,
    pub device: Count,
}

/// How the plan's caching allocator is set (`PYTORCH_CUDA_ALLOC_CONF` and the training loop's own calls).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct AllocSettings {
    pub alloc: Alloc,
    /// `max_split_size_mb` in bytes, where set.
    pub max_split_bytes: Option<u64>,
}

impl AllocSettings {
    pub fn of(plan: &crate::plan::Plan) -> AllocSettings {
        AllocSettings {
            alloc: plan.allocator,
            max_split_bytes: plan.max_split_mb.map(|mb| mb.saturating_mul(1 << 20)),
        }
    }

    /// The simulator's settings on a device of `capacity_bytes` (releasing the cache before every new segment
    /// where asked).
    pub fn config(self, capacity_bytes: u64, release_before_growing: bool) -> AllocatorConfig {
        AllocatorConfig {
            expandable_segments: self.alloc == Alloc::Expandable,
            max_split_size_bytes: self.max_split_bytes,
            release_before_growing,
            ..AllocatorConfig::with_capacity(capacity_bytes)
        }
    }
}

/// Which replays find reserved memory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Replays {
    /// On a device without limit, and on the card where that reserved more than the card holds: what the card
    /// shows, or what a plan it cannot hold would need on a card without limit.
    Card,
    /// On the card only: a step it cannot hold reports no figure but "more than the card" (`u64::MAX`
    /// reserved), which is all a search needs to know.
    CardOnly,
    /// The smallest device on which the step runs, as `device` ([`smallest_device`]): what a plan needs.
    Smallest,
}

/// The reserved and device memory of a step whose allocated peak is `peak`, by the rule of thumb.
pub(super) fn rule(alloc: Alloc, peak: Count, t: &Transients, paged_states: Count) -> Reserved {
    // A warm cache strands about one largest transient block; an emptied cache or expandable segments do not:
    // the step's frees serve its own later allocations (the backward's fp32 gradients land in the blocks the
    // forward's upcast freed), so only block rounding stays.
    let largest_transient = if alloc == Alloc::Cached {
        t.loss_block
            .max(t.buffers)
            .max(t.load)
            .max(t.scores)
            .max(t.optimizer_temps.min(t.largest_tensor * 4.0))
    } else {
        0.0
    };
    let rounded = ceil_div(peak, 2.0 * MIB) * 2.0 * MIB;
    with_reserved(peak, rounded + largest_transient, paged_states)
}

fn with_reserved(peak: Count, reserved: Count, paged_states: Count) -> Reserved {
    let reserved = reserved.max(peak);
    Reserved {
        allocator_slack: reserved - peak,
        reserved,
        device: reserved + CUDA_CONTEXT_BYTES as Count + paged_states,
    }
}

/// Sequences longer than this (a model of tens of thousands of layers) take the rule: a replay costs about
/// 0.2 µs per event. A step's events are its setup and three micro-batches whatever its gradient accumulation
/// (the middle ones replay until the allocator settles, [`crate::allocator::Run`]), so the cap bounds a replay's
/// time and memory for any plan.
pub const MAX_REPLAYED_EVENTS: usize = 400_000;

/// A device without limit, below PyTorch's 1 EB request refusal.
pub(super) const UNLIMITED_BYTES: u64 = 1 << 59;

/// What replaying a step on one device found: its reserved peak, `Ok(None)` where the middle micro-batches did not
/// settle, `Err` where it ran out of memory.
type Outcome = Result<Option<u64>, ()>;

/// The replays run so far for one plan, by device and setting, and how many more the current call may run: a search
/// that stops after any replay ([`super::needs_bytes_within`]) runs the same code again and finds here the replays it
/// made before, so its answer is the one-shot answer. The default runs every replay at once.
#[derive(Clone, Debug, Default)]
pub struct Replayed {
    /// By device, setting and run (`ALL_RUNS`: the runs' combined outcome).
    outcomes: Vec<((u64, bool, u32), Outcome)>,
    /// Replays the current call may still run; `None`: no limit.
    pub(super) allowed: Option<u32>,
    /// Set where a replay was needed past what was allowed: the call's answer is not the plan's yet.
    pub(super) paused: bool,
}

impl Replayed {
    /// Lets the calls that follow run at most `n` more replays (`None`: any number), and clears `paused`.
    pub fn allow(&mut self, n: Option<u32>) {
        self.allowed = n;
        self.paused = false;
    }

    /// The replays still allowed (`None`: any number).
    pub fn allowed(&self) -> Option<u32> {
        self.allowed
    }

    /// Runs `f` allowed what is left of `budget` (`None`: any number), and takes from `budget` the replays it ran:
    /// one allowance shared by the replays of several plans.
    pub fn within<T>(
        &mut self,
        budget: &mut Option<u32>,
        f: impl FnOnce(&mut Replayed) -> Option<T>,
    ) -> Option<T> {
        self.allow(*budget);
        let out = f(self);
        *budget = self.allowed;
        out
    }
}

/// The key of the runs' combined outcome in [`Replayed`].
const ALL_RUNS: u32 = u32::MAX;

/// A step's replays: its events (one sequence per replayed run: several where batches vary in length), built at
/// the first replay not already in `replayed`.
struct Probe<'r, E> {
    settings: AllocSettings,
    events: Option<E>,
    built: Option<Vec<StepEvents>>,
    replayed: &'r mut Replayed,
}

impl<E: FnOnce(usize) -> Option<Vec<StepEvents>>> Probe<'_, E> {
    /// The outcome of a replay on a device of `capacity_bytes` (releasing the cache before every new segment where
    /// asked): over several runs, the mean of their peaks where every run runs, out of memory where one does not;
    /// `None` where the step has no events to replay (too many) or the call may run no more replays (each run is
    /// one replay, so a later call goes on where this one stopped).
    fn replay(&mut self, capacity_bytes: u64, release_before_growing: bool) -> Option<Outcome> {
        let key = |run: u32| (capacity_bytes, release_before_growing, run);
        let known = |outcomes: &[((u64, bool, u32), Outcome)], k| {
            outcomes.iter().find(|(o, _)| *o == k).map(|(_, v)| *v)
        };
        if let Some(outcome) = known(&self.replayed.outcomes, key(ALL_RUNS)) {
            return Some(outcome);
        }
        // Some run is still to replay (the combined outcome is kept once every run's is known).
        if self.replayed.allowed == Some(0) {
            self.replayed.paused = true;
            return None;
        }
        if let Some(make) = self.events.take() {
            self.built = make(MAX_REPLAYED_EVENTS);
        }
        let runs = self.built.as_ref().filter(|runs| !runs.is_empty())?;
        let (mut sum, mut unsettled, mut out_of_memory) = (0u128, false, false);
        for (i, events) in runs.iter().enumerate() {
            let run_key = key(i as u32);
            let outcome = match known(&self.replayed.outcomes, run_key) {
                Some(outcome) => outcome,
                None => {
                    if self.replayed.allowed == Some(0) {
                        self.replayed.paused = true;
                        return None;
                    }
                    let outcome = replay(
                        self.settings,
                        events,
                        capacity_bytes,
                        release_before_growing,
                    )
                    .map(|s| s.map(|s| s.reserved_bytes.peak))
                    .map_err(|_| ());
                    if let Some(n) = &mut self.replayed.allowed {
                        *n -= 1;
                    }
                    self.replayed.outcomes.push((run_key, outcome));
                    outcome
                }
            };
            match outcome {
                Ok(Some(peak_bytes)) => sum += peak_bytes as u128,
                Ok(None) => unsettled = true,
                Err(()) => out_of_memory = true,
            }
        }
        let outcome = if out_of_memory {
            Err(())
        } else if unsettled {
            Ok(None)
        } else {
            Ok(Some((sum / runs.len() as u128) as u64))
        };
        self.replayed.outcomes.push((key(ALL_RUNS), outcome));
        Some(outcome)
    }

    /// Whether the step runs on a device of `capacity_bytes`; `None` as for [`Probe::replay`].
    fn runs(&mut self, capacity_bytes: u64) -> Option<bool> {
        Some(matches!(self.replay(capacity_bytes, false)?, Ok(Some(_))))
    }
}

/// The reserved and device memory of a step by replaying its events (built by `events` only when a replay
/// runs, at most [`MAX_REPLAYED_EVENTS`] of them, else `None`) on a GPU of `capacity_bytes` (see the module
/// doc); `fallback` (the rule's figures) where no replay can stand for the step: too many events, or middle
/// micro-batches that never settle, or where `replayed` allows no more replays (then it says it paused).
/// `replays` says which replays run ([`Replays`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn replayed(
    settings: AllocSettings,
    capacity_bytes: u64,
    replays: Replays,
    events: impl FnOnce(usize) -> Option<Vec<StepEvents>>,
    peak: Count,
    paged_states: Count,
    fallback: Reserved,
    replayed: &mut Replayed,
) -> Reserved {
    let alloc = settings.alloc;
    let device = capacity_bytes.saturating_sub(CUDA_CONTEXT_BYTES);
    // A step that allocates more than the card cannot be held by it, whatever the replay.
    let beyond_card = peak > device as Count;
    if replays == Replays::CardOnly && beyond_card {
        return with_reserved(peak, u64::MAX as Count, paged_states);
    }
    let mut probe = Probe {
        settings,
        events: Some(events),
        built: None,
        replayed,
    };
    if replays == Replays::CardOnly {
        let Some(outcome) = probe.replay(device, false) else {
            return fallback;
        };
        let reserved = match outcome {
            Ok(Some(peak_bytes)) => peak_bytes,
            Ok(None) => return fallback,
            Err(()) => u64::MAX,
        };
        return with_reserved(peak, reserved as Count, paged_states);
    }
    // On a card (not the unlimited device) without expandable segments, the card's replay goes first. Until the
    // capacity refuses a segment it is the unlimited replay, so a step that runs on the card shows the card's figure
    // either way, and one that does not never did; only where it runs out is the unlimited replay needed, for what
    // the step would reserve. A plan near its card so takes one replay where it took two.
    if replays == Replays::Card
        && !beyond_card
        && alloc != Alloc::Expandable
        && device < UNLIMITED_BYTES
    {
        let reserved = match probe.replay(device, false) {
            Some(Ok(Some(on_card))) => on_card,
            Some(Err(())) => match probe.replay(UNLIMITED_BYTES, false) {
                Some(Ok(Some(peak_bytes))) => peak_bytes,
                _ => return fallback,
            },
            None | Some(Ok(None)) => return fallback,
        };
        return with_reserved(peak, reserved as Count, paged_states);
    }
    let Some(Ok(Some(peak_bytes))) = probe.replay(UNLIMITED_BYTES, false) else {
        return fallback;
    };
    // Paged optimizer states sit outside the allocator, on the GPU while it has room: a replay on a card does not
    // leave them theirs, so no card smaller than the one that shows it all is known to hold the step. An emptied
    // cache's figures are the measured step's, after a first step that may have reserved more.
    if replays == Replays::Smallest && paged_states == 0.0 && alloc != Alloc::Emptied {
        let Some(mut smallest) = smallest_device(&mut probe, peak_bytes) else {
            return fallback;
        };
        // Whether a device runs the step is not monotone in its size (where the allocator must release and retry
        // depends on what it cached): where the plan's own card runs the step, it bounds what the plan needs, and
        // so does what it reserves there, where a device of that size runs the step too.
        if peak_bytes > device && !beyond_card {
            let Some(outcome) = probe.replay(device, false) else {
                return fallback;
            };
            if let Ok(Some(on_card)) = outcome {
                if on_card < smallest {
                    let Some(runs) = probe.runs(on_card) else {
                        return fallback;
                    };
                    if runs {
                        smallest = on_card;
                    }
                }
                smallest = smallest.min(device);
            }
        }
        return with_reserved(peak, smallest as Count, paged_states);
    }
    // Where the unlimited device never held more than the card, the card's replay is the same one; where the
    // step allocates more than the card, the card's replay runs out for certain.
    let reserved = if peak_bytes <= device || beyond_card {
        peak_bytes
    } else {
        match probe.replay(device, false) {
            None | Some(Ok(None)) => return fallback,
            Some(Ok(Some(on_card))) => on_card,
            Some(Err(())) => peak_bytes,
        }
    };
    with_reserved(peak, reserved as Count, paged_states)
}

/// Replays on devices between the smallest and the unlimited one's reserved peak that a bisection tries at most.
const MAX_BISECTIONS: u32 = 8;

/// The smallest device, to 2 MiB, on which the step runs, below `unlimited` (the reserved peak of a device
/// without limit, which runs it). An allocator that releases its cache before every new segment reserves what the
/// tightest device would; a replay on a device of that size confirms it, else a bisection between the two finds
/// the size (at most [`MAX_BISECTIONS`] replays, then the smallest size known to run). `None` where the probe
/// may run no more replays.
fn smallest_device<E: FnOnce(usize) -> Option<Vec<StepEvents>>>(
    probe: &mut Probe<'_, E>,
    unlimited: u64,
) -> Option<u64> {
    let tight = match probe.replay(UNLIMITED_BYTES, true)? {
        Ok(Some(tight)) => tight,
        _ => return Some(unlimited),
    };
    if tight >= unlimited || probe.runs(tight)? {
        return Some(tight.min(unlimited));
    }
    let (mut fails, mut holds) = (tight, unlimited);
    for _ in 0..MAX_BISECTIONS {
        if holds - fails <= 2 * MIB as u64 {
            break;
        }
        let mid = fails + (holds - fails) / 2;
        if probe.runs(mid)? {
            holds = mid;
        } else {
            fails = mid;
        }
    }
    Some(holds)
}

/// Loading, a first step, and the measured second step, on a device of `capacity_bytes` (releasing the cache
/// before every new segment where asked); `None` where the middle micro-batches did not settle.
///
/// A step of many pieces (a varying plan's batches) keeps the moment before each of its first step's pieces: where
/// the second step, before piece `i`, finds the allocator where the first step was before piece `i`, the rest of it
/// replays as the first step's rest did (no new high-water mark), and is skipped ([`Replay::skip_to`]).
fn replay(
    settings: AllocSettings,
    events: &StepEvents,
    capacity_bytes: u64,
    release_before_growing: bool,
) -> Result<Option<Stats>, crate::allocator::OutOfMemory> {
    let replayed = replay_skipping(
        settings,
        events,
        capacity_bytes,
        release_before_growing,
        true,
    )?;
    Ok(replayed.map(|(stats, _)| stats))
}

/// [`replay`], skipping the second step's rest where `skip` allows and it repeats the first's; with whether it did.
fn replay_skipping(
    settings: AllocSettings,
    events: &StepEvents,
    capacity_bytes: u64,
    release_before_growing: bool,
    skip: bool,
) -> Result<Option<(Stats, bool)>, crate::allocator::OutOfMemory> {
    let alloc = settings.alloc;
    let config = settings.config(capacity_bytes, release_before_growing);
    let mut r = Replay::new(config);
    r.run(&events.setup)?;
    // An emptied cache resets the peaks between the steps, so the first step's cannot stand for the second's.
    let skippable = skip && alloc != Alloc::Emptied && events.step.len() >= MIN_PIECES_TO_SKIP;
    let mut moments: Vec<Moment> = Vec::new();
    for run in &events.step {
        if skippable {
            moments.push(r.moment());
        }
        if r.run_repeated(run)? == Settled::Unsettled {
            return Ok(None);
        }
    }
    if alloc == Alloc::Emptied {
        r.allocator.empty_cache();
        r.allocator.reset_peak_stats();
    }
    let end = skippable.then(|| r.moment());
    for (i, run) in events.step.iter().enumerate() {
        if let (Some(before), Some(end)) = (moments.get(i), &end) {
            if r.is_at(before) && r.skip_to(before, end) {
                return Ok(Some((r.allocator.stats(), true)));
            }
        }
        if r.run_repeated(run)? == Settled::Unsettled {
            return Ok(None);
        }
    }
    Ok(Some((r.allocator.stats(), false)))
}

/// Steps of fewer pieces (a fixed plan's: its first, middle and last micro-batches) replay both steps whole: a
/// moment is a sorted copy of every block and live tag, taken before each piece, and a fixed step's replay is
/// short enough that the page's budgets hold without it.
const MIN_PIECES_TO_SKIP: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{preset_arch, Plan};

    #[test]
    fn a_second_step_skipped_where_it_repeats_the_first_gives_the_whole_replays_figures() {
        // Every figure the replay reports (peaks, device calls, currents) as replaying both steps whole, on a
        // device without limit, on a card that must release its cache, and on one too small; and the skip happens.
        let mut skipped = 0;
        for q in [
            "model=llama-3.1-8b&method=lora&b=4&s=2048&lens=grouped&lmean=300&lsd=200&gc=1&gpu=rtx-4090",
            "model=llama-3.1-8b&method=lora&b=8&s=4096&lens=padded&lmean=300&gc=0&gpu=a100-80gb",
            "model=llama-2-7b&method=qlora&b=4&s=2048&lens=padded&lmean=500&gc=1&gpu=rtx-4090",
            "model=llama-2-7b&method=full&b=2&s=1024&lens=grouped&lmean=300&gpu=a100-80gb",
            "model=llama-3.1-8b&method=lora&b=4&s=2048&lens=padded&lmean=800&alloc=expandable&gpu=rtx-4090",
            "model=llama-3.1-8b&method=lora&b=4&s=2048&lens=padded&lmean=800&msplit=128&gpu=rtx-4090",
        ] {
            let plan = Plan::parse_query(q).plan;
            let arch = preset_arch(&plan);
            let Some(events) = crate::engine::varying_allocation_events(arch, &plan) else {
                panic!("{q}: no varying events");
            };
            let settings = AllocSettings::of(&plan);
            for cap in [UNLIMITED_BYTES, 24 << 30, 12 << 30] {
                let whole = replay_skipping(settings, &events, cap, false, false).map(|r| r.map(|(s, _)| s));
                let quick = replay_skipping(settings, &events, cap, false, true);
                if let Ok(Some((_, true))) = quick {
                    skipped += 1;
                }
                assert_eq!(quick.map(|r| r.map(|(s, _)| s)), whole, "{q} on {cap}");
            }
        }
        assert!(skipped >= 4, "the second step was skipped {skipped} times");
    }
}
