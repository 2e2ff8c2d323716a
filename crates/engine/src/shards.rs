//! Key-hash shards of the live window index.
//!
//! Every bucket belongs to exactly one key, and every per-key operation
//! (window assignment, bucket updates, the reconciliation of one event's
//! touches) stays within that key. So the live index is split into `K`
//! [`LiveIndex`] shards by a stable hash of the key's bytes, and the
//! processor runs the per-key work of a call on the shards side by side
//! ([`ShardedLive::run`]) while source checks, the watermark and the global
//! sequence stay with the caller. Which shard holds a key is never
//! observable: every output is put back into the contract's order, so
//! answers, changelog and checkpoints are the same bytes for every `K`.
//!
//! The engine starts no threads: "side by side" is an [`Executor`] the
//! caller lends it (the service's is a pool with a thread per shard). Without
//! one the shards run one after another on the caller's thread, and with
//! `K = 1` every call runs exactly as an unsharded index would.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use super::aggregate::Agg;
use super::live::{BucketRef, LiveIndex};
use super::pipeline::WindowDef;
use streamforge_keys::hash_str;
use streamforge_keys::{KeyId, KeyTable};

/// The largest number of shards a processor accepts.
pub const MAX_SHARDS: usize = 64;

/// The live index in `K` key-hash shards.
#[derive(Debug, Clone)]
pub struct ShardedLive {
    shards: Vec<LiveIndex>,
    /// The shard of each interned key (`KeyId` order), kept up to date by
    /// [`ShardedLive::track_keys`].
    shard_of: Vec<u8>,
    /// What runs the shards side by side, when `K > 1` and one was lent.
    pool: Option<Arc<dyn Executor>>,
    /// Batches with fewer unique events stay on the caller's thread.
    pub min_events: usize,
}

/// Below this many unique events a batch runs on the caller's thread even
/// with several shards: handing work to the shard threads costs more.
pub const DEFAULT_MIN_EVENTS: usize = 64;

/// Runs work side by side: what the caller lends the engine for its shards.
pub trait Executor: Send + Sync + Debug {
    /// Calls `f(i)` for every `i < n`, side by side where it can, and
    /// returns once every call has returned.
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync));
}

/// One shard's part of [`ShardedLive::run`]: its input until a call of the
/// executor takes it, then (once that call returns) its result.
enum Slot<'a, I, R> {
    /// Not started.
    Todo(&'a mut LiveIndex, I),
    /// Taken by a call that has not returned.
    Running,
    /// Finished.
    Done(R),
}

/// The shard of a key with `k` shards: a stable hash of its bytes, so the
/// placement depends on the key alone (not on the order keys were seen).
fn shard_for(name: &str, k: usize) -> u8 {
    ((hash_str(name) >> 32) % k as u64) as u8
}

impl ShardedLive {
    /// One empty shard.
    pub fn new(defs: &[WindowDef]) -> ShardedLive {
        ShardedLive {
            shards: vec![LiveIndex::new(defs)],
            shard_of: Vec::new(),
            pool: None,
            min_events: DEFAULT_MIN_EVENTS,
        }
    }

