use super::*;
use crate::Page;
use streamforge_engine::{Change, ChangeOp, WindowResult};

fn restored(sequence: u64) -> Restored<'static> {
    Restored {
        engine: EngineId::Window,
        checkpoint_id: None,
        envelope: Some(b"{}"),
        sequence,
        late: RestoredLate::Records(&[]),
        keys_through: None,
    }
}

fn changes(first: u64, n: u64) -> Vec<Change> {
    (first..first + n)
        .map(|seq| Change {
            seq,
            op: ChangeOp::Upsert,
            result: WindowResult {
                window: "w".into(),
                key: format!("k{}", seq % 2).into(),
                start: 0,
                end: 10,
                count: seq,
                sum: seq as i128,
                min: 1,
                max: 2,
            },
        })
        .collect()
}

fn json(c: &[Change]) -> Vec<(u64, String)> {
    c.iter()
        .map(|c| (c.seq, serde_json::to_string(c).unwrap()))
        .collect()
}

#[test]
fn change_chunks_page_split_and_truncate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut w = Writer::open(&db).unwrap();
    let all = changes(1, 8);
    let (a, b) = (chunk::encode(&all[..5]), chunk::encode(&all[5..]));
    w.append(&[
        CommandRow {
            engine: EngineId::Window,
            kind: "ndjson",
            body: b"{}",
            encoding: crate::body::RAW,
            changes: Some((1, 5, &a)),
            records: (Stream::Late, &[]),
            key: None,
            document: None,
        },
        CommandRow {
            engine: EngineId::Window,
            kind: "advance",
            body: b"{}",
            encoding: crate::body::RAW,
            changes: None,
            records: (Stream::Late, &[]),
            key: None,
            document: None,
        },
        CommandRow {
            engine: EngineId::Window,
            kind: "advance",
            body: b"{}",
            encoding: crate::body::RAW,
            changes: Some((6, 8, &b)),
            records: (Stream::Late, &[]),
            key: None,
            document: None,
        },
    ])
    .unwrap();
    assert_eq!(w.max_seq(Stream::Changes).unwrap(), 8);
    assert_eq!(w.max_seq(Stream::Late).unwrap(), 0);
    assert_eq!(w.command_count().unwrap(), 3);
    let mut r = Reader::open(&db).unwrap();
    let seqs = |p: &Page| p.rows.iter().map(|(s, _)| *s).collect::<Vec<_>>();
    // From inside the first chunk, across into the second, limited: each
    // row is the change's own JSON.
    let p = r.changes_page(3, 4).unwrap();
    assert_eq!((p.rows.clone(), p.head), (json(&all[3..7]), 8));
    assert_eq!(r.changes_page(0, 100).unwrap().rows, json(&all));
    assert!(r.changes_page(8, 10).unwrap().rows.is_empty());
    assert_eq!(w.changes_between(4, 6).unwrap(), json(&all[3..6]));
    assert_eq!(w.chunk_at(6).unwrap(), Some((8, b.clone())));
    // A restore to sequence 3 keeps the prefix of the straddling chunk.
    w.restore(&restored(3)).unwrap();
    let p = r.changes_page(0, 100).unwrap();
    assert_eq!((p.rows.clone(), p.head), (json(&all[..3]), 3));
    assert_eq!(w.chunk_at(1).unwrap(), Some((3, chunk::encode(&all[..3]))));
    // Rows of the version-1 layout (one JSON change, no last_seq) and of
    // version 2 (a JSON array) still read, and a restore truncates them.
    w.conn
        .execute(
            "INSERT INTO changes (seq, body) VALUES (4, '{\"seq\":4}')",
            [],
        )
        .unwrap();
    w.conn
        .execute(
            "INSERT INTO changes (seq, body, last_seq) VALUES (5, '[{\"seq\":5},{\"seq\":6}]', 6)",
            [],
        )
        .unwrap();
    let p = r.changes_page(2, 100).unwrap();
    assert_eq!(seqs(&p), vec![3, 4, 5, 6]);
    assert_eq!(p.rows[1].1, r#"{"seq":4}"#);
    assert_eq!(p.rows[3].1, r#"{"seq":6}"#);
    w.restore(&restored(5)).unwrap();
    let p = r.changes_page(4, 100).unwrap();
    assert_eq!((seqs(&p), p.head), (vec![5], 5));
    assert_eq!(
        w.chunk_at(5).unwrap(),
        Some((5, br#"[{"seq":5}]"#.to_vec()))
    );
}

/// A restore by id whose checkpoint was deleted after it was read (an
/// automatic checkpoint rotated out meanwhile) still succeeds, with the
/// envelope it read as the recovery base.
#[test]
fn a_restore_by_id_of_a_checkpoint_deleted_meanwhile_keeps_its_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut w = Writer::open(&db).unwrap();
    let kept = w
        .checkpoint(
            EngineId::Window,
            b"{\"kept\":1}",
            "",
            0,
            crate::Origin::User,
        )
        .unwrap();
    let gone = w
        .checkpoint(
            EngineId::Window,
            b"{\"gone\":1}",
            "",
            0,
            crate::Origin::User,
        )
        .unwrap();
    let envelope = w.checkpoint_envelope(gone.id).unwrap().unwrap();
    assert!(w
        .delete_checkpoint(EngineId::Window, gone.id, &|| ())
        .unwrap());
    let r = Restored {
        checkpoint_id: Some(gone.id),
        envelope: Some(&envelope),
        ..restored(0)
    };
    assert_eq!(w.restore(&r).unwrap(), 1);
    assert_eq!(
        w.base(EngineId::Window).unwrap().unwrap().state,
        BaseState::Envelope(envelope)
    );
    // by id while it exists: the base names it
    let r = Restored {
        checkpoint_id: Some(kept.id),
        envelope: Some(b"{\"kept\":1}"),
        ..restored(0)
    };
    assert_eq!(w.restore(&r).unwrap(), 2);
    let (inline, id): (Option<Vec<u8>>, Option<i64>) = w
        .conn
        .query_row(
            "SELECT envelope, checkpoint_id FROM recovery_bases WHERE engine = 'window'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((inline, id), (None, Some(kept.id)));
}

/// A restore beyond the stored head (a fresh database, or an older
/// checkpoint restored and then a newer one) leaves no changes up to
/// its sequence: pages after any position hold the stored changes that
/// follow it, and following `next` loses none.
#[test]
fn pages_after_a_gap_in_the_sequences_start_at_the_first_change_held() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut w = Writer::open(&db).unwrap();
    w.restore(&restored(22)).unwrap();
    let all = changes(23, 6);
    let chunks: Vec<Vec<u8>> = all.chunks(2).map(chunk::encode).collect();
    let rows: Vec<CommandRow<'_>> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| CommandRow {
            engine: EngineId::Window,
            kind: "ndjson",
            body: b"{}",
            encoding: crate::body::RAW,
            changes: Some((23 + 2 * i as u64, 24 + 2 * i as u64, c)),
            records: (Stream::Late, &[]),
            key: None,
            document: None,
        })
        .collect();
    w.append(&rows).unwrap();
    let mut r = Reader::open(&db).unwrap();
    for after in 0..=30u64 {
        let held: Vec<(u64, String)> = json(&all).into_iter().filter(|(s, _)| *s > after).collect();
        for limit in 1..=8u32 {
            let p = r.changes_page(after, limit).unwrap();
            assert_eq!(p.head, 28);
            let want: Vec<_> = held.iter().take(limit as usize).cloned().collect();
            assert_eq!(p.rows, want, "after {after}, limit {limit}");
            // following the pages from `after` reads every change once
            let mut read = Vec::new();
            let mut at = after;
            loop {
                let p = r.changes_page(at, limit).unwrap();
                let Some(last) = p.rows.last().map(|(s, _)| *s) else {
                    break;
                };
                read.extend(p.rows);
                at = last;
            }
            assert_eq!(read, held, "after {after}, limit {limit}");
        }
    }
}
