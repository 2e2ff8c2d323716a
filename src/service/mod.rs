//! The service: the engines, their database, and the notifications of new
//! output. Public methods are the API verbs; they are synchronous (they take
//! a std `Mutex` and may wait for an fsync), so the api calls them inside
//! `spawn_blocking`.
//!
//! One write path serves both engines (the window engine and the pattern
//! engine): one processor lock taken in arrival order, one command log, one
//! group commit, one recovery.
//!
//! - `cmd`: the logged commands, one type and file per command: their
//!   engine, kind, log body, decoding and application (shared by the live
//!   path and recovery, which are generic over them).
//! - `apply`: the window engine's verbs (lock → engine → queue).
//! - `commit`: the commit queue (encode outside the lock; group commit: one
//!   SQLite transaction for every queued call → notify → answer).
//! - `checkpoint`: checkpoints on request, automatic and at shutdown, and
//!   their retention. `restore`: restores, epochs.
//! - [`parse`]: the `POST /events` body parser (api and recovery).
//! - `recover`: the engines from the store (recovery bases + replay of the
//!   command log), at start and after a storage failure.
//! - [`metrics`]: counters and histograms.
//! - [`error`]: [`ServiceError`] and [`StartError`].
//! - [`faults`]: the chaos suite's fault hooks (`STREAMFORGE_FAULTS`, never
//!   set in production): a crash after a commit or inside an automatic
//!   checkpoint, a failing commit.
//!
//! This module knows no HTTP: it uses the engines, the store, `std::sync` and
//! `tokio::sync::watch` only.

mod apply;
mod checkpoint;
mod cmd;
mod commit;
mod derived;
pub mod error;
pub(crate) mod fastparse;
pub mod faults;
mod idempotency;
pub mod ingest_thread;
pub mod metrics;
mod order;
pub mod parse;
mod pattern_diagnostics;
mod patterns;
mod recover;
mod restore;
mod restore_stream;
mod sinks;
pub mod strategy;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, Weak};

use tokio::sync::watch;

use crate::engine::{PartitionStatus, Pipeline, WindowResult};
use crate::store::{self, EngineId, Page, PageRefusal, Reader, Stream, WalCopier, Writer};

use cmd::Engines;
use commit::CommitQueue;
use order::{Before, Held, Locked};

pub use apply::{IngestAnswer, Reply, TickAnswer};
pub use checkpoint::Download;
pub use error::{PatternRejection, ServiceError, StartError};
pub use idempotency::{check_key, Keyed, KeyedRequest};
pub use metrics::{Gauge, Metrics};
pub use patterns::{AdvanceAnswer, PatternsRestored, PatternsStatus, PushAnswer};
pub use restore::{RestoreOutcome, RestoreSource};

/// Sequences the readers wait on, published after every commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heads {
    /// Latest change sequence.
    pub changes: u64,
    /// Latest late-record sequence.
    pub late: u64,
    /// Latest pattern output sequence.
    pub patterns: u64,
    /// The window engine's durable epoch: its restores so far (open
    /// streams rewind on it).
    pub epoch: u64,
    /// The pattern engine's epoch.
    pub patterns_epoch: u64,
    /// The window engine's global watermark after the last committed call
    /// (`changes` sinks carry it).
    pub watermark: Option<i64>,
    /// Set when the server begins a graceful shutdown.
    pub shutdown: bool,
}

impl Heads {
    /// Whether `now` has other output heads.
    fn output_differs(&self, now: &Heads) -> bool {
        (self.changes, self.late, self.patterns, self.watermark)
            != (now.changes, now.late, now.patterns, now.watermark)
    }

    /// Takes the output heads of `now`.
    fn take_output(&mut self, now: &Heads) {
        self.changes = now.changes;
        self.late = now.late;
        self.patterns = now.patterns;
        self.watermark = now.watermark;
    }
}

/// What the engines are set up with (fixed for the database's lifetime).
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    /// The window engine's pipeline.
    pub pipeline: Pipeline,
    /// The document a fresh pattern engine starts with (the command log
    /// replays the changes made after it; the one in force is the engine's).
    pub patterns: crate::patterns::Document,
    /// The limits given at start with `--patterns` (its patterns being the
    /// database's): in force instead of the current document's until a
    /// `PUT /patterns` puts a document, with its own limits, in force.
    pub limits: Arc<Mutex<Option<crate::patterns::Limits>>>,
    /// The window engine's key-hash shards and the threads they run on
    /// (one pool for the service's life, lent to every processor).
    pub shards: usize,
    pub shard_pool: Option<Arc<dyn crate::engine::Executor>>,
    /// Where the window engine's flushed history lives.
    pub history: Arc<store::HistoryDb>,
    /// The derived watermarks: strategies and when each partition last
    /// had an event.
    pub derived: Arc<derived::Derived>,
}

