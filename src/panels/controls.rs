//! The plan's generic controls: a log-scale slider with its number box, and a `<select>` over a key's values.

use crate::scale::Slider;
use crate::state::{ctx, Ctx};
use leptos::prelude::*;
use peakplan_core::plan::Method;
use wasm_bindgen::JsCast;

/// A slider over a scale's steps, with a number box for any value. The track hands the slider's `set` its value
/// typed (every scale lies within the core's bounds); the box's text is parsed by the core under its `key`, and a
/// refused value is said beside the box (and in the page's banner) while the box shows the value kept.
#[component]
pub(crate) fn LogSlider(
    label: &'static str,
    testid: &'static str,
    slider: Slider,
    #[prop(into)] disabled: Signal<Option<&'static str>>,
) -> impl IntoView {
    let c = ctx();
    let Slider { key, scale, .. } = slider;
    let value = crate::state::memo(move || c.plan.with(slider.get));
    let id = format!("in-{key}");
    let num_id = format!("num-{key}");
    // The slider's last position, for the way it is moving.
    let last = StoredValue::new(None::<u32>);
    let on_input = move |ev: leptos::ev::Event| {
        let Ok(pos) = event_target_value(&ev).parse::<u32>() else {
            return;
        };
        let rising = last.get_value().is_none_or(|l| pos >= l);
        last.set_value(Some(pos));
        let v = scale.value(pos);
        // data-value is set at once as well, so scripts reading it right after the event see the new value.
        if let Some(el) = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        {
            let _ = el.set_attribute("data-value", &v.to_string());
        }
        c.accepted(key);
        c.edit_since(ev.time_stamp(), |p| (slider.set)(p, v));
        c.prefetch_around(slider, pos, rising);
    };
    let on_number = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        c.set_text(key, text.trim());
        show_plan_value(&ev, &value.get_untracked().to_string());
    };
    let refused = move || {
        c.refused
            .with(|r| Some(r.typed.iter().rev().find(|d| d.key == key)?.message.clone()))
    };
    view! {
        <div class="field slider" class:disabled=move || disabled.get().is_some()>
            <label for=id.clone()>{label}</label>
            <div class="slider-row">
                <input
                    type="range"
                    id=id
                    data-testid=testid
                    min=scale.min
                    max=scale.max
                    step="1"
                    prop:value=move || scale.position(value.get()).to_string()
                    data-value=move || value.get().to_string()
                    aria-valuetext=move || value.get().to_string()
                    disabled=move || disabled.get().is_some()
                    on:input=on_input
                />
                <input
                    type="number"
                    id=num_id
                    aria-label=format!("{label} (exact)")
                    min="1"
                    prop:value=move || value.get().to_string()
                    disabled=move || disabled.get().is_some()
                    on:change=on_number
                />
            </div>
            <span class="error" role="alert" data-testid=format!("refused-{key}")>{refused}</span>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
        </div>
    }
}

