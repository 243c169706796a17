//! The core's speed budgets measured inside the browser, for comparing wasm with native (`window.wasmBindings.bench_core`).

use peakplan_core::workloads::{
    gpu_table, plan_70b_qlora, plan_varying, slider_track, sweep_256x3, INVERSE_CAPACITY_BYTES,
};
use peakplan_core::{estimate, estimate_rough, preset_arch, solve};
use wasm_bindgen::prelude::*;

fn time_ns(iters: u32, mut f: impl FnMut() -> u64) -> f64 {
    let mut sink = 0u64;
    let t0 = crate::browser::now_ms();
    for _ in 0..iters {
        sink = sink.wrapping_add(f());
    }
    let dt = crate::browser::now_ms() - t0;
    // The checksum keeps the work observable; it is never 1 in practice, so this branch never prints.
    if sink == 1 {
        web_sys::console::log_1(&JsValue::from_f64(sink as f64));
    }
    dt * 1e6 / iters.max(1) as f64
}

/// Nanoseconds per call of each benchmark workload, as a JS object.
#[wasm_bindgen]
pub fn bench_core(iters: u32) -> js_sys::Object {
    let plan = plan_70b_qlora();
    let arch = preset_arch(&plan);
    let out = js_sys::Object::new();
    let put = |k: &str, v: f64| {
        let _ = js_sys::Reflect::set(&out, &JsValue::from_str(k), &JsValue::from_f64(v));
    };
    put(
        "estimate_ns",
        time_ns(iters * 100, || {
            estimate_rough(arch, &plan).peak_allocated_bytes
        }),
    );
    put(
        "replayed_ns",
        time_ns(iters, || estimate(arch, &plan).peak_reserved_bytes),
    );
    put(
        "sweep_ns",
        time_ns(iters.div_ceil(10), || sweep_256x3(&plan)),
    );
    put(
        "max_batch_ns",
        time_ns(iters.div_ceil(10), || {
            solve::max_batch(arch, &plan, INVERSE_CAPACITY_BYTES).unwrap_or(0)
        }),
    );
    put(
        "max_seq_ns",
        time_ns(iters.div_ceil(20), || {
            solve::max_seq(arch, &plan, INVERSE_CAPACITY_BYTES).unwrap_or(0)
        }),
    );
    put(
        "gpu_table_ns",
        time_ns(iters.div_ceil(100), || gpu_table(&plan)),
    );
    let varying = plan_varying();
    put(
        "slider_track_ns",
        time_ns(iters.div_ceil(20), || slider_track(&varying)),
    );
    out
}
