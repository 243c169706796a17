//! A simulator of PyTorch's CUDA caching allocator: given the order in which a step allocates and frees its
//! tensors, what the allocator reserves from the device, what it strands, and when it runs out of memory.
//!
//! # Source
//!
//! It follows `c10/cuda/CUDACachingAllocator.cpp` of the PyTorch 2.5 line, as read in the stored copy of
//! pytorch/pytorch at commit `001074d25084fdb87a799823e395a50f5ec044d3`: main in August 2024, a few weeks before
//! the `release/2.5` branch cut (it has IPC for expandable segments, #130890, not yet the fbcode guard of
//! #132890, and not `max_non_split_rounding_mb`, #136174, which 2.6 adds to `get_free_block`). The index holds no
//! tagged v2.5.0 copy to compare with. Every "line N" in these docs is a line of that copy, counted from its text
//! (line 429, `prop.requestedHandleTypes`, agrees with PR #130890's review anchor).
//!
//! # What is modelled
//!
//! - request rounding (`round_size`, optional `roundup_power2_divisions`) and the 1 EB refusal; a 0-byte request
//!   gets [`BlockId::EMPTY`] without touching the allocator, as `NativeCachingAllocator::allocate` does;
//! - the small (≤ 1 MiB) and large pools and their segment sizes (`get_allocation_size`);
//! - best fit (`get_free_block`) with the `max_split_size_mb` rules, splitting (`should_split`) and merging on
//!   free (`free_block`, `try_merge_blocks`);
//! - the miss path of `malloc`: garbage collection past `garbage_collection_threshold`, a new segment, then
//!   `release_available_cached_blocks` and retry, then `release_cached_blocks` and retry, then out of memory
//!   with the figures of PyTorch's message;
//! - expandable segments (the `expandable` module's doc says what is simplified), `empty_cache`, the statistics of
//!   `torch.cuda.memory_stats` and a snapshot of segments and blocks.
//!
//! # What is not
//!
//! One device and one stream (the default one): no cross-stream frees, events or `record_stream`, so a freed
//! block is reusable at once; no CUDA graphs or private pools; no free-memory callbacks; no per-size-interval
//! `roundup_power2_divisions` list (one value for all sizes); `expandable_segments` is fixed for the allocator's
//! life. The capacity is the memory the allocator may reserve (the per-process fraction), applied both as
//! PyTorch's fraction check and as the device's own limit on mapped pages. Addresses are simulated: segments are
//! laid out one after another in a 64-bit space.
//!
//! It never panics: unknown ids are ignored, sizes saturate, and every failure is an [`OutOfMemory`] value.

mod block;
mod config;
mod expandable;
mod release;
mod settle;
mod sorted;
mod state;
mod stats;
mod tags;

pub(crate) use tags::TagTable;

pub use config::{
    get_allocation_size, round_size, roundup_power2_next_division, AllocatorConfig,
    LARGE_BUFFER_BYTES, MAX_REQUEST_BYTES, MIN_BLOCK_BYTES, MIN_LARGE_ALLOC_BYTES,
    ROUND_LARGE_BYTES, SMALL_BUFFER_BYTES, SMALL_SIZE_BYTES,
};
pub use settle::{Moment, Run, Settled, MAX_UNSETTLED_PIECES};
pub use state::{Allocator, BlockId};
pub use stats::{BlockInfo, OutOfMemory, Segment, Stat, Stats};

use block::PoolKind;
use serde::{Deserialize, Serialize};
use std::hash::{BuildHasher, Hasher};

impl Allocator {
    /// An empty allocator: nothing reserved.
    pub fn new(config: AllocatorConfig) -> Allocator {
        Allocator::with_limits(config::Limits::new(&config))
    }

    /// Allocates `size_bytes` (`DeviceCachingAllocator::malloc`).
    pub fn malloc(&mut self, size_bytes: u64) -> Result<BlockId, OutOfMemory> {
        self.malloc_block(size_bytes)
    }

    /// Frees an allocation; an unknown, empty or already freed id does nothing.
    pub fn free(&mut self, id: BlockId) {
        self.free_id(id);
    }

    /// `torch.cuda.empty_cache()` (`emptyCache` calls `release_cached_blocks`): every cached segment that is
    /// wholly free goes back to the device; expandable segments unmap their free pages.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// `torch.cuda.reset_peak_memory_stats()` (`resetPeakStats`): every high-water mark falls to its current
    /// value, as a measurement that starts at a chosen step does.
    pub fn reset_peak_stats(&mut self) {
        let s = &mut self.stats;
        for stat in [
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
            &mut s.active_bytes,
            &mut s.requested_bytes,
            &mut s.inactive_split_bytes,
            &mut s.inactive_split_blocks,
            &mut s.segments,
            &mut s.allocations,
        ] {
            stat.peak = stat.current;
        }
    }

