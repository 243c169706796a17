//! The advisor: the set of changes that makes a plan fit, and the levers ranked by what they save.

use peakplan_core::advise::Cost;
use peakplan_core::gpu_choice::GpuCounts;
use peakplan_core::{estimate, estimate_on, preset_arch, presets, Kind, Phase};

use crate::util::plan;

#[test]
fn advisor_makes_the_13b_lora_plan_fit_a_4090() {
    let p = plan("model=llama-2-13b&method=lora&b=8&s=4096&gc=0&gpu=rtx-4090");
    let a = preset_arch(&p);
    let cap = presets::gpu("rtx-4090").unwrap().capacity_bytes;
    let advice = peakplan_core::advise::advise(a, &p, Some(cap));
    assert_eq!(advice.fits, Some(false));
    let fix = advice.to_fit.expect("a fitting set");
    assert_eq!(fix.fits, Some(true));
    // The suggested query reproduces the fitting plan.
    let again = plan(&fix.query);
    assert!(estimate(a, &again).device_bytes <= cap);
    assert_eq!(again, fix.plan);
    // Every lever saves memory, largest saving first.
    assert!(!advice.levers.is_empty());
    assert!(advice
        .levers
        .windows(2)
        .all(|w| w[0].saved_bytes >= w[1].saved_bytes));
    assert!(advice
        .levers
        .iter()
        .all(|l| l.saved_bytes > 0 && l.device_bytes < advice.device_bytes));
}

#[test]
fn advisor_prefers_free_changes_and_stays_quiet_when_nothing_helps() {
    // Eager attention at long context: switching to SDPA alone fits, and costs nothing.
    let p = plan("model=llama-3.2-1b&method=qlora&b=1&s=8192&attn=eager&gc=1&gpu=rtx-4090");
    let cap = presets::gpu("rtx-4090").unwrap().capacity_bytes;
    let advice = peakplan_core::advise::advise(preset_arch(&p), &p, Some(cap));
    let fix = advice.to_fit.expect("fits with a free change");
    assert_eq!(fix.cost, Cost::Free);
    // A plan that already fits gets no fitting set, but still its levers.
    let small = plan("model=llama-3.2-1b&method=qlora&b=1&s=512");
    let advice = peakplan_core::advise::advise(preset_arch(&small), &small, Some(cap));
    assert!(advice.to_fit.is_none() && advice.fits == Some(true));
}

#[test]
fn the_micro_batch_card_keeps_the_effective_batch_and_says_when_it_still_does_not_fit() {
    // 70B LoRA at b=4, ga=4 on a 24 GB card: halving the batch doubles the accumulation (b x ga stays 16), and
    // the card's plan, still far over 24 GB, says so.
    let p = plan("model=llama-2-70b&method=lora&b=4&ga=4&s=2048&gpu=rtx-4090");
    let cap = presets::gpu("rtx-4090").unwrap().capacity_bytes;
    let advice = peakplan_core::advise::advise(preset_arch(&p), &p, Some(cap));
    let card = advice
        .levers
        .iter()
        .find(|l| l.changes[0].key == "b")
        .expect("a micro-batch card");
    let ch = &card.changes[0];
    assert_eq!((ch.value.as_str(), ch.query().as_str()), ("2", "b=2&ga=8"));
    assert!(
        ch.label.contains("accumulate gradients over 8 steps"),
        "{}",
        ch.label
    );
    assert_eq!(card.plan.micro_batch * card.plan.grad_accumulation, 16);
    assert_eq!(plan(&card.query), card.plan);
    assert_eq!(card.fits, Some(false));
    // The accumulation keeps b x ga where the new batch divides it, and rounds up, saying "about", where not.
    let batch_change = |q: &str| {
        peakplan_core::advise::candidates(&plan(q))
            .into_iter()
            .find(|c| c.key == "b")
            .expect("a micro-batch change")
    };
    for (q, want, cost) in [
        ("b=6&ga=1", "b=3&ga=2", "same effective batch, more steps"),
        ("b=3&ga=3", "b=1&ga=9", "same effective batch, more steps"),
        (
            "b=5&ga=1",
            "b=2&ga=3",
            "about the same effective batch, more steps",
        ),
    ] {
        let b = batch_change(&format!("model=llama-3.2-1b&method=lora&s=1024&{q}"));
        assert_eq!((b.query().as_str(), b.cost_text), (want, cost), "{q}");
    }
}

