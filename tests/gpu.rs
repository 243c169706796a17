//! Browser tests of the WebGPU micro QLoRA path (wasm-bindgen-test in headless Chromium on SwiftShader): every kernel
//! against the CPU reference on fresh random inputs, a full step against the CPU step, the tracker's peak, the loss
//! over 5 steps, the failure paths, and the page panel. Sizes are tiny: SwiftShader is a CPU.
//!
//! Run: `CHROMEDRIVER=/usr/bin/chromedriver WASM_BINDGEN_TEST_TIMEOUT=600 cargo test -p peakplan-web
//! --target wasm32-unknown-unknown --test gpu`.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use leptos::prelude::*;
use peakplan_core::micro::nf4::Nf4Tensor;
use peakplan_core::micro::ops::{self, AttnShape, Mat};
use peakplan_core::micro::{
    predicted_peak_bytes, AdamW, MicroAttention, MicroConfig, MicroLoss, MicroModel, Rng,
};
use peakplan_core::plan::Targets;
use peakplan_core::Plan;
use peakplan_web::gpu::device::{AdapterInfo, Buf, Gpu, GpuError, Needs, StepPhase};
use peakplan_web::gpu::kernels::Kernel;
use peakplan_web::gpu::params::*;
use peakplan_web::gpu::runner::{
    is_running, last_run_leftover, measure, measure_model, RunOptions,
};
use peakplan_web::gpu::step::{blocks_4x4, blocks_4x8, blocks_8x4, groups_1d};
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// `max |a - b| / max |b|`: the error relative to the reference's scale.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// `||a - b|| / ||b||` (Euclidean): the error of a whole tensor, for the full step, where a few near-zero
/// gradients make AdamW's first update (`g / (|g| + eps)`) sensitive element by element.
fn rel_err_l2(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    let d: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let n: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (d / n.max(1e-60)).sqrt() as f32
}

