//! The command log's body of an ingest (kind `deliveries`): the parsed
//! deliveries in a compact binary form, with the watermark strategies the
//! call applied.
//!
//! Why not the request body: the log used to store the body as received,
//! LZ4-compressed, and recovery parsed it again. Compressing 1,000
//! deliveries cost ~190 us of the caller's CPU (7% of the server's during
//! `streamforge send`); writing this form costs a tenth of that, stores
//! about as few bytes (~20 B per delivery of the benchmark workload, where
//! LZ4 stored ~24 B), and a replay reads it without a JSON parser.
//!
//! Layout (integers are LEB128 varints; `zz` is the zigzag mapping of an
//! `i64` to a `u64`; a string is its byte length then its UTF-8 bytes):
//!
//! ```text
//! version      u8 = 1
//! derive       count, then per entry: partition (string), has_bound (u8
//!              0 or 1), [zz(bound)]
//! partitions   count, then each name (string)
//! deliveries   count, then per delivery:
//!   head       varint: partition number << 1 | has_offset
//!   [offset]   zz(offset - previous offset - 1), the previous offset
//!              being the last one written in this body (-1 before any)
//!   id, key    strings
//!   timestamp  zz(timestamp - previous timestamp) (0 before the first)
//!   value      zz(value)
//! ```
//!
//! Differences wrap (two's complement), so every `i64` round-trips. A
//! decode accepts exactly what `encode` writes: a version, varint, length,
//! partition number or UTF-8 it does not expect, or a byte left over, is an
//! error, and nothing is applied.

use std::borrow::Cow;

use crate::engine::{DeliveryRef, EventRef};

/// The format version this file writes and reads.
const VERSION: u8 = 1;

/// The strategy of each derived partition (see `ingest.rs`).
pub(super) type Derive = Vec<(String, Option<i64>)>;

