// embed.wgsl: token embedding lookup, out[t, j] = table[ids[t], j] (ids at or above vocab read row vocab - 1).
// Bindings (group 0):
//   0 ids: storage, read    array<u32>  [tokens]
//   1 table: storage, read  array<f32>  [vocab, h]
//   2 out: storage, rw      array<f32>  [tokens, h]
//   3 p: uniform            Params      mirrored by `Embed` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride over tokens * h, workgroups of 256.

struct Params { tokens: u32, h: u32, vocab: u32, pad0: u32 }

@group(0) @binding(0) var<storage, read> ids: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var e = gid.x; e < p.tokens * p.h; e += stride) {
        let t = e / p.h;
        let id = min(ids[t], p.vocab - 1u);
        out[e] = table[id * p.h + e % p.h];
    }
}
