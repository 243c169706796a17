//! The plan's keys, each declared once in one table: its name, the [`Plan`] field it sets, the default, the codec
//! (parser, writer and the accepted values its messages name) and when a link writes it. [`KEYS`],
//! `Plan::default`, [`Plan::set`], [`Plan::get`], the keys [`Plan::to_query`] writes and [`keyword_spellings`]
//! are generated from it. A new key is one row here (and its field in [`Plan`], when the field is new).

use super::codec::{
    CheckpointMode, Codec, Decimal, Flag, FlagOrAuto, Fraction, Gpu, LogitBits, Model, TargetList,
    Tokens, Uint, UintOrAuto, Word,
    Written::{self, *},
};
use super::*;

macro_rules! plan_keys {
    (
        $($key:literal => $field:ident = $default:expr, $codec:expr, $written:expr;)+
        not keys: $($other:ident = $other_default:expr;)*
    ) => {
        /// Every key of the contract's vocabulary, in the order [`Plan::to_query`] writes them.
        pub const KEYS: &[&str] = &[$($key),+];

        impl Default for Plan {
            fn default() -> Self {
                Plan {
                    $($field: $default,)+
                    $($other: $other_default,)*
                }
            }
        }

        impl Plan {
            /// Applies one key; on error the plan is unchanged and the message names the key and accepted values.
            pub fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
                match key {
                    $($key => Codec::set(&$codec, self, |p| &mut p.$field, key, v),)+
                    _ => Err(format!(
                        "unknown key {}; known keys: {}",
                        quote(key),
                        KEYS.join(", ")
                    )),
                }
            }

            /// The value of one key in query spelling.
            pub fn get(&self, key: &str) -> Option<String> {
                match key {
                    $($key => Some(Codec::get(&$codec, self, |p| &p.$field)),)+
                    _ => None,
                }
            }

            /// Whether [`Plan::to_query`] writes `key` (see [`Written`]).
            pub(super) fn writes(&self, key: &str) -> bool {
                match key {
                    $($key => Written::writes(&$written, self, |p| p.$field != $default),)+
                    _ => false,
                }
            }
        }

        /// The spellings of a keyword key (`method`, `opt`, `shard`, …) in the order the page lists them; `None`
        /// for a key that is not one enum's spellings.
        pub fn keyword_spellings(key: &str) -> Option<&'static [&'static str]> {
            match key {
                $($key => spellings(&$codec, |p| &p.$field),)+
                _ => None,
            }
        }
    };
}

/// The spellings of `codec` for the field's type.
fn spellings<T, C: Codec<T>>(
    codec: &C,
    _field: fn(&Plan) -> &T,
) -> Option<&'static [&'static str]> {
    codec.spellings()
}

