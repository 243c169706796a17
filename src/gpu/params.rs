//! Uniform parameter blocks of the WGSL kernels. Each struct here mirrors the `Params` struct of its kernels field
//! by field (every field one 4-byte word, in order); `tests/shaders.rs` checks the names and order against the
//! shaders themselves, so a change on one side without the other fails natively.
//!
//! Plain Rust with no web dependency: the runner uses it in the browser and the shader test includes it natively.

/// A value stored as one 32-bit word of a uniform block.
pub trait Word: Copy {
    fn word(self) -> u32;
}
impl Word for u32 {
    fn word(self) -> u32 {
        self
    }
}
impl Word for f32 {
    fn word(self) -> u32 {
        self.to_bits()
    }
}

macro_rules! params {
    ($( $(#[$m:meta])* $name:ident { $($field:ident : $ty:ident),+ $(,)? } )+) => {
        $(
            $(#[$m])*
            #[derive(Clone, Copy, Debug, Default, PartialEq)]
            pub struct $name { $(pub $field: $ty),+ }
            impl $name {
                /// WGSL member names, in order.
                #[allow(dead_code)]
                pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),+];
                /// The block as it is written to its uniform buffer.
                #[allow(dead_code)]
                pub fn words(&self) -> Vec<u32> { vec![$(Word::word(self.$field)),+] }
            }
        )+
        /// Every block: its Rust name and WGSL member names.
        #[allow(dead_code)]
        pub const ALL: &[(&str, &[&str])] = &[$((stringify!($name), $name::FIELDS)),+];
    };
}

params! {
    /// `nf4_dequant.wgsl`.
    Nf4Dequant { n: u32, qabs_word: u32, abs2_word: u32, off_word: u32 }
    /// `nf4_matmul.wgsl` and `nf4_matmul_t.wgsl`: `W` is `[rows, cols]`.
    Nf4Matmul {
        m: u32, rows: u32, cols: u32, x_off: u32,
        y_off: u32, qabs_word: u32, abs2_word: u32, off_word: u32,
        alpha: f32, beta: f32, pad0: u32, pad1: u32,
    }
    /// `matmul.wgsl`.
    Matmul {
        m: u32, n: u32, k: u32, a_off: u32,
        a_rs: u32, a_cs: u32, b_off: u32, b_rs: u32,
        b_cs: u32, c_off: u32, alpha: f32, beta: f32,
    }
    /// `embed.wgsl`.
    Embed { tokens: u32, h: u32, vocab: u32, pad0: u32 }
    /// `rmsnorm_fwd.wgsl` and `rmsnorm_bwd.wgsl`.
    RmsNorm { rows: u32, h: u32, eps: f32, accumulate: u32 }
    /// `rope.wgsl`.
    Rope { tokens: u32, seq: u32, heads: u32, d: u32, sign: f32, pad0: u32, pad1: u32, pad2: u32 }
    /// The attention kernels (`attn_*.wgsl`).
    Attn { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }
    /// `swiglu_fwd.wgsl`, `swiglu_bwd.wgsl`, `loss_sum.wgsl`, `add.wgsl`.
    Elementwise { n: u32, pad0: u32, pad1: u32, pad2: u32 }
    /// `ce_fwd.wgsl` and `ce_bwd.wgsl`.
    CrossEntropy { rows: u32, vocab: u32, row_off: u32, scale: f32 }
    /// `adamw.wgsl`.
    Adamw {
        n: u32, decay: f32, one_minus_beta1: f32, beta2: f32,
        one_minus_beta2: f32, eps: f32, step_size: f32, bc2_sqrt: f32,
    }
}
