//! ZeRO-3's parameter coordinator replayed over a step's module trace (`partitioned_param_coordinator.py`,
//! DeepSpeed 0.19): which parameters are gathered at each moment of a steady step. Traced on its CPU accelerator
//! (`tools/trace/ds_cpu.sh`, with the coordinator's gathers and releases logged): a module released after its
//! forward because its next use lies beyond `stage3_max_reuse_distance` is gathered again by the prefetcher a few
//! modules later, for its backward, so a small model ends its forward with every parameter gathered whatever the
//! distance; a large one gathers ahead until `stage3_max_live_parameters` are live.
//!
//! The replay follows the coordinator's rules for a step whose trace is complete (every step after the first):
//! - each hooked module's fetch (containers too) gathers its own parameters, then prefetches: it walks the
//!   parameter trace from where the last walk stopped, skipping what is gathered, and gathers the next
//!   parameters until `stage3_prefetch_bucket_size` elements are on their way (at least one parameter, however
//!   large), never past `stage3_max_live_parameters` live;
//! - a module's release keeps a parameter the prefetcher already walked past for a later use
//!   (`__most_recent_step_id_param_fetched_for`), and one used again before `stage3_max_reuse_distance`
//!   elements of parameters are fetched in between (`__params_to_release`); it releases the rest once no running
//!   module holds them.

use super::count::Count;

/// A parameter the coordinator gathers and releases (persistent ones, never released, are not replayed).
#[derive(Clone, Copy)]
pub(super) struct Param {
    pub numel: Count,
    pub bytes: Count,
}

/// One moment of the step, where the replay records what is gathered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Moment {
    /// Forward has ended.
    Forward,
    /// The loss's backward: the root modules' backward has begun, the head's not yet.
    Loss,
    /// Inside the last layer's backward (the largest of its moments).
    Layers,
    /// The end of backward.
    End,
}

/// What happens, in order: a module's fetch (its pre-forward or pre-backward hook), its release (the
/// post-hook), or a moment to record.
#[derive(Clone, Copy, Debug)]
pub(super) enum Event {
    Fetch(usize),
    Release(usize),
    Mark(Moment),
}

/// A step's module trace: the parameters, each module's own parameter (containers and persistent-only modules
/// have none; a Hugging Face module owns at most one weight that is not persistent here), and the events of
/// forward then backward.
#[derive(Default)]
pub(super) struct Trace {
    pub params: Vec<Param>,
    pub modules: Vec<Option<usize>>,
    pub events: Vec<Event>,
}

/// The coordinator's limits, in elements.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    pub prefetch_bucket: Count,
    pub max_live: Count,
    pub max_reuse: Count,
}

/// Bytes gathered at each [`Moment`] (the largest where a moment is recorded more than once).
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Gathered {
    pub forward: Count,
    pub loss: Count,
    pub layers: Count,
    pub end: Count,
}

impl Gathered {
    fn record(&mut self, moment: Moment, bytes: Count) {
        let slot = match moment {
            Moment::Forward => &mut self.forward,
            Moment::Loss => &mut self.loss,
            Moment::Layers => &mut self.layers,
            Moment::End => &mut self.end,
        };
        *slot = slot.max(bytes);
    }
}

/// The coordinator's state through one step.
struct State<'a> {
    trace: &'a Trace,
    limits: Limits,
    /// The parameter trace: (parameter, the fetch it serves), in fetch order.
    queue: Vec<(usize, usize)>,
    /// Where the prefetcher's walk stopped.
    head: usize,
    /// For each fetch, the next fetch of the same parameter (for the reuse distance).
    next_use: Vec<Option<usize>>,
    /// Each module's latest fetch.
    fetched_at: Vec<usize>,
    /// Elements of parameters fetched before each fetch: `before[k]` sums fetches `0..k`.
    before: Vec<Count>,
    gathered: Vec<bool>,
    /// Running modules holding each parameter.
    holders: Vec<u32>,
    most_recent: Vec<Option<usize>>,
    /// Fetches so far (the coordinator's `__step_id`).
    step: usize,
    live_numel: Count,
    live_bytes: Count,
}

