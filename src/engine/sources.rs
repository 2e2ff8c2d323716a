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
//! Each unique event is stored once (`EventRec`); the history of a partition
//! is the list of record numbers at its offsets, so duplicates cost 4 bytes.
//! A batch is resolved first with tentative inserts that `rollback` undoes, so
//! a rejected batch leaves this state exactly as it was.

use std::borrow::Cow;
use std::sync::Arc;

use super::error::Rejection;
use super::event::{DeliveryInput, Event};
use super::hash::StrIndex;
use super::idstr::IdStr;
use super::keys::{KeyId, KeyTable};

/// Number of a unique event record.
pub type EventNo = u32;

/// A unique event: its id and identity.
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
}

/// How a delivery resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// Identical event at an already consumed offset: no effect at all.
    Redelivery,
    /// Consumed, but the id is known with the same identity: adds nothing.
    Duplicate,
    /// Consumed, and the id is new: a unique event.
    Unique(EventNo),
}

/// Marks to undo tentative resolutions.
#[derive(Debug, Clone)]
pub struct Mark {
    history_lens: Vec<usize>,
    events_len: usize,
}

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A vector stored in fixed-size chunks: pushing never moves what is stored
/// (no doubling copies of a large history, no 2x peak while growing), and a
/// clone shares every chunk (copy-on-write: a chunk is copied only if the
/// original is appended to or popped while the clone still holds it), so a
/// snapshot for a checkpoint costs almost nothing.
#[derive(Debug, Clone)]
pub struct Chunked<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Clone> Chunked<T> {
    /// Appends.
    #[inline]
    pub fn push(&mut self, x: T) {
        match self.chunks.last_mut() {
            // The last chunk has room unless `len` is a multiple of CHUNK.
            Some(last) if !self.len.is_multiple_of(CHUNK) => Arc::make_mut(last).push(x),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(x);
                self.chunks.push(Arc::new(chunk));
            }
        }
        self.len += 1;
    }

    /// Removes the last element.
    pub fn pop(&mut self) -> Option<T> {
        let x = Arc::make_mut(self.chunks.last_mut()?).pop()?;
        self.len -= 1;
        if self.chunks.last().is_some_and(|c| c.is_empty()) {
            self.chunks.pop();
        }
        Some(x)
    }
}

impl<T> Chunked<T> {
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Element `i` (< len).
    #[inline]
    pub fn get(&self, i: usize) -> &T {
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }

    /// All elements in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

/// Consumed history and identities.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    history: Vec<Chunked<EventNo>>,
    events: Chunked<EventRec>,
    index: StrIndex,
}

impl Sources {
    /// A copy for reading history only (checkpoints): the events are shared
    /// copy-on-write and the id index is left empty, so it costs the
    /// per-partition offset lists and nothing else.
    pub fn history_copy(&self) -> Sources {
        Sources {
            history: self.history.clone(),
            events: self.events.clone(),
            index: StrIndex::default(),
        }
    }

    /// Empty history for `partitions` partitions.
    pub fn new(partitions: usize) -> Sources {
        Sources {
            history: (0..partitions).map(|_| Chunked::default()).collect(),
            events: Chunked::default(),
            index: StrIndex::default(),
        }
    }

    /// Consumed offset of a partition (-1 before the first delivery).
    pub fn consumed(&self, partition: usize) -> i64 {
        self.history[partition].len() as i64 - 1
    }

    /// Event numbers at offsets 0..=consumed of a partition.
    pub fn history(&self, partition: usize) -> &Chunked<EventNo> {
        &self.history[partition]
    }

    /// A unique event record.
    #[inline]
    pub fn event(&self, no: EventNo) -> &EventRec {
        self.events.get(no as usize)
    }

    /// All unique event records.
    pub fn events(&self) -> impl Iterator<Item = &EventRec> {
        self.events.iter()
    }

    /// The record number of an id.
    pub fn find(&self, id: &str) -> Option<EventNo> {
        self.find_hashed(StrIndex::hash(id), id)
    }

