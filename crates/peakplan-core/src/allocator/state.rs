//! The allocation path: `malloc` (line 1198) searches the request's pool for the best fit, and on a miss asks
//! the device for a segment, releasing cached segments and retrying before it gives up; the found block is split
//! when the rules allow; `free` returns a block to its pool, merged with its free neighbours.

use super::block::{Block, Pool, PoolKind, Slab};
use super::config::{
    get_allocation_size, round_size, Limits, MAX_REQUEST_BYTES, MIN_BLOCK_BYTES, SMALL_SIZE_BYTES,
};
use super::sorted::{At, Key, SortedSet};
use super::stats::{OutOfMemory, Stats};

/// A handed-out allocation (its block's slot and that slot's generation, so a stale id matches nothing).
/// `BlockId::EMPTY` is what a 0-byte request gets: PyTorch hands out a null pointer
/// without calling the allocator (`NativeCachingAllocator::allocate`), and freeing it does nothing.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct BlockId(pub u64);

impl BlockId {
    pub const EMPTY: BlockId = BlockId(0);
}

/// The simulated caching allocator of one device and one stream. See the module doc for what it models.
#[derive(Clone, Debug)]
pub struct Allocator {
    pub(super) limits: Limits,
    pub(super) slab: Slab,
    pub(super) pools: [Pool; 2],
    /// Every live segment as (base address, size, 0): where new segments may go, and the expandable segments'
    /// page grid.
    pub(super) segments: SortedSet,
    pub(super) next_addr: u64,
    /// `total_allocated_memory`: bytes held from the device (equal to `stats.reserved_bytes.current`).
    pub(super) total_reserved: u64,
    pub(super) stats: Stats,
}

impl Allocator {
    pub(super) fn with_limits(limits: Limits) -> Allocator {
        Allocator {
            limits,
            slab: Slab::default(),
            pools: [Pool::default(), Pool::default()],
            segments: SortedSet::default(),
            // Address 0 stays unused, as a null pointer would.
            next_addr: 1 << 21,
            total_reserved: 0,
            stats: Stats::default(),
        }
    }

    /// Forgets the segment based at `base`.
    pub(super) fn remove_segment(&mut self, base: u64) {
        let found = self.segments.from((base, 0, 0)).next();
        if let Some(key) = found.filter(|k| k.0 == base) {
            self.segments.remove(&key);
        }
    }

    pub(super) fn pool(&mut self, kind: PoolKind) -> &mut Pool {
        &mut self.pools[kind.index()]
    }

    /// Stamps a block going back to its pool's free set with its age base (`insert_into_blocks`), and gives its
    /// pool and its key there.
    fn stamp_free(&mut self, slot: usize) -> (PoolKind, Key) {
        let kind = self.slab.blocks[slot].pool;
        let count = self.pools[kind.index()].get_free_blocks_call_count;
        let b = &mut self.slab.blocks[slot];
        b.gc_count_base = count;
        (kind, (b.size, b.addr, slot))
    }

    /// Puts a free mapped block into its pool's free set, stamping its age base (`insert_into_blocks`).
    pub(super) fn insert_free(&mut self, slot: usize) {
        let (kind, key) = self.stamp_free(slot);
        self.pool(kind).free.insert(key);
    }

    /// [`Allocator::insert_free`] in the place of `old` in the pool's free set, which leaves it.
    fn replace_free(&mut self, old: &Key, slot: usize) {
        let (kind, key) = self.stamp_free(slot);
        self.pool(kind).free.replace(old, key);
    }

    /// [`Allocator::insert_free`] in the place of the key at `at` of the pool's free set, which leaves it.
    fn replace_free_at(&mut self, at: At, slot: usize) {
        let (kind, key) = self.stamp_free(slot);
        self.pool(kind).free.replace_at(at, key);
    }

    pub(super) fn remove_free(&mut self, slot: usize) {
        let b = &self.slab.blocks[slot];
        let (key, kind) = ((b.size, b.addr, slot), b.pool);
        self.pool(kind).free.remove(&key);
    }

