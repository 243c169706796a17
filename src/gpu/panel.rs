//! The "Check the engine on this GPU" panel: runs the micro QLoRA measurement on the visitor's GPU and shows the
//! measured peak GPU buffer memory of a step beside the accounting engine's prediction for the same micro run (a
//! check of the engine, not of the reader's plan), the loss over the steps, the live-bytes timeline of a step,
//! adapter, step time, GFLOP/s and the fused vs unfused dequantization.
//! Where WebGPU is absent it says `unsupported` and nothing else on the page changes.
//!
//! The results are written as one HTML string (every text from outside this module escaped): a few reactive
//! nodes instead of dozens keeps the page's WebAssembly small.

use super::device::{webgpu_present, GpuError, StepPhase};
use super::runner::{measure, Measurement, RunOptions, StepRecord};
use crate::html::esc;
use leptos::prelude::*;
use peakplan_core::micro::{MicroAttention, MicroConfig, MicroLoss};
use peakplan_core::units::format_bytes;
use peakplan_core::Plan;
use std::fmt::Write;
use std::rc::Rc;

#[derive(Clone, Debug, PartialEq)]
enum Status {
    Idle,
    Unsupported(String),
    Running,
    Done,
    Error(String),
}

impl Status {
    /// The `gpu-status` text of the page contract.
    fn text(&self) -> String {
        match self {
            Status::Idle => String::new(),
            Status::Unsupported(_) => "unsupported".into(),
            Status::Running => "running".into(),
            Status::Done => "done".into(),
            Status::Error(e) => format!("error: {e}"),
        }
    }
}

fn describe(c: &MicroConfig) -> String {
    format!(
        "{} layers, hidden {}, {} heads ({} key/value), MLP {}, vocab {}; LoRA rank {} on {}; batch {} x {} tokens; {} attention; {} loss",
        c.layers,
        c.hidden,
        c.heads,
        c.kv_heads,
        c.intermediate,
        c.vocab,
        c.rank,
        c.targets.key(),
        c.batch,
        c.seq,
        match c.attention {
            MicroAttention::Eager => "eager",
            MicroAttention::Tiled => "tiled online-softmax",
        },
        match c.loss {
            MicroLoss::Whole => "whole".to_string(),
            MicroLoss::Chunked(_) => format!("chunked ({} tokens)", c.loss_chunk()),
        }
    )
}

/// `v` with `d` decimals, rounded half up. Integer arithmetic only: Rust's float formatting would add kilobytes of
/// WebAssembly to the page for a handful of numbers.
fn fixed(v: f64, d: u32) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let scale = 10u64.pow(d);
    let n = (v.abs() * scale as f64 + 0.5) as u64;
    let mut s = String::new();
    if v < 0.0 && n > 0 {
        s.push('-');
    }
    s.push_str(&(n / scale).to_string());
    if d > 0 {
        let frac = (n % scale).to_string();
        s.push('.');
        for _ in frac.len()..d as usize {
            s.push('0');
        }
        s.push_str(&frac);
    }
    s
}

