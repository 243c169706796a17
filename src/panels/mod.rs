//! The page's panels and controls, each a component over the shared state ([`crate::state`]); [`crate::app`]
//! mounts them. A panel may mount another panel's control; none imports the app.

pub(crate) mod accuracy;
pub(crate) mod advisor;
pub(crate) mod chart;
pub(crate) mod controls;
pub(crate) mod deepspeed;
pub(crate) mod errors;
pub(crate) mod essentials;
pub(crate) mod gpu_table;
pub(crate) mod hub;
pub(crate) mod interop;
pub(crate) mod results;
pub(crate) mod segments;
pub(crate) mod settings;
pub(crate) mod share;
pub(crate) mod task;
