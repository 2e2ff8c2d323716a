//! The id index: a durable multimap from 64-bit id hashes to event
//! positions, kept on disk as an LSM tree so that memory holds only a Bloom
//! filter per run (about 14 bits per entry) and a fence per part.
//!
//! The caller hashes each event id (a good 64-bit hash) and names where the
//! event lives with an opaque `u64` position; it verifies every hit by
//! reading the event. So the index may return false candidates, but it never
//! misses an entry it was given and flushed: not through its filters, not
//! after a crash and reopen at the last flush. A lookup returns exactly the
//! positions stored under that hash (each `(hash, pos)` pair at least once).
//!
//! # Structure
//! - The **memtable** ([`IdIndex::add`]) holds new entries in memory; lookups
//!   see them at once. It is not durable.
//! - [`IdIndex::seal`] freezes it (it stays visible to lookups) with the
//!   caller's `mark`; [`IdFlusher::flush_with`] writes every sealed
//!   memtable, oldest first, as a new sorted **run** whose final
//!   transaction also stores its mark, then merges runs.
//! - A run is split into **parts**, each one blob that fills one database
//!   page (~1,900 entries with 16 KiB pages). Memory keeps the first hash of
//!   each part (the fences) and the run's blocked Bloom filter, which is
//!   stored with the run (so [`IdIndex::open`] reads it back instead of
//!   rebuilding it).
//!
//! # Lookup cost
//! An absent hash costs one in-memory filter probe per run (one cache line
//! each) and, in ~0.2% of the runs, one part read. A present hash costs one part
//! read in its run: one page, checksummed, decoded from the nearest skip
//! entry (at most 256 entries).
//!
//! # Merge policy
//! Runs are kept oldest first with each run at least twice the size of the
//! next newer one. After a flush, the newest runs are merged (one k-way,
//! streaming merge) while the run before them is less than twice their
//! total. So the number of runs is at most `log2(n / smallest flush) + 1`,
//! and equal flushes behave like a binary counter: each entry is rewritten
//! about `log2(n / flush size)` times over its life.
//!
//! # Transactions: the writer is lent, never held
//! The service has one writing connection, shared with the group commit of
//! every acknowledged call; a merge at 50M entries writes ~475 MB. So a
//! flush never holds the connection: [`IdFlusher::flush_with`] borrows it
//! through a [`Lend`] for one transaction at a time (the service locks its
//! writer for that call only), and the caller's commits go between them.
//! The CPU work (sorting, decoding, merging, encoding parts, building the
//! filter) runs between the transactions, without the connection. A new
//! run (a flushed memtable or a merge's output) is written by:
//! 1. **Short transactions**, each with `synchronous = NORMAL` (no fsync;
//!    the connection's level is set back after it, also on error): the
//!    first inserts the run's `id_runs` row with `live = 0`; each stores
//!    encoded parts, then filter pieces, in order, up to
//!    [`IdIndex::set_transaction_bytes`] (default [`TRANSACTION_BYTES`],
//!    2 MiB: 128 parts with 16 KiB pages; at least one part or piece). For
//!    a merge they also read the inputs' next parts (about as many as they
//!    write), which the merge then decodes without the connection.
//! 2. **One final transaction**, with the connection's own `synchronous`
//!    (the service's `FULL`: its commit syncs the WAL and with it every
//!    frame of the short ones): the last parts and pieces (at most one
//!    short transaction's worth; a small flush is only this transaction),
//!    the row completed (counts, fences) and `live = 1`, and either the
//!    flush's mark or, for a merge, `live = 0` on the merged runs' rows.
//!    Then the new run is installed under the write lock (a flush: in
//!    place of its sealed memtable, after every run; a merge: in place of
//!    its inputs, which flushes meanwhile may have followed with new runs).
//! 3. For a merge, **short deleting transactions** after that swap: the
//!    merged runs' parts, then filter pieces, then their row (last, so an
//!    id is never taken again while rows of it are left), each freeing at
//!    most 4 times the pages a writing transaction writes (a freed page is
//!    not written; deleting costs per row).
//!
//! An empty sealed memtable costs one transaction (its mark).
//!
//! Measured (benches/ids.rs, 10M entries, 2 MiB transactions, 16 KiB
//! pages): a lent transaction takes ~3 ms; the longest (~30-47 ms) are
//! those whose commit runs SQLite's automatic WAL checkpoint (at 1,000
//! pages: 16 MB copied into the database, two fsyncs), which during a
//! merge is one transaction in about eight.
//!
//! # What a crash leaves
//! Every state between two transactions is consistent: [`IdIndex::open`]
//! loads the runs with `live = 1` and the mark, which always change
//! together in one final transaction. Before it commits, the new run's rows
//! (`live = 0`) are garbage and the runs it replaces are still live; after
//! it, the replaced runs are `live = 0` and what is left of them is
//! garbage. `open` only reads (any connection will do) and ignores
//! garbage; the next flush deletes it first, in short lent transactions
//! (or [`IdFlusher::cleanup_with`], e.g. right after `open`). A flush that
//! fails (an `Err` from the database, from a damaged part, or from `lend`)
//! leaves the same states, and the next flush deletes its garbage too.
//! Entries are never lost: those of a run are live before the rows they
//! came from (a sealed memtable, merged runs) go.
//!
//! # Memory during a merge
//! The merged runs' filters stay in memory (lookups use them) until the
//! swap, but the new run's filter is never whole in memory beside them: a
//! run's filter picks an entry's block by the high bits of its hash (the
//! sorted layout; runs written before it pick by its [`mix`], a flag in
//! `filter_probes` says which), so the merge's output, in hash order, fills
//! it one 1 MiB piece after the other, and each piece is stored with the
//! parts as it completes. The new run is installed without its filter (its
//! lookups read its parts), the merged runs and their filters go, and then
//! its filter is read back, a piece per lent connection. So a merge holds
//! at most one piece and one transaction's worth of the new filter besides
//! the filters it replaces (`a_merge_never_holds_a_second_filter`). Besides:
//! the new run's fences (8 B per part), the parts read ahead (about one
//! transaction's worth, plus one per input), the parts encoded and not yet
//! stored (one transaction's worth) and one decoded part per input. A flush
//! holds its memtable's pairs sorted (16 B per entry) and its run's whole
//! filter (installed with it).
//!
//! # On disk ([`SCHEMA`])
//! - `id_index`: one row, the last flushed mark.
//! - `id_runs`: one row per run: entries, parts, filter size and probes, the
//!   fences (a blob), and `live` (1: loaded by `open`; 0: garbage, being
//!   written or replaced by a merge, deleted next).
//! - `id_parts`: `key = run * 2^32 + part`, one blob per part:
//!   `[format 1] [varint n] [varint first hash] [varint position base]
//!   [position bits] [rice k]`, a skip table (every 256th entry: its hash,
//!   u64, and the bit offset of the next delta, u32), then a bit stream: the
//!   `n` positions minus the base in fixed width, then the `n - 1` hash
//!   deltas Rice-coded with parameter `k` (chosen per part; a quotient of 32
//!   or more is an escape followed by the 64-bit delta), then a 32-bit
//!   checksum of all of it. Random hashes cost ~`log2(2^64 / run size) + 2`
//!   bits, positions the width of their range in the part: about 8 bytes
//!   per entry in total. A part takes as many entries as fit in
//!   `page size - 48` bytes, so that SQLite keeps it whole in one leaf page.
//! - `id_filters`: `key = run * 2^32 + piece`, the filter in 1 MiB pieces
//!   (each with a checksum).
//!
//! The blob tables are rowid tables, not `WITHOUT ROWID`: an index b-tree
//! (which a `WITHOUT ROWID` table is) keeps at most about a quarter of a
//! page of a row locally and spills the rest to overflow pages, so a part
//! would take two pages instead of one; the 1 MiB filter pieces and the
//! fences of large runs pack their overflow into full pages only in a rowid
//! table. The one-row `id_index` is `WITHOUT ROWID`.
//!
//! Every blob carries a checksum: a damaged part, fence list or filter is
//! [`Error::Corrupt`], never a silently missed entry or a panic.
//!
//! # Threads
//! Lookups run on one thread (the processor, with a reading connection);
//! flushes and merges on another (lent the writing connection):
//! - The processor owns the [`IdIndex`] (`add`, `lookup`, `seal`,
//!   `clear_memtable`). Its reading connection must be on the same database
//!   and must not keep a transaction open across lookups (in autocommit mode
//!   each lookup reads the newest commit); a lookup that does not find a part
//!   it needs is an error, never a miss.
//! - The flush thread holds an [`IdFlusher`] ([`IdIndex::flusher`]; `Clone`,
//!   `Send`, `Sync`) and calls [`IdFlusher::flush_sealed_with`] after each
//!   `seal` (or later: it writes every sealed memtable in order) with a
//!   [`Lend`] of the writer; a merge thread calls [`IdFlusher::merge_with`]
//!   (when [`IdFlusher::merge_due`]). Flushes are serialized by one mutex,
//!   merges by another: a flush never waits for a merge (their lent
//!   transactions interleave), so the durable mark keeps up with the seals
//!   during a long merge, and a crash then re-adds only what was sealed
//!   since the last flush. The rows of runs that are not live are deleted
//!   by the merge side ([`IdFlusher::merge_with`] first), listed while no
//!   flush is writing a run. [`IdFlusher::flush_with`] does both on the
//!   calling thread.
//! - They share the read side (sealed memtables, runs, filters, fences) behind
//!   an `RwLock`. A lookup holds its read lock while it reads parts; the
//!   flusher takes the write lock only to install a run whose final
//!   transaction committed (and drop its sealed memtable) or to swap merged
//!   runs for the merged one, never during a transaction. Until then
//!   lookups use the old run set, whose rows are all there; the merged
//!   runs' rows are deleted only after the swap, which waited for every
//!   lookup that held them.
//!
//! [`IdIndex::flush`] does `seal` and [`IdFlusher::flush`] on the calling
//! thread, for a caller with one thread and one connection.
//!
//! # Durability and `mark`
//! `mark` is the caller's opaque high-water mark: the entries added before
//! `seal(mark)` are durable once the flush that writes them returns `Ok`
//! (once its final transaction commits, with `synchronous = FULL`), and
//! [`IdIndex::mark`] is then that mark. After a crash, [`IdIndex::open`]
//! returns the last mark flushed; the caller re-adds every entry after it.
//! Not durable: the memtable and sealed memtables not yet flushed. A failed
//! flush leaves them sealed and visible (the next flush tries again); a
//! failed merge leaves the runs as they were.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{Error, Op, Result};

