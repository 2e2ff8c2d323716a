//! The stored form of one command's changes: a compact binary chunk.
//!
//! A change is ~150 bytes of JSON but ~20 bytes here, and the changelog is
//! most of what the service writes (1.5 changes per event in the benchmark
//! workload), so the WAL, the database copy and every commit's fsync carry
//! about half the bytes. Pages render each change back to JSON with the
//! engine's own `Serialize` (the bytes the ingest answer carried), and
//! recovery compares a replayed command's chunk with the stored one byte for
//! byte.
//!
//! Layout (integers are LEB128 varints; signed ones zigzag-encoded; sequences
//! are implicit: the row's `seq` then one per change):
//!
//! ```text
//! MAGIC  n  change*n
//! change = flags  window  key  Δstart  Δend  count  sum  min  Δmax
//! flags  = bit 0: upsert (else retract), bit 1: new window name,
//!          bit 2: new key
//! window = new: len bytes (UTF-8), appended to the chunk's window table
//!          else: index into that table (same for key, its own table)
//! Δstart = start - the previous change's start (0 before the first),
//! Δend = end - start, Δmax = max - min (wrapping: every i128/i64 value
//! round-trips)
//! ```
//!
//! Rows written before schema version 3 hold a JSON array (or one JSON
//! change): their first byte is `[` or `{`, never [`MAGIC`].

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::{Change, ChangeOp, WindowResult};

/// First byte of a binary chunk.
pub const MAGIC: u8 = 0xB1;

const UPSERT: u8 = 1;
const NEW_WINDOW: u8 = 2;
const NEW_KEY: u8 = 4;

fn put_u(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_i(out: &mut Vec<u8>, v: i128) {
    put_u(out, ((v << 1) ^ (v >> 127)) as u128);
}

/// The chunk-local table of window names or keys.
#[derive(Default)]
struct Names<'a> {
    index: HashMap<&'a str, usize>,
}

/// A name as written: a reference into the table, or new.
enum Name<'a> {
    Seen(usize),
    New(&'a str),
}

