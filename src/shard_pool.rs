//! The threads the window engine's key-hash shards run on.
//!
//! The engine starts no threads of its own (it stays a pure library); it
//! runs its shards side by side through an [`Executor`] the caller lends it.
//! [`ShardPool`] is that executor for the service, the benchmarks and the
//! tests: shard 0 runs on the calling thread (which would otherwise only
//! wait) and shards 1..K on a `rayon` pool of K-1 threads (`shard-0`, ...),
//! so K shards keep K threads busy. Measured against a pool of K threads
//! with the caller waiting (shard `i` pinned to thread `i`), the engine's
//! K=2 over K=1 ratio was 1.32x against 1.14x in the same interleaved run:
//! one thread fewer to wake and to share two cores with.
//!
//! After its part of a hand-over, a pool thread lingers for up to 1 ms,
//! yielding, until the next hand-over starts — but only while hand-overs
//! come back to back (the smoothed gap between them under 0.5 ms): a busy
//! ingest (a batch, its watermark call, the next batch) then never waits
//! for a parked thread, which on a virtual machine took 40-70 µs per
//! hand-over in the engine bench, about 7 % of the K=2 run; calls further
//! apart (one producer waiting for each fsync) do not keep a core spinning.
//! Lingering raised the K=2 engine rate from 638-658k to 700-800k events/s
//! in interleaved runs, and did not slow the HTTP service (aligned clients,
//! minimal answers: 126k / 155k events/s without, 153k / 177k with,
//! alternating runs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{Executor, Processor};

/// The threads for shards 1.. (shard 0 runs on the caller's).
#[derive(Debug)]
pub struct ShardPool {
    pool: rayon::ThreadPool,
    /// Hand-overs so far: a lingering thread waits until this moves.
    runs: Arc<AtomicU64>,
    /// When the pool was made: times below are nanoseconds since.
    born: Instant,
    /// When the last hand-over ended.
    last_end: AtomicU64,
    /// The gap between the end of a hand-over and the start of the next,
    /// smoothed (each new gap counts for 1/4).
    gap: AtomicU64,
}

/// How long a pool thread stays awake after its part of a hand-over,
/// waiting for the next one (yielding its core to anything else runnable).
const LINGER: Duration = Duration::from_millis(1);

impl ShardPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> Result<ShardPool, String> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("shard-{i}"))
            .build()
            .map_err(|e| format!("cannot start {threads} shard threads: {e}"))?;
        Ok(ShardPool {
            pool,
            runs: Arc::new(AtomicU64::new(0)),
            born: Instant::now(),
            last_end: AtomicU64::new(0),
            gap: AtomicU64::new(10 * LINGER.as_nanos() as u64),
        })
    }
}

impl Executor for ShardPool {
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        let seen = self.runs.fetch_add(1, Ordering::AcqRel) + 1;
        let start = self.born.elapsed().as_nanos() as u64;
        let gap = start.saturating_sub(self.last_end.load(Ordering::Relaxed));
        let smoothed = (self.gap.load(Ordering::Relaxed) / 4 * 3).saturating_add(gap / 4);
        self.gap.store(smoothed, Ordering::Relaxed);
        self.pool.in_place_scope(|scope| {
            for i in 1..n {
                scope.spawn(move |_| f(i));
            }
            if n > 0 {
                f(0);
            }
        });
        self.last_end
            .store(self.born.elapsed().as_nanos() as u64, Ordering::Relaxed);
        // While hand-overs come back to back, each thread that worked stays
        // awake for the next one (see the module docs): a detached task on
        // the pool, which returns as soon as the next `run` starts or after
        // `LINGER`. When they come further apart, lingering would only burn
        // the core.
        if smoothed > LINGER.as_nanos() as u64 / 2 {
            return;
        }
        for _ in 1..n.min(self.pool.current_num_threads() + 1) {
            let runs = self.runs.clone();
            self.pool.spawn(move || {
                let deadline = Instant::now() + LINGER;
                while runs.load(Ordering::Acquire) == seen && Instant::now() < deadline {
                    std::thread::yield_now();
                }
            });
        }
    }
}

/// The executor for `k` shards: a pool of `k - 1` threads, none for one.
pub fn executor(k: usize) -> Result<Option<Arc<dyn Executor>>, String> {
    Ok(if k > 1 {
        Some(Arc::new(ShardPool::new(k - 1)?))
    } else {
        None
    })
}

/// Gives `p` `k` key-hash shards with their [`executor`].
pub fn set_shards(p: &mut Processor, k: usize) -> Result<(), String> {
    p.set_shards(k, executor(k)?)
}