/// The body of `deliveries` applied with `derive`.
pub(super) fn encode(deliveries: &[DeliveryRef<'_>], derive: &Derive) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + deliveries.len() * 24);
    out.push(VERSION);
    varint(&mut out, derive.len() as u64);
    for (p, bound) in derive {
        string(&mut out, p);
        match bound {
            Some(b) => {
                out.push(1);
                varint(&mut out, zigzag(*b));
            }
            None => out.push(0),
        }
    }
    // Partition names in order of first use. A batch names one or a few:
    // the previous delivery's name is tried first, then the list; past
    // `SCAN` names a map finds them (a batch over hundreds of partitions
    // would otherwise compare each delivery with every name).
    const SCAN: usize = 8;
    let mut names: Vec<&str> = Vec::new();
    let mut index: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut numbers = Vec::with_capacity(deliveries.len());
    let mut last: Option<(&str, u64)> = None;
    for d in deliveries {
        let name = &*d.partition;
        let n = match last {
            Some((l, n)) if l == name => n,
            _ => {
                let found = if names.len() <= SCAN {
                    names.iter().position(|p| *p == name).map(|n| n as u64)
                } else {
                    index.get(name).copied()
                };
                found.unwrap_or_else(|| {
                    names.push(name);
                    if names.len() == SCAN + 1 {
                        index.extend(names.iter().enumerate().map(|(i, p)| (*p, i as u64)));
                    } else if names.len() > SCAN + 1 {
                        index.insert(name, names.len() as u64 - 1);
                    }
                    names.len() as u64 - 1
                })
            }
        };
        last = Some((name, n));
        numbers.push(n);
    }
    varint(&mut out, names.len() as u64);
    for name in &names {
        string(&mut out, name);
    }
    varint(&mut out, deliveries.len() as u64);
    let (mut prev_offset, mut prev_ts) = (-1i64, 0i64);
    for (d, n) in deliveries.iter().zip(numbers) {
        varint(&mut out, n << 1 | u64::from(d.offset.is_some()));
        if let Some(o) = d.offset {
            varint(
                &mut out,
                zigzag(o.wrapping_sub(prev_offset).wrapping_sub(1)),
            );
            prev_offset = o;
        }
        string(&mut out, &d.event.id);
        string(&mut out, &d.event.key);
        varint(&mut out, zigzag(d.event.timestamp.wrapping_sub(prev_ts)));
        prev_ts = d.event.timestamp;
        varint(&mut out, zigzag(d.event.value));
    }
    out
}

/// The deliveries and strategies of a body [`encode`] wrote.
pub(super) fn decode(body: &[u8]) -> Result<(Vec<DeliveryRef<'static>>, Derive), String> {
    let mut r = Reader { b: body, i: 0 };
    let version = r.byte()?;
    if version != VERSION {
        return Err(format!("deliveries body of unknown version {version}"));
    }
    let nd = r.count()?;
    let mut derive = Vec::with_capacity(nd);
    for _ in 0..nd {
        let p = r.string()?.to_owned();
        let bound = match r.byte()? {
            0 => None,
            1 => Some(unzigzag(r.varint()?)),
            t => return Err(format!("bound tag {t}")),
        };
        derive.push((p, bound));
    }
    let np = r.count()?;
    let mut names = Vec::with_capacity(np);
    let mut distinct = std::collections::HashSet::with_capacity(np);
    for _ in 0..np {
        let name = r.string()?;
        if !distinct.insert(name) {
            return Err(format!("partition {name:?} named twice"));
        }
        names.push(name.to_owned());
    }
    let n = r.count()?;
    let mut deliveries = Vec::with_capacity(n);
    let (mut prev_offset, mut prev_ts) = (-1i64, 0i64);
    // Names are numbered in order of first use.
    let mut used = 0u64;
    for _ in 0..n {
        let head = r.varint()?;
        let number = head >> 1;
        if number > used || number >= np as u64 {
            return Err(format!(
                "partition number {number} where {used} are in use of {np}"
            ));
        }
        used = used.max(number + 1);
        let partition = &names[number as usize];
        let offset = if head & 1 == 1 {
            let o = prev_offset
                .wrapping_add(1)
                .wrapping_add(unzigzag(r.varint()?));
            prev_offset = o;
            Some(o)
        } else {
            None
        };
        let id = r.string()?.to_owned();
        let key = r.string()?.to_owned();
        let timestamp = prev_ts.wrapping_add(unzigzag(r.varint()?));
        prev_ts = timestamp;
        let value = unzigzag(r.varint()?);
        deliveries.push(DeliveryRef {
            partition: Cow::Owned(partition.clone()),
            offset,
            event: EventRef {
                id: Cow::Owned(id),
                key: Cow::Owned(key),
                timestamp,
                value,
            },
        });
    }
    if used != np as u64 {
        return Err(format!("{np} partitions named, {used} used"));
    }
    if r.i != body.len() {
        return Err(format!(
            "{} bytes after the last delivery",
            body.len() - r.i
        ));
    }
    Ok((deliveries, derive))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, String> {
        let c = *self.b.get(self.i).ok_or("the body ends early")?;
        self.i += 1;
        Ok(c)
    }

    /// A varint as `encode` writes it: at most 10 bytes, no bits beyond
    /// 64, no redundant trailing zero byte.
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for k in 0..10 {
            let c = self.byte()?;
            let bits = u64::from(c & 0x7f);
            if k == 9 && c > 1 {
                return Err("a varint beyond 64 bits".into());
            }
            v |= bits << (7 * k);
            if c & 0x80 == 0 {
                if k > 0 && c == 0 {
                    return Err("a varint with a redundant byte".into());
                }
                return Ok(v);
            }
        }
        Err("a varint beyond 64 bits".into())
    }

    /// A count of items, each at least one byte long (so a count beyond
    /// the bytes left is refused before anything is allocated for it).
    fn count(&mut self) -> Result<usize, String> {
        let n = self.varint()?;
        if n > (self.b.len() - self.i) as u64 {
            return Err(format!("a count of {n} beyond the body"));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<&'a str, String> {
        let len = self.count()?;
        let bytes = &self.b[self.i..self.i + len];
        self.i += len;
        std::str::from_utf8(bytes).map_err(|e| format!("a string that is not UTF-8: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(
        p: &str,
        offset: Option<i64>,
        id: &str,
        key: &str,
        ts: i64,
        v: i64,
    ) -> DeliveryRef<'static> {
        DeliveryRef {
            partition: Cow::Owned(p.into()),
            offset,
            event: EventRef {
                id: Cow::Owned(id.into()),
                key: Cow::Owned(key.into()),
                timestamp: ts,
                value: v,
            },
        }
    }

    fn cases() -> Vec<(Vec<DeliveryRef<'static>>, Derive)> {
        vec![
            (
                vec![d("p0", Some(0), "e0", "k", 1_700_000_000_000, 3)],
                vec![],
            ),
            (
                vec![
                    d("p0", Some(7), "e7", "", -1, -3),
                    d("p1", None, "\u{1F600}", "k k", i64::MAX, i64::MIN),
                    d("p0", Some(8), "x", "\"\\", i64::MIN, i64::MAX),
                    d("p2", Some(i64::MIN), "y", "k", 0, 0),
                    d("p1", Some(i64::MAX), "z", "k", 5, -1),
                    d("p0", Some(-5), "w", "k", 5, 0),
                ],
                vec![
                    ("p0".into(), Some(i64::MIN)),
                    ("p1".into(), None),
                    ("p2".into(), Some(3)),
                ],
            ),
            (vec![], vec![]),
            // many partitions, interleaved (names found through the map)
            (
                (0..200)
                    .map(|i| d(&format!("p{}", i * 7 % 23), Some(i / 23), "e", "k", i, i))
                    .collect(),
                vec![],
            ),
        ]
    }

    #[test]
    fn bodies_round_trip() {
        for (ds, derive) in cases() {
            let body = encode(&ds, &derive);
            assert_eq!(decode(&body).unwrap(), (ds, derive));
        }
    }

    #[test]
    fn the_benchmark_shape_is_small() {
        let ds: Vec<_> = (0..1000)
            .map(|i| {
                d(
                    "p0",
                    Some(i),
                    &format!("e{i}"),
                    &format!("k{}", i * 37 % 1000),
                    1_700_000_000_000 + i * 3,
                    i % 2000 - 1000,
                )
            })
            .collect();
        let body = encode(&ds, &vec![]);
        assert!(body.len() < 20 * 1000, "{} bytes", body.len());
    }

    /// Every truncation, every changed byte and any byte appended is
    /// either refused or read as some body that encodes back to itself:
    /// a damaged row is never silently half read.
    #[test]
    fn damaged_bodies_are_refused_or_exact() {
        for (ds, derive) in cases() {
            let body = encode(&ds, &derive);
            for cut in 0..body.len() {
                assert!(decode(&body[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(decode(&longer).is_err());
            for at in 0..body.len() {
                for x in [0u8, 1, 0x7f, 0x80, 0xff] {
                    let mut b = body.clone();
                    b[at] = x;
                    if let Ok((ds2, derive2)) = decode(&b) {
                        assert_eq!(encode(&ds2, &derive2), b, "byte {at} = {x}");
                    }
                }
            }
        }
    }
}
