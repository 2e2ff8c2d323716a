//! Checkpoint format version 2 over HTTP (docs/checkpoint.md, docs/storage.md):
//!
//! - two servers fed the same calls, one taking an automatic checkpoint
//!   after every call (and killed and restarted on the way), one a single
//!   checkpoint at the end, serve byte-identical version 2 envelopes, with
//!   partitions and late records past several 4,096-item chunks; every
//!   checkpoint listed carries the digest its download has;
//! - a version 1 envelope written before version 2 (the fixture under
//!   `tests/fixtures/checkpoint-v1`) restores to the same state, by body
//!   whole and streamed, and by id;
//! - a database of the previous schema is upgraded at open: its
//!   checkpoints get their digests, and serve the same envelopes;
//! - a flipped byte in a stored history block is an error that names the
//!   segment, never a wrong envelope or a wrong dedup answer;
//! - redeliveries and duplicates of events in stored blocks answer byte for
//!   byte as on a server whose history is still in memory;
//! - the digest checker docs/checkpoint.md prints (Python, standard library
//!   only) accepts the envelopes the service serves and refuses a damaged
//!   one.

use crate::support::server;

use serde_json::{json, Value};
use server::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    format!("{ROOT}/tests/fixtures/checkpoint-v1/{name}")
}

/// The state bytes of a canonical envelope (version 2 or 1).
fn state_of(envelope: &[u8]) -> &[u8] {
    let text = envelope;
    let at = text
        .windows(8)
        .position(|w| w == br#""state":"#)
        .expect("a state")
        + 8;
    let end = text.len() - br#","version":2}"#.len();
    &text[at..end]
}

/// The digest a version 2 envelope carries, after checking it against its
/// state (computed independently of the service) and its shape.
fn checked_digest(envelope: &[u8]) -> String {
    let v: Value = serde_json::from_slice(envelope).expect("JSON");
    let digest = crate::support::engine::digest_of(&v["state"]);
    assert_eq!(v["digest"], json!(digest), "the envelope's own digest");
    assert_eq!(v["version"], json!(2));
    let head = format!(r#"{{"digest":"{digest}","format":"streamforge-checkpoint","state":"#);
    assert!(envelope.starts_with(head.as_bytes()));
    assert!(envelope.ends_with(br#","version":2}"#));
    digest
}

/// `GET /checkpoints/{id}` as bytes, with its `ETag`.
fn download(s: &Server, path: &str) -> (Vec<u8>, String) {
    let r = s.client.get(s.url(path)).send().expect("GET");
    assert_eq!(r.status().as_u16(), 200, "{path}");
    let etag = r
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .expect("an ETag")
        .to_string();
    (r.bytes().expect("body").to_vec(), etag)
}

/// A workload on the fixture's pipeline (`p0`, `p1`, `p2`): `p2` idle, `p0`
/// past two chunk boundaries, `p1` duplicates of `p0`'s events and more
/// than a chunk of late records, keys that need escapes; in calls of at
/// most 400 deliveries.
fn long_workload() -> Vec<Op> {
    let mut rng = Rng(36);
    let keys = [
        "k0",
        "é",
        "tab\\there",
        "q\\\"uote",
        "back\\\\slash",
        "\\u0001ctl",
    ];
    let mut ops = vec![Op::Idle("p2".into())];
    let mut off = [0i64; 2];
    let mut batch: Vec<String> = Vec::new();
    let mut seen: Vec<(String, &str, i64, i64)> = Vec::new();
    let mut ts = 0i64;
    let push = |ops: &mut Vec<Op>, batch: &mut Vec<String>, force: bool| {
        if batch.len() >= 400 || (force && !batch.is_empty()) {
            ops.push(Op::Batch(format!("[{}]", batch.join(","))));
            batch.clear();
        }
    };
    let deliver = |p: usize, off: &mut [i64; 2], e: &(String, &str, i64, i64)| {
        let d = delivery(&format!("p{p}"), Some(off[p]), &e.0, e.1, e.2, e.3);
        off[p] += 1;
        d
    };
    for i in 0..9000u64 {
        ts += rng.below(4) as i64;
        let e = (
            format!("e{i}"),
            keys[rng.below(keys.len() as u64) as usize],
            ts,
            rng.below(101) as i64 - 50,
        );
        batch.push(deliver(0, &mut off, &e));
        seen.push(e);
        if i % 9 == 4 {
            let d = seen[rng.below(seen.len() as u64) as usize].clone();
            batch.push(deliver(1, &mut off, &d));
        }
        push(&mut ops, &mut batch, false);
        if i % 1000 == 999 {
            push(&mut ops, &mut batch, true);
            for p in 0..2 {
                ops.push(Op::Advance(format!(
                    "{{\"partition\":\"p{p}\",\"watermark\":{}}}",
                    ts - 20
                )));
            }
            // late events on p1: 500 after each advance
            for j in 0..500 {
                let e = (
                    format!("late{i}-{j}"),
                    keys[j % keys.len()],
                    ts - 100 - j as i64,
                    j as i64,
                );
                batch.push(deliver(1, &mut off, &e));
                push(&mut ops, &mut batch, false);
            }
            push(&mut ops, &mut batch, true);
        }
    }
    push(&mut ops, &mut batch, true);
    ops
}

#[test]
fn many_automatic_checkpoints_and_one_at_the_end_serve_the_same_envelope() {
    let dir = tempdir();
    let pipeline = fixture("pipeline.json");
    let a_args = ["--pipeline", pipeline.as_str(), "--checkpoint-every", "1"];
    let b_args = ["--pipeline", pipeline.as_str(), "--checkpoint-every", "0"];
    let mut a = start(&dir.path().join("a"), &a_args);
    let b = start(&dir.path().join("b"), &b_args);
    let ops = long_workload();
    let third = ops.len() / 3;
    for (i, op) in ops.iter().enumerate() {
        let (ra, rb) = (op.send(&a), op.send(&b));
        assert_eq!((ra.status, &ra.body), (rb.status, &rb.body), "op {i}");
        assert_eq!(ra.status, 200, "op {i}: {}", ra.body);
        if i == third || i == 2 * third {
            // every chain resumes from the stored records
            a.kill();
            a = start(&dir.path().join("a"), &a_args);
        }
    }
    let status = b.get("/status").json();
    assert!(status["late"].as_u64().unwrap() > 4096, "{status}");
    assert_eq!(status["partitions"]["p0"]["offset"], 8999);
    assert!(status["partitions"]["p1"]["offset"].as_i64().unwrap() > 4096);
    let ca = a.post_empty("/checkpoints").json();
    let cb = b.post_empty("/checkpoints").json();
    assert_eq!(ca["digest"], cb["digest"], "{ca} {cb}");
    let (ea, tag_a) = download(&a, &format!("/checkpoints/{}", ca["id"]));
    let (eb, tag_b) = download(&b, &format!("/checkpoints/{}", cb["id"]));
    assert!(ea == eb, "the envelopes differ");
    let digest = checked_digest(&ea);
    assert_eq!(ca["digest"], json!(digest));
    assert_eq!(ca["bytes"], json!(ea.len()));
    assert_eq!(
        (tag_a.as_str(), tag_b),
        (format!("\"{digest}\"").as_str(), tag_a.clone())
    );
    // Every checkpoint A lists (automatic ones of earlier states among
    // them) is served with the digest it was listed with.
    let list = a.get("/checkpoints").json();
    let listed = list["checkpoints"].as_array().unwrap();
    assert!(listed.len() >= 3, "{list}");
    for c in listed {
        let (env, tag) = download(&a, &format!("/checkpoints/{}", c["id"]));
        let d = checked_digest(&env);
        assert_eq!(c["digest"], json!(d), "{c}");
        assert_eq!(c["bytes"], json!(env.len()), "{c}");
        assert_eq!(tag, format!("\"{d}\""));
    }
    // The same state restored from the envelope (by body) checkpoints to
    // the same envelope again.
    let r = b.post("/restore", std::str::from_utf8(&ea).unwrap());
    assert_eq!(r.status, 200, "{}", r.body);
    let again = b.post_empty("/checkpoints").json();
    assert_eq!(again["digest"], json!(digest));
    assert_eq!(a.snapshot(), b.snapshot());
}

#[test]
fn a_version_1_envelope_restores_to_the_same_state() {
    let dir = tempdir();
    let v1 = std::fs::read(fixture("envelope.json")).expect("the fixture");
    assert!(v1.starts_with(br#"{"format":"streamforge-checkpoint","sha256":""#));
    let pipeline = fixture("pipeline.json");
    let want_status = r#"{"watermark":6760,"sequence":9793,"late":27,"live_buckets":52,"epoch":1,"partitions":{"p0":{"offset":4499,"progress":6760,"idle":false},"p1":{"offset":669,"progress":6760,"idle":false},"p2":{"offset":-1,"progress":null,"idle":true}}}"#;
    // In the engine: the version 2 checkpoint of the restored state holds
    // the same state, byte for byte.
    let p = streamforge::engine::Processor::from_checkpoint(&v1).expect("restores");
    let v2 = p.checkpoint().unwrap();
    assert!(state_of(&v2) == &v1[v1.len() - state_of(&v2).len() - 13..v1.len() - 13]);
    let digest = checked_digest(&v2);
    // Over HTTP: whole, streamed (a body limit below its size), by id.
    for args in [
        vec![],
        vec![
            "--max-body-bytes",
            "65536",
            "--max-restore-bytes",
            "1000000",
        ],
    ] {
        let mut all = vec!["--pipeline", pipeline.as_str()];
        all.extend(args.iter().copied());
        let s = start(&dir.path().join(format!("db{}", args.len())), &all);
        let r = s
            .client
            .post(s.url("/restore"))
            .header("content-type", "application/json")
            .body(v1.clone())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            r.text().unwrap(),
            r#"{"sequence":9793,"late":27,"watermark":6760}"#
        );
        assert_eq!(s.get("/status").body, want_status);
        let c = s.post_empty("/checkpoints").json();
        assert_eq!(c["digest"], json!(digest), "{c}");
        let (served, _) = download(&s, &format!("/checkpoints/{}", c["id"]));
        assert!(served == v2, "the served envelope is the engine's");
        // by id: the restored checkpoint of this service
        let r = s.post_empty(&format!("/checkpoints/{}/restore", c["id"]));
        assert_eq!(r.status, 200, "{}", r.body);
        let again = s.post_empty("/checkpoints").json();
        assert_eq!(again["digest"], json!(digest));
        // the late records are the fixture's
        let late = s.get("/late?limit=100").json();
        assert_eq!(late["late"].as_array().unwrap().len(), 27);
        assert_eq!(late["late"][0]["event"]["id"], "late499-0");
    }
}

/// Runs `f` with the database's connection (the server stopped).
fn with_db(db: &std::path::Path, f: impl FnOnce(&rusqlite::Connection)) {
    let c = rusqlite::Connection::open(db).unwrap();
    f(&c);
}

/// Rewrites a database of schema 14 as schema 13 left it (migration 0014
/// undone): each checkpoint's lists as one `checkpoint_segments` row per
/// segment, no chains.
fn as_schema_13(c: &rusqlite::Connection) {
    c.execute_batch(
        "CREATE TABLE checkpoint_segments (
             checkpoint INTEGER NOT NULL REFERENCES checkpoints (id) ON DELETE CASCADE,
             part       INTEGER NOT NULL,
             ord        INTEGER NOT NULL,
             segment    INTEGER NOT NULL REFERENCES segments (id),
             first      INTEGER NOT NULL,
             count      INTEGER NOT NULL,
             bytes      INTEGER NOT NULL,
             PRIMARY KEY (checkpoint, part, ord)
         ) WITHOUT ROWID;
         CREATE INDEX checkpoint_segments_segment ON checkpoint_segments (segment);
         WITH RECURSIVE chain (checkpoint, part, seg, depth) AS (
             SELECT checkpoint, part, last, 0 FROM checkpoint_lists
             UNION ALL
             SELECT chain.checkpoint, chain.part, s.prev, chain.depth + 1
               FROM chain JOIN segments s ON s.id = chain.seg WHERE s.prev IS NOT NULL
         )
         INSERT INTO checkpoint_segments (checkpoint, part, ord, segment, first, count, bytes)
         SELECT chain.checkpoint, chain.part,
                row_number() OVER (PARTITION BY chain.checkpoint, chain.part
                                   ORDER BY chain.depth DESC) - 1,
                s.id, s.first, s.count, s.bytes
           FROM chain JOIN segments s ON s.id = chain.seg;
         DROP TRIGGER checkpoint_lists_added;
         DROP TRIGGER checkpoint_lists_removed;
         DROP TRIGGER segments_linked;
         DROP TRIGGER segments_removed;
         DROP TABLE checkpoint_lists;
         DROP INDEX segments_free;
         ALTER TABLE segments DROP COLUMN refs;
         ALTER TABLE segments DROP COLUMN prev;
         ALTER TABLE segments DROP COLUMN first;
         ALTER TABLE segments DROP COLUMN part;
         PRAGMA user_version = 13;",
    )
    .unwrap();
}

/// `(checkpoints, rows naming their lists, segments, free segments)`.
fn manifest(db: &std::path::Path) -> (i64, i64, i64, i64) {
    let mut n = (0, 0, 0, 0);
    with_db(db, |c| {
        n = c
            .query_row(
                "SELECT (SELECT count(*) FROM checkpoints WHERE engine = 'window'),
                        (SELECT count(*) FROM checkpoint_lists),
                        (SELECT count(*) FROM segments),
                        (SELECT count(*) FROM segments WHERE refs = 0)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
    });
    n
}

/// Issue 36 point 3: a checkpoint names each list by its last segment
/// (the others through the chain each segment keeps), so the rows that
/// name checkpoints' histories do not grow with the segments (they grew
/// by one per segment per checkpoint); a database of the previous schema
/// (13: one row per segment per checkpoint) is upgraded at open and serves
/// the same checkpoints; deleting checkpoints frees exactly the segments
/// no remaining one names.
#[test]
fn checkpoints_name_their_lists_by_their_last_segment_and_old_databases_upgrade() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let pipeline = fixture("pipeline.json");
    let args = ["--pipeline", pipeline.as_str(), "--checkpoint-every", "2"];
    let mut s = start(&db, &args);
    let ops = long_workload();
    let half = ops.len() / 2;
    for op in &ops[..half] {
        assert_eq!(op.send(&s).status, 200);
    }
    let older = s.post_empty("/checkpoints").json();
    for op in &ops[half..half + half / 2] {
        assert_eq!(op.send(&s).status, 200);
    }
    let newer = s.post_empty("/checkpoints").json();
    let before = s.get("/checkpoints").json();
    let listed = before["checkpoints"].as_array().unwrap().clone();
    assert!(listed.len() >= 3, "{before}");
    let mut envelopes = Vec::new();
    for c in &listed {
        envelopes.push(download(&s, &format!("/checkpoints/{}", c["id"])).0);
    }
    let snapshot = s.snapshot();
    s.kill();
    let (checkpoints, rows, segments, free) = manifest(&db);
    assert!(segments > 3 * 4, "a long history: {segments} segments");
    // two partitions and the late output: at most three rows each
    assert!(
        rows <= 3 * checkpoints,
        "{rows} rows for {checkpoints} checkpoints"
    );
    assert_eq!(free, 0);
    // As schema 13 left it; the open upgrades it.
    with_db(&db, as_schema_13);
    let mut s = start(&db, &args);
    assert_eq!(s.get("/checkpoints").json(), before);
    for (c, env) in listed.iter().zip(&envelopes) {
        let (again, _) = download(&s, &format!("/checkpoints/{}", c["id"]));
        assert!(&again == env, "checkpoint {} changed", c["id"]);
    }
    assert_eq!(s.snapshot(), snapshot);
    // (read with the server stopped: it holds its database exclusively)
    s.kill();
    assert_eq!(manifest(&db).1, rows, "the same lists");
    let mut s = start(&db, &args);
    // A branch: back to the older checkpoint, then on (new segments after
    // its lists, beside the newer checkpoint's).
    let r = s.post_empty(&format!("/checkpoints/{}/restore", older["id"]));
    assert_eq!(r.status, 200, "{}", r.body);
    for op in &ops[half..] {
        assert_eq!(op.send(&s).status, 200);
    }
    let end = s.post_empty("/checkpoints").json();
    let (env, _) = download(&s, &format!("/checkpoints/{}", end["id"]));
    assert_eq!(end["digest"], json!(checked_digest(&env)));
    // The newer checkpoint (the other branch) is still served whole.
    let (again, _) = download(&s, &format!("/checkpoints/{}", newer["id"]));
    let at = listed.iter().position(|c| c["id"] == newer["id"]).unwrap();
    assert!(again == envelopes[at], "the other branch changed");
    // Deleting every checkpoint but the last frees what only they named.
    s.kill();
    let (_, _, all, _) = manifest(&db);
    let mut s = start(&db, &args);
    for c in s.get("/checkpoints").json()["checkpoints"]
        .as_array()
        .unwrap()
    {
        if c["id"] != end["id"] {
            let st = s.delete(&format!("/checkpoints/{}", c["id"])).status;
            assert_eq!(st, 204, "{c}");
        }
    }
    let snapshot = s.snapshot();
    s.kill();
    let (_, _, left, free) = manifest(&db);
    assert_eq!(free, 0);
    assert!(left < all, "{left} segments left of {all}");
    let mut named = 0i64;
    with_db(&db, |c| {
        named = c
            .query_row(
                "WITH RECURSIVE chain (seg) AS (
                     SELECT last FROM checkpoint_lists
                     UNION
                     SELECT s.prev FROM chain JOIN segments s ON s.id = chain.seg
                      WHERE s.prev IS NOT NULL
                 )
                 SELECT count(*) FROM chain",
                [],
                |r| r.get(0),
            )
            .unwrap();
    });
    assert_eq!(
        named, left,
        "every segment left is named, every named one is left"
    );
    let s = start(&db, &args);
    assert_eq!(s.snapshot(), snapshot);
    let (again, _) = download(&s, &format!("/checkpoints/{}", end["id"]));
    assert!(again == env);
}

#[test]
fn a_database_of_the_previous_schema_gets_its_digests_at_open() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let pipeline = fixture("pipeline.json");
    let args = ["--pipeline", pipeline.as_str(), "--checkpoint-every", "2"];
    let mut s = start(&db, &args);
    let ops = long_workload();
    for op in &ops[..ops.len() / 2] {
        assert_eq!(op.send(&s).status, 200);
    }
    let user = s.post_empty("/checkpoints").json();
    let before = s.get("/checkpoints").json();
    let mut envelopes = Vec::new();
    for c in before["checkpoints"].as_array().unwrap() {
        envelopes.push(download(&s, &format!("/checkpoints/{}", c["id"])).0);
    }
    assert!(envelopes.len() >= 2);
    let snapshot = s.snapshot();
    s.kill();
    // As version 12 of the schema left it: no digests, no block checksums,
    // no chunk records.
    with_db(&db, |c| {
        as_schema_13(c);
        c.execute_batch(
            "DROP TABLE pending_upgrades;
             DROP TABLE segment_chunks;
             ALTER TABLE checkpoints DROP COLUMN digest;
             ALTER TABLE segment_blocks DROP COLUMN sum;
             PRAGMA user_version = 12;",
        )
        .unwrap();
    });
    let s = start(&db, &args);
    assert_eq!(s.get("/checkpoints").json(), before);
    for (c, env) in before["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&envelopes)
    {
        let (again, tag) = download(&s, &format!("/checkpoints/{}", c["id"]));
        assert!(&again == env, "checkpoint {} changed", c["id"]);
        assert_eq!(tag, format!("\"{}\"", c["digest"].as_str().unwrap()));
    }
    assert_eq!(s.snapshot(), snapshot);
    // It goes on as if nothing happened: a restore by id, more calls.
    let r = s.post_empty(&format!("/checkpoints/{}/restore", user["id"]));
    assert_eq!(r.status, 200, "{}", r.body);
    for op in &ops[ops.len() / 2..] {
        assert_eq!(op.send(&s).status, 200);
    }
    let end = s.post_empty("/checkpoints").json();
    let (env, _) = download(&s, &format!("/checkpoints/{}", end["id"]));
    assert_eq!(end["digest"], json!(checked_digest(&env)));
}

/// Issue 36, point 8: a restore stages the segments it writes and ends the
/// staging once it is over; a process killed after the restore committed
/// and before the end left its segments staged for good, and staged
/// segments are never collected while running (once no checkpoint names
/// them, they leaked until some later restart). Opening the database ends
/// any staging: the segments a checkpoint names become ordinary, and
/// nothing else changes.
#[test]
fn a_staging_left_by_a_killed_restore_ends_at_the_next_start() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let pipeline = fixture("pipeline.json");
    let args = ["--pipeline", pipeline.as_str()];
    let mut s = start(&db, &args);
    for op in &long_workload()[..32] {
        assert_eq!(op.send(&s).status, 200);
    }
    assert_eq!(s.post_empty("/checkpoints").status, 201);
    let snapshot = s.snapshot();
    s.kill();
    let segments = |db: &std::path::Path| {
        let mut n = (0i64, 0i64);
        with_db(db, |c| {
            n = c
                .query_row(
                    "SELECT count(*), coalesce(sum(staged), 0) FROM segments",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
        });
        n
    };
    let (count, _) = segments(&db);
    assert!(count > 0, "the checkpoint flushed the history");
    // as a streamed restore that committed and was killed leaves them
    with_db(&db, |c| {
        c.execute("UPDATE segments SET staged = 1", []).unwrap();
    });
    assert_eq!(segments(&db), (count, count));
    let mut s = start(&db, &args);
    assert_eq!(s.snapshot(), snapshot);
    // (read with the server stopped: it holds its database exclusively)
    s.kill();
    assert_eq!(segments(&db), (count, 0), "the staging ended at open");
}

/// Flips one byte of block `block` of the first sources segment of
/// partition `part` (the server stopped); returns the segment's id.
fn flip_a_block(db: &std::path::Path, part: i64, block: i64) -> i64 {
    let mut seg = 0;
    with_db(db, |c| {
        seg = c
            .query_row(
                "SELECT id FROM segments WHERE part = ?1 AND first = 0 LIMIT 1",
                [part],
                |r| r.get(0),
            )
            .unwrap();
        let (id, mut data): (i64, Vec<u8>) = c
            .query_row(
                "SELECT id, data FROM segment_blocks WHERE segment = ?1 AND block = ?2",
                [seg, block],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let at = data.len() / 2;
        data[at] ^= 0x04;
        c.execute(
            "UPDATE segment_blocks SET data = ?2 WHERE id = ?1",
            rusqlite::params![id, data],
        )
        .unwrap();
    });
    seg
}

#[test]
fn a_flipped_byte_in_a_stored_block_names_its_segment_and_is_never_used() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let pipeline = fixture("pipeline.json");
    let args = ["--pipeline", pipeline.as_str(), "--checkpoint-every", "0"];
    let mut s = start(&db, &args);
    // p0 past its first chunk: the damaged block (offsets 512..1024) is in
    // a full chunk, which a restart does not read
    let ops = long_workload();
    for op in &ops[..ops.len() * 2 / 3] {
        assert_eq!(op.send(&s).status, 200);
    }
    let c = s.post_empty("/checkpoints").json();
    assert!(
        s.get("/status").json()["partitions"]["p0"]["offset"]
            .as_i64()
            .unwrap()
            > 4096
    );
    // a clean stop: the id index is stored, a restart reads no such block
    assert!(s.terminate().success());
    let seg = flip_a_block(&db, 0, 1);
    let s = start(&db, &args);
    let needle = format!("segment {seg} block 1: checksum mismatch");
    // A redelivery at an offset of the damaged block (512..1024 of p0),
    // and a duplicate of an event there, on p1: the history cannot be
    // read, the call changes nothing.
    let status = s.get("/status").body;
    let p0 = s.get("/status").json()["partitions"]["p0"]["offset"]
        .as_i64()
        .unwrap();
    let redelivery = format!("[{}]", delivery("p0", Some(600), "e600", "k0", 0, 0));
    let r = s.post("/events", &redelivery);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains(&needle), "{}", r.body);
    let p1 = s.get("/status").json()["partitions"]["p1"]["offset"]
        .as_i64()
        .unwrap();
    // the id of p0's offset 600 is e600 (p0 holds e0, e1, ... in order)
    let dup = format!("[{}]", delivery("p1", Some(p1 + 1), "e600", "k0", 0, 0));
    let r = s.post("/events", &dup);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains(&needle), "{}", r.body);
    assert_eq!(s.get("/status").body, status, "nothing changed");
    // The envelope is never served with other content: it ends short (or,
    // if the damage is found before the head is sent, the connection
    // closes with no answer at all).
    let r = s
        .client
        .get(s.url(&format!("/checkpoints/{}", c["id"])))
        .send();
    if let Ok(r) = r {
        let announced = r.content_length();
        if let Ok(b) = r.bytes() {
            assert!(
                Some(b.len() as u64) != announced,
                "a damaged envelope was served whole"
            );
        }
    }
    assert!(s.stderr().contains(&needle), "{}", s.stderr());
    // What does not need the damaged block goes on: new events, and a
    // checkpoint (its digest comes from stored chain values).
    let fresh = format!(
        "[{}]",
        delivery("p0", Some(p0 + 1), "fresh", "k0", 1 << 40, 1)
    );
    assert_eq!(s.post("/events", &fresh).status, 200);
    assert_eq!(s.post_empty("/checkpoints").status, 201);
    // A restart that must read the block (adding back the ids of segments
    // the id index does not hold) refuses to start, naming it.
    drop(s);
    with_db(&db, |c| {
        // forget the id index: a restart adds every id back from the blocks
        c.execute_batch("DELETE FROM id_runs; DELETE FROM id_parts; DELETE FROM id_filters; DELETE FROM id_index;")
            .unwrap();
    });
    let e = try_start(&db, &args).err().expect("the restart is refused");
    assert!(e.contains(&needle), "{e}");
}

#[test]
fn the_documented_python_checker_accepts_served_envelopes_and_refuses_a_damaged_one() {
    if !python3_available("the checker of docs/checkpoint.md") {
        return;
    }
    let dir = tempdir();
    let script = dir.path().join("check_digest.py");
    std::fs::write(&script, documented_python("docs/checkpoint.md")).unwrap();
    let check = |envelope: &[u8]| {
        let file = dir.path().join("checkpoint.json");
        std::fs::write(&file, envelope).unwrap();
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(&file)
            .output()
            .expect("python3 runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The documented example envelope.
    let doc = std::fs::read_to_string(format!("{ROOT}/docs/checkpoint.md")).unwrap();
    let example = doc
        .lines()
        .find(|l| l.starts_with(r#"{"digest":""#))
        .expect("the example envelope");
    let d = checked_digest(example.as_bytes());
    assert_eq!(
        check(example.as_bytes()),
        (Some(0), format!("digest ok: {d}\n"), String::new())
    );
    // An envelope a server serves: partitions and late records past
    // several chunks, escaped keys.
    let pipeline = fixture("pipeline.json");
    let s = start(&dir.path().join("db"), &["--pipeline", pipeline.as_str()]);
    for op in long_workload() {
        assert_eq!(op.send(&s).status, 200);
    }
    let c = s.post_empty("/checkpoints").json();
    let (env, _) = download(&s, &format!("/checkpoints/{}", c["id"]));
    let digest = c["digest"].as_str().unwrap();
    assert_eq!(
        check(&env),
        (Some(0), format!("digest ok: {digest}\n"), String::new())
    );
    // One value changed: refused, exit status 1.
    let text = String::from_utf8(env).unwrap();
    let damaged = text.replacen(r#"["e4097","#, r#"["e4O97","#, 1);
    assert_ne!(damaged, text);
    let (code, out, err) = check(damaged.as_bytes());
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(
        err.starts_with(&format!("digest mismatch: the file says {digest}")),
        "{err}"
    );
}

/// The example of docs/checkpoint.md is what the engine writes for the
/// operations it lists.
#[test]
fn the_documented_example_is_what_the_engine_writes() {
    use streamforge::engine::{Delivery, Event, Pipeline, Processor};
    let doc = std::fs::read_to_string(format!("{ROOT}/docs/checkpoint.md")).unwrap();
    let example = doc
        .lines()
        .find(|l| l.starts_with(r#"{"digest":""#))
        .expect("the example envelope");
    let pipeline = Pipeline::from_json(br#"{"partitions":["p0","p1"],"windows":{"w":{"kind":"fixed","size":10},"s":{"kind":"session","gap":5}},"lateness":2}"#).unwrap();
    let mut p = Processor::new(pipeline);
    let d = |part: &str, offset: i64, id: &str, ts: i64, value: i64| Delivery {
        partition: part.into(),
        offset: Some(offset),
        event: Event {
            id: id.into(),
            key: "k".into(),
            timestamp: ts,
            value,
        },
    };
    p.ingest(vec![
        d("p0", 0, "a", 3, 5),
        d("p0", 1, "b", 12, -1),
        d("p1", 0, "a", 3, 5),
    ])
    .unwrap();
    p.advance("p0", 11).unwrap();
    p.mark_idle("p1").unwrap();
    p.ingest(vec![d("p0", 2, "c", 1, 7)]).unwrap();
    let cp = p.checkpoint().unwrap();
    assert_eq!(String::from_utf8(cp).unwrap(), example);
    assert_eq!(example.len(), 869);
}

/// Redeliveries and duplicates of events whose first delivery is in a
/// stored history block (found by the block's item ranges, issue 35's
/// eleventh pass) answer byte for byte as they do on a server whose
/// history is all still in memory: the same no-op for an exact
/// redelivery, the same conflicts for changed content, the same
/// duplicates, at offsets on both sides of several 512-item block
/// boundaries, after a restart (a cold block cache) and then again with
/// the blocks cached.
#[test]
fn redeliveries_of_events_in_stored_blocks_answer_as_from_memory() {
    let dir = tempdir();
    let pipeline = fixture("pipeline.json");
    let args = ["--pipeline", pipeline.as_str(), "--checkpoint-every", "0"];
    let (db_a, db_b) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = start(&db_a, &args);
    let b = start(&db_b, &args);
    // p0: 1,600 events (four blocks), keys that need escapes and ids of
    // varying length, so that items differ in size
    let keys = ["k0", "é", "q\\\"uote", "back\\\\slash", "a,b[c]"];
    let event = |i: i64, value: i64| -> (String, String, i64, i64) {
        let id = format!("h{}{}", "x".repeat((i % 7) as usize), i);
        let key = keys[(i % keys.len() as i64) as usize].to_string();
        (id, key, 1_000 + i / 3, value)
    };
    const N: i64 = 1_600;
    for chunk in (0..N).collect::<Vec<_>>().chunks(400) {
        let items: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let (id, key, ts, v) = event(i, i % 13 - 6);
                delivery("p0", Some(i), &id, &key, ts, v)
            })
            .collect();
        let body = format!("[{}]", items.join(","));
        let (ra, rb) = (a.post("/events", &body), b.post("/events", &body));
        assert_eq!(ra.status, 200, "{}", ra.body);
        assert_eq!((ra.status, &ra.body), (rb.status, &rb.body));
    }
    // a's history goes to stored blocks; b's stays in memory
    assert_eq!(a.post_empty("/checkpoints").status, 201);
    assert!(a.terminate().success());
    let a = start(&db_a, &args);
    let mut p1 = 0i64;
    let mut conflicts = 0;
    for round in 0..2 {
        for &i in &[
            0, 1, 255, 511, 512, 513, 700, 1023, 1024, 1025, 1535, 1536, 1599,
        ] {
            let (id, key, ts, v) = event(i, i % 13 - 6);
            let probes = [
                // the same delivery again: a no-op
                delivery("p0", Some(i), &id, &key, ts, v),
                // the same offset with another value: a conflict
                delivery("p0", Some(i), &id, &key, ts, v + 1),
                // the same event on another partition: a duplicate
                delivery("p1", Some(p1), &id, &key, ts, v),
                // the same id with another key: a conflict
                delivery("p1", Some(p1 + 1), &id, "other", ts, v),
            ];
            for p in probes {
                let body = format!("[{p}]");
                let (ra, rb) = (a.post("/events", &body), b.post("/events", &body));
                assert_eq!(
                    (ra.status, &ra.body),
                    (rb.status, &rb.body),
                    "round {round}, event {i}: {p}"
                );
                if ra.status == 200 {
                    if p.contains("\"p1\"") {
                        p1 += 1;
                    }
                } else {
                    conflicts += 1;
                }
            }
        }
    }
    // every changed redelivery was found to conflict with the stored event
    assert!(conflicts >= 2 * 13 * 2, "{conflicts} conflicts");
    assert_eq!(a.get("/status").body, b.get("/status").body);
}
