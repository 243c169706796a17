//! The answer in words and figures: the verdict, the category figures and the table of every component.

use crate::planner::{compact_verdict, Computed, LimitsSearch};
use crate::state::{ctx, on_settled_plan_stepped};
use leptos::prelude::*;
use peakplan_core::engine::{needs_bytes_within, Replayed};
use peakplan_core::plan::Plan;
use peakplan_core::solve::Steps;
use peakplan_core::units::{self, format_bytes, format_count};
use peakplan_core::Kind;

/// What the answer's figure counts, and the two figures PyTorch itself would print for the same step.
fn measured(e: &peakplan_core::Estimate) -> String {
    format!(
        "Counted as nvidia-smi shows the process (CUDA context and allocator cache included); \
         torch.cuda.max_memory_allocated() would report {}, max_memory_reserved() {}.",
        format_bytes(e.peak_allocated_bytes),
        format_bytes(e.peak_reserved_bytes)
    )
}

/// Waits this long after the last change before the inverse searches (a dozen replays each).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(60);

/// The verdict's class and its three lines (fits or not, the largest batch and sequence, the model and what is
/// counted) for the plan `p` and its figures.
fn verdict_words(
    comp: &Computed,
    limits: Option<&(Plan, String)>,
    needs: Option<u64>,
    p: &Plan,
) -> [String; 4] {
    // Beyond u64 the engine saturates rather than wrapping: say so instead of printing a clamped figure.
    let need = if comp.selected.saturated {
        "more than 16 EiB (beyond what the arithmetic holds)".to_string()
    } else {
        format_bytes(comp.needs_bytes(needs))
    };
    let per_gpu = units::per_gpu(p);
    let (class, text) = if comp.tight(needs) {
        (
            "verdict fits tight",
            format!(
                "Fits, tightly: needs {need}{per_gpu} of the {}'s {}, under 3% to spare (a longer \
                 sequence in the data or another process on the card can tip it over)",
                comp.gpu_name,
                format_bytes(comp.capacity_bytes)
            ),
        )
    } else if comp.fits() {
        (
            "verdict fits",
            format!(
                "Fits: needs {need}{per_gpu} of the {}'s {}",
                comp.gpu_name,
                format_bytes(comp.capacity_bytes)
            ),
        )
    } else {
        (
            "verdict nofit",
            format!(
                "Does not fit: needs {need}{per_gpu}, the {} has {}",
                comp.gpu_name,
                format_bytes(comp.capacity_bytes)
            ),
        )
    };
    // The limits' words where they answer for this plan; else a slider is moving and they are being worked out.
    let limits = match limits {
        Some((of, words)) if of == p => words.clone(),
        _ => format!(
            "Largest micro-batch at s={} and longest sequence at b={}: working them out…",
            p.seq_len, p.micro_batch
        ),
    };
    let e = &comp.selected;
    let model = format!(
        "{} · {} params · {} trainable · peak during {}. {}",
        comp.model_name,
        format_count(e.total_params),
        format_count(e.trainable_params),
        e.peak_phase.label(),
        measured(e)
    );
    [class.to_string(), text, limits, model]
}

#[component]
pub(crate) fn Verdict() -> impl IntoView {
    let c = ctx();
    // The words are worked out in a memo and the elements built once: a slider move changes their texts only.
    // The plan and its limits' words: the advisor's signal type, so no new signal code reaches the wasm.
    let limits: RwSignal<Option<(Plan, String)>> = RwSignal::new(None);
    // The searches (the largest batch, then the longest sequence) a replayed probe per task, so that a plan whose
    // estimate replays many steps (batch lengths that vary) holds the page no longer than a probe.
    on_settled_plan_stepped(
        "limits",
        SETTLE,
        || true,
        LimitsSearch::new,
        move |search, arch| {
            let Some(found) = search.step(arch) else {
                return false;
            };
            limits.set(Some((search.plan().clone(), found.words())));
            true
        },
    );
    // What the plan needs (the smallest card its step runs on: a bisection of replays), once it settles, a replay
    // per step.
    let needs: RwSignal<Option<(Plan, u64)>> = RwSignal::new(None);
    on_settled_plan_stepped(
        "smallest card",
        SETTLE,
        || true,
        |plan| (plan.clone(), Replayed::default()),
        move |(plan, replayed), arch| {
            replayed.allow(Some(1));
            let Some(n) = needs_bytes_within(arch, plan, replayed) else {
                return false;
            };
            needs.set(Some((plan.clone(), n)));
            true
        },
    );
    let needs_now = Memo::new(move |_| {
        let p = c.plan.get();
        needs.with(|n| n.as_ref().filter(|(of, _)| *of == p).map(|(_, b)| *b))
    });
    let words = Memo::new(move |_| {
        let p = c.plan.get();
        let n = needs_now.get();
        limits.with(|l| {
            c.computed
                .with(|comp| verdict_words(comp, l.as_ref(), n, &p))
        })
    });
    let part = move |i: usize| move || words.with(|w| w[i].clone());
    let full = NodeRef::<leptos::html::Div>::new();
    // The figure the verdict reads out, for tests and tools (empty until the smallest card is worked out).
    let shown = move || {
        needs_now.get().map(|n| {
            c.computed
                .with(|comp| comp.needs_bytes(Some(n)).to_string())
        })
    };
    view! {
        <div class=part(0) data-testid="verdict" data-needs-bytes=shown role="status" node_ref=full>
            <p class="big">{part(1)}</p>
            <p>{part(2)}</p>
            <p class="model">{part(3)}</p>
        </div>
        <CompactVerdict full=full needs=needs_now/>
    }
}