#[test]
fn sharding_cards_appear_where_fsdp_holds_whole_or_frozen_gradients() {
    // Llama 3.1 8B LoRA on two 24 GB cards: which of the sharding cards (gsync=1, wrap=lora, shard=fsdp2) the
    // advisor lists, each only when it lowers the peak.
    let base = "model=llama-3.1-8b&method=lora&gpu=rtx-4090";
    for (q, want) in [
        // FSDP1 with blocks wrapped with their adapters, accumulating inside no_sync: all three.
        (
            "zero=3&gpus=2&shard=fsdp1&wrap=block&ga=4&gsync=0",
            &["gsync=1", "wrap=lora", "shard=fsdp2"][..],
        ),
        // One GPU: nothing is sharded, no card.
        ("zero=3&gpus=1&shard=fsdp1&wrap=block&ga=4&gsync=0", &[]),
        // No accumulation: no no_sync gradients to spare, the mixed units remain.
        (
            "zero=3&gpus=2&shard=fsdp1&wrap=block&ga=1",
            &["wrap=lora", "shard=fsdp2"],
        ),
        // The Trainer's own FSDP1 (PEFT's wrap policy) holds only the accumulation's LoRA gradients (84 MB),
        // which land in blocks the first micro-batch's backward left cached: syncing every micro-batch lowers
        // allocated memory, not what the allocator reserves, so no card.
        ("zero=3&gpus=2&fw=hf&ga=4", &[]),
        // torchtune's FSDP2 reduces every micro-batch already.
        ("zero=3&gpus=2&fw=torchtune&ga=4", &[]),
        // DeepSpeed partitions only trainable gradients and has no no_sync.
        ("zero=3&gpus=2&shard=deepspeed&ga=4&gsync=0", &[]),
        // Stage 1 does not shard gradients.
        ("gpus=2&zero=1&shard=fsdp1&wrap=block&ga=4", &[]),
    ] {
        let p = plan(&format!("{base}&{q}"));
        let cap = presets::gpu("rtx-4090").unwrap().capacity_bytes;
        let advice = peakplan_core::advise::advise(preset_arch(&p), &p, Some(cap));
        let mut got: Vec<String> = advice
            .levers
            .iter()
            .map(|l| l.changes[0].query())
            .filter(|c| {
                ["gsync=", "wrap=", "shard="]
                    .iter()
                    .any(|k| c.starts_with(k))
            })
            .collect();
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{q}");
    }
}

#[test]
fn each_sharding_card_names_its_mechanism() {
    let p =
        plan("model=llama-3.1-8b&method=lora&gpus=2&zero=3&shard=fsdp1&wrap=block&ga=4&gsync=0");
    for (key, words) in [
        ("gsync", "whole gradients"),
        ("wrap", "frozen weights gradients"),
        ("shard", "frozen weights get no gradients"),
    ] {
        let ch = peakplan_core::advise::candidates(&p)
            .into_iter()
            .find(|c| c.key == key)
            .unwrap_or_else(|| panic!("no {key} card"));
        assert!(ch.cost_text.contains(words), "{key}: {}", ch.cost_text);
    }
}

