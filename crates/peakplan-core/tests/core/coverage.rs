//! Trace coverage (issue #28): for every plan key and each value that changes memory, the traced CPU steps that
//! exercise it, or why none does (`traced/untraced.csv`); renders `traced/COVERAGE.md` and fails when it is stale.

use std::collections::{BTreeMap, BTreeSet};

use peakplan_core::plan::{
    Framework, Generation, Loss, Method, Plan, Shard, Targets, Task, TokenTraining, KEYS,
};
use peakplan_core::{import_config, ModelId, Target};

use crate::util::{data, keyword_values, plan};

const HF_LIBS: &str =
    "torch 2.15 (CPU), transformers 5.24, peft 0.21.2, bitsandbytes 0.50.2, accelerate 1.15";

/// The traced files and the libraries that made them (`tools/trace/README.md`). The first three and
/// `fsdp_cpu.csv` hold Llama-shaped models; `families.csv` names a traced `config.json` per row.
const FILES: &[(&str, &str)] = &[
    ("hf_cpu.csv", HF_LIBS),
    ("hf_keys.csv", HF_LIBS),
    (
        "families.csv",
        "torch 2.15 (CPU), transformers 5.24 (4.57.1 for the mixtral4- rows), peft 0.21.2, bitsandbytes 0.50.2",
    ),
    (
        "fsdp_cpu.csv",
        "torch 2.15 (CPU), transformers 5.24, peft 0.21.2, bitsandbytes 0.50.2, accelerate 1.15, deepspeed 0.19.8",
    ),
    (
        "tt_cpu.csv",
        "torch 2.15 (CPU), torchtune 0.6.1, torchao 0.9.0",
    ),
    ("lg_cpu.csv", "torch 2.15 (CPU), litgpt 0.5.13, lightning 2.6.6"),
    (
        "ds_cpu.csv",
        "torch 2.15 (CPU), transformers 5.24, peft 0.21.2, deepspeed 0.19.8",
    ),
    (
        "pref_cpu.csv",
        "torch 2.15 (CPU), transformers 5.25, peft 0.21.2, trl 1.16.0",
    ),
    (
        "grpo_cpu.csv",
        "torch 2.15 (CPU), transformers 5.24, peft 0.21.2, trl 1.16.0",
    ),
];

/// The values the CPU could trace and nobody has yet: a ratchet. An entry leaves this list (and `untraced.csv`)
/// when a traced step exercises it; none is added without saying why in `untraced.csv`.
const NOT_YET: &[(&str, &str)] = &[
    ("chunk", "*"),
    ("quant", "gptq4"),
    ("quant", "gptq8"),
    ("fw", "webgpu"),
    ("qload", "1"),
];

/// The value that stands for a key as a whole in `untraced.csv` (keys with no allocated effect, and keys covered
/// by two traced values).
const WHOLE_KEY: &str = "*";

/// One traced step: where it comes from, its model family and the plan it ran.
struct Step {
    file: &'static str,
    id: String,
    family: String,
    plan: Plan,
}

/// The values of a key that change memory differently.
enum Domain {
    /// Each class must be traced or explained.
    Classes(Vec<String>),
    /// A size: covered when traced at two distinct values or more (the slope and the fixed part both show).
    Distinct,
    /// Changes no allocated byte: it takes a reason, never a trace.
    NoEffect,
}

/// One line of `untraced.csv`.
struct Untraced {
    key: String,
    value: String,
    kind: String,
    reason: String,
}

const KINDS: &[&str] = &["cuda_only", "no_allocated_effect", "not_yet"];

fn listed(values: &[&str]) -> Option<Domain> {
    Some(Domain::Classes(
        values.iter().map(|v| v.to_string()).collect(),
    ))
}

