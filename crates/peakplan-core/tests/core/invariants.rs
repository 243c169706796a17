//! Invariants over the whole plan space: every key at any accepted value, sampled by proptest. Keys that can only
//! add memory never lower a figure, sharding over more GPUs never raises one, the counts and the three peaks keep
//! their order, and every plan survives its own query.

use peakplan_core::plan::{
    Checkpointing, Framework, Loss, Method, Optimizer, Peft, Plan, Shard, Targets, TokenTraining,
    KEYS,
};
use peakplan_core::{estimate, estimate_rough, preset_arch, Estimate, GpuId, ModelId};
use proptest::prelude::*;

use crate::util::keyword_values;

/// Values of one plan key, drawn across its whole accepted range (integers log-uniformly, so small and huge values
/// both appear). A key added to the vocabulary without values here fails the tests.
fn values(key: &str) -> BoxedStrategy<String> {
    fn keys<T: Copy + 'static>(all: &[T], key: fn(T) -> &'static str) -> BoxedStrategy<String> {
        let spellings: Vec<String> = all.iter().map(|v| key(*v).to_string()).collect();
        prop::sample::select(spellings).boxed()
    }
    let int = |max: u64| {
        (0u32..=max.ilog2())
            .prop_flat_map(|e| (1u64 << e)..=(2u64 << e) - 1)
            .prop_map(|v| v.to_string())
            .boxed()
    };
    let one_of = |v: &[&'static str]| {
        prop::sample::select(v.to_vec())
            .prop_map(String::from)
            .boxed()
    };
    // A preference task's keys have rules between them (and between `prompt` and `s`): sampled here where any
    // combination holds; their rules have tests of their own.
    match key {
        "task" => return one_of(&["sft", "dpo", "orpo", "simpo", "cpo", "kto"]),
        "ref" => return one_of(&["auto", "none"]),
        "prompt" => return one_of(&["auto"]),
        _ => {}
    }
    if let Some(spellings) = keyword_values(key) {
        return one_of(&spellings);
    }
    match key {
        "model" => keys(&ModelId::all().collect::<Vec<_>>(), ModelId::id),
        "gpu" => keys(&GpuId::all().collect::<Vec<_>>(), GpuId::id),
        "r" => int(512),
        "b" => int(64),
        "s" => int(65_536),
        "ga" => int(16),
        "chunk" => int(4096),
        "gpus" => int(64),
        "vt" => int(64),
        "zero" => one_of(&["0", "1", "2", "3"]),
        "hold" => one_of(&["0", "16", "32"]),
        "dropout" => one_of(&["0", "0.05", "0.1"]),
        "tt" => prop_oneof![one_of(&["0", "all"]), int(4096)].boxed(),
        "targets" => (1u8..=0xff).prop_map(|t| Targets(t).key()).boxed(),
        "gc" | "dq" | "upcast" | "qsave" | "compile" | "liger" | "oib" | "aoff" | "cpuoff"
        | "qload" | "split" | "embed" | "zinit" => one_of(&["0", "1"]),
        // DeepSpeed's sizes in elements: `auto`, 0 (DeepSpeed accepts it: axolotl's ZeRO-3 files set
        // `sub_group_size` and `stage3_max_live_parameters` to 0) and up to 2^40.
        "ds_sub" | "ds_rbucket" | "ds_agbucket" | "ds_prefetch" | "ds_live" | "ds_reuse"
        | "ds_persist" => prop_oneof![one_of(&["auto", "0"]), int(1 << 40)].boxed(),
        "ds_overlap" | "ds_contig" => one_of(&["auto", "0", "1"]),
        "lmean" => one_of(&["auto", "1", "100", "5000"]),
        "lsd" => one_of(&["auto", "0", "50"]),
        "lmax" => one_of(&["auto"]),
        "msplit" => one_of(&["auto", "21", "128", "1024"]),
        // GRPO: `completion` set would make `s` (tests/core/grpo.rs checks that rule).
        "gens" => one_of(&["2", "4", "8"]),
        "completion" => one_of(&["auto"]),
        "beta" => one_of(&["0", "0.04"]),
        "vmem" => one_of(&["0.3", "0.9"]),
        other => panic!("plan key {other} has no values to sample"),
    }
}