#[test]
fn advice_without_limits_is_the_advice_until_each_card_works_its_limits_out() {
    let p = plan("model=llama-2-13b&method=lora&b=8&s=4096&gpu=rtx-4090");
    let (arch, cap) = (preset_arch(&p), p.gpu.preset().capacity_bytes);
    let full = peakplan_core::advise::advise(arch, &p, Some(cap));
    let mut quick = peakplan_core::advise::advise_without_limits(arch, &p, Some(cap));
    assert!(full.to_fit.is_some() && !full.levers.is_empty());
    assert_eq!(
        (quick.to_fit.is_some(), quick.levers.len()),
        (true, full.levers.len())
    );
    for s in quick.to_fit.iter_mut().chain(quick.levers.iter_mut()) {
        assert!(!s.limits_known && s.max_batch.is_none() && s.max_seq.is_none());
        peakplan_core::advise::add_limits(arch, s, cap);
        assert!(s.limits_known);
    }
    // Worked out card by card, the advice is the whole advice.
    assert_eq!(quick, full);
    assert!(full.levers.iter().any(|s| s.max_batch.is_some()));
}

#[test]
fn the_advice_stepped_a_replay_at_a_time_is_the_whole_advice() {
    // The page runs a step per task, each at most one replay: the plan's figure, the fewest GPUs, each change, the
    // fitting set's candidates (and, where no set of four fits, the largest micro-batch's probes); stepped, the
    // advice is the one run at once.
    use peakplan_core::solve::Steps;
    for (q, least_steps) in [
        ("model=llama-2-13b&method=lora&b=8&s=4096&gpu=rtx-4090", 20),
        ("model=llama-3.1-70b&method=full&prec=amp_bf16&gc=1&b=1&s=2048&opt=adamw_torch&gpu=h100-80gb", 30),
        ("model=llama-3.1-8b&method=lora&b=4&s=2048&lens=grouped&lmean=300&lsd=200&gc=1&gpu=rtx-4090", 20),
        // No set of four changes fits: the cheap changes and the largest micro-batch that fits.
        ("model=llama-2-7b&method=lora&b=128&s=8192&gpu=a100-40gb&gc=1", 20),
        ("model=llama-3.1-8b&method=qlora&b=4&s=2048&gpu=rtx-4090", 10),
    ] {
        let p = plan(q);
        let (arch, cap) = (preset_arch(&p), p.gpu.preset().capacity_bytes);
        let mut search = peakplan_core::advise::AdviceSearch::new(&p, Some(cap));
        let mut steps = 0;
        let stepped = loop {
            steps += 1;
            assert!(steps < 5000, "{q}: did not end");
            if let Some(advice) = search.step(arch) {
                break advice;
            }
        };
        assert_eq!(stepped, peakplan_core::advise::advise_without_limits(arch, &p, Some(cap)), "{q}");
        assert!(steps >= least_steps, "{q}: {steps} steps");
    }
    let p = plan("model=llama-2-7b&method=lora&b=128&s=8192&gpu=a100-40gb&gc=1");
    let advice = peakplan_core::advise::advise_without_limits(
        preset_arch(&p),
        &p,
        Some(p.gpu.preset().capacity_bytes),
    );
    let to_fit = advice.to_fit.expect("a fitting set");
    assert!(
        to_fit
            .changes
            .iter()
            .any(|c| c.label.starts_with("Lower the micro-batch to")),
        "{to_fit:?}"
    );
}

