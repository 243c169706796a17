//! The page's state: the plan context every component reads ([`Ctx`], provided once by [`provide`]), the planned
//! architecture ("pasted config, else the Hub model once loaded, else preset"), the Hub requests, the settled-plan
//! effect for slow panels, and the one way controls change the plan. It imports no component.

use crate::browser::{self, FetchError};
use crate::history::{Steps, Write};
use crate::hub::{self, Failure, HubModels};
use crate::methods::{sliders_cleared, MethodCache, Pending};
use crate::planner::Computed;
use crate::scale::{Slider, BATCH_SLIDER, RANK_SLIDER, SEQ_SLIDER};
use leptos::prelude::*;
use peakplan_core::hf::MAX_CONFIG_BYTES;
use peakplan_core::hub::{stated_params, ConfigError, HubId, MAX_INFO_BYTES};
use peakplan_core::{preset_arch, Architecture, Diagnostic, Parsed, Plan};

/// Shared page state, provided as context.
#[derive(Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) plan: RwSignal<Plan>,
    /// The plan with the three sliders' values (rank, micro-batch, sequence length) cleared: what the settings'
    /// values and reasons read, so that a slider move re-runs one memo here instead of eighty in the controls.
    pub(crate) steady: Memo<Plan>,
    pub(crate) computed: Memo<Computed>,
    /// The estimates made for the plan shown and kept for others (see [`crate::methods`]).
    pub(crate) methods: StoredValue<MethodCache>,
    pub(crate) custom: RwSignal<Option<Architecture>>,
    /// When the current slider input started, for the latency figure.
    pub(crate) input_started: StoredValue<Option<f64>>,
    /// The plan an advisor card would make, and the card's label, while the card is hovered.
    pub(crate) preview: RwSignal<Option<(Plan, String)>>,
    /// Values the page could not use, shown in the `url-error` banner.
    pub(crate) refused: RwSignal<Refused>,
    /// Hub models fetched this session, the one on its way and the last failure.
    pub(crate) hub: RwSignal<HubModels>,
    /// The plan's Hub model id, if it names one: changes only when the model does, not on every slider move.
    pub(crate) hub_id: Memo<Option<HubId>>,
    /// An access token for gated models: in memory only, sent only to the Hub, never in the URL or storage.
    pub(crate) hub_token: StoredValue<Option<String>>,
    /// The abort controller of the Hub request on its way, for Cancel.
    hub_abort: StoredValue<Option<web_sys::AbortController>, LocalStorage>,
}

/// Values the page refused; the plan kept its other values (and, for these keys, its previous ones).
#[derive(Clone, Default)]
pub(crate) struct Refused {
    /// Bad query parameters of the link the page opened with.
    pub(crate) link: Vec<Diagnostic>,
    /// Values typed or picked in a control since.
    pub(crate) typed: Vec<Diagnostic>,
}

/// How long a slider move's estimates may take together for the other methods' to be made at once too: the next one
/// is made only where the time so far and what the plan's estimates took so far stay within it. A fixed plan's
/// three take about 2 ms in headless Chromium; a varying plan's one 3-9 ms, and its other two follow in tasks of
/// their own (starting the next on time spent alone let a short varying estimate take a second, a 6-8 ms move,
/// and a kept estimate, which took no time now, would have let one start on every move).
const ALL_AT_ONCE_MS: f64 = 4.0;

/// How long the task that fills in the other methods' bars after a slider move goes on making estimates.
const FILL_FOR_MS: f64 = 8.0;

