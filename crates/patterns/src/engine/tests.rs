use super::*;
use crate::output::Output;
use crate::value::Value;

fn doc(json: &str) -> Document {
    Document::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn ev(id: &str, key: &str, kind: &str, time: i64) -> Event {
    // (every event carries an Integer amount equal to its time)
    Event::new(id, key, kind, time, &[("amount", Value::Integer(time))])
}

fn ids(out: &[Output]) -> Vec<String> {
    out.iter()
        .map(|o| format!("{} {} {}", o.seq, o.kind.name(), o.id))
        .collect()
}

const FRAUD: &str = r#"{"patterns":[{"name":"fraud","within":100,"skip":"no_skip","stages":[
    {"name":"login","where":{"kind":"login"}},
    {"name":"pay","min":1,"max":2,"where":{"kind":"pay"}},
    {"name":"logout","min":0,"where":{"kind":"logout"}}]}]}"#;

#[test]
fn matches_repeats_and_timeouts() {
    let mut e = Engine::new(doc(FRAUD));
    e.push(vec![
        ev("a", "k", "login", 10),
        ev("b", "k", "pay", 20),
        ev("c", "k", "pay", 30),
        ev("d", "k", "logout", 40),
    ])
    .unwrap();
    let out = e.advance(50).unwrap();
    assert_eq!(
        ids(&out.output),
        [
            "1 match fraud:1/2/",
            "2 match fraud:1/2.3/",
            "3 match fraud:1/2/4",
            "4 match fraud:1/2.3/4"
        ]
    );
    assert_eq!(out.processed, 4);
    // the branches still waiting (logout after 2.3, etc.) are complete:
    // they expire silently
    let fin = e.finish().unwrap();
    assert!(fin.output.is_empty(), "{:?}", ids(&fin.output));
    // a login alone times out
    e.push(vec![ev("x", "j", "login", 200_000)]).unwrap_err();
    let mut e = Engine::new(doc(FRAUD));
    e.push(vec![ev("x", "j", "login", 5)]).unwrap();
    let out = e.advance(104).unwrap();
    assert!(out.output.is_empty());
    let out = e.advance(105).unwrap();
    assert_eq!(ids(&out.output), ["1 timeout fraud:1//"]);
    assert_eq!(out.output[0].end_time, 105);
    assert_eq!(out.output[0].deadline, 105);
}

#[test]
fn a_limit_fails_the_whole_advance() {
    let d = doc(FRAUD).with_limits(Limits {
        max_results_per_advance: 1,
        active_states: 100,
    });
    let mut e = Engine::new(d);
    e.push(vec![
        ev("a", "k", "login", 10),
        ev("b", "k", "pay", 20),
        ev("c", "k", "pay", 30),
    ])
    .unwrap();
    let before = format!("{:?}", e.status());
    let r = e.advance(50);
    assert!(matches!(r, Err(Rejection::LimitExceeded(_))), "{r:?}");
    assert_eq!(format!("{:?}", e.status()), before);
    assert_eq!(e.watermark(), -1);
    assert_eq!(e.buffered(), 3);
    // with room, the same advance succeeds
    let mut e2 = Engine::new(doc(FRAUD));
    e2.push(vec![
        ev("a", "k", "login", 10),
        ev("b", "k", "pay", 20),
        ev("c", "k", "pay", 30),
    ])
    .unwrap();
    assert_eq!(e2.advance(50).unwrap().output.len(), 2);
}

#[test]
fn checkpoint_round_trip_continues_identically() {
    let d = doc(FRAUD);
    let mut a = Engine::new(d.clone());
    a.push(vec![
        ev("a", "k", "login", 10),
        ev("b", "k", "pay", 20),
        ev("c", "j", "login", 25),
        ev("e", "k", "pay", 300),
    ])
    .unwrap();
    a.advance(22).unwrap();
    let cp = a.checkpoint();
    let mut b = Engine::restore(&cp, &d).unwrap_or_else(|m| panic!("{m}"));
    assert_eq!(b.checkpoint(), cp, "{}", String::from_utf8_lossy(&cp));
    let ra = a.finish().unwrap();
    let rb = b.finish().unwrap();
    assert_eq!(ra, rb);
    assert!(!ra.output.is_empty());
}

