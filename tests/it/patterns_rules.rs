//! Readable examples of every pattern-detection rule, each run against both
//! the naive reference model (`patterns_reference`) and the engine
//! (`streamforge::patterns`).
//!
//! Every expectation is written out by hand from the rule it illustrates:
//! the output records are given as literal JSON (`m(..)` / `t(..)` write the
//! record without its `captures`, whose structure is checked separately
//! against the record's `id` and the pushed events), push and advance answers
//! as literal numbers and error codes. Neither implementation computes an
//! expectation.

use crate::support::patterns_reference;

use patterns_reference as reference;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use streamforge::patterns::{self, Document, Engine};

// ----------------------------------------------------------------------
// Harness

/// What one call answered, in a form both implementations share.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Pushed {
        first: u64,
        last: u64,
        buffered: u64,
    },
    /// A rejected push: code and item index.
    PushRejected(String, usize),
    Advanced {
        output: Vec<String>,
        watermark: i64,
        processed: u64,
    },
    Rejected(String),
}

/// `(watermark, buffered, next_ordinal, sequence, [(pattern, keys, branches, waits)])`.
type StatusView = (i64, u64, u64, u64, Vec<(String, u64, u64, u64)>);

trait Side {
    fn label(&self) -> &'static str;
    fn push(&mut self, items: &[&[u8]]) -> Answer;
    fn advance(&mut self, w: i64) -> Answer;
    fn finish(&mut self) -> Answer;
    fn status(&self) -> StatusView;
    /// Opaque bytes that are equal exactly when the states are equal, if the
    /// side has them (the engine's checkpoint); used to check that a
    /// rejected call changed nothing.
    fn state_bytes(&self) -> Option<Vec<u8>>;
}

struct Reference(reference::Model);

impl Side for Reference {
    fn label(&self) -> &'static str {
        "reference"
    }
    fn push(&mut self, items: &[&[u8]]) -> Answer {
        match self.0.push_texts(items) {
            Ok(p) => Answer::Pushed {
                first: p.first,
                last: p.last,
                buffered: p.buffered,
            },
            Err((code, i)) => Answer::PushRejected(code.to_string(), i),
        }
    }
    fn advance(&mut self, w: i64) -> Answer {
        adv_answer(self.0.advance(w))
    }
    fn finish(&mut self) -> Answer {
        adv_answer(self.0.finish())
    }
    fn status(&self) -> StatusView {
        let s = self.0.status();
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
    fn state_bytes(&self) -> Option<Vec<u8>> {
        None
    }
}

fn adv_answer(r: Result<reference::AdvanceOk, &'static str>) -> Answer {
    match r {
        Ok(a) => Answer::Advanced {
            output: a.output,
            watermark: a.watermark,
            processed: a.processed,
        },
        Err(code) => Answer::Rejected(code.to_string()),
    }
}

/// An object's entries in the order written.
struct Entries(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(e) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push(e);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Removes the whitespace outside strings, so that an expectation can be
/// written over several lines and still be compared byte for byte.
fn compact(s: &str) -> String {
    let mut out = String::new();
    let (mut in_str, mut escaped) = (false, false);
    for c in s.chars() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if !c.is_whitespace() {
            if c == '"' {
                in_str = true;
            }
            out.push(c);
        }
    }
    out
}

/// One scenario: a document, then calls, each made on both sides and checked
/// against the literal expectation.
struct Scenario {
    sides: Vec<Box<dyn Side>>,
    /// Stage names of each pattern, from the document.
    stages: Vec<(String, Vec<String>)>,
    /// Every successfully pushed item, by ordinal - 1.
    pushed: Vec<serde_json::Value>,
}

impl Scenario {
    fn new(doc: &str) -> Scenario {
        let value: serde_json::Value = serde_json::from_str(doc).expect("test document is JSON");
        let stages = value["patterns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["stages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s["name"].as_str().unwrap().to_string())
                        .collect(),
                )
            })
            .collect();
        let mut sides: Vec<Box<dyn Side>> =
            vec![Box::new(Reference(reference::Model::new(&value)))];
        sides.extend(engine_side(doc));
        Scenario {
            sides,
            stages,
            pushed: Vec::new(),
        }
    }

    fn each(
        &mut self,
        what: &str,
        f: &dyn Fn(&mut dyn Side) -> Answer,
    ) -> Vec<(&'static str, Answer)> {
        let mut out = Vec::new();
        for side in &mut self.sides {
            let before_status = side.status();
            let before_bytes = side.state_bytes();
            let a = f(side.as_mut());
            if matches!(a, Answer::Rejected(_) | Answer::PushRejected(..)) {
                assert_eq!(
                    side.status(),
                    before_status,
                    "{}: a rejected {what} changed the status",
                    side.label()
                );
                assert_eq!(
                    side.state_bytes(),
                    before_bytes,
                    "{}: a rejected {what} changed the state",
                    side.label()
                );
            }
            out.push((side.label(), a));
        }
        out
    }

    /// Pushes a batch (each string one item) and expects `first..=last` and
    /// `buffered`.
    fn push(&mut self, items: &[String], first: u64, last: u64, buffered: u64) {
        let want = Answer::Pushed {
            first,
            last,
            buffered,
        };
        let bytes: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
        for (label, got) in self.each("push", &|s| s.push(&bytes)) {
            assert_eq!(got, want, "{label}: push {items:?}");
        }
        for i in items {
            self.pushed.push(serde_json::from_str(i).unwrap());
        }
    }

    /// Pushes a batch that must be rejected with `code` at item `index`.
    fn push_rejected(&mut self, items: &[String], code: &str, index: usize) {
        self.push_rejected_because(items, code, index, "");
    }

    fn push_rejected_because(&mut self, items: &[String], code: &str, index: usize, why: &str) {
        let want = Answer::PushRejected(code.to_string(), index);
        let bytes: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
        for (label, got) in self.each("push", &|s| s.push(&bytes)) {
            assert_eq!(got, want, "{label}: {why}: push {items:?}");
        }
    }

    /// Advances to `w`, expecting exactly these records (see `m` / `t`).
    fn advance(&mut self, w: i64, processed: u64, want: &[String]) {
        let answers = self.each("advance", &|s| s.advance(w));
        self.check_output(&format!("advance({w})"), answers, w, processed, want);
    }

    fn finish(&mut self, processed: u64, want: &[String]) {
        let answers = self.each("finish", &|s| s.finish());
        self.check_output("finish", answers, FINAL, processed, want);
    }

    fn advance_rejected(&mut self, w: i64, code: &str) {
        for (label, got) in self.each("advance", &|s| s.advance(w)) {
            assert_eq!(got, Answer::Rejected(code.into()), "{label}: advance({w})");
        }
    }

    fn check_output(
        &self,
        what: &str,
        answers: Vec<(&'static str, Answer)>,
        w: i64,
        processed: u64,
        want: &[String],
    ) {
        for (label, got) in answers {
            let Answer::Advanced {
                output,
                watermark,
                processed: p,
            } = got
            else {
                panic!("{label}: {what} failed: {got:?}");
            };
            let heads: Vec<String> = output.iter().map(|o| self.head_checked(label, o)).collect();
            let want: Vec<String> = want.iter().map(|s| compact(s)).collect();
            assert_eq!(
                heads, want,
                "{label}: {what}: output records\nfull: {output:#?}"
            );
            assert_eq!(
                (watermark, p),
                (w, processed),
                "{label}: {what}: watermark, processed"
            );
        }
    }

    /// The record without its `captures`, after checking that the captures
    /// list every stage in pattern order, hold the ordinals the id names, and
    /// echo the pushed events.
    fn head_checked(&self, label: &str, record: &str) -> String {
        let cut = record
            .find(",\"captures\":")
            .unwrap_or_else(|| panic!("{label}: no captures in {record}"));
        let head = format!("{}}}", &record[..cut]);
        let v: serde_json::Value = serde_json::from_str(record).unwrap();
        let pattern = v["pattern"].as_str().unwrap();
        let id = v["id"].as_str().unwrap();
        let (_, stages) = self
            .stages
            .iter()
            .find(|(n, _)| n == pattern)
            .unwrap_or_else(|| panic!("{label}: unknown pattern in {record}"));
        let caps: Entries =
            serde_json::from_str(&record[cut + ",\"captures\":".len()..record.len() - 1]).unwrap();
        let names: Vec<&str> = caps.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, *stages, "{label}: capture stages of {record}");
        let id_lists: Vec<&str> = id.split_once(':').unwrap().1.split('/').collect();
        assert_eq!(id_lists.len(), stages.len(), "{label}: id {id}");
        for ((_, raw), list) in caps.0.iter().zip(id_lists) {
            let events: Vec<serde_json::Value> = serde_json::from_str(raw.get()).unwrap();
            let ordinals: Vec<String> = events.iter().map(|e| e["ordinal"].to_string()).collect();
            assert_eq!(
                ordinals.join("."),
                list,
                "{label}: id {id} vs captures in {record}"
            );
            for e in &events {
                let o = e["ordinal"].as_u64().unwrap() as usize;
                let pushed = &self.pushed[o - 1];
                for f in ["id", "key", "kind", "time"] {
                    assert_eq!(e[f], pushed[f], "{label}: echo of {f} in {record}");
                }
            }
        }
        head
    }

    fn status(&self, want: StatusView) {
        for side in &self.sides {
            assert_eq!(side.status(), want, "{}: status", side.label());
        }
    }
}

const FINAL: i64 = reference::FINAL_WATERMARK;

/// A match record without its captures.
fn m(seq: u64, id: &str, key: &str, start: i64, end: i64, last: i64, deadline: i64) -> String {
    record(seq, "match", id, key, start, end, last, deadline)
}

/// A timeout record without its captures.
fn t(seq: u64, id: &str, key: &str, start: i64, end: i64, last: i64, deadline: i64) -> String {
    record(seq, "timeout", id, key, start, end, last, deadline)
}

#[allow(clippy::too_many_arguments)]
fn record(
    seq: u64,
    kind: &str,
    id: &str,
    key: &str,
    start: i64,
    end: i64,
    last: i64,
    deadline: i64,
) -> String {
    let pattern = id.split_once(':').unwrap().0;
    format!(
        r#"{{"seq":{seq},"type":"{kind}","id":"{id}","pattern":"{pattern}","key":{},"start_time":{start},"end_time":{end},"last_event_time":{last},"deadline":{deadline}}}"#,
        serde_json::to_string(key).unwrap()
    )
}