/// The verdict in one line, fixed at the top of the window while the full verdict is scrolled out of view (on a
/// phone the controls start a screen below the answer; on a laptop the settings run below the fold), with a button
/// back to the whole answer. Not a live region: the full verdict already is one.
#[component]
fn CompactVerdict(
    /// The full verdict, whose position decides when this one shows.
    full: NodeRef<leptos::html::Div>,
    /// What the plan needs, once worked out (the full verdict's).
    needs: Memo<Option<u64>>,
) -> impl IntoView {
    let c = ctx();
    let line = Memo::new(move |_| {
        let n = needs.get();
        c.plan
            .with(|p| c.computed.with(|comp| compact_verdict(comp, p, n)))
    });
    let fits = Memo::new(move |_| c.computed.with(Computed::fits));
    let away = RwSignal::new(false);
    // Whether the full verdict's bottom has gone above the top of the window: read on scroll and resize (a
    // rectangle read, no layout written), and set only when it changes.
    let check = move || {
        if let Some(el) = full.get_untracked() {
            let gone = el.get_bounding_client_rect().bottom() < 0.0;
            if gone != away.get_untracked() {
                away.set(gone);
            }
        }
    };
    // Once mounted too: a page reloaded where it was scrolled to may start with the verdict out of view.
    Effect::new(move |_| check());
    let on_scroll = window_event_listener(leptos::ev::scroll, move |_| check());
    let on_resize = window_event_listener(leptos::ev::resize, move |_| check());
    on_cleanup(move || {
        on_scroll.remove();
        on_resize.remove();
    });
    let back = move |_| {
        if let Some(el) = full.get_untracked() {
            el.scroll_into_view();
        }
    };
    view! {
        <div class="compact-verdict" class:fits=fits class:nofit=move || !fits.get()
            data-testid="verdict-compact" hidden=move || !away.get()>
            <span class="line">{move || line.with(|l| l.0.clone())}<span class="gpu">{move || line.with(|l| format!(" · {}", l.1))}</span></span>
            <button class="link" on:click=back>"Answer ↑"</button>
        </div>
    }
}

#[component]
pub(crate) fn Figures() -> impl IntoView {
    let c = ctx();
    let fig = move |testid: &'static str,
                    label: &'static str,
                    get: fn(&peakplan_core::Estimate) -> u64| {
        let bytes = Memo::new(move |_| c.computed.with(|comp| get(&comp.selected)));
        view! {
            <div class="figure" data-testid=testid data-bytes=move || bytes.get().to_string()>
                <span class="label">{label}</span>
                <span class="value">{move || format_bytes(bytes.get())}</span>
            </div>
        }
    };
    let head = move || {
        let per_gpu = units::per_gpu(&c.plan.get());
        format!("At the peak{per_gpu}: the first five add up to the nvidia-smi figure.")
    };
    view! {
        <div class="figures">
            <p class="figures-head">{head}</p>
            {fig("value-weights", "Weights", |e| e.at_peak().weights)}
            {fig("value-gradients", "Gradients", |e| e.at_peak().gradients)}
            {fig("value-optimizer", "Optimizer states", |e| e.at_peak().optimizer)}
            {fig("value-activations", "Activations", |e| e.at_peak().activations)}
            {fig("value-other", "Other (buffers, cache, CUDA context)", |e| e.at_peak().other)}
            {fig("value-peak", "= Peak, as nvidia-smi shows", |e| e.device_bytes)}
            {fig("value-allocated", "Peak allocated (max_memory_allocated)", |e| e.peak_allocated_bytes)}
            {fig("value-reserved", "Peak reserved (max_memory_reserved)", |e| e.peak_reserved_bytes)}
            <Show when=move || c.computed.with(|comp| comp.selected.host_bytes > 0)>
                {fig("value-host", "Host: offloaded checkpoints, in pinned CPU memory", |e| e.host_bytes)}
            </Show>
        </div>
    }
}

#[component]
pub(crate) fn ComponentTable() -> impl IntoView {
    let c = ctx();
    view! {
        <details class="components" open>
            <summary>"Every component, with its formula"</summary>
            <table data-testid="components">
                <thead><tr><th>"Component"</th><th>"Category"</th><th class="num">"Bytes"</th><th>"How it is computed"</th></tr></thead>
                <tbody>
                    // One row per kind, built once: a slider move updates the figures of the rows whose bytes
                    // changed, where rebuilding the list re-set some 130 attributes and texts each move.
                    {Kind::ALL
                        .iter()
                        .map(|&k| {
                            let b = Memo::new(move |_| c.computed.with(|comp| comp.selected.component(k)));
                            let shown = Memo::new(move |_| b.get() > 0);
                            move || {
                                shown.get().then(|| view! {
                                    <tr data-testid=format!("component-{}", k.key()) data-bytes=move || b.get().to_string()>
                                        <td>{k.label()}</td>
                                        <td>{k.category().label()}</td>
                                        <td class="num" title=move || b.get().to_string()>{move || format_bytes(b.get())}</td>
                                        <td class="formula">{k.formula()}</td>
                                    </tr>
                                })
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </details>
    }
}
