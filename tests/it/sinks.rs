//! Webhook sinks (docs/sinks.md) against the real binary and a real
//! receiver on loopback (tests/it/support/server/receiver.rs, which follows the
//! receiver protocol of docs/sinks.md): the routes and their errors, then
//! delivery through receiver failures (500s, 429 with Retry-After, answers
//! slower than the timeout, connections reset mid-body, lost answers),
//! SIGKILLs at seeded points (before a send, after the receiver's 2xx and
//! before the cursor moves, during a restore) and restores to an earlier
//! checkpoint mid-stream. At the end the receiver holds exactly `GET
//! /results` (changes sink), the output list (patterns sink) and the late
//! list (late sink), and the only repeats it saw are whole batches with the
//! same Idempotency-Key and bytes.
//!
//! Waits are conditions with deadlines; the sinks' backoff is shortened
//! with `--sink-backoff-ms` (and the timeout with `--sink-timeout-ms`).

use crate::support::server;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use server::receiver::{Action, Receiver, Request};
use server::*;

/// Fast retries for tests.
const FAST: &[&str] = &[
    "--sink-backoff-ms",
    "10",
    "--sink-backoff-max-ms",
    "80",
    "--sink-timeout-ms",
    "400",
    "--checkpoint-every",
    "0",
];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    FAST.iter().copied().chain(extra.iter().copied()).collect()
}

fn create(s: &Server, body: Value) -> Value {
    let r = s.post("/sinks", &body.to_string());
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()
}

fn addr(r: &Value) -> String {
    serde_json::to_string(&[&r["window"], &r["key"], &r["start"], &r["end"]]).unwrap()
}

/// `GET /results` keyed like the receiver's rows.
fn results(s: &Server) -> BTreeMap<String, Value> {
    s.get("/results").json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (addr(r), r.clone()))
        .collect()
}

/// Every record of a record stream (`late`, `patterns/output`) by `seq`.
fn records(s: &Server, path: &str, field: &str) -> BTreeMap<u64, Value> {
    let mut out = BTreeMap::new();
    let mut after = 0;
    loop {
        let v = s.get(&format!("{path}?after={after}&limit=1000")).json();
        let items = v[field].as_array().unwrap().clone();
        if items.is_empty() {
            return out;
        }
        for it in items {
            out.insert(it["seq"].as_u64().unwrap(), it);
        }
        after = v["next"].as_u64().unwrap();
    }
}

