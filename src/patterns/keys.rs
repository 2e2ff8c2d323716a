//! Interned keys: each distinct key string is stored once and states refer
//! to it by a dense [`KeyId`], so a state lookup is an index, not a hash.
//!
//! Hashing uses a small deterministic FxHash-style hasher (no randomness in
//! the engine); iteration order of the map never reaches an output (expiry
//! sorts keys by their string, checkpoints too).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
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

/// The key interner.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    ids: HashMap<Arc<str>, KeyId, BuildHasherDefault<Fx>>,
    names: Vec<Arc<str>>,
}

impl Keys {
    /// The id of `key`, interning it if new. `None` when 2^32 keys exist.
    #[inline]
    pub fn intern(&mut self, key: &str) -> Option<KeyId> {
        if let Some(&id) = self.ids.get(key) {
            return Some(id);
        }
        let id = KeyId::try_from(self.names.len()).ok()?;
        let name: Arc<str> = Arc::from(key);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        Some(id)
    }

    /// The string of an interned key.
    #[inline]
    pub fn name(&self, id: KeyId) -> &Arc<str> {
        &self.names[id as usize]
    }

    /// How many keys are interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }
}
