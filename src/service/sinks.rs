//! What the webhook sinks (`crate::sinks`) use of the service: the
//! committed heads, the writing connection for their own small
//! transactions (never the engines lock), and reading connections.
//! A sink reads the stored output like a long poll does, never the
//! engines' memory.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::store::{self, Reader, Writer};

use super::order::Held;
use super::{Heads, Metrics, Service, ServiceError};

impl Service {
    /// The heads of the last commit (what a reader may read up to).
    pub fn heads(&self) -> Heads {
        *self.output.heads.borrow()
    }

    /// Runs `f` on the writing connection (a sink's own short
    /// transactions; they queue with the group commits, not with the
    /// engines lock).
    pub fn sink_write<R>(
        &self,
        f: impl FnOnce(&mut Writer) -> store::Result<R>,
    ) -> Result<R, ServiceError> {
        let at = &mut Held::entry();
        let mut w = self.writer(at);
        f(&mut w)
            .inspect_err(|_| Metrics::inc(&self.env.metrics.storage_failures, 1))
            .map_err(ServiceError::from)
    }

    /// Runs `f` on a pooled reading connection.
    pub fn sink_read<R>(
        &self,
        f: impl FnOnce(&mut Reader) -> store::Result<R>,
    ) -> Result<R, ServiceError> {
        self.with_reader(f)
    }

    /// The counter of commits that synced the WAL (see
    /// `Writer::record_batches`).
    pub fn appends(&self) -> Arc<AtomicU64> {
        self.writer(&mut Held::entry()).appends()
    }
}
