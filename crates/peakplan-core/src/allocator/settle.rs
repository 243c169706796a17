//! Repeated pieces of a sequence replayed until the allocator's state repeats: a step's middle micro-batches
//! allocate and free the same tensors in the same order, so once the allocator (and the tags it holds) is where
//! it was one or a few pieces before, every later piece replays alike and can be skipped.
//!
//! # Why skipping is exact
//!
//! The allocator is deterministic, and what it does next depends on its blocks' sizes, pools and states, the
//! order of their addresses and their offsets in their segments, and, under garbage collection, its free blocks'
//! ages: never on slab slots or block generations, which only name blocks (a slot breaks ties between keys that
//! share an address, which two live blocks never do), nor on where in the address space a segment lies (a new
//! one goes past every other until 2^64 bytes have been placed). [`Shape`] is exactly that state, with each
//! address as its segment's rank and offset and each live tag's block named by its place. When the shape before
//! piece `i` equals the shape before piece `i - p`, pieces `i..` replay as pieces `i - p..` did: the same
//! currents, so no new high-water mark, and the same counts of device calls a cycle, which are added for the
//! cycles skipped.

use super::{Event, OutOfMemory, Replay};

/// Pieces replayed before giving up on a repeat: middle micro-batches settle after one or two pieces, and a
/// sequence that has not after this many is replayed no further (the caller falls back on its rule).
pub const MAX_UNSETTLED_PIECES: u64 = 32;

/// Cycles up to this many pieces long are recognised.
const MAX_PERIOD: usize = 4;

/// A run of events replayed `times` times in a row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Run {
    pub events: Vec<Event>,
    pub times: u64,
}

/// What a run's replay came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Every piece replayed, or skipped once the state repeated.
    Done,
    /// The state had not repeated after [`MAX_UNSETTLED_PIECES`] pieces: the replay stopped there.
    Unsettled,
}

/// Everything about the allocator and its tags that decides what later events do (see the module doc), with
/// addresses as places.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    /// Every block, in address order.
    blocks: Vec<BlockShape>,
    /// The segments' sizes in address order.
    segments: Vec<u64>,
    total_reserved: u64,
    /// The live tags, each with its block's place, sorted by tag; then the shadowed ones, in their order.
    tags: Vec<(u64, Option<Place>)>,
    shadowed: Vec<(u64, Option<Place>)>,
}

/// A block as the allocator decides by it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct BlockShape {
    place: Place,
    size: u64,
    requested: u64,
    /// Allocated, mapped, expandable, large pool: one bit each.
    flags: u8,
    prev: Option<Place>,
    next: Option<Place>,
    /// A free block's age: its pool's searches since it was freed (what garbage collection reads).
    age: u64,
}

/// An address as its segment's rank in address order and the offset into it. Only the order of segments and
/// offsets within them decide anything (best fit breaks ties by address; expandable pages lie on a grid from the
/// segment's base; a new segment goes past every other), so a state whose segments were released and made again
/// further up the address space is the same state.
type Place = (usize, u64);

/// A moment of a replay: the allocator's state as it decides by ([`Shape`]), its counters and its current
/// figures. A later moment at the same shape replays the events that followed the earlier one alike.
#[derive(Clone, Debug)]
pub struct Moment {
    /// A quick first comparison: reserved bytes, segments and blocks, allocated bytes.
    glance: [u64; 4],
    shape: Shape,
    counters: [u64; 5],
    stats: super::Stats,
}

impl Replay {
    /// The replay's state now, for [`Replay::is_at`] and [`Replay::skip_to`].
    pub fn moment(&self) -> Moment {
        Moment {
            glance: self.glance(),
            shape: self.shape(),
            counters: self.counters(),
            stats: self.allocator.stats,
        }
    }

    /// Whether the allocator (and the tags it holds) is where it was at `earlier`: from here the events replayed
    /// after `earlier` replay alike, the same currents, so no new high-water mark (see the module doc).
    pub fn is_at(&self, earlier: &Moment) -> bool {
        self.glance() == earlier.glance && self.shape() == earlier.shape
    }

    /// Stands for replaying again what was replayed from `from` to `to`, where [`Replay::is_at`] `from`: the
    /// counters grow by what they grew then, and the current figures are `to`'s (the peaks stay: none is new). The
    /// allocator's blocks stay where they are, so nothing further should be replayed. False, changing nothing,
    /// where the next segment's address would pass the end of the address space.
    pub fn skip_to(&mut self, from: &Moment, to: &Moment) -> bool {
        if !self.add_counters(from.counters, to.counters, 1) {
            return false;
        }
        let s = &mut self.allocator.stats;
        for (now, then) in [
            (&mut s.allocated_bytes, to.stats.allocated_bytes),
            (&mut s.reserved_bytes, to.stats.reserved_bytes),
            (&mut s.active_bytes, to.stats.active_bytes),
            (&mut s.requested_bytes, to.stats.requested_bytes),
            (&mut s.inactive_split_bytes, to.stats.inactive_split_bytes),
            (&mut s.inactive_split_blocks, to.stats.inactive_split_blocks),
            (&mut s.segments, to.stats.segments),
            (&mut s.allocations, to.stats.allocations),
        ] {
            now.current = then.current;
        }
        true
    }

