//! Stage 2, resident memory: what stays on the GPU through the step. The base weights (16-bit, fp32 or packed
//! 4-bit and 8-bit with their quantization constants), the adapters, the gradients, the optimizer's states and
//! master weights, the optimizer step's temporaries, and the WebGPU runtime's batch and tables; each sharded by
//! ZeRO / FSDP or offloaded to CPU memory as the plan says.

use super::count::{ceil_div, Count};
use super::setup::{quantizes, total_params, Setup};
use super::trainable::{trainable_tensors, vera_projections, Shapes};
use crate::plan::{Method, Optimizer, Plan, Quant};

/// bitsandbytes 4-bit block size (weights per absmax).
const QUANT_BLOCK: Count = 64.0;
/// Blocks per second-level block under double quantization.
const DQ_BLOCK: Count = 256.0;
/// Input features per GPTQ group: one scale and one zero point per group and output.
const GPTQ_GROUP: Count = 128.0;
/// bitsandbytes 8-bit optimizers quantize states in blocks of 2048 with one fp32 absmax each.
const OPT8_BLOCK: Count = 2048.0;
/// bitsandbytes keeps tensors under this size in 32-bit state (`min_8bit_size`).
const OPT8_MIN_NUMEL: Count = 4096.0;

/// Resident memory, as one GPU holds it.
pub(super) struct Resident {
    pub base_weights: Count,
    pub quant_constants: Count,
    pub adapter_weights: Count,
    pub gradients: Count,
    pub optimizer_states: Count,
    pub master_weights: Count,
    /// Paged optimizer states: in unified memory, outside torch's allocator.
    pub paged_states: Count,
    pub optimizer_temps: Count,
    /// The WebGPU runtime's batch, RoPE table and 4-bit code tables.
    pub input_buffers: Count,
    /// The trainable tensors' parameters.
    pub trainable: Count,
    /// Elements of the largest trainable tensor.
    pub largest_tensor: Count,
    /// Bytes of one trainable parameter (and of its gradient), copies of model tensors aside.
    pub param_bytes: Count,
    /// The trainable tensors' bytes (and their gradients'), copies of model tensors in the weight dtype.
    pub trainable_bytes: Count,
    /// Every gradient whole, before sharding: the trainable parameters', and under mixed FSDP1 units every
    /// layer weight's too (the unit's flat parameter gets a gradient for its frozen weights).
    pub whole_gradients: Count,
    /// Parameters of one layer's quantized linears (all copies).
    pub quantized_layer_weights: Count,
    /// Weights loaded whole on every GPU before DeepSpeed partitions them: ZeRO-3 without `zero.Init`
    /// (`zinit=0`: `from_pretrained` before DeepSpeed's config is known, or a quantized base, which transformers
    /// never loads under it; `initialize` moves the 16-bit model to the GPU, then partitions it,
    /// `_configure_distributed_model`, `_convert_to_zero_parameters`); else 0.
    pub loaded_whole: Count,
    /// Beside it, the first parameter's partition (the embedding's), made before any whole weight is freed.
    pub first_partition: Count,
    /// Under `zero.Init`, each module is made whole and partitioned once made (`_post_init_method`), so the last
    /// one made, an untied head, is whole beside every partition and its own (traced: DeepSpeed's CPU
    /// accelerator, LoRA under ZeRO-3 `zinit=1`); else 0.
    pub constructed_whole: Count,
}

