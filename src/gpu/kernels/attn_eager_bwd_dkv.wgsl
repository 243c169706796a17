// attn_eager_bwd_dkv.wgsl: eager attention backward, step 3, one invocation per element of dK and dV, summing over
// the query heads that share the key/value head and over the queries at or after the key:
//   dK[b, j, kvh, dd] = scale * sum_{head in group} sum_{i >= j} dS[b, head, i, j] * q[b, i, head, dd]
//   dV[b, j, kvh, dd] =         sum_{head in group} sum_{i >= j} P[b, head, i, j] * dO[b, i, head, dd]
// Bindings (group 0):
//   0 q: storage, read     1 p: storage, read (probabilities)     2 dout: storage, read     3 ds: storage, read
//   4 dk: storage, rw      5 dv: storage, rw   [tokens, kv_heads * d]
//   6 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over batch * kv_heads * seq * d, workgroups of 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> probs: array<f32>;
@group(0) @binding(2) var<storage, read> dout: array<f32>;
@group(0) @binding(3) var<storage, read> ds: array<f32>;
@group(0) @binding(4) var<storage, read_write> dk: array<f32>;
@group(0) @binding(5) var<storage, read_write> dv: array<f32>;
@group(0) @binding(6) var<uniform> prm: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let total = prm.batch * prm.kv_heads * prm.seq * prm.d;
    let group = prm.heads / prm.kv_heads;
    let stride = nwg.x * 64u;
    for (var e = gid.x; e < total; e += stride) {
        let dd = e % prm.d;
        let r = e / prm.d;
        let j = r % prm.seq;
        let bk = r / prm.seq;
        let kh = bk % prm.kv_heads;
        let b = bk / prm.kv_heads;
        var ak = 0.0;
        var av = 0.0;
        for (var h = kh * group; h < (kh + 1u) * group; h++) {
            for (var i = j; i < prm.seq; i++) {
                let pi = ((b * prm.heads + h) * prm.seq + i) * prm.seq + j;
                let qo = (b * prm.seq + i) * prm.heads * prm.d + h * prm.d + dd;
                ak += ds[pi] * q[qo];
                av += probs[pi] * dout[qo];
            }
        }
        let o = (b * prm.seq + j) * prm.kv_heads * prm.d + kh * prm.d + dd;
        dk[o] = ak * prm.scale;
        dv[o] = av;
    }
}
