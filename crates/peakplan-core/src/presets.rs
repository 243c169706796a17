//! Bundled presets: real model configs (imported through the same `config.json` importer users get) and GPU capacities.

use crate::arch::Architecture;
use crate::hf::import_config;
use std::sync::OnceLock;

/// A bundled model: its id in queries, display name, Hugging Face id and trimmed `config.json`.
#[derive(Clone, Copy, Debug)]
pub struct ModelPreset {
    pub id: &'static str,
    pub name: &'static str,
    pub hf_id: &'static str,
    pub config_json: &'static str,
}

/// The bundled models, sorted by id. Configs come from `presets/*.json` (trimmed copies of the verified files).
pub const MODELS: &[ModelPreset] = &[
    ModelPreset { id: "falcon-7b", name: "Falcon 7B", hf_id: "tiiuae/falcon-7b", config_json: include_str!("../presets/falcon-7b.json") },
    ModelPreset { id: "gemma-2-27b", name: "Gemma 2 27B", hf_id: "google/gemma-2-27b", config_json: include_str!("../presets/gemma-2-27b.json") },
    ModelPreset { id: "gemma-2-2b", name: "Gemma 2 2B", hf_id: "google/gemma-2-2b", config_json: include_str!("../presets/gemma-2-2b.json") },
    ModelPreset { id: "gemma-2-9b", name: "Gemma 2 9B", hf_id: "google/gemma-2-9b", config_json: include_str!("../presets/gemma-2-9b.json") },
    ModelPreset { id: "gemma-3-12b", name: "Gemma 3 12B (image-text)", hf_id: "google/gemma-3-12b-pt", config_json: include_str!("../presets/gemma-3-12b.json") },
    ModelPreset { id: "gemma-3-1b", name: "Gemma 3 1B", hf_id: "google/gemma-3-1b-pt", config_json: include_str!("../presets/gemma-3-1b.json") },
    ModelPreset { id: "gemma-3-27b", name: "Gemma 3 27B (image-text)", hf_id: "google/gemma-3-27b-pt", config_json: include_str!("../presets/gemma-3-27b.json") },
    ModelPreset { id: "gemma-3-4b", name: "Gemma 3 4B (image-text)", hf_id: "google/gemma-3-4b-pt", config_json: include_str!("../presets/gemma-3-4b.json") },
    ModelPreset { id: "gemma-7b", name: "Gemma 7B", hf_id: "google/gemma-7b", config_json: include_str!("../presets/gemma-7b.json") },
    ModelPreset { id: "gpt-oss-120b", name: "gpt-oss-120b (MoE)", hf_id: "openai/gpt-oss-120b", config_json: include_str!("../presets/gpt-oss-120b.json") },
    ModelPreset { id: "gpt-oss-20b", name: "gpt-oss-20b (MoE)", hf_id: "openai/gpt-oss-20b", config_json: include_str!("../presets/gpt-oss-20b.json") },
    ModelPreset { id: "gpt3-175b", name: "GPT-3 175B", hf_id: "(none: weights never released; architecture from Brown et al. 2020, arXiv:2005.14165, Table 2.1)", config_json: include_str!("../presets/gpt3-175b.json") },
    ModelPreset { id: "llama-2-13b", name: "Llama 2 13B", hf_id: "meta-llama/Llama-2-13b-hf", config_json: include_str!("../presets/llama-2-13b.json") },
    ModelPreset { id: "llama-2-70b", name: "Llama 2 70B", hf_id: "meta-llama/Llama-2-70b-hf", config_json: include_str!("../presets/llama-2-70b.json") },
    ModelPreset { id: "llama-2-7b", name: "Llama 2 7B", hf_id: "meta-llama/Llama-2-7b-hf", config_json: include_str!("../presets/llama-2-7b.json") },
    ModelPreset { id: "llama-3.1-70b", name: "Llama 3.1 70B", hf_id: "meta-llama/Llama-3.1-70B", config_json: include_str!("../presets/llama-3.1-70b.json") },
    ModelPreset { id: "llama-3.1-8b", name: "Llama 3.1 8B", hf_id: "meta-llama/Llama-3.1-8B", config_json: include_str!("../presets/llama-3.1-8b.json") },
    ModelPreset { id: "llama-3.2-1b", name: "Llama 3.2 1B", hf_id: "meta-llama/Llama-3.2-1B", config_json: include_str!("../presets/llama-3.2-1b.json") },
    ModelPreset { id: "llama-3.2-3b", name: "Llama 3.2 3B", hf_id: "meta-llama/Llama-3.2-3B", config_json: include_str!("../presets/llama-3.2-3b.json") },
    ModelPreset { id: "llama-65b", name: "LLaMA 65B", hf_id: "huggyllama/llama-65b", config_json: include_str!("../presets/llama-65b.json") },
    ModelPreset { id: "mistral-7b", name: "Mistral 7B", hf_id: "mistralai/Mistral-7B-v0.1", config_json: include_str!("../presets/mistral-7b.json") },
    ModelPreset { id: "mistral-nemo-12b", name: "Mistral NeMo 12B", hf_id: "mistralai/Mistral-Nemo-Base-2407", config_json: include_str!("../presets/mistral-nemo-12b.json") },
    ModelPreset { id: "mistral-small-24b", name: "Mistral Small 3 24B", hf_id: "mistralai/Mistral-Small-24B-Base-2501", config_json: include_str!("../presets/mistral-small-24b.json") },
    ModelPreset { id: "mixtral-8x7b", name: "Mixtral 8x7B", hf_id: "mistralai/Mixtral-8x7B-v0.1", config_json: include_str!("../presets/mixtral-8x7b.json") },
    ModelPreset { id: "phi-2", name: "Phi-2", hf_id: "microsoft/phi-2", config_json: include_str!("../presets/phi-2.json") },
    ModelPreset { id: "phi-3-mini", name: "Phi-3 mini", hf_id: "microsoft/Phi-3-mini-4k-instruct", config_json: include_str!("../presets/phi-3-mini.json") },
    ModelPreset { id: "phi-4", name: "Phi-4", hf_id: "microsoft/phi-4", config_json: include_str!("../presets/phi-4.json") },
    ModelPreset { id: "pythia-1.4b", name: "Pythia 1.4B", hf_id: "EleutherAI/pythia-1.4b", config_json: include_str!("../presets/pythia-1.4b.json") },
    ModelPreset { id: "qwen1.5-moe-a2.7b", name: "Qwen1.5 MoE A2.7B (MoE)", hf_id: "Qwen/Qwen1.5-MoE-A2.7B", config_json: include_str!("../presets/qwen1.5-moe-a2.7b.json") },
    ModelPreset { id: "qwen2-57b-a14b", name: "Qwen2 57B-A14B (MoE)", hf_id: "Qwen/Qwen2-57B-A14B", config_json: include_str!("../presets/qwen2-57b-a14b.json") },
    ModelPreset { id: "qwen2.5-0.5b", name: "Qwen2.5 0.5B", hf_id: "Qwen/Qwen2.5-0.5B", config_json: include_str!("../presets/qwen2.5-0.5b.json") },
    ModelPreset { id: "qwen2.5-1.5b", name: "Qwen2.5 1.5B", hf_id: "Qwen/Qwen2.5-1.5B", config_json: include_str!("../presets/qwen2.5-1.5b.json") },
    ModelPreset { id: "qwen2.5-14b", name: "Qwen2.5 14B", hf_id: "Qwen/Qwen2.5-14B", config_json: include_str!("../presets/qwen2.5-14b.json") },
    ModelPreset { id: "qwen2.5-32b", name: "Qwen2.5 32B", hf_id: "Qwen/Qwen2.5-32B", config_json: include_str!("../presets/qwen2.5-32b.json") },
    ModelPreset { id: "qwen2.5-3b", name: "Qwen2.5 3B", hf_id: "Qwen/Qwen2.5-3B", config_json: include_str!("../presets/qwen2.5-3b.json") },
    ModelPreset { id: "qwen2.5-72b", name: "Qwen2.5 72B", hf_id: "Qwen/Qwen2.5-72B", config_json: include_str!("../presets/qwen2.5-72b.json") },
    ModelPreset { id: "qwen2.5-7b", name: "Qwen2.5 7B", hf_id: "Qwen/Qwen2.5-7B", config_json: include_str!("../presets/qwen2.5-7b.json") },
    ModelPreset { id: "qwen3-0.6b", name: "Qwen3 0.6B", hf_id: "Qwen/Qwen3-0.6B", config_json: include_str!("../presets/qwen3-0.6b.json") },
    ModelPreset { id: "qwen3-1.7b", name: "Qwen3 1.7B", hf_id: "Qwen/Qwen3-1.7B", config_json: include_str!("../presets/qwen3-1.7b.json") },
    ModelPreset { id: "qwen3-14b", name: "Qwen3 14B", hf_id: "Qwen/Qwen3-14B", config_json: include_str!("../presets/qwen3-14b.json") },
    ModelPreset { id: "qwen3-30b-a3b", name: "Qwen3 30B-A3B (MoE)", hf_id: "Qwen/Qwen3-30B-A3B", config_json: include_str!("../presets/qwen3-30b-a3b.json") },
    ModelPreset { id: "qwen3-32b", name: "Qwen3 32B", hf_id: "Qwen/Qwen3-32B", config_json: include_str!("../presets/qwen3-32b.json") },
    ModelPreset { id: "qwen3-4b", name: "Qwen3 4B", hf_id: "Qwen/Qwen3-4B", config_json: include_str!("../presets/qwen3-4b.json") },
    ModelPreset { id: "qwen3-8b", name: "Qwen3 8B", hf_id: "Qwen/Qwen3-8B", config_json: include_str!("../presets/qwen3-8b.json") },
    ModelPreset { id: "starcoderbase-1b", name: "StarCoderBase 1B", hf_id: "bigcode/starcoderbase-1b", config_json: include_str!("../presets/starcoderbase-1b.json") },
    ModelPreset { id: "tinyllama-1.1b", name: "TinyLlama 1.1B", hf_id: "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", config_json: include_str!("../presets/tinyllama-1.1b.json") },
];

