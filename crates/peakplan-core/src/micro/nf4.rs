//! NF4 quantization with double quantization, as bitsandbytes does it (`quantize_4bit(quant_type="nf4",
//! blocksize=64, compress_statistics=True)`).
//!
//! - Weights are cut into blocks of 64 consecutive elements of the flattened row-major tensor; each block keeps its
//!   absolute maximum and each element the index of the nearest of the 16 [`NF4`] levels of `w / absmax`.
//! - Two 4-bit indices per byte, the even element in the high nibble.
//! - Double quantization: the absmax values minus their mean (`offset`) are quantized again, in blocks of 256, to
//!   8-bit indices into the signed dynamic map ([`dynamic_map`]) with one fp32 scale (`absmax2`) per block.
//! - Dequantization of element `j` (block `i = j / 64`, super-block `k = i / 256`):
//!   `w[j] = NF4[nibble(j)] * (DYN8[qabsmax[i]] * absmax2[k] + offset)`.

/// The 16 NF4 levels (bitsandbytes `get_4bit_type("nf4")`), indexed by the 4-bit code.
/// Written as bitsandbytes lists them (Python floats); the compiler rounds each to the nearest `f32`.
#[allow(clippy::excessive_precision)]
pub const NF4: [f32; 16] = [
    -1.0,
    -0.696_192_800_998_687_7,
    -0.525_073_051_452_636_7,
    -0.394_917_488_098_144_53,
    -0.284_441_381_692_886_35,
    -0.184_773_430_228_233_34,
    -0.091_050_036_251_544_95,
    0.0,
    0.079_580_299_556_255_34,
    0.160_930_201_411_247_25,
    0.246_112_301_945_686_34,
    0.337_915_241_718_292_24,
    0.440_709_829_330_444_34,
    0.562_617_003_917_694_1,
    0.722_956_836_223_602_3,
    1.0,
];

/// Weights per first-level block (one absmax each).
pub const BLOCK: usize = 64;
/// First-level blocks per second-level block (one fp32 scale each).
pub const DQ_BLOCK: usize = 256;

/// `torch.linspace(start, end, steps, dtype=float32)` with the scalar formula of torch's CPU kernel.
fn linspace(start: f32, end: f32, steps: usize) -> Vec<f32> {
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f32;
    let half = steps / 2;
    (0..steps)
        .map(|i| {
            if i < half {
                start + step * i as f32
            } else {
                end - step * (steps - i - 1) as f32
            }
        })
        .collect()
}

/// bitsandbytes `create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)`: 256 sorted values in
/// [-1, 1]; decade `i` (scale `10^(i-6)`) holds `2^i` positive and `2^i` negative values, plus 0 and 1.
pub fn dynamic_map() -> [f32; 256] {
    // The positive values come out ascending (decade by decade, means ascending within each), so the sorted map is
    // the negated positives reversed, 0, the positives, and 1 (built in order: no sort).
    let mut pos: Vec<f32> = Vec::with_capacity(127);
    for i in 0..7i32 {
        let items = (1usize << i) + 1;
        let b = linspace(0.1, 1.0, items);
        let scale = 10f64.powi(i - 6) as f32;
        for w in b.windows(2) {
            pos.push(scale * ((w[0] + w[1]) / 2.0));
        }
    }
    let mut out = [0f32; 256];
    for (k, v) in pos.iter().enumerate() {
        out[126 - k] = -v;
        out[128 + k] = *v;
    }
    out[127] = 0.0;
    out[255] = 1.0;
    out
}

/// Index of the nearest value of `code` to `x` (ties go to the lower index, as `argmin` does).
pub fn nearest(code: &[f32], x: f32) -> u8 {
    let mut best = 0usize;
    let mut best_d = f32::INFINITY;
    for (i, c) in code.iter().enumerate() {
        let d = (x - c).abs();
        if d < best_d {
            best_d = d;
            best = i;
        }
    }
    best as u8
}

/// A frozen weight `[rows, cols]` (row-major, `rows` = out features) in NF4 with double-quantized constants.
#[derive(Clone, Debug, PartialEq)]
pub struct Nf4Tensor {
    pub rows: usize,
    pub cols: usize,
    /// `ceil(n / 2)` bytes: element `2j` in the high nibble of byte `j`, element `2j + 1` in the low nibble.
    pub packed: Vec<u8>,
    /// One 8-bit dynamic-map index per block of 64 weights.
    pub qabsmax: Vec<u8>,
    /// One fp32 scale per 256 blocks.
    pub absmax2: Vec<f32>,
    /// Mean of the first-level absmax values, subtracted before their quantization.
    pub offset: f32,
}

/// Word offsets of the parts of an [`Nf4Tensor`] in its GPU buffer (see [`Nf4Tensor::to_words`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nf4Layout {
    /// First word of the 8-bit absmax indices (packed four per word, little-endian).
    pub qabsmax_word: usize,
    /// First word of the fp32 second-level scales.
    pub absmax2_word: usize,
    /// The word holding the fp32 offset.
    pub offset_word: usize,
    /// Words in all.
    pub words: usize,
}

