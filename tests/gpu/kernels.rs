//! Every kernel against the CPU reference on fresh random inputs, candle's way: one test body over a table of kernel
//! cases. Each case dispatches its kernels on random inputs and returns what it compared; the body checks them all.

use crate::{check, fresh_rng, open, read};
use peakplan_core::micro::nf4::Nf4Tensor;
use peakplan_core::micro::ops::{self, AttnShape, Mat};
use peakplan_core::micro::{AdamW, Rng};
use peakplan_web::gpu::device::{Buf, Gpu};
use peakplan_web::gpu::kernels::Kernel;
use peakplan_web::gpu::params::*;
use peakplan_web::gpu::step::{blocks_4x4, blocks_4x8, blocks_8x4, groups_1d};
use std::future::Future;
use std::pin::Pin;
use wasm_bindgen_test::*;

/// One comparison: what, the GPU's values, the CPU reference's, and the tolerance relative to the reference's scale.
type Compared = (&'static str, Vec<f32>, Vec<f32>, f32);

/// The device, its NF4 code tables and the random source the cases share.
struct Bench {
    gpu: Gpu,
    codes: Buf,
    rng: Rng,
}

type Case = for<'a> fn(&'a mut Bench) -> Pin<Box<dyn Future<Output = Vec<Compared>> + 'a>>;

/// The kernel cases, in the order they run.
const CASES: [Case; 10] = [
    |b| Box::pin(nf4(b)),
    |b| Box::pin(matmul(b)),
    |b| Box::pin(embed(b)),
    |b| Box::pin(rmsnorm(b)),
    |b| Box::pin(rope(b)),
    |b| Box::pin(attention(b)),
    |b| Box::pin(swiglu(b)),
    |b| Box::pin(cross_entropy(b)),
    |b| Box::pin(adamw(b)),
    |b| Box::pin(add(b)),
];

#[wasm_bindgen_test]
async fn kernels_match_the_cpu_reference() {
    let gpu = open().await;
    let (rng, _) = fresh_rng();
    let codes = gpu.codes().unwrap();
    gpu.push_scopes();
    let mut bench = Bench { gpu, codes, rng };
    for case in CASES {
        for (what, gpu, cpu, tol) in case(&mut bench).await {
            check(what, &gpu, &cpu, tol);
        }
    }
    let gpu = bench.gpu;
    gpu.pop_scopes()
        .await
        .expect("no WebGPU validation or memory error");
    {
        let t = gpu.tracker.borrow();
        assert_eq!(
            t.live_sum(),
            t.live_bytes(),
            "the tracker's sum is its live bytes"
        );
        assert!(t.live_count() > 0);
    }
    gpu.destroy_all();
    assert_eq!(gpu.tracker.borrow().live_bytes(), 0);
}