pub(super) fn resident(s: &Setup) -> Resident {
    let plan = s.plan;
    let tensors = trainable_tensors(s);
    let trainable = tensors.params();
    let largest_tensor = tensors.largest();
    let param_bytes = match plan.method {
        Method::Full => s.d.weight,
        _ => s.d.adapter,
    };
    let trainable_bytes = tensors.bytes(param_bytes, s.d.weight);
    let adapter_bytes = match plan.method {
        Method::Full => 0.0,
        _ => trainable_bytes + vera_projections(s.arch, plan, &s.linears) * s.d.adapter,
    };
    let quantized_layer_weights: Count = s
        .linears
        .iter()
        .filter(|l| quantizes(l, plan))
        .map(|l| l.weight_params() as Count)
        .sum();
    let (base, constants) = base_weights(s, quantized_layer_weights);
    let weights = placed_weights(s, base, adapter_bytes, constants);
    let whole_gradients = trainable_bytes
        + if s.d.frozen_grads {
            s.layers * s.arch.layer_params() as Count * s.d.weight
        } else {
            0.0
        };
    let gradients = gradients(
        s,
        largest_tensor,
        trainable_bytes,
        param_bytes,
        whole_gradients,
    );
    let optimizer = optimizer(s, &tensors, largest_tensor, trainable, param_bytes);
    let ds = s.plan.deepspeed_sizes(s.arch);
    // transformers enters zero.Init only for a model it does not quantize (`modeling_utils.py`:
    // `is_deepspeed_zero3_enabled() and not _is_quantized`): a QLoRA base loads whole whatever `zinit` says.
    let whole_first = !ds.zero_init || plan.method == Method::Qlora;
    let (loaded_whole, first_partition) =
        if s.d.deepspeed_16bit && s.zero >= 3 && whole_first && !plan.cpu_offload {
            (
                base + adapter_bytes + constants + s.arch.buffer_bytes as Count,
                // (within this GPU's shard of the weights, whatever the embedding's dtype)
                (ceil_div(s.arch.embedding_params() as Count, s.gpus) * s.d.weight)
                    .min(weights[0] - s.arch.buffer_bytes as Count),
            )
        } else {
            (0.0, 0.0)
        };
    let constructed_whole = if s.d.deepspeed_16bit
        && s.zero >= 3
        && !whole_first
        && !plan.cpu_offload
        && !s.arch.tied_embeddings
    {
        s.arch.lm_head_params() as Count * s.d.weight
    } else {
        0.0
    };
    Resident {
        base_weights: weights[0],
        quant_constants: weights[1],
        adapter_weights: weights[2],
        gradients,
        optimizer_states: optimizer.states,
        master_weights: optimizer.master,
        paged_states: optimizer.paged,
        optimizer_temps: optimizer.temps,
        input_buffers: input_buffers(s),
        trainable,
        largest_tensor,
        param_bytes,
        trainable_bytes,
        whole_gradients,
        quantized_layer_weights,
        loaded_whole,
        first_partition,
        constructed_whole,
    }
}

/// The whole model's base weight bytes and quantization constants, before sharding.
fn base_weights(s: &Setup, quantized_layer_weights: Count) -> (Count, Count) {
    let (arch, plan, layers) = (s.arch, s.plan, s.layers);
    if plan.method != Method::Qlora {
        return (total_params(s) * s.d.weight, 0.0);
    }
    let total_params = arch.total_params() as Count;
    let (mut packed, mut consts) = (0.0, 0.0);
    for l in s.linears.iter().filter(|l| quantizes(l, plan)) {
        let (p, c) = quantized_tensor_bytes(l.out_features as Count, l.in_features as Count, plan);
        packed += p * l.copies as Count * layers;
        consts += c * l.copies as Count * layers;
    }
    // Embeddings, norms, biases and the LM head stay in 16-bit (fp32 when upcast) under transformers, which
    // skips `lm_head`; a profile that quantizes the head (litgpt's bitsandbytes plugin converts every Linear)
    // gives a tied head its own 4-bit copy while the embedding stays 16-bit.
    // A vision tower's encoder linears are nn.Linear modules too (traced on CPU: Gemma 3 under bitsandbytes), which
    // Unsloth's skip list keeps in 16-bit.
    let v = arch.vision;
    let vision_quantized = s.profile.quantizes_vision_tower;
    let (vh, vi, vl) = (
        v.hidden as Count,
        v.intermediate as Count,
        v.layers as Count,
    );
    for (rows, cols, count) in [(vh, vh, 4.0 * vl), (vi, vh, vl), (vh, vi, vl)] {
        if count > 0.0 && vision_quantized {
            let (p, c) = quantized_tensor_bytes(rows, cols, plan);
            packed += p * count;
            consts += c * count;
        }
    }
    let head_w = arch.vocab as Count * arch.hidden as Count;
    let vision_packed = if vision_quantized {
        v.linear_params() as Count
    } else {
        0.0
    };
    let mut rest = total_params - quantized_layer_weights * layers - vision_packed;
    if s.head_quantized {
        let (p, c) = quantized_tensor_bytes(arch.vocab as Count, arch.hidden as Count, plan);
        packed += p;
        consts += c;
        if !arch.tied_embeddings {
            rest -= head_w;
        }
    }
    (packed + rest * s.d.weight, consts)
}

