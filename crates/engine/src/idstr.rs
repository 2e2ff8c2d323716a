//! Event ids as stored in the delivery history: inline when short (most ids
//! are; no allocation and no pointer to chase when the id index compares
//! them), on the heap otherwise.

use std::borrow::Cow;
use std::fmt;

const INLINE: usize = 22;

/// A stored event id. Its representation is private, so every `IdStr` is
/// made by [`IdStr::from_cow`] from a `str`: inline bytes are always whole
/// UTF-8.
#[derive(Clone, PartialEq, Eq)]
pub struct IdStr(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// Up to 22 bytes, inline.
    Inline {
        /// Length in bytes.
        len: u8,
        /// UTF-8 bytes, zero-padded.
        buf: [u8; INLINE],
    },
    /// Longer ids.
    Heap(Box<str>),
}

impl IdStr {
    /// Stores `s`, reusing its allocation when it does not fit inline.
    #[inline]
    pub fn from_cow(s: Cow<'_, str>) -> IdStr {
        match s {
            Cow::Borrowed(b) if b.len() <= INLINE => Self::inline(b),
            Cow::Owned(o) if o.len() <= INLINE => Self::inline(&o),
            other => IdStr(Repr::Heap(other.into_owned().into_boxed_str())),
        }
    }

    /// `s` (at most `INLINE` bytes) inline.
    #[inline]
    fn inline(s: &str) -> IdStr {
        let mut buf = [0u8; INLINE];
        for (d, b) in buf.iter_mut().zip(s.as_bytes()) {
            *d = *b;
        }
        IdStr(Repr::Inline {
            len: s.len() as u8,
            buf,
        })
    }

    /// The bytes of the id.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => buf.get(..usize::from(*len)).unwrap_or(buf),
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Inline bytes are a whole `str` (see `inline`): the empty
            // fallback is never taken.
            Repr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Heap(s) => s,
        }
    }

    /// Whether the id is stored inline.
    #[cfg(test)]
    fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }
}

impl fmt::Debug for IdStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_are_inline_and_long_ones_on_the_heap() {
        for s in [
            "",
            "e1",
            "é😀",
            "0123456789012345678901",
            "01234567890123456789012",
            &"x".repeat(300),
        ] {
            let id = IdStr::from_cow(Cow::Borrowed(s));
            assert_eq!(id.as_str(), s);
            assert_eq!(id.is_inline(), s.len() <= INLINE);
            assert_eq!(IdStr::from_cow(Cow::Owned(s.to_string())), id);
        }
    }
}
