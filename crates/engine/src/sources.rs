//! Source history: per-partition consumed offsets, the exact event delivered
//! at every consumed offset, and the global event identities.
//!
//! docs/semantics.md, "Deliveries", checked in this order: unknown partition;
//! offset (`offset <= c` is an idempotent redelivery only if the event at that
//! offset is identical, else `offset_conflict`; `offset > c + 1` is a gap,
//! `offset_conflict`); identity (ids are global: a known id with the same
//! identity is a duplicate, consumed but adding nothing; with another
//! identity, `identity_conflict`; an unknown id is a unique event).
//!
//! History lives in two places (see [`super::history`]): what was flushed
//! is in segments of the [`HistoryStore`], reached through each partition's
//! list of segments and the store's id index; what arrived since is the
//! **tail**, in memory: the records of its events (each unique event once,
//! each delivery a record number) and an index of their ids. A batch is
//! resolved with tentative appends that `rollback` undoes, so a rejected
//! batch leaves this state exactly as it was.

use std::borrow::Cow;
use std::sync::Arc;

use super::checkpoint::chain::{Chain, Hash};
use super::chunked::Chunked;
use super::error::Rejection;
use super::event::{DeliveryInput, Event};
use super::history::{
    id_hash, id_hash_bytes, HistoryStore, NewSegment, SegId, SegKind, SegRef, StoreFault,
    MAX_SEGMENT_ITEMS,
};
use super::idstr::IdStr;
use super::str_index::StrIndex;
use streamforge_keys::FxMap;
use streamforge_keys::{KeyId, KeyTable};

/// Number of a record of the tail.
pub type RecNo = u32;

/// An event of the tail: its id and identity.
#[derive(Debug, Clone)]
pub struct EventRec {
    /// Event id.
    pub id: IdStr,
    /// Interned key.
    pub key: KeyId,
    /// Timestamp.
    pub timestamp: i64,
    /// Value.
    pub value: i64,
    /// The event is unique (its id first appears here in the history); a
    /// record of a duplicate copies an identity known from the flushed
    /// history.
    pub unique: bool,
    /// The partition whose delivery made the record.
    pub home: u32,
}

/// How a delivery resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// Identical event at an already consumed offset: no effect at all.
    Redelivery,
    /// Consumed, but the id is known with the same identity: adds nothing.
    Duplicate,
    /// Consumed, and the id is new: a unique event.
    Unique(RecNo),
}

/// Marks to undo tentative resolutions.
#[derive(Debug, Clone)]
pub struct Mark {
    tails: Vec<usize>,
    records: usize,
}

/// One partition's history.
#[derive(Debug, Clone, Default)]
struct Part {
    /// Flushed segments, covering offsets `0..flushed` in order.
    segs: Vec<SegRef>,
    /// Offsets below this are flushed.
    flushed: u64,
    /// The digest chain of the flushed deliveries (offsets `0..flushed`).
    chain: Chain,
    /// The record of each offset from `flushed` on.
    tail: Chunked<RecNo>,
}

impl Part {
    fn len(&self) -> u64 {
        self.flushed + self.tail.len() as u64
    }

    /// The flushed segment holding `offset` (< flushed).
    fn seg_of(&self, offset: u64) -> Option<&SegRef> {
        let i = self
            .segs
            .partition_point(|s| s.first <= offset)
            .checked_sub(1)?;
        self.segs.get(i).filter(|s| offset < s.first + s.count)
    }
}

/// Consumed history and identities.
#[derive(Debug, Clone)]
pub struct Sources {
    parts: Vec<Part>,
    records: Chunked<EventRec>,
    /// Ids of the tail's records: the first record of each id.
    index: StrIndex,
    /// The flushed segments this history holds, by id: their partition
    /// and number of items.
    seg_part: FxMap<SegId, (usize, u64)>,
    store: Arc<dyn HistoryStore>,
}

/// A fault of the history store as the engine reports it.
pub fn unavailable(e: StoreFault) -> Rejection {
    Rejection::Unavailable(format!("cannot read the event history: {e}"))
}

impl Sources {
    /// Empty history for `partitions` partitions, flushed into `store`.
    pub fn new(partitions: usize, store: Arc<dyn HistoryStore>) -> Sources {
        Sources {
            parts: (0..partitions).map(|_| Part::default()).collect(),
            records: Chunked::default(),
            index: StrIndex::default(),
            seg_part: FxMap::default(),
            store,
        }
    }

