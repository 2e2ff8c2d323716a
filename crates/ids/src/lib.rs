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
//!   page (~470 entries with the service's 4 KiB pages, ~1,900 with 16 KiB).
//!   Memory keeps the first hash of each part (the fences) and the run's
//!   blocked Bloom filter, which is
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
//!    2 MiB: 512 parts with 4 KiB pages; at least one part or piece). For
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
//! Measured (crates/ids/benches/ids.rs, 10M entries, 2 MiB transactions,
//! 16 KiB pages): a lent transaction takes ~3 ms; the longest (~30-47 ms) are
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
//! sorted layout; runs written before it pick by its `hash::mix`, a flag in
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
//!
//! # Files
//! - The two sides: `index.rs` ([`IdIndex`]: open, add, lookup, seal) and
//!   `flusher.rs` ([`IdFlusher`]: flushes, merges, cleanups), over the state
//!   they share (`shared.rs`) and the memtable (`memtable.rs`).
//! - Writing runs: `txn.rs` (the lent transactions, [`Lend`]), `merge.rs`
//!   (where a new run's entries come from, and the loop that stores them),
//!   `writer.rs` (a new run's parts, filter pieces and row).
//! - Reading runs: `run.rs` (fences, filters, parts read from disk).
//! - Encodings: `part.rs` (a part's layout), `rice.rs` (bits, varints,
//!   Rice codes), `filter.rs` (the Bloom filter), `checksum.rs`,
//!   `hash.rs`, `row_ids.rs` (row keys, run ids), `schema.rs` ([`SCHEMA`]).
//! - `error.rs`; the tests in `tests/`; the bench in
//!   `crates/ids/benches/ids.rs`.

mod checksum;
mod error;
mod filter;
mod flusher;
mod hash;
mod index;
mod memtable;
mod merge;
mod part;
mod rice;
mod row_ids;
mod run;
mod schema;
mod shared;
mod txn;
mod writer;

#[cfg(test)]
mod tests;

pub use checksum::checksum64;
pub use error::{Error, Result};
pub use flusher::IdFlusher;
pub use index::IdIndex;
pub use schema::SCHEMA;
pub use txn::{Lend, TRANSACTION_BYTES};