fn check_l2(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> f32 {
    let e = rel_err_l2(gpu, cpu);
    web_sys::console::log_1(&format!("{what}: relative error (L2) {e:.2e}").into());
    assert!(e < tol, "{what}: relative error {e} (tolerance {tol})");
    e
}

fn check(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) -> f32 {
    let e = rel_err(gpu, cpu);
    web_sys::console::log_1(&format!("{what}: relative error {e:.2e}").into());
    assert!(e < tol, "{what}: relative error {e} (tolerance {tol})");
    e
}

fn fresh_rng() -> (Rng, u64) {
    let seed = (js_sys::Math::random() * 1e15) as u64;
    web_sys::console::log_1(&format!("seed {seed}").into());
    (Rng::new(seed), seed)
}

async fn open() -> Gpu {
    Gpu::open(Needs::default()).await.expect("a WebGPU device")
}

async fn read(gpu: &Gpu, b: Buf) -> Vec<f32> {
    gpu.read_f32(b).await.unwrap()
}

#[wasm_bindgen_test]
async fn kernels_match_the_cpu_reference() {
    let gpu = open().await;
    let (mut rng, _) = fresh_rng();
    let codes = gpu.codes().unwrap();
    gpu.push_scopes();

    // NF4: dequantization, fused matmul forward and backward.
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
    check(
        "nf4_dequant",
        &read(&gpu, dense).await,
        &ops::nf4_dequant(&w),
        1e-6,
    );

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
    check("nf4_matmul", &read(&gpu, yb).await, &y, 1e-4);

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
    check("nf4_matmul_t", &read(&gpu, dxb).await, &dx, 1e-4);

    // Strided dense matmul: NN, NT and TN with odd sizes, alpha and beta.
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
        check(name, &read(&gpu, cb).await, &c, 1e-4);
    }

    // Embedding.
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
    check("embed", &read(&gpu, ob).await, &out, 1e-7);

    // RMSNorm forward and backward (accumulating into the residual gradient).
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
    check("rmsnorm_fwd y", &read(&gpu, yb).await, &yc, 1e-5);
    check("rmsnorm_fwd rstd", &read(&gpu, rb).await, &rc, 1e-5);
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
    check("rmsnorm_bwd", &read(&gpu, dxb).await, &dxc, 1e-4);

    // RoPE forward and backward.
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
        let before = read(&gpu, xrb).await;
        gpu.dispatch(
            Kernel::Rope,
            &[xrb, tabb],
            &pp.words(),
            groups_1d(tokens * heads * d / 2, 256),
        )
        .unwrap();
        let mut cpu = before.clone();
        ops::rope(seq, heads, d, &cos, &sin, &mut cpu, sign);
        check(
            if sign > 0.0 { "rope fwd" } else { "rope bwd" },
            &read(&gpu, xrb).await,
            &cpu,
            1e-5,
        );
    }
    // Backward undoes forward (the rotation is orthogonal).
    check("rope round trip", &read(&gpu, xrb).await, &xr, 1e-5);

    // Attention, eager and tiled, with GQA and a sequence that is not a multiple of the tiles.
    let sh = AttnShape {
        batch: 2,
        seq: 19,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
    };
    let nt = sh.batch * sh.seq;
    let (qd, kvd) = (sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim);
    let (qv, kv, vv, dov) = (
        rng.fill(nt * qd, 1.0),
        rng.fill(nt * kvd, 1.0),
        rng.fill(nt * kvd, 1.0),
        rng.fill(nt * qd, 1.0),
    );
    let (qb, kb, vb, dob) = (
        gpu.upload_f32(&qv, "q").unwrap(),
        gpu.upload_f32(&kv, "k").unwrap(),
        gpu.upload_f32(&vv, "v").unwrap(),
        gpu.upload_f32(&dov, "do").unwrap(),
    );
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
    let rows_a = sh.batch * sh.heads * sh.seq;
    let pn = rows_a * sh.seq;
    // eager
    let (pb, ob) = (
        gpu.alloc_f32(pn, "p").unwrap(),
        gpu.alloc_f32(nt * qd, "o").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnEagerFwd,
        &[qb, kb, vb, pb, ob],
        &ap,
        groups_1d(rows_a, 64),
    )
    .unwrap();
    let (mut pc, mut oc) = (vec![0f32; pn], vec![0f32; nt * qd]);
    ops::attn_eager_fwd(sh, &qv, &kv, &vv, &mut pc, &mut oc);
    check("attn_eager_fwd p", &read(&gpu, pb).await, &pc, 1e-5);
    check("attn_eager_fwd o", &read(&gpu, ob).await, &oc, 1e-5);
    let dsb = gpu.alloc_f32(pn, "ds").unwrap();
    gpu.dispatch(
        Kernel::AttnEagerBwdDs,
        &[vb, pb, dob, dsb],
        &ap,
        groups_1d(rows_a, 64),
    )
    .unwrap();
    let mut dsc = vec![0f32; pn];
    ops::attn_eager_bwd_ds(sh, &vv, &pc, &dov, &mut dsc);
    check("attn_eager_bwd_ds", &read(&gpu, dsb).await, &dsc, 1e-5);
    let (dqb, dkb, dvb) = (
        gpu.alloc_f32(nt * qd, "dq").unwrap(),
        gpu.alloc_f32(nt * kvd, "dk").unwrap(),
        gpu.alloc_f32(nt * kvd, "dv").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnEagerBwdDq,
        &[kb, dsb, dqb],
        &ap,
        groups_1d(rows_a * sh.head_dim, 64),
    )
    .unwrap();
    gpu.dispatch(
        Kernel::AttnEagerBwdDkv,
        &[qb, pb, dob, dsb, dkb, dvb],
        &ap,
        groups_1d(sh.batch * sh.kv_heads * sh.seq * sh.head_dim, 64),
    )
    .unwrap();
    let (mut dqc, mut dkc, mut dvc) = (
        vec![0f32; nt * qd],
        vec![0f32; nt * kvd],
        vec![0f32; nt * kvd],
    );
    ops::attn_eager_bwd_dq(sh, &kv, &dsc, &mut dqc);
    ops::attn_eager_bwd_dkv(sh, &qv, &pc, &dov, &dsc, &mut dkc, &mut dvc);
    check("attn_eager_bwd_dq", &read(&gpu, dqb).await, &dqc, 1e-4);
    check("attn_eager_bwd_dk", &read(&gpu, dkb).await, &dkc, 1e-4);
    check("attn_eager_bwd_dv", &read(&gpu, dvb).await, &dvc, 1e-4);
    // tiled
    let (otb, lseb) = (
        gpu.alloc_f32(nt * qd, "o").unwrap(),
        gpu.alloc_f32(rows_a, "lse").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnTiledFwd,
        &[qb, kb, vb, otb, lseb],
        &ap,
        (sh.seq.div_ceil(64) as u32, (sh.batch * sh.heads) as u32),
    )
    .unwrap();
    let (mut otc, mut lsec) = (vec![0f32; nt * qd], vec![0f32; rows_a]);
    ops::attn_tiled_fwd(sh, &qv, &kv, &vv, &mut otc, &mut lsec);
    check("attn_tiled_fwd o", &read(&gpu, otb).await, &otc, 1e-5);
    check("attn_tiled_fwd lse", &read(&gpu, lseb).await, &lsec, 1e-5);
    check("tiled o equals eager o", &otc, &oc, 1e-5);
    let (deltab, dqtb, dktb, dvtb) = (
        gpu.alloc_f32(rows_a, "delta").unwrap(),
        gpu.alloc_f32(nt * qd, "dq").unwrap(),
        gpu.alloc_f32(nt * kvd, "dk").unwrap(),
        gpu.alloc_f32(nt * kvd, "dv").unwrap(),
    );
    gpu.dispatch(
        Kernel::AttnTiledBwdDq,
        &[qb, kb, vb, otb, lseb, dob, deltab, dqtb],
        &ap,
        groups_1d(rows_a, 64),
    )
    .unwrap();
    gpu.dispatch(
        Kernel::AttnTiledBwdDkv,
        &[qb, kb, vb, lseb, deltab, dob, dktb, dvtb],
        &ap,
        groups_1d(sh.batch * sh.kv_heads * sh.seq, 64),
    )
    .unwrap();
    let (mut delc, mut dqtc, mut dktc, mut dvtc) = (
        vec![0f32; rows_a],
        vec![0f32; nt * qd],
        vec![0f32; nt * kvd],
        vec![0f32; nt * kvd],
    );
    ops::attn_tiled_bwd_dq(sh, &qv, &kv, &vv, &otc, &lsec, &dov, &mut delc, &mut dqtc);
    ops::attn_tiled_bwd_dkv(sh, &qv, &kv, &vv, &lsec, &delc, &dov, &mut dktc, &mut dvtc);
    check(
        "attn_tiled_bwd delta",
        &read(&gpu, deltab).await,
        &delc,
        1e-4,
    );
    check("attn_tiled_bwd_dq", &read(&gpu, dqtb).await, &dqtc, 1e-4);
    check("attn_tiled_bwd_dk", &read(&gpu, dktb).await, &dktc, 1e-4);
    check("attn_tiled_bwd_dv", &read(&gpu, dvtb).await, &dvtc, 1e-4);
    check("tiled dq equals eager dq", &dqtc, &dqc, 1e-4);

    // SwiGLU forward and backward.
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
    check("swiglu_fwd", &read(&gpu, mb).await, &mc, 1e-5);
    check("swiglu_bwd dg", &read(&gpu, dgb).await, &dgc, 1e-5);
    check("swiglu_bwd du", &read(&gpu, dub).await, &duc, 1e-5);

    // Cross-entropy in two chunks (the second partial), its backward, and the mean.
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
        dl_gpu.extend(read(&gpu, dlb).await);
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
    check("ce_fwd lse", &read(&gpu, lsecb).await, &lsecc, 1e-5);
    check("ce_fwd rowloss", &read(&gpu, rlb).await, &rlc, 1e-5);
    check("ce_bwd", &dl_gpu, &dl_cpu, 1e-5);
    check(
        "loss_sum",
        &read(&gpu, lossb).await,
        &[ops::loss_mean(&rlc)],
        1e-5,
    );

    // AdamW, three steps; residual add.
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
    check("adamw param", &read(&gpu, pb_).await, &pc_, 1e-5);
    check("adamw m", &read(&gpu, mb_).await, &mc_, 1e-5);
    check("adamw v", &read(&gpu, vb_).await, &vc_, 1e-5);
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
    check("add", &read(&gpu, abuf).await, &sum, 1e-7);

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

