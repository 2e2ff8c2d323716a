//! The pure pattern-detection engine (complex event processing).
//!
//! Named patterns of stages are matched, per key, against a stream of typed
//! events with its own watermark: a push only buffers events, an advance to
//! a watermark `W` processes every buffered event with `time <= W` in
//! `(time, ordinal)` order, expires deadlines, and commits atomically (a limit
//! reached anywhere fails the whole advance and changes nothing).
//! `docs/patterns.md` states every rule with a worked example.
//!
//! # Layout (one file per noun)
//! - [`document`]: the patterns document, its validation (JSON paths in every
//!   message), the `GET /patterns` form and pattern equality.
//! - [`condition`]: condition trees, their validation and evaluation.
//! - `compiled`: conditions as the engine runs them, each field comparison
//!   numbered (its type mismatch counter).
//! - `warnings`: conditions that can never be true, found from the document.
//! - [`value`]: the five field types and their comparison.
//! - [`event`]: events and their parsing from exact JSON text.
//! - `buffer`: pushed events waiting for an advance, in `(time, ordinal)` order.
//! - `branch`: partial matches and the successors of a capture.
//! - `keystate`: the branches and absence waits of one pattern and one key.
//! - `deadlines`: the ordered index of deadlines.
//! - `selection`: the candidate order and the skip policies.
//! - [`output`]: match and timeout records.
//! - [`engine`]: the façade: push, advance (the processing order), atomicity.
//! - `checkpoint`: the canonical envelope and strict restore.
//!
//! # Rules of this crate
//! It depends on nothing but `serde`, `serde_json`, `zmij` and the shared
//! pure helpers of [`streamforge_canonical`]: no clock, no I/O, no threads, no
//! randomness, and no hash-map iteration order reaches any output. No input
//! (document, event, checkpoint bytes) can make it panic. An advance costs
//! what it touches (its events, their keys' states, the deadlines it
//! expires), never the number of live keys.

pub mod condition;
pub mod document;
pub mod engine;
pub mod error;
pub mod event;
pub mod output;
pub mod value;

mod branch;
mod buffer;
mod checkpoint;
mod compiled;
mod deadlines;
mod expiry;
mod keystate;
mod outcome;
mod pattern;
mod selection;
mod warnings;

pub use checkpoint::envelope_digest;
pub use condition::{Condition, Op, Operand};
pub use document::{Contiguity, Document, DocumentError, Limits, Pattern, Skip, Stage, Warning};
pub use engine::{
    AdvanceOutcome, DocumentChange, Engine, PatternStatus, PushOutcome, Status, TypeMismatch,
};
pub use error::{PushRejection, Rejection};
pub use event::{parse_event, Event, EventParser};
pub use output::{CapturedEvent, Output, OutputKind};
pub use value::{Decimal, Value};

/// Largest event time: 2^53 - 1.
pub const MAX_EVENT_TIME: i64 = 9_007_199_254_740_991;
/// Largest `within` of a pattern (365 days in milliseconds).
pub const MAX_WINDOW: i64 = 31_536_000_000;
/// The watermark of `finish`: every deadline is at or before it.
pub const FINAL_WATERMARK: i64 = MAX_EVENT_TIME + MAX_WINDOW;
