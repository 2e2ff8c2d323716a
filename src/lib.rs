//! Streamforge: exact, continuously corrected event-time windowed aggregates
//! over HTTP, from one binary.
//!
//! # Layout
//! Data flows one way:
//! HTTP request → [`api`] (parse and validate DTOs, auth, limits, map errors
//! to problem+json) → [`service`] (take the lock, apply, persist, notify) →
//! [`engine`] (pure: no tokio, axum, rusqlite or I/O) and [`store`] (one
//! SQLite transaction per acknowledged call) → answer → response.
//!
//! The pure parts and the store are workspace crates (`crates/`), re-exported
//! here under their short names; their `Cargo.toml` files say what each may
//! touch (docs/architecture.md):
//!
//! - [`engine`] (`streamforge-engine`): the processing rules of
//!   docs/semantics.md; depends on serde, serde_json, sha2 and [`canonical`]
//!   only.
//! - [`patterns`]: the second pure engine, pattern detection (complex event
//!   processing) over its own typed events, watermark, output stream and
//!   checkpoints (`docs/patterns.md`); same dependency rule as [`engine`],
//!   and it shares nothing with it but [`canonical`].
//! - [`nexmark`]: the Nexmark workload generator (people, auctions, bids as
//!   operation-file lines, a pure function of a seed and a position); pure
//!   like the engines (std only), used by `streamforge nexmark`, the chaos
//!   suite and its benches.
//! - [`canonical`]: pure helpers both engines share: the canonical JSON
//!   writer of checkpoints, their SHA-256, a duplicate-rejecting JSON map.
//! - [`store`] (`streamforge-store`): with the id index it uses
//!   (`streamforge-ids`, [`store::ids`]), the only crates with `rusqlite`:
//!   migrations, the command log, changelog and late pages, checkpoints,
//!   the recovery base.
//! - [`service`]: the single write path (std `Mutex` over the engines and
//!   the writing connection; `tokio::sync::watch` for waiters), recovery,
//!   metrics. No HTTP.
//! - [`api`]: axum routes of docs/api.md, auth, CORS, body limit, problem+json.
//! - [`sinks`]: webhook sinks (docs/sinks.md): one task per sink follows a
//!   stored output stream and posts it to a receiver with reqwest.
//! - [`inbound`]: webhook sources (`POST /ingest/{source}`: a producer's
//!   payload checked and mapped to events) and the per-partition watermark
//!   strategies (docs/webhooks.md).
//! - [`kafka`]: `serve --kafka`, several instances consuming one
//!   Kafka-protocol topic through the same write path (docs/cluster.md).
//! - [`shard_pool`]: the threads the window engine's key-hash shards run on.
//! - [`server`]: binds, recovers, serves, drains on shutdown, final
//!   checkpoint; [`serve`]: its accept loop (axum's, with each
//!   connection's task kept from rescheduling itself). [`config`]: the `serve` flags and the embedded pipeline.
//! - [`cli`]: the client subcommands (`send`, `changes`, `checkpoint`, ...):
//!   a blocking reqwest client of the HTTP API, plus `verify`, which checks a
//!   checkpoint file offline with the engine. It talks to the service only
//!   over HTTP; `anyhow` lives only here and in `main.rs`.
//!
//! The dependency rule: a module may use the ones after it in the line
//! above (api → sinks → service → engine/store), never the ones before it; [`cli`]
//! uses only [`engine`] types, nothing of the server side.

pub mod api;
pub use streamforge_canonical as canonical;
pub mod cli;
pub mod config;
pub mod inbound;
pub mod kafka;
pub mod logs;
pub use streamforge_engine as engine;
pub use streamforge_nexmark as nexmark;
pub use streamforge_patterns as patterns;
pub mod serve;
pub mod server;
pub mod service;
pub mod shard_pool;
pub mod sinks;
pub use streamforge_store as store;