/// A `<select>` over a key's accepted values; one the plan does not take is said in the page's banner and the
/// select goes back to the plan's value.
#[component]
pub(crate) fn KeySelect(
    label: &'static str,
    key: &'static str,
    options: Vec<(&'static str, &'static str)>,
    #[prop(optional, into)] disabled: Option<Signal<Option<&'static str>>>,
    /// What the choice means, shown as a tooltip so the option texts can stay short.
    #[prop(optional)]
    hint: Option<&'static str>,
    /// `data-testid` of the select, where a test names it (else `select-KEY`).
    #[prop(optional)]
    testid: Option<&'static str>,
) -> impl IntoView {
    let c = ctx();
    let disabled = disabled.unwrap_or_else(|| Signal::derive(|| None));
    // Memos, so that a slider move (which changes the plan) touches no option of a select it leaves as it is.
    let disabled = Memo::new(move |_| disabled.get());
    let value = Memo::new(move |_| c.steady.with(|p| p.get(key).unwrap_or_default()));
    let id = format!("sel-{key}");
    view! {
        <div class="field" class:disabled=move || disabled.get().is_some() title=hint>
            <label for=id.clone()>{label}</label>
            <select
                id=id
                data-testid=testid.map_or_else(|| format!("select-{key}"), str::to_string)
                disabled=move || disabled.get().is_some()
                on:change=move |ev| {
                    c.set_text(key, &event_target_value(&ev));
                    // A value refused, or put back by a rule between keys (`ref=adapters_off` under full
                    // fine-tuning), leaves the plan's value as it was: the select shows it again.
                    if let Some(el) = ev
                        .target()
                        .and_then(|t| t.dyn_into::<web_sys::HtmlSelectElement>().ok())
                    {
                        el.set_value(&value.get_untracked());
                    }
                }
                prop:value=move || value.get()
            >
                {options
                    .into_iter()
                    .map(|(v, text)| {
                        view! {
                            <option value=v selected=move || value.with(|x| x == v)>
                                {text}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
        </div>
    }
}

/// Why a LoRA setting is greyed out under full fine-tuning, if it is.
pub(crate) fn not_peft_reason(c: Ctx) -> Signal<Option<&'static str>> {
    crate::state::memo(move || {
        c.steady
            .with(|p| p.method == Method::Full)
            .then_some("LoRA settings apply to LoRA and QLoRA, not full fine-tuning")
    })
}

/// A whole-number key typed into a box where empty is `auto`: `placeholder` says what `auto` is for this plan
/// (batch lengths, DeepSpeed's sizes). Off, it says why.
#[component]
pub(crate) fn AutoInput(
    label: &'static str,
    key: &'static str,
    #[prop(into)] disabled: Signal<Option<&'static str>>,
    /// `auto (VALUE)`.
    #[prop(into)]
    placeholder: Signal<String>,
    /// What the key means, shown as a tooltip.
    #[prop(optional)]
    hint: Option<&'static str>,
) -> impl IntoView {
    let c = ctx();
    let value = Memo::new(move |_| {
        c.steady
            .with(|p| p.get(key).filter(|v| v != "auto").unwrap_or_default())
    });
    let id = format!("num-{key}");
    view! {
        <div class="field" class:disabled=move || disabled.get().is_some() title=hint>
            <label for=id.clone()>{label}</label>
            <input id=id type="number" min="0" inputmode="numeric" data-testid=format!("num-{key}")
                prop:value=move || value.get() placeholder=move || placeholder.get()
                disabled=move || disabled.get().is_some()
                on:change=move |ev| {
                    let typed = event_target_value(&ev);
                    let typed = typed.trim();
                    c.set_text(key, if typed.is_empty() { "auto" } else { typed });
                }/>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
        </div>
    }
}

/// A number key typed into a box (`data-testid="num-KEY"` unless `testid` names it, its value in `data-value`):
/// whole numbers, or decimals with `step="any"`; a value the plan does not take is said in the page's banner and
/// the box shows the plan's value again. Off, it says why.
#[component]
pub(crate) fn NumberBox(
    label: &'static str,
    key: &'static str,
    /// The input's `step`: `"1"` for whole numbers, `"any"` for decimals.
    #[prop(default = "1")]
    step: &'static str,
    /// The input's `min`: what the browser's spinner stops at (the core says what the key takes).
    #[prop(default = "0")]
    min: &'static str,
    /// `data-testid` of the box, where a test names it otherwise.
    #[prop(optional)]
    testid: Option<&'static str>,
    #[prop(optional, into)] disabled: Option<Signal<Option<&'static str>>>,
    /// What the key means, shown as a tooltip.
    #[prop(optional)]
    hint: Option<&'static str>,
) -> impl IntoView {
    let c = ctx();
    let disabled = disabled.unwrap_or_else(|| Signal::derive(|| None));
    let value = Memo::new(move |_| c.steady.with(|p| p.get(key).unwrap_or_default()));
    let id = format!("num-{key}");
    let inputmode = if step == "1" { "numeric" } else { "decimal" };
    view! {
        <div class="field" class:disabled=move || disabled.get().is_some() title=hint>
            <label for=id.clone()>{label}</label>
            <input id=id type="number" min=min step=step inputmode=inputmode
                data-testid=testid.map_or_else(|| format!("num-{key}"), str::to_string)
                prop:value=move || value.get() attr:data-value=move || value.get()
                disabled=move || disabled.get().is_some()
                on:change=move |ev| {
                    c.set_text(key, event_target_value(&ev).trim());
                    show_plan_value(&ev, &value.get_untracked());
                }/>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
        </div>
    }
}

/// After a typed value, shows the plan's value in its box again: a refused value leaves the plan as it was, so the
/// box would keep the text the plan did not take (what was typed is in the banner).
pub(crate) fn show_plan_value(ev: &leptos::ev::Event, value: &str) {
    if let Some(input) = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
    {
        input.set_value(value);
    }
}
