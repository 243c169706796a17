// nf4_matmul.wgsl: fused dequantize-matmul for the forward of a frozen 4-bit projection, with no dense copy of W:
//   y[m, o] = alpha * sum_k x[m, k] * W[o, k] + beta * y[m, o]      (beta == 0 does not read y)
// W is [rows = out features, cols = in features] in NF4 with double quantization (see nf4_dequant.wgsl). Each
// invocation computes a block of 8 tokens x 4 output features: for every 8 consecutive k it decodes one packed u32
// word (8 nibbles, the high nibble of each byte first) per output feature, and uses it for all 8 tokens, so each
// weight is decoded once per 8 tokens; a feature's block absmax is decoded once per 64-weight block. cols % 8 == 0.
// Bindings (group 0):
//   0 x: storage, read      array<vec4<f32>>  [m, cols] from x_off (x_off % 4 == 0; cols % 8 keeps rows aligned)
//   1 q: storage, read      array<u32>  the NF4 weight (Nf4Layout)
//   2 y: storage, rw        array<f32>  [m, rows] from y_off
//   3 codes: storage, read  array<f32>  DYN8 (256 values) then NF4 (16 values)
//   4 p: uniform            Params      mirrored by `Nf4Matmul` in src/gpu/params.rs (keep in sync)
// Dispatch: (ceil(rows / 32), ceil(m / 64)) workgroups of 8x8 (`blocks_8x4` in src/gpu/step.rs, keep in sync).

struct Params {
    m: u32, rows: u32, cols: u32, x_off: u32,
    y_off: u32, qabs_word: u32, abs2_word: u32, off_word: u32,
    alpha: f32, beta: f32, pad0: u32, pad1: u32,
}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> codes: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn absmax(i: u32) -> f32 {
    let qb = (q[p.qabs_word + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
    return codes[qb] * bitcast<f32>(q[p.abs2_word + (i >> 8u)]) + bitcast<f32>(q[p.off_word]);
}

// The 16 NF4 values, copied from `codes` once per invocation: the decode then reads private memory, not storage.
var<private> nf4: array<f32, 16>;

// W[o, k..k+4] and W[o, k+4..k+8] (k % 8 == 0), from one packed word.
fn lo4(word: u32, s: f32) -> vec4<f32> {
    return vec4<f32>(
        nf4[(word >> 4u) & 0xfu], nf4[word & 0xfu],
        nf4[(word >> 12u) & 0xfu], nf4[(word >> 8u) & 0xfu]) * s;
}
fn hi4(word: u32, s: f32) -> vec4<f32> {
    return vec4<f32>(
        nf4[(word >> 20u) & 0xfu], nf4[(word >> 16u) & 0xfu],
        nf4[(word >> 28u) & 0xfu], nf4[(word >> 24u) & 0xfu]) * s;
}

// One token's contribution for the 8 weights of each of the 4 features decoded this step.
fn row(xl: vec4<f32>, xh: vec4<f32>, a0: vec4<f32>, b0: vec4<f32>, a1: vec4<f32>, b1: vec4<f32>,
       a2: vec4<f32>, b2: vec4<f32>, a3: vec4<f32>, b3: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(xl, a0) + dot(xh, b0), dot(xl, a1) + dot(xh, b1),
                     dot(xl, a2) + dot(xh, b2), dot(xl, a3) + dot(xh, b3));
}

fn store(r: u32, o0: u32, v: vec4<f32>) {
    if (r >= p.m) { return; }
    for (var j = 0u; j < 4u; j++) {
        let o = o0 + j;
        if (o >= p.rows) { return; }
        let at = p.y_off + r * p.rows + o;
        if (p.beta == 0.0) { y[at] = p.alpha * v[j]; } else { y[at] = p.alpha * v[j] + p.beta * y[at]; }
    }
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r0 = gid.y * 8u;
    let o0 = gid.x * 4u;
    if (r0 >= p.m || o0 >= p.rows) { return; }
    for (var i = 0u; i < 16u; i++) {
        nf4[i] = codes[256u + i];
    }
    // Rows and features past the edge read the last valid one and are not written. The 8 tokens' rows and
    // accumulators are named one by one: indexed private arrays would live in memory, not registers.
    let last = p.m - 1u;
    let x0 = (p.x_off + min(r0, last) * p.cols) >> 2u;
    let x1 = (p.x_off + min(r0 + 1u, last) * p.cols) >> 2u;
    let x2 = (p.x_off + min(r0 + 2u, last) * p.cols) >> 2u;
    let x3 = (p.x_off + min(r0 + 3u, last) * p.cols) >> 2u;
    let x4 = (p.x_off + min(r0 + 4u, last) * p.cols) >> 2u;
    let x5 = (p.x_off + min(r0 + 5u, last) * p.cols) >> 2u;
    let x6 = (p.x_off + min(r0 + 6u, last) * p.cols) >> 2u;
    let x7 = (p.x_off + min(r0 + 7u, last) * p.cols) >> 2u;
    let lastf = p.rows - 1u;
    let wr = vec4<u32>(min(o0, lastf), min(o0 + 1u, lastf), min(o0 + 2u, lastf), min(o0 + 3u, lastf)) * p.cols;
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    var c4 = vec4<f32>(0.0);
    var c5 = vec4<f32>(0.0);
    var c6 = vec4<f32>(0.0);
    var c7 = vec4<f32>(0.0);
    // Each feature's block absmax is decoded when its 64-weight block changes (every 8th step), not every step.
    var blk = vec4<u32>(0xffffffffu);
    var s = vec4<f32>(0.0);
    for (var k = 0u; k < p.cols; k += 8u) {
        let j = wr + vec4<u32>(k);
        let b = j >> vec4<u32>(6u);
        if (b.x != blk.x) { s.x = absmax(b.x); }
        if (b.y != blk.y) { s.y = absmax(b.y); }
        if (b.z != blk.z) { s.z = absmax(b.z); }
        if (b.w != blk.w) { s.w = absmax(b.w); }
        blk = b;
        let q0 = q[j.x >> 3u];
        let q1 = q[j.y >> 3u];
        let q2 = q[j.z >> 3u];
        let q3 = q[j.w >> 3u];
        let a0 = lo4(q0, s.x);
        let b0 = hi4(q0, s.x);
        let a1 = lo4(q1, s.y);
        let b1 = hi4(q1, s.y);
        let a2 = lo4(q2, s.z);
        let b2 = hi4(q2, s.z);
        let a3 = lo4(q3, s.w);
        let b3 = hi4(q3, s.w);
        let kk = k >> 2u;
        c0 += row(x[x0 + kk], x[x0 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c1 += row(x[x1 + kk], x[x1 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c2 += row(x[x2 + kk], x[x2 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c3 += row(x[x3 + kk], x[x3 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c4 += row(x[x4 + kk], x[x4 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c5 += row(x[x5 + kk], x[x5 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c6 += row(x[x6 + kk], x[x6 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
        c7 += row(x[x7 + kk], x[x7 + kk + 1u], a0, b0, a1, b1, a2, b2, a3, b3);
    }
    store(r0, o0, c0);
    store(r0 + 1u, o0, c1);
    store(r0 + 2u, o0, c2);
    store(r0 + 3u, o0, c3);
    store(r0 + 4u, o0, c4);
    store(r0 + 5u, o0, c5);
    store(r0 + 6u, o0, c6);
    store(r0 + 7u, o0, c7);
}
