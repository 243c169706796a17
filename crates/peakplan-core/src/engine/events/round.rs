//! GRPO's generation round as allocations: the events of [`super::super::generation`]'s moments, in the order
//! `generate` and the reference's scoring make them.

use super::{bytes, split, tag, total, Builder, Tag};
use crate::allocator::Event;
use crate::engine::count::Count;
use crate::engine::Phase;

impl Builder<'_, '_> {
    /// GRPO's generation round before the first micro-batch (nothing for other tasks): the round's buffered
    /// tensors (made by the first step, replaced by each later one: kept), then `generate` (the prefill with
    /// every layer's cache at the prompt, the cache grown a token at a time by `torch.cat`, the last token's
    /// sampling), then the reference's scoring a micro-batch at a time.
    pub(super) fn generation_round(&mut self) {
        let st = self.st;
        let plan = st.setup.plan;
        if !plan.task.generates() {
            return;
        }
        let (g, phase) = (
            &st.generation,
            total(&st.timeline.phases[Phase::Generation as usize]),
        );
        self.seq.push(Event::AllocOnce {
            tag: tag(Tag::RoundBuffers, 0),
            bytes: bytes(g.buffered),
        });
        self.buffers(true);
        if g.kv_cache > 0.0 {
            self.seq
                .alloc(tag(Tag::GatheredForGeneration, 0), bytes(g.gathered));
            let layers = self.layers;
            // Each layer's keys, then values, at the prompt, one position short of the end, then at the end.
            let (ends, last) = (
                split(g.prefill_cache / 2.0, layers),
                split(g.kv_cache / 2.0, layers),
            );
            let short = split(g.growing_layer * layers as Count, layers);
            // A layer's keys or values at each of the three lengths have tags of their own.
            let cache =
                |at: u64, i: u64, kv: u64| tag(Tag::GenerationCache, (at * layers + i) * 2 + kv);
            for (i, &part) in ends.iter().enumerate() {
                for kv in 0..2 {
                    self.seq.alloc(cache(0, i as u64, kv), part);
                }
            }
            self.seq
                .alloc(tag(Tag::GenerationWork, 0), bytes(g.prefill));
            self.seq.moment(phase);
            self.seq.free(tag(Tag::GenerationWork, 0));
            for (at, sizes) in [(1, &short), (2, &last)] {
                if at == 2 {
                    self.seq
                        .alloc(tag(Tag::GenerationWork, 1), bytes(g.previous_sampling));
                }
                for (i, &part) in sizes.iter().enumerate() {
                    for kv in 0..2 {
                        // torch.cat makes the longer tensor before the shorter one goes.
                        self.seq.alloc(cache(at, i as u64, kv), part);
                        self.seq.free(cache(at - 1, i as u64, kv));
                    }
                }
            }
            self.seq.moment(phase);
            self.seq.free(tag(Tag::GenerationWork, 1));
            self.seq
                .alloc(tag(Tag::GenerationWork, 2), bytes(g.sampling));
            self.seq.moment(phase);
            self.seq.free(tag(Tag::GenerationWork, 2));
            for i in 0..layers {
                for kv in 0..2 {
                    self.seq.free(cache(2, i, kv));
                }
            }
            self.seq.free(tag(Tag::GatheredForGeneration, 0));
        }
        if st.reference.pass > 0.0 {
            for _ in 0..plan.grad_accumulation.max(1) {
                self.reference_pass(Some(phase));
            }
        }
        self.buffers(false);
    }
}
