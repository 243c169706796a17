//! Fuzzes the training-config importer (PEFT, bitsandbytes/GPTQ, TrainingArguments, DeepSpeed, axolotl and
//! torchtune files), then estimates and exports whatever plan it makes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peakplan_core::interop::{export, import, ExportFormat};
use peakplan_core::{estimate, preset_arch};

/// The file names that steer the importer's format detection.
const NAMES: &[&str] = &[
    "adapter_config.json",
    "config.json",
    "quantization_config.json",
    "training_args.json",
    "ds_config.json",
    "axolotl.yaml",
    "my_config.yaml",
    "plain.txt",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let name = NAMES[pick as usize % NAMES.len()];
    let text = String::from_utf8_lossy(rest);
    if let Ok(imported) = import(&[(name, &text)]) {
        let arch = preset_arch(&imported.plan);
        let _ = estimate(arch, &imported.plan);
        for f in [
            ExportFormat::Python,
            ExportFormat::Axolotl,
            ExportFormat::Torchtune,
            ExportFormat::Deepspeed,
        ] {
            let _ = export(&imported.plan, arch, f);
        }
    }
});
