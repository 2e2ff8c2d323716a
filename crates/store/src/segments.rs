//! History segments (the window engine's flushed deliveries and late
//! records, `streamforge_engine::history`): immutable runs of canonical
//! envelope text, stored in blocks of [`BLOCK_ITEMS`] items, each block an
//! LZ4 block behind its length, so that one old event is read by
//! decompressing one block and an envelope is assembled block by block.
//!
//! A segment is written by a short transaction of its own before the
//! checkpoint that names it (`checkpoint_lists`, with the chain of
//! `segments.prev`: `super::window`); a segment that no checkpoint names (a
//! crash between the two) is deleted at the next open. Freeing is "delete
//! what nothing points at" (`refs = 0`, kept by triggers; each deletion
//! frees the segment before it in turn:
//! [`Writer::drop_unreferenced_segments`]), without a scan of what is kept.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{Error, Op, Result};
use super::Writer;
use streamforge_engine::checkpoint::chain::{ChunkRec, Hash};
use streamforge_engine::history::{SegId, SegKind};

/// Items per stored block.
pub const BLOCK_ITEMS: u64 = 512;

fn kind_name(kind: SegKind) -> &'static str {
    match kind {
        SegKind::Sources => "sources",
        SegKind::Late => "late",
    }
}

/// The byte ranges of the items of a segment's text (items at depth 0,
/// separated by commas).
pub fn item_ranges(text: &[u8]) -> Result<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut depth = 0u32;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0usize;
    for (i, &b) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| Error::Corrupt("segment text is not a list of items".into()))?
            }
            b',' if depth == 0 => {
                out.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 || in_string {
        return Err(Error::Corrupt("segment text ends inside an item".into()));
    }
    if start < text.len() {
        out.push((start, text.len()));
    }
    Ok(out)
}

fn i64_of(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::Corrupt(format!("{what} {n} is beyond SQLite's integers")))
}

impl Writer {
    /// Stores a segment of `count` items with this canonical text, in a
    /// short transaction of its own that does not wait for the disk (the
    /// checkpoint that names it syncs it; see the module docs). Returns its
    /// id (never reused).
    pub fn put_segment(&mut self, kind: SegKind, count: u64, text: &[u8]) -> Result<SegId> {
        self.put_segment_as(kind, count, text, &[], &[], false)
    }

    /// [`Writer::put_segment`] for a restore in progress (`staged`): until
    /// the restore is done ([`Writer::end_staging`]) nothing but a restart
    /// frees it, even while no checkpoint names it.
    /// `ends`: where each item ends, if known (else the text is scanned);
    /// `chunks`: the full chunks of its array its items complete, stored
    /// with it.
    pub fn put_segment_as(
        &mut self,
        kind: SegKind,
        count: u64,
        text: &[u8],
        ends: &[u32],
        chunks: &[ChunkRec],
        staged: bool,
    ) -> Result<SegId> {
        let items = if ends.is_empty() {
            item_ranges(text)?
        } else {
            let mut start = 0usize;
            let mut v = Vec::with_capacity(ends.len());
            for &e in ends {
                let e = e as usize;
                if e < start || e > text.len() {
                    return Err(Error::Corrupt("segment item ends out of order".into()));
                }
                v.push((start, e));
                start = e + 1;
            }
            v
        };
        if items.len() as u64 != count {
            return Err(Error::Corrupt(format!(
                "a segment of {count} items has {} in its text",
                items.len()
            )));
        }
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .op("PRAGMA synchronous = NORMAL (segment)")?;
        let stored = self.insert_segment(kind, count, text, &items, chunks, staged);
        let reset = self
            .conn
            .pragma_update(None, "synchronous", super::SYNCHRONOUS)
            .op("PRAGMA synchronous (after segment)");
        let id = stored?;
        reset?;
        Ok(id)
    }

