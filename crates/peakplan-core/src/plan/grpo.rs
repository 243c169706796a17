//! GRPO's keys and the rules between them: `gens`, `completion`, `beta`, `gen` and `vmem` (contract §4), read as
//! TRL's `GRPOConfig` reads them (1.16: `num_generations`, `max_completion_length`, `beta`, `use_vllm` and
//! `vllm_mode`, `vllm_gpu_memory_utilization`).

use super::{Plan, Reference, Task, MAX_SEQ};

/// TRL's `num_generations` default.
pub const DEFAULT_GENERATIONS: u64 = 8;
/// Most completions per prompt a plan takes.
pub const MAX_GENERATIONS: u64 = 4096;
/// TRL's `vllm_gpu_memory_utilization` default.
pub const DEFAULT_VLLM_MEMORY: f64 = 0.3;
/// Largest KL coefficient a plan takes (any positive value prices the same: a reference pass).
pub const MAX_BETA: f64 = 1.0e6;

impl Plan {
    /// Completions per GRPO generation round on this GPU: each of the micro-batch's `b` prompts `gens` times
    /// (TRL's generation batch, `per_device_train_batch_size × steps_per_generation` completions); for other
    /// tasks, the micro-batch.
    pub fn generated_sequences(&self) -> u64 {
        if self.task == Task::Grpo {
            self.micro_batch.saturating_mul(self.generations)
        } else {
            self.micro_batch
        }
    }

    /// GRPO's rules: `completion` with `prompt` sets `s` (their sum); `completion` alone must leave a prompt in
    /// `s`; the generation batch splits evenly into the `ga` micro-batches TRL trains it in
    /// (`steps_per_generation`); the reference follows `beta`. A key that breaks one goes back to its default.
    pub(super) fn check_grpo_keys(&mut self) -> Vec<(&'static str, String)> {
        let mut said = Vec::new();
        if self.task != Task::Grpo {
            return said;
        }
        if self.reference != Reference::Auto {
            said.push((
                "ref",
                format!(
                    "ref={} does not apply to task=grpo, whose reference follows beta (0: none; above 0: the base \
                     with adapters off, or a second copy under method=full); accepted: auto",
                    self.reference.key()
                ),
            ));
            self.reference = Reference::Auto;
        }
        if let Some(completion) = self.completion_max {
            match self.prompt_tokens {
                Some(prompt) if prompt.saturating_add(completion) <= MAX_SEQ => {
                    self.seq_len = prompt + completion;
                }
                Some(prompt) => {
                    self.completion_max = None;
                    said.push((
                        "completion",
                        format!(
                            "completion={completion} with prompt={prompt} makes sequences longer than {MAX_SEQ} \
                             tokens; accepted: 1 to {}, or auto",
                            MAX_SEQ.saturating_sub(prompt).max(1)
                        ),
                    ));
                }
                None if completion >= self.seq_len => {
                    self.completion_max = None;
                    said.push((
                        "completion",
                        format!(
                            "completion={completion} leaves no prompt tokens in s={}; set prompt too (s becomes \
                             prompt + completion) or accepted: 1 to {}, or auto",
                            self.seq_len,
                            self.seq_len.saturating_sub(1).max(1)
                        ),
                    ));
                }
                None => {}
            }
        }
        let generated = self.generated_sequences();
        if !generated.is_multiple_of(self.grad_accumulation) {
            said.push((
                "ga",
                format!(
                    "ga={} does not divide the {generated} completions of a generation round (b={} prompts x \
                     gens={}), which TRL trains in ga micro-batches of equal size; accepted: a divisor of {generated}",
                    self.grad_accumulation, self.micro_batch, self.generations
                ),
            ));
            self.grad_accumulation = 1;
        }
        said
    }
}
