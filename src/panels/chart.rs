//! The stacked-bar chart (with its tooltip and keyboard walk) and the step timeline, painted on canvases.

use crate::browser;
use crate::canvas::{paint_chart, paint_timeline, watch_size};
use crate::planner::Computed;
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_chart::Theme;
use peakplan_core::engine::{estimate_on_within, Replayed};
use peakplan_core::plan::ColorScheme;
use peakplan_core::units::format_bytes;
use peakplan_core::Kind;

/// The chart colours of the plan's `theme`: the one chosen, else the reader's light or dark scheme.
pub(crate) fn theme(scheme: ColorScheme) -> Theme {
    Theme::of(
        scheme,
        scheme == ColorScheme::Auto && browser::prefers_dark(),
    )
}

/// The laid-out size of `canvas`, kept by a `ResizeObserver` once the element exists (see `watch_size`).
fn watched_size(canvas: NodeRef<leptos::html::Canvas>) -> RwSignal<Option<(u32, u32)>> {
    let size = RwSignal::new(None);
    Effect::new(move |_| {
        if let Some(el) = canvas.get() {
            watch_size(&el, size);
        }
    });
    size
}

/// Paints `canvas` with `paint` once it has a size, and again whenever the computed plan, the plan's theme or the
/// size changes (a theme changes no figure, so the computed plan alone would not repaint it).
fn repaint(
    canvas: NodeRef<leptos::html::Canvas>,
    paint: impl Fn(&web_sys::HtmlCanvasElement, (u32, u32), &Computed, &Theme) + 'static,
) {
    let c = ctx();
    let size = watched_size(canvas);
    let scheme = Memo::new(move |_| c.plan.with(|p| p.theme));
    Effect::new(move |_| {
        // Tracked before anything can return, so the first size paints whatever the plan is by then.
        c.computed.track();
        let theme = theme(scheme.get());
        let (Some(size), Some(el)) = (size.get(), canvas.get_untracked()) else {
            return;
        };
        c.computed
            .with_untracked(|comp| paint(&el, size, comp, &theme));
    });
}

/// Runs a slider drag's work (the plan's figures at 48 sequence lengths, both charts painted on a detached canvas,
/// the link's query written) once the page is idle after its first paint. The browser compiles wasm with a quick
/// baseline tier first and optimizes a function only once it has run hot, so without this the first drag ran on
/// baseline code: its moves took 3.5 ms at the median and 11 ms at the 95th percentile, against 2.7 and 7.1 ms once
/// warm (headless Chromium, 200 moves). About 100 ms of work on a slow machine, in tasks of about [`WARM_UP_TASK_MS`]
/// (each scheduling the next, from step `from` on, with `made` the estimates of its length made so far), so that a click or a key press is never kept waiting behind it,
/// and none after the reader's first edit; nothing on the page changes. `c` is passed in: a timeout runs outside the component's reactive owner, where the
/// context cannot be looked up.
fn warm_up(
    c: crate::state::Ctx,
    size: (u32, u32),
    from: u64,
    edits: u64,
    mut made: Vec<peakplan_core::Estimate>,
    mut replayed: Replayed,
) {
    // A reader who has started dragging warms the code up themselves: the rest would only slow their moves.
    if crate::state::edits() != edits {
        return;
    }
    let Some(canvas) = browser::detached_canvas() else {
        return;
    };
    let (arch, plan) = c.with_model(|a, p| (a.cloned(), p.clone()));
    let Some(arch) = arch else { return };
    let theme = theme(plan.theme);
    let own = plan.method;
    let mut p = plan;
    // A method at a length at a time until the task has run its share of time (a plan whose batches vary replays
    // sixteen steps a method, four runs of them where batches are padded): step `i` is length `i / 3`'s method
    // `i % 3`, and a length's third estimate paints both charts and writes the link.
    let (start, mut i) = (browser::now_ms(), from);
    while i < 3 * WARM_UP_LENGTHS {
        p.seq_len = 64 + (i / 3 * 211) % 8192;
        p.method = crate::methods::METHODS[(i % 3) as usize];
        // A few replays a task: padded batches replay four runs, which at long lengths would hold one task for
        // most of 100 ms. The same estimate goes on in the next task where this one stops.
        replayed.allow(Some(WARM_UP_REPLAYS));
        let capacity_bytes = p.gpu.preset().capacity_bytes;
        let Some(e) = estimate_on_within(&arch, &p, capacity_bytes, &mut replayed) else {
            break;
        };
        replayed = Replayed::default();
        made.push(e);
        match <[_; 3]>::try_from(std::mem::take(&mut made)) {
            Ok(by_method) => {
                p.method = own;
                let comp = Computed::of(&arch, &p, by_method);
                paint_chart(&canvas, size, &comp.chart, &theme);
                paint_timeline(&canvas, size, &comp.selected, &theme);
                std::hint::black_box(p.to_query());
            }
            Err(some) => made = some,
        }
        i += 1;
        if browser::now_ms() - start >= WARM_UP_TASK_MS {
            break;
        }
    }
    if i < 3 * WARM_UP_LENGTHS {
        set_timeout(
            move || browser::timed("warm-up", || warm_up(c, size, i, edits, made, replayed)),
            std::time::Duration::ZERO,
        );
    }
}

