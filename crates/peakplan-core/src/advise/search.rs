//! The advice worked out a step at a time, so that a page can run each step in a task of its own.

use super::fitting::FittingSet;
use super::{candidates, gpus_change, suggestion_within, Advice, Change, Suggestion};
use crate::arch::Architecture;
use crate::engine::{estimate_on_within, Replayed};
use crate::gpu_choice::{fewest_kept, Counted};
use crate::plan::Plan;
use crate::solve::Steps;

/// [`advise`](super::advise) without the suggestions' limits, which cost a dozen replays each: a page shows the advice at once
/// and works them out one suggestion at a time ([`add_limits`](super::add_limits)).
pub fn advise_without_limits(arch: &Architecture, plan: &Plan, capacity: Option<u64>) -> Advice {
    AdviceSearch::new(plan, capacity).run(arch)
}

/// [`advise_without_limits`] worked out a step at a time, so that a page runs each step in a task of its own: the
/// plan's own figure (and, where it does not fit, the fewest GPUs that hold it), then each change's figure, then the
/// smallest set of changes that fits. A step runs at most one replay, and as much else as needs none.
#[derive(Clone, Debug)]
pub struct AdviceSearch {
    plan: Plan,
    capacity: Option<u64>,
    /// The plan's own figure, once worked out.
    base_bytes: Option<u64>,
    /// Whether the fewest GPUs that hold the plan have been looked for, and their counts meanwhile.
    gpus_weighed: bool,
    counts: Vec<Counted>,
    all: Vec<Change>,
    /// The changes weighed so far that save memory, sorted once the last is weighed.
    levers: Vec<Suggestion>,
    next: usize,
    sorted: bool,
    /// The replays of the estimate under way.
    replayed: Replayed,
    fitting: FittingSet,
}

impl AdviceSearch {
    pub fn new(plan: &Plan, capacity: Option<u64>) -> Self {
        AdviceSearch {
            plan: plan.clone(),
            capacity,
            base_bytes: None,
            gpus_weighed: false,
            counts: Vec::new(),
            all: Vec::new(),
            levers: Vec::new(),
            next: 0,
            sorted: false,
            replayed: Replayed::default(),
            fitting: FittingSet::default(),
        }
    }

    /// Goes on with at most `budget` replays (`None`: any number); the advice once the last step has run.
    fn go(&mut self, arch: &Architecture, budget: &mut Option<u32>) -> Option<Advice> {
        let capacity = self.capacity;
        let plan = &self.plan;
        let base = match self.base_bytes {
            Some(b) => b,
            None => {
                let on = capacity.unwrap_or(plan.gpu.preset().capacity_bytes);
                let e = self
                    .replayed
                    .within(budget, |r| estimate_on_within(arch, plan, on, r))?;
                self.replayed = Replayed::default();
                self.all = candidates(plan);
                *self.base_bytes.insert(e.device_bytes)
            }
        };
        if !self.gpus_weighed {
            // Where the plan does not fit, the fewest GPUs that hold it.
            if let Some(cap) = capacity.filter(|&c| base > c) {
                let n = fewest_kept(arch, plan, &mut self.counts, cap, budget)?;
                self.all.extend(n.and_then(|n| gpus_change(plan, n)));
            }
            self.gpus_weighed = true;
            self.counts = Vec::new();
        }
        while let Some(change) = self.all.get(self.next) {
            let s = self.replayed.within(budget, |r| {
                suggestion_within(arch, plan, base, &[change], capacity, r)
            })?;
            self.replayed = Replayed::default();
            if s.saved_bytes > 0 {
                self.levers.push(s);
            }
            self.next += 1;
        }
        if !self.sorted {
            self.levers
                .sort_by(|a, b| b.saved_bytes.cmp(&a.saved_bytes).then(a.cost.cmp(&b.cost)));
            self.sorted = true;
        }
        let to_fit = match capacity {
            Some(cap) if base > cap => {
                self.fitting
                    .within(arch, plan, base, &self.all, &self.levers, cap, budget)?
            }
            _ => None,
        };
        Some(Advice {
            device_bytes: base,
            capacity_bytes: capacity,
            fits: capacity.map(|c| base <= c),
            to_fit,
            levers: std::mem::take(&mut self.levers),
        })
    }
}

impl Steps for AdviceSearch {
    type Output = Advice;

    /// Runs a step, at most one replay; the advice once every step has run.
    fn step(&mut self, arch: &Architecture) -> Option<Advice> {
        self.go(arch, &mut Some(1))
    }

    /// Runs every step at once (without a limit nothing pauses; were it to, the steps would go on from there).
    fn run(mut self, arch: &Architecture) -> Advice {
        match self.go(arch, &mut None) {
            Some(advice) => advice,
            None => loop {
                if let Some(advice) = self.step(arch) {
                    return advice;
                }
            },
        }
    }
}
