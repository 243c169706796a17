// rope.wgsl: rotary position embedding in place, Hugging Face rotate_half pairing (j, j + d/2):
//   a = x[j], b = x[j + d/2], c = cos[pos, j], s = sign * sin[pos, j]
//   x[j] = a * c - b * s,  x[j + d/2] = b * c + a * s
// sign = 1 is the forward; sign = -1 applies the transposed rotation (the backward). pos = token % seq.
// Bindings (group 0):
//   0 x: storage, rw       array<f32>  [tokens, heads * d]
//   1 table: storage, read array<f32>  cos [seq, d/2] then sin [seq, d/2]
//   2 p: uniform           Params      mirrored by `Rope` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over tokens * heads * d/2, workgroups of 256.

struct Params { tokens: u32, seq: u32, heads: u32, d: u32, sign: f32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let half = p.d / 2u;
    let total = p.tokens * p.heads * half;
    let stride = nwg.x * 256u;
    for (var e = gid.x; e < total; e += stride) {
        let j = e % half;
        let th = e / half;
        let hh = th % p.heads;
        let t = th / p.heads;
        let pos = t % p.seq;
        let c = table[pos * half + j];
        let s = p.sign * table[p.seq * half + pos * half + j];
        let i0 = t * p.heads * p.d + hh * p.d + j;
        let i1 = i0 + half;
        let a = x[i0];
        let b = x[i1];
        x[i0] = a * c - b * s;
        x[i1] = b * c + a * s;
    }
}
