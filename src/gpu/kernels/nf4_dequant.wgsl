// nf4_dequant.wgsl: the unfused path's first half. Dequantizes a whole NF4 weight (bitsandbytes layout, double
// quantization) into a dense f32 buffer the size of the weight:
//   w[j] = NF4[nibble(j)] * (DYN8[qabsmax[j / 64]] * absmax2[j / 16384] + offset)
// nibble(j) is the high nibble of byte j/2 for even j, the low nibble for odd j; bytes are little-endian in u32 words.
// Bindings (group 0):
//   0 q: storage, read   array<u32>  packed nibbles | 8-bit absmax indices | f32 absmax2 | f32 offset (Nf4Layout)
//   1 w: storage, rw     array<f32>  the dense weight, n elements
//   2 codes: storage, read array<f32> DYN8 (256 values) then NF4 (16 values)
//   3 p: uniform         Params      mirrored by `Nf4Dequant` in src/gpu/params.rs (keep in sync)
// Dispatch: grid-stride, workgroups of 256.

struct Params { n: u32, qabs_word: u32, abs2_word: u32, off_word: u32 }

@group(0) @binding(0) var<storage, read> q: array<u32>;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read> codes: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn block_absmax(i: u32) -> f32 {
    let qb = (q[p.qabs_word + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
    let d = codes[qb];
    return d * bitcast<f32>(q[p.abs2_word + (i >> 8u)]) + bitcast<f32>(q[p.off_word]);
}

fn weight(j: u32) -> f32 {
    let shift = ((j >> 1u) & 3u) * 8u + select(0u, 4u, (j & 1u) == 0u);
    let c = (q[j >> 3u] >> shift) & 0xfu;
    return codes[256u + c] * block_absmax(j >> 6u);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var j = gid.x; j < p.n; j += stride) {
        w[j] = weight(j);
    }
}