plan_keys! {
    // key       field                   default                   codec                            written
    "model"   => model                 = ModelId::DEFAULT,         Model,                           Always;
    "method"  => method                = Method::Qlora,            Word,                            Always;
    "r"       => rank                  = 16,                       Uint(1, MAX_RANK),               Always;
    "targets" => targets               = Targets::ALL_LINEAR,      TargetList,                      Always;
    "dropout" => dropout               = 0.0,                      Fraction,                        Always;
    "adtype"  => adapter_dtype         = DType::Fp32,              Word,                            Always;
    "b"       => micro_batch           = 1,                        Uint(1, MAX_BATCH),              Always;
    "s"       => seq_len               = 2048,                     Uint(1, MAX_SEQ),                Always;
    "ga"      => grad_accumulation     = 1,                        Uint(1, MAX_GRAD_ACCUMULATION),  NonDefault;
    "gc"      => checkpointing         = Checkpointing::On,        CheckpointMode,                  Always;
    "attn"    => attn                  = Attn::Sdpa,               Word,                            Always;
    "loss"    => loss                  = Loss::Standard,           Word,                            Always;
    "chunk"   => chunk                 = 256,                      Uint(1, MAX_SEQ),                Always;
    "opt"     => optimizer             = Optimizer::AdamwTorch,    Word,                            Always;
    "prec"    => precision             = Precision::AmpBf16,       Word,                            Always;
    "quant"   => quant                 = Quant::Nf4,               Word,                            Always;
    "dq"      => double_quant          = true,                     Flag,                            Always;
    "upcast"  => upcast                = false,                    Flag,                            Always;
    "qsave"   => qlora_saves_input     = false,                    Flag,                            Always;
    "moe"     => moe_experts           = MoeExperts::Fused,        Word,                            NonDefault;
    "gpus"    => gpus                  = 1,                        Uint(1, MAX_GPUS),               Always;
    "zero"    => zero                  = 0,                        Uint(0, 3),                      Always;
    "shard"   => shard                 = Shard::Auto,              Word,                            NonDefault;
    "wrap"    => wrap                  = Wrap::Auto,               Word,                            NonDefault;
    "gsync"   => grad_sync             = GradSync::Auto,           Word,                            NonDefault;
    "gpu"     => gpu                   = GpuId::DEFAULT,           Gpu,                             Always;
    "fw"      => framework             = Framework::Hf,            Word,                            Always;
    "peft"    => peft                  = Peft::Lora,               Word,                            Always;
    // A count set under another PEFT kind is still part of the plan (switching back restores it).
    "vt"      => virtual_tokens        = DEFAULT_VIRTUAL_TOKENS,   Uint(1, MAX_VIRTUAL_TOKENS),
                                                                   NonDefaultOr(|p| p.peft.uses_virtual_tokens());
    "tt"      => tokens                = TokenTraining::Frozen,    Tokens,                          Always;
    "compile" => compile               = false,                    Flag,                            Always;
    "liger"   => liger                 = false,                    Flag,                            Always;
    "oib"     => optimizer_in_backward = false,                    Flag,                            NonDefault;
    "aoff"    => offload_activations   = false,                    Flag,                            NonDefault;
    "cpuoff"  => cpu_offload           = false,                    Flag,                            NonDefault;
    // DeepSpeed's sizes in elements and switches; `auto` is the Trainer's fill or DeepSpeed's own default
    // (`Plan::deepspeed_sizes`), priced by `engine/deepspeed.rs` where they move memory.
    "ds_sub"      => ds_sub_group        = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_rbucket"  => ds_reduce_bucket    = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_agbucket" => ds_allgather_bucket = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_prefetch" => ds_prefetch_bucket  = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_live"     => ds_max_live         = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_reuse"    => ds_max_reuse        = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_persist"  => ds_persistence      = None,  UintOrAuto(0, MAX_DS_ELEMENTS), NonDefault;
    "ds_overlap"  => ds_overlap_comm     = None,  FlagOrAuto,                     NonDefault;
    "ds_contig"   => ds_contiguous_grads = None,  FlagOrAuto,                     NonDefault;
    "zinit"       => zero_init           = true,  Flag,                           NonDefault;
    "qload"   => quantize_at_load_wide = false,                    Flag,                            NonDefault;
    "hold"    => hold_logits_bits      = 0,                        LogitBits,                       NonDefault;
    "split"   => split_layers          = false,                    Flag,                            NonDefault;
    // Unsloth's default is expandable, so its links write the allocator whatever it is.
    "alloc"   => allocator             = Alloc::Cached,            Word,
                                                                   NonDefaultOr(|p| p.framework == Framework::Unsloth);
    "msplit"  => max_split_mb          = None,                     UintOrAuto(21, MAX_SPLIT_MB),    NonDefault;
    "task"    => task                  = Task::Sft,                Word,                            NonDefault;
    "ref"     => reference             = Reference::Auto,          Word,                            NonDefault;
    "prompt"  => prompt_tokens         = None,                     UintOrAuto(1, MAX_SEQ),          NonDefault;
    // GRPO (`plan/grpo.rs`).
    "gens"    => generations           = DEFAULT_GENERATIONS,      Uint(2, MAX_GENERATIONS),        NonDefault;
    "completion" => completion_max     = None,                     UintOrAuto(1, MAX_SEQ),          NonDefault;
    "beta"    => beta                  = 0.0,
                 Decimal { lo: 0.0, hi: MAX_BETA, lo_open: false },                                  NonDefault;
    "gen"     => generation            = Generation::Hf,           Word,                            NonDefault;
    "vmem"    => vllm_memory           = DEFAULT_VLLM_MEMORY,
                 Decimal { lo: 0.0, hi: 1.0, lo_open: true },                                        NonDefault;
    // Batch lengths: how they vary, and the sequences' mean, standard deviation and maximum in tokens.
    "lens"    => lengths               = Lens::Fixed,              Word,                            NonDefault;
    "lmean"   => len_mean              = None,                     UintOrAuto(1, MAX_SEQ),          NonDefault;
    "lsd"     => len_sd                = None,                     UintOrAuto(0, MAX_SEQ),          NonDefault;
    "lmax"    => len_max               = None,                     UintOrAuto(1, MAX_SEQ),          NonDefault;
    "ltrunc"  => len_overlong          = Overlong::Cut,            Word,                            NonDefault;
    "embed"   => embed                 = false,                    Flag,                            NonDefault;
    "theme"   => theme                 = ColorScheme::Auto,        Word,                            NonDefault;
    not keys:
    // Set through `model` (an `org/name` value), cleared by a preset.
    hub = None;
}
