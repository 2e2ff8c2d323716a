//! Bucket aggregates: `count`, `sum`, `min` and `max` of the values of the
//! unique events a bucket holds. The sum is exact (i128): 2^64 values of
//! magnitude 2^63 still fit.

/// The aggregate of one bucket.
///
/// The exact sum is kept as two 64-bit halves ([`Agg::sum`]): an `i128`
/// field would align the aggregate to 16 bytes, and with it every bucket
/// of the hash maps that hold them (a key and an aggregate: 64 bytes, most
/// of them straddling two cache lines, instead of 48).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agg {
    /// Number of unique events (>= 1).
    pub count: u64,
    sum_lo: u64,
    sum_hi: i64,
    /// Smallest value.
    pub min: i64,
    /// Largest value.
    pub max: i64,
}

impl Agg {
    /// All zeros: filler for a free table slot, never a bucket's aggregate
    /// (a bucket holds at least one event).
    pub(crate) const ZERO: Agg = Agg {
        count: 0,
        sum_lo: 0,
        sum_hi: 0,
        min: 0,
        max: 0,
    };

    /// The aggregate of `count` values with this exact sum, smallest and
    /// largest (a restored bucket: [`Agg::check_bounds`] says whether it
    /// is consistent).
    #[inline]
    pub fn new(count: u64, sum: i128, min: i64, max: i64) -> Agg {
        let mut agg = Agg {
            count,
            sum_lo: 0,
            sum_hi: 0,
            min,
            max,
        };
        agg.set_sum(sum);
        agg
    }

    /// The aggregate of one value.
    #[inline]
    pub fn of(value: i64) -> Agg {
        Agg::new(1, value as i128, value, value)
    }

    /// The exact sum.
    #[inline]
    pub fn sum(&self) -> i128 {
        ((self.sum_hi as i128) << 64) | self.sum_lo as i128
    }

    #[inline]
    fn set_sum(&mut self, sum: i128) {
        self.sum_lo = sum as u64;
        self.sum_hi = (sum >> 64) as i64;
    }

    /// Adds one value.
    #[inline]
    pub fn add(&mut self, value: i64) {
        self.count = self.count.saturating_add(1);
        self.set_sum(self.sum().saturating_add(value as i128));
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Combines two aggregates (session merges).
    #[inline]
    pub fn merge(&mut self, other: &Agg) {
        self.count = self.count.saturating_add(other.count);
        self.set_sum(self.sum().saturating_add(other.sum()));
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Restore rule "aggregate bounds" (docs/checkpoint.md): count >= 1, min <= max,
    /// count*min <= sum <= count*max, and a single-event bucket has
    /// min == max == sum.
    pub fn check_bounds(&self) -> Result<(), String> {
        if self.count < 1 {
            return Err(format!("count {} must be >= 1", self.count));
        }
        if self.min > self.max {
            return Err(format!("min {} exceeds max {}", self.min, self.max));
        }
        let c = self.count as i128;
        // |c| <= 2^63 and |min|,|max| <= 2^63 so the products fit in i128.
        let sum = self.sum();
        if sum < c * self.min as i128 || sum > c * self.max as i128 {
            return Err(format!(
                "sum {} outside count*min..=count*max for count {}, min {}, max {}",
                sum, self.count, self.min, self.max
            ));
        }
        if self.count == 1 && !(self.min == self.max && sum == self.min as i128) {
            return Err("a single-event bucket must have min == max == sum".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_in_halves_is_exact_and_saturates() {
        for sum in [
            0i128,
            -1,
            1,
            i64::MIN as i128,
            i64::MAX as i128,
            (i64::MAX as i128) * 3 + 7,
            -(1i128 << 100),
            i128::MAX,
            i128::MIN,
        ] {
            assert_eq!(Agg::new(2, sum, -1, 1).sum(), sum);
        }
        let mut a = Agg::of(i64::MAX);
        for _ in 0..3 {
            a.add(i64::MAX);
        }
        assert_eq!(a.sum(), 4 * i64::MAX as i128);
        assert_eq!((a.count, a.min, a.max), (4, i64::MAX, i64::MAX));
        let mut b = Agg::new(1, i128::MAX - 1, 0, 0);
        b.add(5);
        assert_eq!(b.sum(), i128::MAX);
        let mut c = Agg::new(1, i128::MIN + 1, 0, 0);
        c.merge(&Agg::new(1, -5, -5, -5));
        assert_eq!(c.sum(), i128::MIN);
        assert_eq!(std::mem::size_of::<Agg>(), 40);
        assert_eq!(std::mem::align_of::<Agg>(), 8);
    }
}
