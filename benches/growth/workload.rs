//! The stream, generated one event at a time in the shape of
//! `benches/gen_workload.py`.

use std::io::Write;

/// The generator's first timestamp (`gen_workload.py`'s T0).
const T0: i64 = 1_700_000_000_000;
/// Max ms an event lags behind arrival order (`--disorder`).
pub const DISORDER: i64 = 500;
/// Advance every partition after this many events (`--wm-every`).
pub const WM_EVERY: u64 = 1000;
const SEED: u64 = 42;

/// SplitMix64: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2^-40 here).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in lo..=hi.
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

/// `gen_workload.py`'s stream (defaults: no duplicates, no late events),
/// generated one event at a time.
pub struct Workload {
    rng: Rng,
    keys: u64,
    offsets: Vec<u64>,
    max_ts: i64,
    /// The next event's index.
    pub next: u64,
}

impl Workload {
    pub fn new(partitions: usize, keys: u64) -> Workload {
        Workload {
            rng: Rng(SEED),
            keys,
            offsets: vec![0; partitions],
            max_ts: i64::MIN,
            next: 0,
        }
    }

    /// Appends the next delivery as an NDJSON line of `POST /events`;
    /// returns whether the partitions are to be advanced after it (to
    /// [`Workload::watermark`]).
    pub fn deliver(&mut self, body: &mut Vec<u8>) -> bool {
        let i = self.next;
        let p = (i % self.offsets.len() as u64) as usize;
        // the generator's order of draws: key, jitter, value
        let key = self.rng.below(self.keys);
        let ts = T0 + i as i64 - self.rng.between(0, DISORDER);
        let value = self.rng.between(-1000, 1000);
        self.max_ts = self.max_ts.max(ts);
        writeln!(
            body,
            r#"{{"partition":"p{p}","offset":{},"event":{{"id":"e{i}","key":"k{key}","timestamp":{ts},"value":{value}}}}}"#,
            self.offsets[p]
        )
        .expect("write to a Vec");
        self.offsets[p] += 1;
        self.next += 1;
        self.next.is_multiple_of(WM_EVERY)
    }

    pub fn watermark(&self) -> i64 {
        self.max_ts - DISORDER
    }
}
