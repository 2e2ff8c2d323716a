//! Differential test of the pattern engine against the naive reference model
//! (`patterns_reference`), over seeded random documents and call sequences.
//! Every call's answer is compared exactly: output records as JSON text,
//! error codes and batch indexes, watermark, processed and buffered counts,
//! the status after every call, and, for a rejected advance, the engine's
//! checkpoint before and after (nothing committed).
//!
//! Further properties over the same random inputs:
//!
//! - one advance to `W` gives the same output as many small advances up to
//!   `W` (no limits), and leaves the same state (the same checkpoint bytes);
//! - a checkpoint restored into a fresh engine (possibly under other limits:
//!   they are policy, not state) continues exactly as the reference does
//!   and, with the same limits, as the uninterrupted engine does;
//! - a checkpoint with a flipped bit, truncated, or restored under other
//!   patterns is refused;
//! - a document is written back with every default, and is the same
//!   patterns as itself reordered, with other limits, but not with another
//!   `within`.
//!
//! Environment: `PATTERNS_MODEL_CASES=N` (default 4000) differential cases;
//! the other properties run a fixed fraction of `N` each.
//! `PATTERNS_MODEL_SEED=S` (default 1) is the first seed; case `i` uses seed
//! `S + i`. A failure prints the seed, the document and the calls, shrunk to
//! a smaller failing case when possible;
//! `PATTERNS_MODEL_SEED=<seed> PATTERNS_MODEL_CASES=1` reruns that case.

use crate::support::patterns_reference;

use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use patterns_reference as reference;
use serde_json::{json, Value};
use streamforge::patterns::{self, Document, Engine};

// ----------------------------------------------------------------------
// PRNG: xorshift64*, seeded through splitmix64 so that nearby seeds differ.

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        (self.next() >> 11) % n
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    /// True with probability `pct` / 100.
    fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize].clone()
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ----------------------------------------------------------------------
// Random documents

const KINDS: [&str; 4] = ["A", "B", "C", "D"];
const FIELDS: [&str; 5] = ["i", "d", "m", "s", "b"];
const OPS: [&str; 6] = ["eq", "ne", "lt", "le", "gt", "ge"];

/// Field value tokens as JSON text, by field: the documents compare with
/// them, the events carry them verbatim (so `-0` is an Integer, `1E2` a
/// Double, `"\ud83d\ude00"` the same String as `"😀"`).
fn tokens(f: &str) -> &'static [&'static str] {
    match f {
        "i" => &[
            "-0",
            "0",
            "1",
            "1",
            "2",
            "3",
            "-1",
            "-2",
            "9223372036854775807",
            "-9223372036854775808",
        ],
        "d" => &[
            "1E2",
            "15e-1",
            "-0.0",
            "0.0",
            "0.5",
            "1.0",
            "1.5",
            "-1.0",
            "2.0",
            "2e0",
            "1e300",
            "5e-324",
            "0.30000000000000004",
            "9.226868704665383890e-19",
        ],
        "m" => &[
            r#"{"decimal":"0"}"#,
            r#"{"decimal":"-0"}"#,
            r#"{"decimal":"-0.0"}"#,
            r#"{"decimal":"1"}"#,
            r#"{"decimal":"1.0"}"#,
            r#"{"decimal":"1.50"}"#,
            r#"{"decimal":"1.5"}"#,
            r#"{"decimal":"-1"}"#,
            r#"{"decimal":"2"}"#,
            r#"{"decimal":"0.5"}"#,
            r#"{"decimal":"00.50"}"#,
            r#"{"decimal":"9.99"}"#,
            r#"{"decimal":"0010.0"}"#,
            r#"{"decimal":"12345678901234567890123456789012345678"}"#,
            r#"{"decimal":"-0.0000000000000000000000000000000000001"}"#,
        ],
        "s" => &[
            r#""""#,
            r#""a""#,
            r#""b""#,
            r#""Z""#,
            r#""é""#,
            r#""\"q\"""#,
            r#""back\\slash""#,
            r#""line\nbreak""#,
            r#""\u0001""#,
            r#""\u001f""#,
            r#""\u007f""#,
            r#""\u2028""#,
            r#""😀""#,
            r#""\ud83d\ude00""#,
            r#""\uffff""#,
            r#""\/""#,
        ],
        _ => &["true", "false"],
    }
}

/// A value token for field `f`, usually of the field's own type.
fn token_for(rng: &mut Rng, f: &str) -> &'static str {
    let f = if rng.pct(8) { rng.pick(&FIELDS) } else { f };
    rng.pick(tokens(f))
}

/// A condition's value for field `f`: the same tokens, as a JSON value.
/// Numbers are converted here, not by serde_json, which reads `-0` as a
/// Double and does not round every long literal correctly.
fn value_for(rng: &mut Rng, f: &str) -> Value {
    let t = token_for(rng, f);
    if t.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        if t.contains(['.', 'e', 'E']) {
            json!(t.parse::<f64>().unwrap())
        } else {
            json!(t.parse::<i64>().unwrap())
        }
    } else {
        serde_json::from_str(t).unwrap()
    }
}

/// A random condition; `captures` are the stage names it may reference.
fn condition(rng: &mut Rng, captures: &[String], depth: u32) -> Value {
    let roll = rng.below(100);
    if depth < 3 && roll < 20 {
        let n = rng.below(4);
        let list: Vec<Value> = (0..n)
            .map(|_| condition(rng, captures, depth + 1))
            .collect();
        if rng.pct(50) {
            json!({ "all": list })
        } else {
            json!({ "any": list })
        }
    } else if depth < 3 && roll < 30 {
        json!({"not": condition(rng, captures, depth + 1)})
    } else if roll < 55 {
        json!({"kind": rng.pick(&KINDS)})
    } else if roll < 80 || captures.is_empty() {
        let f = rng.pick(&FIELDS);
        json!({"field": f, "op": rng.pick(&OPS), "value": value_for(rng, f)})
    } else {
        let f = rng.pick(&FIELDS);
        let other = if rng.pct(80) { f } else { rng.pick(&FIELDS) };
        json!({"field": f, "op": rng.pick(&OPS), "capture": rng.pick(captures), "capture_field": other})
    }
}

