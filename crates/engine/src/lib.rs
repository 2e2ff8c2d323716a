//! The pure, synchronous windowed-aggregation engine (docs/semantics.md).
//!
//! # Layout
//! - [`pipeline`]: partitions, window definitions, lateness; validation and
//!   equivalence.
//! - [`event`]: events, deliveries and the output records (results, changes,
//!   late records, addresses).
//! - `sources`: per-partition delivery history and the global identities.
//! - `watermark`: per-partition progress and idleness; the monotone global
//!   watermark.
//! - `window`: window assignment (fixed, sliding, stream-time) in exact
//!   `i128` arithmetic.
//! - `live`: the live window index (buckets by address, sessions per key,
//!   by-end order for readiness and finalization).
//! - `changelog`: the visible rows, reconciliation in changelog order and the
//!   global sequence.
//! - `checkpoint`: the version 2 envelope and its digest chain (written with
//!   the shared canonical JSON helpers of [`streamforge_canonical`]), strict
//!   restore of versions 2 and 1.
//!
//! # Rules of this crate
//! It depends on nothing but `serde`, `serde_json`, `sha2` and the shared
//! pure helpers of [`streamforge_canonical`]: no clock, no I/O, no randomness, and
//! no hash-map iteration order reaches any output.
//! Every call either fails with a [`Rejection`] and changes nothing, or
//! succeeds; no input can make it panic. The work of a call is proportional to
//! what it touches, never to the number of live buckets.

pub mod error;
pub mod event;
pub mod pipeline;

pub use error::{BatchRejection, Rejection};
pub use event::{
    json_array, write_json_array, Address, Change, ChangeOp, Delivery, DeliveryInput, DeliveryRef,
    Event, EventRef, LateRecord, WindowResult, WriteJson,
};
pub use pipeline::{Pipeline, PipelineError, WindowDef};

/// What a successful ingest produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IngestOutcome {
    /// Every change the batch produced, in order.
    pub changes: Vec<Change>,
    /// Every late record the batch produced, in order.
    pub late: Vec<LateRecord>,
    /// The global watermark (unchanged by ingestion).
    pub watermark: Option<i64>,
    /// Consumed offset of each partition the batch named, sorted by name.
    pub offsets: Vec<(String, i64)>,
    /// Deliveries consumed as duplicates (known id, same identity, new
    /// offset): counted once, nothing added.
    pub duplicates: u64,
    /// Identical redeliveries at already consumed offsets (no effect).
    pub redeliveries: u64,
}

/// What a successful advance or mark_idle produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TickOutcome {
    /// The changes of the reconciliation, in order.
    pub changes: Vec<Change>,
    /// The global watermark after the call.
    pub watermark: Option<i64>,
    /// Addresses finalized by the call, in address order (empty when the
    /// call asked for [`Finalized::Count`]).
    pub finalized: Vec<Address>,
    /// How many buckets the call finalized (with either [`Finalized`]).
    pub finalized_count: usize,
}

/// What a watermark call reports of the buckets it finalizes: their
/// addresses in address order, or only how many (which spares sorting and
/// naming them when nobody reads them: a minimal answer, a replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Finalized {
    /// Their addresses, sorted ([`TickOutcome::finalized`]).
    Addresses,
    /// Their number only ([`TickOutcome::finalized_count`]).
    #[default]
    Count,
}

/// A partition's consumption and watermark state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Partition name.
    pub name: String,
    /// Consumed offset (-1 before the first delivery).
    pub offset: i64,
    /// Reported progress, if any.
    pub progress: Option<i64>,
    /// Idle flag.
    pub idle: bool,
}

mod processor;
pub use processor::{Processor, Snapshot};

mod aggregate;
mod bucket;
mod changelog;
pub mod checkpoint;
mod chunked;
pub use streamforge_canonical::sha256_hex;
pub mod history;
mod idstr;
mod key_aggs;
mod keywork;
pub mod late;
mod live;
mod num;
pub mod segment_text;
mod session;
mod shards;
pub use shards::{Executor, MAX_SHARDS};
mod sources;
mod str_index;
#[cfg(test)]
mod test_rng;
pub use sources::Flushed;
mod watermark;
mod window;
