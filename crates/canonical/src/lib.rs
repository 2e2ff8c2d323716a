//! Pure helpers shared by both engines (windows and patterns): the canonical
//! JSON writer of checkpoints, their SHA-256 checksum, and the one strict
//! JSON reading layer every reader uses ([`strict`]).
//!
//! Like the engines, this crate depends on nothing but `serde`,
//! `serde_json` and `sha2` (its `Cargo.toml` keeps it so; `crates/clippy.toml`
//! forbids it clocks, files, sockets, threads and the environment).

pub mod escape;
mod sha;
pub mod strict;
pub mod writer;

pub use sha::sha256_hex;
pub use strict::UniqueMap;
