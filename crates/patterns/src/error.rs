//! Why the engine refuses a push or an advance (every rejection leaves all
//! state unchanged), and why a document is invalid.

use std::fmt;

/// A refused call; [`Rejection::code`] is the stable problem code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// An event with `time <= watermark` (`late_event`, 409).
    LateEvent {
        /// The event's time.
        time: i64,
        /// The engine's watermark.
        watermark: i64,
    },
    /// An advance below the current watermark (`watermark_regression`, 409).
    WatermarkRegression {
        /// The requested watermark.
        watermark: i64,
        /// The current watermark.
        current: i64,
    },
    /// A request the engine cannot take (`invalid_request`, 422), such as a
    /// watermark above `FINAL_WATERMARK` or an empty batch.
    InvalidRequest(String),
    /// A limit reached during an advance (`limit_exceeded`, 422); the detail
    /// names the limit, the pattern and the key.
    LimitExceeded(String),
}

impl Rejection {
    /// The stable problem code.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::LateEvent { .. } => "late_event",
            Rejection::WatermarkRegression { .. } => "watermark_regression",
            Rejection::InvalidRequest(_) => "invalid_request",
            Rejection::LimitExceeded(_) => "limit_exceeded",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::LateEvent { time, watermark } => write!(
                f,
                "event time {time} is not after the watermark {watermark}"
            ),
            Rejection::WatermarkRegression { watermark, current } => write!(
                f,
                "watermark {watermark} is below the current watermark {current}"
            ),
            Rejection::InvalidRequest(s) | Rejection::LimitExceeded(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Rejection {}

/// A refused batch: the 0-based index of its first failing event and why.
/// Nothing of the batch was buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushRejection {
    /// Index of the first failing event.
    pub index: usize,
    /// Why it fails.
    pub rejection: Rejection,
}

impl fmt::Display for PushRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event {}: {}", self.index, self.rejection)
    }
}

impl std::error::Error for PushRejection {}

/// Why a document is invalid: the JSON path and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentError {
    /// JSON path, e.g. `patterns[0].stages[2].where.all[1]` (empty for the
    /// document itself).
    pub path: String,
    /// The rule broken.
    pub message: String,
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for DocumentError {}
