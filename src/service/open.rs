//! The service's start: the database checked, the pipeline and the patterns
//! document resolved, the engines recovered, the threads started.

use super::*;

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
        let fail = |what: &str, e: &dyn std::fmt::Display| start_error(opts, what, e);
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
        let fail = |what: &str, e: &dyn std::fmt::Display| start_error(opts, what, e);
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

    /// Opens the database, checks the pipeline and recovers the engines
    /// (recovery base + replay). Starts the automatic-checkpoint thread.
    pub fn open(opts: Options) -> Result<Arc<Service>, StartError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| start_error(&opts, what, e);
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
            engines_lock: EnginesLock {
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
}

/// A start refused by the database at `opts.db`: `what` went wrong, and why.
fn start_error(opts: &Options, what: &str, e: &dyn std::fmt::Display) -> StartError {
    StartError(format!("database {}: {what}: {e}", opts.db.display()))
}
