// attn_eager_bwd_ds.wgsl: eager attention backward, step 1, one invocation per query row (b, head, i):
//   dP_ij = dO_i . v_j,  r = sum_j P_ij dP_ij,  dS_ij = P_ij (dP_ij - r)   (0 above the diagonal)
// dS ([batch, heads, seq, seq]) is materialized, like the softmax backward of eager attention in PyTorch.
// Bindings (group 0):
//   0 v: storage, read     1 p: storage, read (probabilities)     2 dout: storage, read
//   3 ds: storage, rw
//   4 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over batch * heads * seq rows, workgroups of 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> v: array<f32>;
@group(0) @binding(1) var<storage, read> probs: array<f32>;
@group(0) @binding(2) var<storage, read> dout: array<f32>;
@group(0) @binding(3) var<storage, read_write> ds: array<f32>;
@group(0) @binding(4) var<uniform> prm: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let rows = prm.batch * prm.heads * prm.seq;
    let group = prm.heads / prm.kv_heads;
    let stride = nwg.x * 64u;
    for (var r = gid.x; r < rows; r += stride) {
        let i = r % prm.seq;
        let bh = r / prm.seq;
        let h = bh % prm.heads;
        let b = bh / prm.heads;
        let qo = (b * prm.seq + i) * prm.heads * prm.d + h * prm.d;
        let kvh = (h / group) * prm.d;
        let kvw = prm.kv_heads * prm.d;
        let prow = r * prm.seq;
        var rsum = 0.0;
        for (var j = 0u; j <= i; j++) {
            let vo = (b * prm.seq + j) * kvw + kvh;
            var dp = 0.0;
            for (var dd = 0u; dd < prm.d; dd++) { dp += dout[qo + dd] * v[vo + dd]; }
            ds[prow + j] = dp;
            rsum += probs[prow + j] * dp;
        }
        for (var j = 0u; j < prm.seq; j++) {
            if (j <= i) { ds[prow + j] = probs[prow + j] * (ds[prow + j] - rsum); } else { ds[prow + j] = 0.0; }
        }
    }
}
