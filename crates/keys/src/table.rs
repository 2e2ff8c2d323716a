//! The key interner of both engines: each distinct key string is stored
//! once, as an `Arc<str>` that results share, and state refers to it by a
//! dense [`KeyId`], so a state lookup is an index, not a hash.
//!
//! - Keys of up to 22 bytes are also held inline in the map's slots, so
//!   looking one up reads one slot, not a slot and a separately allocated
//!   string.
//! - The names are kept in chunks of [`CHUNK`] behind `Arc`s, so that the
//!   frozen copy a checkpoint takes under the engines lock
//!   ([`KeyTable::frozen`]) shares every full chunk instead of copying
//!   every key ever seen: it costs one pointer per chunk and at most one
//!   partial chunk, whatever the number of keys.
//! - Byte-order ranks ([`KeyTable::prepare_ranks`]) let the window engine
//!   sort addresses by key without comparing strings.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
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
    ids: FxMap<Name, KeyId>,
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
        if let Some(id) = self.lookup(key.as_bytes()) {
            return id;
        }
        self.insert(key)
    }

    /// [`KeyTable::intern`] by the key's bytes (UTF-8, as an event's key
    /// is: anything else is stored as its lossy text).
    #[inline]
    pub fn intern_bytes(&mut self, key: &[u8]) -> KeyId {
        if let Some(id) = self.lookup(key) {
            return id;
        }
        self.insert(&String::from_utf8_lossy(key))
    }

    #[inline]
    fn lookup(&mut self, key: &[u8]) -> Option<KeyId> {
        if self.frozen {
            self.thaw();
        }
        self.ids.get(key).copied()
    }

    #[cold]
    fn insert(&mut self, key: &str) -> KeyId {
        let id = self.len as KeyId;
        let name: Arc<str> = Arc::from(key);
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        self.ids.insert(Name::new(key, &name), id);
        if let Some(last) = self.chunks.last_mut() {
            Arc::make_mut(last).push(name);
        }
        self.len += 1;
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
            ids.insert(Name::new(name, name), id as KeyId);
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

    /// Whether no key is interned.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The id of `key` if interned.
    pub fn get(&self, key: &str) -> Option<KeyId> {
        if self.frozen {
            return self.names().position(|n| &**n == key).map(|i| i as KeyId);
        }
        self.ids.get(key.as_bytes()).copied()
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

    /// Heap bytes held (names, the chunks and the map's slots): an
    /// estimate for diagnostics.
    pub fn heap_bytes(&self) -> usize {
        let names: usize = self.names().map(|n| 16 + n.len()).sum();
        let slot = std::mem::size_of::<(Name, KeyId)>() + 1;
        names + self.chunks.len() * (16 + CHUNK * 16) + self.ids.capacity() * slot
    }
}

/// A key as the map holds it: inline when short.
#[derive(Debug, Clone)]
enum Name {
    Inline { len: u8, bytes: [u8; 22] },
    Shared(Arc<str>),
}

impl Name {
    fn new(s: &str, shared: &Arc<str>) -> Name {
        if s.len() <= 22 {
            let mut bytes = [0u8; 22];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Name::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            Name::Shared(shared.clone())
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Name::Shared(s) => s.as_bytes(),
        }
    }
}

/// Looked up by the key's bytes (its hash and equality are those of the
/// byte slice).
impl Borrow<[u8]> for Name {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Hash for Name {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_bytes().hash(h);
    }
}

impl PartialEq for Name {
    #[inline]
    fn eq(&self, other: &Name) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

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

    #[test]
    fn short_and_long_keys_intern_once() {
        let mut k = KeyTable::default();
        let long = "k".repeat(100);
        let a = k.intern("");
        let b = k.intern("acct-1");
        let c = k.intern(&long);
        let d = k.intern(&"x".repeat(22));
        assert_eq!((a, b, c, d), (0, 1, 2, 3));
        assert_eq!(k.intern_bytes(b"acct-1"), 1);
        assert_eq!(k.intern(&long), 2);
        assert_eq!(k.intern_bytes(long.as_bytes()), 2);
        assert_eq!(k.intern(&"x".repeat(22)), 3);
        assert_eq!(k.intern_bytes("é".as_bytes()), 4);
        assert_eq!(k.get("é"), Some(4));
        assert_eq!(k.get(&"x".repeat(23)), None);
        assert_eq!(&**k.name(2), long);
        assert_eq!(k.len(), 5);
        // A frozen copy finds short and long keys alike once it interns.
        let mut f = k.frozen();
        assert_eq!(f.intern("acct-1"), 1);
        assert_eq!(f.intern(&long), 2);
        assert_eq!(f.intern("new"), 5);
    }
}
