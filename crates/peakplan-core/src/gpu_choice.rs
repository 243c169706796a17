//! Which GPU to run a plan on: the plan against every bundled GPU, with the largest micro-batch, the longest
//! sequence and the fewest GPUs of each kind that hold it.

use crate::advise::FreeChanges;
use crate::advise::{self, Change};
use crate::arch::Architecture;
use crate::engine::{
    estimate_on_within, estimate_rough, fits_on_within, needs_bytes_within, needs_on_card,
    Estimate, Replayed, CUDA_CONTEXT_BYTES,
};
use crate::plan::Plan;
use crate::presets::{GpuPreset, GPUS};
use crate::solve::{Limit, Search, Steps};
use crate::units::{self, format_bytes};
use serde::Serialize;

/// The most GPUs [`GpuFit::gpus_needed`] tries: every count from one up to this.
pub const MAX_GPUS_SEARCHED: u64 = 64;

/// How a plan fares on one bundled GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuFit {
    pub id: &'static str,
    pub name: &'static str,
    pub short_name: &'static str,
    pub capacity_bytes: u64,
    /// What `nvidia-smi` would show on each GPU for the plan as it is (with its own GPU count).
    pub device_bytes: u64,
    /// The smallest GPU on which the plan's step runs ([`needs_bytes`]; the same on every row): what a row that
    /// does not fit is short of.
    pub needs_bytes: u64,
    pub fits: bool,
    /// Largest micro-batch that fits at the plan's sequence length.
    pub max_batch: Option<u64>,
    /// Longest sequence that fits at the plan's micro-batch.
    pub max_seq: Option<u64>,
    /// The fewest GPUs of this kind (from [`GPU_COUNTS`]) that hold the plan: one as it is, more sharded with
    /// ZeRO-3 / FSDP full shard (or split by layers, when the plan splits layers). None: not even 64; sharding
    /// splits parameters, gradients and optimizer states, never a GPU's own activations and logits.
    pub gpus_needed: Option<u64>,
    /// Where the free changes of [`advise::free_changes`] together need fewer GPUs of this kind than
    /// `gpus_needed` (or hold a plan that not even 64 do): that count. None where they do not lower it.
    pub gpus_needed_with_free_changes: Option<u64>,
    /// The free changes that lower the count, when `gpus_needed_with_free_changes` is set; else empty.
    pub free_changes: Vec<Change>,
    /// Whether `max_batch` and `max_seq` are worked out ([`add_row_limits`]); until then both are None.
    #[serde(skip)]
    pub limits_known: bool,
}

impl GpuFit {
    /// The verdict in words: "fits, 4.98 GiB free" or "850 MiB short"; a saturated need (beyond `u64`) has no
    /// shortfall to give, only that no GPU holds it.
    pub fn verdict(&self) -> String {
        if self.device_bytes == u64::MAX {
            format!("needs {}", units::SATURATED_BYTES)
        } else if self.fits {
            format!(
                "fits, {} free",
                format_bytes(self.capacity_bytes - self.device_bytes)
            )
        } else {
            // Short of the smallest card that runs it.
            let need = needs_on_card(self.needs_bytes, self.device_bytes, self.capacity_bytes);
            format!(
                "{} short",
                format_bytes(need.saturating_sub(self.capacity_bytes))
            )
        }
    }
}

/// The plan on `n` GPUs: a single GPU keeps no sharding; several shard the parameters, gradients and optimizer
/// states (ZeRO-3), or keep the plan's layer split, since data parallelism alone copies the model to each.
pub fn plan_on_gpus(plan: &Plan, n: u64) -> Plan {
    let mut p = plan.clone();
    p.gpus = n;
    if n > 1 && !p.split_layers {
        p.zero = 3;
    }
    p
}

/// The plan on every bundled GPU, smallest memory first.
pub fn gpu_fits(arch: &Architecture, plan: &Plan) -> Vec<GpuFit> {
    let mut rows = gpu_fits_without_limits(arch, plan);
    for r in &mut rows {
        add_row_limits(arch, plan, r);
    }
    rows
}

