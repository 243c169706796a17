//! Fuzzes the `config.json` importer and estimates every architecture it accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peakplan_core::{estimate, import_config, Plan};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(arch) = import_config(text) {
        // The third adapts MoE experts through PEFT's target_parameters and a shared expert's linears.
        for q in [
            "method=full&gc=0&attn=eager",
            "method=qlora&r=64&targets=all-linear&gpus=8&zero=3",
            "method=lora&targets=q,k,v,o,gate,up,down&gc=0",
        ] {
            let plan = Plan::parse_query(q).plan;
            let e = estimate(&arch, &plan);
            assert!(e.peak_allocated_bytes <= e.device_bytes);
        }
    }
});
