//! The caching allocator's segments at the step's peak, for a picture of reserved memory: each segment's blocks
//! in use, and what it keeps cached but free (for the step's own later tensors, or stranded: the wrong size for
//! what the step asks next).

use super::events::{allocation_events, varying_allocation_events, StepEvents};
use super::reserved::{AllocSettings, CUDA_CONTEXT_BYTES, MAX_REPLAYED_EVENTS};
use crate::allocator::{AllocatorConfig, Event, Replay, Segment};
use crate::arch::Architecture;
use crate::plan::{Alloc, Plan};

/// A device without limit, for a plan its card cannot hold: what it would need.
const UNLIMITED_BYTES: u64 = 1 << 59;

/// Middle micro-batches replayed at most: their blocks come and go alike, and the peak is the last one's.
const MIDDLE_MICRO_BATCHES: u64 = 2;

/// The allocator's segments, in address order, at the moment the measured step's requested bytes peak (for
/// varying lengths, the replayed run's second pass), on the plan's card (as the estimate's reserved figure
/// replays it: near its limit the allocator releases its cache and retries), or, where the card cannot hold
/// the step, on a device without limit. `None` where no replay stands for the plan (more than
/// [`MAX_REPLAYED_EVENTS`] events, or requests beyond the allocator's limit).
pub fn segments_at_peak(arch: &Architecture, plan: &Plan) -> Option<Vec<Segment>> {
    let card = plan
        .gpu
        .preset()
        .capacity_bytes
        .saturating_sub(CUDA_CONTEXT_BYTES);
    segments_on(arch, plan, card).or_else(|| segments_on(arch, plan, UNLIMITED_BYTES))
}

fn segments_on(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<Vec<Segment>> {
    let events =
        varying_allocation_events(arch, plan).unwrap_or_else(|| allocation_events(arch, plan));
    if events.len() > MAX_REPLAYED_EVENTS {
        return None;
    }
    let step = flat(&events);
    let settings = AllocSettings::of(plan);
    let config = AllocatorConfig {
        expandable_segments: settings.alloc == Alloc::Expandable,
        max_split_size_bytes: settings.max_split_bytes,
        ..AllocatorConfig::with_capacity(capacity_bytes)
    };
    // Loading and a first step, then the measured one as far as `upto` events.
    let replay_to = |upto: Option<usize>| -> Option<Replay> {
        let mut r = Replay::new(config.clone(), events.setup.len());
        r.run(&events.setup).ok()?;
        r.run(&step).ok()?;
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
    Some(replay_to(Some(at))?.allocator.snapshot())
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
