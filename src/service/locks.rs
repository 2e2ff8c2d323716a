//! The locks, in their order (see `order`): the checkpoint slot, a turn of
//! the turnstile, the engines lock, the commit queue, the writer; and the
//! pool of reading connections.

use super::*;

impl Service {
    /// Takes the engines lock. A poisoned lock (a panic inside the critical
    /// section) marks the state for a rebuild from the store.
    pub(super) fn lock<'a, L: Before<order::Engines>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, Inner, order::Engines> {
        let guard = match self.engines_lock.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                self.engines_lock.inner.clear_poison();
                let mut g = poisoned.into_inner();
                g.broken = true;
                g
            }
        };
        Locked::new(guard, at)
    }

    /// Locks and makes sure the engines are not ahead of a failed commit
    /// (rebuilds them from the store after a storage failure or a panic).
    pub(super) fn lock_consistent<'a, L: Before<order::Engines>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Result<Locked<'a, Inner, order::Engines>, ServiceError> {
        let mut g = self.lock(at);
        let (inner, at) = g.parts();
        if inner.broken || self.queue(at).poisoned {
            self.settle(inner, at)?;
        }
        Ok(g)
    }

    /// Locks once everything applied is committed: the engines equal
    /// the store (reads, checkpoints).
    pub(super) fn lock_settled<'a, L: Before<order::Engines>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Result<Locked<'a, Inner, order::Engines>, ServiceError> {
        let mut g = self.lock(at);
        let (inner, at) = g.parts();
        self.settle(inner, at)?;
        Ok(g)
    }

    /// One window checkpoint, restore or deletion at a time (see the field).
    pub(super) fn checkpointing<'a, L: Before<order::Checkpointing>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, (), order::Checkpointing> {
        let guard = (self.checkpoints.checkpointing.lock()).unwrap_or_else(|e| e.into_inner());
        Locked::new(guard, at)
    }

    pub(super) fn queue<'a, L: Before<order::Queue>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, CommitQueue, order::Queue> {
        let guard = self.commits.queue.lock().unwrap_or_else(|e| e.into_inner());
        Locked::new(guard, at)
    }

    pub(super) fn writer<'a, L: Before<order::Writer>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, Writer, order::Writer> {
        let guard = self
            .commits
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Locked::new(guard, at)
    }

    /// Runs `f` on a pooled reading connection (never the engines lock).
    pub(super) fn with_reader<R>(
        &self,
        f: impl FnOnce(&mut Reader) -> store::Result<R>,
    ) -> Result<R, ServiceError> {
        let pooled = self
            .output
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        let mut reader = match pooled {
            Some(r) => r,
            None => Reader::open(&self.env.db)?,
        };
        let out = f(&mut reader);
        let mut pool = self
            .output
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if pool.len() < 8 {
            pool.push(reader);
        }
        Ok(out?)
    }
}
