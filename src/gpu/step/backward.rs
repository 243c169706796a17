//! The step's backward, in reverse: the loss and LM head, then each layer's MLP and attention, each saved tensor
//! released as soon as its last reader has been encoded (see the schedule in [`super`]).

use super::{groups_1d, need, Head, LayerBufs, Saved, StepEncoder};
use crate::gpu::device::{Buf, GpuError};
use crate::gpu::kernels::Kernel;
use crate::gpu::params::Elementwise;
use peakplan_core::micro::ops::Mat;
use peakplan_core::micro::MicroAttention;

impl StepEncoder<'_> {
    /// Returns the gradient of every trainable tensor, in [`super::Resident::trainable`] order.
    pub(super) fn backward(
        &self,
        saved: Vec<Saved>,
        head: Head,
    ) -> Result<Vec<Option<Buf>>, GpuError> {
        let mut grads: Vec<Option<Buf>> = vec![None; self.res.trainable.len()];
        let dh = self.loss_bwd(head)?;
        for (layer, mut s) in self.res.layers.iter().zip(saved).rev() {
            self.mlp_bwd(layer, &mut s, &dh, &mut grads)?;
            self.attention_bwd(layer, &mut s, &dh, &mut grads)?;
        }
        self.gpu.free(dh);
        Ok(grads)
    }

    /// The loss and LM head's backward down to `dh`, the residual stream's gradient (kept for the whole backward).
    fn loss_bwd(&self, head: Head) -> Result<Buf, GpuError> {
        let (gpu, c, res) = (self.gpu, self.cfg, self.res);
        let (n, h) = (c.tokens(), c.hidden);
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
        Ok(dh)
    }

    /// A layer's MLP backward: adds its input gradient to `dh`.
    fn mlp_bwd(
        &self,
        layer: &LayerBufs,
        s: &mut Saved,
        dh: &Buf,
        grads: &mut [Option<Buf>],
    ) -> Result<(), GpuError> {
        let (gpu, c) = (self.gpu, self.cfg);
        let (n, h, inter) = (c.tokens(), c.hidden, c.intermediate);
        let dm = gpu.alloc_f32(n * inter, "SwiGLU output gradient")?;
        self.proj_bwd(
            &layer.proj[6],
            s.m.as_ref(),
            s.u[6].as_ref(),
            dh,
            &dm,
            true,
            grads,
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
            grads,
        )?;
        self.proj_bwd(
            &layer.proj[5],
            s.xn2.as_ref(),
            s.u[5].as_ref(),
            &du,
            &dxn2,
            false,
            grads,
        )?;
        gpu.free(dg);
        gpu.free(du);
        gpu.free_opt(&mut s.u[4]);
        gpu.free_opt(&mut s.u[5]);
        gpu.free_opt(&mut s.xn2);
        let (h_mid, rstd2) = (need(s.h_mid, "h_mid")?, need(s.rstd2, "rstd2")?);
        self.rmsnorm_bwd(&dxn2, &h_mid, &layer.mlp_norm, &rstd2, dh, true)?;
        gpu.free(dxn2);
        gpu.free_opt(&mut s.h_mid);
        gpu.free_opt(&mut s.rstd2);
        Ok(())
    }

    /// A layer's attention backward: adds its input gradient to `dh`.
    fn attention_bwd(
        &self,
        layer: &LayerBufs,
        s: &mut Saved,
        dh: &Buf,
        grads: &mut [Option<Buf>],
    ) -> Result<(), GpuError> {
        let (gpu, c) = (self.gpu, self.cfg);
        let (n, h, qd, kvd) = (c.tokens(), c.hidden, c.q_dim(), c.kv_dim());
        let dout = gpu.alloc_f32(n * qd, "attention output gradient")?;
        self.proj_bwd(
            &layer.proj[3],
            s.o.as_ref(),
            s.u[3].as_ref(),
            dh,
            &dout,
            true,
            grads,
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
            grads,
        )?;
        self.proj_bwd(
            &layer.proj[1],
            s.xn1.as_ref(),
            s.u[1].as_ref(),
            &dk,
            &dxn1,
            false,
            grads,
        )?;
        self.proj_bwd(
            &layer.proj[2],
            s.xn1.as_ref(),
            s.u[2].as_ref(),
            &dv,
            &dxn1,
            false,
            grads,
        )?;
        for b in [dq, dk, dv] {
            gpu.free(b);
        }
        for i in 0..3 {
            gpu.free_opt(&mut s.u[i]);
        }
        gpu.free_opt(&mut s.xn1);
        let (x, rstd1) = (need(s.x, "x")?, need(s.rstd1, "rstd1")?);
        self.rmsnorm_bwd(&dxn1, &x, &layer.attn_norm, &rstd1, dh, true)?;
        gpu.free(dxn1);
        gpu.free_opt(&mut s.x);
        gpu.free_opt(&mut s.rstd1);
        Ok(())
    }
}
