//! Interned grouping keys: each distinct key string is stored once, as an
//! `Arc<str>` that results share, and buckets refer to it by a `KeyId`.
//!
//! The names are kept in chunks of [`CHUNK`] behind `Arc`s, so that the
//! frozen copy a checkpoint takes under the processor lock
//! ([`KeyTable::frozen`]) shares every full chunk instead of copying every
//! key ever seen: it costs one pointer per chunk and at most one partial
//! chunk, whatever the number of keys.

use std::sync::Arc;

use super::hash::FxMap;

/// Index of an interned key.
pub type KeyId = u32;

/// Names per chunk.
const CHUNK: usize = 4096;

/// The key interner.
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    /// Empty in a frozen copy until something interns or looks up by name
    /// in it (see [`KeyTable::frozen`]).
    ids: FxMap<Arc<str>, KeyId>,
    /// The names by id, in chunks of [`CHUNK`] (the last one may be
    /// partial); shared with frozen copies.
    chunks: Vec<Arc<Vec<Arc<str>>>>,
    len: usize,
    /// Byte-order rank of each key, valid for the first `ranked` keys
    /// (shared with frozen copies; recomputed whole).
    ranks: Arc<Vec<u32>>,
    ranked: usize,
    /// `ids` is not filled (a frozen copy).
    frozen: bool,
}

impl KeyTable {
    /// The id of `key`, interning it if new.
    #[inline]
    pub fn intern(&mut self, key: &str) -> KeyId {
        if self.frozen {
            self.thaw();
        }
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.len as KeyId;
        let name: Arc<str> = Arc::from(key);
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        if let Some(last) = self.chunks.last_mut() {
            Arc::make_mut(last).push(name.clone());
        }
        self.len += 1;
        self.ids.insert(name, id);
        id
    }

    /// A copy for reading (a checkpoint's snapshot): it shares the names'
    /// chunks and the ranks, and has no map from names to ids until it
    /// needs one (the first `intern` builds it; `get` scans meanwhile).
    pub fn frozen(&self) -> KeyTable {
        KeyTable {
            ids: FxMap::default(),
            chunks: self.chunks.clone(),
            len: self.len,
            ranks: self.ranks.clone(),
            ranked: self.ranked,
            frozen: true,
        }
    }

    /// Fills the map from names to ids of a frozen copy.
    fn thaw(&mut self) {
        let mut ids = FxMap::default();
        for (id, name) in self.names().enumerate() {
            ids.insert(name.clone(), id as KeyId);
        }
        self.ids = ids;
        self.frozen = false;
    }

    fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Number of interned keys.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The id of `key` if interned.
    pub fn get(&self, key: &str) -> Option<KeyId> {
        if self.frozen {
            return self.names().position(|n| &**n == key).map(|i| i as KeyId);
        }
        self.ids.get(key).copied()
    }

    /// Makes [`KeyTable::rank`] valid for every key if that is cheap relative
    /// to sorting `n` addresses: ranks are recomputed only when keys were
    /// added since and `n` is at least an eighth of the key count, so the
    /// cost stays proportional to the sort. Returns whether ranks are valid.
    pub fn prepare_ranks(&mut self, n: usize) -> bool {
        if self.ranked == self.len {
            return true;
        }
        if n.saturating_mul(8) < self.len {
            return false;
        }
        let mut order: Vec<KeyId> = (0..self.len as KeyId).collect();
        order.sort_unstable_by(|a, b| self.name(*a).cmp(self.name(*b)));
        let mut ranks = vec![0u32; self.len];
        for (rank, id) in order.into_iter().enumerate() {
            ranks[id as usize] = rank as u32;
        }
        self.ranks = Arc::new(ranks);
        self.ranked = self.len;
        true
    }

    /// The byte-order rank of a key (valid after `prepare_ranks` said so).
    #[inline]
    pub fn rank(&self, id: KeyId) -> u32 {
        self.ranks[id as usize]
    }

    /// The key string of an id.
    #[inline]
    pub fn name(&self, id: KeyId) -> &Arc<str> {
        let id = id as usize;
        &self.chunks[id / CHUNK][id % CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frozen_copy_shares_full_chunks_and_reads_the_same() {
        let mut t = KeyTable::default();
        for i in 0..(CHUNK * 2 + 10) {
            assert_eq!(t.intern(&format!("k{i}")), i as KeyId);
        }
        assert!(t.prepare_ranks(t.len()));
        let f = t.frozen();
        assert!(Arc::ptr_eq(&t.chunks[0], &f.chunks[0]));
        assert!(Arc::ptr_eq(&t.ranks, &f.ranks));
        assert!(f.ids.is_empty());
        for i in [0, CHUNK - 1, CHUNK, CHUNK * 2 + 9] {
            let id = i as KeyId;
            assert_eq!(f.name(id), t.name(id));
            assert_eq!(f.rank(id), t.rank(id));
            assert_eq!(f.get(&format!("k{i}")), Some(id));
        }
        assert_eq!(f.get("nope"), None);
        // The original goes on (its partial chunk is copied once, not the
        // copy's), and the copy can intern too.
        let mut f = f;
        assert_eq!(t.intern("new"), (CHUNK * 2 + 10) as KeyId);
        assert_eq!(f.len(), CHUNK * 2 + 10);
        assert_eq!(f.intern("k5"), 5);
        assert_eq!(f.intern("other"), (CHUNK * 2 + 10) as KeyId);
        assert_eq!(&**t.name((CHUNK * 2 + 10) as KeyId), "new");
        assert_eq!(&**f.name((CHUNK * 2 + 10) as KeyId), "other");
    }
}