/// Quantized bytes of one weight matrix of `rows` outputs by `cols` inputs: its packed weights and its constants.
pub(super) fn quantized_tensor_bytes(rows: Count, cols: Count, plan: &Plan) -> (Count, Count) {
    let n = rows * cols;
    if plan.quant == Quant::Int8 {
        // LLM.int8: one int8 per weight and an fp32 absmax per output row (`SCB`).
        return (n, 4.0 * rows);
    }
    if let Some(bits) = plan.quant.gptq_bits() {
        // auto-gptq's QuantLinear: weights packed `bits` to the int32 (`qweight`); per group of 128 inputs and
        // per output an fp16 scale (`scales`) and a packed zero point (`qzeros`); an int32 group index per
        // input (`g_idx`).
        let bits = bits as Count;
        let groups = ceil_div(cols, GPTQ_GROUP);
        let packed = 4.0 * ceil_div(cols * bits, 32.0) * rows;
        let zeros = 4.0 * ceil_div(rows * bits, 32.0) * groups;
        return (packed, 2.0 * groups * rows + zeros + 4.0 * cols);
    }
    let packed = ceil_div(n, 2.0);
    let blocks = ceil_div(n, QUANT_BLOCK);
    let constants = if plan.double_quant {
        // 8-bit absmax per block, fp32 scale per 256 blocks, one fp32 mean offset.
        blocks + 4.0 * ceil_div(blocks, DQ_BLOCK) + 4.0
    } else {
        4.0 * blocks
    };
    (packed, constants)
}

/// What one GPU holds of the base weights, the quantization constants and the adapters: sharded, or offloaded
/// with only the root unit left on the GPU.
fn placed_weights(s: &Setup, base: Count, adapter_bytes: Count, constants: Count) -> [Count; 3] {
    let (arch, plan) = (s.arch, s.plan);
    // With parameter offload the layers' shards wait in CPU memory (each layer is gathered when it runs, see
    // ShardBuffers); the root unit (embeddings, final norm, LM head) stays gathered on the GPU through the step.
    // (ZeRO-3 offload works on one GPU too: the shards are the whole model, in CPU memory.)
    let params_offloaded = plan.cpu_offload && plan.zero >= 3;
    // Buffers (GPT-BigCode's causal mask) are neither sharded nor offloaded: every GPU holds them.
    let buffers = arch.buffer_bytes as Count;
    let (base_weights, adapter_weights) = if params_offloaded {
        let root = if s.embedding_and_head_apart() {
            arch.final_norm_params()
        } else {
            arch.embedding_params() + arch.lm_head_params() + arch.final_norm_params()
        };
        (root as Count * s.d.weight + buffers, 0.0)
    } else {
        (
            s.shard_weights(base) + buffers,
            s.shard_weights(adapter_bytes),
        )
    };
    // bitsandbytes keeps a 4-bit weight's quantization state (absmax, scales) beside the parameter, not in it:
    // FSDP and DeepSpeed shard and offload the packed weights, and every GPU holds all the constants. torchao's
    // NF4 tensor (torchtune) carries its constants inside, so they are sharded and offloaded with it.
    let constants = if !s.profile.quant_constants_in_weight {
        constants
    } else if params_offloaded {
        0.0
    } else {
        s.shard_weights(constants)
    };
    [base_weights, constants, adapter_weights]
}

/// Gradients: same dtype as their parameters.
fn gradients(
    s: &Setup,
    largest_tensor: Count,
    trainable_bytes: Count,
    param_bytes: Count,
    whole_gradients: Count,
) -> Count {
    if s.plan.optimizer_in_backward {
        // Under optimizer-in-backward a gradient lives only until its parameter has stepped: one at a time.
        largest_tensor * param_bytes
    } else if s.plan.cpu_offload {
        // Offloaded: a layer's gradients are reduced and copied out as that layer's backward ends.
        ceil_div(trainable_bytes, s.layers * param_bytes) * param_bytes
    } else {
        s.shard_gradients(whole_gradients)
    }
}

/// The optimizer's memory on the GPU.
struct OptimizerMemory {
    states: Count,
    master: Count,
    paged: Count,
    temps: Count,
}

