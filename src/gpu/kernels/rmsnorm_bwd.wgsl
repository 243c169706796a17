// rmsnorm_bwd.wgsl: RMSNorm backward into its input (the weight is frozen), one workgroup per row:
//   c = sum_j(w[j] * dy[r, j] * x[r, j]) / h
//   dx[r, j] (+)= rstd[r] * w[j] * dy[r, j] - x[r, j] * rstd[r]^3 * c
// With accumulate = 1 the result is added to dx (the residual stream's gradient), else written.
// Bindings (group 0):
//   0 dy: storage, read    array<f32>  [rows, h]
//   1 x: storage, read     array<f32>  [rows, h] (the saved norm input)
//   2 w: storage, read     array<f32>  [h]
//   3 rstd: storage, read  array<f32>  [rows]
//   4 dx: storage, rw      array<f32>  [rows, h]
//   5 p: uniform           Params      mirrored by `RmsNorm` in src/gpu/params.rs (keep in sync)
// Dispatch: (rows) workgroups of 64.

struct Params { rows: u32, h: u32, eps: f32, accumulate: u32 }

@group(0) @binding(0) var<storage, read> dy: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> rstd: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let r = wid.x;
    let base = r * p.h;
    var s = 0.0;
    for (var j = lid.x; j < p.h; j += 64u) {
        s += w[j] * dy[base + j] * x[base + j];
    }
    part[lid.x] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid.x < k) { part[lid.x] += part[lid.x + k]; }
        workgroupBarrier();
    }
    let c = part[0] / f32(p.h);
    let rs = rstd[r];
    let rs3 = rs * rs * rs;
    for (var j = lid.x; j < p.h; j += 64u) {
        let g = rs * w[j] * dy[base + j] - x[base + j] * rs3 * c;
        if (p.accumulate != 0u) { dx[base + j] = dx[base + j] + g; } else { dx[base + j] = g; }
    }
}
