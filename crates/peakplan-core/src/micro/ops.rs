//! Reference operations of the micro step, one function per WebGPU kernel (`src/gpu/kernels/*.wgsl`), computing the
//! same values with the same order of accumulation per output element, so that the GPU matches to rounding.
//!
//! Layouts: activations are row-major `[tokens, width]` with token `t = b * seq + i`; attention probabilities are
//! `[batch, heads, seq, seq]` and log-sum-exps `[batch, heads, seq]`; weights follow `nn.Linear` (`[out, in]`).

use super::nf4::{dynamic_map, Nf4Tensor, BLOCK, NF4};

/// A strided matrix operand: element `(r, c)` sits at `off + r * rs + c * cs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mat {
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl Mat {
    /// Row-major `[rows, cols]` from `off`.
    pub fn rows(off: usize, cols: usize) -> Mat {
        Mat {
            off,
            rs: cols,
            cs: 1,
        }
    }
    /// The transpose of row-major `[rows, cols]` from `off`: element `(r, c)` is stored at `(c, r)`.
    pub fn transposed(off: usize, cols: usize) -> Mat {
        Mat {
            off,
            rs: 1,
            cs: cols,
        }
    }
    fn at(&self, r: usize, c: usize) -> usize {
        self.off + r * self.rs + c * self.cs
    }
}

/// `C[m, n] = alpha * A[m, k] . B[k, n] + beta * C` with strided operands and a dense row-major `C` at `c_off`
/// (`beta == 0` does not read `C`). Kernel: `matmul.wgsl`.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    am: Mat,
    b: &[f32],
    bm: Mat,
    c: &mut [f32],
    c_off: usize,
    alpha: f32,
    beta: f32,
) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for kk in 0..k {
                acc += a[am.at(i, kk)] * b[bm.at(kk, j)];
            }
            let o = c_off + i * n + j;
            c[o] = if beta == 0.0 {
                alpha * acc
            } else {
                alpha * acc + beta * c[o]
            };
        }
    }
}

/// `y[m, out] = alpha * x[m, in] . W^T + beta * y` with `W` `[out, in]` dequantized on the fly.
/// Kernel: `nf4_matmul.wgsl` (fused: no dense copy of `W`).
pub fn nf4_matmul(m: usize, x: &[f32], w: &Nf4Tensor, y: &mut [f32], alpha: f32, beta: f32) {
    let dense = w.dequantize();
    matmul(
        (m, w.rows, w.cols),
        x,
        Mat::rows(0, w.cols),
        &dense,
        Mat::transposed(0, w.cols),
        y,
        0,
        alpha,
        beta,
    );
}

/// `dx[m, in] = alpha * dy[m, out] . W + beta * dx` with `W` `[out, in]` dequantized on the fly.
/// Kernel: `nf4_matmul_t.wgsl`.
pub fn nf4_matmul_t(m: usize, dy: &[f32], w: &Nf4Tensor, dx: &mut [f32], alpha: f32, beta: f32) {
    let dense = w.dequantize();
    matmul(
        (m, w.cols, w.rows),
        dy,
        Mat::rows(0, w.rows),
        &dense,
        Mat::rows(0, w.cols),
        dx,
        0,
        alpha,
        beta,
    );
}

/// The dense dequantization of `W` (kernel `nf4_dequant.wgsl`, the unfused path): one element at a time,
/// `NF4[code] * (DYN8[qabsmax] * absmax2 + offset)`.
pub fn nf4_dequant(w: &Nf4Tensor) -> Vec<f32> {
    let dyn8 = dynamic_map();
    (0..w.len())
        .map(|j| NF4[w.code(j) as usize] * w.block_absmax(&dyn8, j / BLOCK))
        .collect()
}

/// Embedding lookup: `out[t, :] = table[ids[t], :]`. Kernel: `embed.wgsl`.
pub fn embed(ids: &[u32], table: &[f32], h: usize, out: &mut [f32]) {
    for (t, id) in ids.iter().enumerate() {
        let s = *id as usize * h;
        out[t * h..(t + 1) * h].copy_from_slice(&table[s..s + h]);
    }
}

/// RMSNorm forward: `rstd = 1 / sqrt(mean(x^2) + eps)`, `y = (x * rstd) * w`. Kernel: `rmsnorm_fwd.wgsl`.
pub fn rmsnorm_fwd(h: usize, x: &[f32], w: &[f32], eps: f32, y: &mut [f32], rstd: &mut [f32]) {
    for (r, row) in x.chunks(h).enumerate() {
        let ss: f32 = row.iter().map(|v| v * v).sum();
        let rs = 1.0 / (ss / h as f32 + eps).sqrt();
        rstd[r] = rs;
        for j in 0..h {
            y[r * h + j] = row[j] * rs * w[j];
        }
    }
}

