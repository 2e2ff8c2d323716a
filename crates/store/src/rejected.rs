//! The dead-letter pages of the inbound webhook sources (migration 0012):
//! payloads a source refused, kept so that the user can fix the mapping and
//! send them again. On a connection of their own (a refused payload never
//! waits for the write path's commits), durable like every commit here.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{Op, Result};
use super::pragmas;

/// A page of one source's rejected records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedPage {
    /// The records (JSON objects, as stored) after the page's start, in order.
    pub records: Vec<(u64, String)>,
    /// The newest record's number (0 before any).
    pub head: u64,
    /// The oldest number still kept (records before it were dropped).
    pub earliest: u64,
    /// Records dropped by retention so far.
    pub dropped: u64,
}

/// A source's newest record number and dropped count (0, 0 before any).
fn head_of(tx: &rusqlite::Transaction<'_>, source: &str) -> Result<(i64, i64)> {
    Ok(tx
        .query_row(
            "SELECT head, dropped FROM ingest_rejected_heads WHERE source = ?1",
            params![source],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .op("read rejected head")?
        .unwrap_or((0, 0)))
}

/// The rejected records of every source.
pub struct RejectedStore {
    conn: Mutex<Connection>,
}

impl RejectedStore {
    /// Opens its connection to a database a [`super::Writer`] has migrated.
    pub fn open(path: &Path) -> Result<RejectedStore> {
        let conn = super::open_conn(path, rusqlite::OpenFlags::default())
            .op("open database (rejected payloads)")?;
        pragmas(&conn)?;
        Ok(RejectedStore {
            conn: Mutex::new(conn),
        })
    }

    /// Adds `record` (a JSON object without its `seq`) to `source`'s page,
    /// keeping the newest `keep`; returns its number and how many older
    /// records this dropped.
    pub fn add(&self, source: &str, record: &str, keep: u64) -> Result<(u64, u64)> {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (rejected)")?;
        let (head, dropped) = head_of(&tx, source)?;
        let seq = head + 1;
        tx.execute(
            "INSERT INTO ingest_rejected (source, seq, record) VALUES (?1, ?2, ?3)",
            params![source, seq, record],
        )
        .op("insert rejected")?;
        let cut = seq - keep.min(i64::MAX as u64) as i64;
        let removed = if cut > 0 {
            tx.execute(
                "DELETE FROM ingest_rejected WHERE source = ?1 AND seq <= ?2",
                params![source, cut],
            )
            .op("drop old rejected")? as i64
        } else {
            0
        };
        tx.execute(
            "INSERT INTO ingest_rejected_heads (source, head, dropped) VALUES (?1, ?2, ?3)
             ON CONFLICT (source) DO UPDATE SET head = excluded.head, dropped = excluded.dropped",
            params![source, seq, dropped + removed],
        )
        .op("write rejected head")?;
        tx.commit().op("COMMIT (rejected)")?;
        Ok((seq as u64, removed as u64))
    }

    /// `source`'s records after `after`, at most `limit`.
    pub fn page(&self, source: &str, after: u64, limit: u32) -> Result<RejectedPage> {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn.transaction().op("BEGIN (rejected page)")?;
        let (head, dropped) = head_of(&tx, source)?;
        let earliest: i64 = tx
            .query_row(
                "SELECT COALESCE(MIN(seq), ?2 + 1) FROM ingest_rejected WHERE source = ?1",
                params![source, head],
                |r| r.get(0),
            )
            .op("read rejected earliest")?;
        let records = {
            let mut st = tx
                .prepare_cached(
                    "SELECT seq, record FROM ingest_rejected WHERE source = ?1 AND seq > ?2
                     ORDER BY seq LIMIT ?3",
                )
                .op("prepare rejected page")?;
            let rows = st
                .query_map(
                    params![source, after.min(i64::MAX as u64) as i64, i64::from(limit)],
                    |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?)),
                )
                .op("read rejected page")?;
            rows.collect::<std::result::Result<Vec<_>, _>>()
                .op("read rejected page")?
        };
        tx.commit().op("COMMIT (rejected page)")?;
        Ok(RejectedPage {
            records,
            head: head as u64,
            earliest: earliest as u64,
            dropped: dropped as u64,
        })
    }

    /// Every source's dropped count (for `/metrics`).
    pub fn dropped(&self) -> Result<Vec<(String, u64)>> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare_cached("SELECT source, dropped FROM ingest_rejected_heads ORDER BY source")
            .op("prepare rejected dropped")?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
            .op("read rejected dropped")?;
        rows.collect::<std::result::Result<Vec<_>, _>>()
            .op("read rejected dropped")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_per_source_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("r.db");
        let _w = super::super::Writer::open(&db).unwrap();
        let s = RejectedStore::open(&db).unwrap();
        for i in 0..5 {
            let (seq, dropped) = s.add("a", &format!("{{\"n\":{i}}}"), 3).unwrap();
            assert_eq!((seq, dropped), (i + 1, u64::from(i >= 3)));
        }
        s.add("b", "{}", 3).unwrap();
        let p = s.page("a", 0, 10).unwrap();
        assert_eq!((p.head, p.earliest, p.dropped), (5, 3, 2));
        assert_eq!(
            p.records.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        assert_eq!(
            s.page("a", 3, 1).unwrap().records,
            vec![(4, "{\"n\":3}".to_string())]
        );
        let none = s.page("c", 0, 10).unwrap();
        assert_eq!((none.head, none.earliest, none.records.len()), (0, 1, 0));
        assert_eq!(s.dropped().unwrap(), vec![("a".into(), 2), ("b".into(), 0)]);
    }
}
