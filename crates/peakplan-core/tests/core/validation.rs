//! The replay of measured peaks (`tests/data/measured.csv`, a copy of the shared dataset) and the accuracy table
//! the page embeds.

use crate::util::data;

#[test]
fn validation_replays_every_row_and_holds_its_ground() {
    let text = data("measured.csv");
    let report = peakplan_core::validate::validate(&text).unwrap();
    let records = peakplan_core::validate::parse_csv(&text).unwrap().len() - 1;
    // Every record is answered or skipped; a second peak of another metric is a row of its own (`id#metric`).
    let seconds = report.rows.iter().filter(|r| r.id.contains('#')).count();
    assert_eq!(seconds, 2);
    assert_eq!(report.rows.len() - seconds + report.skipped.len(), records);
    assert!(report.skipped.iter().all(|(_, why)| !why.is_empty()));
    // 156 measured peaks and 30 outcomes: 122 and 20 on one GPU, 34 and 10 on several (fsdp_qlora's hardware
    // table gives 9 settings that train, axolotl's Llama 3 70B README one per-GPU figure; Unsloth's notebook of
    // TinyLlama packed to 4,096 tokens a peak, its 70B context table one setting that trains).
    use peakplan_core::validate::Gpus;
    let (all, one, several) = (
        report.figures(None),
        report.figures(Some(Gpus::Single)),
        report.figures(Some(Gpus::Multi)),
    );
    assert_eq!(
        [all.peaks, one.peaks, several.peaks],
        [156, 122, 34],
        "peaks: all, single, multi"
    );
    assert_eq!(
        [
            all.outcomes_total,
            one.outcomes_total,
            several.outcomes_total
        ],
        [30, 20, 10],
        "outcomes: all, single, multi"
    );
    // Regression floor while the accuracy work goes on: today's median is 5.2%. Reserved memory comes from
    // replaying each step through the caching-allocator simulator on the row's own GPU (it was 6.0% with the
    // rule of one stranded transient block; the replay's free-and-retry near a card's limit and its segments
    // moved the multi-GPU rows most, and the optimizer's states and temporaries made per layer, as torch makes
    // them per parameter, the full fine-tunes). An adapter plan's saved tensors are placed one by one since CPU
    // traces of real allocation sequences showed it (`sequences.rs`); validate's figures did not move.
    let median = report.median_abs_pct().unwrap();
    assert!(median < 5.5, "median absolute error {median:.1}%");
    let (right, total) = report.outcomes();
    assert!(right >= 27, "{right} of {total} outcomes right");
    // The split, each with its own floor: single-GPU runs 4.8% today (4.7% by the rule), multi-GPU runs 7.1%
    // (13.1% by the rule). Multi-GPU was 5.9% until CPU traces of sharded steps at a wide MLP showed the layers'
    // backward counted about a third too much there: the MLP's three activation gradients are made after
    // down's backward has let its input go (`wide-` rows of `traced/fsdp_cpu.csv`, +7% to +15% before, within
    // 1.3% of the full fine-tunes and mixed units now); the sharded rows it lowered were low already.
    let single = one.median_abs_pct.unwrap();
    assert!(single < 5.0, "single-GPU median {single:.1}%");
    let multi = several.median_abs_pct.unwrap();
    assert!(multi < 7.5, "multi-GPU median {multi:.1}%");
    // No multi-GPU run that ran is predicted not to fit, nor one that ran out of memory to fit.
    assert_eq!(several.outcomes_right, several.outcomes_total);
    // Mechanisms pinned by single well-documented runs.
    let err = |id: &str| {
        report
            .rows
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| r.error_pct())
            .unwrap()
    };
    // Full FT of a bf16-loaded model under the HF Trainer: 2+2+4 B/param plus foreach AdamW's 2 B/param temporary,
    // and what a warm cache strands on an 80 GB card near its limit (the run's lengths vary; the plan's do not).
    assert!(err("swift-qwen-7b-chat-full-L2048").abs() < 5.0);
    // Pure bf16 full FT with bf16 AdamW states (PEFT's MetaMathQA harness, reserved bytes, its peak step on an
    // emptied cache).
    assert!(err("peft-mmqa-full-finetuning-lr_0.00001").abs() < 5.0);
    // Its batches come from length-sorted buckets of a stated mean (~210 tokens), cut at 768: read as grouped by
    // length with that mean (the deviation unstated, `auto`, as the rows' notes say); ms-swift's as padded with the
    // mean and deviation its table states.
    let query = |id: &str| {
        report
            .rows
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.query.clone())
            .unwrap()
    };
    assert!(query("peft-mmqa-lora-rank32").contains("lens=grouped&lmean=210"));
    assert!(!query("peft-mmqa-lora-rank32").contains("lsd="));
    assert!(query("swift-qwen-7b-chat-lora-r8-L2048").contains("lens=padded&lmean=3234&lsd=2548"));
    // The same harness's adapters: fp32 LoRA inputs, trainable norms' 16-bit copies, IA3's fp32 input of `down`,
    // and the key/value cache its kept output holds.
    for id in [
        "peft-mmqa-lora-rank32",
        "peft-mmqa-ln_tuning-default",
        "peft-mmqa-ia3-default",
        "peft-mmqa-prefixtuning-lr_0.001",
    ] {
        assert!(err(id).abs() < 5.0, "{id}");
    }
    // fsdp_qlora's loop holds fp32 logits through backward (655M logits at batch 10 x 2048 tokens); the replay
    // of a warm cache adds what it strands near the 4090's limit: 4.8 GiB over 18.3 GiB allocated (+10.3%). It
    // stranded 2.8 GiB (+3.7%) while the layers' backward still counted the final norm's saved tensors, which
    // CPU traces show gone by then: the cache near a card's limit moves with the order of frees, and no GPU trace
    // of this run says which it is.
    assert!(err("aai-7b-qlora-bs10-c2048").abs() < 11.0);
    // fsdp_qlora's doc also gives the allocated peaks of its LoRA batch-1 runs. FSDP1 keeps the root unit
    // (embedding and head, 0.5 GB) gathered through backward and, its adapters being units of their own, one
    // layer in the layers' backward (tools/trace/fsdp_step.py): +0.6% and +3.1% (+1.7% before the root).
    assert!(err("aai-7b-lora-bs1-c512#allocated").abs() < 3.0);
    assert!(err("aai-7b-lora-bs1-c2048#allocated").abs() < 3.5);
    // FSDP NO_SHARD ("ddp") keeps a whole replica per GPU.
    assert!(err("aai-7b-lora-ddp-bs4-c2048").abs() < 3.0);
    // PEFT's sft script loads LoRA bases in fp32; FSDP keeps fp32 shards and gathers 16-bit layers. The figure is
    // nvidia-smi's: the replayed cache reserves 6.5% above it (the rule's one transient block: 0.9% below).
    assert!(err("peftdocs-llama2-70b-lora-fsdp-8xH100").abs() < 7.0);
    // litgpt's TinyLlama full fine-tune accumulates 32 / 4 = 8 micro-batches (its cited config): the previous
    // micro-batches' bf16 gradients stay through the next forward and backward.
    assert!(err("litgpt-cfghub-tiny-llama-full").abs() < 3.0);
    let query = |id: &str| {
        report
            .rows
            .iter()
            .find(|r| r.id == id)
            .unwrap()
            .query
            .clone()
    };
    assert!(query("litgpt-cfghub-tiny-llama-full").contains("&ga=8&"));
    // 8 / 2 for Llama 2's LoRA config; TinyLlama's LoRA config (8 / 8) does not accumulate.
    assert!(query("litgpt-cfghub-llama-2-7b-lora").contains("&ga=4&"));
    assert!(!query("litgpt-cfghub-tiny-llama-lora").contains("&ga="));
    // Accumulation a row states itself wins over its config's.
    let text = data("measured.csv");
    let header = text.lines().next().unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("litgpt-cfghub-tiny-llama-full,"))
        .unwrap()
        .replace(
            "lm_head_chunk_size=128",
            "gradient_accumulation_steps=1 lm_head_chunk_size=128",
        );
    let stated = peakplan_core::validate::validate(&format!("{header}\n{row}\n")).unwrap();
    assert!(
        !stated.rows[0].query.contains("&ga="),
        "{}",
        stated.rows[0].query
    );
    // A stated bound ("peak allocated memory below 10 GB") is an outcome.
    let bound = report
        .rows
        .iter()
        .find(|r| r.id == "tt-llama3tut-llama3-8b-qlora-bs2-upper")
        .unwrap();
    assert_eq!(bound.outcome_right(), Some(true));
}

