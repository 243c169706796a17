//! CPU traces of real steps (`tools/trace`): the engine's allocated peak against PyTorch's own allocations.

use std::collections::BTreeMap;

use peakplan_core::{import_config, Architecture, Estimate, Phase};

use crate::util::{data, est_arch, plan};

/// One row of a traced file of Llama-shaped steps (`hf_cpu.csv`, `tt_cpu.csv`, `lg_cpu.csv`, `hf_keys.csv`,
/// `fsdp_cpu.csv`): the model's dimensions, the traced peak and the plan.
pub(crate) struct LlamaRow {
    pub(crate) id: String,
    pub(crate) arch: Architecture,
    traced_bytes: u64,
    pub(crate) query: String,
}

pub(crate) fn llama_rows(file: &str) -> Vec<LlamaRow> {
    data(file)
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.splitn(10, ',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            let mut arch = Architecture::llama("traced", n(1), n(2), n(3), n(4), n(5), n(6));
            arch.tied_embeddings = f[7] == "1";
            LlamaRow {
                id: f[0].to_string(),
                arch,
                traced_bytes: n(8),
                query: f[9].to_string(),
            }
        })
        .collect()
}

/// The rows of `pref_cpu.csv`: as [`llama_rows`], with the TRL release before the query.
pub(crate) fn preference_rows() -> Vec<LlamaRow> {
    trl_rows("traced/pref_cpu.csv")
}

/// The rows of a file of TRL steps (`pref_cpu.csv`, `grpo_cpu.csv`): as [`llama_rows`], with the TRL release
/// before the query.
fn trl_rows(file: &str) -> Vec<LlamaRow> {
    data(file)
        .lines()
        .skip(1)
        .map(|line| {
            let (head, query) = line.rsplit_once(",trl-").map_or((line, ""), |(h, rest)| {
                (h, rest.split_once(',').map_or("", |(_, q)| q))
            });
            let f: Vec<&str> = head.split(',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            let arch = Architecture::llama("traced", n(1), n(2), n(3), n(4), n(5), n(6));
            LlamaRow {
                id: f[0].to_string(),
                arch,
                traced_bytes: n(8),
                query: query.to_string(),
            }
        })
        .collect()
}

/// The traced families' rows (`families.csv`): id, the imported architecture and the plan's query.
pub(crate) fn family_rows() -> Vec<(String, Architecture, String)> {
    data("traced/families.csv")
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.splitn(4, ',').collect();
            let arch = import_config(&data(&format!("traced/{}", f[1]))).unwrap();
            (f[0].to_string(), arch, f[3].to_string())
        })
        .collect()
}

/// What one more layer adds, traced against the engine, for every case traced at one and two layers (`-L1`,
/// `-L2` rows of `peaks`, id -> (traced, predicted)): a line of `report` each, and a line of `failures` where the
/// error reaches `bound(case)` or the case lacks its second layer.
/// The bound a case is held to: its own where `known` lists it (a gap with its reason), else `default`.
fn bound_for(known: &[(&str, f64)], case: &str, default: f64) -> f64 {
    known
        .iter()
        .find(|(k, _)| *k == case)
        .map_or(default, |(_, b)| *b)
}

fn one_layer_increments(
    peaks: &BTreeMap<String, (f64, f64)>,
    bound: impl Fn(&str) -> f64,
    report: &mut String,
    failures: &mut Vec<String>,
) {
    for (id, &(t1, p1)) in peaks.iter().filter(|(id, _)| id.ends_with("-L1")) {
        let case = id.trim_end_matches("-L1");
        let Some(&(t2, p2)) = peaks.get(&format!("{case}-L2")) else {
            failures.push(format!("{case} is traced at one layer only"));
            continue;
        };
        let err = ((p2 - p1) - (t2 - t1)) / (t2 - t1);
        *report += &format!(
            "{case:<34} one layer traced {:>11} engine {:>11} {:+.2}%\n",
            t2 - t1,
            p2 - p1,
            100.0 * err
        );
        if err.abs() >= bound(case) {
            failures.push(format!("{case}: one layer {:+.2}%", 100.0 * err));
        }
    }
}

fn within_1_percent(id: &str, traced_bytes: u64, e: &Estimate) {
    let (traced, predicted) = (traced_bytes as f64, e.peak_allocated_bytes as f64);
    let err = (predicted - traced) / traced;
    assert!(
        err.abs() < 0.01,
        "{id}: traced {traced} B, engine {predicted} B ({:+.2}%)",
        100.0 * err
    );
}