/// A stage's `where`: mostly a kind, often a kind and a comparison.
fn where_condition(rng: &mut Rng, captures: &[String]) -> Value {
    let kind = json!({"kind": rng.pick(&KINDS[..3])});
    match rng.below(10) {
        0..=4 => kind,
        5..=8 => json!({"all": [kind, condition(rng, captures, 1)]}),
        _ => condition(rng, captures, 0),
    }
}

fn random_document(rng: &mut Rng) -> Value {
    let mut names = vec!["p", "q", "r", "a.b", "Z-1"];
    let n = rng.range(1, 3);
    let mut patterns = Vec::new();
    for _ in 0..n {
        let name = names.remove(rng.below(names.len() as u64) as usize);
        let stage_count = rng.range(1, 4) as usize;
        let mut stages = Vec::new();
        let mut earlier: Vec<String> = Vec::new();
        for i in 0..stage_count {
            let sname = format!("s{i}");
            let max = rng.range(1, 3);
            let min = if i == 0 {
                rng.range(1, max)
            } else {
                rng.range(0, max)
            };
            let mut st = serde_json::Map::new();
            st.insert("name".into(), json!(sname));
            if min != 1 || rng.pct(30) {
                st.insert("min".into(), json!(min));
            }
            if max != 1 || rng.pct(30) {
                st.insert("max".into(), json!(max));
            }
            if rng.pct(70) {
                st.insert(
                    "contiguity".into(),
                    json!(rng.pick(&["strict", "skip_next", "skip_any", "skip_next"])),
                );
            }
            st.insert("where".into(), where_condition(rng, &earlier));
            if rng.pct(25) {
                st.insert("forbidden".into(), condition(rng, &earlier, 1));
            }
            stages.push(Value::Object(st));
            earlier.push(sname);
        }
        let mut p = serde_json::Map::new();
        p.insert("name".into(), json!(name));
        let within = if rng.pct(5) {
            rng.pick(&[1000, reference::MAX_WINDOW])
        } else {
            rng.pick(&[1, 2, 3, 5, 8, 13, 30])
        };
        p.insert("within".into(), json!(within));
        if rng.pct(80) {
            p.insert(
                "skip".into(),
                json!(rng.pick(&["no_skip", "skip_to_next_start", "skip_past_last"])),
            );
        }
        p.insert("stages".into(), Value::Array(stages));
        if rng.pct(20) {
            p.insert("absence".into(), condition(rng, &earlier, 1));
        }
        patterns.push(Value::Object(p));
    }
    let mut d = serde_json::Map::new();
    d.insert("patterns".into(), Value::Array(patterns));
    if rng.pct(15) {
        d.insert(
            "limits".into(),
            json!({"max_results_per_advance": rng.range(1, 4), "active_states": rng.range(1, 8)}),
        );
    }
    Value::Object(d)
}

// ----------------------------------------------------------------------
// Random calls

#[derive(Debug, Clone)]
enum Op {
    Push(Vec<GenEvent>),
    Advance(i64),
    Finish,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Op::Push(events) => {
                let texts: Vec<String> = events.iter().map(GenEvent::text).collect();
                write!(f, "push [{}]", texts.join(","))
            }
            Op::Advance(w) => write!(f, "advance {w}"),
            Op::Finish => write!(f, "finish"),
        }
    }
}

/// An event to push, written out as exact JSON text.
#[derive(Debug, Clone)]
struct GenEvent {
    id: String,
    key: String,
    kind: String,
    time: i64,
    /// `(name, value token)` in the order written; `None`: no `fields`.
    fields: Option<Vec<(String, &'static str)>>,
    /// Write `time` first instead of last.
    time_first: bool,
    /// Write the key's non-ASCII characters as `\u` escapes (the same key).
    key_escaped: bool,
}

/// `s` as a JSON string with every non-ASCII character escaped.
fn escaped(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(out, "\\u{u:04x}").unwrap();
                }
            }
        }
    }
    out.push('"');
    out
}

impl GenEvent {
    fn text(&self) -> String {
        let js = |s: &str| serde_json::to_string(s).unwrap();
        let mut t = String::from("{");
        if self.time_first {
            write!(t, "\"time\":{},", self.time).unwrap();
        }
        write!(
            t,
            "\"id\":{},\"key\":{},\"kind\":{}",
            js(&self.id),
            if self.key_escaped {
                escaped(&self.key)
            } else {
                js(&self.key)
            },
            js(&self.kind)
        )
        .unwrap();
        if !self.time_first {
            write!(t, ",\"time\":{}", self.time).unwrap();
        }
        if let Some(fields) = &self.fields {
            let f: Vec<String> = fields
                .iter()
                .map(|(n, v)| format!("{}:{v}", js(n)))
                .collect();
            write!(t, ",\"fields\":{{{}}}", f.join(",")).unwrap();
        }
        t.push('}');
        t
    }
}

fn random_event(rng: &mut Rng, keys: &[&str], n: &mut u64, time: i64) -> GenEvent {
    *n += 1;
    let mut fields = Vec::new();
    for f in FIELDS {
        if rng.pct(60) {
            fields.push((f.to_string(), token_for(rng, f)));
        }
    }
    // in any order
    for i in (1..fields.len()).rev() {
        fields.swap(i, rng.below(i as u64 + 1) as usize);
    }
    GenEvent {
        id: rng.pick(&["e", "é\"\u{1}", "😀"]).to_string() + &n.to_string(),
        key: rng.pick(keys).to_string(),
        kind: rng.pick(&KINDS).to_string(),
        time,
        fields: (!fields.is_empty() || rng.pct(50)).then_some(fields),
        time_first: rng.pct(20),
        key_escaped: rng.pct(30),
    }
}

