//! Checkpoint format and restore validation (docs/checkpoint.md).

use crate::support::engine;

use engine::*;
use serde_json::{json, Value};
use streamforge::engine::{Pipeline, Processor};

/// Applies `f` to the parsed state, then re-wraps it with a correct digest.
fn mutate(cp: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    rewrap(cp, f)
}

/// The version 1 envelope of the state of a version 2 one.
fn as_v1(cp: &[u8]) -> Vec<u8> {
    let env: Value = serde_json::from_slice(cp).unwrap();
    let state = serde_json::to_vec(&env["state"]).unwrap();
    format!(
        r#"{{"format":"streamforge-checkpoint","sha256":"{}","state":{},"version":1}}"#,
        sha_hex(&state),
        String::from_utf8(state).unwrap()
    )
    .into_bytes()
}

fn rejected(bytes: &[u8]) -> String {
    match Processor::restore(bytes, &pipeline(CHECKPOINT_PIPELINE)) {
        Ok(_) => panic!(
            "restore accepted an invalid checkpoint: {}",
            String::from_utf8_lossy(bytes)
        ),
        Err(e) => {
            assert_eq!(e.code(), "invalid_checkpoint");
            assert!(!e.detail().is_empty());
            e.detail().to_string()
        }
    }
}

#[test]
fn envelope_is_canonical_and_checksummed() {
    let p = checkpoint_scenario();
    let cp = p.checkpoint().unwrap();
    let env: Value = serde_json::from_slice(&cp).unwrap();
    // serde_json's Map is sorted and compact: the same bytes.
    assert_eq!(serde_json::to_vec(&env).unwrap(), cp);
    assert_eq!(env["digest"], json!(digest_of(&env["state"])));
    assert_eq!(env["format"], json!("streamforge-checkpoint"));
    assert_eq!(env["version"], json!(2));
    assert_eq!(env.as_object().unwrap().len(), 4);
    assert_eq!(
        env["state"]["sources"]["p1"][0],
        json!(["c", "j\n\"", 4, 7])
    );
    assert_eq!(env["state"]["late"], json!([[["late", "k", 2, 1], 11]]));
    assert_eq!(
        env["state"]["clock"],
        json!({"max_timestamp": 14, "partitions": {"p0": {"idle": false, "progress": 20}, "p1": {"idle": false, "progress": 11}}, "watermark": 11})
    );
}

#[test]
fn equal_state_gives_identical_bytes_whatever_the_order() {
    // (stream-time windows depend on arrival order, so they are left out)
    let declared = r#"{"partitions":["p0","p1"],"windows":{"f":{"kind":"fixed","size":10},"h":{"kind":"sliding","size":10,"step":5},"s":{"kind":"session","gap":5}},"lateness":5}"#;
    let reordered = r#"{"lateness":5,"windows":{"s":{"gap":5,"kind":"session"},"h":{"step":5,"size":10,"kind":"sliding"},"f":{"size":10,"kind":"fixed"}},"partitions":["p1","p0"]}"#;
    let mut a = Processor::new(pipeline(declared));
    let mut b = Processor::new(pipeline(reordered));
    let deliveries = [
        d("p0", 0, "a", "k", 1, 5),
        d("p0", 1, "b", "x", 12, -3),
        d("p1", 0, "c", "k", 4, 7),
        d("p1", 1, "d", "x", 3, 1),
    ];
    for x in &deliveries {
        a.ingest(vec![x.clone()]).unwrap();
    }
    // other interleaving, as one batch
    b.ingest(vec![
        deliveries[2].clone(),
        deliveries[0].clone(),
        deliveries[3].clone(),
        deliveries[1].clone(),
    ])
    .unwrap();
    a.advance("p0", 10).unwrap();
    a.advance("p1", 10).unwrap();
    b.advance("p1", 10).unwrap();
    b.advance("p0", 10).unwrap();
    assert_eq!(
        String::from_utf8(a.checkpoint().unwrap()).unwrap(),
        String::from_utf8(b.checkpoint().unwrap()).unwrap()
    );
}

#[test]
fn a_checkpoint_does_not_change_when_the_processor_moves_on() {
    let mut p = checkpoint_scenario();
    let cp = p.checkpoint().unwrap();
    let snap = p.snapshot();
    assert_eq!(
        snap.checkpoint().unwrap(),
        cp,
        "a snapshot checkpoints like its processor"
    );
    p.ingest(vec![d("p1", 2, "z", "k", 30, 1)]).unwrap();
    p.advance("p1", 40).unwrap();
    assert_ne!(p.checkpoint().unwrap(), cp);
    assert_eq!(
        snap.checkpoint().unwrap(),
        cp,
        "a snapshot is frozen: the processor moved on"
    );
    let back = Processor::restore(&cp, p.pipeline()).unwrap();
    assert_eq!(back.checkpoint().unwrap(), cp);
}

