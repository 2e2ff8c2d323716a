//! `POST /batch` (deliveries, then the advances that close them, in one
//! call) against the same deliveries and advances sent as separate calls,
//! on two real servers fed the same seeded workload over four partitions:
//! every batch's answer is the separate answers folded together, and at
//! the end (and after a SIGKILL and restart of the batching server, which
//! replays the two commands each batch logged) the changelogs, late
//! outputs, results, status and checkpoint envelopes are byte-identical. A
//! batch refused anywhere (an unknown partition in its last advance, an
//! offset conflict in its deliveries, an advance before a delivery, a
//! malformed advance) changes nothing and names the failing item.

use crate::support::server;
use serde_json::Value;
use server::*;

/// The seeded workload as groups: the deliveries of consecutive batches,
/// then the consecutive advances after them (either may be empty; idles
/// stay alone).
fn grouped(seed: u64, steps: usize) -> Vec<(Vec<Op>, Vec<Op>)> {
    let mut groups: Vec<(Vec<Op>, Vec<Op>)> = vec![(Vec::new(), Vec::new())];
    for op in workload(seed, steps) {
        match op {
            Op::Idle(_) => {
                groups.push((vec![op], Vec::new()));
                groups.push((Vec::new(), Vec::new()));
            }
            Op::Batch(_) => {
                if groups.last().is_some_and(|g| !g.1.is_empty()) {
                    groups.push((Vec::new(), Vec::new()));
                }
                groups.last_mut().expect("a group").0.push(op);
            }
            Op::Advance(_) => groups.last_mut().expect("a group").1.push(op),
        }
    }
    groups.retain(|g| !g.0.is_empty() || !g.1.is_empty());
    groups
}

/// The items of a group: every delivery of its batches, then its advances.
fn items(deliveries: &[Op], advances: &[Op]) -> Vec<String> {
    let mut out = Vec::new();
    for op in deliveries {
        let Op::Batch(b) = op else { continue };
        let v: Value = serde_json::from_str(b).expect("batch json");
        out.extend(v.as_array().expect("array").iter().map(|d| d.to_string()));
    }
    out.extend(advances.iter().map(|op| match op {
        Op::Advance(b) => b.clone(),
        other => panic!("not an advance: {other:?}"),
    }));
    out
}

/// The separate answers folded as one batch answers: changes, late and
/// finalized concatenated, the offsets of every partition the deliveries
/// touched (the last value), the last watermark.
fn folded(answers: &[Value]) -> Value {
    let cat = |field: &str| -> Vec<Value> {
        answers
            .iter()
            .filter_map(|a| a.get(field))
            .flat_map(|v| v.as_array().expect("array").clone())
            .collect()
    };
    let mut offsets = serde_json::Map::new();
    for a in answers {
        if let Some(o) = a.get("offsets") {
            for (p, c) in o.as_object().expect("offsets") {
                offsets.insert(p.clone(), c.clone());
            }
        }
    }
    serde_json::json!({
        "changes": cat("changes"),
        "late": cat("late"),
        "watermark": answers.last().expect("an answer")["watermark"].clone(),
        "offsets": offsets,
        "finalized": cat("finalized"),
    })
}