impl Nf4Tensor {
    /// Quantizes `w` (`rows x cols`, row-major).
    pub fn quantize(rows: usize, cols: usize, w: &[f32]) -> Nf4Tensor {
        let n = rows * cols;
        let w = &w[..n.min(w.len())];
        let blocks = n.div_ceil(BLOCK);
        let mut absmax = Vec::with_capacity(blocks);
        let mut codes = Vec::with_capacity(n);
        for block in w.chunks(BLOCK) {
            let a = block.iter().fold(0f32, |m, x| m.max(x.abs()));
            let inv = 1.0 / a.max(1e-38);
            absmax.push(a);
            codes.extend(
                block
                    .iter()
                    .map(|x| nearest(&NF4, (x * inv).clamp(-1.0, 1.0))),
            );
        }
        let mut packed = vec![0u8; n.div_ceil(2)];
        for (j, c) in codes.iter().enumerate() {
            packed[j / 2] |= if j.is_multiple_of(2) { c << 4 } else { *c };
        }
        let offset = (absmax.iter().map(|a| *a as f64).sum::<f64>() / blocks.max(1) as f64) as f32;
        let dyn8 = dynamic_map();
        let mut qabsmax = Vec::with_capacity(blocks);
        let mut absmax2 = Vec::with_capacity(blocks.div_ceil(DQ_BLOCK));
        for sb in absmax.chunks(DQ_BLOCK) {
            let centred: Vec<f32> = sb.iter().map(|a| a - offset).collect();
            let s = centred.iter().fold(0f32, |m, x| m.max(x.abs()));
            absmax2.push(s);
            if s == 0.0 {
                qabsmax.extend(centred.iter().map(|_| nearest(&dyn8, 0.0)));
            } else {
                let inv = 1.0 / s;
                qabsmax.extend(
                    centred
                        .iter()
                        .map(|x| nearest(&dyn8, (x * inv).clamp(-1.0, 1.0))),
                );
            }
        }
        Nf4Tensor {
            rows,
            cols,
            packed,
            qabsmax,
            absmax2,
            offset,
        }
    }

    pub fn len(&self) -> usize {
        self.rows * self.cols
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The 4-bit code of element `j`.
    pub fn code(&self, j: usize) -> u8 {
        let b = self.packed[j / 2];
        if j.is_multiple_of(2) {
            b >> 4
        } else {
            b & 0x0f
        }
    }
    /// The dequantized absmax of block `i`: `DYN8[qabsmax[i]] * absmax2[i / 256] + offset`.
    pub fn block_absmax(&self, dyn8: &[f32; 256], i: usize) -> f32 {
        dyn8[self.qabsmax[i] as usize] * self.absmax2[i / DQ_BLOCK] + self.offset
    }
    /// The whole tensor dequantized to `f32`, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let dyn8 = dynamic_map();
        let absmax: Vec<f32> = (0..self.qabsmax.len())
            .map(|i| self.block_absmax(&dyn8, i))
            .collect();
        (0..self.len())
            .map(|j| NF4[self.code(j) as usize] * absmax[j / BLOCK])
            .collect()
    }
    /// Bytes as bitsandbytes stores them: packed nibbles, 8-bit absmax, fp32 scales and the fp32 offset.
    pub fn bytes(&self) -> usize {
        self.packed.len() + self.qabsmax.len() + 4 * self.absmax2.len() + 4
    }
    /// Where each part sits in the GPU buffer.
    pub fn layout(&self) -> Nf4Layout {
        let packed_words = self.packed.len().div_ceil(4);
        let qabsmax_words = self.qabsmax.len().div_ceil(4);
        let absmax2_word = packed_words + qabsmax_words;
        let offset_word = absmax2_word + self.absmax2.len();
        Nf4Layout {
            qabsmax_word: packed_words,
            absmax2_word,
            offset_word,
            words: offset_word + 1,
        }
    }
    /// The GPU buffer: packed bytes, absmax indices, scales and offset, each part starting on a 4-byte word
    /// (little-endian bytes, as WGSL reads host-shared `u32`). Its size equals [`Nf4Tensor::bytes`] when the
    /// parts are multiples of 4 bytes (any tensor of a multiple of 256 weights).
    pub fn to_words(&self) -> Vec<u32> {
        let l = self.layout();
        let mut words = vec![0u32; l.words];
        for (i, b) in self.packed.iter().enumerate() {
            words[i / 4] |= (*b as u32) << (8 * (i % 4));
        }
        for (i, b) in self.qabsmax.iter().enumerate() {
            words[l.qabsmax_word + i / 4] |= (*b as u32) << (8 * (i % 4));
        }
        for (i, s) in self.absmax2.iter().enumerate() {
            words[l.absmax2_word + i] = s.to_bits();
        }
        words[l.offset_word] = self.offset.to_bits();
        words
    }
}
