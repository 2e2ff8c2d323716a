//! Exact arithmetic (docs/semantics.md, "Numbers"): inputs are i64; derived quantities
//! (window bounds, `timestamp + lateness`, `end + lateness`, sums) are computed
//! exactly in i128, never overflow and never panic.

/// `floor(a / b) * b` for `b > 0`: the largest multiple of `b` that is <= `a`.
#[inline]
pub fn align_down(a: i128, b: i128) -> i128 {
    debug_assert!(b > 0);
    a - rem_euclid(a, b)
}

/// `a.rem_euclid(b)` for `b > 0`, with a 64-bit division when both fit
/// (a 128-bit one is a library call several times slower, and window
/// bounds are mostly 64-bit timestamps).
#[inline]
fn rem_euclid(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) => i128::from(a.rem_euclid(b)),
        _ => a.rem_euclid(b),
    }
}

/// Whether `a` is a multiple of `b` (`b > 0`).
pub fn is_multiple(a: i128, b: i128) -> bool {
    rem_euclid(a, b) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_alignment_handles_negatives_and_extremes() {
        assert_eq!(align_down(7, 5), 5);
        assert_eq!(align_down(-1, 5), -5);
        assert_eq!(align_down(-5, 5), -5);
        assert_eq!(
            align_down(i64::MIN as i128, i64::MAX as i128),
            -2 * (i64::MAX as i128)
        );
        assert_eq!(
            align_down(i64::MAX as i128, i64::MAX as i128),
            i64::MAX as i128
        );
        assert!(is_multiple(-10, 5));
        assert!(!is_multiple(-11, 5));
    }

    #[test]
    fn the_64_bit_path_agrees_with_128_bits() {
        let edges = [
            i64::MIN as i128 - 7,
            i64::MIN as i128,
            i64::MIN as i128 + 1,
            -1_000_000_007,
            -3,
            -1,
            0,
            1,
            5,
            1_699_999_999_943,
            i64::MAX as i128 - 1,
            i64::MAX as i128,
            i64::MAX as i128 + 9,
            2 * i64::MAX as i128,
        ];
        for a in edges {
            for b in [
                1,
                2,
                3,
                1000,
                2000,
                10_000,
                i64::MAX as i128,
                i64::MAX as i128 + 3,
            ] {
                assert_eq!(align_down(a, b), a - a.rem_euclid(b), "{a} {b}");
                assert_eq!(is_multiple(a, b), a.rem_euclid(b) == 0, "{a} {b}");
            }
        }
    }
}
