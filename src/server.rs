//! The server as a function of its listener, configuration and shutdown
//! future (mini-redis `server::run`): bind first (so `/healthz` answers and
//! `/readyz` says 503 during recovery), recover, serve; on shutdown stop
//! accepting, end open streams and long polls, finish in-flight calls, take
//! a final checkpoint.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::api::{self, ApiConfig};
use crate::config::{ServeArgs, DEFAULT_PATTERNS, DEFAULT_PIPELINE};
use crate::inbound::config::Secrets;
use crate::inbound::Inbound;
use crate::patterns::Document;
use crate::service::{Metrics, Options, Retention, Service};
use crate::sinks::Sinks;

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The service options (database, pipeline, checkpoints).
    pub service: Options,
    /// The router options (token, CORS, body limit).
    pub api: ApiConfig,
    /// Webhook sink delivery settings.
    pub sinks: crate::sinks::Options,
    /// The Kafka-protocol source (`--kafka`), if any.
    pub kafka: Option<crate::kafka::Options>,
    /// `--db-shared`: other processes may open the database meanwhile
    /// ([`crate::store::set_shared_access`]).
    pub db_shared: bool,
}

impl Config {
    /// Builds the configuration from the `serve` flags (reads `--pipeline`).
    pub fn from_args(args: &ServeArgs) -> Result<Config, String> {
        for o in &args.cors_origins {
            api::cors_origin(o)?;
        }
        let ((pipeline, inbound), explicit) = load(
            args.pipeline.as_deref(),
            "--pipeline",
            DEFAULT_PIPELINE,
            "the embedded pipeline",
            |bytes| crate::inbound::config::pipeline_file(bytes, Secrets::Load),
        )?;
        refuse_idle_flags(args, &inbound)?;
        let (patterns, patterns_explicit) = load(
            args.patterns.as_deref(),
            "--patterns",
            DEFAULT_PATTERNS,
            "the embedded patterns",
            Document::from_json,
        )?;
        let kafka = match &args.topic {
            Some(topic) => Some(crate::kafka::Options {
                brokers: args.kafka.clone(),
                topic: topic.clone(),
                instance: crate::kafka::Instance::parse(&args.instance)?,
                max_out_of_orderness: args.max_out_of_orderness,
                idle_after: (args.idle_after > 0)
                    .then(|| std::time::Duration::from_millis(args.idle_after)),
            }),
            None => None,
        };
        Ok(Config {
            kafka,
            db_shared: args.db_shared,
            service: Options {
                db: PathBuf::from(&args.db),
                pipeline,
                pipeline_explicit: explicit,
                patterns,
                patterns_explicit,
                prefer_patterns: args.prefer_patterns.map(|p| match p {
                    crate::config::PreferPatternsArg::File => crate::service::PreferPatterns::File,
                    crate::config::PreferPatternsArg::Database => {
                        crate::service::PreferPatterns::Database
                    }
                }),
                checkpoint_every: args.checkpoint_every,
                retention: Retention {
                    // Beyond usize: keep them all.
                    checkpoints: usize::try_from(args.keep_checkpoints).unwrap_or(usize::MAX),
                    changes: args.retain_changes,
                    late: args.retain_late,
                    keys: args.idempotency_keys,
                },
                metrics: Arc::new(Metrics::default()),
                shards: match args.shards {
                    0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(64)),
                    k => k as usize,
                },
                strategies: inbound.watermarks.clone(),
            },
            api: ApiConfig {
                token: args.token.clone(),
                cors_origins: args.cors_origins.clone(),
                max_body_bytes: args.max_body_bytes,
                max_restore_bytes: args.max_restore_bytes,
                inbound: Arc::new(inbound),
                keep_rejected: args.keep_rejected.unwrap_or(1000),
            },
            sinks: crate::sinks::Options {
                backoff: std::time::Duration::from_millis(args.sink_backoff_ms),
                backoff_max: std::time::Duration::from_millis(
                    args.sink_backoff_max_ms.max(args.sink_backoff_ms),
                ),
                timeout: std::time::Duration::from_millis(args.sink_timeout_ms),
                nice: args.sink_nice,
            },
        })
    }
}

