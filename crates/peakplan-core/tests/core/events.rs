//! The engine's own allocation sequence (`allocation_events`) replayed by the caching-allocator simulator: its
//! peak of requested bytes is the engine's allocated peak to the byte, a step gives back what it took, and steps
//! of different lengths replay one after another.

use peakplan_core::allocator::{replay_steps, AllocatorConfig, Stats};
use peakplan_core::plan::Plan;
use peakplan_core::{
    allocation_events, estimate, preset_arch, Architecture, Estimate, Kind, Phase, PhaseMemory,
};
use proptest::prelude::*;

use crate::golden::GOLDEN;
use crate::invariants::any_plan;
use crate::traced::{family_rows, llama_rows};
use crate::util::plan;

/// Counts beyond 2^53 bytes round in `f64`: no byte equality is claimed there.
const EXACT_BELOW: u64 = 1 << 53;

fn unlimited() -> AllocatorConfig {
    AllocatorConfig::with_capacity(u64::MAX)
}

/// What stays allocated between steps: the weights, DDP's buckets and the runtime's tables, and the optimizer's
/// states and master weights.
fn resident_after_step(e: &Estimate) -> u64 {
    [
        Kind::BaseWeights,
        Kind::QuantConstants,
        Kind::AdapterWeights,
        Kind::ReferenceWeights,
        Kind::ShardBuffers,
        Kind::InputBuffers,
        Kind::OptimizerStates,
        Kind::MasterWeights,
    ]
    .iter()
    .map(|k| e.component(*k))
    .sum()
}

fn replay(arch: &Architecture, p: &Plan, steps: usize) -> Result<Stats, String> {
    let ev = allocation_events(arch, p);
    let step = ev.flat_step();
    let steps: Vec<&[_]> = (0..steps).map(|_| step.as_slice()).collect();
    replay_steps(&unlimited(), &ev.setup, &steps).map_err(|e| format!("{}: {e}", p.to_query()))
}

/// The engine's allocated peak, except where it is the load moment: the engine counts the optimizer's states
/// there beside the load transient, but torch creates them at the first step, after loading, so no replay holds
/// both; the replay's peak is then the largest of the other phases and the load moment without the states.
fn expected_peak(e: &Estimate) -> u64 {
    if e.peak_phase != Phase::Load {
        return e.peak_allocated_bytes;
    }
    let sum = |m: &PhaseMemory| m.weights + m.gradients + m.optimizer + m.activations + m.other;
    let load = &e.phases[0];
    e.phases[1..]
        .iter()
        .map(sum)
        .fold(sum(load) - load.optimizer, u64::max)
}

/// The one check: replayed from the second step on (the first creates the optimizer's states), the peak of
/// requested bytes is the engine's allocated peak; a step ends where it began (weights and states); more steps
/// change nothing; a lone first step never exceeds it; reserved covers allocated.
fn check(arch: &Architecture, p: &Plan) -> Result<(), String> {
    let e = estimate(arch, p);
    let q = p.to_query();
    if e.saturated || e.peak_allocated_bytes >= EXACT_BELOW {
        return Ok(());
    }
    let two = replay(arch, p, 2)?;
    if two.requested_bytes.peak != expected_peak(&e) {
        return Err(format!(
            "{q}: replayed peak {} B, engine {} B ({:+} B, peak phase {:?}, expected {})",
            two.requested_bytes.peak,
            e.peak_allocated_bytes,
            two.requested_bytes.peak as i128 - e.peak_allocated_bytes as i128,
            e.peak_phase,
            expected_peak(&e)
        ));
    }
    if two.requested_bytes.current != resident_after_step(&e) {
        return Err(format!(
            "{q}: {} B left after the step, {} B resident",
            two.requested_bytes.current,
            resident_after_step(&e)
        ));
    }
    let one = replay(arch, p, 1)?;
    let three = replay(arch, p, 3)?;
    if one.requested_bytes.peak > two.requested_bytes.peak
        || three.requested_bytes.peak != two.requested_bytes.peak
        || three.requested_bytes.current != two.requested_bytes.current
    {
        return Err(format!(
            "{q}: peaks over 1, 2, 3 steps {} {} {}",
            one.requested_bytes.peak, two.requested_bytes.peak, three.requested_bytes.peak
        ));
    }
    if two.reserved_bytes.peak < two.allocated_bytes.peak
        || two.allocated_bytes.peak < two.requested_bytes.peak
    {
        return Err(format!("{q}: reserved below allocated: {two:?}"));
    }
    Ok(())
}

