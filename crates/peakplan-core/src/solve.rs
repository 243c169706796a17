//! The inverse questions: the largest micro-batch and the longest sequence that fit a memory budget.

use crate::arch::Architecture;
use crate::engine::estimate;
use crate::plan::{Plan, MAX_BATCH, MAX_SEQ};

/// Which figure must stay under the budget.
fn needed_bytes(arch: &Architecture, plan: &Plan) -> u64 {
    estimate(arch, plan).device_bytes
}

/// Largest value in `1..=max` for which `fits` holds, given that it is monotone (true then false); None if 1 fails.
fn largest(max: u64, mut fits: impl FnMut(u64) -> bool) -> Option<u64> {
    if !fits(1) {
        return None;
    }
    // Exponential probe first: most answers are small, and it keeps the search short.
    let mut lo = 1u64;
    let mut hi = 2u64;
    while hi <= max && fits(hi) {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let mut hi = hi.min(max + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// The largest micro-batch for which `nvidia-smi` memory stays within `capacity_bytes`, keeping the rest of the plan.
pub fn max_batch(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<u64> {
    let mut p = plan.clone();
    largest(MAX_BATCH, |b| {
        p.micro_batch = b;
        needed_bytes(arch, &p) <= capacity_bytes
    })
}

/// The longest sequence for which `nvidia-smi` memory stays within `capacity_bytes`, keeping the rest of the plan.
pub fn max_seq(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<u64> {
    let mut p = plan.clone();
    largest(MAX_SEQ, |s| {
        p.seq_len = s;
        needed_bytes(arch, &p) <= capacity_bytes
    })
}
