//! The token lengths a run's steps see, step by step, when its sequences vary in length (no packing).
//!
//! A dataset's lengths are described as the sources state them (mean, standard deviation, shortest), taken as a
//! log-normal distribution with that mean and deviation (lengths are positive and right-skewed), sampled at
//! evenly spaced quantiles so the same plan always gives the same steps. Each sample is cut at the plan's `s`
//! (truncation, as `max_length` does), a batch is padded to its longest sample, and the batches come in the
//! order the sampler gives them: shuffled by a fixed permutation (a typical run), grouped by length as
//! transformers' `LengthGroupedSampler` does (mega-batches of 50 batches, each sorted longest first), or sorted
//! shortest first (the worst order for the caching allocator: every step needs larger blocks than any before).

use crate::plan::{Lengths, Plan};

/// Steps a varying-length plan is replayed over: enough for each order's pattern to show, few enough to replay
/// on every slider move.
pub const STEPS: usize = 32;

/// transformers' `LengthGroupedSampler` sorts mega-batches of this many batches by length.
const MEGABATCH_BATCHES: usize = 50;

/// The padded token length of each step's sequences, in the order the run meets them; one step at `s` for a
/// fixed-length plan.
pub fn step_lengths(plan: &Plan) -> Vec<u64> {
    let s = plan.seq_len.max(1);
    if plan.lengths == Lengths::Fixed {
        return vec![s];
    }
    let b = plan.micro_batch.clamp(1, 64) as usize;
    let n = STEPS * b;
    let (mean, sd) = stated_or_assumed(plan);
    let dist = LogNormal::of(mean as f64, sd as f64);
    let lmin = plan.length_min.clamp(1, s);
    let mut samples: Vec<u64> = (0..n)
        .map(|i| {
            let p = (i as f64 + 0.5) / n as f64;
            (dist.quantile(p).round() as u64).clamp(lmin, s)
        })
        .collect();
    permute(&mut samples);
    let mut batches: Vec<u64> = samples
        .chunks(b)
        .map(|c| c.iter().copied().max().unwrap_or(s))
        .collect();
    match plan.lengths {
        Lengths::Fixed | Lengths::Shuffled => {}
        Lengths::Grouped => {
            for mega in batches.chunks_mut(MEGABATCH_BATCHES) {
                mega.sort_unstable_by(|a, b| b.cmp(a));
            }
        }
        Lengths::Sorted => batches.sort_unstable(),
    }
    batches
}

/// The plan's mean and standard deviation of sample lengths, with the assumptions where it states none: a mean of
/// half of `s` and a deviation of half the mean.
pub fn stated_or_assumed(plan: &Plan) -> (u64, u64) {
    let mean = if plan.length_mean > 0 {
        plan.length_mean
    } else {
        (plan.seq_len / 2).max(1)
    };
    let sd = if plan.length_sd > 0 {
        plan.length_sd
    } else {
        mean / 2
    };
    (mean, sd)
}

/// A log-normal distribution given by its mean and standard deviation.
struct LogNormal {
    mu: f64,
    sigma: f64,
}

impl LogNormal {
    fn of(mean: f64, sd: f64) -> LogNormal {
        let mean = mean.max(1.0);
        let sigma2 = (1.0 + (sd.max(0.0) / mean).powi(2)).ln();
        LogNormal {
            mu: mean.ln() - sigma2 / 2.0,
            sigma: sigma2.sqrt(),
        }
    }

    fn quantile(&self, p: f64) -> f64 {
        (self.mu + self.sigma * normal_quantile(p)).exp()
    }
}

/// The standard normal's quantile function (Acklam's rational approximation, relative error below 1.2e-9).
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
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Shuffles in place by a fixed Fisher-Yates permutation (a 64-bit LCG with a constant seed): the shuffled order
/// is "typical", and the same plan always replays the same steps.
fn permute<T>(v: &mut [T]) {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..v.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_matches_known_points() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_964),
            (0.01, -2.326_348),
            (0.8413, 0.999_815),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-5,
                "{p}: {}",
                normal_quantile(p)
            );
        }
    }

    #[test]
    fn lognormal_keeps_the_stated_mean() {
        let d = LogNormal::of(3234.4, 2547.5);
        let n = 20_000;
        let mean = (0..n)
            .map(|i| d.quantile((i as f64 + 0.5) / n as f64))
            .sum::<f64>()
            / n as f64;
        assert!((mean / 3234.4 - 1.0).abs() < 0.01, "{mean}");
    }
}
