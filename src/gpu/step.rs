//! One micro QLoRA training step on WebGPU, and its buffer schedule: which buffers exist in each phase, how big,
//! and when each is released. The allocation tracker ([`super::device::Tracker`]) measures exactly this schedule;
//! the accounting engine predicts it from the plan that [`peakplan_core::micro::MicroConfig::plan`] builds.
//!
//! Symbols: `N = batch x seq` tokens, `h` hidden, `q = heads x d`, `kv = kv_heads x d` (`d` the head width), `I`
//! intermediate, `V` vocab, `r` rank, `L` layers, `a` heads, `s` seq, `b` batch, `C` loss chunk, `T` the adapted
//! projections; projection `p` is `[out_p, in_p]`. All tensors are f32 (4 bytes) except the 4-bit weights.
//! Buffer sizes are rounded up to 4 bytes.
//!
//! **Load** (resident through the run):
//! - each projection's NF4 weight, one buffer: `in_p*out_p/2` packed nibbles + `in_p*out_p/64` 8-bit absmax +
//!   `4*ceil(in_p*out_p/16384)` fp32 scales + 4 (offset), for all 7 projections of the `L` layers;
//! - the NF4 and dynamic-map tables: `4 x (256 + 16)` = 1088 bytes (bitsandbytes' shared code table);
//! - embedding and LM head `4Vh` each, norms `4h x (2L + 1)`;
//! - adapters `A` `4 r in_p` and `B` `4 r out_p` for every adapted projection, and AdamW's `m`, `v` alike (x2);
//! - the batch: token ids `4N`, labels `4N`, the RoPE cos/sin table `4 s d`, the loss `4`;
//! - kernel parameter blocks (16 to 48 bytes each, one per distinct dispatch; made during step 1).
//!
//! **Forward**, layer `l` (kept for backward unless marked):
//! - the layer input `x_l` `4Nh` (RMSNorm input) and `rstd1` `4N`;
//! - `xn1` `4Nh`, kept when q, k or v is adapted, else released after the three projections;
//! - `q` `4Nq`, `k` and `v` `4N kv` (RoPE in place); per adapted projection `u_p = x A_p^T` `4Nr`;
//! - eager: probabilities `P` `4 b a s^2`; tiled: log-sum-exp `4 b a s`;
//! - the attention output `o` `4Nq`, kept when o is adapted or attention is tiled (its backward reads `o`);
//! - the o projection's output, made `h_mid` by the residual add in place, `4Nh` (RMSNorm input), `rstd2` `4N`;
//! - `xn2` `4Nh`, kept when gate or up is adapted; `g` and `up` `4NI` each;
//! - `m = silu(g) up` `4NI`, kept when down is adapted; the down output becomes `x_{l+1}` in place.
//! - unfused dequantization only: a dense copy of `W_p` (`4 in_p out_p`) around each base matmul, released after it
//!   (the fused kernels never make one).
//!
//! Then the final norm keeps `x_L` `4Nh` and `rstd_f` `4N` and makes `xn_f` `4Nh`; the loss keeps `lse` `4N` and
//! makes `rowloss` `4N` (released after the mean). Whole loss: `logits` `4NV`, kept; `xn_f` released. Chunked loss:
//! a `4CV` logits chunk per chunk, released after its loss; `xn_f` kept for the recomputation.
//!
//! **Backward** (in reverse; each saved tensor is released as soon as its last reader has been encoded):
//! - whole loss: `dlogits` `4NV` beside `logits` (the peak of most runs: load + saved activations + `8NV`), then
//!   `logits` and `dlogits` go and `dxn_f` `4Nh` comes; chunked: `dxn_f` `4Nh`, then per chunk the recomputed logits
//!   `4CV` and their gradient `4CV`;
//! - `dh` `4Nh`, the residual stream's gradient, for the whole backward;
//! - per layer: `dm` `4NI`; per adapted projection its gradients `4 r in_p` + `4 r out_p` (kept until the optimizer)
//!   and a transient `4Nr`; `dg`, `du` `4NI` each; `dxn2` `4Nh`; `do` `4Nq`; `dq` `4Nq`, `dk`, `dv` `4N kv`; eager
//!   `dS` `4 b a s^2`, tiled `delta` `4 b a s`; `dxn1` `4Nh`.
//!
//! **Optimizer**: AdamW in place on every adapter; all gradients are released after it (`zero_grad(set_to_none)`).
//!
//! Releasing: a released buffer is destroyed (and leaves the live bytes) before the next buffer is created, after the
//! commands that use it have been submitted, as a stream-ordered caching allocator would reuse it.

use super::device::{Buf, Gpu, GpuError, StepPhase};
use super::kernels::Kernel;
use super::params::{
    Adamw, Attn, CrossEntropy, Elementwise, Embed, Matmul, Nf4Dequant, Nf4Matmul, RmsNorm, Rope,
};
use peakplan_core::micro::nf4::Nf4Layout;
use peakplan_core::micro::ops::{adamw_coefficients, rope_table, Mat};
use peakplan_core::micro::{
    Batch, MicroAttention, MicroConfig, MicroLoss, MicroModel, TensorId, PROJECTIONS,
};
use std::cell::Cell;

