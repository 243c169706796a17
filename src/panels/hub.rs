//! Hub models on the page: what stands in for the answer while the plan's Hub model loads or after it failed (a
//! spinner with Cancel, or a pointer to the message), the status beside the model box (a model asked for over the
//! current plan loading, with Cancel, while the previous answer stays; the `hub-error` message with what to do: a
//! token for a gated model, "Try again", the config paste), and the line under the model field (the loaded model
//! with the Hub's stated count beside peakplan's, the recent list).

use crate::browser;
use crate::hub::{self, Failure};
use crate::state::ctx;
use leptos::prelude::*;
use peakplan_core::hub::HubId;

/// In place of the answer while the plan's own Hub model is not loaded (a link that names it): "loading" with
/// Cancel, or that it could not be, with the reason beside the model box.
#[component]
pub(crate) fn HubWait() -> impl IntoView {
    let c = ctx();
    // Memos: the message is rebuilt when what it says changes, not on every change of the session's Hub models.
    let state = Memo::new(move |_| {
        let id = c.hub_id.get()?;
        let failed = c.hub.with(|h| h.failure(&id).is_some());
        Some((id, failed))
    });
    let to_model = move |_| browser::focus_soon("model-filter");
    view! {
        <section class="results answer hub-wait" id="answer" tabindex="-1" aria-label="Memory" aria-live="polite">
            {move || state.get().map(|(id, failed)| if failed {
                view! {
                    <p class="hub-failed" data-testid="hub-failed">
                        {format!("No figures: {id} could not be loaded. Why, and what to do, is beside the model box.")}
                    </p>
                    <div class="row"><button on:click=to_model>"Go to the model box"</button></div>
                }.into_any()
            } else {
                view! {
                    <Loading id=id/>
                    <p class="why">"The figures appear once it has loaded and imported."</p>
                }.into_any()
            })}
        </section>
    }
}

/// The loading line of the Hub model `id`, with Cancel (the request is also stopped after [`hub::TIMEOUT_SECS`]).
#[component]
fn Loading(
    /// The model on its way.
    id: HubId,
) -> impl IntoView {
    let c = ctx();
    view! {
        <p class="hub-loading" data-testid="hub-loading">
            <span class="spinner" aria-hidden="true"></span>
            {format!("Loading {id}'s config.json from the Hugging Face Hub…")}
            " "
            <button data-testid="hub-cancel" on:click=move |_| c.cancel_hub()>"Cancel"</button>
        </p>
    }
}

/// Beside the model box: a Hub model asked for over the current plan while it loads (the previous answer stays
/// until it arrives), and why the last Hub model asked for could not be loaded (the plan and its link stay as
/// they were). A polite live region, so the loading line and its end are read out without moving the focus.
#[component]
pub(crate) fn HubStatus() -> impl IntoView {
    let c = ctx();
    // Memos: a typed token survives changes of the session's Hub models that leave the message as it was.
    let switching = Memo::new(move |_| c.hub.with(|h| h.switching().cloned()));
    let failed = Memo::new(move |_| {
        let plan_id = c.hub_id.get();
        c.hub.with(|h| {
            let (id, f) = h.failed.as_ref()?;
            // A model asked for over the plan and then cancelled says nothing: the plan simply stays.
            let said = *f != Failure::Cancelled || plan_id.as_ref() == Some(id);
            said.then(|| (id.clone(), f.clone()))
        })
    });
    view! {
        <div class="hub-status" aria-live="polite">
            {move || switching.get().map(|id| view! {
                <Loading id=id/>
                <p class="why">"The current answer stays until it has loaded."</p>
            })}
            {move || failed.get().map(|(id, failure)| view! { <HubError id=id failure=failure/> })}
        </div>
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
        c.ask_hub(id.clone());
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
