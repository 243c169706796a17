//! Stage 1, set-up: what every later stage reads about the plan. The framework's profile and the sharding it
//! resolves, the dtypes of each kind of tensor, the layer's linears, the tokens of a micro-batch, the GPUs and how
//! they shard, and which linears a plan quantizes, adapts or parametrizes.

use super::count::{ceil_div, Count};
use crate::arch::{Architecture, Linear, Linears, Target};
use crate::plan::{
    Checkpointing, Loss, Method, Peft, Plan, Precision, Quant, Shard, Sharding, Task,
};
use crate::profile::Profile;

/// Bytes of one element of each kind of tensor a plan keeps, and related dtype facts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dtypes {
    /// Compute dtype bytes (matmul inputs and outputs).
    pub compute: Count,
    /// Residual stream bytes: 4 when parameters feeding it are fp32, else the compute dtype.
    pub residual: Count,
    /// Adapter dtype bytes.
    pub adapter: Count,
    /// The dtype adapters compute in: FSDP's mixed-precision policy gathers them in the compute dtype like every
    /// other parameter, so nothing casts their input or their weights (traced: FSDP1 with fp32 adapters).
    pub adapter_compute: Count,
    /// Base weight bytes for non-quantized tensors.
    pub weight: Count,
    /// The MLP's gate/up outputs and its products: the compute dtype, except that bitsandbytes' 4-bit linear
    /// returns its input's dtype, so a QLoRA stream kept in fp32 (an upcast model) runs its MLP in fp32.
    pub mlp: Count,
    /// Mixed precision (autocast casts matmul inputs to 16-bit).
    pub amp: bool,
    /// An fp32 LoRA base sharded by FSDP under mixed precision: the shards stay fp32, and each layer is gathered
    /// already cast to the compute dtype, so the gathered layer is the 16-bit copy and the activations are 16-bit.
    pub sharded_cast: bool,
    /// FSDP1 units mixing frozen and trainable parameters: the unit's flat parameter needs a gradient, so autograd
    /// treats every weight of a layer as trainable (inputs kept, gradients computed), as in full fine-tuning.
    pub frozen_grads: bool,
    /// The optimizer steps fp32 master copies of the trainable parameters, with fp32 states: full fine-tuning
    /// under AMP, and every 16-bit DeepSpeed plan (its bf16/fp16 modes keep fp32 partitions beside the 16-bit
    /// module, traced on its CPU accelerator).
    pub fp32_master: bool,
    /// DeepSpeed's 16-bit modes: the module itself, adapters included, is cast to 16-bit and runs without
    /// autocast; its optimizer steps an fp32 copy of each gradient partition.
    pub deepspeed_16bit: bool,
}

impl Dtypes {
    fn of(plan: &Plan, fsdp: bool, sharding: Sharding) -> Dtypes {
        let deepspeed_16bit =
            sharding.shard == Shard::Deepspeed && plan.precision != Precision::Fp32;
        if deepspeed_16bit {
            return Dtypes::deepspeed();
        }
        let compute = plan.precision.compute_bytes() as Count;
        let amp = plan.precision.is_amp();
        let weight: Count = match plan.method {
            Method::Full if plan.precision == Precision::Fp32 => 4.0,
            Method::Full => 2.0,
            Method::Lora | Method::Qlora if plan.precision == Precision::Fp32 => 4.0,
            // A LoRA base kept in fp32 under autocast (litgpt's bf16-mixed, an fp32 `from_pretrained` with AMP).
            Method::Lora if plan.upcast => 4.0,
            Method::Lora => 2.0,
            Method::Qlora if plan.upcast => 4.0,
            Method::Qlora => 2.0,
        };
        let sharded_cast = amp && weight == 4.0 && plan.method == Method::Lora && plan.zero >= 3;
        // With fp32 master weights the model itself is fp32 under HF AMP: the residual stream follows the
        // embeddings.
        let residual = if plan.method == Method::Full && amp {
            4.0
        } else if sharded_cast {
            compute
        } else {
            weight.max(compute)
        };
        let bnb_4bit =
            plan.method == Method::Qlora && matches!(plan.quant, Quant::Nf4 | Quant::Fp4);
        let mlp = if bnb_4bit {
            residual.max(compute)
        } else {
            compute
        };
        Dtypes {
            compute,
            residual,
            mlp,
            adapter: plan.adapter_dtype.bytes() as Count,
            adapter_compute: if amp && fsdp {
                compute
            } else {
                plan.adapter_dtype.bytes() as Count
            },
            weight,
            amp,
            sharded_cast,
            frozen_grads: fsdp && sharding.mixed_units,
            fp32_master: amp && plan.method == Method::Full,
            deepspeed_16bit: false,
        }
    }

