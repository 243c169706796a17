//! peakplan-core: the memory model of fine-tuning a large language model.
//!
//! Contract: pure computation, no I/O and no web dependency. Raw input (a query string, a `config.json` text)
//! is parsed once into validated types ([`Plan`], [`Architecture`]) with diagnostics; [`estimate`] then
//! answers for any validated pair, never panics, and saturates instead of overflowing.

pub mod advise;
pub mod allocator;
pub mod arch;
pub mod decimal;
pub mod engine;
pub mod gpu_choice;
pub mod hf;
pub mod hub;
pub mod interop;
pub mod micro;
pub mod model_type;
pub mod plan;
pub mod presets;
pub mod profile;
pub mod solve;
pub mod text;
pub mod units;
pub mod validate;
pub mod workloads;

pub use arch::{ArchError, Architecture, QkNorm, Target, VisionTower};
pub use engine::{
    allocation_events, estimate, estimate_on, estimate_rough, fits_on, needs_bytes, needs_on_card,
    replayed_batches, replayed_runs, segments_at_peak, varying_allocation_events,
    varying_allocation_events_at, varying_allocation_runs, Category, Estimate, Kind, Phase,
    PhaseMemory, Shape, StepEvents,
};
pub use hf::import_config;
pub use plan::{Diagnostic, Parsed, Plan};
pub use presets::{GpuId, ModelId};

/// The architecture of the plan's bundled model (resolved when the plan was parsed: no lookup, no failure).
pub fn preset_arch(plan: &Plan) -> &'static Architecture {
    plan.model.arch()
}

/// The plan's estimate under each method, in [`plan::Method::ALL`]'s order (Full, LoRA, QLoRA), the rest of the
/// plan as it is: the three bars the page and the CLI chart side by side.
pub fn estimate_each_method(arch: &Architecture, plan: &Plan) -> [Estimate; 3] {
    use plan::Method;
    [Method::Full, Method::Lora, Method::Qlora].map(|method| {
        let mut p = plan.clone();
        p.method = method;
        estimate(arch, &p)
    })
}