#[test]
fn each_publisher_gets_its_own_error_figures() {
    use peakplan_core::validate::source_label;
    for (source, label) in [
        (
            "modelscope/ms-swift docs/source_en/LLM/Benchmark.md",
            "modelscope/ms-swift",
        ),
        ("QLoRA paper (Dettmers et al. 2023)", "QLoRA paper"),
        ("LLaMA-Factory", "LLaMA-Factory"),
        ("pytorch/torchtune, PR #961", "pytorch/torchtune"),
        ("  ", "unnamed source"),
        ("\"", "unnamed source"),
    ] {
        assert_eq!(source_label(source), label, "{source:?}");
    }
    let report = peakplan_core::validate::validate(&data("measured.csv")).unwrap();
    let sources = report.by_source();
    let peaks = report
        .rows
        .iter()
        .filter(|r| r.error_pct().is_some())
        .count();
    assert_eq!(sources.iter().map(|s| s.peaks).sum::<usize>(), peaks);
    assert!(sources.windows(2).all(|w| w[0].peaks >= w[1].peaks));
    // A publisher with one row has that row's error as its median.
    let one = "id,source,arch_family,method,measured_bytes,value_kind,metric,model,n_layers,hidden_size,intermediate_size,n_heads,vocab_size,micro_batch_size,seq_len\n\
               a,someone/somewhere notes,llama,lora,10000000000,measured_peak,torch.cuda.max_memory_allocated,Llama-2-7b,32,4096,11008,32,32000,1,512\n";
    let r = peakplan_core::validate::validate(one).unwrap();
    let s = r.by_source();
    assert_eq!(s.len(), 1, "{:?} {:?}", r.rows, r.skipped);
    assert_eq!(s[0].source, "someone/somewhere");
    assert_eq!(s[0].peaks, 1);
    assert!((s[0].median_abs_pct - r.rows[0].error_pct().unwrap().abs()).abs() < 1e-9);
}

