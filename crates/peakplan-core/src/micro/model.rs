//! The micro Llama model and its CPU training step: the reference the WebGPU step is checked against.
//!
//! Token embedding, `layers` decoder layers of RMSNorm -> causal self-attention (GQA, RoPE) -> residual -> RMSNorm
//! -> SwiGLU MLP -> residual, a final RMSNorm, a frozen fp32 LM head and the mean cross-entropy. The seven
//! projections of each layer are frozen NF4 (double quantization) and dequantized on the fly; the selected ones carry
//! LoRA adapters `A` (`[r, in]`, kaiming-uniform with `a = sqrt(5)`, i.e. `U(-1/sqrt(in), 1/sqrt(in))`) and `B`
//! (`[out, r]`, zeros), `y = x W^T + (alpha / r) (x A^T) B^T`. Backward flows through the frozen 4-bit weights into the
//! adapters only; AdamW updates the adapters.

use super::nf4::Nf4Tensor;
use super::ops::{self, AttnShape, Mat};
use super::{MicroAttention, MicroConfig, MicroLoss, Rng, PROJECTIONS};

/// A LoRA adapter: `a` is `[r, in]`, `b` is `[out, r]`, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Lora {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
}

/// One frozen 4-bit projection and its adapter, if it has one.
#[derive(Clone, Debug, PartialEq)]
pub struct Proj {
    pub base: Nf4Tensor,
    pub lora: Option<Lora>,
}

/// One decoder layer; `proj` follows [`PROJECTIONS`] (q, k, v, o, gate, up, down).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub mlp_norm: Vec<f32>,
    pub proj: Vec<Proj>,
}

/// The model: frozen fp32 embedding, norms and LM head; frozen NF4 projections; trainable adapters.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroModel {
    pub cfg: MicroConfig,
    /// `[vocab, hidden]`.
    pub embed: Vec<f32>,
    pub layers: Vec<Layer>,
    pub final_norm: Vec<f32>,
    /// `[vocab, hidden]`.
    pub lm_head: Vec<f32>,
}

/// A training batch: `batch x seq` token ids and the label of each position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub ids: Vec<u32>,
    pub labels: Vec<u32>,
}

/// One trainable tensor: adapter `A` (`b == false`) or `B` of projection `proj` (index into [`PROJECTIONS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorId {
    pub layer: usize,
    pub proj: usize,
    pub b: bool,
}

/// AdamW state: the step count and both moments of every trainable tensor, in [`MicroModel::trainable`] order.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamState {
    pub step: u32,
    pub m: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
}

impl AdamState {
    pub fn new(model: &MicroModel) -> AdamState {
        let sizes: Vec<usize> = model
            .trainable()
            .iter()
            .map(|t| model.tensor(*t).len())
            .collect();
        AdamState {
            step: 0,
            m: sizes.iter().map(|n| vec![0.0; *n]).collect(),
            v: sizes.iter().map(|n| vec![0.0; *n]).collect(),
        }
    }
}

/// What a layer's forward keeps for backward (the same tensors the GPU step keeps).
struct Saved {
    x: Vec<f32>,
    rstd1: Vec<f32>,
    xn1: Vec<f32>,
    u: Vec<Option<Vec<f32>>>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    /// Eager: probabilities `[b, heads, s, s]`; tiled: log-sum-exp `[b, heads, s]`.
    attn: Vec<f32>,
    h_mid: Vec<f32>,
    rstd2: Vec<f32>,
    xn2: Vec<f32>,
    g: Vec<f32>,
    up: Vec<f32>,
    m: Vec<f32>,
}

impl MicroModel {
    /// Builds the model from the configuration's seed: embedding `U(-1, 1)`, base projections and LM head
    /// `U(-1/sqrt(in), 1/sqrt(in))` (then quantized), norms 1, adapters as PEFT initializes them.
    pub fn new(cfg: &MicroConfig) -> Result<MicroModel, String> {
        cfg.validate()?;
        let mut rng = Rng::new(cfg.seed);
        let (h, v) = (cfg.hidden, cfg.vocab);
        let embed = rng.fill(v * h, 1.0);
        let mut layers = Vec::with_capacity(cfg.layers);
        for _ in 0..cfg.layers {
            let mut proj = Vec::with_capacity(7);
            for t in PROJECTIONS {
                let (fin, fout) = cfg.proj_shape(t);
                let bound = 1.0 / (fin as f32).sqrt();
                let w = rng.fill(fout * fin, bound);
                let base = Nf4Tensor::quantize(fout, fin, &w);
                let lora = cfg.adapted(t).then(|| Lora {
                    a: rng.fill(cfg.rank * fin, bound),
                    b: vec![0.0; fout * cfg.rank],
                });
                proj.push(Proj { base, lora });
            }
            layers.push(Layer {
                attn_norm: vec![1.0; h],
                mlp_norm: vec![1.0; h],
                proj,
            });
        }
        let lm_head = rng.fill(v * h, 1.0 / (h as f32).sqrt());
        Ok(MicroModel {
            cfg: cfg.clone(),
            embed,
            layers,
            final_norm: vec![1.0; h],
            lm_head,
        })
    }

