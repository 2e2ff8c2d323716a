//! Event ids as stored in the delivery history: inline when short (most ids
//! are; no allocation and no pointer to chase when the id index compares
//! them), on the heap otherwise.

use std::borrow::Cow;
use std::fmt;

const INLINE: usize = 22;

/// A stored event id.
#[derive(Clone, PartialEq, Eq)]
pub enum IdStr {
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
            Cow::Borrowed(b) if b.len() <= INLINE => Self::inline(b.as_bytes()),
            Cow::Owned(o) if o.len() <= INLINE => Self::inline(o.as_bytes()),
            other => IdStr::Heap(other.into_owned().into_boxed_str()),
        }
    }

    #[inline]
    fn inline(bytes: &[u8]) -> IdStr {
        let mut buf = [0u8; INLINE];
        for (d, s) in buf.iter_mut().zip(bytes) {
            *d = *s;
        }
        IdStr::Inline {
            len: bytes.len() as u8,
            buf,
        }
    }

    /// The bytes of the id.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            IdStr::Inline { len, buf } => &buf[..*len as usize],
            IdStr::Heap(s) => s.as_bytes(),
        }
    }

    /// The id as a string (ids are stored from `str`s, so always UTF-8).
    pub fn as_str(&self) -> &str {
        match self {
            IdStr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            IdStr::Heap(s) => s,
        }
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
            assert_eq!(matches!(id, IdStr::Inline { .. }), s.len() <= INLINE);
            assert_eq!(IdStr::from_cow(Cow::Owned(s.to_string())), id);
        }
    }
}
