//! The caching allocator's segments at the step's peak, for a picture of reserved memory: each segment's blocks
//! in use, and what it keeps cached but free (for the step's own later tensors, or stranded: the wrong size for
//! what the step asks next).

use super::events::{allocation_events, varying_allocation_runs, StepEvents};
use super::reserved::{AllocSettings, CUDA_CONTEXT_BYTES, MAX_REPLAYED_EVENTS, UNLIMITED_BYTES};
use crate::allocator::{Event, Replay, Segment};
use crate::arch::Architecture;
use crate::plan::{Alloc, Plan};

/// Middle micro-batches replayed at most: their blocks come and go alike, and the peak is the last one's.
const MIDDLE_MICRO_BATCHES: u64 = 2;

/// The allocator's segments, in address order, at the moment the measured step's requested bytes peak (for
/// varying lengths, the second pass of the replayed run that reserves the most without going over the runs'
/// mean, the estimate's figure), on the plan's card (as the estimate's reserved figure
/// replays it: near its limit the allocator releases its cache and retries), or, where the card cannot hold
/// the step, on a device without limit. `None` where no replay stands for the plan (more than
/// [`MAX_REPLAYED_EVENTS`] events, or requests beyond the allocator's limit).
pub fn segments_at_peak(arch: &Architecture, plan: &Plan) -> Option<Vec<Segment>> {
    let runs =
        varying_allocation_runs(arch, plan).unwrap_or_else(|| vec![allocation_events(arch, plan)]);
    if runs.iter().any(|events| events.len() > MAX_REPLAYED_EVENTS) {
        return None;
    }
    let card = plan
        .gpu
        .preset()
        .capacity_bytes
        .saturating_sub(CUDA_CONTEXT_BYTES);
    let settings = AllocSettings::of(plan);
    // Every run on one device, as the estimate replays them: the card where each runs on it.
    let on = |capacity_bytes| -> Option<Vec<(Vec<Segment>, u64)>> {
        runs.iter()
            .map(|events| segments_on(events, &flat(events), settings, capacity_bytes))
            .collect()
    };
    let pictures = on(card).or_else(|| on(UNLIMITED_BYTES))?;
    // Reserved memory is the mean of the runs' peaks: the picture is the run that reserves the most without
    // going over it, so what it shows is never more than the figure beside it.
    let mean =
        pictures.iter().map(|(_, peak)| *peak as u128).sum::<u128>() / pictures.len() as u128;
    pictures
        .into_iter()
        .filter(|(_, peak)| *peak as u128 <= mean)
        .max_by_key(|(_, peak)| *peak)
        .map(|(segments, _)| segments)
}

/// The segments at the peak of `step` (the events written out) replayed on a device of `capacity_bytes`, and the
/// replay's reserved peak.
fn segments_on(
    events: &StepEvents,
    step: &[Event],
    settings: AllocSettings,
    capacity_bytes: u64,
) -> Option<(Vec<Segment>, u64)> {
    let config = settings.config(capacity_bytes, false);
    // Loading and a first step, then the measured one as far as `upto` events.
    let replay_to = |upto: Option<usize>| -> Option<Replay> {
        let mut r = Replay::new(config.clone());
        r.run(&events.setup).ok()?;
        r.run(step).ok()?;
        if settings.alloc == Alloc::Emptied {
            r.allocator.empty_cache();
        }
        if let Some(n) = upto {
            r.run(&step[..n]).ok()?;
        }
        Some(r)
    };
    // The event after which the measured step's requested bytes are highest.
    let mut r = replay_to(None)?;
    let (mut peak, mut at) = (0, 0);
    for (i, event) in step.iter().enumerate() {
        r.run(std::slice::from_ref(event)).ok()?;
        let now = r.allocator.stats().requested_bytes.current;
        if now > peak {
            (peak, at) = (now, i + 1);
        }
    }
    let reserved_peak = r.allocator.stats().reserved_bytes.peak;
    Some((replay_to(Some(at))?.allocator.snapshot(), reserved_peak))
}

/// A step's events written out, its middle micro-batches at most [`MIDDLE_MICRO_BATCHES`] times.
fn flat(events: &StepEvents) -> Vec<Event> {
    let mut all = Vec::new();
    for run in &events.step {
        for _ in 0..run.times.min(MIDDLE_MICRO_BATCHES) {
            all.extend_from_slice(&run.events);
        }
    }
    all
}
