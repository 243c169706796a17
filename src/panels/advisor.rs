//! The advisor panel: "it doesn't fit: what do I change?", computed off the slider's critical path.

use crate::browser;
use crate::history::changed;
use crate::planner::{card_limits, suggestion_name, LimitSteps};
use crate::state::{ctx, on_settled_plan_stepped, Pieces, Step};
use leptos::prelude::*;
use peakplan_core::advise::{set_limit, Advice, AdviceSearch, Suggestion};
use peakplan_core::solve::{Search, Steps};
use peakplan_core::units::format_bytes;
use peakplan_core::Plan;
use std::time::Duration;

/// Waits this long after the last change before advising: the search runs thousands of estimates.
const SETTLE: Duration = Duration::from_millis(120);

/// Levers listed; the fitting set, when there is one, comes before them.
const SHOWN_LEVERS: usize = 8;

/// The `i`-th card: the fitting set first, when there is one, then the levers.
fn card(a: &mut Advice, i: usize) -> Option<&mut Suggestion> {
    a.to_fit.iter_mut().chain(a.levers.iter_mut()).nth(i)
}

/// The `i`-th card, to read.
fn card_of(a: &Advice, i: usize) -> Option<&Suggestion> {
    a.to_fit.iter().chain(a.levers.iter()).nth(i)
}

