//! The flushed history as the window engine reads it: [`HistoryDb`], the
//! engine's `HistoryStore` over the segments (`super::segments`) and the id
//! index (`streamforge-ids`).

use rusqlite::Connection;

use super::error::{Error, Op, Result};
use super::segments::{
    block_text, for_each_block, i64_of, item_ranges, segment_chunk, segment_text, BLOCK_ITEMS,
};
use super::Writer;
use streamforge_engine::checkpoint::chain::ChunkRec;
use streamforge_engine::history::SegId;

/// The flushed history as the window engine reads it (its
/// [`streamforge_engine::history::HistoryStore`], implemented over this
/// database): a reading connection of its own for segment blocks and the
/// id index's parts, the id index (filters and memtable in memory), and a
/// few decoded blocks.
pub struct HistoryDb {
    reader: std::sync::Mutex<Connection>,
    ids: std::sync::Mutex<streamforge_ids::IdIndex>,
    flusher: streamforge_ids::IdFlusher,
    cache: std::sync::Mutex<BlockCache>,
    /// The newest segment whose ids were added.
    last: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for HistoryDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryDb")
    }
}

/// A block: its segment and number.
type BlockKey = (SegId, u64);

/// A decoded block, with where each of its items is.
///
/// Finding item `i` in a block's text walks every byte of the items before
/// it (up to 511 of them, about 20 KB). Webhook producers resend events
/// seconds later, so consecutive duplicates mostly find their events in the
/// same few blocks: with half the single-event requests such retries, that
/// walk was 17% of the server's CPU (BENCHMARKS.md, "Issue 35, eleventh
/// pass"). So the first lookup in a cached block finds all its items in
/// one pass, and later ones are a slice. The lookup that loads a block
/// walks as before: a block read once costs no more than it did.
struct Block {
    text: Vec<u8>,
    /// Each item's byte range (found at the block's first reuse), or
    /// `None` for a text that is not a list of items (a checked block
    /// always is; such a text is walked at every lookup).
    items: std::sync::OnceLock<Option<Vec<(usize, usize)>>>,
}

impl Block {
    fn new(text: Vec<u8>) -> Block {
        Block {
            text,
            items: std::sync::OnceLock::new(),
        }
    }

    /// Item `index` of the block; `reused`: the block came from the cache
    /// (its items are worth finding all at once).
    fn item(&self, index: u64, reused: bool) -> Option<&[u8]> {
        let items = if reused {
            self.items.get_or_init(|| item_ranges(&self.text).ok())
        } else {
            self.items.get().unwrap_or(&None)
        };
        match items {
            Some(items) => {
                let &(a, b) = items.get(usize::try_from(index).ok()?)?;
                self.text.get(a..b)
            }
            None => streamforge_engine::segment_text::item(&self.text, index),
        }
    }
}

/// Decoded blocks, the most recently used few.
#[derive(Default)]
struct BlockCache {
    blocks: Vec<(BlockKey, std::sync::Arc<Block>)>,
}

/// Decoded blocks kept (about 20 KB each, and 8 KB of item ranges).
const CACHED_BLOCKS: usize = 32;

impl BlockCache {
    fn get(&mut self, key: (SegId, u64)) -> Option<std::sync::Arc<Block>> {
        let i = self.blocks.iter().position(|(k, _)| *k == key)?;
        let hit = self.blocks.remove(i);
        let block = hit.1.clone();
        self.blocks.push(hit);
        Some(block)
    }

    fn put(&mut self, key: (SegId, u64), block: std::sync::Arc<Block>) {
        if self.blocks.len() >= CACHED_BLOCKS {
            self.blocks.remove(0);
        }
        self.blocks.push((key, block));
    }
}

