//! A string index without duplicate storage: positions of strings kept in
//! a vector the caller owns (the event ids of the open history), found by
//! hash with linear probing.

use streamforge_keys::hash_str;

const EMPTY: u64 = u64::MAX;

/// An open-addressing (linear probing) index from strings to positions in an
/// external vector that owns the strings, so each string is stored once. Each
/// slot packs 32 bits of hash with a 32-bit position.
#[derive(Debug, Clone)]
pub struct StrIndex {
    slots: Vec<u64>,
    len: usize,
}

impl Default for StrIndex {
    fn default() -> Self {
        StrIndex {
            slots: vec![EMPTY; 16],
            len: 0,
        }
    }
}

impl StrIndex {
    /// Empties the index, keeping its table: an index refilled to the size
    /// it had (the history tail after each flush) does not grow through
    /// every doubling again.
    pub fn clear(&mut self) {
        self.slots.fill(EMPTY);
        self.len = 0;
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The 32-bit hash this index uses for `s`.
    #[inline]
    pub fn hash(s: &str) -> u32 {
        (hash_str(s) >> 32) as u32
    }

    /// Reads the home slot of a hash, so that a batch can bring the slots it
    /// will probe into cache with independent loads before it probes them.
    #[inline]
    pub fn touch(&self, h: u32) -> u64 {
        self.slots[h as usize & self.mask()]
    }

    /// The position of `s` (with hash `h`), given `get(pos)` yields the string
    /// at a position.
    #[inline]
    pub fn find<'a>(&self, h: u32, s: &str, get: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        let mask = self.mask();
        let mut i = h as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                return None;
            }
            if (slot >> 32) as u32 == h && get(slot as u32) == s.as_bytes() {
                return Some(slot as u32);
            }
            i = (i + 1) & mask;
        }
    }

    /// Like [`StrIndex::find`], but on a miss returns the empty slot where
    /// the string would go, for [`StrIndex::insert_vacant`].
    #[inline]
    pub fn probe<'a>(&self, h: u32, s: &str, get: impl Fn(u32) -> &'a [u8]) -> Result<u32, usize> {
        let mask = self.mask();
        let mut i = h as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                return Err(i);
            }
            if (slot >> 32) as u32 == h && get(slot as u32) == s.as_bytes() {
                return Ok(slot as u32);
            }
            i = (i + 1) & mask;
        }
    }

    /// Inserts at the vacant slot a [`StrIndex::probe`] just returned (no
    /// change in between).
    #[inline]
    pub fn insert_vacant(&mut self, vacant: usize, h: u32, pos: u32) {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
            self.place(h, pos);
        } else {
            self.slots[vacant] = ((h as u64) << 32) | pos as u64;
        }
        self.len += 1;
    }

    /// Records that the string with hash `h` lives at `pos` (the caller
    /// checked it is absent).
    #[inline]
    pub fn insert(&mut self, h: u32, pos: u32) {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        self.place(h, pos);
        self.len += 1;
    }

    #[inline]
    fn place(&mut self, h: u32, pos: u32) {
        let mask = self.mask();
        let mut i = h as usize & mask;
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = ((h as u64) << 32) | pos as u64;
    }

    fn grow(&mut self) {
        let doubled = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for slot in old.into_iter().filter(|&s| s != EMPTY) {
            self.place((slot >> 32) as u32, slot as u32);
        }
    }

    /// Removes the entry for `s` at `pos` (backward-shift deletion).
    pub fn remove(&mut self, h: u32, pos: u32) {
        let mask = self.mask();
        let mut i = h as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                return;
            }
            if slot as u32 == pos {
                break;
            }
            i = (i + 1) & mask;
        }
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let slot = self.slots[j];
            if slot == EMPTY {
                break;
            }
            let home = (slot >> 32) as usize & mask;
            // Move the entry at j back to i unless its home lies cyclically in (i, j].
            let between = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !between {
                self.slots[i] = slot;
                i = j;
            }
        }
        self.slots[i] = EMPTY;
        self.len -= 1;
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_index_inserts_finds_and_removes() {
        let mut store: Vec<String> = Vec::new();
        let mut idx = StrIndex::default();
        let find = |idx: &StrIndex, store: &Vec<String>, s: &str| {
            idx.find(StrIndex::hash(s), s, |p| store[p as usize].as_bytes())
        };
        for i in 0..5000 {
            let s = format!("e{i}");
            assert!(find(&idx, &store, &s).is_none());
            store.push(s.clone());
            idx.insert(StrIndex::hash(&s), i);
        }
        for i in 0..5000u32 {
            assert_eq!(find(&idx, &store, &format!("e{i}")), Some(i));
        }
        // remove the last 2500 (rollback order) and every key must still resolve
        for i in (2500..5000u32).rev() {
            idx.remove(StrIndex::hash(&store[i as usize]), i);
            store.pop();
        }
        assert_eq!(idx.len(), 2500);
        for i in 0..2500u32 {
            assert_eq!(find(&idx, &store, &format!("e{i}")), Some(i));
        }
        for i in 2500..5000u32 {
            assert_eq!(find(&idx, &store, &format!("e{i}")), None);
        }
    }
}
