//! Stored checkpoints: the envelope, served back byte for byte.
//!
//! Taking a checkpoint is one transaction: insert the envelope, make it the
//! recovery base and delete the command-log rows it covers. Checkpoints are
//! never deleted.
//!
//! A large envelope can be stored in pieces first ([`Writer::stage_piece`],
//! one short transaction each, so the commits of acknowledged calls are
//! interleaved instead of waiting behind one long write), then linked by
//! that one transaction ([`Writer::link_checkpoint`]): until it commits, the
//! pieces belong to no checkpoint (and are deleted at the next open).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::error::{Error, Op, Result};
use super::{created_at_now, EngineId, Reader, Writer};

/// A stored checkpoint's metadata (`GET /checkpoints` row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// Row id (`GET /checkpoints/{id}`).
    pub id: i64,
    /// The change sequence it captures.
    pub sequence: u64,
    /// The envelope's digest: a window envelope's `digest` field, a
    /// pattern envelope's `sha256` field.
    pub digest: String,
    /// Envelope length in bytes.
    pub bytes: u64,
    /// When it was stored (RFC 3339, UTC); service metadata only.
    pub created_at: String,
}

/// Lowercase hex SHA-256 of `bytes` (the engine's, as in envelopes).
pub use streamforge_engine::sha256_hex;

/// Bytes per piece of an envelope stored with [`Writer::stage_piece`].
pub const PIECE_BYTES: usize = 2 << 20;

/// The stored envelope of checkpoint `id`, exactly as stored (its pieces
/// concatenated when it was stored in pieces).
pub(super) fn envelope_by_id(conn: &rusqlite::Connection, id: i64) -> Result<Option<Vec<u8>>> {
    let row: Option<(Vec<u8>, Option<i64>, i64)> = conn
        .query_row(
            "SELECT envelope, pieces_from, bytes FROM checkpoints WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .op("SELECT checkpoints.envelope")?;
    let Some((envelope, pieces_from, bytes)) = row else {
        return Ok(None);
    };
    let Some(staging) = pieces_from else {
        return Ok(Some(envelope));
    };
    // A capacity hint only.
    let mut out = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
    let mut st = conn
        .prepare_cached("SELECT bytes FROM checkpoint_pieces WHERE staging = ?1 ORDER BY id")
        .op("prepare SELECT checkpoint_pieces")?;
    let mut rows = st.query([staging]).op("SELECT checkpoint_pieces")?;
    while let Some(r) = rows.next().op("SELECT checkpoint_pieces (row)")? {
        let piece = r
            .get_ref(0)
            .and_then(|v| v.as_blob().map_err(Into::into))
            .op("checkpoint_pieces.bytes")?;
        out.extend_from_slice(piece);
    }
    if out.len() as i64 != bytes {
        return Err(super::Error::Corrupt(format!(
            "checkpoint {id}: its pieces hold {} bytes, the row says {bytes}",
            out.len()
        )));
    }
    Ok(Some(out))
}

/// Who asked for a checkpoint (its retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A client (`POST /checkpoints`): kept until deleted.
    User,
    /// The service (automatic and shutdown checkpoints): only the newest
    /// few are kept ([`Writer::prune_checkpoints`]).
    Auto,
    /// A window checkpoint no listing shows, kept while it is the recovery
    /// base (a restored history flushed; a base a client deleted).
    Hidden,
}

impl Origin {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Auto => "auto",
            Origin::Hidden => "hidden",
        }
    }
}

/// How a checkpoint's envelope is stored.
enum Stored<'a> {
    /// In the checkpoint row.
    Inline(&'a [u8]),
    /// Staged pieces: staging id and length of the whole envelope.
    Pieces(i64, usize),
}

impl Writer {
    /// Stores `envelope` (change sequence `sequence`) as a checkpoint and the
    /// new recovery base, and deletes the command log it covers.
    pub fn checkpoint(
        &mut self,
        engine: EngineId,
        envelope: &[u8],
        digest: &str,
        sequence: u64,
        origin: Origin,
    ) -> Result<CheckpointMeta> {
        self.store_checkpoint(
            engine,
            Stored::Inline(envelope),
            digest,
            sequence,
            None,
            origin,
        )
    }