/// Lists the changes that lower the peak; when the plan does not fit, the smallest set that makes it fit first.
/// Hovering a suggestion shows it as an "after" bar in the chart; "Apply" makes it the plan (and the URL).
#[component]
pub fn Advisor() -> impl IntoView {
    let c = ctx();
    let advice: RwSignal<Option<Advice>> = RwSignal::new(None);
    let pieces = Pieces::new();
    // Each card's largest batch, then its longest sequence (a dozen replays each), a replayed probe per task.
    let limits: Step<(LimitSteps, u64)> = std::rc::Rc::new(move |(steps, cap), arch| {
        let cap = *cap;
        steps.step(
            arch,
            |i, limit| {
                advice.with_untracked(|a| {
                    Some(Search::of(limit, &card_of(a.as_ref()?, i)?.plan, cap))
                })
            },
            |i, limit, answer| {
                advice.update(|a| {
                    if let Some(s) = a.as_mut().and_then(|a| card(a, i)) {
                        set_limit(s, limit, answer);
                    }
                })
            },
        )
    });
    // The advice a step per task (the plan's figure, then each change's), then the cards' limits.
    on_settled_plan_stepped(
        "advisor",
        SETTLE,
        || true,
        move |plan| {
            // The last plan's cards are moot once a new plan is being advised on.
            pieces.cancel();
            AdviceSearch::new(plan, Some(plan.gpu.preset().capacity_bytes))
        },
        move |search, arch| {
            let Some(a) = search.step(arch) else {
                return false;
            };
            // One more than shown, in case the fitting set is also a lever and is listed once.
            let cards = usize::from(a.to_fit.is_some()) + a.levers.len().min(SHOWN_LEVERS + 1);
            let cap = a.capacity_bytes.unwrap_or_default();
            advice.set(Some(a));
            pieces.steps(
                "advisor card limits",
                (LimitSteps::new(cards), cap),
                arch,
                limits.clone(),
            );
            true
        },
    );
    // The last "Apply": the plan before it and the plan it made, in the preview's type (plan and label) so that no
    // new signal code reaches the wasm.
    type Kept = RwSignal<Option<(Plan, String)>>;
    let (undo_to, undo_from): (Kept, Kept) = (RwSignal::new(None), RwSignal::new(None));
    // "Undo" stays while the plan is the one applied; any other change makes it moot.
    let undoable =
        move || undo_from.with(|a| a.as_ref().is_some_and(|(a, _)| c.plan.with(|p| p == a)));
    let applied_text = move || {
        undo_to.with(|b| {
            undo_from.with(|a| {
                Some(format!(
                    "Applied: {}. ",
                    changed(&b.as_ref()?.0, &a.as_ref()?.0).join(", ")
                ))
            })
        })
    };
    let undo = move |_| {
        if let Some((b, _)) = undo_to.get_untracked() {
            c.edit(|p| *p = b);
        }
        undo_from.set(None);
        browser::focus_soon("advisor-title");
    };
    let row = move |s: Suggestion, testid: String, lead: bool| {
        let after = (s.plan.clone(), suggestion_name(&s));
        let apply = s.plan.clone();
        let changes = s.changes.iter().map(|ch| view! { <li>{ch.label.clone()}<span class="why">{format!(" ({})", ch.cost_text)}</span></li> }).collect_view();
        let limits = match (s.max_batch, s.max_seq) {
            _ if !s.limits_known => {
                "working out its largest batch and longest sequence…".to_string()
            }
            _ => card_limits(s.max_batch, s.max_seq, s.plan.seq_len, s.plan.micro_batch),
        };
        // A card that lowers the peak but still does not fit says so first, in the warning colour.
        let nofit = s.fits == Some(false);
        let limits = if nofit {
            format!("Still does not fit this GPU: {limits}")
        } else {
            limits
        };
        view! {
            <li class="suggestion" class:lead=lead
                on:mouseenter=move |_| c.preview.set(Some(after.clone()))
                on:mouseleave=move |_| c.preview.set(None)>
                <div class="head">
                    <strong>{format!("needs {}", format_bytes(s.device_bytes))}</strong>
                    <span class="saved">{format!("−{}", format_bytes(s.saved_bytes))}</span>
                    <span class=format!("cost {}", s.cost.label())>{s.cost.label()}</span>
                    <button data-testid=testid on:click=move |_| {
                        c.preview.set(None);
                        undo_to.set(Some((c.plan.get_untracked(), String::new())));
                        undo_from.set(Some((apply.clone(), String::new())));
                        c.edit(|p| *p = apply.clone());
                        // The card goes when the advice is worked out again: focus the line that can undo it.
                        browser::focus_soon("advisor-undo");
                    }>"Apply"</button>
                </div>
                <ul class="changes">{changes}</ul>
                <p class=if nofit { "why nofit" } else { "why" } data-fits=(!nofit).to_string()>{limits}</p>
            </li>
        }
    };
    view! {
        <section class="advisor" aria-label="Advisor" data-testid="advisor">
            <h2 id="advisor-title" tabindex="-1">"What to change"</h2>
            <p class="applied" role="status" data-testid="advisor-applied" hidden=move || !undoable()>
                {applied_text}
                <button id="advisor-undo" data-testid="advisor-undo" on:click=undo>"Undo"</button>
            </p>
            {move || match advice.get() {
                None => view! { <p class="why">"Working out the options…"</p> }.into_any(),
                Some(a) => {
                    let fit = a.to_fit.clone().map(|s| view! {
                        <p class="lead-text">"The smallest change that makes it fit:"</p>
                        <ul class="suggestions">{row(s, "advisor-apply-fit".into(), true)}</ul>
                    });
                    let none = (a.fits == Some(false) && a.to_fit.is_none())
                        .then(|| view! { <p class="error">"No combination of up to four changes fits this GPU: \"On other GPUs\" below says which GPU holds it, and how many sharded with ZeRO-3."</p> });
                    // The fit suggestion is often one lever on its own: listing it twice in a row reads as a glitch.
                    let fit_plan = a.to_fit.as_ref().map(|s| &s.plan);
                    let levers = a.levers.iter().filter(|s| Some(&s.plan) != fit_plan).take(SHOWN_LEVERS).cloned().enumerate()
                        .map(|(i, s)| row(s, format!("advisor-apply-{i}"), false)).collect_view();
                    view! {
                        {fit}
                        {none}
                        <p class="lead-text">{if fit_plan.is_some() { "Other changes on their own, largest saving first:" } else { "Each change on its own, largest saving first:" }}</p>
                        <ul class="suggestions">{levers}</ul>
                    }.into_any()
                }
            }}
        </section>
    }
}
