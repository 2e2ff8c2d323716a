//! Window assignment, exact in i128.
//!
//! docs/semantics.md, "Window assignment":
//! - fixed: `start = floor(timestamp / size) * size`, `end = start + size`;
//! - sliding: every `[start, start + size)` containing the timestamp whose
//!   start is a multiple of `step` (floor division for negative timestamps,
//!   half-open intervals; `size` need not be a multiple of `step`);
//! - stream-time: like fixed, but on stream time `T` instead of the timestamp;
//! - session: each event starts `[timestamp, timestamp + gap)`; merging lives
//!   in the live index.

use super::num::align_down;

/// Start of the fixed window of `size` containing `t`.
#[inline]
pub fn aligned_start(t: i64, size: i64) -> i128 {
    // i64 floor division cannot overflow for size > 0; the product may
    // leave the i64 range, so it is formed in i128.
    t.div_euclid(size) as i128 * size as i128
}

/// Starts of every sliding window containing `t`, ascending: the multiples of
/// `step` in `(t - size, t]`.
#[inline]
pub fn sliding_starts(t: i64, size: i64, step: i64) -> impl Iterator<Item = i128> {
    let first = align_down(t as i128 - size as i128, step as i128) + step as i128;
    let last = align_down(t as i128, step as i128);
    // `first > t - size` and `last <= t`: the difference is below `size`,
    // so it divides in 64 bits.
    let n = if last >= first {
        match i64::try_from(last - first) {
            Ok(d) => i128::from(d / step) + 1,
            Err(_) => (last - first) / step as i128 + 1,
        }
    } else {
        0
    };
    let step = step as i128;
    (0..n).map(move |i| first + i * step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_size_not_multiple_of_step_with_negative_times() {
        // size 10, step 3: windows [s, s+10) with s multiple of 3 containing t
        let starts: Vec<i128> = sliding_starts(-1, 10, 3).collect();
        assert_eq!(starts, vec![-9, -6, -3]);
        let starts: Vec<i128> = sliding_starts(0, 10, 3).collect();
        assert_eq!(starts, vec![-9, -6, -3, 0]);
        let starts: Vec<i128> = sliding_starts(1, 10, 3).collect();
        assert_eq!(starts, vec![-6, -3, 0]);
        for t in -40..40i64 {
            let got: Vec<i128> = sliding_starts(t, 10, 3).collect();
            let want: Vec<i128> = (-100..100i128)
                .filter(|s| s.rem_euclid(3) == 0 && *s <= t as i128 && (t as i128) < s + 10)
                .collect();
            assert_eq!(got, want, "t={t}");
        }
    }

    #[test]
    fn extremes_do_not_overflow() {
        assert_eq!(aligned_start(i64::MIN, i64::MAX), -2 * i64::MAX as i128);
        let s: Vec<i128> = sliding_starts(i64::MAX, i64::MAX, i64::MAX / 2).collect();
        assert!(s
            .iter()
            .all(|&s| s <= i64::MAX as i128 && (i64::MAX as i128) < s + i64::MAX as i128));
        assert_eq!(s.len(), 2);
    }
}
