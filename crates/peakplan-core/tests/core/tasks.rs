//! Preference tasks as plans (`task`, `ref`, `prompt`): the rules between their keys, what each task adds over
//! supervised fine-tuning, and the reference pass as a phase of its own.

use peakplan_core::plan::{Plan, Reference, Task};
use peakplan_core::{Kind, Phase};

use crate::util::{check_diagnostics as check, est, plan};

#[test]
fn bad_task_keys_get_one_line_each_and_keep_the_rest() {
    let p = check(
        "task=banana&b=4",
        &[(
            "task",
            "task=`banana` is not accepted; accepted: sft, dpo, orpo, simpo, cpo, kto, grpo",
        )],
    );
    assert_eq!((p.task, p.micro_batch), (Task::Sft, 4));
    // ORPO, SimPO and CPO compare with no reference.
    for task in ["orpo", "simpo", "cpo"] {
        let p = check(
            &format!("task={task}&ref=model"),
            &[("ref", &format!("ref=model does not apply to task={task}"))],
        );
        assert_eq!((p.task.key(), p.reference), (task, Reference::Auto));
    }
    // A reference where the task compares with none, adapters to switch off in a full fine-tune.
    check(
        "ref=model",
        &[("ref", "ref=model does not apply to task=sft")],
    );
    let p = check(
        "method=full&task=kto&ref=adapters_off",
        &[("ref", "needs adapters to switch off")],
    );
    assert_eq!(p.reference, Reference::Auto);
    // The prompt must leave completion tokens, whichever key comes first.
    for q in ["task=dpo&prompt=2048&s=2048", "task=dpo&s=2048&prompt=5000"] {
        let p = check(
            q,
            &[(
                "prompt",
                "leaves no completion tokens in s=2048; accepted: 1 to 2047",
            )],
        );
        assert_eq!(p.prompt_tokens, None);
    }
    check(
        "task=dpo&prompt=-3",
        &[("prompt", "out of range; accepted: integers 1 to")],
    );
    check(
        "task=dpo&fw=torchtune",
        &[(
            "task",
            "as TRL's trainers run it, over transformers (fw=hf)",
        )],
    );
    // A good plan round-trips, writing the new keys only where set.
    let p = check("task=dpo&ref=precomputed&prompt=300&s=1024", &[]);
    assert_eq!(Plan::parse_query(&p.to_query()).plan, p);
    assert!(!Plan::default().to_query().contains("task="));
}

#[test]
fn each_task_adds_what_it_runs() {
    let base = "model=llama-3.2-1b&b=2&s=1024";
    let sft = est(&format!("{base}&method=full"));
    let dpo = est(&format!("{base}&method=full&task=dpo"));
    // Full fine-tuning's reference is a second copy of the model: at least 1.8 B a parameter more.
    let params = dpo.total_params as f64;
    let added = dpo.peak_allocated_bytes as f64 - sft.peak_allocated_bytes as f64;
    assert!(
        added >= 1.8 * params,
        "DPO adds {added} B over {params} parameters"
    );
    assert_eq!(
        dpo.component(Kind::ReferenceWeights),
        sft.component(Kind::BaseWeights)
    );
    // Precomputed log-probabilities need no copy and no pass.
    let pre = est(&format!("{base}&method=full&task=dpo&ref=precomputed"));
    assert_eq!(pre.component(Kind::ReferenceWeights), 0);
    assert_eq!(pre.phase(Phase::Reference).total(), 0);
    // Under LoRA each task needs more than SFT's step but its logits: TRL's log-probability head never builds
    // them (so against the Trainer's standard loss, which keeps 12 B a logit, a preference step can need less),
    // and adds the doubled batch (DPO) and the reference pass.
    let lora = est(&format!("{base}&method=lora"));
    for task in ["dpo", "kto"] {
        let e = est(&format!("{base}&method=lora&task={task}"));
        let sft_but_logits = lora.peak_allocated_bytes - lora.component(Kind::Logits);
        assert!(e.peak_allocated_bytes > sft_but_logits, "{task}");
        assert_eq!(
            e.component(Kind::ReferenceWeights),
            0,
            "{task}: adapters switched off"
        );
        assert!(
            e.phase(Phase::Reference).total() > e.phase(Phase::Forward).total(),
            "{task}"
        );
        assert!(
            e.component(Kind::LogProbs) > 0 && e.component(Kind::Logits) == 0,
            "{task}"
        );
    }
    // The paired batch: the rejected half keeps what the chosen half keeps.
    let dpo = est(&format!("{base}&method=lora&task=dpo"));
    let chosen_half = [
        Kind::SavedActivations,
        Kind::AttentionScores,
        Kind::Checkpoints,
    ]
    .iter()
    .map(|k| dpo.component(*k))
    .sum::<u64>();
    assert_eq!(dpo.component(Kind::PairedBatch), chosen_half);
    assert_eq!(
        est(&format!("{base}&method=lora&task=kto")).component(Kind::PairedBatch),
        0
    );
}

