//! The lent transactions: how a flush borrows the writing connection, the
//! short ones with `synchronous = NORMAL`, and those that delete the rows
//! of runs no longer live.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::error::{corrupt, Error, Op, Result};
use crate::filter::PIECE_BYTES;
use crate::row_ids::{row_key, run_id};

/// Lends the writing connection for one transaction: `lend(work)` runs
/// `work` once with the connection (the service locks its writer, calls
/// `work`, unlocks) and returns what it returns, or returns `Err` without
/// running it. `work` begins and commits (or rolls back) its own
/// transaction and leaves the connection as it found it. See
/// [`crate::IdFlusher::flush_with`].
pub type Lend<'a> = dyn FnMut(&mut dyn FnMut(&mut Connection) -> Result<()>) -> Result<()> + 'a;

/// Bytes of parts and filter pieces a flush or merge writes per lent
/// transaction, by default (see [`crate::IdIndex::set_transaction_bytes`]): 512
/// parts with 4 KiB pages.
pub const TRANSACTION_BYTES: usize = 2 << 20;
/// A transaction that deletes the rows of merged runs frees at most this
/// many times the pages a writing transaction writes: a deleted part's page
/// goes to the freelist unwritten (only the b-tree and freelist pages that
/// point to it are written).
const DELETE_FACTOR: usize = 4;

/// What a flush needs to know before it writes (see [`crate::IdFlusher::flush_with`]).
pub(crate) struct Limits {
    /// Bytes a part may take: the largest blob that SQLite stores whole in
    /// one leaf page of a rowid table (payload up to `page size - 35`, of
    /// which the record header takes 4 bytes): one page read per part, no
    /// overflow page half empty.
    pub(crate) part_budget: usize,
    /// Bytes of parts and filter pieces a short transaction writes (at
    /// least one part or piece).
    pub(crate) tx_bytes: usize,
    /// Parts per short transaction (`tx_bytes / page size`, at least 1).
    pub(crate) parts_per_tx: usize,
    /// Pages a deleting transaction frees at most (a piece counts its
    /// pages; at least one part or piece).
    pub(crate) delete_pages: usize,
    /// Pages of a filter piece.
    pub(crate) piece_pages: usize,
}

impl Limits {
    pub(crate) fn new(page: usize, tx_bytes: usize) -> Limits {
        let page = page.clamp(512, 65_536);
        let tx_bytes = tx_bytes.max(1);
        let parts_per_tx = (tx_bytes / page).max(1);
        Limits {
            part_budget: page - 48,
            tx_bytes,
            parts_per_tx,
            delete_pages: parts_per_tx.saturating_mul(DELETE_FACTOR),
            piece_pages: (PIECE_BYTES / page).max(1),
        }
    }
}

/// Calls `lend` once with `work`; a lender that returns `Ok` without
/// running it is an error (the flush cannot go on without that transaction).
pub(crate) fn lend_one(
    lend: &mut Lend<'_>,
    work: &mut dyn FnMut(&mut Connection) -> Result<()>,
) -> Result<()> {
    let mut ran = false;
    lend(&mut |conn| {
        ran = true;
        work(conn)
    })?;
    if ran {
        Ok(())
    } else {
        Err(Error::Sqlite {
            op: "id index: the lender returned Ok without running the transaction",
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
                None,
            ),
        })
    }
}

/// Runs `f` in a short transaction with `synchronous = NORMAL` (when the
/// connection's level is higher; reset after, also on error): its commit
/// writes the WAL without syncing it. The next commit with the
/// connection's own level (the final transaction of the flush, or any
/// commit of the service) syncs the WAL and with it these frames; until
/// then they belong to no live run, so losing them loses nothing.
pub(crate) fn short_tx<T>(
    conn: &mut Connection,
    f: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    let level: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .op("PRAGMA synchronous (id index)")?;
    let lower = level > 1;
    if lower {
        conn.pragma_update(None, "synchronous", "NORMAL")
            .op("PRAGMA synchronous = NORMAL (id index)")?;
    }
    let done = (|| {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN (id index, short)")?;
        let t = f(&tx)?;
        tx.commit().op("COMMIT (id index, short)")?;
        Ok(t)
    })();
    let reset = if lower {
        conn.pragma_update(None, "synchronous", level)
            .op("PRAGMA synchronous (after id index)")
    } else {
        Ok(())
    };
    let t = done?;
    reset?;
    Ok(t)
}

/// The rows of runs that are not live: written by a flush that did not
/// finish, or replaced by a merge and not deleted yet.
pub(crate) fn dead_runs(conn: &Connection) -> Result<Vec<u64>> {
    let mut stmt = conn
        .prepare_cached("SELECT run FROM id_runs WHERE live = 0 ORDER BY run")
        .op("SELECT dead id_runs")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .op("SELECT dead id_runs")?;
    let mut dead = Vec::new();
    for id in rows {
        dead.push(run_id(id.op("SELECT dead id_runs")?)?);
    }
    Ok(dead)
}

/// Deletes the rows of runs that are not live (their parts, filter pieces,
/// then the row, so that a run's id is not taken again while rows of it
/// are left), each transaction freeing at most `delete_pages` pages.
pub(crate) fn delete_runs(lend: &mut Lend<'_>, runs: &[u64], lim: &Limits) -> Result<()> {
    for &run in runs {
        let mut done = false;
        while !done {
            lend_one(lend, &mut |conn| {
                done = short_tx(conn, |tx| delete_some(tx, run, lim))?;
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// One deleting transaction's work on run `run`: true once its row is gone.
pub(crate) fn delete_some(tx: &Connection, run: u64, lim: &Limits) -> Result<bool> {
    let live: Option<i64> = tx
        .query_row(
            "SELECT live FROM id_runs WHERE run = ?1",
            [run as i64],
            |r| r.get(0),
        )
        .optional()
        .op("SELECT id_runs.live")?;
    if live.is_some_and(|l| l != 0) {
        return Err(corrupt(format!(
            "run {run} is live; its rows are not deleted"
        )));
    }
    let lo = row_key(run, 0)?;
    let hi = lo | 0xFFFF_FFFF;
    let parts = tx
        .prepare_cached(
            "DELETE FROM id_parts WHERE key IN \
             (SELECT key FROM id_parts WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3)",
        )
        .op("DELETE FROM id_parts")?
        .execute(params![lo, hi, lim.delete_pages as i64])
        .op("DELETE FROM id_parts")?;
    if parts >= lim.delete_pages {
        return Ok(false);
    }
    let pieces = ((lim.delete_pages - parts) / lim.piece_pages).max(1);
    let deleted = tx
        .prepare_cached(
            "DELETE FROM id_filters WHERE key IN \
             (SELECT key FROM id_filters WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3)",
        )
        .op("DELETE FROM id_filters")?
        .execute(params![lo, hi, pieces as i64])
        .op("DELETE FROM id_filters")?;
    if deleted >= pieces {
        return Ok(false);
    }
    tx.execute(
        "DELETE FROM id_runs WHERE run = ?1 AND live = 0",
        [run as i64],
    )
    .op("DELETE FROM id_runs")?;
    Ok(true)
}

pub(crate) fn page_size(conn: &Connection) -> Result<usize> {
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .op("PRAGMA page_size")?;
    Ok(page.clamp(512, 65_536) as usize)
}
