//! Blocks and pools: the allocator's bookkeeping of device memory. A block is a byte range of a segment, free or
//! handed out; a segment's blocks form a list in address order (`prev`/`next`), and each pool keeps its free
//! blocks ordered by (size, address) so a best-fit search is one ordered lookup, as `BlockComparatorSize`
//! (line 746) orders them (one stream, so the stream key drops out).

/// The one key of the allocator's ordered sets (free blocks by size, unmapped ranges and segments by address).
pub(super) type Key = (u64, u64, usize);

/// An ordered set of keys kept as a sorted vector. The sets hold tens to a few hundred entries (a pool's free
/// blocks, the live segments): in the browser a binary search and a short move beat a B-tree's node walk (a
/// replay takes half the time; natively about 1.5 times as long), in far less code. A key's first two parts are
/// searched packed into one 128-bit number, its slot apart (only keys equal in both parts, which the allocator's
/// sets never hold, compare slots): a search is then one integer comparison a step, the replay's hottest loop.
/// (Three vectors of parts, searched by the first part and then the second, were as fast in wasm and 5% slower
/// natively, Dec 2026.)
#[derive(Clone, Debug, Default)]
pub(super) struct SortedSet {
    packed: Vec<u128>,
    slots: Vec<usize>,
}

fn pack(key: Key) -> u128 {
    (u128::from(key.0) << 64) | u128::from(key.1)
}

impl SortedSet {
    /// Where `key` is, or where it would go.
    fn find(&self, key: Key) -> Result<usize, usize> {
        self.find_in(key, 0, self.packed.len())
    }

    /// [`SortedSet::find`] among the keys at `lo..hi`, which the caller knows hold `key`'s place.
    fn find_in(&self, key: Key, lo: usize, hi: usize) -> Result<usize, usize> {
        let p = pack(key);
        let mut at = lo + self.packed[lo..hi].partition_point(|&k| k < p);
        while at < hi && self.packed[at] == p {
            match self.slots[at].cmp(&key.2) {
                std::cmp::Ordering::Less => at += 1,
                std::cmp::Ordering::Equal => return Ok(at),
                std::cmp::Ordering::Greater => break,
            }
        }
        Err(at)
    }

    fn key(&self, at: usize) -> Key {
        let p = self.packed[at];
        ((p >> 64) as u64, p as u64, self.slots[at])
    }

    pub fn insert(&mut self, key: Key) {
        if let Err(at) = self.find(key) {
            self.packed.insert(at, pack(key));
            self.slots.insert(at, key.2);
        }
    }

    pub fn remove(&mut self, key: &Key) {
        if let Ok(at) = self.find(*key) {
            self.packed.remove(at);
            self.slots.remove(at);
        }
    }

    /// The first key from `key` on, and its index, left in the set.
    pub fn first_from(&self, key: Key) -> Option<(usize, Key)> {
        let at = match self.find(key) {
            Ok(at) | Err(at) => at,
        };
        (at < self.packed.len()).then(|| (at, self.key(at)))
    }

    /// Removes the key at `at` (an index [`SortedSet::first_from`] gave, the set unchanged since).
    pub fn remove_at(&mut self, at: usize) {
        self.packed.remove(at);
        self.slots.remove(at);
    }

    /// Puts `new` (not in the set) in the place of the key at `at` (an index [`SortedSet::first_from`] gave, the
    /// set unchanged since): the keys between the two places move by one, where a removal and an insertion would
    /// each move the set's tail. What a split (the rest of a block replaces it) and a merge (the merged block
    /// replaces a neighbour) do to a pool's free set.
    pub fn replace_at(&mut self, at: usize, new: Key) {
        let (p, len) = (pack(new), self.packed.len());
        if (p, new.2) < (self.packed[at], self.slots[at]) {
            let to = match self.find_in(new, 0, at) {
                Ok(to) | Err(to) => to,
            };
            self.packed.copy_within(to..at, to + 1);
            self.slots.copy_within(to..at, to + 1);
            self.packed[to] = p;
            self.slots[to] = new.2;
        } else {
            let to = match self.find_in(new, at + 1, len) {
                Ok(to) | Err(to) => to,
            };
            self.packed.copy_within(at + 1..to, at);
            self.slots.copy_within(at + 1..to, at);
            self.packed[to - 1] = p;
            self.slots[to - 1] = new.2;
        }
    }

    /// Puts `new` in the place of `old`, or inserts it where `old` is not in the set.
    pub fn replace(&mut self, old: &Key, new: Key) {
        match self.find(*old) {
            Ok(at) => self.replace_at(at, new),
            Err(_) => self.insert(new),
        }
    }

    /// The keys from `key` on, in order.
    pub fn from(&self, key: Key) -> impl DoubleEndedIterator<Item = Key> + '_ {
        let at = match self.find(key) {
            Ok(at) | Err(at) => at,
        };
        (at..self.packed.len()).map(|i| self.key(i))
    }

    /// The keys up to `key` (included), in order.
    pub fn up_to(&self, key: Key) -> impl DoubleEndedIterator<Item = Key> + '_ {
        let end = match self.find(key) {
            Ok(at) => at + 1,
            Err(at) => at,
        };
        (0..end).map(|i| self.key(i))
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Key> + '_ {
        (0..self.packed.len()).map(|i| self.key(i))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_sorted_set_behaves_as_an_ordered_set() {
        // Random inserts, removals, replacements (in place or by key, before and after the old place) and
        // lookups, on keys with many equal first and second parts, against a BTreeSet.
        let mut set = SortedSet::default();
        let mut reference: BTreeSet<Key> = BTreeSet::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..20_000 {
            let key = (next(6) * 512, next(5) << 40, next(4) as usize);
            match next(5) {
                0 | 1 => {
                    set.insert(key);
                    reference.insert(key);
                }
                2 => {
                    set.remove(&key);
                    reference.remove(&key);
                }
                3 => {
                    let found = set.first_from(key);
                    assert_eq!(found.map(|f| f.1), reference.range(key..).next().copied());
                    if let Some((at, old)) = found.filter(|_| !reference.contains(&key)) {
                        set.replace_at(at, key);
                        reference.remove(&old);
                        reference.insert(key);
                    } else if let Some((at, old)) = found {
                        set.remove_at(at);
                        reference.remove(&old);
                    }
                }
                _ => {
                    let old = (next(6) * 512, next(5) << 40, next(4) as usize);
                    if !reference.contains(&key) {
                        set.replace(&old, key);
                        reference.remove(&old);
                        reference.insert(key);
                    }
                }
            }
            assert!(set.iter().eq(reference.iter().copied()));
        }
    }
}