/// NF4: dequantization, fused matmul forward and backward.
async fn nf4(b: &mut Bench) -> Vec<Compared> {
    let (gpu, codes, rng) = (&b.gpu, b.codes, &mut b.rng);
    let mut out = Vec::new();
    let (rows, cols, m) = (96, 128, 13);
    let w = Nf4Tensor::quantize(rows, cols, &rng.fill(rows * cols, 0.2));
    let l = w.layout();
    let q = gpu.upload_u32(&w.to_words(), "w").unwrap();
    let dense = gpu.alloc_f32(rows * cols, "dense").unwrap();
    let p = Nf4Dequant {
        n: (rows * cols) as u32,
        qabs_word: l.qabsmax_word as u32,
        abs2_word: l.absmax2_word as u32,
        off_word: l.offset_word as u32,
    };
    gpu.dispatch(
        Kernel::Nf4Dequant,
        &[q, dense, codes],
        &p.words(),
        groups_1d(rows * cols, 256),
    )
    .unwrap();
    out.push((
        "nf4_dequant",
        read(gpu, dense).await,
        ops::nf4_dequant(&w),
        1e-6,
    ));

    let x = rng.fill(m * cols, 1.0);
    let y0 = rng.fill(m * rows, 1.0);
    let (xb, yb) = (
        gpu.upload_f32(&x, "x").unwrap(),
        gpu.upload_f32(&y0, "y").unwrap(),
    );
    let np = Nf4Matmul {
        m: m as u32,
        rows: rows as u32,
        cols: cols as u32,
        qabs_word: l.qabsmax_word as u32,
        abs2_word: l.absmax2_word as u32,
        off_word: l.offset_word as u32,
        alpha: 1.0,
        beta: 1.0,
        ..Nf4Matmul::default()
    };
    gpu.dispatch(
        Kernel::Nf4Matmul,
        &[xb, q, yb, codes],
        &np.words(),
        blocks_8x4(m, rows),
    )
    .unwrap();
    let mut y = y0.clone();
    ops::nf4_matmul(m, &x, &w, &mut y, 1.0, 1.0);
    out.push(("nf4_matmul", read(gpu, yb).await, y, 1e-4));

    let dy = rng.fill(m * rows, 1.0);
    let (dyb, dxb) = (
        gpu.upload_f32(&dy, "dy").unwrap(),
        gpu.alloc_f32(m * cols, "dx").unwrap(),
    );
    let tp = Nf4Matmul { beta: 0.0, ..np };
    gpu.dispatch(
        Kernel::Nf4MatmulT,
        &[dyb, q, dxb, codes],
        &tp.words(),
        blocks_4x8(m, cols),
    )
    .unwrap();
    let mut dx = vec![0f32; m * cols];
    ops::nf4_matmul_t(m, &dy, &w, &mut dx, 1.0, 0.0);
    out.push(("nf4_matmul_t", read(gpu, dxb).await, dx, 1e-4));
    out
}

/// Strided dense matmul: NN, NT and TN with odd sizes, alpha and beta.
async fn matmul(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let mut out = Vec::new();
    let (mm, nn, kk) = (17, 23, 19);
    for (name, am, bm) in [
        ("matmul NN", Mat::rows(0, kk), Mat::rows(0, nn)),
        ("matmul NT", Mat::rows(0, kk), Mat::transposed(0, kk)),
        ("matmul TN", Mat::transposed(0, mm), Mat::rows(0, nn)),
    ] {
        let a = rng.fill(mm * kk, 1.0);
        let b = rng.fill(kk * nn, 1.0);
        let c0 = rng.fill(mm * nn + 5, 1.0);
        let (ab, bb, cb) = (
            gpu.upload_f32(&a, "a").unwrap(),
            gpu.upload_f32(&b, "b").unwrap(),
            gpu.upload_f32(&c0, "c").unwrap(),
        );
        let mp = Matmul {
            m: mm as u32,
            n: nn as u32,
            k: kk as u32,
            a_off: am.off as u32,
            a_rs: am.rs as u32,
            a_cs: am.cs as u32,
            b_off: bm.off as u32,
            b_rs: bm.rs as u32,
            b_cs: bm.cs as u32,
            c_off: 5,
            alpha: 0.7,
            beta: 0.3,
        };
        gpu.dispatch(
            Kernel::Matmul,
            &[ab, bb, cb],
            &mp.words(),
            blocks_4x4(mm, nn),
        )
        .unwrap();
        let mut c = c0.clone();
        ops::matmul((mm, nn, kk), &a, am, &b, bm, &mut c, 5, 0.7, 0.3);
        out.push((name, read(gpu, cb).await, c, 1e-4));
    }
    out
}

