//! What the service answers without changing anything: its setup, its
//! readiness, the results and status (once settled), and pages of output.

use super::*;

impl Service {
    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.setup.pipeline
    }

    /// The service's metrics (shared with the api's request observer).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.env.metrics
    }

    /// What recovery at start did.
    pub fn recovery(&self) -> Recovery {
        self.env.recovery
    }

    /// The database file.
    pub fn db_path(&self) -> &Path {
        &self.env.db
    }

    /// Whether the engines match the store and storage works.
    pub fn is_ready(&self) -> bool {
        self.engines_lock.healthy.load(Ordering::Relaxed)
    }

    /// A receiver of the head sequences (long polls, streams).
    pub fn subscribe(&self) -> watch::Receiver<Heads> {
        self.output.heads.subscribe()
    }

    /// Wakes every waiter and ends every stream: the server is stopping.
    pub fn begin_shutdown(&self) {
        self.output.heads.send_modify(|h| h.shutdown = true);
    }

    /// The visible rows (optionally filtered), with the watermark,
    /// sequence and epoch of the state they belong to.
    pub fn results(
        &self,
        window: Option<&str>,
        key: Option<&str>,
    ) -> Result<Results, ServiceError> {
        let at = &mut Held::entry();
        let g = self.lock_settled(at)?;
        let p = &g.engines.window;
        Ok(Results {
            rows: p.results(window, key),
            watermark: p.watermark(),
            sequence: p.sequence(),
            epoch: g.epochs.window,
        })
    }

    /// `GET /status`.
    pub fn status(&self) -> Result<Status, ServiceError> {
        let at = &mut Held::entry();
        let g = self.lock_settled(at)?;
        let p = &g.engines.window;
        Ok(Status {
            watermark: p.watermark(),
            sequence: p.sequence(),
            late: p.late_len(),
            live_buckets: p.live_buckets(),
            epoch: g.epochs.window,
            partitions: p.partitions(),
        })
    }

    /// A page of an output stream (from the store): the records after
    /// `after`, its head and epoch. With `epoch` older than the current one
    /// the page starts at the rewind point (see [`store::Reader::page`]); a
    /// future epoch is `InvalidRequest`, a pruned start `Gone`.
    pub fn page(
        &self,
        stream: Stream,
        after: u64,
        limit: u32,
        epoch: Option<u64>,
    ) -> Result<Page, ServiceError> {
        match self.with_reader(|r| r.page(stream, after, limit, epoch))? {
            Ok(page) => Ok(page),
            Err(PageRefusal::FutureEpoch { asked, current }) => Err(ServiceError::Invalid(
                format!("epoch {asked} is ahead of the current epoch {current}"),
            )),
            Err(PageRefusal::Pruned { after, earliest }) => Err(ServiceError::Gone {
                detail: format!(
                    "the {} up to sequence {} were pruned by the retention policy (asked for \
                     the ones after {after}); the earliest still held is {earliest}: resync \
                     from GET /results, then follow from its sequence",
                    match stream {
                        Stream::Changes => "changes",
                        Stream::Late => "late records",
                        Stream::Patterns => "pattern output records",
                    },
                    earliest - 1
                ),
                earliest,
            }),
        }
    }
}
