//! Runs: a run's fences and filter in memory, its parts read from disk,
//! its filter loaded (at open, or after a merge installed it).

use std::sync::{Arc, OnceLock};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension};

use crate::checksum::checked;
use crate::error::{corrupt, Op, Result};
use crate::filter::{Bloom, WORDS_PER_BLOCK};
use crate::part::search_part;
use crate::row_ids::row_key;
use crate::txn::{lend_one, Lend};

/// A run as memory holds it: its row, fences and (once read) filter.
pub(crate) struct Run {
    pub(crate) id: u64,
    pub(crate) entries: u64,
    /// First hash of each part, nondecreasing.
    pub(crate) fences: Vec<u64>,
    /// Its filter's size, probes and layout, as stored.
    pub(crate) blocks: u64,
    pub(crate) probes: u32,
    pub(crate) sorted: bool,
    /// Its filter, once in memory: a merged run is installed before its
    /// filter is read back (after the merged runs' filters are gone, so
    /// that a merge never holds both), and until then every lookup reads
    /// its parts.
    pub(crate) filter: OnceLock<Bloom>,
}

impl Run {
    /// Whether the run may hold `hash` (`mixed`: its [`crate::hash::mix`]); true while
    /// its filter is not in memory.
    pub(crate) fn may_contain(&self, hash: u64, mixed: u64) -> bool {
        self.filter.get().is_none_or(|f| f.may_contain(hash, mixed))
    }

    /// Reads the parts that may hold `hash`: the one before the first fence
    /// at or above it, and those whose fence is `hash` (a hash with many
    /// positions may span parts).
    pub(crate) fn lookup(&self, conn: &Connection, hash: u64, out: &mut Vec<u64>) -> Result<()> {
        let at = self.fences.partition_point(|&f| f < hash);
        let mut part = at.saturating_sub(1);
        while let Some(&fence) = self.fences.get(part) {
            if part >= at && fence != hash {
                break;
            }
            let done = with_part(conn, self.id, part, |blob| {
                search_part(blob, fence, hash, out)
            })?;
            if done {
                break;
            }
            part += 1;
        }
        Ok(())
    }
}

/// Calls `f` with the stored blob of a part (borrowed from SQLite).
pub(crate) fn with_part<T>(
    conn: &Connection,
    run: u64,
    part: usize,
    f: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    let key = row_key(run, part)?;
    let mut stmt = conn
        .prepare_cached("SELECT data FROM id_parts WHERE key = ?1")
        .op("SELECT FROM id_parts")?;
    let found = stmt
        .query_row([key], |row| {
            Ok(match row.get_ref(0)? {
                ValueRef::Blob(b) => f(b),
                _ => Err(corrupt(format!("run {run} part {part} is not a blob"))),
            })
        })
        .optional()
        .op("SELECT FROM id_parts")?;
    match found {
        Some(r) => r,
        None => Err(corrupt(format!(
            "run {run} part {part} is missing (was the reading connection inside a \
             transaction older than the flush that wrote it?)"
        ))),
    }
}

pub(crate) fn decode_fences(blob: &[u8], run: i64) -> Result<Vec<u64>> {
    let body = checked(blob, || format!("run {run}: fences"))?;
    let (words, tail) = body.as_chunks::<8>();
    if !tail.is_empty() {
        return Err(corrupt(format!(
            "run {run}: fences of {} bytes",
            body.len()
        )));
    }
    let fences: Vec<u64> = words.iter().map(|w| u64::from_le_bytes(*w)).collect();
    if fences.windows(2).any(|w| matches!(w, [a, b] if a > b)) {
        return Err(corrupt(format!("run {run}: fences out of order")));
    }
    Ok(fences)
}