/// A random call sequence. `late` allows late pushes and watermark errors;
/// `finish` allows finish calls.
fn random_ops(rng: &mut Rng, count: usize, late: bool, finish: bool) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut wm: i64 = -1; // the watermark if every call succeeds
    let mut n = 0;
    // keys in code point order: "" < "Z" < "a" < "k" < "é" < "😀"
    let keys: &[&str] = if rng.pct(70) {
        &["k", "k", "k", "j", ""]
    } else {
        &["é", "Z", "a", "k", "😀"]
    };
    // now and then, everything happens just below the largest event time
    if rng.pct(5) {
        wm = reference::MAX_EVENT_TIME - rng.range(0, 30);
        ops.push(Op::Advance(wm));
    }
    for i in 0..count {
        let roll = rng.below(100);
        if finish && (i + 1 == count && rng.pct(40) || rng.pct(1)) {
            ops.push(Op::Finish);
            wm = reference::FINAL_WATERMARK;
        } else if roll < 50 {
            let size = rng.range(1, 5);
            let events = (0..size)
                .map(|_| {
                    let time = if late && wm >= 0 && rng.pct(4) {
                        rng.range((wm - 3).max(0), wm)
                    } else {
                        wm + rng.range(1, 9)
                    };
                    let time = time.min(reference::MAX_EVENT_TIME);
                    random_event(rng, keys, &mut n, time)
                })
                .collect();
            ops.push(Op::Push(events));
        } else {
            let w = match rng.below(20) {
                0 if late => wm - rng.range(1, 3),
                1 if late => reference::FINAL_WATERMARK + 1,
                2 => wm,
                3..=5 => wm + rng.range(10, 40),
                _ => wm + rng.range(1, 6),
            };
            if w > wm && w <= reference::FINAL_WATERMARK {
                wm = w;
            }
            ops.push(Op::Advance(w));
        }
    }
    ops
}

// ----------------------------------------------------------------------
// Running both sides

/// One call's answer, in a form both sides share.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Pushed(u64, u64, u64),
    PushRejected(String, usize),
    Advanced(Vec<String>, i64, u64),
    Rejected(String),
}

type StatusView = (i64, u64, u64, u64, Vec<(String, u64, u64, u64)>);

fn engine_status(e: &Engine) -> StatusView {
    let s = e.status();
    (
        s.watermark,
        s.buffered,
        s.next_ordinal,
        s.sequence,
        s.patterns
            .iter()
            .map(|(n, p)| (n.clone(), p.keys, p.branches, p.waits))
            .collect(),
    )
}

fn reference_status(m: &reference::Model) -> StatusView {
    let s = m.status();
    (
        s.watermark,
        s.buffered,
        s.next_ordinal,
        s.sequence,
        s.patterns
            .into_iter()
            .map(|(n, (k, b, w))| (n, k, b, w))
            .collect(),
    )
}

fn engine_call(e: &mut Engine, op: &Op) -> Answer {
    match op {
        Op::Push(events) => {
            let mut parsed = Vec::new();
            for (i, v) in events.iter().enumerate() {
                match patterns::parse_event(v.text().as_bytes()) {
                    Ok(ev) => parsed.push(ev),
                    Err(_) => return Answer::PushRejected("bad_request".into(), i),
                }
            }
            let late = e.first_late(&parsed);
            match e.push(parsed) {
                Ok(o) if late.is_none() => Answer::Pushed(o.first, o.last, o.buffered),
                Ok(_) => Answer::PushRejected("first_late found one, push accepted".into(), 0),
                Err(r) if late == Some(r.index) => {
                    Answer::PushRejected(r.rejection.code().to_string(), r.index)
                }
                Err(r) => Answer::PushRejected(
                    format!("{} (first_late said {late:?})", r.rejection.code()),
                    r.index,
                ),
            }
        }
        Op::Advance(w) => engine_advanced(e.advance(*w)),
        Op::Finish => engine_advanced(e.finish()),
    }
}

fn engine_advanced(r: Result<patterns::AdvanceOutcome, patterns::Rejection>) -> Answer {
    match r {
        Ok(a) => Answer::Advanced(
            a.output
                .iter()
                .map(|o| serde_json::to_string(o).unwrap())
                .collect(),
            a.watermark,
            a.processed,
        ),
        Err(r) => Answer::Rejected(r.code().to_string()),
    }
}

fn reference_call(m: &mut reference::Model, op: &Op) -> Answer {
    let adv = |r: Result<reference::AdvanceOk, &str>| match r {
        Ok(a) => Answer::Advanced(a.output, a.watermark, a.processed),
        Err(code) => Answer::Rejected(code.to_string()),
    };
    match op {
        Op::Push(events) => match m.push_texts(
            &events
                .iter()
                .map(|e| e.text().into_bytes())
                .collect::<Vec<_>>()
                .iter()
                .map(Vec::as_slice)
                .collect::<Vec<_>>(),
        ) {
            Ok(p) => Answer::Pushed(p.first, p.last, p.buffered),
            Err((code, i)) => Answer::PushRejected(code.to_string(), i),
        },
        Op::Advance(w) => adv(m.advance(*w)),
        Op::Finish => adv(m.finish()),
    }
}

fn new_engine(doc: &Value) -> Result<Engine, String> {
    let bytes = serde_json::to_vec(doc).unwrap();
    Document::from_json(&bytes)
        .map(Engine::new)
        .map_err(|e| format!("the engine refuses a valid document: {e}"))
}

/// Where and how the two sides first disagree.
struct Divergence {
    op: usize,
    what: String,
}