fn sink(s: &Server, name: &str) -> Value {
    let r = s.get(&format!("/sinks/{name}"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// Waits until the receiver's state for `path` equals the service's.
fn converge(s: &Server, rcv: &Receiver, name: &str, path: &str, stream: &str) {
    wait_until(&format!("sink {name} to converge"), DEADLINE, || {
        let v = sink(s, name);
        if v["lag"] != 0 {
            return None;
        }
        let st = rcv.state(path);
        let same = match stream {
            "changes" => st.rows == results(s),
            "late" => st.records == records(s, "/late", "late"),
            _ => st.records == records(s, "/patterns/output", "output"),
        };
        same.then_some(())
    });
}

/// Sends a seeded pattern workload: pushes and advances (a finish last).
fn pattern_workload(s: &Server, seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    // After the pattern watermark, whatever came before.
    let mut t: i64 = s.get("/patterns/status").json()["watermark"]
        .as_i64()
        .unwrap()
        .max(0)
        + 1;
    let mut batch = Vec::new();
    for i in 0..steps {
        t += 1 + rng.below(90_000) as i64;
        let key = format!("a{}", rng.below(3));
        let (kind, fields) = match rng.below(6) {
            0 => ("login", r#"{"ok":true}"#.to_string()),
            1 => ("login", r#"{"ok":false}"#.to_string()),
            2 | 3 => ("pay", format!(r#"{{"amount":{}}}"#, 1 + rng.below(100))),
            4 => ("add_to_cart", "{}".to_string()),
            _ => ("checkout", "{}".to_string()),
        };
        batch.push(format!(
            r#"{{"id":"p{i}","key":"{key}","kind":"{kind}","time":{t},"fields":{fields}}}"#
        ));
        if batch.len() >= 4 || i + 1 == steps {
            s.ok("/patterns/events", &format!("[{}]", batch.join(",")));
            batch.clear();
            s.ok("/patterns/advance", &format!(r#"{{"watermark":{t}}}"#));
        }
    }
}

/// The repeat rule: one Idempotency-Key, one body; the same key and body
/// only for the same batch of the same sink; batch numbers in order; every
/// record (epoch, seq) of a sink under one key only; headers agree with
/// the body.
fn check_log(log: &[Request], secret: Option<&str>) {
    let mut bodies: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut owner: BTreeMap<(String, u64, u64), String> = BTreeMap::new();
    let mut last_batch: BTreeMap<String, u64> = BTreeMap::new();
    for r in log {
        if r.action == Action::Reset {
            continue; // only half a body was read
        }
        let key = r
            .header("idempotency-key")
            .expect("Idempotency-Key")
            .to_string();
        if let Some(b) = bodies.get(&key) {
            assert_eq!(b, &r.body, "same key {key}, other bytes");
            continue;
        }
        bodies.insert(key.clone(), r.body.clone());
        let b: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            key,
            format!("{}-{}", b["sink_id"].as_str().unwrap(), b["batch"]),
            "the key names the sink and the batch"
        );
        for (h, f) in [
            ("x-streamforge-batch", "batch"),
            ("x-streamforge-epoch", "epoch"),
            ("x-streamforge-first", "first"),
            ("x-streamforge-last", "last"),
        ] {
            assert_eq!(r.header(h), Some(b[f].to_string().as_str()), "{h}");
        }
        assert_eq!(r.header("x-streamforge-sink"), b["sink"].as_str());
        assert_eq!(r.header("x-streamforge-stream"), b["stream"].as_str());
        assert_eq!(r.header("content-type"), Some("application/json"));
        if let Some(sec) = secret {
            assert_eq!(
                r.header("x-streamforge-signature"),
                Some(
                    streamforge::sinks::signature(sec, &r.body)
                        .unwrap()
                        .as_str()
                )
            );
        }
        let sink = b["sink_id"].as_str().unwrap().to_string();
        let n = b["batch"].as_u64().unwrap();
        let prev = last_batch.insert(sink.clone(), n).unwrap_or(0);
        assert_eq!(n, prev + 1, "batches of {sink} in order, none skipped");
        let epoch = b["epoch"].as_u64().unwrap();
        for rec in b["records"].as_array().unwrap() {
            let seq = rec["seq"].as_u64().unwrap();
            let (first, last) = (b["first"].as_u64().unwrap(), b["last"].as_u64().unwrap());
            assert!(
                (first..=last).contains(&seq),
                "record {seq} outside {first}..={last}"
            );
            if let Some(k) = owner.insert((sink.clone(), epoch, seq), key.clone()) {
                panic!("record {epoch}:{seq} of {sink} sent under {k} and {key}");
            }
        }
    }
}

#[test]
fn sink_routes_validate_store_mask_and_need_the_token() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &args(&["--token", "tok"]));
    let rcv = Receiver::start(None, |_, _| Action::Ok);
    let url = format!("{}/hook", rcv.base);
    // Without the token: 401 on every sink route.
    let c = Client::new();
    for (m, p) in [
        ("GET", "/sinks"),
        ("POST", "/sinks"),
        ("GET", "/sinks/a"),
        ("DELETE", "/sinks/a"),
    ] {
        let r = c
            .request(m.parse().unwrap(), s.url(p))
            .body("{}")
            .send()
            .unwrap();
        assert_eq!(r.status(), 401, "{m} {p}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    assert_eq!(s.get("/sinks").body, r#"{"sinks":[]}"#);
    // Bad input: a clear problem, and nothing stored.
    let bad: Vec<(String, u16, &str)> = vec![
        ("not json".into(), 400, "bad_request"),
        ("[]".into(), 400, "bad_request"),
        (
            json!({"name":"a","url":url}).to_string(),
            400,
            "bad_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","x":1}).to_string(),
            400,
            "bad_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","batch_size":1.5}).to_string(),
            400,
            "bad_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","start":true}).to_string(),
            400,
            "bad_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","headers":{"X-A":1}}).to_string(),
            400,
            "bad_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","headers":{"X-A":"1","x-a":"2"}})
                .to_string(),
            400,
            "bad_request",
        ),
        (
            r#"{"name":"a","name":"b","url":"http://x","stream":"late"}"#.into(),
            400,
            "bad_request",
        ),
        (
            json!({"name":"","url":url,"stream":"changes"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a b","url":url,"stream":"changes"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":"ftp://x/y","stream":"changes"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":"nonsense","stream":"changes"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":"http://u:p@127.0.0.1/","stream":"changes"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"other"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","batch_size":0}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","batch_size":10001}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","start":"later"}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","start":-1}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","start":5}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","filter":{"pattern":"p"}}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"patterns","filter":{"type":"maybe"}}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"late","filter":{"window":"w"}}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","headers":{"Idempotency-Key":"x"}})
                .to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","headers":{"X-Streamforge-Epoch":"x"}})
                .to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","headers":{"bad name":"x"}}).to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","headers":{"X-A":"line\nbreak"}})
                .to_string(),
            422,
            "invalid_request",
        ),
        (
            json!({"name":"a","url":url,"stream":"changes","secret":""}).to_string(),
            422,
            "invalid_request",
        ),
    ];
    for (body, status, code) in &bad {
        let r = s.post("/sinks", body);
        r.problem(*status, code);
        assert!(
            !r.body.contains("line\\nbreak"),
            "a header value is echoed: {}",
            r.body
        );
        assert_eq!(
            s.get("/sinks").body,
            r#"{"sinks":[]}"#,
            "stored after {body}"
        );
    }
    assert_eq!(
        s.get("/sinks/nope").problem(404, "not_found")["code"],
        "not_found"
    );
    s.delete("/sinks/nope").problem(404, "not_found");

    // Created: 201, the view in order, the secret and header values masked.
    let v = create(
        &s,
        json!({"name":"wh-1","url":url,"stream":"patterns","filter":{"type":"match"},
               "batch_size":50,"headers":{"Authorization":"Bearer receiver-credential"},
               "secret":"signing-secret-1"}),
    );
    let body = s.get("/sinks/wh-1").body;
    for key in [
        "name",
        "url",
        "stream",
        "filter",
        "batch_size",
        "headers",
        "secret",
        "created_at",
        "epoch",
        "cursor",
        "head",
        "lag",
        "state",
        "attempts",
        "last_error",
        "last_success",
        "delivered",
        "failed",
    ] {
        assert!(body.contains(&format!("\"{key}\":")), "{key} in {body}");
    }
    let order: Vec<usize> = [
        "\"name\"",
        "\"url\"",
        "\"stream\"",
        "\"filter\"",
        "\"secret\"",
        "\"cursor\"",
        "\"state\"",
        "\"failed\"",
    ]
    .iter()
    .map(|k| body.find(k).unwrap())
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "field order: {body}");
    assert_eq!(v["secret"], "********");
    assert_eq!(v["headers"], json!({"Authorization":"********"}));
    assert_eq!(v["filter"], json!({"type":"match"}));
    assert_eq!(
        (v["batch_size"].as_u64(), v["state"].as_str()),
        (Some(50), Some("ok"))
    );
    assert_eq!(
        (v["cursor"].as_u64(), v["lag"].as_u64()),
        (Some(0), Some(0))
    );
    s.post(
        "/sinks",
        &json!({"name":"wh-1","url":url,"stream":"late"}).to_string(),
    )
    .problem(409, "sink_exists");
    create(
        &s,
        json!({"name":"a.late","url":url,"stream":"late","start":"start"}),
    );
    let list = s.get("/sinks").json();
    let names: Vec<&str> = list["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.late", "wh-1"]);
    for text in [s.get("/sinks").body, body, s.get("/metrics").body] {
        assert!(
            !text.contains("signing-secret-1") && !text.contains("receiver-credential"),
            "{text}"
        );
    }
    assert_eq!(s.delete("/sinks/wh-1").status, 204);
    assert_eq!(s.get("/sinks/wh-1").status, 404);
    // Kept across a restart.
    let mut s = s;
    s.kill();
    let s = start(&dir.path().join("db"), &args(&["--token", "tok"]));
    let list = s.get("/sinks").json();
    assert_eq!(list["sinks"].as_array().unwrap().len(), 1);
    assert_eq!(list["sinks"][0]["name"], "a.late");
    assert!(!s.stderr().contains("signing-secret-1"));
}

