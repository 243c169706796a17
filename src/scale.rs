//! Slider scales: powers of two on the track, any integer typed beside it.

/// A log2 slider over `2^min_exp ..= 2^max_exp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log2Scale {
    pub min_exp: u32,
    pub max_exp: u32,
}

/// LoRA rank: 1 to 1024.
pub const RANK: Log2Scale = Log2Scale {
    min_exp: 0,
    max_exp: 10,
};
/// Micro-batch: 1 to 256.
pub const BATCH: Log2Scale = Log2Scale {
    min_exp: 0,
    max_exp: 8,
};
/// Sequence length: 128 to 131,072 tokens.
pub const SEQ: Log2Scale = Log2Scale {
    min_exp: 7,
    max_exp: 17,
};

impl Log2Scale {
    /// The plan value at a slider position (positions are exponents).
    pub fn value(self, position: u32) -> u64 {
        1u64 << position.clamp(self.min_exp, self.max_exp)
    }
    /// The slider position nearest to a plan value (typed values between powers of two snap on the track only).
    pub fn position(self, value: u64) -> u32 {
        let v = value.max(1) as f64;
        (v.log2().round() as u32).clamp(self.min_exp, self.max_exp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(scale: Log2Scale, value: u64, expect_position: u32) {
        assert_eq!(scale.position(value), expect_position, "{value}");
    }

    #[test]
    fn positions_round_trip_powers_of_two() {
        for s in [RANK, BATCH, SEQ] {
            for p in s.min_exp..=s.max_exp {
                check(s, s.value(p), p);
            }
        }
    }

    #[test]
    fn typed_values_snap_to_the_nearest_power_and_clamp() {
        check(SEQ, 3000, 12);
        check(SEQ, 1, 7);
        check(SEQ, 10_000_000, 17);
        check(RANK, 0, 0);
        check(BATCH, 5, 2);
    }
}
