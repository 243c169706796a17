// nf4_matmul_t.wgsl: fused dequantize-matmul for the backward of a frozen 4-bit projection (the input gradient),
// with no dense copy of W:
//   dx[m, i] = alpha * sum_o dy[m, o] * W[o, i] + beta * dx[m, i]      (beta == 0 does not read dx)
// W is [rows = out features, cols = in features] in NF4 with double quantization (see nf4_dequant.wgsl). Each
// invocation computes a block of 4 tokens x 8 input features: for every o it decodes one packed u32 word (the 8
// weights W[o, i..i+8]) and one block absmax and uses them for all 4 tokens. cols % 8 == 0.
// Bindings (group 0):
//   0 dy: storage, read  array<f32>  [m, rows] from x_off
//   1 q: storage, read   array<u32>  the NF4 weight (Nf4Layout)
//   2 dx: storage, rw    array<f32>  [m, cols] from y_off
//   3 codes: storage, read array<f32> DYN8 (256 values) then NF4 (16 values)
//   4 p: uniform         Params      mirrored by `Nf4Matmul` in src/gpu/params.rs (keep in sync)
// Dispatch: (ceil(cols / 64), ceil(m / 32)) workgroups of 8x8.

struct Params {
    m: u32, rows: u32, cols: u32, x_off: u32,
    y_off: u32, qabs_word: u32, abs2_word: u32, off_word: u32,
    alpha: f32, beta: f32, pad0: u32, pad1: u32,
}

@group(0) @binding(0) var<storage, read> dy: array<f32>;
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;
@group(0) @binding(3) var<storage, read> codes: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

// The 16 NF4 values, copied from `codes` once per invocation: the decode then reads private memory, not storage.
var<private> table: array<f32, 16>;

fn nf4(c: u32) -> f32 {
    return table[c & 0xfu];
}

fn absmax(i: u32) -> f32 {
    let qb = (q[p.qabs_word + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
    return codes[qb] * bitcast<f32>(q[p.abs2_word + (i >> 8u)]) + bitcast<f32>(q[p.off_word]);
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r0 = gid.y * 4u;
    let i0 = gid.x * 8u;
    if (r0 >= p.m || i0 >= p.cols) { return; }
    for (var i = 0u; i < 16u; i++) {
        table[i] = codes[256u + i];
    }
    var dr: vec4<u32>;
    for (var i = 0u; i < 4u; i++) {
        dr[i] = p.x_off + min(r0 + i, p.m - 1u) * p.rows;
    }
    var lo: array<vec4<f32>, 4>;
    var hi: array<vec4<f32>, 4>;
    for (var o = 0u; o < p.rows; o++) {
        let j = o * p.cols + i0;
        let word = q[j >> 3u];
        let s = absmax(j >> 6u);
        let b0 = word & 0xffu;
        let b1 = (word >> 8u) & 0xffu;
        let b2 = (word >> 16u) & 0xffu;
        let b3 = (word >> 24u) & 0xffu;
        let wl = vec4<f32>(nf4(b0 >> 4u), nf4(b0 & 0xfu), nf4(b1 >> 4u), nf4(b1 & 0xfu)) * s;
        let wh = vec4<f32>(nf4(b2 >> 4u), nf4(b2 & 0xfu), nf4(b3 >> 4u), nf4(b3 & 0xfu)) * s;
        for (var i = 0u; i < 4u; i++) {
            let d = dy[dr[i] + o];
            lo[i] += d * wl;
            hi[i] += d * wh;
        }
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + i;
        if (r >= p.m) { break; }
        for (var j = 0u; j < 8u; j++) {
            let col = i0 + j;
            if (col >= p.cols) { break; }
            var v: f32;
            if (j < 4u) { v = lo[i][j]; } else { v = hi[i][j - 4u]; }
            let at = p.y_off + r * p.cols + col;
            if (p.beta == 0.0) { dx[at] = p.alpha * v; } else { dx[at] = p.alpha * v + p.beta * dx[at]; }
        }
    }
}
