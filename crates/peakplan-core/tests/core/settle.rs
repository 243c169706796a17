//! A step's middle micro-batches replayed until the allocator settles (`Replay::run_repeated`): the same figures
//! as writing every micro-batch out, for any gradient accumulation at the cost of a few micro-batches, and a
//! model of any depth costs no more than the replay's event cap.

use peakplan_core::allocator::{
    replay_steps, AllocatorConfig, Event, OutOfMemory, Replay, Run, Settled, Stats,
    MAX_UNSETTLED_PIECES,
};
use peakplan_core::plan::Plan;
use peakplan_core::{allocation_events, estimate, estimate_rough, preset_arch, Architecture};

use crate::util::{model_with_params, plan};

const UNLIMITED: u64 = u64::MAX >> 4;

fn config(expandable: bool, capacity_bytes: u64) -> AllocatorConfig {
    AllocatorConfig {
        expandable_segments: expandable,
        ..AllocatorConfig::with_capacity(capacity_bytes)
    }
}

/// Loading and two steps on a device of `capacity_bytes`, the middle micro-batches settled.
fn settled_on(
    arch: &Architecture,
    p: &Plan,
    expandable: bool,
    capacity_bytes: u64,
) -> Result<Stats, OutOfMemory> {
    let ev = allocation_events(arch, p);
    let mut r = Replay::new(config(expandable, capacity_bytes));
    r.run(&ev.setup)?;
    for _ in 0..2 {
        for run in &ev.step {
            assert_eq!(r.run_repeated(run)?, Settled::Done, "{}", p.to_query());
        }
    }
    Ok(r.allocator.stats())
}

fn settled(arch: &Architecture, p: &Plan, expandable: bool) -> Stats {
    settled_on(arch, p, expandable, UNLIMITED).unwrap()
}

/// Loading and two steps on a device of `capacity_bytes`, every micro-batch written out.
fn written_out_on(
    arch: &Architecture,
    p: &Plan,
    expandable: bool,
    capacity_bytes: u64,
) -> Result<Stats, OutOfMemory> {
    let ev = allocation_events(arch, p);
    let step = ev.flat_step();
    replay_steps(
        &config(expandable, capacity_bytes),
        &ev.setup,
        &[&step, &step],
    )
}

fn written_out(arch: &Architecture, p: &Plan, expandable: bool) -> Stats {
    written_out_on(arch, p, expandable, UNLIMITED).unwrap()
}

const ACCUMULATING: &[&str] = &[
    "model=llama-2-7b&method=lora&r=8&targets=q,v&b=2&s=512&gc=0",
    "model=llama-2-7b&method=lora&r=16&targets=all-linear&b=1&s=1024&gc=1",
    "model=llama-3.1-8b&method=qlora&r=16&targets=all-linear&b=2&s=2048&gc=1",
    "model=llama-2-7b&method=full&prec=amp_bf16&b=1&s=512&gc=1",
    "model=llama-2-7b&method=full&prec=bf16&b=1&s=256&gc=0&opt=adamw_8bit",
    "model=llama-2-13b&method=full&prec=amp_bf16&b=1&s=1024&gc=1&gpus=4&zero=3",
    "model=llama-2-13b&method=lora&r=8&b=4&s=512&gpus=2&zero=2",
    "model=llama-2-70b&method=qlora&r=64&b=1&s=2048&gpus=2&zero=3&gc=1",
];

#[test]
fn settled_micro_batches_replay_as_written_out() {
    // Tight replays that released cached segments and went on.
    let mut released = 0;
    for q in ACCUMULATING {
        for ga in [2, 3, 4, 7] {
            let p = plan(&format!("{q}&ga={ga}"));
            let arch = preset_arch(&p);
            for expandable in [false, true] {
                let free = written_out(arch, &p, expandable);
                assert_eq!(
                    settled(arch, &p, expandable),
                    free,
                    "{q}&ga={ga}, expandable {expandable}"
                );
                // Near the card's limit the allocator releases its cache and makes segments again, further up.
                let tight = free.allocated_bytes.peak
                    + (free.reserved_bytes.peak - free.allocated_bytes.peak) / 4;
                let tight_written = written_out_on(arch, &p, expandable, tight);
                assert_eq!(
                    settled_on(arch, &p, expandable, tight),
                    tight_written,
                    "{q}&ga={ga}, expandable {expandable}, {tight} B"
                );
                released += usize::from(tight_written.is_ok_and(|s| s.device_frees > 0));
            }
        }
    }
    assert!(released >= 4, "{released} tight replays released segments");
}

