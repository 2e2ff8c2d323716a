//! The lent writer: flushes between a merge's transactions, lookups on
//! another thread, each transaction short.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::{assert_no_garbage, db, db_at, found, synchronous, Rng};
use crate::error::Error;
use crate::index::IdIndex;

/// Issue 36 point 3: a merge no longer holds back flushes. Flushes
/// run between the merge's lent transactions (as the checkpointer's do
/// while the merge thread runs), their marks are durable at once, and
/// a crash in the middle of the merge (the lender fails) loses none of
/// them: the reopened index has the last flushed mark and every entry,
/// and the next merge deletes what the interrupted one left. (With the
/// merge inside the flush, as before, the mark stayed at the one before
/// the merge until it ended.)
#[test]
fn flushes_go_on_between_a_merges_transactions_and_survive_a_crash_in_it() {
    let (_dir, mut conn) = db();
    let mut index = IdIndex::open(&conn).unwrap();
    index.set_transaction_bytes(16 << 10); // many short transactions
    let flusher = index.flusher();
    let mut rng = Rng(36);
    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut batch = |index: &mut IdIndex, all: &mut Vec<(u64, u64)>, n: u64| {
        let entries: Vec<(u64, u64)> = (0..n)
            .map(|_| (rng.next(), all.len() as u64 + rng.below(1 << 20)))
            .collect();
        all.extend(&entries);
        index.add(entries);
    };
    // Runs of 40K, 20K, 20K entries: the last two are due to merge
    // with the first.
    for (mark, n) in [(1, 40_000), (2, 20_000), (3, 20_000)] {
        batch(&mut index, &mut all, n);
        index.seal(mark);
        flusher
            .flush_sealed_with(&mut |work| work(&mut conn))
            .unwrap();
    }
    assert_eq!(index.runs(), 3);
    assert!(flusher.merge_due());
    assert_eq!(flusher.merging_entries(), 0);
    // The merge, with a flush of a new memtable after every few of its
    // transactions; the lender fails (a crash) after the third flush.
    let mut lent = 0;
    let mut mark = 3;
    let mut seen_merging = 0;
    let crashed = flusher.merge_with(&mut |work| {
        lent += 1;
        work(&mut conn)?;
        seen_merging = seen_merging.max(flusher.merging_entries());
        if lent % 4 == 0 && mark < 6 {
            mark += 1;
            batch(&mut index, &mut all, 3_000);
            index.seal(mark);
            flusher.flush_sealed_with(&mut |w| w(&mut conn))?;
            assert_eq!(
                index.mark(),
                Some(mark),
                "the flush's mark is durable at once"
            );
        }
        if mark == 6 {
            return Err(Error::Corrupt("the process is killed".into()));
        }
        Ok(())
    });
    assert!(crashed.is_err());
    assert_eq!(seen_merging, 80_000);
    assert_eq!(flusher.merging_entries(), 0);
    let garbage: i64 = conn
        .query_row("SELECT count(*) FROM id_runs WHERE live = 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(garbage, 1, "the interrupted merge's run");
    drop(index);
    let mut index = IdIndex::open(&conn).unwrap();
    assert_eq!(index.mark(), Some(6));
    assert_eq!(index.runs(), 6);
    for &(h, p) in all.iter().step_by(97) {
        assert!(found(&index, &conn, h).contains(&p), "({h}, {p}) lost");
    }
    // The next merge deletes the garbage, then merges everything.
    let flusher = index.flusher();
    assert!(flusher.merge_due());
    flusher.merge_with(&mut |work| work(&mut conn)).unwrap();
    let garbage: i64 = conn
        .query_row("SELECT count(*) FROM id_runs WHERE live = 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(garbage, 0);
    assert!(!flusher.merge_due());
    assert!(index.runs() < 6);
    assert_eq!(index.len(), all.len() as u64);
    for &(h, p) in all.iter().step_by(89) {
        assert!(found(&index, &conn, h).contains(&p), "({h}, {p}) lost");
    }
    index.add([(1, 1)]);
    index.flush(&mut conn, 7).unwrap();
    assert_eq!(IdIndex::open(&conn).unwrap().mark(), Some(7));
}

#[test]
fn lookups_on_another_thread_never_miss_while_flushes_and_merges_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let writer = db_at(&path, 4096);
    writer
        .execute_batch("CREATE TABLE calls (n INTEGER NOT NULL)")
        .unwrap();
    // the service's writer: a mutex, lent per transaction
    let writer = Arc::new(Mutex::new(writer));
    let reader = Connection::open(&path).unwrap();
    let mut index = IdIndex::open(&reader).unwrap();
    index.set_transaction_bytes(8 << 10);
    let flusher = index.flusher();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // the group commit of acknowledged calls, between the lent transactions
    let calls = {
        let (writer, stop) = (writer.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let conn = writer.lock().unwrap();
                conn.execute("INSERT INTO calls (n) VALUES (?1)", [n])
                    .unwrap();
                n += 1;
                drop(conn);
                std::thread::yield_now();
            }
            n
        })
    };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let thread = {
        let writer = writer.clone();
        std::thread::spawn(move || {
            let mut lent = 0;
            while rx.recv().is_ok() {
                flusher
                    .flush_with(&mut |work| {
                        let mut conn = writer.lock().unwrap();
                        lent += 1;
                        work(&mut conn)
                    })
                    .unwrap();
            }
            lent
        })
    };
    let mut rng = Rng(11);
    let mut added: Vec<(u64, u64)> = Vec::new();
    for batch in 0..40u64 {
        let entries: Vec<(u64, u64)> = (0..500).map(|i| (rng.next(), batch * 1000 + i)).collect();
        index.add(entries.iter().copied());
        added.extend(&entries);
        index.seal(batch);
        tx.send(()).unwrap();
        for _ in 0..200 {
            let (h, p) = added[rng.below(added.len() as u64) as usize];
            assert!(found(&index, &reader, h).contains(&p));
        }
    }
    drop(tx);
    let lent = thread.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let calls = calls.join().unwrap();
    assert!(lent > 100, "{lent} lent transactions");
    assert!(calls > 0);
    assert_eq!(index.mark(), Some(39));
    assert_eq!(index.unflushed(), 0);
    let writer = writer.lock().unwrap();
    let committed: i64 = writer
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(committed, calls);
    let reopened = IdIndex::open(&writer).unwrap();
    for &(h, p) in added.iter().step_by(7) {
        assert!(found(&reopened, &reader, h).contains(&p));
    }
    assert_no_garbage(&writer);
}

