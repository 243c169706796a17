//! The WGSL kernels, one per file under `kernels/`, compiled once per device into compute pipelines.
//! Their uniform parameter blocks are mirrored in [`super::params`]; `tests/shaders.rs` validates every file.
//!
//! The sources are embedded without their comment lines and indentation (done at compile time by [`minify`]),
//! which keeps the page's WebAssembly smaller; the files keep their header comments.

/// Writes `src` without its `//` comment lines and leading indentation into `out` (as much as fits) and returns the
/// minified length: with an empty `out`, only the length.
const fn strip(src: &str, out: &mut [u8]) -> usize {
    let b = src.as_bytes();
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        let mut j = i;
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        let comment = j + 1 < b.len() && b[j] == b'/' && b[j + 1] == b'/';
        while j < b.len() && b[j] != b'\n' {
            if !comment {
                if n < out.len() {
                    out[n] = b[j];
                }
                n += 1;
            }
            j += 1;
        }
        if !comment && j < b.len() {
            if n < out.len() {
                out[n] = b'\n';
            }
            n += 1;
        }
        i = j + 1;
    }
    n
}

/// Length of `src` without its `//` comment lines and leading indentation.
const fn minified_len(src: &str) -> usize {
    strip(src, &mut [])
}

/// `src` without its `//` comment lines and leading indentation (`N` from [`minified_len`]).
const fn minify<const N: usize>(src: &str) -> [u8; N] {
    let mut out = [b' '; N];
    strip(src, &mut out);
    out
}

/// A kernel file's source, minified at compile time.
macro_rules! wgsl {
    ($file:literal) => {{
        const SRC: &str = include_str!($file);
        const BYTES: [u8; minified_len(SRC)] = minify(SRC);
        const TEXT: &str = match std::str::from_utf8(&BYTES) {
            Ok(s) => s,
            Err(_) => SRC,
        };
        TEXT
    }};
}

/// One compute kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Nf4Dequant,
    Nf4Matmul,
    Nf4MatmulT,
    Matmul,
    Embed,
    RmsNormFwd,
    RmsNormBwd,
    Rope,
    AttnEagerFwd,
    AttnEagerBwdDs,
    AttnEagerBwdDq,
    AttnEagerBwdDkv,
    AttnTiledFwd,
    AttnTiledBwdDq,
    AttnTiledBwdDkv,
    SwigluFwd,
    SwigluBwd,
    CeFwd,
    CeBwd,
    LossSum,
    Adamw,
    Add,
}

impl Kernel {
    pub const ALL: [Kernel; 22] = [
        Kernel::Nf4Dequant,
        Kernel::Nf4Matmul,
        Kernel::Nf4MatmulT,
        Kernel::Matmul,
        Kernel::Embed,
        Kernel::RmsNormFwd,
        Kernel::RmsNormBwd,
        Kernel::Rope,
        Kernel::AttnEagerFwd,
        Kernel::AttnEagerBwdDs,
        Kernel::AttnEagerBwdDq,
        Kernel::AttnEagerBwdDkv,
        Kernel::AttnTiledFwd,
        Kernel::AttnTiledBwdDq,
        Kernel::AttnTiledBwdDkv,
        Kernel::SwigluFwd,
        Kernel::SwigluBwd,
        Kernel::CeFwd,
        Kernel::CeBwd,
        Kernel::LossSum,
        Kernel::Adamw,
        Kernel::Add,
    ];

    /// The WGSL source.
    pub fn source(self) -> &'static str {
        match self {
            Kernel::Nf4Dequant => wgsl!("kernels/nf4_dequant.wgsl"),
            Kernel::Nf4Matmul => wgsl!("kernels/nf4_matmul.wgsl"),
            Kernel::Nf4MatmulT => wgsl!("kernels/nf4_matmul_t.wgsl"),
            Kernel::Matmul => wgsl!("kernels/matmul.wgsl"),
            Kernel::Embed => wgsl!("kernels/embed.wgsl"),
            Kernel::RmsNormFwd => wgsl!("kernels/rmsnorm_fwd.wgsl"),
            Kernel::RmsNormBwd => wgsl!("kernels/rmsnorm_bwd.wgsl"),
            Kernel::Rope => wgsl!("kernels/rope.wgsl"),
            Kernel::AttnEagerFwd => wgsl!("kernels/attn_eager_fwd.wgsl"),
            Kernel::AttnEagerBwdDs => wgsl!("kernels/attn_eager_bwd_ds.wgsl"),
            Kernel::AttnEagerBwdDq => wgsl!("kernels/attn_eager_bwd_dq.wgsl"),
            Kernel::AttnEagerBwdDkv => wgsl!("kernels/attn_eager_bwd_dkv.wgsl"),
            Kernel::AttnTiledFwd => wgsl!("kernels/attn_tiled_fwd.wgsl"),
            Kernel::AttnTiledBwdDq => wgsl!("kernels/attn_tiled_bwd_dq.wgsl"),
            Kernel::AttnTiledBwdDkv => wgsl!("kernels/attn_tiled_bwd_dkv.wgsl"),
            Kernel::SwigluFwd => wgsl!("kernels/swiglu_fwd.wgsl"),
            Kernel::SwigluBwd => wgsl!("kernels/swiglu_bwd.wgsl"),
            Kernel::CeFwd => wgsl!("kernels/ce_fwd.wgsl"),
            Kernel::CeBwd => wgsl!("kernels/ce_bwd.wgsl"),
            Kernel::LossSum => wgsl!("kernels/loss_sum.wgsl"),
            Kernel::Adamw => wgsl!("kernels/adamw.wgsl"),
            Kernel::Add => wgsl!("kernels/add.wgsl"),
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}
