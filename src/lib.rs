//! peakplan-web: the Leptos planner page. `main.rs` only mounts; the page's state lives in `state`, its panels in
//! `panels`, laid out by `app`; logic in plain Rust types ([`planner`], [`methods`], [`scale`], [`embed`], [`task`], [`timeline`],
//! and the core).

pub mod accuracy_table;
pub mod embed;
pub mod gpu_rows;
pub mod history;
pub mod html;
pub mod hub;
pub mod methods;
pub mod picker;
pub mod planner;
pub mod scale;
pub mod segment_picture;
pub mod task;
pub mod timeline;

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod bench;
#[cfg(target_arch = "wasm32")]
mod browser;
#[cfg(target_arch = "wasm32")]
mod canvas;
/// The WebGPU micro QLoRA measurement (public for the browser tests in `tests/gpu.rs`).
#[cfg(target_arch = "wasm32")]
pub mod gpu;
#[cfg(target_arch = "wasm32")]
mod panels;
#[cfg(target_arch = "wasm32")]
mod state;

#[cfg(target_arch = "wasm32")]
pub use app::App;

/// Mounts the planner page on `<body>`.
#[cfg(target_arch = "wasm32")]
pub fn mount() {
    // The wasm is compiled and instantiated, and its start runs: the first milestone of the wait for the figure.
    browser::milestone("peakplan:wasm-started");
    // index.html's loading line stands until the page is there.
    if let Some(el) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id("loading"))
    {
        el.remove();
    }
    leptos::mount::mount_to_body(App);
    browser::milestone("peakplan:mounted");
}