/// Looks a model preset up by id.
pub fn model(id: &str) -> Option<&'static ModelPreset> {
    MODELS.iter().find(|m| m.id == id)
}

/// The architecture of a bundled model, imported once and cached.
pub fn model_arch(id: &str) -> Option<&'static Architecture> {
    ModelId::parse(id).map(ModelId::arch)
}

/// A typed id over a table of presets: resolved once from its spelling, then an index that cannot miss. Its
/// default is checked at compile time; it is serialized as its id and read back only from a bundled one.
macro_rules! preset_id {
    ($(#[$m:meta])* $name:ident, $preset:ident, $table:ident, $what:literal, default $default:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(usize);

        impl $name {
            /// The default plan's, checked at compile time.
            pub const DEFAULT: $name = match $name::find($default) {
                Some(id) => id,
                None => panic!(concat!("the default ", $what, " is not a bundled preset")),
            };

            const fn find(id: &str) -> Option<$name> {
                let mut i = 0;
                while i < $table.len() {
                    if same_id($table[i].id, id) {
                        return Some($name(i));
                    }
                    i += 1;
                }
                None
            }
            /// Every bundled one, in the table's order.
            pub fn all() -> impl Iterator<Item = $name> {
                (0..$table.len()).map($name)
            }
            /// The bundled one with this id.
            pub fn parse(id: &str) -> Option<$name> {
                $table.iter().position(|p| p.id == id).map($name)
            }
            pub fn id(self) -> &'static str {
                $table[self.0].id
            }
            pub fn preset(self) -> &'static $preset {
                &$table[self.0]
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.id())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.id())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let id = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $name::parse(&id).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("{:?} is not a bundled ", $what), id))
                })
            }
        }
    };
}