/// The value domain of each key; `None` for a key this table does not know yet (the test then fails).
fn domain(key: &str) -> Option<Domain> {
    match key {
        "model" => Some(Domain::Classes(preset_families())),
        "targets" => {
            let mut all: Vec<&str> = Target::ALL.iter().map(|t| t.key()).collect();
            all.push("all-linear");
            listed(&all)
        }
        // `auto` is the framework's choice of one of the others: steps count under the value it resolves to.
        "shard" => listed(&["fsdp1", "fsdp2", "deepspeed"]),
        "wrap" => listed(&["block", "lora"]),
        "gsync" => listed(&["0", "1"]),
        "gc" => listed(&["0", "1", "offload"]),
        "dq" | "upcast" | "qsave" | "compile" | "liger" | "oib" | "aoff" | "cpuoff" | "qload"
        | "split" => listed(&["0", "1"]),
        "tt" => listed(&["0", "all", "rows"]),
        "hold" => listed(&["0", "16", "32"]),
        // One micro-batch holds no accumulated gradients; from the second on they stay resident.
        "ga" => listed(&["1", "2+"]),
        // One GPU shards nothing; two and more divide by the count, which two counts pin.
        "gpus" => listed(&["1", "2", "3+"]),
        "zero" => listed(&["0", "1", "2", "3"]),
        "dropout" => listed(&["0", ">0"]),
        "r" | "b" | "s" | "chunk" | "vt" | "prompt" => Some(Domain::Distinct),
        // GRPO: sizes, and whether a reference runs (0 or not).
        "gens" | "completion" | "vmem" => Some(Domain::Distinct),
        "beta" => listed(&["0", ">0"]),
        // `auto` is TRL's choice of one of the others; `none` (no pass, no copy) holds what `precomputed` holds.
        "ref" => listed(&["model", "adapters_off", "precomputed"]),
        "gpu" | "embed" | "theme" | "alloc" | "msplit" => Some(Domain::NoEffect),
        // DeepSpeed's sizes: covered where traced at two values (`auto` is one); its switches both ways.
        "ds_sub" | "ds_rbucket" | "ds_prefetch" | "ds_live" | "ds_reuse" | "ds_persist" => {
            Some(Domain::Distinct)
        }
        "ds_overlap" | "ds_contig" | "zinit" => listed(&["0", "1"]),
        "ds_agbucket" => Some(Domain::NoEffect),
        // Varying batch lengths: allocated memory is the longest batch's, a fixed plan of lmax tokens.
        "lens" | "lmean" | "lsd" | "lmax" | "ltrunc" => Some(Domain::NoEffect),
        _ => listed(&keyword_values(key)?),
    }
}

/// The `model_type` of every bundled preset, each once.
fn preset_families() -> Vec<String> {
    let set: BTreeSet<String> = ModelId::all()
        .map(|m| family(&m.arch().model_type))
        .collect();
    set.into_iter().collect()
}

/// A `model_type` as a family: Falcon's legacy names (the falcon-7b preset's config keeps `RefinedWebModel`)
/// are `falcon`, which peakplan imports through the same layout.
fn family(model_type: &str) -> String {
    match model_type {
        "RefinedWebModel" | "RefinedWeb" => "falcon".into(),
        t => t.into(),
    }
}

/// Whether the engine reads `key` for this plan at all: a key a step leaves at a default it never reads (a full
/// fine-tune's LoRA rank, an unquantized plan's quantizer, one GPU's sharding) is not exercised by that step.
fn read_by(key: &str, p: &Plan) -> bool {
    match key {
        "r" | "targets" | "dropout" | "adtype" | "peft" | "tt" => p.method != Method::Full,
        "vt" => p.method != Method::Full && p.peft.uses_virtual_tokens(),
        "quant" | "dq" | "upcast" | "qsave" | "qload" => p.method == Method::Qlora,
        "zero" | "shard" => p.gpus > 1,
        // FSDP1's units of a LoRA plan; how accumulated gradients are reduced.
        "wrap" => {
            p.sharded_by_fsdp() && p.sharding().shard == Shard::Fsdp1 && p.method != Method::Full
        }
        "gsync" => p.gpus > 1 && p.grad_accumulation > 1,
        // torchtune's chunked loss always cuts 8 chunks; the others cut `chunk` tokens.
        "chunk" => {
            p.loss == Loss::Chunked && p.framework != Framework::Torchtune && p.task == Task::Sft
        }
        // TRL's preference trainers compute log-probabilities with their own head, whatever the loss.
        "loss" => p.task == Task::Sft,
        "ref" | "prompt" => p.task != Task::Sft,
        "gens" | "completion" | "beta" | "gen" => p.task == Task::Grpo,
        "vmem" => p.task == Task::Grpo && p.generation == Generation::VllmColocate,
        // DeepSpeed's own keys, read under DeepSpeed; ZeRO-3's under ZeRO-3 only.
        "ds_sub" | "ds_prefetch" | "ds_live" | "ds_reuse" | "ds_persist" | "zinit" => {
            p.sharding().shard == Shard::Deepspeed && p.zero == 3
        }
        "ds_rbucket" | "ds_agbucket" | "ds_overlap" | "ds_contig" => {
            p.sharding().shard == Shard::Deepspeed && p.zero >= 1
        }
        _ => true,
    }
}