#[test]
fn cpu_traces_of_real_steps_match_the_engine() {
    // Each row is one Hugging Face + PEFT (`tools/trace/hf_cpu.sh`) or torchtune (`tt_cpu.sh`) step traced with
    // torch's profiler on CPU, at several layer counts so that a wrong per-layer term and a wrong fixed term both
    // show. Worst row today: 0.92% (a 3-layer torchtune LoRA step).
    for (file, cases) in [
        ("traced/hf_cpu.csv", 51),
        ("traced/tt_cpu.csv", 12),
        ("traced/lg_cpu.csv", 2),
    ] {
        let rows = llama_rows(file);
        for r in &rows {
            within_1_percent(&r.id, r.traced_bytes, &est_arch(&r.arch, &r.query));
        }
        assert_eq!(rows.len(), cases, "every case of {file} is replayed");
    }

    // Other families, each built from its preset's config.json scaled down; the traced config is imported as is.
    let text = data("traced/families.csv");
    let mut peaks = BTreeMap::new();
    // A CPU artifact: the engine models CUDA, whose flash and memory-efficient kernels write the attention output
    // in (batch, seq, heads, dim) order, so the output projection reads it without a copy. CPU SDPA follows the
    // query's layout, and where the rotary embedding rebuilds the query contiguous in (batch, heads, seq, dim)
    // order (GPT-NeoX's, Phi-2's and Phi-3's rotary concatenates; Falcon reshapes), the projection's input is a
    // copy, which a full fine-tune keeps (tools/trace/saved.py lists it): one compute-dtype q-wide tensor a layer.
    let cpu_output_copy = ["pythia-full", "phi2-full", "phi3-full", "falcon-full"];
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.splitn(4, ',').collect();
        let arch = import_config(&data(&format!("traced/{}", f[1]))).unwrap();
        let (traced, mut e) = (f[2].parse().unwrap(), est_arch(&arch, f[3]));
        if cpu_output_copy.contains(&f[0].rsplit_once("-L").unwrap().0) {
            let p = plan(f[3]);
            let tokens = p.micro_batch * p.seq_len;
            e.peak_allocated_bytes += arch.layers * tokens * arch.q_dim() * 2;
        }
        within_1_percent(f[0], traced, &e);
        peaks.insert(
            f[0].to_string(),
            (traced as f64, e.peak_allocated_bytes as f64),
        );
    }
    assert_eq!(peaks.len(), 82, "every traced family case is replayed");

    // Each family is traced at one and two layers: the difference is what one layer adds, and the engine's must
    // match it to 0.5% (the totals above also hold the layer-independent part). The known gaps: Falcon's, and
    // transformers 4's per-expert MoE loop (`moe=linear`, Mixtral), whose layer keeps about 1 MB more at 512
    // tokens, hidden 512 (one routed 16-bit copy of the hidden state) than the engine counts: not identified yet.
    let known = [
        ("falcon-full", 0.015),
        ("mixtral4-qlora", 0.035),
        ("mixtral4-lora-experts", 0.015),
    ];
    let (mut report, mut failures) = (String::new(), Vec::new());
    let bound = |family: &str| bound_for(&known, family, 0.005);
    one_layer_increments(&peaks, bound, &mut report, &mut failures);
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

