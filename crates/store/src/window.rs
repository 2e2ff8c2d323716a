//! The window engine's checkpoints stored incrementally (migration 0008):
//! a checkpoint row holds the state without its history (`live`: the
//! changelog, clock, pipeline and live buckets as the envelope writes them,
//! LZ4) and names, in `checkpoint_segments`, the history segments
//! (`super::segments`) its envelope takes its deliveries and late records
//! from. Segments are shared by every checkpoint that names them, so a
//! checkpoint writes only the history that arrived since the previous one
//! (flushed just before, by the service) and its live state.
//!
//! The envelope is assembled when it is served; its digest is computed
//! when the checkpoint is taken, from the chain values stored with the
//! segments (`segment_chunks`) and the live state, and stored in the row.
//!
//! A checkpoint that is its engine's recovery base cannot disappear while
//! it is: deleting it hides it instead (`origin = 'hidden'`: no listing
//! shows it), and hidden rows go once the base moves on. Freeing is
//! "delete the segments no checkpoint names".

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

/// The segments checkpoint `id` names.
fn segments_of(conn: &Connection, id: i64, partitions: usize) -> Result<Flushed> {
    let mut f = Flushed {
        sources: vec![Vec::new(); partitions],
        late: Vec::new(),
    };
    let mut st = conn
        .prepare_cached(
            "SELECT part, segment, first, count, bytes FROM checkpoint_segments
             WHERE checkpoint = ?1 ORDER BY part, ord",
        )
        .op("prepare SELECT checkpoint_segments")?;
    let mut rows = st.query([id]).op("SELECT checkpoint_segments")?;
    while let Some(r) = rows.next().op("SELECT checkpoint_segments (row)")? {
        let part: i64 = r.get(0).op("checkpoint_segments.part")?;
        let seg = SegRef {
            id: r.get::<_, i64>(1).op("checkpoint_segments.segment")?.max(0) as u64,
            first: r.get::<_, i64>(2).op("checkpoint_segments.first")?.max(0) as u64,
            count: r.get::<_, i64>(3).op("checkpoint_segments.count")?.max(0) as u64,
            bytes: r.get::<_, i64>(4).op("checkpoint_segments.bytes")?.max(0) as u64,
        };
        if part < 0 {
            f.late.push(seg);
        } else {
            let list = usize::try_from(part)
                .ok()
                .and_then(|p| f.sources.get_mut(p))
                .ok_or_else(|| Error::Corrupt(format!("checkpoint {id} names partition {part}")))?;
            list.push(seg);
        }
    }
    Ok(f)
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
            "INSERT INTO checkpoint_segments (checkpoint, part, ord, segment, first, count, bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .op("prepare INSERT checkpoint_segments")?;
        let lists = flushed
            .sources
            .iter()
            .enumerate()
            .map(|(p, l)| (p as i64, l))
            .chain(std::iter::once((-1i64, &flushed.late)));
        for (part, list) in lists {
            for (ord, s) in list.iter().enumerate() {
                st.execute(params![
                    id,
                    part,
                    ord as i64,
                    i64_of(s.id, "segment")?,
                    i64_of(s.first, "first")?,
                    i64_of(s.count, "count")?,
                    i64_of(s.bytes, "bytes")?
                ])
                .op("INSERT checkpoint_segments")?;
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
    /// index's flush: see `super::ids::Lend`).
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
