//! Source history: per-partition consumed offsets, the exact event delivered
//! at every consumed offset, and the global event identities.
//!
//! SPEC "Events and deliveries", checked in this order: unknown partition;
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

use super::error::Rejection;
use super::event::{Delivery, Event};
use super::hash::StrIndex;
use super::keys::{KeyId, KeyTable};

/// Number of a unique event record.
pub type EventNo = u32;

/// A unique event: its id and identity.
#[derive(Debug, Clone)]
pub struct EventRec {
    /// Event id.
    pub id: Box<str>,
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

/// Consumed history and identities.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    history: Vec<Vec<EventNo>>,
    events: Vec<EventRec>,
    index: StrIndex,
}

impl Sources {
    /// Empty history for `partitions` partitions.
    pub fn new(partitions: usize) -> Sources {
        Sources {
            history: vec![Vec::new(); partitions],
            events: Vec::new(),
            index: StrIndex::default(),
        }
    }

    /// Consumed offset of a partition (-1 before the first delivery).
    pub fn consumed(&self, partition: usize) -> i64 {
        self.history[partition].len() as i64 - 1
    }

    /// Event numbers at offsets 0..=consumed of a partition.
    pub fn history(&self, partition: usize) -> &[EventNo] {
        &self.history[partition]
    }

    /// A unique event record.
    #[inline]
    pub fn event(&self, no: EventNo) -> &EventRec {
        &self.events[no as usize]
    }

    /// All unique event records.
    pub fn events(&self) -> &[EventRec] {
        &self.events
    }

    /// The record number of an id.
    pub fn find(&self, id: &str) -> Option<EventNo> {
        let events = &self.events;
        self.index.find(id, |p| &events[p as usize].id)
    }

    /// A mark to roll back to.
    pub fn mark(&self) -> Mark {
        Mark {
            history_lens: self.history.iter().map(Vec::len).collect(),
            events_len: self.events.len(),
        }
    }

    /// Undoes every resolution since `mark`.
    pub fn rollback(&mut self, mark: Mark) {
        for (h, len) in self.history.iter_mut().zip(mark.history_lens) {
            h.truncate(len);
        }
        while self.events.len() > mark.events_len {
            let rec = self.events.pop().expect("non-empty");
            let pos = self.events.len() as u32;
            self.index.remove(&rec.id, pos);
        }
    }

    /// Resolves one delivery on `partition` (already known) and records it.
    pub fn resolve(
        &mut self,
        partition: usize,
        delivery: &Delivery,
        keys: &mut KeyTable,
    ) -> Result<Resolved, Rejection> {
        let ev = &delivery.event;
        if ev.id.is_empty() {
            return Err(Rejection::BadRequest("event id must be non-empty".into()));
        }
        let consumed = self.consumed(partition);
        let offset = delivery.offset.unwrap_or(consumed + 1);
        if offset <= consumed {
            if offset >= 0 {
                let rec = self.event(self.history[partition][offset as usize]);
                if *rec.id == *ev.id
                    && rec.timestamp == ev.timestamp
                    && rec.value == ev.value
                    && **keys.name(rec.key) == *ev.key
                {
                    return Ok(Resolved::Redelivery);
                }
            }
            return Err(Rejection::OffsetConflict(format!(
                "partition {:?} already consumed offset {offset} with another event (consumed offset {consumed})",
                delivery.partition
            )));
        }
        if offset > consumed + 1 {
            return Err(Rejection::OffsetConflict(format!(
                "offset {offset} leaves a gap on partition {:?} (next offset is {})",
                delivery.partition,
                consumed + 1
            )));
        }
        match self.find(&ev.id) {
            Some(no) => {
                let rec = self.event(no);
                if rec.timestamp == ev.timestamp
                    && rec.value == ev.value
                    && **keys.name(rec.key) == *ev.key
                {
                    self.history[partition].push(no);
                    Ok(Resolved::Duplicate)
                } else {
                    Err(Rejection::IdentityConflict(format!(
                        "event id {:?} is already known with another key, timestamp or value",
                        ev.id
                    )))
                }
            }
            None => {
                let no = self.events.len() as EventNo;
                let key = keys.intern(&ev.key);
                self.push_unique(ev, key);
                self.history[partition].push(no);
                Ok(Resolved::Unique(no))
            }
        }
    }

    fn push_unique(&mut self, ev: &Event, key: KeyId) {
        let no = self.events.len() as u32;
        self.events.push(EventRec {
            id: ev.id.as_str().into(),
            key,
            timestamp: ev.timestamp,
            value: ev.value,
        });
        let events = &self.events;
        self.index.insert(&ev.id, no, |p| &events[p as usize].id);
    }

    /// Restore: appends the event at the next offset of `partition`, creating
    /// or checking its identity. Errors name the inconsistency.
    pub fn restore_push(
        &mut self,
        partition: usize,
        ev: &Event,
        keys: &mut KeyTable,
    ) -> Result<(), String> {
        if ev.id.is_empty() {
            return Err("an event id is empty".into());
        }
        match self.find(&ev.id) {
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
                self.push_unique(ev, key);
                self.history[partition].push(no);
            }
        }
        Ok(())
    }

    /// The full event of a record.
    pub fn to_event(&self, no: EventNo, keys: &KeyTable) -> Event {
        let rec = self.event(no);
        Event {
            id: rec.id.to_string(),
            key: keys.name(rec.key).to_string(),
            timestamp: rec.timestamp,
            value: rec.value,
        }
    }
}
