//! The inverse questions: the largest micro-batch and the longest sequence that fit a memory budget.

use crate::arch::Architecture;
use crate::engine::{estimate_on, estimate_rough, fits_on};
use crate::plan::{Plan, MAX_BATCH, MAX_SEQ};

/// Narrows a bracket where `fits` holds at `good` and fails at `bad` until they are neighbours; returns `good`.
fn close(mut good: u64, mut bad: u64, mut fits: impl FnMut(u64) -> bool) -> u64 {
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if fits(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

/// Largest value in `lo..=hi` for which `fits` holds, given that it is monotone (true then false) and holds at
/// `lo - 1`; `lo - 1` when it fails at `lo`.
fn bisect(lo: u64, hi: u64, mut fits: impl FnMut(u64) -> bool) -> u64 {
    // Exponential probe first: most answers are small, and it keeps the search short.
    let (mut good, mut bad) = (lo - 1, hi + 1);
    let mut step = 1u64;
    while good + step < bad {
        if fits(good + step) {
            good += step;
            step = step.saturating_mul(2);
        } else {
            bad = good + step;
            break;
        }
    }
    close(good, bad, fits)
}

/// Largest value in `1..=max` whose plan (`plan_at`) needs at most `capacity_bytes`, or None if 1 does not fit.
///
/// The replayed estimate costs a hundred rough ones and is no smooth curve: blocks round to 2 MiB, and near the
/// card's limit the allocator releases its cache and retries, so the figure bends and can even fall. The rough
/// estimate picks the first probe; replayed probes then step by the slope between the last two (the rough
/// slope at first) until one fits and one does not, and bisection closes the bracket. The value returned fits by
/// the replay and the next one does not (or is past `max`). The bisection asks only whether a value fits
/// ([`fits_on`]: one replay on the card where a figure may take two).
fn largest(
    arch: &Architecture,
    max: u64,
    capacity_bytes: u64,
    plan_at: impl Fn(u64) -> Plan,
) -> Option<u64> {
    let cap = capacity_bytes;
    let rough = |v: u64| estimate_rough(arch, &plan_at(v)).device_bytes;
    let exact = |v: u64| estimate_on(arch, &plan_at(v), cap).device_bytes;
    // Known results: the largest value that fits and the smallest that does not.
    let (mut good, mut bad) = (0u64, max.saturating_add(1));
    let mut probe = bisect(1, max, |v| rough(v) <= cap).max(1);
    let mut last: Option<(u64, u64)> = None;
    // Step toward the limit until both ends are known.
    while good == 0 || bad > max {
        if probe <= good || probe >= bad {
            break;
        }
        let bytes = exact(probe);
        let fits = bytes <= cap;
        if fits {
            good = probe;
        } else {
            bad = probe;
        }
        if bad - good <= 1 {
            break;
        }
        let slope = match last {
            Some((v, b)) if v != probe => bytes.abs_diff(b) / v.abs_diff(probe),
            _ => {
                let width = (probe / 16).max(1);
                rough(probe.saturating_add(width)).saturating_sub(rough(probe)) / width
            }
        }
        .max(1);
        last = Some((probe, bytes));
        probe = if fits {
            probe.saturating_add((cap - bytes) / slope + 1)
        } else {
            probe.saturating_sub((bytes - cap) / slope + 1)
        };
        // A step that would leave the bracket (or reach 0) goes to its middle instead.
        if probe <= good || probe >= bad {
            probe = good + (bad - good) / 2;
            if probe == 0 {
                probe = 1;
            }
        }
    }
    let good = close(good, bad, |v| fits_on(arch, &plan_at(v), cap));
    (good >= 1).then_some(good)
}

/// One of the two inverse answers, which a page works out in tasks of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Batch,
    Seq,
}

impl Limit {
    /// Both, in the order they are worked out: the longest sequence completes a plan's limits.
    pub const BOTH: [Limit; 2] = [Limit::Batch, Limit::Seq];
}

/// The largest micro-batch for which `nvidia-smi` memory stays within `capacity_bytes`, keeping the rest of the plan.
pub fn max_batch(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<u64> {
    largest(arch, MAX_BATCH, capacity_bytes, |b| Plan {
        micro_batch: b,
        ..plan.clone()
    })
}

/// The longest sequence for which `nvidia-smi` memory stays within `capacity_bytes`, keeping the rest of the plan.
/// Where batch lengths vary, the longest sequence is the data's longest (`lmax`): a stated one moves with `s`,
/// since a longer `s` with the data's longest held would change nothing.
pub fn max_seq(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<u64> {
    largest(arch, MAX_SEQ, capacity_bytes, |s| Plan {
        seq_len: s,
        len_max: plan.len_max.map(|_| s),
        ..plan.clone()
    })
}
