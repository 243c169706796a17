//! The `peakplan` binary as scripts see it: exit status, stdout, stderr; its numbers are the core's.

mod util;

use peakplan_core::units::format_bytes;
use peakplan_core::{estimate, import_config, preset_arch, Category, Plan};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use util::{check_refused, data, json, peakplan};

#[test]
fn estimate_json_holds_the_contract_keys_with_the_cores_numbers() {
    for query in [
        "model=llama-3.1-8b&method=qlora&r=16&b=2&s=2048",
        "model=mistral-7b&method=full&opt=adamw_8bit&gc=0&b=1&s=512",
        "model=llama-2-70b&method=lora&gpus=8&zero=3&gpu=a100-80gb",
    ] {
        let v = json(&["estimate", "--query", query, "--format", "json"]);
        let plan = Plan::parse_query(query).plan;
        let e = estimate(preset_arch(&plan), &plan);
        let expect = [
            ("total_params", e.total_params),
            ("trainable_params", e.trainable_params),
            ("weights_bytes", e.category(Category::Weights)),
            ("gradients_bytes", e.category(Category::Gradients)),
            ("optimizer_bytes", e.category(Category::Optimizer)),
            ("activations_bytes", e.category(Category::Activations)),
            ("peak_allocated_bytes", e.peak_allocated_bytes),
            ("peak_reserved_bytes", e.peak_reserved_bytes),
            ("device_bytes", e.device_bytes),
        ];
        for (key, want) in expect {
            assert_eq!(v[key].as_u64(), Some(want), "{query}: {key}");
        }
        let components = v["components"].as_array().expect("a component list");
        let sum: u64 = components.iter().filter_map(|c| c["bytes"].as_u64()).sum();
        assert!(
            sum > 0 && components.iter().all(|c| c["formula"].is_string()),
            "{query}"
        );
        // The normalized plan parses back to the same plan.
        let query_back = v["query"].as_str().expect("the normalized query");
        assert_eq!(Plan::parse_query(query_back).plan, plan, "{query}");
        // Fixed-length batches: no replayed batches to list.
        assert!(v["replayed_batches"].is_null(), "{query}");
    }
    // Batches of varying length: the steps the replay ran, in order, as the core draws them.
    let query = "model=llama-2-7b&method=lora&b=4&s=1024&lens=padded&lmean=300&lsd=200";
    let v = json(&["estimate", "--query", query, "--format", "json"]);
    let plan = Plan::parse_query(query).plan;
    let drawn =
        peakplan_core::replayed_batches(preset_arch(&plan), &plan).expect("varying batches");
    let listed = v["replayed_batches"].as_array().expect("a list of batches");
    assert_eq!(listed.len(), drawn.len());
    for (b, d) in listed.iter().zip(&drawn) {
        assert_eq!(
            (b["sequences"].as_u64(), b["len"].as_u64()),
            (Some(d.sequences), Some(d.len))
        );
    }
    assert!(
        drawn.iter().any(|d| d.len == 1024),
        "the longest sequence is in one batch"
    );
}

#[test]
fn hf_config_replaces_the_preset_architecture() {
    let path = data("models/phi-2.json");
    let text = std::fs::read_to_string(&path).expect("test data");
    let arch = import_config(&text).expect("a valid config");
    let v = json(&[
        "estimate",
        "--hf-config",
        &path,
        "--query",
        "method=lora",
        "--format",
        "json",
    ]);
    let plan = Plan::parse_query("method=lora").plan;
    let e = estimate(&arch, &plan);
    assert_eq!(v["total_params"].as_u64(), Some(arch.total_params()));
    assert_eq!(v["device_bytes"].as_u64(), Some(e.device_bytes));
}