/// The flags and settings that would do nothing in the mode the server
/// runs in are refused, never silently ignored.
fn refuse_idle_flags(args: &ServeArgs, inbound: &Inbound) -> Result<(), String> {
    if let (Some(n), true) = (args.keep_rejected, inbound.sources.is_empty()) {
        return Err(format!(
            "--keep-rejected {n} bounds the rejected pages of webhook sources, and the pipeline \
             declares no \"sources\" (docs/webhooks.md)"
        ));
    }
    if args.topic.is_none() {
        if let Some(b) = args.max_out_of_orderness {
            return Err(format!(
                "--max-out-of-orderness {b} applies to the partitions consumed with --kafka, and \
                 this server runs without it: for HTTP partitions declare it in the pipeline \
                 file, e.g. \"watermarks\": {{\"p0\": {{\"max_out_of_orderness\": {b}}}}} \
                 (docs/webhooks.md)"
            ));
        }
        if args.idle_after > 0 {
            return Err(format!(
                "--idle-after {} applies to the partitions consumed with --kafka, and this \
                 server runs without it: for HTTP partitions declare it in the pipeline file, \
                 e.g. \"watermarks\": {{\"p0\": {{\"idle_after\": {}}}}} (docs/webhooks.md)",
                args.idle_after, args.idle_after
            ));
        }
        if args.instance != "0/1" {
            return Err(format!(
                "--instance {} applies only with --kafka (the share of the topic's partitions \
                 this instance consumes)",
                args.instance
            ));
        }
    } else if !inbound.is_empty() {
        return Err(
            "the pipeline declares \"sources\" or \"watermarks\", which serve HTTP partitions; \
             with --kafka the partitions are consumed from the topic and their watermarks come \
             from --max-out-of-orderness and --idle-after: remove them from the pipeline file"
                .into(),
        );
    }
    Ok(())
}

/// A JSON file given with `flag` (then `true`: given explicitly), or the
/// embedded default, parsed by `parse`.
fn load<T, E: std::fmt::Display>(
    path: Option<&std::path::Path>,
    flag: &str,
    default: &str,
    default_name: &str,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<(T, bool), String> {
    match path {
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))?;
            let v = parse(&bytes).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
            Ok((v, true))
        }
        None => Ok((
            parse(default.as_bytes()).map_err(|e| format!("{default_name}: {e}"))?,
            false,
        )),
    }
}

/// The idleness of the partitions whose pipeline `"watermarks"` entry has
/// an `idle_after`: every `every`, each one quiet for that long is marked
/// idle, as a logged `idle` command (its next event makes it active
/// again). A failed mark is tried again at the next tick.
async fn idleness(svc: Arc<Service>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let s = svc.clone();
        let marked = tokio::task::spawn_blocking(move || {
            let mut marked = Vec::new();
            for p in s.idle_due() {
                match s.mark_idle(&p, crate::service::Prefer::Minimal) {
                    Ok(_) => marked.push(p),
                    Err(e) => tracing::warn!(partition = %p, error = %e, "marking an idle partition failed; trying again"),
                }
            }
            marked
        })
        .await;
        for p in marked.unwrap_or_default() {
            tracing::info!(partition = %p, "partition idle: no event within its idle_after");
        }
    }
}

/// Why the server stopped with an error.
#[derive(Debug)]
pub struct ServerError(pub String);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerError {}