/// Embedding.
async fn embed(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let (vocab, h, n) = (50, 64, 11);
    let table = rng.fill(vocab * h, 1.0);
    let ids: Vec<u32> = (0..n).map(|_| rng.below(vocab as u32)).collect();
    let (tb, ib, ob) = (
        gpu.upload_f32(&table, "table").unwrap(),
        gpu.upload_u32(&ids, "ids").unwrap(),
        gpu.alloc_f32(n * h, "out").unwrap(),
    );
    let ep = Embed {
        tokens: n as u32,
        h: h as u32,
        vocab: vocab as u32,
        pad0: 0,
    };
    gpu.dispatch(
        Kernel::Embed,
        &[ib, tb, ob],
        &ep.words(),
        groups_1d(n * h, 256),
    )
    .unwrap();
    let mut out = vec![0f32; n * h];
    ops::embed(&ids, &table, h, &mut out);
    vec![("embed", read(gpu, ob).await, out, 1e-7)]
}

/// RMSNorm forward and backward (accumulating into the residual gradient).
async fn rmsnorm(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let mut out = Vec::new();
    let (rows_n, hh) = (9, 192);
    let xs = rng.fill(rows_n * hh, 2.0);
    let ws = rng.fill(hh, 1.5);
    let (xb, wb, yb, rb) = (
        gpu.upload_f32(&xs, "x").unwrap(),
        gpu.upload_f32(&ws, "w").unwrap(),
        gpu.alloc_f32(rows_n * hh, "y").unwrap(),
        gpu.alloc_f32(rows_n, "rstd").unwrap(),
    );
    let rp = RmsNorm {
        rows: rows_n as u32,
        h: hh as u32,
        eps: 1e-5,
        accumulate: 0,
    };
    gpu.dispatch(
        Kernel::RmsNormFwd,
        &[xb, wb, yb, rb],
        &rp.words(),
        (rows_n as u32, 1),
    )
    .unwrap();
    let (mut yc, mut rc) = (vec![0f32; rows_n * hh], vec![0f32; rows_n]);
    ops::rmsnorm_fwd(hh, &xs, &ws, 1e-5, &mut yc, &mut rc);
    out.push(("rmsnorm_fwd y", read(gpu, yb).await, yc, 1e-5));
    out.push(("rmsnorm_fwd rstd", read(gpu, rb).await, rc.clone(), 1e-5));
    let dys = rng.fill(rows_n * hh, 1.0);
    let dx0 = rng.fill(rows_n * hh, 1.0);
    let (dyb, dxb) = (
        gpu.upload_f32(&dys, "dy").unwrap(),
        gpu.upload_f32(&dx0, "dx").unwrap(),
    );
    let rbp = RmsNorm {
        accumulate: 1,
        ..rp
    };
    gpu.dispatch(
        Kernel::RmsNormBwd,
        &[dyb, xb, wb, rb, dxb],
        &rbp.words(),
        (rows_n as u32, 1),
    )
    .unwrap();
    let mut dxc = dx0.clone();
    ops::rmsnorm_bwd(hh, &dys, &xs, &ws, &rc, &mut dxc, true);
    out.push(("rmsnorm_bwd", read(gpu, dxb).await, dxc, 1e-4));
    out
}

/// RoPE forward and backward.
async fn rope(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let mut out = Vec::new();
    let (seq, heads, d, tokens) = (7, 3, 16, 14);
    let (cos, sin) = ops::rope_table(seq, d, 10000.0);
    let mut tab = cos.clone();
    tab.extend_from_slice(&sin);
    let xr = rng.fill(tokens * heads * d, 1.0);
    let (xrb, tabb) = (
        gpu.upload_f32(&xr, "x").unwrap(),
        gpu.upload_f32(&tab, "rope").unwrap(),
    );
    for sign in [1.0f32, -1.0] {
        let pp = Rope {
            tokens: tokens as u32,
            seq: seq as u32,
            heads: heads as u32,
            d: d as u32,
            sign,
            ..Rope::default()
        };
        let before = read(gpu, xrb).await;
        gpu.dispatch(
            Kernel::Rope,
            &[xrb, tabb],
            &pp.words(),
            groups_1d(tokens * heads * d / 2, 256),
        )
        .unwrap();
        let mut cpu = before.clone();
        ops::rope(seq, heads, d, &cos, &sin, &mut cpu, sign);
        let what = if sign > 0.0 { "rope fwd" } else { "rope bwd" };
        out.push((what, read(gpu, xrb).await, cpu, 1e-5));
    }
    // Backward undoes forward (the rotation is orthogonal).
    out.push(("rope round trip", read(gpu, xrb).await, xr, 1e-5));
    out
}

