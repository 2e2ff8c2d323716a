//! Interned grouping keys: each distinct key string is stored once, as an
//! `Arc<str>` that results share, and buckets refer to it by a `KeyId`.

use std::sync::Arc;

use super::hash::FxMap;

/// Index of an interned key.
pub type KeyId = u32;

/// The key interner.
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    ids: FxMap<Arc<str>, KeyId>,
    names: Vec<Arc<str>>,
    /// Byte-order rank of each key, valid for the first `ranked` keys.
    ranks: Vec<u32>,
    ranked: usize,
}

impl KeyTable {
    /// The id of `key`, interning it if new.
    #[inline]
    pub fn intern(&mut self, key: &str) -> KeyId {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.names.len() as KeyId;
        let name: Arc<str> = Arc::from(key);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    /// Number of interned keys.
    #[inline]
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The id of `key` if interned.
    pub fn get(&self, key: &str) -> Option<KeyId> {
        self.ids.get(key).copied()
    }

    /// Makes [`KeyTable::rank`] valid for every key if that is cheap relative
    /// to sorting `n` addresses: ranks are recomputed only when keys were
    /// added since and `n` is at least an eighth of the key count, so the
    /// cost stays proportional to the sort. Returns whether ranks are valid.
    pub fn prepare_ranks(&mut self, n: usize) -> bool {
        if self.ranked == self.names.len() {
            return true;
        }
        if n.saturating_mul(8) < self.names.len() {
            return false;
        }
        let mut order: Vec<KeyId> = (0..self.names.len() as KeyId).collect();
        order.sort_unstable_by(|a, b| self.names[*a as usize].cmp(&self.names[*b as usize]));
        self.ranks.resize(self.names.len(), 0);
        for (rank, id) in order.into_iter().enumerate() {
            self.ranks[id as usize] = rank as u32;
        }
        self.ranked = self.names.len();
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
        &self.names[id as usize]
    }
}
