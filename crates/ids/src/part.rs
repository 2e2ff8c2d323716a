//! Parts: the encoding of a run's sorted entries, one blob per database
//! page (see the crate docs, "On disk").

use crate::checksum::{checked, checksum};
use crate::error::{corrupt, Result};
use crate::rice::{get_varint, put_varint, rice_bits, width, BitReader, BitWriter, ESCAPE};

/// A stored part claiming more entries than this is corrupt.
pub(crate) const MAX_PART_ENTRIES: u64 = 1 << 16;
/// The part format written here.
pub(crate) const PART_FORMAT: u8 = 1;
/// A part's skip table has an entry every `SKIP` entries: a lookup decodes
/// at most this many.
pub(crate) const SKIP: usize = 256;

/// Bytes of a part besides its bit stream and skip table, at most: format,
/// count, first hash, base, widths, checksum.
pub(crate) const PART_OVERHEAD: usize = 1 + 3 + 10 + 10 + 2 + 4;

pub(crate) fn deltas(entries: &[(u64, u64)]) -> impl Iterator<Item = u64> + '_ {
    entries.windows(2).map(|w| match w {
        [a, b] => b.0.wrapping_sub(a.0),
        _ => 0,
    })
}

/// The Rice parameter and position width for a run of sorted entries.
pub(crate) struct PartPlan {
    pub(crate) k: u32,
    pub(crate) pos_bits: u32,
}

impl PartPlan {
    pub(crate) fn new(entries: &[(u64, u64)]) -> PartPlan {
        let lo = entries.iter().map(|e| e.1).min().unwrap_or(0);
        let hi = entries.iter().map(|e| e.1).max().unwrap_or(0);
        let k = match (entries.first(), entries.last()) {
            (Some(&(first, _)), Some(&(last, _))) if entries.len() > 1 => {
                let mean = (last - first) / (entries.len() as u64 - 1);
                let k0 = width(mean).saturating_sub(1);
                (k0.saturating_sub(2)..=(k0 + 1).min(63))
                    .min_by_key(|&k| deltas(entries).map(|d| rice_bits(d, k)).sum::<u64>())
                    .unwrap_or(k0)
            }
            _ => 0,
        };
        PartPlan {
            k,
            pos_bits: width(hi - lo),
        }
    }

    /// How many of the first entries one part of at most `budget` bytes
    /// holds with this plan (at least one). A prefix's positions never need
    /// more bits than all of them.
    pub(crate) fn fit(&self, entries: &[(u64, u64)], budget: usize) -> usize {
        let mut bits = u64::from(self.pos_bits);
        for (i, d) in deltas(entries).enumerate() {
            let n = i + 2; // entries with this one
            let more = u64::from(self.pos_bits) + rice_bits(d, self.k);
            let skips = (n - 1) / SKIP * 12;
            let bytes = PART_OVERHEAD + skips + (bits + more).div_ceil(8) as usize;
            if bytes > budget || n > MAX_PART_ENTRIES as usize {
                return n - 1;
            }
            bits += more;
        }
        entries.len()
    }
}

/// Encodes sorted pairs (at least one) into `out` (cleared first), with Rice
/// parameter `k`.
pub(crate) fn encode_part(entries: &[(u64, u64)], k: u32, out: &mut Vec<u8>) {
    out.clear();
    let Some(&(first, _)) = entries.first() else {
        return;
    };
    let n = entries.len() as u64;
    let base = entries.iter().map(|e| e.1).min().unwrap_or(0);
    let top = entries.iter().map(|e| e.1 - base).max().unwrap_or(0);
    let pos_bits = width(top);
    let mut stream = Vec::new();
    let mut skips = Vec::new();
    let mut w = BitWriter {
        out: &mut stream,
        acc: 0,
        n: 0,
    };
    for &(_, p) in entries {
        w.put(p - base, pos_bits);
    }
    for (i, (d, &(h, _))) in deltas(entries).zip(entries.iter().skip(1)).enumerate() {
        let q = d >> k;
        if q >= ESCAPE {
            w.put(u64::MAX, ESCAPE as u32);
            w.put(d, 64);
        } else {
            // q ones, then a zero
            w.put((1u64 << q) - 1, q as u32 + 1);
            w.put(d, k);
        }
        if (i + 1) % SKIP == 0 {
            skips.extend_from_slice(&h.to_le_bytes());
            skips.extend_from_slice(&(w.bits() as u32).to_le_bytes());
        }
    }
    w.finish();
    out.push(PART_FORMAT);
    put_varint(out, n);
    put_varint(out, first);
    put_varint(out, base);
    out.push(pos_bits as u8);
    out.push(k as u8);
    out.extend_from_slice(&skips);
    out.extend_from_slice(&stream);
    let sum = checksum(out);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// A part's header and skip table, its bit stream positioned at the hash
/// deltas.
pub(crate) struct PartReader<'a> {
    pub(crate) n: u64,
    pub(crate) first: u64,
    pub(crate) base: u64,
    pub(crate) pos_bits: u32,
    pub(crate) k: u32,
    /// Entry `SKIP * (j + 1)`: its hash (u64 LE) and the bit where the delta
    /// of the next entry starts (u32 LE).
    pub(crate) skips: &'a [[u8; 12]],
    pub(crate) bits: BitReader<'a>,
}

