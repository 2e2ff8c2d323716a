//! Where a new run's entries come from (a sealed memtable, or a k-way
//! merge of runs read part by part) and the loop that writes them in
//! short lent transactions.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rusqlite::Connection;

use crate::error::{corrupt, Result};
use crate::part::decode_part;
use crate::run::{with_part, Run};
use crate::txn::{lend_one, short_tx, Lend, Limits};
use crate::writer::RunWriter;

/// Where a new run's sorted entries come from.
pub(crate) enum Source {
    /// A sealed memtable's pairs, sorted; `at` the next one.
    Sorted { entries: Vec<(u64, u64)>, at: usize },
    /// A k-way merge of runs.
    Merge(Merge),
}

/// Why [`Source::fill`] stopped.
pub(crate) enum Fill {
    /// The writer holds a transaction's worth of parts.
    Full,
    /// A merge input needs parts read from disk.
    Fetch,
    /// Every entry was pushed.
    Done,
}

impl Source {
    /// Pushes entries into `out` (CPU only, no connection) until it holds
    /// `bytes` of encoded parts, an input needs parts read, or the end.
    pub(crate) fn fill(&mut self, out: &mut RunWriter, bytes: usize) -> Result<Fill> {
        match self {
            Source::Sorted { entries, at } => {
                while out.buffered() < bytes {
                    let Some(&(h, p)) = entries.get(*at) else {
                        return Ok(Fill::Done);
                    };
                    *at += 1;
                    out.push(h, p)?;
                }
                Ok(Fill::Full)
            }
            Source::Merge(m) => m.fill(out, bytes),
        }
    }

    /// Reads the parts the inputs of a merge will need next.
    pub(crate) fn top_up(&mut self, conn: &Connection) -> Result<()> {
        match self {
            Source::Sorted { .. } => Ok(()),
            Source::Merge(m) => m.cursors.iter_mut().try_for_each(|c| c.top_up(conn)),
        }
    }
}

/// A streaming k-way merge of runs, paused whenever an input has no part
/// left in memory (the next lent transaction reads some).
pub(crate) struct Merge {
    pub(crate) cursors: Vec<Cursor>,
    pub(crate) heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// Cursors whose next entry is not in the heap (all of them at first).
    pub(crate) waiting: Vec<usize>,
}

impl Merge {
    /// Each input keeps about its share of a transaction's parts read
    /// ahead (random hashes consume the inputs in proportion to their
    /// sizes), plus one.
    pub(crate) fn new(inputs: &[Arc<Run>], parts_per_tx: usize) -> Merge {
        let total = inputs
            .iter()
            .map(|r| u128::from(r.entries))
            .sum::<u128>()
            .max(1);
        let cursors: Vec<Cursor> = inputs
            .iter()
            .map(|run| Cursor {
                run: run.clone(),
                fetch: 0,
                raw: VecDeque::new(),
                want: ((parts_per_tx as u128 * u128::from(run.entries)).div_ceil(total) as usize)
                    + 1,
                buf: Vec::new(),
                at: 0,
                seen: 0,
            })
            .collect();
        Merge {
            waiting: (0..cursors.len()).rev().collect(),
            heap: BinaryHeap::with_capacity(cursors.len()),
            cursors,
        }
    }

    pub(crate) fn fill(&mut self, out: &mut RunWriter, bytes: usize) -> Result<Fill> {
        loop {
            while let Some(&i) = self.waiting.last() {
                let c = self
                    .cursors
                    .get_mut(i)
                    .ok_or_else(|| corrupt(format!("merge input {i} is missing")))?;
                match c.next()? {
                    Next::Entry(h, p) => self.heap.push(Reverse((h, p, i))),
                    Next::End => {}
                    Next::Fetch => return Ok(Fill::Fetch),
                }
                self.waiting.pop();
            }
            if out.buffered() >= bytes {
                return Ok(Fill::Full);
            }
            let Some(Reverse((h, p, i))) = self.heap.pop() else {
                break;
            };
            out.push(h, p)?;
            self.waiting.push(i);
        }
        for c in &self.cursors {
            if c.seen != c.run.entries {
                return Err(corrupt(format!(
                    "run {} holds {} entries, its row says {}",
                    c.run.id, c.seen, c.run.entries
                )));
            }
        }
        Ok(Fill::Done)
    }
}

/// Reads a run's entries in order: part blobs read ahead by lent
/// transactions, decoded one part at a time.
pub(crate) struct Cursor {
    pub(crate) run: Arc<Run>,
    /// The next part to read from disk.
    pub(crate) fetch: usize,
    /// Parts read and not decoded yet (part number, blob).
    pub(crate) raw: VecDeque<(usize, Vec<u8>)>,
    /// Parts to keep in `raw` after a top up.
    pub(crate) want: usize,
    /// The decoded part.
    pub(crate) buf: Vec<(u64, u64)>,
    pub(crate) at: usize,
    pub(crate) seen: u64,
}

pub(crate) enum Next {
    Entry(u64, u64),
    /// Parts must be read first.
    Fetch,
    End,
}

impl Cursor {
    pub(crate) fn next(&mut self) -> Result<Next> {
        loop {
            if let Some(&(h, p)) = self.buf.get(self.at) {
                self.at += 1;
                self.seen += 1;
                return Ok(Next::Entry(h, p));
            }
            let Some((part, blob)) = self.raw.pop_front() else {
                return Ok(if self.fetch < self.run.fences.len() {
                    Next::Fetch
                } else {
                    Next::End
                });
            };
            let fence =
                *self.run.fences.get(part).ok_or_else(|| {
                    corrupt(format!("run {}: no fence for part {part}", self.run.id))
                })?;
            self.buf.clear();
            decode_part(&blob, fence, &mut self.buf)?;
            self.at = 0;
        }
    }

    pub(crate) fn top_up(&mut self, conn: &Connection) -> Result<()> {
        while self.raw.len() < self.want && self.fetch < self.run.fences.len() {
            let blob = with_part(conn, self.run.id, self.fetch, |b| Ok(b.to_vec()))?;
            self.raw.push_back((self.fetch, blob));
            self.fetch += 1;
        }
        Ok(())
    }
}

/// Fills `out` from `src` and writes it in short transactions (each also
/// reads ahead for a merge's inputs), until what is left to write (the
/// last parts and the filter pieces) fits in one transaction: the final
/// one, which the caller lends.
pub(crate) fn write_chunks(
    lend: &mut Lend<'_>,
    src: &mut Source,
    out: &mut RunWriter,
    lim: &Limits,
) -> Result<()> {
    loop {
        let fill = src.fill(out, lim.tx_bytes)?;
        if matches!(fill, Fill::Done) {
            break;
        }
        lend_one(lend, &mut |conn| {
            let wrote = short_tx(conn, |tx| {
                let wrote = out.write_items(tx, lim.tx_bytes)?;
                src.top_up(tx)?;
                Ok(wrote)
            })?;
            out.wrote(wrote);
            Ok(())
        })?;
    }
    out.finish_parts()?;
    while out.unwritten_bytes() > lim.tx_bytes {
        lend_one(lend, &mut |conn| {
            let wrote = short_tx(conn, |tx| out.write_items(tx, lim.tx_bytes))?;
            out.wrote(wrote);
            Ok(())
        })?;
    }
    Ok(())
}
