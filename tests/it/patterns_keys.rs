//! `Idempotency-Key` on `POST /patterns/events` and `/patterns/advance`
//! against the real binary: a retry gets the first answer back and pushes
//! nothing; the key with another request is 422; keys survive a SIGKILL and
//! restart, follow pattern restores (a key whose call the restored state
//! does not hold is forgotten), and are kept for the newest N only; many
//! concurrent retries of one key apply it once. And the hint a refusal
//! gets once the engine is finished.

use crate::support::server::client::sf;
use crate::support::server::*;

use std::path::Path;

use serde_json::Value;

const DOC: &str = r#"{"patterns": [
  {"name": "pair", "within": 100, "stages": [
    {"name": "a", "where": {"kind": "a"}},
    {"name": "b", "where": {"kind": "b"}}]}]}"#;

fn serve(dir: &Path, db: &str, args: &[&str]) -> Server {
    let file = dir.join(format!("{db}.patterns.json"));
    std::fs::write(&file, DOC).unwrap();
    let mut all = vec!["--patterns", file.to_str().unwrap()];
    all.extend_from_slice(args);
    start(&dir.join(db), &all)
}

fn ev(id: &str, key: &str, kind: &str, time: i64) -> String {
    format!(r#"{{"id":"{id}","key":"{key}","kind":"{kind}","time":{time},"fields":{{}}}}"#)
}

/// POST with an `Idempotency-Key`; (status, body, replayed header).
fn keyed(s: &Server, path: &str, key: &str, body: &str) -> (u16, String, bool) {
    let r = s
        .client
        .post(s.url(path))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .expect("request");
    let status = r.status().as_u16();
    let replayed = r
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (status, r.text().unwrap(), replayed)
}

fn status(s: &Server) -> Value {
    s.get("/patterns/status").json()
}

#[test]
fn a_retry_gets_the_first_answer_and_pushes_nothing() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &[]);
    let batch = format!("[{},{}]", ev("1", "k", "a", 5), ev("2", "j", "a", 6));
    let (st, first, replayed) = keyed(&s, "/patterns/events", "push-1", &batch);
    assert_eq!((st, replayed), (200, false), "{first}");
    let before = status(&s);
    for _ in 0..3 {
        let (st, again, replayed) = keyed(&s, "/patterns/events", "push-1", &batch);
        assert_eq!((st, replayed), (200, true));
        assert_eq!(again, first, "the stored answer, byte for byte");
    }
    assert_eq!(status(&s), before, "a retry pushes nothing");
    assert_eq!(before["buffered"], 2);
    // Without a key the same body is a new occurrence (the contract).
    s.ok("/patterns/events", &batch);
    assert_eq!(status(&s)["buffered"], 4);

    // The same key with another body, or on another route: 422, nothing changed.
    let other = format!("[{}]", ev("3", "k", "b", 7));
    let (st, body, _) = keyed(&s, "/patterns/events", "push-1", &other);
    assert_eq!(st, 422, "{body}");
    let p: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["code"], "idempotency_key_reused");
    let (st, body, _) = keyed(&s, "/patterns/advance", "push-1", r#"{"watermark":10}"#);
    assert_eq!(st, 422, "{body}");
    assert_eq!(status(&s)["buffered"], 4);
    assert_eq!(status(&s)["watermark"], -1);

    // A keyed advance: the retry answers the same output, emits nothing new.
    s.ok("/patterns/events", &format!("[{}]", ev("4", "k", "b", 8)));
    let (st, adv, replayed) = keyed(&s, "/patterns/advance", "adv-1", r#"{"watermark":10}"#);
    assert_eq!((st, replayed), (200, false), "{adv}");
    let a: Value = serde_json::from_str(&adv).unwrap();
    assert!(!a["output"].as_array().unwrap().is_empty(), "{adv}");
    let head = status(&s)["sequence"].clone();
    // the body may be spelled differently: the request is its watermark
    let (st, again, replayed) = keyed(&s, "/patterns/advance", "adv-1", "{ \"watermark\" : 10 }");
    assert_eq!((st, replayed, again.as_str()), (200, true, adv.as_str()));
    assert_eq!(status(&s)["sequence"], head);
    assert_eq!(
        s.metric("streamforge_idempotent_replays_total"),
        4.0,
        "three push retries and one advance retry"
    );

    // Malformed keys are 400 and change nothing.
    for bad in ["", "with space", &"x".repeat(256)] {
        let (st, body, _) = keyed(&s, "/patterns/events", bad, &other);
        assert_eq!(st, 400, "{bad:?}: {body}");
    }
    assert_eq!(status(&s)["buffered"], 0);
}

#[test]
fn keys_survive_a_sigkill_and_follow_restores() {
    let dir = tempdir();
    let mut s = serve(dir.path(), "db", &["--checkpoint-every", "0"]);
    let b1 = format!("[{},{}]", ev("1", "k", "a", 5), ev("2", "k", "b", 6));
    let (_, a1, _) = keyed(&s, "/patterns/events", "k1", &b1);
    let (_, w1, _) = keyed(&s, "/patterns/advance", "w1", r#"{"watermark":6}"#);
    let cp: Value = s.post_empty("/patterns/checkpoints").json();
    let b2 = format!("[{},{}]", ev("3", "j", "a", 7), ev("4", "j", "b", 8));
    let (_, a2, _) = keyed(&s, "/patterns/events", "k2", &b2);
    let (_, w2, _) = keyed(&s, "/patterns/advance", "w2", r#"{"watermark":9}"#);
    s.kill();
    let s = serve(dir.path(), "db", &["--checkpoint-every", "0"]);
    let before = status(&s);
    for (path, key, body, answer) in [
        ("/patterns/events", "k1", b1.as_str(), &a1),
        ("/patterns/advance", "w1", r#"{"watermark":6}"#, &w1),
        ("/patterns/events", "k2", b2.as_str(), &a2),
        ("/patterns/advance", "w2", r#"{"watermark":9}"#, &w2),
    ] {
        let (st, again, replayed) = keyed(&s, path, key, body);
        assert_eq!((st, replayed), (200, true), "{key} after the restart");
        assert_eq!(&again, answer);
    }
    assert_eq!(status(&s), before);

    // Restore the checkpoint taken after k1 and w1: their calls are in the
    // restored state (retries still replay); k2 and w2 are not (a retry
    // applies them again, as the first time).
    let id = cp["id"].as_u64().unwrap();
    let r = s.post_empty(&format!("/patterns/checkpoints/{id}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    let (_, again, replayed) = keyed(&s, "/patterns/events", "k1", &b1);
    assert!(replayed && again == a1);
    let (_, again, replayed) = keyed(&s, "/patterns/advance", "w1", r#"{"watermark":6}"#);
    assert!(replayed && again == w1);
    let (st, again, replayed) = keyed(&s, "/patterns/events", "k2", &b2);
    assert_eq!((st, replayed), (200, false), "{again}");
    assert_eq!(again, a2, "the same ordinals again");
    let (st, again, replayed) = keyed(&s, "/patterns/advance", "w2", r#"{"watermark":9}"#);
    assert_eq!((st, replayed), (200, false));
    assert_eq!(again, w2, "the same output again");
}

#[test]
fn only_the_newest_keys_are_kept() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &["--idempotency-keys", "2"]);
    let body = |i: i64| format!("[{}]", ev(&i.to_string(), "k", "a", i));
    for i in 1..=3 {
        let (st, _, replayed) = keyed(&s, "/patterns/events", &format!("k{i}"), &body(i));
        assert_eq!((st, replayed), (200, false));
    }
    // k2 and k3 are kept; k1 was dropped: its retry is applied again.
    for i in [2, 3] {
        let (_, _, replayed) = keyed(&s, "/patterns/events", &format!("k{i}"), &body(i));
        assert!(replayed, "k{i}");
    }
    assert_eq!(status(&s)["buffered"], 3);
    let (st, _, replayed) = keyed(&s, "/patterns/events", "k1", &body(1));
    assert_eq!((st, replayed), (200, false));
    assert_eq!(status(&s)["buffered"], 4);
}

#[test]
fn concurrent_retries_of_one_key_apply_it_once() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &[]);
    let events: Vec<String> = (0..200)
        .map(|i| ev(&i.to_string(), "k", "a", 10 + i))
        .collect();
    let batch = format!("[{}]", events.join(","));
    let answers: Vec<(String, bool)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                sc.spawn(|| {
                    // retry "in use" until the first call is answered
                    wait_until("an answer", DEADLINE, || {
                        let (st, body, replayed) = keyed(&s, "/patterns/events", "once", &batch);
                        match st {
                            200 => Some((body, replayed)),
                            409 => {
                                let p: Value = serde_json::from_str(&body).unwrap();
                                assert_eq!(p["code"], "idempotency_key_in_use");
                                None
                            }
                            _ => panic!("{st}: {body}"),
                        }
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        answers.iter().filter(|(_, r)| !r).count(),
        1,
        "applied once"
    );
    assert!(answers.iter().all(|(b, _)| *b == answers[0].0));
    assert_eq!(status(&s)["buffered"], 200);
}

/// After `finish`, a refused push or advance says why and what to do.
#[test]
fn after_finish_a_refusal_says_the_engine_is_finished() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &[]);
    s.ok("/patterns/events", &format!("[{}]", ev("1", "k", "a", 5)));
    // before the finish: the plain detail, no hint
    s.ok("/patterns/advance", r#"{"watermark":10}"#);
    let late = s.post("/patterns/events", &format!("[{}]", ev("2", "k", "a", 3)));
    let p = late.problem(409, "late_event");
    assert!(!p["detail"].as_str().unwrap().contains("finished"), "{p}");
    let r = s.post_empty("/patterns/finish");
    assert_eq!(r.status, 200, "{}", r.body);
    let late = s.post("/patterns/events", &format!("[{}]", ev("3", "k", "a", 50)));
    let p = late.problem(409, "late_event");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("finished") && detail.contains("restore"),
        "{detail}"
    );
    assert_eq!(p["index"], 0);
    let back = s.post("/patterns/advance", r#"{"watermark":20}"#);
    let p = back.problem(409, "watermark_regression");
    assert!(p["detail"].as_str().unwrap().contains("finished"), "{p}");
}

/// `patterns send` keys every push and advance by file and lines: sending
/// the file again changes nothing; after an error, `--from-line` resumes
/// where the error said, and the result equals one clean send.
#[test]
fn patterns_send_resumes_with_keys_and_sends_twice_as_once() {
    let dir = tempdir();
    // 3 keys, several windows each: a's and b's, with advances in between.
    let mut lines = Vec::new();
    for i in 0..60i64 {
        let key = ["k", "j", "m"][i as usize % 3];
        let kind = if i % 2 == 0 { "a" } else { "b" };
        lines.push(ev(&format!("e{i}"), key, kind, 10 * i + 5));
        if i % 20 == 19 {
            lines.push(format!(r#"{{"op":"advance","watermark":{}}}"#, 10 * i + 5));
        }
    }
    let good = dir.path().join("good.ndjson");
    std::fs::write(&good, lines.join("\n")).unwrap();
    let clean = serve(dir.path(), "clean", &[]);
    let path = good.to_str().unwrap();
    sf(&clean, &["patterns", "send", path, "--batch", "7"]).ok();
    let want = (
        status(&clean),
        clean.get("/patterns/output?limit=1000").body,
    );

    // Sending it twice equals sending it once.
    let twice = serve(dir.path(), "twice", &[]);
    sf(&twice, &["patterns", "send", path, "--batch", "7"]).ok();
    sf(&twice, &["patterns", "send", path, "--batch", "7"]).ok();
    assert_eq!(status(&twice), want.0);
    assert_eq!(twice.get("/patterns/output?limit=1000").body, want.1);
    assert!(twice.metric("streamforge_idempotent_replays_total") >= 10.0);

    // A file whose line 40 is late stops there; the message names the
    // line to resume from; the fixed file sent --from-line it equals the
    // clean send (the batches before were applied once).
    let broken_lines: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 39 {
                ev("late", "k", "a", 1)
            } else {
                l.clone()
            }
        })
        .collect();
    let file = dir.path().join("file.ndjson");
    std::fs::write(&file, broken_lines.join("\n")).unwrap();
    let f = file.to_str().unwrap();
    let resumed = serve(dir.path(), "resumed", &[]);
    let r = sf(&resumed, &["patterns", "send", f, "--batch", "7"]).failed();
    let from = r
        .stderr
        .split("--from-line ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("no --from-line in {r:?}"))
        .to_string();
    std::fs::write(&file, lines.join("\n")).unwrap();
    // resuming from the start instead would be safe too; from the line named
    // sends only the rest
    sf(
        &resumed,
        &["patterns", "send", f, "--batch", "7", "--from-line", &from],
    )
    .ok();
    assert_eq!(status(&resumed), want.0);
    assert_eq!(resumed.get("/patterns/output?limit=1000").body, want.1);
    // and the whole fixed file again: nothing changes (a file has its own
    // keys: the path is part of them)
    sf(&resumed, &["patterns", "send", f, "--batch", "7"]).ok();
    assert_eq!(status(&resumed), want.0);

    // Without keys a second send counts twice (the contract).
    let nokeys = serve(dir.path(), "nokeys", &[]);
    let only_events: Vec<&String> = lines.iter().filter(|l| !l.contains("\"op\"")).collect();
    let events_file = dir.path().join("events.ndjson");
    std::fs::write(
        &events_file,
        only_events
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let e = events_file.to_str().unwrap();
    sf(&nokeys, &["patterns", "send", e, "--no-keys"]).ok();
    sf(&nokeys, &["patterns", "send", e, "--no-keys"]).ok();
    assert_eq!(status(&nokeys)["buffered"], 120);
}

/// `--watermark-lag MS`: every `--advance-every` events the watermark goes
/// to the largest time sent minus MS, never back.
#[test]
fn patterns_send_advances_by_the_watermark_lag() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &[]);
    // times 10, 20, ..., 1000 for three keys; then one event far back in
    // the file but after the lag's reach is refused as late.
    let lines: Vec<String> = (1..=100i64)
        .map(|i| {
            ev(
                &format!("e{i}"),
                ["k", "j", "m"][i as usize % 3],
                "a",
                10 * i,
            )
        })
        .collect();
    let file = dir.path().join("lag.ndjson");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let f = file.to_str().unwrap();
    let args = [
        "patterns",
        "send",
        f,
        "--batch",
        "10",
        "--watermark-lag",
        "100",
        "--advance-every",
        "20",
    ];
    let out = sf(&s, &args).ok();
    assert!(out.stdout.contains("5 advances"), "{out:?}");
    let st = status(&s);
    assert_eq!(st["watermark"], 900, "the last advance: 1000 - 100");
    assert_eq!(
        st["buffered"], 10,
        "the events after 900 wait for the next one"
    );
    // A second run of the same file: every call answered from its key.
    sf(&s, &args).ok();
    assert_eq!(status(&s), st);
}
