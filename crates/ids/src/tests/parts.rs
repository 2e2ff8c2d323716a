//! Parts: round trips, and damaged blobs (errors, never panics or misses).

use rusqlite::params;

use super::{db, found, Rng};
use crate::checksum::checksum;
use crate::index::IdIndex;
use crate::part::{decode_part, encode_part, search_part, PartPlan};

#[test]
fn parts_round_trip_with_any_hashes_and_positions() {
    let mut rng = Rng(7);
    let cases: Vec<Vec<(u64, u64)>> = vec![
        vec![(0, 0)],
        vec![(u64::MAX, u64::MAX)],
        vec![(0, u64::MAX), (u64::MAX, 0)],
        vec![(5, 1), (5, 2), (5, 3)],
        (0..4096).map(|i| (i, i * 3)).collect(),
        {
            let mut v: Vec<_> = (0..4096).map(|_| (rng.next(), rng.next())).collect();
            v.sort_unstable();
            v
        },
        {
            let mut v: Vec<_> = (0..1000)
                .map(|_| (rng.next() >> 40, rng.below(1000)))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        },
    ];
    let mut blob = Vec::new();
    for entries in cases {
        encode_part(&entries, PartPlan::new(&entries).k, &mut blob);
        let mut back = Vec::new();
        decode_part(&blob, entries[0].0, &mut back).unwrap();
        assert_eq!(back, entries);
        for &(h, _) in entries.iter().step_by(97) {
            let mut out = Vec::new();
            search_part(&blob, entries[0].0, h, &mut out).unwrap();
            let want: Vec<u64> = entries.iter().filter(|e| e.0 == h).map(|e| e.1).collect();
            assert_eq!(out, want);
        }
    }
}

// Long: one damaged database, each kind of damage in turn (parts, a merge, fences, filters).
#[test]
fn damaged_blobs_are_errors_not_panics_or_misses() {
    let (_dir, mut conn) = db();
    let mut index = IdIndex::open(&conn).unwrap();
    let mut rng = Rng(3);
    let entries: Vec<(u64, u64)> = (0..10_000).map(|i| (rng.next(), i)).collect();
    index.add(entries.iter().copied());
    index.flush(&mut conn, 1).unwrap();
    let (key, good): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT key, data FROM id_parts ORDER BY key LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut first_part = Vec::new();
    let fence = {
        let state = index.shared.read();
        state.runs[0].fences[0]
    };
    decode_part(&good, fence, &mut first_part).unwrap();
    let probe = first_part[first_part.len() / 2].0;
    let mut damaged: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![1],
        good[..good.len() / 2].to_vec(),
        good[..good.len() - 1].to_vec(),
        good[..good.len() - 5].to_vec(),
    ];
    for i in (0..good.len()).step_by(good.len() / 40 + 1) {
        let mut b = good.clone();
        b[i] ^= 0x10;
        damaged.push(b);
    }
    let mut x = Rng(9);
    for len in [0usize, 3, 10, 100, 5000] {
        damaged.push((0..len).map(|_| x.next() as u8).collect());
    }
    for blob in &damaged {
        conn.execute(
            "UPDATE id_parts SET data = ?1 WHERE key = ?2",
            params![blob, key],
        )
        .unwrap();
        let mut out = Vec::new();
        assert!(
            index.lookup(&conn, probe, &mut out).is_err(),
            "a damaged part of {} bytes was read",
            blob.len()
        );
        // the decoders themselves return on any bytes
        let _ = decode_part(blob, fence, &mut Vec::new());
        let _ = search_part(blob, fence, probe, &mut Vec::new());
    }
    // the same bytes without their checksum check: still no panic
    for blob in &damaged {
        let mut b = blob.clone();
        let sum = checksum(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        let _ = decode_part(&b, fence, &mut Vec::new());
        let _ = search_part(&b, fence, probe, &mut Vec::new());
    }
    // not a blob, missing
    conn.execute("UPDATE id_parts SET data = 5 WHERE key = ?1", [key])
        .unwrap();
    assert!(index.lookup(&conn, probe, &mut Vec::new()).is_err());
    conn.execute("DELETE FROM id_parts WHERE key = ?1", [key])
        .unwrap();
    assert!(index.lookup(&conn, probe, &mut Vec::new()).is_err());
    // a merge over the damaged run fails and leaves the index as it was
    // a run large enough to be merged with the first one
    index.add((0..8_000).map(|i| (rng.next(), 100_000 + i)));
    let runs = index.runs();
    conn.execute(
        "INSERT INTO id_parts (key, data) VALUES (?1, ?2)",
        params![key, good[..10].to_vec()],
    )
    .unwrap();
    assert!(index.flush(&mut conn, 2).is_err());
    assert_eq!(index.runs(), runs + 1);
    conn.execute(
        "UPDATE id_parts SET data = ?1 WHERE key = ?2",
        params![good, key],
    )
    .unwrap();
    index.flush(&mut conn, 3).unwrap();
    assert_eq!(index.runs(), 1);
    for &(h, p) in entries.iter().step_by(101) {
        assert_eq!(found(&index, &conn, h), vec![p]);
    }
    // damaged fences and filters: open refuses
    let fences: Vec<u8> = conn
        .query_row("SELECT fences FROM id_runs", [], |r| r.get(0))
        .unwrap();
    let mut f = fences.clone();
    f[0] ^= 1;
    conn.execute("UPDATE id_runs SET fences = ?1", [&f])
        .unwrap();
    assert!(IdIndex::open(&conn).is_err());
    conn.execute("UPDATE id_runs SET fences = ?1", [&fences[..3]])
        .unwrap();
    assert!(IdIndex::open(&conn).is_err());
    conn.execute("UPDATE id_runs SET fences = ?1", [&fences])
        .unwrap();
    IdIndex::open(&conn).unwrap();
    let filter: Vec<u8> = conn
        .query_row("SELECT data FROM id_filters", [], |r| r.get(0))
        .unwrap();
    let mut f = filter.clone();
    let at = f.len() / 3;
    f[at] ^= 0x40; // one filter bit cleared or set
    conn.execute("UPDATE id_filters SET data = ?1", [&f])
        .unwrap();
    assert!(IdIndex::open(&conn).is_err());
    conn.execute(
        "UPDATE id_filters SET data = ?1",
        [&filter[..filter.len() - 8]],
    )
    .unwrap();
    assert!(IdIndex::open(&conn).is_err());
    conn.execute("DELETE FROM id_filters", []).unwrap();
    assert!(IdIndex::open(&conn).is_err());
}
