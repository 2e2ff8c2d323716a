//! A vector in fixed-size chunks, cheap to snapshot.

use std::sync::Arc;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A vector stored in fixed-size chunks: pushing never moves what is stored
/// (no doubling copies of a large history, no 2x peak while growing), and a
/// clone shares every full chunk, so a snapshot for a checkpoint costs
/// little: a copy of the last, partly filled chunk.
///
/// That last chunk is owned outright (`open`), not shared: a push is a
/// plain `Vec` push. (Kept behind an `Arc` like the others, every push
/// asked the reference count whether the chunk was shared, an atomic
/// operation on another cache line: 3% of the server's CPU during `send`.)
#[derive(Debug, Clone)]
pub struct Chunked<T> {
    /// Full chunks, `CHUNK` elements each.
    full: Vec<Arc<Vec<T>>>,
    /// The elements after them (fewer than `CHUNK`).
    open: Vec<T>,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            full: Vec::new(),
            open: Vec::new(),
        }
    }
}

impl<T: Clone> Chunked<T> {
    /// Appends.
    #[inline]
    pub fn push(&mut self, x: T) {
        if self.open.capacity() == 0 {
            self.open.reserve_exact(CHUNK);
        }
        self.open.push(x);
        if self.open.len() == CHUNK {
            let done = std::mem::take(&mut self.open);
            self.full.push(Arc::new(done));
        }
    }

    /// Removes the last element.
    pub fn pop(&mut self) -> Option<T> {
        if self.open.is_empty() {
            let last = self.full.pop()?;
            self.open = Arc::try_unwrap(last).unwrap_or_else(|shared| (*shared).clone());
        }
        self.open.pop()
    }
}

impl<T> Chunked<T> {
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.full.len() * CHUNK + self.open.len()
    }

    /// Element `i`, if `i < len`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        match self.full.get(i >> CHUNK_BITS) {
            Some(chunk) => chunk.get(i & (CHUNK - 1)),
            None => self.open.get(i - self.full.len() * CHUNK),
        }
    }

    /// All elements in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.full.iter().flat_map(|c| c.iter()).chain(&self.open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes and pops across chunk boundaries, with snapshots taken on the
    /// way, agree with a plain vector; a snapshot never sees later changes.
    #[test]
    fn behaves_as_a_vector_and_snapshots_stay_as_taken() {
        let mut c: Chunked<u32> = Chunked::default();
        let mut model: Vec<u32> = Vec::new();
        let mut snaps: Vec<(Chunked<u32>, Vec<u32>)> = Vec::new();
        let mut x = 0u32;
        for round in 0..6 {
            let pushes = CHUNK + CHUNK / 3 + round * 17;
            for _ in 0..pushes {
                c.push(x);
                model.push(x);
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            }
            snaps.push((c.clone(), model.clone()));
            for _ in 0..(CHUNK / 2 + round * 1000) {
                assert_eq!(c.pop(), model.pop());
            }
            snaps.push((c.clone(), model.clone()));
            assert_eq!(c.len(), model.len());
        }
        while let Some(v) = model.pop() {
            assert_eq!(c.pop(), Some(v));
        }
        assert_eq!((c.pop(), c.len()), (None, 0));
        for (snap, want) in &snaps {
            assert_eq!(snap.len(), want.len());
            assert!(snap.iter().eq(want.iter()));
            for i in [
                0,
                1,
                CHUNK - 1,
                CHUNK,
                want.len().saturating_sub(1),
                want.len(),
            ] {
                assert_eq!(snap.get(i), want.get(i), "{i}");
            }
        }
    }
}
