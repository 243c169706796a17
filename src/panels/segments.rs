//! The caching allocator's segments at the step's peak, as a picture: each segment a bar as wide as its share of
//! what is reserved, its blocks in address order, in use or cached and free. From the core's replay
//! (`segments_at_peak`), worked out once the plan settles and only while the panel is open.

use crate::segment_picture::Picture;
use crate::state::{ctx, on_settled_plan};
use leptos::prelude::*;
use peakplan_core::units::format_bytes;
use peakplan_core::{segments_at_peak, Plan};
use std::time::Duration;

/// The picture, behind a disclosure: worked out when opened, then whenever the plan settles while open.
#[component]
pub fn Segments() -> impl IntoView {
    let c = ctx();
    let open = RwSignal::new(false);
    let picture: RwSignal<Option<(Plan, Option<Picture>)>> = RwSignal::new(None);
    on_settled_plan(
        "segment picture",
        Duration::from_millis(60),
        move || open.get(),
        move |arch, plan| {
            let p = segments_at_peak(arch, plan).map(|s| Picture::of(&s));
            picture.set(Some((plan.clone(), p)));
        },
    );
    let current = move || {
        let plan = c.plan.get();
        picture.with(|p| {
            p.as_ref()
                .filter(|(of, _)| *of == plan)
                .map(|(_, p)| p.clone())
        })
    };
    let body = move || {
        match current() {
        None => view! { <p class="why">"Replaying the step…"</p> }.into_any(),
        Some(None) => view! {
            <p class="why" data-testid="segments-summary">"No replay stands for this plan (too many events): its reserved figure is the rule of thumb's."</p>
        }
        .into_any(),
        Some(Some(p)) => {
            let bars = p
                .bars
                .iter()
                .map(|b| {
                    let width = 100.0 * b.total_bytes as f64 / p.reserved_bytes.max(1) as f64;
                    let runs = b
                        .runs
                        .iter()
                        .map(|&(bytes, used)| {
                            let w = 100.0 * bytes as f64 / b.total_bytes.max(1) as f64;
                            view! { <span class=if used { "used" } else { "free" } style:width=format!("{w:.3}%")></span> }
                        })
                        .collect_view();
                    view! {
                        <div class="seg" style:flex-basis=format!("{width:.3}%") title=format_bytes(b.total_bytes)>{runs}</div>
                    }
                })
                .collect_view();
            view! {
                <p data-testid="segments-summary" data-reserved-bytes=p.reserved_bytes.to_string()
                    data-in-use-bytes=p.in_use_bytes.to_string() data-free-bytes=p.free_bytes.to_string()
                    data-segments=p.segments.to_string()>{p.words()}</p>
                <div class="seg-bars" role="img" aria-label=p.words()>{bars}</div>
                <p class="why">"Each bar is a segment PyTorch reserved (the small pool's 2 MiB segments as one), as wide as its share; dark: blocks in use at the step's peak; light: cached and free."</p>
            }
            .into_any()
        }
    }
    };
    view! {
        <details class="segments" data-testid="segments" on:toggle=move |ev| open.set(crate::browser::details_open(&ev))>
            <summary>"The allocator's segments at the peak"</summary>
            {body}
        </details>
    }
}
