//! Exact arithmetic (docs/semantics.md, "Numbers"): inputs are i64; derived quantities
//! (window bounds, `timestamp + lateness`, `end + lateness`, sums) are computed
//! exactly in i128, never overflow and never panic.

/// `floor(a / b) * b` for `b > 0`: the largest multiple of `b` that is <= `a`.
pub fn align_down(a: i128, b: i128) -> i128 {
    debug_assert!(b > 0);
    a - a.rem_euclid(b)
}

/// Whether `a` is a multiple of `b` (`b > 0`).
pub fn is_multiple(a: i128, b: i128) -> bool {
    a.rem_euclid(b) == 0
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
}
