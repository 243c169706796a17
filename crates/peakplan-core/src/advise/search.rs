//! The advice worked out a step at a time, so that a page can run each step in a task of its own.

use super::{candidates, more_gpus, smallest_fitting_set, suggestion, Advice, Change, Suggestion};
use crate::arch::Architecture;
use crate::engine::estimate_on;
use crate::plan::Plan;
use crate::solve::Steps;

/// [`advise`](super::advise) without the suggestions' limits, which cost a dozen replays each: a page shows the advice at once
/// and works them out one suggestion at a time ([`add_limits`](super::add_limits)).
pub fn advise_without_limits(arch: &Architecture, plan: &Plan, capacity: Option<u64>) -> Advice {
    AdviceSearch::new(plan, capacity).run(arch)
}

/// [`advise_without_limits`] worked out a step at a time, so that a page runs each step in a task of its own: the
/// plan's own figure (and, where it does not fit, the fewest GPUs that hold it), then each change's figure, one
/// per step, then the smallest set of changes that fits.
#[derive(Clone, Debug)]
pub struct AdviceSearch {
    plan: Plan,
    capacity: Option<u64>,
    /// The plan's own figure, once worked out.
    base_bytes: Option<u64>,
    /// Whether the fewest GPUs that hold the plan have been looked for.
    gpus_weighed: bool,
    all: Vec<Change>,
    /// The changes weighed so far that save memory.
    levers: Vec<Suggestion>,
    next: usize,
}

impl AdviceSearch {
    pub fn new(plan: &Plan, capacity: Option<u64>) -> Self {
        AdviceSearch {
            plan: plan.clone(),
            capacity,
            base_bytes: None,
            gpus_weighed: false,
            all: Vec::new(),
            levers: Vec::new(),
            next: 0,
        }
    }
}

impl Steps for AdviceSearch {
    type Output = Advice;

    /// Runs a step (one estimate, or the fewest GPUs' search beside the plan's own figure, or the fitting set's
    /// search at the end); the advice once every step has run.
    fn step(&mut self, arch: &Architecture) -> Option<Advice> {
        let capacity = self.capacity;
        let Some(base) = self.base_bytes else {
            let on = capacity.unwrap_or(self.plan.gpu.preset().capacity_bytes);
            let base = estimate_on(arch, &self.plan, on).device_bytes;
            self.all = candidates(&self.plan);
            self.base_bytes = Some(base);
            return None;
        };
        if !self.gpus_weighed {
            // Where the plan does not fit, the fewest GPUs that hold it: a search of its own.
            self.gpus_weighed = true;
            if let Some(more) = capacity
                .filter(|&c| base > c)
                .and_then(|c| more_gpus(arch, &self.plan, c))
            {
                self.all.push(more);
                return None;
            }
        }
        if let Some(change) = self.all.get(self.next) {
            let s = suggestion(arch, &self.plan, base, &[change], capacity);
            if s.saved_bytes > 0 {
                self.levers.push(s);
            }
            self.next += 1;
            return None;
        }
        let mut levers = std::mem::take(&mut self.levers);
        levers.sort_by(|a, b| b.saved_bytes.cmp(&a.saved_bytes).then(a.cost.cmp(&b.cost)));
        let to_fit = match capacity {
            Some(cap) if base > cap => {
                smallest_fitting_set(arch, &self.plan, base, &self.all, &levers, cap)
            }
            _ => None,
        };
        Some(Advice {
            device_bytes: base,
            capacity_bytes: capacity,
            fits: capacity.map(|c| base <= c),
            to_fit,
            levers,
        })
    }
}
