//! Checkpoints of the engines' state: on request (`POST /checkpoints`),
//! automatic (every `checkpoint_every` logged commands of an engine, taken
//! from a snapshot outside the processor lock and stored in pieces), and
//! the final one of a graceful shutdown; their retention.
//!
//! (Not to be confused with SQLite's WAL checkpoints, which copy the
//! write-ahead log back into the database file: that is the store's
//! `WalCopier`.)

use std::sync::atomic::Ordering;

use crate::store::{CheckpointMeta, EngineId, Origin};

use super::{Inner, Metrics, Service, ServiceError};

/// An engine's state captured for a checkpoint.
pub(super) enum Snapshot {
    /// The window engine's frozen copy (serialized outside the lock).
    Window(Box<crate::engine::Snapshot>),
    /// The pattern engine's envelope, written under the lock.
    Patterns(Vec<u8>),
}

impl Snapshot {
    /// The canonical envelope (serialized outside the processor lock).
    fn envelope(self) -> Result<Vec<u8>, ServiceError> {
        match self {
            Snapshot::Window(s) => s.checkpoint().map_err(ServiceError::Rejected),
            Snapshot::Patterns(e) => Ok(e),
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
    fn snapshot(&self, engine: EngineId) -> Option<(Snapshot, Covers)> {
        match engine {
            EngineId::Window => {
                let p = &self.engines.window;
                Some((
                    Snapshot::Window(Box::new(p.snapshot())),
                    Covers {
                        sequence: p.sequence(),
                        late: p.late_len(),
                    },
                ))
            }
            EngineId::Patterns => {
                let (envelope, covers) = self.envelope(engine).ok()?;
                Some((Snapshot::Patterns(envelope), covers))
            }
        }
    }
}

impl Service {
    fn checkpoint_locked(
        &self,
        inner: &mut Inner,
        engine: EngineId,
        origin: Origin,
    ) -> Result<CheckpointMeta, ServiceError> {
        let (envelope, covers) = inner.envelope(engine)?;
        let (meta, version) = {
            let mut w = self.writer();
            let version = self.base_version.fetch_add(1, Ordering::SeqCst) + 1;
            (
                w.checkpoint(engine, &envelope, covers.sequence, origin),
                version,
            )
        };
        let meta = meta.inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        *self.queue().logged.get_mut(engine) = 0;
        self.metrics.checkpoint_stored(meta.bytes);
        self.retain(engine, covers, version);
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
    fn retain(&self, engine: EngineId, covers: Covers, version: u64) {
        let r = self.retention;
        let mut w = self.writer();
        if let Err(e) = w.prune_checkpoints(engine, r.checkpoints.max(1)) {
            tracing::warn!(error = %e, "pruning old automatic checkpoints failed");
        }
        if engine != EngineId::Window || self.base_version.load(Ordering::SeqCst) != version {
            return;
        }
        let heads = *self.heads.borrow();
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

    /// `POST /checkpoints`: stores a checkpoint of an engine's current state.
    pub fn create_checkpoint(&self, engine: EngineId) -> Result<CheckpointMeta, ServiceError> {
        let mut g = self.lock_settled()?;
        self.checkpoint_locked(&mut g, engine, Origin::User)
    }

    /// `DELETE /checkpoints/{id}`.
    pub fn delete_checkpoint(&self, engine: EngineId, id: i64) -> Result<(), ServiceError> {
        let found = self
            .writer()
            .delete_checkpoint(engine, id)
            .inspect_err(|_| Metrics::inc(&self.metrics.storage_failures, 1))?;
        if found {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "no checkpoint with id {id}"
            )))
        }
    }

    /// Called by the checkpointer thread when an engine has logged
    /// `checkpoint_every` commands.
    ///
    /// Only the snapshot is taken under the processor lock (settled, so the
    /// snapshot is exactly the logged commands up to the last id); the
    /// serialization and checksum run outside it, so ingestion does not stall
    /// for the whole checkpoint. The checkpoint is then stored (in pieces,
    /// see [`Service::store_in_pieces`]) with the commands it covers
    /// removed, unless a restore or another checkpoint changed the recovery
    /// base meanwhile (then it is dropped: the base is newer, and the log
    /// still covers everything after it).
    pub(super) fn automatic_checkpoint(&self) {
        for engine in [EngineId::Window, EngineId::Patterns] {
            self.automatic_checkpoint_of(engine);
        }
    }

    fn automatic_checkpoint_of(&self, engine: EngineId) {
        let (snapshot, covers, up_to, logged, version) = {
            let Ok(g) = self.lock_settled() else {
                return;
            };
            let logged = self.queue().logged.get(engine);
            if self.checkpoint_every == 0 || logged < self.checkpoint_every {
                return;
            }
            let up_to = match self.writer().last_command_id(engine) {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(error = %e, "automatic checkpoint skipped");
                    return;
                }
            };
            let version = self.base_version.load(Ordering::SeqCst);
            let Some((snapshot, covers)) = g.snapshot(engine) else {
                return;
            };
            (snapshot, covers, up_to, logged, version)
        };
        let envelope = match snapshot.envelope() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "automatic checkpoint failed (the command log still covers it)");
                return;
            }
        };
        match self.store_in_pieces(engine, &envelope, covers.sequence, up_to, version) {
            Ok(Some((meta, version))) => {
                let mut q = self.queue();
                let n = q.logged.get_mut(engine);
                *n = n.saturating_sub(logged);
                drop(q);
                self.metrics.checkpoint_stored(meta.bytes);
                self.retain(engine, covers, version);
            }
            // a restore or another checkpoint moved the base meanwhile
            Ok(None) => {}
            Err(e) => {
                Metrics::inc(&self.metrics.storage_failures, 1);
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
    fn store_in_pieces(
        &self,
        engine: EngineId,
        envelope: &[u8],
        sequence: u64,
        up_to: i64,
        version: u64,
    ) -> crate::store::Result<Option<(CheckpointMeta, u64)>> {
        let mut staging = None;
        for piece in envelope.chunks(crate::store::PIECE_BYTES) {
            staging = Some(self.writer().stage_piece(staging, piece)?);
            self.wal_written(piece.len());
        }
        let Some(staging) = staging else {
            return Ok(None);
        };
        self.faults.checkpoint_pieces_written();
        let sha256 = crate::store::sha256_hex(envelope);
        let mut w = self.writer();
        if self.base_version.load(Ordering::SeqCst) != version {
            w.drop_pieces(staging)?;
            return Ok(None);
        }
        let version = self.base_version.fetch_add(1, Ordering::SeqCst) + 1;
        w.link_checkpoint(engine, staging, sha256, envelope.len(), sequence, up_to)
            .map(|meta| Some((meta, version)))
    }

    /// The final checkpoints of a graceful shutdown: one per engine that
    /// logged commands since its recovery base (so a restart replays
    /// nothing).
    pub fn final_checkpoint(&self) -> Result<Vec<CheckpointMeta>, ServiceError> {
        let mut g = self.lock_settled()?;
        let mut out = Vec::new();
        for engine in [EngineId::Window, EngineId::Patterns] {
            if self.queue().logged.get(engine) > 0 {
                out.push(self.checkpoint_locked(&mut g, engine, Origin::Auto)?);
            }
        }
        Ok(out)
    }

    /// An engine's stored checkpoints, newest first.
    pub fn checkpoints(&self, engine: EngineId) -> Result<Vec<CheckpointMeta>, ServiceError> {
        self.with_reader(|r| r.checkpoints(engine))
    }

    /// A stored checkpoint's envelope bytes.
    pub fn checkpoint_bytes(&self, engine: EngineId, id: i64) -> Result<Vec<u8>, ServiceError> {
        self.with_reader(|r| r.checkpoint(engine, id))?
            .ok_or_else(|| ServiceError::NotFound(format!("no checkpoint with id {id}")))
    }
}
