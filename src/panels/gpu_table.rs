//! "Which GPU?": the plan on every bundled GPU, worked out off the slider's critical path and only while open.

use crate::gpu_rows::{summary, table_html, UseGpu};
use crate::planner::LimitSteps;
use crate::state::{ctx, on_settled_plan_stepped, Pieces, Step};
use leptos::prelude::*;
use peakplan_core::gpu_choice::{plan_on_gpus, set_row_limit, GpuFit, GpuFitsSearch};
use peakplan_core::solve::{Search, Steps};
use std::time::Duration;
use wasm_bindgen::JsCast;

/// Waits this long after the last change before solving: each row runs two searches of a dozen estimates.
const SETTLE: Duration = Duration::from_millis(120);

/// The button under a click inside the table, as what it applies.
fn clicked(ev: &web_sys::MouseEvent) -> Option<UseGpu> {
    let button = ev
        .target()?
        .dyn_into::<web_sys::Element>()
        .ok()?
        .closest("button[data-gpu]")
        .ok()??;
    UseGpu::from_attrs(
        button.get_attribute("data-gpu"),
        button.get_attribute("data-gpus"),
    )
}

/// The plan on every bundled GPU: fit and headroom, the largest micro-batch and longest sequence, and how many of
/// that GPU hold it (sharded with ZeRO-3 beyond one). "Use" makes that GPU, and that count, the plan.
#[component]
pub fn GpuTable() -> impl IntoView {
    let c = ctx();
    let open = RwSignal::new(false);
    let table: RwSignal<Option<String>> = RwSignal::new(None);
    // The rows shown, their limits filled in piece by piece.
    let rows: StoredValue<Vec<GpuFit>> = StoredValue::new(Vec::new());
    let pieces = Pieces::new();
    let render = move |plan: &peakplan_core::Plan| {
        rows.with_value(|r| {
            table.set(Some(table_html(
                r,
                plan.gpu.id(),
                plan.micro_batch,
                plan.seq_len,
            )))
        })
    };
    // Every GPU's verdict a row per task, then each row's largest batch and longest sequence (a dozen replays
    // each), a replayed probe per task.
    on_settled_plan_stepped(
        "gpu table",
        SETTLE,
        move || open.get(),
        move |plan| {
            // The last plan's rows are moot once a new plan is being worked out.
            pieces.cancel();
            GpuFitsSearch::new(plan)
        },
        move |search, arch| {
            let Some(found) = search.step(arch) else {
                return false;
            };
            rows.set_value(found);
            let plan = search.plan().clone();
            render(&plan);
            let step: Step<LimitSteps> = std::rc::Rc::new(move |steps, arch| {
                steps.step(
                    arch,
                    |i, limit| {
                        rows.with_value(|r| {
                            Some(Search::of(limit, &plan, r.get(i)?.capacity_bytes))
                        })
                    },
                    |i, limit, answer| {
                        rows.update_value(|r| {
                            if let Some(row) = r.get_mut(i) {
                                set_row_limit(row, limit, answer);
                            }
                        });
                        render(&plan);
                    },
                )
            });
            pieces.steps(
                "gpu table row limits",
                LimitSteps::new(rows.with_value(Vec::len)),
                arch,
                step,
            );
            true
        },
    );
    let line = move || {
        let device = c.computed.with(|comp| comp.selected.device_bytes);
        summary(device, c.plan.with(|p| p.gpus))
    };
    let on_click = move |ev: web_sys::MouseEvent| {
        let Some(choice) = clicked(&ev) else { return };
        c.edit(|p| {
            if let Some(n) = choice.gpus {
                *p = plan_on_gpus(p, n);
            }
            p.gpu = choice.gpu;
        });
    };
    view! {
        <details class="gpu-table" data-testid="gpu-table" on:toggle=move |ev| open.set(crate::browser::details_open(&ev))>
            <summary data-testid="gpu-table-summary">{line}</summary>
            <div class="scroller" on:click=on_click inner_html=move || {
                table.get().unwrap_or_else(|| r#"<p class="why">Working out every GPU…</p>"#.to_string())
            }></div>
        </details>
    }
}
