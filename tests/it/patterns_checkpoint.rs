//! Pattern engine checkpoints: canonical bytes, determinism, independence
//! from later processing, restore-then-continue equal to an uninterrupted
//! run, tolerant parsing of the envelope, and every rejection rule, each
//! with a crafted state under a valid checksum and a message naming it.

use crate::support::patterns;

use patterns::*;
use serde_json::{json, Value};
use streamforge::patterns::{Document, Engine, Limits};

/// The exact checkpoint of the scenario after its fifth step (advance to
/// 55): every key sorted, no whitespace, Doubles as hex bits, fields in push
/// order, branches by (selection key, stage), states by (pattern, key).
const GOLDEN_STATE: &str = concat!(
    r#"{"buffer":[{"fields":[["limit",{"double":"4059000000000000"}]],"id":"b2","key":"k3","kind":"login","ordinal":8,"time":60}],"#,
    r#""captured":[{"fields":[["limit",5],["rate",{"double":"3fe0000000000000"}]],"id":"l1","key":"k1","kind":"login","ordinal":1,"time":10},"#,
    r#"{"fields":[["amount",5],["note","first"]],"id":"p1","key":"k1","kind":"pay","ordinal":2,"time":20},"#,
    r#"{"fields":[["limit",1],["d",{"decimal":"-1.50"}]],"id":"l2","key":"k2","kind":"login","ordinal":3,"time":15},"#,
    r#"{"fields":[["amount",7],["x",{"double":"8000000000000000"}]],"id":"p2","key":"k1","kind":"pay","ordinal":4,"time":30},"#,
    r#"{"fields":[["amount",2],["b",true]],"id":"p4","key":"k2","kind":"pay","ordinal":6,"time":35},"#,
    r#"{"fields":[["amount",9]],"id":"b1","key":"k1","kind":"pay","ordinal":7,"time":50}],"#,
    r#""next_ordinal":9,"#,
    r#""patterns":[{"name":"fraud","skip":"no_skip","stages":["#,
    r#"{"contiguity":"skip_next","max":1,"min":1,"name":"login","where":{"kind":"login"}},"#,
    r#"{"contiguity":"skip_any","forbidden":{"kind":"logout"},"max":3,"min":1,"name":"pay","where":{"all":[{"kind":"pay"},{"capture":"login","capture_field":"limit","field":"amount","op":"ge"}]}},"#,
    r#"{"contiguity":"skip_next","max":1,"min":0,"name":"confirm","where":{"kind":"confirm"}}],"within":1000},"#,
    r#"{"absence":{"kind":"logout"},"name":"quiet","skip":"skip_to_next_start","stages":[{"contiguity":"skip_next","max":1,"min":1,"name":"start","where":{"kind":"login"}}],"within":500}],"#,
    r#""sequence":8,"#,
    r#""states":[{"branches":["#,
    r#"{"captures":[[1],[],[]],"deadline":1010,"stage":1},"#,
    r#"{"captures":[[1],[2],[]],"deadline":1010,"stage":1},{"captures":[[1],[2],[]],"deadline":1010,"stage":2},"#,
    r#"{"captures":[[1],[4],[]],"deadline":1010,"stage":1},{"captures":[[1],[4],[]],"deadline":1010,"stage":2},"#,
    r#"{"captures":[[1],[7],[]],"deadline":1010,"stage":1},{"captures":[[1],[7],[]],"deadline":1010,"stage":2},"#,
    r#"{"captures":[[1],[2,4],[]],"deadline":1010,"stage":1},{"captures":[[1],[2,4],[]],"deadline":1010,"stage":2},"#,
    r#"{"captures":[[1],[2,7],[]],"deadline":1010,"stage":1},{"captures":[[1],[2,7],[]],"deadline":1010,"stage":2},"#,
    r#"{"captures":[[1],[4,7],[]],"deadline":1010,"stage":1},{"captures":[[1],[4,7],[]],"deadline":1010,"stage":2},"#,
    r#"{"captures":[[1],[2,4,7],[]],"deadline":1010,"stage":2}],"key":"k1","pattern":"fraud","waits":[]},"#,
    r#"{"branches":[{"captures":[[3],[],[]],"deadline":1015,"stage":1},{"captures":[[3],[6],[]],"deadline":1015,"stage":1},{"captures":[[3],[6],[]],"deadline":1015,"stage":2}],"key":"k2","pattern":"fraud","waits":[]},"#,
    r#"{"branches":[],"key":"k1","pattern":"quiet","waits":[{"captures":[[1]],"deadline":510}]},"#,
    r#"{"branches":[],"key":"k2","pattern":"quiet","waits":[{"captures":[[3]],"deadline":515}]}],"#,
    r#""watermark":55}"#
);

