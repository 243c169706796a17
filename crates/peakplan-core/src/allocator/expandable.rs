//! Expandable segments (`expandable_segments:True`, Note [Expandable Segments], line 295): each pool
//! reserves address space for 1 1/8 of the device once and maps physical pages into it as requests need them,
//! 2 MiB pages for the small pool and 20 MiB pages for the large one; releasing the cache unmaps the free whole
//! pages. Requests then tile one growing range instead of each leaving a tail in a segment of its own.
//!
//! Modelled: the lowest-address search for room (`find_expandable_block`), page-granular mapping that fails as a
//! whole when the pages do not fit the capacity (`map_block`), merging of the mapped range with free neighbours,
//! and unmapping of free whole pages with the partial pages kept as free blocks (`unmap_block`). Simplified:
//! one stream, so one address range per pool; a mapped page is the only cost (no per-handle driver limits).

use super::block::{Block, PoolKind};
use super::config::{round_up, LARGE_BUFFER_BYTES, SMALL_BUFFER_BYTES};
use super::state::Allocator;

fn page_bytes(kind: PoolKind) -> u64 {
    match kind {
        PoolKind::Small => SMALL_BUFFER_BYTES,
        PoolKind::Large => LARGE_BUFFER_BYTES,
    }
}

impl Allocator {
    /// The base address of the segment holding `addr`.
    fn segment_base(&self, addr: u64) -> u64 {
        self.segments
            .last_up_to((addr, u64::MAX, usize::MAX))
            .map_or(addr, |(base, _, _)| base)
    }

