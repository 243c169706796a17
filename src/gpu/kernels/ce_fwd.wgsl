// ce_fwd.wgsl: cross-entropy forward over a block of logit rows (all tokens for the whole loss, one chunk for the
// chunked loss), one workgroup per row:
//   lse = max + log(sum_c exp(x_c - max)),  rowloss = lse - x[label]
// written at row out_off + r of lse and rowloss (labels are read at the same row).
// Bindings (group 0):
//   0 logits: storage, read  array<f32>  [rows, vocab]
//   1 labels: storage, read  array<u32>  [tokens]
//   2 lse: storage, rw       array<f32>  [tokens]
//   3 rowloss: storage, rw   array<f32>  [tokens]
//   4 p: uniform Params      mirrored by `CrossEntropy` in src/gpu/params.rs (keep in sync)
// Dispatch: (rows) workgroups of 256.

struct Params { rows: u32, vocab: u32, row_off: u32, scale: f32 }

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> labels: array<u32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> rowloss: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const NEG_BIG: f32 = -3.0e38;
var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let r = wid.x;
    let base = r * p.vocab;
    var mx = NEG_BIG;
    for (var c = lid.x; c < p.vocab; c += 256u) { mx = max(mx, logits[base + c]); }
    part[lid.x] = mx;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (lid.x < k) { part[lid.x] = max(part[lid.x], part[lid.x + k]); }
        workgroupBarrier();
    }
    let m = part[0];
    workgroupBarrier();
    var s = 0.0;
    for (var c = lid.x; c < p.vocab; c += 256u) { s += exp(logits[base + c] - m); }
    part[lid.x] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (lid.x < k) { part[lid.x] += part[lid.x + k]; }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        let l = m + log(part[0]);
        let row = p.row_off + r;
        let label = min(labels[row], p.vocab - 1u);
        lse[row] = l;
        rowloss[row] = l - logits[base + label];
    }
}
