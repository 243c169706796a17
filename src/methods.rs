//! The chart's three methods filled in one at a time: a slider move estimates the plan's own method at once and
//! the other two afterwards (once the slider rests, a task each: `fill_stale_bars` in `state.rs`), so a move waits
//! for one estimate instead of three.
//!
//! A plan whose batches vary replays sixteen steps twice a method (about 15 ms in the page's wasm), so three
//! estimates on every move held a drag at about 55 ms a frame. Only the plan's own method feeds the verdict, the
//! component table and the timeline; the other two are bars beside it, which keep the previous slider value's
//! figures until theirs are made. Any other change (model, GPU, a setting) estimates all three
//! at once: bars that belong to another model or setting are never shown.

use crate::planner::Computed;
use peakplan_core::plan::Method;
use peakplan_core::{estimate, Architecture, Estimate, Plan};

/// The chart's methods, in its bars' order (as `peakplan_core::estimate_each_method` orders them).
pub const METHODS: [Method; 3] = [Method::Full, Method::Lora, Method::Qlora];

/// The plan with the three sliders' values (rank, micro-batch, sequence length) cleared: two plans with the same
/// are one slider's drag apart.
pub fn sliders_cleared(plan: &Plan) -> Plan {
    Plan {
        rank: 0,
        micro_batch: 0,
        seq_len: 0,
        ..plan.clone()
    }
}

/// Where `method` sits among the chart's bars.
pub fn bar_of(method: Method) -> usize {
    METHODS.iter().position(|m| *m == method).unwrap_or(2)
}

/// `plan` estimated as `method`.
fn estimate_as(arch: &Architecture, plan: &Plan, method: Method) -> Estimate {
    let mut p = plan.clone();
    p.method = method;
    estimate(arch, &p)
}

/// The methods' estimates made so far for one plan and model: what a later computation of the same plan (a
/// method filled in, a preview shown) takes instead of estimating again.
#[derive(Clone, Debug, Default)]
pub struct MethodCache {
    key: Option<(Plan, Architecture)>,
    made: [Option<Estimate>; 3],
}

impl MethodCache {
    fn holds(&self, arch: &Architecture, plan: &Plan) -> bool {
        self.key
            .as_ref()
            .is_some_and(|(p, a)| p == plan && a == arch)
    }

    /// Whether `plan` on `arch` is one slider's move from the plan held (or that plan itself).
    fn one_move_from(&self, arch: &Architecture, plan: &Plan) -> bool {
        self.key
            .as_ref()
            .is_some_and(|(p, a)| a == arch && sliders_cleared(p) == sliders_cleared(plan))
    }

    /// Makes the estimate of the first bar not made yet for `plan`, if the cache holds that plan: what a task after
    /// a slider move runs. Which bar it made, or `None` where there was nothing left to make.
    pub fn fill_next(&mut self, arch: &Architecture, plan: &Plan) -> Option<usize> {
        if !self.holds(arch, plan) {
            return None;
        }
        let i = self.made.iter().position(Option::is_none)?;
        self.made[i] = Some(estimate_as(arch, plan, METHODS[i]));
        Some(i)
    }
}

impl Computed {
    /// The plan's figures with what `cache` holds for it. The plan's own method is estimated first; on one slider's
    /// move from `earlier` (the figures shown until now) each other bar is estimated only while `more_now()` says
    /// there is time (a fixed plan's three estimates take about 2 ms in the page, a varying plan's one 15 ms), and
    /// otherwise keeps `earlier`'s, marked [`Computed::stale`] until [`MethodCache::fill_next`] makes its own. Any
    /// other change estimates every method.
    pub fn assemble(
        arch: &Architecture,
        plan: &Plan,
        cache: &mut MethodCache,
        earlier: Option<&Computed>,
        mut more_now: impl FnMut() -> bool,
    ) -> Computed {
        let earlier = earlier.filter(|_| cache.one_move_from(arch, plan));
        if !cache.holds(arch, plan) {
            *cache = MethodCache {
                key: Some((plan.clone(), arch.clone())),
                made: Default::default(),
            };
        }
        let own = bar_of(plan.method);
        let mut stale = [false; 3];
        for i in std::iter::once(own).chain((0..3).filter(|i| *i != own)) {
            if cache.made[i].is_some() {
                continue;
            }
            match earlier {
                Some(_) if i != own && !more_now() => stale[i] = true,
                _ => cache.made[i] = Some(estimate_as(arch, plan, METHODS[i])),
            }
        }
        let by_method = std::array::from_fn(|i| match (&cache.made[i], earlier) {
            (Some(made), _) => made.clone(),
            (None, Some(e)) => e.by_method[i].clone(),
            // Unreachable: a bar not made is stale, which needs `earlier`.
            (None, None) => estimate_as(arch, plan, METHODS[i]),
        });
        let mut comp = Computed::of(arch, plan, by_method);
        comp.stale = stale;
        comp
    }

