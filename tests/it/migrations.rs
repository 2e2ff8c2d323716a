//! Schema migrations: a fresh database gets every migration in one
//! transaction (user_version = their count) in WAL mode; reopening changes
//! nothing; a database from a newer version is refused and left untouched.

use crate::support::server;

use server::*;
use streamforge::store::{migrate, Writer};

fn user_version(path: &std::path::Path) -> i64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

fn schema(path: &std::path::Path) -> Vec<String> {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut st = c
        .prepare("SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master ORDER BY type, name")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn fresh_database_is_migrated_in_wal_mode() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let w = Writer::open(&db).expect("open");
    drop(w);
    assert_eq!(user_version(&db), migrate::latest_version());
    assert_eq!(migrate::latest_version(), migrate::MIGRATIONS.len() as i64);
    let c = rusqlite::Connection::open(&db).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let names = schema(&db).join("\n");
    for table in [
        "pipeline",
        "commands",
        "changes",
        "late",
        "checkpoints",
        "checkpoint_pieces",
        "recovery_bases",
        "restores",
        "pruned",
        "pattern_output",
        "patterns",
    ] {
        assert!(
            names.contains(&format!("table {table}:")),
            "{table} missing:\n{names}"
        );
    }
    // Reopening applies nothing and changes nothing.
    let before = schema(&db);
    drop(Writer::open(&db).expect("reopen"));
    assert_eq!(schema(&db), before);
}