    /// The store behind the flushed history.
    pub fn store(&self) -> &Arc<dyn HistoryStore> {
        &self.store
    }

    /// A copy for reading history only (checkpoints): the tail is shared
    /// copy-on-write and the id index is left empty.
    pub fn history_copy(&self) -> Sources {
        Sources {
            parts: self.parts.clone(),
            records: self.records.clone(),
            index: StrIndex::default(),
            seg_part: FxMap::default(),
            store: self.store.clone(),
        }
    }

    /// Consumed offset of a partition (-1 before the first delivery).
    pub fn consumed(&self, partition: usize) -> i64 {
        // Offsets are counted from 0 and never exceed i64::MAX + 1 items.
        self.parts
            .get(partition)
            .map_or(-1, |p| i64::try_from(p.len()).unwrap_or(i64::MAX) - 1)
    }

    /// A tail record.
    #[inline]
    pub fn event(&self, no: RecNo) -> Option<&EventRec> {
        self.records.get(no as usize)
    }

    /// Deliveries in the tail (all partitions).
    pub fn tail_deliveries(&self) -> u64 {
        self.parts.iter().map(|p| p.tail.len() as u64).sum()
    }

    /// The full event of a tail record.
    pub fn to_event(&self, no: RecNo, keys: &KeyTable) -> Option<Event> {
        let rec = self.event(no)?;
        Some(Event {
            id: rec.id.as_str().to_string(),
            key: keys.name(rec.key).to_string(),
            timestamp: rec.timestamp,
            value: rec.value,
        })
    }

    /// The event delivered at `offset` of `partition` (consumed).
    pub fn delivered(
        &self,
        partition: usize,
        offset: u64,
        keys: &KeyTable,
    ) -> Result<Option<Event>, StoreFault> {
        let Some(p) = self.parts.get(partition) else {
            return Ok(None);
        };
        if offset >= p.flushed {
            let Some(&no) = usize::try_from(offset - p.flushed)
                .ok()
                .and_then(|i| p.tail.get(i))
            else {
                return Ok(None);
            };
            return Ok(self.to_event(no, keys));
        }
        match p.seg_of(offset) {
            Some(s) => self.store.event(s.id, offset - s.first).map(Some),
            None => Err(StoreFault(format!(
                "offset {offset} of partition {partition} is in no segment"
            ))),
        }
    }

    /// Brings the id-index slots of a batch into cache with independent loads
    /// (memory-level parallelism) before the batch probes them one by one.
    pub fn prefetch(&self, hashes: &[u32]) {
        let mut acc = 0u64;
        for &h in hashes {
            acc ^= self.index.touch(h);
        }
        std::hint::black_box(acc);
    }

    /// Whether each id of a batch may be in the flushed history.
    pub fn maybe_flushed(&self, ids: &[u64], out: &mut Vec<bool>) {
        if self.seg_part.is_empty() {
            out.clear();
            out.resize(ids.len(), false);
        } else {
            self.store.maybe_known(ids, out);
        }
    }

    /// A mark to roll back to.
    pub fn mark(&self) -> Mark {
        Mark {
            tails: self.parts.iter().map(|p| p.tail.len()).collect(),
            records: self.records.len(),
        }
    }

    /// Undoes every resolution since `mark`.
    pub fn rollback(&mut self, mark: Mark) {
        for (p, len) in self.parts.iter_mut().zip(mark.tails) {
            while p.tail.len() > len {
                p.tail.pop();
            }
        }
        while self.records.len() > mark.records {
            let pos = (self.records.len() - 1) as RecNo;
            if let Some(rec) = self.records.pop() {
                self.index.remove(StrIndex::hash(rec.id.as_str()), pos);
            }
        }
    }