    /// The fixed synthetic batch of the configuration: uniform token ids and labels.
    pub fn batch(&self) -> Batch {
        let mut rng = Rng::new(self.cfg.seed ^ 0xba7c_4000);
        let n = self.cfg.tokens();
        let v = self.cfg.vocab as u32;
        Batch {
            ids: (0..n).map(|_| rng.below(v)).collect(),
            labels: (0..n).map(|_| rng.below(v)).collect(),
        }
    }

    /// Trainable tensors, in the order of gradients and optimizer states: by layer, by projection, `A` then `B`.
    pub fn trainable(&self) -> Vec<TensorId> {
        let mut out = Vec::new();
        for (l, layer) in self.layers.iter().enumerate() {
            for (p, pr) in layer.proj.iter().enumerate() {
                if pr.lora.is_some() {
                    out.push(TensorId {
                        layer: l,
                        proj: p,
                        b: false,
                    });
                    out.push(TensorId {
                        layer: l,
                        proj: p,
                        b: true,
                    });
                }
            }
        }
        out
    }

    /// A trainable tensor's values (empty for a projection without an adapter).
    pub fn tensor(&self, id: TensorId) -> &[f32] {
        match self.layers[id.layer].proj[id.proj].lora.as_ref() {
            Some(l) if id.b => &l.b,
            Some(l) => &l.a,
            None => &[],
        }
    }

    pub fn tensor_mut(&mut self, id: TensorId) -> &mut [f32] {
        match self.layers[id.layer].proj[id.proj].lora.as_mut() {
            Some(l) if id.b => &mut l.b,
            Some(l) => &mut l.a,
            None => &mut [],
        }
    }

    fn attn_shape(&self) -> AttnShape {
        let c = &self.cfg;
        AttnShape {
            batch: c.batch,
            seq: c.seq,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim(),
        }
    }

    /// `y = x W^T + s (x A^T) B^T`; returns `y` and the adapter's `u = x A^T`.
    fn proj_fwd(&self, p: &Proj, x: &[f32], n: usize) -> (Vec<f32>, Option<Vec<f32>>) {
        let (fin, fout, r) = (p.base.cols, p.base.rows, self.cfg.rank);
        let mut y = vec![0f32; n * fout];
        ops::nf4_matmul(n, x, &p.base, &mut y, 1.0, 0.0);
        let u = p.lora.as_ref().map(|l| {
            let mut u = vec![0f32; n * r];
            ops::matmul(
                (n, r, fin),
                x,
                Mat::rows(0, fin),
                &l.a,
                Mat::transposed(0, fin),
                &mut u,
                0,
                1.0,
                0.0,
            );
            ops::matmul(
                (n, fout, r),
                &u,
                Mat::rows(0, r),
                &l.b,
                Mat::transposed(0, r),
                &mut y,
                0,
                self.cfg.scaling(),
                1.0,
            );
            u
        });
        (y, u)
    }

    /// Backward of one projection: adapter gradients into `grads` and `dx (+)= dy W + s (dy B) A`.
    #[allow(clippy::too_many_arguments)]
    fn proj_bwd(
        &self,
        p: &Proj,
        x: &[f32],
        u: Option<&Vec<f32>>,
        dy: &[f32],
        n: usize,
        dx: &mut [f32],
        first: bool,
    ) -> Option<(Vec<f32>, Vec<f32>)> {
        let (fin, fout, r, s) = (p.base.cols, p.base.rows, self.cfg.rank, self.cfg.scaling());
        ops::nf4_matmul_t(n, dy, &p.base, dx, 1.0, if first { 0.0 } else { 1.0 });
        let (Some(l), Some(u)) = (p.lora.as_ref(), u) else {
            return None;
        };
        {
            let mut gb = vec![0f32; fout * r];
            ops::matmul(
                (fout, r, n),
                dy,
                Mat::transposed(0, fout),
                u,
                Mat::rows(0, r),
                &mut gb,
                0,
                s,
                0.0,
            );
            let mut gu = vec![0f32; n * r];
            ops::matmul(
                (n, r, fout),
                dy,
                Mat::rows(0, fout),
                &l.b,
                Mat::rows(0, r),
                &mut gu,
                0,
                s,
                0.0,
            );
            let mut ga = vec![0f32; r * fin];
            ops::matmul(
                (r, fin, n),
                &gu,
                Mat::transposed(0, r),
                x,
                Mat::rows(0, fin),
                &mut ga,
                0,
                1.0,
                0.0,
            );
            ops::matmul(
                (n, fin, r),
                &gu,
                Mat::rows(0, r),
                &l.a,
                Mat::rows(0, fin),
                dx,
                0,
                1.0,
                1.0,
            );
            Some((ga, gb))
        }
    }

