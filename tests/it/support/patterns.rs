//! Helpers for the pattern engine's tests: a document with every feature
//! that reaches the checkpoint state (repeats, `skip_any`, `forbidden`,
//! optional stages, captures referenced by conditions, absence, Doubles,
//! Decimals), a scenario that leaves branches, waits, captured and buffered
//! events in the state, and readable output lines.
#![allow(dead_code)]

use streamforge::patterns::{parse_event, AdvanceOutcome, Document, Engine, Event, Output};

/// Two patterns: `fraud` (login, 1..3 pays of skip_any contiguity, an
/// optional confirm; a logout forbids paying; each pay above the login's
/// amount... no: at least the login's `limit`) and `quiet` (a login not
/// followed by a logout within 500).
pub const DOC: &str = r#"{"patterns": [
  {"name": "fraud", "within": 1000, "skip": "no_skip", "stages": [
    {"name": "login", "where": {"kind": "login"}},
    {"name": "pay", "min": 1, "max": 3, "contiguity": "skip_any",
     "where": {"all": [{"kind": "pay"},
                       {"field": "amount", "op": "ge", "capture": "login", "capture_field": "limit"}]},
     "forbidden": {"kind": "logout"}},
    {"name": "confirm", "min": 0, "where": {"kind": "confirm"}}]},
  {"name": "quiet", "within": 500, "skip": "skip_to_next_start",
   "stages": [{"name": "start", "where": {"kind": "login"}}],
   "absence": {"kind": "logout"}}]}"#;

/// The document.
pub fn doc() -> Document {
    Document::from_json(DOC.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// An event from JSON text.
pub fn ev(json: &str) -> Event {
    parse_event(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// `{"id", "key", "kind", "time", "fields"}` from parts.
pub fn event(id: &str, key: &str, kind: &str, time: i64, fields: &str) -> Event {
    ev(&format!(
        r#"{{"id":"{id}","key":"{key}","kind":"{kind}","time":{time},"fields":{{{fields}}}}}"#
    ))
}

/// The scenario's pushes and advances, in order.
pub enum Step {
    Push(Vec<Event>),
    Advance(i64),
}

/// A scenario exercising everything the state holds; after step 4 the
/// engine has live branches in `fraud` for two keys, absence waits in
/// `quiet`, captured events with Doubles and Decimals, and buffered events.
pub fn scenario() -> Vec<Step> {
    vec![
        Step::Push(vec![
            event("l1", "k1", "login", 10, r#""limit":5,"rate":0.5"#),
            event("p1", "k1", "pay", 20, r#""amount":5,"note":"first""#),
            event(
                "l2",
                "k2",
                "login",
                15,
                r#""limit":1,"d":{"decimal":"-1.50"}"#,
            ),
        ]),
        Step::Push(vec![
            event("p2", "k1", "pay", 30, r#""amount":7,"x":-0.0"#),
            event("p3", "k2", "pay", 30, r#""amount":0"#),
            event("p4", "k2", "pay", 35, r#""amount":2,"b":true"#),
        ]),
        Step::Advance(40),
        Step::Push(vec![
            event("b1", "k1", "pay", 50, r#""amount":9"#),
            event("b2", "k3", "login", 60, r#""limit":1e2"#),
        ]),
        // state of interest: here
        Step::Advance(55),
        Step::Push(vec![
            event("o1", "k2", "logout", 70, ""),
            event("c1", "k1", "confirm", 80, ""),
            event("l4", "k1", "login", 700, r#""limit":0"#),
        ]),
        Step::Advance(600),
        Step::Push(vec![event("p5", "k1", "pay", 900, r#""amount":0"#)]),
        Step::Advance(1200),
    ]
}

/// Runs steps on an engine, returning every output.
pub fn run(engine: &mut Engine, steps: impl IntoIterator<Item = Step>) -> Vec<Output> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Push(events) => {
                engine.push(events).unwrap_or_else(|e| panic!("push: {e}"));
            }
            Step::Advance(w) => {
                let AdvanceOutcome { output, .. } = engine
                    .advance(w)
                    .unwrap_or_else(|e| panic!("advance {w}: {e}"));
                out.extend(output);
            }
        }
    }
    out
}

/// The engine after the first `n` steps of the scenario.
pub fn engine_after(n: usize) -> Engine {
    let mut e = Engine::new(doc());
    run(&mut e, scenario().into_iter().take(n));
    e
}

/// One output as a line: `seq type id end_time`.
pub fn line(o: &Output) -> String {
    format!("{} {} {} {}", o.seq, o.kind.name(), o.id, o.end_time)
}

/// Outputs as lines.
pub fn lines(out: &[Output]) -> Vec<String> {
    out.iter().map(line).collect()
}

/// Splits an envelope into its state text.
pub fn state_text(envelope: &[u8]) -> String {
    let s = String::from_utf8(envelope.to_vec()).expect("utf-8");
    let start = s.find(r#""state":"#).expect("state") + r#""state":"#.len();
    let end = s.rfind(r#","version":1}"#).expect("version");
    s[start..end].to_string()
}

/// An envelope around state text, with its correct checksum.
pub fn envelope(state: &str) -> Vec<u8> {
    format!(
        r#"{{"format":"streamforge-patterns-checkpoint","sha256":"{}","state":{state},"version":1}}"#,
        streamforge::canonical::sha256_hex(state.as_bytes())
    )
    .into_bytes()
}