    /// The flushed event with this id, if any (`hash` is its [`id_hash`]).
    fn flushed_identity(&self, id: &str, hash: u64) -> Result<Option<Event>, StoreFault> {
        let mut candidates = Vec::new();
        self.store.candidates(hash, &mut candidates)?;
        for pos in candidates {
            // The candidate must be in one of this history's own segments.
            let held = self
                .seg_part
                .get(&pos.seg())
                .is_some_and(|&(_, count)| pos.index() < count);
            if !held {
                continue;
            }
            let e = self.store.event(pos.seg(), pos.index())?;
            if e.id == id {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// Appends a record, checking that its number fits.
    fn push_record(&mut self, rec: EventRec) -> Result<RecNo, Rejection> {
        let no = RecNo::try_from(self.records.len()).map_err(|_| {
            Rejection::Unavailable(
                "the in-memory history tail is full; a checkpoint flushes it".into(),
            )
        })?;
        self.records.push(rec);
        Ok(no)
    }

    /// Resolves one delivery on `partition` (already known) and records it.
    /// `hash` is `StrIndex::hash` of the id; `maybe_flushed` whether the
    /// flushed history may know the id. A unique event's id string is moved
    /// out of the delivery into the history.
    // Over 120 lines: the per-delivery hot path, one pass over the spec's dedup and offset rules.
    pub fn resolve<D: DeliveryInput>(
        &mut self,
        partition: usize,
        delivery: &mut D,
        hash: u32,
        maybe_flushed: bool,
        keys: &mut KeyTable,
    ) -> Result<Resolved, Rejection> {
        let id = delivery.id();
        if id.is_empty() {
            return Err(Rejection::BadRequest("event id must be non-empty".into()));
        }
        let same_rec = |rec: &EventRec, keys: &KeyTable| {
            rec.timestamp == delivery.timestamp()
                && rec.value == delivery.value()
                && **keys.name(rec.key) == *delivery.key()
        };
        let consumed = self.consumed(partition);
        let offset = match delivery.offset() {
            Some(o) => o,
            None => consumed.checked_add(1).ok_or_else(|| {
                Rejection::OffsetConflict(format!(
                    "partition {:?} has consumed every offset",
                    delivery.partition()
                ))
            })?,
        };
        if offset < 0 {
            return Err(Rejection::OffsetConflict(format!(
                "offset {offset} is negative: offsets of partition {:?} start at 0 (next offset is {})",
                delivery.partition(),
                consumed + 1
            )));
        }
        if offset <= consumed {
            let old = self
                .delivered(partition, offset as u64, keys)
                .map_err(unavailable)?;
            if let Some(e) = old {
                if e.id == id
                    && e.timestamp == delivery.timestamp()
                    && e.value == delivery.value()
                    && e.key == delivery.key()
                {
                    return Ok(Resolved::Redelivery);
                }
            }
            return Err(Rejection::OffsetConflict(format!(
                "partition {:?} already consumed offset {offset} with another event (consumed offset {consumed})",
                delivery.partition()
            )));
        }
        if offset > consumed + 1 {
            return Err(Rejection::OffsetConflict(format!(
                "offset {offset} leaves a gap on partition {:?} (next offset is {})",
                delivery.partition(),
                consumed + 1
            )));
        }
        // Names what differs: the known event's key, timestamp and value
        // against the delivery's.
        let conflict = |key: &str, timestamp: i64, value: i64| {
            let mut differs = Vec::new();
            if key != delivery.key() {
                differs.push(format!("key {key:?} (this delivery: {:?})", delivery.key()));
            }
            if timestamp != delivery.timestamp() {
                differs.push(format!(
                    "timestamp {timestamp} (this delivery: {})",
                    delivery.timestamp()
                ));
            }
            if value != delivery.value() {
                differs.push(format!(
                    "value {value} (this delivery: {})",
                    delivery.value()
                ));
            }
            Rejection::IdentityConflict(format!(
                "event id {id:?} is already known with {}; an event id names one event \
                 (key, timestamp and value) for the processor's whole life",
                differs.join(", ")
            ))
        };
        let records = &self.records;
        let probe = self.index.probe(hash, id, |p| {
            records.get(p as usize).map_or(&[][..], |r| r.id.as_bytes())
        });
        let vacant = match probe {
            Ok(no) => {
                if let Some(r) = self.event(no) {
                    if !same_rec(r, keys) {
                        return Err(conflict(keys.name(r.key), r.timestamp, r.value));
                    }
                } else {
                    return Err(conflict(
                        delivery.key(),
                        delivery.timestamp(),
                        delivery.value(),
                    ));
                }
                self.push_delivery(partition, no);
                return Ok(Resolved::Duplicate);
            }
            Err(vacant) => vacant,
        };
        let known = if maybe_flushed {
            self.flushed_identity(id, id_hash(id))
                .map_err(unavailable)?
        } else {
            None
        };
        let home = u32::try_from(partition).unwrap_or(u32::MAX);
        let (timestamp, value) = (delivery.timestamp(), delivery.value());
        if let Some(e) = known {
            if e.timestamp != timestamp || e.value != value || e.key != delivery.key() {
                return Err(conflict(&e.key, e.timestamp, e.value));
            }
            // A duplicate of a flushed event: its record copies the
            // identity, so that later duplicates find it in the tail.
            let key = keys.intern(delivery.key());
            let no = self.push_record(EventRec {
                id: IdStr::from_cow(Cow::Borrowed(id)),
                key,
                timestamp,
                value,
                unique: false,
                home,
            })?;
            self.index.insert(hash, no);
            self.push_delivery(partition, no);
            return Ok(Resolved::Duplicate);
        }
        let key = keys.intern(delivery.key());
        let id = IdStr::from_cow(delivery.take_id());
        let no = self.push_record(EventRec {
            id,
            key,
            timestamp,
            value,
            unique: true,
            home,
        })?;
        self.index.insert_vacant(vacant, hash, no);
        self.push_delivery(partition, no);
        Ok(Resolved::Unique(no))
    }

    fn push_delivery(&mut self, partition: usize, no: RecNo) {
        if let Some(p) = self.parts.get_mut(partition) {
            p.tail.push(no);
        }
    }

    /// The identity `(key, timestamp, value)` history knows for `id`.
    pub fn identity(
        &self,
        id: &str,
        keys: &KeyTable,
    ) -> Result<Option<(String, i64, i64)>, StoreFault> {
        if let Some(rec) = self.find_tail(id).and_then(|no| self.event(no)) {
            return Ok(Some((
                keys.name(rec.key).to_string(),
                rec.timestamp,
                rec.value,
            )));
        }
        if self.seg_part.is_empty() {
            return Ok(None);
        }
        Ok(self
            .flushed_identity(id, id_hash(id))?
            .map(|e| (e.key, e.timestamp, e.value)))
    }

    /// Restore: appends the event at the next offset of `partition`, creating
    /// or checking its identity (in the tail, and in what was flushed of
    /// the restored history). True when the event is unique. Errors name
    /// the inconsistency.
    pub fn restore_push(
        &mut self,
        partition: usize,
        ev: Event,
        keys: &mut KeyTable,
    ) -> Result<bool, String> {
        if ev.id.is_empty() {
            return Err("an event id is empty".into());
        }
        let hash = StrIndex::hash(&ev.id);
        let records = &self.records;
        let found = self.index.find(hash, &ev.id, |p| {
            records.get(p as usize).map_or(&[][..], |r| r.id.as_bytes())
        });
        match found {
            Some(no) => {
                let same = self.event(no).is_some_and(|rec| {
                    rec.timestamp == ev.timestamp
                        && rec.value == ev.value
                        && **keys.name(rec.key) == *ev.key
                });
                if !same {
                    return Err(format!(
                        "event id {:?} is delivered with two different identities",
                        ev.id
                    ));
                }
                self.push_delivery(partition, no);
                Ok(false)
            }
            None => {
                let flushed = if self.seg_part.is_empty() {
                    None
                } else {
                    self.flushed_identity(&ev.id, id_hash(&ev.id))
                        .map_err(|e| format!("cannot read the restored history: {e}"))?
                };
                if let Some(known) = &flushed {
                    if known.timestamp != ev.timestamp
                        || known.value != ev.value
                        || known.key != ev.key
                    {
                        return Err(format!(
                            "event id {:?} is delivered with two different identities",
                            ev.id
                        ));
                    }
                }
                let key = keys.intern(&ev.key);
                let no = self
                    .push_record(EventRec {
                        id: IdStr::from_cow(Cow::Owned(ev.id)),
                        key,
                        timestamp: ev.timestamp,
                        value: ev.value,
                        unique: flushed.is_none(),
                        home: u32::try_from(partition).unwrap_or(u32::MAX),
                    })
                    .map_err(|r| r.detail().to_string())?;
                self.index.insert(hash, no);
                self.push_delivery(partition, no);
                Ok(flushed.is_none())
            }
        }
    }

    /// The record of a tail id, if the tail knows it.
    pub fn find_tail(&self, id: &str) -> Option<RecNo> {
        let records = &self.records;
        self.index.find(StrIndex::hash(id), id, |p| {
            records.get(p as usize).map_or(&[][..], |r| r.id.as_bytes())
        })
    }

    /// Appends partition `p`'s canonical sources items (flushed segments
    /// through the store, then the tail) to `out`, separated by commas.
    pub fn write_partition(
        &self,
        p: usize,
        keys: &KeyTable,
        out: &mut Vec<u8>,
    ) -> Result<(), StoreFault> {
        let Some(part) = self.parts.get(p) else {
            return Ok(());
        };
        let mut first = true;
        for s in &part.segs {
            if s.count == 0 {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            self.store.text(s.id, out)?;
        }
        for &no in part.tail.iter() {
            if !first {
                out.push(b',');
            }
            first = false;
            if let Some(e) = self.event(no) {
                super::segment_text::write_event(
                    out,
                    e.id.as_str(),
                    keys.name(e.key),
                    e.timestamp,
                    e.value,
                );
            }
        }
        Ok(())
    }

    /// The flushed segments of partition `p`.
    pub fn segments(&self, p: usize) -> &[SegRef] {
        self.parts.get(p).map_or(&[], |part| &part.segs)
    }

    /// The tail as segments to store, handed to `each` one at a time (so
    /// that only one segment's text is held): for each partition with tail
    /// deliveries, its items from `flushed` on (in pieces of at most
    /// `max_items`), with the ids its unique events introduce.
    pub fn tail_segments<E>(
        &self,
        keys: &KeyTable,
        max_items: u64,
        each: &mut dyn FnMut(NewSegment) -> Result<(), E>,
    ) -> Result<(), E> {
        let max_items = max_items.clamp(1, MAX_SEGMENT_ITEMS) as usize;
        // Records already met: a unique record is introduced by its first
        // delivery, which is in its home partition's tail before any
        // duplicate there.
        let mut seen = vec![false; self.records.len()];
        for (pi, part) in self.parts.iter().enumerate() {
            let mut first = part.flushed;
            let mut chain = part.chain.clone();
            let mut nos = part.tail.iter().copied().peekable();
            while nos.peek().is_some() {
                let mut text = Vec::with_capacity(max_items.min(1 << 16) * 40);
                let mut ids = Vec::new();
                let mut ends = Vec::with_capacity(max_items.min(1 << 16));
                let mut chunks = Vec::new();
                let mut count = 0usize;
                for (j, no) in nos.by_ref().take(max_items).enumerate() {
                    count += 1;
                    let Some(e) = self.event(no) else { continue };
                    if j > 0 {
                        text.push(b',');
                    }
                    let start = text.len();
                    super::segment_text::write_event_bytes(
                        &mut text,
                        e.id.as_bytes(),
                        keys.name(e.key),
                        e.timestamp,
                        e.value,
                    );
                    chunks.extend(chain.push(&text[start..]));
                    ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
                    // The delivery that made a unique record introduces it.
                    let fresh = seen.get(no as usize).is_some_and(|s| !s);
                    if e.unique && e.home as usize == pi && fresh {
                        if let Some(s) = seen.get_mut(no as usize) {
                            *s = true;
                        }
                        ids.push((id_hash_bytes(e.id.as_bytes()), j as u64));
                    }
                }
                // A text past 4 GiB: the store finds its items itself.
                if text.len() > u32::MAX as usize {
                    ends.clear();
                }
                each(NewSegment {
                    kind: SegKind::Sources,
                    partition: pi,
                    first,
                    count: count as u64,
                    bytes: text.len() as u64,
                    text,
                    ids,
                    ends,
                    chunks,
                    chain: chain.clone(),
                })?;
                first += count as u64;
            }
        }
        Ok(())
    }

    /// Where the tail stands, for [`Sources::flushed`].
    pub fn tail_mark(&self) -> Mark {
        self.mark()
    }

    /// The tail up to `mark` was stored as `segs` (in the order
    /// [`Sources::tail_segments`] gave them, with their store ids): it
    /// leaves memory, and those segments join the partitions' lists. What
    /// arrived after the mark stays in the tail.
    pub fn flushed(&mut self, mark: &Mark, segs: &[(NewSegment, SegId)]) {
        let cut = mark.records;
        let old = std::mem::take(&mut self.records);
        let mut remap: FxMap<RecNo, RecNo> = FxMap::default();
        let mut kept: Chunked<EventRec> = Chunked::default();
        for (i, r) in old.iter().enumerate().skip(cut) {
            remap.insert(i as RecNo, kept.len() as RecNo);
            kept.push(r.clone());
        }
        for (pi, part) in self.parts.iter_mut().enumerate() {
            let upto = mark.tails.get(pi).copied().unwrap_or(0);
            let mut tail = Chunked::default();
            for &no in part.tail.iter().skip(upto) {
                let n = match remap.get(&no) {
                    Some(&n) => n,
                    None => {
                        // A duplicate after the mark of a record that
                        // leaves: it gets a record of its own.
                        let Some(r) = old.get(no as usize) else {
                            continue;
                        };
                        let n = kept.len() as RecNo;
                        kept.push(EventRec {
                            unique: false,
                            ..r.clone()
                        });
                        remap.insert(no, n);
                        n
                    }
                };
                tail.push(n);
            }
            part.tail = tail;
            part.flushed += upto as u64;
        }
        for (seg, id) in segs {
            if seg.kind != SegKind::Sources {
                continue;
            }
            if let Some(part) = self.parts.get_mut(seg.partition) {
                part.chain = seg.chain.clone();
                part.segs.push(SegRef {
                    id: *id,
                    first: seg.first,
                    count: seg.count,
                    bytes: seg.bytes,
                });
                self.seg_part.insert(*id, (seg.partition, seg.count));
            }
        }
        self.records = kept;
        self.reindex();
    }

    /// Rebuilds the tail's id index (in the table it had: the tail grows
    /// back to about the size it was flushed at).
    fn reindex(&mut self) {
        let mut index = std::mem::take(&mut self.index);
        index.clear();
        for (i, r) in self.records.iter().enumerate() {
            let h = StrIndex::hash(r.id.as_str());
            let records = &self.records;
            let known = index.find(h, r.id.as_str(), |p| {
                records.get(p as usize).map_or(&[][..], |x| x.id.as_bytes())
            });
            if known.is_none() {
                index.insert(h, i as RecNo);
            }
        }
        self.index = index;
    }

    /// The digest chain of partition `p`'s deliveries (flushed and tail).
    pub fn chain_value(&self, p: usize, keys: &KeyTable) -> Hash {
        let Some(part) = self.parts.get(p) else {
            return Chain::new().value();
        };
        let mut chain = part.chain.clone();
        let mut buf = Vec::with_capacity(128);
        for &no in part.tail.iter() {
            if let Some(e) = self.event(no) {
                buf.clear();
                super::segment_text::write_event(
                    &mut buf,
                    e.id.as_str(),
                    keys.name(e.key),
                    e.timestamp,
                    e.value,
                );
                chain.push(&buf);
            }
        }
        chain.value()
    }

    /// A history whose flushed part is `segs` per partition (a stored
    /// checkpoint's), with an empty tail. Each partition's digest chain
    /// resumes from its last full chunk's stored value.
    pub fn from_segments(
        store: Arc<dyn HistoryStore>,
        segs: Vec<Vec<SegRef>>,
    ) -> Result<Sources, String> {
        let mut s = Sources::new(segs.len(), store);
        for (pi, list) in segs.into_iter().enumerate() {
            let mut next = 0u64;
            for seg in &list {
                if seg.first != next {
                    return Err(format!(
                        "partition {pi}: segment {} starts at offset {} instead of {next}",
                        seg.id, seg.first
                    ));
                }
                next = next
                    .checked_add(seg.count)
                    .ok_or_else(|| format!("partition {pi}: offsets overflow"))?;
                s.seg_part.insert(seg.id, (pi, seg.count));
            }
            let chain = super::history::resume_chain(&*s.store, &list)
                .map_err(|e| format!("partition {pi}: {e}"))?;
            if let Some(part) = s.parts.get_mut(pi) {
                part.flushed = next;
                part.chain = chain;
                part.segs = list;
            }
        }
        Ok(s)
    }
}

/// The flushed part of a history, as a stored checkpoint holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flushed {
    /// Each partition's segments, by the pipeline's partition order.
    pub sources: Vec<Vec<SegRef>>,
    /// The late output's segments.
    pub late: Vec<SegRef>,
}