    /// DeepSpeed's bf16 and fp16 modes (`prec` bf16, fp16 or their AMP forms, which the Trainer hands to DeepSpeed
    /// as the same switch): every parameter of the module in 16-bit, no autocast, fp32 master partitions.
    fn deepspeed() -> Dtypes {
        Dtypes {
            compute: 2.0,
            residual: 2.0,
            mlp: 2.0,
            adapter: 2.0,
            adapter_compute: 2.0,
            weight: 2.0,
            amp: false,
            sharded_cast: false,
            frozen_grads: false,
            fp32_master: true,
            deepspeed_16bit: true,
        }
    }
}

/// What every stage reads: the plan, its architecture and the facts derived from them once.
pub(super) struct Setup<'a> {
    pub arch: &'a Architecture,
    pub plan: &'a Plan,
    /// The plan's framework as the stages need it: they read this, never the framework itself.
    pub profile: &'static Profile,
    pub d: Dtypes,
    /// One decoder layer's linear modules.
    pub linears: Linears,
    pub layers: Count,
    pub gpus: Count,
    /// The ZeRO stage in effect: one GPU has nothing to shard, except that ZeRO-3 offload still fetches each layer
    /// from CPU memory.
    pub zero: u8,
    /// FSDP (version 1 or 2) shards the GPUs' parameters or gradients (`zero` 2 or 3 over several GPUs).
    pub fsdp: bool,
    /// The sharding the plan runs, `auto` resolved for its framework.
    pub sharding: Sharding,
    /// Sequences the policy runs per micro-batch: the batch, doubled for a paired preference task (each
    /// prompt's chosen and rejected sequences in one batch, as TRL's trainers concatenate them).
    pub sequences: Count,
    /// Token positions of one micro-batch (`n`): sequences x positions.
    pub tokens: Count,
    /// The positions a preference task's log-probability head scores in a micro-batch: every sequence's
    /// completion tokens (the prompt's are masked out); 0 for supervised fine-tuning.
    pub scored: Count,
    /// The loss the model computes: the plan's, or `None` where a preference task's trainer replaces it with
    /// TRL's log-probability head (called with `use_cache=False`, softcapping inside its tiles, returning no
    /// logits). The stages read this, never `plan.loss`.
    pub loss: Option<Loss>,
    pub hidden: Count,
    pub vocab: Count,
    /// Experts each token is routed to (1 for a dense model).
    pub k_route: Count,
    /// The LM head is quantized with the layers (a quantized base under a profile that quantizes the head).
    pub head_quantized: bool,
    /// The LM head shares the embedding's weight: a tied model, unless the profile gives it a head of its own.
    pub head_tied: bool,
    /// Checkpointed layer inputs go to pinned CPU memory (`gc=offload`), as Unsloth decides it: not below 512
    /// tokens (`max_seq_length`, where it runs plain checkpointing), not under DDP (several GPUs unpatch it), and
    /// only inputs over 2 MiB.
    pub offloaded_checkpoints: bool,
}

/// Unsloth offloads a checkpointed layer input only above this size (`MINIMUM_SIZE`, 2 MiB of elements).
pub(super) const OFFLOAD_MINIMUM_BYTES: Count = 2.0 * 1024.0 * 1024.0;