#[test]
fn restore_continues_exactly_like_the_original() {
    let mut p = checkpoint_scenario();
    let mut q = Processor::restore(&p.checkpoint().unwrap(), p.pipeline()).unwrap();
    let ops = [
        d("p0", 4, "n1", "k", 16, 3),
        d("p1", 2, "n2", "k", 21, 4),
        d("p0", 5, "n3", "k", 3, 9),
    ];
    for x in ops {
        assert_eq!(p.ingest(vec![x.clone()]), q.ingest(vec![x]));
    }
    assert_eq!(p.advance("p1", 30), q.advance("p1", 30));
    assert_eq!(p.mark_idle("p0"), q.mark_idle("p0"));
    assert_eq!(p.checkpoint().unwrap(), q.checkpoint().unwrap());
}

#[test]
fn restore_accepts_whitespace_and_reordered_pipelines() {
    let p = checkpoint_scenario();
    let cp = p.checkpoint().unwrap();
    let env: Value = serde_json::from_slice(&cp).unwrap();
    let pretty = serde_json::to_vec_pretty(&env).unwrap();
    let q = Processor::restore(&pretty, p.pipeline()).unwrap();
    assert_eq!(q.checkpoint().unwrap(), cp);
    // partition list in any order; target pipeline declared in another order
    let unsorted = mutate(&cp, |s| s["pipeline"]["partitions"] = json!(["p1", "p0"]));
    let other = Pipeline::from_json(br#"{"partitions":["p1","p0"],"lateness":5,"windows":{"st":{"kind":"stream_time","size":10},"s":{"kind":"session","gap":5},"h":{"kind":"sliding","size":10,"step":5},"f":{"kind":"fixed","size":10}}}"#).unwrap();
    assert_eq!(
        Processor::restore(&unsorted, &other)
            .unwrap()
            .checkpoint()
            .unwrap(),
        cp
    );
    // the digest may also be over the partitions as listed
    let mut env: Value = serde_json::from_slice(&cp).unwrap();
    env["state"]["pipeline"]["partitions"] = json!(["p1", "p0"]);
    env["digest"] = json!(digest_of(&env["state"]));
    let as_listed = serde_json::to_vec(&env).unwrap();
    assert_eq!(
        Processor::restore(&as_listed, &other)
            .unwrap()
            .checkpoint()
            .unwrap(),
        cp
    );
    // and the same for version 1 envelopes
    for v1 in [as_v1(&cp), as_v1(&as_listed), as_v1(&unsorted)] {
        let back = Processor::restore(&v1, &other).unwrap();
        assert_eq!(back.checkpoint().unwrap(), cp);
    }
}

/// Parsing forgets how a string was spelled: `\u001F` and `\u001f` hash
/// alike. Flipping the case of such a hex digit is still one flipped byte,
/// and restore refuses it.
#[test]
fn a_flipped_case_in_a_strings_escape_is_rejected() {
    let mut p = Processor::new(pipeline(CHECKPOINT_PIPELINE));
    p.ingest(vec![d("p0", 0, "i\u{1f}", "k\u{1f}", 1, 5)])
        .unwrap();
    let cp = p.checkpoint().unwrap();
    Processor::restore(&cp, &pipeline(CHECKPOINT_PIPELINE)).unwrap();
    let escapes: Vec<usize> = cp
        .windows(6)
        .enumerate()
        .filter(|(_, w)| *w == br"\u001f")
        .map(|(i, _)| i + 5)
        .collect();
    assert!(escapes.len() >= 2, "{}", String::from_utf8_lossy(&cp));
    for at in escapes {
        let mut flipped = cp.clone();
        flipped[at] ^= 0x20;
        let m = rejected(&flipped);
        assert!(m.contains("not canonical"), "{m}");
    }
}

#[test]
fn broken_envelopes_are_rejected() {
    let p = checkpoint_scenario();
    let cp = p.checkpoint().unwrap();
    let mut flipped = cp.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x01;
    let m = rejected(&flipped);
    assert!(m.contains("digest") || m.contains("malformed"), "{m}");
    assert!(rejected(&cp[..cp.len() - 3]).contains("malformed"));
    assert!(rejected(b"").contains("malformed"));
    assert!(rejected(b"not json").contains("malformed"));
    let mut env: Value = serde_json::from_slice(&cp).unwrap();
    for v in [3, 0] {
        env["version"] = json!(v);
        let m = rejected(&serde_json::to_vec(&env).unwrap());
        assert_eq!(
            m,
            format!("unsupported checkpoint version {v} (versions 2 and 1 are known)")
        );
    }
    env["version"] = json!(2.0);
    assert!(rejected(&serde_json::to_vec(&env).unwrap()).contains("malformed"));
    env["version"] = json!("2");
    assert!(rejected(&serde_json::to_vec(&env).unwrap()).contains("malformed"));
    // a version 1 envelope with a digest, a version 2 one with a sha256
    env["version"] = json!(1);
    let m = rejected(&serde_json::to_vec(&env).unwrap());
    assert!(m.contains("unknown field `digest`"), "{m}");
    let digest = env["digest"].clone();
    env["version"] = json!(2);
    env["sha256"] = digest.clone();
    let m = rejected(&serde_json::to_vec(&env).unwrap());
    assert!(m.contains("unknown field `sha256`"), "{m}");
    env.as_object_mut().unwrap().remove("digest");
    let m = rejected(&serde_json::to_vec(&env).unwrap());
    assert!(m.contains("unknown field `sha256`"), "{m}");
    env.as_object_mut().unwrap().remove("sha256");
    let m = rejected(&serde_json::to_vec(&env).unwrap());
    assert!(m.contains("missing field `digest`"), "{m}");
    env["digest"] = digest.clone();
    // a present key is not an absent one, even when null
    env["sha256"] = Value::Null;
    let m = rejected(&serde_json::to_vec(&env).unwrap());
    assert!(m.contains("malformed"), "{m}");
    env.as_object_mut().unwrap().remove("sha256");
    env["digest"] = Value::Null;
    let m = rejected(&serde_json::to_vec(&env).unwrap());
    assert!(m.contains("malformed"), "{m}");
    env["digest"] = digest;
    env["format"] = json!("other");
    assert!(rejected(&serde_json::to_vec(&env).unwrap()).contains("format"));
    env["format"] = json!("streamforge-checkpoint");
    env["digest"] = json!("00");
    assert!(rejected(&serde_json::to_vec(&env).unwrap()).starts_with("digest mismatch"));
    // version 1: the checksum
    let mut v1: Value = serde_json::from_slice(&as_v1(&cp)).unwrap();
    assert!(Processor::restore(&as_v1(&cp), p.pipeline()).is_ok());
    v1["sha256"] = json!("00");
    assert!(rejected(&serde_json::to_vec(&v1).unwrap()).starts_with("checksum mismatch"));
    v1.as_object_mut().unwrap().remove("sha256");
    let m = rejected(&serde_json::to_vec(&v1).unwrap());
    assert!(m.contains("missing field `sha256`"), "{m}");
    let mut env: Value = serde_json::from_slice(&cp).unwrap();
    env["extra"] = json!(1);
    assert!(rejected(&serde_json::to_vec(&env).unwrap()).contains("unknown field"));
    let other = Pipeline::from_json(
        br#"{"partitions":["p0","p1"],"windows":{"f":{"kind":"fixed","size":10}},"lateness":5}"#,
    )
    .unwrap();
    let e = Processor::restore(&cp, &other).unwrap_err();
    assert!(e.detail().contains("incompatible pipeline"), "{e}");
    assert_eq!(
        p.checkpoint().unwrap(),
        cp,
        "the source processor is untouched"
    );
}

#[test]
fn duplicate_keys_are_rejected() {
    let cp = String::from_utf8(checkpoint_scenario().checkpoint().unwrap()).unwrap();
    // duplicate a partition in clock.partitions, keeping the checksum honest is
    // impossible for a duplicate, so both checks must name the problem
    let dup = cp.replacen(
        r#""partitions":{"p0":"#,
        r#""partitions":{"p1":{"idle":false,"progress":11},"p0":"#,
        1,
    );
    assert!(rejected(dup.as_bytes()).contains("duplicate"));
}

/// Each restore validation rule, on a hand-made state with a correct checksum.
#[test]
fn every_restore_rule_names_what_is_wrong() {
    let cp = checkpoint_scenario().checkpoint().unwrap();
    let state: Value = serde_json::from_slice::<Value>(&cp).unwrap()["state"].clone();
    let windows = state["windows"].as_array().unwrap().clone();
    let idx = |w: &str, s: i64| {
        windows
            .iter()
            .position(|r| r["window"] == json!(w) && r["start"] == json!(s))
            .unwrap_or_else(|| panic!("no {w} {s} in {windows:?}"))
    };
    let fixed0 = idx("f", 0);
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("unknown field", Box::new(|s| s["clock"]["x"] = json!(1))),
        (
            "missing field",
            Box::new(|s| {
                s["clock"].as_object_mut().unwrap().remove("watermark");
            }),
        ),
        (
            "invalid type",
            Box::new(|s| s["changelog"]["sequence"] = json!(1.5)),
        ),
        (
            "invalid type",
            Box::new(|s| s["clock"]["watermark"] = json!(true)),
        ),
        (
            "state.pipeline",
            Box::new(|s| s["pipeline"]["lateness"] = json!(-1)),
        ),
        (
            "clock.partitions must name",
            Box::new(|s| {
                s["clock"]["partitions"]
                    .as_object_mut()
                    .unwrap()
                    .remove("p1");
            }),
        ),
        (
            "sources must name",
            Box::new(|s| {
                s["sources"]["p9"] = json!([]);
            }),
        ),
        (
            "two different identities",
            Box::new(|s| s["sources"]["p1"][1] = json!(["a", "k", 1, 6])),
        ),
        ("empty", Box::new(|s| s["sources"]["p1"][0][0] = json!(""))),
        (
            "clock.max_timestamp",
            Box::new(|s| s["clock"]["max_timestamp"] = json!(99)),
        ),
        (
            "below the minimum progress",
            Box::new(|s| s["clock"]["watermark"] = json!(10)),
        ),
        (
            "clock.watermark is null",
            Box::new(|s| s["clock"]["watermark"] = Value::Null),
        ),
        (
            "exceeds the largest reported progress",
            Box::new(|s| {
                s["clock"]["partitions"]["p0"]["idle"] = json!(true);
                s["clock"]["partitions"]["p1"]["idle"] = json!(true);
                s["clock"]["watermark"] = json!(21);
            }),
        ),
        (
            "no partition has reported",
            Box::new(|s| {
                s["clock"]["partitions"]["p0"] = json!({"idle": true, "progress": null});
                s["clock"]["partitions"]["p1"] = json!({"idle": true, "progress": null});
            }),
        ),
        (
            "count 0 must be >= 1",
            Box::new(move |s| s["windows"][fixed0]["count"] = json!(0)),
        ),
        (
            "min",
            Box::new(move |s| {
                s["windows"][fixed0]["min"] = json!(100);
            }),
        ),
        (
            "sum",
            Box::new(move |s| s["windows"][fixed0]["sum"] = json!(1000)),
        ),
        (
            "single-event",
            Box::new(|s| {
                // scenario's stream-time bucket [10,20) holds one event
                let w = s["windows"].as_array_mut().unwrap();
                let i = w
                    .iter()
                    .position(|r| r["window"] == json!("st") && r["count"] == json!(1))
                    .unwrap();
                w[i]["max"] = json!(50);
                w[i]["sum"] = json!(50);
            }),
        ),
        (
            "window alignment",
            Box::new(move |s| {
                s["windows"][fixed0]["end"] = json!(11);
            }),
        ),
        (
            "window alignment",
            Box::new(|s| {
                let w = s["windows"].as_array_mut().unwrap();
                let i = w.iter().position(|r| r["window"] == json!("h")).unwrap();
                w[i]["start"] = json!(w[i]["start"].as_i64().unwrap() + 1);
                w[i]["end"] = json!(w[i]["end"].as_i64().unwrap() + 1);
            }),
        ),
        (
            "session bounds",
            Box::new(|s| {
                let w = s["windows"].as_array_mut().unwrap();
                let i = w.iter().position(|r| r["window"] == json!("s")).unwrap();
                w[i]["end"] = json!(w[i]["start"].as_i64().unwrap() + 4);
            }),
        ),
        (
            "intersect or touch",
            Box::new(|s| {
                let w = s["windows"].as_array_mut().unwrap();
                w.push(json!({"count":1,"end":105,"key":"zz","max":1,"min":1,"start":100,"sum":1,"window":"s"}));
                w.push(json!({"count":1,"end":110,"key":"zz","max":1,"min":1,"start":105,"sum":1,"window":"s"}));
                w.sort_by(|a, b| {
                    (a["window"].as_str(), a["key"].as_str(), a["start"].as_i64()).cmp(&(
                        b["window"].as_str(),
                        b["key"].as_str(),
                        b["start"].as_i64(),
                    ))
                });
            }),
        ),
        (
            "should have been finalized",
            Box::new(|s| {
                let w = s["windows"].as_array_mut().unwrap();
                w.insert(0, json!({"count":1,"end":0,"key":"a","max":1,"min":1,"start":-10,"sum":1,"window":"f"}));
            }),
        ),
        (
            "strictly increasing",
            Box::new(move |s| {
                let w = s["windows"].as_array_mut().unwrap();
                let r = w[fixed0].clone();
                w.insert(fixed0, r);
            }),
        ),
        (
            "strictly increasing",
            Box::new(|s| s["windows"].as_array_mut().unwrap().reverse()),
        ),
        (
            "unknown window",
            Box::new(|s| {
                s["windows"].as_array_mut().unwrap().push(json!({"count":1,"end":10,"key":"k","max":1,"min":1,"start":0,"sum":1,"window":"zzz"}));
            }),
        ),
        (
            "not a live bucket",
            Box::new(|s| {
                s["changelog"]["visible"].as_array_mut().unwrap().insert(0, json!({"count":1,"end":10,"key":"a","max":1,"min":1,"start":0,"sum":1,"window":"f"}));
            }),
        ),
        (
            "differs",
            Box::new(|s| {
                let v = s["changelog"]["visible"].as_array_mut().unwrap();
                v[0]["count"] = json!(v[0]["count"].as_u64().unwrap() + 1);
                v[0]["sum"] = json!(v[0]["sum"].as_i64().unwrap() + v[0]["max"].as_i64().unwrap());
            }),
        ),
        (
            "not ready",
            Box::new(|s| {
                let w = s["windows"].as_array().unwrap().clone();
                let r = w
                    .iter()
                    .find(|r| r["end"].as_i64().unwrap() > 11)
                    .unwrap()
                    .clone();
                let v = s["changelog"]["visible"].as_array_mut().unwrap();
                v.push(r);
                v.sort_by(|a, b| {
                    (a["window"].as_str(), a["key"].as_str(), a["start"].as_i64()).cmp(&(
                        b["window"].as_str(),
                        b["key"].as_str(),
                        b["start"].as_i64(),
                    ))
                });
            }),
        ),
        (
            "sequence",
            Box::new(|s| s["changelog"]["sequence"] = json!(0)),
        ),
        (
            "not a delivered event",
            Box::new(|s| s["late"][0][0] = json!(["late", "k", 2, 2])),
        ),
        (
            "exceeds the global watermark",
            Box::new(|s| s["late"][0][1] = json!(12)),
        ),
    ];
    for (needle, f) in cases {
        let mut st = state.clone();
        f(&mut st);
        let bytes = mutate(&cp, |s| *s = st);
        let m = rejected(&bytes);
        assert!(m.contains(needle), "expected {needle:?} in {m:?}");
    }
}

