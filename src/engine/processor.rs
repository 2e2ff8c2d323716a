//! The `Processor` façade: one pipeline's complete state and its verbs.
use super::*;

/// The complete state of one pipeline. See the module docs of [`crate::engine`].
#[derive(Debug, Clone)]
pub struct Processor {
    pipeline: Pipeline,
}

impl Processor {
    /// A fresh processor: every partition at consumed offset -1, no watermark.
    pub fn new(pipeline: Pipeline) -> Processor {
        Processor { pipeline }
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Ingests a batch atomically, with exactly the effect of separate calls.
    /// On error nothing is applied and the index names the first bad delivery.
    /// An empty batch succeeds with no effect (the API rejects it earlier).
    pub fn ingest(&mut self, deliveries: Vec<Delivery>) -> Result<IngestOutcome, BatchRejection> {
        let _ = deliveries;
        todo!()
    }

    /// `advance(partition, w)`.
    pub fn advance(&mut self, partition: &str, watermark: i64) -> Result<TickOutcome, Rejection> {
        let _ = (partition, watermark);
        todo!()
    }

    /// `mark_idle(partition)`.
    pub fn mark_idle(&mut self, partition: &str) -> Result<TickOutcome, Rejection> {
        let _ = partition;
        todo!()
    }

    /// The global watermark.
    pub fn watermark(&self) -> Option<i64> {
        todo!()
    }

    /// The last change sequence emitted (0 before any).
    pub fn sequence(&self) -> u64 {
        todo!()
    }

    /// Number of late records so far.
    pub fn late_len(&self) -> u64 {
        todo!()
    }

    /// Number of live buckets.
    pub fn live_buckets(&self) -> usize {
        todo!()
    }

    /// Every partition's state, sorted by name.
    pub fn partitions(&self) -> Vec<PartitionStatus> {
        todo!()
    }

    /// The visible rows in address order, optionally filtered.
    pub fn results(&self, window: Option<&str>, key: Option<&str>) -> Vec<WindowResult> {
        let _ = (window, key);
        todo!()
    }

    /// Late records with `seq > after`, at most `limit`.
    pub fn late(&self, after: u64, limit: usize) -> Vec<LateRecord> {
        let _ = (after, limit);
        todo!()
    }

    /// The canonical version-1 checkpoint envelope of the current state.
    pub fn checkpoint(&self) -> Vec<u8> {
        todo!()
    }

    /// Restores a checkpoint envelope for `pipeline` (which must be equivalent
    /// to the checkpoint's). Returns a new, independent processor.
    pub fn restore(envelope: &[u8], pipeline: &Pipeline) -> Result<Processor, Rejection> {
        let _ = (envelope, pipeline);
        todo!()
    }

    /// Restores a checkpoint envelope on its own embedded pipeline (used to
    /// verify a checkpoint file offline).
    pub fn from_checkpoint(envelope: &[u8]) -> Result<Processor, Rejection> {
        let _ = envelope;
        todo!()
    }
}