/// Runs `ops` on both sides; the first disagreement, if any. An engine
/// panic is a disagreement too.
fn differ(doc: &Value, ops: &[Op]) -> Option<Divergence> {
    let run = || -> Option<Divergence> {
        let mut engine = match new_engine(doc) {
            Ok(e) => e,
            Err(what) => return Some(Divergence { op: 0, what }),
        };
        let mut model = reference::Model::new(doc);
        for (i, op) in ops.iter().enumerate() {
            let want = reference_call(&mut model, op);
            let before = matches!(op, Op::Advance(_) | Op::Finish).then(|| engine.checkpoint());
            let got = engine_call(&mut engine, op);
            if let (Answer::Rejected(code), Some(before)) = (&got, before) {
                if engine.checkpoint() != before {
                    return Some(Divergence {
                        op: i,
                        what: format!("the rejected call ({code}) changed the engine's checkpoint"),
                    });
                }
            }
            if got != want {
                return Some(Divergence {
                    op: i,
                    what: format!("reference: {want:#?}\nengine:    {got:#?}"),
                });
            }
            let (want, got) = (reference_status(&model), engine_status(&engine));
            if got != want {
                return Some(Divergence {
                    op: i,
                    what: format!("status after the call\nreference: {want:?}\nengine:    {got:?}"),
                });
            }
        }
        None
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(d) => d,
        Err(p) => Some(Divergence {
            op: usize::MAX,
            what: format!("panic: {}", panic_text(&p)),
        }),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

// ----------------------------------------------------------------------
// Shrinking and reporting

/// Greedily drops patterns, calls, and events inside pushes while `fails`
/// still holds.
fn shrink(doc: &Value, ops: &[Op], fails: &dyn Fn(&Value, &[Op]) -> bool) -> (Value, Vec<Op>) {
    let mut doc = doc.clone();
    let mut ops = ops.to_vec();
    let mut progress = true;
    while progress {
        progress = false;
        let count = doc["patterns"].as_array().unwrap().len();
        for i in (0..count).rev() {
            if doc["patterns"].as_array().unwrap().len() > 1 {
                let mut d = doc.clone();
                d["patterns"].as_array_mut().unwrap().remove(i);
                if fails(&d, &ops) {
                    doc = d;
                    progress = true;
                }
            }
        }
        // optional keys: dropping them keeps the document valid
        let mut paths: Vec<Vec<Value>> = vec![vec![json!("limits")]];
        for (i, p) in doc["patterns"].as_array().unwrap().iter().enumerate() {
            for k in ["absence", "skip"] {
                paths.push(vec![json!("patterns"), json!(i), json!(k)]);
            }
            for j in 0..p["stages"].as_array().unwrap().len() {
                for k in ["forbidden", "contiguity"] {
                    paths.push(vec![
                        json!("patterns"),
                        json!(i),
                        json!("stages"),
                        json!(j),
                        json!(k),
                    ]);
                }
            }
        }
        for path in paths {
            let mut d = doc.clone();
            let mut at = &mut d;
            for step in &path[..path.len() - 1] {
                at = match step {
                    Value::String(k) => &mut at[k.as_str()],
                    _ => &mut at[step.as_u64().unwrap() as usize],
                };
            }
            let removed = at
                .as_object_mut()
                .unwrap()
                .remove(path[path.len() - 1].as_str().unwrap());
            if removed.is_some() && fails(&d, &ops) {
                doc = d;
                progress = true;
            }
        }
        for i in (0..ops.len()).rev() {
            let mut o = ops.clone();
            o.remove(i);
            if fails(&doc, &o) {
                ops = o;
                progress = true;
            }
        }
        for i in 0..ops.len() {
            let Op::Push(events) = &ops[i] else { continue };
            for j in (0..events.len()).rev() {
                let Op::Push(events) = &ops[i] else { continue };
                if events.len() < 2 {
                    break;
                }
                let mut o = ops.clone();
                if let Op::Push(ev) = &mut o[i] {
                    ev.remove(j);
                }
                if fails(&doc, &o) {
                    ops = o;
                    progress = true;
                }
            }
        }
        // drop fields of pushed events
        for i in 0..ops.len() {
            let Op::Push(events) = ops[i].clone() else {
                continue;
            };
            for j in 0..events.len() {
                let names: Vec<String> = events[j]
                    .fields
                    .iter()
                    .flatten()
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in names {
                    let mut o = ops.clone();
                    if let Op::Push(ev) = &mut o[i] {
                        if let Some(f) = &mut ev[j].fields {
                            f.retain(|(n, _)| *n != name);
                        }
                    }
                    if fails(&doc, &o) {
                        ops = o;
                        progress = true;
                    }
                }
            }
        }
    }
    (doc, ops)
}

fn describe(seed: u64, doc: &Value, ops: &[Op]) -> String {
    let mut s = format!("seed {seed}\ndocument: {doc}\ncalls:\n");
    for (i, op) in ops.iter().enumerate() {
        writeln!(s, "  {i}: {op}").unwrap();
    }
    s
}

// ----------------------------------------------------------------------
// The differential test

fn differential_case(seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed);
    let doc = random_document(&mut rng);
    let count = rng.range(4, 30) as usize;
    let ops = random_ops(&mut rng, count, true, true);
    let d = differ(&doc, &ops)?;
    let mut report = format!(
        "engine and reference disagree\n{}first difference at call {}:\n{}\n",
        describe(seed, &doc, &ops),
        d.op,
        d.what
    );
    let (sdoc, sops) = shrink(&doc, &ops, &|d, o| differ(d, o).is_some());
    if let Some(d) = differ(&sdoc, &sops) {
        write!(
            report,
            "\nshrunk:\n{}difference at call {}:\n{}\n",
            describe(seed, &sdoc, &sops),
            d.op,
            d.what
        )
        .unwrap();
    }
    Some(report)
}

/// Runs `case` for every seed of this test's share and panics with the
/// first few reports.
fn run_cases(name: &str, count: u64, share: (u64, u64), case: &dyn Fn(u64) -> Option<String>) {
    let first = env_u64("PATTERNS_MODEL_SEED", 1);
    let mut failures = Vec::new();
    let mut ran = 0;
    for i in (share.0..count).step_by(share.1 as usize) {
        ran += 1;
        if let Some(r) = case(first + i) {
            failures.push(r);
            if failures.len() >= 3 {
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} failing case(s) among {ran}; the first:\n\n{}",
        failures.len(),
        failures.join("\n----------------------------------------\n")
    );
}

/// `cases() / n`, at least one (so that a single seed reruns everywhere).
fn share(n: u64) -> u64 {
    (cases() / n).max(1)
}

fn cases() -> u64 {
    env_u64("PATTERNS_MODEL_CASES", 4000)
}

#[test]
fn engine_equals_reference_even_seeds() {
    run_cases("differential", cases(), (0, 2), &differential_case);
}

#[test]
fn engine_equals_reference_odd_seeds() {
    run_cases("differential", cases(), (1, 2), &differential_case);
}

// ----------------------------------------------------------------------
// Engine only: one advance == many advances

/// Pushes `pushes`, then advances to `w` in the steps `steps` (the last one
/// is `w`); all answers and the final checkpoint.
fn stepped(
    doc: &Value,
    pushes: &[Op],
    steps: &[i64],
) -> Result<(Vec<String>, StatusView, Vec<u8>), String> {
    let mut e = new_engine(doc)?;
    for p in pushes {
        if let a @ Answer::PushRejected(..) = engine_call(&mut e, p) {
            return Err(format!("push refused: {a:?}"));
        }
    }
    let mut out = Vec::new();
    for &w in steps {
        match engine_call(&mut e, &Op::Advance(w)) {
            Answer::Advanced(o, _, _) => out.extend(o),
            a => return Err(format!("advance({w}): {a:?}")),
        }
    }
    Ok((out, engine_status(&e), e.checkpoint()))
}

fn no_limits(mut doc: Value) -> Value {
    doc.as_object_mut().unwrap().remove("limits");
    doc
}

fn split_advance_case(seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed ^ 0x5A5A_0000);
    let doc = no_limits(random_document(&mut rng));
    let count = rng.range(1, 8) as usize;
    let pushes: Vec<Op> = random_ops(&mut rng, count * 2, false, false)
        .into_iter()
        .filter(|o| matches!(o, Op::Push(_)))
        .collect();
    // every push happens at watermark -1, so none is late
    let target = rng.range(0, 60);
    let mut steps = Vec::new();
    let mut w = -1;
    while w < target {
        w = (w + rng.range(0, 7)).min(target);
        steps.push(w);
    }
    let fails = |d: &Value, p: &[Op]| -> Option<String> {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let one = stepped(d, p, &[target]);
            let many = stepped(d, p, &steps);
            match (one, many) {
                (Ok(a), Ok(b)) if a == b => None,
                (Ok(a), Ok(b)) => Some(format!(
                    "one advance:\n{:#?}\n{:?}\nmany advances {steps:?}:\n{:#?}\n{:?}{}",
                    a.0,
                    a.1,
                    b.0,
                    b.1,
                    if a.2 != b.2 {
                        "\n(and the checkpoints differ)"
                    } else {
                        ""
                    }
                )),
                (a, b) => Some(format!("a call failed: {:?} / {:?}", a.err(), b.err())),
            }
        }));
        r.unwrap_or_else(|p| Some(format!("panic: {}", panic_text(&p))))
    };
    let what = fails(&doc, &pushes)?;
    let (sdoc, sops) = shrink(&doc, &pushes, &|d, o| fails(d, o).is_some());
    Some(format!(
        "one advance to {target} differs from advancing in steps {steps:?}\n{}{what}\n\nshrunk:\n{}{}",
        describe(seed, &doc, &pushes),
        describe(seed, &sdoc, &sops),
        fails(&sdoc, &sops).unwrap_or_default()
    ))
}