#[test]
fn a_step_holds_three_micro_batches_of_events_whatever_its_accumulation() {
    let base = "model=llama-2-70b&method=full&prec=amp_bf16&gc=1&gpus=64&zero=3";
    let p = plan(&format!("{base}&ga=65536"));
    let ev = allocation_events(preset_arch(&p), &p);
    let times: Vec<u64> = ev.step.iter().map(|r| r.times).collect();
    assert_eq!(times, [1, 65534, 1]);
    let small = plan(&format!("{base}&ga=3"));
    assert_eq!(
        ev.len(),
        allocation_events(preset_arch(&small), &small).len()
    );
    // The same figures as 52 micro-batches written out: the middle ones repeat (`65534 - 50` is a multiple of
    // every period up to four), so nothing after the first few can raise a peak.
    let arch = preset_arch(&p);
    let (long, short) = (settled(arch, &p, false), {
        let p52 = plan(&format!("{base}&ga=52"));
        written_out(arch, &p52, false)
    });
    assert_eq!(long.reserved_bytes, short.reserved_bytes);
    assert_eq!(long.allocated_bytes, short.allocated_bytes);
    assert_eq!(long.requested_bytes, short.requested_bytes);
    // The engine's figure is that replay, not the rule that stands in for plans past a replay.
    let e = estimate(arch, &p);
    assert_eq!(
        e.peak_reserved_bytes,
        estimate(arch, &plan(&format!("{base}&ga=52"))).peak_reserved_bytes
    );
    assert_ne!(
        e.peak_reserved_bytes,
        estimate_rough(arch, &p).peak_reserved_bytes
    );
}

#[test]
fn a_model_of_a_hundred_thousand_layers_is_not_built_whole() {
    // Before: every layer of every micro-batch was an event (a 3 GiB vector at ga=256, then an abort).
    let arch = model_with_params(100_000, 512, 1376, 32000);
    let p = plan("method=lora&r=8&b=1&s=512&ga=256");
    let e = estimate(&arch, &p);
    assert!(e.peak_reserved_bytes >= e.peak_allocated_bytes);
    assert!(e.device_bytes >= e.peak_reserved_bytes);
    // Past the replay's cap, the rule stands in.
    assert_eq!(
        e.peak_reserved_bytes,
        estimate_rough(&arch, &p).peak_reserved_bytes
    );
}

#[test]
fn a_run_that_never_repeats_stops_unsettled() {
    // Each piece leaves one more block live: the state never repeats.
    let run = Run {
        events: vec![Event::Alloc {
            tag: 1,
            bytes: 3 << 20,
        }],
        times: 1_000_000,
    };
    let mut r = Replay::new(config(false, UNLIMITED));
    assert_eq!(r.run_repeated(&run).unwrap(), Settled::Unsettled);
    assert_eq!(
        r.allocator.stats().allocations.current,
        MAX_UNSETTLED_PIECES
    );
    // One that frees what it makes settles at once, with the device calls of every piece counted.
    let run = Run {
        events: vec![
            Event::Alloc {
                tag: 1,
                bytes: 30 << 20,
            },
            Event::Free { tag: 1 },
            Event::EmptyCache,
        ],
        times: 1_000_000,
    };
    let mut r = Replay::new(config(false, UNLIMITED));
    assert_eq!(r.run_repeated(&run).unwrap(), Settled::Done);
    assert_eq!(r.allocator.stats().device_allocs, 1_000_000);
    assert_eq!(r.allocator.stats().device_frees, 1_000_000);
}