fn optimizer(
    s: &Setup,
    tensors: &Shapes,
    largest_tensor: Count,
    trainable: Count,
    param_bytes: Count,
) -> OptimizerMemory {
    let plan = s.plan;
    let state_bytes = if s.d.fp32_master { 4.0 } else { param_bytes };
    let master = if s.d.fp32_master {
        4.0 * trainable
    } else {
        0.0
    };
    let states = optimizer_states(plan.optimizer, tensors, state_bytes, s.d.weight);
    let paged = matches!(
        plan.optimizer,
        Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit
    );
    let (on_device_states, paged_states) = if plan.cpu_offload {
        (0.0, 0.0)
    } else if paged {
        (0.0, s.shard_optimizer(states))
    } else {
        (s.shard_optimizer(states), 0.0)
    };
    // Offloaded states (and master weights) are stepped by the CPU; none of it is on the GPU.
    let on_device = if plan.cpu_offload { 0.0 } else { 1.0 };
    let temps = match plan.optimizer {
        // Stepping one parameter at a time in backward, foreach has one tensor to batch.
        Optimizer::AdamwTorch if plan.optimizer_in_backward => largest_tensor * state_bytes,
        // foreach AdamW's one state-sized temporary.
        Optimizer::AdamwTorch => s.shard_optimizer(tensors.bytes(state_bytes, s.d.weight)),
        // transformers' Adafactor steps one parameter at a time in fp32: the update, and beside it one more
        // update-sized tensor at a time (the squared gradient, the factored estimate that replaces it, the negated
        // update); a 16-bit parameter's gradient and the parameter itself are first copied to fp32 (traced on
        // CPU: 16 B per element of the largest tensor for a bf16 full fine-tune).
        Optimizer::Adafactor => {
            let copies = if tensors.largest_bytes(param_bytes, s.d.weight) < 4.0 {
                2.0
            } else {
                0.0
            };
            (2.0 + copies) * 4.0 * largest_tensor
        }
        _ => 0.0,
    };
    // DeepSpeed steps an fp32 copy of this GPU's gradient partition, made from a flattened 16-bit copy
    // (`flatten(...).to(fp32)`: both live at once); ZeRO-3 a sub-group at a time.
    let temps = temps
        + if s.d.deepspeed_16bit {
            (4.0 + s.d.weight) * super::deepspeed::stepped_at_once(s, trainable)
        } else {
            0.0
        };
    OptimizerMemory {
        states: on_device_states,
        master: on_device * s.shard_optimizer(master),
        paged: paged_states,
        temps: on_device * temps,
    }
}

/// The optimizer's states over every trainable tensor, before sharding: AdamW's in each parameter's dtype
/// (`state_bytes`, a copy of a model tensor's `weight_bytes`).
fn optimizer_states(
    optimizer: Optimizer,
    tensors: &Shapes,
    state_bytes: Count,
    weight_bytes: Count,
) -> Count {
    let mut states: Count = 0.0;
    for t in tensors.iter() {
        let numel = t.rows * t.cols;
        states += t.count
            * match optimizer {
                Optimizer::AdamwTorch | Optimizer::AdamwTorchFused => {
                    2.0 * t.bytes(state_bytes, weight_bytes) * numel
                }
                Optimizer::PagedAdamw32bit => 8.0 * numel,
                Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => {
                    if numel < OPT8_MIN_NUMEL {
                        8.0 * numel
                    } else {
                        2.0 * numel + 2.0 * 4.0 * ceil_div(numel, OPT8_BLOCK)
                    }
                }
                Optimizer::Sgd => 0.0,
                // Factored second moment for matrices (row and column vectors), a full one for vectors; in
                // fp32 whatever the parameter's dtype (transformers keeps them in the fp32 gradient's dtype).
                Optimizer::Adafactor => {
                    if t.rows > 1.0 && t.cols > 1.0 {
                        4.0 * (t.rows + t.cols)
                    } else {
                        4.0 * numel
                    }
                }
            };
    }
    states
}

/// The WebGPU runtime also keeps the batch (token ids, labels), the RoPE table, the loss and the 4-bit code
/// tables on the device for the whole run (`Profile::device_tables`).
fn input_buffers(s: &Setup) -> Count {
    if s.profile.device_tables {
        8.0 * s.tokens + 4.0 * s.plan.seq_len as Count * s.arch.head_dim as Count + 4.0 + 1088.0
    } else {
        0.0
    }
}
