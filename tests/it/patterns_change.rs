//! `PUT /patterns` against the real binary: a live change keeps the state
//! of unchanged patterns and starts new ones empty, is one logged command
//! (a SIGKILL and restart, with or without automatic checkpoints after it,
//! comes back to the same state), restores across a change are refused
//! until the checkpoint's patterns are in force again, a restart with a
//! `--patterns` file that differs from the database's current document
//! stops unless `--prefer-patterns` says which wins, and a bad document
//! changes nothing.

use crate::support::server::*;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// `pair` (an `a` then a `b`, within 100) and `solo` (every `c`).
const OLD: &str = r#"{"patterns": [
  {"name": "pair", "within": 100, "stages": [
    {"name": "a", "where": {"kind": "a"}}, {"name": "b", "where": {"kind": "b"}}]},
  {"name": "solo", "within": 10, "stages": [{"name": "c", "where": {"kind": "c"}}]}]}"#;

/// `pair` unchanged, `solo` removed, `trio` new (an `a`, `b`, `c`).
const NEW: &str = r#"{"patterns": [
  {"name": "pair", "within": 100, "stages": [
    {"name": "a", "where": {"kind": "a"}}, {"name": "b", "where": {"kind": "b"}}]},
  {"name": "trio", "within": 100, "stages": [
    {"name": "a", "where": {"kind": "a"}}, {"name": "b", "where": {"kind": "b"}},
    {"name": "c", "where": {"kind": "c"}}]}]}"#;

fn file(dir: &Path, name: &str, doc: &str) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, doc).unwrap();
    f
}