/// One frozen projection on the GPU.
pub struct ProjBufs {
    pub q: Buf,
    pub layout: Nf4Layout,
    /// Out features.
    pub rows: usize,
    /// In features.
    pub cols: usize,
    /// Indices of the adapter's `A` and `B` in [`Resident::trainable`].
    pub lora: Option<(usize, usize)>,
    /// What its output is, for the tracker.
    pub output: &'static str,
}

/// The tracker's names for the outputs of q, k, v, o, gate, up and down.
const OUTPUTS: [&str; 7] = [
    "q (rotated in place)",
    "k (rotated in place)",
    "v",
    "o projection output, then h_mid (residual add in place)",
    "gate output g",
    "up output",
    "down output, then the next hidden state (residual add in place)",
];

pub struct LayerBufs {
    pub attn_norm: Buf,
    pub mlp_norm: Buf,
    pub proj: Vec<ProjBufs>,
}

/// A trainable tensor with its AdamW moments.
pub struct Trainable {
    pub id: TensorId,
    pub param: Buf,
    pub m: Buf,
    pub v: Buf,
    pub len: usize,
}

/// Everything resident between steps (the load phase).
pub struct Resident {
    pub codes: Buf,
    pub embed: Buf,
    pub lm_head: Buf,
    pub final_norm: Buf,
    pub layers: Vec<LayerBufs>,
    pub ids: Buf,
    pub labels: Buf,
    pub rope: Buf,
    pub loss: Buf,
    pub trainable: Vec<Trainable>,
    /// AdamW's step count.
    pub step: Cell<u32>,
}

impl Resident {
    /// Uploads the model (its NF4 weights as quantized by the core), the adapters, zeroed AdamW moments and the batch.
    pub fn upload(gpu: &Gpu, model: &MicroModel, batch: &Batch) -> Result<Resident, GpuError> {
        let cfg = &model.cfg;
        let codes = gpu.codes()?;
        let mut trainable = Vec::new();
        let mut layers = Vec::with_capacity(model.layers.len());
        for (l, layer) in model.layers.iter().enumerate() {
            let mut proj = Vec::with_capacity(7);
            for (pi, p) in layer.proj.iter().enumerate() {
                let words = p.base.to_words();
                let q = gpu.upload_u32(&words, "NF4 weight (packed, absmax, scales, offset)")?;
                let lora = match &p.lora {
                    Some(lo) => {
                        let mut ids = [0usize; 2];
                        for (k, (vals, is_b)) in
                            [(&lo.a, false), (&lo.b, true)].into_iter().enumerate()
                        {
                            ids[k] = trainable.len();
                            trainable.push(Trainable {
                                id: TensorId {
                                    layer: l,
                                    proj: pi,
                                    b: is_b,
                                },
                                param: gpu.upload_f32(vals, "LoRA adapter")?,
                                m: gpu.alloc_f32(vals.len(), "AdamW first moment")?,
                                v: gpu.alloc_f32(vals.len(), "AdamW second moment")?,
                                len: vals.len(),
                            });
                        }
                        Some((ids[0], ids[1]))
                    }
                    None => None,
                };
                proj.push(ProjBufs {
                    output: OUTPUTS[pi],
                    q,
                    layout: p.base.layout(),
                    rows: p.base.rows,
                    cols: p.base.cols,
                    lora,
                });
            }
            layers.push(LayerBufs {
                attn_norm: gpu.upload_f32(&layer.attn_norm, "RMSNorm weight")?,
                mlp_norm: gpu.upload_f32(&layer.mlp_norm, "RMSNorm weight")?,
                proj,
            });
        }
        let (cos, sin) = rope_table(cfg.seq, cfg.head_dim(), cfg.rope_theta);
        let mut table = cos;
        table.extend_from_slice(&sin);
        Ok(Resident {
            codes,
            embed: gpu.upload_f32(&model.embed, "embedding")?,
            lm_head: gpu.upload_f32(&model.lm_head, "LM head")?,
            final_norm: gpu.upload_f32(&model.final_norm, "RMSNorm weight")?,
            layers,
            ids: gpu.upload_u32(&batch.ids, "token ids")?,
            labels: gpu.upload_u32(&batch.labels, "labels")?,
            rope: gpu.upload_f32(&table, "RoPE cos/sin table")?,
            loss: gpu.alloc_f32(1, "loss")?,
            trainable,
            step: Cell::new(0),
        })
    }
}

/// Workgroups for a grid-stride kernel over `n` items.
pub fn groups_1d(n: usize, wg: usize) -> (u32, u32) {
    (n.div_ceil(wg).clamp(1, 65_535) as u32, 1)
}

/// Workgroups of `matmul.wgsl` for an `[m, n]` output (8x8 invocations of 4x4 each).
pub fn blocks_4x4(m: usize, n: usize) -> (u32, u32) {
    (n.div_ceil(32) as u32, m.div_ceil(32) as u32)
}

/// Workgroups of `nf4_matmul.wgsl` for an `[m, n]` output (8x8 invocations of 8 tokens x 4 features each; keep in
/// sync with the kernel's header).
pub fn blocks_8x4(m: usize, n: usize) -> (u32, u32) {
    (n.div_ceil(32) as u32, m.div_ceil(64) as u32)
}

