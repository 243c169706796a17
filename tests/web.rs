//! Browser tests of the page's components (wasm-bindgen-test in headless Chromium).
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used)]

use peakplan_web::App;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn doc() -> web_sys::Document {
    web_sys::window().unwrap().document().unwrap()
}

fn bytes(id: &str) -> u64 {
    let el = doc()
        .query_selector(&format!("[data-testid=\"{id}\"]"))
        .unwrap()
        .unwrap();
    el.get_attribute("data-bytes").unwrap().parse().unwrap()
}

async fn tick() {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 30)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(p).await.unwrap();
}

#[wasm_bindgen_test]
async fn the_page_mounts_and_the_sequence_slider_moves_activations() {
    leptos::mount::mount_to_body(App);
    tick().await;
    let peak = bytes("value-peak");
    assert!(peak > 0);
    let seq: web_sys::HtmlInputElement = doc()
        .query_selector("[data-testid=\"slider-seq\"]")
        .unwrap()
        .unwrap()
        .dyn_into()
        .unwrap();
    let before = bytes("value-activations");
    seq.set_value(&seq.max());
    seq.dispatch_event(&web_sys::Event::new("input").unwrap())
        .unwrap();
    tick().await;
    assert!(bytes("value-activations") > before);
    assert_eq!(seq.get_attribute("data-value").as_deref(), Some("131072"));
    assert!(web_sys::window()
        .unwrap()
        .location()
        .search()
        .unwrap()
        .contains("s=131072"));
}
