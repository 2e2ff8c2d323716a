//! The pattern engine's routes (`/patterns/...`) against the real binary:
//! every route and problem code with the exact problem shape, the state
//! unchanged after every rejection, the late-vs-malformed order of batch
//! errors, captured values echoed exactly, output pages and the stream
//! carrying the bytes the advances answered, epochs across pattern
//! restores, the two engines leaving each other alone, SIGKILL mid-push and
//! mid-advance, restarts, and concurrent producers.

use crate::support::server;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use server::*;

/// The test document: `pair` (an `a`, then a `b` whose `n` is at least the
/// `a`'s: repetition-free, with a capture comparison and timeouts), `echo`
/// (every `v` event is a match of its own: captures echo fields) and `quiet`
/// (a `login` not followed by a `logout` within 30: absence waits).
const PATTERNS: &str = r#"[
  {"name": "pair", "within": 100, "stages": [
    {"name": "a", "where": {"kind": "a"}},
    {"name": "b", "where": {"all": [{"kind": "b"},
      {"field": "n", "op": "ge", "capture": "a", "capture_field": "n"}]}}]},
  {"name": "echo", "within": 10, "stages": [{"name": "v", "where": {"kind": "v"}}]},
  {"name": "quiet", "within": 30, "stages": [{"name": "start", "where": {"kind": "login"}}],
   "absence": {"kind": "logout"}}]"#;

/// [`PATTERNS`] with these limits.
fn doc_with(max_results: u32, active_states: u32) -> String {
    format!(
        r#"{{"patterns": {PATTERNS},
 "limits": {{"max_results_per_advance": {max_results}, "active_states": {active_states}}}}}"#
    )
}

/// The usual document: at most 40 matches per advance, 12 states per key.
fn doc() -> String {
    doc_with(40, 12)
}

/// Writes `doc` next to the database and starts a server with it.
fn serve(dir: &Path, db: &str, doc: &str, args: &[&str]) -> Server {
    try_serve(dir, db, doc, args).unwrap_or_else(|e| panic!("server did not start: {e}"))
}

fn try_serve(dir: &Path, db: &str, doc: &str, args: &[&str]) -> Result<Server, String> {
    let file = doc_file(dir, db, doc);
    let mut all = vec!["--patterns", file.to_str().unwrap()];
    all.extend_from_slice(args);
    try_start(&dir.join(db), &all)
}

