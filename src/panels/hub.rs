//! Hub models on the page: what stands in for the answer while a Hub model loads or after it failed (a spinner, or
//! the `hub-error` message with what to do: a token for a gated model, "Try again", the config paste), and the
//! line under the model field (the loaded model with the Hub's stated count beside peakplan's, the recent list).

use crate::browser;
use crate::hub::{self, Failure};
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_core::hub::HubId;

/// In place of the answer while the plan's Hub model is not loaded: "loading", or why it could not be.
#[component]
pub(crate) fn HubWait() -> impl IntoView {
    let c = ctx();
    let state = move || {
        let id = c.hub_id.get()?;
        let failure = c.hub.with(|h| h.failure(&id).cloned());
        Some((id, failure))
    };
    view! {
        <section class="results answer hub-wait" aria-label="Memory" aria-live="polite">
            {move || state().map(|(id, failure)| match failure {
                None => view! {
                    <p class="hub-loading" data-testid="hub-loading">
                        <span class="spinner" aria-hidden="true"></span>
                        {format!("Loading {id}'s config.json from the Hugging Face Hub…")}
                    </p>
                    <p class="why">"The figures appear once it has loaded and imported."</p>
                }.into_any(),
                Some(failure) => view! { <HubError id=id failure=failure/> }.into_any(),
            })}
        </section>
    }
}

/// Why the Hub model could not be loaded, and what to do: for a gated model its page and a token field.
#[component]
fn HubError(
    /// The model that failed.
    id: HubId,
    /// How it failed.
    failure: Failure,
) -> impl IntoView {
    let c = ctx();
    let denied = matches!(failure, Failure::Denied(_));
    let typed = RwSignal::new(String::new());
    let message = hub::message(&id, &failure);
    let page = id.page_url(hub::ENDPOINT);
    let repo = id.repo();
    let retry = move |_| {
        if denied {
            c.hub_token.set_value(hub::token(&typed.get_untracked()));
        }
        c.load_hub(id.clone());
    };
    let paste = move |_| {
        browser::open_details("config-paste");
        browser::focus_soon("config-text");
    };
    view! {
        <div class="error hub-error" role="alert" data-testid="hub-error">
            <p>{message}</p>
            {denied.then(|| view! {
                <p><a href=page target="_blank" rel="noopener noreferrer">{format!("Open {repo} on the Hub")}</a></p>
                <label class="field">"Access token"
                    <input type="password" autocomplete="off" spellcheck="false" data-testid="hub-token"
                        on:input=move |ev| typed.set(event_target_value(&ev))/>
                </label>
                <p class="why">"Kept in this tab's memory only and sent only to huggingface.co: never in the link or storage."</p>
            })}
            <div class="row">
                <button data-testid="hub-retry" on:click=retry>{if denied { "Try again with this token" } else { "Try again" }}</button>
                <button on:click=paste>"Paste its config.json"</button>
            </div>
        </div>
    }
}

/// Under the model field: the loaded Hub model (peakplan's parameter count, and the Hub's beside it once stated),
/// and the other Hub models of this session, one click each.
#[component]
pub(crate) fn HubLine() -> impl IntoView {
    let c = ctx();
    let current = c.hub_id;
    let loaded = move || {
        let id = current.get()?;
        c.hub.with(|h| h.get(&id).map(hub::summary))
    };
    let others = move || {
        let current = current.get();
        c.hub.with(|h| {
            h.recent()
                .iter()
                .filter(|l| Some(&l.id) != current.as_ref())
                .map(|l| l.id.to_string())
                .collect::<Vec<_>>()
        })
    };
    view! {
        {move || loaded().map(|line| view! { <p class="why" data-testid="hub-model">{line}</p> })}
        {move || {
            let others = others();
            (!others.is_empty()).then(|| view! {
                <p class="why" data-testid="hub-recent">"Recent Hub models: "
                    {others.into_iter().map(|id| {
                        let pick = id.clone();
                        view! { <button class="link" on:click=move |_| c.set_text("model", &pick)>{id}</button>" " }
                    }).collect_view()}
                </p>
            })
        }}
    }
}