/// Makes the page state from the parsed link and provides it as context; the URL follows the plan from then on.
pub(crate) fn provide(parsed: Parsed) -> Ctx {
    let plan = RwSignal::new(parsed.plan);
    let custom: RwSignal<Option<Architecture>> = RwSignal::new(None);
    let preview: RwSignal<Option<(Plan, String)>> = RwSignal::new(None);
    let hub_models = RwSignal::new(HubModels::default());
    // The methods' estimates made for the plan shown and kept for others; `filled` says another one is made (see
    // `crate::methods`).
    let methods = StoredValue::new(MethodCache::with_clock(browser::now_ms));
    let filled = Trigger::new();
    let computed = Memo::new(move |prev: Option<&Computed>| {
        let p = plan.get();
        let c = custom.get();
        filled.track();
        hub_models.with(|h| {
            // A Hub model not loaded yet: the answer is not shown (see `Ctx::model_ready`), nothing to compute.
            let Some(arch) = planned_arch(&c, h, &p) else {
                return prev
                    .cloned()
                    .unwrap_or_else(|| Computed::new(preset_arch(&p), &p));
            };
            let mut comp = methods
                .try_update_value(|m| {
                    let start = browser::now_ms();
                    let more_now = move |expected_ms: f64| {
                        browser::now_ms() - start + expected_ms <= ALL_AT_ONCE_MS
                    };
                    Computed::assemble(arch, &p, m, prev, more_now)
                })
                .unwrap_or_else(|| Computed::new(arch, &p));
            browser::milestone("peakplan:first-estimate");
            if let Some((after, change)) = preview.get() {
                let e = methods
                    .try_update_value(|m| m.own(arch, &after))
                    .unwrap_or_else(|| peakplan_core::estimate(arch, &after));
                comp.add_preview(e, &change);
            }
            comp
        })
    });
    fill_stale_bars(plan, custom, hub_models, computed, methods, filled);
    // The URL is the state, and the plan's history the browser's: a burst of changes (a slider drag) is one entry,
    // and Back or Forward restore the plan the URL then holds.
    // The write itself waits for the end of the task: `history.replaceState` costs Chromium about 1.8 ms, which
    // sat between a slider move and its repaint; the URL now follows within the same event loop turn, and the
    // changes of one turn are one write (a push if any of them asked for one).
    let steps = StoredValue::new(Steps::default());
    let pending = StoredValue::new(None::<(String, bool)>);
    Effect::new(move |_| {
        let query = plan.with(Plan::to_query);
        let push = match steps.try_update_value(|s| s.write(&query, browser::now_ms())) {
            Some(Write::Push) => true,
            Some(Write::Replace) => false,
            _ => return,
        };
        let scheduled = pending.with_value(Option::is_some);
        pending.update_value(|p| {
            let push = push || p.as_ref().is_some_and(|(_, pushed)| *pushed);
            *p = Some((query, push));
        });
        if !scheduled {
            set_timeout(
                move || {
                    if let Some((query, push)) = pending.try_update_value(Option::take).flatten() {
                        browser::write_query(&query, push);
                    }
                },
                std::time::Duration::ZERO,
            );
        }
    });
    // Dropping the handle keeps the listener: the page lives as long as the tab.
    let _ = window_event_listener_untyped("popstate", move |_| {
        let restored = Plan::parse_query(&browser::query()).plan;
        steps.update_value(|s| s.restored(&restored.to_query()));
        preview.set(None);
        plan.set(restored);
    });
    let hub_id = Memo::new(move |_| plan.with(|p| p.hub.clone()));
    let steady = Memo::new(move |_| plan.with(sliders_cleared));
    let ctx = Ctx {
        plan,
        steady,
        computed,
        methods,
        custom,
        preview,
        input_started: StoredValue::new(None),
        refused: RwSignal::new(Refused {
            link: parsed.diagnostics,
            typed: Vec::new(),
        }),
        hub: hub_models,
        hub_id,
        hub_token: StoredValue::new(None),
        hub_abort: StoredValue::new_local(None),
    };
    // The plan's Hub model is requested once; a failure waits for "Try again".
    Effect::new(move |_| {
        if let Some(id) = hub_id.get() {
            if hub_models.with_untracked(|h| h.needs_fetch(&id)) {
                ctx.load_hub(id, None);
            }
        }
    });
    // Another model picked: a Hub model asked for over the previous one no longer is, nor is its failure shown.
    let model = Memo::new(move |_| plan.with(|p| p.get("model").unwrap_or_default()));
    Effect::new(move |_| {
        let model = model.get();
        let id = hub_id.get_untracked();
        let stale = hub_models.with_untracked(|h| {
            let mut after = h.clone();
            after.model_changed(&model, id.as_ref());
            after != *h
        });
        if stale {
            hub_models.update(|h| h.model_changed(&model, id.as_ref()));
        }
    });
    provide_context(ctx);
    ctx
}