/// An event of `key`, `kind` at `time`, no fields; its id is `kind` + `time`.
fn ev(key: &str, kind: &str, time: i64) -> String {
    format!(r#"{{"id":"{kind}{time}","key":"{key}","kind":"{kind}","time":{time}}}"#)
}

/// The same with a `fields` object written as JSON text.
fn evf(key: &str, kind: &str, time: i64, fields: &str) -> String {
    format!(
        r#"{{"id":"{kind}{time}","key":"{key}","kind":"{kind}","time":{time},"fields":{fields}}}"#
    )
}

/// A document of these patterns (JSON texts) and no limits.
fn doc(patterns: &[&str]) -> String {
    format!(r#"{{"patterns":[{}]}}"#, patterns.join(","))
}

/// Pattern `name` of `within`, one stage per `(name, kind)`, all defaults.
fn seq_pattern(name: &str, within: i64, stages: &[(&str, &str)]) -> String {
    let stages: Vec<String> = stages
        .iter()
        .map(|(n, k)| format!(r#"{{"name":"{n}","where":{{"kind":"{k}"}}}}"#))
        .collect();
    format!(
        r#"{{"name":"{name}","within":{within},"stages":[{}]}}"#,
        stages.join(",")
    )
}

struct EngineSide(Engine);

impl Side for EngineSide {
    fn label(&self) -> &'static str {
        "engine"
    }
    /// The batch rule as the service applies it with the engine's pieces:
    /// items are parsed in order up to the first malformed one; a late item
    /// before it wins, otherwise the malformed one does.
    fn push(&mut self, items: &[&[u8]]) -> Answer {
        let mut parsed = Vec::new();
        let mut malformed = None;
        for (i, t) in items.iter().enumerate() {
            match patterns::parse_event(t) {
                Ok(e) => parsed.push(e),
                Err(_) => {
                    malformed = Some(i);
                    break;
                }
            }
        }
        let late = self.0.first_late(&parsed);
        if late.is_none() {
            if let Some(i) = malformed {
                return Answer::PushRejected("bad_request".into(), i);
            }
        }
        match self.0.push(parsed) {
            Ok(o) => {
                assert_eq!(late, None, "engine: push accepted a late event");
                Answer::Pushed {
                    first: o.first,
                    last: o.last,
                    buffered: o.buffered,
                }
            }
            Err(r) => {
                if r.rejection.code() == "late_event" {
                    assert_eq!(late, Some(r.index), "engine: first_late and push disagree");
                }
                Answer::PushRejected(r.rejection.code().to_string(), r.index)
            }
        }
    }
    fn advance(&mut self, w: i64) -> Answer {
        engine_answer(self.0.advance(w))
    }
    fn finish(&mut self) -> Answer {
        engine_answer(self.0.finish())
    }
    fn status(&self) -> StatusView {
        let s = self.0.status();
        assert_eq!(
            (
                self.0.watermark(),
                self.0.buffered(),
                self.0.next_ordinal(),
                self.0.sequence()
            ),
            (s.watermark, s.buffered, s.next_ordinal, s.sequence),
            "engine: accessors and status disagree"
        );
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
    fn state_bytes(&self) -> Option<Vec<u8>> {
        Some(self.0.checkpoint())
    }
}

fn engine_answer(r: Result<patterns::AdvanceOutcome, patterns::Rejection>) -> Answer {
    match r {
        Ok(a) => Answer::Advanced {
            output: a
                .output
                .iter()
                .map(|o| serde_json::to_string(o).unwrap())
                .collect(),
            watermark: a.watermark,
            processed: a.processed,
        },
        Err(r) => Answer::Rejected(r.code().to_string()),
    }
}

fn engine_side(doc: &str) -> Vec<Box<dyn Side>> {
    let d = Document::from_json(doc.as_bytes())
        .unwrap_or_else(|e| panic!("engine: the document is refused: {e}\n{doc}"));
    vec![Box::new(EngineSide(Engine::new(d)))]
}

// ----------------------------------------------------------------------
// Output records

/// The whole record, byte for byte: field order, every stage in pattern
/// order (an empty one as `[]`), the id's `/` and `.`, each field type echoed
/// as pushed (a Double always with a fraction or exponent, `-0.0` kept, a
/// Decimal as its string, `1E2` a Double, `-0` an Integer).
#[test]
fn a_match_record_is_written_out_in_full() {
    let mut s = Scenario::new(
        r#"{"patterns":[{"name":"fraud","within":600000,"stages":[
            {"name":"login","where":{"kind":"login"}},
            {"name":"spend","min":1,"max":2,"where":{"kind":"spend"}},
            {"name":"logout","min":0,"where":{"kind":"logout"}}]}]}"#,
    );
    s.push(
        &[
            r#"{"id":"e1","key":"acct-7","kind":"login","time":1000,"fields":{"ok":false,"amount":12}}"#.into(),
            r#"{"id":"e2","key":"acct-7","kind":"spend","time":1500,"fields":{"amount":2.0,"rate":-0.0,"big":1e300,"fee":{"decimal":"-12.50"}}}"#.into(),
            r#"{"id":"e3","key":"acct-7","kind":"spend","time":1800,"fields":{"note":"caf\u00e9 \"x\"","n":-0,"e":1E2}}"#.into(),
        ],
        1,
        3,
        3,
    );
    for side in &mut s.sides {
        let Answer::Advanced { output, .. } = side.advance(1800) else {
            panic!("{}: advance failed", side.label());
        };
        let want = [
            // the first spend already completes: logout is optional
            r#"{"seq":1,"type":"match","id":"fraud:1/2/","pattern":"fraud","key":"acct-7",
               "start_time":1000,"end_time":1500,"last_event_time":1500,"deadline":601000,
               "captures":{
                 "login":[{"ordinal":1,"id":"e1","key":"acct-7","kind":"login","time":1000,
                           "fields":{"ok":false,"amount":12}}],
                 "spend":[{"ordinal":2,"id":"e2","key":"acct-7","kind":"spend","time":1500,
                           "fields":{"amount":2.0,"rate":-0.0,"big":1e+300,"fee":{"decimal":"-12.50"}}}],
                 "logout":[]}}"#,
            r#"{"seq":2,"type":"match","id":"fraud:1/2.3/","pattern":"fraud","key":"acct-7",
               "start_time":1000,"end_time":1800,"last_event_time":1800,"deadline":601000,
               "captures":{
                 "login":[{"ordinal":1,"id":"e1","key":"acct-7","kind":"login","time":1000,
                           "fields":{"ok":false,"amount":12}}],
                 "spend":[{"ordinal":2,"id":"e2","key":"acct-7","kind":"spend","time":1500,
                           "fields":{"amount":2.0,"rate":-0.0,"big":1e+300,"fee":{"decimal":"-12.50"}}},
                          {"ordinal":3,"id":"e3","key":"acct-7","kind":"spend","time":1800,
                           "fields":{"note":"café \"x\"","n":0,"e":100.0}}],
                 "logout":[]}}"#,
        ];
        let want: Vec<String> = want.iter().map(|w| compact(w)).collect();
        assert_eq!(output, want, "{}", side.label());
    }
    // both remaining branches (waiting for logout) are complete: they expire
    // silently at 601000
    s.finish(0, &[]);
}

#[test]
fn a_timeout_record_is_written_out_in_full() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    s.push(&[evf("k", "A", 1, r#"{"x":1.5}"#)], 1, 1, 1);
    s.advance(10, 1, &[]);
    for side in &mut s.sides {
        let Answer::Advanced { output, .. } = side.advance(11) else {
            panic!("{}: advance failed", side.label());
        };
        let want = compact(
            r#"{"seq":1,"type":"timeout","id":"p:1/","pattern":"p","key":"k",
                "start_time":1,"end_time":11,"last_event_time":1,"deadline":11,
                "captures":{"a":[{"ordinal":1,"id":"A1","key":"k","kind":"A","time":1,"fields":{"x":1.5}}],
                            "b":[]}}"#,
        );
        assert_eq!(output, vec![want], "{}", side.label());
    }
}

// ----------------------------------------------------------------------
// Pushes, ordinals, watermarks

#[test]
fn a_push_only_buffers_and_ordinals_run_across_keys() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.push(&[ev("k1", "A", 5), ev("k2", "A", 3)], 1, 2, 2);
    s.push(&[ev("k1", "A", 9)], 3, 3, 3);
    s.status((-1, 3, 4, 0, vec![("p".into(), 0, 0, 0)]));
    // only events with time <= W are taken, in (time, ordinal) order
    s.advance(
        5,
        2,
        &[
            m(1, "p:2", "k2", 3, 3, 3, 13),
            m(2, "p:1", "k1", 5, 5, 5, 15),
        ],
    );
    s.status((5, 1, 4, 2, vec![("p".into(), 0, 0, 0)]));
    s.advance(9, 1, &[m(3, "p:3", "k1", 9, 9, 9, 19)]);
}

#[test]
fn equal_events_are_two_occurrences() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.push(&[ev("k", "A", 1), ev("k", "A", 1)], 1, 2, 2);
    s.push(&[ev("k", "A", 1)], 3, 3, 3);
    s.advance(
        1,
        3,
        &[
            m(1, "p:1", "k", 1, 1, 1, 11),
            m(2, "p:2", "k", 1, 1, 1, 11),
            m(3, "p:3", "k", 1, 1, 1, 11),
        ],
    );
}

#[test]
fn a_late_event_rejects_its_whole_batch_with_its_index() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.push(&[ev("k", "A", 0)], 1, 1, 1); // watermark -1: time 0 is not late
    s.advance(5, 1, &[m(1, "p:1", "k", 0, 0, 0, 10)]);
    // time == watermark is late; the batch is atomic: nothing buffered, no ordinal used
    s.push_rejected(
        &[ev("k", "A", 6), ev("k", "A", 5), ev("k", "A", 7)],
        "late_event",
        1,
    );
    s.push_rejected(&[ev("k", "A", 2)], "late_event", 0);
    s.status((5, 0, 2, 1, vec![("p".into(), 0, 0, 0)]));
    s.push(&[ev("k", "A", 6)], 2, 2, 1);
    s.advance(6, 1, &[m(2, "p:2", "k", 6, 6, 6, 16)]);
}

#[test]
fn an_empty_batch_is_an_invalid_request() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.push_rejected(&[], "invalid_request", 0);
    s.push(&[ev("k", "A", 1)], 1, 1, 1);
}

#[test]
fn the_first_failing_item_decides_between_malformed_and_late() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.advance(5, 0, &[]);
    let bad = r#"{"id":"x","key":"k","kind":"A","time":9,"fields":{"v":null}}"#.to_string();
    let bad_and_late =
        r#"{"id":"x","key":"k","kind":"A","time":1,"fields":{"v":null}}"#.to_string();
    s.push_rejected(
        &[ev("k", "A", 6), ev("k", "A", 5), bad.clone()],
        "late_event",
        1,
    );
    s.push_rejected(
        &[ev("k", "A", 6), bad.clone(), ev("k", "A", 5)],
        "bad_request",
        1,
    );
    // a malformed item is malformed whatever its time
    s.push_rejected(&[bad_and_late.clone(), ev("k", "A", 5)], "bad_request", 0);
    s.push_rejected(
        &[ev("k", "A", 6), ev("k", "A", 7), bad_and_late],
        "bad_request",
        2,
    );
    s.status((5, 0, 1, 0, vec![("p".into(), 0, 0, 0)]));
}

#[test]
fn watermark_rules() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.advance(-1, 0, &[]); // equal to the initial watermark: a no-op
    s.advance_rejected(-2, "watermark_regression");
    s.push(&[ev("k", "A", 7)], 1, 1, 1);
    s.advance(4, 0, &[]);
    s.advance_rejected(3, "watermark_regression");
    s.advance(4, 0, &[]); // W == watermark: succeeds with no output
    s.advance_rejected(FINAL + 1, "invalid_request");
    s.status((4, 1, 2, 0, vec![("p".into(), 0, 0, 0)]));
    s.advance(FINAL, 1, &[m(1, "p:1", "k", 7, 7, 7, 17)]);
    s.finish(0, &[]); // a second finish is a no-op
    s.finish(0, &[]);
    s.advance_rejected(FINAL - 1, "watermark_regression");
    s.push_rejected(&[ev("k", "A", reference::MAX_EVENT_TIME)], "late_event", 0);
}

#[test]
fn finish_expires_the_largest_deadline() {
    let max = reference::MAX_EVENT_TIME;
    let window = reference::MAX_WINDOW;
    let mut s = Scenario::new(&doc(&[&seq_pattern(
        "p",
        window,
        &[("a", "A"), ("b", "B")],
    )]));
    s.push(&[ev("k", "A", max)], 1, 1, 1);
    s.advance(max, 1, &[]);
    s.advance(FINAL - 1, 0, &[]);
    s.finish(0, &[t(1, "p:1/", "k", max, FINAL, max, FINAL)]);
}

// ----------------------------------------------------------------------
// Processing order

#[test]
fn events_are_processed_by_time_then_ordinal_whatever_the_push_order() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    s.push(&[ev("k", "B", 2), ev("k", "A", 1)], 1, 2, 2);
    s.advance(2, 2, &[m(1, "p:2/1", "k", 1, 2, 2, 11)]);
}