    /// The mean cross-entropy of the batch.
    pub fn loss(&self, batch: &Batch) -> f32 {
        self.run(batch, false).0
    }

    /// The loss and the gradient of every trainable tensor, in [`MicroModel::trainable`] order.
    pub fn loss_and_grads(&self, batch: &Batch) -> (f32, Vec<Vec<f32>>) {
        self.run(batch, true)
    }

    /// One training step: loss and gradients, then AdamW. Returns the loss before the update.
    pub fn step(&mut self, batch: &Batch, state: &mut AdamState) -> f32 {
        let (loss, grads) = self.loss_and_grads(batch);
        state.step += 1;
        let hp = self.cfg.adamw;
        for (i, id) in self.trainable().into_iter().enumerate() {
            ops::adamw(
                &hp,
                state.step,
                self.tensor_mut(id),
                &grads[i],
                &mut state.m[i],
                &mut state.v[i],
            );
        }
        loss
    }

    fn lm_logits(&self, xn: &[f32], rows: usize, row0: usize) -> Vec<f32> {
        let (h, v) = (self.cfg.hidden, self.cfg.vocab);
        let mut logits = vec![0f32; rows * v];
        ops::matmul(
            (rows, v, h),
            xn,
            Mat::rows(row0 * h, h),
            &self.lm_head,
            Mat::transposed(0, h),
            &mut logits,
            0,
            1.0,
            0.0,
        );
        logits
    }

    fn run(&self, batch: &Batch, backward: bool) -> (f32, Vec<Vec<f32>>) {
        let c = &self.cfg;
        let rope = ops::rope_table(c.seq, c.head_dim(), c.rope_theta);
        let fwd = self.forward(batch, &rope);
        if !backward {
            return (fwd.loss, Vec::new());
        }
        let loss = fwd.loss;
        (loss, self.backward(batch, &rope, fwd))
    }

    /// Embedding, every layer, the final norm and the loss, keeping what backward needs.
    fn forward(&self, batch: &Batch, rope: &Rope) -> Forward {
        let c = &self.cfg;
        let (n, h, eps) = (c.tokens(), c.hidden, c.norm_eps);
        let mut x = vec![0f32; n * h];
        ops::embed(&batch.ids, &self.embed, h, &mut x);
        let mut saved = Vec::with_capacity(c.layers);
        for layer in &self.layers {
            let (next, sv) = self.layer_fwd(layer, x, rope);
            saved.push(sv);
            x = next;
        }
        let mut rstd_f = vec![0f32; n];
        let mut xn_f = vec![0f32; n * h];
        ops::rmsnorm_fwd(h, &x, &self.final_norm, eps, &mut xn_f, &mut rstd_f);
        let chunk = c.loss_chunk();
        let mut lse = vec![0f32; n];
        let mut rowloss = vec![0f32; n];
        let mut whole_logits = Vec::new();
        for row0 in (0..n).step_by(chunk) {
            let rows = chunk.min(n - row0);
            let logits = self.lm_logits(&xn_f, rows, row0);
            ops::ce_fwd(
                c.vocab,
                &logits,
                &batch.labels,
                row0,
                &mut lse,
                &mut rowloss,
            );
            if c.loss == MicroLoss::Whole {
                whole_logits = logits;
            }
        }
        Forward {
            loss: ops::loss_mean(&rowloss),
            x,
            saved,
            rstd_f,
            xn_f,
            lse,
            whole_logits,
        }
    }

