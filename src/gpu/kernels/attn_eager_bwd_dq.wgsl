// attn_eager_bwd_dq.wgsl: eager attention backward, step 2, one invocation per element of dQ:
//   dQ[b, i, head, dd] = scale * sum_{j <= i} dS[b, head, i, j] * k[b, j, kv_head, dd]
// Bindings (group 0):
//   0 k: storage, read     1 ds: storage, read     2 dq: storage, rw  [tokens, heads * d]
//   3 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over batch * heads * seq * d, workgroups of 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> k: array<f32>;
@group(0) @binding(1) var<storage, read> ds: array<f32>;
@group(0) @binding(2) var<storage, read_write> dq: array<f32>;
@group(0) @binding(3) var<uniform> prm: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let total = prm.batch * prm.heads * prm.seq * prm.d;
    let group = prm.heads / prm.kv_heads;
    let stride = nwg.x * 64u;
    for (var e = gid.x; e < total; e += stride) {
        let dd = e % prm.d;
        let r = e / prm.d;
        let i = r % prm.seq;
        let bh = r / prm.seq;
        let h = bh % prm.heads;
        let b = bh / prm.heads;
        let kvh = (h / group) * prm.d;
        let kvw = prm.kv_heads * prm.d;
        let prow = r * prm.seq;
        var acc = 0.0;
        for (var j = 0u; j <= i; j++) {
            acc += ds[prow + j] * k[(b * prm.seq + j) * kvw + kvh + dd];
        }
        dq[(b * prm.seq + i) * prm.heads * prm.d + h * prm.d + dd] = acc * prm.scale;
    }
}
