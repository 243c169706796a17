//! The step's forward: the embedding, each layer's forward (keeping what its backward reads, see the schedule in
//! [`super`]), the final norm and the loss, whole or in chunks.

use super::{groups_1d, Head, LayerBufs, Saved, StepEncoder};
use crate::gpu::device::{Buf, GpuError};
use crate::gpu::kernels::Kernel;
use crate::gpu::params::{Elementwise, Embed};
use peakplan_core::micro::{MicroAttention, MicroLoss, PROJECTIONS};

impl StepEncoder<'_> {
    pub(super) fn forward(&self) -> Result<(Vec<Saved>, Head), GpuError> {
        let (gpu, c, res) = (self.gpu, self.cfg, self.res);
        let (n, h) = (c.tokens(), c.hidden);
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
        let mut saved = Vec::with_capacity(c.layers);
        for layer in &res.layers {
            let (s, next) = self.layer_fwd(layer, x)?;
            saved.push(s);
            x = next;
        }
        self.loss_fwd(x).map(|head| (saved, head))
    }

    /// One layer's forward from its input `x`: what it keeps for backward, and the next layer's input.
    fn layer_fwd(&self, layer: &LayerBufs, x: Buf) -> Result<(Saved, Buf), GpuError> {
        let (gpu, c) = (self.gpu, self.cfg);
        let (n, h, qd, inter) = (c.tokens(), c.hidden, c.q_dim(), c.intermediate);
        let adapted = |t: usize| c.adapted(PROJECTIONS[t]);
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
        s.x = Some(x);
        s.rstd1 = Some(rstd1);
        (s.q, s.k, s.v, s.attn) = (Some(q), Some(k), Some(v), Some(attn));
        (s.h_mid, s.rstd2, s.g, s.up) = (Some(h_mid), Some(rstd2), Some(g), Some(up));
        Ok((s, next))
    }

    /// The final norm and the loss over the last layer's output `x`.
    fn loss_fwd(&self, x: Buf) -> Result<Head, GpuError> {
        let (gpu, c, res) = (self.gpu, self.cfg, self.res);
        let (n, h) = (c.tokens(), c.hidden);
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
        Ok(Head {
            x_last: x,
            rstd_f,
            xn_f,
            lse,
            logits,
        })
    }
}
