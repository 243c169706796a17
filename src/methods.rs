//! The chart's three methods filled in one at a time: a slider move estimates the plan's own method at once and
//! the other two afterwards (once the slider rests, a task each: `fill_stale_bars` in `state.rs`), so a move waits
//! for one estimate instead of three.
//!
//! A plan whose batches vary replays sixteen steps a method (3-9 ms in the page's wasm; four runs of them where
//! batches are padded), so three estimates on every move held a drag at about 55 ms a frame. Only the plan's own method feeds the verdict, the component
//! table and the timeline; the other two are bars beside it, which keep the previous slider value's figures until
//! theirs are made. Any other change (model, GPU, a setting) estimates all three at once: bars that belong to
//! another model or setting are never shown.
//!
//! The cache keeps the last [`KEPT_PLANS`] plans' estimates, and a slider move has its neighbours on the track
//! made at idle ([`MethodCache::prefetch`], scheduled by `Ctx::prefetch_around` in `state.rs`): a drag back and
//! forth, or on to the next position, shows figures already made instead of waiting for a replay.

use crate::planner::Computed;
use peakplan_core::engine::{estimate_on_within, Replayed};
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

/// Allocator replays a neighbour's task runs at most ([`MethodCache::prefetch_within`]): a padded plan's four runs
/// where each runs on the card, so the neighbour is made before the next move comes (made over two tasks, a
/// drag's moves found it half made and estimated it themselves: 8 of 60 moves at 35 ms, against 2), and half of
/// them where the card runs out and each run replays again without limit.
pub const NEIGHBOUR_REPLAYS: u32 = 4;

/// A neighbour's estimate under way across tasks: its replays so far, and the time they took (ms).
#[derive(Clone, Debug, Default)]
pub struct Pending {
    replayed: Replayed,
    spent_ms: f64,
}

/// Plans whose estimates the page keeps: a slider dragged back and forth over its track (the sequence slider has
/// eleven positions, the batch slider 28) finds the plans it has shown, and the neighbours made at idle.
pub const KEPT_PLANS: usize = 32;

/// One plan's estimates made so far, and how long each took (ms, by the cache's clock).
#[derive(Clone, Debug)]
struct Entry {
    plan: Plan,
    arch: Architecture,
    made: [Option<Estimate>; 3],
    cost_ms: [f64; 3],
}

impl Entry {
    fn new(arch: &Architecture, plan: &Plan) -> Entry {
        Entry {
            plan: plan.clone(),
            arch: arch.clone(),
            made: Default::default(),
            cost_ms: [0.0; 3],
        }
    }

    fn is(&self, arch: &Architecture, plan: &Plan) -> bool {
        self.plan == *plan && self.arch == *arch
    }

    /// Makes bar `i`'s estimate, timed by `clock`.
    fn make(&mut self, i: usize, clock: fn() -> f64) {
        let start = clock();
        self.made[i] = Some(estimate_as(&self.arch, &self.plan, METHODS[i]));
        self.cost_ms[i] = clock() - start;
    }

    /// What the next estimate of this plan should take: the longest of those made (another method of the same
    /// plan replays the same steps).
    fn expected_ms(&self) -> f64 {
        self.made
            .iter()
            .zip(self.cost_ms)
            .filter(|(m, _)| m.is_some())
            .map(|(_, c)| c)
            .fold(0.0, f64::max)
    }
}

/// The methods' estimates made so far for the plan shown (first) and for up to [`KEPT_PLANS`] - 1 other plans,
/// most recently shown or made ahead first (a plan made ahead goes second, so it may push out one shown): what a
/// later computation of the same plan (a method filled in, a preview shown, a slider dragged back, a neighbour
/// made at idle by [`MethodCache::prefetch`]) takes instead of estimating again.
/// An estimate is a pure function of the plan and model, so a kept one is the one a new estimate would make.
#[derive(Clone, Debug)]
pub struct MethodCache {
    entries: Vec<Entry>,
    /// Times the estimates (ms): the page's `performance.now`, a native test's zero.
    clock: fn() -> f64,
    /// Whether the last [`Computed::assemble`] made the plan's own estimate (it was not kept).
    pub made_own: bool,
}

impl Default for MethodCache {
    fn default() -> Self {
        MethodCache::with_clock(|| 0.0)
    }
}

impl MethodCache {
    /// An empty cache that times its estimates by `clock` (ms).
    pub fn with_clock(clock: fn() -> f64) -> MethodCache {
        MethodCache {
            entries: Vec::new(),
            clock,
            made_own: false,
        }
    }