#[test]
fn single_and_multi_gpu_runs_are_reported_apart() {
    use peakplan_core::validate::Gpus;
    // A row's GPUs: a number above one; else "multi" or a parallelism that spreads one run over GPUs.
    for (num_gpus, parallelism, want) in [
        ("1", "none", Gpus::Single),
        (
            "1",
            "DeepSpeed ZeRO-3 with CPU offloading (params+optimizer)",
            Gpus::Single,
        ),
        ("2", "model split across 2 GPUs (device_map)", Gpus::Multi),
        ("8", "", Gpus::Multi),
        ("8x A100", "", Gpus::Multi),
        ("multi", "", Gpus::Multi),
        ("", "FSDP FULL_SHARD", Gpus::Multi),
        ("", "DeepSpeed ZeRO-3", Gpus::Multi),
        ("several", "none", Gpus::Single),
        ("", "", Gpus::Single),
    ] {
        assert_eq!(
            Gpus::of_row(num_gpus, parallelism),
            want,
            "{num_gpus:?} {parallelism:?}"
        );
    }
    let text = data("measured.csv");
    let report = peakplan_core::validate::validate(&text).unwrap();
    // Every row is in one group: the groups' figures add up to the whole set's.
    let (all, one, several) = (
        report.figures(None),
        report.figures(Some(Gpus::Single)),
        report.figures(Some(Gpus::Multi)),
    );
    assert_eq!(one.peaks + several.peaks, all.peaks);
    assert_eq!(
        one.outcomes_total + several.outcomes_total,
        all.outcomes_total
    );
    assert_eq!(
        one.outcomes_right + several.outcomes_right,
        all.outcomes_right
    );
    for group in [Gpus::Single, Gpus::Multi] {
        let peaks: usize = report
            .by_source_on(Some(group))
            .iter()
            .map(|s| s.peaks)
            .sum();
        assert_eq!(peaks, report.figures(Some(group)).peaks, "{group:?}");
    }
    // The rows the CSV's own columns put on several GPUs, whatever the plan makes of them.
    for id in [
        "aai-7b-qlora-bs1-c512",
        "peftdocs-llama2-70b-lora-fsdp-8xH100",
        "hfblog4bit-llama-13b-int8_GC-s512-g2",
        "axolotl-llama3-70b-qlora-fsdp-2gpu-s512",
        "aai-hw-70b-qlora-a100-40x2-bs1-c2048",
    ] {
        let row = report.rows.iter().find(|r| r.id == id).unwrap();
        assert_eq!(row.gpus, Gpus::Multi, "{id}");
    }
    let offload = report
        .rows
        .iter()
        .find(|r| r.id == "peftreadme-bloomz-7b1-lora-ds-offload")
        .unwrap();
    assert_eq!(offload.gpus, Gpus::Single);
    // The compact summary carries the same figures, rounded as the whole set's.
    let summary = report.summary();
    assert_eq!(
        summary.single_gpu.peaks + summary.multi_gpu.peaks,
        summary.points_mb.len()
    );
    assert_eq!(summary.multi_gpu.outcomes_total, several.outcomes_total);
    let rounded = (several.median_abs_pct.unwrap() * 10.0).round() / 10.0;
    assert_eq!(summary.multi_gpu.median_abs_pct, Some(rounded));
    // A group with no peaks has no median and no share (null in JSON), neither 0 (a perfect prediction) nor NaN.
    let header = text.lines().next().unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("aai-7b-lora-bs1-c512,"))
        .unwrap();
    let only = peakplan_core::validate::validate(&format!("{header}\n{row}\n")).unwrap();
    let s = only.summary();
    assert_eq!(s.single_gpu.peaks, 0);
    assert_eq!(s.single_gpu.median_abs_pct, None);
    assert_eq!(s.single_gpu.within_10_share, None);
    assert!(s.single_gpu.sources.is_empty());
    assert_eq!(s.multi_gpu.peaks, 2);
    assert_eq!(only.figures(Some(Gpus::Single)).median_abs_pct, None);
}