fn tiny(attention: MicroAttention, loss: MicroLoss) -> MicroConfig {
    MicroConfig {
        hidden: 64,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        intermediate: 128,
        vocab: 96,
        rank: 4,
        targets: Targets::ALL_LINEAR,
        alpha: 8.0,
        batch: 2,
        seq: 5,
        attention,
        loss,
        adamw: AdamW::default(),
        rope_theta: 10000.0,
        norm_eps: 1e-5,
        seed: 0,
    }
}

#[wasm_bindgen_test]
async fn a_full_step_matches_the_cpu_reference() {
    let (_, seed) = fresh_rng();
    for (attn, loss, fused) in [
        (MicroAttention::Eager, MicroLoss::Whole, true),
        (MicroAttention::Tiled, MicroLoss::Chunked(3), false),
    ] {
        let mut cfg = tiny(attn, loss);
        cfg.seed = seed;
        let mut model = MicroModel::new(&cfg).unwrap();
        // Random B as well, so that every adapter gets a gradient on the first step.
        let mut rng = Rng::new(seed ^ 1);
        for id in model.trainable() {
            if id.b {
                model
                    .tensor_mut(id)
                    .iter_mut()
                    .for_each(|v| *v = rng.uniform(0.2));
            }
        }
        let batch = model.batch();
        let cpu = model.clone();
        let (loss_cpu, grads_cpu) = cpu.loss_and_grads(&batch);
        let opts = RunOptions {
            steps: 1,
            fused,
            compare_dequant: false,
            capture: true,
            on_progress: None,
            memory_budget: None,
        };
        let m = measure_model(model.clone(), batch, opts)
            .unwrap()
            .await
            .unwrap();
        let what = format!("{attn:?}/{loss:?}/fused={fused}");
        let loss_gpu = m.losses()[0];
        let e = (loss_gpu - loss_cpu).abs() / loss_cpu.abs();
        web_sys::console::log_1(
            &format!("{what} loss {loss_gpu} vs {loss_cpu}: relative error {e:.2e}").into(),
        );
        assert!(e < 1e-4, "{what}: loss {loss_gpu} vs {loss_cpu}");
        let cap = m.capture.expect("captured");
        let ids = cpu.trainable();
        let (mut worst_g, mut worst_p) = (0f32, 0f32);
        for (i, id) in ids.iter().enumerate() {
            worst_g = worst_g.max(check_l2(
                &format!("{what} grad {id:?}"),
                &cap.grads[i],
                &grads_cpu[i],
                1e-4,
            ));
            // The update is checked against AdamW applied to the GPU's own gradient: at the first step AdamW
            // moves each weight by about lr * sign(g), so a gradient within rounding of zero may move either
            // way, and comparing with the CPU's whole step would test that coin flip, not the kernel.
            let mut expected = model.tensor(*id).to_vec();
            let (mut m0, mut v0) = (vec![0f32; expected.len()], vec![0f32; expected.len()]);
            ops::adamw(
                &cfg.adamw,
                1,
                &mut expected,
                &cap.grads[i],
                &mut m0,
                &mut v0,
            );
            worst_p = worst_p.max(check(
                &format!("{what} updated {id:?}"),
                &cap.params[i],
                &expected,
                1e-5,
            ));
        }
        web_sys::console::log_1(
            &format!("{what}: worst relative error, gradients {worst_g:.2e}, updated adapters {worst_p:.2e}").into(),
        );
        assert_eq!(m.created, m.destroyed);
    }
}

