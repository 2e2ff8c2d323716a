//! The threads the window engine's key-hash shards run on.
//!
//! The engine starts no threads of its own (it stays a pure library); it
//! runs its shards side by side through an [`Executor`] the caller lends it.
//! [`ShardPool`] is that executor for the service, the benchmarks and the
//! tests: a `rayon` pool with one thread per shard (`shard-0`, `shard-1`,
//! ...), where call `i` of a round always runs on thread `i mod threads`, so
//! a shard's memory stays in the cache of the core that works on it.

use std::sync::Arc;

use crate::engine::{Executor, Processor};

/// A pool with one thread per shard.
#[derive(Debug)]
pub struct ShardPool {
    pool: rayon::ThreadPool,
}

impl ShardPool {
    /// A pool of `threads` threads.
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
        let threads = self.pool.current_num_threads();
        self.pool.broadcast(|ctx| {
            for i in (ctx.index()..n).step_by(threads) {
                f(i);
            }
        });
    }
}

/// Gives `p` `k` key-hash shards, with a pool of `k` threads when `k > 1`.
pub fn set_shards(p: &mut Processor, k: usize) -> Result<(), String> {
    let executor: Option<Arc<dyn Executor>> = if k > 1 {
        Some(Arc::new(ShardPool::new(k)?))
    } else {
        None
    };
    p.set_shards(k, executor)
}
