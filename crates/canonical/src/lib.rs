//! Pure helpers shared by both engines (windows and patterns): the canonical
//! JSON writer of checkpoints, their SHA-256 checksum, and a JSON object
//! reader that rejects duplicate keys.
//!
//! Like the engines, this crate depends on nothing but `serde`,
//! `serde_json` and `sha2` (its `Cargo.toml` keeps it so; `crates/clippy.toml`
//! forbids it clocks, files, sockets, threads and the environment).

pub mod escape;
mod sha;
mod unique_map;
pub mod writer;

pub use sha::sha256_hex;
pub use unique_map::UniqueMap;
