//! The task controls' logic (plain Rust, tested natively): the training task's options from the core's
//! vocabulary, the reference sources a plan can take, the prompt length's bounds, why a control is off, and the
//! rules between keys checked after every edit, as the core checks a link.

use peakplan_core::plan::{Checkpointing, Framework, Generation, Plan, Reference, Task};
use peakplan_core::Diagnostic;

/// A task's words in the selector: its name and what it trains on (a task the core adds must be named here).
fn task_label(task: Task) -> &'static str {
    match task {
        Task::Sft => "SFT (supervised)",
        Task::Dpo => "DPO (preference pairs)",
        Task::Orpo => "ORPO (pairs, no reference)",
        Task::Simpo => "SimPO (pairs, no reference)",
        Task::Cpo => "CPO (pairs, no reference)",
        Task::Kto => "KTO (unpaired, TRL)",
        Task::Grpo => "GRPO (generates, then trains; TRL)",
    }
}

/// The task selector's options, `(key, label)`, in the core's order (`Task::ALL`, whose spellings are
/// `keyword_spellings("task")`; the enum's list keeps the key table's lookup out of the page's wasm).
pub fn task_options() -> Vec<(&'static str, &'static str)> {
    Task::ALL
        .iter()
        .map(|t| (t.key(), task_label(*t)))
        .collect()
}

/// The reference selector's options, `(key, label)`, in the core's order. `auto` is what TRL does for the plan
/// (the select's hint says which); `adapters_off` under full fine-tuning is refused by the core, which says why.
pub fn reference_options() -> Vec<(&'static str, &'static str)> {
    Reference::ALL
        .iter()
        .map(|r| {
            let label = match r {
                Reference::Auto => "auto (what TRL does)",
                Reference::Model => "a second copy of the model",
                Reference::AdaptersOff => "the base, adapters off (LoRA, QLoRA)",
                Reference::Precomputed => "precomputed log-probabilities",
                Reference::None => "none (no reference term)",
            };
            (r.key(), label)
        })
        .collect()
}

/// The generation selector's options, `(key, label)`, in the core's order.
pub fn generation_options() -> Vec<(&'static str, &'static str)> {
    Generation::ALL
        .iter()
        .map(|g| {
            let label = match g {
                Generation::Hf => "the policy's generate (transformers)",
                Generation::VllmColocate => "vLLM in the training process (colocate)",
                Generation::VllmServer => "a vLLM server on other GPUs",
            };
            (g.key(), label)
        })
        .collect()
}

/// Why the task selector is off, if it is: preference tasks are planned as TRL's trainers run them, over
/// transformers.
pub fn task_off_reason(plan: &Plan) -> Option<&'static str> {
    (plan.framework != Framework::Hf).then_some(
        "Preference tasks are planned as TRL's trainers run them, over transformers: choose the HF framework profile",
    )
}

/// Whether the reference source and the prompt length show: only for a preference task.
pub fn shows_preference_keys(plan: &Plan) -> bool {
    plan.task != Task::Sft
}

/// The prompt box: the prompt tokens the plan uses (`auto` resolved: half of `s`), its largest accepted value
/// (`s` - 1), and whether it is `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptBox {
    pub tokens: u64,
    pub max: u64,
    pub auto: bool,
    /// The task scores every position (ORPO, SimPO, CPO: the full logits), so the prompt moves no figure.
    pub scored_whole: bool,
}

impl PromptBox {
    pub fn of(plan: &Plan) -> Self {
        PromptBox {
            tokens: plan.prompt_tokens(),
            max: plan.seq_len.saturating_sub(1).max(1),
            auto: plan.prompt_tokens.is_none(),
            scored_whole: plan.task.full_logits(),
        }
    }

    /// The line under the box: prompt and completion tokens of each sequence (and, where every position is
    /// scored, that the split changes no memory).
    pub fn words(&self, seq_len: u64) -> String {
        let completion = seq_len.saturating_sub(self.tokens);
        let auto = if self.auto { " (auto: half of s)" } else { "" };
        let whole = if self.scored_whole {
            "; every position is scored, so the split changes no memory"
        } else {
            ""
        };
        format!(
            "{} prompt + {completion} completion tokens{auto}; at most {}{whole}",
            self.tokens, self.max
        )
    }
}

/// Under GRPO with a completion length and a prompt set, `s` is their sum (the core's rule): an edit that moved `s`
/// (the slider) moves the completion instead, the prompt staying, so that the edit holds rather than snapping back.
pub fn follow_sequence(plan: &mut Plan, seq_before: u64) {
    if plan.task != Task::Grpo || plan.seq_len == seq_before || plan.completion_max.is_none() {
        return;
    }
    if let Some(prompt) = plan.prompt_tokens.filter(|&p| p < plan.seq_len) {
        plan.completion_max = Some(plan.seq_len - prompt);
    }
}

/// Whether any key the rules between keys read differs from its default: only then can an edit break one.
fn may_break_a_rule(plan: &Plan) -> bool {
    plan.task != Task::Sft
        || plan.reference != Reference::Auto
        || plan.prompt_tokens.is_some()
        || plan.framework == Framework::Unsloth
        || plan.checkpointing == Checkpointing::Offload
        || plan.len_max.is_some()
}