#[test]
fn lengths_file_makes_a_dataset_s_token_lengths_the_plan_s() {
    // A dataset's token counts (any separators): their mean, deviation and longest (cut to s) become the plan's
    // batch lengths, padded per batch, and the numbers are the core's for that plan.
    let dir = std::env::temp_dir().join(format!("peakplan-lengths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let (good, bad) = (dir.join("lengths.txt"), dir.join("bad.txt"));
    std::fs::write(&good, "120 80 400\n3000, 250\n").expect("written");
    std::fs::write(&bad, "12 x3\n").expect("written");
    let query = "model=llama-3.1-8b&method=lora&b=8&s=2048";
    let v = json(&[
        "estimate",
        "--query",
        query,
        "--lengths",
        good.to_str().unwrap_or_default(),
        "--format",
        "json",
    ]);
    let expect =
        Plan::parse_query(&format!("{query}&lens=padded&lmean=770&lsd=1121&lmax=2048")).plan;
    assert!(v["query"]
        .as_str()
        .unwrap_or_default()
        .ends_with("&lens=padded&lmean=770&lsd=1121&lmax=2048"));
    assert_eq!(
        v["device_bytes"].as_u64(),
        Some(estimate(preset_arch(&expect), &expect).device_bytes)
    );
    check_refused(
        &["estimate", "--lengths", bad.to_str().unwrap_or_default()],
        "entry 2 (`x3`) is not a whole number of tokens",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn svg_is_the_chart_with_its_four_categories() {
    let r = peakplan(&[
        "estimate",
        "--query",
        "model=llama-2-7b&method=qlora",
        "--format",
        "svg",
    ]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.trim_start().starts_with("<svg") && r.stdout.trim_end().ends_with("</svg>"));
    for label in ["Weights", "Gradients", "Optimizer states", "Activations"] {
        assert!(r.stdout.contains(label), "no {label} in the SVG");
    }
}

#[test]
fn svg_says_its_title_the_answer_and_the_query_in_the_plans_theme() {
    let q = "model=llama-2-7b&method=qlora&r=16&b=1&s=1024";
    let r = peakplan(&["estimate", "--query", q, "--format", "svg"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    // The root's first children, where SVG readers and search look.
    assert_eq!(
        lines[1],
        "<title>llama-2-7b: nvidia-smi memory at the peak of one step (b=1, s=1024)</title>"
    );
    let plan = Plan::parse_query(q).plan;
    let device = estimate(preset_arch(&plan), &plan).device_bytes;
    assert!(lines[2].starts_with(&format!(
        "<desc>llama-2-7b, QLoRA r=16, b=1, s=1024: needs {} (nvidia-smi) of the RTX 4090's 24.0 GiB: fits. \
         peakplan query: model=llama-2-7b&amp;method=qlora&amp;r=16",
        format_bytes(device)
    )), "{}", lines[2]);
    // No address of the planner is known here: no link.
    assert!(!r.stdout.contains("<a "), "a link in the CLI's SVG");
    assert!(
        r.stdout.contains("fill=\"#FFFFFF\""),
        "not light by default"
    );
    let dark = peakplan(&[
        "estimate",
        "--query",
        &format!("{q}&theme=dark"),
        "--format",
        "svg",
    ]);
    assert!(
        dark.stdout.contains("fill=\"#16181D\""),
        "theme=dark is not dark"
    );
    assert!(
        dark.stdout.contains("peakplan query: model=llama-2-7b")
            && dark.stdout.contains("theme=dark</desc>")
    );
}

#[test]
fn a_plan_on_several_gpus_is_said_per_gpu_in_the_table_the_svg_and_the_advice() {
    let q = "model=llama-3.1-70b&method=full&prec=amp_bf16&gpus=32&zero=3&gpu=h100-80gb";
    let said = " per GPU (32 GPUs, FSDP1 full shard)";
    let table = peakplan(&["estimate", "--query", q]).stdout;
    assert!(
        table.contains(&format!("Full on h100-80gb{said}")),
        "{table}"
    );
    assert!(table.contains(&format!("fits{said}")), "{table}");
    let svg = peakplan(&["estimate", "--query", q, "--format", "svg"]).stdout;
    assert!(
        svg.contains("memory per GPU at the peak") && svg.contains("32 GPUs, FSDP1 full shard")
    );
    let advice = peakplan(&["advise", "--query", q]).stdout;
    assert!(advice.contains(said), "{advice}");
    // One GPU: no per-GPU words anywhere.
    let one = peakplan(&["estimate", "--query", "model=llama-2-7b&method=qlora"]).stdout;
    assert!(!one.contains("per GPU"), "{one}");
}

#[test]
fn table_names_the_peak_and_the_verdict() {
    let r = peakplan(&[
        "estimate",
        "--query",
        "model=llama-2-13b&method=lora&b=8&s=4096&gc=0",
    ]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("peak reserved (max_memory_reserved)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("does not fit"), "{}", r.stdout);
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_problem() {
    let csv = data("measured.csv");
    let cases: &[(&[&str], &str)] = &[
        (&[], "no command"),
        (&["estimat"], "unknown command \"estimat\""),
        (&["estimate", "--query", "r=0"], "r=0 is out of range"),
        (
            &["estimate", "--query", "model=llama-9b"],
            "model=`llama-9b` is not a known preset",
        ),
        (&["estimate", "--query", "foo=1"], "unknown key `foo`"),
        (
            &["estimate", "--query", "task=grpo&gens=1"],
            "gens=1 is out of range; accepted: integers 2 to 4096",
        ),
        (
            &["estimate", "--query", "task=grpo&gen=sglang"],
            "gen=`sglang` is not accepted; accepted: hf, vllm_colocate, vllm_server",
        ),
        (
            &["estimate", "--query", "task=grpo&vmem=1.5"],
            "vmem=`1.5` is out of range; accepted: above 0 to 1",
        ),
        (
            &["estimate", "--query", "task=grpo&b=3&gens=2&ga=4"],
            "ga=4 does not divide the 6 completions",
        ),
        (
            &["export", "--query", "task=grpo", "--format", "axolotl"],
            "cannot be exported as axolotl YAML yet",
        ),
        (
            &["export", "--query", "task=cpo", "--format", "axolotl"],
            "its rl key has no cpo",
        ),
        (
            &["estimate", "--query", "task=simpo&ref=adapters_off"],
            "ref=adapters_off does not apply to task=simpo, which compares with no reference",
        ),
        (&["estimate", "--query", "b=2&s"], "has no value"),
        (&["estimate", "--format"], "--format needs a value"),
        (
            &["estimate", "--format", "xml"],
            "accepted: table, json, svg",
        ),
        (&["estimate", "--bogus"], "unknown argument \"--bogus\""),
        (
            &["estimate", "--hf-config", "/nonexistent/config.json"],
            "cannot read --hf-config",
        ),
        (
            &[
                "estimate",
                "--hf-config",
                &data("interop/axolotl_qlora.yaml"),
            ],
            "--hf-config",
        ),
        (&["validate"], "validate needs a CSV file"),
        (
            &["validate", "/nonexistent.csv"],
            "cannot read /nonexistent.csv",
        ),
        (
            &["validate", &csv, "--row", "no-such-row"],
            "no row \"no-such-row\"",
        ),
        (
            &["export", "--query", "model=llama-2-7b", "--format", "nope"],
            "accepted: python",
        ),
        (
            &["import", "/nonexistent.yaml"],
            "cannot read /nonexistent.yaml",
        ),
        (
            &["gpus", "--format", "svg"],
            "not accepted by gpus; accepted: table, json",
        ),
        (&["gpus", "--query", "b=0"], "b=0 is out of range"),
        // A stray argument is named, never ignored (`presets extra` printed the presets).
        (&["presets", "extra"], "unexpected argument `extra`: presets"),
        (&["help", "estimate", "x"], "unexpected argument `x`"),
        (&["--version", "x"], "unexpected argument `x`"),
        (&["validate", &csv, "extra"], "unexpected argument `extra`"),
        (&["validate", &csv, "--row", "a", "b"], "unexpected argument `b`"),
        (&["validate", &csv, "--format", "xml"], "accepted: table, json"),
        (&["validate", &csv, "--row", "a", "--format", "json"], "not both"),
        (&["import", "-x"], "unknown argument \"-x\""),
        (&["gpus", "stray"], "unknown argument \"stray\""),
        (&["advise", "stray"], "unknown argument \"stray\""),
        (&["export", "stray"], "unknown argument \"stray\""),
        // A flag given twice is refused, not last-wins.
        (&["estimate", "--query", "b=1", "-q", "b=2"], "--query is given twice"),
        (&["gpus", "-f", "json", "--format", "table"], "--format is given twice"),
        (&["export", "--hf-model", "a/b", "--hf-model", "a/c"], "--hf-model is given twice"),
        (&["estimate", "--hf-config", "a", "--hf-config", "b"], "--hf-config is given twice"),
        (&["advise", "--gpu", "t4-16gb", "--gpu", "rtx-4090"], "--gpu is given twice"),
        (&["validate", &csv, "--row", "a", "--row", "b"], "--row is given twice"),
        (&["validate", &csv, "-f", "json", "--format", "json"], "--format is given twice"),
        // `--gpu` is one GPU id, never spliced into the query as more keys.
        (
            &["advise", "--gpu", "rtx-4090&b=8"],
            "--gpu `rtx-4090&b=8` is not a bundled GPU; give one id of `peakplan presets`: rtx-3060-12gb,",
        ),
        (&["advise", "--gpu", "rtx-4090="], "is not a bundled GPU"),
    ];
    for (args, expect) in cases {
        check_refused(args, expect);
    }
    // The id alone still works, and still refuses a query naming another GPU.
    let r = peakplan(&["advise", "--gpu", "a100-80gb", "--format", "json"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    check_refused(
        &["advise", "--query", "gpu=t4-16gb", "--gpu", "a100-80gb"],
        "gpu is given 2 times",
    );
}

#[test]
fn help_and_version_answer_on_stdout_with_status_0() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["estimate", "--help"],
        &["help", "validate"],
    ] {
        let r = peakplan(args);
        assert_eq!(r.status, 0, "{args:?}: {}", r.stderr);
        assert!(
            r.stdout.starts_with("usage: peakplan ") && r.stdout.contains("Plan keys"),
            "{args:?}: {}",
            r.stdout
        );
    }
    let one = peakplan(&["estimate", "--help"]).stdout;
    assert!(
        one.contains("peakplan estimate") && !one.contains("peakplan validate"),
        "{one}"
    );
    let v = peakplan(&["--version"]);
    assert_eq!(
        (v.status, v.stdout.trim()),
        (0, concat!("peakplan ", env!("CARGO_PKG_VERSION")))
    );
}

#[test]
fn validate_summarizes_the_bundled_measurements() {
    let csv = data("measured.csv");
    let r = peakplan(&["validate", &csv]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("median absolute error") && r.stdout.contains("skipped"),
        "{}",
        r.stdout
    );
    let summary = json(&["validate", &csv, "--format", "json"]);
    let text = std::fs::read_to_string(&csv).expect("test data");
    let report = peakplan_core::validate::validate(&text).expect("the bundled CSV parses");
    assert_eq!(
        summary,
        serde_json::to_value(report.summary()).expect("serializable")
    );
    // Single- and multi-GPU runs are reported apart, beside the whole set's figures (kept as they were).
    for (key, group) in [
        ("single_gpu", peakplan_core::validate::Gpus::Single),
        ("multi_gpu", peakplan_core::validate::Gpus::Multi),
    ] {
        let f = report.figures(Some(group));
        assert_eq!(
            summary[key]["peaks"].as_u64(),
            Some(f.peaks as u64),
            "{key}"
        );
        let median = f.median_abs_pct.expect("peaks in both groups");
        let label = if key == "single_gpu" {
            "  single GPU: "
        } else {
            "  multi-GPU:  "
        };
        let line = format!(
            "{label}{} peaks; median absolute error {median:.1}%; within 10%: {:.0}%; outcomes right: {} of {}\n",
            f.peaks,
            f.within_10_share.unwrap_or(0.0) * 100.0,
            f.outcomes_right,
            f.outcomes_total
        );
        assert!(r.stdout.contains(&line), "{line}\n{}", r.stdout);
    }
    assert!(r.stdout.contains("\nmeasured peaks: "), "{}", r.stdout);
    // The by-source table says which runs each line covers: a publisher of both kinds gets a line for all its
    // runs, then one for each kind; the others one line marked with their kind.
    let table = r
        .stdout
        .split("\nby source")
        .nth(1)
        .expect("a by-source table");
    assert!(
        table.lines().next().unwrap_or("").contains("GPUs"),
        "{table}"
    );
    let torchtune = table
        .lines()
        .skip_while(|l| !l.starts_with("pytorch/torchtune "))
        .take(3)
        .map(|l| {
            l.split_whitespace()
                .nth(usize::from(l.starts_with('p')))
                .unwrap_or("")
        })
        .collect::<Vec<_>>();
    assert_eq!(torchtune, ["all", "1", "2+"], "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("AnswerDotAI/fsdp_qlora")
                && l.split_whitespace().nth(1) == Some("2+")),
        "{table}"
    );
}

#[test]
fn advise_json_lists_levers_that_lower_the_peak() {
    let v = json(&[
        "advise",
        "--query",
        "model=llama-2-13b&method=lora&b=8&s=4096&gc=0&gpu=rtx-4090",
        "--format",
        "json",
    ]);
    assert_eq!(v["fits"], Value::Bool(false));
    let device = v["device_bytes"].as_u64().expect("device_bytes");
    let to_fit = &v["to_fit"];
    assert!(
        to_fit["device_bytes"].as_u64().expect("a change that fits")
            <= v["capacity_bytes"].as_u64().expect("capacity")
    );
    for lever in v["levers"].as_array().expect("levers") {
        assert!(
            lever["device_bytes"].as_u64().expect("bytes") < device,
            "{lever}"
        );
    }
}

#[test]
fn advise_halves_the_micro_batch_with_twice_the_accumulation_and_marks_what_still_does_not_fit() {
    let query = "model=llama-2-70b&method=lora&b=4&ga=4&s=2048&gpu=rtx-4090";
    let v = json(&["advise", "--query", query, "--format", "json"]);
    let card = v["levers"]
        .as_array()
        .expect("levers")
        .iter()
        .find(|l| l["changes"][0]["key"] == "b")
        .expect("a micro-batch lever");
    let change = &card["changes"][0];
    assert_eq!(change["value"], "2");
    assert_eq!(
        change["also"],
        serde_json::json!([{"key": "ga", "value": "8"}])
    );
    assert!(card["query"]
        .as_str()
        .is_some_and(|q| q.contains("b=2") && q.contains("ga=8")));
    assert_eq!(card["fits"], Value::Bool(false));
    let table = peakplan(&["advise", "--query", query]);
    let line = table
        .stdout
        .lines()
        .find(|l| l.contains("b=2&ga=8"))
        .expect("the micro-batch lever in the table");
    assert!(line.contains("STILL DOES NOT FIT"), "{line}");
}

#[test]
fn gpus_json_has_a_row_per_bundled_gpu_with_the_cores_numbers() {
    let query = "model=qwen2.5-14b&method=qlora&b=4&s=4096";
    let v = json(&["gpus", "--query", query, "--format", "json"]);
    let rows = v.as_array().expect("an array of GPUs");
    assert_eq!(rows.len(), peakplan_core::presets::GPUS.len());
    let plan = Plan::parse_query(query).plan;
    let need = estimate(preset_arch(&plan), &plan).device_bytes;
    let mut fitting = 0;
    // The keys the README documents for scripts, and no others.
    let keys = [
        "capacity_bytes",
        "device_bytes",
        "fits",
        "free_changes",
        "gpus_needed",
        "gpus_needed_with_free_changes",
        "id",
        "max_batch",
        "max_seq",
        "name",
        "needs_bytes",
        "short_name",
    ];
    for r in rows {
        let mut have: Vec<&str> = r
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        have.sort_unstable();
        assert_eq!(have, keys, "{r}");
        let cap = r["capacity_bytes"].as_u64().expect("capacity_bytes");
        assert_eq!(r["device_bytes"].as_u64(), Some(need), "{r}");
        assert_eq!(r["fits"].as_bool(), Some(need <= cap), "{r}");
        if need <= cap {
            fitting += 1;
            assert_eq!(r["gpus_needed"].as_u64(), Some(1), "{r}");
            assert!(r["max_batch"].as_u64().expect("a batch fits") >= 4, "{r}");
        }
    }
    assert!(
        fitting > 0 && fitting < rows.len(),
        "{fitting} of {}",
        rows.len()
    );
    let table = peakplan(&["gpus", "--query", query]);
    assert_eq!(table.status, 0, "{}", table.stderr);
    assert!(table.stdout.contains("h100-80gb") && table.stdout.contains("gpus needed"));
}

#[test]
fn endless_inputs_are_refused_at_their_cap_while_reading() {
    // /dev/zero never ends and reports no size: the cap must hold while reading, or this test never returns.
    check_refused(
        &["estimate", "--hf-config", "/dev/zero"],
        "--hf-config /dev/zero is more than 1048576 bytes",
    );
    check_refused(
        &["import", "/dev/zero"],
        "/dev/zero is more than 1048576 bytes",
    );
    check_refused(
        &["validate", "/dev/zero"],
        "/dev/zero is more than 67108864 bytes",
    );
    // A pipe larger than the cap is refused after the cap, without waiting for its end.
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_peakplan"))
        .args(["import", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the peakplan binary runs");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let chunk = vec![b' '; 1 << 16];
    let mut written = 0usize;
    // The binary stops reading at 1 MiB + 1 and exits, which closes the pipe: writing then fails.
    while written < 64 << 20 && stdin.write_all(&chunk).is_ok() {
        written += chunk.len();
    }
    drop(stdin);
    let out = child.wait_with_output().expect("the binary exits");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        written < 8 << 20,
        "the binary read {written} bytes of a pipe before refusing it"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("/dev/stdin is more than 1048576 bytes"));
}

#[test]
fn closed_output_streams_end_the_run_without_an_abort() {
    use std::process::Stdio;
    let spawn = |args: &[&str], close_stdout: bool| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_peakplan"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the peakplan binary runs");
        // Closing the read end before the binary writes makes its write fail with a broken pipe.
        if close_stdout {
            drop(child.stdout.take());
        } else {
            drop(child.stderr.take());
        }
        child.wait().expect("the binary exits").code()
    };
    // Bad input with stderr closed: still status 2, not an abort (134).
    assert_eq!(spawn(&["estimate", "--query", "b=0"], false), Some(2));
    // A reader that stops reading (`| head`): the run ends quietly.
    assert_eq!(spawn(&["estimate", "--format", "svg"], true), Some(0));
}

#[test]
fn the_presets_table_keeps_its_columns_for_every_name() {
    let r = peakplan(&["presets"]);
    assert_eq!(r.status, 0);
    let (models, gpus) = r.stdout.split_once("gpus:\n").expect("two sections");
    let models: Vec<&str> = models.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(models.len(), peakplan_core::presets::MODELS.len());
    // The parameter count ends where every other one ends, however long the id or the name.
    let ends: std::collections::BTreeSet<usize> = models
        .iter()
        .map(|l| l.find(" params").expect("a count"))
        .collect();
    assert_eq!(ends.len(), 1, "{models:#?}");
    let memory_ends: std::collections::BTreeSet<usize> = gpus
        .lines()
        .map(|l| l.find("iB").expect("a capacity"))
        .collect();
    assert_eq!(memory_ends.len(), 1, "{gpus}");
}

#[test]
fn gpus_says_when_the_free_changes_need_fewer_gpus() {
    let query = "model=llama-3.1-70b&method=full&prec=amp_bf16&gpus=32&zero=3&gpu=h100-80gb";
    let v = json(&["gpus", "--query", query, "--format", "json"]);
    let rows = v.as_array().expect("rows");
    let h100 = rows
        .iter()
        .find(|r| r["id"] == "h100-80gb")
        .expect("an H100 row");
    let (now, free) = (
        h100["gpus_needed"].as_u64().expect("a count"),
        h100["gpus_needed_with_free_changes"]
            .as_u64()
            .expect("a lower count"),
    );
    assert!(free < now, "{h100}");
    let keys: Vec<&str> = h100["free_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["key"].as_str())
        .collect();
    assert!(keys.contains(&"opt"), "{keys:?}");
    let fits_one = rows.iter().find(|r| r["gpus_needed"] == 1);
    assert!(fits_one.is_none_or(|r| r["gpus_needed_with_free_changes"].is_null()));
    let table = peakplan(&["gpus", "--query", query]).stdout;
    let line = table
        .lines()
        .find(|l| l.starts_with("h100-80gb"))
        .expect("row");
    assert!(line.ends_with(&format!("{now}, or {free}*")), "{line}");
    assert!(table.contains("*: with the free changes") && table.contains("opt=adamw_torch_fused"));
}

#[test]
fn gpus_needed_is_the_fewest_count_and_never_more_than_a_fitting_plan_has() {
    let v = json(&[
        "gpus",
        "--query",
        "model=llama-2-70b&method=qlora&split=1&gpus=3",
        "--format",
        "json",
    ]);
    for r in v.as_array().expect("rows") {
        if r["fits"].as_bool() == Some(true) {
            assert!(r["gpus_needed"].as_u64().is_some_and(|n| n <= 3), "{r}");
        }
    }
    let a10g = v
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == "a10g-24gb"))
        .expect("an A10G row");
    assert_eq!(a10g["gpus_needed"].as_u64(), Some(3));
}

#[test]
fn diagnostics_stay_one_short_line_and_a_repeated_key_is_refused() {
    let q: Vec<String> = (0..10_000).map(|i| format!("k{i}=1")).collect();
    let r = peakplan(&["estimate", "--query", &q.join("&")]);
    // The hardening check wants under 4 KB; before the cap this was 2.5 MB.
    assert!(r.stderr.len() < 1024, "{} bytes", r.stderr.len());
    assert_eq!(r.status, 2);
    assert_eq!(r.stderr.lines().count(), 1);
    assert!(
        r.stderr.trim_end().ends_with("; … and 9,980 more problems"),
        "{}",
        r.stderr
    );
    check_refused(
        &["estimate", "--query", "b=2&b=3"],
        "b is given 2 times (`2`, `3`); give it once",
    );
    let r = peakplan(&["estimate", "--query", "b=2&b=3"]);
    assert!(!r.stderr.contains("last value"), "{}", r.stderr);
    let r = peakplan(&[
        "estimate",
        "--query",
        "model%1B%5D0%3Bowned%07=1&%E2%80%AE=2",
    ]);
    assert!(
        !r.stderr
            .chars()
            .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
        "{:?}",
        r.stderr
    );
}

#[test]
fn import_notes_carry_no_control_characters_and_forge_no_line() {
    let r = peakplan(&["import", &data("interop/evil_adapter_config.json")]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let hazard = |c: char| {
        c.is_control() && c != '\n'
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    assert!(!r.stderr.chars().any(hazard), "{:?}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .all(|l| !l.starts_with("note: this config")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("x\\nnote: this config was verified to fit"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_import_with_stderr_closed_still_prints_its_plan() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_peakplan"))
        .args(["import", &data("interop/evil_adapter_config.json")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the peakplan binary runs");
    drop(child.stderr.take());
    let out = child.wait_with_output().expect("the binary exits");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("model="));
}

#[test]
fn the_pages_workflow_builds_the_site_the_tests_serve() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text =
        std::fs::read_to_string(root.join(".github/workflows/pages.yml")).expect("the workflow");
    let v = peakplan_core::interop::yaml::parse(&text).expect("the workflow is YAML");
    let steps = v["jobs"]["build"]["steps"].as_array().expect("build steps");
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    // Every command is one of the project's own scripts, and each exists.
    for run in &runs {
        let script = run
            .strip_prefix("bash ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("{run} is not one of the project's scripts"));
        assert!(root.join(script).is_file(), "{script} does not exist");
    }
    assert!(runs.contains(&"bash scripts/setup.sh --site"), "{runs:?}");
    // The build is scripts/build-site.sh, which scripts/test.sh builds the tested site with, into what is uploaded.
    let build = runs
        .iter()
        .find(|r| r.starts_with("bash scripts/build-site.sh "))
        .expect("the site build");
    let dist = build.split_whitespace().last().expect("a dist folder");
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-pages-artifact@"))
        })
        .expect("the upload");
    assert_eq!(upload["with"]["path"].as_str(), Some(dist));
    let test_sh = std::fs::read_to_string(root.join("scripts/test.sh")).expect("scripts/test.sh");
    assert!(
        test_sh.contains("bash scripts/build-site.sh /peakplan/"),
        "test.sh builds another way"
    );
    assert!(v["jobs"]["deploy"]["steps"][0]["uses"]
        .as_str()
        .is_some_and(|u| u.starts_with("actions/deploy-pages@")));
}
