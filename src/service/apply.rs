//! The mutating calls of the window engine, on the one write path:
//!
//! 1. **Engine** (under the engines lock, nothing else): the call's
//!    command ([`Cmd`], one type per command in `cmd/`) is applied; a rejection returns here and writes nothing.
//!    Otherwise the call gets the next ticket and is queued on the commit
//!    queue, still under the lock, so the queue is in engine order.
//! 2. **Encode** (no lock): the output is encoded once for the store and
//!    once for the answer.
//! 3. **Commit** (`commit`): group commit; the answer goes out only after
//!    the transaction that holds the call.

use crate::engine::{json_array, Address, DeliveryRef, TickOutcome};
use crate::store::StoredBody;

use super::cmd::{Advance, AdvanceAll, Cmd, Idle, Ingest};
use super::order::{Held, Nothing};
use super::queue::{json_records, Encoded, Pending};
use super::{Metrics, Service, ServiceError};

/// How much of the answer the caller of a mutating call asks for (its
/// `Prefer` header, RFC 7240: `return=minimal` or not): the records, or
/// only their counts (then no answer JSON is written for them at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefer {
    /// Every change, late record and finalized address.
    Full,
    /// Counts, offsets and the watermark only.
    Minimal,
}

impl Prefer {
    /// What the window engine reports of the buckets a watermark call
    /// finalizes for such an answer: a minimal one shows their number only.
    pub(super) fn finalized(self) -> crate::engine::Finalized {
        match self {
            Prefer::Full => crate::engine::Finalized::Addresses,
            Prefer::Minimal => crate::engine::Finalized::Count,
        }
    }
}

/// The answer to an acknowledged `POST /events`, built from the engine's
/// outcome, its output already encoded (the bytes that were stored).
#[derive(Debug, Clone)]
pub struct IngestAnswer {
    /// JSON array of the changes (empty with [`Prefer::Minimal`]).
    pub changes: Vec<u8>,
    /// Number of changes.
    pub change_count: usize,
    /// JSON array of the late records (empty with [`Prefer::Minimal`]).
    pub late: Vec<u8>,
    /// Number of late records.
    pub late_count: usize,
    /// Deliveries consumed as duplicates (a known id).
    pub duplicates: u64,
    /// The global watermark.
    pub watermark: Option<i64>,
    /// Consumed offset of each touched partition, sorted by name.
    pub offsets: Vec<(String, i64)>,
}

/// What an ingest's answer needs besides the engine's outcome.
pub(super) struct IngestPending {
    deliveries: u64,
    touched: Vec<String>,
    prefer: Prefer,
}

/// An ingest applied and handed to the commit queue, not yet committed.
pub(super) struct PreparedIngest {
    ticket: u64,
    deliveries: u64,
    touched: Vec<String>,
    redeliveries: u64,
    /// A full answer: its changes, until their JSON is written.
    records: Option<Vec<crate::engine::Change>>,
    answer: IngestAnswer,
}

impl PreparedIngest {
    /// Writes the answer's changes (a full answer), best while the commit
    /// runs.
    pub(super) fn write_answer(&mut self) {
        if let Some(changes) = self.records.take() {
            self.answer.changes = json_array(&changes);
        }
    }
}

/// The answer to an acknowledged `POST /watermarks` or idle call.
#[derive(Debug, Clone)]
pub struct TickAnswer {
    /// JSON array of the changes (empty with [`Prefer::Minimal`]).
    pub changes: Vec<u8>,
    /// Number of changes.
    pub change_count: usize,
    /// The global watermark after the call.
    pub watermark: Option<i64>,
    /// Addresses finalized by the call, in address order (empty with
    /// [`Prefer::Minimal`]).
    pub finalized: Vec<Address>,
    /// How many buckets the call finalized.
    pub finalized_count: usize,
}

impl Service {
    /// `POST /events`: the deliveries of a body (logged in their binary
    /// form, `cmd/deliveries_body.rs`).
    pub fn ingest(
        &self,
        deliveries: Vec<DeliveryRef<'_>>,
        prefer: Prefer,
    ) -> Result<IngestAnswer, ServiceError> {
        let at = &mut Held::entry();
        let mut prepared = self.ingest_prepare(at, deliveries, prefer)?;
        // Leads the commit at once when none is running, and writes the
        // answer while it runs.
        self.lead(at);
        prepared.write_answer();
        self.ingest_finish(at, prepared)
    }

