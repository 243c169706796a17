// attn_tiled_bwd_dkv.wgsl: tiled attention backward, step 2, one invocation per key row (b, kv_head, j), recomputing
// the probabilities from the log-sum-exp, over the query heads of the group and the queries i >= j:
//   P_ij = exp((q_i . k_j) * scale - lse_i),  dS_ij = P_ij (dO_i . v_j - D_i)
//   dV_j = sum P_ij dO_i,  dK_j = scale * sum dS_ij q_i
// Bindings (group 0):
//   0 q: storage, read    1 k: storage, read    2 v: storage, read    3 lse: storage, read    4 delta: storage, read
//   5 dout: storage, read    6 dk: storage, rw [tokens, kv_heads * d]    7 dv: storage, rw [tokens, kv_heads * d]
//   8 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over batch * kv_heads * seq rows, workgroups of 64; d <= 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> delta: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read_write> dk: array<f32>;
@group(0) @binding(7) var<storage, read_write> dv: array<f32>;
@group(0) @binding(8) var<uniform> prm: Params;

const MAX_D: u32 = 64u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let rows = prm.batch * prm.kv_heads * prm.seq;
    let group = prm.heads / prm.kv_heads;
    let stride = nwg.x * 64u;
    for (var r = gid.x; r < rows; r += stride) {
        let j = r % prm.seq;
        let bk = r / prm.seq;
        let kh = bk % prm.kv_heads;
        let b = bk / prm.kv_heads;
        let ko = (b * prm.seq + j) * prm.kv_heads * prm.d + kh * prm.d;
        var ak: array<f32, MAX_D>;
        var av: array<f32, MAX_D>;
        for (var dd = 0u; dd < prm.d; dd++) {
            ak[dd] = 0.0;
            av[dd] = 0.0;
        }
        for (var h = kh * group; h < (kh + 1u) * group; h++) {
            for (var i = j; i < prm.seq; i++) {
                let qo = (b * prm.seq + i) * prm.heads * prm.d + h * prm.d;
                let row = (b * prm.heads + h) * prm.seq + i;
                var s = 0.0;
                for (var dd = 0u; dd < prm.d; dd++) { s += q[qo + dd] * k[ko + dd]; }
                let pij = exp(s * prm.scale - lse[row]);
                var dp = 0.0;
                for (var dd = 0u; dd < prm.d; dd++) { dp += dout[qo + dd] * v[ko + dd]; }
                let dsij = pij * (dp - delta[row]);
                for (var dd = 0u; dd < prm.d; dd++) {
                    av[dd] += pij * dout[qo + dd];
                    ak[dd] += dsij * q[qo + dd];
                }
            }
        }
        for (var dd = 0u; dd < prm.d; dd++) {
            dk[ko + dd] = ak[dd] * prm.scale;
            dv[ko + dd] = av[dd];
        }
    }
}