#[test]
fn a_full_fine_tune_over_its_gpus_is_offered_cpu_offload_and_the_gpu_count_that_fits() {
    // Llama 3.1 70B full under ZeRO-3 on 8 H100s: the smallest change used to be LoRA, though offloading fits and
    // so does a larger count of the same GPUs, sharded the same way.
    let p = plan("model=llama-3.1-70b&method=full&prec=amp_bf16&gc=1&gpus=8&zero=3&gpu=h100-80gb");
    let (a, cap) = (
        preset_arch(&p),
        presets::gpu("h100-80gb").unwrap().capacity_bytes,
    );
    let advice = peakplan_core::advise::advise(a, &p, Some(cap));
    assert_eq!(advice.fits, Some(false));
    let fix = advice.to_fit.expect("a fitting set");
    assert_eq!(
        (fix.changes[0].query(), fix.cost),
        ("cpuoff=1".to_string(), Cost::Speed)
    );
    let lever = |key: &str| advice.levers.iter().find(|l| l.changes[0].key == key);
    let gpus = lever("gpus").expect("a GPU-count card");
    let n: u64 = gpus.changes[0].value.parse().unwrap();
    assert_eq!(Some(n), GpuCounts::new(a, &p).fewest(cap));
    assert!(n > 8 && gpus.cost == Cost::Hardware && gpus.fits == Some(true));
    // Each card's query reproduces its figure, and one GPU fewer does not fit.
    for card in [gpus, lever("cpuoff").expect("an offload card")] {
        assert_eq!(
            estimate_on(a, &plan(&card.query), cap).device_bytes,
            card.device_bytes
        );
    }
    let fewer = plan(
        &gpus
            .query
            .replace(&format!("gpus={n}"), &format!("gpus={}", n - 1)),
    );
    assert!(estimate_on(a, &fewer, cap).device_bytes > cap);
    // A plan that fits is offered no GPUs, and adapters no offload.
    let lora = plan("model=llama-3.1-8b&method=lora&gpu=h100-80gb");
    let advice = peakplan_core::advise::advise(preset_arch(&lora), &lora, Some(cap));
    assert!(advice
        .levers
        .iter()
        .all(|l| l.changes[0].key != "gpus" && l.changes[0].key != "cpuoff"));
}

/// The advisor's card whose first change sets `key`.
fn lever<'a>(
    advice: &'a peakplan_core::advise::Advice,
    key: &str,
) -> Option<&'a peakplan_core::advise::Suggestion> {
    advice.levers.iter().find(|l| l.changes[0].key == key)
}

#[test]
fn a_preference_plan_is_offered_precomputed_reference_log_probabilities() {
    // DPO, full fine-tuning of Llama 3.2 1B at b=2, s=1024: TRL's reference is a second copy of the model, and
    // its pass runs between the policy's forward and backward. Precomputed log-probabilities leave neither.
    let p = plan("model=llama-3.2-1b&method=full&b=2&s=1024&task=dpo&gpu=rtx-4090");
    let (a, cap) = (preset_arch(&p), p.gpu.preset().capacity_bytes);
    let advice = peakplan_core::advise::advise_without_limits(a, &p, Some(cap));
    let card = lever(&advice, "ref").expect("a precomputed-reference card");
    let ch = &card.changes[0];
    assert_eq!(
        (ch.query().as_str(), ch.cost),
        ("ref=precomputed", Cost::Free)
    );
    assert!(
        ch.label.contains("precompute_ref_log_probs"),
        "{}",
        ch.label
    );
    // The card's query reproduces its figure, with no reference copy and no reference pass.
    let again = plan(&card.query);
    assert_eq!(again, card.plan);
    let e = estimate_on(a, &again, cap);
    assert_eq!(e.device_bytes, card.device_bytes);
    assert_eq!(e.component(Kind::ReferenceWeights), 0);
    assert_eq!(e.component(Kind::ReferencePass), 0);
    assert!(e.phases_run().all(|ph| ph != Phase::Reference));
    // It saves at least the copy of the weights (2 bytes a parameter under mixed precision's 16-bit copy).
    let before = estimate_on(a, &p, cap);
    assert!(before.component(Kind::ReferenceWeights) > 0);
    assert!(card.saved_bytes >= before.component(Kind::ReferenceWeights));
    // Free: it is one of the plan's free changes, which the GPU table prices.
    let free = peakplan_core::advise::free_changes(a, &p);
    assert!(
        free.iter().any(|c| c.query() == "ref=precomputed"),
        "{free:?}"
    );
    // Under LoRA the reference is the base with the adapters off: no copy, but the pass goes.
    let lora = plan("model=llama-3.2-1b&method=lora&b=2&s=1024&task=kto&gpu=rtx-4090");
    let advice = peakplan_core::advise::advise_without_limits(preset_arch(&lora), &lora, Some(cap));
    if let Some(card) = lever(&advice, "ref") {
        assert_eq!(
            estimate_on(preset_arch(&lora), &plan(&card.query), cap).device_bytes,
            card.device_bytes
        );
    }
    assert!(peakplan_core::advise::candidates(&lora)
        .iter()
        .any(|c| c.query() == "ref=precomputed"));
    // Nothing to precompute where the reference already is, or where the task has none.
    for q in [
        "model=llama-3.2-1b&method=full&task=dpo&ref=precomputed",
        "model=llama-3.2-1b&method=full&task=dpo&ref=none",
        "model=llama-3.2-1b&method=full",
    ] {
        assert!(
            peakplan_core::advise::candidates(&plan(q))
                .iter()
                .all(|c| c.key != "ref"),
            "{q}"
        );
    }
}