/// RMSNorm backward into the input: `dx (+)= rstd * w * dy - x * rstd^3 * sum(w * dy * x) / h`
/// (added to `dx` when `accumulate`, the residual stream's gradient). Kernel: `rmsnorm_bwd.wgsl`.
pub fn rmsnorm_bwd(
    h: usize,
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    rstd: &[f32],
    dx: &mut [f32],
    accumulate: bool,
) {
    for (r, rs) in rstd.iter().enumerate() {
        let row = r * h;
        let mut c = 0f32;
        for j in 0..h {
            c += w[j] * dy[row + j] * x[row + j];
        }
        c /= h as f32;
        let rs3 = rs * rs * rs;
        for j in 0..h {
            let g = rs * w[j] * dy[row + j] - x[row + j] * rs3 * c;
            dx[row + j] = if accumulate { dx[row + j] + g } else { g };
        }
    }
}

/// `(sin x, cos x)` for `|x| <= 1` by their Taylor series, in f64 (to rounding).
fn sin_cos_small(x: f64) -> (f64, f64) {
    let (mut s, mut c) = (0f64, 0f64);
    let (mut term_s, mut term_c) = (x, 1f64);
    for k in 0..12 {
        s += term_s;
        c += term_c;
        let (a, b) = ((2 * k + 2) as f64, (2 * k + 3) as f64);
        term_s *= -x * x / (a * b);
        term_c *= -x * x / ((2 * k + 1) as f64 * a);
    }
    (s, c)
}

/// The rotary table: `cos` and `sin` of `pos * theta^(-2j/d)` for `pos < seq`, `j < d/2` (`[seq, d/2]` each).
/// Each frequency's angles are stepped by rotation in f64 from the sine and cosine of one step (no trigonometric
/// library code in the page), then rounded to f32.
pub fn rope_table(seq: usize, d: usize, theta: f32) -> (Vec<f32>, Vec<f32>) {
    let half = d / 2;
    let mut cos = vec![0f32; seq * half];
    let mut sin = vec![0f32; seq * half];
    for j in 0..half {
        let inv = (theta as f64).powf(-2.0 * j as f64 / d as f64);
        let (s1, c1) = sin_cos_small(inv.min(1.0));
        let (mut s, mut c) = (0f64, 1f64);
        for pos in 0..seq {
            cos[pos * half + j] = c as f32;
            sin[pos * half + j] = s as f32;
            (s, c) = (s * c1 + c * s1, c * c1 - s * s1);
        }
    }
    (cos, sin)
}

/// Rotary embedding in place (Hugging Face `rotate_half` pairing `j` with `j + d/2`), forward with `sign = 1`,
/// backward (the transposed rotation) with `sign = -1`. `x` is `[tokens, heads * d]`. Kernel: `rope.wgsl`.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    seq: usize,
    heads: usize,
    d: usize,
    cos: &[f32],
    sin: &[f32],
    x: &mut [f32],
    sign: f32,
) {
    let half = d / 2;
    let width = heads * d;
    for (t, row) in x.chunks_mut(width).enumerate() {
        let pos = t % seq;
        for hh in 0..heads {
            for j in 0..half {
                let (c, s) = (cos[pos * half + j], sign * sin[pos * half + j]);
                let (i0, i1) = (hh * d + j, hh * d + j + half);
                let (a, b) = (row[i0], row[i1]);
                row[i0] = a * c - b * s;
                row[i1] = b * c + a * s;
            }
        }
    }
}

