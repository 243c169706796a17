//! The inputs that decide most of the answer: method and task, model, GPU and how many, the three sliders and the LoRA
//! targets.

use crate::panels::controls::{not_peft_reason, KeySelect, LogSlider, NumberBox};
use crate::panels::hub::{HubLine, HubStatus};
use crate::picker::{filtered, hub_line, in_list_order};
use crate::scale;
use crate::state::{ctx, Ctx};
use leptos::prelude::*;
use peakplan_core::hub::{looks_like_id, HubId};
use peakplan_core::plan::{Method, Targets};
use peakplan_core::units::{format_count, method_label};
use peakplan_core::{presets, Target};

/// The inputs that decide most of the answer, kept together so the verdict follows them on a narrow screen:
/// method and task, model, GPU, the three sliders and the LoRA targets.
#[component]
pub(crate) fn PlanEssentials() -> impl IntoView {
    let c = ctx();
    let method = Memo::new(move |_| c.steady.with(|p| p.method));
    let not_peft = not_peft_reason(c);
    let models = in_list_order(presets::MODELS.iter().map(|m| (m.id, m.name)).collect());
    // The vendor prefix is the same for most cards.
    let gpus: Vec<(&'static str, &'static str)> = presets::GPUS
        .iter()
        .map(|g| {
            let short = g.name.strip_prefix("NVIDIA ").unwrap_or(g.name);
            (g.id, short.strip_prefix("GeForce ").unwrap_or(short))
        })
        .collect();
    view! {
        <fieldset class="method" data-testid="method">
            <legend>"Method"</legend>
            {Method::ALL
                .iter()
                .map(|m| {
                    let m = *m;
                    view! {
                        <label class="pill">
                            <input
                                type="radio"
                                name="method"
                                value=m.key()
                                prop:checked=move || method.get() == m
                                on:change=move |_| c.edit(|p| p.method = m)
                            />
                            <span>{method_label(m)}</span>
                        </label>
                    }
                })
                .collect_view()}
        </fieldset>
        <crate::panels::task::TaskControls/>
        <ModelPicker models=models/>
        <KeySelect label="GPU" key="gpu" options=gpus/>
        <NumberBox label="GPUs" key="gpus" min="1" testid="gpus"
            hint="Any count from 1: data-parallel copies (ZeRO stage 0), shards (stages 1-3), or a layer split."/>
        <LogSlider label="LoRA rank" testid="slider-rank" slider=scale::RANK_SLIDER disabled=not_peft/>
        <LogSlider label="Micro-batch per GPU" testid="slider-batch" slider=scale::BATCH_SLIDER
            disabled=Signal::derive(|| None)/>
        <LogSlider label="Sequence length (tokens)" testid="slider-seq" slider=scale::SEQ_SLIDER
            disabled=Signal::derive(|| None)/>
        <TargetPicker disabled=not_peft/>
    }
}

