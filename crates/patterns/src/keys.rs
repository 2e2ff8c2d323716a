//! Interned keys: each distinct key string is stored once and states refer
//! to it by a dense [`KeyId`], so a state lookup is an index, not a hash.
//! Keys of up to 22 bytes are held inline in the map's slots, so looking one
//! up reads one slot, not a slot and a separately allocated string.
//!
//! Hashing uses a small deterministic FxHash-style hasher (no randomness in
//! the engine); iteration order of the map never reaches an output (expiry
//! sorts keys by their string, checkpoints too).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

/// Index of an interned key.
pub(crate) type KeyId = u32;

/// FxHash-style hasher with a final avalanche.
#[derive(Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl Hasher for Fx {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(SEED);
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        let last = u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59);
        self.0 = (self.0.rotate_left(5) ^ last).wrapping_mul(SEED);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
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

/// The key interner.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    ids: HashMap<Name, KeyId, BuildHasherDefault<Fx>>,
    names: Vec<Arc<str>>,
}

impl Keys {
    /// The id of `key`, interning it if new. `None` when 2^32 keys exist.
    #[inline]
    #[cfg(test)]
    pub fn intern(&mut self, key: &str) -> Option<KeyId> {
        self.intern_bytes(key.as_bytes())
    }

    /// [`Keys::intern`] by the key's bytes (UTF-8: an event's key).
    #[inline]
    pub fn intern_bytes(&mut self, bytes: &[u8]) -> Option<KeyId> {
        if let Some(&id) = self.ids.get(bytes) {
            return Some(id);
        }
        self.insert(&String::from_utf8_lossy(bytes))
    }

    #[cold]
    fn insert(&mut self, key: &str) -> Option<KeyId> {
        // None: the key table is full; callers check the room first.
        let id = KeyId::try_from(self.names.len()).ok()?;
        let name: Arc<str> = Arc::from(key);
        self.ids.insert(Name::new(key, &name), id);
        self.names.push(name);
        Some(id)
    }

    /// The string of an interned key.
    #[inline]
    pub fn name(&self, id: KeyId) -> &Arc<str> {
        &self.names[id as usize]
    }

    /// Heap bytes held (names, the list and the map's slots).
    pub fn heap_bytes(&self) -> usize {
        let names: usize = self.names.iter().map(|n| 16 + n.len()).sum();
        names + self.names.capacity() * 16 + self.ids.capacity() * 33
    }

    /// How many keys are interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_keys_intern_once() {
        let mut k = Keys::default();
        let long = "k".repeat(100);
        let a = k.intern("").unwrap();
        let b = k.intern("acct-1").unwrap();
        let c = k.intern(&long).unwrap();
        let d = k.intern(&"x".repeat(22)).unwrap();
        assert_eq!((a, b, c, d), (0, 1, 2, 3));
        assert_eq!(k.intern("acct-1"), Some(1));
        assert_eq!(k.intern(&long), Some(2));
        assert_eq!(k.intern(&"x".repeat(22)), Some(3));
        assert_eq!(k.intern("é"), Some(4));
        assert_eq!(&**k.name(2), long);
        assert_eq!(k.len(), 5);
    }
}
