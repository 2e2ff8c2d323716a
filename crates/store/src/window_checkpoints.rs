//! The window engine's checkpoints stored incrementally (migration 0008):
//! a checkpoint row holds the state without its history (`live`: the
//! changelog, clock, pipeline and live buckets as the envelope writes them,
//! LZ4) and names the history segments (`super::segments`) its envelope
//! takes its deliveries and late records from: in `checkpoint_lists`, the
//! last segment of each list (a partition's, the late output's), the others
//! reached through the chain each segment keeps (`segments.prev`, set when
//! a checkpoint first names it; migration 0014). Segments are shared by
//! every checkpoint that names them, so a checkpoint writes only the
//! history that arrived since the previous one (flushed just before, by
//! the service), its live state and one row per list: nothing per segment
//! it shares.
//!
//! The envelope is assembled when it is served; its digest is computed
//! when the checkpoint is taken, from the chain values stored with the
//! segments (`segment_chunks`) and the live state, and stored in the row.
//!
//! A checkpoint that is its engine's recovery base cannot disappear while
//! it is: deleting it hides it instead (`origin = 'hidden'`: no listing
//! shows it), and hidden rows go once the base moves on. Freeing is
//! "delete the segments nothing points at" (`segments.refs = 0`: no
//! checkpoint's list ends with it, no segment follows it), which frees the
//! segment before each in turn.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::checkpoints::{CheckpointMeta, Origin};
use super::error::{Error, Op, Result};
use super::{created_at_now, Reader, Writer};
use streamforge_engine::history::SegRef;
use streamforge_engine::Flushed;

/// A stored window checkpoint's state: its live parts (as
/// `LiveParts::encode` wrote them) and its history's segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWindow {
    /// `LiveParts::encode` bytes.
    pub live: Vec<u8>,
    /// The segments it names.
    pub flushed: Flushed,
}

/// A stored window checkpoint with its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRow {
    /// Its state.
    pub state: StoredWindow,
    /// The envelope's `digest` field.
    pub digest: String,
    /// Envelope length.
    pub bytes: u64,
}

fn i64_of(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::Corrupt(format!("{what} {n} is beyond SQLite's integers")))
}

/// LZ4 of the live parts.
fn pack(live: &[u8]) -> Vec<u8> {
    lz4_flex::block::compress_prepend_size(live)
}

fn unpack(id: i64, z: &[u8]) -> Result<Vec<u8>> {
    let corrupt = |why: String| Error::Corrupt(format!("checkpoint {id}: its state {why}"));
    let (len, body) = z
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("is shorter than its length".into()))?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > body.len().saturating_mul(255).saturating_add(16) {
        return Err(corrupt("claims an impossible length".into()));
    }
    lz4_flex::block::decompress(body, len).map_err(|e| corrupt(e.to_string()))
}

/// The segments checkpoint `id` names: each list from its last segment
/// back through the chain (migration 0014).
fn segments_of(conn: &Connection, id: i64, partitions: usize) -> Result<Flushed> {
    let mut f = Flushed {
        sources: vec![Vec::new(); partitions],
        late: Vec::new(),
    };
    let lists: Vec<(i64, i64)> = {
        let mut st = conn
            .prepare_cached("SELECT part, last FROM checkpoint_lists WHERE checkpoint = ?1")
            .op("prepare SELECT checkpoint_lists")?;
        let rows = st
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
            .op("SELECT checkpoint_lists")?;
        rows.collect::<std::result::Result<_, _>>()
            .op("SELECT checkpoint_lists (row)")?
    };
    let mut st = conn
        .prepare_cached(
            "WITH RECURSIVE chain (seg, depth) AS (
                 SELECT ?1, 0
                 UNION ALL
                 SELECT s.prev, chain.depth + 1 FROM segments s JOIN chain ON s.id = chain.seg
                  WHERE s.prev IS NOT NULL
             )
             SELECT s.id, s.part, s.first, s.count, s.bytes
               FROM chain JOIN segments s ON s.id = chain.seg
              ORDER BY chain.depth DESC",
        )
        .op("prepare SELECT segments (chain)")?;
    for (part, last) in lists {
        let list = if part < 0 {
            &mut f.late
        } else {
            usize::try_from(part)
                .ok()
                .and_then(|p| f.sources.get_mut(p))
                .ok_or_else(|| Error::Corrupt(format!("checkpoint {id} names partition {part}")))?
        };
        let mut rows = st.query([last]).op("SELECT segments (chain)")?;
        while let Some(r) = rows.next().op("SELECT segments (chain, row)")? {
            let seg: i64 = r.get(0).op("segments.id")?;
            let in_part: Option<i64> = r.get(1).op("segments.part")?;
            let first: Option<i64> = r.get(2).op("segments.first")?;
            let (Some(first), true) = (first, in_part == Some(part)) else {
                return Err(Error::Corrupt(format!(
                    "checkpoint {id}: segment {seg} of list {part} is not linked to it"
                )));
            };
            list.push(SegRef {
                id: seg.max(0) as u64,
                first: first.max(0) as u64,
                count: r.get::<_, i64>(3).op("segments.count")?.max(0) as u64,
                bytes: r.get::<_, i64>(4).op("segments.bytes")?.max(0) as u64,
            });
        }
        if list.last().map(|s| s.id as i64) != Some(last) {
            return Err(Error::Corrupt(format!(
                "checkpoint {id}: the last segment {last} of list {part} is missing"
            )));
        }
    }
    Ok(f)
}

