//! The id index's tests, and what they share: a database, a seeded
//! random source, lookups as sorted lists, the check that no garbage is
//! left.

mod crash;
mod index;
mod lending;
mod parts;
mod size;

use rusqlite::Connection;

use crate::index::IdIndex;
use crate::schema::SCHEMA;

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
