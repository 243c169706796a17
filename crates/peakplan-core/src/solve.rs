//! The inverse questions: the largest micro-batch and the longest sequence that fit a memory budget.

use crate::arch::Architecture;
use crate::engine::{estimate_on_within, estimate_rough, fits_on_within, Replayed};
use crate::plan::{Plan, MAX_BATCH, MAX_SEQ};

/// Narrows a bracket where `fits` holds at `good` and fails at `bad` until they are neighbours; returns `good`.
fn close(mut good: u64, mut bad: u64, mut fits: impl FnMut(u64) -> bool) -> u64 {
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if fits(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

/// Largest value in `lo..=hi` for which `fits` holds, given that it is monotone (true then false) and holds at
/// `lo - 1`; `lo - 1` when it fails at `lo`.
fn bisect(lo: u64, hi: u64, mut fits: impl FnMut(u64) -> bool) -> u64 {
    // Exponential probe first: most answers are small, and it keeps the search short.
    let (mut good, mut bad) = (lo - 1, hi + 1);
    let mut step = 1u64;
    while good + step < bad {
        if fits(good + step) {
            good += step;
            step = step.saturating_mul(2);
        } else {
            bad = good + step;
            break;
        }
    }
    close(good, bad, fits)
}

/// The search for the largest value in `1..=max` whose plan needs at most `capacity_bytes`, one replayed probe
/// at a time ([`Steps::step`]), so that a page can run each probe in a task of its own; [`max_batch`] and
/// [`max_seq`] run it to the end.
///
/// The replayed estimate costs a hundred rough ones and is no smooth curve: blocks round to 2 MiB, and near the
/// card's limit the allocator releases its cache and retries, so the figure bends and can even fall. The rough
/// estimate picks the first probe; replayed probes then step by the slope between the last two (the rough
/// slope at first) until one fits and one does not, and bisection closes the bracket. The value found fits by
/// the replay and the next one does not (or is past `max`). The bisection asks only whether a value fits
/// ([`fits_on`]: one replay on the card where a figure may take two).
#[derive(Clone, Debug)]
pub struct Search {
    limit: Limit,
    plan: Plan,
    max: u64,
    capacity_bytes: u64,
    /// The largest value known to fit (0: none yet) and the smallest known not to (`max + 1`: none yet).
    good: u64,
    bad: u64,
    /// The next value the slope phase replays (0 until the rough estimate has picked the first).
    probe: u64,
    /// The last replayed probe and its bytes.
    last: Option<(u64, u64)>,
    /// Bisecting the bracket, the slope phase done.
    closing: bool,
    /// The replays the current probe has run so far (a probe of a plan whose batches vary replays several runs,
    /// [`REPLAYS_A_STEP`] a step); cleared once it is answered.
    replayed: Replayed,
}

/// Replays a step runs at most: one probe of a fixed plan (a card's replay, and the unlimited device's where the
/// card runs out), so a page's task stays one probe long however many runs a probe replays.
const REPLAYS_A_STEP: u32 = 2;

impl Search {
    /// The largest micro-batch for `plan` within `capacity_bytes` ([`max_batch`]), not yet searched.
    pub fn batch(plan: &Plan, capacity_bytes: u64) -> Search {
        Search::new(Limit::Batch, plan, MAX_BATCH, capacity_bytes)
    }

    /// The longest sequence for `plan` within `capacity_bytes` ([`max_seq`]), not yet searched.
    pub fn seq(plan: &Plan, capacity_bytes: u64) -> Search {
        Search::new(Limit::Seq, plan, MAX_SEQ, capacity_bytes)
    }

    /// The search for `limit`: [`Search::batch`] or [`Search::seq`].
    pub fn of(limit: Limit, plan: &Plan, capacity_bytes: u64) -> Search {
        match limit {
            Limit::Batch => Search::batch(plan, capacity_bytes),
            Limit::Seq => Search::seq(plan, capacity_bytes),
        }
    }

    fn new(limit: Limit, plan: &Plan, max: u64, capacity_bytes: u64) -> Search {
        Search {
            limit,
            plan: plan.clone(),
            max,
            capacity_bytes,
            good: 0,
            bad: max.saturating_add(1),
            probe: 0,
            last: None,
            closing: false,
            replayed: Replayed::default(),
        }
    }

    /// The plan at `v` tokens or sequences: the longest sequence moves a stated `lmax` with `s` (see [`max_seq`]).
    fn at(&self, v: u64) -> Plan {
        match self.limit {
            Limit::Batch => Plan {
                micro_batch: v,
                ..self.plan.clone()
            },
            Limit::Seq => Plan {
                seq_len: v,
                len_max: self.plan.len_max.map(|_| v),
                ..self.plan.clone()
            },
        }
    }

    fn rough(&self, arch: &Architecture, v: u64) -> u64 {
        estimate_rough(arch, &self.at(v)).device_bytes
    }

    /// One replayed probe of the slope phase, and the next probe: by the slope between the last two, or into the
    /// bracket's middle where that would leave it. Nothing but replays where the probe needs more than a step's.
    fn slope_probe(&mut self, arch: &Architecture) {
        let cap = self.capacity_bytes;
        let probe = self.probe;
        self.replayed.allow(Some(REPLAYS_A_STEP));
        let Some(e) = estimate_on_within(arch, &self.at(probe), cap, &mut self.replayed) else {
            return;
        };
        self.replayed = Replayed::default();
        let bytes = e.device_bytes;
        let fits = bytes <= cap;
        if fits {
            self.good = probe;
        } else {
            self.bad = probe;
        }
        if self.bad - self.good <= 1 {
            self.closing = true;
            return;
        }
        let slope = match self.last {
            Some((v, b)) if v != probe => bytes.abs_diff(b) / v.abs_diff(probe),
            _ => {
                let width = (probe / 16).max(1);
                self.rough(arch, probe.saturating_add(width))
                    .saturating_sub(self.rough(arch, probe))
                    / width
            }
        }
        .max(1);
        self.last = Some((probe, bytes));
        let mut next = if fits {
            probe.saturating_add((cap - bytes) / slope + 1)
        } else {
            probe.saturating_sub((bytes - cap) / slope + 1)
        };
        // A step that would leave the bracket (or reach 0) goes to its middle instead.
        if next <= self.good || next >= self.bad {
            next = (self.good + (self.bad - self.good) / 2).max(1);
        }
        self.probe = next;
    }
}

/// Work done a step at a time, so that a page can run each step in a task of its own: the searches here, the
/// advisor's ([`crate::advise::AdviceSearch`]) and the GPU table's ([`crate::gpu_choice::GpuFitsSearch`]).
pub trait Steps {
    type Output;

    /// Runs the work a step further; its result once the last step has run.
    fn step(&mut self, arch: &Architecture) -> Option<Self::Output>;

    /// The work run to its end.
    fn run(mut self, arch: &Architecture) -> Self::Output
    where
        Self: Sized,
    {
        loop {
            if let Some(out) = self.step(arch) {
                return out;
            }
        }
    }
}

impl Steps for Search {
    /// The largest value that fits, or `None` when 1 does not.
    type Output = Option<u64>;

    /// Runs the search a step further: at most one replayed probe, or [`REPLAYS_A_STEP`] of its replays (the first
    /// step also weighs rough estimates, which cost no replay). The answer once known.
    fn step(&mut self, arch: &Architecture) -> Option<Option<u64>> {
        let cap = self.capacity_bytes;
        if self.probe == 0 {
            self.probe = bisect(1, self.max, |v| self.rough(arch, v) <= cap).max(1);
        }
        // The slope phase: step toward the limit until both ends are known.
        let stepping = (self.good == 0 || self.bad > self.max)
            && self.probe > self.good
            && self.probe < self.bad;
        if !self.closing && stepping {
            self.slope_probe(arch);
            return None;
        }
        self.closing = true;
        if self.bad - self.good > 1 {
            let mid = self.good + (self.bad - self.good) / 2;
            self.replayed.allow(Some(REPLAYS_A_STEP));
            // Not answered within the step's replays: the search goes on at the next step.
            let fits = fits_on_within(arch, &self.at(mid), cap, &mut self.replayed)?;
            self.replayed = Replayed::default();
            if fits {
                self.good = mid;
            } else {
                self.bad = mid;
            }
            if self.bad - self.good > 1 {
                return None;
            }
        }
        Some((self.good >= 1).then_some(self.good))
    }
}

/// One of the two inverse answers, which a page works out in tasks of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Batch,
    Seq,
}

impl Limit {
    /// Both, in the order they are worked out: the longest sequence completes a plan's limits.
    pub const BOTH: [Limit; 2] = [Limit::Batch, Limit::Seq];
}

/// The largest micro-batch for which `nvidia-smi` memory stays within `capacity_bytes`, keeping the rest of the plan.
pub fn max_batch(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<u64> {
    Search::batch(plan, capacity_bytes).run(arch)
}

/// The longest sequence for which `nvidia-smi` memory stays within `capacity_bytes`, keeping the rest of the plan.
/// Where batch lengths vary, the longest sequence is the data's longest (`lmax`): a stated one moves with `s`,
/// since a longer `s` with the data's longest held would change nothing.
pub fn max_seq(arch: &Architecture, plan: &Plan, capacity_bytes: u64) -> Option<u64> {
    Search::seq(plan, capacity_bytes).run(arch)
}