/// Refusals anywhere in a batch: each names its item and changes nothing.
fn refusals(s: &Server, delivery_items: &[String]) {
    let before = s.snapshot();
    let good_advance = r#"{"partition":"p0","watermark":999999999}"#.to_string();
    let mut bad = delivery_items.to_vec();
    bad.push(good_advance.clone());
    bad.push(r#"{"partition":"nope","watermark":1}"#.into());
    let p = s
        .post("/batch", &batch_text(&bad, false))
        .problem(422, "unknown_partition");
    assert_eq!(p["index"], delivery_items.len() + 1, "{p}");
    // The deliveries again (their offsets were consumed: a redelivery of
    // the first with another value conflicts), then an advance that would
    // finalize everything.
    let mut conflict: Value = serde_json::from_str(&delivery_items[0]).expect("json");
    conflict["event"]["value"] = Value::from(123456);
    let mut bad = vec![conflict.to_string()];
    bad.push(good_advance.clone());
    let p = s
        .post_ndjson("/batch", &batch_text(&bad, true))
        .problem(409, "offset_conflict");
    assert_eq!(p["index"], 0, "{p}");
    let bad = [good_advance.clone(), delivery_items[0].clone()];
    let p = s
        .post_ndjson("/batch", &batch_text(&bad, true))
        .problem(422, "invalid_request");
    assert_eq!(p["index"], 0, "{p}");
    let bad = [
        delivery_items[0].clone(),
        r#"{"partition":"p0","watermark":1.5}"#.into(),
    ];
    let p = s
        .post("/batch", &batch_text(&bad, false))
        .problem(400, "bad_request");
    assert_eq!(p["index"], 1, "{p}");
    s.post("/batch", "[]").problem(422, "invalid_request");
    s.post_ndjson("/batch", "\n\n")
        .problem(422, "invalid_request");
    assert_eq!(s.snapshot(), before, "a refused batch changed the state");
}

#[test]
fn a_batch_is_exactly_its_deliveries_then_its_advances() {
    let dir = tempdir();
    let one = start(&dir.path().join("one.db"), &[]);
    let batch_db = dir.path().join("batch.db");
    let mut batch = start(&batch_db, &["--checkpoint-every", "7"]);
    let groups = grouped(41, 300);
    let both = groups
        .iter()
        .filter(|(d, a)| !d.is_empty() && !a.is_empty())
        .count();
    assert!(both > 15, "only {both} groups with deliveries and advances");
    let (mut changes, mut finalized) = (0, 0);
    for (n, (deliveries, advances)) in groups.iter().enumerate() {
        if n == groups.len() / 2 {
            // The second half goes to a restarted server: its batches of
            // the first half (and its checkpoints) are replayed.
            batch.kill();
            batch = start(&batch_db, &["--checkpoint-every", "7"]);
        }
        if let [op @ Op::Idle(_)] = &deliveries[..] {
            let (a, b) = (op.send(&one), op.send(&batch));
            assert_eq!((a.status, &a.body), (200, &b.body), "group {n}");
            continue;
        }
        let answers: Vec<Value> = deliveries
            .iter()
            .chain(advances)
            .map(|op| {
                let r = op.send(&one);
                assert_eq!(r.status, 200, "group {n}: {}", r.body);
                r.json()
            })
            .collect();
        let all = items(deliveries, advances);
        let ndjson = n % 2 == 1;
        let text = batch_text(&all, ndjson);
        let r = if ndjson {
            batch.post_ndjson("/batch", &text)
        } else {
            batch.post("/batch", &text)
        };
        assert_eq!(r.status, 200, "group {n}: {}", r.body);
        let got = r.json();
        assert_eq!(got, folded(&answers), "group {n}: {text}");
        changes += got["changes"].as_array().expect("changes").len();
        finalized += got["finalized"].as_array().expect("finalized").len();
        if n % 13 == 5 && !deliveries.is_empty() {
            let delivery_items = items(deliveries, &[]);
            refusals(&batch, &delivery_items);
        }
    }
    assert!(
        changes > 150 && finalized > 40,
        "{changes} changes, {finalized} finalized"
    );
    batch.assert_same_window_state(&one);
    batch.kill();
    let batch = start(&batch_db, &[]);
    assert_eq!(batch.snapshot(), one.snapshot(), "after a restart");
    assert_eq!(batch.all_changes(), one.all_changes(), "after a restart");
}

#[test]
fn a_minimal_batch_answer_counts_what_the_full_one_lists() {
    let dir = tempdir();
    let full = start(&dir.path().join("full.db"), &[]);
    let minimal = start(&dir.path().join("minimal.db"), &[]);
    for (n, (deliveries, advances)) in grouped(7, 60).iter().enumerate() {
        if let [op @ Op::Idle(_)] = &deliveries[..] {
            op.send(&full);
            op.send(&minimal);
            continue;
        }
        let text = batch_text(&items(deliveries, advances), true);
        let a = full.post_ndjson("/batch", &text);
        assert_eq!(a.status, 200, "group {n}: {}", a.body);
        let b = minimal
            .client
            .post(minimal.url("/batch"))
            .header("content-type", "application/x-ndjson")
            .header("prefer", "return=minimal")
            .body(text.clone())
            .send()
            .expect("request");
        assert_eq!(b.status(), 200, "group {n}");
        assert_eq!(
            b.headers()["preference-applied"].to_str().expect("header"),
            "return=minimal"
        );
        let b: Value = b.json().expect("json");
        let a = a.json();
        let count = |f: &str| Value::from(a[f].as_array().expect("array").len());
        let want = serde_json::json!({
            "changes": count("changes"),
            "late": count("late"),
            "watermark": a["watermark"],
            "offsets": a["offsets"],
            "finalized": count("finalized"),
        });
        assert_eq!(b, want, "group {n}");
    }
    assert_eq!(full.snapshot(), minimal.snapshot());
}
