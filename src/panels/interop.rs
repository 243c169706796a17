//! The page's interop controls: "Copy as code" (the plan as a script or training config) and "Import a training
//! config" (pasted, dropped or chosen files applied to the plan, so the URL follows).
//!
//! The components only lay out the controls: each event calls one plain method of the component's state, so the
//! view types (and the code generated for them) stay small.

use crate::browser;
use crate::state::{ctx, Ctx};
use leptos::ev::{DragEvent, Event};
use leptos::prelude::*;
use peakplan_core::interop::{export, export_refused, import_over, ExportFormat, MAX_IMPORT_BYTES};
use wasm_bindgen::JsCast;

/// The state of "Copy as code".
#[derive(Clone, Copy)]
struct Copier {
    c: Ctx,
    format: RwSignal<ExportFormat>,
    /// What the last copy did.
    status: RwSignal<String>,
    /// The last copied text, shown below the button (clipboards can be blocked).
    last: RwSignal<String>,
}

impl Copier {
    fn pick(self, ev: Event) {
        if let Some(f) = ExportFormat::from_key(&event_target_value(&ev)) {
            self.format.set(f);
        }
    }

    fn copy(self) {
        let f = self.format.get_untracked();
        if let Some(why) = untrack(|| self.c.with_model(|_, p| export_refused(p, f))) {
            self.status.set(why);
            return;
        }
        let text = untrack(|| self.c.with_model(|a, p| a.map(|a| export(p, a, f))));
        let Some(text) = text else {
            self.status
                .set("The Hub model has not loaded: nothing to copy yet".into());
            return;
        };
        browser::copy(&text);
        self.status.set(format!(
            "{} copied ({} lines)",
            f.label(),
            text.lines().count()
        ));
        self.last.set(text);
    }
}

/// A format choice and a button that copies the current plan's export; the copied text is shown below it too
/// (clipboards can be blocked).
#[component]
pub fn CopyAsCode() -> impl IntoView {
    let s = Copier {
        c: ctx(),
        format: RwSignal::new(ExportFormat::Python),
        status: RwSignal::new(String::new()),
        last: RwSignal::new(String::new()),
    };
    view! {
        <span class="copy-code">
            <select data-testid="copy-code-format" aria-label="Code format" on:change=move |ev| s.pick(ev)>
                {ExportFormat::ALL
                    .iter()
                    .map(|f| view! { <option value=f.key() selected=*f == ExportFormat::Python>{f.label()}</option> })
                    .collect_view()}
            </select>
            <button data-testid="copy-code" on:click=move |_| s.copy()>"Copy as code"</button>
            <span class="status" role="status" data-testid="copy-code-status">{move || s.status.get()}</span>
            {move || (!s.last.with(String::is_empty)).then(|| view! {
                <details class="code">
                    <summary>{move || format!("Show the copied {}", s.format.get().file_name())}</summary>
                    <pre data-testid="code-preview">{move || s.last.get()}</pre>
                </details>
            })}
        </span>
    }
}

/// The state of "Import a training config".
#[derive(Clone, Copy)]
struct Importer {
    c: Ctx,
    /// The pasted text.
    text: RwSignal<String>,
    /// The dropped or chosen files: (name, text).
    files: RwSignal<Vec<(String, String)>>,
    error: RwSignal<Option<String>>,
    notes: RwSignal<Vec<String>>,
    unsupported: RwSignal<Vec<String>>,
}

impl Importer {
    /// Reads files into `files` (a file of the same name replaces the earlier one).
    fn read_files(self, list: web_sys::FileList) {
        for i in 0..list.length() {
            let Some(file) = list.get(i) else { continue };
            let name = file.name();
            if file.size() > MAX_IMPORT_BYTES as f64 {
                self.error.set(Some(format!(
                    "{name}: is {} bytes; training configs are a few KB (at most {MAX_IMPORT_BYTES} accepted)",
                    file.size()
                )));
                continue;
            }
            let promise = file.text();
            leptos::task::spawn_local(async move {
                match promise.await {
                    Ok(v) => self.add_file(name, v.as_string().unwrap_or_default()),
                    Err(_) => self
                        .error
                        .set(Some(format!("{name}: the file could not be read"))),
                }
            });
        }
    }

