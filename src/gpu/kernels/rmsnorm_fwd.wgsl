// rmsnorm_fwd.wgsl: RMSNorm forward, one workgroup per row:
//   rstd[r] = 1 / sqrt(mean_j(x[r, j]^2) + eps),  y[r, j] = (x[r, j] * rstd[r]) * w[j]
// rstd is kept for backward.
// Bindings (group 0):
//   0 x: storage, read     array<f32>  [rows, h]
//   1 w: storage, read     array<f32>  [h]
//   2 y: storage, rw       array<f32>  [rows, h]
//   3 rstd: storage, rw    array<f32>  [rows]
//   4 p: uniform           Params      mirrored by `RmsNorm` in src/gpu/params.rs (keep in sync)
// Dispatch: (rows) workgroups of 64.

struct Params { rows: u32, h: u32, eps: f32, accumulate: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let r = wid.x;
    let base = r * p.h;
    var s = 0.0;
    for (var j = lid.x; j < p.h; j += 64u) {
        let v = x[base + j];
        s += v * v;
    }
    part[lid.x] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid.x < k) { part[lid.x] += part[lid.x + k]; }
        workgroupBarrier();
    }
    let rs = 1.0 / sqrt(part[0] / f32(p.h) + p.eps);
    if (lid.x == 0u) { rstd[r] = rs; }
    for (var j = lid.x; j < p.h; j += 64u) {
        y[base + j] = x[base + j] * rs * w[j];
    }
}
