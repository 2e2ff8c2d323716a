//! Error texts a person reads, and the request forms a newcomer tries:
//! each rejection says what is wrong in the user's terms (never a Rust type
//! name), names the field, the limit or the flag, and changes nothing.

use crate::support::server;

use server::*;

fn delivery_json(offset: &str, ts: &str) -> String {
    format!(
        r#"{{"partition":"p0","offset":{offset},"event":{{"id":"e","key":"k","timestamp":{ts},"value":1}}}}"#
    )
}

fn detail(r: &Resp, status: u16, code: &str) -> String {
    r.problem(status, code)["detail"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn rejections_say_what_is_wrong_in_the_users_terms() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &["--max-body-bytes", "2000"]);
    let before = s.snapshot();

    // An integer beyond 64 bits, a fraction, a string.
    let d = detail(
        &s.post(
            "/events",
            &delivery_json("0", "123000000000000000000000000000"),
        ),
        400,
        "bad_request",
    );
    assert!(
        d.contains("`timestamp` is about 1.23e29, outside the signed 64-bit integer range"),
        "{d}"
    );
    let d = detail(
        &s.post("/events", &delivery_json("0", "1.5")),
        400,
        "bad_request",
    );
    assert!(
        d.contains("`timestamp` must be an integer (no fraction or exponent), got 1.5"),
        "{d}"
    );
    let d = detail(
        &s.post("/watermarks", r#"{"partition":"p0","watermark":"5"}"#),
        400,
        "bad_request",
    );
    assert!(
        d.contains("`watermark` must be an integer, got string \"5\""),
        "{d}"
    );

    // A negative offset is a conflict that says so.
    let d = detail(
        &s.post("/events", &delivery_json("-1", "5")),
        409,
        "offset_conflict",
    );
    assert!(d.contains("offset -1 is negative"), "{d}");

    // null, a number, an array: what was expected, never a type name.
    for body in [
        "null",
        "7",
        r#"["p0",0,{"id":"e","key":"k","timestamp":1,"value":1}]"#,
    ] {
        let r = s.post("/events", body);
        let d = r.problem(400, "bad_request")["detail"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(d.contains("a delivery object"), "{body}: {d}");
        assert!(!d.contains("Delivery"), "{body}: {d}");
    }
    let d = detail(&s.post("/watermarks", r#"["p0",100]"#), 400, "bad_request");
    assert!(d.contains("expected a watermark object"), "{d}");
    let d = detail(
        &s.post(
            "/events",
            r#"{"partition":"p0","offset":0,"event":["e","k",1,1]}"#,
        ),
        400,
        "bad_request",
    );
    assert!(d.contains("`event` must be an event object"), "{d}");

    // NDJSON: one line number (the body's), with the column.
    let nd = format!(
        "{}\n{{\"partition\":\"p0\",\"offset\":1,\"event\":{{\"id\":\"f\",\"key\":\"k\",\"timestamp\":x}}}}\n",
        delivery_json("0", "5")
    );
    let r = s.post_ndjson("/events", &nd);
    assert_eq!(r.json()["index"], 1);
    let d = detail(&r, 400, "bad_request");
    assert!(d.starts_with("line 2, column "), "{d}");
    assert_eq!(d.matches("line").count(), 1, "{d}");

    // NDJSON sent as JSON: the hint names the NDJSON content types.
    let two = format!("{}\n{}\n", delivery_json("0", "5"), delivery_json("1", "6"));
    let d = detail(&s.post("/events", &two), 400, "bad_request");
    assert!(d.contains("more than one JSON value"), "{d}");
    assert!(d.contains("application/x-ndjson"), "{d}");

    // 413 names the limit and the flag.
    let big = format!("[{}]", vec![delivery_json("0", "5"); 40].join(","));
    let d = detail(&s.post("/events", &big), 413, "payload_too_large");
    assert!(
        d.contains("2000 bytes") && d.contains("--max-body-bytes"),
        "{d}"
    );

    assert_eq!(s.snapshot(), before, "nothing was applied");
}

/// `-0` has no fraction and no exponent: it is the integer 0 wherever a
/// request carries an integer (offset, timestamp, value, watermarks of both
/// engines); `-0.0` and `-0e0` are fractions and are refused.
#[test]
fn minus_zero_is_the_integer_zero_in_every_request() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    let zero = |v: &str| {
        format!(
            r#"{{"partition":"p0","offset":{v},"event":{{"id":"e","key":"k","timestamp":{v},"value":{v}}}}}"#
        )
    };
    for bad in ["-0.0", "-0e0", "-0E-1"] {
        let r = s.post("/events", &zero(bad));
        assert!(detail(&r, 400, "bad_request").contains("must be an integer"));
        let r = s.post(
            "/watermarks",
            &format!(r#"{{"partition":"p0","watermark":{bad}}}"#),
        );
        detail(&r, 400, "bad_request");
        detail(
            &s.post("/patterns/advance", &format!(r#"{{"watermark":{bad}}}"#)),
            400,
            "bad_request",
        );
    }
    let fresh = s.snapshot();
    let first = s.ok("/events", &zero("-0"));
    assert!(first.contains(r#""offsets":{"p0":0}"#), "{first}");
    // the same delivery written with 0: an identical redelivery, a no-op
    let again = s.ok("/events", &zero("0"));
    assert!(again.contains(r#""changes":[]"#), "{again}");
    let status = s.get("/status").json();
    assert_eq!(status["partitions"]["p0"]["offset"], 0);
    s.ok("/watermarks", r#"{"partition":"p0","watermark":-0}"#);
    let status = s.get("/status").json();
    assert_eq!(status["partitions"]["p0"]["progress"], 0);
    assert_ne!(s.snapshot(), fresh);
    // the pattern engine's watermark, and its event time
    s.ok(
        "/patterns/events",
        r#"{"id":"x","key":"k","kind":"login","time":-0}"#,
    );
    let adv = s.ok("/patterns/advance", r#"{"watermark":-0}"#);
    assert!(adv.contains(r#""watermark":0"#), "{adv}");
    let st = s.get("/patterns/status").json();
    assert_eq!(
        (st["watermark"].as_i64(), st["buffered"].as_i64()),
        (Some(0), Some(0))
    );
}

#[test]
fn common_ndjson_types_lower_case_bearer_and_dashboard_server_urls() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &["--token", "t"]);
    let nd = |i: i64| {
        format!(
            "{}\n{}\n",
            delivery_json(&(2 * i).to_string(), "5").replace("\"e\"", &format!("\"a{i}\"")),
            delivery_json(&(2 * i + 1).to_string(), "6").replace("\"e\"", &format!("\"b{i}\""))
        )
    };
    for (i, ct) in [
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl; charset=utf-8",
        "Application/JSONLines",
    ]
    .iter()
    .enumerate()
    {
        let r = s
            .client
            .post(s.url("/events"))
            .header("content-type", *ct)
            .header("authorization", "bearer t")
            .body(nd(i as i64))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().unwrap();
        assert_eq!(status, 200, "{ct}: {body}");
        assert!(
            body.ends_with(&format!(r#""offsets":{{"p0":{}}}}}"#, 2 * i + 1)),
            "{body}"
        );
    }
    for auth in ["BEARER t", "Bearer  t", "bearer t "] {
        let r = s
            .client
            .get(s.url("/status"))
            .header("authorization", auth)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{auth}");
    }
    for auth in ["Bearer x", "Basic t", "bearert"] {
        let r = s
            .client
            .get(s.url("/status"))
            .header("authorization", auth)
            .send()
            .unwrap();
        assert_eq!(r.status(), 401, "{auth}");
    }
    // The dashboard takes an http(s) URL as ?server=, nothing else: one
    // that starts with http:// or https:// as written (openapi.yaml's
    // pattern) and that a browser reads as a URL with a host (WHATWG, so
    // an internationalized host is fine; RFC 3986 `format: uri` is not
    // what the page uses).
    let page = |q: &str| s.client.get(s.url(&format!("/{q}"))).send().unwrap();
    for good in [
        "?server=http%3A%2F%2F127.0.0.1%3A9",
        "?server=https%3A%2F%2Fb%C3%BCcher.example%2Fapi",
        "",
    ] {
        assert_eq!(page(good).status(), 200, "{good}");
    }
    for bad in [
        "?server=not%20a%20url",
        "?server=not-a-uri",
        "?server=javascript%3Aalert(1)",
        "?server=",
        "?server=HTTP%3A%2F%2F127.0.0.1%3A9",
        "?server=%20http%3A%2F%2F127.0.0.1%3A9",
        "?server=http%3A%2F%2F",
    ] {
        let r = page(bad);
        assert_eq!(r.status(), 400, "{bad}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let v: serde_json::Value = r.json().unwrap();
        assert_eq!(v["code"], "bad_request", "{bad}");
    }
}

#[test]
fn metrics_show_the_watermark_and_each_partitions_progress() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &[]);
    let m = s.get("/metrics").body;
    assert!(
        m.contains("streamforge_partition_offset{partition=\"p0\"} -1"),
        "{m}"
    );
    assert!(
        m.contains("streamforge_partition_idle{partition=\"p3\"} 0"),
        "{m}"
    );
    assert!(!m.contains("streamforge_partition_progress{"), "{m}");
    assert!(
        !m.lines().any(|l| l.starts_with("streamforge_watermark ")),
        "{m}"
    );
    s.ok("/events", &delivery_json("0", "5"));
    for (p, w) in [("p0", 100), ("p1", 70), ("p2", 90)] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":{w}}}"#),
        );
    }
    assert_eq!(s.post_empty("/partitions/p3/idle").status, 200);
    let m = s.get("/metrics").body;
    for line in [
        "streamforge_watermark 70",
        "streamforge_epoch 0",
        "streamforge_partition_offset{partition=\"p0\"} 0",
        "streamforge_partition_progress{partition=\"p1\"} 70",
        "streamforge_partition_idle{partition=\"p3\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} missing:\n{m}");
    }
}

#[test]
fn access_log_lines_carry_no_token_and_no_colours() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempdir();
    let log = dir.path().join("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--token",
            "sekret-token",
            "--db",
        ])
        .arg(dir.path().join("db"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = lines.next().unwrap().unwrap();
    let base = format!("http://{}", addr.trim_start_matches("listening on "));
    assert!(lines.next().unwrap().unwrap().starts_with("ready: "));
    let c = Client::new();
    let r = c
        .post(format!("{base}/watermarks?access_token=sekret-token"))
        .header("authorization", "Bearer sekret-token")
        .body(r#"{"partition":"p0","watermark":123456789}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(format!("{base}/status")).send().unwrap();
    assert_eq!(r.status(), 401);
    let text = wait_until("two access lines", DEADLINE, || {
        let t = std::fs::read_to_string(&log).unwrap();
        (t.matches("streamforge::access").count() >= 2).then_some(t)
    });
    let _ = child.kill();
    let _ = child.wait();
    let access: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("streamforge::access"))
        .collect();
    assert!(
        access[0].contains("method=POST")
            && access[0].contains("path=/watermarks")
            && access[0].contains("status=200")
            && access[0].contains("ms="),
        "{access:?}"
    );
    assert!(access[1].contains("path=/status") && access[1].contains("status=401"));
    assert!(!text.contains("sekret"), "the token leaked: {text}");
    assert!(!text.contains("123456789"), "a body leaked: {text}");
    assert!(!text.contains('\u{1b}'), "colours in a log file: {text:?}");
}
