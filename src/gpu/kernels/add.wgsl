// add.wgsl: the residual connection in place, a[i] = a[i] + b[i] (a: a projection's output, b: the stream).
// Bindings (group 0):
//   0 a: storage, rw    1 b: storage, read
//   2 p: uniform Params mirrored by `Elementwise` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over n, workgroups of 256.

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        a[i] = a[i] + b[i];
    }
}
