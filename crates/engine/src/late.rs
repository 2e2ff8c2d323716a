//! The late side output.
//!
//! docs/semantics.md, "Lateness": a unique event is late iff a global watermark W exists and
//! `timestamp + lateness < W`. Exactly one record `(event, W)` is appended per
//! late unique event (a redelivery of its id is a duplicate, never late
//! again); records are numbered from 1 and kept for the processor's lifetime:
//! the flushed ones in late segments of the history store (see
//! [`super::history`]), the newer ones in memory.

use std::sync::Arc;

use super::checkpoint::chain::{Chain, Hash};
use super::event::Event;
use super::history::{HistoryStore, NewSegment, SegId, SegKind, SegRef, StoreFault};

/// A late record in memory: the event and the watermark it was late against.
pub type LateEntry = (Event, i64);

/// The late records, `seq = index + 1`.
#[derive(Debug, Clone, Default)]
pub struct LateOutput {
    /// Flushed segments, covering records `0..flushed` in order.
    segs: Vec<SegRef>,
    flushed: u64,
    /// The digest chain of the flushed records.
    chain: Chain,
    tail: Vec<LateEntry>,
}

impl LateOutput {
    /// Late output whose flushed part is `segs`, with the digest chain of
    /// their records (see `history::resume_chain`).
    pub fn from_segments(segs: Vec<SegRef>, chain: Chain) -> Result<LateOutput, String> {
        let mut next = 0u64;
        for s in &segs {
            if s.first != next {
                return Err(format!(
                    "late segment {} starts at record {} instead of {next}",
                    s.id, s.first
                ));
            }
            next = next
                .checked_add(s.count)
                .ok_or_else(|| "late records overflow".to_string())?;
        }
        if chain.len() != next {
            return Err(format!(
                "the late segments hold {next} records, their chain {}",
                chain.len()
            ));
        }
        Ok(LateOutput {
            segs,
            flushed: next,
            chain,
            tail: Vec::new(),
        })
    }

    /// Appends a record; returns its `seq`.
    pub fn push(&mut self, event: Event, watermark: i64) -> u64 {
        self.tail.push((event, watermark));
        self.len()
    }

    /// Number of records (= the last `seq`).
    pub fn len(&self) -> u64 {
        self.flushed + self.tail.len() as u64
    }

    /// No late record at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The flushed segments.
    pub fn segments(&self) -> &[SegRef] {
        &self.segs
    }

    /// Records with `seq > after`, at most `limit`.
    pub fn records(
        &self,
        store: &Arc<dyn HistoryStore>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Event, i64)>, StoreFault> {
        let mut out = Vec::new();
        let mut i = after;
        while i < self.len() && out.len() < limit {
            if i >= self.flushed {
                let Some((e, w)) = usize::try_from(i - self.flushed)
                    .ok()
                    .and_then(|k| self.tail.get(k))
                else {
                    break;
                };
                out.push((i + 1, e.clone(), *w));
            } else {
                let at = self.segs.partition_point(|s| s.first <= i);
                let seg = at
                    .checked_sub(1)
                    .and_then(|k| self.segs.get(k))
                    .ok_or_else(|| StoreFault(format!("late record {} is in no segment", i + 1)))?;
                let (e, w) = store.late(seg.id, i - seg.first)?;
                out.push((i + 1, e, w));
            }
            i += 1;
        }
        Ok(out)
    }

    /// Appends the canonical late items (flushed segments, then the tail),
    /// separated by commas.
    pub fn write(
        &self,
        store: &Arc<dyn HistoryStore>,
        out: &mut Vec<u8>,
    ) -> Result<(), StoreFault> {
        let mut first = true;
        for s in &self.segs {
            if s.count == 0 {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            store.text(s.id, out)?;
        }
        for (e, w) in &self.tail {
            if !first {
                out.push(b',');
            }
            first = false;
            super::segment_text::write_late(out, &e.id, &e.key, e.timestamp, e.value, *w);
        }
        Ok(())
    }

    /// The tail as a late segment to store (none when empty).
    pub fn tail_segment(&self) -> Option<NewSegment> {
        if self.tail.is_empty() {
            return None;
        }
        let mut text = Vec::with_capacity(self.tail.len() * 48);
        let mut chain = self.chain.clone();
        let mut chunks = Vec::new();
        for (i, (e, w)) in self.tail.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            let start = text.len();
            super::segment_text::write_late(&mut text, &e.id, &e.key, e.timestamp, e.value, *w);
            chunks.extend(chain.push(&text[start..]));
        }
        Some(NewSegment {
            bytes: text.len() as u64,
            kind: SegKind::Late,
            partition: 0,
            first: self.flushed,
            count: self.tail.len() as u64,
            text,
            ids: Vec::new(),
            ends: Vec::new(),
            chunks,
            chain,
        })
    }

    /// The digest chain of every record (flushed and tail).
    pub fn chain_value(&self) -> Hash {
        let mut chain = self.chain.clone();
        let mut buf = Vec::with_capacity(128);
        for (e, w) in &self.tail {
            buf.clear();
            super::segment_text::write_late(&mut buf, &e.id, &e.key, e.timestamp, e.value, *w);
            chain.push(&buf);
        }
        chain.value()
    }

    /// Records in the tail.
    pub fn tail_len(&self) -> usize {
        self.tail.len()
    }

    /// The first `n` tail records were stored as segment `id` of `bytes`
    /// bytes, whose array's chain is then `chain` (see
    /// [`LateOutput::tail_segment`]).
    pub fn flushed(&mut self, n: usize, id: SegId, bytes: u64, chain: Chain) {
        let n = n.min(self.tail.len());
        if n == 0 {
            return;
        }
        self.chain = chain;
        self.segs.push(SegRef {
            id,
            first: self.flushed,
            count: n as u64,
            bytes,
        });
        self.flushed += n as u64;
        self.tail.drain(..n);
    }
}
