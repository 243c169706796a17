//! The planner page: the state made from the link, and the panels laid out (or only the chart with `?embed=1`).
//! State is one `Plan` signal ([`crate::state`]); every figure comes from [`crate::planner::Computed`].

use crate::browser;
use crate::panels::accuracy::Accuracy;
use crate::panels::advisor::Advisor;
use crate::panels::chart::{ChartCanvas, Timeline};
use crate::panels::errors::UrlErrors;
use crate::panels::essentials::PlanEssentials;
use crate::panels::gpu_table::GpuTable;
use crate::panels::hub::HubWait;
use crate::panels::results::{ComponentTable, Figures, Verdict};
use crate::panels::settings::PlanSettings;
use crate::panels::share::ShareBar;
use crate::state::{self, ctx};
use leptos::prelude::*;
use peakplan_core::units::{self, format_bytes, method_label};
use peakplan_core::Plan;

/// The whole page: the planner, or only the chart with `?embed=1` or inside another page's frame
/// ([`browser::framed`]).
#[component]
pub fn App() -> impl IntoView {
    let parsed = Plan::parse_query(&browser::query());
    let embed = parsed.plan.embed || browser::framed();
    state::provide(parsed);
    if embed {
        view! { <EmbedView/> }.into_any()
    } else {
        view! { <Planner/> }.into_any()
    }
}

/// The chart alone, sized to its container, with a one-line caption: for `<iframe>` embedding.
#[component]
fn EmbedView() -> impl IntoView {
    let c = ctx();
    let caption = move || {
        let p = c.plan.get();
        c.computed.with(|comp| {
            format!(
                "{} · {} · b={} s={} · nvidia-smi peak {}{} · peakplan",
                comp.model_name,
                method_label(p.method),
                p.micro_batch,
                p.seq_len,
                format_bytes(comp.selected.device_bytes),
                units::per_gpu(&p)
            )
        })
    };
    let link = move || {
        browser::url_with_query(&{
            let mut p = c.plan.get();
            p.embed = false;
            p.to_query()
        })
    };
    view! {
        <main class="embed">
            <Show when=move || c.model_ready() fallback=|| view! { <HubWait/> }>
                <ChartCanvas/>
            </Show>
            <p class="caption" data-testid="embed-caption"><a href=link target="_blank" rel="noopener">{caption}</a></p>
        </main>
    }
}

#[component]
fn Planner() -> impl IntoView {
    let c = ctx();
    view! {
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
            <section class="controls settings" aria-label="Training settings">
                <PlanSettings/>
            </section>
            </div>
            // Two columns of their own height when wide; on a phone `display: contents` hands the four sections to
            // the grid, which puts the answer first.
            <div class="right">
            // Until the plan's Hub model has loaded and imported, no figure stands under its id.
            <Show when=move || c.model_ready() fallback=|| view! { <HubWait/> }>
            <section class="results answer" aria-label="Memory">
                <Verdict/>
                <ChartCanvas/>
                <ShareBar/>
            </section>
            <section class="results details" aria-label="Details">
                <Advisor/>
                <GpuTable/>
                <Figures/>
                <Timeline/>
                <crate::gpu::panel::GpuPanel
                    plan=c.plan
                    predict=Callback::new(|c: peakplan_core::micro::MicroConfig| peakplan_core::micro::predicted_peak_bytes(&c))/>
                <ComponentTable/>
                <Accuracy/>
            </section>
            </Show>
            </div>
        </main>
        <footer>
            <p>"Units: GiB = 2"<sup>"30"</sup>" bytes, as PyTorch and nvidia-smi report. Figures come from the peakplan core; the same numbers are in the CLI."</p>
        </footer>
    }
}