#[test]
fn cpu_traces_of_sharded_steps_match_the_engine() {
    // Each row is one FSDP1 or FSDP2 step (`tools/trace/fsdp_cpu.sh`) on 2 or 4 gloo processes, the largest
    // rank's peak, at one and two layers. The `wide-` cases (small vocabulary, wide MLP) peak in the layers'
    // backward, where the engine's single-GPU figure is itself high at one and two layers (+7% LoRA, +14% full
    // on the same model run unsharded, the `wide-single-` rows): those are held to what sharding changes, the
    // difference from the unsharded run, within 1% of the traced peak.
    let mut peaks = BTreeMap::new();
    for r in llama_rows("traced/fsdp_cpu.csv") {
        let e = est_arch(&r.arch, &r.query);
        // Mixed FSDP1 units keep what a full fine-tune keeps in the layers, so the full run is their reference.
        let full = r.query.contains("method=full") || r.query.contains("wrap=block");
        peaks.insert(
            r.id,
            (r.traced_bytes as f64, e.peak_allocated_bytes as f64, full),
        );
    }
    let mut report = String::new();
    let mut failures = Vec::new();
    let mut worst: f64 = 0.0;
    for (id, &(traced, predicted, full)) in &peaks {
        let (base, layers) = id.rsplit_once("-L").unwrap();
        let (reference, bound) = if base.starts_with("wide-single-") {
            // The unsharded references: the single-GPU engine's known gap in the layers' backward.
            ((0.0, 0.0), 0.15)
        } else if base.starts_with("wide-") {
            let method = if full { "full" } else { "lora" };
            let (t, p, _) = peaks[&format!("wide-single-{method}-L{layers}")];
            ((t, p), 0.01)
        } else {
            ((0.0, 0.0), 0.01)
        };
        let err = ((predicted - reference.1) - (traced - reference.0)) / traced;
        report += &format!(
            "{id:<34} traced {traced:>11} engine {predicted:>11} {:+.2}%\n",
            100.0 * err
        );
        if err.abs() >= bound {
            failures.push(format!("{id}: {:+.2}%", 100.0 * err));
        }
        if bound == 0.01 {
            worst = worst.max(err.abs());
        }
    }
    // What one more layer adds, within 0.5% (the unsharded references included: the engine's slope is right).
    // FSDP2 reducing every micro-batch holds 65 KB less per layer (the adapters' whole gradient, x 2 B) than the
    // engine's sharded accumulated gradients and the step's: the known gap.
    let totals = peaks
        .iter()
        .map(|(id, &(t, p, _))| (id.clone(), (t, p)))
        .collect();
    let bound = |case: &str| {
        if case == "f2-lora-ga2-sync-w2" {
            0.006
        } else {
            0.005
        }
    };
    one_layer_increments(&totals, bound, &mut report, &mut failures);
    println!("{report}worst {:.2}%", 100.0 * worst);
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
    assert!(peaks.len() >= 48, "{} traced rows", peaks.len());
}

/// A CPU artifact: CPU dropout multiplies by a mask in its input's dtype (fp32 behind PEFT's cast), where CUDA's
/// fused dropout keeps a 1-byte mask, which the engine counts. Every adapted module whose input needs a gradient
/// keeps one (all-linear targets: all seven but the first layer's q, k and v).
fn cpu_dropout_masks(arch: &Architecture, query: &str) -> f64 {
    let p = plan(query);
    if p.dropout == 0.0 {
        return 0.0;
    }
    assert_eq!(
        p.targets.key(),
        "all-linear",
        "{query}: masks counted for all-linear only"
    );
    let (h, inter, layers) = (
        arch.hidden as f64,
        arch.intermediate as f64,
        arch.layers as f64,
    );
    let tokens = (p.micro_batch * p.seq_len) as f64;
    let per_layer = 3.0 * h + arch.q_dim() as f64 + 2.0 * h + inter;
    (4.0 - 1.0) * tokens * (per_layer * layers - 3.0 * h)
}

#[test]
fn cpu_traces_of_every_key_match_the_engine() {
    // The keys the first tables leave at one value (`tools/trace/keys_cpu.sh`): PEFT's methods, trainable tokens
    // and modules_to_save, adapter dtypes, dropout, accumulation and the optimizers, each traced at one and two
    // layers. Each total within 1%, and what the second layer adds within 0.5%.
    let mut peaks = BTreeMap::new();
    for r in llama_rows("traced/hf_keys.csv") {
        let e = est_arch(&r.arch, &r.query);
        let predicted = e.peak_allocated_bytes as f64 + cpu_dropout_masks(&r.arch, &r.query);
        peaks.insert(r.id, (r.traced_bytes as f64, predicted));
    }
    let mut report = String::new();
    let mut failures = Vec::new();
    for (id, &(traced, predicted)) in &peaks {
        let err = (predicted - traced) / traced;
        report += &format!(
            "{id:<24} traced {traced:>11} engine {predicted:>11} {:+.2}%\n",
            100.0 * err
        );
        if err.abs() >= 0.01 {
            failures.push(format!("{id}: {:+.2}%", 100.0 * err));
        }
    }
    // Compiled LoRA: inductor's partitioner keeps one 16-bit hidden-wide tensor a layer more than the engine
    // counts (its saved tensors carry no op names to tell which): the known gap.
    let bound = |case: &str| if case == "lora-compile" { 0.04 } else { 0.005 };
    one_layer_increments(&peaks, bound, &mut report, &mut failures);
    println!("{report}");
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
    assert_eq!(peaks.len(), 68, "every traced case is replayed");
}