/// A value derived from the plan (and other signals) that tells its readers only when it changes: a slider move
/// then reaches the controls whose value or state it changes, instead of re-running every derived reason and
/// re-setting every control's attributes.
pub(crate) fn memo<T: Clone + PartialEq + Send + Sync + 'static>(
    f: impl Fn() -> T + Send + Sync + 'static,
) -> Signal<T> {
    Memo::new(move |_| f()).into()
}

pub(crate) fn ctx() -> Ctx {
    use_context::<Ctx>().expect("App provides the context")
}

/// Applies an edit to `plan` as every control's does: `change`, then what follows from it (the task's lengths
/// follow the sequence, rules between keys settle); the keys those rules put back, with why.
fn edited(plan: &mut Plan, change: impl FnOnce(&mut Plan)) -> Vec<Diagnostic> {
    let seq_before = plan.seq_len;
    change(plan);
    crate::task::follow_sequence(plan, seq_before);
    crate::task::settle(plan)
}

/// The plans `slider`'s positions beside `position` would show from `plan`, the one `ahead` first; a position
/// that would not change the plan is left out.
fn slider_neighbours(plan: &Plan, slider: Slider, position: u32, ahead: i64) -> Vec<Plan> {
    let scale = slider.scale;
    [ahead, -ahead]
        .iter()
        .filter_map(|d| {
            let at = i64::from(position) + d;
            let value = (at >= i64::from(scale.min) && at <= i64::from(scale.max))
                .then(|| scale.value(at as u32))?;
            let mut next = plan.clone();
            edited(&mut next, |q| (slider.set)(q, value));
            (next != *plan).then_some(next)
        })
        .collect()
}

/// Makes the own estimates of `plans` (a slider's next positions), one a task, as long as no edit came after the
/// moment that asked (number `edits_then`). A task queued by a slider's input runs after the frame it painted,
/// before the next input (a drag's come a frame apart; `requestIdleCallback` found no idle time between them in
/// headless Chromium, and a timeout queued from the next frame ran after that frame's move).
fn prefetch_plans(c: Ctx, mut plans: Vec<Plan>, edits_then: u64, mut pending: Pending) {
    if plans.is_empty() {
        return;
    }
    set_timeout(
        move || {
            if edits() != edits_then {
                return;
            }
            browser::timed("neighbour", || {
                with_planned_untracked(c.custom, c.hub, c.plan, |arch, _| {
                    let Some(arch) = arch else {
                        plans.clear();
                        return;
                    };
                    // One estimate a task, a few replays of it at most: a replay may take 9 ms, a padded plan's
                    // estimate replays four runs, and the next move may come at the next frame.
                    while let Some(next) = plans.first() {
                        match c
                            .methods
                            .try_update_value(|m| m.prefetch_within(arch, next, &mut pending))
                        {
                            // Made: the rest in later tasks.
                            Some(Some(true)) => {
                                plans.remove(0);
                                pending = Pending::default();
                                break;
                            }
                            // Kept already: the next plan.
                            Some(Some(false)) => {
                                plans.remove(0);
                                pending = Pending::default();
                            }
                            // Its replays for this task ran out: the same plan goes on in the next.
                            Some(None) => break,
                            None => plans.clear(),
                        }
                    }
                })
            });
            prefetch_plans(c, plans, edits_then, pending);
        },
        std::time::Duration::ZERO,
    );
}

/// How long the plan rests before the sliders' neighbouring positions are made ahead: after the verdict's limits
/// and the advisor have started (60 and 120 ms), so their first tasks go first.
const NEIGHBOURS_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// Once the plan settles, makes the own estimates of the sliders' neighbouring positions (a task each: sequence,
/// batch, then the LoRA rank where the plan has one), so that a first move of any shows figures already made. The
/// planner's, after [`provide`]: an embedded chart has no sliders.
pub(crate) fn prefetch_on_settle() {
    let c = ctx();
    on_settled_plan(
        "neighbours",
        NEIGHBOURS_AFTER,
        || true,
        move |_, plan| {
            // The rank slider is off under full fine-tuning (`not_peft_reason`).
            let with_rank = plan.method != peakplan_core::plan::Method::Full;
            let plans = [SEQ_SLIDER, BATCH_SLIDER, RANK_SLIDER]
                .into_iter()
                .filter(|s| with_rank || s.key != RANK_SLIDER.key)
                .flat_map(|s| slider_neighbours(plan, s, s.scale.position((s.get)(plan)), 1))
                .collect();
            prefetch_plans(c, plans, edits(), Pending::default());
        },
    );
}

