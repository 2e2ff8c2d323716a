//! Writing a new run: its parts encoded as its sorted entries come, its
//! filter filled piece by piece, all stored by lent transactions.

use std::collections::VecDeque;
use std::sync::OnceLock;

use rusqlite::{params, Connection};

use crate::checksum::with_checksum;
use crate::error::{corrupt, Op, Result};
use crate::filter::{
    block_of, filter_blocks, set_bits, Bloom, PIECE_BYTES, PROBES, SORTED_LAYOUT, WORDS_PER_BLOCK,
};
use crate::hash::mix;
use crate::part::{encode_part, PartPlan, MAX_PART_ENTRIES};
use crate::row_ids::{next_run_id, row_key};
use crate::run::Run;

/// Writes a run's parts as its sorted entries come (encoded in memory,
/// then stored by lent transactions), then its filter pieces and row.
pub(crate) struct RunWriter {
    /// Its run id, once a transaction has stored its row (not live).
    pub(crate) id: Option<u64>,
    /// Entries not yet encoded, sorted.
    pub(crate) buf: Vec<(u64, u64)>,
    /// Buffered entries from which to try filling a part.
    pub(crate) target: usize,
    /// Bytes a part may take: one database page (see `Limits::part_budget`).
    pub(crate) budget: usize,
    pub(crate) fences: Vec<u64>,
    /// Its filter's blocks (the sorted layout: entries, which come in
    /// hash order, fill it piece by piece).
    pub(crate) blocks: u64,
    /// Keeps the whole filter in memory, for the run to be installed with
    /// it (a flush); otherwise (a merge) only the piece being filled is in
    /// memory, and the run's filter is read back once it is installed.
    pub(crate) keep: bool,
    /// The whole filter (`keep`), or the words of piece `cur` only.
    pub(crate) words: Vec<u64>,
    /// The filter piece being filled.
    pub(crate) cur: usize,
    /// Filter pieces complete and not yet stored, as stored.
    pub(crate) ready: VecDeque<Vec<u8>>,
    pub(crate) ready_bytes: usize,
    pub(crate) entries: u64,
    pub(crate) last: Option<(u64, u64)>,
    /// Encoded parts not yet stored: part number, blob.
    pub(crate) pending: VecDeque<(usize, Vec<u8>)>,
    pub(crate) pending_bytes: usize,
    /// Every entry is encoded: the filter is complete.
    pub(crate) finished: bool,
    /// Filter pieces stored.
    pub(crate) pieces_written: usize,
}

/// What one transaction stored (applied by [`RunWriter::wrote`] once it
/// committed).
pub(crate) struct Wrote {
    /// The run's id, once its row is stored.
    pub(crate) id: Option<u64>,
    pub(crate) parts: usize,
    pub(crate) pieces: usize,
}

/// Filter words per piece.
pub(crate) const PIECE_WORDS: usize = PIECE_BYTES / 8;

impl RunWriter {
    pub(crate) fn new(budget: usize, expected: u64, keep: bool) -> RunWriter {
        let blocks = filter_blocks(expected);
        let words = if keep {
            blocks as usize * WORDS_PER_BLOCK
        } else {
            (blocks as usize * WORDS_PER_BLOCK).min(PIECE_WORDS)
        };
        RunWriter {
            id: None,
            buf: Vec::new(),
            target: 1024,
            budget,
            fences: Vec::new(),
            blocks,
            keep,
            words: vec![0; words],
            cur: 0,
            ready: VecDeque::new(),
            ready_bytes: 0,
            entries: 0,
            last: None,
            pending: VecDeque::new(),
            pending_bytes: 0,
            finished: false,
            pieces_written: 0,
        }
    }

    /// Adds the next pair: pairs come sorted; an exact repeat is dropped.
    pub(crate) fn push(&mut self, hash: u64, pos: u64) -> Result<()> {
        if let Some(last) = self.last {
            if (hash, pos) == last {
                return Ok(());
            }
            if (hash, pos) < last {
                return Err(corrupt(format!(
                    "a new run: entries out of order ({last:?} then {:?})",
                    (hash, pos)
                )));
            }
        }
        self.last = Some((hash, pos));
        self.filter_insert(hash)?;
        self.buf.push((hash, pos));
        self.entries += 1;
        if self.buf.len() >= self.target {
            self.encode_parts(false)?;
        }
        Ok(())
    }