    /// Every segment with its blocks, in address order (`snapshot`, line 1915): an expandable segment shows
    /// as one segment per contiguous mapped range.
    pub fn snapshot(&self) -> Vec<Segment> {
        let blocks = &self.slab.blocks;
        let mut segments: Vec<Segment> = self
            .slab
            .live()
            .filter(|&slot| {
                let b = &blocks[slot];
                b.mapped && b.prev.is_none_or(|p| !blocks[p].mapped)
            })
            .map(|head| {
                let first = &blocks[head];
                let mut segment = Segment {
                    address: first.addr,
                    total_bytes: 0,
                    allocated_bytes: 0,
                    is_large: first.pool == PoolKind::Large,
                    is_expandable: first.expandable,
                    blocks: Vec::new(),
                };
                let mut cursor = Some(head);
                while let Some(slot) = cursor.filter(|&s| blocks[s].mapped) {
                    let b = &blocks[slot];
                    segment.blocks.push(BlockInfo {
                        offset_bytes: b.addr - first.addr,
                        size_bytes: b.size,
                        requested_bytes: b.requested,
                        allocated: b.allocated,
                    });
                    segment.total_bytes += b.size;
                    if b.allocated {
                        segment.allocated_bytes += b.size;
                    }
                    cursor = b.next;
                }
                segment
            })
            .collect();
        segments.sort_by_key(|s| s.address);
        segments
    }
}

/// One step of a replayed sequence. A tag names an allocation; allocating a tag that is live again adds a
/// second allocation under it, and a free releases the latest one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Alloc {
        tag: u64,
        bytes: u64,
    },
    Free {
        tag: u64,
    },
    /// An allocation that persists once made: made unless the tag is live, as a torch optimizer creates its state
    /// for a parameter at its first step and finds it at every later one.
    AllocOnce {
        tag: u64,
        bytes: u64,
    },
    /// `torch.cuda.empty_cache()`, as some frameworks call between steps.
    EmptyCache,
}

/// Replays `events` on a fresh allocator and returns its statistics, or the first out-of-memory error.
/// Freeing a tag that is not live does nothing.
pub fn replay(config: &AllocatorConfig, events: &[Event]) -> Result<Stats, OutOfMemory> {
    replay_steps(config, events, &[])
}

/// Replays `setup` and then each of `steps` in order on one fresh allocator (its cache carried from each step to
/// the next), and returns its statistics, or the first out-of-memory error. Steps may come from different plans,
/// such as one plan estimated at several sequence lengths.
pub fn replay_steps(
    config: &AllocatorConfig,
    setup: &[Event],
    steps: &[&[Event]],
) -> Result<Stats, OutOfMemory> {
    let mut r = Replay::new(config.clone());
    r.run(setup)?;
    for step in steps {
        r.run(step)?;
    }
    Ok(r.allocator.stats())
}

/// An allocator and the tags of its live allocations: a sequence of [`Event`]s replayed piece by piece, so a
/// caller can act between pieces (empty the cache, reset the peaks) as a training script does between steps.
pub struct Replay {
    pub allocator: Allocator,
    /// The latest allocation of each tag (its [`BlockId`]'s number); earlier ones still live under the same tag
    /// wait in `shadowed`, latest last (a sequence that reuses a live tag is rare: the engine's never does).
    tags: TagTable,
    shadowed: Vec<(u64, u64)>,
}

impl Replay {
    /// A fresh allocator.
    pub fn new(config: AllocatorConfig) -> Replay {
        Replay {
            allocator: Allocator::new(config),
            tags: TagTable::default(),
            shadowed: Vec::new(),
        }
    }

    /// Replays `events`; freeing a tag that is not live does nothing.
    pub fn run(&mut self, events: &[Event]) -> Result<(), OutOfMemory> {
        let Replay {
            allocator,
            tags,
            shadowed,
        } = self;
        for event in events {
            match *event {
                Event::AllocOnce { tag, .. } if tags.contains(tag) => {}
                Event::Alloc { tag, bytes } | Event::AllocOnce { tag, bytes } => {
                    let id = allocator.malloc(bytes)?;
                    if let Some(earlier) = tags.insert(tag, id.0) {
                        shadowed.push((tag, earlier));
                    }
                }
                Event::Free { tag } => {
                    if let Some(id) = tags.remove(tag) {
                        allocator.free(BlockId(id));
                        if let Some(at) = shadowed.iter().rposition(|&(t, _)| t == tag) {
                            tags.insert(tag, shadowed.remove(at).1);
                        }
                    }
                }
                Event::EmptyCache => allocator.empty_cache(),
            }
        }
        Ok(())
    }
}

/// Tags are the caller's own numbers, not attacker-chosen keys, so a multiplicative hash serves (SipHash took
/// a third of a replay's time).
#[derive(Clone, Copy, Default)]
pub(crate) struct TagHash;

#[derive(Default)]
pub(crate) struct TagHasher(u64);

impl BuildHasher for TagHash {
    type Hasher = TagHasher;
    fn build_hasher(&self) -> TagHasher {
        TagHasher(0)
    }
}

impl Hasher for TagHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
