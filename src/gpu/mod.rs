//! The WebGPU micro QLoRA measurement: real training steps of a micro Llama-style model on the visitor's GPU, through
//! the browser's WebGPU API called directly with `web-sys` (no wgpu), with the peak GPU buffer memory of a step
//! measured by an allocation tracker and set beside the accounting engine's prediction.
//!
//! - [`kernels`] and `kernels/*.wgsl`: the compute kernels; [`params`] their uniform blocks.
//! - [`device`]: adapter, device, limits, errors, pipelines, encoding and the allocation tracker.
//! - [`step`]: one training step and its buffer schedule (documented there, formula by formula).
//! - [`runner`]: a measurement of K steps, step time, the fused vs unfused dequantization comparison.
//! - [`panel`]: the page's "Check the engine on this GPU" panel (a micro model, not the plan).
//!
//! The CPU reference of every kernel and of the whole step is `peakplan_core::micro`.

pub mod device;
pub mod kernels;
pub mod panel;
pub mod params;
pub mod runner;
pub mod step;

pub use device::{AdapterInfo, Gpu, GpuError, StepPhase};
pub use runner::{measure, measure_model, Measurement, RunOptions};
