//! Stored checkpoints: the envelope as one blob, served back byte for byte.
//!
//! Taking a checkpoint is one transaction: insert the envelope, make it the
//! recovery base and delete the command-log rows it covers (all of them: the
//! service takes checkpoints under its write lock). Checkpoints are never
//! deleted.

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use sha2::{Digest, Sha256};

use super::error::{Op, Result};
use super::{created_at_now, Reader, Writer};

/// A stored checkpoint's metadata (`GET /checkpoints` row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// Row id (`GET /checkpoints/{id}`).
    pub id: i64,
    /// The change sequence it captures.
    pub sequence: u64,
    /// Lowercase hex SHA-256 of the envelope bytes.
    pub sha256: String,
    /// Envelope length in bytes.
    pub bytes: u64,
    /// When it was stored (RFC 3339, UTC); service metadata only.
    pub created_at: String,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 15), 16).unwrap_or('0'));
    }
    out
}

/// The stored envelope of checkpoint `id`, exactly as stored.
fn envelope_by_id(conn: &rusqlite::Connection, id: i64) -> Result<Option<Vec<u8>>> {
    conn.query_row(
        "SELECT envelope FROM checkpoints WHERE id = ?1",
        [id],
        |r| r.get(0),
    )
    .optional()
    .op("SELECT checkpoints.envelope")
}

impl Writer {
    /// Stores `envelope` (change sequence `sequence`) as a checkpoint and the
    /// new recovery base, and deletes the command log it covers.
    pub fn checkpoint(&mut self, envelope: &[u8], sequence: u64) -> Result<CheckpointMeta> {
        self.checkpoint_upto(envelope, sequence, None)
    }

    /// The id of the last logged command (0 when the log is empty).
    pub fn last_command_id(&self) -> Result<i64> {
        self.conn
            .query_row("SELECT COALESCE(MAX(id), 0) FROM commands", [], |r| {
                r.get(0)
            })
            .op("SELECT MAX(commands.id)")
    }

    /// Stores a checkpoint that covers the logged commands up to `up_to`
    /// (all of them with `None`) and makes it the recovery base, removing
    /// the commands it covers, in one transaction.
    pub fn checkpoint_upto(
        &mut self,
        envelope: &[u8],
        sequence: u64,
        up_to: Option<i64>,
    ) -> Result<CheckpointMeta> {
        let sha256 = sha256_hex(envelope);
        let created_at = created_at_now();
        let seq = i64::try_from(sequence).unwrap_or(i64::MAX);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (checkpoint)")?;
        tx.execute(
            "INSERT INTO checkpoints (sequence, sha256, bytes, created_at, envelope)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![seq, sha256, envelope.len() as i64, created_at, envelope],
        )
        .op("INSERT checkpoints")?;
        let id = tx.last_insert_rowid();
        tx.execute(
            "INSERT OR REPLACE INTO recovery_base (id, checkpoint_id, envelope, sequence)
             VALUES (1, ?1, NULL, ?2)",
            params![id, seq],
        )
        .op("INSERT OR REPLACE recovery_base")?;
        tx.execute(
            "DELETE FROM commands WHERE id <= ?1",
            [up_to.unwrap_or(i64::MAX)],
        )
        .op("DELETE FROM commands")?;
        tx.commit().op("COMMIT (checkpoint)")?;
        Ok(CheckpointMeta {
            id,
            sequence,
            sha256,
            bytes: envelope.len() as u64,
            created_at,
        })
    }

    /// A stored checkpoint's envelope (used by restore by id).
    pub fn checkpoint_envelope(&self, id: i64) -> Result<Option<Vec<u8>>> {
        envelope_by_id(&self.conn, id)
    }
}

impl Reader {
    /// The envelope bytes exactly as stored.
    pub fn checkpoint(&mut self, id: i64) -> Result<Option<Vec<u8>>> {
        envelope_by_id(&self.conn, id)
    }

    /// Every stored checkpoint, newest first.
    pub fn checkpoints(&mut self) -> Result<Vec<CheckpointMeta>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, sequence, sha256, bytes, created_at FROM checkpoints ORDER BY id DESC",
            )
            .op("prepare SELECT checkpoints")?;
        let rows = st
            .query_map([], |r| {
                Ok(CheckpointMeta {
                    id: r.get(0)?,
                    sequence: r.get::<_, i64>(1)?.max(0) as u64,
                    sha256: r.get(2)?,
                    bytes: r.get::<_, i64>(3)?.max(0) as u64,
                    created_at: r.get(4)?,
                })
            })
            .op("SELECT checkpoints")?;
        rows.collect::<std::result::Result<Vec<_>, _>>()
            .op("SELECT checkpoints (row)")
    }
}
