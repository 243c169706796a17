//! Invariants over the whole plan space: every key at any accepted value, sampled by proptest. Keys that can only
//! add memory never lower a figure, sharding over more GPUs never raises one, the counts and the three peaks keep
//! their order, and every plan survives its own query.

use peakplan_core::plan::{
    Alloc, Attn, DType, Framework, Loss, Method, MoeExperts, Optimizer, Peft, Plan, Precision,
    Quant, Targets, TokenTraining,
};
use peakplan_core::{estimate, preset_arch, Estimate, GpuId, ModelId};
use proptest::prelude::*;

/// One value of every key, drawn across its whole accepted range (integers log-uniformly, so small and huge
/// values both appear).
fn any_plan() -> impl Strategy<Value = Plan> {
    let log = |max: u64| (0u32..=max.ilog2()).prop_flat_map(|e| (1u64 << e)..=(2u64 << e) - 1);
    let pick = |v: &'static [u8]| prop::sample::select(v.to_vec());
    (
        (
            0..ModelId::all().count(),
            prop::sample::select(Method::ALL.to_vec()),
            prop::sample::select(Peft::ALL.to_vec()),
            prop::sample::select(Precision::ALL.to_vec()),
            prop::sample::select(Quant::ALL.to_vec()),
            prop::sample::select(Optimizer::ALL.to_vec()),
            prop::sample::select(Framework::ALL.to_vec()),
            prop::sample::select(Attn::ALL.to_vec()),
            prop::sample::select(Loss::ALL.to_vec()),
            prop::sample::select(DType::ALL.to_vec()),
            prop::sample::select(MoeExperts::ALL.to_vec()),
            prop::sample::select(Alloc::ALL.to_vec()),
        ),
        (
            log(512),
            log(64),
            log(65_536),
            log(16),
            log(4096),
            log(64),
            0u8..=3,
            log(64),
        ),
        (
            1u8..=0xff,
            pick(&[0, 1, 2]),
            log(4096),
            pick(&[0, 16, 32]),
            pick(&[0, 5, 10]),
        ),
        prop::collection::vec(any::<bool>(), 12),
        0..GpuId::all().count(),
    )
        .prop_map(|(kinds, sizes, more, flags, gpu)| {
            let (
                model,
                method,
                peft,
                precision,
                quant,
                optimizer,
                framework,
                attn,
                loss,
                adtype,
                moe,
                alloc,
            ) = kinds;
            let (rank, micro_batch, seq_len, ga, chunk, gpus, zero, vt) = sizes;
            let (targets, tokens, rows, hold, dropout) = more;
            Plan {
                model: ModelId::all().nth(model).unwrap_or(ModelId::DEFAULT),
                method,
                peft,
                precision,
                quant,
                optimizer,
                framework,
                attn,
                loss,
                adapter_dtype: adtype,
                moe_experts: moe,
                allocator: alloc,
                rank,
                micro_batch,
                seq_len,
                grad_accumulation: ga,
                chunk,
                gpus,
                zero,
                virtual_tokens: vt,
                targets: Targets(targets),
                tokens: match tokens {
                    0 => TokenTraining::Frozen,
                    1 => TokenTraining::Rows(rows),
                    _ => TokenTraining::All,
                },
                hold_logits_bits: u64::from(hold),
                dropout: f64::from(dropout) / 100.0,
                grad_checkpointing: flags[0],
                double_quant: flags[1],
                upcast: flags[2],
                qlora_saves_input: flags[3],
                compile: flags[4],
                liger: flags[5],
                optimizer_in_backward: flags[6],
                offload_activations: flags[7],
                cpu_offload: flags[8],
                quantize_at_load_wide: flags[9],
                split_layers: flags[10],
                embed: flags[11],
                gpu: GpuId::all().nth(gpu).unwrap_or(GpuId::DEFAULT),
            }
        })
}

fn est(p: &Plan) -> Estimate {
    estimate(preset_arch(p), p)
}

/// `more` is `plan` with one key changed in a way that can only add memory: no figure may fall.
fn never_lower(plan: &Plan, more: &Plan, what: &str) -> Result<(), TestCaseError> {
    let (a, b) = (est(plan), est(more));
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
        prop_assert!(e.trainable_params <= e.total_params, "{}: {} trainable of {}", plan.to_query(),
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
        never_lower(&plan, &with(&|p| p.micro_batch += step), "a larger micro-batch")?;
        never_lower(&plan, &with(&|p| p.seq_len += step), "a longer sequence")?;
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
                est(&p)
            };
            let n = plan.gpus.clamp(2, 64);
            let (fewer, more) = (on(n), on(n + step));
            prop_assert!(more.device_bytes <= fewer.device_bytes, "{} (split {split}): {n} GPUs need {}, {} need {}",
                plan.to_query(), fewer.device_bytes, n + step, more.device_bytes);
        }
    }
}
