//! What the allocator reports: its counters with their peaks (`DeviceStats`, as `torch.cuda.memory_stats` shows
//! them for the aggregate pool), the out-of-memory error with the figures PyTorch's message states, and the
//! snapshot of segments and their blocks (`snapshot`, line 1915) that a page can draw.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A current value and its high-water mark (`increase_stat` / `decrease_stat`, line 138).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
}

impl Stat {
    pub(super) fn add(&mut self, amount: u64) {
        self.current = self.current.saturating_add(amount);
        self.peak = self.peak.max(self.current);
    }

    pub(super) fn sub(&mut self, amount: u64) {
        self.current = self.current.saturating_sub(amount);
    }
}

/// The allocator's statistics, named as `torch.cuda.memory_stats()` names them (aggregate over both pools).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// `allocated_bytes`: the sizes of the blocks handed out. A block is rounded, and a block that was not
    /// split counts whole (a 6 MiB cached block serving 5 MiB counts 6 MiB).
    pub allocated_bytes: Stat,
    /// `reserved_bytes`: what the segments hold from the device (cudaMalloc'd or mapped).
    pub reserved_bytes: Stat,
    /// `active_bytes`: allocated, plus blocks freed but still used by another stream (none here: one stream).
    pub active_bytes: Stat,
    /// `requested_bytes`: the callers' sizes before rounding.
    pub requested_bytes: Stat,
    /// `inactive_split_bytes`: free blocks inside segments that are partly in use. This is the stranded memory:
    /// cached, free, but not returnable to the device and usable only by requests that fit in it. Blocks of
    /// expandable segments are left out, as PyTorch leaves them out (their free pages can always be unmapped).
    pub inactive_split_bytes: Stat,
    /// `inactive_split`: the number of those blocks.
    pub inactive_split_blocks: Stat,
    /// `segment`: cudaMalloc'd segments. Expandable segments grow by mapping pages, which PyTorch does not count
    /// as segments; see `device_allocs`.
    pub segments: Stat,
    /// `allocation`: blocks handed out.
    pub allocations: Stat,
    /// `num_device_alloc`: cudaMalloc calls plus expandable-segment maps.
    pub device_allocs: u64,
    /// `num_device_free`: cudaFree calls plus expandable-segment unmaps.
    pub device_frees: u64,
    /// `num_alloc_retries`: device requests retried after every cached segment was released.
    pub alloc_retries: u64,
    /// `num_ooms`: out-of-memory errors raised.
    pub ooms: u64,
}

impl Stats {
    /// Reserved but not allocated, now: cached free blocks, the figure PyTorch's OOM message calls "reserved by
    /// PyTorch but unallocated".
    pub fn cached_free_bytes(&self) -> u64 {
        self.reserved_bytes
            .current
            .saturating_sub(self.allocated_bytes.current)
    }
}

/// An allocation the device could not hold even after the allocator released what it could; the figures of
/// PyTorch's "CUDA out of memory" message (`malloc`, line 1354).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfMemory {
    /// The caller's size.
    pub requested_bytes: u64,
    /// "Tried to allocate": the segment size asked of the device (`alloc_size`), not the request.
    pub tried_to_allocate_bytes: u64,
    pub capacity_bytes: u64,
    /// "of which … is free": the capacity less what is reserved.
    pub free_bytes: u64,
    /// "… is allocated by PyTorch".
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// "… is reserved by PyTorch but unallocated": what fragmentation strands.
    pub reserved_unallocated_bytes: u64,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "CUDA out of memory. Tried to allocate {:.2} MiB. GPU 0 has a total capacity of {:.2} MiB of which \
             {:.2} MiB is free. Of the allocated memory {:.2} MiB is allocated by PyTorch, and {:.2} MiB is \
             reserved by PyTorch but unallocated.",
            mib(self.tried_to_allocate_bytes),
            mib(self.capacity_bytes),
            mib(self.free_bytes),
            mib(self.allocated_bytes),
            mib(self.reserved_unallocated_bytes),
        )
    }
}

/// One segment of the snapshot: a cudaMalloc'd segment, or one contiguous mapped range of an expandable segment
/// (as PyTorch's snapshot reports them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The simulated device address of its first byte; segments are listed in address order.
    pub address: u64,
    pub total_bytes: u64,
    pub allocated_bytes: u64,
    /// From the large pool (requests over 1 MiB), else the small one.
    pub is_large: bool,
    pub is_expandable: bool,
    /// Its blocks in address order; they tile the segment.
    pub blocks: Vec<BlockInfo>,
}

/// One block of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// From the segment's start.
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// The caller's size before rounding; 0 for a free block.
    pub requested_bytes: u64,
    pub allocated: bool,
}