/// The live bytes of one step as a small SVG step chart (integer coordinates in a 1000 x 120 box), one band per
/// phase, with the peak marked.
fn timeline_svg(out: &mut String, rec: &StepRecord) {
    const W: u64 = 1000;
    const H: u64 = 120;
    let mut points: Vec<(StepPhase, u64)> = vec![(StepPhase::Load, rec.load_bytes)];
    points.extend(rec.timeline.iter().map(|e| (e.phase, e.live)));
    // The axis runs from just below the lowest live bytes (the load level) to the peak, to show the step's motion.
    let max = points.iter().map(|p| p.1).max().unwrap_or(1);
    let min = points.iter().map(|p| p.1).min().unwrap_or(0);
    let base = min.saturating_sub((max - min) / 8);
    let span = (max - base).max(1) as u128;
    let n = (points.len().max(2) - 1) as u64;
    let x = |i: usize| i as u64 * W / n;
    let y = |v: u64| H - 4 - ((v.saturating_sub(base)) as u128 * (H - 16) as u128 / span) as u64;
    let _ = write!(
        out,
        "<svg class=\"gpu-timeline\" data-testid=\"gpu-timeline\" viewBox=\"0 0 {W} {H}\" preserveAspectRatio=\"none\" \
         role=\"img\" aria-label=\"live GPU buffer bytes through one step, peak {} during {}\">",
        format_bytes(rec.peak_bytes),
        rec.peak_phase.label()
    );
    let mut start = 0usize;
    for i in 1..=points.len() {
        if i == points.len() || points[i].0 != points[start].0 {
            let (x0, x1) = (x(start), x(i.min(points.len() - 1)).max(x(start) + 1));
            let _ = write!(
                out,
                "<rect class=\"band {p}\" x=\"{x0}\" y=\"0\" width=\"{}\" height=\"{H}\"><title>{p}</title></rect>",
                x1 - x0,
                p = points[start].0.label()
            );
            start = i;
        }
    }
    let py = y(rec.peak_bytes);
    let _ = write!(
        out,
        "<line class=\"peak\" x1=\"0\" x2=\"{W}\" y1=\"{py}\" y2=\"{py}\"></line>"
    );
    let _ = write!(out, "<path class=\"live\" d=\"M0 {}", y(points[0].1));
    for (i, p) in points.iter().enumerate().skip(1) {
        let _ = write!(out, " H{} V{}", x(i), y(p.1));
    }
    out.push_str("\"></path></svg>");
}