/// The receiver's failures, decided per request from a seed.
/// Requests after the first `until` all succeed.
fn flaky(seed: u64, until: usize) -> impl FnMut(usize, &str) -> Action + Send {
    let mut rng = Rng(seed);
    let mut too_many_sent = false;
    // Every path meets each kind of failure at least once, whatever the
    // timing spreads over it: its 2nd, 4th and 6th requests fail, reset
    // and lose their answer; the rest is drawn at random.
    let mut per_path: std::collections::HashMap<String, usize> = Default::default();
    move |n, path| {
        if n == 3 && !too_many_sent {
            too_many_sent = true;
            return Action::TooMany(1);
        }
        if n > until {
            return Action::Ok;
        }
        let k = per_path.entry(path.to_string()).or_default();
        *k += 1;
        match *k {
            2 => return Action::Fail(500),
            4 => return Action::Reset,
            6 => return Action::LostAnswer,
            _ => {}
        }
        match rng.below(20) {
            0 | 1 => Action::Fail(500),
            2 => Action::Fail(503),
            3 => Action::Reset,
            4 => Action::LostAnswer,
            5 if n % 3 == 0 => Action::Slow(Duration::from_millis(600)),
            _ => Action::Ok,
        }
    }
}

#[test]
fn receivers_that_fail_end_with_exactly_the_services_state() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &args(&[]));
    let secret = "s3cr3t-for-signing";
    let rcv = Receiver::start(Some(secret), flaky(7, 400));
    // Some output before the sinks exist: `start` delivers it too.
    let ops = workload(11, 70);
    for op in &ops[..20] {
        assert_eq!(op.send(&s).status, 200);
    }
    for (name, stream, batch) in [
        ("ch", "changes", 7),
        ("pt", "patterns", 3),
        ("lt", "late", 2),
    ] {
        create(
            &s,
            json!({"name":name,"url":format!("{}/{stream}", rcv.base),"stream":stream,
                   "batch_size":batch,"start":"start","secret":secret}),
        );
    }
    let started = std::time::Instant::now();
    for op in &ops[20..] {
        assert_eq!(op.send(&s).status, 200);
    }
    pattern_workload(&s, 5, 60);
    s.ok("/watermarks", r#"{"partition":"p0","watermark":100000}"#);
    converge(&s, &rcv, "ch", "/changes", "changes");
    converge(&s, &rcv, "pt", "/patterns", "patterns");
    converge(&s, &rcv, "lt", "/late", "late");
    let log = rcv.log();
    check_log(&log, Some(secret));
    assert_eq!(rcv.bad_signatures(), 0);
    // Every kind of failure happened, and was retried.
    for a in [
        Action::Fail(500),
        Action::Reset,
        Action::LostAnswer,
        Action::TooMany(1),
    ] {
        assert!(
            log.iter().any(|r| r.action == a),
            "no {a:?} in {} requests",
            log.len()
        );
    }
    assert!(log.iter().any(|r| matches!(r.action, Action::Slow(_))));
    // The 429's Retry-After (1 s) was honoured: its retry came a second later
    // (at least), so the whole run took that long.
    assert!(started.elapsed() >= Duration::from_secs(1));
    let v = sink(&s, "ch");
    assert!(v["failed"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["state"], "ok");
    // Recovered: the failures are counted, their error is not shown as current.
    assert_eq!(v["last_error"], Value::Null, "{v}");
    let m = s.get("/metrics").body;
    assert!(
        m.contains("streamforge_sink_delivered_total{sink=\"ch\"}"),
        "{m}"
    );
    assert!(m.contains("streamforge_sink_lag{sink=\"pt\"} 0"), "{m}");
    let text = format!("{}{}{}", m, s.get("/sinks").body, s.stderr());
    assert!(!text.contains(secret), "the secret leaked");
}

/// Every seeded fault at once, for a changes sink and a patterns sink: the
/// receiver fails (500s, 503s, 429 with Retry-After, answers slower than
/// the timeout, connections reset mid-body, lost answers), the service is
/// SIGKILLed before a send and after the receiver's 2xx (at a batch of each
/// sink) and in the middle of a restore, and both engines are restored to
/// an earlier checkpoint mid-stream.
#[test]
fn crashes_and_restores_leave_the_receiver_exact() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let rcv = Receiver::start(None, flaky(13, 5000));
    let mut s = start(&db, &args(&[]));
    for (name, stream, batch) in [("ch", "changes", 4), ("pt", "patterns", 2)] {
        create(
            &s,
            json!({"name":name,"url":format!("{}/{stream}", rcv.base),"stream":stream,
                   "batch_size":batch,"start":"start"}),
        );
    }
    let ops = workload(23, 120);
    let next = std::cell::Cell::new(0);
    let send = |s: &Server, n: usize| {
        let from = next.get();
        for op in &ops[from..(from + n).min(ops.len())] {
            assert_eq!(op.send(s).status, 200, "{op:?}");
        }
        next.set((from + n).min(ops.len()));
    };
    let mut seed = 100;
    let mut patterns = |s: &Server, steps: usize| {
        seed += 1;
        pattern_workload(s, seed, steps);
    };
    let both = |s: &Server| {
        converge(s, &rcv, "ch", "/changes", "changes");
        converge(s, &rcv, "pt", "/patterns", "patterns");
    };
    send(&s, 25);
    patterns(&s, 12);
    let ckpt = s.post_empty("/checkpoints").json()["id"].as_u64().unwrap();
    let at_ckpt = next.get();
    let pckpt = s.post_empty("/patterns/checkpoints").json()["id"]
        .as_u64()
        .unwrap();
    both(&s);

    // SIGKILL at seeded points of each sink: before a send, and after the
    // receiver's 2xx but before the cursor moves. The batch is the second
    // one formed after the restart (the receiver holds every earlier one).
    for (name, path) in [("ch", "/changes"), ("pt", "/patterns")] {
        for point in ["before_send", "after_2xx"] {
            let batch = rcv.state(path).batch + 2;
            s.kill();
            s = start_env(
                &db,
                &args(&[]),
                &[("STREAMFORGE_SINK_FAULT", &format!("{point}:{batch}:{name}"))],
            );
            send(&s, 12);
            patterns(&s, 24);
            let needle = format!("sink {name} fault point {point} reached at batch {batch}");
            wait_until(&needle, DEADLINE, || {
                s.stderr().contains(&needle).then_some(())
            });
            s.kill();
            s = start(&db, &args(&[]));
            both(&s);
        }
    }
    // A restore to the earlier checkpoint mid-stream (both engines), then
    // new, different output after it.
    assert_eq!(
        s.post_empty(&format!("/checkpoints/{ckpt}/restore")).status,
        200
    );
    assert_eq!(
        s.post_empty(&format!("/patterns/checkpoints/{pckpt}/restore"))
            .status,
        200
    );
    // The calls after the checkpoint are sent again (their offsets were
    // taken back), then new ones.
    next.set(at_ckpt);
    send(&s, 40);
    patterns(&s, 10);
    both(&s);
    assert!(rcv.state("/changes").epoch >= 1);
    assert!(rcv.state("/patterns").epoch >= 1);

    // SIGKILL in the middle of a restore of each engine: committed, not yet
    // in place nor seen by the sinks (the fault point `restore`), with
    // batches of both sinks formed and not yet delivered before it.
    let ckpt2 = s.post_empty("/checkpoints").json()["id"].as_u64().unwrap();
    let at_ckpt2 = next.get();
    let pckpt2 = s.post_empty("/patterns/checkpoints").json()["id"]
        .as_u64()
        .unwrap();
    for (route, status, id) in [
        ("/checkpoints", "/status", ckpt2),
        ("/patterns/checkpoints", "/patterns/status", pckpt2),
    ] {
        let epoch = s.get(status).json()["epoch"].as_u64().unwrap() + 1;
        s.kill();
        s = start_env(
            &db,
            &args(&[]),
            &[("STREAMFORGE_SINK_FAULT", &format!("restore:{epoch}"))],
        );
        send(&s, 10);
        patterns(&s, 8);
        {
            use std::io::Write as _;
            let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
            write!(
                c,
                "POST {route}/{id}/restore HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"
            )
            .unwrap();
            c.flush().unwrap();
            let needle = format!("fault point restore reached at epoch {epoch}");
            wait_until(&needle, DEADLINE, || {
                s.stderr().contains(&needle).then_some(())
            });
            s.kill();
        }
        s = start(&db, &args(&[]));
        assert_eq!(
            s.get(status).json()["epoch"].as_u64(),
            Some(epoch),
            "the restore was committed"
        );
        both(&s);
        // The calls after the window checkpoint are sent again: their
        // offsets were taken back.
        if route == "/checkpoints" {
            next.set(at_ckpt2);
        }
    }
    send(&s, 30);
    patterns(&s, 10);
    s.ok("/watermarks", r#"{"partition":"p0","watermark":100000}"#);
    both(&s);
    let log = rcv.log();
    check_log(&log, None);
    // The receiver's failures all happened, on both paths.
    for path in ["/changes", "/patterns"] {
        let mine: Vec<&Request> = log.iter().filter(|r| r.path == path).collect();
        for a in [Action::Fail(500), Action::Reset, Action::LostAnswer] {
            assert!(
                mine.iter().any(|r| r.action == a),
                "no {a:?} among the {} requests to {path}",
                mine.len()
            );
        }
    }
    assert!(log.iter().any(|r| r.action == Action::TooMany(1)));
    assert!(log.iter().any(|r| matches!(r.action, Action::Slow(_))));
    // Both receivers were reset by the restores: the changes one with the
    // visible rows, the patterns one with the sequence to cut back to.
    for path in ["/changes", "/patterns"] {
        assert!(
            log.iter()
                .filter(|r| r.path == path)
                .any(|r| String::from_utf8_lossy(&r.body).contains("\"reset\":{\"after\":")),
            "no reset sent to {path}"
        );
    }
    assert!(log
        .iter()
        .any(|r| String::from_utf8_lossy(&r.body).contains(",\"rows\":[")));
    // Kills after a 2xx and lost answers made the receiver see batches
    // again, whole (check_log: same key, same bytes), on both paths.
    for path in ["/changes", "/patterns"] {
        let keys: Vec<&str> = log
            .iter()
            .filter(|r| r.path == path && r.action != Action::Reset)
            .filter_map(|r| r.header("idempotency-key"))
            .collect();
        let distinct: BTreeSet<&str> = keys.iter().copied().collect();
        assert!(
            keys.len() > distinct.len(),
            "no batch of {path} was sent again"
        );
    }
}

#[test]
fn filters_skip_records_and_unreachable_sinks_block_nothing() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &args(&[]));
    let rcv = Receiver::start(None, |_, _| Action::Ok);
    // A closed port: every attempt fails to connect.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    create(
        &s,
        json!({"name":"down","url":format!("http://{closed}/x"),"stream":"changes",
               "start":"start","secret":"never-shown","headers":{"X-Token":"header-secret"}}),
    );
    create(
        &s,
        json!({"name":"k1","url":format!("{}/k1", rcv.base),"stream":"changes",
               "start":"start","batch_size":3,"filter":{"key":"k1","window":"fixed_10s"}}),
    );
    create(
        &s,
        json!({"name":"none","url":format!("{}/none", rcv.base),"stream":"changes",
               "filter":{"key":"no-such-key"}}),
    );
    for op in workload(31, 60) {
        assert_eq!(op.send(&s).status, 200, "ingestion goes on");
    }
    s.ok("/watermarks", r#"{"partition":"p1","watermark":90000}"#);
    // The filtered sink holds exactly the rows of its window and key.
    wait_until("the filtered sink", DEADLINE, || {
        let want: BTreeMap<String, Value> = s.get("/results?window=fixed_10s&key=k1").json()
            ["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (addr(r), r.clone()))
            .collect();
        (sink(&s, "k1")["lag"] == 0 && rcv.state("/k1").rows == want).then_some(())
    });
    let k1 = rcv
        .log()
        .into_iter()
        .filter(|r| r.path == "/k1")
        .collect::<Vec<_>>();
    for r in &k1 {
        let b: Value = serde_json::from_slice(&r.body).unwrap();
        for rec in b["records"].as_array().unwrap() {
            assert_eq!(
                (
                    rec["result"]["key"].as_str(),
                    rec["result"]["window"].as_str()
                ),
                (Some("k1"), Some("fixed_10s"))
            );
        }
    }
    check_log(&rcv.log(), None);
    // A filter that keeps nothing moves the cursor all the same: the head.
    wait_until("the empty filter's cursor", DEADLINE, || {
        let v = sink(&s, "none");
        (v["lag"] == 0 && v["cursor"] == s.get("/status").json()["sequence"]).then_some(())
    });
    // Its only requests carry the watermark (no records).
    for r in rcv.log().iter().filter(|r| r.path == "/none") {
        let b: Value = serde_json::from_slice(&r.body).unwrap();
        assert!(b["records"].as_array().unwrap().is_empty());
    }
    // The unreachable one is retrying, with its error, and lags.
    let v = wait_until("the down sink to retry", DEADLINE, || {
        let v = sink(&s, "down");
        (v["state"] == "retrying" && v["attempts"].as_u64() > Some(1)).then_some(v)
    });
    assert!(v["lag"].as_u64().unwrap() > 0);
    assert!(v["last_error"].as_str().unwrap().contains("connect"), "{v}");
    let m = s.get("/metrics").body;
    let failed = m
        .lines()
        .find_map(|l| l.strip_prefix("streamforge_sink_failed_total{sink=\"down\"} "))
        .unwrap();
    assert!(failed.parse::<u64>().unwrap() > 0);
    let all = format!("{m}{}{}", s.get("/sinks").body, s.stderr());
    for secret in ["never-shown", "header-secret"] {
        assert!(!all.contains(secret), "{secret} leaked");
    }
    // Deleting it stops it.
    assert_eq!(s.delete("/sinks/down").status, 204);
    assert!(!s.get("/metrics").body.contains("sink=\"down\""));
}

/// The `last error` row of `sink show NAME`: its value.
fn shown_last_error(s: &Server, name: &str) -> String {
    let (ok, out, err) = cli(s, &["sink", "show", name]);
    assert!(ok, "{err}");
    out.lines()
        .find_map(|l| l.strip_prefix("last error "))
        .unwrap_or_else(|| panic!("no last error row:\n{out}"))
        .trim()
        .to_string()
}

/// A receiver that fails, then recovers: while the sink retries it shows
/// the error (API and `sink show`); once a later batch is acknowledged the
/// error is gone from both (`null`, `-`), the failures still counted.
#[test]
fn a_sink_that_recovers_no_longer_shows_its_old_error() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &args(&[]));
    let rcv = Receiver::start(None, |_, _| Action::Fail(500));
    create(
        &s,
        json!({"name":"flaky","url":format!("{}/f", rcv.base),"stream":"changes","start":"start"}),
    );
    for op in workload(23, 30) {
        assert_eq!(op.send(&s).status, 200);
    }
    let v = wait_until("the sink to fail", DEADLINE, || {
        let v = sink(&s, "flaky");
        (v["state"] == "retrying" && v["attempts"].as_u64() > Some(1)).then_some(v)
    });
    assert_eq!(v["last_error"], "HTTP 500 Internal Server Error", "{v}");
    assert_eq!(
        shown_last_error(&s, "flaky"),
        "HTTP 500 Internal Server Error"
    );

    rcv.set_plan(|_, _| Action::Ok);
    let v = wait_until("the sink to deliver everything", DEADLINE, || {
        let v = sink(&s, "flaky");
        (v["state"] == "ok" && v["lag"] == 0 && rcv.state("/f").rows == results(&s)).then_some(v)
    });
    assert_eq!(v["last_error"], Value::Null, "{v}");
    assert!(v["last_success"].is_string(), "{v}");
    assert!(
        v["failed"].as_u64() > Some(1),
        "the failures stay counted: {v}"
    );
    assert_eq!(shown_last_error(&s, "flaky"), "-");
    let listed = s.get("/sinks").json();
    assert_eq!(listed["sinks"][0]["last_error"], Value::Null, "{listed}");
}