/// [`planned_arch`] and the plan, read untracked (in a task, not an effect): what `f` makes of them.
fn with_planned_untracked<R>(
    custom: RwSignal<Option<Architecture>>,
    hub: RwSignal<HubModels>,
    plan: RwSignal<Plan>,
    f: impl FnOnce(Option<&Architecture>, &Plan) -> R,
) -> R {
    custom.with_untracked(|c| {
        hub.with_untracked(|h| plan.with_untracked(|p| f(planned_arch(c, h, p), p)))
    })
}

/// The planned model: the pasted config, else the plan's Hub model (`None` until it has loaded), else its preset.
pub(crate) fn planned_arch<'a>(
    custom: &'a Option<Architecture>,
    hub: &'a HubModels,
    plan: &Plan,
) -> Option<&'a Architecture> {
    match (custom, &plan.hub) {
        (Some(a), _) => Some(a),
        (None, Some(id)) => hub.get(id).map(|l| &l.arch),
        (None, None) => Some(preset_arch(plan)),
    }
}

thread_local! {
    static EDITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many edits the reader has made so far: background work that a drag would only slow down (the warm-up) stops
/// when this moves.
pub(crate) fn edits() -> u64 {
    EDITS.get()
}

/// A slider move leaves the bars it did not estimate at the previous value's figures ([`crate::methods`]); they get
/// their own once the slider has rested for [`FILL_AFTER`] (each move of a drag restarts the wait, so a drag runs
/// at most one estimate a move, not three, and none where the plan's was kept or made ahead), then in tasks of
/// their own: the bars' estimates until a task has run for [`FILL_FOR_MS`] (a fixed plan's both, a varying
/// plan's one).
fn fill_stale_bars(
    plan: RwSignal<Plan>,
    custom: RwSignal<Option<Architecture>>,
    hub_models: RwSignal<HubModels>,
    computed: Memo<Computed>,
    methods: StoredValue<MethodCache>,
    filled: Trigger,
) {
    let pending = StoredValue::new(None::<TimeoutHandle>);
    // The plan whose bars a task has started filling: its next bar follows at once.
    let filling = StoredValue::new(None::<Plan>);
    let fill = move || {
        browser::timed("other methods", || {
            let start = browser::now_ms();
            let mut made = false;
            with_planned_untracked(custom, hub_models, plan, |arch, p| {
                let Some(arch) = arch else {
                    return;
                };
                filling.set_value(Some(p.clone()));
                while browser::now_ms() - start < FILL_FOR_MS
                    && methods
                        .try_update_value(|m| m.fill_next(arch, p))
                        .flatten()
                        .is_some()
                {
                    made = true;
                }
            });
            if made {
                filled.notify();
            }
        })
    };
    Effect::new(move |_| {
        if computed.with(|comp| comp.next_stale().is_none()) {
            return;
        }
        if let Some(h) = pending.try_update_value(Option::take).flatten() {
            h.clear();
        }
        let going_on = plan.with_untracked(|p| filling.with_value(|f| f.as_ref() == Some(p)));
        let wait = if going_on {
            std::time::Duration::ZERO
        } else {
            // A move: the plan filled last is no longer being filled (a drag back onto it waits too).
            filling.set_value(None);
            FILL_AFTER
        };
        pending.set_value(set_timeout_with_handle(fill, wait).ok());
    });
}

/// How long the slider rests before the bars a move did not estimate get theirs: longer than the gap between a
/// drag's moves (a frame, or a move's estimate where that is longer), short enough to follow a release at once.
const FILL_AFTER: std::time::Duration = std::time::Duration::from_millis(60);

/// How much longer settled work waits when the page has not painted its first chart yet: the first layout and paint
/// of the page take 100-200 ms on a slow machine.
const BEFORE_FIRST_PAINT: std::time::Duration = std::time::Duration::from_millis(300);

/// Runs `work` on the plan and its architecture (the pasted config, else the preset) `settle` after the last change,
/// and only while `active` holds: for panels whose searches run many estimates, kept off the slider's path.
pub(crate) fn on_settled_plan(
    name: &'static str,
    settle: std::time::Duration,
    active: impl Fn() -> bool + 'static,
    work: impl Fn(&Architecture, &Plan) + Clone + 'static,
) {
    let c = ctx();
    let pending = StoredValue::new(None::<TimeoutHandle>);
    Effect::new(move |_| {
        if !active() {
            return;
        }
        let (arch, plan) = c.with_model(|a, p| (a.cloned(), p.clone()));
        if let Some(h) = pending.get_value() {
            h.clear();
        }
        let Some(arch) = arch else { return };
        let work = work.clone();
        // Before the chart's first paint, the page is still laying out and painting the first figure: what it
        // does not need waits until that is on screen (and a reader or a test can see it).
        let wait = if browser::painted() {
            settle
        } else {
            settle + BEFORE_FIRST_PAINT
        };
        let handle =
            set_timeout_with_handle(move || browser::timed(name, || work(&arch, &plan)), wait);
        pending.set_value(handle.ok());
    });
}

/// [`on_settled_plan`] for work done a step at a time (a search's replayed probes): `start` makes its state once the
/// plan settles, then `step` runs in tasks of their own ([`Pieces::steps`]), so that a click or a key press between
/// them is not kept waiting, until it says the work is done; a newer plan drops the steps left of the last one.
pub(crate) fn on_settled_plan_stepped<S: 'static>(
    name: &'static str,
    settle: std::time::Duration,
    active: impl Fn() -> bool + 'static,
    start: impl Fn(&Plan) -> S + Clone + 'static,
    step: impl Fn(&mut S, &Architecture) -> bool + 'static,
) {
    let pieces = Pieces::new();
    let step: Step<S> = std::rc::Rc::new(step);
    on_settled_plan(name, settle, active, move |arch, plan| {
        pieces.steps(name, start(plan), arch, step.clone());
    });
}