    /// The request path of `DeviceCachingAllocator::malloc` (line 1198).
    pub(super) fn malloc_block(&mut self, orig_size: u64) -> Result<BlockId, OutOfMemory> {
        if orig_size == 0 {
            return Ok(BlockId::EMPTY);
        }
        if orig_size >= MAX_REQUEST_BYTES {
            return Err(self.out_of_memory(orig_size, orig_size));
        }
        let size = round_size(orig_size, self.limits.divisions);
        let kind = if size <= SMALL_SIZE_BYTES {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        let alloc_size = get_allocation_size(size);
        // Where the found block is still in its pool's free set, its place there.
        let (mut found, still_free) = match self.get_free_block(kind, size) {
            Some((slot, at)) => (Some(slot), at),
            None => (None, None),
        };
        if found.is_none() {
            if self.limits.gc_threshold.is_some() {
                self.garbage_collect_cached_blocks();
            }
            // The order of `malloc`'s fallbacks: a new segment; else free oversize cached blocks and retry; else
            // free every unsplit cached segment and retry once more (the retry PyTorch counts).
            // Releasing before growing (see `AllocatorConfig::release_before_growing`) takes the full device's
            // path at once.
            if !self.limits.release_before_growing {
                found = self.alloc_block(kind, size, alloc_size, false);
            }
            if found.is_none() && self.release_available_cached_blocks(kind, size) {
                found = self.alloc_block(kind, size, alloc_size, false);
            }
            if found.is_none() {
                self.release_cached_blocks();
                found = self.alloc_block(kind, size, alloc_size, true);
            }
        }
        let Some(slot) = found else {
            self.stats.ooms += 1;
            return Err(self.out_of_memory(orig_size, alloc_size));
        };
        let split = self.should_split(slot, size);
        self.alloc_found_block(slot, size, orig_size, split, still_free);
        Ok(BlockId(self.slab.id(slot)))
    }

    pub(super) fn out_of_memory(&self, requested_bytes: u64, tried_bytes: u64) -> OutOfMemory {
        let allocated = self.stats.allocated_bytes.current;
        OutOfMemory {
            requested_bytes,
            tried_to_allocate_bytes: tried_bytes,
            capacity_bytes: self.limits.capacity_bytes,
            free_bytes: self
                .limits
                .capacity_bytes
                .saturating_sub(self.total_reserved),
            allocated_bytes: allocated,
            reserved_bytes: self.total_reserved,
            reserved_unallocated_bytes: self.total_reserved.saturating_sub(allocated),
        }
    }

    /// `get_free_block` (line 2497): the smallest free block of at least `size` in the pool, unless it
    /// is oversize (≥ `max_split_size`) and the request is not, or the request is oversize and the block exceeds
    /// it by `kLargeBuffer` (20 MiB) or more. Only that one candidate is considered: a refused best fit is a miss.
    /// The block's slot, and its place in the pool's free set where it is left there for
    /// [`Allocator::alloc_found_block`] to take out.
    fn get_free_block(&mut self, kind: PoolKind, size: u64) -> Option<(usize, Option<At>)> {
        if self.limits.gc_threshold.is_some() {
            // Searches age the cached blocks only while garbage collection is on, as in the source.
            self.pool(kind).get_free_blocks_call_count += 1;
        }
        let max_split = self.limits.max_split_bytes;
        if !self.limits.expandable {
            // Outside expandable segments the best fit is the first candidate: one search finds it, and it stays
            // in the set until the split that follows puts the rest of it in its place.
            let (at, best) = self.pools[kind.index()].free.first_from((size, 0, 0))?;
            let block_size = best.0;
            let refused = (size < max_split && block_size >= max_split)
                || (size >= max_split
                    && block_size >= size.saturating_add(super::config::LARGE_BUFFER_BYTES));
            return (!refused).then_some((best.2, Some(at)));
        }
        let best = {
            let mut candidates = self.pools[kind.index()].free.from((size, 0, 0));
            let mut best = candidates.next()?;
            if self.slab.blocks[best.2].expandable {
                // In an expandable segment a block's worth is what it can grow to: a free block before the
                // unmapped tail counts the tail. Walk on while the next block would grow to less.
                for next in candidates {
                    if !self.slab.blocks[best.2].expandable
                        || self.expandable_size(next.2) >= self.expandable_size(best.2)
                    {
                        break;
                    }
                    best = next;
                }
            }
            best
        };
        let block_size = best.0;
        if size < max_split && block_size >= max_split {
            return None;
        }
        if size >= max_split && block_size >= size.saturating_add(super::config::LARGE_BUFFER_BYTES)
        {
            return None;
        }
        self.pool(kind).free.remove(&best);
        Some((best.2, None))
    }

    fn expandable_size(&self, slot: usize) -> u64 {
        let b = &self.slab.blocks[slot];
        let tail = match b.next {
            Some(n) if !self.slab.blocks[n].mapped => self.slab.blocks[n].size,
            _ => 0,
        };
        b.size.saturating_add(tail)
    }

    /// `alloc_block` (line 2629): a new segment of `alloc_size`, if the reserved total stays within the
    /// capacity (`allowed_memory_maximum`); with expandable segments, pages mapped into the pool's segment.
    fn alloc_block(
        &mut self,
        kind: PoolKind,
        size: u64,
        alloc_size: u64,
        is_retry: bool,
    ) -> Option<usize> {
        if is_retry {
            self.stats.alloc_retries += 1;
        }
        if self.total_reserved.saturating_add(alloc_size) > self.limits.capacity_bytes {
            return None;
        }
        if self.limits.expandable {
            return self.try_allocate_expandable_block(kind, size);
        }
        let base = self.place_segment(alloc_size)?;
        self.segments.insert((base, alloc_size, 0));
        self.total_reserved += alloc_size;
        self.stats.segments.add(1);
        self.stats.reserved_bytes.add(alloc_size);
        self.stats.device_allocs += 1;
        Some(self.slab.insert(Block {
            addr: base,
            size: alloc_size,
            requested: 0,
            allocated: false,
            prev: None,
            next: None,
            pool: kind,
            mapped: true,
            expandable: false,
            gc_count_base: 0,
        }))
    }

    /// A base address for a new segment of `size` bytes: past every segment so far, or, once the address space
    /// has been walked through, the first gap that fits (so a long replay never runs out of addresses).
    pub(super) fn place_segment(&mut self, size: u64) -> Option<u64> {
        if let Some(end) = self.next_addr.checked_add(size) {
            let base = self.next_addr;
            self.next_addr = end;
            return Some(base);
        }
        let mut cursor: u64 = 1 << 21;
        for (base, segment_size, _) in self.segments.iter() {
            if base.saturating_sub(cursor) >= size {
                return Some(cursor);
            }
            cursor = cursor.max(base.saturating_add(segment_size));
        }
        cursor.checked_add(size).map(|_| cursor)
    }

    /// `should_split` (line 2477): a small-pool block (or any block under expandable segments) splits if
    /// 512 bytes or more remain; a large-pool block only for a request under `max_split_size` and if more than
    /// 1 MiB remains, so a large block keeps a tail of up to 1 MiB rather than cache a sliver.
    fn should_split(&self, slot: usize, size: u64) -> bool {
        let b = &self.slab.blocks[slot];
        let remaining = b.size.saturating_sub(size);
        if b.pool == PoolKind::Small || self.limits.expandable {
            remaining >= MIN_BLOCK_BYTES
        } else {
            size < self.limits.max_split_bytes && remaining > SMALL_SIZE_BYTES
        }
    }

    /// `alloc_found_block` (line 1384): hands the block out, first cutting `size` off its front when
    /// it splits (the rest goes back to the pool), and keeps the inactive-split figures. `still_free`: the block's
    /// place in its pool's free set, where it is still there.
    fn alloc_found_block(
        &mut self,
        slot: usize,
        size: u64,
        orig_size: u64,
        split: bool,
        still_free: Option<At>,
    ) {
        let already_split = self.slab.blocks[slot].is_split();
        let expandable = self.slab.blocks[slot].expandable;
        if split {
            let b = self.slab.blocks[slot].clone();
            let rest = self.slab.insert(Block {
                addr: b.addr + size,
                size: b.size - size,
                requested: 0,
                allocated: false,
                prev: Some(slot),
                next: b.next,
                ..b
            });
            if let Some(n) = b.next {
                self.slab.blocks[n].prev = Some(rest);
            }
            let block = &mut self.slab.blocks[slot];
            block.next = Some(rest);
            block.size = size;
            match still_free {
                Some(at) => self.replace_free_at(at, rest),
                None => self.insert_free(rest),
            }
            if !expandable {
                if already_split {
                    // An already split free block shrinks by what is handed out.
                    self.stats.inactive_split_bytes.sub(size);
                } else {
                    self.stats.inactive_split_bytes.add(b.size - size);
                    self.stats.inactive_split_blocks.add(1);
                }
            }
        } else {
            if let Some(at) = still_free {
                let kind = self.slab.blocks[slot].pool;
                self.pool(kind).free.remove_at(at);
            }
            if already_split && !expandable {
                let whole = self.slab.blocks[slot].size;
                self.stats.inactive_split_bytes.sub(whole);
                self.stats.inactive_split_blocks.sub(1);
            }
        }
        let block = &mut self.slab.blocks[slot];
        block.allocated = true;
        block.requested = orig_size;
        let block_size = block.size;
        self.stats.allocations.add(1);
        self.stats.allocated_bytes.add(block_size);
        self.stats.active_bytes.add(block_size);
        self.stats.requested_bytes.add(orig_size);
    }

    /// `free` (line 1476): the block leaves the allocated figures and goes back to its pool. An unknown or
    /// already freed id is ignored.
    pub(super) fn free_id(&mut self, id: BlockId) {
        let Some(slot) = self.slab.slot_of(id.0) else {
            return;
        };
        let block = &mut self.slab.blocks[slot];
        block.allocated = false;
        let size = block.size;
        self.stats.allocations.sub(1);
        self.stats.allocated_bytes.sub(size);
        self.free_block(slot);
    }

    /// `free_block` (line 2330): merges the block with its free neighbours and caches it; a block that
    /// stays part of a partly used segment counts as inactive split (stranded) memory.
    fn free_block(&mut self, slot: usize) {
        let original_size = self.slab.blocks[slot].size;
        let requested = self.slab.blocks[slot].requested;
        self.slab.blocks[slot].requested = 0;
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i128 = 0;
        // A merged neighbour's key left in the free set, for the merged block to take its place.
        let mut left = None;
        for neighbour in [self.slab.blocks[slot].prev, self.slab.blocks[slot].next] {
            let subsumed = self.merge_blocks(slot, neighbour, Some(&mut left));
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= i128::from(subsumed);
            }
        }
        match left {
            Some(old) => self.replace_free(&old, slot),
            None => self.insert_free(slot),
        }
        let b = &self.slab.blocks[slot];
        if b.is_split() {
            net_blocks += 1;
            net_bytes += i128::from(b.size);
        }
        if !b.expandable {
            apply_net(
                &mut self.stats.inactive_split_blocks,
                i128::from(net_blocks),
            );
            apply_net(&mut self.stats.inactive_split_bytes, net_bytes);
        }
        self.stats.active_bytes.sub(original_size);
        self.stats.requested_bytes.sub(requested);
    }