#[test]
fn orpo_simpo_and_cpo_keep_the_doubled_batchs_full_logits() {
    let base = "model=llama-3.2-1b&b=2&s=1024&method=lora";
    let sft = est(base);
    let logits = |e: &peakplan_core::Estimate| e.component(Kind::Logits);
    let [orpo, simpo, cpo] = ["orpo", "simpo", "cpo"].map(|t| est(&format!("{base}&task={t}")));
    for (task, e) in [("orpo", &orpo), ("simpo", &simpo), ("cpo", &cpo)] {
        // Each needs more than SFT's step but its logits: the chosen and rejected sequences run as one batch,
        // every logit kept, but in 16-bit, where the Trainer's loss upcasts SFT's to fp32 (12 B a logit at its
        // peak, 10 B here with the cross-entropy's 2.5 x 16-bit), so the whole step can come out alike.
        let sft_but_logits = sft.peak_allocated_bytes - logits(&sft);
        assert!(
            e.peak_allocated_bytes > sft_but_logits + logits(&sft) / 2,
            "{task}"
        );
        assert!(logits(e) > 0, "{task}");
        assert_eq!(e.component(Kind::LogProbs), 0, "{task}");
        // No reference: no second copy, no reference pass.
        assert_eq!(e.component(Kind::ReferenceWeights), 0, "{task}");
        assert_eq!(e.phase(Phase::Reference).total(), 0, "{task}");
        let chosen_half = [
            Kind::SavedActivations,
            Kind::AttentionScores,
            Kind::Checkpoints,
        ]
        .iter()
        .map(|k| e.component(*k))
        .sum::<u64>();
        assert_eq!(e.component(Kind::PairedBatch), chosen_half, "{task}");
    }
    // ORPO and CPO add a cross-entropy over the chosen half, whose backward holds 2.5 x the logits; SimPO's
    // peak holds the logits and their shifted gradient.
    assert_eq!(logits(&orpo), logits(&cpo));
    assert!(logits(&orpo) > logits(&simpo));
    // The whole sequence is scored, so the prompt's length changes nothing.
    assert_eq!(
        est(&format!("{base}&task=orpo&prompt=100")).peak_allocated_bytes,
        est(&format!("{base}&task=orpo&prompt=900")).peak_allocated_bytes
    );
}

#[test]
fn fewer_completion_tokens_score_less() {
    let head = |prompt: u64| {
        est(&format!("b=1&s=2048&method=lora&task=dpo&prompt={prompt}")).component(Kind::LogProbs)
    };
    assert!(head(1536) < head(512));
    // `auto` is half of s.
    assert_eq!(
        head(1024),
        est("b=1&s=2048&method=lora&task=dpo").component(Kind::LogProbs)
    );
    assert_eq!(plan("s=7&task=dpo").completion_tokens(), 4);
}