/// One step of a piece of work done a step per task: true once the work is done.
pub(crate) type Step<S> = std::rc::Rc<dyn Fn(&mut S, &Architecture) -> bool>;

/// How long a task runs steps of [`Pieces::steps`] before it hands the page back: a step that replays a fixed-length
/// plan takes a fraction of a millisecond, one whose batches vary tens of milliseconds, and a chain of tasks that
/// each ran one short step would wait about 4 ms between them (browsers clamp nested timeouts).
const STEPS_FOR_MS: f64 = 8.0;

/// Runs `step` until the work is done (true) or [`STEPS_FOR_MS`] have passed (false).
fn steps_for_a_while<S>(state: &mut S, arch: &Architecture, step: &Step<S>) -> bool {
    let start = browser::now_ms();
    loop {
        if step(state, arch) {
            return true;
        }
        if browser::now_ms() - start >= STEPS_FOR_MS {
            return false;
        }
    }
}

/// Work done a step at a time in tasks of its own, so that a click or a key press between them is not kept
/// waiting; one working-out at a time: starting the next makes the pending steps of the last moot.
#[derive(Clone, Copy)]
pub(crate) struct Pieces(StoredValue<u64>);

impl Pieces {
    pub(crate) fn new() -> Self {
        Pieces(StoredValue::new(0))
    }

    /// Drops the pending pieces or steps.
    pub(crate) fn cancel(self) {
        self.0.update_value(|g| *g += 1);
    }

    /// Runs `step` on `state` in tasks of their own (each for [`STEPS_FOR_MS`], or one step where a step takes
    /// longer) until it says the work is done, unless `steps` or `cancel` is called again first.
    pub(crate) fn steps<S: 'static>(
        self,
        name: &'static str,
        state: S,
        arch: &Architecture,
        step: Step<S>,
    ) {
        self.0.update_value(|g| *g += 1);
        let now = self.0.get_value();
        self.next_step(name, now, state, arch.clone(), step);
    }

    fn next_step<S: 'static>(
        self,
        name: &'static str,
        now: u64,
        mut state: S,
        arch: Architecture,
        step: Step<S>,
    ) {
        set_timeout(
            move || {
                if self.0.get_value() != now {
                    return;
                }
                if !browser::timed(name, || steps_for_a_while(&mut state, &arch, &step)) {
                    self.next_step(name, now, state, arch, step);
                }
            },
            std::time::Duration::ZERO,
        );
    }
}