#[wasm_bindgen_test]
async fn five_steps_lower_the_loss_and_the_peak_is_the_tracker_sum() {
    let plan = Plan::parse_query("model=llama-2-7b&method=qlora&r=8&b=1&s=128").plan;
    let cfg = MicroConfig::from_plan(&plan);
    let m = measure(cfg.clone(), RunOptions::default())
        .unwrap()
        .await
        .unwrap();
    let losses = m.losses();
    web_sys::console::log_1(&format!("losses {losses:?}").into());
    assert_eq!(losses.len(), 5);
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    // The peak is the sum of the buffers live at that moment, and every step after the first repeats it.
    for s in &m.steps {
        assert_eq!(
            s.peak_buffers.iter().map(|b| b.1).sum::<u64>(),
            s.peak_bytes
        );
        assert!(s.peak_bytes >= s.load_bytes);
        assert_eq!(s.phase_peaks.iter().copied().max(), Some(s.peak_bytes));
    }
    for s in &m.steps[1..] {
        assert_eq!(s.peak_bytes, m.peak_bytes);
    }
    let last = m.last().unwrap();
    assert!(last.timeline.iter().any(|e| e.phase == StepPhase::Backward));
    assert_eq!(
        last.timeline.last().map(|e| e.live),
        Some(last.load_bytes),
        "the step returns to the load level"
    );
    assert_eq!(m.created, m.destroyed);
    assert_eq!(last_run_leftover(), Some(0));
    assert!(
        last.peak_buffers
            .iter()
            .all(|(label, _)| !label.contains("dequantized")),
        "the fused step never makes a dense weight"
    );
    let d = m.dequant.clone().unwrap();
    let largest = (cfg.hidden * cfg.intermediate * 4) as u64;
    assert!(d.unfused_bytes >= d.fused_bytes + largest, "{d:?}");
    let predicted = predicted_peak_bytes(&cfg);
    web_sys::console::log_1(
        &format!(
            "peak {} B (load {} B, phase peaks {:?}, {:?}); predicted {} B, ratio {:.4}; step {:.1} ms ({}), {:.3} GFLOP/s; adapter {}; dequant {:?}",
            m.peak_bytes,
            last.load_bytes,
            last.phase_peaks,
            last.peak_phase,
            predicted,
            m.peak_bytes as f64 / predicted as f64,
            m.step_ms(),
            m.step_time_source(),
            m.gflops(),
            m.adapter.summary(),
            d
        )
        .into(),
    );
    for (label, size) in &last.peak_buffers {
        web_sys::console::log_1(&format!("  at peak: {label} {size}").into());
    }
}