    /// One shard holding `live` (a restored index), its keys in `keys`.
    pub fn from_index(live: LiveIndex, keys: &KeyTable) -> ShardedLive {
        let mut s = ShardedLive {
            shards: vec![live],
            shard_of: Vec::new(),
            pool: None,
            min_events: DEFAULT_MIN_EVENTS,
        };
        s.track_keys(keys);
        s
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Whether calls may run their per-key work on several threads.
    #[inline]
    pub fn parallel(&self) -> bool {
        self.pool.is_some()
    }

    /// Redistributes every bucket over `k` shards (`1..=MAX_SHARDS`), run
    /// side by side by `executor` when `k > 1` and one is given (else one
    /// after another). `keys` must hold every key of the index.
    pub fn reshard(
        &mut self,
        k: usize,
        executor: Option<Arc<dyn Executor>>,
        defs: &[WindowDef],
        keys: &KeyTable,
    ) -> Result<(), String> {
        if !(1..=MAX_SHARDS).contains(&k) {
            return Err(format!(
                "shards must be between 1 and {MAX_SHARDS}, not {k}"
            ));
        }
        if k != self.shards.len() {
            let old = std::mem::replace(&mut self.shards, vec![LiveIndex::new(defs); k]);
            self.shard_of.clear();
            self.track_keys(keys);
            // Every key's buckets are in one old shard and move to one new
            // one, into an index of the same windows.
            for shard in &old {
                shard.buckets(|b, agg| {
                    let s = self.shard_of[b.key as usize] as usize;
                    self.shards[s].place(b, *agg);
                });
            }
        }
        self.pool = executor.filter(|_| k > 1);
        Ok(())
    }

    /// Places every key interned since the last call.
    #[inline]
    pub fn track_keys(&mut self, keys: &KeyTable) {
        let k = self.shards.len();
        while self.shard_of.len() < keys.len() {
            let id = self.shard_of.len() as KeyId;
            let s = if k == 1 {
                0
            } else {
                shard_for(keys.name(id), k)
            };
            self.shard_of.push(s);
        }
    }

    /// The shard index of a tracked key.
    #[inline]
    pub fn shard_of(&self, key: KeyId) -> usize {
        if self.shards.len() == 1 {
            0
        } else {
            self.shard_of[key as usize] as usize
        }
    }

    /// The shard that holds `key`'s buckets.
    #[inline]
    pub fn shard(&self, key: KeyId) -> &LiveIndex {
        &self.shards[self.shard_of(key)]
    }

    /// The shard that holds `key`'s buckets, mutably.
    #[inline]
    pub fn shard_mut(&mut self, key: KeyId) -> &mut LiveIndex {
        let s = self.shard_of(key);
        &mut self.shards[s]
    }

    /// Whether a tick with these arguments would find any bucket in any
    /// shard ([`LiveIndex::tick_has_work`]).
    pub fn tick_has_work(
        &self,
        newly: Option<(Option<i128>, i128)>,
        threshold: Option<i128>,
    ) -> bool {
        self.shards
            .iter()
            .any(|s| s.tick_has_work(newly, threshold))
    }

    /// Runs `f(shard index, shard, input)` for every shard, side by side
    /// through the executor when there is one, and returns the results in
    /// shard order.
    pub fn run<I, R, F>(&mut self, inputs: Vec<I>, f: F) -> Vec<R>
    where
        I: Send,
        R: Send,
        F: Fn(usize, &mut LiveIndex, I) -> R + Sync,
    {
        debug_assert_eq!(inputs.len(), self.shards.len());
        match &self.pool {
            Some(pool) => {
                let slots: Vec<Mutex<Slot<'_, I, R>>> = self
                    .shards
                    .iter_mut()
                    .zip(inputs)
                    .map(|(live, input)| Mutex::new(Slot::Todo(live, input)))
                    .collect();
                pool.run(slots.len(), &|i| {
                    // A call for no shard, or a second one for the same
                    // shard, finds nothing to do. The lock is not held
                    // while `f` runs.
                    let Some(slot) = slots.get(i) else { return };
                    let lock = || slot.lock().unwrap_or_else(|p| p.into_inner());
                    let taken = std::mem::replace(&mut *lock(), Slot::Running);
                    if let Slot::Todo(live, input) = taken {
                        let r = f(i, live, input);
                        *lock() = Slot::Done(r);
                    }
                });
                slots
                    .into_iter()
                    .enumerate()
                    .map(|(i, slot)| {
                        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
                            Slot::Done(r) => r,
                            // A shard the executor skipped runs here.
                            Slot::Todo(live, input) => f(i, live, input),
                            // Its call of `f` panicked and the executor
                            // swallowed the panic (the service's pool
                            // propagates it): not reachable from any input,
                            // as `f` is the engine's own, non-panicking code.
                            Slot::Running => panic!("a shard's work panicked"),
                        }
                    })
                    .collect()
            }
            None => self
                .shards
                .iter_mut()
                .zip(inputs)
                .enumerate()
                .map(|(s, (live, input))| f(s, live, input))
                .collect(),
        }
    }

    /// Number of live buckets.
    pub fn len(&self) -> usize {
        self.shards.iter().map(LiveIndex::len).sum()
    }

    /// The aggregate of a live bucket.
    #[inline]
    pub fn get(&self, b: &BucketRef) -> Option<&Agg> {
        self.shard(b.key).get(b)
    }

    /// Calls `f` for every live bucket with `lo < end <= hi`, shard by
    /// shard, with its aggregate.
    pub fn for_each_ending_in(
        &self,
        lo: Option<i128>,
        hi: i128,
        mut f: impl FnMut(BucketRef, &Agg),
    ) {
        for shard in &self.shards {
            shard.for_each_ending_in(lo, hi, &mut f);
        }
    }

    /// [`LiveIndex::sweep_ready`], shard by shard: a tick's
    /// [`ShardedLive::for_each_ending_in`].
    pub fn sweep_ready(&mut self, lo: Option<i128>, hi: i128, mut f: impl FnMut(BucketRef, &Agg)) {
        for shard in &mut self.shards {
            shard.sweep_ready(lo, hi, &mut f);
        }
    }

    /// Every live bucket with its aggregate, in no particular order.
    pub fn buckets<'s>(&'s self, mut f: impl FnMut(BucketRef, &'s Agg)) {
        for shard in &self.shards {
            shard.buckets(&mut f);
        }
    }

    /// Removes and returns every live bucket with `end < threshold`, in no
    /// particular order.
    pub fn finalize_below(&mut self, threshold: i128) -> Vec<BucketRef> {
        let mut out = Vec::new();
        for shard in &mut self.shards {
            shard.finalize_below(threshold, |b| out.push(b));
        }
        out
    }
}