/// Attention's inputs on the device and on the CPU, and its parameter block.
struct AttnInputs {
    sh: AttnShape,
    ap: Vec<u32>,
    cpu: [Vec<f32>; 4],
    /// q, k, v and the output gradient.
    bufs: [Buf; 4],
}

/// Attention, eager and tiled, with GQA and a sequence that is not a multiple of the tiles.
async fn attention(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let sh = AttnShape {
        batch: 2,
        seq: 19,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
    };
    let nt = sh.batch * sh.seq;
    let (qd, kvd) = (sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim);
    let cpu = [
        rng.fill(nt * qd, 1.0),
        rng.fill(nt * kvd, 1.0),
        rng.fill(nt * kvd, 1.0),
        rng.fill(nt * qd, 1.0),
    ];
    let bufs = [
        gpu.upload_f32(&cpu[0], "q").unwrap(),
        gpu.upload_f32(&cpu[1], "k").unwrap(),
        gpu.upload_f32(&cpu[2], "v").unwrap(),
        gpu.upload_f32(&cpu[3], "do").unwrap(),
    ];
    let ap = Attn {
        batch: sh.batch as u32,
        seq: sh.seq as u32,
        heads: sh.heads as u32,
        kv_heads: sh.kv_heads as u32,
        d: sh.head_dim as u32,
        scale: sh.scale(),
        ..Attn::default()
    }
    .words();
    let inputs = AttnInputs { sh, ap, cpu, bufs };
    let (mut out, oc, dqc) = attention_eager(gpu, &inputs).await;
    out.extend(attention_tiled(gpu, &inputs, &oc, &dqc).await);
    out
}

/// The eager kernels; also returns the CPU's output and q gradient, which the tiled kernels must equal.
async fn attention_eager(gpu: &Gpu, inputs: &AttnInputs) -> (Vec<Compared>, Vec<f32>, Vec<f32>) {
    let AttnInputs { sh, ap, cpu, bufs } = inputs;
    let (sh, [qv, kv, vv, dov], [qb, kb, vb, dob]) = (*sh, cpu, *bufs);
    let nt = sh.batch * sh.seq;
    let (qd, kvd) = (sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim);
    let rows_a = sh.batch * sh.heads * sh.seq;
    let pn = rows_a * sh.seq;
    let mut out = Vec::new();
    let (pb, ob) = (
        gpu.alloc_f32(pn, "p").unwrap(),
        gpu.alloc_f32(nt * qd, "o").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnEagerFwd,
        &[qb, kb, vb, pb, ob],
        ap,
        groups_1d(rows_a, 64),
    )
    .unwrap();
    let (mut pc, mut oc) = (vec![0f32; pn], vec![0f32; nt * qd]);
    ops::attn_eager_fwd(sh, qv, kv, vv, &mut pc, &mut oc);
    out.push(("attn_eager_fwd p", read(gpu, pb).await, pc.clone(), 1e-5));
    out.push(("attn_eager_fwd o", read(gpu, ob).await, oc.clone(), 1e-5));
    let dsb = gpu.alloc_f32(pn, "ds").unwrap();
    gpu.dispatch(
        Kernel::AttnEagerBwdDs,
        &[vb, pb, dob, dsb],
        ap,
        groups_1d(rows_a, 64),
    )
    .unwrap();
    let mut dsc = vec![0f32; pn];
    ops::attn_eager_bwd_ds(sh, vv, &pc, dov, &mut dsc);
    out.push(("attn_eager_bwd_ds", read(gpu, dsb).await, dsc.clone(), 1e-5));
    let (dqb, dkb, dvb) = (
        gpu.alloc_f32(nt * qd, "dq").unwrap(),
        gpu.alloc_f32(nt * kvd, "dk").unwrap(),
        gpu.alloc_f32(nt * kvd, "dv").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnEagerBwdDq,
        &[kb, dsb, dqb],
        ap,
        groups_1d(rows_a * sh.head_dim, 64),
    )
    .unwrap();
    gpu.dispatch(
        Kernel::AttnEagerBwdDkv,
        &[qb, pb, dob, dsb, dkb, dvb],
        ap,
        groups_1d(sh.batch * sh.kv_heads * sh.seq * sh.head_dim, 64),
    )
    .unwrap();
    let (mut dqc, mut dkc, mut dvc) = (
        vec![0f32; nt * qd],
        vec![0f32; nt * kvd],
        vec![0f32; nt * kvd],
    );
    ops::attn_eager_bwd_dq(sh, kv, &dsc, &mut dqc);
    ops::attn_eager_bwd_dkv(sh, qv, &pc, dov, &dsc, &mut dkc, &mut dvc);
    out.push(("attn_eager_bwd_dq", read(gpu, dqb).await, dqc.clone(), 1e-4));
    out.push(("attn_eager_bwd_dk", read(gpu, dkb).await, dkc, 1e-4));
    out.push(("attn_eager_bwd_dv", read(gpu, dvb).await, dvc, 1e-4));
    (out, oc, dqc)
}

