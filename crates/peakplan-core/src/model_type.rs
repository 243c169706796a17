//! The Hugging Face `model_type`s peakplan reads, one list for both directions.
//!
//! The importer ([`crate::hf`]) dispatches on [`ModelType`], and each export that writes a model (the Python
//! script's config, the module names of the adapter formats) matches on it without a wildcard: a type added here
//! does not compile until every direction says how it handles it.

use crate::arch::Architecture;

/// Defines [`ModelType`] from one list of variants and their `model_type` strings: the enum, [`ModelType::ALL`]
/// and [`ModelType::key`] cannot disagree.
macro_rules! model_types {
    ($($(#[$doc:meta])* $variant:ident => $key:literal,)*) => {
        /// A `model_type` of a `config.json` that [`crate::import_config`] understands.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ModelType {
            $($(#[$doc])* $variant,)*
        }

        impl ModelType {
            /// Every type, in the order error messages list them.
            pub const ALL: [ModelType; [$($key),*].len()] = [$(ModelType::$variant),*];

            /// The `model_type` string of a `config.json`.
            pub const fn key(self) -> &'static str {
                match self {
                    $(ModelType::$variant => $key,)*
                }
            }
        }
    };
}

model_types! {
    Llama => "llama",
    Mistral => "mistral",
    Mixtral => "mixtral",
    Qwen2 => "qwen2",
    Qwen3 => "qwen3",
    Qwen3Moe => "qwen3_moe",
    Qwen2Moe => "qwen2_moe",
    Gemma => "gemma",
    Gemma2 => "gemma2",
    /// Gemma 3's image-text models: a `gemma3_text` language model in `text_config` and a SigLIP tower.
    Gemma3 => "gemma3",
    Gemma3Text => "gemma3_text",
    Olmo2 => "olmo2",
    GptOss => "gpt_oss",
    Phi => "phi",
    Phi3 => "phi3",
    GptNeox => "gpt_neox",
    Falcon => "falcon",
    /// Falcon's checkpoints before `transformers` took it in: the old decoder architecture by default.
    RefinedWebModel => "RefinedWebModel",
    /// Falcon-40B's checkpoints before `transformers` took it in: the new decoder architecture by default.
    RefinedWeb => "RefinedWeb",
    GptBigcode => "gpt_bigcode",
    Gpt2 => "gpt2",
    /// GPT-3 (never released): GPT-2's layout at GPT-3's sizes.
    Gpt3 => "gpt3",
    /// Qwen (v1), whose checkpoints run their own modelling code.
    Qwen => "qwen",
    Bloom => "bloom",
}

impl ModelType {
    /// The type whose `model_type` string is `key`.
    pub fn parse(key: &str) -> Option<ModelType> {
        Self::ALL.into_iter().find(|t| t.key() == key)
    }

    /// The type of `arch`: every imported architecture names its own; one built by hand with a `model_type`
    /// outside this list is taken for Llama, the layout [`Architecture::llama`] starts from.
    pub fn of(arch: &Architecture) -> ModelType {
        Self::parse(&arch.model_type).unwrap_or(ModelType::Llama)
    }

    /// How the importer reads a config of this type.
    pub const fn layout(self) -> Layout {
        use ModelType::*;
        match self {
            Llama | Mistral | Mixtral | Qwen2 | Qwen3 | Qwen3Moe | Qwen2Moe | Gemma | Gemma2
            | Gemma3Text | Olmo2 => Layout::Llama,
            Gemma3 => Layout::Gemma3,
            GptOss => Layout::GptOss,
            Phi => Layout::Phi,
            Phi3 => Layout::Phi3,
            GptNeox => Layout::GptNeox,
            Falcon | RefinedWebModel | RefinedWeb => Layout::Falcon,
            GptBigcode | Gpt2 | Gpt3 => Layout::Gpt2,
            Qwen => Layout::QwenV1,
            Bloom => Layout::Bloom,
        }
    }
}

/// The `model_type` strings of [`ModelType::ALL`].
pub const KEYS: [&str; ModelType::ALL.len()] = {
    let mut keys = [""; ModelType::ALL.len()];
    let mut i = 0;
    while i < keys.len() {
        keys[i] = ModelType::ALL[i].key();
        i += 1;
    }
    keys
};

/// The block layouts the importer reads, each from the keys of its family of configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Llama-layout decoders: Llama, Mistral, Mixtral, Qwen2/3 (and their MoE), Gemma 1-3 text, OLMo 2.
    Llama,
    /// A `gemma3_text` model under `text_config` beside a SigLIP vision tower.
    Gemma3,
    GptOss,
    Phi,
    Phi3,
    GptNeox,
    Falcon,
    /// GPT-2's: gpt_bigcode, gpt2, gpt3.
    Gpt2,
    QwenV1,
    Bloom,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_back_and_are_distinct() {
        for (i, t) in ModelType::ALL.into_iter().enumerate() {
            assert_eq!(ModelType::parse(t.key()), Some(t));
            assert_eq!(KEYS[i], t.key());
            assert!(!ModelType::ALL[..i].contains(&t), "{t:?} listed twice");
        }
        assert_eq!(ModelType::parse("bert"), None);
    }
}
