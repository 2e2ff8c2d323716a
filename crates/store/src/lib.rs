//! SQLite storage: with the id index (`streamforge-ids`, [`ids`]), the only
//! crate that imports `rusqlite`.
//!
//! One database file holds the pipeline, the command log since the recovery
//! base, the changelog and late pages, the stored checkpoints and the recovery
//! base. The service owns one [`Writer`] (behind its engines lock) and any
//! number of [`Reader`]s for the pages, which never wait for that lock.
//!
//! # Durability
//! Every connection runs `journal_mode = WAL` and `synchronous = FULL`. In WAL
//! mode `NORMAL` already survives a crash of the process, but it may roll back
//! the last commits after a power loss or an OS crash; `FULL` syncs the WAL on
//! every commit, so an acknowledged call survives both. The cost is one fsync
//! per commit (see BENCHMARKS.md); the service amortizes it by group commit
//! (one transaction for all the calls queued meanwhile) and clients by
//! batching many deliveries per request. (The one exception: the pieces of a
//! checkpoint envelope are written with `NORMAL`; nothing refers to them
//! until the `FULL` commit that links them, whose WAL sync covers them.)
//!
//! The WAL is copied back into the database by [`WalCopier`] with
//! passive checkpoints, off the commit path; the writer starts the WAL over
//! between two of its commits once nearly all of it is copied
//! ([`Writer::restart_wal`]).

mod body;
mod checkpoints;
pub mod chunk;
mod error;
mod history;
mod idempotency_keys;
mod lock;
mod log;
pub mod migrate;
mod pages;
mod positions;
mod rejected;
pub mod segments;
mod sinks;
mod upgrade;
mod window_checkpoints;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

pub use body::StoredBody;
pub use checkpoints::{sha256_hex, CheckpointMeta, Origin, PIECE_BYTES};
pub use chunk::chunk_rows;
pub use error::{Error, Result};
pub use history::HistoryDb;
pub use idempotency_keys::{KeyAt, KeyRow, StoredKey};
pub use lock::{lock_path, DbLock, LockError};
pub use log::{Base, BaseState, CommandRow, Restored, RestoredLate};
pub use pages::{Page, PageRefusal, Stream};
pub use rejected::{RejectedPage, RejectedStore};
pub use sinks::{BatchRow, SinkRow};
/// The id index (its own crate, `streamforge-ids`), which [`HistoryDb`] holds.
pub use streamforge_ids as ids;
pub use window_checkpoints::{StoredWindow, WindowRow};

use error::Op;

/// The engines that share the database (and its write path): each has its
/// own commands in the one log, its own recovery base and checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineId {
    /// The windowed-aggregation engine (`streamforge_engine`).
    Window,
    /// The pattern engine (`streamforge_patterns`).
    Patterns,
}

impl EngineId {
    /// The engine's name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            EngineId::Window => "window",
            EngineId::Patterns => "patterns",
        }
    }

    /// The output stream whose epoch is the engine's (its restores cut it
    /// back to the checkpoint's sequence).
    pub fn stream(self) -> Stream {
        match self {
            EngineId::Window => Stream::Changes,
            EngineId::Patterns => Stream::Patterns,
        }
    }
}

/// Whether other processes may open the database while this one has it
/// open ([`set_shared_access`]); exclusive unless set.
static SHARED_ACCESS: AtomicBool = AtomicBool::new(false);

/// How this process opens its databases from now on: `false` (the
/// default) through SQLite's `unix-excl` VFS, `true` through `unix`.
///
/// Exclusive: the first connection takes a lock on the whole file that
/// every connection of this process shares and that no other process can
/// take, and the WAL index lives in this process's memory (no `-shm` file),
/// so a commit makes no lock system calls (six `fcntl` per commit
/// otherwise: about 5% of the CPU of a call of one event). One server owns
/// one database, so nothing else needs it while the server runs; another
/// process that opens it (`sqlite3`, a second server) waits for the busy
/// timeout and gets "database is locked".
///
/// Shared (`serve --db-shared`): SQLite's ordinary locks, for a tool that
/// must read or write the database while the server runs.
pub fn set_shared_access(shared: bool) {
    SHARED_ACCESS.store(shared, Ordering::Relaxed);
}

/// Opens a connection of this process to a database, with the access
/// [`set_shared_access`] chose.
pub(crate) fn open_conn(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let vfs = if SHARED_ACCESS.load(Ordering::Relaxed) {
        "unix"
    } else {
        "unix-excl"
    };
    Connection::open_with_flags_and_vfs(path, flags, vfs)
}

