//! Inbound webhook sources against the real binary (`POST /ingest/{source}`,
//! docs/webhooks.md): payloads signed exactly as Stripe, GitHub and a
//! Standard Webhooks sender sign them give the results of the same events
//! sent through `POST /events` and the watermark advances the sources
//! derive; redeliveries are duplicates; bad signatures are refused and
//! counted, and leave nothing behind; payloads that do not fit the mapping
//! are kept on the rejected page; derived watermarks and idleness close
//! windows without a watermark client, and survive SIGKILL, restarts and
//! restores; signed sources need no bearer token; pattern sources push once;
//! mistakes in the pipeline are refused with their JSON path; secrets never
//! show.

use crate::support::server::client::{client, run};
use crate::support::server::*;

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// 2026-01-01T00:00:00Z in Unix seconds (a multiple of 60).
const T0: i64 = 1_767_225_600;
/// The same in milliseconds: the sources' time unit.
const T0_MS: i64 = T0 * 1000;

/// The Stripe endpoint's signing secret, used as-is (`whsec_` included).
const STRIPE_SECRET: &str = "whsec_stripe3f9a61c0d24e8b7705aa";
/// The GitHub webhook's secret (any text).
const GITHUB_SECRET: &str = "gh-hook-2c7e41b9f0d3";
/// A Standard Webhooks secret: `whsec_` then base64 of the key bytes (the
/// example secret of the specification).
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The environment the servers read their secrets from.
const SECRETS: [(&str, &str); 3] = [
    ("STRIPE_WEBHOOK_SECRET", STRIPE_SECRET),
    ("GITHUB_WEBHOOK_SECRET", GITHUB_SECRET),
    ("INVOICES_WEBHOOK_SECRET", SW_SECRET),
];

// ---------------------------------------------------------------------------
// Signing, as each producer does.

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `Stripe-Signature: t=<t>,v1=<hex HMAC(secret text, "{t}.{body}")>`.
fn stripe_signature(secret: &str, t: i64, body: &[u8]) -> String {
    let sig = mac(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body]);
    format!("t={t},v1={}", hex(&sig))
}

/// `X-Hub-Signature-256: sha256=<hex HMAC(secret, body)>`.
fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex(&mac(secret.as_bytes(), &[body])))
}

/// `webhook-signature: v1,<base64 HMAC(base64decode(secret minus whsec_),
/// "{id}.{ts}.{body}")>`.
fn standard_signature(secret: &str, id: &str, ts: i64, body: &[u8]) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
        .expect("a base64 secret");
    let sig = mac(
        &key,
        &[id.as_bytes(), b".", ts.to_string().as_bytes(), b".", body],
    );
    format!("v1,{}", b64(&sig))
}

/// The current Unix time in seconds (the signatures' timestamps).
fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

// ---------------------------------------------------------------------------
// Producers' payloads.

/// The window event a payload maps to.
#[derive(Debug, Clone)]
struct Ev {
    partition: &'static str,
    id: String,
    key: String,
    ts: i64,
    value: i64,
}

impl Ev {
    /// The same event as a `POST /events` delivery in append mode.
    fn delivery(&self) -> String {
        delivery(
            self.partition,
            None,
            &self.id,
            &self.key,
            self.ts,
            self.value,
        )
    }
}

/// Who sends a payload, and its delivery id.
#[derive(Debug, Clone)]
enum Producer {
    /// Stripe (the id is in the body).
    Stripe,
    /// GitHub: `X-GitHub-Event` and `X-GitHub-Delivery`.
    GitHub {
        event: &'static str,
        delivery: String,
    },
    /// A Standard Webhooks sender: `webhook-id`.
    Standard { id: String },
}

/// A payload as its producer sends it, before signing.
#[derive(Debug, Clone)]
struct Payload {
    source: &'static str,
    producer: Producer,
    body: String,
    /// The window event it maps to (None: filtered out).
    event: Option<Ev>,
}

/// A request ready to send: headers and body bytes.
#[derive(Debug, Clone)]
struct Hook {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Hook {
    /// A copy with header `name` replaced (removed when `value` is None).
    fn with(&self, name: &str, value: Option<&str>) -> Hook {
        let mut h = self.clone();
        h.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        if let Some(v) = value {
            h.headers.push((name.to_string(), v.to_string()));
        }
        h
    }
}

impl Payload {
    /// Signed with the producer's secret at Unix time `t`.
    fn signed_at(&self, t: i64) -> Hook {
        self.signed_with(t, STRIPE_SECRET, GITHUB_SECRET, SW_SECRET)
    }

    /// Signed now.
    fn signed(&self) -> Hook {
        self.signed_at(now_s())
    }