/// Workgroups of `nf4_matmul_t.wgsl` for an `[m, cols]` output (8x8 invocations of 4x8 each).
pub fn blocks_4x8(m: usize, cols: usize) -> (u32, u32) {
    (cols.div_ceil(64) as u32, m.div_ceil(32) as u32)
}

/// Encodes the step's operations on one device.
pub struct Ctx<'a> {
    pub gpu: &'a Gpu,
    pub cfg: &'a MicroConfig,
    pub res: &'a Resident,
    /// Fused dequantize-matmul (no dense weight copy) or dequantize-then-matmul.
    pub fused: bool,
}

/// Tensors a layer's forward keeps for its backward.
#[derive(Default)]
struct Saved {
    x: Option<Buf>,
    rstd1: Option<Buf>,
    xn1: Option<Buf>,
    u: [Option<Buf>; 7],
    q: Option<Buf>,
    k: Option<Buf>,
    v: Option<Buf>,
    o: Option<Buf>,
    attn: Option<Buf>,
    h_mid: Option<Buf>,
    rstd2: Option<Buf>,
    xn2: Option<Buf>,
    g: Option<Buf>,
    up: Option<Buf>,
    m: Option<Buf>,
}

/// What the forward leaves for the backward beyond the layers.
struct Head {
    x_last: Buf,
    rstd_f: Buf,
    xn_f: Option<Buf>,
    lse: Buf,
    logits: Option<Buf>,
}

fn need(b: Option<Buf>, what: &str) -> Result<Buf, GpuError> {
    b.ok_or_else(|| GpuError::Js(format!("internal: {what} was not kept")))
}