    /// The id of the last logged command of `engine` (0 when none).
    pub fn last_command_id(&self, engine: EngineId) -> Result<i64> {
        self.conn
            .query_row(
                "SELECT COALESCE(MAX(id), 0) FROM commands WHERE engine = ?1",
                [engine.name()],
                |r| r.get(0),
            )
            .op("SELECT MAX(commands.id)")
    }

    /// Stores a checkpoint that covers the logged commands up to `up_to`
    /// (all of them with `None`) and makes it the recovery base, removing
    /// the commands it covers, in one transaction.
    fn store_checkpoint(
        &mut self,
        engine: EngineId,
        stored: Stored<'_>,
        digest: &str,
        sequence: u64,
        up_to: Option<i64>,
        origin: Origin,
    ) -> Result<CheckpointMeta> {
        let (envelope, pieces_from, bytes) = match stored {
            Stored::Inline(e) => (e, None, e.len()),
            Stored::Pieces(staging, bytes) => (&[][..], Some(staging), bytes),
        };
        let created_at = created_at_now();
        let seq = i64::try_from(sequence).map_err(|_| {
            Error::Corrupt(format!("sequence {sequence} is beyond SQLite's integers"))
        })?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (checkpoint)")?;
        tx.execute(
            "INSERT INTO checkpoints
               (sequence, sha256, bytes, created_at, envelope, pieces_from, origin, engine,
                digest)
             VALUES (?1, '', ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                seq,
                bytes as i64,
                created_at,
                envelope,
                pieces_from,
                origin.as_str(),
                engine.name(),
                digest
            ],
        )
        .op("INSERT checkpoints")?;
        let id = tx.last_insert_rowid();
        tx.execute(
            "INSERT OR REPLACE INTO recovery_bases (engine, checkpoint_id, envelope, sequence)
             VALUES (?1, ?2, NULL, ?3)",
            params![engine.name(), id, seq],
        )
        .op("INSERT OR REPLACE recovery_bases")?;
        tx.execute(
            "DELETE FROM commands WHERE engine = ?1 AND id <= ?2",
            params![engine.name(), up_to.unwrap_or(i64::MAX)],
        )
        .op("DELETE FROM commands")?;
        super::segments::collect(&tx)?;
        tx.commit().op("COMMIT (checkpoint)")?;
        Ok(CheckpointMeta {
            id,
            sequence,
            digest: digest.to_string(),
            bytes: bytes as u64,
            created_at,
        })
    }

    /// Stores one piece of an envelope in a short transaction of its own
    /// (the first with `staging` None; the answer is the staging id to pass
    /// with the next pieces and to [`Writer::link_checkpoint`]).
    ///
    /// The transaction does not wait for the disk (`synchronous = NORMAL`
    /// for it alone): nothing refers to the piece yet, and the linking
    /// commit, which syncs the WAL file (and with it every frame before its
    /// own), makes it durable together with the row that names it.
    pub fn stage_piece(&mut self, staging: Option<i64>, bytes: &[u8]) -> Result<i64> {
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .op("PRAGMA synchronous = NORMAL (piece)")?;
        let stored = self.insert_piece(staging, bytes);
        let reset = self
            .conn
            .pragma_update(None, "synchronous", super::SYNCHRONOUS)
            .op("PRAGMA synchronous (after piece)");
        let id = stored?;
        reset?;
        Ok(id)
    }

