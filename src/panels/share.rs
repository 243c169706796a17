//! Sharing the plan: the link, the embed code, the chart as SVG, and "Copy as code".

use crate::browser;
use crate::panels::interop::CopyAsCode;
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_chart::{chart_svg, Theme};
use peakplan_core::Plan;

#[component]
pub(crate) fn ShareBar() -> impl IntoView {
    let c = ctx();
    let copied = RwSignal::new("");
    let copy_link = move |_| {
        browser::copy(&browser::url_with_query(&c.plan.with(Plan::to_query)));
        copied.set("Link copied");
    };
    let copy_embed = move |_| {
        let mut p = c.plan.get_untracked();
        p.embed = true;
        let url = browser::url_with_query(&p.to_query());
        browser::copy(&format!(
            "<iframe src=\"{url}\" width=\"720\" height=\"420\" style=\"border:0\" title=\"peakplan memory chart\" loading=\"lazy\"></iframe>"
        ));
        copied.set("Embed code copied");
    };
    let download = move |_| {
        let svg = c
            .computed
            .with_untracked(|comp| chart_svg(&comp.chart, &Theme::LIGHT, (720, 420)));
        match browser::download("peakplan-chart.svg", "image/svg+xml", &svg) {
            Ok(()) => copied.set("SVG downloaded"),
            Err(_) => copied.set("The download could not start"),
        }
    };
    view! {
        <div class="share">
            <button data-testid="copy-link" on:click=copy_link>"Copy link"</button>
            <button data-testid="copy-embed" on:click=copy_embed>"Copy embed code"</button>
            <button data-testid="download-svg" on:click=download>"Download SVG"</button>
            <span class="status" role="status">{move || copied.get()}</span>
            <CopyAsCode/>
        </div>
    }
}
