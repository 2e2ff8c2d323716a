//! A webhook receiver for the sink tests: a small HTTP/1.1 server on
//! 127.0.0.1 (std::net, a thread per connection) that follows the receiver
//! protocol of docs/sinks.md (verify the signature, skip batches already
//! applied, apply resets and records, drop final rows), logs every request
//! it gets (headers and body bytes), and fails on purpose where a plan
//! says: 500s, 429 with Retry-After, answers slower than the sink's
//! timeout, connections reset in the middle of the body, and a batch
//! applied whose answer is lost.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// What the receiver does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Apply, answer 200.
    Ok,
    /// Answer this status without applying.
    Fail(u16),
    /// 429 with `Retry-After: <seconds>`, without applying.
    TooMany(u64),
    /// Apply, then answer 200 only after this long (beyond the timeout).
    Slow(Duration),
    /// Read half of the body, then close the connection (a reset).
    Reset,
    /// Apply, then close the connection without answering (a lost ack).
    LostAnswer,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub action: Action,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// The protocol state of one sink (docs/sinks.md, "A receiver").
#[derive(Debug, Clone, Default)]
pub struct SinkState {
    pub sink_id: String,
    pub batch: u64,
    pub epoch: u64,
    pub last: u64,
    /// `changes`: visible rows by address.
    pub rows: BTreeMap<String, Value>,
    /// `late`, `patterns`: records by sequence.
    pub records: BTreeMap<u64, Value>,
    /// Batches applied (not counting the ones skipped as already applied).
    pub applied: u64,
}

type Plan = Box<dyn FnMut(usize, &str) -> Action + Send>;

struct Inner {
    log: Vec<Request>,
    states: BTreeMap<String, SinkState>,
    plan: Plan,
    secret: Option<String>,
    bad_signatures: usize,
    /// A forwarding receiver's target (`http://host:port`): each request
    /// goes there as received, and its answer's status back.
    forward: Option<String>,
}

/// A running receiver.
pub struct Receiver {
    pub base: String,
    inner: Arc<Mutex<Inner>>,
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    streamforge::sinks::signature(secret, body).expect("HMAC takes any key")
}

fn addr(result: &Value) -> String {
    serde_json::to_string(&[
        &result["window"],
        &result["key"],
        &result["start"],
        &result["end"],
    ])
    .unwrap()
}

/// Applies a batch to the state, as docs/sinks.md says.
pub fn apply(st: &mut SinkState, b: &Value) {
    let sink_id = b["sink_id"].as_str().unwrap_or("").to_string();
    if sink_id != st.sink_id {
        *st = SinkState {
            sink_id,
            ..SinkState::default()
        };
    }
    let batch = b["batch"].as_u64().expect("batch");
    if batch <= st.batch {
        return;
    }
    let changes = b["stream"] == "changes";
    if let Some(r) = b.get("reset") {
        if changes {
            st.rows = r["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|row| (addr(row), row.clone()))
                .collect();
        } else {
            let after = r["after"].as_u64().expect("after");
            st.records.retain(|s, _| *s <= after);
        }
    }
    for rec in b["records"].as_array().expect("records") {
        if changes {
            let a = addr(&rec["result"]);
            if rec["op"] == "upsert" {
                st.rows.insert(a, rec["result"].clone());
            } else {
                st.rows.remove(&a);
            }
        } else {
            st.records
                .insert(rec["seq"].as_u64().expect("seq"), rec.clone());
        }
    }
    if changes {
        if let Some(w) = b["watermark"].as_i64() {
            let lateness = b["lateness"].as_i64().expect("lateness");
            st.rows.retain(|_, r| {
                r["end"].as_i64().expect("end") as i128 + lateness as i128 >= w as i128
            });
        }
    }
    st.batch = batch;
    st.epoch = b["epoch"].as_u64().expect("epoch");
    st.last = b["last"].as_u64().expect("last");
    st.applied += 1;
}

impl Receiver {
    /// Starts a receiver; `plan(n, path)` decides what the n-th request
    /// (0-based, all paths) gets. `secret`: verify signatures with it.
    pub fn start(
        secret: Option<&str>,
        plan: impl FnMut(usize, &str) -> Action + Send + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let inner = Arc::new(Mutex::new(Inner {
            log: Vec::new(),
            states: BTreeMap::new(),
            plan: Box::new(plan),
            secret: secret.map(str::to_string),
            bad_signatures: 0,
            forward: None,
        }));
        let shared = inner.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || serve(conn, &shared));
            }
        });
        Receiver { base, inner }
    }

    /// A receiver that forwards every request to `target` (`http://host:port`,
    /// the request's path appended) with its headers and body, answers with
    /// the target's status, and logs what went through (action `Ok` for a
    /// 2xx, else `Fail(status)`; 502 when the target cannot be reached).
    pub fn forwarding(target: &str) -> Receiver {
        let r = Receiver::start(None, |_, _| Action::Ok);
        r.inner.lock().unwrap().forward = Some(target.to_string());
        r
    }

    /// Every request received so far, in order.
    pub fn log(&self) -> Vec<Request> {
        self.inner.lock().unwrap().log.clone()
    }

    /// The protocol state of the sink posting to `path`.
    pub fn state(&self, path: &str) -> SinkState {
        self.inner
            .lock()
            .unwrap()
            .states
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// Requests whose signature did not verify.
    pub fn bad_signatures(&self) -> usize {
        self.inner.lock().unwrap().bad_signatures
    }

    /// Replaces the plan.
    pub fn set_plan(&self, plan: impl FnMut(usize, &str) -> Action + Send + 'static) {
        self.inner.lock().unwrap().plan = Box::new(plan);
    }
}