/// Buffers live at the peak, summed by label, largest first.
fn peak_breakdown(rec: &StepRecord) -> Vec<(&'static str, u64, usize)> {
    let mut by: Vec<(&'static str, u64, usize)> = Vec::new();
    for (label, size) in &rec.peak_buffers {
        match by.iter_mut().find(|e| e.0 == *label) {
            Some(e) => {
                e.1 += size;
                e.2 += 1;
            }
            None => by.push((label, *size, 1)),
        }
    }
    // Insertion sort, largest first (a few dozen labels; the standard sort would add its code to the page).
    for i in 1..by.len() {
        let mut j = i;
        while j > 0 && by[j - 1].1 < by[j].1 {
            by.swap(j - 1, j);
            j -= 1;
        }
    }
    by
}

fn figure(out: &mut String, testid: &str, attr: &str, value: &str, label: &str, shown: &str) {
    let _ = write!(
        out,
        "<div class=\"figure\" data-testid=\"{testid}\" {attr}=\"{value}\"><span class=\"label\">{label}</span>\
         <span class=\"value\">{shown}</span></div>"
    );
}

/// Everything below the button, as HTML.
fn results_html(
    status: &Status,
    note: Option<&str>,
    result: Option<&Measurement>,
    predicted: u64,
    stale: bool,
) -> String {
    let mut o = String::new();
    if let Some(n) = note {
        let _ = write!(
            o,
            "<p class=\"note\" role=\"alert\" data-testid=\"gpu-note\">{}</p>",
            esc(n)
        );
    }
    match status {
        Status::Unsupported(why) => {
            let _ = write!(
                o,
                "<p class=\"note\">WebGPU is not available here ({}). The planner does not need it; a browser with \
                 WebGPU (Chrome, Edge, Safari 26, Firefox 141 on Windows) can run the measurement.</p>",
                esc(why)
            );
        }
        Status::Error(_) => o.push_str(
            "<p class=\"note\">Nothing of the run is left on the GPU: every buffer it created was destroyed.</p>",
        ),
        _ => {}
    }
    let measured = result.map(|m| m.peak_bytes).unwrap_or(0);
    let losses = result.map(|m| m.losses()).unwrap_or_default();
    let dash = |v: Option<String>| v.unwrap_or_else(|| "–".into());
    o.push_str("<div class=\"figures gpu-figures\">");
    figure(
        &mut o,
        "gpu-measured-peak",
        "data-bytes",
        &measured.to_string(),
        "Micro model, measured: peak GPU buffer memory",
        &dash(result.map(|_| format_bytes(measured))),
    );
    figure(
        &mut o,
        "gpu-predicted-peak",
        "data-bytes",
        &predicted.to_string(),
        "Micro model, predicted by the accounting engine",
        &format_bytes(predicted),
    );
    let diff = (measured > 0 && predicted > 0).then(|| {
        let pct = (measured as f64 - predicted as f64) / predicted as f64 * 100.0;
        format!("{}{}%", if pct >= 0.0 { "+" } else { "" }, fixed(pct, 1))
    });
    figure(
        &mut o,
        "gpu-difference",
        "data-value",
        &diff.clone().unwrap_or_default(),
        "Difference",
        &dash(diff),
    );
    for (id, label, v) in [
        ("gpu-loss-first", "Loss, first step", losses.first()),
        ("gpu-loss-last", "Loss, last step", losses.last()),
    ] {
        let text = v.map(|l| fixed(*l as f64, 6)).unwrap_or_default();
        figure(
            &mut o,
            id,
            "data-value",
            &text,
            label,
            &dash(v.map(|l| fixed(*l as f64, 4))),
        );
    }
    o.push_str("</div>");
    if stale {
        o.push_str(
            "<p class=\"note\" data-testid=\"gpu-stale\">The plan changed since this measurement; measure again \
             for the new micro run.</p>",
        );
    }
    let Some(m) = result else {
        return o;
    };
    o.push_str("<div class=\"gpu-details\">");
    let _ = write!(
        o,
        "<p data-testid=\"gpu-adapter\">Adapter: {}</p>",
        esc(&m.adapter.summary())
    );
    let list: Vec<String> = losses.iter().map(|l| fixed(*l as f64, 4)).collect();
    let _ = write!(
        o,
        "<p data-testid=\"gpu-losses\">Loss per step: {}</p>",
        list.join(" → ")
    );
    let _ = write!(
        o,
        "<p data-testid=\"gpu-step-time\">{} ms per step ({}); matmuls at {} effective GFLOP/s</p>",
        fixed(m.step_ms(), 1),
        m.step_time_source(),
        fixed(m.gflops(), 2)
    );
    if let Some(d) = &m.dequant {
        let _ = write!(
            o,
            "<p data-testid=\"gpu-dequant\">One layer's seven base matmuls: the fused dequantize-matmul allocates {} \
             and takes {} ms; dequantize-then-matmul allocates {} (a dense f32 copy of each weight in turn) and \
             takes {} ms: {} more memory.</p>",
            format_bytes(d.fused_bytes),
            fixed(d.fused_ms, 1),
            format_bytes(d.unfused_bytes),
            fixed(d.unfused_ms, 1),
            format_bytes(d.unfused_bytes.saturating_sub(d.fused_bytes))
        );
    }
    if let Some(r) = m.last() {
        let phases: Vec<String> = StepPhase::ALL
            .iter()
            .zip(r.phase_peaks)
            .map(|(p, b)| format!("{} {}", p.label(), format_bytes(b)))
            .collect();
        let _ = write!(
            o,
            "<figure class=\"gpu-chart\"><figcaption>Live GPU buffer bytes through one step, from the load level ({}) \
             to the peak ({}, during {}; dashed). Phase peaks: {}.</figcaption>",
            format_bytes(r.load_bytes),
            format_bytes(r.peak_bytes),
            r.peak_phase.label(),
            phases.join(" · ")
        );
        timeline_svg(&mut o, r);
        o.push_str(
            "</figure><details class=\"gpu-peak\"><summary>Buffers live at the peak</summary><table><thead><tr>\
             <th>Buffer</th><th class=\"num\">Count</th><th class=\"num\">Bytes</th></tr></thead><tbody>",
        );
        for (label, bytes, count) in peak_breakdown(r) {
            let _ = write!(
                o,
                "<tr><td>{}</td><td class=\"num\">{count}</td><td class=\"num\" title=\"{bytes}\">{}</td></tr>",
                esc(label),
                format_bytes(bytes)
            );
        }
        o.push_str("</tbody></table></details>");
    }
    o.push_str("</div>");
    o
}

/// The panel. `predict` gives the accounting engine's peak for a micro run.
#[component]
pub fn GpuPanel(
    #[prop(into)] plan: Signal<Plan>,
    #[prop(into)] predict: Callback<MicroConfig, u64>,
) -> impl IntoView {
    let cfg = Memo::new(move |_| MicroConfig::from_plan(&plan.get()));
    let initial = if webgpu_present() {
        Status::Idle
    } else {
        Status::Unsupported("this browser has no WebGPU (navigator.gpu)".into())
    };
    let status = RwSignal::new(initial);
    let result: RwSignal<Option<Measurement>> = RwSignal::new(None);
    let progress = RwSignal::new(String::new());
    let note = RwSignal::new(None::<String>);

    let start = move |_| {
        note.set(None);
        if !webgpu_present() {
            status.set(Status::Unsupported(
                "this browser has no WebGPU (navigator.gpu)".into(),
            ));
            return;
        }
        let on_progress: Rc<dyn Fn(&super::runner::Progress)> = Rc::new(move |p| {
            progress.set(format!(
                "step {} of {}: {}",
                p.step,
                p.steps,
                p.phase.label()
            ));
        });
        // No memory budget: that is fault injection for the tests, never set by the page.
        let opts = RunOptions {
            on_progress: Some(on_progress),
            memory_budget: None,
            ..RunOptions::default()
        };
        let run = match measure(cfg.get_untracked(), opts) {
            Ok(run) => run,
            Err(GpuError::Busy) => {
                note.set(Some(
                    "A measurement is already running; this one was not started.".into(),
                ));
                return;
            }
            Err(e) => {
                status.set(Status::Error(e.to_string()));
                return;
            }
        };
        status.set(Status::Running);
        progress.set("requesting the GPU".into());
        leptos::task::spawn_local(async move {
            match run.await {
                Ok(m) => {
                    result.set(Some(m));
                    status.set(Status::Done);
                }
                Err(GpuError::Unsupported(why)) => status.set(Status::Unsupported(why)),
                Err(e) => status.set(Status::Error(e.to_string())),
            }
            progress.set(String::new());
        });
    };

    let results = move || {
        let current = cfg.get();
        result.with(|r| {
            // The prediction is for the measured run when there is one, else for the current plan's micro run.
            let shown = r.as_ref().map(|m| &m.config).unwrap_or(&current);
            let predicted = predict.run(shown.clone());
            let stale = r.as_ref().is_some_and(|m| m.config != current);
            results_html(
                &status.get(),
                note.get().as_deref(),
                r.as_ref(),
                predicted,
                stale,
            )
        })
    };

    let intro = move || {
        format!(
            "<h2>Check the engine on this GPU</h2><p class=\"note\"><strong>This does not measure your plan.</strong> \
             It trains a micro Llama-style model on this device through WebGPU (NF4 weights with double \
             quantization, LoRA adapters, AdamW) and compares its peak GPU buffer memory, counted by one allocation \
             tracker, with the engine's prediction for that micro model: evidence that the engine behind your \
             figures counts real allocations.</p><p class=\"gpu-config\" data-testid=\"gpu-config\">The micro model, \
             scaled down from your plan: {}.</p>",
            esc(&describe(&cfg.get()))
        )
    };

    view! {
        <section class="gpu-panel" aria-label="Check the engine on this GPU" data-testid="gpu-panel">
            <div class="gpu-intro" inner_html=intro></div>
            <div class="gpu-row">
                <button data-testid="gpu-measure" on:click=start>"Measure on this GPU"</button>
                <span class="gpu-status" data-testid="gpu-status" role="status">{move || status.get().text()}</span>
                <span class="note" data-testid="gpu-progress">{move || progress.get()}</span>
            </div>
            <div class="gpu-results" inner_html=results></div>
        </section>
    }
}