#[test]
fn one_advance_equals_many_small_advances() {
    run_cases("split advances", share(3), (0, 1), &split_advance_case);
}

// ----------------------------------------------------------------------
// Checkpoint, restore, continue

/// `doc` with other limits (they are policy: a restore may change them).
fn with_limits(doc: &Value, limits: Option<(i64, i64)>) -> Value {
    let mut d = doc.clone();
    let m = d.as_object_mut().unwrap();
    m.remove("limits");
    if let Some((r, a)) = limits {
        m.insert(
            "limits".into(),
            json!({"max_results_per_advance": r, "active_states": a}),
        );
    }
    d
}

/// Runs `ops[..at]`, checkpoints, lets the engine run on with the rest, then
/// restores the checkpoint under `limits` and runs the rest again. The
/// restored run must equal the reference with its limits switched at `at`,
/// and, when the limits are unchanged, the uninterrupted run.
fn restore_differs(
    doc: &Value,
    ops: &[Op],
    at: usize,
    limits: Option<(i64, i64)>,
) -> Option<String> {
    let r = catch_unwind(AssertUnwindSafe(|| -> Option<String> {
        let at = at.min(ops.len());
        let (before, rest) = ops.split_at(at);
        let mut a = match new_engine(doc) {
            Ok(e) => e,
            Err(what) => return Some(what),
        };
        let mut model = reference::Model::new(doc);
        for op in before {
            engine_call(&mut a, op);
            reference_call(&mut model, op);
        }
        let checkpoint = a.checkpoint();
        let status = engine_status(&a);
        // A new state limit below what a key holds now is covered by its own
        // example in the rules (the engine does not check it on observations
        // that add nothing); here it never goes below the states a pattern
        // holds at the checkpoint.
        let held = status.4.iter().map(|p| p.2 + p.3).max().unwrap_or(0) as i64;
        let limits = limits.map(|(r, s)| (r, s.max(held)));
        // the uninterrupted run goes on before the restore: a checkpoint does
        // not depend on later processing
        let uninterrupted: Vec<(Answer, StatusView)> = rest
            .iter()
            .map(|op| (engine_call(&mut a, op), engine_status(&a)))
            .collect();
        let doc2 = with_limits(doc, limits);
        let document = Document::from_json(&serde_json::to_vec(&doc2).unwrap()).ok()?;
        let mut b = match Engine::restore(&checkpoint, &document) {
            Ok(b) => b,
            Err(e) => return Some(format!("restore refused its own checkpoint: {e}")),
        };
        if engine_status(&b) != status {
            return Some(format!(
                "status after the restore {:?} != before {status:?}",
                engine_status(&b)
            ));
        }
        if b.checkpoint() != checkpoint {
            return Some("the restored engine's checkpoint has other bytes".into());
        }
        let (r, s) = limits.unwrap_or((10_000, 10_000));
        model.set_limits(r as u64, s as u64);
        let same_limits = with_limits(doc, None) == with_limits(&doc2, None)
            && doc.get("limits") == doc2.get("limits");
        for (i, (op, before)) in rest.iter().zip(&uninterrupted).enumerate() {
            let got = (engine_call(&mut b, op), engine_status(&b));
            let want = (reference_call(&mut model, op), reference_status(&model));
            if got != want {
                return Some(format!(
                    "call {} ({op}) after the restore (limits {limits:?}):\nreference: {want:#?}\nrestored:  {got:#?}",
                    at + i
                ));
            }
            if same_limits && &got != before {
                return Some(format!(
                    "call {} ({op}) after the restore:\nuninterrupted: {before:#?}\nrestored:      {got:#?}",
                    at + i
                ));
            }
        }
        None
    }));
    r.unwrap_or_else(|p| Some(format!("panic: {}", panic_text(&p))))
}

