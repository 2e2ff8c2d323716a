//! Memory and size: a merge never holds a second filter; a million
//! entries; the filters' false positives with the engine's id hashes.

use rusqlite::Connection;

use super::{db, db_at, found, Rng};
use crate::filter::{BITS_PER_ENTRY, PIECE_BYTES};
use crate::index::IdIndex;
use crate::schema::SCHEMA;
use crate::txn::TRANSACTION_BYTES;

/// A merge holds the merged runs' filters and, of its new run's, only
/// the piece being filled (and the pieces queued for a transaction),
/// never the whole: its filter is read back after the merged runs'
/// are gone. Every entry is found after it.
#[test]
fn a_merge_never_holds_a_second_filter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut conn = db_at(&path, 16384);
    let index = IdIndex::open(&conn).unwrap();
    let mut index = index;
    let mut rng = Rng(11);
    // two runs of 1.5M entries: a merged filter of ~5 MiB (6 pieces)
    let n: u64 = 1_500_000;
    let mut kept = Vec::new();
    for m in 0..2u64 {
        let batch: Vec<(u64, u64)> = (0..n).map(|i| (rng.next(), m * n + i)).collect();
        kept.extend(batch.iter().step_by(997).copied());
        index.add(batch);
        index.seal(m + 1);
        let flusher = index.flusher();
        flusher
            .flush_sealed_with(&mut |work| work(&mut conn))
            .unwrap();
    }
    assert_eq!(index.runs(), 2);
    let before = index.memory_bytes();
    let flusher = index.flusher();
    let mut peak = 0;
    let mut lends = 0;
    let conn_cell = std::cell::RefCell::new(&mut conn);
    flusher
        .merge_with(&mut |work| {
            peak = peak.max(index.memory_bytes());
            lends += 1;
            work(&mut conn_cell.borrow_mut())
        })
        .unwrap();
    let after = index.memory_bytes();
    assert_eq!(index.runs(), 1);
    assert!(lends > 10, "{lends} lent transactions");
    let merged_filter = (2 * n * BITS_PER_ENTRY / 8) as usize;
    // before: the two filters (~5.25 MB) and fences
    assert!(before > merged_filter, "{before} bytes before");
    assert!(
        peak <= before + PIECE_BYTES + TRANSACTION_BYTES + (64 << 10),
        "peak {peak} bytes during the merge, {before} before: a second filter"
    );
    assert!(
        after <= before + (64 << 10),
        "{after} bytes after, {before} before"
    );
    let conn = conn_cell.into_inner();
    for (h, pos) in kept {
        assert!(found(&index, conn, h).contains(&pos), "hash {h:#x}");
    }
    // and a reopened index reads the merged run's filter from disk
    let reopened = IdIndex::open(conn).unwrap();
    let again = reopened.memory_bytes();
    assert!(
        again.abs_diff(after) < 64 << 10,
        "{again} bytes reopened, {after} after"
    );
}

fn merge_bound(n: u64, first: u64) -> usize {
    2 * ((n as f64 / first as f64).log2().ceil() as usize) + 2
}

#[test]
fn size_one_million_entries() {
    let (_dir, mut conn) = db();
    let mut index = IdIndex::open(&conn).unwrap();
    let mut rng = Rng(5);
    let n: u64 = 1_000_000;
    let batch: u64 = 65_536;
    let mut max_runs = 0;
    let mut done = 0;
    while done < n {
        let k = batch.min(n - done);
        index.add((done..done + k).map(|i| (rng.next(), i)));
        done += k;
        index.flush(&mut conn, done).unwrap();
        max_runs = max_runs.max(index.runs());
        assert!(index.runs() <= merge_bound(done, batch));
    }
    let q = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    let pages = q("PRAGMA page_count") - q("PRAGMA freelist_count");
    let disk = (pages * q("PRAGMA page_size")) as f64 / n as f64;
    let blobs = q("SELECT sum(length(data)) FROM id_parts") as f64 / n as f64;
    let filter_bits = index.filter_bits_per_entry();
    let memory = index.memory_bytes() as f64 / n as f64;
    // false positives: absent hashes whose filter says maybe, per run
    let probes = 200_000;
    let mut hits = 0;
    for _ in 0..probes {
        hits += index.filter_hits(rng.next());
    }
    let fpr = hits as f64 / (probes * index.runs()) as f64;
    println!(
        "1M entries: {} runs (max {max_runs}), disk {disk:.2} B/entry (part blobs {blobs:.2}), \
         filter {filter_bits:.2} bits/entry, memory {memory:.3} B/entry, \
         filter false positives {:.3}% per run",
        index.runs(),
        fpr * 100.0
    );
    assert!(disk <= 16.0, "{disk} bytes per entry on disk");
    assert!(filter_bits <= 16.0, "{filter_bits} filter bits per entry");
    assert!(fpr < 0.005, "false positive rate {fpr}");
    assert!(max_runs <= merge_bound(n, batch));
}

/// Ids as producers make them (a prefix and a counter, of every
/// length) filed by the engine's `id_hash`: the filters must answer
/// "maybe" for about 1% of new ones, as for random hashes (with the
/// engine's word-multiplying hash, 8-byte ids `e1200000`.. got ~11%).
#[test]
fn sequential_ids_meet_the_filters_false_positive_rate() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(dir.path().join("db")).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL").unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    let mut idx = IdIndex::open(&conn).unwrap();
    let h = |i: u64| streamforge_engine::history::id_hash(&format!("e{i}"));
    let pos = |i: u64| ((i / 300_000 + 1) << 24) | (i % 300_000);
    for (mark, range) in [(1, 0..600_000u64), (2, 600_000..1_200_000)] {
        idx.add(range.map(|i| (h(i), pos(i))));
        idx.flush(&mut conn, mark).unwrap();
    }
    let mut out = Vec::new();
    for (what, probe) in [
        (
            "8-byte ids",
            (1_200_000..1_300_000u64).map(h).collect::<Vec<_>>(),
        ),
        (
            "long ids",
            (0..100_000u64)
                .map(|i| streamforge_engine::history::id_hash(&format!("order-2026-12-{i:012}")))
                .collect(),
        ),
    ] {
        idx.may_contain(&probe, &mut out);
        let rate = out.iter().filter(|b| **b).count() as f64 / probe.len() as f64;
        assert!(rate < 0.02, "{what}: {:.2}% answered maybe", rate * 100.0);
    }
    // and every id filed is found
    idx.may_contain(
        &(0..1_200_000u64).step_by(7).map(h).collect::<Vec<_>>(),
        &mut out,
    );
    assert!(out.iter().all(|b| *b));
}
