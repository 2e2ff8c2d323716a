//! What the window engine, the pattern engine and the id index share for
//! keys: one hasher and one interner.
//!
//! - [`FxHasher`] ([`hash`]): deterministic and fast. The engines hash
//!   interned integers, event ids and key strings on their hot paths; std's
//!   SipHash resists hash flooding but costs several times as much, and its
//!   random seed would make the engines' maps differ from run to run (their
//!   iteration order never reaches an output either way).
//! - [`KeyTable`] ([`table`]): each distinct key string stored once and
//!   named by a dense [`KeyId`], so per-key state is an index, not a hash
//!   lookup; a frozen copy for a checkpoint shares the names instead of
//!   copying them.

pub mod hash;
pub mod table;

pub use hash::{hash_str, FxBuild, FxHasher, FxMap};
pub use table::{KeyId, KeyTable};
