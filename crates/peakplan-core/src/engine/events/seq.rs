//! The sequence being built: its events, the bytes each live tag holds, and the cap on how many it makes.

use super::{bytes, tag, Count, Tag};
use crate::allocator::{Event, TagTable};

/// A burst of transients: the parts made before it, and its tensors' bytes.
pub(super) type Bursts = (usize, Vec<u64>);

/// A moment's missing fraction of a byte per part stays under this (see the module's rounding rule).
const ROUNDING_SLACK: u64 = 8;

/// The events, and the bytes live after them as the steady-state step sees them.
pub(super) struct Seq {
    pub(super) events: Vec<Event>,
    pub(super) sizes: TagTable,
    pub(super) live: u64,
    /// Events made so far (those taken away into runs included), and the most to make: past it, `over` is set
    /// and nothing more is kept.
    pub(super) made: usize,
    pub(super) max_events: usize,
    pub(super) over: bool,
}

impl Default for Seq {
    fn default() -> Self {
        Seq {
            events: Vec::new(),
            sizes: TagTable::default(),
            live: 0,
            made: 0,
            max_events: usize::MAX,
            over: false,
        }
    }
}

impl Seq {
    pub(super) fn push(&mut self, event: Event) {
        if self.made >= self.max_events {
            self.over = true;
            return;
        }
        self.made += 1;
        self.events.push(event);
    }

    pub(super) fn alloc(&mut self, tag: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        debug_assert!(
            self.over || !self.sizes.contains(tag),
            "tag {tag:#x} allocated twice"
        );
        self.push(Event::Alloc { tag, bytes });
        self.sizes.insert(tag, bytes);
        self.live = self.live.saturating_add(bytes);
    }

    pub(super) fn free(&mut self, tag: u64) {
        if let Some(b) = self.sizes.remove(tag) {
            self.push(Event::Free { tag });
            self.live = self.live.saturating_sub(b);
        }
    }

    pub(super) fn size(&self, tag: u64) -> u64 {
        self.sizes.get(tag).unwrap_or(0)
    }
    /// Transient tensors made in turn, each while the live bytes stay within `cap`, then let go.
    pub(super) fn burst(&mut self, sizes: &[u64], cap: u64) {
        let mut made = 0;
        for &size in sizes.iter().filter(|&&size| size > 0) {
            if self.live.saturating_add(size) > cap {
                break;
            }
            self.alloc(tag(Tag::Transient, made), size);
            made += 1;
        }
        for k in 0..made {
            self.free(tag(Tag::Transient, k));
        }
    }

    /// `parts` made in turn, under tags `first_tag + k`, with each burst made and let go before the part its
    /// position names (bursts past the last part after it).
    pub(super) fn make_among(
        &mut self,
        first_tag: u64,
        parts: &[u64],
        bursts: &[Bursts],
        cap: u64,
    ) {
        let mut next = 0;
        for (j, &part) in parts.iter().enumerate() {
            while next < bursts.len() && bursts[next].0 <= j {
                self.burst(&bursts[next].1, cap);
                next += 1;
            }
            self.alloc(first_tag + j as u64, part);
        }
        for (_, sizes) in &bursts[next..] {
            self.burst(sizes, cap);
        }
    }

    /// A moment of the timeline whose total is `total`: the fraction of a byte the truncated parts lost.
    pub(super) fn moment(&mut self, total: Count) {
        let want = bytes(total);
        if want > self.live && want - self.live < ROUNDING_SLACK {
            let t = tag(Tag::Rounding, 0);
            self.alloc(t, want - self.live);
            self.free(t);
        }
    }
}