    fn insert_piece(&mut self, staging: Option<i64>, bytes: &[u8]) -> Result<i64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (checkpoint piece)")?;
        let staging = match staging {
            Some(s) => {
                tx.execute(
                    "INSERT INTO checkpoint_pieces (staging, bytes) VALUES (?1, ?2)",
                    params![s, bytes],
                )
                .op("INSERT checkpoint_pieces")?;
                s
            }
            None => {
                // the first piece's own id names the staging
                tx.execute(
                    "INSERT INTO checkpoint_pieces (id, staging, bytes)
                     VALUES ((SELECT coalesce(max(id), 0) + 1 FROM checkpoint_pieces),
                             (SELECT coalesce(max(id), 0) + 1 FROM checkpoint_pieces), ?1)",
                    params![bytes],
                )
                .op("INSERT checkpoint_pieces (first)")?;
                tx.last_insert_rowid()
            }
        };
        tx.commit().op("COMMIT (checkpoint piece)")?;
        Ok(staging)
    }

    /// Makes the staged pieces `staging` a checkpoint (of `bytes` bytes with
    /// digest `digest`), the recovery base, and removes the logged commands
    /// up to `up_to`, in one transaction.
    pub fn link_checkpoint(
        &mut self,
        engine: EngineId,
        staging: i64,
        digest: &str,
        bytes: usize,
        sequence: u64,
        up_to: i64,
    ) -> Result<CheckpointMeta> {
        self.store_checkpoint(
            engine,
            Stored::Pieces(staging, bytes),
            digest,
            sequence,
            Some(up_to),
            Origin::Auto,
        )
    }

    /// Deletes checkpoint `id` of `engine` (its row and its pieces). If it
    /// is a recovery base, its envelope is first copied into the base, so
    /// that recovery keeps working. False when `engine` has no such
    /// checkpoint.
    pub fn delete_checkpoint(
        &mut self,
        engine: EngineId,
        id: i64,
        before_commit: &dyn Fn(),
    ) -> Result<bool> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (delete checkpoint)")?;
        let mine: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM checkpoints
                   WHERE id = ?1 AND engine = ?2 AND origin != 'hidden')",
                params![id, engine.name()],
                |r| r.get(0),
            )
            .op("SELECT checkpoints.engine")?;
        let found = mine && delete_in(&tx, id)?;
        super::segments::collect(&tx)?;
        before_commit();
        tx.commit().op("COMMIT (delete checkpoint)")?;
        Ok(found)
    }

    /// Keeps the newest `keep` automatic checkpoints of `engine` and
    /// deletes its older ones, except its recovery base. Returns how many
    /// were deleted.
    pub fn prune_checkpoints(
        &mut self,
        engine: EngineId,
        keep: usize,
        before_commit: &dyn Fn(),
    ) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (prune checkpoints)")?;
        let old: Vec<i64> = {
            let mut st = tx
                .prepare(
                    "SELECT id FROM checkpoints WHERE origin = 'auto' AND engine = ?2
                       AND id NOT IN (SELECT checkpoint_id FROM recovery_bases
                                      WHERE checkpoint_id IS NOT NULL)
                       AND id NOT IN (SELECT id FROM checkpoints
                                      WHERE origin = 'auto' AND engine = ?2
                                      ORDER BY id DESC LIMIT ?1)",
                )
                .op("prepare SELECT old checkpoints")?;
            let rows = st
                .query_map(
                    // More than SQLite's integers can count: keep them all.
                    params![i64::try_from(keep).unwrap_or(i64::MAX), engine.name()],
                    |r| r.get(0),
                )
                .op("SELECT old checkpoints")?;
            rows.collect::<std::result::Result<_, _>>()
                .op("SELECT old checkpoints (row)")?
        };
        for id in &old {
            delete_in(&tx, *id)?;
        }
        super::segments::collect(&tx)?;
        if !old.is_empty() {
            before_commit();
        }
        tx.commit().op("COMMIT (prune checkpoints)")?;
        Ok(old.len())
    }

    /// Deletes staged pieces that will not be linked.
    pub fn drop_pieces(&mut self, staging: i64) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM checkpoint_pieces WHERE staging = ?1",
                [staging],
            )
            .op("DELETE FROM checkpoint_pieces")
            .map(drop)
    }

    /// Deletes pieces no checkpoint names (left by a crash while storing).
    pub(super) fn drop_orphan_pieces(&mut self) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM checkpoint_pieces WHERE staging NOT IN
                   (SELECT pieces_from FROM checkpoints WHERE pieces_from IS NOT NULL)",
                [],
            )
            .op("DELETE orphan checkpoint_pieces")
            .map(drop)
    }

    /// A stored checkpoint's envelope (used by restore by id).
    pub fn checkpoint_envelope(&self, id: i64) -> Result<Option<Vec<u8>>> {
        envelope_by_id(&self.conn, id)
    }
}