/// Applies the core's rules between keys after an edit, as it applies them to a link: each key that breaks one
/// (a task off `fw=hf` once the framework changed, `ref=adapters_off` once the method is full, a prompt not
/// below a shortened sequence) goes back to its default, and its message is returned. A plain SFT plan is
/// left as it is without a look.
pub fn settle(plan: &mut Plan) -> Vec<Diagnostic> {
    if !may_break_a_rule(plan) {
        return Vec::new();
    }
    let parsed = Plan::parse_query(&plan.to_query());
    if parsed.diagnostics.is_empty() {
        // A rule may also derive a key without refusing any: GRPO's `s` is its prompt and completion.
        plan.seq_len = parsed.plan.seq_len;
        return Vec::new();
    }
    // The link holds every key (a Hub model by its id), so the parsed plan is this one with the keys reset.
    *plan = parsed.plan;
    parsed.diagnostics
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::plan::{keyword_spellings, Method};

    fn plan(q: &str) -> Plan {
        let parsed = Plan::parse_query(q);
        assert!(
            parsed.diagnostics.is_empty(),
            "{q}: {:?}",
            parsed.diagnostics
        );
        parsed.plan
    }

    #[test]
    fn the_task_options_are_the_core_spellings_in_its_order() {
        let keys: Vec<&str> = task_options().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, keyword_spellings("task").unwrap());
        assert_eq!(keys[0], "sft");
        assert!(task_options().iter().all(|(_, label)| !label.is_empty()));
    }

    #[test]
    fn the_reference_options_are_the_core_spellings_each_with_words() {
        let keys: Vec<&str> = reference_options().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, keyword_spellings("ref").unwrap());
        assert!(reference_options()
            .iter()
            .all(|(k, label)| !label.is_empty() && label != k));
    }

    #[test]
    fn the_task_selector_says_why_it_is_off_and_the_preference_keys_show_for_a_preference_task() {
        assert!(task_off_reason(&plan("fw=torchtune")).is_some_and(|w| w.contains("HF")));
        assert_eq!(task_off_reason(&plan("fw=hf")), None);
        assert!(!shows_preference_keys(&plan("")));
        assert!(shows_preference_keys(&plan("task=kto")));
    }

    #[test]
    fn the_prompt_box_resolves_auto_and_is_bounded_by_the_sequence() {
        let b = PromptBox::of(&plan("task=dpo&s=1024"));
        assert_eq!(
            b,
            PromptBox {
                tokens: 512,
                max: 1023,
                auto: true,
                scored_whole: false
            }
        );
        assert_eq!(
            b.words(1024),
            "512 prompt + 512 completion tokens (auto: half of s); at most 1023"
        );
        // ORPO scores the full logits: the box says the split moves nothing.
        assert!(PromptBox::of(&plan("task=orpo&s=1024"))
            .words(1024)
            .ends_with("at most 1023; every position is scored, so the split changes no memory"));
        let b = PromptBox::of(&plan("task=dpo&s=1024&prompt=1000"));
        assert_eq!((b.tokens, b.auto), (1000, false));
    }

    #[test]
    fn an_edit_that_breaks_a_rule_between_keys_resets_that_key_and_says_why() {
        // A shorter sequence than the prompt: the prompt goes back to auto.
        let mut p = plan("task=dpo&s=2048&prompt=1500");
        p.seq_len = 1024;
        let said = settle(&mut p);
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].key, "prompt");
        assert!(said[0].message.contains("leaves no completion tokens"));
        assert_eq!((p.prompt_tokens, p.seq_len), (None, 1024));
        // Another framework: the task goes back to SFT.
        let mut p = plan("task=kto&method=lora");
        p.framework = Framework::Torchtune;
        let said = settle(&mut p);
        assert_eq!(said[0].key, "task");
        assert_eq!((p.task, p.framework), (Task::Sft, Framework::Torchtune));
        // Full fine-tuning has no adapters to switch off.
        let mut p = plan("task=dpo&method=lora&ref=adapters_off");
        p.method = Method::Full;
        assert_eq!(settle(&mut p)[0].key, "ref");
        assert_eq!(p.reference, Reference::Auto);
        // A plan that keeps every rule, and a plain SFT plan, stay as they are.
        for q in ["task=dpo&s=2048&prompt=1500&method=full&b=2", "b=3&s=512"] {
            let mut p = plan(q);
            let before = p.clone();
            assert!(settle(&mut p).is_empty());
            assert_eq!(p, before);
        }
    }

    #[test]
    fn moving_s_under_grpo_moves_the_completion_and_the_prompt_stays() {
        let mut p = plan("task=grpo&prompt=256&completion=1024");
        p.seq_len = 2048;
        follow_sequence(&mut p, 1280);
        assert!(settle(&mut p).is_empty());
        assert_eq!(
            (p.seq_len, p.prompt_tokens(), p.completion_tokens()),
            (2048, 256, 1792)
        );
        // Below the prompt the rule keeps the sequence: the edit cannot hold.
        let mut p = plan("task=grpo&prompt=256&completion=1024");
        p.seq_len = 200;
        follow_sequence(&mut p, 1280);
        settle(&mut p);
        assert_eq!(p.seq_len, 1280);
    }

    #[test]
    fn a_grpo_completion_typed_with_a_prompt_makes_the_sequence_without_a_word() {
        let mut p = plan("task=grpo&prompt=256&completion=1024");
        p.completion_max = Some(2048);
        assert!(settle(&mut p).is_empty());
        assert_eq!(
            (p.seq_len, p.prompt_tokens(), p.completion_tokens()),
            (2304, 256, 2048)
        );
    }
}
