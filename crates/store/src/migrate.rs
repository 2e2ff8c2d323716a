//! Schema migrations: `migrations/NNNN_name.sql`, embedded in the binary.
//!
//! The schema version is `PRAGMA user_version`: the number of migrations
//! applied. At open, every missing migration is applied in ONE `IMMEDIATE`
//! transaction that sets `user_version` last, so a crash leaves the file at
//! the old version or the new one, never between. A file whose version is
//! newer than the newest migration known here is refused and left untouched.
//! Never edit an applied migration: add the next number.

use rusqlite::{Connection, TransactionBehavior};

use super::error::{Error, Op, Result};

/// The migrations, in order. Version `n` means the first `n` are applied.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_init",
        include_str!("../../../migrations/0001_init.sql"),
    ),
    (
        "0002_change_chunks",
        include_str!("../../../migrations/0002_change_chunks.sql"),
    ),
    (
        "0003_pieces_and_binary_changes",
        include_str!("../../../migrations/0003_pieces_and_binary_changes.sql"),
    ),
    (
        "0004_epochs_and_retention",
        include_str!("../../../migrations/0004_epochs_and_retention.sql"),
    ),
    (
        "0005_two_engines",
        include_str!("../../../migrations/0005_two_engines.sql"),
    ),
    (
        "0006_sinks",
        include_str!("../../../migrations/0006_sinks.sql"),
    ),
    (
        "0007_compressed_bodies",
        include_str!("../../../migrations/0007_compressed_bodies.sql"),
    ),
    (
        "0008_history_on_disk",
        include_str!("../../../migrations/0008_history_on_disk.sql"),
    ),
    (
        "0009_source_positions",
        include_str!("../../../migrations/0009_source_positions.sql"),
    ),
    (
        "0010_idempotency_keys",
        include_str!("../../../migrations/0010_idempotency_keys.sql"),
    ),
    (
        "0011_pattern_document_changes",
        include_str!("../../../migrations/0011_pattern_document_changes.sql"),
    ),
    (
        "0012_ingest_rejected",
        include_str!("../../../migrations/0012_ingest_rejected.sql"),
    ),
    (
        "0013_checkpoint_format_2",
        include_str!("../../../migrations/0013_checkpoint_format_2.sql"),
    ),
    (
        "0014_segment_chains",
        include_str!("../../../migrations/0014_segment_chains.sql"),
    ),
];

/// The schema version this binary writes.
pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// The file's schema version.
pub fn user_version(conn: &Connection) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .op("PRAGMA user_version")
}

/// Applies the missing migrations (see the module docs).
pub fn migrate(conn: &mut Connection) -> Result<()> {
    let known = latest_version();
    let found = user_version(conn)?;
    if found > known {
        return Err(Error::NewerSchema { found, known });
    }
    if found == known {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .op("BEGIN IMMEDIATE (migrate)")?;
    // Re-read under the write lock: another process may have migrated.
    let found = user_version(&tx)?;
    if found > known {
        return Err(Error::NewerSchema { found, known });
    }
    for (_, sql) in MIGRATIONS.iter().skip(found.max(0) as usize) {
        tx.execute_batch(sql).op("apply migration")?;
    }
    tx.pragma_update(None, "user_version", known)
        .op("PRAGMA user_version = N")?;
    tx.commit().op("COMMIT (migrate)")
}
