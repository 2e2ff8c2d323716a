//! History segments (the window engine's flushed deliveries and late
//! records, `crate::engine::history`): immutable runs of canonical
//! envelope text, stored in blocks of [`BLOCK_ITEMS`] items, each block an
//! LZ4 block behind its length, so that one old event is read by
//! decompressing one block and an envelope is assembled block by block.
//!
//! A segment is written by a short transaction of its own before the
//! checkpoint that names it (`checkpoint_segments`); a segment that no
//! checkpoint names (a crash between the two) is deleted at the next open.
//! A referenced segment cannot be deleted (foreign key), so freeing is
//! "delete what no checkpoint names" ([`Writer::drop_unreferenced_segments`]).

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{Error, Op, Result};
use super::Writer;
use crate::engine::history::{SegId, SegKind};

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
        let items = item_ranges(text)?;
        if items.len() as u64 != count {
            return Err(Error::Corrupt(format!(
                "a segment of {count} items has {} in its text",
                items.len()
            )));
        }
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .op("PRAGMA synchronous = NORMAL (segment)")?;
        let stored = self.insert_segment(kind, count, text, &items);
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
    ) -> Result<SegId> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (segment)")?;
        tx.execute(
            "INSERT INTO segments (kind, count, bytes) VALUES (?1, ?2, ?3)",
            params![
                kind_name(kind),
                i64_of(count, "segment count")?,
                i64_of(text.len() as u64, "segment bytes")?
            ],
        )
        .op("INSERT segments")?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx
                .prepare_cached("INSERT INTO segment_blocks (segment, block, data) VALUES (?1, ?2, ?3)")
                .op("prepare INSERT segment_blocks")?;
            for (b, chunk) in items.chunks(BLOCK_ITEMS as usize).enumerate() {
                let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
                    continue;
                };
                let raw = &text[first.0..last.1];
                let z = lz4_flex::block::compress_prepend_size(raw);
                st.execute(params![id, b as i64, z])
                    .op("INSERT segment_blocks")?;
            }
        }
        tx.commit().op("COMMIT (segment)")?;
        u64::try_from(id).map_err(|_| Error::Corrupt(format!("segment id {id}")))
    }

    /// Deletes the segments no checkpoint names (crash leftovers, and the
    /// ones a deleted checkpoint held alone). Returns how many.
    pub fn drop_unreferenced_segments(&mut self) -> Result<u64> {
        drop_unreferenced(&self.conn)
    }
}

/// [`Writer::drop_unreferenced_segments`] on a connection (inside a
/// caller's transaction).
pub(super) fn drop_unreferenced(conn: &Connection) -> Result<u64> {
    let n = conn
        .execute(
            "DELETE FROM segments WHERE id NOT IN (SELECT segment FROM checkpoint_segments)",
            [],
        )
        .op("DELETE unreferenced segments")?;
    Ok(n as u64)
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
    let z: Option<Vec<u8>> = conn
        .prepare_cached("SELECT data FROM segment_blocks WHERE segment = ?1 AND block = ?2")
        .op("prepare SELECT segment_blocks")?
        .query_row(params![i64_of(seg, "segment")?, i64_of(block, "block")?], |r| r.get(0))
        .optional()
        .op("SELECT segment_blocks")?;
    z.map(|z| unpack(seg, block, &z)).transpose()
}

/// Calls `f` with the text of each block of segment `seg`, in order.
pub fn for_each_block(
    conn: &Connection,
    seg: SegId,
    mut f: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let mut st = conn
        .prepare_cached("SELECT block, data FROM segment_blocks WHERE segment = ?1 ORDER BY block")
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
        f(&unpack(seg, block as u64, z)?)?;
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
        .query_row([i64_of(seg, "segment")?], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
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
            crate::engine::segment::write_event(&mut text, &format!("e{i}"), "k,]", i as i64, -1);
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
        let again = w.put_segment(SegKind::Sources, 1, b"[\"x\",\"\",1,1]").unwrap();
        assert!(again > id);
    }
}
