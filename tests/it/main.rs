//! The integration tests: one test binary (a single link of the crate and
//! its dependencies instead of one per file), one module per subject.
//!
//! Most modules drive the real `streamforge` binary over HTTP on a free port
//! and wait on conditions with deadlines (`support::server`: the server
//! fixture, a client, a webhook receiver); the engine and pattern modules
//! drive the pure engines in-process against reference models
//! (`support::reference`, `support::patterns_reference`) with shared helpers
//! (`support::engine`, `support::patterns`); `chaos` runs Nexmark workloads
//! under faults against a batch oracle (`support::chaos`). Every shared
//! helper is under `support/`.
//!
//! Run one subject with a filter: `cargo test --test it sinks::` (or any part
//! of a test's path).

// Shared helpers (support/mod.rs lists them).
mod support;

// The window engine, in-process.
mod engine_checkpoint;
mod engine_model;
mod engine_restore_fuzz;
mod engine_rules;

// The pattern engine, in-process.
mod patterns_checkpoint;
mod patterns_model;
mod patterns_restore_fuzz;
mod patterns_rules;

// The service over HTTP (the real binary).
mod api_concurrency;
mod api_contract;
mod api_errors;
mod api_fuzz;
mod batch_call;
mod checkpoint_format;
mod container;
mod dashboard;
mod durability;
mod epochs;
mod kafka;
mod migrations;
mod patterns_change;
mod patterns_filters;
mod patterns_http;
mod patterns_keys;
mod restore_mutations;
mod schemathesis;
mod shards;
mod sinks;
mod watermark_batch;
mod webhooks;

// The CLI, the docs, the walkthrough, the chaos suite.
mod architecture;
mod chaos;
mod cli;
mod cli_patterns;
mod docs;
mod readme_walkthrough;