#[test]
fn an_event_at_exactly_the_deadline_is_still_eligible() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    s.push(&[ev("k", "A", 1), ev("k", "B", 11)], 1, 2, 2);
    s.advance(11, 2, &[m(1, "p:1/2", "k", 1, 11, 11, 11)]);
    s.finish(0, &[]);
}

#[test]
fn an_event_after_the_deadline_finds_the_branch_timed_out() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    s.push(&[ev("k", "A", 1), ev("k", "B", 12)], 1, 2, 2);
    s.advance(12, 2, &[t(1, "p:1/", "k", 1, 11, 1, 11)]);
    s.finish(0, &[]);
}

#[test]
fn observations_at_a_time_come_before_the_deadlines_at_that_time() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    // key a's branch has deadline 11; key b completes at 11
    s.push(
        &[ev("a", "A", 1), ev("b", "A", 5), ev("b", "B", 11)],
        1,
        3,
        3,
    );
    s.advance(
        11,
        3,
        &[
            m(1, "p:2/3", "b", 5, 11, 11, 15),
            t(2, "p:1/", "a", 1, 11, 1, 11),
        ],
    );
}

#[test]
fn deadlines_before_a_time_come_before_the_observations_at_it() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    // the completing event is pushed first (smallest ordinal) and still comes
    // after the deadline 11 < 12 of the other key
    s.push(
        &[ev("b", "B", 12), ev("a", "A", 1), ev("b", "A", 2)],
        1,
        3,
        3,
    );
    s.advance(
        20,
        3,
        &[
            t(1, "p:2/", "a", 1, 11, 1, 11),
            m(2, "p:3/1", "b", 2, 12, 12, 12),
        ],
    );
}

#[test]
fn deadlines_expire_ascending_then_by_pattern_name_then_key_code_point() {
    let mut s = Scenario::new(&doc(&[
        &seq_pattern("q", 10, &[("a", "A"), ("b", "B")]),
        &seq_pattern("p", 10, &[("a", "A"), ("b", "B")]),
        &seq_pattern("early", 5, &[("a", "A"), ("b", "B")]),
    ]));
    // "Z" < "a" < "b" < "é" in code point order
    s.push(
        &[
            ev("é", "A", 1),
            ev("b", "A", 1),
            ev("Z", "A", 1),
            ev("a", "A", 1),
        ],
        1,
        4,
        4,
    );
    s.advance(
        11,
        4,
        &[
            t(1, "early:3/", "Z", 1, 6, 1, 6),
            t(2, "early:4/", "a", 1, 6, 1, 6),
            t(3, "early:2/", "b", 1, 6, 1, 6),
            t(4, "early:1/", "é", 1, 6, 1, 6),
            t(5, "p:3/", "Z", 1, 11, 1, 11),
            t(6, "p:4/", "a", 1, 11, 1, 11),
            t(7, "p:2/", "b", 1, 11, 1, 11),
            t(8, "p:1/", "é", 1, 11, 1, 11),
            t(9, "q:3/", "Z", 1, 11, 1, 11),
            t(10, "q:4/", "a", 1, 11, 1, 11),
            t(11, "q:2/", "b", 1, 11, 1, 11),
            t(12, "q:1/", "é", 1, 11, 1, 11),
        ],
    );
}

#[test]
fn each_event_is_observed_by_the_patterns_in_name_order() {
    let mut s = Scenario::new(&doc(&[
        &seq_pattern("zeta", 10, &[("a", "A")]),
        &seq_pattern("Alpha", 10, &[("a", "A")]),
        &seq_pattern("beta", 10, &[("a", "A")]),
    ]));
    s.push(&[ev("k", "A", 2), ev("k", "A", 1)], 1, 2, 2);
    s.advance(
        2,
        2,
        &[
            m(1, "Alpha:2", "k", 1, 1, 1, 11),
            m(2, "beta:2", "k", 1, 1, 1, 11),
            m(3, "zeta:2", "k", 1, 1, 1, 11),
            m(4, "Alpha:1", "k", 2, 2, 2, 12),
            m(5, "beta:1", "k", 2, 2, 2, 12),
            m(6, "zeta:1", "k", 2, 2, 2, 12),
        ],
    );
}

#[test]
fn matches_never_mix_keys() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    s.push(
        &[
            ev("k1", "A", 1),
            ev("k2", "B", 2),
            ev("", "A", 3),
            ev("", "B", 4),
        ],
        1,
        4,
        4,
    );
    s.advance(4, 4, &[m(1, "p:3/4", "", 3, 4, 4, 13)]);
    s.status((4, 0, 5, 1, vec![("p".into(), 1, 1, 0)]));
    s.finish(0, &[t(2, "p:1/", "k1", 1, 11, 1, 11)]);
}

// ----------------------------------------------------------------------
// Branches: contiguity, repetitions, optional stages

/// Stages `a` (kind A) then `b` (kind B) with `b`'s contiguity given.
fn contiguity_pattern(name: &str, contiguity: &str) -> String {
    format!(
        r#"{{"name":"{name}","within":10,"stages":[{{"name":"a","where":{{"kind":"A"}}}},
            {{"name":"b","contiguity":"{contiguity}","where":{{"kind":"B"}}}}]}}"#
    )
}

#[test]
fn strict_kills_skip_next_replaces_skip_any_keeps_waiting() {
    let mut s = Scenario::new(&doc(&[
        &contiguity_pattern("strict", "strict"),
        &contiguity_pattern("next", "skip_next"),
        &contiguity_pattern("any", "skip_any"),
    ]));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "C", 2),
            ev("k", "B", 3),
            ev("k", "B", 4),
        ],
        1,
        4,
        4,
    );
    s.advance(
        4,
        4,
        &[
            // C kills the strict branch; skip_next and skip_any ignore it
            m(1, "any:1/3", "k", 1, 3, 3, 11),
            m(2, "next:1/3", "k", 1, 3, 3, 11),
            // skip_next's branch was replaced by its successors (none): only
            // skip_any still waits for a B
            m(3, "any:1/4", "k", 1, 4, 4, 11),
        ],
    );
    s.status((
        4,
        0,
        5,
        3,
        vec![
            ("any".into(), 1, 1, 0),
            ("next".into(), 0, 0, 0),
            ("strict".into(), 0, 0, 0),
        ],
    ));
    s.finish(0, &[t(4, "any:1/", "k", 1, 11, 1, 11)]);
}

#[test]
fn strict_only_sees_events_of_its_own_key() {
    let mut s = Scenario::new(&doc(&[&contiguity_pattern("p", "strict")]));
    s.push(
        &[ev("k", "A", 1), ev("j", "C", 2), ev("k", "B", 3)],
        1,
        3,
        3,
    );
    s.advance(3, 3, &[m(1, "p:1/3", "k", 1, 3, 3, 11)]);
}

#[test]
fn strict_on_the_first_stage_guards_its_repetitions() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","max":3,"contiguity":"strict","where":{"kind":"A"}},
            {"name":"b","where":{"kind":"B"}}]}"#]));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "C", 2),
            ev("k", "A", 3),
            ev("k", "B", 4),
        ],
        1,
        4,
        4,
    );
    // C kills the branch repeating a=[1] (never 1.3), not the one waiting for b
    s.advance(
        4,
        4,
        &[
            m(1, "p:1/4", "k", 1, 4, 4, 11),
            m(2, "p:3/4", "k", 3, 4, 4, 13),
        ],
    );
}

#[test]
fn min_and_max_bound_the_repetitions_of_a_stage() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","min":2,"max":3,"where":{"kind":"A"}},
            {"name":"b","where":{"kind":"B"}}]}"#]));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "A", 2),
            ev("k", "A", 3),
            ev("k", "B", 4),
        ],
        1,
        4,
        4,
    );
    // never a=[1] alone (min 2), never four As (max 3)
    s.advance(
        4,
        4,
        &[
            m(1, "p:1.2/4", "k", 1, 4, 4, 11),
            m(2, "p:1.2.3/4", "k", 1, 4, 4, 11),
            m(3, "p:2.3/4", "k", 2, 4, 4, 12),
        ],
    );
    // a=[2,3] waits to repeat, a=[3] waits for a second A
    s.status((4, 0, 5, 3, vec![("p".into(), 1, 2, 0)]));
    s.finish(
        0,
        &[
            t(4, "p:2.3/", "k", 2, 12, 3, 12),
            t(5, "p:3/", "k", 3, 13, 3, 13),
        ],
    );
}

#[test]
fn a_branch_proceeds_over_optional_stages_which_stay_empty() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","where":{"kind":"A"}},
            {"name":"o","min":0,"max":2,"where":{"kind":"O"}},
            {"name":"c","where":{"kind":"C"}}]}"#]));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "O", 2),
            ev("k", "O", 3),
            ev("k", "C", 4),
        ],
        1,
        4,
        4,
    );
    // one completing event, three candidates, ordered by their capture
    // counts: [1,0,1] < [1,1,1] < [1,2,1]; o=[3] alone is impossible
    // (skip_next: the branch waiting for o was replaced by capturing O2)
    s.advance(
        4,
        4,
        &[
            m(1, "p:1//4", "k", 1, 4, 4, 11),
            m(2, "p:1/2/4", "k", 1, 4, 4, 11),
            m(3, "p:1/2.3/4", "k", 1, 4, 4, 11),
        ],
    );
    s.finish(0, &[]);
}

#[test]
fn trailing_optional_stages_complete_at_once_and_complete_branches_expire_silently() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","where":{"kind":"A"}},
            {"name":"b","min":0,"max":2,"where":{"kind":"B"}}]}"#]));
    s.push(
        &[
            ev("k", "A", 1),
            ev("j", "A", 1),
            ev("j", "B", 2),
            ev("j", "B", 3),
        ],
        1,
        4,
        4,
    );
    s.advance(
        3,
        4,
        &[
            m(1, "p:1/", "k", 1, 1, 1, 11),
            m(2, "p:2/", "j", 1, 1, 1, 11),
            m(3, "p:2/3", "j", 1, 2, 2, 11),
            m(4, "p:2/3.4", "j", 1, 3, 3, 11),
        ],
    );
    // k still waits for an optional b: a complete branch
    s.status((3, 0, 5, 4, vec![("p".into(), 1, 1, 0)]));
    s.finish(0, &[]);
}

#[test]
fn a_timeout_is_reported_once_per_assignment_in_candidate_order() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","max":2,"where":{"kind":"A"}},
            {"name":"b","where":{"kind":"B"}}]}"#]));
    s.push(&[ev("k", "A", 1), ev("k", "A", 1)], 1, 2, 2);
    s.advance(1, 2, &[]);
    // a=[1] waits for b (its repetition became a=[1,2]); a=[1,2] waits for
    // b; a=[2] waits to repeat and waits for b (two branches, one assignment)
    s.status((1, 0, 3, 0, vec![("p".into(), 1, 4, 0)]));
    s.advance(
        11,
        0,
        &[
            t(1, "p:1/", "k", 1, 11, 1, 11),
            t(2, "p:1.2/", "k", 1, 11, 1, 11),
            t(3, "p:2/", "k", 1, 11, 1, 11),
        ],
    );
    s.status((11, 0, 3, 3, vec![("p".into(), 0, 0, 0)]));
}

// ----------------------------------------------------------------------
// forbidden

#[test]
fn forbidden_wins_over_where_on_the_same_event() {
    let mut s = Scenario::new(&doc(&[
        r#"{"name":"p","within":10,"stages":[
            {"name":"a","where":{"kind":"A"}},
            {"name":"b","where":{"kind":"B"},"forbidden":{"field":"bad","op":"eq","value":true}}]}"#,
        &seq_pattern("q", 10, &[("a", "A"), ("b", "B")]),
    ]));
    s.push(
        &[
            ev("k", "A", 1),
            evf("k", "B", 2, r#"{"bad":true}"#),
            ev("k", "B", 3),
        ],
        1,
        3,
        3,
    );
    // p's branch is cancelled by B2 (not captured) and gone for B3; q, without
    // forbidden, captures B2
    s.advance(3, 3, &[m(1, "q:1/2", "k", 1, 2, 2, 11)]);
    s.finish(0, &[]);
}

