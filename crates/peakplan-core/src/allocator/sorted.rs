//! The allocator's ordered sets (a pool's free blocks by size, its unmapped ranges and the segments by address):
//! keys in sorted vectors, one per size class of their first part, so a search and the move an insertion or a
//! removal makes are within a few keys, and a best-fit search past its own class is one look at a bitmap.

/// The one key of the allocator's ordered sets: (size or address, address or 0, slot).
pub(super) type Key = (u64, u64, usize);

/// Where a key is: its class and its index there.
pub(super) type At = (usize, usize);

/// Bits after a first part's leading one that pick its class.
const SUB_BITS: u32 = 3;

/// Classes: `2^SUB_BITS` a power of two, so every 64-bit first part has one.
const CLASSES: usize = 64 << SUB_BITS;

/// A first part's class: its power of two and the next `SUB_BITS` bits (each power of two cut in eight), so
/// classes order keys as their first parts do, and the keys of a class differ by less than an eighth of their size.
fn class(first: u64) -> usize {
    if first < 1 << SUB_BITS {
        return first as usize;
    }
    let log = 63 - first.leading_zeros();
    ((log as usize) << SUB_BITS) + ((first >> (log - SUB_BITS)) & ((1 << SUB_BITS) - 1)) as usize
}

/// The keys of one class as a sorted vector. A key's first two parts are searched packed into one 128-bit number,
/// its slot apart (only keys equal in both parts, which the allocator's sets never hold, compare slots).
#[derive(Clone, Debug, Default)]
struct Class {
    packed: Vec<u128>,
    slots: Vec<usize>,
}

fn pack(key: Key) -> u128 {
    (u128::from(key.0) << 64) | u128::from(key.1)
}

impl Class {
    fn len(&self) -> usize {
        self.packed.len()
    }

    /// Where `key` is, or where it would go, among the keys at `lo..hi`, which the caller knows hold its place.
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

    fn find(&self, key: Key) -> Result<usize, usize> {
        self.find_in(key, 0, self.len())
    }

    fn key(&self, at: usize) -> Key {
        let p = self.packed[at];
        ((p >> 64) as u64, p as u64, self.slots[at])
    }

    fn insert_at(&mut self, at: usize, key: Key) {
        self.packed.insert(at, pack(key));
        self.slots.insert(at, key.2);
    }

    fn remove_at(&mut self, at: usize) {
        self.packed.remove(at);
        self.slots.remove(at);
    }

    /// Puts `new` (of this class, not in the set) in the place of the key at `at`: the keys between the two places
    /// move by one, where a removal and an insertion would each move the class's tail.
    fn replace_at(&mut self, at: usize, new: Key) {
        let (p, len) = (pack(new), self.len());
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
}

/// An ordered set of keys: its classes in order, each sorted. The sets hold tens to a few hundred keys; in the
/// browser sorted vectors beat a B-tree's node walk (a replay took half the time), and classes cut a search to a
/// few keys (one vector of every key made its searches a quarter of a replay in wasm, Dec 2026).
#[derive(Clone, Debug, Default)]
pub(super) struct SortedSet {
    /// By class, grown to the highest class used.
    classes: Vec<Class>,
    /// A bit for each class that holds keys.
    held: [u64; CLASSES / 64],
}

impl SortedSet {
    /// The first class from `from` on that holds keys.
    fn next_held(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.held.get(word)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.held.get(word)?;
        }
    }

    fn mark(&mut self, c: usize) {
        let held = self.classes[c].len() > 0;
        let bit = 1u64 << (c % 64);
        if held {
            self.held[c / 64] |= bit;
        } else {
            self.held[c / 64] &= !bit;
        }
    }

    fn key(&self, at: At) -> Key {
        self.classes[at.0].key(at.1)
    }

    /// Where `key` is, or where it would go, in its class.
    fn find(&self, key: Key) -> Result<At, At> {
        let c = class(key.0);
        match self.classes.get(c) {
            Some(class) => class.find(key).map(|i| (c, i)).map_err(|i| (c, i)),
            None => Err((c, 0)),
        }
    }

    /// The first key from `key` on, and where it is.
    fn first_at(&self, key: Key) -> Option<At> {
        let (c, i) = match self.find(key) {
            Ok(at) | Err(at) => at,
        };
        if self.classes.get(c).is_some_and(|class| i < class.len()) {
            return Some((c, i));
        }
        self.next_held(c + 1).map(|c| (c, 0))
    }

    pub fn insert(&mut self, key: Key) {
        if let Err((c, i)) = self.find(key) {
            if self.classes.len() <= c {
                self.classes.resize_with(c + 1, Class::default);
            }
            self.classes[c].insert_at(i, key);
            self.mark(c);
        }
    }

    pub fn remove(&mut self, key: &Key) {
        if let Ok(at) = self.find(*key) {
            self.remove_at(at);
        }
    }

    /// The first key from `key` on, and where it is, left in the set.
    pub fn first_from(&self, key: Key) -> Option<(At, Key)> {
        self.first_at(key).map(|at| (at, self.key(at)))
    }

    /// Removes the key at `at` (a place [`SortedSet::first_from`] gave, the set unchanged since).
    pub fn remove_at(&mut self, at: At) {
        self.classes[at.0].remove_at(at.1);
        self.mark(at.0);
    }