pub(super) fn setup<'a>(arch: &'a Architecture, plan: &'a Plan) -> Setup<'a> {
    let zero = if plan.gpus > 1 || (plan.cpu_offload && plan.zero >= 3) {
        plan.zero
    } else {
        0
    };
    let profile = Profile::of(plan.framework);
    let (fsdp, sharding) = (plan.sharded_by_fsdp(), profile.sharding(plan));
    let d = Dtypes::of(plan, fsdp, sharding);
    let tokens = sequences(plan) * positions(plan);
    Setup {
        arch,
        plan,
        profile,
        d,
        linears: arch.layer_linears(),
        layers: arch.layers as Count,
        gpus: plan.gpus.max(1) as Count,
        zero,
        fsdp,
        sharding,
        sequences: sequences(plan),
        loss: (plan.task == Task::Sft).then_some(plan.loss),
        tokens,
        scored: if plan.task == Task::Sft {
            0.0
        } else {
            sequences(plan) * plan.completion_tokens() as Count
        },
        hidden: arch.hidden as Count,
        vocab: arch.vocab as Count,
        k_route: if arch.experts > 1 {
            arch.experts_per_token as Count
        } else {
            1.0
        },
        head_quantized: plan.method == Method::Qlora && profile.quantizes_head,
        head_tied: arch.tied_embeddings && !profile.unties_head,
        offloaded_checkpoints: plan.checkpointing == Checkpointing::Offload
            && plan.seq_len >= 512
            && plan.gpus == 1
            && d.residual * tokens * arch.hidden as Count > OFFLOAD_MINIMUM_BYTES,
    }
}

impl Setup<'_> {
    /// FSDP2 shards the embedding and the output projection as units of their own where the profile says so
    /// (torchtune's `custom_sharded_layers`), gathered (or offloaded) apart from the root unit, which keeps the
    /// final norm.
    pub fn embedding_and_head_apart(&self) -> bool {
        self.gpus > 1.0
            && self.profile.embedding_and_head_own_units
            && self.sharding.shard == Shard::Fsdp2
    }
    /// Bytes a GPU holds of `v` bytes of parameters (sharded from ZeRO-3 on).
    pub fn shard_weights(&self, v: Count) -> Count {
        if self.zero >= 3 {
            ceil_div(v, self.gpus)
        } else {
            v
        }
    }
    /// Bytes a GPU holds of `v` bytes of gradients (sharded from ZeRO-2 on).
    pub fn shard_gradients(&self, v: Count) -> Count {
        if self.zero >= 2 {
            ceil_div(v, self.gpus)
        } else {
            v
        }
    }
    /// Weights of the layer's largest linear among those `keep` accepts (0 if none).
    pub fn largest_linear(&self, keep: impl Fn(&Linear) -> bool) -> Count {
        self.linears
            .iter()
            .filter(|l| keep(l))
            .map(|l| l.in_features as Count * l.out_features as Count)
            .fold(0.0, Count::max)
    }
    /// Bytes a GPU holds of `v` bytes of optimizer state (sharded from ZeRO-1 on). Mixed FSDP1 units shard
    /// the flat parameter, not the trainable parameters: each GPU steps the adapters that fall in its contiguous
    /// chunk, so the fullest GPU can hold them all (traced: q and v adapters all on rank 0, whose peak is the
    /// step's).
    pub fn shard_optimizer(&self, v: Count) -> Count {
        if self.zero >= 1 && !self.d.frozen_grads {
            ceil_div(v, self.gpus)
        } else {
            v
        }
    }
}

/// DeepSpeed ZeRO-3 runs every `nn.Linear` through its memory-efficient linear (`zero3_linear_wrap`, which
/// `memory_efficient_linear`, on by default, installs in place of `F.linear` once DeepSpeed converts the model's
/// parameters): its autograd function keeps its input whatever needs a gradient, so a frozen linear in the graph
/// keeps its input where autograd's own would keep only the weight.
pub(super) fn zero3_linear(s: &Setup) -> bool {
    s.sharding.shard == Shard::Deepspeed && s.zero >= 3
}

/// Whether a quantized base (bitsandbytes, GPTQ: both replace `nn.Linear` modules) quantizes this linear. MoE
/// experts stored as 3D parameters, as transformers 5 stores them, stay in the weight dtype.
pub(super) fn quantizes(l: &Linear, plan: &Plan) -> bool {
    l.copies == 1 || !plan.experts_are_parameters()
}

