//! Blocks and pools: the allocator's bookkeeping of device memory. A block is a byte range of a segment, free or
//! handed out; a segment's blocks form a list in address order (`prev`/`next`), and each pool keeps its free
//! blocks ordered by (size, address) so a best-fit search is one ordered lookup, as `BlockComparatorSize`
//! (line 746) orders them (one stream, so the stream key drops out; the sets are [`super::sorted`]).

use super::sorted::SortedSet;

/// Small (≤ 1 MiB requests) or large pool (`get_pool`, line 2444).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum PoolKind {
    Small,
    Large,
}

impl PoolKind {
    pub fn index(self) -> usize {
        match self {
            PoolKind::Small => 0,
            PoolKind::Large => 1,
        }
    }
}

/// One block (`struct Block`, line 209). Blocks live in a slab and refer to their neighbours by slot, so a
/// merge or an address change never invalidates a handle held elsewhere.
#[derive(Clone, Debug)]
pub(super) struct Block {
    pub addr: u64,
    pub size: u64,
    /// The caller's size before rounding, while allocated.
    pub requested: u64,
    pub allocated: bool,
    pub prev: Option<usize>,
    pub next: Option<usize>,
    pub pool: PoolKind,
    /// False for the unmapped (reserved address space only) parts of an expandable segment.
    pub mapped: bool,
    pub expandable: bool,
    /// The pool's search count when the block entered the free set, so its age is the searches since
    /// (`gc_count_base`, `insert_into_blocks`, line 281).
    pub gc_count_base: u64,
}

impl Block {
    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
}

/// A pool (`struct BlockPool`, line 186): its free mapped blocks by (size, address, slot), its
/// unmapped expandable ranges by (address, 0, slot), and the count of searches that ages blocks for the garbage
/// collector.
#[derive(Clone, Debug, Default)]
pub(super) struct Pool {
    pub free: SortedSet,
    pub unmapped: SortedSet,
    pub get_free_blocks_call_count: u64,
}

/// The slab of blocks: freed slots are reused, so a long replay does not grow it.
#[derive(Clone, Debug, Default)]
pub(super) struct Slab {
    pub blocks: Vec<Block>,
    vacant: Vec<usize>,
    is_vacant: Vec<bool>,
    /// Bumped each time a slot is reused, so an id handed out for an earlier occupant no longer matches.
    generation: Vec<u32>,
}

impl Slab {
    pub fn insert(&mut self, block: Block) -> usize {
        match self.vacant.pop() {
            Some(slot) => {
                self.blocks[slot] = block;
                self.is_vacant[slot] = false;
                self.generation[slot] = self.generation[slot].wrapping_add(1);
                slot
            }
            None => {
                self.blocks.push(block);
                self.is_vacant.push(false);
                self.generation.push(0);
                self.blocks.len() - 1
            }
        }
    }

    pub fn remove(&mut self, slot: usize) {
        // A vacant slot keeps stale contents; nothing refers to it until `insert` overwrites it.
        if !self.is_vacant[slot] {
            self.is_vacant[slot] = true;
            self.vacant.push(slot);
        }
    }

    /// The id of the block now in `slot`: its generation and slot, never 0.
    pub fn id(&self, slot: usize) -> u64 {
        (u64::from(self.generation[slot]) << 32) | (slot as u64 + 1)
    }

    /// The slot an id names, if that block still exists and is allocated.
    pub fn slot_of(&self, id: u64) -> Option<usize> {
        let slot = usize::try_from((id & 0xFFFF_FFFF).checked_sub(1)?).ok()?;
        let live = slot < self.blocks.len() && !self.is_vacant[slot] && self.blocks[slot].allocated;
        (live && self.id(slot) == id).then_some(slot)
    }

    /// The slots of the blocks that exist.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.blocks.len()).filter(|&slot| !self.is_vacant[slot])
    }
}
