// attn_tiled_bwd_dq.wgsl: tiled attention backward, step 1, one invocation per query row (b, head, i). Recomputes the
// probabilities from the saved log-sum-exp instead of reading stored scores:
//   D_i = dO_i . o_i  (written to delta for step 2)
//   P_ij = exp((q_i . k_j) * scale - lse_i),  dS_ij = P_ij (dO_i . v_j - D_i)
//   dQ_i = scale * sum_{j <= i} dS_ij k_j
// Bindings (group 0):
//   0 q: storage, read    1 k: storage, read    2 v: storage, read    3 o: storage, read    4 lse: storage, read
//   5 dout: storage, read    6 delta: storage, rw [batch, heads, seq]    7 dq: storage, rw [tokens, heads * d]
//   8 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over batch * heads * seq rows, workgroups of 64; d <= 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> o: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read_write> delta: array<f32>;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;
@group(0) @binding(8) var<uniform> prm: Params;

const MAX_D: u32 = 64u;

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
        var dl = 0.0;
        for (var dd = 0u; dd < prm.d; dd++) { dl += dout[qo + dd] * o[qo + dd]; }
        delta[r] = dl;
        var acc: array<f32, MAX_D>;
        for (var dd = 0u; dd < prm.d; dd++) { acc[dd] = 0.0; }
        for (var j = 0u; j <= i; j++) {
            let ko = (b * prm.seq + j) * kvw + kvh;
            var s = 0.0;
            for (var dd = 0u; dd < prm.d; dd++) { s += q[qo + dd] * k[ko + dd]; }
            let pj = exp(s * prm.scale - lse[r]);
            var dp = 0.0;
            for (var dd = 0u; dd < prm.d; dd++) { dp += dout[qo + dd] * v[ko + dd]; }
            let dsj = pj * (dp - dl);
            for (var dd = 0u; dd < prm.d; dd++) { acc[dd] += dsj * k[ko + dd]; }
        }
        for (var dd = 0u; dd < prm.d; dd++) { dq[qo + dd] = acc[dd] * prm.scale; }
    }
}