#[test]
fn migrations_are_numbered_in_order() {
    for (i, (name, sql)) in migrate::MIGRATIONS.iter().enumerate() {
        assert!(name.starts_with(&format!("{:04}_", i + 1)), "{name}");
        assert!(!sql.trim().is_empty());
    }
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempdir();
    let db = dir.path().join("db");
    drop(Writer::open(&db).expect("open"));
    let c = rusqlite::Connection::open(&db).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    let before = schema(&db);
    let err = match Writer::open(&db) {
        Ok(_) => panic!("a newer schema was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("newer"), "{err}");
    // The binary refuses to start with a message naming the file.
    let err = try_start(&db, &[]).err().expect("refused");
    assert!(
        err.contains("version 99") && err.contains(db.to_str().unwrap()),
        "{err}"
    );
    assert_eq!(user_version(&db), 99);
    assert_eq!(schema(&db), before);
}

#[test]
fn a_failed_migration_leaves_the_old_version() {
    // A database at version 0 that already has a conflicting table: the
    // migration fails and nothing of it stays (one transaction).
    let dir = tempdir();
    let db = dir.path().join("db");
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute_batch("CREATE TABLE late (x INTEGER);").unwrap();
    drop(c);
    assert!(Writer::open(&db).is_err());
    assert_eq!(user_version(&db), 0);
    let names = schema(&db).join("\n");
    assert!(!names.contains("table commands:"), "{names}");
}

/// A database written by schema version 2 (changes stored as JSON text
/// chunks, no checkpoint pieces) is upgraded in place: its pages read the
/// same, recovery replays its log against the old chunks, and new changes
/// are stored in the binary layout next to them.
#[test]
fn a_version_2_database_is_upgraded_and_keeps_serving_its_changes() {
    use streamforge::store::chunk;
    let dir = tempdir();
    let db = dir.path().join("db");
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    let ops = workload(21, 200);
    let (before, after) = ops.split_at(100);
    let mut base = None;
    for (i, op) in before.iter().enumerate() {
        assert_eq!(op.send(&s).status, 200);
        if i == 50 {
            // a recovery base (the old one-row table) with commands after it
            let r = s.post_empty("/checkpoints");
            assert_eq!(r.status, 201);
            let id = r.json()["id"].as_i64().unwrap();
            base = Some((id, s.get(&format!("/checkpoints/{id}")).body));
        }
    }
    let (base_id, base_envelope) = base.expect("a checkpoint");
    let changes = s.all_changes();
    let snapshot = s.snapshot();
    assert!(changes.len() > 10, "{}", changes.len());
    s.kill();
    // Rewrite the file as version 2 wrote it.
    let c = rusqlite::Connection::open(&db).unwrap();
    let rows: Vec<(i64, Vec<u8>)> = c
        .prepare("SELECT seq, body FROM changes")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!rows.is_empty());
    for (seq, body) in rows {
        let items: Vec<String> = chunk::decode(seq as u64, &body)
            .unwrap()
            .iter()
            .map(|c| serde_json::to_string(c).unwrap())
            .collect();
        c.execute(
            "UPDATE changes SET body = ?1 WHERE seq = ?2",
            rusqlite::params![format!("[{}]", items.join(",")), seq],
        )
        .unwrap();
    }
    // version 2 stored every body as received (kind `events`), where
    // deliveries are now stored in a binary form: the rows left after the
    // checkpoint are the last calls
    let commands: Vec<(i64, String)> = c
        .prepare("SELECT id, kind FROM commands ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(commands.len() >= 10 && commands.len() < before.len());
    let mut rewritten = 0;
    for ((id, kind), op) in commands
        .iter()
        .zip(&before[before.len() - commands.len()..])
    {
        if let Op::Batch(b) = op {
            assert_eq!(kind, "deliveries");
            c.execute(
                "UPDATE commands SET kind = 'events', body = ?1 WHERE id = ?2",
                rusqlite::params![b.as_bytes(), id],
            )
            .unwrap();
            rewritten += 1;
        }
    }
    assert!(rewritten >= 5, "{rewritten}");
    let packed: i64 = c
        .query_row(
            "SELECT count(*) FROM commands WHERE encoding <> 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(packed, 0, "this history must hold only small bodies");
    // version 2 stored checkpoint envelopes whole (version 8 stores the
    // window engine's history in segments)
    c.execute(
        "UPDATE checkpoints SET envelope = ?1 WHERE id = ?2",
        rusqlite::params![base_envelope.as_bytes(), base_id],
    )
    .unwrap();
    c.execute_batch(
        "DROP TABLE pending_upgrades;
         DROP TABLE segment_chunks;
         ALTER TABLE checkpoints DROP COLUMN digest;
         DROP TABLE ingest_rejected;
         DROP TABLE ingest_rejected_heads;
         DROP TABLE idempotency_keys;
         DROP TABLE source_positions;
         DROP TABLE checkpoint_lists;
         DROP TABLE segment_blocks;
         DROP TABLE segments;
         DROP TABLE id_index;
         DROP TABLE id_runs;
         DROP TABLE id_parts;
         DROP TABLE id_filters;
         ALTER TABLE checkpoints DROP COLUMN live;
         ALTER TABLE checkpoints DROP COLUMN state_sha256;
         ALTER TABLE commands DROP COLUMN encoding;
         DROP TABLE sink_batches;
         DROP TABLE sinks;
         DROP TABLE pattern_output;
         DROP TABLE patterns;
         CREATE TABLE recovery_base (
             id            INTEGER PRIMARY KEY CHECK (id = 1),
             checkpoint_id INTEGER REFERENCES checkpoints (id),
             envelope      BLOB,
             sequence      INTEGER NOT NULL,
             CHECK ((checkpoint_id IS NULL) <> (envelope IS NULL)));
         INSERT INTO recovery_base SELECT 1, checkpoint_id, envelope, sequence
             FROM recovery_bases WHERE engine = 'window';
         DROP TABLE recovery_bases;
         ALTER TABLE commands DROP COLUMN engine;
         ALTER TABLE checkpoints DROP COLUMN engine;
         DROP TABLE restores;
         DROP TABLE pruned;
         ALTER TABLE checkpoints DROP COLUMN origin;
         DROP TABLE checkpoint_pieces;
         ALTER TABLE checkpoints DROP COLUMN pieces_from;
         PRAGMA user_version = 2;",
    )
    .unwrap();
    let text: i64 = c
        .query_row(
            "SELECT count(*) FROM changes WHERE typeof(body) = 'text'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(text > 0);
    drop(c);
    assert_eq!(user_version(&db), 2);
    // The new binary upgrades it, replays the log against the JSON chunks
    // (a mismatch would refuse to start), and serves the same pages.
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    assert_eq!(s.all_changes(), changes);
    assert_eq!(s.snapshot(), snapshot);
    for op in after {
        assert_eq!(op.send(&s).status, 200);
    }
    let all = s.all_changes();
    assert!(all.len() > changes.len());
    assert_eq!(&all[..changes.len()], &changes[..]);
    let snapshot = s.snapshot();
    s.kill();
    // (read with the server stopped: it holds its database exclusively)
    assert_eq!(user_version(&db), migrate::latest_version());
    // Both layouts side by side replay and read after a crash.
    let c = rusqlite::Connection::open(&db).unwrap();
    let layouts: Vec<String> = c
        .prepare("SELECT DISTINCT typeof(body) FROM changes ORDER BY 1")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(layouts, ["blob", "text"]);
    drop(c);
    let s = start(&db, &[]);
    assert_eq!(s.all_changes(), all);
    assert_eq!(s.snapshot(), snapshot);
}
