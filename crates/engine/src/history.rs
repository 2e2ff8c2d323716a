//! The lifetime history behind the engine: the delivered events and the
//! late records that were flushed out of memory, and the index of their
//! ids.
//!
//! The contract keeps every delivery and every event identity for the
//! processor's whole life (docs/semantics.md), but the next event needs
//! almost none of it: only a redelivery at an old offset reads an old
//! event, and only an id that may be known needs its identity. So the
//! processor keeps in memory just the *tail* (what arrived since the last
//! flush) and reaches everything older through a [`HistoryStore`]:
//!
//! - history is cut into immutable **segments**: a run of one partition's
//!   consecutive deliveries, or of consecutive late records, stored as the
//!   exact canonical text the checkpoint envelope carries for them (items
//!   separated by commas), so that an envelope is assembled by
//!   concatenation;
//! - every unique event of a flushed segment is in the store's **id
//!   index** under [`id_hash`] of its id, at its [`Pos`] (segment, index).
//!   The index may answer candidates that are not the id (other ids with
//!   the same hash, events of segments this processor no longer holds after
//!   a restore): the processor reads each candidate event and keeps it only
//!   if it is in one of its own segments and has the id. It never misses one.
//!
//! The engine does no I/O: the service implements the store over its
//! database; [`MemHistory`] keeps segments in memory (tests, the offline
//! `verify`, a processor that is never flushed).

use std::sync::{Arc, Mutex};

use super::checkpoint::chain::{Chain, ChunkRec, CHUNK};
use super::event::Event;
use streamforge_keys::FxMap;

/// A segment's id, given by the store; never reused.
pub type SegId = u64;

/// Bits of [`Pos`] for the index within a segment.
pub const INDEX_BITS: u32 = 24;

/// Most items a segment holds (2^24).
pub const MAX_SEGMENT_ITEMS: u64 = 1 << INDEX_BITS;

/// Largest segment id a [`Pos`] can name.
pub const MAX_SEG_ID: SegId = (1 << (64 - INDEX_BITS)) - 1;

/// Where a flushed event is: its segment and its index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos(pub u64);

impl Pos {
    /// The position of item `index` of segment `seg`, if both fit.
    pub fn new(seg: SegId, index: u64) -> Option<Pos> {
        (seg <= MAX_SEG_ID && index < MAX_SEGMENT_ITEMS).then_some(Pos((seg << INDEX_BITS) | index))
    }

    /// The segment.
    pub fn seg(self) -> SegId {
        self.0 >> INDEX_BITS
    }

    /// The index within the segment.
    pub fn index(self) -> u64 {
        self.0 & (MAX_SEGMENT_ITEMS - 1)
    }
}

/// The 64-bit hash the id index files an event id under: FNV-1a over its
/// bytes, then MurmurHash3's 64-bit finalizer. Stored on disk, so it never
/// changes. (Not the engine's in-memory hash: that one multiplies whole
/// words, so ids that differ only in their last bytes, `e1200000` and
/// `e1200001`, share its low bits, and the id index's Bloom filters then
/// answered "maybe" for one such id in ten.)
pub fn id_hash(id: &str) -> u64 {
    id_hash_bytes(id.as_bytes())
}

