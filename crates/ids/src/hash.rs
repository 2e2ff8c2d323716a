//! The finalizer that spreads the caller's hashes (for the filters and the
//! checksum). The memtable's maps use the engines' hasher
//! (`streamforge_keys::FxBuild`).

/// Spreads the caller's hash (murmur3's finalizer, a bijection): the filter
/// stays sound with a weak hash.
pub(crate) fn mix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}