impl Ctx {
    /// Changes the plan with typed values, and starts the latency figure's clock. A key the change leaves
    /// breaking a rule between keys (a prompt not below a shortened sequence) goes back to its default, as in a
    /// link, and why is listed in the page's error banner ([`crate::task::settle`]).
    pub(crate) fn edit(self, change: impl FnOnce(&mut Plan)) {
        self.edit_settled(change);
    }

    /// [`Ctx::edit`] for an input event that happened at `started_ms` (its `timeStamp`): the latency figure then
    /// counts the wait before the event was handled (a task that ran before it) too.
    pub(crate) fn edit_since(self, started_ms: f64, change: impl FnOnce(&mut Plan)) {
        let now = browser::now_ms();
        let started = if started_ms > 0.0 && started_ms <= now {
            started_ms
        } else {
            now
        };
        self.edit_settled_at(started, change);
    }

    /// [`Ctx::edit`], returning the keys a rule between keys put back to their defaults.
    fn edit_settled(self, change: impl FnOnce(&mut Plan)) -> Vec<String> {
        self.edit_settled_at(browser::now_ms(), change)
    }

    /// [`Ctx::edit_settled`] with the latency figure's clock started at `started_ms`.
    fn edit_settled_at(self, started_ms: f64, change: impl FnOnce(&mut Plan)) -> Vec<String> {
        EDITS.set(EDITS.get() + 1);
        self.input_started.set_value(Some(started_ms));
        let mut said = Vec::new();
        self.plan.update(|p| said = edited(p, change));
        let keys = said.iter().map(|d| d.key.clone()).collect();
        if !said.is_empty() {
            self.refused.update(|r| {
                r.typed.retain(|d| !said.iter().any(|s| s.key == d.key));
                r.typed.extend(said);
            });
        }
        keys
    }

    /// Has the plans of `slider`'s neighbouring positions to `position` (the one it moved to) made at idle, the
    /// way it was moving first (`rising`), so that the drag's next move, or a move back, finds its figures made
    /// ([`MethodCache::prefetch`]). A later edit stops it.
    pub(crate) fn prefetch_around(self, slider: Slider, position: u32, rising: bool) {
        let ahead = if rising { 1 } else { -1 };
        let plans = self
            .plan
            .with_untracked(|p| slider_neighbours(p, slider, position, ahead));
        prefetch_plans(self, plans, edits(), Pending::default());
    }

    /// Applies a value that arrives as text (a select's key, a typed number), parsed once by the core. A refused
    /// value leaves the plan as it was and is listed in the page's error banner.
    pub(crate) fn set_text(self, key: &str, text: &str) {
        let mut refused = None;
        let reset = self.edit_settled(|p| refused = p.set(key, text).err());
        match refused {
            Some(message) => {
                let key = key.to_string();
                self.refused
                    .update(|r| r.typed.push(Diagnostic { key, message }));
            }
            // Taken, unless a rule between keys put it back.
            None if !reset.iter().any(|k| k == key) => self.accepted(key),
            None => {}
        }
    }

    /// A value for `key` was taken: an earlier refusal of it no longer stands.
    pub(crate) fn accepted(self, key: &str) {
        if self
            .refused
            .with_untracked(|r| r.typed.iter().any(|d| d.key == key))
        {
            self.refused.update(|r| r.typed.retain(|d| d.key != key));
        }
    }

    /// Runs `f` on the planned model ([`planned_arch`]) and the plan, tracking both.
    pub(crate) fn with_model<R>(self, f: impl FnOnce(Option<&Architecture>, &Plan) -> R) -> R {
        self.custom.with(|c| {
            self.hub
                .with(|h| self.plan.with(|p| f(planned_arch(c, h, p), p)))
        })
    }

