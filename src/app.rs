//! The planner page: the state made from the link, and the panels laid out (or only the chart with `?embed=1`).
//! State is one `Plan` signal ([`crate::state`]); every figure comes from [`crate::planner::Computed`].

use crate::browser;
use crate::embed;
use crate::panels::accuracy::Accuracy;
use crate::panels::advisor::Advisor;
use crate::panels::chart::{ChartCanvas, Timeline};
use crate::panels::errors::UrlErrors;
use crate::panels::essentials::PlanEssentials;
use crate::panels::gpu_table::GpuTable;
use crate::panels::hub::HubWait;
use crate::panels::results::{ComponentTable, Figures, Verdict};
use crate::panels::segments::Segments;
use crate::panels::settings::PlanSettings;
use crate::panels::share::ShareBar;
use crate::state::{self, ctx};
use leptos::prelude::*;
use peakplan_core::plan::ColorScheme;
use peakplan_core::Plan;

/// The whole page: the planner, or only the chart with `?embed=1` or inside another page's frame
/// ([`browser::framed`]). Either follows the plan's `theme` (see [`follow_theme`]).
#[component]
pub fn App() -> impl IntoView {
    let parsed = Plan::parse_query(&browser::query());
    let embed = parsed.plan.embed || browser::framed();
    let c = state::provide(parsed);
    follow_theme(c);
    if embed {
        view! { <EmbedView/> }.into_any()
    } else {
        // An embedded chart has no sliders: only the planner makes their neighbouring positions ahead.
        state::prefetch_on_settle();
        view! { <Planner/> }.into_any()
    }
}

/// Puts the plan's chosen theme on the document's root (`data-theme`), where the stylesheet's colours read it; none
/// while the plan leaves it to the reader's `prefers-color-scheme`. The canvases read the plan themselves.
fn follow_theme(c: state::Ctx) {
    let scheme = Memo::new(move |_| c.plan.with(|p| p.theme));
    Effect::new(move |_| {
        browser::set_root_theme(match scheme.get() {
            ColorScheme::Auto => None,
            chosen => Some(chosen.key()),
        });
    });
}

/// The chart alone, sized to its container, with a one-line caption (the frame's level-one heading): for `<iframe>`
/// embedding. It says what it shows, or that it cannot ([`embed::caption`]): no chart of another model while a Hub
/// model loads or after it failed or for a link it could not read, and no controls (it sits in someone else's
/// document).
#[component]
fn EmbedView() -> impl IntoView {
    let c = ctx();
    let line = Memo::new(move |_| {
        let refused = c.refused.with(|r| r.link.clone());
        let id = c.hub_id.get();
        let ready = c.model_ready();
        c.plan.with(|p| {
            c.computed.with(|comp| {
                c.hub.with(|h| {
                    let model = match (&id, ready) {
                        (Some(id), false) => match h.failure(id) {
                            Some(f) => embed::Model::Failed(id, f),
                            None => embed::Model::Loading(id),
                        },
                        _ => embed::Model::Ready,
                    };
                    embed::caption(p, model, comp, &refused)
                })
            })
        })
    });
    let link = move || {
        browser::url_with_query(&{
            let mut p = c.plan.get();
            p.embed = false;
            p.to_query()
        })
    };
    // The theme the chart is drawn in, chosen or the reader's, for styles and tests.
    let theme = move || match c.plan.with(|p| p.theme) {
        ColorScheme::Dark => "dark",
        ColorScheme::Light => "light",
        ColorScheme::Auto if browser::prefers_dark() => "dark",
        ColorScheme::Auto => "light",
    };
    view! {
        <main class="embed" data-theme=theme>
            <Show when=move || line.with(embed::Caption::shows_chart)>
                <ChartCanvas/>
            </Show>
            // The caption is the embed's level-one heading: it names what the frame shows, styled as the one line it
            // always was (no second title over a small frame).
            <h1 class="caption" data-testid="embed-caption" data-state=move || line.with(embed::Caption::state)
                aria-live="polite">
                <a href=link target="_blank" rel="noopener">{move || line.with(|l| l.text().to_string())}</a>
            </h1>
        </main>
    }
}

/// The planner: the plan's controls, the answer, the details. A skip link, the first Tab stop, goes straight to
/// the answer (verdict, chart, "Copy link") past the forty-odd controls before it.
#[component]
fn Planner() -> impl IntoView {
    let c = ctx();
    // Focus, not a `#fragment`: the URL is the plan's, and a fragment would add a history entry.
    let skip = move |ev: leptos::ev::MouseEvent| {
        ev.prevent_default();
        browser::focus_soon("answer");
    };
    // The settings (forty-odd controls, a hundred options) and the accuracy section sit below the answer: they are
    // built 300 ms after the first figure's frame is painted, so the wait for the figure is not spent on them
    // (about 120 ms of DOM building, style and layout on a slow machine), and a browser test that has just seen
    // the figure is not kept waiting behind them. What the first figure comes with: the essentials (sliders, GPU
    // and GPU count), the verdict, chart and share bar, the figures and the component table.
    let later = RwSignal::new(false);
    browser::after_next_paint(300, move || later.set(true));
    view! {
        <a class="skip-link" href="#answer" data-testid="skip-link" on:click=skip>"Skip to the answer"</a>
        <header class="top">
            <h1>"peakplan"</h1>
            <p class="tagline">"Will this fine-tune fit on my GPU? Memory of one training step, part by part."</p>
        </header>
        <UrlErrors/>
        // Source order is the order of use (the plan's controls, then the answer, then the rest), so Tab walks the
        // controls first; the grid places them, and on a phone lifts the answer above the controls.
        <main class="layout">
            <div class="left">
            <section class="controls essentials" aria-label="Plan">
                <PlanEssentials/>
            </section>
            <Show when=move || later.get()>
            <section class="controls settings" aria-label="Training settings">
                <PlanSettings/>
            </section>
            </Show>
            </div>
            // Two columns of their own height when wide; on a phone `display: contents` hands the four sections to
            // the grid, which puts the answer first.
            <div class="right">
            // Until the plan's Hub model has loaded and imported, no figure stands under its id.
            <Show when=move || c.model_ready() fallback=|| view! { <HubWait/> }>
            <section class="results answer" id="answer" tabindex="-1" aria-label="Memory">
                <Verdict/>
                <ChartCanvas/>
                <ShareBar/>
            </section>
            <section class="results details" aria-label="Details">
                <Advisor/>
                <GpuTable/>
                <Figures/>
                <Segments/>
                <Timeline/>
                <crate::gpu::panel::GpuPanel
                    plan=c.plan
                    predict=Callback::new(|c: peakplan_core::micro::MicroConfig| peakplan_core::micro::predicted_peak_bytes(&c))/>
                <ComponentTable/>
                <Show when=move || later.get()>
                    <Accuracy/>
                </Show>
            </section>
            </Show>
            </div>
        </main>
        <footer>
            <p>"Units: GiB = 2"<sup>"30"</sup>" bytes, as PyTorch and nvidia-smi report. Figures come from the peakplan core; the same numbers are in the CLI."</p>
        </footer>
    }
}
