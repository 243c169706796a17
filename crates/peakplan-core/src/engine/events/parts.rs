//! How a stage's totals are cut into the blocks the events allocate: even shares, shares in proportion to
//! tensors' sizes, small parts gathered, the loss in blocks.

use super::bytes;
use crate::allocator::SMALL_SIZE_BYTES;
use crate::engine::count::Count;

/// `total` in `n` parts: the quotient each, the remainder to the last.
pub(super) fn split(total: Count, n: u64) -> Vec<u64> {
    let (t, n) = (bytes(total), n.max(1));
    let mut parts = vec![t / n; n as usize];
    if let Some(last) = parts.last_mut() {
        *last += t % n;
    }
    parts
}

/// A layer's `share` of its saved bytes as its tensors: each of `sizes` (the layer's tensors) scaled to the
/// share, the last taking the remainder, so the parts sum to the share exactly. The stage counts an even share a
/// layer, less than a whole one where the first layer's input needs no gradient: the parts keep the tensors'
/// proportions.
pub(super) fn tensors_of(share: u64, sizes: &[Count]) -> Vec<u64> {
    coalesce_small(proportional(share, sizes))
}

/// `total` in parts in proportion to `sizes`, the last taking the remainder, so the parts sum to it exactly.
pub(super) fn proportional(total: u64, sizes: &[Count]) -> Vec<u64> {
    let whole: Count = sizes.iter().sum();
    let Some((_, first)) = sizes.split_last().filter(|_| whole > 0.0) else {
        return vec![total];
    };
    let mut parts = Vec::with_capacity(sizes.len());
    let mut used = 0u64;
    for &size in first {
        let part = ((size / whole) * total as Count) as u64;
        let part = part.min(total - used);
        parts.push(part);
        used += part;
    }
    parts.push(total - used);
    parts
}

/// Blocks a layer's gradients may take apart (at most 11 linears and its norms, and the embedding's and final
/// norm's beside the first layer's).
pub(super) const PARAM_SLOTS: u64 = 16;

/// The tag index of layer `layer`'s block `k` of one kind.
pub(super) fn param_index(layer: u64, k: usize) -> u64 {
    layer * PARAM_SLOTS + k as u64
}

/// The parts of the small pool's size (1 MiB or less: a norm's statistics, an adapter's rank-wide outputs and
/// 16-bit weight casts) gathered, after the others, into blocks of at most 1 MiB: the caching allocator keeps
/// them in 2 MiB segments of their own either way, apart from the large tensors whose placement decides what a
/// step strands, and each would cost a replay as much as a large tensor.
pub(super) fn coalesce_small(mut parts: Vec<u64>) -> Vec<u64> {
    let small: Vec<u64> = parts
        .iter()
        .copied()
        .filter(|&p| p > 0 && p <= SMALL_SIZE_BYTES)
        .collect();
    parts.retain(|&p| p > SMALL_SIZE_BYTES);
    let mut block = 0;
    for p in small {
        if block + p > SMALL_SIZE_BYTES {
            parts.push(block);
            block = 0;
        }
        block += p;
    }
    if block > 0 {
        parts.push(block);
    }
    parts
}

/// Blocks the loss's memory is cut into at most.
pub(super) const MAX_LOSS_BLOCKS: u64 = 256;

/// `total` in blocks of `block` bytes (the loss's largest block), the remainder last; at most
/// [`MAX_LOSS_BLOCKS`] blocks.
pub(super) fn blocks_of(total: Count, block: Count) -> Vec<u64> {
    let (t, b) = (bytes(total), bytes(block));
    if t == 0 {
        return Vec::new();
    }
    if b == 0 || b >= t {
        return vec![t];
    }
    let b = b.max(t.div_ceil(MAX_LOSS_BLOCKS - 1));
    let mut v = vec![b; (t / b) as usize];
    if t % b > 0 {
        v.push(t % b);
    }
    v
}
