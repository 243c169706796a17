//! Stage 6, reserved and device memory: what PyTorch's caching allocator holds beyond the allocated peak, and
//! what `nvidia-smi` shows beside it (the CUDA context, paged optimizer states).

use super::count::{ceil_div, Count, MIB};
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

/// The reserved and device memory of a step whose allocated peak is `peak`.
pub(super) fn reserved(alloc: Alloc, peak: Count, t: &Transients, paged_states: Count) -> Reserved {
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
    let allocator_slack = rounded - peak + largest_transient;
    let reserved = peak + allocator_slack;
    Reserved {
        allocator_slack,
        reserved,
        device: reserved + CUDA_CONTEXT_BYTES as Count + paged_states,
    }
}
