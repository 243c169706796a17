//! Runs whose batches vary in length (`lens=padded` or `grouped`): the batches of the steps the allocator replay
//! runs, drawn from the plan's length distribution with a fixed seed, and those steps' events one after another on
//! one allocator. Everything allocated is the largest batch's, a fixed-length plan of its shape (`b` x `lmax`, or
//! padding-free one row of its sequences' lengths: one accounting engine); what varying lengths change besides is
//! what the caching allocator keeps between steps.

use super::events::{step_events_by_tensor, StepEvents};
use super::stages;
use crate::arch::Architecture;
use crate::plan::{LengthStats, Lens, Loss, Overlong, Plan};
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
        len_overlong: Overlong::Cut,
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

/// Runs of padded batches replayed, each its own seeded draw of the steps' batches; reserved memory is the mean of
/// their peaks. One draw's figure hangs on its records (batches longer than every one before them, each of which
/// leaves new segments cached): at batch size 1 and a wide distribution its spread is half its mean, so the mean
/// of several draws stands for the run where one draw is a throw of the dice. Grouped batches come longest
/// first, so their one record is the first batch, whatever the draw: one run stands for them.
pub(super) const ORDERS: u64 = 4;

/// The first run's batches: what [`super::replayed_batches`] lists and the segment picture may show.
pub(super) fn batch_shapes(arch: &Architecture, plan: &Plan) -> Option<Vec<Shape>> {
    // Every estimate asks: a plan whose batches do not vary answers at once.
    if !plan.lengths.varies() {
        return None;
    }
    Some(draw_batches(arch, plan, SEED))
}

/// Every replayed run's batches ([`ORDERS`] of them where batches are padded, one where grouped; the first
/// [`batch_shapes`]'s); `None` where every batch is `b` x `s`.
pub(super) fn batch_orders(arch: &Architecture, plan: &Plan) -> Option<Vec<Vec<Shape>>> {
    if !plan.lengths.varies() {
        return None;
    }
    let runs = if plan.lengths == Lens::Grouped {
        1
    } else {
        ORDERS
    };
    Some(
        (0..runs)
            .map(|k| {
                draw_batches(
                    arch,
                    plan,
                    SEED.wrapping_add(k.wrapping_mul(ORDER_SEED_STEP)),
                )
            })
            .collect(),
    )
}

/// The largest step of every replayed run: what the plan allocates at its largest.
pub(super) fn largest_of(orders: &[Vec<Shape>]) -> Shape {
    largest(&orders.iter().map(|o| largest(o)).collect::<Vec<_>>())
}

/// Between the runs' seeds: any odd step gives SplitMix64 another stream.
const ORDER_SEED_STEP: u64 = 0x6a09_e667_f3bc_c909;

/// One run's steps' batches, in order, drawn from `seed`. Padded batches come in random order, one of them holding
/// the dataset's longest sequence (`lmax`), at a seeded place; grouped ones longest first, each batch a run of
/// sorted sequences, as the Trainer's sampler orders a megabatch. A batch is its sequences padded to the longest
/// of them, or, padding-free, one row of their real lengths (a batch of more than [`MAX_DRAWS_PER_BATCH`]
/// sequences scaled from that many).
fn draw_batches(arch: &Architecture, plan: &Plan, seed: u64) -> Vec<Shape> {
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
    let mut rng = SplitMix(seed);
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
    batches.iter().map(|b| shape(b)).collect()
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

/// One sequence's length: normal with the plan's mean and standard deviation, rounded, within 1 and `lmax`: a
/// longer draw cut to `lmax`, or, where longer sequences are dropped, drawn from the distribution below it.
fn draw(rng: &mut SplitMix, stats: LengthStats) -> u64 {
    match stats.overlong {
        Overlong::Cut => draw_cut(rng, stats),
        Overlong::Drop => draw_below(rng, stats),
    }
}

/// A draw cut to `lmax`.
fn draw_cut(rng: &mut SplitMix, stats: LengthStats) -> u64 {
    // The sum of twelve uniform draws less six is normal to within 0.01 of its distribution function (Irwin-Hall),
    // without the logarithm and cosine Box-Muller would bring into the page's wasm.
    let z = (0..12)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64)
        .sum::<f64>()
        - 6.0;
    let len = stats.mean as f64 + stats.sd as f64 * z;
    (len.round().max(1.0) as u64).min(stats.max)
}

/// A draw of the normal within 1 and `lmax` (a truncated normal), by inverting its distribution function over
/// that range: one draw whatever share of the distribution lies there (a dataset whose mean is far above its
/// limit keeps a few percent of its sequences, which redrawing until one fits would take dozens of draws for).
/// Where no representable share lies within, the draw falls at the nearer end, as a cut one would.
fn draw_below(rng: &mut SplitMix, stats: LengthStats) -> u64 {
    let max = stats.max.max(1);
    let (mean, sd) = (stats.mean as f64, stats.sd as f64);
    if sd == 0.0 {
        return stats.mean.clamp(1, max);
    }
    // The lengths that round to 1 ..= max, in standard deviations; mirrored so the range's far side is the
    // distribution's lower tail, where its share keeps its precision.
    let (lo, hi) = ((0.5 - mean) / sd, (max as f64 + 0.5 - mean) / sd);
    let mirrored = lo > 0.0;
    let (a, b) = if mirrored { (-hi, -lo) } else { (lo, hi) };
    let (pa, pb) = (normal_cdf(a), normal_cdf(b));
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let p = pa + u * (pb - pa);
    let z = if pb > pa && p > 0.0 && p < 1.0 {
        normal_quantile(p)
    } else if mirrored {
        // All of the range in the far upper tail: its nearest end.
        a
    } else {
        b
    };
    let z = if mirrored { -z } else { z };
    let len = (mean + sd * z).round();
    if len.is_finite() {
        (len.max(1.0) as u64).clamp(1, max)
    } else {
        max
    }
}

