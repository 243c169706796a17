// swiglu_fwd.wgsl: the gated MLP activation, m = silu(g) * u with silu(g) = g * sigmoid(g), elementwise.
// g and u are kept for backward; m is the down projection's input.
// Bindings (group 0):
//   0 g: storage, read     1 u: storage, read     2 m: storage, rw     (all [tokens, intermediate])
//   3 p: uniform Params    mirrored by `Elementwise` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over n, workgroups of 256.

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read> g: array<f32>;
@group(0) @binding(1) var<storage, read> u: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        let sig = 1.0 / (1.0 + exp(-g[i]));
        m[i] = g[i] * sig * u[i];
    }
}