    /// Steps 1 and 2 of an ingest: applied, encoded, handed to the commit
    /// queue and its answer written, but not committed (`ingest_finish`
    /// waits for that, or leads it). The ingest thread prepares every call
    /// it has, then commits them in one transaction.
    pub(super) fn ingest_prepare(
        &self,
        at: &mut Held<Nothing>,
        deliveries: Vec<DeliveryRef<'_>>,
        prefer: Prefer,
    ) -> Result<PreparedIngest, ServiceError> {
        let (cmd, body, pending) = self.ingest_command(deliveries, prefer)?;
        let applied = self.apply(at, cmd, body)?;
        self.ingest_applied(at, pending, applied)
    }

    /// An ingest's command and its stored body, and what its answer needs.
    pub(super) fn ingest_command<'a>(
        &self,
        deliveries: Vec<DeliveryRef<'a>>,
        prefer: Prefer,
    ) -> Result<(Ingest<'a>, StoredBody, IngestPending), ServiceError> {
        let n = deliveries.len() as u64;
        let derive = self.setup.derived.derive_for(&deliveries);
        let touched: Vec<String> = derive.iter().map(|(p, _)| p.clone()).collect();
        let cmd = Ingest { deliveries, derive };
        let body = StoredBody::raw(cmd.body());
        Ok((
            cmd,
            body,
            IngestPending {
                deliveries: n,
                touched,
                prefer,
            },
        ))
    }

    /// An applied ingest, encoded and handed to the commit queue.
    pub(super) fn ingest_applied(
        &self,
        at: &mut Held<Nothing>,
        pending: IngestPending,
        (ticket, o): (u64, crate::engine::IngestOutcome),
    ) -> Result<PreparedIngest, ServiceError> {
        let enc = Encoded::of::<Ingest<'_>>(&o);
        let full = pending.prefer == Prefer::Full;
        // the answer's late array from the records already encoded for storage
        let late = match &enc {
            Ok(e) if full => json_records(e.records()),
            _ => Vec::new(),
        };
        self.hand_over(at, ticket, enc)?;
        Ok(PreparedIngest {
            ticket,
            deliveries: pending.deliveries,
            touched: pending.touched,
            redeliveries: o.redeliveries,
            answer: IngestAnswer {
                changes: Vec::new(),
                change_count: o.changes.len(),
                late,
                late_count: o.late.len(),
                duplicates: o.duplicates,
                watermark: o.watermark,
                offsets: o.offsets,
            },
            records: full.then_some(o.changes),
        })
    }

    /// Step 3 of an ingest: its commit (led here when it is due), then the
    /// answer.
    pub(super) fn ingest_finish(
        &self,
        at: &mut Held<Nothing>,
        p: PreparedIngest,
    ) -> Result<IngestAnswer, ServiceError> {
        self.finish(at, p.ticket)?;
        for t in &p.touched {
            self.setup.derived.touch(t);
        }
        let a = &p.answer;
        Metrics::inc(&self.env.metrics.deliveries, p.deliveries);
        Metrics::inc(&self.env.metrics.ingest_requests, 1);
        Metrics::inc(&self.env.metrics.duplicates, a.duplicates);
        Metrics::inc(&self.env.metrics.redeliveries, p.redeliveries);
        Metrics::inc(&self.env.metrics.changes, a.change_count as u64);
        Metrics::inc(&self.env.metrics.late, a.late_count as u64);
        Ok(p.answer)
    }

    /// `POST /watermarks`.
    pub fn advance(
        &self,
        partition: &str,
        watermark: i64,
        prefer: Prefer,
    ) -> Result<TickAnswer, ServiceError> {
        let cmd = Advance {
            partition: partition.into(),
            watermark,
            detail: prefer.finalized(),
        };
        let body = StoredBody::raw(cmd.body()?);
        let out = self.tick(cmd, body, prefer)?;
        self.setup.derived.touch(partition);
        Ok(out)
    }

    /// `POST /watermarks/batch`: the advances `(partition, watermark)`
    /// applied in order in one atomic call, with exactly the effect and
    /// output of the same advances one by one; a rejection (an unknown
    /// partition) names the advance's index and applies none.
    pub fn advance_all(
        &self,
        advances: &[(String, i64)],
        prefer: Prefer,
    ) -> Result<TickAnswer, ServiceError> {
        let cmd = AdvanceAll::of(advances, prefer.finalized());
        let body = StoredBody::raw(cmd.body()?);
        let out = self.tick(cmd, body, prefer)?;
        for (p, _) in advances {
            self.setup.derived.touch(p);
        }
        Ok(out)
    }

    /// `POST /partitions/{partition}/idle`.
    pub fn mark_idle(&self, partition: &str, prefer: Prefer) -> Result<TickAnswer, ServiceError> {
        let cmd = Idle {
            partition: partition.into(),
            detail: prefer.finalized(),
        };
        let body = StoredBody::raw(cmd.body()?);
        self.tick(cmd, body, prefer)
    }

    fn tick<C: Cmd<Outcome = TickOutcome>>(
        &self,
        cmd: C,
        body: StoredBody,
        prefer: Prefer,
    ) -> Result<TickAnswer, ServiceError> {
        let at = &mut Held::entry();
        let (ticket, o) = self.apply(at, cmd, body)?;
        let enc = Encoded::of::<C>(&o);
        let changes = self.commit(at, ticket, enc, || match prefer {
            Prefer::Full => json_array(&o.changes),
            Prefer::Minimal => Vec::new(),
        })?;
        Metrics::inc(&self.env.metrics.changes, o.changes.len() as u64);
        Ok(TickAnswer {
            changes,
            change_count: o.changes.len(),
            watermark: o.watermark,
            finalized: o.finalized,
            finalized_count: o.finalized_count,
        })
    }

    /// Step 1: the engine, under the engines lock (mutating calls take it
    /// in arrival order); queues the applied call with `body`, what the
    /// command log stores.
    pub(super) fn apply<C: Cmd>(
        &self,
        at: &mut Held<Nothing>,
        cmd: C,
        body: StoredBody,
    ) -> Result<(u64, C::Outcome), ServiceError> {
        let mut turn = self.engines_lock.turns.wait(at);
        let mut guard = self.lock_consistent(turn.held())?;
        let (inner, at) = guard.parts();
        self.apply_locked(inner, at, cmd, body)
    }

    /// [`Service::apply`] of several commands in one turn of the engines
    /// lock, in order; each succeeds or fails on its own (a failure to take
    /// the lock fails them all).
    pub(super) fn apply_all<C: Cmd>(
        &self,
        at: &mut Held<Nothing>,
        cmds: Vec<(C, StoredBody)>,
    ) -> Vec<Result<(u64, C::Outcome), ServiceError>> {
        let mut turn = self.engines_lock.turns.wait(at);
        let mut guard = match self.lock_consistent(turn.held()) {
            Ok(g) => g,
            Err(e) => {
                // (lock_consistent fails only as Unavailable)
                let why = match e {
                    ServiceError::Unavailable(d) => d,
                    other => other.to_string(),
                };
                return cmds
                    .iter()
                    .map(|_| Err(ServiceError::Unavailable(why.clone())))
                    .collect();
            }
        };
        let (inner, at) = guard.parts();
        cmds.into_iter()
            .map(|(cmd, body)| self.apply_locked(inner, at, cmd, body))
            .collect()
    }

    pub(super) fn apply_locked<C: Cmd>(
        &self,
        inner: &mut super::Inner,
        at: &mut Held<super::order::Engines>,
        cmd: C,
        body: StoredBody,
    ) -> Result<(u64, C::Outcome), ServiceError> {
        let (engine, kind) = (C::ENGINE, cmd.kind());
        let applied = match cmd.apply(&mut inner.engines) {
            Ok(a) => a,
            Err(e) => {
                Metrics::inc(&self.env.metrics.rejected, 1);
                return Err(e);
            }
        };
        inner.ticket += 1;
        let ticket = inner.ticket;
        let heads = inner.heads();
        if engine == crate::store::EngineId::Window {
            let tail = inner.engines.window.tail_len();
            self.engines_lock
                .tail
                .store(tail, std::sync::atomic::Ordering::Relaxed);
            self.engines_lock.live.store(
                inner.engines.window.live_buckets() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            if tail >= super::checkpoint::TAIL_MAX {
                // The history in memory is due to be flushed.
                self.wake_checkpointer("the history stays in memory");
            }
        }
        self.enqueue(at, Pending::new(ticket, engine, kind, body, heads))?;
        Ok((ticket, applied))
    }
}
