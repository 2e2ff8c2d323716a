//! History segments (the window engine's flushed deliveries and late
//! records, `streamforge_engine::history`): immutable runs of canonical
//! envelope text, stored in blocks of [`BLOCK_ITEMS`] items, each block an
//! LZ4 block behind its length, so that one old event is read by
//! decompressing one block and an envelope is assembled block by block.
//!
//! A segment is written by a short transaction of its own before the
//! checkpoint that names it (`checkpoint_lists`, with the chain of
//! `segments.prev`: `super::window_checkpoints`); a segment that no
//! checkpoint names (a crash between the two) is deleted at the next open.
//! Freeing is "delete what nothing points at" (`refs = 0`, kept by triggers; each deletion
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
/// separated by commas: the engine's reading of it).
pub fn item_ranges(text: &[u8]) -> Result<Vec<(usize, usize)>> {
    streamforge_engine::segment_text::item_ranges(text)
        .ok_or_else(|| Error::Corrupt("segment text is not a list of items".into()))
}

pub(super) fn i64_of(n: u64, what: &str) -> Result<i64> {
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
            streamforge_engine::segment_text::write_event(
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
            streamforge_engine::segment_text::write_event(&mut text, &format!("e{i}"), "k", 1, 2);
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
