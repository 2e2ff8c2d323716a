//! The narrow interface the sinks use, and nothing else: the heads of the
//! last commit (and a subscription to them), the stored output as pages
//! and results, the sinks' own rows, their recorded batches (read a frozen
//! range back, record new ones, move a cursor) and a sync. The workers hold
//! an `Arc<dyn SinkStore>`; [`Service`] implements it on its writing and
//! reading connections, outside the engines lock, except
//! [`SinkStore::results`], which reads the visible rows under it as
//! `GET /results` does (briefly, once the applied calls are committed).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::sync::watch;

use crate::service::{Heads, Results, Service, ServiceError};
use crate::store::{BatchRow, Page, SinkRow, Stream};

/// A recorded batch and, when it was not frozen, the stored records of its
/// range (read in the same snapshot).
pub type RecordedBatch = (BatchRow, Option<Vec<(u64, String)>>);

/// What a sink may do with the service.
pub trait SinkStore: Send + Sync + 'static {
    /// The heads of the last commit (what a reader may read up to).
    fn heads(&self) -> Heads;
    /// Wakes after every commit.
    fn subscribe(&self) -> watch::Receiver<Heads>;
    /// The pipeline's allowed lateness (the `changes` body carries it).
    fn lateness(&self) -> i64;
    /// The counter of commits that synced the WAL.
    fn appends(&self) -> Arc<AtomicU64>;
    /// A page of a stored stream, as `GET /changes` reads it.
    fn page(
        &self,
        stream: Stream,
        after: u64,
        limit: u32,
        epoch: Option<u64>,
    ) -> Result<Page, ServiceError>;
    /// The visible rows, as `GET /results` reads them.
    fn results(&self, window: Option<&str>, key: Option<&str>) -> Result<Results, ServiceError>;
    /// Every stored sink.
    fn sinks(&self) -> Result<Vec<SinkRow>, ServiceError>;
    /// One stored sink.
    fn sink(&self, name: &str) -> Result<Option<SinkRow>, ServiceError>;
    /// Where a sink at `cursor` of `epoch` stands in the current epoch.
    fn rewound(&self, stream: Stream, epoch: u64, cursor: u64) -> Result<u64, ServiceError>;
    /// Stores a new sink (durably); `None` when the name is taken.
    #[allow(clippy::too_many_arguments)]
    fn create_sink(
        &self,
        name: &str,
        uid: &str,
        stream: Stream,
        config: &str,
        created_at: &str,
        cursor: u64,
        epoch: u64,
    ) -> Result<Option<i64>, ServiceError>;
    /// Deletes a sink; `false` when there was none.
    fn delete_sink(&self, name: &str) -> Result<bool, ServiceError>;
    /// A sink's recorded batches, with the records of those not frozen.
    fn recorded_batches(
        &self,
        sink: i64,
        stream: Stream,
    ) -> Result<Vec<RecordedBatch>, ServiceError>;
    /// Records formed batches (and a cursor moved past skipped records);
    /// the append count to wait past before sending, `None` when a restore
    /// intervened.
    fn record_batches(
        &self,
        sink: i64,
        formed: &[BatchRow],
        batches_total: u64,
        watermark: Option<i64>,
        moved: Option<(u64, u64)>,
    ) -> Result<Option<u64>, ServiceError>;
    /// Moves a sink's cursor past an acknowledged batch.
    fn ack_batch(&self, sink: i64, batch: u64, cursor: u64, epoch: u64)
        -> Result<(), ServiceError>;
    /// Syncs the sinks' unsynced writes.
    fn sync(&self) -> Result<(), ServiceError>;
}

impl SinkStore for Service {
    fn heads(&self) -> Heads {
        Service::heads(self)
    }

    fn subscribe(&self) -> watch::Receiver<Heads> {
        Service::subscribe(self)
    }

    fn lateness(&self) -> i64 {
        self.pipeline().lateness()
    }

    fn appends(&self) -> Arc<AtomicU64> {
        Service::appends(self)
    }

    fn page(
        &self,
        stream: Stream,
        after: u64,
        limit: u32,
        epoch: Option<u64>,
    ) -> Result<Page, ServiceError> {
        Service::page(self, stream, after, limit, epoch)
    }

    fn results(&self, window: Option<&str>, key: Option<&str>) -> Result<Results, ServiceError> {
        Service::results(self, window, key)
    }

    fn sinks(&self) -> Result<Vec<SinkRow>, ServiceError> {
        self.sink_read(|r| r.sinks())
    }

    fn sink(&self, name: &str) -> Result<Option<SinkRow>, ServiceError> {
        self.sink_read(|r| r.sink(name))
    }

    fn rewound(&self, stream: Stream, epoch: u64, cursor: u64) -> Result<u64, ServiceError> {
        self.sink_read(|r| r.rewound(stream, epoch, cursor))
    }

    fn create_sink(
        &self,
        name: &str,
        uid: &str,
        stream: Stream,
        config: &str,
        created_at: &str,
        cursor: u64,
        epoch: u64,
    ) -> Result<Option<i64>, ServiceError> {
        self.sink_write(|w| w.create_sink(name, uid, stream, config, created_at, cursor, epoch))
    }

    fn delete_sink(&self, name: &str) -> Result<bool, ServiceError> {
        self.sink_write(|w| w.delete_sink(name))
    }

    fn recorded_batches(
        &self,
        sink: i64,
        stream: Stream,
    ) -> Result<Vec<RecordedBatch>, ServiceError> {
        self.sink_read(|r| {
            let mut out = Vec::new();
            for b in r.sink_batches(sink)? {
                let rows = if b.frozen.is_none() && b.first <= b.last {
                    Some(r.rows_between(stream, b.first, b.last)?)
                } else {
                    None
                };
                out.push((b, rows));
            }
            Ok(out)
        })
    }

    fn record_batches(
        &self,
        sink: i64,
        formed: &[BatchRow],
        batches_total: u64,
        watermark: Option<i64>,
        moved: Option<(u64, u64)>,
    ) -> Result<Option<u64>, ServiceError> {
        self.sink_write(|w| w.record_batches(sink, formed, batches_total, watermark, moved))
    }

    fn ack_batch(
        &self,
        sink: i64,
        batch: u64,
        cursor: u64,
        epoch: u64,
    ) -> Result<(), ServiceError> {
        self.sink_write(|w| w.ack_batch(sink, batch, cursor, epoch))
    }

    fn sync(&self) -> Result<(), ServiceError> {
        self.sink_write(|w| w.sink_sync())
    }
}