/// The `synchronous` level every connection uses (see the module docs).
pub const SYNCHRONOUS: &str = "FULL";

/// How long a connection waits for SQLite's locks.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

fn pragmas(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT).op("busy_timeout")?;
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
    /// Commits of [`Writer::append`] so far: each syncs the WAL, and with
    /// it every frame written before (the sinks' unsynced writes).
    appends: Arc<std::sync::atomic::AtomicU64>,
    /// Idempotency keys kept (the newest; 0: every key).
    keep_keys: u64,
}

/// A reading connection (pages, checkpoints).
pub struct Reader {
    conn: Connection,
}

/// Page size of a new database (an existing file keeps its own). A commit
/// writes every page it changed, whole, into the WAL and syncs it: the one
/// event per request shape changes one page of the command log per call, so
/// the page size is what each such call writes and syncs. 4 KiB (SQLite's
/// default, one page of the OS) against 16 KiB: 25% less server CPU per
/// single-event call and 1.3x the requests/s at 64 connections, batches
/// unchanged (BENCHMARKS.md, "Issue 35, fourth pass").
pub const PAGE_SIZE: u32 = 4096;

/// WAL pages (256 MiB with 4 KiB pages) after which the writer copies the
/// WAL by itself, in its commit: a backstop only, should the background
/// [`WalCopier`] stall (it keeps the WAL near 16 MiB without blocking
/// commits).
const AUTOCHECKPOINT_PAGES: u32 = 65_536;

impl Writer {
    /// Opens (creating if needed) the database, sets the pragmas and applies
    /// the missing migrations. A newer schema is refused.
    pub fn open(path: &Path) -> Result<Writer> {
        let mut conn = open_conn(path, OpenFlags::default()).op("open database")?;
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
        upgrade::run(&mut conn)?;
        let mut w = Writer {
            conn,
            appends: Arc::default(),
            keep_keys: 0,
        };
        w.drop_orphan_pieces()?;
        // No restore is in progress at open (one process per database): a
        // staged segment is what a restore left when the process died
        // before ending its staging (issue 36, point 8), before or after
        // the restore committed; the ones the restored checkpoint names are
        // ordinary segments from now on, the others go.
        w.end_staging()?;
        w.drop_unreferenced_segments()?;
        Ok(w)
    }

    /// Keeps only the newest `keep` idempotency keys from now on (0: every
    /// key).
    pub fn set_key_retention(&mut self, keep: u64) {
        self.keep_keys = keep;
    }

    /// Copies what is left of the WAL into the database and starts the WAL
    /// over (`PRAGMA wal_checkpoint(RESTART)`), between two commits of this
    /// (the only) writer. Does not wait for readers: if one still reads an
    /// older snapshot, it tries again later. True when the WAL restarted.
    pub fn restart_wal(&mut self) -> Result<bool> {
        self.conn
            .busy_timeout(Duration::ZERO)
            .op("busy_timeout (restart)")?;
        let busy = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0))
            .op("PRAGMA wal_checkpoint(RESTART)");
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .op("busy_timeout (after restart)")?;
        Ok(busy? == 0)
    }
}

/// WAL frames (4 KiB pages: 16 MiB; a database made with 16 KiB pages: 64
/// MiB) from which the writer restarts the WAL
/// once the background checkpointer has copied nearly all of it.
const RESTART_FRAMES: i64 = 4096;
/// At most this many frames (512 KiB, or 2 MiB) left to copy: a restart is
/// cheap.
const RESTART_LEFT: i64 = 128;
/// Passive checkpoints per round.
const PASSIVE_ROUNDS: usize = 4;

/// What the last passive checkpoint saw: WAL frames and frames copied.
#[derive(Debug, Default)]
struct WalProgress {
    frames: AtomicI64,
    copied: AtomicI64,
}

