//! The free changes of a plan: the advisor's changes that cost nothing (no speed, no quality, no hardware) and
//! lower its peak, weighed a replay at a time where the GPU table asks.

use super::{apply, candidates, Change, Cost};
use crate::arch::Architecture;
use crate::engine::{estimate_on_within, Replayed};
use crate::plan::Plan;

/// The free changes that lower this plan's peak, taken together: for each key the one that saves the most (the
/// chunked or the fused loss), in the order [`candidates`] lists them. What a plan costs nothing to change.
pub fn free_changes(arch: &Architecture, plan: &Plan) -> Vec<Change> {
    FreeChanges::new(plan)
        .step_within(arch, &mut None)
        .unwrap_or_default()
}

/// [`free_changes`] a few replays at a time: the plan's estimate, then each free candidate's, each estimate's
/// replays within the allowance of the call that reaches them (the GPU table's steps, one replay each).
#[derive(Clone, Debug)]
pub struct FreeChanges {
    plan: Plan,
    base: Option<u64>,
    candidates: Vec<Change>,
    /// The next candidate to weigh, and the best change of each key so far with its device bytes.
    next: usize,
    best: Vec<(Change, u64)>,
    /// The replays of the estimate under way.
    replayed: Replayed,
}

impl FreeChanges {
    pub fn new(plan: &Plan) -> Self {
        FreeChanges {
            plan: plan.clone(),
            base: None,
            candidates: candidates(plan)
                .into_iter()
                .filter(|c| c.cost == Cost::Free)
                .collect(),
            next: 0,
            best: Vec::new(),
            replayed: Default::default(),
        }
    }

    /// Goes on with at most `budget` replays (`None`: any number), leaving in it what it did not run; the free
    /// changes once the last candidate is weighed.
    pub fn step_within(
        &mut self,
        arch: &Architecture,
        budget: &mut Option<u32>,
    ) -> Option<Vec<Change>> {
        let base = match self.base {
            Some(b) => b,
            None => {
                let b = self.device_bytes(arch, &self.plan.clone(), budget)?;
                *self.base.insert(b)
            }
        };
        while let Some(c) = self.candidates.get(self.next) {
            let c = c.clone();
            let bytes = self.device_bytes(arch, &apply(&self.plan, &[&c]), budget)?;
            self.next += 1;
            if bytes >= base {
                continue;
            }
            match self.best.iter_mut().find(|(b, _)| b.key == c.key) {
                Some(slot) if bytes < slot.1 => *slot = (c, bytes),
                Some(_) => {}
                None => self.best.push((c, bytes)),
            }
        }
        Some(self.best.iter().map(|(c, _)| c.clone()).collect())
    }

    /// `plan`'s device bytes on its own GPU ([`crate::estimate`]) within `budget`.
    fn device_bytes(
        &mut self,
        arch: &Architecture,
        plan: &Plan,
        budget: &mut Option<u32>,
    ) -> Option<u64> {
        let cap = plan.gpu.preset().capacity_bytes;
        let e = self
            .replayed
            .within(budget, |r| estimate_on_within(arch, plan, cap, r));
        if e.is_some() {
            self.replayed = Default::default();
        }
        e.map(|e| e.device_bytes)
    }
}
