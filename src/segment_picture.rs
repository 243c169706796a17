//! The caching allocator's segments at the step's peak as a picture's data: totals, and a bar a segment of its
//! blocks' runs in use and free (the panel, `panels/segments.rs`, draws it).

use peakplan_core::allocator::Segment;
use peakplan_core::units::format_bytes;

/// A segment drawn: its size, and its blocks as runs of one state (in use or free) in address order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bar {
    pub total_bytes: u64,
    /// (bytes, in use) runs that tile the segment.
    pub runs: Vec<(u64, bool)>,
}

/// What the picture says: totals at the peak and the bars, the large pool's segments one by one and the small
/// pool's (2 MiB each, a few hundred at most) as one bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    pub segments: usize,
    pub reserved_bytes: u64,
    /// What the step's tensors asked for at the peak (the estimate's peak allocated).
    pub in_use_bytes: u64,
    /// Reserved but not handed out at the peak: free blocks, and the rounding of those handed out.
    pub free_bytes: u64,
    pub bars: Vec<Bar>,
}

impl Bar {
    /// Adds a segment's blocks, a run continuing the bar's last where they are alike.
    fn add(&mut self, s: &Segment) {
        self.total_bytes += s.total_bytes;
        for b in &s.blocks {
            match self.runs.last_mut() {
                Some((bytes, used)) if *used == b.allocated => *bytes += b.size_bytes,
                _ => self.runs.push((b.size_bytes, b.allocated)),
            }
        }
    }
}

impl Picture {
    pub fn of(segments: &[Segment]) -> Picture {
        let reserved: u64 = segments.iter().map(|s| s.total_bytes).sum();
        let in_use: u64 = segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.allocated)
            .map(|b| b.requested_bytes)
            .sum();
        let (mut bars, mut small) = (Vec::new(), Bar::default());
        for s in segments {
            if s.is_large {
                let mut bar = Bar::default();
                bar.add(s);
                bars.push(bar);
            } else {
                small.add(s);
            }
        }
        if small.total_bytes > 0 {
            bars.push(small);
        }
        Picture {
            segments: segments.len(),
            reserved_bytes: reserved,
            in_use_bytes: in_use,
            free_bytes: reserved - in_use.min(reserved),
            bars,
        }
    }

    pub fn words(&self) -> String {
        format!(
            "{} segments, {} reserved at the peak: {} in use by the step's tensors, {} cached but free (blocks no \
             tensor of that moment fits, and rounding).",
            self.segments,
            format_bytes(self.reserved_bytes),
            format_bytes(self.in_use_bytes),
            format_bytes(self.free_bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::allocator::BlockInfo;

    fn segment(is_large: bool, blocks: &[(u64, u64, bool)]) -> Segment {
        let mut offset = 0;
        let blocks = blocks
            .iter()
            .map(|&(size_bytes, requested_bytes, allocated)| {
                let b = BlockInfo {
                    offset_bytes: offset,
                    size_bytes,
                    requested_bytes,
                    allocated,
                };
                offset += size_bytes;
                b
            })
            .collect();
        Segment {
            address: 0,
            total_bytes: offset,
            allocated_bytes: 0,
            is_large,
            is_expandable: false,
            blocks,
        }
    }

    #[test]
    fn a_picture_counts_what_is_in_use_and_draws_the_small_pool_as_one_bar() {
        let p = Picture::of(&[
            segment(
                true,
                &[(1024, 1000, true), (512, 0, false), (512, 500, true)],
            ),
            segment(false, &[(2048, 0, false)]),
            segment(false, &[(1024, 1024, true), (1024, 0, false)]),
            segment(true, &[(4096, 4096, true)]),
        ]);
        assert_eq!((p.segments, p.reserved_bytes), (4, 10240));
        assert_eq!(p.in_use_bytes, 1000 + 500 + 1024 + 4096);
        assert_eq!(p.free_bytes, 10240 - p.in_use_bytes);
        // The large segments one by one, then the small pool's together; adjacent blocks alike are one run.
        assert_eq!(
            p.bars,
            vec![
                Bar {
                    total_bytes: 2048,
                    runs: vec![(1024, true), (512, false), (512, true)]
                },
                Bar {
                    total_bytes: 4096,
                    runs: vec![(4096, true)]
                },
                Bar {
                    total_bytes: 4096,
                    runs: vec![(2048, false), (1024, true), (1024, false)]
                },
            ]
        );
        assert!(p.words().starts_with("4 segments,"));
    }
}
