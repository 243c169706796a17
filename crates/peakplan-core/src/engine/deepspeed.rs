//! DeepSpeed's own buffers, from its source (`deepspeed/runtime/zero/stage_1_and_2.py`, `stage3.py`, 0.19) and
//! CPU traces of its steps on 2 and 4 processes (`tools/trace/ds_cpu.sh`): the gradient reduce buckets, and the
//! sub-groups ZeRO-3's optimizer steps its partition in.

use super::count::{ceil_div, Count};
use super::setup::adapted;
use super::setup::Setup;
use crate::plan::{Method, Peft, Shard};

/// DeepSpeed's reduce buckets: with `contiguous_gradients` each gradient is copied into a flat bucket of
/// `reduce_bucket_size` elements in the 16-bit dtype, reduced when full. ZeRO-1 and 2 make the bucket when backward's first
/// gradient is ready (the head's) and free it at its end, two under `overlap_comm` so that one fills while the other is reduced
/// (`setup_buckets`, `_release_ipg_buffers`); ZeRO-3 makes one at initialize and keeps it. Its full size whatever
/// the trainable parameters (a LoRA step's bucket is mostly empty).
#[derive(Clone, Copy, Default)]
pub(super) struct ReduceBuckets {
    /// Made at initialize and kept (ZeRO-3).
    pub resident: Count,
    /// Live through each backward (ZeRO-1 and 2).
    pub in_backward: Count,
    /// What a reduction copies out of the bucket, live beside it: the filled bucket, at most its size in 16-bit
    /// elements (traced: the end of backward's reduction with every gradient in the bucket, a copy of all of them).
    pub reduce_copy: Count,
    /// Every gradient fits one bucket: none has been reduced into the gradient partition before the end of
    /// backward, they all live in the bucket.
    pub grads_in_bucket: bool,
}

pub(super) fn reduce_buckets(s: &Setup, trainable: Count) -> ReduceBuckets {
    if s.sharding.shard != Shard::Deepspeed || s.zero == 0 || !s.d.deepspeed_16bit {
        return ReduceBuckets::default();
    }
    let sizes = s.plan.deepspeed_sizes(s.arch);
    if !sizes.contiguous_gradients {
        return ReduceBuckets::default();
    }
    let bucket = sizes.reduce_bucket as Count * s.d.weight;
    if s.zero >= 3 {
        ReduceBuckets {
            resident: bucket,
            ..ReduceBuckets::default()
        }
    } else {
        ReduceBuckets {
            resident: 0.0,
            in_backward: bucket * if sizes.overlap_comm { 2.0 } else { 1.0 },
            reduce_copy: s.d.weight * trainable.min(sizes.reduce_bucket as Count),
            grads_in_bucket: trainable <= sizes.reduce_bucket as Count,
        }
    }
}

/// The trainable tensors' elements in the order DeepSpeed flattens them (the model's `parameters()`): a full
/// fine-tune's embedding, each layer's linears (weight, bias) and norms, the final norm and the head; LoRA's A and
/// B of each adapted linear, layer by layer. `None` for other trainable sets (their tensors are small, and the
/// callers bound what the order would tell).
fn in_model_order(s: &Setup, trainable: Count) -> Option<Vec<u64>> {
    let (arch, plan) = (s.arch, s.plan);
    let mut order = Vec::new();
    let mut push = |numel: u64| {
        if numel > 0 {
            order.push(numel);
        }
    };
    match plan.method {
        Method::Full => {
            push(arch.embedding_params());
            for _ in 0..arch.layers {
                for l in s.linears.iter() {
                    push(l.weight_params());
                    push(l.bias_params());
                }
                push(arch.layer_other_params());
            }
            push(arch.final_norm_params());
            push(arch.lm_head_params());
        }
        Method::Lora | Method::Qlora if plan.peft == Peft::Lora => {
            for _ in 0..arch.layers {
                for l in s.linears.iter().filter(|l| adapted(plan, l)) {
                    push(plan.rank * l.in_features * l.copies);
                    push(plan.rank * l.out_features * l.copies);
                }
            }
        }
        _ => return None,
    }
    // Only where the walk is the whole trainable set (no trainable tokens, saved modules or the like).
    (order.iter().sum::<u64>() as Count == trainable).then_some(order)
}