/// A child process killed when dropped (also when the test panics).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the documented receiver (python3) on a free port with its SQLite
/// database `NAME.db` in `dir`: the process, its base URL
/// (`http://127.0.0.1:PORT`) and the database's path.
fn python_receiver(
    dir: &std::path::Path,
    name: &str,
    secret: &str,
) -> (KillOnDrop, String, std::path::PathBuf) {
    use std::io::BufRead as _;
    let script = dir.join("receiver.py");
    std::fs::write(&script, documented_python("docs/sinks.md")).unwrap();
    let db = dir.join(format!("{name}.db"));
    let mut child = KillOnDrop(
        std::process::Command::new("python3")
            .arg(&script)
            .arg("0")
            .arg(&db)
            .env("SECRET", secret)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the receiver"),
    );
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the receiver did not start: {line:?}"))
        .to_string();
    (child, format!("http://127.0.0.1:{port}"), db)
}

/// What a documented receiver's database holds: its `position` (sink id,
/// batch, epoch, last), its rows by address and its records by sequence.
/// `None` while it cannot be read.
#[allow(clippy::type_complexity)]
fn stored(
    db: &std::path::Path,
) -> Option<(
    (Option<String>, u64, u64, u64),
    BTreeMap<String, Value>,
    BTreeMap<u64, Value>,
)> {
    let c = rusqlite::Connection::open(db).ok()?;
    c.busy_timeout(Duration::from_secs(5)).ok()?;
    let position = c
        .query_row(
            "SELECT sink_id, batch, epoch, last FROM position",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .ok()?;
    let mut rows = BTreeMap::new();
    let mut q = c.prepare(r#"SELECT "row" FROM rows"#).ok()?;
    for row in q.query_map([], |r| r.get::<_, String>(0)).ok()? {
        let v: Value = serde_json::from_str(&row.ok()?).unwrap();
        rows.insert(addr(&v), v);
    }
    let mut records = BTreeMap::new();
    let mut q = c.prepare("SELECT seq, record FROM records").ok()?;
    for rec in q
        .query_map([], |r| Ok((r.get::<_, u64>(0)?, r.get::<_, String>(1)?)))
        .ok()?
    {
        let (seq, text) = rec.ok()?;
        records.insert(seq, serde_json::from_str(&text).unwrap());
    }
    Some((position, rows, records))
}

/// The receiver of docs/sinks.md (Python, SQLite), as printed there, for a
/// `changes` sink (behind a forwarding receiver that keeps each request's
/// bytes) and a `patterns` sink, across several windows and keys and a
/// restore (a reset): its tables end equal to `GET /results` and the
/// pattern output, and its position is the sink's.
/// Then every batch the `changes` sink sent is delivered again, with its
/// own bytes and signature, after the later ones were applied: the receiver
/// answers 200 and applies none of them (some would change the rows if
/// they were applied again).
#[test]
fn the_documented_python_receiver_ends_exact() {
    if !python3_available("the receiver example of docs/sinks.md") {
        return;
    }
    let dir = tempdir();
    let secret = "doc-secret";
    let (_rows_rx, rows_base, rows_db) = python_receiver(dir.path(), "rows", secret);
    let (_out_rx, out_base, out_db) = python_receiver(dir.path(), "output", secret);
    let proxy = Receiver::forwarding(&rows_base);
    let s = start(&dir.path().join("db"), &args(&[]));
    let ops = workload(41, 50);
    for op in &ops[..15] {
        assert_eq!(op.send(&s).status, 200);
    }
    pattern_workload(&s, 9, 10);
    create(
        &s,
        json!({"name":"rows","url":format!("{}/", proxy.base),"stream":"changes","start":"start","batch_size":5,"secret":secret}),
    );
    create(
        &s,
        json!({"name":"output","url":format!("{out_base}/"),"stream":"patterns","start":"start","batch_size":2,"secret":secret}),
    );
    let ckpt = s.post_empty("/checkpoints").json()["id"].as_u64().unwrap();
    for op in &ops[15..35] {
        assert_eq!(op.send(&s).status, 200);
    }
    pattern_workload(&s, 10, 10);
    let check = |s: &Server| {
        wait_until("the Python receivers to converge", DEADLINE, || {
            let (_, rows, _) = stored(&rows_db)?;
            let (_, _, recs) = stored(&out_db)?;
            (rows == results(s)
                && recs == records(s, "/patterns/output", "output")
                && sink(s, "rows")["lag"] == 0
                && sink(s, "output")["lag"] == 0)
                .then_some(())
        });
    };
    check(&s);
    let keys: BTreeSet<String> = results(&s).values().map(|r| r["key"].to_string()).collect();
    let windows: BTreeSet<String> = results(&s)
        .values()
        .map(|r| r["window"].to_string())
        .collect();
    assert!(
        keys.len() > 1 && windows.len() > 1,
        "several keys {keys:?} and windows {windows:?}"
    );

    // Every batch again, as sent, straight to the receiver.
    let sent: Vec<Request> = proxy
        .log()
        .into_iter()
        .filter(|r| r.action == Action::Ok)
        .collect();
    let before = stored(&rows_db).unwrap();
    let last_batch = sent
        .iter()
        .map(|r| {
            r.header("x-streamforge-batch")
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .max();
    assert_eq!(
        Some(before.0 .1),
        last_batch,
        "the position: the last batch"
    );
    let mut held = server::receiver::SinkState::default();
    for r in &sent {
        server::receiver::apply(&mut held, &serde_json::from_slice(&r.body).unwrap());
    }
    assert_eq!(held.rows, before.1, "the protocol's state");
    let stale = sent
        .iter()
        .filter(|r| {
            let mut again = held.clone();
            again.batch = 0;
            server::receiver::apply(&mut again, &serde_json::from_slice(&r.body).unwrap());
            again.rows != held.rows
        })
        .count();
    assert!(stale > 0, "no batch would change the rows if applied again");
    for r in &sent {
        let mut req = s.client.post(format!("{rows_base}/")).body(r.body.clone());
        for (k, v) in &r.headers {
            if k.starts_with("x-streamforge-") || k == "idempotency-key" || k == "content-type" {
                req = req.header(k, v);
            }
        }
        let status = req.send().unwrap().status();
        assert_eq!(status, 200, "a redelivered batch is acknowledged");
        assert_eq!(
            stored(&rows_db).unwrap(),
            before,
            "redelivered batch {} applied nothing ({stale} of them would change the rows)",
            r.header("x-streamforge-batch").unwrap()
        );
    }

    // A restore: the receiver's reset drops the rows made after the
    // checkpoint (the restore removed some) ...
    let held_before_restore = results(&s);
    assert_eq!(
        s.post_empty(&format!("/checkpoints/{ckpt}/restore")).status,
        200
    );
    check(&s);
    let restored = results(&s);
    assert!(
        held_before_restore
            .keys()
            .any(|a| !restored.contains_key(a)),
        "the restore removed rows (the reset has something to drop)"
    );
    // ... and a longer history after it, past more windows.
    for op in &ops[15..] {
        assert_eq!(op.send(&s).status, 200);
    }
    for p in 0..4 {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"p{p}","watermark":10000}}"#),
        );
    }
    check(&s);
    let (position, _, _) = stored(&rows_db).unwrap();
    let v = sink(&s, "rows");
    assert_eq!(
        (position.2, position.3),
        (v["epoch"].as_u64().unwrap(), v["cursor"].as_u64().unwrap()),
        "the position: the sink's epoch and cursor"
    );
}

fn cli(s: &Server, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args(args)
        .env("STREAMFORGE_URL", &s.base)
        .env_remove("STREAMFORGE_TOKEN")
        .env_remove("STREAMFORGE_SINK_SECRET")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_sink_commands_add_list_show_and_remove() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &args(&[]));
    let rcv = Receiver::start(Some("file-secret"), |_, _| Action::Ok);
    let key = dir.path().join("hook.key");
    std::fs::write(&key, "file-secret\n").unwrap();
    let url = format!("{}/p", rcv.base);
    let (ok, out, err) = cli(
        &s,
        &[
            "sink",
            "add",
            "alerts",
            &url,
            "--stream",
            "patterns",
            "--type",
            "match",
            "--batch-size",
            "10",
            "--start",
            "start",
            "--header",
            "X-Team: fraud",
            "--secret-file",
            key.to_str().unwrap(),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "sink alerts added: patterns stream from sequence 0 of epoch 0\n"
    );
    let (ok, out, _) = cli(&s, &["sink", "list"]);
    assert!(ok);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["name", "stream", "state", "lag", "cursor", "url"]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["alerts", "patterns", "ok", "0", "0:0", url.as_str()]
    );
    let (ok, out, _) = cli(&s, &["sink", "show", "alerts"]);
    assert!(ok);
    assert!(out.contains("secret        ********"), "{out}");
    assert!(
        out.contains(r#"headers       {"X-Team":"********"}"#),
        "{out}"
    );
    assert!(out.contains(r#"filter        {"type":"match"}"#), "{out}");
    assert!(!out.contains("file-secret") && !out.contains("fraud"));
    // The secret from the file signs the requests.
    pattern_workload(&s, 4, 30);
    s.ok("/patterns/finish", "");
    wait_until("the match output", DEADLINE, || {
        (sink(&s, "alerts")["lag"] == 0).then_some(())
    });
    assert_eq!(rcv.bad_signatures(), 0);
    assert!(
        rcv.state("/p").records.len() > 1,
        "matches delivered: {:?}",
        rcv.state("/p")
    );
    for r in rcv.log() {
        assert_eq!(r.header("x-team"), Some("fraud"));
        let b: Value = serde_json::from_slice(&r.body).unwrap();
        assert!(b["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["type"] == "match"));
    }
    let (ok, _, err) = cli(&s, &["sink", "add", "alerts", &url]);
    assert!(!ok);
    assert!(err.contains("sink_exists"), "{err}");
    let (ok, _, err) = cli(&s, &["sink", "add", "x", &url, "--header", "nocolon"]);
    assert!(!ok && err.contains("Name: value"), "{err}");
    let (ok, out, _) = cli(&s, &["sink", "remove", "alerts"]);
    assert!(ok);
    assert_eq!(out, "removed sink alerts\n");
    let (ok, _, err) = cli(&s, &["sink", "show", "alerts"]);
    assert!(!ok && err.contains("not_found"), "{err}");
}

/// CPU niceness of every thread of `pid` named `name` (field 19 of
/// `/proc/<pid>/task/<tid>/stat`, after the parenthesized name).
fn thread_nices(pid: u32, name: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        // after the name: state is field 3, nice field 19
        out.push(after.split(' ').nth(16).unwrap().parse().unwrap());
    }
    out
}

/// The sinks run on threads of their own at `--sink-nice` (10 by default),
/// so that under CPU contention ingestion goes first; the service's own
/// threads keep their priority, and delivery still ends exact.
#[test]
fn sinks_run_on_their_own_lower_priority_threads() {
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("no /proc: skipped");
        return;
    }
    for (flag, want) in [(None, 10), (Some("0"), 0), (Some("15"), 15)] {
        let dir = tempdir();
        let mut extra = vec![];
        if let Some(n) = flag {
            extra = vec!["--sink-nice", n];
        }
        let s = start(&dir.path().join("db"), &args(&extra));
        let rcv = Receiver::start(None, |_, _| Action::Ok);
        create(
            &s,
            json!({"name":"all","url":format!("{}/all", rcv.base),"stream":"changes","start":"start"}),
        );
        for op in workload(5, 40) {
            assert_eq!(op.send(&s).status, 200);
        }
        converge(&s, &rcv, "all", "/all", "changes");
        let sinks = thread_nices(s.pid(), "sinks");
        assert!(!sinks.is_empty(), "no thread named sinks");
        assert!(sinks.iter().all(|n| *n == want), "{flag:?}: {sinks:?}");
        let main = thread_nices(s.pid(), "tokio-rt-worker");
        assert!(!main.is_empty() && main.iter().all(|n| *n == 0), "{main:?}");
    }
    // out of range: refused before anything starts
    let dir = tempdir();
    let Err(e) = try_start(&dir.path().join("db"), &["--sink-nice", "20"]) else {
        panic!("--sink-nice 20 was accepted");
    };
    assert!(e.contains("--sink-nice"), "{e}");
}

#[test]
fn an_unreadable_recorded_batch_stops_the_sink_and_nothing_is_sent_in_its_place() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let rcv = Receiver::start(None, |_, _| Action::Ok);
    // Batch 3 of the sink is recorded, then the process stops right
    // before sending it.
    let mut s = start_env(
        &db,
        &args(&[]),
        &[("STREAMFORGE_SINK_FAULT", "before_send:3:ch")],
    );
    create(
        &s,
        json!({"name":"ch","url":format!("{}/changes", rcv.base),"stream":"changes",
               "batch_size":3,"start":"start"}),
    );
    for op in &workload(31, 40) {
        assert_eq!(op.send(&s).status, 200, "{op:?}");
    }
    let needle = "sink ch fault point before_send reached at batch 3";
    wait_until(needle, DEADLINE, || {
        s.stderr().contains(needle).then_some(())
    });
    let cursor = sink(&s, "ch")["cursor"].as_u64().unwrap();
    s.kill();
    let before = rcv.log().len();
    // The recorded batch 3 becomes unreadable on disk (as a damaged page
    // would make it).
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let n = conn
            .execute(
                "UPDATE sink_batches SET frozen = '[{\"seq\":' WHERE batch = 3",
                [],
            )
            .unwrap();
        assert_eq!(n, 1, "batch 3 is recorded");
    }
    let s = start(&db, &args(&[]));
    let v = wait_until("the sink to stop", DEADLINE, || {
        let v = sink(&s, "ch");
        (v["state"] == "stopped").then_some(v)
    });
    let err = v["last_error"].as_str().unwrap();
    assert!(err.contains("stored batch 3 is unreadable"), "{err}");
    assert_eq!(v["cursor"].as_u64().unwrap(), cursor, "the cursor moved");
    assert_eq!(
        s.metric("streamforge_sink_stopped{sink=\"ch\"}"),
        1.0,
        "{}",
        s.get("/metrics").body
    );
    // The service goes on (more output is produced and stays in the
    // stream); the sink sends nothing in the stopped batch's place: no
    // request after the restart at all, empty or not.
    for op in &workload(32, 10)[4..] {
        let r = op.send(&s);
        assert!(r.status == 200 || r.status == 409, "{}", r.body);
    }
    assert_eq!(s.get("/readyz").status, 200);
    let v = sink(&s, "ch");
    assert_eq!(v["state"], "stopped");
    assert_eq!(v["cursor"].as_u64().unwrap(), cursor);
    assert_eq!(rcv.log().len(), before, "the stopped sink sent a request");
    assert!(
        rcv.log().iter().all(|r| {
            let b: Value = serde_json::from_slice(&r.body).unwrap();
            b["batch"].as_u64().unwrap() < 3
        }),
        "batch 3 (or a later one) reached the receiver"
    );
    assert!(before > 0, "batches 1 and 2 were sent");
}
