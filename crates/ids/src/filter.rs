//! Bloom filter: blocked, one 512-bit cache line per entry (RocksDB's
//! FastLocalBloom scheme).

/// Filter bits per entry (with [`PROBES`]: ~0.17% false positives per
/// run, against ~0.94% with 10 bits and 6 probes). Each new id probes every
/// run's filter, and a false positive costs a part read (a page, its
/// checksum, a decode): with the ~9 runs of 50M ids, 10 bits sent ~9% of
/// new ids to disk, and the ingest cost per event grew with the lifetime
/// (BENCHMARKS.md, growth). Stored per run with its probe count, so runs
/// written with other settings stay valid.
pub(crate) const BITS_PER_ENTRY: u64 = 14;
/// Bits set per entry in its 512-bit block.
pub(crate) const PROBES: u32 = 8;
/// A filter block: one 64-byte cache line.
pub(crate) const BLOCK_BITS: u64 = 512;
pub(crate) const WORDS_PER_BLOCK: usize = 8;
/// Filter bytes per `id_filters` row.
pub(crate) const PIECE_BYTES: usize = 1 << 20;

/// A run's filter, in memory.
pub(crate) struct Bloom {
    pub(crate) words: Vec<u64>,
    pub(crate) blocks: u64,
    pub(crate) probes: u32,
    /// The layout: the block of a hash is picked by the high bits of the
    /// hash itself (so a run's sorted entries fill its filter in order, a
    /// piece at a time: [`crate::writer::RunWriter`]), not of its
    /// [`crate::hash::mix`] (the layout of the runs written before it;
    /// stored per run, `filter_probes` + [`SORTED_LAYOUT`]).
    pub(crate) sorted: bool,
}

/// Added to a run's stored `filter_probes` when its filter has the sorted
/// layout ([`Bloom::sorted`]).
pub(crate) const SORTED_LAYOUT: i64 = 1 << 8;

/// Blocks of a filter for `expected` entries.
pub(crate) fn filter_blocks(expected: u64) -> u64 {
    expected
        .max(1)
        .saturating_mul(BITS_PER_ENTRY)
        .div_ceil(BLOCK_BITS)
        .max(1)
}

/// The block (of `blocks`) that holds `hash` (`mixed`: its
/// [`crate::hash::mix`]).
pub(crate) fn block_of(blocks: u64, sorted: bool, hash: u64, mixed: u64) -> u64 {
    let key = if sorted { hash } else { mixed };
    (((key as u128) * (blocks as u128)) >> 64) as u64
}

/// Sets `mixed`'s bits in its block's words.
pub(crate) fn set_bits(block: &mut [u64], mixed: u64, probes: u32) {
    let mut h = mixed as u32;
    for _ in 0..probes {
        let bit = (h >> 23) as usize;
        if let Some(w) = block.get_mut(bit >> 6) {
            *w |= 1 << (bit & 63);
        }
        h = h.wrapping_mul(0x9E37_79B9);
    }
}

/// Whether every one of `mixed`'s bits is set in its block's words.
pub(crate) fn has_bits(block: &[u64], mixed: u64, probes: u32) -> bool {
    let mut h = mixed as u32;
    for _ in 0..probes {
        let bit = (h >> 23) as usize;
        match block.get(bit >> 6) {
            Some(w) if w & (1 << (bit & 63)) != 0 => {}
            _ => return false,
        }
        h = h.wrapping_mul(0x9E37_79B9);
    }
    true
}

impl Bloom {
    pub(crate) fn may_contain(&self, hash: u64, mixed: u64) -> bool {
        let base = block_of(self.blocks, self.sorted, hash, mixed) as usize * WORDS_PER_BLOCK;
        let Some(block) = self.words.get(base..base + WORDS_PER_BLOCK) else {
            return true;
        };
        has_bits(block, mixed, self.probes)
    }
}
