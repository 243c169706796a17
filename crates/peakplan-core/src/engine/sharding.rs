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
//! DeepSpeed's ZeRO-3 gathers as its parameter coordinator does (`super::deepspeed`, traced with
//! `tools/trace/ds_cpu.sh`); ZeRO-3 in 32-bit keeps two layers gathered; unsharded data parallelism gathers
//! nothing.

use super::count::Count;
use super::deepspeed::zero3_gathered;
use super::resident::Resident;
use super::setup::{adapted, Setup};
use crate::plan::{Method, Shard};

/// DeepSpeed, and the runs FSDP does not shard (one GPU, DDP, ZeRO-1): ZeRO-3's gathered parameters as its
/// parameter coordinator keeps them ([`zero3_gathered`]); ZeRO-3 in 32-bit keeps the earlier accounting, two
/// layers gathered.
fn deepspeed_or_ddp(s: &Setup, r: &Resident, layer: Count, accumulating: bool) -> Sharded {
    let d = s.d;
    let gathered = if s.zero >= 3 && d.deepspeed_16bit {
        let g = zero3_gathered(s, layer, d.weight);
        let m = g.moments;
        [m.forward, m.loss, m.layers, m.end].map(|bytes| bytes + g.persistent)
    } else if s.zero >= 3 {
        [2.0 * layer; 4]
    } else {
        [0.0; 4]
    };
    // ZeRO-3 allocates its 16-bit gradient partitions once, at initialize (`grad_partitions_flat_buffer`), and
    // keeps them; ZeRO-1 and 2 make theirs in each step's backward and free them at its optimizer step (traced:
    // a full fine-tune's step begins with no gradient live).
    let persistent_partition = d.deepspeed_16bit && s.zero >= 3;
    Sharded {
        gathered,
        held_grads: if accumulating || persistent_partition {
            r.gradients
        } else {
            0.0
        },
        held_grads_whole: 0.0,
    }
}

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
    let (arch, plan, d, sharding) = (s.arch, s.plan, s.d, s.sharding);
    let layer_params = arch.layer_params() as Count;
    // A gathered layer is in the dtype it computes in: a mixed-precision policy's 16-bit copy of fp32 shards, or
    // the weights' own dtype. FSDP gathers QLoRA's 4-bit weights as they are stored (packed two to a byte in a
    // 16-bit `quant_storage`) and the layer's other parameters (norms) in their dtype (traced: FSDP1 over
    // bitsandbytes on CPU); DeepSpeed's are counted at a byte each.
    let layer = if plan.method == Method::Qlora {
        if s.fsdp && plan.gptq_bits().is_none() {
            let packed = r.quantized_layer_weights;
            packed / 2.0 + (layer_params - packed) * d.weight
        } else {
            layer_params
        }
    } else if d.sharded_cast || (d.amp && s.fsdp) {
        layer_params * d.compute
    } else {
        layer_params * d.weight
    };
    let accumulating = plan.grad_accumulation > 1 && !plan.optimizer_in_backward;
    if !s.fsdp {
        return deepspeed_or_ddp(s, r, layer, accumulating);
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
    // With the embedding and the head units of their own, the head is gathered from the loss to the end of its
    // backward, the embedding for its own forward and backward.
    let gathered = match (gathering, s.embedding_and_head_apart()) {
        (false, _) => [unit, unit, in_layers, 0.0],
        (true, true) => [head + unit, head + unit, in_layers, embedding],
        (true, false) => {
            let root = embedding + head + norm;
            [root + unit, root + unit, root + in_layers, root]
        }
    };
    // Inside `no_sync` every gradient stays whole; reduced every micro-batch, each GPU holds its shards.
    let held_grads_whole = if accumulating && !sharding.sync_each_batch {
        r.whole_gradients
    } else {
        0.0
    };
    Sharded {
        gathered,
        held_grads: match (accumulating, sharding.sync_each_batch) {
            (true, true) => r.gradients,
            _ => held_grads_whole,
        },
        held_grads_whole,
    }
}