#[test]
fn type_mismatches_are_counted_per_pattern_and_condition_and_are_no_state() {
    let d = doc(r#"{"patterns":[
        {"name":"big","within":100,"stages":[{"name":"a","where":{"all":[{"kind":"pay"},
            {"field":"amount","op":"gt","value":101.5}]}}]},
        {"name":"int","within":100,"stages":[{"name":"a","where":{"all":[{"kind":"pay"},
            {"field":"amount","op":"gt","value":101}]}}]}]}"#);
    let mut e = Engine::new(d.clone());
    assert_eq!(e.type_mismatches(), []);
    e.push(vec![ev("a", "k", "pay", 102), ev("b", "k", "login", 103)])
        .unwrap();
    let before = e.checkpoint();
    let out = e.advance(200).unwrap();
    // the Integer 102 never matches 101.5; it matches the Integer 101
    assert_eq!(ids(&out.output), ["1 match int:1"]);
    let counted = vec![TypeMismatch {
        pattern: "big".into(),
        condition: "stages[0].where.all[1]".into(),
        count: 1,
    }];
    assert_eq!(e.type_mismatches(), counted);
    // not state: a checkpoint does not hold them, a restore starts at 0
    let mut fresh = Engine::new(d.clone());
    fresh
        .push(vec![ev("a", "k", "pay", 102), ev("b", "k", "login", 103)])
        .unwrap();
    assert_eq!(fresh.checkpoint(), before);
    let mut restored = Engine::restore(&e.checkpoint(), &d).unwrap();
    assert_eq!(restored.type_mismatches(), []);
    restored.keep_type_mismatches(&e);
    assert_eq!(restored.type_mismatches(), counted);
    // a failed advance changes nothing but may leave its counts
    let mut e = Engine::new(d.with_limits(Limits {
        max_results_per_advance: 1,
        active_states: 100,
    }));
    e.push(vec![ev("a", "k", "pay", 102), ev("b", "j", "pay", 103)])
        .unwrap();
    let cp = e.checkpoint();
    assert!(matches!(e.advance(200), Err(Rejection::LimitExceeded(_))));
    assert_eq!(e.checkpoint(), cp);
    assert_eq!(e.type_mismatches()[0].count, 2);
}

/// Runs `events` (`id key kind time`) and one advance to 400; returns
/// `type id end_time` lines.
fn lines_of(document: &str, events: &[(&str, &str, &str, i64)]) -> Vec<String> {
    let mut e = Engine::new(doc(document));
    e.push(
        events
            .iter()
            .map(|&(id, k, kind, t)| ev(id, k, kind, t))
            .collect(),
    )
    .unwrap();
    let out = e.advance(400).unwrap().output;
    out.iter()
        .map(|o| format!("{} {} {}", o.kind.name(), o.id, o.end_time))
        .collect()
}

fn two(contiguity: &str, skip: &str) -> String {
    format!(
        r#"{{"patterns":[{{"name":"p","within":100,"skip":"{skip}","stages":[
            {{"name":"a","where":{{"kind":"a"}}}},
            {{"name":"b","contiguity":"{contiguity}","where":{{"kind":"b"}}}}]}}]}}"#
    )
}

/// The worked examples of docs/patterns.md stay true.
#[test]
fn the_documented_examples_hold() {
    let acb = [
        ("e1", "k", "a", 1),
        ("e2", "k", "c", 2),
        ("e3", "k", "b", 3),
    ];
    assert!(lines_of(&two("strict", "no_skip"), &acb).is_empty());
    assert_eq!(
        lines_of(&two("skip_next", "no_skip"), &acb),
        ["match p:1/3 3"]
    );
    assert_eq!(
        lines_of(&two("skip_any", "no_skip"), &acb),
        ["match p:1/3 3", "timeout p:1/ 101"]
    );
    let aabb = [
        ("e1", "k", "a", 1),
        ("e2", "k", "a", 2),
        ("e3", "k", "b", 3),
        ("e4", "k", "b", 4),
    ];
    assert_eq!(
        lines_of(&two("skip_any", "no_skip"), &aabb),
        [
            "match p:1/3 3",
            "match p:2/3 3",
            "match p:1/4 4",
            "match p:2/4 4",
            "timeout p:1/ 101",
            "timeout p:2/ 102"
        ]
    );
    assert_eq!(
        lines_of(&two("skip_any", "skip_to_next_start"), &aabb),
        ["match p:1/3 3", "match p:2/3 3"]
    );
    assert_eq!(
        lines_of(&two("skip_any", "skip_past_last"), &aabb),
        ["match p:1/3 3"]
    );
    let quiet = r#"{"patterns":[{"name":"quiet","within":100,
        "stages":[{"name":"login","where":{"kind":"login"}}],"absence":{"kind":"logout"}}]}"#;
    assert_eq!(
        lines_of(
            quiet,
            &[
                ("e1", "k", "login", 10),
                ("e2", "k", "logout", 110),
                ("e3", "k", "login", 200),
                ("e4", "j", "login", 205),
                ("e5", "j", "logout", 300),
            ]
        ),
        ["match quiet:3 300"],
        "a logout at the deadline cancels; the match ends at the deadline"
    );
    let deadline = r#"{"patterns":[{"name":"d","within":10,"stages":[
        {"name":"a","where":{"kind":"a"}},{"name":"b","where":{"kind":"b"}}]}]}"#;
    assert_eq!(
        lines_of(
            deadline,
            &[
                ("e1", "k", "a", 0),
                ("e2", "k", "b", 10),
                ("e3", "j", "a", 0),
                ("e4", "j", "b", 11)
            ]
        ),
        ["match d:1/2 10", "timeout d:3/ 10"]
    );
    let dedup = r#"{"patterns":[{"name":"t","within":100,"stages":[
        {"name":"login","where":{"kind":"login"}},
        {"name":"pay","min":1,"max":2,"where":{"kind":"pay"}},
        {"name":"two","where":{"kind":"pay"}}]}]}"#;
    assert_eq!(
        lines_of(dedup, &[("e1", "k", "login", 10), ("e2", "k", "pay", 20)]),
        ["timeout t:1/2/ 110"],
        "one timeout per distinct assignment"
    );
}
