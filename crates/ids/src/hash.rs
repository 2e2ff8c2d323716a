//! Hashing: the finalizer that spreads the caller's hashes (for the
//! filters and the checksum) and the memtable's cheap hasher.

/// Spreads the caller's hash (murmur3's finalizer, a bijection): the filter
/// stays sound with a weak hash.
pub(crate) fn mix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The memtable's keys are already well-mixed 64-bit hashes: hashed once
/// more by a multiply (SipHash, std's default, costs several times that).
#[derive(Default, Clone, Copy)]
pub(crate) struct HashBuild;

impl std::hash::BuildHasher for HashBuild {
    type Hasher = MulHasher;
    fn build_hasher(&self) -> MulHasher {
        MulHasher(0)
    }
}

/// See [`HashBuild`].
#[derive(Default, Clone, Copy)]
pub(crate) struct MulHasher(u64);

impl std::hash::Hasher for MulHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}