/// The tiled kernels, and the CPU's tiled results against the eager ones (`oc`, `dqc`).
async fn attention_tiled(gpu: &Gpu, inputs: &AttnInputs, oc: &[f32], dqc: &[f32]) -> Vec<Compared> {
    let AttnInputs { sh, ap, cpu, bufs } = inputs;
    let (sh, [qv, kv, vv, dov], [qb, kb, vb, dob]) = (*sh, cpu, *bufs);
    let nt = sh.batch * sh.seq;
    let (qd, kvd) = (sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim);
    let rows_a = sh.batch * sh.heads * sh.seq;
    let mut out = Vec::new();
    let (otb, lseb) = (
        gpu.alloc_f32(nt * qd, "o").unwrap(),
        gpu.alloc_f32(rows_a, "lse").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnTiledFwd,
        &[qb, kb, vb, otb, lseb],
        ap,
        (sh.seq.div_ceil(64) as u32, (sh.batch * sh.heads) as u32),
    )
    .unwrap();
    let (mut otc, mut lsec) = (vec![0f32; nt * qd], vec![0f32; rows_a]);
    ops::attn_tiled_fwd(sh, qv, kv, vv, &mut otc, &mut lsec);
    out.push(("attn_tiled_fwd o", read(gpu, otb).await, otc.clone(), 1e-5));
    out.push((
        "attn_tiled_fwd lse",
        read(gpu, lseb).await,
        lsec.clone(),
        1e-5,
    ));
    out.push(("tiled o equals eager o", otc.clone(), oc.to_vec(), 1e-5));
    let (deltab, dqtb, dktb, dvtb) = (
        gpu.alloc_f32(rows_a, "delta").unwrap(),
        gpu.alloc_f32(nt * qd, "dq").unwrap(),
        gpu.alloc_f32(nt * kvd, "dk").unwrap(),
        gpu.alloc_f32(nt * kvd, "dv").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnTiledBwdDq,
        &[qb, kb, vb, otb, lseb, dob, deltab, dqtb],
        ap,
        groups_1d(rows_a, 64),
    )
    .unwrap();
    gpu.dispatch(
        Kernel::AttnTiledBwdDkv,
        &[qb, kb, vb, lseb, deltab, dob, dktb, dvtb],
        ap,
        groups_1d(sh.batch * sh.kv_heads * sh.seq, 64),
    )
    .unwrap();
    let (mut delc, mut dqtc, mut dktc, mut dvtc) = (
        vec![0f32; rows_a],
        vec![0f32; nt * qd],
        vec![0f32; nt * kvd],
        vec![0f32; nt * kvd],
    );
    ops::attn_tiled_bwd_dq(sh, qv, kv, vv, &otc, &lsec, dov, &mut delc, &mut dqtc);
    ops::attn_tiled_bwd_dkv(sh, qv, kv, vv, &lsec, &delc, dov, &mut dktc, &mut dvtc);
    out.push(("attn_tiled_bwd delta", read(gpu, deltab).await, delc, 1e-4));
    out.push((
        "attn_tiled_bwd_dq",
        read(gpu, dqtb).await,
        dqtc.clone(),
        1e-4,
    ));
    out.push(("attn_tiled_bwd_dk", read(gpu, dktb).await, dktc, 1e-4));
    out.push(("attn_tiled_bwd_dv", read(gpu, dvtb).await, dvtc, 1e-4));
    out.push(("tiled dq equals eager dq", dqtc, dqc.to_vec(), 1e-4));
    out
}

