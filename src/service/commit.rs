//! The commit queue: group commit of the applied calls of both engines.
//!
//! Every mutating call is applied to its engine under the engines lock
//! (`apply`), gets the next ticket and is queued here in engine order, still
//! under the lock. Outside the lock it encodes its output for the store
//! ([`Encoded`]); then the first caller that finds no commit running and an
//! encoded call at the head of the queue becomes the leader: it takes every
//! encoded call from the head and stores them all in ONE SQLite transaction
//! (one fsync), then wakes the others. Each call is answered only after the
//! commit that includes it, so a 2xx means durable.
//!
//! If a commit fails (or a call cannot be encoded), that call, every call of
//! its group and every call queued behind it (their engine state builds on
//! the failed ones) are answered 503, the queue is "poisoned" (calls applied
//! meanwhile are refused with 503 too), and the engines are rebuilt from the
//! store (`recover`) before anything else uses them: nothing of those calls
//! was applied, and the engines equal the store. If the rebuild fails, the
//! service stays broken (readyz 503) and every later call retries it first.
//!
//! Readers of the engines (`/results`, `/status`), checkpoints and restores
//! first wait until everything applied is committed ("settled"), holding the
//! engines lock, so they never see a state that a failed commit takes back.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar};

thread_local! {
    /// The condition a caller on this thread waits on for its commit.
    static WAIT: Arc<Condvar> = Arc::new(Condvar::new());
}

use crate::store::{self, CommandRow, EngineId};

use super::order::{self, Held, Nothing};
use super::queue::{wake_all, wake_group, CommitQueue, Encoded, Pending};
use super::{Metrics, Service, ServiceError};

/// Bytes committed between two pokes of the WAL copier.
const WAL_POKE_BYTES: u64 = 4 << 20;

impl Service {
    /// Steps 2 and 3 of a call: hands the encoded output to the queue (and
    /// leads the commit at once if none is running), runs `meanwhile` (the
    /// answer's JSON, overlapping the commit in flight), then leads a commit
    /// or waits for the one that includes this call. `at`: the call holds
    /// nothing (a leader may have to rebuild the engines).
    pub(super) fn commit<R>(
        &self,
        at: &mut Held<Nothing>,
        ticket: u64,
        enc: Result<Encoded, ServiceError>,
        meanwhile: impl FnOnce() -> R,
    ) -> Result<R, ServiceError> {
        self.hand_over(at, ticket, enc)?;
        self.lead(at);
        let answer = meanwhile();
        self.finish(at, ticket).map(|()| answer)
    }

    /// Step 2 alone: gives the queued call `ticket` its encoded output
    /// (without leading a commit). A call that could not be encoded fails,
    /// and with it everything queued behind it.
    pub(super) fn hand_over(
        &self,
        at: &mut Held<Nothing>,
        ticket: u64,
        enc: Result<Encoded, ServiceError>,
    ) -> Result<(), ServiceError> {
        let enc = match enc {
            Ok(enc) => enc,
            Err(e) => {
                // Nothing behind this call could ever commit: fail them all.
                let mut q = self.queue(at);
                self.fail_all(&mut q, "internal failure; nothing was applied", &[]);
                wake_all(&q);
                self.wake_drainers(&q);
                return Err(e);
            }
        };
        let mut q = self.queue(at);
        if let Some(p) = q.queue.iter_mut().rev().find(|p| p.ticket == ticket) {
            p.encoded = Some(enc);
        }
        Ok(())
    }

    /// Step 3 alone: waits for the commit that includes `ticket`, leading
    /// one whenever none runs and the head of the queue is encoded.
    pub(super) fn finish(&self, at: &mut Held<Nothing>, ticket: u64) -> Result<(), ServiceError> {
        let cv = WAIT.with(Arc::clone);
        loop {
            let mut q = self.queue(at);
            loop {
                if let Some(r) = q.verdicts.remove(&ticket) {
                    q.waiting.remove(&ticket);
                    return r.map_err(ServiceError::Unavailable);
                }
                if !q.leader && q.queue.front().is_some_and(|p| p.encoded.is_some()) {
                    break;
                }
                q.waiting.insert(ticket, cv.clone());
                q = q.wait(&cv);
            }
            q.waiting.remove(&ticket);
            drop(q);
            self.lead(at);
        }
    }

    /// Queues an applied call (under the engines lock, in ticket order).
    /// Refused when a commit failed meanwhile: the call builds on state that
    /// is being taken back (the engines are rebuilt before anyone uses them).
    pub(super) fn enqueue(
        &self,
        at: &mut Held<order::Engines>,
        pending: Pending,
    ) -> Result<(), ServiceError> {
        let mut q = self.queue(at);
        if q.poisoned {
            Metrics::inc(&self.env.metrics.storage_failures, 1);
            return Err(ServiceError::Unavailable(
                "storage failure; the state is being rebuilt".into(),
            ));
        }
        q.queue.push_back(pending);
        Ok(())
    }

