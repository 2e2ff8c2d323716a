//! A bucket's address in interned form: what the live index, the session
//! windows and the changelog pass around.

use streamforge_keys::KeyId;

/// Index of a window in the pipeline's name order. A `usize` (not a
/// narrower integer a large pipeline could wrap): a bucket address is 48
/// bytes either way (its `i128` bounds align it to 16).
pub type WinNo = usize;

/// A bucket address in interned form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketRef {
    /// Window.
    pub window: WinNo,
    /// Key.
    pub key: KeyId,
    /// Inclusive start.
    pub start: i128,
    /// Exclusive end.
    pub end: i128,
}
