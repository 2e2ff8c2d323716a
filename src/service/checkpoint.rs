//! Checkpoints of the engines' state: on request (`POST /checkpoints`),
//! automatic (every `checkpoint_every` logged commands of an engine, taken
//! from a snapshot outside the engines lock and stored in pieces), and
//! the final one of a graceful shutdown; their retention.
//!
//! (Not to be confused with SQLite's WAL checkpoints, which copy the
//! write-ahead log back into the database file: that is the store's
//! `WalCopier`.)

use std::sync::atomic::Ordering;

use crate::engine::checkpoint::{LiveParts, Out};
use crate::engine::history::{NewSegment, SegId, StoreFault};
use crate::store::{CheckpointMeta, EngineId, Origin, Reader};

use super::order::{self, Before, Held, Nothing};
use super::stored_parts::StoredParts;
use super::{Inner, Metrics, Service, ServiceError};

/// Most deliveries a history segment holds (one partition's part of a
/// flush is cut into pieces of this many).
pub(super) const SEGMENT_ITEMS: u64 = 1 << 16;

/// See [`Service::auto_threshold`]: from this many live buckets on, the
/// window engine's automatic checkpoints wait for [`CALLS_PER_LIVE`] logged
/// calls per live bucket (below it, a checkpoint is small and
/// `--checkpoint-every` alone decides).
const AUTO_LIVE_FROM: u64 = 1_024;

/// Logged calls per live bucket an automatic checkpoint of a large window
/// state waits for: a call of one event pays a quarter of a live bucket's
/// worth of checkpoint (at 1: 8.9% of the server's CPU at 64 connections
/// of one event per request, BENCHMARKS.md), and a restart replays at most
/// four calls per live bucket.
const CALLS_PER_LIVE: u64 = 4;

/// Deliveries (and late records) in memory from which the window engine
/// flushes its history with an automatic checkpoint, whatever
/// `--checkpoint-every` says: memory holds at most about this much history.
pub(super) const TAIL_MAX: u64 = 1 << 19;

/// Ids of the id index in memory from which they are stored: a restart
/// adds back at most about this many from their segments (~30 ms per
/// 100K on the benchmark box), and the index merges about
/// `log2(ids / IDS_FLUSH)` times per id over its life.
const IDS_FLUSH: u64 = 1 << 18;

/// A stored checkpoint's envelope, as it is served, with its digest (the
/// download's `ETag`).
pub enum Download {
    /// The bytes as stored (the pattern engine's; window ones stored whole
    /// before the history moved to segments).
    Bytes(Vec<u8>, String),
    /// A window checkpoint stored incrementally: assembled from its live
    /// parts and segments while it is sent
    /// ([`Service::send_window_envelope`]).
    Window(i64, String),
}

/// The digest an envelope of `engine` carries: a window envelope's
/// `digest` field, a pattern envelope's `sha256` field (both right after
/// their first key, as this service writes them).
fn envelope_digest(engine: EngineId, envelope: &[u8]) -> String {
    match engine {
        EngineId::Window => envelope
            .strip_prefix(crate::engine::checkpoint::ENVELOPE_PREFIX)
            .and_then(|rest| rest.get(..64))
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .unwrap_or_default(),
        EngineId::Patterns => crate::patterns::envelope_digest(envelope).unwrap_or_default(),
    }
}

/// An engine's state captured for a checkpoint (the window engine's is its
/// [`crate::engine::Snapshot`]).
pub(super) enum Captured {
    /// The window engine's frozen copy (serialized outside the lock).
    Window(Box<crate::engine::Snapshot>),
    /// The pattern engine's envelope, written under the lock.
    Patterns(Vec<u8>),
}

impl Captured {
    /// The canonical envelope (serialized outside the engines lock).
    fn envelope(self) -> Result<Vec<u8>, ServiceError> {
        match self {
            Captured::Window(s) => s.checkpoint().map_err(ServiceError::Rejected),
            Captured::Patterns(e) => Ok(e),
        }
    }
}