    /// One decoder layer's forward from its input `x`: the layer's output, and what its backward needs.
    fn layer_fwd(&self, layer: &Layer, x: Vec<f32>, (cos, sin): &Rope) -> (Vec<f32>, Saved) {
        let c = &self.cfg;
        let (n, h, eps) = (c.tokens(), c.hidden, c.norm_eps);
        let (qd, inter, d) = (c.q_dim(), c.intermediate, c.head_dim());
        let sh = self.attn_shape();
        let mut rstd1 = vec![0f32; n];
        let mut xn1 = vec![0f32; n * h];
        ops::rmsnorm_fwd(h, &x, &layer.attn_norm, eps, &mut xn1, &mut rstd1);
        let mut u: Vec<Option<Vec<f32>>> = vec![None; 7];
        let (mut q, uq) = self.proj_fwd(&layer.proj[0], &xn1, n);
        let (mut k, uk) = self.proj_fwd(&layer.proj[1], &xn1, n);
        let (vv, uv) = self.proj_fwd(&layer.proj[2], &xn1, n);
        (u[0], u[1], u[2]) = (uq, uk, uv);
        ops::rope(c.seq, c.heads, d, cos, sin, &mut q, 1.0);
        ops::rope(c.seq, c.kv_heads, d, cos, sin, &mut k, 1.0);
        let mut o = vec![0f32; n * qd];
        let attn = match c.attention {
            MicroAttention::Eager => {
                let mut p = vec![0f32; c.batch * c.heads * c.seq * c.seq];
                ops::attn_eager_fwd(sh, &q, &k, &vv, &mut p, &mut o);
                p
            }
            MicroAttention::Tiled => {
                let mut lse = vec![0f32; c.batch * c.heads * c.seq];
                ops::attn_tiled_fwd(sh, &q, &k, &vv, &mut o, &mut lse);
                lse
            }
        };
        let (mut h_mid, uo) = self.proj_fwd(&layer.proj[3], &o, n);
        u[3] = uo;
        for (a, b) in h_mid.iter_mut().zip(&x) {
            *a += b;
        }
        let mut rstd2 = vec![0f32; n];
        let mut xn2 = vec![0f32; n * h];
        ops::rmsnorm_fwd(h, &h_mid, &layer.mlp_norm, eps, &mut xn2, &mut rstd2);
        let (g, ug) = self.proj_fwd(&layer.proj[4], &xn2, n);
        let (up, uu) = self.proj_fwd(&layer.proj[5], &xn2, n);
        (u[4], u[5]) = (ug, uu);
        let mut m = vec![0f32; n * inter];
        ops::swiglu_fwd(&g, &up, &mut m);
        let (mut next, ud) = self.proj_fwd(&layer.proj[6], &m, n);
        u[6] = ud;
        for (a, b) in next.iter_mut().zip(&h_mid) {
            *a += b;
        }
        let sv = Saved {
            x,
            rstd1,
            xn1,
            u,
            q,
            k,
            v: vv,
            o,
            attn,
            h_mid,
            rstd2,
            xn2,
            g,
            up,
            m,
        };
        (next, sv)
    }

    /// The loss's backward through the LM head and the final norm, then every layer's, last first: the gradient
    /// of every trainable tensor, in [`MicroModel::trainable`] order.
    fn backward(&self, batch: &Batch, rope: &Rope, fwd: Forward) -> Vec<Vec<f32>> {
        let c = &self.cfg;
        let (n, h) = (c.tokens(), c.hidden);
        let chunk = c.loss_chunk();
        let mut whole_logits = fwd.whole_logits;
        let ids = self.trainable();
        let mut grads = Grads {
            grads: vec![Vec::new(); ids.len()],
            ids,
        };
        let scale = 1.0 / n as f32;
        let mut dxn_f = vec![0f32; n * h];
        for row0 in (0..n).step_by(chunk) {
            let rows = chunk.min(n - row0);
            let logits = if c.loss == MicroLoss::Whole {
                std::mem::take(&mut whole_logits)
            } else {
                self.lm_logits(&fwd.xn_f, rows, row0)
            };
            let mut dl = vec![0f32; rows * c.vocab];
            ops::ce_bwd(
                c.vocab,
                &logits,
                &batch.labels,
                &fwd.lse,
                row0,
                scale,
                &mut dl,
            );
            ops::matmul(
                (rows, h, c.vocab),
                &dl,
                Mat::rows(0, c.vocab),
                &self.lm_head,
                Mat::rows(0, h),
                &mut dxn_f,
                row0 * h,
                1.0,
                0.0,
            );
        }
        let mut dh = vec![0f32; n * h];
        ops::rmsnorm_bwd(
            h,
            &dxn_f,
            &fwd.x,
            &self.final_norm,
            &fwd.rstd_f,
            &mut dh,
            false,
        );
        for (l, (layer, sv)) in self.layers.iter().zip(fwd.saved.iter()).enumerate().rev() {
            self.layer_bwd(l, layer, sv, rope, &mut dh, &mut grads);
        }
        grads.grads
    }

