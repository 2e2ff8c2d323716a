//! The flushing side: [`IdFlusher`] writes sealed memtables as runs and
//! merges runs, lent the writing connection one transaction at a time.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{corrupt, Op, Result};
use crate::merge::{write_chunks, Merge, Source};
use crate::run::{load_later, Run};
use crate::shared::{lock, merge_from, Sealed, Shared};
use crate::txn::{dead_runs, delete_runs, lend_one, page_size, Lend, Limits};
use crate::writer::RunWriter;

/// The flushing side of an [`crate::IdIndex`]: writes sealed memtables as runs and
/// merges runs, with the writing connection, on any thread.
#[derive(Clone)]
pub struct IdFlusher {
    pub(crate) shared: Arc<Shared>,
}

impl IdFlusher {
    /// Writes every sealed memtable, oldest first, as a new run with its
    /// mark, then merges runs until each is at least twice the size of the
    /// next newer one, then deletes the rows of the runs merged; first, the
    /// rows of runs that are not live (left by a crash or a failed flush):
    /// [`IdFlusher::flush_sealed_with`] then [`IdFlusher::merge_with`] on
    /// this thread.
    ///
    /// Every database access is one transaction run through `lend` (see
    /// [`Lend`]), so the caller's own commits go between them: short ones
    /// (`synchronous = NORMAL`) that write a new run's parts and filter
    /// pieces, at most [`crate::IdIndex::set_transaction_bytes`] each, and read
    /// ahead the parts a merge needs; one small final transaction per new
    /// run (the connection's own `synchronous`) that makes it live and
    /// either stores its mark (a flush) or marks the merged runs not live
    /// (a merge); then short ones that delete the merged runs' rows. The
    /// encoding and merging run on this thread between the transactions,
    /// without the connection. See the crate docs.
    ///
    /// On `Err`, what was not written stays sealed (and visible to
    /// lookups), the runs not yet merged stay as they were, and the next
    /// call goes on from there (after deleting what this one left). A run
    /// whose final transaction committed is installed even if `lend` then
    /// returns `Err`.
    pub fn flush_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        self.flush_sealed_with(lend)?;
        self.merge_with(lend)
    }

    /// Writes every sealed memtable, oldest first, as a new run with its
    /// mark (no merge: [`IdFlusher::merge_with`], on this thread or
    /// another, does them). Flushes are serialized with each other, not
    /// with a merge: while a merge runs on another thread, its lent
    /// transactions and a flush's interleave, so the mark keeps up with the
    /// seals (a crash during a long merge re-adds at most what was sealed
    /// since the last flush).
    pub fn flush_sealed_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        let _flushing = lock(&self.shared.flushing);
        let limits = self.limits(lend)?;
        loop {
            let Some(sealed) = self.shared.read().sealed.first().cloned() else {
                break;
            };
            if let Err(e) = self.write_sealed(lend, &sealed, &limits) {
                // it may leave rows of a run not live
                self.shared.clean.store(false, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether [`IdFlusher::merge_with`] has work: runs to merge, or rows
    /// of runs that are not live to delete.
    pub fn merge_due(&self) -> bool {
        if !self.shared.clean.load(Ordering::SeqCst) {
            return true;
        }
        let state = self.shared.read();
        state.runs.len() - merge_from(&state.runs) >= 2
    }

    /// Deletes the rows of runs that are not live (left by a crash, a
    /// failed flush or merge) unless none can be there, then merges runs
    /// until each is at least twice the size of the next newer one, each
    /// merge's inputs' rows deleted after it. Serialized with other merges
    /// only: flushes ([`IdFlusher::flush_sealed_with`], on another thread)
    /// go on meanwhile, each of their lent transactions between two of the
    /// merge's, and the runs they add are merged by the next round.
    pub fn merge_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        let _merging = lock(&self.shared.merging);
        let limits = self.limits(lend)?;
        if !self.shared.clean.load(Ordering::SeqCst) {
            self.clean_locked(lend, &limits)?;
        }
        loop {
            let runs = self.shared.read().runs.clone();
            let from = merge_from(&runs);
            let Some(inputs) = runs.get(from..).filter(|s| s.len() >= 2) else {
                break;
            };
            let entries = inputs.iter().map(|r| r.entries).sum::<u64>();
            self.shared.merging_entries.store(entries, Ordering::SeqCst);
            let done = self.merge(lend, inputs, &limits);
            // The merged runs (and their filters) go with the last
            // references to them, before the new run's filter is read.
            drop(runs);
            let done = done.and_then(|merged| load_later(lend, &merged));
            self.shared.merging_entries.store(0, Ordering::SeqCst);
            if let Err(e) = done {
                self.shared.clean.store(false, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Entries of the runs a merge in progress merges (0: none).
    pub fn merging_entries(&self) -> u64 {
        self.shared.merging_entries.load(Ordering::SeqCst)
    }

    /// [`IdFlusher::flush_with`] with `conn` lent for every transaction
    /// (one thread, one connection: tests, the bench).
    pub fn flush(&self, conn: &mut Connection) -> Result<()> {
        self.flush_with(&mut |work| work(conn))
    }

    /// Deletes the rows of runs that are not live (a crash or a failed
    /// flush leaves them; `open` ignores them) in short lent transactions.
    /// Optional: the next merge does it first anyway; this frees the space
    /// earlier (e.g. right after [`crate::IdIndex::open`], with the writer).
    pub fn cleanup_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        let _merging = lock(&self.shared.merging);
        let limits = self.limits(lend)?;
        self.clean_locked(lend, &limits)
    }

    /// [`IdFlusher::cleanup_with`] with `conn` lent for every transaction.
    pub fn cleanup(&self, conn: &mut Connection) -> Result<()> {
        self.cleanup_with(&mut |work| work(conn))
    }

    /// The limits of this flush's transactions (the page size read once).
    fn limits(&self, lend: &mut Lend<'_>) -> Result<Limits> {
        let tx_bytes = self.shared.tx_bytes.load(Ordering::Relaxed);
        let mut page = self.shared.page.load(Ordering::SeqCst);
        if page == 0 {
            lend_one(lend, &mut |conn| {
                page = page_size(conn)?;
                Ok(())
            })?;
            if page == 0 {
                return Err(corrupt("the page size was not read".to_string()));
            }
            self.shared.page.store(page, Ordering::SeqCst);
        }
        Ok(Limits::new(page, tx_bytes))
    }

    /// Deletes the rows of runs that are not live; the caller holds the
    /// merging lock (no merge is writing a run). They are listed while no
    /// flush is writing one either (under the flushing lock, for one
    /// transaction) and deleted after, flushes going on between the
    /// deleting transactions (a new run's id is above every listed one).
    fn clean_locked(&self, lend: &mut Lend<'_>, limits: &Limits) -> Result<()> {
        self.shared.clean.store(true, Ordering::SeqCst);
        let mut dead = Vec::new();
        let listed = {
            let _flushing = lock(&self.shared.flushing);
            lend_one(lend, &mut |conn| {
                dead = dead_runs(conn)?;
                Ok(())
            })
        };
        let done = listed.and_then(|()| delete_runs(lend, &dead, limits));
        if done.is_err() {
            self.shared.clean.store(false, Ordering::SeqCst);
        }
        done
    }

    /// Writes one sealed memtable as a new run: its parts and filter in
    /// short transactions, then a final one that makes it live and stores
    /// its mark (only the mark when it is empty). Then installs it in place
    /// of the sealed memtable.
    fn write_sealed(&self, lend: &mut Lend<'_>, sealed: &Arc<Sealed>, lim: &Limits) -> Result<()> {
        let entries = sealed.mem.sorted();
        let mut out = if entries.is_empty() {
            None
        } else {
            let mut out = RunWriter::new(lim.part_budget, entries.len() as u64, true);
            let mut src = Source::Sorted { entries, at: 0 };
            write_chunks(lend, &mut src, &mut out, lim)?;
            Some(out)
        };
        let mut committed = None;
        let done = lend_one(lend, &mut |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .op("BEGIN (id index flush)")?;
            let id = match &out {
                Some(out) => Some(out.write_final(&tx)?),
                None => None,
            };
            tx.execute(
                "INSERT INTO id_index (one, mark) VALUES (1, ?1) \
                 ON CONFLICT (one) DO UPDATE SET mark = excluded.mark",
                [sealed.mark as i64],
            )
            .op("UPSERT id_index.mark")?;
            tx.commit().op("COMMIT (id index flush)")?;
            committed = Some(id);
            Ok(())
        });
        if let Some(id) = committed {
            let run = match (out.take(), id) {
                (Some(out), Some(id)) => Some(Arc::new(out.into_run(id))),
                _ => None,
            };
            let mut state = self.shared.write();
            if state.sealed.first().is_some_and(|s| Arc::ptr_eq(s, sealed)) {
                state.sealed.remove(0);
            }
            if let Some(run) = run {
                state.runs.push(run);
            }
            state.mark = Some(sealed.mark);
        }
        done
    }

    /// Merges `inputs` (the live runs from `from` on) into one new run: its
    /// parts and filter in short transactions (which also read the inputs'
    /// parts ahead), then a final one that makes it live and the inputs not
    /// live; then swaps it in for them (so no lookup uses them any more)
    /// and deletes their rows in short transactions.
    /// Merges `inputs` into one new run, installed in their place (without
    /// its filter in memory: [`load_later`]); returns it.
    fn merge(&self, lend: &mut Lend<'_>, inputs: &[Arc<Run>], lim: &Limits) -> Result<Arc<Run>> {
        let expected: u64 = inputs.iter().map(|r| r.entries).sum();
        let mut out = RunWriter::new(lim.part_budget, expected, false);
        // the piece being filled, and at most a transaction's worth queued
        let building = out.words.capacity() * 8 + lim.tx_bytes;
        self.shared.building.store(building, Ordering::SeqCst);
        let mut src = Source::Merge(Merge::new(inputs, lim.parts_per_tx));
        let written = write_chunks(lend, &mut src, &mut out, lim);
        self.shared.building.store(0, Ordering::SeqCst);
        written?;
        drop(src);
        let mut committed = None;
        let done = lend_one(lend, &mut |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .op("BEGIN (id index merge)")?;
            let id = out.write_final(&tx)?;
            {
                let mut stmt = tx
                    .prepare_cached("UPDATE id_runs SET live = 0 WHERE run = ?1 AND live = 1")
                    .op("UPDATE id_runs SET live = 0")?;
                for run in inputs {
                    if stmt
                        .execute([run.id as i64])
                        .op("UPDATE id_runs SET live = 0")?
                        != 1
                    {
                        return Err(corrupt(format!("run {}: not live on disk", run.id)));
                    }
                }
            }
            tx.commit().op("COMMIT (id index merge)")?;
            committed = Some(id);
            Ok(())
        });
        let mut installed = None;
        if let Some(id) = committed {
            let merged = Arc::new(out.into_run(id));
            installed = Some(merged.clone());
            let mut state = self.shared.write();
            // Only merges (serialized) replace runs; flushes append new
            // ones meanwhile, after the inputs. Taking the write lock waits
            // for every lookup that may use the inputs.
            let at = inputs
                .first()
                .and_then(|first| state.runs.iter().position(|r| Arc::ptr_eq(r, first)));
            let Some(at) = at.filter(|&at| {
                state
                    .runs
                    .get(at..at + inputs.len())
                    .is_some_and(|rs| rs.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b)))
            }) else {
                return Err(corrupt(format!("run {id}: its inputs are no longer live")));
            };
            state.runs.splice(at..at + inputs.len(), [merged]);
        }
        done?;
        let ids: Vec<u64> = inputs.iter().map(|r| r.id).collect();
        delete_runs(lend, &ids, lim)?;
        installed.ok_or_else(|| corrupt("a merged run was not installed".to_string()))
    }
}
