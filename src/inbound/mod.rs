//! Inbound webhook sources (docs/webhooks.md): `POST /ingest/{source}`
//! takes a producer's payload as it is (Stripe, GitHub, a Standard Webhooks
//! sender, ...), checks its signature and maps it to events of the window
//! engine or of the pattern engine; and the per-partition watermark
//! strategies that close windows without a watermark client.
//!
//! Both are declared in the pipeline file, beside the engine's fields
//! (`"sources"` and `"watermarks"`), and both are service configuration,
//! not engine state: [`split_pipeline`] takes them out before the engine
//! reads the file, so they are not part of the checkpoint's pipeline or of
//! pipeline equivalence, and a file without them is read exactly as before.
//!
//! - [`config`]: the declarations, validated with the JSON path of every
//!   mistake.
//! - [`mapping`]: a payload (and its headers) to events.
//! - [`projection`]: reads only the values a source's pointers name.
//! - [`signature`]: the producers' signature schemes, in constant time.

pub mod config;
pub mod mapping;
pub mod projection;
pub mod signature;

pub use config::{split_pipeline, Inbound, Source, Target};