    fn insert_segment(
        &mut self,
        kind: SegKind,
        count: u64,
        text: &[u8],
        items: &[(usize, usize)],
        chunks: &[ChunkRec],
        staged: bool,
    ) -> Result<SegId> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (segment)")?;
        tx.execute(
            "INSERT INTO segments (kind, count, bytes, staged) VALUES (?1, ?2, ?3, ?4)",
            params![
                kind_name(kind),
                i64_of(count, "segment count")?,
                i64_of(text.len() as u64, "segment bytes")?,
                staged
            ],
        )
        .op("INSERT segments")?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT INTO segment_blocks (segment, block, data, sum) VALUES (?1, ?2, ?3, ?4)",
                )
                .op("prepare INSERT segment_blocks")?;
            for (b, chunk) in items.chunks(BLOCK_ITEMS as usize).enumerate() {
                let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
                    continue;
                };
                let raw = &text[first.0..last.1];
                let z = lz4_flex::block::compress_prepend_size(raw);
                st.execute(params![id, b as i64, z, block_sum(&z)])
                    .op("INSERT segment_blocks")?;
            }
        }
        insert_chunks(&tx, id, chunks)?;
        tx.commit().op("COMMIT (segment)")?;
        u64::try_from(id).map_err(|_| Error::Corrupt(format!("segment id {id}")))
    }

    /// Deletes the segments no checkpoint names (at open: crash leftovers,
    /// a restore's included). Returns how many.
    pub fn drop_unreferenced_segments(&mut self) -> Result<u64> {
        free_segments(&self.conn, Free::All)
    }

    /// A restore is over: its staged segments no checkpoint names go, the
    /// others are ordinary segments from now on.
    pub fn end_staging(&mut self) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (end staging)")?;
        free_segments(&tx, Free::Staged)?;
        tx.execute("UPDATE segments SET staged = 0 WHERE staged = 1", [])
            .op("UPDATE segments (staged)")?;
        tx.commit().op("COMMIT (end staging)")
    }
}

/// Which free segments [`free_segments`] deletes.
#[derive(Clone, Copy)]
enum Free {
    /// Every one (at open: no restore is in progress).
    All,
    /// All but a restore's staged ones.
    Unstaged,
    /// Only a restore's staged ones.
    Staged,
}

/// Deletes the segments nothing points at (`refs = 0`: no checkpoint's
/// list ends with one, no segment follows it; migration 0014) of the
/// `which` kind, and then those that frees, until none is left. Returns
/// how many.
fn free_segments(conn: &Connection, which: Free) -> Result<u64> {
    let sql = match which {
        Free::All => "DELETE FROM segments WHERE refs = 0",
        Free::Unstaged => "DELETE FROM segments WHERE refs = 0 AND staged = 0",
        Free::Staged => "DELETE FROM segments WHERE refs = 0 AND staged = 1",
    };
    let mut st = conn
        .prepare_cached(sql)
        .op("prepare DELETE free segments")?;
    let mut total = 0u64;
    loop {
        let n = st.execute([]).op("DELETE free segments")?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

/// Deletes the segments no checkpoint names, except a restore's in
/// progress (inside a caller's transaction).
pub(super) fn drop_unreferenced(conn: &Connection) -> Result<u64> {
    free_segments(conn, Free::Unstaged)
}

/// The checksum a block is stored with: the 64-bit checksum of its bytes
/// as stored (as SQLite's integer: the same bits).
pub(super) fn block_sum(z: &[u8]) -> i64 {
    streamforge_ids::checksum64(z) as i64
}

/// Stores the chunk records of segment `id` (inside the caller's
/// transaction); a record already there is left as it is.
pub(super) fn insert_chunks(conn: &Connection, id: i64, chunks: &[ChunkRec]) -> Result<()> {
    if chunks.is_empty() {
        return Ok(());
    }
    let mut st = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO segment_chunks (segment, chunk, leaf, chain) VALUES (?1, ?2, ?3, ?4)",
        )
        .op("prepare INSERT segment_chunks")?;
    for c in chunks {
        st.execute(params![
            id,
            i64_of(c.index, "chunk")?,
            &c.leaf[..],
            &c.chain[..]
        ])
        .op("INSERT segment_chunks")?;
    }
    Ok(())
}

fn hash_of(v: Vec<u8>, seg: SegId) -> Result<Hash> {
    v.try_into()
        .map_err(|_| Error::Corrupt(format!("segment {seg}: a chunk record is not 32 bytes")))
}

/// The chunk records stored with segment `seg`, by chunk number.
pub fn segment_chunks(conn: &Connection, seg: SegId) -> Result<Vec<ChunkRec>> {
    let mut st = conn
        .prepare_cached(
            "SELECT chunk, leaf, chain FROM segment_chunks WHERE segment = ?1 ORDER BY chunk",
        )
        .op("prepare SELECT segment_chunks")?;
    let rows = st
        .query_map([i64_of(seg, "segment")?], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ))
        })
        .op("SELECT segment_chunks")?;
    let mut out = Vec::new();
    for row in rows {
        let (index, leaf, chain) = row.op("SELECT segment_chunks (row)")?;
        out.push(ChunkRec {
            index: index.max(0) as u64,
            leaf: hash_of(leaf, seg)?,
            chain: hash_of(chain, seg)?,
        });
    }
    Ok(out)
}