/// Deletes checkpoint `id` inside `tx` (see [`Writer::delete_checkpoint`]).
fn delete_in(tx: &rusqlite::Transaction<'_>, id: i64) -> Result<bool> {
    let is_base: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM recovery_bases WHERE checkpoint_id = ?1)",
            [id],
            |r| r.get(0),
        )
        .op("SELECT recovery_bases.checkpoint_id")?;
    let incremental: bool = tx
        .query_row(
            "SELECT live IS NOT NULL FROM checkpoints WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .op("SELECT checkpoints.live")?
        .unwrap_or(false);
    if is_base && incremental {
        // A window checkpoint stored incrementally stays while it is the
        // recovery base, hidden (it goes once the base moves on).
        let n = tx
            .execute(
                "UPDATE checkpoints SET origin = 'hidden' WHERE id = ?1",
                [id],
            )
            .op("UPDATE checkpoints (hide)")?;
        return Ok(n > 0);
    }
    if is_base {
        let envelope = envelope_by_id(tx, id)?.ok_or_else(|| {
            super::Error::Corrupt(format!(
                "the recovery base names checkpoint {id}, which is missing"
            ))
        })?;
        tx.execute(
            "UPDATE recovery_bases SET checkpoint_id = NULL, envelope = ?1 WHERE checkpoint_id = ?2",
            params![envelope, id],
        )
        .op("UPDATE recovery_bases (inline)")?;
    }
    tx.execute(
        "DELETE FROM checkpoint_pieces WHERE staging =
           (SELECT pieces_from FROM checkpoints WHERE id = ?1)",
        [id],
    )
    .op("DELETE FROM checkpoint_pieces (delete)")?;
    let n = tx
        .execute("DELETE FROM checkpoints WHERE id = ?1", [id])
        .op("DELETE FROM checkpoints")?;
    Ok(n > 0)
}

