//! Streamforge: exact, continuously corrected event-time windowed aggregates
//! over HTTP, from one binary.
//!
//! # Layout
//! Data flows one way:
//! HTTP request → [`api`] (parse and validate DTOs, map errors to
//! problem+json) → [`service`] (take the lock, apply, persist, notify) →
//! [`engine`] (pure: no tokio, axum, rusqlite or I/O) → changes → [`store`] /
//! response.
//!
//! - [`engine`]: the processing contract of SPEC.md; depends on std, serde,
//!   serde_json and sha2 only (`tests/purity.rs` checks it).
//!
//! The dependency rule: a module may use the ones to its right in the line
//! above, never the ones to its left.

pub mod engine;