/// SwiGLU forward and backward.
async fn swiglu(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let ne = 1000;
    let (g, u, dm) = (rng.fill(ne, 4.0), rng.fill(ne, 2.0), rng.fill(ne, 1.0));
    let (gb, ub, mb, dmb, dgb, dub) = (
        gpu.upload_f32(&g, "g").unwrap(),
        gpu.upload_f32(&u, "u").unwrap(),
        gpu.alloc_f32(ne, "m").unwrap(),
        gpu.upload_f32(&dm, "dm").unwrap(),
        gpu.alloc_f32(ne, "dg").unwrap(),
        gpu.alloc_f32(ne, "du").unwrap(),
    );
    let ew = Elementwise {
        n: ne as u32,
        ..Elementwise::default()
    }
    .words();
    gpu.dispatch(Kernel::SwigluFwd, &[gb, ub, mb], &ew, groups_1d(ne, 256))
        .unwrap();
    gpu.dispatch(
        Kernel::SwigluBwd,
        &[dmb, gb, ub, dgb, dub],
        &ew,
        groups_1d(ne, 256),
    )
    .unwrap();
    let (mut mc, mut dgc, mut duc) = (vec![0f32; ne], vec![0f32; ne], vec![0f32; ne]);
    ops::swiglu_fwd(&g, &u, &mut mc);
    ops::swiglu_bwd(&dm, &g, &u, &mut dgc, &mut duc);
    vec![
        ("swiglu_fwd", read(gpu, mb).await, mc, 1e-5),
        ("swiglu_bwd dg", read(gpu, dgb).await, dgc, 1e-5),
        ("swiglu_bwd du", read(gpu, dub).await, duc, 1e-5),
    ]
}

