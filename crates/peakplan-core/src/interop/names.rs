//! Module names: which Hugging Face module names each LoRA target selects in each family of model types, and back,
//! which targets a module name selects in any family, and the PEFT kinds that config formats cannot state. Both
//! directions read these tables: the exports to name the modules of a plan's targets, the imports to turn a
//! config's module names into targets.

use super::table;
use crate::arch::{Architecture, Target};
use crate::model_type::ModelType;
use crate::plan::Targets;

/// The families of module names in Hugging Face `transformers` implementations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Llama, Mistral, Qwen2, Gemma: `q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`.
    Llama,
    /// Mixtral: attention as Llama, experts `w1` (gate), `w3` (up), `w2` (down).
    Mixtral,
    /// Phi-2: `q_proj`, `k_proj`, `v_proj`, `dense`, `fc1`, `fc2`.
    Phi,
    /// Phi-3: `qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`.
    Phi3,
    /// GPT-NeoX and Falcon: `query_key_value`, `dense`, `dense_h_to_4h`, `dense_4h_to_h`.
    NeoX,
    /// GPT-2 and GPT-BigCode: `c_attn`, `attn.c_proj`, `c_fc`, `mlp.c_proj`.
    Gpt2,
}

/// PEFT kinds that torchtune configs cannot state: a `lora` adapter there is consistent with each, and the
/// peakplan line says which.
pub(crate) const PEFT_WITHOUT_KEY: &[&str] = &[
    "rslora", "lorafa", "ia3", "vera", "loha", "oft", "ln", "prompt", "prefix",
];

/// The PEFT kinds axolotl configs cannot state: torchtune's less rsLoRA, which axolotl has a key for.
pub(crate) fn axolotl_peft_without_key() -> &'static [&'static str] {
    &PEFT_WITHOUT_KEY[1..]
}

pub(crate) fn family(arch: &Architecture) -> Family {
    use ModelType::*;
    match ModelType::of(arch) {
        Mixtral => Family::Mixtral,
        Phi => Family::Phi,
        Phi3 => Family::Phi3,
        GptNeox | Falcon | RefinedWebModel | RefinedWeb | Bloom => Family::NeoX,
        Gpt2 | Gpt3 | GptBigcode => Family::Gpt2,
        // Qwen (v1) is built as its successor Qwen2 (see the Python export), whose names are Llama's.
        Llama | Mistral | Qwen2 | Qwen3 | Qwen3Moe | Qwen2Moe | Gemma | Gemma2 | Gemma3
        | Gemma3Text | Olmo2 | GptOss | Qwen => Family::Llama,
    }
}

/// The module names a LoRA target selects in a Hugging Face model of this family (empty when none).
pub(crate) fn hf_modules(f: Family, t: Target) -> &'static [&'static str] {
    use Family::*;
    match (f, t) {
        (_, Target::LmHead) => &["lm_head"],
        (Llama | Mixtral | Phi, Target::Q) => &["q_proj"],
        (Llama | Mixtral | Phi, Target::K) => &["k_proj"],
        (Llama | Mixtral | Phi, Target::V) => &["v_proj"],
        (Llama | Mixtral | Phi3, Target::O) => &["o_proj"],
        (Llama, Target::Gate) => &["gate_proj"],
        (Llama, Target::Up) => &["up_proj"],
        (Llama | Phi3, Target::Down) => &["down_proj"],
        (Mixtral, Target::Gate) => &["w1"],
        (Mixtral, Target::Up) => &["w3"],
        (Mixtral, Target::Down) => &["w2"],
        (Phi | NeoX, Target::O) => &["dense"],
        (Phi, Target::Up) => &["fc1"],
        (Phi, Target::Down) => &["fc2"],
        (Phi3, Target::Q | Target::K | Target::V) => &["qkv_proj"],
        (Phi3, Target::Gate | Target::Up) => &["gate_up_proj"],
        (NeoX, Target::Q | Target::K | Target::V) => &["query_key_value"],
        (NeoX, Target::Up) => &["dense_h_to_4h"],
        (NeoX, Target::Down) => &["dense_4h_to_h"],
        (Gpt2, Target::Q | Target::K | Target::V) => &["c_attn"],
        (Gpt2, Target::O) => &["attn.c_proj"],
        (Gpt2, Target::Up) => &["c_fc"],
        (Gpt2, Target::Down) => &["mlp.c_proj"],
        // Plain MLPs have no gate projection.
        (Phi | NeoX | Gpt2, Target::Gate) => &[],
    }
}

/// The module names of a target set, deduplicated, in forward order; `None` for PEFT's `all-linear`.
pub(crate) fn target_module_names(
    arch: &Architecture,
    targets: Targets,
) -> Option<Vec<&'static str>> {
    (targets != Targets::ALL_LINEAR).then(|| module_names(arch, targets))
}