    /// Whether the planned model is there to plot: not a Hub model still loading or failed.
    pub(crate) fn model_ready(self) -> bool {
        self.with_model(|a, _| a.is_some())
    }

    /// Whether the planned model routes tokens to experts.
    pub(crate) fn is_moe(self) -> bool {
        self.with_model(|a, _| a.is_some_and(|a| a.experts > 1))
    }

    /// Asks for the Hub model `id` from the model box: a model loaded this session is planned at once; else it is
    /// requested while the plan, its answer and its link stay as they are, and the plan moves to it once it has
    /// loaded (a failure is said beside the model box and changes nothing else). For a model the plan already
    /// names, the request again ("Try again").
    pub(crate) fn ask_hub(self, id: HubId) {
        let holds = self.plan.with_untracked(|p| p.hub.as_ref() == Some(&id));
        let loaded = self.hub.with_untracked(|h| h.get(&id).is_some());
        if loaded && !holds {
            self.set_text("model", &id.to_string());
            return;
        }
        let from = (!holds).then(|| {
            self.plan
                .with_untracked(|p| p.get("model").unwrap_or_default())
        });
        self.load_hub(id, from);
    }

    /// Stops the Hub request on its way (Cancel): its answer, if it comes, is dropped.
    pub(crate) fn cancel_hub(self) {
        if let Some(controller) = self.hub_abort.try_update_value(Option::take).flatten() {
            controller.abort();
        }
        self.hub.update(|h| {
            h.cancel();
        });
    }

    /// Requests the Hub model `id` (`from`: see [`hub::Request`]): its `config.json` (plotted once imported), then
    /// its model info's stated parameter count (a cross-check; its failure says nothing).
    pub(crate) fn load_hub(self, id: HubId, from: Option<String>) {
        let number = self
            .hub
            .try_update(|h| h.start(id.clone(), from))
            .unwrap_or_default();
        let controller = browser::abort_controller();
        // A request this one overtakes is stopped: its answer would be moot.
        if let Some(old) = self
            .hub_abort
            .try_update_value(|c| std::mem::replace(c, controller.clone()))
            .flatten()
        {
            old.abort();
        }
        let token = self.hub_token.get_value();
        let hub_models = self.hub;
        leptos::task::spawn_local(async move {
            let url = id.config_url(hub::ENDPOINT);
            let fetched =
                browser::fetch_text(&url, token.as_deref(), MAX_CONFIG_BYTES, controller).await;
            let outcome = match fetched {
                Ok((status, text)) => hub::config_answer(&id, status, &text),
                Err(FetchError::Network) => Err(Failure::Offline),
                Err(FetchError::TimedOut) => Err(Failure::TimedOut),
                Err(FetchError::TooLarge(bytes)) => Err(Failure::Config(ConfigError::TooLarge {
                    bytes,
                    limit: MAX_CONFIG_BYTES,
                })),
                Err(FetchError::OverCap) => Err(Failure::OverCap(MAX_CONFIG_BYTES)),
                Err(FetchError::NotText) => Err(Failure::NotText),
            };
            let loaded = outcome.is_ok();
            // Cancelled, or overtaken by a newer request: the answer is moot (and the state is left untouched).
            if !hub_models.with_untracked(|h| h.is_current(number)) {
                return;
            }
            let Some(request) = hub_models
                .try_update(|h| h.finished(number, id.clone(), outcome))
                .flatten()
            else {
                return;
            };
            if !loaded {
                return;
            }
            // Asked for over another plan: the plan moves to the model now that its figures can follow, unless
            // the reader picked another model meanwhile.
            if let Some(from) = request.from {
                if self
                    .plan
                    .with_untracked(|p| p.get("model").unwrap_or_default())
                    == from
                {
                    self.set_text("model", &id.to_string());
                }
            }
            let info = id.info_url(hub::ENDPOINT);
            if let Ok((200, text)) =
                browser::fetch_text(&info, token.as_deref(), MAX_INFO_BYTES, None).await
            {
                if let Some(n) = stated_params(&text) {
                    hub_models.update(|h| h.stated(&id, n));
                }
            }
        });
    }
}
