//! The smallest set of changes that fits the GPU (the advisor's last step), worked out within an allowance of
//! replays: every set weighed is kept, so a later call walks the same sets again and goes on where it stopped.

use super::{apply, batch_change, suggestion_within, Change, Cost, Suggestion, MAX_SET};
use crate::arch::Architecture;
use crate::engine::{estimate_on_within, estimate_rough, Replayed};
use crate::plan::Plan;
use crate::solve::{Search, Steps};

/// A walk stopped at a set whose replay is past its allowance.
struct Paused;

/// The ranking key of a change set: highest cost, size, total cost, bytes.
type Key = (Cost, usize, usize, u64);

/// Whether a set (indices into the useful changes) fits, with its device bytes: its replay, or where it paused.
type Check<'c> = dyn FnMut(&[usize]) -> Result<Option<u64>, Paused> + 'c;

/// The fitting set's search as far as it has gone.
#[derive(Clone, Debug, Default)]
pub(super) struct FittingSet {
    /// Each set weighed ([`set_key`]), in key order: its device bytes where it fits.
    weighed: Vec<(u64, Option<u64>)>,
    /// The replays of the estimate under way.
    replayed: Replayed,
    /// Where no set of up to [`MAX_SET`] fits: the largest micro-batch's answers so far (one search, or two where
    /// the batch needs gradient accumulation), and the search under way.
    batches: Vec<Option<u64>>,
    search: Option<Search>,
}

impl FittingSet {
    /// The fitting set with the lowest highest cost, then the fewest changes, then the lowest total cost, then the
    /// lowest peak, among the changes that save memory on their own (`levers`), one per key; where none fits, the
    /// free and speed changes with the largest micro-batch that fits. At most `budget` replays (`None`: any
    /// number); `None` where it needs more.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn within(
        &mut self,
        arch: &Architecture,
        plan: &Plan,
        base: u64,
        all: &[Change],
        levers: &[Suggestion],
        cap: u64,
        budget: &mut Option<u32>,
    ) -> Option<Option<Suggestion>> {
        let useful: Vec<&Change> = all
            .iter()
            .filter(|c| levers.iter().any(|l| l.changes[0] == **c))
            .collect();
        let mut best: Option<(Key, Vec<usize>)> = None;
        let (weighed, replayed) = (&mut self.weighed, &mut self.replayed);
        let mut check = |set: &[usize]| -> Result<Option<u64>, Paused> {
            let key = set_key(set);
            let at = match weighed.binary_search_by_key(&key, |w| w.0) {
                Ok(at) => return Ok(weighed[at].1),
                Err(at) => at,
            };
            let changes: Vec<&Change> = set.iter().map(|&i| useful[i]).collect();
            let p = apply(plan, &changes);
            // The allocated peak (exact in the rough estimate) rules a set out before any replay.
            let fits = if estimate_rough(arch, &p).device_bytes_uncached() > cap {
                None
            } else {
                let e = replayed
                    .within(budget, |r| estimate_on_within(arch, &p, cap, r))
                    .ok_or(Paused)?;
                *replayed = Replayed::default();
                (e.device_bytes <= cap).then_some(e.device_bytes)
            };
            weighed.insert(at, (key, fits));
            Ok(fits)
        };
        let mut set = Vec::with_capacity(MAX_SET);
        walk(0, &useful, &mut set, &mut best, &mut check).ok()?;
        let changes: Vec<&Change> = match best {
            Some((_, set)) => set.iter().map(|&i| useful[i]).collect(),
            None => {
                // Nothing fits within MAX_SET changes: every free and speed change, then the largest micro-batch.
                let mut cheap: Vec<&Change> = Vec::new();
                for c in &useful {
                    if c.cost != Cost::Quality
                        && c.key != "b"
                        && !cheap.iter().any(|x| x.key == c.key)
                    {
                        cheap.push(c);
                    }
                }
                let p = apply(plan, &cheap);
                let lower = |b: u64| batch_change(plan, b, format!("Lower the micro-batch to {b}"));
                let Some(b) = self.max_batch(arch, 0, &p, cap, budget)? else {
                    return Some(None);
                };
                let mut batch = lower(b);
                // Accumulating keeps a gradient buffer between micro-batches: solve again with it when the batch
                // needs it.
                if let Some(ga) = batch.also.first().and_then(|s| s.value.parse::<u64>().ok()) {
                    let mut q = p.clone();
                    q.grad_accumulation = ga;
                    let Some(b) = self.max_batch(arch, 1, &q, cap, budget)? else {
                        return Some(None);
                    };
                    batch = lower(b);
                }
                let with = self.replayed.within(budget, |r| {
                    let mut changes = cheap.clone();
                    changes.push(&batch);
                    suggestion_within(arch, plan, base, &changes, Some(cap), r)
                })?;
                return Some(Some(with));
            }
        };
        self.replayed
            .within(budget, |r| {
                suggestion_within(arch, plan, base, &changes, Some(cap), r)
            })
            .map(Some)
    }

    /// The answer of the `k`-th largest-batch search (of `plan` on `cap`), a probe per allowed replay; `None` where
    /// the allowance ran out first.
    fn max_batch(
        &mut self,
        arch: &Architecture,
        k: usize,
        plan: &Plan,
        cap: u64,
        budget: &mut Option<u32>,
    ) -> Option<Option<u64>> {
        if let Some(answer) = self.batches.get(k) {
            return Some(*answer);
        }
        let search = self.search.get_or_insert_with(|| Search::batch(plan, cap));
        loop {
            match budget {
                Some(0) => return None,
                Some(n) => *n -= 1,
                None => {}
            }
            if let Some(answer) = search.step(arch) {
                self.batches.push(answer);
                self.search = None;
                return Some(answer);
            }
        }
    }
}