/// One round of the background checkpointer: passive checkpoints (each
/// copies the frames the WAL holds when it starts and never takes the write
/// lock), repeated while commits landed meanwhile.
///
/// Under continuous commits a passive checkpoint never ends with the whole
/// WAL copied at a moment the writer starts a transaction, so the WAL would
/// never start over; a RESTART checkpoint run here would hold SQLite's write
/// lock for its copy and the database fsync, and every commit would wait for
/// it in SQLite's busy handler (sleeps of 10-400 ms seen under load). So the
/// restart is the writer's own ([`Writer::restart_wal`], between two of its
/// commits, once [`WalCopier::restart_due`]): little is left to copy
/// by then.
fn checkpoint_wal(conn: &Connection, progress: &WalProgress) -> Result<()> {
    for _ in 0..PASSIVE_ROUNDS {
        let (frames, copied): (i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
            .op("PRAGMA wal_checkpoint(PASSIVE)")?;
        progress.frames.store(frames, Ordering::Relaxed);
        progress.copied.store(copied, Ordering::Relaxed);
        if copied >= frames || frames - copied <= RESTART_LEFT {
            break;
        }
    }
    Ok(())
}

/// Copies the WAL back into the database file on its own thread and
/// connection (`PRAGMA wal_checkpoint(PASSIVE)`), so that commits do not pay
/// for it. Poked by the writer after every few MB committed, and once a
/// second. The thread ends when this handle is dropped.
pub struct WalCopier {
    tx: std::sync::mpsc::SyncSender<()>,
    progress: Arc<WalProgress>,
}

impl WalCopier {
    /// Opens its connection and starts the thread.
    pub fn start(path: &Path) -> Result<WalCopier> {
        let conn = open_conn(path, OpenFlags::default()).op("open database (wal checkpointer)")?;
        pragmas(&conn)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let progress = Arc::new(WalProgress::default());
        let seen = progress.clone();
        std::thread::Builder::new()
            .name("wal-checkpoint".into())
            .spawn(move || loop {
                use std::sync::mpsc::RecvTimeoutError;
                match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = checkpoint_wal(&conn, &seen) {
                            tracing::warn!(error = %e, "WAL checkpoint failed (the WAL keeps the data)");
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            })
            .map_err(|e| Error::Corrupt(format!("cannot start the WAL checkpoint thread: {e}")))?;
        Ok(WalCopier { tx, progress })
    }

    /// The WAL is long and nearly all copied: time for
    /// [`Writer::restart_wal`].
    pub fn restart_due(&self) -> bool {
        let frames = self.progress.frames.load(Ordering::Relaxed);
        let copied = self.progress.copied.load(Ordering::Relaxed);
        frames >= RESTART_FRAMES && frames - copied <= RESTART_LEFT
    }

    /// Called after [`Writer::restart_wal`] (done or not): the next one
    /// waits for the next passive round's figures.
    pub fn restart_tried(&self) {
        self.progress.frames.store(0, Ordering::Relaxed);
        self.progress.copied.store(0, Ordering::Relaxed);
    }

    /// Asks for a checkpoint soon (never blocks; a full channel means one
    /// is already asked for).
    pub fn poke(&self) {
        if let Err(std::sync::mpsc::TrySendError::Disconnected(())) = self.tx.try_send(()) {
            tracing::error!(
                "the WAL copier thread has ended: the writer copies the WAL itself \
                 once it reaches 1 GiB"
            );
        }
    }
}

impl Reader {
    /// Opens a read-only connection to a database a [`Writer`] has opened.
    pub fn open(path: &Path) -> Result<Reader> {
        let conn = open_conn(
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
    // A clock before 1970 reads as 1970 (metadata only).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs() as i64, now.subsec_millis())
}

/// Year, month and day of a count of days since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`), for the time stamps of checkpoints and
/// of the server's log.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
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
    use crate::{EngineId, Stream};

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_700_000_000, 123), "2023-11-14T22:13:20.123Z");
    }

    fn wal_frames(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .unwrap()
    }

    #[test]
    fn the_writer_restarts_the_wal_unless_a_reader_holds_an_old_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut w = Writer::open(&db).unwrap();
        let row = CommandRow {
            engine: EngineId::Window,
            kind: "advance",
            body: &[7u8; 100_000],
            encoding: crate::body::RAW,
            changes: None,
            records: (Stream::Late, &[]),
            key: None,
            document: None,
        };
        w.append(&[row]).unwrap();
        let r = Reader::open(&db).unwrap();
        // a reader in the middle of a read transaction on this snapshot
        r.conn.execute_batch("BEGIN").unwrap();
        let _: i64 = r
            .conn
            .query_row("SELECT count(*) FROM commands", [], |x| x.get(0))
            .unwrap();
        w.append(&[row]).unwrap();
        let t = std::time::Instant::now();
        assert!(!w.restart_wal().unwrap(), "restarted under a reader");
        // it does not wait for the reader (busy timeout is 10 s otherwise)
        assert!(t.elapsed() < BUSY_TIMEOUT / 2);
        r.conn.execute_batch("COMMIT").unwrap();
        let before = wal_frames(&w.conn);
        assert!(before > 0);
        assert!(w.restart_wal().unwrap());
        // the next commit writes from the start of the WAL
        w.append(&[CommandRow { body: b"{}", ..row }]).unwrap();
        assert!(wal_frames(&w.conn) < before, "the WAL did not start over");
        assert_eq!(w.command_count().unwrap(), 3);
    }
}