impl Setup {
    /// `p` split into the service's shards (a fresh, recovered or restored
    /// processor; which shard holds what is never observable).
    pub fn sharded(&self, mut p: crate::engine::Processor) -> crate::engine::Processor {
        if let Err(e) = p.set_shards(self.shards, self.shard_pool.clone()) {
            unreachable!("the shard count was checked at start: {e}");
        }
        p
    }
}

/// Each engine's epoch (restores so far).
#[derive(Debug, Clone, Copy, Default)]
struct Epochs {
    window: u64,
    patterns: u64,
}

/// `GET /status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Global watermark.
    pub watermark: Option<i64>,
    /// Latest change sequence.
    pub sequence: u64,
    /// Number of late records.
    pub late: u64,
    /// Number of live buckets.
    pub live_buckets: usize,
    /// Restores so far.
    pub epoch: u64,
    /// Every partition, sorted by name.
    pub partitions: Vec<PartitionStatus>,
}

/// What recovery at start did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recovery {
    /// Logged calls replayed after the recovery base.
    pub replayed: u64,
    /// Wall time from opening the database to the recovered processor.
    pub seconds: f64,
}

/// `GET /results`: the visible rows of one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Results {
    /// Visible rows in address order (filtered).
    pub rows: Vec<WindowResult>,
    /// Global watermark.
    pub watermark: Option<i64>,
    /// The change sequence of the state shown.
    pub sequence: u64,
    /// Its epoch.
    pub epoch: u64,
}

/// Storage retention (see `apply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Automatic checkpoints kept (the newest ones; at least 1).
    pub checkpoints: usize,
    /// Changes kept behind the head, at least (0: keep every change).
    pub changes: u64,
    /// Late records kept behind the head, at least (0: keep them all).
    pub late: u64,
    /// Idempotency keys of pattern calls kept (the newest; 0: every key).
    pub keys: u64,
}

/// Idempotency keys kept by default.
pub const DEFAULT_KEYS_KEPT: u64 = 100_000;

impl Default for Retention {
    fn default() -> Self {
        Retention {
            checkpoints: 3,
            changes: 0,
            late: 0,
            keys: DEFAULT_KEYS_KEPT,
        }
    }
}

/// How to start the service.
#[derive(Debug, Clone)]
pub struct Options {
    /// The database file.
    pub db: PathBuf,
    /// The pipeline for a fresh database.
    pub pipeline: Pipeline,
    /// Whether `pipeline` was given explicitly (then a database holding a
    /// non-equivalent pipeline is refused; otherwise the stored one is used).
    pub pipeline_explicit: bool,
    /// The pattern document for a database that has none.
    pub patterns: crate::patterns::Document,
    /// Whether `patterns` was given explicitly (then a database whose
    /// current document holds other patterns is refused, unless
    /// `prefer_patterns` says which wins; otherwise the stored ones are used).
    pub patterns_explicit: bool,
    /// When `patterns` was given and the database's current document holds
    /// other patterns: which one wins (none: refuse to start).
    pub prefer_patterns: Option<PreferPatterns>,
    /// Logged commands between automatic checkpoints (0: never).
    pub checkpoint_every: u64,
    /// What is kept of old checkpoints and output pages.
    pub retention: Retention,
    /// Where to count.
    pub metrics: Arc<Metrics>,
    /// Key-hash shards of the window engine (1-64), each on a thread.
    pub shards: usize,
    /// Partitions whose watermark derives from their events (a pipeline's
    /// `"watermarks"`, docs/webhooks.md).
    pub strategies: std::collections::BTreeMap<String, strategy::Strategy>,
}

/// The pattern documents a start resolves: the one a fresh engine starts
/// with, one to put in force once running (`--prefer-patterns file`), and
/// the limits given with `--patterns` for the database's own patterns.
type ResolvedPatterns = (
    crate::patterns::Document,
    Option<crate::patterns::Document>,
    Option<crate::patterns::Limits>,
);

/// Which document wins when `--patterns` differs from the database's
/// current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreferPatterns {
    /// The file: put in force at start as a logged change (as `PUT
    /// /patterns`).
    File,
    /// The database's current document (the file is ignored).
    Database,
}