/// Works out a row's largest micro-batch and longest sequence for `plan` on that row's GPU.
pub fn add_row_limits(arch: &Architecture, plan: &Plan, row: &mut GpuFit) {
    for limit in Limit::BOTH {
        add_row_limit(arch, plan, row, limit);
    }
}

/// [`add_row_limits`] one search at a time (a page runs each in a task of its own): the row's limits are known
/// once the longest sequence is, worked out second.
pub fn add_row_limit(arch: &Architecture, plan: &Plan, row: &mut GpuFit, limit: Limit) {
    let answer = Search::of(limit, plan, row.capacity_bytes).run(arch);
    set_row_limit(row, limit, answer);
}

/// A row's limit, once its search (`solve::Search::of`, a page runs it a replayed probe at a time) has ended (the
/// longest sequence completes the row's limits).
pub fn set_row_limit(row: &mut GpuFit, limit: Limit, answer: Option<u64>) {
    match limit {
        Limit::Batch => row.max_batch = answer,
        Limit::Seq => {
            row.max_seq = answer;
            row.limits_known = true;
        }
    }
}

/// The plan on `gpu` where its figures depend on the card (vLLM colocated takes a share of it), else none.
fn on_card(plan: &Plan, gpu: &GpuPreset) -> Option<Plan> {
    if plan.task != crate::plan::Task::Grpo
        || plan.generation != crate::plan::Generation::VllmColocate
    {
        return None;
    }
    let id = crate::presets::GpuId::all().find(|x| x.id() == gpu.id)?;
    Some(Plan {
        gpu: id,
        ..plan.clone()
    })
}

/// [`gpu_fits`] without the rows' limits, which cost a dozen replays each: a page shows the table at once and
/// works them out one row at a time ([`add_row_limits`]).
pub fn gpu_fits_without_limits(arch: &Architecture, plan: &Plan) -> Vec<GpuFit> {
    GpuFitsSearch::new(plan).run(arch)
}

/// [`gpu_fits_without_limits`] a replay at a time, so that a page runs each step in a task of its own: the plan on
/// a device without limit, what it needs, each GPU's row (its figures on that card, and the fewest GPUs of its size
/// that hold the plan), then the free changes and the counts they would need. A step runs at most one replay, and
/// as much else as needs none; the replays of the plan itself are shared by all of these ([`Replayed`]).
#[derive(Clone, Debug)]
pub struct GpuFitsSearch {
    plan: Plan,
    replayed: Replayed,
    /// The plan's estimate without limit, then what it needs, once worked out.
    unlimited: Option<Estimate>,
    needs: Option<u64>,
    /// The GPU counts worked out so far ([`GpuCounts`]), kept from row to row.
    counts: Vec<Counted>,
    /// Every bundled GPU, smallest first.
    gpus: Vec<&'static GpuPreset>,
    rows: Vec<GpuFit>,
    /// The row under way: its device bytes once known, and the replays of its own plan (vLLM colocated).
    row_device_bytes: Option<u64>,
    row_replayed: Replayed,
    /// Once the rows are done and one needs several GPUs: the free changes as they are weighed, then with their
    /// plan, that plan's counts, and the next row to count for it.
    free: Option<FreeChanges>,
    free_plan: Option<(Vec<Change>, Plan)>,
    free_counts: Vec<Counted>,
    free_row: usize,
}

impl GpuFitsSearch {
    pub fn new(plan: &Plan) -> Self {
        // Ordered by insertion rather than a sort call: eighteen entries, and no sort code in the page's wasm.
        let mut gpus: Vec<&'static GpuPreset> = Vec::with_capacity(GPUS.len());
        for g in GPUS {
            let at = gpus.partition_point(|o| o.capacity_bytes <= g.capacity_bytes);
            gpus.insert(at, g);
        }
        GpuFitsSearch {
            plan: plan.clone(),
            replayed: Replayed::default(),
            unlimited: None,
            needs: None,
            counts: Vec::with_capacity(MAX_GPUS_SEARCHED as usize),
            gpus,
            rows: Vec::new(),
            row_device_bytes: None,
            row_replayed: Replayed::default(),
            free: None,
            free_plan: None,
            free_counts: Vec::new(),
            free_row: 0,
        }
    }