/// Cross-entropy in two chunks (the second partial), its backward, and the mean.
async fn cross_entropy(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let (tok, voc, chunk) = (10, 300, 6);
    let logits = rng.fill(tok * voc, 5.0);
    let labels: Vec<u32> = (0..tok).map(|_| rng.below(voc as u32)).collect();
    let (labb, lsecb, rlb, lossb) = (
        gpu.upload_u32(&labels, "labels").unwrap(),
        gpu.alloc_f32(tok, "lse").unwrap(),
        gpu.alloc_f32(tok, "rowloss").unwrap(),
        gpu.alloc_f32(1, "loss").unwrap(),
    );
    let (mut lsecc, mut rlc) = (vec![0f32; tok], vec![0f32; tok]);
    let scale = 1.0 / tok as f32;
    let mut dl_gpu = Vec::new();
    let mut dl_cpu = Vec::new();
    for row0 in (0..tok).step_by(chunk) {
        let rows_c = chunk.min(tok - row0);
        let lc = &logits[row0 * voc..(row0 + rows_c) * voc];
        let lcb = gpu.upload_f32(lc, "logits chunk").unwrap();
        let cp = CrossEntropy {
            rows: rows_c as u32,
            vocab: voc as u32,
            row_off: row0 as u32,
            scale,
        };
        gpu.dispatch(
            Kernel::CeFwd,
            &[lcb, labb, lsecb, rlb],
            &cp.words(),
            (rows_c as u32, 1),
        )
        .unwrap();
        ops::ce_fwd(voc, lc, &labels, row0, &mut lsecc, &mut rlc);
        let dlb = gpu.alloc_f32(rows_c * voc, "dlogits").unwrap();
        gpu.dispatch(
            Kernel::CeBwd,
            &[lcb, labb, lsecb, dlb],
            &cp.words(),
            groups_1d(rows_c * voc, 256),
        )
        .unwrap();
        dl_gpu.extend(read(gpu, dlb).await);
        let mut dlc = vec![0f32; rows_c * voc];
        ops::ce_bwd(voc, lc, &labels, &lsecc, row0, scale, &mut dlc);
        dl_cpu.extend(dlc);
    }
    gpu.dispatch(
        Kernel::LossSum,
        &[rlb, lossb],
        &Elementwise {
            n: tok as u32,
            ..Elementwise::default()
        }
        .words(),
        (1, 1),
    )
    .unwrap();
    let mean = vec![ops::loss_mean(&rlc)];
    vec![
        ("ce_fwd lse", read(gpu, lsecb).await, lsecc, 1e-5),
        ("ce_fwd rowloss", read(gpu, rlb).await, rlc, 1e-5),
        ("ce_bwd", dl_gpu, dl_cpu, 1e-5),
        ("loss_sum", read(gpu, lossb).await, mean, 1e-5),
    ]
}

/// AdamW, three steps.
async fn adamw(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let hp = AdamW {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let np_ = 777;
    let mut pc_ = rng.fill(np_, 1.0);
    let (mut mc_, mut vc_) = (vec![0f32; np_], vec![0f32; np_]);
    let (pb_, mb_, vb_) = (
        gpu.upload_f32(&pc_, "p").unwrap(),
        gpu.alloc_f32(np_, "m").unwrap(),
        gpu.alloc_f32(np_, "v").unwrap(),
    );
    for step in 1..=3 {
        let gr = rng.fill(np_, 1.0);
        let gb_ = gpu.upload_f32(&gr, "g").unwrap();
        let (ss, bc2) = ops::adamw_coefficients(&hp, step);
        let p = Adamw {
            n: np_ as u32,
            decay: 1.0 - hp.lr * hp.weight_decay,
            one_minus_beta1: 1.0 - hp.beta1,
            beta2: hp.beta2,
            one_minus_beta2: 1.0 - hp.beta2,
            eps: hp.eps,
            step_size: ss,
            bc2_sqrt: bc2,
        };
        gpu.dispatch(
            Kernel::Adamw,
            &[pb_, gb_, mb_, vb_],
            &p.words(),
            groups_1d(np_, 256),
        )
        .unwrap();
        ops::adamw(&hp, step, &mut pc_, &gr, &mut mc_, &mut vc_);
    }
    vec![
        ("adamw param", read(gpu, pb_).await, pc_, 1e-5),
        ("adamw m", read(gpu, mb_).await, mc_, 1e-5),
        ("adamw v", read(gpu, vb_).await, vc_, 1e-5),
    ]
}

/// The residual add.
async fn add(b: &mut Bench) -> Vec<Compared> {
    let (gpu, rng) = (&b.gpu, &mut b.rng);
    let (a, b) = (rng.fill(300, 1.0), rng.fill(300, 1.0));
    let (abuf, bbuf) = (
        gpu.upload_f32(&a, "a").unwrap(),
        gpu.upload_f32(&b, "b").unwrap(),
    );
    gpu.dispatch(
        Kernel::Add,
        &[abuf, bbuf],
        &Elementwise {
            n: 300,
            ..Elementwise::default()
        }
        .words(),
        groups_1d(300, 256),
    )
    .unwrap();
    let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    vec![("add", read(gpu, abuf).await, sum, 1e-7)]
}
