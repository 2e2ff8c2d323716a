//! Key-hash shards (`--shards K`) against the real binary: the same calls
//! give the same bytes with 1, 2 and 4 shards (every answer, the changelog,
//! the late output, results, status and checkpoints), and a checkpoint or a
//! database written with one shard count restores, recovers and continues
//! with any other.

use crate::support::server;

use server::*;

/// Four windows of every kind, three partitions, lateness 5 ms.
const PIPELINE: &str = r#"{"partitions":["a","b","c"],"windows":{
  "fixed":{"kind":"fixed","size":40},
  "sliding":{"kind":"sliding","size":60,"step":20},
  "session":{"kind":"session","gap":7},
  "stream":{"kind":"stream_time","size":50}},"lateness":5}"#;

/// A call: path and body (none for idleness).
type Call = (String, Option<String>);

/// Batches of 70-200 deliveries (enough unique events for the shard
/// threads) over 50 keys on three partitions, with duplicates, identical
/// redeliveries and late events, between watermark advances and idleness.
fn workload(seed: u64, rounds: usize) -> Vec<Call> {
    let mut rng = Rng(seed);
    let parts = ["a", "b", "c"];
    let mut offsets = [0i64; 3];
    let mut sent: Vec<(usize, i64, String)> = Vec::new();
    let mut id = 0u64;
    let mut clock = 0i64;
    let mut calls = Vec::new();
    for _ in 0..rounds {
        let n = 70 + rng.below(130) as usize;
        let mut batch = Vec::with_capacity(n);
        for _ in 0..n {
            let p = rng.below(3) as usize;
            let event = match rng.below(20) {
                // a duplicate: a known id with its identity, at a new offset
                0 if !sent.is_empty() => sent[rng.below(sent.len() as u64) as usize].2.clone(),
                _ => {
                    id += 1;
                    let late = rng.below(15) == 0;
                    let ts = if late {
                        clock - 30 - rng.below(40) as i64
                    } else {
                        clock + rng.below(60) as i64 - 20
                    };
                    format!(
                        r#"{{"id":"e{id}","key":"k{}","timestamp":{ts},"value":{}}}"#,
                        rng.below(50),
                        rng.below(2001) as i64 - 1000
                    )
                }
            };
            let offset = offsets[p];
            offsets[p] += 1;
            sent.push((p, offset, event.clone()));
            batch.push(format!(
                r#"{{"partition":"{}","offset":{offset},"event":{event}}}"#,
                parts[p]
            ));
        }
        // an identical redelivery of something already consumed
        let (p, offset, event) = &sent[rng.below(sent.len() as u64) as usize];
        batch.push(format!(
            r#"{{"partition":"{}","offset":{offset},"event":{event}}}"#,
            parts[*p]
        ));
        calls.push(("/events".into(), Some(format!("[{}]", batch.join(",")))));
        clock += 15 + rng.below(25) as i64;
        for p in parts {
            match rng.below(8) {
                0 => calls.push((format!("/partitions/{p}/idle"), None)),
                1 => {}
                _ => calls.push((
                    "/watermarks".into(),
                    Some(format!(
                        r#"{{"partition":"{p}","watermark":{}}}"#,
                        clock - rng.below(10) as i64
                    )),
                )),
            }
        }
    }
    calls
}

fn start_with(db: &std::path::Path, shards: &str) -> Server {
    let pipeline = db.with_extension("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).unwrap();
    start(
        db,
        &[
            "--pipeline",
            pipeline.to_str().unwrap(),
            "--shards",
            shards,
            "--checkpoint-every",
            "7",
        ],
    )
}

/// Sends the calls; returns every answer body.
fn send(s: &Server, calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .map(|(path, body)| {
            let r = match body {
                Some(body) => s.post(path, body),
                None => s.post_empty(path),
            };
            assert_eq!(r.status, 200, "POST {path}: {}", r.body);
            r.body
        })
        .collect()
}

/// The changelog, the late output, status and results, and a checkpoint.
type State = (Vec<String>, Vec<String>, String, String);

/// Everything a reader can see, without the epoch (restores so far).
fn state(s: &Server) -> State {
    let r = s.post_empty("/checkpoints");
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_u64().unwrap();
    let envelope = s.get(&format!("/checkpoints/{id}")).body;
    (s.all_changes(), s.all_late(), s.snapshot(), envelope)
}

#[test]
fn every_shard_count_gives_the_same_bytes() {
    let dir = tempdir();
    let calls = workload(7, 40);
    let mut reference: Option<(Vec<String>, State)> = None;
    for k in ["1", "2", "4"] {
        let s = start_with(&dir.path().join(format!("k{k}.db")), k);
        assert_eq!(s.metric("streamforge_shards"), k.parse::<f64>().unwrap());
        let answers = send(&s, &calls);
        let now = (answers, state(&s));
        assert!(
            now.1 .0.len() > 2000 && now.1 .1.len() > 50,
            "the workload must produce many changes and late events"
        );
        match &reference {
            None => reference = Some(now),
            Some(r) => {
                for (i, (a, b)) in r.0.iter().zip(&now.0).enumerate() {
                    assert_eq!(
                        a, b,
                        "answer {i} ({}) differs with --shards {k}",
                        calls[i].0
                    );
                }
                assert!(r.1 == now.1, "changelog, late output, results, status or checkpoint differ with --shards {k}");
            }
        }
    }
}

#[test]
fn checkpoints_and_databases_move_between_shard_counts() {
    let dir = tempdir();
    let calls = workload(11, 36);
    let (first, rest) = calls.split_at(calls.len() / 2);

    // The uninterrupted reference, with one shard.
    let reference = start_with(&dir.path().join("ref.db"), "1");
    send(&reference, &calls);
    let expected = state(&reference);

    // Four shards take the first half and a checkpoint...
    let four = start_with(&dir.path().join("four.db"), "4");
    send(&four, first);
    let r = four.post_empty("/checkpoints");
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_u64().unwrap();
    let envelope = four.get(&format!("/checkpoints/{id}")).body;

    // ...that a server with two shards restores and continues from.
    let two = start_with(&dir.path().join("two.db"), "2");
    send(&two, &calls[..3]);
    let r = two.post("/restore", &envelope);
    assert_eq!(r.status, 200, "{}", r.body);
    send(&two, rest);
    let got = state(&two);
    assert!(
        got.2 == expected.2 && got.3 == expected.3,
        "restored with 2 shards: results, status or checkpoint differ"
    );

    // The four-shard database restarts with one shard (recovery from its
    // checkpoint and log), then continues.
    let db = four.db.clone();
    drop(four);
    let one = start_with(&db, "1");
    assert_eq!(one.metric("streamforge_shards"), 1.0);
    send(&one, rest);
    assert!(
        state(&one) == expected,
        "recovered with 1 shard: changelog, late output, results, status or checkpoint differ"
    );
}
