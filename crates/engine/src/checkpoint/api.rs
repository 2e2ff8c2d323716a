//! The window engine's checkpoint verbs: a [`Processor`] checkpoints,
//! restores and resumes, and a [`Snapshot`] gives its live parts and
//! digest, through this module's functions (so `processor` never imports
//! `checkpoint`: the dependency goes one way).

use std::sync::Arc;

use super::chain::{self, Hash};
use super::LiveParts;
use crate::history::{HistoryStore, MemHistory, NewSegment, SegId, SegKind};
use crate::pipeline::Pipeline;
use crate::processor::{Processor, Snapshot};
use crate::sources::Flushed;
use crate::Rejection;

impl Processor {
    /// The canonical version-2 checkpoint envelope of the current state
    /// (its flushed history read back from the store).
    pub fn checkpoint(&self) -> Result<Vec<u8>, Rejection> {
        super::take(self).map_err(crate::sources::unavailable)
    }

    /// Restores a checkpoint envelope for `pipeline` (which must be equivalent
    /// to the checkpoint's). Returns a new, independent processor with its
    /// history in memory.
    pub fn restore(envelope: &[u8], pipeline: &Pipeline) -> Result<Processor, Rejection> {
        Processor::restore_into(envelope, pipeline, MemHistory::new())
    }

    /// [`Processor::restore`], flushing later into `store`.
    pub fn restore_into(
        envelope: &[u8],
        pipeline: &Pipeline,
        store: Arc<dyn HistoryStore>,
    ) -> Result<Processor, Rejection> {
        super::restore(envelope, Some(pipeline), store).map_err(Rejection::InvalidCheckpoint)
    }

    /// Restores a checkpoint envelope on its own embedded pipeline (used to
    /// verify a checkpoint file offline).
    pub fn from_checkpoint(envelope: &[u8]) -> Result<Processor, Rejection> {
        Processor::from_checkpoint_into(envelope, MemHistory::new())
    }

    /// [`Processor::from_checkpoint`], flushing later into `store`.
    pub fn from_checkpoint_into(
        envelope: &[u8],
        store: Arc<dyn HistoryStore>,
    ) -> Result<Processor, Rejection> {
        super::restore(envelope, None, store).map_err(Rejection::InvalidCheckpoint)
    }

    /// Resumes a checkpoint this service stored: its live parts and its
    /// flushed history in `store`.
    pub fn resume(
        pipeline: &Pipeline,
        live: &LiveParts,
        flushed: Flushed,
        store: Arc<dyn HistoryStore>,
    ) -> Result<Processor, Rejection> {
        super::resume(pipeline, live, flushed, store).map_err(Rejection::InvalidCheckpoint)
    }
}

impl Snapshot {
    /// The state without its history, as the envelope writes it.
    pub fn live_parts(&self) -> LiveParts {
        LiveParts::of(&self.p)
    }

    /// The digest (version 2) of the state when the snapshot was taken,
    /// once `stored` (its tail, as [`Snapshot::each_tail_segment`] gave
    /// it) is stored: from the chains the segments carry, without reading
    /// the history.
    pub fn digest_with(&self, live: &LiveParts, stored: &[(NewSegment, SegId)]) -> String {
        let p = &self.p;
        let mut sources: Vec<Hash> = Vec::with_capacity(p.pipeline.partitions().len());
        for i in 0..p.pipeline.partitions().len() {
            let last = stored
                .iter()
                .rev()
                .find(|(s, _)| s.kind == SegKind::Sources && s.partition == i);
            sources.push(match last {
                Some((s, _))
                    if s.chain.len() == u64::try_from(p.sources.consumed(i) + 1).unwrap_or(0) =>
                {
                    s.chain.value()
                }
                _ => p.sources.chain_value(i, &p.keys),
            });
        }
        let late = match stored.iter().rev().find(|(s, _)| s.kind == SegKind::Late) {
            Some((s, _)) if s.chain.len() == p.late.len() => s.chain.value(),
            _ => p.late.chain_value(),
        };
        chain::digest(live, &sources, &late)
    }
}