#[test]
fn each_lent_transaction_is_short_and_leaves_the_connection_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let wal = dir.path().join("db-wal");
    let mut conn = db_at(&path, 4096);
    let mut index = IdIndex::open(&conn).unwrap();
    // 16 parts per transaction
    index.set_transaction_bytes(64 << 10);
    let flusher = index.flusher();
    let mut rng = Rng(21);
    let mut added = Vec::new();
    let (mut lends, mut max_frames, mut max_changes) = (0, 0, 0);
    let mut per_flush = Vec::new();
    for b in 0..8u64 {
        let entries: Vec<(u64, u64)> = (0..10_000).map(|i| (rng.next(), b * 100_000 + i)).collect();
        index.add(entries.iter().copied());
        added.extend(entries);
        index.seal(b);
        let before = lends;
        flusher
            .flush_with(&mut |work| {
                assert!(conn.is_autocommit());
                assert_eq!(synchronous(&conn), 2);
                // an empty WAL: what it holds after `work` is what `work` wrote
                let busy: i64 = conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(busy, 0);
                assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
                let changes: i64 = conn
                    .query_row("SELECT total_changes()", [], |r| r.get(0))
                    .unwrap();
                let done = work(&mut conn);
                assert!(conn.is_autocommit(), "a transaction was left open");
                assert_eq!(synchronous(&conn), 2, "synchronous was not reset");
                let len = std::fs::metadata(&wal).unwrap().len();
                let frames = len.saturating_sub(32) / (4096 + 24);
                let changes = conn
                    .query_row("SELECT total_changes()", [], |r| r.get::<_, i64>(0))
                    .unwrap()
                    - changes;
                max_frames = max_frames.max(frames);
                max_changes = max_changes.max(changes);
                lends += 1;
                done
            })
            .unwrap();
        per_flush.push(lends - before);
    }
    // 16 parts (or one filter piece of 100 KB, 25 pages), a few b-tree
    // and freelist pages, the row; or 64 freed pages
    assert!(max_frames <= 48, "{max_frames} pages in one transaction");
    assert!(max_changes <= 80, "{max_changes} rows in one transaction");
    // the last flush merges all 80,000 entries (~170 parts)
    assert!(
        per_flush[7] >= 20,
        "{per_flush:?} lent transactions per flush"
    );
    assert_eq!(index.runs(), 1);
    for &(h, p) in added.iter().step_by(13) {
        assert_eq!(found(&index, &conn, h), vec![p]);
    }
    assert_no_garbage(&conn);
}