fn restore_case(seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed ^ 0xC0FF_EE00);
    let doc = random_document(&mut rng);
    let count = rng.range(4, 30) as usize;
    let ops = random_ops(&mut rng, count, true, true);
    let at = rng.below(ops.len() as u64 + 1) as usize;
    let limits = match rng.below(3) {
        0 => doc.get("limits").map(|l| {
            (
                l["max_results_per_advance"].as_i64().unwrap(),
                l["active_states"].as_i64().unwrap(),
            )
        }),
        1 => None,
        _ => Some((rng.range(1, 4), rng.range(1, 8))),
    };
    let what = restore_differs(&doc, &ops, at, limits)?;
    // shrink the calls after the checkpoint, then those before it
    let (before, after) = ops.split_at(at);
    let (sdoc, safter) = shrink(&doc, after, &|d, o| {
        restore_differs(d, &[before, o].concat(), before.len(), limits).is_some()
    });
    let (sdoc, sbefore) = shrink(&sdoc, before, &|d, o| {
        restore_differs(d, &[o, &safter[..]].concat(), o.len(), limits).is_some()
    });
    let sops = [&sbefore[..], &safter[..]].concat();
    Some(format!(
        "checkpoint after call {at}, restore with limits {limits:?}, continue: differs\n{}{what}\n\n\
         shrunk (checkpoint after call {}):\n{}{}",
        describe(seed, &doc, &ops),
        sbefore.len(),
        describe(seed, &sdoc, &sops),
        restore_differs(&sdoc, &sops, sbefore.len(), limits).unwrap_or_default()
    ))
}

#[test]
fn restore_then_continue_equals_uninterrupted() {
    run_cases("checkpoint/restore", share(3), (0, 1), &restore_case);
}

/// Any flipped bit and any truncation of a checkpoint is refused, as is a
/// restore under other patterns; other whitespace and key order are not.
fn damaged_checkpoint_case(seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed ^ 0xDA3A_6E00);
    let doc = random_document(&mut rng);
    let count = rng.range(4, 30) as usize;
    let ops = random_ops(&mut rng, count, true, false);
    let mut e = new_engine(&doc).ok()?;
    for op in &ops {
        engine_call(&mut e, op);
    }
    let checkpoint = e.checkpoint();
    let document = Document::from_json(&serde_json::to_vec(&doc).unwrap()).ok()?;
    let mut problems = Vec::new();
    // other whitespace and key order: the same state
    let mut text = String::new();
    respelled(&serde_json::from_slice(&checkpoint).unwrap(), &mut text);
    match Engine::restore(text.as_bytes(), &document) {
        Ok(b) if b.checkpoint() == checkpoint => {}
        Ok(_) => problems.push("respelled, it restores another state".into()),
        Err(e) => problems.push(format!("respelled, it is refused: {e}")),
    }
    let mut other = doc.clone();
    let w = other["patterns"][0]["within"].as_i64().unwrap();
    other["patterns"][0]["within"] = json!(w + 1);
    let other = Document::from_json(&serde_json::to_vec(&other).unwrap()).ok()?;
    if Engine::restore(&checkpoint, &other).is_ok() {
        problems.push("restored under a document with another within".into());
    }
    for _ in 0..20 {
        let mut bad = checkpoint.clone();
        let at = rng.below(bad.len() as u64) as usize;
        let bit = rng.below(8);
        bad[at] ^= 1 << bit;
        // The case of a hex digit in a string's `\u` escape is its own
        // example in the rules (the engine accepts it: same string).
        if bit == 5 && in_unicode_escape(&checkpoint, at) && bad[at].is_ascii_alphabetic() {
            continue;
        }
        if Engine::restore(&bad, &document).is_ok() {
            problems.push(format!(
                "bit {bit} of byte {at} flipped ({:?} -> {:?}) is accepted",
                checkpoint[at] as char, bad[at] as char
            ));
        }
        let cut = rng.below(checkpoint.len() as u64) as usize;
        if Engine::restore(&checkpoint[..cut], &document).is_ok() {
            problems.push(format!("truncated to {cut} bytes, it is accepted"));
        }
    }
    if problems.is_empty() {
        return None;
    }
    Some(format!(
        "{}checkpoint: {}\n{}",
        describe(seed, &doc, &ops),
        String::from_utf8_lossy(&checkpoint),
        problems.join("\n")
    ))
}