    fn signed_with(&self, t: i64, stripe: &str, github: &str, standard: &str) -> Hook {
        let body = self.body.as_bytes();
        let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
        match &self.producer {
            Producer::Stripe => {
                headers.push((
                    "User-Agent".into(),
                    "Stripe/1.0 (+https://stripe.com/docs/webhooks)".into(),
                ));
                headers.push(("Stripe-Signature".into(), stripe_signature(stripe, t, body)));
            }
            Producer::GitHub { event, delivery } => {
                headers.push(("User-Agent".into(), "GitHub-Hookshot/7c8e2f1".into()));
                headers.push(("X-GitHub-Event".into(), (*event).into()));
                headers.push(("X-GitHub-Delivery".into(), delivery.clone()));
                headers.push(("X-GitHub-Hook-ID".into(), "482913".into()));
                headers.push(("X-Hub-Signature-256".into(), github_signature(github, body)));
            }
            Producer::Standard { id } => {
                headers.push(("User-Agent".into(), "Svix-Webhooks/1.24".into()));
                headers.push(("webhook-id".into(), id.clone()));
                headers.push(("webhook-timestamp".into(), t.to_string()));
                headers.push((
                    "webhook-signature".into(),
                    standard_signature(standard, id, t, body),
                ));
            }
        }
        Hook {
            path: format!("/ingest/{}", self.source),
            headers,
            body: body.to_vec(),
        }
    }
}

/// `2026-01-01T..` for the epoch milliseconds `ms` (within that day), in UTC
/// (`Z`) or `tz_h` hours east (`+01:00`, as GitHub writes commit times).
fn rfc3339(ms: i64, tz_h: i64) -> String {
    let local = ms - T0_MS + tz_h * 3_600_000;
    assert!((0..86_400_000).contains(&local), "within 2026-01-01");
    let (h, m, s, f) = (
        local / 3_600_000,
        local / 60_000 % 60,
        local / 1000 % 60,
        local % 1000,
    );
    let frac = if f == 0 {
        String::new()
    } else {
        format!(".{f:03}")
    };
    let zone = if tz_h == 0 {
        "Z".to_string()
    } else {
        format!("+{tz_h:02}:00")
    };
    format!("2026-01-01T{h:02}:{m:02}:{s:02}{frac}{zone}")
}

/// A Stripe event: `charge.succeeded` (mapped) or another type (filtered)
/// at `at_ms` (whole seconds: Stripe's `created`).
fn stripe_event(
    source: &'static str,
    partition: &'static str,
    evt: &str,
    kind: &str,
    at_ms: i64,
    customer: &str,
    amount: i64,
) -> Payload {
    assert_eq!(at_ms % 1000, 0, "Stripe's created is in seconds");
    let succeeded = kind == "charge.succeeded";
    let body = json!({
        "id": evt,
        "object": "event",
        "api_version": "2024-06-20",
        "created": at_ms / 1000,
        "data": {"object": {
            "id": format!("ch_3{}", &evt[4..]),
            "object": "charge",
            "amount": amount,
            "amount_captured": if succeeded { amount } else { 0 },
            "currency": "usd",
            "customer": customer,
            "failure_code": if succeeded { Value::Null } else { json!("card_declined") },
            "paid": succeeded,
            "status": if succeeded { "succeeded" } else { "failed" }
        }},
        "livemode": false,
        "pending_webhooks": 1,
        "request": {"id": format!("req_{}", &evt[4..]), "idempotency_key": null},
        "type": kind
    })
    .to_string();
    Payload {
        source,
        producer: Producer::Stripe,
        body,
        event: succeeded.then(|| Ev {
            partition,
            id: evt.to_string(),
            key: customer.to_string(),
            ts: at_ms,
            value: amount,
        }),
    }
}

/// A charge.succeeded event of the `stripe` source (partition `payments`).
fn charge(evt: &str, at_ms: i64, customer: &str, amount: i64) -> Payload {
    stripe_event(
        "stripe",
        "payments",
        evt,
        "charge.succeeded",
        at_ms,
        customer,
        amount,
    )
}

/// A GitHub delivery id (a UUID) from a number.
fn uuid(n: u64) -> String {
    format!(
        "{:08x}-{:04x}-11f0-8a3e-{:012x}",
        0x7d1c_0000 + n,
        n % 0xffff,
        0x0242_ac12_0000 + n
    )
}

/// A GitHub `push` of `repo` whose head commit is at `at_ms` (written in
/// local time, `tz_h` hours east).
fn push(delivery: u64, repo: &str, at_ms: i64, tz_h: i64) -> Payload {
    let sha = hex(&mac(repo.as_bytes(), &[&delivery.to_be_bytes()]))[..40].to_string();
    let body = json!({
        "ref": "refs/heads/main",
        "before": "0000000000000000000000000000000000000000",
        "after": sha,
        "repository": {
            "id": 700_000 + repo.len() as i64,
            "name": repo.split('/').nth(1).unwrap_or(repo),
            "full_name": repo,
            "private": false,
            "pushed_at": at_ms / 1000
        },
        "pusher": {"name": "octocat", "email": "octocat@github.com"},
        "head_commit": {
            "id": sha,
            "message": format!("Fix #{delivery}"),
            "timestamp": rfc3339(at_ms, tz_h),
            "author": {"name": "Mona", "username": "octocat"}
        }
    })
    .to_string();
    let delivery = uuid(delivery);
    Payload {
        source: "github",
        producer: Producer::GitHub {
            event: "push",
            delivery: delivery.clone(),
        },
        body,
        event: Some(Ev {
            partition: "repos",
            id: delivery,
            key: repo.to_string(),
            ts: at_ms,
            value: 1,
        }),
    }
}

/// A Standard Webhooks `invoice.paid` event (partition `invoices`).
fn invoice(msg: &str, customer: &str, amount: i64, at_ms: i64) -> Payload {
    let body = json!({
        "type": "invoice.paid",
        "timestamp": rfc3339(at_ms, 0),
        "data": {
            "id": format!("in_{}", &msg[4..]),
            "customer": customer,
            "amount_paid": amount,
            "currency": "usd"
        }
    })
    .to_string();
    Payload {
        source: "invoices",
        producer: Producer::Standard {
            id: msg.to_string(),
        },
        body,
        event: Some(Ev {
            partition: "invoices",
            id: msg.to_string(),
            key: customer.to_string(),
            ts: at_ms,
            value: amount,
        }),
    }
}

// ---------------------------------------------------------------------------
// Pipelines and servers.

fn stripe_source(partition: &str) -> Value {
    json!({
        "partition": partition,
        "signature": {"scheme": "stripe", "secret_env": "STRIPE_WEBHOOK_SECRET"},
        "id": {"pointer": "/id"},
        "key": {"pointer": "/data/object/customer"},
        "value": {"pointer": "/data/object/amount"},
        "timestamp": {"pointer": "/created", "unit": "s"},
        "filter": {"pointer": "/type", "equals": "charge.succeeded"}
    })
}

fn github_source(partition: &str) -> Value {
    json!({
        "partition": partition,
        "signature": {"scheme": "github", "secret_env": "GITHUB_WEBHOOK_SECRET"},
        "id": {"header": "X-GitHub-Delivery"},
        "key": {"pointer": "/repository/full_name"},
        "value": {"constant": 1},
        "timestamp": {"pointer": "/head_commit/timestamp", "unit": "rfc3339"},
        "filter": [
            {"header": "X-GitHub-Event", "equals": "push"},
            {"pointer": "/ref", "equals": "refs/heads/main"}
        ]
    })
}

fn invoices_source(partition: &str) -> Value {
    json!({
        "partition": partition,
        "signature": {"scheme": "standard_webhooks", "secret_env": "INVOICES_WEBHOOK_SECRET"},
        "id": {"header": "webhook-id"},
        "key": {"pointer": "/data/customer"},
        "value": {"pointer": "/data/amount_paid"},
        "timestamp": {"pointer": "/timestamp", "unit": "rfc3339"},
        "filter": {"pointer": "/type", "equals": "invoice.paid"}
    })
}

/// The three sources on `payments`, `repos` and `invoices`.
fn three_sources() -> Value {
    json!({
        "stripe": stripe_source("payments"),
        "github": github_source("repos"),
        "invoices": invoices_source("invoices")
    })
}

/// A pipeline on `payments`, `repos` and `invoices` with `windows`,
/// `lateness`, and optionally sources and watermarks.
fn pipeline(windows: Value, lateness: i64, sources: Option<Value>, wm: Option<Value>) -> Value {
    let mut p = json!({
        "partitions": ["payments", "repos", "invoices"],
        "windows": windows,
        "lateness": lateness
    });
    if let Some(s) = sources {
        p["sources"] = s;
    }
    if let Some(w) = wm {
        p["watermarks"] = w;
    }
    p
}

/// Writes `pipeline` beside the database `db` in `dir`.
fn pipeline_file(dir: &Path, db: &str, pipeline: &Value) -> String {
    let file = dir.join(format!("{db}.pipeline.json"));
    std::fs::write(&file, serde_json::to_string_pretty(pipeline).unwrap()).unwrap();
    file.to_str().unwrap().to_string()
}

/// A server on `dir/db` with `pipeline` and the secrets in its environment.
fn serve(dir: &Path, db: &str, pipeline: &Value, args: &[&str]) -> Server {
    serve_env(dir, db, pipeline, args, &SECRETS)
}

fn serve_env(
    dir: &Path,
    db: &str,
    pipeline: &Value,
    args: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let file = pipeline_file(dir, db, pipeline);
    let mut all = vec!["--pipeline", file.as_str()];
    all.extend_from_slice(args);
    start_env(&dir.join(db), &all, env)
}

// ---------------------------------------------------------------------------
// Requests and readings.

/// Sends a hook as its producer does: no bearer token.
fn send(s: &Server, h: &Hook) -> Resp {
    send_bearer(s, h, None)
}

fn send_bearer(s: &Server, h: &Hook, bearer: Option<&str>) -> Resp {
    let mut rb = s.client.post(s.url(&h.path)).body(h.body.clone());
    for (k, v) in &h.headers {
        rb = rb.header(k.as_str(), v.as_str());
    }
    if let Some(t) = bearer {
        rb = rb.bearer_auth(t);
    }
    to_resp(rb.send().expect("request"))
}

/// Sends a hook that must be answered 200; returns the answer.
fn accepted(s: &Server, h: &Hook) -> Value {
    let r = send(s, h);
    assert_eq!(r.status, 200, "{} {}", h.path, r.body);
    assert_eq!(r.content_type, "application/json");
    r.json()
}

fn status(s: &Server) -> Value {
    s.get("/status").json()
}

/// A labelled `/metrics` line's value (`name{labels}`), if present.
fn labelled(s: &Server, series: &str) -> Option<f64> {
    let text = s.get("/metrics").body;
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.trim().parse().expect("a number"))
}