/// What the processor lock guards (see `apply`): the engines, stepped by
/// every call in ticket order.
struct Inner {
    engines: Engines,
    /// The last ticket given to an applied call.
    ticket: u64,
    /// The durable epochs; changed only by a restore, under this lock, so
    /// they always belong to `engines`.
    epochs: Epochs,
    /// The engines may not match the store (a storage failure whose
    /// rebuild failed, or a panic in the critical section): rebuild first.
    broken: bool,
    /// Counts the window engines put in place (a rebuild, a restore): a
    /// checkpoint hands its flushed history back only to the engine it
    /// took its snapshot of.
    window_gen: u64,
}

impl Inner {
    /// The output heads of the engines now.
    fn heads(&self) -> Heads {
        let w = &self.engines.window;
        Heads {
            changes: w.sequence(),
            late: w.late_len(),
            patterns: self.engines.patterns.sequence(),
            epoch: self.epochs.window,
            patterns_epoch: self.epochs.patterns,
            watermark: w.watermark(),
            shutdown: false,
        }
    }
}

/// The service (shared as `Arc<Service>`), by job: the processor lock and what guards it, the commit
/// path, the output readers wait on, the checkpoint policy, the setup fixed
/// for the database's life, and its environment.
///
/// Lock order: `checkpoints.checkpointing`, a turn (of `processor.turns`),
/// `processor.inner`, `commits.queue`, `commits.writer`. The compiler keeps
/// it: each is taken with a token of the level before it (see `order`).
pub struct Service {
    processor: ProcessorLock,
    commits: Commits,
    output: OutputHeads,
    checkpoints: CheckpointPolicy,
    setup: Setup,
    env: Environment,
}

/// The engines under the one processor lock.
struct ProcessorLock {
    /// The engines. A std `Mutex`, not a tokio one: the critical section
    /// is synchronous, it is never held across an `.await`, and callers run
    /// it in `spawn_blocking` (mini-redis `db.rs`).
    inner: Mutex<Inner>,
    /// Mutating calls take the processor lock in arrival order: with std's
    /// unfair `Mutex`, concurrent producers were served unevenly (measured:
    /// +10 % events/s with free-running bench clients, +4 % aligned).
    turns: Turnstile,
    /// History the window engine holds in memory, as of the last call
    /// (deliveries and late records): its automatic flush is due past
    /// `checkpoint::TAIL_MAX`.
    tail: std::sync::atomic::AtomicU64,
    /// The window engine's live buckets, as of the last call: how much an
    /// automatic checkpoint writes (see `auto_threshold`).
    live: std::sync::atomic::AtomicU64,
    /// Cleared when the engines cannot be rebuilt from the store.
    healthy: AtomicBool,
}

/// The commit path: the queue of applied calls and the writing connection.
struct Commits {
    /// The commit queue, and its condition (a commit finished, a call was
    /// encoded).
    queue: Mutex<CommitQueue>,
    committed: Condvar,
    /// The writing connection: used by the commit leader, and by recovery,
    /// checkpoints and restores once everything is committed.
    writer: Mutex<Writer>,
    /// Copies the WAL into the database in the background; poked every few
    /// MB committed.
    wal: WalCopier,
    wal_bytes: std::sync::atomic::AtomicU64,
    /// Per engine, bumped (under the writer lock) whenever that engine's
    /// recovery base changes: a checkpoint or a restore of it. The
    /// automatic checkpointer, which serializes outside the processor
    /// lock, stores its checkpoint only if no other base change of the
    /// same engine happened since its snapshot (the other engine's
    /// checkpoints and restores do not concern it).
    base_versions: [std::sync::atomic::AtomicU64; 2],
    /// Idempotency keys between their lookup and their commit.
    keys: idempotency::InFlight,
}

impl Commits {
    /// The base version of `engine` (see `base_versions`).
    fn base_version(&self, engine: EngineId) -> &std::sync::atomic::AtomicU64 {
        match engine {
            EngineId::Window => &self.base_versions[0],
            EngineId::Patterns => &self.base_versions[1],
        }
    }
}

/// What readers wait on and read with.
struct OutputHeads {
    /// The heads after the last commit (long polls, SSE and sinks wait on it).
    heads: watch::Sender<Heads>,
    /// Pooled reading connections.
    readers: Mutex<Vec<Reader>>,
}