    /// `try_allocate_expandable_block` (line 2296): maps pages until a free block of at
    /// least `size` exists at the lowest address with room, and hands that block to the caller (out of the pool).
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        kind: PoolKind,
        size: u64,
    ) -> Option<usize> {
        let mut candidate = self.find_expandable_block(kind, size)?;
        if !self.slab.blocks[candidate].mapped {
            let want = self.slab.blocks[candidate].size.min(size);
            candidate = self.map_block(candidate, want)?;
        }
        while self.slab.blocks[candidate].size < size {
            let remaining = size - self.slab.blocks[candidate].size;
            let next = self.slab.blocks[candidate].next?;
            if self.slab.blocks[next].mapped {
                return None;
            }
            let want = remaining.min(self.slab.blocks[next].size);
            // Mapping the next range merges it with the candidate before it.
            candidate = self.map_block(next, want)?;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    /// `find_expandable_block` (line 2178): the lowest-address unmapped range (with the free block
    /// just before it, if any) that leads into at least `size` bytes of free or unmapped space; else a new segment
    /// whose whole address range is unmapped.
    fn find_expandable_block(&mut self, kind: PoolKind, size: u64) -> Option<usize> {
        let free_or_unmapped =
            |s: &Self, slot: Option<usize>| slot.filter(|&b| !s.slab.blocks[b].allocated);
        let unmapped: Vec<usize> = self.pools[kind.index()]
            .unmapped
            .iter()
            .map(|(_, _, slot)| slot)
            .collect();
        for slot in unmapped {
            let start = free_or_unmapped(self, self.slab.blocks[slot].prev).unwrap_or(slot);
            let mut bytes: u64 = 0;
            let mut cursor = Some(start);
            while bytes < size {
                let Some(b) = free_or_unmapped(self, cursor) else {
                    break;
                };
                bytes = bytes.saturating_add(self.slab.blocks[b].size);
                cursor = self.slab.blocks[b].next;
            }
            if bytes >= size {
                return Some(start);
            }
        }
        let page = page_bytes(kind);
        let capacity = self.limits.capacity_bytes;
        let address_space = round_up(capacity.saturating_add(capacity / 8), page).max(page);
        let base = self.place_segment(address_space)?;
        self.segments.insert((base, address_space, 0));
        let slot = self.slab.insert(Block {
            addr: base,
            size: address_space,
            requested: 0,
            allocated: false,
            prev: None,
            next: None,
            pool: kind,
            mapped: false,
            expandable: true,
            gc_count_base: 0,
        });
        self.pool(kind).unmapped.insert((base, 0, slot));
        Some(slot)
    }

    /// `map_block` (line 2233): maps the whole pages covering the first `size` bytes of an unmapped block,
    /// all or nothing; the rest stays unmapped after it. Returns the slot of the free mapped block, merged with
    /// its free neighbours and cached in the pool.
    fn map_block(&mut self, slot: usize, size: u64) -> Option<usize> {
        let b = self.slab.blocks[slot].clone();
        let page = page_bytes(b.pool);
        let base = self.segment_base(b.addr);
        let end = round_up((b.addr - base).saturating_add(size), page).min(b.addr - base + b.size);
        let mapped = end - (b.addr - base);
        if mapped == 0 || self.total_reserved.saturating_add(mapped) > self.limits.capacity_bytes {
            return None;
        }
        self.pool(b.pool).unmapped.remove(&(b.addr, 0, slot));
        self.slab.blocks[slot].mapped = true;
        if mapped < b.size {
            let rest = self.slab.insert(Block {
                addr: b.addr + mapped,
                size: b.size - mapped,
                prev: Some(slot),
                ..b
            });
            if let Some(n) = b.next {
                self.slab.blocks[n].prev = Some(rest);
            }
            self.slab.blocks[slot].next = Some(rest);
            self.slab.blocks[slot].size = mapped;
            self.pool(b.pool)
                .unmapped
                .insert((b.addr + mapped, 0, rest));
        }
        self.try_merge_blocks(slot, self.slab.blocks[slot].prev);
        self.try_merge_blocks(slot, self.slab.blocks[slot].next);
        self.insert_free(slot);
        self.total_reserved += mapped;
        self.stats.reserved_bytes.add(mapped);
        self.stats.device_allocs += 1;
        Some(slot)
    }

    /// `unmap_block` (line 2849): unmaps the whole pages inside a free block; the partial pages at either
    /// end stay mapped as free blocks. Returns the slot of the unmapped part (the block itself when nothing was
    /// whole enough to unmap).
    pub(super) fn unmap_block(&mut self, slot: usize) -> usize {
        let b = self.slab.blocks[slot].clone();
        let page = page_bytes(b.pool);
        let base = self.segment_base(b.addr);
        let begin = base + round_up(b.addr - base, page);
        let end = base + (b.addr + b.size - base) / page * page;
        if begin >= end {
            return slot;
        }
        self.remove_free(slot);
        if begin > b.addr {
            let before = self.slab.insert(Block {
                size: begin - b.addr,
                next: Some(slot),
                ..b.clone()
            });
            if let Some(p) = b.prev {
                self.slab.blocks[p].next = Some(before);
            }
            self.slab.blocks[slot].prev = Some(before);
            self.insert_free(before);
        }
        if end < b.addr + b.size {
            let after = self.slab.insert(Block {
                addr: end,
                size: b.addr + b.size - end,
                prev: Some(slot),
                ..b
            });
            if let Some(n) = b.next {
                self.slab.blocks[n].prev = Some(after);
            }
            self.slab.blocks[slot].next = Some(after);
            self.insert_free(after);
        }
        let block = &mut self.slab.blocks[slot];
        block.addr = begin;
        block.size = end - begin;
        block.mapped = false;
        self.try_merge_blocks(slot, self.slab.blocks[slot].prev);
        self.try_merge_blocks(slot, self.slab.blocks[slot].next);
        let (addr, kind) = (self.slab.blocks[slot].addr, self.slab.blocks[slot].pool);
        self.pool(kind).unmapped.insert((addr, 0, slot));
        self.total_reserved = self.total_reserved.saturating_sub(end - begin);
        self.stats.reserved_bytes.sub(end - begin);
        self.stats.device_frees += 1;
        slot
    }

    /// `release_expandable_segment` (line 2798): a segment whose whole range is unmapped is
    /// given up.
    pub(super) fn release_expandable_segment(&mut self, slot: usize) {
        let (addr, kind) = (self.slab.blocks[slot].addr, self.slab.blocks[slot].pool);
        self.pool(kind).unmapped.remove(&(addr, 0, slot));
        self.remove_segment(addr);
        self.slab.remove(slot);
    }
}
