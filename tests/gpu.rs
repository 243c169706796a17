//! Browser tests of the WebGPU micro QLoRA path (wasm-bindgen-test in headless Chromium on SwiftShader): every kernel
//! against the CPU reference on fresh random inputs, a full step against the CPU step, the tracker's peak, the loss
//! over 5 steps, the failure paths, and the page panel. Sizes are tiny: SwiftShader is a CPU.
//!
//! Run: `CHROMEDRIVER=/usr/bin/chromedriver WASM_BINDGEN_TEST_TIMEOUT=600 cargo test -p peakplan-web
//! --target wasm32-unknown-unknown --test gpu`.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use leptos::prelude::*;
use peakplan_core::micro::ops;
use peakplan_core::micro::{
    predicted_peak_bytes, AdamW, MicroAttention, MicroConfig, MicroLoss, MicroModel, Rng,
};
use peakplan_core::plan::Targets;
use peakplan_core::Plan;
use peakplan_web::gpu::device::{AdapterInfo, Buf, Gpu, GpuError, Needs, StepPhase};
use peakplan_web::gpu::runner::{
    is_running, last_run_leftover, measure, measure_model, RunOptions,
};
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[path = "gpu/kernels.rs"]
mod kernels;

/// `max |a - b| / max |b|`: the error relative to the reference's scale.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// `||a - b|| / ||b||` (Euclidean): the error of a whole tensor, for the full step, where a few near-zero
/// gradients make AdamW's first update (`g / (|g| + eps)`) sensitive element by element.
fn rel_err_l2(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    let d: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let n: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (d / n.max(1e-60)).sqrt() as f32
}