/// The id index's tables (see the module docs). Every statement is
/// `CREATE TABLE IF NOT EXISTS`.
pub const SCHEMA: &str = "\
CREATE TABLE IF NOT EXISTS id_index (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    mark INTEGER NOT NULL -- the last flushed mark (u64 as i64 bits)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS id_runs (
    run           INTEGER PRIMARY KEY, -- 1, 2, ...: each new run the next
    live          INTEGER NOT NULL,    -- 0: merged into a newer run, deleted next
    entries       INTEGER NOT NULL,
    parts         INTEGER NOT NULL,
    filter_blocks INTEGER NOT NULL,    -- 64-byte blocks of its Bloom filter
    filter_probes INTEGER NOT NULL,
    fences        BLOB NOT NULL        -- first hash of each part (u64 LE), checksum
);
CREATE TABLE IF NOT EXISTS id_parts (
    key  INTEGER PRIMARY KEY, -- run * 2^32 + part
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS id_filters (
    key  INTEGER PRIMARY KEY, -- run * 2^32 + piece
    data BLOB NOT NULL
);
";

/// A stored part claiming more entries than this is corrupt.
const MAX_PART_ENTRIES: u64 = 1 << 16;
/// Filter bits per entry (with [`PROBES`]: ~0.17% false positives per
/// run, against ~0.94% with 10 bits and 6 probes). Each new id probes every
/// run's filter, and a false positive costs a part read (a page, its
/// checksum, a decode): with the ~9 runs of 50M ids, 10 bits sent ~9% of
/// new ids to disk, and the ingest cost per event grew with the lifetime
/// (BENCHMARKS.md, growth). Stored per run with its probe count, so runs
/// written with other settings stay valid.
const BITS_PER_ENTRY: u64 = 14;
/// Bits set per entry in its 512-bit block.
const PROBES: u32 = 8;
/// A filter block: one 64-byte cache line.
const BLOCK_BITS: u64 = 512;
const WORDS_PER_BLOCK: usize = 8;
/// Filter bytes per `id_filters` row.
const PIECE_BYTES: usize = 1 << 20;
/// Bytes of parts and filter pieces a flush or merge writes per lent
/// transaction, by default (see [`IdIndex::set_transaction_bytes`]): 128
/// parts with 16 KiB pages.
pub const TRANSACTION_BYTES: usize = 2 << 20;
/// A transaction that deletes the rows of merged runs frees at most this
/// many times the pages a writing transaction writes: a deleted part's page
/// goes to the freelist unwritten (only the b-tree and freelist pages that
/// point to it are written).
const DELETE_FACTOR: usize = 4;
/// The part format written here.
const PART_FORMAT: u8 = 1;
/// A Rice quotient from which the delta is stored in full (64 bits).
const ESCAPE: u64 = 32;
/// A part's skip table has an entry every `SKIP` entries: a lookup decodes
/// at most this many.
const SKIP: usize = 256;

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

/// The id index, as the processor thread holds it: its memtable and a
/// handle on the shared read side. See the module docs.
pub struct IdIndex {
    mem: Memtable,
    shared: Arc<Shared>,
}

/// Lends the writing connection for one transaction: `lend(work)` runs
/// `work` once with the connection (the service locks its writer, calls
/// `work`, unlocks) and returns what it returns, or returns `Err` without
/// running it. `work` begins and commits (or rolls back) its own
/// transaction and leaves the connection as it found it. See
/// [`IdFlusher::flush_with`].
pub type Lend<'a> = dyn FnMut(&mut dyn FnMut(&mut Connection) -> Result<()>) -> Result<()> + 'a;

/// The flushing side of an [`IdIndex`]: writes sealed memtables as runs and
/// merges runs, with the writing connection, on any thread.
#[derive(Clone)]
pub struct IdFlusher {
    shared: Arc<Shared>,
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
    /// inside a transaction older than the last flush (see the module docs).
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

impl IdFlusher {
    /// Writes every sealed memtable, oldest first, as a new run with its
    /// mark, then merges runs until each is at least twice the size of the
    /// next newer one, then deletes the rows of the runs merged; first, the
    /// rows of runs that are not live (left by a crash or a failed flush):
    /// [`IdFlusher::flush_sealed_with`] then [`IdFlusher::merge_with`] on
    /// this thread.
    ///
    /// Every database access is one transaction run through `lend` (see
    /// [`Lend`]), so the caller's own commits go between them: short ones
    /// (`synchronous = NORMAL`) that write a new run's parts and filter
    /// pieces, at most [`IdIndex::set_transaction_bytes`] each, and read
    /// ahead the parts a merge needs; one small final transaction per new
    /// run (the connection's own `synchronous`) that makes it live and
    /// either stores its mark (a flush) or marks the merged runs not live
    /// (a merge); then short ones that delete the merged runs' rows. The
    /// encoding and merging run on this thread between the transactions,
    /// without the connection. See the module docs.
    ///
    /// On `Err`, what was not written stays sealed (and visible to
    /// lookups), the runs not yet merged stay as they were, and the next
    /// call goes on from there (after deleting what this one left). A run
    /// whose final transaction committed is installed even if `lend` then
    /// returns `Err`.
    pub fn flush_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        self.flush_sealed_with(lend)?;
        self.merge_with(lend)
    }

    /// Writes every sealed memtable, oldest first, as a new run with its
    /// mark (no merge: [`IdFlusher::merge_with`], on this thread or
    /// another, does them). Flushes are serialized with each other, not
    /// with a merge: while a merge runs on another thread, its lent
    /// transactions and a flush's interleave, so the mark keeps up with the
    /// seals (a crash during a long merge re-adds at most what was sealed
    /// since the last flush).
    pub fn flush_sealed_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        let _flushing = lock(&self.shared.flushing);
        let limits = self.limits(lend)?;
        loop {
            let Some(sealed) = self.shared.read().sealed.first().cloned() else {
                break;
            };
            if let Err(e) = self.write_sealed(lend, &sealed, &limits) {
                // it may leave rows of a run not live
                self.shared.clean.store(false, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether [`IdFlusher::merge_with`] has work: runs to merge, or rows
    /// of runs that are not live to delete.
    pub fn merge_due(&self) -> bool {
        if !self.shared.clean.load(Ordering::SeqCst) {
            return true;
        }
        let state = self.shared.read();
        state.runs.len() - merge_from(&state.runs) >= 2
    }

    /// Deletes the rows of runs that are not live (left by a crash, a
    /// failed flush or merge) unless none can be there, then merges runs
    /// until each is at least twice the size of the next newer one, each
    /// merge's inputs' rows deleted after it. Serialized with other merges
    /// only: flushes ([`IdFlusher::flush_sealed_with`], on another thread)
    /// go on meanwhile, each of their lent transactions between two of the
    /// merge's, and the runs they add are merged by the next round.
    pub fn merge_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        let _merging = lock(&self.shared.merging);
        let limits = self.limits(lend)?;
        if !self.shared.clean.load(Ordering::SeqCst) {
            self.clean_locked(lend, &limits)?;
        }
        loop {
            let runs = self.shared.read().runs.clone();
            let from = merge_from(&runs);
            let Some(inputs) = runs.get(from..).filter(|s| s.len() >= 2) else {
                break;
            };
            let entries = inputs.iter().map(|r| r.entries).sum::<u64>();
            self.shared.merging_entries.store(entries, Ordering::SeqCst);
            let done = self.merge(lend, inputs, &limits);
            // The merged runs (and their filters) go with the last
            // references to them, before the new run's filter is read.
            drop(runs);
            let done = done.and_then(|merged| load_later(lend, &merged));
            self.shared.merging_entries.store(0, Ordering::SeqCst);
            if let Err(e) = done {
                self.shared.clean.store(false, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Entries of the runs a merge in progress merges (0: none).
    pub fn merging_entries(&self) -> u64 {
        self.shared.merging_entries.load(Ordering::SeqCst)
    }

    /// [`IdFlusher::flush_with`] with `conn` lent for every transaction
    /// (one thread, one connection: tests, the bench).
    pub fn flush(&self, conn: &mut Connection) -> Result<()> {
        self.flush_with(&mut |work| work(conn))
    }

    /// Deletes the rows of runs that are not live (a crash or a failed
    /// flush leaves them; `open` ignores them) in short lent transactions.
    /// Optional: the next merge does it first anyway; this frees the space
    /// earlier (e.g. right after [`IdIndex::open`], with the writer).
    pub fn cleanup_with(&self, lend: &mut Lend<'_>) -> Result<()> {
        let _merging = lock(&self.shared.merging);
        let limits = self.limits(lend)?;
        self.clean_locked(lend, &limits)
    }

    /// [`IdFlusher::cleanup_with`] with `conn` lent for every transaction.
    pub fn cleanup(&self, conn: &mut Connection) -> Result<()> {
        self.cleanup_with(&mut |work| work(conn))
    }

    /// The limits of this flush's transactions (the page size read once).
    fn limits(&self, lend: &mut Lend<'_>) -> Result<Limits> {
        let tx_bytes = self.shared.tx_bytes.load(Ordering::Relaxed);
        let mut page = self.shared.page.load(Ordering::SeqCst);
        if page == 0 {
            lend_one(lend, &mut |conn| {
                page = page_size(conn)?;
                Ok(())
            })?;
            if page == 0 {
                return Err(corrupt("the page size was not read".to_string()));
            }
            self.shared.page.store(page, Ordering::SeqCst);
        }
        Ok(Limits::new(page, tx_bytes))
    }

    /// Deletes the rows of runs that are not live; the caller holds the
    /// merging lock (no merge is writing a run). They are listed while no
    /// flush is writing one either (under the flushing lock, for one
    /// transaction) and deleted after, flushes going on between the
    /// deleting transactions (a new run's id is above every listed one).
    fn clean_locked(&self, lend: &mut Lend<'_>, limits: &Limits) -> Result<()> {
        self.shared.clean.store(true, Ordering::SeqCst);
        let mut dead = Vec::new();
        let listed = {
            let _flushing = lock(&self.shared.flushing);
            lend_one(lend, &mut |conn| {
                dead = dead_runs(conn)?;
                Ok(())
            })
        };
        let done = listed.and_then(|()| delete_runs(lend, &dead, limits));
        if done.is_err() {
            self.shared.clean.store(false, Ordering::SeqCst);
        }
        done
    }

    /// Writes one sealed memtable as a new run: its parts and filter in
    /// short transactions, then a final one that makes it live and stores
    /// its mark (only the mark when it is empty). Then installs it in place
    /// of the sealed memtable.
    fn write_sealed(&self, lend: &mut Lend<'_>, sealed: &Arc<Sealed>, lim: &Limits) -> Result<()> {
        let entries = sealed.mem.sorted();
        let mut out = if entries.is_empty() {
            None
        } else {
            let mut out = RunWriter::new(lim.part_budget, entries.len() as u64, true);
            let mut src = Source::Sorted { entries, at: 0 };
            write_chunks(lend, &mut src, &mut out, lim)?;
            Some(out)
        };
        let mut committed = None;
        let done = lend_one(lend, &mut |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .op("BEGIN (id index flush)")?;
            let id = match &out {
                Some(out) => Some(out.write_final(&tx)?),
                None => None,
            };
            tx.execute(
                "INSERT INTO id_index (one, mark) VALUES (1, ?1) \
                 ON CONFLICT (one) DO UPDATE SET mark = excluded.mark",
                [sealed.mark as i64],
            )
            .op("UPSERT id_index.mark")?;
            tx.commit().op("COMMIT (id index flush)")?;
            committed = Some(id);
            Ok(())
        });
        if let Some(id) = committed {
            let run = match (out.take(), id) {
                (Some(out), Some(id)) => Some(Arc::new(out.into_run(id))),
                _ => None,
            };
            let mut state = self.shared.write();
            if state.sealed.first().is_some_and(|s| Arc::ptr_eq(s, sealed)) {
                state.sealed.remove(0);
            }
            if let Some(run) = run {
                state.runs.push(run);
            }
            state.mark = Some(sealed.mark);
        }
        done
    }

    /// Merges `inputs` (the live runs from `from` on) into one new run: its
    /// parts and filter in short transactions (which also read the inputs'
    /// parts ahead), then a final one that makes it live and the inputs not
    /// live; then swaps it in for them (so no lookup uses them any more)
    /// and deletes their rows in short transactions.
    /// Merges `inputs` into one new run, installed in their place (without
    /// its filter in memory: [`load_later`]); returns it.
    fn merge(&self, lend: &mut Lend<'_>, inputs: &[Arc<Run>], lim: &Limits) -> Result<Arc<Run>> {
        let expected: u64 = inputs.iter().map(|r| r.entries).sum();
        let mut out = RunWriter::new(lim.part_budget, expected, false);
        // the piece being filled, and at most a transaction's worth queued
        let building = out.words.capacity() * 8 + lim.tx_bytes;
        self.shared.building.store(building, Ordering::SeqCst);
        let mut src = Source::Merge(Merge::new(inputs, lim.parts_per_tx));
        let written = write_chunks(lend, &mut src, &mut out, lim);
        self.shared.building.store(0, Ordering::SeqCst);
        written?;
        drop(src);
        let mut committed = None;
        let done = lend_one(lend, &mut |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .op("BEGIN (id index merge)")?;
            let id = out.write_final(&tx)?;
            {
                let mut stmt = tx
                    .prepare_cached("UPDATE id_runs SET live = 0 WHERE run = ?1 AND live = 1")
                    .op("UPDATE id_runs SET live = 0")?;
                for run in inputs {
                    if stmt
                        .execute([run.id as i64])
                        .op("UPDATE id_runs SET live = 0")?
                        != 1
                    {
                        return Err(corrupt(format!("run {}: not live on disk", run.id)));
                    }
                }
            }
            tx.commit().op("COMMIT (id index merge)")?;
            committed = Some(id);
            Ok(())
        });
        let mut installed = None;
        if let Some(id) = committed {
            let merged = Arc::new(out.into_run(id));
            installed = Some(merged.clone());
            let mut state = self.shared.write();
            // Only merges (serialized) replace runs; flushes append new
            // ones meanwhile, after the inputs. Taking the write lock waits
            // for every lookup that may use the inputs.
            let at = inputs
                .first()
                .and_then(|first| state.runs.iter().position(|r| Arc::ptr_eq(r, first)));
            let Some(at) = at.filter(|&at| {
                state
                    .runs
                    .get(at..at + inputs.len())
                    .is_some_and(|rs| rs.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b)))
            }) else {
                return Err(corrupt(format!("run {id}: its inputs are no longer live")));
            };
            state.runs.splice(at..at + inputs.len(), [merged]);
        }
        done?;
        let ids: Vec<u64> = inputs.iter().map(|r| r.id).collect();
        delete_runs(lend, &ids, lim)?;
        installed.ok_or_else(|| corrupt("a merged run was not installed".to_string()))
    }
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

struct Shared {
    state: RwLock<State>,
    /// Held for a whole flush of sealed memtables (and a cleanup).
    flushing: Mutex<()>,
    /// Held for a whole merge (and a cleanup): taken after `flushing`
    /// when both are.
    merging: Mutex<()>,
    /// No rows of runs that are not live can be there (but those of a run
    /// being written): false at open and after a failed flush or merge
    /// (the next flush deletes them first; merges wait for that).
    clean: AtomicBool,
    /// The database's page size, once read (0: not yet).
    page: AtomicUsize,
    /// See [`IdIndex::set_transaction_bytes`].
    tx_bytes: AtomicUsize,
    /// See [`IdFlusher::merging_entries`].
    merging_entries: AtomicU64,
    /// Bytes of filter a merge in progress holds for its new run (counted
    /// in [`IdIndex::memory_bytes`]).
    building: AtomicUsize,
}

/// Locks a mutex that guards no data (a panic cannot leave it half done).
fn lock(m: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, State> {
        // The write sections only move `Arc`s: a panic cannot leave them half done.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

struct State {
    /// Memtables sealed and not yet written, oldest first.
    sealed: Vec<Arc<Sealed>>,
    /// Live runs, oldest first.
    runs: Vec<Arc<Run>>,
    /// The last flushed mark.
    mark: Option<u64>,
}

struct Sealed {
    mem: Memtable,
    mark: u64,
}

/// Where the merge after a flush starts: the newest runs, extended while
/// the run before them is less than twice their total.
fn merge_from(runs: &[Arc<Run>]) -> usize {
    let mut from = runs.len().saturating_sub(1);
    let mut total = runs.last().map_or(0, |r| r.entries);
    while from > 0 {
        let before = runs.get(from - 1).map_or(0, |r| r.entries);
        if before >= total.saturating_mul(2) {
            break;
        }
        from -= 1;
        total = total.saturating_add(before);
    }
    from
}

// ---------------------------------------------------------------------------
// Memtable
// ---------------------------------------------------------------------------

/// The memtable's keys are already well-mixed 64-bit hashes: hashed once
/// more by a multiply (SipHash, std's default, costs several times that).
#[derive(Default, Clone, Copy)]
struct HashBuild;

impl std::hash::BuildHasher for HashBuild {
    type Hasher = MulHasher;
    fn build_hasher(&self) -> MulHasher {
        MulHasher(0)
    }
}

/// See [`HashBuild`].
#[derive(Default, Clone, Copy)]
struct MulHasher(u64);

impl std::hash::Hasher for MulHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// The first position of each hash, and the others (rare: the same hash at
/// several positions) beside.
#[derive(Default)]
struct Memtable {
    first: HashMap<u64, u64, HashBuild>,
    more: HashMap<u64, Vec<u64>, HashBuild>,
    len: u64,
}

impl Memtable {
    fn add(&mut self, hash: u64, pos: u64) {
        match self.first.entry(hash) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(pos);
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                if *o.get() == pos {
                    return;
                }
                let more = self.more.entry(hash).or_default();
                if more.contains(&pos) {
                    return;
                }
                more.push(pos);
            }
        }
        self.len += 1;
    }

    fn lookup(&self, hash: u64, out: &mut Vec<u64>) {
        if let Some(&pos) = self.first.get(&hash) {
            out.push(pos);
            if let Some(more) = self.more.get(&hash) {
                out.extend_from_slice(more);
            }
        }
    }

    /// Every pair, sorted.
    fn sorted(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::with_capacity(self.len as usize);
        v.extend(self.first.iter().map(|(&h, &p)| (h, p)));
        for (&h, more) in &self.more {
            v.extend(more.iter().map(|&p| (h, p)));
        }
        v.sort_unstable();
        v
    }

    fn memory_bytes(&self) -> usize {
        // hashbrown: the pair and one control byte per bucket
        let first = self.first.capacity() * (16 + 1);
        let more = self.more.capacity() * (8 + 24 + 1)
            + self.more.values().map(|v| v.capacity() * 8).sum::<usize>();
        first + more
    }
}

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

struct Run {
    id: u64,
    entries: u64,
    /// First hash of each part, nondecreasing.
    fences: Vec<u64>,
    /// Its filter's size, probes and layout, as stored.
    blocks: u64,
    probes: u32,
    sorted: bool,
    /// Its filter, once in memory: a merged run is installed before its
    /// filter is read back (after the merged runs' filters are gone, so
    /// that a merge never holds both), and until then every lookup reads
    /// its parts.
    filter: OnceLock<Bloom>,
}

impl Run {
    /// Whether the run may hold `hash` (`mixed`: its [`mix`]); true while
    /// its filter is not in memory.
    fn may_contain(&self, hash: u64, mixed: u64) -> bool {
        self.filter.get().is_none_or(|f| f.may_contain(hash, mixed))
    }

    /// Reads the parts that may hold `hash`: the one before the first fence
    /// at or above it, and those whose fence is `hash` (a hash with many
    /// positions may span parts).
    fn lookup(&self, conn: &Connection, hash: u64, out: &mut Vec<u64>) -> Result<()> {
        let at = self.fences.partition_point(|&f| f < hash);
        let mut part = at.saturating_sub(1);
        while let Some(&fence) = self.fences.get(part) {
            if part >= at && fence != hash {
                break;
            }
            let done = with_part(conn, self.id, part, |blob| {
                search_part(blob, fence, hash, out)
            })?;
            if done {
                break;
            }
            part += 1;
        }
        Ok(())
    }
}

/// `key` of part or piece `n` of run `run`.
fn row_key(run: u64, n: usize) -> Result<i64> {
    let n = u32::try_from(n).map_err(|_| corrupt(format!("run {run}: part {n} is too large")))?;
    Ok(((run as i64) << 32) | i64::from(n))
}

/// Run ids fit 31 bits (so that `row_key` is a positive i64).
fn run_id(id: i64) -> Result<u64> {
    if (1..=i64::from(i32::MAX)).contains(&id) {
        Ok(id as u64)
    } else {
        Err(corrupt(format!("run id {id} out of range")))
    }
}

/// Calls `f` with the stored blob of a part (borrowed from SQLite).
fn with_part<T>(
    conn: &Connection,
    run: u64,
    part: usize,
    f: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    let key = row_key(run, part)?;
    let mut stmt = conn
        .prepare_cached("SELECT data FROM id_parts WHERE key = ?1")
        .op("SELECT FROM id_parts")?;
    let found = stmt
        .query_row([key], |row| {
            Ok(match row.get_ref(0)? {
                ValueRef::Blob(b) => f(b),
                _ => Err(corrupt(format!("run {run} part {part} is not a blob"))),
            })
        })
        .optional()
        .op("SELECT FROM id_parts")?;
    match found {
        Some(r) => r,
        None => Err(corrupt(format!(
            "run {run} part {part} is missing (was the reading connection inside a \
             transaction older than the flush that wrote it?)"
        ))),
    }
}

// ---------------------------------------------------------------------------
// Writing runs: lent transactions
// ---------------------------------------------------------------------------

/// What a flush needs to know before it writes (see [`IdFlusher::flush_with`]).
struct Limits {
    /// Bytes a part may take: the largest blob that SQLite stores whole in
    /// one leaf page of a rowid table (payload up to `page size - 35`, of
    /// which the record header takes 4 bytes): one page read per part, no
    /// overflow page half empty.
    part_budget: usize,
    /// Bytes of parts and filter pieces a short transaction writes (at
    /// least one part or piece).
    tx_bytes: usize,
    /// Parts per short transaction (`tx_bytes / page size`, at least 1).
    parts_per_tx: usize,
    /// Pages a deleting transaction frees at most (a piece counts its
    /// pages; at least one part or piece).
    delete_pages: usize,
    /// Pages of a filter piece.
    piece_pages: usize,
}

impl Limits {
    fn new(page: usize, tx_bytes: usize) -> Limits {
        let page = page.clamp(512, 65_536);
        let tx_bytes = tx_bytes.max(1);
        let parts_per_tx = (tx_bytes / page).max(1);
        Limits {
            part_budget: page - 48,
            tx_bytes,
            parts_per_tx,
            delete_pages: parts_per_tx.saturating_mul(DELETE_FACTOR),
            piece_pages: (PIECE_BYTES / page).max(1),
        }
    }
}

/// Calls `lend` once with `work`; a lender that returns `Ok` without
/// running it is an error (the flush cannot go on without that transaction).
fn lend_one(
    lend: &mut Lend<'_>,
    work: &mut dyn FnMut(&mut Connection) -> Result<()>,
) -> Result<()> {
    let mut ran = false;
    lend(&mut |conn| {
        ran = true;
        work(conn)
    })?;
    if ran {
        Ok(())
    } else {
        Err(Error::Sqlite {
            op: "id index: the lender returned Ok without running the transaction",
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
                None,
            ),
        })
    }
}

/// Runs `f` in a short transaction with `synchronous = NORMAL` (when the
/// connection's level is higher; reset after, also on error): its commit
/// writes the WAL without syncing it. The next commit with the
/// connection's own level (the final transaction of the flush, or any
/// commit of the service) syncs the WAL and with it these frames; until
/// then they belong to no live run, so losing them loses nothing.
fn short_tx<T>(conn: &mut Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    let level: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .op("PRAGMA synchronous (id index)")?;
    let lower = level > 1;
    if lower {
        conn.pragma_update(None, "synchronous", "NORMAL")
            .op("PRAGMA synchronous = NORMAL (id index)")?;
    }
    let done = (|| {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN (id index, short)")?;
        let t = f(&tx)?;
        tx.commit().op("COMMIT (id index, short)")?;
        Ok(t)
    })();
    let reset = if lower {
        conn.pragma_update(None, "synchronous", level)
            .op("PRAGMA synchronous (after id index)")
    } else {
        Ok(())
    };
    let t = done?;
    reset?;
    Ok(t)
}

/// The rows of runs that are not live: written by a flush that did not
/// finish, or replaced by a merge and not deleted yet.
fn dead_runs(conn: &Connection) -> Result<Vec<u64>> {
    let mut stmt = conn
        .prepare_cached("SELECT run FROM id_runs WHERE live = 0 ORDER BY run")
        .op("SELECT dead id_runs")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .op("SELECT dead id_runs")?;
    let mut dead = Vec::new();
    for id in rows {
        dead.push(run_id(id.op("SELECT dead id_runs")?)?);
    }
    Ok(dead)
}

/// Deletes the rows of runs that are not live (their parts, filter pieces,
/// then the row, so that a run's id is not taken again while rows of it
/// are left), each transaction freeing at most `delete_pages` pages.
fn delete_runs(lend: &mut Lend<'_>, runs: &[u64], lim: &Limits) -> Result<()> {
    for &run in runs {
        let mut done = false;
        while !done {
            lend_one(lend, &mut |conn| {
                done = short_tx(conn, |tx| delete_some(tx, run, lim))?;
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// One deleting transaction's work on run `run`: true once its row is gone.
fn delete_some(tx: &Connection, run: u64, lim: &Limits) -> Result<bool> {
    let live: Option<i64> = tx
        .query_row(
            "SELECT live FROM id_runs WHERE run = ?1",
            [run as i64],
            |r| r.get(0),
        )
        .optional()
        .op("SELECT id_runs.live")?;
    if live.is_some_and(|l| l != 0) {
        return Err(corrupt(format!(
            "run {run} is live; its rows are not deleted"
        )));
    }
    let lo = row_key(run, 0)?;
    let hi = lo | 0xFFFF_FFFF;
    let parts = tx
        .prepare_cached(
            "DELETE FROM id_parts WHERE key IN \
             (SELECT key FROM id_parts WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3)",
        )
        .op("DELETE FROM id_parts")?
        .execute(params![lo, hi, lim.delete_pages as i64])
        .op("DELETE FROM id_parts")?;
    if parts >= lim.delete_pages {
        return Ok(false);
    }
    let pieces = ((lim.delete_pages - parts) / lim.piece_pages).max(1);
    let deleted = tx
        .prepare_cached(
            "DELETE FROM id_filters WHERE key IN \
             (SELECT key FROM id_filters WHERE key BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3)",
        )
        .op("DELETE FROM id_filters")?
        .execute(params![lo, hi, pieces as i64])
        .op("DELETE FROM id_filters")?;
    if deleted >= pieces {
        return Ok(false);
    }
    tx.execute(
        "DELETE FROM id_runs WHERE run = ?1 AND live = 0",
        [run as i64],
    )
    .op("DELETE FROM id_runs")?;
    Ok(true)
}

fn next_run_id(conn: &Connection) -> Result<u64> {
    let id: i64 = conn
        .query_row("SELECT coalesce(max(run), 0) + 1 FROM id_runs", [], |r| {
            r.get(0)
        })
        .op("SELECT max(run) FROM id_runs")?;
    run_id(id)
}

/// Where a new run's sorted entries come from.
enum Source {
    /// A sealed memtable's pairs, sorted; `at` the next one.
    Sorted { entries: Vec<(u64, u64)>, at: usize },
    /// A k-way merge of runs.
    Merge(Merge),
}

/// Why [`Source::fill`] stopped.
enum Fill {
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
    fn fill(&mut self, out: &mut RunWriter, bytes: usize) -> Result<Fill> {
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
    fn top_up(&mut self, conn: &Connection) -> Result<()> {
        match self {
            Source::Sorted { .. } => Ok(()),
            Source::Merge(m) => m.cursors.iter_mut().try_for_each(|c| c.top_up(conn)),
        }
    }
}

/// A streaming k-way merge of runs, paused whenever an input has no part
/// left in memory (the next lent transaction reads some).
struct Merge {
    cursors: Vec<Cursor>,
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// Cursors whose next entry is not in the heap (all of them at first).
    waiting: Vec<usize>,
}

impl Merge {
    /// Each input keeps about its share of a transaction's parts read
    /// ahead (random hashes consume the inputs in proportion to their
    /// sizes), plus one.
    fn new(inputs: &[Arc<Run>], parts_per_tx: usize) -> Merge {
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

    fn fill(&mut self, out: &mut RunWriter, bytes: usize) -> Result<Fill> {
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
struct Cursor {
    run: Arc<Run>,
    /// The next part to read from disk.
    fetch: usize,
    /// Parts read and not decoded yet (part number, blob).
    raw: VecDeque<(usize, Vec<u8>)>,
    /// Parts to keep in `raw` after a top up.
    want: usize,
    /// The decoded part.
    buf: Vec<(u64, u64)>,
    at: usize,
    seen: u64,
}

enum Next {
    Entry(u64, u64),
    /// Parts must be read first.
    Fetch,
    End,
}

impl Cursor {
    fn next(&mut self) -> Result<Next> {
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

    fn top_up(&mut self, conn: &Connection) -> Result<()> {
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
fn write_chunks(
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

/// Writes a run's parts as its sorted entries come (encoded in memory,
/// then stored by lent transactions), then its filter pieces and row.
struct RunWriter {
    /// Its run id, once a transaction has stored its row (not live).
    id: Option<u64>,
    /// Entries not yet encoded, sorted.
    buf: Vec<(u64, u64)>,
    /// Buffered entries from which to try filling a part.
    target: usize,
    /// Bytes a part may take: one database page (see `Limits::part_budget`).
    budget: usize,
    fences: Vec<u64>,
    /// Its filter's blocks (the sorted layout: entries, which come in
    /// hash order, fill it piece by piece).
    blocks: u64,
    /// Keeps the whole filter in memory, for the run to be installed with
    /// it (a flush); otherwise (a merge) only the piece being filled is in
    /// memory, and the run's filter is read back once it is installed.
    keep: bool,
    /// The whole filter (`keep`), or the words of piece `cur` only.
    words: Vec<u64>,
    /// The filter piece being filled.
    cur: usize,
    /// Filter pieces complete and not yet stored, as stored.
    ready: VecDeque<Vec<u8>>,
    ready_bytes: usize,
    entries: u64,
    last: Option<(u64, u64)>,
    /// Encoded parts not yet stored: part number, blob.
    pending: VecDeque<(usize, Vec<u8>)>,
    pending_bytes: usize,
    /// Every entry is encoded: the filter is complete.
    finished: bool,
    /// Filter pieces stored.
    pieces_written: usize,
}

/// What one transaction stored (applied by [`RunWriter::wrote`] once it
/// committed).
struct Wrote {
    /// The run's id, once its row is stored.
    id: Option<u64>,
    parts: usize,
    pieces: usize,
}

fn page_size(conn: &Connection) -> Result<usize> {
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .op("PRAGMA page_size")?;
    Ok(page.clamp(512, 65_536) as usize)
}

/// Filter words per piece.
const PIECE_WORDS: usize = PIECE_BYTES / 8;

impl RunWriter {
    fn new(budget: usize, expected: u64, keep: bool) -> RunWriter {
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
    fn push(&mut self, hash: u64, pos: u64) -> Result<()> {
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
    fn encode_parts(&mut self, finishing: bool) -> Result<()> {
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
    fn filter_insert(&mut self, hash: u64) -> Result<()> {
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
    fn piece_words(&self, n: usize) -> usize {
        (self.blocks as usize * WORDS_PER_BLOCK)
            .saturating_sub(n * PIECE_WORDS)
            .min(PIECE_WORDS)
    }

    /// Piece `cur` is complete: queued as stored (its bytes and a
    /// checksum), and the next one started.
    fn seal_piece(&mut self) {
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
    fn finish_parts(&mut self) -> Result<()> {
        self.encode_parts(true)?;
        while self.cur < self.pieces() {
            self.seal_piece();
        }
        self.finished = true;
        Ok(())
    }

    fn pieces(&self) -> usize {
        (self.blocks as usize * WORDS_PER_BLOCK).div_ceil(PIECE_WORDS)
    }

    /// Bytes encoded and not yet stored: parts and filter pieces.
    fn buffered(&self) -> usize {
        self.pending_bytes + self.ready_bytes
    }

    /// Bytes still to store.
    fn unwritten_bytes(&self) -> usize {
        self.buffered()
    }

    /// Stores the run's row, not live, under a new id.
    fn insert_row(&self, tx: &Connection) -> Result<u64> {
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
    fn write_items(&self, tx: &Connection, max_bytes: usize) -> Result<Wrote> {
        self.write_items_as(tx, max_bytes, self.id)
    }

    fn write_items_as(&self, tx: &Connection, max_bytes: usize, id: Option<u64>) -> Result<Wrote> {
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
    fn wrote(&mut self, wrote: Wrote) {
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
    fn write_final(&self, tx: &Connection) -> Result<u64> {
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
    fn into_run(self, id: u64) -> Run {
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

fn decode_fences(blob: &[u8], run: i64) -> Result<Vec<u64>> {
    let body = checked(blob, || format!("run {run}: fences"))?;
    let (words, tail) = body.as_chunks::<8>();
    if !tail.is_empty() {
        return Err(corrupt(format!(
            "run {run}: fences of {} bytes",
            body.len()
        )));
    }
    let fences: Vec<u64> = words.iter().map(|w| u64::from_le_bytes(*w)).collect();
    if fences.windows(2).any(|w| matches!(w, [a, b] if a > b)) {
        return Err(corrupt(format!("run {run}: fences out of order")));
    }
    Ok(fences)
}

fn load_filter(
    conn: &Connection,
    run: u64,
    blocks: i64,
    probes: u32,
    sorted: bool,
) -> Result<Bloom> {
    let blocks = u64::try_from(blocks)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| corrupt(format!("run {run}: {blocks} filter blocks")))?;
    let want = blocks.saturating_mul(WORDS_PER_BLOCK as u64);
    // Its exact size at once (grown piece by piece, the vector's capacity
    // ended up to twice the filter's size).
    let mut words: Vec<u64> = Vec::new();
    words
        .try_reserve_exact(usize::try_from(want).unwrap_or(usize::MAX))
        .map_err(|_| corrupt(format!("run {run}: a filter of {want} words")))?;
    let mut stmt = conn
        .prepare_cached("SELECT key, data FROM id_filters WHERE key BETWEEN ?1 AND ?2 ORDER BY key")
        .op("SELECT FROM id_filters")?;
    let lo = row_key(run, 0)?;
    let mut rows = stmt
        .query([lo, lo | 0xFFFF_FFFF])
        .op("SELECT FROM id_filters")?;
    let mut piece: i64 = 0;
    while let Some(row) = rows.next().op("SELECT FROM id_filters (next)")? {
        let key: i64 = row.get(0).op("id_filters.key")?;
        if key != lo + piece {
            return Err(corrupt(format!(
                "run {run}: filter piece {piece} is missing"
            )));
        }
        let ValueRef::Blob(blob) = row.get_ref(1).op("id_filters.data")? else {
            return Err(corrupt(format!(
                "run {run}: filter piece {piece} is not a blob"
            )));
        };
        let body = checked(blob, || format!("run {run}: filter piece {piece}"))?;
        let (ws, tail) = body.as_chunks::<8>();
        if !tail.is_empty() || words.len() as u64 + ws.len() as u64 > want {
            return Err(corrupt(format!(
                "run {run}: filter piece {piece} has a wrong size"
            )));
        }
        words.extend(ws.iter().map(|w| u64::from_le_bytes(*w)));
        piece += 1;
    }
    if words.len() as u64 != want {
        return Err(corrupt(format!(
            "run {run}: filter of {} words, {want} expected",
            words.len()
        )));
    }
    Ok(Bloom {
        words,
        blocks,
        probes,
        sorted,
    })
}

/// Reads a run's filter back into memory (a merged run, installed
/// without it), one piece per lent connection, and sets it: until then its
/// lookups read its parts. A run already gone needs nothing.
fn load_later(lend: &mut Lend<'_>, run: &Arc<Run>) -> Result<()> {
    if run.filter.get().is_some() {
        return Ok(());
    }
    let want = run.blocks as usize * WORDS_PER_BLOCK;
    let mut words: Vec<u64> = Vec::with_capacity(want);
    let mut piece = 0;
    while words.len() < want {
        lend_one(lend, &mut |conn| {
            let blob: Option<Vec<u8>> = conn
                .query_row(
                    "SELECT data FROM id_filters WHERE key = ?1",
                    [row_key(run.id, piece)?],
                    |r| r.get(0),
                )
                .optional()
                .op("SELECT FROM id_filters (a merged run)")?;
            let blob = blob.ok_or_else(|| {
                corrupt(format!("run {}: filter piece {piece} is missing", run.id))
            })?;
            let body = checked(&blob, || format!("run {}: filter piece {piece}", run.id))?;
            let (ws, tail) = body.as_chunks::<8>();
            if !tail.is_empty() || ws.is_empty() || words.len() + ws.len() > want {
                return Err(corrupt(format!(
                    "run {}: filter piece {piece} has a wrong size",
                    run.id
                )));
            }
            words.extend(ws.iter().map(|w| u64::from_le_bytes(*w)));
            Ok(())
        })?;
        piece += 1;
    }
    // Set once: a second caller (none today) would find it set.
    let _ = run.filter.set(Bloom {
        words,
        blocks: run.blocks,
        probes: run.probes,
        sorted: run.sorted,
    });
    Ok(())
}

fn corrupt(msg: String) -> Error {
    Error::Corrupt(format!("id index: {msg}"))
}

// ---------------------------------------------------------------------------
// Bloom filter: blocked, one 512-bit cache line per entry (RocksDB's
// FastLocalBloom scheme)
// ---------------------------------------------------------------------------

struct Bloom {
    words: Vec<u64>,
    blocks: u64,
    probes: u32,
    /// The layout: the block of a hash is picked by the high bits of the
    /// hash itself (so a run's sorted entries fill its filter in order, a
    /// piece at a time: [`RunWriter`]), not of its [`mix`] (the layout of
    /// the runs written before it; stored per run, `filter_probes` +
    /// [`SORTED_LAYOUT`]).
    sorted: bool,
}

/// Added to a run's stored `filter_probes` when its filter has the sorted
/// layout ([`Bloom::sorted`]).
const SORTED_LAYOUT: i64 = 1 << 8;

/// Spreads the caller's hash (murmur3's finalizer, a bijection): the filter
/// stays sound with a weak hash.
fn mix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// Blocks of a filter for `expected` entries.
fn filter_blocks(expected: u64) -> u64 {
    expected
        .max(1)
        .saturating_mul(BITS_PER_ENTRY)
        .div_ceil(BLOCK_BITS)
        .max(1)
}

/// The block (of `blocks`) that holds `hash` (`mixed`: its [`mix`]).
fn block_of(blocks: u64, sorted: bool, hash: u64, mixed: u64) -> u64 {
    let key = if sorted { hash } else { mixed };
    (((key as u128) * (blocks as u128)) >> 64) as u64
}

/// Sets `mixed`'s bits in its block's words.
fn set_bits(block: &mut [u64], mixed: u64, probes: u32) {
    let mut h = mixed as u32;
    for _ in 0..probes {
        let bit = (h >> 23) as usize;
        if let Some(w) = block.get_mut(bit >> 6) {
            *w |= 1 << (bit & 63);
        }
        h = h.wrapping_mul(0x9E37_79B9);
    }
}

/// Whether every one of `mixed`'s bits is set in its block's words.
fn has_bits(block: &[u64], mixed: u64, probes: u32) -> bool {
    let mut h = mixed as u32;
    for _ in 0..probes {
        let bit = (h >> 23) as usize;
        match block.get(bit >> 6) {
            Some(w) if w & (1 << (bit & 63)) != 0 => {}
            _ => return false,
        }
        h = h.wrapping_mul(0x9E37_79B9);
    }
    true
}

impl Bloom {
    fn may_contain(&self, hash: u64, mixed: u64) -> bool {
        let base = block_of(self.blocks, self.sorted, hash, mixed) as usize * WORDS_PER_BLOCK;
        let Some(block) = self.words.get(base..base + WORDS_PER_BLOCK) else {
            return true;
        };
        has_bits(block, mixed, self.probes)
    }
}

// ---------------------------------------------------------------------------
// Checksums
// ---------------------------------------------------------------------------

const P1: u64 = 0x9E37_79B9_7F4A_7C15;

/// A 32-bit checksum: [`checksum64`]'s low half.
fn checksum(data: &[u8]) -> u32 {
    checksum64(data) as u32
}

/// A 64-bit checksum (four multiply-rotate lanes over the 64-bit words, the
/// tail and the length): a changed word always changes its lane, and the
/// result (each step is a bijection of the lane, then of the state);
/// truncation changes the length.
pub(crate) fn checksum64(data: &[u8]) -> u64 {
    let mut lanes = [
        0x243F_6A88_85A3_08D3u64,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let step = |lane: u64, w: &[u8; 8]| {
        (lane ^ u64::from_le_bytes(*w))
            .wrapping_mul(P1)
            .rotate_left(29)
    };
    let (blocks, rest) = data.as_chunks::<32>();
    for block in blocks {
        if let [w0, w1, w2, w3] = block.as_chunks::<8>().0 {
            lanes[0] = step(lanes[0], w0);
            lanes[1] = step(lanes[1], w1);
            lanes[2] = step(lanes[2], w2);
            lanes[3] = step(lanes[3], w3);
        }
    }
    let (words, rest) = rest.as_chunks::<8>();
    for (lane, w) in lanes.iter_mut().zip(words) {
        *lane = step(*lane, w);
    }
    let mut h = (data.len() as u64).wrapping_mul(P1);
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(P1).rotate_left(31);
    }
    let mut tail = [0u8; 8];
    for (d, s) in tail.iter_mut().zip(rest) {
        *d = *s;
    }
    h = (h ^ u64::from_le_bytes(tail))
        .wrapping_mul(P1)
        .rotate_left(31);
    mix(h)
}

fn with_checksum(mut data: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&data);
    data.extend_from_slice(&sum.to_le_bytes());
    data
}

/// The blob without its checksum, once the checksum matches.
fn checked(blob: &[u8], what: impl Fn() -> String) -> Result<&[u8]> {
    let (body, sum) = blob
        .split_last_chunk::<4>()
        .ok_or_else(|| corrupt(format!("{} is shorter than its checksum", what())))?;
    if checksum(body) != u32::from_le_bytes(*sum) {
        return Err(corrupt(format!("{}: checksum mismatch", what())));
    }
    Ok(body)
}

// ---------------------------------------------------------------------------
// Part encoding
// ---------------------------------------------------------------------------

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*at)?;
        *at += 1;
        let bits = u64::from(b & 0x7F);
        if shift == 63 && bits > 1 {
            return None;
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Writes bits least significant first.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter<'_> {
    /// The low `bits` (0..=64) bits of `v`.
    fn put(&mut self, v: u64, bits: u32) {
        if bits == 0 {
            return;
        }
        let v = if bits >= 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        };
        self.acc |= v << self.n;
        let total = self.n + bits;
        if total >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            let used = 64 - self.n;
            self.acc = if used >= 64 { 0 } else { v >> used };
            self.n = total - 64;
        } else {
            self.n = total;
        }
    }

    /// Bits written so far.
    fn bits(&self) -> u64 {
        self.out.len() as u64 * 8 + u64::from(self.n)
    }

    fn finish(self) {
        let bytes = self.n.div_ceil(8) as usize;
        self.out
            .extend_from_slice(&self.acc.to_le_bytes()[..bytes.min(8)]);
    }
}

/// Reads what [`BitWriter`] wrote; reading past the end is an error.
struct BitReader<'a> {
    data: &'a [u8],
    /// Bit position.
    at: u64,
}

impl BitReader<'_> {
    fn end(&self) -> u64 {
        self.data.len() as u64 * 8
    }

    /// 64 bits from bit `at`, zeros past the end.
    fn peek_at(&self, at: u64) -> u64 {
        let byte = (at >> 3) as usize;
        let shift = (at & 7) as u32;
        let raw = match self.data.get(byte..byte.saturating_add(16)) {
            Some(s) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(s);
                u128::from_le_bytes(b)
            }
            None => {
                let mut b = [0u8; 16];
                for (d, s) in b.iter_mut().zip(self.data.get(byte..).unwrap_or(&[])) {
                    *d = *s;
                }
                u128::from_le_bytes(b)
            }
        };
        (raw >> shift) as u64
    }

    fn get_at(&self, at: u64, bits: u32) -> Option<u64> {
        if bits == 0 {
            return Some(0);
        }
        if at.checked_add(u64::from(bits))? > self.end() {
            return None;
        }
        let v = self.peek_at(at);
        Some(if bits >= 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        })
    }

    fn get(&mut self, bits: u32) -> Option<u64> {
        let v = self.get_at(self.at, bits)?;
        self.at += u64::from(bits);
        Some(v)
    }

    /// A Rice-coded delta with parameter `k`.
    fn rice(&mut self, k: u32) -> Option<u64> {
        let ones = u64::from((!self.peek_at(self.at)).trailing_zeros());
        if ones >= ESCAPE {
            self.at = self.at.checked_add(ESCAPE)?;
            return self.get(64);
        }
        self.at = self.at.checked_add(ones + 1)?;
        if self.at > self.end() {
            return None;
        }
        let r = self.get(k)?;
        Some((ones << k) | r)
    }
}

/// Bits of `v` (0 for 0).
fn width(v: u64) -> u32 {
    64 - v.leading_zeros()
}

/// Bytes of a part besides its bit stream and skip table, at most: format,
/// count, first hash, base, widths, checksum.
const PART_OVERHEAD: usize = 1 + 3 + 10 + 10 + 2 + 4;

/// Rice bits of a delta with parameter `k`.
fn rice_bits(d: u64, k: u32) -> u64 {
    let q = d >> k;
    if q >= ESCAPE {
        ESCAPE + 64
    } else {
        q + 1 + u64::from(k)
    }
}

fn deltas(entries: &[(u64, u64)]) -> impl Iterator<Item = u64> + '_ {
    entries.windows(2).map(|w| match w {
        [a, b] => b.0.wrapping_sub(a.0),
        _ => 0,
    })
}

/// The Rice parameter and position width for a run of sorted entries.
struct PartPlan {
    k: u32,
    pos_bits: u32,
}

impl PartPlan {
    fn new(entries: &[(u64, u64)]) -> PartPlan {
        let lo = entries.iter().map(|e| e.1).min().unwrap_or(0);
        let hi = entries.iter().map(|e| e.1).max().unwrap_or(0);
        let k = match (entries.first(), entries.last()) {
            (Some(&(first, _)), Some(&(last, _))) if entries.len() > 1 => {
                let mean = (last - first) / (entries.len() as u64 - 1);
                let k0 = width(mean).saturating_sub(1);
                (k0.saturating_sub(2)..=(k0 + 1).min(63))
                    .min_by_key(|&k| deltas(entries).map(|d| rice_bits(d, k)).sum::<u64>())
                    .unwrap_or(k0)
            }
            _ => 0,
        };
        PartPlan {
            k,
            pos_bits: width(hi - lo),
        }
    }

    /// How many of the first entries one part of at most `budget` bytes
    /// holds with this plan (at least one). A prefix's positions never need
    /// more bits than all of them.
    fn fit(&self, entries: &[(u64, u64)], budget: usize) -> usize {
        let mut bits = u64::from(self.pos_bits);
        for (i, d) in deltas(entries).enumerate() {
            let n = i + 2; // entries with this one
            let more = u64::from(self.pos_bits) + rice_bits(d, self.k);
            let skips = (n - 1) / SKIP * 12;
            let bytes = PART_OVERHEAD + skips + (bits + more).div_ceil(8) as usize;
            if bytes > budget || n > MAX_PART_ENTRIES as usize {
                return n - 1;
            }
            bits += more;
        }
        entries.len()
    }
}

/// Encodes sorted pairs (at least one) into `out` (cleared first), with Rice
/// parameter `k`.
fn encode_part(entries: &[(u64, u64)], k: u32, out: &mut Vec<u8>) {
    out.clear();
    let Some(&(first, _)) = entries.first() else {
        return;
    };
    let n = entries.len() as u64;
    let base = entries.iter().map(|e| e.1).min().unwrap_or(0);
    let top = entries.iter().map(|e| e.1 - base).max().unwrap_or(0);
    let pos_bits = width(top);
    let mut stream = Vec::new();
    let mut skips = Vec::new();
    let mut w = BitWriter {
        out: &mut stream,
        acc: 0,
        n: 0,
    };
    for &(_, p) in entries {
        w.put(p - base, pos_bits);
    }
    for (i, (d, &(h, _))) in deltas(entries).zip(entries.iter().skip(1)).enumerate() {
        let q = d >> k;
        if q >= ESCAPE {
            w.put(u64::MAX, ESCAPE as u32);
            w.put(d, 64);
        } else {
            // q ones, then a zero
            w.put((1u64 << q) - 1, q as u32 + 1);
            w.put(d, k);
        }
        if (i + 1) % SKIP == 0 {
            skips.extend_from_slice(&h.to_le_bytes());
            skips.extend_from_slice(&(w.bits() as u32).to_le_bytes());
        }
    }
    w.finish();
    out.push(PART_FORMAT);
    put_varint(out, n);
    put_varint(out, first);
    put_varint(out, base);
    out.push(pos_bits as u8);
    out.push(k as u8);
    out.extend_from_slice(&skips);
    out.extend_from_slice(&stream);
    let sum = checksum(out);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// A part's header and skip table, its bit stream positioned at the hash
/// deltas.
struct PartReader<'a> {
    n: u64,
    first: u64,
    base: u64,
    pos_bits: u32,
    k: u32,
    /// Entry `SKIP * (j + 1)`: its hash (u64 LE) and the bit where the delta
    /// of the next entry starts (u32 LE).
    skips: &'a [[u8; 12]],
    bits: BitReader<'a>,
}

impl<'a> PartReader<'a> {
    fn new(blob: &'a [u8], fence: u64) -> Result<PartReader<'a>> {
        let body = checked(blob, || "a part".to_string())?;
        let bad = |what: &str| corrupt(format!("a part: {what}"));
        let mut at = 0;
        let format = *body.first().ok_or_else(|| bad("empty"))?;
        at += 1;
        if format != PART_FORMAT {
            return Err(bad(&format!("unknown format {format}")));
        }
        let n = get_varint(body, &mut at).ok_or_else(|| bad("bad entry count"))?;
        let first = get_varint(body, &mut at).ok_or_else(|| bad("bad first hash"))?;
        let base = get_varint(body, &mut at).ok_or_else(|| bad("bad position base"))?;
        let pos_bits = u32::from(*body.get(at).ok_or_else(|| bad("truncated header"))?);
        let k = u32::from(*body.get(at + 1).ok_or_else(|| bad("truncated header"))?);
        at += 2;
        if n == 0 || n > MAX_PART_ENTRIES || pos_bits > 64 || k > 63 {
            return Err(bad(&format!("header n={n} pos_bits={pos_bits} k={k}")));
        }
        if first != fence {
            return Err(bad(&format!(
                "first hash {first:#x}, its fence is {fence:#x}"
            )));
        }
        let skip_bytes = ((n - 1) / SKIP as u64) as usize * 12;
        let skips = body
            .get(at..at + skip_bytes)
            .ok_or_else(|| bad("truncated skip table"))?
            .as_chunks::<12>()
            .0;
        let data = body.get(at + skip_bytes..).unwrap_or(&[]);
        // the deltas follow the positions
        let bits = BitReader {
            data,
            at: n * u64::from(pos_bits),
        };
        if bits.at > bits.end() {
            return Err(bad("truncated positions"));
        }
        Ok(PartReader {
            n,
            first,
            base,
            pos_bits,
            k,
            skips,
            bits,
        })
    }

    /// Skip entry `j`: (entry index, hash, bit of the next delta).
    fn skip(&self, j: usize) -> Option<(u64, u64, u64)> {
        let e = self.skips.get(j)?;
        let (h, off) = e.split_first_chunk::<8>()?;
        let off = u32::from_le_bytes(off.first_chunk::<4>().copied()?);
        Some((
            (j as u64 + 1) * SKIP as u64,
            u64::from_le_bytes(*h),
            off.into(),
        ))
    }

    fn pos(&self, i: u64) -> Result<u64> {
        let bits = u64::from(self.pos_bits);
        self.bits
            .get_at(i * bits, self.pos_bits)
            .and_then(|v| self.base.checked_add(v))
            .ok_or_else(|| corrupt("a part: bad position".to_string()))
    }

    fn next_hash(&mut self, prev: u64) -> Result<u64> {
        self.bits
            .rice(self.k)
            .and_then(|d| prev.checked_add(d))
            .ok_or_else(|| corrupt("a part: bad hash delta".to_string()))
    }
}

/// Appends the positions of `hash` in the part; true when the part holds
/// hashes above it (so later parts cannot hold it). Decodes from the last
/// skip entry below `hash`: at most [`SKIP`] entries before it.
fn search_part(blob: &[u8], fence: u64, hash: u64, out: &mut Vec<u64>) -> Result<bool> {
    let mut r = PartReader::new(blob, fence)?;
    let below = r.skips.partition_point(|e| {
        e.first_chunk::<8>()
            .is_some_and(|h| u64::from_le_bytes(*h) < hash)
    });
    let (mut i, mut h) = (0, r.first);
    if let Some(j) = below.checked_sub(1) {
        let (at, skip_hash, bit) = r
            .skip(j)
            .ok_or_else(|| corrupt("a part: bad skip table".to_string()))?;
        (i, h) = (at, skip_hash);
        r.bits.at = bit;
    }
    loop {
        if h == hash {
            out.push(r.pos(i)?);
        } else if h > hash {
            return Ok(true);
        }
        i += 1;
        if i >= r.n {
            return Ok(false);
        }
        h = r.next_hash(h)?;
    }
}

/// Decodes a whole part into `out`, checking it to the last bit.
fn decode_part(blob: &[u8], fence: u64, out: &mut Vec<(u64, u64)>) -> Result<()> {
    let mut r = PartReader::new(blob, fence)?;
    let mut h = r.first;
    out.reserve(r.n as usize);
    for i in 0..r.n {
        if i > 0 {
            h = r.next_hash(h)?;
            if i % SKIP as u64 == 0 {
                let j = (i / SKIP as u64 - 1) as usize;
                if r.skip(j) != Some((i, h, r.bits.at)) {
                    return Err(corrupt("a part: its skip table does not match".to_string()));
                }
            }
        }
        out.push((h, r.pos(i)?));
    }
    if r.bits.end().saturating_sub(r.bits.at) >= 8 {
        return Err(corrupt("a part: bytes after its entries".to_string()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("db")).unwrap();
        conn.pragma_update(None, "page_size", 16384).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        // a crash of the process is what the tests play; no power loss
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        (dir, conn)
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // splitmix64
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn found(index: &IdIndex, conn: &Connection, hash: u64) -> Vec<u64> {
        let mut out = Vec::new();
        index.lookup(conn, hash, &mut out).unwrap();
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn the_two_sides_can_live_on_two_threads() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<IdIndex>();
        send_sync::<IdFlusher>();
    }

    #[test]
    fn parts_round_trip_with_any_hashes_and_positions() {
        let mut rng = Rng(7);
        let cases: Vec<Vec<(u64, u64)>> = vec![
            vec![(0, 0)],
            vec![(u64::MAX, u64::MAX)],
            vec![(0, u64::MAX), (u64::MAX, 0)],
            vec![(5, 1), (5, 2), (5, 3)],
            (0..4096).map(|i| (i, i * 3)).collect(),
            {
                let mut v: Vec<_> = (0..4096).map(|_| (rng.next(), rng.next())).collect();
                v.sort_unstable();
                v
            },
            {
                let mut v: Vec<_> = (0..1000)
                    .map(|_| (rng.next() >> 40, rng.below(1000)))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            },
        ];
        let mut blob = Vec::new();
        for entries in cases {
            encode_part(&entries, PartPlan::new(&entries).k, &mut blob);
            let mut back = Vec::new();
            decode_part(&blob, entries[0].0, &mut back).unwrap();
            assert_eq!(back, entries);
            for &(h, _) in entries.iter().step_by(97) {
                let mut out = Vec::new();
                search_part(&blob, entries[0].0, h, &mut out).unwrap();
                let want: Vec<u64> = entries.iter().filter(|e| e.0 == h).map(|e| e.1).collect();
                assert_eq!(out, want);
            }
        }
    }

    #[test]
    fn the_index_matches_a_model_across_flushes_merges_and_reopens() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        // two parts per transaction: merges take many
        index.set_transaction_bytes(32 << 10);
        assert_eq!(index.mark(), None);
        let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut rng = Rng(42);
        let mut keys: Vec<u64> = vec![0, u64::MAX];
        let mut pos = 0u64;
        let mut merges_seen = 0;
        let mut last_runs = 0;
        for flush in 0..60u64 {
            let batch = match flush % 7 {
                0 => 0,
                1 => 3,
                2 => 5000,
                _ => rng.below(1500) + 1,
            };
            let mut entries = Vec::new();
            for _ in 0..batch {
                let hash = match rng.below(10) {
                    // duplicates of an existing hash, at another position
                    0 | 1 => keys[rng.below(keys.len() as u64) as usize],
                    2 => [0, u64::MAX, 1, u64::MAX - 1][rng.below(4) as usize],
                    // clustered hashes (small deltas)
                    3 => 1_000_000 + rng.below(5000),
                    _ => rng.next(),
                };
                pos += 1 + rng.below(3);
                let p = if rng.below(20) == 0 {
                    u64::MAX - pos
                } else {
                    pos
                };
                entries.push((hash, p));
                keys.push(hash);
            }
            // the same pair twice now and then
            if let Some(&e) = entries.first() {
                entries.push(e);
            }
            for &(h, p) in &entries {
                let v = model.entry(h).or_default();
                if !v.contains(&p) {
                    v.push(p);
                }
            }
            index.add(entries.iter().copied());
            // lookups see the memtable at once
            for &(h, _) in entries.iter().take(50) {
                let mut want = model[&h].clone();
                want.sort_unstable();
                assert_eq!(found(&index, &conn, h), want);
            }
            index.flush(&mut conn, flush * 10).unwrap();
            if index.runs() < last_runs {
                merges_seen += 1;
            }
            last_runs = index.runs();
            let reopened = IdIndex::open(&conn).unwrap();
            assert_eq!(reopened.mark(), Some(flush * 10));
            assert_eq!(reopened.runs(), index.runs());
            assert_eq!(reopened.len(), index.len());
            // some present hashes (all of them at the end), some absent
            let check: Vec<u64> = if flush == 59 {
                model.keys().copied().collect()
            } else {
                (0..150)
                    .map(|_| keys[rng.below(keys.len() as u64) as usize])
                    .chain([0, u64::MAX])
                    .collect()
            };
            for h in check {
                let mut want = model.get(&h).cloned().unwrap_or_default();
                want.sort_unstable();
                assert_eq!(found(&reopened, &conn, h), want, "hash {h:#x}");
                if flush % 10 == 0 {
                    assert_eq!(found(&index, &conn, h), want, "hash {h:#x}");
                }
            }
            for _ in 0..150 {
                let h = rng.next();
                let mut want = model.get(&h).cloned().unwrap_or_default();
                want.sort_unstable();
                assert_eq!(found(&reopened, &conn, h), want);
            }
            index = reopened;
            index.set_transaction_bytes(32 << 10);
        }
        let n: usize = model.values().map(Vec::len).sum();
        assert!(n > 40_000, "{n} entries");
        assert!(merges_seen >= 10, "{merges_seen} merges");
        assert_no_garbage(&conn);
    }

    /// No rows but those of live runs: no row of a run that is not live,
    /// every part and filter piece of a live run, nothing else.
    fn assert_no_garbage(conn: &Connection) {
        let q = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(q("SELECT count(*) FROM id_runs WHERE live = 0"), 0);
        assert_eq!(
            q("SELECT count(*) FROM id_parts"),
            q("SELECT coalesce(sum(parts), 0) FROM id_runs")
        );
        assert_eq!(
            q("SELECT count(*) FROM id_filters"),
            q("SELECT coalesce(sum((filter_blocks * 64 + 1048575) / 1048576), 0) FROM id_runs")
        );
        assert_eq!(
            q("SELECT count(*) FROM id_parts p WHERE NOT EXISTS \
               (SELECT 1 FROM id_runs r WHERE r.run = p.key >> 32 AND (p.key & 4294967295) < r.parts)"),
            0
        );
    }

    #[test]
    fn after_a_crash_the_index_is_the_last_flush_and_its_mark() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        index.add([(1, 10), (2, 20)]);
        index.flush(&mut conn, 7).unwrap();
        index.add([(3, 30), (1, 11)]);
        index.seal(8); // sealed, never flushed
        index.add([(4, 40)]);
        assert_eq!(found(&index, &conn, 1), vec![10, 11]);
        assert_eq!(found(&index, &conn, 3), vec![30]);
        assert_eq!(index.unflushed(), 3);
        drop(index); // the crash
        let index = IdIndex::open(&conn).unwrap();
        assert_eq!(index.mark(), Some(7));
        assert_eq!(found(&index, &conn, 1), vec![10]);
        assert_eq!(found(&index, &conn, 2), vec![20]);
        assert!(found(&index, &conn, 3).is_empty());
        assert!(found(&index, &conn, 4).is_empty());
        assert_eq!(index.len(), 2);
    }

    /// Issue 36 point 3: a merge no longer holds back flushes. Flushes
    /// run between the merge's lent transactions (as the checkpointer's do
    /// while the merge thread runs), their marks are durable at once, and
    /// a crash in the middle of the merge (the lender fails) loses none of
    /// them: the reopened index has the last flushed mark and every entry,
    /// and the next merge deletes what the interrupted one left. (With the
    /// merge inside the flush, as before, the mark stayed at the one before
    /// the merge until it ended.)
    #[test]
    fn flushes_go_on_between_a_merges_transactions_and_survive_a_crash_in_it() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        index.set_transaction_bytes(16 << 10); // many short transactions
        let flusher = index.flusher();
        let mut rng = Rng(36);
        let mut all: Vec<(u64, u64)> = Vec::new();
        let mut batch = |index: &mut IdIndex, all: &mut Vec<(u64, u64)>, n: u64| {
            let entries: Vec<(u64, u64)> = (0..n)
                .map(|_| (rng.next(), all.len() as u64 + rng.below(1 << 20)))
                .collect();
            all.extend(&entries);
            index.add(entries);
        };
        // Runs of 40K, 20K, 20K entries: the last two are due to merge
        // with the first.
        for (mark, n) in [(1, 40_000), (2, 20_000), (3, 20_000)] {
            batch(&mut index, &mut all, n);
            index.seal(mark);
            flusher
                .flush_sealed_with(&mut |work| work(&mut conn))
                .unwrap();
        }
        assert_eq!(index.runs(), 3);
        assert!(flusher.merge_due());
        assert_eq!(flusher.merging_entries(), 0);
        // The merge, with a flush of a new memtable after every few of its
        // transactions; the lender fails (a crash) after the third flush.
        let mut lent = 0;
        let mut mark = 3;
        let mut seen_merging = 0;
        let crashed = flusher.merge_with(&mut |work| {
            lent += 1;
            work(&mut conn)?;
            seen_merging = seen_merging.max(flusher.merging_entries());
            if lent % 4 == 0 && mark < 6 {
                mark += 1;
                batch(&mut index, &mut all, 3_000);
                index.seal(mark);
                flusher.flush_sealed_with(&mut |w| w(&mut conn))?;
                assert_eq!(
                    index.mark(),
                    Some(mark),
                    "the flush's mark is durable at once"
                );
            }
            if mark == 6 {
                return Err(Error::Corrupt("the process is killed".into()));
            }
            Ok(())
        });
        assert!(crashed.is_err());
        assert_eq!(seen_merging, 80_000);
        assert_eq!(flusher.merging_entries(), 0);
        let garbage: i64 = conn
            .query_row("SELECT count(*) FROM id_runs WHERE live = 0", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(garbage, 1, "the interrupted merge's run");
        drop(index);
        let mut index = IdIndex::open(&conn).unwrap();
        assert_eq!(index.mark(), Some(6));
        assert_eq!(index.runs(), 6);
        for &(h, p) in all.iter().step_by(97) {
            assert!(found(&index, &conn, h).contains(&p), "({h}, {p}) lost");
        }
        // The next merge deletes the garbage, then merges everything.
        let flusher = index.flusher();
        assert!(flusher.merge_due());
        flusher.merge_with(&mut |work| work(&mut conn)).unwrap();
        let garbage: i64 = conn
            .query_row("SELECT count(*) FROM id_runs WHERE live = 0", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(garbage, 0);
        assert!(!flusher.merge_due());
        assert!(index.runs() < 6);
        assert_eq!(index.len(), all.len() as u64);
        for &(h, p) in all.iter().step_by(89) {
            assert!(found(&index, &conn, h).contains(&p), "({h}, {p}) lost");
        }
        index.add([(1, 1)]);
        index.flush(&mut conn, 7).unwrap();
        assert_eq!(IdIndex::open(&conn).unwrap().mark(), Some(7));
    }

    #[test]
    fn a_hash_with_many_positions_spans_parts() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("db")).unwrap();
        // small pages: small parts
        conn.pragma_update(None, "page_size", 1024).unwrap();
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let mut index = IdIndex::open(&conn).unwrap();
        let mut rng = Rng(1);
        let hot = 1u64 << 63;
        let mut others = Vec::new();
        for flush in 0..4u64 {
            let mut entries: Vec<(u64, u64)> = (0..3000)
                .map(|i| (hot, flush * 1_000_000 + i * 7))
                .collect();
            for i in 0..500 {
                let h = rng.next();
                entries.push((h, i));
                others.push((h, i));
            }
            // neighbours on both sides
            entries.push((hot - 1, 1));
            entries.push((hot + 1, 2));
            index.add(entries);
            index.flush(&mut conn, flush).unwrap();
        }
        let index = IdIndex::open(&conn).unwrap();
        assert!(index.shared.read().runs.iter().any(|r| r
            .fences
            .iter()
            .filter(|&&f| f == hot)
            .count()
            >= 3));
        let got = found(&index, &conn, hot);
        let mut want: Vec<u64> = (0..4u64)
            .flat_map(|f| (0..3000).map(move |i| f * 1_000_000 + i * 7))
            .collect();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(found(&index, &conn, hot - 1), vec![1]);
        assert_eq!(found(&index, &conn, hot + 1), vec![2]);
        for (h, p) in others {
            assert!(found(&index, &conn, h).contains(&p));
        }
    }

    #[test]
    fn clear_memtable_drops_only_what_was_not_sealed() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        index.add([(1, 10)]);
        index.seal(1);
        index.add([(2, 20)]);
        index.clear_memtable();
        assert_eq!(found(&index, &conn, 1), vec![10]);
        assert!(found(&index, &conn, 2).is_empty());
        index.flusher().flush(&mut conn).unwrap();
        assert_eq!(index.mark(), Some(1));
        assert_eq!(found(&IdIndex::open(&conn).unwrap(), &conn, 1), vec![10]);
    }

    #[test]
    fn rows_left_by_a_crash_after_a_merge_are_ignored_then_deleted() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        index.add([(1, 10)]);
        index.flush(&mut conn, 1).unwrap();
        // a merged run whose rows a crash left behind
        conn.execute("INSERT INTO id_runs VALUES (99, 0, 1, 1, 1, 6, x'00')", [])
            .unwrap();
        conn.execute("INSERT INTO id_parts VALUES (99 << 32, x'00')", [])
            .unwrap();
        let mut index = IdIndex::open(&conn).unwrap();
        assert_eq!(index.runs(), 1);
        index.add([(2, 20)]);
        index.flush(&mut conn, 2).unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT (SELECT count(*) FROM id_runs WHERE run = 99) \
                 + (SELECT count(*) FROM id_parts WHERE key = 99 << 32)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
        assert_eq!(found(&index, &conn, 1), vec![10]);
    }

    #[test]
    fn damaged_blobs_are_errors_not_panics_or_misses() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        let mut rng = Rng(3);
        let entries: Vec<(u64, u64)> = (0..10_000).map(|i| (rng.next(), i)).collect();
        index.add(entries.iter().copied());
        index.flush(&mut conn, 1).unwrap();
        let (key, good): (i64, Vec<u8>) = conn
            .query_row(
                "SELECT key, data FROM id_parts ORDER BY key LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let mut first_part = Vec::new();
        let fence = {
            let state = index.shared.read();
            state.runs[0].fences[0]
        };
        decode_part(&good, fence, &mut first_part).unwrap();
        let probe = first_part[first_part.len() / 2].0;
        let mut damaged: Vec<Vec<u8>> = vec![
            Vec::new(),
            vec![1],
            good[..good.len() / 2].to_vec(),
            good[..good.len() - 1].to_vec(),
            good[..good.len() - 5].to_vec(),
        ];
        for i in (0..good.len()).step_by(good.len() / 40 + 1) {
            let mut b = good.clone();
            b[i] ^= 0x10;
            damaged.push(b);
        }
        let mut x = Rng(9);
        for len in [0usize, 3, 10, 100, 5000] {
            damaged.push((0..len).map(|_| x.next() as u8).collect());
        }
        for blob in &damaged {
            conn.execute(
                "UPDATE id_parts SET data = ?1 WHERE key = ?2",
                params![blob, key],
            )
            .unwrap();
            let mut out = Vec::new();
            assert!(
                index.lookup(&conn, probe, &mut out).is_err(),
                "a damaged part of {} bytes was read",
                blob.len()
            );
            // the decoders themselves return on any bytes
            let _ = decode_part(blob, fence, &mut Vec::new());
            let _ = search_part(blob, fence, probe, &mut Vec::new());
        }
        // the same bytes without their checksum check: still no panic
        for blob in &damaged {
            let mut b = blob.clone();
            let sum = checksum(&b);
            b.extend_from_slice(&sum.to_le_bytes());
            let _ = decode_part(&b, fence, &mut Vec::new());
            let _ = search_part(&b, fence, probe, &mut Vec::new());
        }
        // not a blob, missing
        conn.execute("UPDATE id_parts SET data = 5 WHERE key = ?1", [key])
            .unwrap();
        assert!(index.lookup(&conn, probe, &mut Vec::new()).is_err());
        conn.execute("DELETE FROM id_parts WHERE key = ?1", [key])
            .unwrap();
        assert!(index.lookup(&conn, probe, &mut Vec::new()).is_err());
        // a merge over the damaged run fails and leaves the index as it was
        // a run large enough to be merged with the first one
        index.add((0..8_000).map(|i| (rng.next(), 100_000 + i)));
        let runs = index.runs();
        conn.execute(
            "INSERT INTO id_parts (key, data) VALUES (?1, ?2)",
            params![key, good[..10].to_vec()],
        )
        .unwrap();
        assert!(index.flush(&mut conn, 2).is_err());
        assert_eq!(index.runs(), runs + 1);
        conn.execute(
            "UPDATE id_parts SET data = ?1 WHERE key = ?2",
            params![good, key],
        )
        .unwrap();
        index.flush(&mut conn, 3).unwrap();
        assert_eq!(index.runs(), 1);
        for &(h, p) in entries.iter().step_by(101) {
            assert_eq!(found(&index, &conn, h), vec![p]);
        }
        // damaged fences and filters: open refuses
        let fences: Vec<u8> = conn
            .query_row("SELECT fences FROM id_runs", [], |r| r.get(0))
            .unwrap();
        let mut f = fences.clone();
        f[0] ^= 1;
        conn.execute("UPDATE id_runs SET fences = ?1", [&f])
            .unwrap();
        assert!(IdIndex::open(&conn).is_err());
        conn.execute("UPDATE id_runs SET fences = ?1", [&fences[..3]])
            .unwrap();
        assert!(IdIndex::open(&conn).is_err());
        conn.execute("UPDATE id_runs SET fences = ?1", [&fences])
            .unwrap();
        IdIndex::open(&conn).unwrap();
        let filter: Vec<u8> = conn
            .query_row("SELECT data FROM id_filters", [], |r| r.get(0))
            .unwrap();
        let mut f = filter.clone();
        let at = f.len() / 3;
        f[at] ^= 0x40; // one filter bit cleared or set
        conn.execute("UPDATE id_filters SET data = ?1", [&f])
            .unwrap();
        assert!(IdIndex::open(&conn).is_err());
        conn.execute(
            "UPDATE id_filters SET data = ?1",
            [&filter[..filter.len() - 8]],
        )
        .unwrap();
        assert!(IdIndex::open(&conn).is_err());
        conn.execute("DELETE FROM id_filters", []).unwrap();
        assert!(IdIndex::open(&conn).is_err());
    }

    /// A connection as the service sets it up (WAL, `synchronous = FULL`),
    /// with pages of `page` bytes and the schema.
    fn db_at(path: &std::path::Path, page: i64) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "page_size", page).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn
    }

    fn synchronous(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn lookups_on_another_thread_never_miss_while_flushes_and_merges_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let writer = db_at(&path, 4096);
        writer
            .execute_batch("CREATE TABLE calls (n INTEGER NOT NULL)")
            .unwrap();
        // the service's writer: a mutex, lent per transaction
        let writer = Arc::new(Mutex::new(writer));
        let reader = Connection::open(&path).unwrap();
        let mut index = IdIndex::open(&reader).unwrap();
        index.set_transaction_bytes(8 << 10);
        let flusher = index.flusher();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // the group commit of acknowledged calls, between the lent transactions
        let calls = {
            let (writer, stop) = (writer.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let conn = writer.lock().unwrap();
                    conn.execute("INSERT INTO calls (n) VALUES (?1)", [n])
                        .unwrap();
                    n += 1;
                    drop(conn);
                    std::thread::yield_now();
                }
                n
            })
        };
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = {
            let writer = writer.clone();
            std::thread::spawn(move || {
                let mut lent = 0;
                while rx.recv().is_ok() {
                    flusher
                        .flush_with(&mut |work| {
                            let mut conn = writer.lock().unwrap();
                            lent += 1;
                            work(&mut conn)
                        })
                        .unwrap();
                }
                lent
            })
        };
        let mut rng = Rng(11);
        let mut added: Vec<(u64, u64)> = Vec::new();
        for batch in 0..40u64 {
            let entries: Vec<(u64, u64)> =
                (0..500).map(|i| (rng.next(), batch * 1000 + i)).collect();
            index.add(entries.iter().copied());
            added.extend(&entries);
            index.seal(batch);
            tx.send(()).unwrap();
            for _ in 0..200 {
                let (h, p) = added[rng.below(added.len() as u64) as usize];
                assert!(found(&index, &reader, h).contains(&p));
            }
        }
        drop(tx);
        let lent = thread.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let calls = calls.join().unwrap();
        assert!(lent > 100, "{lent} lent transactions");
        assert!(calls > 0);
        assert_eq!(index.mark(), Some(39));
        assert_eq!(index.unflushed(), 0);
        let writer = writer.lock().unwrap();
        let committed: i64 = writer
            .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
            .unwrap();
        assert_eq!(committed, calls);
        let reopened = IdIndex::open(&writer).unwrap();
        for &(h, p) in added.iter().step_by(7) {
            assert!(found(&reopened, &reader, h).contains(&p));
        }
        assert_no_garbage(&writer);
    }

    #[test]
    fn each_lent_transaction_is_short_and_leaves_the_connection_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let wal = dir.path().join("db-wal");
        let mut conn = db_at(&path, 4096);
        let mut index = IdIndex::open(&conn).unwrap();
        // 16 parts per transaction
        index.set_transaction_bytes(64 << 10);
        let flusher = index.flusher();
        let mut rng = Rng(21);
        let mut added = Vec::new();
        let (mut lends, mut max_frames, mut max_changes) = (0, 0, 0);
        let mut per_flush = Vec::new();
        for b in 0..8u64 {
            let entries: Vec<(u64, u64)> =
                (0..10_000).map(|i| (rng.next(), b * 100_000 + i)).collect();
            index.add(entries.iter().copied());
            added.extend(entries);
            index.seal(b);
            let before = lends;
            flusher
                .flush_with(&mut |work| {
                    assert!(conn.is_autocommit());
                    assert_eq!(synchronous(&conn), 2);
                    // an empty WAL: what it holds after `work` is what `work` wrote
                    let busy: i64 = conn
                        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                        .unwrap();
                    assert_eq!(busy, 0);
                    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
                    let changes: i64 = conn
                        .query_row("SELECT total_changes()", [], |r| r.get(0))
                        .unwrap();
                    let done = work(&mut conn);
                    assert!(conn.is_autocommit(), "a transaction was left open");
                    assert_eq!(synchronous(&conn), 2, "synchronous was not reset");
                    let len = std::fs::metadata(&wal).unwrap().len();
                    let frames = len.saturating_sub(32) / (4096 + 24);
                    let changes = conn
                        .query_row("SELECT total_changes()", [], |r| r.get::<_, i64>(0))
                        .unwrap()
                        - changes;
                    max_frames = max_frames.max(frames);
                    max_changes = max_changes.max(changes);
                    lends += 1;
                    done
                })
                .unwrap();
            per_flush.push(lends - before);
        }
        // 16 parts (or one filter piece of 100 KB, 25 pages), a few b-tree
        // and freelist pages, the row; or 64 freed pages
        assert!(max_frames <= 48, "{max_frames} pages in one transaction");
        assert!(max_changes <= 80, "{max_changes} rows in one transaction");
        // the last flush merges all 80,000 entries (~170 parts)
        assert!(
            per_flush[7] >= 20,
            "{per_flush:?} lent transactions per flush"
        );
        assert_eq!(index.runs(), 1);
        for &(h, p) in added.iter().step_by(13) {
            assert_eq!(found(&index, &conn, h), vec![p]);
        }
        assert_no_garbage(&conn);
    }

    /// Runs a flush whose lender "crashes" (returns `Err` without running
    /// the transaction) once `after` transactions have run. True when the
    /// flush finished before.
    fn flush_until_crash(flusher: &IdFlusher, conn: &mut Connection, after: usize) -> bool {
        let mut lent = 0;
        let done = flusher.flush_with(&mut |work| {
            if lent == after {
                return Err(Error::Injected("crash"));
            }
            lent += 1;
            work(conn)
        });
        match done {
            Ok(()) => true,
            Err(Error::Injected(_)) => false,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_crash_after_any_lent_transaction_loses_nothing() {
        // 8 flushes of 500 entries: the 8th writes a run, then merges the
        // four (2000, 1000, 500, 500) in many small transactions
        let mut rng = Rng(77);
        let mut hashes: Vec<u64> = Vec::new();
        let mut batches: Vec<Vec<(u64, u64)>> = Vec::new();
        for b in 0..8u64 {
            let batch: Vec<(u64, u64)> = (0..500)
                .map(|i| {
                    // some hashes again, at another position
                    let h = if i % 25 == 0 && !hashes.is_empty() {
                        hashes[rng.below(hashes.len() as u64) as usize]
                    } else {
                        rng.next()
                    };
                    hashes.push(h);
                    (h, b * 1000 + i)
                })
                .collect();
            batches.push(batch);
        }
        let absent: Vec<u64> = (0..200).map(|_| rng.next()).collect();
        // the model at mark m: the first m batches
        let model = |m: u64| {
            let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            for &(h, p) in batches.iter().take(m as usize).flatten() {
                model.entry(h).or_default().push(p);
            }
            for v in model.values_mut() {
                v.sort_unstable();
                v.dedup();
            }
            model
        };
        let models = [model(7), model(8)];
        // every lookup as the model at the index's mark says
        let check = |index: &IdIndex, conn: &Connection| {
            let mark = index.mark().unwrap();
            assert!(mark == 7 || mark == 8, "mark {mark}");
            let model = &models[mark as usize - 7];
            for &h in hashes.iter().chain(&absent) {
                let want = model.get(&h).cloned().unwrap_or_default();
                assert_eq!(found(index, conn, h), want, "hash {h:#x} at mark {mark}");
            }
        };
        let open = |path: &std::path::Path| {
            let conn = Connection::open(path).unwrap();
            conn.pragma_update(None, "synchronous", "FULL").unwrap();
            let index = IdIndex::open(&conn).unwrap();
            index.set_transaction_bytes(2048);
            (conn, index)
        };
        // (before the flush's final transaction, before the merge's, after
        // it with rows of merged runs left, after it with none left)
        let mut seen = [0; 4];
        let mut after = 0;
        loop {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db");
            // 1 KiB pages: ~110 entries per part, two per transaction
            let mut conn = db_at(&path, 1024);
            let mut index = IdIndex::open(&conn).unwrap();
            index.set_transaction_bytes(2048);
            for (m, batch) in batches.iter().take(7).enumerate() {
                index.add(batch.iter().copied());
                index.flush(&mut conn, m as u64 + 1).unwrap();
            }
            assert_eq!(index.runs(), 3);
            index.add(batches[7].iter().copied());
            index.seal(8);
            let finished = flush_until_crash(&index.flusher(), &mut conn, after);
            // the crash: nothing in memory is left
            drop(index);
            drop(conn);
            let (mut conn, index) = open(&path);
            check(&index, &conn);
            let dead: i64 = conn
                .query_row("SELECT count(*) FROM id_runs WHERE live = 0", [], |r| {
                    r.get(0)
                })
                .unwrap();
            let state = match (index.mark(), index.runs()) {
                (Some(7), 3) => 0,
                (Some(8), 4) => 1,
                (Some(8), 1) if dead > 0 => 2,
                (Some(8), 1) => 3,
                other => panic!("after {after} transactions: {other:?}"),
            };
            seen[state] += 1;
            if finished {
                assert_eq!(state, 3);
                assert_no_garbage(&conn);
                assert!(after > 25, "the flush took {after} transactions");
                break;
            }
            // the caller re-adds what is after the mark; its flush crashes
            // too (while deleting the garbage, or later), then one finishes
            let mut index = index;
            for round in 0..2 {
                if index.mark() == Some(7) {
                    index.add(batches[7].iter().copied());
                    index.seal(8);
                } else {
                    index.seal(8);
                }
                if round == 0 {
                    flush_until_crash(&index.flusher(), &mut conn, after % 4);
                    drop(index);
                    drop(conn);
                    let reopened = open(&path);
                    (conn, index) = reopened;
                    check(&index, &conn);
                } else {
                    index.flusher().flush(&mut conn).unwrap();
                }
            }
            assert_eq!(index.mark(), Some(8));
            assert_eq!(index.runs(), 1);
            check(&index, &conn);
            check(&IdIndex::open(&conn).unwrap(), &conn);
            assert_no_garbage(&conn);
            after += 1;
        }
        // the last state is the end of the flush, and the lent reads of the
        // merged run's filter after it (a crash there loses nothing: the
        // run is live, and `open` reads its filter)
        assert!(seen[..3].iter().all(|&n| n >= 2), "{seen:?}");
        assert!(seen[3] >= 1, "{seen:?}");
    }

    /// A merge holds the merged runs' filters and, of its new run's, only
    /// the piece being filled (and the pieces queued for a transaction),
    /// never the whole: its filter is read back after the merged runs'
    /// are gone. Every entry is found after it.
    #[test]
    fn a_merge_never_holds_a_second_filter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut conn = db_at(&path, 16384);
        let index = IdIndex::open(&conn).unwrap();
        let mut index = index;
        let mut rng = Rng(11);
        // two runs of 1.5M entries: a merged filter of ~5 MiB (6 pieces)
        let n: u64 = 1_500_000;
        let mut kept = Vec::new();
        for m in 0..2u64 {
            let batch: Vec<(u64, u64)> = (0..n).map(|i| (rng.next(), m * n + i)).collect();
            kept.extend(batch.iter().step_by(997).copied());
            index.add(batch);
            index.seal(m + 1);
            let flusher = index.flusher();
            flusher
                .flush_sealed_with(&mut |work| work(&mut conn))
                .unwrap();
        }
        assert_eq!(index.runs(), 2);
        let before = index.memory_bytes();
        let flusher = index.flusher();
        let mut peak = 0;
        let mut lends = 0;
        let conn_cell = std::cell::RefCell::new(&mut conn);
        flusher
            .merge_with(&mut |work| {
                peak = peak.max(index.memory_bytes());
                lends += 1;
                work(&mut conn_cell.borrow_mut())
            })
            .unwrap();
        let after = index.memory_bytes();
        assert_eq!(index.runs(), 1);
        assert!(lends > 10, "{lends} lent transactions");
        let merged_filter = (2 * n * BITS_PER_ENTRY / 8) as usize;
        // before: the two filters (~5.25 MB) and fences
        assert!(before > merged_filter, "{before} bytes before");
        assert!(
            peak <= before + PIECE_BYTES + TRANSACTION_BYTES + (64 << 10),
            "peak {peak} bytes during the merge, {before} before: a second filter"
        );
        assert!(
            after <= before + (64 << 10),
            "{after} bytes after, {before} before"
        );
        let conn = conn_cell.into_inner();
        for (h, pos) in kept {
            assert!(found(&index, conn, h).contains(&pos), "hash {h:#x}");
        }
        // and a reopened index reads the merged run's filter from disk
        let reopened = IdIndex::open(conn).unwrap();
        let again = reopened.memory_bytes();
        assert!(
            again.abs_diff(after) < 64 << 10,
            "{again} bytes reopened, {after} after"
        );
    }

    fn merge_bound(n: u64, first: u64) -> usize {
        2 * ((n as f64 / first as f64).log2().ceil() as usize) + 2
    }

    #[test]
    fn size_one_million_entries() {
        let (_dir, mut conn) = db();
        let mut index = IdIndex::open(&conn).unwrap();
        let mut rng = Rng(5);
        let n: u64 = 1_000_000;
        let batch: u64 = 65_536;
        let mut max_runs = 0;
        let mut done = 0;
        while done < n {
            let k = batch.min(n - done);
            index.add((done..done + k).map(|i| (rng.next(), i)));
            done += k;
            index.flush(&mut conn, done).unwrap();
            max_runs = max_runs.max(index.runs());
            assert!(index.runs() <= merge_bound(done, batch));
        }
        let q = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        let pages = q("PRAGMA page_count") - q("PRAGMA freelist_count");
        let disk = (pages * q("PRAGMA page_size")) as f64 / n as f64;
        let blobs = q("SELECT sum(length(data)) FROM id_parts") as f64 / n as f64;
        let filter_bits = index.filter_bits_per_entry();
        let memory = index.memory_bytes() as f64 / n as f64;
        // false positives: absent hashes whose filter says maybe, per run
        let probes = 200_000;
        let mut hits = 0;
        for _ in 0..probes {
            hits += index.filter_hits(rng.next());
        }
        let fpr = hits as f64 / (probes * index.runs()) as f64;
        println!(
            "1M entries: {} runs (max {max_runs}), disk {disk:.2} B/entry (part blobs {blobs:.2}), \
             filter {filter_bits:.2} bits/entry, memory {memory:.3} B/entry, \
             filter false positives {:.3}% per run",
            index.runs(),
            fpr * 100.0
        );
        assert!(disk <= 16.0, "{disk} bytes per entry on disk");
        assert!(filter_bits <= 16.0, "{filter_bits} filter bits per entry");
        assert!(fpr < 0.005, "false positive rate {fpr}");
        assert!(max_runs <= merge_bound(n, batch));
    }
}
#[cfg(test)]
mod id_hash_filters {
    use super::*;

    /// Ids as producers make them (a prefix and a counter, of every
    /// length) filed by the engine's `id_hash`: the filters must answer
    /// "maybe" for about 1% of new ones, as for random hashes (with the
    /// engine's word-multiplying hash, 8-byte ids `e1200000`.. got ~11%).
    #[test]
    fn sequential_ids_meet_the_filters_false_positive_rate() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let mut idx = IdIndex::open(&conn).unwrap();
        let h = |i: u64| streamforge_engine::history::id_hash(&format!("e{i}"));
        let pos = |i: u64| ((i / 300_000 + 1) << 24) | (i % 300_000);
        for (mark, range) in [(1, 0..600_000u64), (2, 600_000..1_200_000)] {
            idx.add(range.map(|i| (h(i), pos(i))));
            idx.flush(&mut conn, mark).unwrap();
        }
        let mut out = Vec::new();
        for (what, probe) in [
            (
                "8-byte ids",
                (1_200_000..1_300_000u64).map(h).collect::<Vec<_>>(),
            ),
            (
                "long ids",
                (0..100_000u64)
                    .map(|i| {
                        streamforge_engine::history::id_hash(&format!("order-2026-12-{i:012}"))
                    })
                    .collect(),
            ),
        ] {
            idx.may_contain(&probe, &mut out);
            let rate = out.iter().filter(|b| **b).count() as f64 / probe.len() as f64;
            assert!(rate < 0.02, "{what}: {:.2}% answered maybe", rate * 100.0);
        }
        // and every id filed is found
        idx.may_contain(
            &(0..1_200_000u64).step_by(7).map(h).collect::<Vec<_>>(),
            &mut out,
        );
        assert!(out.iter().all(|b| *b));
    }
}