/// The standard normal distribution function, by the complementary error function's Chebyshev fit (Numerical
/// Recipes' `erfcc`: relative error under 1.2e-7), with `exp` as a power of e (the page's wasm already has `pow`).
fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x);
    let poly = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ]
    .iter()
    .rev()
    .fold(0.0, |acc, c| acc * t + c);
    let erfc = t * std::f64::consts::E.powf(-x * x + poly);
    if z >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

/// The standard normal quantile of `p` in (0, 1) (Acklam's rational fits: relative error under 1.2e-9), with the
/// logarithm through `log2` (already in the page's wasm).
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let horner = |coefs: &[f64], x: f64| coefs.iter().fold(0.0, |acc, c| acc * x + c);
    let tail = |q: f64| {
        let q = (-2.0 * q.log2() * std::f64::consts::LN_2).sqrt();
        horner(&C, q) / (horner(&D, q) * q + 1.0)
    };
    if p < LOW {
        tail(p)
    } else if p > 1.0 - LOW {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        horner(&A, r) * q / (horner(&B, r) * r + 1.0)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_distribution_function_and_its_quantile() {
        // Known values, then the quantile inverting the function across (0, 1), tails included.
        for (z, cdf) in [
            (0.0, 0.5),
            (1.0, 0.841_344_746),
            (-1.959_963_985, 0.025),
            (3.0, 0.998_650_102),
            (-5.0, 2.866_515_7e-7),
        ] {
            assert!((normal_cdf(z) - cdf).abs() <= 1.2e-7 * cdf.max(1e-6), "{z}");
        }
        for p in [1e-9, 1e-4, 0.01, 0.024, 0.3, 0.5, 0.77, 0.976, 0.999_9] {
            let z = normal_quantile(p);
            assert!((normal_cdf(z) / p - 1.0).abs() < 1e-6, "{p}: {z}");
        }
    }

    fn lengths(mean: u64, sd: u64, max: u64, overlong: Overlong) -> Vec<u64> {
        let stats = LengthStats {
            mean,
            sd,
            max,
            overlong,
        };
        let mut rng = SplitMix(SEED);
        (0..20_000).map(|_| draw(&mut rng, stats)).collect()
    }

    #[test]
    fn dropped_sequences_leave_the_distribution_below_the_limit() {
        // ms-swift's dataset (3,234 +- 2,548 tokens) at L = 1,024: cut, most sequences are exactly L; dropped,
        // none is, and the lengths kept rise towards L as the normal's density does below its mean.
        let cut = lengths(3234, 2548, 1024, Overlong::Cut);
        let dropped = lengths(3234, 2548, 1024, Overlong::Drop);
        let at_limit = |v: &[u64]| v.iter().filter(|&&n| n == 1024).count() as f64 / v.len() as f64;
        assert!(at_limit(&cut) > 0.7, "{}", at_limit(&cut));
        assert!(at_limit(&dropped) < 0.01, "{}", at_limit(&dropped));
        assert!(dropped.iter().all(|&n| (1..=1024).contains(&n)));
        let share =
            |lo: u64, hi: u64| dropped.iter().filter(|&&n| n > lo && n <= hi).count() as f64;
        // The normal's density at 1,024 against 0 tokens: exp((z0^2 - z1^2) / 2), z the distance in deviations.
        let (z0, z1) = (3234.0 / 2548.0, (3234.0 - 1024.0) / 2548.0);
        let ratio = share(924, 1024) / share(0, 100);
        let expected = ((z0 * z0 - z1 * z1) / 2.0f64).exp();
        assert!(
            (ratio / expected - 1.0).abs() < 0.15,
            "{ratio} against {expected}"
        );
        // Where the limit is above most of the distribution, dropping and cutting draw alike but for the few cut.
        let (cut, dropped) = (
            lengths(300, 100, 4096, Overlong::Cut),
            lengths(300, 100, 4096, Overlong::Drop),
        );
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
        assert!(
            (mean(&cut) - mean(&dropped)).abs() < 3.0,
            "{} {}",
            mean(&cut),
            mean(&dropped)
        );
    }

    #[test]
    fn a_limit_no_sequence_is_under_draws_at_its_nearer_end() {
        // 50 deviations above the limit: no share of the normal is representable there, so every draw is the
        // limit, as cut; and a deviation of zero is the mean, cut to the limit.
        assert!(lengths(100_000, 1_000, 512, Overlong::Drop)
            .iter()
            .all(|&n| n == 512));
        assert!(lengths(3000, 0, 512, Overlong::Drop)
            .iter()
            .all(|&n| n == 512));
        assert!(lengths(3000, 0, 4096, Overlong::Drop)
            .iter()
            .all(|&n| n == 3000));
        // Far below the mean of a narrow distribution: the lengths near one token.
        assert!(lengths(1, 1, 8, Overlong::Drop)
            .iter()
            .all(|&n| (1..=8).contains(&n)));
    }
}