/// [`id_hash`] of an id's bytes.
pub fn id_hash_bytes(id: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in id {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegKind {
    /// Deliveries of one partition: items `[id,key,timestamp,value]`.
    Sources,
    /// Late records: items `[[id,key,timestamp,value],watermark]`.
    Late,
}

/// A segment as a processor holds it: which one, and which items of its
/// partition (or of the late output) it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegRef {
    /// The store's id.
    pub id: SegId,
    /// The offset (late: the 0-based late index) of its first item.
    pub first: u64,
    /// Number of items.
    pub count: u64,
    /// Length of its canonical text.
    pub bytes: u64,
}

/// The store failed (I/O); the call that needed it changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFault(pub String);

impl std::fmt::Display for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reading flushed history (implemented by the service over its database,
/// and by [`MemHistory`]).
pub trait HistoryStore: Send + Sync + std::fmt::Debug {
    /// For each hash of a batch, whether the id index may hold it (`false`:
    /// surely not). A batch at a time, so that the filters' cache misses
    /// overlap.
    fn maybe_known(&self, hashes: &[u64], out: &mut Vec<bool>);

    /// Every position filed under `hash` (a superset of the events with
    /// that hash; never fewer).
    fn candidates(&self, hash: u64, out: &mut Vec<Pos>) -> Result<(), StoreFault>;

    /// Item `index` of sources segment `seg`.
    fn event(&self, seg: SegId, index: u64) -> Result<Event, StoreFault>;

    /// Item `index` of late segment `seg`: the event and its watermark.
    fn late(&self, seg: SegId, index: u64) -> Result<(Event, i64), StoreFault>;

    /// Appends the canonical text of segment `seg` (its items separated by
    /// commas) to `out`.
    fn text(&self, seg: SegId, out: &mut Vec<u8>) -> Result<(), StoreFault>;

    /// Hands the canonical bytes of each item of segment `seg` from item
    /// `from` on to `each`, in order.
    fn items_from(
        &self,
        seg: SegId,
        from: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreFault>;

    /// The record of full chunk `index` of the array segment `seg` belongs
    /// to, stored with the segment that holds the chunk's last item
    /// (`None`: not stored with `seg`).
    fn chunk(&self, seg: SegId, index: u64) -> Result<Option<ChunkRec>, StoreFault>;
}

/// The chain of the items of `segs` (a partition's consecutive segments,
/// or the late output's, from item 0): the stored value of its last full
/// chunk, and the items after it read back (fewer than a chunk).
pub fn resume_chain(store: &dyn HistoryStore, segs: &[SegRef]) -> Result<Chain, StoreFault> {
    let n = segs.last().map_or(0, |s| s.first + s.count);
    let full = n / CHUNK;
    let mut chain = Chain::new();
    if full > 0 {
        let last = full * CHUNK - 1;
        let seg = segs
            .iter()
            .find(|s| s.first <= last && last < s.first + s.count)
            .ok_or_else(|| StoreFault(format!("item {last} is in no segment")))?;
        let rec = store.chunk(seg.id, full - 1)?.ok_or_else(|| {
            StoreFault(format!(
                "segment {} holds no record of chunk {}",
                seg.id,
                full - 1
            ))
        })?;
        chain = Chain::resume(full * CHUNK, rec.chain)
            .ok_or_else(|| StoreFault("a chain resumes at a chunk boundary".into()))?;
    }
    let start = full * CHUNK;
    for s in segs
        .iter()
        .filter(|s| s.count > 0 && s.first + s.count > start)
    {
        store.items_from(s.id, start.saturating_sub(s.first), &mut |item| {
            chain.push(item);
        })?;
    }
    if chain.len() != n {
        return Err(StoreFault(format!(
            "the segments hold {} items after item {start}, their records say {}",
            chain.len() - start,
            n - start
        )));
    }
    Ok(chain)
}

/// A segment ready to be stored: its canonical text and, for sources, the
/// id hash of each unique event with its index.
#[derive(Debug, Clone)]
pub struct NewSegment {
    /// Sources (with its partition's index) or late.
    pub kind: SegKind,
    /// The partition (sources), by index in the pipeline's sorted list.
    pub partition: usize,
    /// The first item's offset (late: its 0-based index).
    pub first: u64,
    /// Number of items.
    pub count: u64,
    /// Canonical text of the items, separated by commas (emptied once it
    /// is stored: see `bytes`).
    pub text: Vec<u8>,
    /// Length of that text.
    pub bytes: u64,
    /// `(id_hash, index)` of the items whose id the segment introduces.
    pub ids: Vec<(u64, u64)>,
    /// Where each item's text ends (exclusive), when the writer kept
    /// track (else the store finds the items by scanning the text).
    pub ends: Vec<u32>,
    /// The full chunks of its array that its items complete (stored with
    /// it: `HistoryStore::chunk`).
    pub chunks: Vec<ChunkRec>,
    /// The chain of its array through its last item.
    pub chain: Chain,
}

/// Segments in memory: the store of a processor that is never flushed to
/// disk, and of the engine's tests (which flush into it to exercise the
/// flushed paths).
#[derive(Debug, Default)]
pub struct MemHistory {
    inner: Mutex<MemInner>,
}

#[derive(Debug, Default)]
struct MemInner {
    segments: FxMap<SegId, (SegKind, Arc<Vec<u8>>)>,
    index: FxMap<u64, Vec<Pos>>,
    chunks: FxMap<(SegId, u64), ChunkRec>,
    next: SegId,
}

impl MemHistory {
    /// An empty store.
    pub fn new() -> Arc<MemHistory> {
        Arc::new(MemHistory::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemInner> {
        // A panic while holding it cannot leave it half-updated (every
        // update is one insert).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a segment and files its ids; returns its id.
    pub fn put(&self, seg: &NewSegment) -> Result<SegId, StoreFault> {
        let mut g = self.lock();
        g.next += 1;
        let id = g.next;
        for &(h, i) in &seg.ids {
            let pos = Pos::new(id, i)
                .ok_or_else(|| StoreFault(format!("segment {id} item {i} out of range")))?;
            g.index.entry(h).or_default().push(pos);
        }
        for rec in &seg.chunks {
            g.chunks.insert((id, rec.index), *rec);
        }
        g.segments
            .insert(id, (seg.kind, Arc::new(seg.text.clone())));
        Ok(id)
    }

    fn segment(&self, seg: SegId, kind: SegKind) -> Result<Arc<Vec<u8>>, StoreFault> {
        match self.lock().segments.get(&seg) {
            Some((k, text)) if *k == kind => Ok(text.clone()),
            _ => Err(StoreFault(format!("no {kind:?} segment {seg}"))),
        }
    }
}

impl HistoryStore for MemHistory {
    fn maybe_known(&self, hashes: &[u64], out: &mut Vec<bool>) {
        let g = self.lock();
        out.clear();
        out.extend(hashes.iter().map(|h| g.index.contains_key(h)));
    }

    fn candidates(&self, hash: u64, out: &mut Vec<Pos>) -> Result<(), StoreFault> {
        if let Some(v) = self.lock().index.get(&hash) {
            out.extend_from_slice(v);
        }
        Ok(())
    }

    fn event(&self, seg: SegId, index: u64) -> Result<Event, StoreFault> {
        let text = self.segment(seg, SegKind::Sources)?;
        let item = super::segment_text::item(&text, index)
            .ok_or_else(|| StoreFault(format!("segment {seg} has no item {index}")))?;
        super::segment_text::parse_event(item).map_err(StoreFault)
    }

    fn late(&self, seg: SegId, index: u64) -> Result<(Event, i64), StoreFault> {
        let text = self.segment(seg, SegKind::Late)?;
        let item = super::segment_text::item(&text, index)
            .ok_or_else(|| StoreFault(format!("segment {seg} has no item {index}")))?;
        super::segment_text::parse_late(item).map_err(StoreFault)
    }

    fn text(&self, seg: SegId, out: &mut Vec<u8>) -> Result<(), StoreFault> {
        let g = self.lock();
        let (_, text) = g
            .segments
            .get(&seg)
            .ok_or_else(|| StoreFault(format!("no segment {seg}")))?;
        out.extend_from_slice(text);
        Ok(())
    }

    fn items_from(
        &self,
        seg: SegId,
        from: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreFault> {
        let text = {
            let g = self.lock();
            g.segments
                .get(&seg)
                .map(|(_, t)| t.clone())
                .ok_or_else(|| StoreFault(format!("no segment {seg}")))?
        };
        for item in
            super::segment_text::items(&text).skip(usize::try_from(from).unwrap_or(usize::MAX))
        {
            each(item);
        }
        Ok(())
    }

    fn chunk(&self, seg: SegId, index: u64) -> Result<Option<ChunkRec>, StoreFault> {
        Ok(self.lock().chunks.get(&(seg, index)).copied())
    }
}
