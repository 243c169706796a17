//! Fuzzes the query-string parser and everything downstream of a parsed plan.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peakplan_core::{estimate, preset_arch, solve, Plan};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = Plan::parse_query(&text);
    let plan = parsed.plan;
    // A parsed plan always writes back to a query that parses to itself.
    let again = Plan::parse_query(&plan.to_query());
    assert!(again.diagnostics.is_empty(), "{:?}", again.diagnostics);
    assert_eq!(again.plan, plan);
    let arch = preset_arch(&plan);
    let e = estimate(arch, &plan);
    assert!(e.peak_allocated_bytes <= e.peak_reserved_bytes && e.peak_reserved_bytes <= e.device_bytes);
    let _ = solve::max_batch(arch, &plan, 80 << 30);
});