#[test]
fn an_event_that_cancels_a_branch_may_start_another() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","where":{"kind":"A"}},
            {"name":"b","where":{"kind":"B"},"forbidden":{"kind":"A"}}]}"#]));
    s.push(
        &[ev("k", "A", 1), ev("k", "A", 2), ev("k", "B", 3)],
        1,
        3,
        3,
    );
    s.advance(3, 3, &[m(1, "p:2/3", "k", 2, 3, 3, 12)]);
}

#[test]
fn the_first_stages_forbidden_guards_its_repetitions_never_a_start() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","max":2,"where":{"kind":"A"},"forbidden":{"field":"stop","op":"eq","value":true}},
            {"name":"b","where":{"kind":"B"}}]}"#]));
    s.push(
        &[
            evf("k", "A", 1, r#"{"stop":true}"#),
            evf("k", "A", 2, r#"{"stop":true}"#),
            ev("k", "B", 3),
        ],
        1,
        3,
        3,
    );
    // A1 starts despite stop; A2 cancels the branch repeating a=[1] (never
    // a=[1,2]) and starts its own
    s.advance(
        3,
        3,
        &[
            m(1, "p:1/3", "k", 1, 3, 3, 11),
            m(2, "p:2/3", "k", 2, 3, 3, 12),
        ],
    );
    // a=[2] still waits to repeat: incomplete
    s.finish(0, &[t(3, "p:2/", "k", 2, 12, 2, 12)]);
}

// ----------------------------------------------------------------------
// Conditions and comparisons

#[test]
fn a_capture_comparison_reads_the_last_event_of_the_stage() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","max":3,"where":{"kind":"A"}},
            {"name":"b","where":{"all":[{"kind":"B"},
                {"field":"x","op":"gt","capture":"a","capture_field":"x"}]}}]}"#]));
    s.push(
        &[
            evf("k", "A", 1, r#"{"x":5}"#),
            evf("k", "A", 2, r#"{"x":1}"#),
            evf("k", "B", 3, r#"{"x":3}"#),
        ],
        1,
        3,
        3,
    );
    // a=[1,2]: 3 > x of A2 (1); a=[1]: 3 > 5 is false; a=[2]: 3 > 1
    s.advance(
        3,
        3,
        &[
            m(1, "p:1.2/3", "k", 1, 3, 3, 11),
            m(2, "p:2/3", "k", 2, 3, 3, 12),
        ],
    );
}

#[test]
fn an_empty_capture_compares_false_even_for_ne_and_not_negates_it() {
    let pattern = |name: &str, cond: &str| {
        format!(
            r#"{{"name":"{name}","within":10,"stages":[
                {{"name":"a","where":{{"kind":"A"}}}},
                {{"name":"o","min":0,"where":{{"kind":"O"}}}},
                {{"name":"c","where":{{"all":[{{"kind":"C"}},{cond}]}}}}]}}"#
        )
    };
    let mut s = Scenario::new(&doc(&[
        &pattern(
            "p1",
            r#"{"field":"x","op":"ne","capture":"o","capture_field":"x"}"#,
        ),
        &pattern(
            "p2",
            r#"{"not":{"field":"x","op":"eq","capture":"o","capture_field":"x"}}"#,
        ),
    ]));
    s.push(&[ev("k", "A", 1), evf("k", "C", 2, r#"{"x":1}"#)], 1, 2, 2);
    s.advance(2, 2, &[m(1, "p2:1//2", "k", 1, 2, 2, 11)]);
    // p1 still waits for o and for c with a=[1]; p2 for o: one timeout each
    s.finish(
        0,
        &[
            t(2, "p1:1//", "k", 1, 11, 1, 11),
            t(3, "p2:1//", "k", 1, 11, 1, 11),
        ],
    );
}

/// A single-stage pattern `name` whose `where` is `cond`.
fn one_stage(name: &str, cond: &str) -> String {
    format!(r#"{{"name":"{name}","within":10,"stages":[{{"name":"s","where":{cond}}}]}}"#)
}

#[test]
fn integer_double_and_decimal_are_never_equal() {
    let mut s = Scenario::new(&doc(&[
        &one_stage("int_eq_1", r#"{"field":"v","op":"eq","value":1}"#),
        &one_stage("dbl_eq_1", r#"{"field":"v","op":"eq","value":1.0}"#),
        &one_stage(
            "dec_eq_1",
            r#"{"field":"v","op":"eq","value":{"decimal":"1"}}"#,
        ),
        &one_stage("int_ne_1", r#"{"field":"v","op":"ne","value":1}"#),
    ]));
    s.push(
        &[
            evf("k", "E", 1, r#"{"v":1}"#),
            evf("k", "E", 2, r#"{"v":1.0}"#),
            evf("k", "E", 3, r#"{"v":{"decimal":"1.00"}}"#),
            evf("k", "E", 4, r#"{"v":2}"#),
            evf("k", "E", 5, r#"{"v":"1"}"#),
            ev("k", "E", 6),
        ],
        1,
        6,
        6,
    );
    s.advance(
        6,
        6,
        &[
            m(1, "int_eq_1:1", "k", 1, 1, 1, 11),
            m(2, "dbl_eq_1:2", "k", 2, 2, 2, 12),
            m(3, "dec_eq_1:3", "k", 3, 3, 3, 13),
            m(4, "int_ne_1:4", "k", 4, 4, 4, 14),
        ],
    );
}

#[test]
fn decimals_compare_by_value_and_doubles_by_ieee_order() {
    let mut s = Scenario::new(&doc(&[
        &one_stage(
            "dec",
            r#"{"field":"v","op":"eq","value":{"decimal":"1.5"}}"#,
        ),
        &one_stage("negzero", r#"{"field":"d","op":"eq","value":0.0}"#),
        &one_stage(
            "decneg",
            r#"{"field":"m","op":"lt","value":{"decimal":"-2.45"}}"#,
        ),
        &one_stage(
            "deczero",
            r#"{"field":"m","op":"eq","value":{"decimal":"0"}}"#,
        ),
        &one_stage(
            "decbig",
            r#"{"field":"m","op":"gt","value":{"decimal":"9.99"}}"#,
        ),
    ]));
    s.push(
        &[
            evf("k", "E", 1, r#"{"v":{"decimal":"1.50"}}"#),
            evf("k", "E", 2, r#"{"d":-0.0}"#),
            evf("k", "E", 3, r#"{"m":{"decimal":"-2.5"}}"#),
            evf("k", "E", 4, r#"{"m":{"decimal":"-0.00"}}"#),
            evf("k", "E", 5, r#"{"m":{"decimal":"-2.45"}}"#),
            evf("k", "E", 6, r#"{"m":{"decimal":"0010.0"}}"#),
        ],
        1,
        6,
        6,
    );
    s.advance(
        6,
        6,
        &[
            m(1, "dec:1", "k", 1, 1, 1, 11),
            m(2, "negzero:2", "k", 2, 2, 2, 12),
            m(3, "decneg:3", "k", 3, 3, 3, 13),
            m(4, "deczero:4", "k", 4, 4, 4, 14),
            m(5, "decbig:6", "k", 6, 6, 6, 16),
        ],
    );
}

#[test]
fn ordered_ops_on_integers() {
    let ops = ["eq", "ne", "lt", "le", "gt", "ge"];
    let patterns: Vec<String> = ops
        .iter()
        .map(|op| {
            one_stage(
                &format!("{op}5"),
                &format!(r#"{{"field":"x","op":"{op}","value":5}}"#),
            )
        })
        .collect();
    let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
    let mut s = Scenario::new(&doc(&patterns));
    s.push(
        &[
            evf("k", "E", 1, r#"{"x":4}"#),
            evf("k", "E", 2, r#"{"x":5}"#),
            evf("k", "E", 3, r#"{"x":6}"#),
        ],
        1,
        3,
        3,
    );
    s.advance(
        3,
        3,
        &[
            m(1, "le5:1", "k", 1, 1, 1, 11),
            m(2, "lt5:1", "k", 1, 1, 1, 11),
            m(3, "ne5:1", "k", 1, 1, 1, 11),
            m(4, "eq5:2", "k", 2, 2, 2, 12),
            m(5, "ge5:2", "k", 2, 2, 2, 12),
            m(6, "le5:2", "k", 2, 2, 2, 12),
            m(7, "ge5:3", "k", 3, 3, 3, 13),
            m(8, "gt5:3", "k", 3, 3, 3, 13),
            m(9, "ne5:3", "k", 3, 3, 3, 13),
        ],
    );
}

#[test]
fn missing_fields_bools_strings_and_empty_lists() {
    let mut s = Scenario::new(&doc(&[
        &one_stage("miss_ne", r#"{"field":"nope","op":"ne","value":1}"#),
        &one_stage(
            "not_miss",
            r#"{"not":{"field":"nope","op":"eq","value":1}}"#,
        ),
        &one_stage("bool_lt", r#"{"field":"b","op":"lt","value":true}"#),
        &one_stage("bool_ne", r#"{"field":"b","op":"ne","value":false}"#),
        &one_stage("str_lt", r#"{"field":"s","op":"lt","value":"a"}"#),
        &one_stage("str_gt_z", r#"{"field":"s","op":"gt","value":"z"}"#),
        &one_stage("str_gt_bmp", r#"{"field":"s","op":"gt","value":"\uffff"}"#),
        &one_stage("all_empty", r#"{"all":[]}"#),
        &one_stage("any_empty", r#"{"any":[]}"#),
    ]));
    s.push(
        &[
            evf("k", "E", 1, r#"{"b":true,"s":"Z"}"#),
            evf("k", "E", 2, r#"{"b":false,"s":"é"}"#),
            evf("k", "E", 3, r#"{"s":"a"}"#),
            // U+1F600 is above U+FFFF in code point order (not in UTF-16 order)
            evf("k", "E", 4, r#"{"s":"\ud83d\ude00"}"#),
        ],
        1,
        4,
        4,
    );
    s.advance(
        4,
        4,
        &[
            m(1, "all_empty:1", "k", 1, 1, 1, 11),
            m(2, "bool_ne:1", "k", 1, 1, 1, 11),
            m(3, "not_miss:1", "k", 1, 1, 1, 11),
            m(4, "str_lt:1", "k", 1, 1, 1, 11),
            m(5, "all_empty:2", "k", 2, 2, 2, 12),
            m(6, "not_miss:2", "k", 2, 2, 2, 12),
            m(7, "str_gt_z:2", "k", 2, 2, 2, 12),
            m(8, "all_empty:3", "k", 3, 3, 3, 13),
            m(9, "not_miss:3", "k", 3, 3, 3, 13),
            m(10, "all_empty:4", "k", 4, 4, 4, 14),
            m(11, "not_miss:4", "k", 4, 4, 4, 14),
            m(12, "str_gt_bmp:4", "k", 4, 4, 4, 14),
            m(13, "str_gt_z:4", "k", 4, 4, 4, 14),
        ],
    );
}

// ----------------------------------------------------------------------
// Absence

fn absence_pattern(name: &str, skip: &str, stages: &str, absence: &str) -> String {
    format!(
        r#"{{"name":"{name}","within":10,"skip":"{skip}","stages":{stages},"absence":{absence}}}"#
    )
}

const A_B: &str = r#"[{"name":"a","where":{"kind":"A"}},{"name":"b","where":{"kind":"B"}}]"#;

#[test]
fn an_absence_wait_matches_at_its_deadline_unless_cancelled_up_to_it() {
    let mut s = Scenario::new(&doc(&[&absence_pattern(
        "p",
        "no_skip",
        r#"[{"name":"a","where":{"kind":"A"}}]"#,
        r#"{"kind":"X"}"#,
    )]));
    s.push(
        &[
            ev("k1", "A", 1),
            ev("k2", "A", 1),
            ev("k3", "A", 1),
            ev("k4", "A", 1),
            ev("k4", "X", 5),
            ev("k1", "X", 11), // exactly at the deadline: still cancels
            ev("k2", "X", 12), // after it: too late
        ],
        1,
        7,
        7,
    );
    s.advance(1, 4, &[]);
    s.status((1, 3, 8, 0, vec![("p".into(), 4, 0, 4)]));
    s.advance(10, 1, &[]);
    s.status((10, 2, 8, 0, vec![("p".into(), 3, 0, 3)]));
    // at 11, X cancels k1's wait before the deadline 11 expires; k2's X at
    // 12 comes after it
    s.advance(
        12,
        2,
        &[
            m(1, "p:2", "k2", 1, 11, 1, 11),
            m(2, "p:3", "k3", 1, 11, 1, 11),
        ],
    );
    s.status((12, 0, 8, 2, vec![("p".into(), 0, 0, 0)]));
}

#[test]
fn the_completing_event_is_not_observed_by_its_own_wait() {
    let mut s = Scenario::new(&doc(&[&absence_pattern(
        "p",
        "no_skip",
        r#"[{"name":"a","where":{"kind":"A"}}]"#,
        r#"{"kind":"A"}"#,
    )]));
    s.push(&[ev("k", "A", 1), ev("k", "A", 3)], 1, 2, 2);
    // A3 cancels the wait of A1 and makes its own
    s.finish(2, &[m(1, "p:2", "k", 3, 13, 3, 13)]);
}

#[test]
fn an_absence_condition_may_compare_with_any_stages_capture() {
    let mut s = Scenario::new(&doc(&[&absence_pattern(
        "p",
        "no_skip",
        A_B,
        r#"{"all":[{"kind":"X"},{"field":"amount","op":"ge","capture":"a","capture_field":"amount"}]}"#,
    )]));
    s.push(
        &[
            evf("k", "A", 1, r#"{"amount":5}"#),
            ev("k", "B", 2),
            evf("j", "A", 1, r#"{"amount":5}"#),
            ev("j", "B", 2),
            evf("k", "X", 3, r#"{"amount":3}"#),
            evf("k", "X", 4, r#"{"amount":5}"#), // 5 >= 5: cancels k's wait
            evf("j", "X", 3, r#"{"amount":4}"#),
        ],
        1,
        7,
        7,
    );
    s.finish(7, &[m(1, "p:3/4", "j", 1, 11, 2, 11)]);
}

#[test]
fn skip_policies_select_among_absence_waits_at_their_deadlines() {
    let x = r#"{"kind":"X"}"#;
    let mut s = Scenario::new(&doc(&[
        &absence_pattern("n", "no_skip", A_B, x),
        &absence_pattern("s", "skip_past_last", A_B, x),
        &absence_pattern("t", "skip_to_next_start", A_B, x),
    ]));
    s.push(
        &[ev("k", "A", 1), ev("k", "A", 2), ev("k", "B", 3)],
        1,
        3,
        3,
    );
    s.advance(3, 3, &[]);
    // two waits each: a=[1] until 11, a=[2] until 12
    s.status((
        3,
        0,
        4,
        0,
        vec![
            ("n".into(), 1, 0, 2),
            ("s".into(), 1, 0, 2),
            ("t".into(), 1, 0, 2),
        ],
    ));
    s.finish(
        0,
        &[
            m(1, "n:1/3", "k", 1, 11, 3, 11),
            // selecting 1/3 removes the wait starting at A2 <= B3
            m(2, "s:1/3", "k", 1, 11, 3, 11),
            m(3, "t:1/3", "k", 1, 11, 3, 11),
            m(4, "n:2/3", "k", 2, 12, 3, 12),
            m(5, "t:2/3", "k", 2, 12, 3, 12),
        ],
    );
}

#[test]
fn at_a_deadline_waits_are_selected_before_branches_time_out() {
    let stages = r#"[{"name":"a","max":2,"where":{"kind":"A"}},{"name":"b","where":{"kind":"B"}}]"#;
    let x = r#"{"kind":"X"}"#;
    let mut s = Scenario::new(&doc(&[
        &absence_pattern("n", "no_skip", stages, x),
        &absence_pattern("t", "skip_to_next_start", stages, x),
    ]));
    s.push(&[ev("k", "A", 1), ev("k", "B", 2)], 1, 2, 2);
    s.advance(2, 2, &[]);
    // the wait 1/2 and the incomplete branch repeating a=[1]
    s.status((
        2,
        0,
        3,
        0,
        vec![("n".into(), 1, 1, 1), ("t".into(), 1, 1, 1)],
    ));
    s.finish(
        0,
        &[
            m(1, "n:1/2", "k", 1, 11, 2, 11),
            t(2, "n:1/", "k", 1, 11, 1, 11),
            // t's selection removed the branch with the same first ordinal
            m(3, "t:1/2", "k", 1, 11, 2, 11),
        ],
    );
}

// ----------------------------------------------------------------------
// Selection order and skip policies

fn skip_pattern(name: &str, skip: &str, stages: &str) -> String {
    format!(r#"{{"name":"{name}","within":10,"skip":"{skip}","stages":{stages}}}"#)
}

fn three_policies(stages: &str) -> String {
    doc(&[
        &skip_pattern("n", "no_skip", stages),
        &skip_pattern("s", "skip_past_last", stages),
        &skip_pattern("t", "skip_to_next_start", stages),
    ])
}

#[test]
fn candidates_are_ordered_by_start_time_before_ordinal() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    s.push(
        &[ev("k", "A", 5), ev("k", "A", 3), ev("k", "B", 6)],
        1,
        3,
        3,
    );
    s.advance(
        6,
        3,
        &[
            m(1, "p:2/3", "k", 3, 6, 6, 13),
            m(2, "p:1/3", "k", 5, 6, 6, 15),
        ],
    );
}

#[test]
fn candidates_with_equal_counts_are_ordered_by_their_ordinals() {
    let mut s = Scenario::new(&doc(&[r#"{"name":"p","within":10,"stages":[
            {"name":"a","where":{"kind":"A"}},
            {"name":"b","contiguity":"skip_any","where":{"kind":"B"}},
            {"name":"c","where":{"kind":"C"}}]}"#]));
    // B3 is pushed before B2 but processed after it
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "B", 3),
            ev("k", "B", 2),
            ev("k", "C", 4),
        ],
        1,
        4,
        4,
    );
    // 1/3/4 was captured first, but [1,2,4] < [1,3,4]
    s.advance(
        4,
        4,
        &[
            m(1, "p:1/2/4", "k", 1, 4, 4, 11),
            m(2, "p:1/3/4", "k", 1, 4, 4, 11),
        ],
    );
    // skip_any: a=[1] still waits for b
    s.finish(0, &[t(3, "p:1//", "k", 1, 11, 1, 11)]);
}

#[test]
fn each_skip_policy_removes_its_candidates_and_branches() {
    let stages = r#"[{"name":"a","max":2,"where":{"kind":"A"}},{"name":"b","where":{"kind":"B"}}]"#;
    let mut s = Scenario::new(&three_policies(stages));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "A", 2),
            ev("k", "B", 3),
            ev("k", "B", 4),
        ],
        1,
        4,
        4,
    );
    s.advance(
        4,
        4,
        &[
            m(1, "n:1/3", "k", 1, 3, 3, 11),
            m(2, "n:1.2/3", "k", 1, 3, 3, 11),
            m(3, "n:2/3", "k", 2, 3, 3, 12),
            // 1/3 removes 1.2/3 and 2/3 (they start at or before B3) and the
            // branch repeating a=[2]
            m(4, "s:1/3", "k", 1, 3, 3, 11),
            // 1/3 removes 1.2/3 (same first ordinal); 2/3 removes the branch
            // repeating a=[2]
            m(5, "t:1/3", "k", 1, 3, 3, 11),
            m(6, "t:2/3", "k", 2, 3, 3, 12),
        ],
    );
    s.status((
        4,
        0,
        5,
        6,
        vec![
            ("n".into(), 1, 1, 0),
            ("s".into(), 0, 0, 0),
            ("t".into(), 0, 0, 0),
        ],
    ));
    s.finish(0, &[t(7, "n:2/", "k", 2, 12, 2, 12)]);
}

#[test]
fn a_selection_removes_the_live_branches_that_continue_it() {
    let stages = r#"[{"name":"a","where":{"kind":"A"}},{"name":"b","max":2,"where":{"kind":"B"}}]"#;
    let mut s = Scenario::new(&three_policies(stages));
    s.push(
        &[ev("k", "A", 1), ev("k", "B", 2), ev("k", "B", 3)],
        1,
        3,
        3,
    );
    s.advance(
        3,
        3,
        &[
            m(1, "n:1/2", "k", 1, 2, 2, 11),
            m(2, "s:1/2", "k", 1, 2, 2, 11),
            m(3, "t:1/2", "k", 1, 2, 2, 11),
            m(4, "n:1/2.3", "k", 1, 3, 3, 11),
        ],
    );
}

#[test]
fn skip_past_last_removes_the_branch_its_last_event_started() {
    let stages = r#"[{"name":"a","where":{"any":[{"kind":"A"},{"kind":"B"}]}},
                     {"name":"b","where":{"kind":"B"}}]"#;
    let mut s = Scenario::new(&three_policies(stages));
    s.push(
        &[ev("k", "A", 1), ev("k", "B", 2), ev("k", "B", 3)],
        1,
        3,
        3,
    );
    s.advance(
        3,
        3,
        &[
            m(1, "n:1/2", "k", 1, 2, 2, 11),
            m(2, "s:1/2", "k", 1, 2, 2, 11),
            m(3, "t:1/2", "k", 1, 2, 2, 11),
            m(4, "n:2/3", "k", 2, 3, 3, 12),
            m(5, "t:2/3", "k", 2, 3, 3, 12),
        ],
    );
    s.finish(
        0,
        &[
            t(6, "n:3/", "k", 3, 13, 3, 13),
            t(7, "s:3/", "k", 3, 13, 3, 13),
            t(8, "t:3/", "k", 3, 13, 3, 13),
        ],
    );
}

#[test]
fn the_first_ordinal_is_the_first_captures_not_the_smallest() {
    let stages = r#"[{"name":"a","where":{"any":[{"kind":"A"},{"kind":"B"}]}},
                     {"name":"b","where":{"kind":"B"}}]"#;
    let mut s = Scenario::new(&three_policies(stages));
    // processed: A(o2)@2, B(o1)@5, B(o3)@6
    s.push(
        &[ev("k", "B", 5), ev("k", "A", 2), ev("k", "B", 6)],
        1,
        3,
        3,
    );
    s.advance(
        6,
        3,
        &[
            m(1, "n:2/1", "k", 2, 5, 5, 12),
            // removes the branch started by B(o1)@5: it starts at its last capture
            m(2, "s:2/1", "k", 2, 5, 5, 12),
            // 2/1's first ordinal is 2, so the branch started by o1 stays
            m(3, "t:2/1", "k", 2, 5, 5, 12),
            m(4, "n:1/3", "k", 5, 6, 6, 15),
            m(5, "t:1/3", "k", 5, 6, 6, 15),
        ],
    );
    s.finish(
        0,
        &[
            t(6, "n:3/", "k", 6, 16, 6, 16),
            t(7, "s:3/", "k", 6, 16, 6, 16),
            t(8, "t:3/", "k", 6, 16, 6, 16),
        ],
    );
}

#[test]
fn skip_past_last_compares_processing_order_not_ordinals() {
    let mut s = Scenario::new(&doc(&[
        r#"{"name":"n","within":20,"stages":[{"name":"a","where":{"kind":"A"}},{"name":"b","where":{"kind":"B"}}]}"#,
        r#"{"name":"s","within":20,"skip":"skip_past_last","stages":[{"name":"a","where":{"kind":"A"}},{"name":"b","where":{"kind":"B"}}]}"#,
    ]));
    // processed: A(o2)@2, A(o3)@5, B(o1)@10
    s.push(
        &[ev("k", "B", 10), ev("k", "A", 2), ev("k", "A", 5)],
        1,
        3,
        3,
    );
    s.advance(
        10,
        3,
        &[
            m(1, "n:2/1", "k", 2, 10, 10, 22),
            m(2, "n:3/1", "k", 5, 10, 10, 25),
            // 3/1 starts at (5, o3), before 2/1's last capture (10, o1)
            m(3, "s:2/1", "k", 2, 10, 10, 22),
        ],
    );
}

// ----------------------------------------------------------------------
// Limits

#[test]
fn too_many_matches_reject_the_whole_advance() {
    let mut s = Scenario::new(&format!(
        r#"{{"patterns":[{}],"limits":{{"max_results_per_advance":1}}}}"#,
        seq_pattern("p", 10, &[("a", "A"), ("b", "B")])
    ));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "B", 2),
            ev("k", "A", 3),
            ev("k", "B", 4),
        ],
        1,
        4,
        4,
    );
    s.advance_rejected(4, "limit_exceeded");
    s.status((-1, 4, 5, 0, vec![("p".into(), 0, 0, 0)]));
    s.advance(2, 2, &[m(1, "p:1/2", "k", 1, 2, 2, 11)]);
    s.advance(4, 2, &[m(2, "p:3/4", "k", 3, 4, 4, 13)]);
}

#[test]
fn timeouts_do_not_count_as_results() {
    let mut s = Scenario::new(&format!(
        r#"{{"patterns":[{}],"limits":{{"max_results_per_advance":1}}}}"#,
        seq_pattern("p", 10, &[("a", "A"), ("b", "B")])
    ));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "B", 2),
            ev("j", "A", 1),
            ev("i", "A", 1),
        ],
        1,
        4,
        4,
    );
    s.advance(
        11,
        4,
        &[
            m(1, "p:1/2", "k", 1, 2, 2, 11),
            t(2, "p:4/", "i", 1, 11, 1, 11),
            t(3, "p:3/", "j", 1, 11, 1, 11),
        ],
    );
}

#[test]
fn too_many_states_for_one_key_reject_the_whole_advance() {
    let mut s = Scenario::new(&format!(
        r#"{{"patterns":[{}],"limits":{{"active_states":2}}}}"#,
        seq_pattern("p", 10, &[("a", "A"), ("b", "B")])
    ));
    s.push(
        &[
            ev("k", "A", 1),
            ev("k", "A", 2),
            ev("j", "A", 2),
            ev("k", "A", 3),
        ],
        1,
        4,
        4,
    );
    s.advance(2, 3, &[]);
    s.status((2, 1, 5, 0, vec![("p".into(), 2, 3, 0)]));
    s.advance_rejected(3, "limit_exceeded");
    s.advance_rejected(20, "limit_exceeded");
    s.status((2, 1, 5, 0, vec![("p".into(), 2, 3, 0)]));
}

#[test]
fn the_state_limit_is_checked_after_selection() {
    let stages =
        r#"[{"name":"a","max":2,"where":{"kind":"A"}},{"name":"b","min":0,"where":{"kind":"B"}}]"#;
    let limited = |skip: &str| {
        format!(
            r#"{{"patterns":[{}],"limits":{{"active_states":1}}}}"#,
            skip_pattern("p", skip, stages)
        )
    };
    // A1 makes two branches (a=[1] repeating, waiting for b) and the
    // candidate 1/; selecting it under skip_past_last removes both
    let mut s = Scenario::new(&limited("skip_past_last"));
    s.push(&[ev("k", "A", 1)], 1, 1, 1);
    s.advance(1, 1, &[m(1, "p:1/", "k", 1, 1, 1, 11)]);
    s.status((1, 0, 2, 1, vec![("p".into(), 0, 0, 0)]));
    let mut s = Scenario::new(&limited("no_skip"));
    s.push(&[ev("k", "A", 1)], 1, 1, 1);
    s.advance_rejected(1, "limit_exceeded");
}

/// Limits are policy, not state: a restore may lower them. The state limit
/// is checked after every observation, so the next observation of a key that
/// holds more states than the new limit fails, even one that adds nothing.
///
/// Minimal repro of a former engine bug (an observation that changed
/// nothing skipped the check): one stage `{"min":3,"max":3,"where":{"kind":"A"}}`,
/// within 13; push A@72, A@73 (key k), advance 75: two branches for k;
/// checkpoint; restore with `"limits":{"active_states":1}`; push C@80 (key
/// k); advance 80 must be `limit_exceeded` (as with A@80 instead of C@80).
#[test]
fn a_lowered_state_limit_applies_to_the_next_observation_of_the_key() {
    let pattern =
        r#"{"name":"p","within":13,"stages":[{"name":"s0","min":3,"max":3,"where":{"kind":"A"}}]}"#;
    let first = format!(r#"{{"patterns":[{pattern}]}}"#);
    let lowered = format!(r#"{{"patterns":[{pattern}],"limits":{{"active_states":1}}}}"#);
    let items = |texts: &[String]| -> Vec<patterns::Event> {
        texts
            .iter()
            .map(|t| patterns::parse_event(t.as_bytes()).unwrap())
            .collect()
    };

    let mut engine = Engine::new(Document::from_json(first.as_bytes()).unwrap());
    let mut model = reference::Model::new(&serde_json::from_str(&first).unwrap());
    let pushed = [ev("k", "A", 72), ev("k", "A", 73)];
    assert!(engine.push(items(&pushed)).is_ok());
    let texts: Vec<&[u8]> = pushed.iter().map(|s| s.as_bytes()).collect();
    assert!(model.push_texts(&texts).is_ok());
    assert!(engine.advance(75).is_ok());
    assert!(model.advance(75).is_ok());
    assert_eq!(engine.status().patterns[0].1.branches, 2);

    let mut engine = Engine::restore(
        &engine.checkpoint(),
        &Document::from_json(lowered.as_bytes()).unwrap(),
    )
    .unwrap();
    model.set_limits(10_000, 1);
    let c = [ev("k", "C", 80)];
    assert!(engine.push(items(&c)).is_ok());
    assert!(model.push_texts(&[c[0].as_bytes()]).is_ok());
    assert_eq!(model.advance(80).err(), Some("limit_exceeded"), "reference");
    assert_eq!(
        engine.advance(80).err().map(|r| r.code()),
        Some("limit_exceeded"),
        "engine"
    );
}

/// Restore refuses a checkpoint with any flipped byte, even one that
/// spells the same JSON: here the hex digit `f` of the escape `\u001f` in a
/// captured string field, flipped to `F` (bit 5). Parsing forgets the
/// spelling, so the checksum alone cannot see it; restore refuses a `\u`
/// escape with upper-case digits.
#[test]
fn a_checkpoint_with_a_flipped_byte_in_an_escape_is_refused() {
    let d = doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]);
    let document = Document::from_json(d.as_bytes()).unwrap();
    let mut engine = Engine::new(Document::from_json(d.as_bytes()).unwrap());
    let e = r#"{"id":"x","key":"k","kind":"A","time":1,"fields":{"s":"\u001f"}}"#;
    assert!(engine
        .push(vec![patterns::parse_event(e.as_bytes()).unwrap()])
        .is_ok());
    let checkpoint = engine.checkpoint();
    assert!(Engine::restore(&checkpoint, &document).is_ok());
    let at = checkpoint
        .windows(6)
        .position(|w| w == br"\u001f")
        .expect("the escape is in the checkpoint")
        + 5;
    let mut flipped = checkpoint.clone();
    flipped[at] ^= 0x20;
    assert!(
        Engine::restore(&flipped, &document).is_err(),
        "accepted with {:?}",
        String::from_utf8_lossy(&flipped[at - 5..=at])
    );
}

// ----------------------------------------------------------------------
// Event parsing

/// A document whose single pattern matches every event (to echo it).
fn echo_doc() -> String {
    doc(&[&one_stage("all", r#"{"all":[]}"#)])
}

#[test]
fn event_field_values_are_echoed_with_their_types() {
    let mut s = Scenario::new(&echo_doc());
    let item = r#"{"id":"x","key":"k","kind":"E","time":1,"fields":{
        "i":-0,"d":1E2,"e":15e-1,"z":-0.0,"m":{"decimal":"00012.500"},
        "big":9223372036854775807,"small":-9223372036854775808,
        "r":9.226868704665383890e-19,"s":"\u0000\n\ud83d\ude00","t":true}}"#;
    s.push(&[item.into()], 1, 1, 1);
    for side in &mut s.sides {
        let Answer::Advanced { output, .. } = side.advance(1) else {
            panic!("{}: advance failed", side.label());
        };
        // -0 is Integer 0, 1E2 and 15e-1 Doubles, the 19-digit literal
        // correctly rounded
        let want = compact(
            r#"{"seq":1,"type":"match","id":"all:1","pattern":"all","key":"k",
                "start_time":1,"end_time":1,"last_event_time":1,"deadline":11,
                "captures":{"s":[{"ordinal":1,"id":"x","key":"k","kind":"E","time":1,"fields":{
                  "i":0,"d":100.0,"e":1.5,"z":-0.0,"m":{"decimal":"00012.500"},
                  "big":9223372036854775807,"small":-9223372036854775808,
                  "r":9.226868704665384e-19,"s":"\u0000\n😀","t":true}}]}}"#,
        );
        assert_eq!(output, vec![want], "{}", side.label());
    }
}

fn item(fields_or_rest: &str) -> String {
    format!(r#"{{"id":"x","key":"k","kind":"E","time":1{fields_or_rest}}}"#)
}

#[test]
fn malformed_events_are_bad_requests() {
    let long = "x".repeat(257);
    let long_utf8 = "é".repeat(129); // 258 bytes
    let decimal = |s: &str| item(&format!(r#","fields":{{"v":{{"decimal":"{s}"}}}}"#));
    let mut cases: Vec<(String, &str)> = vec![
        (
            item(r#","fields":{"v":9223372036854775808}"#),
            "integer above i64",
        ),
        (
            item(r#","fields":{"v":-9223372036854775809}"#),
            "integer below i64",
        ),
        (
            item(r#","fields":{"v":100000000000000000000000000000}"#),
            "a huge integer token is not a Double",
        ),
        (item(r#","fields":{"v":1e400}"#), "not finite"),
        (item(r#","fields":{"v":-1e400}"#), "not finite"),
        (item(r#","fields":null"#), "fields null"),
        (item(r#","fields":[]"#), "fields an array"),
        (item(r#","fields":{"v":null}"#), "null value"),
        (item(r#","fields":{"v":[1]}"#), "array value"),
        (item(r#","fields":{"v":{"a":1}}"#), "other object"),
        (item(r#","fields":{"v":{}}"#), "empty object"),
        (
            item(r#","fields":{"v":{"decimal":"1","x":1}}"#),
            "decimal with another key",
        ),
        (
            item(r#","fields":{"v":{"decimal":1.5}}"#),
            "decimal not a string",
        ),
        (item(r#","fields":{"":1}"#), "empty field name"),
        (decimal(""), "empty decimal"),
        (decimal("1."), "decimal 1."),
        (decimal(".5"), "decimal .5"),
        (decimal("+1"), "decimal +1"),
        (decimal("1e2"), "decimal 1e2"),
        (decimal("1.2.3"), "decimal 1.2.3"),
        (decimal(" 1"), "decimal with a space"),
        (decimal("--1"), "decimal --1"),
        (decimal("-"), "decimal -"),
        (decimal("-.5"), "decimal -.5"),
        (decimal("0x1"), "decimal 0x1"),
        (decimal("1,5"), "decimal 1,5"),
        (decimal("١"), "decimal with a non-ASCII digit"),
        (
            decimal("123456789012345678901234567890123456789"),
            "39 digits",
        ),
        (
            decimal("0.00000000000000000000000000000000000001"),
            "39 digits with zeros",
        ),
        (
            decimal("-1234567890123456789012345678901234567.89"),
            "39 digits, negative",
        ),
        (
            r#"{"id":"","key":"k","kind":"E","time":1}"#.to_string(),
            "empty id",
        ),
        (
            format!(r#"{{"id":"{long}","key":"k","kind":"E","time":1}}"#),
            "id of 257 bytes",
        ),
        (
            format!(r#"{{"id":"{long_utf8}","key":"k","kind":"E","time":1}}"#),
            "id of 258 bytes",
        ),
        (
            format!(r#"{{"id":"x","key":"{long}","kind":"E","time":1}}"#),
            "key of 257 bytes",
        ),
        (
            r#"{"id":"x","key":"k","kind":"","time":1}"#.to_string(),
            "empty kind",
        ),
        (
            format!(r#"{{"id":"x","key":"k","kind":"{long}","time":1}}"#),
            "kind of 257 bytes",
        ),
        (
            r#"{"id":"x","key":"k","kind":"E","time":-1}"#.to_string(),
            "time -1",
        ),
        (
            r#"{"id":"x","key":"k","kind":"E","time":9007199254740992}"#.to_string(),
            "time above the maximum",
        ),
        (
            r#"{"id":"x","key":"k","kind":"E","time":1.0}"#.to_string(),
            "time 1.0",
        ),
        (
            r#"{"id":"x","key":"k","kind":"E","time":1e3}"#.to_string(),
            "time 1e3",
        ),
        (
            r#"{"id":"x","key":"k","kind":"E","time":"1"}"#.to_string(),
            "time a string",
        ),
        (r#"{"id":"x","key":"k","kind":"E"}"#.to_string(), "no time"),
        (r#"{"key":"k","kind":"E","time":1}"#.to_string(), "no id"),
        (r#"{"id":"x","kind":"E","time":1}"#.to_string(), "no key"),
        (r#"{"id":"x","key":"k","time":1}"#.to_string(), "no kind"),
        (
            r#"{"id":1,"key":"k","kind":"E","time":1}"#.to_string(),
            "id a number",
        ),
        (
            r#"{"id":"x","key":null,"kind":"E","time":1}"#.to_string(),
            "key null",
        ),
        (item(r#","extra":1"#), "an unknown top-level field"),
        ("[]".into(), "not an object"),
        ("\"x\"".into(), "not an object"),
    ];
    let many: Vec<String> = (0..65).map(|i| format!(r#""f{i}":{i}"#)).collect();
    cases.push((
        item(&format!(r#","fields":{{{}}}"#, many.join(","))),
        "65 fields",
    ));
    for (text, why) in &cases {
        let mut s = Scenario::new(&echo_doc());
        s.push_rejected_because(&[ev("k", "E", 5), text.clone()], "bad_request", 1, why);
    }
}

#[test]
fn boundary_events_are_accepted() {
    let name_256 = "é".repeat(128);
    let many: Vec<String> = (0..64).map(|i| format!(r#""f{i}":{i}"#)).collect();
    let cases = [
        format!(r#"{{"id":"{name_256}","key":"{name_256}","kind":"{name_256}","time":1}}"#),
        r#"{"id":"x","key":"","kind":"E","time":0}"#.to_string(),
        r#"{"id":"x","key":"k","kind":"E","time":9007199254740991}"#.to_string(),
        r#"{"id":"x","key":"k","kind":"E","time":-0}"#.to_string(),
        item(r#","fields":{}"#),
        item(&format!(r#","fields":{{{}}}"#, many.join(","))),
        item(r#","fields":{"v":{"decimal":"12345678901234567890123456789012345678"}}"#),
        item(r#","fields":{"v":{"decimal":"-0.0000000000000000000000000000000000001"}}"#),
        item(r#","fields":{"v":{"decimal":"-0"}}"#),
    ];
    for text in &cases {
        let mut s = Scenario::new(&echo_doc());
        s.push(std::slice::from_ref(text), 1, 1, 1);
    }
}

// ----------------------------------------------------------------------
// Documents (the engine's validation; the reference takes valid ones only)

/// `{"not": ... {"kind":"A"} ...}` with `depth` nodes on its only path.
fn deep(depth: usize) -> String {
    let mut c = r#"{"kind":"A"}"#.to_string();
    for _ in 1..depth {
        c = format!(r#"{{"not":{c}}}"#);
    }
    c
}

/// `{"all": [leaf; n - 1]}`: `n` nodes.
fn wide(n: usize) -> String {
    let leaves: Vec<&str> = vec![r#"{"kind":"A"}"#; n - 1];
    format!(r#"{{"all":[{}]}}"#, leaves.join(","))
}

fn stage(name: &str, extra: &str) -> String {
    format!(r#"{{"name":"{name}","where":{{"kind":"A"}}{extra}}}"#)
}

fn pattern_of(stages: &[String], extra: &str) -> String {
    format!(
        r#"{{"patterns":[{{"name":"p","within":10,"stages":[{}]{extra}}}]}}"#,
        stages.join(",")
    )
}

fn accepted(doc: &str) {
    if let Err(e) = Document::from_json(doc.as_bytes()) {
        panic!("refused: {e}\n{}", &doc[..doc.len().min(400)]);
    }
}

/// Refused with a message that starts with the JSON path `path` (or a path
/// below it: a member or an element) and mentions `word`.
fn refused(doc: &str, path: &str, word: &str) {
    match Document::from_json(doc.as_bytes()) {
        Ok(_) => panic!("accepted ({path}): {}", &doc[..doc.len().min(400)]),
        Err(e) => {
            let msg = e.to_string();
            let below = msg.starts_with(path)
                && (path.ends_with('[') || msg[path.len()..].starts_with([':', '.', '[']));
            assert!(
                below && msg.contains(word),
                "message {msg:?} should start with the path {path:?} and mention {word:?}"
            );
        }
    }
}

#[test]
fn conditions_may_be_32_deep_not_33() {
    accepted(&pattern_of(
        &[format!(r#"{{"name":"a","where":{}}}"#, deep(32))],
        "",
    ));
    refused(
        &pattern_of(&[format!(r#"{{"name":"a","where":{}}}"#, deep(33))], ""),
        "patterns[0].stages[0].where",
        "",
    );
    refused(
        &pattern_of(
            &[stage("a", ""), stage("b", "")],
            &format!(r#","absence":{}"#, deep(33)),
        ),
        "patterns[0].absence",
        "",
    );
}

#[test]
fn a_pattern_may_hold_1024_condition_nodes_not_1025() {
    accepted(&pattern_of(
        &[format!(r#"{{"name":"a","where":{}}}"#, wide(1024))],
        "",
    ));
    refused(
        &pattern_of(&[format!(r#"{{"name":"a","where":{}}}"#, wide(1025))], ""),
        "patterns[0]",
        "",
    );
    // counted over every condition of the pattern: 500 + 300 + 100 + 124
    let spread = |absence: usize| {
        pattern_of(
            &[
                format!(r#"{{"name":"a","where":{}}}"#, wide(500)),
                format!(
                    r#"{{"name":"b","where":{},"forbidden":{}}}"#,
                    wide(300),
                    wide(100)
                ),
            ],
            &format!(r#","absence":{}"#, wide(absence)),
        )
    };
    accepted(&spread(124));
    refused(&spread(125), "patterns[0]", "");
}

#[test]
fn captures_must_name_an_earlier_stage() {
    let cap = |stage: &str| {
        format!(r#"{{"field":"x","op":"eq","capture":"{stage}","capture_field":"x"}}"#)
    };
    let three = |where1: &str| {
        pattern_of(
            &[
                stage("a", ""),
                format!(r#"{{"name":"b","where":{{"all":[{{"kind":"B"}},{where1}]}}}}"#),
                stage("c", ""),
            ],
            "",
        )
    };
    accepted(&three(&cap("a")));
    refused(&three(&cap("c")), "patterns[0].stages[1].where.all[1]", "c");
    refused(&three(&cap("b")), "patterns[0].stages[1].where.all[1]", "b");
    refused(
        &three(&cap("nope")),
        "patterns[0].stages[1].where.all[1]",
        "nope",
    );
    // in forbidden too
    refused(
        &pattern_of(
            &[
                stage("a", ""),
                stage("b", &format!(r#","forbidden":{}"#, cap("b"))),
            ],
            "",
        ),
        "patterns[0].stages[1].forbidden",
        "b",
    );
    // the first stage cannot reference any capture, in where or forbidden,
    // even in a branch evaluation would short-circuit
    refused(
        &pattern_of(
            &[
                format!(r#"{{"name":"a","where":{}}}"#, cap("a")),
                stage("b", ""),
            ],
            "",
        ),
        "patterns[0].stages[0].where",
        "",
    );
    refused(
        &pattern_of(
            &[
                format!(
                    r#"{{"name":"a","where":{{"any":[{{"all":[]}},{}]}}}}"#,
                    cap("b")
                ),
                stage("b", ""),
            ],
            "",
        ),
        "patterns[0].stages[0].where.any[1]",
        "",
    );
    refused(
        &pattern_of(
            &[
                stage("a", &format!(r#","forbidden":{}"#, cap("a"))),
                stage("b", ""),
            ],
            "",
        ),
        "patterns[0].stages[0].forbidden",
        "",
    );
    // absence may compare with any stage, the last one included
    accepted(&pattern_of(
        &[stage("a", ""), stage("b", "")],
        &format!(r#","absence":{}"#, cap("b")),
    ));
    refused(
        &pattern_of(
            &[stage("a", ""), stage("b", "")],
            &format!(r#","absence":{{"not":{}}}"#, cap("z")),
        ),
        "patterns[0].absence.not",
        "z",
    );
}

/// The contract's own example of a refusal message, to the letter.
#[test]
fn a_capture_of_a_later_stage_is_refused_with_the_documented_message() {
    let d = r#"{"patterns":[{"name":"fraud","within":10,"stages":[
        {"name":"login","where":{"kind":"login"}},
        {"name":"spend","where":{"kind":"spend"}},
        {"name":"check","where":{"all":[{"kind":"check"},
            {"field":"amount","op":"gt","capture":"pay","capture_field":"amount"}]}},
        {"name":"pay","where":{"kind":"pay"}}]}]}"#;
    let Err(e) = Document::from_json(d.as_bytes()) else {
        panic!("accepted a capture of a later stage");
    };
    assert_eq!(
        e.to_string(),
        r#"patterns[0].stages[2].where.all[1]: capture "pay" is not an earlier stage"#
    );
}

#[test]
fn stage_counts_are_bounded() {
    let two = |extra: &str| pattern_of(&[stage("a", ""), stage("b", extra)], "");
    accepted(&two(r#","min":0,"max":32"#));
    accepted(&two(r#","min":32,"max":32"#));
    refused(&two(r#","min":3,"max":2"#), "patterns[0].stages[1]", "");
    refused(&two(r#","min":2"#), "patterns[0].stages[1]", ""); // max defaults to 1
    refused(&two(r#","min":0,"max":0"#), "patterns[0].stages[1]", "");
    refused(&two(r#","max":33"#), "patterns[0].stages[1]", "");
    refused(&two(r#","min":-1"#), "patterns[0].stages[1]", "");
    refused(&two(r#","max":1.0"#), "patterns[0].stages[1]", "");
    refused(
        &pattern_of(&[stage("a", r#","min":0"#), stage("b", "")], ""),
        "patterns[0].stages[0]",
        "",
    );
    // the sum of max is at most 128
    let stages = |maxes: &[u32]| -> Vec<String> {
        maxes
            .iter()
            .enumerate()
            .map(|(i, m)| stage(&format!("s{i}"), &format!(r#","max":{m}"#)))
            .collect()
    };
    accepted(&pattern_of(&stages(&[32, 32, 32, 32]), ""));
    refused(
        &pattern_of(&stages(&[32, 32, 32, 32, 1]), ""),
        "patterns[0]",
        "",
    );
    refused(
        &pattern_of(&stages(&[26, 26, 26, 26, 26]), ""),
        "patterns[0]",
        "",
    );
    // 1..=32 stages
    let many = |n: usize| -> Vec<String> { (0..n).map(|i| stage(&format!("s{i}"), "")).collect() };
    accepted(&pattern_of(&many(32), ""));
    refused(&pattern_of(&many(33), ""), "patterns[0]", "");
    refused(&pattern_of(&[], ""), "patterns[0]", "");
}

#[test]
fn names_are_checked() {
    let named = |p: &str, s: &str| {
        format!(
            r#"{{"patterns":[{{"name":{p},"within":10,"stages":[{{"name":{s},"where":{{"kind":"A"}}}}]}}]}}"#
        )
    };
    let ok64 = format!("\"{}\"", "Az09_.-x".repeat(8));
    accepted(&named(&ok64, &ok64));
    for bad in ["\"\"", "\"a b\"", "\"é\"", "\"a/b\"", "\"a:b\"", "1"] {
        refused(&named(bad, "\"s\""), "patterns[0]", "");
        refused(&named("\"p\"", bad), "patterns[0].stages[0]", "");
    }
    let long = format!("\"{}\"", "a".repeat(65));
    refused(&named(&long, "\"s\""), "patterns[0]", "");
    refused(&named("\"p\"", &long), "patterns[0].stages[0]", "");
    // unique pattern names; unique stage names within a pattern
    refused(
        &format!(
            r#"{{"patterns":[{},{}]}}"#,
            seq_pattern("p", 10, &[("a", "A")]),
            seq_pattern("p", 10, &[("a", "A")])
        ),
        "patterns[",
        "",
    );
    accepted(&format!(
        r#"{{"patterns":[{},{}]}}"#,
        seq_pattern("p", 10, &[("a", "A")]),
        seq_pattern("q", 10, &[("a", "A")])
    ));
    refused(
        &doc(&[&seq_pattern("p", 10, &[("a", "A"), ("a", "B")])]),
        "patterns[0].stages[",
        "",
    );
}

#[test]
fn empty_strings_in_conditions_are_refused() {
    let one = |cond: &str| {
        pattern_of(
            &[stage("a", ""), format!(r#"{{"name":"b","where":{cond}}}"#)],
            "",
        )
    };
    accepted(&one(
        r#"{"field":"x","op":"eq","capture":"a","capture_field":"y"}"#,
    ));
    refused(&one(r#"{"kind":""}"#), "patterns[0].stages[1].where", "");
    refused(
        &one(r#"{"field":"","op":"eq","value":1}"#),
        "patterns[0].stages[1].where",
        "",
    );
    refused(
        &one(r#"{"field":"","op":"eq","capture":"a","capture_field":"y"}"#),
        "patterns[0].stages[1].where",
        "",
    );
    refused(
        &one(r#"{"field":"x","op":"eq","capture":"","capture_field":"y"}"#),
        "patterns[0].stages[1].where",
        "",
    );
    refused(
        &one(r#"{"all":[{"kind":"A"},{"field":"x","op":"eq","capture":"a","capture_field":""}]}"#),
        "patterns[0].stages[1].where.all[1]",
        "",
    );
}

#[test]
fn malformed_conditions_are_refused_wherever_they_are() {
    let one = |cond: &str| pattern_of(&[format!(r#"{{"name":"a","where":{cond}}}"#)], "");
    accepted(&one(
        r#"{"field":"x","op":"le","value":{"decimal":"-1.50"}}"#,
    ));
    accepted(&one(
        r#"{"field":"x","op":"ge","value":-9223372036854775808}"#,
    ));
    for bad in [
        r#"{"field":"x","op":"bogus","value":1}"#,
        r#"{"field":"x","op":"eq","value":null}"#,
        r#"{"field":"x","op":"eq","value":[1]}"#,
        r#"{"field":"x","op":"eq","value":{"decimal":"1.2.3"}}"#,
        r#"{"field":"x","op":"eq","value":{"decimal":"1","x":1}}"#,
        r#"{"field":"x","op":"eq","value":9223372036854775808}"#,
        r#"{"field":"x","op":"eq"}"#,
        r#"{"field":"x","value":1}"#,
        r#"{"kynd":"A"}"#,
        r#"{"kind":"A","extra":1}"#,
        r#"{"kind":1}"#,
        r#"{"not":[]}"#,
        r#"{"all":{}}"#,
        r#"{}"#,
        r#"[]"#,
        r#"null"#,
    ] {
        refused(&one(bad), "patterns[0].stages[0].where", "");
        // also where evaluation would never look
        refused(
            &one(&format!(r#"{{"any":[{{"all":[]}},{bad}]}}"#)),
            "patterns[0].stages[0].where.any[1]",
            "",
        );
    }
}

#[test]
fn pattern_and_limit_fields_are_checked() {
    let within = |w: &str| {
        format!(
            r#"{{"patterns":[{{"name":"p","within":{w},"stages":[{{"name":"a","where":{{"kind":"A"}}}}]}}]}}"#
        )
    };
    accepted(&within("1"));
    accepted(&within("31536000000"));
    for bad in ["0", "-1", "31536000001", "1.5", "\"10\"", "null"] {
        refused(&within(bad), "patterns[0]", "within");
    }
    let p = seq_pattern("p", 10, &[("a", "A")]);
    let with = |extra: &str| format!(r#"{{"patterns":[{p}]{extra}}}"#);
    accepted(&with(
        r#","limits":{"max_results_per_advance":1,"active_states":1000000}"#,
    ));
    accepted(&with(r#","limits":{}"#));
    refused(
        &with(r#","limits":{"max_results_per_advance":0}"#),
        "limits",
        "max_results_per_advance",
    );
    refused(
        &with(r#","limits":{"active_states":1000001}"#),
        "limits",
        "active_states",
    );
    refused(&with(r#","limits":{"other":1}"#), "limits", "");
    let field = |extra: &str| {
        format!(
            r#"{{"patterns":[{{"name":"p","within":10{extra},"stages":[{{"name":"a","where":{{"kind":"A"}}}}]}}]}}"#
        )
    };
    refused(&field(r#","skip":"skip_all""#), "patterns[0]", "skip");
    refused(&field(r#","absence":null"#), "patterns[0]", "absence");
    refused(&field(r#","extra":1"#), "patterns[0]", "");
    refused(
        &pattern_of(&[stage("a", r#","contiguity":"loose""#)], ""),
        "patterns[0].stages[0]",
        "contiguity",
    );
    refused(
        &pattern_of(&[r#"{"name":"a"}"#.into()], ""),
        "patterns[0].stages[0]",
        "where",
    );
    refused(
        &pattern_of(&[stage("a", r#","forbidden":null"#)], ""),
        "patterns[0].stages[0]",
        "forbidden",
    );
}

#[test]
fn the_document_is_written_back_with_every_default() {
    let d = Document::from_json(
        br#"{"patterns":[
            {"name":"b","within":5,"stages":[{"name":"s","where":{"kind":"A"}}]},
            {"name":"a","within":7,"skip":"skip_past_last","stages":[
                {"name":"x","min":1,"max":3,"contiguity":"strict","where":{"all":[]},
                 "forbidden":{"kind":"B"}}],
             "absence":{"kind":"C"}}],
            "limits":{"active_states":5}}"#,
    )
    .unwrap();
    let got: serde_json::Value = serde_json::from_slice(&d.to_json()).unwrap();
    let want: serde_json::Value = serde_json::from_str(
        r#"{"patterns":[
            {"name":"a","within":7,"skip":"skip_past_last","stages":[
                {"name":"x","min":1,"max":3,"contiguity":"strict","where":{"all":[]},
                 "forbidden":{"kind":"B"}}],
             "absence":{"kind":"C"}},
            {"name":"b","within":5,"skip":"no_skip","stages":[
                {"name":"s","min":1,"max":1,"contiguity":"skip_next","where":{"kind":"A"}}]}],
            "limits":{"max_results_per_advance":10000,"active_states":5}}"#,
    )
    .unwrap();
    assert_eq!(got, want);
    assert_eq!(d.pattern_names(), vec!["a".to_string(), "b".to_string()]);
    let l = d.limits();
    assert_eq!((l.max_results_per_advance, l.active_states), (10_000, 5));
    let relimited = d.with_limits(patterns::Limits {
        max_results_per_advance: 3,
        active_states: 4,
    });
    assert!(d.same_patterns(&relimited));
    let got: serde_json::Value = serde_json::from_slice(&relimited.to_json()).unwrap();
    assert_eq!(
        got["limits"],
        serde_json::json!({"max_results_per_advance": 3, "active_states": 4})
    );
    assert_eq!(got["patterns"], want["patterns"]);
    // the same patterns in another order, defaults written out, other limits
    let same = Document::from_json(&d.to_json()).unwrap();
    assert!(d.same_patterns(&same));
    let reordered = Document::from_json(
        br#"{"patterns":[
            {"name":"a","within":7,"skip":"skip_past_last","stages":[
                {"name":"x","max":3,"contiguity":"strict","where":{"all":[]},"forbidden":{"kind":"B"}}],
             "absence":{"kind":"C"}},
            {"name":"b","within":5,"skip":"no_skip","stages":[
                {"name":"s","min":1,"max":1,"contiguity":"skip_next","where":{"kind":"A"}}]}],
            "limits":{"max_results_per_advance":3}}"#,
    )
    .unwrap();
    assert!(d.same_patterns(&reordered));
    let other = Document::from_json(
        br#"{"patterns":[
            {"name":"a","within":7,"skip":"skip_past_last","stages":[
                {"name":"x","max":3,"contiguity":"strict","where":{"all":[]},"forbidden":{"kind":"B"}}],
             "absence":{"kind":"C"}},
            {"name":"b","within":6,"stages":[{"name":"s","where":{"kind":"A"}}]}]}"#,
    )
    .unwrap();
    assert!(!d.same_patterns(&other));
}

#[test]
fn event_errors_name_the_field_at_fault() {
    for (text, field) in [
        (item(r#","fields":{"amount":1e400}"#), "amount"),
        (
            item(r#","fields":{"amount":92233720368547758070}"#),
            "amount",
        ),
        (item(r#","fields":{"note":null}"#), "note"),
        (item(r#","fields":{"fee":{"decimal":"1."}}"#), "fee"),
        (
            r#"{"id":"x","key":"k","kind":"E","time":-1}"#.to_string(),
            "time",
        ),
        (
            r#"{"id":"","key":"k","kind":"E","time":1}"#.to_string(),
            "id",
        ),
        (
            r#"{"id":"x","key":"k","kind":"","time":1}"#.to_string(),
            "kind",
        ),
        (item(r#","fields":null"#), "fields"),
    ] {
        match patterns::parse_event(text.as_bytes()) {
            Ok(_) => panic!("accepted {text}"),
            Err(msg) => assert!(msg.contains(field), "{msg:?} should name {field:?}"),
        }
    }
}

#[test]
fn deeply_nested_input_is_refused_not_a_crash() {
    for depth in [129usize, 100_000] {
        let array = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let object = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        for v in [array, object] {
            let mut s = Scenario::new(&echo_doc());
            s.push_rejected(
                &[ev("k", "E", 5), item(&format!(r#","fields":{{"v":{v}}}"#))],
                "bad_request",
                1,
            );
        }
        let depth = depth.min(10_000); // documents: slower to refuse, linear still
        let c = format!(
            r#"{}{{"kind":"A"}}{}"#,
            r#"{"not":"#.repeat(depth),
            "}".repeat(depth)
        );
        refused(
            &pattern_of(&[format!(r#"{{"name":"a","where":{c}}}"#)], ""),
            "patterns[0].stages[0].where",
            "",
        );
    }
}