/// Shape of causal self-attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttnShape {
    /// `1 / sqrt(head_dim)`, computed once on the host for both CPU and GPU.
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
    fn q(&self, b: usize, h: usize, i: usize) -> usize {
        (b * self.seq + i) * self.heads * self.head_dim + h * self.head_dim
    }
    fn kv(&self, b: usize, h: usize, j: usize) -> usize {
        let g = self.heads / self.kv_heads;
        (b * self.seq + j) * self.kv_heads * self.head_dim + (h / g) * self.head_dim
    }
    fn row(&self, b: usize, h: usize, i: usize) -> usize {
        (b * self.heads + h) * self.seq + i
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

/// A value below every score, for the running max of the online softmax (WGSL has no infinity literal).
pub const NEG_BIG: f32 = -3.0e38;

/// Eager attention forward: scores, causal softmax kept in `p` (`[b, heads, s, s]`, zeros above the diagonal),
/// `o = p . v`. Kernel: `attn_eager_fwd.wgsl`.
pub fn attn_eager_fwd(
    sh: AttnShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: &mut [f32],
    o: &mut [f32],
) {
    let (s, d, scale) = (sh.seq, sh.head_dim, sh.scale());
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for i in 0..s {
                let qi = &q[sh.q(b, h, i)..sh.q(b, h, i) + d];
                let prow = sh.row(b, h, i) * s;
                let mut mx = NEG_BIG;
                for j in 0..=i {
                    let sc = dot(qi, &k[sh.kv(b, h, j)..sh.kv(b, h, j) + d]) * scale;
                    p[prow + j] = sc;
                    mx = mx.max(sc);
                }
                let mut sum = 0f32;
                for j in 0..=i {
                    let e = (p[prow + j] - mx).exp();
                    p[prow + j] = e;
                    sum += e;
                }
                for j in 0..s {
                    p[prow + j] = if j <= i { p[prow + j] / sum } else { 0.0 };
                }
                let oo = sh.q(b, h, i);
                for dd in 0..d {
                    let mut acc = 0f32;
                    for j in 0..=i {
                        acc += p[prow + j] * v[sh.kv(b, h, j) + dd];
                    }
                    o[oo + dd] = acc;
                }
            }
        }
    }
}

/// Eager attention backward, step 1: `dS = P * (dP - rowsum(dP * P))` with `dP = dO . V^T` (`[b, heads, s, s]`).
/// Kernel: `attn_eager_bwd_ds.wgsl`.
pub fn attn_eager_bwd_ds(sh: AttnShape, v: &[f32], p: &[f32], dout: &[f32], ds: &mut [f32]) {
    let (s, d) = (sh.seq, sh.head_dim);
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for i in 0..s {
                let doi = &dout[sh.q(b, h, i)..sh.q(b, h, i) + d];
                let prow = sh.row(b, h, i) * s;
                let mut r = 0f32;
                for j in 0..=i {
                    let dp = dot(doi, &v[sh.kv(b, h, j)..sh.kv(b, h, j) + d]);
                    ds[prow + j] = dp;
                    r += p[prow + j] * dp;
                }
                for j in 0..s {
                    ds[prow + j] = if j <= i {
                        p[prow + j] * (ds[prow + j] - r)
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// Eager attention backward, step 2: `dQ = scale * dS . K`. Kernel: `attn_eager_bwd_dq.wgsl`.
pub fn attn_eager_bwd_dq(sh: AttnShape, k: &[f32], ds: &[f32], dq: &mut [f32]) {
    let (s, d, scale) = (sh.seq, sh.head_dim, sh.scale());
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for i in 0..s {
                let prow = sh.row(b, h, i) * s;
                for dd in 0..d {
                    let mut acc = 0f32;
                    for j in 0..=i {
                        acc += ds[prow + j] * k[sh.kv(b, h, j) + dd];
                    }
                    dq[sh.q(b, h, i) + dd] = acc * scale;
                }
            }
        }
    }
}

/// Eager attention backward, step 3: `dK = scale * dS^T . Q`, `dV = P^T . dO`, summed over the query heads of each
/// key/value head. Kernel: `attn_eager_bwd_dkv.wgsl`.
#[allow(clippy::too_many_arguments)]
pub fn attn_eager_bwd_dkv(
    sh: AttnShape,
    q: &[f32],
    p: &[f32],
    dout: &[f32],
    ds: &[f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (s, d, scale) = (sh.seq, sh.head_dim, sh.scale());
    let g = sh.heads / sh.kv_heads;
    for b in 0..sh.batch {
        for kh in 0..sh.kv_heads {
            for j in 0..s {
                let kvo = sh.kv(b, kh * g, j);
                for dd in 0..d {
                    let (mut ak, mut av) = (0f32, 0f32);
                    for h in kh * g..(kh + 1) * g {
                        for i in j..s {
                            let pi = sh.row(b, h, i) * s + j;
                            ak += ds[pi] * q[sh.q(b, h, i) + dd];
                            av += p[pi] * dout[sh.q(b, h, i) + dd];
                        }
                    }
                    dk[kvo + dd] = ak * scale;
                    dv[kvo + dd] = av;
                }
            }
        }
    }
}

/// Tiled (online-softmax) attention forward: keeps only `o` and the log-sum-exp per row (`[b, heads, s]`).
/// Keys are visited in order with a running max, rescaling the partial sums. Kernel: `attn_tiled_fwd.wgsl`.
pub fn attn_tiled_fwd(
    sh: AttnShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
    lse: &mut [f32],
) {
    let (s, d, scale) = (sh.seq, sh.head_dim, sh.scale());
    let mut acc = vec![0f32; d];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for i in 0..s {
                let qi = &q[sh.q(b, h, i)..sh.q(b, h, i) + d];
                let (mut m, mut l) = (NEG_BIG, 0f32);
                acc.iter_mut().for_each(|a| *a = 0.0);
                for j in 0..=i {
                    let kv = sh.kv(b, h, j);
                    let sc = dot(qi, &k[kv..kv + d]) * scale;
                    let mn = m.max(sc);
                    let corr = (m - mn).exp();
                    let pj = (sc - mn).exp();
                    l = l * corr + pj;
                    for dd in 0..d {
                        acc[dd] = acc[dd] * corr + pj * v[kv + dd];
                    }
                    m = mn;
                }
                let oo = sh.q(b, h, i);
                for dd in 0..d {
                    o[oo + dd] = acc[dd] / l;
                }
                lse[sh.row(b, h, i)] = m + l.ln();
            }
        }
    }
}

/// Tiled attention backward, step 1: `D = rowsum(dO * O)` (kept in `delta`) and `dQ = scale * dS . K` with the
/// probabilities recomputed from the log-sum-exp. Kernel: `attn_tiled_bwd_dq.wgsl`.
#[allow(clippy::too_many_arguments)]
pub fn attn_tiled_bwd_dq(
    sh: AttnShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &[f32],
    lse: &[f32],
    dout: &[f32],
    delta: &mut [f32],
    dq: &mut [f32],
) {
    let (s, d, scale) = (sh.seq, sh.head_dim, sh.scale());
    let mut acc = vec![0f32; d];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for i in 0..s {
                let qo = sh.q(b, h, i);
                let (qi, doi) = (&q[qo..qo + d], &dout[qo..qo + d]);
                let dl = dot(doi, &o[qo..qo + d]);
                let r = sh.row(b, h, i);
                delta[r] = dl;
                acc.iter_mut().for_each(|a| *a = 0.0);
                for j in 0..=i {
                    let kv = sh.kv(b, h, j);
                    let pj = (dot(qi, &k[kv..kv + d]) * scale - lse[r]).exp();
                    let dsj = pj * (dot(doi, &v[kv..kv + d]) - dl);
                    for dd in 0..d {
                        acc[dd] += dsj * k[kv + dd];
                    }
                }
                for dd in 0..d {
                    dq[qo + dd] = acc[dd] * scale;
                }
            }
        }
    }
}