#[test]
fn a_second_peak_in_another_metric_is_a_row_of_its_own() {
    let text = data("measured.csv");
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let row = lines
        .find(|l| l.starts_with("aai-7b-lora-bs1-c512,"))
        .unwrap();
    let with = |secondary: &str| {
        let r = row.replace("peak allocated 8.28 GiB", secondary);
        peakplan_core::validate::validate(&format!("{header}\n{r}\n")).unwrap()
    };
    let ids = |secondary: &str| -> Vec<String> {
        with(secondary).rows.into_iter().map(|r| r.id).collect()
    };
    assert_eq!(
        ids("peak allocated 8.28 GiB"),
        ["aai-7b-lora-bs1-c512", "aai-7b-lora-bs1-c512#allocated"]
    );
    // The same metric again, an unknown unit, or no number adds nothing.
    for s in [
        "peak reserved 9 GiB",
        "peak allocated 8.28 parsecs",
        "peak allocated lots",
    ] {
        assert_eq!(ids(s), ["aai-7b-lora-bs1-c512"], "{s}");
    }
    assert!(matches!(
        with("peak allocated 8 GB").rows[1].outcome,
        peakplan_core::validate::Outcome::Peak {
            bytes: 8_000_000_000,
            ..
        }
    ));
}

#[test]
fn csv_reader_handles_quotes_newlines_and_reports_unterminated_fields() {
    let rows =
        peakplan_core::validate::parse_csv("a,b\n\"x, \"\"y\"\"\",\"line\nbreak\"\n").unwrap();
    assert_eq!(rows, vec![vec!["a", "b"], vec!["x, \"y\"", "line\nbreak"]]);
    assert!(peakplan_core::validate::parse_csv("a\n\"open")
        .unwrap_err()
        .contains("unterminated"));
    assert!(peakplan_core::validate::validate("").is_err());
    assert!(peakplan_core::validate::validate("id,method\n1,full\n")
        .unwrap_err()
        .contains("measured_bytes"));
}

#[test]
fn the_page_s_accuracy_table_is_what_the_engine_computes_today() {
    // assets/validation.json is generated by `peakplan validate tests/data/measured.csv --format json`; the page
    // embeds it. Regenerate it after any engine change (this test names the command).
    let want = peakplan_core::validate::validate(&data("measured.csv"))
        .unwrap()
        .summary();
    let path = format!(
        "{}/../../assets/validation.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let got: peakplan_core::validate::Summary =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(
        got == want,
        "assets/validation.json is stale: run `cargo run -p peakplan-cli -- validate crates/peakplan-core/tests/data/measured.csv --format json > assets/validation.json`"
    );
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_header_and_no_peaks_give_no_figures() {
    use peakplan_core::validate::validate;
    let text = data("measured.csv");
    let header = text.lines().next().unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("aai-7b-lora-bs1-c512,"))
        .unwrap();
    // Excel's "CSV UTF-8" opens with a byte-order mark: the same rows as without it (before, "no `id` column").
    let plain = validate(&format!("{header}\n{row}\n")).unwrap();
    let marked = validate(&format!("\u{feff}{header}\n{row}\n")).unwrap();
    assert_eq!(marked.rows, plain.rows);
    assert_eq!(marked.rows.len(), 2);
    // No measured peak: every figure over peaks is null (it was 0.0, a perfect prediction never made).
    let check = |csv: &str, peaks: u64| {
        let summary = serde_json::to_value(validate(csv).unwrap().summary()).unwrap();
        let groups = [&summary, &summary["single_gpu"], &summary["multi_gpu"]];
        for (g, key) in groups
            .iter()
            .flat_map(|g| ["median_abs_pct", "within_10_share"].map(|k| (g, k)))
        {
            let want_null = g.get("peaks").map_or(peaks == 0, |p| p == 0);
            assert_eq!(g[key].is_null(), want_null, "{key} of {g}");
        }
    };
    check(&format!("{header}\n"), 0);
    check(&format!("\u{feff}{header}\n{row}\n"), 2);
}