/// When checkpoints are taken and how many are kept.
struct CheckpointPolicy {
    checkpoint_every: u64,
    retention: Retention,
    /// Wakes the checkpoint thread.
    checkpoint_due: SyncSender<()>,
    /// Wakes the id index's merge thread.
    merge_due: SyncSender<()>,
    /// One window checkpoint (or restore, or deletion) at a time: each
    /// flushes or frees history the others must not see half done. Taken
    /// before the processor lock.
    checkpointing: Mutex<()>,
}

/// Where the service runs: its database, what its start did, its fault
/// hooks and metrics.
struct Environment {
    db: PathBuf,
    recovery: Recovery,
    /// The fault hooks (none unless `STREAMFORGE_FAULTS` is set).
    faults: faults::Faults,
    /// The service's metrics (shared with the api's request observer).
    metrics: Arc<Metrics>,
}

impl Service {
    /// Checks, before anything is served, that the database opens and
    /// holds a pipeline `opts` accepts (the quick part of [`Service::open`],
    /// so that a refused database never looks like a starting server).
    pub fn preflight(opts: &Options) -> Result<(), StartError> {
        let mut writer = Writer::open(&opts.db)
            .map_err(|e| StartError(format!("database {}: cannot open: {e}", opts.db.display())))?;
        Self::resolve_pipeline(&mut writer, opts)?;
        Self::resolve_patterns(&mut writer, opts).map(drop)
    }

    /// What the database serves: its pipeline and pattern document (see
    /// [`Service::resolve_pipeline`], [`Service::resolve_patterns`]), and a
    /// document to put in force once it runs.
    fn resolve(
        writer: &mut Writer,
        opts: &Options,
    ) -> Result<(Setup, Option<crate::patterns::Document>), StartError> {
        if !(1..=crate::engine::MAX_SHARDS).contains(&opts.shards) {
            return Err(StartError(format!(
                "shards must be between 1 and {}, not {}",
                crate::engine::MAX_SHARDS,
                opts.shards
            )));
        }
        let shard_pool = crate::shard_pool::executor(opts.shards).map_err(StartError)?;
        let history = store::HistoryDb::open(&opts.db).map_err(|e| {
            StartError(format!(
                "database {}: cannot open the event history: {e}",
                opts.db.display()
            ))
        })?;
        let (patterns, change, limits) = Self::resolve_patterns(writer, opts)?;
        Ok((
            Setup {
                pipeline: Self::resolve_pipeline(writer, opts)?,
                limits: Arc::new(Mutex::new(limits)),
                patterns,
                shards: opts.shards,
                shard_pool,
                history: Arc::new(history),
                derived: Arc::new(derived::Derived::new(&opts.strategies)),
            },
            change,
        ))
    }

    /// Logs the conditions of the pattern document that can never be true
    /// (`Document::warnings`): of the `--patterns` file when one is given
    /// (its paths are the file's; it has the same patterns), otherwise of
    /// the document in force after recovery (its paths are those of `GET
    /// /patterns`; a `PUT /patterns` may have changed it since the start).
    fn warn_patterns(in_force: &crate::patterns::Document, opts: &Options) {
        let shown = if opts.patterns_explicit {
            &opts.patterns
        } else {
            in_force
        };
        for w in shown.warnings() {
            tracing::warn!(pattern = %w.pattern, "patterns document: {w}");
        }
    }