/// Serves until `shutdown` completes, then drains and checkpoints.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let cell: Arc<OnceLock<Arc<Service>>> = Arc::new(OnceLock::new());
    let sinks_cell: Arc<OnceLock<Arc<Sinks>>> = Arc::new(OnceLock::new());
    let metrics = config.service.metrics.clone();
    let producer_cell = Arc::new(OnceLock::new());
    let app = api::router(
        cell.clone(),
        sinks_cell.clone(),
        producer_cell.clone(),
        metrics,
        &config.api,
    );
    let (stopping_tx, stopping_rx) = oneshot::channel::<()>();
    let cell_for_signal = cell.clone();
    let graceful = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections; draining in-flight calls");
        if let Some(s) = cell_for_signal.get() {
            s.begin_shutdown();
        }
        // Err: the receiver is gone because the server already stopped.
        let _ = stopping_tx.send(());
    };
    let server = tokio::spawn(async move { crate::serve::serve(listener, app, graceful).await });
    let opts = config.service.clone();
    crate::store::set_shared_access(config.db_shared);
    let opened = tokio::task::spawn_blocking(move || Service::open(opts))
        .await
        .map_err(|e| ServerError(format!("recovery panicked: {e}")))?;
    let svc = match opened {
        Ok(s) => s,
        Err(e) => {
            server.abort();
            return Err(ServerError(e.to_string()));
        }
    };
    let sinks = match Sinks::start(svc.clone(), config.sinks) {
        Ok(s) => s,
        Err(e) => {
            server.abort();
            return Err(ServerError(e));
        }
    };
    let source = match config.kafka {
        Some(opts) => match crate::kafka::Source::start(svc.clone(), opts).await {
            Ok(source) => {
                let state = source.state.clone();
                svc.metrics().add_section(Arc::new(move || state.render()));
                let _ = producer_cell.set(source.producer.clone());
                Some(source)
            }
            Err(e) => {
                server.abort();
                sinks.stop();
                return Err(ServerError(format!("--kafka: {e}")));
            }
        },
        None => None,
    };
    // Set once, here, before anything else sets them: `set` cannot fail.
    // With --kafka, after the source runs: until then `POST /events` would
    // not know to produce to the topic.
    let _ = sinks_cell.set(sinks.clone());
    let _ = cell.set(svc.clone());
    announce_ready(&svc);
    let idleness = svc
        .idle_tick()
        .map(|every| tokio::spawn(idleness(svc.clone(), every)));
    // If the signal came during recovery, the streams opened since must end too.
    let svc_for_stop = svc.clone();
    tokio::spawn(async move {
        if stopping_rx.await.is_ok() {
            svc_for_stop.begin_shutdown();
        }
    });
    server
        .await
        .map_err(|e| ServerError(format!("server task failed: {e}")))?
        .map_err(|e| ServerError(format!("server failed: {e}")))?;
    if let Some(task) = idleness {
        task.abort();
    }
    if let Some(source) = source {
        source.stop().await;
    }
    sinks.stop();
    final_checkpoint(svc).await
}

/// Logs and prints that recovery is over (the printed line is what
/// scripts wait for, as `/readyz`).
fn announce_ready(svc: &Service) {
    let rec = svc.recovery();
    tracing::info!(
        db = %svc.db_path().display(),
        replayed = rec.replayed,
        seconds = rec.seconds,
        "ready"
    );
    println!(
        "ready: replayed {} logged calls in {:.2} s",
        rec.replayed, rec.seconds
    );
    use std::io::Write as _;
    if let Err(e) = std::io::stdout().flush() {
        tracing::warn!(error = %e, "cannot write to stdout");
    }
}

/// The checkpoint of each engine at shutdown, once everything is drained.
async fn final_checkpoint(svc: Arc<Service>) -> Result<(), ServerError> {
    match tokio::task::spawn_blocking(move || svc.final_checkpoint()).await {
        Ok(Ok(stored)) if stored.is_empty() => {
            tracing::info!("nothing logged since the last checkpoints")
        }
        Ok(Ok(stored)) => {
            for m in stored {
                tracing::info!(
                    id = m.id,
                    sequence = m.sequence,
                    bytes = m.bytes,
                    "final checkpoint stored"
                );
            }
        }
        Ok(Err(e)) => {
            return Err(ServerError(format!(
                "final checkpoint failed (the command log still covers everything): {e}"
            )))
        }
        Err(e) => return Err(ServerError(format!("final checkpoint panicked: {e}"))),
    }
    Ok(())
}