    /// `try_merge_blocks` (line 2411): `dst` absorbs the neighbour `src` if it is free and in the
    /// same mapped state; returns the bytes absorbed (0 when not merged). `dst` must not be in a pool set.
    pub(super) fn try_merge_blocks(&mut self, dst: usize, src: Option<usize>) -> u64 {
        self.merge_blocks(dst, src, None)
    }

    /// [`Allocator::try_merge_blocks`]; where `leave` is given and holds no key yet, a mapped `src`'s key stays
    /// in the free set and goes there instead, for `dst` to take its place.
    fn merge_blocks(
        &mut self,
        dst: usize,
        src: Option<usize>,
        leave: Option<&mut Option<Key>>,
    ) -> u64 {
        let Some(src) = src else {
            return 0;
        };
        let s = self.slab.blocks[src].clone();
        if s.allocated || s.mapped != self.slab.blocks[dst].mapped {
            return 0;
        }
        if self.slab.blocks[dst].prev == Some(src) {
            let d = &mut self.slab.blocks[dst];
            d.addr = s.addr;
            d.prev = s.prev;
            if let Some(p) = s.prev {
                self.slab.blocks[p].next = Some(dst);
            }
        } else {
            self.slab.blocks[dst].next = s.next;
            if let Some(n) = s.next {
                self.slab.blocks[n].prev = Some(dst);
            }
        }
        self.slab.blocks[dst].size += s.size;
        let kind = s.pool;
        if s.mapped {
            let key = (s.size, s.addr, src);
            match leave {
                Some(left) if left.is_none() => *left = Some(key),
                _ => self.pool(kind).free.remove(&key),
            }
        } else {
            self.pool(kind).unmapped.remove(&(s.addr, 0, src));
        }
        self.slab.remove(src);
        s.size
    }
}

fn apply_net(stat: &mut super::stats::Stat, net: i128) {
    let amount = u64::try_from(net.unsigned_abs()).unwrap_or(u64::MAX);
    if net > 0 {
        stat.add(amount);
    } else {
        stat.sub(amount);
    }
}
