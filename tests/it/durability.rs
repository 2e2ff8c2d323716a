//! Durability against the real binary: SIGKILL at seeded points (including
//! during automatic checkpoints), graceful shutdown, storage failure, and
//! refusing to start on an inconsistent or foreign database.

use crate::support::server;

use std::collections::BTreeMap;
use std::time::Duration;
use streamforge::engine::ChangeOp;
use streamforge::store::chunk;

use server::*;

/// What an acknowledged op guarantees: per-partition consumed offset and
/// reported progress at least these.
#[derive(Default, Debug)]
struct Acked {
    offsets: BTreeMap<String, i64>,
    progress: BTreeMap<String, i64>,
}

impl Acked {
    fn record(&mut self, op: &Op) {
        match op {
            Op::Batch(b) => {
                let v: serde_json::Value = serde_json::from_str(b).unwrap();
                for d in v.as_array().unwrap() {
                    let p = d["partition"].as_str().unwrap().to_string();
                    let o = d["offset"].as_i64().unwrap();
                    let e = self.offsets.entry(p).or_insert(-1);
                    *e = (*e).max(o);
                }
            }
            Op::Advance(b) => {
                let v: serde_json::Value = serde_json::from_str(b).unwrap();
                let p = v["partition"].as_str().unwrap().to_string();
                let w = v["watermark"].as_i64().unwrap();
                let e = self.progress.entry(p).or_insert(i64::MIN);
                *e = (*e).max(w);
            }
            Op::Idle(_) => {}
        }
    }

    fn check(&self, s: &Server) {
        let st = s.get("/status").json();
        for (p, o) in &self.offsets {
            let have = st["partitions"][p]["offset"].as_i64().unwrap();
            assert!(
                have >= *o,
                "acknowledged offset {o} of {p} lost (have {have})"
            );
        }
        for (p, w) in &self.progress {
            let have = st["partitions"][p]["progress"].as_i64().unwrap_or(i64::MIN);
            assert!(
                have >= *w,
                "acknowledged progress {w} of {p} lost (have {have})"
            );
        }
    }
}

/// The changelog, late output and snapshot of `ops` sent to a fresh server
/// on `db` without interruption: what every interrupted run must end with.
fn uninterrupted(
    db: &std::path::Path,
    args: &[&str],
    ops: &[Op],
) -> (Vec<String>, Vec<String>, String) {
    let s = start(db, args);
    for op in ops {
        assert_eq!(op.send(&s).status, 200);
    }
    (s.all_changes(), s.all_late(), s.snapshot())
}

#[test]
fn sigkill_at_seeded_points_loses_nothing_acknowledged() {
    let dir = tempdir();
    let ops = workload(42, 160);
    let args = ["--checkpoint-every", "4"];
    let reference = uninterrupted(&dir.path().join("ref.db"), &args, &ops);
    assert!(reference.0.len() > 50, "workload too small");

    let db = dir.path().join("crash.db");
    let mut s = start(&db, &args);
    let mut rng = Rng(2024);
    let mut acked = Acked::default();
    let mut kills = 0;
    let mut i = 0;
    while i < ops.len() {
        let kill_here = rng.below(6) == 0 && kills < 30;
        if !kill_here {
            let r = ops[i].send(&s);
            assert_eq!(r.status, 200, "op {i}: {}", r.body);
            acked.record(&ops[i]);
            i += 1;
            continue;
        }
        kills += 1;
        match kills % 3 {
            // Right after an acknowledgement that is due an automatic
            // checkpoint: the checkpointer thread is likely mid-transaction.
            0 => {
                while i < ops.len() && s.metric("streamforge_logged_commands") as u64 != 3 {
                    assert_eq!(ops[i].send(&s).status, 200);
                    acked.record(&ops[i]);
                    i += 1;
                }
                if i < ops.len() {
                    assert_eq!(ops[i].send(&s).status, 200);
                    acked.record(&ops[i]);
                    i += 1;
                }
                s.kill();
            }
            // Right after an acknowledgement.
            1 => {
                assert_eq!(ops[i].send(&s).status, 200);
                acked.record(&ops[i]);
                i += 1;
                s.kill();
            }
            // While a call is in flight: it may or may not be applied; it is
            // not acknowledged, so the client re-sends it.
            _ => {
                let op = ops[i].clone();
                let base = s.base.clone();
                let client = s.client.clone();
                let inflight = std::thread::spawn(move || {
                    let rb = match &op {
                        Op::Batch(b) => client
                            .post(format!("{base}/events"))
                            .header("content-type", "application/json")
                            .body(b.clone()),
                        Op::Advance(b) => client
                            .post(format!("{base}/watermarks"))
                            .header("content-type", "application/json")
                            .body(b.clone()),
                        Op::Idle(p) => client.post(format!("{base}/partitions/{p}/idle")),
                    };
                    rb.send().map(|r| r.status().as_u16()).ok()
                });
                std::thread::sleep(Duration::from_micros(rng.below(3000)));
                s.kill();
                if inflight.join().unwrap() == Some(200) {
                    acked.record(&ops[i]);
                }
                // Re-send it after the restart either way (safe to retry).
            }
        }
        s = start(&db, &args);
        acked.check(&s);
    }
    assert!(kills >= 20, "only {kills} kills");
    assert_eq!(
        s.all_changes(),
        reference.0,
        "changelog differs from the uninterrupted run"
    );
    assert_eq!(s.all_late(), reference.1);
    assert_eq!(s.snapshot(), reference.2);
}

