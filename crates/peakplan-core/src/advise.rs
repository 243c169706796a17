//! The advisor: the changes that lower a plan's peak, what each saves and costs, and the smallest set that fits.

use crate::arch::Architecture;
use crate::engine::{estimate_on_within, Replayed};
use crate::plan::{
    Alloc, Attn, Checkpointing, DType, Framework, Lens, Loss, Method, Optimizer, Overlong, Plan,
    Reference, Shard, Task, TokenTraining, DS_MAX_LIVE, DS_SUB_GROUP, MAX_GRAD_ACCUMULATION,
};
use crate::solve::{Limit, Steps};
use crate::{gpu_choice, solve, units};
use serde::Serialize;

mod fitting;
mod free;
mod grpo;
mod search;

pub use free::{free_changes, FreeChanges};
pub use search::{advise_without_limits, AdviceSearch};

/// What a change costs, cheapest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cost {
    /// Same result, no slower (often faster).
    Free,
    /// Same result, more time.
    Speed,
    /// Same result, on more GPUs than planned.
    Hardware,
    /// May change what the model learns.
    Quality,
}

impl Cost {
    pub fn label(self) -> &'static str {
        match self {
            Cost::Free => "free",
            Cost::Speed => "slower",
            Cost::Hardware => "more GPUs",
            Cost::Quality => "quality",
        }
    }
}

/// One key set to one value, in the query vocabulary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Setting {
    pub key: &'static str,
    pub value: String,
}

/// One edit of the plan, in the query vocabulary: `key=value`, and the keys in `also` that must move with it to
/// keep what the label promises (a halved micro-batch doubles the gradient accumulation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub key: &'static str,
    pub value: String,
    pub also: Vec<Setting>,
    /// What the change does, in words.
    pub label: String,
    pub cost: Cost,
    /// The price, in words.
    pub cost_text: &'static str,
}

/// A set of changes and what the plan needs with them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suggestion {
    pub changes: Vec<Change>,
    /// The plan with the changes applied.
    pub query: String,
    #[serde(skip)]
    pub plan: Plan,
    /// What `nvidia-smi` would show with the changes.
    pub device_bytes: u64,
    pub saved_bytes: u64,
    /// The highest cost among the changes.
    pub cost: Cost,
    pub fits: Option<bool>,
    pub max_batch: Option<u64>,
    pub max_seq: Option<u64>,
    /// Whether `max_batch` and `max_seq` are worked out ([`add_limits`]); until then both are None.
    #[serde(skip)]
    pub limits_known: bool,
}

/// The advisor's answer for a plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    pub device_bytes: u64,
    pub capacity_bytes: Option<u64>,
    pub fits: Option<bool>,
    /// When the plan does not fit: the cheapest, then smallest, set of changes that makes it fit.
    pub to_fit: Option<Suggestion>,
    /// Every single change that lowers the peak, largest saving first.
    pub levers: Vec<Suggestion>,
}

fn change(
    key: &'static str,
    value: impl Into<String>,
    label: impl Into<String>,
    cost: Cost,
    cost_text: &'static str,
) -> Change {
    Change {
        key,
        value: value.into(),
        also: Vec::new(),
        label: label.into(),
        cost,
        cost_text,
    }
}

impl Change {
    /// Every key the change sets, its own first: `b=2`, then `ga=8`.
    pub fn settings(&self) -> impl Iterator<Item = (&'static str, &str)> {
        std::iter::once((self.key, self.value.as_str()))
            .chain(self.also.iter().map(|s| (s.key, s.value.as_str())))
    }

    /// The change as query pairs: `b=2&ga=8`.
    pub fn query(&self) -> String {
        let pairs: Vec<String> = self.settings().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join("&")
    }
}

