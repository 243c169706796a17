//! A tiny deterministic random generator (SplitMix64) for weights, batches and tests: same seed, same numbers
//! on every platform.

/// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, one multiply-xorshift mix per draw.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)` with 24 bits of precision (exact in `f32`).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }
    /// Uniform in `[-bound, bound)`.
    pub fn uniform(&mut self, bound: f32) -> f32 {
        (2.0 * self.unit() - 1.0) * bound
    }
    /// Uniform integer in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * n as u64) >> 32) as u32
    }
    /// `n` uniform values in `[-bound, bound)`.
    pub fn fill(&mut self, n: usize, bound: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(bound)).collect()
    }
}