pub(super) fn adapted(plan: &Plan, l: &Linear) -> bool {
    matches!(plan.method, Method::Lora | Method::Qlora)
        && !matches!(plan.peft, Peft::Ln | Peft::Prompt | Peft::Prefix)
        && l.selected_by & plan.targets.0 != 0
}

/// LoRA on MoE experts stored as 3D parameters (transformers 5): PEFT's `target_parameters` parametrizes each
/// parameter as W + BA, so every forward builds the dense 16-bit sum for all experts, the grouped matmul keeps it
/// and the routed inputs for backward as a full fine-tune's would, and backward makes its dense gradient (traced
/// on CPU: Qwen3-MoE). Other PEFT kinds cannot target parameters.
pub(super) fn parametrized(plan: &Plan, l: &Linear) -> bool {
    l.copies > 1
        && plan.experts_are_parameters()
        && matches!(plan.peft, Peft::Lora | Peft::Rslora | Peft::Lorafa)
        && adapted(plan, l)
}

/// Whether the routed experts' gate and up are one 3D `gate_up_proj` parameter that LoRA adapts through
/// `target_parameters`: the two halves then share one A per expert (traced on CPU: Qwen2-MoE).
pub(super) fn parametrized_gate_up(plan: &Plan, linears: &[Linear]) -> bool {
    let hit = |t: Target| {
        linears
            .iter()
            .any(|l| l.copies > 1 && l.selected_by == t.bit() && parametrized(plan, l))
    };
    hit(Target::Gate) && hit(Target::Up)
}

/// Whether `l` is the up half of a parametrized `gate_up_proj` whose A the gate half carries (`shared_a` from
/// [`parametrized_gate_up`]).
pub(super) fn a_shared_with_gate(l: &Linear, shared_a: bool) -> bool {
    shared_a && l.copies > 1 && l.selected_by == Target::Up.bit()
}

/// bitsandbytes' 4-bit and 8-bit matmuls up to 0.44 keep their input for backward (`qsave=1`); GPTQ's keep the
/// dequantized weight instead (see the activations stage's weight copies).
pub(super) fn bnb_saves_input(plan: &Plan) -> bool {
    plan.method == Method::Qlora && plan.qlora_saves_input && plan.gptq_bits().is_none()
}

/// The virtual tokens of an adapter plan whose PEFT kind is `kind` (prompt or prefix tuning), else 0.
fn virtual_tokens_of(plan: &Plan, kind: Peft) -> Count {
    if matches!(plan.method, Method::Lora | Method::Qlora) && plan.peft == kind {
        plan.virtual_tokens as Count
    } else {
        0.0
    }
}

/// Sequences the policy runs per micro-batch ([`Setup::sequences`]).
pub(super) fn sequences(plan: &Plan) -> Count {
    // GRPO trains its round's completions in `ga` micro-batches (TRL's `steps_per_generation`).
    if plan.task.generates() {
        return (plan.generated_sequences() / plan.grad_accumulation.max(1)).max(1) as Count;
    }
    let pairs = if plan.task.paired() { 2.0 } else { 1.0 };
    pairs * plan.micro_batch as Count
}

/// Positions each sequence runs through the model: prompt tuning prepends its virtual tokens.
pub(super) fn positions(plan: &Plan) -> Count {
    plan.seq_len as Count + virtual_tokens_of(plan, Peft::Prompt)
}

/// Key positions each query attends over: prefix tuning prepends its virtual keys and values in every layer.
pub(super) fn key_positions(plan: &Plan) -> Count {
    positions(plan) + prefix_tokens(plan)
}

pub(super) fn prefix_tokens(plan: &Plan) -> Count {
    virtual_tokens_of(plan, Peft::Prefix)
}

/// The parameters of the model as the plan's framework holds it: the architecture's, and the head of its own
/// that a profile which unties the head (litgpt's checkpoint converter) gives a tied model.
pub(super) fn total_params(s: &Setup) -> Count {
    let arch = s.arch;
    let own_head = if arch.tied_embeddings && !s.head_tied {
        arch.vocab as Count * arch.hidden as Count
    } else {
        0.0
    };
    arch.total_params() as Count + own_head
}