    /// Encodes a part of as many buffered entries as fit the budget, once
    /// the buffer holds more than that (all of them when `finishing`).
    pub(crate) fn encode_parts(&mut self, finishing: bool) -> Result<()> {
        while !self.buf.is_empty() {
            let plan = PartPlan::new(&self.buf);
            let fit = plan.fit(&self.buf, self.budget);
            if fit == self.buf.len() && !finishing && fit < MAX_PART_ENTRIES as usize {
                // all fit: wait for more
                self.target = (fit + fit / 2).min(MAX_PART_ENTRIES as usize);
                return Ok(());
            }
            let part = self.buf.get(..fit).unwrap_or(&[]);
            let Some(&(first, _)) = part.first() else {
                return Err(corrupt("a new run: an empty part".to_string()));
            };
            let mut encoded = Vec::with_capacity(self.budget);
            encode_part(part, plan.k, &mut encoded);
            self.pending_bytes += encoded.len();
            self.pending.push_back((self.fences.len(), encoded));
            self.fences.push(first);
            self.buf.drain(..fit);
            self.target = (fit + fit / 8 + 1).min(MAX_PART_ENTRIES as usize);
            if !finishing {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Sets `hash`'s bits, first completing the pieces before its block
    /// (entries come in hash order, and so do their blocks).
    pub(crate) fn filter_insert(&mut self, hash: u64) -> Result<()> {
        let mixed = mix(hash);
        let word = block_of(self.blocks, true, hash, mixed) as usize * WORDS_PER_BLOCK;
        while self.cur < word / PIECE_WORDS {
            self.seal_piece();
        }
        let at = if self.keep {
            word
        } else {
            word - self.cur * PIECE_WORDS
        };
        let block = self
            .words
            .get_mut(at..at + WORDS_PER_BLOCK)
            .ok_or_else(|| corrupt(format!("a new run: filter block {word} out of range")))?;
        set_bits(block, mixed, PROBES);
        Ok(())
    }

    /// Words of filter piece `n`.
    pub(crate) fn piece_words(&self, n: usize) -> usize {
        (self.blocks as usize * WORDS_PER_BLOCK)
            .saturating_sub(n * PIECE_WORDS)
            .min(PIECE_WORDS)
    }

    /// Piece `cur` is complete: queued as stored (its bytes and a
    /// checksum), and the next one started.
    pub(crate) fn seal_piece(&mut self) {
        let n = self.cur;
        let len = self.piece_words(n);
        let from = if self.keep { n * PIECE_WORDS } else { 0 };
        let words = self.words.get(from..from + len).unwrap_or(&[]);
        let mut bytes = Vec::with_capacity(len * 8 + 4);
        for w in words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        let piece = with_checksum(bytes);
        self.ready_bytes += piece.len();
        self.ready.push_back(piece);
        self.cur += 1;
        if !self.keep {
            self.words = vec![0; self.piece_words(self.cur)];
        }
    }

    /// Encodes the last entries: the parts and the filter are complete.
    pub(crate) fn finish_parts(&mut self) -> Result<()> {
        self.encode_parts(true)?;
        while self.cur < self.pieces() {
            self.seal_piece();
        }
        self.finished = true;
        Ok(())
    }

    pub(crate) fn pieces(&self) -> usize {
        (self.blocks as usize * WORDS_PER_BLOCK).div_ceil(PIECE_WORDS)
    }

    /// Bytes encoded and not yet stored: parts and filter pieces.
    pub(crate) fn buffered(&self) -> usize {
        self.pending_bytes + self.ready_bytes
    }

    /// Bytes still to store.
    pub(crate) fn unwritten_bytes(&self) -> usize {
        self.buffered()
    }

    /// Stores the run's row, not live, under a new id.
    pub(crate) fn insert_row(&self, tx: &Connection) -> Result<u64> {
        let id = next_run_id(tx)?;
        tx.execute(
            "INSERT INTO id_runs \
             (run, live, entries, parts, filter_blocks, filter_probes, fences) \
             VALUES (?1, 0, 0, 0, 0, 0, x'')",
            [id as i64],
        )
        .op("INSERT INTO id_runs (not live)")?;
        Ok(id)
    }

    /// Stores pending parts, then (once finished) filter pieces, in order,
    /// up to `max_bytes` (at least one of them), in the caller's
    /// transaction; the first that stores any also stores the run's row,
    /// not live. Changes nothing in `self`: [`RunWriter::wrote`] does once
    /// the transaction commits.
    pub(crate) fn write_items(&self, tx: &Connection, max_bytes: usize) -> Result<Wrote> {
        self.write_items_as(tx, max_bytes, self.id)
    }

    pub(crate) fn write_items_as(
        &self,
        tx: &Connection,
        max_bytes: usize,
        id: Option<u64>,
    ) -> Result<Wrote> {
        let mut bytes = 0usize;
        let mut parts = 0;
        for (_, blob) in &self.pending {
            if parts > 0 && bytes.saturating_add(blob.len()) > max_bytes {
                break;
            }
            bytes += blob.len();
            parts += 1;
        }
        let mut pieces = 0;
        for piece in &self.ready {
            if parts + pieces > 0 && bytes.saturating_add(piece.len()) > max_bytes {
                break;
            }
            bytes += piece.len();
            pieces += 1;
        }
        if parts + pieces == 0 {
            return Ok(Wrote { id, parts, pieces });
        }
        let id = match id {
            Some(id) => id,
            None => self.insert_row(tx)?,
        };
        let mut stmt = tx
            .prepare_cached("INSERT INTO id_parts (key, data) VALUES (?1, ?2)")
            .op("INSERT INTO id_parts")?;
        for (n, blob) in self.pending.iter().take(parts) {
            stmt.execute(params![row_key(id, *n)?, blob])
                .op("INSERT INTO id_parts")?;
        }
        let mut stmt = tx
            .prepare_cached("INSERT INTO id_filters (key, data) VALUES (?1, ?2)")
            .op("INSERT INTO id_filters")?;
        for (k, piece) in self.ready.iter().take(pieces).enumerate() {
            stmt.execute(params![row_key(id, self.pieces_written + k)?, piece])
                .op("INSERT INTO id_filters")?;
        }
        Ok(Wrote {
            id: Some(id),
            parts,
            pieces,
        })
    }

    /// Forgets what a committed transaction stored.
    pub(crate) fn wrote(&mut self, wrote: Wrote) {
        if wrote.id.is_some() {
            self.id = wrote.id;
        }
        for (_, blob) in self.pending.drain(..wrote.parts.min(self.pending.len())) {
            self.pending_bytes -= blob.len();
        }
        for piece in self.ready.drain(..wrote.pieces.min(self.ready.len())) {
            self.ready_bytes -= piece.len();
        }
        self.pieces_written += wrote.pieces;
    }

    /// The final transaction's part: stores what is left and makes the row
    /// complete and live. Returns the run id.
    pub(crate) fn write_final(&self, tx: &Connection) -> Result<u64> {
        if !self.finished {
            return Err(corrupt("a new run made live before its end".to_string()));
        }
        let id = match self.id {
            Some(id) => id,
            None => self.insert_row(tx)?,
        };
        let wrote = self.write_items_as(tx, usize::MAX, Some(id))?;
        if wrote.parts != self.pending.len() || self.pieces_written + wrote.pieces != self.pieces()
        {
            return Err(corrupt(format!("run {id}: not all of it was stored")));
        }
        let fences: Vec<u8> = self.fences.iter().flat_map(|f| f.to_le_bytes()).collect();
        let updated = tx
            .execute(
                "UPDATE id_runs SET live = 1, entries = ?2, parts = ?3, filter_blocks = ?4, \
                 filter_probes = ?5, fences = ?6 WHERE run = ?1 AND live = 0",
                params![
                    id as i64,
                    self.entries as i64,
                    self.fences.len() as i64,
                    self.blocks as i64,
                    i64::from(PROBES) | SORTED_LAYOUT,
                    with_checksum(fences)
                ],
            )
            .op("UPDATE id_runs SET live = 1")?;
        if updated != 1 {
            return Err(corrupt(format!("run {id}: its row is gone")));
        }
        Ok(id)
    }

    /// The stored run, with its filter when it was kept.
    pub(crate) fn into_run(self, id: u64) -> Run {
        let filter = if self.keep {
            OnceLock::from(Bloom {
                words: self.words,
                blocks: self.blocks,
                probes: PROBES,
                sorted: true,
            })
        } else {
            OnceLock::new()
        };
        Run {
            id,
            entries: self.entries,
            fences: self.fences,
            blocks: self.blocks,
            probes: PROBES,
            sorted: true,
            filter,
        }
    }
}