#[wasm_bindgen_test]
async fn a_destroyed_device_ends_the_run_with_an_error_and_frees_everything() {
    let cfg = tiny(MicroAttention::Tiled, MicroLoss::Whole);
    let on_progress: Rc<dyn Fn(&peakplan_web::gpu::runner::Progress)> = Rc::new(|p| {
        if p.step == 2 && p.phase == StepPhase::Backward {
            p.device.destroy();
        }
    });
    let opts = RunOptions {
        steps: 3,
        on_progress: Some(on_progress),
        ..RunOptions::default()
    };
    let err = measure(cfg, opts)
        .unwrap()
        .await
        .expect_err("the run fails");
    web_sys::console::log_1(&format!("destroyed device: {err}").into());
    assert!(matches!(err, GpuError::DeviceLost(_)), "{err:?}");
    assert_eq!(last_run_leftover(), Some(0));
    assert!(!is_running());
}

/// Whether the adapter is SwiftShader (the suite's adapter, see `webdriver.json`), by its adapter info.
fn is_swiftshader(a: &AdapterInfo) -> bool {
    [&a.vendor, &a.architecture, &a.description]
        .iter()
        .any(|s| s.to_ascii_lowercase().contains("swiftshader"))
}

#[wasm_bindgen_test]
async fn the_memory_budget_fails_a_buffer_creation_as_out_of_memory() {
    let gpu = open().await;
    gpu.tracker.borrow_mut().set_budget(Some(1000));
    gpu.push_scopes();
    let a = gpu.alloc_f32(128, "first").unwrap();
    let err = gpu.alloc_f32(150, "second").expect_err("over the budget");
    // The budget counts live bytes: once `first` is released, the same creation fits.
    gpu.free(a);
    let b = gpu.alloc_f32(150, "second");
    gpu.pop_scopes()
        .await
        .expect("the browser reported nothing: no buffer was created over the budget");
    let text = err.to_string();
    web_sys::console::log_1(&format!("budget: {text}").into());
    assert!(matches!(err, GpuError::OutOfMemory(_)), "{err:?}");
    assert!(text.starts_with("out of GPU memory: "), "{text}");
    for part in ["600 byte buffer", "from 512 to 1112 bytes", "1000 bytes"] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    assert_eq!(b.unwrap().size, 600);
    {
        let t = gpu.tracker.borrow();
        assert_eq!(
            (t.created, t.destroyed),
            (2, 1),
            "the refused buffer was never created"
        );
        assert_eq!((t.live_bytes(), t.live_sum()), (600, 600));
    }
    gpu.destroy_all();
    assert_eq!(gpu.tracker.borrow().live_bytes(), 0);
    assert_eq!(gpu.tracker.borrow().live_count(), 0);
}