fn doc_file(dir: &Path, db: &str, doc: &str) -> PathBuf {
    use std::sync::atomic::AtomicU32;
    static N: AtomicU32 = AtomicU32::new(0);
    let file = dir.join(format!(
        "{db}.{}.patterns.json",
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, doc).unwrap();
    file
}

/// A pattern event; `fields` is the inside of the fields object.
fn pev(id: &str, key: &str, kind: &str, time: i64, fields: &str) -> String {
    format!(r#"{{"id":"{id}","key":"{key}","kind":"{kind}","time":{time},"fields":{{{fields}}}}}"#)
}

fn array(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

/// The exact bytes of each record of a body's `output` array.
fn records(body: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct Records<'a> {
        #[serde(borrow)]
        output: Vec<&'a RawValue>,
    }
    let r: Records<'_> = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    r.output.iter().map(|o| o.get().to_string()).collect()
}

/// The `seq` of a record.
fn seq_of(record: &str) -> u64 {
    serde_json::from_str::<Value>(record).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

trait Patterns {
    fn push(&self, body: &str) -> Resp;
    fn push_nd(&self, body: &str) -> Resp;
    fn advance(&self, w: i64) -> Resp;
    /// A push that must succeed: its `(first, last)`.
    fn pushed(&self, body: &str) -> (u64, u64);
    /// An advance that must succeed: its output records.
    fn advanced(&self, w: i64) -> Vec<String>;
    /// The whole output, paged `limit` at a time, as the bytes served.
    fn output(&self, limit: u32) -> Vec<String>;
    fn pstatus(&self) -> Value;
    /// The envelope of a checkpoint of the current state (taken, read,
    /// deleted again).
    fn envelope(&self) -> String;
    /// Status, whole output and a checkpoint's bytes.
    fn pstate(&self) -> (String, Vec<String>, String);
}

impl Patterns for Server {
    fn push(&self, body: &str) -> Resp {
        self.post("/patterns/events", body)
    }

    fn push_nd(&self, body: &str) -> Resp {
        self.post_ndjson("/patterns/events", body)
    }

    fn advance(&self, w: i64) -> Resp {
        self.post("/patterns/advance", &format!(r#"{{"watermark":{w}}}"#))
    }

    fn pushed(&self, body: &str) -> (u64, u64) {
        let r = self.push(body);
        assert_eq!(r.status, 200, "push {body}: {}", r.body);
        let v = r.json();
        (v["first"].as_u64().unwrap(), v["last"].as_u64().unwrap())
    }

    fn advanced(&self, w: i64) -> Vec<String> {
        let r = self.advance(w);
        assert_eq!(r.status, 200, "advance {w}: {}", r.body);
        let processed = r.json()["processed"].as_u64().unwrap();
        assert!(
            r.body
                .ends_with(&format!(r#","watermark":{w},"processed":{processed}}}"#)),
            "{}",
            r.body
        );
        records(&r.body)
    }

    fn output(&self, limit: u32) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut after = 0;
        loop {
            let r = self.get(&format!("/patterns/output?after={after}&limit={limit}"));
            assert_eq!(r.status, 200, "{}", r.body);
            let page = records(&r.body);
            if page.is_empty() {
                return out;
            }
            for rec in page {
                assert_eq!(seq_of(&rec), out.len() as u64 + 1, "no gap, no repeat");
                out.push(rec);
            }
            after = r.json()["next"].as_u64().unwrap();
        }
    }

    fn pstatus(&self) -> Value {
        let r = self.get("/patterns/status");
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }

    fn envelope(&self) -> String {
        let c = self.post_empty("/patterns/checkpoints");
        assert_eq!(c.status, 201, "{}", c.body);
        let id = c.json()["id"].as_i64().unwrap();
        let env = self.get(&format!("/patterns/checkpoints/{id}"));
        assert_eq!(env.status, 200);
        assert_eq!(
            self.delete(&format!("/patterns/checkpoints/{id}")).status,
            204
        );
        env.body
    }

    fn pstate(&self) -> (String, Vec<String>, String) {
        (
            self.get("/patterns/status").body,
            self.output(1000),
            self.envelope(),
        )
    }
}

/// A rejection, and the state it must have left alone.
trait Refused {
    /// Asserts the problem (as [`Resp::problem`]) and that `s` is still in
    /// `before` (status, output pages, checkpoint bytes).
    fn refused(
        &self,
        status: u16,
        code: &str,
        s: &Server,
        before: &(String, Vec<String>, String),
    ) -> Value;
}

impl Refused for Resp {
    fn refused(
        &self,
        status: u16,
        code: &str,
        s: &Server,
        before: &(String, Vec<String>, String),
    ) -> Value {
        let v = self.problem(status, code);
        assert_eq!(
            &s.pstate(),
            before,
            "state changed by a {code}: {}",
            self.body
        );
        v
    }
}

#[test]
fn every_pattern_route_answers_in_its_shape() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &doc(), &[]);

    // The document in force: every default written out, patterns by name.
    let d = s.get("/patterns");
    assert_eq!(d.status, 200);
    assert_eq!(d.content_type, "application/json");
    let want = streamforge::patterns::Document::from_json(doc().as_bytes())
        .unwrap()
        .to_json();
    assert_eq!(d.body.as_bytes(), want.as_slice());
    assert!(
        d.body.starts_with(r#"{"patterns":[{"name":"echo","#),
        "{}",
        d.body
    );
    assert!(
        d.body
            .contains(r#""limits":{"max_results_per_advance":40,"active_states":12}"#),
        "{}",
        d.body
    );

    let empty = r#"{"watermark":-1,"buffered":0,"next_ordinal":1,"sequence":0,"epoch":0,"patterns":{"echo":{"keys":0,"branches":0,"waits":0},"pair":{"keys":0,"branches":0,"waits":0},"quiet":{"keys":0,"branches":0,"waits":0}}}"#;
    assert_eq!(s.get("/patterns/status").body, empty);
    assert_eq!(
        s.get("/patterns/output").body,
        r#"{"output":[],"next":0,"head":0,"epoch":0}"#
    );
    // W == watermark: nothing to do, but fine.
    assert_eq!(
        s.advance(-1).body,
        r#"{"output":[],"watermark":-1,"processed":0}"#
    );

    // One object, an array, NDJSON.
    let r = s.push(&pev("e1", "k", "a", 10, r#""n":5"#));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.body, r#"{"first":1,"last":1,"buffered":1}"#);
    let r = s.push(&array(&[
        pev("e2", "k", "b", 20, r#""n":7"#),
        pev("e3", "j", "v", 5, r#""x":-0.0"#),
    ]));
    assert_eq!(r.body, r#"{"first":2,"last":3,"buffered":3}"#);
    let r = s.push_nd(&format!(
        "{}\r\n\n{}\n",
        pev("e4", "k", "login", 30, ""),
        pev("e5", "k", "x", 40, "")
    ));
    assert_eq!(r.body, r#"{"first":4,"last":5,"buffered":5}"#);

    // Processing order: time, then ordinal; patterns by name.
    let a = s.advance(25);
    assert_eq!(a.status, 200, "{}", a.body);
    let echo = r#"{"seq":1,"type":"match","id":"echo:3","pattern":"echo","key":"j","start_time":5,"end_time":5,"last_event_time":5,"deadline":15,"captures":{"v":[{"ordinal":3,"id":"e3","key":"j","kind":"v","time":5,"fields":{"x":-0.0}}]}}"#;
    let pair = r#"{"seq":2,"type":"match","id":"pair:1/2","pattern":"pair","key":"k","start_time":10,"end_time":20,"last_event_time":20,"deadline":110,"captures":{"a":[{"ordinal":1,"id":"e1","key":"k","kind":"a","time":10,"fields":{"n":5}}],"b":[{"ordinal":2,"id":"e2","key":"k","kind":"b","time":20,"fields":{"n":7}}]}}"#;
    assert_eq!(
        a.body,
        format!(r#"{{"output":[{echo},{pair}],"watermark":25,"processed":3}}"#)
    );
    // The login starts an absence wait (deadline 60); the x does not cancel it.
    let a = s.advance(59);
    assert_eq!(a.body, r#"{"output":[],"watermark":59,"processed":2}"#);
    assert_eq!(
        s.get("/patterns/status").body,
        r#"{"watermark":59,"buffered":0,"next_ordinal":6,"sequence":2,"epoch":0,"patterns":{"echo":{"keys":0,"branches":0,"waits":0},"pair":{"keys":0,"branches":0,"waits":0},"quiet":{"keys":1,"branches":0,"waits":1}}}"#
    );

    // Pages.
    assert_eq!(
        s.get("/patterns/output").body,
        format!(r#"{{"output":[{echo},{pair}],"next":2,"head":2,"epoch":0}}"#)
    );
    assert_eq!(
        s.get("/patterns/output?after=1&limit=1").body,
        format!(r#"{{"output":[{pair}],"next":2,"head":2,"epoch":0}}"#)
    );
    assert_eq!(
        s.get("/patterns/output?after=2&epoch=0").body,
        r#"{"output":[],"next":2,"head":2,"epoch":0}"#
    );
    assert_eq!(
        s.get("/patterns/output?after=9").body,
        r#"{"output":[],"next":9,"head":2,"epoch":0}"#
    );

    // Checkpoints.
    let c = s.post_empty("/patterns/checkpoints");
    assert_eq!(c.status, 201, "{}", c.body);
    assert_eq!(c.content_type, "application/json");
    let cv = c.json();
    let id = cv["id"].as_i64().unwrap();
    let env = s.get(&format!("/patterns/checkpoints/{id}"));
    assert_eq!(env.status, 200);
    assert_eq!(env.content_type, "application/json");
    assert!(env
        .body
        .starts_with(r#"{"format":"streamforge-patterns-checkpoint","sha256":""#));
    assert!(env.body.ends_with(r#","version":1}"#), "{}", env.body);
    // The digest is the envelope's own `sha256` field (the SHA-256 of
    // its state), also its ETag.
    let v: serde_json::Value = serde_json::from_str(&env.body).unwrap();
    use sha2::Digest;
    let hex: String = sha2::Sha256::digest(serde_json::to_vec(&v["state"]).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v["sha256"], hex);
    assert_eq!(
        env.headers.get("etag").and_then(|v| v.to_str().ok()),
        Some(format!("\"{hex}\"").as_str())
    );
    assert_eq!(
        c.body,
        format!(
            r#"{{"id":{id},"sequence":2,"digest":"{hex}","bytes":{}}}"#,
            env.body.len()
        )
    );
    let list = s.get("/patterns/checkpoints");
    assert_eq!(list.status, 200);
    assert!(
        list.body.starts_with(&format!(
            r#"{{"checkpoints":[{{"id":{id},"sequence":2,"digest":"{hex}","bytes":{},"created_at":""#,
            env.body.len()
        )),
        "{}",
        list.body
    );
    assert_eq!(list.json()["checkpoints"].as_array().unwrap().len(), 1);

    // The wait expires at 60: an absence match ending at the deadline.
    let quiet = r#"{"seq":3,"type":"match","id":"quiet:4","pattern":"quiet","key":"k","start_time":30,"end_time":60,"last_event_time":30,"deadline":60,"captures":{"start":[{"ordinal":4,"id":"e4","key":"k","kind":"login","time":30,"fields":{}}]}}"#;
    assert_eq!(
        s.advance(60).body,
        format!(r#"{{"output":[{quiet}],"watermark":60,"processed":0}}"#)
    );

    // Restore by id, then by body: the output is cut back to 2, epoch + 1.
    let r = s.post_empty(&format!("/patterns/checkpoints/{id}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.body, r#"{"sequence":2,"watermark":59}"#);
    assert_eq!(
        s.get("/patterns/output").body,
        format!(r#"{{"output":[{echo},{pair}],"next":2,"head":2,"epoch":1}}"#)
    );
    assert_eq!(s.pstatus()["epoch"], 1);
    assert_eq!(s.advanced(60), vec![quiet.to_string()]);
    let r = s.post("/patterns/restore", &env.body);
    assert_eq!(r.body, r#"{"sequence":2,"watermark":59}"#);
    assert_eq!(s.pstatus()["epoch"], 2);

    // Finish: every deadline expires; a second finish outputs nothing.
    let f = s.post_empty("/patterns/finish");
    assert_eq!(f.status, 200, "{}", f.body);
    assert_eq!(
        f.body,
        format!(r#"{{"output":[{quiet}],"watermark":9007230790740991,"processed":0}}"#)
    );
    assert_eq!(
        s.post_empty("/patterns/finish").body,
        r#"{"output":[],"watermark":9007230790740991,"processed":0}"#
    );
    // After finish every event is late, even the largest time.
    let r = s.push(&pev("z", "k", "a", 9_007_199_254_740_991, ""));
    r.problem(409, "late_event");

    // Delete.
    assert_eq!(s.delete(&format!("/patterns/checkpoints/{id}")).status, 204);
    s.get(&format!("/patterns/checkpoints/{id}"))
        .problem(404, "not_found");
    assert_eq!(s.get("/patterns/checkpoints").body, r#"{"checkpoints":[]}"#);
}

/// A state with something everywhere: output, a live branch, an absence
/// wait, a buffered event. Watermark 50, next ordinal 6.
fn populated(s: &Server) {
    s.pushed(&array(&[
        pev("e1", "k", "a", 10, r#""n":5"#),
        pev("e2", "k", "b", 20, r#""n":3"#),
        pev("e3", "j", "login", 30, ""),
        pev("e4", "k", "v", 18, r#""x":1.5"#),
    ]));
    assert_eq!(s.advanced(50).len(), 1);
    s.pushed(&pev("e5", "k", "b", 80, r#""n":9"#));
    let st = s.pstatus();
    assert_eq!(
        (
            &st["watermark"],
            &st["buffered"],
            &st["next_ordinal"],
            &st["patterns"]["pair"]["branches"],
            &st["patterns"]["quiet"]["waits"]
        ),
        (&50.into(), &1.into(), &6.into(), &1.into(), &1.into())
    );
}

/// Replaces the state `S` of an envelope and writes the matching checksum:
/// a well-formed envelope of another state.
fn with_state(env: &str, edit: impl Fn(&str) -> String) -> String {
    let at = env.find(r#","state":"#).unwrap() + 9;
    let end = env.len() - r#","version":1}"#.len();
    let state = edit(&env[at..end]);
    assert_ne!(state, env[at..end], "the edit changed nothing");
    format!(
        r#"{{"format":"streamforge-patterns-checkpoint","sha256":"{}","state":{state},"version":1}}"#,
        streamforge::canonical::sha256_hex(state.as_bytes())
    )
}

#[test]
fn every_problem_code_leaves_the_pattern_state_unchanged() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &doc(), &[]);
    populated(&s);
    let mut before = s.pstate();
    let check = |before: &(String, Vec<String>, String), what: &str| {
        assert_eq!(&s.pstate(), before, "state changed by {what}");
    };

    // 400: malformed events, alone (no index), second in an array and on
    // the second line of NDJSON (index 1).
    let good = pev("g", "k", "a", 60, "");
    let long = "x".repeat(257);
    let many: Vec<String> = (0..65).map(|i| format!(r#""f{i}":1"#)).collect();
    let malformed: Vec<(&str, String)> = vec![
        ("not json", "hello".into()),
        ("json string", r#""x""#.into()),
        ("missing kind", r#"{"id":"a","key":"k","time":60}"#.into()),
        ("empty object", "{}".into()),
        ("time float", good.replace(":60", ":60.0")),
        ("time exponent", good.replace(":60", ":6e1")),
        ("time string", good.replace(":60", r#":"60""#)),
        ("time negative", good.replace(":60", ":-1")),
        (
            "time beyond 2^53-1",
            good.replace(":60", ":9007199254740992"),
        ),
        ("time null", good.replace(":60", ":null")),
        ("empty id", good.replace(r#""id":"g""#, r#""id":"""#)),
        ("empty kind", good.replace(r#""kind":"a""#, r#""kind":"""#)),
        (
            "id of 257 bytes",
            good.replace(r#""id":"g""#, &format!(r#""id":"{long}""#)),
        ),
        (
            "key of 257 bytes",
            good.replace(r#""key":"k""#, &format!(r#""key":"{long}""#)),
        ),
        (
            "kind of 257 bytes",
            good.replace(r#""kind":"a""#, &format!(r#""kind":"{long}""#)),
        ),
        (
            "unknown field",
            good.replace(r#""id""#, r#""extra":1,"id""#),
        ),
        (
            "duplicate field",
            good.replace(r#""id":"g""#, r#""id":"g","id":"h""#),
        ),
        (
            "fields null",
            good.replace(r#""fields":{}"#, r#""fields":null"#),
        ),
        (
            "fields array",
            good.replace(r#""fields":{}"#, r#""fields":[]"#),
        ),
        ("null value", pev("g", "k", "a", 60, r#""a":null"#)),
        ("array value", pev("g", "k", "a", 60, r#""a":[1]"#)),
        ("object value", pev("g", "k", "a", 60, r#""a":{"x":1}"#)),
        (
            "decimal and more",
            pev("g", "k", "a", 60, r#""a":{"decimal":"1","x":1}"#),
        ),
        (
            "decimal 1.",
            pev("g", "k", "a", 60, r#""a":{"decimal":"1."}"#),
        ),
        (
            "decimal number",
            pev("g", "k", "a", 60, r#""a":{"decimal":1}"#),
        ),
        (
            "decimal of 39 digits",
            pev(
                "g",
                "k",
                "a",
                60,
                &format!(r#""a":{{"decimal":"{}"}}"#, "1".repeat(39)),
            ),
        ),
        (
            "integer beyond i64",
            pev("g", "k", "a", 60, r#""a":9223372036854775808"#),
        ),
        ("double overflow", pev("g", "k", "a", 60, r#""a":1e999"#)),
        (
            "duplicate field name",
            pev("g", "k", "a", 60, r#""a":1,"a":2"#),
        ),
        ("empty field name", pev("g", "k", "a", 60, r#""":1"#)),
        ("65 fields", pev("g", "k", "a", 60, &many.join(","))),
        ("a number", "5".into()),
        ("true", "true".into()),
    ];
    for (what, body) in &malformed {
        let r = s.push(body);
        let v = r.refused(400, "bad_request", &s, &before);
        assert!(v.get("index").is_none(), "{what}: {}", r.body);
        let r = s.push(&format!("[{good},{body}]"));
        assert_eq!(
            r.refused(400, "bad_request", &s, &before)["index"],
            1,
            "{what}: {}",
            r.body
        );
        let r = s.push_nd(&format!("{good}\n{body}\n"));
        assert_eq!(
            r.refused(400, "bad_request", &s, &before)["index"],
            1,
            "{what}: {}",
            r.body
        );
    }
    // An array inside an array is a malformed item.
    let r = s.push(&format!("[[{good}]]"));
    assert_eq!(r.refused(400, "bad_request", &s, &before)["index"], 0);
    for (what, body) in [
        ("empty body", String::new()),
        ("trailing garbage", format!("{good} x")),
        ("two objects", format!("{good}{good}")),
        ("unclosed array", format!("[{good}")),
        ("array then garbage", format!("[{good}] x")),
    ] {
        let r = s.push(&body);
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        r.refused(400, "bad_request", &s, &before);
    }
    check(&before, "malformed events");

    // 409 late_event: at or before the watermark (50).
    for t in [50, 0] {
        let r = s.push(&pev("l", "k", "a", t, ""));
        assert!(r
            .refused(409, "late_event", &s, &before)
            .get("index")
            .is_none());
        let r = s.push(&array(&[good.clone(), pev("l", "k", "a", t, "")]));
        assert_eq!(r.refused(409, "late_event", &s, &before)["index"], 1);
        let r = s.push_nd(&format!("{good}\n{}", pev("l", "k", "a", t, "")));
        assert_eq!(r.refused(409, "late_event", &s, &before)["index"], 1);
    }
    check(&before, "late events");

    // 422 invalid_request: empty batches, a watermark beyond the final one,
    // page parameters out of range, an epoch ahead.
    for body in ["[]", " [ ] "] {
        s.push(body).refused(422, "invalid_request", &s, &before);
    }
    for body in ["", "\n\n", " \r\n"] {
        s.push_nd(body).refused(422, "invalid_request", &s, &before);
    }
    for w in [9_007_230_790_740_992, i64::MAX] {
        s.advance(w).refused(422, "invalid_request", &s, &before);
    }
    for q in [
        "limit=0",
        "limit=10001",
        "wait_ms=30001",
        "epoch=1",
        "after=-1",
    ] {
        s.get(&format!("/patterns/output?{q}"))
            .refused(422, "invalid_request", &s, &before);
    }
    // 400 for advance bodies and query numbers that are not integers.
    for body in [
        "",
        "{}",
        "[]",
        r#"{"watermark":60.0}"#,
        r#"{"watermark":"60"}"#,
        r#"{"watermark":null}"#,
        r#"{"watermark":60,"x":1}"#,
        r#"{"watermark":9223372036854775808}"#,
        r#"{"watermark":60}{"watermark":61}"#,
        r#"{"watermark":60,"watermark":61}"#,
        r#"{"watermark":6e1}"#,
        r#"{"watermark":true}"#,
        r#"[60]"#,
    ] {
        s.post("/patterns/advance", body)
            .refused(400, "bad_request", &s, &before);
    }
    for q in ["limit=x", "after=1.5", "wait_ms=", "after=1&after=2"] {
        s.get(&format!("/patterns/output?{q}"))
            .refused(400, "bad_request", &s, &before);
    }
    // 409 watermark_regression.
    for w in [49, -1, -7] {
        let v = s
            .advance(w)
            .refused(409, "watermark_regression", &s, &before);
        assert!(v.get("index").is_none());
    }
    check(&before, "advances and queries");

    // Streams refuse before they start.
    for (id, status) in [("x:1", 400), ("1:0", 422), ("0:y", 400)] {
        let r = s
            .client
            .get(s.url("/patterns/output/stream"))
            .header("Last-Event-ID", id)
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{id}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    let r = s
        .client
        .get(s.url("/patterns/output/stream?epoch=3"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);

    // 404: unknown routes, methods and checkpoints.
    for path in [
        "/patterns/nope",
        "/patterns/events",
        "/patterns/checkpoints/999",
        "/patterns/checkpoints/abc",
        "/patterns/output/stream/x",
    ] {
        s.get(path).refused(404, "not_found", &s, &before);
    }
    let r = s.post_empty("/patterns/status");
    r.refused(404, "not_found", &s, &before);
    assert_eq!(r.headers["allow"], "GET,HEAD");
    let r = s.get("/patterns/advance");
    r.refused(404, "not_found", &s, &before);
    assert_eq!(r.headers["allow"], "POST");
    s.post_empty("/patterns")
        .refused(404, "not_found", &s, &before);
    s.delete("/patterns/checkpoints/999")
        .refused(404, "not_found", &s, &before);
    s.delete("/patterns/checkpoints/-1")
        .refused(404, "not_found", &s, &before);
    s.post_empty("/patterns/checkpoints/999/restore")
        .refused(404, "not_found", &s, &before);
    s.post_empty("/patterns/checkpoints/x/restore")
        .refused(404, "not_found", &s, &before);
    check(&before, "not found");

    // 422 invalid_checkpoint.
    let env = s.envelope();
    let mut flipped = env.clone().into_bytes();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    let window = {
        let c = s.post_empty("/checkpoints").json();
        s.get(&format!("/checkpoints/{}", c["id"])).body
    };
    let other = {
        let other = doc().replace(r#""within": 100"#, r#""within": 101"#);
        let d = streamforge::patterns::Document::from_json(other.as_bytes()).unwrap();
        String::from_utf8(streamforge::patterns::Engine::new(d).checkpoint()).unwrap()
    };
    for (what, body) in [
        ("not json", "nope".to_string()),
        ("empty", String::new()),
        ("truncated", env[..env.len() - 10].to_string()),
        ("flipped", String::from_utf8_lossy(&flipped).into_owned()),
        ("version", env.replace(r#""version":1}"#, r#""version":2}"#)),
        (
            "format",
            env.replace("streamforge-patterns-checkpoint", "streamforge-checkpoint"),
        ),
        (
            "checksum",
            env.replacen("\"sha256\":\"", "\"sha256\":\"0", 1),
        ),
        ("a window checkpoint", window),
        ("other patterns", other),
        (
            "a watermark below -1",
            with_state(&env, |st| {
                st.replace(r#""watermark":50"#, r#""watermark":-2"#)
            }),
        ),
        (
            "a buffered event at the watermark",
            with_state(&env, |st| {
                st.replace(r#""watermark":50"#, r#""watermark":80"#)
            }),
        ),
    ] {
        let r = s.post("/patterns/restore", &body);
        assert_eq!(r.status, 422, "{what}: {}", r.body);
        r.refused(422, "invalid_checkpoint", &s, &before);
    }
    assert_eq!(
        s.post("/patterns/restore", &env).body,
        r#"{"sequence":1,"watermark":50}"#,
        "the envelope itself restores"
    );
    before.0 = before.0.replace(r#""epoch":0"#, r#""epoch":1"#);
    check(&before, "invalid checkpoints");

    // 422 limit_exceeded: 41 matches in one advance (30 echoes at 60, the
    // absence match at 60, 11 echoes at 70), nothing of it committed...
    let burst = |t: i64, n: usize| {
        array(
            &(0..n)
                .map(|i| pev(&format!("v{t}-{i}"), &format!("m{i}"), "v", t, ""))
                .collect::<Vec<_>>(),
        )
    };
    s.pushed(&burst(60, 30));
    s.pushed(&burst(70, 11));
    let before = s.pstate();
    for w in [75, 79, 1000] {
        let v = s.advance(w).refused(422, "limit_exceeded", &s, &before);
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains("max_results_per_advance"), "{detail}");
        assert!(v.get("index").is_none());
        check(&before, "max_results_per_advance");
    }
    // ... so the same events pass in smaller steps.
    assert_eq!(s.advanced(65).len(), 31);
    assert_eq!(s.advanced(75).len(), 11);
    // More than 12 branches of one pattern and key.
    let states: Vec<String> = (0..13)
        .map(|i| pev(&format!("s{i}"), "big", "a", 90, r#""n":1"#))
        .collect();
    s.pushed(&array(&states));
    let before = s.pstate();
    let v = s.advance(95).refused(422, "limit_exceeded", &s, &before);
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains("active_states") && detail.contains("pair") && detail.contains("big"),
        "{detail}"
    );
    check(&before, "active_states");
    // The buffered b at 80 is still there: processing it alone works.
    let out = s.advanced(85);
    assert_eq!(out.len(), 1);
    assert!(out[0].contains(r#""id":"pair:1/5""#), "{}", out[0]);

    // A rejected push consumed no ordinal.
    let next = s.pstatus()["next_ordinal"].as_u64().unwrap();
    assert_eq!(s.pushed(&pev("last", "k", "a", 200, "")), (next, next));
}

#[test]
fn a_batch_fails_with_its_first_failing_item_late_or_malformed() {
    let dir = tempdir();
    let s = serve(dir.path(), "db", &doc(), &[]);
    s.pushed(&pev("e0", "k", "a", 100, ""));
    s.advanced(100);
    let before = s.pstate();
    let good = pev("g", "k", "a", 101, "");
    let late = pev("l", "k", "a", 100, "");
    let bad = pev("b", "k", "a", 102, r#""x":null"#);
    let cases: Vec<(&str, String, u16, usize)> = vec![
        (
            "late, then malformed",
            array(&[good.clone(), late.clone(), bad.clone()]),
            409,
            1,
        ),
        (
            "malformed, then late",
            array(&[good.clone(), bad.clone(), late.clone()]),
            400,
            1,
        ),
        ("late first", array(&[late.clone(), bad.clone()]), 409, 0),
        (
            "malformed first",
            array(&[bad.clone(), late.clone()]),
            400,
            0,
        ),
        ("a lone late item", format!("[{late}]"), 409, 0),
        ("a lone malformed item", format!("[{bad}]"), 400, 0),
        (
            "late, then broken JSON",
            format!("[{good},{late},{{\"id\":"),
            409,
            1,
        ),
        (
            "broken JSON, then late",
            format!("[{good},{{\"id\" {late}]"),
            400,
            1,
        ),
        (
            "broken JSON after good ones",
            format!("[{good},{good},"),
            400,
            2,
        ),
    ];
    for (what, body, status, index) in &cases {
        let r = s.push(body);
        let code = if *status == 409 {
            "late_event"
        } else {
            "bad_request"
        };
        let v = r.refused(*status, code, &s, &before);
        assert_eq!(v["index"], *index, "{what}: {}", r.body);
    }
    // NDJSON: the same rule; blank lines are no items.
    let nd: Vec<(&str, String, u16, usize)> = vec![
        (
            "late, then malformed",
            format!("{good}\n\n{late}\r\n{bad}\n"),
            409,
            1,
        ),
        (
            "malformed, then late",
            format!("\n{good}\n \n{bad}\n{late}"),
            400,
            1,
        ),
        ("late first", format!("{late}\n{bad}"), 409, 0),
        ("malformed first", format!("{bad}\n{late}"), 400, 0),
        (
            "late, then not JSON",
            format!("{good}\n{good}\n{late}\nnope\n"),
            409,
            2,
        ),
    ];
    for (what, body, status, index) in &nd {
        let r = s.push_nd(body);
        let code = if *status == 409 {
            "late_event"
        } else {
            "bad_request"
        };
        let v = r.refused(*status, code, &s, &before);
        assert_eq!(v["index"], *index, "{what}: {}", r.body);
    }
    // The malformed line is named in the detail by its line in the body.
    let v = s
        .push_nd(&format!("\n{good}\n \n{bad}\n"))
        .refused(400, "bad_request", &s, &before);
    assert!(
        v["detail"].as_str().unwrap().contains("line 4"),
        "{}",
        v["detail"]
    );
    // A single object: its error, without an index.
    let v = s.push(&late).refused(409, "late_event", &s, &before);
    assert!(v.get("index").is_none());
    assert!(
        v["detail"].as_str().unwrap().contains("100"),
        "the detail names the time and the watermark: {}",
        v["detail"]
    );
    let v = s.push(&bad).refused(400, "bad_request", &s, &before);
    assert!(v.get("index").is_none());
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .starts_with("invalid pattern event: fields.x"),
        "the detail names the field: {}",
        v["detail"]
    );
    assert_eq!(s.pstate(), before, "nothing of a failed batch stays");
    // The first time after the watermark is not late; ordinals go on from
    // where the last accepted push left them.
    assert_eq!(s.pushed(&array(&[good.clone(), good])), (2, 3));
}

#[test]
fn captured_values_are_echoed_exactly_in_answers_pages_and_the_stream() {
    let dir = tempdir();
    let db = "db";
    let mut s = serve(dir.path(), db, &doc(), &["--checkpoint-every", "0"]);
    // (as pushed, as echoed), in push order
    let fields = [
        (r#""i":42"#, r#""i":42"#),
        (r#""neg0":-0"#, r#""neg0":0"#),
        (
            r#""imax":9223372036854775807"#,
            r#""imax":9223372036854775807"#,
        ),
        (
            r#""imin":-9223372036854775808"#,
            r#""imin":-9223372036854775808"#,
        ),
        (r#""d0":-0.0"#, r#""d0":-0.0"#),
        (r#""d2":2.0"#, r#""d2":2.0"#),
        (r#""de":1E2"#, r#""de":100.0"#),
        (r#""df":15e-1"#, r#""df":1.5"#),
        // (serde_json's spelling of the exponent, as tests/it/patterns_rules.rs)
        (r#""dbig":1e300"#, r#""dbig":1e+300"#),
        (r#""dsci":1.25E-7"#, r#""dsci":1.25e-7"#),
        (r#""dtiny":5e-324"#, r#""dtiny":5e-324"#),
        (
            r#""dlong":0.30000000000000004"#,
            r#""dlong":0.30000000000000004"#,
        ),
        (r#""dec":{"decimal":"1.50"}"#, r#""dec":{"decimal":"1.50"}"#),
        (
            r#""decneg":{"decimal":"-12.50"}"#,
            r#""decneg":{"decimal":"-12.50"}"#,
        ),
        (
            r#""dec0":{"decimal":"000.000"}"#,
            r#""dec0":{"decimal":"000.000"}"#,
        ),
        (
            r#""dec38":{"decimal":"12345678901234567890.123456789012345678"}"#,
            r#""dec38":{"decimal":"12345678901234567890.123456789012345678"}"#,
        ),
        (r#""s":"a\"b\\c\u00e9\n😀""#, r#""s":"a\"b\\cé\n😀""#),
        (r#""t":true"#, r#""t":true"#),
        (r#""f":false"#, r#""f":false"#),
        (r#""z":"""#, r#""z":"""#),
    ];
    let pushed: Vec<&str> = fields.iter().map(|(p, _)| *p).collect();
    let echoed: Vec<&str> = fields.iter().map(|(_, e)| *e).collect();
    let mut answered = Vec::new();
    s.pushed(&pev("v1", "k", "v", 1, &pushed.join(",")));
    // Comparisons keep the three number types apart: 1.5 equals 1.50 as
    // Decimals; a Double never equals an Integer.
    s.pushed(&array(&[
        pev("a1", "d", "a", 2, r#""n":{"decimal":"1.50"}"#),
        pev("b1", "d", "b", 3, r#""n":{"decimal":"1.5"}"#),
        pev("a2", "e", "a", 2, r#""n":2.0"#),
        pev("b2", "e", "b", 3, r#""n":2"#),
        pev("b3", "e", "b", 4, r#""n":2.5e0"#),
    ]));
    answered.extend(s.advanced(3));
    answered.extend(s.advanced(200));
    let want_v = format!(
        r#"{{"seq":1,"type":"match","id":"echo:1","pattern":"echo","key":"k","start_time":1,"end_time":1,"last_event_time":1,"deadline":11,"captures":{{"v":[{{"ordinal":1,"id":"v1","key":"k","kind":"v","time":1,"fields":{{{}}}}}]}}}}"#,
        echoed.join(",")
    );
    let want = vec![
        want_v,
        r#"{"seq":2,"type":"match","id":"pair:2/3","pattern":"pair","key":"d","start_time":2,"end_time":3,"last_event_time":3,"deadline":102,"captures":{"a":[{"ordinal":2,"id":"a1","key":"d","kind":"a","time":2,"fields":{"n":{"decimal":"1.50"}}}],"b":[{"ordinal":3,"id":"b1","key":"d","kind":"b","time":3,"fields":{"n":{"decimal":"1.5"}}}]}}"#.to_string(),
        r#"{"seq":3,"type":"match","id":"pair:4/6","pattern":"pair","key":"e","start_time":2,"end_time":4,"last_event_time":4,"deadline":102,"captures":{"a":[{"ordinal":4,"id":"a2","key":"e","kind":"a","time":2,"fields":{"n":2.0}}],"b":[{"ordinal":6,"id":"b3","key":"e","kind":"b","time":4,"fields":{"n":2.5}}]}}"#.to_string(),
    ];
    assert_eq!(answered, want);
    assert_eq!(s.output(1), want, "pages carry the answered bytes");
    let resp = s
        .client
        .get(s.url("/patterns/output/stream"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = read_events(resp, |e| e.id == "0:3");
    let data: Vec<String> = events.iter().map(|e| e.data.clone()).collect();
    assert_eq!(data, want, "the stream carries the answered bytes");
    assert_eq!(
        events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["0:1", "0:2", "0:3"]
    );
    // A restart replays the log (checking every record byte for byte).
    s.kill();
    let s = serve(dir.path(), db, &doc(), &["--checkpoint-every", "0"]);
    assert_eq!(s.output(2), want);
}

/// One step of a pattern workload.
#[derive(Debug, Clone)]
enum Step {
    /// A JSON array (or one object) of events.
    Push(String),
    /// The same as NDJSON.
    PushNd(String),
    /// `POST /patterns/advance`.
    Advance(i64),
}

impl Step {
    fn send(&self, s: &Server) -> Resp {
        match self {
            Step::Push(b) => s.push(b),
            Step::PushNd(b) => s.push_nd(b),
            Step::Advance(w) => s.advance(*w),
        }
    }

    /// Sends it; it must succeed. Its output records (none for a push).
    fn apply(&self, s: &Server) -> Vec<String> {
        let r = self.send(s);
        assert_eq!(r.status, 200, "{self:?}: {}", r.body);
        match self {
            Step::Advance(_) => records(&r.body),
            _ => Vec::new(),
        }
    }
}

/// A field value of one of the five types.
fn value(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => format!("{}", rng.below(20) as i64 - 5),
        1 => format!("{}.{}", rng.below(20) as i64 - 5, rng.below(10)),
        2 => format!(r#"{{"decimal":"{}.{:02}"}}"#, rng.below(20), rng.below(100)),
        3 => format!(r#""s{}""#, rng.below(5)),
        4 => "true".into(),
        _ => format!("{}e0", rng.below(20)),
    }
}

/// A deterministic workload for [`doc`]'s patterns (never late, never a
/// limit with [`roomy`]): batches over five keys, NDJSON now and then, and
/// advances.
fn workload(seed: u64, steps: usize) -> Vec<Step> {
    let mut rng = Rng(seed);
    let mut w = -1i64;
    let mut id = 0;
    let mut out = Vec::new();
    for _ in 0..steps {
        if rng.below(4) == 0 {
            w += 1 + rng.below(60) as i64;
            out.push(Step::Advance(w));
            continue;
        }
        let items: Vec<String> = (0..1 + rng.below(5))
            .map(|_| {
                id += 1;
                let kind = ["a", "b", "b", "v", "login", "logout", "x"][rng.below(7) as usize];
                let n = value(&mut rng);
                pev(
                    &format!("e{id}"),
                    &format!("k{}", rng.below(5)),
                    kind,
                    w + 1 + rng.below(120) as i64,
                    &format!(r#""n":{n}"#),
                )
            })
            .collect();
        out.push(if rng.below(3) == 0 {
            Step::PushNd(items.join("\n"))
        } else if items.len() == 1 && rng.below(2) == 0 {
            Step::Push(items[0].clone())
        } else {
            Step::Push(array(&items))
        });
    }
    out
}

/// [`doc`] with limits no workload reaches.
fn roomy() -> String {
    doc_with(100_000, 10_000)
}

#[test]
fn pages_and_the_stream_carry_exactly_the_answered_bytes() {
    let dir = tempdir();
    let mut s = serve(dir.path(), "db", &roomy(), &["--checkpoint-every", "0"]);
    let mut answered = Vec::new();
    for step in workload(3, 160) {
        answered.extend(step.apply(&s));
    }

    // A long poll and an open stream wake on the next committed record.
    let n = answered.len();
    let poll = {
        let (c, u) = (
            s.client.clone(),
            s.url(&format!("/patterns/output?after={n}&wait_ms=20000")),
        );
        std::thread::spawn(move || c.get(u).send().unwrap().text().unwrap())
    };
    let stream = {
        let resp = s
            .client
            .get(s.url(&format!("/patterns/output/stream?after={n}")))
            .send()
            .unwrap();
        std::thread::spawn(move || read_events(resp, |_| true))
    };
    wait_until("the poll and the stream wait", DEADLINE, || {
        (s.metric("streamforge_waiters") >= 2.0).then_some(())
    });
    let w = s.pstatus()["watermark"].as_i64().unwrap();
    s.pushed(&pev("late-comer", "q", "v", w + 1, r#""n":1.0"#));
    let new = s.advanced(w + 1);
    assert_eq!(new.len(), 1);
    assert_eq!(records(&poll.join().unwrap()), new);
    let got = stream.join().unwrap();
    assert_eq!(
        (got[0].id.clone(), &got[0].data),
        (format!("0:{}", n + 1), &new[0])
    );
    answered.extend(new);

    let f = s.post_empty("/patterns/finish");
    assert_eq!(f.status, 200);
    answered.extend(records(&f.body));
    let n = answered.len();
    assert!(n > 60, "workload too small: {n}");
    assert!(answered.iter().any(|r| r.contains(r#""type":"timeout""#)));
    assert!(answered.iter().any(|r| r.contains(r#""pattern":"quiet""#)));
    for limit in [1, 7, 1000] {
        assert_eq!(s.output(limit), answered, "pages of {limit}");
    }
    let first = s.get("/patterns/output?after=0&limit=1").json();
    assert_eq!(
        (first["head"].as_u64(), first["next"].as_u64()),
        (Some(n as u64), Some(1))
    );

    // The stream: from the start, then resumed after half.
    let resp = s
        .client
        .get(s.url("/patterns/output/stream"))
        .send()
        .unwrap();
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = read_events(resp, |e| e.id == format!("0:{n}"));
    let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(data, answered);
    let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, (1..=n).map(|q| format!("0:{q}")).collect::<Vec<_>>());
    let half = n / 2;
    let resp = s
        .client
        .get(s.url("/patterns/output/stream?after=3"))
        .header("Last-Event-ID", format!("0:{half}"))
        .send()
        .unwrap();
    let rest = read_events(resp, |e| e.id == format!("0:{n}"));
    assert_eq!(rest[0].id, format!("0:{}", half + 1), "Last-Event-ID wins");
    assert_eq!(
        rest.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        answered[half..]
    );

    s.kill();
    let s = serve(dir.path(), "db", &roomy(), &["--checkpoint-every", "0"]);
    assert_eq!(s.output(13), answered, "the same bytes after a replay");
}

/// A consumer of `/patterns/output` that keeps what it read and follows the
/// page rules: `next` belongs to the page's `epoch`; `rewound_to` voids
/// what is held beyond it.
struct Consumer {
    held: Vec<String>,
    after: u64,
    epoch: u64,
    rewinds: Vec<u64>,
}

impl Consumer {
    fn new() -> Consumer {
        Consumer {
            held: Vec::new(),
            after: 0,
            epoch: 0,
            rewinds: Vec::new(),
        }
    }

    fn catch_up(&mut self, s: &Server) {
        loop {
            let r = s.get(&format!(
                "/patterns/output?after={}&epoch={}&limit=5",
                self.after, self.epoch
            ));
            assert_eq!(r.status, 200, "{}", r.body);
            let v = r.json();
            if let Some(to) = v.get("rewound_to") {
                let to = to.as_u64().unwrap();
                self.rewinds.push(to);
                self.held.truncate(to as usize);
            }
            let page = records(&r.body);
            for rec in &page {
                assert_eq!(seq_of(rec), self.held.len() as u64 + 1, "no gap, no repeat");
                self.held.push(rec.clone());
            }
            self.after = v["next"].as_u64().unwrap();
            self.epoch = v["epoch"].as_u64().unwrap();
            if page.is_empty() {
                return;
            }
        }
    }
}

#[test]
fn epochs_rewind_pages_and_streams_across_pattern_restores() {
    let dir = tempdir();
    let mut s = serve(dir.path(), "db", &roomy(), &["--checkpoint-every", "0"]);
    let steps = workload(11, 240);
    // what each step outputs in the uninterrupted run
    let mut out_of = Vec::new();
    let mut consumer = Consumer::new();
    let mut cps = Vec::new();
    for (i, step) in steps[..180].iter().enumerate() {
        if i == 60 || i == 120 {
            let c = s.post_empty("/patterns/checkpoints").json();
            cps.push((c["id"].as_i64().unwrap(), c["sequence"].as_u64().unwrap()));
        }
        out_of.push(step.apply(&s).len() as u64);
    }
    consumer.catch_up(&s);
    let head0 = consumer.after;
    let [(c1, s1), (c2, s2)] = cps[..] else {
        unreachable!()
    };
    assert!(0 < s1 && s1 < s2 && s2 < head0, "{s1} {s2} {head0}");
    let send = |s: &Server, range: std::ops::Range<usize>| {
        for step in &steps[range] {
            step.apply(s);
        }
    };

    // Two restores, with calls after each, between two polls: the smallest
    // cut wins.
    let r = s.post_empty(&format!("/patterns/checkpoints/{c2}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["sequence"], s2);
    send(&s, 120..140);
    let r = s.post_empty(&format!("/patterns/checkpoints/{c1}/restore"));
    assert_eq!(r.json()["sequence"], s1);
    send(&s, 60..100);
    assert_eq!(s.pstatus()["epoch"], 2);
    consumer.catch_up(&s);
    assert_eq!(consumer.rewinds, [s1]);
    assert_eq!(consumer.epoch, 2);
    assert_eq!(consumer.held, s.output(1000));
    // Without epoch: `after` in the current epoch; an epoch ahead: 422.
    let plain = s.get(&format!("/patterns/output?after={s1}")).json();
    assert!(plain.get("rewound_to").is_none());
    assert_eq!(plain["epoch"], 2);
    s.get("/patterns/output?after=0&epoch=3")
        .problem(422, "invalid_request");

    // A stream resumed from epoch 0 rewinds to the smallest cut, then goes on.
    let head = s.pstatus()["sequence"].as_u64().unwrap();
    let resp = s
        .client
        .get(s.url("/patterns/output/stream"))
        .header("Last-Event-ID", format!("0:{head0}"))
        .send()
        .unwrap();
    let events = read_events(resp, |e| e.id == format!("2:{head}"));
    assert_eq!(
        (
            events[0].event.as_str(),
            events[0].id.clone(),
            events[0].data.clone()
        ),
        (
            "rewind",
            format!("2:{s1}"),
            format!(r#"{{"epoch":2,"after":{s1}}}"#)
        )
    );
    let rest: Vec<String> = events[1..].iter().map(|e| e.data.clone()).collect();
    assert_eq!(rest, s.output(1000)[s1 as usize..]);

    // A stream open during a restore: `rewind`, then the new epoch's records.
    let resp = s
        .client
        .get(s.url(&format!("/patterns/output/stream?after={head}&epoch=2")))
        .send()
        .unwrap();
    wait_until("the stream waits", DEADLINE, || {
        (s.metric("streamforge_waiters") >= 1.0).then_some(())
    });
    let r = s.post_empty(&format!("/patterns/checkpoints/{c1}/restore"));
    assert_eq!(r.status, 200);
    send(&s, 60..75);
    let new_head = s1 + out_of[60..75].iter().sum::<u64>();
    assert!(
        new_head > s1,
        "the steps after the checkpoint output something"
    );
    let events = read_events(resp, |e| e.id == format!("3:{new_head}"));
    assert_eq!(events[0].event, "rewind");
    assert_eq!(events[0].id, format!("3:{s1}"));
    assert_eq!(events[0].data, format!(r#"{{"epoch":3,"after":{s1}}}"#));
    let rest: Vec<String> = events[1..].iter().map(|e| e.data.clone()).collect();
    assert_eq!(rest, s.output(1000)[s1 as usize..]);
    assert!(events[1..].iter().all(|e| e.event.is_empty()));

    // A crash right after a restore keeps the new epoch and its cut.
    consumer.catch_up(&s);
    let before = consumer.after;
    let r = s.post_empty(&format!("/patterns/checkpoints/{c1}/restore"));
    assert_eq!(r.status, 200);
    s.kill();
    let s = serve(dir.path(), "db", &roomy(), &["--checkpoint-every", "0"]);
    assert_eq!(s.pstatus()["epoch"], 4);
    let v = s
        .get(&format!("/patterns/output?after={before}&epoch=3"))
        .json();
    assert_eq!(
        (v["rewound_to"].as_u64(), v["epoch"].as_u64()),
        (Some(s1), Some(4))
    );
    send(&s, 60..240);
    consumer.catch_up(&s);
    assert_eq!(consumer.held, s.output(1000));
    assert_eq!(consumer.rewinds, [s1, s1, s1]);

    // A fresh database whose first act is a restore: head at the
    // checkpoint's sequence, nothing stored before it, epoch 1.
    let env = s.get(&format!("/patterns/checkpoints/{c2}")).body;
    let fresh = serve(dir.path(), "fresh", &roomy(), &[]);
    let r = fresh.post("/patterns/restore", &env);
    assert_eq!(
        r.body,
        format!(r#"{{"sequence":{s2},"watermark":{}}}"#, {
            let Step::Advance(w) = steps[..120]
                .iter()
                .rev()
                .find(|st| matches!(st, Step::Advance(_)))
                .unwrap()
            else {
                unreachable!()
            };
            w
        })
    );
    assert_eq!(
        fresh.get("/patterns/output").body,
        format!(r#"{{"output":[],"next":0,"head":{s2},"epoch":1}}"#)
    );
    send(&fresh, 120..180);
    let full_from_s2: Vec<String> = {
        let reference = serve(dir.path(), "ref", &roomy(), &[]);
        send(&reference, 0..180);
        reference.output(1000)[s2 as usize..].to_vec()
    };
    let page = fresh.get(&format!("/patterns/output?after={s2}&limit=10000"));
    assert_eq!(records(&page.body), full_from_s2);
    assert_eq!(
        records(&fresh.get("/patterns/output?after=0&limit=10000").body),
        full_from_s2,
        "nothing stored up to the checkpoint's sequence"
    );
}

/// The window engine's state as served: status (with its epoch), changes,
/// late records.
fn window_state(s: &Server) -> (String, Vec<String>, Vec<String>) {
    (s.get("/status").body, s.all_changes(), s.all_late())
}

/// A window change after the current state: one delivery after each
/// partition's offset, then every partition's watermark well past it.
fn window_change(s: &Server) -> String {
    let st = s.get("/status").json();
    let w = st["watermark"].as_i64().unwrap_or(0).max(0);
    let off = st["partitions"]["p0"]["offset"].as_i64().unwrap() + 1;
    s.ok(
        "/events",
        &delivery("p0", Some(off), &format!("x{off}"), "zz", w + 1, 1),
    );
    let mut changes = Vec::new();
    for p in ["p0", "p1", "p2", "p3"] {
        let r = s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":{}}}"#, w + 100_000),
        );
        changes.extend(
            serde_json::from_str::<Value>(&r).unwrap()["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(Value::to_string),
        );
    }
    assert!(!changes.is_empty());
    changes[0].clone()
}

#[test]
fn the_window_engine_and_the_pattern_engine_leave_each_other_alone() {
    let dir = tempdir();
    let args = ["--checkpoint-every", "0"];
    let mut s = serve(dir.path(), "db", &roomy(), &args);
    let window_ops = server::workload(5, 100);
    let steps = workload(7, 100);
    // Interleaved calls of both engines...
    for i in 0..window_ops.len().max(steps.len()) {
        if let Some(op) = window_ops.get(i) {
            assert_eq!(op.send(&s).status, 200);
        }
        if let Some(step) = steps.get(i) {
            step.apply(&s);
        }
    }
    // ... end where each engine alone ends.
    let reference = serve(dir.path(), "ref", &roomy(), &args);
    for op in &window_ops {
        assert_eq!(op.send(&reference).status, 200);
    }
    for step in &steps {
        step.apply(&reference);
    }
    assert_eq!(window_state(&s), window_state(&reference));
    assert_eq!(s.pstate(), reference.pstate());
    drop(reference);

    // Checkpoints: one id space, two lists; an id of one engine is unknown
    // under the other's routes.
    let cw = s.post_empty("/checkpoints").json()["id"].as_i64().unwrap();
    let cp = s.post_empty("/patterns/checkpoints").json()["id"]
        .as_i64()
        .unwrap();
    assert_ne!(cw, cp);
    let ids = |path: &str| -> Vec<i64> {
        s.get(path).json()["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids("/checkpoints"), [cw]);
    assert_eq!(ids("/patterns/checkpoints"), [cp]);
    let window_env = s.get(&format!("/checkpoints/{cw}")).body;
    let pattern_env = s.get(&format!("/patterns/checkpoints/{cp}")).body;
    let before = (window_state(&s), s.pstate());
    s.get(&format!("/patterns/checkpoints/{cw}"))
        .problem(404, "not_found");
    s.post_empty(&format!("/patterns/checkpoints/{cw}/restore"))
        .problem(404, "not_found");
    s.delete(&format!("/patterns/checkpoints/{cw}"))
        .problem(404, "not_found");
    s.get(&format!("/checkpoints/{cp}"))
        .problem(404, "not_found");
    s.post_empty(&format!("/checkpoints/{cp}/restore"))
        .problem(404, "not_found");
    s.delete(&format!("/checkpoints/{cp}"))
        .problem(404, "not_found");
    s.post("/patterns/restore", &window_env)
        .problem(422, "invalid_checkpoint");
    s.post("/restore", &pattern_env)
        .problem(422, "invalid_checkpoint");
    assert_eq!((window_state(&s), s.pstate()), before);
    assert_eq!(ids("/checkpoints"), [cw]);
    assert_eq!(ids("/patterns/checkpoints"), [cp]);

    // A pattern restore leaves the window engine, its output and its epoch
    // alone; an open changes stream sees no rewind.
    let w0 = window_state(&s);
    let changes_head = s.get("/status").json()["sequence"].as_u64().unwrap();
    let changes_stream = s
        .client
        .get(s.url(&format!("/changes/stream?after={changes_head}")))
        .send()
        .unwrap();
    wait_until("the changes stream waits", DEADLINE, || {
        (s.metric("streamforge_waiters") >= 1.0).then_some(())
    });
    let r = s.post_empty(&format!("/patterns/checkpoints/{cp}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(window_state(&s), w0);
    assert_eq!(s.pstatus()["epoch"], 1);
    assert_eq!(s.get("/status").json()["epoch"], 0);
    assert_eq!(s.metric("streamforge_epoch"), 0.0);
    let change = window_change(&s);
    let got = read_events(changes_stream, |_| true);
    assert_eq!(got[0].event, "", "no rewind: {got:?}");
    assert_eq!(got[0].id, format!("0:{}", changes_head + 1));
    assert_eq!(
        serde_json::from_str::<Value>(&got[0].data)
            .unwrap()
            .to_string(),
        change
    );

    // A window restore leaves the pattern engine, its output and its epoch
    // alone; an open pattern stream sees no rewind.
    let p0 = s.pstate();
    let output_head = s.pstatus()["sequence"].as_u64().unwrap();
    let pattern_stream = s
        .client
        .get(s.url(&format!("/patterns/output/stream?after={output_head}")))
        .send()
        .unwrap();
    wait_until("the pattern stream waits", DEADLINE, || {
        (s.metric("streamforge_waiters") >= 1.0).then_some(())
    });
    let r = s.post_empty(&format!("/checkpoints/{cw}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.pstate(), p0);
    assert_eq!(s.get("/status").json()["epoch"], 1);
    let w = s.pstatus()["watermark"].as_i64().unwrap();
    s.pushed(&pev("after", "q", "v", w + 1, ""));
    let new = s.advanced(w + 1);
    let got = read_events(pattern_stream, |_| true);
    assert_eq!(got[0].event, "", "no rewind: {got:?}");
    assert_eq!(
        (got[0].id.clone(), &got[0].data),
        (format!("1:{}", output_head + 1), &new[0])
    );

    // Each engine's epoch is its own on its pages.
    let r = s.post_empty(&format!("/patterns/checkpoints/{cp}/restore"));
    assert_eq!(r.status, 200);
    assert_eq!(s.pstatus()["epoch"], 2);
    assert_eq!(s.get("/patterns/output?epoch=2").json()["epoch"], 2);
    s.get("/changes?epoch=2").problem(422, "invalid_request");
    s.get("/late?epoch=2").problem(422, "invalid_request");
    assert_eq!(s.get("/changes?epoch=1").json()["epoch"], 1);
    assert!(s.get("/changes?epoch=1").json().get("rewound_to").is_none());
    let v = s.get("/patterns/output?after=1&epoch=1").json();
    assert_eq!(v["rewound_to"], 1);

    // Both survive a crash, each with its own epoch and state.
    let both = (window_state(&s), s.pstate());
    s.kill();
    let s = serve(dir.path(), "db", &roomy(), &args);
    assert_eq!((window_state(&s), s.pstate()), both);
}

#[test]
fn pattern_routes_take_the_token_cors_and_body_limit() {
    let dir = tempdir();
    let s = serve(
        dir.path(),
        "db",
        &doc(),
        &[
            "--token",
            "sekret",
            "--cors-origin",
            "http://dash.example",
            "--max-body-bytes",
            "2000",
        ],
    );
    let anon = Client::new();
    let get = [
        "/patterns",
        "/patterns/status",
        "/patterns/output",
        "/patterns/output/stream",
        "/patterns/checkpoints",
        "/patterns/checkpoints/1",
    ];
    let post = [
        "/patterns/events",
        "/patterns/advance",
        "/patterns/finish",
        "/patterns/checkpoints",
        "/patterns/checkpoints/1/restore",
        "/patterns/restore",
    ];
    let requests = get
        .iter()
        .map(|p| anon.get(s.url(p)))
        .chain(post.iter().map(|p| anon.post(s.url(p)).body("{}")))
        .chain([anon.delete(s.url("/patterns/checkpoints/1"))]);
    for rb in requests {
        for rb in [rb.try_clone().unwrap(), rb.bearer_auth("wrong")] {
            let r = rb.send().unwrap();
            assert_eq!(r.status(), 401, "{}", r.url());
            assert_eq!(r.headers()["www-authenticate"], "Bearer");
            let body = r.text().unwrap();
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["code"], "unauthorized");
        }
    }
    // The query token is for the streams only.
    let r = anon
        .get(s.url("/patterns/output/stream?access_token=sekret"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(r);
    assert_eq!(
        anon.get(s.url("/patterns/status?access_token=sekret"))
            .send()
            .unwrap()
            .status(),
        401
    );
    let st = s.get("/patterns/status");
    assert_eq!(st.status, 200);
    assert_eq!(st.json()["next_ordinal"], 1, "nothing was pushed");

    // CORS: preflight and answers for the configured origin only.
    let r = anon
        .request(reqwest::Method::OPTIONS, s.url("/patterns/events"))
        .header("Origin", "http://dash.example")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization,content-type",
        )
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://dash.example"
    );
    let r = s
        .client
        .get(s.url("/patterns/output"))
        .bearer_auth("sekret")
        .header("Origin", "http://dash.example")
        .send()
        .unwrap();
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://dash.example"
    );
    let r = s
        .client
        .get(s.url("/patterns/output"))
        .bearer_auth("sekret")
        .header("Origin", "http://evil.example")
        .send()
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // 413 on every pattern route with a body, nothing applied.
    s.pushed(&pev("e1", "k", "v", 1, ""));
    s.advanced(1);
    let before = s.pstate();
    let big = array(
        &(0..40)
            .map(|i| pev(&format!("b{i}"), "k", "v", 5, ""))
            .collect::<Vec<_>>(),
    );
    assert!(big.len() > 2000);
    s.push(&big).refused(413, "payload_too_large", &s, &before);
    s.push_nd(&big.replace("},{", "}\n{"))
        .refused(413, "payload_too_large", &s, &before);
    s.post(
        "/patterns/advance",
        &format!(r#"{{"watermark":{}}}"#, "9".repeat(2100)),
    )
    .refused(413, "payload_too_large", &s, &before);
    s.post("/patterns/restore", &"x".repeat(5000))
        .refused(413, "payload_too_large", &s, &before);
    assert_eq!(s.pstate(), before);
    assert_eq!(s.pushed(&pev("e2", "k", "v", 5, "")), (2, 2));
}

#[test]
fn a_database_keeps_its_patterns_and_takes_other_limits() {
    let dir = tempdir();
    let args = ["--checkpoint-every", "0"];
    let mut s = serve(dir.path(), "db", &doc(), &args);
    // An advance with 5 matches that leaves 5 branches for one key, in
    // the command log only (no checkpoint: a restart replays it).
    let mut batch: Vec<String> = (0..5)
        .map(|i| pev(&format!("v{i}"), &format!("m{i}"), "v", 1, ""))
        .collect();
    batch.extend((0..5).map(|i| pev(&format!("a{i}"), "big", "a", 2, r#""n":1"#)));
    s.pushed(&array(&batch));
    assert_eq!(s.advanced(10).len(), 5);
    let state = (s.get("/patterns/status").body, s.output(100));
    assert_eq!(s.pstatus()["patterns"]["pair"]["branches"], 5);
    s.kill();

    // Other patterns are refused, whatever the limits.
    for (what, other) in [
        ("another within", doc().replace(r#""within": 100"#, r#""within": 101"#)),
        (
            "a pattern fewer",
            doc().replace(
                r#"{"name": "echo", "within": 10, "stages": [{"name": "v", "where": {"kind": "v"}}]},"#,
                "",
            ),
        ),
        (
            "another condition",
            doc().replace(r#""op": "ge""#, r#""op": "gt""#),
        ),
    ] {
        assert_ne!(other, doc(), "{what}");
        let err = try_serve(dir.path(), "db", &other, &args)
            .err()
            .unwrap_or_else(|| panic!("{what}: started"));
        assert!(
            err.contains("holds other patterns") && err.contains("--patterns"),
            "{what}: {err}"
        );
    }
    // The same patterns, respelled (defaults written out, other order, keys
    // and spacing) with other limits: accepted. The limits in force are the
    // new ones, and the logged advance, which is beyond them, replays.
    let respelled = r#"{"limits": {"active_states": 3, "max_results_per_advance": 2},
      "patterns": [
        {"absence": {"kind": "logout"}, "within": 30, "name": "quiet", "skip": "no_skip",
         "stages": [{"where": {"kind": "login"}, "name": "start", "min": 1, "max": 1}]},
        {"stages": [{"name": "v", "contiguity": "skip_next", "where": {"kind": "v"}}],
         "name": "echo", "within": 10},
        {"name": "pair", "within": 100, "stages": [
          {"name": "a", "where": {"kind": "a"}},
          {"name": "b", "where": {"all": [{"kind": "b"},
            {"capture": "a", "capture_field": "n", "field": "n", "op": "ge"}]}}]}]}"#;
    let mut s = serve(dir.path(), "db", respelled, &args);
    assert!(
        s.get("/patterns")
            .body
            .ends_with(r#""limits":{"max_results_per_advance":2,"active_states":3}}"#),
        "{}",
        s.get("/patterns").body
    );
    assert_eq!((s.get("/patterns/status").body, s.output(100)), state);
    // The new limits apply to new advances.
    s.pushed(&array(&[
        pev("w1", "x", "v", 20, ""),
        pev("w2", "y", "v", 20, ""),
        pev("w3", "z", "v", 20, ""),
    ]));
    let v = s.advance(30).problem(422, "limit_exceeded");
    assert!(v["detail"]
        .as_str()
        .unwrap()
        .contains("max_results_per_advance"));
    s.kill();
    // Without --patterns: the stored document, with its own limits.
    let s = start(&dir.path().join("db"), &args);
    assert!(s
        .get("/patterns")
        .body
        .ends_with(r#""limits":{"max_results_per_advance":40,"active_states":12}}"#));
    assert_eq!(s.output(100), state.1);
    assert_eq!(s.advanced(30).len(), 3);
}

/// [`roomy`] plus `all`, a one-stage pattern every event matches at once:
/// each processed event is in the output with its ordinal and id, each
/// other one in a checkpoint's buffer, so the state says which events a
/// database holds and in which order.
fn traced() -> String {
    roomy().replacen(
        "[\n",
        "[\n  {\"name\": \"all\", \"within\": 1, \"stages\": [{\"name\": \"e\", \"where\": {\"all\": []}}]},\n",
        1,
    )
}

/// Every event a database holds, by ordinal: `ordinal -> id` (from the
/// output of `all` and a checkpoint's buffer).
fn held_events(s: &Server) -> std::collections::BTreeMap<u64, String> {
    let mut held = std::collections::BTreeMap::new();
    for rec in s.output(1000) {
        let v: Value = serde_json::from_str(&rec).unwrap();
        if v["pattern"] == "all" {
            let e = &v["captures"]["e"][0];
            held.insert(
                e["ordinal"].as_u64().unwrap(),
                e["id"].as_str().unwrap().to_string(),
            );
        }
    }
    let env: Value = serde_json::from_str(&s.envelope()).unwrap();
    for e in env["state"]["buffer"].as_array().unwrap() {
        held.insert(
            e["ordinal"].as_u64().unwrap(),
            e["id"].as_str().unwrap().to_string(),
        );
    }
    held
}

/// A mutating pattern call a client made.
#[derive(Debug, Clone)]
enum Call {
    Push {
        ids: Vec<String>,
        min_time: i64,
        body: String,
        ndjson: bool,
    },
    Advance(i64),
}

/// What the client learnt of it.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// 200, with this body.
    Acked(String),
    /// A 4xx: not applied.
    Rejected(u16),
    /// No answer (the server died): applied entirely or not at all.
    Unknown,
}

impl Call {
    fn send(&self, client: &Client, base: &str) -> Outcome {
        let rb = match self {
            Call::Push { body, ndjson, .. } => client
                .post(format!("{base}/patterns/events"))
                .header(
                    "content-type",
                    if *ndjson {
                        "application/x-ndjson"
                    } else {
                        "application/json"
                    },
                )
                .body(body.clone()),
            Call::Advance(w) => client
                .post(format!("{base}/patterns/advance"))
                .header("content-type", "application/json")
                .body(format!(r#"{{"watermark":{w}}}"#)),
        };
        let Ok(r) = rb.send() else {
            return Outcome::Unknown;
        };
        let status = r.status().as_u16();
        match r.text() {
            Ok(body) if status == 200 => Outcome::Acked(body),
            Ok(body) => {
                assert!((400..500).contains(&status), "{self:?}: {status} {body}");
                Outcome::Rejected(status)
            }
            Err(_) => Outcome::Unknown,
        }
    }
}

/// A push of `n` events (ids `{tag}-{i}`) for keys `{key}0..2`, times from
/// `from`.
fn push_call(rng: &mut Rng, tag: &str, key: &str, from: i64) -> Call {
    let n = 1 + rng.below(4) as usize;
    let mut ids = Vec::new();
    let mut items = Vec::new();
    let mut min_time = i64::MAX;
    for i in 0..n {
        let id = format!("{tag}-{i}");
        let t = from + rng.below(80) as i64;
        min_time = min_time.min(t);
        let kind = ["a", "b", "v", "login", "logout", "x"][rng.below(6) as usize];
        items.push(pev(
            &id,
            &format!("{key}{}", rng.below(3)),
            kind,
            t,
            &format!(r#""n":{}"#, rng.below(10)),
        ));
        ids.push(id);
    }
    let ndjson = rng.below(3) == 0;
    Call::Push {
        ids,
        min_time,
        body: if ndjson {
            items.join("\n")
        } else {
            array(&items)
        },
        ndjson,
    }
}

/// The applied calls in an order equivalent to the one the server committed
/// them in: pushes by ordinal; each advance `W` right after the last push
/// holding an event at or before `W` (those must have preceded it, or they
/// would have been late; a push whose events are all after `W` gives the
/// same state on either side of the advance). `pushes` are `(first
/// ordinal, min_time, call)`, `advances` in the order they were made.
fn commit_order(mut pushes: Vec<(u64, i64, Call)>, advances: &[i64]) -> Vec<Call> {
    pushes.sort_by_key(|p| p.0);
    let mut out = Vec::new();
    let mut next = 0;
    for &w in advances {
        let upto = pushes
            .iter()
            .rposition(|p| p.1 <= w)
            .map_or(0, |i| i + 1)
            .max(next);
        out.extend(pushes[next..upto].iter().map(|p| p.2.clone()));
        next = upto;
        out.push(Call::Advance(w));
    }
    out.extend(pushes[next..].iter().map(|p| p.2.clone()));
    out
}

#[test]
fn sigkill_mid_push_and_mid_advance_loses_nothing_acknowledged() {
    let dir = tempdir();
    let doc = traced();
    let args = ["--checkpoint-every", "3"];
    let mut rng = Rng(77);
    // What is known to be applied: pushes (first ordinal, min time, call)
    // and advances (in order), with the acknowledged answers.
    let mut pushes: Vec<(u64, i64, Call)> = Vec::new();
    let mut advances: Vec<i64> = Vec::new();
    let mut acked_answers: Vec<(Call, String)> = Vec::new();
    let mut last_w = -1i64;
    let mut unknown: Vec<Call> = Vec::new();
    let mut rejected_ids: Vec<String> = Vec::new();
    let (mut unknown_applied, mut unknown_lost) = (0, 0);
    let rounds = 8;
    for round in 0..=rounds {
        let mut s = serve(dir.path(), "crash", &doc, &args);
        // Resolve the calls in flight at the kill: each entirely there or
        // not at all; every acknowledged call there as acknowledged.
        let held = held_events(&s);
        let by_id: std::collections::HashMap<&str, u64> =
            held.iter().map(|(o, id)| (id.as_str(), *o)).collect();
        let st = s.pstatus();
        let watermark = st["watermark"].as_i64().unwrap();
        for call in unknown.drain(..) {
            match &call {
                Call::Push { ids, min_time, .. } => match by_id.get(ids[0].as_str()) {
                    Some(&first) => {
                        for (i, id) in ids.iter().enumerate() {
                            assert_eq!(held.get(&(first + i as u64)), Some(id), "{call:?}");
                        }
                        pushes.push((first, *min_time, call.clone()));
                        unknown_applied += 1;
                    }
                    None => {
                        for id in ids {
                            assert!(!by_id.contains_key(id.as_str()), "part of {call:?}");
                        }
                        unknown_lost += 1;
                    }
                },
                Call::Advance(w) => {
                    assert!(watermark <= *w, "{watermark} beyond the last advance {w}");
                    if watermark == *w {
                        advances.push(*w);
                        unknown_applied += 1;
                    } else {
                        unknown_lost += 1;
                    }
                }
            }
        }
        for id in &rejected_ids {
            assert!(!by_id.contains_key(id.as_str()), "rejected {id} applied");
        }
        let total: usize = pushes
            .iter()
            .map(|p| match &p.2 {
                Call::Push { ids, .. } => ids.len(),
                Call::Advance(_) => 0,
            })
            .sum();
        assert_eq!(held.len(), total, "exactly the applied pushes' events");
        assert_eq!(st["next_ordinal"].as_u64().unwrap(), total as u64 + 1);
        assert_eq!(watermark, advances.last().copied().unwrap_or(-1));
        let output = s.output(1000);
        for (call, body) in &acked_answers {
            if let Call::Advance(_) = call {
                for rec in records(body) {
                    assert_eq!(
                        output[seq_of(&rec) as usize - 1],
                        rec,
                        "acknowledged output"
                    );
                }
            }
        }
        if round == rounds {
            assert!(
                !s.get("/patterns/checkpoints").json()["checkpoints"]
                    .as_array()
                    .unwrap()
                    .is_empty(),
                "automatic checkpoints were taken between the kills"
            );
            // Processing continues exactly as an uninterrupted run of the
            // applied calls, in their commit order.
            let reference = serve(dir.path(), "ref", &doc, &[]);
            for call in commit_order(pushes.clone(), &advances) {
                let Outcome::Acked(body) = call.send(&reference.client, &reference.base) else {
                    panic!("{call:?} refused by the reference");
                };
                if let Some((_, acked)) = acked_answers
                    .iter()
                    .find(|(c, _)| format!("{c:?}") == format!("{call:?}"))
                {
                    match call {
                        // (`buffered` depends on where the advances fell
                        // among the pushes: the ordinals do not)
                        Call::Push { .. } => {
                            let (a, b): (Value, Value) = (
                                serde_json::from_str(&body).unwrap(),
                                serde_json::from_str(acked).unwrap(),
                            );
                            assert_eq!((&a["first"], &a["last"]), (&b["first"], &b["last"]));
                        }
                        Call::Advance(_) => assert_eq!(&body, acked, "{call:?}"),
                    }
                }
            }
            assert_eq!(s.pstate(), reference.pstate());
            let f = s.post_empty("/patterns/finish");
            assert_eq!(f.body, reference.post_empty("/patterns/finish").body);
            assert_eq!(s.pstate(), reference.pstate());
            break;
        }

        // Two producers of their own keys and an advancer, killed mid-flight.
        let acked = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let front = AtomicI64::new(watermark);
        let target = 4 + rng.below(20) as usize;
        let seeds = [rng.next(), rng.next(), rng.next()];
        let sent: Vec<Vec<(Call, Outcome)>> = std::thread::scope(|sc| {
            let threads: Vec<_> = (0..3)
                .map(|t| {
                    let (client, base) = (s.client.clone(), s.base.clone());
                    let (acked, stop, front) = (&acked, &stop, &front);
                    let mut rng = Rng(seeds[t]);
                    let mut w = last_w;
                    sc.spawn(move || {
                        let mut log = Vec::new();
                        for n in 0.. {
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                            let call = if t == 2 {
                                w = w.max(front.load(Ordering::SeqCst)) + 1 + rng.below(30) as i64;
                                Call::Advance(w)
                            } else {
                                let tag = format!("p{t}r{round}n{n}");
                                let from = front.load(Ordering::SeqCst) + 1;
                                push_call(&mut rng, &tag, &format!("k{t}"), from)
                            };
                            let outcome = call.send(&client, &base);
                            let done = outcome == Outcome::Unknown;
                            if let (Outcome::Acked(_), Call::Advance(w)) = (&outcome, &call) {
                                front.fetch_max(*w, Ordering::SeqCst);
                            }
                            if matches!(outcome, Outcome::Acked(_)) {
                                acked.fetch_add(1, Ordering::SeqCst);
                            }
                            log.push((call, outcome));
                            if done {
                                break;
                            }
                        }
                        log
                    })
                })
                .collect();
            wait_until("acknowledged calls", DEADLINE, || {
                (acked.load(Ordering::SeqCst) >= target).then_some(())
            });
            s.kill();
            stop.store(true, Ordering::SeqCst);
            threads.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (t, log) in sent.into_iter().enumerate() {
            for (call, outcome) in log {
                match (&call, outcome) {
                    (Call::Advance(w), o) => {
                        last_w = last_w.max(*w);
                        match o {
                            Outcome::Acked(body) => {
                                advances.push(*w);
                                acked_answers.push((call.clone(), body));
                            }
                            Outcome::Rejected(status) => panic!("advance {w}: {status}"),
                            Outcome::Unknown => unknown.push(call.clone()),
                        }
                    }
                    (Call::Push { ids, min_time, .. }, o) => match o {
                        Outcome::Acked(body) => {
                            let v: Value = serde_json::from_str(&body).unwrap();
                            let first = v["first"].as_u64().unwrap();
                            assert_eq!(v["last"].as_u64().unwrap(), first + ids.len() as u64 - 1);
                            pushes.push((first, *min_time, call.clone()));
                            acked_answers.push((call.clone(), body));
                        }
                        Outcome::Rejected(status) => {
                            assert_eq!(status, 409, "producer {t}: {call:?}");
                            rejected_ids.extend(ids.iter().cloned());
                        }
                        Outcome::Unknown => unknown.push(call.clone()),
                    },
                }
            }
        }
    }
    assert!(
        unknown_applied + unknown_lost >= rounds,
        "calls in flight at the kills"
    );
    assert!(
        advances.len() > 10 && pushes.len() > 20,
        "{} {}",
        advances.len(),
        pushes.len()
    );
    eprintln!(
        "{} pushes, {} advances applied; in flight at a kill: {unknown_applied} applied, {unknown_lost} not",
        pushes.len(),
        advances.len()
    );
}

#[test]
fn restarts_after_a_shutdown_or_automatic_checkpoints_continue_identically() {
    let dir = tempdir();
    let steps = workload(21, 150);
    let reference = serve(dir.path(), "ref", &roomy(), &["--checkpoint-every", "0"]);
    let want: Vec<Vec<String>> = steps.iter().map(|st| st.apply(&reference)).collect();
    let run = |s: &Server, range: std::ops::Range<usize>| {
        for i in range {
            assert_eq!(steps[i].apply(s), want[i], "step {i}: {:?}", steps[i]);
        }
    };
    let served = |s: &Server| (s.get("/patterns/status").body, s.output(1000));

    // A graceful shutdown stores a final checkpoint: the restart replays
    // nothing. An open stream and a long poll do not hold it up.
    let args = ["--checkpoint-every", "0"];
    let mut s = serve(dir.path(), "db", &roomy(), &args);
    run(&s, 0..50);
    assert_eq!(s.metric("streamforge_logged_commands"), 50.0);
    let before = served(&s);
    let stream = s
        .client
        .get(s.url("/patterns/output/stream?after=0"))
        .send()
        .unwrap();
    let poll = {
        let (c, u) = (
            s.client.clone(),
            s.url("/patterns/output?after=100000&wait_ms=30000"),
        );
        std::thread::spawn(move || c.get(u).send().map(|r| r.status().as_u16()))
    };
    wait_until("waiters", DEADLINE, || {
        (s.metric("streamforge_waiters") >= 2.0).then_some(())
    });
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    let _ = poll.join();
    drop(stream);
    let mut s = serve(dir.path(), "db", &roomy(), &["--checkpoint-every", "3"]);
    assert_eq!(
        s.metric("streamforge_logged_commands"),
        0.0,
        "the restart replayed calls"
    );
    let list = s.get("/patterns/checkpoints").json();
    assert_eq!(list["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!(
        s.get("/checkpoints").json()["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "the window engine logged nothing: no final checkpoint of it"
    );
    assert_eq!(served(&s), before);

    // Automatic checkpoints every 3 calls, then SIGKILL.
    run(&s, 50..110);
    // (each automatic checkpoint prunes the older ones once it is stored)
    let ids: Vec<u64> = wait_until("automatic checkpoints, pruned", DEADLINE, || {
        let ids: Vec<u64> = s.get("/patterns/checkpoints").json()["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_u64().unwrap())
            .collect();
        (s.metric("streamforge_logged_commands") < 3.0 && ids.len() <= 3).then_some(ids)
    });
    assert!(s.metric("streamforge_checkpoints_total") >= 10.0);
    assert_eq!(ids.len(), 3, "the newest 3 automatic ones: {ids:?}");
    let before = served(&s);
    s.kill();
    let s = serve(dir.path(), "db", &roomy(), &["--checkpoint-every", "3"]);
    assert!(s.metric("streamforge_logged_commands") < 3.0);
    assert_eq!(served(&s), before);
    run(&s, 110..150);
    let f = s.post_empty("/patterns/finish");
    assert_eq!(f.body, reference.post_empty("/patterns/finish").body);
    assert_eq!(s.pstate(), reference.pstate());
}

/// The events of a push, parsed as the engine parses them.
fn events_of(call: &Call) -> Vec<streamforge::patterns::Event> {
    let Call::Push { body, ndjson, .. } = call else {
        return Vec::new();
    };
    let items: Vec<String> = if *ndjson {
        body.lines().map(str::to_string).collect()
    } else {
        serde_json::from_str::<Vec<&RawValue>>(body)
            .unwrap()
            .iter()
            .map(|r| r.get().to_string())
            .collect()
    };
    items
        .iter()
        .map(|i| streamforge::patterns::parse_event(i.as_bytes()).unwrap())
        .collect()
}

#[test]
fn concurrent_producers_equal_a_sequential_replay_in_commit_order() {
    let dir = tempdir();
    let doc = roomy();
    let s = serve(dir.path(), "db", &doc, &["--checkpoint-every", "7"]);
    let front = AtomicI64::new(-1);
    let producing = AtomicUsize::new(3);
    let logs: Vec<Vec<(Call, Outcome)>> = std::thread::scope(|sc| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let s = &s;
                let (front, producing) = (&front, &producing);
                sc.spawn(move || {
                    let mut rng = Rng(500 + t as u64);
                    let mut log = Vec::new();
                    let mut w = -1;
                    for n in 0.. {
                        let call = if t == 3 {
                            if producing.load(Ordering::SeqCst) == 0 {
                                break;
                            }
                            w = w.max(front.load(Ordering::SeqCst)) + 1 + rng.below(15) as i64;
                            Call::Advance(w)
                        } else {
                            if n == 40 {
                                producing.fetch_sub(1, Ordering::SeqCst);
                                break;
                            }
                            let from = front.load(Ordering::SeqCst) + 1;
                            push_call(&mut rng, &format!("t{t}n{n}"), &format!("q{t}"), from)
                        };
                        let outcome = call.send(&s.client, &s.base);
                        if let (Outcome::Acked(_), Call::Advance(w)) = (&outcome, &call) {
                            front.fetch_max(*w, Ordering::SeqCst);
                        }
                        log.push((call, outcome));
                    }
                    log
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut pushes = Vec::new();
    let mut advances = Vec::new();
    let mut answers: std::collections::HashMap<String, String> = Default::default();
    let mut late = 0;
    for (call, outcome) in logs.into_iter().flatten() {
        match (outcome, &call) {
            (Outcome::Acked(body), Call::Push { ids, min_time, .. }) => {
                let v: Value = serde_json::from_str(&body).unwrap();
                let first = v["first"].as_u64().unwrap();
                assert_eq!(v["last"].as_u64().unwrap(), first + ids.len() as u64 - 1);
                pushes.push((first, *min_time, call.clone()));
                answers.insert(format!("{call:?}"), body);
            }
            (Outcome::Acked(body), Call::Advance(w)) => {
                advances.push(*w);
                answers.insert(format!("{call:?}"), body);
            }
            (Outcome::Rejected(409), Call::Push { .. }) => late += 1,
            (o, c) => panic!("{c:?}: {o:?}"),
        }
    }
    // Ordinals: every acknowledged push a range of its own, no gap (a
    // rejected push consumed none).
    let mut ranges: Vec<(u64, usize)> = pushes
        .iter()
        .map(|(first, _, c)| (*first, events_of(c).len()))
        .collect();
    ranges.sort();
    let mut next = 1;
    for (first, n) in &ranges {
        assert_eq!(*first, next, "ordinals: {ranges:?}");
        next += *n as u64;
    }
    assert!(
        advances.len() >= 5,
        "the advancer ran alongside: {advances:?}"
    );
    eprintln!(
        "{} pushes ({late} late), {} advances",
        pushes.len(),
        advances.len()
    );

    // The same calls, one at a time in commit order, on the engine alone.
    let mut engine = streamforge::patterns::Engine::new(
        streamforge::patterns::Document::from_json(doc.as_bytes()).unwrap(),
    );
    let mut output = Vec::new();
    for call in commit_order(pushes, &advances) {
        let answer: Value = serde_json::from_str(&answers[&format!("{call:?}")]).unwrap();
        match &call {
            Call::Push { .. } => {
                let o = engine.push(events_of(&call)).unwrap();
                assert_eq!(
                    (Some(o.first), Some(o.last)),
                    (answer["first"].as_u64(), answer["last"].as_u64())
                );
            }
            Call::Advance(w) => {
                let o = engine.advance(*w).unwrap();
                let recs: Vec<String> = o
                    .output
                    .iter()
                    .map(|r| serde_json::to_string(r).unwrap())
                    .collect();
                assert_eq!(recs, records(&answers[&format!("{call:?}")]), "advance {w}");
                assert_eq!(answer["processed"].as_u64(), Some(o.processed));
                output.extend(recs);
            }
        }
    }
    let f = s.post_empty("/patterns/finish");
    let o = engine.finish().unwrap();
    let recs: Vec<String> = o
        .output
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert_eq!(records(&f.body), recs);
    output.extend(recs);
    assert!(output.len() > 30, "{}", output.len());
    assert_eq!(s.output(1000), output);
    assert_eq!(
        s.envelope().as_bytes(),
        engine.checkpoint().as_slice(),
        "the same state, byte for byte"
    );
}

#[test]
fn a_storage_failure_answers_503_and_applies_nothing() {
    let dir = tempdir();
    // Shared: the test opens the database while the server runs.
    let mut s = serve(
        dir.path(),
        "db",
        &doc(),
        &["--checkpoint-every", "0", "--db-shared"],
    );
    s.pushed(&array(&[
        pev("v1", "k", "v", 1, ""),
        pev("a1", "k", "a", 2, r#""n":1"#),
    ]));
    assert_eq!(s.advanced(5).len(), 1);
    s.pushed(&pev("v2", "k", "v", 6, ""));
    let before = (s.get("/patterns/status").body, s.output(100));
    // Every write of pattern output fails, from outside the service.
    let conn = rusqlite::Connection::open(&s.db).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    conn.execute_batch(
        "CREATE TRIGGER fail_output BEFORE INSERT ON pattern_output
         BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
    )
    .unwrap();
    // This advance outputs: the engine applies it, the commit fails.
    s.advance(10).problem(503, "unavailable");
    assert_eq!(
        (s.get("/patterns/status").body, s.output(100)),
        before,
        "a 503 applied nothing"
    );
    // Calls without output still commit (on the state rebuilt from the store).
    assert_eq!(s.pushed(&pev("b1", "k", "b", 7, r#""n":2"#)), (4, 4));
    assert_eq!(s.advance(5).status, 200);
    conn.execute_batch("DROP TRIGGER fail_output;").unwrap();
    // The failed advance was not applied: sent again, it outputs now.
    let out = s.advanced(10);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[0].contains(r#""id":"echo:3""#) && out[1].contains(r#""id":"pair:2/4""#));
    assert_eq!(s.get("/readyz").status, 200);
    let after = s.pstate();
    s.kill();
    // (closed: the server, started without --db-shared, holds the
    // database exclusively)
    drop(conn);
    let s = serve(dir.path(), "db", &doc(), &["--checkpoint-every", "0"]);
    assert_eq!(s.pstate(), after);
}

/// Byte-level damage: replaced, deleted, inserted, duplicated or cut.
fn mutate(rng: &mut Rng, s: &str) -> String {
    const TOKENS: &[&str] = &[
        "null",
        "true",
        "1.5",
        "1e999",
        "-0",
        "\"\"",
        "[]",
        "{}",
        "9223372036854775808",
        "{\"decimal\":\"1.0\"}",
        "\"\\ud800\"",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "\"",
        "\n",
        "-1",
    ];
    mutate_with(rng, s, TOKENS)
}

#[test]
fn mutated_pattern_requests_never_fail_the_server_and_change_nothing_when_rejected() {
    let dir = tempdir();
    let mut s = serve(dir.path(), "db", &roomy(), &["--max-body-bytes", "65536"]);
    let codes: &[(u16, &str)] = &[
        (400, "bad_request"),
        (404, "not_found"),
        (409, "late_event"),
        (409, "watermark_regression"),
        (413, "payload_too_large"),
        (422, "invalid_checkpoint"),
        (422, "invalid_request"),
        (422, "limit_exceeded"),
    ];
    let cheap = |s: &Server| {
        (
            s.get("/patterns/status").body,
            s.get("/patterns/output?after=0&limit=1").json()["head"].clone(),
        )
    };
    let mut rng = Rng(0xfeed);
    let mut envelope = s.envelope();
    let (mut rejected, mut accepted) = (0u32, 0u32);
    for step in 0..400u64 {
        let w = s.pstatus()["watermark"].as_i64().unwrap();
        let kind = ["a", "b", "v", "login", "logout"][rng.below(5) as usize];
        let valid = pev(
            &format!("e{step}"),
            &format!("k{}", rng.below(3)),
            kind,
            w + 1 + rng.below(30) as i64,
            &format!(r#""n":{},"d":{{"decimal":"1.5"}},"f":2.0"#, rng.below(5)),
        );
        if rng.below(4) == 0 {
            let r = if rng.below(3) == 0 {
                s.advance(w + rng.below(20) as i64)
            } else {
                s.push(&valid)
            };
            assert_eq!(r.status, 200, "{}", r.body);
            accepted += 1;
            if step % 50 == 0 {
                envelope = s.envelope();
            }
            continue;
        }
        let before = cheap(&s);
        let r = match rng.below(7) {
            0 => s.push(&mutate(&mut rng, &valid)),
            1 => s.push(&mutate(&mut rng, &format!("[{valid},{valid}]"))),
            2 => s.push_nd(&mutate(&mut rng, &format!("{valid}\n{valid}\n"))),
            3 => s.post(
                "/patterns/advance",
                &mutate(&mut rng, &format!(r#"{{"watermark":{}}}"#, w + 5)),
            ),
            4 => s.post("/patterns/restore", &mutate(&mut rng, &envelope)),
            5 => s.get(&format!(
                "/patterns/output?{}",
                mutate(&mut rng, "after=1&limit=5&epoch=0")
                    .replace(['#', ' ', '\n', '"', '\\', '{', '}', '[', ']'], "")
            )),
            _ => s.get(&format!(
                "/patterns/checkpoints/{}",
                mutate(&mut rng, "1").replace(['#', '?', '/', ' ', '\n', '"', '\\'], "")
            )),
        };
        assert!(r.status < 500, "step {step}: {} {}", r.status, r.body);
        if r.status >= 400 {
            rejected += 1;
            assert_eq!(r.content_type, "application/problem+json", "{}", r.body);
            let v = r.json();
            let code = v["code"].as_str().unwrap_or("");
            assert!(
                codes.contains(&(r.status, code)),
                "step {step}: {} {code}: {}",
                r.status,
                r.body
            );
            assert_eq!(cheap(&s), before, "step {step}: {}", r.body);
        } else {
            accepted += 1;
        }
    }
    assert!(rejected > 200 && accepted > 100, "{rejected} {accepted}");
    assert!(s.pstatus()["sequence"].as_u64().unwrap() > 10);
    let state = s.pstate();
    s.kill();
    let s = serve(dir.path(), "db", &roomy(), &[]);
    assert_eq!(s.pstate(), state, "state after a replay");
}

#[test]
fn recovery_starts_from_a_deleted_base_or_a_restored_body() {
    let dir = tempdir();
    let steps = workload(31, 90);
    let args = ["--checkpoint-every", "0"];
    // (no checkpoint taken to look: it would become the recovery base)
    let served = |s: &Server| (s.get("/patterns/status").body, s.output(1000));
    let mut s = serve(dir.path(), "db", &roomy(), &args);
    for st in &steps[..30] {
        st.apply(&s);
    }
    // A user checkpoint becomes the recovery base; deleting it keeps its
    // envelope for recovery.
    let id = s.post_empty("/patterns/checkpoints").json()["id"]
        .as_i64()
        .unwrap();
    let env = s.get(&format!("/patterns/checkpoints/{id}")).body;
    for st in &steps[30..60] {
        st.apply(&s);
    }
    assert_eq!(s.delete(&format!("/patterns/checkpoints/{id}")).status, 204);
    let state = served(&s);
    s.kill();
    let mut s = serve(dir.path(), "db", &roomy(), &args);
    assert_eq!(s.metric("streamforge_logged_commands"), 30.0);
    assert_eq!(served(&s), state);
    // A restore by body is the recovery base too (the envelope kept inline).
    let r = s.post("/patterns/restore", &env);
    assert_eq!(r.status, 200, "{}", r.body);
    for st in &steps[30..45] {
        st.apply(&s);
    }
    let state = served(&s);
    assert!(state.0.contains(r#""epoch":1"#), "{}", state.0);
    s.kill();
    let s = serve(dir.path(), "db", &roomy(), &args);
    assert_eq!(s.metric("streamforge_logged_commands"), 15.0);
    assert_eq!(served(&s), state);
    for st in &steps[45..90] {
        st.apply(&s);
    }
    let reference = serve(dir.path(), "ref", &roomy(), &args);
    for st in &steps {
        st.apply(&reference);
    }
    assert_eq!(s.output(1000), reference.output(1000));
    assert_eq!(s.envelope(), reference.envelope());
}

/// `int_spend` (an Integer threshold), `big_spend` (a Double threshold,
/// which the Integer amounts events send never reach) and `flag` (`gt`
/// against a Bool: never true, warned at startup), in this order in the
/// file (so file indexes differ from the sorted order of `GET /patterns`).
const MISMATCH_DOC: &str = r#"{"patterns": [
  {"name": "int_spend", "within": 100, "stages": [{"name": "spend",
    "where": {"all": [{"kind": "pay"}, {"field": "amount", "op": "gt", "value": 101}]}}]},
  {"name": "big_spend", "within": 100, "stages": [{"name": "spend",
    "where": {"all": [{"kind": "pay"}, {"field": "amount", "op": "gt", "value": 101.5}]}}]},
  {"name": "flag", "within": 100, "stages": [{"name": "f",
    "where": {"all": [{"kind": "pay"}, {"field": "ok", "op": "gt", "value": true}]}}]}]}"#;

#[test]
fn type_mismatches_show_in_metrics_and_diagnostics_and_leave_get_patterns_alone() {
    let dir = tempdir();
    let args = ["--checkpoint-every", "0"];
    let mut s = serve(dir.path(), "db", MISMATCH_DOC, &args);
    // The startup log names the condition that can never be true, with its
    // path in the file.
    let log = s.stderr();
    assert!(
        log.contains(
            r#"patterns[2].stages[0].where.all[1]: "gt" against the Bool true is never true"#
        ),
        "{log}"
    );

    let document = streamforge::patterns::Document::from_json(MISMATCH_DOC.as_bytes())
        .unwrap()
        .to_json();
    let document = String::from_utf8(document).unwrap();
    let with = |counts: &str| {
        format!(
            r#"{},"type_mismatches":{counts}}}"#,
            &document[..document.len() - 1]
        )
    };
    assert_eq!(s.get("/patterns").body, document);
    let d = s.get("/patterns?diagnostics=true");
    assert_eq!(
        (d.status, d.content_type.as_str()),
        (200, "application/json")
    );
    assert_eq!(d.body, with("{}"));
    let status = s.get("/patterns/status").body;

    // 102 is an Integer: never greater than the Double 101.5 (no coercion),
    // greater than the Integer 101; 102.0 is a Double: the other way round.
    s.pushed(&array(&[
        pev("e1", "k", "pay", 10, r#""amount":102"#),
        pev("e2", "j", "pay", 11, r#""amount":102"#),
        pev("e3", "k", "pay", 12, r#""amount":102.0"#),
        pev("e4", "k", "browse", 13, r#""amount":"102""#),
    ]));
    let out = s.advanced(20);
    let matched: Vec<(String, String)> = out
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_str(r).unwrap();
            (
                v["pattern"].as_str().unwrap().into(),
                v["id"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        matched,
        [
            ("int_spend".to_string(), "int_spend:1".to_string()),
            ("int_spend".into(), "int_spend:2".into()),
            ("big_spend".into(), "big_spend:3".into())
        ]
    );

    // /metrics: one sample per condition that counted, by pattern and path
    // (the kind test comes first: the browse event compares no amount).
    let metric = |pattern: &str| {
        format!(
            r#"streamforge_pattern_type_mismatches_total{{pattern="{pattern}",condition="stages[0].where.all[1]"}}"#
        )
    };
    assert_eq!(s.metric(&metric("big_spend")), 2.0);
    assert_eq!(s.metric(&metric("int_spend")), 1.0);
    let text = s.get("/metrics").body;
    assert!(
        text.contains("# TYPE streamforge_pattern_type_mismatches_total counter\n"),
        "{text}"
    );
    assert!(
        !text.contains(r#"streamforge_pattern_type_mismatches_total{pattern="flag""#),
        "{text}"
    );
    let counted =
        r#"{"big_spend":{"stages[0].where.all[1]":2},"int_spend":{"stages[0].where.all[1]":1}}"#;
    assert_eq!(s.get("/patterns?diagnostics=true").body, with(counted));

    // Without the parameter (or with false) nothing changes; the status
    // neither.
    assert_eq!(s.get("/patterns").body, document);
    assert_eq!(s.get("/patterns?diagnostics=false").body, document);
    assert_eq!(
        s.get("/patterns/status").body,
        status.replace(
            r#""watermark":-1,"buffered":0,"next_ordinal":1,"sequence":0"#,
            r#""watermark":20,"buffered":0,"next_ordinal":5,"sequence":3"#
        )
    );
    s.get("/patterns?diagnostics=yes")
        .problem(400, "bad_request");
    s.get("/patterns?diagnostics=true&diagnostics=true")
        .problem(400, "bad_request");

    // Not state: a checkpoint does not hold them; a restore keeps the
    // process's counters going, a restart starts them at zero (SIGKILL: the
    // restart replays the advance, which does not count).
    let envelope = s.envelope();
    assert!(!envelope.contains("type_mismatches"));
    let r = s.post("/patterns/restore", &envelope);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.get("/patterns?diagnostics=true").body, with(counted));
    // one more, in the command log only
    s.pushed(&pev("e5", "k", "pay", 30, r#""amount":200"#));
    s.advanced(40);
    assert_eq!(s.metric(&metric("big_spend")), 3.0);
    s.kill();
    let s = serve(dir.path(), "db", MISMATCH_DOC, &args);
    assert_eq!(s.output(100).len(), 4, "the advance was replayed");
    assert_eq!(s.get("/patterns?diagnostics=true").body, with("{}"));
    assert!(!s
        .get("/metrics")
        .body
        .contains("streamforge_pattern_type_mismatches_total{"));
    s.pushed(&pev("e6", "k", "pay", 50, r#""amount":200"#));
    s.advanced(60);
    assert_eq!(s.metric(&metric("big_spend")), 1.0);
}