/// A micro-batch of `b` with the gradient accumulation that keeps the plan's effective batch (rounded up where
/// `b` does not divide it), so fewer samples per step never silently means a smaller effective batch.
fn batch_change(plan: &Plan, b: u64, label: String) -> Change {
    let effective = plan.micro_batch.saturating_mul(plan.grad_accumulation);
    let ga = effective.div_ceil(b).clamp(1, MAX_GRAD_ACCUMULATION);
    let cost_text = if b * ga == effective {
        "same effective batch, more steps"
    } else {
        "about the same effective batch, more steps"
    };
    let mut c = change(
        "b",
        b.to_string(),
        format!("{label} and accumulate gradients over {ga} steps"),
        Cost::Speed,
        cost_text,
    );
    if ga != plan.grad_accumulation {
        c.also.push(Setting {
            key: "ga",
            value: ga.to_string(),
        });
    }
    c
}

/// The single changes worth trying on this plan (each changes one key; none is a no-op), in the order they are
/// listed: kernels and the allocator, the optimizer, the method and its precision, a preference task's
/// reference, capacity, then how FSDP shards and accumulates.
pub fn candidates(plan: &Plan) -> Vec<Change> {
    let mut c = Vec::new();
    kernel_changes(plan, &mut c);
    unsloth_changes(plan, &mut c);
    optimizer_changes(plan, &mut c);
    method_changes(plan, &mut c);
    task_changes(plan, &mut c);
    grpo::grpo_changes(plan, &mut c);
    capacity_changes(plan, &mut c);
    sharding_changes(plan, &mut c);
    c
}

/// Checkpointing, attention, loss, fused kernels, compile, the allocator and MoE checkpoints.
fn kernel_changes(plan: &Plan, c: &mut Vec<Change>) {
    if !plan.checkpointing.on() {
        c.push(change(
            "gc",
            "1",
            "Turn on gradient checkpointing",
            Cost::Speed,
            "recomputes each layer's forward during backward: about a third more compute",
        ));
    }
    if plan.attn == Attn::Eager {
        c.push(change(
            "attn",
            "sdpa",
            "Use SDPA attention instead of eager",
            Cost::Free,
            "no seq² score matrix is kept; usually faster",
        ));
    }
    if plan.loss == Loss::Standard {
        c.push(change(
            "loss",
            "chunked",
            "Compute the loss in 256-token chunks",
            Cost::Free,
            "the same loss, without the full batch x seq x vocab logits",
        ));
        c.push(change(
            "loss",
            "fused",
            "Use a fused linear cross-entropy (Liger)",
            Cost::Free,
            "the logits are never materialized; usually faster",
        ));
    }
    // Unsloth patches the model with kernels of its own: Liger's and a compiled model are not how it runs.
    let unsloth = plan.framework == Framework::Unsloth;
    if !plan.liger && !unsloth {
        c.push(change(
            "liger",
            "1",
            "Use Liger's fused RMSNorm, SwiGLU and RoPE kernels",
            Cost::Free,
            "fewer intermediates kept; usually faster",
        ));
    }
    if !plan.compile && !unsloth {
        c.push(change(
            "compile",
            "1",
            "Compile the model (torch.compile)",
            Cost::Speed,
            "a compilation pause at start; fused kernels keep fewer intermediates",
        ));
    }
    if plan.allocator == Alloc::Cached {
        c.push(change(
            "alloc",
            "expandable",
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            Cost::Free,
            "freed blocks are reused instead of stranded: reserved memory stays near allocated",
        ));
        // PyTorch's older advice for fragmentation: often costs memory (a large cached block no longer serves a
        // smaller request), so the replay decides and the card shows only where it saves.
        if plan.max_split_mb.is_none() {
            c.push(change(
                "msplit",
                "128",
                "Set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128",
                Cost::Free,
                "cached blocks of 128 MiB or more are never split for a smaller tensor, and can be released whole \
                 when the card is full",
            ));
        }
    }
    // Dense models gain nothing here, and a change that saves nothing is not listed.
    if plan.method == Method::Qlora && plan.experts_are_parameters() {
        c.push(change(
            "moe",
            "linear",
            "Load a checkpoint with one Linear per expert (Unsloth's), so the experts quantize too",
            Cost::Free,
            "the same weights; transformers 5 leaves 3D expert parameters 16-bit",
        ));
    }
}