#[test]
fn graceful_shutdown_checkpoints_and_restart_replays_nothing() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let ops = workload(5, 30);
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    for op in &ops {
        assert_eq!(op.send(&s).status, 200);
    }
    let snap = (s.all_changes(), s.all_late(), s.snapshot());
    assert_eq!(s.metric("streamforge_logged_commands") as usize, ops.len());
    assert_eq!(
        s.get("/checkpoints").json()["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // An open stream and a long poll do not hold up the shutdown.
    let stream = s
        .client
        .get(s.url("/changes/stream?after=0"))
        .send()
        .unwrap();
    let poll = {
        let (c, u) = (
            s.client.clone(),
            s.url("/changes?after=100000&wait_ms=30000"),
        );
        std::thread::spawn(move || c.get(u).send().map(|r| r.status().as_u16()))
    };
    wait_until("waiters", DEADLINE, || {
        (s.metric("streamforge_waiters") >= 2.0).then_some(())
    });
    let t = std::time::Instant::now();
    let status = s.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert!(t.elapsed() < Duration::from_secs(20));
    let _ = poll.join();
    drop(stream);

    let s = start(&db, &["--checkpoint-every", "0"]);
    assert_eq!(
        s.metric("streamforge_logged_commands"),
        0.0,
        "restart replayed commands"
    );
    let list = s.get("/checkpoints").json();
    assert_eq!(list["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!((s.all_changes(), s.all_late(), s.snapshot()), snap);
}

#[test]
fn storage_failure_answers_503_and_keeps_state_consistent() {
    let dir = tempdir();
    let db = dir.path().join("db");
    // Shared: the test opens the database while the server runs.
    let s = start(&db, &["--db-shared"]);
    for p in ["p0", "p1", "p2", "p3"] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":0}}"#),
        );
    }
    s.ok("/events", &delivery("p0", Some(0), "a", "k", 5, 1));
    for p in ["p1", "p2", "p3"] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":20000}}"#),
        );
    }
    let before = (s.snapshot(), s.all_changes());
    // Make every write of a change fail, from outside the service.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER fail_changes BEFORE INSERT ON changes BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
    )
    .unwrap();
    // This advance produces changes: the engine applies it, the commit fails.
    let r = s.post("/watermarks", r#"{"partition":"p0","watermark":20000}"#);
    r.problem(503, "unavailable");
    assert_eq!(
        (s.snapshot(), s.all_changes()),
        before,
        "a 503 applied nothing"
    );
    let r2 = s.post(
        "/events",
        &format!("[{}]", delivery("p1", Some(0), "b", "k", 20_000, 1)),
    );
    assert_eq!(
        r2.status, 200,
        "a call without changes still commits: {}",
        r2.body
    );
    let mid = s.snapshot();
    assert_ne!(mid, before.0);
    conn.execute_batch("DROP TRIGGER fail_changes;").unwrap();
    // The failed advance was not applied: re-sending it produces the changes now.
    let r = s.ok("/watermarks", r#"{"partition":"p0","watermark":20000}"#);
    assert!(r.contains("\"upsert\""), "{r}");
    assert!(s.all_changes().len() > before.1.len());
    assert_eq!(s.get("/readyz").status, 200);
    // And a restart agrees with the running process.
    let snap = (s.snapshot(), s.all_changes());
    drop(s);
    // (closed: the server, started without --db-shared, holds the
    // database exclusively)
    drop(conn);
    let s = start(&db, &[]);
    assert_eq!((s.snapshot(), s.all_changes()), snap);
}

#[test]
fn the_stored_pipeline_wins_and_a_conflicting_one_is_refused() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let a = dir.path().join("a.json");
    let reordered = dir.path().join("b.json");
    let other = dir.path().join("c.json");
    std::fs::write(&a, r#"{"partitions":["x","y"],"windows":{"f":{"kind":"fixed","size":10},"s":{"kind":"session","gap":5}},"lateness":3}"#).unwrap();
    std::fs::write(&reordered, r#"{"lateness":3,"windows":{"s":{"gap":5,"kind":"session"},"f":{"size":10,"kind":"fixed"}},"partitions":["y","x"]}"#).unwrap();
    std::fs::write(
        &other,
        r#"{"partitions":["x","y"],"windows":{"f":{"kind":"fixed","size":10}},"lateness":3}"#,
    )
    .unwrap();
    let s = start(&db, &["--pipeline", a.to_str().unwrap()]);
    s.ok("/events", &delivery("x", Some(0), "e", "k", 1, 1));
    let pipeline = s.get("/pipeline").body;
    drop(s);
    // Equivalent, reordered: fine. No --pipeline: the stored one is resumed.
    let s = start(&db, &["--pipeline", reordered.to_str().unwrap()]);
    assert_eq!(s.get("/pipeline").body, pipeline);
    drop(s);
    let s = start(&db, &[]);
    assert_eq!(s.get("/pipeline").body, pipeline);
    assert_eq!(s.get("/status").json()["partitions"]["x"]["offset"], 0);
    drop(s);
    let err = try_start(&db, &["--pipeline", other.to_str().unwrap()])
        .err()
        .expect("refused");
    assert!(err.contains("not equivalent"), "{err}");
}

#[test]
fn a_replay_that_disagrees_with_the_store_refuses_to_start() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    for op in workload(9, 20) {
        assert_eq!(op.send(&s).status, 200);
    }
    assert!(!s.all_changes().is_empty());
    s.kill();
    // the first stored change, an upsert, becomes a retract
    let first_chunk = |conn: &rusqlite::Connection| {
        let body: Vec<u8> = conn
            .query_row("SELECT body FROM changes WHERE seq = 1", [], |r| r.get(0))
            .unwrap();
        chunk::decode(1, &body).unwrap()
    };
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut changes = first_chunk(&conn);
    assert_eq!(changes[0].op, ChangeOp::Upsert);
    changes[0].op = ChangeOp::Retract;
    conn.execute(
        "UPDATE changes SET body = ?1 WHERE seq = 1",
        [chunk::encode(&changes)],
    )
    .unwrap();
    drop(conn);
    let err = try_start(&db, &[]).err().expect("refused");
    assert!(
        err.contains("replays as") && err.contains("change 1"),
        "{err}"
    );
    // Nothing was "repaired".
    let conn = rusqlite::Connection::open(&db).unwrap();
    assert_eq!(first_chunk(&conn)[0].op, ChangeOp::Retract);
}

/// Automatic checkpoints serialize outside the engines lock while other
/// calls keep being logged: the checkpoint must remove only the commands it
/// covers. A large state makes each checkpoint slow to serialize; two
/// producers keep writing meanwhile, through several automatic checkpoints;
/// after SIGKILL the restarted service has exactly the state and changelog
/// it acknowledged.
#[test]
fn automatic_checkpoints_under_concurrent_ingest_cover_exactly_their_commands() {
    let dir = tempdir();
    let db = dir.path().join("auto.db");
    let mut s = start(&db, &["--checkpoint-every", "3"]);
    // a state big enough that serializing it takes a while
    for b in 0..4i64 {
        let batch: Vec<String> = (0..20_000i64)
            .map(|i| {
                let n = b * 20_000 + i;
                delivery(
                    "p3",
                    Some(n),
                    &format!("big{n}"),
                    &format!("k{}", n % 60),
                    n % 9_000,
                    n % 7,
                )
            })
            .collect();
        assert_eq!(
            s.post("/events", &format!("[{}]", batch.join(","))).status,
            200
        );
    }
    // big in history (80,000 deliveries to write), yet under the 1,024
    // live buckets from which checkpoints are spaced by the live state
    // (a_large_live_state_spaces_automatic_checkpoints_by_its_size), so
    // `--checkpoint-every 3` decides here
    let live = s.get("/status").json()["live_buckets"].as_u64().unwrap();
    assert!(live < 1_024, "{live} live buckets");
    std::thread::scope(|scope| {
        for (t, part) in ["p0", "p1"].into_iter().enumerate() {
            let s = &s;
            scope.spawn(move || {
                for i in 0..150i64 {
                    let body =
                        delivery(part, Some(i), &format!("t{t}e{i}"), "k", i * 37 % 20_000, i);
                    assert_eq!(s.post("/events", &body).status, 200);
                    if i % 10 == 9 {
                        let w = format!(r#"{{"partition":"{part}","watermark":{}}}"#, i * 100);
                        assert_eq!(s.post("/watermarks", &w).status, 200);
                    }
                }
            });
        }
    });
    s.ok("/partitions/p2/idle", "");
    s.ok("/watermarks", r#"{"partition":"p3","watermark":20000}"#);
    wait_until("automatic checkpoints", Duration::from_secs(60), || {
        (s.metric("streamforge_checkpoints_total") >= 3.0).then_some(())
    });
    let state = s.snapshot();
    let changes = s.all_changes();
    let late = s.all_late();
    assert!(!changes.is_empty());
    s.kill();
    let s = start(&db, &[]);
    assert_eq!(s.snapshot(), state);
    assert_eq!(s.all_changes(), changes);
    assert_eq!(s.all_late(), late);
}

/// Deliveries are logged in their binary form (kind `deliveries`, about a
/// fifth of the JSON received): a process killed after them replays the
/// same deliveries on restart. Then the same log, rewritten as logs were
/// written before the binary form (kind `events`: the request body as
/// received, LZ4-compressed from 1 KiB, `commands.encoding` 1), replays the
/// same way. The workload's batches are merged into bodies of many
/// deliveries over four partitions and several windows; every restart must
/// agree with an uninterrupted run, byte for byte (a replay that disagrees
/// with the stored output refuses to start).
#[test]
fn command_bodies_replay_exactly_after_sigkill_in_both_forms() {
    let dir = tempdir();
    // consecutive batches merged into one large JSON array each
    let mut ops: Vec<Op> = Vec::new();
    let mut pending: Vec<serde_json::Value> = Vec::new();
    let flush = |pending: &mut Vec<serde_json::Value>, ops: &mut Vec<Op>| {
        if !pending.is_empty() {
            ops.push(Op::Batch(serde_json::to_string(&*pending).unwrap()));
            pending.clear();
        }
    };
    for op in workload(77, 600) {
        match op {
            Op::Batch(b) => {
                let v: serde_json::Value = serde_json::from_str(&b).unwrap();
                pending.extend(v.as_array().unwrap().iter().cloned());
                if pending.len() >= 40 {
                    flush(&mut pending, &mut ops);
                }
            }
            other => {
                flush(&mut pending, &mut ops);
                ops.push(other);
            }
        }
    }
    flush(&mut pending, &mut ops);
    let large = ops
        .iter()
        .filter(|o| matches!(o, Op::Batch(b) if b.len() >= 2048))
        .count();
    assert!(large >= 10, "only {large} large bodies");

    let args = ["--checkpoint-every", "0"];
    let reference = uninterrupted(&dir.path().join("ref.db"), &args, &ops);
    assert!(reference.0.len() > 100, "workload too small");

    let db = dir.path().join("crash.db");
    let mut s = start(&db, &args);
    for (i, op) in ops.iter().enumerate() {
        let r = op.send(&s);
        assert_eq!(r.status, 200, "op {i}: {}", r.body);
        if i % 9 == 8 {
            s.kill();
            s = start(&db, &args);
        }
    }
    // one row per call, the deliveries far smaller than what was
    // received; every restart above replayed them (read with the server
    // stopped: it holds its database exclusively)
    s.kill();
    let rows: Vec<(i64, String, i64, Vec<u8>)> = rusqlite::Connection::open(&db)
        .unwrap()
        .prepare("SELECT id, kind, encoding, body FROM commands ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), ops.len());
    let (mut stored, mut received) = (0, 0);
    for (row, op) in rows.iter().zip(&ops) {
        if let Op::Batch(b) = op {
            assert_eq!((row.1.as_str(), row.2), ("deliveries", 0));
            stored += row.3.len();
            received += b.len();
        }
    }
    assert!(
        stored * 4 < received,
        "{stored} bytes stored for {received} received"
    );
    let mut s = start(&db, &args);
    assert_eq!(s.metric("streamforge_logged_commands") as usize, ops.len());
    assert_eq!(s.all_changes(), reference.0, "changelog differs");
    assert_eq!(s.all_late(), reference.1);
    assert_eq!(s.snapshot(), reference.2);
    s.kill();
    let conn = rusqlite::Connection::open(&db).unwrap();

    // The same log as an earlier version wrote it.
    let mut packed = 0;
    for ((id, ..), op) in rows.iter().zip(&ops) {
        if let Op::Batch(b) = op {
            let (encoding, body) = if b.len() >= 1024 {
                packed += 1;
                (1, lz4_flex::block::compress_prepend_size(b.as_bytes()))
            } else {
                (0, b.as_bytes().to_vec())
            };
            conn.execute(
                "UPDATE commands SET kind = 'events', encoding = ?1, body = ?2 WHERE id = ?3",
                rusqlite::params![encoding, body, id],
            )
            .unwrap();
        }
    }
    assert!(packed >= 10, "only {packed} compressed bodies");
    drop(conn);
    let s = start(&db, &args);
    assert_eq!(s.metric("streamforge_logged_commands") as usize, ops.len());
    assert_eq!(s.all_changes(), reference.0, "changelog differs");
    assert_eq!(s.all_late(), reference.1);
    assert_eq!(s.snapshot(), reference.2);
}

/// The server holds its database exclusively (SQLite's `unix-excl`: no
/// lock system calls per commit, no `-shm` file): another process cannot
/// read it while the server runs, and can once it stops; with
/// `--db-shared` it can meanwhile, and both open the same file in turn.
#[test]
fn the_database_is_held_exclusively_unless_shared() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let shm = std::path::PathBuf::from(format!("{}-shm", db.display()));
    let logged = |db: &std::path::Path| -> rusqlite::Result<i64> {
        let c = rusqlite::Connection::open(db)?;
        c.busy_timeout(Duration::from_millis(50))?;
        c.query_row("SELECT count(*) FROM commands", [], |r| r.get(0))
    };
    let mut s = start(&db, &[]);
    s.ok("/events", &delivery("p0", Some(0), "a", "k", 5, 1));
    let e = logged(&db).expect_err("another process read the database");
    assert!(e.to_string().contains("locked"), "{e}");
    assert!(!shm.exists(), "the WAL index is in the server's memory");
    s.kill();
    assert_eq!(logged(&db).unwrap(), 1);
    let mut s = start(&db, &["--db-shared"]);
    s.ok("/events", &delivery("p0", Some(1), "b", "k", 6, 1));
    assert_eq!(logged(&db).unwrap(), 2, "read while the server runs");
    assert!(shm.exists());
    s.kill();
    let mut s = start(&db, &[]);
    s.ok("/events", &delivery("p0", Some(2), "c", "k", 7, 1));
    assert!(logged(&db).is_err());
    s.kill();
    assert_eq!(logged(&db).unwrap(), 3);
}

/// Runs `streamforge serve` on `db` expecting it to exit by itself (a
/// refused start); kills it and fails if it is still running at the
/// deadline. Returns its exit status and stderr.
fn refused_start(db: &std::path::Path) -> (std::process::ExitStatus, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(db)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn streamforge");
    let status = {
        let end = std::time::Instant::now() + DEADLINE;
        loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if std::time::Instant::now() > end {
                let _ = child.kill();
                panic!("a second server on the same database kept running");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let out = child.wait_with_output().expect("output");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening on"),
        "the refused server listened"
    );
    (status, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn one_database_one_server_and_kill_9_never_leaves_a_stale_lock() {
    let dir = tempdir();
    let db = dir.path().join("sf.db");
    let ops = workload(22, 40);
    // Checkpoints taken by calls, not automatically: an automatic one
    // stores and then prunes on the checkpointer thread, so a listing
    // read while it runs could change on its own during the test.
    let mut first = start(&db, &["--checkpoint-every", "1000000"]);
    let mut acked = Acked::default();
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(op.send(&first).status, 200);
        acked.record(op);
        if i % 7 == 6 {
            assert_eq!(first.post_empty("/checkpoints").status, 201);
        }
    }
    let before = (first.all_changes(), first.all_late(), first.snapshot());
    let checkpoints = first.get("/checkpoints").body;

    // A second server on the same database, also through another spelling
    // of its path: refused at once, naming the database and the holder.
    let addr = first.base.trim_start_matches("http://").to_string();
    let other_spelling = dir.path().join(".").join("sf.db");
    for path in [&db, &other_spelling] {
        let (status, stderr) = refused_start(path);
        assert_eq!(status.code(), Some(1), "stderr: {stderr}");
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        assert!(stderr.contains(&format!("pid {}", first.pid())), "{stderr}");
        assert!(stderr.contains(&format!("listening on {addr}")), "{stderr}");
        assert!(stderr.contains("in use by another streamforge process"));
    }
    // The first one serves on, its state and checkpoints untouched, and
    // takes more writes.
    assert_eq!(
        (first.all_changes(), first.all_late(), first.snapshot()),
        before
    );
    assert_eq!(first.get("/checkpoints").body, checkpoints);
    let more = workload(23, 60);
    // the second workload continues the first's offsets: send only the
    // advances and batches that the first accepts, as acknowledged writes
    for op in &more {
        let r = op.send(&first);
        assert!(r.status == 200 || r.status == 409, "{}", r.body);
        if r.status == 200 {
            acked.record(op);
        }
    }
    let acknowledged = (first.all_changes(), first.all_late(), first.snapshot());

    // kill -9: the operating system releases the lock; a new server starts
    // without anyone removing a file, and recovers everything acknowledged.
    first.kill();
    let second = start(&db, &["--checkpoint-every", "7"]);
    acked.check(&second);
    assert_eq!(
        (second.all_changes(), second.all_late(), second.snapshot()),
        acknowledged
    );
    // and now it is the one that holds the database
    let (status, stderr) = refused_start(&db);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("pid {}", second.pid())),
        "{stderr}"
    );
}

/// Sends `op`; `None` when the server is gone (the connection dropped).
fn try_op(s: &Server, op: &Op) -> Option<u16> {
    let rb = match op {
        Op::Batch(b) => s.client.post(s.url("/events")).body(b.clone()),
        Op::Advance(b) => s.client.post(s.url("/watermarks")).body(b.clone()),
        Op::Idle(p) => s.client.post(s.url(&format!("/partitions/{p}/idle"))),
    };
    rb.header("content-type", "application/json")
        .send()
        .ok()
        .map(|r| r.status().as_u16())
}

/// The digest of a version 2 envelope's state, computed from the state
/// (docs/checkpoint.md), after checking that it is the one the envelope
/// carries.
fn envelope_digest(envelope: &str) -> String {
    let env: serde_json::Value = serde_json::from_str(envelope).expect("an envelope");
    let digest = crate::support::engine::digest_of(&env["state"]);
    assert_eq!(
        env["digest"],
        serde_json::json!(digest),
        "the envelope's own digest"
    );
    assert_eq!(env["version"], 2);
    digest
}

/// `POST /checkpoints` (id, envelope); `None` when the server is gone.
fn try_checkpoint(s: &Server) -> Option<(i64, String)> {
    let r = s.client.post(s.url("/checkpoints")).send().ok()?;
    assert_eq!(r.status().as_u16(), 201);
    let v: serde_json::Value = r.json().ok()?;
    let id = v["id"].as_i64()?;
    let envelope = s
        .client
        .get(s.url(&format!("/checkpoints/{id}")))
        .send()
        .ok()?
        .text()
        .ok()?;
    assert_eq!(
        envelope_digest(&envelope),
        v["digest"].as_str().unwrap(),
        "the envelope served is not the one the checkpoint answered for"
    );
    assert_eq!(envelope.len() as u64, v["bytes"].as_u64().unwrap());
    Some((id, envelope))
}

#[test]
fn incremental_checkpoints_give_the_envelope_of_one_taken_at_the_end() {
    // Server A checkpoints after every call (each flushes a little history
    // into segments of its own, on four partitions, and the newest three
    // are kept) and is killed and restarted twice on the way; server B
    // takes one checkpoint at the end. Same calls, same envelopes.
    let dir = tempdir();
    let ops = workload(44, 240);
    let mut a = start(&dir.path().join("a"), &["--checkpoint-every", "1"]);
    let b = start(&dir.path().join("b"), &["--checkpoint-every", "0"]);
    let third = ops.len() / 3;
    let mut mid = None;
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(op.send(&a).status, 200);
        assert_eq!(op.send(&b).status, 200);
        if i == third || i == 2 * third {
            a.kill();
            a = start(&dir.path().join("a"), &["--checkpoint-every", "1"]);
        }
        if i == ops.len() / 2 {
            mid = Some((try_checkpoint(&a).unwrap(), try_checkpoint(&b).unwrap()));
        }
    }
    let ((_, mid_a), (_, mid_b)) = mid.unwrap();
    assert_eq!(mid_a, mid_b, "the envelopes differ halfway");
    let listed = a.get("/checkpoints");
    let autos = listed.json()["checkpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", listed.body))
        .len();
    assert!(autos >= 3, "{autos} checkpoints on A");
    let (_, end_a) = try_checkpoint(&a).unwrap();
    let (_, end_b) = try_checkpoint(&b).unwrap();
    assert_eq!(end_a, end_b, "the envelopes differ at the end");
    assert!(
        end_a.contains(r#""late":[["#),
        "the workload has late records"
    );
    assert_eq!(
        (a.all_changes(), a.all_late(), a.snapshot()),
        (b.all_changes(), b.all_late(), b.snapshot())
    );
    // The halfway checkpoint, whose history the later ones share, is still
    // served whole after every later checkpoint and rotation.
    let list = a.get("/checkpoints").json();
    for c in list["checkpoints"].as_array().unwrap() {
        let id = c["id"].as_i64().unwrap();
        let env = a.get(&format!("/checkpoints/{id}")).body;
        assert_eq!(envelope_digest(&env), c["digest"].as_str().unwrap());
    }
}

#[test]
fn sigkill_inside_incremental_checkpoints_and_deletions_loses_nothing() {
    let dir = tempdir();
    let ops = workload(45, 200);
    let (x_at, y_at) = (60, 120);
    // The reference: no faults, no automatic checkpoints.
    let r = start(&dir.path().join("ref"), &["--checkpoint-every", "0"]);
    let mut reference = (None, None);
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(op.send(&r).status, 200);
        if i == x_at {
            reference.0 = try_checkpoint(&r);
        }
        if i == y_at {
            reference.1 = try_checkpoint(&r);
        }
    }
    let (ref_x, ref_y) = (reference.0.unwrap().1, reference.1.unwrap().1);
    let (_, ref_end) = try_checkpoint(&r).unwrap();
    let ref_state = (r.all_changes(), r.all_late(), r.snapshot());
    drop(r);

    for (fault, args) in [
        ("kill_in_checkpoint=3", &["--checkpoint-every", "4"][..]),
        ("kill_after_checkpoint=3", &["--checkpoint-every", "4"][..]),
        // the 2nd deletion: a rotated automatic checkpoint (keep 1)
        (
            "kill_in_delete=2",
            &["--checkpoint-every", "5", "--keep-checkpoints", "1"][..],
        ),
        // the 1st deletion: checkpoint X, whose segments Y shares
        ("kill_in_delete=1", &["--checkpoint-every", "0"][..]),
    ] {
        let db = dir.path().join(fault);
        let mut s = start_env(&db, args, &[("STREAMFORGE_FAULTS", fault)]);
        let mut died = 0;
        let restart = |s: &mut Server, died: &mut u32| {
            s.kill();
            *died += 1;
            *s = start(&db, args);
        };
        let mut acked = Acked::default();
        let (mut x, mut y) = (None, None);
        for (i, op) in ops.iter().enumerate() {
            let status = match try_op(&s, op) {
                Some(st) => st,
                None => {
                    // Killed before answering: sent again (offsets make it
                    // safe), as a client retries.
                    restart(&mut s, &mut died);
                    try_op(&s, op).expect("the restarted server answers")
                }
            };
            assert_eq!(status, 200, "{fault}: op {i}");
            acked.record(op);
            for (at, slot) in [(x_at, &mut x), (y_at, &mut y)] {
                if i == at {
                    *slot = Some(match try_checkpoint(&s) {
                        Some(c) => c,
                        None => {
                            restart(&mut s, &mut died);
                            acked.check(&s);
                            try_checkpoint(&s).expect("a checkpoint")
                        }
                    });
                }
            }
            if i == y_at {
                // X shares its history segments with Y and later ones.
                let xid = x.as_ref().unwrap().0;
                let gone = s
                    .client
                    .delete(s.url(&format!("/checkpoints/{xid}")))
                    .send()
                    .ok()
                    .map(|r| r.status().as_u16());
                if gone.is_none() {
                    restart(&mut s, &mut died);
                    acked.check(&s);
                    // the deletion did not commit: X is whole, then goes
                    let again = s.get(&format!("/checkpoints/{xid}")).body;
                    assert_eq!(again, x.as_ref().unwrap().1, "{fault}: X damaged");
                    assert_eq!(s.delete(&format!("/checkpoints/{xid}")).status, 204);
                } else {
                    assert_eq!(gone, Some(204));
                }
            }
        }
        assert!(died > 0, "{fault}: the fault never fired");
        acked.check(&s);
        assert_eq!(x.unwrap().1, ref_x, "{fault}: checkpoint X");
        let y = y.unwrap();
        assert_eq!(y.1, ref_y, "{fault}: checkpoint Y");
        // Y is served whole after X's deletion freed what only X named.
        assert_eq!(
            s.get(&format!("/checkpoints/{}", y.0)).body,
            ref_y,
            "{fault}: Y after X"
        );
        assert_eq!(
            (s.all_changes(), s.all_late(), s.snapshot()),
            ref_state,
            "{fault}: the state"
        );
        let (_, end) = try_checkpoint(&s).unwrap();
        assert_eq!(end, ref_end, "{fault}: the final checkpoint");
        // and once more after a crash with nothing in flight
        s.kill();
        let s = start(&db, args);
        assert_eq!(s.snapshot(), ref_state.2);
    }
}

/// A window engine with 1,024 live buckets or more checkpoints
/// automatically only after four logged calls per live bucket, whatever a
/// small `--checkpoint-every` says (a checkpoint writes the live state:
/// one event per call would otherwise pay for it every few calls); a
/// restart after those calls replays them to the same state.
#[test]
fn a_large_live_state_spaces_automatic_checkpoints_by_its_size() {
    let dir = tempdir();
    let db = dir.path().join("large.db");
    let mut s = start(&db, &["--checkpoint-every", "10"]);
    // 70,000 keys in one fixed window of the default pipeline: at least
    // 70,000 live buckets.
    for b in 0..7i64 {
        let batch: Vec<String> = (0..10_000i64)
            .map(|i| {
                let n = b * 10_000 + i;
                delivery("p0", None, &format!("big{n}"), &format!("k{n}"), 5, 1)
            })
            .collect();
        assert_eq!(
            s.post("/events", &format!("[{}]", batch.join(","))).status,
            200
        );
    }
    let live = s.get("/status").json()["live_buckets"].as_u64().unwrap();
    assert!(live >= 70_000, "{live} live buckets");
    // Whatever the first calls led to, 100 single-event calls now stay in
    // the log: the threshold is four times the live bucket count, far
    // above 10.
    let before = s.metric("streamforge_checkpoints_total");
    for i in 0..100 {
        s.ok(
            "/events",
            &delivery("p1", None, &format!("one{i}"), "k", i, 1),
        );
    }
    assert_eq!(
        s.metric("streamforge_checkpoints_total"),
        before,
        "no automatic checkpoint for 100 calls of one event"
    );
    assert!(s.metric("streamforge_logged_commands") >= 100.0);
    let live = s.get("/status").json()["live_buckets"].as_u64().unwrap();
    assert_eq!(
        s.metric("streamforge_checkpoint_due_after_commands"),
        (4 * live) as f64,
        "due after four calls per live bucket"
    );
    let state = s.snapshot();
    s.kill();
    let s = start(&db, &[]);
    assert_eq!(s.snapshot(), state, "the log replays the calls");
}