    /// The first bar still showing an earlier plan's figures.
    pub fn next_stale(&self) -> Option<usize> {
        self.stale.iter().position(|s| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peakplan_core::preset_arch;

    const VARYING: &str =
        "model=llama-3.1-8b&method=lora&b=4&s=2048&lens=grouped&lmean=300&lsd=200\
                           &gc=1&gpu=rtx-4090";

    /// Moves the plan through `moves` (queries), filling after each where `fill` says, and checks the end: what
    /// the cache assembles once every bar is filled equals `Computed::new` of the last plan.
    fn check(start: &str, moves: &[(&str, bool)], expect_stale_after_last: [bool; 3]) {
        let first = Plan::parse_query(start).plan;
        let arch = preset_arch(&first);
        let mut cache = MethodCache::default();
        let mut shown = Computed::assemble(arch, &first, &mut cache, None, || false);
        assert_eq!(
            shown,
            Computed::new(arch, &first),
            "a first plan has all three"
        );
        let mut plan = first;
        for (query, fill) in moves {
            plan = Plan::parse_query(query).plan;
            shown = Computed::assemble(arch, &plan, &mut cache, Some(&shown), || false);
            assert_eq!(
                shown.selected,
                estimate(arch, &plan),
                "{query}: the plan's own method is current"
            );
            while let Some(i) = shown.next_stale().filter(|_| *fill) {
                assert_eq!(
                    cache.fill_next(arch, &plan),
                    Some(i),
                    "the stale bars are those not made"
                );
                shown = Computed::assemble(arch, &plan, &mut cache, Some(&shown), || false);
            }
        }
        assert_eq!(shown.stale, expect_stale_after_last);
        while let Some(i) = shown.next_stale() {
            assert_eq!(cache.fill_next(arch, &plan), Some(i));
            shown = Computed::assemble(arch, &plan, &mut cache, Some(&shown), || false);
        }
        assert_eq!(cache.fill_next(arch, &plan), None, "a bar is made once");
        assert_eq!(
            shown,
            Computed::new(arch, &plan),
            "filled, the bars are the plan's"
        );
    }

    #[test]
    fn a_slider_move_estimates_the_own_method_first_and_fills_the_rest() {
        let q = |s: &str| format!("model=llama-2-7b&method=qlora&gpu=rtx-4090&{s}");
        let (s512, s1024, s2048, r64) = (q("s=512"), q("s=1024"), q("s=2048"), q("s=2048&r=64"));
        // One move, left unfilled: the other two bars are the earlier plan's.
        check(&s512, &[(&s1024, false)], [true, true, false]);
        // Moves in a row keep the latest figures known until filled.
        check(
            &s512,
            &[(&s1024, false), (&s2048, false), (&r64, false)],
            [true, true, false],
        );
        // Filled after each move, nothing is left stale.
        check(&s512, &[(&s1024, true), (&r64, true)], [false; 3]);
        // The same plan again (a preview shown): every bar from the cache.
        check(&s512, &[(&s512, false)], [false; 3]);
        // A varying plan's move: its own method is LoRA.
        let v = VARYING.replace("s=2048", "s=1536");
        check(VARYING, &[(&v, false)], [true, false, true]);
    }

    #[test]
    fn a_move_with_time_to_spare_estimates_every_bar_at_once() {
        let first = Plan::parse_query(VARYING).plan;
        let arch = preset_arch(&first);
        let next = Plan::parse_query(&VARYING.replace("s=2048", "s=1536")).plan;
        let mut cache = MethodCache::default();
        let shown = Computed::assemble(arch, &first, &mut cache, None, || false);
        // Time for one more estimate after the plan's own: the first other bar (Full) is made, QLoRA's is not.
        let mut asked = 0;
        let moved = Computed::assemble(arch, &next, &mut cache, Some(&shown), || {
            asked += 1;
            asked == 1
        });
        assert_eq!((moved.stale, asked), ([false, false, true], 2));
        assert_eq!(moved.by_method[0], Computed::new(arch, &next).by_method[0]);
        let mut cache = MethodCache::default();
        let shown = Computed::assemble(arch, &first, &mut cache, None, || false);
        let moved = Computed::assemble(arch, &next, &mut cache, Some(&shown), || true);
        assert_eq!(moved, Computed::new(arch, &next));
    }

    #[test]
    fn any_other_change_estimates_all_three_at_once() {
        let base = "model=llama-2-7b&method=qlora&gpu=rtx-4090&s=512";
        for other in [
            "model=llama-2-7b&method=lora&gpu=rtx-4090&s=512",
            "model=llama-2-7b&method=qlora&gpu=a100-80gb&s=512",
            "model=llama-2-7b&method=qlora&gpu=rtx-4090&s=1024&opt=sgd",
        ] {
            check(base, &[(other, false)], [false; 3]);
        }
        // Another model: its bars never show the first model's figures.
        let first = Plan::parse_query(base).plan;
        let other = Plan::parse_query("model=mistral-7b&method=qlora&gpu=rtx-4090&s=1024").plan;
        let mut cache = MethodCache::default();
        let shown = Computed::assemble(preset_arch(&first), &first, &mut cache, None, || false);
        let next = Computed::assemble(
            preset_arch(&other),
            &other,
            &mut cache,
            Some(&shown),
            || false,
        );
        assert_eq!(next, Computed::new(preset_arch(&other), &other));
        // A fill for a plan the cache no longer holds makes nothing.
        assert_eq!(cache.fill_next(preset_arch(&first), &first), None);
    }
}