fn respond(conn: &mut TcpStream, status: u16, extra: &str) {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status} {reason}\r\n{extra}Content-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
    );
    let _ = conn.flush();
}

/// Posts a request as received to `target` + `path`; the answer's status.
fn forward_to(target: &str, path: &str, headers: &BTreeMap<String, String>, body: &[u8]) -> u16 {
    let mut req = reqwest::blocking::Client::new()
        .post(format!("{target}{path}"))
        .body(body.to_vec());
    for (k, v) in headers {
        if !["host", "content-length", "connection"].contains(&k.as_str()) {
            req = req.header(k, v);
        }
    }
    req.send().map_or(502, |r| r.status().as_u16())
}

fn serve(conn: TcpStream, shared: &Arc<Mutex<Inner>>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let forward = shared.lock().unwrap().forward.clone();
        if let Some(target) = forward {
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            let status = forward_to(&target, &path, &headers, &body);
            shared.lock().unwrap().log.push(Request {
                path,
                headers,
                body,
                action: if (200..300).contains(&status) {
                    Action::Ok
                } else {
                    Action::Fail(status)
                },
            });
            respond(&mut conn, status, "");
            continue;
        }
        let action = {
            let mut g = shared.lock().unwrap();
            let n = g.log.len();
            (g.plan)(n, &path)
        };
        if action == Action::Reset {
            let mut half = vec![0u8; len / 2];
            let _ = reader.read_exact(&mut half);
            shared.lock().unwrap().log.push(Request {
                path,
                headers,
                body: half,
                action,
            });
            // Unread bytes in the socket: closing it sends a reset.
            return;
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut status = 200;
        {
            let mut g = shared.lock().unwrap();
            g.log.push(Request {
                path: path.clone(),
                headers: headers.clone(),
                body: body.clone(),
                action,
            });
            let verified = match &g.secret {
                None => true,
                Some(s) => headers.get("x-streamforge-signature") == Some(&hmac_hex(s, &body)),
            };
            if !verified {
                g.bad_signatures += 1;
                status = 401;
            } else if matches!(action, Action::Ok | Action::Slow(_) | Action::LostAnswer) {
                let b: Value = serde_json::from_slice(&body).expect("a JSON body");
                apply(g.states.entry(path.clone()).or_default(), &b);
            }
        }
        match action {
            Action::Ok => respond(&mut conn, status, ""),
            Action::Fail(s) => respond(&mut conn, s, ""),
            Action::TooMany(secs) => respond(&mut conn, 429, &format!("Retry-After: {secs}\r\n")),
            Action::Slow(d) => {
                std::thread::sleep(d);
                respond(&mut conn, status, "");
            }
            Action::LostAnswer => return,
            Action::Reset => unreachable!(),
        }
    }
}
