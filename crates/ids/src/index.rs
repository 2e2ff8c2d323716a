//! The processor's side: [`IdIndex`] (open, add, lookup, seal).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension};

use crate::error::{corrupt, Op, Result};
use crate::filter::{BLOCK_BITS, SORTED_LAYOUT};
use crate::flusher::IdFlusher;
use crate::hash::mix;
use crate::memtable::Memtable;
use crate::part::MAX_PART_ENTRIES;
use crate::row_ids::run_id;
use crate::run::{decode_fences, load_filter, Run};
use crate::shared::{Sealed, Shared, State};
use crate::txn::TRANSACTION_BYTES;

/// The id index, as the processor thread holds it: its memtable and a
/// handle on the shared read side. See the crate docs.
pub struct IdIndex {
    mem: Memtable,
    pub(crate) shared: Arc<Shared>,
}

impl IdIndex {
    /// Loads the index from the database (run metadata, fences, the stored
    /// filters of the live runs): an empty memtable and the last flushed
    /// mark. Reads only (any connection on the database will do, the
    /// reading one included). Rows of runs that are not live (a flush or
    /// merge a crash interrupted, or merged runs whose rows were not all
    /// deleted) are ignored here and deleted by the first flush (or
    /// [`IdFlusher::cleanup_with`]). One `IdIndex` per database: its
    /// flusher deletes every run that is not live.
    pub fn open(conn: &Connection) -> Result<IdIndex> {
        // One snapshot for all the reads (unless the caller has one open).
        let tx = if conn.is_autocommit() {
            Some(conn.unchecked_transaction().op("BEGIN (id index open)")?)
        } else {
            None
        };
        let mark = conn
            .query_row("SELECT mark FROM id_index WHERE one = 1", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
            .op("SELECT mark FROM id_index")?
            .map(|m| m as u64);
        let mut runs = Vec::new();
        {
            let mut stmt = conn
                .prepare(
                    "SELECT run, entries, parts, filter_blocks, filter_probes, fences \
                     FROM id_runs WHERE live = 1 ORDER BY run",
                )
                .op("SELECT FROM id_runs")?;
            let mut rows = stmt.query([]).op("SELECT FROM id_runs")?;
            while let Some(row) = rows.next().op("SELECT FROM id_runs (next)")? {
                let id: i64 = row.get(0).op("id_runs.run")?;
                let entries: i64 = row.get(1).op("id_runs.entries")?;
                let parts: i64 = row.get(2).op("id_runs.parts")?;
                let blocks: i64 = row.get(3).op("id_runs.filter_blocks")?;
                let probes: i64 = row.get(4).op("id_runs.filter_probes")?;
                let fences = match row.get_ref(5).op("id_runs.fences")? {
                    ValueRef::Blob(b) => decode_fences(b, id)?,
                    _ => return Err(corrupt(format!("run {id}: fences are not a blob"))),
                };
                runs.push((id, entries, parts, blocks, probes, fences));
            }
        }
        let mut loaded = Vec::with_capacity(runs.len());
        for (id, entries, parts, blocks, probes, fences) in runs {
            let id = run_id(id)?;
            if entries <= 0
                || parts <= 0
                || usize::try_from(parts).ok() != Some(fences.len())
                || entries > parts.saturating_mul(MAX_PART_ENTRIES as i64)
            {
                return Err(corrupt(format!(
                    "run {id}: {entries} entries in {parts} parts with {} fences",
                    fences.len()
                )));
            }
            let sorted = probes & SORTED_LAYOUT != 0;
            let probes = u32::try_from(probes & !SORTED_LAYOUT)
                .ok()
                .filter(|p| (1..=16).contains(p))
                .ok_or_else(|| corrupt(format!("run {id}: {probes} filter probes")))?;
            let filter = load_filter(conn, id, blocks, probes, sorted)?;
            loaded.push(Arc::new(Run {
                id,
                entries: entries as u64,
                fences,
                blocks: filter.blocks,
                probes,
                sorted,
                filter: OnceLock::from(filter),
            }));
        }
        if let Some(tx) = tx {
            tx.commit().op("COMMIT (id index open)")?;
        }
        Ok(IdIndex {
            mem: Memtable::default(),
            shared: Arc::new(Shared {
                state: RwLock::new(State {
                    sealed: Vec::new(),
                    runs: loaded,
                    mark,
                }),
                flushing: Mutex::new(()),
                merging: Mutex::new(()),
                clean: AtomicBool::new(false),
                page: AtomicUsize::new(0),
                merging_entries: AtomicU64::new(0),
                building: AtomicUsize::new(0),
                tx_bytes: AtomicUsize::new(TRANSACTION_BYTES),
            }),
        })
    }

    /// Adds entries to the memtable (not durable until flushed). Lookups
    /// see them at once. An exact `(hash, pos)` pair already in the memtable
    /// is not stored twice.
    pub fn add(&mut self, entries: impl IntoIterator<Item = (u64, u64)>) {
        for (hash, pos) in entries {
            self.mem.add(hash, pos);
        }
    }

    /// Appends to `out` every position stored under `hash`: the memtable,
    /// the sealed memtables and every run whose filter says it may hold it
    /// (in any order; a pair added in several flushes may come more than
    /// once). `conn` reads the parts: a connection on the same database, not
    /// inside a transaction older than the last flush (see the crate docs).
    pub fn lookup(&self, conn: &Connection, hash: u64, out: &mut Vec<u64>) -> Result<()> {
        self.mem.lookup(hash, out);
        let state = self.shared.read();
        for sealed in &state.sealed {
            sealed.mem.lookup(hash, out);
        }
        let mixed = mix(hash);
        for run in &state.runs {
            if run.may_contain(hash, mixed) {
                run.lookup(conn, hash, out)?;
            }
        }
        Ok(())
    }

    /// For each hash, whether the index may hold it: in a memtable, or in
    /// a run whose filter says so (`false`: surely not; no disk read).
    pub fn may_contain(&self, hashes: &[u64], out: &mut Vec<bool>) {
        out.clear();
        let state = self.shared.read();
        for &h in hashes {
            let mixed = mix(h);
            let hit = self.mem.first.contains_key(&h)
                || state.sealed.iter().any(|s| s.mem.first.contains_key(&h))
                || state.runs.iter().any(|r| r.may_contain(h, mixed));
            out.push(hit);
        }
    }

    /// Freezes the memtable with `mark`: it stays visible to lookups until
    /// [`IdFlusher::flush_with`] has written it, and then `mark` is the durable
    /// mark. `mark` must cover exactly the entries added so far (marks
    /// should not decrease). An empty memtable is sealed too: its flush only
    /// stores the mark.
    pub fn seal(&mut self, mark: u64) {
        let mem = std::mem::take(&mut self.mem);
        self.shared
            .write()
            .sealed
            .push(Arc::new(Sealed { mem, mark }));
    }

    /// The handle for the flush thread.
    pub fn flusher(&self) -> IdFlusher {
        IdFlusher {
            shared: self.shared.clone(),
        }
    }

    /// `seal(mark)` then [`IdFlusher::flush`] on this thread: writes the
    /// memtable as a new run together with `mark`, then merges runs, `conn`
    /// lent for every transaction. `conn` is the writing connection.
    pub fn flush(&mut self, conn: &mut Connection, mark: u64) -> Result<()> {
        self.seal(mark);
        self.flusher().flush(conn)
    }

    /// Bytes of parts and filter pieces a flush or merge writes per short
    /// transaction (default [`TRANSACTION_BYTES`]; at least one part or
    /// piece each); the transactions that delete merged runs free at most
    /// 4 times as many pages. Takes effect at the next flush.
    pub fn set_transaction_bytes(&self, bytes: usize) {
        self.shared.tx_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Drops the memtable: the entries added since the last `seal` (the
    /// caller's rollback). Sealed memtables are not touched.
    pub fn clear_memtable(&mut self) {
        self.mem = Memtable::default();
    }

    /// The mark of the last flush that returned `Ok` (or that `open` found);
    /// `None` before the first one.
    pub fn mark(&self) -> Option<u64> {
        self.shared.read().mark
    }

    /// Entries stored: memtable, sealed memtables and runs (a pair added in
    /// several flushes counts once per run that holds it).
    pub fn len(&self) -> u64 {
        let state = self.shared.read();
        let sealed: u64 = state.sealed.iter().map(|s| s.mem.len).sum();
        let runs: u64 = state.runs.iter().map(|r| r.entries).sum();
        self.mem.len + sealed + runs
    }

    /// No entry at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries not yet durable: the memtable and the sealed memtables.
    pub fn unflushed(&self) -> u64 {
        let state = self.shared.read();
        self.mem.len + state.sealed.iter().map(|s| s.mem.len).sum::<u64>()
    }

    /// Runs on disk.
    pub fn runs(&self) -> usize {
        self.shared.read().runs.len()
    }

    /// Memory held: filters, fences, memtable and sealed memtables (an
    /// estimate of the hash tables' allocations).
    pub fn memory_bytes(&self) -> usize {
        let state = self.shared.read();
        let runs: usize = state
            .runs
            .iter()
            .map(|r| r.filter.get().map_or(0, |f| f.words.capacity() * 8) + r.fences.capacity() * 8)
            .sum();
        let sealed: usize = state.sealed.iter().map(|s| s.mem.memory_bytes()).sum();
        runs + sealed + self.mem.memory_bytes() + self.shared.building.load(Ordering::SeqCst)
    }

    /// Bits of filter per entry stored in runs (for the figures).
    pub fn filter_bits_per_entry(&self) -> f64 {
        let state = self.shared.read();
        let bits: u64 = state.runs.iter().map(|r| r.blocks * BLOCK_BITS).sum();
        let entries: u64 = state.runs.iter().map(|r| r.entries).sum();
        if entries == 0 {
            0.0
        } else {
            bits as f64 / entries as f64
        }
    }

    /// How many runs' filters say `hash` may be there (those a lookup reads
    /// from disk): for measuring the false-positive rate.
    pub fn filter_hits(&self, hash: u64) -> usize {
        let mixed = mix(hash);
        let state = self.shared.read();
        state
            .runs
            .iter()
            .filter(|r| r.may_contain(hash, mixed))
            .count()
    }
}
