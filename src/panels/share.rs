//! Sharing the plan: the link, the embed code, the chart as SVG (titled, described and linked back to the plan), the
//! theme they are drawn in, and "Copy as code".

use crate::browser;
use crate::panels::controls::KeySelect;
use crate::panels::interop::CopyAsCode;
use crate::planner::{Computed, PastedLink};
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_chart::{chart_svg, SvgMeta, Theme};
use peakplan_core::plan::ColorScheme;
use peakplan_core::units::chart_description;

#[component]
pub(crate) fn ShareBar() -> impl IntoView {
    let c = ctx();
    let copied = RwSignal::new(String::new());
    // A pasted config.json is no plan key: the link names its preset where it is one, else says it cannot hold it.
    // Worked out when the config or the plan's model changes, not on every slider move.
    let model = Memo::new(move |_| c.plan.with(|p| p.get("model").unwrap_or_default()));
    let pasted = Memo::new(move |_| {
        model.track();
        c.custom.with(|a| {
            a.as_ref()
                .map(|a| c.plan.with_untracked(|p| PastedLink::of(a, p)))
        })
    });
    let copy_link = move |_| {
        let plan = c.plan.get_untracked();
        let (plan, words) = match pasted.get_untracked() {
            Some(link) => (link.plan(&plan), link.copied()),
            None => (plan, "Link copied".to_string()),
        };
        browser::copy(&browser::url_with_query(&plan.to_query()));
        copied.set(words);
    };
    // The embed's link is the plan's, so a theme the reader chose travels in it; none chosen, the embed follows
    // its own reader's scheme.
    let copy_embed = move |_| {
        let link = pasted.get_untracked();
        let mut p = c.plan.get_untracked();
        if let Some(link) = &link {
            p = link.plan(&p);
        }
        p.embed = true;
        let url = browser::url_with_query(&p.to_query());
        browser::copy(&format!(
            "<iframe src=\"{url}\" width=\"720\" height=\"420\" style=\"border:0\" title=\"peakplan memory chart\" loading=\"lazy\"></iframe>"
        ));
        copied.set(match link {
            Some(PastedLink::Lost { reopens_as }) => format!(
                "Embed code copied without the pasted config.json (a link cannot hold one): the embed draws \
                 {reopens_as}"
            ),
            _ => "Embed code copied".to_string(),
        });
    };
    let download = move |_| {
        let plan = c.plan.get_untracked();
        // A file has no reader whose scheme it could follow: light unless the plan chose dark.
        let theme = Theme::of(plan.theme, false);
        let svg = c.computed.with_untracked(|comp| {
            // Bars a slider move has not estimated yet (`crate::methods`) are made now: a file keeps its figures.
            let whole = comp
                .next_stale()
                .and_then(|_| c.with_model(|a, p| a.map(|a| Computed::new(a, p))));
            let comp = whole.as_ref().unwrap_or(comp);
            let meta = SvgMeta {
                description: chart_description(&comp.model_name, &plan, comp.selected.device_bytes),
                link: Some(browser::url_with_query(&plan.to_query())),
            };
            chart_svg(&comp.chart, &theme, (720, 420), &meta)
        });
        match browser::download("peakplan-chart.svg", "image/svg+xml", &svg) {
            Ok(()) => copied.set("SVG downloaded".to_string()),
            Err(_) => copied.set("The download could not start".to_string()),
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
            <span class="status" role="status" data-testid="share-status">
                {move || copied.get()}
            </span>
            {move || pasted.get().map(|link| view! { <p class="note link-note" data-testid="link-note">{link.note()}</p> })}
            <CopyAsCode/>
        </div>
    }
}
