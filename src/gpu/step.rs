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
    Adamw, Attn, CrossEntropy, Elementwise, Matmul, Nf4Dequant, Nf4Matmul, RmsNorm, Rope,
};
use peakplan_core::micro::nf4::Nf4Layout;
use peakplan_core::micro::ops::{adamw_coefficients, rope_table, Mat};
use peakplan_core::micro::{Batch, MicroConfig, MicroModel, TensorId};
use std::cell::Cell;

mod backward;
mod forward;

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
pub struct StepEncoder<'a> {
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

impl StepEncoder<'_> {
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
    encoder: &StepEncoder<'_>,
    capture: bool,
    progress: &dyn Fn(StepPhase, &web_sys::GpuDevice),
) -> Result<Option<Capture>, GpuError> {
    let gpu = encoder.gpu;
    gpu.set_phase(StepPhase::Forward)?;
    progress(StepPhase::Forward, &gpu.device);
    gpu.push_scopes();
    let fwd = encoder.forward();
    gpu.pop_scopes().await?;
    let (saved, head) = fwd?;

    gpu.set_phase(StepPhase::Backward)?;
    progress(StepPhase::Backward, &gpu.device);
    gpu.push_scopes();
    let bwd = encoder.backward(saved, head);
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
    let opt = encoder.optimizer(&grads);
    for g in grads.iter().flatten() {
        gpu.free(*g);
    }
    gpu.pop_scopes().await?;
    opt?;
    gpu.flush()?;
    if let Some(c) = cap.as_mut() {
        for t in &encoder.res.trainable {
            c.params.push(gpu.read_f32(t.param).await?);
        }
    }
    gpu.set_phase(StepPhase::Load)?;
    Ok(cap)
}