/// The id index's [`streamforge_ids::Lend`] over the service's writer:
/// `with_writer(f)` locks it, runs `f`, unlocks. The index's errors become
/// the store's inside, the store's come back out unchanged (the
/// `Error::from_ids` of `error.rs`).
#[allow(clippy::type_complexity)]
fn lend_writer<'a>(
    with_writer: &'a mut dyn FnMut(&mut dyn FnMut(&mut Writer) -> Result<()>) -> Result<()>,
) -> impl FnMut(
    &mut dyn FnMut(&mut Connection) -> streamforge_ids::Result<()>,
) -> streamforge_ids::Result<()>
       + 'a {
    move |work| {
        with_writer(&mut |w: &mut Writer| w.lend(&mut |conn| work(conn).map_err(Error::from_ids)))
            .map_err(|e| streamforge_ids::Error::Lender(Box::new(e)))
    }
}

fn fault(e: Error) -> streamforge_engine::history::StoreFault {
    streamforge_engine::history::StoreFault(e.to_string())
}

impl HistoryDb {
    /// Opens the history of the database at `path` (which a [`Writer`]
    /// has opened and migrated, and whose unreferenced segments it has
    /// dropped): the id index, and the ids of the sources segments it has
    /// not stored yet (those after its mark), added back from the segments.
    pub fn open(path: &std::path::Path) -> Result<HistoryDb> {
        let conn = super::open_conn(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .op("open database (history)")?;
        super::pragmas(&conn)?;
        conn.pragma_update(None, "query_only", "ON")
            .op("PRAGMA query_only (history)")?;
        // Durations for the log only.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let mut ids = streamforge_ids::IdIndex::open(&conn).map_err(Error::from_ids)?;
        let loaded = started.elapsed();
        let mark = ids.mark().unwrap_or(0);
        let mut added_back = 0usize;
        let after: Vec<i64> = {
            let mut st = conn
                .prepare("SELECT id FROM segments WHERE kind = 'sources' AND id > ?1 ORDER BY id")
                .op("prepare SELECT segments (unindexed)")?;
            let rows = st
                .query_map([i64_of(mark, "mark")?], |r| r.get(0))
                .op("SELECT segments (unindexed)")?;
            rows.collect::<std::result::Result<_, _>>()
                .op("SELECT segments (unindexed, row)")?
        };
        let mut last = mark;
        for seg in after {
            let seg = seg as SegId;
            last = last.max(seg);
            let mut entries = Vec::new();
            let mut index = 0u64;
            for_each_block(&conn, seg, |text| {
                for (a, b) in item_ranges(text)? {
                    let item = &text[a..b];
                    // Most ids have no escapes: hashed from the item's bytes.
                    let hash = match streamforge_engine::segment_text::item_id(item) {
                        Some(id) => streamforge_engine::history::id_hash_bytes(id),
                        None => {
                            let e = streamforge_engine::segment_text::parse_event(item)
                                .map_err(|m| Error::Corrupt(format!("segment {seg}: {m}")))?;
                            streamforge_engine::history::id_hash(&e.id)
                        }
                    };
                    let pos =
                        streamforge_engine::history::Pos::new(seg, index).ok_or_else(|| {
                            Error::Corrupt(format!("segment {seg} item {index} out of range"))
                        })?;
                    entries.push((hash, pos.0));
                    index += 1;
                }
                Ok(())
            })?;
            added_back += entries.len();
            ids.add(entries);
        }
        tracing::info!(
            load_ms = loaded.as_millis() as u64,
            added_back,
            add_back_ms = (started.elapsed() - loaded).as_millis() as u64,
            "id index opened"
        );
        let flusher = ids.flusher();
        Ok(HistoryDb {
            reader: std::sync::Mutex::new(conn),
            ids: std::sync::Mutex::new(ids),
            flusher,
            cache: std::sync::Mutex::new(BlockCache::default()),
            last: std::sync::atomic::AtomicU64::new(last),
        })
    }

    fn reader(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, streamforge_ids::IdIndex> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Files the ids stored segments introduce (`(id_hash, index)` per
    /// segment): lookups see them at once; [`HistoryDb::flush_ids`] makes
    /// them durable.
    pub fn add_ids(&self, segments: &[(SegId, &[(u64, u64)])]) -> Result<()> {
        let mut entries = Vec::new();
        let mut last = 0;
        for (seg, ids) in segments {
            last = last.max(*seg);
            for &(h, i) in ids.iter() {
                let pos = streamforge_engine::history::Pos::new(*seg, i).ok_or_else(|| {
                    Error::Corrupt(format!("segment {seg} item {i} out of range"))
                })?;
                entries.push((h, pos.0));
            }
        }
        self.ids().add(entries);
        // Only now: a mark never covers a segment whose ids are not in.
        self.last
            .fetch_max(last, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Entries of the id index not yet stored.
    pub fn unflushed_ids(&self) -> u64 {
        self.ids().unflushed()
    }

    /// Memory the id index holds (filters, fences, memtables).
    pub fn ids_memory(&self) -> usize {
        self.ids().memory_bytes()
    }

    /// Stores the id index's memtable with `mark` (every sources segment up
    /// to it is indexed), with the writer for one short transaction at a
    /// time: `with_writer(f)` locks the service's writer, runs `f`, unlocks
    /// (see [`streamforge_ids::IdFlusher::flush_sealed_with`]). No merge: see
    /// [`HistoryDb::merge_ids`] (another thread may run one meanwhile).
    #[allow(clippy::type_complexity)]
    pub fn flush_ids(
        &self,
        mark: SegId,
        with_writer: &mut dyn FnMut(&mut dyn FnMut(&mut Writer) -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        self.ids().seal(mark);
        let mut lend = lend_writer(with_writer);
        self.flusher
            .flush_sealed_with(&mut lend)
            .map_err(Error::from_ids)
    }

    /// Whether the id index has runs to merge ([`HistoryDb::merge_ids`]).
    pub fn ids_merge_due(&self) -> bool {
        self.flusher.merge_due()
    }

    /// Merges the id index's runs (see [`streamforge_ids::IdFlusher::merge_with`]),
    /// lending the writer as [`HistoryDb::flush_ids`] does; flushes on
    /// other threads go on between its transactions.
    #[allow(clippy::type_complexity)]
    pub fn merge_ids(
        &self,
        with_writer: &mut dyn FnMut(&mut dyn FnMut(&mut Writer) -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        let mut lend = lend_writer(with_writer);
        self.flusher.merge_with(&mut lend).map_err(Error::from_ids)
    }

    /// Entries of the id index's runs being merged (0: no merge).
    pub fn ids_merging(&self) -> u64 {
        self.flusher.merging_entries()
    }

    /// Runs of the id index (each costs a filter probe per new id).
    pub fn id_runs(&self) -> usize {
        self.ids().runs()
    }

    /// The newest segment whose ids were added (the mark that covers
    /// everything added so far).
    pub fn last_segment(&self) -> SegId {
        self.last.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Block `block` of segment `seg`, and whether it came from the cache.
    fn block(&self, seg: SegId, block: u64) -> Result<(std::sync::Arc<Block>, bool)> {
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get((seg, block))
        {
            return Ok((hit, true));
        }
        let text = block_text(&self.reader(), seg, block)?
            .ok_or_else(|| Error::Corrupt(format!("segment {seg} has no block {block}")))?;
        let decoded = std::sync::Arc::new(Block::new(text));
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put((seg, block), decoded.clone());
        Ok((decoded, false))
    }

    fn item(&self, seg: SegId, index: u64) -> Result<Vec<u8>> {
        let (block, reused) = self.block(seg, index / BLOCK_ITEMS)?;
        block
            .item(index % BLOCK_ITEMS, reused)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Error::Corrupt(format!("segment {seg} has no item {index}")))
    }
}

impl streamforge_engine::history::HistoryStore for HistoryDb {
    fn maybe_known(&self, hashes: &[u64], out: &mut Vec<bool>) {
        self.ids().may_contain(hashes, out);
    }

    fn candidates(
        &self,
        hash: u64,
        out: &mut Vec<streamforge_engine::history::Pos>,
    ) -> std::result::Result<(), streamforge_engine::history::StoreFault> {
        let mut raw = Vec::new();
        {
            let conn = self.reader();
            self.ids()
                .lookup(&conn, hash, &mut raw)
                .map_err(|e| fault(Error::from_ids(e)))?;
        }
        out.extend(raw.into_iter().map(streamforge_engine::history::Pos));
        Ok(())
    }

    fn event(
        &self,
        seg: SegId,
        index: u64,
    ) -> std::result::Result<streamforge_engine::Event, streamforge_engine::history::StoreFault>
    {
        let item = self.item(seg, index).map_err(fault)?;
        streamforge_engine::segment_text::parse_event(&item)
            .map_err(streamforge_engine::history::StoreFault)
    }

    fn late(
        &self,
        seg: SegId,
        index: u64,
    ) -> std::result::Result<
        (streamforge_engine::Event, i64),
        streamforge_engine::history::StoreFault,
    > {
        let item = self.item(seg, index).map_err(fault)?;
        streamforge_engine::segment_text::parse_late(&item)
            .map_err(streamforge_engine::history::StoreFault)
    }

    fn text(
        &self,
        seg: SegId,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), streamforge_engine::history::StoreFault> {
        segment_text(&self.reader(), seg, out).map_err(fault)
    }

    fn items_from(
        &self,
        seg: SegId,
        from: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> std::result::Result<(), streamforge_engine::history::StoreFault> {
        let mut block = from / BLOCK_ITEMS;
        let mut skip = from % BLOCK_ITEMS;
        let conn = self.reader();
        while let Some(text) = block_text(&conn, seg, block).map_err(fault)? {
            for item in streamforge_engine::segment_text::items(&text).skip(skip as usize) {
                each(item);
            }
            skip = 0;
            block += 1;
        }
        Ok(())
    }

    fn chunk(
        &self,
        seg: SegId,
        index: u64,
    ) -> std::result::Result<Option<ChunkRec>, streamforge_engine::history::StoreFault> {
        segment_chunk(&self.reader(), seg, index).map_err(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::Block;
    use streamforge_engine::segment_text::item;

    #[test]
    fn a_blocks_items_are_the_items_a_walk_finds() {
        // strings holding commas, brackets, escaped quotes and backslashes
        let text = br#"["a",1],["b,c",2],["[d]",3],["q\"u,o\\",4],[["n",[5]],6],["",7]"#;
        let b = Block::new(text.to_vec());
        // a fresh block is walked; its first reuse finds every item
        assert_eq!(b.item(3, false), item(text, 3));
        assert!(b.items.get().is_none());
        for i in 0..8 {
            assert_eq!(b.item(i, true), item(text, i), "item {i}");
            assert_eq!(b.item(i, false), item(text, i), "item {i}");
        }
        assert!(matches!(b.items.get(), Some(Some(_))));
        assert_eq!(b.item(5, true), Some(&br#"["",7]"#[..]));
        assert_eq!(b.item(6, true), None);
        assert_eq!(Block::new(Vec::new()).item(0, true), None);
    }

    #[test]
    fn a_text_that_is_no_list_of_items_is_walked_as_before() {
        // a string left open: no ranges, and each lookup walks the text
        let text = br#"["a",1],["b"#;
        let b = Block::new(text.to_vec());
        for i in 0..3 {
            assert_eq!(b.item(i, true), item(text, i), "item {i}");
        }
        assert!(matches!(b.items.get(), Some(None)));
        assert_eq!(b.item(0, true), Some(&br#"["a",1]"#[..]));
    }
}
