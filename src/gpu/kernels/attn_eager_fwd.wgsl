// attn_eager_fwd.wgsl: eager causal self-attention forward (GQA), one invocation per query row (b, head, i):
//   s_j = (q_i . k_j) * scale for j <= i,  P[b, head, i, j] = exp(s_j - max) / sum  (0 above the diagonal)
//   o_i = sum_j P_ij v_j
// The probabilities P ([batch, heads, seq, seq]) are materialized and kept for backward. Key/value head of a query
// head: head / (heads / kv_heads). q and o are [tokens, heads * d]; k and v are [tokens, kv_heads * d].
// Bindings (group 0):
//   0 q: storage, read     1 k: storage, read     2 v: storage, read
//   3 p: storage, rw  (probabilities)             4 o: storage, rw
//   5 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over batch * heads * seq rows, workgroups of 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> probs: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@group(0) @binding(5) var<uniform> prm: Params;

const NEG_BIG: f32 = -3.0e38;

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
        var mx = NEG_BIG;
        for (var j = 0u; j <= i; j++) {
            let ko = (b * prm.seq + j) * kvw + kvh;
            var s = 0.0;
            for (var dd = 0u; dd < prm.d; dd++) { s += q[qo + dd] * k[ko + dd]; }
            s = s * prm.scale;
            probs[prow + j] = s;
            mx = max(mx, s);
        }
        var sum = 0.0;
        for (var j = 0u; j <= i; j++) {
            let e = exp(probs[prow + j] - mx);
            probs[prow + j] = e;
            sum += e;
        }
        for (var j = 0u; j < prm.seq; j++) {
            if (j <= i) { probs[prow + j] = probs[prow + j] / sum; } else { probs[prow + j] = 0.0; }
        }
        for (var dd = 0u; dd < prm.d; dd++) {
            var acc = 0.0;
            for (var j = 0u; j <= i; j++) {
                acc += probs[prow + j] * v[(b * prm.seq + j) * kvw + kvh + dd];
            }
            o[qo + dd] = acc;
        }
    }
}
