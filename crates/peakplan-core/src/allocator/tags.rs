//! The live allocations of a replay by tag. The engine's tags are a kind in the high 32 bits and a small index in
//! the low ones (`engine::events`); those are kept in an array by kind and index, so the replay's every event is an
//! index instead of a hash lookup (in the page's wasm the hash map's insert and remove were a fifth of a replay).
//! Any other tag (a recorded trace's addresses, say) goes to a hash map, as every tag did before. The engine's
//! sequence builder keeps its live tags' bytes in one too.

use super::TagHash;
use std::collections::HashMap;

/// Kinds kept in the array: the engine's are under 64.
const DIRECT_KINDS: u64 = 64;

/// Indices kept in the array, per kind: the engine's are at most a few thousand (layers times parts).
const DIRECT_INDICES: u64 = 1 << 16;

/// Tag to a number: in a replay, the number of the tag's latest allocation's [`super::BlockId`]; in the engine's
/// sequence builder, the bytes a live tag holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct TagTable {
    /// By kind, then index; grown to the largest index seen, in powers of two.
    direct: Vec<Vec<Option<u64>>>,
    other: HashMap<u64, u64, TagHash>,
}

/// Where a tag lives in the array, if it does.
fn direct_place(tag: u64) -> Option<(usize, usize)> {
    let (kind, index) = (tag >> 32, tag & 0xFFFF_FFFF);
    (kind < DIRECT_KINDS && index < DIRECT_INDICES).then_some((kind as usize, index as usize))
}

impl TagTable {
    pub fn get(&self, tag: u64) -> Option<u64> {
        match direct_place(tag) {
            Some((k, i)) => self
                .direct
                .get(k)
                .and_then(|row| row.get(i))
                .copied()
                .flatten(),
            None => self.other.get(&tag).copied(),
        }
    }

    pub fn contains(&self, tag: u64) -> bool {
        self.get(tag).is_some()
    }

    /// Sets the tag's allocation; the one it replaces, if any.
    pub fn insert(&mut self, tag: u64, id: u64) -> Option<u64> {
        let Some((k, i)) = direct_place(tag) else {
            return self.other.insert(tag, id);
        };
        if self.direct.len() <= k {
            self.direct.resize_with(k + 1, Vec::new);
        }
        let row = &mut self.direct[k];
        if row.len() <= i {
            row.resize((i + 1).next_power_of_two(), None);
        }
        row[i].replace(id)
    }

    pub fn remove(&mut self, tag: u64) -> Option<u64> {
        match direct_place(tag) {
            Some((k, i)) => self.direct.get_mut(k)?.get_mut(i)?.take(),
            None => self.other.remove(&tag),
        }
    }

    /// Every live tag with its allocation, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let direct = self.direct.iter().enumerate().flat_map(|(k, row)| {
            row.iter()
                .enumerate()
                .filter_map(move |(i, id)| id.map(|id| ((k as u64) << 32 | i as u64, id)))
        });
        direct.chain(self.other.iter().map(|(&t, &id)| (t, id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_and_hashed_tags_behave_as_one_map() {
        // Tags in the array, past its kinds, past its indices, and at the edges; against a plain map.
        let tags = [
            0,
            1,
            5 << 32 | 7,
            5 << 32 | 4096,
            63 << 32 | (DIRECT_INDICES - 1),
            63 << 32 | DIRECT_INDICES,
            64 << 32,
            u64::MAX,
            0x7fff_1234_5678,
        ];
        let mut table = TagTable::default();
        let mut plain: HashMap<u64, u64> = HashMap::new();
        for (n, &t) in tags.iter().cycle().take(40).enumerate() {
            let id = n as u64 * 3 + 1;
            if n % 3 == 2 {
                assert_eq!(table.remove(t), plain.remove(&t), "remove {t:#x}");
            } else {
                assert_eq!(table.insert(t, id), plain.insert(t, id), "insert {t:#x}");
            }
            for &u in &tags {
                assert_eq!(table.contains(u), plain.contains_key(&u), "contains {u:#x}");
                assert_eq!(table.get(u), plain.get(&u).copied(), "get {u:#x}");
            }
            let mut listed: Vec<_> = table.iter().collect();
            let mut expected: Vec<_> = plain.iter().map(|(&t, &i)| (t, i)).collect();
            listed.sort_unstable();
            expected.sort_unstable();
            assert_eq!(listed, expected);
        }
        assert_eq!(table.remove(9 << 32 | 3), None, "a kind never seen");
    }
}