impl<'a> PartReader<'a> {
    pub(crate) fn new(blob: &'a [u8], fence: u64) -> Result<PartReader<'a>> {
        let body = checked(blob, || "a part".to_string())?;
        let bad = |what: &str| corrupt(format!("a part: {what}"));
        let mut at = 0;
        let format = *body.first().ok_or_else(|| bad("empty"))?;
        at += 1;
        if format != PART_FORMAT {
            return Err(bad(&format!("unknown format {format}")));
        }
        let n = get_varint(body, &mut at).ok_or_else(|| bad("bad entry count"))?;
        let first = get_varint(body, &mut at).ok_or_else(|| bad("bad first hash"))?;
        let base = get_varint(body, &mut at).ok_or_else(|| bad("bad position base"))?;
        let pos_bits = u32::from(*body.get(at).ok_or_else(|| bad("truncated header"))?);
        let k = u32::from(*body.get(at + 1).ok_or_else(|| bad("truncated header"))?);
        at += 2;
        if n == 0 || n > MAX_PART_ENTRIES || pos_bits > 64 || k > 63 {
            return Err(bad(&format!("header n={n} pos_bits={pos_bits} k={k}")));
        }
        if first != fence {
            return Err(bad(&format!(
                "first hash {first:#x}, its fence is {fence:#x}"
            )));
        }
        let skip_bytes = ((n - 1) / SKIP as u64) as usize * 12;
        let skips = body
            .get(at..at + skip_bytes)
            .ok_or_else(|| bad("truncated skip table"))?
            .as_chunks::<12>()
            .0;
        let data = body.get(at + skip_bytes..).unwrap_or(&[]);
        // the deltas follow the positions
        let bits = BitReader {
            data,
            at: n * u64::from(pos_bits),
        };
        if bits.at > bits.end() {
            return Err(bad("truncated positions"));
        }
        Ok(PartReader {
            n,
            first,
            base,
            pos_bits,
            k,
            skips,
            bits,
        })
    }

    /// Skip entry `j`: (entry index, hash, bit of the next delta).
    pub(crate) fn skip(&self, j: usize) -> Option<(u64, u64, u64)> {
        let e = self.skips.get(j)?;
        let (h, off) = e.split_first_chunk::<8>()?;
        let off = u32::from_le_bytes(off.first_chunk::<4>().copied()?);
        Some((
            (j as u64 + 1) * SKIP as u64,
            u64::from_le_bytes(*h),
            off.into(),
        ))
    }

    pub(crate) fn pos(&self, i: u64) -> Result<u64> {
        let bits = u64::from(self.pos_bits);
        self.bits
            .get_at(i * bits, self.pos_bits)
            .and_then(|v| self.base.checked_add(v))
            .ok_or_else(|| corrupt("a part: bad position".to_string()))
    }

    pub(crate) fn next_hash(&mut self, prev: u64) -> Result<u64> {
        self.bits
            .rice(self.k)
            .and_then(|d| prev.checked_add(d))
            .ok_or_else(|| corrupt("a part: bad hash delta".to_string()))
    }
}

/// Appends the positions of `hash` in the part; true when the part holds
/// hashes above it (so later parts cannot hold it). Decodes from the last
/// skip entry below `hash`: at most [`SKIP`] entries before it.
pub(crate) fn search_part(blob: &[u8], fence: u64, hash: u64, out: &mut Vec<u64>) -> Result<bool> {
    let mut r = PartReader::new(blob, fence)?;
    let below = r.skips.partition_point(|e| {
        e.first_chunk::<8>()
            .is_some_and(|h| u64::from_le_bytes(*h) < hash)
    });
    let (mut i, mut h) = (0, r.first);
    if let Some(j) = below.checked_sub(1) {
        let (at, skip_hash, bit) = r
            .skip(j)
            .ok_or_else(|| corrupt("a part: bad skip table".to_string()))?;
        (i, h) = (at, skip_hash);
        r.bits.at = bit;
    }
    loop {
        if h == hash {
            out.push(r.pos(i)?);
        } else if h > hash {
            return Ok(true);
        }
        i += 1;
        if i >= r.n {
            return Ok(false);
        }
        h = r.next_hash(h)?;
    }
}

/// Decodes a whole part into `out`, checking it to the last bit.
pub(crate) fn decode_part(blob: &[u8], fence: u64, out: &mut Vec<(u64, u64)>) -> Result<()> {
    let mut r = PartReader::new(blob, fence)?;
    let mut h = r.first;
    out.reserve(r.n as usize);
    for i in 0..r.n {
        if i > 0 {
            h = r.next_hash(h)?;
            if i % SKIP as u64 == 0 {
                let j = (i / SKIP as u64 - 1) as usize;
                if r.skip(j) != Some((i, h, r.bits.at)) {
                    return Err(corrupt("a part: its skip table does not match".to_string()));
                }
            }
        }
        out.push((h, r.pos(i)?));
    }
    if r.bits.end().saturating_sub(r.bits.at) >= 8 {
        return Err(corrupt("a part: bytes after its entries".to_string()));
    }
    Ok(())
}
