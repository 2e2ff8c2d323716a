//! Why the engine refuses a call. Every rejection leaves all state unchanged.

use std::fmt;

/// A refused call. `code()` is the stable machine-readable name of docs/api.md.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The partition is not one of the pipeline's (`unknown_partition`).
    UnknownPartition(String),
    /// The offset is below the consumed offset with another event, or leaves
    /// a gap (`offset_conflict`). The string says which.
    OffsetConflict(String),
    /// The event id is known with another identity (`identity_conflict`).
    IdentityConflict(String),
    /// A checkpoint cannot be restored (`invalid_checkpoint`); the string
    /// names what is wrong.
    InvalidCheckpoint(String),
    /// A well-formed value the engine cannot use, such as an empty event id
    /// (`bad_request`).
    BadRequest(String),
    /// The history store failed while the call read it (`unavailable`);
    /// nothing was applied.
    Unavailable(String),
}

impl Rejection {
    /// The stable error code of docs/api.md.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::UnknownPartition(_) => "unknown_partition",
            Rejection::OffsetConflict(_) => "offset_conflict",
            Rejection::IdentityConflict(_) => "identity_conflict",
            Rejection::InvalidCheckpoint(_) => "invalid_checkpoint",
            Rejection::BadRequest(_) => "bad_request",
            Rejection::Unavailable(_) => "unavailable",
        }
    }

    /// The human-readable explanation.
    pub fn detail(&self) -> &str {
        match self {
            Rejection::UnknownPartition(s)
            | Rejection::OffsetConflict(s)
            | Rejection::IdentityConflict(s)
            | Rejection::InvalidCheckpoint(s)
            | Rejection::BadRequest(s)
            | Rejection::Unavailable(s) => s,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.detail())
    }
}

impl std::error::Error for Rejection {}

/// A rejected batch: the 0-based index of the first delivery that would be
/// rejected, and why. Nothing of the batch was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRejection {
    /// Index of the first failing delivery in the batch.
    pub index: usize,
    /// Why it fails.
    pub rejection: Rejection,
}

impl fmt::Display for BatchRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delivery {}: {}", self.index, self.rejection)
    }
}

impl std::error::Error for BatchRejection {}
