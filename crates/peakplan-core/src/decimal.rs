//! Decimal text to `f64`, exactly as `str::parse::<f64>` reads it: the same accepted text and the same bits.
//!
//! Why not `str::parse`: the standard library's reader carries the Eisel-Lemire table of 128-bit powers of five,
//! 10 KB of data that no compressor shrinks, plus its three algorithms; in the page's WebAssembly that was about
//! 12 KB gzipped (Dec 2026) for the few numbers a link or a pasted config holds. Here common values (up to 15
//! significant digits, a power of ten within 22) take Clinger's fast path, one exact multiplication or division,
//! which IEEE arithmetic rounds correctly; every other value takes an exact big-integer quotient, slow but only
//! reached by long or extreme text. Both round to nearest, ties to even, as the standard library does; the tests
//! compare them with `str::parse` on edge cases, exact halfway points and random text.

use std::cmp::Ordering;

/// `s` as `str::parse::<f64>` reads it, `None` where that returns an error: an optional sign, then `inf`,
/// `infinity` or `nan` in any case, or digits with an optional point and an optional exponent (`e` or `E`, a
/// sign, at least one digit); no spaces, no underscores.
pub fn parse_f64(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let (negative, b) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let v = match special(b) {
        Some(v) => v,
        None => number(b)?,
    };
    // The standard library negates NaN too, so "-nan" keeps its sign bit.
    Some(if negative { -v } else { v })
}

fn special(b: &[u8]) -> Option<f64> {
    if b.eq_ignore_ascii_case(b"nan") {
        Some(f64::NAN)
    } else if b.eq_ignore_ascii_case(b"inf") || b.eq_ignore_ascii_case(b"infinity") {
        Some(f64::INFINITY)
    } else {
        None
    }
}

/// Significant digits kept; past them one sticky flag stands for the rest. Every rounding boundary of an `f64`
/// (a value or a midpoint) has at most 767 significant decimal digits, so none falls strictly between the kept
/// digits and the kept digits plus one unit of the last.
const MAX_DIGITS: usize = 800;

/// Exact powers of ten, the fast path's factors.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

fn is_digit(c: Option<&u8>) -> bool {
    c.is_some_and(u8::is_ascii_digit)
}

/// An unsigned number: its grammar, then its value.
fn number(b: &[u8]) -> Option<f64> {
    let mut i = 0;
    while is_digit(b.get(i)) {
        i += 1;
    }
    let int = &b[..i];
    let mut frac: &[u8] = &[];
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while is_digit(b.get(i)) {
            i += 1;
        }
        frac = &b[start..i];
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut exp: i64 = 0;
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        let negative = b.get(i) == Some(&b'-');
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if !is_digit(b.get(i)) {
            return None;
        }
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            // The standard library stops accumulating at this bound; so must we, to read the same value.
            if exp < 0x10000 {
                exp = 10 * exp + i64::from(c - b'0');
            }
            i += 1;
        }
        if negative {
            exp = -exp;
        }
    }
    if i != b.len() {
        return None;
    }
    Some(value(int, frac, exp))
}

