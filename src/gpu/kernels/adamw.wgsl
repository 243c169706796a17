// adamw.wgsl: one AdamW step in place, as torch.optim.AdamW (single-tensor path), elementwise:
//   p *= decay                                  (decay = 1 - lr * weight_decay: decoupled weight decay)
//   m += (1 - beta1) * (g - m)
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)   (step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t))
// The step-dependent coefficients come from the host (f64 there, as torch computes them in Python floats).
// Bindings (group 0):
//   0 param: storage, rw   1 grad: storage, read   2 m: storage, rw   3 v: storage, rw
//   4 p: uniform Params    mirrored by `Adamw` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over n, workgroups of 256.

struct Params {
    n: u32, decay: f32, one_minus_beta1: f32, beta2: f32,
    one_minus_beta2: f32, eps: f32, step_size: f32, bc2_sqrt: f32,
}

@group(0) @binding(0) var<storage, read_write> param: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        let g = grad[i];
        var w = param[i] * p.decay;
        let mi = m[i] + p.one_minus_beta1 * (g - m[i]);
        let vi = p.beta2 * v[i] + p.one_minus_beta2 * (g * g);
        let denom = sqrt(vi) / p.bc2_sqrt + p.eps;
        w = w - p.step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        param[i] = w;
    }
}
