//! The digest of a version-2 envelope (docs/checkpoint.md, "The digest").
//!
//! The append-only arrays of the state (each partition's `sources`, and
//! `late`) enter the digest through a hash chain over fixed chunks of
//! [`CHUNK`] items: the leaf of a chunk is the SHA-256 of its canonical
//! bytes as a JSON array (`[` item `,` item ... `]`), and
//! `c = SHA-256(c || leaf)` from 32 zero bytes, chunk after chunk. The
//! digest is the SHA-256 of the canonical state with each of those arrays
//! replaced by the hex of its chain ([`digest`]).
//!
//! A chunk boundary depends only on an item's index, so a full chunk never
//! changes: a [`Chain`] keeps the value over the full chunks and a running
//! hash of the last partial one, items are pushed as they are flushed (or
//! read), and [`Chain::value`] costs one or two compressions whatever the
//! length. The full chunks' leaves and chain values are stored with the
//! history ([`ChunkRec`]), so a chain resumes from the last one
//! ([`Chain::resume`]) and a reader checks the text it reads against them.

use sha2::{Digest, Sha256};

use super::{LiveParts, Out};
use streamforge_canonical::writer as canonical;

/// Items per chunk.
pub const CHUNK: u64 = 4096;

/// A SHA-256 value.
pub type Hash = [u8; 32];

/// The chain of an empty array.
pub const ZERO: Hash = [0; 32];

/// A full chunk: its number (items `CHUNK*index .. CHUNK*(index+1)`), its
/// leaf and the chain value after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRec {
    /// The chunk's number in its array.
    pub index: u64,
    /// SHA-256 of the chunk's canonical bytes.
    pub leaf: Hash,
    /// The chain value over chunks `0..=index`.
    pub chain: Hash,
}

/// `SHA-256(c || leaf)`.
pub fn link(c: &Hash, leaf: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update(c);
    h.update(leaf);
    h.finalize().into()
}

/// Lowercase hex.
pub fn hex(h: &Hash) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for b in h {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xf) as usize] as char);
    }
    s
}

/// The chain of an array whose items are pushed in order.
#[derive(Clone)]
pub struct Chain {
    /// Items pushed.
    items: u64,
    /// The chain value over the full chunks.
    chain: Hash,
    /// `[` and the items of the partial chunk so far, joined by commas.
    partial: Sha256,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("items", &self.items)
            .field("value", &hex(&self.value()))
            .finish()
    }
}

impl PartialEq for Chain {
    fn eq(&self, other: &Chain) -> bool {
        self.items == other.items && self.value() == other.value()
    }
}

impl Eq for Chain {}

impl Default for Chain {
    fn default() -> Chain {
        Chain::new()
    }
}

fn opened() -> Sha256 {
    let mut h = Sha256::new();
    h.update(b"[");
    h
}

impl Chain {
    /// The chain of an empty array.
    pub fn new() -> Chain {
        Chain {
            items: 0,
            chain: ZERO,
            partial: opened(),
        }
    }

    /// The chain of an array of `items` items (a multiple of [`CHUNK`])
    /// whose chain value is `chain`; `None` when `items` is not a multiple.
    pub fn resume(items: u64, chain: Hash) -> Option<Chain> {
        items.is_multiple_of(CHUNK).then(|| Chain {
            items,
            chain: if items == 0 { ZERO } else { chain },
            partial: opened(),
        })
    }

    /// Items pushed so far.
    pub fn len(&self) -> u64 {
        self.items
    }

    /// Nothing pushed.
    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// Pushes one item's canonical bytes; the chunk it completes, if any.
    pub fn push(&mut self, item: &[u8]) -> Option<ChunkRec> {
        if !self.items.is_multiple_of(CHUNK) {
            self.partial.update(b",");
        }
        self.partial.update(item);
        self.items += 1;
        self.close_if_full()
    }

    fn close_if_full(&mut self) -> Option<ChunkRec> {
        if !self.items.is_multiple_of(CHUNK) {
            return None;
        }
        let mut h = std::mem::replace(&mut self.partial, opened());
        h.update(b"]");
        let leaf: Hash = h.finalize().into();
        self.chain = link(&self.chain, &leaf);
        Some(ChunkRec {
            index: self.items / CHUNK - 1,
            leaf,
            chain: self.chain,
        })
    }

    /// Pushes `count` items given as their canonical bytes joined by commas
    /// (a segment's or a block's text), appending the chunks they complete
    /// to `done`. The caller vouches for `count`; a text without an item
    /// boundary where a chunk ends is an error.
    pub fn push_run(
        &mut self,
        text: &[u8],
        count: u64,
        done: &mut Vec<ChunkRec>,
    ) -> Result<(), String> {
        let mut rest = text;
        let mut left = count;
        while left > 0 {
            let room = CHUNK - self.items % CHUNK;
            let (now, after): (&[u8], &[u8]) = if left <= room {
                (rest, &[])
            } else {
                // The `room`-th item ends at the `room`-th comma.
                let at = crate::segment_text::comma(rest, room)
                    .ok_or_else(|| format!("a run of {count} items holds fewer"))?;
                (&rest[..at], &rest[at + 1..])
            };
            let n = left.min(room);
            if !self.items.is_multiple_of(CHUNK) {
                self.partial.update(b",");
            }
            self.partial.update(now);
            self.items += n;
            left -= n;
            rest = after;
            done.extend(self.close_if_full());
        }
        Ok(())
    }