/// The gradients ZeRO-1 and 2 hold for the optimizer step, in elements: each GPU's gradient partition is made
/// of whole parameters (`params_in_partition`: every parameter that reaches into the GPU's share of the flat
/// group, `grads_in_partition`), the largest such set over the GPUs.
pub(super) fn gradient_partition(s: &Setup, trainable: Count) -> Count {
    let share = ceil_div(trainable, s.gpus);
    let Some(order) = in_model_order(s, trainable) else {
        return share;
    };
    let gpus = s.gpus as usize;
    let mut per_gpu = vec![0.0; gpus];
    let mut start: Count = 0.0;
    for numel in order {
        let end = start + numel as Count;
        let first = (start / share) as usize;
        let last = (((end - 1.0) / share) as usize).min(gpus - 1);
        for held in &mut per_gpu[first.min(gpus - 1)..=last] {
            *held += numel as Count;
        }
        start = end;
    }
    per_gpu.into_iter().fold(0.0, Count::max)
}

/// Elements of the largest sub-group ZeRO-3's optimizer steps at once. Its step makes an fp32 copy of a sub-group's
/// 16-bit gradients, steps it and drops it before the next (`_prepare_sub_group`, `_release_sub_group`), where
/// ZeRO-1 and 2 copy the whole partition. Sub-groups take the trainable parameters' partitions in the model's
/// order, each closed once it reaches `sub_group_size` (`_create_fp16_sub_groups`).
pub(super) fn largest_sub_group(s: &Setup, trainable: Count, partition: Count) -> Count {
    let sub = s.plan.deepspeed_sizes(s.arch).sub_group as Count;
    if sub >= partition {
        return partition;
    }
    let share = |numel: u64| ceil_div(numel as Count, s.gpus);
    let Some(order) = in_model_order(s, trainable) else {
        return partition;
    };
    let (mut largest, mut open) = (0.0, 0.0);
    for numel in order {
        open += share(numel);
        if open >= sub {
            largest = Count::max(largest, open);
            open = 0.0;
        }
    }
    Count::max(largest, open).min(partition)
}

/// One module ZeRO-3 fetches: its own parameters' elements and their bytes gathered.
#[derive(Clone, Copy)]
struct Module {
    numel: Count,
    bytes: Count,
}

/// What ZeRO-3 holds gathered at the moments the timeline weighs, from its parameter coordinator
/// (`partitioned_param_coordinator.py`): each module with parameters of its own is gathered when it runs and
/// released after, unless it runs again within `stage3_max_reuse_distance` elements of parameters fetched in
/// between (`__params_to_release`): walking forward then backward, a module is kept from its forward to its
/// backward when twice the parameters after it are under that distance (the last layers and the head of a
/// large model; the whole of a small one). Parameters of at most `stage3_param_persistence_threshold` elements
/// are never released (norms, small adapters). Beside them, the next modules not yet gathered are prefetched up
/// to `stage3_prefetch_bucket_size` elements, and never past `stage3_max_live_parameters` gathered.
pub(super) struct Zero3Gathered {
    /// At the end of forward and in the loss's and head's backward.
    pub at_loss: Count,
    /// In the last layer's backward (the head has been released).
    pub in_layers: Count,
    /// At the end of backward (the embedding's).
    pub at_end: Count,
    /// Persistent parameters' whole copies, beyond their shards: gathered at every moment.
    pub persistent: Count,
}