/// A source's whole rejected page.
fn rejected(s: &Server, source: &str) -> Value {
    let r = s.get(&format!("/ingest/{source}/rejected?limit=1000"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// Everything an accepted call could change: the changelog, the late
/// output, `/status` and `/results`.
fn state(s: &Server) -> (Vec<String>, Vec<String>, String) {
    (s.all_changes(), s.all_late(), s.snapshot())
}

/// The changelog's page as served (every change: the workloads here are
/// far below the page limit), byte for byte.
fn changes_raw(s: &Server) -> String {
    let r = s.get("/changes?after=0&limit=10000");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn advance(s: &Server, partition: &str, w: i64) {
    s.ok(
        "/watermarks",
        &format!("{{\"partition\":\"{partition}\",\"watermark\":{w}}}"),
    );
}

fn wait_idle(s: &Server, partition: &str) {
    wait_until(&format!("{partition} marked idle"), DEADLINE, || {
        (status(s)["partitions"][partition]["idle"] == true).then_some(())
    });
}

// ---------------------------------------------------------------------------
// 1. The same results as the same events through POST /events.

enum Step {
    /// A webhook, and what its answer's status must be.
    Hook(Payload, &'static str),
    /// `POST /watermarks` on both servers.
    Advance(&'static str, i64),
}

#[test]
fn webhooks_give_the_results_of_the_same_events_through_post_events() {
    let dir = tempdir();
    let windows = json!({
        "per_minute": {"kind": "fixed", "size": 60000},
        "trailing": {"kind": "sliding", "size": 60000, "step": 20000},
        "visits": {"kind": "session", "gap": 30000}
    });
    let wm = json!({
        "payments": {"max_out_of_orderness": 15000},
        "repos": {"max_out_of_orderness": 0}
    });
    let bounds: BTreeMap<&str, i64> = [("payments", 15000), ("repos", 0)].into();
    let hooks = serve(
        dir.path(),
        "hooks.db",
        &pipeline(
            windows.clone(),
            10000,
            Some(three_sources()),
            Some(wm.clone()),
        ),
        &[],
    );
    let events = serve(
        dir.path(),
        "events.db",
        &pipeline(windows, 10000, None, None),
        &[],
    );
    let t = |ms: i64| T0_MS + ms;
    let mut ping = push(90, "acme/api", t(7000), 0);
    ping.producer = Producer::GitHub {
        event: "ping",
        delivery: uuid(90),
    };
    ping.body = json!({"zen": "Keep it logically awesome.", "hook_id": 482913,
        "hook": {"type": "Repository", "id": 482913, "active": true, "events": ["push"]}})
    .to_string();
    ping.event = None;
    let steps = vec![
        Step::Hook(charge("evt_1PaA01", t(5000), "cus_A", 1200), "new"),
        Step::Hook(push(1, "acme/api", t(8500), 1), "new"),
        Step::Hook(invoice("msg_2aI01", "cus_A", 9900, t(15250)), "new"),
        Step::Advance("invoices", t(20000)),
        Step::Hook(charge("evt_1PaA02", t(12000), "cus_B", 500), "new"),
        Step::Hook(
            stripe_event(
                "stripe",
                "payments",
                "evt_1PaA03",
                "charge.failed",
                t(13000),
                "cus_B",
                400,
            ),
            "filtered",
        ),
        Step::Hook(ping, "filtered"),
        Step::Hook(push(2, "acme/web", t(50000), 0), "new"),
        Step::Hook(charge("evt_1PaA04", t(40000), "cus_A", 700), "new"),
        // out of order, within the bound: accepted, no advance
        Step::Hook(charge("evt_1PaA05", t(30000), "cus_B", 300), "new"),
        Step::Hook(invoice("msg_2aI02", "cus_B", 4200, t(65000)), "new"),
        Step::Advance("invoices", t(70000)),
        Step::Hook(charge("evt_1PaA06", t(75000), "cus_A", 2500), "new"),
        Step::Hook(push(3, "acme/api", t(62000), 1), "new"),
        // 20 s + lateness 10 s < W = 60 s
        Step::Hook(charge("evt_1PaA07", t(20000), "cus_A", 50), "late"),
        // lands in the published minute [0, 60 s) of cus_B: a correction
        Step::Hook(charge("evt_1PaA08", t(52000), "cus_B", 800), "new"),
        Step::Hook(charge("evt_1PaA09", t(130000), "cus_C", 900), "new"),
        Step::Hook(push(4, "acme/api", t(125000), 0), "new"),
        Step::Advance("invoices", t(125000)),
        // redeliveries
        Step::Hook(push(2, "acme/web", t(50000), 0), "duplicate"),
        Step::Hook(charge("evt_1PaA04", t(40000), "cus_A", 700), "duplicate"),
    ];
    let mut progress: BTreeMap<&str, Option<i64>> =
        [("payments", None), ("repos", None), ("invoices", None)].into();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Advance(p, w) => {
                advance(&hooks, p, *w);
                advance(&events, p, *w);
                progress.insert(p, Some(*w));
            }
            Step::Hook(payload, want) => {
                let a = accepted(&hooks, &payload.signed());
                assert_eq!(a["source"], payload.source, "step {i}");
                assert_eq!(a["status"], *want, "step {i}: {a}");
                let Some(e) = &payload.event else {
                    assert_eq!(a["filtered"], 1, "step {i}: {a}");
                    assert!(a.get("offset").is_none(), "step {i}: {a}");
                    continue;
                };
                assert_eq!(a["id"], e.id.as_str(), "step {i}");
                assert_eq!(a["partition"], e.partition, "step {i}");
                let b = events.post("/events", &format!("[{}]", e.delivery()));
                assert_eq!(b.status, 200, "{}", b.body);
                let b = b.json();
                assert_eq!(a["offset"], b["offsets"][e.partition], "step {i}");
                assert_eq!(
                    a["late"],
                    b["late"].as_array().unwrap().len(),
                    "step {i}: {a} {b}"
                );
                // The advance the source derives: largest timestamp − bound,
                // when ahead of the partition's progress.
                if let Some(bound) = bounds.get(e.partition) {
                    let w = e.ts - bound;
                    if progress[e.partition].is_none_or(|p| w > p) {
                        progress.insert(e.partition, Some(w));
                        advance(&events, e.partition, w);
                    }
                }
                let st = status(&hooks);
                assert_eq!(
                    st["partitions"][e.partition]["progress"],
                    json!(progress[e.partition]),
                    "step {i}: derived progress"
                );
                assert_eq!(
                    a["watermark"], st["watermark"],
                    "step {i}: the answer's watermark is the global one"
                );
            }
        }
        assert_eq!(
            status(&hooks),
            status(&events),
            "step {i}: the same state after each call"
        );
    }
    let (changes, late, snap) = state(&hooks);
    assert_eq!(changes, events.all_changes(), "the changelog, every page");
    assert_eq!(changes_raw(&hooks), changes_raw(&events), "byte for byte");
    assert_eq!(late, events.all_late());
    assert_eq!(snap, events.snapshot(), "/status and /results");
    assert_eq!(hooks.get("/results").body, events.get("/results").body);
    assert!(changes.len() >= 20, "windows closed: {changes:?}");
    assert_eq!(late.len(), 1, "{late:?}");
    assert!(
        changes.iter().any(|c| c.contains("\"op\":\"retract\"")),
        "a correction: {changes:?}"
    );
    let st = status(&hooks);
    assert_eq!(st["watermark"], t(115000));
    for (p, offset) in [("payments", 8), ("repos", 4), ("invoices", 1)] {
        assert_eq!(st["partitions"][p]["offset"], offset, "{st}");
    }

    // GET /pipeline: the engine's pipeline, then the sources and the
    // watermarks as declared; the checkpoints are the same bytes.
    let plain = events.get("/pipeline").body;
    let want = format!(
        "{},\"sources\":{},\"watermarks\":{}}}",
        &plain[..plain.len() - 1],
        three_sources(),
        wm
    );
    assert_eq!(hooks.get("/pipeline").body, want);
    let cp_a = hooks.post_empty("/checkpoints").json();
    let cp_b = events.post_empty("/checkpoints").json();
    assert_eq!(cp_a["digest"], cp_b["digest"], "{cp_a} {cp_b}");
    let env_a = hooks.get(&format!("/checkpoints/{}", cp_a["id"])).body;
    assert_eq!(
        env_a,
        events.get(&format!("/checkpoints/{}", cp_b["id"])).body
    );
    // (the envelope's own "sources" are the partitions' consumed deliveries)
    for inbound in [
        "\"signature\"",
        "secret_env",
        "max_out_of_orderness",
        "/ingest",
    ] {
        assert!(!env_a.contains(inbound), "{inbound} in {env_a}");
    }
}

// ---------------------------------------------------------------------------
// 2. Redeliveries.

#[test]
fn a_redelivered_webhook_is_a_duplicate_and_changes_no_result() {
    let dir = tempdir();
    let wm = json!({
        "payments": {"max_out_of_orderness": 0},
        "repos": {"max_out_of_orderness": 0},
        "invoices": {"max_out_of_orderness": 0}
    });
    let windows = json!({"per_minute": {"kind": "fixed", "size": 60000}});
    let s = serve(
        dir.path(),
        "db",
        &pipeline(windows, 10000, Some(three_sources()), Some(wm)),
        &[],
    );
    let t = |ms: i64| T0_MS + ms;
    let c1 = charge("evt_1Dup01", t(5000), "cus_A", 1500);
    let c2 = charge("evt_1Dup02", t(70000), "cus_B", 900);
    let g1 = push(11, "acme/api", t(10000), 1);
    let g2 = push(12, "acme/api", t(80000), 0);
    let i1 = invoice("msg_2Dup01", "cus_A", 3000, t(15000));
    let i2 = invoice("msg_2Dup02", "cus_A", 100, t(90000));
    let first = c1.signed();
    for h in [
        first.clone(),
        g1.signed(),
        i1.signed(),
        c2.signed(),
        g2.signed(),
        i2.signed(),
    ] {
        assert_eq!(accepted(&s, &h)["status"], "new");
    }
    let before_status = status(&s);
    assert_eq!(before_status["watermark"], t(70000));
    let before = state(&s);
    let results = s.get("/results").body;
    assert!(
        results.contains("\"cus_A\""),
        "a published minute: {results}"
    );

    let w = t(70000);
    let offset = |p: &str| before_status["partitions"][p]["offset"].as_i64().unwrap();
    let answer = |source: &str, id: &str, partition: &str, offset: i64| {
        format!(
            "{{\"source\":\"{source}\",\"status\":\"duplicate\",\"id\":\"{id}\",\"items\":1,\"new\":0,\
             \"duplicates\":1,\"late\":0,\"filtered\":0,\"partition\":\"{partition}\",\
             \"offset\":{offset},\"watermark\":{w}}}"
        )
    };
    // Stripe retries: the same request, then a fresh signature (another t).
    // The event is behind the watermark: a duplicate is never late.
    let pay = offset("payments");
    let r = send(&s, &first);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, answer("stripe", "evt_1Dup01", "payments", pay + 1));
    let fresh = c1.signed_at(now_s() + 1);
    assert_ne!(fresh.headers, first.headers);
    assert_eq!(
        send(&s, &fresh).body,
        answer("stripe", "evt_1Dup01", "payments", pay + 2)
    );
    assert_eq!(
        send(&s, &c2.signed()).body,
        answer("stripe", "evt_1Dup02", "payments", pay + 3)
    );
    // GitHub's "Redeliver": the same X-GitHub-Delivery.
    let Producer::GitHub { delivery, .. } = &g1.producer else {
        unreachable!()
    };
    assert_eq!(
        send(&s, &g1.signed()).body,
        answer("github", delivery, "repos", offset("repos") + 1)
    );
    // A Standard Webhooks retry: the same webhook-id, signed again later.
    assert_eq!(
        send(&s, &i1.signed_at(now_s() + 2)).body,
        answer("invoices", "msg_2Dup01", "invoices", offset("invoices") + 1)
    );

    // Nothing changed but the consumed offsets.
    let after = state(&s);
    assert_eq!(after.0, before.0, "no change");
    assert_eq!(after.1, before.1, "no late record");
    assert_eq!(s.get("/results").body, results, "same results, sequence");
    let mut want = before_status.clone();
    for (p, n) in [("payments", 3), ("repos", 1), ("invoices", 1)] {
        want["partitions"][p]["offset"] = json!(offset(p) + n);
    }
    assert_eq!(status(&s), want);
    for (source, st, n) in [
        ("stripe", "new", 2.0),
        ("stripe", "duplicate", 3.0),
        ("github", "duplicate", 1.0),
        ("invoices", "duplicate", 1.0),
        ("invoices", "new", 2.0),
    ] {
        assert_eq!(
            labelled(
                &s,
                &format!("streamforge_ingest_events_total{{source=\"{source}\",status=\"{st}\"}}")
            ),
            Some(n),
            "{source} {st}"
        );
    }
}

// ---------------------------------------------------------------------------
// 3. Signatures.

#[test]
fn a_bad_signature_is_refused_with_its_reason_counted_and_leaves_nothing() {
    let dir = tempdir();
    let mut sources = three_sources();
    // a 10-minute tolerance for the Standard Webhooks source
    sources["invoices"]["signature"]["tolerance_s"] = json!(600);
    let windows = json!({"per_minute": {"kind": "fixed", "size": 60000}});
    let wm = json!({"payments": {"max_out_of_orderness": 0}});
    // Stripe secrets during a rotation: the old one and the new one.
    let rotation = format!("whsec_old0c4d1e2f, {STRIPE_SECRET}");
    let env = [
        ("STRIPE_WEBHOOK_SECRET", rotation.as_str()),
        SECRETS[1],
        SECRETS[2],
    ];
    let s = serve_env(
        dir.path(),
        "db",
        &pipeline(windows, 0, Some(sources), Some(wm)),
        &[],
        &env,
    );
    let t = |ms: i64| T0_MS + ms;
    let c1 = charge("evt_1Sig01", t(1000), "cus_A", 100);
    accepted(&s, &c1.signed());
    accepted(&s, &push(21, "acme/api", t(2000), 0).signed());
    accepted(&s, &invoice("msg_2Sig01", "cus_A", 5, t(3000)).signed());
    let before = state(&s);

    let now = now_s();
    let c2 = charge("evt_1Sig02", t(4000), "cus_B", 200);
    let g = push(22, "acme/api", t(5000), 0);
    let inv = invoice("msg_2Sig02", "cus_B", 7, t(6000));
    let other = |p: &Payload, at: i64| {
        p.signed_with(
            at,
            "whsec_not_the_secret",
            "not-the-secret",
            "whsec_bm90IHRoZSBrZXk=",
        )
    };
    let stripe_header = |h: &Hook| {
        h.headers
            .iter()
            .find(|(k, _)| k == "Stripe-Signature")
            .unwrap()
            .1
            .clone()
    };
    let altered = {
        let mut h = c2.signed();
        h.body = tampered(&h.body, "\"amount\":200", "\"amount\":999");
        h
    };
    let cases: Vec<(&str, Hook, &str)> = vec![
        ("stripe", other(&c2, now), "mismatch"),
        ("stripe", altered, "mismatch"),
        (
            "stripe",
            c2.signed().with("Stripe-Signature", None),
            "missing",
        ),
        (
            "stripe",
            c2.signed().with("Stripe-Signature", Some("t=abc,v1=00ff")),
            "malformed",
        ),
        (
            "stripe",
            {
                let h = c2.signed();
                let v1 = stripe_header(&h).split_once(',').unwrap().1.to_string();
                h.with("Stripe-Signature", Some(&v1))
            },
            "malformed",
        ),
        ("stripe", c2.signed_at(now - 1000), "stale"),
        ("stripe", c2.signed_at(now + 1000), "stale"),
        ("github", other(&g, now), "mismatch"),
        (
            "github",
            g.signed().with("X-Hub-Signature-256", None),
            "missing",
        ),
        (
            "github",
            g.signed().with(
                "X-Hub-Signature-256",
                Some(&format!("sha1={}", hex(&mac(b"k", &[b"x"])))),
            ),
            "malformed",
        ),
        ("invoices", other(&inv, now), "mismatch"),
        (
            "invoices",
            inv.signed().with("webhook-signature", None),
            "missing",
        ),
        (
            "invoices",
            inv.signed()
                .with("webhook-signature", Some("v1,@@not-base64@@")),
            "malformed",
        ),
        ("invoices", inv.signed_at(now - 1000), "stale"),
    ];
    let mut counts: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for (source, hook, reason) in &cases {
        let r = send(&s, hook);
        let p = r.problem(401, &format!("signature_{reason}"));
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.contains("nothing was applied"), "{detail}");
        *counts.entry((*source, *reason)).or_default() += 1.0;
    }

    // Nothing applied, nothing kept, every refusal counted by reason.
    assert_eq!(state(&s), before, "a refused signature changes nothing");
    for source in ["stripe", "github", "invoices"] {
        let page = rejected(&s, source);
        assert_eq!(
            page,
            json!({"rejected": [], "next": 0, "head": 0, "earliest": 1, "dropped": 0})
        );
    }
    let metrics = s.get("/metrics").body;
    for ((source, reason), n) in &counts {
        let line = format!(
            "streamforge_ingest_signature_failures_total{{source=\"{source}\",reason=\"{reason}\"}} {n}"
        );
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    assert!(
        !metrics.contains("streamforge_ingest_rejected_total{"),
        "signature refusals are not rejections:\n{metrics}"
    );

    // Within the source's own tolerance (600 s): accepted.
    assert_eq!(
        accepted(&s, &inv.signed_at(now - 500))["status"],
        "new",
        "within tolerance_s"
    );
    // Both secrets of the rotation verify.
    let old = c2.signed_with(now, "whsec_old0c4d1e2f", GITHUB_SECRET, SW_SECRET);
    assert_eq!(accepted(&s, &old)["status"], "new");
    let c3 = charge("evt_1Sig03", t(8000), "cus_B", 300);
    assert_eq!(accepted(&s, &c3.signed())["status"], "new");
    assert_eq!(status(&s)["partitions"]["payments"]["offset"], 2);
}

/// A body with `from` replaced by `to` after it was signed.
fn tampered(body: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(body.to_vec()).expect("UTF-8");
    assert!(text.contains(from), "{from} in {text}");
    text.replace(from, to).into_bytes()
}

// ---------------------------------------------------------------------------
// 4. Payloads that do not fit the mapping: refused and kept.

#[test]
fn a_payload_that_does_not_fit_is_refused_and_kept_on_the_rejected_page() {
    let dir = tempdir();
    let windows = json!({"per_minute": {"kind": "fixed", "size": 60000}});
    let wm = json!({"payments": {"max_out_of_orderness": 0}});
    let mut sources = three_sources();
    // an unsigned source: its oversized requests are kept too
    sources["ops"] = json!({
        "partition": "invoices",
        "id": {"pointer": "/id"},
        "key": {"pointer": "/who"},
        "value": {"pointer": "/n"},
        "timestamp": {"pointer": "/at", "unit": "ms"}
    });
    let p = pipeline(windows, 0, Some(sources), Some(wm));
    let args = ["--max-body-bytes", "4096"];
    let mut s = serve(dir.path(), "db", &p, &args);
    let t = |ms: i64| T0_MS + ms;
    accepted(&s, &charge("evt_1Map01", t(1000), "cus_A", 100).signed());
    let before = state(&s);

    // Each refused request carries an Authorization header, which is never kept.
    let leak = ("Authorization", "Bearer do-not-keep-me");
    let sign = |body: &[u8], ct: Option<&str>| {
        let mut h = Hook {
            path: "/ingest/stripe".into(),
            headers: vec![
                ("User-Agent".into(), "Stripe/1.0".into()),
                (leak.0.into(), leak.1.into()),
                (
                    "Stripe-Signature".into(),
                    stripe_signature(STRIPE_SECRET, now_s(), body),
                ),
            ],
            body: body.to_vec(),
        };
        if let Some(ct) = ct {
            h.headers.push(("Content-Type".into(), ct.into()));
        }
        h
    };
    let mut no_customer: Value =
        serde_json::from_str(&charge("evt_1Map02", t(2000), "cus_A", 5).body).unwrap();
    no_customer["data"]["object"]
        .as_object_mut()
        .unwrap()
        .remove("customer");
    let mut decimal: Value =
        serde_json::from_str(&charge("evt_1Map03", t(2000), "cus_A", 5).body).unwrap();
    decimal["data"]["object"]["amount"] = json!(12.5);
    let conflict = charge("evt_1Map01", t(1000), "cus_A", 101).body;
    let batch = format!(
        "[{},{}]",
        charge("evt_1Map04", t(3000), "cus_B", 1).body,
        decimal
    );
    let non_utf8 = {
        let mut b =
            br#"{"id":"evt_1Map05","object":"event","type":"charge.succeeded","note":""#.to_vec();
        b.extend_from_slice(&[0xff, 0xfe, b'"', b'}']);
        b
    };
    let large = charge("evt_1Map06", t(3000), "cus_B", 1)
        .body
        .replace("\"usd\"", &format!("\"{}\"", "u".repeat(5000)));
    struct Case {
        hook: Hook,
        status: u16,
        code: &'static str,
        at: Option<&'static str>,
        index: Option<u64>,
        detail: &'static str,
    }
    let no_customer = no_customer.to_string();
    let decimal = decimal.to_string();
    let cases = vec![
        Case {
            hook: sign(no_customer.as_bytes(), Some("application/json")),
            status: 422,
            code: "mapping_failed",
            at: Some("/data/object/customer"),
            index: None,
            detail: "/data/object/customer: missing: expected the key",
        },
        Case {
            hook: sign(decimal.as_bytes(), Some("application/json; charset=utf-8")),
            status: 422,
            code: "mapping_failed",
            at: Some("/data/object/amount"),
            index: None,
            detail: "the decimal number 12.5",
        },
        Case {
            hook: sign(decimal.as_bytes(), Some("text/plain")),
            status: 415,
            code: "unsupported_media_type",
            at: None,
            index: None,
            detail: "text/plain",
        },
        Case {
            hook: sign(&non_utf8, None),
            status: 400,
            code: "bad_request",
            at: Some("body"),
            index: None,
            detail: "not UTF-8",
        },
        Case {
            hook: sign(conflict.as_bytes(), Some("application/json")),
            status: 422,
            code: "mapping_failed",
            at: None,
            index: None,
            detail: "same event id",
        },
        Case {
            hook: sign(batch.as_bytes(), Some("application/json")),
            status: 422,
            code: "mapping_failed",
            at: Some("/data/object/amount"),
            index: Some(1),
            detail: "item 1: /data/object/amount",
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let r = send(&s, &c.hook);
        let p = r.problem(c.status, c.code);
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.contains(c.detail), "case {i}: {detail}");
        assert_eq!(p.get("index").and_then(Value::as_u64), c.index, "case {i}");
    }
    // One for the GitHub source: a commit time that is not RFC 3339.
    let mut g = push(31, "acme/api", t(2000), 0);
    let mut bad_time: Value = serde_json::from_str(&g.body).unwrap();
    bad_time["head_commit"]["timestamp"] = json!("2026-13-01T00:00:00Z");
    g.body = bad_time.to_string();
    let r = send(&s, &g.signed());
    let detail = r.problem(422, "mapping_failed")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.starts_with("/head_commit/timestamp: expected an RFC 3339 time"),
        "{detail}"
    );

    // Over --max-body-bytes: 413. A signed source's request is not kept
    // (its signature cannot be checked without reading the body: anybody
    // could fill the page); an unsigned source's is, without its body.
    let r = send(&s, &sign(large.as_bytes(), Some("application/json")));
    let p413 = r.problem(413, "payload_too_large");
    assert!(p413["detail"]
        .as_str()
        .unwrap()
        .contains("--max-body-bytes"));
    let ops = Hook {
        path: "/ingest/ops".into(),
        headers: vec![
            ("Content-Type".into(), "application/json".into()),
            ("User-Agent".into(), "ops-script/2".into()),
        ],
        body: format!(r#"{{"id":"o1","who":"{}","n":1,"at":1}}"#, "w".repeat(5000)).into_bytes(),
    };
    send(&s, &ops).problem(413, "payload_too_large");
    let page = rejected(&s, "ops");
    assert_eq!(page["head"], 1, "{page}");
    let rec = &page["rejected"][0];
    assert_eq!(rec["code"], "payload_too_large");
    assert_eq!(rec["body"], Value::Null, "kept without its body");
    assert_eq!(rec["body_bytes"], ops.body.len());
    assert_eq!(rec["headers"]["user-agent"], "ops-script/2");
    assert!(rec.get("at").is_none() && rec.get("body_base64").is_none());

    assert_eq!(state(&s), before, "nothing applied");

    // The page: each request with its code, where, headers (no
    // Authorization, no signature) and body.
    let page = rejected(&s, "stripe");
    let records = page["rejected"].as_array().unwrap().clone();
    assert_eq!(records.len(), cases.len(), "{page}");
    assert_eq!(
        (
            &page["next"],
            &page["head"],
            &page["earliest"],
            &page["dropped"]
        ),
        (&json!(6), &json!(6), &json!(1), &json!(0))
    );
    for (i, (rec, c)) in records.iter().zip(&cases).enumerate() {
        assert_eq!(rec["seq"], i + 1);
        assert_eq!(rec["code"], c.code, "{rec}");
        assert_eq!(rec.get("at").and_then(Value::as_str), c.at, "{rec}");
        assert_eq!(rec.get("index").and_then(Value::as_u64), c.index, "{rec}");
        assert!(rec["detail"].as_str().unwrap().contains(c.detail), "{rec}");
        let at = rec["received_at"].as_str().unwrap();
        assert!(
            at.len() == 24 && at.starts_with("20") && at.ends_with('Z'),
            "{at}"
        );
        let headers = rec["headers"].as_object().unwrap();
        assert!(headers.get("authorization").is_none(), "{rec}");
        assert!(headers.get("stripe-signature").is_none(), "{rec}");
        assert_eq!(headers["user-agent"], "Stripe/1.0", "{rec}");
        assert_eq!(rec["body_bytes"], c.hook.body.len(), "{rec}");
        match c.code {
            "bad_request" => {
                assert_eq!(rec["body"], Value::Null);
                assert_eq!(rec["body_base64"], b64(&c.hook.body));
            }
            _ => {
                assert_eq!(rec["body"], std::str::from_utf8(&c.hook.body).unwrap());
                assert!(rec.get("body_base64").is_none());
            }
        }
        assert!(!rec.to_string().contains("do-not-keep-me"));
    }
    assert_eq!(
        records[2]["headers"]["content-type"], "text/plain",
        "{}",
        records[2]
    );
    let gh = rejected(&s, "github");
    assert_eq!(gh["head"], 1);
    let rec = &gh["rejected"][0];
    assert_eq!(rec["at"], "/head_commit/timestamp");
    assert_eq!(rec["headers"]["x-github-event"], "push");
    assert!(rec["headers"].get("x-hub-signature-256").is_none(), "{rec}");
    assert_eq!(rec["body"], g.body);

    // Paging with after and limit.
    let seqs = |after: u64, limit: u64| -> (Vec<u64>, u64) {
        let v = s
            .get(&format!(
                "/ingest/stripe/rejected?after={after}&limit={limit}"
            ))
            .json();
        let seqs = v["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["seq"].as_u64().unwrap())
            .collect();
        (seqs, v["next"].as_u64().unwrap())
    };
    assert_eq!(seqs(0, 4), (vec![1, 2, 3, 4], 4));
    assert_eq!(seqs(4, 4), (vec![5, 6], 6));
    assert_eq!(seqs(6, 4), (vec![], 6));
    assert_eq!(seqs(2, 1), (vec![3], 3));
    s.get("/ingest/stripe/rejected?limit=0")
        .problem(422, "invalid_request");
    s.get("/ingest/nope/rejected").problem(404, "not_found");
    let metrics = s.get("/metrics").body;
    for (code, n) in [
        ("mapping_failed", 4),
        ("unsupported_media_type", 1),
        ("bad_request", 1),
    ] {
        let line =
            format!("streamforge_ingest_rejected_total{{source=\"stripe\",code=\"{code}\"}} {n}");
        assert!(metrics.lines().any(|l| l == line), "{line}:\n{metrics}");
    }

    // Durable; a restart with --keep-rejected 2 keeps the newest two from
    // the next refusal on, and counts the dropped ones.
    assert!(s.terminate().success());
    let s = serve(dir.path(), "db", &p, &["--keep-rejected", "2"]);
    assert_eq!(rejected(&s, "stripe")["rejected"], json!(records));
    send(&s, &sign(no_customer.as_bytes(), None)).problem(422, "mapping_failed");
    let page = rejected(&s, "stripe");
    let kept: Vec<u64> = page["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(kept, vec![6, 7], "{page}");
    assert_eq!(
        (&page["head"], &page["earliest"], &page["dropped"]),
        (&json!(7), &json!(6), &json!(5))
    );
    assert_eq!(
        labelled(
            &s,
            "streamforge_ingest_rejected_dropped_total{source=\"stripe\"}"
        ),
        Some(5.0)
    );
    assert_eq!(state(&s), before, "nothing applied, across the restart");

    // The page is not engine state: a restore leaves it as it is.
    let cp = s.post_empty("/checkpoints").json();
    accepted(&s, &charge("evt_1Map07", t(5000), "cus_B", 7).signed());
    assert_ne!(state(&s), before);
    let r = s.post_empty(&format!("/checkpoints/{}/restore", cp["id"]));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(state(&s), before, "restored");
    assert_eq!(rejected(&s, "stripe"), page, "the page as it was");
}

// ---------------------------------------------------------------------------
// 5. Derived watermarks close windows without POST /watermarks.

#[test]
fn a_bounded_source_publishes_and_finalizes_windows_without_post_watermarks() {
    let dir = tempdir();
    let p = json!({
        "partitions": ["payments"],
        "windows": {"per_minute": {"kind": "fixed", "size": 60000}},
        "lateness": 10000,
        "sources": {"stripe": stripe_source("payments")},
        "watermarks": {"payments": {"max_out_of_orderness": 5000}}
    });
    let s = serve(dir.path(), "db", &p, &[]);
    let t = |ms: i64| T0_MS + ms;
    let send_charge = |evt: &str, at: i64, key: &str, v: i64| -> Value {
        accepted(&s, &charge(evt, t(at), key, v).signed())
    };
    let minute = |key: &str| {
        s.get(&format!("/results?window=per_minute&key={key}"))
            .json()["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["start"] == T0_MS)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        send_charge("evt_1Wm01", 1000, "cus_A", 100)["watermark"],
        t(-4000)
    );
    assert_eq!(
        send_charge("evt_1Wm02", 2000, "cus_B", 200)["watermark"],
        t(-3000)
    );
    let a = send_charge("evt_1Wm03", 61000, "cus_A", 300);
    assert_eq!(a["watermark"], t(56000));
    assert!(s.all_changes().is_empty(), "nothing ready before 60 s");
    // W = 61 s: the first minute is ready and published.
    assert_eq!(
        send_charge("evt_1Wm04", 66000, "cus_A", 400)["watermark"],
        t(61000)
    );
    let changes = s.all_changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
    for (c, (key, sum)) in changes.iter().zip([("cus_A", 100), ("cus_B", 200)]) {
        let c: Value = serde_json::from_str(c).unwrap();
        assert_eq!(c["op"], "upsert");
        assert_eq!(
            c["result"],
            json!({"window": "per_minute", "key": key, "start": T0_MS, "end": T0_MS + 60000,
                   "count": 1, "sum": sum, "min": sum, "max": sum})
        );
    }
    assert_eq!(minute("cus_A").len(), 1);
    // 30 s + lateness 10 s < 61 s: late; 58 s is not: a correction.
    let late = send_charge("evt_1Wm05", 30000, "cus_B", 5);
    assert_eq!(
        (&late["status"], &late["late"]),
        (&json!("late"), &json!(1))
    );
    assert_eq!(s.all_late().len(), 1);
    assert_eq!(
        send_charge("evt_1Wm06", 58000, "cus_B", 50)["status"],
        "new"
    );
    assert_eq!(minute("cus_B")[0]["sum"], 250, "corrected");
    assert_eq!(s.all_changes().len(), 4, "a retract and an upsert");
    let st = status(&s);
    assert_eq!(st["live_buckets"], 3, "{st}");

    // W = 71 s > end 60 s + lateness 10 s: the first minute is final: it
    // leaves the visible rows silently (no retraction).
    assert_eq!(
        send_charge("evt_1Wm07", 76000, "cus_C", 700)["watermark"],
        t(71000)
    );
    assert!(minute("cus_A").is_empty() && minute("cus_B").is_empty());
    assert_eq!(s.all_changes().len(), 4, "finalization emits nothing");
    let st = status(&s);
    assert_eq!(st["live_buckets"], 2, "only the second minute: {st}");
    assert_eq!(st["watermark"], t(71000));
    // An event for the final minute is late.
    assert_eq!(
        send_charge("evt_1Wm08", 59000, "cus_A", 1)["status"],
        "late"
    );
    assert_eq!(s.all_late().len(), 2);

    // The strategy applies to POST /events deliveries of the partition too;
    // a POST /watermarks moves it forward, and the derived advances only
    // move it when ahead of that.
    let e = delivery("payments", None, "evt_1Wm09", "cus_A", t(140000), 9);
    let r: Value = serde_json::from_str(&s.ok("/events", &e)).unwrap();
    assert_eq!(r["watermark"], t(135000));
    advance(&s, "payments", t(200000));
    assert_eq!(
        send_charge("evt_1Wm10", 190000, "cus_A", 10)["watermark"],
        t(200000)
    );
    assert_eq!(status(&s)["partitions"]["payments"]["progress"], t(200000));
    assert_eq!(
        send_charge("evt_1Wm11", 206000, "cus_A", 11)["watermark"],
        t(201000)
    );
}

#[test]
fn a_quiet_partition_is_marked_idle_and_the_active_one_moves_the_watermark() {
    let dir = tempdir();
    let p = json!({
        "partitions": ["payments", "repos"],
        "windows": {"per_minute": {"kind": "fixed", "size": 60000}},
        "lateness": 60000,
        "sources": {"stripe": stripe_source("payments"), "github": github_source("repos")},
        "watermarks": {
            "payments": {"max_out_of_orderness": 0},
            "repos": {"max_out_of_orderness": 0, "idle_after": 2000}
        }
    });
    let s = serve(dir.path(), "db", &p, &[]);
    let t = |ms: i64| T0_MS + ms;
    accepted(&s, &push(41, "acme/api", t(10000), 0).signed());
    accepted(&s, &charge("evt_1Idl01", t(5000), "cus_A", 10).signed());
    accepted(&s, &charge("evt_1Idl02", t(70000), "cus_A", 20).signed());
    // While repos is active (unless already marked: the wall clock decides)
    // it holds the global watermark at its progress.
    let st = status(&s);
    if st["partitions"]["repos"]["idle"] == false {
        assert_eq!(st["watermark"], t(10000), "{st}");
    }
    // repos sends nothing more: the server marks it idle (no call here),
    // and the minute [0, 60 s) closes on payments' progress alone.
    wait_idle(&s, "repos");
    let st = status(&s);
    assert_eq!(st["watermark"], t(70000), "{st}");
    let results = s.get("/results?window=per_minute").json()["results"].clone();
    assert_eq!(
        results,
        json!([
            {"window": "per_minute", "key": "acme/api", "start": T0_MS, "end": T0_MS + 60000,
             "count": 1, "sum": 1, "min": 1, "max": 1},
            {"window": "per_minute", "key": "cus_A", "start": T0_MS, "end": T0_MS + 60000,
             "count": 1, "sum": 10, "min": 10, "max": 10}
        ]),
        "published by the idle mark"
    );
    // More events on payments alone move the watermark on.
    let a = accepted(&s, &charge("evt_1Idl03", t(130000), "cus_A", 30).signed());
    assert_eq!(a["watermark"], t(130000));
    assert_eq!(status(&s)["partitions"]["repos"]["idle"], true);
    // repos' next event makes it active again, even one behind its
    // progress (late here): at its progress, not moved; the global
    // watermark never goes back, and repos holds it again.
    let g = accepted(&s, &push(42, "acme/web", t(8000), 0).signed());
    assert_eq!(g["status"], "late", "{g}");
    let st = status(&s);
    assert_eq!(st["partitions"]["repos"]["idle"], false, "{st}");
    assert_eq!(st["partitions"]["repos"]["progress"], t(10000));
    assert_eq!(st["watermark"], t(130000), "{st}");
    accepted(&s, &charge("evt_1Idl04", t(200000), "cus_A", 40).signed());
    let st = status(&s);
    if st["partitions"]["repos"]["idle"] == false {
        assert_eq!(st["watermark"], t(130000), "held by repos: {st}");
    }
    // Quiet again, idle again: the watermark moves on.
    wait_idle(&s, "repos");
    assert_eq!(status(&s)["watermark"], t(200000));
    // An event ahead of its progress moves it, and makes it active.
    let g = accepted(&s, &push(43, "acme/api", t(190000), 0).signed());
    assert_eq!(g["status"], "new");
    let st = status(&s);
    assert_eq!(st["partitions"]["repos"]["idle"], false, "{st}");
    assert_eq!(st["partitions"]["repos"]["progress"], t(190000));
    assert_eq!(st["watermark"], t(200000), "{st}");
}

// ---------------------------------------------------------------------------
// 6. SIGKILL, restarts, restores: the same changelog.

#[derive(Debug, Clone)]
enum Call {
    Hook(Payload),
    Advance(&'static str, i64),
    /// Wait until the server marks the partition idle.
    Idle(&'static str),
}

fn call(s: &Server, c: &Call) -> String {
    match c {
        Call::Hook(p) => {
            let r = send(s, &p.signed());
            assert_eq!(r.status, 200, "{}", r.body);
            r.body
        }
        Call::Advance(p, w) => s.ok(
            "/watermarks",
            &format!("{{\"partition\":\"{p}\",\"watermark\":{w}}}"),
        ),
        Call::Idle(p) => {
            wait_idle(s, p);
            String::new()
        }
    }
}

/// Everything two servers must agree on, byte for byte.
fn same(a: &Server, b: &Server, what: &str) {
    assert_eq!(a.all_changes(), b.all_changes(), "{what}: /changes");
    assert_eq!(changes_raw(a), changes_raw(b), "{what}: /changes, raw");
    assert_eq!(a.all_late(), b.all_late(), "{what}: /late");
    assert_eq!(
        a.get("/status").body,
        b.get("/status").body,
        "{what}: /status"
    );
    assert_eq!(
        a.get("/results").body,
        b.get("/results").body,
        "{what}: /results"
    );
}

#[test]
fn sigkill_restarts_and_restores_replay_the_same_changelog() {
    let dir = tempdir();
    let p = pipeline(
        json!({
            "per_minute": {"kind": "fixed", "size": 60000},
            "visits": {"kind": "session", "gap": 20000}
        }),
        5000,
        Some(three_sources()),
        Some(json!({
            "payments": {"max_out_of_orderness": 10000},
            "repos": {"max_out_of_orderness": 0, "idle_after": 2500},
            "invoices": {"max_out_of_orderness": 5000}
        })),
    );
    let t = |ms: i64| T0_MS + ms;
    let mut rng = Rng(7);
    let customers = ["cus_A", "cus_B", "cus_C"];
    // Phase 1: repos' events, then it goes quiet until the server marks it
    // idle (both servers, at the same point of the calls). A is killed
    // after call 3, between two of repos' events: its quiet time counts
    // from its restart.
    let mut calls = vec![
        Call::Hook(push(51, "acme/api", t(3000), 1)),
        Call::Hook(charge("evt_1Kil00", t(4000), "cus_A", 40)),
        Call::Hook(invoice("msg_2Kil00", "cus_A", 500, t(5000))),
        Call::Hook(push(52, "acme/web", t(6000), 0)),
        Call::Hook(push(53, "acme/api", t(9000), 0)),
        Call::Idle("repos"),
    ];
    // Phase 2: payments and invoices, out of order, redeliveries, a late
    // one, a manual advance.
    let mut sent: Vec<Payload> = Vec::new();
    let mut clock = 10_000;
    for i in 1..=14 {
        clock += 7000 + rng.below(8) as i64 * 1000;
        let at = clock - (rng.below(3) as i64) * 7000;
        let c = charge(
            &format!("evt_1Kil{i:02}"),
            t(at),
            customers[rng.below(3) as usize],
            1 + rng.below(900) as i64,
        );
        sent.push(c.clone());
        calls.push(Call::Hook(c));
        if i % 2 == 0 {
            calls.push(Call::Hook(invoice(
                &format!("msg_2Kil{i:02}"),
                customers[rng.below(3) as usize],
                100 * i,
                t(clock - 2000),
            )));
        }
        if i == 5 {
            calls.push(Call::Hook(sent[1].clone()));
            calls.push(Call::Advance("invoices", t(clock)));
        }
        if i == 9 {
            // far behind: late
            calls.push(Call::Hook(charge("evt_1KilLate", t(2000), "cus_B", 7)));
        }
    }
    // repos comes back (active again), then quiet again.
    let repos_last = t(clock - 1000);
    calls.push(Call::Hook(push(54, "acme/api", repos_last, 0)));
    calls.push(Call::Idle("repos"));
    for i in 15..=17 {
        clock += 25000;
        calls.push(Call::Hook(charge(
            &format!("evt_1Kil{i:02}"),
            t(clock),
            customers[i % 3],
            i as i64,
        )));
    }
    calls.push(Call::Hook(invoice("msg_2KilEnd", "cus_A", 1, t(clock))));
    let args = ["--checkpoint-every", "5"];
    let mut a = serve(dir.path(), "a.db", &p, &args);
    let b = serve(dir.path(), "b.db", &p, &args);
    let kill_after = [3, 14];
    for (i, c) in calls.iter().enumerate() {
        let (ra, rb) = (call(&a, c), call(&b, c));
        assert_eq!(ra, rb, "call {i}: the same answer");
        if kill_after.contains(&i) {
            a.kill();
            a = serve(dir.path(), "a.db", &p, &args);
            assert_eq!(
                a.get("/status").body,
                b.get("/status").body,
                "after kill {i}"
            );
        }
    }
    same(&a, &b, "after the calls");
    let changes = a.all_changes();
    assert!(changes.len() > 20, "{} {changes:?}", changes.len());
    assert_eq!(a.all_late().len(), 1);
    let st = status(&a);
    assert_eq!(st["partitions"]["repos"]["idle"], true, "{st}");
    assert_eq!(st["partitions"]["repos"]["progress"], repos_last);

    // A clean restart.
    assert!(a.terminate().success());
    let a = serve(dir.path(), "a.db", &p, &args);
    same(&a, &b, "after a clean restart");

    // Checkpoint, more calls, restore: back to the checkpoint, and the
    // same calls again give the same changelog.
    let more: Vec<Call> = (0..4)
        .map(|i| {
            clock += 30000;
            if i == 2 {
                Call::Hook(invoice("msg_2KilMore", "cus_C", 77, t(clock)))
            } else {
                Call::Hook(charge(&format!("evt_1KilM{i}"), t(clock), "cus_A", 3))
            }
        })
        .collect();
    let cp_a = a.post_empty("/checkpoints");
    let cp_b = b.post_empty("/checkpoints");
    assert_eq!((cp_a.status, cp_b.status), (201, 201));
    let (cp_a, cp_b) = (cp_a.json(), cp_b.json());
    assert_eq!(cp_a["digest"], cp_b["digest"]);
    let at_checkpoint = a.get("/status").body;
    for c in &more {
        assert_eq!(call(&a, c), call(&b, c));
    }
    same(&a, &b, "after more calls");
    assert_ne!(a.get("/status").body, at_checkpoint);
    for (s, cp) in [(&a, &cp_a), (&b, &cp_b)] {
        let r = s.post_empty(&format!("/checkpoints/{}/restore", cp["id"]));
        assert_eq!(r.status, 200, "{}", r.body);
    }
    same(&a, &b, "after the restore");
    assert_eq!(a.all_changes().len(), changes.len(), "cut back");
    for c in &more {
        let (ra, rb) = (call(&a, c), call(&b, c));
        assert_eq!(ra, rb);
        assert!(ra.contains("\"status\":\"new\""), "{ra}");
    }
    same(&a, &b, "after the same calls again");
}

// ---------------------------------------------------------------------------
// 7. The bearer token.

#[test]
fn a_signed_source_needs_no_bearer_token_and_the_rest_does() {
    let dir = tempdir();
    let mut sources = three_sources();
    sources["manual"] = json!({
        "partition": "invoices",
        "id": {"pointer": "/id"},
        "key": {"pointer": "/who"},
        "value": {"pointer": "/n"},
        "timestamp": {"pointer": "/at", "unit": "ms"}
    });
    let p = pipeline(
        json!({"per_minute": {"kind": "fixed", "size": 60000}}),
        0,
        Some(sources),
        None,
    );
    let token = "tok-8d1f0c";
    let s = serve(dir.path(), "db", &p, &["--token", token]);
    let c = charge("evt_1Tok01", T0_MS + 1000, "cus_A", 5);
    let r = send(&s, &c.signed());
    assert_eq!(r.status, 200, "{}", r.body);
    // The token does not replace the signature.
    send_bearer(&s, &c.signed().with("Stripe-Signature", None), Some(token))
        .problem(401, "signature_missing");
    // An unsigned source, and every other route, need the token.
    let manual = Hook {
        path: "/ingest/manual".into(),
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: format!(r#"{{"id":"m1","who":"ops","n":3,"at":{}}}"#, T0_MS + 2000).into_bytes(),
    };
    send(&s, &manual).problem(401, "unauthorized");
    send_bearer(&s, &manual, Some("wrong")).problem(401, "unauthorized");
    let ok = send_bearer(&s, &manual, Some(token));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains("\"status\":\"new\""), "{}", ok.body);
    let unknown = Hook {
        path: "/ingest/nope".into(),
        ..manual.clone()
    };
    send(&s, &unknown).problem(401, "unauthorized");
    let p = send_bearer(&s, &unknown, Some(token)).problem(404, "not_found");
    assert!(p["detail"].as_str().unwrap().contains("\"stripe\""), "{p}");
    let anon = |path: &str| to_resp(s.client.get(s.url(path)).send().expect("request"));
    anon("/ingest/stripe/rejected").problem(401, "unauthorized");
    anon("/ingest/manual/rejected").problem(401, "unauthorized");
    anon("/status").problem(401, "unauthorized");
    assert_eq!(s.get("/ingest/stripe/rejected").status, 200);
    let st = status(&s);
    assert_eq!(st["partitions"]["payments"]["offset"], 0);
    assert_eq!(st["partitions"]["invoices"]["offset"], 0);
}

// ---------------------------------------------------------------------------
// 8. A pattern source.

#[test]
fn a_pattern_source_pushes_each_delivery_once() {
    let dir = tempdir();
    let doc = dir.path().join("card_testing.json");
    std::fs::write(
        &doc,
        r#"{"patterns": [{"name": "card_testing", "within": 600000, "stages": [
            {"name": "failures", "min": 3, "max": 3, "where": {"kind": "charge.failed"}},
            {"name": "success", "where": {"kind": "charge.succeeded"}}]}]}"#,
    )
    .unwrap();
    let p = json!({
        "partitions": ["p0"],
        "windows": {"w": {"kind": "fixed", "size": 60000}},
        "lateness": 0,
        "sources": {"charges": {
            "engine": "patterns",
            "signature": {"scheme": "stripe", "secret_env": "STRIPE_WEBHOOK_SECRET"},
            "id": {"pointer": "/id"},
            "key": {"pointer": "/data/object/customer"},
            "kind": {"pointer": "/type"},
            "fields": {
                "amount": {"pointer": "/data/object/amount"},
                "failure_code": {"pointer": "/data/object/failure_code"}
            },
            "timestamp": {"pointer": "/created", "unit": "s"}
        }}
    });
    let s = serve(dir.path(), "db", &p, &["--patterns", doc.to_str().unwrap()]);
    let t = |sec: i64| T0_MS + sec * 1000;
    let ev = |evt: &str, kind: &str, sec: i64, key: &str, amount: i64| {
        stripe_event("charges", "p0", evt, kind, t(sec), key, amount)
    };
    let events = [
        ev("evt_3Pat01", "charge.failed", 10, "cus_A", 100),
        ev("evt_3Pat02", "charge.failed", 15, "cus_B", 100),
        ev("evt_3Pat03", "charge.failed", 20, "cus_A", 100),
        ev("evt_3Pat04", "charge.succeeded", 25, "cus_B", 100),
        ev("evt_3Pat05", "charge.failed", 30, "cus_A", 100),
        ev("evt_3Pat06", "charge.succeeded", 40, "cus_A", 5000),
    ];
    for (i, e) in events.iter().enumerate() {
        let n = i + 1;
        let id = e.body.parse::<Value>().unwrap()["id"].clone();
        let r = send(&s, &e.signed());
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body,
            format!(
                "{{\"source\":\"charges\",\"status\":\"new\",\"id\":{id},\"items\":1,\"new\":1,\
                 \"duplicates\":0,\"late\":0,\"filtered\":0,\"ordinals\":[{n},{n}]}}"
            )
        );
    }
    let dup = |e: &Payload, at: i64| {
        let r = send(&s, &e.signed_at(at));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body,
            "{\"source\":\"charges\",\"status\":\"duplicate\",\"id\":\"evt_3Pat06\",\"items\":1,\
             \"new\":0,\"duplicates\":1,\"late\":0,\"filtered\":0}"
        );
    };
    dup(&events[5], now_s());
    dup(&events[5], now_s() + 3);
    let ps = s.get("/patterns/status").json();
    assert_eq!(
        (&ps["next_ordinal"], &ps["buffered"]),
        (&json!(7), &json!(6))
    );
    let adv = s.ok("/patterns/advance", &format!("{{\"watermark\":{}}}", t(60)));
    let adv: Value = serde_json::from_str(&adv).unwrap();
    assert_eq!(adv["processed"], 6);
    // Redelivered after the advance passed its time: still a duplicate
    // (not a late event).
    dup(&events[5], now_s());
    let out = s.get("/patterns/output?limit=1000").json()["output"].clone();
    let out = out.as_array().unwrap();
    assert_eq!(out.len(), 1, "exactly one match: {out:?}");
    let m = &out[0];
    assert_eq!(
        (&m["type"], &m["id"], &m["key"]),
        (
            &json!("match"),
            &json!("card_testing:1.3.5/6"),
            &json!("cus_A")
        )
    );
    assert_eq!(
        m["captures"]["success"],
        json!([{"ordinal": 6, "id": "evt_3Pat06", "key": "cus_A", "kind": "charge.succeeded",
                "time": t(40), "fields": {"amount": 5000}}]),
        "a null field is left out"
    );
    assert_eq!(
        m["captures"]["failures"][0]["fields"],
        json!({"amount": 100, "failure_code": "card_declined"})
    );
    assert_eq!(s.get("/patterns/status").json()["next_ordinal"], 7);
    // The window engine saw nothing.
    assert_eq!(status(&s)["partitions"]["p0"]["offset"], -1);
}

// ---------------------------------------------------------------------------
// 9. Refusals at startup and `pipeline check`.

#[test]
fn mistakes_are_refused_at_startup_and_by_pipeline_check_with_their_paths() {
    let dir = tempdir();
    let db = dir.path().join("db");
    for (flags, want) in [
        (
            &["--max-out-of-orderness", "1000"][..],
            "--max-out-of-orderness 1000",
        ),
        (&["--idle-after", "5000"][..], "--idle-after 5000"),
    ] {
        let err = try_start(&db, flags).err().expect("refused");
        assert!(
            err.contains(want) && err.contains("\"watermarks\""),
            "{err}"
        );
    }
    let err = try_start(&db, &["--instance", "1/2"])
        .err()
        .expect("refused");
    assert!(
        err.contains("--instance 1/2") && err.contains("--kafka"),
        "{err}"
    );

    let mut bad = pipeline(
        json!({"w": {"kind": "fixed", "size": 60000}}),
        0,
        Some(three_sources()),
        Some(json!({"nope": {"idle_after": 1000}, "payments": {"max_out_of_orderness": -1}})),
    );
    bad["sources"]["stripe"]["timestamp"]["unit"] = json!("sec");
    bad["sources"]["stripe"]["signature"]["secret"] = json!("whsec_inline_0xdeadbeef");
    bad["sources"]["github"]["partition"] = json!("Repos");
    bad["sources"]["invoices"]["value"] = json!({"pointer": "data/amount_paid"});
    let mistakes = [
        "sources.stripe.timestamp.unit: expected one of s, ms, us, ns, rfc3339, got \"sec\"",
        "sources.stripe.signature.secret: secrets never go in the pipeline file",
        "sources.github.partition: \"Repos\" is not a partition of the pipeline",
        "sources.invoices.value.pointer: \"data/amount_paid\" is not a JSON Pointer",
        "watermarks.nope: \"nope\" is not a partition of the pipeline",
        "watermarks.payments.max_out_of_orderness: expected an integer >= 0",
    ];
    let file = pipeline_file(dir.path(), "bad", &bad);
    let err = try_start_env(&db, &["--pipeline", &file], &SECRETS)
        .err()
        .expect("refused");
    for m in mistakes {
        assert!(err.contains(m), "{m:?} in:\n{err}");
    }
    assert!(!err.contains("whsec_inline_0xdeadbeef"), "{err}");
    assert!(!db.exists(), "nothing created");

    let checked = run(client(&["pipeline", "check", &file]), None).failed();
    let all = format!("{}{}", checked.stdout, checked.stderr);
    for m in mistakes {
        assert!(all.contains(m), "{m:?} in:\n{all}");
    }
    assert!(!all.contains("whsec_inline_0xdeadbeef"), "{all}");

    // A valid file: served only with its secrets; checked without them.
    let good = pipeline(
        json!({"w": {"kind": "fixed", "size": 60000}}),
        1000,
        Some(three_sources()),
        Some(json!({"payments": {"max_out_of_orderness": 5000, "idle_after": 60000}})),
    );
    let file = pipeline_file(dir.path(), "good", &good);
    let err = try_start_env(&db, &["--pipeline", &file], &SECRETS[1..])
        .err()
        .expect("refused without its secret");
    assert!(
        err.contains("sources.stripe.signature")
            && err.contains("STRIPE_WEBHOOK_SECRET is not set"),
        "{err}"
    );
    let kafka = try_start_env(
        &db,
        &[
            "--pipeline",
            &file,
            "--kafka",
            "127.0.0.1:9",
            "--topic",
            "payments",
        ],
        &SECRETS,
    )
    .err()
    .expect("refused with --kafka");
    assert!(kafka.contains("\"sources\" or \"watermarks\""), "{kafka}");
    let ok = run(client(&["pipeline", "check", &file]), None).ok();
    assert!(
        ok.stdout.contains(
            "valid: 3 partitions (invoices, payments, repos), 1 windows (w), lateness 1000"
        ),
        "{}",
        ok.stdout
    );
    for line in [
        "source github: POST /ingest/github -> partition repos, signed",
        "source stripe: POST /ingest/stripe -> partition payments, signed",
        "watermark payments: max_out_of_orderness 5000, idle_after 60000 ms",
    ] {
        assert!(ok.stdout.contains(line), "{line:?} in:\n{}", ok.stdout);
    }
    assert!(
        ok.stderr.contains("STRIPE_WEBHOOK_SECRET is not set here"),
        "a warning: {}",
        ok.stderr
    );
    let mut with_env = client(&["pipeline", "check", &file]);
    with_env.envs(SECRETS);
    let quiet = run(with_env, None).ok();
    assert_eq!(quiet.stderr, "", "no warning with the variables set");
    assert_eq!(quiet.stdout, ok.stdout);
}

// ---------------------------------------------------------------------------
// 10. GET /pipeline, and secrets never shown.

#[test]
fn get_pipeline_shows_sources_and_watermarks_and_no_secret_anywhere() {
    let dir = tempdir();
    let secret_file = dir.path().join("hmac.secrets");
    let file_secret = "partner-key-5b0e9a77c1";
    std::fs::write(
        &secret_file,
        format!("# the partner's key, rotated 2026-01\n\n{file_secret}\n"),
    )
    .unwrap();
    let mut sources = three_sources();
    sources["partner"] = json!({
        "partition": "invoices",
        "signature": {"scheme": "hmac", "secret_file": secret_file.to_str().unwrap(),
                      "header": "X-Partner-Signature", "encoding": "base64", "prefix": "sha256="},
        "id": {"pointer": "/event_id"},
        "key": {"pointer": "/account"},
        "value": {"pointer": "/cents"},
        "timestamp": {"pointer": "/at_us", "unit": "us"}
    });
    let wm = json!({"payments": {"max_out_of_orderness": 30000}, "repos": {"idle_after": 600000}});
    let p = pipeline(
        json!({"w": {"kind": "fixed", "size": 60000}}),
        0,
        Some(sources.clone()),
        Some(wm.clone()),
    );
    let mut env = SECRETS.to_vec();
    env.push(("RUST_LOG", "debug"));
    let mut s = serve_env(dir.path(), "db", &p, &[], &env);
    let shown = s.get("/pipeline").json();
    assert_eq!(shown["sources"], sources);
    assert_eq!(shown["watermarks"], wm);
    let body = s.get("/pipeline").body;
    assert!(
        body.starts_with("{\"partitions\":[\"invoices\",\"payments\",\"repos\"],\"windows\":"),
        "{body}"
    );
    assert!(
        body.ends_with(&format!(
            ",\"lateness\":0,\"sources\":{sources},\"watermarks\":{wm}}}"
        )),
        "{body}"
    );

    // Exercise every source: accepted, refused by signature, rejected.
    let t = |ms: i64| T0_MS + ms;
    accepted(&s, &charge("evt_1Sec01", t(1000), "cus_A", 10).signed());
    accepted(&s, &push(61, "acme/api", t(2000), 0).signed());
    accepted(&s, &invoice("msg_2Sec01", "cus_A", 10, t(3000)).signed());
    let body = format!(
        r#"{{"event_id":"pt-1","account":"acct_9","cents":42,"at_us":{}}}"#,
        t(4000) * 1000 + 999
    );
    let sig = format!(
        "sha256={}",
        b64(&mac(file_secret.as_bytes(), &[body.as_bytes()]))
    );
    let partner = Hook {
        path: "/ingest/partner".into(),
        headers: vec![("X-Partner-Signature".into(), sig)],
        body: body.into_bytes(),
    };
    let a = accepted(&s, &partner);
    assert_eq!(
        (&a["status"], &a["partition"]),
        (&json!("new"), &json!("invoices"))
    );
    let mut bad = partner.clone();
    bad.body = tampered(&bad.body, "\"cents\":42", "\"cents\":43");
    send(&s, &bad).problem(401, "signature_mismatch");
    send(
        &s,
        &charge("evt_1Sec02", t(5000), "cus_A", 1)
            .signed()
            .with("Content-Type", Some("text/xml")),
    )
    .problem(415, "unsupported_media_type");
    send(&s, &partner.with("Content-Type", Some("text/csv")))
        .problem(415, "unsupported_media_type");
    let r = s.get("/results?window=w&key=acct_9").json();
    assert_eq!(r["results"], json!([]), "not ready: {r}");
    assert_eq!(status(&s)["partitions"]["invoices"]["offset"], 1);

    let cp = s.post_empty("/checkpoints").json();
    let mut seen = vec![
        ("GET /pipeline", s.get("/pipeline").body),
        ("GET /metrics", s.get("/metrics").body),
        ("GET /status", s.get("/status").body),
        (
            "GET /checkpoints/{id}",
            s.get(&format!("/checkpoints/{}", cp["id"])).body,
        ),
    ];
    for source in ["stripe", "github", "invoices", "partner"] {
        seen.push(("rejected", rejected(&s, source).to_string()));
    }
    assert_eq!(rejected(&s, "partner")["head"], 1);
    assert!(rejected(&s, "partner")["rejected"][0]["headers"]
        .get("x-partner-signature")
        .is_none());
    assert!(s.terminate().success());
    seen.push(("the server's log", s.stderr()));
    let sw_key = SW_SECRET.strip_prefix("whsec_").unwrap();
    for (what, text) in &seen {
        for secret in [STRIPE_SECRET, GITHUB_SECRET, sw_key, file_secret] {
            assert!(!text.contains(secret), "{secret} in {what}:\n{text}");
        }
    }
    for inbound in ["\"signature\"", "secret_file", "max_out_of_orderness"] {
        assert!(
            !seen[3].1.contains(inbound),
            "the checkpoint holds no inbound source"
        );
    }
    assert!(seen[1].1.contains(
        "streamforge_ingest_signature_failures_total{source=\"partner\",reason=\"mismatch\"} 1"
    ));
}
