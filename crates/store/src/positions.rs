//! Positions of the Kafka source in topics it reads idempotently (the
//! watermark topic): where a restart reads on from.

use rusqlite::{params, OptionalExtension};

use crate::error::Op as _;
use crate::{Reader, Result, Writer};

impl Writer {
    /// Records that `name` is read up to (not including) `next`.
    pub fn set_source_position(&mut self, name: &str, next: i64) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO source_positions (name, next) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET next = excluded.next",
                params![name, next],
            )
            .op("INSERT INTO source_positions")?;
        Ok(())
    }
}

impl Reader {
    /// Where `name` is read up to, if recorded.
    pub fn source_position(&mut self, name: &str) -> Result<Option<i64>> {
        self.conn
            .query_row(
                "SELECT next FROM source_positions WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .op("SELECT FROM source_positions")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_kept_and_moved() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut w = Writer::open(&db).unwrap();
        let mut r = Reader::open(&db).unwrap();
        assert_eq!(r.source_position("t-watermarks").unwrap(), None);
        w.set_source_position("t-watermarks", 7).unwrap();
        w.set_source_position("t-watermarks", 12).unwrap();
        w.set_source_position("u-watermarks", 1).unwrap();
        assert_eq!(r.source_position("t-watermarks").unwrap(), Some(12));
        assert_eq!(r.source_position("u-watermarks").unwrap(), Some(1));
    }
}