/// Every bundled model's architecture, indexed like [`MODELS`]: imported on first use. A preset that does not
/// import is a defect of the bundled data, which `tests/core/import.rs` checks for every preset.
fn archs() -> &'static [Architecture] {
    static ARCHS: OnceLock<Vec<Architecture>> = OnceLock::new();
    ARCHS.get_or_init(|| {
        MODELS
            .iter()
            .map(|m| {
                let mut a = import_config(m.config_json)
                    .unwrap_or_else(|e| panic!("bundled preset {} is invalid: {e}", m.id));
                a.name = m.id.to_string();
                a
            })
            .collect()
    })
}

/// Whether two ids are equal, usable in a `const` context.
const fn same_id(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

preset_id!(
    /// A bundled model, resolved from its id once (when a plan is parsed): whoever holds one reads the preset and
    /// its architecture directly, and no lookup downstream can fail. Serialized as its id.
    ModelId, ModelPreset, MODELS, "model", default "llama-3.1-8b"
);

impl ModelId {
    pub fn arch(self) -> &'static Architecture {
        &archs()[self.0]
    }
}

/// A GPU and the memory a process can see on it.
#[derive(Clone, Copy, Debug)]
pub struct GpuPreset {
    pub id: &'static str,
    pub name: &'static str,
    /// The name people say ("H100 SXM", "RTX 4090"), for tables.
    pub short_name: &'static str,
    /// What `nvidia-smi` reports as total where a public printout exists (MiB x 2^20), else the vendor's capacity.
    pub capacity_bytes: u64,
    /// The vendor's marketing figure, for display.
    pub vendor_bytes: u64,
}

const MIB: u64 = 1 << 20;