/// Unsloth: its offloaded checkpointing and fused loss under `fw=unsloth`; for a Trainer plan it could run (one
/// GPU or DDP, supervised fine-tuning), the switch to Unsloth with the defaults it brings.
fn unsloth_changes(plan: &Plan, c: &mut Vec<Change>) {
    if plan.framework == Framework::Unsloth {
        if plan.checkpointing == Checkpointing::On {
            c.push(change(
                "gc",
                "offload",
                "Offload the checkpointed layer inputs to CPU memory (Unsloth's checkpointing)",
                Cost::Speed,
                "each layer's input waits in pinned CPU memory: the host needs that much more; the copies overlap \
                 compute",
            ));
        }
        if plan.loss == Loss::Kernel {
            c.push(change(
                "loss",
                "fused",
                "Let Unsloth compute the loss without logits (unset UNSLOTH_RETURN_LOGITS)",
                Cost::Free,
                "the same loss, in token chunks: no batch x seq x vocab logits",
            ));
        }
        return;
    }
    if plan.framework != Framework::Hf || plan.task != Task::Sft {
        return;
    }
    let mut switched = plan.clone();
    Framework::Unsloth.apply_defaults(&mut switched);
    // Only where Unsloth runs the plan as it stands (no ZeRO, no torchtune offloading, a loss it has).
    if !switched.keys_agree() {
        return;
    }
    let moved: Vec<Setting> = ["opt", "gc", "loss", "alloc", "adtype"]
        .into_iter()
        .filter_map(|key| {
            let value = switched.get(key)?;
            (plan.get(key).as_deref() != Some(value.as_str())).then_some(Setting { key, value })
        })
        .collect();
    let eight_bit = switched.optimizer != plan.optimizer;
    let mut ch = change(
        "fw",
        "unsloth",
        "Train with Unsloth: checkpoints offloaded to CPU memory, a loss without logits, its LoRA kernels",
        if eight_bit { Cost::Quality } else { Cost::Speed },
        if eight_bit {
            "another framework; its 8-bit AdamW is a small quality risk, and its offloaded checkpoints need pinned \
             CPU memory"
        } else {
            "another framework; its offloaded checkpoints need pinned CPU memory"
        },
    );
    ch.also = moved;
    c.push(ch);
}

/// Optimizer implementations and 8-bit states.
fn optimizer_changes(plan: &Plan, c: &mut Vec<Change>) {
    if plan.optimizer == Optimizer::AdamwTorch {
        c.push(change(
            "opt",
            "adamw_torch_fused",
            "Use the fused AdamW",
            Cost::Free,
            "updates in place: no state-sized temporary",
        ));
    }
    match plan.optimizer {
        Optimizer::AdamwTorch
        | Optimizer::AdamwTorchFused
        | Optimizer::PagedAdamw32bit
        | Optimizer::Adafactor => {
            c.push(change(
                "opt",
                "adamw_8bit",
                "Use 8-bit AdamW (bitsandbytes)",
                Cost::Quality,
                "8-bit optimizer states: a small, usually invisible, quality risk",
            ));
            c.push(change(
                "opt",
                "paged_adamw_8bit",
                "Use paged 8-bit AdamW",
                Cost::Speed,
                "8-bit states that move to CPU memory under pressure (slower when they do)",
            ));
        }
        Optimizer::Adamw8bit => {
            c.push(change(
                "opt",
                "paged_adamw_8bit",
                "Page the 8-bit optimizer states",
                Cost::Speed,
                "states move to CPU memory under pressure (slower when they do)",
            ));
        }
        Optimizer::PagedAdamw8bit | Optimizer::Sgd => {}
    }
}