#[wasm_bindgen_test]
async fn out_of_memory_ends_the_run_with_an_error_frees_everything_and_the_next_run_succeeds() {
    let cfg = tiny(MicroAttention::Eager, MicroLoss::Whole);
    // One step and no comparison: the most the run ever holds is the step's peak.
    let opts = RunOptions {
        steps: 1,
        compare_dequant: false,
        ..RunOptions::default()
    };
    let first = measure(cfg.clone(), opts.clone()).unwrap().await.unwrap();
    let (peak, load) = (first.peak_bytes, first.steps[0].load_bytes);
    let peak_phase = first.steps[0].peak_phase;
    assert!(peak > load && load > 0, "peak {peak}, load {load}");
    // Half the peak (possibly below the resident set: then the upload fails), and one byte short of the peak (the
    // creation that would reach it fails, inside the step, with the step's buffers live).
    for budget in [peak / 2, peak - 1] {
        let phase = Rc::new(Cell::new(None));
        let seen = phase.clone();
        let on_progress: Rc<dyn Fn(&peakplan_web::gpu::runner::Progress)> =
            Rc::new(move |p| seen.set(Some(p.phase)));
        let budgeted = RunOptions {
            memory_budget: Some(budget),
            on_progress: Some(on_progress),
            ..opts.clone()
        };
        let err = measure(cfg.clone(), budgeted)
            .unwrap()
            .await
            .expect_err("the run fails over its budget");
        let text = err.to_string();
        web_sys::console::log_1(
            &format!(
                "budget {budget} (peak {peak} in {peak_phase:?}, load {load}): failed in {:?}: {text}",
                phase.get()
            )
            .into(),
        );
        if budget == peak - 1 {
            assert_eq!(phase.get(), Some(peak_phase), "it fails where the peak is");
        }
        assert!(matches!(err, GpuError::OutOfMemory(_)), "{err:?}");
        assert!(text.starts_with("out of GPU memory: "), "{text}");
        assert!(text.contains("out-of-memory"), "{text}");
        assert!(
            text.contains(&format!("memory budget of {budget} bytes")),
            "{text}"
        );
        assert_eq!(
            last_run_leftover(),
            Some(0),
            "every buffer of the failed run was destroyed"
        );
        assert!(!is_running());
    }
    // The next run, without a budget, succeeds and measures the same peak.
    let again = measure(cfg, opts).unwrap().await.unwrap();
    assert_eq!(again.peak_bytes, peak);
    assert_eq!(again.created, again.destroyed);
    assert_eq!(last_run_leftover(), Some(0));
}