/// The bundled GPUs, from `shared/models/gpus.json` (and two consumer cards peakplan added with their sources in
/// `tests/data/models/gpus.json`).
pub const GPUS: &[GpuPreset] = &[
    GpuPreset {
        id: "rtx-3060-12gb",
        short_name: "RTX 3060 12GB",
        name: "NVIDIA GeForce RTX 3060 12GB",
        capacity_bytes: 12288 * MIB,
        vendor_bytes: 12 << 30,
    },
    GpuPreset {
        id: "t4-16gb",
        short_name: "T4",
        name: "NVIDIA T4",
        capacity_bytes: 15360 * MIB,
        vendor_bytes: 16000000000,
    },
    GpuPreset {
        id: "v100-16gb",
        short_name: "V100 16GB",
        name: "NVIDIA Tesla V100 16GB (SXM2 / PCIe)",
        capacity_bytes: 16384 * MIB,
        vendor_bytes: 16000000000,
    },
    GpuPreset {
        id: "v100-32gb",
        short_name: "V100 32GB",
        name: "NVIDIA Tesla V100 32GB (SXM2 / PCIe)",
        capacity_bytes: 32000000000,
        vendor_bytes: 32000000000,
    },
    GpuPreset {
        id: "a10g-24gb",
        short_name: "A10G",
        name: "NVIDIA A10G (AWS G5)",
        capacity_bytes: 23028 * MIB,
        vendor_bytes: 25769803776,
    },
    GpuPreset {
        id: "l4-24gb",
        short_name: "L4",
        name: "NVIDIA L4",
        capacity_bytes: 23034 * MIB,
        vendor_bytes: 24000000000,
    },
    GpuPreset {
        id: "rtx-3090",
        short_name: "RTX 3090",
        name: "NVIDIA GeForce RTX 3090",
        capacity_bytes: 24576 * MIB,
        vendor_bytes: 24000000000,
    },
    GpuPreset {
        id: "rtx-4090",
        short_name: "RTX 4090",
        name: "NVIDIA GeForce RTX 4090",
        capacity_bytes: 24564 * MIB,
        vendor_bytes: 24000000000,
    },
    GpuPreset {
        id: "rtx-5090",
        short_name: "RTX 5090",
        name: "NVIDIA GeForce RTX 5090",
        capacity_bytes: 32607 * MIB,
        vendor_bytes: 32 << 30,
    },
    GpuPreset {
        id: "rtx-6000-ada",
        short_name: "RTX 6000 Ada",
        name: "NVIDIA RTX 6000 Ada Generation",
        capacity_bytes: 48000000000,
        vendor_bytes: 48000000000,
    },
    GpuPreset {
        id: "l40s-48gb",
        short_name: "L40S",
        name: "NVIDIA L40S",
        capacity_bytes: 46068 * MIB,
        vendor_bytes: 48000000000,
    },
    GpuPreset {
        id: "a100-40gb",
        short_name: "A100 40GB",
        name: "NVIDIA A100 40GB (SXM4 / PCIe)",
        capacity_bytes: 40960 * MIB,
        vendor_bytes: 40000000000,
    },
    GpuPreset {
        id: "a100-80gb",
        short_name: "A100 80GB",
        name: "NVIDIA A100 80GB (SXM4 / PCIe)",
        capacity_bytes: 81920 * MIB,
        vendor_bytes: 80000000000,
    },
    GpuPreset {
        id: "h100-80gb",
        short_name: "H100 SXM",
        name: "NVIDIA H100 80GB HBM3 (SXM5)",
        capacity_bytes: 81559 * MIB,
        vendor_bytes: 80000000000,
    },
    GpuPreset {
        id: "h100-pcie-80gb",
        short_name: "H100 PCIe",
        name: "NVIDIA H100 PCIe",
        capacity_bytes: 80000000000,
        vendor_bytes: 80000000000,
    },
    GpuPreset {
        id: "h200-141gb",
        short_name: "H200",
        name: "NVIDIA H200 (SXM)",
        capacity_bytes: 143771 * MIB,
        vendor_bytes: 141000000000,
    },
    GpuPreset {
        id: "mi300x-192gb",
        short_name: "MI300X",
        name: "AMD Instinct MI300X",
        capacity_bytes: 192000000000,
        vendor_bytes: 192000000000,
    },
    GpuPreset {
        id: "apple-m2-ultra-192gb",
        short_name: "M2 Ultra",
        name: "Apple M2 Ultra (unified memory, example of Apple M-series)",
        capacity_bytes: 192000000000,
        vendor_bytes: 192000000000,
    },
];

/// Looks a GPU preset up by id.
pub fn gpu(id: &str) -> Option<&'static GpuPreset> {
    GpuId::parse(id).map(GpuId::preset)
}

preset_id!(
    /// A bundled GPU, resolved from its id once (when a plan is parsed). Serialized as its id.
    GpuId, GpuPreset, GPUS, "GPU", default "rtx-4090"
);