/// The training method, quantization constants, adapter dtype and precision.
fn method_changes(plan: &Plan, c: &mut Vec<Change>) {
    let peft = plan.method != Method::Full;
    match plan.method {
        Method::Full => c.push(change(
            "method",
            "lora",
            "Train LoRA adapters instead of every weight",
            Cost::Quality,
            "adapters instead of full weights: close to full fine-tuning on most tasks, not all",
        )),
        Method::Lora => c.push(change(
            "method",
            "qlora",
            "Quantize the frozen base to 4 bits (QLoRA)",
            Cost::Speed,
            "every matmul dequantizes its weight (slower); a small quality cost",
        )),
        Method::Qlora => {
            if !plan.double_quant {
                c.push(change(
                    "dq",
                    "1",
                    "Double-quantize the 4-bit constants",
                    Cost::Free,
                    "0.37 bit per weight less, no measurable cost",
                ));
            }
            if plan.upcast {
                c.push(change(
                    "upcast",
                    "0",
                    "Keep non-quantized weights in 16-bit",
                    Cost::Quality,
                    "norms and embeddings in 16-bit: slightly less stable",
                ));
            }
        }
    }
    if peft && plan.adapter_dtype == DType::Fp32 {
        c.push(change(
            "adtype",
            "bf16",
            "Keep the adapters in bf16",
            Cost::Quality,
            "adapter weights, gradients and states in bf16: a little less precise",
        ));
    }
    if plan.method == Method::Full && plan.precision.is_amp() {
        c.push(change(
            "prec",
            "bf16",
            "Train in pure bf16 (no fp32 master weights)",
            Cost::Quality,
            "updates rounded to bf16: can stall small updates",
        ));
    }
}

/// What the model learns with: rank, targets, trained tokens, sharding, batch and sequence.
fn capacity_changes(plan: &Plan, c: &mut Vec<Change>) {
    let peft = plan.method != Method::Full;
    if peft && plan.rank > 4 {
        let r = plan.rank / 2;
        c.push(change(
            "r",
            r.to_string(),
            format!("Halve the LoRA rank to {r}"),
            Cost::Quality,
            "less adapter capacity",
        ));
    }
    if peft && plan.targets.key() != "q,v" && plan.targets.0.count_ones() > 2 {
        c.push(change(
            "targets",
            "q,v",
            "Adapt only the q and v projections",
            Cost::Quality,
            "fewer adapted layers: less capacity",
        ));
    }
    if plan.tokens == TokenTraining::All {
        c.push(change(
            "tt",
            "64",
            "Train 64 token rows instead of the whole embedding and head",
            Cost::Quality,
            "only the chosen tokens' rows learn",
        ));
    }
    // Batches of varying length: grouped by length, the longest comes first and the allocator's segments are cut
    // for it, so shorter batches reuse them instead of leaving segments of their own (listed only where the
    // replay says it saves).
    // Packed rows are all `s` tokens: every step alike, so no segment is cut for a batch length that does not
    // come back (and no padding is trained).
    if matches!(plan.lengths, Lens::Padded | Lens::Grouped) {
        c.push(change(
            "lens",
            "packed",
            "Pack sequences into rows of s tokens (packing=True)",
            Cost::Free,
            "every batch the same shape; with padding-free attention no sequence attends to its neighbours",
        ));
    }
    if plan.lengths == Lens::Padded {
        c.push(change(
            "lens",
            "grouped",
            "Group batches by length (group_by_length=True)",
            Cost::Free,
            "similar lengths batched together, the longest first: less padding, fewer stranded segments",
        ));
    }
    // Offloading the optimizer's memory to the CPU (DeepSpeed's offload_optimizer, FSDP's CPUOffload) pays where
    // there are states to move: a full fine-tune's.
    if plan.method == Method::Full && !plan.cpu_offload {
        c.push(change(
            "cpuoff",
            "1",
            "Offload optimizer states, master weights and gradients to CPU memory",
            Cost::Speed,
            "each step moves them over PCIe and steps the optimizer on the CPU: several times slower",
        ));
    }
    if plan.gpus > 1 && plan.zero < 3 {
        c.push(change(
            "zero",
            "3",
            "Shard weights, gradients and optimizer states (ZeRO-3 / FSDP)",
            Cost::Speed,
            "more communication between GPUs",
        ));
    }
    // GRPO's `b` is the round's prompts and `s` its prompt and completion: its own levers cut them.
    let grpo = plan.task == Task::Grpo;
    if plan.micro_batch > 1 && !grpo {
        let b = plan.micro_batch / 2;
        c.push(batch_change(
            plan,
            b,
            format!("Halve the micro-batch to {b}"),
        ));
    }
    if plan.seq_len > 256 && !grpo {
        let s = plan.seq_len / 2;
        let mut ch = change(
            "s",
            s.to_string(),
            format!("Halve the sequence length to {s}"),
            Cost::Quality,
            // Where the data's longer sequences are dropped (`ltrunc=drop`), a shorter limit drops more of them.
            if plan.lengths.varies() && plan.len_overlong == Overlong::Drop {
                "longer documents are dropped"
            } else {
                "longer documents get cut"
            },
        );
        // A prompt length set by hand halves too, so that the card's link still leaves completion tokens.
        if let Some(prompt) = plan.prompt_tokens {
            ch.also.push(Setting {
                key: "prompt",
                value: (prompt / 2).clamp(1, s - 1).to_string(),
            });
        }
        c.push(ch);
    }
    shorter_prompts(plan, c);
}