/// The module names of a target set, deduplicated, in forward order.
pub(crate) fn module_names(arch: &Architecture, targets: Targets) -> Vec<&'static str> {
    let f = family(arch);
    let head = [embedding_modules(arch)[1]];
    let mut out: Vec<&'static str> = Vec::new();
    for t in Target::ALL {
        if targets.contains(t) {
            let names = if t == Target::LmHead {
                &head[..]
            } else {
                hf_modules(f, t)
            };
            for m in names {
                if !out.contains(m) {
                    out.push(m);
                }
            }
        }
    }
    out
}

/// The target keys a module name selects, in any family (bit set of [`Target::bit`]); 0 when unknown.
pub(crate) fn module_targets(name: &str) -> u8 {
    // PEFT matches a name as a suffix of the module path; only the last segments matter.
    let name = name.trim();
    let last = name.rsplit('.').next().unwrap_or(name);
    match name {
        "attn.c_proj" => return Target::O.bit(),
        "mlp.c_proj" => return Target::Down.bit(),
        _ => {}
    }
    table(MODULE_TARGETS)
        .iter()
        .find(|(n, _)| *n == last)
        .map_or(0, |(_, bits)| *bits)
}

/// Module names (the last segment of a module path) and the targets they select, as [`Target::bit`] sets.
const MODULE_TARGETS: &[(&str, u8)] = {
    const Q: u8 = 1;
    const K: u8 = 1 << 1;
    const V: u8 = 1 << 2;
    const O: u8 = 1 << 3;
    const GATE: u8 = 1 << 4;
    const UP: u8 = 1 << 5;
    const DOWN: u8 = 1 << 6;
    const LM_HEAD: u8 = 1 << 7;
    &[
        ("q_proj", Q),
        ("q", Q),
        ("query", Q),
        ("k_proj", K),
        ("k", K),
        ("key", K),
        ("v_proj", V),
        ("v", V),
        ("value", V),
        ("o_proj", O),
        ("o", O),
        ("out_proj", O),
        ("output_proj", O),
        ("dense", O),
        ("gate_proj", GATE),
        ("gate", GATE),
        ("w1", GATE),
        ("up_proj", UP),
        ("up", UP),
        ("w3", UP),
        ("fc1", UP),
        ("dense_h_to_4h", UP),
        ("c_fc", UP),
        ("down_proj", DOWN),
        ("down", DOWN),
        ("w2", DOWN),
        ("fc2", DOWN),
        ("dense_4h_to_h", DOWN),
        ("qkv_proj", Q | K | V),
        ("query_key_value", Q | K | V),
        ("c_attn", Q | K | V),
        ("Wqkv", Q | K | V),
        ("gate_up_proj", GATE | UP),
        ("c_proj", O | DOWN),
        ("lm_head", LM_HEAD),
        ("embed_out", LM_HEAD),
        ("output", LM_HEAD),
    ]
};

/// Every target set that is consistent with a list of selected groups (each group a bit set that at least one
/// of its targets must be in, as a fused module like `qkv_proj` is selected by any of q, k, v).
pub(crate) fn consistent_targets(groups: &[u8]) -> Vec<Targets> {
    let union = groups.iter().fold(0u8, |a, g| a | g);
    (1..=u8::MAX)
        .filter(|t| t & !union == 0 && groups.iter().all(|g| t & g != 0))
        .map(Targets)
        .collect()
}

/// The target groups of PEFT's `all-linear` (and axolotl's `lora_target_linear`): every linear but the LM head.
pub(crate) const LINEAR_GROUPS: [u8; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The input embedding's and the LM head's module names in a Hugging Face model of this architecture.
pub(crate) fn embedding_modules(arch: &Architecture) -> [&'static str; 2] {
    use ModelType::*;
    match ModelType::of(arch) {
        GptNeox => ["embed_in", "embed_out"],
        Falcon | RefinedWebModel | RefinedWeb | Bloom => ["word_embeddings", "lm_head"],
        Gpt2 | Gpt3 | GptBigcode => ["wte", "lm_head"],
        Llama | Mistral | Mixtral | Qwen2 | Qwen3 | Qwen3Moe | Qwen2Moe | Gemma | Gemma2
        | Gemma3 | Gemma3Text | Olmo2 | GptOss | Phi | Phi3 | Qwen => ["embed_tokens", "lm_head"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_target_bits_follow_target_order() {
        for (t, name) in [
            (Target::Q, "q_proj"),
            (Target::K, "k_proj"),
            (Target::V, "v_proj"),
            (Target::O, "o_proj"),
            (Target::Gate, "gate_proj"),
            (Target::Up, "up_proj"),
            (Target::Down, "down_proj"),
            (Target::LmHead, "lm_head"),
        ] {
            assert_eq!(module_targets(name), t.bit(), "{name}");
        }
        assert_eq!(module_targets("model.layers.0.self_attn.qkv_proj"), 0b111);
        assert_eq!(module_targets("attn.c_proj"), Target::O.bit());
        assert_eq!(module_targets("unknown"), 0);
    }
}
