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

mod patterns_reference;

use patterns_reference as reference;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

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
        let mut sides: Vec<Box<dyn Side>> = vec![Box::new(Reference(reference::Model::new(&value)))];
        sides.extend(engine_side(doc));
        Scenario {
            sides,
            stages,
            pushed: Vec::new(),
        }
    }

    fn each(&mut self, what: &str, f: &dyn Fn(&mut dyn Side) -> Answer) -> Vec<(&'static str, Answer)> {
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
        let want = Answer::PushRejected(code.to_string(), index);
        let bytes: Vec<&[u8]> = items.iter().map(|s| s.as_bytes()).collect();
        for (label, got) in self.each("push", &|s| s.push(&bytes)) {
            assert_eq!(got, want, "{label}: push {items:?}");
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
            assert_eq!(heads, want, "{label}: {what}: output records\nfull: {output:#?}");
            assert_eq!((watermark, p), (w, processed), "{label}: {what}: watermark, processed");
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
            assert_eq!(ordinals.join("."), list, "{label}: id {id} vs captures in {record}");
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
    format!(r#"{{"id":"{kind}{time}","key":"{key}","kind":"{kind}","time":{time},"fields":{fields}}}"#)
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

fn no_engine_yet() -> Vec<Box<dyn Side>> {
    Vec::new()
}

fn engine_side(_doc: &str) -> Vec<Box<dyn Side>> {
    no_engine_yet()
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
    s.advance(5, 2, &[m(1, "p:2", "k2", 3, 3, 3, 13), m(2, "p:1", "k1", 5, 5, 5, 15)]);
    s.status((5, 1, 4, 2, vec![("p".into(), 0, 0, 0)]));
    s.advance(9, 1, &[m(3, "p:3", "k1", 9, 9, 9, 19)]);
}

#[test]
fn equal_events_are_two_occurrences() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.push(&[ev("k", "A", 1), ev("k", "A", 1)], 1, 2, 2);
    s.push(&[ev("k", "A", 1)], 3, 3, 3);
    s.advance(1, 3, &[m(1, "p:1", "k", 1, 1, 1, 11), m(2, "p:2", "k", 1, 1, 1, 11), m(3, "p:3", "k", 1, 1, 1, 11)]);
}

#[test]
fn a_late_event_rejects_its_whole_batch_with_its_index() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.push(&[ev("k", "A", 0)], 1, 1, 1); // watermark -1: time 0 is not late
    s.advance(5, 1, &[m(1, "p:1", "k", 0, 0, 0, 10)]);
    // time == watermark is late; the batch is atomic: nothing buffered, no ordinal used
    s.push_rejected(&[ev("k", "A", 6), ev("k", "A", 5), ev("k", "A", 7)], "late_event", 1);
    s.push_rejected(&[ev("k", "A", 2)], "late_event", 0);
    s.status((5, 0, 2, 1, vec![("p".into(), 0, 0, 0)]));
    s.push(&[ev("k", "A", 6)], 2, 2, 1);
    s.advance(6, 1, &[m(2, "p:2", "k", 6, 6, 6, 16)]);
}

#[test]
fn the_first_failing_item_decides_between_malformed_and_late() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A")])]));
    s.advance(5, 0, &[]);
    let bad = r#"{"id":"x","key":"k","kind":"A","time":9,"fields":{"v":null}}"#.to_string();
    let bad_and_late = r#"{"id":"x","key":"k","kind":"A","time":1,"fields":{"v":null}}"#.to_string();
    s.push_rejected(&[ev("k", "A", 6), ev("k", "A", 5), bad.clone()], "late_event", 1);
    s.push_rejected(&[ev("k", "A", 6), bad.clone(), ev("k", "A", 5)], "bad_request", 1);
    // a malformed item is malformed whatever its time
    s.push_rejected(&[bad_and_late.clone(), ev("k", "A", 5)], "bad_request", 0);
    s.push_rejected(&[ev("k", "A", 6), ev("k", "A", 7), bad_and_late], "bad_request", 2);
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
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", window, &[("a", "A"), ("b", "B")])]));
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
    s.push(&[ev("a", "A", 1), ev("b", "A", 5), ev("b", "B", 11)], 1, 3, 3);
    s.advance(
        11,
        3,
        &[m(1, "p:2/3", "b", 5, 11, 11, 15), t(2, "p:1/", "a", 1, 11, 1, 11)],
    );
}

#[test]
fn deadlines_before_a_time_come_before_the_observations_at_it() {
    let mut s = Scenario::new(&doc(&[&seq_pattern("p", 10, &[("a", "A"), ("b", "B")])]));
    // the completing event is pushed first (smallest ordinal) and still comes
    // after the deadline 11 < 12 of the other key
    s.push(&[ev("b", "B", 12), ev("a", "A", 1), ev("b", "A", 2)], 1, 3, 3);
    s.advance(
        20,
        3,
        &[t(1, "p:2/", "a", 1, 11, 1, 11), m(2, "p:3/1", "b", 2, 12, 12, 12)],
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
        &[ev("é", "A", 1), ev("b", "A", 1), ev("Z", "A", 1), ev("a", "A", 1)],
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
    s.push(&[ev("k1", "A", 1), ev("k2", "B", 2), ev("", "A", 3), ev("", "B", 4)], 1, 4, 4);
    s.advance(4, 4, &[m(1, "p:3/4", "", 3, 4, 4, 13)]);
    s.status((4, 0, 5, 1, vec![("p".into(), 1, 1, 0)]));
    s.finish(0, &[t(2, "p:1/", "k1", 1, 11, 1, 11)]);
}