    fn add_file(self, name: String, text: String) {
        self.files.update(|f| {
            f.retain(|(n, _)| *n != name);
            f.push((name, text));
        });
    }

    fn choose(self, ev: Event) {
        let input = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok());
        if let Some(list) = input.as_ref().and_then(|i| i.files()) {
            self.read_files(list);
        }
        // Choosing the same file again fires `change` again.
        if let Some(i) = input {
            i.set_value("");
        }
    }

    fn drop_files(self, ev: DragEvent) {
        ev.prevent_default();
        if let Some(list) = ev.data_transfer().and_then(|d| d.files()) {
            self.read_files(list);
        }
    }

    /// Merges the files and the pasted text over the current plan; on an error the plan stays as it was and only
    /// the message changes.
    fn apply(self) {
        let mut inputs = self.files.get_untracked();
        let pasted = self.text.get_untracked();
        if !pasted.trim().is_empty() {
            inputs.push(("pasted text".into(), pasted));
        }
        let refs: Vec<(&str, &str)> = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        match import_over(&self.c.plan.get_untracked(), &refs) {
            Ok(imported) => {
                self.error.set(None);
                if imported.carried.contains(&"model") {
                    self.c.custom.set(None);
                }
                self.unsupported.set(imported.unsupported);
                self.notes.set(imported.notes);
                self.c.edit(|p| *p = imported.plan);
            }
            Err(e) => {
                self.error.set(Some(e.to_string()));
                self.notes.set(Vec::new());
                self.unsupported.set(Vec::new());
            }
        }
    }

    /// Whether files are waiting to be applied.
    fn has_files(self) -> bool {
        !self.files.with(Vec::is_empty)
    }
}

/// Paste, drop or choose training configs; "Apply" merges them over the current plan.
#[component]
pub fn ImportConfig() -> impl IntoView {
    let s = Importer {
        c: ctx(),
        text: RwSignal::new(String::new()),
        files: RwSignal::new(Vec::new()),
        error: RwSignal::new(None),
        notes: RwSignal::new(Vec::new()),
        unsupported: RwSignal::new(Vec::new()),
    };
    view! {
        <details class="config import">
            <summary>"Import a training config"</summary>
            <p class="note">"Paste or drop a PEFT adapter_config.json, a bitsandbytes or GPTQ quantization_config (or a config.json holding one), TrainingArguments JSON, an accelerate config YAML, an axolotl YAML, a DeepSpeed JSON, a torchtune config, or an Unsloth notebook's FastLanguageModel and SFTConfig calls. Several files merge in order; the current plan keeps what they do not say."</p>
            <textarea rows="6" aria-label="Training config" data-testid="import-input" placeholder="adapter: qlora\nlora_r: 16\nmicro_batch_size: 2\n…"
                on:input=move |ev| s.text.set(event_target_value(&ev))
                on:dragover=move |ev: DragEvent| ev.prevent_default()
                on:drop=move |ev| s.drop_files(ev)></textarea>
            <div class="row">
                <label class="file">
                    "Choose files "
                    <input type="file" multiple accept=".json,.yaml,.yml,.txt" data-testid="import-file" on:change=move |ev| s.choose(ev)/>
                </label>
                <button data-testid="import-apply" on:click=move |_| s.apply()>"Apply to the plan"</button>
                {move || s.has_files().then(|| view! {
                    <button on:click=move |_| s.files.set(Vec::new())>"Forget the files"</button>
                })}
            </div>
            {move || s.has_files().then(|| view! {
                <ul class="files">{s.files.get().into_iter().map(|(n, _)| view! { <li>{n}</li> }).collect_view()}</ul>
            })}
            {move || s.error.get().map(|e| view! { <p class="error" role="alert" data-testid="import-error">{e}</p> })}
            {move || {
                let u = s.unsupported.get();
                let n = s.notes.get();
                (!u.is_empty() || !n.is_empty()).then(|| view! {
                    <div class="note" data-testid="import-notes">
                        {(!u.is_empty()).then(|| view! {
                            <p><strong>"Not modelled, so not in the plan: "</strong>{u.join(", ")}</p>
                        })}
                        <ul>{n.into_iter().map(|x| view! { <li>{x}</li> }).collect_view()}</ul>
                    </div>
                })
            }}
        </details>
    }
}