impl Ctx<'_> {
    fn attn_params(&self) -> Vec<u32> {
        let c = self.cfg;
        Attn {
            batch: c.batch as u32,
            seq: c.seq as u32,
            heads: c.heads as u32,
            kv_heads: c.kv_heads as u32,
            d: c.head_dim() as u32,
            scale: 1.0 / (c.head_dim() as f32).sqrt(),
            ..Attn::default()
        }
        .words()
    }

    /// `C = alpha * A . B + beta * C` (kernel `matmul.wgsl`).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        (m, n, k): (usize, usize, usize),
        a: &Buf,
        am: Mat,
        b: &Buf,
        bm: Mat,
        c: &Buf,
        c_off: usize,
        alpha: f32,
        beta: f32,
    ) -> Result<(), GpuError> {
        let p = Matmul {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            a_off: am.off as u32,
            a_rs: am.rs as u32,
            a_cs: am.cs as u32,
            b_off: bm.off as u32,
            b_rs: bm.rs as u32,
            b_cs: bm.cs as u32,
            c_off: c_off as u32,
            alpha,
            beta,
        };
        self.gpu.count_matmul(m, n, k);
        self.gpu
            .dispatch(Kernel::Matmul, &[*a, *b, *c], &p.words(), blocks_4x4(m, n))
    }

    fn nf4_params(&self, m: usize, p: &ProjBufs, beta: f32) -> Nf4Matmul {
        Nf4Matmul {
            m: m as u32,
            rows: p.rows as u32,
            cols: p.cols as u32,
            qabs_word: p.layout.qabsmax_word as u32,
            abs2_word: p.layout.absmax2_word as u32,
            off_word: p.layout.offset_word as u32,
            alpha: 1.0,
            beta,
            ..Nf4Matmul::default()
        }
    }

    /// The dense weight of the unfused path (released by the caller).
    pub fn dequantize(&self, p: &ProjBufs) -> Result<Buf, GpuError> {
        let n = p.rows * p.cols;
        let w = self.gpu.alloc_f32(n, "dequantized weight (unfused path)")?;
        let prm = Nf4Dequant {
            n: n as u32,
            qabs_word: p.layout.qabsmax_word as u32,
            abs2_word: p.layout.absmax2_word as u32,
            off_word: p.layout.offset_word as u32,
        };
        self.gpu.dispatch(
            Kernel::Nf4Dequant,
            &[p.q, w, self.res.codes],
            &prm.words(),
            groups_1d(n, 256),
        )?;
        Ok(w)
    }

    /// `y = x W^T (+ beta y)` through the frozen 4-bit weight.
    pub fn base_fwd(
        &self,
        m: usize,
        x: &Buf,
        p: &ProjBufs,
        y: &Buf,
        beta: f32,
    ) -> Result<(), GpuError> {
        if self.fused {
            self.gpu.count_matmul(m, p.rows, p.cols);
            let prm = self.nf4_params(m, p, beta);
            self.gpu.dispatch(
                Kernel::Nf4Matmul,
                &[*x, p.q, *y, self.res.codes],
                &prm.words(),
                blocks_8x4(m, p.rows),
            )
        } else {
            let w = self.dequantize(p)?;
            self.matmul(
                (m, p.rows, p.cols),
                x,
                Mat::rows(0, p.cols),
                &w,
                Mat::transposed(0, p.cols),
                y,
                0,
                1.0,
                beta,
            )?;
            self.gpu.free(w);
            Ok(())
        }
    }

    /// `dx = dy W (+ beta dx)` through the frozen 4-bit weight.
    pub fn base_bwd(
        &self,
        m: usize,
        dy: &Buf,
        p: &ProjBufs,
        dx: &Buf,
        beta: f32,
    ) -> Result<(), GpuError> {
        if self.fused {
            self.gpu.count_matmul(m, p.cols, p.rows);
            let prm = self.nf4_params(m, p, beta);
            self.gpu.dispatch(
                Kernel::Nf4MatmulT,
                &[*dy, p.q, *dx, self.res.codes],
                &prm.words(),
                blocks_4x8(m, p.cols),
            )
        } else {
            let w = self.dequantize(p)?;
            self.matmul(
                (m, p.cols, p.rows),
                dy,
                Mat::rows(0, p.rows),
                &w,
                Mat::rows(0, p.cols),
                dx,
                0,
                1.0,
                beta,
            )?;
            self.gpu.free(w);
            Ok(())
        }
    }

    /// `y = x W^T + s (x A^T) B^T`; returns `y` and `u = x A^T` when adapted.
    fn proj_fwd(&self, p: &ProjBufs, x: &Buf) -> Result<(Buf, Option<Buf>), GpuError> {
        let (n, r) = (self.cfg.tokens(), self.cfg.rank);
        let y = self.gpu.alloc_f32(n * p.rows, p.output)?;
        self.base_fwd(n, x, p, &y, 0.0)?;
        let Some((ia, ib)) = p.lora else {
            return Ok((y, None));
        };
        let u = self.gpu.alloc_f32(n * r, "LoRA A output (x A^T)")?;
        let (a, b) = (&self.res.trainable[ia].param, &self.res.trainable[ib].param);
        self.matmul(
            (n, r, p.cols),
            x,
            Mat::rows(0, p.cols),
            a,
            Mat::transposed(0, p.cols),
            &u,
            0,
            1.0,
            0.0,
        )?;
        self.matmul(
            (n, p.rows, r),
            &u,
            Mat::rows(0, r),
            b,
            Mat::transposed(0, r),
            &y,
            0,
            self.cfg.scaling(),
            1.0,
        )?;
        Ok((y, Some(u)))
    }

    /// Backward of one projection: `dx (+)= dy W + s (dy B) A` and the adapter's gradients into `grads`.
    #[allow(clippy::too_many_arguments)]
    fn proj_bwd(
        &self,
        p: &ProjBufs,
        x: Option<&Buf>,
        u: Option<&Buf>,
        dy: &Buf,
        dx: &Buf,
        first: bool,
        grads: &mut [Option<Buf>],
    ) -> Result<(), GpuError> {
        let (n, r, s) = (self.cfg.tokens(), self.cfg.rank, self.cfg.scaling());
        self.base_bwd(n, dy, p, dx, if first { 0.0 } else { 1.0 })?;
        let (Some((ia, ib)), Some(x), Some(u)) = (p.lora, x, u) else {
            return Ok(());
        };
        let (a, b) = (&self.res.trainable[ia].param, &self.res.trainable[ib].param);
        let gb = self.gpu.alloc_f32(p.rows * r, "adapter gradient")?;
        self.matmul(
            (p.rows, r, n),
            dy,
            Mat::transposed(0, p.rows),
            u,
            Mat::rows(0, r),
            &gb,
            0,
            s,
            0.0,
        )?;
        let gu = self
            .gpu
            .alloc_f32(n * r, "LoRA B input gradient (transient)")?;
        self.matmul(
            (n, r, p.rows),
            dy,
            Mat::rows(0, p.rows),
            b,
            Mat::rows(0, r),
            &gu,
            0,
            s,
            0.0,
        )?;
        let ga = self.gpu.alloc_f32(r * p.cols, "adapter gradient")?;
        self.matmul(
            (r, p.cols, n),
            &gu,
            Mat::transposed(0, r),
            x,
            Mat::rows(0, p.cols),
            &ga,
            0,
            1.0,
            0.0,
        )?;
        self.matmul(
            (n, p.cols, r),
            &gu,
            Mat::rows(0, r),
            a,
            Mat::rows(0, p.cols),
            dx,
            0,
            1.0,
            1.0,
        )?;
        self.gpu.free(gu);
        grads[ia] = Some(ga);
        grads[ib] = Some(gb);
        Ok(())
    }

    fn rmsnorm_fwd(&self, x: &Buf, w: &Buf, y: &Buf, rstd: &Buf) -> Result<(), GpuError> {
        let c = self.cfg;
        let p = RmsNorm {
            rows: c.tokens() as u32,
            h: c.hidden as u32,
            eps: c.norm_eps,
            accumulate: 0,
        };
        self.gpu.dispatch(
            Kernel::RmsNormFwd,
            &[*x, *w, *y, *rstd],
            &p.words(),
            (c.tokens() as u32, 1),
        )
    }

    fn rmsnorm_bwd(
        &self,
        dy: &Buf,
        x: &Buf,
        w: &Buf,
        rstd: &Buf,
        dx: &Buf,
        acc: bool,
    ) -> Result<(), GpuError> {
        let c = self.cfg;
        let p = RmsNorm {
            rows: c.tokens() as u32,
            h: c.hidden as u32,
            eps: c.norm_eps,
            accumulate: acc as u32,
        };
        self.gpu.dispatch(
            Kernel::RmsNormBwd,
            &[*dy, *x, *w, *rstd, *dx],
            &p.words(),
            (c.tokens() as u32, 1),
        )
    }

    fn rope(&self, x: &Buf, heads: usize, sign: f32) -> Result<(), GpuError> {
        let c = self.cfg;
        let p = Rope {
            tokens: c.tokens() as u32,
            seq: c.seq as u32,
            heads: heads as u32,
            d: c.head_dim() as u32,
            sign,
            ..Rope::default()
        };
        self.gpu.dispatch(
            Kernel::Rope,
            &[*x, self.res.rope],
            &p.words(),
            groups_1d(c.tokens() * heads * c.head_dim() / 2, 256),
        )
    }

    fn add(&self, a: &Buf, b: &Buf, n: usize) -> Result<(), GpuError> {
        let p = Elementwise {
            n: n as u32,
            ..Elementwise::default()
        };
        self.gpu
            .dispatch(Kernel::Add, &[*a, *b], &p.words(), groups_1d(n, 256))
    }

    fn lm_logits(&self, xn: &Buf, rows: usize, row0: usize, out: &Buf) -> Result<(), GpuError> {
        let (h, v) = (self.cfg.hidden, self.cfg.vocab);
        self.matmul(
            (rows, v, h),
            xn,
            Mat::rows(row0 * h, h),
            &self.res.lm_head,
            Mat::transposed(0, h),
            out,
            0,
            1.0,
            0.0,
        )
    }

    fn ce_params(&self, rows: usize, row0: usize) -> Vec<u32> {
        CrossEntropy {
            rows: rows as u32,
            vocab: self.cfg.vocab as u32,
            row_off: row0 as u32,
            scale: 1.0 / self.cfg.tokens() as f32,
        }
        .words()
    }

    fn forward(&self) -> Result<(Vec<Saved>, Head), GpuError> {
        let (gpu, c, res) = (self.gpu, self.cfg, self.res);
        let (n, h, qd, inter) = (c.tokens(), c.hidden, c.q_dim(), c.intermediate);
        let mut x = gpu.alloc_f32(n * h, "embedding output (layer 0 input)")?;
        let ep = Embed {
            tokens: n as u32,
            h: h as u32,
            vocab: c.vocab as u32,
            pad0: 0,
        };
        gpu.dispatch(
            Kernel::Embed,
            &[res.ids, res.embed, x],
            &ep.words(),
            groups_1d(n * h, 256),
        )?;
        let adapted = |t: usize| c.adapted(PROJECTIONS[t]);
        let mut saved = Vec::with_capacity(c.layers);
        for layer in &res.layers {
            let mut s = Saved::default();
            let rstd1 = gpu.alloc_f32(n, "RMSNorm rstd")?;
            let xn1 = gpu.alloc_f32(n * h, "xn1 (attention RMSNorm output)")?;
            self.rmsnorm_fwd(&x, &layer.attn_norm, &xn1, &rstd1)?;
            let (q, uq) = self.proj_fwd(&layer.proj[0], &xn1)?;
            let (k, uk) = self.proj_fwd(&layer.proj[1], &xn1)?;
            let (v, uv) = self.proj_fwd(&layer.proj[2], &xn1)?;
            if adapted(0) || adapted(1) || adapted(2) {
                s.xn1 = Some(xn1);
            } else {
                gpu.free(xn1);
            }
            self.rope(&q, c.heads, 1.0)?;
            self.rope(&k, c.kv_heads, 1.0)?;
            let o = gpu.alloc_f32(n * qd, "attention output")?;
            let ap = self.attn_params();
            let attn = match c.attention {
                MicroAttention::Eager => {
                    let p = gpu.alloc_f32(
                        c.batch * c.heads * c.seq * c.seq,
                        "attention probabilities (eager)",
                    )?;
                    gpu.dispatch(
                        Kernel::AttnEagerFwd,
                        &[q, k, v, p, o],
                        &ap,
                        groups_1d(c.batch * c.heads * c.seq, 64),
                    )?;
                    p
                }
                MicroAttention::Tiled => {
                    let lse =
                        gpu.alloc_f32(c.batch * c.heads * c.seq, "attention log-sum-exp (tiled)")?;
                    gpu.dispatch(
                        Kernel::AttnTiledFwd,
                        &[q, k, v, o, lse],
                        &ap,
                        (c.seq.div_ceil(64) as u32, (c.batch * c.heads) as u32),
                    )?;
                    lse
                }
            };
            gpu.count_matmul(c.batch * c.heads * c.seq, c.seq, 2 * c.head_dim());
            let (h_mid, uo) = self.proj_fwd(&layer.proj[3], &o)?;
            if c.attention == MicroAttention::Tiled || adapted(3) {
                s.o = Some(o);
            } else {
                gpu.free(o);
            }
            self.add(&h_mid, &x, n * h)?;
            let rstd2 = gpu.alloc_f32(n, "RMSNorm rstd")?;
            let xn2 = gpu.alloc_f32(n * h, "xn2 (MLP RMSNorm output)")?;
            self.rmsnorm_fwd(&h_mid, &layer.mlp_norm, &xn2, &rstd2)?;
            let (g, ug) = self.proj_fwd(&layer.proj[4], &xn2)?;
            let (up, uu) = self.proj_fwd(&layer.proj[5], &xn2)?;
            if adapted(4) || adapted(5) {
                s.xn2 = Some(xn2);
            } else {
                gpu.free(xn2);
            }
            let m = gpu.alloc_f32(n * inter, "m = silu(g) up (SwiGLU output)")?;
            let ew = Elementwise {
                n: (n * inter) as u32,
                ..Elementwise::default()
            };
            gpu.dispatch(
                Kernel::SwigluFwd,
                &[g, up, m],
                &ew.words(),
                groups_1d(n * inter, 256),
            )?;
            let (next, ud) = self.proj_fwd(&layer.proj[6], &m)?;
            if adapted(6) {
                s.m = Some(m);
            } else {
                gpu.free(m);
            }
            self.add(&next, &h_mid, n * h)?;
            s.u = [uq, uk, uv, uo, ug, uu, ud];
            s.x = Some(std::mem::replace(&mut x, next));
            s.rstd1 = Some(rstd1);
            (s.q, s.k, s.v, s.attn) = (Some(q), Some(k), Some(v), Some(attn));
            (s.h_mid, s.rstd2, s.g, s.up) = (Some(h_mid), Some(rstd2), Some(g), Some(up));
            saved.push(s);
        }
        // Final norm and loss.
        let rstd_f = gpu.alloc_f32(n, "RMSNorm rstd")?;
        let xn_f = gpu.alloc_f32(n * h, "xn_f (final RMSNorm output)")?;
        self.rmsnorm_fwd(&x, &res.final_norm, &xn_f, &rstd_f)?;
        let lse = gpu.alloc_f32(n, "loss log-sum-exp")?;
        let rowloss = gpu.alloc_f32(n, "per-token loss")?;
        let chunk = c.loss_chunk();
        let mut logits = None;
        for row0 in (0..n).step_by(chunk) {
            let rows = chunk.min(n - row0);
            let l = gpu.alloc_f32(
                rows * c.vocab,
                if c.loss == MicroLoss::Whole {
                    "logits"
                } else {
                    "logits chunk"
                },
            )?;
            self.lm_logits(&xn_f, rows, row0, &l)?;
            gpu.dispatch(
                Kernel::CeFwd,
                &[l, res.labels, lse, rowloss],
                &self.ce_params(rows, row0),
                (rows as u32, 1),
            )?;
            if c.loss == MicroLoss::Whole {
                logits = Some(l);
            } else {
                gpu.free(l);
            }
        }
        let ew = Elementwise {
            n: n as u32,
            ..Elementwise::default()
        };
        gpu.dispatch(Kernel::LossSum, &[rowloss, res.loss], &ew.words(), (1, 1))?;
        gpu.free(rowloss);
        let xn_f = if c.loss == MicroLoss::Whole {
            gpu.free(xn_f);
            None
        } else {
            Some(xn_f)
        };
        Ok((
            saved,
            Head {
                x_last: x,
                rstd_f,
                xn_f,
                lse,
                logits,
            },
        ))
    }

    fn backward(&self, saved: Vec<Saved>, head: Head) -> Result<Vec<Option<Buf>>, GpuError> {
        let (gpu, c, res) = (self.gpu, self.cfg, self.res);
        let (n, h, qd, kvd, inter) = (c.tokens(), c.hidden, c.q_dim(), c.kv_dim(), c.intermediate);
        let mut grads: Vec<Option<Buf>> = vec![None; res.trainable.len()];
        // Loss and LM head.
        let dxn_f;
        match (&head.logits, &head.xn_f) {
            (Some(logits), _) => {
                let dl = gpu.alloc_f32(n * c.vocab, "logits gradient")?;
                gpu.dispatch(
                    Kernel::CeBwd,
                    &[*logits, res.labels, head.lse, dl],
                    &self.ce_params(n, 0),
                    groups_1d(n * c.vocab, 256),
                )?;
                gpu.free(*logits);
                dxn_f = gpu.alloc_f32(n * h, "final normed hidden gradient")?;
                self.matmul(
                    (n, h, c.vocab),
                    &dl,
                    Mat::rows(0, c.vocab),
                    &res.lm_head,
                    Mat::rows(0, h),
                    &dxn_f,
                    0,
                    1.0,
                    0.0,
                )?;
                gpu.free(dl);
            }
            (None, Some(xn_f)) => {
                dxn_f = gpu.alloc_f32(n * h, "final normed hidden gradient")?;
                let chunk = c.loss_chunk();
                for row0 in (0..n).step_by(chunk) {
                    let rows = chunk.min(n - row0);
                    let l = gpu.alloc_f32(rows * c.vocab, "logits chunk (recomputed)")?;
                    self.lm_logits(xn_f, rows, row0, &l)?;
                    let dl = gpu.alloc_f32(rows * c.vocab, "logits chunk gradient")?;
                    gpu.dispatch(
                        Kernel::CeBwd,
                        &[l, res.labels, head.lse, dl],
                        &self.ce_params(rows, row0),
                        groups_1d(rows * c.vocab, 256),
                    )?;
                    gpu.free(l);
                    self.matmul(
                        (rows, h, c.vocab),
                        &dl,
                        Mat::rows(0, c.vocab),
                        &res.lm_head,
                        Mat::rows(0, h),
                        &dxn_f,
                        row0 * h,
                        1.0,
                        0.0,
                    )?;
                    gpu.free(dl);
                }
                gpu.free(*xn_f);
            }
            (None, None) => {
                return Err(GpuError::Js(
                    "internal: no logits and no normed hidden".into(),
                ))
            }
        }
        gpu.free(head.lse);
        let dh = gpu.alloc_f32(n * h, "hidden gradient")?;
        self.rmsnorm_bwd(
            &dxn_f,
            &head.x_last,
            &res.final_norm,
            &head.rstd_f,
            &dh,
            false,
        )?;
        gpu.free(dxn_f);
        gpu.free(head.rstd_f);
        gpu.free(head.x_last);

        for (layer, mut s) in res.layers.iter().zip(saved).rev() {
            // MLP
            let dm = gpu.alloc_f32(n * inter, "SwiGLU output gradient")?;
            self.proj_bwd(
                &layer.proj[6],
                s.m.as_ref(),
                s.u[6].as_ref(),
                &dh,
                &dm,
                true,
                &mut grads,
            )?;
            gpu.free_opt(&mut s.m);
            gpu.free_opt(&mut s.u[6]);
            let dg = gpu.alloc_f32(n * inter, "gate gradient")?;
            let du = gpu.alloc_f32(n * inter, "up gradient")?;
            let (g, up) = (need(s.g, "g")?, need(s.up, "up")?);
            let ew = Elementwise {
                n: (n * inter) as u32,
                ..Elementwise::default()
            };
            gpu.dispatch(
                Kernel::SwigluBwd,
                &[dm, g, up, dg, du],
                &ew.words(),
                groups_1d(n * inter, 256),
            )?;
            gpu.free(dm);
            gpu.free_opt(&mut s.g);
            gpu.free_opt(&mut s.up);
            let dxn2 = gpu.alloc_f32(n * h, "normed hidden gradient")?;
            self.proj_bwd(
                &layer.proj[4],
                s.xn2.as_ref(),
                s.u[4].as_ref(),
                &dg,
                &dxn2,
                true,
                &mut grads,
            )?;
            self.proj_bwd(
                &layer.proj[5],
                s.xn2.as_ref(),
                s.u[5].as_ref(),
                &du,
                &dxn2,
                false,
                &mut grads,
            )?;
            gpu.free(dg);
            gpu.free(du);
            gpu.free_opt(&mut s.u[4]);
            gpu.free_opt(&mut s.u[5]);
            gpu.free_opt(&mut s.xn2);
            let (h_mid, rstd2) = (need(s.h_mid, "h_mid")?, need(s.rstd2, "rstd2")?);
            self.rmsnorm_bwd(&dxn2, &h_mid, &layer.mlp_norm, &rstd2, &dh, true)?;
            gpu.free(dxn2);
            gpu.free_opt(&mut s.h_mid);
            gpu.free_opt(&mut s.rstd2);

            // Attention
            let dout = gpu.alloc_f32(n * qd, "attention output gradient")?;
            self.proj_bwd(
                &layer.proj[3],
                s.o.as_ref(),
                s.u[3].as_ref(),
                &dh,
                &dout,
                true,
                &mut grads,
            )?;
            gpu.free_opt(&mut s.u[3]);
            let (q, k, v, attn) = (
                need(s.q, "q")?,
                need(s.k, "k")?,
                need(s.v, "v")?,
                need(s.attn, "attention")?,
            );
            let dq = gpu.alloc_f32(n * qd, "q gradient")?;
            let dk = gpu.alloc_f32(n * kvd, "k gradient")?;
            let dv = gpu.alloc_f32(n * kvd, "v gradient")?;
            let ap = self.attn_params();
            let rows = c.batch * c.heads * c.seq;
            match c.attention {
                MicroAttention::Eager => {
                    let ds = gpu.alloc_f32(rows * c.seq, "attention score gradient (eager)")?;
                    gpu.dispatch(
                        Kernel::AttnEagerBwdDs,
                        &[v, attn, dout, ds],
                        &ap,
                        groups_1d(rows, 64),
                    )?;
                    gpu.dispatch(
                        Kernel::AttnEagerBwdDq,
                        &[k, ds, dq],
                        &ap,
                        groups_1d(rows * c.head_dim(), 64),
                    )?;
                    gpu.dispatch(
                        Kernel::AttnEagerBwdDkv,
                        &[q, attn, dout, ds, dk, dv],
                        &ap,
                        groups_1d(c.batch * c.kv_heads * c.seq * c.head_dim(), 64),
                    )?;
                    gpu.free(ds);
                }
                MicroAttention::Tiled => {
                    let o = need(s.o, "o")?;
                    let delta = gpu.alloc_f32(rows, "attention delta (tiled)")?;
                    gpu.dispatch(
                        Kernel::AttnTiledBwdDq,
                        &[q, k, v, o, attn, dout, delta, dq],
                        &ap,
                        groups_1d(rows, 64),
                    )?;
                    gpu.dispatch(
                        Kernel::AttnTiledBwdDkv,
                        &[q, k, v, attn, delta, dout, dk, dv],
                        &ap,
                        groups_1d(c.batch * c.kv_heads * c.seq, 64),
                    )?;
                    gpu.free(delta);
                }
            }
            gpu.count_matmul(rows, c.seq, 4 * c.head_dim());
            gpu.free(dout);
            gpu.free_opt(&mut s.o);
            gpu.free_opt(&mut s.attn);
            gpu.free_opt(&mut s.q);
            gpu.free_opt(&mut s.k);
            gpu.free_opt(&mut s.v);
            self.rope(&dq, c.heads, -1.0)?;
            self.rope(&dk, c.kv_heads, -1.0)?;
            let dxn1 = gpu.alloc_f32(n * h, "normed hidden gradient")?;
            self.proj_bwd(
                &layer.proj[0],
                s.xn1.as_ref(),
                s.u[0].as_ref(),
                &dq,
                &dxn1,
                true,
                &mut grads,
            )?;
            self.proj_bwd(
                &layer.proj[1],
                s.xn1.as_ref(),
                s.u[1].as_ref(),
                &dk,
                &dxn1,
                false,
                &mut grads,
            )?;
            self.proj_bwd(
                &layer.proj[2],
                s.xn1.as_ref(),
                s.u[2].as_ref(),
                &dv,
                &dxn1,
                false,
                &mut grads,
            )?;
            for b in [dq, dk, dv] {
                gpu.free(b);
            }
            for i in 0..3 {
                gpu.free_opt(&mut s.u[i]);
            }
            gpu.free_opt(&mut s.xn1);
            let (x, rstd1) = (need(s.x, "x")?, need(s.rstd1, "rstd1")?);
            self.rmsnorm_bwd(&dxn1, &x, &layer.attn_norm, &rstd1, &dh, true)?;
            gpu.free(dxn1);
            gpu.free_opt(&mut s.x);
            gpu.free_opt(&mut s.rstd1);
        }
        gpu.free(dh);
        Ok(grads)
    }

    fn optimizer(&self, grads: &[Option<Buf>]) -> Result<(), GpuError> {
        let (gpu, hp) = (self.gpu, self.cfg.adamw);
        let step = self.res.step.get() + 1;
        self.res.step.set(step);
        let (step_size, bc2_sqrt) = adamw_coefficients(&hp, step);
        for (t, g) in self.res.trainable.iter().zip(grads) {
            let g = g
                .as_ref()
                .ok_or_else(|| GpuError::Js("internal: an adapter got no gradient".into()))?;
            let p = Adamw {
                n: t.len as u32,
                decay: 1.0 - hp.lr * hp.weight_decay,
                one_minus_beta1: 1.0 - hp.beta1,
                beta2: hp.beta2,
                one_minus_beta2: 1.0 - hp.beta2,
                eps: hp.eps,
                step_size,
                bc2_sqrt,
            };
            gpu.dispatch_once(
                Kernel::Adamw,
                &[t.param, *g, t.m, t.v],
                &p.words(),
                groups_1d(t.len, 256),
            )?;
        }
        Ok(())
    }
}