/// The classes of `key`'s domain that a step exercises (the raw value for a size).
fn classes(key: &str, step: &Step) -> Vec<String> {
    let p = &step.plan;
    let one = |c: &str| vec![c.to_string()];
    if !read_by(key, p) {
        return Vec::new();
    }
    match key {
        // The traced rows carry no `model=`: the family is the traced config's.
        "model" => one(&step.family),
        "targets" => {
            let mut c: Vec<String> = Target::ALL
                .iter()
                .filter(|t| p.targets.contains(**t))
                .map(|t| t.key().to_string())
                .collect();
            if p.targets == Targets::ALL_LINEAR {
                c.push("all-linear".into());
            }
            c
        }
        "dropout" => one(if p.dropout > 0.0 { ">0" } else { "0" }),
        "shard" => one(p.sharding().shard.key()),
        "wrap" => one(if p.sharding().mixed_units {
            "block"
        } else {
            "lora"
        }),
        "gsync" => one(if p.sharding().sync_each_batch {
            "1"
        } else {
            "0"
        }),
        "ref" => one(p.reference_source().key()),
        "ds_overlap" => one(if p.ds_overlap_comm.unwrap_or(p.zero == 3) {
            "1"
        } else {
            "0"
        }),
        "ds_contig" => one(if p.ds_contiguous_grads.unwrap_or(true) {
            "1"
        } else {
            "0"
        }),
        "zinit" => one(if p.zero_init { "1" } else { "0" }),
        "beta" => one(if p.beta > 0.0 { ">0" } else { "0" }),
        "completion" => one(&p.completion_tokens().to_string()),
        "prompt" => one(&p.prompt_tokens().to_string()),
        "ga" => one(if p.grad_accumulation > 1 { "2+" } else { "1" }),
        "gpus" => one(match p.gpus {
            1 => "1",
            2 => "2",
            _ => "3+",
        }),
        "tt" => one(match p.tokens {
            TokenTraining::Frozen => "0",
            TokenTraining::All => "all",
            TokenTraining::Rows(_) => "rows",
        }),
        _ => p.get(key).into_iter().collect(),
    }
}

/// Every row of every traced file, its query parsed over the plan's defaults (which that step then exercised).
fn steps() -> Vec<Step> {
    let mut steps = Vec::new();
    for (file, _) in FILES {
        let text = data(&format!("traced/{file}"));
        for line in text.lines().skip(1) {
            let (id, family, query) = if *file == "families.csv" {
                let f: Vec<&str> = line.splitn(4, ',').collect();
                let arch = import_config(&data(&format!("traced/{}", f[1]))).unwrap();
                (f[0], family(&arch.model_type), f[3])
            } else if *file == "pref_cpu.csv" || *file == "grpo_cpu.csv" {
                // Its TRL release sits before the query.
                let f: Vec<&str> = line.splitn(11, ',').collect();
                (f[0], "llama".to_string(), f[10])
            } else {
                let f: Vec<&str> = line.splitn(10, ',').collect();
                (f[0], "llama".to_string(), f[9])
            };
            steps.push(Step {
                file,
                id: id.to_string(),
                family,
                plan: plan(query),
            });
        }
    }
    steps
}

fn untraced() -> Vec<Untraced> {
    data("traced/untraced.csv")
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.splitn(4, ',').collect();
            assert_eq!(f.len(), 4, "untraced.csv: {line}");
            Untraced {
                key: f[0].into(),
                value: f[1].into(),
                kind: f[2].into(),
                reason: f[3].into(),
            }
        })
        .collect()
}

/// Which steps exercise each class of each key: key -> class (or a size's value) -> step indices.
type Traced = BTreeMap<&'static str, BTreeMap<String, Vec<usize>>>;

