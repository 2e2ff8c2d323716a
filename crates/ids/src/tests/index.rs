//! The index against a model: flushes, merges, reopens, crashes between
//! flushes, the memtable.

use std::collections::BTreeMap;

use rusqlite::Connection;

use super::{assert_no_garbage, db, found, Rng};
use crate::flusher::IdFlusher;
use crate::index::IdIndex;
use crate::schema::SCHEMA;

#[test]
fn the_two_sides_can_live_on_two_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<IdIndex>();
    send_sync::<IdFlusher>();
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