/// Each row's peak allocated memory, traced and the engine's, by id; and a line for each total at least `bound(id)`
/// off (relative), with the phase where the engine peaks.
fn replay_totals(
    rows: &[LlamaRow],
    bound: impl Fn(&str) -> f64,
) -> (BTreeMap<String, (f64, f64)>, Vec<String>) {
    let mut peaks = BTreeMap::new();
    let mut failures = Vec::new();
    for r in rows {
        let e = est_arch(&r.arch, &r.query);
        let (traced, predicted) = (r.traced_bytes as f64, e.peak_allocated_bytes as f64);
        let err = (predicted - traced) / traced;
        if err.abs() >= bound(&r.id) {
            failures.push(format!(
                "{}: traced {traced} B, engine {predicted} B ({:+.2}%), peak at {:?}",
                r.id,
                100.0 * err,
                e.peak_phase
            ));
        }
        peaks.insert(r.id.clone(), (traced, predicted));
    }
    (peaks, failures)
}

#[test]
fn cpu_traces_of_preference_steps_match_the_engine() {
    // DPO, KTO, ORPO, CPO and SimPO steps through TRL 1.16's own trainers (`tools/trace/pref_cpu.sh`): the doubled
    // policy batch, the reference (adapters switched off, a second copy, or precomputed) and the fused
    // log-probability head, or ORPO's and CPO's full logits through CUDA's fused log-softmax,
    // traced at one and two layers. Each total within 1% and what a layer adds within 0.5%, but for the known
    // gap: all-linear LoRA with fp32 adapters under checkpointing, whose peak here is a recomputed layer's
    // backward (the fused head keeps so little that the supervised step's loss moment is gone): the MLP's
    // gradients come back through the fp32 adapters in fp32 too, about 4.5 MB at four sequences of 256 tokens
    // that the engine's backward working memory does not count yet (3.6-3.9% low; a layer 1.1% low).
    let known = [("dpo-lora-all-gc", 0.04), ("kto-lora-all-gc", 0.04)];
    let bound = |id: &str| {
        bound_for(
            &known,
            id.rsplit_once("-L").map_or(id, |(case, _)| case),
            0.01,
        )
    };
    let rows = preference_rows();
    let (peaks, mut failures) = replay_totals(&rows, bound);
    assert_eq!(rows.len(), 46, "every case of pref_cpu.csv is replayed");
    let mut report = String::new();
    let layer_bound = |case: &str| {
        if known.iter().any(|(k, _)| *k == case) {
            0.015
        } else {
            0.005
        }
    };
    one_layer_increments(&peaks, layer_bound, &mut report, &mut failures);
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

#[test]
fn cpu_traces_of_grpo_steps_match_the_engine() {
    // GRPO steps through TRL 1.16's own `GRPOTrainer` (`tools/trace/grpo_cpu.sh`): a generation round by
    // `model.generate` (the key/value cache grown a token at a time, each token's sampling), the reference's
    // scoring when beta > 0 (adapters off, or the copy TRL loads), the fused log-probability head over the
    // completions, `ga` micro-batches and a foreach AdamW step, at one and two layers. Each total within 1% and
    // what a layer adds within 0.5%, but for the known gap: grouped-query attention, whose layer the engine counts
    // with SDPA's head-expanded keys and values (transformers' `use_gqa_in_sdpa` lets SDPA group the heads itself
    // only without an attention mask). The harness's prompts and completions all have one length, so nothing is
    // padded and transformers drops the all-ones mask; a real round pads its prompts (left) and completions
    // (right), keeps the mask and expands, as the engine counts (0.79 MB a layer over, 5%; the totals within 1%).
    let known_layer = [("grpo-lora-qv-kv2", 0.055)];
    let rows = trl_rows("traced/grpo_cpu.csv");
    let (peaks, mut failures) = replay_totals(&rows, |_| 0.01);
    assert_eq!(rows.len(), 22, "every case of grpo_cpu.csv is replayed");
    let mut report = String::new();
    let layer_bound = |case: &str| bound_for(&known_layer, case, 0.005);
    one_layer_increments(&peaks, layer_bound, &mut report, &mut failures);
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

#[test]
fn cpu_traces_of_deepspeed_steps_match_the_engine() {
    // Each row is one DeepSpeed ZeRO step (`tools/trace/ds_cpu.sh`) on its CPU accelerator, 2 or 4 gloo
    // processes, the largest rank's peak (the smallest of four steps: some steps hold one more buffer DeepSpeed
    // has released, kept by a reference cycle until Python's collector runs, a gathered embedding's 32,768,000 B
    // in LoRA's and `ds_reuse`'s steps; the step ends with it allocated), at one and two layers, with DeepSpeed's sizes
    // set so that each binds. `-load-` rows are the peak of loading (the model made on the accelerator, then
    // DeepSpeed's initialize), held to the engine's load phase.
    let mut peaks = BTreeMap::new();
    for r in llama_rows("traced/ds_cpu.csv") {
        let e = est_arch(&r.arch, &r.query);
        let predicted = if r.id.contains("-load-") {
            e.phase(Phase::Load).total()
        } else {
            e.peak_allocated_bytes
        };
        peaks.insert(r.id, (r.traced_bytes as f64, predicted as f64));
    }
    // The known gaps, each held to its bound (total, one layer) so that it cannot grow unseen:
    // - a LoRA step's reduce buckets are made at its first gradient, in the last layer's attention after its MLP's
    //   backward; the engine counts them from the start of the layers' backward, beside the last layer's saved
    //   tensors (visible with 120 MB buckets only);
    // - the optimizer steps at two layers differ between runs by up to 0.9 MB (ZeRO-2's on two processes, 88.74
    //   then 89.62 MB; ZeRO-3's 81.91 then 82.44 MB; their smallest of four steps each), so what a layer adds there
    //   is held to 2-3.5%;
    // - loading: under zero.Init each module is made whole, then partitioned, so the last (the head) is whole
    //   beside every partition (the engine's `constructed_whole`: LoRA at one layer -47.0% -> +0.05%); without it
    //   the whole model first (traced exactly for LoRA). A full fine-tune's `initialize` then makes no Adam states
    //   (the first step does) but an fp32 gradient buffer of the largest sub-group for a moment, the peak with
    //   zero.Init or without (+19% to +21% while the engine counted Adam states at load; now exact with zero.Init
    //   at one layer and without it at two, -0.72% and -1.07% in the other two). Each parameter is broadcast from
    //   the first rank before it is partitioned, and some processes still hold one or two of a layer's whole
    //   weights at the peak (1,409,024 or 1,933,312 B: its largest projections), as the collective's work keeps
    //   the tensor until its thread lets it go: a timing the engine does not model, so those rows' layers are
    //   held to their spread (LoRA's loading under zero.Init at two layers: 71.9 to 75.7 MB over six processes).
    //   Loading is the smallest of three processes, with gloo's staging of an all-gather left out
    //   (`memtrace.STAGED_IN`: NCCL gathers in place).
    // (LoRA's ZeRO-3 steps held 1.9 MB a layer more than the engine counted: ZeRO-3's linear keeps the inputs of
    // frozen linears, the MLP's two here, and the head's; counted now, they are within 0.03%.)
    let known: &[(&str, f64, f64)] = &[
        ("ds2-lora-rbucket60-ov-w2", 0.05, 0.25),
        ("step-ds3-full-w2", 0.015, 0.035),
        ("step-ds2-full-w2", 0.01, 0.025),
        ("step-ds2-full-w4", 0.015, 0.03),
        ("ds3-lora-load-zinit1-w2", 0.02, 0.35),
        ("ds3-full-load-zinit1-w2", 0.01, 0.09),
        ("ds3-full-load-zinit0-w2", 0.012, 0.145),
    ];
    let bound = |id: &str, layer: bool| {
        let case = id.rsplit_once("-L").map_or(id, |(c, _)| c);
        known.iter().find(|(k, _, _)| *k == case).map_or(
            if layer { 0.005 } else { 0.01 },
            |(_, total, one)| {
                if layer {
                    *one
                } else {
                    *total
                }
            },
        )
    };
    let (mut report, mut failures) = (String::new(), Vec::new());
    let mut within = 0;
    for (id, &(traced, predicted)) in &peaks {
        let err = (predicted - traced) / traced;
        report += &format!(
            "{id:<34} traced {traced:>11} engine {predicted:>11} {:+.2}%\n",
            100.0 * err
        );
        if err.abs() >= bound(id, false) {
            failures.push(format!("{id}: {:+.2}%", 100.0 * err));
        }
        within += usize::from(err.abs() < 0.01);
    }
    one_layer_increments(&peaks, |case| bound(case, true), &mut report, &mut failures);
    println!("{report}{within} of {} within 1%", peaks.len());
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
    assert!(peaks.len() >= 56, "{} traced rows", peaks.len());
    assert!(within >= 51, "{within} rows within 1%");
}