/// A plan with every key of the vocabulary set, parsed as a link would be.
pub(crate) fn any_plan() -> impl Strategy<Value = Plan> {
    let keys: Vec<BoxedStrategy<String>> = KEYS
        .iter()
        .map(|k| values(k).prop_map(move |v| format!("{k}={v}")).boxed())
        .collect();
    keys.prop_map(|mut pairs| {
        // A preference task is planned as TRL runs it, over transformers only.
        if !pairs.iter().any(|p| p == "fw=hf") {
            for p in pairs.iter_mut().filter(|p| p.starts_with("task=")) {
                *p = "task=sft".into();
            }
        }
        // GRPO trains its round in micro-batches of equal size: `ga` must divide it.
        if pairs.iter().any(|p| p == "task=grpo") {
            for p in pairs.iter_mut().filter(|p| p.starts_with("ga=")) {
                *p = "ga=1".into();
            }
        }
        // Unsloth runs its own losses and no ZeRO; its offloaded checkpointing is its own.
        let unsloth = pairs.iter().any(|p| p == "fw=unsloth");
        for p in pairs.iter_mut() {
            match p.as_str() {
                "gc=offload" if !unsloth => *p = "gc=1".into(),
                "loss=standard" | "loss=chunked" if unsloth => *p = "loss=fused".into(),
                "zero=1" | "zero=2" | "zero=3" if unsloth => *p = "zero=0".into(),
                "aoff=1" if unsloth => *p = "aoff=0".into(),
                _ => {}
            }
        }
        let parsed = Plan::parse_query(&pairs.join("&"));
        assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
        parsed.plan
    })
}

fn est(p: &Plan) -> Estimate {
    estimate(preset_arch(p), p)
}

/// The estimate with reserved memory by the allocator's rule rather than a replay. The orders below hold for
/// allocated memory and for the rule, not for a replay: a caching allocator's reserved memory is not monotone
/// (one more small block can move where the large ones land, and a run with DDP's buckets reserved 80 MB less
/// than one without).
fn rough(p: &Plan) -> Estimate {
    estimate_rough(preset_arch(p), p)
}