#[test]
fn a_dpo_plan_is_offered_orpo_and_simpo_where_no_reference_lowers_the_peak() {
    // Full fine-tuning: DPO's reference is a second copy of the model; SimPO and ORPO need none.
    let p = plan("model=llama-3.2-1b&method=full&b=2&s=1024&task=dpo&ref=model&gpu=rtx-4090");
    let (a, cap) = (preset_arch(&p), p.gpu.preset().capacity_bytes);
    let before = estimate_on(a, &p, cap);
    let advice = peakplan_core::advise::advise_without_limits(a, &p, Some(cap));
    for task in ["simpo", "orpo"] {
        let card = advice
            .levers
            .iter()
            .find(|c| c.changes[0].key == "task" && c.changes[0].value == task)
            .unwrap_or_else(|| panic!("no {task} card: {:?}", advice.levers));
        // The explicit ref=model goes back to auto, which the task accepts, and the card's figure is the plan's.
        assert_eq!(card.changes[0].query(), format!("task={task}&ref=auto"));
        let after = estimate_on(a, &plan(&card.query), cap);
        assert_eq!(after.device_bytes, card.device_bytes, "{task}");
        assert!(after.device_bytes < before.device_bytes, "{task}");
        assert_eq!(after.component(Kind::ReferenceWeights), 0, "{task}");
    }
    // Where the task has no reference, already runs without one, or trains on unpaired data (KTO), there is
    // nothing to offer.
    for q in [
        "model=llama-3.2-1b&method=full&task=kto",
        "model=llama-3.2-1b&method=full&task=orpo",
        "model=llama-3.2-1b&method=full&task=dpo&ref=none",
        "model=llama-3.2-1b&method=full",
    ] {
        assert!(
            peakplan_core::advise::candidates(&plan(q))
                .iter()
                .all(|c| c.key != "task"),
            "{q}"
        );
    }
}

#[test]
fn shorter_prompts_shorten_the_sequence_and_keep_the_completions() {
    // DPO at s=1024 with TRL's default half of it as prompt: prompts cut to 256 make sequences of 768, whose
    // 512 completion tokens are as many as before.
    let p = plan("model=llama-3.2-1b&method=full&b=2&s=1024&task=dpo&gpu=rtx-4090");
    let (a, cap) = (preset_arch(&p), p.gpu.preset().capacity_bytes);
    let advice = peakplan_core::advise::advise_without_limits(a, &p, Some(cap));
    let card = lever(&advice, "prompt").expect("a shorter-prompt card");
    assert_eq!(card.changes[0].query(), "prompt=256&s=768");
    assert_eq!(card.cost, Cost::Quality);
    let again = plan(&card.query);
    assert_eq!(again, card.plan);
    assert_eq!((again.prompt_tokens(), again.seq_len), (256, 768));
    assert_eq!(again.completion_tokens(), p.completion_tokens());
    assert_eq!(estimate_on(a, &again, cap).device_bytes, card.device_bytes);
    assert!(card.device_bytes < advice.device_bytes);
    // A prompt set by hand: halved, with the sequence short by as much.
    let set = plan("model=llama-3.2-1b&method=lora&s=2048&prompt=1500&task=kto");
    let ch = peakplan_core::advise::candidates(&set)
        .into_iter()
        .find(|c| c.key == "prompt")
        .expect("a shorter-prompt change");
    assert_eq!(ch.query(), "prompt=750&s=1298");
    // Too short a prompt to cut, or no preference task: no card.
    for q in [
        "model=llama-3.2-1b&method=lora&s=1024&prompt=100&task=dpo",
        "model=llama-3.2-1b&method=lora&s=1024&prompt=500",
    ] {
        assert!(
            peakplan_core::advise::candidates(&plan(q))
                .iter()
                .all(|c| c.key != "prompt"),
            "{q}"
        );
    }
}