    /// Unless a commit is running or the head of the queue is not encoded
    /// yet: commits every encoded call at the head of the queue in one
    /// transaction, records their verdicts and wakes their callers.
    pub(super) fn lead(&self, at: &mut Held<Nothing>) {
        let Some(group) = self.take_group(at) else {
            return;
        };
        let res = self.store_group(at, &group);
        let mut q = self.queue(at);
        q.leader = false;
        let tickets: Vec<u64> = group.iter().map(|p| p.ticket).collect();
        match res {
            Ok(()) => {
                self.committed(&mut q, &group);
                wake_group(&q, &tickets);
            }
            Err(e) => {
                tracing::error!(error = %e, "storage failure; rebuilding the engines from the store");
                self.fail_all(&mut q, &format!("storage failure: {e}"), &tickets);
                wake_all(&q);
                self.wake_drainers(&q);
                drop(q);
                // Rebuild now (the next caller would otherwise do it).
                drop(self.lock_consistent(at));
                return;
            }
        }
        self.wake_drainers(&q);
        if self.commits.wal.restart_due() {
            // The group is answered; the next leader waits for this short
            // copy (the background copier did nearly all of it).
            drop(q);
            // Whether it works or not, the next try waits for the next passive
            // round (a reader on an old snapshot may hold it up a while).
            if let Err(e) = self.writer(at).restart_wal() {
                tracing::warn!(error = %e, "WAL restart failed (the WAL keeps the data)");
            }
            self.commits.wal.restart_tried();
        }
    }

    /// Becomes the leader and takes every encoded call at the head of the
    /// queue; None when a commit is running or the head is not encoded.
    fn take_group(&self, at: &mut Held<Nothing>) -> Option<Vec<Pending>> {
        let mut q = self.queue(at);
        if q.leader || q.queue.front().is_none_or(|p| p.encoded.is_none()) {
            return None;
        }
        q.leader = true;
        let n = q.queue.iter().take_while(|p| p.encoded.is_some()).count();
        Some(q.queue.drain(..n).collect())
    }

    /// Stores a group in one transaction (the fault hooks may fail it, or
    /// stop the process once it is durable).
    fn store_group(&self, at: &mut Held<Nothing>, group: &[Pending]) -> store::Result<()> {
        let rows: Vec<CommandRow<'_>> = group.iter().map(Pending::row).collect();
        let (n, fail) = self.env.faults.commit_begins();
        let res = self.writer(at).append_or_fail(&rows, fail);
        if res.is_ok() {
            // durable, and nobody answered yet
            self.env.faults.committed(n);
        }
        res
    }

    /// Records a stored group: its verdicts, the commands logged, the WAL
    /// bytes, the new heads; wakes the checkpointer when one is due.
    fn committed(&self, q: &mut CommitQueue, group: &[Pending]) {
        for p in group {
            q.verdicts.insert(p.ticket, Ok(()));
            *q.logged.get_mut(p.engine) += 1;
        }
        let bytes: usize = group
            .iter()
            .map(|p| {
                p.body.bytes.len()
                    + p.encoded
                        .as_ref()
                        .and_then(|e| e.changes.as_ref())
                        .map_or(0, |c| c.2.len())
            })
            .sum();
        self.wal_written(bytes);
        self.env.metrics.commit_group(group.len());
        if let Some(last) = group.last() {
            let now = last.heads;
            self.output.heads.send_if_modified(|h| {
                let changed = h.output_differs(&now);
                h.take_output(&now);
                changed
            });
        }
        if self.checkpoints.checkpoint_every > 0
            && [EngineId::Window, EngineId::Patterns]
                .iter()
                .any(|e| q.logged.get(*e) >= self.auto_threshold(*e))
        {
            // The checkpointer thread takes it after these calls.
            self.wake_checkpointer("no automatic checkpoints (the command log keeps every call)");
        }
    }

    /// Counts bytes committed to the WAL; pokes the WAL copier every
    /// [`WAL_POKE_BYTES`].
    pub(super) fn wal_written(&self, bytes: usize) {
        let total = self
            .commits
            .wal_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed)
            + bytes as u64;
        if total >= WAL_POKE_BYTES {
            self.commits.wal_bytes.store(0, Ordering::Relaxed);
            self.commits.wal.poke();
        }
    }

    /// Fails `tickets` and everything queued, and poisons the queue.
    /// (The caller wakes the waiting callers: [`wake_all`].)
    fn fail_all(&self, q: &mut CommitQueue, msg: &str, tickets: &[u64]) {
        q.poisoned = true;
        let queued: Vec<u64> = q.queue.drain(..).map(|p| p.ticket).collect();
        for t in tickets.iter().chain(&queued) {
            Metrics::inc(&self.env.metrics.storage_failures, 1);
            q.verdicts.insert(*t, Err(msg.to_string()));
        }
    }

    /// Waits (holding the engines lock) until every applied call is
    /// committed or failed. True when a commit failed (the queue is
    /// poisoned).
    pub(super) fn drain(&self, at: &mut Held<order::Engines>) -> bool {
        let mut q = self.queue(at);
        while !q.poisoned && (q.leader || !q.queue.is_empty()) {
            q.draining += 1;
            q = q.wait(&self.commits.committed);
            q.draining -= 1;
        }
        q.poisoned
    }

    /// Wakes the readers settling the engines ([`Service::drain`]), if any;
    /// the caller holds the queue's lock (`q`).
    fn wake_drainers(&self, q: &CommitQueue) {
        if q.draining > 0 {
            self.commits.committed.notify_all();
        }
    }
}
