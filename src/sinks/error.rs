//! Why a sink call failed.

use crate::service::ServiceError;

/// Why a sink call failed (the api maps each to one problem `code`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// Malformed: not JSON, a wrong type, a missing or unknown field.
    BadRequest(String),
    /// Well-formed but unusable (names the field).
    Invalid(String),
    /// The name is taken.
    Exists(String),
    /// No such sink.
    NotFound(String),
    /// Storage failed or the service is recovering.
    Unavailable(String),
}

impl From<ServiceError> for SinkError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(d) => SinkError::Invalid(d),
            ServiceError::NotFound(d) => SinkError::NotFound(d),
            other => SinkError::Unavailable(other.to_string()),
        }
    }
}