#[wasm_bindgen_test]
async fn the_fallback_adapter_is_named_as_such() {
    let gpu = open().await;
    let info = gpu.info.clone();
    drop(gpu);
    let summary = info.summary();
    web_sys::console::log_1(&format!("adapter: {info:?}; summary: {summary}").into());
    assert_eq!(
        summary.contains("fallback adapter"),
        info.fallback,
        "{summary}"
    );
    // SwiftShader, this suite's adapter, is a fallback adapter (`isFallbackAdapter`).
    if is_swiftshader(&info) {
        assert!(
            info.fallback,
            "SwiftShader reports isFallbackAdapter: {info:?}"
        );
    }
}

#[wasm_bindgen_test]
async fn a_second_run_is_refused_while_one_runs() {
    let cfg = tiny(MicroAttention::Eager, MicroLoss::Chunked(4));
    let opts = RunOptions {
        steps: 1,
        compare_dequant: false,
        ..RunOptions::default()
    };
    let first = measure(cfg.clone(), opts.clone()).unwrap();
    assert!(is_running());
    assert!(matches!(
        measure(cfg.clone(), opts.clone()).err(),
        Some(GpuError::Busy)
    ));
    first.await.unwrap();
    assert!(!is_running());
    // Once it is over, a new run is accepted; dropping it unstarted releases the guard as well.
    let again = measure(cfg, opts);
    assert!(again.is_ok() && is_running());
    drop(again);
    assert!(!is_running());
}

#[wasm_bindgen_test]
async fn limits_beyond_the_adapter_are_refused() {
    let err = Gpu::open(Needs {
        max_buffer: 1 << 50,
        max_storage_binding: 1 << 50,
    })
    .await
    .err()
    .expect("refused");
    assert!(matches!(err, GpuError::Limits(_)), "{err:?}");
}

fn doc() -> web_sys::Document {
    web_sys::window().unwrap().document().unwrap()
}

fn within(m: &web_sys::Element, id: &str) -> web_sys::Element {
    m.query_selector(&format!("[data-testid=\"{id}\"]"))
        .unwrap()
        .unwrap()
}

async fn sleep(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(p).await.unwrap();
}

