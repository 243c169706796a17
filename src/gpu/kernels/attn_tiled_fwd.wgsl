// attn_tiled_fwd.wgsl: tiled causal self-attention forward with an online softmax (flash-style), which never
// materializes the scores. A workgroup holds 64 query rows of one (batch, head); key/value rows stream through
// workgroup memory 16 at a time, and each invocation keeps a running max m, sum l and output accumulator:
//   s = (q_i . k_j) * scale,  m' = max(m, s),  c = exp(m - m'),  e = exp(s - m')
//   l = l * c + e,  acc = acc * c + e * v_j,  m = m'        for j <= i, in order
//   o_i = acc / l,  lse_i = m + log(l)                      (o and lse are what backward keeps)
// Bindings (group 0):
//   0 q: storage, read     1 k: storage, read     2 v: storage, read
//   3 o: storage, rw  [tokens, heads * d]         4 lse: storage, rw  [batch, heads, seq]
//   5 prm: uniform Params  mirrored by `Attn` in src/gpu/params.rs (keep in sync)
// Dispatch: (ceil(seq / 64), batch * heads) workgroups of 64; d <= 64.

struct Params { batch: u32, seq: u32, heads: u32, kv_heads: u32, d: u32, scale: f32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;
@group(0) @binding(5) var<uniform> prm: Params;

const TILE: u32 = 16u;
const MAX_D: u32 = 64u;
const NEG_BIG: f32 = -3.0e38;

var<workgroup> kt: array<f32, 1024>;
var<workgroup> vt: array<f32, 1024>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let bh = wid.y;
    let h = bh % prm.heads;
    let b = bh / prm.heads;
    let i = wid.x * 64u + lid.x;
    let group = prm.heads / prm.kv_heads;
    let kvh = (h / group) * prm.d;
    let kvw = prm.kv_heads * prm.d;
    let in_range = i < prm.seq;
    let qo = (b * prm.seq + min(i, prm.seq - 1u)) * prm.heads * prm.d + h * prm.d;
    var qv: array<f32, MAX_D>;
    var acc: array<f32, MAX_D>;
    for (var dd = 0u; dd < prm.d; dd++) {
        qv[dd] = q[qo + dd];
        acc[dd] = 0.0;
    }
    var m = NEG_BIG;
    var l = 0.0;
    // Keys up to the workgroup's last query: a uniform bound, so every invocation reaches the barriers.
    let last = min(prm.seq, (wid.x + 1u) * 64u);
    for (var t = 0u; t < last; t += TILE) {
        for (var e = lid.x; e < TILE * prm.d; e += 64u) {
            let j = t + e / prm.d;
            var kv = 0.0;
            var vv = 0.0;
            if (j < prm.seq) {
                let src = (b * prm.seq + j) * kvw + kvh + e % prm.d;
                kv = k[src];
                vv = v[src];
            }
            kt[e] = kv;
            vt[e] = vv;
        }
        workgroupBarrier();
        for (var jj = 0u; jj < TILE; jj++) {
            let j = t + jj;
            if (in_range && j <= i) {
                var s = 0.0;
                for (var dd = 0u; dd < prm.d; dd++) { s += qv[dd] * kt[jj * prm.d + dd]; }
                s = s * prm.scale;
                let mn = max(m, s);
                let c = exp(m - mn);
                let e = exp(s - mn);
                l = l * c + e;
                for (var dd = 0u; dd < prm.d; dd++) { acc[dd] = acc[dd] * c + e * vt[jj * prm.d + dd]; }
                m = mn;
            }
        }
        workgroupBarrier();
    }
    if (in_range) {
        for (var dd = 0u; dd < prm.d; dd++) { o[qo + dd] = acc[dd] / l; }
        lse[bh * prm.seq + i] = m + log(l);
    }
}
