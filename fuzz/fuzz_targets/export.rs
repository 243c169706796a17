//! Fuzzes the exporters with any plan a query can make: every format writes it, and each file that carries a plan
//! imports back to it. axolotl's `# peakplan:` line is the plan itself; torchtune's is the plan as torchtune runs
//! it (its framework profile); the file imports to what its line says, and the line parses cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peakplan_core::interop::{export, import, ExportFormat};
use peakplan_core::{preset_arch, Plan};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let plan = Plan::parse_query(&text).plan;
    let arch = preset_arch(&plan);
    for (format, name) in [
        (ExportFormat::Axolotl, "axolotl.yaml"),
        (ExportFormat::Torchtune, "torchtune_override.yaml"),
        (ExportFormat::Deepspeed, "ds_config.json"),
        (ExportFormat::Python, "peakplan_check.py"),
    ] {
        let file = export(&plan, arch, format);
        if format == ExportFormat::Python {
            assert!(file.contains(&plan.to_query()), "the script names its plan");
            continue;
        }
        let back = import(&[(name, &file)])
            .unwrap_or_else(|e| panic!("{name} of {} does not import: {e}", plan.to_query()));
        let Some(line) = file.lines().find_map(|l| l.strip_prefix("# peakplan: ")) else {
            continue;
        };
        let said = Plan::parse_query(line);
        assert!(said.diagnostics.is_empty(), "{name}: {:?}", said.diagnostics);
        assert_eq!(back.plan.to_query(), said.plan.to_query(), "{name} imports to its plan line");
        if format == ExportFormat::Axolotl {
            assert_eq!(said.plan.to_query(), plan.to_query(), "{name} carries the plan");
        }
    }
});