    /// The pattern documents of the database: the one a fresh engine
    /// starts with (its own, or `opts.patterns` for a database that has
    /// none, then stored), and, when `--patterns` holds other patterns than
    /// the database's current document and the file wins, the file's, to
    /// put in force at start. The same patterns with other limits: the
    /// file's limits apply while this process runs (limits are policy, not
    /// state: see `Setup::limits`). Other patterns without a winner:
    /// refused.
    fn resolve_patterns(
        writer: &mut Writer,
        opts: &Options,
    ) -> Result<ResolvedPatterns, StartError> {
        use crate::patterns::Document;
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            StartError(format!("database {}: {what}: {e}", opts.db.display()))
        };
        let Some(json) = writer.patterns().map_err(|e| fail("cannot read", &e))? else {
            let json = String::from_utf8(opts.patterns.to_json())
                .map_err(|e| fail("cannot initialize the patterns", &e))?;
            writer
                .set_patterns(&json)
                .map_err(|e| fail("cannot initialize the patterns", &e))?;
            return Ok((opts.patterns.clone(), None, None));
        };
        let initial = Document::from_json(json.as_bytes())
            .map_err(|e| fail("the stored patterns are unreadable", &e))?;
        let current = match writer
            .current_patterns()
            .map_err(|e| fail("cannot read", &e))?
        {
            Some(c) if c != json => Document::from_json(c.as_bytes())
                .map_err(|e| fail("the current patterns are unreadable", &e))?,
            _ => initial.clone(),
        };
        if !opts.patterns_explicit {
            return Ok((initial, None, None));
        }
        if current.same_patterns(&opts.patterns) {
            return Ok((initial, None, Some(opts.patterns.limits())));
        }
        match opts.prefer_patterns {
            Some(PreferPatterns::File) => Ok((initial, Some(opts.patterns.clone()), None)),
            Some(PreferPatterns::Database) => Ok((initial, None, None)),
            None => Err(StartError(format!(
                "database {} holds other patterns ({}) than the --patterns given ({}); \
                 refusing to start (use another --db; or omit --patterns to resume the stored \
                 ones; or say which wins: --prefer-patterns file puts the file in force as a \
                 change, as PUT /patterns does, --prefer-patterns database keeps the database's)",
                opts.db.display(),
                current.pattern_names().join(", "),
                opts.patterns.pattern_names().join(", ")
            ))),
        }
    }

    /// The pipeline the database serves: its own, or `opts.pipeline` for a
    /// fresh one (then stored); a non-equivalent explicit one is refused.
    fn resolve_pipeline(writer: &mut Writer, opts: &Options) -> Result<Pipeline, StartError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            StartError(format!("database {}: {what}: {e}", opts.db.display()))
        };
        Ok(
            match writer.pipeline().map_err(|e| fail("cannot read", &e))? {
                None => {
                    writer
                        .set_pipeline(&opts.pipeline.to_json())
                        .map_err(|e| fail("cannot initialize", &e))?;
                    opts.pipeline.clone()
                }
                Some(json) => {
                    let stored = Pipeline::from_json(json.as_bytes())
                        .map_err(|e| fail("the stored pipeline is unreadable", &e))?;
                    if opts.pipeline_explicit && !stored.equivalent(&opts.pipeline) {
                        return Err(StartError(format!(
                            "database {} holds the pipeline {stored}, which is not equivalent to \
                         the --pipeline given ({}); refusing to start (use another --db, or \
                         omit --pipeline to resume the stored one)",
                            opts.db.display(),
                            opts.pipeline
                        )));
                    }
                    stored
                }
            },
        )
    }

    /// Opens the database, checks the pipeline and recovers the processor
    /// (recovery base + replay). Starts the automatic-checkpoint thread.
    pub fn open(opts: Options) -> Result<Arc<Service>, StartError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            StartError(format!("database {}: {what}: {e}", opts.db.display()))
        };
        // The service's one monotonic clock read: how long recovery took.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let faults = faults::Faults::from_env().map_err(StartError)?;
        if faults.any() {
            tracing::warn!(
                "{} is set: faults will be injected (the chaos suite's hooks)",
                faults::VAR
            );
        }
        let mut writer = Writer::open(&opts.db).map_err(|e| fail("cannot open", &e))?;
        writer.set_key_retention(opts.retention.keys);
        let (setup, change) = Self::resolve(&mut writer, &opts)?;
        let (engines, logged) =
            recover::replay(&writer, &opts.db, &setup).map_err(|e| fail("recovery failed", &e))?;
        Self::warn_patterns(engines.patterns.document(), &opts);
        let recovery = Recovery {
            replayed: logged.window + logged.patterns,
            seconds: started.elapsed().as_secs_f64(),
        };
        let epoch = |e| writer.epoch(e).map_err(|e| fail("cannot read", &e));
        let epochs = Epochs {
            window: epoch(EngineId::Window)?,
            patterns: epoch(EngineId::Patterns)?,
        };
        let inner = Inner {
            engines,
            ticket: 0,
            epochs,
            broken: false,
            window_gen: 0,
        };
        let heads = inner.heads();
        let reader = Reader::open(&opts.db).map_err(|e| fail("cannot open a reader", &e))?;
        let (tx, rx) = sync_channel::<()>(1);
        let (merge_tx, merge_rx) = sync_channel::<()>(1);
        let service = Arc::new(Service {
            processor: ProcessorLock {
                inner: Mutex::new(inner),
                turns: Turnstile::default(),
                tail: std::sync::atomic::AtomicU64::new(0),
                live: std::sync::atomic::AtomicU64::new(0),
                healthy: AtomicBool::new(true),
            },
            commits: Commits {
                queue: Mutex::new(CommitQueue::new(logged)),
                committed: Condvar::new(),
                writer: Mutex::new(writer),
                wal: WalCopier::start(&opts.db)
                    .map_err(|e| fail("cannot start the WAL copier", &e))?,
                wal_bytes: std::sync::atomic::AtomicU64::new(0),
                base_versions: Default::default(),
                keys: idempotency::InFlight::default(),
            },
            output: OutputHeads {
                heads: watch::Sender::new(heads),
                readers: Mutex::new(vec![reader]),
            },
            checkpoints: CheckpointPolicy {
                checkpoint_every: opts.checkpoint_every,
                retention: opts.retention,
                checkpoint_due: tx,
                merge_due: merge_tx,
                checkpointing: Mutex::new(()),
            },
            setup,
            env: Environment {
                db: opts.db.clone(),
                recovery,
                faults,
                metrics: opts.metrics.clone(),
            },
        });
        on_signal(&service, "checkpointer", rx, Service::automatic_checkpoint)
            .map_err(|e| fail("cannot start the checkpoint thread", &e))?;
        on_signal(&service, "id-merger", merge_rx, Service::merge_ids)
            .map_err(|e| fail("cannot start the id index's merge thread", &e))?;
        if let Some(doc) = change {
            // --prefer-patterns file: the file goes in force as a logged
            // change, in order before any call
            let c = service
                .put_patterns(doc)
                .map_err(|e| fail("cannot put the --patterns document in force", &e))?;
            tracing::warn!(
                kept = ?c.kept,
                started = ?c.started,
                removed = ?c.removed,
                "--prefer-patterns file: the --patterns document is in force (a logged change)"
            );
        }
        Ok(service)
    }

    /// Takes the processor lock. A poisoned lock (a panic inside the critical
    /// section) marks the state for a rebuild from the store.
    fn lock<'a, L: Before<order::Processor>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, Inner, order::Processor> {
        let guard = match self.processor.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                self.processor.inner.clear_poison();
                let mut g = poisoned.into_inner();
                g.broken = true;
                g
            }
        };
        Locked::new(guard, at)
    }

    /// Locks and makes sure the processor is not ahead of a failed commit
    /// (rebuilds it from the store after a storage failure or a panic).
    fn lock_consistent<'a, L: Before<order::Processor>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Result<Locked<'a, Inner, order::Processor>, ServiceError> {
        let mut g = self.lock(at);
        let (inner, at) = g.parts();
        if inner.broken || self.queue(at).poisoned {
            self.settle(inner, at)?;
        }
        Ok(g)
    }

    /// Locks once everything applied is committed: the processor equals
    /// the store (reads, checkpoints).
    fn lock_settled<'a, L: Before<order::Processor>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Result<Locked<'a, Inner, order::Processor>, ServiceError> {
        let mut g = self.lock(at);
        let (inner, at) = g.parts();
        self.settle(inner, at)?;
        Ok(g)
    }

    /// One window checkpoint, restore or deletion at a time (see the field).
    fn checkpointing<'a, L: Before<order::Checkpointing>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, (), order::Checkpointing> {
        let guard = (self.checkpoints.checkpointing.lock()).unwrap_or_else(|e| e.into_inner());
        Locked::new(guard, at)
    }

    fn queue<'a, L: Before<order::Queue>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, CommitQueue, order::Queue> {
        let guard = self.commits.queue.lock().unwrap_or_else(|e| e.into_inner());
        Locked::new(guard, at)
    }

    fn writer<'a, L: Before<order::Writer>>(
        &'a self,
        at: &'a mut Held<L>,
    ) -> Locked<'a, Writer, order::Writer> {
        let guard = self
            .commits
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Locked::new(guard, at)
    }

    /// Runs `f` on a pooled reading connection (never the processor lock).
    fn with_reader<R>(
        &self,
        f: impl FnOnce(&mut Reader) -> store::Result<R>,
    ) -> Result<R, ServiceError> {
        let pooled = self
            .output
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        let mut reader = match pooled {
            Some(r) => r,
            None => Reader::open(&self.env.db)?,
        };
        let out = f(&mut reader);
        let mut pool = self
            .output
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if pool.len() < 8 {
            pool.push(reader);
        }
        Ok(out?)
    }

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

    /// Whether the processor matches the store and storage works.
    pub fn is_ready(&self) -> bool {
        self.processor.healthy.load(Ordering::Relaxed)
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

    /// Gauges for `/metrics` (current state).
    pub fn metrics_text(&self) -> String {
        let heads = *self.output.heads.borrow();
        let at = &mut Held::entry();
        let logged = self.queue(at).logged;
        let g = self.lock(at);
        let mismatches = g.engines.patterns.type_mismatches();
        let p = &g.engines.window;
        let parts = p.partitions();
        let per = |f: &dyn Fn(&PartitionStatus) -> Option<f64>| -> Vec<_> {
            parts
                .iter()
                .filter_map(|s| f(s).map(|v| (Some(("partition", s.name.clone())), v)))
                .collect()
        };
        let gauges = [
            Gauge::one(
                "streamforge_sequence",
                "Latest change sequence.",
                heads.changes as f64,
            ),
            Gauge::one(
                "streamforge_late_records",
                "Late records in the late output.",
                heads.late as f64,
            ),
            Gauge::one(
                "streamforge_epoch",
                "Restores so far (the output streams' epoch).",
                g.epochs.window as f64,
            ),
            Gauge {
                name: "streamforge_watermark",
                help: "The global watermark (no sample until there is one).",
                samples: p
                    .watermark()
                    .map(|w| (None, w as f64))
                    .into_iter()
                    .collect(),
            },
            Gauge {
                name: "streamforge_partition_offset",
                help: "Consumed offset of each partition (-1: nothing consumed yet).",
                samples: per(&|s| Some(s.offset as f64)),
            },
            Gauge {
                name: "streamforge_partition_progress",
                help: "Reported watermark progress of each partition (no sample until it reports).",
                samples: per(&|s| s.progress.map(|v| v as f64)),
            },
            Gauge {
                name: "streamforge_partition_idle",
                help: "1 when the partition is marked idle (it then holds no watermark back).",
                samples: per(&|s| Some(f64::from(u8::from(s.idle)))),
            },
            Gauge::one(
                "streamforge_live_buckets",
                "Live buckets.",
                p.live_buckets() as f64,
            ),
            Gauge::one(
                "streamforge_history_tail",
                "Deliveries and late records of the window engine's history held in memory (not yet flushed into segments).",
                self.processor.tail.load(Ordering::Relaxed) as f64,
            ),
            Gauge::one(
                "streamforge_id_index_memory_bytes",
                "Memory of the id index: its Bloom filters, fences and the ids not yet stored.",
                self.setup.history.ids_memory() as f64,
            ),
            Gauge::one(
                "streamforge_id_index_runs",
                "Runs of the id index (each a filter probe per new event id).",
                self.setup.history.id_runs() as f64,
            ),
            Gauge::one(
                "streamforge_id_index_merging",
                "Entries of the id index's runs being merged (0: no merge; merges run on a thread of their own, checkpoints and flushes go on).",
                self.setup.history.ids_merging() as f64,
            ),
            Gauge::one(
                "streamforge_shards",
                "Key-hash shards of the window engine (--shards).",
                p.shards() as f64,
            ),
            Gauge::one(
                "streamforge_logged_commands",
                "Commands logged since the last checkpoint or restore.",
                (logged.window + logged.patterns) as f64,
            ),
            Gauge::one(
                "streamforge_checkpoint_due_after_commands",
                "Logged commands of the window engine after which its automatic checkpoint is due (--checkpoint-every, or half of a large live state's buckets; 0: never).",
                if self.checkpoints.checkpoint_every == 0 {
                    0.0
                } else {
                    self.auto_threshold(EngineId::Window) as f64
                },
            ),
            Gauge::one(
                "streamforge_waiters",
                "Open long polls and change streams waiting for new output.",
                self.output.heads.receiver_count() as f64,
            ),
            Gauge::one(
                "streamforge_ready",
                "1 when the processor matches the store.",
                f64::from(u8::from(self.is_ready())),
            ),
        ];
        let patterns = g.engines.patterns.status();
        drop(g);
        let mut text = self.env.metrics.render(&gauges);
        text.push_str(&self.env.metrics.render_patterns(&patterns));
        pattern_diagnostics::render_type_mismatches(&mut text, &mismatches);
        text
    }
}