/// A set of at most [`MAX_SET`] indices, each below 2^16 - 1 (a plan has a few dozen candidates), as one number:
/// each index plus one in 16 bits of its own.
fn set_key(set: &[usize]) -> u64 {
    const _: () = assert!(MAX_SET <= 4, "a set's key holds four indices");
    set.iter()
        .enumerate()
        .map(|(k, &i)| ((i as u64 + 1) & 0xffff) << (16 * k))
        .sum()
}

/// Walks the sets of `useful` changes from `start` on, growing `set`, and keeps the best that `check` finds fits.
fn walk(
    start: usize,
    useful: &[&Change],
    set: &mut Vec<usize>,
    best: &mut Option<(Key, Vec<usize>)>,
    check: &mut Check,
) -> Result<(), Paused> {
    if !set.is_empty() {
        let max_cost = set
            .iter()
            .map(|&i| useful[i].cost)
            .max()
            .unwrap_or(Cost::Free);
        let key = (
            max_cost,
            set.len(),
            set.iter().map(|&i| useful[i].cost as usize).sum(),
            0,
        );
        let worse = best
            .as_ref()
            .is_some_and(|(b, _)| (b.0, b.1, b.2) < (key.0, key.1, key.2));
        if worse {
            return Ok(());
        }
        if let Some(bytes) = check(set)? {
            let key = (key.0, key.1, key.2, bytes);
            if best.as_ref().is_none_or(|(b, _)| key < *b) {
                *best = Some((key, set.clone()));
            }
            return Ok(());
        }
    }
    if set.len() == MAX_SET {
        return Ok(());
    }
    for i in start..useful.len() {
        // No two changes of a set set one key: the later would undo the earlier's label.
        if set.iter().any(|&j| {
            useful[j]
                .settings()
                .any(|(k, _)| useful[i].settings().any(|(k2, _)| k2 == k))
        }) {
            continue;
        }
        set.push(i);
        walk(i + 1, useful, set, best, check)?;
        set.pop();
    }
    Ok(())
}
