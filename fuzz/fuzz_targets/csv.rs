//! Fuzzes the validation-CSV reader and the row-to-plan mapping behind `peakplan validate`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(report) = peakplan_core::validate::validate(&text) {
        let _ = (report.median_abs_pct(), report.within_10_share(), report.outcomes());
    }
});
