//! docs/api.md against the real binary: every route, every error code of the
//! table, problem+json shape, and state unchanged after each rejection.

use crate::support::server;

use std::time::{Duration, Instant};

use server::*;

fn ev(p: &str, off: i64, id: &str, key: &str, ts: i64, v: i64) -> String {
    delivery(p, Some(off), id, key, ts, v)
}

#[test]
fn every_route_answers_in_api_shapes() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);

    assert_eq!(s.get("/healthz").body, r#"{"status":"ok"}"#);
    assert_eq!(s.get("/readyz").status, 200);
    let p = s.get("/pipeline");
    assert_eq!(p.content_type, "application/json");
    assert!(
        p.body
            .starts_with(r#"{"partitions":["p0","p1","p2","p3"],"windows":{"#),
        "{}",
        p.body
    );
    assert!(p.body.ends_with(r#""lateness":1000}"#), "{}", p.body);

    // Single, array, NDJSON.
    let r = s.ok("/events", &ev("p0", 0, "a", "k", 5, -3));
    assert_eq!(
        r,
        r#"{"changes":[],"late":[],"watermark":null,"offsets":{"p0":0}}"#
    );
    let r = s.ok(
        "/events",
        &format!(
            "[{},{}]",
            ev("p1", 0, "b", "k", 7, 4),
            ev("p0", 1, "c", "j", 1, 2)
        ),
    );
    assert_eq!(
        r,
        r#"{"changes":[],"late":[],"watermark":null,"offsets":{"p0":1,"p1":0}}"#
    );
    let r = s.post_ndjson(
        "/events",
        &format!(
            "{}\n{}\n",
            ev("p2", 0, "d", "k", 9, 1),
            ev("p2", 1, "e", "k", 9, 1)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        r#"{"changes":[],"late":[],"watermark":null,"offsets":{"p2":1}}"#
    );

    // Watermarks and idle.
    for p in ["p0", "p1", "p2"] {
        let r = s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":10000}}"#),
        );
        assert_eq!(r, r#"{"changes":[],"watermark":null,"finalized":[]}"#);
    }
    let r = s.post_empty("/partitions/p3/idle");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["watermark"], 10000);
    assert!(r.body.starts_with(r#"{"changes":[{"seq":1,"op":"upsert","result":{"window":"fixed_10s","key":"j","start":0,"end":10000,"count":1,"sum":2,"min":2,"max":2}}"#), "{}", r.body);
    assert!(
        r.body.contains(r#"],"watermark":10000,"finalized":["#),
        "{}",
        r.body
    );

    // Late event (timestamp + lateness < W).
    let r = s.ok("/events", &ev("p0", 2, "late1", "k", 100, 7));
    assert_eq!(
        r,
        r#"{"changes":[],"late":[{"seq":1,"event":{"id":"late1","key":"k","timestamp":100,"value":7},"watermark":10000}],"watermark":10000,"offsets":{"p0":2}}"#
    );

    let head = v["changes"].as_array().unwrap().len() as u64;
    let c = s.get("/changes?after=0&limit=1");
    assert!(
        c.body.starts_with(r#"{"changes":[{"seq":1,"op":"upsert","#),
        "{}",
        c.body
    );
    assert!(
        c.body
            .ends_with(&format!(r#"],"next":1,"head":{head},"epoch":0}}"#)),
        "{}",
        c.body
    );
    let c = s.get(&format!("/changes?after={head}"));
    assert_eq!(
        c.body,
        format!(r#"{{"changes":[],"next":{head},"head":{head},"epoch":0}}"#)
    );
    assert_eq!(s.all_changes().len() as u64, head);
    let l = s.get("/late");
    assert_eq!(
        l.body,
        r#"{"late":[{"seq":1,"event":{"id":"late1","key":"k","timestamp":100,"value":7},"watermark":10000}],"next":1,"head":1,"epoch":0}"#
    );

    let st = s.get("/status");
    assert_eq!(
        st.body,
        format!(
            r#"{{"watermark":10000,"sequence":{head},"late":1,"live_buckets":{},"epoch":0,"partitions":{{"p0":{{"offset":2,"progress":10000,"idle":false}},"p1":{{"offset":0,"progress":10000,"idle":false}},"p2":{{"offset":1,"progress":10000,"idle":false}},"p3":{{"offset":-1,"progress":null,"idle":true}}}}}}"#,
            st.json()["live_buckets"]
        )
    );
    let res = s.get("/results?window=fixed_10s&key=j");
    assert_eq!(
        res.body,
        r#"{"results":[{"window":"fixed_10s","key":"j","start":0,"end":10000,"count":1,"sum":2,"min":2,"max":2}],"watermark":10000,"sequence":12,"epoch":0}"#
    );
    assert_eq!(
        s.get("/results?window=nope").body,
        r#"{"results":[],"watermark":10000,"sequence":12,"epoch":0}"#
    );

    // Checkpoints.
    let c = s.post_empty("/checkpoints");
    assert_eq!(c.status, 201, "{}", c.body);
    let cv = c.json();
    assert_eq!(cv["id"], 1);
    assert_eq!(cv["sequence"], head);
    let bytes = s.get("/checkpoints/1");
    assert_eq!(bytes.content_type, "application/json");
    assert_eq!(cv["bytes"], bytes.body.len());
    let digest = cv["digest"].as_str().unwrap().to_string();
    assert!(c.body.starts_with(&format!(
        r#"{{"id":1,"sequence":{head},"digest":"{digest}","bytes":"#
    )));
    assert!(bytes.body.starts_with(&format!(
        r#"{{"digest":"{digest}","format":"streamforge-checkpoint","state":"#
    )));
    assert!(bytes.body.ends_with(r#","version":2}"#));
    let env: serde_json::Value = serde_json::from_str(&bytes.body).unwrap();
    assert_eq!(
        crate::support::engine::digest_of(&env["state"]),
        digest,
        "the digest of the served state"
    );
    assert_eq!(
        bytes.headers.get("etag").and_then(|v| v.to_str().ok()),
        Some(format!("\"{digest}\"").as_str())
    );
    let list = s.get("/checkpoints");
    let lv = list.json();
    assert_eq!(lv["checkpoints"][0]["id"], 1);
    assert!(list.body.starts_with(&format!(
        r#"{{"checkpoints":[{{"id":1,"sequence":{head},"digest":"{digest}","bytes":{},"created_at":""#,
        bytes.body.len()
    )), "{}", list.body);
    let r = s.post_empty("/checkpoints/1/restore");
    assert_eq!(
        r.body,
        format!(r#"{{"sequence":{head},"late":1,"watermark":10000}}"#)
    );
    let r = s.post("/restore", &bytes.body);
    assert_eq!(
        r.body,
        format!(r#"{{"sequence":{head},"late":1,"watermark":10000}}"#)
    );

    let m = s.get("/metrics");
    assert!(m.content_type.starts_with("text/plain"));
    for name in [
        "streamforge_deliveries_total",
        "streamforge_late_events_total",
        "streamforge_changes_total",
        "streamforge_request_duration_seconds_bucket",
        "streamforge_checkpoint_size_bytes_count",
    ] {
        assert!(m.body.contains(name), "{name} missing");
    }
    let o = s.get("/openapi.yaml");
    assert_eq!(o.status, 200);
    assert_eq!(o.body, include_str!("../../openapi.yaml"));
}

#[test]
fn every_error_code_leaves_state_unchanged() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    s.ok("/events", &ev("p0", 0, "a", "k", 5, 1));
    s.ok("/events", &ev("p1", 0, "b", "k", 5000, 2));
    for p in ["p0", "p1", "p2", "p3"] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":12000}}"#),
        );
    }
    s.ok("/events", &ev("p2", 0, "c", "k", 15_000, 3));
    let before = (s.snapshot(), s.all_changes(), s.all_late());
    assert!(!before.1.is_empty());
    let check = |what: &str| {
        assert_eq!(
            (s.snapshot(), s.all_changes(), s.all_late()),
            before,
            "state changed by {what}"
        );
    };
    let good = ev("p3", 0, "z", "k", 15_000, 1);
    let bad_requests: Vec<(&str, String)> = vec![
        ("not json", "hello".into()),
        ("empty body", "".into()),
        ("float", good.replace("15000", "15000.0")),
        ("exponent", good.replace("15000", "1.5e4")),
        ("string number", good.replace("15000", "\"15000\"")),
        ("bool", good.replace("15000", "true")),
        ("i64 overflow", good.replace("15000", "9223372036854775808")),
        (
            "unknown field",
            good.replace("\"partition\"", "\"x\":1,\"partition\""),
        ),
        (
            "unknown event field",
            good.replace("\"id\"", "\"extra\":1,\"id\""),
        ),
        ("missing field", r#"{"partition":"p3","offset":0}"#.into()),
        ("missing key", good.replace("\"key\":\"k\",", "")),
        ("empty id", good.replace("\"id\":\"z\"", "\"id\":\"\"")),
        (
            "null offset",
            good.replace("\"offset\":0", "\"offset\":null"),
        ),
        (
            "duplicate field",
            good.replace(
                "\"partition\":\"p3\"",
                "\"partition\":\"p3\",\"partition\":\"p3\"",
            ),
        ),
        ("trailing garbage", format!("{good} x")),
        ("json string", "\"x\"".into()),
    ];
    for (what, body) in &bad_requests {
        let r = s.post("/events", body);
        let v = r.problem(400, "bad_request");
        assert!(
            v.get("index").is_none(),
            "{what}: single-object errors carry no index: {}",
            r.body
        );
        check(what);
        let r = s.post("/events", &format!("[{good},{body}]"));
        if !body.is_empty() && *what != "trailing garbage" {
            let v = r.problem(400, "bad_request");
            assert_eq!(v["index"], 1, "{what}: {}", r.body);
        }
        check(what);
    }
    // Watermark bodies.
    for body in [
        r#"{"partition":"p0"}"#,
        r#"{"partition":"p0","watermark":1,"x":2}"#,
        r#"{"partition":"p0","watermark":1.5}"#,
        "[]",
        "",
    ] {
        s.post("/watermarks", body).problem(400, "bad_request");
        check(body);
    }
    // Conflicts.
    let r = s.post("/events", &ev("p0", 0, "a2", "k", 5, 1));
    r.problem(409, "offset_conflict");
    assert!(r.json().get("index").is_none());
    s.post("/events", &ev("p0", 5, "a3", "k", 5, 1))
        .problem(409, "offset_conflict");
    let r = s.post(
        "/events",
        &format!("[{good},{}]", ev("p3", 5, "gap", "k", 1, 1)),
    );
    assert_eq!(r.problem(409, "offset_conflict")["index"], 1);
    let r = s.post("/events", &ev("p3", 0, "a", "k", 5, 2));
    r.problem(409, "identity_conflict");
    let r = s.post(
        "/events",
        &format!("[{good},{}]", ev("p3", 1, "a", "other", 5, 1)),
    );
    assert_eq!(r.problem(409, "identity_conflict")["index"], 1);
    check("conflicts");
    // Unknown partition everywhere.
    s.post("/events", &ev("zz", 0, "q", "k", 1, 1))
        .problem(422, "unknown_partition");
    let r = s.post(
        "/events",
        &format!("[{good},{}]", ev("zz", 0, "q", "k", 1, 1)),
    );
    assert_eq!(r.problem(422, "unknown_partition")["index"], 1);
    s.post("/watermarks", r#"{"partition":"zz","watermark":1}"#)
        .problem(422, "unknown_partition");
    s.post_empty("/partitions/zz/idle")
        .problem(422, "unknown_partition");
    check("unknown partition");
    // invalid_request.
    s.post("/events", "[]").problem(422, "invalid_request");
    s.post_ndjson("/events", "").problem(422, "invalid_request");
    for q in [
        "limit=0",
        "limit=10001",
        "wait_ms=30001",
        "wait_ms=-1",
        "after=-1",
    ] {
        s.get(&format!("/changes?{q}"))
            .problem(422, "invalid_request");
        s.get(&format!("/late?{q}")).problem(422, "invalid_request");
    }
    for q in [
        "limit=x",
        "after=1.5",
        "wait_ms=",
        "after=99999999999999999999",
    ] {
        s.get(&format!("/changes?{q}")).problem(400, "bad_request");
        s.get(&format!("/late?{q}")).problem(400, "bad_request");
    }
    check("queries");
    // invalid_checkpoint.
    let c = s.post_empty("/checkpoints");
    assert_eq!(c.status, 201);
    let id = c.json()["id"].as_i64().unwrap();
    let env = s.get(&format!("/checkpoints/{id}")).body;
    let mut flipped = env.clone().into_bytes();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    let other_pipeline = env.replace("\"lateness\":1000", "\"lateness\":999");
    for (what, body) in [
        ("not json", "nope".to_string()),
        ("empty", String::new()),
        ("truncated", env[..env.len() - 10].to_string()),
        ("flipped", String::from_utf8_lossy(&flipped).into_owned()),
        ("version", env.replace("\"version\":2", "\"version\":3")),
        ("version 1", env.replace("\"version\":2", "\"version\":1")),
        ("pipeline", other_pipeline),
    ] {
        let r = s.post("/restore", &body);
        assert_eq!(r.status, 422, "{what}: {}", r.body);
        r.problem(422, "invalid_checkpoint");
    }
    check("invalid checkpoints");
    // not_found.
    s.get("/checkpoints/999").problem(404, "not_found");
    s.get("/checkpoints/abc").problem(404, "not_found");
    s.post_empty("/checkpoints/999/restore")
        .problem(404, "not_found");
    s.get("/nope").problem(404, "not_found");
    s.post("/events/extra", "{}").problem(404, "not_found");
    // docs/api.md names routes by method: GET /events is an unknown route
    s.get("/events").problem(404, "not_found");
    s.post_empty("/status").problem(404, "not_found");
    check("not found");
}

#[test]
fn batches_are_atomic_and_ndjson_works() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    let before = s.snapshot();
    // The third delivery conflicts: nothing of the batch is applied.
    let batch = format!(
        "[{},{},{}]",
        ev("p0", 0, "a", "k", 1, 1),
        ev("p0", 1, "b", "k", 2, 2),
        ev("p0", 1, "c", "k", 3, 3)
    );
    let r = s.post("/events", &batch);
    assert_eq!(r.problem(409, "offset_conflict")["index"], 2);
    assert_eq!(s.snapshot(), before);
    let nd = format!(
        "{}\r\n{}\n{}",
        ev("p0", 0, "a", "k", 1, 1),
        ev("p0", 1, "b", "k", 2, 2),
        ev("p0", 7, "c", "k", 3, 3)
    );
    assert_eq!(
        s.post_ndjson("/events", &nd)
            .problem(409, "offset_conflict")["index"],
        2
    );
    let nd_bad = format!(
        "{}\n{{\"partition\":\"p0\"}}\n",
        ev("p0", 0, "a", "k", 1, 1)
    );
    assert_eq!(
        s.post_ndjson("/events", &nd_bad)
            .problem(400, "bad_request")["index"],
        1
    );
    assert_eq!(s.snapshot(), before);
    // A one-element array is a batch: its errors carry index 0.
    let r = s.post("/events", &format!("[{}]", ev("zz", 0, "a", "k", 1, 1)));
    assert_eq!(r.problem(422, "unknown_partition")["index"], 0);
    // Applied in order, with the effect of separate calls (redelivery inside a batch is a no-op).
    let nd = format!(
        "{}\n{}\n{}",
        ev("p0", 0, "a", "k", 1, 1),
        ev("p0", 1, "b", "k", 2, 2),
        ev("p0", 1, "b", "k", 2, 2)
    );
    let r = s.post_ndjson("/events", &nd);
    assert_eq!(
        r.body,
        r#"{"changes":[],"late":[],"watermark":null,"offsets":{"p0":1}}"#
    );
}

#[test]
fn append_mode_makes_webhook_retries_safe() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    let e1 = delivery("p0", None, "w1", "k", 100, 5);
    let e2 = delivery("p0", None, "w2", "k", 200, 7);
    assert!(s.ok("/events", &e1).ends_with(r#""offsets":{"p0":0}}"#));
    // The webhook retries e1 (it never saw our answer), then sends e2.
    assert!(s.ok("/events", &e1).ends_with(r#""offsets":{"p0":1}}"#));
    assert!(s
        .ok("/events", &format!("[{e2},{e2}]"))
        .ends_with(r#""offsets":{"p0":3}}"#));
    for p in ["p0", "p1", "p2", "p3"] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":10000}}"#),
        );
    }
    let r = s.get("/results?window=fixed_10s&key=k");
    assert_eq!(
        r.body,
        r#"{"results":[{"window":"fixed_10s","key":"k","start":0,"end":10000,"count":2,"sum":12,"min":5,"max":7}],"watermark":10000,"sequence":6,"epoch":0}"#
    );
    // A retried advance changes nothing.
    let again = s.ok("/watermarks", r#"{"partition":"p3","watermark":10000}"#);
    assert_eq!(again, r#"{"changes":[],"watermark":10000,"finalized":[]}"#);
}

#[test]
fn integers_beyond_i64_are_written_exactly() {
    let dir = tempdir();
    let pipeline = dir.path().join("p.json");
    std::fs::write(
        &pipeline,
        r#"{"partitions":["a"],"windows":{"big":{"kind":"fixed","size":9223372036854775807},"small":{"kind":"fixed","size":10}},"lateness":0}"#,
    )
    .unwrap();
    let s = start(
        &dir.path().join("db"),
        &["--pipeline", pipeline.to_str().unwrap()],
    );
    let max = i64::MAX;
    s.ok(
        "/events",
        &format!(
            "[{},{},{}]",
            ev("a", 0, "x", "k", max, max),
            ev("a", 1, "y", "k", 1, max),
            ev("a", 2, "z", "k", 2, max)
        ),
    );
    let r = s.ok("/watermarks", r#"{"partition":"a","watermark":10}"#);
    let want = r#"{"window":"small","key":"k","start":0,"end":10,"count":2,"sum":18446744073709551614,"min":9223372036854775807,"max":9223372036854775807}"#;
    assert!(r.contains(want), "{r}");
    assert!(s.get("/changes").body.contains(want));
    assert_eq!(
        s.get("/results?window=small").body,
        format!(r#"{{"results":[{want}],"watermark":10,"sequence":1,"epoch":0}}"#)
    );
    // The "big" bucket [i64::MAX, 2 * i64::MAX) is live and round-trips exactly.
    assert_eq!(s.post_empty("/checkpoints").status, 201);
    let env = s.get("/checkpoints/1").body;
    assert!(env.contains("\"end\":18446744073709551614"), "{env}");
    assert_eq!(s.post("/restore", &env).status, 200);
}

#[test]
fn long_poll_returns_as_soon_as_a_change_exists() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    // Nothing arrives: the poll waits about wait_ms, then answers an empty page.
    let t = Instant::now();
    let r = s.get("/changes?after=0&wait_ms=300");
    assert_eq!(r.body, r#"{"changes":[],"next":0,"head":0,"epoch":0}"#);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );

    for (route, key) in [("/changes", "changes"), ("/late", "late")] {
        let head = s.get(route).json()["head"].as_u64().unwrap();
        let url = s.url(&format!("{route}?after={head}&wait_ms=20000"));
        let client = s.client.clone();
        let started = Instant::now();
        let poll = std::thread::spawn(move || client.get(url).send().unwrap().text().unwrap());
        wait_until("the poll to wait", DEADLINE, || {
            (s.metric("streamforge_waiters") >= 1.0).then_some(())
        });
        if key == "changes" {
            s.ok("/events", &ev("p0", 0, "a", "k", 1, 1));
            for p in ["p0", "p1", "p2", "p3"] {
                s.ok(
                    "/watermarks",
                    &format!(r#"{{"partition":"{p}","watermark":10000}}"#),
                );
            }
        } else {
            s.ok("/events", &ev("p0", 1, "late", "k", 1, 1));
        }
        let body = poll.join().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the poll was not woken"
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(!v[key].as_array().unwrap().is_empty(), "{body}");
        assert_eq!(v[key][0]["seq"], head + 1);
    }
}

/// Reads SSE events (id, data) until `stop` says so or the stream ends.
/// Ids are `<epoch>:<seq>`; the events are changes of epoch 0 (a rewind
/// or another epoch fails the test: `server::read_events` reads those).
fn read_sse(
    resp: reqwest::blocking::Response,
    mut stop: impl FnMut(u64) -> bool,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for ev in read_events(resp, |ev| {
        let (e, q) = ev.id.split_once(':').expect("id <epoch>:<seq>");
        assert_eq!((e, ev.event.as_str()), ("0", ""), "{ev:?}");
        stop(q.parse().unwrap())
    }) {
        out.push((ev.id.split_once(':').unwrap().1.parse().unwrap(), ev.data));
    }
    out
}

#[test]
fn sse_resumes_from_last_event_id_without_gap_or_repeat() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &["--token", "t0k"]);
    let ops = workload(7, 40);
    for op in &ops[..20] {
        assert_eq!(op.send(&s).status, 200);
    }
    let head1 = s.get("/status").json()["sequence"].as_u64().unwrap();
    assert!(head1 >= 4, "workload too small: {head1}");
    // First connection (token as query parameter, as EventSource does): read half.
    let half = head1 / 2;
    let resp = s
        .client
        .get(s.url("/changes/stream?after=0&access_token=t0k"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let first = read_sse(resp, |i| i >= half);
    // More changes happen while disconnected.
    for op in &ops[20..] {
        assert_eq!(op.send(&s).status, 200);
    }
    let head2 = s.get("/status").json()["sequence"].as_u64().unwrap();
    // Reconnect: Last-Event-ID wins over after=0.
    let resp = s
        .client
        .get(s.url("/changes/stream?after=0"))
        .bearer_auth("t0k")
        .header("Last-Event-ID", half.to_string())
        .send()
        .unwrap();
    let second = read_sse(resp, |i| i >= head2);
    let seqs: Vec<u64> = first.iter().chain(&second).map(|(i, _)| *i).collect();
    assert_eq!(seqs, (1..=head2).collect::<Vec<_>>());
    let datas: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|(_, d)| d.clone())
        .collect();
    let expect: Vec<String> = s.all_changes();
    let got: Vec<String> = datas
        .iter()
        .map(|d| {
            serde_json::from_str::<serde_json::Value>(d)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(got, expect);

    // A restore while the stream is open: the stream says `rewind` (to the
    // checkpoint's sequence, in epoch 1) and goes on in the new epoch.
    let c = s.post_empty("/checkpoints").json();
    assert_eq!(c["sequence"], head2);
    let resp = s
        .client
        .get(s.url(&format!("/changes/stream?after={head2}")))
        .bearer_auth("t0k")
        .send()
        .unwrap();
    let restorer = {
        let client = s.client.clone();
        let url = s.url("/checkpoints/1/restore");
        std::thread::spawn(move || {
            // Restore once the stream is open (waiters >= 1).
            let base = url.replace("/checkpoints/1/restore", "");
            wait_until("stream open", DEADLINE, || {
                let m = client
                    .get(format!("{base}/metrics"))
                    .bearer_auth("t0k")
                    .send()
                    .ok()?
                    .text()
                    .ok()?;
                m.lines()
                    .any(|l| l.starts_with("streamforge_waiters ") && !l.ends_with(" 0"))
                    .then_some(())
            });
            client
                .post(url)
                .bearer_auth("t0k")
                .send()
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let rewind = read_events(resp, |_| true);
    assert_eq!(restorer.join().unwrap(), 200);
    assert_eq!(rewind.len(), 1);
    assert_eq!(rewind[0].event, "rewind");
    assert_eq!(rewind[0].id, format!("1:{head2}"));
    assert_eq!(rewind[0].data, format!(r#"{{"epoch":1,"after":{head2}}}"#));

    // Reconnecting beyond the head of the current epoch continues from the head.
    let resp = s
        .client
        .get(s.url("/changes/stream"))
        .bearer_auth("t0k")
        .header("Last-Event-ID", format!("1:{}", head2 + 100))
        .send()
        .unwrap();
    let st = s.get("/status").json();
    assert_eq!(st["epoch"], 1);
    let w = st["watermark"].as_i64().unwrap();
    let off = st["partitions"]["p0"]["offset"].as_i64().unwrap() + 1;
    s.ok("/events", &ev("p0", off, "after-restore", "zz", w + 1, 1));
    for p in ["p0", "p1", "p2", "p3"] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":{}}}"#, w + 100_000),
        );
    }
    let got = read_events(resp, |_| true);
    assert_eq!(got[0].id, format!("1:{}", head2 + 1), "{got:?}");
    assert_eq!(got[0].event, "");
}

#[test]
fn restore_by_id_and_by_body_cut_history_and_continue_identically() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    let ops = workload(11, 60);
    for op in &ops[..30] {
        assert_eq!(op.send(&s).status, 200);
    }
    let ck = s.post_empty("/checkpoints").json();
    let id = ck["id"].as_i64().unwrap();
    let seq = ck["sequence"].as_u64().unwrap();
    let env = s.get(&format!("/checkpoints/{id}")).body;
    let changes_at_ck = s.all_changes();
    let late_at_ck = s.all_late();
    let snap_at_ck = s.snapshot();
    for op in &ops[30..] {
        assert_eq!(op.send(&s).status, 200);
    }
    let full_changes = s.all_changes();
    let full_late = s.all_late();
    let full_snap = s.snapshot();
    assert!(full_changes.len() > changes_at_ck.len());

    for how in ["id", "body"] {
        let r = match how {
            "id" => s.post_empty(&format!("/checkpoints/{id}/restore")),
            _ => s.post("/restore", &env),
        };
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["sequence"], seq);
        assert_eq!(s.all_changes(), changes_at_ck, "{how}: changelog cut back");
        assert_eq!(
            s.all_late(),
            late_at_ck,
            "{how}: late pages are the checkpoint's"
        );
        assert_eq!(s.snapshot(), snap_at_ck);
        assert_eq!(s.get("/changes").json()["head"], seq);
        for op in &ops[30..] {
            assert_eq!(op.send(&s).status, 200);
        }
        assert_eq!(
            s.all_changes(),
            full_changes,
            "{how}: continues identically"
        );
        assert_eq!(s.all_late(), full_late);
        assert_eq!(s.snapshot(), full_snap);
    }
    // Stored checkpoints are never deleted by a restore.
    assert_eq!(
        s.get("/checkpoints").json()["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A fresh process on a new database continues identically.
    let fresh = start(&dir.path().join("fresh.db"), &[]);
    let r = fresh.post("/restore", &env);
    assert_eq!(r.status, 200, "{}", r.body);
    let c = fresh.get("/changes");
    assert_eq!(
        c.body,
        format!(r#"{{"changes":[],"next":0,"head":{seq},"epoch":1}}"#)
    );
    assert_eq!(fresh.all_late(), late_at_ck);
    for op in &ops[30..] {
        assert_eq!(op.send(&fresh).status, 200);
    }
    assert_eq!(
        fresh.all_changes(),
        full_changes[changes_at_ck.len()..].to_vec()
    );
    assert_eq!(fresh.all_late(), full_late);
    assert_eq!(fresh.snapshot(), full_snap);
}

#[test]
fn auth_cors_and_body_limit() {
    let dir = tempdir();
    let s = start(
        &dir.path().join("db"),
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
    for path in [
        "/status",
        "/changes",
        "/results",
        "/metrics",
        "/checkpoints",
        "/pipeline",
        "/changes/stream",
        "/nope",
    ] {
        let r = anon.get(s.url(path)).send().unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let v: serde_json::Value = r.json().unwrap();
        assert_eq!(v["code"], "unauthorized");
    }
    let r = anon
        .get(s.url("/status"))
        .bearer_auth("wrong")
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = anon.post(s.url("/events")).body("{}").send().unwrap();
    assert_eq!(r.status(), 401);
    for path in ["/healthz", "/readyz", "/openapi.yaml"] {
        assert_eq!(
            anon.get(s.url(path)).send().unwrap().status(),
            200,
            "{path}"
        );
    }
    // The query token is only for the stream.
    assert_eq!(
        anon.get(s.url("/status?access_token=sekret"))
            .send()
            .unwrap()
            .status(),
        401
    );
    let r = anon
        .get(s.url("/changes/stream?access_token=sekret"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(r);
    assert_eq!(s.get("/status").status, 200);

    // CORS preflight for the configured origin, none for others.
    let r = anon
        .request(reqwest::Method::OPTIONS, s.url("/changes"))
        .header("Origin", "http://dash.example")
        .header("Access-Control-Request-Method", "GET")
        .header("Access-Control-Request-Headers", "authorization")
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://dash.example"
    );
    assert!(r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("authorization"));
    // A browser can make keyed pattern pushes and put a pattern document.
    let r = anon
        .request(reqwest::Method::OPTIONS, s.url("/patterns"))
        .header("Origin", "http://dash.example")
        .header("Access-Control-Request-Method", "PUT")
        .header(
            "Access-Control-Request-Headers",
            "idempotency-key,content-type",
        )
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let allowed = |h: &str| r.headers()[h].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed("access-control-allow-methods").contains("put"));
    assert!(allowed("access-control-allow-headers").contains("idempotency-key"));
    let r = s
        .client
        .get(s.url("/changes"))
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
        .get(s.url("/changes"))
        .bearer_auth("sekret")
        .header("Origin", "http://evil.example")
        .send()
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // 413 as problem+json, state unchanged.
    let before = s.snapshot();
    let big = format!("[{}]", vec![ev("p0", 0, "a", "k", 1, 1); 40].join(","));
    assert!(big.len() > 2000);
    s.post("/events", &big).problem(413, "payload_too_large");
    s.post("/restore", &"x".repeat(5000))
        .problem(413, "payload_too_large");
    assert_eq!(s.snapshot(), before);
    s.ok("/events", &ev("p0", 0, "a", "k", 1, 1));
}

#[test]
fn openapi_documents_every_served_route() {
    let yaml = include_str!("../../openapi.yaml");
    let lines: Vec<&str> = yaml.lines().collect();
    for (method, path) in streamforge::api::ROUTES {
        let at = lines
            .iter()
            .position(|l| *l == format!("  {path}:"))
            .unwrap_or_else(|| panic!("{path} is not in openapi.yaml"));
        let block: Vec<&&str> = lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("    ") || l.is_empty())
            .collect();
        assert!(
            block.iter().any(|l| **l == format!("    {method}:")),
            "{method} {path} is not in openapi.yaml"
        );
    }
    // And the router serves each of them (no "no such route" 404).
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    for (method, path) in streamforge::api::ROUTES {
        let path = path.replace("{partition}", "p0").replace("{id}", "1");
        if path.ends_with("/stream") {
            continue;
        }
        let r = match *method {
            "get" => s.get(&path),
            "delete" => s.delete(&path),
            "put" => s.put(&path, "{}"),
            _ => s.post_empty(&path),
        };
        assert!(
            !(r.status == 404 && r.body.contains("no") && r.body.contains("route")),
            "{method} {path}: {} {}",
            r.status,
            r.body
        );
    }
}

/// The other direction: every `.route(PATH, METHOD(..).METHOD(..))` of the
/// router (read from its source) is in `ROUTES`, so a route added to the
/// router without its line there fails here (and the test above then asks
/// for its openapi.yaml entry).
#[test]
fn every_route_of_the_router_is_in_routes() {
    let src = include_str!("../../src/api/mod.rs");
    let mut served = std::collections::BTreeSet::new();
    for (at, _) in src.match_indices(".route(") {
        // a call starts its line (comments that name `.route(..)` do not)
        let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
        if !src[line_start..at].trim().is_empty() {
            continue;
        }
        // the call's text, to its closing parenthesis
        let rest = &src[at + ".route(".len()..];
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map(|(i, _)| i)
            .expect("a closed .route( call");
        let call = &rest[..end];
        let path = call.split('"').nth(1).expect("a path literal");
        let methods: Vec<&str> = ["get", "post", "put", "delete", "patch"]
            .into_iter()
            .filter(|m| {
                call.match_indices(&format!("{m}(")).any(|(i, _)| {
                    i == 0
                        || !call.as_bytes()[i - 1].is_ascii_alphanumeric()
                            && call.as_bytes()[i - 1] != b'_'
                })
            })
            .collect();
        assert!(!methods.is_empty(), ".route({call}): no method found");
        for m in methods {
            served.insert((m.to_string(), path.to_string()));
        }
    }
    let listed: std::collections::BTreeSet<(String, String)> = streamforge::api::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert!(
        served.len() >= 30,
        "the router's routes were not found: {served:?}"
    );
    let missing: Vec<_> = served.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "served but not in api::ROUTES: {missing:?}"
    );
    let extra: Vec<_> = listed.difference(&served).collect();
    assert!(extra.is_empty(), "in api::ROUTES but not routed: {extra:?}");
}

/// The changelog pages carry exactly the bytes the mutating calls answered
/// (the store keeps binary chunks and renders them back to JSON): every
/// change of a multi-partition, multi-window workload, paged with a limit
/// that cuts across chunks, before and after a restart.
#[test]
fn changes_pages_carry_the_bytes_the_answers_carried() {
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        changes: Vec<&'a serde_json::value::RawValue>,
    }
    let dir = tempdir();
    let db = dir.path().join("db");
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    let mut answered: Vec<String> = Vec::new();
    for op in workload(33, 300) {
        let r = op.send(&s);
        assert_eq!(r.status, 200, "{}", r.body);
        let a: Answer<'_> = serde_json::from_str(&r.body).unwrap();
        answered.extend(a.changes.iter().map(|c| c.get().to_string()));
    }
    assert!(answered.len() > 100, "{}", answered.len());
    let pages = |s: &Server| {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let r = s.get(&format!("/changes?after={after}&limit=7"));
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            let a: Answer<'_> = serde_json::from_str(&r.body).unwrap();
            if a.changes.is_empty() {
                return out;
            }
            out.extend(a.changes.iter().map(|c| c.get().to_string()));
            after = v["next"].as_u64().unwrap();
        }
    };
    assert_eq!(pages(&s), answered);
    s.kill();
    let s = start(&db, &[]);
    assert_eq!(pages(&s), answered);
}

/// `Prefer: return=minimal` (RFC 7240) on the three mutating routes: the
/// answer carries counts, offsets and the watermark instead of the records,
/// says `Preference-Applied`, and the state is exactly what full answers give.
#[test]
fn prefer_return_minimal_answers_counts_and_changes_nothing_else() {
    let dir = tempdir();
    let (full, minimal) = (
        start(&dir.path().join("full"), &[]),
        start(&dir.path().join("minimal"), &[]),
    );
    let ops = workload(9, 120);
    let (mut changes, mut late, mut finalized) = (0u64, 0u64, 0u64);
    for op in &ops {
        let want = op.send(&full);
        assert_eq!(want.status, 200, "{}", want.body);
        let w = want.json();
        let rb = match op {
            Op::Batch(b) => minimal
                .client
                .post(minimal.url("/events"))
                .header("content-type", "application/json")
                .body(b.clone()),
            Op::Advance(b) => minimal
                .client
                .post(minimal.url("/watermarks"))
                .body(b.clone()),
            Op::Idle(p) => minimal
                .client
                .post(minimal.url(&format!("/partitions/{p}/idle"))),
        };
        let r = rb.header("prefer", "return=minimal").send().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["preference-applied"], "return=minimal");
        let got: serde_json::Value = r.json().unwrap();
        let n = |k: &str| w[k].as_array().map_or(0, |a| a.len() as u64);
        assert_eq!(got["changes"], n("changes"), "{got} vs {w}");
        assert_eq!(got["watermark"], w["watermark"]);
        changes += n("changes");
        if let Op::Batch(_) = op {
            assert_eq!(got["late"], n("late"));
            assert_eq!(got["offsets"], w["offsets"]);
            late += n("late");
        } else {
            assert_eq!(got["finalized"], n("finalized"));
            finalized += n("finalized");
        }
    }
    assert!(
        changes > 10 && late > 0 && finalized > 0,
        "{changes} {late} {finalized}"
    );
    assert_eq!(minimal.snapshot(), full.snapshot());
    assert_eq!(minimal.all_changes(), full.all_changes());
    assert_eq!(minimal.all_late(), full.all_late());
    // Without the preference, the full answer (and no Preference-Applied).
    let r = minimal.post_empty("/partitions/p0/idle");
    assert!(r.body.starts_with(r#"{"changes":["#), "{}", r.body);
    assert!(r.headers.get("preference-applied").is_none());
}
