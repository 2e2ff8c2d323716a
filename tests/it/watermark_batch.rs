//! `POST /watermarks/batch` (several advances in one atomic call) against
//! the same advances sent one by one to `POST /watermarks`, on two real
//! servers fed the same seeded workload over four partitions: every batch's
//! answer is the concatenation of the one-by-one answers, and at the end
//! (and after a SIGKILL and restart of the batching server, which replays
//! its logged batches) the changelogs, late outputs, results, status and
//! checkpoint envelopes are byte-identical. A batch with an unknown
//! partition or a malformed item in the middle is refused whole and
//! changes nothing. `streamforge send` coalesces a file's consecutive
//! advances into such calls and ends in the same state as one by one.

use crate::support::server;
use serde_json::Value;
use server::client::sf;
use server::*;

/// The seeded workload with its runs of consecutive advances grouped, and
/// after every fifth call a group advancing all four partitions twice (the
/// shape of the benchmark workload's advances, with the global watermark
/// moving twice within the group).
fn grouped(seed: u64, steps: usize) -> Vec<Vec<Op>> {
    let mut groups: Vec<Vec<Op>> = Vec::new();
    let mut progress = 0i64;
    for (i, op) in workload(seed, steps).into_iter().enumerate() {
        match (&op, groups.last_mut()) {
            (Op::Advance(_), Some(g)) if matches!(g.last(), Some(Op::Advance(_))) => g.push(op),
            _ => groups.push(vec![op]),
        }
        if i % 5 == 4 {
            // Two rounds in one group: the global watermark moves twice
            // within the call (the order of the advances matters).
            let mut group = Vec::new();
            for step in [700, 1500] {
                for p in 0..4 {
                    group.push(Op::Advance(format!(
                        "{{\"partition\":\"p{p}\",\"watermark\":{}}}",
                        progress + step + 50 * p
                    )));
                }
            }
            progress += 1500;
            groups.push(group);
        }
    }
    groups
}

/// The body of `POST /watermarks/batch` for a group of advances.
fn batch_body(group: &[Op], ndjson: bool) -> String {
    let items: Vec<&str> = group
        .iter()
        .map(|op| match op {
            Op::Advance(b) => b.as_str(),
            other => panic!("not an advance: {other:?}"),
        })
        .collect();
    batch_text(&items, ndjson)
}

/// The answers of a group sent one by one, folded as one batch answers:
/// changes and finalized concatenated, the last watermark.
fn folded(answers: &[Value]) -> Value {
    let cat = |field: &str| -> Vec<Value> {
        answers
            .iter()
            .flat_map(|a| a[field].as_array().expect("array").clone())
            .collect()
    };
    serde_json::json!({
        "changes": cat("changes"),
        "watermark": answers.last().expect("an answer")["watermark"].clone(),
        "finalized": cat("finalized"),
    })
}

#[test]
fn a_batch_of_advances_is_exactly_the_advances_one_by_one() {
    let dir = tempdir();
    let one = start(&dir.path().join("one.db"), &[]);
    let batch_db = dir.path().join("batch.db");
    let mut batch = start(&batch_db, &["--checkpoint-every", "7"]);
    let groups = grouped(27, 150);
    let batches = groups.iter().filter(|g| g.len() > 1).count();
    assert!(batches > 20, "only {batches} batches of several advances");
    let mut changes_in_batches = 0;
    for (n, group) in groups.iter().enumerate() {
        if n == groups.len() / 2 {
            // The second half goes to a restarted server: its batches of
            // the first half (and its checkpoints) are replayed.
            batch.kill();
            batch = start(&batch_db, &["--checkpoint-every", "7"]);
        }
        if !matches!(group[0], Op::Advance(_)) {
            for op in group {
                let (a, b) = (op.send(&one), op.send(&batch));
                assert_eq!((a.status, &a.body), (200, &b.body), "group {n}");
            }
            continue;
        }
        let answers: Vec<Value> = group
            .iter()
            .map(|op| {
                let r = op.send(&one);
                assert_eq!(r.status, 200, "group {n}: {}", r.body);
                r.json()
            })
            .collect();
        let ndjson = n % 2 == 1;
        let body = batch_body(group, ndjson);
        let r = if ndjson {
            batch.post_ndjson("/watermarks/batch", &body)
        } else {
            batch.post("/watermarks/batch", &body)
        };
        assert_eq!(r.status, 200, "group {n}: {}", r.body);
        assert_eq!(r.json(), folded(&answers), "group {n}: {body}");
        changes_in_batches += r.json()["changes"].as_array().expect("changes").len();
        if n % 17 == 3 {
            // Refused whole, wherever the bad item is; nothing changes.
            let before = batch.snapshot();
            let bad = [
                r#"{"partition":"p0","watermark":99999999}"#,
                r#"{"partition":"nope","watermark":1}"#,
                r#"{"partition":"p1","watermark":99999999}"#,
            ];
            let p = batch
                .post("/watermarks/batch", &format!("[{}]", bad.join(",")))
                .problem(422, "unknown_partition");
            assert_eq!(p["index"], 1, "{p}");
            let p = batch
                .post_ndjson(
                    "/watermarks/batch",
                    &format!("{}\n\n{}\n{{\"partition\":\"p2\"}}\n", bad[0], bad[2]),
                )
                .problem(400, "bad_request");
            assert_eq!(p["index"], 2, "{p}");
            batch
                .post("/watermarks/batch", "[]")
                .problem(422, "invalid_request");
            batch
                .post("/watermarks/batch", bad[0])
                .problem(400, "bad_request");
            assert_eq!(
                batch.snapshot(),
                before,
                "a refused batch changed the state"
            );
        }
    }
    assert!(
        changes_in_batches > 50,
        "the batches changed little: {changes_in_batches}"
    );
    batch.assert_same_window_state(&one);
    batch.kill();
    let batch = start(&batch_db, &[]);
    assert_eq!(batch.snapshot(), one.snapshot(), "after a restart");
}

