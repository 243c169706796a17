//! Stage 4b, sharding: what FSDP gathers and which gradients it holds at each moment of a sharded step, from
//! CPU traces of FSDP1 and FSDP2 steps on 2 and 4 processes (`tools/trace/fsdp_step.py`).
//!
//! - The root unit (embeddings, final norm, LM head) is gathered at the start of forward and never resharded
//!   after it (FSDP1 `_post_forward_reshard`, FSDP2's root): its whole 16-bit copy stays beside its shard
//!   until the end of backward.
//! - Forward gathers one decoder layer at a time (no forward prefetch by default). Backward prefetches the next
//!   unit (`BACKWARD_PRE`): the last layer is gathered as soon as the loss's backward starts, and in the layers
//!   the running unit and the next are gathered.
//! - A unit's gradient is whole while its backward runs, then reduce-scattered to a shard. Inside `no_sync`
//!   (accumulation without syncing every micro-batch) it stays whole on every GPU until the step's last
//!   micro-batch: the full trainable gradient, not divided by the GPUs.
//! - FSDP1 units mixing frozen and trainable parameters (LoRA under `wrap=block`) give the whole flat parameter
//!   a gradient: the frozen weights' gradients too, sharded after each unit's backward, whole under `no_sync`.
//!   FSDP2 shards per parameter, so frozen parameters never get one.
//!
//! DeepSpeed and unsharded data parallelism keep the earlier accounting: two layers gathered in forward and
//! backward (ZeRO-3), DDP's buckets.

use super::count::Count;
use super::resident::Resident;
use super::setup::{adapted, quantizes, Setup};
use crate::plan::{Framework, Method, Shard};

/// Gathered parameters and gradients of a sharded step, moment by moment.
pub(super) struct Sharded {
    /// Gathered parameters live at forward, the loss's and the head's backward, the layers' backward, and the end
    /// of backward.
    pub gathered: [Count; 4],
    /// Gradients held from earlier micro-batches through each later one.
    pub held_grads: Count,
    /// The part of `held_grads` that is whole (unsharded) on every GPU.
    pub held_grads_whole: Count,
}

pub(super) fn sharded(s: &Setup, r: &Resident) -> Sharded {
    let (arch, plan, d) = (s.arch, s.plan, s.d);
    let layer_params = arch.layer_params() as Count;
    // A gathered layer is in the dtype it computes in: QLoRA's packed 4-bit bytes, a mixed-precision policy's
    // 16-bit copy of fp32 shards, or the weights' own dtype.
    let gathered_bytes = if plan.method == Method::Qlora {
        1.0
    } else if d.sharded_cast || (d.amp && s.fsdp) {
        d.compute
    } else {
        d.weight
    };
    // FSDP gathers QLoRA's 4-bit weights as they are stored (packed two to a byte in a 16-bit `quant_storage`)
    // and the layer's other parameters (norms) in their dtype (traced: FSDP1 over bitsandbytes on CPU).
    let layer = if plan.method == Method::Qlora && s.fsdp && plan.gptq_bits().is_none() {
        let packed: Count = s
            .linears
            .iter()
            .filter(|l| quantizes(l, plan))
            .map(|l| (l.in_features * l.out_features * l.copies) as Count)
            .sum();
        packed / 2.0 + (layer_params - packed) * d.weight
    } else {
        layer_params * gathered_bytes
    };
    // Whole trainable gradients of the layers: every weight of a mixed unit, else the trainable parameters.
    let whole_grads = if d.frozen_grads {
        s.layers * layer_params * d.weight + r.trainable * r.param_bytes
    } else {
        r.trainable * r.param_bytes
    };
    let accumulating = plan.grad_accumulation > 1 && !plan.optimizer_in_backward;
    let sharding = plan.sharding();
    let sync_each_batch = sharding.sync_each_batch;
    if !s.fsdp {
        let gather = if s.zero >= 3 { 2.0 * layer } else { 0.0 };
        return Sharded {
            gathered: [gather, 0.0, gather, gather],
            held_grads: if accumulating { r.gradients } else { 0.0 },
            held_grads_whole: 0.0,
        };
    }
    let root_bytes = if d.amp { d.compute } else { d.weight };
    let (embedding, head) = (
        arch.embedding_params() as Count * root_bytes,
        arch.lm_head_params() as Count * root_bytes,
    );
    let norm = arch.final_norm_params() as Count * root_bytes;
    // Offloading parameters leaves the root unit gathered on the GPU, where the weights count it already.
    let gathering = s.zero >= 3 && !plan.cpu_offload;
    let unit = if s.zero >= 3 { layer } else { 0.0 };
    // torchtune's FSDP2 configs shard the embedding and the output projection as units of their own
    // (`custom_sharded_layers`): the head is gathered from the loss to the end of its backward, the embedding
    // for its own forward and backward; the root keeps the final norm.
    // In the layers' backward the running unit and the prefetched next one are gathered; FSDP1 prefetches in
    // the order units ran, so where adapters are units of their own (PEFT's wrap policy) the next unit is the
    // previous layer's last adapter, and its own layer waits until that adapter's backward.
    let adapter_units = sharding.shard == Shard::Fsdp1
        && plan.method != Method::Full
        && !sharding.mixed_units
        && s.linears.iter().any(|l| adapted(plan, l));
    // (A one-layer model has no next layer to prefetch.)
    let in_layers = if adapter_units {
        unit
    } else {
        s.layers.min(2.0) * unit
    };
    let own_units = plan.framework == Framework::Torchtune && sharding.shard == Shard::Fsdp2;
    let gathered = match (gathering, own_units) {
        (false, _) => [unit, unit, in_layers, 0.0],
        (true, true) => [head + unit, head + unit, in_layers, embedding],
        (true, false) => {
            let root = embedding + head + norm;
            [root + unit, root + unit, root + in_layers, root]
        }
    };
    Sharded {
        gathered,
        held_grads: match (accumulating, sync_each_batch) {
            (false, _) => 0.0,
            (true, true) => r.gradients,
            (true, false) => whole_grads,
        },
        held_grads_whole: if accumulating && !sync_each_batch {
            whole_grads
        } else {
            0.0
        },
    }
}