fn traced(steps: &[Step]) -> Traced {
    let mut t = Traced::new();
    for key in KEYS {
        let by_class = t.entry(*key).or_default();
        if matches!(domain(key), Some(Domain::NoEffect)) {
            continue;
        }
        for (i, step) in steps.iter().enumerate() {
            for c in classes(key, step) {
                by_class.entry(c).or_default().push(i);
            }
        }
    }
    t
}

/// Whether a domain value is traced: a class by one step or more, a size as a whole at two values or more.
fn is_traced(d: &Domain, by_class: &BTreeMap<String, Vec<usize>>, value: &str) -> bool {
    match d {
        Domain::Classes(_) => by_class.get(value).is_some_and(|s| !s.is_empty()),
        Domain::Distinct => by_class.len() >= 2,
        Domain::NoEffect => false,
    }
}

/// The domain's values that need a trace or a reason.
fn values(d: &Domain) -> Vec<String> {
    match d {
        Domain::Classes(v) => v.clone(),
        Domain::Distinct | Domain::NoEffect => vec![WHOLE_KEY.to_string()],
    }
}

/// Every way the traces, `untraced.csv` and the domains disagree.
fn problems(t: &Traced, untraced: &[Untraced]) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for u in untraced {
        if !seen.insert((u.key.as_str(), u.value.as_str())) {
            out.push(format!("untraced.csv: {}={} listed twice", u.key, u.value));
        }
        if !KINDS.contains(&u.kind.as_str()) {
            out.push(format!(
                "untraced.csv: {}={}: unknown kind {}",
                u.key, u.value, u.kind
            ));
        }
        if u.reason.trim().is_empty() {
            out.push(format!(
                "untraced.csv: {}={} gives no reason",
                u.key, u.value
            ));
        }
        let Some(d) = domain(&u.key) else {
            out.push(format!("untraced.csv: {} is no key of the domains", u.key));
            continue;
        };
        if !values(&d).contains(&u.value) {
            out.push(format!(
                "untraced.csv: {}={} is not in the key's domain",
                u.key, u.value
            ));
        } else if is_traced(&d, &t[u.key.as_str()], &u.value) {
            out.push(format!(
                "untraced.csv: {}={} is traced now (stale)",
                u.key, u.value
            ));
        }
        if matches!(d, Domain::NoEffect) != (u.kind == "no_allocated_effect") {
            out.push(format!(
                "untraced.csv: {}: no_allocated_effect is the kind of gpu, embed, theme and alloc only",
                u.key
            ));
        }
    }
    for key in KEYS {
        let Some(d) = domain(key) else {
            out.push(format!("{key}: no value domain in tests/core/coverage.rs"));
            continue;
        };
        for v in values(&d) {
            let reason = untraced.iter().any(|u| u.key == *key && u.value == v);
            if !reason && !is_traced(&d, &t[key], &v) {
                out.push(format!("{key}={v}: neither traced nor in untraced.csv"));
            }
        }
    }
    let listed: BTreeSet<(&str, &str)> = untraced
        .iter()
        .filter(|u| u.kind == "not_yet")
        .map(|u| (u.key.as_str(), u.value.as_str()))
        .collect();
    let ratchet: BTreeSet<(&str, &str)> = NOT_YET.iter().copied().collect();
    for (k, v) in listed.difference(&ratchet) {
        out.push(format!(
            "{k}={v}: not_yet in untraced.csv but not in NOT_YET (the list only shrinks)"
        ));
    }
    for (k, v) in ratchet.difference(&listed) {
        out.push(format!(
            "{k}={v}: in NOT_YET but not a not_yet line of untraced.csv (traced? drop it)"
        ));
    }
    out
}

const HEADER: &str = "# Trace coverage

Generated by `tools/trace/coverage.sh` (the core test `coverage`, `tests/core/coverage.rs`); do not edit. For each
plan key, each value that changes memory differently: the traced CPU steps that exercise it, or why none does
(`untraced.csv`: `cuda_only`, `no_allocated_effect` or `not_yet`). A step exercises the value of each key the
engine reads for its plan (defaults its query leaves out included; not a full fine-tune's adapter keys, an
unquantized plan's quantizer keys or one GPU's sharding keys); `shard`, `wrap` and `gsync` count as the framework
resolves `auto`. Sizes (`r`, `b`, `s`, `chunk`, `vt`) are covered when traced
at two values or more; `*` stands for the whole key. The Llama-shaped files are family `llama`.
";

