//! `streamforge serve` configuration: clap flags, each with a matching
//! `STREAMFORGE_*` environment variable (the flag wins).

use std::path::PathBuf;

use clap::Args;

/// The embedded default pipeline (`pipelines/default.json`): partitions
/// `p0`..`p3`; windows `fixed_10s` (fixed, 10 000), `sliding_10s_2s`
/// (sliding, size 10 000, step 2 000) and `session_30s` (session, gap
/// 30 000); lateness 1 000. Times are in the producers' unit (milliseconds
/// in the examples).
pub const DEFAULT_PIPELINE: &str = include_str!("../pipelines/default.json");

/// The embedded default pattern document (`pipelines/default.patterns.json`):
/// `rising_payments` (a login, then one to three payments, then a payment
/// larger than the last of them, within 10 minutes: repetition and a capture
/// comparison), `abandoned_cart` (an `add_to_cart` not followed by a
/// `checkout` within 30 minutes: absence) and `failed_logins_then_success`
/// (three failed logins, then a successful one, within 5 minutes, other
/// events in between ignored: `skip_any`).
pub const DEFAULT_PATTERNS: &str = include_str!("../pipelines/default.patterns.json");

/// Flags of `streamforge serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (`127.0.0.1:0` picks a free port; the bound
    /// address is printed as `listening on ADDR`).
    #[arg(long, env = "STREAMFORGE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// SQLite database file (created if missing).
    #[arg(long, env = "STREAMFORGE_DB", default_value = "./streamforge.db")]
    pub db: PathBuf,
    /// Let other processes open the database while the server runs (for
    /// example `sqlite3` to inspect it). By default the server holds it
    /// exclusively, which saves six lock system calls per commit; another
    /// process that opens it gets "database is locked".
    #[arg(long, env = "STREAMFORGE_DB_SHARED")]
    pub db_shared: bool,
    /// Pipeline JSON file for a fresh database (default: the embedded demo
    /// pipeline). A database that holds a non-equivalent pipeline is refused.
    #[arg(long, env = "STREAMFORGE_PIPELINE")]
    pub pipeline: Option<PathBuf>,
    /// Pattern document (JSON) for the pattern engine of a database that has
    /// none (default: the embedded demo document). A database whose current
    /// document (after any PUT /patterns) holds other patterns is refused,
    /// unless --prefer-patterns says which wins; the document's limits
    /// always apply.
    #[arg(long, env = "STREAMFORGE_PATTERNS")]
    pub patterns: Option<PathBuf>,
    /// When --patterns holds other patterns than the database's current
    /// document: `file` puts the file in force at start as a logged change
    /// (as PUT /patterns does: unchanged patterns keep their state), and
    /// `database` keeps the database's document.
    #[arg(
        long,
        env = "STREAMFORGE_PREFER_PATTERNS",
        value_enum,
        requires = "patterns"
    )]
    pub prefer_patterns: Option<PreferPatternsArg>,
    /// Bearer token required on every route except / (the dashboard page),
    /// /healthz, /readyz and /openapi.yaml.
    #[arg(long, env = "STREAMFORGE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Origin allowed to make cross-origin requests (repeatable; `*` for
    /// any). The variable takes a comma-separated list.
    #[arg(
        long = "cors-origin",
        env = "STREAMFORGE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Largest accepted request body, in bytes (larger: 413).
    #[arg(long, env = "STREAMFORGE_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Largest checkpoint envelope `POST /restore` accepts, in bytes (0:
    /// the same as --max-body-bytes). A body larger than --max-body-bytes
    /// (and than 16 MiB) is restored as it streams (staged on disk, memory
    /// bounded) instead of whole in memory.
    #[arg(long, env = "STREAMFORGE_MAX_RESTORE_BYTES", default_value_t = 0)]
    pub max_restore_bytes: u64,
    /// Logged commands between automatic checkpoints (0 disables them).
    /// For a window engine with 1,024 live buckets or more, also at least
    /// four per live bucket: a checkpoint writes the live state, and this
    /// bounds what it costs per call when calls carry one event each.
    #[arg(long, env = "STREAMFORGE_CHECKPOINT_EVERY", default_value_t = 1000)]
    pub checkpoint_every: u64,
    /// Automatic checkpoints kept (the newest; at least 1). Checkpoints made
    /// with POST /checkpoints are kept until deleted.
    #[arg(long, env = "STREAMFORGE_KEEP_CHECKPOINTS", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_checkpoints: u64,
    /// Changes kept readable on /changes behind the newest one (0 keeps
    /// them all). Older ones are pruned at checkpoints; a page that starts
    /// before the earliest one held is refused (410 pruned).
    #[arg(long, env = "STREAMFORGE_RETAIN_CHANGES", default_value_t = 0)]
    pub retain_changes: u64,
    /// Late records kept readable on /late behind the newest one (0 keeps
    /// them all), as for --retain-changes.
    #[arg(long, env = "STREAMFORGE_RETAIN_LATE", default_value_t = 0)]
    pub retain_late: u64,
    /// Rejected webhook payloads kept per source on
    /// GET /ingest/{source}/rejected (the newest N; older ones are dropped
    /// and counted in /metrics). Default 1000; only with a pipeline that
    /// declares "sources".
    #[arg(long, env = "STREAMFORGE_KEEP_REJECTED",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_rejected: Option<u64>,
    /// Idempotency keys of pattern pushes and advances kept (the newest N;
    /// 0 keeps every key). A retry whose key was dropped is applied again.
    #[arg(long, env = "STREAMFORGE_IDEMPOTENCY_KEYS", default_value_t = crate::service::DEFAULT_KEYS_KEPT)]
    pub idempotency_keys: u64,
    /// Webhook sinks: the delay before the first retry of a failed batch,
    /// in milliseconds; it doubles per failed attempt (with jitter), up to
    /// --sink-backoff-max-ms. A 429 or 503 with Retry-After waits that long
    /// instead.
    #[arg(long, env = "STREAMFORGE_SINK_BACKOFF_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub sink_backoff_ms: u64,
    /// Webhook sinks: the longest delay between two attempts, in
    /// milliseconds.
    #[arg(long, env = "STREAMFORGE_SINK_BACKOFF_MAX_MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub sink_backoff_max_ms: u64,
    /// Webhook sinks: a request not answered within this many milliseconds
    /// has failed (and is retried).
    #[arg(long, env = "STREAMFORGE_SINK_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub sink_timeout_ms: u64,
    /// Webhook sinks run on threads of their own at this CPU niceness
    /// (0-19; higher yields more; 0 = the same priority as ingestion). When
    /// the cores are busy, acknowledged ingestion and reads go first and
    /// the sinks catch up when there is room (their lag is on GET /sinks
    /// and /metrics).
    #[arg(long, env = "STREAMFORGE_SINK_NICE", default_value_t = 10,
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub sink_nice: i32,
    /// The window engine's per-key work (window assignment, bucket updates,
    /// reconciliation, finalization) runs in this many key-hash shards, each
    /// on a thread of its own (1-64; 0 = the number of cores). Nothing
    /// observable depends on it: answers, changelog and checkpoints are the
    /// same bytes for every value, and a checkpoint taken with one value
    /// restores with any other.
    #[arg(long, env = "STREAMFORGE_SHARDS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=64))]
    pub shards: u64,
    /// Kafka-protocol brokers (`host:port`, comma-separated): consume
    /// `--topic` instead of (besides) HTTP deliveries. Its partitions are the
    /// pipeline's `p0`..`p{P-1}`, a record's offset the delivery's offset
    /// (see docs/cluster.md).
    #[arg(
        long,
        env = "STREAMFORGE_KAFKA",
        value_delimiter = ',',
        requires = "topic"
    )]
    pub kafka: Vec<String>,
    /// The topic whose partitions this service consumes (with `--kafka`).
    #[arg(long, env = "STREAMFORGE_TOPIC", requires = "kafka")]
    pub topic: Option<String>,
    /// This instance's share of the topic, `I/N`: it consumes the
    /// partitions `p` with `p mod N == I` (static; no rebalancing).
    #[arg(long, env = "STREAMFORGE_INSTANCE", default_value = "0/1")]
    pub instance: String,
    /// Watermarks from the events (bounded out-of-orderness): a consumed
    /// partition's watermark is the largest timestamp seen in it minus this.
    /// Without it, only watermark records advance the partitions.
    #[arg(long, env = "STREAMFORGE_MAX_OUT_OF_ORDERNESS")]
    pub max_out_of_orderness: Option<i64>,
    /// A consumed partition with no record for this many milliseconds is
    /// marked idle (0: never); its next record makes it active again.
    #[arg(long, env = "STREAMFORGE_IDLE_AFTER", default_value_t = 0)]
    pub idle_after: u64,
}

/// `--prefer-patterns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferPatternsArg {
    /// The --patterns file wins (put in force as a logged change).
    File,
    /// The database's current document wins.
    Database,
}
