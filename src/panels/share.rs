//! Sharing the plan: the link, the embed code, the chart as SVG (titled, described and linked back to the plan), the
//! theme they are drawn in, and "Copy as code".

use crate::browser;
use crate::panels::controls::KeySelect;
use crate::panels::interop::CopyAsCode;
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_chart::{chart_svg, SvgMeta, Theme};
use peakplan_core::plan::ColorScheme;
use peakplan_core::units::chart_description;
use peakplan_core::Plan;

#[component]
pub(crate) fn ShareBar() -> impl IntoView {
    let c = ctx();
    let copied = RwSignal::new("");
    let copy_link = move |_| {
        browser::copy(&browser::url_with_query(&c.plan.with(Plan::to_query)));
        copied.set("Link copied");
    };
    // The embed's link is the plan's, so a theme the reader chose travels in it; none chosen, the embed follows
    // its own reader's scheme.
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
        let plan = c.plan.get_untracked();
        // A file has no reader whose scheme it could follow: light unless the plan chose dark.
        let theme = Theme::of(plan.theme, false);
        let svg = c.computed.with_untracked(|comp| {
            let meta = SvgMeta {
                description: chart_description(&comp.model_name, &plan, comp.selected.device_bytes),
                link: Some(browser::url_with_query(&plan.to_query())),
            };
            chart_svg(&comp.chart, &theme, (720, 420), &meta)
        });
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
            <KeySelect label="Theme" key="theme" hint="The colours of this page, its embed and its SVG: the reader's own light or dark setting, or one chosen for all"
                options=ColorScheme::ALL.iter().map(|t| (t.key(), match t {
                    ColorScheme::Auto => "follow the reader",
                    ColorScheme::Light => "light",
                    ColorScheme::Dark => "dark",
                })).collect()/>
            <span class="status" role="status">{move || copied.get()}</span>
            <CopyAsCode/>
        </div>
    }
}