#[wasm_bindgen_test]
async fn the_panel_measures_and_fills_every_hook() {
    let plan = RwSignal::new(Plan::parse_query("model=llama-2-7b&method=qlora&r=8&b=1&s=128").plan);
    let mount = doc().create_element("div").unwrap();
    doc().body().unwrap().append_child(&mount).unwrap();
    let handle = mount_to(mount.clone().unchecked_into(), move || {
        view! {
            <peakplan_web::gpu::panel::GpuPanel plan=plan
                predict=Callback::new(|c: MicroConfig| predicted_peak_bytes(&c))/>
        }
    });
    sleep(30).await;
    assert_eq!(
        within(&mount, "gpu-status")
            .text_content()
            .unwrap_or_default(),
        ""
    );
    let button: web_sys::HtmlElement = within(&mount, "gpu-measure").unchecked_into();
    button.click();
    sleep(10).await;
    assert_eq!(
        within(&mount, "gpu-status")
            .text_content()
            .unwrap_or_default(),
        "running"
    );
    // A second press while running is refused with a message.
    button.click();
    sleep(10).await;
    assert!(within(&mount, "gpu-note")
        .text_content()
        .unwrap_or_default()
        .contains("already running"));
    let mut status = String::new();
    for _ in 0..1200 {
        sleep(100).await;
        status = within(&mount, "gpu-status")
            .text_content()
            .unwrap_or_default();
        if status != "running" {
            break;
        }
    }
    assert_eq!(status, "done");
    let bytes = |id: &str| {
        within(&mount, id)
            .get_attribute("data-bytes")
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let value = |id: &str| {
        within(&mount, id)
            .get_attribute("data-value")
            .unwrap()
            .parse::<f32>()
            .unwrap()
    };
    let (measured, predicted) = (bytes("gpu-measured-peak"), bytes("gpu-predicted-peak"));
    assert!(measured > 0 && predicted > 0);
    assert!(value("gpu-loss-last") < value("gpu-loss-first"));
    assert!(within(&mount, "gpu-timeline")
        .get_attribute("aria-label")
        .unwrap()
        .contains("peak"));
    // The adapter line names a fallback adapter as such; SwiftShader, this suite's adapter, is one.
    let adapter = within(&mount, "gpu-adapter")
        .text_content()
        .unwrap_or_default();
    web_sys::console::log_1(&format!("panel adapter: {adapter}").into());
    if adapter.to_ascii_lowercase().contains("swiftshader") {
        assert!(adapter.contains("fallback adapter"), "{adapter}");
    }
    assert!(within(&mount, "gpu-dequant")
        .text_content()
        .unwrap()
        .contains("dequantize-then-matmul"));
    web_sys::console::log_1(
        &format!(
            "panel: measured {measured} predicted {predicted} ratio {:.4}",
            measured as f64 / predicted as f64
        )
        .into(),
    );
    drop(handle);
    mount.remove();
}

#[wasm_bindgen_test]
async fn without_webgpu_the_panel_says_unsupported() {
    // Hide navigator.gpu behind an own property for the length of this test.
    let nav = web_sys::window().unwrap().navigator();
    let desc = js_sys::Object::new();
    js_sys::Reflect::set(&desc, &"value".into(), &wasm_bindgen::JsValue::UNDEFINED).unwrap();
    js_sys::Reflect::set(&desc, &"configurable".into(), &true.into()).unwrap();
    js_sys::Object::define_property(&nav, &"gpu".into(), &desc);
    let mount = doc().create_element("div").unwrap();
    doc().body().unwrap().append_child(&mount).unwrap();
    let handle = mount_to(mount.clone().unchecked_into(), move || {
        view! {
            <peakplan_web::gpu::panel::GpuPanel plan=Plan::default()
                predict=Callback::new(|c: MicroConfig| predicted_peak_bytes(&c))/>
        }
    });
    sleep(20).await;
    let status = |m: &web_sys::Element| {
        m.query_selector("[data-testid=\"gpu-status\"]")
            .unwrap()
            .unwrap()
            .text_content()
            .unwrap_or_default()
    };
    assert_eq!(status(&mount), "unsupported");
    let button: web_sys::HtmlElement = mount
        .query_selector("[data-testid=\"gpu-measure\"]")
        .unwrap()
        .unwrap()
        .unchecked_into();
    button.click();
    sleep(20).await;
    assert_eq!(status(&mount), "unsupported");
    assert!(mount
        .text_content()
        .unwrap_or_default()
        .contains("WebGPU is not available"));
    // The predicted figure still shows: the engine needs no GPU.
    let predicted = mount
        .query_selector("[data-testid=\"gpu-predicted-peak\"]")
        .unwrap()
        .unwrap();
    assert!(
        predicted
            .get_attribute("data-bytes")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    js_sys::Reflect::delete_property(&nav, &"gpu".into()).unwrap();
    drop(handle);
    mount.remove();
}