/// The scenario's output from its sixth step on, uninterrupted.
const REST: &[&str] = &[
    "9 match fraud:1/2/10 80",
    "10 match fraud:1/4/10 80",
    "11 match fraud:1/7/10 80",
    "12 match fraud:1/2.4/10 80",
    "13 match fraud:1/2.7/10 80",
    "14 match fraud:1/4.7/10 80",
    "15 match fraud:1/2.4.7/10 80",
    "16 match quiet:1 510",
    "17 match quiet:8 560",
    "18 match fraud:11/12/ 900",
    "19 timeout fraud:1// 1010",
    "20 timeout fraud:8// 1060",
    "21 match quiet:11 1200",
];

fn cut() -> Engine {
    engine_after(5)
}

fn rest() -> Vec<Step> {
    scenario().into_iter().skip(5).collect()
}

#[test]
fn the_checkpoint_is_the_canonical_envelope() {
    let cp = cut().checkpoint();
    assert_eq!(
        String::from_utf8(cp.clone()).unwrap(),
        String::from_utf8(envelope(GOLDEN_STATE)).unwrap()
    );
    // the envelope's keys are sorted and its checksum is the state's
    let text = String::from_utf8(cp).unwrap();
    assert!(text.starts_with(r#"{"format":"streamforge-patterns-checkpoint","sha256":""#));
    assert!(text.ends_with(r#","version":1}"#));
    assert!(!text.contains(char::is_whitespace));
}

#[test]
fn the_same_state_gives_the_same_bytes() {
    // pushed in other batches and advanced in other steps, same state
    let mut a = Engine::new(doc());
    let events: Vec<_> = scenario()
        .into_iter()
        .take(4)
        .flat_map(|s| match s {
            Step::Push(v) => v,
            Step::Advance(_) => vec![],
        })
        .collect();
    for e in events {
        a.push(vec![e]).unwrap();
        if a.watermark() < 0 {
            a.advance(0).unwrap();
        }
    }
    a.advance(12).unwrap();
    a.advance(55).unwrap();
    assert_eq!(a.checkpoint(), cut().checkpoint());
    // twice from one engine, and from a clone
    let c = cut();
    assert_eq!(c.checkpoint(), c.checkpoint());
    assert_eq!(c.clone().checkpoint(), c.checkpoint());
}

#[test]
fn a_checkpoint_is_independent_of_later_processing() {
    let mut e = cut();
    let cp = e.checkpoint();
    let copy = cp.clone();
    let out = run(&mut e, rest());
    assert_eq!(lines(&out), REST);
    assert_ne!(e.checkpoint(), cp);
    assert_eq!(cp, copy);
    let mut back = Engine::restore(&cp, &doc()).unwrap();
    assert_eq!(back.checkpoint(), cp);
    assert_eq!(lines(&run(&mut back, rest())), REST);
    assert_eq!(back.checkpoint(), e.checkpoint());
}

#[test]
fn restore_then_continue_equals_an_uninterrupted_run_at_every_step() {
    let mut whole = Engine::new(doc());
    let all = run(&mut whole, scenario());
    let n = scenario().len();
    for k in 0..=n {
        let mut first = Engine::new(doc());
        let mut out = run(&mut first, scenario().into_iter().take(k));
        let mut second = Engine::restore(&first.checkpoint(), &doc())
            .unwrap_or_else(|m| panic!("step {k}: {m}"));
        assert_eq!(second.status(), first.status(), "step {k}");
        out.extend(run(&mut second, scenario().into_iter().skip(k)));
        assert_eq!(out, all, "cut after step {k}");
        assert_eq!(second.checkpoint(), whole.checkpoint(), "step {k}");
        assert_eq!(second.finish().unwrap(), whole.clone().finish().unwrap());
    }
}

#[test]
fn restore_uses_the_services_limits() {
    let cp = cut().checkpoint();
    let tight = doc().with_limits(Limits {
        max_results_per_advance: 1,
        active_states: 10_000,
    });
    let mut e = Engine::restore(&cp, &tight).unwrap();
    assert_eq!(e.limits(), tight.limits());
    let before = e.checkpoint();
    e.push(vec![event("c1", "k1", "confirm", 80, "")]).unwrap();
    let pushed = e.checkpoint();
    assert!(e.advance(600).is_err(), "7 matches in one advance");
    assert_eq!(e.checkpoint(), pushed);
    assert_ne!(before, pushed);
}

/// Re-serializes a JSON value with its object keys in reverse order and
/// generous whitespace.
fn scrambled(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push_str("{\n  ");
            let mut keys: Vec<&String> = m.keys().collect();
            keys.reverse();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\t");
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(" : ");
                scrambled(&m[k], out);
            }
            out.push_str("\r\n}");
        }
        Value::Array(a) => {
            out.push_str("[ ");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                scrambled(x, out);
            }
            out.push_str(" ]");
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

#[test]
fn restore_accepts_other_whitespace_and_key_order() {
    let cp = cut().checkpoint();
    let v: Value = serde_json::from_slice(&cp).unwrap();
    let mut text = String::new();
    scrambled(&v, &mut text);
    assert_ne!(text.as_bytes(), &cp[..]);
    assert!(text.find("\"version\"").unwrap() < text.find("\"format\"").unwrap());
    let e = Engine::restore(text.as_bytes(), &doc()).unwrap_or_else(|m| panic!("{m}"));
    assert_eq!(e.checkpoint(), cp);
}

#[test]
fn restore_accepts_the_patterns_document_in_any_order_with_defaults_omitted() {
    let reordered = Document::from_json(
        br#"{"limits": {"active_states": 7},
            "patterns": [
              {"absence": {"kind": "logout"}, "stages": [{"where": {"kind": "login"}, "name": "start"}],
               "skip": "skip_to_next_start", "within": 500, "name": "quiet"},
              {"name": "fraud", "within": 1000, "stages": [
                {"name": "login", "min": 1, "where": {"kind": "login"}, "contiguity": "skip_next"},
                {"name": "pay", "min": 1, "max": 3, "contiguity": "skip_any",
                 "where": {"all": [{"kind": "pay"},
                    {"capture_field": "limit", "capture": "login", "op": "ge", "field": "amount"}]},
                 "forbidden": {"kind": "logout"}},
                {"name": "confirm", "min": 0, "max": 1, "where": {"kind": "confirm"}}]}]}"#,
    )
    .unwrap();
    assert!(reordered.same_patterns(&doc()));
    let e = Engine::restore(&cut().checkpoint(), &reordered).unwrap();
    assert_eq!(e.limits().active_states, 7);
}

// ---- rejections -------------------------------------------------------

/// The scenario's state after step 5 as JSON.
fn state() -> Value {
    serde_json::from_str(GOLDEN_STATE).unwrap()
}

/// Restores a crafted state under a valid checksum (serde_json writes a
/// `Value` canonically: sorted keys, no whitespace) and returns the error.
fn rejected(state: &Value) -> String {
    let text = serde_json::to_string(state).unwrap();
    match Engine::restore(&envelope(&text), &doc()) {
        Ok(_) => panic!("accepted: {text}"),
        Err(m) => m,
    }
}

fn assert_rejected(what: &str, state: &Value, names: &[&str]) {
    let m = rejected(state);
    for n in names {
        assert!(m.contains(n), "{what}: {m:?} should contain {n:?}");
    }
}

/// A mutation of the golden state and what its message must contain.
type Case = (&'static str, fn(&mut Value), &'static [&'static str]);

const CASES: &[Case] = &[
    (
        "an unknown key",
        |s| s["extra"] = json!(1),
        &["unknown key \"extra\""],
    ),
    (
        "a missing key",
        |s| {
            s.as_object_mut().unwrap().remove("sequence");
        },
        &["missing key \"sequence\""],
    ),
    (
        "a boolean where an integer belongs",
        |s| s["sequence"] = json!(true),
        &["state.sequence", "integer"],
    ),
    (
        "a watermark out of range",
        |s| s["watermark"] = json!(-2),
        &["state.watermark", "out of range"],
    ),
    (
        "a sequence out of range",
        |s| s["sequence"] = json!(9007199254740992u64),
        &["state.sequence", "out of range"],
    ),
    (
        "a next ordinal of 0",
        |s| s["next_ordinal"] = json!(0),
        &["state.next_ordinal", "out of range"],
    ),
    (
        "an ordinal at the next ordinal",
        |s| s["next_ordinal"] = json!(8),
        &["state.buffer[0]", "at or beyond the next ordinal"],
    ),
    (
        "a captured ordinal beyond the next ordinal",
        |s| {
            s["buffer"] = json!([]);
            s["next_ordinal"] = json!(7);
        },
        &["state.captured[5]", "at or beyond the next ordinal"],
    ),
    (
        "a buffered event at the watermark",
        |s| s["buffer"][0]["time"] = json!(55),
        &["state.buffer[0]", "at or before the watermark"],
    ),
    (
        "buffered events out of ordinal order",
        |s| {
            let mut e = s["buffer"][0].clone();
            e["ordinal"] = json!(5);
            s["buffer"].as_array_mut().unwrap().push(e);
        },
        &["state.buffer[1]", "strictly increasing ordinal order"],
    ),
    (
        "a captured event after the watermark",
        |s| s["watermark"] = json!(49),
        &["state.captured[5]", "after the watermark"],
    ),
    (
        "an ordinal both buffered and captured",
        |s| s["buffer"][0]["ordinal"] = json!(7),
        &["state.captured[5]", "both buffered and captured"],
    ),
    (
        "captured events out of ordinal order",
        |s| s["captured"].as_array_mut().unwrap().swap(0, 1),
        &["state.captured[1]", "strictly increasing ordinal order"],
    ),
    (
        "an invalid captured event",
        |s| s["captured"][0]["id"] = json!(""),
        &["state.captured[0]", "invalid event", "id"],
    ),
    (
        "an event time out of range",
        |s| s["buffer"][0]["time"] = json!(9007199254740992u64),
        &["state.buffer[0]", "time"],
    ),
    (
        "a Double as a float",
        |s| s["captured"][0]["fields"][1][1] = json!(0.5),
        &["float"],
    ),
    (
        "a Double with upper-case hex",
        |s| s["captured"][0]["fields"][1][1] = json!({"double": "3FE0000000000000"}),
        &["state.captured[0].fields[1][1]", "hex"],
    ),
    (
        "a Double that is not finite",
        |s| s["captured"][0]["fields"][1][1] = json!({"double": "7ff0000000000000"}),
        &["state.captured[0].fields[1][1]", "not finite"],
    ),
    (
        "a bad decimal",
        |s| s["captured"][2]["fields"][1][1] = json!({"decimal": "1."}),
        &["state.captured[2].fields[1][1]", "decimal"],
    ),
    (
        "different patterns",
        |s| s["patterns"][0]["within"] = json!(1001),
        &["different patterns"],
    ),
    (
        "an invalid pattern",
        |s| s["patterns"][0]["stages"][1]["max"] = json!(0),
        &["state.patterns[0].stages[1].max"],
    ),
    (
        "states out of order",
        |s| s["states"].as_array_mut().unwrap().swap(0, 1),
        &["state.states[1]", "(pattern, key) order"],
    ),
    (
        "a duplicate state",
        |s| {
            let st = s["states"][3].clone();
            s["states"].as_array_mut().unwrap().push(st);
        },
        &["state.states[4]", "without duplicates"],
    ),
    (
        "an unknown pattern",
        |s| s["states"][3]["pattern"] = json!("zzz"),
        &["state.states[3].pattern", "unknown pattern"],
    ),
    (
        "an empty state",
        |s| s["states"][3]["waits"] = json!([]),
        &["state.states[3]", "neither branches nor waits"],
    ),
    (
        "waits for a pattern without absence",
        |s| s["states"][1]["waits"] = json!([{"captures": [[3], [6], []], "deadline": 1015}]),
        &["state.states[1].waits", "no absence"],
    ),
    (
        "a branch's stage out of range",
        |s| s["states"][1]["branches"][0]["stage"] = json!(3),
        &["state.states[1].branches[0].stage", "out of range"],
    ),
    (
        "capture lists not one per stage",
        |s| s["states"][1]["branches"][0]["captures"] = json!([[3], []]),
        &["state.states[1].branches[0].captures", "3 stages"],
    ),
    (
        "a capture of an unknown ordinal",
        |s| s["states"][1]["branches"][1]["captures"][1] = json!([5]),
        &[
            "state.states[1].branches[1].captures[1][0]",
            "not a captured event",
        ],
    ),
    (
        "a captured event of another key",
        |s| s["states"][1]["branches"][1]["captures"][1] = json!([7]),
        &[
            "state.states[1].branches[1].captures[1][0]",
            "of key \"k1\"",
        ],
    ),
    (
        "captures out of processing order",
        |s| s["states"][0]["branches"][7]["captures"][1] = json!([4, 2]),
        &[
            "state.states[0].branches[7].captures[1][1]",
            "processing order",
        ],
    ),
    (
        "a first capture outside the first stage",
        |s| s["states"][0]["branches"][1]["captures"] = json!([[], [2], []]),
        &["state.states[0].branches[1].captures[1][0]", "first stage"],
    ),
    (
        "a stage above its max",
        |s| {
            s["states"][0]["branches"][13]["captures"][1] = json!([2, 4, 7]);
            s["states"][0]["branches"][13]["stage"] = json!(1);
        },
        &["state.states[0].branches[13].captures[1]", "min/max"],
    ),
    (
        "a stage left below its min",
        |s| s["states"][0]["branches"][0]["stage"] = json!(2),
        &["state.states[0].branches[0].captures[1]", "min/max"],
    ),
    (
        "a capture after the awaited stage",
        |s| s["states"][0]["branches"][1]["stage"] = json!(0),
        &["state.states[0].branches[1].captures", "min/max"],
    ),
    (
        "an incomplete wait",
        |s| s["states"][2]["waits"][0]["captures"] = json!([[]]),
        &["state.states[2].waits[0].captures", "no captures"],
    ),
    (
        "a deadline other than start + within",
        |s| s["states"][1]["branches"][0]["deadline"] = json!(1016),
        &["state.states[1].branches[0].deadline", "start + within"],
    ),
    (
        "a wait's deadline other than start + within",
        |s| s["states"][2]["waits"][0]["deadline"] = json!(511),
        &["state.states[2].waits[0].deadline", "start + within"],
    ),
    (
        "a wait's deadline at the watermark",
        |s| {
            s["watermark"] = json!(510);
            s["buffer"][0]["time"] = json!(600);
        },
        &[
            "state.states[2].waits[0].deadline",
            "at or before the watermark",
        ],
    ),
    (
        "a branch's deadline at the watermark",
        |s| {
            s["watermark"] = json!(1010);
            s["buffer"][0]["time"] = json!(2000);
        },
        &[
            "state.states[0].branches[0].deadline",
            "at or before the watermark",
        ],
    ),
    (
        "branches out of order",
        |s| {
            s["states"][0]["branches"]
                .as_array_mut()
                .unwrap()
                .swap(1, 2)
        },
        &[
            "state.states[0].branches[2]",
            "(selection key, stage) order",
        ],
    ),
    (
        "a duplicate branch",
        |s| {
            let b = s["states"][1]["branches"][2].clone();
            s["states"][1]["branches"].as_array_mut().unwrap().push(b);
        },
        &["state.states[1].branches[3]", "without duplicates"],
    ),
    (
        "a captured event failing its stage's where",
        |s| s["captured"][1]["fields"][0][1] = json!(4),
        &["does not satisfy the where of stage \"pay\""],
    ),
    (
        "a captured event meeting its stage's forbidden",
        |s| {
            // p4 (ordinal 6) as a logout: it fails where, and forbidden
            // is checked first
            s["captured"][4]["kind"] = json!("logout");
        },
        &[
            "state.states[1].branches[1].captures[1][0]",
            "forbidden of stage \"pay\"",
        ],
    ),
    (
        "a captured event held by nothing",
        |s| {
            // only k2's two branches [3/6] hold p4 (ordinal 6)
            s["states"][1]["branches"]
                .as_array_mut()
                .unwrap()
                .truncate(1);
        },
        &[
            "state.captured",
            "captured event 6 is held by no branch or wait",
        ],
    ),
];

#[test]
fn every_rule_rejects_a_crafted_state_under_a_valid_checksum() {
    // the golden state itself restores
    Engine::restore(&envelope(GOLDEN_STATE), &doc()).unwrap();
    for (what, mutate, names) in CASES {
        let mut s = state();
        mutate(&mut s);
        assert_rejected(what, &s, names);
    }
}

#[test]
fn the_envelope_rules_reject_with_their_names() {
    let good = envelope(GOLDEN_STATE);
    let text = String::from_utf8(good.clone()).unwrap();
    let restore = |b: &[u8]| Engine::restore(b, &doc()).unwrap_err();
    assert!(restore(b"").contains("malformed"));
    assert!(restore(&good[..good.len() - 1]).contains("malformed"));
    assert!(restore(b"[]").contains("must be an object"));
    assert!(restore(
        text.replace("streamforge-patterns-checkpoint", "streamforge-checkpoint")
            .as_bytes()
    )
    .contains("unknown checkpoint format"));
    assert!(restore(
        text.replace(r#""version":1}"#, r#""version":2}"#)
            .as_bytes()
    )
    .contains("unsupported checkpoint version 2"));
    assert!(restore(
        text.replace(r#""version":1}"#, r#""version":"1"}"#)
            .as_bytes()
    )
    .contains("unsupported checkpoint version"));
    assert!(restore(
        text.replace(r#""version":1}"#, r#""version":1.0}"#)
            .as_bytes()
    )
    .contains("float"));
    assert!(restore(
        text.replace(r#""version":1}"#, r#""version":1,"x":1}"#)
            .as_bytes()
    )
    .contains("unknown key \"x\""));
    let sha = &text[text.find("sha256").unwrap() + 9..][..64];
    let zeros = "0".repeat(64);
    assert!(restore(text.replacen(sha, &zeros, 1).as_bytes()).contains("checksum mismatch"));
    assert!(
        restore(text.replacen(sha, &sha.to_uppercase(), 1).as_bytes())
            .contains("checksum mismatch")
    );
    // a duplicate key, under a checksum of either reading
    let dup = GOLDEN_STATE.replacen(r#""sequence":8,"#, r#""sequence":8,"sequence":8,"#, 1);
    assert!(restore(&envelope(&dup)).contains("duplicate key"));
    // different patterns: another document
    let other = Document::from_json(
        br#"{"patterns":[{"name":"fraud","within":1000,"stages":[{"name":"login","where":{"kind":"login"}}]}]}"#,
    )
    .unwrap();
    assert!(Engine::restore(&good, &other)
        .unwrap_err()
        .contains("different patterns"));
}

#[test]
fn a_rejected_restore_changes_nothing() {
    // restore is a constructor: the running engine is untouched by a
    // failed one, and keeps working
    let mut e = cut();
    let before = e.checkpoint();
    let mut bad = state();
    bad["watermark"] = json!(-5);
    let text = serde_json::to_string(&bad).unwrap();
    assert!(Engine::restore(&envelope(&text), e.document()).is_err());
    assert_eq!(e.checkpoint(), before);
    assert_eq!(lines(&run(&mut e, rest())), REST);
}
