//! Malformed and mutated requests on every route: never a 5xx, never a
//! crash, always problem+json with a code of docs/api.md's table, and a rejected
//! call changes nothing. The server is then restarted on its database and
//! must come back with exactly the same state (every acknowledged call was
//! stored and replays).

use crate::support::server;

use server::*;

const CODES: &[(u16, &str)] = &[
    (400, "bad_request"),
    (404, "not_found"),
    (409, "offset_conflict"),
    (409, "identity_conflict"),
    (413, "payload_too_large"),
    (422, "unknown_partition"),
    (422, "invalid_checkpoint"),
    (422, "invalid_request"),
];

const TOKENS: &[&str] = &[
    "null",
    "true",
    "1.5",
    "1e999",
    "-0",
    "\"\"",
    "\"p0\"",
    "[]",
    "{}",
    "9223372036854775808",
    "-9223372036854775809",
    "170141183460469231731687303715884105728",
    "\"\\u0000\"",
    "\"é😀\"",
    "\"\\ud800\"",
    ",",
    ":",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    "\n",
    " ",
    "0",
    "-1",
];

fn mutate(rng: &mut Rng, s: &str) -> String {
    mutate_with(rng, s, TOKENS)
}

/// Percent-encodes every byte but letters, digits and `keep`.
fn encode(s: &str, keep: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || keep.as_bytes().contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn check(r: &Resp, what: &str) {
    assert!(r.status < 500, "{what}: {} {}", r.status, r.body);
    if r.status >= 400 {
        assert_eq!(
            r.content_type, "application/problem+json",
            "{what}: {}",
            r.body
        );
        let v = r.json();
        let code = v["code"].as_str().unwrap_or("");
        assert!(
            CODES.contains(&(r.status, code)),
            "{what}: status {} with code {code:?}: {}",
            r.status,
            r.body
        );
        assert!(
            !v["detail"].as_str().unwrap_or("").is_empty(),
            "{what}: {}",
            r.body
        );
    } else {
        assert!(
            matches!(r.status, 200 | 201),
            "{what}: {} {}",
            r.status,
            r.body
        );
    }
}

#[test]
fn mutated_requests_never_fail_the_server_and_change_nothing_when_rejected() {
    let dir = tempdir();
    let pipeline = dir.path().join("pipeline.json");
    std::fs::write(
        &pipeline,
        r#"{"partitions":["p0","p1"],"windows":{"f":{"kind":"fixed","size":10},"h":{"kind":"sliding","size":10,"step":4},"s":{"kind":"session","gap":3}},"lateness":2}"#,
    )
    .unwrap();
    let db = dir.path().join("fuzz.db");
    let p = pipeline.to_str().unwrap();
    let mut s = start(&db, &["--pipeline", p, "--max-body-bytes", "65536"]);
    let mut rng = Rng(0x5eed);
    let mut offsets = [0i64; 2];
    let mut checkpoint = String::new();
    let (mut rejected, mut accepted) = (0u32, 0u32);
    for step in 0..1500u64 {
        // keep some valid traffic flowing so there is state to protect
        let part = rng.below(2) as usize;
        let valid = format!(
            r#"{{"partition":"p{part}","offset":{},"event":{{"id":"e{step}","key":"k{}","timestamp":{},"value":{}}}}}"#,
            offsets[part],
            rng.below(3),
            rng.below(60) as i64 - 5,
            rng.below(21) as i64 - 10
        );
        if rng.below(4) == 0 {
            let r = s.post("/events", &valid);
            check(&r, "valid delivery");
            if r.status == 200 {
                offsets[part] += 1;
                accepted += 1;
            }
            continue;
        }
        if step % 97 == 0 {
            let w = format!(r#"{{"partition":"p{part}","watermark":{}}}"#, step / 30);
            check(&s.post("/watermarks", &w), "valid watermark");
            let r = s.post_empty("/checkpoints");
            check(&r, "checkpoint");
            let id = r.json()["id"].as_i64().unwrap();
            checkpoint = s.get(&format!("/checkpoints/{id}")).body;
            continue;
        }
        let before = s.snapshot();
        // Arrays where objects belong (a derived struct would take them as
        // its fields in order): always 400, never applied.
        if rng.below(12) == 0 {
            let off = offsets[part];
            let ev = format!(r#"{{"id":"arr{step}","key":"k","timestamp":1,"value":1}}"#);
            let before = s.snapshot();
            let r = match rng.below(4) {
                0 => s.post(
                    "/watermarks",
                    &format!(r#"["p{part}",{}]"#, step / 30 + 1000),
                ),
                1 => s.post(
                    "/events",
                    &format!(
                        r#"{{"partition":"p{part}","offset":{off},"event":["arr{step}","k",1,1]}}"#
                    ),
                ),
                2 => s.post("/events", &format!(r#"[["p{part}",{off},{ev}]]"#)),
                _ => s.post_ndjson("/events", &format!("[\"p{part}\",{off},{ev}]\n")),
            };
            check(&r, &format!("step {step} (array)"));
            r.problem(400, "bad_request");
            assert_eq!(s.snapshot(), before);
            rejected += 1;
            continue;
        }
        let r = match rng.below(9) {
            0 => s.post("/events", &mutate(&mut rng, &valid)),
            1 => s.post("/events", &mutate(&mut rng, &format!("[{valid},{valid}]"))),
            2 => s.post_ndjson("/events", &mutate(&mut rng, &format!("{valid}\n{valid}\n"))),
            3 => s.post(
                "/watermarks",
                &mutate(
                    &mut rng,
                    &format!(r#"{{"partition":"p{part}","watermark":{step}}}"#),
                ),
            ),
            4 => s.post_empty(&format!(
                "/{}",
                encode(&mutate(&mut rng, "partitions/p1/idle"), "/-_.")
            )),
            5 => s.post("/restore", &mutate(&mut rng, &checkpoint)),
            6 => {
                let q = encode(&mutate(&mut rng, "after=1&limit=5&wait_ms=0"), "=&-_.");
                // a valid but long wait_ms would only slow the test down
                let q = if q.contains("wait_ms=") {
                    q.replace("wait_ms=", "wait_ms=0")
                } else {
                    q
                };
                s.get(&format!(
                    "/{}?{q}",
                    if rng.below(2) == 0 { "changes" } else { "late" }
                ))
            }
            7 => s.get(&format!(
                "/results?{}",
                encode(&mutate(&mut rng, "window=f&key=k1"), "=&-_.")
            )),
            _ => s.post("/events", &mutate(&mut rng, "")),
        };
        check(&r, &format!("step {step}"));
        if r.status >= 400 {
            rejected += 1;
            assert_eq!(
                s.snapshot(),
                before,
                "step {step}: a rejected call changed state: {}",
                r.body
            );
        } else if r.status == 200 && r.body.starts_with(r#"{"sequence""#) {
            // a mutated checkpoint that still restores (e.g. whitespace):
            // offsets follow the restored state
            let st = s.get("/status").json();
            for (i, o) in offsets.iter_mut().enumerate() {
                *o = st["partitions"][format!("p{i}")]["offset"]
                    .as_i64()
                    .unwrap()
                    + 1;
            }
        } else if r.status == 200 && r.body.contains(r#""offsets""#) {
            let st = s.get("/status").json();
            for (i, o) in offsets.iter_mut().enumerate() {
                *o = st["partitions"][format!("p{i}")]["offset"]
                    .as_i64()
                    .unwrap()
                    + 1;
            }
        }
    }
    assert!(
        rejected > 500 && accepted > 200,
        "rejected {rejected}, accepted {accepted}"
    );
    assert!(s.get("/status").json()["sequence"].as_u64().unwrap() > 0);
    assert_eq!(s.get("/healthz").status, 200);
    let state = s.snapshot();
    let changes = s.all_changes();
    s.kill();
    let s = start(&db, &["--pipeline", p]);
    assert_eq!(s.snapshot(), state, "state after restart");
    assert_eq!(s.all_changes(), changes, "changelog after restart");
}
