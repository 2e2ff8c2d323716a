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
//! A pool thread parks as soon as its part is done (rayon's own short spin
//! aside). It used to linger for up to 1 ms, yielding, while hand-overs
//! came back to back (a smoothed gap under 0.5 ms), so that the next one
//! would not wait for a parked thread (40-70 us on a virtual machine): the
//! engine bench's K=2 rate rose from 638-658k to 700-800k events/s. In the
//! service that spin was paid in CPU: during `streamforge send` of the 1M
//! workload it was a fifth of the server's samples once the command log
//! stopped compressing bodies (the hand-overs then came closer), and six
//! alternating runs gave 2.42 / 2.58 / 2.63 / 2.74 / 2.34 / 2.21 CPU s per
//! 1M events with lingering against 2.08 / 2.41 / 2.32 / 1.99 / 2.20 /
//! 2.01 without, the send's wall time the same or shorter.

use std::sync::Arc;

use crate::engine::{Executor, Processor};

/// The threads for shards 1.. (shard 0 runs on the caller's).
#[derive(Debug)]
pub struct ShardPool {
    pool: rayon::ThreadPool,
}

impl ShardPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> Result<ShardPool, String> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("shard-{i}"))
            .build()
            .map_err(|e| format!("cannot start {threads} shard threads: {e}"))?;
        Ok(ShardPool { pool })
    }
}

impl Executor for ShardPool {
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        self.pool.in_place_scope(|scope| {
            for i in 1..n {
                scope.spawn(move |_| f(i));
            }
            if n > 0 {
                f(0);
            }
        });
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
