//! What the engine's calls return: the outcomes of a push, an advance and
//! a document change, the status counters and the type mismatches.

use crate::output::Output;

/// What a successful push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushOutcome {
    /// Ordinal of the batch's first event.
    pub first: u64,
    /// Ordinal of the batch's last event.
    pub last: u64,
    /// Events buffered after the push, in all.
    pub buffered: u64,
}

/// What a successful advance did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvanceOutcome {
    /// The output records, in sequence order.
    pub output: Vec<Output>,
    /// The watermark after the advance.
    pub watermark: i64,
    /// Buffered events the advance took.
    pub processed: u64,
}

/// One pattern's live state counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PatternStatus {
    /// Keys holding at least one branch or wait.
    pub keys: u64,
    /// Live branches.
    pub branches: u64,
    /// Absence waits.
    pub waits: u64,
}

/// The engine's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The watermark (-1 at start).
    pub watermark: i64,
    /// Buffered events.
    pub buffered: u64,
    /// The ordinal the next pushed event gets.
    pub next_ordinal: u64,
    /// The last output seq (0 before any).
    pub sequence: u64,
    /// Per pattern, sorted by name.
    pub patterns: Vec<(String, PatternStatus)>,
}

/// The count of one condition's type mismatches (see
/// [`crate::Engine::type_mismatches`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMismatch {
    /// The pattern's name.
    pub pattern: String,
    /// The comparison's path within its pattern, as in the document:
    /// `stages[2].where.all[1]`, `absence.not`.
    pub condition: String,
    /// Evaluations that were false because the two values' types differ.
    pub count: u64,
}

/// What a document change did, by pattern name (each list sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocumentChange {
    /// Patterns whose name and definition are unchanged: their state is kept.
    pub kept: Vec<String>,
    /// New patterns, and patterns whose definition changed: they start
    /// empty and see every event processed from now on.
    pub started: Vec<String>,
    /// Patterns no longer in the document: their state is dropped (their
    /// past output stays in the stream).
    pub removed: Vec<String>,
}
