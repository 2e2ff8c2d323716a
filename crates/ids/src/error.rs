//! The id index's errors. Each carries the operation (and so the SQL) that
//! failed. The store turns them into its own (`streamforge_store::Error`),
//! with the same variants and words.

use std::fmt;

/// A failure of the id index.
#[derive(Debug)]
pub enum Error {
    /// A SQLite call failed; `op` names the operation or statement.
    Sqlite {
        /// What was being done.
        op: &'static str,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// Stored data is not what this crate wrote (corrupt or foreign).
    Corrupt(String),
    /// The lender's own failure (see [`crate::Lend`]), passed back as it
    /// was: the store lends its writer and gets its error back.
    Lender(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sqlite { op, source } => write!(f, "sqlite: {op}: {source}"),
            Error::Corrupt(msg) => write!(f, "stored data is corrupt: {msg}"),
            Error::Lender(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sqlite { source, .. } => Some(source),
            Error::Lender(e) => e.source(),
            Error::Corrupt(_) => None,
        }
    }
}

/// Result alias of the id index.
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

/// Stored data that is not what this crate wrote.
pub(crate) fn corrupt(msg: String) -> Error {
    Error::Corrupt(format!("id index: {msg}"))
}