    /// The chain value over the full chunks, and their number.
    pub fn full(&self) -> (u64, Hash) {
        (self.items / CHUNK, self.chain)
    }

    /// The chain value of everything pushed (the last partial chunk's leaf
    /// linked in).
    pub fn value(&self) -> Hash {
        if self.items.is_multiple_of(CHUNK) {
            return self.chain;
        }
        let mut h = self.partial.clone();
        h.update(b"]");
        let leaf: Hash = h.finalize().into();
        link(&self.chain, &leaf)
    }

    /// [`Chain::value`] in lowercase hex.
    pub fn hex(&self) -> String {
        hex(&self.value())
    }
}

/// The chain of a whole array of items (canonical bytes each).
pub fn chain_of<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Chain {
    let mut c = Chain::new();
    for item in items {
        c.push(item);
    }
    c
}

/// Writes `S'`: the state of `live` with each partition's sources (in the
/// order of `live.partitions`) and the late records replaced by the hex of
/// their chains.
pub fn write_digest_state(
    live: &LiveParts,
    sources: &[Hash],
    late: &Hash,
    out: &mut dyn Out,
) -> Result<(), crate::history::StoreFault> {
    out.put(b"{\"changelog\":")?;
    out.put(&live.changelog)?;
    out.put(b",\"clock\":")?;
    out.put(&live.clock)?;
    out.put(b",\"late\":\"")?;
    out.put(hex(late).as_bytes())?;
    out.put(b"\",\"pipeline\":")?;
    out.put(&live.pipeline)?;
    let mut b = Vec::with_capacity(16 + 96 * live.partitions.len());
    b.extend_from_slice(b",\"sources\":{");
    for (i, name) in live.partitions.iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        canonical::key(&mut b, name);
        b.push(b'"');
        b.extend_from_slice(hex(sources.get(i).unwrap_or(&ZERO)).as_bytes());
        b.push(b'"');
    }
    b.extend_from_slice(b"},\"windows\":");
    out.put(&b)?;
    out.put(&live.windows)?;
    out.put(b"}")
}

/// The digest `D` of a state: the lowercase hex SHA-256 of `S'` (see
/// [`write_digest_state`]).
pub fn digest(live: &LiveParts, sources: &[Hash], late: &Hash) -> String {
    let mut h = super::HashOut::default();
    // Hashing cannot fail.
    let _ = write_digest_state(live, sources, late, &mut h);
    h.finish().0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> Hash {
        Sha256::digest(bytes).into()
    }

    #[test]
    fn the_worked_example() {
        assert_eq!(Chain::new().hex(), "0".repeat(64));
        let c = chain_of([&br#"["a","k",1,2]"#[..]]);
        assert_eq!(
            c.hex(),
            "efa9ab1a96bec704e14aac89137488741c86f95c2accea9edaca028a655c0c81"
        );
        assert_eq!(
            c.value(),
            link(&ZERO, &sha(br#"[["a","k",1,2]]"#)),
            "SHA-256(32 zero bytes || SHA-256(the chunk as an array))"
        );
    }

    /// Items of varied length, some with commas and brackets inside strings.
    fn items(n: u64) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let mut b = Vec::new();
                crate::segment_text::write_event(
                    &mut b,
                    &format!("e{i},]"),
                    "[k",
                    i as i64,
                    -(i as i64),
                );
                b
            })
            .collect()
    }

    /// The definition, spelled out: chunks as JSON arrays, chained.
    fn by_definition(items: &[Vec<u8>]) -> Hash {
        let mut c = ZERO;
        for chunk in items.chunks(CHUNK as usize) {
            let mut text = b"[".to_vec();
            text.extend_from_slice(&chunk.join(&b","[..]));
            text.push(b']');
            c = link(&c, &sha(&text));
        }
        c
    }

    #[test]
    fn pushed_one_by_one_in_runs_or_resumed_the_value_is_the_definition() {
        for n in [1, 2, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 17] {
            let all = items(n);
            let want = by_definition(&all);
            let one = chain_of(all.iter().map(Vec::as_slice));
            assert_eq!(one.value(), want, "{n} one by one");
            assert_eq!(one.len(), n);
            // in runs of odd lengths, crossing chunk boundaries
            for run in [1usize, 7, 511, 4095, 4097, 10_000] {
                let mut c = Chain::new();
                let mut done = Vec::new();
                for piece in all.chunks(run) {
                    let text = piece.join(&b","[..]);
                    c.push_run(&text, piece.len() as u64, &mut done).unwrap();
                }
                assert_eq!(c.value(), want, "{n} in runs of {run}");
                assert_eq!(done.len() as u64, n / CHUNK);
                for (k, rec) in done.iter().enumerate() {
                    assert_eq!(rec.index, k as u64);
                    let upto = &all[..(k + 1) * CHUNK as usize];
                    assert_eq!(rec.chain, by_definition(upto));
                }
                // resumed from the last full chunk, then the rest pushed
                let (full, value) = c.full();
                let mut r = Chain::resume(full * CHUNK, value).unwrap();
                for item in &all[(full * CHUNK) as usize..] {
                    r.push(item);
                }
                assert_eq!(r, c);
            }
        }
        // a run that should cross a chunk boundary but has no comma there
        let mut c = chain_of(items(CHUNK - 1).iter().map(Vec::as_slice));
        assert!(c.push_run(b"[1]", 2, &mut Vec::new()).is_err());
        assert!(Chain::resume(5, ZERO).is_none());
    }
}
