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
use std::sync::Arc;

use streamforge_engine::{Change, ChangeOp, WindowResult};
use streamforge_keys::FxMap;

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
    index: FxMap<&'a str, usize>,
    /// The name looked up last and its number: consecutive changes mostly
    /// name the same key and window (the very same string), so most
    /// lookups end here without hashing.
    last: Option<(&'a str, usize)>,
}

/// A name as written: a reference into the table, or new.
enum Name<'a> {
    Seen(usize),
    New(&'a str),
}

impl<'a> Names<'a> {
    fn lookup(&mut self, name: &'a str) -> Name<'a> {
        if let Some((last, i)) = self.last {
            if std::ptr::eq(last, name) {
                return Name::Seen(i);
            }
        }
        let next = self.index.len();
        let (i, found) = match self.index.entry(name) {
            Entry::Occupied(e) => (*e.get(), Name::Seen(*e.get())),
            Entry::Vacant(e) => {
                e.insert(next);
                (next, Name::New(name))
            }
        };
        self.last = Some((name, i));
        found
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
    // (sized for every change naming another key: no growing on the way)
    let mut keys = Names {
        index: FxMap::with_capacity_and_hasher(changes.len(), Default::default()),
        last: None,
    };
    let mut windows = Names::default();
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

/// One change of a chunk as read: its names as indexes into the chunk's
/// tables.
struct Raw {
    seq: u64,
    upsert: bool,
    window: usize,
    key: usize,
    start: i128,
    end: i128,
    count: u64,
    sum: i128,
    min: i64,
    max: i64,
}

fn name<'a>(r: &mut Cursor<'a>, new: bool, table: &mut Vec<&'a str>) -> Result<usize, String> {
    if new {
        table.push(r.str()?);
        return Ok(table.len() - 1);
    }
    let i = r.u(32)?;
    usize::try_from(i)
        .ok()
        .filter(|i| *i < table.len())
        .ok_or_else(|| format!("name reference {i} out of range"))
}

/// Reads a binary chunk whose first change has sequence `first`: `f` gets
/// each change with the window and key tables as read so far.
fn walk<'a>(
    first: u64,
    bytes: &'a [u8],
    mut f: impl FnMut(&Raw, &[&'a str], &[&'a str]),
) -> Result<u64, String> {
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
        f(
            &Raw {
                seq: first + i,
                upsert: flags & UPSERT != 0,
                window,
                key,
                start,
                end,
                count,
                sum,
                min,
                max,
            },
            &windows,
            &keys,
        );
    }
    if r.at != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - r.at));
    }
    Ok(n)
}

/// The changes of a binary chunk whose first change has sequence `first`.
pub fn decode(first: u64, bytes: &[u8]) -> Result<Vec<Change>, String> {
    let mut out = Vec::new();
    // One shared string per name of the chunk.
    let (mut windows, mut keys): (Vec<Arc<str>>, Vec<Arc<str>>) = (Vec::new(), Vec::new());
    walk(first, bytes, |c, wt, kt| {
        if windows.len() < wt.len() {
            windows.push(Arc::from(wt[wt.len() - 1]));
        }
        if keys.len() < kt.len() {
            keys.push(Arc::from(kt[kt.len() - 1]));
        }
        out.push(Change {
            seq: c.seq,
            op: if c.upsert {
                ChangeOp::Upsert
            } else {
                ChangeOp::Retract
            },
            result: WindowResult {
                window: windows[c.window].clone(),
                key: keys[c.key].clone(),
                start: c.start,
                end: c.end,
                count: c.count,
                sum: c.sum,
                min: c.min,
                max: c.max,
            },
        });
    })?;
    Ok(out)
}

/// Appends the decimal digits of `v`, at least `width` of them (zeros in
/// front).
fn put_u64(out: &mut String, mut v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    at = at.min(buf.len() - width.min(buf.len()));
    out.extend(buf[at..].iter().map(|&d| char::from(d)));
}

/// Appends `v` as serde_json writes it.
fn put_dec(out: &mut String, v: i128) {
    if v < 0 {
        out.push('-');
    }
    let m = v.unsigned_abs();
    if let Ok(small) = u64::try_from(m) {
        return put_u64(out, small, 1);
    }
    // Beyond 64 bits (rare): groups of 19 digits, 128-bit division only here.
    const P: u128 = 10_000_000_000_000_000_000;
    let (mut groups, mut n, mut x) = ([0u64; 3], 0, m);
    while x > 0 {
        groups[n] = (x % P) as u64;
        x /= P;
        n += 1;
    }
    put_u64(out, groups[n - 1], 1);
    for g in groups[..n - 1].iter().rev() {
        put_u64(out, *g, 19);
    }
}

