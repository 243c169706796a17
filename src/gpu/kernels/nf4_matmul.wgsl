// nf4_matmul.wgsl: fused dequantize-matmul for the forward of a frozen 4-bit projection, with no dense copy of W:
//   y[m, o] = alpha * sum_k x[m, k] * W[o, k] + beta * y[m, o]      (beta == 0 does not read y)
// W is [rows = out features, cols = in features] in NF4 with double quantization (see nf4_dequant.wgsl). Each
// invocation computes a block of 8 tokens x 4 output features: for every 8 consecutive k it decodes one packed u32
// word (8 nibbles, the high nibble of each byte first) and one block absmax per output feature, and uses them for
// all 8 tokens, so each weight is decoded once per 8 tokens. cols % 8 == 0.
// Bindings (group 0):
//   0 x: storage, read      array<f32>  [m, cols] from x_off
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

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> codes: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn absmax(i: u32) -> f32 {
    let qb = (q[p.qabs_word + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
    return codes[qb] * bitcast<f32>(q[p.abs2_word + (i >> 8u)]) + bitcast<f32>(q[p.off_word]);
}

// W[o, k..k+4] and W[o, k+4..k+8] (k % 8 == 0), from one packed word.
fn lo4(word: u32, s: f32) -> vec4<f32> {
    return vec4<f32>(
        codes[256u + ((word >> 4u) & 0xfu)], codes[256u + (word & 0xfu)],
        codes[256u + ((word >> 12u) & 0xfu)], codes[256u + ((word >> 8u) & 0xfu)]) * s;
}
fn hi4(word: u32, s: f32) -> vec4<f32> {
    return vec4<f32>(
        codes[256u + ((word >> 20u) & 0xfu)], codes[256u + ((word >> 16u) & 0xfu)],
        codes[256u + ((word >> 28u) & 0xfu)], codes[256u + ((word >> 24u) & 0xfu)]) * s;
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r0 = gid.y * 8u;
    let o0 = gid.x * 4u;
    if (r0 >= p.m || o0 >= p.rows) { return; }
    // Rows and features past the edge read the last valid one and are not written.
    var xr: array<u32, 8>;
    var wr: vec4<u32>;
    for (var i = 0u; i < 8u; i++) {
        xr[i] = p.x_off + min(r0 + i, p.m - 1u) * p.cols;
    }
    for (var i = 0u; i < 4u; i++) {
        wr[i] = min(o0 + i, p.rows - 1u) * p.cols;
    }
    var acc: array<vec4<f32>, 8>;
    for (var i = 0u; i < 8u; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var k = 0u; k < p.cols; k += 8u) {
        let j0 = wr.x + k;
        let j1 = wr.y + k;
        let j2 = wr.z + k;
        let j3 = wr.w + k;
        let q0 = q[j0 >> 3u];
        let q1 = q[j1 >> 3u];
        let q2 = q[j2 >> 3u];
        let q3 = q[j3 >> 3u];
        let s0 = absmax(j0 >> 6u);
        let s1 = absmax(j1 >> 6u);
        let s2 = absmax(j2 >> 6u);
        let s3 = absmax(j3 >> 6u);
        let a0 = lo4(q0, s0);
        let b0 = hi4(q0, s0);
        let a1 = lo4(q1, s1);
        let b1 = hi4(q1, s1);
        let a2 = lo4(q2, s2);
        let b2 = hi4(q2, s2);
        let a3 = lo4(q3, s3);
        let b3 = hi4(q3, s3);
        for (var i = 0u; i < 8u; i++) {
            let base = xr[i] + k;
            let xl = vec4<f32>(x[base], x[base + 1u], x[base + 2u], x[base + 3u]);
            let xh = vec4<f32>(x[base + 4u], x[base + 5u], x[base + 6u], x[base + 7u]);
            acc[i] += vec4<f32>(
                dot(xl, a0) + dot(xh, b0), dot(xl, a1) + dot(xh, b1),
                dot(xl, a2) + dot(xh, b2), dot(xl, a3) + dot(xh, b3));
        }
    }
    for (var i = 0u; i < 8u; i++) {
        let r = r0 + i;
        if (r >= p.m) { break; }
        for (var j = 0u; j < 4u; j++) {
            let o = o0 + j;
            if (o >= p.rows) { break; }
            let at = p.y_off + r * p.rows + o;
            if (p.beta == 0.0) { y[at] = p.alpha * acc[i][j]; } else { y[at] = p.alpha * acc[i][j] + p.beta * y[at]; }
        }
    }
}