/// The record of chunk `index` stored with segment `seg`.
pub fn segment_chunk(conn: &Connection, seg: SegId, index: u64) -> Result<Option<ChunkRec>> {
    let row: Option<(Vec<u8>, Vec<u8>)> = conn
        .prepare_cached("SELECT leaf, chain FROM segment_chunks WHERE segment = ?1 AND chunk = ?2")
        .op("prepare SELECT segment_chunks (one)")?
        .query_row(
            params![i64_of(seg, "segment")?, i64_of(index, "chunk")?],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .op("SELECT segment_chunks (one)")?;
    row.map(|(leaf, chain)| {
        Ok(ChunkRec {
            index,
            leaf: hash_of(leaf, seg)?,
            chain: hash_of(chain, seg)?,
        })
    })
    .transpose()
}

/// A stored block's bytes, once its checksum matches (`sum` NULL: a block
/// stored before checksums, which the upgrade at open gives one).
fn checked(seg: SegId, block: u64, z: &[u8], sum: Option<i64>) -> Result<&[u8]> {
    match sum {
        Some(sum) if block_sum(z) == sum => Ok(z),
        Some(_) => Err(Error::Corrupt(format!(
            "segment {seg} block {block}: checksum mismatch (the stored history is damaged)"
        ))),
        None => Err(Error::Corrupt(format!(
            "segment {seg} block {block}: no checksum"
        ))),
    }
}

fn unpack(seg: SegId, block: u64, z: &[u8]) -> Result<Vec<u8>> {
    let corrupt = |why: String| Error::Corrupt(format!("segment {seg} block {block}: {why}"));
    let (len, body) = z
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("shorter than its length".into()))?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > body.len().saturating_mul(255).saturating_add(16) {
        return Err(corrupt("claims an impossible length".into()));
    }
    let out = lz4_flex::block::decompress(body, len).map_err(|e| corrupt(e.to_string()))?;
    if out.len() != len {
        return Err(corrupt("decompresses to another length".into()));
    }
    Ok(out)
}

