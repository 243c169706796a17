//! The engine's arithmetic: [`Count`], whole numbers held in `f64`, and the two ways out of it.

/// A count of bytes or elements. Every whole number below 2^53 (8 PiB) is exact in `f64`, so real plans are counted
/// to the byte; past that, figures round but stay monotone, and [`clamp`] flags anything past `u64`. Not `u128`,
/// which wasm has to emulate in software (three times slower there); not `u64`, whose overflow checks cost the same.
pub(super) type Count = f64;

pub(super) const MIB: Count = (1u64 << 20) as Count;

/// `ceil(a / b)` for whole `a` and `b`, exact below 2^53 whatever way `a / b` rounded.
pub(super) fn ceil_div(a: Count, b: Count) -> Count {
    let b = b.max(1.0);
    let q = (a / b).floor();
    if q * b < a {
        q + 1.0
    } else {
        q
    }
}

/// `v` as bytes, saturating at `u64::MAX` and flagging it.
pub(super) fn clamp(v: Count, saturated: &mut bool) -> u64 {
    // 2^64 is the first f64 that no u64 holds; `as` saturates there.
    if v >= 18_446_744_073_709_551_616.0 {
        *saturated = true;
    }
    v as u64
}
