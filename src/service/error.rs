//! Why a service call did not succeed. The api maps each variant to exactly
//! one HTTP status and problem `code`; this module knows no HTTP.

use std::fmt;

use crate::engine::{BatchRejection, Rejection};

/// A failed service call. Nothing was applied in any of these cases.
#[derive(Debug)]
pub enum ServiceError {
    /// The engine refused the call; state unchanged.
    Rejected(Rejection),
    /// The engine refused a batch; `index` names the first bad delivery.
    BatchRejected(BatchRejection),
    /// Storage failed (or the service is still recovering); nothing was
    /// applied and the in-memory state matches the store.
    Unavailable(String),
    /// No such checkpoint.
    NotFound(String),
    /// Well-formed but unusable (an epoch ahead of the current one).
    Invalid(String),
    /// The pattern engine refused the call; state unchanged. `index` names
    /// the failing event of a push.
    Patterns(PatternRejection),
    /// A malformed item of a batch whose earlier items were all usable
    /// (the pattern engine decides between late and malformed in order).
    Malformed {
        /// The item's index (batches only).
        index: Option<usize>,
        /// What is wrong.
        detail: String,
    },
    /// A call with the same idempotency key is in progress.
    KeyInUse(String),
    /// The idempotency key was used for another request.
    KeyReused(String),
    /// The records asked for were pruned by the retention policy.
    Gone {
        /// What is missing and how to resync.
        detail: String,
        /// The earliest sequence still held.
        earliest: u64,
    },
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::Rejected(r) => write!(f, "{r}"),
            ServiceError::BatchRejected(r) => write!(f, "{r}"),
            ServiceError::Unavailable(s) => write!(f, "unavailable: {s}"),
            ServiceError::NotFound(s) => write!(f, "not found: {s}"),
            ServiceError::Invalid(s) => write!(f, "invalid request: {s}"),
            ServiceError::Patterns(r) => write!(f, "{}: {}", r.rejection.code(), r.rejection),
            ServiceError::Malformed { detail, .. } => write!(f, "bad request: {detail}"),
            ServiceError::Gone { detail, .. } => write!(f, "gone: {detail}"),
            ServiceError::KeyInUse(s) | ServiceError::KeyReused(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<crate::store::Error> for ServiceError {
    fn from(e: crate::store::Error) -> Self {
        ServiceError::Unavailable(format!("storage failure: {e}"))
    }
}

/// A refusal of the pattern engine, with the failing event of a push.
#[derive(Debug)]
pub struct PatternRejection {
    /// The first failing event of a push (`None` for an advance).
    pub index: Option<usize>,
    /// Why.
    pub rejection: crate::patterns::Rejection,
}

impl From<crate::patterns::PushRejection> for PatternRejection {
    fn from(r: crate::patterns::PushRejection) -> Self {
        PatternRejection {
            index: Some(r.index),
            rejection: r.rejection,
        }
    }
}

impl From<crate::patterns::Rejection> for PatternRejection {
    fn from(rejection: crate::patterns::Rejection) -> Self {
        PatternRejection {
            index: None,
            rejection,
        }
    }
}

/// Why the service refuses to start. The message names the file and the
/// reason; nothing in the database was changed to "repair" it.
#[derive(Debug)]
pub struct StartError(pub String);

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}
