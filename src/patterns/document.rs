//! The patterns document: patterns, stages and limits; validation with the
//! JSON path of every error; the `GET /patterns` form; pattern equality.

use std::fmt;

use crate::patterns::condition::Condition;

/// The service's limits (policy, not state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most matches one advance may emit.
    pub max_results_per_advance: u64,
    /// Most branches plus waits of one pattern and key after an observation.
    pub active_states: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_results_per_advance: 10_000,
            active_states: 10_000,
        }
    }
}

/// What a selected match removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Nothing.
    NoSkip,
    /// Everything sharing the match's first ordinal.
    SkipToNextStart,
    /// Everything whose first capture is at or before the match's last.
    SkipPastLast,
}

/// What a branch waiting for a stage does with an event that fails `where`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contiguity {
    /// Dies.
    Strict,
    /// Keeps waiting; a matching event replaces the branch.
    SkipNext,
    /// Keeps waiting; a matching event also forks successors.
    SkipAny,
}

/// One stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Unique within the pattern.
    pub name: String,
    /// Fewest captures.
    pub min: u32,
    /// Most captures (>= 1).
    pub max: u32,
    /// See [`Contiguity`].
    pub contiguity: Contiguity,
    /// What an event must satisfy to be captured.
    pub where_: Condition,
    /// What cancels a branch waiting for this stage.
    pub forbidden: Option<Condition>,
}

/// One pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// Unique name.
    pub name: String,
    /// Deadline of a branch: its start plus `within`.
    pub within: i64,
    /// The skip policy.
    pub skip: Skip,
    /// 1..=32 stages.
    pub stages: Vec<Stage>,
    /// The absence condition, if any.
    pub absence: Option<Condition>,
}

/// A validated patterns document; patterns are kept sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) limits: Limits,
}

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

impl Document {
    /// Parses and validates a document.
    pub fn from_json(bytes: &[u8]) -> Result<Document, DocumentError> {
        let _ = bytes;
        unimplemented!()
    }

    /// The `GET /patterns` body.
    pub fn to_json(&self) -> Vec<u8> {
        unimplemented!()
    }

    /// Same patterns (by name, in full, defaults normalized); limits ignored.
    pub fn same_patterns(&self, other: &Document) -> bool {
        self.patterns == other.patterns
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The same patterns with other limits.
    pub fn with_limits(&self, limits: Limits) -> Document {
        Document {
            patterns: self.patterns.clone(),
            limits,
        }
    }

    /// Pattern names, sorted.
    pub fn pattern_names(&self) -> Vec<String> {
        self.patterns.iter().map(|p| p.name.clone()).collect()
    }

    /// The patterns, sorted by name.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }
}