/// Tiled attention backward, step 2: `dK` and `dV` per key row, recomputing the probabilities; sums over the query
/// heads of each key/value head and over the queries at or after the key. Kernel: `attn_tiled_bwd_dkv.wgsl`.
#[allow(clippy::too_many_arguments)]
pub fn attn_tiled_bwd_dkv(
    sh: AttnShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lse: &[f32],
    delta: &[f32],
    dout: &[f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (s, d, scale) = (sh.seq, sh.head_dim, sh.scale());
    let g = sh.heads / sh.kv_heads;
    let (mut ak, mut av) = (vec![0f32; d], vec![0f32; d]);
    for b in 0..sh.batch {
        for kh in 0..sh.kv_heads {
            for j in 0..s {
                let kv = sh.kv(b, kh * g, j);
                let (kj, vj) = (&k[kv..kv + d], &v[kv..kv + d]);
                ak.iter_mut().for_each(|a| *a = 0.0);
                av.iter_mut().for_each(|a| *a = 0.0);
                for h in kh * g..(kh + 1) * g {
                    for i in j..s {
                        let qo = sh.q(b, h, i);
                        let r = sh.row(b, h, i);
                        let (qi, doi) = (&q[qo..qo + d], &dout[qo..qo + d]);
                        let pij = (dot(qi, kj) * scale - lse[r]).exp();
                        let dsij = pij * (dot(doi, vj) - delta[r]);
                        for dd in 0..d {
                            av[dd] += pij * doi[dd];
                            ak[dd] += dsij * qi[dd];
                        }
                    }
                }
                for dd in 0..d {
                    dk[kv + dd] = ak[dd] * scale;
                    dv[kv + dd] = av[dd];
                }
            }
        }
    }
}

/// SwiGLU forward: `m = silu(g) * u` with `silu(g) = g * sigmoid(g)`. Kernel: `swiglu_fwd.wgsl`.
pub fn swiglu_fwd(g: &[f32], u: &[f32], m: &mut [f32]) {
    for i in 0..m.len() {
        let sig = 1.0 / (1.0 + (-g[i]).exp());
        m[i] = g[i] * sig * u[i];
    }
}

/// SwiGLU backward: `du = dm * silu(g)`, `dg = dm * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))`.
/// Kernel: `swiglu_bwd.wgsl`.
pub fn swiglu_bwd(dm: &[f32], g: &[f32], u: &[f32], dg: &mut [f32], du: &mut [f32]) {
    for i in 0..dm.len() {
        let sig = 1.0 / (1.0 + (-g[i]).exp());
        du[i] = dm[i] * (g[i] * sig);
        dg[i] = dm[i] * u[i] * sig * (1.0 + g[i] * (1.0 - sig));
    }
}

/// Cross-entropy forward over `rows` rows of `logits` (`[rows, vocab]`): `lse = log(sum(exp(x)))` with the max
/// subtracted, `loss = lse - x[label]`; written at `out_off` of `lse` and `rowloss`. Kernel: `ce_fwd.wgsl`.
pub fn ce_fwd(
    vocab: usize,
    logits: &[f32],
    labels: &[u32],
    out_off: usize,
    lse: &mut [f32],
    rowloss: &mut [f32],
) {
    for (r, row) in logits.chunks(vocab).enumerate() {
        let mx = row.iter().fold(NEG_BIG, |m, x| m.max(*x));
        let sum: f32 = row.iter().map(|x| (x - mx).exp()).sum();
        let l = mx + sum.ln();
        lse[out_off + r] = l;
        rowloss[out_off + r] = l - row[labels[out_off + r] as usize];
    }
}

/// Cross-entropy backward: `dlogits = (softmax(x) - onehot(label)) * scale`, `softmax = exp(x - lse)`,
/// `scale = 1 / tokens` (the mean). Rows start at `row_off` of `labels` and `lse`. Kernel: `ce_bwd.wgsl`.
pub fn ce_bwd(
    vocab: usize,
    logits: &[f32],
    labels: &[u32],
    lse: &[f32],
    row_off: usize,
    scale: f32,
    dlogits: &mut [f32],
) {
    for (r, row) in logits.chunks(vocab).enumerate() {
        let label = labels[row_off + r] as usize;
        for (c, x) in row.iter().enumerate() {
            let p = (x - lse[row_off + r]).exp();
            let onehot = if c == label { 1.0 } else { 0.0 };
            dlogits[r * vocab + c] = (p - onehot) * scale;
        }
    }
}

/// The mean loss: the row losses summed in order, divided by their count. Kernel: `loss_sum.wgsl`.
pub fn loss_mean(rowloss: &[f32]) -> f32 {
    let mut s = 0f32;
    for l in rowloss {
        s += l;
    }
    s / rowloss.len().max(1) as f32
}

/// Step-dependent AdamW coefficients: `(lr / (1 - beta1^t), sqrt(1 - beta2^t))`, computed in f64 as torch does
/// with Python floats, then used in f32.
pub fn adamw_coefficients(hp: &super::AdamW, step: u32) -> (f32, f32) {
    let t = step as i32;
    let bc1 = 1.0 - (hp.beta1 as f64).powi(t);
    let bc2 = 1.0 - (hp.beta2 as f64).powi(t);
    ((hp.lr as f64 / bc1) as f32, bc2.sqrt() as f32)
}

/// One AdamW update in place, as `torch.optim.AdamW` (single-tensor path): decoupled decay
/// `p *= 1 - lr * wd`, `m = m + (1 - b1) * (g - m)`, `v = b2 * v + (1 - b2) * g * g`,
/// `p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)`. Kernel: `adamw.wgsl`.
pub fn adamw(hp: &super::AdamW, step: u32, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let (step_size, bc2_sqrt) = adamw_coefficients(hp, step);
    let decay = 1.0 - hp.lr * hp.weight_decay;
    for i in 0..p.len() {
        p[i] *= decay;
        m[i] += (1.0 - hp.beta1) * (g[i] - m[i]);
        v[i] = hp.beta2 * v[i] + (1.0 - hp.beta2) * (g[i] * g[i]);
        let denom = v[i].sqrt() / bc2_sqrt + hp.eps;
        p[i] -= step_size * (m[i] / denom);
    }
}