    /// The plan the rows are for.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Goes on with at most `budget` replays; every row once the last is complete.
    fn go(&mut self, arch: &Architecture, budget: &mut Option<u32>) -> Option<Vec<GpuFit>> {
        let plan = self.plan.clone();
        let unlimited = match &self.unlimited {
            Some(u) => u.clone(),
            None => {
                let u = self
                    .replayed
                    .within(budget, |r| estimate_on_within(arch, &plan, u64::MAX, r))?;
                self.unlimited.insert(u).clone()
            }
        };
        // What the plan needs, the smallest card it runs on: a bisection of replays.
        let needs = match self.needs {
            Some(n) => n,
            None => *self.needs.insert(
                self.replayed
                    .within(budget, |r| needs_bytes_within(arch, &plan, r))?,
            ),
        };
        while let Some(g) = self.gpus.get(self.rows.len()).copied() {
            let device_bytes = match self.row_device_bytes {
                Some(d) => d,
                None => {
                    // vLLM colocated takes its share of each row's card, not of the plan's.
                    let d = match on_card(&plan, g) {
                        Some(row) => {
                            let r = &mut self.row_replayed;
                            let u =
                                r.within(budget, |r| estimate_on_within(arch, &row, u64::MAX, r))?;
                            device_bytes_within(arch, &row, &u, g.capacity_bytes, r, budget)?
                        }
                        None => device_bytes_within(
                            arch,
                            &plan,
                            &unlimited,
                            g.capacity_bytes,
                            &mut self.replayed,
                            budget,
                        )?,
                    };
                    *self.row_device_bytes.insert(d)
                }
            };
            let fewest = fewest_kept(arch, &plan, &mut self.counts, g.capacity_bytes, budget)?;
            self.rows
                .push(row_on(&plan, g, device_bytes, needs, fewest));
            self.row_device_bytes = None;
            self.row_replayed = Replayed::default();
        }
        self.with_free_changes(arch, budget)?;
        Some(std::mem::take(&mut self.rows))
    }

    /// Sets, on each row that needs more than one GPU, how many the free changes need instead where that is fewer.
    /// Their plan's counts are worked out once for every GPU (one [`GpuCounts`]), and only when a row needs several.
    fn with_free_changes(&mut self, arch: &Architecture, budget: &mut Option<u32>) -> Option<()> {
        if self.rows.iter().all(|r| r.gpus_needed == Some(1)) {
            return Some(());
        }
        let (free, free_plan) = match &self.free_plan {
            Some(f) => f.clone(),
            None => {
                let weighing = self
                    .free
                    .get_or_insert_with(|| FreeChanges::new(&self.plan));
                let free = weighing.step_within(arch, budget)?;
                let refs: Vec<&Change> = free.iter().collect();
                let free_plan = advise::apply(&self.plan, &refs);
                self.free_plan.insert((free, free_plan)).clone()
            }
        };
        if free.is_empty() {
            return Some(());
        }
        while let Some(r) = self.rows.get(self.free_row) {
            let (cap, now) = (r.capacity_bytes, r.gpus_needed);
            if now != Some(1) {
                let n = fewest_kept(arch, &free_plan, &mut self.free_counts, cap, budget)?;
                if let Some(n) = n.filter(|&n| n < now.unwrap_or(u64::MAX)) {
                    let r = &mut self.rows[self.free_row];
                    r.gpus_needed_with_free_changes = Some(n);
                    r.free_changes = free.clone();
                }
            }
            self.free_row += 1;
        }
        Some(())
    }
}

impl Steps for GpuFitsSearch {
    type Output = Vec<GpuFit>;

    /// Runs a step, at most one replay; every row once the last has run.
    fn step(&mut self, arch: &Architecture) -> Option<Vec<GpuFit>> {
        self.go(arch, &mut Some(1))
    }