    fn holds(&self, arch: &Architecture, plan: &Plan) -> bool {
        self.entries.first().is_some_and(|e| e.is(arch, plan))
    }

    /// Whether `plan` on `arch` is one slider's move from the plan shown (or that plan itself).
    fn one_move_from(&self, arch: &Architecture, plan: &Plan) -> bool {
        self.entries
            .first()
            .is_some_and(|e| e.arch == *arch && sliders_cleared(&e.plan) == sliders_cleared(plan))
    }

    /// Makes `plan` the plan shown: its kept entry first, or a new one; the least recently shown goes past
    /// [`KEPT_PLANS`].
    fn show(&mut self, arch: &Architecture, plan: &Plan) {
        if self.holds(arch, plan) {
            return;
        }
        let entry = match self.entries.iter().position(|e| e.is(arch, plan)) {
            Some(i) => self.entries.remove(i),
            None => Entry::new(arch, plan),
        };
        self.entries.insert(0, entry);
        self.entries.truncate(KEPT_PLANS);
    }

    /// Makes the estimate of the first bar not made yet for `plan`, if it is the plan shown: what a task after
    /// a slider move runs. Which bar it made, or `None` where there was nothing left to make.
    pub fn fill_next(&mut self, arch: &Architecture, plan: &Plan) -> Option<usize> {
        if !self.holds(arch, plan) {
            return None;
        }
        let clock = self.clock;
        let entry = &mut self.entries[0];
        let i = entry.made.iter().position(Option::is_none)?;
        entry.make(i, clock);
        Some(i)
    }

    /// Makes `plan`'s own method's estimate ahead of its being shown (a slider's neighbour, at idle), kept just
    /// after the plan shown; false where it was kept already.
    pub fn prefetch(&mut self, arch: &Architecture, plan: &Plan) -> bool {
        let own = bar_of(plan.method);
        let at = match self.entries.iter().position(|e| e.is(arch, plan)) {
            Some(i) if self.entries[i].made[own].is_some() => return false,
            Some(i) => i,
            // Nothing shown yet: the first entry is the plan shown's.
            None if self.entries.is_empty() => return false,
            None => {
                let at = 1;
                self.entries.insert(at, Entry::new(arch, plan));
                self.entries.truncate(KEPT_PLANS);
                at
            }
        };
        let clock = self.clock;
        self.entries[at].make(own, clock);
        true
    }

    /// [`MethodCache::prefetch`] a few allocator replays at a time ([`NEIGHBOUR_REPLAYS`]), so that a task stays
    /// short where an estimate replays several runs: `None` where this call's replays ran out before the estimate
    /// was made (the next call with the same `pending` goes on from there), else as `prefetch`.
    pub fn prefetch_within(
        &mut self,
        arch: &Architecture,
        plan: &Plan,
        pending: &mut Pending,
    ) -> Option<bool> {
        let own = bar_of(plan.method);
        let kept = self.entries.iter().position(|e| e.is(arch, plan));
        match kept {
            Some(i) if self.entries[i].made[own].is_some() => return Some(false),
            None if self.entries.is_empty() => return Some(false),
            _ => {}
        }
        let start = (self.clock)();
        pending.replayed.allow(Some(NEIGHBOUR_REPLAYS));
        let capacity_bytes = plan.gpu.preset().capacity_bytes;
        let made = estimate_on_within(arch, plan, capacity_bytes, &mut pending.replayed);
        pending.spent_ms += (self.clock)() - start;
        let made = made?;
        let at = kept.unwrap_or_else(|| {
            self.entries.insert(1, Entry::new(arch, plan));
            self.entries.truncate(KEPT_PLANS);
            1
        });
        self.entries[at].made[own] = Some(made);
        self.entries[at].cost_ms[own] = pending.spent_ms;
        Some(true)
    }

    /// `plan`'s own method's estimate, made unless kept (then kept as [`MethodCache::prefetch`] keeps it): an advisor
    /// card's preview, which a click on the card then shows without estimating again.
    pub fn own(&mut self, arch: &Architecture, plan: &Plan) -> Estimate {
        self.prefetch(arch, plan);
        let own = bar_of(plan.method);
        self.entries
            .iter()
            .find(|e| e.is(arch, plan))
            .and_then(|e| e.made[own].clone())
            .unwrap_or_else(|| estimate(arch, plan))
    }

