//! GRPO as a plan (`task=grpo` with `gens`, `completion`, `beta`, `gen`, `vmem`): the rules between its keys, the
//! generation round as a phase of its own, and how its figures move with each key.

use peakplan_core::plan::{Plan, Task};
use peakplan_core::{Kind, Phase};

use crate::util::{check_diagnostics as check, est, plan};

const QWEN: &str = "model=qwen2.5-1.5b&method=lora&task=grpo&b=1&gpu=rtx-4090";

#[test]
fn bad_grpo_values_get_one_line_each_and_keep_the_rest() {
    for (q, key, part) in [
        ("task=grpo&gens=1", "gens", "accepted: integers 2 to 4096"),
        ("task=grpo&beta=-1", "beta", "accepted: 0 to 1000000"),
        ("task=grpo&beta=x", "beta", "is not a number"),
        (
            "task=grpo&gen=sglang",
            "gen",
            "accepted: hf, vllm_colocate, vllm_server",
        ),
        ("task=grpo&vmem=0", "vmem", "accepted: above 0 to 1"),
        ("task=grpo&vmem=1.5", "vmem", "out of range"),
        (
            "task=grpo&b=3&gens=2&ga=4",
            "ga",
            "does not divide the 6 completions",
        ),
        (
            "task=grpo&s=1024&completion=4096",
            "completion",
            "leaves no prompt tokens in s=1024",
        ),
        ("task=grpo&ref=precomputed", "ref", "follows beta"),
    ] {
        let p = check(&format!("{q}&r=32"), &[(key, part)]);
        assert_eq!((p.task, p.rank), (Task::Grpo, 32), "{q}");
    }
}

#[test]
fn completion_with_a_prompt_makes_the_sequence_and_links_keep_it() {
    let p = plan("task=grpo&prompt=256&completion=1024&s=4096");
    assert_eq!(
        (p.prompt_tokens(), p.completion_tokens(), p.seq_len),
        (256, 1024, 1280)
    );
    // Completion alone leaves the prompt what `s` has beside it.
    let p = plan("task=grpo&completion=1024&s=1536");
    assert_eq!((p.prompt_tokens(), p.completion_tokens()), (512, 1024));
    let again = plan(&p.to_query());
    assert_eq!(again, p);
}

#[test]
fn the_generation_round_is_a_phase_with_its_cache_and_a_grpo_plan_needs_more_than_sft() {
    let q = format!("{QWEN}&gens=8&prompt=256&completion=1024");
    let e = est(&q);
    assert!(e.phases_run().any(|p| p == Phase::Generation), "{q}");
    // Qwen2.5-1.5B: 28 layers, 2 key/value heads of 128: 8 sequences of 1,279 positions in bf16.
    let cache = 2 * 28 * 8 * 256 * 2 * 1279;
    assert_eq!(e.component(Kind::GenerationCache), cache, "{q}");
    assert!(e.phase(Phase::Generation).total() > e.phase(Phase::Load).total());
    let sft = est("model=qwen2.5-1.5b&method=lora&b=8&s=1280&gpu=rtx-4090");
    assert!(
        e.peak_allocated_bytes > sft.peak_allocated_bytes - sft.component(Kind::Logits),
        "{q}"
    );
    // An SFT plan shows no generation phase, and its JSON keys stay what they were.
    assert!(!sft.phases_run().any(|p| p == Phase::Generation));
    assert_eq!(sft.component(Kind::GenerationCache), 0);
}

#[test]
fn the_peak_grows_with_generations_and_completion_and_a_reference_adds_to_full_fine_tuning() {
    let at = |extra: &str| est(&format!("{QWEN}&prompt=256&{extra}"));
    let mut last = 0;
    for gens in [2, 4, 8, 16, 32] {
        let e = at(&format!("gens={gens}&completion=1024"));
        assert!(e.peak_allocated_bytes > last, "gens={gens}");
        last = e.peak_allocated_bytes;
    }
    let mut last = 0;
    for completion in [256, 512, 1024, 2048, 4096] {
        let e = at(&format!("gens=8&completion={completion}"));
        assert!(e.peak_allocated_bytes > last, "completion={completion}");
        last = e.peak_allocated_bytes;
    }
    let full = |beta: &str| {
        est(&format!(
            "model=qwen2.5-1.5b&method=full&task=grpo&b=1&gens=8&prompt=256&completion=1024&beta={beta}"
        ))
    };
    let (without, with) = (full("0"), full("0.04"));
    assert_eq!(without.component(Kind::ReferenceWeights), 0);
    assert!(with.component(Kind::ReferenceWeights) > 0);
    assert!(without.peak_allocated_bytes < with.peak_allocated_bytes);
    // Under LoRA the reference is the base with its adapters off: a pass, no copy.
    let lora = at("gens=8&completion=1024&beta=0.04");
    assert_eq!(lora.component(Kind::ReferenceWeights), 0);
    assert!(lora.component(Kind::ReferencePass) > 0);
}