/// The text of block `block` of segment `seg` (its items separated by
/// commas), or `None` when there is no such block.
pub fn block_text(conn: &Connection, seg: SegId, block: u64) -> Result<Option<Vec<u8>>> {
    let z: Option<(Vec<u8>, Option<i64>)> = conn
        .prepare_cached("SELECT data, sum FROM segment_blocks WHERE segment = ?1 AND block = ?2")
        .op("prepare SELECT segment_blocks")?
        .query_row(
            params![i64_of(seg, "segment")?, i64_of(block, "block")?],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .op("SELECT segment_blocks")?;
    z.map(|(z, sum)| unpack(seg, block, checked(seg, block, &z, sum)?))
        .transpose()
}

/// Calls `f` with the text of each block of segment `seg`, in order.
pub fn for_each_block(
    conn: &Connection,
    seg: SegId,
    mut f: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let mut st = conn
        .prepare_cached(
            "SELECT block, data, sum FROM segment_blocks WHERE segment = ?1 ORDER BY block",
        )
        .op("prepare SELECT segment_blocks (all)")?;
    let mut rows = st
        .query([i64_of(seg, "segment")?])
        .op("SELECT segment_blocks (all)")?;
    let mut expect = 0i64;
    while let Some(r) = rows.next().op("SELECT segment_blocks (row)")? {
        let block: i64 = r.get(0).op("segment_blocks.block")?;
        if block != expect {
            return Err(Error::Corrupt(format!(
                "segment {seg}: block {expect} is missing"
            )));
        }
        expect += 1;
        let z = r
            .get_ref(1)
            .and_then(|v| v.as_blob().map_err(Into::into))
            .op("segment_blocks.data")?;
        let sum: Option<i64> = r.get(2).op("segment_blocks.sum")?;
        let block = block as u64;
        f(&unpack(seg, block, checked(seg, block, z, sum)?)?)?;
    }
    Ok(())
}

/// Appends segment `seg`'s whole text (its blocks joined by commas).
pub fn segment_text(conn: &Connection, seg: SegId, out: &mut Vec<u8>) -> Result<()> {
    let mut first = true;
    for_each_block(conn, seg, |text| {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(text);
        Ok(())
    })
}

/// A segment's kind, number of items and text length.
pub fn segment_meta(conn: &Connection, seg: SegId) -> Result<Option<(SegKind, u64, u64)>> {
    let row: Option<(String, i64, i64)> = conn
        .prepare_cached("SELECT kind, count, bytes FROM segments WHERE id = ?1")
        .op("prepare SELECT segments")?
        .query_row([i64_of(seg, "segment")?], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
        .op("SELECT segments")?;
    row.map(|(k, c, b)| {
        let kind = match k.as_str() {
            "sources" => SegKind::Sources,
            "late" => SegKind::Late,
            other => return Err(Error::Corrupt(format!("segment {seg}: kind {other:?}"))),
        };
        Ok((kind, c.max(0) as u64, b.max(0) as u64))
    })
    .transpose()
}

/// Deletes hidden checkpoints that are no longer a recovery base, then the
/// segments no checkpoint names (inside the caller's transaction).
pub(super) fn collect(conn: &Connection) -> Result<()> {
    conn.execute(
        "DELETE FROM checkpoints WHERE origin = 'hidden' AND id NOT IN
           (SELECT checkpoint_id FROM recovery_bases WHERE checkpoint_id IS NOT NULL)",
        [],
    )
    .op("DELETE hidden checkpoints")?;
    drop_unreferenced(conn)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_split_at_top_level_commas_only() {
        let t = br#"["a,b","k",1,2],["c\"],[","",3,4]"#;
        let r = item_ranges(t).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(&t[r[1].0..r[1].1], br#"["c\"],[","",3,4]"#);
        assert!(item_ranges(b"[1").is_err());
        assert!(item_ranges(b"]").is_err());
        assert_eq!(item_ranges(b"").unwrap(), vec![]);
    }

    #[test]
    fn segments_round_trip_in_blocks_and_unreferenced_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut w = Writer::open(&db).unwrap();
        let n = BLOCK_ITEMS * 2 + 7;
        let mut text = Vec::new();
        for i in 0..n {
            if i > 0 {
                text.push(b',');
            }
            streamforge_engine::segment::write_event(
                &mut text,
                &format!("e{i}"),
                "k,]",
                i as i64,
                -1,
            );
        }
        let id = w.put_segment(SegKind::Sources, n, &text).unwrap();
        let mut back = Vec::new();
        segment_text(&w.conn, id, &mut back).unwrap();
        assert_eq!(back, text);
        let b2 = block_text(&w.conn, id, 2).unwrap().unwrap();
        assert_eq!(item_ranges(&b2).unwrap().len(), 7);
        assert!(block_text(&w.conn, id, 3).unwrap().is_none());
        assert_eq!(
            segment_meta(&w.conn, id).unwrap(),
            Some((SegKind::Sources, n, text.len() as u64))
        );
        assert!(w.put_segment(SegKind::Late, 2, b"[1]").is_err());
        // nothing names it: it goes, blocks and all
        assert_eq!(w.drop_unreferenced_segments().unwrap(), 1);
        assert!(block_text(&w.conn, id, 0).unwrap().is_none());
        // ids are never reused
        let again = w
            .put_segment(SegKind::Sources, 1, b"[\"x\",\"\",1,1]")
            .unwrap();
        assert!(again > id);
    }

    #[test]
    fn a_flipped_byte_in_a_block_is_an_error_naming_the_segment_and_chunks_are_kept() {
        use streamforge_engine::checkpoint::chain::{Chain, CHUNK};
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::open(&dir.path().join("db")).unwrap();
        let n = CHUNK + 700;
        let mut text = Vec::new();
        let mut chain = Chain::new();
        let mut chunks = Vec::new();
        for i in 0..n {
            if i > 0 {
                text.push(b',');
            }
            let at = text.len();
            streamforge_engine::segment::write_event(&mut text, &format!("e{i}"), "k", 1, 2);
            chunks.extend(chain.push(&text[at..]));
        }
        let id = w
            .put_segment_as(SegKind::Sources, n, &text, &[], &chunks, false)
            .unwrap();
        assert_eq!(segment_chunks(&w.conn, id).unwrap(), chunks);
        assert_eq!(
            segment_chunk(&w.conn, id, 0).unwrap(),
            chunks.first().copied()
        );
        assert_eq!(segment_chunk(&w.conn, id, 1).unwrap(), None);
        // every byte of a stored block, flipped in turn: never read as text
        let stored: Vec<u8> = w
            .conn
            .query_row(
                "SELECT data FROM segment_blocks WHERE segment = ?1 AND block = 3",
                [id as i64],
                |r| r.get(0),
            )
            .unwrap();
        for at in (0..stored.len()).step_by(97).chain([stored.len() - 1]) {
            let mut bad = stored.clone();
            bad[at] ^= 0x10;
            w.conn
                .execute(
                    "UPDATE segment_blocks SET data = ?2 WHERE segment = ?1 AND block = 3",
                    params![id as i64, bad],
                )
                .unwrap();
            let want = format!("segment {id} block 3: checksum mismatch");
            let e = block_text(&w.conn, id, 3).unwrap_err().to_string();
            assert!(e.contains(&want), "{e}");
            let e = segment_text(&w.conn, id, &mut Vec::new())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&want), "{e}");
            // the blocks before it are read, the damaged one is not
            let mut read = 0;
            let e = for_each_block(&w.conn, id, |_| {
                read += 1;
                Ok(())
            });
            assert!(e.is_err() && read == 3);
        }
        w.conn
            .execute(
                "UPDATE segment_blocks SET data = ?2 WHERE segment = ?1 AND block = 3",
                params![id as i64, stored],
            )
            .unwrap();
        let mut back = Vec::new();
        segment_text(&w.conn, id, &mut back).unwrap();
        assert_eq!(back, text);
        // the segment's chunk records go with it
        w.drop_unreferenced_segments().unwrap();
        assert!(segment_chunks(&w.conn, id).unwrap().is_empty());
    }
}

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