/// Fewest prompt tokens the advisor suggests cutting a preference task's prompts to.
const MIN_PROMPT: u64 = 64;

/// A preference task's reference: precomputed log-probabilities (TRL's `precompute_ref_log_probs`) leave the
/// step no reference pass and no second copy of the model.
fn task_changes(plan: &Plan, c: &mut Vec<Change>) {
    // GRPO scores each round's fresh completions: nothing to precompute (its lever is beta=0).
    if plan.task != Task::Grpo
        && matches!(
            plan.reference_source(),
            Reference::Model | Reference::AdaptersOff
        )
    {
        c.push(change(
            "ref",
            "precomputed",
            "Precompute the reference log-probabilities (precompute_ref_log_probs)",
            Cost::Free,
            "the reference scores the dataset once before training: no reference pass, and no reference copy, in \
             the step",
        ));
    }
    // ORPO and SimPO train on DPO's pairs without a reference (kept only where that lowers the peak: they keep
    // the doubled batch's full logits, which DPO's fused head never builds). KTO's data is unpaired: not offered.
    if plan.task == Task::Dpo && plan.reference_source() != Reference::None {
        for (task, title, cost) in [
            (
                "simpo",
                "Train with SimPO instead (no reference model)",
                "a different objective (TRL's CPOTrainer, loss_type=simpo): no reference copy or pass, but the \
                 chosen and rejected sequences' full logits are kept",
            ),
            (
                "orpo",
                "Train with ORPO instead (no reference model)",
                "a different objective (TRL's ORPOTrainer, an NLL term on the chosen sequences): no reference \
                 copy or pass, but the full logits are kept",
            ),
        ] {
            let mut ch = change("task", task, title, Cost::Quality, cost);
            if plan.reference != Reference::Auto {
                ch.also.push(Setting {
                    key: "ref",
                    value: "auto".to_string(),
                });
            }
            c.push(ch);
        }
    }
}

/// A preference task's prompts cut to half: the sequence shrinks by as many tokens and the completions, which
/// are scored, stay as long.
fn shorter_prompts(plan: &Plan, c: &mut Vec<Change>) {
    // GRPO's prompts are the dataset's (TRL 1.16 cuts none); its completions are its lever.
    if !plan.task.has_reference() || plan.task == Task::Grpo {
        return;
    }
    let prompt = plan.prompt_tokens();
    let shorter = prompt / 2;
    if shorter < MIN_PROMPT {
        return;
    }
    let s = plan.seq_len - (prompt - shorter);
    let mut ch = change(
        "prompt",
        shorter.to_string(),
        format!("Cut prompts to {shorter} tokens (sequences of {s}, completions as long)"),
        Cost::Quality,
        "longer prompts get cut: TRL's max_prompt_length",
    );
    ch.also.push(Setting {
        key: "s",
        value: s.to_string(),
    });
    c.push(ch);
}

