//! The one strict JSON reading layer, used by every reader of the project
//! (window deliveries and advances, pattern events and advances, pattern
//! documents, both engines' checkpoints, the CLI's input lines).
//!
//! serde_json alone is too lenient for the contract in four ways, and each
//! has its one answer here:
//!
//! - **duplicate keys** (serde's maps keep the last one): [`UniqueMap`]
//!   refuses them, and so does the tree [`parse`] builds;
//! - **exact integers** (serde_json reads a token beyond `u64` as a float,
//!   and a derive accepts `1.0` nowhere but says "floating point" in Rust
//!   terms): [`int_field`] / [`int_token`] for request fields, [`number`]
//!   for values kept as their token ([`Json::Number`]);
//! - **`-0`** (serde_json reads it as the float `-0.0`): an integer token,
//!   read as 0, by [`int_field`], [`int_token`] and [`number`];
//! - **error positions and wording**: [`object`] names what was expected
//!   ("a delivery object") instead of a Rust type, [`without_position`]
//!   strips serde_json's " at line L column C" where the caller says where,
//!   and [`Path`] renders where in a document a value sits
//!   (`patterns[0].stages[2].where`).
//!
//! Two shapes of reader sit on these pieces: serde derives over
//! [`object`]/[`int_field`] for the hot request paths (no tree is built),
//! and the [`Json`] tree ([`parse`]) where a document is walked with paths.

mod object;
mod path;
mod tree;
mod unique_map;

pub use object::{int_field, int_field_direct, int_token, object, without_position, ObjectSeed};
pub use path::Path;
pub use tree::{convert, kind_name, number, parse, Json, Num, MAX_NESTING};
pub use unique_map::UniqueMap;
