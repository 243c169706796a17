//! Entry point of the web app: mounts the planner page (all logic lives in the library).

fn main() {
    #[cfg(target_arch = "wasm32")]
    peakplan_web::mount();
}