/// Decoded blocks, the most recently used few.
#[derive(Default)]
struct BlockCache {
    blocks: Vec<(BlockKey, std::sync::Arc<Vec<u8>>)>,
}

/// Decoded blocks kept (about 20 KB each).
const CACHED_BLOCKS: usize = 32;

impl BlockCache {
    fn get(&mut self, key: (SegId, u64)) -> Option<std::sync::Arc<Vec<u8>>> {
        let i = self.blocks.iter().position(|(k, _)| *k == key)?;
        let hit = self.blocks.remove(i);
        let text = hit.1.clone();
        self.blocks.push(hit);
        Some(text)
    }

    fn put(&mut self, key: (SegId, u64), text: std::sync::Arc<Vec<u8>>) {
        if self.blocks.len() >= CACHED_BLOCKS {
            self.blocks.remove(0);
        }
        self.blocks.push((key, text));
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
        let conn = Connection::open_with_flags(
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
                    let hash = match streamforge_engine::segment::item_id(item) {
                        Some(id) => streamforge_engine::history::id_hash_bytes(id),
                        None => {
                            let e = streamforge_engine::segment::parse_event(item)
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

    fn block(&self, seg: SegId, block: u64) -> Result<std::sync::Arc<Vec<u8>>> {
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get((seg, block))
        {
            return Ok(hit);
        }
        let text = block_text(&self.reader(), seg, block)?
            .ok_or_else(|| Error::Corrupt(format!("segment {seg} has no block {block}")))?;
        let text = std::sync::Arc::new(text);
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put((seg, block), text.clone());
        Ok(text)
    }

    fn item(&self, seg: SegId, index: u64) -> Result<Vec<u8>> {
        let text = self.block(seg, index / BLOCK_ITEMS)?;
        streamforge_engine::segment::item(&text, index % BLOCK_ITEMS)
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
        streamforge_engine::segment::parse_event(&item)
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
        streamforge_engine::segment::parse_late(&item)
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
            for item in streamforge_engine::segment::items(&text).skip(skip as usize) {
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
