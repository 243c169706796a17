// loss_sum.wgsl: the mean loss, one invocation: loss[0] = (sum of rowloss[0..n] in order) / n.
// Bindings (group 0):
//   0 rowloss: storage, read  array<f32>  [n]
//   1 loss: storage, rw       array<f32>  [1]
//   2 p: uniform Params       mirrored by `Elementwise` in src/gpu/params.rs (keep in sync)
// Dispatch: (1) workgroup of 1.

struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read> rowloss: array<f32>;
@group(0) @binding(1) var<storage, read_write> loss: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(1)
fn main() {
    var s = 0.0;
    for (var i = 0u; i < p.n; i++) { s += rowloss[i]; }
    loss[0] = s / f32(max(p.n, 1u));
}