impl State<'_> {
    fn gather(&mut self, p: usize) {
        if !self.gathered[p] {
            self.gathered[p] = true;
            self.live_numel += self.trace.params[p].numel;
            self.live_bytes += self.trace.params[p].bytes;
        }
    }

    fn fetch(&mut self, m: usize) {
        self.fetched_at[m] = self.step;
        if let Some(p) = self.trace.modules[m] {
            self.gather(p);
            self.holders[p] += 1;
            // The module's own entry leaves the queue (unless a prefetch has taken it already).
            if self.most_recent[p].is_none_or(|r| r < self.step) {
                if let Some(&(q, at)) = self.queue.get(self.head) {
                    self.most_recent[q] = Some(at);
                    self.head += 1;
                }
            }
        }
        // Prefetch the next parameters not gathered, up to the bucket, within the live cap.
        let budget = (self.limits.max_live - self.live_numel).min(self.limits.prefetch_bucket);
        let mut prefetching = 0.0;
        while prefetching < budget {
            let Some(&(p, at)) = self.queue.get(self.head) else {
                break;
            };
            self.head += 1;
            self.most_recent[p] = Some(self.most_recent[p].map_or(at, |r| r.max(at)));
            if !self.gathered[p] {
                self.gather(p);
                prefetching += self.trace.params[p].numel;
            }
        }
        self.step += 1;
    }

    /// Whether module `m`'s parameter is used again within the reuse distance of the fetches from `self.step`
    /// on (a module with a parameter has no children, so nothing fetched it since its own fetch).
    fn reused_soon(&self, m: usize) -> bool {
        self.next_use[self.fetched_at[m]]
            .is_some_and(|k| self.before[k] - self.before[self.step] < self.limits.max_reuse)
    }

    fn release(&mut self, m: usize) {
        let Some(p) = self.trace.modules[m] else {
            return;
        };
        self.holders[p] = self.holders[p].saturating_sub(1);
        let walked_past = self.most_recent[p].is_some_and(|r| r > self.step);
        if self.gathered[p] && self.holders[p] == 0 && !walked_past && !self.reused_soon(m) {
            self.gathered[p] = false;
            self.live_numel -= self.trace.params[p].numel;
            self.live_bytes -= self.trace.params[p].bytes;
        }
    }
}

/// Replays a complete-trace step of `trace` under `limits`: the bytes gathered at each moment.
pub(super) fn replay(trace: &Trace, limits: Limits) -> Gathered {
    let fetches: Vec<usize> = trace
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Fetch(m) => Some(*m),
            _ => None,
        })
        .collect();
    let n = trace.params.len();
    let mut queue = Vec::with_capacity(fetches.len());
    let mut before = Vec::with_capacity(fetches.len() + 1);
    let mut sum = 0.0;
    for (k, &m) in fetches.iter().enumerate() {
        before.push(sum);
        if let Some(p) = trace.modules[m] {
            queue.push((p, k));
            sum += trace.params[p].numel;
        }
    }
    before.push(sum);
    let mut next_use = vec![None; fetches.len()];
    let mut later: Vec<Option<usize>> = vec![None; n];
    for (k, &m) in fetches.iter().enumerate().rev() {
        if let Some(p) = trace.modules[m] {
            next_use[k] = later[p];
            later[p] = Some(k);
        }
    }
    let mut st = State {
        trace,
        limits,
        queue,
        head: 0,
        next_use,
        fetched_at: vec![0; trace.modules.len()],
        before,
        gathered: vec![false; n],
        holders: vec![0; n],
        most_recent: vec![None; n],
        step: 0,
        live_numel: 0.0,
        live_bytes: 0.0,
    };
    let mut out = Gathered::default();
    for e in &trace.events {
        match *e {
            Event::Fetch(m) => st.fetch(m),
            Event::Release(m) => st.release(m),
            Event::Mark(moment) => out.record(moment, st.live_bytes),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three leaf modules of one parameter each under a root, forward then backward, as the coordinator's log
    /// shows them for a one-layer model: embedding, layer, head.
    fn three(numel: [Count; 3]) -> Trace {
        let params = numel
            .iter()
            .map(|&n| Param {
                numel: n,
                bytes: 2.0 * n,
            })
            .collect();
        let modules = vec![None, Some(0), Some(1), Some(2)];
        use Event::*;
        let events = vec![
            Fetch(0),
            Fetch(1),
            Release(1),
            Fetch(2),
            Release(2),
            Fetch(3),
            Release(3),
            Release(0),
            Mark(Moment::Forward),
            Fetch(0),
            Mark(Moment::Loss),
            Fetch(3),
            Release(3),
            Fetch(2),
            Mark(Moment::Layers),
            Release(2),
            Fetch(1),
            Mark(Moment::End),
        ];
        Trace {
            params,
            modules,
            events,
        }
    }

    /// Replays [`three`]'s trace under `limits` and checks the bytes at each moment: forward, loss, layers, end.
    fn check(limits: Limits, expect: [Count; 4]) {
        let g = replay(&three([100.0, 10.0, 100.0]), limits);
        assert_eq!([g.forward, g.loss, g.layers, g.end], expect, "{g:?}");
    }

    #[test]
    fn a_far_reuse_is_released_then_prefetched_back_for_backward() {
        // Everything within the distance: the prefetcher gathers one parameter ahead of each fetch, and nothing
        // is released before its backward.
        let all = Limits {
            prefetch_bucket: 5.0,
            max_live: 1e9,
            max_reuse: 1e9,
        };
        check(all, [420.0, 420.0, 220.0, 200.0]);
        // A distance of 150: the embedding (next used 220 elements on) and the layer (200) are released after
        // their forward; the head's fetch prefetches the layer back, and the root's backward fetch the embedding.
        let short = Limits {
            max_reuse: 150.0,
            ..all
        };
        check(short, [220.0, 420.0, 220.0, 200.0]);
    }

    #[test]
    fn the_live_cap_stops_prefetching_but_not_fetching() {
        // Nothing reused within a distance of 0; a prefetch takes one parameter however large while the live
        // elements are under the cap, none once they are over it.
        let capped = Limits {
            prefetch_bucket: 1e9,
            max_live: 50.0,
            max_reuse: 0.0,
        };
        check(capped, [0.0, 200.0, 220.0, 200.0]);
    }
}