/// Links the segments of `list` (list `part` of a checkpoint) into their
/// chain, from its end back to the first one already linked (whose place
/// must be the one the list gives it: the lists only grow at their end),
/// and returns its last segment (`None`: empty).
fn link_list(tx: &Connection, part: i64, list: &[SegRef]) -> Result<Option<i64>> {
    let mut read = tx
        .prepare_cached("SELECT part, first, prev FROM segments WHERE id = ?1")
        .op("prepare SELECT segments (link)")?;
    let mut link = tx
        .prepare_cached("UPDATE segments SET part = ?2, first = ?3, prev = ?4 WHERE id = ?1")
        .op("prepare UPDATE segments (link)")?;
    for (i, s) in list.iter().enumerate().rev() {
        let id = i64_of(s.id, "segment")?;
        let prev = match i.checked_sub(1).and_then(|p| list.get(p)) {
            Some(p) => Some(i64_of(p.id, "segment")?),
            None => None,
        };
        type Place = (Option<i64>, Option<i64>, Option<i64>);
        let found: Option<Place> = read
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()
            .op("SELECT segments (link)")?;
        match found {
            None => return Err(Error::Corrupt(format!("segment {id} is not stored"))),
            Some((None, _, _)) => {
                link.execute(params![id, part, i64_of(s.first, "first")?, prev])
                    .op("UPDATE segments (link)")?;
            }
            Some((Some(p), first, was)) => {
                if p != part || first != Some(i64_of(s.first, "first")?) || was != prev {
                    return Err(Error::Corrupt(format!(
                        "segment {id} is in list {p} after {was:?}, not in list {part} after {prev:?}"
                    )));
                }
                break;
            }
        }
    }
    list.last().map(|s| i64_of(s.id, "segment")).transpose()
}