/// Data captured inside a step for checking against the CPU reference (it adds readback buffers to the step).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capture {
    /// Gradients of the trainable tensors, in [`MicroModel::trainable`] order.
    pub grads: Vec<Vec<f32>>,
    /// The trainable tensors after the update.
    pub params: Vec<Vec<f32>>,
}

/// Runs one step: forward, backward, optimizer, each in its own tracker phase and error scopes.
/// `progress` is told each phase as it starts. The caller reads the loss from [`Resident::loss`].
pub async fn run_step(
    ctx: &Ctx<'_>,
    capture: bool,
    progress: &dyn Fn(StepPhase, &web_sys::GpuDevice),
) -> Result<Option<Capture>, GpuError> {
    let gpu = ctx.gpu;
    gpu.set_phase(StepPhase::Forward)?;
    progress(StepPhase::Forward, &gpu.device);
    gpu.push_scopes();
    let fwd = ctx.forward();
    gpu.pop_scopes().await?;
    let (saved, head) = fwd?;

    gpu.set_phase(StepPhase::Backward)?;
    progress(StepPhase::Backward, &gpu.device);
    gpu.push_scopes();
    let bwd = ctx.backward(saved, head);
    gpu.pop_scopes().await?;
    let grads = bwd?;

    let mut cap = None;
    if capture {
        let mut c = Capture::default();
        for g in &grads {
            match g {
                Some(g) => c.grads.push(gpu.read_f32(*g).await?),
                None => c.grads.push(Vec::new()),
            }
        }
        cap = Some(c);
    }

    gpu.set_phase(StepPhase::Optimizer)?;
    progress(StepPhase::Optimizer, &gpu.device);
    gpu.push_scopes();
    let opt = ctx.optimizer(&grads);
    for g in grads.iter().flatten() {
        gpu.free(*g);
    }
    gpu.pop_scopes().await?;
    opt?;
    gpu.flush()?;
    if let Some(c) = cap.as_mut() {
        for t in &ctx.res.trainable {
            c.params.push(gpu.read_f32(t.param).await?);
        }
    }
    gpu.set_phase(StepPhase::Load)?;
    Ok(cap)
}