/// A FIFO gate in front of the processor lock for the mutating calls: each
/// takes a ticket and waits for its turn, so concurrent producers are served
/// in arrival order (std's `Mutex` is not fair).
#[derive(Default)]
struct Turnstile {
    next: std::sync::atomic::AtomicU64,
    serving: Mutex<Serving>,
    turn: std::sync::Condvar,
}

/// The ticket being served, and how many wait for theirs (a turn's end
/// wakes them only when there are some: `notify_all` is a system call even
/// with no one waiting, on every call).
#[derive(Default)]
struct Serving {
    ticket: u64,
    waiting: usize,
}

/// A turn being served; the next ticket's turn comes when it is dropped.
struct Turn<'a>(&'a Turnstile, order::Inside<'a, order::Turn>);

impl Turn<'_> {
    /// The token for what may be taken during the turn.
    fn held(&mut self) -> &mut Held<order::Turn> {
        self.1.held()
    }
}

impl Turnstile {
    fn wait<'a, L: Before<order::Turn>>(&'a self, at: &'a mut Held<L>) -> Turn<'a> {
        let t = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        while serving.ticket != t {
            serving.waiting += 1;
            serving = self.turn.wait(serving).unwrap_or_else(|e| e.into_inner());
            serving.waiting -= 1;
        }
        Turn(self, Held::inside(at))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut serving = self.0.serving.lock().unwrap_or_else(|e| e.into_inner());
        serving.ticket += 1;
        if serving.waiting > 0 {
            self.0.turn.notify_all();
        }
    }
}