/// Sequence lengths the warm-up runs, the time one task runs them for (the last length may run past it), and the
/// allocator replays one task runs at most.
const WARM_UP_LENGTHS: u64 = 48;
const WARM_UP_TASK_MS: f64 = 8.0;
const WARM_UP_REPLAYS: u32 = 2;

/// How long after the first paint the warm-up starts: once the page has built what it defers past the first
/// figure, and after a browser test has seen the figure (its round trips to the page, 50-150 ms on a loaded
/// machine, waited behind the warm-up's tasks when it started at 50 ms: the figure was seen at 570-630 ms against
/// 420-500 ms now). No reader drags a slider within half a second of the page appearing.
const WARM_UP_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// The stacked bars, repainted whenever the plan changes.
#[component]
pub(crate) fn ChartCanvas() -> impl IntoView {
    let c = ctx();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let warmed = StoredValue::new(false);
    // The slider input whose move still has bars at the earlier value's figures.
    let filling_since = StoredValue::new(None::<f64>);
    repaint(canvas, move |el, size, comp, theme| {
        paint_chart(el, size, &comp.chart, theme);
        browser::mark_first_paint();
        if !warmed.get_value() {
            warmed.set_value(true);
            let edits = crate::state::edits();
            set_timeout(
                move || {
                    browser::timed("warm-up", || {
                        warm_up(c, size, 0, edits, Vec::new(), Replayed::default())
                    })
                },
                WARM_UP_AFTER,
            );
        }
        if let Some(t0) = c.input_started.get_value() {
            let ms = browser::now_ms() - t0;
            browser::record_timing("__peakplanTimings", ms);
            // The moves whose own estimate was not kept (nor made at idle), apart: what a replay costs a move.
            if c.methods.with_value(|m| m.made_own) {
                browser::record_timing("__peakplanColdTimings", ms);
            }
            c.input_started.set_value(None);
            filling_since.set_value(Some(t0));
        }
        if comp.next_stale().is_none() {
            if let Some(t0) = filling_since.try_update_value(Option::take).flatten() {
                browser::record_timing("__peakplanFilledTimings", browser::now_ms() - t0);
            }
        }
    });
    let tip = RwSignal::new(
        None::<(
            i32,
            i32,
            String,
            String,
            Vec<(String, String, &'static str)>,
        )>,
    );
    // The tooltip for segment `seg` of bar `i`, placed at (x, y) on the canvas.
    let tip_for = move |i: usize, seg: peakplan_chart::Segment, x: i32, y: i32| {
        c.computed.with_untracked(|comp| {
            let e = comp.by_method.get(i).or(comp.preview_estimate.as_ref())?;
            let parts = Kind::ALL
                .iter()
                .filter(|k| k.category() == seg.category && e.component(**k) > 0)
                .map(|k| {
                    (
                        k.label().to_string(),
                        format_bytes(e.component(*k)),
                        k.formula(),
                    )
                })
                .collect::<Vec<_>>();
            let head = format!(
                "{} · {}",
                comp.chart.bars.get(i)?.label,
                seg.category.label()
            );
            let value = format!(
                "{} at the peak ({} bytes)",
                format_bytes(seg.bytes),
                seg.bytes
            );
            Some((x, y, head, value, parts))
        })
    };
    let layout = move || {
        let el = canvas.get_untracked()?;
        c.computed.with_untracked(|comp| {
            let (w, h) = crate::canvas::css_size(&el);
            peakplan_chart::layout(&comp.chart, w, h)
        })
    };
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let (x, y) = (ev.offset_x() as i32, ev.offset_y() as i32);
        tip.set(
            layout()
                .and_then(|l| l.hit(x, y))
                .and_then(|(i, seg)| tip_for(i, seg, x, y)),
        );
    };
    // Keyboard: the chart is focusable; arrows walk the segments (left/right across bars, up/down within one).
    let focused = StoredValue::new((0usize, 0usize));
    let show_focused = move || {
        let Some(l) = layout() else { return };
        let (mut bi, mut si) = focused.get_value();
        bi = bi.min(l.bars.len().saturating_sub(1));
        let Some(bar) = l.bars.get(bi) else { return };
        si = si.min(bar.segments.len().saturating_sub(1));
        focused.set_value((bi, si));
        if let Some(seg) = bar.segments.get(si) {
            tip.set(tip_for(bi, *seg, bar.x1, (seg.y0 + seg.y1) / 2));
        }
    };
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        let (bi, si) = focused.get_value();
        let next = match ev.key().as_str() {
            "ArrowRight" => (bi + 1, 0),
            "ArrowLeft" => (bi.saturating_sub(1), 0),
            "ArrowUp" => (bi, si + 1),
            "ArrowDown" => (bi, si.saturating_sub(1)),
            "Escape" => {
                tip.set(None);
                return;
            }
            _ => return,
        };
        ev.prevent_default();
        focused.set_value(next);
        show_focused();
    };
    view! {
        <figure class="chart">
            {move || tip.get().map(|(x, y, head, value, parts)| view! {
                <div class="tip" data-testid="chart-tip" role="tooltip"
                    style:left=format!("{}px", x + 14) style:top=format!("{}px", y + 14)>
                    <strong>{head}</strong>
                    <div>{value}</div>
                    <ul>{parts.into_iter().map(|(l, b, f)| view! { <li><b>{l}</b>" "{b}": "{f}</li> }).collect_view()}</ul>
                </div>
            })}
            <canvas node_ref=canvas data-testid="chart" role="img" tabindex="0"
                on:mousemove=on_move on:mouseleave=move |_| tip.set(None)
                on:focus=move |_| show_focused() on:blur=move |_| tip.set(None) on:keydown=on_key
                aria-label=move || {
                    c.computed.with(|comp| comp.chart.bars.iter().map(|b| format!("{}: {}", b.label, format_bytes(b.parts.total()))).collect::<Vec<_>>().join(", "))
                }></canvas>
        </figure>
    }
}

#[component]
pub(crate) fn Timeline() -> impl IntoView {
    let c = ctx();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    repaint(canvas, |el, size, comp, theme| {
        paint_timeline(el, size, &comp.selected, theme)
    });
    view! {
        <figure class="timeline">
            <figcaption>
                "When the peak happens: allocated memory (what torch.cuda.max_memory_allocated counts) through one step"
            </figcaption>
            <canvas node_ref=canvas data-testid="timeline" role="img"
                aria-label=move || c.computed.with(|comp| crate::timeline::timeline_words(&comp.selected))></canvas>
        </figure>
    }
}
