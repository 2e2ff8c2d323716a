//! Bucket aggregates: `count`, `sum`, `min` and `max` of the values of the
//! unique events a bucket holds. The sum is exact (i128): 2^64 values of
//! magnitude 2^63 still fit.

/// The aggregate of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agg {
    /// Number of unique events (>= 1).
    pub count: u64,
    /// Exact sum.
    pub sum: i128,
    /// Smallest value.
    pub min: i64,
    /// Largest value.
    pub max: i64,
}

impl Agg {
    /// The aggregate of one value.
    #[inline]
    pub fn of(value: i64) -> Agg {
        Agg {
            count: 1,
            sum: value as i128,
            min: value,
            max: value,
        }
    }

    /// Adds one value.
    #[inline]
    pub fn add(&mut self, value: i64) {
        self.count = self.count.saturating_add(1);
        self.sum = self.sum.saturating_add(value as i128);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Combines two aggregates (session merges).
    #[inline]
    pub fn merge(&mut self, other: &Agg) {
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
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
        if self.sum < c * self.min as i128 || self.sum > c * self.max as i128 {
            return Err(format!(
                "sum {} outside count*min..=count*max for count {}, min {}, max {}",
                self.sum, self.count, self.min, self.max
            ));
        }
        if self.count == 1 && !(self.min == self.max && self.sum == self.min as i128) {
            return Err("a single-event bucket must have min == max == sum".into());
        }
        Ok(())
    }
}