const TABLE: &str =
    "| Value | Steps | Files: steps (frameworks) | Families | Examples, or why untraced |
|---|---|---|---|---|
";

/// The whole table: the files, then one section per key in [`KEYS`] order.
fn render(steps: &[Step], t: &Traced, untraced: &[Untraced]) -> String {
    let mut s = format!("{HEADER}\n| File | Steps | Libraries |\n|---|---|---|\n");
    for (file, libs) in FILES {
        let n = steps.iter().filter(|st| st.file == *file).count();
        s += &format!("| `{file}` | {n} | {libs} |\n");
    }
    for key in KEYS {
        let Some(d) = domain(key) else { continue };
        s += &format!("\n## `{key}`\n\n{TABLE}");
        let by_class = &t[key];
        for v in shown(&d, by_class) {
            s += &match by_class.get(&v) {
                Some(ix) => traced_row(&v, ix, steps),
                None => untraced_row(key, &v, untraced),
            };
        }
        if !matches!(d, Domain::Classes(_)) && !is_traced(&d, by_class, WHOLE_KEY) {
            s += &untraced_row(key, WHOLE_KEY, untraced);
        }
    }
    s
}

/// The values a key's section lists: its classes, then any traced value outside them (a family no preset
/// has); a size's traced values in order.
fn shown(d: &Domain, by_class: &BTreeMap<String, Vec<usize>>) -> Vec<String> {
    match d {
        Domain::Classes(all) => {
            let extra = by_class.keys().filter(|c| !all.contains(c)).cloned();
            all.iter().cloned().chain(extra).collect()
        }
        Domain::Distinct => {
            let mut v: Vec<String> = by_class.keys().cloned().collect();
            v.sort_by(|a, b| {
                let n = |x: &str| x.parse::<f64>().unwrap_or(f64::MAX);
                n(a).total_cmp(&n(b))
            });
            v
        }
        Domain::NoEffect => Vec::new(),
    }
}

fn traced_row(value: &str, ix: &[usize], steps: &[Step]) -> String {
    // Per file, the steps and their frameworks, in FILES order.
    let mut files: Vec<String> = Vec::new();
    for (file, _) in FILES {
        let of_file: Vec<&Step> = ix
            .iter()
            .map(|i| &steps[*i])
            .filter(|s| s.file == *file)
            .collect();
        if of_file.is_empty() {
            continue;
        }
        let fws: BTreeSet<&str> = of_file.iter().map(|s| s.plan.framework.key()).collect();
        let fws: Vec<&str> = fws.into_iter().collect();
        files.push(format!("`{file}`: {} ({})", of_file.len(), fws.join(", ")));
    }
    let families: BTreeSet<&str> = ix.iter().map(|i| steps[*i].family.as_str()).collect();
    let families: Vec<&str> = families.into_iter().collect();
    let examples: Vec<&str> = ix.iter().take(3).map(|i| steps[*i].id.as_str()).collect();
    format!(
        "| {value} | {} | {} | {} | {} |\n",
        ix.len(),
        files.join("; "),
        families.join(", "),
        examples.join(", ")
    )
}

fn untraced_row(key: &str, value: &str, untraced: &[Untraced]) -> String {
    match untraced.iter().find(|u| u.key == key && u.value == value) {
        Some(u) => format!("| {value} | 0 | | | `{}`: {} |\n", u.kind, u.reason),
        None => format!("| {value} | 0 | | | no trace and no reason |\n"),
    }
}

#[test]
fn every_plan_key_value_is_traced_or_has_a_reason() {
    let steps = steps();
    let t = traced(&steps);
    let untraced = untraced();
    let text = render(&steps, &t, &untraced);
    let path = format!(
        "{}/tests/data/traced/COVERAGE.md",
        env!("CARGO_MANIFEST_DIR")
    );
    // tools/trace/coverage.sh: the trace scripts regenerate the table after their data.
    if std::env::var_os("UPDATE_COVERAGE").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let problems = problems(&t, &untraced);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "traced/COVERAGE.md differs from what the traces say: run tools/trace/coverage.sh"
    );
}
