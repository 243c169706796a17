//! Real allocation sequences (`tools/trace`, `SEQUENCE=`): steps of real frameworks at real widths, traced on CPU
//! storage by storage, replayed by the caching-allocator simulator beside the engine's own sequence for the same
//! plan. The CPU has no caching allocator, but it makes and frees the same tensors in the same order as CUDA
//! would, so the simulator turns the traced sequence into what CUDA's allocator would reserve for it.

use peakplan_core::allocator::{replay_steps, AllocatorConfig, Event, Replay, Stats};
use peakplan_core::{
    estimate, estimate_rough, varying_allocation_events, varying_allocation_events_at, Estimate,
    Shape, StepEvents,
};

use crate::traced::llama_rows;
use crate::util::{data, plan};

/// A traced sequence: what was live before the first step, then each step's events.
struct Sequence {
    setup: Vec<Event>,
    steps: Vec<Vec<Event>>,
}

/// Reads `a,TAG,BYTES` / `f,TAG` / `step` lines (`memtrace.sequence_of`).
fn read_sequence(text: &str) -> Sequence {
    let mut s = Sequence {
        setup: Vec::new(),
        steps: Vec::new(),
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        if line == "step" {
            s.steps.push(Vec::new());
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let tag = f[1].parse().unwrap();
        let event = match f[0] {
            "a" => Event::Alloc {
                tag,
                bytes: f[2].parse().unwrap(),
            },
            "f" => Event::Free { tag },
            other => panic!("unknown event {other:?} in a traced sequence"),
        };
        s.steps.last_mut().unwrap_or(&mut s.setup).push(event);
    }
    s
}

/// Loading and every traced step on a device without limit, as the engine replays its own.
fn replay_traced(s: &Sequence) -> Stats {
    let steps: Vec<&[Event]> = s.steps.iter().map(Vec::as_slice).collect();
    replay_steps(&AllocatorConfig::with_capacity(1 << 59), &s.setup, &steps).unwrap()
}

/// The engine's sequence for a run, replayed as the estimate replays it: loading, a first step and the measured
/// second, on a device without limit.
fn replay_engine(events: &StepEvents) -> Stats {
    let mut r = Replay::new(AllocatorConfig::with_capacity(1 << 59));
    r.run(&events.setup).unwrap();
    for _ in 0..2 {
        for run in &events.step {
            r.run_repeated(run).unwrap();
        }
    }
    r.allocator.stats()
}

/// One traced case: its id, the traced sequence's replay, and the engine's estimates (replayed and by the rule).
struct Case {
    id: String,
    traced: Stats,
    engine: Estimate,
    rule: Estimate,
}

fn cases() -> Vec<Case> {
    llama_rows("traced/sequences.csv")
        .into_iter()
        .map(|r| {
            let s = read_sequence(&data(&format!("traced/sequences/{}.csv", r.id)));
            assert_eq!(s.steps.len(), 2, "{}: two traced steps", r.id);
            let p = plan(&r.query);
            Case {
                traced: replay_traced(&s),
                engine: estimate(&r.arch, &p),
                rule: estimate_rough(&r.arch, &p),
                id: r.id,
            }
        })
        .collect()
}

fn pct(a: u64, b: u64) -> f64 {
    100.0 * (a as f64 - b as f64) / b as f64
}

#[test]
fn traced_sequences_replay_as_the_engine() {
    // Llama-2-7B's widths at one to eight layers, LoRA (q,v and all-linear under autocast, with and without
    // checkpointing), full fine-tuning and QLoRA (`tools/trace/seq_cpu.sh`). The traced sequence's requested peak
    // is the step's allocated peak; replayed by the simulator, its reserved peak is what CUDA's allocator would
    // hold for those very tensors. The engine replays its own sequence (`engine/events.rs`: an adapter plan's saved
    // tensors one by one, a full fine-tune's a block a layer).
    let cases = cases();
    let mut report = String::new();
    let (mut failures, mut replay_err, mut rule_err) = (Vec::new(), 0.0, 0.0);
    for c in &cases {
        let (t_alloc, t_res) = (c.traced.requested_bytes.peak, c.traced.reserved_bytes.peak);
        let alloc_err = pct(c.engine.peak_allocated_bytes, t_alloc);
        let (replay, rule) = (
            pct(c.engine.peak_reserved_bytes, t_res),
            pct(c.rule.peak_reserved_bytes, t_res),
        );
        report += &format!(
            "{:<32} allocated {:>11} engine {alloc_err:+5.2}% | reserved {:>11} replay {replay:+5.2}% rule {rule:+5.2}% | cache {:>10} replay {:>10} rule {:>10}\n",
            c.id,
            t_alloc,
            t_res,
            t_res - t_alloc,
            c.engine.peak_reserved_bytes - c.engine.peak_allocated_bytes,
            c.rule.peak_reserved_bytes - c.rule.peak_allocated_bytes,
        );
        // Allocated: what each layer adds matches to 0.1% (the scaled traces pin every tensor). The LoRA and full
        // rows' fixed part is within 0.05% since the first layer's input norm keeps nothing where its input needs
        // no gradient (the 16 MiB fp32 hidden-state tensor at 1,024 tokens the engine counted until December
        // 2026); the upcast QLoRA rows with checkpointing are 1.2% high.
        if alloc_err.abs() >= 1.5 {
            failures.push(format!("{}: allocated {alloc_err:+.2}%", c.id));
        }
        // Reserved: within 6.5%. The worst is the all-linear LoRA under autocast (-3.7% at one and two layers,
        // -3.9% at four; -6.4%, -5.0% and -1.0% before its layers' transients were made, in forward order, among
        // its kept tensors, which took the mean of the 15 from 2.17% to 2.03%): its
        // adapters' gradients, states and temporaries, each under 1 MiB, are one block a layer in the engine's
        // sequence (each would cost a replay as much as a large tensor), where the trace has them in the small
        // pool, part by part (as separate 1 MiB blocks they replay at -3.1% to -4.3%, for three times the events).
        if replay.abs() >= 6.5 {
            failures.push(format!("{}: reserved {replay:+.2}%", c.id));
        }
        replay_err += replay.abs();
        rule_err += rule.abs();
    }
    let n = cases.len() as f64;
    report += &format!(
        "mean |error| of reserved: replay {:.2}%, rule {:.2}%\n",
        replay_err / n,
        rule_err / n
    );
    println!("{report}");
    assert_eq!(cases.len(), 15, "every traced sequence is replayed");
    assert!(failures.is_empty(), "{failures:?}\n{report}");
    // The replay is what `peak_reserved_bytes` reports; the rule it replaced (a rounded peak and one largest
    // transient) is further from what the allocator holds for the traced tensors.
    assert!(replay_err < rule_err, "{report}");
}

#[test]
fn traced_varying_sequences_replay_as_the_engine() {
    // Runs whose batches vary in length (`tools/trace/seq_lens_cpu.sh`): padded and grouped, LoRA and full, with
    // and without checkpointing, at Llama-2-7B's widths. Each trace runs, in order and twice over, the very batch
    // lengths the engine's first replayed run draws for its plan (`replayed_batches`), each batch made at its
    // step's start, its rows padded; its replay through the simulator is what CUDA's allocator would reserve for
    // them. The engine's figures: allocated is the plan's estimate (the longest batch's, a fixed plan of that
    // shape), reserved the replay of the engine's own sequence for that run's steps (the estimate's reserved
    // figure is the mean of four such runs, each drawn alike).
    let rows = llama_rows("traced/sequences_varying.csv");
    let (mut report, mut failures, mut reserved_err) = (String::new(), Vec::new(), 0.0);
    for r in &rows {
        let s = read_sequence(&data(&format!("traced/sequences/{}.csv", r.id)));
        let p = plan(&r.query);
        let shapes =
            peakplan_core::replayed_batches(&r.arch, &p).expect("a plan whose batches vary");
        assert_eq!(
            s.steps.len(),
            2 * shapes.len(),
            "{}: the replay's steps twice",
            r.id
        );
        let traced = replay_traced(&s);
        let e = estimate(&r.arch, &p);
        let run = replay_engine(&varying_allocation_events(&r.arch, &p).unwrap());
        let (t_alloc, t_res) = (traced.requested_bytes.peak, traced.reserved_bytes.peak);
        let (alloc, reserved) = (
            pct(e.peak_allocated_bytes, t_alloc),
            pct(run.reserved_bytes.peak, t_res),
        );
        report += &format!(
            "{:<32} allocated {t_alloc:>11} engine {alloc:+5.2}% | reserved {t_res:>11} engine {reserved:+5.2}% | cache {:>10} engine {:>10}\n",
            r.id,
            t_res - t_alloc,
            run.reserved_bytes.peak - e.peak_allocated_bytes,
        );
        if alloc.abs() >= 1.5 {
            failures.push(format!("{}: allocated {alloc:+.2}%", r.id));
        }
        reserved_err += reserved.abs();
    }
    let mean = reserved_err / rows.len() as f64;
    report += &format!("mean |error| of reserved: {mean:.2}%\n");
    println!("{report}");
    assert_eq!(rows.len(), 13, "every traced varying sequence is replayed");
    assert!(failures.is_empty(), "{failures:?}\n{report}");
    // Where it stands (December 2026), 13 sequences at 1, 2 and 4 layers: allocated within 0.53% of every trace;
    // reserved -5.2% to +6.3%, a mean of 2.8% (4.9% before the recompute below, 6.7% before the layers' transients),
    // within #45's 3%.
    // - A full fine-tune's steps at varying lengths go tensor by tensor (its saved tensors, and its gradients,
    //   optimizer states and step temporaries parameter by parameter, as torch makes them): its traces show a
    //   step's tensors landing in the segments earlier, differently sized ones left.
    // - An adapter plan's layer forward makes transients beside what it keeps (an RMSNorm's fp32 product and cast,
    //   PEFT's LoRA output chain, the gated product a frozen `down` reads): their segments are where later
    //   tensors land, so they come in forward order among the kept ones (saved.rs lists a layer's tensors so).
    //   Without them a grouped LoRA run, which reserves all it will at its first (longest) batch, was -7.3% to
    //   -10.2%; now -2.2% to -5.2%.
    // - Under checkpointing a layer's forward makes its tensors and keeps only its output, and backward makes
    //   them again, tensor by tensor: as one block each (the recompute), the longest batch's block fit none of
    //   the segments the shorter batches' logits left, where the trace's tensors do (+13.6% to +15.7%, now -0.5%
    //   and +0.9%). Recomputed in backward only, without the forward's, they came to -10.8% and -7.1%. The
    //   recompute's transients are not made (with them, a varying estimate took 64 ms natively, against 14 ms).
    assert!(mean <= 3.0, "{report}");
}

#[test]
fn traced_long_run_replays_as_the_engine() {
    // One epoch's first 150 steps as ms-swift's benchmark runs train (`tools/trace/seq_long_cpu.sh`): batch size 1,
    // lengths from cls-fudan-news-zh's stated statistics with the samples over L = 1,024 dropped, Qwen-1.8B's
    // widths at two layers, LoRA with checkpointing. A long run meets a new longest batch now and then, and each
    // leaves its segments cached: the engine's steps, replayed for the same batches, must leave what the traced
    // tensors leave after every step, not only after the 16 an estimate replays.
    let row = &llama_rows("traced/sequences_long.csv")[0];
    let traced = read_sequence(&data(&format!("traced/sequences/{}.csv", row.id)));
    let p = plan(&row.query);
    let shapes: Vec<Shape> = data(&format!("traced/sequences/{}.lens", row.id))
        .trim()
        .split(',')
        .map(|n| Shape {
            sequences: p.micro_batch,
            len: n.parse().unwrap(),
        })
        .collect();
    assert_eq!(traced.steps.len(), shapes.len(), "a traced step per batch");
    let engine = varying_allocation_events_at(&row.arch, &p, &shapes).unwrap();
    let config = AllocatorConfig::with_capacity(1 << 59);
    let (mut t, mut e) = (Replay::new(config.clone()), Replay::new(config));
    t.run(&traced.setup).unwrap();
    e.run(&engine.setup).unwrap();
    let mut runs = engine.step.iter();
    let (mut report, mut worst, mut grew) = (String::new(), 0.0f64, 0);
    let mut last_reserved = 0;
    for (i, (shape, step)) in shapes.iter().zip(&traced.steps).enumerate() {
        t.run(step).unwrap();
        // The engine's steps follow each other, each as many runs as that batch's step alone has.
        let step_runs = varying_allocation_events_at(&row.arch, &p, &[*shape])
            .unwrap()
            .step
            .len();
        for run in runs.by_ref().take(step_runs) {
            e.run_repeated(run).unwrap();
        }
        let (ts, es) = (t.allocator.stats(), e.allocator.stats());
        let err = pct(es.reserved_bytes.peak, ts.reserved_bytes.peak);
        worst = worst.max(err.abs());
        if ts.reserved_bytes.peak > last_reserved {
            grew += 1;
            last_reserved = ts.reserved_bytes.peak;
            report += &format!(
                "step {i:3} ({:4} tokens): reserved traced {:>11} engine {err:+.2}%; allocated engine {:+.2}%\n",
                shape.len,
                ts.reserved_bytes.peak,
                pct(es.requested_bytes.peak, ts.requested_bytes.peak),
            );
        }
    }
    assert!(
        runs.next().is_none(),
        "every run of the engine's sequence replayed"
    );
    println!("{report}worst |error| of reserved after any step: {worst:.2}%");
    // Where it stands (December 2026): each of the six new longest batches (865 to 1,016 tokens) adds 1.7-1.8 GiB
    // of reserved memory, its logits' segments (3.15 GiB after the first step, 11.66 GiB from step 134 on), and the
    // engine is within 0.74% of the trace after every step. So what the engine makes of a long run is what torch's
    // tensors make of it; where a long replay is far from ms-swift's table (ARCHITECTURE.md's known gaps), the
    // difference is between the simulator and CUDA's allocator over thousands of steps, which only a GPU traces.
    assert!(grew >= 5, "a run that meets new longest batches: {report}");
    assert!(worst < 1.5, "{report}worst {worst:.2}%");
}