/// `more` is `plan` with one key changed in a way that can only add memory: no figure may fall.
fn never_lower(plan: &Plan, more: &Plan, what: &str) -> Result<(), TestCaseError> {
    let (a, b) = (rough(plan), rough(more));
    prop_assert!(
        b.peak_allocated_bytes >= a.peak_allocated_bytes && b.device_bytes >= a.device_bytes,
        "{what} lowered the peak: {} -> {} allocated, {} -> {} device\n{}\n{}",
        a.peak_allocated_bytes,
        b.peak_allocated_bytes,
        a.device_bytes,
        b.device_bytes,
        plan.to_query(),
        more.to_query()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn counts_and_peaks_keep_their_order_and_plans_their_query(plan in any_plan()) {
        let e = est(&plan);
        // Full fine-tuning and LayerNorm tuning train the model's own parameters; adapters are parameters of their
        // own, which a huge rank can make outnumber a small model's (rank 570 on a 512-wide k_proj).
        let own = plan.method == Method::Full || plan.peft == Peft::Ln;
        prop_assert!(!own || e.trainable_params <= e.total_params, "{}: {} trainable of {}", plan.to_query(),
            e.trainable_params, e.total_params);
        prop_assert!(e.device_bytes >= e.peak_reserved_bytes && e.peak_reserved_bytes >= e.peak_allocated_bytes,
            "{}: device {} reserved {} allocated {}", plan.to_query(), e.device_bytes, e.peak_reserved_bytes,
            e.peak_allocated_bytes);
        let again = Plan::parse_query(&plan.to_query());
        prop_assert!(again.diagnostics.is_empty(), "{}: {:?}", plan.to_query(), again.diagnostics);
        prop_assert_eq!(again.plan, plan);
    }

    #[test]
    fn keys_that_only_add_memory_never_lower_a_figure(plan in any_plan(), step in 1u64..=3) {
        let with = |f: &dyn Fn(&mut Plan)| { let mut p = plan.clone(); f(&mut p); p };
        never_lower(&plan, &with(&|p| p.grad_accumulation += step), "more accumulation")?;
        // Unsloth's own thresholds step down as the tokens grow, as its source does: its fused loss cuts them into
        // more chunks (`4 x round(...)`), and its checkpoints leave the GPU from 512 tokens and 2 MiB on (both rules
        // have tests of their own in levers.rs).
        let unsloth_steps = plan.framework == Framework::Unsloth
            && (plan.loss == Loss::Fused || plan.checkpointing == Checkpointing::Offload);
        if !unsloth_steps {
            never_lower(&plan, &with(&|p| p.micro_batch += step), "a larger micro-batch")?;
            never_lower(&plan, &with(&|p| p.seq_len += step), "a longer sequence")?;
        }
        // Data parallelism copies the model to every GPU and adds its gradient buckets.
        let ddp = with(&|p| { p.split_layers = false; p.zero = 0; p.gpus = 1; });
        never_lower(&ddp, &with(&|p| { p.split_layers = false; p.zero = 0; p.gpus = 1 + step; }), "DDP GPUs")?;
        if plan.hold_logits_bits < 32 {
            never_lower(&plan, &with(&|p| p.hold_logits_bits += 16), "holding more of the logits")?;
        }
        // Keys that resize trainable tensors add memory unless bitsandbytes' 8-bit optimizers are stepping them:
        // those keep a tensor under 4,096 elements in 32-bit state, so growing one past that shrinks its states.
        if matches!(plan.optimizer, Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit) {
            return Ok(());
        }
        // ZeRO-3 under DeepSpeed keeps a module gathered from forward to backward only while the parameters
        // fetched in between stay under its reuse distance, and its prefetcher gathers parameter by parameter
        // within its bucket: larger adapters can push one past the distance, released early, or change what a
        // prefetch takes. That holds on one GPU too, where DeepSpeed runs the same coordinator (found: phi-2 LoRA
        // on q, up, down, ZeRO-3 offloaded to the CPU on one GPU gathers 2.050 GB at rank 9 and 2.041 GB at 11).
        if plan.zero == 3 && plan.sharding().shard == Shard::Deepspeed {
            return Ok(());
        }
        never_lower(&plan, &with(&|p| p.virtual_tokens += step), "more virtual tokens")?;
        // OFT's rank is its number of blocks: more blocks are smaller ones.
        if plan.peft != Peft::Oft {
            never_lower(&plan, &with(&|p| p.rank += step), "a larger rank")?;
        }
        if let TokenTraining::Rows(rows) = plan.tokens {
            never_lower(&plan, &with(&|p| p.tokens = TokenTraining::Rows(rows + step)), "more token rows")?;
        }
    }

    #[test]
    fn sharding_over_more_gpus_never_raises_a_figure(plan in any_plan(), step in 1u64..=8) {
        // From two GPUs on (one GPU shards nothing and gathers nothing), each more GPU holds a smaller share.
        // Not checked: layers split over GPUs with CPU offload, whose in-flight gradient is averaged over the
        // slice's layers with the embedding and head in it, so a one-layer slice counts them whole.
        for split in [false, true].into_iter().filter(|s| !(*s && plan.cpu_offload)) {
            let on = |n: u64| {
                let mut p = plan.clone();
                p.split_layers = split;
                p.zero = if split { 0 } else { 3 };
                p.gpus = n;
                rough(&p)
            };
            let n = plan.gpus.clamp(2, 64);
            let (fewer, more) = (on(n), on(n + step));
            prop_assert!(more.device_bytes <= fewer.device_bytes, "{} (split {split}): {n} GPUs need {}, {} need {}",
                plan.to_query(), fewer.device_bytes, n + step, more.device_bytes);
            prop_assert!(more.peak_allocated_bytes <= fewer.peak_allocated_bytes, "{} (split {split}): {n} GPUs \
                allocate {}, {} allocate {}", plan.to_query(), fewer.peak_allocated_bytes, n + step,
                more.peak_allocated_bytes);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// What a plan needs is the smallest card its step runs on: a card of that size runs it (the allocator frees
    /// its cache and retries there), and it is not above what the plan's own card shows unless a card of that
    /// size runs out.
    #[test]
    fn a_plan_runs_on_the_card_it_needs(p in any_plan()) {
        let arch = preset_arch(&p);
        let (e, needs) = (est(&p), peakplan_core::needs_bytes(arch, &p));
        // Where the allocator frees its cache and retries depends on what it cached, so a larger card can end
        // lower than a smaller one runs at all (found: gemma-2-2b LoRA split over 24 GPUs with expandable
        // segments shows 10,626,269,184 B on its 12 GB card; a card that size runs out, and the smallest that
        // runs the step is 10,653,057,024 B).
        if needs > e.device_bytes {
            prop_assert!(!peakplan_core::fits_on(arch, &p, e.device_bytes), "{}: needs {needs} B, shows {} B",
                p.to_query(), e.device_bytes);
        }
        // Where it differs from what the card shows, a replay on a card of that size ran the step (paged states
        // and an emptied cache leave it at what the card shows: see `engine/reserved.rs`).
        if needs != e.device_bytes {
            prop_assert!(peakplan_core::fits_on(arch, &p, needs), "{}: {} B", p.to_query(), needs);
        }
    }
}