#[test]
fn send_coalesces_consecutive_advances_and_ends_in_the_same_state() {
    let dir = tempdir();
    // A file in the benchmark workload's shape: deliveries round-robin over
    // four partitions, then one advance per partition.
    let mut lines = Vec::new();
    let mut offsets = [0i64; 4];
    for i in 0..2_000i64 {
        let p = (i % 4) as usize;
        lines.push(format!(
            "{{\"op\":\"deliver\",\"partition\":\"p{p}\",\"offset\":{},\"event\":{{\"id\":\"e{i}\",\"key\":\"k{}\",\"timestamp\":{},\"value\":{}}}}}",
            offsets[p],
            i % 7,
            i * 10 - (i * 37 % 500),
            i % 13 - 6
        ));
        offsets[p] += 1;
        if i % 100 == 99 {
            for p in 0..4 {
                lines.push(format!(
                    "{{\"op\":\"advance\",\"partition\":\"p{p}\",\"watermark\":{}}}",
                    i * 10 - 500
                ));
            }
        }
    }
    let file = dir.path().join("ops.ndjson");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let sent = start(&dir.path().join("sent.db"), &[]);
    let out = sf(&sent, &["send", file.to_str().expect("path")]).ok();
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("80 advances"), "{said}");
    // Each group of four advances goes with the deliveries before it, as
    // one `POST /batch`.
    let batches =
        sent.metric("streamforge_request_duration_seconds_count{route=\"/batch\",status=\"200\"}");
    assert_eq!(
        batches, 20.0,
        "one batch per group of deliveries and four advances"
    );
    let one = start(&dir.path().join("one.db"), &[]);
    for line in &lines {
        let v: Value = serde_json::from_str(line).expect("json");
        let r = if v["op"] == "advance" {
            one.post(
                "/watermarks",
                &format!(
                    "{{\"partition\":{},\"watermark\":{}}}",
                    v["partition"], v["watermark"]
                ),
            )
        } else {
            let mut d = v.clone();
            d.as_object_mut().expect("object").remove("op");
            one.post("/events", &d.to_string())
        };
        assert_eq!(r.status, 200, "{line}: {}", r.body);
    }
    assert_eq!(sent.all_changes(), one.all_changes());
    assert_eq!(sent.snapshot(), one.snapshot());
    assert_eq!(sent.window_envelope(), one.window_envelope());
}

#[test]
fn send_stops_at_a_refused_advance_exactly_as_one_by_one() {
    let dir = tempdir();
    let mut lines = Vec::new();
    for i in 0..40i64 {
        let p = i % 4;
        lines.push(format!(
            "{{\"op\":\"deliver\",\"partition\":\"p{p}\",\"offset\":{},\"event\":{{\"id\":\"e{i}\",\"key\":\"k{}\",\"timestamp\":{},\"value\":1}}}}",
            i / 4,
            i % 3,
            i * 100
        ));
        if i % 10 == 9 {
            for p in 0..4 {
                lines.push(format!(
                    "{{\"op\":\"advance\",\"partition\":\"p{p}\",\"watermark\":{}}}",
                    i * 100
                ));
            }
        }
    }
    // An advance of an unknown partition in the middle of the last group.
    let bad = lines.len() - 2;
    lines[bad] = r#"{"op":"advance","partition":"nope","watermark":5000}"#.into();
    lines.push(r#"{"op":"advance","partition":"p0","watermark":9000}"#.into());
    let file = dir.path().join("ops.ndjson");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let sent = start(&dir.path().join("sent.db"), &[]);
    let out = sf(&sent, &["send", file.to_str().expect("path")]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!("line {}", bad + 1)),
        "the error names the refused line {}: {}",
        bad + 1,
        out.stderr
    );
    let one = start(&dir.path().join("one.db"), &[]);
    for line in &lines[..bad] {
        let mut v: Value = serde_json::from_str(line).expect("json");
        let op = v.as_object_mut().expect("object").remove("op");
        let path = if op == Some(Value::from("advance")) {
            "/watermarks"
        } else {
            "/events"
        };
        assert_eq!(one.post(path, &v.to_string()).status, 200, "{line}");
    }
    assert_eq!(sent.snapshot(), one.snapshot());
    assert_eq!(sent.all_changes(), one.all_changes());
}
