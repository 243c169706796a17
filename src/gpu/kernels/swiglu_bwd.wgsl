// swiglu_bwd.wgsl: backward of m = silu(g) * u, elementwise:
//   du = dm * silu(g),  dg = dm * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))
// Bindings (group 0):
//   0 dm: storage, read    1 g: storage, read    2 u: storage, read
//   3 dg: storage, rw      4 du: storage, rw     (all [tokens, intermediate])
//   5 p: uniform Params    mirrored by `Elementwise` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over n, workgroups of 256.

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read> dm: array<f32>;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> u: array<f32>;
@group(0) @binding(3) var<storage, read_write> dg: array<f32>;
@group(0) @binding(4) var<storage, read_write> du: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        let gv = g[i];
        let sig = 1.0 / (1.0 + exp(-gv));
        du[i] = dm[i] * (gv * sig);
        dg[i] = dm[i] * u[i] * sig * (1.0 + gv * (1.0 - sig));
    }
}
