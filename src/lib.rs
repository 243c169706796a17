//! peakplan-web: the Leptos planner page. Components live in modules; `main.rs` only mounts.
#![cfg(target_arch = "wasm32")]

/// Mounts the planner page on `<body>`.
pub fn mount() {}