/// `v` written with every object's keys in reverse order and whitespace
/// around every token.
fn respelled(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push_str("{ ");
            for (i, (k, x)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n ");
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(" :\t");
                respelled(x, out);
            }
            out.push_str(" }");
        }
        Value::Array(a) => {
            out.push_str("[ ");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                respelled(x, out);
            }
            out.push_str(" ]");
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Whether `bytes[at]` is one of the four hex digits of a `\uXXXX` escape.
fn in_unicode_escape(bytes: &[u8], at: usize) -> bool {
    (2..=5).any(|k| {
        at > k
            && bytes[at - k] == b'u'
            && bytes[at - k - 1] == b'\\'
            && at - k + 4 < bytes.len()
            && bytes[at - k + 1..=at - k + 4]
                .iter()
                .all(u8::is_ascii_hexdigit)
    })
}

#[test]
fn a_damaged_checkpoint_is_refused_a_respelled_one_restored() {
    run_cases(
        "damaged checkpoints",
        share(20),
        (0, 1),
        &damaged_checkpoint_case,
    );
}

// ----------------------------------------------------------------------
// Documents written back

/// The document as `GET /patterns` shows it, derived from the contract:
/// every default written out, patterns by name, the limits in force, an
/// absent `forbidden` or `absence` omitted.
fn with_defaults(doc: &Value) -> Value {
    let mut patterns = doc["patterns"].as_array().unwrap().clone();
    patterns.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    for p in &mut patterns {
        let p = p.as_object_mut().unwrap();
        p.entry("skip").or_insert(json!("no_skip"));
        for st in p["stages"].as_array_mut().unwrap() {
            let st = st.as_object_mut().unwrap();
            st.entry("min").or_insert(json!(1));
            st.entry("max").or_insert(json!(1));
            st.entry("contiguity").or_insert(json!("skip_next"));
        }
    }
    let limit = |name: &str| doc["limits"][name].as_u64().unwrap_or(10_000);
    json!({
        "patterns": patterns,
        "limits": {
            "max_results_per_advance": limit("max_results_per_advance"),
            "active_states": limit("active_states"),
        }
    })
}

fn document_case(seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed ^ 0xD0C0_0000);
    let doc = random_document(&mut rng);
    let r = catch_unwind(AssertUnwindSafe(|| -> Option<String> {
        let d = match Document::from_json(&serde_json::to_vec(&doc).unwrap()) {
            Ok(d) => d,
            Err(e) => return Some(format!("refused: {e}")),
        };
        let written = d.to_json();
        let got: Value = serde_json::from_slice(&written).ok()?;
        if got != with_defaults(&doc) {
            return Some(format!(
                "written back as {got}\nexpected {}",
                with_defaults(&doc)
            ));
        }
        let again = Document::from_json(&written).ok()?;
        if again.to_json() != written {
            return Some("writing back the written document changes it".into());
        }
        if !d.same_patterns(&again) {
            return Some("not the same patterns as its own written form".into());
        }
        // other order, other limits: the same patterns
        let mut reordered = doc.clone();
        reordered["patterns"].as_array_mut().unwrap().reverse();
        reordered["limits"] = json!({"max_results_per_advance": 7});
        let reordered = Document::from_json(&serde_json::to_vec(&reordered).unwrap()).ok()?;
        if !d.same_patterns(&reordered) {
            return Some("reordered patterns or other limits make other patterns".into());
        }
        // a different within: other patterns
        let mut changed = doc.clone();
        let w = changed["patterns"][0]["within"].as_i64().unwrap();
        changed["patterns"][0]["within"] = json!(w + 1);
        let changed = Document::from_json(&serde_json::to_vec(&changed).unwrap()).ok()?;
        if d.same_patterns(&changed) {
            return Some("a changed within is the same patterns".into());
        }
        None
    }));
    let what = r.unwrap_or_else(|p| Some(format!("panic: {}", panic_text(&p))))?;
    Some(format!("seed {seed}\ndocument: {doc}\n{what}"))
}

#[test]
fn documents_are_written_back_with_every_default() {
    run_cases("documents", share(5), (0, 1), &document_case);
}

// ----------------------------------------------------------------------
// A live document change (`PUT /patterns`): a change at watermark W keeps
// the state of the unchanged patterns (their output equals an engine that
// never changed), and a new pattern's output equals the reference model of
// a fresh engine for it fed the events processed after W (the ones still
// buffered at the change, then every later push), up to ordinals: the
// fresh engine numbers its events from 1.

