//! SQLite storage: the only module that imports `rusqlite`.
//!
//! One database file holds the pipeline, the command log since the recovery
//! base, the changelog and late pages, the stored checkpoints and the recovery
//! base. The service owns one [`Writer`] (behind its processor lock) and any
//! number of [`Reader`]s for the pages, which never wait for that lock.
//!
//! # Durability
//! Every connection runs `journal_mode = WAL` and `synchronous = FULL`. In WAL
//! mode `NORMAL` already survives a crash of the process, but it may roll back
//! the last commits after a power loss or an OS crash; `FULL` syncs the WAL on
//! every commit, so an acknowledged call survives both. The cost is one fsync
//! per commit (see BENCHMARKS.md); the service amortizes it by group commit
//! (one transaction for all the calls queued meanwhile) and clients by
//! batching many deliveries per request. The WAL is copied back into the
//! database by [`WalCheckpointer`], off the commit path.

mod checkpoints;
mod error;
mod log;
pub mod migrate;

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

pub use checkpoints::CheckpointMeta;
pub use error::{Error, Result};
pub use log::{split_chunk, Base, CommandRow, Page};

use error::Op;

/// The `synchronous` level every connection uses (see the module docs).
pub const SYNCHRONOUS: &str = "FULL";

fn pragmas(conn: &Connection) -> Result<()> {
    conn.busy_timeout(Duration::from_secs(10))
        .op("busy_timeout")?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .op("PRAGMA journal_mode = WAL")?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Corrupt(format!(
            "cannot switch the database to WAL mode (journal_mode is {mode})"
        )));
    }
    conn.pragma_update(None, "synchronous", SYNCHRONOUS)
        .op("PRAGMA synchronous")?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .op("PRAGMA foreign_keys")?;
    Ok(())
}

/// The single writing connection.
pub struct Writer {
    conn: Connection,
}

/// A reading connection (pages, checkpoints).
pub struct Reader {
    conn: Connection,
}

/// Page size of a new database (an existing file keeps its own): request
/// bodies and change chunks are large rows, so fewer, larger pages mean fewer
/// WAL frames and write calls per commit.
pub const PAGE_SIZE: u32 = 16384;

/// WAL pages after which the writer checkpoints by itself: a backstop only,
/// [`WalCheckpointer`] keeps the WAL short without blocking commits.
const AUTOCHECKPOINT_PAGES: u32 = 4096;

impl Writer {
    /// Opens (creating if needed) the database, sets the pragmas and applies
    /// the missing migrations. A newer schema is refused.
    pub fn open(path: &Path) -> Result<Writer> {
        let mut conn = Connection::open(path).op("open database")?;
        // Takes effect only on a new, empty file (before WAL mode is set).
        conn.pragma_update(None, "page_size", PAGE_SIZE)
            .op("PRAGMA page_size")?;
        pragmas(&conn)?;
        conn.pragma_update(None, "wal_autocheckpoint", AUTOCHECKPOINT_PAGES)
            .op("PRAGMA wal_autocheckpoint")?;
        // A restarted WAL is truncated back to this size.
        conn.pragma_update(None, "journal_size_limit", 64i64 << 20)
            .op("PRAGMA journal_size_limit")?;
        migrate::migrate(&mut conn)?;
        Ok(Writer { conn })
    }
}

/// WAL frames left after a passive checkpoint above which the checkpointer
/// restarts the WAL (briefly holding off the writer while it copies the
/// frames the passive pass could not).
const RESTART_FRAMES: i64 = 1024;

/// One round of the background checkpointer: a passive checkpoint (copies
/// what it can, never blocks the writer); when the WAL has grown long, a
/// RESTART checkpoint so the next commit starts the WAL from its beginning
/// (under continuous commits a passive one alone never lets it restart).
fn checkpoint_wal(conn: &Connection) -> Result<()> {
    let (log, done): (i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(1)?, r.get(2)?))
        })
        .op("PRAGMA wal_checkpoint(PASSIVE)")?;
    if log >= RESTART_FRAMES && log - done < RESTART_FRAMES {
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
            .op("PRAGMA wal_checkpoint(RESTART)")?;
    }
    Ok(())
}

/// Copies the WAL back into the database file on its own thread and
/// connection (`PRAGMA wal_checkpoint(PASSIVE)`), so that commits do not pay
/// for it. Poked by the writer after every few MB committed, and once a
/// second. The thread ends when this handle is dropped.
pub struct WalCheckpointer {
    tx: std::sync::mpsc::SyncSender<()>,
}

impl WalCheckpointer {
    /// Opens its connection and starts the thread.
    pub fn start(path: &Path) -> Result<WalCheckpointer> {
        let conn = Connection::open(path).op("open database (wal checkpointer)")?;
        pragmas(&conn)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("wal-checkpoint".into())
            .spawn(move || loop {
                use std::sync::mpsc::RecvTimeoutError;
                match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = checkpoint_wal(&conn) {
                            tracing::warn!(error = %e, "WAL checkpoint failed (the WAL keeps the data)");
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            })
            .map_err(|e| Error::Corrupt(format!("cannot start the WAL checkpoint thread: {e}")))?;
        Ok(WalCheckpointer { tx })
    }

    /// Asks for a checkpoint soon (never blocks).
    pub fn poke(&self) {
        let _ = self.tx.try_send(());
    }
}

impl Reader {
    /// Opens a read-only connection to a database a [`Writer`] has opened.
    pub fn open(path: &Path) -> Result<Reader> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .op("open database (reader)")?;
        pragmas(&conn)?;
        conn.pragma_update(None, "query_only", "ON")
            .op("PRAGMA query_only")?;
        let found = migrate::user_version(&conn)?;
        if found != migrate::latest_version() {
            return Err(Error::Corrupt(format!(
                "schema version {found} changed under the running service"
            )));
        }
        Ok(Reader { conn })
    }
}

/// The current UTC time in RFC 3339 (checkpoint `created_at` metadata).
// The service's one wall-clock read: metadata only, never in an envelope.
#[allow(clippy::disallowed_methods)]
pub fn created_at_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs() as i64, now.subsec_millis())
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_700_000_000, 123), "2023-11-14T22:13:20.123Z");
    }
}
