//! The core's integration tests, one module per subject: the caching-allocator simulator, source numbers, config import, query round trips,
//! golden breakdowns, properties, validation, the memory levers, the advisor, traced steps and their coverage of
//! the plan keys, and text shown back to people. Data lives in `tests/data/`.
#![allow(clippy::unwrap_used)]

mod advisor;
mod allocator;
mod coverage;
mod deepspeed;
mod events;
mod golden;
mod grpo;
mod import;
mod invariants;
mod lengths;
mod levers;
mod properties;
mod queries;
mod sequences;
mod settle;
mod sources;
mod tasks;
mod text;
mod traced;
mod unsloth;
mod util;
mod validation;
