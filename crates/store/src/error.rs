//! Store errors. Each carries the operation (and so the SQL) that failed.

use std::fmt;

/// A storage failure.
#[derive(Debug)]
pub enum Error {
    /// A SQLite call failed; `op` names the operation or statement.
    Sqlite {
        /// What was being done.
        op: &'static str,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The database file was written by a newer Streamforge (its schema
    /// version is above the newest migration this binary knows).
    NewerSchema {
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// The newest version this binary knows.
        known: i64,
    },
    /// Stored data is not what this binary wrote (corrupt or foreign).
    Corrupt(String),
    /// A failure injected by the chaos suite's fault hook (`STREAMFORGE_FAULTS`,
    /// see `service::faults`); never happens otherwise.
    Injected(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sqlite { op, source } => write!(f, "sqlite: {op}: {source}"),
            Error::NewerSchema { found, known } => write!(
                f,
                "the database schema is version {found}, newer than the newest this binary knows ({known}); \
                 it was written by a newer streamforge and is left untouched: run that version"
            ),
            Error::Corrupt(msg) => write!(f, "stored data is corrupt: {msg}"),
            Error::Injected(what) => write!(f, "injected failure: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sqlite { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    /// An error of the id index as the store's: the same variants and
    /// words; a lender's error (the store lends its writer) comes back as
    /// it was. (A function, not `From`: a second `From` would leave the
    /// `?` in closures without a type to infer.)
    pub(crate) fn from_ids(e: streamforge_ids::Error) -> Error {
        match e {
            streamforge_ids::Error::Sqlite { op, source } => Error::Sqlite { op, source },
            streamforge_ids::Error::Corrupt(msg) => Error::Corrupt(msg),
            streamforge_ids::Error::Lender(e) => match e.downcast::<Error>() {
                Ok(e) => *e,
                // not the store's lenders (they fail with its errors only)
                Err(e) => Error::Corrupt(format!("id index: {e}")),
            },
        }
    }
}

/// Result alias of the store.
pub type Result<T> = std::result::Result<T, Error>;

/// Attaches an operation name to a rusqlite result.
pub(crate) trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Op<T> for std::result::Result<T, rusqlite::Error> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| Error::Sqlite { op, source })
    }
}