    #[inline]
    fn find_hashed(&self, h: u32, id: &str) -> Option<EventNo> {
        let events = &self.events;
        self.index
            .find(h, id, |p| events.get(p as usize).id.as_bytes())
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

    /// A mark to roll back to.
    pub fn mark(&self) -> Mark {
        Mark {
            history_lens: self.history.iter().map(Chunked::len).collect(),
            events_len: self.events.len(),
        }
    }

    /// Undoes every resolution since `mark`.
    pub fn rollback(&mut self, mark: Mark) {
        for (h, len) in self.history.iter_mut().zip(mark.history_lens) {
            while h.len() > len {
                h.pop();
            }
        }
        while self.events.len() > mark.events_len {
            let Some(rec) = self.events.pop() else {
                break;
            };
            let pos = self.events.len() as u32;
            self.index.remove(StrIndex::hash(rec.id.as_str()), pos);
        }
    }

    /// Resolves one delivery on `partition` (already known) and records it.
    /// `hash` is `StrIndex::hash` of the id. A unique event's id string is
    /// moved out of the delivery into the history.
    pub fn resolve<D: DeliveryInput>(
        &mut self,
        partition: usize,
        delivery: &mut D,
        hash: u32,
        keys: &mut KeyTable,
    ) -> Result<Resolved, Rejection> {
        let id = delivery.id();
        if id.is_empty() {
            return Err(Rejection::BadRequest("event id must be non-empty".into()));
        }
        let same = |rec: &EventRec, keys: &KeyTable| {
            rec.timestamp == delivery.timestamp()
                && rec.value == delivery.value()
                && **keys.name(rec.key) == *delivery.key()
        };
        let consumed = self.consumed(partition);
        let offset = delivery.offset().unwrap_or(consumed + 1);
        if offset < 0 {
            return Err(Rejection::OffsetConflict(format!(
                "offset {offset} is negative: offsets of partition {:?} start at 0 (next offset is {})",
                delivery.partition(),
                consumed + 1
            )));
        }
        if offset <= consumed {
            {
                let rec = self.event(*self.history[partition].get(offset as usize));
                if rec.id.as_bytes() == id.as_bytes() && same(rec, keys) {
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
        let events = &self.events;
        match self
            .index
            .probe(hash, id, |p| events.get(p as usize).id.as_bytes())
        {
            Ok(no) => {
                if same(self.event(no), keys) {
                    self.history[partition].push(no);
                    Ok(Resolved::Duplicate)
                } else {
                    Err(Rejection::IdentityConflict(format!(
                        "event id {id:?} is already known with another key, timestamp or value"
                    )))
                }
            }
            Err(vacant) => {
                let no = self.events.len() as EventNo;
                let key = keys.intern(delivery.key());
                let (timestamp, value) = (delivery.timestamp(), delivery.value());
                let id = IdStr::from_cow(delivery.take_id());
                self.events.push(EventRec {
                    id,
                    key,
                    timestamp,
                    value,
                });
                self.index.insert_vacant(vacant, hash, no);
                self.history[partition].push(no);
                Ok(Resolved::Unique(no))
            }
        }
    }

    fn push_unique(&mut self, hash: u32, id: IdStr, key: KeyId, timestamp: i64, value: i64) {
        let no = self.events.len() as u32;
        self.events.push(EventRec {
            id,
            key,
            timestamp,
            value,
        });
        self.index.insert(hash, no);
    }

    /// Restore: appends the event at the next offset of `partition`, creating
    /// or checking its identity. Errors name the inconsistency.
    pub fn restore_push(
        &mut self,
        partition: usize,
        ev: Event,
        keys: &mut KeyTable,
    ) -> Result<(), String> {
        if ev.id.is_empty() {
            return Err("an event id is empty".into());
        }
        let hash = StrIndex::hash(&ev.id);
        match self.find_hashed(hash, &ev.id) {
            Some(no) => {
                let rec = self.event(no);
                if rec.timestamp != ev.timestamp
                    || rec.value != ev.value
                    || **keys.name(rec.key) != *ev.key
                {
                    return Err(format!(
                        "event id {:?} is delivered with two different identities",
                        ev.id
                    ));
                }
                self.history[partition].push(no);
            }
            None => {
                let no = self.events.len() as EventNo;
                let key = keys.intern(&ev.key);
                self.push_unique(
                    hash,
                    IdStr::from_cow(Cow::Owned(ev.id)),
                    key,
                    ev.timestamp,
                    ev.value,
                );
                self.history[partition].push(no);
            }
        }
        Ok(())
    }

    /// The full event of a record.
    pub fn to_event(&self, no: EventNo, keys: &KeyTable) -> Event {
        let rec = self.event(no);
        Event {
            id: rec.id.as_str().to_string(),
            key: keys.name(rec.key).to_string(),
            timestamp: rec.timestamp,
            value: rec.value,
        }
    }
}