/// `layer_bytes` is one decoder layer gathered (in the dtype it computes in), `root_bytes` the bytes of an
/// embedding or head element.
pub(super) fn zero3_gathered(s: &Setup, layer_bytes: Count, root_bytes: Count) -> Zero3Gathered {
    let (arch, plan) = (s.arch, s.plan);
    let sizes = plan.deepspeed_sizes(arch);
    let persist = sizes.persistence as Count;
    let per_param = layer_bytes / (arch.layer_params() as Count).max(1.0);
    // Forward order: the embedding, each layer's norms (one module here) and linears with their adapters, the
    // final norm, the head.
    let mut order: Vec<Module> =
        Vec::with_capacity(2 + arch.layers as usize * (2 * s.linears.len() + 1) + 2);
    let mut persistent_bytes = 0.0;
    let mut push = |numel: u64, bytes_each: Count, small_parts: u64| {
        let numel = numel as Count;
        if numel == 0.0 {
            return;
        }
        // A module of several small tensors (a layer's norms) persists tensor by tensor.
        if numel / small_parts.max(1) as Count <= persist {
            persistent_bytes += numel * bytes_each;
        } else {
            order.push(Module {
                numel,
                bytes: numel * bytes_each,
            });
        }
    };
    let low_rank = matches!(
        plan.peft,
        Peft::Lora | Peft::Rslora | Peft::Dora | Peft::Lorafa
    );
    push(arch.embedding_params(), root_bytes, 1);
    for _ in 0..arch.layers {
        push(
            arch.layer_other_params(),
            per_param,
            arch.norms_per_layer.max(1),
        );
        for l in s.linears.iter() {
            push(l.weight_params() + l.bias_params(), per_param, 1);
            // LoRA's A and B are modules of their own (other adapters' tensors are small and not walked).
            if adapted(plan, l) && low_rank {
                push(plan.rank * l.in_features * l.copies, s.d.adapter, 1);
                push(plan.rank * l.out_features * l.copies, s.d.adapter, 1);
            }
        }
    }
    push(arch.final_norm_params(), root_bytes, 1);
    // A tied head is the embedding's weight, fetched again for the head (unless it persists, counted once).
    let tied_head = if arch.tied_embeddings && (arch.vocab * arch.hidden) as Count > persist {
        arch.vocab * arch.hidden
    } else {
        0
    };
    push(arch.lm_head_params() + tied_head, root_bytes, 1);
    // A persistent parameter, once gathered, is never released: its whole copy stays beside its partition
    // (`ds_tensor`, counted in the shards), so what it adds does not shrink with more GPUs.
    // (Offloaded shards wait in CPU memory: what persists there is not modelled.)
    let persistent = if plan.cpu_offload {
        0.0
    } else {
        persistent_bytes
    };

    // Kept from forward to backward: twice the parameters after the module under the reuse distance.
    let mut after = 0.0;
    let mut kept = vec![false; order.len()];
    let (mut kept_bytes, mut kept_numel) = (0.0, 0.0);
    for (i, m) in order.iter().enumerate().rev() {
        if 2.0 * after < sizes.max_reuse as Count {
            kept[i] = true;
            kept_bytes += m.bytes;
            kept_numel += m.numel;
        }
        after += m.numel;
    }
    // Prefetched at the head's backward: the next modules backward runs that are not gathered.
    let limit = (sizes.max_live as Count - kept_numel).min(sizes.prefetch_bucket as Count);
    let (mut prefetched_numel, mut prefetched) = (0.0, 0.0);
    for (i, m) in order.iter().enumerate().rev() {
        if prefetched_numel >= limit {
            break;
        }
        if !kept[i] {
            prefetched_numel += m.numel;
            prefetched += m.bytes;
        }
    }
    let head_numel = (arch.lm_head_params() + tied_head) as Count;
    let head = order
        .last()
        .filter(|m| m.numel == head_numel)
        .map_or(0.0, |m| m.bytes);
    let embedding = order.first().map_or(0.0, |m| m.bytes);
    Zero3Gathered {
        at_loss: kept_bytes + prefetched,
        in_layers: kept_bytes - head + prefetched,
        at_end: embedding,
        persistent,
    }
}
