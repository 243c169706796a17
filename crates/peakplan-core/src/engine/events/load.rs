//! Loading as the allocator sees it: the weights layer by layer with the load transient, what DeepSpeed's
//! `initialize` makes and drops, and the buffers made at the first forward and kept.

use super::parts::split;
use super::{bytes, tag, Builder, Count, Tag};

impl Builder<'_, '_> {
    /// Loading: the embedding and an untied head apart where they are whole on this GPU, then each layer's
    /// weights, constants and adapters (the stage's totals, an even share a layer), quantized with the load
    /// transient beside them.
    pub(super) fn setup(&mut self) {
        let (s, r, w) = (&self.st.setup, &self.st.resident, &self.st.work);
        let (arch, plan) = (s.arch, s.plan);
        let whole = s.zero < 3 && !(plan.cpu_offload && plan.zero >= 3);
        let embedding = if whole {
            arch.embedding_params() as Count * s.d.weight
        } else {
            0.0
        };
        let head = if whole && !arch.tied_embeddings && !s.head_quantized {
            arch.lm_head_params() as Count * s.d.weight
        } else {
            0.0
        };
        let (embedding, head) = if embedding + head <= r.base_weights {
            (embedding, head)
        } else {
            (0.0, 0.0)
        };
        self.seq.alloc(tag(Tag::Embedding, 0), bytes(embedding));
        self.seq.alloc(tag(Tag::Head, 0), bytes(head));
        self.seq
            .alloc(tag(Tag::DdpBuckets, 0), bytes(w.ddp_buckets));
        self.seq
            .alloc(tag(Tag::InputBuffers, 0), bytes(r.input_buffers));
        self.seq
            .alloc(tag(Tag::VllmShare, 0), bytes(self.st.generation.vllm));
        // ZeRO-3's reduce bucket (made with the optimizer, after partitioning: here first, as the load moment
        // counts it, being small beside the weights).
        self.seq
            .alloc(tag(Tag::ReduceBuckets, 0), bytes(w.reduce_buckets.resident));
        // ZeRO-3 without `zero.Init`: the whole model first; the first parameter's partition (the embedding's)
        // is made beside all of it, then each layer's whole weights give way to its partition.
        let whole = if r.loaded_whole > 0.0 {
            split(r.loaded_whole, self.layers)
        } else {
            Vec::new()
        };
        for (i, &part) in whole.iter().enumerate() {
            self.seq.alloc(tag(Tag::LoadedWhole, i as u64), part);
        }
        self.seq
            .alloc(tag(Tag::FirstPartition, 0), bytes(r.first_partition));
        // The base weights less what went apart: exact, as all are whole numbers.
        let rest = r.base_weights - embedding - head - bytes(r.first_partition) as Count;
        let layer_weights = split(rest, self.layers);
        let constants = split(r.quant_constants, self.layers);
        let adapters = split(r.adapter_weights, self.layers);
        for i in 0..self.layers as usize {
            if self.seq.over {
                return;
            }
            let i64 = i as u64;
            if !whole.is_empty() {
                self.seq.free(tag(Tag::LoadedWhole, i64));
            }
            self.seq
                .alloc(tag(Tag::LayerWeights, i64), layer_weights[i]);
            self.seq.alloc(tag(Tag::QuantConstants, i64), constants[i]);
            self.seq.alloc(tag(Tag::Adapters, i64), adapters[i]);
            self.seq
                .alloc(tag(Tag::LoadTransient, 0), bytes(w.load_transient));
            self.seq.free(tag(Tag::LoadTransient, 0));
        }
        // Under `zero.Init`, the head made whole before its partition, the last module made.
        self.seq
            .alloc(tag(Tag::LoadTransient, 1), bytes(r.constructed_whole));
        self.seq.free(tag(Tag::LoadTransient, 1));
        // A preference task's reference copy, loaded after the policy.
        self.seq.alloc(
            tag(Tag::ReferenceWeights, 0),
            bytes(self.st.reference.weights),
        );
        // DeepSpeed's `initialize` under ZeRO-3: its hooks gather the largest trainable parameter whole beside
        // the kept gradient partitions (the timeline's third load moment); the step makes its own gradients.
        let [gathered, kept] = self.st.timeline.hook_gather;
        self.seq.alloc(tag(Tag::LoadTransient, 2), bytes(gathered));
        self.seq.alloc(tag(Tag::LoadTransient, 3), bytes(kept));
        self.seq.free(tag(Tag::LoadTransient, 3));
        self.seq.free(tag(Tag::LoadTransient, 2));
    }

    /// Offloaded checkpoints' reload buffers, one block each: made at the first forward, kept through training.
    pub(super) fn reload_buffers(&self) -> Vec<u64> {
        let v = self.st.acts.reload_buffers;
        if v > 0.0 {
            split(v, super::super::activations::RELOAD_BUFFERS)
        } else {
            Vec::new()
        }
    }
}