    /// One decoder layer's backward: `dh` goes in as the gradient of the layer's output and comes out as that of
    /// its input; the adapters' gradients go into `grads`.
    fn layer_bwd(
        &self,
        l: usize,
        layer: &Layer,
        sv: &Saved,
        (cos, sin): &Rope,
        dh: &mut [f32],
        grads: &mut Grads,
    ) {
        let c = &self.cfg;
        let (n, h, d) = (c.tokens(), c.hidden, c.head_dim());
        let (qd, kvd, inter) = (c.q_dim(), c.kv_dim(), c.intermediate);
        let sh = self.attn_shape();
        let mut proj = |p: usize, x: &[f32], dy: &[f32], dx: &mut [f32], first: bool| {
            let g = self.proj_bwd(&layer.proj[p], x, sv.u[p].as_ref(), dy, n, dx, first);
            grads.put(l, p, g);
        };
        // MLP
        let mut dm = vec![0f32; n * inter];
        proj(6, &sv.m, dh, &mut dm, true);
        let mut dg = vec![0f32; n * inter];
        let mut du = vec![0f32; n * inter];
        ops::swiglu_bwd(&dm, &sv.g, &sv.up, &mut dg, &mut du);
        let mut dxn2 = vec![0f32; n * h];
        proj(4, &sv.xn2, &dg, &mut dxn2, true);
        proj(5, &sv.xn2, &du, &mut dxn2, false);
        ops::rmsnorm_bwd(h, &dxn2, &sv.h_mid, &layer.mlp_norm, &sv.rstd2, dh, true);
        // attention
        let mut dout = vec![0f32; n * qd];
        proj(3, &sv.o, dh, &mut dout, true);
        let mut dq = vec![0f32; n * qd];
        let mut dk = vec![0f32; n * kvd];
        let mut dv = vec![0f32; n * kvd];
        match c.attention {
            MicroAttention::Eager => {
                let mut ds = vec![0f32; sv.attn.len()];
                ops::attn_eager_bwd_ds(sh, &sv.v, &sv.attn, &dout, &mut ds);
                ops::attn_eager_bwd_dq(sh, &sv.k, &ds, &mut dq);
                ops::attn_eager_bwd_dkv(sh, &sv.q, &sv.attn, &dout, &ds, &mut dk, &mut dv);
            }
            MicroAttention::Tiled => {
                let mut delta = vec![0f32; sv.attn.len()];
                ops::attn_tiled_bwd_dq(
                    sh, &sv.q, &sv.k, &sv.v, &sv.o, &sv.attn, &dout, &mut delta, &mut dq,
                );
                ops::attn_tiled_bwd_dkv(
                    sh, &sv.q, &sv.k, &sv.v, &sv.attn, &delta, &dout, &mut dk, &mut dv,
                );
            }
        }
        ops::rope(c.seq, c.heads, d, cos, sin, &mut dq, -1.0);
        ops::rope(c.seq, c.kv_heads, d, cos, sin, &mut dk, -1.0);
        let mut dxn1 = vec![0f32; n * h];
        proj(0, &sv.xn1, &dq, &mut dxn1, true);
        proj(1, &sv.xn1, &dk, &mut dxn1, false);
        proj(2, &sv.xn1, &dv, &mut dxn1, false);
        ops::rmsnorm_bwd(h, &dxn1, &sv.x, &layer.attn_norm, &sv.rstd1, dh, true);
    }
}

/// The RoPE table of the configuration's sequence: `(cos, sin)`.
type Rope = (Vec<f32>, Vec<f32>);

/// What the forward leaves for the loss and for backward.
struct Forward {
    loss: f32,
    /// The last layer's output: the final norm's input.
    x: Vec<f32>,
    saved: Vec<Saved>,
    rstd_f: Vec<f32>,
    xn_f: Vec<f32>,
    lse: Vec<f32>,
    /// The whole batch's logits when the loss is not chunked (backward takes them back), else empty.
    whole_logits: Vec<f32>,
}

/// The gradients of the trainable tensors, in [`MicroModel::trainable`] order.
struct Grads {
    ids: Vec<TensorId>,
    grads: Vec<Vec<f32>>,
}

impl Grads {
    /// Stores the `(A, B)` gradients of projection `proj` of layer `layer`, where they are trainable.
    fn put(&mut self, layer: usize, proj: usize, g: Option<(Vec<f32>, Vec<f32>)>) {
        if let Some((ga, gb)) = g {
            for (b, v) in [(false, ga), (true, gb)] {
                if let Some(i) = self
                    .ids
                    .iter()
                    .position(|t| *t == TensorId { layer, proj, b })
                {
                    self.grads[i] = v;
                }
            }
        }
    }
}