/// `rec` (a record's JSON text) as a value without `seq`, its ordinals (in
/// `id` and the captures) mapped by `map` (identity when `None`); and its
/// pattern.
fn change_view(rec: &str, map: Option<&[u64]>) -> (String, Value) {
    let mut v: Value = serde_json::from_str(rec).expect("a record");
    let o = v.as_object_mut().expect("an object");
    o.remove("seq");
    let ord = |n: u64| map.map_or(n, |m| m[n as usize - 1]);
    if let Some(id) = o.get("id").and_then(Value::as_str).map(str::to_string) {
        let (name, ords) = id.rsplit_once(':').expect("pattern:ordinals");
        // stages by `/`, the ordinals of a stage by `.`
        let ords: Vec<String> = ords
            .split('/')
            .map(|stage| {
                stage
                    .split('.')
                    .map(|s| {
                        s.parse::<u64>()
                            .map_or(s.to_string(), |n| ord(n).to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(".")
            })
            .collect();
        o.insert("id".into(), json!(format!("{name}:{}", ords.join("/"))));
    }
    if let Some(Value::Object(caps)) = o.get_mut("captures") {
        for list in caps.values_mut() {
            for ev in list.as_array_mut().into_iter().flatten() {
                if let Some(n) = ev["ordinal"].as_u64() {
                    ev["ordinal"] = json!(ord(n));
                }
            }
        }
    }
    let pattern = o["pattern"].as_str().expect("pattern").to_string();
    (pattern, v)
}

fn change_case(seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed);
    let d1 = no_limits(random_document(&mut rng));
    let other = random_document(&mut rng);
    let ops = random_ops(&mut rng, 30, false, false);
    let at = rng.below(ops.len() as u64 + 1) as usize;
    let mut kept: Vec<Value> = d1["patterns"].as_array().unwrap().clone();
    if kept.len() > 1 && rng.pct(50) {
        kept.remove(rng.below(kept.len() as u64) as usize);
    }
    let fresh: Vec<Value> = other["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let mut p = p.clone();
            p["name"] = json!(format!("n{}", p["name"].as_str().unwrap()));
            p
        })
        .collect();
    // no limit in the way: a refused advance is not this property's case
    let roomy = json!({"max_results_per_advance": 1_000_000, "active_states": 1_000_000});
    let d2 = json!({"patterns": kept.iter().chain(&fresh).cloned().collect::<Vec<_>>(), "limits": roomy});
    let dnew = json!({"patterns": fresh, "limits": roomy});
    let names = |ps: &[Value]| -> Vec<String> {
        let mut n: Vec<String> = ps
            .iter()
            .map(|p| p["name"].as_str().unwrap().into())
            .collect();
        n.sort();
        n
    };
    let describe = |what: String| {
        Some(format!(
            "seed {seed}\ndocument: {d1}\nchanged to: {d2} before call {at}\ncalls:\n{}\n{what}",
            ops.iter().map(|o| format!("  {o}\n")).collect::<String>()
        ))
    };
    // Only call sequences every engine accepts whole (no limits reached).
    let run = |e: &mut Engine, ops: &[Op], out: &mut Vec<String>| -> bool {
        ops.iter().all(|op| match engine_call(e, op) {
            Answer::Advanced(o, _, _) => {
                out.extend(o);
                true
            }
            Answer::Pushed(..) => true,
            _ => false,
        })
    };
    let (mut e, mut a) = (new_engine(&d1).ok()?, new_engine(&d1).ok()?);
    let (mut out_e, mut out_a) = (Vec::new(), Vec::new());
    if !run(&mut e, &ops[..at], &mut out_e) || !run(&mut a, &ops, &mut out_a) {
        return None;
    }
    let w = e.watermark();
    let next = e.status().next_ordinal;
    let doc2 = Document::from_json(&serde_json::to_vec(&d2).unwrap()).expect("valid");
    let change = e.change_document(doc2);
    let fresh_names = names(&fresh);
    if change.kept != names(&kept) || change.started != fresh_names {
        return describe(format!("the change says {change:?}"));
    }
    let before = out_e.len();
    if !run(&mut e, &ops[at..], &mut out_e) {
        return describe("a call after the change was refused".into());
    }
    // (a) the kept patterns, as if nothing had changed
    let kept_names = names(&kept);
    let view = |recs: &[String], only: &[String], map: Option<&[u64]>| -> Vec<Value> {
        recs.iter()
            .map(|r| change_view(r, map))
            .filter(|(p, _)| only.contains(p))
            .map(|(_, v)| v)
            .collect()
    };
    if view(&out_e, &kept_names, None) != view(&out_a, &kept_names, None) {
        return describe("a kept pattern's output differs from an unchanged engine's".into());
    }
    // (b) the new patterns: the reference model of a fresh engine fed the
    // events processed after the change
    let mut m = reference::Model::new(&dnew);
    let mut map: Vec<u64> = Vec::new(); // the model's ordinal - 1 -> the engine's
    let mut ordinal = 0u64;
    let buffered: Vec<String> = ops[..at]
        .iter()
        .flat_map(|op| match op {
            Op::Push(evs) => evs.clone(),
            _ => Vec::new(),
        })
        .filter_map(|ev| {
            ordinal += 1;
            (ev.time > w).then(|| {
                map.push(ordinal);
                ev.text()
            })
        })
        .collect();
    if ordinal + 1 != next {
        return describe(format!("{ordinal} events pushed, next ordinal {next}"));
    }
    if !buffered.is_empty() {
        let texts: Vec<&[u8]> = buffered.iter().map(|t| t.as_bytes()).collect();
        if m.push_texts(&texts).is_err() {
            return describe("the model refuses the buffered events".into());
        }
    }
    let mut out_m = Vec::new();
    for op in &ops[at..] {
        if let Op::Push(evs) = op {
            for _ in evs {
                ordinal += 1;
                map.push(ordinal);
            }
        }
        match reference_call(&mut m, op) {
            Answer::Advanced(o, _, _) => out_m.extend(o),
            Answer::Pushed(..) => {}
            other => return describe(format!("the model refuses {op}: {other:?}")),
        }
    }
    let new_e = view(&out_e[before..], &fresh_names, None);
    let new_m = view(&out_m, &fresh_names, Some(&map));
    if new_e != new_m {
        return describe(format!(
            "the new patterns' output differs from a fresh reference model's:\nengine: {new_e:?}\nmodel:  {new_m:?}"
        ));
    }
    None
}

#[test]
fn a_live_change_keeps_unchanged_patterns_and_starts_new_ones_fresh() {
    run_cases("document change", share(8), (0, 1), &change_case);
}
