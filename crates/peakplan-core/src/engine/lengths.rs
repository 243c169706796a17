//! Runs whose batches vary in length (`lens=padded` or `grouped`): the lengths of the steps the allocator replay
//! runs, drawn from the plan's length distribution with a fixed seed, and those steps' events one after another on
//! one allocator. Everything allocated is the longest batch's, a fixed-length plan of `lmax` tokens (one
//! accounting engine); what varying lengths change is what the caching allocator keeps between steps.

use super::events::{step_events, StepEvents};
use super::stages;
use crate::arch::Architecture;
use crate::plan::{LengthStats, Lens, Plan};

/// Steps replayed, each at its own batch length.
pub(super) const STEPS: usize = 16;

/// The generator's seed: every estimate of a plan draws the same lengths.
const SEED: u64 = 0x5eed_1e46_0d5e_ed00;

/// Sequences drawn per batch at most: the longest of a batch is a maximum over its sequences, and past a few
/// hundred draws it barely moves, so a larger batch is drawn as this many.
const MAX_DRAWS_PER_BATCH: u64 = 256;

/// The Trainer's `LengthGroupedSampler` sorts megabatches of 50 batches' sequences by length.
const MEGABATCH_BATCHES: u64 = 50;

/// The plan as one batch of `len` tokens a sequence, every batch alike.
pub(super) fn at_length(plan: &Plan, len: u64) -> Plan {
    Plan {
        seq_len: len,
        lengths: Lens::Fixed,
        len_mean: None,
        len_sd: None,
        len_max: None,
        prompt_tokens: plan.prompt_tokens.filter(|p| *p < len),
        ..plan.clone()
    }
}

/// The padded length of each replayed step, in order; `None` where every batch is `b` x `s` (`fixed`, `packed`).
/// Padded batches come in random order, one of them the dataset's longest sequence (`lmax`), at a seeded place;
/// grouped ones longest first, each batch the longest of a run of sorted sequences, as the Trainer's sampler
/// orders a megabatch.
pub(super) fn batch_lengths(plan: &Plan) -> Option<Vec<u64>> {
    let stats = plan.length_stats();
    let draws = plan.micro_batch.clamp(1, MAX_DRAWS_PER_BATCH) as usize;
    let mut rng = SplitMix(SEED);
    let lengths = match plan.lengths {
        Lens::Fixed | Lens::Packed => return None,
        Lens::Padded => {
            let mut batches: Vec<u64> = (0..STEPS)
                .map(|_| (0..draws).map(|_| draw(&mut rng, stats)).max().unwrap_or(1))
                .collect();
            let at = (rng.next() % STEPS as u64) as usize;
            batches[at] = stats.max;
            batches
        }
        Lens::Grouped => {
            let mut sequences: Vec<u64> = (0..draws * MEGABATCH_BATCHES as usize)
                .map(|_| draw(&mut rng, stats))
                .collect();
            sequences.sort_unstable_by(|a, b| b.cmp(a));
            sequences[0] = stats.max;
            sequences
                .chunks(draws)
                .take(STEPS)
                .map(|batch| batch[0])
                .collect()
        }
    };
    Some(lengths)
}

/// One sequence's length: normal with the plan's mean and standard deviation, rounded, within 1 and `lmax`.
fn draw(rng: &mut SplitMix, stats: LengthStats) -> u64 {
    // Box-Muller: two uniform draws in (0, 1] make one standard normal.
    let u1 = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let u2 = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    let len = stats.mean as f64 + stats.sd as f64 * z;
    (len.round().max(1.0) as u64).min(stats.max)
}

/// SplitMix64: a small generator with a fixed seed, so that every estimate of a plan draws the same lengths.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The replayed run: the longest plan's setup, then one step at each of `lengths` in order, each step's events
/// those of the plan at that length. `None` past `max_events` (the replay falls back to its rule).
pub(super) fn varying_events(
    arch: &Architecture,
    plan: &Plan,
    longest: &StepEvents,
    lengths: &[u64],
    max_events: usize,
) -> Option<StepEvents> {
    let mut distinct: Vec<u64> = lengths.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let mut budget = max_events.checked_sub(longest.len())?;
    let mut steps: Vec<(u64, StepEvents)> = Vec::with_capacity(distinct.len());
    for len in distinct {
        let p = at_length(plan, len);
        let events = step_events(&stages(arch, &p), budget)?;
        budget = budget.checked_sub(events.len())?;
        steps.push((len, events));
    }
    let mut step = Vec::new();
    for len in lengths {
        let (_, events) = steps.iter().find(|(l, _)| l == len)?;
        step.extend(events.step.iter().cloned());
    }
    Some(StepEvents {
        setup: longest.setup.clone(),
        step,
    })
}