fn check_all(cases: impl IntoIterator<Item = (String, Architecture, String)>) -> usize {
    let mut failures = Vec::new();
    let mut n = 0;
    for (id, arch, q) in cases {
        n += 1;
        if let Err(f) = check(&arch, &plan(&q)) {
            failures.push(format!("{id}: {f}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    n
}

#[test]
fn golden_plans_replay_to_the_engines_peak() {
    let n = check_all(GOLDEN.iter().map(|(q, _)| {
        let p = plan(q);
        ("golden".to_string(), preset_arch(&p).clone(), q.to_string())
    }));
    assert_eq!(n, 3);
}

#[test]
fn traced_plans_replay_to_the_engines_peak() {
    let mut n = 0;
    for file in [
        "traced/hf_cpu.csv",
        "traced/tt_cpu.csv",
        "traced/lg_cpu.csv",
        "traced/hf_keys.csv",
        "traced/fsdp_cpu.csv",
    ] {
        n += check_all(
            llama_rows(file)
                .into_iter()
                .map(|r| (r.id, r.arch, r.query)),
        );
    }
    n += check_all(family_rows());
    assert!(n >= 260, "{n} traced plans replayed");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn sampled_plans_replay_to_the_engines_peak(p in any_plan()) {
        if layers_backward_outgrows_the_moments(&p) {
            let (e, ev) = (estimate(preset_arch(&p), &p), replay(preset_arch(&p), &p, 2));
            prop_assert!(e.saturated || e.peak_allocated_bytes >= EXACT_BELOW
                || ev.as_ref().is_ok_and(|s| s.requested_bytes.peak >= expected_peak(&e)), "{}", p.to_query());
            return Ok(());
        }
        let r = check(preset_arch(&p), &p);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

/// The plans whose layers' backward, replayed layer by layer, can hold more than any moment the engine counts
/// (see the report): the gradients made so far beside a layer's saved tensors that stay (two offloaded layers),
/// its recomputed forward, or the layers ZeRO-3 / FSDP full sharding gathers in backward (the end moment has
/// only the root unit gathered).
fn layers_backward_outgrows_the_moments(p: &Plan) -> bool {
    p.offload_activations || p.checkpointing.on() || (p.zero >= 3 && (p.gpus > 1 || p.cpu_offload))
}

/// llama-3.1-8b QLoRA at batch 1 and `s` tokens.
fn qlora(s: u64) -> Plan {
    plan(&format!("model=llama-3.1-8b&method=qlora&b=1&s={s}"))
}

#[test]
fn two_steps_peak_as_one_steady_step_and_reserve_at_least_it() {
    let p = qlora(2048);
    let arch = preset_arch(&p);
    let e = estimate(arch, &p);
    let (two, five) = (replay(arch, &p, 2).unwrap(), replay(arch, &p, 5).unwrap());
    assert_eq!(two.requested_bytes.peak, e.peak_allocated_bytes);
    assert_eq!(five.requested_bytes.peak, two.requested_bytes.peak);
    assert_eq!(five.requested_bytes.current, resident_after_step(&e));
    // The cache a step leaves serves the next one: no new segment after the second step.
    assert_eq!(five.reserved_bytes.peak, two.reserved_bytes.peak);
    assert!(two.reserved_bytes.peak >= two.allocated_bytes.peak);
    assert!(two.allocated_bytes.peak >= two.requested_bytes.peak);
}

#[test]
fn steps_of_alternating_lengths_keep_the_books() {
    let (short, long) = (qlora(512), qlora(2048));
    let arch = preset_arch(&long);
    let (es, el) = (
        allocation_events(arch, &short),
        allocation_events(arch, &long),
    );
    // Same weights and states whatever the length.
    assert_eq!(es.setup, el.setup);
    let (es_step, el_step) = (es.flat_step(), el.flat_step());
    let steps: Vec<&[_]> = (0..10)
        .map(|i| {
            if i % 2 == 0 {
                es_step.as_slice()
            } else {
                el_step.as_slice()
            }
        })
        .collect();
    for expandable in [false, true] {
        let config = AllocatorConfig {
            expandable_segments: expandable,
            ..unlimited()
        };
        let mixed = replay_steps(&config, &es.setup, &steps).unwrap();
        let long_alone = replay_steps(&config, &el.setup, &[&el_step, &el_step]).unwrap();
        let e = estimate(arch, &long);
        assert_eq!(mixed.requested_bytes.peak, e.peak_allocated_bytes);
        assert_eq!(mixed.requested_bytes.current, resident_after_step(&e));
        assert!(
            mixed.reserved_bytes.peak >= long_alone.reserved_bytes.peak,
            "expandable {expandable}: {} after mixed steps, {} for the long step alone",
            mixed.reserved_bytes.peak,
            long_alone.reserved_bytes.peak
        );
        assert!(mixed.reserved_bytes.current >= mixed.allocated_bytes.current);
        assert_eq!(mixed.ooms, 0);
    }
}

#[test]
fn reserved_peak_of_the_simulator_against_the_engine() {
    // Printed for the record (`--nocapture`): llama-3.1-8b QLoRA, b=1, s=2048.
    let p = qlora(2048);
    let arch = preset_arch(&p);
    let ev = allocation_events(arch, &p);
    let step = ev.flat_step();
    for expandable in [false, true] {
        let config = AllocatorConfig {
            expandable_segments: expandable,
            ..unlimited()
        };
        let s = replay_steps(&config, &ev.setup, &[&step, &step]).unwrap();
        // The engine's own figure under the plan's matching allocator key.
        let keyed = plan(&format!(
            "{}&alloc={}",
            p.to_query(),
            if expandable { "expandable" } else { "cached" }
        ));
        let e = estimate(arch, &keyed);
        println!(
            "expandable {expandable}: simulated reserved peak {} B, allocated peak {} B, requested peak {} B; \
             engine peak_reserved_bytes {} B, peak_allocated_bytes {} B; events {} setup + {} step",
            s.reserved_bytes.peak,
            s.allocated_bytes.peak,
            s.requested_bytes.peak,
            e.peak_reserved_bytes,
            e.peak_allocated_bytes,
            ev.setup.len(),
            step.len()
        );
        assert!(s.reserved_bytes.peak >= e.peak_allocated_bytes);
    }
}