/// Model preset list (smallest to largest in each family) with a filter box that ignores case and separators:
/// Enter picks the best match, and a line says how many match (or none); a Hub id (`org/name`) typed in the box
/// loads that model. Once the plan's model changes (a pick, the list, Back), the box and its line clear.
#[component]
fn ModelPicker(models: Vec<(&'static str, &'static str)>) -> impl IntoView {
    let c = ctx();
    // As typed: Hub ids are case-sensitive; presets are matched case-folded in `picker`.
    let filter = RwSignal::new(String::new());
    let input = NodeRef::<leptos::html::Input>::new();
    let models = StoredValue::new(models);
    // The model alone: read through the whole plan, every slider move would rebuild the option list.
    let model = Memo::new(move |_| c.steady.with(|p| p.get("model").unwrap_or_default()));
    // A filter left after the model changed would still say "Enter picks" another one. A Hub id the plan now
    // holds stays: Enter on it tries the load again.
    Effect::new(move |_| {
        model.track();
        let typed = filter.get_untracked();
        let holds = HubId::parse(typed.trim())
            .ok()
            .is_some_and(|id| c.plan.with_untracked(|p| p.hub.as_ref() == Some(&id)));
        if !typed.is_empty() && !holds {
            filter.set(String::new());
            if let Some(el) = input.get_untracked() {
                el.set_value("");
            }
        }
    });
    // Forty-odd presets: filtering again is cheaper than a memo's code in the wasm.
    let found = move || {
        filter.with(|f| {
            // A Hub id filters no preset out.
            let preset_filter = if looks_like_id(f) { "" } else { f.as_str() };
            let found = models.with_value(|m| filtered(m, preset_filter));
            (found.kept, found.best, hub_line(f).or(found.line))
        })
    };
    let on_key = move |ev: web_sys::KeyboardEvent| {
        if ev.key() != "Enter" {
            return;
        }
        ev.prevent_default();
        let typed = filter.get_untracked();
        let typed = typed.trim();
        if !looks_like_id(typed) {
            if let Some(id) = found().1 {
                c.set_text("model", id);
            }
            return;
        }
        // A Hub id loads while the current plan stays (the same id again after a failure: Enter tries again);
        // text that is no id goes to the core, which says why.
        match HubId::parse(typed) {
            Ok(id) => c.ask_hub(id),
            Err(_) => c.set_text("model", typed),
        }
    };
    view! {
        <div class="field">
            <label for="model-filter">"Model"</label>
            <input id="model-filter" type="search" placeholder="Filter presets, or a Hub id (org/name)…" aria-label="Filter model presets, or a Hugging Face Hub id"
                data-testid="model-filter" aria-describedby="model-filter-says" on:keydown=on_key node_ref=input
                on:input=move |ev| filter.set(event_target_value(&ev))/>
            <p id="model-filter-says" class="why" role="status" data-testid="model-filter-says">
                {move || found().2}
            </p>
            <HubStatus/>
            <select id="sel-model" data-testid="select-model" aria-label="Model preset"
                disabled=move || c.custom.with(Option::is_some)
                on:change=move |ev| c.set_text("model", &event_target_value(&ev))
                prop:value=move || model.get()>
                {move || {
                    let current = model.get();
                    // A Hub model is the list's first entry while it is the plan's.
                    let hub = c.hub_id.with(Option::is_some).then(|| {
                        view! { <option value=current.clone() selected=true>{format!("{current} (Hub)")}</option> }
                    });
                    let kept = found().0;
                    let presets = models
                        .get_value()
                        .into_iter()
                        .filter(|(id, _)| *id == current || kept.contains(id))
                        .map(|(id, name)| {
                            let params = presets::model_arch(id).map(|a| format_count(a.total_params())).unwrap_or_default();
                            view! { <option value=id selected=move || model.get() == id>{format!("{name} ({params})")}</option> }
                        })
                        .collect_view();
                    (hub, presets)
                }}
            </select>
            <HubLine/>
        </div>
    }
}

/// LoRA target modules as checkboxes, with an "all linear" shortcut.
#[component]
fn TargetPicker(#[prop(into)] disabled: Signal<Option<&'static str>>) -> impl IntoView {
    let c = ctx();
    let targets = Memo::new(move |_| c.steady.with(|p| p.targets));
    view! {
        <fieldset class="targets" class:disabled=move || disabled.get().is_some()>
            <legend>"LoRA targets"</legend>
            {Target::ALL
                .iter()
                .map(|t| {
                    let t = *t;
                    view! {
                        <label class="chip">
                            <input type="checkbox" prop:checked=move || targets.get().contains(t)
                                disabled=move || disabled.get().is_some()
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    let next = targets.get_untracked().with(t, on);
                                    if next.0 != 0 {
                                        c.edit(|p| p.targets = next);
                                    }
                                }/>
                            <span>{t.key()}</span>
                        </label>
                    }
                })
                .collect_view()}
            <button class="link" disabled=move || disabled.get().is_some()
                on:click=move |_| c.edit(|p| p.targets = Targets::ALL_LINEAR)>"all-linear"</button>
            {move || disabled.get().map(|why| view! { <p class="why">{why}</p> })}
            {move || experts_as_parameters(c).then(|| view! {
                <p class="why" data-testid="moe-targets-note">"gate, up and down adapt every expert: transformers 5 stores them as 3D parameters, which PEFT reaches through target_parameters (a dense W + BA per layer); its all-linear leaves them out"</p>
            })}
        </fieldset>
    }
}

/// A LoRA plan on an MoE model under transformers whose experts are 3D parameters, with expert targets checked.
fn experts_as_parameters(c: Ctx) -> bool {
    c.plan.with(|p| {
        p.method != Method::Full
            && p.experts_are_parameters()
            && [Target::Gate, Target::Up, Target::Down]
                .iter()
                .any(|t| p.targets.contains(*t))
    }) && c.is_moe()
}
