//! The `url-error` banner: values the page refused, from the link or typed in, while the rest of the plan is kept.

use crate::state::{ctx, Refused};
use leptos::prelude::*;
use peakplan_core::Diagnostic;

/// Messages for refused values: the link's bad query parameters (their defaults are used), then values typed or
/// picked since (the plan kept its previous ones).
#[component]
pub(crate) fn UrlErrors() -> impl IntoView {
    let refused = ctx().refused;
    let list = |heading: &'static str, items: Vec<Diagnostic>| {
        (!items.is_empty()).then(|| {
            view! {
                <strong>{heading}</strong>
                <ul>{items.into_iter().map(|d| view! { <li>{d.message}</li> }).collect_view()}</ul>
            }
        })
    };
    move || {
        let Refused { link, typed } = refused.get();
        (!link.is_empty() || !typed.is_empty()).then(|| {
            view! {
                <div class="url-error" role="alert" data-testid="url-error">
                    {list("Some link parameters were not understood; their defaults are used:", link)}
                    {list("Some values were not accepted; the plan keeps its previous ones:", typed)}
                    <button on:click=move |_| refused.set(Refused::default())>"Dismiss"</button>
                </div>
            }
        })
    }
}
