//! Stage 3c, a preference task's reference: the second copy of the model a full fine-tune compares with, and the
//! reference forward, which TRL's `DPOTrainer` and `KTOTrainer` (1.x) run under `torch.no_grad()` after the
//! policy's forward and before its backward, so that what the policy keeps for backward is all there beside it.
//! Nothing of the reference pass stays but a log-probability per sequence.

use super::count::Count;
use super::logits::LogProbHead;
use super::resident::Resident;
use super::setup::{positions, Setup};
use crate::plan::{Reference as Source, Task};

/// A preference task's reference, as one GPU holds it.
pub(super) struct Reference {
    /// A second copy of the model's weights (`ref=model`: what TRL loads from the policy's path, in its dtype and
    /// with its quantization), resident through the step.
    pub weights: Count,
    /// What the reference forward holds at its largest, beside what the policy's forward keeps.
    pub pass: Count,
    /// The largest block the pass allocates.
    pub block: Count,
}

pub(super) fn reference(s: &Setup, r: &Resident) -> Reference {
    let plan = s.plan;
    let source = plan.reference_source();
    let weights = if source == Source::Model {
        r.base_weights + r.quant_constants
    } else {
        0.0
    };
    let (pass, block) = match source {
        Source::Model | Source::AdaptersOff => pass(s),
        Source::Auto | Source::Precomputed | Source::None => (0.0, 0.0),
    };
    Reference {
        weights,
        pass,
        block,
    }
}

/// The reference forward at its largest: a decoder layer's MLP ([`no_grad_layer`]) or the log-probability head,
/// whichever holds more. The head holds the final hidden states, the scored positions' copy, the logits
/// tile and seven fp32 running statistics per scored position (`ChunkedLogProbFunction.forward`). KTO's
/// reference runs its KL batch and its completions one after the other, a batch each.
fn pass(s: &Setup) -> (Count, Count) {
    let (plan, c, h) = (s.plan, s.d.compute, s.hidden);
    let sequences = if plan.task == Task::Kto {
        plan.micro_batch as Count
    } else {
        s.sequences
    };
    let tokens = sequences * positions(plan);
    let scored = sequences * plan.completion_tokens() as Count;
    let mlp = s.arch.intermediate as Count * s.k_route;
    let layer = no_grad_layer(s, tokens);
    let lp = LogProbHead::of_scored(s, scored);
    let head = c * tokens * h + lp.kept + lp.tile + 7.0 * 4.0 * scored;
    (layer.max(head), lp.tile.max(c * tokens * mlp))
}

/// A decoder layer's largest moment in a forward without gradients over `tokens` tokens: at its MLP the residual
/// and the normalized input are live with the activation, the up projection and their product
/// (`down(act(gate(x)) * up(x))` frees the gate's output once the activation has read it); a layer keeps nothing.
pub(super) fn no_grad_layer(s: &Setup, tokens: Count) -> Count {
    let (c, h) = (s.d.compute, s.hidden);
    let mlp = s.arch.intermediate as Count * s.k_route;
    2.0 * c * tokens * h + 3.0 * c * tokens * mlp
}