    /// Runs every step at once (without a limit nothing pauses; were it to, the steps would go on from there).
    fn run(mut self, arch: &Architecture) -> Vec<GpuFit> {
        match self.go(arch, &mut None) {
            Some(rows) => rows,
            None => loop {
                if let Some(rows) = self.step(arch) {
                    return rows;
                }
            },
        }
    }
}

/// [`GpuCounts::fewest_within`] for `plan`, with its counts kept in `kept` from one call to the next (a stepped
/// search's state).
pub fn fewest_kept(
    arch: &Architecture,
    plan: &Plan,
    kept: &mut Vec<Counted>,
    capacity_bytes: u64,
    budget: &mut Option<u32>,
) -> Option<Option<u64>> {
    let mut c = GpuCounts {
        arch,
        plan,
        counts: std::mem::take(kept),
    };
    let out = c.fewest_within(capacity_bytes, budget);
    *kept = c.counts;
    out
}

/// The plan's row on GPU `g`, given its device bytes there, what it needs and the fewest GPUs of that size that
/// hold it.
fn row_on(
    plan: &Plan,
    g: &GpuPreset,
    device_bytes: u64,
    needs: u64,
    fewest: Option<u64>,
) -> GpuFit {
    let fits = device_bytes <= g.capacity_bytes;
    // A plan that fits as planned needs no more GPUs than it has.
    let gpus_needed = if fits {
        Some(fewest.map_or(plan.gpus, |n| n.min(plan.gpus)))
    } else {
        fewest
    };
    GpuFit {
        id: g.id,
        name: g.name,
        short_name: g.short_name,
        capacity_bytes: g.capacity_bytes,
        device_bytes,
        needs_bytes: needs,
        fits,
        max_batch: None,
        max_seq: None,
        gpus_needed,
        gpus_needed_with_free_changes: None,
        free_changes: Vec::new(),
        limits_known: false,
    }
}

/// A plan's device bytes on a GPU of `capacity_bytes`, given its estimate on a device without limit. The
/// capacity matters only where the step would reserve more than the card but allocates less: there the
/// allocator frees its cache and retries, so only there is the step replayed again. A card below the
/// allocated peak cannot hold the plan and reports what it would need, as on an unlimited device.
pub fn device_bytes_on(
    arch: &Architecture,
    plan: &Plan,
    unlimited: &Estimate,
    capacity_bytes: u64,
) -> u64 {
    device_bytes_within(
        arch,
        plan,
        unlimited,
        capacity_bytes,
        &mut Replayed::default(),
        &mut None,
    )
    .unwrap_or(unlimited.device_bytes)
}

/// [`device_bytes_on`] with `plan`'s replays in `replayed`, at most `budget` of them run.
fn device_bytes_within(
    arch: &Architecture,
    plan: &Plan,
    unlimited: &Estimate,
    capacity_bytes: u64,
    replayed: &mut Replayed,
    budget: &mut Option<u32>,
) -> Option<u64> {
    let lowest = unlimited
        .peak_allocated_bytes
        .saturating_add(CUDA_CONTEXT_BYTES);
    if capacity_bytes >= unlimited.device_bytes || capacity_bytes < lowest {
        return Some(unlimited.device_bytes);
    }
    replayed
        .within(budget, |r| {
            estimate_on_within(arch, plan, capacity_bytes, r)
        })
        .map(|e| e.device_bytes)
}

/// One GPU count's figures, as far as worked out: the lowest device bytes any replay can give (the allocated
/// peak, the CUDA context and paged states), its estimate without limit once needed, and its replays.
#[derive(Clone, Debug)]
pub struct Counted {
    lowest: u64,
    unlimited: Option<Estimate>,
    replayed: Replayed,
}

