//! A stored window checkpoint's history read back from the segments
//! (an envelope served, or a restore's history hashed), checked block by
//! block as it is read.

use crate::engine::checkpoint::chain::{Chain, Hash};
use crate::engine::checkpoint::{HistoryParts, Out};
use crate::engine::history::{SegRef, StoreFault};
use crate::engine::Flushed;
use crate::store::segments::BLOCK_ITEMS;
use crate::store::Reader;

/// A stored window checkpoint's history, read back block by block through
/// a reading connection (an envelope served, or a restore's history
/// hashed). Each block is checked against its checksum as it is read
/// (`Reader::segment_blocks`), each segment's text against the chunk
/// records stored with it, and the chain of each list is kept, so that the
/// caller can check the digest once everything is written.
pub(crate) struct StoredParts<'a> {
    reader: &'a Reader,
    flushed: &'a Flushed,
    /// The chain value of each list written: the partitions', then the
    /// late output's (last).
    chains: std::cell::RefCell<Vec<Option<Hash>>>,
}

impl<'a> StoredParts<'a> {
    pub(crate) fn new(reader: &'a Reader, flushed: &'a Flushed) -> StoredParts<'a> {
        StoredParts {
            reader,
            flushed,
            chains: std::cell::RefCell::new(vec![None; flushed.sources.len() + 1]),
        }
    }

    /// The chains of the lists written: `(sources by partition, late)`;
    /// `None` until every list was written.
    pub(crate) fn chains(&self) -> Option<(Vec<Hash>, Hash)> {
        let all: Option<Vec<Hash>> = self.chains.borrow().iter().copied().collect();
        let mut all = all?;
        let late = all.pop()?;
        Some((all, late))
    }

    fn segs(&self, segs: &[SegRef], out: &mut dyn Out, slot: usize) -> Result<(), StoreFault> {
        let corrupt = |e: String| crate::store::Error::Corrupt(e);
        let mut first = true;
        let mut chain = Chain::new();
        for seg in segs.iter().filter(|s| s.count > 0) {
            if chain.len() != seg.first {
                return Err(StoreFault(format!(
                    "segment {} starts at item {}, after {} items",
                    seg.id,
                    seg.first,
                    chain.len()
                )));
            }
            let mut done = Vec::new();
            let mut left = seg.count;
            self.reader
                .segment_blocks(seg.id, |text| {
                    if !first {
                        out.put(b",").map_err(|e| corrupt(e.0))?;
                    }
                    first = false;
                    let n = left.min(BLOCK_ITEMS);
                    left -= n;
                    chain
                        .push_run(text, n, &mut done)
                        .map_err(|m| corrupt(format!("segment {}: {m}", seg.id)))?;
                    out.put(text).map_err(|e| corrupt(e.0))
                })
                .map_err(|e| StoreFault(e.to_string()))?;
            let stored = self
                .reader
                .segment_chunks(seg.id)
                .map_err(|e| StoreFault(e.to_string()))?;
            if left != 0 || stored != done {
                let at = done
                    .iter()
                    .zip(&stored)
                    .find(|(a, b)| a != b)
                    .map_or(String::new(), |(a, _)| format!(" (chunk {})", a.index));
                return Err(StoreFault(format!(
                    "segment {}: its text does not match the chunk records stored with it{at}",
                    seg.id
                )));
            }
        }
        if let Some(c) = self.chains.borrow_mut().get_mut(slot) {
            *c = Some(chain.value());
        }
        Ok(())
    }
}

impl HistoryParts for StoredParts<'_> {
    fn late(&self, out: &mut dyn Out) -> Result<(), StoreFault> {
        self.segs(&self.flushed.late, out, self.flushed.sources.len())
    }

    fn sources(&self, p: usize, out: &mut dyn Out) -> Result<(), StoreFault> {
        self.segs(
            self.flushed.sources.get(p).map_or(&[], Vec::as_slice),
            out,
            p,
        )
    }
}
