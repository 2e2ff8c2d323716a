//! A crash after any lent transaction loses nothing.

use std::collections::BTreeMap;

use rusqlite::Connection;

use super::{assert_no_garbage, db_at, found, Rng};
use crate::error::Error;
use crate::flusher::IdFlusher;
use crate::index::IdIndex;

/// The lender's "crash".
#[derive(Debug)]
struct Crash;

impl std::fmt::Display for Crash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("crash")
    }
}

impl std::error::Error for Crash {}

/// Runs a flush whose lender "crashes" (returns `Err` without running
/// the transaction) once `after` transactions have run. True when the
/// flush finished before.
fn flush_until_crash(flusher: &IdFlusher, conn: &mut Connection, after: usize) -> bool {
    let mut lent = 0;
    let done = flusher.flush_with(&mut |work| {
        if lent == after {
            return Err(Error::Lender(Box::new(Crash)));
        }
        lent += 1;
        work(conn)
    });
    match done {
        Ok(()) => true,
        Err(Error::Lender(e)) if e.is::<Crash>() => false,
        Err(e) => panic!("{e}"),
    }
}

// Long: one loop over every crash point, each checked against the model and recovered from.
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
