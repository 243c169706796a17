//! Runs whose batches vary in length (`lens=padded` or `grouped`): the batches of the steps the allocator replay
//! runs, drawn from the plan's length distribution with a fixed seed, and those steps' events one after another on
//! one allocator. Everything allocated is the largest batch's, a fixed-length plan of its shape (`b` x `lmax`, or
//! padding-free one row of its sequences' lengths: one accounting engine); what varying lengths change besides is
//! what the caching allocator keeps between steps.

use super::events::{step_events_by_tensor, StepEvents};
use super::stages;
use crate::arch::Architecture;
use crate::plan::{LengthStats, Lens, Loss, Plan};
use crate::profile::Profile;

/// Steps replayed, each at its own batch length.
pub(super) const STEPS: usize = 16;

/// The generator's seed: every estimate of a plan draws the same lengths.
const SEED: u64 = 0x5eed_1e46_0d5e_ed00;

/// Sequences drawn per batch at most: the longest of a batch is a maximum over its sequences, and past a few
/// hundred draws it barely moves, so a larger batch is drawn as this many.
const MAX_DRAWS_PER_BATCH: u64 = 256;

/// The Trainer's `LengthGroupedSampler` sorts megabatches of 50 batches' sequences by length.
const MEGABATCH_BATCHES: u64 = 50;

/// One replayed step's batch: `sequences` rows of `len` tokens each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    pub sequences: u64,
    pub len: u64,
}

impl Shape {
    pub(super) fn tokens(self) -> u64 {
        self.sequences.saturating_mul(self.len)
    }
}

/// The plan as one batch of `shape`, every batch alike.
pub(super) fn at_shape(plan: &Plan, shape: Shape) -> Plan {
    Plan {
        micro_batch: shape.sequences,
        seq_len: shape.len,
        lengths: Lens::Fixed,
        len_mean: None,
        len_sd: None,
        len_max: None,
        prompt_tokens: plan.prompt_tokens.filter(|p| *p < shape.len),
        ..plan.clone()
    }
}

/// Model types Unsloth's `SFTTrainer` patch does not batch padding-free (`PADDING_FREE_BLOCKLIST`).
const PADDING_FREE_BLOCKED: &[&str] = &["gemma2", "gpt_oss"];

/// Whether the framework batches varying lengths padding-free: Unsloth's `SFTTrainer` turns `padding_free` on when
/// the config leaves it unset, except for the models it blocks and with `UNSLOTH_RETURN_LOGITS=1` (`loss=kernel`).
/// A padding-free batch is one row of its sequences' real lengths.
fn padding_free(arch: &Architecture, plan: &Plan) -> bool {
    Profile::of(plan.framework).padding_free
        && plan.loss != Loss::Kernel
        && !PADDING_FREE_BLOCKED.contains(&arch.model_type.as_str())
}

/// Each replayed step's batch, in order; `None` where every batch is `b` x `s` (`fixed`, `packed`). Padded batches
/// come in random order, one of them holding the dataset's longest sequence (`lmax`), at a seeded place; grouped
/// ones longest first, each batch a run of sorted sequences, as the Trainer's sampler orders a megabatch. A
/// batch is its sequences padded to the longest of them, or, padding-free, one row of their real lengths (a batch
/// of more than [`MAX_DRAWS_PER_BATCH`] sequences scaled from that many).
pub(super) fn batch_shapes(arch: &Architecture, plan: &Plan) -> Option<Vec<Shape>> {
    // Every estimate asks: a plan whose batches do not vary answers at once.
    if !plan.lengths.varies() {
        return None;
    }
    let stats = plan.length_stats();
    let draws = plan.micro_batch.clamp(1, MAX_DRAWS_PER_BATCH) as usize;
    let free = padding_free(arch, plan);
    let shape = |batch: &[u64]| -> Shape {
        if free {
            let sum: u64 = batch.iter().sum();
            let len = (sum as u128 * plan.micro_batch as u128 / batch.len().max(1) as u128) as u64;
            Shape {
                sequences: 1,
                len: len.max(1),
            }
        } else {
            Shape {
                sequences: plan.micro_batch,
                len: batch.iter().copied().max().unwrap_or(1),
            }
        }
    };
    let mut rng = SplitMix(SEED);
    let batches: Vec<Vec<u64>> = if plan.lengths == Lens::Grouped {
        let mut sequences: Vec<u64> = (0..draws * MEGABATCH_BATCHES as usize)
            .map(|_| draw(&mut rng, stats))
            .collect();
        sequences.sort_unstable_by(|a, b| b.cmp(a));
        sequences[0] = stats.max;
        sequences
            .chunks(draws)
            .take(STEPS)
            .map(<[u64]>::to_vec)
            .collect()
    } else {
        let mut batches: Vec<Vec<u64>> = (0..STEPS)
            .map(|_| (0..draws).map(|_| draw(&mut rng, stats)).collect())
            .collect();
        let at = (rng.next() % STEPS as u64) as usize;
        batches[at][0] = stats.max;
        batches
    };
    Some(batches.iter().map(|b| shape(b)).collect())
}

/// The step with the most tokens: what the replayed run allocates at its largest.
pub(super) fn largest(shapes: &[Shape]) -> Shape {
    shapes
        .iter()
        .copied()
        .max_by_key(|s| s.tokens())
        .unwrap_or(Shape {
            sequences: 1,
            len: 1,
        })
}

/// One sequence's length: normal with the plan's mean and standard deviation, rounded, within 1 and `lmax`.
fn draw(rng: &mut SplitMix, stats: LengthStats) -> u64 {
    // The sum of twelve uniform draws less six is normal to within 0.01 of its distribution function (Irwin-Hall),
    // without the logarithm and cosine Box-Muller would bring into the page's wasm.
    let z = (0..12)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64)
        .sum::<f64>()
        - 6.0;
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

/// The replayed run: the largest step's setup, then one step at each of `shapes` in order, each step's events
/// those of the plan at that shape. `None` past `max_events` (the replay falls back to its rule).
pub(super) fn varying_events(
    arch: &Architecture,
    plan: &Plan,
    longest: &StepEvents,
    shapes: &[Shape],
    max_events: usize,
) -> Option<StepEvents> {
    let mut distinct: Vec<Shape> = Vec::new();
    for s in shapes {
        if !distinct.contains(s) {
            distinct.push(*s);
        }
    }
    let mut budget = max_events.checked_sub(longest.len())?;
    let mut steps: Vec<(Shape, StepEvents)> = Vec::with_capacity(distinct.len());
    for shape in distinct {
        let p = at_shape(plan, shape);
        let events = step_events_by_tensor(&stages(arch, &p), budget)?;
        budget = budget.checked_sub(events.len())?;
        steps.push((shape, events));
    }
    let mut step = Vec::new();
    for shape in shapes {
        let (_, events) = steps.iter().find(|(s, _)| s == shape)?;
        step.extend(events.step.iter().cloned());
    }
    Some(StepEvents {
        setup: longest.setup.clone(),
        step,
    })
}