/// Starts thread `name`, which runs `work` on the service for every signal
/// on `rx`; it ends with the service or when the senders are gone.
fn on_signal(
    service: &Arc<Service>,
    name: &str,
    rx: std::sync::mpsc::Receiver<()>,
    work: fn(&Service),
) -> std::io::Result<()> {
    let weak: Weak<Service> = Arc::downgrade(service);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            while rx.recv().is_ok() {
                match weak.upgrade() {
                    Some(s) => work(&s),
                    None => return,
                }
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    /// Issue 36, point 7: a checkpoint or restore of one engine changed
    /// one base version shared by both, so an automatic checkpoint of the
    /// window engine in progress was dropped (a manual one answered 503)
    /// whenever the pattern engine checkpointed meanwhile. Each engine now
    /// has its own.
    #[test]
    fn one_engines_checkpoint_leaves_the_others_base_version() {
        let dir = tempfile::tempdir().unwrap();
        let pipeline = crate::config::DEFAULT_PIPELINE.as_bytes();
        let patterns = crate::config::DEFAULT_PATTERNS.as_bytes();
        let svc = Service::open(Options {
            db: dir.path().join("v.db"),
            pipeline: crate::engine::Pipeline::from_json(pipeline).unwrap(),
            pipeline_explicit: false,
            patterns: crate::patterns::Document::from_json(patterns).unwrap(),
            patterns_explicit: false,
            prefer_patterns: None,
            checkpoint_every: 0,
            retention: Retention {
                checkpoints: 3,
                changes: 0,
                late: 0,
                keys: DEFAULT_KEYS_KEPT,
            },
            metrics: Arc::new(Metrics::default()),
            shards: 1,
            strategies: Default::default(),
        })
        .unwrap();
        let version = |e| svc.commits.base_version(e).load(Ordering::SeqCst);
        let window = version(EngineId::Window);
        svc.create_checkpoint(EngineId::Patterns).unwrap();
        assert_eq!(version(EngineId::Window), window, "a pattern checkpoint");
        let patterns = version(EngineId::Patterns);
        svc.create_checkpoint(EngineId::Window).unwrap();
        assert_eq!(version(EngineId::Patterns), patterns, "a window checkpoint");
        assert!(version(EngineId::Window) > window);
    }

    #[test]
    fn turns_are_served_in_arrival_order() {
        let gate = Arc::new(Turnstile::default());
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut entry = Held::entry();
        let first = gate.wait(&mut entry);
        let mut handles = Vec::new();
        for id in 1..=5u64 {
            let (g, s) = (gate.clone(), served.clone());
            handles.push(std::thread::spawn(move || {
                let entry = &mut Held::entry();
                let _turn = g.wait(entry);
                s.lock().unwrap().push(id);
            }));
            // the next thread arrives only once this one holds its ticket
            until("the ticket", || gate.next.load(Ordering::Relaxed) == id + 1);
        }
        assert!(
            served.lock().unwrap().is_empty(),
            "served before the first turn ended"
        );
        drop(first);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*served.lock().unwrap(), vec![1, 2, 3, 4, 5]);
    }
}
