//! The training task beside the method: SFT or a preference objective, and for a preference task where its
//! reference log-probabilities come from and how many of each sequence's tokens are prompt.

use crate::panels::controls::{show_plan_value, AutoInput, KeySelect, NumberBox};
use crate::state::{ctx, memo};
use crate::task::{
    generation_options, reference_options, shows_preference_keys, task_off_reason, task_options,
    PromptBox,
};
use leptos::prelude::*;
use peakplan_core::plan::{Generation, Task};

/// The task selector (`data-testid="task"`), off with its reason outside the HF framework profile; under a
/// preference task, the reference source (`ref`) and the prompt tokens (`prompt`) below it.
#[component]
pub(crate) fn TaskControls() -> impl IntoView {
    let c = ctx();
    let off = memo(move || c.steady.with(task_off_reason));
    let preference = memo(move || c.steady.with(shows_preference_keys));
    let grpo = memo(move || c.steady.with(|p| p.task == Task::Grpo));
    // ORPO, SimPO and CPO compare with no reference; GRPO's follows beta.
    let reference = memo(move || c.steady.with(|p| p.task.reference_chosen_by_key()));
    view! {
        <KeySelect label="Task" key="task" testid="task" options=task_options() disabled=off
            hint="Supervised fine-tuning, a preference objective as TRL's trainers run it (DPO, KTO; ORPO, SimPO and CPO without a reference, over the full logits), or GRPO (GRPOTrainer): a preference task adds its reference and its prompt length here, GRPO its generation round."/>
        <Show when=move || preference.get() && reference.get()>
            <KeySelect label="Reference" key="ref" testid="ref" options=reference_options()
                hint="Where the reference log-probabilities come from: TRL's auto is a second copy of the model under full fine-tuning and the base with its adapters switched off under LoRA; precomputed (precompute_ref_log_probs) scores the dataset once before training."/>
        </Show>
        <Show when=move || preference.get()>
            <PromptTokens/>
        </Show>
        <Show when=move || grpo.get()>
            <GrpoControls/>
        </Show>
    }
}

/// GRPO's round: completions per prompt, their length, the KL coefficient, and where they are generated.
#[component]
fn GrpoControls() -> impl IntoView {
    let c = ctx();
    let completion_auto =
        memo(move || c.plan.with(|p| format!("auto ({})", p.completion_tokens())));
    let not_colocated = memo(move || {
        c.plan
            .with(|p| p.generation != Generation::VllmColocate)
            .then_some("Applies to vLLM colocated in the training process")
    });
    view! {
        <NumberBox label="Completions per prompt" key="gens"
            hint="num_generations: every prompt of the round is answered this many times; the round's b x gens sequences are generated at once and trained in ga micro-batches."/>
        <AutoInput label="Completion tokens" key="completion" disabled=Signal::derive(|| None)
            placeholder=completion_auto
            hint="max_completion_length: set, the sequence is the prompt and the completion (s follows); empty, the completion is what s leaves after the prompt."/>
        <NumberBox label="KL coefficient (beta)" key="beta" step="any"
            hint="beta: 0 (TRL's default since 0.19) runs no reference; above 0 each round is scored by the base with its adapters off, or by a second copy of the model under full fine-tuning."/>
        <KeySelect label="Generation" key="gen" options=generation_options()
            hint="Where the completions are generated: the policy's own generate (its key/value cache on this GPU), vLLM in the training process (its share of the GPU held from start-up), or a vLLM server on other GPUs."/>
        <NumberBox label="vLLM's share of the GPU" key="vmem" step="any" disabled=not_colocated
            hint="gpu_memory_utilization: vLLM takes this fraction of the GPU's total memory for its weights and key/value blocks when it starts, beside training (TRL's default 0.3)."/>
    }
}

/// Prompt tokens of each sequence: a number from 1 to `s` - 1, or `auto` (half of `s`). A refused value is said
/// beside the box, which shows the value kept.
#[component]
fn PromptTokens() -> impl IntoView {
    let c = ctx();
    // Memos of types the page already has (numbers, flags, text): a new signal type is new code in the wasm.
    let tokens = memo(move || c.plan.with(|p| PromptBox::of(p).tokens));
    let max = memo(move || c.plan.with(|p| PromptBox::of(p).max));
    let auto = memo(move || c.plan.with(|p| PromptBox::of(p).auto));
    let words = memo(move || c.plan.with(|p| PromptBox::of(p).words(p.seq_len)));
    let on_number = move |ev: leptos::ev::Event| {
        c.set_text("prompt", event_target_value(&ev).trim());
        show_plan_value(&ev, &tokens.get_untracked().to_string());
    };
    let on_auto = move |ev: leptos::ev::Event| {
        let text = if event_target_checked(&ev) {
            "auto".to_string()
        } else {
            tokens.get_untracked().to_string()
        };
        c.set_text("prompt", &text);
    };
    let refused = move || {
        c.refused.with(|r| {
            Some(
                r.typed
                    .iter()
                    .rev()
                    .find(|d| d.key == "prompt")?
                    .message
                    .clone(),
            )
        })
    };
    view! {
        <div class="field prompt">
            <label for="num-prompt">"Prompt tokens"</label>
            <div class="row">
                <input id="num-prompt" type="number" min="1" inputmode="numeric" data-testid="prompt"
                    prop:max=move || max.get().to_string()
                    prop:value=move || tokens.get().to_string()
                    attr:data-value=move || if auto.get() { "auto".to_string() } else { tokens.get().to_string() }
                    on:change=on_number/>
                <label class="chip">
                    <input type="checkbox" data-testid="prompt-auto" prop:checked=move || auto.get() on:change=on_auto/>
                    <span>"auto"</span>
                </label>
            </div>
            <span class="error" role="alert" data-testid="refused-prompt">{refused}</span>
            <p class="why">{move || words.get()}</p>
        </div>
    }
}
