// ce_bwd.wgsl: cross-entropy backward over a block of logit rows, elementwise:
//   dlogits[r, c] = (exp(x[r, c] - lse[row]) - (c == label[row])) * scale,  row = row_off + r,  scale = 1 / tokens
// Bindings (group 0):
//   0 logits: storage, read  array<f32>  [rows, vocab]
//   1 labels: storage, read  array<u32>  [tokens]
//   2 lse: storage, read     array<f32>  [tokens]
//   3 dlogits: storage, rw   array<f32>  [rows, vocab]
//   4 p: uniform Params      mirrored by `CrossEntropy` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over rows * vocab, workgroups of 256.

struct Params { rows: u32, vocab: u32, row_off: u32, scale: f32 }

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> labels: array<u32>;
@group(0) @binding(2) var<storage, read> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var e = gid.x; e < p.rows * p.vocab; e += stride) {
        let row = p.row_off + e / p.vocab;
        let c = e % p.vocab;
        let pr = exp(logits[e] - lse[row]);
        let onehot = select(0.0, 1.0, c == labels[row]);
        dlogits[e] = (pr - onehot) * p.scale;
    }
}