/// FSDP's gradients: accumulation outside `no_sync`, and units that do not mix frozen and trainable weights.
/// Only where FSDP shards gradients (several GPUs, stage 2 or 3); DeepSpeed's partitions hold neither.
fn sharding_changes(plan: &Plan, c: &mut Vec<Change>) {
    deepspeed_changes(plan, c);
    if !plan.sharded_by_fsdp() {
        return;
    }
    let sharding = plan.sharding();
    if plan.grad_accumulation > 1 && !sharding.sync_each_batch && !plan.optimizer_in_backward {
        c.push(change(
            "gsync",
            "1",
            "Reduce gradients every micro-batch",
            Cost::Speed,
            "under no_sync every GPU keeps whole gradients until the last micro-batch; \
             reducing each one keeps only shards, with more communication",
        ));
    }
    if sharding.mixed_units {
        c.push(change(
            "wrap",
            "lora",
            "Wrap LoRA layers apart (PEFT's fsdp_auto_wrap_policy)",
            Cost::Free,
            "a block wrapped with its adapters gives its frozen weights gradients too; \
             adapters in units of their own leave them none",
        ));
        c.push(change(
            "shard",
            "fsdp2",
            "Shard with FSDP2 (fully_shard)",
            Cost::Free,
            "each parameter sharded on its own: frozen weights get no gradients, however wrapped",
        ));
    }
}

/// DeepSpeed's own sizes where they move memory (`engine/deepspeed.rs`): the advisor keeps those that lower
/// the peak.
fn deepspeed_changes(plan: &Plan, c: &mut Vec<Change>) {
    if plan.gpus < 2 || plan.zero == 0 || plan.sharding().shard != Shard::Deepspeed {
        return;
    }
    if plan.zero == 3 {
        if !plan.zero_init && plan.method != Method::Qlora {
            c.push(change(
                "zinit",
                "1",
                "Partition the model as it loads (zero.Init)",
                Cost::Free,
                "load with DeepSpeed's config known (TrainingArguments before from_pretrained): every GPU \
                 gets its shard, never the whole model",
            ));
        }
        // The prefetcher gathers the step's next parameters at every module's fetch until this many are live:
        // on a large model ZeRO-3 holds about that many gathered (`engine/coordinator.rs`).
        if plan.ds_max_live.unwrap_or(DS_MAX_LIVE) > FEWER_LIVE {
            c.push(change(
                "ds_live",
                FEWER_LIVE.to_string(),
                "Gather at most 10^8 parameters ahead (stage3_max_live_parameters)",
                Cost::Speed,
                "ZeRO-3's prefetcher stops once this many parameters are gathered: less held in 16-bit, \
                 less communication overlapped with compute",
            ));
        }
        let sub = plan.ds_sub_group.unwrap_or(DS_SUB_GROUP);
        if sub > SMALL_SUB_GROUP {
            c.push(change(
                "ds_sub",
                SMALL_SUB_GROUP.to_string(),
                "Step the optimizer in sub-groups of 10^8 elements (sub_group_size)",
                Cost::Speed,
                "the step's fp32 and 16-bit gradient copies are one sub-group's, not the partition's; \
                 more, smaller optimizer steps",
            ));
        }
    } else {
        if plan.ds_reduce_bucket.is_some() {
            c.push(change(
                "ds_rbucket",
                "auto",
                "Reduce buckets of hidden_size² elements (reduce_bucket_size: auto)",
                Cost::Speed,
                "smaller buckets through backward and a smaller copy at each reduction; more, smaller \
                 reductions",
            ));
        }
        if plan.ds_overlap_comm == Some(true) {
            c.push(change(
                "ds_overlap",
                "0",
                "Reduce gradients after they are copied (overlap_comm off)",
                Cost::Speed,
                "one reduce bucket instead of two, without overlapping communication with backward",
            ));
        }
    }
}

/// The live-parameter limit the advisor offers ZeRO-3 plans (`ds_live`): DeepSpeed's default is ten times larger.
const FEWER_LIVE: u64 = 100_000_000;

/// The sub-group the advisor offers ZeRO-3 plans (`ds_sub`): DeepSpeed's default is ten times larger.
const SMALL_SUB_GROUP: u64 = 100_000_000;