/// The fewest GPUs of a capacity that hold a plan ([`plan_on_gpus`]), over every count up to
/// [`MAX_GPUS_SEARCHED`]. Each count's allocated peak (the rough estimate's, exact) rules out the counts that
/// cannot fit; a count that may is replayed once without limit for all the GPUs asked about, and on a card
/// ([`fits_on`]) only where the unlimited replay reserved more than it holds.
pub struct GpuCounts<'a> {
    arch: &'a Architecture,
    plan: &'a Plan,
    /// Per count at index `n - 1`, as far as worked out.
    counts: Vec<Counted>,
}

impl<'a> GpuCounts<'a> {
    pub fn new(arch: &'a Architecture, plan: &'a Plan) -> GpuCounts<'a> {
        GpuCounts {
            arch,
            plan,
            counts: Vec::with_capacity(MAX_GPUS_SEARCHED as usize),
        }
    }

    /// Whether `n` GPUs of `capacity_bytes` hold the plan, running at most `budget` replays; `None` where it
    /// needs more.
    fn holds_within(
        &mut self,
        n: u64,
        capacity_bytes: u64,
        budget: &mut Option<u32>,
    ) -> Option<bool> {
        while (self.counts.len() as u64) < n {
            let count = self.counts.len() as u64 + 1;
            let e = estimate_rough(self.arch, &plan_on_gpus(self.plan, count));
            self.counts.push(Counted {
                lowest: e.device_bytes_uncached(),
                unlimited: None,
                replayed: Replayed::default(),
            });
        }
        let arch = self.arch;
        let c = &mut self.counts[n as usize - 1];
        if c.lowest > capacity_bytes {
            return Some(false);
        }
        let plan = plan_on_gpus(self.plan, n);
        let Counted {
            unlimited,
            replayed,
            ..
        } = c;
        replayed.within(budget, |r| {
            let u = match unlimited {
                Some(u) => u,
                None => unlimited.insert(estimate_on_within(arch, &plan, u64::MAX, r)?),
            };
            if u.device_bytes <= capacity_bytes {
                return Some(true);
            }
            fits_on_within(arch, &plan, capacity_bytes, r)
        })
    }

    /// The fewest GPUs of `capacity_bytes` that hold the plan; none when not even [`MAX_GPUS_SEARCHED`] do.
    /// Every count is tried in order (not a bisection): one GPU shards nothing and two gather layers, so the
    /// figure is not monotone from one to two.
    pub fn fewest(&mut self, capacity_bytes: u64) -> Option<u64> {
        self.fewest_within(capacity_bytes, &mut None).flatten()
    }

    /// [`GpuCounts::fewest`] running at most `budget` replays; `None` where it needs more (a later call goes on
    /// from the replays this one ran).
    pub fn fewest_within(
        &mut self,
        capacity_bytes: u64,
        budget: &mut Option<u32>,
    ) -> Option<Option<u64>> {
        for n in 1..=MAX_GPUS_SEARCHED {
            if self.holds_within(n, capacity_bytes, budget)? {
                return Some(Some(n));
            }
        }
        Some(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::estimate_on;
    use crate::preset_arch;
    use crate::solve;

    fn fits(query: &str) -> Vec<GpuFit> {
        let p = Plan::parse_query(query).plan;
        gpu_fits(preset_arch(&p), &p)
    }

    fn row<'a>(rows: &'a [GpuFit], id: &str) -> &'a GpuFit {
        rows.iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no row {id}"))
    }

    #[test]
    fn every_bundled_gpu_gets_a_row_that_agrees_with_the_solver() {
        let query = "model=llama-3.1-8b&method=lora&b=2&s=2048";
        let rows = fits(query);
        assert_eq!(rows.len(), GPUS.len());
        let p = Plan::parse_query(query).plan;
        let arch = preset_arch(&p);
        for r in &rows {
            // The capacity decides when the allocator frees its cache and retries.
            let need = estimate_on(arch, &p, r.capacity_bytes).device_bytes;
            assert_eq!(r.device_bytes, need, "{}", r.id);
            assert_eq!(r.fits, need <= r.capacity_bytes, "{}", r.id);
            assert_eq!(r.max_batch, solve::max_batch(arch, &p, r.capacity_bytes));
            assert_eq!(r.max_seq, solve::max_seq(arch, &p, r.capacity_bytes));
            // A plan that fits needs one GPU; one that does not needs more, or cannot be held at all.
            assert_eq!(r.fits, r.gpus_needed == Some(1), "{}", r.id);
        }
        // LoRA of an 8B model in bf16 (16 GB of weights) fits an 80 GB card and not a 12 GB one.
        assert!(row(&rows, "a100-80gb").fits);
        assert!(!row(&rows, "rtx-3060-12gb").fits);
    }

    #[test]
    fn rows_worked_out_one_by_one_are_the_table() {
        let p = Plan::parse_query("model=llama-3.1-8b&method=lora&b=3&s=2048").plan;
        let arch = preset_arch(&p);
        let mut rows = gpu_fits_without_limits(arch, &p);
        assert!(rows
            .iter()
            .all(|r| !r.limits_known && r.max_batch.is_none() && r.max_seq.is_none()));
        for r in &mut rows {
            add_row_limits(arch, &p, r);
        }
        assert_eq!(rows, gpu_fits(arch, &p));
        assert!(rows.iter().any(|r| r.max_seq.is_some()));
    }

    #[test]
    fn full_fine_tuning_of_a_70b_model_takes_several_nodes_of_80_gb_cards() {
        // 70B x 16 B (16-bit weights and gradients, fp32 master and Adam moments) is about 1.1 TB before the
        // optimizer step's temporaries: 16 H100s hold 80 GiB of it each, and the step's sqrt temporaries tip
        // them over; on 17 a GPU allocates 75.6 GiB and the allocator reserves 79.1 GiB of the card's 79.6 (counts
        // are not only powers of two).
        let query = "model=llama-2-70b&method=full&prec=amp_bf16&gc=1&b=1&s=2048";
        let rows = fits(query);
        let h100 = row(&rows, "h100-80gb");
        assert!(!h100.fits);
        assert_eq!(h100.max_batch, None);
        assert_eq!(h100.gpus_needed, Some(17));
        let p = Plan::parse_query(query).plan;
        let on = |n| {
            estimate_on(preset_arch(&p), &plan_on_gpus(&p, n), h100.capacity_bytes).device_bytes
        };
        assert!(on(16) > h100.capacity_bytes && on(17) <= h100.capacity_bytes);
        assert_eq!(row(&rows, "mi300x-192gb").gpus_needed, Some(8));
        // Smallest memory first, and more memory never needs more GPUs.
        for w in rows.windows(2) {
            assert!(w[0].capacity_bytes <= w[1].capacity_bytes);
            assert!(
                w[1].gpus_needed.unwrap_or(u64::MAX) <= w[0].gpus_needed.unwrap_or(u64::MAX),
                "{} then {}",
                w[0].id,
                w[1].id
            );
        }
    }

    #[test]
    fn a_row_that_fits_as_planned_needs_no_more_gpus_than_the_plan_has() {
        // 70B QLoRA split over 3 GPUs needs 16.6 GiB on each: a 24 GB A10G holds it as planned, so it needs 3 (it
        // said 4, the next power of two), and a 16 GB T4, which does not, needs 4.
        let rows = fits("model=llama-2-70b&method=qlora&split=1&gpus=3");
        let a10g = row(&rows, "a10g-24gb");
        assert!(a10g.fits);
        assert_eq!(a10g.gpus_needed, Some(3));
        let t4 = row(&rows, "t4-16gb");
        assert!(!t4.fits);
        assert_eq!(t4.gpus_needed, Some(4));
        for r in &rows {
            if r.fits {
                assert!(
                    r.gpus_needed.is_some_and(|n| n <= 3),
                    "{}: {:?}",
                    r.id,
                    r.gpus_needed
                );
            }
        }
        // Every count is tried: the fewest is exact, not a power of two.
        let p = Plan::parse_query("model=llama-2-70b&method=qlora&split=1&gpus=3").plan;
        let mut counts = GpuCounts::new(preset_arch(&p), &p);
        let cap = t4.capacity_bytes;
        assert_eq!(counts.fewest(cap), Some(4));
        let mut holds = |n| counts.holds_within(n, cap, &mut None);
        assert_eq!((holds(3), holds(4)), (Some(false), Some(true)));
    }

    #[test]
    fn a_free_change_that_lowers_the_count_is_named_on_the_row() {
        // Full 70B on H100s with the torch AdamW: its state-sized temporary tips 16 over, so 17 are needed; the
        // fused AdamW (free: it updates in place) lowers the count, and the row says by how much and with what.
        let query = "model=llama-3.1-70b&method=full&prec=amp_bf16&gc=1&b=1&s=2048&opt=adamw_torch";
        let rows = fits(query);
        let h100 = row(&rows, "h100-80gb");
        let with = h100.gpus_needed_with_free_changes.expect("a lower count");
        assert!(with < h100.gpus_needed.expect("a count"), "{h100:?}");
        assert!(h100
            .free_changes
            .iter()
            .any(|c| c.key == "opt" && c.value == "adamw_torch_fused"));
        // The count is the free plan's own fewest count.
        let p = Plan::parse_query(query).plan;
        let refs: Vec<&Change> = h100.free_changes.iter().collect();
        let free = advise::apply(&p, &refs);
        assert_eq!(
            GpuCounts::new(preset_arch(&p), &free).fewest(h100.capacity_bytes),
            Some(with)
        );
        // A row that needs one GPU, or where nothing free lowers the count, names nothing.
        for r in &rows {
            let lowered = r.gpus_needed_with_free_changes.is_some();
            assert_eq!(lowered, !r.free_changes.is_empty(), "{}", r.id);
            assert!(!lowered || r.gpus_needed != Some(1), "{}", r.id);
        }
        let fused = fits("model=llama-3.1-70b&method=full&prec=amp_bf16&gc=1&b=1&s=2048&opt=adamw_torch_fused&loss=fused&liger=1&alloc=expandable");
        assert!(fused
            .iter()
            .all(|r| r.gpus_needed_with_free_changes.is_none()));
    }

    #[test]
    fn the_table_stepped_a_replay_at_a_time_is_the_whole_table() {
        // The page runs a step per task, each at most one replay; stepped, the rows are those of one run, and the
        // steps are at least the replays' count (the plan's own, the needs, then rows' counts and free changes).
        for (q, least_steps) in [
            ("model=llama-3.1-8b&method=qlora&s=1024&gpu=rtx-4090", 3),
            ("model=llama-3.1-8b&method=lora&b=4&s=2048&lens=grouped&lmean=300&lsd=200&gc=1&gpu=rtx-4090", 30),
            ("model=llama-3.1-70b&method=full&prec=amp_bf16&gc=1&b=1&s=2048&opt=adamw_torch", 50),
            ("model=qwen2.5-1.5b&method=lora&task=grpo&gen=vllm_colocate&gens=8&b=8&gpu=rtx-4090", 25),
        ] {
            let p = Plan::parse_query(q).plan;
            let a = preset_arch(&p);
            let mut search = GpuFitsSearch::new(&p);
            let mut steps = 0;
            let rows = loop {
                steps += 1;
                assert!(steps < 2000, "{q}: did not end");
                if let Some(rows) = search.step(a) {
                    break rows;
                }
            };
            assert_eq!(rows, gpu_fits_without_limits(a, &p), "{q}");
            assert!(steps >= least_steps, "{q}: {steps} steps");
        }
    }

    #[test]
    fn a_layer_split_plan_keeps_its_split_when_counting_gpus() {
        let split = plan_on_gpus(&Plan::parse_query("split=1&zero=0").plan, 4);
        assert_eq!((split.gpus, split.zero, split.split_layers), (4, 0, true));
        let sharded = plan_on_gpus(&Plan::parse_query("zero=0").plan, 4);
        assert_eq!((sharded.gpus, sharded.zero), (4, 3));
        let single = plan_on_gpus(&Plan::parse_query("gpus=8&zero=2").plan, 1);
        assert_eq!((single.gpus, single.zero), (1, 2));
    }
}
