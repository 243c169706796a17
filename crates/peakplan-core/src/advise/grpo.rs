//! GRPO's levers: what a generation round costs and what cuts it (fewer completions per prompt, shorter
//! completions, no reference, the round split into more micro-batches, vLLM's share lowered or moved to a server).

use super::{change, Change, Cost, Setting};
use crate::plan::{Generation, Plan, Task};

/// Shortest completion the advisor suggests capping GRPO's completions at.
const MIN_COMPLETION: u64 = 64;

/// GRPO's changes, each one key (with what keeps the link's sequence consistent); none for other tasks.
pub(super) fn grpo_changes(plan: &Plan, c: &mut Vec<Change>) {
    if plan.task != Task::Grpo {
        return;
    }
    let (b, gens, ga) = (plan.micro_batch, plan.generations, plan.grad_accumulation);
    let fewer = gens / 2;
    if fewer >= 2 && (b * fewer).is_multiple_of(ga) {
        c.push(change(
            "gens",
            fewer.to_string(),
            format!("Generate {fewer} completions per prompt instead of {gens}"),
            Cost::Quality,
            "fewer samples per prompt: noisier group advantages",
        ));
    }
    let more = ga * 2;
    if (b * gens).is_multiple_of(more) {
        c.push(change(
            "ga",
            more.to_string(),
            format!(
                "Train each round in {more} micro-batches of {} completions",
                b * gens / more
            ),
            Cost::Speed,
            "same round and update (TRL's steps_per_generation), more forward and backward passes",
        ));
    }
    let completion = plan.completion_tokens();
    let shorter = completion / 2;
    if shorter >= MIN_COMPLETION {
        let prompt = plan.prompt_tokens();
        let mut ch = change(
            "completion",
            shorter.to_string(),
            format!("Cap completions at {shorter} tokens (max_completion_length)"),
            Cost::Quality,
            "longer answers get cut off: their reward sees the truncation",
        );
        ch.also.push(Setting {
            key: "prompt",
            value: prompt.to_string(),
        });
        ch.also.push(Setting {
            key: "s",
            value: (prompt + shorter).to_string(),
        });
        c.push(ch);
    }
    if plan.beta > 0.0 {
        c.push(change(
            "beta",
            "0",
            "Drop the KL term (beta=0, TRL's default since 0.19)",
            Cost::Quality,
            "no reference pass and no reference copy: the policy may drift further from the base",
        ));
    }
    if plan.generation == Generation::VllmColocate {
        c.push(change(
            "gen",
            "vllm_server",
            "Generate on a vLLM server on other GPUs (vllm_mode=\"server\")",
            Cost::Hardware,
            "vLLM's share leaves this GPU; the server needs GPUs of its own",
        ));
        let lower = (plan.vllm_memory / 2.0 * 100.0).floor() / 100.0;
        if lower >= 0.05 {
            c.push(change(
                "vmem",
                lower.to_string(),
                format!("Give vLLM {:.0}% of the GPU instead of {:.0}%", lower * 100.0, plan.vllm_memory * 100.0),
                Cost::Speed,
                "fewer key/value blocks: vLLM runs fewer sequences at once, and too few cannot hold one",
            ));
        }
    }
}