    fn glance(&self) -> [u64; 4] {
        let a = &self.allocator;
        [
            a.total_reserved,
            a.segments.len() as u64,
            a.slab.live().count() as u64,
            a.stats.allocated_bytes.current,
        ]
    }

    fn shape(&self) -> Shape {
        let a = &self.allocator;
        let blocks = &a.slab.blocks;
        let bases: Vec<u64> = a.segments.iter().map(|k| k.0).collect();
        let place = |addr: u64| -> Place {
            let rank = bases.partition_point(|&b| b <= addr).saturating_sub(1);
            (rank, addr - bases.get(rank).copied().unwrap_or(0).min(addr))
        };
        let tagged = |id: u64| a.slab.slot_of(id).map(|slot| place(blocks[slot].addr));
        // Blocks in address order: their addresses sorted (no two blocks share one), then each block made, where
        // sorting the made blocks moved every one of them at each step.
        let mut by_address: Vec<(u64, usize)> = a
            .slab
            .live()
            .map(|slot| (blocks[slot].addr, slot))
            .collect();
        by_address.sort_unstable();
        let shape_blocks: Vec<_> = by_address
            .into_iter()
            .map(|(_, slot)| {
                let b = &blocks[slot];
                let flags = u8::from(b.allocated)
                    | u8::from(b.mapped) << 1
                    | u8::from(b.expandable) << 2
                    | u8::from(b.pool == super::block::PoolKind::Large) << 3;
                let age = if b.allocated {
                    0
                } else {
                    a.pools[b.pool.index()]
                        .get_free_blocks_call_count
                        .saturating_sub(b.gc_count_base)
                };
                BlockShape {
                    place: place(b.addr),
                    size: b.size,
                    requested: b.requested,
                    flags,
                    prev: b.prev.map(|p| place(blocks[p].addr)),
                    next: b.next.map(|n| place(blocks[n].addr)),
                    age,
                }
            })
            .collect();
        // The table lists the engine's tags in order already; only tags outside its array need the sort.
        let mut tags: Vec<_> = self.tags.iter().map(|(t, id)| (t, tagged(id))).collect();
        if !tags.is_sorted() {
            tags.sort_unstable();
        }
        Shape {
            blocks: shape_blocks,
            segments: a.segments.iter().map(|k| k.1).collect(),
            total_reserved: a.total_reserved,
            tags,
            shadowed: self
                .shadowed
                .iter()
                .map(|&(t, id)| (t, tagged(id)))
                .collect(),
        }
    }

    /// The counters that grow with every device call, which a skipped cycle would have added to, and the next
    /// segment's address, which moves up as segments are released and made again.
    fn counters(&self) -> [u64; 5] {
        let s = &self.allocator.stats;
        let a = &self.allocator;
        [
            s.device_allocs,
            s.device_frees,
            s.alloc_retries,
            s.ooms,
            a.next_addr,
        ]
    }

    /// Replays `run.events` `run.times` times, skipping the pieces after the state repeats (see the module
    /// doc); [`Settled::Unsettled`] if it had not repeated after [`MAX_UNSETTLED_PIECES`] pieces.
    pub fn run_repeated(&mut self, run: &Run) -> Result<Settled, OutOfMemory> {
        // The shapes (and counters) before each of the last pieces, newest last.
        let mut seen: Vec<(Shape, [u64; 5])> = Vec::new();
        let (mut done, mut skipped) = (0u64, false);
        while done < run.times {
            if !skipped && run.times - done > 1 {
                let now = (self.shape(), self.counters());
                if let Some(back) = seen.iter().rev().position(|(s, _)| *s == now.0) {
                    let period = back as u64 + 1;
                    let before = seen[seen.len() - 1 - back].1;
                    let cycles = (run.times - done) / period;
                    // Addresses run out (and segments go into gaps instead) only past 2^64 bytes made: no figure.
                    if !self.add_counters(before, now.1, cycles) {
                        return Ok(Settled::Unsettled);
                    }
                    done += cycles * period;
                    // What is left is less than a cycle: replayed as it comes.
                    skipped = true;
                    continue;
                }
                if done >= MAX_UNSETTLED_PIECES {
                    return Ok(Settled::Unsettled);
                }
                if seen.len() == MAX_PERIOD {
                    seen.remove(0);
                }
                seen.push(now);
            }
            self.run(&run.events)?;
            done += 1;
        }
        Ok(Settled::Done)
    }

    /// Adds what `cycles` more cycles would have counted (each added `now - before`) and moves the next
    /// segment's address as far; false, changing nothing, if that address would pass the end of the address space.
    fn add_counters(&mut self, before: [u64; 5], now: [u64; 5], cycles: u64) -> bool {
        let a = &mut self.allocator;
        let moved = now[4]
            .checked_sub(before[4])
            .and_then(|d| d.checked_mul(cycles))
            .and_then(|d| a.next_addr.checked_add(d));
        let Some(next_addr) = moved else {
            return false;
        };
        a.next_addr = next_addr;
        let s = &mut a.stats;
        for (counter, (b, n)) in [
            &mut s.device_allocs,
            &mut s.device_frees,
            &mut s.alloc_retries,
            &mut s.ooms,
        ]
        .into_iter()
        .zip(before.into_iter().zip(now))
        {
            *counter = counter.saturating_add(n.saturating_sub(b).saturating_mul(cycles));
        }
        true
    }
}