fn ev(id: &str, key: &str, kind: &str, time: i64) -> String {
    format!(r#"{{"id":"{id}","key":"{key}","kind":"{kind}","time":{time},"fields":{{}}}}"#)
}

fn put(s: &Server, doc: &str) -> Resp {
    s.put("/patterns", doc)
}

/// What a client sees of the pattern engine: its document, status and
/// every output record.
fn state(s: &Server) -> (String, Value, String) {
    (
        s.get("/patterns").body,
        s.get("/patterns/status").json(),
        s.get("/patterns/output?limit=10000").json()["output"].to_string(),
    )
}

/// The names of the patterns `GET /patterns` shows.
fn doc_names(s: &Server) -> Vec<String> {
    let doc: Value = s.get("/patterns").json();
    let list: Vec<Value> = doc["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    names(&Value::Array(list))
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_live_change_keeps_unchanged_patterns_and_survives_restarts_and_restores() {
    let dir = tempdir();
    let old = file(dir.path(), "old.json", OLD);
    let args = |f: &Path| vec!["--patterns".to_string(), f.display().to_string()];
    let a: Vec<String> = args(&old);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut s = start(
        &dir.path().join("db"),
        &[&a[..], &["--checkpoint-every", "0"]].concat(),
    );
    // k: an `a` before the change (pair's branch waits for a b); j: an `a`
    // and a `c` pushed before the change but processed after it.
    s.ok(
        "/patterns/events",
        &format!("[{},{}]", ev("1", "k", "a", 5), ev("2", "k", "c", 6)),
    );
    s.ok("/patterns/advance", r#"{"watermark":10}"#);
    s.ok(
        "/patterns/events",
        &format!("[{},{}]", ev("3", "j", "a", 12), ev("4", "j", "b", 13)),
    );
    let before_change = s.post_empty("/patterns/checkpoints").json()["id"]
        .as_u64()
        .unwrap();
    let r = put(&s, NEW);
    assert_eq!(r.status, 200, "{}", r.body);
    let c = r.json();
    assert_eq!(names(&c["kept"]), ["pair"]);
    assert_eq!(names(&c["started"]), ["trio"]);
    assert_eq!(names(&c["removed"]), ["solo"]);
    let got = doc_names(&s);
    assert_eq!(got, ["pair", "trio"]);
    // the output filters know the patterns in force now
    assert_eq!(s.get("/patterns/output?pattern=trio").status, 200);
    s.get("/patterns/output?pattern=solo")
        .problem(422, "invalid_request");
    // pair kept k's branch; trio sees j's buffered events, not k's past ones
    s.ok(
        "/patterns/events",
        &format!(
            "[{},{},{}]",
            ev("5", "k", "b", 20),
            ev("6", "j", "c", 21),
            ev("7", "k", "c", 22)
        ),
    );
    let out: Value =
        serde_json::from_str(&s.ok("/patterns/advance", r#"{"watermark":30}"#)).unwrap();
    let ids: Vec<&str> = out["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pair:3/4", "pair:1/5", "trio:3/4/6"], "{out}");
    let after = state(&s);

    // A SIGKILL and a restart without --patterns: the same state, the new
    // document (the change is in the command log).
    s.kill();
    let mut s = start(&dir.path().join("db"), &["--checkpoint-every", "1"]);
    assert_eq!(state(&s), after);
    // an automatic checkpoint after the change is the recovery base now
    s.ok("/patterns/events", &format!("[{}]", ev("8", "m", "a", 40)));
    s.kill();
    let s2 = start(&dir.path().join("db"), &["--checkpoint-every", "1"]);
    let now = state(&s2);
    assert_eq!(now.0, after.0);
    assert_eq!(now.1["next_ordinal"], 9);
    drop(s2);

    // A restart with the old file: refused, with a clear message...
    let r = try_start(&dir.path().join("db"), &a);
    let msg = r.err().expect("refused");
    assert!(msg.contains("--prefer-patterns"), "{msg}");
    // ... unless the database wins (the file is ignored) ...
    let s = start(
        &dir.path().join("db"),
        &[&a[..], &["--prefer-patterns", "database"]].concat(),
    );
    assert_eq!(s.get("/patterns").body, after.0);
    // A checkpoint taken before the change holds other patterns: refused,
    // nothing changed; with its patterns in force again it restores.
    let r = s.post_empty(&format!("/patterns/checkpoints/{before_change}/restore"));
    let p = r.problem(422, "invalid_checkpoint");
    assert!(
        p["detail"].as_str().unwrap().contains("PUT /patterns"),
        "{p}"
    );
    assert_eq!(s.get("/patterns").body, after.0);
    drop(s);
    // ... or the file wins: put in force at start as a change
    let s = start(
        &dir.path().join("db"),
        &[&a[..], &["--prefer-patterns", "file"]].concat(),
    );
    let got = doc_names(&s);
    assert_eq!(got, ["pair", "solo"]);
    let r = s.post_empty(&format!("/patterns/checkpoints/{before_change}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.get("/patterns/status").json()["next_ordinal"], 5);
    // and a plain restart with the old file now starts
    drop(s);
    let s = start(&dir.path().join("db"), &a);
    assert_eq!(s.get("/patterns/status").json()["next_ordinal"], 5);
}

#[test]
fn a_bad_document_changes_nothing() {
    let dir = tempdir();
    let old = file(dir.path(), "old.json", OLD);
    let s = start(
        &dir.path().join("db"),
        &["--patterns", old.to_str().unwrap()],
    );
    s.ok("/patterns/events", &format!("[{}]", ev("1", "k", "a", 5)));
    let before = state(&s);
    put(&s, "not json").problem(400, "bad_request");
    let r = put(
        &s,
        r#"{"patterns": [{"name": "x", "within": 0, "stages": []}]}"#,
    );
    let p = r.problem(422, "invalid_request");
    assert!(p["detail"].as_str().unwrap().contains("patterns[0]"), "{p}");
    assert_eq!(state(&s), before);
    // the same document again: everything kept
    let c = put(&s, OLD).json();
    assert_eq!(names(&c["kept"]), ["pair", "solo"]);
    assert!(c["started"].as_array().unwrap().is_empty());
    assert!(c["warnings"].as_array().unwrap().is_empty());
    assert_eq!(state(&s), before);
    // a condition that can never be true is warned (and put in force)
    let never = r#"{"patterns": [{"name": "x", "within": 5, "stages": [
      {"name": "s", "where": {"field": "ok", "op": "gt", "value": true}}]}]}"#;
    let c = put(&s, never).json();
    let w = c["warnings"].as_array().unwrap();
    assert!(
        w.len() == 1 && w[0].as_str().unwrap().contains("stages[0].where"),
        "{c}"
    );
    assert_eq!(names(&c["started"]), ["x"]);
    // a restart warns of the document in force, not of the first one
    let mut s = s;
    s.terminate();
    let s = start(&dir.path().join("db"), &[]);
    assert_eq!(doc_names(&s), ["x"]);
    let log = s.stderr();
    assert!(
        log.contains("stages[0].where") && log.contains("never true"),
        "{log}"
    );
}