#[test]
fn a_colocated_vllm_takes_its_share_of_the_card_and_a_server_generates_elsewhere() {
    let base = format!("{QWEN}&gens=8&prompt=256&completion=1024");
    let card = plan(&base).gpu.preset().capacity_bytes;
    let colocated = est(&format!("{base}&gen=vllm_colocate&vmem=0.3"));
    let share = colocated.component(Kind::VllmShare);
    assert_eq!(share, (0.3 * card as f64) as u64);
    assert_eq!(colocated.component(Kind::GenerationCache), 0);
    assert!(Kind::VllmShare.formula().contains("gpu_memory_utilization"));
    // It is held at every phase.
    for p in colocated.phases_run() {
        assert!(colocated.phase(p).other >= share, "{p:?}");
    }
    let server = est(&format!("{base}&gen=vllm_server"));
    assert_eq!(server.component(Kind::VllmShare), 0);
    assert_eq!(server.component(Kind::GenerationCache), 0);
    let hf = est(&base);
    assert!(server.peak_allocated_bytes <= hf.peak_allocated_bytes);
}

#[test]
fn a_grpo_plan_exports_a_grpo_script_and_refuses_the_configs_it_cannot_write() {
    use peakplan_core::interop::{export, export_refused, ExportFormat};
    let p = plan("model=qwen2.5-1.5b&method=lora&task=grpo&b=2&gens=4&ga=2&prompt=128&completion=256&beta=0.04");
    for f in [ExportFormat::Axolotl, ExportFormat::Torchtune] {
        let why = export_refused(&p, f).unwrap_or_default();
        assert!(
            why.contains("task=grpo") && why.contains(f.label()),
            "{why}"
        );
        assert_eq!(export_refused(&plan("task=dpo"), f), None);
    }
    assert_eq!(export_refused(&p, ExportFormat::Python), None);
    assert_eq!(export_refused(&p, ExportFormat::Deepspeed), None);
    let script = export(&p, p.model.arch(), ExportFormat::Python);
    for want in [
        "GRPOTrainer(",
        "MICRO_BATCH = 4  # b: per_device_train_batch_size",
        "GENERATIONS = 4",
        "COMPLETION_TOKENS = 256",
        "PROMPT_TOKENS = 128",
        "BETA = 0.04",
        "USE_VLLM = False",
        "reward_funcs=length_reward",
        "gradient_accumulation_steps=2",
    ] {
        assert!(script.contains(want), "{want} missing");
    }
    assert!(
        !script.contains("chosen"),
        "a preference dataset in a GRPO script"
    );
}

#[test]
fn vllms_share_is_of_each_card_and_matches_what_vllm_logs() {
    // vLLM's worker log on an 80 GB card at gpu_memory_utilization=0.90 (vllm-project/vllm#11743): "total GPU
    // memory 79.33GiB x gpu_memory_utilization (0.90) = 71.39GiB" (its total is torch.cuda.mem_get_info's).
    let h100 =
        est("model=qwen2.5-1.5b&method=lora&task=grpo&gen=vllm_colocate&vmem=0.9&gpu=h100-80gb");
    let share_gib = h100.component(Kind::VllmShare) as f64 / (1u64 << 30) as f64;
    assert!((share_gib / 71.39 - 1.0).abs() < 0.01, "{share_gib} GiB");
    // The GPU table prices each row with vLLM's share of that row's card.
    let p =
        plan("model=qwen2.5-1.5b&method=lora&task=grpo&gen=vllm_colocate&vmem=0.3&gpu=rtx-4090");
    let arch = p.model.arch();
    let rows = peakplan_core::gpu_choice::gpu_fits_without_limits(arch, &p);
    let device = |id: &str| {
        rows.iter()
            .find(|r| r.id == id)
            .map(|r| (r.device_bytes, r.capacity_bytes))
            .unwrap()
    };
    let ((small, small_cap), (big, big_cap)) = (device("rtx-4090"), device("h100-80gb"));
    let grown = big as f64 - small as f64;
    let share_grown = 0.3 * (big_cap as f64 - small_cap as f64);
    assert!(
        (grown / share_grown - 1.0).abs() < 0.05,
        "{grown} vs {share_grown}"
    );
}

#[test]
fn grpo_levers_cut_the_round_and_each_link_parses_clean() {
    let p = plan(&format!(
        "{QWEN}&gens=8&prompt=256&completion=1024&beta=0.04&gen=vllm_colocate&vmem=0.3&gc=0"
    ));
    let changes = peakplan_core::advise::candidates(&p);
    let keys: Vec<&str> = changes.iter().map(|c| c.key).collect();
    for want in ["gens", "ga", "completion", "beta", "gen", "vmem", "gc"] {
        assert!(keys.contains(&want), "{want} missing from {keys:?}");
    }
    // Levers of other tasks that GRPO refuses or that mean something else here.
    for not in ["ref", "b", "s", "prompt"] {
        assert!(!keys.contains(&not), "{not} in {keys:?}");
    }
    for ch in &changes {
        let parsed = Plan::parse_query_over(p.clone(), &ch.query());
        assert!(
            parsed.diagnostics.is_empty(),
            "{}: {:?}",
            ch.query(),
            parsed.diagnostics
        );
    }
    let completion = changes.iter().find(|c| c.key == "completion").unwrap();
    let cut = Plan::parse_query_over(p.clone(), &completion.query()).plan;
    assert_eq!((cut.prompt_tokens(), cut.completion_tokens()), (256, 512));
    // The advisor keeps the cards that lower the peak: some do on a 24 GB card.
    let advice =
        peakplan_core::advise::advise(p.model.arch(), &p, Some(p.gpu.preset().capacity_bytes));
    assert!(!advice.levers.is_empty());
}