/// The changes of a binary chunk whose first change has sequence `first`
/// and whose sequence `want` accepts, as the engine's compact JSON (the
/// bytes `serde_json::to_string(&change)` writes; tests pin it), each passed
/// to `f` with its sequence. Names are escaped once per chunk, and no change
/// is built: pages and sinks render from the stored chunk directly.
pub fn json_rows(
    first: u64,
    bytes: &[u8],
    want: impl Fn(u64) -> bool,
    mut f: impl FnMut(u64, &str),
) -> Result<(), String> {
    let (mut windows, mut keys): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let esc = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut line = String::with_capacity(192);
    walk(first, bytes, |c, wt, kt| {
        if windows.len() < wt.len() {
            windows.push(esc(wt[wt.len() - 1]));
        }
        if keys.len() < kt.len() {
            keys.push(esc(kt[kt.len() - 1]));
        }
        if !want(c.seq) {
            return;
        }
        line.clear();
        line.push_str("{\"seq\":");
        put_dec(&mut line, i128::from(c.seq));
        line.push_str(if c.upsert {
            ",\"op\":\"upsert\",\"result\":{\"window\":"
        } else {
            ",\"op\":\"retract\",\"result\":{\"window\":"
        });
        line.push_str(&windows[c.window]);
        line.push_str(",\"key\":");
        line.push_str(&keys[c.key]);
        line.push_str(",\"start\":");
        put_dec(&mut line, c.start);
        line.push_str(",\"end\":");
        put_dec(&mut line, c.end);
        line.push_str(",\"count\":");
        put_dec(&mut line, i128::from(c.count));
        line.push_str(",\"sum\":");
        put_dec(&mut line, c.sum);
        line.push_str(",\"min\":");
        put_dec(&mut line, i128::from(c.min));
        line.push_str(",\"max\":");
        put_dec(&mut line, i128::from(c.max));
        line.push_str("}}");
        f(c.seq, &line);
    })?;
    Ok(())
}

// Reading stored chunks: the rows of the pages (`log`) and of the sinks'
// unfrozen batches (`sinks`), from a binary chunk or an older JSON one.

use rusqlite::types::ValueRef;

use crate::error::Error;

/// The changes of a stored chunk that starts at `first`, with their
/// sequences, as compact JSON: a binary chunk ([`chunk`]), or (rows of
/// schema versions 1 and 2) a JSON array of changes or one change.
pub fn chunk_rows(first: u64, body: ValueRef<'_>) -> crate::Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    chunk_rows_in(first, body, 0..=u64::MAX, |s, j| {
        out.push((s, j.to_string()))
    })?;
    Ok(out)
}

/// [`chunk_rows`] within `want` (only those are rendered), each passed to
/// `f`.
pub fn chunk_rows_in(
    first: u64,
    body: ValueRef<'_>,
    want: std::ops::RangeInclusive<u64>,
    mut f: impl FnMut(u64, &str),
) -> crate::Result<()> {
    match body {
        ValueRef::Blob(b) => json_rows(first, b, |s| want.contains(&s), f)
            .map_err(|e| Error::Corrupt(format!("change chunk at {first}: {e}"))),
        ValueRef::Text(t) => {
            for (s, j) in text_rows(first, &String::from_utf8_lossy(t))? {
                if want.contains(&s) {
                    f(s, &j);
                }
            }
            Ok(())
        }
        _ => Err(Error::Corrupt(format!(
            "change chunk at {first} is neither a blob nor text"
        ))),
    }
}

/// The changes of a JSON chunk (schema versions 1 and 2).
pub(crate) fn text_rows(first: u64, body: &str) -> crate::Result<Vec<(u64, String)>> {
    if !body.trim_start().starts_with('[') {
        return Ok(vec![(first, body.to_string())]);
    }
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(body)
        .map_err(|e| Error::Corrupt(format!("change chunk at {first}: {e}")))?;
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(i, c)| (first + i as u64, c.get().to_string()))
        .collect())
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
    fn decimals_are_serde_jsons() {
        for v in [
            0i128,
            1,
            -1,
            9,
            10,
            i128::from(u64::MAX),
            i128::from(u64::MAX) + 1,
            -i128::from(u64::MAX) - 1,
            10_000_000_000_000_000_000,
            10_000_000_000_000_000_000 * 10_000_000_000_000_000_000,
            100_000_000_000_000_000_000_000_000_000_000_007,
            i128::MAX,
            i128::MIN,
            i128::MIN + 1,
        ] {
            let mut s = String::new();
            put_dec(&mut s, v);
            assert_eq!(s, serde_json::to_string(&v).unwrap());
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
            change(11, Upsert, "w\"q", "a\\b\n\u{1}\u{7f}", (1, 2, 3, 4)),
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
        // the JSON rendered from the chunk is serde's, byte for byte
        let mut rendered = Vec::new();
        json_rows(
            5,
            &bytes,
            |_| true,
            |s, j| rendered.push((s, j.to_string())),
        )
        .unwrap();
        let serde: Vec<(u64, String)> = changes
            .iter()
            .map(|c| (c.seq, serde_json::to_string(c).unwrap()))
            .collect();
        assert_eq!(rendered, serde);
        let mut some = Vec::new();
        json_rows(5, &bytes, |s| s % 2 == 0, |s, _| some.push(s)).unwrap();
        assert_eq!(some, [6, 8, 10]);
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