impl Reader {
    /// The envelope bytes of `engine`'s checkpoint `id`, exactly as stored.
    pub fn checkpoint(&mut self, engine: EngineId, id: i64) -> Result<Option<Vec<u8>>> {
        let mine: bool = self
            .conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM checkpoints
                   WHERE id = ?1 AND engine = ?2 AND origin != 'hidden')",
                params![id, engine.name()],
                |r| r.get(0),
            )
            .op("SELECT checkpoints.engine")?;
        if !mine {
            return Ok(None);
        }
        envelope_by_id(&self.conn, id)
    }

    /// `engine`'s listed checkpoint `id`: its metadata, and whether it is a
    /// window checkpoint stored incrementally (its envelope assembled from
    /// its live state and segments).
    pub fn checkpoint_info(
        &mut self,
        engine: EngineId,
        id: i64,
    ) -> Result<Option<(CheckpointMeta, bool)>> {
        self.conn
            .query_row(
                "SELECT id, sequence, COALESCE(digest, ''), bytes, created_at, live IS NOT NULL
                 FROM checkpoints WHERE id = ?1 AND engine = ?2 AND origin != 'hidden'",
                params![id, engine.name()],
                |r| {
                    Ok((
                        CheckpointMeta {
                            id: r.get(0)?,
                            sequence: r.get::<_, i64>(1)?.max(0) as u64,
                            digest: r.get(2)?,
                            bytes: r.get::<_, i64>(3)?.max(0) as u64,
                            created_at: r.get(4)?,
                        },
                        r.get(5)?,
                    ))
                },
            )
            .optional()
            .op("SELECT checkpoints (one)")
    }

    /// Every stored checkpoint of `engine`, newest first.
    pub fn checkpoints(&mut self, engine: EngineId) -> Result<Vec<CheckpointMeta>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, sequence, COALESCE(digest, ''), bytes, created_at FROM checkpoints
                 WHERE engine = ?1 AND origin != 'hidden' ORDER BY id DESC",
            )
            .op("prepare SELECT checkpoints")?;
        let rows = st
            .query_map([engine.name()], |r| {
                Ok(CheckpointMeta {
                    id: r.get(0)?,
                    sequence: r.get::<_, i64>(1)?.max(0) as u64,
                    digest: r.get(2)?,
                    bytes: r.get::<_, i64>(3)?.max(0) as u64,
                    created_at: r.get(4)?,
                })
            })
            .op("SELECT checkpoints")?;
        rows.collect::<std::result::Result<Vec<_>, _>>()
            .op("SELECT checkpoints (row)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CommandRow;
    use crate::{EngineId, Stream};

    fn log_commands(w: &mut Writer, n: usize) {
        for _ in 0..n {
            w.append(&[CommandRow {
                engine: EngineId::Window,
                kind: "advance",
                body: b"{}",
                encoding: crate::body::RAW,
                changes: None,
                records: (Stream::Late, &[]),
                key: None,
                document: None,
            }])
            .unwrap();
        }
    }

    #[test]
    fn pieces_are_linked_read_back_whole_and_orphans_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut w = Writer::open(&db).unwrap();
        log_commands(&mut w, 5);
        // an envelope of 2.5 pieces, every byte distinct in its position
        let envelope: Vec<u8> = (0..PIECE_BYTES * 5 / 2).map(|i| (i % 251) as u8).collect();
        let mut staging = None;
        for piece in envelope.chunks(PIECE_BYTES) {
            staging = Some(w.stage_piece(staging, piece).unwrap());
            // commits interleave with the pieces
            log_commands(&mut w, 1);
        }
        let staging = staging.unwrap();
        // a second staging interleaved with the first: kept apart
        let other = w.stage_piece(None, b"orphan").unwrap();
        assert_ne!(other, staging);
        let up_to = 5;
        let meta = w
            .link_checkpoint(
                EngineId::Window,
                staging,
                &sha256_hex(&envelope),
                envelope.len(),
                42,
                up_to,
            )
            .unwrap();
        assert_eq!(meta.bytes, envelope.len() as u64);
        assert_eq!(meta.digest, sha256_hex(&envelope));
        assert_eq!(
            w.checkpoint_envelope(meta.id).unwrap(),
            Some(envelope.clone())
        );
        // the base is the pieced checkpoint; commands after up_to are kept
        let base = w.base(EngineId::Window).unwrap().unwrap();
        assert_eq!(
            (
                base.state == crate::BaseState::Envelope(envelope.clone()),
                base.sequence
            ),
            (true, 42)
        );
        assert_eq!(w.command_count().unwrap(), 3);
        let mut r = Reader::open(&db).unwrap();
        assert_eq!(
            r.checkpoint(EngineId::Window, meta.id).unwrap(),
            Some(envelope.clone())
        );
        let pieces = |w: &Writer| -> i64 {
            w.conn
                .query_row("SELECT count(*) FROM checkpoint_pieces", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(pieces(&w), 4);
        drop(r);
        drop(w);
        // reopening drops the pieces no checkpoint names, and only those
        let w = Writer::open(&db).unwrap();
        assert_eq!(pieces(&w), 3);
        assert_eq!(w.checkpoint_envelope(meta.id).unwrap(), Some(envelope));
    }

    #[test]
    fn dropped_pieces_leave_nothing_and_a_missing_piece_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut w = Writer::open(&db).unwrap();
        let s = w.stage_piece(None, b"abc").unwrap();
        w.drop_pieces(s).unwrap();
        let s = w.stage_piece(None, b"abc").unwrap();
        w.stage_piece(Some(s), b"def").unwrap();
        let meta = w
            .link_checkpoint(EngineId::Window, s, &sha256_hex(b"abcdef"), 6, 1, 0)
            .unwrap();
        assert_eq!(
            w.checkpoint_envelope(meta.id).unwrap(),
            Some(b"abcdef".to_vec())
        );
        w.conn
            .execute(
                "DELETE FROM checkpoint_pieces WHERE id = (SELECT max(id) FROM checkpoint_pieces)",
                [],
            )
            .unwrap();
        let err = w.checkpoint_envelope(meta.id).unwrap_err();
        assert!(err.to_string().contains("pieces hold 3 bytes"), "{err}");
    }
}