pub(crate) fn load_filter(
    conn: &Connection,
    run: u64,
    blocks: i64,
    probes: u32,
    sorted: bool,
) -> Result<Bloom> {
    let blocks = u64::try_from(blocks)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| corrupt(format!("run {run}: {blocks} filter blocks")))?;
    let want = blocks.saturating_mul(WORDS_PER_BLOCK as u64);
    // Its exact size at once (grown piece by piece, the vector's capacity
    // ended up to twice the filter's size).
    let mut words: Vec<u64> = Vec::new();
    words
        .try_reserve_exact(usize::try_from(want).unwrap_or(usize::MAX))
        .map_err(|_| corrupt(format!("run {run}: a filter of {want} words")))?;
    let mut stmt = conn
        .prepare_cached("SELECT key, data FROM id_filters WHERE key BETWEEN ?1 AND ?2 ORDER BY key")
        .op("SELECT FROM id_filters")?;
    let lo = row_key(run, 0)?;
    let mut rows = stmt
        .query([lo, lo | 0xFFFF_FFFF])
        .op("SELECT FROM id_filters")?;
    let mut piece: i64 = 0;
    while let Some(row) = rows.next().op("SELECT FROM id_filters (next)")? {
        let key: i64 = row.get(0).op("id_filters.key")?;
        if key != lo + piece {
            return Err(corrupt(format!(
                "run {run}: filter piece {piece} is missing"
            )));
        }
        let ValueRef::Blob(blob) = row.get_ref(1).op("id_filters.data")? else {
            return Err(corrupt(format!(
                "run {run}: filter piece {piece} is not a blob"
            )));
        };
        let body = checked(blob, || format!("run {run}: filter piece {piece}"))?;
        let (ws, tail) = body.as_chunks::<8>();
        if !tail.is_empty() || words.len() as u64 + ws.len() as u64 > want {
            return Err(corrupt(format!(
                "run {run}: filter piece {piece} has a wrong size"
            )));
        }
        words.extend(ws.iter().map(|w| u64::from_le_bytes(*w)));
        piece += 1;
    }
    if words.len() as u64 != want {
        return Err(corrupt(format!(
            "run {run}: filter of {} words, {want} expected",
            words.len()
        )));
    }
    Ok(Bloom {
        words,
        blocks,
        probes,
        sorted,
    })
}

/// Reads a run's filter back into memory (a merged run, installed
/// without it), one piece per lent connection, and sets it: until then its
/// lookups read its parts. A run already gone needs nothing.
pub(crate) fn load_later(lend: &mut Lend<'_>, run: &Arc<Run>) -> Result<()> {
    if run.filter.get().is_some() {
        return Ok(());
    }
    let want = run.blocks as usize * WORDS_PER_BLOCK;
    let mut words: Vec<u64> = Vec::with_capacity(want);
    let mut piece = 0;
    while words.len() < want {
        lend_one(lend, &mut |conn| {
            let blob: Option<Vec<u8>> = conn
                .query_row(
                    "SELECT data FROM id_filters WHERE key = ?1",
                    [row_key(run.id, piece)?],
                    |r| r.get(0),
                )
                .optional()
                .op("SELECT FROM id_filters (a merged run)")?;
            let blob = blob.ok_or_else(|| {
                corrupt(format!("run {}: filter piece {piece} is missing", run.id))
            })?;
            let body = checked(&blob, || format!("run {}: filter piece {piece}", run.id))?;
            let (ws, tail) = body.as_chunks::<8>();
            if !tail.is_empty() || ws.is_empty() || words.len() + ws.len() > want {
                return Err(corrupt(format!(
                    "run {}: filter piece {piece} has a wrong size",
                    run.id
                )));
            }
            words.extend(ws.iter().map(|w| u64::from_le_bytes(*w)));
            Ok(())
        })?;
        piece += 1;
    }
    // Set once: a second caller (none today) would find it set.
    let _ = run.filter.set(Bloom {
        words,
        blocks: run.blocks,
        probes: run.probes,
        sorted: run.sorted,
    });
    Ok(())
}
