//! The state both sides share (the processor's [`crate::IdIndex`] and the
//! flush thread's [`crate::IdFlusher`]): sealed memtables, runs, the mark.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::memtable::Memtable;
use crate::run::Run;

pub(crate) struct Shared {
    pub(crate) state: RwLock<State>,
    /// Held for a whole flush of sealed memtables (and a cleanup).
    pub(crate) flushing: Mutex<()>,
    /// Held for a whole merge (and a cleanup): taken after `flushing`
    /// when both are.
    pub(crate) merging: Mutex<()>,
    /// No rows of runs that are not live can be there (but those of a run
    /// being written): false at open and after a failed flush or merge
    /// (the next flush deletes them first; merges wait for that).
    pub(crate) clean: AtomicBool,
    /// The database's page size, once read (0: not yet).
    pub(crate) page: AtomicUsize,
    /// See [`crate::IdIndex::set_transaction_bytes`].
    pub(crate) tx_bytes: AtomicUsize,
    /// See [`crate::IdFlusher::merging_entries`].
    pub(crate) merging_entries: AtomicU64,
    /// Bytes of filter a merge in progress holds for its new run (counted
    /// in [`crate::IdIndex::memory_bytes`]).
    pub(crate) building: AtomicUsize,
}

/// Locks a mutex that guards no data (a panic cannot leave it half done).
pub(crate) fn lock(m: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        // The write sections only move `Arc`s: a panic cannot leave them half done.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(crate) struct State {
    /// Memtables sealed and not yet written, oldest first.
    pub(crate) sealed: Vec<Arc<Sealed>>,
    /// Live runs, oldest first.
    pub(crate) runs: Vec<Arc<Run>>,
    /// The last flushed mark.
    pub(crate) mark: Option<u64>,
}

pub(crate) struct Sealed {
    pub(crate) mem: Memtable,
    pub(crate) mark: u64,
}

/// Where the merge after a flush starts: the newest runs, extended while
/// the run before them is less than twice their total.
pub(crate) fn merge_from(runs: &[Arc<Run>]) -> usize {
    let mut from = runs.len().saturating_sub(1);
    let mut total = runs.last().map_or(0, |r| r.entries);
    while from > 0 {
        let before = runs.get(from - 1).map_or(0, |r| r.entries);
        if before >= total.saturating_mul(2) {
            break;
        }
        from -= 1;
        total = total.saturating_add(before);
    }
    from
}