/// Window checkpoint `id`, if it is stored incrementally.
pub(super) fn window_row(
    conn: &Connection,
    id: i64,
    partitions: usize,
) -> Result<Option<WindowRow>> {
    type Row = (Option<Vec<u8>>, Option<String>, i64);
    let row: Option<Row> = conn
        .query_row(
            "SELECT live, digest, bytes FROM checkpoints
             WHERE id = ?1 AND engine = 'window'",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .op("SELECT checkpoints (window)")?;
    let Some((Some(live), digest, bytes)) = row else {
        return Ok(None);
    };
    let live = unpack(id, &live)?;
    let parts = streamforge_engine::checkpoint::LiveParts::decode(&live)
        .map_err(|e| Error::Corrupt(format!("checkpoint {id}: {e}")))?;
    let flushed = segments_of(conn, id, partitions.max(parts.partitions.len()))?;
    Ok(Some(WindowRow {
        state: StoredWindow { live, flushed },
        digest: digest.unwrap_or_default(),
        bytes: bytes.max(0) as u64,
    }))
}

/// Inserts a window checkpoint row and the segments it names.
fn insert_window(
    tx: &rusqlite::Transaction<'_>,
    live: &[u8],
    flushed: &Flushed,
    bytes: u64,
    digest: &str,
    sequence: u64,
    origin: Origin,
) -> Result<(i64, String)> {
    let created_at = created_at_now();
    let seq = i64_of(sequence, "sequence")?;
    tx.execute(
        "INSERT INTO checkpoints
           (sequence, sha256, bytes, created_at, envelope, pieces_from, origin, engine, live,
            digest)
         VALUES (?1, '', ?2, ?3, x'', NULL, ?4, 'window', ?5, ?6)",
        params![
            seq,
            i64_of(bytes, "bytes")?,
            created_at,
            origin.as_str(),
            pack(live),
            digest
        ],
    )
    .op("INSERT checkpoints (window)")?;
    let id = tx.last_insert_rowid();
    {
        let mut st = tx
            .prepare_cached(
                "INSERT INTO checkpoint_lists (checkpoint, part, last) VALUES (?1, ?2, ?3)",
            )
            .op("prepare INSERT checkpoint_lists")?;
        let lists = flushed
            .sources
            .iter()
            .enumerate()
            .map(|(p, l)| (p as i64, l))
            .chain(std::iter::once((-1i64, &flushed.late)));
        for (part, list) in lists {
            if let Some(last) = link_list(tx, part, list)? {
                st.execute(params![id, part, last])
                    .op("INSERT checkpoint_lists")?;
            }
        }
    }
    Ok((id, created_at))
}

impl Writer {
    /// Stores a window checkpoint incrementally (its live parts and the
    /// segments it names, which are stored, with its envelope's length and
    /// digest) as the recovery base, removing the logged commands up to
    /// `up_to`, in one transaction. Earlier hidden checkpoints and the
    /// segments nothing names any more go in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn link_window_checkpoint(
        &mut self,
        live: &[u8],
        flushed: &Flushed,
        bytes: u64,
        digest: &str,
        sequence: u64,
        up_to: i64,
        origin: Origin,
    ) -> Result<CheckpointMeta> {
        let seq = i64_of(sequence, "sequence")?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (window checkpoint)")?;
        let (id, created_at) = insert_window(&tx, live, flushed, bytes, digest, sequence, origin)?;
        tx.execute(
            "INSERT OR REPLACE INTO recovery_bases (engine, checkpoint_id, envelope, sequence)
             VALUES ('window', ?1, NULL, ?2)",
            params![id, seq],
        )
        .op("INSERT OR REPLACE recovery_bases (window)")?;
        tx.execute(
            "DELETE FROM commands WHERE engine = 'window' AND id <= ?1",
            [up_to],
        )
        .op("DELETE FROM commands (window)")?;
        super::segments::collect(&tx)?;
        tx.commit().op("COMMIT (window checkpoint)")?;
        Ok(CheckpointMeta {
            id,
            sequence,
            digest: digest.to_string(),
            bytes,
            created_at,
        })
    }

    /// Stores a hidden window checkpoint (a restored state, flushed) that
    /// is not yet the recovery base: a restore by its id makes it one.
    /// Until then, and once the base moves on, the next collection frees
    /// it.
    pub fn store_hidden_window(
        &mut self,
        live: &[u8],
        flushed: &Flushed,
        bytes: u64,
        digest: &str,
        sequence: u64,
    ) -> Result<i64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (hidden window checkpoint)")?;
        let (id, _) = insert_window(&tx, live, flushed, bytes, digest, sequence, Origin::Hidden)?;
        tx.commit().op("COMMIT (hidden window checkpoint)")?;
        Ok(id)
    }

    /// Window checkpoint `id` stored incrementally, through the writer.
    pub fn window_checkpoint(&self, id: i64, partitions: usize) -> Result<Option<WindowRow>> {
        window_row(&self.conn, id, partitions)
    }

    /// Runs `work` with the writing connection (one transaction of the id
    /// index's flush: see `streamforge_ids::Lend`).
    pub fn lend(&mut self, work: &mut dyn FnMut(&mut Connection) -> Result<()>) -> Result<()> {
        work(&mut self.conn)
    }
}

impl Reader {
    /// Runs `f` in one read transaction: everything it reads belongs to
    /// one state of the database, whatever commits meanwhile (a checkpoint
    /// deleted, its segments freed: WAL snapshot isolation keeps them for
    /// this reader until it is done).
    pub fn snapshot<R>(&self, f: impl FnOnce(&Reader) -> Result<R>) -> Result<R> {
        self.conn
            .execute_batch("BEGIN")
            .op("BEGIN (read snapshot)")?;
        let out = f(self);
        let end = self
            .conn
            .execute_batch("COMMIT")
            .op("COMMIT (read snapshot)");
        let out = out?;
        end?;
        Ok(out)
    }

    /// Window checkpoint `id` stored incrementally.
    pub fn window_checkpoint(&self, id: i64, partitions: usize) -> Result<Option<WindowRow>> {
        window_row(&self.conn, id, partitions)
    }

    /// Calls `f` with the text of each block of segment `seg`, in order
    /// (each block checked against its checksum first).
    pub fn segment_blocks(&self, seg: u64, f: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        super::segments::for_each_block(&self.conn, seg, f)
    }

    /// The chunk records stored with segment `seg`, by chunk number.
    pub fn segment_chunks(
        &self,
        seg: u64,
    ) -> Result<Vec<streamforge_engine::checkpoint::chain::ChunkRec>> {
        super::segments::segment_chunks(&self.conn, seg)
    }
}
