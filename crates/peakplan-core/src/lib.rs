//! peakplan-core: the memory model of fine-tuning a large language model.
//!
//! Contract: pure computation, no I/O and no web dependency. Raw input (a query string, a `config.json` text)
//! is parsed once into validated types ([`Plan`], [`Architecture`]) with diagnostics; [`estimate`] then
//! answers for any validated pair, never panics, and saturates instead of overflowing.

pub mod advise;
pub mod arch;
pub mod engine;
pub mod gpu_choice;
pub mod hf;
pub mod interop;
pub mod micro;
pub mod plan;
pub mod presets;
pub mod solve;
pub mod units;
pub mod validate;
pub mod workloads;

pub use arch::{ArchError, Architecture, QkNorm, Target};
pub use engine::{estimate, Category, Estimate, Kind, Phase, PhaseMemory};
pub use hf::import_config;
pub use plan::{Diagnostic, Parsed, Plan};

/// Resolves the plan's model preset to its architecture.
pub fn preset_arch(plan: &Plan) -> &'static Architecture {
    // `Plan::set` only accepts known ids, and the default is a preset, so this lookup cannot fail for a parsed plan;
    // a hand-built plan with an unknown id falls back to the default model.
    presets::model_arch(&plan.model)
        .or_else(|| presets::model_arch(&Plan::default().model))
        .expect("the default model is a bundled preset")
}