fn check_l2(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> f32 {
    let e = rel_err_l2(gpu, cpu);
    web_sys::console::log_1(&format!("{what}: relative error (L2) {e:.2e}").into());
    assert!(e < tol, "{what}: relative error {e} (tolerance {tol})");
    e
}

fn check(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> f32 {
    let e = rel_err(gpu, cpu);
    web_sys::console::log_1(&format!("{what}: relative error {e:.2e}").into());
    assert!(e < tol, "{what}: relative error {e} (tolerance {tol})");
    e
}

fn fresh_rng() -> (Rng, u64) {
    let seed = (js_sys::Math::random() * 1e15) as u64;
    web_sys::console::log_1(&format!("seed {seed}").into());
    (Rng::new(seed), seed)
}

async fn open() -> Gpu {
    Gpu::open(Needs::default()).await.expect("a WebGPU device")
}

async fn read(gpu: &Gpu, b: Buf) -> Vec<f32> {
    gpu.read_f32(b).await.unwrap()
}

fn tiny(attention: MicroAttention, loss: MicroLoss) -> MicroConfig {
    MicroConfig {
        hidden: 64,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        intermediate: 128,
        vocab: 96,
        rank: 4,
        targets: Targets::ALL_LINEAR,
        alpha: 8.0,
        batch: 2,
        seq: 5,
        attention,
        loss,
        adamw: AdamW::default(),
        rope_theta: 10000.0,
        norm_eps: 1e-5,
        seed: 0,
    }
}

#[wasm_bindgen_test]
async fn a_full_step_matches_the_cpu_reference() {
    let (_, seed) = fresh_rng();
    for (attn, loss, fused) in [
        (MicroAttention::Eager, MicroLoss::Whole, true),
        (MicroAttention::Tiled, MicroLoss::Chunked(3), false),
    ] {
        let mut cfg = tiny(attn, loss);
        cfg.seed = seed;
        let mut model = MicroModel::new(&cfg).unwrap();
        // Random B as well, so that every adapter gets a gradient on the first step.
        let mut rng = Rng::new(seed ^ 1);
        for id in model.trainable() {
            if id.b {
                model
                    .tensor_mut(id)
                    .iter_mut()
                    .for_each(|v| *v = rng.uniform(0.2));
            }
        }
        let batch = model.batch();
        let cpu = model.clone();
        let (loss_cpu, grads_cpu) = cpu.loss_and_grads(&batch);
        let opts = RunOptions {
            steps: 1,
            fused,
            compare_dequant: false,
            capture: true,
            on_progress: None,
            memory_budget: None,
        };
        let m = measure_model(model.clone(), batch, opts)
            .unwrap()
            .await
            .unwrap();
        let what = format!("{attn:?}/{loss:?}/fused={fused}");
        let loss_gpu = m.losses()[0];
        let e = (loss_gpu - loss_cpu).abs() / loss_cpu.abs();
        web_sys::console::log_1(
            &format!("{what} loss {loss_gpu} vs {loss_cpu}: relative error {e:.2e}").into(),
        );
        assert!(e < 1e-4, "{what}: loss {loss_gpu} vs {loss_cpu}");
        let cap = m.capture.expect("captured");
        let ids = cpu.trainable();
        let (mut worst_g, mut worst_p) = (0f32, 0f32);
        for (i, id) in ids.iter().enumerate() {
            worst_g = worst_g.max(check_l2(
                &format!("{what} grad {id:?}"),
                &cap.grads[i],
                &grads_cpu[i],
                1e-4,
            ));
            // The update is checked against AdamW applied to the GPU's own gradient: at the first step AdamW
            // moves each weight by about lr * sign(g), so a gradient within rounding of zero may move either
            // way, and comparing with the CPU's whole step would test that coin flip, not the kernel.
            let mut expected = model.tensor(*id).to_vec();
            let (mut m0, mut v0) = (vec![0f32; expected.len()], vec![0f32; expected.len()]);
            ops::adamw(
                &cfg.adamw,
                1,
                &mut expected,
                &cap.grads[i],
                &mut m0,
                &mut v0,
            );
            worst_p = worst_p.max(check(
                &format!("{what} updated {id:?}"),
                &cap.params[i],
                &expected,
                1e-5,
            ));
        }
        web_sys::console::log_1(
            &format!("{what}: worst relative error, gradients {worst_g:.2e}, updated adapters {worst_p:.2e}").into(),
        );
        assert_eq!(m.created, m.destroyed);
    }
}

#[wasm_bindgen_test]
async fn five_steps_lower_the_loss_and_the_peak_is_the_tracker_sum() {
    let plan = Plan::parse_query("model=llama-2-7b&method=qlora&r=8&b=1&s=128").plan;
    let cfg = MicroConfig::from_plan(&plan);
    let m = measure(cfg.clone(), RunOptions::default())
        .unwrap()
        .await
        .unwrap();
    let losses = m.losses();
    web_sys::console::log_1(&format!("losses {losses:?}").into());
    assert_eq!(losses.len(), 5);
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    // The peak is the sum of the buffers live at that moment, and every step after the first repeats it.
    for s in &m.steps {
        assert_eq!(
            s.peak_buffers.iter().map(|b| b.1).sum::<u64>(),
            s.peak_bytes
        );
        assert!(s.peak_bytes >= s.load_bytes);
        assert_eq!(s.phase_peaks.iter().copied().max(), Some(s.peak_bytes));
    }
    for s in &m.steps[1..] {
        assert_eq!(s.peak_bytes, m.peak_bytes);
    }
    let last = m.last().unwrap();
    assert!(last.timeline.iter().any(|e| e.phase == StepPhase::Backward));
    assert_eq!(
        last.timeline.last().map(|e| e.live),
        Some(last.load_bytes),
        "the step returns to the load level"
    );
    assert_eq!(m.created, m.destroyed);
    assert_eq!(last_run_leftover(), Some(0));
    assert!(
        last.peak_buffers
            .iter()
            .all(|(label, _)| !label.contains("dequantized")),
        "the fused step never makes a dense weight"
    );
    let d = m.dequant.clone().unwrap();
    let largest = (cfg.hidden * cfg.intermediate * 4) as u64;
    assert!(d.unfused_bytes >= d.fused_bytes + largest, "{d:?}");
    let predicted = predicted_peak_bytes(&cfg);
    web_sys::console::log_1(
        &format!(
            "peak {} B (load {} B, phase peaks {:?}, {:?}); predicted {} B, ratio {:.4}; step {:.1} ms ({}), {:.3} GFLOP/s; adapter {}; dequant {:?}",
            m.peak_bytes,
            last.load_bytes,
            last.phase_peaks,
            last.peak_phase,
            predicted,
            m.peak_bytes as f64 / predicted as f64,
            m.step_ms(),
            m.step_time_source(),
            m.gflops(),
            m.adapter.summary(),
            d
        )
        .into(),
    );
    for (label, size) in &last.peak_buffers {
        web_sys::console::log_1(&format!("  at peak: {label} {size}").into());
    }
}

#[wasm_bindgen_test]
async fn a_destroyed_device_ends_the_run_with_an_error_and_frees_everything() {
    let cfg = tiny(MicroAttention::Tiled, MicroLoss::Whole);
    let on_progress: Rc<dyn Fn(&peakplan_web::gpu::runner::Progress)> = Rc::new(|p| {
        if p.step == 2 && p.phase == StepPhase::Backward {
            p.device.destroy();
        }
    });
    let opts = RunOptions {
        steps: 3,
        on_progress: Some(on_progress),
        ..RunOptions::default()
    };
    let err = measure(cfg, opts)
        .unwrap()
        .await
        .expect_err("the run fails");
    web_sys::console::log_1(&format!("destroyed device: {err}").into());
    assert!(matches!(err, GpuError::DeviceLost(_)), "{err:?}");
    assert_eq!(last_run_leftover(), Some(0));
    assert!(!is_running());
}

/// Whether the adapter is SwiftShader (the suite's adapter, see `webdriver.json`), by its adapter info.
fn is_swiftshader(a: &AdapterInfo) -> bool {
    [&a.vendor, &a.architecture, &a.description]
        .iter()
        .any(|s| s.to_ascii_lowercase().contains("swiftshader"))
}

#[wasm_bindgen_test]
async fn the_memory_budget_fails_a_buffer_creation_as_out_of_memory() {
    let gpu = open().await;
    gpu.tracker.borrow_mut().set_budget(Some(1000));
    gpu.push_scopes();
    let a = gpu.alloc_f32(128, "first").unwrap();
    let err = gpu.alloc_f32(150, "second").expect_err("over the budget");
    // The budget counts live bytes: once `first` is released, the same creation fits.
    gpu.free(a);
    let b = gpu.alloc_f32(150, "second");
    gpu.pop_scopes()
        .await
        .expect("the browser reported nothing: no buffer was created over the budget");
    let text = err.to_string();
    web_sys::console::log_1(&format!("budget: {text}").into());
    assert!(matches!(err, GpuError::OutOfMemory(_)), "{err:?}");
    assert!(text.starts_with("out of GPU memory: "), "{text}");
    for part in ["600 byte buffer", "from 512 to 1112 bytes", "1000 bytes"] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    assert_eq!(b.unwrap().size, 600);
    {
        let t = gpu.tracker.borrow();
        assert_eq!(
            (t.created, t.destroyed),
            (2, 1),
            "the refused buffer was never created"
        );
        assert_eq!((t.live_bytes(), t.live_sum()), (600, 600));
    }
    gpu.destroy_all();
    assert_eq!(gpu.tracker.borrow().live_bytes(), 0);
    assert_eq!(gpu.tracker.borrow().live_count(), 0);
}

#[wasm_bindgen_test]
async fn out_of_memory_ends_the_run_with_an_error_frees_everything_and_the_next_run_succeeds() {
    let cfg = tiny(MicroAttention::Eager, MicroLoss::Whole);
    // One step and no comparison: the most the run ever holds is the step's peak.
    let opts = RunOptions {
        steps: 1,
        compare_dequant: false,
        ..RunOptions::default()
    };
    let first = measure(cfg.clone(), opts.clone()).unwrap().await.unwrap();
    let (peak, load) = (first.peak_bytes, first.steps[0].load_bytes);
    let peak_phase = first.steps[0].peak_phase;
    assert!(peak > load && load > 0, "peak {peak}, load {load}");
    // Half the peak (possibly below the resident set: then the upload fails), and one byte short of the peak (the
    // creation that would reach it fails, inside the step, with the step's buffers live).
    for budget in [peak / 2, peak - 1] {
        let phase = Rc::new(Cell::new(None));
        let seen = phase.clone();
        let on_progress: Rc<dyn Fn(&peakplan_web::gpu::runner::Progress)> =
            Rc::new(move |p| seen.set(Some(p.phase)));
        let budgeted = RunOptions {
            memory_budget: Some(budget),
            on_progress: Some(on_progress),
            ..opts.clone()
        };
        let err = measure(cfg.clone(), budgeted)
            .unwrap()
            .await
            .expect_err("the run fails over its budget");
        let text = err.to_string();
        web_sys::console::log_1(
            &format!(
                "budget {budget} (peak {peak} in {peak_phase:?}, load {load}): failed in {:?}: {text}",
                phase.get()
            )
            .into(),
        );
        if budget == peak - 1 {
            assert_eq!(phase.get(), Some(peak_phase), "it fails where the peak is");
        }
        assert!(matches!(err, GpuError::OutOfMemory(_)), "{err:?}");
        assert!(text.starts_with("out of GPU memory: "), "{text}");
        assert!(text.contains("out-of-memory"), "{text}");
        assert!(
            text.contains(&format!("memory budget of {budget} bytes")),
            "{text}"
        );
        assert_eq!(
            last_run_leftover(),
            Some(0),
            "every buffer of the failed run was destroyed"
        );
        assert!(!is_running());
    }
    // The next run, without a budget, succeeds and measures the same peak.
    let again = measure(cfg, opts).unwrap().await.unwrap();
    assert_eq!(again.peak_bytes, peak);
    assert_eq!(again.created, again.destroyed);
    assert_eq!(last_run_leftover(), Some(0));
}

#[wasm_bindgen_test]
async fn the_fallback_adapter_is_named_as_such() {
    let gpu = open().await;
    let info = gpu.info.clone();
    drop(gpu);
    let summary = info.summary();
    web_sys::console::log_1(&format!("adapter: {info:?}; summary: {summary}").into());
    assert_eq!(
        summary.contains("fallback adapter"),
        info.fallback,
        "{summary}"
    );
    // SwiftShader, this suite's adapter, is a fallback adapter (`isFallbackAdapter`).
    if is_swiftshader(&info) {
        assert!(
            info.fallback,
            "SwiftShader reports isFallbackAdapter: {info:?}"
        );
    }
}

#[wasm_bindgen_test]
async fn a_second_run_is_refused_while_one_runs() {
    let cfg = tiny(MicroAttention::Eager, MicroLoss::Chunked(4));
    let opts = RunOptions {
        steps: 1,
        compare_dequant: false,
        ..RunOptions::default()
    };
    let first = measure(cfg.clone(), opts.clone()).unwrap();
    assert!(is_running());
    assert!(matches!(
        measure(cfg.clone(), opts.clone()).err(),
        Some(GpuError::Busy)
    ));
    first.await.unwrap();
    assert!(!is_running());
    // Once it is over, a new run is accepted; dropping it unstarted releases the guard as well.
    let again = measure(cfg, opts);
    assert!(again.is_ok() && is_running());
    drop(again);
    assert!(!is_running());
}

#[wasm_bindgen_test]
async fn limits_beyond_the_adapter_are_refused() {
    let err = Gpu::open(Needs {
        max_buffer: 1 << 50,
        max_storage_binding: 1 << 50,
    })
    .await
    .err()
    .expect("refused");
    assert!(matches!(err, GpuError::Limits(_)), "{err:?}");
}

fn doc() -> web_sys::Document {
    web_sys::window().unwrap().document().unwrap()
}

fn within(m: &web_sys::Element, id: &str) -> web_sys::Element {
    m.query_selector(&format!("[data-testid=\"{id}\"]"))
        .unwrap()
        .unwrap()
}

async fn sleep(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(p).await.unwrap();
}

#[wasm_bindgen_test]
async fn the_panel_measures_and_fills_every_hook() {
    let plan = RwSignal::new(Plan::parse_query("model=llama-2-7b&method=qlora&r=8&b=1&s=128").plan);
    let mount = doc().create_element("div").unwrap();
    doc().body().unwrap().append_child(&mount).unwrap();
    let handle = mount_to(mount.clone().unchecked_into(), move || {
        view! {
            <peakplan_web::gpu::panel::GpuPanel plan=plan
                predict=Callback::new(|c: MicroConfig| predicted_peak_bytes(&c))/>
        }
    });
    sleep(30).await;
    assert_eq!(
        within(&mount, "gpu-status")
            .text_content()
            .unwrap_or_default(),
        ""
    );
    let button: web_sys::HtmlElement = within(&mount, "gpu-measure").unchecked_into();
    button.click();
    sleep(10).await;
    assert_eq!(
        within(&mount, "gpu-status")
            .text_content()
            .unwrap_or_default(),
        "running"
    );
    // A second press while running is refused with a message.
    button.click();
    sleep(10).await;
    assert!(within(&mount, "gpu-note")
        .text_content()
        .unwrap_or_default()
        .contains("already running"));
    let mut status = String::new();
    for _ in 0..1200 {
        sleep(100).await;
        status = within(&mount, "gpu-status")
            .text_content()
            .unwrap_or_default();
        if status != "running" {
            break;
        }
    }
    assert_eq!(status, "done");
    let bytes = |id: &str| {
        within(&mount, id)
            .get_attribute("data-bytes")
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let value = |id: &str| {
        within(&mount, id)
            .get_attribute("data-value")
            .unwrap()
            .parse::<f32>()
            .unwrap()
    };
    let (measured, predicted) = (bytes("gpu-measured-peak"), bytes("gpu-predicted-peak"));
    assert!(measured > 0 && predicted > 0);
    assert!(value("gpu-loss-last") < value("gpu-loss-first"));
    assert!(within(&mount, "gpu-timeline")
        .get_attribute("aria-label")
        .unwrap()
        .contains("peak"));
    // The adapter line names a fallback adapter as such; SwiftShader, this suite's adapter, is one.
    let adapter = within(&mount, "gpu-adapter")
        .text_content()
        .unwrap_or_default();
    web_sys::console::log_1(&format!("panel adapter: {adapter}").into());
    if adapter.to_ascii_lowercase().contains("swiftshader") {
        assert!(adapter.contains("fallback adapter"), "{adapter}");
    }
    assert!(within(&mount, "gpu-dequant")
        .text_content()
        .unwrap()
        .contains("dequantize-then-matmul"));
    web_sys::console::log_1(
        &format!(
            "panel: measured {measured} predicted {predicted} ratio {:.4}",
            measured as f64 / predicted as f64
        )
        .into(),
    );
    drop(handle);
    mount.remove();
}

#[wasm_bindgen_test]
async fn without_webgpu_the_panel_says_unsupported() {
    // Hide navigator.gpu behind an own property for the length of this test.
    let nav = web_sys::window().unwrap().navigator();
    let desc = js_sys::Object::new();
    js_sys::Reflect::set(&desc, &"value".into(), &wasm_bindgen::JsValue::UNDEFINED).unwrap();
    js_sys::Reflect::set(&desc, &"configurable".into(), &true.into()).unwrap();
    js_sys::Object::define_property(&nav, &"gpu".into(), &desc);
    let mount = doc().create_element("div").unwrap();
    doc().body().unwrap().append_child(&mount).unwrap();
    let handle = mount_to(mount.clone().unchecked_into(), move || {
        view! {
            <peakplan_web::gpu::panel::GpuPanel plan=Plan::default()
                predict=Callback::new(|c: MicroConfig| predicted_peak_bytes(&c))/>
        }
    });
    sleep(20).await;
    let status = |m: &web_sys::Element| {
        m.query_selector("[data-testid=\"gpu-status\"]")
            .unwrap()
            .unwrap()
            .text_content()
            .unwrap_or_default()
    };
    assert_eq!(status(&mount), "unsupported");
    let button: web_sys::HtmlElement = mount
        .query_selector("[data-testid=\"gpu-measure\"]")
        .unwrap()
        .unwrap()
        .unchecked_into();
    button.click();
    sleep(20).await;
    assert_eq!(status(&mount), "unsupported");
    assert!(mount
        .text_content()
        .unwrap_or_default()
        .contains("WebGPU is not available"));
    // The predicted figure still shows: the engine needs no GPU.
    let predicted = mount
        .query_selector("[data-testid=\"gpu-predicted-peak\"]")
        .unwrap()
        .unwrap();
    assert!(
        predicted
            .get_attribute("data-bytes")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    js_sys::Reflect::delete_property(&nav, &"gpu".into()).unwrap();
    drop(handle);
    mount.remove();
}
