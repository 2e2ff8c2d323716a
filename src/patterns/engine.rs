//! The engine façade: push, advance (the processing order), finish, status,
//! checkpoint and restore.

use crate::patterns::document::{Document, Limits};
use crate::patterns::error::{PushRejection, Rejection};
use crate::patterns::event::Event;
use crate::patterns::output::Output;

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

/// The complete state of the pattern engine.
#[derive(Debug, Clone)]
pub struct Engine {
    doc: Document,
}

impl Engine {
    /// A fresh engine: watermark -1, nothing buffered, next ordinal 1.
    pub fn new(doc: Document) -> Engine {
        Engine { doc }
    }

    /// The document (patterns and limits in force).
    pub fn document(&self) -> &Document {
        &self.doc
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.doc.limits()
    }

    /// Buffers a batch atomically.
    pub fn push(&mut self, events: Vec<Event>) -> Result<PushOutcome, PushRejection> {
        let _ = events;
        unimplemented!()
    }

    /// Index of the first late event, changing nothing.
    pub fn first_late(&self, events: &[Event]) -> Option<usize> {
        let _ = events;
        unimplemented!()
    }

    /// Processes every buffered event with `time <= watermark`; atomic.
    pub fn advance(&mut self, watermark: i64) -> Result<AdvanceOutcome, Rejection> {
        let _ = watermark;
        unimplemented!()
    }

    /// `advance(FINAL_WATERMARK)`.
    pub fn finish(&mut self) -> Result<AdvanceOutcome, Rejection> {
        self.advance(crate::patterns::FINAL_WATERMARK)
    }

    /// The watermark (-1 at start).
    pub fn watermark(&self) -> i64 {
        unimplemented!()
    }

    /// Buffered events.
    pub fn buffered(&self) -> u64 {
        unimplemented!()
    }

    /// The ordinal of the next pushed event (1 at start).
    pub fn next_ordinal(&self) -> u64 {
        unimplemented!()
    }

    /// The last output seq (0 at start).
    pub fn sequence(&self) -> u64 {
        unimplemented!()
    }

    /// Counters, per pattern sorted by name.
    pub fn status(&self) -> Status {
        unimplemented!()
    }

    /// The canonical checkpoint envelope.
    pub fn checkpoint(&self) -> Vec<u8> {
        unimplemented!()
    }

    /// Restores an envelope whose patterns equal `doc`'s; `doc`'s limits
    /// are used.
    pub fn restore(envelope: &[u8], doc: &Document) -> Result<Engine, String> {
        let _ = (envelope, doc);
        unimplemented!()
    }
}