/// The value of the digits `int` `.` `frac` times ten to `exp`, rounded to nearest, ties to even.
fn value(int: &[u8], frac: &[u8], exp: i64) -> f64 {
    let digits = || int.iter().chain(frac).map(|c| c - b'0');
    let total = int.len() + frac.len();
    let lead = digits().take_while(|&d| d == 0).count();
    if lead == total {
        return 0.0;
    }
    let trail = int
        .iter()
        .chain(frac)
        .rev()
        .take_while(|&&c| c == b'0')
        .count();
    let n = total - lead - trail;
    // The value is sig x 10^e10 with sig the n significant digits.
    let mut e10 = exp - frac.len() as i64 + trail as i64;
    let sig = || digits().skip(lead).take(n);
    if n <= 15 && (-22..=22).contains(&e10) {
        let m = sig().fold(0u64, |m, d| m * 10 + u64::from(d)) as f64;
        return if e10 >= 0 {
            m * POW10[e10 as usize]
        } else {
            m / POW10[(-e10) as usize]
        };
    }
    // The value lies in [10^(point - 1), 10^point).
    let point = n as i64 + e10;
    if point > 310 {
        return f64::INFINITY;
    }
    if point < -324 {
        return 0.0;
    }
    let kept = n.min(MAX_DIGITS);
    let truncated = kept < n;
    e10 += (n - kept) as i64;
    let mut m = Big::default();
    for d in sig().take(kept) {
        m.mul_add(10, u32::from(d));
    }
    let (hi, e2, sticky) = if e10 >= 0 {
        for _ in 0..e10 {
            m.mul_add(10, 0);
        }
        m.top64()
    } else {
        quotient(&m, (-e10) as usize)
    };
    round(hi, e2, sticky || truncated)
}

/// `m / 10^f` as its leading 64 bits `hi` (bit 63 set), a binary exponent `e2` and a sticky flag: the quotient is
/// `(hi + x) 2^e2` with `0 <= x < 1`, `x > 0` exactly when the flag is set.
fn quotient(m: &Big, f: usize) -> (u64, i64, bool) {
    // 10^f = 5^f 2^f: divide by the odd part, then the power of two is an exponent.
    let mut p = Big(vec![1]);
    for _ in 0..f / 13 {
        p.mul_add(1_220_703_125, 0);
    }
    for _ in 0..f % 13 {
        p.mul_add(5, 0);
    }
    // Scale so the integer quotient has 64 or 65 bits: m 2^s / p lies in (2^63, 2^65).
    let s = 64 + p.bits() as i64 - m.bits() as i64;
    let (mut num, den) = if s >= 0 {
        (m.shl(s as usize), p)
    } else {
        (m.clone(), p.shl((-s) as usize))
    };
    let mut q: u128 = 0;
    for i in (0..66).rev() {
        let d = den.shl(i);
        if num.cmp(&d) != Ordering::Less {
            num.sub_assign(&d);
            q |= 1 << i;
        }
    }
    let e2 = -s - f as i64;
    let rest = !num.0.is_empty();
    if q >> 64 != 0 {
        ((q >> 1) as u64, e2 + 1, rest || q & 1 == 1)
    } else {
        (q as u64, e2, rest)
    }
}

/// `(hi + x) 2^e2` (see [`quotient`]) rounded to the nearest `f64`, ties to even, subnormals and overflow included.
fn round(hi: u64, e2: i64, sticky: bool) -> f64 {
    // The weight of hi's leading bit is 2^lead.
    let lead = e2 + 63;
    if lead > 1023 {
        return f64::INFINITY;
    }
    // A normal result keeps 53 bits; below 2^-1022 the last kept bit is worth 2^-1074 and fewer bits remain.
    let drop = if lead >= -1022 { 11 } else { -1011 - lead };
    if drop > 64 {
        return 0.0;
    }
    let (mant, rest, half) = if drop == 64 {
        (0, hi, 1 << 63)
    } else {
        (hi >> drop, hi & ((1 << drop) - 1), 1 << (drop - 1))
    };
    let up = rest > half || (rest == half && (sticky || mant & 1 == 1));
    let mant = mant + u64::from(up);
    if lead < -1022 {
        // Subnormal bits; rounding up to 2^52 gives the smallest normal's bits, as it should.
        return f64::from_bits(mant);
    }
    let (mant, lead) = if mant >> 53 != 0 {
        (mant >> 1, lead + 1)
    } else {
        (mant, lead)
    };
    if lead > 1023 {
        return f64::INFINITY;
    }
    f64::from_bits(((lead + 1023) as u64) << 52 | (mant & ((1 << 52) - 1)))
}