impl<'a> Names<'a> {
    fn lookup(&mut self, name: &'a str) -> Name<'a> {
        let next = self.index.len();
        match self.index.entry(name) {
            Entry::Occupied(e) => Name::Seen(*e.get()),
            Entry::Vacant(e) => {
                e.insert(next);
                Name::New(name)
            }
        }
    }
}

fn put_name(out: &mut Vec<u8>, name: &Name<'_>) {
    match name {
        Name::Seen(i) => put_u(out, *i as u128),
        Name::New(s) => {
            put_u(out, s.len() as u128);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// The binary chunk of `changes` (consecutive sequences).
pub fn encode(changes: &[Change]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + changes.len() * 24);
    out.push(MAGIC);
    put_u(&mut out, changes.len() as u128);
    let (mut windows, mut keys) = (Names::default(), Names::default());
    let mut prev_start = 0i128;
    for c in changes {
        let r = &c.result;
        let window = windows.lookup(&r.window);
        let key = keys.lookup(&r.key);
        let mut flags = 0;
        if c.op == ChangeOp::Upsert {
            flags |= UPSERT;
        }
        if matches!(window, Name::New(_)) {
            flags |= NEW_WINDOW;
        }
        if matches!(key, Name::New(_)) {
            flags |= NEW_KEY;
        }
        out.push(flags);
        put_name(&mut out, &window);
        put_name(&mut out, &key);
        put_i(&mut out, r.start.wrapping_sub(prev_start));
        put_i(&mut out, r.end.wrapping_sub(r.start));
        put_u(&mut out, u128::from(r.count));
        put_i(&mut out, r.sum);
        put_i(&mut out, i128::from(r.min));
        put_u(&mut out, u128::from(r.max.wrapping_sub(r.min) as u64));
        prev_start = r.start;
    }
    out
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| format!("truncated at byte {}", self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn u(&mut self, bits: u32) -> Result<u128, String> {
        let mut v = 0u128;
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            let part = u128::from(b & 0x7f);
            if shift >= bits || (shift > 0 && bits - shift < 7 && part >> (bits - shift) != 0) {
                return Err(format!("integer too large at byte {}", self.at));
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    fn i(&mut self, bits: u32) -> Result<i128, String> {
        let z = self.u(bits)?;
        Ok((z >> 1) as i128 ^ -((z & 1) as i128))
    }

    fn str(&mut self) -> Result<&'a str, String> {
        let len = usize::try_from(self.u(32)?).map_err(|e| e.to_string())?;
        let end = self
            .at
            .checked_add(len)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| format!("truncated name at byte {}", self.at))?;
        let s = std::str::from_utf8(&self.bytes[self.at..end]).map_err(|e| e.to_string())?;
        self.at = end;
        Ok(s)
    }
}

fn name(r: &mut Cursor<'_>, new: bool, table: &mut Vec<Arc<str>>) -> Result<Arc<str>, String> {
    if new {
        let s: Arc<str> = Arc::from(r.str()?);
        table.push(s.clone());
        return Ok(s);
    }
    let i = r.u(32)?;
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .cloned()
        .ok_or_else(|| format!("name reference {i} out of range"))
}

/// The changes of a binary chunk whose first change has sequence `first`.
pub fn decode(first: u64, bytes: &[u8]) -> Result<Vec<Change>, String> {
    let mut r = Cursor { bytes, at: 0 };
    if r.byte()? != MAGIC {
        return Err("not a binary change chunk".into());
    }
    let n = r.u(64)? as u64;
    if n.checked_add(first).is_none() || n > bytes.len() as u64 {
        return Err(format!("{n} changes cannot fit in {} bytes", bytes.len()));
    }
    let (mut windows, mut keys) = (Vec::new(), Vec::new());
    let mut prev_start = 0i128;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let flags = r.byte()?;
        if flags & !(UPSERT | NEW_WINDOW | NEW_KEY) != 0 {
            return Err(format!("unknown flags {flags:#x}"));
        }
        let window = name(&mut r, flags & NEW_WINDOW != 0, &mut windows)?;
        let key = name(&mut r, flags & NEW_KEY != 0, &mut keys)?;
        let start = prev_start.wrapping_add(r.i(128)?);
        let end = start.wrapping_add(r.i(128)?);
        let count = r.u(64)? as u64;
        let sum = r.i(128)?;
        let min = r.i(64)? as i64;
        let max = min.wrapping_add(r.u(64)? as u64 as i64);
        prev_start = start;
        out.push(Change {
            seq: first + i,
            op: if flags & UPSERT != 0 {
                ChangeOp::Upsert
            } else {
                ChangeOp::Retract
            },
            result: WindowResult {
                window,
                key,
                start,
                end,
                count,
                sum,
                min,
                max,
            },
        });
    }
    if r.at != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - r.at));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(
        seq: u64,
        op: ChangeOp,
        window: &str,
        key: &str,
        v: (i128, i128, i64, i64),
    ) -> Change {
        Change {
            seq,
            op,
            result: WindowResult {
                window: window.into(),
                key: key.into(),
                start: v.0,
                end: v.1,
                count: seq * 7,
                sum: v.0 ^ 0x55,
                min: v.2,
                max: v.3,
            },
        }
    }

    #[test]
    fn round_trips_extremes_and_shares_names() {
        use ChangeOp::{Retract, Upsert};
        let changes = vec![
            change(5, Upsert, "fixed", "k1", (0, 10_000, -3, 9)),
            change(6, Retract, "fixed", "k1", (0, 10_000, -3, 9)),
            change(7, Upsert, "sliding", "k1", (-2000, 8000, 4, 4)),
            change(
                8,
                Upsert,
                "fixed",
                "ключ",
                (i128::MIN, i128::MAX, i64::MIN, i64::MAX),
            ),
            change(
                9,
                Upsert,
                "fixed",
                "",
                (i128::MAX, i128::MIN, i64::MAX, i64::MIN),
            ),
            change(
                10,
                Retract,
                "sliding",
                "ключ",
                (1 << 100, (1 << 100) + 1, 0, 0),
            ),
        ];
        let bytes = encode(&changes);
        assert_eq!(decode(5, &bytes).unwrap(), changes);
        // names are written once per chunk
        assert_eq!(
            bytes.windows(7).filter(|w| w == b"sliding").count(),
            1,
            "{bytes:?}"
        );
        // and the JSON of each decoded change is the engine's
        for (a, b) in decode(5, &bytes).unwrap().iter().zip(&changes) {
            assert_eq!(
                serde_json::to_string(a).unwrap(),
                serde_json::to_string(b).unwrap()
            );
        }
        assert_eq!(decode(1, &encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn a_typical_change_takes_about_a_seventh_of_its_json() {
        let changes: Vec<Change> = (0..1000u64)
            .map(|i| {
                let start = (i as i128 / 50) * 2000;
                change(
                    i + 1,
                    ChangeOp::Upsert,
                    ["fixed_10s", "sliding_10s_2s", "session_50ms"][i as usize % 3],
                    &format!("k{}", i % 100),
                    (start, start + 10_000, 100 + i as i64, 900 + i as i64),
                )
            })
            .collect();
        let json: usize = changes
            .iter()
            .map(|c| serde_json::to_string(c).unwrap().len())
            .sum();
        let bin = encode(&changes).len();
        assert!(bin * 5 < json, "binary {bin} vs json {json}");
    }

    #[test]
    fn every_truncation_and_flipped_byte_is_an_error_or_a_valid_chunk() {
        let changes = vec![
            change(1, ChangeOp::Upsert, "w", "a", (0, 10, 1, 2)),
            change(2, ChangeOp::Retract, "w", "b", (10, 20, -1, 5)),
        ];
        let bytes = encode(&changes);
        for n in 0..bytes.len() {
            assert!(decode(1, &bytes[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                // never panics; anything accepted re-encodes to itself
                if let Ok(c) = decode(1, &b) {
                    assert_eq!(decode(1, &encode(&c)).unwrap(), c);
                }
            }
        }
        assert!(decode(u64::MAX, &bytes).is_err());
    }
}