    /// Whether `plan`'s own method's estimate is kept.
    #[cfg(test)]
    pub fn has_own(&self, arch: &Architecture, plan: &Plan) -> bool {
        let own = bar_of(plan.method);
        self.entries
            .iter()
            .any(|e| e.is(arch, plan) && e.made[own].is_some())
    }
}

impl Computed {
    /// The plan's figures with what `cache` holds for it. The plan's own method is estimated first (unless kept);
    /// on one slider's move from `earlier` (the figures shown until now) each other bar is estimated only where
    /// `more_now(ms)` says an estimate expected to take `ms` (the longest of the plan's made so far) still fits
    /// (a fixed plan's three estimates take about 2 ms in the page, a varying plan's one 3-9 ms), and otherwise
    /// keeps `earlier`'s, marked [`Computed::stale`] until [`MethodCache::fill_next`] makes its own. Any other
    /// change estimates every method.
    pub fn assemble(
        arch: &Architecture,
        plan: &Plan,
        cache: &mut MethodCache,
        earlier: Option<&Computed>,
        mut more_now: impl FnMut(f64) -> bool,
    ) -> Computed {
        let earlier = earlier.filter(|_| cache.one_move_from(arch, plan));
        cache.show(arch, plan);
        let clock = cache.clock;
        let own = bar_of(plan.method);
        cache.made_own = cache.entries[0].made[own].is_none();
        let entry = &mut cache.entries[0];
        let mut stale = [false; 3];
        for i in std::iter::once(own).chain((0..3).filter(|i| *i != own)) {
            if entry.made[i].is_some() {
                continue;
            }
            match earlier {
                Some(_) if i != own && !more_now(entry.expected_ms()) => stale[i] = true,
                _ => entry.make(i, clock),
            }
        }
        let by_method = std::array::from_fn(|i| match (&entry.made[i], earlier) {
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
        let mut shown = Computed::assemble(arch, &first, &mut cache, None, |_| false);
        assert_eq!(
            shown,
            Computed::new(arch, &first),
            "a first plan has all three"
        );
        let mut plan = first;
        for (query, fill) in moves {
            plan = Plan::parse_query(query).plan;
            shown = Computed::assemble(arch, &plan, &mut cache, Some(&shown), |_| false);
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
                shown = Computed::assemble(arch, &plan, &mut cache, Some(&shown), |_| false);
            }
        }
        assert_eq!(shown.stale, expect_stale_after_last);
        while let Some(i) = shown.next_stale() {
            assert_eq!(cache.fill_next(arch, &plan), Some(i));
            shown = Computed::assemble(arch, &plan, &mut cache, Some(&shown), |_| false);
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
        let shown = Computed::assemble(arch, &first, &mut cache, None, |_| false);
        // Time for one more estimate after the plan's own: the first other bar (Full) is made, QLoRA's is not.
        let mut asked = 0;
        let moved = Computed::assemble(arch, &next, &mut cache, Some(&shown), |_| {
            asked += 1;
            asked == 1
        });
        assert_eq!((moved.stale, asked), ([false, false, true], 2));
        assert_eq!(moved.by_method[0], Computed::new(arch, &next).by_method[0]);
        let mut cache = MethodCache::default();
        let shown = Computed::assemble(arch, &first, &mut cache, None, |_| false);
        let moved = Computed::assemble(arch, &next, &mut cache, Some(&shown), |_| true);
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
        let shown = Computed::assemble(preset_arch(&first), &first, &mut cache, None, |_| false);
        let next = Computed::assemble(
            preset_arch(&other),
            &other,
            &mut cache,
            Some(&shown),
            |_| false,
        );
        assert_eq!(next, Computed::new(preset_arch(&other), &other));
        // A fill for a plan the cache no longer holds makes nothing.
        assert_eq!(cache.fill_next(preset_arch(&first), &first), None);
    }

    #[test]
    fn a_neighbour_made_a_few_replays_a_task_is_the_estimate() {
        // A padded plan replays four runs: near its card each replays twice (on the card, where it runs out, and
        // without limit), so made four replays a call it takes two calls, and what it keeps is the estimate; a
        // fixed plan is made in one call, and a kept one is not made again.
        for (q, calls) in [
            (
                "model=llama-2-7b&method=qlora&b=11&lens=padded&gpu=rtx-4090",
                2..=2,
            ),
            (
                "model=llama-3.1-8b&method=lora&b=4&s=1024&gpu=rtx-4090",
                1..=1,
            ),
        ] {
            let shown = Plan::parse_query(q).plan;
            let next = Plan::parse_query(&format!("{q}&r=32")).plan;
            let arch = preset_arch(&shown);
            let mut cache = MethodCache::default();
            let _ = Computed::assemble(arch, &shown, &mut cache, None, |_| true);
            let mut pending = Pending::default();
            let mut n = 0;
            let made = loop {
                n += 1;
                assert!(n <= 16, "{q}: never made");
                if let Some(made) = cache.prefetch_within(arch, &next, &mut pending) {
                    break made;
                }
            };
            assert!(made && calls.contains(&n), "{q}: made {made} in {n} calls");
            assert_eq!(
                cache.prefetch_within(arch, &next, &mut Pending::default()),
                Some(false)
            );
            assert_eq!(cache.own(arch, &next), estimate(arch, &next), "{q}");
        }
    }

    #[test]
    fn a_slider_dragged_back_finds_the_plans_it_showed() {
        let q = |s: u64| format!("model=llama-2-7b&method=qlora&gpu=rtx-4090&s={s}");
        let plans: Vec<Plan> = (7..=17)
            .map(|p| Plan::parse_query(&q(1 << p)).plan)
            .collect();
        let arch = preset_arch(&plans[0]);
        let mut cache = MethodCache::default();
        let mut shown = Computed::assemble(arch, &plans[0], &mut cache, None, |_| true);
        for p in plans.iter().skip(1) {
            shown = Computed::assemble(arch, p, &mut cache, Some(&shown), |_| true);
            assert!(cache.made_own, "a first visit estimates");
        }
        // Back down the track: every plan kept, its figures those a new estimate gives.
        for p in plans.iter().rev() {
            shown = Computed::assemble(arch, p, &mut cache, Some(&shown), |_| false);
            assert!(!cache.made_own, "{}: kept", p.seq_len);
            assert_eq!(shown, Computed::new(arch, p));
        }
        // Past KEPT_PLANS others, the least recently shown is made again.
        for r in 1..=KEPT_PLANS as u64 {
            let p = Plan::parse_query(&format!("{}&r={r}", q(256))).plan;
            shown = Computed::assemble(arch, &p, &mut cache, Some(&shown), |_| true);
        }
        shown = Computed::assemble(arch, &plans[0], &mut cache, Some(&shown), |_| true);
        assert!(cache.made_own, "dropped past {KEPT_PLANS} plans");
        assert_eq!(shown, Computed::new(arch, &plans[0]));
    }

    #[test]
    fn a_neighbour_made_at_idle_is_shown_without_estimating() {
        let first = Plan::parse_query(VARYING).plan;
        let arch = preset_arch(&first);
        let next = Plan::parse_query(&VARYING.replace("s=2048", "s=4096")).plan;
        let mut cache = MethodCache::default();
        let shown = Computed::assemble(arch, &first, &mut cache, None, |_| false);
        assert!(cache.prefetch(arch, &next), "made");
        assert!(!cache.prefetch(arch, &next), "made once");
        assert!(cache.has_own(arch, &next));
        // The plan shown is still the one whose bars a task fills.
        assert_eq!(cache.fill_next(arch, &next), None);
        let moved = Computed::assemble(arch, &next, &mut cache, Some(&shown), |_| false);
        assert!(!cache.made_own);
        assert_eq!(moved.selected, estimate(arch, &next));
        assert_eq!(moved.stale, [true, false, true]);
        assert_eq!(cache.fill_next(arch, &next), Some(0));
        // A later move back finds the first plan's three bars.
        let back = Computed::assemble(arch, &first, &mut cache, Some(&moved), |_| false);
        assert!(!cache.made_own);
        assert_eq!(back, Computed::new(arch, &first));
        // An advisor card's preview: made once, and the plan the card makes is shown from it.
        let mut card = next.clone();
        card.micro_batch = 2;
        assert_eq!(cache.own(arch, &card), estimate(arch, &card));
        assert!(!cache.prefetch(arch, &card), "kept");
        let clicked = Computed::assemble(arch, &card, &mut cache, Some(&back), |_| false);
        assert!(!cache.made_own);
        assert_eq!(clicked.selected, estimate(arch, &card));
    }

    #[test]
    fn the_time_a_bar_is_expected_to_take_is_the_plans_longest_made() {
        let plan = Plan::parse_query(VARYING).plan;
        let mut entry = Entry::new(preset_arch(&plan), &plan);
        assert_eq!(entry.expected_ms(), 0.0);
        entry.make(1, || 0.0);
        entry.cost_ms[1] = 6.5;
        assert_eq!(entry.expected_ms(), 6.5);
    }
}
