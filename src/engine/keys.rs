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

    /// The id of `key` if interned.
    pub fn get(&self, key: &str) -> Option<KeyId> {
        self.ids.get(key).copied()
    }

    /// The key string of an id.
    #[inline]
    pub fn name(&self, id: KeyId) -> &Arc<str> {
        &self.names[id as usize]
    }
}
