//! A vector in fixed-size chunks, cheap to snapshot.

use std::sync::Arc;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A vector stored in fixed-size chunks: pushing never moves what is stored
/// (no doubling copies of a large history, no 2x peak while growing), and a
/// clone shares every chunk (copy-on-write: a chunk is copied only if the
/// original is appended to or popped while the clone still holds it), so a
/// snapshot for a checkpoint costs almost nothing.
#[derive(Debug, Clone)]
pub struct Chunked<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Clone> Chunked<T> {
    /// Appends.
    #[inline]
    pub fn push(&mut self, x: T) {
        match self.chunks.last_mut() {
            Some(last) if !self.len.is_multiple_of(CHUNK) => Arc::make_mut(last).push(x),
            _ => {
                let mut v = Vec::with_capacity(CHUNK);
                v.push(x);
                self.chunks.push(Arc::new(v));
            }
        }
        self.len += 1;
    }

    /// Removes the last element.
    pub fn pop(&mut self) -> Option<T> {
        let x = Arc::make_mut(self.chunks.last_mut()?).pop()?;
        self.len -= 1;
        if self.chunks.last().is_some_and(|c| c.is_empty()) {
            self.chunks.pop();
        }
        Some(x)
    }
}

impl<T> Chunked<T> {
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Element `i`, if `i < len`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i >> CHUNK_BITS)?.get(i & (CHUNK - 1))
    }

    /// All elements in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}