/// What a stored checkpoint covers of an engine's streams (for retention).
#[derive(Debug, Clone, Copy)]
struct Covers {
    /// The sequence of the engine's main stream.
    sequence: u64,
    /// Window engine: its number of late records.
    late: u64,
}

impl Inner {
    /// The envelope of an engine's current state, and what it covers.
    fn envelope(&self, engine: EngineId) -> Result<(Vec<u8>, Covers), ServiceError> {
        Ok(match engine {
            EngineId::Window => {
                let p = &self.engines.window;
                (
                    p.checkpoint().map_err(ServiceError::Rejected)?,
                    Covers {
                        sequence: p.sequence(),
                        late: p.late_len(),
                    },
                )
            }
            EngineId::Patterns => {
                let q = &self.engines.patterns;
                (
                    q.checkpoint(),
                    Covers {
                        sequence: q.sequence(),
                        late: 0,
                    },
                )
            }
        })
    }

    /// A cheap frozen copy of an engine's state for a checkpoint, and what
    /// it covers.
    fn capture(&self, engine: EngineId) -> Option<(Captured, Covers)> {
        match engine {
            EngineId::Window => {
                let p = &self.engines.window;
                Some((
                    Captured::Window(Box::new(p.snapshot())),
                    Covers {
                        sequence: p.sequence(),
                        late: p.late_len(),
                    },
                ))
            }
            EngineId::Patterns => {
                let (envelope, covers) = self.envelope(engine).ok()?;
                Some((Captured::Patterns(envelope), covers))
            }
        }
    }
}

impl Service {
    fn checkpoint_locked(
        &self,
        inner: &mut Inner,
        at: &mut Held<order::Engines>,
        engine: EngineId,
        origin: Origin,
    ) -> Result<CheckpointMeta, ServiceError> {
        let (envelope, covers) = inner.envelope(engine)?;
        let (meta, version) = {
            let mut w = self.writer(at);
            let version = self
                .commits
                .base_version(engine)
                .fetch_add(1, Ordering::SeqCst)
                + 1;
            (
                w.checkpoint(
                    engine,
                    &envelope,
                    &envelope_digest(engine, &envelope),
                    covers.sequence,
                    origin,
                ),
                version,
            )
        };
        let meta = meta.inspect_err(|_| Metrics::inc(&self.env.metrics.storage_failures, 1))?;
        *self.queue(at).logged.get_mut(engine) = 0;
        self.env.metrics.checkpoint_stored(meta.bytes);
        self.retain(at, engine, covers, version);
        Ok(meta)
    }

    /// Applies the retention policy after a checkpoint of `engine` became
    /// its recovery base: its old automatic checkpoints go, and (when
    /// configured) the output pages more than the retained count behind the
    /// head, never past the base (a replay checks its output against them).
    /// Failures are logged only: nothing acknowledged depends on pruning.
    ///
    /// `version` is the base version the checkpoint was stored with. The
    /// pages are pruned only while it still holds (checked under the
    /// writer, which a restore holds to store itself): after a restore
    /// the checkpoint's sequences and the heads read before it no longer
    /// describe the stored history, and the restore's own base is newer.
    fn retain<L: Before<order::Writer>>(
        &self,
        at: &mut Held<L>,
        engine: EngineId,
        covers: Covers,
        version: u64,
    ) {
        let r = self.checkpoints.retention;
        let mut w = self.writer(at);
        if let Err(e) =
            w.prune_checkpoints(engine, r.checkpoints.max(1), &|| self.env.faults.deleting())
        {
            tracing::warn!(error = %e, "pruning old automatic checkpoints failed");
        }
        if engine != EngineId::Window
            || self.commits.base_version(engine).load(Ordering::SeqCst) != version
        {
            return;
        }
        let heads = *self.output.heads.borrow();
        let through = |head: u64, keep: u64, base: u64| {
            if keep == 0 {
                0
            } else {
                head.saturating_sub(keep).min(base)
            }
        };
        let changes = through(heads.changes, r.changes, covers.sequence);
        let late = through(heads.late, r.late, covers.late);
        if changes > 0 || late > 0 {
            if let Err(e) = w.prune(changes, late) {
                tracing::warn!(error = %e, "pruning the output pages failed");
            }
        }
    }