#[test]
fn halving_the_sequence_halves_a_prompt_set_by_hand_so_the_card_link_parses() {
    // prompt=900 of s=2048: halving s to 1024 alone would leave a link that refuses its prompt.
    let p = plan("model=llama-3.2-1b&method=lora&s=2048&prompt=900&task=dpo&gpu=t4-16gb");
    let ch = peakplan_core::advise::candidates(&p)
        .into_iter()
        .find(|c| c.key == "s")
        .expect("a sequence change");
    assert_eq!(ch.query(), "s=1024&prompt=450");
    let (a, cap) = (preset_arch(&p), p.gpu.preset().capacity_bytes);
    let advice = peakplan_core::advise::advise_without_limits(a, &p, Some(cap));
    // Every card's link parses without a diagnostic (`plan` checks) and reproduces its figure; no set of
    // changes sets one key twice.
    for s in advice.to_fit.iter().chain(advice.levers.iter()) {
        assert_eq!(
            estimate_on(a, &plan(&s.query), cap).device_bytes,
            s.device_bytes,
            "{}",
            s.query
        );
        let keys: Vec<&str> = s
            .changes
            .iter()
            .flat_map(|c| c.settings().map(|(k, _)| k))
            .collect();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
    }
}

#[test]
fn the_gpu_table_prices_a_preference_plan_with_its_reference() {
    // The GPU table and `peakplan gpus` read the core's estimates: a DPO plan needs more than its SFT plan on
    // every GPU, and the fewest GPUs that hold it count the reference copy.
    let dpo = plan("model=llama-3.2-1b&method=full&b=2&s=1024&task=dpo");
    let sft = plan("model=llama-3.2-1b&method=full&b=2&s=1024");
    let a = preset_arch(&dpo);
    let (rows_dpo, rows_sft) = (
        peakplan_core::gpu_choice::gpu_fits_without_limits(a, &dpo),
        peakplan_core::gpu_choice::gpu_fits_without_limits(a, &sft),
    );
    assert_eq!(rows_dpo.len(), rows_sft.len());
    for (d, s) in rows_dpo.iter().zip(&rows_sft) {
        assert_eq!(d.id, s.id);
        assert_eq!(
            d.device_bytes,
            estimate_on(a, &dpo, d.capacity_bytes).device_bytes
        );
        assert!(d.device_bytes > s.device_bytes, "{}", d.id);
        assert!(
            d.gpus_needed >= s.gpus_needed || d.gpus_needed.is_none(),
            "{}",
            d.id
        );
        // Where the free changes need fewer GPUs, precomputing the reference is one of them.
        if d.gpus_needed_with_free_changes.is_some() {
            assert!(
                d.free_changes
                    .iter()
                    .any(|c| c.query() == "ref=precomputed"),
                "{}: {:?}",
                d.id,
                d.free_changes
            );
        }
    }
    assert!(rows_dpo
        .iter()
        .any(|r| r.gpus_needed_with_free_changes.is_some()));
    assert!(estimate(a, &dpo).component(Kind::ReferenceWeights) > 0);
}
