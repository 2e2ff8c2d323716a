//! How a logged command's body is stored: as received, or LZ4-compressed.
//!
//! A command row holds what the service gives it: the deliveries of an
//! ingest in their binary form, a compact form of watermarks and idle
//! calls, a pattern push's request body as it arrived. Large bodies may
//! be stored as an LZ4 block (`lz4_flex`, pure Rust) behind the raw length as a
//! little-endian `u32`; `commands.encoding` says which (migration 0007; rows
//! logged before it are `0`, as received). Recovery gets the exact bytes
//! back and replays them as before.
//!
//! Why: a commit's fsync costs in proportion to the bytes it syncs, and an
//! NDJSON batch is mostly repeated field names; LZ4 stores the bench's event
//! batches in about a third of the bytes for ~0.1 ms of CPU per 100 KB,
//! spent by the caller before it queues for the commit (never by the group
//! commit's leader).

use super::error::{Error, Result};

/// `commands.encoding` of a body stored as received.
pub const RAW: i64 = 0;
/// `commands.encoding` of an LZ4 block behind its raw length (`u32` LE).
pub const LZ4: i64 = 1;

/// Bodies shorter than this are stored as received (watermarks, single
/// events: compressing them buys nothing).
const MIN_COMPRESS: usize = 1024;

/// A command body as the log stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBody {
    /// [`RAW`] or [`LZ4`].
    pub encoding: i64,
    /// The stored bytes.
    pub bytes: Vec<u8>,
}

impl StoredBody {
    /// `raw`, compressed when that makes it at least 1/8 smaller.
    pub fn pack(raw: &[u8]) -> StoredBody {
        if raw.len() >= MIN_COMPRESS && u32::try_from(raw.len()).is_ok() {
            let z = lz4_flex::block::compress_prepend_size(raw);
            if z.len() <= raw.len() - raw.len() / 8 {
                return StoredBody {
                    encoding: LZ4,
                    bytes: z,
                };
            }
        }
        StoredBody {
            encoding: RAW,
            bytes: raw.to_vec(),
        }
    }

    /// A body stored as received (a compact form written by the service).
    pub fn raw(bytes: Vec<u8>) -> StoredBody {
        StoredBody {
            encoding: RAW,
            bytes,
        }
    }
}

/// The body as received, from a stored row.
pub fn unpack(encoding: i64, bytes: Vec<u8>) -> Result<Vec<u8>> {
    match encoding {
        RAW => Ok(bytes),
        LZ4 => {
            let corrupt = |why: &str| Error::Corrupt(format!("a compressed command body {why}"));
            let (len, block) = bytes
                .split_first_chunk::<4>()
                .ok_or_else(|| corrupt("is shorter than its length"))?;
            let len = u32::from_le_bytes(*len) as usize;
            // LZ4 expands at most ~255x: a larger length is not a real one
            // (and must not become a huge allocation).
            if len > block.len().saturating_mul(255).saturating_add(16) {
                return Err(corrupt("claims an impossible length"));
            }
            let out = lz4_flex::block::decompress(block, len)
                .map_err(|e| corrupt(&format!("does not decompress: {e}")))?;
            if out.len() != len {
                return Err(corrupt("decompresses to another length than stored"));
            }
            Ok(out)
        }
        other => Err(Error::Corrupt(format!(
            "a command body of an unknown encoding {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for i in 0..n {
            b.extend_from_slice(
                format!(
                    "{{\"partition\":\"p{}\",\"offset\":{i},\"event\":{{\"id\":\"e{i}\",\"key\":\"k{}\",\"time\":{},\"value\":{}}}}}\n",
                    i % 4,
                    i % 97,
                    1_700_000_000_000u64 + i as u64 * 7,
                    i * 13 % 1000
                )
                .as_bytes(),
            );
        }
        b
    }

    #[test]
    fn large_bodies_are_compressed_and_come_back_exactly() {
        let raw = batch(1000);
        let s = StoredBody::pack(&raw);
        assert_eq!(s.encoding, LZ4);
        assert!(
            s.bytes.len() * 2 < raw.len(),
            "{} of {}",
            s.bytes.len(),
            raw.len()
        );
        assert_eq!(unpack(s.encoding, s.bytes).unwrap(), raw);
    }

    #[test]
    fn small_or_incompressible_bodies_are_stored_as_received() {
        let small = br#"{"partition":"p0","watermark":10}"#;
        assert_eq!(StoredBody::pack(small), StoredBody::raw(small.to_vec()));
        // bytes that do not compress (a xorshift stream)
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let s = StoredBody::pack(&noise);
        assert_eq!(s.encoding, RAW);
        assert_eq!(unpack(s.encoding, s.bytes).unwrap(), noise);
    }

    #[test]
    fn damaged_rows_are_refused_not_trusted() {
        let raw = batch(200);
        let s = StoredBody::pack(&raw);
        assert_eq!(s.encoding, LZ4);
        // an unknown encoding
        assert!(unpack(7, s.bytes.clone()).is_err());
        // too short for its length
        assert!(unpack(LZ4, vec![1, 2]).is_err());
        // a length no block of this size can produce
        let mut huge = s.bytes.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(unpack(LZ4, huge).is_err());
        // a different length than the block holds
        let mut short = s.bytes.clone();
        short[..4].copy_from_slice(&((raw.len() - 1) as u32).to_le_bytes());
        assert!(unpack(LZ4, short).is_err());
        // truncations and flipped bytes: an error or other bytes, never a panic
        for cut in [5, s.bytes.len() / 2, s.bytes.len() - 1] {
            // Either outcome is fine here: the test is that it returns.
            let _ = unpack(LZ4, s.bytes[..cut].to_vec());
        }
        for i in (4..s.bytes.len()).step_by(37) {
            let mut b = s.bytes.clone();
            b[i] ^= 0x5A;
            // Either outcome is fine: the test is that it returns.
            let _ = unpack(LZ4, b);
        }
    }
}