    /// `POST /checkpoints`: stores a checkpoint of an engine's current state
    /// (its answer carries the digest, computed without reading the
    /// history).
    pub fn create_checkpoint(&self, engine: EngineId) -> Result<CheckpointMeta, ServiceError> {
        let at = &mut Held::entry();
        match engine {
            EngineId::Window => self
                .window_checkpoint(at, Origin::User, |_, _| true)?
                .ok_or_else(|| {
                    ServiceError::Unavailable(
                        "a restore replaced the state while the checkpoint was taken; \
                         nothing was stored, try again"
                            .into(),
                    )
                }),
            EngineId::Patterns => {
                // The slot keeps the store's collection of unnamed segments
                // (when this checkpoint is stored) from running while a
                // window checkpoint has written segments it has not linked.
                let mut slot = self.checkpointing(at);
                let mut g = self.lock_settled(slot.held())?;
                let (inner, at) = g.parts();
                self.checkpoint_locked(inner, at, engine, Origin::User)
            }
        }
    }

    /// Takes a window engine checkpoint if `due(logged commands, history
    /// in memory)` says so, storing only what is new: the history that
    /// arrived since the last one (flushed into segments, then dropped from
    /// memory) and the live state. The snapshot is taken under the
    /// engines lock; everything else runs outside it, one checkpoint at a
    /// time. `None`: not due, or a restore moved the recovery base
    /// meanwhile (the new segments then belong to nothing and go).
    pub(super) fn window_checkpoint(
        &self,
        at: &mut Held<Nothing>,
        origin: Origin,
        due: impl Fn(u64, u64) -> bool,
    ) -> Result<Option<CheckpointMeta>, ServiceError> {
        let mut slot = self.checkpointing(at);
        let at = slot.held();
        // A duration for the metrics only.
        #[allow(clippy::disallowed_methods)]
        let began = std::time::Instant::now();
        let (snap, up_to, logged, version, generation) = {
            let mut g = self.lock_settled(at)?;
            let logged = self.queue(g.held()).logged.get(EngineId::Window);
            if !due(logged, g.engines.window.tail_len()) {
                return Ok(None);
            }
            let up_to = self.writer(g.held()).last_command_id(EngineId::Window)?;
            (
                g.engines.window.snapshot(),
                up_to,
                logged,
                self.commits
                    .base_version(EngineId::Window)
                    .load(Ordering::SeqCst),
                g.window_gen,
            )
        };
        let storage = |e: crate::store::Error| {
            Metrics::inc(&self.env.metrics.storage_failures, 1);
            ServiceError::from(e)
        };
        let stored = self.store_tail(at, &snap)?;
        self.env.faults.checkpoint_pieces_written();
        // Lookups find the flushed ids before the engine drops its tail.
        let ids: Vec<(SegId, &[(u64, u64)])> = stored
            .iter()
            .map(|(s, id)| (*id, s.ids.as_slice()))
            .collect();
        self.setup.history.add_ids(&ids).map_err(storage)?;
        let live = snap.live_parts();
        let flushed = snap.flushed_with(&stored);
        let bytes = crate::engine::checkpoint::envelope_len(&live, &flushed);
        // From the chains the new segments carry: nothing of the history
        // is read.
        let digest = snap.digest_with(&live, &stored);
        let (meta, version) = {
            let mut w = self.writer(at);
            if self
                .commits
                .base_version(EngineId::Window)
                .load(Ordering::SeqCst)
                != version
            {
                return Ok(None);
            }
            let version = self
                .commits
                .base_version(EngineId::Window)
                .fetch_add(1, Ordering::SeqCst)
                + 1;
            let meta = w
                .link_window_checkpoint(
                    &live.encode(),
                    &flushed,
                    bytes,
                    &digest,
                    snap.sequence(),
                    up_to,
                    origin,
                )
                .map_err(storage)?;
            (meta, version)
        };
        self.env.faults.checkpoint_linked();
        {
            let mut g = self.lock(at);
            // Unless a rebuild replaced the engine meanwhile (it then holds
            // the same history in its tail, flushed next time).
            if g.window_gen == generation {
                g.engines.window.flushed(&snap, &stored);
            }
        }
        {
            let mut q = self.queue(at);
            let n = q.logged.get_mut(EngineId::Window);
            *n = n.saturating_sub(logged);
        }
        self.env.metrics.checkpoint_stored(meta.bytes);
        self.env
            .metrics
            .last_checkpoint_store_us
            .store(began.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.retain(
            at,
            EngineId::Window,
            Covers {
                sequence: snap.sequence(),
                late: snap.late_len(),
            },
            version,
        );
        // The id index stores what it gathered on the checkpointer thread,
        // after this answer (its merges can be long).
        self.wake_checkpointer("the id index stays in memory");
        Ok(Some(meta))
    }

    /// Stores a snapshot's tail as history segments, one at a time (only
    /// one segment's text is held at once); the segments without their
    /// text, with their ids.
    fn store_tail<L: Before<order::Writer>>(
        &self,
        at: &mut Held<L>,
        snap: &crate::engine::Snapshot,
    ) -> Result<Vec<(NewSegment, SegId)>, ServiceError> {
        let mut stored: Vec<(NewSegment, SegId)> = Vec::new();
        snap.each_tail_segment(SEGMENT_ITEMS, &mut |mut seg| {
            let id = self
                .writer(at)
                .put_segment_as(
                    seg.kind,
                    seg.count,
                    &seg.text,
                    &seg.ends,
                    &seg.chunks,
                    false,
                )
                .map_err(|e| {
                    Metrics::inc(&self.env.metrics.storage_failures, 1);
                    ServiceError::from(e)
                })?;
            self.wal_written(seg.text.len());
            seg.text = Vec::new();
            seg.ends = Vec::new();
            stored.push((seg, id));
            Ok::<(), ServiceError>(())
        })?;
        Ok(stored)
    }

    /// Wakes the checkpointer thread: an automatic checkpoint, a flush of
    /// the history or of the id index is due. A full channel means it is
    /// already woken; `lost` says what stays undone should the thread have
    /// ended.
    pub(super) fn wake_checkpointer(&self, lost: &str) {
        if let Err(std::sync::mpsc::TrySendError::Disconnected(())) =
            self.checkpoints.checkpoint_due.try_send(())
        {
            tracing::error!("the checkpoint thread has ended: {lost} (restart the service)");
        }
    }

    /// Stores the id index's new entries (every sources segment up to
    /// `mark` is indexed) once enough are in memory, or always with
    /// `force`; lends the writer one short transaction at a time. A
    /// failure is logged: the entries stay in memory, and a restart adds
    /// them again from the segments.
    pub(super) fn flush_ids<L: Before<order::Writer>>(
        &self,
        at: &mut Held<L>,
        mark: SegId,
        force: bool,
    ) {
        let h = &self.setup.history;
        if !force && h.unflushed_ids() < IDS_FLUSH {
            return;
        }
        let mut with_writer =
            |f: &mut dyn FnMut(&mut crate::store::Writer) -> crate::store::Result<()>| {
                f(&mut self.writer(at))
            };
        if let Err(e) = h.flush_ids(mark, &mut with_writer) {
            Metrics::inc(&self.env.metrics.storage_failures, 1);
            tracing::warn!(error = %e, "storing the id index failed (kept in memory; rebuilt from the history at a restart)");
        }
        if h.ids_merge_due() {
            // The merge thread's channel holds one signal: a full one
            // means a merge round is due already.
            if let Err(std::sync::mpsc::TrySendError::Disconnected(())) =
                self.checkpoints.merge_due.try_send(())
            {
                tracing::error!("the id index's merge thread has ended: its runs are not merged");
            }
        }
    }

    /// Called by the id index's merge thread: merges its runs until none
    /// is due, lending the writer one short transaction at a time. The
    /// checkpointer goes on meanwhile: automatic checkpoints keep their
    /// cadence and flush the id index's new entries between the merge's
    /// transactions, so a crash during a long merge re-adds at most the
    /// entries since the last flush. A failure is logged (the runs stay
    /// as they were; the next flush deletes what it left).
    pub(super) fn merge_ids(&self) {
        let at = &mut Held::entry();
        let h = &self.setup.history;
        let m = &self.env.metrics;
        if !h.ids_merge_due() {
            return;
        }
        let mut with_writer =
            |f: &mut dyn FnMut(&mut crate::store::Writer) -> crate::store::Result<()>| {
                f(&mut self.writer(at))
            };
        // Merges until none is due (or does nothing before the first
        // flush after the open has deleted what a crash left: that flush
        // signals again).
        let done = h.merge_ids(&mut with_writer);
        match done {
            Ok(()) => Metrics::inc(&m.id_index_merges, 1),
            Err(e) => {
                Metrics::inc(&m.storage_failures, 1);
                tracing::warn!(error = %e, "merging the id index's runs failed (they stay as they were)");
            }
        }
    }

    /// `DELETE /checkpoints/{id}`.
    pub fn delete_checkpoint(&self, engine: EngineId, id: i64) -> Result<(), ServiceError> {
        let at = &mut Held::entry();
        let mut slot = self.checkpointing(at);
        let found = self
            .writer(slot.held())
            .delete_checkpoint(engine, id, &|| self.env.faults.deleting())
            .inspect_err(|_| Metrics::inc(&self.env.metrics.storage_failures, 1))?;
        if found {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "no checkpoint with id {id}"
            )))
        }
    }

    /// The logged commands after which an engine's automatic checkpoint is
    /// due: `--checkpoint-every`, and for the window engine with 1,024 live
    /// buckets or more at least four per live bucket. A checkpoint writes
    /// the live state, so with calls of one event each (webhooks) and a
    /// large state, a fixed count would make checkpoints cost per call what
    /// the state costs; this way a call pays at most about a quarter of a
    /// live bucket's worth of checkpoint, and the log since the last
    /// checkpoint (what a restart replays) stays within four calls per
    /// live bucket.
    pub(super) fn auto_threshold(&self, engine: EngineId) -> u64 {
        let every = self.checkpoints.checkpoint_every;
        match engine {
            EngineId::Window => {
                let live = self.engines_lock.live.load(Ordering::Relaxed);
                if live >= AUTO_LIVE_FROM {
                    every.max(live.saturating_mul(CALLS_PER_LIVE))
                } else {
                    every
                }
            }
            EngineId::Patterns => every,
        }
    }

    /// Called by the checkpointer thread when an engine has logged
    /// `checkpoint_every` commands.
    ///
    /// Only the snapshot is taken under the engines lock (settled, so the
    /// snapshot is exactly the logged commands up to the last id); the
    /// serialization, the hashing of the new history and the digest run
    /// outside it, so ingestion does not stall for the whole checkpoint.
    /// The window checkpoint stores only its new history and live state
    /// ([`Service::window_checkpoint`]), the pattern one its envelope in
    /// pieces ([`Service::store_in_pieces`]), with the commands it covers
    /// removed, unless a restore or another checkpoint changed the recovery
    /// base meanwhile (then it is dropped: the base is newer, and the log
    /// still covers everything after it).
    pub(super) fn automatic_checkpoint(&self) {
        let every = self.checkpoints.checkpoint_every;
        let threshold = self.auto_threshold(EngineId::Window);
        let due = |logged: u64, tail: u64| (every > 0 && logged >= threshold) || tail >= TAIL_MAX;
        let at = &mut Held::entry();
        if let Err(e) = self.window_checkpoint(at, Origin::Auto, due) {
            tracing::warn!(error = %e, "automatic checkpoint failed (the command log still covers it)");
        }
        {
            let mut slot = self.checkpointing(at);
            self.automatic_checkpoint_of(slot.held(), EngineId::Patterns);
        }
        self.flush_ids(at, self.setup.history.last_segment(), false);
    }

    /// An automatic checkpoint of `engine` (the pattern engine: the window
    /// engine's is [`Service::window_checkpoint`]), taken in the checkpoint
    /// slot (`at`) like every store of a checkpoint.
    fn automatic_checkpoint_of(&self, at: &mut Held<order::Checkpointing>, engine: EngineId) {
        let (captured, covers, up_to, logged, version) = {
            let Ok(mut g) = self.lock_settled(at) else {
                return;
            };
            let logged = self.queue(g.held()).logged.get(engine);
            if self.checkpoints.checkpoint_every == 0 || logged < self.checkpoints.checkpoint_every
            {
                return;
            }
            let up_to = match self.writer(g.held()).last_command_id(engine) {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(error = %e, "automatic checkpoint skipped");
                    return;
                }
            };
            let version = self.commits.base_version(engine).load(Ordering::SeqCst);
            let Some((captured, covers)) = g.capture(engine) else {
                return;
            };
            (captured, covers, up_to, logged, version)
        };
        let envelope = match captured.envelope() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "automatic checkpoint failed (the command log still covers it)");
                return;
            }
        };
        match self.store_in_pieces(at, engine, &envelope, covers.sequence, up_to, version) {
            Ok(Some((meta, version))) => {
                let mut q = self.queue(at);
                let n = q.logged.get_mut(engine);
                *n = n.saturating_sub(logged);
                drop(q);
                self.env.metrics.checkpoint_stored(meta.bytes);
                self.retain(at, engine, covers, version);
            }
            // a restore or another checkpoint moved the base meanwhile
            Ok(None) => {}
            Err(e) => {
                Metrics::inc(&self.env.metrics.storage_failures, 1);
                tracing::warn!(error = %e, "automatic checkpoint failed (the command log still covers it)");
            }
        }
    }

    /// Stores an automatic checkpoint: its envelope in pieces, each in a
    /// short transaction of its own (the writer is released between pieces,
    /// so group commits interleave instead of waiting behind a write of tens
    /// of MB), then the transaction that links them, makes the checkpoint the
    /// recovery base and removes the engine's commands up to `up_to`, with
    /// the base version it set. `None` when the base moved since `version`
    /// (the pieces are dropped).
    fn store_in_pieces<L: Before<order::Writer>>(
        &self,
        at: &mut Held<L>,
        engine: EngineId,
        envelope: &[u8],
        sequence: u64,
        up_to: i64,
        version: u64,
    ) -> crate::store::Result<Option<(CheckpointMeta, u64)>> {
        let mut staging = None;
        for piece in envelope.chunks(crate::store::PIECE_BYTES) {
            staging = Some(self.writer(at).stage_piece(staging, piece)?);
            self.wal_written(piece.len());
        }
        let Some(staging) = staging else {
            return Ok(None);
        };
        self.env.faults.checkpoint_pieces_written();
        let digest = envelope_digest(engine, envelope);
        let mut w = self.writer(at);
        if self.commits.base_version(engine).load(Ordering::SeqCst) != version {
            w.drop_pieces(staging)?;
            return Ok(None);
        }
        let version = self
            .commits
            .base_version(engine)
            .fetch_add(1, Ordering::SeqCst)
            + 1;
        w.link_checkpoint(engine, staging, &digest, envelope.len(), sequence, up_to)
            .map(|meta| Some((meta, version)))
    }

    /// The final checkpoints of a graceful shutdown: one per engine that
    /// logged commands since its recovery base (so a restart replays
    /// nothing).
    pub fn final_checkpoint(&self) -> Result<Vec<CheckpointMeta>, ServiceError> {
        let at = &mut Held::entry();
        let mut out = Vec::new();
        if let Some(meta) = self.window_checkpoint(at, Origin::Auto, |logged, _| logged > 0)? {
            out.push(meta);
        }
        let last = self.setup.history.last_segment();
        self.flush_ids(at, last, true);
        let mut slot = self.checkpointing(at);
        let mut g = self.lock_settled(slot.held())?;
        let (inner, at) = g.parts();
        if self.queue(at).logged.get(EngineId::Patterns) > 0 {
            out.push(self.checkpoint_locked(inner, at, EngineId::Patterns, Origin::Auto)?);
        }
        Ok(out)
    }

    /// An engine's stored checkpoints, newest first (each with the digest
    /// it was stored with: nothing is computed).
    pub fn checkpoints(&self, engine: EngineId) -> Result<Vec<CheckpointMeta>, ServiceError> {
        self.with_reader(|r| r.checkpoints(engine))
    }

    /// A stored checkpoint's envelope, to serve.
    pub fn checkpoint_download(&self, engine: EngineId, id: i64) -> Result<Download, ServiceError> {
        let missing = || ServiceError::NotFound(format!("no checkpoint with id {id}"));
        let (meta, incremental) = self
            .with_reader(|r| r.checkpoint_info(engine, id))?
            .ok_or_else(missing)?;
        if incremental {
            return Ok(Download::Window(id, meta.digest));
        }
        self.with_reader(|r| r.checkpoint(engine, id))?
            .map(|bytes| Download::Bytes(bytes, meta.digest))
            .ok_or_else(missing)
    }

    /// A stored checkpoint's envelope bytes, whole in memory (restore by
    /// id of an envelope stored whole; tests).
    pub fn checkpoint_bytes(&self, engine: EngineId, id: i64) -> Result<Vec<u8>, ServiceError> {
        match self.checkpoint_download(engine, id)? {
            Download::Bytes(b, _) => Ok(b),
            Download::Window(id, _) => {
                let mut out = Vec::new();
                self.send_window_envelope(id, &mut |_| Ok(()), &mut out)?;
                Ok(out)
            }
        }
    }

    /// Writes window checkpoint `id`'s envelope to `out`, in one read
    /// snapshot on a connection of its own (a deletion meanwhile does not
    /// take its segments away); `start(bytes)` is called first, with its
    /// length, before anything is written (`Err` from it stops). The
    /// history is checked as it is read (block checksums, chunk records),
    /// and the digest of what was written against the stored one before
    /// the envelope's last bytes: a damaged history ends the envelope
    /// short, never with other content.
    pub fn send_window_envelope(
        &self,
        id: i64,
        start: &mut dyn FnMut(u64) -> Result<(), StoreFault>,
        out: &mut dyn Out,
    ) -> Result<(), ServiceError> {
        use crate::engine::checkpoint::{ENVELOPE_MIDDLE, ENVELOPE_PREFIX, ENVELOPE_SUFFIX};
        let parts = self.setup.pipeline.partitions().len();
        let reader = Reader::open(&self.env.db)?;
        reader
            .snapshot(|r| {
                let fail = |e: StoreFault| crate::store::Error::Corrupt(e.0);
                let row = r.window_checkpoint(id, parts)?.ok_or_else(|| {
                    crate::store::Error::Corrupt(format!("no checkpoint {id}"))
                })?;
                start(row.bytes).map_err(fail)?;
                let live = LiveParts::decode(&row.state.live)
                    .map_err(|e| crate::store::Error::Corrupt(format!("checkpoint {id}: {e}")))?;
                let history = StoredParts::new(r, &row.state.flushed);
                out.put(ENVELOPE_PREFIX).map_err(fail)?;
                out.put(row.digest.as_bytes()).map_err(fail)?;
                out.put(ENVELOPE_MIDDLE).map_err(fail)?;
                crate::engine::checkpoint::write_state(&live, &history, out).map_err(fail)?;
                let (sources, late) = history.chains().ok_or_else(|| {
                    crate::store::Error::Corrupt(format!("checkpoint {id}: a list was not read"))
                })?;
                let digest = crate::engine::checkpoint::chain::digest(&live, &sources, &late);
                if digest != row.digest {
                    return Err(crate::store::Error::Corrupt(format!(
                        "checkpoint {id}: its stored digest is {}, its history and state hash to {digest}",
                        row.digest
                    )));
                }
                out.put(ENVELOPE_SUFFIX).map_err(fail)
            })
            .map_err(ServiceError::from)
    }
}