/// The plan with `changes` applied, every key each one sets.
pub fn apply(plan: &Plan, changes: &[&Change]) -> Plan {
    let mut p = plan.clone();
    for ch in changes {
        // Candidates only use accepted values, so `set` cannot fail here; a failure would leave the key as it was.
        for (key, value) in ch.settings() {
            let _ = p.set(key, value);
        }
    }
    p
}

/// The plan with `changes` applied and its figures, its largest batch and longest sequence not yet worked out
/// ([`add_limits`]: the two searches are most of a suggestion's cost); within what `replayed` allows (`None` until
/// the allowance covers its replays, [`crate::engine::Replayed`]).
fn suggestion_within(
    arch: &Architecture,
    plan: &Plan,
    base_bytes: u64,
    changes: &[&Change],
    capacity: Option<u64>,
    replayed: &mut Replayed,
) -> Option<Suggestion> {
    let p = apply(plan, changes);
    let on = capacity.unwrap_or(p.gpu.preset().capacity_bytes);
    let e = estimate_on_within(arch, &p, on, replayed)?;
    let saved_bytes = base_bytes.saturating_sub(e.device_bytes);
    Some(Suggestion {
        changes: changes.iter().map(|c| (*c).clone()).collect(),
        query: p.to_query(),
        device_bytes: e.device_bytes,
        saved_bytes,
        cost: changes.iter().map(|c| c.cost).max().unwrap_or(Cost::Free),
        fits: capacity.map(|c| e.device_bytes <= c),
        max_batch: None,
        max_seq: None,
        limits_known: false,
        plan: p,
    })
}

/// Works out a suggestion's largest micro-batch and longest sequence on a GPU of `capacity_bytes`.
pub fn add_limits(arch: &Architecture, s: &mut Suggestion, capacity_bytes: u64) {
    for limit in Limit::BOTH {
        add_limit(arch, s, capacity_bytes, limit);
    }
}

/// [`add_limits`] one search at a time (a page runs each in a task of its own): the limits are known once the
/// longest sequence is, which is worked out second.
pub fn add_limit(arch: &Architecture, s: &mut Suggestion, capacity_bytes: u64, limit: Limit) {
    let answer = solve::Search::of(limit, &s.plan, capacity_bytes).run(arch);
    set_limit(s, limit, answer);
}

/// A suggestion's limit, once its search (`solve::Search::of`, a page runs it a replayed probe at a time) has
/// ended (the longest sequence completes its limits).
pub fn set_limit(s: &mut Suggestion, limit: Limit, answer: Option<u64>) {
    match limit {
        Limit::Batch => s.max_batch = answer,
        Limit::Seq => {
            s.max_seq = answer;
            s.limits_known = true;
        }
    }
}

/// Most changes combined when searching for a fitting set.
const MAX_SET: usize = 4;

/// Advises on a plan, against a capacity when one is given (the plan's GPU by default), with every suggestion's
/// largest batch and longest sequence against that capacity.
pub fn advise(arch: &Architecture, plan: &Plan, capacity: Option<u64>) -> Advice {
    let mut advice = advise_without_limits(arch, plan, capacity);
    if let Some(cap) = capacity {
        for s in advice.to_fit.iter_mut().chain(advice.levers.iter_mut()) {
            add_limits(arch, s, cap);
        }
    }
    advice
}

/// The change to `n` GPUs, sharded as [`gpu_choice::plan_on_gpus`] shards them (ZeRO-3 beyond one, or the plan's
/// layer split), when that is more than the plan has: `n` the fewest of a capacity that hold it.
fn gpus_change(plan: &Plan, n: u64) -> Option<Change> {
    if n <= plan.gpus {
        return None;
    }
    let on_n = gpu_choice::plan_on_gpus(plan, n);
    let mut c = change(
        "gpus",
        n.to_string(),
        format!(
            "Train on {}",
            units::gpu_spread(&on_n).unwrap_or_else(|| format!("{n} GPUs"))
        ),
        Cost::Hardware,
        "more GPUs to rent: the weights, gradients and optimizer states are spread over them",
    );
    if on_n.zero != plan.zero {
        c.also.push(Setting {
            key: "zero",
            value: on_n.zero.to_string(),
        });
    }
    Some(c)
}
