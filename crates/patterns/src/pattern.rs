//! A pattern as the engine runs it: its stages, skip policy and
//! contiguity, and the service's limits (the parsed document's parts;
//! `document.rs` reads and writes them).

use crate::condition::Condition;

/// Most stages of a pattern.
pub const MAX_STAGES: usize = 32;
/// Largest `max` of a stage.
pub const MAX_STAGE_MAX: u32 = 32;
/// Largest sum of `max` over a pattern's stages.
pub const MAX_CAPTURES: u32 = 128;
/// Largest value of either limit.
pub const MAX_LIMIT: u64 = 1_000_000;

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

impl Skip {
    /// The policy's name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Skip::NoSkip => "no_skip",
            Skip::SkipToNextStart => "skip_to_next_start",
            Skip::SkipPastLast => "skip_past_last",
        }
    }
}

impl Contiguity {
    /// The contiguity's name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Contiguity::Strict => "strict",
            Contiguity::SkipNext => "skip_next",
            Contiguity::SkipAny => "skip_any",
        }
    }
}
