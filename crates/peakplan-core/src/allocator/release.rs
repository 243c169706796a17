//! Giving memory back to the device: whole cached segments (`release_block`), the oversize ones a failed request
//! needs (`release_available_cached_blocks`), every unsplit one (`release_cached_blocks`, which `empty_cache`
//! is), and the aged ones the garbage collector frees once reserved memory passes its threshold.

use super::block::PoolKind;
use super::state::Allocator;

impl Allocator {
    /// `release_block` (line 2814): a whole free segment goes back to the device (cudaFree).
    pub(super) fn release_block(&mut self, slot: usize) {
        self.remove_free(slot);
        let b = &self.slab.blocks[slot];
        let (addr, size) = (b.addr, b.size);
        self.remove_segment(addr);
        self.total_reserved = self.total_reserved.saturating_sub(size);
        self.stats.segments.sub(1);
        self.stats.reserved_bytes.sub(size);
        self.stats.device_frees += 1;
        self.slab.remove(slot);
    }

    /// Whether `release_block` may take this block: a free segment that is one block. PyTorch calls it on
    /// whatever block the searches below land on; on a split or expandable block that would cudaFree an inner
    /// pointer or trip an assert, so the simulator leaves such a block where it is (no case met in practice:
    /// blocks of `max_split_size` and more are never split).
    fn releasable(&self, slot: usize) -> bool {
        let b = &self.slab.blocks[slot];
        !b.is_split() && !b.expandable
    }

    /// `release_available_cached_blocks` (line 2727): with `max_split_size` set, frees
    /// the smallest cached oversize block of at least the request (or of `max_split_size` for a smaller
    /// request); failing one, frees oversize blocks from the largest down until as much is freed, and reports
    /// whether it was enough. The blocks it frees stay freed either way, as in the source.
    pub(super) fn release_available_cached_blocks(&mut self, kind: PoolKind, size: u64) -> bool {
        let max_split = self.limits.max_split_bytes;
        if max_split == u64::MAX {
            return false;
        }
        let key = size.max(max_split);
        let pool = &self.pools[kind.index()];
        let first = pool.free.from((key, 0, 0)).next();
        if let Some((_, _, slot)) = first {
            if !self.releasable(slot) {
                return false;
            }
            self.release_block(slot);
            return true;
        }
        let mut released: u64 = 0;
        while released < key {
            let Some((block_size, _, slot)) = self.pools[kind.index()].free.last() else {
                break;
            };
            if block_size < max_split || !self.releasable(slot) {
                break;
            }
            released = released.saturating_add(block_size);
            self.release_block(slot);
        }
        released >= key
    }

    /// `release_cached_blocks` (line 2771): every cached segment that is one free block goes back
    /// to the device, large pool first; expandable segments unmap their free pages instead (`release_blocks`,
    /// line 2915). Partly used segments stay, with their free blocks: that is the stranded memory.
    pub(super) fn release_cached_blocks(&mut self) {
        self.release_blocks(PoolKind::Large);
        self.release_blocks(PoolKind::Small);
    }

    fn release_blocks(&mut self, kind: PoolKind) {
        let free: Vec<usize> = self.pools[kind.index()]
            .free
            .iter()
            .map(|(_, _, slot)| slot)
            .collect();
        let mut to_unmap = Vec::new();
        for slot in free {
            if self.slab.blocks[slot].expandable {
                to_unmap.push(slot);
            } else if !self.slab.blocks[slot].is_split() {
                self.release_block(slot);
            }
        }
        for slot in to_unmap {
            let slot = self.unmap_block(slot);
            if !self.slab.blocks[slot].is_split() && !self.slab.blocks[slot].mapped {
                self.release_expandable_segment(slot);
            }
        }
    }

    /// `garbage_collect_cached_blocks` (line 2565): once reserved memory exceeds the
    /// threshold fraction of the capacity, frees unsplit large-pool cached segments whose age (pool searches
    /// since they were cached) is at least the average age, round after round, until the excess is reclaimed
    /// or nothing more can go. PyTorch runs it only under a memory fraction; the capacity here is that fraction.
    pub(super) fn garbage_collect_cached_blocks(&mut self) {
        let Some(threshold) = self.limits.gc_threshold else {
            return;
        };
        let gc_threshold = (threshold * self.limits.capacity_bytes as f64) as u64;
        if self.total_reserved <= gc_threshold {
            return;
        }
        let target = self.total_reserved - gc_threshold;
        let large = PoolKind::Large.index();
        let now = self.pools[large].get_free_blocks_call_count;
        let age = |b: &super::block::Block| now.saturating_sub(b.gc_count_base);
        let freeable = |s: &Self| -> Vec<(usize, u64)> {
            s.pools[large]
                .free
                .iter()
                .map(|(_, _, slot)| slot)
                .filter(|&slot| s.releasable(slot))
                .map(|slot| (slot, age(&s.slab.blocks[slot])))
                .collect()
        };
        let mut candidates = freeable(self);
        let mut total_age: u64 = candidates.iter().map(|c| c.1).sum();
        let mut reclaimed: u64 = 0;
        while reclaimed < target && !candidates.is_empty() {
            let age_threshold = total_age as f64 / candidates.len() as f64;
            let mut freed_any = false;
            // A round frees every old enough block, not stopping at the target, so collection runs rarely.
            for &(slot, block_age) in &candidates {
                if block_age as f64 >= age_threshold {
                    freed_any = true;
                    reclaimed = reclaimed.saturating_add(self.slab.blocks[slot].size);
                    total_age -= block_age;
                    self.release_block(slot);
                }
            }
            if !freed_any {
                break;
            }
            candidates = freeable(self);
        }
    }
}