#[test]
fn restored_ready_rows_that_were_not_visible_are_upserted_next() {
    let p = checkpoint_scenario();
    let cp = p.checkpoint().unwrap();
    let bytes = mutate(&cp, |s| {
        let v = s["changelog"]["visible"].as_array_mut().unwrap();
        v.remove(0);
    });
    let mut q = Processor::restore(&bytes, p.pipeline()).unwrap();
    let before = q.results(None, None).len();
    assert_eq!(before + 1, p.results(None, None).len());
    let out = q
        .ingest(vec![
            d("p0", 4, "dup", "k", 100, 1),
            d("p0", 5, "dup", "k", 100, 1),
        ])
        .unwrap();
    assert_eq!(
        out.changes.len(),
        1,
        "the hidden row is upserted by the next reconciliation"
    );
    assert_eq!(q.results(None, None), p.results(None, None));
}

/// Bounds at the ends of i128 (which no i64 input can produce) are rejected
/// instead of overflowing later arithmetic.
#[test]
fn extreme_i128_bounds_are_rejected_without_overflow() {
    let cp = String::from_utf8(checkpoint_scenario().checkpoint().unwrap()).unwrap();
    let env: Value = serde_json::from_str(&cp).unwrap();
    let state = serde_json::to_string(&env["state"]).unwrap();
    let row = r#"{"count":1,"end":170141183460469231731687303715884105727,"key":"zz","max":1,"min":1,"start":-170141183460469231731687303715884105728,"sum":1,"window":"f"}"#;
    let state = state.replacen(r#""windows":["#, &format!(r#""windows":[{row},"#), 1);
    let state = state.replacen(r#""key":"zz""#, r#""key":"""#, 1);
    let envelope = format!(
        r#"{{"format":"streamforge-checkpoint","sha256":"{}","state":{state},"version":1}}"#,
        sha_hex(state.as_bytes())
    );
    let m = rejected(envelope.as_bytes());
    assert!(m.contains("out of range"), "{m}");
}