    /// Puts `new` (not in the set) in the place of the key at `at` (a place [`SortedSet::first_from`] gave, the
    /// set unchanged since): within a class, the keys between the two places move by one. What a split (the rest
    /// of a block replaces it) and a merge (the merged block replaces a neighbour) do to a pool's free set.
    pub fn replace_at(&mut self, at: At, new: Key) {
        if class(new.0) == at.0 {
            self.classes[at.0].replace_at(at.1, new);
        } else {
            self.remove_at(at);
            self.insert(new);
        }
    }

    /// Puts `new` in the place of `old`, or inserts it where `old` is not in the set.
    pub fn replace(&mut self, old: &Key, new: Key) {
        match self.find(*old) {
            Ok(at) => self.replace_at(at, new),
            Err(_) => self.insert(new),
        }
    }

    /// The keys from place `at` on (`None`: none), in order.
    fn keys_from(&self, at: Option<At>) -> Keys<'_> {
        let (class, index) = at.unwrap_or((CLASSES, 0));
        Keys {
            set: self,
            class,
            index,
        }
    }

    /// The keys from `key` on, in order.
    pub fn from(&self, key: Key) -> Keys<'_> {
        self.keys_from(self.first_at(key))
    }

    /// The highest class below `before` that holds keys.
    fn prev_held(&self, before: usize) -> Option<usize> {
        let before = before.min(CLASSES);
        let mut word = before / 64;
        let mut bits = match before % 64 {
            0 => 0,
            r => self.held[word] & (u64::MAX >> (64 - r)),
        };
        loop {
            if bits != 0 {
                return Some(word * 64 + 63 - bits.leading_zeros() as usize);
            }
            word = word.checked_sub(1)?;
            bits = self.held[word];
        }
    }

    /// The last key up to `key` (included).
    pub fn last_up_to(&self, key: Key) -> Option<Key> {
        let (c, end) = match self.find(key) {
            Ok((c, i)) => (c, i + 1),
            Err(at) => at,
        };
        if end > 0 {
            return Some(self.classes[c].key(end - 1));
        }
        let c = self.prev_held(c)?;
        Some(self.classes[c].key(self.classes[c].len() - 1))
    }

    /// The last key.
    pub fn last(&self) -> Option<Key> {
        self.last_up_to((u64::MAX, u64::MAX, usize::MAX))
    }

    pub fn iter(&self) -> Keys<'_> {
        self.keys_from(Some((0, 0)))
    }

    pub fn len(&self) -> usize {
        self.classes.iter().map(Class::len).sum()
    }
}

/// Keys in order from a place on: a cursor that skips empty classes by their bits.
pub(super) struct Keys<'s> {
    set: &'s SortedSet,
    class: usize,
    index: usize,
}

impl Iterator for Keys<'_> {
    type Item = Key;

    fn next(&mut self) -> Option<Key> {
        loop {
            if let Some(class) = self.set.classes.get(self.class) {
                if self.index < class.len() {
                    self.index += 1;
                    return Some(class.key(self.index - 1));
                }
            }
            self.class = self.set.next_held(self.class + 1)?;
            self.index = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn classes_order_keys_as_their_first_parts() {
        let firsts = [
            0,
            1,
            3,
            4,
            5,
            7,
            8,
            511,
            512,
            513,
            640,
            767,
            768,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ];
        for pair in firsts.windows(2) {
            assert!(class(pair[0]) <= class(pair[1]), "{pair:?}");
        }
        assert!(firsts.iter().all(|&f| class(f) < CLASSES));
        assert_eq!(class(u64::MAX), CLASSES - 1);
    }

    #[test]
    fn a_sorted_set_behaves_as_an_ordered_set() {
        // Random inserts, removals, replacements (in place or by key, within a class and across classes) and
        // lookups, on keys with many equal first and second parts, against a BTreeSet; every traversal compared.
        let mut set = SortedSet::default();
        let mut reference: BTreeSet<Key> = BTreeSet::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let key = |next: &mut dyn FnMut(u64) -> u64| {
            let first = [512, 640, 1024, 1536, 2048, 1 << 30, (1 << 30) + 512, 0][next(8) as usize];
            (first, next(5) << 40, next(4) as usize)
        };
        for _ in 0..20_000 {
            let k = key(&mut next);
            match next(5) {
                0 | 1 => {
                    set.insert(k);
                    reference.insert(k);
                }
                2 => {
                    set.remove(&k);
                    reference.remove(&k);
                }
                3 => {
                    let found = set.first_from(k);
                    assert_eq!(found.map(|f| f.1), reference.range(k..).next().copied());
                    if let Some((at, old)) = found.filter(|_| !reference.contains(&k)) {
                        set.replace_at(at, k);
                        reference.remove(&old);
                        reference.insert(k);
                    } else if let Some((at, old)) = found {
                        set.remove_at(at);
                        reference.remove(&old);
                    }
                }
                _ => {
                    let old = key(&mut next);
                    if !reference.contains(&k) {
                        set.replace(&old, k);
                        reference.remove(&old);
                        reference.insert(k);
                    }
                }
            }
            let probe = key(&mut next);
            assert!(set.iter().eq(reference.iter().copied()));
            assert!(set.from(probe).eq(reference.range(probe..).copied()));
            assert_eq!(
                set.last_up_to(probe),
                reference.range(..=probe).next_back().copied()
            );
            assert_eq!(set.last(), reference.iter().next_back().copied());
            assert_eq!(set.len(), reference.len());
        }
    }
}