/// An unsigned big integer, 32-bit limbs, least significant first, no zero limb on top (zero is empty).
#[derive(Clone, Default)]
struct Big(Vec<u32>);

impl Big {
    /// `self = self * m + add` (`m > 0`).
    fn mul_add(&mut self, m: u32, add: u32) {
        let mut carry = u64::from(add);
        for x in &mut self.0 {
            let v = u64::from(*x) * u64::from(m) + carry;
            *x = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    fn bits(&self) -> usize {
        self.0
            .last()
            .map_or(0, |top| 32 * self.0.len() - top.leading_zeros() as usize)
    }

    fn shl(&self, n: usize) -> Big {
        let (words, b) = (n / 32, n % 32);
        let mut out = vec![0; words];
        if b == 0 {
            out.extend_from_slice(&self.0);
        } else {
            let mut carry = 0;
            for &x in &self.0 {
                out.push(x << b | carry);
                carry = x >> (32 - b);
            }
            if carry != 0 {
                out.push(carry);
            }
        }
        Big(out)
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    /// `self -= other`, with `self >= other`.
    fn sub_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, x) in self.0.iter_mut().enumerate() {
            let v = i64::from(*x) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(v < 0);
            *x = v.rem_euclid(1 << 32) as u32;
        }
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    /// The leading 64 bits (bit 63 set), the exponent and the sticky flag, as [`quotient`] returns them; non-zero.
    fn top64(&self) -> (u64, i64, bool) {
        let bits = self.bits();
        let limb = |i: usize| u128::from(self.0.get(i).copied().unwrap_or(0));
        if bits <= 64 {
            let v = limb(0) | limb(1) << 32;
            return ((v as u64) << (64 - bits), bits as i64 - 64, false);
        }
        let shift = bits - 64;
        let (w, b) = (shift / 32, shift % 32);
        let v = limb(w) | limb(w + 1) << 32 | limb(w + 2) << 64;
        let sticky = self.0[..w].iter().any(|&x| x != 0) || limb(w) & ((1 << b) - 1) != 0;
        ((v >> b) as u64, shift as i64, sticky)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_f64;

    /// Same result as the standard library: both errors, or the same bits (NaN: both NaN with the same sign).
    fn check(s: &str) {
        let ours = parse_f64(s);
        let std = s.parse::<f64>().ok();
        let same = match (ours, std) {
            (None, None) => true,
            (Some(a), Some(b)) if a.is_nan() => {
                b.is_nan() && a.is_sign_negative() == b.is_sign_negative()
            }
            (Some(a), Some(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        };
        assert!(same, "{s:?}: ours {ours:?}, std {std:?}");
    }

    /// A small deterministic generator, so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn grammar_and_edges_match_the_standard_library() {
        let cases = [
            "",
            "+",
            "-",
            ".",
            "-.",
            "e5",
            ".e5",
            "1e",
            "1e+",
            "1e-",
            "1E5",
            "1e+5",
            "1.",
            ".5",
            "+.5",
            "-5.",
            "0",
            "-0",
            "+0",
            "0.0",
            "-0.0e-999999999999",
            "00012.3400",
            "1_0",
            " 1",
            "1 ",
            "0x10",
            "1e5.",
            "1.2.3",
            "--1",
            "+-1",
            "inf",
            "-inf",
            "+INF",
            "Infinity",
            "-infinity",
            "infinit",
            "infinityy",
            "nan",
            "-NaN",
            "+nAn",
            "nan(1)",
            "1e308",
            "1.7976931348623157e308",
            "1.7976931348623158e308",
            "1.7976931348623159e308",
            "1e309",
            "2e-308",
            "2.2250738585072011e-308",
            "2.2250738585072014e-308",
            "4.9e-324",
            "2.4703282292062327e-324",
            "2.4703282292062328e-324",
            "2.47032822920623272e-324",
            "1e-324",
            "5e-324",
            "1e-400",
            "-1e400",
            "9007199254740993",
            "9007199254740992.5",
            "9007199254740993.0000000000000000001",
            "0.1",
            "0.3",
            "0.05",
            "2e-4",
            "1e22",
            "1e23",
            "123456789012345e-22",
            "1234567890123456e-22",
            "0.000001",
            "1e-7",
            "1e99999999999999999999",
            "1e-99999999999999999999",
            "0.00000000000000000000000000000000000001e38",
            "100000000000000000000000000000000000000e-38",
            "7.2057594037927933e16",
            "3.0517578125e-5",
        ];
        for s in cases {
            check(s);
        }
        let long = format!("0.{}1e-300", "0".repeat(2000));
        check(&long);
        check(&format!("1{}e-2000", "0".repeat(2000)));
        check(&format!("{}e-700", "9".repeat(1000)));
        check(&format!("1.{}1", "0".repeat(900)));
    }

    #[test]
    fn printed_floats_read_back_as_the_standard_library_reads_them() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let x = f64::from_bits(r.next());
            if !x.is_finite() {
                continue;
            }
            check(&format!("{x}"));
            check(&format!("{x:e}"));
            check(&format!("{x:.20e}"));
            check(&format!("{:.*e}", r.below(18) as usize, x));
        }
    }

    #[test]
    fn random_digit_strings_match_the_standard_library() {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let n = if r.below(20) == 0 {
                1 + r.below(900)
            } else {
                1 + r.below(30)
            } as usize;
            let mut s: String = (0..n)
                .map(|_| char::from(b'0' + r.below(10) as u8))
                .collect();
            if r.below(2) == 0 {
                s.insert(r.below(n as u64 + 1) as usize, '.');
            }
            if r.below(3) != 0 {
                s.push_str(&format!("e{}", r.below(800) as i64 - 400));
            }
            check(&s);
        }
    }

    /// The exact decimal expansion of `(2m + 1) 2^(e - 1)`, the midpoint above `m 2^e`: digits and power of ten.
    fn midpoint(m: u64, e: i32) -> (String, i32) {
        let mut digits: Vec<u8> = (2 * u128::from(m) + 1)
            .to_string()
            .bytes()
            .map(|c| c - b'0')
            .collect();
        let (factor, times, point) = if e >= 1 {
            (2, e - 1, 0)
        } else {
            (5, 1 - e, e - 1)
        };
        for _ in 0..times {
            let mut carry = 0;
            for d in digits.iter_mut().rev() {
                let v = *d * factor + carry;
                *d = v % 10;
                carry = v / 10;
            }
            if carry > 0 {
                digits.insert(0, carry);
            }
        }
        (digits.iter().map(|d| char::from(b'0' + d)).collect(), point)
    }

    #[test]
    fn exact_midpoints_and_their_neighbours_round_as_the_standard_library_rounds() {
        let mut r = Rng(0x1234_5678_9abc_def1);
        for i in 0..1_500 {
            // Normal and subnormal values alike, near both ends of the range and in the middle.
            let bits = match i % 3 {
                0 => r.next() & 0x000f_ffff_ffff_ffff,
                1 => (r.below(40) + 1) << 52 | r.next() & 0x000f_ffff_ffff_ffff,
                _ => r.next() & 0x7fef_ffff_ffff_ffff,
            };
            let biased = (bits >> 52) as i32;
            let frac = bits & 0x000f_ffff_ffff_ffff;
            let (m, e) = if biased == 0 {
                (frac, -1074)
            } else {
                (frac | 1 << 52, biased - 1075)
            };
            let (digits, point) = midpoint(m, e);
            check(&format!("{digits}e{point}"));
            check(&format!("{digits}1e{}", point - 1));
            check(&format!("{}e{}", &digits[..digits.len() - 1], point + 1));
            check(&format!("0.{digits}e{}", point + digits.len() as i32));
        }
    }
}
