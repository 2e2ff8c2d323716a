//! One database, one server: an exclusive lock on a database for the life
//! of the process that writes it (as Kafka locks its log directories and
//! PostgreSQL its data directory).
//!
//! The lock is an `flock` on `<database>.lock`, a file beside the database
//! that holds who has it (`pid` and, once known, the address the server
//! listens on). The operating system releases the lock when its holder
//! exits, however it exits (`kill -9` included), so a stale lock never needs
//! a human: the file may stay behind, but nobody holds it. A process that
//! finds the lock taken reads the holder from the file and refuses to start,
//! having written nothing (it opens the lock file without truncating it and
//! never opens the database).
//!
//! Which database a path names is decided by the path with symbolic links
//! resolved (`./a.db`, `/abs/a.db` and a link to it take the same lock).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DbLock {
    file: File,
    path: PathBuf,
    db: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "database {db} is in use by another streamforge process ({holder}); \
         one database is served by one process at a time: stop that one first, or use another --db"
    )]
    Held {
        /// The database.
        db: String,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// The lock file could not be opened or locked.
    #[error("database {db}: cannot take its lock {lock}: {source}")]
    Io {
        /// The database.
        db: String,
        /// The lock file.
        lock: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// What a lock's holder wrote, read whole. The holder rewrites the file
/// (empties it, then writes its record, which ends with a newline), so a
/// read can overlap the write and see nothing or a record cut short (`pid
/// 7889, listening on ` without the address): such a read is made again,
/// for at most about 100 ms; then the last one is what is known.
fn holder_text(mut read: impl FnMut() -> std::io::Result<String>) -> String {
    let mut last = String::new();
    for attempt in 0..100 {
        match read() {
            Ok(text) if text.ends_with('\n') => return text,
            Ok(text) => last = text,
            Err(_) => {}
        }
        if attempt < 99 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    last
}

/// `<database>.lock` for `db`, with symbolic links of the database (or,
/// for a database not created yet, of its directory) resolved.
pub fn lock_path(db: &Path) -> PathBuf {
    let resolved = std::fs::canonicalize(db).unwrap_or_else(|_| {
        // Not created yet: resolve its directory (the file name stays).
        let dir = match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        match (std::fs::canonicalize(dir), db.file_name()) {
            (Ok(dir), Some(name)) => dir.join(name),
            // No directory to resolve or no file name: the path as given
            // (opening the database fails the same way later).
            _ => db.to_path_buf(),
        }
    });
    let mut name = resolved.into_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

impl DbLock {
    /// Takes the lock of `db` for this process, or says who holds it.
    /// Records this process's pid in the lock file.
    pub fn acquire(db: &Path) -> Result<DbLock, LockError> {
        let path = lock_path(db);
        let lock_name = path.display().to_string();
        let io = |source| LockError::Io {
            db: db.display().to_string(),
            lock: lock_name.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // What the holder wrote; unreadable or empty (it has not
                // written yet) still names the lock file.
                let said = holder_text(|| {
                    let mut said = String::new();
                    file.seek(SeekFrom::Start(0))?;
                    file.read_to_string(&mut said)?;
                    Ok(said)
                });
                let holder = match said.trim() {
                    "" => "holder unknown".to_string(),
                    said => said.replace('\n', ", "),
                };
                return Err(LockError::Held {
                    db: db.display().to_string(),
                    holder: format!("{holder}; lock file {}", path.display()),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let mut lock = DbLock {
            file,
            path,
            db: db.to_path_buf(),
        };
        lock.record(None).map_err(io)?;
        Ok(lock)
    }

    /// Records the address the holder serves on, for the message a second
    /// process prints.
    pub fn record_address(&mut self, addr: &str) -> std::io::Result<()> {
        self.record(Some(addr))
    }

    fn record(&mut self, addr: Option<&str>) -> std::io::Result<()> {
        let mut text = format!("pid {}", std::process::id());
        if let Some(addr) = addr {
            text.push_str(&format!("\nlistening on {addr}"));
        }
        text.push('\n');
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(text.as_bytes())?;
        self.file.flush()
    }

    /// The database this lock is for.
    pub fn db(&self) -> &Path {
        &self.db
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal read while the holder rewrites its record (issue 36,
    /// point 10: "listening on " without the address) reads it again.
    #[test]
    fn a_record_read_while_it_is_written_is_read_again() {
        let mut reads = [
            "",
            "pid 7889\nlistening on ",
            "pid 7889\nlistening on 127.0.0.1:18611\n",
        ]
        .into_iter();
        let text = holder_text(|| Ok(reads.next().unwrap_or_default().to_string()));
        assert_eq!(text, "pid 7889\nlistening on 127.0.0.1:18611\n");
        // a holder that never completes its record: what was read last
        let text = holder_text(|| Ok("pid 7889\nlisten".to_string()));
        assert_eq!(text, "pid 7889\nlisten");
    }

    #[test]
    fn a_second_lock_on_the_same_database_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sf.db");
        let mut first = DbLock::acquire(&db).unwrap();
        first.record_address("127.0.0.1:18601").unwrap();
        // flock locks belong to open file descriptions: a second open in
        // this process conflicts as another process would.
        let err = DbLock::acquire(&db).unwrap_err().to_string();
        assert!(err.contains(&db.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(err.contains("listening on 127.0.0.1:18601"), "{err}");
        // the same database by another path
        let other = dir.path().join(".").join("sf.db");
        assert!(DbLock::acquire(&other).is_err());
        #[cfg(unix)]
        {
            let link = dir.path().join("link.db");
            std::fs::write(&db, b"").unwrap();
            std::os::unix::fs::symlink(&db, &link).unwrap();
            assert!(DbLock::acquire(&link).is_err(), "a link to it");
        }
        // a refused acquire wrote nothing
        let said = std::fs::read_to_string(first.path()).unwrap();
        assert!(said.contains("127.0.0.1:18601"), "{said}");
        drop(first);
        let again = DbLock::acquire(&db).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.path()).unwrap(),
            format!("pid {}\n", std::process::id())
        );
        // another database is independent
        let _b = DbLock::acquire(&dir.path().join("other.db")).unwrap();
    }
}
