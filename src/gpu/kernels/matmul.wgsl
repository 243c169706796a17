// matmul.wgsl: dense f32 matmul with strided operands, which covers every layout of the step (NN, NT, TN):
//   C[m, n] = alpha * sum_k A(m, k) * B(k, n) + beta * C[m, n]      (beta == 0 does not read C)
// with A(r, c) = a[a_off + r * a_rs + c * a_cs], B(r, c) = b[b_off + r * b_rs + c * b_cs] and C dense row-major
// from c_off. Used for the LoRA products (x A^T, u B^T, dy^T u, dy B, gu^T x, gu A), the LM head (x W^T) and its
// backward (dlogits W). Each invocation computes a 4x4 block of C in registers, k in order.
// Bindings (group 0):
//   0 a: storage, read   array<f32>
//   1 b: storage, read   array<f32>
//   2 c: storage, rw     array<f32>
//   3 p: uniform         Params      mirrored by `Matmul` in src/gpu/params.rs (keep in sync)
// Dispatch: (ceil(n / 32), ceil(m / 32)) workgroups of 8x8.

struct Params {
    m: u32, n: u32, k: u32, a_off: u32,
    a_rs: u32, a_cs: u32, b_off: u32, b_rs: u32,
    b_cs: u32, c_off: u32, alpha: f32, beta: f32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r0 = gid.y * 4u;
    let c0 = gid.x * 4u;
    if (r0 >= p.m || c0 >= p.n) { return; }
    // Rows and columns past the edge read the last valid one and are not written.
    var ra: vec4<u32>;
    var cb: vec4<u32>;
    for (var i = 0u; i < 4u; i++) {
        ra[i] = p.a_off + min(r0 + i, p.m - 1u) * p.a_rs;
        cb[i] = p.b_off + min(c0 + i, p.n - 1u) * p.b_cs;
    }
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var kk = 0u; kk < p.k; kk++) {
        let ka = kk * p.a_cs;
        let kb = kk * p.b_rs;
        let bv = vec4<f32>(b[cb.x + kb], b[cb.y + kb], b[cb.z + kb], b[cb.w + kb]);
        acc0 += a[ra.x + ka] * bv;
        acc1 += a[ra.y + ka] * bv;
        acc2 += a[ra.z + ka] * bv;
        acc3 += a[ra.w + ka] * bv;
    }
    var acc = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + i;
        if (r >= p.m) { break; }
        for (var j = 0u; j < 4u; j++) {
            let col = c0 + j;
            if (col >= p.n) { break; }
            let o = p.c_off + r * p.n + col;
            if (p.beta == 0.0) { c[o] = p.alpha * acc[i][j]; } else { c[o] = p.alpha * acc[i][j] + p.beta * c[o]; }
        }
    }
}
